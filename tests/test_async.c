/* test_async.c -- the event-driven API: every *_async call completes by
 * calling its callback exactly once with the right status and value; an
 * async acquire with a wait completes when the holder unlocks; cancel tokens
 * end waits (sync and async) with RLOCK_ECANCELED and leave nothing held;
 * rejected calls never call back; sync calls from a callback fail with
 * RLOCK_EDEADLK; outstanding requests end with RLOCK_ECLOSED on free. */
#include <pthread.h>
#include <signal.h>
#include <unistd.h>
#include <string.h>

#include "harness.h"

static th_server_t *srv;
static rlock_client_t *cli;

/* One completion record per call; the callback fills it in. */
struct done {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int calls;
  int status;
  int64_t value;
  rlock_lock_t *lock;
  int sync_rc; /* a sync call made inside the callback (deadlock check) */
  int try_sync;
};

static void done_init(struct done *d) {
  memset(d, 0, sizeof *d);
  pthread_mutex_init(&d->mu, NULL);
  pthread_cond_init(&d->cv, NULL);
}

static void on_done(rlock_lock_t *lock, int status, int64_t value, void *arg) {
  struct done *d = arg;
  int sync_rc = 0;
  if (d->try_sync) {
    int v;
    sync_rc = rlock_lock_is_locked(lock, &v);
  }
  pthread_mutex_lock(&d->mu);
  d->calls++;
  d->status = status;
  d->value = value;
  d->lock = lock;
  d->sync_rc = sync_rc;
  pthread_cond_broadcast(&d->cv);
  pthread_mutex_unlock(&d->mu);
}

/* Waits for the first call (10 s at most); returns the number of calls. */
static int wait_done(struct done *d) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += 10;
  pthread_mutex_lock(&d->mu);
  while (d->calls == 0)
    if (pthread_cond_timedwait(&d->cv, &d->mu, &ts) != 0) break;
  int n = d->calls;
  pthread_mutex_unlock(&d->mu);
  return n;
}

static int calls_of(struct done *d) {
  pthread_mutex_lock(&d->mu);
  int n = d->calls;
  pthread_mutex_unlock(&d->mu);
  return n;
}

/* Every hold of the shared client was given back (or never taken). */
static void check_nothing_held(void) {
  rlock_stats_t st;
  rlock_client_stats(cli, &st);
  CHECK_EQ(st.held, 0);
}

/* Completes an async call and checks status/value and a single callback. */
#define EXPECT_DONE(d, want_status, want_value)                                                \
  do {                                                                                         \
    CHECK_MSG(wait_done(d) == 1, "callback not called");                                       \
    CHECK_MSG((d)->status == (want_status), "status %s, want %s", rlock_err_name((d)->status), \
              rlock_err_name(want_status));                                                    \
    CHECK_EQ((d)->value, (want_value));                                                        \
  } while (0)

TEST(every_call) {
  rlock_lock_t *l = th_lock(cli, "async:all");
  struct done d[9];
  for (int i = 0; i < 9; i++) done_init(&d[i]);
  char owner[128];
  th_owner_id(cli, 42, owner, sizeof owner);

  CHECK_OK(rlock_lock_acquire_async(l, 42, 0, 20000, NULL, on_done, &d[0]));
  EXPECT_DONE(&d[0], 0, 0);
  CHECK(d[0].lock == l);
  CHECK_EQ(th_hget_num(srv, "async:all", owner), 1);

  CHECK_OK(rlock_lock_is_locked_async(l, on_done, &d[1]));
  EXPECT_DONE(&d[1], 0, 1);
  CHECK_OK(rlock_lock_is_held_async(l, 42, on_done, &d[2]));
  EXPECT_DONE(&d[2], 0, 1);
  CHECK_OK(rlock_lock_is_held_async(l, 43, on_done, &d[3]));
  EXPECT_DONE(&d[3], 0, 0);
  CHECK_OK(rlock_lock_acquire_async(l, 42, 0, 20000, NULL, on_done, &d[4]));
  EXPECT_DONE(&d[4], 0, 0);
  CHECK_OK(rlock_lock_hold_count_async(l, 42, on_done, &d[5]));
  EXPECT_DONE(&d[5], 0, 2);
  CHECK_OK(rlock_lock_ttl_async(l, on_done, &d[6]));
  CHECK_MSG(wait_done(&d[6]) == 1, "ttl callback");
  CHECK_EQ(d[6].status, 0);
  CHECK(d[6].value > 15000 && d[6].value <= 20000);

  /* release: 0 = still held, then 1 = freed. */
  CHECK_OK(rlock_lock_release_async(l, 42, on_done, &d[7]));
  EXPECT_DONE(&d[7], 0, 0);
  CHECK_EQ(th_hget_num(srv, "async:all", owner), 1);
  CHECK_OK(rlock_lock_release_async(l, 42, on_done, &d[8]));
  EXPECT_DONE(&d[8], 0, 1);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "async:all", NULL), 0);

  /* Failures are reported through the callback too. */
  struct done e[4];
  for (int i = 0; i < 4; i++) done_init(&e[i]);
  CHECK_OK(rlock_lock_release_async(l, 42, on_done, &e[0]));
  EXPECT_DONE(&e[0], RLOCK_ENOTHELD, e[0].value);
  CHECK_OK(rlock_lock_ttl_async(l, on_done, &e[1]));
  EXPECT_DONE(&e[1], 0, -2);
  CHECK_OK(rlock_lock_force_unlock_async(l, on_done, &e[2]));
  EXPECT_DONE(&e[2], 0, 0);
  CHECK_OK(rlock_lock_acquire(l, 7, 0, 20000, NULL));
  CHECK_OK(rlock_lock_force_unlock_async(l, on_done, &e[3]));
  EXPECT_DONE(&e[3], 0, 1);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "async:all", NULL), 0);
  /* Owner 7's hold is gone; its unlock says so (and the client forgets it). */
  CHECK_RC(rlock_lock_release(l, 7), RLOCK_ENOTHELD);

  /* Exactly once: no late second call. */
  struct done last;
  done_init(&last);
  CHECK_OK(rlock_lock_is_locked_async(l, on_done, &last));
  EXPECT_DONE(&last, 0, 0);
  for (int i = 0; i < 9; i++) CHECK_EQ(calls_of(&d[i]), 1);
  for (int i = 0; i < 4; i++) CHECK_EQ(calls_of(&e[i]), 1);
  rlock_lock_free(l);
  check_nothing_held();
}

TEST(self_owner_is_calling_thread) {
  rlock_lock_t *l = th_lock(cli, "async:self");
  struct done d;
  done_init(&d);
  CHECK_OK(rlock_lock_acquire_async(l, RLOCK_OWNER_SELF, 0, 20000, NULL, on_done, &d));
  EXPECT_DONE(&d, 0, 0);
  char owner[128];
  th_owner_id(cli, RLOCK_OWNER_THREAD | (uint64_t)th_gettid(), owner, sizeof owner);
  CHECK_EQ(th_hget_num(srv, "async:self", owner), 1);
  int v = 0;
  CHECK_OK(rlock_lock_is_held(l, RLOCK_OWNER_SELF, &v));
  CHECK_EQ(v, 1);
  struct done r;
  done_init(&r);
  CHECK_OK(rlock_lock_release_async(l, RLOCK_OWNER_SELF, on_done, &r));
  EXPECT_DONE(&r, 0, 1);
  rlock_lock_free(l);
  check_nothing_held();
}

static int subscribed(void *chan) { return th_numsub(srv, chan) >= 1; }

TEST(acquire_waits_for_unlock) {
  rlock_client_t *other = th_client(srv->url, 0);
  rlock_lock_t *h = th_lock(other, "async:wait"), *l = th_lock(cli, "async:wait");
  CHECK_OK(rlock_lock_lock(h, RLOCK_LEASE_WATCHDOG));
  struct done d;
  done_init(&d);
  CHECK_OK(rlock_lock_acquire_async(l, 5, 20000, RLOCK_LEASE_WATCHDOG, NULL, on_done, &d));
  /* Still waiting while the holder holds (subscribed for the wake-up). */
  CHECK(th_wait_until(subscribed, "redisson_lock__channel:{async:wait}", 10000));
  CHECK_EQ(calls_of(&d), 0);
  int64_t t0 = th_now_ms();
  CHECK_OK(rlock_lock_unlock(h));
  EXPECT_DONE(&d, 0, 0);
  CHECK_MSG(th_now_ms() - t0 < 2000, "acquired %lld ms after the unlock", (long long)(th_now_ms() - t0));
  char owner[128];
  th_owner_id(cli, 5, owner, sizeof owner);
  CHECK_EQ(th_hget_num(srv, "async:wait", owner), 1);
  CHECK_OK(rlock_lock_release(l, 5));

  /* A bounded async wait that runs out: RLOCK_EBUSY. */
  CHECK_OK(rlock_lock_lock(h, RLOCK_LEASE_WATCHDOG));
  struct done b;
  done_init(&b);
  t0 = th_now_ms();
  CHECK_OK(rlock_lock_acquire_async(l, 6, 400, 10000, NULL, on_done, &b));
  EXPECT_DONE(&b, RLOCK_EBUSY, b.value);
  CHECK(th_now_ms() - t0 >= 395);
  CHECK_OK(rlock_lock_unlock(h));
  rlock_lock_free(h);
  rlock_lock_free(l);
  rlock_client_free(other);
  check_nothing_held();
}

struct sync_wait {
  rlock_lock_t *lock;
  rlock_cancel_t *cancel;
  int rc;
};

static void *sync_waiter(void *p) {
  struct sync_wait *w = p;
  w->rc = rlock_lock_acquire(w->lock, 8, RLOCK_WAIT_FOREVER, RLOCK_LEASE_WATCHDOG, w->cancel);
  return NULL;
}

static void *trigger_thread(void *p) {
  rlock_cancel_trigger(p);
  return NULL;
}

TEST(cancel) {
  rlock_client_t *other = th_client(srv->url, 0);
  rlock_lock_t *h = th_lock(other, "async:cancel"), *l = th_lock(cli, "async:cancel");
  CHECK_OK(rlock_lock_lock(h, RLOCK_LEASE_WATCHDOG));
  char holder[128], mine[128];
  th_owner_id(other, RLOCK_OWNER_THREAD | (uint64_t)th_gettid(), holder, sizeof holder);
  th_owner_id(cli, 8, mine, sizeof mine);

  /* A sync wait, cancelled from another thread. */
  rlock_cancel_t *tok = NULL;
  CHECK_OK(rlock_cancel_new(&tok));
  CHECK_EQ(rlock_cancel_is_triggered(tok), 0);
  struct sync_wait w = {.lock = l, .cancel = tok};
  pthread_t t, tt;
  CHECK_EQ(pthread_create(&t, NULL, sync_waiter, &w), 0);
  CHECK(th_wait_until(subscribed, "redisson_lock__channel:{async:cancel}", 10000));
  int64_t t0 = th_now_ms();
  CHECK_EQ(pthread_create(&tt, NULL, trigger_thread, tok), 0);
  pthread_join(tt, NULL);
  pthread_join(t, NULL);
  CHECK_RC(w.rc, RLOCK_ECANCELED);
  /* Ended by the cancel, not by the holder (30 s lease, renewed): bound 5 s. */
  CHECK_MSG(th_now_ms() - t0 < 5000, "cancel took %lld ms", (long long)(th_now_ms() - t0));
  CHECK_EQ(rlock_cancel_is_triggered(tok), 1);
  CHECK_EQ(th_hget_num(srv, "async:cancel", mine), -1000);
  CHECK_EQ(th_hget_num(srv, "async:cancel", holder), 1);
  CHECK_EQ(th_cmd_int(srv, "HLEN", "async:cancel", NULL), 1);

  /* A triggered token ends the next wait at once. */
  t0 = th_now_ms();
  CHECK_RC(rlock_lock_acquire(l, 8, 10000, 10000, tok), RLOCK_ECANCELED);
  CHECK(th_now_ms() - t0 < 5000); /* not the 10 s wait bound */
  rlock_cancel_free(tok);

  /* An async wait, cancelled. */
  CHECK_OK(rlock_cancel_new(&tok));
  struct done d;
  done_init(&d);
  CHECK_OK(rlock_lock_acquire_async(l, 9, RLOCK_WAIT_FOREVER, 10000, tok, on_done, &d));
  CHECK(th_wait_until(subscribed, "redisson_lock__channel:{async:cancel}", 10000));
  CHECK_EQ(calls_of(&d), 0);
  rlock_cancel_trigger(tok);
  EXPECT_DONE(&d, RLOCK_ECANCELED, d.value);
  int v = 1;
  CHECK_OK(rlock_lock_is_held(l, 9, &v));
  CHECK_EQ(v, 0);
  rlock_cancel_free(tok);

  /* After the holder unlocks, nothing of ours shows up (no late acquire). */
  CHECK_OK(rlock_lock_unlock(h));
  th_sleep_ms(300); /* the scenario: a window in which a late acquire would show */
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "async:cancel", NULL), 0);
  rlock_stats_t st;
  rlock_client_stats(cli, &st);
  CHECK_EQ(st.held, 0);
  CHECK_EQ(calls_of(&d), 1);
  rlock_lock_free(h);
  rlock_lock_free(l);
  rlock_client_free(other);
}

static rlock_cancel_t *sig_token;
static void on_sigusr1(int sig) {
  (void)sig;
  rlock_cancel_trigger(sig_token); /* async-signal-safe by contract */
}

TEST(cancel_from_signal_handler) {
  rlock_client_t *other = th_client(srv->url, 0);
  rlock_lock_t *h = th_lock(other, "async:signal"), *l = th_lock(cli, "async:signal");
  CHECK_OK(rlock_lock_lock(h, RLOCK_LEASE_WATCHDOG));
  CHECK_OK(rlock_cancel_new(&sig_token));
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigusr1;
  sigemptyset(&sa.sa_mask);
  CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
  struct sync_wait w = {.lock = l, .cancel = sig_token};
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, sync_waiter, &w), 0);
  CHECK(th_wait_until(subscribed, "redisson_lock__channel:{async:signal}", 10000));
  CHECK(kill(getpid(), SIGUSR1) == 0);
  pthread_join(t, NULL);
  CHECK_RC(w.rc, RLOCK_ECANCELED);
  CHECK_EQ(th_cmd_int(srv, "HLEN", "async:signal", NULL), 1);
  signal(SIGUSR1, SIG_DFL);
  rlock_cancel_free(sig_token);
  CHECK_OK(rlock_lock_unlock(h));
  rlock_lock_free(h);
  rlock_lock_free(l);
  rlock_client_free(other);
  check_nothing_held();
}

TEST(rejected_calls_never_call_back) {
  rlock_lock_t *l = th_lock(cli, "async:rejected");
  struct done d;
  done_init(&d);
  CHECK_RC(rlock_lock_acquire_async(l, 1, 0, 0, NULL, on_done, &d), RLOCK_EINVAL);
  CHECK_RC(rlock_lock_acquire_async(l, 1, -5, 1000, NULL, on_done, &d), RLOCK_EINVAL);
  CHECK_RC(rlock_lock_acquire_async(NULL, 1, 0, 1000, NULL, on_done, &d), RLOCK_EINVAL);
  CHECK_RC(rlock_lock_release_async(NULL, 1, on_done, &d), RLOCK_EINVAL);
  /* A later request's callback runs, so the rejected ones would have too. */
  struct done ok;
  done_init(&ok);
  CHECK_OK(rlock_lock_is_locked_async(l, on_done, &ok));
  EXPECT_DONE(&ok, 0, 0);
  CHECK_EQ(calls_of(&d), 0);
  rlock_lock_free(l);
  check_nothing_held();
}

TEST(sync_call_in_callback) {
  rlock_lock_t *l = th_lock(cli, "async:deadlk");
  struct done d;
  done_init(&d);
  d.try_sync = 1;
  CHECK_OK(rlock_lock_is_locked_async(l, on_done, &d));
  EXPECT_DONE(&d, 0, 0);
  CHECK_RC(d.sync_rc, RLOCK_EDEADLK);
  rlock_lock_free(l);
  check_nothing_held();
}

TEST(free_completes_outstanding) {
  rlock_client_t *holder = th_client(srv->url, 0), *c = th_client(srv->url, 0);
  rlock_lock_t *h = th_lock(holder, "async:closed"), *l = th_lock(c, "async:closed");
  CHECK_OK(rlock_lock_lock(h, RLOCK_LEASE_WATCHDOG));
  struct done d;
  done_init(&d);
  CHECK_OK(rlock_lock_acquire_async(l, 3, RLOCK_WAIT_FOREVER, 10000, NULL, on_done, &d));
  CHECK(th_wait_until(subscribed, "redisson_lock__channel:{async:closed}", 10000));
  rlock_client_free(c);
  CHECK_EQ(calls_of(&d), 1);
  CHECK_RC(d.status, RLOCK_ECLOSED);
  rlock_lock_free(l);
  CHECK_OK(rlock_lock_unlock(h));
  rlock_lock_free(h);
  rlock_client_free(holder);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 110);
  srv = th_server_start(NULL);
  cli = th_client(srv->url, 0);
  RUN(every_call);
  RUN(self_owner_is_calling_thread);
  RUN(acquire_waits_for_unlock);
  RUN(cancel);
  RUN(cancel_from_signal_handler);
  RUN(rejected_calls_never_call_back);
  RUN(sync_call_in_callback);
  rlock_client_free(cli);
  RUN(free_completes_outstanding);
  th_server_stop(srv);
  return th_done();
}
