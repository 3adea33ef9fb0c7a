/* test_pubsub_wait.c -- waiters are woken through pub/sub, not by polling:
 * while 4 waiters wait ~1 s on a watchdog-held lock (30 s lease) the server
 * sees only a handful of script calls (INFO commandstats), one PUBLISH per
 * releasing unlock and few SUBSCRIBEs; one message wakes one waiter of a
 * client, not all; force unlock wakes a waiter that waits forever at once,
 * long before the holder's lease would run out. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include "harness.h"

#define NWAITERS 4

static th_server_t *srv;
static rlock_lock_t *wlock;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int acquired_order[NWAITERS], nacquired;
static atomic_int inside; /* threads inside the critical section */

static void *waiter(void *arg) {
  long id = (long)arg;
  CHECK_OK(rlock_lock_lock(wlock, RLOCK_LEASE_WATCHDOG));
  /* The critical section: one thread at a time, for long enough (20 ms, the
   * scenario's hold time) that a second holder would be caught inside. */
  CHECK_MSG(atomic_fetch_add(&inside, 1) == 0, "waiter %ld entered while another was inside", id);
  pthread_mutex_lock(&mu);
  acquired_order[nacquired++] = (int)id;
  pthread_mutex_unlock(&mu);
  sched_yield();
  th_sleep_ms(20);
  CHECK_MSG(atomic_load(&inside) == 1, "waiter %ld: another waiter came inside", id);
  atomic_fetch_sub(&inside, 1);
  CHECK_OK(rlock_lock_unlock(wlock));
  return NULL;
}

static rlock_client_t *wcli;
static int all_waiting(void *arg) {
  (void)arg;
  rlock_stats_t st;
  rlock_client_stats(wcli, &st);
  return st.acquire_attempts >= NWAITERS && th_numsub(srv, "redisson_lock__channel:{pubsub:lock}") >= 1;
}

TEST(waiters_woken_by_pubsub) {
  rlock_client_t *holder = th_client(srv->url, 0);
  wcli = th_client(srv->url, 0);
  rlock_lock_t *hl = th_lock(holder, "pubsub:lock");
  wlock = th_lock(wcli, "pubsub:lock");
  CHECK_OK(rlock_lock_lock(hl, RLOCK_LEASE_WATCHDOG));
  th_reply_free(th_cmd(srv, "CONFIG", "RESETSTAT", NULL));

  pthread_t t[NWAITERS];
  for (long i = 0; i < NWAITERS; i++) CHECK_EQ(pthread_create(&t[i], NULL, waiter, (void *)i), 0);
  CHECK_MSG(th_wait_until(all_waiting, NULL, 10000), "waiters did not start waiting");
  /* The scenario: hold ~1 s while they wait (polling would show up as script calls). */
  th_sleep_ms(1000);
  pthread_mutex_lock(&mu);
  CHECK_EQ(nacquired, 0);
  pthread_mutex_unlock(&mu);
  CHECK_OK(rlock_lock_unlock(hl));
  for (int i = 0; i < NWAITERS; i++) pthread_join(t[i], NULL);
  CHECK_EQ(nacquired, NWAITERS);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "pubsub:lock", NULL), 0);

  long long scripts = th_cmdstat(srv, "evalsha") + th_cmdstat(srv, "eval");
  long long publishes = th_cmdstat(srv, "publish");
  long long subscribes = th_cmdstat(srv, "subscribe");
  CHECK(TH_STAT_REACHES(wcli, messages, 1, 10000)); /* (a message may be read after its waiter's grant) */
  rlock_stats_t st;
  rlock_client_stats(wcli, &st);
  printf(
      "# scripts %lld, publish %lld, subscribe %lld; waiter client: attempts %llu, "
      "messages %llu, subscribes %llu\n",
      scripts, publishes, subscribes, (unsigned long long)st.acquire_attempts, (unsigned long long)st.messages,
      (unsigned long long)st.subscribes);
  CHECK_MSG(scripts < 40, "%lld script calls for 1 holder + %d waiters", scripts, NWAITERS);
  /* Every unlock that frees the lock publishes exactly once. */
  CHECK_EQ(publishes, 1 + NWAITERS);
  CHECK_MSG(subscribes >= 1 && subscribes <= NWAITERS, "%lld SUBSCRIBE calls", subscribes);
  CHECK(st.subscribes >= 1 && st.subscribes <= NWAITERS);
  CHECK(st.messages >= 1);
  CHECK(st.acquire_attempts >= NWAITERS * 2 - 1 && st.acquire_attempts < 30);

  rlock_lock_free(hl);
  rlock_lock_free(wlock);
  rlock_client_free(holder);
  rlock_client_free(wcli);
}

struct forever {
  rlock_lock_t *lock;
  int rc;
  int64_t done_at;
};

static void *wait_forever(void *p) {
  struct forever *f = p;
  f->rc = rlock_lock_acquire(f->lock, 5, RLOCK_WAIT_FOREVER, RLOCK_LEASE_WATCHDOG, NULL);
  f->done_at = th_now_ms();
  return NULL;
}

static int subscribed(void *chan) { return th_numsub(srv, chan) >= 1; }

TEST(force_unlock_wakes_waiter) {
  rlock_client_t *holder = th_client(srv->url, 0), *w = th_client(srv->url, 0);
  rlock_lock_t *hl = th_lock(holder, "pubsub:force");
  CHECK_OK(rlock_lock_lock(hl, RLOCK_LEASE_WATCHDOG)); /* 30 s, renewed */
  struct forever f = {.lock = th_lock(w, "pubsub:force")};
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, wait_forever, &f), 0);
  CHECK(th_wait_until(subscribed, "redisson_lock__channel:{pubsub:force}", 10000));

  /* A third party force-unlocks. */
  rlock_client_t *admin = th_client(srv->url, 0);
  rlock_lock_t *al = th_lock(admin, "pubsub:force");
  int was = 0;
  int64_t t0 = th_now_ms();
  CHECK_OK(rlock_lock_force_unlock(al, &was));
  CHECK_EQ(was, 1);
  pthread_join(t, NULL);
  CHECK_OK(f.rc);
  int64_t took = f.done_at - t0;
  /* Woken by the force unlock's message, not by the holder's 30 s lease. */
  CHECK_MSG(took < 5000, "waiter acquired %lld ms after the force unlock", (long long)took);
  char owner[128];
  th_owner_id(w, 5, owner, sizeof owner);
  CHECK_EQ(th_hget_num(srv, "pubsub:force", owner), 1);
  CHECK_OK(rlock_lock_release(f.lock, 5));
  rlock_lock_free(al);
  rlock_lock_free(f.lock);
  rlock_lock_free(hl);
  rlock_client_free(admin);
  rlock_client_free(w);
  rlock_client_free(holder);
}

/* One message wakes one parked waiter of a client, not all of them
 * (rlock.h: "one waiter is woken"; lib/pubsub.c): three waiters of one
 * client park on a lock held elsewhere for a minute, then each message
 * published on its channel costs exactly one more try. */
static rlock_stats_t stats_of(rlock_client_t *c) {
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  return st;
}
typedef struct stat_want {
  rlock_client_t *c;
  uint64_t want;
} stat_want_t;
static int attempts_reach(void *a) {
  stat_want_t *s = a;
  return stats_of(s->c).acquire_attempts >= s->want;
}
static int messages_reach(void *a) {
  stat_want_t *s = a;
  return stats_of(s->c).messages >= s->want;
}
/* A lock query on c's command connection: replies come in order, so once it
 * answers, the replies of every try written before it have been handled. */
static void barrier(rlock_client_t *c) {
  rlock_lock_t *l = th_lock(c, "pubsub:barrier");
  int v = -1;
  CHECK_OK(rlock_lock_is_locked(l, &v));
  CHECK_EQ(v, 0);
  rlock_lock_free(l);
}
static atomic_int one_done;
static void on_one_done(rlock_lock_t *l, int status, int64_t value, void *arg) {
  (void)l, (void)value, (void)arg;
  CHECK_RC(status, RLOCK_ECLOSED); /* the waiters end when the client is freed */
  atomic_fetch_add(&one_done, 1);
}

TEST(message_wakes_one_waiter) {
  const char *name = "pubsub:one", *chan = "redisson_lock__channel:{pubsub:one}";
  th_reply_free(th_cmd(srv, "HSET", name, "someone-else:1", "1", NULL));
  th_reply_free(th_cmd(srv, "PEXPIRE", name, "60000", NULL));
  rlock_client_t *w = th_client(srv->url, 0);
  rlock_lock_t *l = th_lock(w, name);
  for (int i = 0; i < 3; i++)
    CHECK_OK(rlock_lock_acquire_async(l, 10 + (rlock_owner_t)i, RLOCK_WAIT_FOREVER, 60000, NULL, on_one_done, NULL));
  stat_want_t a = {w, 6}; /* each waiter: busy, then busy again once subscribed */
  CHECK(th_wait_until(attempts_reach, &a, 10000));
  CHECK(th_wait_until(subscribed, (void *)chan, 10000));
  barrier(w); /* every try answered: parked (or trying once more on the subscription's wake token) */
  barrier(w);
  uint64_t base = stats_of(w).acquire_attempts;
  for (int m = 1; m <= 3; m++) {
    stat_want_t msg = {w, stats_of(w).messages + 1};
    CHECK_EQ(th_cmd_int(srv, "PUBLISH", chan, "0", NULL), 1);
    CHECK(th_wait_until(messages_reach, &msg, 5000));
    barrier(w);
    uint64_t tries = stats_of(w).acquire_attempts - base;
    CHECK_MSG(tries == (uint64_t)m, "after %d messages the waiters tried %llu times (one wake-up per message)", m,
              (unsigned long long)tries);
  }
  CHECK_EQ(th_cmd_int(srv, "HLEN", name, NULL), 1); /* still the other owner's */
  rlock_lock_free(l);
  rlock_client_free(w);
  CHECK_EQ(atomic_load(&one_done), 3);
  th_reply_free(th_cmd(srv, "DEL", name, NULL));
}

/* Several clients in one process, each with its own I/O thread, wait and
 * subscribe at the same time: the engine shares no mutable state between
 * clients (TSan runs this test). */
#define NCLIENTS 3
TEST(clients_wait_side_by_side) {
  rlock_client_t *holder = th_client(srv->url, 0), *cs[NCLIENTS];
  rlock_lock_t *hl[NCLIENTS];
  struct forever fs[NCLIENTS];
  pthread_t ts[NCLIENTS];
  const char *names[NCLIENTS] = {"pubsub:side:0", "pubsub:side:1", "pubsub:side:2"};
  for (int i = 0; i < NCLIENTS; i++) {
    hl[i] = th_lock(holder, names[i]);
    CHECK_OK(rlock_lock_lock(hl[i], RLOCK_LEASE_WATCHDOG));
    cs[i] = th_client(srv->url, 0);
    memset(&fs[i], 0, sizeof fs[i]);
    fs[i].lock = th_lock(cs[i], names[i]);
    CHECK_EQ(pthread_create(&ts[i], NULL, wait_forever, &fs[i]), 0);
  }
  char chan[64];
  for (int i = 0; i < NCLIENTS; i++) {
    snprintf(chan, sizeof chan, "redisson_lock__channel:{%s}", names[i]);
    CHECK(th_wait_until(subscribed, chan, 10000));
  }
  for (int i = 0; i < NCLIENTS; i++) CHECK_OK(rlock_lock_unlock(hl[i]));
  for (int i = 0; i < NCLIENTS; i++) {
    pthread_join(ts[i], NULL);
    CHECK_OK(fs[i].rc);
    CHECK_OK(rlock_lock_release(fs[i].lock, 5));
    rlock_lock_free(fs[i].lock);
    rlock_lock_free(hl[i]);
    rlock_client_free(cs[i]);
  }
  rlock_client_free(holder);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 170);
  srv = th_server_start(NULL);
  RUN(waiters_woken_by_pubsub);
  RUN(force_unlock_wakes_waiter);
  RUN(message_wakes_one_waiter);
  RUN(clients_wait_side_by_side);
  th_server_stop(srv);
  return th_done();
}
