/* test_fenced.c -- the fenced lock (rlock_lock_new_fenced, kinds/fenced.c,
 * Redisson's RFencedLock) against a real redis-server:
 *   token_increase     Redisson's testTokenIncrease: 1 and 2 from the token
 *                      acquire, 3 after a plain lock (read back), 4 after a
 *                      lock with a lease, 5 from a try-acquire; a re-entry
 *                      bumps it too (6, count 2)
 *   layout             RLock's hash plus the counter redisson_lock_token:{NAME}
 *                      (no TTL, kept by the unlock and by force unlock); the
 *                      unlock publishes "0" on redisson_lock__channel:{NAME}
 *   lease_honoured     the lease passed is the key's TTL (Redisson's
 *                      lockAndGetToken(lease) ignores it)
 *   persisted_busy     another owner's hash without TTL (PERSIST): busy, not
 *                      a grant with token -1 (Redisson's {-1,-1}); no token issued
 *   excludes_rlock     an RLock hold of the name (another owner) excludes it
 *                      and is no token
 *   waiter_next_token  an async waiter gets the lock on the release, its
 *                      callback's value the next token
 *   bad_handle         rlock_fenced_* on a lock that is not fenced: RLOCK_EINVAL
 *   redisson_steps     cross-implementation: Redisson's fenced acquire (its
 *                      script steps, from the reference) and rlock's share one
 *                      counter and exclude each other
 *   storage_check      the token check of docs/api/kinds.md (a Redis-side
 *                      script) refuses the writes of a holder whose lease ran
 *                      out once the next holder wrote
 *   restart_resets     the documented hazard: a server restarted without
 *                      persistence forgets the counter, and tokens start again
 *                      at 1 (below the ones issued before) */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static th_server_t *srv;

#define JAVA_OWNER "5d9f6a2c-0b1e-4c3d-8e7f-9a0b1c2d3e4f:1"

/* Redisson 4.7's RedissonFencedLock acquire: KEYS name, tokenKey; ARGV lease, lockName. */
static const char *J_ACQUIRE =
    "if (redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then "
    "  local token = redis.call('incr', KEYS[2]); "
    "  redis.call('hincrby', KEYS[1], ARGV[2], 1); "
    "  redis.call('pexpire', KEYS[1], ARGV[1]); "
    "  return {-1, token}; "
    "end; "
    "return {redis.call('pttl', KEYS[1]), -1};";

/* The check of docs/api/kinds.md, word for word. */
static const char *CHECK_WRITE =
    "local last = tonumber(redis.call('get', KEYS[2]) or '0') "
    "if tonumber(ARGV[1]) < last then "
    "  return redis.error_reply('STALE fencing token ' .. ARGV[1] .. ' < ' .. last) "
    "end "
    "redis.call('set', KEYS[2], ARGV[1]) "
    "redis.call('set', KEYS[1], ARGV[2]) "
    "return 1";

static rlock_lock_t *fenced(rlock_client_t *c, const char *name) {
  rlock_lock_t *l = NULL;
  CHECK_OK(rlock_lock_new_fenced(c, name, strlen(name), &l));
  return l;
}

static int64_t token_of(rlock_lock_t *l) {
  int64_t t = -5;
  CHECK_OK(rlock_fenced_token(l, &t));
  return t;
}

TEST(token_increase) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = fenced(c, "fenced:inc");
  int64_t t = 0;
  CHECK_EQ(token_of(l), 0); /* never taken */
  CHECK_OK(rlock_fenced_acquire(l, RLOCK_OWNER_SELF, RLOCK_WAIT_FOREVER, RLOCK_LEASE_WATCHDOG, NULL, &t));
  CHECK_EQ(t, 1);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_OK(rlock_fenced_acquire(l, RLOCK_OWNER_SELF, RLOCK_WAIT_FOREVER, RLOCK_LEASE_WATCHDOG, NULL, &t));
  CHECK_EQ(t, 2);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  CHECK_EQ(token_of(l), 3);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_OK(rlock_lock_lock(l, 10000));
  CHECK_EQ(token_of(l), 4);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_OK(rlock_fenced_acquire(l, RLOCK_OWNER_SELF, 1000, 10000, NULL, &t));
  CHECK_EQ(t, 5);
  CHECK_OK(rlock_fenced_acquire(l, RLOCK_OWNER_SELF, 0, 10000, NULL, &t)); /* a re-entry */
  CHECK_EQ(t, 6);
  int64_t count = 0;
  CHECK_OK(rlock_lock_hold_count(l, RLOCK_OWNER_SELF, &count));
  CHECK_EQ(count, 2);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(token_of(l), 6);
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(layout) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = fenced(c, "fenced:layout");
  int64_t t = 0;
  CHECK_OK(rlock_fenced_acquire(l, RLOCK_OWNER_SELF, 0, 20000, NULL, &t));
  char me[128];
  th_owner_id(c, RLOCK_OWNER_THREAD | (uint64_t)th_gettid(), me, sizeof me);
  CHECK_EQ(th_hget_num(srv, "fenced:layout", me), 1);
  char *v = th_cmd_str(srv, "GET", "redisson_lock_token:{fenced:layout}", NULL);
  CHECK_STREQ(v, "1");
  free(v);
  CHECK_EQ(th_cmd_int(srv, "PTTL", "redisson_lock_token:{fenced:layout}", NULL), -1);
  redisContext *sub = th_raw_connect(srv);
  redisReply *r = redisCommand(sub, "SUBSCRIBE redisson_lock__channel:{fenced:layout}");
  freeReplyObject(r);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK(redisGetReply(sub, (void **)&r) == REDIS_OK);
  CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 3);
  CHECK_STREQ(r->element[2]->str, "0");
  freeReplyObject(r);
  redisFree(sub);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "fenced:layout", NULL), 0);
  CHECK_EQ(token_of(l), 1); /* the unlock keeps the counter */
  CHECK_OK(rlock_lock_trylock(l, 0, 20000));
  int was = 0;
  CHECK_OK(rlock_lock_force_unlock(l, &was));
  CHECK_EQ(was, 1);
  CHECK_EQ(token_of(l), 2); /* force unlock keeps it too */
  /* braces in the name: Redisson's prefixName keeps them, one slot */
  rlock_lock_t *b = fenced(c, "{fenced}:braces");
  CHECK_OK(rlock_fenced_acquire(b, RLOCK_OWNER_SELF, 0, 20000, NULL, &t));
  CHECK_EQ(t, 1);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "redisson_lock_token:{fenced}:braces", NULL), 1);
  CHECK_OK(rlock_lock_unlock(b));
  rlock_lock_free(b);
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(lease_honoured) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = fenced(c, "fenced:lease");
  int64_t t = 0;
  CHECK_OK(rlock_fenced_acquire(l, RLOCK_OWNER_SELF, RLOCK_WAIT_FOREVER, 5000, NULL, &t));
  long long pttl = th_cmd_int(srv, "PTTL", "fenced:lease", NULL);
  CHECK_MSG(pttl > 0 && pttl <= 5000, "PTTL %lld", pttl);
  CHECK_OK(rlock_lock_unlock(l));
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(persisted_busy) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = fenced(c, "fenced:persist");
  th_reply_free(th_cmd(srv, "HSET", "fenced:persist", JAVA_OWNER, "1", NULL)); /* no TTL */
  int64_t t = 0;
  CHECK_RC(rlock_fenced_acquire(l, RLOCK_OWNER_SELF, 0, 10000, NULL, &t), RLOCK_EBUSY);
  CHECK_EQ(token_of(l), 0);
  th_reply_free(th_cmd(srv, "DEL", "fenced:persist", NULL));
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(excludes_rlock) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *f = fenced(c, "fenced:mixed"), *r = th_lock(c, "fenced:mixed");
  CHECK_OK(rlock_lock_acquire(r, 9, 0, 30000, NULL));
  int64_t t = 0;
  CHECK_RC(rlock_fenced_acquire(f, RLOCK_OWNER_SELF, 0, 10000, NULL, &t), RLOCK_EBUSY);
  CHECK_EQ(token_of(f), 0); /* an RLock acquire issues no token */
  CHECK_OK(rlock_lock_release(r, 9));
  CHECK_OK(rlock_fenced_acquire(f, RLOCK_OWNER_SELF, 0, 10000, NULL, &t));
  CHECK_EQ(t, 1);
  CHECK_RC(rlock_lock_acquire(r, 9, 0, 30000, NULL), RLOCK_EBUSY);
  CHECK_OK(rlock_lock_unlock(f));
  rlock_lock_free(f);
  rlock_lock_free(r);
  rlock_client_free(c);
}

typedef struct res {
  atomic_int done;
  int status;
  int64_t value;
} res_t;

static void on_done(rlock_lock_t *l, int status, int64_t value, void *arg) {
  (void)l;
  res_t *r = arg;
  r->status = status;
  r->value = value;
  atomic_store(&r->done, 1);
}

static int is_done(void *arg) { return atomic_load(&((res_t *)arg)->done); }
static int numsub_is_one(void *arg) { return th_numsub(srv, (const char *)arg) == 1; }

TEST(waiter_next_token) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = fenced(c, "fenced:wait");
  int64_t t = 0;
  CHECK_OK(rlock_fenced_acquire(l, RLOCK_OWNER_SELF, 0, 60000, NULL, &t));
  res_t w = {0};
  CHECK_OK(rlock_lock_acquire_async(l, 77, RLOCK_WAIT_FOREVER, 60000, NULL, on_done, &w));
  CHECK(th_wait_until(numsub_is_one, "redisson_lock__channel:{fenced:wait}", 10000));
  CHECK_EQ(atomic_load(&w.done), 0);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK(th_wait_until(is_done, &w, 10000)); /* woken by the message, long before the 60 s lease */
  CHECK_OK(w.status);
  CHECK_EQ(w.value, t + 1);
  CHECK_OK(rlock_lock_release(l, 77));
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(bad_handle) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *r = th_lock(c, "fenced:notfenced");
  int64_t t = 0;
  CHECK_RC(rlock_fenced_acquire(r, RLOCK_OWNER_SELF, 0, 1000, NULL, &t), RLOCK_EINVAL);
  CHECK_MSG(strstr(rlock_last_error(), "not a fenced lock"), "message: %s", rlock_last_error());
  CHECK_RC(rlock_fenced_token(r, &t), RLOCK_EINVAL);
  CHECK_RC(rlock_fenced_token(NULL, &t), RLOCK_EINVAL);
  rlock_lock_t *f = fenced(c, "fenced:notfenced");
  CHECK_RC(rlock_fenced_token(f, NULL), RLOCK_EINVAL);
  th_reply_free(th_cmd(srv, "SET", "redisson_lock_token:{fenced:notfenced}", "abc", NULL));
  CHECK_RC(rlock_fenced_token(f, &t), RLOCK_EPROTO);
  CHECK_RC(rlock_fenced_acquire(f, RLOCK_OWNER_SELF, 0, 1000, NULL, &t), RLOCK_ESERVER); /* INCR refused */
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "fenced:notfenced", NULL), 0);                      /* nothing written */
  rlock_lock_free(f);
  rlock_lock_free(r);
  rlock_client_free(c);
}

static redisReply *java_acquire(const char *name, const char *owner) {
  char tk[128];
  snprintf(tk, sizeof tk, "redisson_lock_token:{%s}", name);
  const char *argv[] = {"EVAL", J_ACQUIRE, "2", name, tk, "30000", owner};
  return th_cmdv(srv, 7, argv, NULL);
}

TEST(redisson_steps) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = fenced(c, "fenced:java");
  int64_t t = 0;
  CHECK_OK(rlock_fenced_acquire(l, RLOCK_OWNER_SELF, 0, 30000, NULL, &t));
  CHECK_EQ(t, 1);
  redisReply *r = java_acquire("fenced:java", JAVA_OWNER); /* busy: {PTTL, -1} */
  CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[0]->integer > 0 && r->element[1]->integer == -1);
  th_reply_free(r);
  CHECK_OK(rlock_lock_unlock(l));
  r = java_acquire("fenced:java", JAVA_OWNER); /* Redisson takes it: token 2 */
  CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[0]->integer == -1 &&
        r->element[1]->integer == 2);
  th_reply_free(r);
  CHECK_EQ(token_of(l), 2);
  CHECK_RC(rlock_fenced_acquire(l, RLOCK_OWNER_SELF, 0, 30000, NULL, &t), RLOCK_EBUSY);
  th_reply_free(th_cmd(srv, "DEL", "fenced:java", NULL)); /* Redisson's hold ends */
  CHECK_OK(rlock_fenced_acquire(l, RLOCK_OWNER_SELF, 0, 30000, NULL, &t));
  CHECK_EQ(t, 3);
  char me[128];
  th_owner_id(c, RLOCK_OWNER_THREAD | (uint64_t)th_gettid(), me, sizeof me);
  r = java_acquire("fenced:java", me); /* Redisson's step re-enters rlock's hold of the same owner id */
  CHECK(r->type == REDIS_REPLY_ARRAY && r->element[0]->integer == -1 && r->element[1]->integer == 4);
  th_reply_free(r);
  CHECK_OK(rlock_lock_unlock(l));
  rlock_lock_free(l);
  rlock_client_free(c);
}

static long long checked_write(const char *token, const char *value, char *err, size_t errlen) {
  const char *argv[] = {"EVAL", CHECK_WRITE, "2", "fenced:data", "fenced:data:fence", token, value};
  redisReply *r = th_cmdv(srv, 7, argv, NULL);
  long long v = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
  if (r->type == REDIS_REPLY_ERROR) snprintf(err, errlen, "%s", r->str);
  th_reply_free(r);
  return v;
}

TEST(storage_check) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = fenced(c, "fenced:store");
  int64_t a = 0, b = 0;
  char buf[32], err[128] = "";
  CHECK_OK(rlock_fenced_acquire(l, 1, 0, 300, NULL, &a)); /* holder 1, a short lease */
  snprintf(buf, sizeof buf, "%lld", (long long)a);
  CHECK_EQ(checked_write(buf, "one", err, sizeof err), 1);
  CHECK_EQ(checked_write(buf, "one again", err, sizeof err), 1); /* the same hold writes again */
  /* holder 1 stalls past its lease; holder 2 gets the lock and writes */
  CHECK_OK(rlock_fenced_acquire(l, 2, 5000, 30000, NULL, &b));
  CHECK(b > a);
  char bb[32];
  snprintf(bb, sizeof bb, "%lld", (long long)b);
  CHECK_EQ(checked_write(bb, "two", err, sizeof err), 1);
  CHECK_EQ(checked_write(buf, "late one", err, sizeof err), -1); /* holder 1 wakes up: refused */
  CHECK_MSG(strstr(err, "STALE"), "error: %s", err);
  char *v = th_cmd_str(srv, "GET", "fenced:data", NULL);
  CHECK_STREQ(v, "two");
  free(v);
  CHECK_OK(rlock_lock_release(l, 2));
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(restart_resets) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = fenced(c, "fenced:restart");
  int64_t t = 0;
  for (int i = 1; i <= 3; i++) {
    CHECK_OK(rlock_fenced_acquire(l, RLOCK_OWNER_SELF, 0, 30000, NULL, &t));
    CHECK_EQ(t, i);
    CHECK_OK(rlock_lock_unlock(l));
  }
  th_server_restart(srv); /* no persistence: the counter is gone */
  CHECK_OK(rlock_fenced_acquire(l, RLOCK_OWNER_SELF, 10000, 30000, NULL, &t));
  CHECK_EQ(t, 1);
  CHECK_OK(rlock_lock_unlock(l));
  rlock_lock_free(l);
  rlock_client_free(c);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 120);
  srv = th_server_start(NULL);
  RUN(token_increase);
  RUN(layout);
  RUN(lease_honoured);
  RUN(persisted_busy);
  RUN(excludes_rlock);
  RUN(waiter_next_token);
  RUN(bad_handle);
  RUN(redisson_steps);
  RUN(storage_check);
  RUN(restart_resets); /* last: restarts the server */
  th_server_stop(srv);
  return th_done();
}
