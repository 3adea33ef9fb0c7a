/* test_cross_impl.c -- Redisson compatibility: a "Redisson client" made of
 * raw EVAL calls of Redisson-style lock scripts (written here from the
 * semantics in redisson-wire.md, owner ids like "<uuid>:1") contends with
 * rlock for the same locks: each sees the other's holds, rlock waiters are
 * woken by the Redisson-style unlock message on redisson_lock__channel:{NAME},
 * and rlock's unlocks and force unlocks publish "0" there. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static th_server_t *srv;

#define JAVA_OWNER "5d9f6a2c-0b1e-4c3d-8e7f-9a0b1c2d3e4f:1"

/* Acquire: free or re-entered -> HINCRBY owner 1, PEXPIRE lease, nil; else PTTL. */
static const char *ACQUIRE =
    "if (redis.call('exists', KEYS[1]) == 0) or "
    "   (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then "
    "  redis.call('hincrby', KEYS[1], ARGV[2], 1); "
    "  redis.call('pexpire', KEYS[1], ARGV[1]); "
    "  return nil; "
    "end; "
    "return redis.call('pttl', KEYS[1]);";

/* Unlock: latch, owner check, decrement, delete + publish "0" on the channel. */
static const char *UNLOCK =
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

static void channel_of(const char *name, char *buf, size_t len) {
  /* Prefix form: P:{NAME}, or P:NAME when NAME already contains '{'. */
  if (strchr(name, '{')) snprintf(buf, len, "redisson_lock__channel:%s", name);
  else snprintf(buf, len, "redisson_lock__channel:{%s}", name);
}

/* Returns -1000 for nil (acquired), else the PTTL reply. */
static long long java_lock(const char *name, const char *lease) {
  const char *argv[] = {"EVAL", ACQUIRE, "1", name, lease, JAVA_OWNER};
  redisReply *r = th_cmdv(srv, 6, argv, NULL);
  CHECK_MSG(r->type == REDIS_REPLY_NIL || r->type == REDIS_REPLY_INTEGER, "acquire: type %d %s", r->type,
            r->str ? r->str : "");
  long long v = r->type == REDIS_REPLY_NIL ? -1000 : r->integer;
  th_reply_free(r);
  return v;
}

/* Returns 1 released, 0 still held, -1000 not held. */
static long long java_unlock(const char *name) {
  static int req;
  char chan[256], latch[256];
  channel_of(name, chan, sizeof chan);
  snprintf(latch, sizeof latch, "redisson_unlock_latch:{%s}:java-req-%d", name, ++req);
  const char *argv[] = {"EVAL", UNLOCK, "3", name, chan, latch, "0", "30000", JAVA_OWNER, "publish", "13500"};
  redisReply *r = th_cmdv(srv, 11, argv, NULL);
  CHECK_MSG(r->type == REDIS_REPLY_NIL || r->type == REDIS_REPLY_INTEGER, "unlock: type %d %s", r->type,
            r->str ? r->str : "");
  long long v = r->type == REDIS_REPLY_NIL ? -1000 : r->integer;
  th_reply_free(r);
  th_reply_free(th_cmd(srv, "DEL", latch, NULL));
  return v;
}

struct waiter {
  rlock_lock_t *lock;
  int rc;
  int64_t done_at;
  pid_t tid;
};

static void *wait_thread(void *p) {
  struct waiter *w = p;
  w->tid = th_gettid();
  w->rc = rlock_lock_acquire(w->lock, RLOCK_OWNER_SELF, 60000, RLOCK_LEASE_WATCHDOG, NULL);
  w->done_at = th_now_ms();
  return NULL;
}

static int subscribed(void *chan) { return th_numsub(srv, chan) >= 1; }

static void java_holds_rlock_waits(const char *name) {
  rlock_client_t *c = th_client(srv->url, 0);
  char chan[256];
  channel_of(name, chan, sizeof chan);
  CHECK_EQ(java_lock(name, "30000"), -1000);
  CHECK_EQ(java_lock(name, "30000"), -1000); /* reentrant: count 2 */

  rlock_lock_t *l = th_lock(c, name);
  /* rlock sees the Java hold. */
  int v = 0;
  CHECK_OK(rlock_lock_is_locked(l, &v));
  CHECK_EQ(v, 1);
  rlock_holder_t *h = NULL;
  size_t n = 0;
  CHECK_OK(rlock_lock_holders(l, &h, &n));
  CHECK_EQ(n, 1);
  CHECK_STREQ(h[0].owner, JAVA_OWNER);
  CHECK_EQ(h[0].count, 2);
  rlock_holders_free(h, n);
  CHECK_RC(rlock_lock_trylock(l, 0, 10000), RLOCK_EBUSY);
  CHECK_RC(rlock_lock_unlock(l), RLOCK_ENOTHELD);

  struct waiter w = {.lock = l};
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, wait_thread, &w), 0);
  /* rlock listens on Redisson's channel for this name. */
  CHECK_MSG(th_wait_until(subscribed, chan, 10000), "nobody subscribed to %s", chan);
  CHECK_EQ(java_unlock(name), 0); /* 2 -> 1: no message, still held */
  th_sleep_ms(200);               /* the scenario: a window in which rlock must not get in */
  CHECK_EQ(th_hget_num(srv, name, JAVA_OWNER), 1);
  CHECK_EQ(th_cmd_int(srv, "HLEN", name, NULL), 1); /* rlock did not get in */
  int64_t t0 = th_now_ms();
  CHECK_EQ(java_unlock(name), 1); /* released: publishes "0" */
  pthread_join(t, NULL);
  CHECK_OK(w.rc);
  /* Woken by the message, not by the 30 s TTL. */
  CHECK_MSG(w.done_at - t0 < 5000, "acquired %lld ms after the Redisson unlock", (long long)(w.done_at - t0));
  char owner[128];
  th_owner_id(c, RLOCK_OWNER_THREAD | (uint64_t)w.tid, owner, sizeof owner);
  CHECK_EQ(th_hget_num(srv, name, owner), 1);
  CHECK_EQ(th_cmd_int(srv, "HLEN", name, NULL), 1);

  /* Now Redisson is refused: it gets rlock's PTTL (about the watchdog 30 s). */
  long long pttl = java_lock(name, "30000");
  CHECK_MSG(pttl > 20000 && pttl <= 30000, "Redisson acquire got %lld", pttl);
  CHECK_EQ(java_unlock(name), -1000); /* not Redisson's hold */
  CHECK_EQ(th_hget_num(srv, name, owner), 1);
  CHECK_OK(rlock_lock_release(l, RLOCK_OWNER_THREAD | (rlock_owner_t)w.tid));
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(redisson_holds_rlock_waits) { java_holds_rlock_waits("cross:lock"); }

TEST(braces_in_name) {
  /* NAME with '{': channel "redisson_lock__channel:NAME" (no extra braces). */
  java_holds_rlock_waits("cross:{tag}:lock");
}

/* Reads one pub/sub message on sub; fails on timeout. */
static void expect_message(redisContext *sub, const char *chan, const char *payload) {
  void *m = NULL;
  CHECK_MSG(redisGetReply(sub, &m) == REDIS_OK, "no message on %s: %s", chan, sub->errstr);
  redisReply *r = m;
  CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 3);
  CHECK_STREQ(r->element[0]->str, "message");
  CHECK_STREQ(r->element[1]->str, chan);
  CHECK_STREQ(r->element[2]->str, payload);
  th_reply_free(r);
}

TEST(rlock_holds_redisson_waits) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = th_lock(c, "cross:other");
  const char *chan = "redisson_lock__channel:{cross:other}";
  redisContext *sub = th_raw_connect(srv);
  redisReply *r = redisCommand(sub, "SUBSCRIBE %s", chan);
  CHECK(r && r->type == REDIS_REPLY_ARRAY);
  th_reply_free(r);

  CHECK_OK(rlock_lock_lock(l, 20000));
  CHECK_OK(rlock_lock_lock(l, 20000));
  long long pttl = java_lock("cross:other", "30000");
  CHECK_MSG(pttl > 15000 && pttl <= 20000, "Redisson acquire got %lld, want the PTTL", pttl);
  CHECK_EQ(th_hget_num(srv, "cross:other", JAVA_OWNER), -1000);
  CHECK_OK(rlock_lock_unlock(l)); /* still held: no message */
  CHECK(java_lock("cross:other", "30000") > 0);
  CHECK_OK(rlock_lock_unlock(l));
  /* rlock's release publishes "0" on Redisson's channel. */
  expect_message(sub, chan, "0");
  CHECK_EQ(java_lock("cross:other", "30000"), -1000);
  CHECK_EQ(th_hget_num(srv, "cross:other", JAVA_OWNER), 1);
  /* rlock now waits for Redisson, bounded. */
  CHECK_RC(rlock_lock_trylock(l, 200, 10000), RLOCK_EBUSY);

  /* rlock's force unlock is Redisson's forceUnlock: delete + "0". */
  int was = 0;
  CHECK_OK(rlock_lock_force_unlock(l, &was));
  CHECK_EQ(was, 1);
  expect_message(sub, chan, "0");
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "cross:other", NULL), 0);
  redisFree(sub);
  rlock_lock_free(l);
  rlock_client_free(c);
}

static _Atomic int mismatches;
static void on_lost(const char *name, size_t len, uint64_t owner, rlock_lost_reason_t reason, void *arg) {
  (void)name, (void)len, (void)owner, (void)arg;
  if (reason == RLOCK_LOST_COUNT_MISMATCH) atomic_fetch_add(&mismatches, 1);
}
static int mismatch_seen(void *arg) { return atomic_load(&mismatches) >= *(int *)arg; }

TEST(redisson_reads_rlock_hold) {
  /* A Redisson process re-entering with rlock's owner id (same owner string)
   * shares the same hash field: the layout is the same. rlock keeps its own
   * hold count, so the extra hold it did not take is a count mismatch at the
   * unlock: the field is removed and the loss reported. */
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_client_on_lost(c, on_lost, NULL);
  rlock_lock_t *l = th_lock(c, "cross:shared");
  CHECK_OK(rlock_lock_acquire(l, 1, 0, 20000, NULL));
  char owner[128];
  th_owner_id(c, 1, owner, sizeof owner);
  const char *argv[] = {"EVAL", ACQUIRE, "1", "cross:shared", "20000", owner};
  redisReply *r = th_cmdv(srv, 6, argv, NULL);
  CHECK_EQ(r->type, REDIS_REPLY_NIL);
  th_reply_free(r);
  int64_t n = 0;
  CHECK_OK(rlock_lock_hold_count(l, 1, &n));
  CHECK_EQ(n, 2);
  CHECK_OK(rlock_lock_release(l, 1));
  int one = 1;
  CHECK(th_wait_until(mismatch_seen, &one, 5000));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "cross:shared", NULL), 0);
  CHECK_RC(rlock_lock_release(l, 1), RLOCK_ENOTHELD);
  rlock_lock_free(l);
  rlock_client_free(c);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 110);
  srv = th_server_start(NULL);
  RUN(redisson_holds_rlock_waits);
  RUN(braces_in_name);
  RUN(rlock_holds_redisson_waits);
  RUN(redisson_reads_rlock_hold);
  th_server_stop(srv);
  return th_done();
}
