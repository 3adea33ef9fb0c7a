/* test_pes_clock.c -- the permit-expirable semaphore's watchdog renewal when
 * the clients' wall clocks and the server's differ (internal: the seam
 * rlock__test_wall_offset_us moves the clients' wall clock, hooks.h). A
 * permit's expiry is a score on the clients' wall clocks (another client's
 * acquire reclaims a score <= its now, Redisson's rule), so a renewal must
 * move it on the same clock, not on the server's:
 *   renew_server_behind  the server's clock 5 s behind the clients': a
 *                        renewed permit is never reclaimed by another
 *                        client while its holder's valid-until runs (the
 *                        server-clock score stayed at the acquire's end)
 *   renew_server_ahead   the server's clock 5 s ahead: a renewal does not
 *                        take a live permit for expired (it was reported
 *                        lost at the first renewal)
 *   valid_until_any_phase  the clients' wall clock set at 0.01 to 0.9 ms
 *                        past the monotonic clock's ms: a permit's
 *                        valid-until is never after the first moment another
 *                        client may reclaim it, after an acquire or after a
 *                        renewal (test_permit_semaphore's
 *                        valid_until_before_expiry sees only the machine's
 *                        own phase: at 0 the 1 ms slack cannot be missed) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "internal.h"

static th_server_t *srv;

typedef struct {
  rlock_permits_t *s;
  const char *id;
  int64_t past; /* wait until the valid-until is later than this */
} moved_arg_t;

/* The holder's valid-until moved past a->past (renewals answered), or its
 * permit is no longer tracked (lost). */
static int moved(void *arg) {
  moved_arg_t *a = arg;
  int64_t v = 0;
  int rc = rlock_permits_valid_until(a->s, a->id, &v);
  return rc != 0 || v > a->past;
}

/* Clients 5 s ahead of the server: the holder renews with the watchdog
 * (600 ms lease, a renewal every 200 ms); once its valid-until has moved
 * 800 ms past the acquire's (a renewal sent after the acquire's lease ran
 * out was answered), another client's try must find no permit. */
TEST(renew_server_behind) {
  rlock__test_wall_offset_us = 5000000;
  rlock_client_t *c = th_client(srv->url, 600), *d = th_client(srv->url, 0);
  rlock_permits_t *s = NULL, *t = NULL;
  CHECK_OK(rlock_permits_new(c, "pes:clk1", 8, &s));
  CHECK_OK(rlock_permits_new(d, "pes:clk1", 8, &t));
  CHECK_OK(rlock_permits_set(s, 1));
  char id[RLOCK_PERMIT_ID_LEN + 1], id2[RLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(rlock_permits_acquire(s, 0, RLOCK_LEASE_WATCHDOG, NULL, id));
  int64_t v0 = 0, v = 0;
  CHECK_OK(rlock_permits_valid_until(s, id, &v0));
  moved_arg_t a = {s, id, v0 + 800};
  CHECK_MSG(th_wait_until(moved, &a, 10000), "the valid-until never moved");
  CHECK_OK(rlock_permits_valid_until(s, id, &v));
  int rc = rlock_permits_try_acquire(t, 60000, id2);
  int64_t now = rlock_now_ms();
  CHECK_MSG(rc == RLOCK_EBUSY, "another client took the permit (%s) %lld ms before its holder's valid-until",
            rlock_err_name(rc), (long long)(v - now));
  CHECK_OK(rlock_permits_release(s, id));
  rlock_permits_free(s), rlock_permits_free(t);
  rlock_client_free(c), rlock_client_free(d);
  rlock__test_wall_offset_us = 0;
}

/* Clients 5 s behind the server: the permit stays held through renewals. */
TEST(renew_server_ahead) {
  rlock__test_wall_offset_us = -5000000;
  rlock_client_t *c = th_client(srv->url, 600);
  rlock_permits_t *s = NULL;
  CHECK_OK(rlock_permits_new(c, "pes:clk2", 8, &s));
  CHECK_OK(rlock_permits_set(s, 1));
  char id[RLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(rlock_permits_acquire(s, 0, RLOCK_LEASE_WATCHDOG, NULL, id));
  int64_t v0 = 0, v = 0;
  CHECK_OK(rlock_permits_valid_until(s, id, &v0));
  moved_arg_t a = {s, id, v0 + 400};
  CHECK_MSG(th_wait_until(moved, &a, 10000), "the valid-until never moved");
  int rc = rlock_permits_valid_until(s, id, &v);
  CHECK_MSG(rc == 0, "a live permit was dropped at a renewal (%s: %s)", rlock_err_name(rc), rlock_last_error());
  CHECK_OK(rlock_permits_release(s, id));
  rlock_permits_free(s);
  rlock_client_free(c);
  rlock__test_wall_offset_us = 0;
}

/* The wall clock's epoch ns (with the seam's offset) minus the monotonic
 * clock's ns, both read now. */
static int64_t wall_minus_mono_ns(void) {
  struct timespec w1, m, w2;
  clock_gettime(CLOCK_REALTIME, &w1);
  clock_gettime(CLOCK_MONOTONIC, &m);
  clock_gettime(CLOCK_REALTIME, &w2);
  int64_t w = ((int64_t)w1.tv_sec * 1000000000 + w1.tv_nsec) / 2 + ((int64_t)w2.tv_sec * 1000000000 + w2.tv_nsec) / 2;
  return w + rlock__test_wall_offset_us * 1000 - ((int64_t)m.tv_sec * 1000000000 + m.tv_nsec);
}

/* The permit's score (-1: absent). */
static long long score(const char *zset, const char *id) {
  char raw[16];
  for (int i = 0; i < 16; i++) {
    unsigned v = 0;
    CHECK(sscanf(id + 2 * i, "%2x", &v) == 1);
    raw[i] = (char)v;
  }
  const char *argv[3] = {"ZSCORE", zset, raw};
  size_t lens[3] = {6, strlen(zset), 16};
  redisReply *r = th_cmdv(srv, 3, argv, lens);
  long long v = r->type == REDIS_REPLY_STRING ? atoll(r->str) : -1;
  th_reply_free(r);
  return v;
}

/* How far (ns) the permit's valid-until lies after the first moment another
 * client may reclaim it (its wall clock's whole ms reaching the score), on
 * the monotonic clock. Must be <= 0. */
static int64_t past_reclaim_ns(rlock_permits_t *s, const char *zset, const char *id) {
  int64_t vu = 0;
  CHECK_OK(rlock_permits_valid_until(s, id, &vu));
  long long sc = score(zset, id);
  CHECK(sc > 0);
  return vu * 1000000 - ((int64_t)sc * 1000000 - wall_minus_mono_ns());
}

/* The seam set so that the wall clock runs phase_us past the monotonic
 * clock's ms. */
static void set_phase(int64_t phase_us) {
  rlock__test_wall_offset_us = 0;
  int64_t now_us = ((wall_minus_mono_ns() % 1000000) + 1000000) % 1000000 / 1000;
  rlock__test_wall_offset_us = ((phase_us - now_us) % 1000 + 1000) % 1000;
}

TEST(valid_until_any_phase) {
  /* A renewal is sent at the client's tick, at much the same phase f of the
   * monotonic ms each time: without the slack its valid-until would be late
   * only if f + phase < 1 ms, so small phases too */
  static const int64_t phases[] = {10, 50, 300, 500, 900};
  rlock_client_t *c = th_client(srv->url, 600);
  rlock_permits_t *s = NULL;
  CHECK_OK(rlock_permits_new(c, "pes:ph", 6, &s));
  CHECK_OK(rlock_permits_set(s, 1));
  char id[RLOCK_PERMIT_ID_LEN + 1];
  for (size_t p = 0; p < sizeof phases / sizeof phases[0]; p++) {
    set_phase(phases[p]);
    int64_t worst = INT64_MIN;
    for (int i = 0; i < 20; i++) {
      CHECK_OK(rlock_permits_acquire(s, 0, 5000, NULL, id));
      int64_t past = past_reclaim_ns(s, "{pes:ph}:timeout", id);
      if (past > worst) worst = past;
      CHECK_OK(rlock_permits_release(s, id));
    }
    printf("# phase %.3f ms: a fixed lease's valid-until at most %.3f ms from the reclaim\n", (double)phases[p] / 1e3,
           (double)worst / 1e6);
    CHECK_MSG(worst <= 0, "phase %.3f ms: a valid-until %.3f ms after the permit may be reclaimed",
              (double)phases[p] / 1e3, (double)worst / 1e6);
    /* a renewal: wait until the holder's valid-until has moved (its answer is in) */
    CHECK_OK(rlock_permits_acquire(s, 0, RLOCK_LEASE_WATCHDOG, NULL, id));
    int64_t v0 = 0;
    CHECK_OK(rlock_permits_valid_until(s, id, &v0));
    moved_arg_t a = {s, id, v0};
    CHECK_MSG(th_wait_until(moved, &a, 10000), "never renewed");
    int64_t past = past_reclaim_ns(s, "{pes:ph}:timeout", id);
    CHECK_MSG(past <= 0, "phase %.3f ms, after a renewal: a valid-until %.3f ms after the permit may be reclaimed",
              (double)phases[p] / 1e3, (double)past / 1e6);
    CHECK_OK(rlock_permits_release(s, id));
  }
  rlock_permits_free(s);
  rlock_client_free(c);
  rlock__test_wall_offset_us = 0;
}

int main(int argc, char **argv) {
  th_init(argc, argv, 110);
  srv = th_server_start(NULL);
  RUN(renew_server_behind);
  RUN(renew_server_ahead);
  RUN(valid_until_any_phase);
  th_server_stop(srv);
  return th_done();
}
