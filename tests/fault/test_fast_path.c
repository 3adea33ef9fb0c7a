/* test_fast_path.c -- the fast path (lib/fast.c) under a network fault: the
 * fault proxy holds back the replies of the client's fast connection, so a
 * fast call has run on the server while its caller has not read its answer.
 *
 * A renewal that reaches the server in that window finds the hold gone; the
 * I/O thread knows the unlock is in flight (the fast path's "releasing"
 * record) and must not report a loss, whatever the lock name's length (up
 * to RLOCK_NAME_MAX). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault_harness.h"
#include "proxy.h"

static th_server_t *srv;
static fp_proxy_t *px;
static char purl[64];

#define NAME "fastpx"

static rlock_client_t *client(int64_t watchdog_ms) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = purl;
  o.client_name = NAME;
  o.watchdog_timeout_ms = watchdog_ms;
  o.command_timeout_ms = 10000; /* the held answer is late, not lost */
  o.ping_interval_ms = 0;
  rlock_client_t *cl = NULL;
  int rc = rlock_client_new(&cl, &o);
  if (rc) th_fail(__FILE__, __LINE__, "client_new: %s: %s", rlock_err_name(rc), rlock_last_error());
  return cl;
}

static rlock_stats_t stats(rlock_client_t *c) {
  rlock_stats_t s;
  rlock_client_stats(c, &s);
  return s;
}

/* The server-side port (CLIENT LIST addr=) of the client's fast connection:
 * of the connections named NAME, subscribed to nothing, the newest (the
 * command connection is made first; the fast one at the first fast call). */
static int fast_port(void) {
  redisReply *r = th_cmd(srv, "CLIENT", "LIST", NULL);
  CHECK(r->type == REDIS_REPLY_STRING);
  long long best = -1;
  int port = 0, n = 0;
  for (char *line = r->str, *end; line && *line; line = end ? end + 1 : NULL) {
    end = strchr(line, '\n');
    if (end) *end = 0;
    char *a = strstr(line, " addr="), *id = strstr(line, "id=");
    if (strstr(line, " name=" NAME " ") && strstr(line, " sub=0 ") && strstr(line, " psub=0 ") && a && id) {
      long long v = atoll(id + 3);
      char *colon = strchr(a + 6, ':');
      n++;
      if (colon && v > best) best = v, port = atoi(colon + 1);
    }
  }
  th_reply_free(r);
  CHECK_MSG(n >= 2, "%d connections named " NAME " (the command and the fast one expected)", n);
  return port;
}

/* The worker: the holder (the fast path is per thread). It takes the lock
 * on the fast path, then unlocks when told to. */
typedef struct worker {
  rlock_lock_t *l;
  rlock_client_t *c;
  atomic_int step; /* 1 locked (fast), 2 go unlock, 3 unlocked */
  atomic_int fast; /* the lock and the unlock were fast */
  atomic_int rc;
} worker_t;

static void *worker(void *p) {
  worker_t *w = p;
  int rc = rlock_lock_lock(w->l, RLOCK_LEASE_WATCHDOG); /* through the I/O thread */
  if (!rc) rc = rlock_lock_unlock(w->l);                /* the thread now knows its count: 0 */
  uint64_t f0 = stats(w->c).fast_calls;
  if (!rc) rc = rlock_lock_lock(w->l, RLOCK_LEASE_WATCHDOG); /* on the fast connection */
  atomic_store(&w->fast, stats(w->c).fast_calls == f0 + 1);
  atomic_store(&w->rc, rc);
  atomic_store(&w->step, 1);
  if (rc) return NULL;
  while (atomic_load(&w->step) != 2) th_sleep_ms(1);
  f0 = stats(w->c).fast_calls;
  atomic_store(&w->rc, rlock_lock_unlock(w->l));
  if (stats(w->c).fast_calls != f0 + 1) atomic_store(&w->fast, 0);
  atomic_store(&w->step, 3);
  return NULL;
}

static int at_step(void *p) { return atomic_load(&((worker_t *)p)->step) == 1; }
static int key_gone(void *name) { return th_cmd_int(srv, "EXISTS", name, NULL) == 0; }

typedef struct reach {
  rlock_client_t *c;
  uint64_t want;
} reach_t;
static int renewals_reach(void *p) {
  reach_t *r = p;
  return stats(r->c).renewals >= r->want;
}

static int lost_calls(th_lost_t *lost) {
  pthread_mutex_lock(&lost->mu);
  int n = lost->calls;
  pthread_mutex_unlock(&lost->mu);
  return n;
}

static void renewal_meets_late_unlock(const char *name) {
  rlock_client_t *c = client(900); /* renewals every 300 ms */
  th_lost_t lost = TH_LOST_INIT;
  rlock_client_on_lost(c, th_lost_record, &lost);
  rlock_lock_t *l = th_lock(c, name);
  worker_t w = {.l = l, .c = c};
  pthread_t t;
  pthread_create(&t, NULL, worker, &w);
  CHECK_MSG(th_wait_until(at_step, &w, 5000), "the worker did not lock");
  CHECK_OK(atomic_load(&w.rc));
  CHECK_MSG(atomic_load(&w.fast), "the lock was not taken on the fast path");
  /* the watchdog knows the hold: a renewal of it was answered */
  CHECK_MSG(TH_STAT_REACHES(c, renewed_locks, stats(c).renewed_locks + 1, 5000), "the fast hold was not renewed");
  int port = fast_port();
  fp_hold_conn(px, port, FP_DOWN); /* the unlock runs on the server, its answer waits */
  atomic_store(&w.step, 2);
  CHECK_MSG(th_wait_until(key_gone, (void *)name, 5000), "the unlock did not run");
  /* two renewal rounds sent after the unlock ran: the first one's answer ('0') was read */
  reach_t r = {c, stats(c).renewals + 2};
  th_wait_until(renewals_reach, &r, 3000); /* on a loss the watchdog stops renewing: no wait for ever */
  int calls = lost_calls(&lost);
  fp_hold_conn(px, port, 0);
  pthread_join(t, NULL);
  CHECK_OK(atomic_load(&w.rc));
  CHECK_MSG(atomic_load(&w.fast), "the unlock did not go on the fast path");
  CHECK_MSG(calls == 0 && lost_calls(&lost) == 0, "%d lost callbacks for a hold unlocked normally", lost_calls(&lost));
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(renewal_meets_late_unlock_short_name) { renewal_meets_late_unlock("fastpx:short"); }

/* 2000 bytes (the limit is 64 KiB) */
TEST(renewal_meets_late_unlock_long_name) {
  static char name[2001];
  memcpy(name, "fastpx:long:", 12);
  memset(name + 12, 'n', sizeof name - 13);
  name[sizeof name - 1] = 0;
  renewal_meets_late_unlock(name);
}

/* ------------------------------------------------------------ the count a thread keeps */

/* A thread that runs locks and unlocks of one lock when told (the fast
 * path's per-thread table is the thread's own). */
enum { A_IDLE, A_LOCK, A_UNLOCK, A_QUIT };
typedef struct actor {
  rlock_lock_t *l;
  rlock_client_t *c;
  atomic_int cmd, busy;
  atomic_int rc, fast; /* the last call's result; whether it was fast */
  atomic_llong tid;
  pthread_t t;
} actor_t;

static void *actor_main(void *p) {
  actor_t *a = p;
  atomic_store(&a->tid, (long long)th_gettid());
  for (;;) {
    int cmd = atomic_load(&a->cmd);
    if (cmd == A_IDLE) {
      th_sleep_ms(1);
      continue;
    }
    if (cmd == A_QUIT) return NULL;
    uint64_t f0 = stats(a->c).fast_calls;
    int rc = cmd == A_LOCK ? rlock_lock_lock(a->l, RLOCK_LEASE_WATCHDOG) : rlock_lock_unlock(a->l);
    atomic_store(&a->fast, stats(a->c).fast_calls > f0);
    atomic_store(&a->rc, rc);
    atomic_store(&a->cmd, A_IDLE);
  }
}

static int actor_idle(void *p) { return atomic_load(&((actor_t *)p)->cmd) == A_IDLE; }
static void actor_start(actor_t *a, int cmd) { atomic_store(&a->cmd, cmd); }
/* Runs cmd to its end; returns its result (*fast: whether it was fast). */
static int actor_run(actor_t *a, int cmd, int *fast) {
  actor_start(a, cmd);
  CHECK_MSG(th_wait_until(actor_idle, a, 15000), "the actor's call did not end");
  if (fast) *fast = atomic_load(&a->fast);
  return atomic_load(&a->rc);
}

/* A thread holds the lock once (taken on the fast path) and locks it again
 * on the fast path; the request is held back by the proxy while another
 * thread force-unlocks the lock (a lost callback: FORCE_UNLOCKED). The
 * request then runs: the thread holds the lock once. Its unlock must free it
 * as an unlock, with no second lost callback (the count the thread's table
 * had before the force unlock is not the server's any more). */
TEST(force_unlock_during_a_fast_lock) {
  const char *name = "fastpx:force";
  rlock_client_t *c = client(30000);
  th_lost_t lost = TH_LOST_INIT;
  rlock_client_on_lost(c, th_lost_record, &lost);
  rlock_lock_t *l = th_lock(c, name);
  actor_t a = {.l = l, .c = c};
  pthread_create(&a.t, NULL, actor_main, &a);
  int fast;
  CHECK_OK(actor_run(&a, A_LOCK, NULL));
  CHECK_OK(actor_run(&a, A_UNLOCK, NULL)); /* the thread knows its count: 0 */
  CHECK_OK(actor_run(&a, A_LOCK, &fast));
  CHECK_MSG(fast, "the lock was not taken on the fast path");
  uint64_t owner = RLOCK_OWNER_THREAD | (uint64_t)atomic_load(&a.tid);
  char o[128];
  th_owner_id(c, owner, o, sizeof o);
  int port = fast_port();
  fp_hold_conn(px, port, FP_UP);
  uint64_t a0 = stats(c).acquire_attempts;
  actor_start(&a, A_LOCK);                                                                 /* held back */
  CHECK_MSG(TH_STAT_REACHES(c, acquire_attempts, a0 + 1, 5000), "the lock was not tried"); /* on its way */
  int was = 0;
  CHECK_OK(rlock_lock_force_unlock(l, &was));
  CHECK_EQ(was, 1);
  CHECK_MSG(th_wait_until(th_lost_once, &lost, 5000), "no lost callback for the force unlock");
  CHECK_EQ(th_cmd_int(srv, "EXISTS", name, NULL), 0);
  fp_hold_conn(px, port, 0);
  CHECK_MSG(th_wait_until(actor_idle, &a, 15000), "the lock did not end");
  CHECK_OK(atomic_load(&a.rc));
  CHECK_MSG(atomic_load(&a.fast), "the lock was not fast");
  CHECK_EQ(th_hget_num(srv, name, o), 1);
  CHECK_OK(actor_run(&a, A_UNLOCK, NULL));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", name, NULL), 0);
  CHECK_RC(actor_run(&a, A_UNLOCK, NULL), RLOCK_ENOTHELD);
  int calls = lost_calls(&lost);
  CHECK_MSG(calls == 1, "%d lost callbacks (1 expected: the force unlock)", calls);
  actor_start(&a, A_QUIT);
  pthread_join(a.t, NULL);
  rlock_lock_free(l);
  rlock_client_free(c);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 60);
  srv = th_server_start(NULL);
  px = fp_start(srv->port);
  snprintf(purl, sizeof purl, "redis://127.0.0.1:%d", fp_port(px));
  RUN(renewal_meets_late_unlock_short_name);
  RUN(renewal_meets_late_unlock_long_name);
  RUN(force_unlock_during_a_fast_lock);
  fp_stop(px);
  th_server_stop(srv);
  return th_done();
}
