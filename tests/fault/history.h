/* history.h -- the history recorder and checker of the fault suite.
 *
 * Workers (separate processes) append fixed-size records to one shared file
 * (O_APPEND, one write(2) per record, so records never interleave): every
 * acquire attempt, grant (with the fencing token where the lock has one and
 * the holder's valid-until), critical-section entry and exit, release and
 * lock-lost notification, stamped with CLOCK_MONOTONIC (one machine, one
 * clock). The checker then verifies the property of the lock type:
 *
 *   HIST_MUTEX        no two critical sections of one lock overlap;
 *   HIST_MUTEX_LEASE  the same, except the overlaps a lease-based lock cannot
 *                     prevent: B entered at or after the valid-until of the
 *                     stale holder A (its lease had run out: SIGSTOP, GC
 *                     pause) AND A was told (a HK_LOST record of A for that
 *                     lock). Such overlaps are reported as "permitted";
 *                     every other overlap is a violation;
 *   HIST_RW           read/write rules: as HIST_MUTEX_LEASE, except that two
 *                     shared sections (readers: HK_ENTER status 1) may
 *                     overlap; a writer's section overlaps nothing;
 *   HIST_PERMITS      semaphores: every section holds one permit; when a
 *                     section enters, fewer than opts.permits others may be
 *                     inside, except sections whose lease ran out before the
 *                     newcomer's grant and whose holder was told (as in
 *                     HIST_MUTEX_LEASE): a permit is never counted twice;
 *   HIST_FIFO         fair locks: HIST_MUTEX_LEASE, and the order of grants.
 *                     B overtook A when A's attempt began at least
 *                     opts.fifo_slack_ns before B's and B was granted at
 *                     least that long before A's attempt ended (A still
 *                     waiting: not granted, not failed, not dead). The slack
 *                     covers what the history cannot see: when an attempt's
 *                     script reached the server and queued it, and when a
 *                     give-up's undo left the queue before its HK_FAIL. A
 *                     waiter that timed out (HK_FAIL) or died (HK_DIED)
 *                     leaves the queue: its attempt ends there. Overtakes
 *                     whose B was granted inside one of opts.excuse's
 *                     windows (a fault the test names), and those of an A
 *                     that failed with every answer lost (RLOCK_ETIMEDOUT,
 *                     ECONNLOST, ECONNECT: its tries may never have reached
 *                     the server, so it may never have been queued), are
 *                     counted apart (rep->overtakes_excused), never as
 *                     violations.
 */
#ifndef RLOCK_FAULT_HISTORY_H
#define RLOCK_FAULT_HISTORY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum hist_kind {
  HK_ATTEMPT = 1, /* about to call acquire */
  HK_GRANT,       /* acquire returned 0: valid_until_ns, token; status 1: its client had a
                     request time out or a connection replaced meanwhile (HIST_FIFO excuses
                     overtakes of such an attempt: its tries may have reached the server late) */
  HK_ENTER,       /* critical section entered (status 1: a shared one, a reader's) */
  HK_EXIT,        /* critical section left (status 1: the holder knew its hold was stale) */
  HK_RELEASE,     /* release returned (status = its rc) */
  HK_LOST,        /* the lock-lost callback ran for this lock (status = its rlock_lost_reason_t) */
  HK_FAIL,        /* acquire failed (status = rc) */
  HK_VALID,       /* the holder re-read its valid-until (after renewals) */
  HK_DIED,        /* written by the parent after reaping a killed worker */
  HK_MAX
} hist_kind_t;

#define HIST_NAME_MAX 72

/* One record: 128 bytes, written with a single write(2). */
typedef struct hist_rec {
  uint32_t magic;         /* HIST_MAGIC */
  uint16_t kind;          /* hist_kind_t */
  uint16_t worker;        /* worker id (HK_DIED: the dead worker) */
  uint32_t seq;           /* per-writer sequence number */
  int32_t status;         /* rc of the call / flags (see kinds) */
  int64_t t_ns;           /* CLOCK_MONOTONIC */
  int64_t valid_until_ns; /* HK_GRANT / HK_VALID: the holder's valid-until; 0 unknown */
  uint64_t token;         /* fencing token, 0 = none */
  uint16_t name_len;      /* bytes of name used (longer names are cut) */
  char name[HIST_NAME_MAX];
  char pad[128 - 4 - 2 - 2 - 4 - 4 - 8 - 8 - 8 - 2 - HIST_NAME_MAX];
} hist_rec_t;
#define HIST_MAGIC 0x524c4852u /* "RHLR" */

int64_t hist_now_ns(void);
const char *hist_kind_name(int kind);

/* ---- writing (any process, any thread; async-signal-safe except the open) */
/* Creates (truncates) the history file; returns 0 or -1. */
int hist_create(const char *path);
/* Opens path for appending; returns an fd (O_APPEND|O_CLOEXEC) or -1. */
int hist_open(const char *path);
/* Appends one record stamped now. Returns 0 or -1 (short write). */
int hist_log(int fd, int kind, int worker, const void *name, size_t name_len, int status, int64_t valid_until_ns,
             uint64_t token);
/* Appends a record with an explicit time stamp. */
int hist_log_at(int fd, int64_t t_ns, int kind, int worker, const void *name, size_t name_len, int status,
                int64_t valid_until_ns, uint64_t token);

/* ---- checking */
typedef enum hist_mode {
  HIST_MUTEX = 1,
  HIST_MUTEX_LEASE,
  HIST_FIFO,   /* fair lock: HIST_MUTEX_LEASE + the order of grants */
  HIST_RW,     /* read-write lock: shared sections may overlap each other */
  HIST_PERMITS /* semaphores: at most opts.permits holders at once */
} hist_mode_t;

/* Checker verdicts. */
#define HIST_OK 0
#define HIST_VIOLATION 1 /* the property does not hold (see the report) */
#define HIST_NOTYET 2    /* this mode is not implemented yet: nothing was checked */
#define HIST_BADHIST 3   /* the history itself is malformed (I/O, magic, sequence) */
/* A history is malformed (rep->msg names the first bad record) when:
 *   - a record has a bad magic, kind or name length, or the file is cut;
 *   - one writer (a worker's records other than HK_DIED) uses a sequence
 *     number twice, or its time stamps go back in sequence order (HK_LOST,
 *     written by the worker's I/O thread, is exempt from the time order);
 *   - a worker's records on one lock break the order
 *       attempt -> (fail | grant -> enter -> exit -> release) -> attempt ...
 *     (no grant without an attempt, no enter without a grant, no exit without
 *     an enter, no release inside the section or without an exit, no second
 *     attempt before the first one ended, no fail with status 0); valid and
 *     lost records may come at any point;
 *   - a worker has a record after its HK_DIED (or dies twice). */

typedef struct hist_check_opts {
  hist_mode_t mode;
  int permits; /* HIST_PERMITS: the bound (at least 1) */
  /* HIST_FIFO: the slack (0: HIST_FIFO_SLACK_NS) and the excused windows,
   * nexcuse pairs [from_ns, to_ns] in excuse[2 * i], excuse[2 * i + 1]. */
  int64_t fifo_slack_ns;
  const int64_t *excuse;
  size_t nexcuse;
} hist_check_opts_t;
#define HIST_FIFO_SLACK_NS (100 * 1000000LL)

/* One critical section: [enter, exit) of worker on a lock. exit_ns is the
 * HK_EXIT stamp, or the HK_DIED stamp of a killed worker, or INT64_MAX when
 * the history ends inside the section. */
typedef struct hist_section {
  int worker;
  char name[HIST_NAME_MAX + 1];
  size_t name_len;
  int64_t grant_ns, enter_ns, exit_ns;
  int64_t valid_until_ns; /* the latest valid-until the holder reported for this hold */
  int64_t lost_ns;        /* first HK_LOST of this worker+lock after the grant; 0 none */
  uint64_t token;
  int died, stale_exit;
  int shared; /* a reader's section (HK_ENTER status 1) */
} hist_section_t;

typedef struct hist_overlap {
  hist_section_t a, b; /* a entered first */
  int64_t from_ns, to_ns;
  int permitted; /* HIST_MUTEX_LEASE: the model allows it (b after a's lease, a told) */
  char why[160];
} hist_overlap_t;

typedef struct hist_report {
  int verdict; /* HIST_OK / HIST_VIOLATION / HIST_NOTYET / HIST_BADHIST */
  size_t records, sections, locks, workers;
  size_t overlaps, permitted, violations;
  size_t lost, died, grants, fails;
  hist_overlap_t *list; /* every overlap found (permitted ones too) */
  size_t nlist;
  char msg[512]; /* human summary / first problem */
  /* HIST_FIFO: grants that overtook a waiter (violations), those excused by
   * a window (not violations), and the first overtake's description */
  size_t overtakes, overtakes_excused;
  char first_overtake[240];
} hist_report_t;

/* Checks an in-memory history (records in any order: they are sorted by
 * time). Fills *rep (free with hist_report_free); returns rep->verdict. */
int hist_check(const hist_rec_t *recs, size_t n, const hist_check_opts_t *opts, hist_report_t *rep);
/* Reads and checks a history file. */
int hist_check_file(const char *path, const hist_check_opts_t *opts, hist_report_t *rep);
/* The count-down latch (issue 25): it never opens early. Checks the history
 * file (a well-formed history, as hist_check) where workers count the latch
 * down under the name `down` (one attempt per count_down call) and await it
 * under the name `opened` (a grant: await returned open). A violation: an
 * await returned open before `count` count-down calls had begun (one
 * count-down counted twice). rep: sections = count-down attempts, grants =
 * opens, violations = early opens; rep->msg says the earliest. */
int hist_check_latch(const char *path, const char *down, const char *opened, int count, hist_report_t *rep);
void hist_report_print(FILE *f, const hist_report_t *rep);
void hist_report_free(hist_report_t *rep);

#endif
