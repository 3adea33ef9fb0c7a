/* fault_harness.h -- what the fault-injection tests share on top of
 * tests/harness.h: the tables that make the suite grow by rows (deployments
 * x lock kinds), worker processes that run a lock loop and record a history
 * (history.h), the parent's control of them (commands, awaited events,
 * kill -9 / SIGSTOP / SIGCONT), and a completion latch for async calls.
 *
 * Adding a deployment (Sentinel, Cluster, RedLock) = one more fh_deploy_t row
 * (start / url / restart / stop); adding a lock type (fenced, fair, rw,
 * semaphore) = one more fh_kind_t row (acquire / release / checker mode).
 * The fault scenarios iterate over the rows and need no change. */
#ifndef RLOCK_FAULT_HARNESS_H
#define RLOCK_FAULT_HARNESS_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "harness.h"
#include "history.h"

/* ------------------------------------------------------------ deployments */

typedef struct fh_deploy_opts {
  int appendonly;                /* AOF with appendfsync always */
  const char *const *extra_args; /* extra redis-server arguments */
} fh_deploy_opts_t;

typedef struct fh_deploy fh_deploy_t;
struct fh_deploy {
  const char *name; /* "single", later "sentinel", "cluster", "redlock" */
  /* Starts the deployment; returns an opaque handle. */
  void *(*start)(const fh_deploy_opts_t *o);
  /* The URL clients use (one node for now). */
  const char *(*url)(void *d);
  /* kill -9 every data node and start it again on the same ports. */
  void (*restart)(void *d);
  void (*stop)(void *d);
  /* The raw server for state checks (HGET...), where it is one server. */
  th_server_t *(*raw)(void *d);
};

extern const fh_deploy_t fh_deploy_single;
/* Every deployment the suite runs against (NULL-terminated). */
extern const fh_deploy_t *const fh_deployments[];

/* ------------------------------------------------------------ lock kinds */

typedef struct fh_worker_ctx fh_worker_ctx_t;

typedef struct fh_kind {
  const char *name;                /* "reentrant", later "fenced", "fair", "read", "write", "semaphore" */
  hist_mode_t mode;                /* the checker mode its histories are checked in (with leases) */
  int (*open)(fh_worker_ctx_t *w); /* makes w->lock (and whatever else it needs) */
  /* Acquires; on 0 fills *valid_until_ms (0 unknown) and *token (0 none). */
  int (*acquire)(fh_worker_ctx_t *w, int64_t wait_ms, int64_t lease_ms, int64_t *valid_until_ms, uint64_t *token);
  int (*valid_until)(fh_worker_ctx_t *w, int64_t *out_ms);
  int (*release)(fh_worker_ctx_t *w);
  void (*close)(fh_worker_ctx_t *w);
  const char *channel; /* where its waiters listen: "<channel>:{NAME}" (fair: and ":<owner>") */
  int shared;          /* 1: its holders share the lock (readers): HK_ENTER status 1 */
} fh_kind_t;

extern const fh_kind_t fh_kind_reentrant;
extern const fh_kind_t fh_kind_simple;       /* rlock_lock_new_simple */
extern const fh_kind_t fh_kind_fair;         /* rlock_lock_new_fair (its waiters: "<channel>:{NAME}:<owner>") */
extern const fh_kind_t fh_kind_nonreentrant; /* rlock_lock_new_nonreentrant */
extern const fh_kind_t fh_kind_fenced;       /* rlock_lock_new_fenced (the token in the history) */
extern const fh_kind_t fh_kind_write;        /* rlock_rwlock_new's write lock */
extern const fh_kind_t fh_kind_read;         /* its read lock (shared: not in fh_kinds[]) */
extern const fh_kind_t *const fh_kinds[];

/* ------------------------------------------------------------ workers */

/* Parent -> worker command bytes. */
#define FH_CMD_EXIT 'x'  /* leave the critical section (hold_ms < 0) */
#define FH_CMD_VALID 'v' /* log HK_VALID with the current valid-until, answer FH_EV */
#define FH_CMD_QUIT 'q'  /* stop before the next attempt */
#define FH_CMD_GO 'g'    /* a gated worker (fh_spawn_gated) may start */

typedef struct fh_worker_spec {
  const char *url;
  const fh_kind_t *kind;
  const char *lock_name;
  int64_t lease_ms;           /* RLOCK_LEASE_WATCHDOG or a fixed lease */
  int64_t watchdog_ms;        /* 0: library default */
  int64_t command_timeout_ms; /* 0: library default */
  int64_t reconnect_max_ms;   /* 0: library default */
  int64_t wait_ms;            /* per acquire: RLOCK_WAIT_FOREVER or a bound */
  int64_t hold_ms;            /* time inside; < 0: until the parent sends FH_CMD_EXIT */
  int iterations;             /* 0: until FH_CMD_QUIT */
  int no_fast_path;           /* 1: fast_path = 0 (each client keeps 2 connections: command, subscriber) */
  int permits;                /* semaphores: the bound the parent set (fh_family_set); 0 for locks */
} fh_worker_spec_t;

/* A worker -> parent event (one atomic pipe write). */
typedef struct fh_event {
  int16_t worker;
  int16_t kind; /* hist_kind_t; HK_MAX = the worker ended its loop */
  int32_t rc;
  int64_t t_ns;
  int64_t value; /* HK_VALID: valid-until ms */
} fh_event_t;

#define FH_MAX_WORKERS 32

typedef struct fh_pool {
  char hist_path[300];
  int hist_fd;      /* parent's own append fd (HK_DIED records) */
  int ev_rd, ev_wr; /* event pipe */
  int nworkers;
  struct {
    pid_t pid;
    int ctl; /* write end of its control pipe */
    int alive, stopped;
  } w[FH_MAX_WORKERS];
  size_t events_seen;
} fh_pool_t;

/* Inside a worker process. */
struct fh_worker_ctx {
  int id;
  const fh_worker_spec_t *spec;
  rlock_client_t *client;
  rlock_lock_t *lock;
  void *extra; /* lock kinds with more state */
  int hist_fd, ev_fd, ctl_fd;
};

/* A pool with a fresh history file in a temp dir. No thread or client may
 * exist in the parent when workers are spawned (fork). */
void fh_pool_init(fh_pool_t *p);
/* Forks worker `id` (its index) running spec; returns the id. */
int fh_spawn(fh_pool_t *p, const fh_worker_spec_t *spec);
/* The same, but the worker closes every descriptor it inherited except its
 * own pipes, then waits for FH_CMD_GO (fh_send) before it makes its client.
 * For pools behind a fault proxy: fork while no thread runs (fp_listen),
 * start the proxy (fp_run), then let the workers go. */
int fh_spawn_gated(fh_pool_t *p, const fh_worker_spec_t *spec);
void fh_send(fh_pool_t *p, int id, char cmd);
/* Waits (bounded) for an event of worker id (-1: any) and kind; events that
 * do not match are consumed. Fails the test on timeout. */
fh_event_t fh_await(fh_pool_t *p, int id, int kind, int64_t timeout_ms);
/* The same, for an event stamped after since_ns (older matches are consumed). */
fh_event_t fh_await_since(fh_pool_t *p, int id, int kind, int64_t since_ns, int64_t timeout_ms);
/* Non-blocking: 1 and *ev if an event of (id, kind) is already queued. */
int fh_poll_event(fh_pool_t *p, int id, int kind, fh_event_t *ev);
/* kill -9 a worker, reap it and record HK_DIED at the reaping time. */
void fh_kill9(fh_pool_t *p, int id);
void fh_stop(fh_pool_t *p, int id); /* SIGSTOP */
void fh_cont(fh_pool_t *p, int id); /* SIGCONT */
/* Sends quit (and exit, in case it is inside), then reaps every live worker
 * (bounded); fails the test if a worker does not exit 0. */
void fh_pool_finish(fh_pool_t *p, int64_t timeout_ms);
/* Checks the pool's history; prints the report; returns the verdict. */
int fh_check(fh_pool_t *p, hist_mode_t mode, hist_report_t *rep);
/* The same with every option (HIST_FIFO: its slack and excused windows). */
int fh_check_opts(fh_pool_t *p, const hist_check_opts_t *o, hist_report_t *rep);

/* ------------------------------------------------------------ failovers
 * What the Sentinel and Cluster history tests (test_sentinel_history.c,
 * test_cluster_history.c) share: counting progress without consuming
 * events, the holder at a fault, and the violations split by a window. */

/* Reads every event already queued (the pipe must not fill up while the
 * parent waits on something else: a worker would block inside its loop). */
void fh_drain(fh_pool_t *p);
/* Events of worker id (-1: any) and kind stamped after since_ns, read so far
 * (drains first; consumes nothing). */
size_t fh_count_events(fh_pool_t *p, int id, int kind, int64_t since_ns);
/* Parent-driven loops (workers with hold_ms -1): every worker that enters
 * is told to leave at once (FH_CMD_EXIT), except worker keep (-1: none),
 * until pred(arg) holds (checked at least every 50 ms); 0 after timeout_ms. */
int fh_drive(fh_pool_t *p, int keep, int (*pred)(void *), void *arg, int64_t timeout_ms);
/* The same until a worker whose bit is set in mask enters: that one is
 * kept inside (not told to leave); returns its id. Fails after timeout_ms. */
int fh_drive_until_enter(fh_pool_t *p, uint32_t mask, int64_t timeout_ms);
/* Keeps worker w inside (the others driven as by fh_drive) until its hold
 * was renewed past after_ms (its valid-until, asked every 200 ms, lies
 * beyond it) or it was told the hold is lost (HK_LOST, or valid-until
 * answers an error); then tells it to leave. 1 renewed, 0 lost; fails
 * after timeout_ms. */
int fh_hold_through(fh_pool_t *p, int w, int64_t after_ms, int64_t timeout_ms);
/* The worker inside its critical section on name at t_ns in the pool's
 * history (entered before t_ns, not left or dead before it); -1: none. */
int fh_holder_at(const fh_pool_t *p, const char *name, int64_t t_ns);
/* The violations of rep (overlaps not permitted) that the failover hazard
 * can explain (*inside): the hold kept across the fault (worker holder's
 * section) overlapped by a section granted inside [from_ns, to_ns]; every
 * other violation (*outside): granted outside the window, or between two
 * sections neither of which is the holder's (the hazard of a hold the
 * promoted node lacked explains no overlap of two later grants). */
void fh_violations_split(const hist_report_t *rep, int holder, int64_t from_ns, int64_t to_ns, size_t *inside,
                         size_t *outside);
/* A deliberately broken kind that takes no lock at all (every acquire
 * "succeeds"): a mutation run (FH_MUTATE=nolock) shows a history test on a
 * deployment fails when mutual exclusion is gone. */
extern const fh_kind_t fh_kind_nolock;
/* fh_kind_nolock if $FH_MUTATE is "nolock", else the kind of fh_kinds[] named
 * $FH_KIND (e.g. fair), else k. FH_MUTATE=unfair with FH_KIND=fair: the
 * reentrant lock (no queue), still checked as the fair row (fh_fifo_row). */
const fh_kind_t *fh_kind_or_mutant(const fh_kind_t *k);
/* 1 if $FH_KIND is "fair": the history is checked in HIST_FIFO too. */
int fh_fifo_row(void);

/* ------------------------------------------------------------ the family's other objects
 * Semaphores and the count-down latch as worker kinds (issue 25). Their
 * sections are permits (HIST_PERMITS, the bound in spec.permits); a latch
 * worker's "section" is one count-down (fh_kind_latch_down) or one await
 * that returned open (fh_kind_latch_await), its name "<latch>:<anything>"
 * (the kind opens the latch named by what comes before the last ':'), so
 * the history tells count-downs and opens apart (hist_check_latch). Not in
 * fh_kinds[] (the mutex scenarios); fh_kind_or_mutant finds them by name. */
extern const fh_kind_t fh_kind_semaphore;   /* rlock_semaphore_*: one permit per section */
extern const fh_kind_t fh_kind_pes;         /* rlock_permits_*: one permit per section, with its lease */
extern const fh_kind_t fh_kind_latch_down;  /* rlock_latch_count_down */
extern const fh_kind_t fh_kind_latch_await; /* rlock_latch_await */
extern const fh_kind_t *const fh_kinds_family[];
/* 1 if k is the plain semaphore (or its mutant: FH_MUTATE=release2). */
int fh_kind_is_semaphore(const fh_kind_t *k);
/* In the parent, before any fork (a short-lived client): sets the object of
 * kind k named name (a latch: the name before the last ':') to n permits or
 * a count of n; fails the test unless it was new or has that count
 * already (left so by an earlier test). */
void fh_family_set(const char *url, const fh_kind_t *k, const char *name, int64_t n);
/* The same object's free permits (semaphore: available; permit-expirable:
 * available, and *taken (may be NULL) the permits held) or a latch's count. */
int64_t fh_family_count(const char *url, const fh_kind_t *k, const char *name, int64_t *taken);
/* Checks the pool's history in HIST_PERMITS with that bound; prints the report. */
int fh_check_permits(fh_pool_t *p, int permits, hist_report_t *rep);
/* fh_drive (keep as there) until n HK_ENTER events stamped after since_ns
 * were read; fails the test after timeout_ms, naming when. */
void fh_drive_entries(fh_pool_t *p, int keep, size_t n, int64_t since_ns, int64_t timeout_ms, const char *when);

/* ------------------------------------------------------------ async completion */

typedef struct fh_latch {
  pthread_mutex_t mu;
  pthread_cond_t cond;
  int done, status;
  int64_t value;
} fh_latch_t;
void fh_latch_init(fh_latch_t *l);
void fh_latch_destroy(fh_latch_t *l);
/* An rlock_cb that completes the latch passed as arg. */
void fh_latch_cb(rlock_lock_t *lock, int status, int64_t value, void *arg);
/* Waits at most timeout_ms; returns 1 if completed. */
int fh_latch_wait(fh_latch_t *l, int64_t timeout_ms);

/* A client with explicit timeouts (0: library defaults). */
rlock_client_t *fh_client(const char *url, int64_t watchdog_ms, int64_t command_timeout_ms, int retry_attempts);

/* Prints one machine-readable result line for docs/guarantees.md:
 * "RESULT fault=<f> deployment=<d> kind=<k> outcome=<...> violations=<n>". */
void fh_result(const char *fault, const char *deploy, const char *kind, const char *outcome, size_t violations);

#endif
