/* test_redisson_family_contention.c -- rlock's lock family (issue 24) and the real
 * Redisson 4.7.0 (a JVM driven through harness_redisson.h) share each object
 * on one redis-server:
 *   contention_<kind>  fair, non-reentrant, non-reentrant fair, spin, fenced
 *                      and the read-write lock's write lock: Java holds (60 s
 *                      lease), a C waiter is woken by Java's unlock long before
 *                      the lease; then C holds and Java's lock() is woken by
 *                      rlock's unlock
 *   fair_fifo          a fair lock's waiters from both languages, interleaved
 *                      (C, Java, C, Java): grants follow the queue order
 *   rw_share           readers from both languages share; a writer from one
 *                      side excludes readers of the other, and its unlock wakes them
 *   fenced_tokens      tokens taken in turn by Java and C rise strictly
 *   nonreentrant       a second acquire by the holder is refused on both sides
 * Nothing sleeps to synchronise: waits end on the peer's answers, the waiters'
 * results, PUBSUB NUMSUB and the fair queue's length. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "harness_redisson.h"

static th_server_t *srv;
static char peer_addr[64];

#define LONG_LEASE 60000 /* ms: a wake-up long before it came from a message */
#define WAKE_MS 5000     /* bound on a wake-up (a loaded 2-core machine) */

typedef enum { K_FAIR, K_NONREENTRANT, K_NONREENTRANT_FAIR, K_SPIN, K_FENCED, K_WRITE, K_READ } kind_t;

static const char *java_getter[] = {"getFairLock", "getNonReentrantLock", "getNonReentrantFairLock",
                                    "getSpinLock", "getFencedLock",       "getWriteLock",
                                    "getReadLock"};

/* A C handle of kind on name (the read-write pair's other half is freed). */
static rlock_lock_t *c_lock(rlock_client_t *c, kind_t k, const char *name) {
  rlock_lock_t *l = NULL, *other = NULL;
  size_t n = strlen(name);
  switch (k) {
  case K_FAIR: CHECK_OK(rlock_lock_new_fair(c, name, n, &l)); break;
  case K_NONREENTRANT: CHECK_OK(rlock_lock_new_nonreentrant(c, name, n, &l)); break;
  case K_NONREENTRANT_FAIR: CHECK_OK(rlock_lock_new_fair_nonreentrant(c, name, n, &l)); break;
  case K_SPIN: CHECK_OK(rlock_lock_new_spin(c, name, n, NULL, &l)); break;
  case K_FENCED: CHECK_OK(rlock_lock_new_fenced(c, name, n, &l)); break;
  case K_WRITE: CHECK_OK(rlock_rwlock_new(c, name, n, &other, &l)); break;
  case K_READ: CHECK_OK(rlock_rwlock_new(c, name, n, &l, &other)); break;
  }
  if (other) rlock_lock_free(other);
  return l;
}

typedef struct park_wait {
  kind_t k;
  const char *name;
  long long n;
} park_wait_t;

/* How many waiters of kind on name are parked: the fair queue's length,
 * else the subscribers of the unlock channel. */
static long long parked(kind_t k, const char *name) {
  char key[256];
  if (k == K_FAIR || k == K_NONREENTRANT_FAIR) {
    snprintf(key, sizeof key, "redisson_lock_queue:{%s}", name);
    return th_cmd_int(srv, "LLEN", key, NULL);
  }
  if (k == K_WRITE || k == K_READ) snprintf(key, sizeof key, "redisson_rwlock:{%s}", name);
  else snprintf(key, sizeof key, "redisson_lock__channel:{%s}", name);
  return th_numsub(srv, key);
}
static int parked_reaches(void *arg) {
  park_wait_t *w = arg;
  return parked(w->k, w->name) >= w->n;
}
/* Waits until n waiters are parked (a spin lock's waiters never park). */
static void wait_parked(kind_t k, const char *name, long long n) {
  if (k == K_SPIN) return;
  park_wait_t w = {k, name, n};
  CHECK_MSG(th_wait_until(parked_reaches, &w, 20000), "no %lld waiters parked on %s", n, name);
}

static th_peer_t *peer(void) { return th_peer_start("single", peer_addr, 0, 0); }

static void contention(kind_t k, const char *name) {
  th_peer_t *j = peer();
  rlock_client_t *c = th_client(srv->url, 0);
  /* Java holds, C waits */
  th_peer_expect(j, "a", "ok", "%s %s", java_getter[k], name);
  th_peer_expect(j, "a", "ok", "lock %d", LONG_LEASE);
  th_cwaiter_t w = {.l = c_lock(c, k, name), .wait_ms = RLOCK_WAIT_FOREVER, .lease_ms = LONG_LEASE};
  CHECK_RC(rlock_lock_trylock(w.l, 0, 1000), RLOCK_EBUSY);
  th_cwaiter_start(&w);
  wait_parked(k, name, 1);
  CHECK(!th_cwaiter_done(&w));
  int64_t t0 = th_now_ms();
  th_peer_expect(j, "a", "ok", "unlock");
  CHECK_MSG(th_wait_until(th_cwaiter_done, &w, WAKE_MS), "the C waiter was not woken by Java's unlock");
  pthread_join(w.t, NULL);
  CHECK_OK(w.rc);
  fprintf(stderr, "# %s: Java unlock -> C holds: %lld ms\n", java_getter[k], (long long)(w.done_at - t0));
  th_peer_expect(j, "a", "true", "isLocked");
  th_peer_expect(j, "a", "false", "isHeld");
  th_peer_expect(j, "a", "false", "tryLock 0 1000");
  CHECK_OK(rlock_lock_release(w.l, w.owner));
  th_peer_expect(j, "a", "false", "isLocked");
  /* C holds, Java waits */
  CHECK_OK(rlock_lock_lock(w.l, LONG_LEASE));
  th_peer_send(j, "a", "lock");
  wait_parked(k, name, 1);
  if (k != K_SPIN) th_peer_wait_parked(j, "a"); /* a write unlock wakes only Java threads asleep */
  char *early = NULL;
  CHECK_MSG(!th_peer_poll(j, "a", 0, &early), "Java got the lock rlock holds: %s", early);
  t0 = th_now_ms();
  CHECK_OK(rlock_lock_unlock(w.l));
  char *got = th_peer_answer(j, "a", WAKE_MS);
  CHECK_STREQ(got, "ok");
  free(got);
  fprintf(stderr, "# %s: C unlock -> Java holds: %lld ms\n", java_getter[k], (long long)(th_now_ms() - t0));
  CHECK_RC(rlock_lock_trylock(w.l, 0, 1000), RLOCK_EBUSY);
  th_peer_expect(j, "a", "ok", "unlock");
  CHECK_OK(rlock_lock_trylock(w.l, 0, 1000));
  CHECK_OK(rlock_lock_unlock(w.l));
  rlock_lock_free(w.l);
  rlock_client_free(c);
  th_peer_stop(j);
}

TEST(contention_fair) { contention(K_FAIR, "rsf:fair"); }
TEST(contention_nonreentrant) { contention(K_NONREENTRANT, "rsf:nonre"); }
TEST(contention_nonreentrant_fair) { contention(K_NONREENTRANT_FAIR, "rsf:nonre-fair"); }
TEST(contention_spin) { contention(K_SPIN, "rsf:spin"); }
TEST(contention_fenced) { contention(K_FENCED, "rsf:fenced"); }
TEST(contention_write) { contention(K_WRITE, "rsf:rw"); }

TEST(fair_fifo) {
  const char *name = "rsf:fifo";
  th_peer_t *j = peer();
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = c_lock(c, K_FAIR, name);
  CHECK_OK(rlock_lock_lock(l, LONG_LEASE)); /* the first holder: C */
  /* queue: C w1, Java b, C w2, Java d */
  th_cwaiter_t w1 = {.l = l, .wait_ms = RLOCK_WAIT_FOREVER, .lease_ms = LONG_LEASE};
  th_cwaiter_t w2 = {.l = l, .wait_ms = RLOCK_WAIT_FOREVER, .lease_ms = LONG_LEASE};
  th_cwaiter_start(&w1);
  wait_parked(K_FAIR, name, 1);
  th_peer_expect(j, "b", "ok", "getFairLock %s", name);
  th_peer_send(j, "b", "lock %d", LONG_LEASE);
  wait_parked(K_FAIR, name, 2);
  th_cwaiter_start(&w2);
  wait_parked(K_FAIR, name, 3);
  th_peer_expect(j, "d", "ok", "getFairLock %s", name);
  th_peer_send(j, "d", "lock %d", LONG_LEASE);
  wait_parked(K_FAIR, name, 4);
  char *a = NULL;
  /* C w1 first */
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_MSG(th_wait_until(th_cwaiter_done, &w1, WAKE_MS), "the queue head (C) was not granted");
  pthread_join(w1.t, NULL);
  CHECK_OK(w1.rc);
  CHECK(!th_cwaiter_done(&w2));
  CHECK(!th_peer_poll(j, "b", 0, &a) && !th_peer_poll(j, "d", 0, &a));
  /* Java b next */
  CHECK_OK(rlock_lock_release(l, w1.owner));
  a = th_peer_answer(j, "b", WAKE_MS);
  CHECK_STREQ(a, "ok");
  free(a);
  CHECK(!th_cwaiter_done(&w2));
  CHECK(!th_peer_poll(j, "d", 0, &a));
  /* C w2 next */
  th_peer_expect(j, "b", "ok", "unlock");
  CHECK_MSG(th_wait_until(th_cwaiter_done, &w2, WAKE_MS), "the C waiter after Java's was not granted");
  pthread_join(w2.t, NULL);
  CHECK_OK(w2.rc);
  CHECK(!th_peer_poll(j, "d", 0, &a));
  /* Java d last */
  CHECK_OK(rlock_lock_release(l, w2.owner));
  a = th_peer_answer(j, "d", WAKE_MS);
  CHECK_STREQ(a, "ok");
  free(a);
  th_peer_expect(j, "d", "ok", "unlock");
  th_peer_expect(j, "d", "false", "isLocked");
  rlock_lock_free(l);
  rlock_client_free(c);
  th_peer_stop(j);
}

TEST(rw_share) {
  const char *name = "rsf:rw-share";
  th_peer_t *j = peer();
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *r = NULL, *w = NULL;
  CHECK_OK(rlock_rwlock_new(c, name, strlen(name), &r, &w));
  /* readers from both sides share */
  th_peer_expect(j, "r", "ok", "getReadLock %s", name);
  th_peer_expect(j, "r", "true", "tryLock 0 %d", LONG_LEASE);
  CHECK_OK(rlock_lock_trylock(r, 0, LONG_LEASE));
  /* a Java writer waits for the C reader too */
  th_peer_expect(j, "w", "ok", "getWriteLock %s", name);
  th_peer_expect(j, "w", "false", "tryLock 0 1000");
  CHECK_RC(rlock_lock_trylock(w, 0, 1000), RLOCK_EUPGRADE);
  th_peer_expect(j, "r", "ok", "unlock");
  th_peer_expect(j, "w", "false", "tryLock 0 1000"); /* the C reader still holds */
  th_peer_send(j, "w", "lock %d", LONG_LEASE);
  wait_parked(K_WRITE, name, 1);
  char *a = NULL;
  CHECK(!th_peer_poll(j, "w", 0, &a));
  CHECK_OK(rlock_lock_unlock(r));
  a = th_peer_answer(j, "w", WAKE_MS);
  CHECK_STREQ(a, "ok");
  free(a);
  /* the Java writer excludes a C reader; its unlock wakes it */
  th_cwaiter_t cr = {.l = r, .wait_ms = RLOCK_WAIT_FOREVER, .lease_ms = LONG_LEASE};
  th_cwaiter_start(&cr);
  wait_parked(K_READ, name, 1);
  CHECK(!th_cwaiter_done(&cr));
  th_peer_expect(j, "w", "ok", "unlock");
  CHECK_MSG(th_wait_until(th_cwaiter_done, &cr, WAKE_MS), "the C reader was not woken by Java's write unlock");
  pthread_join(cr.t, NULL);
  CHECK_OK(cr.rc);
  /* a C writer excludes a Java reader; its unlock wakes it */
  CHECK_OK(rlock_lock_release(r, cr.owner));
  CHECK_OK(rlock_lock_lock(w, LONG_LEASE));
  th_peer_expect(j, "r", "false", "tryLock 0 1000");
  th_peer_send(j, "r", "lock %d", LONG_LEASE);
  wait_parked(K_READ, name, 1);
  th_peer_wait_parked(j, "r"); /* a write unlock wakes only Java threads asleep */
  CHECK(!th_peer_poll(j, "r", 0, &a));
  CHECK_OK(rlock_lock_unlock(w));
  a = th_peer_answer(j, "r", WAKE_MS);
  CHECK_STREQ(a, "ok");
  free(a);
  CHECK_OK(rlock_lock_trylock(r, 0, 1000)); /* readers share again */
  CHECK_OK(rlock_lock_unlock(r));
  th_peer_expect(j, "r", "ok", "unlock");
  th_peer_expect(j, "r", "false", "isLocked");
  rlock_lock_free(r);
  rlock_lock_free(w);
  rlock_client_free(c);
  th_peer_stop(j);
}

TEST(fenced_tokens) {
  const char *name = "rsf:tokens";
  th_peer_t *j = peer();
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = c_lock(c, K_FENCED, name);
  th_peer_expect(j, "a", "ok", "getFencedLock %s", name);
  long long last = 0;
  for (int i = 0; i < 4; i++) {
    long long jt = th_peer_num(j, "a", "fencedLockAndGetToken 60000");
    CHECK_MSG(jt > last, "Java's token %lld after %lld", jt, last);
    CHECK_EQ(th_peer_num(j, "a", "fencedToken"), jt);
    int64_t ct = 0;
    CHECK_OK(rlock_fenced_token(l, &ct));
    CHECK_EQ(ct, jt);
    th_peer_expect(j, "a", "ok", "unlock");
    CHECK_OK(rlock_fenced_acquire(l, RLOCK_OWNER_SELF, 0, LONG_LEASE, NULL, &ct));
    CHECK_MSG(ct > jt, "C's token %lld after Java's %lld", (long long)ct, jt);
    CHECK_EQ(th_peer_num(j, "a", "fencedToken"), ct);
    CHECK_OK(rlock_lock_unlock(l));
    last = ct;
  }
  rlock_lock_free(l);
  rlock_client_free(c);
  th_peer_stop(j);
}

static void nonreentrant(kind_t k, const char *name) {
  th_peer_t *j = peer();
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = c_lock(c, k, name);
  th_peer_expect(j, "a", "ok", "%s %s", java_getter[k], name);
  th_peer_expect(j, "a", "true", "tryLock 0 %d", LONG_LEASE);
  /* Java's own second acquire: Redisson throws IllegalMonitorStateException */
  th_peer_send(j, "a", "tryLock 0 %d", LONG_LEASE);
  char *e = th_peer_answer(j, "a", 10000);
  CHECK_MSG(strstr(e, "IllegalMonitorStateException") && strstr(e, "non-reentrant"), "Java's re-entry: %s", e);
  free(e);
  th_peer_expect(j, "a", "1", "getHoldCount");
  CHECK_RC(rlock_lock_trylock(l, 0, 1000), RLOCK_EBUSY);
  th_peer_expect(j, "a", "ok", "unlock");
  th_peer_expect(j, "a", "false", "isLocked");
  CHECK_OK(rlock_lock_lock(l, LONG_LEASE));
  CHECK_RC(rlock_lock_lock(l, LONG_LEASE), RLOCK_ENOTREENTRANT);
  th_peer_expect(j, "a", "false", "tryLock 0 1000");
  CHECK_OK(rlock_lock_unlock(l));
  th_peer_expect(j, "a", "false", "isLocked");
  rlock_lock_free(l);
  rlock_client_free(c);
  th_peer_stop(j);
}

TEST(nonreentrant_refused) {
  nonreentrant(K_NONREENTRANT, "rsf:nr");
  nonreentrant(K_NONREENTRANT_FAIR, "rsf:nr-fair");
}

int main(int argc, char **argv) {
  th_init(argc, argv, 280);
  const char *why = th_peer_unavailable();
  if (why) {
    printf("SKIP test_redisson_family_contention: %s\n", why);
    return 77;
  }
  signal(SIGPIPE, SIG_IGN); /* a peer that died is a failed read, not a killed test */
  srv = th_server_start(NULL);
  snprintf(peer_addr, sizeof peer_addr, "redis://127.0.0.1:%d", srv->port);
  RUN(contention_fair);
  RUN(contention_nonreentrant);
  RUN(contention_nonreentrant_fair);
  RUN(contention_spin);
  RUN(contention_fenced);
  RUN(contention_write);
  RUN(fair_fifo);
  RUN(rw_share);
  RUN(fenced_tokens);
  RUN(nonreentrant_refused);
  th_server_stop(srv);
  return th_done();
}
