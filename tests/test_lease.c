/* test_lease.c -- fixed leases and wait bounds: a short lease runs out on
 * the server so another owner gets the lock (and the old owner's unlock
 * fails with RLOCK_ENOTHELD, and its lost callback fires); trylock honours
 * its wait bound (generously checked); valid-until counts from the send. */
#include <pthread.h>
#include <string.h>

#include "harness.h"

static th_server_t *srv;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int lost_calls;
static uint64_t lost_owner;
static char lost_name[64];

static void on_lost(const char *name, size_t len, uint64_t owner, rlock_lost_reason_t reason, void *arg) {
  (void)reason;
  (void)arg;
  pthread_mutex_lock(&mu);
  lost_calls++;
  lost_owner = owner;
  snprintf(lost_name, sizeof lost_name, "%.*s", (int)len, name);
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
}

static int wait_lost(int n, int64_t timeout_ms) {
  int64_t deadline = th_now_ms() + timeout_ms;
  pthread_mutex_lock(&mu);
  while (lost_calls < n && th_now_ms() < deadline) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 50 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&cv, &mu, &ts);
  }
  int got = lost_calls;
  pthread_mutex_unlock(&mu);
  return got;
}

TEST(short_lease_expires) {
  rlock_client_t *a = th_client(srv->url, 0), *b = th_client(srv->url, 0);
  rlock_client_on_lost(a, on_lost, NULL);
  rlock_lock_t *la = th_lock(a, "lease:short"), *lb = th_lock(b, "lease:short");

  int64_t t0 = th_now_ms();
  CHECK_OK(rlock_lock_lock(la, 300));
  long long pttl = th_cmd_int(srv, "PTTL", "lease:short", NULL);
  CHECK(pttl > 0 && pttl <= 300);
  /* B waits for it (the lease is not renewed) and gets it. */
  CHECK_OK(rlock_lock_trylock(lb, 5000, 20000));
  int64_t took = th_now_ms() - t0;
  CHECK_MSG(took >= 250 && took < 3000, "B got the lock after %lld ms (lease 300)", (long long)took);
  char ob[128];
  th_owner_id(b, RLOCK_OWNER_THREAD | (uint64_t)th_gettid(), ob, sizeof ob);
  CHECK_EQ(th_hget_num(srv, "lease:short", ob), 1);
  CHECK_EQ(th_cmd_int(srv, "HLEN", "lease:short", NULL), 1);

  /* A's hold is gone: unlock fails and leaves B's hold alone. */
  CHECK_RC(rlock_lock_unlock(la), RLOCK_ENOTHELD);
  CHECK_EQ(th_hget_num(srv, "lease:short", ob), 1);
  int held = -1;
  CHECK_OK(rlock_lock_is_held(la, RLOCK_OWNER_SELF, &held));
  CHECK_EQ(held, 0);

  /* A fixed lease that ran out while held is reported as lost. */
  CHECK_MSG(wait_lost(1, 5000) == 1, "lost callback calls: %d", lost_calls);
  CHECK_STREQ(lost_name, "lease:short");
  CHECK_EQ(lost_owner, RLOCK_OWNER_THREAD | (uint64_t)th_gettid());
  int64_t until = 0;
  CHECK_RC(rlock_lock_valid_until(la, RLOCK_OWNER_SELF, &until), RLOCK_ENOTHELD);

  CHECK_OK(rlock_lock_unlock(lb));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "lease:short", NULL), 0);
  rlock_lock_free(la);
  rlock_lock_free(lb);
  rlock_client_free(a);
  rlock_client_free(b);
  CHECK_EQ(lost_calls, 1);
}

TEST(trylock_wait_bound) {
  rlock_client_t *a = th_client(srv->url, 0), *b = th_client(srv->url, 0);
  rlock_lock_t *la = th_lock(a, "lease:bound"), *lb = th_lock(b, "lease:bound");
  CHECK_OK(rlock_lock_lock(la, 60000));

  int64_t t0 = th_now_ms();
  CHECK_RC(rlock_lock_trylock(lb, 300, 10000), RLOCK_EBUSY);
  int64_t took = th_now_ms() - t0;
  CHECK_MSG(took >= 295 && took < 3000, "trylock(300) returned after %lld ms", (long long)took);

  t0 = th_now_ms();
  CHECK_RC(rlock_lock_trylock(lb, 0, 10000), RLOCK_EBUSY);
  took = th_now_ms() - t0;
  CHECK_MSG(took < 1500, "trylock(0) took %lld ms", (long long)took);

  t0 = th_now_ms();
  CHECK_RC(rlock_lock_acquire(lb, 77, 1000, RLOCK_LEASE_WATCHDOG, NULL), RLOCK_EBUSY);
  took = th_now_ms() - t0;
  CHECK_MSG(took >= 995 && took < 4000, "acquire(wait 1000) returned after %lld ms", (long long)took);

  /* Nothing of B's is left behind by the failed waits. */
  CHECK_EQ(th_cmd_int(srv, "HLEN", "lease:bound", NULL), 1);
  CHECK(th_cmd_int(srv, "PTTL", "lease:bound", NULL) > 50000);
  CHECK_OK(rlock_lock_unlock(la));
  rlock_lock_free(la);
  rlock_lock_free(lb);
  rlock_client_free(a);
  rlock_client_free(b);
}

TEST(wait_shorter_than_lease_of_holder) {
  /* Holder with a 1500 ms lease; a 5000 ms wait succeeds once it runs out,
   * well before the wait bound. */
  rlock_client_t *a = th_client(srv->url, 0);
  rlock_lock_t *la = th_lock(a, "lease:expire2");
  CHECK_OK(rlock_lock_acquire(la, 1, 0, 1500, NULL));
  int64_t t0 = th_now_ms();
  CHECK_OK(rlock_lock_acquire(la, 2, 5000, 10000, NULL));
  int64_t took = th_now_ms() - t0;
  CHECK_MSG(took >= 1200 && took < 4000, "acquired after %lld ms", (long long)took);
  CHECK_RC(rlock_lock_release(la, 1), RLOCK_ENOTHELD);
  CHECK_OK(rlock_lock_release(la, 2));
  rlock_lock_free(la);
  rlock_client_free(a);
}

/* rlock_lock_valid_until is the send time of the acquire plus the lease,
 * not the time its answer came (rlock.h): the server holds the acquire back
 * for 1000 ms (CLIENT PAUSE WRITE holds scripts), and valid-until stays
 * within 500 ms of the call's start + the lease. For a fixed lease and for
 * the watchdog's. */
TEST(valid_until_counts_from_send) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = srv->url;
  o.command_timeout_ms = 10000; /* the held-back acquire must not time out */
  o.watchdog_timeout_ms = 20000;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  rlock_lock_t *l = th_lock(c, "lease:valid");
  for (int wd = 0; wd < 2; wd++) {
    int64_t lease = wd ? 20000 : 10000;
    redisReply *r = th_cmd(srv, "CLIENT", "PAUSE", "1000", "WRITE", NULL);
    CHECK_MSG(r->type == REDIS_REPLY_STATUS, "CLIENT PAUSE: %s", r->str);
    th_reply_free(r);
    int64_t t0 = rlock_now_ms();
    CHECK_OK(rlock_lock_trylock(l, 0, wd ? RLOCK_LEASE_WATCHDOG : lease));
    int64_t t1 = rlock_now_ms(), vu = 0;
    CHECK_MSG(t1 - t0 >= 800, "the pause did not hold the acquire back (answered after %lld ms)", (long long)(t1 - t0));
    CHECK_OK(rlock_lock_valid_until(l, RLOCK_OWNER_SELF, &vu));
    printf("%s lease %lld ms, answer after %lld ms: valid until start + %lld ms\n", wd ? "watchdog" : "fixed",
           (long long)lease, (long long)(t1 - t0), (long long)(vu - t0));
    CHECK_MSG(vu >= t0 + lease && vu <= t0 + lease + 500,
              "valid-until is start + %lld ms (lease %lld ms, answer after %lld ms): not counted from the send",
              (long long)(vu - t0), (long long)lease, (long long)(t1 - t0));
    CHECK_OK(rlock_lock_unlock(l));
  }
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "lease:valid", NULL), 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 110);
  srv = th_server_start(NULL);
  RUN(short_lease_expires);
  RUN(trylock_wait_bound);
  RUN(wait_shorter_than_lease_of_holder);
  RUN(valid_until_counts_from_send);
  th_server_stop(srv);
  return th_done();
}
