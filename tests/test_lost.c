/* test_lost.c -- the lock-lost callback: the key is deleted (or force
 * unlocked, or taken over) behind the holder's back; the next watchdog
 * renewal (watchdog 1000 ms: within ~333 ms) finds the hold gone and calls
 * the callback with the name and owner; the hold is no longer tracked. The
 * test waits for the callback on a condition variable. */
#include <pthread.h>
#include <string.h>

#include "harness.h"

static th_server_t *srv;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int calls;
static uint64_t last_owner;
static char last_name[64];
static size_t last_len;
static void *last_arg;
static rlock_lost_reason_t last_reason;

static void on_lost(const char *name, size_t len, uint64_t owner, rlock_lost_reason_t reason, void *arg) {
  pthread_mutex_lock(&mu);
  calls++;
  last_reason = reason;
  last_owner = owner;
  last_len = len;
  memcpy(last_name, name, len < sizeof last_name ? len : sizeof last_name);
  last_arg = arg;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
}

/* Waits until the callback ran `want` times (or 5 s passed). */
static int wait_calls(int want) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += 5;
  pthread_mutex_lock(&mu);
  while (calls < want) {
    if (pthread_cond_timedwait(&cv, &mu, &ts) != 0) break;
  }
  int got = calls;
  pthread_mutex_unlock(&mu);
  return got;
}

static int get_calls(void) {
  pthread_mutex_lock(&mu);
  int n = calls;
  pthread_mutex_unlock(&mu);
  return n;
}

static int lost_counted(void *c) {
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  return st.locks_lost >= 1;
}

static void reset(void) {
  pthread_mutex_lock(&mu);
  calls = 0;
  last_owner = 0;
  last_len = 0;
  pthread_mutex_unlock(&mu);
}

static int cookie;

TEST(deleted_behind_back) {
  reset();
  rlock_client_t *c = th_client(srv->url, 1000);
  rlock_client_on_lost(c, on_lost, &cookie);
  rlock_lock_t *l = th_lock(c, "lost:del");
  rlock_lock_t *keep = th_lock(c, "lost:keep");
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  CHECK_OK(rlock_lock_lock(keep, RLOCK_LEASE_WATCHDOG));
  int64_t until = 0;
  CHECK_OK(rlock_lock_valid_until(l, RLOCK_OWNER_SELF, &until));

  int64_t t0 = th_now_ms();
  CHECK_EQ(th_cmd_int(srv, "DEL", "lost:del", NULL), 1);
  CHECK_MSG(wait_calls(1) == 1, "lost callback not called");
  int64_t took = th_now_ms() - t0;
  CHECK_MSG(took < 2000, "lost reported after %lld ms (renewal every ~333 ms)", (long long)took);
  CHECK_EQ(last_len, 8);
  CHECK(memcmp(last_name, "lost:del", 8) == 0);
  CHECK_EQ(last_owner, RLOCK_OWNER_THREAD | (uint64_t)th_gettid());
  CHECK(last_arg == &cookie);

  CHECK_RC(rlock_lock_valid_until(l, RLOCK_OWNER_SELF, &until), RLOCK_ENOTHELD);
  CHECK_RC(rlock_lock_unlock(l), RLOCK_ENOTHELD);
  /* The other lock is unaffected and still renewed. */
  CHECK_OK(rlock_lock_valid_until(keep, RLOCK_OWNER_SELF, &until));
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  CHECK_EQ(st.locks_lost, 1);
  CHECK_EQ(st.held, 1);
  th_sleep_ms(1200); /* the scenario: a few more renewal rounds, and no second report */
  CHECK(th_cmd_int(srv, "PTTL", "lost:keep", NULL) > 0);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "lost:del", NULL), 0);
  CHECK_EQ(get_calls(), 1);
  CHECK_OK(rlock_lock_unlock(keep));
  rlock_lock_free(l);
  rlock_lock_free(keep);
  rlock_client_free(c);
  CHECK_EQ(get_calls(), 1);
}

TEST(force_unlocked_and_taken_over) {
  reset();
  rlock_client_t *c = th_client(srv->url, 1000), *other = th_client(srv->url, 0);
  rlock_client_on_lost(c, on_lost, NULL);
  rlock_lock_t *l = th_lock(c, "lost:force"), *lo = th_lock(other, "lost:force");
  CHECK_OK(rlock_lock_acquire(l, 99, 0, RLOCK_LEASE_WATCHDOG, NULL));
  /* Another client force-unlocks and takes the lock at once: the key exists
   * again, but without our owner. */
  CHECK_OK(rlock_lock_force_unlock(lo, NULL));
  CHECK_OK(rlock_lock_trylock(lo, 0, 30000));
  CHECK_MSG(wait_calls(1) == 1, "lost callback not called");
  CHECK_EQ(last_owner, 99);
  int64_t until;
  CHECK_RC(rlock_lock_valid_until(l, 99, &until), RLOCK_ENOTHELD);
  /* The other client's hold is left alone. */
  int v = 0;
  CHECK_OK(rlock_lock_is_held(lo, RLOCK_OWNER_SELF, &v));
  CHECK_EQ(v, 1);
  CHECK_RC(rlock_lock_release(l, 99), RLOCK_ENOTHELD);
  CHECK_OK(rlock_lock_is_held(lo, RLOCK_OWNER_SELF, &v));
  CHECK_EQ(v, 1);
  CHECK_OK(rlock_lock_unlock(lo));
  rlock_lock_free(l);
  rlock_lock_free(lo);
  rlock_client_free(c);
  rlock_client_free(other);
}

TEST(callback_removed) {
  reset();
  rlock_client_t *c = th_client(srv->url, 1000);
  rlock_client_on_lost(c, on_lost, NULL);
  rlock_client_on_lost(c, NULL, NULL);
  rlock_lock_t *l = th_lock(c, "lost:nocb");
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  th_reply_free(th_cmd(srv, "DEL", "lost:nocb", NULL));
  /* Still detected (stats), but nobody is called. */
  CHECK(th_wait_until(lost_counted, c, 5000));
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  CHECK_EQ(st.locks_lost, 1);
  CHECK_EQ(get_calls(), 0);
  int64_t until;
  CHECK_RC(rlock_lock_valid_until(l, RLOCK_OWNER_SELF, &until), RLOCK_ENOTHELD);
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(force_unlocked_by_same_client) {
  /* A fixed-lease hold (never renewed) force-unlocked through the same
   * client: the loss is reported at once, not when the 60 s lease ends. */
  reset();
  rlock_client_t *c = th_client(srv->url, 30000);
  rlock_client_on_lost(c, on_lost, NULL);
  rlock_lock_t *l = th_lock(c, "lost:self-force");
  CHECK_OK(rlock_lock_acquire(l, 7, 0, 60000, NULL));
  int was = 0;
  CHECK_OK(rlock_lock_force_unlock(l, &was));
  CHECK_EQ(was, 1);
  CHECK_MSG(wait_calls(1) == 1, "lost callback not called after our own force unlock");
  CHECK_EQ(last_owner, 7);
  int64_t until;
  CHECK_RC(rlock_lock_valid_until(l, 7, &until), RLOCK_ENOTHELD);
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  CHECK_EQ(st.held, 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* A fixed-lease hold is not renewed, so no renewal finds it gone: when the
 * server lost it (here deleted; a restart without persistence or a failover
 * to a replica that lacked it look the same to the client), its owner's
 * unlock is the first to see it. That unlock answers RLOCK_ENOTHELD and the
 * hold ended without an unlock by its owner: the lock-lost callback reports
 * it (rlock.h), once, with RLOCK_LOST_DELETED (its lease had not run out).
 * Fast path on and off: the fast unlock reports it on the I/O thread. */
static void fixed_lease_gone(int fast) {
  reset();
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = srv->url;
  o.fast_path = fast;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  rlock_client_on_lost(c, on_lost, &cookie);
  rlock_lock_t *l = th_lock(c, "lost:fixed");
  CHECK_OK(rlock_lock_lock(l, 60000));
  CHECK_EQ(th_cmd_int(srv, "DEL", "lost:fixed", NULL), 1);
  CHECK_RC(rlock_lock_unlock(l), RLOCK_ENOTHELD);
  CHECK_MSG(wait_calls(1) == 1,
            "a fixed-lease hold the server lost ended at its unlock (ENOTHELD) "
            "with no lock-lost callback (fast path %s)",
            fast ? "on" : "off");
  CHECK_EQ(last_reason, RLOCK_LOST_DELETED);
  CHECK_EQ(last_owner, RLOCK_OWNER_THREAD | (uint64_t)th_gettid());
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  CHECK_EQ(st.locks_lost, 1);
  CHECK_EQ(st.held, 0);
  /* the hold is no longer tracked: a second unlock reports nothing new */
  CHECK_RC(rlock_lock_unlock(l), RLOCK_ENOTHELD);
  /* a hold released by its owner is not a loss */
  CHECK_OK(rlock_lock_lock(l, 60000));
  CHECK_OK(rlock_lock_unlock(l));
  rlock_lock_free(l);
  rlock_client_free(c);
  CHECK_EQ(get_calls(), 1);
}

TEST(fixed_lease_gone_told_at_unlock) { fixed_lease_gone(0); }
TEST(fixed_lease_gone_told_at_unlock_fast) { fixed_lease_gone(1); }

int main(int argc, char **argv) {
  th_init(argc, argv, 110);
  srv = th_server_start(NULL);
  RUN(deleted_behind_back);
  RUN(force_unlocked_and_taken_over);
  RUN(callback_removed);
  RUN(force_unlocked_by_same_client);
  RUN(fixed_lease_gone_told_at_unlock);
  RUN(fixed_lease_gone_told_at_unlock_fast);
  th_server_stop(srv);
  return th_done();
}
