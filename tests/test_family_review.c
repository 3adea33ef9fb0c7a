/* test_family_review.c -- break-it cases for the semaphore, the count-down
 * latch and the permit-expirable semaphore (lib/semaphore.c, kinds/pes.c)
 * against a real redis-server:
 *   sem_and_pes_share_channel  a semaphore and a permit-expirable semaphore
 *                    of one NAME share the key and redisson_sc:{NAME} (as
 *                    Redisson's do): a semaphore waiter for 2 woken by a
 *                    release of 1 passes the wake-up to a permit waiter
 *                    parked behind it, which takes the permit (before: an
 *                    assertion failure, the process aborted) */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static th_server_t *srv;

typedef struct done {
  atomic_int n;
  atomic_int status;
} done_t;

static void on_sem(rlock_semaphore_t *s, int status, int64_t value, void *arg) {
  (void)s, (void)value;
  done_t *d = arg;
  atomic_store(&d->status, status);
  atomic_fetch_add(&d->n, 1);
}

static void on_pes(rlock_permits_t *s, int status, int64_t value, void *arg) {
  (void)s, (void)value;
  done_t *d = arg;
  atomic_store(&d->status, status);
  atomic_fetch_add(&d->n, 1);
}

static int done_one(void *arg) { return atomic_load(&((done_t *)arg)->n) >= 1; }

typedef struct stat_want {
  rlock_client_t *c;
  uint64_t n;
} stat_want_t;
static int attempts_reach(void *arg) {
  stat_want_t *w = arg;
  rlock_stats_t st;
  rlock_client_stats(w->c, &st);
  return st.acquire_attempts >= w->n;
}

static const char *numsub_chan;
static int numsub_one(void *arg) {
  (void)arg;
  return th_numsub(srv, numsub_chan) == 1;
}

TEST(sem_and_pes_share_channel) {
  const char *name = "rev:shared";
  rlock_client_t *a = th_client(srv->url, 0), *b = th_client(srv->url, 0);
  rlock_semaphore_t *sa = NULL, *sb = NULL;
  rlock_permits_t *pa = NULL;
  CHECK_OK(rlock_semaphore_new(a, name, strlen(name), &sa));
  CHECK_OK(rlock_semaphore_new(b, name, strlen(name), &sb));
  CHECK_OK(rlock_permits_new(a, name, strlen(name), &pa));
  CHECK_OK(rlock_semaphore_try_set_permits(sb, 0, NULL));
  done_t big = {0}, one = {0};
  rlock_stats_t st;
  rlock_client_stats(a, &st);
  CHECK_OK(rlock_semaphore_acquire_async(sa, 2, 30000, NULL, on_sem, &big));
  numsub_chan = "redisson_sc:{rev:shared}";
  CHECK_MSG(th_wait_until(numsub_one, NULL, 5000), "the semaphore waiter did not subscribe");
  stat_want_t parked = {a, st.acquire_attempts + 2}; /* its first try, its try once subscribed */
  CHECK_MSG(th_wait_until(attempts_reach, &parked, 5000), "the semaphore waiter did not try twice");
  char id[RLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(rlock_permits_acquire_async(pa, 30000, RLOCK_LEASE_WATCHDOG, NULL, id, on_pes, &one));
  parked.n += 2; /* on the channel already: it tries twice too, then parks */
  CHECK_MSG(th_wait_until(attempts_reach, &parked, 5000), "the permit waiter did not try twice");
  CHECK_OK(rlock_semaphore_release(sb, 1, NULL)); /* message 1: wakes the first, the waiter for 2 */
  CHECK_MSG(th_wait_until(done_one, &one, 5000), "the permit waiter was not woken (1 available)");
  CHECK_OK(atomic_load(&one.status));
  CHECK_EQ(atomic_load(&big.n), 0);
  CHECK_OK(rlock_permits_release(pa, id));
  CHECK_OK(rlock_semaphore_release(sb, 1, NULL));
  CHECK_MSG(th_wait_until(done_one, &big, 5000), "the waiter for 2 was not woken");
  CHECK_OK(atomic_load(&big.status));
  rlock_permits_free(pa);
  rlock_semaphore_free(sa);
  rlock_semaphore_free(sb);
  rlock_client_free(a);
  rlock_client_free(b);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 240);
  srv = th_server_start(NULL);
  RUN(sem_and_pes_share_channel);
  th_server_stop(srv);
  return th_done();
}
