/* test_acl.c -- the library with a Redis 7 ACL user that may use every key
 * and command but no channel (`resetchannels`: Redis 7's default for a new
 * user). Such a user can take a free lock, but cannot wait for a held one:
 * the waiter's SUBSCRIBE is refused NOPERM.
 *   waiter_refused_*  a waiter of each publishing kind (reentrant, fair,
 *                     read-write) ends at once with RLOCK_ENOPERM naming the
 *                     channel (before: it tried again on every SUBSCRIBE
 *                     re-send, then timed out with RLOCK_EBUSY; waiting
 *                     forever it polled forever); the holder's state is as
 *                     it was (no fair queue entry left behind).
 *   waiter_forever_refused  the same for a wait without bound.
 *   waiters_refused_together  four waiters of one channel, refused at once.
 *   fair_waiters_refused_together  two fair waiters of the user: both leave
 *                     the queue (before: the first one's give-up, which
 *                     would tell the second one, was refused NOPERM: its
 *                     entry kept the free lock from a try for its slot).
 *   fair_free_without_base_channel  a user that may publish on a fair lock's
 *                     waiter channels only: its unlock and force unlock
 *                     succeed (the "free" message on the lock's own channel
 *                     is left out where the ACL refuses it).
 *   fair_documented_keys  a user with the keys docs/cli.md lists for the
 *                     fair lock (the reentrant lock's, the queue and the
 *                     deadlines) and its waiter channels: a holder and a
 *                     watchdog waiter of that user lock, hand over and
 *                     unlock (before: every fair script was refused NOPERM
 *                     for the handoff registry, a declared key outside
 *                     those patterns). */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static th_server_t *srv;
static char app_url[200], admin_url[200];

static void check_refused(rlock_client_t *c, rlock_lock_t *l, const char *chan) {
  rlock_stats_t st0, st1;
  rlock_client_stats(c, &st0);
  int rc = rlock_lock_acquire(l, RLOCK_OWNER_SELF, 30000, 10000, NULL);
  CHECK_MSG(rc == RLOCK_ENOPERM, "acquire: %s (%s)", rlock_err_name(rc), rlock_last_error());
  CHECK_MSG(strstr(rlock_last_error(), chan), "the message does not name %s: %s", chan, rlock_last_error());
  printf("# %s\n", rlock_last_error());
  rlock_client_stats(c, &st1);
  printf("# %llu commands sent\n", (unsigned long long)(st1.commands_sent - st0.commands_sent));
  /* one try, one SUBSCRIBE, the fair lock's give-up: no polling */
  CHECK_MSG(st1.commands_sent - st0.commands_sent <= 6, "%llu commands sent",
            (unsigned long long)(st1.commands_sent - st0.commands_sent));
}

TEST(waiter_refused_reentrant) {
  rlock_client_t *admin = th_client(admin_url, 0), *app = th_client(app_url, 0);
  rlock_lock_t *h = th_lock(admin, "acl:re"), *w = th_lock(app, "acl:re");
  CHECK_OK(rlock_lock_lock(h, 60000));
  check_refused(app, w, "redisson_lock__channel:{acl:re}");
  CHECK_EQ(th_cmd_int(srv, "HLEN", "acl:re", NULL), 1);
  CHECK_OK(rlock_lock_unlock(h));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "acl:re", NULL), 0);
  rlock_lock_free(h), rlock_lock_free(w);
  rlock_client_free(app), rlock_client_free(admin);
}

static int fair_queue_empty(void *arg) {
  (void)arg;
  return th_cmd_int(srv, "LLEN", "redisson_lock_queue:{acl:fair}", NULL) == 0 &&
         th_cmd_int(srv, "ZCARD", "redisson_lock_timeout:{acl:fair}", NULL) == 0;
}

TEST(waiter_refused_fair) {
  rlock_client_t *admin = th_client(admin_url, 0), *app = th_client(app_url, 0);
  rlock_lock_t *h, *w;
  CHECK_OK(rlock_lock_new_fair(admin, "acl:fair", 8, &h));
  CHECK_OK(rlock_lock_new_fair(app, "acl:fair", 8, &w));
  CHECK_OK(rlock_lock_lock(h, 60000));
  check_refused(app, w, "redisson_lock__channel:{acl:fair}:");
  CHECK_EQ(th_cmd_int(srv, "HLEN", "acl:fair", NULL), 1);
  /* the give-up goes on after the call returns (as after a timeout): awaited */
  CHECK_MSG(th_wait_until(fair_queue_empty, NULL, 10000), "the refused waiter's queue entry stayed: queue %lld",
            th_cmd_int(srv, "LLEN", "redisson_lock_queue:{acl:fair}", NULL));
  CHECK_OK(rlock_lock_unlock(h));
  rlock_lock_free(h), rlock_lock_free(w);
  rlock_client_free(app), rlock_client_free(admin);
}

TEST(waiter_refused_rw) {
  rlock_client_t *admin = th_client(admin_url, 0), *app = th_client(app_url, 0);
  rlock_lock_t *hr, *hw, *wr, *ww;
  CHECK_OK(rlock_rwlock_new(admin, "acl:rw", 6, &hr, &hw));
  CHECK_OK(rlock_rwlock_new(app, "acl:rw", 6, &wr, &ww));
  CHECK_OK(rlock_lock_lock(hw, 60000));
  check_refused(app, wr, "redisson_rwlock:{acl:rw}");
  CHECK_OK(rlock_lock_unlock(hw));
  rlock_lock_free(hr), rlock_lock_free(hw), rlock_lock_free(wr), rlock_lock_free(ww);
  rlock_client_free(app), rlock_client_free(admin);
}

static atomic_int forever_rc = 1;
static void forever_cb(rlock_lock_t *l, int st, int64_t value, void *arg) {
  (void)l, (void)value, (void)arg;
  atomic_store(&forever_rc, st);
}
static int forever_done(void *arg) { return (void)arg, atomic_load(&forever_rc) != 1; }

TEST(waiter_forever_refused) {
  rlock_client_t *admin = th_client(admin_url, 0), *app = th_client(app_url, 0);
  rlock_lock_t *h = th_lock(admin, "acl:forever"), *w = th_lock(app, "acl:forever");
  CHECK_OK(rlock_lock_lock(h, 120000));
  CHECK_OK(rlock_lock_acquire_async(w, (rlock_owner_t)7, RLOCK_WAIT_FOREVER, 10000, NULL, forever_cb, NULL));
  /* the holder's lease is 120 s: only the refusal ends the wait */
  CHECK_MSG(th_wait_until(forever_done, NULL, 30000), "a wait without bound went on with SUBSCRIBE refused");
  CHECK_RC(atomic_load(&forever_rc), RLOCK_ENOPERM);
  CHECK_OK(rlock_lock_unlock(h));
  rlock_lock_free(h), rlock_lock_free(w);
  rlock_client_free(app), rlock_client_free(admin);
}

/* Several waiters of one client on one channel, refused together (the
 * refusal wakes them all; each one's end may hand a wake-up on). */
static atomic_int many_rc[4], many_n;
static void many_cb(rlock_lock_t *l, int st, int64_t value, void *arg) {
  (void)l, (void)value;
  atomic_store(&many_rc[(intptr_t)arg], st);
  atomic_fetch_add(&many_n, 1);
}
static int many_done(void *arg) { return (void)arg, atomic_load(&many_n) == 4; }

TEST(waiters_refused_together) {
  rlock_client_t *admin = th_client(admin_url, 0), *app = th_client(app_url, 0);
  rlock_lock_t *h = th_lock(admin, "acl:many"), *w = th_lock(app, "acl:many");
  CHECK_OK(rlock_lock_lock(h, 120000));
  for (intptr_t i = 0; i < 4; i++)
    CHECK_OK(rlock_lock_acquire_async(w, (rlock_owner_t)(100 + i), i % 2 ? 60000 : RLOCK_WAIT_FOREVER, 10000, NULL,
                                      many_cb, (void *)i));
  CHECK_MSG(th_wait_until(many_done, NULL, 30000), "%d of 4 waiters ended", atomic_load(&many_n));
  for (int i = 0; i < 4; i++) CHECK_RC(atomic_load(&many_rc[i]), RLOCK_ENOPERM);
  CHECK_EQ(th_cmd_int(srv, "HLEN", "acl:many", NULL), 1);
  CHECK_OK(rlock_lock_unlock(h));
  rlock_lock_free(h), rlock_lock_free(w);
  rlock_client_free(app), rlock_client_free(admin);
}

/* Two fair waiters of the user, refused together: each one's give-up must
 * take it out of the queue, the first one's too, although the waiter behind
 * it (whose channel this user may not publish to) would be told its deadline
 * moved. Before: the first one's undo was refused NOPERM as a whole (nothing
 * written), its queue entry stayed until its slot ran out (10 s), and the
 * other user's next fair waiter had to wait for that after the unlock. */
static atomic_int fair_rc[2], fair_n;
static void fair_cb(rlock_lock_t *l, int st, int64_t value, void *arg) {
  (void)l, (void)value;
  atomic_store(&fair_rc[(intptr_t)arg], st);
  atomic_fetch_add(&fair_n, 1);
}
static int fair_done(void *arg) { return (void)arg, atomic_load(&fair_n) == 2; }
static int queue_empty(void *arg) {
  (void)arg;
  return th_cmd_int(srv, "LLEN", "redisson_lock_queue:{acl:fair2}", NULL) == 0 &&
         th_cmd_int(srv, "ZCARD", "redisson_lock_timeout:{acl:fair2}", NULL) == 0;
}

TEST(fair_waiters_refused_together) {
  rlock_client_t *admin = th_client(admin_url, 0), *app = th_client(app_url, 0);
  rlock_lock_t *h, *w;
  CHECK_OK(rlock_lock_new_fair(admin, "acl:fair2", 9, &h));
  CHECK_OK(rlock_lock_new_fair(app, "acl:fair2", 9, &w));
  CHECK_OK(rlock_lock_lock(h, 60000));
  for (intptr_t i = 0; i < 2; i++)
    CHECK_OK(rlock_lock_acquire_async(w, (rlock_owner_t)(200 + i), 30000, 10000, NULL, fair_cb, (void *)i));
  CHECK_MSG(th_wait_until(fair_done, NULL, 30000), "%d of 2 fair waiters ended", atomic_load(&fair_n));
  for (int i = 0; i < 2; i++) CHECK_RC(atomic_load(&fair_rc[i]), RLOCK_ENOPERM);
  /* the give-ups are sent as the waiters end: wait for their answers (not
   * for the 10 s slot of an entry left behind) */
  int empty = th_wait_until(queue_empty, NULL, 2000);
  printf("# queue %lld, deadlines %lld\n", th_cmd_int(srv, "LLEN", "redisson_lock_queue:{acl:fair2}", NULL),
         th_cmd_int(srv, "ZCARD", "redisson_lock_timeout:{acl:fair2}", NULL));
  CHECK_OK(rlock_lock_unlock(h));
  /* the lock is free: another owner's try (no wait, it does not queue) gets
   * it (before: the entry left at the head had the lock kept for it) */
  int rc = rlock_lock_acquire(h, (rlock_owner_t)300, 0, 10000, NULL);
  CHECK_MSG(empty, "a refused fair waiter's queue entry was left behind (then a try of the free lock: %s)",
            rlock_err_name(rc));
  CHECK_OK(rc);
  CHECK_OK(rlock_lock_release(h, (rlock_owner_t)300));
  rlock_lock_free(h), rlock_lock_free(w);
  rlock_client_free(app), rlock_client_free(admin);
}

/* The semaphore's and the latch's waiters too (semaphore.c has waits of its
 * own). Before: the refusal woke them once, then they parked with no TTL to
 * wake them: a bounded wait ended RLOCK_EBUSY at its bound, a wait without
 * bound slept forever. */
TEST(semaphore_and_latch_waiters_refused) {
  rlock_client_t *app = th_client(app_url, 0);
  rlock_semaphore_t *s;
  CHECK_OK(rlock_semaphore_new(app, "acl:sem", 7, &s));
  int rc = rlock_semaphore_acquire(s, 1, 20000, NULL); /* no permits: it must wait */
  CHECK_MSG(rc == RLOCK_ENOPERM, "semaphore acquire: %s (%s)", rlock_err_name(rc), rlock_last_error());
  CHECK_MSG(strstr(rlock_last_error(), "redisson_sc:{acl:sem}"), "message: %s", rlock_last_error());
  rlock_semaphore_free(s);
  th_reply_free(th_cmd(srv, "SET", "acl:latch", "1", NULL));
  rlock_latch_t *l;
  CHECK_OK(rlock_latch_new(app, "acl:latch", 9, &l));
  rc = rlock_latch_await(l, 20000, NULL);
  CHECK_MSG(rc == RLOCK_ENOPERM, "latch await: %s (%s)", rlock_err_name(rc), rlock_last_error());
  rlock_latch_free(l);
  th_reply_free(th_cmd(srv, "DEL", "acl:latch", NULL));
  rlock_client_free(app);
}

/* A user that may publish on a fair lock's waiter channels
 * (redisson_lock__channel:{NAME}:*) but not on the lock's own channel, where
 * rlock's fair scripts also say "free" for free-waiters (only where the ACL
 * allows): its unlock, with a waiter queued or not, and its force unlock
 * free the lock and succeed, and the queued waiter is told. An unchecked
 * PUBLISH there would fail the script after its DEL (NOPERM): the lock freed
 * but the unlock reported failed. */
static char heads_url[200];
static atomic_int fb_rc = -1000;
static void fb_cb(rlock_lock_t *l, int st, int64_t value, void *arg) {
  (void)l, (void)value, (void)arg;
  atomic_store(&fb_rc, st);
}
static int fb_done(void *arg) { return (void)arg, atomic_load(&fb_rc) != -1000; }
static int fb_queued(void *arg) {
  (void)arg;
  return th_cmd_int(srv, "LLEN", "redisson_lock_queue:{acl:fb}", NULL) == 1;
}
TEST(fair_free_without_base_channel) {
  rlock_client_t *admin = th_client(admin_url, 0), *heads = th_client(heads_url, 0);
  rlock_lock_t *h, *w;
  CHECK_OK(rlock_lock_new_fair(heads, "acl:fb", 6, &h));
  CHECK_OK(rlock_lock_new_fair(admin, "acl:fb", 6, &w));
  /* nobody queued */
  CHECK_OK(rlock_lock_lock(h, 60000));
  int rc = rlock_lock_unlock(h);
  CHECK_MSG(rc == 0, "unlock, nobody queued: %s (%s)", rlock_err_name(rc), rlock_last_error());
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "acl:fb", NULL), 0);
  /* a waiter queued: told on its own channel */
  CHECK_OK(rlock_lock_lock(h, 60000));
  CHECK_OK(rlock_lock_acquire_async(w, 7, 30000, 60000, NULL, fb_cb, NULL));
  CHECK_MSG(th_wait_until(fb_queued, NULL, 10000), "the waiter did not queue");
  rc = rlock_lock_unlock(h);
  CHECK_MSG(rc == 0, "unlock, a waiter queued: %s (%s)", rlock_err_name(rc), rlock_last_error());
  CHECK_MSG(th_wait_until(fb_done, NULL, 20000), "the queued waiter was not told");
  CHECK_OK(atomic_load(&fb_rc));
  CHECK_OK(rlock_lock_release(w, 7));
  /* force unlock */
  CHECK_OK(rlock_lock_lock(h, 60000));
  int was = 0;
  rc = rlock_lock_force_unlock(h, &was);
  CHECK_MSG(rc == 0 && was == 1, "force unlock: %s (%s), was %d", rlock_err_name(rc), rlock_last_error(), was);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "acl:fb", NULL), 0);
  rlock_lock_free(h), rlock_lock_free(w);
  rlock_client_free(heads), rlock_client_free(admin);
}

/* The fair lock with exactly the keys docs/cli.md's ACL table lists for it
 * (and docs/api/fair.md: "a user without the registry key still locks"). */
static char fk_url[200];
static atomic_int fk_rc = -1000;
static void fk_cb(rlock_lock_t *l, int st, int64_t value, void *arg) {
  (void)l, (void)value, (void)arg;
  atomic_store(&fk_rc, st);
}
static int fk_done(void *arg) { return (void)arg, atomic_load(&fk_rc) != -1000; }
static int fk_queued(void *arg) {
  (void)arg;
  return th_cmd_int(srv, "LLEN", "redisson_lock_queue:{acl:fk}", NULL) == 1;
}
TEST(fair_documented_keys) {
  rlock_client_t *c1 = th_client(fk_url, 0), *c2 = th_client(fk_url, 0);
  rlock_lock_t *h, *w;
  CHECK_OK(rlock_lock_new_fair(c1, "acl:fk", 6, &h));
  CHECK_OK(rlock_lock_new_fair(c2, "acl:fk", 6, &w));
  int rc = rlock_lock_acquire(h, 1, 0, RLOCK_LEASE_WATCHDOG, NULL);
  CHECK_MSG(rc == 0, "a free fair lock: %s (%s)", rlock_err_name(rc), rlock_last_error());
  if (rc == 0) {
    CHECK_OK(rlock_lock_acquire_async(w, 2, 20000, RLOCK_LEASE_WATCHDOG, NULL, fk_cb, NULL));
    CHECK_MSG(th_wait_until(fk_queued, NULL, 10000), "the waiter did not queue (rc %d: %s)", atomic_load(&fk_rc),
              rlock_err_name(atomic_load(&fk_rc)));
    rc = rlock_lock_release(h, 1);
    CHECK_MSG(rc == 0, "unlock with a waiter queued: %s (%s)", rlock_err_name(rc), rlock_last_error());
    CHECK_MSG(th_wait_until(fk_done, NULL, 20000), "the waiter did not get the lock");
    CHECK_OK(atomic_load(&fk_rc));
    rc = rlock_lock_release(w, 2);
    CHECK_MSG(rc == 0, "the waiter's unlock: %s (%s)", rlock_err_name(rc), rlock_last_error());
  }
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "acl:fk", NULL), 0);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "redisson_lock_queue:{acl:fk}", NULL), 0);
  rlock_lock_free(h), rlock_lock_free(w);
  rlock_client_free(c1), rlock_client_free(c2);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 120);
  const char *extra[] = {"--user",
                         "app",
                         "on",
                         ">pw",
                         "~*",
                         "resetchannels",
                         "+@all",
                         "--user",
                         "admin",
                         "on",
                         ">pw",
                         "~*",
                         "&*",
                         "+@all",
                         "--user",
                         "heads",
                         "on",
                         ">pw",
                         "~*",
                         "resetchannels",
                         "&redisson_lock__channel:{acl:fb}:*",
                         "+@all",
                         "--user",
                         "fk",
                         "on",
                         ">pw",
                         "~acl:fk",
                         "~redisson_lock__channel:{acl:fk}",
                         "~rlock_acquire_latch:{acl:fk}:*",
                         "~redisson_unlock_latch:{acl:fk}:*",
                         "~redisson_lock_queue:{acl:fk}",
                         "~redisson_lock_timeout:{acl:fk}",
                         "resetchannels",
                         "&redisson_lock__channel:{acl:fk}",
                         "&redisson_lock__channel:{acl:fk}:*",
                         "+@all",
                         NULL};
  th_server_opts_t so = {.extra_args = extra};
  srv = th_server_start(&so);
  snprintf(app_url, sizeof app_url, "redis://app:pw@127.0.0.1:%d", srv->port);
  snprintf(admin_url, sizeof admin_url, "redis://admin:pw@127.0.0.1:%d", srv->port);
  snprintf(heads_url, sizeof heads_url, "redis://heads:pw@127.0.0.1:%d", srv->port);
  snprintf(fk_url, sizeof fk_url, "redis://fk:pw@127.0.0.1:%d", srv->port);
  RUN(waiter_refused_reentrant);
  RUN(waiter_refused_fair);
  RUN(waiter_refused_rw);
  RUN(waiter_forever_refused);
  RUN(waiters_refused_together);
  RUN(semaphore_and_latch_waiters_refused);
  RUN(fair_waiters_refused_together);
  RUN(fair_free_without_base_channel);
  RUN(fair_documented_keys);
  th_server_stop(srv);
  return th_done();
}
