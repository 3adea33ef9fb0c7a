/* test_holes.c -- the reentrant lock's correctness holes of issue 7, each
 * checked against a real redis-server (the network faults are in
 * tests/fault/test_holes.c):
 *   - a re-entry never shortens the outer hold's lease, a renewal never
 *     shortens a longer lease, and renewal goes on while any hold of the
 *     owner asked for the watchdog (item 5);
 *   - explicit owners and thread ids are different owners (item 6b);
 *   - every duration is checked before anything is sent, and every script
 *     checks its arguments before it writes (item 7);
 *   - a release whose reply disagrees with the client's hold count is a
 *     loss: the owner's field is cleaned up and the lost callback says why
 *     (items 1 and 10);
 *   - each lost reason is reported where it happens (item 10; the failed
 *     renewals are in tests/fault/test_holes.c). */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static th_server_t *srv;

/* ------------------------------------------------------------ lost callback */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int lost_calls;
static rlock_lost_reason_t last_reason;
static uint64_t last_owner;
static char last_name[64];

static void on_lost(const char *name, size_t len, uint64_t owner, rlock_lost_reason_t reason, void *arg) {
  (void)arg;
  pthread_mutex_lock(&mu);
  lost_calls++;
  last_reason = reason;
  last_owner = owner;
  snprintf(last_name, sizeof last_name, "%.*s", (int)len, name);
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
}

static rlock_lost_reason_t lost_reason(void) {
  pthread_mutex_lock(&mu);
  rlock_lost_reason_t r = last_reason;
  pthread_mutex_unlock(&mu);
  return r;
}

static int lost_count(void) {
  pthread_mutex_lock(&mu);
  int n = lost_calls;
  pthread_mutex_unlock(&mu);
  return n;
}

/* Waits until the callback ran n times in total (at most timeout_ms). */
static int wait_lost(int n, int64_t timeout_ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += timeout_ms / 1000;
  ts.tv_nsec += (timeout_ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
  pthread_mutex_lock(&mu);
  while (lost_calls < n && pthread_cond_timedwait(&cv, &mu, &ts) == 0) {
  }
  int got = lost_calls;
  pthread_mutex_unlock(&mu);
  return got;
}

/* ------------------------------------------------------------ helpers */

static rlock_stats_t stats(rlock_client_t *c) {
  rlock_stats_t s;
  rlock_client_stats(c, &s);
  return s;
}

typedef struct renewed_arg {
  rlock_client_t *c;
  uint64_t want;
} renewed_arg_t;
static int renewed_reaches(void *a) {
  renewed_arg_t *r = a;
  return stats(r->c).renewed_locks >= r->want;
}

/* Waits until n more holds have been renewed by c (a renewal is the event). */
static int wait_renewals(rlock_client_t *c, uint64_t n, int64_t timeout_ms) {
  renewed_arg_t a = {c, stats(c).renewed_locks + n};
  return th_wait_until(renewed_reaches, &a, timeout_ms);
}

static const char *self_id(rlock_client_t *c, char *buf) {
  return th_owner_id(c, RLOCK_OWNER_THREAD | (uint64_t)th_gettid(), buf, 128);
}

/* ------------------------------------------------------------ item 5: re-entry and leases */

/* Outer lock(WATCHDOG), inner trylock(0, short lease): the inner acquire does
 * not shorten the TTL, renewal goes on while both are held and after the
 * inner unlock, and the outer unlock frees the lock. */
TEST(reentry_keeps_watchdog) {
  rlock_client_t *c = th_client(srv->url, 1000);
  rlock_client_on_lost(c, on_lost, NULL);
  rlock_lock_t *l = th_lock(c, "holes:wd");
  char o[128];
  self_id(c, o);
  int lost0 = lost_count();
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  CHECK_OK(rlock_lock_trylock(l, 0, 300));
  CHECK_EQ(th_hget_num(srv, "holes:wd", o), 2);
  long long pttl = th_cmd_int(srv, "PTTL", "holes:wd", NULL);
  CHECK_MSG(pttl > 500, "the inner acquire shortened the watchdog lease to %lld ms", pttl);
  /* Four renewals take > 1 s (> the 1000 ms lease, > the inner 300 ms). */
  CHECK_MSG(wait_renewals(c, 4, 5000), "renewal stopped after a fixed-lease re-entry");
  CHECK_EQ(th_hget_num(srv, "holes:wd", o), 2);
  CHECK_OK(rlock_lock_unlock(l));
  pttl = th_cmd_int(srv, "PTTL", "holes:wd", NULL);
  CHECK_MSG(pttl > 500, "the inner unlock set the TTL to %lld ms", pttl);
  CHECK_MSG(wait_renewals(c, 4, 5000), "renewal stopped after the inner unlock");
  CHECK_EQ(th_hget_num(srv, "holes:wd", o), 1);
  CHECK_EQ(lost_count(), lost0);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "holes:wd", NULL), 0);
  CHECK_EQ(stats(c).held, 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* Fixed leases: a shorter re-entry never shortens a longer lease; the inner
 * unlock gives the lock back the outer lease's remaining time, not the
 * inner one's. */
TEST(fixed_reentry_never_shortens) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = th_lock(c, "holes:fixed");
  CHECK_OK(rlock_lock_trylock(l, 0, 60000));
  CHECK_OK(rlock_lock_trylock(l, 0, 300));
  long long pttl = th_cmd_int(srv, "PTTL", "holes:fixed", NULL);
  CHECK_MSG(pttl > 50000, "a 300 ms re-entry shortened a 60 s lease to %lld ms", pttl);
  CHECK_OK(rlock_lock_unlock(l));
  pttl = th_cmd_int(srv, "PTTL", "holes:fixed", NULL);
  CHECK_MSG(pttl > 50000, "the inner unlock set the TTL to %lld ms", pttl);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "holes:fixed", NULL), 0);

  /* Short outer, long inner: the inner lease lasts while held; its unlock
   * gives back the outer lease's remaining time. */
  CHECK_OK(rlock_lock_trylock(l, 0, 20000));
  CHECK_OK(rlock_lock_trylock(l, 0, 60000));
  pttl = th_cmd_int(srv, "PTTL", "holes:fixed", NULL);
  CHECK(pttl > 50000);
  CHECK_OK(rlock_lock_unlock(l));
  pttl = th_cmd_int(srv, "PTTL", "holes:fixed", NULL);
  CHECK_MSG(pttl > 0 && pttl <= 20000, "after the inner unlock the TTL is %lld ms (outer lease 20 s)", pttl);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "holes:fixed", NULL), 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* A watchdog re-entry inside a longer fixed lease: its renewals (a lease of
 * 1000 ms every third of it) never cut the 60 s TTL down to the watchdog
 * lease (lock_renew.lua only lengthens a TTL), and its unlock gives the lock
 * back the outer lease's remaining time. */
TEST(renewal_never_shortens) {
  rlock_client_t *c = th_client(srv->url, 1000);
  rlock_lock_t *l = th_lock(c, "holes:renew-long");
  CHECK_OK(rlock_lock_trylock(l, 0, 60000));
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  CHECK_MSG(wait_renewals(c, 3, 5000), "the watchdog re-entry is not renewed");
  long long pttl = th_cmd_int(srv, "PTTL", "holes:renew-long", NULL);
  CHECK_MSG(pttl > 50000, "a renewal cut the 60 s lease to %lld ms", pttl);
  CHECK_OK(rlock_lock_unlock(l));
  pttl = th_cmd_int(srv, "PTTL", "holes:renew-long", NULL);
  CHECK_MSG(pttl > 50000 && pttl <= 60000, "after the inner unlock the TTL is %lld ms (outer lease 60 s)", pttl);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "holes:renew-long", NULL), 0);
  CHECK_EQ(stats(c).held, 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* ------------------------------------------------------------ item 6b: owner spaces */

static void *hold_as_thread(void *arg) {
  rlock_lock_t *l = arg;
  int rc = rlock_lock_trylock(l, 0, 20000);
  return (void *)(intptr_t)rc;
}

TEST(explicit_owner_is_not_a_thread) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = th_lock(c, "holes:owners");
  uint64_t tid = (uint64_t)th_gettid();
  /* Explicit owner with the same number as this thread: a different owner. */
  CHECK_OK(rlock_lock_acquire(l, tid, 0, 20000, NULL));
  char explicit_id[128], thread_id[128];
  th_owner_id(c, tid, explicit_id, sizeof explicit_id);
  th_owner_id(c, RLOCK_OWNER_THREAD | tid, thread_id, sizeof thread_id);
  CHECK(strstr(explicit_id, ":owner-") != NULL);
  CHECK_EQ(th_hget_num(srv, "holes:owners", explicit_id), 1);
  CHECK_EQ(th_hget_num(srv, "holes:owners", thread_id), -1000);
  CHECK_RC(rlock_lock_trylock(l, 0, 20000), RLOCK_EBUSY);
  int held = 1;
  CHECK_OK(rlock_lock_is_held(l, RLOCK_OWNER_SELF, &held));
  CHECK_EQ(held, 0);
  CHECK_RC(rlock_lock_unlock(l), RLOCK_ENOTHELD);
  CHECK_EQ(th_cmd_int(srv, "HLEN", "holes:owners", NULL), 1);
  CHECK_OK(rlock_lock_release(l, tid));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "holes:owners", NULL), 0);

  /* And the other way round: a thread's hold is not explicit owner <tid>. */
  pthread_t t;
  void *ret = NULL;
  CHECK_EQ(pthread_create(&t, NULL, hold_as_thread, l), 0);
  pthread_join(t, &ret);
  CHECK_OK((int)(intptr_t)ret);
  CHECK_RC(rlock_lock_acquire(l, tid, 0, 20000, NULL), RLOCK_EBUSY);
  /* RLOCK_OWNER_THREAD | tid names a thread's hold from any thread */
  CHECK_RC(rlock_lock_release(l, RLOCK_OWNER_THREAD | tid), RLOCK_ENOTHELD);
  CHECK_EQ(th_cmd_int(srv, "HLEN", "holes:owners", NULL), 1);
  CHECK_OK(rlock_lock_force_unlock(l, NULL));
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* ------------------------------------------------------------ item 7: durations */

TEST(huge_lease_rejected) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = th_lock(c, "holes:huge");
  CHECK_RC(rlock_lock_trylock(l, 0, INT64_MAX), RLOCK_EINVAL);
  CHECK_MSG(strstr(rlock_last_error(), "lease") != NULL, "message: %s", rlock_last_error());
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "holes:huge", NULL), 0);
  CHECK_RC(rlock_lock_lock(l, INT64_MAX), RLOCK_EINVAL);
  CHECK_RC(rlock_lock_trylock(l, INT64_MAX, 1000), RLOCK_EINVAL);
  CHECK_MSG(strstr(rlock_last_error(), "wait") != NULL, "message: %s", rlock_last_error());
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "holes:huge", NULL), 0);
  /* the lock still works */
  CHECK_OK(rlock_lock_trylock(l, 0, 1000));
  CHECK_OK(rlock_lock_unlock(l));
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* Every duration option above RLOCK_DURATION_MAX: RLOCK_EINVAL naming it. */
TEST(huge_options_rejected) {
  static const char *const names[] = {"watchdog_timeout_ms", "command_timeout_ms", "connect_timeout_ms",
                                      "reconnect_max_ms", "reconnect_min_ms"};
  int64_t huge[] = {INT64_MAX, INT64_MAX / 3, RLOCK_DURATION_MAX + 1};
  for (size_t h = 0; h < sizeof huge / sizeof huge[0]; h++) {
    for (int i = 0; i < 5; i++) {
      rlock_options_t o;
      rlock_options_init(&o);
      o.url = srv->url;
      int64_t *fields[] = {&o.watchdog_timeout_ms, &o.command_timeout_ms, &o.connect_timeout_ms, &o.reconnect_max_ms,
                           &o.reconnect_min_ms};
      *fields[i] = huge[h];
      if (i == 4) o.reconnect_max_ms = huge[h]; /* min <= max holds: only the range is wrong */
      rlock_client_t *c = NULL;
      int rc = rlock_client_new(&c, &o);
      if (rc == 0) rlock_client_free(c);
      CHECK_MSG(rc == RLOCK_EINVAL, "%s = %lld accepted (%s)", names[i], (long long)huge[h], rlock_err_name(rc));
      CHECK_MSG(strstr(rlock_last_error(), names[i]) != NULL, "message: %s", rlock_last_error());
    }
  }
}

/* Scripts called directly (raw EVAL) with bad arguments: an error reply and
 * nothing written. */
static char *read_script(const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/lua/%s.lua", RLOCK_SOURCE_DIR, name);
  FILE *f = fopen(path, "rb");
  CHECK_MSG(f != NULL, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  CHECK(buf && fread(buf, 1, (size_t)n, f) == (size_t)n);
  buf[n] = 0;
  fclose(f);
  return buf;
}

/* EVAL <script> numkeys args...: the reply (caller frees). */
static redisReply *eval(const char *script, int numkeys, ...) {
  char *body = read_script(script);
  char nk[16];
  snprintf(nk, sizeof nk, "%d", numkeys);
  const char *argv[32] = {"EVAL", body, nk};
  int n = 3;
  va_list ap;
  va_start(ap, numkeys);
  for (const char *a; (a = va_arg(ap, const char *)) != NULL && n < 32;) argv[n++] = a;
  va_end(ap);
  redisReply *r = th_cmdv(srv, n, argv, NULL);
  free(body);
  return r;
}

static void want_error(redisReply *r, const char *what) {
  CHECK_MSG(r->type == REDIS_REPLY_ERROR, "%s: no error reply (type %d)", what, r->type);
  th_reply_free(r);
}

#define OWNER "3f2b8c1e-5d9f-4a4e-9c1b-0123456789ab:101"
#define CHAN "redisson_lock__channel:{S}"
#define ALATCH "rlock_acquire_latch:{S}:bad1"
#define ULATCH "redisson_unlock_latch:{S}:bad2"

static long long keys_count(void) {
  redisReply *r = th_cmd(srv, "DBSIZE", NULL);
  long long n = r->integer;
  th_reply_free(r);
  return n;
}

TEST(scripts_check_before_writing) {
  th_reply_free(th_cmd(srv, "FLUSHALL", NULL));
  const char *bad[] = {"9223372036854775807", "0", "-5", "abc", "1.5", "", "1e300", NULL};
  for (int i = 0; bad[i]; i++) {
    /* lease */
    want_error(eval("reentrant_acquire", 2, "S", ALATCH, bad[i], OWNER, "60000", NULL), "acquire lease");
    CHECK_MSG(keys_count() == 0, "acquire with lease '%s' left state", bad[i]);
    /* latch TTL */
    want_error(eval("reentrant_acquire", 2, "S", ALATCH, "30000", OWNER, bad[i], NULL), "acquire latch ttl");
    CHECK_MSG(keys_count() == 0, "acquire with latch TTL '%s' left state", bad[i]);
  }
  want_error(eval("reentrant_acquire", 2, "S", ALATCH, "30000", "", "60000", NULL), "acquire owner");
  CHECK_EQ(keys_count(), 0);

  /* unlock of a count-2 hold: bad lease or latch TTL change nothing */
  th_reply_free(th_cmd(srv, "HSET", "S", OWNER, "2", NULL));
  th_reply_free(th_cmd(srv, "PEXPIRE", "S", "50000", NULL));
  for (int i = 0; bad[i]; i++) {
    want_error(eval("reentrant_unlock", 3, "S", CHAN, ULATCH, "0", bad[i], OWNER, "publish", "60000", NULL),
               "unlock lease");
    want_error(eval("reentrant_unlock", 3, "S", CHAN, ULATCH, "0", "30000", OWNER, "publish", bad[i], NULL),
               "unlock latch ttl");
    CHECK_EQ(th_hget_num(srv, "S", OWNER), 2);
    CHECK_EQ(th_cmd_int(srv, "EXISTS", ULATCH, NULL), 0);
    CHECK(th_cmd_int(srv, "PTTL", "S", NULL) > 40000);
  }
  want_error(eval("reentrant_unlock", 3, "S", CHAN, ULATCH, "0", "30000", OWNER, "del", "60000", NULL),
             "unlock publish command");
  CHECK_EQ(th_hget_num(srv, "S", OWNER), 2);

  /* renew: bad lease, TTL untouched */
  for (int i = 0; bad[i]; i++) {
    want_error(eval("reentrant_renew", 1, "S", bad[i], OWNER, NULL), "renew lease");
    CHECK(th_cmd_int(srv, "PTTL", "S", NULL) > 40000);
  }

  /* undo: bad latch TTL, nothing written (no tombstone, count unchanged) */
  for (int i = 0; bad[i]; i++) {
    want_error(eval("reentrant_acquire_undo", 3, "S", CHAN, ALATCH, "0", OWNER, "publish", bad[i], NULL),
               "undo latch ttl");
    CHECK_EQ(th_cmd_int(srv, "EXISTS", ALATCH, NULL), 0);
    CHECK_EQ(th_hget_num(srv, "S", OWNER), 2);
  }
  th_reply_free(th_cmd(srv, "FLUSHALL", NULL));
}

/* ------------------------------------------------------------ item 1: the client's hold count */

/* The server counts one hold more than the client took (as a re-applied
 * acquire would): the release that should free the lock cleans it up. */
TEST(release_count_surplus) {
  rlock_client_t *c = th_client(srv->url, 1000);
  rlock_client_on_lost(c, on_lost, NULL);
  rlock_lock_t *l = th_lock(c, "holes:surplus");
  char o[128];
  self_id(c, o);
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  th_reply_free(th_cmd(srv, "HINCRBY", "holes:surplus", o, "1", NULL));
  int lost0 = lost_count();
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_MSG(th_cmd_int(srv, "EXISTS", "holes:surplus", NULL) == 0, "the surplus hold stays (count %lld) and is renewed",
            th_hget_num(srv, "holes:surplus", o));
  CHECK_EQ(wait_lost(lost0 + 1, 5000), lost0 + 1);
  CHECK_EQ(lost_reason(), RLOCK_LOST_COUNT_MISMATCH);
  CHECK_EQ(stats(c).held, 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* The server counts one hold less than the client took: the client's outer
 * hold is not really there, so the release reports the loss and cleans up. */
TEST(release_count_deficit) {
  rlock_client_t *c = th_client(srv->url, 1000);
  rlock_client_on_lost(c, on_lost, NULL);
  rlock_lock_t *l = th_lock(c, "holes:deficit");
  char o[128];
  self_id(c, o);
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  th_reply_free(th_cmd(srv, "HINCRBY", "holes:deficit", o, "-1", NULL));
  int lost0 = lost_count();
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(wait_lost(lost0 + 1, 5000), lost0 + 1);
  CHECK_EQ(lost_reason(), RLOCK_LOST_COUNT_MISMATCH);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "holes:deficit", NULL), 0);
  CHECK_RC(rlock_lock_unlock(l), RLOCK_ENOTHELD);
  CHECK_EQ(stats(c).held, 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* ------------------------------------------------------------ item 10: reasons */

TEST(lost_reasons) {
  rlock_client_t *c = th_client(srv->url, 1000);
  rlock_client_on_lost(c, on_lost, NULL);
  rlock_lock_t *l = th_lock(c, "holes:why");
  int n = lost_count();
  uint64_t me = RLOCK_OWNER_THREAD | (uint64_t)th_gettid();

  /* a fixed lease runs out while held */
  CHECK_OK(rlock_lock_trylock(l, 0, 200));
  CHECK_EQ(wait_lost(++n, 5000), n);
  CHECK_EQ(lost_reason(), RLOCK_LOST_EXPIRED);
  CHECK_EQ(last_owner, me);
  CHECK_STREQ(last_name, "holes:why");

  /* the key is deleted behind the holder's back: the next renewal sees it */
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  th_reply_free(th_cmd(srv, "DEL", "holes:why", NULL));
  CHECK_EQ(wait_lost(++n, 5000), n);
  CHECK_EQ(lost_reason(), RLOCK_LOST_DELETED);

  /* force-unlocked by this client */
  CHECK_OK(rlock_lock_acquire(l, 42, 0, RLOCK_LEASE_WATCHDOG, NULL));
  CHECK_OK(rlock_lock_force_unlock(l, NULL));
  CHECK_EQ(wait_lost(++n, 5000), n);
  CHECK_EQ(lost_reason(), RLOCK_LOST_FORCE_UNLOCKED);
  CHECK_EQ(last_owner, 42);

  /* every reason has its own text */
  const char *seen[8] = {0};
  rlock_lost_reason_t all[] = {RLOCK_LOST_EXPIRED, RLOCK_LOST_RENEWAL_FAILED, RLOCK_LOST_DELETED,
                               RLOCK_LOST_FORCE_UNLOCKED, RLOCK_LOST_COUNT_MISMATCH};
  for (int i = 0; i < 5; i++) {
    seen[i] = rlock_lost_reason_str(all[i]);
    CHECK(seen[i] && *seen[i] && strcmp(seen[i], "unknown") != 0);
    for (int j = 0; j < i; j++) CHECK(strcmp(seen[i], seen[j]) != 0);
  }
  CHECK_STREQ(rlock_lost_reason_str((rlock_lost_reason_t)99), "unknown");
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* test_holes [NAME]: all tests, or only NAME */
#define RUN_IF(name) \
  if (argc < 2 || !strcmp(argv[1], #name)) RUN(name)

int main(int argc, char **argv) {
  th_init(argc, argv, 120);
  srv = th_server_start(NULL);
  RUN_IF(reentry_keeps_watchdog);
  RUN_IF(fixed_reentry_never_shortens);
  RUN_IF(renewal_never_shortens);
  RUN_IF(explicit_owner_is_not_a_thread);
  RUN_IF(huge_lease_rejected);
  RUN_IF(huge_options_rejected);
  RUN_IF(scripts_check_before_writing);
  RUN_IF(release_count_surplus);
  RUN_IF(release_count_deficit);
  RUN_IF(lost_reasons);
  th_server_stop(srv);
  return th_done();
}
