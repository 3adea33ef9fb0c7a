/* test_watchdog.c -- the watchdog: with watchdog_timeout_ms = 1000 a
 * watchdog lock stays held for several timeouts (checked on the server
 * through the raw client), valid_until advances, renewals are batched over
 * the held locks, fixed-lease locks are not renewed, and renewals stop after
 * unlock. Waiting out time is the point of this test. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static th_server_t *srv;

static int renewed_caught_up(void *c) {
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  return st.renewed_locks >= st.renewals;
}

TEST(keeps_lock_alive) {
  rlock_client_t *c = th_client(srv->url, 1000);
  rlock_lock_t *l = th_lock(c, "wd:alive");
  char owner[128];
  th_owner_id(c, RLOCK_OWNER_THREAD | (uint64_t)th_gettid(), owner, sizeof owner);

  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  long long pttl = th_cmd_int(srv, "PTTL", "wd:alive", NULL);
  CHECK_MSG(pttl > 0 && pttl <= 1000, "PTTL %lld, want <= watchdog 1000", pttl);
  int64_t until0 = 0, until = 0;
  CHECK_OK(rlock_lock_valid_until(l, RLOCK_OWNER_SELF, &until0));
  CHECK(until0 > rlock_now_ms() && until0 <= rlock_now_ms() + 1000);

  /* The scenario: 3.5 timeouts pass, sampled every 100 ms; without
   * renewals the key would be long gone. */
  int64_t end = th_now_ms() + 3500;
  long long min_pttl = 1000;
  while (th_now_ms() < end) {
    th_sleep_ms(100);
    pttl = th_cmd_int(srv, "PTTL", "wd:alive", NULL);
    CHECK_MSG(pttl > 0, "lock expired under the watchdog (PTTL %lld)", pttl);
    CHECK_EQ(th_hget_num(srv, "wd:alive", owner), 1);
    if (pttl < min_pttl) min_pttl = pttl;
  }
  /* Renewed every third of the timeout; how close it came to running out
   * depends on the machine's load: reported, the bound is "never expired". */
  printf("# lowest PTTL seen: %lld ms (watchdog 1000)\n", min_pttl);
  CHECK_OK(rlock_lock_valid_until(l, RLOCK_OWNER_SELF, &until));
  CHECK_MSG(until > until0 + 2000, "valid_until advanced by %lld ms only", (long long)(until - until0));
  CHECK(until > rlock_now_ms());

  rlock_stats_t st;
  rlock_client_stats(c, &st);
  /* Surviving 3.5 leases of 1000 ms takes at least 3 renewals; a renewal
   * storm would show as many more than the ~10 of one every 333 ms. */
  CHECK_MSG(st.renewals >= 3 && st.renewals <= 40, "renewals %llu in 3.5 s", (unsigned long long)st.renewals);
  /* renewals counts a renewal when it is sent, renewed_locks its hold when
   * the answer comes: a read while one is in flight sees it unanswered;
   * every renewal renews the hold once its answer is in */
  CHECK_MSG(th_wait_until(renewed_caught_up, c, 5000), "renewed_locks stayed below renewals");
  CHECK_EQ(st.locks_lost, 0);

  /* After unlock: key gone, renewals stop. */
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "wd:alive", NULL), 0);
  rlock_client_stats(c, &st);
  uint64_t renewed = st.renewed_locks;
  th_sleep_ms(1500); /* the scenario: 1.5 leases in which no renewal may come */
  rlock_client_stats(c, &st);
  CHECK_MSG(st.renewed_locks == renewed, "renewed_locks grew from %llu to %llu after unlock",
            (unsigned long long)renewed, (unsigned long long)st.renewed_locks);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "wd:alive", NULL), 0);
  CHECK_EQ(st.locks_lost, 0);
  CHECK_EQ(st.held, 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(batched_and_fixed_lease_not_renewed) {
  rlock_client_t *c = th_client(srv->url, 1000);
  rlock_lock_t *w[3] = {th_lock(c, "wd:b1"), th_lock(c, "wd:b2"), th_lock(c, "wd:b3")};
  rlock_lock_t *w9 = th_lock(c, "wd:b9");
  rlock_lock_t *fixed = th_lock(c, "wd:fixed");
  for (int i = 0; i < 3; i++) CHECK_OK(rlock_lock_lock(w[i], RLOCK_LEASE_WATCHDOG));
  CHECK_OK(rlock_lock_acquire(w9, 9, 0, RLOCK_LEASE_WATCHDOG, NULL)); /* another owner */
  CHECK_OK(rlock_lock_lock(fixed, 6000));

  rlock_stats_t s0, s1;
  rlock_client_stats(c, &s0);
  th_sleep_ms(2500); /* the scenario: 2.5 leases pass */
  rlock_client_stats(c, &s1);
  const char *names[] = {"wd:b1", "wd:b2", "wd:b3", "wd:b9"};
  for (int i = 0; i < 4; i++) CHECK_MSG(th_cmd_int(srv, "PTTL", names[i], NULL) > 0, "%s expired", names[i]);
  /* The fixed lease ran down: 6000 minus the 2.5 s. */
  long long f = th_cmd_int(srv, "PTTL", "wd:fixed", NULL);
  CHECK_MSG(f > 0 && f < 4500, "fixed lease PTTL %lld: renewed by the watchdog?", f);

  uint64_t calls = s1.renewals - s0.renewals, holds = s1.renewed_locks - s0.renewed_locks;
  CHECK_MSG(calls >= 3, "only %llu renewals in 2.5 s", (unsigned long long)calls);
  /* 4 watchdog holds per round, in fewer script calls than holds. */
  CHECK_MSG(holds >= 4 * 3 && holds > calls, "renewals %llu renewed_locks %llu", (unsigned long long)calls,
            (unsigned long long)holds);

  CHECK_OK(rlock_lock_release(w9, 9));
  rlock_lock_free(w9);
  for (int i = 0; i < 3; i++) CHECK_OK(rlock_lock_unlock(w[i]));
  CHECK_OK(rlock_lock_unlock(fixed));
  for (int i = 0; i < 3; i++) rlock_lock_free(w[i]);
  rlock_lock_free(fixed);
  rlock_client_free(c);
}

static int key_gone(void *key) { return th_cmd_int(srv, "EXISTS", (const char *)key, NULL) == 0; }

TEST(free_client_stops_renewals) {
  /* Locks still held at rlock_client_free are not released: their lease
   * runs out on the server. */
  rlock_client_t *c = th_client(srv->url, 1000);
  rlock_lock_t *l = th_lock(c, "wd:abandoned");
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  rlock_lock_free(l);
  rlock_client_free(c);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "wd:abandoned", NULL), 1);
  /* No more renewals: the lease (1000 ms) runs out; bound: 3 leases. */
  CHECK_MSG(th_wait_until(key_gone, "wd:abandoned", 3000), "the abandoned hold is still renewed");
}

/* A hold forgotten while a renewal call that names it is in flight: its
 * unlock (or this client's force unlock) was sent before the renewal and
 * answers first. The renewal batch keeps the forgotten hold alive until its
 * own reply (ASan: no use after free), skips it, and renews the rest. The
 * server is paused (CLIENT PAUSE ALL, shorter than the lease) so that the
 * watchdog's round comes while both replies wait; a run where the round
 * came only after the replies did not test this and is tried again. */
typedef struct {
  rlock_client_t *c;
  atomic_int done;
  uint64_t renewals_at_reply;
} inflight_t;

static void unlocked_cb(rlock_lock_t *l, int status, int64_t value, void *arg) {
  (void)l, (void)value;
  inflight_t *f = arg;
  CHECK_OK(status);
  rlock_stats_t st;
  rlock_client_stats(f->c, &st);
  f->renewals_at_reply = st.renewals;
  atomic_fetch_add(&f->done, 1);
}

static void forced_cb(rlock_lock_t *l, int status, int64_t value, void *arg) {
  (void)l, (void)value;
  inflight_t *f = arg;
  CHECK_OK(status);
  atomic_fetch_add(&f->done, 1);
}

static int both_done(void *arg) { return atomic_load(&((inflight_t *)arg)->done) == 2; }

TEST(forgotten_while_renewal_in_flight) {
  th_lost_t lost = TH_LOST_INIT;
  int exercised = 0;
  for (int attempt = 0; attempt < 6 && !exercised; attempt++) {
    rlock_client_t *c = th_client(srv->url, 1500); /* a round every 500 ms */
    rlock_client_on_lost(c, th_lost_record, &lost);
    th_lost_reset(&lost);
    rlock_lock_t *a = th_lock(c, "wd:pinned:a"), *b = th_lock(c, "wd:pinned:b"), *k = th_lock(c, "wd:pinned:kept");
    CHECK_OK(rlock_lock_lock(a, RLOCK_LEASE_WATCHDOG));
    CHECK_OK(rlock_lock_lock(b, RLOCK_LEASE_WATCHDOG));
    CHECK_OK(rlock_lock_lock(k, RLOCK_LEASE_WATCHDOG));
    rlock_stats_t st;
    rlock_client_stats(c, &st);
    uint64_t renewals0 = st.renewals;
    inflight_t f = {.c = c};
    atomic_init(&f.done, 0);
    /* 700 ms: longer than a round (500), shorter than lease - round (1000) */
    redisReply *r = th_cmd(srv, "CLIENT", "PAUSE", "700", "ALL", NULL);
    CHECK(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    CHECK_OK(rlock_lock_release_async(a, RLOCK_OWNER_SELF, unlocked_cb, &f));
    CHECK_OK(rlock_lock_force_unlock_async(b, forced_cb, &f));
    CHECK_MSG(th_wait_until(both_done, &f, 10000), "unlock / force unlock never answered");
    exercised = f.renewals_at_reply > renewals0;
    /* the kept hold is renewed on: two more renewals that renewed it */
    CHECK(TH_STAT_REACHES(c, renewals, f.renewals_at_reply + 2, 10000));
    CHECK_EQ(th_cmd_int(srv, "EXISTS", "wd:pinned:a", NULL), 0);
    CHECK_EQ(th_cmd_int(srv, "EXISTS", "wd:pinned:b", NULL), 0);
    CHECK_EQ(th_cmd_int(srv, "EXISTS", "wd:pinned:kept", NULL), 1);
    CHECK_OK(rlock_lock_unlock(k));
    pthread_mutex_lock(&lost.mu);
    CHECK_MSG(lost.calls == 1 && lost.reason == RLOCK_LOST_FORCE_UNLOCKED, "lost calls %d reason %d", lost.calls,
              (int)lost.reason);
    pthread_mutex_unlock(&lost.mu);
    rlock_client_stats(c, &st);
    CHECK_EQ(st.held, 0);
    rlock_lock_free(a);
    rlock_lock_free(b);
    rlock_lock_free(k);
    rlock_client_free(c);
  }
  CHECK_MSG(exercised, "in 6 attempts no renewal round came while the replies waited");
}

/* More holds than one window of renewal calls in flight (a round keeps a
 * few 500-hold calls in flight and sends the next as each reply comes): every
 * round still reaches every hold, none is lost. */
#define MANY 5000

typedef struct {
  atomic_int ok, failed;
} many_t;

static void many_cb(rlock_lock_t *l, int status, int64_t value, void *arg) {
  (void)l, (void)value;
  many_t *m = arg;
  atomic_fetch_add(status == 0 ? &m->ok : &m->failed, 1);
}

static int many_done(void *arg) {
  many_t *m = arg;
  return atomic_load(&m->ok) + atomic_load(&m->failed) == MANY;
}

TEST(many_holds_every_round) {
  th_lost_t lost = TH_LOST_INIT;
  rlock_client_t *c = th_client(srv->url, 1000);
  rlock_client_on_lost(c, th_lost_record, &lost);
  rlock_lock_t **ls = calloc(MANY, sizeof *ls);
  CHECK(ls);
  many_t m;
  atomic_init(&m.ok, 0), atomic_init(&m.failed, 0);
  for (int i = 0; i < MANY; i++) {
    char name[32];
    snprintf(name, sizeof name, "wd:many:%d", i);
    ls[i] = th_lock(c, name);
    CHECK_OK(rlock_lock_acquire_async(ls[i], 1, 0, RLOCK_LEASE_WATCHDOG, NULL, many_cb, &m));
  }
  CHECK_MSG(th_wait_until(many_done, &m, 20000), "acquires never answered");
  CHECK_EQ(atomic_load(&m.ok), MANY);
  rlock_stats_t s0, s1;
  rlock_client_stats(c, &s0);
  th_sleep_ms(2500); /* the scenario: 2.5 leases pass */
  rlock_client_stats(c, &s1);
  pthread_mutex_lock(&lost.mu);
  CHECK_MSG(lost.calls == 0, "%d holds lost (the last: %s)", lost.calls, rlock_lost_reason_str(lost.reason));
  pthread_mutex_unlock(&lost.mu);
  CHECK_MSG(s1.renewed_locks - s0.renewed_locks >= 2 * MANY, "%llu holds renewed in 2.5 s",
            (unsigned long long)(s1.renewed_locks - s0.renewed_locks));
  CHECK_EQ(s1.held, MANY);
  for (int i = 0; i < MANY; i += 499) {
    char name[32];
    snprintf(name, sizeof name, "wd:many:%d", i);
    CHECK_MSG(th_cmd_int(srv, "PTTL", name, NULL) > 0, "%s expired", name);
  }
  atomic_store(&m.ok, 0);
  for (int i = 0; i < MANY; i++) CHECK_OK(rlock_lock_release_async(ls[i], 1, many_cb, &m));
  CHECK_MSG(th_wait_until(many_done, &m, 20000), "releases never answered");
  CHECK_EQ(atomic_load(&m.ok), MANY);
  for (int i = 0; i < MANY; i++) rlock_lock_free(ls[i]);
  free(ls);
  rlock_client_free(c);
}

/* The server stops answering for longer than the lease: every watchdog hold
 * (one expiry queue under one timer) is reported, each once, with
 * RLOCK_LOST_RENEWAL_FAILED; a longer fixed lease (its own timer) is not. */
#define QUEUED 40

static int lost_reaches(void *arg) {
  th_lost_t *l = arg;
  pthread_mutex_lock(&l->mu);
  int n = l->calls;
  pthread_mutex_unlock(&l->mu);
  return n >= QUEUED;
}

TEST(queue_reports_every_expired_hold) {
  th_lost_t lost = TH_LOST_INIT;
  rlock_client_t *c = th_client(srv->url, 1000);
  rlock_client_on_lost(c, th_lost_record, &lost);
  rlock_lock_t *ls[QUEUED], *fixed = th_lock(c, "wd:queue:fixed");
  for (int i = 0; i < QUEUED; i++) {
    char name[32];
    snprintf(name, sizeof name, "wd:queue:%d", i);
    ls[i] = th_lock(c, name);
    CHECK_OK(rlock_lock_lock(ls[i], RLOCK_LEASE_WATCHDOG));
    if (i % 8 == 7) th_sleep_ms(5); /* deadlines a few ms apart along the queue */
  }
  CHECK_OK(rlock_lock_lock(fixed, 20000));
  redisReply *r = th_cmd(srv, "CLIENT", "PAUSE", "2500", "ALL", NULL);
  CHECK(r && r->type == REDIS_REPLY_STATUS);
  freeReplyObject(r);
  CHECK_MSG(th_wait_until(lost_reaches, &lost, 6000), "only %d of %d holds reported lost", lost.calls, QUEUED);
  th_sleep_ms(300); /* nothing more may come */
  pthread_mutex_lock(&lost.mu);
  CHECK_MSG(lost.calls == QUEUED && lost.reason == RLOCK_LOST_RENEWAL_FAILED, "lost calls %d reason %d", lost.calls,
            (int)lost.reason);
  pthread_mutex_unlock(&lost.mu);
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  CHECK_EQ(st.held, 1); /* the fixed lease */
  CHECK_OK(rlock_lock_unlock(fixed));
  for (int i = 0; i < QUEUED; i++) {
    CHECK_RC(rlock_lock_unlock(ls[i]), RLOCK_ENOTHELD);
    rlock_lock_free(ls[i]);
  }
  rlock_lock_free(fixed);
  rlock_client_free(c);
}

/* A watchdog hold with fixed-lease levels inside moves between its own timer
 * and the expiry queue (and keeps an ext): after the fixed levels are
 * released, it is renewed like any watchdog hold, with no lost report, and a
 * hold reusing the freed one (the spare) starts clean. */
TEST(fixed_inside_watchdog_moves_back_to_queue) {
  rlock_client_t *c = th_client(srv->url, 1000);
  rlock_lock_t *l = th_lock(c, "wd:mix"), *s = th_lock(c, "wd:m");
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  CHECK_OK(rlock_lock_lock(l, 300));  /* shorter than the watchdog's */
  CHECK_OK(rlock_lock_lock(l, 2500)); /* longer: its own timer */
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_OK(rlock_lock_unlock(l)); /* back to the watchdog level alone */
  /* a second hold taken, released and taken again (the spare) */
  CHECK_OK(rlock_lock_lock(s, RLOCK_LEASE_WATCHDOG));
  CHECK_OK(rlock_lock_unlock(s));
  CHECK_OK(rlock_lock_lock(s, RLOCK_LEASE_WATCHDOG));
  int64_t end = th_now_ms() + 3500; /* the scenario: 3.5 leases */
  while (th_now_ms() < end) {
    th_sleep_ms(200);
    CHECK_MSG(th_cmd_int(srv, "PTTL", "wd:mix", NULL) > 0, "wd:mix expired under the watchdog");
    CHECK_MSG(th_cmd_int(srv, "PTTL", "wd:m", NULL) > 0, "wd:m expired under the watchdog");
  }
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  CHECK_EQ(st.locks_lost, 0);
  CHECK_EQ(st.held, 2);
  int64_t n = 0;
  CHECK_OK(rlock_lock_hold_count(l, RLOCK_OWNER_SELF, &n));
  CHECK_EQ(n, 1);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_OK(rlock_lock_unlock(s));
  rlock_client_stats(c, &st);
  CHECK_EQ(st.held, 0);
  rlock_lock_free(l);
  rlock_lock_free(s);
  rlock_client_free(c);
}

/* The connection drops again and again while rounds of more holds than a
 * window of calls are under way: a round under way goes on after the
 * reconnect and a full one follows, so no hold is left unrenewed. */
#define CHURN 3000

static int churn_done(void *arg) {
  many_t *m = arg;
  return atomic_load(&m->ok) + atomic_load(&m->failed) == CHURN;
}

TEST(reconnects_during_rounds) {
  th_lost_t lost = TH_LOST_INIT;
  /* a round every 1000 ms; a lease of 3 s leaves room for a loaded machine
   * (2 cores, 4 test jobs, sanitizers): 1.5 s lost 500-3000 holds at a load
   * average of 10 while nothing was wrong */
  rlock_client_t *c = th_client(srv->url, 3000);
  rlock_client_on_lost(c, th_lost_record, &lost);
  rlock_lock_t **ls = calloc(CHURN, sizeof *ls);
  CHECK(ls);
  many_t m;
  atomic_init(&m.ok, 0), atomic_init(&m.failed, 0);
  for (int i = 0; i < CHURN; i++) {
    char name[32];
    snprintf(name, sizeof name, "wd:churn:%d", i);
    ls[i] = th_lock(c, name);
    CHECK_OK(rlock_lock_acquire_async(ls[i], 1, 0, RLOCK_LEASE_WATCHDOG, NULL, many_cb, &m));
  }
  CHECK_MSG(th_wait_until(churn_done, &m, 20000), "acquires never answered");
  CHECK_EQ(atomic_load(&m.ok), CHURN);
  /* the scenario, 6 times: writes paused (renewal scripts wait on the
   * server, the window fills), then the client's connections killed (the
   * calls in flight fail), then writes resumed; and over 3 leases */
  rlock_stats_t s0, s1;
  rlock_client_stats(c, &s0);
  for (int k = 0; k < 6; k++) {
    th_reply_free(th_cmd(srv, "CLIENT", "PAUSE", "2000", "WRITE", NULL));
    th_sleep_ms(1100); /* more than a round's period: a round is waiting */
    th_reply_free(th_cmd(srv, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes", NULL));
    th_reply_free(th_cmd(srv, "CLIENT", "UNPAUSE", NULL));
    th_sleep_ms(150);
  }
  rlock_client_stats(c, &s1);
  printf("# %llu renewal calls, %llu holds renewed\n", (unsigned long long)(s1.renewals - s0.renewals),
         (unsigned long long)(s1.renewed_locks - s0.renewed_locks));
  CHECK_MSG(s1.renewed_locks - s0.renewed_locks >= 3 * CHURN, "%llu holds renewed",
            (unsigned long long)(s1.renewed_locks - s0.renewed_locks));
  pthread_mutex_lock(&lost.mu);
  CHECK_MSG(lost.calls == 0, "%d holds lost (the last: %s)", lost.calls, rlock_lost_reason_str(lost.reason));
  pthread_mutex_unlock(&lost.mu);
  for (int i = 0; i < CHURN; i += 97) {
    char name[32];
    snprintf(name, sizeof name, "wd:churn:%d", i);
    CHECK_MSG(th_cmd_int(srv, "PTTL", name, NULL) > 0, "%s expired", name);
  }
  atomic_store(&m.ok, 0);
  for (int i = 0; i < CHURN; i++) CHECK_OK(rlock_lock_release_async(ls[i], 1, many_cb, &m));
  CHECK_MSG(th_wait_until(churn_done, &m, 20000), "releases never answered");
  for (int i = 0; i < CHURN; i++) rlock_lock_free(ls[i]);
  free(ls);
  rlock_client_free(c);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 170);
  srv = th_server_start(NULL);
  RUN(keeps_lock_alive);
  RUN(batched_and_fixed_lease_not_renewed);
  RUN(free_client_stops_renewals);
  RUN(forgotten_while_renewal_in_flight);
  RUN(many_holds_every_round);
  RUN(queue_reports_every_expired_hold);
  RUN(fixed_inside_watchdog_moves_back_to_queue);
  RUN(reconnects_during_rounds);
  th_server_stop(srv);
  return th_done();
}
