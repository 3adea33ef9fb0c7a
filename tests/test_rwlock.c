/* test_rwlock.c -- the read-write lock (rlock_rwlock_new, kinds/rwlock.c,
 * lua/rw_*.lua) against a real redis-server: Redisson's RReadWriteLock
 * storage, channel and messages, its own test behaviours
 * (RedissonReadWriteLockTest) and rlock's additions (upgrade refused,
 * downgrade wakes readers); and cross-implementation checks that run
 * Redisson 4.7.0's read/write script steps (written here from the reference:
 * same KEYS/ARGV positions) on the same keys as rlock.
 *   many_readers             readers of 4 owners at once; per-hold timeout keys
 *   writer_excludes_readers  testReadLockIsLocked, testWriteReadReentrancy, testWR
 *   write_unlock_wakes_all   testWriteRead: readers parked behind a writer with a
 *                            60 s lease all enter on its unlock (message "1")
 *   read_lease_per_hold      testReadLockLeaseTimeoutDiffThreads: an early unlock
 *                            does not cut another reader's lease; the writer
 *                            enters after the last lease, not the longest asked
 *   dead_reader_zombie       testMultiInstanceReadLockZombieCleanup (#7098): a
 *                            dead process's read hold is not renewed by a live
 *                            reader's watchdog; the live unlock clears it
 *   read_renewal             testReadLockExpirationRenewal (#1604): the
 *                            watchdog renews the read hold's timeout keys
 *   upgrade_refused          a reader's write acquire fails at once (#4796)
 *   downgrade_wakes_readers  write -> read -> unlock write: waiting readers enter
 *   force_unlock_modes       testForceUnlock
 *   expire_then_unlock       testExpireRead/testExpireWrite
 *   write_reentry_adds_lease testWriteLockExpiration: PTTL + lease (Redisson's)
 *   braces_name              testName ({tag} names), refused brace forms
 *   resend_counts_once       a server slower than the command timeout: re-sent
 *                            read/write tries and unlocks count once (latches)
 *   mixed_threads            8 threads of 2 clients, reads and writes in turn
 *                            on "{test}:abc:key": no writer beside anyone
 *   cross_java_reader        Redisson's read scripts and rlock readers share
 *                            read mode; a Java read unlock keeps rlock's hold
 *                            (it reads rlock's timeout keys) and the hash TTL
 *   cross_java_writer_wakes  Redisson's write unlock ("1") wakes rlock readers;
 *                            rlock's write unlock publishes "1", read unlock "0"
 *   cross_java_upgrade_guard rlock's writer waits on a Java reader; Redisson's
 *                            write acquire sees rlock's read mode
 *   read_unlock_keeps_write_lease  the writer's read unlock never cuts its
 *                            write lease (two read holds, 2 s and 30 s)
 *   read_unlock_shortening_ttl_wakes_writer  a writer parked on a live
 *                            reader's 40 s is told when that reader leaves a
 *                            dead one's 1.5 s
 *   write_unlock_keeps_read_lease  the writer's partial write unlock never
 *                            cuts its own read hold's lease
 *   downgrade_ttl_is_read_holds  after a downgrade the hash TTL is the read
 *                            holds' (a dead reader's 1.5 s, not the write lease)
 * One case runs alone when its name is the argument. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static th_server_t *srv;

#define JAVA_OWNER "5d9f6a2c-0b1e-4c3d-8e7f-9a0b1c2d3e4f:1"
#define JAVA_WRITE JAVA_OWNER ":write"

/* ------------------------------------------------------------ Redisson's scripts
 * RedissonReadLock / RedissonWriteLock 4.7.0, step by step (reference §4.2). */

static const char *R_READ_ACQUIRE =
    "local mode = redis.call('hget', KEYS[1], 'mode'); "
    "if (mode == false) then "
    "  redis.call('hset', KEYS[1], 'mode', 'read'); "
    "  redis.call('hset', KEYS[1], ARGV[2], 1); "
    "  redis.call('set', KEYS[2] .. ':1', 1); "
    "  redis.call('pexpire', KEYS[2] .. ':1', ARGV[1]); "
    "  redis.call('pexpire', KEYS[1], ARGV[1]); "
    "  return nil; "
    "end; "
    "if (mode == 'read') or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then "
    "  local ind = redis.call('hincrby', KEYS[1], ARGV[2], 1); "
    "  local key = KEYS[2] .. ':' .. ind; "
    "  redis.call('set', key, 1); "
    "  redis.call('pexpire', key, ARGV[1]); "
    "  local remainTime = redis.call('pttl', KEYS[1]); "
    "  redis.call('pexpire', KEYS[1], math.max(remainTime, ARGV[1])); "
    "  return nil; "
    "end; "
    "return redis.call('pttl', KEYS[1]);";

static const char *R_READ_UNLOCK =
    "local val = redis.call('get', KEYS[5]); "
    "if val ~= false then return tonumber(val); end; "
    "local mode = redis.call('hget', KEYS[1], 'mode'); "
    "if (mode == false) then "
    "  redis.call(ARGV[3], KEYS[2], ARGV[1]); "
    "  redis.call('set', KEYS[5], 1, 'px', ARGV[4]); "
    "  return nil; "
    "end; "
    "local lockExists = redis.call('hexists', KEYS[1], ARGV[2]); "
    "if (lockExists == 0) then return nil; end; "
    "local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1); "
    "if (counter == 0) then redis.call('hdel', KEYS[1], ARGV[2]); end; "
    "redis.call('del', KEYS[3] .. ':' .. (counter+1)); "
    "if (redis.call('hlen', KEYS[1]) > 1) then "
    "  local maxRemainTime = -3; "
    "  local keys = redis.call('hkeys', KEYS[1]); "
    "  for n, key in ipairs(keys) do "
    "    counter = tonumber(redis.call('hget', KEYS[1], key)); "
    "    if type(counter) == 'number' then "
    "      for i=counter, 1, -1 do "
    "        local remainTime = redis.call('pttl', KEYS[4] .. ':' .. key .. ':rwlock_timeout:' .. i); "
    "        maxRemainTime = math.max(remainTime, maxRemainTime); "
    "      end; "
    "    end; "
    "  end; "
    "  if maxRemainTime > 0 then "
    "    redis.call('pexpire', KEYS[1], maxRemainTime); "
    "    redis.call('set', KEYS[5], 0, 'px', ARGV[4]); "
    "    return 0; "
    "  end; "
    "  if mode == 'write' then "
    "    redis.call('set', KEYS[5], 0, 'px', ARGV[4]); "
    "    return 0; "
    "  end; "
    "end; "
    "redis.call('del', KEYS[1]); "
    "redis.call(ARGV[3], KEYS[2], ARGV[1]); "
    "redis.call('set', KEYS[5], 1, 'px', ARGV[4]); "
    "return 1;";

static const char *R_WRITE_ACQUIRE =
    "local mode = redis.call('hget', KEYS[1], 'mode'); "
    "if (mode == false) then "
    "  redis.call('hset', KEYS[1], 'mode', 'write'); "
    "  redis.call('hset', KEYS[1], ARGV[2], 1); "
    "  redis.call('pexpire', KEYS[1], ARGV[1]); "
    "  return nil; "
    "end; "
    "if (mode == 'write') then "
    "  if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then "
    "    redis.call('hincrby', KEYS[1], ARGV[2], 1); "
    "    local currentExpire = redis.call('pttl', KEYS[1]); "
    "    redis.call('pexpire', KEYS[1], currentExpire + ARGV[1]); "
    "    return nil; "
    "  end; "
    "end; "
    "return redis.call('pttl', KEYS[1]);";

static const char *R_WRITE_UNLOCK =
    "local val = redis.call('get', KEYS[3]); "
    "if val ~= false then return tonumber(val); end; "
    "local mode = redis.call('hget', KEYS[1], 'mode'); "
    "if (mode == false) then "
    "  redis.call(ARGV[4], KEYS[2], ARGV[1]); "
    "  redis.call('set', KEYS[3], 1, 'px', ARGV[5]); "
    "  return nil; "
    "end; "
    "if (mode == 'write') then "
    "  local lockExists = redis.call('hexists', KEYS[1], ARGV[3]); "
    "  if (lockExists == 0) then return nil; "
    "  else "
    "    local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); "
    "    if (counter > 0) then "
    "      redis.call('pexpire', KEYS[1], ARGV[2]); "
    "      redis.call('set', KEYS[3], 0, 'px', ARGV[5]); "
    "      return 0; "
    "    else "
    "      redis.call('hdel', KEYS[1], ARGV[3]); "
    "      if (redis.call('hlen', KEYS[1]) == 1) then "
    "        redis.call('del', KEYS[1]); "
    "        redis.call(ARGV[4], KEYS[2], ARGV[1]); "
    "      else "
    "        redis.call('hset', KEYS[1], 'mode', 'read'); "
    "      end; "
    "      redis.call('set', KEYS[3], 1, 'px', ARGV[5]); "
    "      return 1; "
    "    end; "
    "  end; "
    "end; "
    "return nil;";

/* -1000: nil (acquired); else the integer reply. */
static long long reply_num(redisReply *r, const char *what) {
  CHECK_MSG(r->type == REDIS_REPLY_NIL || r->type == REDIS_REPLY_INTEGER, "%s: type %d %s", what, r->type,
            r->str ? r->str : "");
  long long v = r->type == REDIS_REPLY_NIL ? -1000 : r->integer;
  th_reply_free(r);
  return v;
}

static void prefix_of(const char *name, char *buf, size_t len) {
  if (strchr(name, '{')) snprintf(buf, len, "%s", name);
  else snprintf(buf, len, "{%s}", name);
}

static void channel_of(const char *name, char *buf, size_t len) {
  if (strchr(name, '{')) snprintf(buf, len, "redisson_rwlock:%s", name);
  else snprintf(buf, len, "redisson_rwlock:{%s}", name);
}

static long long java_read_lock(const char *name, const char *lease) {
  char kp[256], tp[512];
  prefix_of(name, kp, sizeof kp);
  snprintf(tp, sizeof tp, "%s:%s:rwlock_timeout", kp, JAVA_OWNER);
  const char *argv[] = {"EVAL", R_READ_ACQUIRE, "2", name, tp, lease, JAVA_OWNER, JAVA_WRITE};
  return reply_num(th_cmdv(srv, 8, argv, NULL), "read acquire");
}

static long long java_read_unlock(const char *name) {
  static int req;
  char kp[256], tp[512], chan[300], latch[320];
  prefix_of(name, kp, sizeof kp);
  snprintf(tp, sizeof tp, "%s:%s:rwlock_timeout", kp, JAVA_OWNER);
  channel_of(name, chan, sizeof chan);
  snprintf(latch, sizeof latch, "redisson_unlock_latch:%s:javar-%d", kp, ++req);
  const char *argv[] = {"EVAL", R_READ_UNLOCK, "5", name, chan, tp, kp, latch, "0", JAVA_OWNER, "publish", "16000"};
  long long v = reply_num(th_cmdv(srv, 12, argv, NULL), "read unlock");
  th_reply_free(th_cmd(srv, "DEL", latch, NULL));
  return v;
}

static long long java_write_lock(const char *name, const char *lease) {
  const char *argv[] = {"EVAL", R_WRITE_ACQUIRE, "1", name, lease, JAVA_WRITE};
  return reply_num(th_cmdv(srv, 6, argv, NULL), "write acquire");
}

static long long java_write_unlock(const char *name) {
  static int req;
  char kp[256], chan[300], latch[320];
  prefix_of(name, kp, sizeof kp);
  channel_of(name, chan, sizeof chan);
  snprintf(latch, sizeof latch, "redisson_unlock_latch:%s:javaw-%d", kp, ++req);
  const char *argv[] = {"EVAL", R_WRITE_UNLOCK, "3", name, chan, latch, "1", "30000", JAVA_WRITE, "publish", "16000"};
  long long v = reply_num(th_cmdv(srv, 11, argv, NULL), "write unlock");
  th_reply_free(th_cmd(srv, "DEL", latch, NULL));
  return v;
}

/* ------------------------------------------------------------ helpers */

static void rw(rlock_client_t *c, const char *name, rlock_lock_t **r, rlock_lock_t **w) {
  CHECK_OK(rlock_rwlock_new(c, name, strlen(name), r, w));
}

/* The timeout key of rlock owner n's i-th read hold. */
static void timeout_key(rlock_client_t *c, const char *name, uint64_t owner, int i, char *buf, size_t len) {
  char id[128], kp[256];
  th_owner_id(c, owner, id, sizeof id);
  prefix_of(name, kp, sizeof kp);
  snprintf(buf, len, "%s:%s:rwlock_timeout:%d", kp, id, i);
}

static int is_locked(rlock_lock_t *l) {
  int v = -1;
  CHECK_OK(rlock_lock_is_locked(l, &v));
  return v;
}

struct waiter {
  rlock_lock_t *lock;
  uint64_t owner;
  int64_t wait_ms;
  int rc;
  int64_t done_at;
};

static void *wait_thread(void *p) {
  struct waiter *w = p;
  w->rc = rlock_lock_acquire(w->lock, w->owner, w->wait_ms, 60000, NULL);
  w->done_at = th_now_ms();
  return NULL;
}

static int subscribed(void *chan) { return th_numsub(srv, chan) >= 1; }

/* Every waiter got its first (busy) answer: n more scripts ran (EVALSHA)
 * since base; nothing else runs scripts then. */
static long long evalsha_want;
static int tries_seen(void *unused) {
  (void)unused;
  return th_cmdstat(srv, "evalsha") >= evalsha_want;
}
static void await_tries(long long base, int n) {
  evalsha_want = base + n;
  CHECK(th_wait_until(tries_seen, NULL, 10000));
}

/* ------------------------------------------------------------ tests */

TEST(many_readers) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *r, *w;
  rw(c, "rw:many", &r, &w);
  for (uint64_t o = 1; o <= 4; o++) CHECK_OK(rlock_lock_acquire(r, o, 0, 30000, NULL));
  CHECK_OK(rlock_lock_acquire(r, 2, 0, 30000, NULL)); /* reentrant read: count 2 */
  char *mode = th_cmd_str(srv, "HGET", "rw:many", "mode", NULL);
  CHECK_STREQ(mode, "read");
  free(mode);
  char id[128], key[512];
  th_owner_id(c, 2, id, sizeof id);
  CHECK_EQ(th_hget_num(srv, "rw:many", id), 2);
  timeout_key(c, "rw:many", 2, 2, key, sizeof key);
  CHECK(th_cmd_int(srv, "PTTL", key, NULL) > 20000);
  CHECK_EQ(is_locked(r), 1);
  CHECK_EQ(is_locked(w), 0);
  CHECK_RC(rlock_lock_acquire(w, 9, 0, 30000, NULL), RLOCK_EBUSY);
  rlock_holder_t *h = NULL;
  size_t n = 0;
  CHECK_OK(rlock_lock_holders(r, &h, &n));
  CHECK_EQ(n, 4); /* 'mode' is not a holder */
  rlock_holders_free(h, n);
  int64_t cnt = 0;
  CHECK_OK(rlock_lock_hold_count(r, 2, &cnt));
  CHECK_EQ(cnt, 2);
  for (uint64_t o = 1; o <= 4; o++) CHECK_OK(rlock_lock_release(r, o));
  CHECK_OK(rlock_lock_release(r, 2));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "rw:many", NULL), 0);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", key, NULL), 0); /* LIFO: hold 2's key went with it */
  CHECK_OK(rlock_lock_acquire(w, 9, 0, 30000, NULL));
  CHECK_OK(rlock_lock_release(w, 9));
  rlock_lock_free(r), rlock_lock_free(w);
  rlock_client_free(c);
}

TEST(writer_excludes_readers) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *r, *w;
  rw(c, "rw:excl", &r, &w);
  CHECK_OK(rlock_lock_acquire(w, 1, 0, 30000, NULL));
  char id[128];
  th_owner_id(c, 1, id, sizeof id);
  strcat(id, ":write");
  CHECK_EQ(th_hget_num(srv, "rw:excl", id), 1); /* Redisson's "<uuid>:<tid>:write" field */
  /* testReadLockIsLocked */
  CHECK_EQ(is_locked(r), 0);
  CHECK_EQ(is_locked(w), 1);
  CHECK_RC(rlock_lock_acquire(r, 2, 0, 30000, NULL), RLOCK_EBUSY);
  CHECK_RC(rlock_lock_acquire(w, 2, 0, 30000, NULL), RLOCK_EBUSY);
  CHECK_OK(rlock_lock_acquire(r, 1, 0, 30000, NULL)); /* the writer may read */
  CHECK_EQ(is_locked(r), 1);                          /* #4400 */
  /* testWR: unlocking the read keeps the write */
  CHECK_OK(rlock_lock_release(r, 1));
  CHECK_EQ(is_locked(w), 1);
  /* testWriteReadReentrancy: after the write unlock the read stays */
  CHECK_OK(rlock_lock_acquire(r, 1, 0, 30000, NULL));
  CHECK_OK(rlock_lock_release(w, 1));
  CHECK_EQ(is_locked(w), 0);
  CHECK_EQ(is_locked(r), 1);
  CHECK_RC(rlock_lock_acquire(w, 2, 0, 30000, NULL), RLOCK_EBUSY);
  CHECK_OK(rlock_lock_release(r, 1));
  CHECK_OK(rlock_lock_acquire(w, 2, 0, 30000, NULL));
  CHECK_OK(rlock_lock_release(w, 2));
  CHECK_RC(rlock_lock_release(w, 2), RLOCK_ENOTHELD);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "rw:excl", NULL), 0);
  rlock_lock_free(r), rlock_lock_free(w);
  rlock_client_free(c);
}

/* Rounds: the readers' tries may still be in flight when the unlock's
 * message comes (every other round does not wait for their busy answers):
 * each of them must try again too, not only the parked ones (before the
 * per-waiter token, one of several in flight missed it and slept its bound:
 * a round missed it rarely, 40 rounds failed 1 run in 3 or more). */
TEST(write_unlock_wakes_all) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_client_t *c2 = th_client(srv->url, 0);
  rlock_lock_t *r, *w, *r2, *w2;
  rw(c, "rw:wake", &r, &w);
  rw(c2, "rw:wake", &r2, &w2);
  enum { N = 6, ROUNDS = 40 };
  for (int round = 0; round < ROUNDS; round++) {
    CHECK_OK(rlock_lock_acquire(w, 1, 0, 20000, NULL)); /* only a message can end the wait early */
    struct waiter ws[N];
    pthread_t t[N];
    long long base = th_cmdstat(srv, "evalsha");
    for (int i = 0; i < N; i++) {
      ws[i] = (struct waiter){.lock = i % 2 ? r2 : r, .owner = 10 + (uint64_t)i, .wait_ms = 15000};
      pthread_create(&t[i], NULL, wait_thread, &ws[i]);
    }
    if (round % 2 == 0) await_tries(base, N);
    else await_tries(base, 1);
    int64_t t0 = th_now_ms();
    CHECK_OK(rlock_lock_release(w, 1));
    int64_t worst = 0;
    for (int i = 0; i < N; i++) {
      pthread_join(t[i], NULL);
      CHECK_OK(ws[i].rc);
      if (ws[i].done_at - t0 > worst) worst = ws[i].done_at - t0;
    }
    printf("# round %d: %d readers entered within %lld ms of the write unlock (lease 20 s)\n", round, N,
           (long long)worst);
    CHECK(worst < 10000); /* woken by the message, not the lease */
    CHECK_EQ(th_cmd_int(srv, "HLEN", "rw:wake", NULL), 1 + N);
    for (int i = 0; i < N; i++) CHECK_OK(rlock_lock_release(ws[i].lock, ws[i].owner));
    CHECK_EQ(th_cmd_int(srv, "EXISTS", "rw:wake", NULL), 0);
  }
  rlock_lock_free(r), rlock_lock_free(w), rlock_lock_free(r2), rlock_lock_free(w2);
  rlock_client_free(c), rlock_client_free(c2);
}

TEST(read_lease_per_hold) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *r, *w;
  rw(c, "rw:lease", &r, &w);
  CHECK_OK(rlock_lock_acquire(r, 1, 0, 1500, NULL));  /* a short lease, never released */
  CHECK_OK(rlock_lock_acquire(r, 2, 0, 40000, NULL)); /* the longest lease asked */
  CHECK(th_cmd_int(srv, "PTTL", "rw:lease", NULL) > 30000);
  CHECK_OK(rlock_lock_release(r, 2)); /* the TTL becomes owner 1's remaining lease */
  long long ttl = th_cmd_int(srv, "PTTL", "rw:lease", NULL);
  CHECK_MSG(ttl > 0 && ttl <= 1500, "PTTL %lld", ttl);
  int64_t t0 = th_now_ms();
  CHECK_OK(rlock_lock_acquire(w, 3, 20000, 30000, NULL));
  printf("# the writer entered after %lld ms (reader 1's lease 1500 ms, reader 2's 40 s)\n",
         (long long)(th_now_ms() - t0));
  CHECK(th_now_ms() - t0 < 15000);
  CHECK_RC(rlock_lock_release(r, 1), RLOCK_ENOTHELD); /* its lease ran out */
  CHECK_OK(rlock_lock_release(w, 3));
  rlock_lock_free(r), rlock_lock_free(w);
  rlock_client_free(c);
}

static int key_gone(void *key) { return th_cmd_int(srv, "EXISTS", (const char *)key, NULL) == 0; }

TEST(dead_reader_zombie) {
  /* A child process takes a read hold with a 1.5 s watchdog and dies. */
  char key[512];
  pid_t pid = th_fork();
  if (pid == 0) {
    rlock_client_t *c = th_client(srv->url, 1500);
    rlock_lock_t *r, *w;
    if (rlock_rwlock_new(c, "rw:zombie", 9, &r, &w) || rlock_lock_acquire(r, 1, 0, RLOCK_LEASE_WATCHDOG, NULL))
      th_exit_by_exec(1);
    char id[128], line[256];
    th_owner_id(c, 1, id, sizeof id);
    snprintf(line, sizeof line, "{rw:zombie}:%s:rwlock_timeout:1", id);
    redisReply *rep = th_cmd(srv, "SET", "rw:zombie:childkey", line, NULL);
    th_reply_free(rep);
    th_exit_by_exec(0); /* no unlock, no client free: a dead process (exec: valgrind checks no leaks of it) */
  }
  CHECK_EQ(th_wait_child(pid), 0);
  char *ck = th_cmd_str(srv, "GET", "rw:zombie:childkey", NULL);
  CHECK(ck != NULL);
  snprintf(key, sizeof key, "%s", ck);
  free(ck);
  /* A live reader with its own watchdog (1.5 s): renews only its own holds. */
  rlock_client_t *c = th_client(srv->url, 1500);
  rlock_lock_t *r, *w;
  rw(c, "rw:zombie", &r, &w);
  CHECK_OK(rlock_lock_acquire(r, 1, 0, RLOCK_LEASE_WATCHDOG, NULL));
  CHECK(th_wait_until(key_gone, key, 10000)); /* the dead hold's lease ran out */
  char mine[512];
  timeout_key(c, "rw:zombie", 1, 1, mine, sizeof mine);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", mine, NULL), 1);      /* renewed past 1.5 s */
  CHECK_EQ(th_cmd_int(srv, "HLEN", "rw:zombie", NULL), 3); /* mode, the zombie's field, ours */
  CHECK_OK(rlock_lock_release(r, 1));                      /* clears the zombie with the hash */
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "rw:zombie", NULL), 0);
  CHECK_OK(rlock_lock_acquire(w, 2, 0, 30000, NULL));
  CHECK_OK(rlock_lock_release(w, 2));
  th_reply_free(th_cmd(srv, "DEL", "rw:zombie:childkey", NULL));
  rlock_lock_free(r), rlock_lock_free(w);
  rlock_client_free(c);
}

TEST(read_renewal) {
  rlock_client_t *c = th_client(srv->url, 1200);
  rlock_lock_t *r, *w;
  rw(c, "rw:renew", &r, &w);
  CHECK_OK(rlock_lock_acquire(r, 1, 0, RLOCK_LEASE_WATCHDOG, NULL));
  CHECK_OK(rlock_lock_acquire(r, 1, 0, RLOCK_LEASE_WATCHDOG, NULL));
  CHECK_RC(rlock_lock_acquire(w, 2, 0, RLOCK_LEASE_WATCHDOG, NULL), RLOCK_EBUSY);
  th_sleep_ms(3000); /* 2.5 leases: only renewal keeps the holds */
  char k1[512], k2[512];
  timeout_key(c, "rw:renew", 1, 1, k1, sizeof k1);
  timeout_key(c, "rw:renew", 1, 2, k2, sizeof k2);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", k1, NULL), 1);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", k2, NULL), 1);
  CHECK(th_cmd_int(srv, "PTTL", "rw:renew", NULL) > 0);
  CHECK_OK(rlock_lock_release(r, 1));
  CHECK_OK(rlock_lock_release(r, 1));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "rw:renew", NULL), 0);
  /* the write hold renews too (Redisson's LockTask on the ":write" field) */
  CHECK_OK(rlock_lock_acquire(w, 2, 0, RLOCK_LEASE_WATCHDOG, NULL));
  CHECK_OK(rlock_lock_acquire(r, 2, 0, RLOCK_LEASE_WATCHDOG, NULL)); /* testReadWriteTTL */
  th_sleep_ms(3000);
  CHECK_EQ(is_locked(w), 1);
  CHECK_OK(rlock_lock_release(r, 2));
  CHECK_OK(rlock_lock_release(w, 2));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "rw:renew", NULL), 0);
  rlock_lock_free(r), rlock_lock_free(w);
  rlock_client_free(c);
}

/* A fixed-lease read hold across a reconnect: the reconnect's check asks
 * about it with the renew script's '?' (only ask). The hold stays, keeps its
 * own TTL, no loss is reported, and its unlock releases it. */
static atomic_int rw_lost;
static void rw_on_lost(const char *name, size_t len, uint64_t owner, rlock_lost_reason_t reason, void *arg) {
  (void)name, (void)len, (void)owner, (void)reason, (void)arg;
  rw_lost++;
}
static int checked(void *c) {
  rlock_stats_t st;
  rlock_client_stats((rlock_client_t *)c, &st);
  return st.renewals >= 1 && st.reconnects >= 1;
}
TEST(fixed_lease_read_kept_at_reconnect) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = srv->url;
  o.reconnect_min_ms = 50;
  o.reconnect_max_ms = 500;
  o.fast_path = 0;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  rlock_client_on_lost(c, rw_on_lost, NULL);
  rw_lost = 0;
  rlock_lock_t *r, *w;
  rw(c, "rw:check", &r, &w);
  CHECK_OK(rlock_lock_acquire(r, 1, 0, 20000, NULL));
  char tk[512];
  timeout_key(c, "rw:check", 1, 1, tk, sizeof tk);
  th_reply_free(th_cmd(srv, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes", NULL));
  CHECK_MSG(th_wait_until(checked, c, 5000), "no check of the fixed-lease read hold after the reconnect");
  int v = 0;
  CHECK_OK(rlock_lock_is_locked(r, &v)); /* a round trip behind the check */
  CHECK_EQ(v, 1);
  long long pttl = th_cmd_int(srv, "PTTL", tk, NULL);
  CHECK_MSG(pttl > 0 && pttl <= 20000, "timeout key PTTL %lld after the check (lease 20000 ms)", pttl);
  CHECK_MSG(rw_lost == 0, "the check reported the live read hold lost (%d)", (int)rw_lost);
  CHECK_OK(rlock_lock_release(r, 1));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "rw:check", NULL), 0);
  CHECK_EQ(rw_lost, 0);
  /* A read hold the server lost while the client was away is reported at
   * the reconnect's check, not only at its unlock. */
  CHECK_OK(rlock_lock_acquire(r, 1, 0, 20000, NULL));
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  uint64_t renewals0 = st.renewals;
  th_reply_free(th_cmd(srv, "DEL", "rw:check", tk, NULL));
  th_reply_free(th_cmd(srv, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes", NULL));
  int64_t t0 = th_now_ms();
  while (rw_lost == 0 && th_now_ms() - t0 < 5000) {
    rlock_client_stats(c, &st);
    if (st.renewals > renewals0) CHECK_OK(rlock_lock_is_locked(r, &v)); /* behind the check's answer */
    if (rw_lost) break;
    usleep(10000);
  }
  CHECK_MSG(rw_lost == 1, "the read hold the server lost was not reported at the reconnect (%d)", (int)rw_lost);
  CHECK_RC(rlock_lock_release(r, 1), RLOCK_ENOTHELD);
  rlock_lock_free(r), rlock_lock_free(w);
  rlock_client_free(c);
}

TEST(upgrade_refused) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *r, *w;
  rw(c, "rw:upgrade", &r, &w);
  CHECK_OK(rlock_lock_acquire(r, 1, 0, 30000, NULL));
  CHECK_RC(rlock_lock_acquire(w, 1, 20000, 30000, NULL), RLOCK_EUPGRADE);
  CHECK(strstr(rlock_last_error(), "upgraded") != NULL);
  CHECK_RC(rlock_lock_trylock(w, 0, 30000), RLOCK_EBUSY);   /* another owner (this thread): busy */
  CHECK_EQ(th_cmd_int(srv, "HLEN", "rw:upgrade", NULL), 2); /* nothing taken */
  CHECK_OK(rlock_lock_release(r, 1));
  CHECK_OK(rlock_lock_acquire(w, 1, 0, 30000, NULL)); /* without the read hold: fine */
  CHECK_OK(rlock_lock_release(w, 1));
  rlock_lock_free(r), rlock_lock_free(w);
  rlock_client_free(c);
}

TEST(downgrade_wakes_readers) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_client_t *c2 = th_client(srv->url, 0);
  rlock_lock_t *r, *w, *r2, *w2;
  rw(c, "rw:down", &r, &w);
  rw(c2, "rw:down", &r2, &w2);
  CHECK_OK(rlock_lock_acquire(w, 1, 0, 60000, NULL));
  CHECK_OK(rlock_lock_acquire(r, 1, 0, 60000, NULL));
  struct waiter wt = {.lock = r2, .owner = 5, .wait_ms = 50000};
  pthread_t t;
  long long base = th_cmdstat(srv, "evalsha");
  pthread_create(&t, NULL, wait_thread, &wt);
  CHECK(th_wait_until(subscribed, "redisson_rwlock:{rw:down}", 10000));
  await_tries(base, 1);
  int64_t t0 = th_now_ms();
  CHECK_OK(rlock_lock_release(w, 1)); /* downgrade: mode read, "1" published */
  pthread_join(t, NULL);
  CHECK_OK(wt.rc);
  printf("# the reader entered %lld ms after the downgrade (hash TTL 60 s)\n", (long long)(wt.done_at - t0));
  CHECK(wt.done_at - t0 < 30000);
  char *mode = th_cmd_str(srv, "HGET", "rw:down", "mode", NULL);
  CHECK_STREQ(mode, "read");
  free(mode);
  CHECK_OK(rlock_lock_release(r2, 5));
  CHECK_OK(rlock_lock_release(r, 1));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "rw:down", NULL), 0);
  rlock_lock_free(r), rlock_lock_free(w), rlock_lock_free(r2), rlock_lock_free(w2);
  rlock_client_free(c), rlock_client_free(c2);
}

TEST(force_unlock_modes) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *r, *w;
  rw(c, "rw:force", &r, &w);
  int was = -1;
  CHECK_OK(rlock_lock_acquire(r, 1, 0, 30000, NULL));
  CHECK_OK(rlock_lock_force_unlock(w, &was));
  CHECK_EQ(was, 0); /* the write force unlock leaves read mode alone */
  CHECK_EQ(is_locked(r), 1);
  CHECK_OK(rlock_lock_force_unlock(r, &was));
  CHECK_EQ(was, 1);
  CHECK_EQ(is_locked(r), 0);
  CHECK_OK(rlock_lock_acquire(w, 1, 0, 30000, NULL));
  CHECK_OK(rlock_lock_force_unlock(r, &was));
  CHECK_EQ(was, 0);
  CHECK_EQ(is_locked(w), 1);
  CHECK_OK(rlock_lock_force_unlock(w, &was));
  CHECK_EQ(was, 1);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "rw:force", NULL), 0);
  th_reply_free(th_cmd(srv, "SET", "rw:force", "x", NULL));
  CHECK_RC(rlock_lock_force_unlock(w, &was), RLOCK_ENOTLOCK);
  th_reply_free(th_cmd(srv, "DEL", "rw:force", NULL));
  rlock_lock_free(r), rlock_lock_free(w);
  rlock_client_free(c);
}

TEST(expire_then_unlock) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *r, *w;
  rw(c, "rw:expire", &r, &w);
  CHECK_OK(rlock_lock_acquire(r, 1, 0, 300, NULL));
  CHECK(th_wait_until(key_gone, "rw:expire", 5000));
  CHECK_RC(rlock_lock_release(r, 1), RLOCK_ENOTHELD);
  CHECK_OK(rlock_lock_acquire(w, 1, 0, 300, NULL));
  CHECK(th_wait_until(key_gone, "rw:expire", 5000));
  CHECK_RC(rlock_lock_release(w, 1), RLOCK_ENOTHELD);
  rlock_lock_free(r), rlock_lock_free(w);
  rlock_client_free(c);
}

TEST(write_reentry_adds_lease) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *r, *w;
  rw(c, "rw:wre", &r, &w);
  CHECK_OK(rlock_lock_acquire(w, 1, 0, 10000, NULL));
  CHECK_OK(rlock_lock_acquire(w, 1, 0, 5000, NULL));
  long long ttl = th_cmd_int(srv, "PTTL", "rw:wre", NULL);
  CHECK_MSG(ttl > 10000 && ttl <= 15000, "PTTL %lld: Redisson adds the lease to the PTTL", ttl);
  CHECK_RC(rlock_lock_acquire(w, 2, 0, 1000, NULL), RLOCK_EBUSY);
  CHECK_OK(rlock_lock_release(w, 1));
  CHECK_OK(rlock_lock_release(w, 1));
  rlock_lock_free(r), rlock_lock_free(w);
  rlock_client_free(c);
}

TEST(braces_name) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *r, *w;
  const char *name = "{test}:abc:key";
  rw(c, name, &r, &w);
  CHECK_OK(rlock_lock_acquire(r, 1, 0, 30000, NULL));
  char key[512];
  timeout_key(c, name, 1, 1, key, sizeof key); /* "NAME:<owner>:rwlock_timeout:1" */
  CHECK(strncmp(key, "{test}:abc:key:", 15) == 0);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", key, NULL), 1);
  CHECK_OK(rlock_lock_release(r, 1));
  CHECK_OK(rlock_lock_acquire(w, 1, 0, 30000, NULL));
  CHECK_OK(rlock_lock_release(w, 1));
  rlock_lock_free(r), rlock_lock_free(w);
  const char *bad[] = {"a{b", "{}x", "a}b", "x}{"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    r = w = (rlock_lock_t *)1;
    CHECK_RC(rlock_rwlock_new(c, bad[i], strlen(bad[i]), &r, &w), RLOCK_EINVAL);
    CHECK(r == NULL && w == NULL);
  }
  rlock_client_free(c);
}

/* testName + the concurrency tests: threads of two clients take the read or
 * the write lock of a {tag} name in turn; inside, a writer is alone and a
 * reader sees no writer. */
static atomic_int readers_in, writers_in, overlaps;
struct mixer {
  rlock_lock_t *r, *w;
  int id, rounds, rc;
};
static void *mixer_main(void *p) {
  struct mixer *m = p;
  for (int i = 0; i < m->rounds && !m->rc; i++) {
    bool write = (i + m->id) % 3 == 0;
    rlock_lock_t *l = write ? m->w : m->r;
    if ((m->rc = rlock_lock_acquire(l, RLOCK_OWNER_SELF, 30000, RLOCK_LEASE_WATCHDOG, NULL))) break;
    if (write) {
      if (atomic_fetch_add(&writers_in, 1) != 0 || atomic_load(&readers_in) != 0) atomic_fetch_add(&overlaps, 1);
      th_sleep_ms(1);
      atomic_fetch_sub(&writers_in, 1);
    } else {
      atomic_fetch_add(&readers_in, 1);
      if (atomic_load(&writers_in) != 0) atomic_fetch_add(&overlaps, 1);
      th_sleep_ms(1);
      atomic_fetch_sub(&readers_in, 1);
    }
    m->rc = rlock_lock_release(l, RLOCK_OWNER_SELF);
  }
  return NULL;
}

TEST(mixed_threads) {
  rlock_client_t *c[2] = {th_client(srv->url, 0), th_client(srv->url, 0)};
  rlock_lock_t *r[2], *w[2];
  for (int i = 0; i < 2; i++) rw(c[i], "{test}:abc:key", &r[i], &w[i]);
  enum { T = 8 };
  struct mixer ms[T];
  pthread_t t[T];
  for (int i = 0; i < T; i++) {
    ms[i] = (struct mixer){.r = r[i % 2], .w = w[i % 2], .id = i, .rounds = 15};
    pthread_create(&t[i], NULL, mixer_main, &ms[i]);
  }
  for (int i = 0; i < T; i++) {
    pthread_join(t[i], NULL);
    CHECK_OK(ms[i].rc);
  }
  CHECK_EQ(atomic_load(&overlaps), 0);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "{test}:abc:key", NULL), 0);
  for (int i = 0; i < 2; i++) rlock_lock_free(r[i]), rlock_lock_free(w[i]), rlock_client_free(c[i]);
}

/* A server slower than the command timeout (250 ms): every try and unlock
 * is re-sent with the same request id; once the server runs them all, the
 * latches make each count once (Redisson's unlock latch and rlock's acquire
 * latch on the read-write scripts). */
/* The server holds c's next script (CLIENT PAUSE WRITE) until c counted one
 * more timeout: the call is re-sent with the same id while its first copy
 * waits. (A DEBUG SLEEP of 0.6 s ended before a call sent late under
 * valgrind, with no timeout: 3 of 4 calls re-sent, seen once.) */
static pthread_t slow_thread;
static int slow_running;
typedef struct slow_arg {
  rlock_client_t *c;
  uint64_t timeouts;
} slow_arg_t;
static slow_arg_t slow_arg;
static void *unpause_after_timeout(void *arg) {
  slow_arg_t *a = arg;
  int timed_out = TH_STAT_REACHES(a->c, timeouts, a->timeouts + 1, 10000);
  redisContext *rc = th_raw_connect(srv); /* its own connection: the test thread may use th_cmd */
  redisReply *r = redisCommand(rc, "CLIENT UNPAUSE");
  if (r) freeReplyObject(r);
  redisFree(rc);
  CHECK_MSG(timed_out, "the held call did not time out");
  return NULL;
}
static void slow_server_done(void) {
  if (slow_running) pthread_join(slow_thread, NULL);
  slow_running = 0;
}
static void slow_server(rlock_client_t *c) {
  slow_server_done();
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  slow_arg = (slow_arg_t){c, st.timeouts};
  th_reply_free(th_cmd(srv, "CLIENT", "PAUSE", "20000", "WRITE", NULL));
  CHECK(pthread_create(&slow_thread, NULL, unpause_after_timeout, &slow_arg) == 0);
  slow_running = 1;
}

TEST(resend_counts_once) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = srv->url;
  o.command_timeout_ms = 250;
  o.retry_attempts = 3;
  o.replica_sync_timeout_ms = 100;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  rlock_lock_t *r, *w;
  rw(c, "rw:resend", &r, &w);
  char id[128], key[512];
  th_owner_id(c, 1, id, sizeof id);
  slow_server(c);
  CHECK_OK(rlock_lock_acquire(r, 1, 0, 30000, NULL));
  CHECK_EQ(th_hget_num(srv, "rw:resend", id), 1);
  timeout_key(c, "rw:resend", 1, 2, key, sizeof key);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", key, NULL), 0); /* one hold, one timeout key */
  CHECK_OK(rlock_lock_acquire(r, 1, 0, 30000, NULL));
  slow_server(c);
  CHECK_OK(rlock_lock_release(r, 1));
  CHECK_EQ(th_hget_num(srv, "rw:resend", id), 1); /* 2 -> 1, once */
  CHECK_OK(rlock_lock_release(r, 1));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "rw:resend", NULL), 0);
  strcat(id, ":write");
  slow_server(c);
  CHECK_OK(rlock_lock_acquire(w, 1, 0, 30000, NULL));
  CHECK_EQ(th_hget_num(srv, "rw:resend", id), 1);
  CHECK_OK(rlock_lock_acquire(w, 1, 0, 30000, NULL));
  slow_server(c);
  CHECK_OK(rlock_lock_release(w, 1));
  CHECK_EQ(th_hget_num(srv, "rw:resend", id), 1);
  CHECK_OK(rlock_lock_release(w, 1));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "rw:resend", NULL), 0);
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  printf("# %llu timeouts (each one re-sent)\n", (unsigned long long)st.timeouts);
  CHECK(st.timeouts >= 4); /* every one of the four slow calls was re-sent */
  rlock_lock_free(r), rlock_lock_free(w);
  rlock_client_free(c);
  slow_server_done();
}

TEST(cross_java_reader) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *r, *w;
  rw(c, "rw:xr", &r, &w);
  CHECK_OK(rlock_lock_acquire(r, 1, 0, 40000, NULL));
  CHECK_EQ(java_read_lock("rw:xr", "5000"), -1000);  /* read mode shared */
  CHECK_EQ(java_write_lock("rw:xr", "5000") > 0, 1); /* Java's writer waits */
  CHECK_EQ(java_read_unlock("rw:xr"), 0);            /* rlock's hold keeps it: rlock's timeout key was read */
  long long ttl = th_cmd_int(srv, "PTTL", "rw:xr", NULL);
  CHECK_MSG(ttl > 30000, "PTTL %lld: from rlock's timeout key", ttl);
  CHECK_OK(rlock_lock_acquire(r, 2, 0, 3000, NULL));
  CHECK_OK(rlock_lock_release(r, 1)); /* rlock's unlock reads owner 2's key: TTL about 3 s */
  ttl = th_cmd_int(srv, "PTTL", "rw:xr", NULL);
  CHECK_MSG(ttl > 0 && ttl <= 3000, "PTTL %lld", ttl);
  CHECK_EQ(java_read_lock("rw:xr", "20000"), -1000);
  CHECK_OK(rlock_lock_release(r, 2));
  CHECK(th_cmd_int(srv, "PTTL", "rw:xr", NULL) > 10000); /* from Java's timeout key */
  CHECK_RC(rlock_lock_acquire(w, 3, 0, 5000, NULL), RLOCK_EBUSY);
  CHECK_EQ(java_read_unlock("rw:xr"), 1);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "rw:xr", NULL), 0);
  rlock_lock_free(r), rlock_lock_free(w);
  rlock_client_free(c);
}

TEST(cross_java_writer_wakes) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *r, *w;
  rw(c, "rw:xw", &r, &w);
  CHECK_EQ(java_write_lock("rw:xw", "60000"), -1000);
  CHECK_EQ(java_read_lock("rw:xw", "5000"), -1000); /* Java's writer may read */
  CHECK_EQ(java_read_unlock("rw:xw"), 0);
  struct waiter ws[3];
  pthread_t t[3];
  long long base = th_cmdstat(srv, "evalsha");
  for (int i = 0; i < 3; i++) {
    ws[i] = (struct waiter){.lock = r, .owner = 20 + (uint64_t)i, .wait_ms = 50000};
    pthread_create(&t[i], NULL, wait_thread, &ws[i]);
  }
  CHECK(th_wait_until(subscribed, "redisson_rwlock:{rw:xw}", 10000));
  await_tries(base, 3);
  int64_t t0 = th_now_ms();
  CHECK_EQ(java_write_unlock("rw:xw"), 1); /* publishes "1" */
  for (int i = 0; i < 3; i++) {
    pthread_join(t[i], NULL);
    CHECK_OK(ws[i].rc);
    CHECK(ws[i].done_at - t0 < 30000);
  }
  /* rlock's messages as Java's LockPubSub reads them */
  redisContext *sub = th_raw_connect(srv);
  redisReply *rep = redisCommand(sub, "SUBSCRIBE redisson_rwlock:{rw:xw}");
  freeReplyObject(rep);
  CHECK_OK(rlock_lock_release(r, 20));
  CHECK_OK(rlock_lock_release(r, 21));
  CHECK_OK(rlock_lock_release(r, 22)); /* the last reader: "0" */
  CHECK_EQ(redisGetReply(sub, (void **)&rep), REDIS_OK);
  CHECK(rep->type == REDIS_REPLY_ARRAY && rep->elements == 3);
  CHECK_STREQ(rep->element[2]->str, "0");
  freeReplyObject(rep);
  CHECK_OK(rlock_lock_acquire(w, 1, 0, 30000, NULL));
  CHECK_EQ(java_read_lock("rw:xw", "5000") > 0, 1); /* Redisson's reader waits on rlock's writer */
  /* a fresh subscription: each reader's release above that made the hash's
   * TTL shorter said "0" too (rw_read_unlock.lua; the readers' leases were
   * set at different moments), and only the first message was read. (A "0"
   * left over so was seen before the "1" once under TSan.) Nothing publishes
   * on the channel between this subscription and the write release. */
  redisFree(sub);
  sub = th_raw_connect(srv);
  rep = redisCommand(sub, "SUBSCRIBE redisson_rwlock:{rw:xw}");
  CHECK(rep && rep->type == REDIS_REPLY_ARRAY);
  freeReplyObject(rep);
  CHECK_OK(rlock_lock_release(w, 1)); /* "1": Java's READ_UNLOCK */
  CHECK_EQ(redisGetReply(sub, (void **)&rep), REDIS_OK);
  CHECK(rep->type == REDIS_REPLY_ARRAY && rep->elements == 3);
  CHECK_MSG(!strcmp(rep->element[2]->str, "1"), "the write release said '%s', not '1'", rep->element[2]->str);
  freeReplyObject(rep);
  redisFree(sub);
  rlock_lock_free(r), rlock_lock_free(w);
  rlock_client_free(c);
}

TEST(cross_java_upgrade_guard) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *r, *w;
  rw(c, "rw:xu", &r, &w);
  CHECK_EQ(java_read_lock("rw:xu", "60000"), -1000);
  struct waiter wt = {.lock = w, .owner = 1, .wait_ms = 50000};
  pthread_t t;
  long long base = th_cmdstat(srv, "evalsha");
  pthread_create(&t, NULL, wait_thread, &wt);
  CHECK(th_wait_until(subscribed, "redisson_rwlock:{rw:xu}", 10000));
  await_tries(base, 1);
  int64_t t0 = th_now_ms();
  CHECK_EQ(java_read_unlock("rw:xu"), 1); /* publishes "0" */
  pthread_join(t, NULL);
  CHECK_OK(wt.rc);
  CHECK(wt.done_at - t0 < 30000);
  /* Java's writer and reader both see rlock's write hold */
  CHECK_EQ(java_write_lock("rw:xu", "5000") > 0, 1);
  CHECK_EQ(java_read_lock("rw:xu", "5000") > 0, 1);
  /* Java's write unlock of a lock it does not hold: nil, nothing changed */
  CHECK_EQ(java_write_unlock("rw:xu"), -1000);
  CHECK_OK(rlock_lock_release(w, 1));
  rlock_lock_free(r), rlock_lock_free(w);
  rlock_client_free(c);
}

/* The writer's own read unlock never cuts its write lease: with two read
 * holds of different leases, Redisson's step set NAME's TTL to the other
 * read hold's (2 s) while the write hold had 30 s, and another writer got in
 * beside the first one. */
TEST(read_unlock_keeps_write_lease) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *r, *w;
  rw(c, "rw:wlease", &r, &w);
  CHECK_OK(rlock_lock_acquire(w, 1, 0, 30000, NULL));
  CHECK_OK(rlock_lock_acquire(r, 1, 0, 2000, NULL));
  CHECK_OK(rlock_lock_acquire(r, 1, 0, 30000, NULL));
  CHECK_OK(rlock_lock_release(r, 1)); /* hold 2 (30 s) goes; hold 1 (2 s) stays */
  long long ttl = th_cmd_int(srv, "PTTL", "rw:wlease", NULL);
  printf("# the write hold's TTL after its read unlock: %lld ms (its lease 30 s)\n", ttl);
  CHECK_MSG(ttl > 20000, "PTTL %lld: the write lease was cut to a read hold's", ttl);
  CHECK_OK(rlock_lock_release(r, 1));
  CHECK_OK(rlock_lock_release(w, 1));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "rw:wlease", NULL), 0);
  rlock_lock_free(r), rlock_lock_free(w);
  rlock_client_free(c);
}

/* A writer parked on NAME's TTL (a live reader's 40 s) is told when a read
 * unlock shortens that TTL to a dead reader's 1.5 s: it enters once that
 * lease ends, not after 40 s (before: asleep while the lock was free, then
 * EBUSY at its 20 s bound). */
TEST(read_unlock_shortening_ttl_wakes_writer) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_client_t *c2 = th_client(srv->url, 0);
  rlock_lock_t *r, *w, *r2, *w2;
  rw(c, "rw:short", &r, &w);
  rw(c2, "rw:short", &r2, &w2);
  CHECK_OK(rlock_lock_acquire(r, 1, 0, 1500, NULL));  /* a dead reader: never released */
  CHECK_OK(rlock_lock_acquire(r, 2, 0, 40000, NULL)); /* a live reader */
  struct waiter wt = {.lock = w2, .owner = 7, .wait_ms = 20000};
  pthread_t t;
  long long base = th_cmdstat(srv, "evalsha");
  pthread_create(&t, NULL, wait_thread, &wt);
  CHECK(th_wait_until(subscribed, "redisson_rwlock:{rw:short}", 10000));
  await_tries(base, 1);
  int64_t t0 = th_now_ms();
  CHECK_OK(rlock_lock_release(r, 2)); /* NAME's TTL: reader 1's remaining 1.5 s */
  pthread_join(t, NULL);
  printf("# the writer: rc %d, %lld ms after the live reader's unlock (dead reader's lease 1.5 s)\n", wt.rc,
         (long long)(wt.done_at - t0));
  CHECK_OK(wt.rc);
  CHECK(wt.done_at - t0 < 15000);
  CHECK_OK(rlock_lock_release(w2, 7));
  rlock_lock_free(r), rlock_lock_free(w), rlock_lock_free(r2), rlock_lock_free(w2);
  rlock_client_free(c), rlock_client_free(c2);
}

/* The writer's partial write unlock never cuts its own read hold: write
 * (30 s), read (60 s), write again, then two write unlocks (a downgrade):
 * the read hold keeps its 60 s. Before (Redisson's step: PEXPIRE to the write
 * lease) the hash got 30 s, and a writer could enter beside the reader 30 s
 * before its lease ended. */
TEST(write_unlock_keeps_read_lease) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *r, *w;
  rw(c, "rw:rlease", &r, &w);
  CHECK_OK(rlock_lock_acquire(w, 1, 0, 30000, NULL));
  CHECK_OK(rlock_lock_acquire(r, 1, 0, 60000, NULL));
  CHECK_OK(rlock_lock_acquire(w, 1, 0, 30000, NULL));
  CHECK_OK(rlock_lock_release(w, 1)); /* one write hold left */
  long long ttl = th_cmd_int(srv, "PTTL", "rw:rlease", NULL);
  printf("# the hash TTL after the partial write unlock: %lld ms (the read hold's lease 60 s)\n", ttl);
  CHECK_MSG(ttl > 50000, "PTTL %lld: the read hold's lease was cut to the write lease", ttl);
  CHECK_OK(rlock_lock_release(w, 1)); /* the downgrade */
  ttl = th_cmd_int(srv, "PTTL", "rw:rlease", NULL);
  CHECK_MSG(ttl > 50000, "PTTL %lld after the downgrade", ttl);
  CHECK_OK(rlock_lock_release(r, 1));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "rw:rlease", NULL), 0);
  rlock_lock_free(r), rlock_lock_free(w);
  rlock_client_free(c);
}

/* A downgrade leaves the hash the read holds' TTL: write (60 s), read
 * (1.5 s), unlock write. Before, the hash kept the write lease's 60 s, so if
 * the reader died its 1.5 s hold kept writers out for 60 s. */
TEST(downgrade_ttl_is_read_holds) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *r, *w;
  rw(c, "rw:downttl", &r, &w);
  CHECK_OK(rlock_lock_acquire(w, 1, 0, 60000, NULL));
  CHECK_OK(rlock_lock_acquire(r, 1, 0, 1500, NULL));
  CHECK_OK(rlock_lock_release(w, 1)); /* the downgrade */
  long long ttl = th_cmd_int(srv, "PTTL", "rw:downttl", NULL);
  printf("# the hash TTL after the downgrade: %lld ms (the read hold's lease 1.5 s)\n", ttl);
  CHECK_MSG(ttl > 0 && ttl <= 1500, "PTTL %lld: the write lease kept after the downgrade", ttl);
  CHECK_OK(rlock_lock_release(r, 1));
  rlock_lock_free(r), rlock_lock_free(w);
  rlock_client_free(c);
}

#define RUN_IF(name) \
  if (argc < 2 || !strcmp(argv[1], #name)) RUN(name)

int main(int argc, char **argv) {
  th_init(argc, argv, 170);
  const char *extra[] = {"--enable-debug-command", "yes", NULL}; /* DEBUG SLEEP (resend_counts_once) */
  th_server_opts_t o = {.extra_args = extra};
  srv = th_server_start(&o);
  RUN_IF(many_readers);
  RUN_IF(writer_excludes_readers);
  RUN_IF(write_unlock_wakes_all);
  RUN_IF(read_lease_per_hold);
  RUN_IF(dead_reader_zombie);
  RUN_IF(read_renewal);
  RUN_IF(fixed_lease_read_kept_at_reconnect);
  RUN_IF(upgrade_refused);
  RUN_IF(downgrade_wakes_readers);
  RUN_IF(force_unlock_modes);
  RUN_IF(expire_then_unlock);
  RUN_IF(write_reentry_adds_lease);
  RUN_IF(braces_name);
  RUN_IF(mixed_threads);
  RUN_IF(resend_counts_once);
  RUN_IF(cross_java_reader);
  RUN_IF(cross_java_writer_wakes);
  RUN_IF(cross_java_upgrade_guard);
  RUN_IF(read_unlock_keeps_write_lease);
  RUN_IF(read_unlock_shortening_ttl_wakes_writer);
  RUN_IF(write_unlock_keeps_read_lease);
  RUN_IF(downgrade_ttl_is_read_holds);
  th_server_stop(srv);
  return th_done();
}
