/* test_owner_races.c -- calls of one owner that overlap on the wire (async
 * calls, or one explicit owner shared by several threads), against a real
 * redis-server. The server is held with CLIENT PAUSE WRITE until every
 * request is written, so they run back to back in the order sent while no
 * reply has reached the client yet:
 *   - a re-entry in flight when an unlock of the same owner is sent: the
 *     unlock's hold-count check must not take the re-entry for a count
 *     mismatch (removing the owner's field frees a lock the owner still
 *     holds: a second owner gets in);
 *   - two unlocks of one owner in flight together: both release, no loss
 *     is reported;
 *   - the TTL an unlock leaves covers a re-entry in flight (its lease). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"

static th_server_t *srv;

/* ------------------------------------------------------------ completions */

typedef struct done {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int calls, status;
  int64_t value;
} done_t;

static void done_init(done_t *d) {
  memset(d, 0, sizeof *d);
  pthread_mutex_init(&d->mu, NULL);
  pthread_cond_init(&d->cv, NULL);
}

static void on_done(rlock_lock_t *lock, int status, int64_t value, void *arg) {
  (void)lock;
  done_t *d = arg;
  pthread_mutex_lock(&d->mu);
  d->calls++;
  d->status = status;
  d->value = value;
  pthread_cond_broadcast(&d->cv);
  pthread_mutex_unlock(&d->mu);
}

/* Waits (10 s at most) for the completion; returns its status. */
static int wait_done(done_t *d, int64_t *value) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += 10;
  pthread_mutex_lock(&d->mu);
  while (d->calls == 0 && pthread_cond_timedwait(&d->cv, &d->mu, &ts) == 0) {
  }
  CHECK_MSG(d->calls == 1, "completion called %d times", d->calls);
  int st = d->status;
  if (value) *value = d->value;
  pthread_mutex_unlock(&d->mu);
  return st;
}

static _Atomic int lost_calls;
static void on_lost(const char *name, size_t len, uint64_t owner, rlock_lost_reason_t reason, void *arg) {
  (void)arg;
  fprintf(stderr, "  lost: %.*s owner %llx: %s\n", (int)len, name, (unsigned long long)owner,
          rlock_lost_reason_str(reason));
  lost_calls++;
}

/* ------------------------------------------------------------ pausing the server */

typedef struct sent_arg {
  rlock_client_t *c;
  uint64_t want;
} sent_arg_t;
static int sent_reaches(void *a) {
  sent_arg_t *s = a;
  rlock_stats_t st;
  rlock_client_stats(s->c, &st);
  return st.commands_sent >= s->want;
}

static uint64_t commands_sent(rlock_client_t *c) {
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  return st.commands_sent;
}

/* Scripts (which may write) wait while the server is paused. */
static void pause_writes(void) {
  redisReply *r = th_cmd(srv, "CLIENT", "PAUSE", "20000", "WRITE", NULL);
  CHECK(r && r->type == REDIS_REPLY_STATUS);
  th_reply_free(r);
}

/* Once c has written n more commands (counted from base), lets them run. */
static void unpause_after(rlock_client_t *c, uint64_t base, uint64_t n) {
  sent_arg_t a = {c, base + n};
  CHECK_MSG(th_wait_until(sent_reaches, &a, 10000), "the client did not send its %llu requests", (unsigned long long)n);
  redisReply *r = th_cmd(srv, "CLIENT", "UNPAUSE", NULL);
  CHECK(r && r->type == REDIS_REPLY_STATUS);
  th_reply_free(r);
}

/* ------------------------------------------------------------ tests */

#define OWNER 7

/* Owner 7 holds the lock; a re-entry of owner 7 is in flight (applied on the
 * server, reply not yet in) when an unlock of owner 7 is sent. Afterwards
 * owner 7 still holds the lock once, and nobody else can take it. */
static void reentry_then_unlock(int64_t lease) {
  rlock_client_t *c = th_client(srv->url, 0), *other = th_client(srv->url, 0);
  rlock_client_on_lost(c, on_lost, NULL);
  rlock_lock_t *l = th_lock(c, "races:reenter"), *lo = th_lock(other, "races:reenter");
  char id[128];
  th_owner_id(c, OWNER, id, sizeof id);
  int lost0 = lost_calls;
  CHECK_OK(rlock_lock_acquire(l, OWNER, 0, lease, NULL));

  done_t acq, rel;
  done_init(&acq);
  done_init(&rel);
  pause_writes();
  uint64_t base = commands_sent(c);
  CHECK_OK(rlock_lock_acquire_async(l, OWNER, 0, lease, NULL, on_done, &acq));
  CHECK_OK(rlock_lock_release_async(l, OWNER, on_done, &rel));
  unpause_after(c, base, 2);
  int64_t freed = -1;
  CHECK_OK(wait_done(&acq, NULL));
  CHECK_OK(wait_done(&rel, &freed));
  int rc = rlock_lock_trylock(lo, 0, 10000);
  if (rc == 0) rlock_lock_unlock(lo);
  CHECK_MSG(rc == RLOCK_EBUSY, "another owner got the lock while owner %d holds it (rc %d)", OWNER, rc);
  CHECK_EQ(freed, 0); /* still held: the re-entry's hold */
  CHECK_EQ(th_hget_num(srv, "races:reenter", id), 1);
  CHECK_MSG(lost_calls == lost0, "a loss was reported (%d)", lost_calls - lost0);
  int64_t until = 0;
  CHECK_OK(rlock_lock_valid_until(l, OWNER, &until));
  CHECK_OK(rlock_lock_release(l, OWNER));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "races:reenter", NULL), 0);
  rlock_lock_free(l);
  rlock_lock_free(lo);
  rlock_client_free(c);
  rlock_client_free(other);
}

TEST(unlock_during_reentry_watchdog) { reentry_then_unlock(RLOCK_LEASE_WATCHDOG); }
TEST(unlock_during_reentry_fixed) { reentry_then_unlock(60000); }

/* The unlock leaves the TTL the re-entry in flight asked for: a 60 s hold
 * taken while a 60 s re-entry and an unlock are in flight keeps > 30 s. */
TEST(unlock_keeps_lease_of_reentry) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_client_on_lost(c, on_lost, NULL);
  rlock_lock_t *l = th_lock(c, "races:ttl");
  CHECK_OK(rlock_lock_acquire(l, OWNER, 0, 2000, NULL));
  done_t acq, rel;
  done_init(&acq);
  done_init(&rel);
  pause_writes();
  uint64_t base = commands_sent(c);
  CHECK_OK(rlock_lock_acquire_async(l, OWNER, 0, 60000, NULL, on_done, &acq));
  CHECK_OK(rlock_lock_release_async(l, OWNER, on_done, &rel));
  unpause_after(c, base, 2);
  CHECK_OK(wait_done(&acq, NULL));
  CHECK_OK(wait_done(&rel, NULL));
  long long pttl = th_cmd_int(srv, "PTTL", "races:ttl", NULL);
  int64_t until = 0;
  CHECK_OK(rlock_lock_valid_until(l, OWNER, &until));
  CHECK_MSG(pttl > 30000, "the unlock cut the 60 s re-entry to a TTL of %lld ms", pttl);
  CHECK_MSG(until - rlock_now_ms() <= pttl + 1000,
            "the client believes the hold valid for %lld ms, the server keeps it %lld ms",
            (long long)(until - rlock_now_ms()), pttl);
  CHECK_OK(rlock_lock_release(l, OWNER));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "races:ttl", NULL), 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* Owner 7 holds the lock twice; two unlocks of owner 7 leave together: the
 * lock is free afterwards and no loss is reported. */
TEST(two_unlocks_in_flight) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_client_on_lost(c, on_lost, NULL);
  rlock_lock_t *l = th_lock(c, "races:two");
  int lost0 = lost_calls;
  CHECK_OK(rlock_lock_acquire(l, OWNER, 0, RLOCK_LEASE_WATCHDOG, NULL));
  CHECK_OK(rlock_lock_acquire(l, OWNER, 0, RLOCK_LEASE_WATCHDOG, NULL));
  done_t r1, r2;
  done_init(&r1);
  done_init(&r2);
  pause_writes();
  uint64_t base = commands_sent(c);
  CHECK_OK(rlock_lock_release_async(l, OWNER, on_done, &r1));
  CHECK_OK(rlock_lock_release_async(l, OWNER, on_done, &r2));
  unpause_after(c, base, 2);
  int64_t v1 = -1, v2 = -1;
  CHECK_OK(wait_done(&r1, &v1));
  CHECK_OK(wait_done(&r2, &v2));
  CHECK_EQ(v1, 0);
  CHECK_EQ(v2, 1);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "races:two", NULL), 0);
  CHECK_MSG(lost_calls == lost0, "a loss was reported for two plain unlocks (%d)", lost_calls - lost0);
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  CHECK_EQ(st.held, 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* An optional argument runs only the tests whose name contains it. */
#define RUN_IF(name) \
  if (argc < 2 || strstr(#name, argv[1])) RUN(name)

int main(int argc, char **argv) {
  th_init(argc, argv, 110);
  srv = th_server_start(NULL);
  RUN_IF(unlock_during_reentry_watchdog);
  RUN_IF(unlock_during_reentry_fixed);
  RUN_IF(unlock_keeps_lease_of_reentry);
  RUN_IF(two_unlocks_in_flight);
  th_server_stop(srv);
  return th_done();
}
