/* test_park_deadline.c -- a bounded wait never sleeps past its deadline
 * (issue 7, item 6a): a trylock whose I/O thread is held up between
 * "the deadline is not over yet" and "park until min(PTTL, time left)" must
 * not take "time left < 0" for "no bound" and sleep the holder's whole PTTL.
 *
 * The hold-up is made deterministic with a fast clock: this executable
 * defines rlock_now_ms(), which the library's own calls resolve to (ELF
 * interposition of an exported function), and every call advances the clock
 * by a step. A sweep of steps makes the clock cross the deadline between
 * any two consecutive reads, so also between the two that matter. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "harness.h"

static _Atomic int64_t offset_us; /* added to the real clock */
static _Atomic int64_t step_us;   /* added to offset_us at each call */

int64_t rlock_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  int64_t real_us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
  int64_t s = atomic_load(&step_us);
  int64_t off = s ? atomic_fetch_add(&offset_us, s) + s : atomic_load(&offset_us);
  return (real_us + off) / 1000;
}

static th_server_t *srv;

typedef struct done {
  _Atomic int finished, status;
} done_t;

static void on_done(rlock_lock_t *l, int status, int64_t value, void *arg) {
  (void)l, (void)value;
  done_t *d = arg;
  atomic_store(&d->status, status);
  atomic_store(&d->finished, 1);
}
static int is_finished(void *arg) { return atomic_load(&((done_t *)arg)->finished); }

#define WAIT_MS 400

TEST(bounded_wait_never_sleeps_the_pttl) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = srv->url;
  /* the fast clock must not make requests time out */
  o.command_timeout_ms = 1000000000;
  o.connect_timeout_ms = 1000000000;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  rlock_lock_t *l = th_lock(c, "park:deadline");
  /* Held by someone else for a minute. */
  th_reply_free(th_cmd(srv, "HSET", "park:deadline", "someone-else:1", "1", NULL));
  th_reply_free(th_cmd(srv, "PEXPIRE", "park:deadline", "60000", NULL));
  int trials = 0;
  /* step_k = WAIT / (k + 1/2): the k-th read after the deadline was taken
   * is the last one before it, the next one is past it. */
  for (int k = 1; k <= 40; k++) {
    done_t d = {0, 0};
    int64_t step = (int64_t)WAIT_MS * 1000 * 2 / (2 * k + 1);
    atomic_store(&step_us, step);
    int64_t t0 = th_now_ms();
    CHECK_OK(rlock_lock_acquire_async(l, 7, WAIT_MS, 1000, NULL, on_done, &d));
    int finished = th_wait_until(is_finished, &d, 5000);
    atomic_store(&step_us, 0);
    CHECK_MSG(finished,
              "trylock(%d ms) still asleep after %lld ms (clock step %lld us): it took the "
              "passed deadline for 'no bound' and sleeps the PTTL",
              WAIT_MS, (long long)(th_now_ms() - t0), (long long)step);
    CHECK_RC(atomic_load(&d.status), RLOCK_EBUSY);
    trials++;
  }
  printf("%d bounded waits, each ended with RLOCK_EBUSY in time\n", trials);
  rlock_lock_free(l);
  rlock_client_free(c);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 120);
  srv = th_server_start(NULL);
  RUN(bounded_wait_never_sleeps_the_pttl);
  th_server_stop(srv);
  return th_done();
}
