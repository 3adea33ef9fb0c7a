/* test_redisson_semaphore.c -- the semaphore and the count-down latch against
 * the real Redisson 4.7.0 (the Java peer, tests/interop/redisson) on one
 * server: one counter, one channel, one message format:
 *   shared_counter      Java's trySetPermits is C's count; C's acquire is
 *                       Java's availablePermits; each side refused when too few
 *   java_releases_c_waits  a C waiter parked on redisson_sc:{NAME} takes the
 *                       permits when Java releases them (Java's message);
 *                       Java's tryAcquire takes a permit that rlock's queue
 *                       holds back from rlock's tries (it does not read it)
 *   c_releases_java_waits  a Java acquire() blocked (no timeout: it depends on
 *                       the message alone) completes when C releases
 *   latch_both_ways     Java's await() opens on C's count-down to zero, C's
 *                       await on Java's; Java's trySetCount is C's count */
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "harness_redisson.h"

static th_server_t *srv;
static char peer_addr[64];

typedef struct numsub_wait {
  const char *channel;
  long long n;
} numsub_wait_t;
static int numsub_reaches(void *arg) {
  numsub_wait_t *w = arg;
  return th_numsub(srv, w->channel) >= w->n;
}
static void wait_subscribers(const char *channel, long long n) {
  numsub_wait_t w = {channel, n};
  CHECK_MSG(th_wait_until(numsub_reaches, &w, 20000), "no waiter subscribed to %s", channel);
}

static int queued_1(void *key) { return th_cmd_int(srv, "ZCARD", (const char *)key, NULL) == 1; }

static rlock_semaphore_t *sem(rlock_client_t *c, const char *name) {
  rlock_semaphore_t *s = NULL;
  CHECK_OK(rlock_semaphore_new(c, name, strlen(name), &s));
  return s;
}

TEST(shared_counter) {
  th_peer_t *j = th_peer_start("single", peer_addr, 0, 0);
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_semaphore_t *s = sem(c, "rsem:shared");
  th_peer_expect(j, "a", "ok", "getSemaphore rsem:shared");
  th_peer_expect(j, "a", "true", "semTrySetPermits 3");
  int set = -1;
  CHECK_OK(rlock_semaphore_try_set_permits(s, 5, &set));
  CHECK_EQ(set, 0);
  int64_t v = -1;
  CHECK_OK(rlock_semaphore_available(s, &v));
  CHECK_EQ(v, 3);
  CHECK_OK(rlock_semaphore_try_acquire(s, 2));
  CHECK_EQ(th_peer_num(j, "a", "semAvailable"), 1);
  th_peer_expect(j, "a", "false", "semTryAcquire 2 0");
  th_peer_expect(j, "a", "true", "semTryAcquire 1 0");
  CHECK_RC(rlock_semaphore_try_acquire(s, 1), RLOCK_EBUSY);
  th_peer_expect(j, "a", "ok", "semRelease 3");
  CHECK_OK(rlock_semaphore_available(s, &v));
  CHECK_EQ(v, 3);
  rlock_semaphore_free(s);
  rlock_client_free(c);
  th_peer_stop(j);
}

TEST(java_releases_c_waits) {
  th_peer_t *j = th_peer_start("single", peer_addr, 0, 0);
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_semaphore_t *s = sem(c, "rsem:jrel");
  th_res_t w = {0};
  CHECK_OK(rlock_semaphore_acquire_async(s, 2, RLOCK_WAIT_FOREVER, NULL, th_res_sem, &w));
  wait_subscribers("redisson_sc:{rsem:jrel}", 1);
  CHECK_MSG(th_wait_until(queued_1, "rlock_semaphore_queue:{rsem:jrel}", 10000), "the C waiter did not queue");
  th_peer_expect(j, "a", "ok", "getSemaphore rsem:jrel");
  th_peer_expect(j, "a", "ok", "semRelease 1");
  CHECK_EQ(atomic_load(&w.done), 0); /* 1 of 2: it waits on */
  /* rlock's queue holds the permit back from rlock's tries (the waiter asks
   * 2), not from Java's: Java's tryAcquire does not read it */
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = srv->url;
  o.semaphore_fair_after_ms = 0;
  rlock_client_t *c2 = NULL;
  CHECK_OK(rlock_client_new(&c2, &o));
  rlock_semaphore_t *s2 = sem(c2, "rsem:jrel");
  CHECK_RC(rlock_semaphore_try_acquire(s2, 1), RLOCK_EBUSY);
  th_peer_expect(j, "a", "true", "semTryAcquire 1 0");
  th_peer_expect(j, "a", "ok", "semRelease 2");
  CHECK_MSG(th_wait_until(th_res_done, &w, 10000), "Java's release did not wake the C waiter");
  CHECK_OK(w.status);
  CHECK_EQ(th_peer_num(j, "a", "semAvailable"), 0);
  rlock_semaphore_free(s2);
  rlock_client_free(c2);
  rlock_semaphore_free(s);
  rlock_client_free(c);
  th_peer_stop(j);
}

TEST(c_releases_java_waits) {
  th_peer_t *j = th_peer_start("single", peer_addr, 0, 0);
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_semaphore_t *s = sem(c, "rsem:crel");
  th_peer_expect(j, "a", "ok", "getSemaphore rsem:crel");
  th_peer_send(j, "a", "semAcquire 2"); /* acquire() without timeout: only a message wakes it */
  wait_subscribers("redisson_sc:{rsem:crel}", 1);
  char *early = NULL;
  CHECK(!th_peer_poll(j, "a", 0, &early));
  CHECK_OK(rlock_semaphore_release(s, 2, NULL));
  char *a = th_peer_answer(j, "a", 10000);
  CHECK_STREQ(a, "ok");
  free(a);
  int64_t v = -1;
  CHECK_OK(rlock_semaphore_available(s, &v));
  CHECK_EQ(v, 0);
  rlock_semaphore_free(s);
  rlock_client_free(c);
  th_peer_stop(j);
}

TEST(latch_both_ways) {
  th_peer_t *j = th_peer_start("single", peer_addr, 0, 0);
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_latch_t *l = NULL;
  CHECK_OK(rlock_latch_new(c, "rlat:a", 6, &l));
  th_peer_expect(j, "a", "ok", "getLatch rlat:a");
  th_peer_expect(j, "b", "ok", "getLatch rlat:a");
  /* Java awaits, C counts down */
  CHECK_OK(rlock_latch_try_set_count(l, 2, NULL));
  CHECK_EQ(th_peer_num(j, "b", "latchCount"), 2);
  th_peer_send(j, "a", "latchAwait 20000");
  wait_subscribers("redisson_countdownlatch__channel__{rlat:a}", 1);
  CHECK_OK(rlock_latch_count_down(l, NULL));
  th_peer_expect(j, "b", "ok", "latchCountDown"); /* one each */
  char *a = th_peer_answer(j, "a", 10000);
  CHECK_STREQ(a, "true");
  free(a);
  /* C awaits, Java counts down */
  th_peer_expect(j, "b", "true", "latchTrySetCount 1");
  int64_t v = -1;
  CHECK_OK(rlock_latch_get_count(l, &v));
  CHECK_EQ(v, 1);
  th_res_t w = {0};
  CHECK_OK(rlock_latch_await_async(l, 20000, NULL, th_res_latch, &w));
  wait_subscribers("redisson_countdownlatch__channel__{rlat:a}", 1);
  th_peer_expect(j, "b", "ok", "latchCountDown");
  CHECK_MSG(th_wait_until(th_res_done, &w, 10000), "Java's count-down did not wake the C awaiter");
  CHECK_OK(w.status);
  rlock_latch_free(l);
  rlock_client_free(c);
  th_peer_stop(j);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 170);
  const char *why = th_peer_unavailable();
  if (why) {
    printf("SKIP test_redisson_semaphore: %s\n", why);
    return 77;
  }
  signal(SIGPIPE, SIG_IGN);
  srv = th_server_start(NULL);
  snprintf(peer_addr, sizeof peer_addr, "redis://127.0.0.1:%d", srv->port);
  RUN(shared_counter);
  RUN(java_releases_c_waits);
  RUN(c_releases_java_waits);
  RUN(latch_both_ways);
  th_server_stop(srv);
  return th_done();
}
