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
 * FH_MUTATE=nolock runs the same on a lock that locks nothing: the test
 * must fail (docs/guarantees.md quotes that run). */
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

/* The history with the checker; fails on any violation. */
static void check(fh_pool_t *p, const char *fault, const char *what) {
  hist_report_t rep;
  int v = fh_check(p, HIST_MUTEX_LEASE, &rep);
  char outcome[400];
  snprintf(outcome, sizeof outcome,
           "%s; %zu sections on %zu names, %zu failed acquires, %zu lost, "
           "%zu permitted overlaps",
           what, rep.sections, rep.locks, rep.fails, rep.lost, rep.permitted);
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

/* The workers of name i, as a mask for fh_drive_until_enter. */
static uint32_t workers_of(int i) { return ((1u << WORKERS_PER_NAME) - 1) << (i * WORKERS_PER_NAME); }

static void start_workers(fh_pool_t *p) {
  fh_pool_init(p);
  for (int i = 0; i < NNAMES; i++)
    for (int k = 0; k < WORKERS_PER_NAME; k++) fh_spawn(p, &specs[i]);
  drive_progress(p, -1, 0, "before the fault");
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
  int renewed = keep ? fh_hold_through(&p, mg.holder, t1 / 1000000 + WATCHDOG_MS, 60000) : 1;
  int64_t t2 = hist_now_ns();
  printf(
      "# slot %d of %s moved from port %d to %d in %lld ms (%zu critical sections on it meanwhile); "
      "%s %lld ms after the move\n",
      slot, names[1], from->port, to->port, (long long)((t1 - t0) / 1000000), during,
      !keep     ? "no holder kept"
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
           keep ? "a hold kept across it was renewed on the new owner" : "no hold kept across it", during);
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
  int renewed = fh_hold_through(&p, holder, t_kill / 1000000 + WATCHDOG_MS, 60000);
  int64_t t_settled = hist_now_ns();
  printf(
      "# master at port %d killed (worker %d inside); replica %d took the slot %lld ms later; the holder "
      "%s %lld ms after that\n",
      m->port, holder, rep->port, (long long)((t_promoted - t_kill) / 1000000),
      renewed ? "renewed on it" : "was told LOST", (long long)((t_settled - t_promoted) / 1000000));
  CHECK_MSG(renewed, "the hold acknowledged by the only replica was lost in the failover");
  drive_progress(&p, -1, t_settled, "after the failover");
  fh_pool_finish(&p, 60000);
  char what[200];
  snprintf(what, sizeof what,
           "replica promoted %lld ms after the kill (node timeout 2000 ms), the hold open at "
           "the kill renewed on it %lld ms later; every name went on",
           (long long)((t_promoted - t_kill) / 1000000), (long long)((t_settled - t_promoted) / 1000000));
  check(&p, "master-sigkill", what);
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
    if (kind->mode == HIST_PERMITS) fh_family_set(cl->url, kind, names[i], 1); /* FH_KIND=permit-expirable: 1 permit */
  }
  RUN(slot_migrated_while_held);
  RUN(slot_migrated_under_churn);
  RUN(master_killed); /* last: the cluster has one master fewer after it */
  th_cluster_stop(cl);
  return th_done();
}
