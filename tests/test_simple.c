/* test_simple.c -- the simple lock (rlock_lock_new_simple, kinds/simple.c):
 * SET NAME <token> NX PX <lease>, compare-and-delete release,
 * compare-and-PEXPIRE renewal, against a real redis-server:
 *   layout            the key is a string holding the owner id, its TTL the
 *                     lease; queries answer in the simple layout
 *   not_reentrant     the holder's second acquire fails at once (RLOCK_EBUSY,
 *                     a message that says why), even with a wait forever
 *   foreign_token     a key holding another program's token: busy, never
 *                     released or renewed by rlock, force unlock deletes it
 *   polls_foreign_release  a release that publishes nothing (another
 *                     library's DEL) is noticed by polling, long before the
 *                     holder's TTL
 *   local_release_wakes  an rlock release wakes the waiter by its message
 *   watchdog_and_lost the watchdog renews simple and reentrant holds of one
 *                     client side by side; a key taken over behind the
 *                     holder's back is reported lost (RLOCK_LOST_DELETED)
 *   other_type        a reentrant lock's hash under the name is busy, not an error
 *   string_in_reentrant_batch  a reentrant hold whose name became a simple
 *                     lock (a string) elsewhere is reported lost; the
 *                     other holds renewed in the same batch stay renewed
 *   other_kind_release a release through a handle of the other kind fails
 *                     and leaves the hold tracked and renewed
 *   cancel_waiter     a cancelled waiter ends with RLOCK_ECANCELED and leaves
 *                     nothing behind
 *   reply_lost_undone a try whose answers never came (the server in DEBUG
 *                     SLEEP past the command timeout and the re-send) ends
 *                     with RLOCK_ETIMEDOUT; once the server wakes, the try
 *                     applies and the undo sent behind it gives the lock back */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "harness.h"

static th_server_t *srv;

static rlock_lock_t *simple(rlock_client_t *c, const char *name) {
  rlock_lock_t *l = NULL;
  CHECK_OK(rlock_lock_new_simple(c, name, strlen(name), &l));
  return l;
}

static char *get(const char *key) { return th_cmd_str(srv, "GET", key, NULL); }

TEST(layout) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = simple(c, "simple:layout");
  CHECK_OK(rlock_lock_trylock(l, 0, 20000));
  char me[128];
  th_owner_id(c, RLOCK_OWNER_THREAD | (uint64_t)th_gettid(), me, sizeof me);
  redisReply *t = th_cmd(srv, "TYPE", "simple:layout", NULL);
  CHECK_STREQ(t->str, "string");
  th_reply_free(t);
  char *v = get("simple:layout");
  CHECK_STREQ(v, me);
  free(v);
  long long pttl = th_cmd_int(srv, "PTTL", "simple:layout", NULL);
  CHECK(pttl > 10000 && pttl <= 20000);
  int held = 0, locked = 0;
  int64_t count = 0;
  CHECK_OK(rlock_lock_is_locked(l, &locked));
  CHECK_OK(rlock_lock_is_held(l, RLOCK_OWNER_SELF, &held));
  CHECK_OK(rlock_lock_hold_count(l, RLOCK_OWNER_SELF, &count));
  CHECK_EQ(locked, 1);
  CHECK_EQ(held, 1);
  CHECK_EQ(count, 1);
  CHECK_OK(rlock_lock_is_held(l, 5, &held)); /* another owner */
  CHECK_EQ(held, 0);
  rlock_holder_t *hs = NULL;
  size_t n = 0;
  CHECK_OK(rlock_lock_holders(l, &hs, &n));
  CHECK_EQ(n, 1);
  CHECK_STREQ(hs[0].owner, me);
  rlock_holders_free(hs, n);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "simple:layout", NULL), 0);
  CHECK_RC(rlock_lock_unlock(l), RLOCK_ENOTHELD);
  CHECK_OK(rlock_lock_hold_count(l, RLOCK_OWNER_SELF, &count));
  CHECK_EQ(count, 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(not_reentrant) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = simple(c, "simple:reenter");
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  CHECK_RC(rlock_lock_trylock(l, 60000, 30000), RLOCK_EBUSY);
  CHECK_MSG(strstr(rlock_last_error(), "not reentrant"), "message: %s", rlock_last_error());
  CHECK_RC(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG), RLOCK_EBUSY); /* wait forever: still refused */
  /* the refused acquires changed nothing: one hold, released by one unlock */
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "simple:reenter", NULL), 0);
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  CHECK_EQ(st.held, 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(foreign_token) {
  rlock_client_t *c = th_client(srv->url, 1000);
  rlock_lock_t *l = simple(c, "simple:foreign");
  th_reply_free(th_cmd(srv, "SET", "simple:foreign", "their-token", "PX", "60000", NULL));
  CHECK_RC(rlock_lock_trylock(l, 0, 5000), RLOCK_EBUSY);
  CHECK_RC(rlock_lock_trylock(l, 100, 5000), RLOCK_EBUSY);
  CHECK_RC(rlock_lock_unlock(l), RLOCK_ENOTHELD);
  int force_was = -1;
  char *v = get("simple:foreign");
  CHECK_STREQ(v, "their-token"); /* compare-and-delete left it alone */
  free(v);
  CHECK_OK(rlock_lock_force_unlock(l, &force_was));
  CHECK_EQ(force_was, 1);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "simple:foreign", NULL), 0);
  CHECK_OK(rlock_lock_force_unlock(l, &force_was));
  CHECK_EQ(force_was, 0);
  th_reply_free(th_cmd(srv, "HSET", "simple:foreign", "a", "b", NULL));
  CHECK_RC(rlock_lock_force_unlock(l, &force_was), RLOCK_ENOTLOCK);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "simple:foreign", NULL), 1);
  th_reply_free(th_cmd(srv, "DEL", "simple:foreign", NULL));
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* ------------------------------------------------------------ waiting */

typedef struct waiter {
  rlock_lock_t *l;
  int64_t wait_ms;
  rlock_cancel_t *cancel;
  int rc;
  atomic_int done;
  char owner[128];
} waiter_t;

static void *wait_thread(void *arg) {
  waiter_t *w = arg;
  w->rc = rlock_lock_acquire(w->l, RLOCK_OWNER_SELF, w->wait_ms, 60000, w->cancel);
  if (w->rc == 0) w->rc = rlock_lock_unlock(w->l) == 0 ? 0 : -100; /* it held it: give it back */
  atomic_store(&w->done, 1);
  return NULL;
}

static int is_done(void *arg) { return atomic_load(&((waiter_t *)arg)->done); }

TEST(polls_foreign_release) {
  rlock_client_t *c = th_client(srv->url, 0);
  waiter_t w = {.l = simple(c, "simple:poll"), .wait_ms = 60000};
  /* another library's hold, a long lease: a waiter that only slept until the
   * TTL would wait 60 s */
  th_reply_free(th_cmd(srv, "SET", "simple:poll", "their-token", "PX", "60000", NULL));
  pthread_t t;
  pthread_create(&t, NULL, wait_thread, &w);
  CHECK(TH_STAT_REACHES(c, acquire_attempts, 3, 20000));  /* it polls */
  th_reply_free(th_cmd(srv, "DEL", "simple:poll", NULL)); /* released without a message */
  /* polls are at most 500 ms apart; 20 s is a margin for a loaded machine,
   * a third of the TTL that a waiter without polling would sleep */
  CHECK_MSG(th_wait_until(is_done, &w, 20000), "the waiter slept while the lock was free");
  pthread_join(t, NULL);
  CHECK_OK(w.rc);
  rlock_lock_free(w.l);
  rlock_client_free(c);
}

static int one_message(void *c) {
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  return st.messages >= 1;
}

static int subscribed(void *chan) { return th_numsub(srv, chan) >= 1; }

TEST(local_release_wakes) {
  rlock_client_t *a = th_client(srv->url, 0), *b = th_client(srv->url, 0);
  rlock_lock_t *la = simple(a, "simple:wake");
  waiter_t w = {.l = simple(b, "simple:wake"), .wait_ms = 60000};
  CHECK_OK(rlock_lock_trylock(la, 0, 60000));
  pthread_t t;
  pthread_create(&t, NULL, wait_thread, &w);
  CHECK(th_wait_until(subscribed, "rlock_simple__channel:{simple:wake}", 20000));
  CHECK_OK(rlock_lock_unlock(la));
  CHECK(th_wait_until(is_done, &w, 20000));
  pthread_join(t, NULL);
  CHECK_OK(w.rc);
  CHECK(one_message(b)); /* woken by the release's message */
  rlock_lock_free(la);
  rlock_lock_free(w.l);
  rlock_client_free(a);
  rlock_client_free(b);
}

TEST(cancel_waiter) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_cancel_t *cancel;
  CHECK_OK(rlock_cancel_new(&cancel));
  waiter_t w = {.l = simple(c, "simple:cancel"), .wait_ms = RLOCK_WAIT_FOREVER, .cancel = cancel};
  th_reply_free(th_cmd(srv, "SET", "simple:cancel", "their-token", "PX", "60000", NULL));
  pthread_t t;
  pthread_create(&t, NULL, wait_thread, &w);
  CHECK(TH_STAT_REACHES(c, acquire_attempts, 3, 20000));
  rlock_cancel_trigger(cancel);
  CHECK(th_wait_until(is_done, &w, 20000));
  pthread_join(t, NULL);
  CHECK_EQ(w.rc, RLOCK_ECANCELED);
  char *v = get("simple:cancel");
  CHECK_STREQ(v, "their-token");
  free(v);
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  CHECK_EQ(st.held, 0);
  th_reply_free(th_cmd(srv, "DEL", "simple:cancel", NULL));
  rlock_cancel_free(cancel);
  rlock_lock_free(w.l);
  rlock_client_free(c);
}

/* ------------------------------------------------------------ watchdog */

static th_lost_t lost = TH_LOST_INIT;

TEST(watchdog_and_lost) {
  rlock_client_t *c = th_client(srv->url, 1000);
  rlock_client_on_lost(c, th_lost_record, &lost);
  rlock_lock_t *s = simple(c, "simple:wd"), *r = th_lock(c, "simple:wd-reentrant");
  CHECK_OK(rlock_lock_lock(s, RLOCK_LEASE_WATCHDOG));
  CHECK_OK(rlock_lock_lock(r, RLOCK_LEASE_WATCHDOG));
  /* two rounds of both kinds (every ~333 ms): nothing lost, both keys alive */
  CHECK(TH_STAT_REACHES(c, renewed_locks, 4, 20000));
  CHECK(!th_lost_once(&lost));
  CHECK(th_cmd_int(srv, "PTTL", "simple:wd", NULL) > 0);
  CHECK(th_cmd_int(srv, "PTTL", "simple:wd-reentrant", NULL) > 0);
  /* another program takes the name over (our lease ran out, say) */
  th_reply_free(th_cmd(srv, "SET", "simple:wd", "their-token", "PX", "60000", NULL));
  CHECK(th_wait_until(th_lost_once, &lost, 20000));
  pthread_mutex_lock(&lost.mu);
  CHECK_EQ(lost.reason, RLOCK_LOST_DELETED);
  CHECK_STREQ(lost.name, "simple:wd");
  pthread_mutex_unlock(&lost.mu);
  char *v = get("simple:wd");
  CHECK_STREQ(v, "their-token"); /* the renewal never touched the new holder's key */
  free(v);
  CHECK(th_cmd_int(srv, "PTTL", "simple:wd", NULL) <= 60000);
  CHECK_RC(rlock_lock_unlock(s), RLOCK_ENOTHELD);
  CHECK_OK(rlock_lock_unlock(r));
  th_reply_free(th_cmd(srv, "DEL", "simple:wd", NULL));
  rlock_lock_free(s);
  rlock_lock_free(r);
  rlock_client_free(c);
}

/* One client, one owner, one name: a hold of one kind and a release through
 * a handle of the other kind (a mistake: the name is the other kind's). The
 * release fails, and the hold it could not release stays tracked and renewed
 * (it was forgotten: never renewed again, no lost callback, its lease ran out
 * while its owner believed it held). */
static void other_kind_release(bool simple_first) {
  rlock_client_t *c = th_client(srv->url, 1000);
  th_lost_reset(&lost);
  rlock_client_on_lost(c, th_lost_record, &lost);
  rlock_lock_t *s = simple(c, "simple:mix"), *r = th_lock(c, "simple:mix");
  rlock_lock_t *held = simple_first ? s : r, *other = simple_first ? r : s;
  CHECK_OK(rlock_lock_acquire(held, 7, 0, RLOCK_LEASE_WATCHDOG, NULL));
  CHECK(rlock_lock_release(other, 7) != 0); /* not held through that handle */
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  /* 4 renewals (~1.3 s) outlast the 1 s lease */
  CHECK_MSG(TH_STAT_REACHES(c, renewed_locks, st.renewed_locks + 4, 20000), "the hold is no longer renewed");
  CHECK(!th_lost_once(&lost));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "simple:mix", NULL), 1);
  CHECK_OK(rlock_lock_release(held, 7));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "simple:mix", NULL), 0);
  rlock_lock_free(s);
  rlock_lock_free(r);
  rlock_client_free(c);
}

TEST(other_kind_release) {
  other_kind_release(true);
  other_kind_release(false);
}

/* A client holds two reentrant locks (one renewal batch). One of them is
 * deleted behind its back and the name taken as a simple lock (a string) by
 * another program: that hold is reported lost (RLOCK_LOST_DELETED) by the
 * next renewal, and the other hold of the batch is still renewed (the
 * reentrant renewal failed on the string with WRONGTYPE: the whole batch
 * went unrenewed, both holds were lost when their leases ran out). */
TEST(string_in_reentrant_batch) {
  rlock_client_t *c = th_client(srv->url, 1000);
  th_lost_reset(&lost);
  rlock_client_on_lost(c, th_lost_record, &lost);
  rlock_lock_t *a = th_lock(c, "simple:batch-a"), *x = th_lock(c, "simple:batch-x");
  CHECK_OK(rlock_lock_lock(a, RLOCK_LEASE_WATCHDOG));
  CHECK_OK(rlock_lock_lock(x, RLOCK_LEASE_WATCHDOG));
  th_reply_free(th_cmd(srv, "DEL", "simple:batch-x", NULL));
  th_reply_free(th_cmd(srv, "SET", "simple:batch-x", "their-token", "PX", "60000", NULL));
  CHECK(th_wait_until(th_lost_once, &lost, 20000));
  pthread_mutex_lock(&lost.mu);
  CHECK_STREQ(lost.name, "simple:batch-x");
  CHECK_EQ(lost.reason, RLOCK_LOST_DELETED);
  pthread_mutex_unlock(&lost.mu);
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  /* 4 renewals of a (~1.3 s) outlast its 1 s lease */
  CHECK_MSG(TH_STAT_REACHES(c, renewed_locks, st.renewed_locks + 4, 20000),
            "the other hold of the batch is no longer renewed");
  pthread_mutex_lock(&lost.mu);
  CHECK_EQ(lost.calls, 1);
  pthread_mutex_unlock(&lost.mu);
  CHECK_OK(rlock_lock_unlock(a));
  char *v = get("simple:batch-x");
  CHECK_STREQ(v, "their-token"); /* left to its holder */
  free(v);
  th_reply_free(th_cmd(srv, "DEL", "simple:batch-x", NULL));
  rlock_lock_free(a);
  rlock_lock_free(x);
  rlock_client_free(c);
}

TEST(other_type) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *s = simple(c, "simple:type"), *r = th_lock(c, "simple:type");
  CHECK_OK(rlock_lock_acquire(r, 1, 0, 20000, NULL)); /* a reentrant lock holds the name */
  CHECK_RC(rlock_lock_trylock(s, 0, 5000), RLOCK_EBUSY);
  CHECK_RC(rlock_lock_trylock(s, 50, 5000), RLOCK_EBUSY);
  CHECK_OK(rlock_lock_release(r, 1));
  CHECK_OK(rlock_lock_trylock(s, 0, 5000));
  CHECK_OK(rlock_lock_unlock(s));
  rlock_lock_free(s);
  rlock_lock_free(r);
  rlock_client_free(c);
}

/* A raw connection that sent cmd without waiting for its reply. */
static redisContext *send_nowait(const char *cmd) {
  redisContext *rc = th_raw_connect(srv);
  CHECK(redisAppendCommand(rc, cmd) == REDIS_OK);
  int done = 0;
  while (!done) CHECK(redisBufferWrite(rc, &done) == REDIS_OK);
  return rc;
}

/* The server has read everything rc sent (its DEBUG SLEEP is running). */
static int server_took(void *arg) {
  redisContext *rc = arg;
  int me = th_local_port(rc->fd);
  long tx = -1, rx = -1;
  return th_tcp_queues(me, srv->port, &tx, NULL) && tx == 0 && th_tcp_queues(srv->port, me, NULL, &rx) && rx == 0;
}

static long long scripts_want;
static int scripts_ran(void *arg) {
  (void)arg;
  return th_scripts_run(srv) >= scripts_want;
}

TEST(reply_lost_undone) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = srv->url;
  o.command_timeout_ms = 300;
  o.retry_attempts = 1;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  rlock_lock_t *l = simple(c, "simple:undo");
  long long s0 = th_scripts_run(srv);
  redisContext *rc = send_nowait("DEBUG SLEEP 3"); /* longer than 2 x 300 ms, with a margin for valgrind */
  CHECK(th_wait_until(server_took, rc, 5000));
  CHECK_RC(rlock_lock_trylock(l, 0, 30000), RLOCK_ETIMEDOUT);
  redisReply *r = NULL;
  CHECK(redisGetReply(rc, (void **)&r) == REDIS_OK); /* the server is awake */
  freeReplyObject(r);
  redisFree(rc);
  scripts_want = s0 + 3; /* the try, its re-send (answered by the latch), the undo */
  CHECK(th_wait_until(scripts_ran, NULL, 20000));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "simple:undo", NULL), 0);
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  CHECK_EQ(st.held, 0);
  CHECK_OK(rlock_lock_trylock(l, 0, 30000)); /* free, and the client can take it */
  CHECK_OK(rlock_lock_unlock(l));
  rlock_lock_free(l);
  rlock_client_free(c);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 170);
  const char *extra[] = {"--enable-debug-command", "yes", NULL}; /* DEBUG SLEEP */
  th_server_opts_t so = {.extra_args = extra};
  srv = th_server_start(&so);
  RUN(layout);
  RUN(not_reentrant);
  RUN(foreign_token);
  RUN(polls_foreign_release);
  RUN(local_release_wakes);
  RUN(cancel_waiter);
  RUN(watchdog_and_lost);
  RUN(other_type);
  RUN(other_kind_release);
  RUN(string_in_reentrant_batch);
  RUN(reply_lost_undone);
  th_server_stop(srv);
  return th_done();
}
