/* test_holes.c (fault) -- the reentrant lock's holes of issue 7 that need a
 * network fault, through the loopback fault proxy (proxy.c):
 *   - an acquire applied on the server whose reply was lost, re-queued by a
 *     RLOCK_WAIT_FOREVER waiter through an outage longer than the request
 *     latch's TTL, counts once (item 1);
 *   - an unlock that failed (server unreachable) leaves no renewed hold
 *     behind: the lease frees the lock (item 2);
 *   - a waiter woken by the unlock message that then ends without the lock
 *     (deadline, cancel) passes the wake-up on to the next waiter of its
 *     process (item 6c); a message that comes while no waiter is parked
 *     (its try in flight) leaves a wake token;
 *   - renewals that fail until the lease ran out report the reason (item 10).
 * Server state is checked on the real server with a raw hiredis client. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "fault_harness.h"
#include "proxy.h"

static th_server_t *srv;
static fp_proxy_t *px;
static char purl[64];
static atomic_int lost_calls, last_reason;

static void on_lost(const char *name, size_t len, uint64_t owner, rlock_lost_reason_t reason, void *arg) {
  (void)name, (void)len, (void)owner, (void)arg;
  atomic_store(&last_reason, (int)reason);
  atomic_fetch_add(&lost_calls, 1);
}

static rlock_stats_t stats(rlock_client_t *c) {
  rlock_stats_t s;
  rlock_client_stats(c, &s);
  return s;
}

static int key_gone(void *a) { return th_cmd_int(srv, "EXISTS", (const char *)a, NULL) == 0; }
static int conns_are(void *a) { return fp_connections(px) == *(int *)a; }

typedef struct hget_arg {
  const char *key, *field;
  long long want;
} hget_arg_t;
static int hget_is(void *a) {
  hget_arg_t *h = a;
  return th_hget_num(srv, h->key, h->field) == h->want;
}

/* No key matches pattern on the server. */
static int no_keys(void *pattern) {
  redisReply *r = th_cmd(srv, "KEYS", (const char *)pattern, NULL);
  int none = r->type == REDIS_REPLY_ARRAY && r->elements == 0;
  th_reply_free(r);
  return none;
}

typedef struct stat_arg {
  rlock_client_t *c;
  uint64_t want;
} stat_arg_t;
static int attempts_reach(void *a) {
  stat_arg_t *s = a;
  return stats(s->c).acquire_attempts >= s->want;
}
static int messages_reach(void *a) {
  stat_arg_t *s = a;
  return stats(s->c).messages >= s->want;
}

/* A round trip on the client's command connection (a lock query: user
 * commands have a connection of their own): every reply written before it
 * has been processed once it answers. */
static void ping(rlock_client_t *c) {
  rlock_lock_t *l = th_lock(c, "holes:barrier");
  int locked = -1;
  CHECK_OK(rlock_lock_is_locked(l, &locked));
  CHECK_EQ(locked, 0);
  rlock_lock_free(l);
}

/* ------------------------------------------------------------ item 1 */

/* The acquire is applied but its reply is lost (replies blackholed, then the
 * connection cut); the server stays unreachable until the request's latch
 * has expired on the server, while the RLOCK_WAIT_FOREVER waiter re-queues
 * its try. On reconnect the old request id must not be applied a second
 * time: the hold count is 1 and one unlock frees the lock. */
TEST(acquire_outlives_latch) {
  const char *name = "holes:latch";
  rlock_client_t *c = fh_client(purl, 30000, 300, 1); /* latch TTL: max(10 s, 300 x 3) */
  rlock_lock_t *l = th_lock(c, name);
  char o[128];
  th_owner_id(c, 9, o, sizeof o);
  fp_blackhole(px, FP_DOWN);
  fh_latch_t got;
  fh_latch_init(&got);
  CHECK_OK(rlock_lock_acquire_async(l, 9, RLOCK_WAIT_FOREVER, RLOCK_LEASE_WATCHDOG, NULL, fh_latch_cb, &got));
  hget_arg_t applied = {name, o, 1};
  CHECK_MSG(th_wait_until(hget_is, &applied, 5000), "the acquire did not reach the server");
  /* the server becomes unreachable; the reply is lost with the connection */
  fp_refuse(px, 1);
  fp_cut(px);
  fp_blackhole(px, 0);
  int64_t t_down = rlock_now_ms();
  /* the outage lasts until the request's latch has expired on the server */
  CHECK_MSG(th_wait_until(no_keys, "rlock_acquire_latch:{holes:latch}:*", 20000), "the latch did not expire");
  th_sleep_ms(500); /* the scenario: the outage outlasts the latch a little (the waiter's old id is
                      stale by now: its undo waits for the connection) */
  CHECK(!got.done);
  fp_refuse(px, 0);
  printf("outage of %lld ms (latch TTL 10000 ms)\n", (long long)(rlock_now_ms() - t_down));
  CHECK_MSG(fh_latch_wait(&got, 10000), "the waiter did not get the lock after the outage");
  CHECK_OK(got.status);
  long long count = th_hget_num(srv, name, o);
  CHECK_MSG(count == 1, "hold count %lld on the server after one acquire", count);
  CHECK_OK(rlock_lock_release(l, 9));
  CHECK_MSG(th_cmd_int(srv, "EXISTS", name, NULL) == 0, "one unlock left count %lld", th_hget_num(srv, name, o));
  CHECK_EQ(stats(c).held, 0);
  fh_result("reply lost + outage > latch TTL, wait-forever acquire", "single", "reentrant",
            "count 1 after the outage; one unlock frees the lock", 0);
  fh_latch_destroy(&got);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* ------------------------------------------------------------ item 2 */

/* The unlock cannot reach the server. Once it has failed, the client no
 * longer renews the hold: after the outage the lease frees the lock. */
TEST(failed_unlock_not_renewed) {
  const char *name = "holes:unlock";
  rlock_client_t *c = fh_client(purl, 1000, 300, 1);
  rlock_client_on_lost(c, on_lost, NULL);
  rlock_lock_t *l = th_lock(c, name);
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  fp_refuse(px, 1);
  fp_cut(px);
  int rc = rlock_lock_unlock(l);
  printf("unlock while unreachable: %s\n", rlock_err_name(rc));
  CHECK(rc == RLOCK_ECONNECT || rc == RLOCK_ETIMEDOUT || rc == RLOCK_ECONNLOST);
  CHECK_MSG(stats(c).held == 0, "the hold is still registered after the failed unlock");
  int lost0 = atomic_load(&lost_calls);
  fp_refuse(px, 0);
  int two = 2;
  CHECK_MSG(th_wait_until(conns_are, &two, 5000), "the client did not reconnect");
  int64_t t0 = rlock_now_ms();
  /* nobody renews it: it expires within its 1000 ms lease */
  CHECK_MSG(th_wait_until(key_gone, (void *)name, 5000), "the lock is still renewed 5 s after the failed unlock");
  printf("lock freed %lld ms after the reconnect\n", (long long)(rlock_now_ms() - t0));
  CHECK_EQ(atomic_load(&lost_calls), lost0);
  CHECK_RC(rlock_lock_unlock(l), RLOCK_ENOTHELD);

  /* Nested: the failed inner unlock counts as done; the outer hold is still
   * renewed, and its unlock frees the lock (the server's extra count from
   * the unlock that never arrived is removed too). */
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  fp_refuse(px, 1);
  fp_cut(px);
  rc = rlock_lock_unlock(l);
  CHECK(rc == RLOCK_ECONNECT || rc == RLOCK_ETIMEDOUT || rc == RLOCK_ECONNLOST);
  CHECK_EQ(stats(c).held, 1);
  fp_refuse(px, 0);
  CHECK(th_wait_until(conns_are, &two, 5000));
  uint64_t r0 = stats(c).renewed_locks;
  for (int i = 0; i < 500 && stats(c).renewed_locks < r0 + 3; i++) th_sleep_ms(10);
  CHECK_MSG(stats(c).renewed_locks >= r0 + 3, "the outer hold is no longer renewed");
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", name, NULL), 0);
  CHECK_EQ(stats(c).held, 0);
  CHECK_EQ(atomic_load(&lost_calls), lost0);
  fh_result("unlock while the server is unreachable", "single", "reentrant",
            "hold no longer renewed; lease frees the lock; nested: outer unlock frees it", 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* ------------------------------------------------------------ item 6c */

/* Waiters A (bounded, or cancelled) and B (forever) of one client park on a
 * lock held elsewhere for a minute. The client's command connection goes
 * down (its subscriber connection stays up), the lock is freed: the message
 * wakes A, whose try cannot be written, and A ends without the lock. B must
 * get the wake-up: once the connection is back it takes the lock, long
 * before the minute is over. */
static void wake_passed_on(int cancel_a, const char *label) {
  const char *name = "holes:wake", *chan = "redisson_lock__channel:{holes:wake}";
  th_reply_free(th_cmd(srv, "HSET", name, "someone-else:1", "1", NULL));
  th_reply_free(th_cmd(srv, "PEXPIRE", name, "60000", NULL));
  rlock_client_t *c = fh_client(purl, 30000, 300, 1);
  rlock_lock_t *l = th_lock(c, name);
  rlock_cancel_t *cancel = NULL;
  CHECK_OK(rlock_cancel_new(&cancel));
  fh_latch_t a, b;
  fh_latch_init(&a);
  fh_latch_init(&b);
  stat_arg_t sa = {c, stats(c).acquire_attempts + 2};
  CHECK_OK(rlock_lock_acquire_async(l, 1, cancel_a ? RLOCK_WAIT_FOREVER : 2500, 60000, cancel_a ? cancel : NULL,
                                    fh_latch_cb, &a));
  CHECK(th_wait_until(attempts_reach, &sa, 5000)); /* A: busy, subscribed, busy again: parked */
  sa.want += 2;
  CHECK_OK(rlock_lock_acquire_async(l, 2, RLOCK_WAIT_FOREVER, 60000, NULL, fh_latch_cb, &b));
  CHECK(th_wait_until(attempts_reach, &sa, 5000)); /* B: busy, busy again: parked behind A */
  ping(c);
  /* the command connection goes down and cannot come back; the subscriber
   * connection stays */
  fp_refuse(px, 1);
  th_reply_free(th_cmd(srv, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes", NULL));
  stat_arg_t sm = {c, stats(c).messages + 1};
  th_reply_free(th_cmd(srv, "DEL", name, NULL));
  CHECK_EQ(th_cmd_int(srv, "PUBLISH", chan, "0", NULL), 1);
  CHECK(th_wait_until(messages_reach, &sm, 5000)); /* A is woken */
  if (cancel_a) rlock_cancel_trigger(cancel);
  CHECK_MSG(fh_latch_wait(&a, 10000), "A did not end");
  printf("%s: A ended with %s\n", label, rlock_err_name(a.status));
  CHECK(a.status == (cancel_a ? RLOCK_ECANCELED : RLOCK_ECONNECT));
  fp_refuse(px, 0);
  int64_t t0 = rlock_now_ms();
  CHECK_MSG(fh_latch_wait(&b, 8000), "B sleeps while the lock is free (the wake-up died with A)");
  CHECK_OK(b.status);
  printf("%s: B took the lock %lld ms after the connection could come back\n", label, (long long)(rlock_now_ms() - t0));
  CHECK_OK(rlock_lock_release(l, 2));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", name, NULL), 0);
  fh_result(label, "single", "reentrant", "the next waiter of the process gets the wake-up", 0);
  fh_latch_destroy(&a);
  fh_latch_destroy(&b);
  rlock_cancel_free(cancel);
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(wake_passed_on_deadline) { wake_passed_on(0, "woken waiter ends at its deadline"); }
TEST(wake_passed_on_cancel) { wake_passed_on(1, "woken waiter cancelled"); }

/* A message that comes while the waiter's try is in flight (no waiter of the
 * client is parked) leaves a wake token: the waiter tries again when its
 * try comes back busy, instead of sleeping on the holder's TTL. Every
 * connection of the client is delayed 500 ms each way, so the second
 * message (published right after the first one's wake-up was sent) reaches
 * the client while that try is still on its way. */
TEST(wake_token_while_trying) {
  const char *name = "holes:token", *chan = "redisson_lock__channel:{holes:token}";
  th_reply_free(th_cmd(srv, "HSET", name, "someone-else:1", "1", NULL));
  th_reply_free(th_cmd(srv, "PEXPIRE", name, "60000", NULL));
  rlock_client_t *c = fh_client(purl, 30000, 3000, 1);
  rlock_lock_t *l = th_lock(c, name);
  fh_latch_t got;
  fh_latch_init(&got);
  stat_arg_t sa = {c, stats(c).acquire_attempts + 2};
  CHECK_OK(rlock_lock_acquire_async(l, 1, RLOCK_WAIT_FOREVER, 60000, NULL, fh_latch_cb, &got));
  CHECK(th_wait_until(attempts_reach, &sa, 5000)); /* busy, subscribed, busy again */
  ping(c); /* both tries answered: parked (or trying once more on the subscription's wake-up) */
  ping(c);
  fp_delay(px, 500);
  uint64_t base = stats(c).acquire_attempts;
  CHECK_EQ(th_cmd_int(srv, "PUBLISH", chan, "0", NULL), 1);
  stat_arg_t woken = {c, base + 1};
  CHECK_MSG(th_wait_until(attempts_reach, &woken, 5000), "the message did not wake the waiter");
  CHECK_EQ(th_cmd_int(srv, "PUBLISH", chan, "0", NULL), 1); /* arrives while that try is in flight */
  ping(c);                                                  /* the try's answer (busy) has been handled */
  uint64_t tries = stats(c).acquire_attempts - base;
  fp_delay(px, 0);
  CHECK_MSG(tries == 2, "two messages, %llu tries: the one that came while the try was in flight was lost",
            (unsigned long long)tries);
  /* the second try may have been sent after that ping (when the first
   * try's answer came): this one follows it, so its answer is in too
   * (else it could land after the DEL below and take the lock with no
   * message, and the PUBLISH would reach nobody) */
  ping(c);
  CHECK(!got.done);
  th_reply_free(th_cmd(srv, "DEL", name, NULL));
  CHECK_EQ(th_cmd_int(srv, "PUBLISH", chan, "0", NULL), 1);
  CHECK_MSG(fh_latch_wait(&got, 5000), "the waiter did not get the free lock");
  CHECK_OK(got.status);
  CHECK_OK(rlock_lock_release(l, 1));
  fh_result("unlock message while the waiter's try is in flight (500 ms delay)", "single", "reentrant",
            "a wake token: the waiter tries again at once", 0);
  fh_latch_destroy(&got);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* ------------------------------------------------------------ item 10 */

static int lost_reaches(void *want) { return atomic_load(&lost_calls) >= *(int *)want; }

/* Renewals fail (partition) until the lease has certainly run out. */
TEST(renewal_failed_reason) {
  rlock_client_t *c = fh_client(purl, 1000, 300, 1);
  rlock_client_on_lost(c, on_lost, NULL);
  rlock_lock_t *l = th_lock(c, "holes:part");
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  int want = atomic_load(&lost_calls) + 1;
  fp_blackhole(px, FP_BOTH);
  CHECK_MSG(th_wait_until(lost_reaches, &want, 5000), "the holder was not told");
  CHECK_EQ(atomic_load(&last_reason), RLOCK_LOST_RENEWAL_FAILED);
  fp_blackhole(px, 0);
  CHECK(th_wait_until(key_gone, "holes:part", 5000));
  CHECK_RC(rlock_lock_unlock(l), RLOCK_ENOTHELD);
  fh_result("partition > watchdog lease", "single", "reentrant", "lost callback with reason RLOCK_LOST_RENEWAL_FAILED",
            0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* test_holes [NAME]: all tests, or only NAME */
#define RUN_IF(name) \
  if (argc < 2 || !strcmp(argv[1], #name)) RUN(name)

int main(int argc, char **argv) {
  th_init(argc, argv, 200);
  srv = th_server_start(NULL);
  px = fp_start(srv->port);
  snprintf(purl, sizeof purl, "redis://127.0.0.1:%d", fp_port(px));
  RUN_IF(acquire_outlives_latch);
  RUN_IF(failed_unlock_not_renewed);
  RUN_IF(wake_passed_on_deadline);
  RUN_IF(wake_passed_on_cancel);
  RUN_IF(wake_token_while_trying);
  RUN_IF(renewal_failed_reason);
  fp_stop(px);
  th_server_stop(srv);
  return th_done();
}
