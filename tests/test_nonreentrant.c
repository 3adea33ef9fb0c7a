/* test_nonreentrant.c -- the non-reentrant lock (rlock_lock_new_nonreentrant,
 * kinds/nonreentrant.c, Redisson 4.4's getNonReentrantLock) against a real
 * redis-server:
 *   layout             RLock's hash (owner id -> 1), its TTL the lease; the
 *                      unlock deletes it and publishes "0" on
 *                      redisson_lock__channel:{NAME}
 *   reacquire_refused  Redisson's test: the holder's lock(), tryLock(0) and
 *                      tryLock(100 ms) fail at once (RLOCK_ENOTREENTRANT, a message
 *                      saying why), even with a wait forever: never a
 *                      self-deadlock; the count stays 1 and one unlock frees it
 *   two_handles        Redisson's test: two handles of one name, one thread:
 *                      the second handle's acquire is refused too
 *   contender_waits    Redisson's test: another thread blocks, and gets the
 *                      lock when the holder releases (woken by the message)
 *   shares_with_rlock  a reentrant handle of the same name: another owner's
 *                      hold is busy; the same owner's reentrant hold makes the
 *                      non-reentrant acquire EHELD
 *   watchdog_renews    a watchdog hold outlives several leases
 *   redisson_steps     cross-implementation: Redisson's non-reentrant acquire
 *                      (its script steps, written here from the reference) is
 *                      refused with NON_REENTRANT_REACQUIRE on rlock's hold of
 *                      the same owner id and gets PTTL for another; rlock's
 *                      acquire is busy on Redisson's hold, and Redisson's
 *                      unlock wakes the rlock waiter */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static th_server_t *srv;

#define JAVA_OWNER "5d9f6a2c-0b1e-4c3d-8e7f-9a0b1c2d3e4f:1"

/* Redisson 4.7's RedissonNonReentrantLock acquire: KEYS[1] name; ARGV lease,
 * lockName, "NON_REENTRANT_REACQUIRE". */
static const char *J_ACQUIRE =
    "if redis.call('exists', KEYS[1]) == 0 then "
    "  redis.call('hincrby', KEYS[1], ARGV[2], 1); "
    "  redis.call('pexpire', KEYS[1], ARGV[1]); "
    "  return nil; "
    "end; "
    "if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then "
    "  return redis.error_reply(ARGV[3]); "
    "end; "
    "return redis.call('pttl', KEYS[1]);";

/* RLock's unlock (inherited): KEYS name, channel, latch; ARGV 0, lease, lockName, publish, latch TTL. */
static const char *J_UNLOCK =
    "local val = redis.call('get', KEYS[3]); "
    "if val ~= false then return tonumber(val); end; "
    "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; end; "
    "local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); "
    "if (counter > 0) then "
    "  redis.call('pexpire', KEYS[1], ARGV[2]); "
    "  redis.call('set', KEYS[3], 0, 'px', ARGV[5]); "
    "  return 0; "
    "else "
    "  redis.call('del', KEYS[1]); "
    "  redis.call(ARGV[4], KEYS[2], ARGV[1]); "
    "  redis.call('set', KEYS[3], 1, 'px', ARGV[5]); "
    "  return 1; "
    "end;";

static rlock_lock_t *nr(rlock_client_t *c, const char *name) {
  rlock_lock_t *l = NULL;
  CHECK_OK(rlock_lock_new_nonreentrant(c, name, strlen(name), &l));
  return l;
}

static redisReply *java_acquire(const char *name, const char *owner) {
  const char *argv[] = {"EVAL", J_ACQUIRE, "1", name, "30000", owner, "NON_REENTRANT_REACQUIRE"};
  return th_cmdv(srv, 7, argv, NULL);
}

TEST(layout) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = nr(c, "nr:layout");
  CHECK_OK(rlock_lock_trylock(l, 0, 20000));
  char me[128];
  th_owner_id(c, RLOCK_OWNER_THREAD | (uint64_t)th_gettid(), me, sizeof me);
  redisReply *t = th_cmd(srv, "TYPE", "nr:layout", NULL);
  CHECK_STREQ(t->str, "hash");
  th_reply_free(t);
  CHECK_EQ(th_hget_num(srv, "nr:layout", me), 1);
  long long pttl = th_cmd_int(srv, "PTTL", "nr:layout", NULL);
  CHECK(pttl > 10000 && pttl <= 20000);
  int64_t count = 0;
  CHECK_OK(rlock_lock_hold_count(l, RLOCK_OWNER_SELF, &count));
  CHECK_EQ(count, 1);
  /* the unlock publishes "0" on RLock's channel: a raw subscriber sees it */
  redisContext *sub = th_raw_connect(srv);
  redisReply *r = redisCommand(sub, "SUBSCRIBE redisson_lock__channel:{nr:layout}");
  freeReplyObject(r);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK(redisGetReply(sub, (void **)&r) == REDIS_OK);
  CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 3);
  CHECK_STREQ(r->element[2]->str, "0");
  freeReplyObject(r);
  redisFree(sub);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "nr:layout", NULL), 0);
  CHECK_RC(rlock_lock_unlock(l), RLOCK_ENOTHELD);
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(reacquire_refused) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = nr(c, "nr:reenter");
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  CHECK_RC(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG), RLOCK_ENOTREENTRANT); /* wait forever: refused at once */
  CHECK_MSG(strstr(rlock_last_error(), "non-reentrant"), "message: %s", rlock_last_error());
  CHECK_RC(rlock_lock_trylock(l, 0, 30000), RLOCK_ENOTREENTRANT);
  CHECK_RC(rlock_lock_trylock(l, 100, 30000), RLOCK_ENOTREENTRANT);
  CHECK_STREQ(rlock_err_name(RLOCK_ENOTREENTRANT), "RLOCK_ENOTREENTRANT");
  /* the refused acquires changed nothing: count 1 here and on the server */
  int64_t count = 0;
  CHECK_OK(rlock_lock_hold_count(l, RLOCK_OWNER_SELF, &count));
  CHECK_EQ(count, 1);
  char me[128];
  th_owner_id(c, RLOCK_OWNER_THREAD | (uint64_t)th_gettid(), me, sizeof me);
  CHECK_EQ(th_hget_num(srv, "nr:reenter", me), 1);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "nr:reenter", NULL), 0);
  CHECK_RC(rlock_lock_unlock(l), RLOCK_ENOTHELD);
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  CHECK_EQ(st.held, 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

typedef struct res {
  atomic_int done;
  int status;
} res_t;

static void on_done(rlock_lock_t *l, int status, int64_t value, void *arg) {
  (void)l, (void)value;
  res_t *r = arg;
  r->status = status;
  atomic_store(&r->done, 1);
}

static int is_done(void *arg) { return atomic_load(&((res_t *)arg)->done); }

TEST(async_refused) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = nr(c, "nr:async");
  res_t a = {0};
  CHECK_OK(rlock_lock_acquire_async(l, 42, RLOCK_WAIT_FOREVER, 30000, NULL, on_done, &a));
  CHECK(th_wait_until(is_done, &a, 10000));
  CHECK_OK(a.status);
  res_t b = {0};
  CHECK_OK(rlock_lock_acquire_async(l, 42, RLOCK_WAIT_FOREVER, 30000, NULL, on_done, &b));
  CHECK(th_wait_until(is_done, &b, 10000));
  CHECK_RC(b.status, RLOCK_ENOTREENTRANT);
  CHECK_OK(rlock_lock_release(l, 42));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "nr:async", NULL), 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(two_handles) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *a = nr(c, "nr:two"), *b = nr(c, "nr:two");
  CHECK_OK(rlock_lock_trylock(a, 0, 30000));
  CHECK_RC(rlock_lock_trylock(b, 0, 30000), RLOCK_ENOTREENTRANT);
  CHECK_RC(rlock_lock_trylock(b, 500, 30000), RLOCK_ENOTREENTRANT);
  CHECK_RC(rlock_lock_trylock(a, 0, 30000), RLOCK_ENOTREENTRANT);
  CHECK_RC(rlock_lock_acquire(a, 7, 0, 30000, NULL), RLOCK_EBUSY); /* another owner: busy, not EHELD */
  CHECK_OK(rlock_lock_unlock(b));                                  /* the same owner: either handle releases */
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "nr:two", NULL), 0);
  rlock_lock_free(a);
  rlock_lock_free(b);
  rlock_client_free(c);
}

typedef struct waiter {
  rlock_lock_t *l;
  int rc;
  atomic_int started, done;
} waiter_t;

static void *wait_thread(void *arg) {
  waiter_t *w = arg;
  atomic_store(&w->started, 1);
  w->rc = rlock_lock_lock(w->l, 30000);
  if (w->rc == 0) w->rc = rlock_lock_unlock(w->l) == 0 ? 0 : -100;
  atomic_store(&w->done, 1);
  return NULL;
}

static int numsub_is_one(void *arg) { return th_numsub(srv, (const char *)arg) == 1; }
static int waiter_done(void *arg) { return atomic_load(&((waiter_t *)arg)->done); }

TEST(contender_waits) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = nr(c, "nr:contend");
  CHECK_OK(rlock_lock_lock(l, 60000));
  waiter_t w = {.l = l};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, wait_thread, &w) == 0);
  /* it waits on the channel (subscribed), not done */
  CHECK(th_wait_until(numsub_is_one, "redisson_lock__channel:{nr:contend}", 10000));
  CHECK_EQ(atomic_load(&w.done), 0);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK(th_wait_until(waiter_done, &w, 10000)); /* long before the 60 s lease */
  pthread_join(t, NULL);
  CHECK_OK(w.rc);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "nr:contend", NULL), 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(shares_with_rlock) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *n = nr(c, "nr:shared"), *r = th_lock(c, "nr:shared");
  CHECK_OK(rlock_lock_acquire(r, 9, 0, 30000, NULL)); /* another owner, reentrant handle */
  CHECK_RC(rlock_lock_trylock(n, 0, 30000), RLOCK_EBUSY);
  CHECK_OK(rlock_lock_release(r, 9));
  CHECK_OK(rlock_lock_trylock(r, 0, 30000)); /* this thread, reentrant handle */
  CHECK_RC(rlock_lock_trylock(n, 0, 30000), RLOCK_ENOTREENTRANT);
  CHECK_OK(rlock_lock_unlock(r));
  CHECK_OK(rlock_lock_trylock(n, 0, 30000));
  CHECK_RC(rlock_lock_acquire(r, 9, 0, 30000, NULL), RLOCK_EBUSY);
  CHECK_OK(rlock_lock_unlock(n));
  rlock_lock_free(n);
  rlock_lock_free(r);
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
  rlock_client_t *c = wd_client = th_client(srv->url, 600); /* lease 600 ms, renewed every 200 ms */
  rlock_lock_t *l = nr(c, "nr:watchdog");
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  CHECK(th_wait_until(renewed_twice, NULL, 10000));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "nr:watchdog", NULL), 1);
  long long pttl = th_cmd_int(srv, "PTTL", "nr:watchdog", NULL);
  CHECK(pttl > 0 && pttl <= 600);
  CHECK_OK(rlock_lock_unlock(l));
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(redisson_steps) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = nr(c, "nr:java");
  char me[128];
  th_owner_id(c, RLOCK_OWNER_THREAD | (uint64_t)th_gettid(), me, sizeof me);
  /* rlock holds: Redisson's acquire for the same owner id is refused with its error, count unchanged */
  CHECK_OK(rlock_lock_trylock(l, 0, 30000));
  redisReply *r = java_acquire("nr:java", me);
  CHECK(r->type == REDIS_REPLY_ERROR);
  CHECK_MSG(strstr(r->str, "NON_REENTRANT_REACQUIRE"), "reply: %s", r->str);
  th_reply_free(r);
  CHECK_EQ(th_hget_num(srv, "nr:java", me), 1);
  r = java_acquire("nr:java", JAVA_OWNER); /* another owner: PTTL */
  CHECK(r->type == REDIS_REPLY_INTEGER && r->integer > 0);
  th_reply_free(r);
  CHECK_OK(rlock_lock_unlock(l));
  /* Redisson holds: rlock waits, and Redisson's unlock message wakes it */
  r = java_acquire("nr:java", JAVA_OWNER);
  CHECK(r->type == REDIS_REPLY_NIL);
  th_reply_free(r);
  CHECK_RC(rlock_lock_trylock(l, 0, 30000), RLOCK_EBUSY);
  waiter_t w = {.l = l};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, wait_thread, &w) == 0);
  CHECK(th_wait_until(numsub_is_one, "redisson_lock__channel:{nr:java}", 10000));
  const char *argv[] = {"EVAL",
                        J_UNLOCK,
                        "3",
                        "nr:java",
                        "redisson_lock__channel:{nr:java}",
                        "redisson_unlock_latch:{nr:java}:0123456789abcdef0123456789abcdef",
                        "0",
                        "30000",
                        JAVA_OWNER,
                        "publish",
                        "16000"};
  r = th_cmdv(srv, 11, argv, NULL);
  CHECK(r->type == REDIS_REPLY_INTEGER && r->integer == 1);
  th_reply_free(r);
  CHECK(th_wait_until(waiter_done, &w, 10000)); /* woken by the message, not the 30 s TTL */
  pthread_join(t, NULL);
  CHECK_OK(w.rc);
  rlock_lock_free(l);
  rlock_client_free(c);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 120);
  srv = th_server_start(NULL);
  RUN(layout);
  RUN(reacquire_refused);
  RUN(async_refused);
  RUN(two_handles);
  RUN(contender_waits);
  RUN(shares_with_rlock);
  RUN(watchdog_renews);
  RUN(redisson_steps);
  th_server_stop(srv);
  return th_done();
}
