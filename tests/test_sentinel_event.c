/* test_sentinel_event.c -- the +switch-master event on its own (internal
 * API: the poll is switched off with rlock__sentinel_poll_ms). In
 * test_sentinel.c every failover test also passes on the 1 s poll alone, or
 * on the reconnect that a killed or demoted master forces, so none of them
 * proves the event path (nor that it moves the subscriber connection too:
 * left on the old node, the manual failover test still passed, ~10 s late).
 * Here the master is frozen (SIGSTOP: its connections stay open, nothing
 * drops, it replicates nothing) and the clients send nothing (no PING, a
 * fixed lease: no renewals): once Sentinel fails over, only the event can
 * move them. A waiter whose subscriber connection stayed on the frozen node
 * would sleep while the lock is free on the new master, until the holder's
 * 60 s lease. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "harness_replica.h"
#include "harness_sentinel.h"
#include "internal.h"

#define NAME "sentinel:event"
#define CHANNEL "redisson_lock__channel:{" NAME "}"

static th_server_t *watched;

/* Both clients have their command and subscriber connections on `watched`. */
static int clients_there(void *arg) {
  (void)arg;
  return th_clients_named(watched, "quiet-h") >= 2 && th_clients_named(watched, "quiet-w") >= 2;
}

static int subscribed(void *arg) {
  (void)arg;
  return th_numsub(watched, CHANNEL) >= 1;
}

static rlock_client_t *quiet_client(const char *url, const char *name) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = url;
  o.client_name = name;
  o.ping_interval_ms = 0; /* nothing on the wire finds the frozen master */
  /* the promoted replica has no replica of its own (the old master stays
   * frozen): with the replica-sync check every grant there would end
   * RLOCK_ENOSYNC (a deployment that had replicas never locks without WAIT) */
  o.replica_sync = RLOCK_REPLICA_SYNC_OFF;
  o.reconnect_min_ms = 50;
  o.reconnect_max_ms = 1000;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  return c;
}

TEST(switch_master_event_moves_quiet_clients_and_wakes_the_waiter) {
  th_sentinels_t *d = th_sentinels_start("frozen", 1, 1);
  int64_t saved = rlock__sentinel_poll_ms;
  rlock__sentinel_poll_ms = 3600 * 1000; /* no poll: only the event can tell */
  rlock_client_t *h = quiet_client(d->url, "quiet-h"), *w = quiet_client(d->url, "quiet-w");
  th_server_t *old = d->nodes[0];
  rlock_lock_t *hl = th_lock(h, NAME);
  th_waiter_t wt = {.lock = th_lock(w, NAME), .lease_ms = 10000};
  CHECK_OK(rlock_lock_lock(hl, 60000)); /* a fixed lease: no renewal traffic */
  /* The hold on the replica before the master freezes (replica sync is off:
   * the lock call did not wait for it). A raw WAIT here proves nothing: it
   * waits for its own connection's last write, and that connection wrote
   * nothing, so it answers 1 at once. Redis 7.0 also starts the command
   * stream to a replica just come online only at its first periodic ACK (up
   * to 1 s): the master was frozen before that in CI (valgrind), the new
   * master had no hold, the waiter took the lock and the holder's unlock
   * was answered "not held". th_replicas_caught_up writes, then WAITs on
   * the same connection: the stream is in order, so the hold is there. */
  th_replicas_caught_up(old, 1, 10000);
  CHECK_EQ(th_cmd_int(d->nodes[1], "EXISTS", NAME, NULL), 1);
  th_waiter_start(&wt);
  watched = old;
  CHECK_MSG(th_wait_until(subscribed, NULL, 30000), "the waiter never subscribed");
  CHECK_MSG(th_wait_until(clients_there, NULL, 30000), "the clients are not on the master");

  CHECK(kill(old->pid, SIGSTOP) == 0);
  th_server_t *m = th_sentinels_wait_failover(d, old->port, 60000);
  CHECK_MSG(m, "no failover within 60 s");
  watched = m;
  int64_t agreed_at = th_now_ms();
  CHECK_MSG(th_wait_until(clients_there, NULL, 30000), "+switch-master did not move the clients to the new master");
  CHECK_MSG(th_wait_until(subscribed, NULL, 30000), "the waiter was not resubscribed on the new master");
  int64_t followed_at = th_now_ms();
  CHECK(!th_waiter_done(&wt, 0)); /* the hold (replicated) survived: still waiting */
  int64_t unlocked_at = th_now_ms();
  CHECK_OK(rlock_lock_unlock(hl));
  /* by the unlock message on the new master, long before the 60 s lease */
  CHECK_MSG(th_waiter_done(&wt, 15000), "the waiter did not wake within 15 s of the unlock");
  CHECK_OK(wt.rc);
  CHECK(wt.done_at >= unlocked_at);
  printf(
      "# figures: frozen master, poll off: clients there and resubscribed %lld ms after the sentinel named the "
      "new master; waiter granted %lld ms after the unlock\n",
      (long long)(followed_at - agreed_at), (long long)(wt.done_at - unlocked_at));
  th_waiter_join(&wt);
  CHECK_EQ(th_cmd_int(m, "EXISTS", NAME, NULL), 0);
  rlock_lock_free(hl);
  rlock_lock_free(wt.lock);
  rlock_client_free(h);
  rlock_client_free(w);
  rlock__sentinel_poll_ms = saved;
  kill(old->pid, SIGCONT);
  th_sentinels_stop(d);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 300);
  RUN(switch_master_event_moves_quiet_clients_and_wakes_the_waiter);
  return th_done();
}
