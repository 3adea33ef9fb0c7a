/* test_cluster_history.c -- the history checker on Redis Cluster (issue 8):
 * 3 masters + 3 replicas (tests/harness_cluster.h, cluster-node-timeout
 * 2000 ms), NNAMES lock names, one on each master's slots, and
 * WORKERS_PER_NAME worker processes per name (a client each,
 * fault_harness.h) on a reentrant lock with the watchdog and the default
 * replica sync (`one`). The parent drives them (each worker that enters is
 * told to leave at once, fh_drive) while it
 *   slot_migrated_while_held, slot_migrated_under_churn
 *                   move the slot of one name to another master and back,
 *                   live (IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE, each
 *                   half lasting MIGRATION_STEP_MS), under load: first with
 *                   a holder of that name kept inside across the move (its
 *                   hold must be renewed on the new owner), then with its
 *                   workers taking and leaving it throughout;
 *   master_killed   SIGKILLs the master of another name while a holder of
 *                   it is kept inside: its replica takes over after
 *                   cluster-node-timeout and the hold must be renewed there.
 * Each name must go on after each fault (progress asserted per name), and
 * the history is checked in HIST_MUTEX_LEASE. Here the promoted replica is
 * the only replica of its master, so every grant it acknowledged (WAIT 1)
 * is on it: any violation fails the test (none is excused).
 *   latch_master_killed  a count-down latch counted down step by step while
 *                   its master is SIGKILLed with a step in flight: it never
 *                   opens early (hist_check_latch).
 * FH_KIND=<kind> runs the lock scenarios with another kind: fair (checked
 * in HIST_FIFO too, nothing excused), semaphore (a
 * plain permit: no lease, so the holder is kept a fixed time and its
 * permit's survival read from the count at the end), permit-expirable.
 * TEST_ONLY=name[,name] runs those tests alone.
 * FH_MUTATE=nolock runs the same on a lock that locks nothing: the test
 * must fail (docs/guarantees.md quotes that run); FH_MUTATE=unfair with
 * FH_KIND=fair runs the reentrant lock checked as the fair one. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault_harness.h"
#include "harness_cluster.h"

#define NNAMES 3
#define WORKERS_PER_NAME 2
#define WATCHDOG_MS 10000      /* longer than a failover (node timeout 2 s + election) */
#define STEP 10                /* critical sections awaited per name and phase */
#define MIGRATION_STEP_MS 1000 /* each half of the migration lasts that long, under load */

static th_cluster_t *cl;
static char names[NNAMES][64];
static fh_worker_spec_t specs[NNAMES];

/* A name "fo:cluster:<i>:<k>" whose slot master is m. */
static void name_on(th_server_t *m, int i, char *out, size_t n) {
  for (int k = 0; k < 100000; k++) {
    snprintf(out, n, "fo:cluster:%d:%d", i, k);
    if (th_cluster_owner(cl, th_cluster_keyslot(cl, out)) == m) return;
  }
  th_fail(__FILE__, __LINE__, "no name on the master at port %d", m->port);
}

/* Worker w works on name w / WORKERS_PER_NAME. */
static size_t enters_on(fh_pool_t *p, int name, int64_t since_ns) {
  size_t n = 0;
  for (int k = 0; k < WORKERS_PER_NAME; k++) n += fh_count_events(p, name * WORKERS_PER_NAME + k, HK_ENTER, since_ns);
  return n;
}

typedef struct progress {
  fh_pool_t *p;
  int64_t since_ns;
  int name; /* -1: every name */
} progress_t;
static int progressed(void *arg) {
  progress_t *g = arg;
  for (int i = 0; i < g->p->nworkers; i++) /* every worker has its client (it made an attempt) */
    if (fh_count_events(g->p, i, HK_ATTEMPT, g->since_ns) == 0) return 0;
  for (int i = 0; i < NNAMES; i++)
    if ((g->name < 0 || g->name == i) && enters_on(g->p, i, g->since_ns) < STEP) return 0;
  return 1;
}
static void drive_progress(fh_pool_t *p, int name, int64_t since_ns, const char *when) {
  progress_t g = {p, since_ns, name};
  if (fh_drive(p, -1, progressed, &g, 60000)) return;
  for (int i = 0; i < NNAMES; i++)
    printf("# %s: %zu critical sections %s\n", names[i], enters_on(p, i, since_ns), when);
  th_fail(__FILE__, __LINE__, "fewer than %d critical sections per name %s within 60 s", STEP, when);
}

typedef struct owner_is {
  int slot;
  th_server_t *s;
} owner_is_t;
static int owner_is(void *arg) {
  owner_is_t *o = arg;
  return th_cluster_owner(cl, o->slot) == o->s;
}

/* The plain semaphore (FH_KIND=semaphore: 1 permit per name, no lease):
 * nothing renews a permit, so a holder kept across a fault stays inside
 * PLAIN_HOLD_MS after it (the others wait meanwhile), then leaves; whether
 * its permit survived shows in the count once every worker ended: 1 free
 * permit per name (checked), 2 if the promoted replica lacked the
 * acquire's decrement and the holder's release added one. */
#define PLAIN_HOLD_MS 1000
static int plain(void) { return fh_kind_is_semaphore(specs[0].kind); }

/* The holder w inside until its hold was renewed past after_ms (plain: for
 * PLAIN_HOLD_MS), then let out; 1 renewed (plain: 1, the count says more
 * at the end). */
static int time_up(void *arg) { return th_now_ms() >= *(int64_t *)arg; }
static int hold_through(fh_pool_t *p, int w, int64_t after_ms) {
  if (!plain()) return fh_hold_through(p, w, after_ms, 60000);
  int64_t until = th_now_ms() + PLAIN_HOLD_MS;
  fh_drive(p, w, time_up, &until, PLAIN_HOLD_MS + 1000);
  fh_send(p, w, FH_CMD_EXIT);
  return 1;
}

/* The history with the checker; fails on any violation. */
static void check(fh_pool_t *p, const char *fault, const char *what) {
  char counts[200] = "";
  for (int i = 0; plain() && i < NNAMES; i++) { /* every permit back, none counted twice */
    int64_t n = fh_family_count(cl->url, specs[0].kind, names[i], NULL);
    size_t l = strlen(counts);
    snprintf(counts + l, sizeof counts - l, "%s%lld", i ? "/" : "; free permits at the end ", (long long)n);
    CHECK_MSG(n == 1, "%s: %lld free permits at the end (want 1)", names[i], (long long)n);
  }
  /* the fair lock (FH_KIND=fair): the order of grants too, nothing
   * excused (as for mutual exclusion): the queue and deadlines move with
   * the slot in a migration and are on the only replica, which acknowledged
   * them, in a failover */
  hist_check_opts_t ho = {.mode = fh_fifo_row() ? HIST_FIFO : HIST_MUTEX_LEASE};
  hist_report_t rep;
  int v = fh_check_opts(p, &ho, &rep);
  if (ho.mode == HIST_FIFO) {
    size_t l = strlen(counts);
    snprintf(counts + l, sizeof counts - l, "; FIFO: %zu overtakes (nothing excused)", rep.overtakes);
  }
  char outcome[400];
  snprintf(outcome, sizeof outcome,
           "%s; %zu sections on %zu names, %zu failed acquires, %zu lost, "
           "%zu permitted overlaps%s",
           what, rep.sections, rep.locks, rep.fails, rep.lost, rep.permitted, counts);
  fh_result(fault, "cluster", specs[0].kind->name, outcome, rep.violations);
  CHECK_MSG(v == HIST_OK, "history verdict %d: %s", v, rep.msg);
  hist_report_free(&rep);
}

/* th_cluster_move_slot's pauses: after the IMPORTING/MIGRATING marks
 * (phase 0) and after the keys moved, before SETSLOT NODE (phase 1), the
 * workers run (driven, the holder kept inside) for MIGRATION_STEP_MS: how
 * long each half of the migration lasts (the fault's duration, not a
 * synchronisation). */
typedef struct migration {
  fh_pool_t *p;
  int holder;
  int64_t until_ms;
} migration_t;
static int time_is_up(void *arg) { return th_now_ms() >= ((migration_t *)arg)->until_ms; }
static void migration_step(void *arg, int phase) {
  migration_t *m = arg;
  (void)phase;
  m->until_ms = th_now_ms() + MIGRATION_STEP_MS;
  fh_drive(m->p, m->holder, time_is_up, m, MIGRATION_STEP_MS + 1000);
}

/* Every worker made its client (it logged an attempt): a worker process
 * that starts late would make it during the fault, against a stopped or
 * killed master, and fail its handshake (as the latch rows' awaiters did). */
static int all_started(void *pool) {
  fh_pool_t *p = pool;
  for (int i = 0; i < p->nworkers; i++)
    if (fh_count_events(p, i, HK_ATTEMPT, 0) == 0) return 0;
  return 1;
}

/* The workers of name i, as a mask for fh_drive_until_enter. */
static uint32_t workers_of(int i) { return ((1u << WORKERS_PER_NAME) - 1) << (i * WORKERS_PER_NAME); }

static void start_workers(fh_pool_t *p) {
  fh_pool_init(p);
  for (int i = 0; i < NNAMES; i++)
    for (int k = 0; k < WORKERS_PER_NAME; k++) fh_spawn(p, &specs[i]);
  drive_progress(p, -1, 0, "before the fault");
  CHECK_MSG(fh_drive(p, -1, all_started, p, 60000), "a worker never made its client");
}

/* Moves the slot of names[1] to master `to` under load; keep: a holder of
 * it stays inside across the move (else its workers go on taking it). */
static void slot_migrated(th_server_t *to, int keep) {
  fh_pool_t p;
  start_workers(&p);
  int slot = th_cluster_keyslot(cl, names[1]);
  th_server_t *from = th_cluster_owner(cl, slot);
  CHECK(from != to);
  migration_t mg = {&p, keep ? fh_drive_until_enter(&p, workers_of(1), 60000) : -1, 0};
  int64_t t0 = hist_now_ns();
  th_cluster_move_slot(cl, slot, to, migration_step, &mg); /* the workers run on meanwhile */
  int64_t t1 = hist_now_ns();
  owner_is_t o = {slot, to};
  CHECK_MSG(fh_drive(&p, mg.holder, owner_is, &o, 30000), "slot %d did not move", slot);
  size_t during = enters_on(&p, 1, t0) - enters_on(&p, 1, t1);
  int renewed = keep ? hold_through(&p, mg.holder, t1 / 1000000 + WATCHDOG_MS) : 1;
  int64_t t2 = hist_now_ns();
  printf(
      "# slot %d of %s moved from port %d to %d in %lld ms (%zu critical sections on it meanwhile); "
      "%s %lld ms after the move\n",
      slot, names[1], from->port, to->port, (long long)((t1 - t0) / 1000000), during,
      !keep     ? "no holder kept"
      : plain() ? "its holder (no lease) let out"
      : renewed ? "its holder renewed on the new owner"
                : "its holder was told LOST",
      (long long)((t2 - t1) / 1000000));
  CHECK_MSG(renewed, "the hold was lost in the migration");
  drive_progress(&p, -1, t2, "after the migration");
  fh_pool_finish(&p, 60000);
  char what[240];
  snprintf(what, sizeof what,
           "migration took %lld ms (2 steps of %d ms under load); %s; %zu sections of the "
           "moved name during it",
           (long long)((t1 - t0) / 1000000), MIGRATION_STEP_MS,
           !keep     ? "no hold kept across it"
           : plain() ? "a permit held across it (no lease: kept 1000 ms, then released)"
                     : "a hold kept across it was renewed on the new owner",
           during);
  check(&p, keep ? "live-slot-migration-while-held" : "live-slot-migration-under-churn", what);
}

TEST(slot_migrated_while_held) { slot_migrated(cl->node[0], 1); }
TEST(slot_migrated_under_churn) { slot_migrated(cl->node[1], 0); } /* back to where it was */

TEST(master_killed) {
  fh_pool_t p;
  start_workers(&p);
  int slot = th_cluster_keyslot(cl, names[2]);
  th_server_t *m = th_cluster_owner(cl, slot), *rep = th_cluster_replica_of(cl, m);
  CHECK(rep != NULL);
  /* a holder of the killed master's name stays inside across the failover */
  int holder = fh_drive_until_enter(&p, workers_of(2), 60000);
  th_server_kill(m);
  int64_t t_kill = hist_now_ns();
  CHECK_EQ(fh_holder_at(&p, names[2], t_kill), holder);
  owner_is_t o = {slot, rep};
  CHECK_MSG(fh_drive(&p, holder, owner_is, &o, 60000), "the replica did not take the slot");
  int64_t t_promoted = hist_now_ns();
  int renewed = hold_through(&p, holder, t_kill / 1000000 + WATCHDOG_MS);
  int64_t t_settled = hist_now_ns();
  printf(
      "# master at port %d killed (worker %d inside); replica %d took the slot %lld ms later; the holder "
      "%s %lld ms after that\n",
      m->port, holder, rep->port, (long long)((t_promoted - t_kill) / 1000000),
      plain()   ? "(no lease) let out"
      : renewed ? "renewed on it"
                : "was told LOST",
      (long long)((t_settled - t_promoted) / 1000000));
  CHECK_MSG(renewed, "the hold acknowledged by the only replica was lost in the failover");
  drive_progress(&p, -1, t_settled, "after the failover");
  fh_pool_finish(&p, 60000);
  char what[200];
  snprintf(what, sizeof what,
           "replica promoted %lld ms after the kill (node timeout 2000 ms), the hold open at "
           "the kill %s %lld ms later; every name went on",
           (long long)((t_promoted - t_kill) / 1000000), plain() ? "(no lease) released" : "renewed on it",
           (long long)((t_settled - t_promoted) / 1000000));
  check(&p, "master-sigkill", what);
}

/* ------------------------------------------------------------ the count-down latch
 * A latch of LATCH_COUNT on a master with its replica, counted down one
 * step at a time by one worker (the parent lets it out each time); 3
 * workers await it. The master is SIGKILLed while step LATCH_COUNT / 2 is
 * in flight; its replica takes the slot and the step returns from there.
 * The history shows no await returned open before LATCH_COUNT count-downs
 * had begun (hist_check_latch), every awaiter opens, the count is 0. */
#define LATCH_COUNT 8
#define LATCH_AWAITERS 3

/* The master's first replica is online (past its initial sync). */
static th_server_t *watched_master;
static int replica_online(void *arg) {
  (void)arg;
  char *info = th_cmd_str(watched_master, "INFO", "replication", NULL);
  int ok = info && strstr(info, "slave0:") && strstr(strstr(info, "slave0:"), "state=online");
  free(info);
  return ok;
}

/* The latch's count on node s (GET, READONLY on a replica), read on a fresh
 * connection, as text ("nil" missing). */
static const char *latch_count_on(th_server_t *s, const char *name) {
  static char out[2][32];
  static int k;
  char *o = out[k++ & 1];
  redisContext *raw = th_raw_connect(s);
  if (raw) freeReplyObject(redisCommand(raw, "READONLY"));
  redisReply *r = raw ? redisCommand(raw, "GET %s", name) : NULL;
  snprintf(o, sizeof out[0], "%s",
           !r                              ? "?"
           : r->type == REDIS_REPLY_STRING ? r->str
           : r->type == REDIS_REPLY_NIL    ? "nil"
           : r->type == REDIS_REPLY_ERROR  ? r->str
                                           : "?");
  if (r) freeReplyObject(r);
  if (raw) redisFree(raw);
  return o;
}

/* Every record of the latch's history, in ms from the fault. */
static void latch_dump(const fh_pool_t *p, int64_t t0) {
  FILE *f = fopen(p->hist_path, "rb");
  hist_rec_t r;
  while (f && fread(&r, sizeof r, 1, f) == 1)
    printf("#   %+10.3f worker %u %-7s %.*s status %d\n", (double)(r.t_ns - t0) / 1e6, r.worker, hist_kind_name(r.kind),
           (int)r.name_len, r.name, r.status);
  if (f) fclose(f);
}

typedef struct latch_open {
  fh_pool_t *p;
  int awaiters;
} latch_open_t;
static int latch_all_open(void *arg) {
  latch_open_t *l = arg;
  for (int i = 1; i <= l->awaiters; i++)
    if (fh_count_events(l->p, i, HK_ENTER, 0) == 0) return 0;
  return 1;
}

TEST(latch_master_killed) {
  th_server_t *m = NULL;
  for (int i = 0; i < 3 && !m; i++) /* a live master with a replica (master_killed took one) */
    if (th_cluster_owner(cl, th_cluster_keyslot(cl, names[i])) == cl->node[i] && th_cluster_replica_of(cl, cl->node[i]))
      m = cl->node[i];
  CHECK(m != NULL);
  th_server_t *rep_node = th_cluster_replica_of(cl, m);
  /* the replica past its initial sync (state=online on the master): before
   * that the client counts no replica, sends no WAIT, and the writes stand
   * on the master alone; Cluster may still promote that replica, empty
   * (seen: awaits open at once there, the latch missing: docs/guarantees.md) */
  watched_master = m;
  CHECK_MSG(th_wait_until(replica_online, NULL, 30000), "the replica of port %d is not online", m->port);
  static char base[64], down[80], open[80];
  for (int k = 0;; k++) { /* the latch "fo:latch:<k>" on m's slots */
    snprintf(base, sizeof base, "fo:latch:%d", k);
    if (th_cluster_owner(cl, th_cluster_keyslot(cl, base)) == m) break;
    CHECK(k < 100000);
  }
  snprintf(down, sizeof down, "%s:down", base);
  snprintf(open, sizeof open, "%s:open", base);
  const char *mu = getenv("FH_MUTATE"); /* nolock: the awaiters wait for nothing (this run must fail) */
  const fh_kind_t *await_kind = mu && strcmp(mu, "nolock") == 0 ? &fh_kind_nolock : &fh_kind_latch_await;
  static fh_worker_spec_t ls[1 + LATCH_AWAITERS];
  for (int i = 0; i <= LATCH_AWAITERS; i++)
    ls[i] = (fh_worker_spec_t){.url = cl->url,
                               .kind = i ? await_kind : &fh_kind_latch_down,
                               .lock_name = i ? open : down,
                               .reconnect_max_ms = 500,
                               .wait_ms = 60000,
                               .hold_ms = i ? 0 : -1,
                               .iterations = i ? 1 : 0};
  fh_family_set(cl->url, &fh_kind_latch_down, down, LATCH_COUNT);
  fh_pool_t p;
  fh_pool_init(&p);
  for (int i = 0; i <= LATCH_AWAITERS; i++) fh_spawn(&p, &ls[i]);
  /* every awaiter made its client and called await before the fault (a
   * client made against a stopped master fails its handshake) */
  for (int i = 1; i <= LATCH_AWAITERS; i++) fh_await(&p, i, HK_ATTEMPT, 20000);
  fh_event_t e = fh_await(&p, 0, HK_ENTER, 20000);
  int64_t t_kill = 0, t_promoted = 0, t_back = 0;
  int slot = th_cluster_keyslot(cl, base);
  for (int step = 1; step < LATCH_COUNT; step++) {
    if (step == LATCH_COUNT / 2) {
      printf("# before the kill: count %s on the master, %s on its replica\n", latch_count_on(m, base),
             latch_count_on(rep_node, base));
      for (const char *sec = "replication"; sec; sec = strcmp(sec, "replication") ? NULL : "commandstats") {
        char *info = th_cmd_str(m, "INFO", sec, NULL); /* the replica's link and offset; the WAITs the master ran */
        for (char *l = info ? strtok(info, "\r\n") : NULL; l; l = strtok(NULL, "\r\n"))
          if (!strncmp(l, "slave0:", 7) || !strncmp(l, "master_repl_offset:", 19) || !strncmp(l, "cmdstat_wait:", 13) ||
              !strncmp(l, "cmdstat_evalsha:", 16) || !strncmp(l, "connected_slaves:", 17))
            printf("#   master %s\n", l);
        free(info);
      }
      th_server_kill(m);
      t_kill = hist_now_ns();
    }
    fh_send(&p, 0, FH_CMD_EXIT); /* the next count-down */
    if (step == LATCH_COUNT / 2) {
      owner_is_t o = {slot, rep_node};
      CHECK_MSG(fh_drive(&p, 0, owner_is, &o, 60000), "the replica did not take the slot");
      t_promoted = hist_now_ns();
    }
    e = fh_await_since(&p, 0, HK_ENTER, e.t_ns, 60000); /* this step returned (a failed one: the next began) */
    if (step == LATCH_COUNT / 2) t_back = e.t_ns;
  }
  /* every awaiter opened (counted, not consumed: a drive above may have
   * consumed an early one's event) */
  latch_open_t lo = {&p, LATCH_AWAITERS};
  if (!fh_drive(&p, 0, latch_all_open, &lo, 20000)) { /* where each one is, and the count */
    latch_dump(&p, t_kill);
    th_fail(__FILE__, __LINE__, "not every awaiter opened within 20 s (count now %lld)",
            (long long)fh_family_count(cl->url, &fh_kind_latch_down, down, NULL));
  }
  fh_pool_finish(&p, 20000);
  hist_report_t rep;
  int v = hist_check_latch(p.hist_path, down, open, LATCH_COUNT, &rep);
  printf("latch: %s\n", rep.msg);
  if (v != HIST_OK) {
    printf("# the latch's history (ms from the fault; promoted at %+.3f, the step back at %+.3f):\n",
           (double)(t_promoted - t_kill) / 1e6, (double)(t_back - t_kill) / 1e6);
    latch_dump(&p, t_kill);
  }
  int64_t left = fh_family_count(cl->url, &fh_kind_latch_down, down, NULL);
  char what[300];
  snprintf(what, sizeof what,
           "count %d, its master SIGKILLed with count-down %d in flight: replica promoted %lld ms after the kill, "
           "the step returned from it %lld ms after the kill; %zu count-down calls; %zu of %d awaiters opened, "
           "%s; count %lld at the end",
           LATCH_COUNT, LATCH_COUNT / 2 + 1, (long long)((t_promoted - t_kill) / 1000000),
           (long long)((t_back - t_kill) / 1000000), rep.sections, rep.grants, LATCH_AWAITERS,
           rep.violations ? "SOME EARLY" : "none early", (long long)left);
  fh_result("master-sigkill", "cluster", "count-down latch", what, rep.violations);
  CHECK_EQ(v, HIST_OK);
  CHECK_EQ(rep.grants, LATCH_AWAITERS);
  CHECK_EQ(left, 0);
  hist_report_free(&rep);
}

/* TEST_ONLY=name[,name...] runs those tests alone. */
static int wanted(const char *name) {
  const char *only = getenv("TEST_ONLY");
  size_t n = strlen(name);
  for (const char *p = only; p && *p; p += strcspn(p, ",")) {
    p += *p == ',';
    if (!strncmp(p, name, n) && (p[n] == ',' || p[n] == 0)) return 1;
  }
  return !only;
}

int main(int argc, char **argv) {
  th_init(argc, argv, 290);
  cl = th_cluster_start(3, 1, 2000);
  const fh_kind_t *kind = fh_kind_or_mutant(&fh_kind_reentrant);
  for (int i = 0; i < NNAMES; i++) {
    name_on(cl->node[i], i, names[i], sizeof names[i]);
    specs[i] = (fh_worker_spec_t){.url = cl->url,
                                  .kind = kind,
                                  .lock_name = names[i],
                                  .lease_ms = RLOCK_LEASE_WATCHDOG,
                                  .watchdog_ms = WATCHDOG_MS,
                                  .reconnect_max_ms = 500,
                                  .wait_ms = 30000,
                                  .hold_ms = -1,
                                  .iterations = 0};
    if (kind->mode == HIST_PERMITS)
      fh_family_set(cl->url, kind, names[i], 1); /* FH_KIND=(permit-expirable|semaphore) */
  }
  if (wanted("slot_migrated_while_held")) RUN(slot_migrated_while_held);
  if (wanted("slot_migrated_under_churn")) RUN(slot_migrated_under_churn);
  if (wanted("master_killed")) RUN(master_killed);             /* the cluster has one master fewer after it */
  if (wanted("latch_master_killed")) RUN(latch_master_killed); /* and one more */
  th_cluster_stop(cl);
  return th_done();
}
