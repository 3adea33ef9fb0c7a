/* test_replica_sync.c -- the replica-sync check (rlock_options_t.replica_sync)
 * against a real master with replicas (redis-server --replicaof): acquire,
 * unlock and renewal carry WAIT (the master's INFO commandstats counts it);
 * policy off and a server without replicas send none; a replica paused with
 * SIGSTOP makes an acquire fail with RLOCK_ENOSYNC and leave nothing on the
 * master (one replica), or not (two replicas, policy one); an unlock or a
 * renewal that misses the policy stands and is counted in the stats; the
 * replica count is read again on reconnect and after a miss; a MultiLock's
 * final step (its one lease) carries WAIT as the acquire does. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <pthread.h>
#include <stdatomic.h>

#include "harness.h"
#include "harness_replica.h"
#include "history.h"

#define SYNC_MS 300     /* WAIT's timeout in these tests */
#define ONLINE_MS 30000 /* how long a replica may take to come online (valgrind) */

static th_server_t *master;      /* with no replica between tests */
static th_server_t *replicas[2]; /* of master, while a test runs (replicas_up) */

/* Starts n replicas of master, waits until they are online; returns the first. */
static th_server_t *replicas_up(int n) {
  for (int i = 0; i < n; i++) replicas[i] = th_replica_start(master);
  th_replicas_wait(master, n, ONLINE_MS);
  return replicas[0];
}

/* Stops the replicas replicas_up started; waits until master counts none. */
static void replicas_down(void) {
  for (int i = 0; i < 2; i++) {
    if (replicas[i]) th_server_stop(replicas[i]);
    replicas[i] = NULL;
  }
  th_replicas_wait(master, 0, ONLINE_MS);
}

/* The end of most tests: frees l and c, stops the replicas. */
static void teardown(rlock_client_t *c, rlock_lock_t *l) {
  rlock_lock_free(l);
  rlock_client_free(c);
  replicas_down();
}

/* Options on master with these timeouts (0: the default). */
static rlock_options_t master_opts(int64_t command_ms, int64_t sync_ms) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = master->url;
  if (command_ms) o.command_timeout_ms = command_ms;
  if (sync_ms) o.replica_sync_timeout_ms = sync_ms;
  return o;
}

static rlock_client_t *client_with(const rlock_options_t *o) {
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, o));
  return c;
}

/* A client of master with WAIT timeout SYNC_MS. */
static rlock_client_t *client(int policy, int retries, int64_t watchdog_ms, const char *name) {
  rlock_options_t o = master_opts(0, SYNC_MS);
  o.replica_sync = policy;
  o.retry_attempts = retries;
  o.client_name = name;
  if (watchdog_ms) o.watchdog_timeout_ms = watchdog_ms;
  return client_with(&o);
}

static rlock_stats_t stats(rlock_client_t *c) {
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  return st;
}

static long long waits(th_server_t *m) { return th_cmdstat(m, "wait"); }

/* Waits until the stats field reaches n (fails after timeout_ms). */
#define WAIT_STAT(cl, field, n, timeout_ms) \
  CHECK_MSG(TH_STAT_REACHES(cl, field, n, timeout_ms), #field " stayed below %llu", (unsigned long long)(n))

/* Lock with the watchdog, see a renewal answered, unlock: every step's WAIT
 * count on the master is returned (acquire, renewals, unlock). */
static long long lock_renew_unlock(rlock_client_t *c, th_server_t *m, const char *name) {
  long long w0 = waits(m);
  rlock_lock_t *l = th_lock(c, name);
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  WAIT_STAT(c, renewed_locks, 1, 30000);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmd_int(m, "EXISTS", name, NULL), 0);
  rlock_lock_free(l);
  return waits(m) - w0;
}

TEST(acquire_unlock_renew_carry_wait) {
  replicas_up(1);
  rlock_client_t *c = client(RLOCK_REPLICA_SYNC_ONE, 3, 1500, "rs-carry");
  long long n = lock_renew_unlock(c, master, "rs:carry");
  rlock_stats_t st = stats(c);
  /* renewals sent before the unlock were answered before it (one connection, in order) */
  CHECK_MSG(n == 2 + (long long)st.renewals, "WAIT calls %lld, want acquire + unlock + %llu renewals", n,
            (unsigned long long)st.renewals);
  CHECK_EQ(st.acquire_sync_misses, 0);
  CHECK_EQ(st.unlock_sync_misses, 0);
  CHECK_EQ(st.renewal_sync_misses, 0);
  rlock_client_free(c);
  replicas_down();
}

TEST(policy_off_sends_no_wait) {
  replicas_up(1);
  rlock_client_t *c = client(RLOCK_REPLICA_SYNC_OFF, 3, 1500, "rs-off");
  CHECK_EQ(lock_renew_unlock(c, master, "rs:off"), 0);
  rlock_client_free(c);
  replicas_down();
}

TEST(no_replicas_no_wait) {
  rlock_client_t *c = client(RLOCK_REPLICA_SYNC_ALL, 3, 1500, "rs-none");
  CHECK_EQ(lock_renew_unlock(c, master, "rs:none"), 0);
  rlock_client_free(c);
}

/* One replica, paused: the acquire is undone (awaited) and retried, then
 * fails with RLOCK_ENOSYNC saying 0 of 1; nothing is left on the master. */
TEST(paused_replica_acquire_fails_clean) {
  th_server_t *r = replicas_up(1);
  rlock_client_t *c = client(RLOCK_REPLICA_SYNC_ONE, 1, 0, "rs-paused");
  rlock_lock_t *l = th_lock(c, "rs:paused");
  long long w0 = waits(master);
  th_server_pause(r);
  int64_t t0 = th_now_ms();
  CHECK_RC(rlock_lock_trylock(l, 0, 30000), RLOCK_ENOSYNC);
  printf("# ENOSYNC after %lld ms (2 tries x WAIT %d ms)\n", (long long)(th_now_ms() - t0), SYNC_MS);
  CHECK_MSG(strstr(rlock_last_error(), "0 of 1 replicas acknowledged"), "message: %s", rlock_last_error());
  CHECK_EQ(th_cmd_int(master, "EXISTS", "rs:paused", NULL), 0); /* at once: the undo was awaited */
  rlock_stats_t st = stats(c);
  CHECK_EQ(st.held, 0);
  CHECK_EQ(st.acquire_sync_misses, 2); /* the try and its one retry */
  CHECK_EQ(waits(master) - w0, 2);
  /* a waiting acquire behaves the same: it does not wait for the lock it undid */
  CHECK_RC(rlock_lock_trylock(l, 5000, 30000), RLOCK_ENOSYNC);
  CHECK_EQ(th_cmd_int(master, "EXISTS", "rs:paused", NULL), 0);
  th_server_resume(r);
  th_replicas_caught_up(master, 1, ONLINE_MS);
  CHECK_OK(rlock_lock_trylock(l, 0, 30000));
  CHECK_OK(rlock_lock_unlock(l));
  teardown(c, l);
}

/* A re-entrant try that misses gives back its own level only: the outer
 * hold stays (count 1 on the master), and its unlock later finds the count
 * it expects (no count-mismatch loss). */
TEST(reentrant_miss_keeps_outer_hold) {
  th_server_t *r = replicas_up(1);
  rlock_client_t *c = client(RLOCK_REPLICA_SYNC_ONE, 1, 0, "rs-reent");
  rlock_lock_t *l = th_lock(c, "rs:reent");
  char owner[128];
  th_owner_id(c, RLOCK_OWNER_THREAD | (uint64_t)th_gettid(), owner, sizeof owner);
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  th_server_pause(r);
  CHECK_RC(rlock_lock_trylock(l, 0, 30000), RLOCK_ENOSYNC);
  CHECK_EQ(th_hget_num(master, "rs:reent", owner), 1);
  int64_t count = 0;
  CHECK_OK(rlock_lock_hold_count(l, RLOCK_OWNER_SELF, &count));
  CHECK_EQ(count, 1);
  th_server_resume(r);
  th_replicas_caught_up(master, 1, ONLINE_MS);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmd_int(master, "EXISTS", "rs:reent", NULL), 0);
  CHECK_EQ(stats(c).locks_lost, 0);
  teardown(c, l);
}

typedef struct result {
  _Atomic int done, status;
} result_t;

static void on_acquired(rlock_lock_t *l, int status, int64_t value, void *arg) {
  (void)l, (void)value;
  result_t *res = arg;
  res->status = status;
  res->done = 1;
}

static int is_done(void *arg) { return ((result_t *)arg)->done; }

static int key_exists(void *name) { return th_cmd_int(master, "EXISTS", (const char *)name, NULL) == 1; }

/* Pauses replica r and starts an acquire of l (named name, wait_ms, cancel
 * token tok) that the master grants: returns once the grant is on the
 * master, its WAIT pending; *res tells how the acquire ends. */
static void grant_waiting_for_replica(th_server_t *r, rlock_lock_t *l, const char *name, int64_t wait_ms,
                                      rlock_cancel_t *tok, result_t *res) {
  th_server_pause(r);
  *res = (result_t){0, 0};
  CHECK_OK(rlock_lock_acquire_async(l, 1, wait_ms, 60000, tok, on_acquired, res));
  CHECK(th_wait_until(key_exists, (void *)name, 10000));
}

/* Nobody sleeps while the lock is free: a waiter that found the lock taken
 * by a grant that is then undone (the replica is paused) is woken by the
 * undo's unlock message and gets the lock at once, not after the undone
 * grant's 60 s lease. */
TEST(undone_grant_wakes_waiters) {
  th_server_t *r = replicas_up(1);
  /* WAIT 5000 ms: the window in which the waiter finds the lock taken (valgrind: wide) */
  rlock_options_t o = master_opts(12000, 5000);
  o.retry_attempts = 0;
  rlock_client_t *synced = NULL, *plain = client(RLOCK_REPLICA_SYNC_OFF, 3, 0, "rs-plain");
  CHECK_OK(rlock_client_new(&synced, &o));
  rlock_lock_t *ls = th_lock(synced, "rs:wake"), *lp = th_lock(plain, "rs:wake");
  result_t rs;
  grant_waiting_for_replica(r, ls, "rs:wake", 0, NULL, &rs);
  int64_t t0 = th_now_ms();
  CHECK_OK(rlock_lock_acquire(lp, 2, 25000, 60000, NULL));
  int64_t took = th_now_ms() - t0;
  CHECK_MSG(th_wait_until(is_done, &rs, 10000), "the synced acquire never ended");
  CHECK_RC(rs.status, RLOCK_ENOSYNC);
  printf("# waiter granted %lld ms after it started (the undone grant's lease: 60000 ms); messages %llu\n",
         (long long)took, (unsigned long long)stats(plain).messages);
  CHECK_MSG(TH_STAT_REACHES(plain, messages, 1, 10000), "the waiter was not woken by a message");
  CHECK_MSG(took < 20000, "the waiter slept %lld ms while the lock was free", (long long)took);
  th_server_resume(r);
  CHECK_OK(rlock_lock_release(lp, 2));
  CHECK_EQ(th_cmd_int(master, "EXISTS", "rs:wake", NULL), 0);
  rlock_lock_free(ls), rlock_lock_free(lp);
  rlock_client_free(synced), rlock_client_free(plain);
  replicas_down();
}

/* rlock_client_free while a granted try waits for its WAIT (the only
 * replica paused): the undo sent behind it on the same connection runs only
 * once the WAIT ends, and the client lingers for it, so the hold is given
 * back when rlock_client_free returns (not left for its 60 s lease). */
TEST(close_during_wait_gives_back) {
  th_server_t *r = replicas_up(1);
  rlock_options_t o = master_opts(5000, 1500); /* longer than the close's own linger (500 ms) */
  rlock_client_t *c = client_with(&o);
  rlock_lock_t *l = th_lock(c, "rs:close");
  result_t res;
  grant_waiting_for_replica(r, l, "rs:close", 0, NULL, &res);
  int64_t t0 = th_now_ms();
  rlock_client_free(c);
  printf("# rlock_client_free returned after %lld ms (WAIT 1500 ms pending)\n", (long long)(th_now_ms() - t0));
  CHECK(res.done);
  CHECK_RC(res.status, RLOCK_ECLOSED);
  CHECK_EQ(th_cmd_int(master, "EXISTS", "rs:close", NULL), 0);
  rlock_lock_free(l);
  th_server_resume(r);
  replicas_down();
}

/* The same with two granted tries pending on one connection: Redis runs
 * the second WAIT only after the first, so the undos queued behind both run
 * after two WAIT timeouts; the client lingers for both (not one), and
 * neither hold is left for its lease. */
TEST(close_during_two_waits_gives_back) {
  th_server_t *r = replicas_up(1);
  rlock_options_t o = master_opts(8000, 1500);
  rlock_client_t *c = client_with(&o);
  rlock_lock_t *l1 = th_lock(c, "rs:close2a"), *l2 = th_lock(c, "rs:close2b");
  th_server_pause(r);
  result_t res1 = {0, 0}, res2 = {0, 0};
  CHECK_OK(rlock_lock_acquire_async(l1, 1, 0, 60000, NULL, on_acquired, &res1));
  CHECK_OK(rlock_lock_acquire_async(l2, 1, 0, 60000, NULL, on_acquired, &res2));
  CHECK(th_wait_until(key_exists, "rs:close2a", 10000)); /* granted, first WAIT pending, the second try behind it */
  CHECK_EQ(th_cmd_int(master, "EXISTS", "rs:close2b", NULL), 0); /* not run yet: the first WAIT blocks it */
  int64_t t0 = th_now_ms();
  rlock_client_free(c);
  printf("# rlock_client_free returned after %lld ms (2 WAITs of 1500 ms ahead)\n", (long long)(th_now_ms() - t0));
  CHECK(res1.done && res2.done);
  CHECK_EQ(th_cmd_int(master, "EXISTS", "rs:close2a", NULL), 0);
  CHECK_EQ(th_cmd_int(master, "EXISTS", "rs:close2b", NULL), 0);
  rlock_lock_free(l1), rlock_lock_free(l2);
  th_server_resume(r);
  replicas_down();
}

/* Four tries of one client at once, the only replica paused: Redis runs
 * them one WAIT after the other on the command connection, so the last
 * answer comes after four WAIT timeouts (2400 ms), past one WAIT's worth of
 * command timeout (1000 + 600 ms). Each must still end with RLOCK_ENOSYNC
 * (its deadline allows for the WAITs ahead of it), not RLOCK_ETIMEDOUT, the
 * connection is not presumed dead, and nothing is left held. */
TEST(queued_waits_do_not_time_out) {
  th_server_t *r = replicas_up(1);
  rlock_options_t o = master_opts(1000, 600);
  o.retry_attempts = 0;
  rlock_client_t *c = client_with(&o);
  enum { N = 4 };
  rlock_lock_t *ls[N];
  result_t res[N];
  th_server_pause(r);
  for (int i = 0; i < N; i++) {
    char name[32];
    snprintf(name, sizeof name, "rs:queued:%d", i);
    ls[i] = th_lock(c, name);
    res[i] = (result_t){0, 0};
    CHECK_OK(rlock_lock_acquire_async(ls[i], 1, 0, 60000, NULL, on_acquired, &res[i]));
  }
  for (int i = 0; i < N; i++) {
    CHECK_MSG(th_wait_until(is_done, &res[i], 30000), "try %d never ended", i);
    CHECK_MSG(res[i].status == RLOCK_ENOSYNC, "try %d: %s", i, rlock_err_name(res[i].status));
  }
  th_server_resume(r);
  rlock_stats_t st = stats(c);
  CHECK_EQ(st.timeouts, 0);
  CHECK_EQ(st.reconnects, 0);
  CHECK_EQ(st.held, 0);
  for (int i = 0; i < N; i++) {
    char name[32];
    snprintf(name, sizeof name, "rs:queued:%d", i);
    CHECK_EQ(th_cmd_int(master, "EXISTS", name, NULL), 0);
    rlock_lock_free(ls[i]);
  }
  rlock_client_free(c);
  replicas_down();
}

/* The command connection is killed while a granted try waits for its WAIT
 * (the only replica paused all along): the outcome is unknown, the try is
 * re-sent with the same id on a new connection and answered by its latch;
 * that answer's WAIT must still miss (redis 7.0 sets a client's WAIT offset
 * to the master's after every command, so the latch hit waits for the
 * grant too): the acquire ends RLOCK_ENOSYNC with nothing held. */
TEST(conn_lost_during_wait_not_synced) {
  th_server_t *r = replicas_up(1);
  rlock_options_t o = master_opts(8000, 3000);
  o.client_name = "rs-lost";
  o.retry_attempts = 1;
  rlock_client_t *c = client_with(&o);
  rlock_lock_t *l = th_lock(c, "rs:lost");
  result_t res;
  grant_waiting_for_replica(r, l, "rs:lost", 0, NULL, &res);
  CHECK(th_kill_clients_named(master, "rs-lost") >= 1);
  CHECK_MSG(th_wait_until(is_done, &res, 30000), "the acquire never ended");
  rlock_stats_t st = stats(c);
  printf("# acquire after the connection loss: %s; reconnects %llu, sync misses %llu\n", rlock_err_name(res.status),
         (unsigned long long)st.reconnects, (unsigned long long)st.acquire_sync_misses);
  CHECK_MSG(res.status == RLOCK_ENOSYNC, "acquire: %s (the paused replica never acknowledged the grant)",
            rlock_err_name(res.status));
  CHECK_EQ(th_cmd_int(master, "EXISTS", "rs:lost", NULL), 0);
  th_server_resume(r);
  teardown(c, l);
}

/* The undo of a grant the replicas did not acknowledge is refused by the
 * server (here: maxmemory reached while the WAIT was pending, so the undo's
 * writes get an OOM error). The caller must not be told it holds the lock
 * (status 0) when the client neither tracks nor renews the hold: the
 * acquire ends with an error. */
TEST(refused_undo_is_not_a_grant) {
  th_server_t *r = replicas_up(1);
  rlock_options_t o = master_opts(8000, 2000);
  o.retry_attempts = 0;
  rlock_client_t *c = client_with(&o);
  rlock_lock_t *l = th_lock(c, "rs:oom");
  result_t res;
  grant_waiting_for_replica(r, l, "rs:oom", 0, NULL, &res);
  th_reply_free(th_cmd(master, "CONFIG", "SET", "maxmemory", "1", NULL));
  CHECK_MSG(th_wait_until(is_done, &res, 30000), "the acquire never ended");
  th_reply_free(th_cmd(master, "CONFIG", "SET", "maxmemory", "0", NULL));
  printf("# acquire whose undo was refused: %s\n", rlock_err_name(res.status));
  CHECK_MSG(res.status == RLOCK_ESERVER, "acquire: %s; held %llu (tracked), key exists %lld",
            rlock_err_name(res.status), (unsigned long long)stats(c).held,
            th_cmd_int(master, "EXISTS", "rs:oom", NULL));
  th_server_resume(r);
  th_reply_free(th_cmd(master, "DEL", "rs:oom", NULL));
  teardown(c, l);
}

/* Cancelled while its granted try waits for the WAIT (the only replica
 * paused): the acquire ends RLOCK_ECANCELED once the WAIT misses, the grant
 * undone (nothing held on the master, nothing tracked). */
TEST(cancel_during_wait) {
  th_server_t *r = replicas_up(1);
  rlock_options_t o = master_opts(8000, 3000); /* the window for the cancel (valgrind: wide) */
  rlock_client_t *c = client_with(&o);
  rlock_lock_t *l = th_lock(c, "rs:cancel");
  rlock_cancel_t *tok = NULL;
  CHECK_OK(rlock_cancel_new(&tok));
  result_t res;
  grant_waiting_for_replica(r, l, "rs:cancel", 30000, tok, &res);
  rlock_cancel_trigger(tok);
  CHECK_MSG(th_wait_until(is_done, &res, 30000), "the acquire never ended");
  CHECK_RC(res.status, RLOCK_ECANCELED);
  CHECK_EQ(th_cmd_int(master, "EXISTS", "rs:cancel", NULL), 0);
  CHECK_EQ(stats(c).held, 0);
  CHECK_EQ(stats(c).acquire_sync_misses, 1); /* no retry after the cancel */
  th_server_resume(r);
  rlock_cancel_free(tok);
  teardown(c, l);
}

/* A user whose ACL forbids WAIT: the grant is undone, the acquire fails
 * with RLOCK_ENOSYNC saying the server refused WAIT, nothing is left held;
 * policy off locks. */
TEST(wait_refused_by_acl) {
  replicas_up(1);
  th_reply_free(th_cmd(master, "ACL", "SETUSER", "nowait", "on", ">nowait-pw", "~*", "&*", "+@all", "-wait", NULL));
  char url[300];
  snprintf(url, sizeof url, "redis://nowait:nowait-pw@127.0.0.1:%d", master->port);
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = url;
  o.retry_attempts = 0;
  rlock_client_t *c = client_with(&o);
  rlock_lock_t *l = th_lock(c, "rs:acl");
  CHECK_RC(rlock_lock_trylock(l, 0, 30000), RLOCK_ENOSYNC);
  CHECK_MSG(strstr(rlock_last_error(), "refused WAIT") && !strstr(rlock_last_error(), "nowait-pw"), "message: %s",
            rlock_last_error());
  CHECK_EQ(th_cmd_int(master, "EXISTS", "rs:acl", NULL), 0);
  rlock_lock_free(l);
  rlock_client_free(c);
  o.replica_sync = RLOCK_REPLICA_SYNC_OFF;
  CHECK_OK(rlock_client_new(&c, &o));
  l = th_lock(c, "rs:acl");
  CHECK_OK(rlock_lock_trylock(l, 0, 30000));
  CHECK_OK(rlock_lock_unlock(l));
  rlock_lock_free(l);
  rlock_client_free(c);
  th_reply_free(th_cmd(master, "ACL", "DELUSER", "nowait", NULL));
  replicas_down();
}

/* A user whose ACL forbids INFO (INFO is in @dangerous: "+@all -@dangerous"
 * is a common ACL) still connects with the default policy and locks: the
 * refused INFO leaves the replica count at 0 (no WAIT, rlock.h), it does not
 * fail the handshake as if the credentials were wrong. */
TEST(info_refused_by_acl_connects) {
  th_reply_free(th_cmd(master, "ACL", "SETUSER", "noinfo", "on", ">noinfo-pw", "~*", "&*", "+@all", "-info", NULL));
  char url[300];
  snprintf(url, sizeof url, "redis://noinfo:noinfo-pw@127.0.0.1:%d", master->port);
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = url;
  o.connect_timeout_ms = 2000;
  rlock_client_t *c = NULL;
  int rc = rlock_client_new(&c, &o);
  CHECK_MSG(rc == 0, "rlock_client_new: %s (%s)", rlock_err_name(rc), rlock_last_error());
  CHECK_MSG(!strstr(rlock_last_error(), "noinfo-pw"), "message: %s", rlock_last_error());
  rlock_lock_t *l = th_lock(c, "rs:noinfo");
  CHECK_OK(rlock_lock_trylock(l, 0, 30000));
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmd_int(master, "EXISTS", "rs:noinfo", NULL), 0);
  rlock_lock_free(l);
  rlock_client_free(c);
  th_reply_free(th_cmd(master, "ACL", "DELUSER", "noinfo", NULL));
}

/* Two replicas, one paused: one is enough for policy one, not for majority
 * (2 of 2) or all. */
TEST(two_replicas_one_paused) {
  replicas_up(2);
  th_server_t *r2 = replicas[1];
  th_server_pause(r2);
  rlock_client_t *one = client(RLOCK_REPLICA_SYNC_ONE, 0, 0, "rs-one");
  rlock_client_t *maj = client(RLOCK_REPLICA_SYNC_MAJORITY, 0, 0, "rs-maj");
  rlock_client_t *all = client(RLOCK_REPLICA_SYNC_ALL, 0, 0, "rs-all");
  rlock_lock_t *lo = th_lock(one, "rs:two"), *lm = th_lock(maj, "rs:two"), *la = th_lock(all, "rs:two");
  int64_t t0 = th_now_ms();
  CHECK_OK(rlock_lock_trylock(lo, 0, 30000));
  CHECK_OK(rlock_lock_unlock(lo));
  printf("# policy one, 1 of 2 replicas paused: lock + unlock in %lld ms\n", (long long)(th_now_ms() - t0));
  CHECK_EQ(stats(one).acquire_sync_misses, 0);
  CHECK_EQ(stats(one).unlock_sync_misses, 0);
  CHECK_RC(rlock_lock_trylock(lm, 0, 30000), RLOCK_ENOSYNC);
  CHECK_MSG(
      strstr(rlock_last_error(), "1 of 2 replicas acknowledged") && strstr(rlock_last_error(), "majority needs 2"),
      "message: %s", rlock_last_error());
  CHECK_RC(rlock_lock_trylock(la, 0, 30000), RLOCK_ENOSYNC);
  CHECK_MSG(strstr(rlock_last_error(), "1 of 2 replicas acknowledged"), "message: %s", rlock_last_error());
  CHECK_EQ(th_cmd_int(master, "EXISTS", "rs:two", NULL), 0);
  th_server_resume(r2);
  rlock_lock_free(lo), rlock_lock_free(lm), rlock_lock_free(la);
  rlock_client_free(one), rlock_client_free(maj), rlock_client_free(all);
  replicas_down();
}

/* The count is read at each (re)connect: a replica added shows after the
 * connection is killed. One removed is read after the first miss (the count
 * is read again before the retry), but the node had a replica: the retry
 * still asks one (never "no WAIT": issue 20) and the acquire ends
 * RLOCK_ENOSYNC. */
TEST(replica_count_refreshed) {
  rlock_client_t *c = client(RLOCK_REPLICA_SYNC_ONE, 1, 0, "rs-refresh");
  rlock_lock_t *l = th_lock(c, "rs:refresh");
  long long w0 = waits(master);
  CHECK_OK(rlock_lock_trylock(l, 0, 30000));
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(waits(master) - w0, 0);
  replicas_up(1);
  CHECK(th_kill_clients_named(master, "rs-refresh") >= 1);
  WAIT_STAT(c, reconnects, 2, 30000); /* command and subscriber connections */
  w0 = waits(master);
  CHECK_OK(rlock_lock_trylock(l, 0, 30000));
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(waits(master) - w0, 2);
  replicas_down();
  /* the client still counts one replica: its WAIT gets 0, it reads INFO
   * again (none online), undoes, and the retry still asks one */
  w0 = waits(master);
  CHECK_RC(rlock_lock_trylock(l, 0, 30000), RLOCK_ENOSYNC);
  CHECK_EQ(stats(c).acquire_sync_misses, 2);
  CHECK_EQ(waits(master) - w0, 2);
  CHECK_EQ(th_cmd_int(master, "EXISTS", "rs:refresh", NULL), 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

typedef struct carry {
  rlock_lock_t *l;
  th_server_t *m;
} carry_t;

/* A lock + unlock that carried WAIT (the master's cmdstat_wait grew). */
static int lock_carries_wait(void *arg) {
  carry_t *k = arg;
  long long w0 = waits(k->m);
  if (rlock_lock_trylock(k->l, 0, 30000)) return 0;
  rlock_lock_unlock(k->l);
  return waits(k->m) > w0;
}

/* A replica that attaches while the client counts none (its handshake read
 * "connected_slaves:0"; e.g. after a master restart the client reconnects
 * before the replicas do, their reconnect is on a 1 s cron) is waited for
 * from the next ping interval on (the command connection reads the count
 * again then), not only after the next reconnect, which may never come:
 * replica sync would stay off for the connection's whole life. (A client
 * that saw a replica before never drops to no WAIT: replica_count_refreshed.) */
TEST(replicas_attached_later_counted) {
  rlock_options_t o = master_opts(0, SYNC_MS);
  o.client_name = "rs-later";
  o.ping_interval_ms = 500;
  rlock_client_t *c = client_with(&o);
  rlock_lock_t *l = th_lock(c, "rs:later");
  carry_t k = {l, master};
  CHECK(!lock_carries_wait(&k)); /* no replica yet: no WAIT */
  replicas_up(1);                /* attached while the client counts 0 */
  CHECK_MSG(th_wait_until(lock_carries_wait, &k, 20000), "a replica attached later is never waited for");
  CHECK_EQ(th_cmd_int(master, "EXISTS", "rs:later", NULL), 0);
  teardown(c, l);
}

/* The master is cut off from its only replica, which is promoted
 * (REPLICAOF NO ONE: the split brain WAIT is there to catch) and where
 * another client takes the lock. Clients on the old master that saw the
 * replica never drop to "no WAIT": under one, majority and all, the acquire
 * gets 0 acknowledgements and ends RLOCK_ENOSYNC, nothing left held there.
 * Before: the WAIT missed, INFO replication said 0 replicas, the retry went
 * without WAIT and was granted: two holders, one on each side. */
TEST(master_cut_off_from_its_replicas) {
  th_server_t *r = replicas_up(1);
  int policies[3] = {RLOCK_REPLICA_SYNC_ONE, RLOCK_REPLICA_SYNC_MAJORITY, RLOCK_REPLICA_SYNC_ALL};
  const char *names[3] = {"rs-cut-one", "rs-cut-majority", "rs-cut-all"};
  rlock_client_t *c[3];
  rlock_lock_t *l[3];
  for (int i = 0; i < 3; i++) {
    c[i] = client(policies[i], 1, 0, names[i]);
    l[i] = th_lock(c[i], "rs:cut");
    long long w0 = waits(master);
    CHECK_OK(rlock_lock_trylock(l[i], 0, 30000));
    CHECK_OK(rlock_lock_unlock(l[i]));
    CHECK_EQ(waits(master) - w0, 2); /* the client counts the replica */
  }
  th_reply_free(th_cmd(r, "REPLICAOF", "NO", "ONE", NULL));
  th_replicas_wait(master, 0, ONLINE_MS);
  /* the other side: a client of the promoted replica holds the lock */
  rlock_options_t oo = master_opts(0, SYNC_MS);
  oo.url = r->url;
  rlock_client_t *other = client_with(&oo);
  rlock_lock_t *ol = th_lock(other, "rs:cut");
  CHECK_OK(rlock_lock_trylock(ol, 0, 60000));
  for (int i = 0; i < 3; i++) {
    int rc = rlock_lock_trylock(l[i], 0, 30000);
    printf("# figures: master cut off, policy %s: trylock %s (%s)\n", names[i] + 7, rlock_err_name(rc),
           rlock_last_error());
    CHECK_MSG(rc == RLOCK_ENOSYNC, "policy %s: trylock on the cut-off master: %s (%s)", names[i] + 7,
              rlock_err_name(rc), rlock_last_error());
    /* the message names the cause and the way out */
    CHECK_MSG(strstr(rlock_last_error(), "had some") && strstr(rlock_last_error(), "SENTINEL RESET)"), "message: %s",
              rlock_last_error());
    CHECK_EQ(th_cmd_int(master, "EXISTS", "rs:cut", NULL), 0);
    rlock_stats_t st = stats(c[i]);
    CHECK(st.acquire_sync_misses >= 1);
  }
  CHECK_OK(rlock_lock_unlock(ol));
  rlock_lock_free(ol);
  rlock_client_free(other);
  for (int i = 0; i < 3; i++) {
    rlock_lock_free(l[i]);
    rlock_client_free(c[i]);
  }
  replicas_down();
}

/* An unlock the replicas do not acknowledge stands: the lock is free on the
 * master, the call succeeds, the miss is counted. */
TEST(unlock_miss_stands) {
  th_server_t *r = replicas_up(1);
  rlock_client_t *c = client(RLOCK_REPLICA_SYNC_ONE, 3, 0, "rs-unlock");
  rlock_lock_t *l = th_lock(c, "rs:unlock");
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  th_server_pause(r);
  int64_t t0 = th_now_ms();
  CHECK_OK(rlock_lock_unlock(l));
  printf("# unlock with the replica paused: %lld ms\n", (long long)(th_now_ms() - t0));
  CHECK_EQ(th_cmd_int(master, "EXISTS", "rs:unlock", NULL), 0);
  rlock_stats_t st = stats(c);
  CHECK_EQ(st.unlock_sync_misses, 1);
  CHECK_EQ(st.held, 0);
  CHECK_EQ(st.locks_lost, 0);
  th_server_resume(r);
  teardown(c, l);
}

/* A renewal the replicas do not acknowledge stands (the hold stays) and is
 * counted in renewal_sync_misses. */
TEST(renewal_miss_counted) {
  th_server_t *r = replicas_up(1);
  rlock_client_t *c = client(RLOCK_REPLICA_SYNC_ONE, 3, 3000, "rs-renew");
  rlock_lock_t *l = th_lock(c, "rs:renew");
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  th_server_pause(r);
  WAIT_STAT(c, renewal_sync_misses, 1, 30000);
  int held = 0;
  CHECK_OK(rlock_lock_is_held(l, RLOCK_OWNER_SELF, &held));
  CHECK_EQ(held, 1);
  CHECK_EQ(stats(c).locks_lost, 0);
  th_server_resume(r);
  th_replicas_caught_up(master, 1, ONLINE_MS);
  CHECK_OK(rlock_lock_unlock(l));
  teardown(c, l);
}

/* ------------------------------------------------------------ history */

#define HIST_WORKERS 4
#define HIST_LOCK "rs:hist"

typedef struct hworker {
  int id, fd;
  rlock_client_t *c;
  _Atomic int *stop;
  int grants, nosync, busy, other, bad_release, counter_errors;
} hworker_t;

/* A non-atomic read-modify-write of a counter: only mutual exclusion keeps it exact. */
static int bump(rlock_client_t *c) {
  const char *get[2] = {"GET", "rs:hist:counter"};
  rlock_reply_t *r = NULL;
  if (rlock_client_command(c, 2, get, NULL, &r)) return -1;
  long long v = r->type == RLOCK_REPLY_STRING ? strtoll(r->str, NULL, 10) : 0;
  rlock_reply_free(r);
  char next[32];
  snprintf(next, sizeof next, "%lld", v + 1);
  const char *set[3] = {"SET", "rs:hist:counter", next};
  if (rlock_client_command(c, 3, set, NULL, &r)) return -1;
  rlock_reply_free(r);
  return 0;
}

static void *hworker_run(void *arg) {
  hworker_t *w = arg;
  rlock_lock_t *l = NULL;
  if (rlock_lock_new(w->c, HIST_LOCK, strlen(HIST_LOCK), &l)) return NULL;
  size_t n = strlen(HIST_LOCK);
  while (!atomic_load(w->stop)) {
    hist_log(w->fd, HK_ATTEMPT, w->id, HIST_LOCK, n, 0, 0, 0);
    int rc = rlock_lock_trylock(l, 3000, 20000);
    if (rc) {
      hist_log(w->fd, HK_FAIL, w->id, HIST_LOCK, n, rc, 0, 0);
      if (rc == RLOCK_ENOSYNC) w->nosync++;
      else if (rc == RLOCK_EBUSY) w->busy++;
      else w->other++;
      continue;
    }
    int64_t vu = 0;
    rlock_lock_valid_until(l, RLOCK_OWNER_SELF, &vu);
    hist_log(w->fd, HK_GRANT, w->id, HIST_LOCK, n, 0, vu * 1000000, 0);
    hist_log(w->fd, HK_ENTER, w->id, HIST_LOCK, n, 0, 0, 0);
    if (bump(w->c)) w->counter_errors++;
    else w->grants++;
    hist_log(w->fd, HK_EXIT, w->id, HIST_LOCK, n, 0, 0, 0);
    rc = rlock_lock_unlock(l);
    hist_log(w->fd, HK_RELEASE, w->id, HIST_LOCK, n, rc, 0, 0);
    if (rc) w->bad_release++;
  }
  rlock_lock_free(l);
  return NULL;
}

/* 4 worker threads (a client each, policy one) take one lock in a loop while
 * the two replicas are paused in turn and then together; the history
 * checker (HIST_MUTEX) finds no overlap, a counter bumped non-atomically
 * inside the critical sections equals the grants, and nothing is left held. */
TEST(history_under_replica_pauses) {
  replicas_up(2);
  th_server_t *r1 = replicas[0], *r2 = replicas[1];
  char path[300];
  snprintf(path, sizeof path, "%s/history", th_tempdir());
  CHECK_EQ(hist_create(path), 0);
  _Atomic int stop = 0;
  hworker_t ws[HIST_WORKERS];
  pthread_t ts[HIST_WORKERS];
  for (int i = 0; i < HIST_WORKERS; i++) {
    char name[32];
    snprintf(name, sizeof name, "rs-hist-%d", i);
    ws[i] = (hworker_t){
        .id = i + 1, .fd = hist_open(path), .c = client(RLOCK_REPLICA_SYNC_ONE, 1, 0, name), .stop = &stop};
    CHECK(ws[i].fd >= 0);
  }
  for (int i = 0; i < HIST_WORKERS; i++) pthread_create(&ts[i], NULL, hworker_run, &ws[i]);
  /* the scenario: 3 rounds of r1 paused (600 ms), r2 paused (600 ms), both
   * paused (1500 ms: more than the 2 x 300 ms WAITs of a try and its retry) */
  for (int round = 0; round < 3; round++) {
    th_server_pause(r1), th_sleep_ms(600), th_server_resume(r1);
    th_server_pause(r2), th_sleep_ms(600), th_server_resume(r2);
    th_server_pause(r1), th_server_pause(r2), th_sleep_ms(1500);
    th_server_resume(r1), th_server_resume(r2);
  }
  atomic_store(&stop, 1);
  int grants = 0, nosync = 0, busy = 0, other = 0, bad = 0, cerr = 0;
  for (int i = 0; i < HIST_WORKERS; i++) {
    pthread_join(ts[i], NULL);
    grants += ws[i].grants, nosync += ws[i].nosync, busy += ws[i].busy, other += ws[i].other;
    bad += ws[i].bad_release, cerr += ws[i].counter_errors;
    close(ws[i].fd);
    rlock_client_free(ws[i].c);
  }
  hist_check_opts_t ho = {.mode = HIST_MUTEX};
  hist_report_t rep;
  int verdict = hist_check_file(path, &ho, &rep);
  printf("# history: %zu sections, %zu overlaps, %zu violations; grants %d, ENOSYNC %d, EBUSY %d, other %d\n",
         rep.sections, rep.overlaps, rep.violations, grants, nosync, busy, other);
  if (verdict != HIST_OK) hist_report_print(stdout, &rep);
  hist_report_free(&rep);
  CHECK_EQ(verdict, HIST_OK);
  CHECK_EQ(bad, 0);
  CHECK_EQ(cerr, 0);
  CHECK_EQ(other, 0);
  CHECK_MSG(grants > 0 && nosync > 0, "the scenario did not happen: grants %d, ENOSYNC %d", grants, nosync);
  char *counter = th_cmd_str(master, "GET", "rs:hist:counter", NULL);
  CHECK_EQ(counter ? strtoll(counter, NULL, 10) : 0, grants);
  free(counter);
  CHECK_EQ(th_cmd_int(master, "EXISTS", HIST_LOCK, NULL), 0);
  replicas_down();
}

static int new_client_rc(int policy, int64_t sync_ms, int64_t command_ms) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = "redis://127.0.0.1:1";
  o.replica_sync = policy;
  o.replica_sync_timeout_ms = sync_ms;
  o.command_timeout_ms = command_ms;
  o.connect_timeout_ms = 200;
  rlock_client_t *c = NULL;
  int rc = rlock_client_new(&c, &o);
  rlock_client_free(c);
  return rc;
}

TEST(options_validated) {
  rlock_options_t o;
  rlock_options_init(&o);
  CHECK_EQ(o.replica_sync, RLOCK_REPLICA_SYNC_ONE);
  CHECK_EQ(o.replica_sync_timeout_ms, 0); /* automatic: 1000 ms, at most half the command timeout */
  CHECK_RC(new_client_rc(7, 1000, 3000), RLOCK_EINVAL);
  CHECK_MSG(strstr(rlock_last_error(), "replica_sync is 7"), "message: %s", rlock_last_error());
  CHECK_RC(new_client_rc(-1, 1000, 3000), RLOCK_EINVAL);
  CHECK_RC(new_client_rc(RLOCK_REPLICA_SYNC_ONE, -5, 3000), RLOCK_EINVAL);
  CHECK_MSG(strstr(rlock_last_error(), "replica_sync_timeout_ms"), "message: %s", rlock_last_error());
  CHECK_RC(new_client_rc(RLOCK_REPLICA_SYNC_ALL, 3000, 3000), RLOCK_EINVAL);
  CHECK_MSG(strstr(rlock_last_error(), "less than command_timeout_ms"), "message: %s", rlock_last_error());
  /* off: the timeout is not used, not checked; valid options get as far as connecting */
  CHECK_RC(new_client_rc(RLOCK_REPLICA_SYNC_OFF, 0, 3000), RLOCK_ECONNECT);
  CHECK_RC(new_client_rc(RLOCK_REPLICA_SYNC_MAJORITY, 2999, 3000), RLOCK_ECONNECT);
  CHECK_RC(new_client_rc(RLOCK_REPLICA_SYNC_ONE, 0, 300), RLOCK_ECONNECT); /* automatic: 150 ms */
  CHECK_STREQ(rlock_err_name(RLOCK_ENOSYNC), "RLOCK_ENOSYNC");
}

/* A replica still in its first sync (the master holds the transfer back:
 * repl-diskless-sync-delay) is connected but cannot acknowledge anything:
 * WAIT never counts it. It is not waited for (policy one: no WAIT at all),
 * so an acquire is not refused for the whole sync (after a failover every
 * replica resyncs with the new master). */
static int one_replica_syncing(void *arg) {
  redisReply *r = th_cmd(master, "INFO", "replication", NULL);
  int syncing = r->type == REDIS_REPLY_STRING && strstr(r->str, "connected_slaves:1") &&
                !strstr(r->str, "state=online");
  th_reply_free(r);
  (void)arg;
  return syncing;
}
TEST(syncing_replica_not_counted) {
  th_reply_free(th_cmd(master, "CONFIG", "SET", "repl-diskless-sync", "yes", NULL));
  th_reply_free(th_cmd(master, "CONFIG", "SET", "repl-diskless-sync-delay", "60", NULL));
  th_server_t *r = th_replica_start(master);
  CHECK_MSG(th_wait_until(one_replica_syncing, NULL, ONLINE_MS), "the replica never showed up syncing");
  rlock_client_t *c = client(RLOCK_REPLICA_SYNC_ONE, 0, 0, "rs-syncing");
  rlock_lock_t *l = th_lock(c, "rs:syncing");
  long long w0 = waits(master);
  int rc = rlock_lock_acquire(l, 1, 0, 60000, NULL);
  CHECK_MSG(rc == 0, "acquire: %s: %s", rlock_err_name(rc), rlock_last_error());
  CHECK_EQ(waits(master) - w0, 0);
  CHECK_OK(rlock_lock_release(l, 1));
  CHECK_EQ(th_cmd_int(master, "EXISTS", "rs:syncing", NULL), 0);
  rlock_lock_free(l);
  rlock_client_free(c);
  th_server_stop(r);
  th_reply_free(th_cmd(master, "CONFIG", "SET", "repl-diskless-sync-delay", "0", NULL));
  th_replicas_wait(master, 0, ONLINE_MS);
}

/* The MultiLock's final step (its one lease, which may be longer than the
 * watchdog's) carries WAIT like the acquire: a lease the replicas never saw
 * would be lost with the master while the client counts on it. */
TEST(multilock_relet_carries_wait) {
  replicas_up(1);
  rlock_client_t *c = client(RLOCK_REPLICA_SYNC_ONE, 3, 3000, "rs-relet");
  rlock_lock_t *a = th_lock(c, "rs:ra"), *b = th_lock(c, "rs:rb");
  rlock_lock_t *members[2] = {a, b};
  rlock_multilock_t *m = NULL;
  CHECK_OK(rlock_multilock_new(&m, members, 2));
  long long w0 = waits(master);
  CHECK_OK(rlock_multilock_acquire(m, 5, 0, 60000, NULL)); /* a lease 20 watchdog timeouts long */
  long long n = waits(master) - w0;
  rlock_stats_t st = stats(c);
  CHECK_MSG(n == 4 + (long long)st.renewals, "WAIT calls %lld, want 2 acquires + 2 final steps + %llu renewals", n,
            (unsigned long long)st.renewals);
  CHECK_OK(rlock_multilock_release(m, 5));
  rlock_multilock_free(m);
  rlock_lock_free(a), rlock_lock_free(b);
  rlock_client_free(c);
  replicas_down();
}

/* RLOCK_TEST_ONLY=<name> runs one test (to see one fail on its own). */
#define RUN_SEL(name)                               \
  do {                                              \
    const char *only_ = getenv("RLOCK_TEST_ONLY");  \
    if (!only_ || !strcmp(only_, #name)) RUN(name); \
  } while (0)

int main(int argc, char **argv) {
  th_init(argc, argv, 170);
  static const char *const fast_sync[] = {"--repl-diskless-sync-delay", "0", NULL}; /* default: 5 s */
  th_server_opts_t mo = {.extra_args = fast_sync};
  master = th_server_start(&mo);
  RUN_SEL(options_validated);
  RUN_SEL(no_replicas_no_wait);
  RUN_SEL(acquire_unlock_renew_carry_wait);
  RUN_SEL(policy_off_sends_no_wait);
  RUN_SEL(paused_replica_acquire_fails_clean);
  RUN_SEL(reentrant_miss_keeps_outer_hold);
  RUN_SEL(undone_grant_wakes_waiters);
  RUN_SEL(close_during_wait_gives_back);
  RUN_SEL(close_during_two_waits_gives_back);
  RUN_SEL(queued_waits_do_not_time_out);
  RUN_SEL(conn_lost_during_wait_not_synced);
  RUN_SEL(refused_undo_is_not_a_grant);
  RUN_SEL(cancel_during_wait);
  RUN_SEL(wait_refused_by_acl);
  RUN_SEL(info_refused_by_acl_connects);
  RUN_SEL(two_replicas_one_paused);
  RUN_SEL(replica_count_refreshed);
  RUN_SEL(replicas_attached_later_counted);
  RUN_SEL(master_cut_off_from_its_replicas);
  RUN_SEL(syncing_replica_not_counted);
  RUN_SEL(unlock_miss_stands);
  RUN_SEL(renewal_miss_counted);
  RUN_SEL(history_under_replica_pauses);
  RUN_SEL(multilock_relet_carries_wait);
  th_server_stop(master);
  return th_done();
}
