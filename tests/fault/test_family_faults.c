/* test_family_faults.c -- the lock family's shared and counted objects under
 * the fault suite's faults (issues 24 and 25), with worker processes
 * recording a history that the checker verifies. Rows (objects on one name,
 * 4 worker processes, one client each):
 *   rw                2 readers + 2 writers of one read-write lock (HIST_RW:
 *                     a writer beside nobody, readers only beside readers)
 *   semaphore         4 workers on 2 permits (HIST_PERMITS 2)
 *   permit-expirable  4 workers on 2 permits with leases (HIST_PERMITS 2)
 *   fair              4 workers (proxy faults only: fault_holder and
 *                     fault_restart have its other rows)
 * Scenarios, each for every row it applies to (the parent lets a worker
 * out of its section as soon as it entered, fh_drive, except the one a
 * fault is about):
 *   kill9    kill -9 of a holder inside (watchdog 1000 ms): every other
 *            worker enters again; a leased hold frees within its lease; a
 *            plain semaphore's permit stays taken (no lease: documented);
 *   sigstop  SIGSTOP of a holder past its lease (fixed 1000 ms, watchdog
 *            1000 ms), then SIGCONT: the others go on; the stale holder is
 *            told and its release says ENOTHELD; every overlap past the
 *            bound is one the lease allows (lease ran out, holder told). A
 *            plain semaphore's stopped holder keeps its permit (the others
 *            share the other one) and releases it after SIGCONT;
 *   restart  redis-server kill -9 + restart with AOF (appendfsync always)
 *            while a holder is inside (watchdog 3000 ms): the hold is kept
 *            (renewed after the reconnect, never told lost);
 *   proxy    through the fault proxy: cut, blackhole both ways, blackhole
 *            of replies, 30 ms delay, refuse + cut, a waiter's subscriber
 *            connection and another connection dropped for good (the client
 *            must replace them), one connection held back and delivered
 *            late; progress after each; nobody told lost while inside (an
 *            unlock stuck past the lease reports the loss it finds: counted
 *            apart), no release failed;
 *   latch    a count-down latch of 12 counted down one step at a time by a
 *            worker through the proxy, each step under a fault (replies
 *            blackholed so the step is re-sent, cut, refuse, server restart
 *            with AOF, delay, connection held); 4 awaiting workers, one of
 *            them killed: no await returns before 12 count-downs began
 *            (hist_check_latch), every live one returns.
 * After each run: the history verdict, and the count on the server once
 * every worker ended: every permit back (never lost while its holder lived),
 * and never more than the bound held at once (never counted twice).
 * The fair row is checked in HIST_FIFO (the order of grants too).
 * Mutation runs (FH_MUTATE=nolock: the workers take nothing; FH_MUTATE=unfair:
 * the fair row on the reentrant lock) must fail. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault_harness.h"
#include "proxy.h"

#define NW 4
#define PERMITS 2
#define LEASE_MS 1000

typedef struct obj {
  const char *name;
  const fh_kind_t *kinds[NW]; /* worker i's kind */
  int permits;                /* HIST_PERMITS bound; 0: HIST_RW / HIST_MUTEX_LEASE by kind */
  int leased;                 /* a hold ends with its lease (watchdog): freed when its holder dies */
} obj_t;

static const obj_t o_rw = {"rw", {&fh_kind_read, &fh_kind_read, &fh_kind_write, &fh_kind_write}, 0, 1};
static const obj_t o_sem = {
    "semaphore", {&fh_kind_semaphore, &fh_kind_semaphore, &fh_kind_semaphore, &fh_kind_semaphore}, PERMITS, 0};
static const obj_t o_pes = {"permit-expirable", {&fh_kind_pes, &fh_kind_pes, &fh_kind_pes, &fh_kind_pes}, PERMITS, 1};
static const obj_t o_fair = {"fair", {&fh_kind_fair, &fh_kind_fair, &fh_kind_fair, &fh_kind_fair}, 0, 1};

static fh_worker_spec_t specs[NW];

/* 1 if $FF_OBJECT names another row (FF_OBJECT=semaphore: that row only). */
static int skip(const obj_t *o) {
  const char *only = getenv("FF_OBJECT");
  return only && strcmp(only, o->name) != 0;
}

/* The kind of worker i, or the mutant (FH_MUTATE=nolock; FH_MUTATE=unfair:
 * the fair row on the reentrant lock, still checked for FIFO). */
static const fh_kind_t *kind_of(const obj_t *o, int i) {
  const char *m = getenv("FH_MUTATE");
  if (m && strcmp(m, "unfair") == 0 && o->kinds[i] == &fh_kind_fair) return &fh_kind_reentrant;
  return m && strcmp(m, "nolock") == 0 ? &fh_kind_nolock : o->kinds[i];
}

/* Makes the object (semaphores: PERMITS permits) and the workers' specs. */
static void setup(const obj_t *o, const char *url, const char *proxy_url, const char *name, int64_t lease,
                  int64_t watchdog) {
  if (o->permits) fh_family_set(url, o->kinds[0], name, o->permits);
  for (int i = 0; i < NW; i++)
    specs[i] = (fh_worker_spec_t){.url = proxy_url ? proxy_url : url,
                                  .kind = kind_of(o, i),
                                  .lock_name = name,
                                  .lease_ms = lease,
                                  .watchdog_ms = watchdog,
                                  .command_timeout_ms = 1000,
                                  .reconnect_max_ms = 200,
                                  .wait_ms = RLOCK_WAIT_FOREVER,
                                  .hold_ms = -1,
                                  .permits = o->permits};
}

static int time_is_up(void *arg) { return rlock_now_ms() >= *(int64_t *)arg; }

/* Every live worker but skip entered after since_ns. */
typedef struct all_arg {
  fh_pool_t *p;
  int skip;
  int64_t since_ns, not_before_ms;
} all_arg_t;
static int all_entered(void *arg) {
  all_arg_t *a = arg;
  if (rlock_now_ms() < a->not_before_ms) return 0;
  for (int i = 0; i < a->p->nworkers; i++)
    if (i != a->skip && a->p->w[i].alive && fh_count_events(a->p, i, HK_ENTER, a->since_ns) == 0) return 0;
  return 1;
}
/* Drives until every live worker but skip entered after since_ns (and not
 * before not_before_ms); returns the ms it took from since_ns. */
static int64_t drive_all(fh_pool_t *p, int skip, int64_t since_ns, int64_t not_before_ms, const char *when) {
  all_arg_t a = {p, skip, since_ns, not_before_ms};
  if (!fh_drive(p, skip, all_entered, &a, 30000)) {
    for (int i = 0; i < p->nworkers; i++) /* where each worker is */
      for (int k = HK_ATTEMPT; k < HK_MAX; k++)
        if (fh_count_events(p, i, k, since_ns))
          printf("# worker %d: %zu %s since\n", i, fh_count_events(p, i, k, since_ns), hist_kind_name(k));
    FILE *f = fopen(p->hist_path, "rb"); /* the stuck workers' records since */
    hist_rec_t r;
    while (f && fread(&r, sizeof r, 1, f) == 1)
      if (r.t_ns > since_ns && r.worker != skip && fh_count_events(p, r.worker, HK_ENTER, since_ns) == 0)
        printf("# worker %d %s status %d at +%lld ms\n", r.worker, hist_kind_name(r.kind), r.status,
               (long long)((r.t_ns - since_ns) / 1000000));
    if (f) fclose(f);
    th_fail(__FILE__, __LINE__, "%s: a worker never entered", when);
  }
  return (hist_now_ns() - since_ns) / 1000000;
}

/* The releases that returned an error, in the pool's history (the first's
 * status in *first). */
/* Releases that failed; *lost_ok: how many of them lost every answer
 * (RLOCK_ETIMEDOUT, RLOCK_ECONNLOST, RLOCK_ECONNECT). rlock.h allows those
 * for a lock kind's release (an unlock, a permit's release): it counts as
 * done, goes on alone until answered, and the lease frees the rest; the
 * count on the server at the end shows nothing was lost. A plain
 * semaphore's release never gives up while its latch lives (no lease would
 * bring the permit back). */
static size_t failed_releases(const fh_pool_t *p, int *first, size_t *lost_ok) {
  FILE *f = fopen(p->hist_path, "rb");
  hist_rec_t r;
  size_t n = 0;
  *lost_ok = 0;
  while (f && fread(&r, sizeof r, 1, f) == 1) {
    if (r.kind != HK_RELEASE || r.status == 0 || r.status == RLOCK_ENOTHELD) continue;
    if (r.status == RLOCK_ETIMEDOUT || r.status == RLOCK_ECONNLOST || r.status == RLOCK_ECONNECT) (*lost_ok)++;
    if (!n++) *first = r.status;
  }
  if (f) fclose(f);
  return n;
}

/* Every lock-lost record of the pool's history, with the worker's records
 * just before it (what it was doing): a run told lost where no fault allows
 * it says which worker, why (rlock_lost_reason_t) and when. */
static void print_lost(const fh_pool_t *p) {
  FILE *f = fopen(p->hist_path, "rb");
  hist_rec_t r, last[64][3];
  memset(last, 0, sizeof last);
  int64_t t0 = 0;
  while (f && fread(&r, sizeof r, 1, f) == 1) {
    if (!t0) t0 = r.t_ns;
    if (r.kind == HK_LOST) {
      printf("# lost: worker %d reason %d at +%lld ms; before it:", r.worker, r.status,
             (long long)((r.t_ns - t0) / 1000000));
      for (int k = 0; k < 3 && r.worker < 64; k++)
        if (last[r.worker][k].magic)
          printf(" %s(%d) at +%lld ms", hist_kind_name(last[r.worker][k].kind), last[r.worker][k].status,
                 (long long)((last[r.worker][k].t_ns - t0) / 1000000));
      printf("\n");
    }
    if (r.worker < 64) {
      last[r.worker][0] = last[r.worker][1];
      last[r.worker][1] = last[r.worker][2];
      last[r.worker][2] = r;
    }
  }
  if (f) fclose(f);
}

/* Lock-lost reports that came after the worker left its section and before
 * its release returned: its unlock was under way (on a connection dropped
 * for good, re-sent only once the client replaced it) and found the hold
 * expired. A loss while inside is never counted here. */
static size_t losses_while_releasing(const fh_pool_t *p) {
  FILE *f = fopen(p->hist_path, "rb");
  hist_rec_t r;
  unsigned char releasing[64] = {0};
  size_t n = 0;
  while (f && fread(&r, sizeof r, 1, f) == 1) {
    if (r.worker >= 64) continue;
    if (r.kind == HK_EXIT) releasing[r.worker] = 1;
    else if (r.kind == HK_RELEASE || r.kind == HK_ATTEMPT) releasing[r.worker] = 0;
    else if (r.kind == HK_LOST && releasing[r.worker]) n++;
  }
  if (f) fclose(f);
  return n;
}

/* Checks the history in the object's mode; the count on the server once
 * every worker ended: free permits `free_want` and (permit-expirable) none
 * taken. Prints the RESULT line. */
static void verdict(const obj_t *o, fh_pool_t *p, const char *url, const char *name, int64_t free_want,
                    const char *fault, const char *deploy, const char *what, size_t want_lost) {
  hist_report_t rep;
  /* FF_STRICT=1 (a mutation of the checker: this run must fail): one permit
   * fewer, and readers checked as a mutex */
  int strict = getenv("FF_STRICT") != NULL;
  if (strict) printf("# MUTATION: FF_STRICT: the checker's bound is one permit fewer, readers a mutex\n");
  /* the fair lock: the order of grants too (HIST_FIFO). Its proxy faults
   * keep every waiter's queue entry: a cut or a held connection leaves the
   * entry on the server and the waiter's next try finds it; its deadline is
   * a slot (10 s) ahead, longer than any fault here, so none expires.
   * A waiter whose acquire fails (HK_FAIL) leaves the queue: the checker
   * ends its attempt there. FH_MUTATE=unfair must fail here. */
  hist_check_opts_t ho = {.mode = o == &o_fair ? HIST_FIFO : strict ? HIST_MUTEX_LEASE : o->kinds[0]->mode};
  int v = o->permits ? fh_check_permits(p, o->permits - strict, &rep) : fh_check_opts(p, &ho, &rep);
  CHECK_EQ(v, HIST_OK);
  if (rep.lost != want_lost) print_lost(p);
  CHECK_EQ(rep.lost, want_lost);
  int64_t after = INT64_MAX; /* the earliest grant past the bound after a stale holder's valid-until */
  for (size_t i = 0; i < rep.nlist; i++)
    if (rep.list[i].permitted && rep.list[i].b.grant_ns - rep.list[i].a.valid_until_ns < after)
      after = rep.list[i].b.grant_ns - rep.list[i].a.valid_until_ns;
  char outcome[400], firstg[80] = "";
  if (rep.permitted)
    snprintf(firstg, sizeof firstg, " (the first granted %.0f ms after the stale valid-until)", (double)after / 1e6);
  int n = snprintf(outcome, sizeof outcome, "%s; %zu sections, %zu permitted overlaps%s, %zu lost", what, rep.sections,
                   rep.permitted, firstg, rep.lost);
  if (ho.mode == HIST_FIFO && n > 0 && (size_t)n < sizeof outcome)
    n += snprintf(outcome + n, sizeof outcome - (size_t)n, "; FIFO (slack %d ms): %zu overtakes",
                  (int)(HIST_FIFO_SLACK_NS / 1000000), rep.overtakes);
  int first = 0;
  size_t lost_ok = 0, nfr = failed_releases(p, &first, &lost_ok);
  if (nfr) printf("# %zu releases failed, the first with %s\n", nfr, rlock_err_name(first));
  /* a lock kind's release may fail with every answer lost (see failed_releases) */
  size_t allowed = o->kinds[0] == &fh_kind_semaphore ? 0 : lost_ok;
  CHECK_MSG(nfr == allowed, "%zu releases failed (the first: %s)", nfr, rlock_err_name(first));
  if (nfr && n > 0 && (size_t)n < sizeof outcome)
    n += snprintf(outcome + n, sizeof outcome - (size_t)n, "; %zu releases lost every answer (went on alone)", nfr);
  if (o->permits) {
    int64_t taken = 0, free_now = fh_family_count(url, o->kinds[0], name, &taken);
    snprintf(outcome + n, sizeof outcome - (size_t)n, "; at the end %lld of %d free, %lld taken", (long long)free_now,
             o->permits, (long long)taken);
    CHECK_EQ(free_now, free_want);
    CHECK_EQ(taken, 0);
  }
  fh_result(fault, deploy, o->name, outcome, rep.violations);
  hist_report_free(&rep);
}

/* ------------------------------------------------------------ kill -9 */

static void kill9(const obj_t *o) {
  if (skip(o)) return;
  th_server_t *srv = th_server_start(NULL);
  char name[64];
  snprintf(name, sizeof name, "ff:kill:%s", o->name);
  setup(o, srv->url, NULL, name, RLOCK_LEASE_WATCHDOG, LEASE_MS);
  fh_pool_t p;
  fh_pool_init(&p);
  for (int i = 0; i < NW; i++) fh_spawn(&p, &specs[i]);
  fh_drive_entries(&p, -1, 8, 0, 20000, "before the kill");
  int victim = fh_drive_until_enter(&p, ~0u, 10000);
  fh_kill9(&p, victim);
  int64_t t_kill = hist_now_ns(), took = 0;
  char freed[160] = "";
  if (o->permits) {
    /* a live holder kept inside takes the other permit: the rest need the dead one's */
    int k = fh_drive_until_enter(&p, ~(1u << victim), 10000);
    int64_t t_k = hist_now_ns();
    if (o->leased) {
      took = drive_all(&p, k, t_k, 0, "the dead holder's permit");
      snprintf(freed, sizeof freed,
               "the dead holder's permit came back: the others entered %lld ms after the "
               "kill",
               (long long)((hist_now_ns() - t_kill) / 1000000));
      CHECK_MSG(took <= 2 * LEASE_MS + 1000, "took %lld ms (lease %d)", (long long)took, LEASE_MS);
    } else {
      int64_t until = rlock_now_ms() + 2 * LEASE_MS;
      fh_drive(&p, k, time_is_up, &until, 3 * LEASE_MS);
      size_t n = 0;
      for (int i = 0; i < NW; i++) n += i != k ? fh_count_events(&p, i, HK_ENTER, t_k) : 0;
      CHECK_MSG(n == 0, "%zu entries beside one live holder: the dead holder's permit came back", n);
      snprintf(freed, sizeof freed,
               "the dead holder's permit stays taken (no lease: documented): beside one live "
               "holder nobody entered in %d ms",
               2 * LEASE_MS);
    }
    fh_send(&p, k, FH_CMD_EXIT);
  } else {
    took = drive_all(&p, victim, t_kill, 0, "after the kill");
    snprintf(freed, sizeof freed, "every other worker entered within %lld ms of the kill", (long long)took);
    CHECK_MSG(took <= 2 * LEASE_MS + 1000, "took %lld ms (lease %d)", (long long)took, LEASE_MS);
  }
  printf("killed worker %d (%s) inside; %s\n", victim, specs[victim].kind->name, freed);
  fh_drive_entries(&p, -1, 8, hist_now_ns(), 20000, "after the kill, more");
  fh_pool_finish(&p, 10000);
  char what[260];
  snprintf(what, sizeof what, "killed a %s holder inside (watchdog %d ms); %s", specs[victim].kind->name, LEASE_MS,
           freed);
  verdict(o, &p, srv->url, name, o->leased ? o->permits : o->permits - 1, "kill-9-holder", "single", what, 0);
  th_server_stop(srv);
}

/* ------------------------------------------------------------ SIGSTOP past the lease */

static void sigstop(const obj_t *o, int64_t lease) {
  if (skip(o)) return;
  th_server_t *srv = th_server_start(NULL);
  char name[64];
  snprintf(name, sizeof name, "ff:stop:%s:%lld", o->name, (long long)lease);
  setup(o, srv->url, NULL, name, lease, LEASE_MS);
  fh_pool_t p;
  fh_pool_init(&p);
  for (int i = 0; i < NW; i++) fh_spawn(&p, &specs[i]);
  fh_drive_entries(&p, -1, 8, 0, 20000, "before the stop");
  int a = fh_drive_until_enter(&p, ~0u, 10000);
  int64_t t_ask = hist_now_ns();
  fh_send(&p, a, FH_CMD_VALID); /* its valid-until right before the pause */
  fh_event_t v = fh_await_since(&p, a, HK_VALID, t_ask, 5000);
  CHECK_OK(v.rc);
  fh_stop(&p, a);
  int64_t t_stop = hist_now_ns();
  /* the others go on, past the stopped holder's lease */
  int64_t took = drive_all(&p, a, t_stop, t_stop / 1000000 + 2 * LEASE_MS + 500, "while a holder is stopped");
  fh_cont(&p, a);
  int lost = 0;
  if (o->leased) {
    fh_event_t l = fh_await_since(&p, a, HK_LOST, t_stop, 5000);
    printf("worker %d told lost %lld ms after SIGCONT\n", a, (long long)((l.t_ns - t_stop) / 1000000 - took));
    lost = 1;
  }
  fh_send(&p, a, FH_CMD_EXIT);
  fh_event_t ex = fh_await_since(&p, a, HK_EXIT, t_stop, 5000); /* (older ones: its earlier sections) */
  fh_event_t rel = fh_await_since(&p, a, HK_RELEASE, t_stop, 5000);
  if (o->leased) {
    CHECK_EQ(ex.rc, 1); /* it knew on leaving that its hold was stale */
    CHECK_RC(rel.rc, RLOCK_ENOTHELD);
  } else {
    CHECK_OK(rel.rc); /* a plain permit is kept by a paused holder */
  }
  fh_drive_entries(&p, -1, 8, hist_now_ns(), 20000, "after SIGCONT");
  fh_pool_finish(&p, 10000);
  char what[220];
  snprintf(what, sizeof what, "stopped a %s holder %lld ms (valid-until +%lld ms); the others went on; %s",
           specs[a].kind->name, (long long)took, (long long)(v.value - t_stop / 1000000),
           o->leased ? "stopped holder told lost, release ENOTHELD" : "its permit kept, released after SIGCONT");
  verdict(o, &p, srv->url, name, o->permits,
          lease == RLOCK_LEASE_WATCHDOG ? "sigstop>lease(watchdog)" : "sigstop>lease(fixed)", "single", what,
          (size_t)lost);
  th_server_stop(srv);
}

/* ------------------------------------------------------------ restart with AOF */

static void restart_aof(const obj_t *o) {
  if (skip(o)) return;
  th_server_opts_t so = {0};
  so.appendonly = 1;
  th_server_t *srv = th_server_start(&so);
  char name[64];
  snprintf(name, sizeof name, "ff:restart:%s", o->name);
  setup(o, srv->url, NULL, name, RLOCK_LEASE_WATCHDOG, 3000);
  fh_pool_t p;
  fh_pool_init(&p);
  for (int i = 0; i < NW; i++) fh_spawn(&p, &specs[i]);
  fh_drive_entries(&p, -1, 8, 0, 20000, "before the restart");
  /* every worker made its client (it entered): a worker process started
   * late made it during the restart once (the handshake's connection was
   * closed: the worker failed) */
  drive_all(&p, -1, 0, 0, "before the restart, every worker");
  int a = fh_drive_until_enter(&p, ~0u, 10000);
  th_server_restart(srv);
  int64_t t_up = rlock_now_ms();
  if (o->permits) /* a keeps its permit while the others share the other one */
    drive_all(&p, a, t_up * 1000000, 0, "after the restart, one permit held");
  int renewed = fh_hold_through(&p, a, t_up + 3000, 20000);
  CHECK_MSG(renewed, "the holder's hold was lost across a restart with AOF");
  int64_t took = drive_all(&p, -1, t_up * 1000000, 0, "after the restart");
  fh_pool_finish(&p, 10000);
  char what[200];
  snprintf(what, sizeof what,
           "the %s holder inside kept its hold (%s); every worker entered again within %lld ms "
           "of the restart",
           specs[a].kind->name, o->leased ? "renewed after the reconnect" : "no lease", (long long)took);
  verdict(o, &p, srv->url, name, o->permits, "server-restart(aof-always)", "single", what, 0);
  th_server_stop(srv);
}

/* ------------------------------------------------------------ proxy faults */

static struct {
  fp_proxy_t *px;
  th_server_t *srv;
} P;

/* The server-side port of one client connection (not the test's own); sub:
 * one subscribed to a channel (a waiter's subscriber connection). */
static int some_client_port(int sub) {
  redisReply *r = th_cmd(P.srv, "CLIENT", "LIST", NULL);
  CHECK(r->type == REDIS_REPLY_STRING);
  int port = 0;
  for (char *line = r->str; line && *line && !port;) {
    char *end = strchr(line, '\n');
    if (end) *end = 0;
    const char *addr = strstr(line, "addr=127.0.0.1:");
    int subbed = strstr(line, " sub=0 ") == NULL || strstr(line, " ssub=0 ") == NULL;
    if (addr && !strstr(line, "cmd=client") && (!sub || subbed)) port = atoi(addr + strlen("addr=127.0.0.1:"));
    line = end ? end + 1 : NULL;
  }
  th_reply_free(r);
  return port;
}

/* One fault: begin, last ms (the workers driven meanwhile), end. */
typedef struct pfault {
  const char *name;
  int64_t ms;
  void (*begin)(void);
  void (*end)(void);
} pfault_t;

static int held_port;
static void f_cut(void) { fp_cut(P.px); }
static void f_bh_both(void) { fp_blackhole(P.px, FP_BOTH); }
static void f_bh_down(void) { fp_blackhole(P.px, FP_DOWN); }
static void f_heal(void) { fp_blackhole(P.px, 0); }
static void f_delay(void) { fp_delay(P.px, 30); }
static void f_nodelay(void) { fp_delay(P.px, 0); }
static void f_refuse(void) {
  fp_refuse(P.px, 1);
  fp_cut(P.px);
}
static void f_accept(void) { fp_refuse(P.px, 0); }
/* A flow forgotten for good (a NAT): never forwarded again. (Forwarding it
 * again later would make a byte stream with a hole, which TCP never
 * delivers.) The client must notice and replace the connection. */
static void f_drop_sub(void) {
  int64_t until = rlock_now_ms() + 5000;
  int port;
  while (!(port = some_client_port(1)) && rlock_now_ms() < until) th_sleep_ms(5); /* until a waiter subscribed */
  CHECK_MSG(port > 0, "no subscribed connection within 5 s");
  fp_drop_conn(P.px, port, FP_BOTH);
}
static void f_drop_any(void) { fp_drop_conn(P.px, some_client_port(0), FP_BOTH); }
static void f_hold(void) {
  CHECK((held_port = some_client_port(0)) > 0);
  fp_hold_conn(P.px, held_port, FP_BOTH);
}
static void f_release(void) { fp_hold_conn(P.px, held_port, 0); }
static void f_restart(void) { th_server_restart(P.srv); }
static void f_none(void) {}

static const pfault_t pfaults[] = {
    {"cut", 0, f_cut, f_none},
    {"blackhole both ways 600 ms", 600, f_bh_both, f_heal},
    {"blackhole of replies 600 ms", 600, f_bh_down, f_heal},
    {"delay 30 ms each way", 1000, f_delay, f_nodelay},
    {"refuse + cut 1000 ms", 1000, f_refuse, f_accept},
    {"a subscriber connection dropped for good", 0, f_drop_sub, f_none},
    {"a connection dropped for good", 0, f_drop_any, f_none},
    {"one connection held back 1000 ms", 1000, f_hold, f_release},
};
#define NPFAULTS (sizeof pfaults / sizeof pfaults[0])

/* Starts a server (AOF) and the proxy in front of it, and workers of specs
 * (their url: the proxy's) gated until the proxy runs. */
static void proxy_start(fh_pool_t *p, const obj_t *o, const char *name, char *purl, size_t purl_len, int n,
                        const fh_worker_spec_t *sp) {
  th_server_opts_t so = {0};
  so.appendonly = 1;
  P.srv = th_server_start(&so);
  P.px = fp_listen(P.srv->port); /* no thread yet: the workers are forked first */
  snprintf(purl, purl_len, "redis://127.0.0.1:%d", fp_port(P.px));
  if (o) setup(o, P.srv->url, purl, name, RLOCK_LEASE_WATCHDOG, 3000);
  fh_pool_init(p);
  for (int i = 0; i < n; i++) fh_spawn_gated(p, sp ? &sp[i] : &specs[i]);
  fp_run(P.px);
  for (int i = 0; i < n; i++) fh_send(p, i, FH_CMD_GO);
}

static void proxy_stop(void) {
  fp_stop(P.px);
  th_server_stop(P.srv);
}

static void proxy(const obj_t *o) {
  if (skip(o)) return;
  char name[64], purl[64];
  snprintf(name, sizeof name, "ff:proxy:%s", o->name);
  fh_pool_t p;
  proxy_start(&p, o, name, purl, sizeof purl, NW, NULL);
  fh_drive_entries(&p, -1, 8, 0, 20000, "before the faults");
  drive_all(&p, -1, 0, 0, "before the faults, every worker"); /* each made its client (as before the restart) */
  int64_t worst = 0;
  for (size_t i = 0; i < NPFAULTS; i++) {
    const pfault_t *f = &pfaults[i];
    f->begin();
    int64_t until = rlock_now_ms() + f->ms;
    fh_drive(&p, -1, time_is_up, &until, f->ms + 1000);
    f->end();
    int64_t t_heal = hist_now_ns();
    int64_t took = drive_all(&p, -1, t_heal, 0, f->name);
    printf("%s: every worker entered again within %lld ms\n", f->name, (long long)took);
    if (took > worst) worst = took;
  }
  fh_pool_finish(&p, 10000);
  char what[200];
  snprintf(what, sizeof what,
           "cut, blackholes, delay, refuse, a subscriber and another connection dropped for "
           "good, one held: every worker entered again within %lld ms of each heal",
           (long long)worst);
  /* an unlock stuck on a connection dropped for good until the client
   * replaces it (2.6-4.7 s) can find the hold's 3 s lease run out: the
   * unlock reports that loss (REL_NOTHELD); none while inside a section */
  size_t releasing = losses_while_releasing(&p);
  if (releasing) printf("# %zu lock-lost report(s) from an unlock that found the lease run out\n", releasing);
  verdict(o, &p, P.srv->url, name, o->permits, "proxy(cut,blackhole,delay,refuse,drop,hold)", "single", what,
          releasing);
  proxy_stop();
}

/* ------------------------------------------------------------ latch */

#define LATCH_COUNT 12

static void latch(void) {
  char purl[64];
  static fh_worker_spec_t ls[1 + NW];
  fh_pool_t p;
  /* worker 0 counts down (one step each time the parent lets it out); 1-4 await */
  const char *m = getenv("FH_MUTATE"); /* the awaiters take nothing: this run must fail */
  const fh_kind_t *await_kind = m && strcmp(m, "nolock") == 0 ? &fh_kind_nolock : &fh_kind_latch_await;
  for (int i = 0; i <= NW; i++)
    ls[i] = (fh_worker_spec_t){.url = purl,
                               .kind = i ? await_kind : &fh_kind_latch_down,
                               .lock_name = i ? "ff:latch:open" : "ff:latch:down",
                               .lease_ms = 0,
                               .command_timeout_ms = 1000,
                               .reconnect_max_ms = 200,
                               .wait_ms = 60000,
                               .hold_ms = i ? 0 : -1,
                               .iterations = i ? 1 : 0};
  /* the url is the proxy's: known once it listens; the count is set before any fork */
  th_server_opts_t so = {0};
  so.appendonly = 1;
  P.srv = th_server_start(&so);
  P.px = fp_listen(P.srv->port);
  snprintf(purl, sizeof purl, "redis://127.0.0.1:%d", fp_port(P.px));
  fh_family_set(P.srv->url, &fh_kind_latch_down, "ff:latch:down", LATCH_COUNT);
  fh_pool_init(&p);
  for (int i = 0; i <= NW; i++) fh_spawn_gated(&p, &ls[i]);
  fp_run(P.px);
  for (int i = 0; i <= NW; i++) fh_send(&p, i, FH_CMD_GO);
  static const pfault_t steps[] = {
      {"replies blackholed (the step re-sent)", 1500, f_bh_down, f_heal},
      {"cut", 0, f_cut, f_none},
      {"refuse + cut 500 ms", 500, f_refuse, f_accept},
      {"server restart (AOF)", 0, f_restart, f_none},
      {"delay 30 ms", 300, f_delay, f_nodelay},
      {"the step's connection held back 1500 ms", 1500, f_hold, f_release},
  };
  /* step 0, the first count-down, runs at the start; each later one under a fault */
  fh_event_t e = fh_await(&p, 0, HK_ENTER, 20000);
  for (int step = 1; step < LATCH_COUNT; step++) {
    const pfault_t *f = &steps[(step - 1) % (sizeof steps / sizeof steps[0])];
    if (step == LATCH_COUNT / 2) fh_kill9(&p, 1); /* an awaiter dies half way */
    f->begin();
    fh_send(&p, 0, FH_CMD_EXIT); /* the next count-down starts under the fault */
    int64_t until = rlock_now_ms() + f->ms;
    while (rlock_now_ms() < until) fh_drain(&p), th_sleep_ms(10); /* nothing to await: the fault's length */
    f->end();
    e = fh_await_since(&p, 0, HK_ENTER, e.t_ns, 20000); /* this step returned */
  }
  for (int i = 2; i <= NW; i++) fh_await(&p, i, HK_ENTER, 10000);
  fh_pool_finish(&p, 10000);
  hist_report_t rep;
  int v = hist_check_latch(p.hist_path, "ff:latch:down", "ff:latch:open", LATCH_COUNT, &rep);
  printf("latch: %s\n", rep.msg);
  CHECK_EQ(v, HIST_OK);
  CHECK_EQ(rep.grants, NW - 1);
  int64_t left = fh_family_count(P.srv->url, &fh_kind_latch_down, "ff:latch:down", NULL);
  CHECK_EQ(left, 0);
  char what[240];
  snprintf(what, sizeof what,
           "count %d, each step under a fault (re-sent replies, cut, refuse, restart, delay, "
           "held connection); %zu count-down calls; %zu of %d awaiters opened (1 killed), none early",
           LATCH_COUNT, rep.sections, rep.grants, NW);
  fh_result("proxy+restart(aof)+kill-9-awaiter", "single", "count-down latch", what, rep.violations);
  hist_report_free(&rep);
  proxy_stop();
}

TEST(kill9) {
  kill9(&o_rw);
  kill9(&o_sem);
  kill9(&o_pes);
}
TEST(sigstop) {
  sigstop(&o_rw, LEASE_MS);
  sigstop(&o_rw, RLOCK_LEASE_WATCHDOG);
  sigstop(&o_sem, RLOCK_LEASE_WATCHDOG);
  sigstop(&o_pes, LEASE_MS);
  sigstop(&o_pes, RLOCK_LEASE_WATCHDOG);
}
TEST(restart) {
  restart_aof(&o_rw);
  restart_aof(&o_sem);
  restart_aof(&o_pes);
}
TEST(proxy_faults) {
  proxy(&o_rw);
  proxy(&o_fair);
  proxy(&o_sem);
  proxy(&o_pes);
}
TEST(latch_faults) { latch(); }

/* Runs one test: every one, or the one named by the first argument (e.g. latch_faults). */
static void run(int argc, char **argv, const char *name, void (*fn)(void)) {
  if (argc < 2 || argv[1][0] == '-' || strcmp(argv[1], name) == 0) th_run(name, fn);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 230);
  run(argc, argv, "kill9", test_kill9);
  run(argc, argv, "sigstop", test_sigstop);
  run(argc, argv, "restart", test_restart);
  run(argc, argv, "proxy_faults", test_proxy_faults);
  run(argc, argv, "latch_faults", test_latch_faults);
  return th_done();
}
