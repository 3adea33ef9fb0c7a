/* test_spin.c -- the spin lock (rlock_lock_new_spin, kinds/spin.c, Redisson's
 * RSpinLock) against a real redis-server:
 *   layout_no_pubsub   RLock's hash; acquire, a waiter's wait, unlock and
 *                      force unlock neither subscribe nor publish
 *   reentrancy         Redisson's test: re-entry adds to the hold count, each
 *                      unlock takes one; another owner's unlock fails
 *   try_lock_wait      Redisson's testTryLockWait: a try with a wait against a
 *                      held lock ends RLOCK_EBUSY no sooner than the wait
 *   backoff_no_flood   a waiter against a held lock for 1 s tries a few times
 *                      (Redisson's defaults: about 15), never a flood; a
 *                      constant backoff of 300 ms tries at most 5 times
 *   contender_polls    another thread gets the lock after the release by
 *                      polling (no message), long before the holder's TTL
 *   redisson_steps     cross-implementation: Redisson's spin unlock (RLock's
 *                      steps, no PUBLISH; from the reference) releases rlock's
 *                      hold of that owner id; an rlock spin waiter gets the
 *                      lock after Redisson's unlock of its own hold; RLock's
 *                      acquire is busy on a spin hold
 *   watchdog_renews    a watchdog hold outlives several leases
 *   bad_backoff        invalid backoffs: RLOCK_EINVAL, nothing made
 *   async_wait_time    Redisson's testTryLockAsyncWaitTime (#5002): an async
 *                      try with a 1 s wait ends RLOCK_EBUSY no sooner than 1 s
 *   redis_failed       Redisson's testRedisFailed: with the server gone a
 *                      bounded try fails with a connection error, not a hang */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static th_server_t *srv;

#define JAVA_OWNER "5d9f6a2c-0b1e-4c3d-8e7f-9a0b1c2d3e4f:1"

/* Redisson 4.7's RedissonSpinLock acquire (RLock's): KEYS name; ARGV lease, lockName. */
static const char *J_ACQUIRE =
    "if (redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then "
    "  redis.call('hincrby', KEYS[1], ARGV[2], 1); "
    "  redis.call('pexpire', KEYS[1], ARGV[1]); "
    "  return nil; "
    "end; "
    "return redis.call('pttl', KEYS[1]);";

/* Redisson 4.7's spin unlock: KEYS name, latch; ARGV lease, lockName, latch TTL; no publish. */
static const char *J_UNLOCK =
    "local val = redis.call('get', KEYS[2]); "
    "if val ~= false then return tonumber(val); end; "
    "if (redis.call('hexists', KEYS[1], ARGV[2]) == 0) then return nil; end; "
    "local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1); "
    "if (counter > 0) then "
    "  redis.call('pexpire', KEYS[1], ARGV[1]); "
    "  redis.call('set', KEYS[2], 0, 'px', ARGV[3]); "
    "  return 0; "
    "else "
    "  redis.call('del', KEYS[1]); "
    "  redis.call('set', KEYS[2], 1, 'px', ARGV[3]); "
    "  return 1; "
    "end;";

static rlock_lock_t *spin(rlock_client_t *c, const char *name, const rlock_backoff_t *b) {
  rlock_lock_t *l = NULL;
  CHECK_OK(rlock_lock_new_spin(c, name, strlen(name), b, &l));
  return l;
}

static long long publishes(void) { return th_cmdstat(srv, "publish") + th_cmdstat(srv, "spublish"); }

typedef struct waiter {
  rlock_lock_t *l;
  int64_t wait_ms;
  int rc;
  atomic_int done;
} waiter_t;

static void *wait_thread(void *arg) {
  waiter_t *w = arg;
  w->rc = rlock_lock_trylock(w->l, w->wait_ms, 30000);
  if (w->rc == 0) w->rc = rlock_lock_unlock(w->l) == 0 ? 0 : -100;
  atomic_store(&w->done, 1);
  return NULL;
}

static int waiter_done(void *arg) { return atomic_load(&((waiter_t *)arg)->done); }

static rlock_client_t *stat_client;
static uint64_t attempts_at_least;
static int attempts_reach(void *arg) {
  (void)arg;
  rlock_stats_t st;
  rlock_client_stats(stat_client, &st);
  return st.acquire_attempts >= attempts_at_least;
}

TEST(layout_no_pubsub) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = spin(c, "spin:layout", NULL);
  long long p0 = publishes();
  CHECK_OK(rlock_lock_trylock(l, 0, 20000));
  char me[128];
  th_owner_id(c, RLOCK_OWNER_THREAD | (uint64_t)th_gettid(), me, sizeof me);
  CHECK_EQ(th_hget_num(srv, "spin:layout", me), 1);
  long long pttl = th_cmd_int(srv, "PTTL", "spin:layout", NULL);
  CHECK(pttl > 10000 && pttl <= 20000);
  /* a waiter of another client polls: it never subscribes */
  rlock_client_t *c2 = stat_client = th_client(srv->url, 0);
  rlock_lock_t *l2 = spin(c2, "spin:layout", NULL);
  waiter_t w = {.l = l2, .wait_ms = 30000};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, wait_thread, &w) == 0);
  attempts_at_least = 3;
  CHECK(th_wait_until(attempts_reach, NULL, 10000));
  CHECK_EQ(th_numsub(srv, "redisson_lock__channel:{spin:layout}"), 0);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK(th_wait_until(waiter_done, &w, 10000));
  pthread_join(t, NULL);
  CHECK_OK(w.rc);
  rlock_stats_t st;
  rlock_client_stats(c2, &st);
  CHECK_EQ(st.subscribes, 0);
  CHECK_OK(rlock_lock_trylock(l, 0, 20000));
  int was = 0;
  CHECK_OK(rlock_lock_force_unlock(l, &was));
  CHECK_EQ(was, 1);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "spin:layout", NULL), 0);
  CHECK_EQ(publishes(), p0); /* neither unlock nor force unlock published */
  rlock_client_stats(c, &st);
  CHECK_EQ(st.subscribes, 0);
  rlock_lock_free(l2);
  rlock_client_free(c2);
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(reentrancy) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = spin(c, "spin:reenter", NULL);
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  int64_t count = 0;
  CHECK_OK(rlock_lock_hold_count(l, RLOCK_OWNER_SELF, &count));
  CHECK_EQ(count, 2);
  int held = 0, locked = 0;
  CHECK_OK(rlock_lock_is_held(l, RLOCK_OWNER_SELF, &held));
  CHECK_OK(rlock_lock_is_locked(l, &locked));
  CHECK(held == 1 && locked == 1);
  CHECK_RC(rlock_lock_release(l, 5), RLOCK_ENOTHELD); /* unlockFail: another owner */
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "spin:reenter", NULL), 1);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "spin:reenter", NULL), 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(try_lock_wait) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = spin(c, "spin:trywait", NULL);
  CHECK_OK(rlock_lock_acquire(l, 1, 0, 30000, NULL));
  int64_t t0 = th_now_ms();
  CHECK_RC(rlock_lock_acquire(l, 2, 1000, 30000, NULL), RLOCK_EBUSY);
  int64_t took = th_now_ms() - t0;
  CHECK_MSG(took >= 1000, "gave up after %lld ms", (long long)took);
  printf("# tryLock(1000 ms) gave up after %lld ms\n", (long long)took);
  CHECK_OK(rlock_lock_release(l, 1));
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(backoff_no_flood) {
  rlock_client_t *c = stat_client = th_client(srv->url, 0);
  rlock_lock_t *l = spin(c, "spin:flood", NULL);
  CHECK_OK(rlock_lock_acquire(l, 1, 0, 30000, NULL));
  rlock_stats_t a, b;
  rlock_client_stats(c, &a);
  CHECK_RC(rlock_lock_acquire(l, 2, 1000, 30000, NULL), RLOCK_EBUSY);
  rlock_client_stats(c, &b);
  uint64_t n = b.acquire_attempts - a.acquire_attempts;
  printf("# defaults: %llu tries in a 1000 ms wait\n", (unsigned long long)n);
  CHECK_MSG(n >= 2 && n <= 30, "%llu tries", (unsigned long long)n); /* 1+2+4+...+128 > 250 ms: about 15 */
  rlock_backoff_t k = {300, 300, 1};                                 /* constant 300 ms */
  rlock_lock_t *l2 = spin(c, "spin:flood", &k);
  rlock_client_stats(c, &a);
  CHECK_RC(rlock_lock_acquire(l2, 2, 1000, 30000, NULL), RLOCK_EBUSY);
  rlock_client_stats(c, &b);
  n = b.acquire_attempts - a.acquire_attempts;
  printf("# constant 300 ms: %llu tries in a 1000 ms wait\n", (unsigned long long)n);
  CHECK_MSG(n >= 2 && n <= 5, "%llu tries", (unsigned long long)n); /* at 0, 300, 600, 900, 1000 ms */
  CHECK_OK(rlock_lock_release(l, 1));
  rlock_lock_free(l2);
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(contender_polls) {
  rlock_client_t *c = stat_client = th_client(srv->url, 0);
  rlock_lock_t *l = spin(c, "spin:contend", NULL);
  CHECK_OK(rlock_lock_lock(l, 60000));
  waiter_t w = {.l = l, .wait_ms = RLOCK_WAIT_FOREVER};
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  attempts_at_least = st.acquire_attempts + 3;
  pthread_t t;
  CHECK(pthread_create(&t, NULL, wait_thread, &w) == 0);
  CHECK(th_wait_until(attempts_reach, NULL, 10000)); /* it is polling */
  CHECK_EQ(atomic_load(&w.done), 0);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK(th_wait_until(waiter_done, &w, 10000)); /* long before the 60 s lease */
  pthread_join(t, NULL);
  CHECK_OK(w.rc);
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(redisson_steps) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = spin(c, "spin:java", NULL);
  char me[128];
  th_owner_id(c, RLOCK_OWNER_THREAD | (uint64_t)th_gettid(), me, sizeof me);
  CHECK_OK(rlock_lock_trylock(l, 0, 30000));
  const char *acq[] = {"EVAL", J_ACQUIRE, "1", "spin:java", "30000", JAVA_OWNER};
  redisReply *r = th_cmdv(srv, 6, acq, NULL); /* Redisson's spin (or RLock) acquire: busy */
  CHECK(r->type == REDIS_REPLY_INTEGER && r->integer > 0);
  th_reply_free(r);
  long long p0 = publishes();
  const char *unl[] = {
      "EVAL",  J_UNLOCK, "2",    "spin:java", "redisson_unlock_latch:{spin:java}:0123456789abcdef0123456789abcdef",
      "30000", me,       "16000"};
  r = th_cmdv(srv, 8, unl, NULL); /* Redisson's spin unlock of this owner id releases rlock's hold */
  CHECK(r->type == REDIS_REPLY_INTEGER && r->integer == 1);
  th_reply_free(r);
  CHECK_EQ(publishes(), p0);
  /* Redisson holds; an rlock spin waiter gets it after Redisson's silent unlock */
  r = th_cmdv(srv, 6, acq, NULL);
  CHECK(r->type == REDIS_REPLY_NIL);
  th_reply_free(r);
  waiter_t w = {.l = l, .wait_ms = 20000};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, wait_thread, &w) == 0);
  const char *unl2[] = {
      "EVAL",  J_UNLOCK,   "2",    "spin:java", "redisson_unlock_latch:{spin:java}:fedcba9876543210fedcba9876543210",
      "30000", JAVA_OWNER, "16000"};
  r = th_cmdv(srv, 8, unl2, NULL);
  CHECK(r->type == REDIS_REPLY_INTEGER && r->integer == 1);
  th_reply_free(r);
  CHECK(th_wait_until(waiter_done, &w, 10000)); /* by polling: Redisson's 30 s TTL is not waited for */
  pthread_join(t, NULL);
  CHECK_OK(w.rc);
  rlock_lock_free(l);
  rlock_client_free(c);
}

static rlock_client_t *wd_client;
static int renewed_twice(void *arg) {
  (void)arg;
  rlock_stats_t st;
  rlock_client_stats(wd_client, &st);
  return st.renewed_locks >= 2;
}

TEST(watchdog_renews) {
  rlock_client_t *c = wd_client = th_client(srv->url, 600);
  rlock_lock_t *l = spin(c, "spin:watchdog", NULL);
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  CHECK(th_wait_until(renewed_twice, NULL, 10000));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "spin:watchdog", NULL), 1);
  CHECK_OK(rlock_lock_unlock(l));
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(bad_backoff) {
  rlock_client_t *c = th_client(srv->url, 0);
  const rlock_backoff_t bad[] = {{0, 128, 2}, {10, 5, 2}, {1, 128, 0}, {1, 128, 1001}, {1, RLOCK_DURATION_MAX + 1, 2}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    rlock_lock_t *l = (rlock_lock_t *)1;
    CHECK_RC(rlock_lock_new_spin(c, "spin:bad", 8, &bad[i], &l), RLOCK_EINVAL);
    CHECK(l == NULL);
  }
  CHECK_MSG(strstr(rlock_last_error(), "backoff"), "message: %s", rlock_last_error());
  rlock_client_free(c);
}

typedef struct res {
  atomic_int done;
  int status;
  int64_t at;
} res_t;
static void on_done(rlock_lock_t *l, int status, int64_t value, void *arg) {
  (void)l, (void)value;
  res_t *r = arg;
  r->status = status;
  r->at = th_now_ms();
  atomic_store(&r->done, 1);
}
static int is_done(void *arg) { return atomic_load(&((res_t *)arg)->done); }

TEST(async_wait_time) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = spin(c, "spin:async", NULL);
  CHECK_OK(rlock_lock_acquire(l, 1, 0, 30000, NULL));
  res_t r = {0};
  int64_t t0 = th_now_ms();
  CHECK_OK(rlock_lock_acquire_async(l, 2, 1000, 30000, NULL, on_done, &r));
  CHECK(th_wait_until(is_done, &r, 10000));
  CHECK_RC(r.status, RLOCK_EBUSY);
  CHECK_MSG(r.at - t0 >= 1000, "gave up after %lld ms", (long long)(r.at - t0));
  CHECK_OK(rlock_lock_release(l, 1));
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(redis_failed) {
  th_server_t *s = th_server_start(NULL);
  rlock_client_t *c = th_client(s->url, 0);
  rlock_lock_t *l = spin(c, "spin:failed", NULL);
  th_server_kill(s);
  int64_t t0 = th_now_ms();
  int rc = rlock_lock_trylock(l, 500, 30000);
  printf("# %s after %lld ms: %s\n", rlock_err_name(rc), (long long)(th_now_ms() - t0), rlock_last_error());
  CHECK_MSG(rc == RLOCK_ECONNECT || rc == RLOCK_ECONNLOST || rc == RLOCK_ETIMEDOUT, "rc %s", rlock_err_name(rc));
  rlock_lock_free(l);
  rlock_client_free(c);
  th_server_stop(s);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 120);
  srv = th_server_start(NULL);
  RUN(layout_no_pubsub);
  RUN(reentrancy);
  RUN(try_lock_wait);
  RUN(backoff_no_flood);
  RUN(contender_polls);
  RUN(redisson_steps);
  RUN(watchdog_renews);
  RUN(bad_backoff);
  RUN(async_wait_time);
  RUN(redis_failed);
  th_server_stop(srv);
  return th_done();
}
