/* test_redisson_family.c -- rlock's lock family and the real Redisson 4.7.0
 * (tests/interop/redisson) sharing one object on one server (issues 21, 24):
 *   fair_fifo_across_languages  Java, C, Java queue behind a C holder: each
 *                       unlock grants the next in queue order, across
 *                       languages, woken by the message (leases 60 s).
 *   rw_across_languages  a Java reader and a C reader share; a C writer waits
 *                       for both and is woken by their unlocks; a Java reader
 *                       waits for the C writer and is woken by its unlock.
 *   fenced_tokens_grow  tokens from Java and C alternate and always grow; a
 *                       held fenced lock refuses the other side.
 *   nonreentrant_both_sides  held by one side, refused to the other; a
 *                       second acquire by the C holder is refused at once.
 *   spin_both_ways      a spin lock's waiter on either side gets it after the
 *                       other side's unlock (no message: its backoff). */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "harness_redisson.h"

static th_server_t *srv;
static char peer_addr[64];

#define LEASE 60000  /* ms: a grant long before it came from a message or an unlock */
#define WAKE_MS 5000 /* bound on a message wake-up (a loaded 2-core machine) */

typedef struct count_wait {
  const char *cmd, *key;
  long long n;
} count_wait_t;
static int count_reaches(void *arg) {
  count_wait_t *w = arg;
  return th_cmd_int(srv, w->cmd, w->key, NULL) >= w->n;
}
static void wait_queue(const char *name, long long n) {
  char q[200];
  snprintf(q, sizeof q, "redisson_lock_queue:{%s}", name);
  count_wait_t w = {"LLEN", q, n};
  CHECK_MSG(th_wait_until(count_reaches, &w, 20000), "the queue of %s never reached %lld", name, n);
}
typedef struct sub_wait {
  const char *ch;
  long long n;
} sub_wait_t;
static int subs_reach(void *arg) {
  sub_wait_t *w = arg;
  return th_numsub(srv, w->ch) >= w->n;
}

TEST(fair_fifo_across_languages) {
  const char *name = "rf:fair";
  th_peer_t *j = th_peer_start("single", peer_addr, 0, 0);
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *h, *wl;
  CHECK_OK(rlock_lock_new_fair(c, name, strlen(name), &h));
  CHECK_OK(rlock_lock_new_fair(c, name, strlen(name), &wl));
  CHECK_OK(rlock_lock_lock(h, LEASE));
  th_peer_expect(j, "a", "ok", "getFairLock %s", name);
  th_peer_expect(j, "b", "ok", "getFairLock %s", name);
  th_peer_send(j, "a", "lock %d", LEASE);
  wait_queue(name, 1);
  th_cwaiter_t w = {.l = wl, .wait_ms = RLOCK_WAIT_FOREVER, .lease_ms = LEASE};
  th_cwaiter_start(&w);
  wait_queue(name, 2);
  th_peer_send(j, "b", "lock %d", LEASE);
  wait_queue(name, 3);
  char *early = NULL;
  /* C unlocks: Java's a (the head) gets it, nobody else */
  CHECK_OK(rlock_lock_unlock(h));
  char *got = th_peer_answer(j, "a", WAKE_MS);
  CHECK_STREQ(got, "ok");
  free(got);
  CHECK(!th_cwaiter_done(&w));
  CHECK_MSG(!th_peer_poll(j, "b", 0, &early), "b got the lock out of turn: %s", early);
  /* a unlocks: the C waiter gets it */
  th_peer_expect(j, "a", "ok", "unlock");
  CHECK_MSG(th_wait_until(th_cwaiter_done, &w, WAKE_MS), "Java's unlock did not grant the next (C) waiter");
  pthread_join(w.t, NULL);
  CHECK_OK(w.rc);
  CHECK_MSG(!th_peer_poll(j, "b", 0, &early), "b got the lock while C holds it: %s", early);
  /* C's waiter releases: b gets it */
  CHECK_OK(rlock_lock_release(wl, w.owner));
  got = th_peer_answer(j, "b", WAKE_MS);
  CHECK_STREQ(got, "ok");
  free(got);
  th_peer_expect(j, "b", "ok", "unlock");
  CHECK_EQ(th_cmd_int(srv, "EXISTS", name, NULL), 0);
  CHECK_EQ(th_cmd_int(srv, "LLEN", "redisson_lock_queue:{rf:fair}", NULL), 0);
  rlock_lock_free(h), rlock_lock_free(wl);
  rlock_client_free(c);
  th_peer_stop(j);
}

TEST(rw_across_languages) {
  const char *name = "rf:rw";
  th_peer_t *j = th_peer_start("single", peer_addr, 0, 0);
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *rd, *wr;
  CHECK_OK(rlock_rwlock_new(c, name, strlen(name), &rd, &wr));
  th_peer_expect(j, "a", "ok", "getReadLock %s", name);
  th_peer_expect(j, "a", "ok", "lock %d", LEASE);
  CHECK_OK(rlock_lock_trylock(rd, 0, LEASE)); /* readers share, across languages */
  th_cwaiter_t w = {.l = wr, .wait_ms = RLOCK_WAIT_FOREVER, .lease_ms = LEASE};
  th_cwaiter_start(&w);
  sub_wait_t sw = {"redisson_rwlock:{rf:rw}", 1};
  CHECK_MSG(th_wait_until(subs_reach, &sw, 20000), "the C writer never waited");
  th_peer_expect(j, "a", "ok", "unlock");
  CHECK(!th_cwaiter_done(&w)); /* the C reader still holds */
  CHECK_OK(rlock_lock_unlock(rd));
  CHECK_MSG(th_wait_until(th_cwaiter_done, &w, WAKE_MS), "the readers' unlocks did not wake the C writer");
  pthread_join(w.t, NULL);
  CHECK_OK(w.rc);
  /* a Java reader waits for the C writer, woken by its unlock */
  th_peer_expect(j, "b", "ok", "getReadLock %s", name);
  th_peer_send(j, "b", "lock %d", LEASE);
  sw.n = 1;
  CHECK_MSG(th_wait_until(subs_reach, &sw, 20000), "the Java reader never waited");
  char *early = NULL;
  CHECK_MSG(!th_peer_poll(j, "b", 0, &early), "a Java reader got in beside the C writer: %s", early);
  th_peer_wait_parked(j, "b"); /* a write unlock wakes only Java threads asleep */
  CHECK_OK(rlock_lock_release(wr, w.owner));
  char *got = th_peer_answer(j, "b", WAKE_MS);
  CHECK_STREQ(got, "ok");
  free(got);
  th_peer_expect(j, "b", "ok", "unlock");
  CHECK_EQ(th_cmd_int(srv, "EXISTS", name, NULL), 0);
  rlock_lock_free(rd), rlock_lock_free(wr);
  rlock_client_free(c);
  th_peer_stop(j);
}

static long long java_num(th_peer_t *j, const char *cmd) { return th_peer_num(j, "a", cmd); }

TEST(fenced_tokens_grow) {
  const char *name = "rf:fenced";
  th_peer_t *j = th_peer_start("single", peer_addr, 0, 0);
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l;
  CHECK_OK(rlock_lock_new_fenced(c, name, strlen(name), &l));
  th_peer_expect(j, "a", "ok", "getFencedLock %s", name);
  long long last = 0;
  for (int i = 0; i < 3; i++) {
    long long t = java_num(j, "fencedLockAndGetToken");
    CHECK_MSG(t > last, "Java's token %lld after %lld", t, last);
    last = t;
    int64_t ct = -1;
    CHECK_RC(rlock_fenced_acquire(l, RLOCK_OWNER_SELF, 0, LEASE, NULL, &ct), RLOCK_EBUSY); /* Java holds */
    th_peer_expect(j, "a", "ok", "unlock");
    CHECK_OK(rlock_fenced_acquire(l, RLOCK_OWNER_SELF, 0, LEASE, NULL, &ct));
    CHECK_MSG(ct > last, "C's token %lld after %lld", (long long)ct, last);
    last = ct;
    CHECK_EQ(java_num(j, "fencedToken"), last);                   /* both read one counter */
    th_peer_expect(j, "a", "null", "fencedTryLockAndGetToken 0"); /* C holds */
    CHECK_OK(rlock_lock_unlock(l));
  }
  rlock_lock_free(l);
  rlock_client_free(c);
  th_peer_stop(j);
}

TEST(nonreentrant_both_sides) {
  const char *name = "rf:nonre";
  th_peer_t *j = th_peer_start("single", peer_addr, 0, 0);
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l;
  CHECK_OK(rlock_lock_new_nonreentrant(c, name, strlen(name), &l));
  th_peer_expect(j, "a", "ok", "getNonReentrantLock %s", name);
  th_peer_expect(j, "a", "true", "tryLock 0 %d", LEASE);
  CHECK_RC(rlock_lock_trylock(l, 0, LEASE), RLOCK_EBUSY);
  th_peer_expect(j, "a", "ok", "unlock");
  CHECK_OK(rlock_lock_trylock(l, 0, LEASE));
  CHECK_RC(rlock_lock_trylock(l, 0, LEASE), RLOCK_ENOTREENTRANT);
  th_peer_expect(j, "a", "false", "tryLock 0 %d", LEASE);
  CHECK_EQ(th_cmd_int(srv, "HLEN", name, NULL), 1); /* one holder, count 1 */
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", name, NULL), 0);
  rlock_lock_free(l);
  rlock_client_free(c);
  th_peer_stop(j);
}

TEST(spin_both_ways) {
  const char *name = "rf:spin";
  th_peer_t *j = th_peer_start("single", peer_addr, 0, 0);
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l, *wl;
  CHECK_OK(rlock_lock_new_spin(c, name, strlen(name), NULL, &l));
  CHECK_OK(rlock_lock_new_spin(c, name, strlen(name), NULL, &wl));
  CHECK_OK(rlock_lock_lock(l, LEASE));
  th_peer_expect(j, "a", "ok", "getSpinLock %s", name);
  th_peer_send(j, "a", "tryLock 20000 %d", LEASE);
  char *early = NULL;
  CHECK_MSG(!th_peer_poll(j, "a", 200, &early), "Java got a held spin lock: %s", early);
  CHECK_OK(rlock_lock_unlock(l));
  char *got = th_peer_answer(j, "a", WAKE_MS);
  CHECK_STREQ(got, "true");
  free(got);
  th_cwaiter_t w = {.l = wl, .wait_ms = 20000, .lease_ms = LEASE};
  th_cwaiter_start(&w);
  th_peer_expect(j, "a", "ok", "unlock");
  CHECK_MSG(th_wait_until(th_cwaiter_done, &w, WAKE_MS), "the C spin waiter did not get it after Java's unlock");
  pthread_join(w.t, NULL);
  CHECK_OK(w.rc);
  CHECK_OK(rlock_lock_release(wl, w.owner));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", name, NULL), 0);
  rlock_lock_free(l), rlock_lock_free(wl);
  rlock_client_free(c);
  th_peer_stop(j);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 280);
  const char *why = th_peer_unavailable();
  if (why) {
    printf("SKIP test_redisson_family: %s\n", why);
    return 77;
  }
  signal(SIGPIPE, SIG_IGN);
  srv = th_server_start(NULL);
  snprintf(peer_addr, sizeof peer_addr, "redis://127.0.0.1:%d", srv->port);
  RUN(fair_fifo_across_languages);
  RUN(rw_across_languages);
  RUN(fenced_tokens_grow);
  RUN(nonreentrant_both_sides);
  RUN(spin_both_ways);
  th_server_stop(srv);
  return th_done();
}
