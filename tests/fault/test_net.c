/* test_net.c -- network faults between the client and Redis through the
 * loopback fault proxy (proxy.c): cut connections (reconnect, resubscribe,
 * waiters recover, also when the unlock message fell into the gap), a
 * blackhole longer than the command timeout during acquire and unlock (the
 * re-sends with the same latch count once: no double-counted hold, no hold
 * left behind, checked with HGET on the real server), a partition longer
 * than the lease (the holder is told), added latency, and outages (the
 * proxy refuses): a wait-forever waiter waits through them and gets the
 * lock after, a bounded wait ends with RLOCK_ECONNECT near its bound, a
 * cancel ends the wait with RLOCK_ECANCELED and leaves no hold; a try
 * applied whose answer is lost after the wait bound is re-sent after the
 * reconnect and granted (not given up at the bound). */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "fault_harness.h"
#include "proxy.h"

static th_server_t *srv;
static fp_proxy_t *px;
static char purl[64];
static atomic_int lost_calls;

static void on_lost(const char *name, size_t len, uint64_t owner, rlock_lost_reason_t reason, void *arg) {
  (void)reason;
  atomic_fetch_add(&lost_calls, 1);
}

typedef struct numsub_arg {
  const char *chan;
  long long want;
} numsub_arg_t;
static int numsub_is(void *a) {
  numsub_arg_t *n = a;
  return th_numsub(srv, n->chan) == n->want;
}
static int conns_are(void *a) { return fp_connections(px) == *(int *)a; }
static int key_gone(void *a) { return th_cmd_int(srv, "EXISTS", (const char *)a, NULL) == 0; }

static rlock_stats_t stats(rlock_client_t *c) {
  rlock_stats_t s;
  rlock_client_stats(c, &s);
  return s;
}

/* A round trip on the client's command connection: replies come in order,
 * so once it answers, every request written before it has been applied. A
 * lock query, not a PING: user commands have a connection of their own. */
static void ping(rlock_client_t *c) {
  rlock_lock_t *l = th_lock(c, "net:barrier");
  int locked = -1;
  CHECK_OK(rlock_lock_is_locked(l, &locked));
  CHECK_EQ(locked, 0);
  rlock_lock_free(l);
}

static const char *owner(rlock_client_t *c, char *buf) {
  return th_owner_id(c, RLOCK_OWNER_THREAD | (uint64_t)th_gettid(), buf, 128);
}

TEST(cut_reconnect_resubscribe) {
  rlock_client_t *h = fh_client(purl, 1000, 1000, 3), *w = fh_client(purl, 1000, 1000, 3);
  rlock_client_on_lost(h, on_lost, NULL);
  rlock_lock_t *lh = th_lock(h, "net:cut"), *lw = th_lock(w, "net:cut");
  CHECK_OK(rlock_lock_lock(lh, RLOCK_LEASE_WATCHDOG));
  fh_latch_t got;
  fh_latch_init(&got);
  CHECK_OK(rlock_lock_acquire_async(lw, 777, RLOCK_WAIT_FOREVER, RLOCK_LEASE_WATCHDOG, NULL, fh_latch_cb, &got));
  numsub_arg_t ns = {"redisson_lock__channel:{net:cut}", 1};
  CHECK(th_wait_until(numsub_is, &ns, 5000));
  rlock_stats_t h0 = stats(h), w0 = stats(w);
  int64_t t_cut = rlock_now_ms();
  fp_cut(px);
  int four = 4;
  CHECK_MSG(th_wait_until(conns_are, &four, 5000), "clients did not reconnect");
  CHECK(th_wait_until(numsub_is, &ns, 5000)); /* resubscribed */
  /* the hold survived and is renewed through the new connection */
  int64_t vu = 0;
  for (int i = 0; i < 300 && vu <= t_cut + 1000; i++) {
    CHECK_OK(rlock_lock_valid_until(lh, RLOCK_OWNER_SELF, &vu));
    if (vu <= t_cut + 1000) th_sleep_ms(10); /* no event announces a renewal */
  }
  CHECK_MSG(vu > t_cut + 1000, "no renewal after the cut");
  char o[128];
  CHECK_EQ(th_hget_num(srv, "net:cut", owner(h, o)), 1);
  CHECK_EQ(atomic_load(&lost_calls), 0);
  CHECK(!got.done);
  CHECK(stats(h).reconnects >= h0.reconnects + 2); /* command + subscriber connection */
  CHECK(stats(w).reconnects >= w0.reconnects + 2);
  int64_t t0 = rlock_now_ms();
  CHECK_OK(rlock_lock_unlock(lh));
  CHECK_MSG(fh_latch_wait(&got, 5000), "the waiter did not recover after the cut");
  CHECK_OK(got.status);
  printf("waiter acquired %lld ms after the unlock\n", (long long)(rlock_now_ms() - t0));
  CHECK_OK(rlock_lock_release(lw, 777));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "net:cut", NULL), 0);
  fh_result("proxy-cut", "single", "reentrant", "reconnect+resubscribe; hold kept; waiter proceeds", 0);
  fh_latch_destroy(&got);
  rlock_lock_free(lh), rlock_lock_free(lw);
  rlock_client_free(h), rlock_client_free(w);
}

/* The unlock message is published while the waiter has no connection: the
 * resubscription wakes it. Outage shorter than the command timeout. */
TEST(cut_message_lost_in_gap) {
  rlock_client_t *h = fh_client(srv->url, 1000, 1000, 3), *w = fh_client(purl, 1000, 1000, 3);
  rlock_lock_t *lh = th_lock(h, "net:gap"), *lw = th_lock(w, "net:gap");
  CHECK_OK(rlock_lock_lock(lh, 60000)); /* fixed lease: the waiter does not wake on PTTL soon */
  fh_latch_t got;
  fh_latch_init(&got);
  CHECK_OK(rlock_lock_acquire_async(lw, 5, RLOCK_WAIT_FOREVER, 60000, NULL, fh_latch_cb, &got));
  numsub_arg_t ns = {"redisson_lock__channel:{net:gap}", 1};
  CHECK(th_wait_until(numsub_is, &ns, 5000));
  fp_refuse(px, 1);
  fp_cut(px);
  ns.want = 0;
  CHECK(th_wait_until(numsub_is, &ns, 5000));
  CHECK_OK(rlock_lock_unlock(lh)); /* publishes while w is disconnected */
  CHECK(!got.done);
  fp_refuse(px, 0);
  CHECK_MSG(fh_latch_wait(&got, 5000), "the waiter missed the unlock and never retried");
  CHECK_OK(got.status);
  CHECK_OK(rlock_lock_release(lw, 5));
  fh_result("proxy-cut-message-in-gap", "single", "reentrant", "resubscribe wakes the waiter", 0);
  fh_latch_destroy(&got);
  rlock_lock_free(lh), rlock_lock_free(lw);
  rlock_client_free(h), rlock_client_free(w);
}

/* ------------------------------------------------------------ outages (refused)
 * rlock.h: "While the server is unreachable a bounded wait ends with
 * RLOCK_ECONNECT; RLOCK_WAIT_FOREVER keeps waiting until it is back", and a
 * cancel token ends a wait with RLOCK_ECANCELED. The proxy refuses (accepts
 * and closes at once) for the whole outage. Command timeout 500 ms. */

#define OUT_CMD_MS 500

static void outage_begin(void) {
  fp_refuse(px, 1);
  fp_cut(px);
}

static int attempts_above(void *a) {
  void **v = a;
  return stats(v[0]).acquire_attempts > *(uint64_t *)v[1];
}

/* Waits until the client sent (queued: it is not connected) one more acquire
 * try than `since`: the wait is then in the "try in flight" state. */
static void await_try(rlock_client_t *c, uint64_t since) {
  void *a[2] = {c, &since};
  CHECK_MSG(th_wait_until(attempts_above, a, 10000), "no acquire try during the outage");
}

/* Ends the outage and waits until every client behind the proxy is back. */
static void outage_end(int conns) {
  fp_refuse(px, 0);
  CHECK_MSG(th_wait_until(conns_are, &conns, 10000), "clients did not reconnect");
}

/* A wait-forever waiter outlives an outage of 12 command timeouts (its
 * tries meanwhile end with "not connected" and are queued again) and gets
 * the lock once the server is reachable: status 0, one hold on the server. */
TEST(refused_wait_forever_then_granted) {
  rlock_client_t *h = fh_client(srv->url, 1000, OUT_CMD_MS, 3);
  rlock_client_t *w = fh_client(purl, 1000, OUT_CMD_MS, 3);
  rlock_lock_t *lh = th_lock(h, "net:down"), *lw = th_lock(w, "net:down");
  CHECK_OK(rlock_lock_lock(lh, 1500)); /* runs out during the outage */
  fh_latch_t got;
  fh_latch_init(&got);
  CHECK_OK(rlock_lock_acquire_async(lw, 6, RLOCK_WAIT_FOREVER, 60000, NULL, fh_latch_cb, &got));
  numsub_arg_t ns = {"redisson_lock__channel:{net:down}", 1};
  CHECK(th_wait_until(numsub_is, &ns, 5000));
  outage_begin();
  uint64_t a0 = stats(w).acquire_attempts;
  await_try(w, a0); /* the PTTL wake (~1.5 s): a try that cannot be written */
  int64_t outage_ms = 12 * OUT_CMD_MS;
  CHECK_MSG(!fh_latch_wait(&got, outage_ms), "a wait-forever waiter ended with %s during the outage",
            rlock_err_name(got.status));
  outage_end(2);
  /* back: reconnect (backoff <= 200 ms) + one try; generous for a loaded machine */
  CHECK_MSG(fh_latch_wait(&got, 10 * OUT_CMD_MS + 5000), "the waiter hangs after the outage ended");
  CHECK_MSG(got.status == 0, "wait-forever waiter ended with %s: %s", rlock_err_name(got.status), rlock_last_error());
  char o[128];
  CHECK_EQ(th_hget_num(srv, "net:down", th_owner_id(w, 6, o, sizeof o)), 1);
  CHECK_EQ(th_cmd_int(srv, "HLEN", "net:down", NULL), 1);
  CHECK_OK(rlock_lock_release(lw, 6));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "net:down", NULL), 0);
  fh_result("proxy-refuse-6s-wait-forever", "single", "reentrant",
            "waiter waits through the outage, then acquires (status 0, count 1)", 0);
  fh_latch_destroy(&got);
  rlock_lock_free(lh), rlock_lock_free(lw);
  rlock_client_free(h), rlock_client_free(w);
}

/* A bounded wait during an outage ends with RLOCK_ECONNECT, not before its
 * bound and at most about one command timeout after it (its last try waits
 * that long for the connection). Lock free (every try is a transport
 * failure) and lock busy (parked until the bound). */
static void bounded_wait_during_outage(int busy) {
  const int64_t wait_ms = 2000;
  rlock_client_t *h = fh_client(srv->url, 1000, OUT_CMD_MS, 3);
  rlock_client_t *w = fh_client(purl, 1000, OUT_CMD_MS, 3);
  rlock_lock_t *lh = th_lock(h, "net:bounded"), *lw = th_lock(w, "net:bounded");
  if (busy) CHECK_OK(rlock_lock_lock(lh, 60000));
  fh_latch_t got;
  fh_latch_init(&got);
  int64_t t0 = rlock_now_ms();
  if (busy) {
    CHECK_OK(rlock_lock_acquire_async(lw, 7, wait_ms, 60000, NULL, fh_latch_cb, &got));
    numsub_arg_t ns = {"redisson_lock__channel:{net:bounded}", 1};
    CHECK(th_wait_until(numsub_is, &ns, 5000));
    outage_begin();
  } else {
    outage_begin();
    t0 = rlock_now_ms();
    CHECK_OK(rlock_lock_acquire_async(lw, 7, wait_ms, 60000, NULL, fh_latch_cb, &got));
  }
  int64_t upper = wait_ms + 2 * OUT_CMD_MS + 2000; /* + margin for a loaded machine */
  CHECK_MSG(fh_latch_wait(&got, upper + 5000), "a bounded wait hangs during the outage");
  int64_t took = rlock_now_ms() - t0;
  printf("bounded wait (%s, %lld ms) during an outage: %s after %lld ms\n", busy ? "busy" : "free", (long long)wait_ms,
         rlock_err_name(got.status), (long long)took);
  CHECK_MSG(got.status == RLOCK_ECONNECT, "bounded wait ended with %s, want RLOCK_ECONNECT",
            rlock_err_name(got.status));
  CHECK_MSG(took >= wait_ms - 5 && took <= upper, "ended after %lld ms (bound %lld, command timeout %d)",
            (long long)took, (long long)wait_ms, OUT_CMD_MS);
  outage_end(2);
  ping(w); /* whatever w queued has reached the server now */
  char o[128];
  CHECK_EQ(th_hget_num(srv, "net:bounded", th_owner_id(w, 7, o, sizeof o)), -1000);
  CHECK_EQ(stats(w).held, 0);
  if (busy) CHECK_OK(rlock_lock_unlock(lh));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "net:bounded", NULL), 0);
  fh_latch_destroy(&got);
  rlock_lock_free(lh), rlock_lock_free(lw);
  rlock_client_free(h), rlock_client_free(w);
}

TEST(refused_bounded_wait_free) { bounded_wait_during_outage(0); }
TEST(refused_bounded_wait_busy) {
  bounded_wait_during_outage(1);
  fh_result("proxy-refuse-bounded-wait", "single", "reentrant",
            "RLOCK_ECONNECT between the bound and bound + 1 command timeout", 0);
}

/* A cancel during the outage ends a wait-forever wait with RLOCK_ECANCELED
 * and leaves no hold, once the server is reachable again: (a) the waiter is
 * parked (lock busy); (b) its try is queued for the connection (lock free). */
static void cancel_during_outage(int try_queued) {
  rlock_client_t *h = fh_client(srv->url, 1000, OUT_CMD_MS, 3);
  rlock_client_t *w = fh_client(purl, 1000, OUT_CMD_MS, 3);
  rlock_lock_t *lh = th_lock(h, "net:cancel"), *lw = th_lock(w, "net:cancel");
  rlock_cancel_t *tok = NULL;
  CHECK_OK(rlock_cancel_new(&tok));
  fh_latch_t got;
  fh_latch_init(&got);
  if (!try_queued) {
    CHECK_OK(rlock_lock_lock(lh, 60000));
    CHECK_OK(rlock_lock_acquire_async(lw, 8, RLOCK_WAIT_FOREVER, 60000, tok, fh_latch_cb, &got));
    numsub_arg_t ns = {"redisson_lock__channel:{net:cancel}", 1};
    CHECK(th_wait_until(numsub_is, &ns, 5000));
    outage_begin();
  } else {
    outage_begin();
    uint64_t a0 = stats(w).acquire_attempts;
    CHECK_OK(rlock_lock_acquire_async(lw, 8, RLOCK_WAIT_FOREVER, 60000, tok, fh_latch_cb, &got));
    await_try(w, a0);
  }
  CHECK(!got.done);
  int64_t t0 = rlock_now_ms();
  rlock_cancel_trigger(tok);
  /* a try in flight decides first: at most one command timeout */
  CHECK_MSG(fh_latch_wait(&got, 2 * OUT_CMD_MS + 3000), "the cancelled wait did not end");
  printf("cancel during the outage (%s): %s after %lld ms\n", try_queued ? "try queued" : "parked",
         rlock_err_name(got.status), (long long)(rlock_now_ms() - t0));
  CHECK_MSG(got.status == RLOCK_ECANCELED, "cancelled wait ended with %s, want RLOCK_ECANCELED",
            rlock_err_name(got.status));
  outage_end(2);
  ping(w);
  char o[128];
  th_owner_id(w, 8, o, sizeof o);
  CHECK_EQ(th_hget_num(srv, "net:cancel", o), -1000);
  CHECK_EQ(stats(w).held, 0);
  if (!try_queued) CHECK_OK(rlock_lock_unlock(lh));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "net:cancel", NULL), 0);
  rlock_cancel_free(tok);
  fh_latch_destroy(&got);
  rlock_lock_free(lh), rlock_lock_free(lw);
  rlock_client_free(h), rlock_client_free(w);
}

TEST(refused_cancel_parked) { cancel_during_outage(0); }
TEST(refused_cancel_try_queued) {
  cancel_during_outage(1);
  fh_result("proxy-refuse-cancel", "single", "reentrant",
            "RLOCK_ECANCELED (parked or try queued); no hold after the outage", 0);
}

/* Reentrant acquire during a blackhole: ETIMEDOUT, and the count is back to
 * exactly what it was (not 2 = applied and not given back, not 3 = each
 * re-send counted, not 0 = given back twice). */
static void blackhole_acquire(int dirs, const char *label) {
  rlock_client_t *c = fh_client(purl, 30000, 300, 2);
  rlock_lock_t *l = th_lock(c, "net:bh");
  char o[128];
  CHECK_OK(rlock_lock_lock(l, 30000));
  CHECK_EQ(th_hget_num(srv, "net:bh", owner(c, o)), 1);
  long long ev0 = th_cmdstat(srv, "evalsha");
  fp_blackhole(px, dirs);
  int64_t t0 = rlock_now_ms();
  CHECK_RC(rlock_lock_trylock(l, 0, 30000), RLOCK_ETIMEDOUT);
  int64_t took = rlock_now_ms() - t0;
  printf("ETIMEDOUT after %lld ms (timeout 300, 2 re-sends)\n", (long long)took);
  CHECK(took >= 800 && took < 3000);
  th_sleep_ms(1500); /* the blackhole lasts: the undo's own re-sends pile up too */
  fp_blackhole(px, 0);
  ping(c);
  long long sends = th_cmdstat(srv, "evalsha") - ev0;
  printf("%s: %lld script calls reached the server (3 acquire sends + undo sends)\n", label, sends);
  CHECK(sends >= 4);
  CHECK_EQ(th_hget_num(srv, "net:bh", o), 1);
  int64_t n = 0;
  CHECK_OK(rlock_lock_hold_count(l, RLOCK_OWNER_SELF, &n));
  CHECK_EQ(n, 1);
  rlock_stats_t s = stats(c);
  CHECK_EQ(s.held, 1);
  CHECK(s.timeouts >= 3);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "net:bh", NULL), 0);
  fh_result(label, "single", "reentrant", "ETIMEDOUT; count unchanged (1) after re-sends + undo", 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(blackhole_both_acquire) { blackhole_acquire(FP_BOTH, "proxy-blackhole-both-acquire"); }
TEST(blackhole_replies_acquire) { blackhole_acquire(FP_DOWN, "proxy-blackhole-replies-acquire"); }

/* Unlock during a blackhole: ETIMEDOUT after re-sends; applied exactly once. */
static void blackhole_unlock(int dirs, const char *label) {
  rlock_client_t *c = fh_client(purl, 30000, 300, 2);
  rlock_client_on_lost(c, on_lost, NULL);
  rlock_lock_t *l = th_lock(c, "net:bhu");
  char o[128];
  owner(c, o);
  CHECK_OK(rlock_lock_lock(l, 30000));
  CHECK_OK(rlock_lock_lock(l, 30000));
  CHECK_EQ(th_hget_num(srv, "net:bhu", o), 2);
  long long ev0 = th_cmdstat(srv, "evalsha");
  fp_blackhole(px, dirs);
  CHECK_RC(rlock_lock_unlock(l), RLOCK_ETIMEDOUT);
  fp_blackhole(px, 0);
  ping(c);
  long long sends = th_cmdstat(srv, "evalsha") - ev0;
  printf("%s: %lld unlock sends reached the server\n", label, sends);
  /* 3 during the call; after it, the unlock goes on alone (same id) until
   * answered, so the owner's next request cannot overtake a late copy */
  CHECK(sends >= 3);
  CHECK_EQ(th_hget_num(srv, "net:bhu", o), 1); /* 2 - 1, once */
  /* the last hold: unlock under blackhole, outcome unknown to the client */
  int lost0 = atomic_load(&lost_calls);
  fp_blackhole(px, dirs);
  CHECK_RC(rlock_lock_unlock(l), RLOCK_ETIMEDOUT);
  fp_blackhole(px, 0);
  ping(c);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "net:bhu", NULL), 0); /* released once, nothing left */
  /* The client could not know: a plain unlock by the user now says ENOTHELD. */
  CHECK_RC(rlock_lock_unlock(l), RLOCK_ENOTHELD);
  /* The hold ended by its owner's own unlock (applied once, its answer lost):
   * that is not a lost lock (rlock.h: lost = ended without an unlock by its
   * owner), so the lock-lost callback must not run. */
  int lost = atomic_load(&lost_calls) - lost0;
  printf("%s: lost callbacks after the unknown-outcome unlock: %d\n", label, lost);
  CHECK_EQ(lost, 0);
  fh_result(label, "single", "reentrant",
            "ETIMEDOUT; 3 sends applied once (count 2->1); last-hold unlock released once", 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(blackhole_both_unlock) { blackhole_unlock(FP_BOTH, "proxy-blackhole-both-unlock"); }
TEST(blackhole_replies_unlock) { blackhole_unlock(FP_DOWN, "proxy-blackhole-replies-unlock"); }

/* Unlocks whose answers are lost past the hold's lease (the connection
 * blackholed while the owner releases: its re-sends time out while no
 * renewal gets through). The hold ends by its owner's own unlocks (each
 * call says ETIMEDOUT, ECONNLOST or ECONNECT: counted as done, rlock.h),
 * whatever the lease did meanwhile: the lock-lost callback must not run,
 * before the calls return or after. Watchdog 1000 ms, command timeout
 * 500 ms, 3 re-sends: the unlocks' 2 s span the lease's end. depth 1: one
 * unlock (sync, the fast path); depth 2: a hold taken twice, two unlocks in
 * flight together (async): the expiry waits for both. */
static int answer_lost_rc(int rc) { return rc == RLOCK_ETIMEDOUT || rc == RLOCK_ECONNLOST || rc == RLOCK_ECONNECT; }
static void unlocks_pending_past_lease(const char *name, int depth, int64_t timeout_ms, int async) {
  rlock_client_t *c = fh_client(purl, 1000, timeout_ms, timeout_ms > 1000 ? 1 : 3);
  rlock_client_on_lost(c, on_lost, NULL);
  rlock_lock_t *l = th_lock(c, name);
  for (int i = 0; i < depth; i++) CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  int lost0 = atomic_load(&lost_calls);
  int64_t vu = 0;
  CHECK_OK(rlock_lock_valid_until(l, RLOCK_OWNER_SELF, &vu));
  fp_blackhole(px, FP_BOTH);
  int64_t t0 = rlock_now_ms();
  if (!async) {
    int rc = rlock_lock_unlock(l);
    CHECK_MSG(answer_lost_rc(rc), "unlock: %s", rlock_err_name(rc));
  } else {
    fh_latch_t d[2];
    for (int i = 0; i < depth; i++) {
      fh_latch_init(&d[i]);
      CHECK_OK(rlock_lock_release_async(l, RLOCK_OWNER_SELF, fh_latch_cb, &d[i]));
    }
    for (int i = 0; i < depth; i++) {
      CHECK(fh_latch_wait(&d[i], 10000));
      CHECK_MSG(answer_lost_rc(d[i].status), "unlock %d: %s", i + 1, rlock_err_name(d[i].status));
      fh_latch_destroy(&d[i]);
    }
  }
  printf("# %d unlock(s) returned after %lld ms, %lld ms past the valid-until\n", depth,
         (long long)(rlock_now_ms() - t0), (long long)(rlock_now_ms() - vu));
  CHECK_MSG(rlock_now_ms() > vu, "the unlocks ended before the lease: the test did not span it");
  fp_blackhole(px, 0);
  ping(c);
  CHECK(th_wait_until(key_gone, (void *)name, 5000));
  ping(c);
  int lost = atomic_load(&lost_calls) - lost0;
  CHECK_MSG(lost == 0, "the lock-lost callback ran %d time(s) for a hold of depth %d its owner was releasing", lost,
            depth);
  CHECK_EQ(stats(c).held, 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}
TEST(unlock_pending_past_lease) { unlocks_pending_past_lease("net:upl", 1, 500, 0); }
TEST(two_unlocks_pending_past_lease) { unlocks_pending_past_lease("net:upl2", 2, 500, 1); }
/* The first copy of an unlock (the I/O thread's: async) still unanswered
 * when the lease ends: a command timeout of 1500 ms against the 1000 ms
 * watchdog lease (1 re-send), so no answer is lost before then. */
TEST(unlock_first_copy_past_lease) { unlocks_pending_past_lease("net:upl1", 1, 1500, 1); }

/* A partition longer than the watchdog lease: the holder is told; the server
 * frees the lock (no renewal reached it). */
TEST(partition_longer_than_lease) {
  rlock_client_t *c = fh_client(purl, 1000, 300, 2);
  rlock_client_on_lost(c, on_lost, NULL);
  rlock_lock_t *l = th_lock(c, "net:part");
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  int lost0 = atomic_load(&lost_calls);
  int64_t vu = 0;
  CHECK_OK(rlock_lock_valid_until(l, RLOCK_OWNER_SELF, &vu));
  fp_blackhole(px, FP_BOTH);
  CHECK(th_wait_until(key_gone, "net:part", 3000)); /* the server lets it expire */
  int64_t gone_at = rlock_now_ms();
  for (int i = 0; i < 300 && atomic_load(&lost_calls) == lost0; i++) th_sleep_ms(10);
  CHECK_MSG(atomic_load(&lost_calls) == lost0 + 1, "the holder was not told");
  printf("key expired %lld ms after valid_until; holder told %lld ms after that\n", (long long)(gone_at - vu),
         (long long)(rlock_now_ms() - gone_at));
  CHECK(gone_at >= vu - 20); /* not freed before the holder's valid-until (poll granularity) */
  CHECK_RC(rlock_lock_valid_until(l, RLOCK_OWNER_SELF, &vu), RLOCK_ENOTHELD);
  fp_blackhole(px, 0);
  ping(c);
  CHECK_RC(rlock_lock_unlock(l), RLOCK_ENOTHELD);
  CHECK_EQ(stats(c).held, 0);
  fh_result("proxy-partition>lease", "single", "reentrant", "lost callback; lock freed after valid_until", 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* The reconnect backoff doubles from reconnect_min_ms up to reconnect_max_ms
 * and stays there (rlock.h): through a 3 s refusal a client with 20 / 100 ms
 * keeps trying about every 100 ms on each of its 2 connections (an uncapped
 * doubling would try 7 times each, the last one 2.5 s after the one
 * before), and once connections are accepted again it is back within a
 * few caps. */
TEST(refused_backoff_capped) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = purl;
  o.reconnect_min_ms = 20;
  o.reconnect_max_ms = 100;
  o.command_timeout_ms = 500;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  int two = 2;
  CHECK(th_wait_until(conns_are, &two, 5000));
  uint64_t a0 = fp_accepted(px);
  fp_refuse(px, 1);
  fp_cut(px);
  th_sleep_ms(3000); /* the scenario: a 3 s outage */
  uint64_t tries = fp_accepted(px) - a0;
  int64_t t0 = rlock_now_ms();
  fp_refuse(px, 0);
  CHECK_MSG(th_wait_until(conns_are, &two, 5000), "the client did not come back");
  int64_t back = rlock_now_ms() - t0;
  printf("3 s refused: %llu connection attempts; back %lld ms after the refusal ended (backoff 20..100 ms)\n",
         (unsigned long long)tries, (long long)back);
  CHECK_MSG(tries >= 20, "%llu connection attempts in 3 s: the backoff grew past reconnect_max_ms",
            (unsigned long long)tries);
  CHECK_MSG(back < 1000, "back %lld ms after the refusal ended (reconnect_max_ms 100)", (long long)back);
  rlock_client_free(c);
}

TEST(delay) {
  rlock_client_t *c = fh_client(purl, 30000, 1000, 2);
  rlock_lock_t *l = th_lock(c, "net:delay");
  fp_delay(px, 50);
  int64_t t0 = rlock_now_ms();
  for (int i = 0; i < 5; i++) {
    CHECK_OK(rlock_lock_lock(l, 30000));
    CHECK_OK(rlock_lock_unlock(l));
  }
  int64_t per = (rlock_now_ms() - t0) / 10;
  printf("lock/unlock with 50 ms each way: %lld ms per call\n", (long long)per);
  CHECK(per >= 95); /* 2 x 50 ms; the proxy's clock has 1 ms granularity */
  CHECK_EQ(stats(c).timeouts, 0);
  fp_delay(px, 0);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "net:delay", NULL), 0);
  fh_result("proxy-delay-50ms", "single", "reentrant", "works, slower; no timeouts", 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* A bounded acquire whose try was applied but whose answer is lost after
 * the wait bound passed (replies blackholed, then the connection cut): the
 * try is re-sent with the same id once the client has reconnected and the
 * latch answers "granted" (lock.c acquire_failed: the wait bound is about
 * waiting for the lock, not about the transport). Before: the re-send got
 * the bound as its wait_end (803f0d9), was given up before the reconnect,
 * the hold was undone and the call ended RLOCK_ECONNECT with the lock free. */
static int applied(void *a) { return th_cmd_int(srv, "EXISTS", (const char *)a, NULL) == 1; }

TEST(answer_lost_after_bound_resent) {
  rlock_client_t *c = fh_client(purl, 30000, 5000, 2);
  rlock_lock_t *l = th_lock(c, "net:lostbound");
  ping(c); /* connected */
  fh_latch_t done;
  fh_latch_init(&done);
  fp_blackhole(px, FP_DOWN);
  int64_t t0 = rlock_now_ms();
  CHECK_OK(rlock_lock_acquire_async(l, (rlock_owner_t)42, 300, 30000, NULL, fh_latch_cb, &done));
  CHECK_MSG(th_wait_until(applied, "net:lostbound", 5000), "the try never reached the server");
  int64_t left = t0 + 400 - rlock_now_ms();
  if (left > 0) th_sleep_ms(left); /* the fault: the answer is lost after the 300 ms bound */
  fp_cut(px);
  fp_blackhole(px, 0);
  CHECK_MSG(fh_latch_wait(&done, 20000), "the acquire never ended");
  printf("# acquire ended %s after %lld ms\n", rlock_err_name(done.status), (long long)(rlock_now_ms() - t0));
  CHECK_RC(done.status, RLOCK_OK);
  char o[128];
  CHECK_EQ(th_hget_num(srv, "net:lostbound", th_owner_id(c, 42, o, sizeof o)), 1);
  CHECK_OK(rlock_lock_release(l, (rlock_owner_t)42));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "net:lostbound", NULL), 0);
  fh_latch_destroy(&done);
  rlock_lock_free(l);
  rlock_client_free(c);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 240);
  srv = th_server_start(NULL);
  px = fp_start(srv->port);
  snprintf(purl, sizeof purl, "redis://127.0.0.1:%d", fp_port(px));
  RUN(cut_reconnect_resubscribe);
  RUN(cut_message_lost_in_gap);
  RUN(blackhole_both_acquire);
  RUN(blackhole_replies_acquire);
  RUN(blackhole_both_unlock);
  RUN(blackhole_replies_unlock);
  RUN(unlock_pending_past_lease);
  RUN(two_unlocks_pending_past_lease);
  RUN(unlock_first_copy_past_lease);
  RUN(partition_longer_than_lease);
  RUN(delay);
  RUN(refused_backoff_capped);
  RUN(refused_wait_forever_then_granted);
  RUN(refused_bounded_wait_free);
  RUN(refused_bounded_wait_busy);
  RUN(refused_cancel_parked);
  RUN(refused_cancel_try_queued);
  RUN(answer_lost_after_bound_resent);
  fp_stop(px);
  th_server_stop(srv);
  return th_done();
}
