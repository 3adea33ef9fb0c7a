/* test_callbacks.c -- rlock_client_free called from inside a callback (an
 * async completion and the lock-lost notification, both on the client's I/O
 * thread) is a no-op, as rlock.h documents: it returns at once, does not
 * crash or hang, and the client keeps working until it is freed from a user
 * thread. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "harness.h"

static th_server_t *srv;

typedef struct cb_state {
  rlock_client_t *client;
  atomic_int entered, returned;
  _Atomic int64_t took_ms;
} cb_state_t;

static void free_from_here(cb_state_t *s) {
  atomic_store(&s->entered, 1);
  int64_t t0 = th_now_ms();
  rlock_client_free(s->client); /* must do nothing on the I/O thread */
  atomic_store(&s->took_ms, th_now_ms() - t0);
  atomic_store(&s->returned, 1);
}

static void on_done(rlock_lock_t *lock, int status, int64_t value, void *arg) { free_from_here(arg); }
static void on_lost(const char *name, size_t len, uint64_t owner, rlock_lost_reason_t reason, void *arg) {
  free_from_here(arg);
}

static int returned(void *arg) { return atomic_load(&((cb_state_t *)arg)->returned); }

/* The client is alive and usable: a lock round trip and a query. */
static void check_works(rlock_client_t *c, const char *name) {
  rlock_lock_t *l = th_lock(c, name);
  CHECK_OK(rlock_lock_acquire(l, 5, 0, 10000, NULL));
  int v = 0;
  CHECK_OK(rlock_lock_is_held(l, 5, &v));
  CHECK_EQ(v, 1);
  CHECK_OK(rlock_lock_release(l, 5));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", name, NULL), 0);
  rlock_lock_free(l);
}

static void check_returned(cb_state_t *s, const char *where) {
  CHECK_MSG(th_wait_until(returned, s, 5000), "rlock_client_free inside %s did not return (entered %d)", where,
            atomic_load(&s->entered));
  /* a real free would join the I/O thread: from that thread it can only hang */
  CHECK_MSG(atomic_load(&s->took_ms) < 1000, "rlock_client_free inside %s took %lld ms", where,
            (long long)atomic_load(&s->took_ms));
}

TEST(free_in_completion_callback) {
  cb_state_t s = {0};
  s.client = th_client(srv->url, 0);
  rlock_lock_t *l = th_lock(s.client, "cb:completion");
  CHECK_OK(rlock_lock_is_locked_async(l, on_done, &s));
  check_returned(&s, "an async completion");
  check_works(s.client, "cb:completion:after");
  /* a second async call completes normally: the loop still runs */
  cb_state_t s2 = {0};
  s2.client = s.client;
  CHECK_OK(rlock_lock_acquire_async(l, 9, 0, 10000, NULL, on_done, &s2));
  check_returned(&s2, "an acquire completion");
  CHECK_OK(rlock_lock_release(l, 9));
  rlock_lock_free(l);
  rlock_client_free(s.client); /* the real free, from this thread */
}

TEST(free_in_lost_callback) {
  cb_state_t s = {0};
  s.client = th_client(srv->url, 300); /* renewal every 100 ms finds the hold gone */
  rlock_client_on_lost(s.client, on_lost, &s);
  rlock_lock_t *l = th_lock(s.client, "cb:lost");
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  CHECK_EQ(th_cmd_int(srv, "DEL", "cb:lost", NULL), 1);
  check_returned(&s, "the lock-lost callback");
  rlock_stats_t st;
  rlock_client_stats(s.client, &st);
  CHECK_EQ(st.locks_lost, 1);
  check_works(s.client, "cb:lost:after");
  rlock_lock_free(l);
  rlock_client_free(s.client);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 60);
  srv = th_server_start(NULL);
  RUN(free_in_completion_callback);
  RUN(free_in_lost_callback);
  th_server_stop(srv);
  return th_done();
}
