/* test_redisson_permits.c -- the permit-expirable semaphore against the real
 * Redisson 4.7.0 (RPermitExpirableSemaphore, the Java peer) on one server:
 * one count, one zset of permits, one channel, one id form (32 lowercase
 * hex on both APIs, 16 raw bytes in the zset):
 *   ids_cross           Java's and C's permits are counted together (each
 *                       side's available, acquired and total see both);
 *                       each side releases the other's permit by its id
 *                       (counted once: a second release is refused on both
 *                       sides); Java reads and extends a C permit's lease;
 *                       C releases a Java permit without expiry
 *   releases_wake_across  Java's release wakes a parked C acquire; C's
 *                       release wakes Java's acquire(lease); Java's release
 *                       of a C permit id wakes a C waiter, C's release of a
 *                       Java permit id wakes a Java waiter (60 s leases: only
 *                       the release's message explains a wake-up)
 *   expiry_across       a 1 s Java permit returns to a C waiter when it
 *                       expires and the reverse; the expired id is then
 *                       refused on both sides
 *   c_watchdog_permit   a C permit taken with the watchdog (1.5 s) outlives
 *                       3 leases while a Java tryAcquire waits 5 s in vain;
 *                       C's release then wakes a Java acquire() */
#include <ctype.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "harness_redisson.h"

static th_server_t *srv;
static char peer_addr[64];

#define LEASE 60000  /* ms: a wake-up long before it came from a message */
#define WAKE_MS 5000 /* bound on a message wake-up (a loaded 2-core machine) */

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
  CHECK_MSG(th_wait_until(numsub_reaches, &w, 20000), "no %lld waiters subscribed to %s", n, channel);
}

/* A C acquire in flight (async). */
typedef struct cacq {
  char id[RLOCK_PERMIT_ID_LEN + 1];
  atomic_int done;
  int status;
} cacq_t;
static void on_acquired(rlock_permits_t *s, int status, int64_t value, void *arg) {
  (void)s, (void)value;
  cacq_t *a = arg;
  a->status = status;
  atomic_store(&a->done, 1);
}
static int cacq_done(void *arg) { return atomic_load(&((cacq_t *)arg)->done); }

static rlock_permits_t *pes(rlock_client_t *c, const char *name) {
  rlock_permits_t *s = NULL;
  CHECK_OK(rlock_permits_new(c, name, strlen(name), &s));
  return s;
}

static int64_t c_count(rlock_permits_t *s, int (*fn)(rlock_permits_t *, int64_t *)) {
  int64_t v = -1000;
  CHECK_OK(fn(s, &v));
  return v;
}

/* A Java permit id: 32 lowercase hex characters (malloc'd). */
static char *java_id(char *a) {
  CHECK_MSG(strlen(a) == RLOCK_PERMIT_ID_LEN, "Java's permit id '%s' is not %d characters", a, RLOCK_PERMIT_ID_LEN);
  for (int i = 0; i < RLOCK_PERMIT_ID_LEN; i++)
    CHECK_MSG(isxdigit((unsigned char)a[i]) && !isupper((unsigned char)a[i]), "Java's permit id '%s'", a);
  return a;
}
static char *java_acquire(th_peer_t *j, const char *worker, const char *cmd) {
  th_peer_send(j, worker, "%s", cmd);
  return java_id(th_peer_answer(j, worker, 10000));
}

TEST(ids_cross) {
  const char *name = "rpes:ids";
  th_peer_t *j = th_peer_start("single", peer_addr, 0, 0);
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_permits_t *s = pes(c, name);
  th_peer_expect(j, "a", "ok", "getPermitSemaphore %s", name);
  th_peer_expect(j, "a", "true", "pesTrySetPermits 3");
  int set = -1;
  CHECK_OK(rlock_permits_try_set(s, 5, &set));
  CHECK_EQ(set, 0);
  char cid[RLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(rlock_permits_acquire(s, 0, LEASE, NULL, cid));
  char *jid = java_acquire(j, "a", "pesTryAcquire 0 60000");
  /* counted together */
  CHECK_EQ(th_peer_num(j, "a", "pesAvailable"), 1);
  CHECK_EQ(th_peer_num(j, "a", "pesAcquired"), 2);
  CHECK_EQ(th_peer_num(j, "a", "pesPermits"), 3);
  CHECK_EQ(c_count(s, rlock_permits_available), 1);
  CHECK_EQ(c_count(s, rlock_permits_acquired), 2);
  CHECK_EQ(c_count(s, rlock_permits_total), 3);
  char *jid2 = java_acquire(j, "a", "pesTryAcquire 0 60000");
  char cid2[RLOCK_PERMIT_ID_LEN + 1];
  CHECK_RC(rlock_permits_try_acquire(s, LEASE, cid2), RLOCK_EBUSY);
  th_peer_expect(j, "a", "null", "pesTryAcquire 0 60000");
  /* Java sees the C permit's lease, and extends it */
  char cmd[128];
  snprintf(cmd, sizeof cmd, "pesLeaseTime %s", cid);
  long long left = th_peer_num(j, "a", cmd);
  CHECK_MSG(left > 0 && left <= LEASE, "Java reads the C permit's lease as %lld ms", left);
  th_peer_expect(j, "a", "true", "pesUpdateLeaseTime %s 120000", cid);
  left = th_peer_num(j, "a", cmd);
  CHECK_MSG(left > LEASE && left <= 120000, "after Java's update the C permit has %lld ms", left);
  /* each side releases the other's permit by its id, once */
  th_peer_expect(j, "a", "ok", "pesRelease %s", cid);
  CHECK_EQ(c_count(s, rlock_permits_available), 1);
  CHECK_OK(rlock_permits_release(s, jid));
  CHECK_EQ(th_peer_num(j, "a", "pesAvailable"), 2);
  CHECK_RC(rlock_permits_release(s, cid), RLOCK_ENOTHELD);
  th_peer_expect(j, "a", "false", "pesTryRelease %s", jid);
  int released = -1;
  CHECK_OK(rlock_permits_try_release(s, jid2, &released));
  CHECK_EQ(released, 1);
  th_peer_expect(j, "a", "false", "pesTryRelease %s", jid2);
  CHECK_EQ(th_peer_num(j, "a", "pesAvailable"), 3);
  /* a Java permit without expiry (score 922337203685477): C counts it and releases it */
  char *forever = java_acquire(j, "a", "pesAcquire");
  snprintf(cmd, sizeof cmd, "pesLeaseTime %s", forever);
  CHECK_EQ(th_peer_num(j, "a", cmd), -1);
  CHECK_EQ(c_count(s, rlock_permits_acquired), 1);
  CHECK_OK(rlock_permits_release(s, forever));
  CHECK_EQ(th_peer_num(j, "a", "pesAvailable"), 3);
  CHECK_EQ(th_peer_num(j, "a", "pesAcquired"), 0);
  CHECK_EQ(th_cmd_int(srv, "ZCARD", "{rpes:ids}:timeout", NULL), 0);
  free(jid), free(jid2), free(forever);
  rlock_permits_free(s);
  rlock_client_free(c);
  th_peer_stop(j);
}

TEST(releases_wake_across) {
  const char *name = "rpes:wake", *chan = "redisson_sc:{rpes:wake}";
  th_peer_t *j = th_peer_start("single", peer_addr, 0, 0);
  rlock_client_t *c = th_client(srv->url, 0), *c2 = th_client(srv->url, 0);
  rlock_permits_t *s = pes(c, name), *s2 = pes(c2, name);
  th_peer_expect(j, "a", "ok", "getPermitSemaphore %s", name);
  th_peer_expect(j, "b", "ok", "getPermitSemaphore %s", name);
  th_peer_expect(j, "a", "true", "pesTrySetPermits 1");
  char *early = NULL;

  /* Java holds, C waits; Java's release wakes it */
  char *jid = java_acquire(j, "a", "pesAcquire 60000");
  cacq_t w = {0};
  CHECK_OK(rlock_permits_acquire_async(s, RLOCK_WAIT_FOREVER, LEASE, NULL, w.id, on_acquired, &w));
  wait_subscribers(chan, 1);
  CHECK(!cacq_done(&w));
  th_peer_expect(j, "a", "ok", "pesRelease %s", jid);
  CHECK_MSG(th_wait_until(cacq_done, &w, WAKE_MS), "Java's release did not wake the C waiter");
  CHECK_OK(w.status);
  free(jid);

  /* C holds, Java waits; C's release wakes it */
  th_peer_send(j, "b", "pesAcquire 60000");
  wait_subscribers(chan, 1);
  CHECK_MSG(!th_peer_poll(j, "b", 0, &early), "Java took a permit C holds: %s", early);
  CHECK_OK(rlock_permits_release(s, w.id));
  jid = java_id(th_peer_answer(j, "b", WAKE_MS));

  /* Java holds, a C waiter; C releases Java's permit by its id: a Java
   * waiter is woken */
  th_peer_send(j, "a", "pesAcquire 60000");
  wait_subscribers(chan, 1);
  CHECK_OK(rlock_permits_release(s2, jid)); /* another C client than the waiter's */
  free(jid);
  jid = java_id(th_peer_answer(j, "a", WAKE_MS));
  CHECK_EQ(th_peer_num(j, "b", "pesAcquired"), 1);

  /* the reverse: Java's permit released, C holds; a C waiter parks; Java
   * releases the C permit by its id and wakes it */
  th_peer_expect(j, "a", "ok", "pesRelease %s", jid);
  free(jid);
  char cid[RLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(rlock_permits_acquire(s, 0, LEASE, NULL, cid));
  cacq_t w2 = {0};
  CHECK_OK(rlock_permits_acquire_async(s2, RLOCK_WAIT_FOREVER, LEASE, NULL, w2.id, on_acquired, &w2));
  wait_subscribers(chan, 1);
  CHECK(!cacq_done(&w2));
  th_peer_expect(j, "a", "ok", "pesRelease %s", cid);
  CHECK_MSG(th_wait_until(cacq_done, &w2, WAKE_MS), "Java's release of a C permit id did not wake the C waiter");
  CHECK_OK(w2.status);
  CHECK_RC(rlock_permits_release(s, cid), RLOCK_ENOTHELD);
  th_peer_expect(j, "a", "ok", "pesRelease %s", w2.id);
  CHECK_EQ(c_count(s, rlock_permits_available), 1);
  CHECK_EQ(c_count(s, rlock_permits_acquired), 0);
  rlock_permits_free(s), rlock_permits_free(s2);
  rlock_client_free(c), rlock_client_free(c2);
  th_peer_stop(j);
}

TEST(expiry_across) {
  const char *name = "rpes:exp";
  th_peer_t *j = th_peer_start("single", peer_addr, 0, 0);
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_permits_t *s = pes(c, name);
  th_peer_expect(j, "a", "ok", "getPermitSemaphore %s", name);
  th_peer_expect(j, "a", "true", "pesTrySetPermits 1");
  /* a 1 s Java permit: the C waiter gets it at its expiry */
  char *jid = java_acquire(j, "a", "pesTryAcquire 0 1000");
  char cid[RLOCK_PERMIT_ID_LEN + 1];
  CHECK_RC(rlock_permits_try_acquire(s, LEASE, cid), RLOCK_EBUSY);
  CHECK_OK(rlock_permits_acquire(s, 20000, LEASE, NULL, cid));
  th_peer_expect(j, "a", "false", "pesTryRelease %s", jid);
  CHECK_RC(rlock_permits_release(s, jid), RLOCK_ENOTHELD);
  free(jid);
  CHECK_EQ(th_peer_num(j, "a", "pesAcquired"), 1);
  CHECK_OK(rlock_permits_release(s, cid));
  /* a 1 s C permit: Java's tryAcquire gets it at its expiry */
  CHECK_OK(rlock_permits_acquire(s, 0, 1000, NULL, cid));
  th_peer_expect(j, "a", "null", "pesTryAcquire 0 60000");
  jid = java_acquire(j, "a", "pesTryAcquire 20000 60000");
  CHECK_RC(rlock_permits_release(s, cid), RLOCK_ENOTHELD);
  th_peer_expect(j, "a", "false", "pesTryRelease %s", cid);
  CHECK_EQ(c_count(s, rlock_permits_available), 0);
  th_peer_expect(j, "a", "ok", "pesRelease %s", jid);
  free(jid);
  CHECK_EQ(c_count(s, rlock_permits_available), 1);
  rlock_permits_free(s);
  rlock_client_free(c);
  th_peer_stop(j);
}

TEST(c_watchdog_permit) {
  const char *name = "rpes:wd";
  th_peer_t *j = th_peer_start("single", peer_addr, 0, 0);
  rlock_client_t *c = th_client(srv->url, 1500);
  rlock_permits_t *s = pes(c, name);
  th_peer_expect(j, "a", "ok", "getPermitSemaphore %s", name);
  th_peer_expect(j, "a", "true", "pesTrySetPermits 1");
  char cid[RLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(rlock_permits_acquire(s, 0, RLOCK_LEASE_WATCHDOG, NULL, cid));
  /* 5 s > 3 leases: Java waits in vain while the C watchdog renews the permit */
  th_peer_expect(j, "a", "null", "pesTryAcquire 5000 60000");
  char cmd[128];
  snprintf(cmd, sizeof cmd, "pesLeaseTime %s", cid);
  long long left = th_peer_num(j, "a", cmd);
  CHECK_MSG(left > 0 && left <= 1500, "Java reads the renewed C permit's lease as %lld ms", left);
  th_peer_send(j, "a", "pesAcquire 60000");
  wait_subscribers("redisson_sc:{rpes:wd}", 1);
  CHECK_OK(rlock_permits_release(s, cid));
  char *jid = java_id(th_peer_answer(j, "a", WAKE_MS));
  th_peer_expect(j, "a", "ok", "pesRelease %s", jid);
  free(jid);
  rlock_permits_free(s);
  rlock_client_free(c);
  th_peer_stop(j);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 170);
  const char *why = th_peer_unavailable();
  if (why) {
    printf("SKIP test_redisson_permits: %s\n", why);
    return 77;
  }
  signal(SIGPIPE, SIG_IGN);
  srv = th_server_start(NULL);
  snprintf(peer_addr, sizeof peer_addr, "redis://127.0.0.1:%d", srv->port);
  RUN(ids_cross);
  RUN(releases_wake_across);
  RUN(expiry_across);
  RUN(c_watchdog_permit);
  th_server_stop(srv);
  return th_done();
}
