/* test_handoff.c -- the hand-off between user threads and the I/O thread
 * (docs/internals/hand-off.md): many threads x many sync calls on
 * one client, so that submissions land both while the loop is awake (no
 * eventfd write) and while it goes to sleep, and results come both before
 * and after their waiter sleeps (FUTEX_WAKE skipped or not). A lost wake-up
 * leaves a call waiting for ever: the main thread watches every call and
 * fails the test when one waits longer than any call can last (its retries'
 * command timeouts, four times over). The clients send no liveness PING:
 * its reply's read pass would rescue a lost wake-up. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "internal.h"

static th_server_t *srv;

#define COMMAND_TIMEOUT_MS 1000
#define RETRIES 1
/* No call lasts longer than its tries' timeouts; a generous margin for a loaded machine. */
#define STUCK_MS (4 * (RETRIES + 1) * COMMAND_TIMEOUT_MS + 5000)

typedef struct worker {
  rlock_client_t *c;
  int idx, iters;
  _Atomic int64_t call_since; /* ms when the current call began; 0 between calls */
  atomic_int calls;           /* sync calls done */
} worker_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int running;
static atomic_int async_done;

static void begin(worker_t *w) { atomic_store(&w->call_since, th_now_ms()); }
static void end(worker_t *w) {
  atomic_store(&w->call_since, 0);
  atomic_fetch_add(&w->calls, 1);
}

static void async_cb(rlock_lock_t *l, int status, int64_t value, void *arg) { atomic_fetch_add(&async_done, 1); }

/* Sync lock/unlock pairs on the worker's own name, a user command every 4th
 * round, an async query (not awaited here) every 8th. */
static void *worker_main(void *arg) {
  worker_t *w = arg;
  char name[64];
  snprintf(name, sizeof name, "handoff:%d", w->idx);
  rlock_lock_t *l = th_lock(w->c, name);
  const char *ping[] = {"PING"};
  for (int i = 0; i < w->iters; i++) {
    begin(w);
    CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
    end(w);
    if (i % 8 == 0) CHECK_OK(rlock_lock_is_locked_async(l, async_cb, NULL));
    begin(w);
    CHECK_OK(rlock_lock_unlock(l));
    end(w);
    if (i % 4 == 0) {
      rlock_reply_t *r = NULL;
      begin(w);
      CHECK_OK(rlock_client_command(w->c, 1, ping, NULL, &r));
      end(w);
      rlock_reply_free(r);
    }
  }
  rlock_lock_free(l);
  pthread_mutex_lock(&mu);
  running--;
  pthread_cond_signal(&cond);
  pthread_mutex_unlock(&mu);
  return NULL;
}

static int async_all_done(void *arg) { return atomic_load(&async_done) == *(int *)arg; }

/* Waits for the workers; fails as soon as one call waits longer than STUCK_MS. */
static void watch(worker_t *ws, int n) {
  pthread_mutex_lock(&mu);
  while (running > 0) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 1;
    pthread_cond_timedwait(&cond, &mu, &ts); /* woken by each worker's end; else a look every second */
    int64_t now = th_now_ms();
    for (int i = 0; i < n; i++) {
      int64_t since = atomic_load(&ws[i].call_since);
      CHECK_MSG(since == 0 || now - since < STUCK_MS,
                "thread %d: a sync call has waited %lld ms (after %d calls): a lost wake-up", i,
                (long long)(now - since), atomic_load(&ws[i].calls));
    }
  }
  pthread_mutex_unlock(&mu);
}

static rlock_client_t *new_client(void) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = srv->url;
  o.command_timeout_ms = COMMAND_TIMEOUT_MS;
  o.retry_attempts = RETRIES;
  o.ping_interval_ms = 0;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  return c;
}

static void run_workers(int nthreads, int iters) {
  rlock_client_t *c = new_client();
  worker_t *ws = calloc((size_t)nthreads, sizeof *ws);
  pthread_t *th = calloc((size_t)nthreads, sizeof *th);
  CHECK(ws && th);
  atomic_store(&async_done, 0);
  running = nthreads;
  for (int i = 0; i < nthreads; i++) {
    ws[i].c = c;
    ws[i].idx = i;
    ws[i].iters = iters;
    CHECK_EQ(pthread_create(&th[i], NULL, worker_main, &ws[i]), 0);
  }
  watch(ws, nthreads);
  for (int i = 0; i < nthreads; i++) pthread_join(th[i], NULL);
  int calls = 0;
  for (int i = 0; i < nthreads; i++) calls += atomic_load(&ws[i].calls);
  CHECK_EQ(calls, nthreads * (2 * iters + (iters + 3) / 4));
  int want_async = nthreads * ((iters + 7) / 8);
  CHECK_MSG(th_wait_until(async_all_done, &want_async, STUCK_MS), "async calls done: %d of %d",
            atomic_load(&async_done), want_async);
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  CHECK_EQ(st.held, 0);
  rlock_client_free(c);
  free(ws);
  free(th);
}

/* One thread: each submission races the loop going back to sleep. */
TEST(one_thread_ping_pong) { run_workers(1, 5000); }

/* Many threads: submissions land during read passes, wake passes and sleep. */
TEST(many_threads) { run_workers(32, 600); }

/* An async call submitted from a callback, on the I/O thread, during a read
 * pass: the loop is awake, so no eventfd is written and only the pass's last
 * look at the submit stack can start it. A chain of them. */
#define CHAIN 2000
typedef struct chain {
  rlock_lock_t *l;
  int links;  /* callbacks run (under mu) */
  int failed; /* a status that is not 0 */
} chain_t;

static void chain_cb(rlock_lock_t *l, int status, int64_t value, void *arg) {
  chain_t *ch = arg;
  pthread_mutex_lock(&mu);
  if (status != 0) ch->failed = status;
  bool more = ++ch->links < CHAIN && !ch->failed;
  pthread_cond_signal(&cond);
  pthread_mutex_unlock(&mu);
  if (more && rlock_lock_is_locked_async(l, chain_cb, ch) != 0) {
    pthread_mutex_lock(&mu);
    ch->failed = -1;
    pthread_cond_signal(&cond);
    pthread_mutex_unlock(&mu);
  }
}

TEST(async_from_callbacks) {
  rlock_client_t *c = new_client();
  chain_t ch = {.l = th_lock(c, "handoff:chain")};
  CHECK_OK(rlock_lock_is_locked_async(ch.l, chain_cb, &ch));
  /* Each link is one round trip: the chain advances within STUCK_MS, or a link was lost. */
  pthread_mutex_lock(&mu);
  while (ch.links < CHAIN && !ch.failed) {
    int before = ch.links;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += STUCK_MS / 1000;
    while (ch.links == before && !ch.failed && pthread_cond_timedwait(&cond, &mu, &ts) == 0) {
    }
    CHECK_MSG(ch.links != before || ch.failed, "the chain stopped after %d of %d links: a lost wake-up", before, CHAIN);
  }
  pthread_mutex_unlock(&mu);
  CHECK_EQ(ch.failed, 0);
  CHECK_EQ(ch.links, CHAIN);
  rlock_lock_free(ch.l);
  rlock_client_free(c);
}

/* A push that lands after a pass took the submit stack but before the pass
 * cleared cl->awake skips the eventfd (the loop is awake): only the pass's
 * last look at the stack can start it. The seam pushes one exactly there, in
 * the read pass of the last reply, after which nothing else happens on the
 * client (no PING, no timer): without the last look it waits for ever. */
static atomic_bool hook_armed;
static atomic_int late_done;
static rlock_lock_t *hook_lock;

static void late_cb(rlock_lock_t *l, int status, int64_t value, void *arg) {
  atomic_store(&late_done, status == 0 ? 1 : -1);
}

static void push_after_take(client_t *cl) {
  if (!atomic_exchange(&hook_armed, false)) return;
  if (rlock_lock_is_locked_async(hook_lock, late_cb, NULL) != 0) atomic_store(&late_done, -2);
}

static void arm_cb(rlock_lock_t *l, int status, int64_t value, void *arg) {
  atomic_store(&hook_armed, true); /* this read pass's end pushes the late call */
}

static int late_finished(void *arg) { return atomic_load(&late_done) != 0; }

TEST(push_between_take_and_sleep) {
  rlock__test_pass_hook = push_after_take; /* set while no I/O thread runs: it acts only when armed */
  rlock_client_t *c = new_client();
  hook_lock = th_lock(c, "handoff:late");
  for (int i = 0; i < 20; i++) {
    atomic_store(&late_done, 0);
    CHECK_OK(rlock_lock_is_locked_async(hook_lock, arm_cb, NULL));
    CHECK_MSG(th_wait_until(late_finished, NULL, STUCK_MS),
              "round %d: a call pushed between the pass's take and "
              "its end never started: a lost wake-up",
              i);
    CHECK_EQ(atomic_load(&late_done), 1);
  }
  rlock_lock_free(hook_lock);
  rlock_client_free(c);
  rlock__test_pass_hook = NULL;
}

/* rlock_client_free while another thread's call is between its push and its
 * eventfd write (the submit hook holds it there 200 ms): free waits until the
 * call has left the client's memory (before, it freed the client under it:
 * a write to a closed eventfd, a read of freed memory under ASan). */
static _Thread_local bool submit_held;
static atomic_bool hook_in, hook_out;

static void hold_submit(client_t *cl) {
  (void)cl;
  if (!submit_held) return;
  atomic_store(&hook_in, true);
  th_sleep_ms(200);
  atomic_store(&hook_out, true);
}

typedef struct held_call {
  rlock_client_t *c;
  int rc;
} held_call_t;

static void *held_call_main(void *arg) {
  held_call_t *h = arg;
  submit_held = true;
  const char *argv[1] = {"PING"};
  rlock_reply_t *r = NULL;
  h->rc = rlock_client_command(h->c, 1, argv, NULL, &r);
  rlock_reply_free(r);
  return NULL;
}

static int hook_entered(void *arg) { return atomic_load(&hook_in); }

TEST(free_waits_for_a_submit) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock__test_submit_hook = hold_submit; /* acts only on the thread that sets submit_held */
  held_call_t h = {c, -1000};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, held_call_main, &h) == 0);
  CHECK_MSG(th_wait_until(hook_entered, NULL, 5000), "the call never reached its push");
  rlock_client_free(c);
  bool left = atomic_load(&hook_out);
  pthread_join(t, NULL);
  rlock__test_submit_hook = NULL;
  CHECK_MSG(left, "rlock_client_free returned while a call was still between its push and its wake-up");
  CHECK_MSG(h.rc == 0 || h.rc == RLOCK_ECLOSED, "the held call ended with %s", rlock_err_name(h.rc));
}

int main(int argc, char **argv) {
  th_init(argc, argv, 280);
  srv = th_server_start(NULL);
  RUN(one_thread_ping_pong);
  RUN(many_threads);
  RUN(async_from_callbacks);
  RUN(push_between_take_and_sleep);
  RUN(free_waits_for_a_submit);
  th_server_stop(srv);
  return th_done();
}
