/* test_fast.c -- the fast path (lib/fast.c): blocking locks and unlocks done
 * on the calling thread over the client's fast connection. It is used once
 * the thread knows the hold count (after its first release of the name), it
 * keeps the lock's state exactly as the I/O thread's path does (counts,
 * `held`), the watchdog renews what it took, a renewal racing with a fast
 * unlock is no loss, an answer lost on the fast connection is re-sent by the
 * I/O thread with the same request id (counted once), a name the client is
 * busy with goes through the I/O thread, and the option turns it off. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static th_server_t *srv;

static rlock_stats_t stats(rlock_client_t *c) {
  rlock_stats_t s;
  rlock_client_stats(c, &s);
  return s;
}

static rlock_client_t *client_opts(int64_t watchdog_ms, int64_t command_timeout_ms, int fast) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = srv->url;
  if (watchdog_ms) o.watchdog_timeout_ms = watchdog_ms;
  if (command_timeout_ms) o.command_timeout_ms = command_timeout_ms;
  o.fast_path = fast;
  rlock_client_t *c = NULL;
  int rc = rlock_client_new(&c, &o);
  if (rc) th_fail(__FILE__, __LINE__, "client_new: %s: %s", rlock_err_name(rc), rlock_last_error());
  return c;
}

/* The first release of a name teaches the thread its count: from then on
 * its locks and unlocks of that name are fast. */
static void warm_up(rlock_lock_t *l) {
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  CHECK_OK(rlock_lock_unlock(l));
}

TEST(used_after_first_release) {
  rlock_client_t *c = client_opts(0, 0, 1);
  rlock_lock_t *l = th_lock(c, "fast:used");
  char o[128];
  th_owner_id(c, RLOCK_OWNER_THREAD | (uint64_t)th_gettid(), o, sizeof o);
  warm_up(l);
  uint64_t f0 = stats(c).fast_calls;
  for (int i = 0; i < 3; i++) {
    CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
    CHECK_EQ(th_hget_num(srv, "fast:used", o), 1);
    long long pttl = th_cmd_int(srv, "PTTL", "fast:used", NULL);
    CHECK(pttl > 20000 && pttl <= 30000); /* the watchdog lease */
    CHECK_OK(rlock_lock_unlock(l));
    CHECK_EQ(th_cmd_int(srv, "EXISTS", "fast:used", NULL), 0);
  }
  CHECK_EQ(stats(c).fast_calls, f0 + 6);
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(reentrant_counts_and_held) {
  rlock_client_t *c = client_opts(0, 0, 1);
  rlock_lock_t *l = th_lock(c, "fast:reentrant");
  char o[128];
  th_owner_id(c, RLOCK_OWNER_THREAD | (uint64_t)th_gettid(), o, sizeof o);
  warm_up(l);
  rlock_stats_t s0 = stats(c);
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  CHECK_EQ(stats(c).held, s0.held + 1); /* exact at once, not when the I/O thread hears of it */
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  CHECK_EQ(th_hget_num(srv, "fast:reentrant", o), 2);
  CHECK_EQ(stats(c).held, s0.held + 1);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_hget_num(srv, "fast:reentrant", o), 1);
  int64_t count = 0;
  CHECK_OK(rlock_lock_hold_count(l, RLOCK_OWNER_SELF, &count)); /* through the I/O thread */
  CHECK_EQ(count, 1);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "fast:reentrant", NULL), 0);
  CHECK_EQ(stats(c).held, s0.held);
  CHECK_EQ(stats(c).fast_calls, s0.fast_calls + 4);
  CHECK_RC(rlock_lock_unlock(l), RLOCK_ENOTHELD);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* A hold taken on the fast path is the watchdog's as any other: renewed
 * until it is released (lease 600 ms: three leases pass while it is held). */
TEST(watchdog_renews_fast_hold) {
  rlock_client_t *c = client_opts(600, 0, 1);
  rlock_lock_t *l = th_lock(c, "fast:renewed");
  warm_up(l);
  uint64_t f0 = stats(c).fast_calls, r0 = stats(c).renewed_locks;
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  CHECK_EQ(stats(c).fast_calls, f0 + 1);
  CHECK_MSG(TH_STAT_REACHES(c, renewed_locks, r0 + 9, 10000), "the fast hold was not renewed (%llu renewals)",
            (unsigned long long)(stats(c).renewed_locks - r0));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "fast:renewed", NULL), 1);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "fast:renewed", NULL), 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* Renewals every 100 ms while the thread locks and unlocks without pause: a
 * renewal that reaches the server after a fast unlock finds the hold gone;
 * that is the unlock, not a loss. */
TEST(renewal_races_are_no_loss) {
  rlock_client_t *c = client_opts(300, 0, 1);
  th_lost_t lost = TH_LOST_INIT;
  rlock_client_on_lost(c, th_lost_record, &lost);
  rlock_lock_t *l = th_lock(c, "fast:race");
  warm_up(l);
  uint64_t f0 = stats(c).fast_calls, r0 = stats(c).renewals;
  int64_t until = th_now_ms() + 1500;
  int pairs = 0;
  while (th_now_ms() < until || stats(c).renewals < r0 + 5) {
    CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
    CHECK_OK(rlock_lock_unlock(l));
    pairs++;
  }
  printf("  %d pairs, %llu fast calls, %llu renewal calls\n", pairs, (unsigned long long)(stats(c).fast_calls - f0),
         (unsigned long long)(stats(c).renewals - r0));
  CHECK_EQ(stats(c).fast_calls, f0 + 2 * (uint64_t)pairs);
  pthread_mutex_lock(&lost.mu);
  int calls = lost.calls;
  pthread_mutex_unlock(&lost.mu);
  CHECK_MSG(calls == 0, "%d lost callbacks for holds that were unlocked", calls);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* Pauses the server's writes for ms (CLIENT PAUSE WRITE): scripts wait. */
static void pause_writes(int ms) {
  char t[16];
  snprintf(t, sizeof t, "%d", ms);
  redisReply *r = th_cmd(srv, "CLIENT", "PAUSE", t, "WRITE", NULL);
  CHECK_MSG(r->type == REDIS_REPLY_STATUS, "CLIENT PAUSE: %s", r->str);
  th_reply_free(r);
}

/* An acquire whose answer does not come on the fast connection within the
 * command timeout: the I/O thread sends it again with the same request id;
 * both copies run once the pause ends, and the hold counts once. */
TEST(lost_acquire_answer_counts_once) {
  rlock_client_t *c = client_opts(0, 300, 1);
  rlock_lock_t *l = th_lock(c, "fast:lost-acquire");
  char o[128];
  th_owner_id(c, RLOCK_OWNER_THREAD | (uint64_t)th_gettid(), o, sizeof o);
  warm_up(l);
  uint64_t f0 = stats(c).fast_calls, t0 = stats(c).scripts_sent;
  pause_writes(700);
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  CHECK_EQ(stats(c).fast_calls, f0); /* not answered on the fast path */
  CHECK_MSG(stats(c).scripts_sent >= t0 + 2, "the try was not sent again (%llu scripts)",
            (unsigned long long)(stats(c).scripts_sent - t0));
  CHECK_EQ(th_hget_num(srv, "fast:lost-acquire", o), 1);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "fast:lost-acquire", NULL), 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* The same for an unlock of a lock held twice: one hold goes, not two. */
TEST(lost_unlock_answer_counts_once) {
  rlock_client_t *c = client_opts(0, 300, 1);
  th_lost_t lost = TH_LOST_INIT;
  rlock_client_on_lost(c, th_lost_record, &lost);
  rlock_lock_t *l = th_lock(c, "fast:lost-unlock");
  char o[128];
  th_owner_id(c, RLOCK_OWNER_THREAD | (uint64_t)th_gettid(), o, sizeof o);
  warm_up(l);
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  uint64_t f0 = stats(c).fast_calls;
  pause_writes(700);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(stats(c).fast_calls, f0);
  CHECK_EQ(th_hget_num(srv, "fast:lost-unlock", o), 1);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "fast:lost-unlock", NULL), 0);
  pthread_mutex_lock(&lost.mu);
  CHECK_EQ(lost.calls, 0);
  pthread_mutex_unlock(&lost.mu);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* An unlock whose answer does not come on the fast connection in time: the
 * I/O thread sends it again (same id). A renewal that reached the server
 * after the first copy finds the hold gone: still the unlock, not a loss.
 * The server pauses writes 700 ms; the fast unlock gives up after 300 ms;
 * a renewal (every 500 ms) sent in the last 300 ms of the pause is answered
 * '0' in time (on the command connection, before the unlock's second copy):
 * several rounds, so that one is. */
TEST(renewal_during_lost_unlock_answer_is_no_loss) {
  rlock_client_t *c = client_opts(1500, 300, 1);
  th_lost_t lost = TH_LOST_INIT;
  rlock_client_on_lost(c, th_lost_record, &lost);
  rlock_lock_t *l = th_lock(c, "fast:lost-unlock-renewal");
  warm_up(l);
  for (int round = 0; round < 6; round++) {
    uint64_t f0 = stats(c).fast_calls;
    CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
    CHECK_EQ(stats(c).fast_calls, ++f0); /* the thread knows its count: the unlock is tried fast */
    pause_writes(700);
    CHECK_OK(rlock_lock_unlock(l));
    CHECK_EQ(stats(c).fast_calls, f0); /* its answer was lost on the fast connection */
    /* a renewal sent before the unlock's second copy was answered before it */
    CHECK_EQ(th_cmd_int(srv, "EXISTS", "fast:lost-unlock-renewal", NULL), 0);
  }
  pthread_mutex_lock(&lost.mu);
  int calls = lost.calls;
  pthread_mutex_unlock(&lost.mu);
  CHECK_MSG(calls == 0, "%d lost callbacks for holds that were unlocked", calls);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* Another thread of the client waits for the name: the holder's unlock goes
 * through the I/O thread (the name is busy), and the waiter gets the lock. */
typedef struct waiter_arg {
  rlock_lock_t *l;
  atomic_int rc;
} waiter_arg_t;

static void *waiter(void *p) {
  waiter_arg_t *w = p;
  int rc = rlock_lock_trylock(w->l, 10000, RLOCK_LEASE_WATCHDOG);
  if (rc == 0) rc = rlock_lock_unlock(w->l);
  atomic_store(&w->rc, rc);
  return NULL;
}

/* Someone is subscribed to the channel (a NUL-terminated name): a waiter parked. */
static int waiter_parked(void *channel) { return th_numsub(srv, channel) > 0; }

TEST(busy_name_goes_through_io_thread) {
  rlock_client_t *c = client_opts(0, 0, 1);
  rlock_lock_t *l = th_lock(c, "fast:busy");
  warm_up(l);
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  waiter_arg_t w = {l, -1000};
  pthread_t t;
  pthread_create(&t, NULL, waiter, &w);
  CHECK_MSG(th_wait_until(waiter_parked, "redisson_lock__channel:{fast:busy}", 5000), "the waiter never subscribed");
  uint64_t f0 = stats(c).fast_calls;
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(stats(c).fast_calls, f0);
  pthread_join(t, NULL);
  CHECK_EQ(atomic_load(&w.rc), 0);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "fast:busy", NULL), 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* A client freed right after fast calls: the latch keys of those calls are
 * deleted before it goes (the posts are drained at close), none is left. */
static long long latch_keys(const char *name) {
  char pat[128];
  long long n = 0;
  const char *kinds[2] = {"rlock_acquire_latch", "redisson_unlock_latch"};
  for (int i = 0; i < 2; i++) {
    snprintf(pat, sizeof pat, "%s:{%s}:*", kinds[i], name);
    redisReply *r = th_cmd(srv, "KEYS", pat, NULL);
    CHECK(r->type == REDIS_REPLY_ARRAY);
    n += (long long)r->elements;
    th_reply_free(r);
  }
  return n;
}

/* A fast re-entry writes its latch (see fast.c) and posts its DEL to the I/O
 * thread; freed right after, the client must still apply that post (the
 * drain when closing) and delete the latch before it returns. */
TEST(freed_after_fast_calls_leaves_no_latch) {
  for (int round = 0; round < 20; round++) {
    rlock_client_t *c = client_opts(0, 0, 1);
    rlock_lock_t *l = th_lock(c, "fast:freed");
    warm_up(l);
    uint64_t f0 = stats(c).fast_calls;
    CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
    CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG)); /* a re-entry: latched */
    CHECK_OK(rlock_lock_unlock(l));
    CHECK_OK(rlock_lock_unlock(l));
    CHECK_EQ(stats(c).fast_calls, f0 + 4);
    rlock_lock_free(l);
    rlock_client_free(c);
    long long n = latch_keys("fast:freed");
    CHECK_MSG(n == 0, "%lld latch keys left behind (round %d)", n, round);
  }
}

TEST(option_off) {
  rlock_client_t *c = client_opts(0, 0, 0);
  rlock_lock_t *l = th_lock(c, "fast:off");
  for (int i = 0; i < 3; i++) warm_up(l);
  CHECK_EQ(stats(c).fast_calls, 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* Two children of one thread that used the fast path draw their own request
 * ids: a latch answers a request of the same id as "applied". Each child, on
 * its own client, takes the lock of one name once through the I/O thread
 * (its thread learns its count), then locks and unlocks it on the fast path
 * and exits at once: its latch keys are left on the server (they expire).
 * The second child, after the first, must really get the lock: with the
 * first one's ids, its fast lock would be answered by the first's latch and
 * take nothing. */
static int child(int second) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = srv->url;
  rlock_client_t *c;
  if (rlock_client_new(&c, &o)) return 10;
  rlock_lock_t *l;
  if (rlock_lock_new(c, "fast:fork", 9, &l)) return 11;
  if (rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG) || rlock_lock_unlock(l)) return 12; /* through the I/O thread */
  rlock_stats_t s0, s1;
  rlock_client_stats(c, &s0);
  if (rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG)) return 13;
  rlock_client_stats(c, &s1);
  if (s1.fast_calls != s0.fast_calls + 1) return 14; /* not on the fast path */
  char owner[128];
  th_owner_id(c, RLOCK_OWNER_THREAD | (uint64_t)th_gettid(), owner, sizeof owner);
  if (th_hget_num(srv, "fast:fork", owner) != 1) return second ? 15 : 16; /* the lock was not taken */
  if (rlock_lock_unlock(l)) return 17;
  return 0; /* no rlock_client_free: the latch keys stay */
}

TEST(forked_children_draw_their_own_ids) {
  rlock_client_t *c = client_opts(0, 0, 1);
  rlock_lock_t *l = th_lock(c, "fast:parent");
  warm_up(l);
  warm_up(l); /* this thread has drawn fast request ids */
  rlock_lock_free(l);
  rlock_client_free(c); /* no I/O thread at the fork (TSan does not support a fork of threads) */
  pid_t a = th_fork();
  if (a == 0) th_exit_by_exec(child(0));
  CHECK_EQ(th_wait_child(a), 0);
  pid_t b = th_fork();
  if (b == 0) th_exit_by_exec(child(1));
  int rc = th_wait_child(b);
  CHECK_MSG(rc == 0, "the second child: %d%s", rc,
            rc == 15 ? " (its fast lock was answered by the first's latch)" : "");
}

/* An unlock that woke a waiter of another client leaves a handoff mark: the
 * client's next acquire of the name lets the woken waiter go first, and no
 * fast call of the name passes it. The mark is used up by the next acquire
 * through the I/O thread, a trylock without wait too: a program that only
 * trylocks the name gets the fast path back. */
TEST(handoff_mark_used_up_by_trylock) {
  rlock_client_t *c = client_opts(0, 0, 1), *o = client_opts(0, 0, 1);
  rlock_lock_t *l = th_lock(c, "fast:handoff"), *lo = th_lock(o, "fast:handoff");
  warm_up(l);
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  waiter_arg_t w = {lo, -1000};
  pthread_t t;
  pthread_create(&t, NULL, waiter, &w);
  CHECK_MSG(th_wait_until(waiter_parked, "redisson_lock__channel:{fast:handoff}", 5000),
            "the other client's waiter never subscribed");
  uint64_t f0 = stats(c).fast_calls;
  CHECK_OK(rlock_lock_unlock(l)); /* fast; its message wakes the other client's waiter */
  CHECK_EQ(stats(c).fast_calls, f0 + 1);
  pthread_join(t, NULL);
  CHECK_EQ(atomic_load(&w.rc), 0);
  for (int i = 0; i < 3; i++) {
    CHECK_OK(rlock_lock_trylock(l, 0, RLOCK_LEASE_WATCHDOG));
    CHECK_OK(rlock_lock_unlock(l));
  }
  uint64_t f1 = stats(c).fast_calls;
  CHECK_MSG(f1 >= f0 + 3, "no trylock or unlock of the name was fast after the handoff (%llu fast calls)",
            (unsigned long long)(f1 - f0 - 1));
  rlock_lock_free(l);
  rlock_lock_free(lo);
  rlock_client_free(c);
  rlock_client_free(o);
}

/* Another client holds the lock (taken on its fast path, so no latch key
 * exists); this client's thread knows its count (count 0), so its trylock
 * and its lock go out as the fast path's unlatched first copy. The script's
 * one EXISTS of the lock and the latch must see the lock: busy, the holder's
 * PTTL, nothing written. (The engine's contention tests seldom reach the fast
 * path with the lock held: a script whose fast form ignored the lock passed
 * test_mutex_threads.) */
TEST(fast_first_copy_of_held_lock_is_refused) {
  rlock_client_t *a = client_opts(0, 0, 1), *b = client_opts(0, 0, 1);
  rlock_lock_t *la = th_lock(a, "fast:held"), *lb = th_lock(b, "fast:held");
  warm_up(la);
  warm_up(lb);
  CHECK_OK(rlock_lock_lock(la, RLOCK_LEASE_WATCHDOG));
  uint64_t f0 = stats(b).fast_calls;
  int rc = rlock_lock_trylock(lb, 0, RLOCK_LEASE_WATCHDOG);
  if (rc == 0) rlock_lock_unlock(lb);
  CHECK_EQ(stats(b).fast_calls, f0 + 1); /* the fast path was asked */
  CHECK_EQ(rc, RLOCK_EBUSY);
  CHECK_EQ(th_cmd_int(srv, "HLEN", "fast:held", NULL), 1);
  CHECK_OK(rlock_lock_unlock(la));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "fast:held", NULL), 0);
  rlock_lock_free(la);
  rlock_lock_free(lb);
  rlock_client_free(a);
  rlock_client_free(b);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 200);
  srv = th_server_start(NULL);
  RUN(used_after_first_release);
  RUN(reentrant_counts_and_held);
  RUN(watchdog_renews_fast_hold);
  RUN(renewal_races_are_no_loss);
  RUN(lost_acquire_answer_counts_once);
  RUN(lost_unlock_answer_counts_once);
  RUN(renewal_during_lost_unlock_answer_is_no_loss);
  RUN(busy_name_goes_through_io_thread);
  RUN(option_off);
  RUN(handoff_mark_used_up_by_trylock);
  RUN(freed_after_fast_calls_leaves_no_latch);
  RUN(forked_children_draw_their_own_ids);
  RUN(fast_first_copy_of_held_lock_is_refused);
  th_server_stop(srv);
  return th_done();
}
