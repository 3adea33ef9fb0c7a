/* test_free_races.c -- rlock_client_free on one thread while another thread
 * is still inside a blocking call of the same client (issue 20, item 2).
 * The invariant: nothing touches the client after its sync call was
 * answered unless free waits for it; free waits for (or refuses) every
 * caller. A seam of the library (rlock__test_call_hook) stops the calling
 * thread at the point of the race and lets free run; then the caller goes
 * on. Before the fix free returned at once and the caller read the freed
 * client (ASan: heap-use-after-free); now free returns only once the caller
 * has left, and the caller's result is its own. Real redis-server. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "harness.h"
#include "internal.h"

static th_server_t *srv;

/* ------------------------------------------------------------ the seam */

static client_t *target;       /* the client whose caller stops */
static pthread_t caller;       /* the thread that stops */
static atomic_int stop_at;     /* RLOCK__AT_... where it stops (0: nowhere) */
static atomic_int stopped;     /* it stopped there once */
static atomic_int freed;       /* rlock_client_free returned */
static pthread_t freer;

static void *free_client(void *arg) {
  rlock_client_free(arg);
  atomic_store(&freed, 1);
  return NULL;
}

static int is_set(void *p) { return atomic_load((atomic_int *)p); }

/* On the caller, at stop_at: start rlock_client_free on another thread and
 * give it time to finish. Once fixed it cannot (it waits for this caller):
 * the bounded wait then ends and the caller goes on. The seam never reads
 * cl (it may be freed). */
static void hook(client_t *cl, int where) {
  if (cl != target || !pthread_equal(pthread_self(), caller) || where != atomic_load(&stop_at)) return;
  atomic_store(&stop_at, 0);
  atomic_store(&stopped, 1);
  CHECK_EQ(pthread_create(&freer, NULL, free_client, cl), 0);
  th_wait_until(is_set, &freed, 1000); /* fixed: free waits for us (no timing claim either way) */
}

static void arm(rlock_client_t *c, int where) {
  target = c;
  caller = pthread_self();
  atomic_store(&freed, 0);
  atomic_store(&stopped, 0);
  atomic_store(&stop_at, where);
}

/* ------------------------------------------------------------ tests */

/* A release through the I/O thread is answered; free runs before the caller
 * tells its fast table the count (rlock__fast_released_slow read the freed
 * client). */
TEST(release_answered_then_freed) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = th_lock(c, "free:release");
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG)); /* the first hold goes through the I/O thread */
  arm(c, RLOCK__AT_ANSWERED);
  int rc = rlock_lock_unlock(l); /* the first release too: its count is not known yet */
  CHECK(atomic_load(&stopped));
  CHECK_RC(rc, 0); /* answered before free began */
  pthread_join(freer, NULL);
  CHECK(atomic_load(&freed));
  rlock_lock_free(l);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "free:release", NULL), 0);
}

/* A fast acquire finds the lock busy and has a wait: it goes on through the
 * I/O thread. free runs right then (the submit read the freed client). */
TEST(fast_fallback_then_freed) {
  rlock_client_t *other = th_client(srv->url, 0);
  rlock_lock_t *lo = th_lock(other, "free:fallback");
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = th_lock(c, "free:fallback");
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  CHECK_OK(rlock_lock_unlock(l)); /* this thread knows its count (0): its next acquire is fast */
  CHECK_OK(rlock_lock_trylock(lo, 0, 20000));
  rlock_stats_t s0;
  rlock_client_stats(c, &s0);
  arm(c, RLOCK__AT_FAST_FELL_BACK);
  int rc = rlock_lock_trylock(l, 5000, RLOCK_LEASE_WATCHDOG); /* busy on the fast path: falls back */
  CHECK(atomic_load(&stopped));
  CHECK_RC(rc, RLOCK_ECLOSED); /* nothing of it reached the I/O thread: refused */
  pthread_join(freer, NULL);
  CHECK(atomic_load(&freed));
  rlock_lock_free(l);
  CHECK_OK(rlock_lock_unlock(lo)); /* the only hold on it is the other client's */
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "free:fallback", NULL), 0);
  rlock_lock_free(lo);
  rlock_client_free(other);
}

/* An optional argument runs only the tests whose name contains it. */
#define RUN_IF(name) \
  if (argc < 2 || strstr(#name, argv[1])) RUN(name)

int main(int argc, char **argv) {
  th_init(argc, argv, 110);
  rlock__test_call_hook = hook;
  srv = th_server_start(NULL);
  RUN_IF(release_answered_then_freed);
  RUN_IF(fast_fallback_then_freed);
  th_server_stop(srv);
  return th_done();
}
