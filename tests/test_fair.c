/* test_fair.c -- the fair lock (Redisson's RFairLock) and the non-reentrant
 * fair lock against a real server: FIFO across clients, trylock(0) never
 * queues, a waiter that gives up leaves the queue, a live waiter keeps its
 * place however long it waits, a dead one stops blocking the queue, and
 * Redisson 4.7.0's exact fair-lock script steps (written here from
 * redisson-family.md 2.3, owner ids like "<uuid>:1") sharing one queue with
 * rlock waiters: deadlines, decrements, per-waiter channels. */
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "harness_cluster.h"
#include "harness_replica.h"
#include "harness_sentinel.h"

static th_server_t *srv;
static const char *java_pub = "publish"; /* Redisson's publish command: spublish on a sharded Cluster */

#define JAVA "5d9f6a2c-0b1e-4c3d-8e7f-9a0b1c2d3e4f"

/* ---------------------------------------------------------------- Redisson's scripts */

#define EVICT(NOW)                                                    \
  "while true do "                                                    \
  "  local firstThreadId2 = redis.call('lindex', KEYS[2], 0); "       \
  "  if firstThreadId2 == false then break; end; "                    \
  "  local timeout = redis.call('zscore', KEYS[3], firstThreadId2); " \
  "  if timeout ~= false and tonumber(timeout) <= tonumber(" NOW      \
  ") then "                                                           \
  "    redis.call('zrem', KEYS[3], firstThreadId2); "                 \
  "    redis.call('lpop', KEYS[2]); "                                 \
  "  else break; end; "                                               \
  "end; "

/* B: lock()/tryLock(wait): ARGV lease, lockName, wait, now. */
static const char *JAVA_ACQUIRE =
    EVICT("ARGV[4]")
    "if (redis.call('exists', KEYS[1]) == 0) and ((redis.call('exists', KEYS[2]) == 0) "
    "    or (redis.call('lindex', KEYS[2], 0) == ARGV[2])) then "
    "  redis.call('lpop', KEYS[2]); "
    "  redis.call('zrem', KEYS[3], ARGV[2]); "
    "  local keys = redis.call('zrange', KEYS[3], 0, -1); "
    "  for i = 1, #keys, 1 do "
    "    redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), keys[i]); "
    "  end; "
    "  redis.call('hset', KEYS[1], ARGV[2], 1); "
    "  redis.call('pexpire', KEYS[1], ARGV[1]); "
    "  return nil; "
    "end; "
    "if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then "
    "  redis.call('hincrby', KEYS[1], ARGV[2], 1); "
    "  redis.call('pexpire', KEYS[1], ARGV[1]); "
    "  return nil; "
    "end; "
    "local timeout = redis.call('zscore', KEYS[3], ARGV[2]); "
    "if timeout ~= false then "
    "  local ttl = redis.call('pttl', KEYS[1]); "
    "  return math.max(0, ttl); "
    "end; "
    "local lastThreadId = redis.call('lindex', KEYS[2], -1); "
    "local ttl; "
    "if lastThreadId ~= false and lastThreadId ~= ARGV[2] "
    "    and redis.call('zscore', KEYS[3], lastThreadId) ~= false then "
    "  ttl = tonumber(redis.call('zscore', KEYS[3], lastThreadId)) - tonumber(ARGV[4]); "
    "else "
    "  ttl = redis.call('pttl', KEYS[1]); "
    "end; "
    "local timeout = ttl + tonumber(ARGV[3]) + tonumber(ARGV[4]); "
    "if redis.call('zadd', KEYS[3], timeout, ARGV[2]) == 1 then "
    "  redis.call('rpush', KEYS[2], ARGV[2]); "
    "end; "
    "return ttl;";

/* A: tryLock() with no wait: ARGV lease, lockName, now, wait; never queues. */
static const char *JAVA_TRY =
    EVICT("ARGV[3]")
    "if (redis.call('exists', KEYS[1]) == 0) and ((redis.call('exists', KEYS[2]) == 0) "
    "    or (redis.call('lindex', KEYS[2], 0) == ARGV[2])) then "
    "  redis.call('lpop', KEYS[2]); "
    "  redis.call('zrem', KEYS[3], ARGV[2]); "
    "  local keys = redis.call('zrange', KEYS[3], 0, -1); "
    "  for i = 1, #keys, 1 do "
    "    redis.call('zincrby', KEYS[3], -tonumber(ARGV[4]), keys[i]); "
    "  end; "
    "  redis.call('hset', KEYS[1], ARGV[2], 1); "
    "  redis.call('pexpire', KEYS[1], ARGV[1]); "
    "  return nil; "
    "end; "
    "if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then "
    "  redis.call('hincrby', KEYS[1], ARGV[2], 1); "
    "  redis.call('pexpire', KEYS[1], ARGV[1]); "
    "  return nil; "
    "end; "
    "return 1;";

/* C: acquireFailed: KEYS queue, zset; ARGV lockName, wait. */
static const char *JAVA_ACQUIRE_FAILED =
    "local queue = redis.call('lrange', KEYS[1], 0, -1); "
    "local i = 1; "
    "while i <= #queue and queue[i] ~= ARGV[1] do i = i + 1; end; "
    "i = i + 1; "
    "while i <= #queue do "
    "  redis.call('zincrby', KEYS[2], -tonumber(ARGV[2]), queue[i]); "
    "  i = i + 1; "
    "end; "
    "redis.call('zrem', KEYS[2], ARGV[1]); "
    "redis.call('lrem', KEYS[1], 0, ARGV[1]);";

/* D: unlock: KEYS name, queue, zset, channel, latch; ARGV 0, lease, lockName, now, publish, latch TTL. */
static const char *JAVA_UNLOCK =
    "local val = redis.call('get', KEYS[5]); "
    "if val ~= false then return tonumber(val); end; "
    EVICT("ARGV[4]")
    "if (redis.call('exists', KEYS[1]) == 0) then "
    "  local nextThreadId = redis.call('lindex', KEYS[2], 0); "
    "  if nextThreadId ~= false then "
    "    redis.call(ARGV[5], KEYS[4] .. ':' .. nextThreadId, ARGV[1]); "
    "  end; "
    "  redis.call('set', KEYS[5], 1, 'px', ARGV[6]); "
    "  return 1; "
    "end; "
    "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; end; "
    "local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); "
    "if (counter > 0) then "
    "  redis.call('pexpire', KEYS[1], ARGV[2]); "
    "  redis.call('set', KEYS[5], 0, 'px', ARGV[6]); "
    "  return 0; "
    "end; "
    "redis.call('del', KEYS[1]); "
    "redis.call('set', KEYS[5], 1, 'px', ARGV[6]); "
    "local nextThreadId = redis.call('lindex', KEYS[2], 0); "
    "if nextThreadId ~= false then "
    "  redis.call(ARGV[5], KEYS[4] .. ':' .. nextThreadId, ARGV[1]); "
    "end; "
    "return 1;";

static int64_t epoch_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

typedef struct keys {
  char name[128], queue[160], zset[160], chan[160];
} keys_t;

static keys_t keys_of(const char *name) {
  keys_t k;
  snprintf(k.name, sizeof k.name, "%s", name);
  snprintf(k.queue, sizeof k.queue, "redisson_lock_queue:{%s}", name);
  snprintf(k.zset, sizeof k.zset, "redisson_lock_timeout:{%s}", name);
  snprintf(k.chan, sizeof k.chan, "redisson_lock__channel:{%s}", name);
  return k;
}

/* Java thread `tid`'s script B: -1000 for nil (acquired), else its reply. */
static long long java_acquire(const keys_t *k, int tid, long long lease, long long wait) {
  char owner[64], l[24], w[24], now[24];
  snprintf(owner, sizeof owner, JAVA ":%d", tid);
  snprintf(l, sizeof l, "%lld", lease);
  snprintf(w, sizeof w, "%lld", wait);
  snprintf(now, sizeof now, "%lld", (long long)epoch_ms());
  const char *argv[] = {"EVAL", JAVA_ACQUIRE, "3", k->name, k->queue, k->zset, l, owner, w, now};
  redisReply *r = th_cmdv(srv, 10, argv, NULL);
  CHECK_MSG(r->type == REDIS_REPLY_NIL || r->type == REDIS_REPLY_INTEGER, "acquire: type %d %s", r->type,
            r->str ? r->str : "");
  long long v = r->type == REDIS_REPLY_NIL ? -1000 : r->integer;
  th_reply_free(r);
  return v;
}

/* Java thread `tid`'s script A: -1000 for nil (acquired), else 1. */
static long long java_try(const keys_t *k, int tid, long long lease, long long wait) {
  char owner[64], l[24], w[24], now[24];
  snprintf(owner, sizeof owner, JAVA ":%d", tid);
  snprintf(l, sizeof l, "%lld", lease);
  snprintf(w, sizeof w, "%lld", wait);
  snprintf(now, sizeof now, "%lld", (long long)epoch_ms());
  const char *argv[] = {"EVAL", JAVA_TRY, "3", k->name, k->queue, k->zset, l, owner, now, w};
  redisReply *r = th_cmdv(srv, 10, argv, NULL);
  CHECK_MSG(r->type == REDIS_REPLY_NIL || r->type == REDIS_REPLY_INTEGER, "try: type %d %s", r->type,
            r->str ? r->str : "");
  long long v = r->type == REDIS_REPLY_NIL ? -1000 : r->integer;
  th_reply_free(r);
  return v;
}

static void java_acquire_failed(const keys_t *k, int tid, long long wait) {
  char owner[64], w[24];
  snprintf(owner, sizeof owner, JAVA ":%d", tid);
  snprintf(w, sizeof w, "%lld", wait);
  const char *argv[] = {"EVAL", JAVA_ACQUIRE_FAILED, "2", k->queue, k->zset, owner, w};
  th_reply_free(th_cmdv(srv, 7, argv, NULL));
}

/* 1 released, 0 still held, -1000 not held. */
static long long java_unlock(const keys_t *k, int tid) {
  static int req;
  char owner[64], latch[200], now[24];
  snprintf(owner, sizeof owner, JAVA ":%d", tid);
  snprintf(latch, sizeof latch, "redisson_unlock_latch:{%s}:java-%d", k->name, ++req);
  snprintf(now, sizeof now, "%lld", (long long)epoch_ms());
  const char *argv[] = {"EVAL", JAVA_UNLOCK, "5",     k->name, k->queue, k->zset,  k->chan,
                        latch,  "0",         "30000", owner,   now,      java_pub, "16000"};
  redisReply *r = th_cmdv(srv, 14, argv, NULL);
  CHECK_MSG(r->type == REDIS_REPLY_NIL || r->type == REDIS_REPLY_INTEGER, "unlock: type %d %s", r->type,
            r->str ? r->str : "");
  long long v = r->type == REDIS_REPLY_NIL ? -1000 : r->integer;
  th_reply_free(r);
  th_reply_free(th_cmd(srv, "DEL", latch, NULL));
  return v;
}

static long long zscore(const keys_t *k, const char *member) {
  char *s = th_cmd_str(srv, "ZSCORE", k->zset, member, NULL);
  long long v = s ? atoll(s) : -1;
  free(s);
  return v;
}

static long long llen(const keys_t *k) { return th_cmd_int(srv, "LLEN", k->queue, NULL); }

/* The queue's i-th entry (malloc'd; NULL: none). */
static char *qat(const keys_t *k, int i) {
  char idx[16];
  snprintf(idx, sizeof idx, "%d", i);
  return th_cmd_str(srv, "LINDEX", k->queue, idx, NULL);
}

static void nothing_queued(const keys_t *k) {
  CHECK_EQ(th_cmd_int(srv, "EXISTS", k->queue, NULL), 0);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", k->zset, NULL), 0);
}

typedef struct qwait {
  const keys_t *k;
  long long n;
} qwait_t;
static int queue_len_is(void *arg) {
  qwait_t *q = arg;
  return llen(q->k) == q->n;
}
static void wait_queue_len(const keys_t *k, long long n) {
  qwait_t q = {k, n};
  CHECK_MSG(th_wait_until(queue_len_is, &q, 10000), "queue of %s: %lld entries, want %lld", k->name, llen(k), n);
}

static rlock_client_t *fair_client_on(const char *url, int64_t slot_ms) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = url;
  if (slot_ms) o.fair_waiter_timeout_ms = slot_ms;
  rlock_client_t *c = NULL;
  int rc = rlock_client_new(&c, &o);
  CHECK_MSG(rc == 0, "client: %s", rlock_last_error());
  return c;
}
static rlock_client_t *fair_client(int64_t slot_ms) { return fair_client_on(srv->url, slot_ms); }

static rlock_lock_t *fair(rlock_client_t *c, const char *name) {
  rlock_lock_t *l = NULL;
  CHECK_OK(rlock_lock_new_fair(c, name, strlen(name), &l));
  return l;
}

/* ---------------------------------------------------------------- waiter threads */

typedef struct waiter {
  rlock_lock_t *lock;
  rlock_owner_t owner;
  int64_t wait_ms, lease_ms;
  rlock_cancel_t *cancel;
  int rc;
  int order;   /* the place it acquired in (shared counter) */
  int hold_ms; /* how long it holds before its unlock */
  pthread_t t;
} waiter_t;

static _Atomic int acquired_n;

static void *waiter_run(void *p) {
  waiter_t *w = p;
  w->rc = rlock_lock_acquire(w->lock, w->owner, w->wait_ms, w->lease_ms, w->cancel);
  if (w->rc == 0) {
    w->order = atomic_fetch_add(&acquired_n, 1);
    if (w->hold_ms) th_sleep_ms(w->hold_ms);
    int rc = rlock_lock_release(w->lock, w->owner);
    if (rc) w->rc = 1000 + rc;
  }
  return NULL;
}

static void waiter_start(waiter_t *w) { CHECK_EQ(pthread_create(&w->t, NULL, waiter_run, w), 0); }

/* ---------------------------------------------------------------- tests */

TEST(basic_trylock0_never_queues) {
  keys_t k = keys_of("fair:basic");
  rlock_client_t *c = fair_client(0);
  rlock_lock_t *l = fair(c, k.name);
  CHECK_OK(rlock_lock_acquire(l, 1, 0, 10000, NULL));
  CHECK_OK(rlock_lock_acquire(l, 1, 0, 10000, NULL)); /* reentrant */
  int64_t n = 0;
  CHECK_OK(rlock_lock_hold_count(l, 1, &n));
  CHECK_EQ(n, 2);
  /* another owner's trylock(0): refused, and never queued (Redisson's tryLock()) */
  CHECK_RC(rlock_lock_acquire(l, 2, 0, 10000, NULL), RLOCK_EBUSY);
  nothing_queued(&k);
  CHECK_RC(rlock_lock_release(l, 2), RLOCK_ENOTHELD);
  CHECK_OK(rlock_lock_release(l, 1));
  CHECK_OK(rlock_lock_release(l, 1));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", k.name, NULL), 0);
  CHECK_RC(rlock_lock_release(l, 1), RLOCK_ENOTHELD);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* Redisson's testTryLockNonDelayed: a timed try that fails leaves no entry,
 * so a later trylock(0) of a third owner gets the free lock. */
TEST(timed_try_leaves_no_entry) {
  keys_t k = keys_of("fair:nondelayed");
  rlock_client_t *c = fair_client(0);
  rlock_lock_t *l = fair(c, k.name);
  CHECK_OK(rlock_lock_acquire(l, 1, 0, 30000, NULL));
  CHECK_RC(rlock_lock_acquire(l, 2, 200, 30000, NULL), RLOCK_EBUSY);
  wait_queue_len(&k, 0); /* the undo left with the answer; its own answer follows */
  nothing_queued(&k);
  CHECK_OK(rlock_lock_release(l, 1));
  CHECK_OK(rlock_lock_acquire(l, 3, 0, 30000, NULL));
  CHECK_OK(rlock_lock_release(l, 3));
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(cancel_leaves_queue) {
  keys_t k = keys_of("fair:cancel");
  rlock_client_t *c = fair_client(0);
  rlock_lock_t *l = fair(c, k.name);
  CHECK_OK(rlock_lock_acquire(l, 1, 0, 30000, NULL));
  rlock_cancel_t *cx = NULL;
  CHECK_OK(rlock_cancel_new(&cx));
  waiter_t w = {.lock = l, .owner = 2, .wait_ms = RLOCK_WAIT_FOREVER, .lease_ms = 30000, .cancel = cx};
  waiter_start(&w);
  wait_queue_len(&k, 1);
  rlock_cancel_trigger(cx);
  pthread_join(w.t, NULL);
  CHECK_RC(w.rc, RLOCK_ECANCELED);
  wait_queue_len(&k, 0);
  nothing_queued(&k);
  CHECK_OK(rlock_lock_release(l, 1));
  rlock_cancel_free(cx);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* Redisson's testLeaseTimeout / testConcurrency_MultiInstance_Ordering:
 * waiters of two clients acquire in the order they queued. */
TEST(fifo_across_clients) {
  keys_t k = keys_of("fair:fifo");
  enum { N = 8 };
  rlock_client_t *c[2] = {fair_client(0), fair_client(0)};
  rlock_lock_t *l[2] = {fair(c[0], k.name), fair(c[1], k.name)};
  atomic_store(&acquired_n, 0);
  CHECK_OK(rlock_lock_acquire(l[0], 100, 0, 30000, NULL));
  waiter_t w[N];
  for (int i = 0; i < N; i++) {
    w[i] = (waiter_t){.lock = l[i % 2], .owner = (rlock_owner_t)(i + 1), .wait_ms = 20000, .lease_ms = 30000};
    waiter_start(&w[i]);
    wait_queue_len(&k, i + 1); /* queued in this order */
  }
  /* the queue as rlock_lock_fair_waiters reads it: head first, deadlines ahead */
  rlock_fair_waiter_t *q = NULL;
  size_t nq = 0;
  CHECK_OK(rlock_lock_fair_waiters(l[1], &q, &nq));
  CHECK_EQ(nq, N);
  for (int i = 0; i < N; i++) {
    char id[128];
    th_owner_id(c[i % 2], (rlock_owner_t)(i + 1), id, sizeof id);
    CHECK_STREQ(q[i].owner, id);
    CHECK(q[i].deadline_ms > epoch_ms());
  }
  rlock_fair_waiters_free(q, nq);
  rlock_lock_t *plain = th_lock(c[0], k.name);
  CHECK_RC(rlock_lock_fair_waiters(plain, &q, &nq), RLOCK_EINVAL);
  rlock_lock_free(plain);
  CHECK_OK(rlock_lock_release(l[0], 100));
  for (int i = 0; i < N; i++) pthread_join(w[i].t, NULL);
  for (int i = 0; i < N; i++) {
    CHECK_OK(w[i].rc);
    CHECK_MSG(w[i].order == i, "waiter %d acquired %d-th", i, w[i].order);
  }
  nothing_queued(&k);
  for (int i = 0; i < 2; i++) rlock_lock_free(l[i]), rlock_client_free(c[i]);
}

/* A live waiter keeps its place however long it waits: the holder keeps the
 * lock for several waiter slots (Redisson would evict the head, #3004). */
TEST(live_waiter_keeps_place) {
  keys_t k = keys_of("fair:live");
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = srv->url;
  o.fair_waiter_timeout_ms = 400;
  o.watchdog_timeout_ms = 1500; /* Redisson's deadline for the head: PTTL + slot, at most 1.9 s */
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  rlock_lock_t *l = fair(c, k.name);
  atomic_store(&acquired_n, 0);
  CHECK_OK(rlock_lock_acquire(l, 100, 0, RLOCK_LEASE_WATCHDOG, NULL));
  waiter_t w[3];
  for (int i = 0; i < 3; i++) {
    w[i] = (waiter_t){.lock = l, .owner = (rlock_owner_t)(i + 1), .wait_ms = 30000, .lease_ms = 30000};
    waiter_start(&w[i]);
    wait_queue_len(&k, i + 1);
  }
  char first[128];
  th_owner_id(c, 1, first, sizeof first);
  th_sleep_ms(2500); /* the scenario: held for 6 slots */
  char *head = qat(&k, 0);
  CHECK_MSG(head && !strcmp(head, first), "head %s, want %s", head ? head : "(none)", first);
  free(head);
  CHECK_EQ(llen(&k), 3);
  CHECK(zscore(&k, first) > epoch_ms()); /* alive */
  CHECK_OK(rlock_lock_release(l, 100));
  for (int i = 0; i < 3; i++) pthread_join(w[i].t, NULL);
  for (int i = 0; i < 3; i++) {
    CHECK_OK(w[i].rc);
    CHECK_EQ(w[i].order, i);
  }
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* A dead waiter (its process killed while queued) stops blocking the queue
 * one slot after it became the head; the waiter behind it backs off until
 * then (no polling) and takes the lock. */
TEST(dead_waiter_stops_blocking) {
  keys_t k = keys_of("fair:dead");
  int go[2];
  CHECK(pipe(go) == 0);
  pid_t pid = th_fork(); /* before this process makes a client: no thread forked */
  if (pid == 0) {
    close(go[1]);
    char b;
    if (read(go[0], &b, 1) != 1) th_exit_by_exec(4);
    rlock_options_t o;
    rlock_options_init(&o);
    o.url = srv->url;
    o.fair_waiter_timeout_ms = 1000;
    rlock_client_t *cc = NULL;
    rlock_lock_t *cl = NULL;
    if (rlock_client_new(&cc, &o) || rlock_lock_new_fair(cc, k.name, strlen(k.name), &cl)) th_exit_by_exec(2);
    rlock_lock_acquire(cl, 1, 60000, 30000, NULL); /* killed while it waits */
    th_exit_by_exec(3);
  }
  close(go[0]);
  rlock_client_t *c = fair_client(1000);
  rlock_lock_t *l = fair(c, k.name);
  CHECK_OK(rlock_lock_acquire(l, 100, 0, 30000, NULL));
  CHECK(write(go[1], "g", 1) == 1);
  close(go[1]);
  wait_queue_len(&k, 1);
  waiter_t w = {.lock = l, .owner = 2, .wait_ms = 20000, .lease_ms = 30000};
  atomic_store(&acquired_n, 0);
  waiter_start(&w);
  wait_queue_len(&k, 2);
  kill(pid, SIGKILL);
  th_wait_child(pid);
  rlock_stats_t before, after;
  rlock_client_stats(c, &before);
  int64_t t0 = th_now_ms();
  CHECK_OK(rlock_lock_release(l, 100)); /* wakes the dead head: nobody listens */
  pthread_join(w.t, NULL);
  CHECK_OK(w.rc);
  rlock_client_stats(c, &after);
  int64_t took = th_now_ms() - t0;
  /* Redisson's default slot would block it 5 minutes; here about one slot */
  printf("# acquired %lld ms after the unlock, %llu tries\n", (long long)took,
         (unsigned long long)(after.acquire_attempts - before.acquire_attempts));
  CHECK_MSG(took < 10000, "acquired %lld ms after the unlock", (long long)took);
  /* backed off: a few tries, not a poll loop */
  CHECK_MSG(after.acquire_attempts - before.acquire_attempts < 15, "%llu tries",
            (unsigned long long)(after.acquire_attempts - before.acquire_attempts));
  nothing_queued(&k);
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(nonreentrant_fair) {
  keys_t k = keys_of("fair:once");
  rlock_client_t *c = fair_client(0);
  rlock_lock_t *l = NULL;
  CHECK_OK(rlock_lock_new_fair_nonreentrant(c, k.name, strlen(k.name), &l));
  CHECK_OK(rlock_lock_lock(l, 30000));
  int64_t t0 = th_now_ms();
  CHECK_RC(rlock_lock_lock(l, 30000), RLOCK_ENOTREENTRANT);
  CHECK_RC(rlock_lock_trylock(l, 0, 30000), RLOCK_ENOTREENTRANT);
  CHECK_RC(rlock_lock_trylock(l, 100, 30000), RLOCK_ENOTREENTRANT);
  CHECK_MSG(th_now_ms() - t0 < 2000, "refused after %lld ms", (long long)(th_now_ms() - t0));
  CHECK(strstr(rlock_last_error(), "non-reentrant") != NULL);
  int64_t n = 0;
  CHECK_OK(rlock_lock_hold_count(l, RLOCK_OWNER_SELF, &n));
  CHECK_EQ(n, 1);
  nothing_queued(&k);
  /* a contending owner waits and gets it on the release */
  waiter_t w = {.lock = l, .owner = 7, .wait_ms = 20000, .lease_ms = 30000};
  waiter_start(&w);
  wait_queue_len(&k, 1);
  CHECK_OK(rlock_lock_unlock(l));
  pthread_join(w.t, NULL);
  CHECK_OK(w.rc);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", k.name, NULL), 0);
  /* two handles of one name, one thread: still the same owner */
  rlock_lock_t *l2 = NULL;
  CHECK_OK(rlock_lock_new_fair_nonreentrant(c, k.name, strlen(k.name), &l2));
  CHECK_OK(rlock_lock_lock(l, 30000));
  CHECK_RC(rlock_lock_trylock(l2, 0, 30000), RLOCK_ENOTREENTRANT);
  CHECK_OK(rlock_lock_unlock(l2));
  rlock_lock_free(l2);
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(watchdog_renews_fair) {
  keys_t k = keys_of("fair:wd");
  rlock_client_t *c = th_client(srv->url, 1500);
  rlock_lock_t *l = fair(c, k.name);
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  th_sleep_ms(3000); /* two leases */
  int held = 0;
  CHECK_OK(rlock_lock_is_held(l, RLOCK_OWNER_SELF, &held));
  CHECK_EQ(held, 1);
  CHECK(th_cmd_int(srv, "PTTL", k.name, NULL) > 0);
  CHECK_OK(rlock_lock_unlock(l));
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* ---------------------------------------------------------------- with Redisson's scripts */

static redisContext *subscribe(const char *chan) {
  redisContext *sub = th_raw_connect(srv);
  redisReply *r = redisCommand(sub, "SUBSCRIBE %s", chan);
  CHECK(r && r->type == REDIS_REPLY_ARRAY);
  th_reply_free(r);
  return sub;
}

static void expect_message(redisContext *sub, const char *chan) {
  void *m = NULL;
  CHECK_MSG(redisGetReply(sub, &m) == REDIS_OK, "no message on %s: %s", chan, sub->errstr);
  redisReply *r = m;
  CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 3);
  CHECK_STREQ(r->element[0]->str, "message");
  CHECK_STREQ(r->element[1]->str, chan);
  CHECK_STREQ(r->element[2]->str, "0");
  th_reply_free(r);
}

/* Java waits behind rlock, rlock behind Java, in one queue; each side's
 * unlock wakes the other's head on its own channel. */
TEST(redisson_mixed_queue) {
  keys_t k = keys_of("fair:mixed");
  rlock_client_t *c = fair_client(5000);
  rlock_lock_t *l = fair(c, k.name);
  char jchan[400], j2[64];
  snprintf(j2, sizeof j2, JAVA ":2");
  snprintf(jchan, sizeof jchan, "%s:%s", k.chan, j2);
  redisContext *sub = subscribe(jchan);

  CHECK_EQ(java_acquire(&k, 1, 30000, 5000), -1000); /* Java holds */
  atomic_store(&acquired_n, 0);
  waiter_t w1 = {.lock = l, .owner = 1, .wait_ms = 20000, .lease_ms = 30000, .hold_ms = 0};
  waiter_start(&w1);
  wait_queue_len(&k, 1);
  char o1[128];
  th_owner_id(c, 1, o1, sizeof o1);
  /* rlock's head keeps its deadline one slot ahead (not the PTTL + slot of
   * Redisson's arithmetic: a dead head frees the queue one slot after) */
  long long s1 = zscore(&k, o1), now = epoch_ms();
  CHECK_MSG(s1 > now + 3000 && s1 <= now + 5000, "rlock's deadline %lld ms ahead", s1 - now);
  /* Java 2 queues behind it: its TTL is rlock's deadline - now */
  long long ttl2 = java_acquire(&k, 2, 30000, 5000);
  CHECK_MSG(ttl2 > 3000 && ttl2 <= 5000, "Java's TTL %lld", ttl2);
  CHECK_EQ(zscore(&k, j2) - s1, 5000); /* Redisson's gap: its wait */
  /* the rlock waiter's channel is its own */
  char wchan[400];
  snprintf(wchan, sizeof wchan, "%s:%s", k.chan, o1);
  CHECK_EQ(th_numsub(srv, wchan), 1);
  long long s2 = zscore(&k, j2);
  rlock_stats_t st0;
  rlock_client_stats(c, &st0);
  CHECK_EQ(java_unlock(&k, 1), 1); /* publishes to rlock's channel only */
  /* w1 holds, then releases: its unlock wakes Java 2 */
  pthread_join(w1.t, NULL);
  CHECK_OK(w1.rc);
  CHECK_MSG(TH_STAT_REACHES(c, messages, st0.messages + 1, 10000), "the waiter was not woken by Redisson's message");
  /* rlock's acquire moved every deadline down by its slot */
  long long s2b = zscore(&k, j2);
  CHECK_MSG(s2b == s2 - 5000, "Java 2's deadline moved by %lld", s2b - s2);
  expect_message(sub, jchan);
  CHECK_EQ(java_acquire(&k, 2, 30000, 5000), -1000);
  nothing_queued(&k);
  CHECK_EQ(java_unlock(&k, 2), 1);
  redisFree(sub);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* testAcquireFailedTimeoutDrift_Descrete with an rlock waiter in the middle:
 * rlock's deadline follows Redisson's arithmetic and its give-up is
 * Redisson's acquireFailed (later waiters move down by its slot). */
TEST(redisson_acquire_failed_drift) {
  keys_t k = keys_of("test-fair-lock");
  rlock_client_t *c = fair_client(5000);
  rlock_lock_t *l = fair(c, k.name);
  CHECK_EQ(java_acquire(&k, 1, 30000, 5000), -1000); /* A */
  long long b = java_acquire(&k, 2, 30000, 5000);    /* B */
  CHECK_MSG(b > 29900 && b <= 30000, "B %lld", b);
  waiter_t w = {.lock = l, .owner = 3, .wait_ms = 1500, .lease_ms = 30000};
  waiter_start(&w); /* C: rlock */
  wait_queue_len(&k, 2);
  long long d = java_acquire(&k, 4, 30000, 5000); /* D */
  long long e = java_acquire(&k, 5, 30000, 5000); /* E */
  CHECK_MSG(d > 39800 && d <= 40000, "D %lld", d);
  CHECK_MSG(e > 44800 && e <= 45000, "E %lld", e);
  long long sd = zscore(&k, JAVA ":4"), se = zscore(&k, JAVA ":5");
  pthread_join(w.t, NULL); /* C gives up */
  CHECK_RC(w.rc, RLOCK_EBUSY);
  wait_queue_len(&k, 3);
  CHECK_EQ(zscore(&k, JAVA ":4"), sd - 5000);
  CHECK_EQ(zscore(&k, JAVA ":5"), se - 5000);
  /* B, D, E already queued: the lock's PTTL */
  CHECK(java_acquire(&k, 2, 30000, 5000) > 25000);
  CHECK_EQ(java_unlock(&k, 1), 1);
  CHECK_EQ(java_acquire(&k, 2, 30000, 5000), -1000); /* B at once */
  long long d2 = java_acquire(&k, 4, 30000, 5000), e2 = java_acquire(&k, 5, 30000, 5000);
  CHECK_MSG(d2 > 29700 && d2 <= 30000 && e2 > 29700 && e2 <= 30000, "D %lld E %lld", d2, e2);
  /* and Redisson's own acquireFailed of D moves E down by D's wait */
  long long se2 = zscore(&k, JAVA ":5");
  java_acquire_failed(&k, 4, 5000);
  CHECK_EQ(zscore(&k, JAVA ":5"), se2 - 5000);
  CHECK_EQ(java_unlock(&k, 2), 1);
  th_reply_free(th_cmd(srv, "DEL", k.name, k.queue, k.zset, NULL));
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* 1 once CHAN (a char *) has a subscriber (PUBSUB NUMSUB). */
static int has_subscriber(void *chan) {
  redisReply *r = th_cmd(srv, "PUBSUB", "NUMSUB", (const char *)chan, NULL);
  int yes = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->integer == 1;
  th_reply_free(r);
  return yes;
}

/* rlock's own unlock wakes only the head, on its channel; force unlock wakes
 * the head too. Each also says "0" once on redisson_lock__channel:{NAME}
 * when the lock goes free (for free-waiters, who listen there), and
 * nothing more. */
TEST(unlock_wakes_head_only) {
  keys_t k = keys_of("fair:headonly");
  rlock_client_t *c = fair_client(0);
  rlock_lock_t *l = fair(c, k.name);
  char j3[64], jchan[400];
  snprintf(j3, sizeof j3, JAVA ":3");
  snprintf(jchan, sizeof jchan, "%s:%s", k.chan, j3);
  redisContext *base = subscribe(k.chan);
  redisContext *sub = subscribe(jchan);
  CHECK_OK(rlock_lock_acquire(l, 1, 0, 30000, NULL));
  CHECK(java_acquire(&k, 3, 30000, 300000) > 0);
  CHECK_OK(rlock_lock_release(l, 1));
  expect_message(sub, jchan);
  expect_message(base, k.chan); /* free */
  CHECK_EQ(java_acquire(&k, 3, 30000, 300000), -1000);
  /* rlock queues behind Java 3 (trylock with a wait), then force unlock wakes it */
  waiter_t w = {.lock = l, .owner = 2, .wait_ms = 20000, .lease_ms = 30000};
  atomic_store(&acquired_n, 0);
  waiter_start(&w);
  wait_queue_len(&k, 1);
  /* the entry is written by the waiter's first try, before it subscribes to
   * its channel: a message sent before the subscription is lost, and the
   * waiter's next try then takes the lock without one */
  char o2[128], chan2[400];
  th_owner_id(c, 2, o2, sizeof o2);
  snprintf(chan2, sizeof chan2, "%s:%s", k.chan, o2);
  CHECK_MSG(th_wait_until(has_subscriber, chan2, 10000), "the waiter never subscribed to %s", chan2);
  rlock_stats_t st0;
  rlock_client_stats(c, &st0);
  int was = 0;
  CHECK_OK(rlock_lock_force_unlock(l, &was));
  CHECK_EQ(was, 1);
  pthread_join(w.t, NULL);
  CHECK_OK(w.rc);
  CHECK_MSG(TH_STAT_REACHES(c, messages, st0.messages + 1, 10000),
            "the head was not woken by the force unlock's message");
  expect_message(base, k.chan); /* free after the force unlock */
  expect_message(base, k.chan); /* free after the waiter's release */
  /* nothing else reached the shared channel */
  redisReply *r = redisCommand(base, "PING");
  CHECK_MSG(r && r->type == REDIS_REPLY_ARRAY && r->elements >= 2 && !strcmp(r->element[0]->str, "pong"),
            "on the shared channel: %s %s", r && r->elements ? r->element[0]->str : "?", /*X*/
            r && r->elements > 2 ? r->element[2]->str : "?");
  th_reply_free(r);
  redisFree(sub);
  redisFree(base);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* Redisson's testExpire and testTryLockWait: a waiter gets a lock whose
 * holder never unlocks once its lease runs out (its try's wait bound is the
 * holder's TTL: no message comes); a timed try gives up after its wait. */
TEST(expire_and_timed_wait) {
  keys_t k = keys_of("fair:expire");
  rlock_client_t *c = fair_client(0);
  rlock_lock_t *l = fair(c, k.name);
  CHECK_OK(rlock_lock_acquire(l, 1, 0, 800, NULL)); /* never unlocked */
  int64_t t0 = th_now_ms();
  CHECK_RC(rlock_lock_acquire(l, 2, 300, 30000, NULL), RLOCK_EBUSY);
  int64_t took = th_now_ms() - t0;
  CHECK_MSG(took >= 300 && took < 1300, "a 300 ms try gave up after %lld ms", (long long)took);
  wait_queue_len(&k, 0);
  CHECK_OK(rlock_lock_acquire(l, 3, 10000, 2000, NULL));
  took = th_now_ms() - t0;
  CHECK_MSG(took < 3000, "got the expired lock after %lld ms", (long long)took);
  int locked = 0;
  CHECK_OK(rlock_lock_is_locked(l, &locked));
  CHECK_EQ(locked, 1);
  CHECK_OK(rlock_lock_release(l, 3));
  CHECK_RC(rlock_lock_release(l, 1), RLOCK_ENOTHELD);
  nothing_queued(&k);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* Redisson's testMultipleLocks / testConcurrency_MultiInstance, scaled down:
 * 40 waiters on 4 clients, each holds briefly; never two inside at once,
 * every one acquires, nothing left queued. */
static _Atomic int inside, overlaps;
static void *cs_run(void *p) {
  waiter_t *w = p;
  w->rc = rlock_lock_acquire(w->lock, w->owner, w->wait_ms, w->lease_ms, NULL);
  if (w->rc) return NULL;
  if (atomic_fetch_add(&inside, 1) != 0) atomic_fetch_add(&overlaps, 1);
  th_sleep_ms(2);
  atomic_fetch_sub(&inside, 1);
  w->rc = rlock_lock_release(w->lock, w->owner);
  return NULL;
}
TEST(many_waiters_exclusive) {
  keys_t k = keys_of("fair:many");
  enum { NC = 4, NW = 40 };
  rlock_client_t *c[NC];
  rlock_lock_t *l[NC];
  for (int i = 0; i < NC; i++) c[i] = fair_client(0), l[i] = fair(c[i], k.name);
  waiter_t w[NW];
  for (int i = 0; i < NW; i++) {
    w[i] = (waiter_t){.lock = l[i % NC], .owner = RLOCK_OWNER_SELF, .wait_ms = 60000, .lease_ms = 5000};
    CHECK_EQ(pthread_create(&w[i].t, NULL, cs_run, &w[i]), 0);
  }
  for (int i = 0; i < NW; i++) pthread_join(w[i].t, NULL);
  for (int i = 0; i < NW; i++) CHECK_OK(w[i].rc);
  CHECK_EQ(atomic_load(&overlaps), 0);
  nothing_queued(&k);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", k.name, NULL), 0);
  for (int i = 0; i < NC; i++) rlock_lock_free(l[i]), rlock_client_free(c[i]);
}

/* Redisson 4.7.0's testAcquireFailedNotCalledOnRedisTimeout: a timed try
 * whose request times out (the server paused) leaves no queue entry once
 * the server is back: the undo's tombstone stops the try's late copies. */
TEST(paused_try_leaves_no_entry) {
  keys_t k = keys_of("fair:paused");
  rlock_client_t *h = fair_client(0);
  rlock_lock_t *lh = fair(h, k.name);
  CHECK_OK(rlock_lock_acquire(lh, 1, 0, 30000, NULL));
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = srv->url;
  o.command_timeout_ms = 200;
  o.retry_attempts = 1;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  rlock_lock_t *l = fair(c, k.name);
  th_reply_free(th_cmd(srv, "CLIENT", "PAUSE", "1000", "WRITE", NULL));
  int rc = rlock_lock_acquire(l, 2, 300, 1000, NULL);
  CHECK_MSG(rc == RLOCK_ETIMEDOUT || rc == RLOCK_EBUSY, "acquire: %s", rlock_err_name(rc));
  th_sleep_ms(1200); /* the scenario: the pause ends, held copies run */
  wait_queue_len(&k, 0);
  nothing_queued(&k);
  CHECK_OK(rlock_lock_release(lh, 1));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", k.name, NULL), 0);
  rlock_lock_free(l);
  rlock_client_free(c);
  rlock_lock_free(lh);
  rlock_client_free(h);
}

/* 1 once CHAN (a char *) has a sharded subscriber (PUBSUB SHARDNUMSUB on srv). */
static int has_shard_subscriber(void *chan) {
  redisReply *r = th_cmd(srv, "PUBSUB", "SHARDNUMSUB", (const char *)chan, NULL);
  int yes = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->integer == 1;
  th_reply_free(r);
  return yes;
}

/* Redis Cluster with sharded pub/sub: the hash, queue, deadlines and every
 * waiter's channel in NAME's slot; rlock and Redisson (SPUBLISH) waiters in
 * one queue on the slot's master, each woken on its own sharded channel. */
TEST(cluster_sharded) {
  th_cluster_t *cl = th_cluster_start(3, 0, 2000);
  CHECK(th_cluster_wait_ok(cl, 30000));
  keys_t k = keys_of("fair:cl");
  th_server_t *single = srv;
  srv = th_cluster_owner(cl, th_cluster_keyslot(cl, k.name)); /* the java_* scripts go there */
  java_pub = "spublish";
  rlock_client_t *c[2] = {fair_client_on(cl->url, 0), fair_client_on(cl->url, 0)};
  rlock_lock_t *l[2] = {fair(c[0], k.name), fair(c[1], k.name)};
  atomic_store(&acquired_n, 0);
  CHECK_OK(rlock_lock_acquire(l[0], 100, 0, 30000, NULL));
  waiter_t w1 = {.lock = l[0], .owner = 1, .wait_ms = 30000, .lease_ms = 30000};
  waiter_start(&w1);
  wait_queue_len(&k, 1);
  CHECK(java_acquire(&k, 2, 30000, 5000) > 0); /* Java 2 behind w1 */
  waiter_t w3 = {.lock = l[1], .owner = 3, .wait_ms = 30000, .lease_ms = 30000};
  waiter_start(&w3);
  wait_queue_len(&k, 3);
  char o1[128], chan[400];
  th_owner_id(c[0], 1, o1, sizeof o1);
  snprintf(chan, sizeof chan, "%s:%s", k.chan, o1);
  /* w1's entry came with its first try, its subscription after it */
  CHECK_MSG(th_wait_until(has_shard_subscriber, chan, 10000), "w1 never subscribed to %s (SSUBSCRIBE)", chan);
  char jchan[400];
  snprintf(jchan, sizeof jchan, "%s:" JAVA ":2", k.chan);
  redisContext *sub = th_raw_connect(srv);
  redisReply *r = redisCommand(sub, "SSUBSCRIBE %s", jchan);
  CHECK(r && r->type == REDIS_REPLY_ARRAY);
  th_reply_free(r);
  CHECK_OK(rlock_lock_release(l[0], 100)); /* SPUBLISH to w1; w1 takes and releases: SPUBLISH to Java 2 */
  pthread_join(w1.t, NULL);
  CHECK_OK(w1.rc);
  void *m = NULL;
  CHECK(redisGetReply(sub, &m) == REDIS_OK);
  r = m;
  CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 3);
  CHECK_STREQ(r->element[0]->str, "smessage");
  CHECK_STREQ(r->element[1]->str, jchan);
  th_reply_free(r);
  CHECK_EQ(java_acquire(&k, 2, 30000, 5000), -1000);
  CHECK_EQ(java_unlock(&k, 2), 1); /* Redisson's SPUBLISH wakes w3 (another client) */
  pthread_join(w3.t, NULL);
  CHECK_OK(w3.rc);
  CHECK_EQ(w3.order, 1);
  nothing_queued(&k);
  redisFree(sub);
  for (int i = 0; i < 2; i++) rlock_lock_free(l[i]), rlock_client_free(c[i]);
  srv = single;
  java_pub = "publish";
  th_cluster_stop(cl);
}

/* The scripts themselves (lua/fair_*.lua as embedded): a late copy of a
 * try that lands after its undo never queues (the undo's tombstone), and an
 * undo that kept the entry (the owner waits on) is followed by one that
 * takes it out. */
static char *lua_file(const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/lua/%s", RLOCK_SOURCE_DIR, name);
  FILE *f = fopen(path, "rb");
  CHECK_MSG(f != NULL, "cannot open %s", path);
  static char buf[65536];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  return strdup(buf);
}
static long long eval_int(int argc, const char **argv, int *is_nil) {
  redisReply *r = th_cmdv(srv, argc, argv, NULL);
  CHECK_MSG(r->type == REDIS_REPLY_NIL || r->type == REDIS_REPLY_INTEGER, "type %d %s", r->type, r->str ? r->str : "");
  *is_nil = r->type == REDIS_REPLY_NIL;
  long long v = r->integer;
  th_reply_free(r);
  return v;
}
TEST(late_copy_after_undo_never_queues) {
  keys_t k = keys_of("fair:late");
  char *acq = lua_file("fair_acquire.lua"), *undo = lua_file("fair_acquire_undo.lua");
  const char *owner = "0b0b0b0b-0000-4000-8000-000000000001:owner-1";
  const char *latch = "rlock_acquire_latch:{fair:late}:aaaa";
  th_reply_free(th_cmd(srv, "HSET", k.name, JAVA ":1", "1", NULL));
  th_reply_free(th_cmd(srv, "PEXPIRE", k.name, "30000", NULL));
  char now[24];
  snprintf(now, sizeof now, "%lld", (long long)epoch_ms());
  const char *try_argv[] = {"EVAL",  acq,   "5",    k.name, k.queue, k.zset, k.chan, latch,
                            "30000", owner, "5000", now,    "15000", "q",    "0",    "publish"};
  int nil = 0;
  CHECK(eval_int(16, try_argv, &nil) > 0 && !nil); /* queued */
  CHECK_EQ(llen(&k), 1);
  /* the owner waits on: the tombstone only */
  const char *stay_argv[] = {"EVAL", undo,  "5",       k.name,  k.queue, k.zset, k.chan, latch,
                             "0",    owner, "publish", "15000", "0",     "5000", "1"};
  CHECK_EQ(eval_int(15, stay_argv, &nil), 0);
  CHECK_EQ(llen(&k), 1);
  CHECK_EQ(eval_int(16, try_argv, &nil), -3); /* a late copy: nothing */
  /* then it gives up: out of the queue, the tombstone now says so */
  const char *leave_argv[] = {"EVAL", undo,  "5",       k.name,  k.queue, k.zset, k.chan, latch,
                              "0",    owner, "publish", "15000", "0",     "5000", "0"};
  CHECK_EQ(eval_int(15, leave_argv, &nil), 0);
  nothing_queued(&k);
  char *v = th_cmd_str(srv, "GET", latch, NULL);
  CHECK_STREQ(v, "xd");
  free(v);
  CHECK_EQ(eval_int(16, try_argv, &nil), -3);  /* a late copy of the try never queues again */
  CHECK_EQ(eval_int(15, leave_argv, &nil), 2); /* a late copy of the undo changes nothing */
  nothing_queued(&k);
  th_reply_free(th_cmd(srv, "DEL", k.name, latch, NULL));
  free(acq);
  free(undo);
}

/* A master with a replica, replica sync ONE: the fair scripts carry WAIT;
 * with the replica stopped a waiting acquire ends RLOCK_ENOSYNC with
 * nothing held and nothing queued (each grant undone and awaited, the last
 * try's entry taken out); after it resumes, a waiter queues and is woken. */
TEST(replica_sync_fair) {
  keys_t k = keys_of("fair:rs");
  th_server_t *r = th_replica_start(srv);
  th_replicas_wait(srv, 1, 20000);
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = srv->url;
  o.replica_sync = RLOCK_REPLICA_SYNC_ONE;
  o.replica_sync_timeout_ms = 200;
  o.retry_attempts = 1;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  rlock_lock_t *l = fair(c, k.name);
  long long w0 = th_cmdstat(srv, "wait");
  CHECK_OK(rlock_lock_acquire(l, 1, 0, 30000, NULL));
  CHECK(th_cmdstat(srv, "wait") > w0);
  CHECK_OK(rlock_lock_release(l, 1));
  th_server_pause(r);
  CHECK_RC(rlock_lock_acquire(l, 2, 3000, 30000, NULL), RLOCK_ENOSYNC);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", k.name, NULL), 0);
  wait_queue_len(&k, 0);
  nothing_queued(&k);
  th_server_resume(r);
  th_replicas_caught_up(srv, 1, 20000);
  atomic_store(&acquired_n, 0);
  CHECK_OK(rlock_lock_acquire(l, 1, 0, 30000, NULL));
  waiter_t w = {.lock = l, .owner = 2, .wait_ms = 20000, .lease_ms = 30000};
  waiter_start(&w);
  wait_queue_len(&k, 1);
  CHECK_OK(rlock_lock_release(l, 1));
  pthread_join(w.t, NULL);
  CHECK_OK(w.rc);
  nothing_queued(&k);
  rlock_lock_free(l);
  rlock_client_free(c);
  th_server_stop(r);
  th_replicas_wait(srv, 0, 20000);
}

/* Sentinel (a master, a replica, 3 sentinels): waiters of two clients on
 * the redis+sentinel:// URL and a Redisson waiter on the master, one queue,
 * in order. */
TEST(sentinel_fifo) {
  th_sentinels_t *t = th_sentinels_start("fairmaster", 1, 3);
  keys_t k = keys_of("fair:sent");
  th_server_t *single = srv;
  srv = t->nodes[0];
  rlock_client_t *c[2] = {fair_client_on(t->url, 0), fair_client_on(t->url, 0)};
  rlock_lock_t *l[2] = {fair(c[0], k.name), fair(c[1], k.name)};
  atomic_store(&acquired_n, 0);
  CHECK_OK(rlock_lock_acquire(l[0], 100, 0, 30000, NULL));
  waiter_t w[3];
  for (int i = 0; i < 3; i++) {
    w[i] = (waiter_t){.lock = l[i % 2], .owner = (rlock_owner_t)(i + 1), .wait_ms = 30000, .lease_ms = 30000};
    waiter_start(&w[i]);
    wait_queue_len(&k, i + 1);
  }
  CHECK(java_acquire(&k, 9, 30000, 5000) > 0); /* Redisson queues last */
  CHECK_OK(rlock_lock_release(l[0], 100));
  for (int i = 0; i < 3; i++) pthread_join(w[i].t, NULL);
  for (int i = 0; i < 3; i++) {
    CHECK_OK(w[i].rc);
    CHECK_EQ(w[i].order, i);
  }
  CHECK_EQ(java_acquire(&k, 9, 30000, 5000), -1000); /* its turn: the head, the lock free */
  CHECK_EQ(java_unlock(&k, 9), 1);
  nothing_queued(&k);
  for (int i = 0; i < 2; i++) rlock_lock_free(l[i]), rlock_client_free(c[i]);
  srv = single;
  th_sentinels_stop(t);
}

/* Redisson's testLockAcquiredBooleanTimeoutDrift_Descrete with rlock in it:
 * Redisson's tryLock() (script A) and rlock's trylock(0) exclude each other
 * and neither ever queues; a Java waiter that queued (script B) is the head,
 * so a free lock is refused to both until it takes its turn. */
TEST(redisson_trylock_no_wait) {
  keys_t k = keys_of("fair:tryA");
  rlock_client_t *c = fair_client(0);
  rlock_lock_t *l = fair(c, k.name);
  CHECK_OK(rlock_lock_acquire(l, 1, 0, 30000, NULL));
  CHECK_EQ(java_try(&k, 2, 30000, 300000), 1);
  nothing_queued(&k);
  CHECK_OK(rlock_lock_release(l, 1));
  CHECK_EQ(java_try(&k, 2, 30000, 300000), -1000);
  CHECK_RC(rlock_lock_acquire(l, 1, 0, 30000, NULL), RLOCK_EBUSY);
  nothing_queued(&k);
  CHECK(java_acquire(&k, 3, 30000, 300000) > 0); /* Java 3 queues */
  CHECK_EQ(java_unlock(&k, 2), 1);
  CHECK_RC(rlock_lock_acquire(l, 1, 0, 30000, NULL), RLOCK_EBUSY); /* free, but Java 3's turn */
  CHECK_EQ(java_try(&k, 4, 30000, 300000), 1);
  CHECK_EQ(llen(&k), 1);
  CHECK_EQ(java_acquire(&k, 3, 30000, 300000), -1000);
  CHECK_EQ(java_unlock(&k, 3), 1);
  CHECK_OK(rlock_lock_acquire(l, 1, 0, 30000, NULL));
  CHECK_OK(rlock_lock_release(l, 1));
  nothing_queued(&k);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* An owner that gave up waits again at once: its new entry is not taken
 * out by the earlier give-up's undo (the order gate: the new try is written
 * after the undo's answer); and the async call waits the same way. */
static void on_async(rlock_lock_t *l, int status, int64_t value, void *arg) {
  (void)l, (void)value;
  atomic_store((_Atomic int *)arg, status == 0 ? 1 : 2);
}
static int async_done(void *arg) { return atomic_load((_Atomic int *)arg) != 0; }
typedef struct head_wait {
  const keys_t *k;
  char owner[128];
} head_wait_t;
static int head_is(void *arg) {
  head_wait_t *w = arg;
  char *head = qat(w->k, 0);
  int same = head && !strcmp(head, w->owner);
  free(head);
  return same;
}
TEST(give_up_then_wait_again) {
  keys_t k = keys_of("fair:again");
  rlock_client_t *c = fair_client(0);
  rlock_lock_t *l = fair(c, k.name);
  CHECK_OK(rlock_lock_acquire(l, 1, 0, 30000, NULL));
  for (int round = 0; round < 5; round++) CHECK_RC(rlock_lock_acquire(l, 2, 50, 30000, NULL), RLOCK_EBUSY);
  _Atomic int done = 0;
  CHECK_OK(rlock_lock_acquire_async(l, 2, 20000, 30000, NULL, on_async, &done));
  /* the last give-up's undo may still be on its way (its entry is owner 2's
   * too, and may leave before the new try queues): wait for owner 2 at the
   * head, not for a length the undo can satisfy and then take back */
  head_wait_t hw = {.k = &k};
  th_owner_id(c, 2, hw.owner, sizeof hw.owner);
  CHECK_MSG(th_wait_until(head_is, &hw, 10000), "owner 2 never at the head of %s's queue", k.name);
  CHECK_OK(rlock_lock_release(l, 1));
  CHECK(th_wait_until(async_done, &done, 20000));
  CHECK_EQ(atomic_load(&done), 1);
  CHECK_OK(rlock_lock_release(l, 2));
  nothing_queued(&k);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* A client freed while its waiter is in the queue takes the entry out (the
 * undo, sent at close and awaited briefly), whether the waiter's try is in
 * flight or it is parked: the next waiter is not blocked by it for a slot. */
static void close_case(bool parked) {
  keys_t k = keys_of("fair:close");
  rlock_client_t *h = fair_client(0), *c = fair_client(0);
  rlock_lock_t *lh = fair(h, k.name), *l = fair(c, k.name);
  CHECK_OK(rlock_lock_acquire(lh, 1, 0, 30000, NULL));
  waiter_t w = {.lock = l, .owner = 2, .wait_ms = RLOCK_WAIT_FOREVER, .lease_ms = 30000};
  waiter_start(&w);
  wait_queue_len(&k, 1);
  if (parked) { /* its second try (after the subscription) answered: it sleeps */
    char o2[128], chan[400];
    th_owner_id(c, 2, o2, sizeof o2);
    snprintf(chan, sizeof chan, "%s:%s", k.chan, o2);
    CHECK(TH_STAT_REACHES(c, acquire_attempts, 2, 10000));
    CHECK_EQ(th_numsub(srv, chan), 1);
    th_settled(c); /* the scenario: the answer reaches the client, which parks */
  }
  rlock_client_free(c);
  pthread_join(w.t, NULL);
  CHECK_RC(w.rc, RLOCK_ECLOSED);
  CHECK_EQ(llen(&k), 0); /* gone when rlock_client_free returned */
  nothing_queued(&k);
  rlock_lock_free(l);
  CHECK_OK(rlock_lock_release(lh, 1));
  rlock_lock_free(lh);
  rlock_client_free(h);
}
TEST(close_leaves_queue) {
  close_case(false);
  close_case(true);
}

/* A name with an unbalanced brace: every key and the waiters' channels in
 * the slot-safe form ({T}NAME, wire-format.md "Names"); the lock works the
 * same (queue, wake-up on the waiter's own channel, the queue read back). */
static int one_waiter(void *arg) {
  rlock_fair_waiter_t *q = NULL;
  size_t n = 0;
  if (rlock_lock_fair_waiters(arg, &q, &n)) return 0;
  rlock_fair_waiters_free(q, n);
  return n == 1;
}
/* The waiter's own channel is subscribed (its name holds "odd"). */
static int odd_subscribed(void *arg) {
  (void)arg;
  redisReply *r = th_cmd(srv, "PUBSUB", "CHANNELS", "*odd*", NULL);
  int yes = r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1;
  th_reply_free(r);
  return yes;
}
TEST(odd_name) {
  const char *name = "fair{odd";
  rlock_client_t *c = fair_client(0);
  rlock_lock_t *l = fair(c, name);
  CHECK_OK(rlock_lock_acquire(l, 1, 0, 30000, NULL));
  waiter_t w = {.lock = l, .owner = 2, .wait_ms = 20000, .lease_ms = 30000};
  waiter_start(&w);
  CHECK(th_wait_until(one_waiter, l, 10000));
  /* queued is not yet subscribed: a release before the subscription is
   * confirmed reaches nobody, and the waiter then takes the lock by the try
   * its confirmation makes, with no message to count */
  CHECK(th_wait_until(odd_subscribed, NULL, 10000));
  rlock_fair_waiter_t *q = NULL;
  size_t n = 0;
  rlock_stats_t st0;
  rlock_client_stats(c, &st0);
  CHECK_OK(rlock_lock_release(l, 1));
  pthread_join(w.t, NULL);
  CHECK_OK(w.rc);
  CHECK(TH_STAT_REACHES(c, messages, st0.messages + 1, 10000));
  CHECK_OK(rlock_lock_fair_waiters(l, &q, &n));
  CHECK_EQ(n, 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* The head gives up (a timed try) while the lock is held: Redisson's
 * acquireFailed moves every deadline behind it down by its slot, so the new
 * head's deadline is what the old head's was, up to half a slot before the
 * new head would try (and refresh) again. A live rlock waiter must never be
 * stale: the new head is told, and it keeps its place. */
typedef struct stale_arg {
  const keys_t *k;
  const char *who;
} stale_arg_t;
static int stale_or_gone(void *arg) {
  stale_arg_t *a = arg;
  long long d = zscore(a->k, a->who);
  return d < 0 || d <= epoch_ms();
}

TEST(head_gives_up_next_keeps_place) {
  keys_t k = keys_of("fair:headleaves");
  rlock_client_t *c = fair_client(1000);
  rlock_lock_t *l = fair(c, k.name);
  atomic_store(&acquired_n, 0);
  CHECK_OK(rlock_lock_acquire(l, 100, 0, 60000, NULL)); /* held for long: the holder's PTTL bounds no wait */
  waiter_t first = {.lock = l, .owner = 1, .wait_ms = 300, .lease_ms = 30000};
  waiter_start(&first);
  wait_queue_len(&k, 1);
  waiter_t w[2];
  for (int i = 0; i < 2; i++) {
    w[i] = (waiter_t){.lock = l, .owner = (rlock_owner_t)(i + 2), .wait_ms = 30000, .lease_ms = 30000};
    waiter_start(&w[i]);
    wait_queue_len(&k, i + 2);
  }
  pthread_join(first.t, NULL);
  CHECK_RC(first.rc, RLOCK_EBUSY);
  wait_queue_len(&k, 2);
  char second[128];
  th_owner_id(c, 2, second, sizeof second);
  /* the scenario: the holder keeps the lock 2 slots more; a script that ran
   * while the new head's deadline lay in the past would evict it */
  stale_arg_t a = {&k, second};
  int stale = th_wait_until(stale_or_gone, &a, 2000);
  CHECK_OK(rlock_lock_release(l, 100));
  for (int i = 0; i < 2; i++) pthread_join(w[i].t, NULL);
  CHECK_MSG(!stale,
            "the live new head's deadline passed while it waited (it was not told its deadline moved); "
            "rc %d %d, order %d %d",
            w[0].rc, w[1].rc, w[0].order, w[1].order);
  for (int i = 0; i < 2; i++) {
    CHECK_OK(w[i].rc);
    CHECK_EQ(w[i].order, i);
  }
  nothing_queued(&k);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* A waiter in the middle of the queue gives up, behind a dead head (an
 * entry nothing refreshes, as a killed waiter's), while the lock is held:
 * the leave moves the deadline of every waiter behind it down by its slot,
 * before their next tries. The live waiter right behind the dead head must
 * not become stale: when the dead head is evicted it is the next head. */
TEST(mid_queue_leave_behind_dead_head) {
  keys_t k = keys_of("fair:midleave");
  rlock_client_t *c = fair_client(1000);
  rlock_lock_t *l = fair(c, k.name);
  atomic_store(&acquired_n, 0);
  CHECK_OK(rlock_lock_acquire(l, 100, 0, 60000, NULL));
  char dead[128], deadline[32];
  th_owner_id(c, 99, dead, sizeof dead); /* queued, then never tries again */
  snprintf(deadline, sizeof deadline, "%lld", (long long)epoch_ms() + 1000);
  freeReplyObject(th_cmd(srv, "ZADD", k.zset, deadline, dead, NULL));
  freeReplyObject(th_cmd(srv, "RPUSH", k.queue, dead, NULL));
  waiter_t quitter = {.lock = l, .owner = 2, .wait_ms = 300, .lease_ms = 30000};
  waiter_start(&quitter);
  wait_queue_len(&k, 2);
  waiter_t w[2];
  for (int i = 0; i < 2; i++) {
    w[i] = (waiter_t){.lock = l, .owner = (rlock_owner_t)(i + 3), .wait_ms = 30000, .lease_ms = 30000};
    waiter_start(&w[i]);
    wait_queue_len(&k, i + 3);
  }
  pthread_join(quitter.t, NULL);
  CHECK_RC(quitter.rc, RLOCK_EBUSY);
  wait_queue_len(&k, 3);
  char next[128];
  th_owner_id(c, 3, next, sizeof next);
  stale_arg_t a = {&k, next};
  int stale = th_wait_until(stale_or_gone, &a, 2500); /* the scenario: held 2.5 s more */
  CHECK_OK(rlock_lock_release(l, 100));               /* evicts the dead head */
  for (int i = 0; i < 2; i++) pthread_join(w[i].t, NULL);
  CHECK_MSG(!stale,
            "a live waiter's deadline passed while it waited (moved down by a leave ahead of it); "
            "rc %d %d, order %d %d",
            w[0].rc, w[1].rc, w[0].order, w[1].order);
  for (int i = 0; i < 2; i++) {
    CHECK_OK(w[i].rc);
    CHECK_EQ(w[i].order, i);
  }
  nothing_queued(&k);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* A dead head (an entry nothing refreshes, as a killed waiter's, deadline
 * one slot ahead) with a live waiter behind it, queued while the lock was
 * held; the holder unlocks (the message goes to the dead head). The dead
 * head stops blocking at its deadline: the waiter behind it, which queued
 * while the lock was held, tries again by then (not half a slot later, when
 * its own refresh is due). Slot 2000 ms; the margin is a quarter slot. */
TEST(dead_head_blocks_until_its_deadline) {
  keys_t k = keys_of("fair:deadhead");
  rlock_client_t *c = fair_client(2000);
  rlock_lock_t *l = fair(c, k.name);
  CHECK_OK(rlock_lock_acquire(l, 100, 0, 60000, NULL));
  char dead[128], deadline[32];
  th_owner_id(c, 99, dead, sizeof dead);
  long long dd = (long long)epoch_ms() + 2000;
  snprintf(deadline, sizeof deadline, "%lld", dd);
  freeReplyObject(th_cmd(srv, "ZADD", k.zset, deadline, dead, NULL));
  freeReplyObject(th_cmd(srv, "RPUSH", k.queue, dead, NULL));
  waiter_t w = {.lock = l, .owner = 2, .wait_ms = 20000, .lease_ms = 30000};
  atomic_store(&acquired_n, 0);
  waiter_start(&w);
  wait_queue_len(&k, 2);
  CHECK_OK(rlock_lock_release(l, 100)); /* tells the dead head only */
  pthread_join(w.t, NULL);
  long long late = (long long)epoch_ms() - dd;
  printf("# granted and released %lld ms after the dead head's deadline\n", late);
  CHECK_OK(w.rc);
  CHECK_MSG(late < 500, "the dead head blocked %lld ms past its deadline", late);
  nothing_queued(&k);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* Queue entries and deadlines that do not match (another client's
 * partial write, a user's edit, a key lost to maxmemory eviction, a name
 * listed twice whose first copy was evicted or granted). Redisson's scripts
 * stop their eviction at a head without a deadline, so the queue behind it
 * waited for good, and the lock stayed free for nobody; rlock's scripts
 * evict such a head. A waiter that finds its own entry without a deadline
 * gets one and no second entry (a copy left behind would be that head
 * later); a waiter with a deadline and no entry is listed at the tail (it
 * was never head, so it waited until the queue emptied). Lock held, fixed
 * lease 60 s, slot 2000 ms. */
static void queue_is(const keys_t *k, const char *want);
typedef struct zs_arg {
  const keys_t *k;
  const char *member;
} zs_arg_t;
static int has_deadline(void *arg) {
  zs_arg_t *a = arg;
  return zscore(a->k, a->member) > 0;
}
static rlock_client_t *gc;
static rlock_lock_t *gl;
static void ghost_setup(const keys_t *k) {
  gc = fair_client(2000);
  gl = fair(gc, k->name);
  th_reply_free(th_cmd(srv, "DEL", k->name, k->queue, k->zset, NULL));
  CHECK_OK(rlock_lock_acquire(gl, 100, 0, 60000, NULL));
}
static void ghost_end(const keys_t *k) {
  nothing_queued(k);
  rlock_lock_free(gl);
  rlock_client_free(gc);
}

/* A head without a deadline: a waiter's first try evicts it and queues as
 * the head; one that appears ahead of the queued waiter later is evicted by
 * the unlock, which tells the waiter (Redisson's unlock tells the ghost, and
 * the waiter's tries found it at the head for good). */
TEST(ghost_head_evicted) {
  keys_t k = keys_of("fair:ghost1");
  ghost_setup(&k);
  char me[128];
  th_owner_id(gc, 2, me, sizeof me);
  freeReplyObject(th_cmd(srv, "RPUSH", k.queue, JAVA ":77", NULL));
  waiter_t w = {.lock = gl, .owner = 2, .wait_ms = 8000, .lease_ms = 30000};
  waiter_start(&w);
  zs_arg_t z = {&k, me};
  CHECK_MSG(th_wait_until(has_deadline, &z, 10000), "the waiter never queued");
  queue_is(&k, me);
  freeReplyObject(th_cmd(srv, "LPUSH", k.queue, JAVA ":78", NULL));
  CHECK_OK(rlock_lock_release(gl, 100));
  pthread_join(w.t, NULL);
  CHECK_MSG(w.rc == 0, "the waiter behind a head without a deadline: %s (the queue: %lld entries)",
            rlock_err_name(w.rc), llen(&k));
  ghost_end(&k);
}

/* The same ahead of a Java waiter (Redisson's script stops at the ghost):
 * rlock's unlock evicts it and tells the Java waiter, whose next try takes
 * the lock. */
TEST(ghost_head_before_java) {
  keys_t k = keys_of("fair:ghost2");
  ghost_setup(&k);
  freeReplyObject(th_cmd(srv, "RPUSH", k.queue, JAVA ":77", NULL));
  CHECK(java_acquire(&k, 1, 30000, 5000) > 0);
  CHECK_EQ(llen(&k), 2);
  CHECK_OK(rlock_lock_release(gl, 100));
  CHECK_EQ(java_acquire(&k, 1, 30000, 5000), -1000);
  CHECK_EQ(java_unlock(&k, 1), 1);
  nothing_queued(&k);
  /* a force-unlock evicts it as well */
  CHECK_OK(rlock_lock_acquire(gl, 100, 0, 60000, NULL));
  freeReplyObject(th_cmd(srv, "RPUSH", k.queue, JAVA ":77", NULL));
  CHECK(java_acquire(&k, 1, 30000, 5000) > 0);
  int was = 0;
  CHECK_OK(rlock_lock_force_unlock(gl, &was));
  CHECK_EQ(was, 1);
  queue_is(&k, JAVA ":1");
  CHECK_EQ(java_acquire(&k, 1, 30000, 5000), -1000);
  CHECK_EQ(java_unlock(&k, 1), 1);
  ghost_end(&k);
}

/* The caller's own entry without a deadline: its try gives it one and no
 * second entry (granted, the copy would be left as a ghost head). */
TEST(own_entry_without_deadline) {
  keys_t k = keys_of("fair:ghost3");
  ghost_setup(&k);
  char me[128];
  th_owner_id(gc, 3, me, sizeof me);
  freeReplyObject(th_cmd(srv, "RPUSH", k.queue, me, NULL));
  waiter_t w = {.lock = gl, .owner = 3, .wait_ms = 8000, .lease_ms = 30000};
  waiter_start(&w);
  zs_arg_t z = {&k, me};
  CHECK_MSG(th_wait_until(has_deadline, &z, 10000), "the waiter's entry got no deadline");
  queue_is(&k, me); /* no second entry */
  CHECK_OK(rlock_lock_release(gl, 100));
  pthread_join(w.t, NULL);
  CHECK_OK(w.rc);
  ghost_end(&k);
}

/* A deadline without an entry, then another waiter: the first is listed at
 * its first try (Redisson's script never lists it: it is never the head),
 * and granted first. */
TEST(deadline_without_entry) {
  keys_t k = keys_of("fair:ghost4");
  ghost_setup(&k);
  char me[128], dl[24];
  th_owner_id(gc, 4, me, sizeof me);
  snprintf(dl, sizeof dl, "%lld", (long long)epoch_ms() + 60000);
  freeReplyObject(th_cmd(srv, "ZADD", k.zset, dl, me, NULL));
  atomic_store(&acquired_n, 0);
  waiter_t a = {.lock = gl, .owner = 4, .wait_ms = 8000, .lease_ms = 30000};
  waiter_start(&a);
  wait_queue_len(&k, 1);
  waiter_t b = {.lock = gl, .owner = 5, .wait_ms = 8000, .lease_ms = 30000};
  waiter_start(&b);
  wait_queue_len(&k, 2);
  char *head = qat(&k, 0);
  CHECK_MSG(head && !strcmp(head, me), "the head is %s, not the waiter with the deadline", head ? head : "(none)");
  free(head);
  CHECK_OK(rlock_lock_release(gl, 100));
  pthread_join(a.t, NULL);
  pthread_join(b.t, NULL);
  CHECK_OK(a.rc);
  CHECK_OK(b.rc);
  CHECK_EQ(a.order, 0);
  CHECK_EQ(b.order, 1);
  ghost_end(&k);
}

/* Two dead entries in a row (Java waiters that queued, then never tried
 * again) between a live head and a live rlock waiter, and a live waiter
 * behind that one; slot 1000 ms, the lock held (fixed lease 60 s). The
 * holder unlocks just after the rlock waiter's try: the head takes the lock,
 * which moves every deadline down a slot and tells only the next head (a
 * dead one). The rlock waiter behind the dead pair must stay ahead of its
 * deadline however the deadlines move (issue 24: a live waiter keeps its
 * place): it is never stale, and the three live waiters get the lock in
 * queue order once the dead ones are evicted. */
static int attempts_above(void *arg) {
  void **a = arg;
  rlock_stats_t st;
  rlock_client_stats(a[0], &st);
  return st.acquire_attempts > *(uint64_t *)a[1];
}
TEST(dead_pair_ahead_live_keeps_place) {
  keys_t k = keys_of("fair:deadpair");
  rlock_client_t *ch = fair_client(1000), *c[3];
  rlock_lock_t *lh = fair(ch, k.name), *l[3];
  for (int i = 0; i < 3; i++) c[i] = fair_client(1000), l[i] = fair(c[i], k.name);
  atomic_store(&acquired_n, 0);
  CHECK_OK(rlock_lock_acquire(lh, 100, 0, 60000, NULL));
  waiter_t w[3];
  w[0] = (waiter_t){.lock = l[0], .owner = 1, .wait_ms = 30000, .lease_ms = 30000, .hold_ms = 5000};
  waiter_start(&w[0]);
  wait_queue_len(&k, 1);
  CHECK(java_acquire(&k, 1, 30000, 1000) > 0); /* dead: never tries again */
  CHECK(java_acquire(&k, 2, 30000, 1000) > 0);
  for (int i = 1; i < 3; i++) {
    w[i] = (waiter_t){.lock = l[i], .owner = (rlock_owner_t)(i + 1), .wait_ms = 30000, .lease_ms = 30000};
    waiter_start(&w[i]);
    wait_queue_len(&k, i + 3);
  }
  char live[128];
  th_owner_id(c[1], 2, live, sizeof live);
  /* the scenario: the unlock comes right after the live waiter's try */
  rlock_stats_t st;
  rlock_client_stats(c[1], &st);
  uint64_t a0 = st.acquire_attempts;
  void *arg[2] = {c[1], &a0};
  CHECK(th_wait_until(attempts_above, arg, 5000));
  CHECK_OK(rlock_lock_release(lh, 100));
  stale_arg_t a = {&k, live};
  int stale = th_wait_until(stale_or_gone, &a, 4500); /* the head holds 5 s */
  int evicted = 0;
  if (stale) { /* what any other script does then: a Redisson waiter's try evicts it with the dead pair */
    java_acquire(&k, 9, 30000, 1000);
    evicted = zscore(&k, live) < 0;
    java_acquire_failed(&k, 9, 1000);
  }
  for (int i = 0; i < 3; i++) pthread_join(w[i].t, NULL);
  CHECK_MSG(!stale,
            "the live waiter behind two dead entries went stale while it waited (the head's acquire moved "
            "its deadline down a slot)%s; rc %d %d %d, order %d %d %d",
            evicted ? ", and a Redisson try evicted it" : "", w[0].rc, w[1].rc, w[2].rc, w[0].order, w[1].order,
            w[2].order);
  for (int i = 0; i < 3; i++) {
    CHECK_OK(w[i].rc);
    CHECK_EQ(w[i].order, i);
  }
  nothing_queued(&k);
  for (int i = 0; i < 3; i++) rlock_lock_free(l[i]), rlock_client_free(c[i]);
  rlock_lock_free(lh);
  rlock_client_free(ch);
}

/* Clients of one fair lock with different slots: a live waiter of a 2 s slot
 * client behind a 60 s slot head and a dead entry. The head's grant moves every
 * deadline down by its own 60 s, putting the live waiter's in the past two
 * seconds later; it was not told (only the dead next head was). Before: the
 * head's unlock 5 s later evicted it with the dead entry and told the waiter
 * behind it, which took the lock first (order 0 2 1), the evicted waiter asleep
 * meanwhile. Now every waiter whose deadline the grant brought within the
 * granted waiter's slot of now is told, and tries at once. */
TEST(mixed_slots_live_waiter_keeps_place) {
  keys_t k = keys_of("fair:mixslot");
  rlock_client_t *ch = fair_client(60000), *ca = fair_client(60000), *cb = fair_client(2000), *cc = fair_client(60000);
  rlock_lock_t *lh = fair(ch, k.name), *la = fair(ca, k.name), *lb = fair(cb, k.name), *lc = fair(cc, k.name);
  atomic_store(&acquired_n, 0);
  CHECK_OK(rlock_lock_acquire(lh, 100, 0, 60000, NULL));
  waiter_t w[3];
  w[0] = (waiter_t){.lock = la, .owner = 1, .wait_ms = 25000, .lease_ms = 30000, .hold_ms = 5000};
  waiter_start(&w[0]);
  wait_queue_len(&k, 1);
  CHECK(java_acquire(&k, 1, 30000, 2000) > 0); /* dead: never tries again */
  w[1] = (waiter_t){.lock = lb, .owner = 2, .wait_ms = 25000, .lease_ms = 30000};
  waiter_start(&w[1]);
  wait_queue_len(&k, 3);
  w[2] = (waiter_t){.lock = lc, .owner = 3, .wait_ms = 25000, .lease_ms = 30000};
  waiter_start(&w[2]);
  wait_queue_len(&k, 4);
  int64_t t0 = th_now_ms();
  CHECK_OK(rlock_lock_release(lh, 100));
  for (int i = 0; i < 3; i++) pthread_join(w[i].t, NULL);
  printf("# rc %d %d %d, order %d %d %d, %lld ms\n", w[0].rc, w[1].rc, w[2].rc, w[0].order, w[1].order, w[2].order,
         (long long)(th_now_ms() - t0));
  for (int i = 0; i < 3; i++) {
    CHECK_OK(w[i].rc);
    CHECK_MSG(w[i].order == i, "waiter %d took the lock in place %d (order %d %d %d)", i, w[i].order, w[0].order,
              w[1].order, w[2].order);
  }
  nothing_queued(&k);
  rlock_lock_free(la), rlock_lock_free(lb), rlock_lock_free(lc), rlock_lock_free(lh);
  rlock_client_free(ca), rlock_client_free(cb), rlock_client_free(cc), rlock_client_free(ch);
}

/* The scripts' edge states, run as EVAL on a user whose ACL allows only the
 * waiter channels ...:ok* (fair_acquire.lua and fair_unlock.lua read first,
 * check the channel they will publish to, then write). A refusal
 * (NOPERM) writes nothing: no eviction, no latch, no hold. A re-entry tells
 * nobody, so an evicted head's refused channel does not refuse it. A name
 * listed twice is evicted once (Redisson's loop stops at the copy left
 * without a deadline). */
static redisReply *eval_as(redisContext *c, const keys_t *k, const char *script, const char *latch, int n,
                           const char **args) {
  const char *argv[20] = {"EVAL", script, "5", k->name, k->queue, k->zset, k->chan, latch};
  for (int i = 0; i < n; i++) argv[8 + i] = args[i];
  redisReply *r = redisCommandArgv(c, 8 + n, argv, NULL);
  CHECK_MSG(r != NULL, "EVAL: no reply");
  return r;
}
static void queue_is(const keys_t *k, const char *want) { /* want: the entries, space-separated */
  redisReply *r = th_cmd(srv, "LRANGE", k->queue, "0", "-1", NULL);
  char got[512] = "";
  for (size_t i = 0; i < r->elements; i++) {
    if (i) strcat(got, " ");
    strncat(got, r->element[i]->str, sizeof got - strlen(got) - 2);
  }
  th_reply_free(r);
  CHECK_MSG(!strcmp(got, want), "queue [%s], expected [%s]", got, want);
}
static void is_noperm(const char *what, redisReply *r, const char *chan_tail) {
  CHECK_MSG(r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "NOPERM rlock:", 13) && strstr(r->str, chan_tail),
            "%s: expected NOPERM for %s, got type %d %s (%lld)", what, chan_tail, r->type, r->str ? r->str : "",
            r->integer);
  th_reply_free(r);
}
TEST(scripts_check_channel_before_writes) {
  keys_t k = keys_of("fair:aclpre");
  char *acq = lua_file("fair_acquire.lua"), *unl = lua_file("fair_unlock.lua");
  th_reply_free(th_cmd(srv, "ACL", "SETUSER", "fairpre", "on", ">fairpre-pw", "~*", "+@all", "resetchannels",
                       "&redisson_lock__channel:{fair:aclpre}:ok*", NULL));
  redisContext *c = th_raw_connect(srv);
  redisReply *a = redisCommand(c, "AUTH fairpre fairpre-pw");
  CHECK_MSG(a && a->type == REDIS_REPLY_STATUS, "AUTH fairpre: %s", a && a->str ? a->str : "no reply");
  freeReplyObject(a);
  const char *latch = "rlock_acquire_latch:{fair:aclpre}:r1", *ulatch = "redisson_unlock_latch:{fair:aclpre}:r1";
  char now[24], stale[24], live[24];
  int64_t t = epoch_ms();
  snprintf(now, sizeof now, "%lld", (long long)t);
  snprintf(stale, sizeof stale, "%lld", (long long)(t - 1000));
  snprintf(live, sizeof live, "%lld", (long long)(t + 60000));
  const char *try_ok[] = {"30000", "ok-c", "5000", now, "15000", "q", "0", "publish"};
#define SETUP(HOLDER, ...)                                                           \
  do {                                                                               \
    th_reply_free(th_cmd(srv, "DEL", k.name, k.queue, k.zset, latch, ulatch, NULL)); \
    if (HOLDER) {                                                                    \
      th_reply_free(th_cmd(srv, "HSET", k.name, (const char *)(HOLDER), "1", NULL)); \
      th_reply_free(th_cmd(srv, "PEXPIRE", k.name, "30000", NULL));                  \
    }                                                                                \
    th_reply_free(th_cmd(srv, "RPUSH", k.queue, __VA_ARGS__, NULL));                 \
  } while (0)
#define DL(W, AT) th_reply_free(th_cmd(srv, "ZADD", k.zset, AT, W, NULL))

  /* 1. held by another; the eviction makes no-1 the head, which must be
   * told: refused, and the stale head is still there */
  SETUP(JAVA ":1", "stale", "no-1");
  DL("stale", stale), DL("no-1", live);
  is_noperm("held, head evicted", eval_as(c, &k, acq, latch, 8, try_ok), ":no-1");
  queue_is(&k, "stale no-1");
  CHECK_EQ(th_cmd_int(srv, "ZCARD", k.zset, NULL), 2);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", latch, NULL), 0);
  /* the same as a tryLock() (mode 't'): it tells the new head too */
  const char *trylock_ok[] = {"30000", "ok-c", "5000", now, "15000", "t", "0", "publish"};
  is_noperm("tryLock, head evicted", eval_as(c, &k, acq, latch, 8, trylock_ok), ":no-1");
  queue_is(&k, "stale no-1");

  /* 2. a re-entry tells nobody: the same queue, the caller holds it */
  SETUP("ok-c", "stale", "no-1");
  DL("stale", stale), DL("no-1", live);
  redisReply *r = eval_as(c, &k, acq, latch, 8, try_ok);
  CHECK_MSG(r->type == REDIS_REPLY_NIL, "re-entry: type %d %s", r->type, r->str ? r->str : "");
  th_reply_free(r);
  CHECK_EQ(th_hget_num(srv, k.name, "ok-c"), 2);
  queue_is(&k, "no-1"); /* (the stale head evicted, as Redisson's loop does) */
  /* non-reentrant: -5, no NOPERM either */
  SETUP("ok-c", "stale", "no-1");
  DL("stale", stale), DL("no-1", live);
  const char *once_ok[] = {"30000", "ok-c", "5000", now, "15000", "q", "1", "publish"};
  r = eval_as(c, &k, acq, latch, 8, once_ok);
  CHECK_MSG(r->type == REDIS_REPLY_INTEGER && r->integer == -5, "non-reentrant: type %d %s %lld", r->type,
            r->str ? r->str : "", r->integer);
  th_reply_free(r);
  CHECK_EQ(th_hget_num(srv, k.name, "ok-c"), 1);

  /* 3. free; the caller is the head behind a stale one: its grant tells
   * the next head no-1: refused, nothing taken, nothing evicted */
  SETUP(NULL, "stale", "ok-c", "no-1");
  DL("stale", stale), DL("ok-c", live), DL("no-1", live);
  is_noperm("grant", eval_as(c, &k, acq, latch, 8, try_ok), ":no-1");
  CHECK_EQ(th_cmd_int(srv, "EXISTS", k.name, NULL), 0);
  queue_is(&k, "stale ok-c no-1");
  CHECK_EQ(th_cmd_int(srv, "EXISTS", latch, NULL), 0);
  /* with ok-n next instead it is granted; no-2, brought within a slot of
   * now, is not told (a courtesy, only where this user may publish) */
  char near[24];
  snprintf(near, sizeof near, "%lld", (long long)(t + 6000));
  SETUP(NULL, "stale", "ok-c", "ok-n", "no-2");
  DL("stale", stale), DL("ok-c", live), DL("ok-n", live), DL("no-2", near);
  r = eval_as(c, &k, acq, latch, 8, try_ok);
  CHECK_MSG(r->type == REDIS_REPLY_NIL, "grant: type %d %s", r->type, r->str ? r->str : "");
  th_reply_free(r);
  CHECK_EQ(th_hget_num(srv, k.name, "ok-c"), 1);
  queue_is(&k, "ok-n no-2");

  /* 4. a name listed twice: evicted once, its copy (now without a
   * deadline) is evicted too; the head after them, ok-e, is told and the
   * caller queues behind it */
  SETUP(JAVA ":1", "ok-d", "ok-d", "ok-e");
  DL("ok-d", stale), DL("ok-e", live);
  r = eval_as(c, &k, acq, latch, 8, try_ok);
  CHECK_MSG(r->type == REDIS_REPLY_INTEGER && r->integer > 0, "busy: type %d %s", r->type, r->str ? r->str : "");
  th_reply_free(r);
  queue_is(&k, "ok-e ok-c");
  CHECK_EQ(zscore(&k, "ok-d"), -1);
  /* ... and with no-1 behind the copy: no-1 would be told, refused, nothing
   * evicted */
  SETUP(JAVA ":1", "ok-d", "ok-d", "no-1");
  DL("ok-d", stale), DL("no-1", live);
  is_noperm("head after a name listed twice", eval_as(c, &k, acq, latch, 8, try_ok), ":no-1");
  queue_is(&k, "ok-d ok-d no-1");

  /* 5. unlock: the head after the eviction (no-1) is told: refused,
   * nothing released, nothing evicted, no latch */
  SETUP("ok-c", "stale", "no-1");
  DL("stale", stale), DL("no-1", live);
  const char *unlock_ok[] = {"0", "30000", "ok-c", "publish", "15000", "-1", "0", now};
  is_noperm("unlock", eval_as(c, &k, unl, ulatch, 8, unlock_ok), ":no-1");
  CHECK_EQ(th_hget_num(srv, k.name, "ok-c"), 1);
  queue_is(&k, "stale no-1");
  CHECK_EQ(th_cmd_int(srv, "EXISTS", ulatch, NULL), 0);
  /* a name listed twice: evicted once, its copy (without a deadline) too;
   * the head after them is told */
  SETUP("ok-c", "ok-d", "ok-d", "ok-e", "no-1");
  DL("ok-d", stale), DL("ok-e", live), DL("no-1", live);
  r = eval_as(c, &k, unl, ulatch, 8, unlock_ok);
  CHECK_MSG(r->type == REDIS_REPLY_INTEGER && r->integer == 1, "unlock: type %d %s %lld", r->type, r->str ? r->str : "",
            r->integer);
  th_reply_free(r);
  queue_is(&k, "ok-e no-1");
#undef SETUP
#undef DL
  redisFree(c);
  th_reply_free(th_cmd(srv, "DEL", k.name, k.queue, k.zset, latch, ulatch, NULL));
  th_reply_free(th_cmd(srv, "ACL", "DELUSER", "fairpre", NULL));
  free(acq);
  free(unl);
}

/* ---------------------------------------------------------------- rlock's handoff */

/* What a message on CHAN says (malloc'd). */
static char *next_message(redisContext *sub, const char *chan) {
  void *m = NULL;
  CHECK_MSG(redisGetReply(sub, &m) == REDIS_OK, "no message on %s: %s", chan, sub->errstr);
  redisReply *r = m;
  CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 3);
  CHECK_STREQ(r->element[1]->str, chan);
  char *v = strdup(r->element[2]->str);
  th_reply_free(r);
  return v;
}

typedef struct field_is {
  const char *key, *field, *want;
} field_is_t;
static int hget_is(void *arg) {
  field_is_t *f = arg;
  char *v = th_cmd_str(srv, "HGET", f->key, f->field, NULL);
  int yes = v && !strcmp(v, f->want);
  free(v);
  return yes;
}

/* An rlock waiter with a watchdog lease, queued and subscribed, is granted
 * the lock by the holder's unlock itself (fair_unlock.lua): it returns on
 * the unlock's message, with no try after it; the queue and the registry
 * are empty, and the hold has the watchdog's lease. */
TEST(handoff_by_message) {
  keys_t k = keys_of("fair:handoff");
  char reg[160], ob[128], chanb[400];
  snprintf(reg, sizeof reg, "rlock_acquire_latch:{%s}:handoff", k.name);
  rlock_client_t *a = fair_client(0), *b = fair_client(0);
  rlock_lock_t *la = fair(a, k.name), *lb = fair(b, k.name);
  th_owner_id(b, 1, ob, sizeof ob);
  snprintf(chanb, sizeof chanb, "%s:%s", k.chan, ob);
  CHECK_OK(rlock_lock_acquire(la, 1, 0, RLOCK_LEASE_WATCHDOG, NULL));
  waiter_t w = {.lock = lb, .owner = 1, .wait_ms = 20000, .lease_ms = RLOCK_LEASE_WATCHDOG, .hold_ms = 300};
  waiter_start(&w);
  wait_queue_len(&k, 1);
  CHECK_MSG(th_wait_until(has_subscriber, chanb, 10000), "the waiter never subscribed to %s", chanb);
  char *r = th_cmd_str(srv, "HGET", reg, ob, NULL);
  CHECK_MSG(r != NULL, "the waiter did not register in %s", reg);
  free(r);
  /* the try the confirmed subscription starts (on_wake) comes after the
   * server counts the subscriber: wait for it, or it counts as a try after
   * the unlock (a TSan run saw that) */
  CHECK_MSG(TH_STAT_REACHES(b, acquire_attempts, 2, 10000), "the waiter did not try again once subscribed");
  rlock_stats_t st0, st1;
  rlock_client_stats(b, &st0);
  CHECK_OK(rlock_lock_release(la, 1));
  field_is_t f = {k.name, ob, "1"};
  CHECK_MSG(th_wait_until(hget_is, &f, 10000), "the waiter does not hold the lock after the unlock");
  CHECK(TH_STAT_REACHES(b, handoffs_heard, st0.handoffs_heard + 1, 10000));
  rlock_client_stats(b, &st1);
  CHECK_MSG(st1.acquire_attempts == st0.acquire_attempts, "the waiter tried %llu time(s) after the unlock",
            (unsigned long long)(st1.acquire_attempts - st0.acquire_attempts));
  nothing_queued(&k);
  CHECK_EQ(th_cmd_int(srv, "HEXISTS", reg, ob, NULL), 0);
  CHECK(th_cmd_int(srv, "PTTL", k.name, NULL) > 20000); /* the watchdog's lease (30 s) */
  pthread_join(w.t, NULL);
  CHECK_OK(w.rc); /* acquired, then released: its count was 1 */
  CHECK_EQ(th_cmd_int(srv, "EXISTS", k.name, NULL), 0);
  rlock_lock_free(la);
  rlock_lock_free(lb);
  rlock_client_free(a);
  rlock_client_free(b);
}

/* The handoff's scripts on their own: no grant when nobody listens on the
 * head's channel or its registered try has a tombstone; a grant sets that
 * try's latch to '1' and says "g:<id>"; the owner's next try (its message
 * lost) takes the hold over without a second level, while a try without
 * that latch re-enters; an undo of the granted try gives it back; a try
 * that may not be granted directly removes its registration. */
#define EVAL_V(...) \
  eval_int((int)(sizeof((const char *[]){__VA_ARGS__}) / sizeof(const char *)), (const char *[]){__VA_ARGS__}, &nil)
TEST(handoff_scripts) {
  keys_t k = keys_of("fair:hs");
  char *acq = lua_file("fair_acquire.lua");
  char *unl = lua_file("fair_unlock.lua"), *undo = lua_file("fair_acquire_undo.lua");
  char reg[160], wchan[400], now[24], lx[200], ly[200], lz[200], lx2[200], lx3[200], ul[200];
  const char *holder = "0d0d0d0d-0000-4000-8000-000000000001:h", *w = "0d0d0d0d-0000-4000-8000-000000000002:w";
  const char *X = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa1", *Y = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa2",
             *Z = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa3", *X2 = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa4",
             *X3 = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa5";
  snprintf(reg, sizeof reg, "rlock_acquire_latch:{%s}:handoff", k.name);
  snprintf(wchan, sizeof wchan, "%s:%s", k.chan, w);
  snprintf(lx, sizeof lx, "rlock_acquire_latch:{%s}:%s", k.name, X);
  snprintf(ly, sizeof ly, "rlock_acquire_latch:{%s}:%s", k.name, Y);
  snprintf(lz, sizeof lz, "rlock_acquire_latch:{%s}:%s", k.name, Z);
  snprintf(lx2, sizeof lx2, "rlock_acquire_latch:{%s}:%s", k.name, X2);
  snprintf(lx3, sizeof lx3, "rlock_acquire_latch:{%s}:%s", k.name, X3);
  snprintf(ul, sizeof ul, "redisson_unlock_latch:{%s}:u", k.name);
  int nil = 0;
#define TRY(latch, prev, id)                                                                                          \
  (snprintf(now, sizeof now, "%lld", (long long)epoch_ms()),                                                          \
   EVAL_V("EVAL", acq, "7", k.name, k.queue, k.zset, k.chan, latch, reg, prev, "30000", w, "5000", now, "15000", "q", \
          "0", "publish", id))
#define UNLOCK()                                                                                                      \
  (th_reply_free(th_cmd(srv, "DEL", ul, NULL)), snprintf(now, sizeof now, "%lld", (long long)epoch_ms()),             \
   EVAL_V("EVAL", unl, "6", k.name, k.queue, k.zset, k.chan, ul, reg, "0", "30000", holder, "publish", "15000", "-1", \
          "0", now))
#define HOLDER()                                                  \
  (th_reply_free(th_cmd(srv, "HSET", k.name, holder, "1", NULL)), \
   th_reply_free(th_cmd(srv, "PEXPIRE", k.name, "30000", NULL)))
  HOLDER();
  /* a try that may not be granted directly: no registration */
  CHECK(TRY(lx, lx, "") > 0 && !nil);
  CHECK_EQ(th_cmd_int(srv, "HEXISTS", reg, w, NULL), 0);
  /* registered; nobody listens on its channel: the unlock just frees */
  CHECK(TRY(lx, lx, X) > 0 && !nil);
  char *v = th_cmd_str(srv, "HGET", reg, w, NULL);
  char want[400];
  snprintf(want, sizeof want, "30000,5000,15000,%s,%s", X, lx);
  CHECK_STREQ(v, want);
  free(v);
  CHECK_EQ(UNLOCK(), 1);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", k.name, NULL), 0);
  CHECK_EQ(llen(&k), 1);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", lx, NULL), 0);
  /* listening: granted by the unlock, its latch '1', "g:<id>" */
  HOLDER();
  redisContext *sub = subscribe(wchan);
  CHECK_EQ(UNLOCK(), 1);
  v = next_message(sub, wchan);
  snprintf(want, sizeof want, "g:%s", X);
  CHECK_STREQ(v, want);
  free(v);
  v = th_cmd_str(srv, "HGET", k.name, w, NULL);
  CHECK_STREQ(v, "1");
  free(v);
  CHECK_EQ(th_cmd_int(srv, "HEXISTS", k.name, holder, NULL), 0);
  CHECK(th_cmd_int(srv, "PTTL", k.name, NULL) > 25000);
  v = th_cmd_str(srv, "GET", lx, NULL);
  CHECK_STREQ(v, "1");
  free(v);
  nothing_queued(&k);
  CHECK_EQ(th_cmd_int(srv, "HEXISTS", reg, w, NULL), 0);
  /* the message lost: the next try (X registered before it) takes the hold
   * over, one level; a re-send of X says granted; a try without it re-enters */
  CHECK_EQ(TRY(ly, lx, Y), 0);
  CHECK(nil);
  v = th_cmd_str(srv, "HGET", k.name, w, NULL);
  CHECK_STREQ(v, "1");
  free(v);
  CHECK_EQ(TRY(lx, lx, X), 0);
  CHECK(nil);
  CHECK_EQ(TRY(lz, lz, Z), 0);
  CHECK(nil);
  v = th_cmd_str(srv, "HGET", k.name, w, NULL);
  CHECK_STREQ(v, "2");
  free(v);
  th_reply_free(th_cmd(srv, "DEL", k.name, lx, ly, lz, NULL));
  /* a granted try the owner gave up on: its undo gives the hold back */
  HOLDER();
  CHECK(TRY(lx2, lx2, X2) > 0 && !nil);
  CHECK_EQ(UNLOCK(), 1);
  v = next_message(sub, wchan);
  snprintf(want, sizeof want, "g:%s", X2);
  CHECK_STREQ(v, want);
  free(v);
  CHECK_EQ(EVAL_V("EVAL", undo, "6", k.name, k.queue, k.zset, k.chan, lx2, reg, "0", w, "publish", "15000", "0", "5000",
                  "0"),
           1);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", k.name, NULL), 0);
  /* a tombstone on the registered try (an undo that kept the entry): no
   * grant, the head is told '0' */
  HOLDER();
  CHECK(TRY(lx3, lx3, X3) > 0 && !nil);
  CHECK_EQ(EVAL_V("EVAL", undo, "6", k.name, k.queue, k.zset, k.chan, lx3, reg, "0", w, "publish", "15000", "0", "5000",
                  "1"),
           0);
  CHECK_EQ(UNLOCK(), 1);
  v = next_message(sub, wchan);
  CHECK_STREQ(v, "0");
  free(v);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", k.name, NULL), 0);
  CHECK_EQ(llen(&k), 1);
  CHECK_EQ(TRY(lx3, lx3, X3), -3); /* a late copy of the tombstoned try */
  /* leaving takes the registration out too */
  CHECK_EQ(th_cmd_int(srv, "HEXISTS", reg, w, NULL), 1);
  CHECK_EQ(EVAL_V("EVAL", undo, "6", k.name, k.queue, k.zset, k.chan, lx3, reg, "0", w, "publish", "15000", "0", "5000",
                  "0"),
           0);
  CHECK_EQ(th_cmd_int(srv, "HEXISTS", reg, w, NULL), 0);
  nothing_queued(&k);
  th_reply_free(th_cmd(srv, "DEL", k.name, k.queue, k.zset, reg, lx, lx2, lx3, ul, NULL));
#undef TRY
#undef UNLOCK
#undef HOLDER
  redisFree(sub);
  free(acq);
  free(unl);
  free(undo);
}

/* The handoff's latch outlives the hold it marks. The waiter's next try
 * after a lost "g:<id>" comes within its wait bound (half its slot, or the
 * holder's PTTL): with a 30 s slot and a watchdog holder that is up to 15 s,
 * while the latch lived only the latch TTL (10 s at least) from the unlock.
 * A try finding the handoff's hold (30 s lease) but no latch re-entered:
 * count 2 on the server, 1 in the client (the unlock then finds a count
 * mismatch, or with the check off the lock stays held until its lease runs
 * out). Here the latch TTL is 200 ms and the next try comes after it. */
TEST(handoff_latch_outlives_hold) {
  keys_t k = keys_of("fair:hl");
  char *acq = lua_file("fair_acquire.lua"), *unl = lua_file("fair_unlock.lua");
  char reg[160], wchan[400], now[24], lx[200], ly[200], ul[200];
  const char *holder = "0d0d0d0d-0000-4000-8000-000000000001:h", *w = "0d0d0d0d-0000-4000-8000-000000000002:w";
  const char *X = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb1", *Y = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb2";
  snprintf(reg, sizeof reg, "rlock_acquire_latch:{%s}:handoff", k.name);
  snprintf(wchan, sizeof wchan, "%s:%s", k.chan, w);
  snprintf(lx, sizeof lx, "rlock_acquire_latch:{%s}:%s", k.name, X);
  snprintf(ly, sizeof ly, "rlock_acquire_latch:{%s}:%s", k.name, Y);
  snprintf(ul, sizeof ul, "redisson_unlock_latch:{%s}:u", k.name);
  int nil = 0;
  th_reply_free(th_cmd(srv, "DEL", k.name, k.queue, k.zset, reg, lx, ly, ul, NULL));
  th_reply_free(th_cmd(srv, "HSET", k.name, holder, "1", NULL));
  th_reply_free(th_cmd(srv, "PEXPIRE", k.name, "30000", NULL));
  redisContext *sub = subscribe(wchan);
  snprintf(now, sizeof now, "%lld", (long long)epoch_ms());
  CHECK(EVAL_V("EVAL", acq, "7", k.name, k.queue, k.zset, k.chan, lx, reg, lx, "30000", w, "30000", now, "200", "q",
               "0", "publish", X) > 0 &&
        !nil);
  snprintf(now, sizeof now, "%lld", (long long)epoch_ms());
  CHECK_EQ(EVAL_V("EVAL", unl, "6", k.name, k.queue, k.zset, k.chan, ul, reg, "0", "30000", holder, "publish", "15000",
                  "-1", "0", now),
           1);
  char *v = next_message(sub, wchan), want[200];
  snprintf(want, sizeof want, "g:%s", X);
  CHECK_STREQ(v, want); /* granted; the waiter does not hear it (lost) */
  free(v);
  th_sleep_ms(300);                                     /* past the latch TTL the registration carried (200 ms) */
  CHECK(th_cmd_int(srv, "PTTL", k.name, NULL) > 25000); /* the handoff's hold stands */
  snprintf(now, sizeof now, "%lld", (long long)epoch_ms());
  CHECK_EQ(EVAL_V("EVAL", acq, "7", k.name, k.queue, k.zset, k.chan, ly, reg, lx, "30000", w, "30000", now, "200", "q",
                  "0", "publish", Y),
           0);
  CHECK(nil);
  v = th_cmd_str(srv, "HGET", k.name, w, NULL);
  CHECK_MSG(v && !strcmp(v, "1"), "the owner's count after its next try took the handoff's hold over: %s (want 1)",
            v ? v : "(none)");
  free(v);
  th_reply_free(th_cmd(srv, "DEL", k.name, k.queue, k.zset, reg, lx, ly, ul, NULL));
  redisFree(sub);
  free(acq);
  free(unl);
}

/* The registry's latch is the registered try's own: the unlock writes only
 * rlock_acquire_latch:{NAME}:<id> of the id it grants. On HEAD it wrote
 * whatever key the registry entry named (SET key 1 PX ...), with the
 * unlocker's rights (only one that did not exist): a user that may write
 * the registry (any user of the fair lock, docs/cli.md) had another user's
 * unlock create a key outside its own ACL (another lock's NAME as a string:
 * WRONGTYPE for that lock until the TTL) (and on a Cluster, a key of another slot failed the unlock
 * after its writes). Such an entry is not a handoff: the head is told '0'. */
TEST(handoff_latch_is_the_tries_own) {
  keys_t k = keys_of("fair:hk");
  char *acq = lua_file("fair_acquire.lua"), *unl = lua_file("fair_unlock.lua");
  char reg[160], wchan[400], now[24], lx[200], ul[200], forged[600];
  const char *holder = "0d0d0d0d-0000-4000-8000-000000000001:h", *w = "0d0d0d0d-0000-4000-8000-000000000002:w";
  const char *X = "ccccccccccccccccccccccccccccccc1", *victim = "fair:hk:someone-elses-key";
  snprintf(reg, sizeof reg, "rlock_acquire_latch:{%s}:handoff", k.name);
  snprintf(wchan, sizeof wchan, "%s:%s", k.chan, w);
  snprintf(lx, sizeof lx, "rlock_acquire_latch:{%s}:%s", k.name, X);
  snprintf(ul, sizeof ul, "redisson_unlock_latch:{%s}:u", k.name);
  int nil = 0;
  th_reply_free(th_cmd(srv, "DEL", k.name, k.queue, k.zset, reg, lx, ul, victim, NULL));
  th_reply_free(th_cmd(srv, "HSET", k.name, holder, "1", NULL));
  th_reply_free(th_cmd(srv, "PEXPIRE", k.name, "30000", NULL));
  redisContext *sub = subscribe(wchan);
  snprintf(now, sizeof now, "%lld", (long long)epoch_ms());
  CHECK(EVAL_V("EVAL", acq, "7", k.name, k.queue, k.zset, k.chan, lx, reg, lx, "30000", w, "5000", now, "15000", "q",
               "0", "publish", X) > 0 &&
        !nil);
  /* the entry as a user of the lock may write it: another key as the latch */
  snprintf(forged, sizeof forged, "30000,5000,15000,%s,%s", X, victim);
  th_reply_free(th_cmd(srv, "HSET", reg, w, forged, NULL));
  snprintf(now, sizeof now, "%lld", (long long)epoch_ms());
  CHECK_EQ(EVAL_V("EVAL", unl, "6", k.name, k.queue, k.zset, k.chan, ul, reg, "0", "30000", holder, "publish", "15000",
                  "-1", "0", now),
           1);
  char *v = th_cmd_str(srv, "GET", victim, NULL);
  CHECK_MSG(!v, "the unlock wrote the key the registry named: %s = %s (want none)", victim, v ? v : "(none)");
  free(v);
  v = next_message(sub, wchan);
  CHECK_STREQ(v, "0"); /* told, not granted */
  free(v);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", k.name, NULL), 0);
  th_reply_free(th_cmd(srv, "DEL", k.name, k.queue, k.zset, reg, lx, ul, victim, NULL));
  redisFree(sub);
  free(acq);
  free(unl);
}

/* A handed waiter that never hears g:<id> (the unlock's message goes to a
 * decoy channel another connection listens on, as a subscriber connection
 * the server still counts but the client lost would): its next try, due
 * within half its lease (watchdog 600 ms), takes the hold over before that
 * lease ends, so the Java waiter queued behind it is not granted first.
 * Without the half-lease bound it slept to half its slot (5 s), the hold
 * expired at 600 ms and Java took the lock out of turn. */
TEST(handoff_unheard_taken_over_within_lease) {
  keys_t k = keys_of("fair:unheard");
  char reg[160], ob[128], decoy[400], ul[200], now[24];
  const char *holder = "0e0e0e0e-0000-4000-8000-000000000001:h";
  snprintf(reg, sizeof reg, "rlock_acquire_latch:{%s}:handoff", k.name);
  snprintf(ul, sizeof ul, "redisson_unlock_latch:{%s}:u", k.name);
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = srv->url;
  o.watchdog_timeout_ms = 600;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  rlock_lock_t *l = fair(c, k.name);
  th_owner_id(c, 1, ob, sizeof ob);
  snprintf(decoy, sizeof decoy, "decoy:%s", ob);
  th_reply_free(th_cmd(srv, "HSET", k.name, holder, "1", NULL));
  th_reply_free(th_cmd(srv, "PEXPIRE", k.name, "30000", NULL));
  atomic_store(&acquired_n, 0);
  waiter_t w = {.lock = l, .owner = 1, .wait_ms = 20000, .lease_ms = RLOCK_LEASE_WATCHDOG, .hold_ms = 700};
  waiter_start(&w);
  wait_queue_len(&k, 1);
  CHECK(java_acquire(&k, 7, 30000, 300000) > 0); /* Java queues behind it */
  CHECK_EQ(llen(&k), 2);
  CHECK_EQ(th_cmd_int(srv, "HEXISTS", reg, ob, NULL), 1);
  redisContext *sub = subscribe(decoy);
  char *unl = lua_file("fair_unlock.lua");
  snprintf(now, sizeof now, "%lld", (long long)epoch_ms());
  int nil = 0;
  CHECK_EQ(EVAL_V("EVAL", unl, "6", k.name, k.queue, k.zset, "decoy", ul, reg, "0", "30000", holder, "publish", "15000",
                  "-1", "0", now),
           1);
  char *v = th_cmd_str(srv, "HGET", k.name, ob, NULL);
  CHECK_STREQ(v, "1"); /* handed to the waiter, which heard nothing */
  free(v);
  /* Java tries until granted; the waiter must have got the lock first */
  int64_t t0 = th_now_ms();
  int c_first = -1;
  while (th_now_ms() - t0 < 10000) {
    if (java_acquire(&k, 7, 30000, 300000) == -1000) {
      c_first = atomic_load(&acquired_n);
      break;
    }
    th_sleep_ms(20);
  }
  CHECK_MSG(c_first >= 0, "Java was never granted");
  CHECK_MSG(c_first == 1, "Java was granted before the handed waiter took its hold over");
  pthread_join(w.t, NULL);
  CHECK_OK(w.rc);
  CHECK_EQ(java_unlock(&k, 7), 1);
  th_reply_free(th_cmd(srv, "DEL", k.name, k.queue, k.zset, reg, ul, NULL));
  redisFree(sub);
  free(unl);
  rlock_lock_free(l);
  rlock_client_free(c);
}
#undef EVAL_V

/* argv[1]: run only the test of that name. */
static const char *only;
#define RUN_ONE(n) \
  if (!only || !strcmp(only, #n)) RUN(n)

int main(int argc, char **argv) {
  th_init(argc, argv, 170);
  only = argc > 1 ? argv[1] : NULL;
  srv = th_server_start(NULL);
  RUN_ONE(basic_trylock0_never_queues);
  RUN_ONE(timed_try_leaves_no_entry);
  RUN_ONE(cancel_leaves_queue);
  RUN_ONE(fifo_across_clients);
  RUN_ONE(live_waiter_keeps_place);
  RUN_ONE(dead_waiter_stops_blocking);
  RUN_ONE(nonreentrant_fair);
  RUN_ONE(watchdog_renews_fair);
  RUN_ONE(redisson_mixed_queue);
  RUN_ONE(redisson_acquire_failed_drift);
  RUN_ONE(unlock_wakes_head_only);
  RUN_ONE(expire_and_timed_wait);
  RUN_ONE(redisson_trylock_no_wait);
  RUN_ONE(give_up_then_wait_again);
  RUN_ONE(close_leaves_queue);
  RUN_ONE(odd_name);
  RUN_ONE(head_gives_up_next_keeps_place);
  RUN_ONE(mid_queue_leave_behind_dead_head);
  RUN_ONE(dead_head_blocks_until_its_deadline);
  RUN_ONE(ghost_head_evicted);
  RUN_ONE(ghost_head_before_java);
  RUN_ONE(own_entry_without_deadline);
  RUN_ONE(deadline_without_entry);
  RUN_ONE(dead_pair_ahead_live_keeps_place);
  RUN_ONE(mixed_slots_live_waiter_keeps_place);
  RUN_ONE(many_waiters_exclusive);
  RUN_ONE(paused_try_leaves_no_entry);
  RUN_ONE(late_copy_after_undo_never_queues);
  RUN_ONE(replica_sync_fair);
  RUN_ONE(cluster_sharded);
  RUN_ONE(sentinel_fifo);
  RUN_ONE(scripts_check_channel_before_writes);
  RUN_ONE(handoff_by_message);
  RUN_ONE(handoff_scripts);
  RUN_ONE(handoff_latch_outlives_hold);
  RUN_ONE(handoff_latch_is_the_tries_own);
  RUN_ONE(handoff_unheard_taken_over_within_lease);
  th_server_stop(srv);
  return th_done();
}
