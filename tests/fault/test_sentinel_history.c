/* test_sentinel_history.c -- the history checker on Sentinel (issue 8): a
 * master, 2 replicas and 3 sentinels (tests/harness_sentinel.h, down-after
 * 1000 ms), NWORKERS worker processes (a client each, fault_harness.h) on
 * one reentrant lock with the watchdog and the default replica sync (`one`:
 * each grant acknowledged by a replica). The parent drives them (each
 * worker that enters is told to leave at once, fh_drive) and keeps one
 * holder inside across the fault:
 *   master_stopped  SIGSTOPs the master until the sentinels promoted a
 *                   replica and the workers went on there, then SIGCONTs
 *                   it: it comes back as a replica of the new master;
 *   master_killed   SIGKILLs the master (it stays dead);
 *   acking_replica_lost_too (a fresh deployment)
 *                   two failures: one replica cut off, a grant acknowledged
 *                   by the other alone, then the master and that replica
 *                   SIGKILLed: the cut-off replica is promoted without the
 *                   hold (the killed replica then restarts as its replica:
 *                   without one no grant is acknowledged there), and the
 *                   documented hazard is asserted.
 * The holder stays inside until its renewal reached the promoted master (or
 * it is told the hold is lost); meanwhile the others wait. The run goes on
 * after the failover (progress asserted) and the history is checked in
 * HIST_MUTEX_LEASE. Violations are told apart:
 *   - outside the failover window (from the fault to one lease after the
 *     holder settled) nothing excuses one: the test fails;
 *   - inside it, a violation is the documented hazard of asynchronous
 *     replication (docs/guarantees.md) only if it overlaps the hold kept
 *     across the fault (a waiter entered while the holder was inside; an
 *     overlap of two other workers is never excused) and the holder's own
 *     renewal found its hold missing on the promoted master (it was told LOST):
 *     the RESULT line then says "HAZARD ..." and the test passes; if the
 *     hold was renewed there, any violation fails the test.
 *   latch_master_stopped  a count-down latch counted down step by step,
 *                   the master SIGSTOPped with a step in flight: it never
 *                   opens early (hist_check_latch).
 * FH_KIND=<kind> runs the lock scenarios with another kind: fair (checked
 * in HIST_FIFO too; grants in the failover window excused only under the
 * hazard), semaphore (a
 * plain permit: no lease, see plain_hold), permit-expirable, write.
 * TEST_ONLY=name[,name] runs those tests alone.
 * FH_MUTATE=nolock runs the same loop on a lock that locks nothing: the
 * test must fail (docs/guarantees.md quotes that run); FH_MUTATE=unfair
 * with FH_KIND=fair runs the reentrant lock checked as the fair one. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault_harness.h"
#include "harness_replica.h"
#include "harness_sentinel.h"

#define NWORKERS 4
#define LOCK "fo:sentinel"
#define WATCHDOG_MS 10000 /* longer than a failover (down-after 1 s + election) */
#define STEP 20           /* critical sections awaited per phase */

static th_sentinels_t *dep;

static th_server_t *current_master(void) {
  th_server_t *m = th_sentinels_node(dep, th_sentinel_master_port(dep, 0));
  CHECK_MSG(m, "the sentinels name no master of the deployment");
  return m;
}

/* STEP more critical sections (any worker) after since_ns, each worker let
 * out as soon as it entered (fh_drive). */
typedef struct progress {
  fh_pool_t *p;
  int64_t since_ns;
} progress_t;
static int progressed(void *arg) {
  progress_t *g = arg;
  for (int i = 0; i < g->p->nworkers; i++) /* every worker has its client (it made an attempt) */
    if (fh_count_events(g->p, i, HK_ATTEMPT, g->since_ns) == 0 && fh_count_events(g->p, i, HK_MAX, 0) == 0)
      return 0; /* (a worker that left its loop makes no more attempts) */
  return fh_count_events(g->p, -1, HK_ENTER, g->since_ns) >= STEP;
}
static void drive_progress(fh_pool_t *p, int64_t since_ns, const char *when) {
  progress_t g = {p, since_ns};
  CHECK_MSG(fh_drive(p, -1, progressed, &g, 60000), "fewer than %d critical sections %s within 60 s", STEP, when);
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

/* Drives the workers until pred(arg) holds (fails after 60 s). */
static void drive_until(fh_pool_t *p, int keep, int (*pred)(void *), void *arg, const char *what) {
  CHECK_MSG(fh_drive(p, keep, pred, arg, 60000), "%s: not within 60 s", what);
}

/* The old master, resumed, has been turned into a replica by the sentinels. */
typedef struct demoted {
  th_server_t *s;
} demoted_t;
static int is_replica(void *arg) {
  demoted_t *d = arg;
  redisContext *raw = th_raw_connect(d->s);
  redisReply *r = raw ? redisCommand(raw, "ROLE") : NULL;
  int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements && !strcmp(r->element[0]->str, "slave");
  if (r) freeReplyObject(r);
  if (raw) redisFree(raw);
  return ok;
}

/* The promotion, awaited while the workers' events are drained. */
typedef struct promoted {
  int old_port;
  th_server_t *m;
} promoted_t;
static int promoted(void *arg) {
  promoted_t *w = arg;
  w->m = th_sentinels_wait_failover(dep, w->old_port, 50);
  return w->m != NULL;
}

/* LOCK on s: its owners (HLEN), read on a fresh connection. */
static long long owners_on(th_server_t *s) {
  redisContext *raw = th_raw_connect(s);
  redisReply *r = raw ? redisCommand(raw, "HLEN %s", LOCK) : NULL;
  long long n = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
  if (r) freeReplyObject(r);
  if (raw) redisFree(raw);
  return n;
}

/* ------------------------------------------------------------ the plain semaphore
 * FH_KIND=semaphore: 1 permit, no lease. Nothing renews a permit, so the
 * holder kept across the fault stays inside PLAIN_HOLD_MS after the
 * promotion (the others wait meanwhile: they reached the promoted master),
 * then leaves. Whether its permit survived shows at the end, every worker
 * gone: 1 free permit (it did), or 2 (the promoted replica lacked the
 * acquire's decrement and the holder's release added one: from then on
 * the semaphore has 2 permits, docs/guarantees.md "What Sentinel does not
 * guarantee"). The history is checked with the bound 1, and, after such a
 * loss, with the bound 2 (the permits that exist): no violation before the
 * fault, none past 2 after it. */
#define PLAIN_HOLD_MS 1000
#define FIFO_SETTLE_NS (1000 * 1000000LL) /* the FIFO check's window: up to 1 s after the holder settled */

static int plain(const fh_kind_t *k) { return fh_kind_is_semaphore(k); }

static int hold_up(void *arg) { return th_now_ms() >= *(int64_t *)arg; }
static void plain_hold(fh_pool_t *p, int holder) {
  int64_t until = th_now_ms() + PLAIN_HOLD_MS;
  fh_drive(p, holder, hold_up, &until, PLAIN_HOLD_MS + 1000);
  fh_send(p, holder, FH_CMD_EXIT);
}

/* The free permits of LOCK on s (GET), read on a fresh connection; -1 none. */
static long long permits_on(th_server_t *s) {
  redisContext *raw = th_raw_connect(s);
  redisReply *r = raw ? redisCommand(raw, "GET %s", LOCK) : NULL;
  long long n = r && r->type == REDIS_REPLY_STRING ? atoll(r->str) : -1;
  if (r) freeReplyObject(r);
  if (raw) redisFree(raw);
  return n;
}

/* After a lost permit (2 free at the end): the history against the bound 2,
 * and no bound-1 violation granted before the fault. Returns the
 * violations of those two checks. */
static size_t plain_after_loss(fh_pool_t *p, const hist_report_t *rep1, int64_t t_fault) {
  size_t before = 0;
  for (size_t i = 0; i < rep1->nlist; i++) before += !rep1->list[i].permitted && rep1->list[i].b.grant_ns < t_fault;
  hist_report_t rep2;
  CHECK_EQ(fh_check_permits(p, 2, &rep2), HIST_OK);
  size_t n = before + rep2.violations;
  printf("# the lost permit: %zu bound-1 violations before the fault; against the bound 2: %zu violations\n", before,
         rep2.violations);
  hist_report_free(&rep2);
  return n;
}

/* The server process is stopped (state T in /proc/PID/stat). */
static int stopped(void *pid) {
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)(intptr_t)pid);
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f) fclose(f);
  buf[n] = 0;
  const char *st = strrchr(buf, ')');
  return st && st[1] == ' ' && st[2] == 'T';
}

static void failover_history(int stop) {
  th_server_t *old = current_master();
  /* every live replica online: any of them may be promoted */
  CHECK_MSG(th_sentinels_wait_replicas(old, dep->nnodes - 1, 60000), "the master's %d replicas are not all online",
            dep->nnodes - 1);
  fh_pool_t p;
  fh_pool_init(&p);
  fh_worker_spec_t s = {.url = dep->url,
                        .kind = fh_kind_or_mutant(&fh_kind_reentrant),
                        .lock_name = LOCK,
                        .lease_ms = RLOCK_LEASE_WATCHDOG,
                        .watchdog_ms = WATCHDOG_MS,
                        .reconnect_max_ms = 500,
                        .wait_ms = 30000,
                        .hold_ms = -1,
                        .iterations = 0};
  if (plain(s.kind)) th_cmd_int(old, "DEL", LOCK, NULL); /* an earlier test's permits (2 after a loss) */
  if (s.kind->mode == HIST_PERMITS) fh_family_set(dep->url, s.kind, LOCK, 1); /* FH_KIND=permit-expirable */
  for (int i = 0; i < NWORKERS; i++) fh_spawn(&p, &s);
  drive_progress(&p, 0, "before the fault");
  drive_until(&p, -1, all_started, &p, "every worker made its client");

  /* the next holder stays inside across the fault: its grant was
   * acknowledged by a replica (replica sync `one`) before the fault */
  int holder = fh_drive_until_enter(&p, ~0u, 60000);
  if (stop) {
    kill(old->pid, SIGSTOP);
    CHECK(th_wait_until(stopped, (void *)(intptr_t)old->pid, 10000));
  } else {
    th_server_kill(old); /* killed and reaped */
  }
  int64_t t_fault = hist_now_ns();
  CHECK_EQ(fh_holder_at(&p, LOCK, t_fault), holder);
  promoted_t pw = {old->port, NULL};
  drive_until(&p, holder, promoted, &pw, "a failover");
  /* at once: before the workers' clients get there (plain: free permits) */
  long long owners = plain(s.kind) ? permits_on(pw.m) : owners_on(pw.m);
  int64_t t_promoted = hist_now_ns();
  printf(
      "# %s: sentinels agreed on port %d %lld ms after the fault; %s of %s on the promoted "
      "master: %lld (worker %d is inside)\n",
      stop ? "SIGSTOP" : "SIGKILL", pw.m->port, (long long)((t_promoted - t_fault) / 1000000),
      plain(s.kind) ? "free permits" : "owners", LOCK, owners, holder);
  /* the holder stays inside until its renewal reached the promoted master
   * (or it is told the hold is lost): the waiters meanwhile must not enter */
  int renewed = 1;
  if (plain(s.kind)) plain_hold(&p, holder); /* renewed: known at the end */
  else renewed = fh_hold_through(&p, holder, t_fault / 1000000 + WATCHDOG_MS, 60000);
  int64_t t_settled = hist_now_ns();
  printf("# the holder %s %lld ms after the promotion\n",
         plain(s.kind) ? "left"
         : renewed     ? "renewed on the new master"
                       : "was told LOST",
         (long long)((t_settled - t_promoted) / 1000000));
  drive_progress(&p, t_settled, "after the failover");

  if (stop) {
    int64_t t_cont = hist_now_ns();
    kill(old->pid, SIGCONT);
    demoted_t d = {old};
    drive_until(&p, -1, is_replica, &d, "the old master turned into a replica");
    int64_t t_back = hist_now_ns();
    printf("# the old master is a replica %lld ms after SIGCONT\n", (long long)((t_back - t_cont) / 1000000));
    drive_progress(&p, t_back, "after the old master came back");
  }
  fh_pool_finish(&p, 60000);
  long long free_end = plain(s.kind) ? fh_family_count(dep->url, s.kind, LOCK, NULL) : 0;
  if (plain(s.kind)) renewed = free_end == 1; /* the permit survived the failover */

  /* the fair lock (FH_KIND=fair): the order of grants too. The queue and
   * deadlines are written with the hold (WAIT behind each), so the promoted
   * replica has them when it has the hold: nothing is excused then. Only
   * under the hazard (the hold missing there: a queue entry may be missing
   * too, its waiter queues again behind later ones) are grants from the
   * fault to 1 s after the holder settled excused. */
  int64_t window[2] = {t_fault, t_settled + FIFO_SETTLE_NS};
  hist_check_opts_t ho = {
      .mode = fh_fifo_row() ? HIST_FIFO : HIST_MUTEX_LEASE, .excuse = window, .nexcuse = renewed ? 0 : 1};
  hist_report_t rep;
  int v = fh_check_opts(&p, &ho, &rep);
  CHECK_MSG(v == HIST_OK || v == HIST_VIOLATION, "history verdict %d: %s", v, rep.msg);
  size_t inside, outside;
  fh_violations_split(&rep, holder, t_fault, t_settled + (int64_t)WATCHDOG_MS * 1000000, &inside, &outside);
  if (plain(s.kind) && !renewed) { /* the lost permit's overlaps: checked against the 2 permits since */
    CHECK_EQ(free_end, 2);
    CHECK_MSG(plain_after_loss(&p, &rep, t_fault) == 0, "violations beyond the lost permit");
    outside = 0;
  }
  char outcome[400];
  snprintf(
      outcome, sizeof outcome,
      "%s%zu sections, %zu failed acquires, %zu lost; failover %lld ms; the hold open at the fault %s "
      "(%lld %s on the promoted master at once); %zu permitted overlaps; violations: %zu in the "
      "failover window, %zu outside%s",
      !renewed && (inside || plain(s.kind)) ? "HAZARD (async replication: the promoted replica lacked the hold) " : "",
      rep.sections, rep.fails, rep.lost, (long long)((t_promoted - t_fault) / 1000000),
      plain(s.kind) ? (renewed ? "kept there (1 of 1 free at the end)" : "LOST there (2 free at the end)")
      : renewed     ? "renewed there"
                    : "LOST there",
      owners, plain(s.kind) ? "free permits" : "owners", rep.permitted, inside, outside,
      plain(s.kind) && !renewed ? " against the 2 permits since" : "");
  if (ho.mode == HIST_FIFO) {
    size_t l = strlen(outcome);
    snprintf(outcome + l, sizeof outcome - l, "; FIFO: %zu overtakes, %zu excused%s", rep.overtakes,
             rep.overtakes_excused, renewed ? " (nothing excused: the hold was there)" : " in the failover window");
  }
  fh_result(stop ? "master-sigstop-past-failover-then-sigcont" : "master-sigkill", "sentinel", s.kind->name, outcome,
            rep.violations);
  CHECK_MSG(rep.overtakes == 0, "FIFO: %zu grants overtook a waiter outside the failover window: %s", rep.overtakes,
            rep.first_overtake);
  CHECK_MSG(outside == 0, "%zu violations outside the failover window", outside);
  CHECK_MSG(inside == 0 || !renewed,
            "%zu violations in the failover window although the hold was renewed on the promoted master", inside);
  hist_report_free(&rep);
}

/* ------------------------------------------------------------ the hazard */

/* The local address (laddr) of replica r's link to its master. */
static void link_laddr(th_server_t *r, char *out, size_t n) {
  char *list = th_cmd_str(r, "CLIENT", "LIST", "TYPE", "master", NULL);
  const char *a = list ? strstr(list, "laddr=") : NULL;
  CHECK_MSG(a, "no master link on the replica at port %d", r->port);
  snprintf(out, n, "%.*s", (int)strcspn(a + 6, " \r\n"), a + 6);
  free(list);
}

static th_server_t *watched;
static int one_replica_left(void *arg) {
  (void)arg;
  char *info = th_cmd_str(watched, "INFO", "replication", NULL);
  int ok = info && strstr(info, "connected_slaves:1\r\n") != NULL;
  free(info);
  return ok;
}

/* Two failures: with the lock free on every node, replica B's link is cut
 * (B frozen, so it cannot come back) before a grant that replica A alone
 * acknowledges (replica sync `one` is met); then the master and A die and
 * B resumes. Sentinel can only promote
 * B, which never got the grant: the documented hazard of `WAIT` (it is not
 * durability). Asserted: a waiter enters on B while the holder still
 * believes it holds (a violation inside the failover window, labelled
 * HAZARD), and the holder's renewal finds no hold on B (it is told LOST). */
TEST(acking_replica_lost_too) {
  th_server_t *m = current_master(), *a = dep->nodes[1], *b = dep->nodes[2];
  CHECK(m == dep->nodes[0]);
  CHECK_MSG(th_sentinels_wait_replicas(m, 2, 60000), "the master's 2 replicas are not all online");
  fh_pool_t p;
  fh_pool_init(&p);
  fh_worker_spec_t s = {.url = dep->url,
                        .kind = fh_kind_or_mutant(&fh_kind_reentrant),
                        .lock_name = LOCK,
                        .lease_ms = RLOCK_LEASE_WATCHDOG,
                        .watchdog_ms = WATCHDOG_MS,
                        .reconnect_max_ms = 500,
                        .wait_ms = 30000,
                        .hold_ms = -1,
                        .iterations = 0};
  if (s.kind->mode == HIST_PERMITS) fh_family_set(dep->url, s.kind, LOCK, 1); /* FH_KIND=permit-expirable */
  for (int i = 0; i < NWORKERS; i++) fh_spawn(&p, &s);
  drive_progress(&p, 0, "before the fault");
  drive_until(&p, -1, all_started, &p, "every worker made its client");

  /* the lock free on every node before B is cut off (else B keeps a stale
   * hold, maybe of the holder-to-be's own owner id): worker x leaves the
   * loop while the others are frozen, its release reaches both replicas */
  int x = fh_drive_until_enter(&p, ~0u, 60000);
  for (int i = 0; i < NWORKERS; i++)
    if (i != x) fh_stop(&p, i);
  /* a barrier: a try a frozen worker wrote before its stop is in the
   * server's socket buffer by now (loopback delivers during the write), and
   * Redis answers this PING only after the event-loop round that reads it,
   * so every such try has run (busy: x holds) before x's release. Without
   * it, a try read in a later round than the release took the freed permit
   * (an ASan run: 0 free on B) */
  th_reply_free(th_cmd(m, "PING", NULL));
  if (plain(s.kind)) CHECK_MSG(permits_on(m) == 0, "worker %d inside, yet %lld permits free", x, permits_on(m));
  int64_t t_quit = hist_now_ns();
  fh_send(&p, x, FH_CMD_QUIT);
  fh_send(&p, x, FH_CMD_EXIT);
  /* this release's event (x's earlier ones are still unread) */
  fh_event_t rel = fh_await_since(&p, x, HK_RELEASE, t_quit, 10000);
  CHECK_MSG(rel.rc == 0, "worker %d's release: %s", x, rlock_err_name(rel.rc));
  fh_await(&p, x, HK_MAX, 10000);
  /* a write and WAIT on one connection (a raw WAIT alone answers at once:
   * its connection wrote nothing) */
  th_replicas_caught_up(m, 2, 5000);
  if (plain(s.kind)) { /* the permit free on B */
    long long on_b = permits_on(b), on_m = permits_on(m);
    CHECK_MSG(on_b == 1, "free permits after worker %d's release: %lld on B, %lld on the master", x, on_b, on_m);
  } else {
    CHECK_EQ(th_cmd_int(b, "EXISTS", LOCK, NULL), 0);
  }
  char laddr[64];
  link_laddr(b, laddr, sizeof laddr);
  kill(b->pid, SIGSTOP);
  CHECK(th_wait_until(stopped, (void *)(intptr_t)b->pid, 10000));
  th_reply_free(th_cmd(m, "CLIENT", "KILL", "ADDR", laddr, NULL));
  watched = m;
  CHECK_MSG(th_wait_until(one_replica_left, NULL, 10000), "B's link was not cut");
  for (int i = 0; i < NWORKERS; i++)
    if (i != x) fh_cont(&p, i);
  int holder = fh_drive_until_enter(&p, ~(1u << x), 60000); /* granted after the cut */

  th_server_kill(m);
  th_server_kill(a);
  kill(b->pid, SIGCONT);
  int64_t t_fault = hist_now_ns();
  CHECK_EQ(fh_holder_at(&p, LOCK, t_fault), holder);
  promoted_t pw = {m->port, NULL};
  drive_until(&p, holder, promoted, &pw, "a failover to B");
  CHECK(pw.m == b);
  long long owners = plain(s.kind) ? permits_on(b) : owners_on(b);
  int64_t t_promoted = hist_now_ns();
  /* A comes back as B's replica: the workers saw replicas, so the
   * replica-sync check asks one of B too (never "no WAIT": issue 20) and a
   * waiter enters on B only once A acknowledges */
  snprintf(dep->replicaof[0], sizeof dep->replicaof[0], "%d", b->port);
  th_server_restart(a);
  /* the holder stays inside until another worker entered on B */
  int second = fh_drive_until_enter(&p, ~(1u << holder | 1u << x), 60000);
  int64_t t_second = hist_now_ns();
  fh_send(&p, second, FH_CMD_EXIT);
  int renewed = 0; /* plain: nothing to renew; its loss shows at the end */
  if (plain(s.kind)) fh_send(&p, holder, FH_CMD_EXIT);
  else renewed = fh_hold_through(&p, holder, t_fault / 1000000 + WATCHDOG_MS, 60000);
  int64_t t_settled = hist_now_ns();
  printf(
      "# B promoted %lld ms after the fault with %lld owners (plain: free permits) of %s; worker %d entered %lld ms "
      "after that "
      "while worker %d was inside; the holder was %s %lld ms after the promotion\n",
      (long long)((t_promoted - t_fault) / 1000000), owners, LOCK, second,
      (long long)((t_second - t_promoted) / 1000000), holder,
      plain(s.kind) ? "let out (no lease)"
      : renewed     ? "RENEWED"
                    : "told lost",
      (long long)((t_settled - t_promoted) / 1000000));
  drive_progress(&p, t_settled, "after the failover");
  fh_pool_finish(&p, 60000);
  long long free_end = plain(s.kind) ? fh_family_count(dep->url, s.kind, LOCK, NULL) : 0;

  /* the fair lock: FIFO too, except from the fault to 1 s after the holder
   * settled (the hazard: the promoted B lacks the queue entries too) */
  int64_t window[2] = {t_fault, t_settled + FIFO_SETTLE_NS};
  hist_check_opts_t ho = {.mode = fh_fifo_row() ? HIST_FIFO : HIST_MUTEX_LEASE, .excuse = window, .nexcuse = 1};
  hist_report_t rep;
  int v = fh_check_opts(&p, &ho, &rep);
  CHECK_MSG(v == HIST_OK || v == HIST_VIOLATION, "history verdict %d: %s", v, rep.msg);
  size_t inside, outside;
  fh_violations_split(&rep, holder, t_fault, t_settled + (int64_t)WATCHDOG_MS * 1000000, &inside, &outside);
  if (plain(s.kind)) { /* the permit lost on B: 2 permits since (asserted), checked against them */
    printf("# free permits at the end: %lld\n", free_end);
    CHECK_EQ(free_end, 2);
    CHECK_MSG(plain_after_loss(&p, &rep, t_fault) == 0, "violations beyond the lost permit");
    outside = 0;
  }
  char outcome[400];
  snprintf(outcome, sizeof outcome,
           "%s%zu sections, %zu lost; B promoted %lld ms after the fault with %lld owners; a waiter entered "
           "%lld ms later while the holder was inside; the holder %s; violations: %zu in the failover "
           "window, %zu outside",
           !renewed && inside ? "HAZARD (async replication: the promoted replica lacked the hold) " : "", rep.sections,
           rep.lost, (long long)((t_promoted - t_fault) / 1000000), owners,
           (long long)((t_second - t_promoted) / 1000000),
           plain(s.kind) ? "was never told (no lease); 2 free permits at the end, checked against 2 since"
           : renewed     ? "was renewed"
                         : "was told LOST",
           inside, outside);
  if (ho.mode == HIST_FIFO) {
    size_t l = strlen(outcome);
    snprintf(outcome + l, sizeof outcome - l, "; FIFO: %zu overtakes, %zu excused in the failover window",
             rep.overtakes, rep.overtakes_excused);
  }
  fh_result("master+acking-replica-sigkill(other-replica-cut-off)", "sentinel", s.kind->name, outcome, rep.violations);
  CHECK_MSG(rep.overtakes == 0, "FIFO: %zu grants overtook a waiter outside the failover window: %s", rep.overtakes,
            rep.first_overtake);
  CHECK_MSG(outside == 0, "%zu violations outside the failover window", outside);
  /* (owners is only reported: the waiters' clients, told by +switch-master,
   * may take the free lock on B before the test reads it) */
  CHECK_MSG(!renewed && inside >= 1, "the hazard did not show as documented (renewed %d, %zu violations)", renewed,
            inside);
  hist_report_free(&rep);
}

/* ------------------------------------------------------------ the count-down latch
 * A latch of LATCH_COUNT, counted down one step at a time by worker 0 (one
 * count-down each time the parent lets it out); NWORKERS - 1 workers await
 * it. The master is SIGSTOPped while step LATCH_COUNT / 2 is in flight (its
 * request sits unread on the stopped master), the sentinels promote a
 * replica, the step returns from there; then SIGCONT: the old master runs
 * the stale copy as a master for a while, then becomes a replica. The
 * history shows no await returned open before LATCH_COUNT count-downs had
 * begun (hist_check_latch: a count-down counted twice, by the re-send on
 * the promoted master, would open it early), every awaiter opens, the count
 * is 0 at the end. */
#define LATCH_COUNT 8
#define LATCH "fo:latch"

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

TEST(latch_master_stopped) {
  th_server_t *old = current_master();
  CHECK_MSG(th_sentinels_wait_replicas(old, dep->nnodes - 1, 60000), "the master's %d replicas are not all online",
            dep->nnodes - 1);
  const char *m = getenv("FH_MUTATE"); /* nolock: the awaiters take nothing (this run must fail) */
  const fh_kind_t *await_kind = m && strcmp(m, "nolock") == 0 ? &fh_kind_nolock : &fh_kind_latch_await;
  if (await_kind == &fh_kind_nolock) printf("# MUTATION: FH_MUTATE=nolock: the awaiters wait for nothing\n");
  static fh_worker_spec_t ls[NWORKERS];
  for (int i = 0; i < NWORKERS; i++)
    ls[i] = (fh_worker_spec_t){.url = dep->url,
                               .kind = i ? await_kind : &fh_kind_latch_down,
                               .lock_name = i ? LATCH ":open" : LATCH ":down",
                               .reconnect_max_ms = 500,
                               .wait_ms = 60000,
                               .hold_ms = i ? 0 : -1,
                               .iterations = i ? 1 : 0};
  fh_family_set(dep->url, &fh_kind_latch_down, LATCH ":down", LATCH_COUNT);
  fh_pool_t p;
  fh_pool_init(&p);
  for (int i = 0; i < NWORKERS; i++) fh_spawn(&p, &ls[i]);
  /* every awaiter made its client and called await before the fault (a
   * client made against a stopped master fails its handshake) */
  for (int i = 1; i < NWORKERS; i++) fh_await(&p, i, HK_ATTEMPT, 20000);
  fh_event_t e = fh_await(&p, 0, HK_ENTER, 20000); /* the first count-down returned */
  int64_t t_fault = 0, t_promoted = 0, t_back = 0;
  int promoted_port = 0;
  for (int step = 1; step < LATCH_COUNT; step++) {
    if (step == LATCH_COUNT / 2) {
      kill(old->pid, SIGSTOP);
      CHECK(th_wait_until(stopped, (void *)(intptr_t)old->pid, 10000));
      t_fault = hist_now_ns();
    }
    fh_send(&p, 0, FH_CMD_EXIT); /* the next count-down */
    if (step == LATCH_COUNT / 2) {
      promoted_t pw = {old->port, NULL};
      drive_until(&p, 0, promoted, &pw, "a failover");
      t_promoted = hist_now_ns();
      promoted_port = pw.m->port;
    }
    e = fh_await_since(&p, 0, HK_ENTER, e.t_ns, 60000); /* this step returned (a failed one: the next began) */
    if (step == LATCH_COUNT / 2) {
      int64_t t_cont = hist_now_ns();
      t_back = e.t_ns;
      kill(old->pid, SIGCONT);
      demoted_t d = {old};
      drive_until(&p, 0, is_replica, &d, "the old master turned into a replica");
      printf(
          "# the step under the fault returned %lld ms after the stop (promoted port %d after %lld ms); the old "
          "master a replica %lld ms after SIGCONT\n",
          (long long)((e.t_ns - t_fault) / 1000000), promoted_port, (long long)((t_promoted - t_fault) / 1000000),
          (long long)((hist_now_ns() - t_cont) / 1000000));
    }
  }
  /* every awaiter opened (counted, not consumed: a drive above may have
   * consumed an early one's event) */
  latch_open_t lo = {&p, NWORKERS - 1};
  if (!fh_drive(&p, 0, latch_all_open, &lo, 20000)) { /* where each one is, and the count */
    latch_dump(&p, t_fault);
    th_fail(__FILE__, __LINE__, "not every awaiter opened within 20 s (count now %lld)",
            (long long)fh_family_count(dep->url, &fh_kind_latch_down, LATCH ":down", NULL));
  }
  fh_pool_finish(&p, 20000);
  hist_report_t rep;
  int v = hist_check_latch(p.hist_path, LATCH ":down", LATCH ":open", LATCH_COUNT, &rep);
  printf("latch: %s\n", rep.msg);
  if (v != HIST_OK) {
    printf("# the latch's history (ms from the fault; promoted at %+.3f, the step back at %+.3f):\n",
           (double)(t_promoted - t_fault) / 1e6, (double)(t_back - t_fault) / 1e6);
    latch_dump(&p, t_fault);
  }
  int64_t left = fh_family_count(dep->url, &fh_kind_latch_down, LATCH ":down", NULL);
  char what[300];
  snprintf(what, sizeof what,
           "count %d, the master SIGSTOPped with count-down %d in flight: failover %lld ms, the step returned from "
           "the promoted replica %lld ms after the stop; %zu count-down calls; %zu of %d awaiters opened, "
           "%s; count %lld at the end",
           LATCH_COUNT, LATCH_COUNT / 2 + 1, (long long)((t_promoted - t_fault) / 1000000),
           (long long)((t_back - t_fault) / 1000000), rep.sections, rep.grants, NWORKERS - 1,
           rep.violations ? "SOME EARLY" : "none early", (long long)left);
  fh_result("master-sigstop-past-failover-then-sigcont", "sentinel", "count-down latch", what, rep.violations);
  CHECK_EQ(v, HIST_OK);
  CHECK_EQ(rep.grants, NWORKERS - 1);
  CHECK_EQ(left, 0);
  hist_report_free(&rep);
}

TEST(master_stopped) { failover_history(1); }
TEST(master_killed) { failover_history(0); }

/* TEST_ONLY=name[,name...] runs those tests alone (and only the deployments they need). */
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
  if (wanted("master_stopped") || wanted("latch_master_stopped") || wanted("master_killed")) {
    dep = th_sentinels_start("fhmaster", 2, 3);
    if (wanted("master_stopped")) RUN(master_stopped);             /* first: every node is back afterwards */
    if (wanted("latch_master_stopped")) RUN(latch_master_stopped); /* the same */
    if (wanted("master_killed")) RUN(master_killed);
    th_sentinels_stop(dep);
  }
  if (wanted("acking_replica_lost_too")) {
    dep = th_sentinels_start("fhhazard", 2, 3); /* a fresh deployment: nodes[0] the master */
    RUN(acking_replica_lost_too);
    th_sentinels_stop(dep);
  }
  return th_done();
}
