/* test_pes_clock.c -- the permit-expirable semaphore's watchdog renewal when
 * the clients' wall clocks and the server's differ (internal: the seam
 * rlock__test_wall_offset_ms moves the clients' wall clock, hooks.h). A
 * permit's expiry is a score on the clients' wall clocks (another client's
 * acquire reclaims a score <= its now, Redisson's rule), so a renewal must
 * move it on the same clock, not on the server's:
 *   renew_server_behind  the server's clock 5 s behind the clients': a
 *                        renewed permit is never reclaimed by another
 *                        client while its holder's valid-until runs (the
 *                        server-clock score stayed at the acquire's end)
 *   renew_server_ahead   the server's clock 5 s ahead: a renewal does not
 *                        take a live permit for expired (it was reported
 *                        lost at the first renewal) */
#include <stdio.h>
#include <string.h>

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
  rlock__test_wall_offset_ms = 5000;
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
  rlock__test_wall_offset_ms = 0;
}

/* Clients 5 s behind the server: the permit stays held through renewals. */
TEST(renew_server_ahead) {
  rlock__test_wall_offset_ms = -5000;
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
  rlock__test_wall_offset_ms = 0;
}

int main(int argc, char **argv) {
  th_init(argc, argv, 110);
  srv = th_server_start(NULL);
  RUN(renew_server_behind);
  RUN(renew_server_ahead);
  th_server_stop(srv);
  return th_done();
}
