/* test_user_commands.c -- what a user sends with rlock_client_command never
 * affects the lock traffic. User commands run on their own connection
 * (opened on first use), so a blocking command (BLPOP 0) stalls neither the
 * watchdog's renewals nor another thread's acquire; commands that would
 * change that connection's state or its reply stream (MULTI, SUBSCRIBE,
 * SELECT, HELLO, CLIENT REPLY, QUIT, RESET...) are refused with RLOCK_EINVAL
 * and a message naming them; a command that outlives its timeout does not
 * leave later ones stuck behind it; the user connection comes back after a
 * server-side CLIENT KILL; transactions run as one unit beside the lock
 * traffic; per-call timeouts; user commands counted apart in the stats.
 * Usage: test_user_commands [test name]. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static th_server_t *srv;
static rlock_client_t *cli;

static rlock_client_t *client_with(int64_t watchdog_ms, int64_t command_timeout_ms, const char *name) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = srv->url;
  if (watchdog_ms) o.watchdog_timeout_ms = watchdog_ms;
  if (command_timeout_ms) o.command_timeout_ms = command_timeout_ms;
  if (name) o.client_name = name;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  return c;
}

static rlock_reply_t *ucmd(rlock_client_t *c, int argc, const char *const *argv) {
  rlock_reply_t *r = NULL;
  CHECK_OK(rlock_client_command(c, argc, argv, NULL, &r));
  CHECK(r != NULL);
  return r;
}

static int64_t client_id(rlock_client_t *c) {
  const char *argv[] = {"CLIENT", "ID"};
  rlock_reply_t *r = ucmd(c, 2, argv);
  CHECK_EQ(r->type, RLOCK_REPLY_INTEGER);
  int64_t id = r->integer;
  rlock_reply_free(r);
  return id;
}

static void ping(rlock_client_t *c) {
  const char *argv[] = {"PING"};
  rlock_reply_t *r = ucmd(c, 1, argv);
  CHECK_EQ(r->type, RLOCK_REPLY_STATUS);
  CHECK_STREQ(r->str, "PONG");
  rlock_reply_free(r);
}

/* A number from INFO (e.g. "blocked_clients"). */
static long long info_num(const char *section, const char *field) {
  char *s = th_cmd_str(srv, "INFO", section, NULL);
  CHECK(s != NULL);
  char key[64];
  snprintf(key, sizeof key, "%s:", field);
  char *p = strstr(s, key);
  CHECK_MSG(p != NULL, "INFO %s has no %s", section, field);
  long long v = strtoll(p + strlen(key), NULL, 10);
  free(s);
  return v;
}

static int some_client_blocked(void *arg) {
  (void)arg;
  return info_num("clients", "blocked_clients") >= 1;
}
static int no_client_blocked(void *arg) {
  (void)arg;
  return info_num("clients", "blocked_clients") == 0;
}

/* A trylock from its own thread: the result and what the client tracks. */
typedef struct tryer {
  rlock_lock_t *lock;
  int rc, rc_valid;
  int64_t valid_until, tid;
} tryer_t;

static void *trylock_thread(void *arg) {
  tryer_t *t = arg;
  t->tid = th_gettid();
  t->rc = rlock_lock_trylock(t->lock, 0, RLOCK_LEASE_WATCHDOG);
  t->rc_valid = rlock_lock_valid_until(t->lock, RLOCK_OWNER_SELF, &t->valid_until);
  return NULL;
}

/* MULTI on the old shared connection made every lock script "+QUEUED". */
TEST(multi_refused_and_locks_unaffected) {
  const char *multi[] = {"MULTI"};
  rlock_reply_t *r = NULL;
  int rc = rlock_client_command(cli, 1, multi, NULL, &r);
  char msg[512];
  snprintf(msg, sizeof msg, "%s", rlock_last_error());
  rlock_reply_free(r);

  rlock_lock_t *l = th_lock(cli, "uc:multi");
  tryer_t t = {.lock = l};
  pthread_t th;
  CHECK_EQ(pthread_create(&th, NULL, trylock_thread, &t), 0);
  pthread_join(th, NULL);
  CHECK_OK(t.rc);
  CHECK_OK(t.rc_valid);
  CHECK(t.valid_until > rlock_now_ms());
  char owner[128];
  th_owner_id(cli, RLOCK_OWNER_THREAD | (uint64_t)t.tid, owner, sizeof owner);
  CHECK_EQ(th_hget_num(srv, "uc:multi", owner), 1);
  rlock_stats_t st;
  rlock_client_stats(cli, &st);
  CHECK_EQ(st.held, 1);

  CHECK_RC(rc, RLOCK_EINVAL);
  CHECK_MSG(strstr(msg, "MULTI") != NULL, "message does not name the command: %s", msg);
  CHECK_OK(rlock_lock_release(l, RLOCK_OWNER_THREAD | (rlock_owner_t)t.tid));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "uc:multi", NULL), 0);
  rlock_client_stats(cli, &st);
  CHECK_EQ(st.held, 0);
  rlock_lock_free(l);
  ping(cli);
}

typedef struct refused {
  int argc;
  const char *argv[4];
  const char *named; /* what the message must name */
} refused_t;

static const refused_t refused[] = {
    {2, {"SUBSCRIBE", "uc:ch"}, "SUBSCRIBE"},
    {2, {"psubscribe", "uc:*"}, "PSUBSCRIBE"},
    {2, {"SSubscribe", "uc:s"}, "SSUBSCRIBE"},
    {1, {"UNSUBSCRIBE"}, "UNSUBSCRIBE"},
    {1, {"punsubscribe"}, "PUNSUBSCRIBE"},
    {1, {"SUNSUBSCRIBE"}, "SUNSUBSCRIBE"},
    {1, {"MONITOR"}, "MONITOR"},
    {2, {"SELECT", "1"}, "SELECT"},
    {2, {"select", "0"}, "SELECT"},
    {2, {"HELLO", "3"}, "HELLO"},
    {1, {"hello"}, "HELLO"},
    {2, {"AUTH", "secret"}, "AUTH"},
    {3, {"CLIENT", "REPLY", "OFF"}, "CLIENT REPLY"},
    {3, {"client", "reply", "skip"}, "CLIENT REPLY"},
    {3, {"Client", "Tracking", "on"}, "CLIENT TRACKING"},
    {3, {"CLIENT", "CACHING", "yes"}, "CLIENT CACHING"},
    {3, {"CLIENT", "SETNAME", "x"}, "CLIENT SETNAME"},
    {3, {"CLIENT", "NO-EVICT", "on"}, "CLIENT NO-EVICT"},
    {3, {"client", "no-touch", "on"}, "CLIENT NO-TOUCH"},
    {4, {"CLIENT", "SetInfo", "LIB-NAME", "x"}, "CLIENT SETINFO"},
    {1, {"QUIT"}, "QUIT"},
    {1, {"reset"}, "RESET"},
    {1, {"MULTI"}, "MULTI"},
    {1, {"EXEC"}, "EXEC"},
    {1, {"DISCARD"}, "DISCARD"},
    {2, {"WATCH", "uc:k"}, "WATCH"},
    {1, {"UNWATCH"}, "UNWATCH"},
    {1, {"SYNC"}, "SYNC"},
    {3, {"PSYNC", "?", "-1"}, "PSYNC"},
    {3, {"REPLCONF", "listening-port", "1"}, "REPLCONF"},
    {1, {"READONLY"}, "READONLY"},
    {1, {"READWRITE"}, "READWRITE"},
    {1, {"ASKING"}, "ASKING"},
};

TEST(connection_state_commands_refused) {
  rlock_stats_t st0, st1;
  rlock_client_stats(cli, &st0);
  int64_t id = client_id(cli);
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    const refused_t *f = &refused[i];
    rlock_reply_t *r = (rlock_reply_t *)1;
    int rc = rlock_client_command(cli, f->argc, f->argv, NULL, &r);
    CHECK_MSG(rc == RLOCK_EINVAL, "%s %s: got %s, want RLOCK_EINVAL", f->argv[0], f->argc > 1 ? f->argv[1] : "",
              rlock_err_name(rc));
    CHECK(r == NULL);
    CHECK_MSG(strstr(rlock_last_error(), f->named) != NULL, "message for %s does not name it: %s", f->named,
              rlock_last_error());
  }
  /* Lengths are honoured: "MULTIPLY" cut to 5 bytes is MULTI. */
  const char *cut[] = {"MULTIPLY"};
  size_t cutlen[] = {5};
  rlock_reply_t *r = NULL;
  CHECK_RC(rlock_client_command(cli, 1, cut, cutlen, &r), RLOCK_EINVAL);
  /* Harmless look-alikes and read-only CLIENT subcommands go through. */
  const char *pub[] = {"PUBLISH", "uc:ch", "x"};
  r = ucmd(cli, 3, pub);
  CHECK_EQ(r->type, RLOCK_REPLY_INTEGER);
  rlock_reply_free(r);
  const char *getname[] = {"client", "getname"};
  r = ucmd(cli, 2, getname);
  CHECK(r->type == RLOCK_REPLY_STRING || r->type == RLOCK_REPLY_NIL);
  rlock_reply_free(r);
  const char *selectx[] = {"SELECTX"}; /* unknown to Redis: its error reply */
  r = ucmd(cli, 1, selectx);
  CHECK_EQ(r->type, RLOCK_REPLY_ERROR);
  rlock_reply_free(r);

  /* Still the same connection, in the same state, and the locks work. */
  CHECK_EQ(client_id(cli), id);
  ping(cli);
  rlock_lock_t *l = th_lock(cli, "uc:after-refused");
  CHECK_OK(rlock_lock_trylock(l, 0, 5000));
  CHECK_OK(rlock_lock_unlock(l));
  rlock_lock_free(l);
  rlock_client_stats(cli, &st1);
  CHECK_EQ(st1.reconnects, st0.reconnects);
}

/* BLPOP 0 in flight on one thread. */
typedef struct popper {
  rlock_client_t *c;
  int rc;
  rlock_reply_t *reply;
  atomic_int done;
} popper_t;

static void *blpop_thread(void *arg) {
  popper_t *p = arg;
  const char *argv[] = {"BLPOP", "uc:queue", "0"};
  p->rc = rlock_client_command(p->c, 3, argv, NULL, &p->reply);
  atomic_store(&p->done, 1);
  return NULL;
}

typedef struct renew_wait {
  rlock_client_t *c;
  uint64_t want;
} renew_wait_t;

static int renewed_enough(void *arg) {
  renew_wait_t *w = arg;
  rlock_stats_t st;
  rlock_client_stats(w->c, &st);
  return st.renewed_locks >= w->want;
}

#define WATCHDOG_MS 600 /* renewal every 200 ms */

TEST(blocking_command_does_not_stall_lock_traffic) {
  /* A command timeout far above the watchdog: a BLPOP on the lock
   * connection would hold back every renewal for that long. */
  rlock_client_t *c = client_with(WATCHDOG_MS, 20000, NULL);
  rlock_lock_t *held = th_lock(c, "uc:renewed"), *other = th_lock(c, "uc:other");
  char owner[128];
  th_owner_id(c, RLOCK_OWNER_THREAD | (uint64_t)th_gettid(), owner, sizeof owner);
  CHECK_OK(rlock_lock_lock(held, RLOCK_LEASE_WATCHDOG));

  popper_t p = {.c = c};
  pthread_t th;
  CHECK_EQ(pthread_create(&th, NULL, blpop_thread, &p), 0);
  CHECK_MSG(th_wait_until(some_client_blocked, NULL, 10000), "BLPOP never blocked on the server");

  /* Renewals go on: several periods' worth while the BLPOP blocks. */
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  renew_wait_t w = {c, st.renewed_locks + 4};
  CHECK_MSG(th_wait_until(renewed_enough, &w, 8 * WATCHDOG_MS),
            "renewals stalled behind the BLPOP (renewed_locks %llu, want %llu)", (unsigned long long)st.renewed_locks,
            (unsigned long long)w.want);
  CHECK_EQ(th_hget_num(srv, "uc:renewed", owner), 1);
  CHECK(th_cmd_int(srv, "PTTL", "uc:renewed", NULL) > 0);
  int64_t until = 0;
  CHECK_OK(rlock_lock_valid_until(held, RLOCK_OWNER_SELF, &until));
  CHECK(until > rlock_now_ms());

  /* A concurrent acquire is answered while the BLPOP still blocks. */
  int64_t t0 = rlock_now_ms();
  CHECK_OK(rlock_lock_trylock(other, 0, 5000));
  int64_t took = rlock_now_ms() - t0;
  CHECK_EQ(atomic_load(&p.done), 0);
  rlock_stats_t st2;
  rlock_client_stats(c, &st2);
  printf("during the BLPOP: %llu holds renewed, a trylock answered in %lld ms\n",
         (unsigned long long)(st2.renewed_locks - st.renewed_locks), (long long)took);
  CHECK_OK(rlock_lock_unlock(other));
  CHECK_EQ(atomic_load(&p.done), 0);

  /* The BLPOP itself still gets its element. */
  CHECK_EQ(th_cmd_int(srv, "RPUSH", "uc:queue", "v1", NULL), 1);
  pthread_join(th, NULL);
  CHECK_OK(p.rc);
  CHECK_EQ(p.reply->type, RLOCK_REPLY_ARRAY);
  CHECK_EQ(p.reply->elements, 2);
  CHECK_STREQ(p.reply->element[0]->str, "uc:queue");
  CHECK_STREQ(p.reply->element[1]->str, "v1");
  rlock_reply_free(p.reply);

  rlock_client_stats(c, &st);
  CHECK_EQ(st.locks_lost, 0);
  CHECK_OK(rlock_lock_unlock(held));
  rlock_lock_free(held);
  rlock_lock_free(other);
  rlock_client_free(c);
}

/* A blocking command that outlives the command timeout must not leave the
 * commands after it waiting behind it forever. */
TEST(timed_out_blocking_command_does_not_block_later_ones) {
  rlock_client_t *c = client_with(0, 300, NULL);
  const char *blpop[] = {"BLPOP", "uc:never", "0"};
  rlock_reply_t *r = NULL;
  int64_t t0 = rlock_now_ms();
  CHECK_RC(rlock_client_command(c, 3, blpop, NULL, &r), RLOCK_ETIMEDOUT);
  int64_t t1 = rlock_now_ms();
  CHECK(r == NULL);
  for (int i = 0; i < 3; i++) ping(c);
  printf("BLPOP timed out after %lld ms; the next PING answered %lld ms later\n", (long long)(t1 - t0),
         (long long)(rlock_now_ms() - t1));
  /* The server let go of the abandoned BLPOP. */
  CHECK_MSG(th_wait_until(no_client_blocked, NULL, 5000), "the timed-out BLPOP still blocks on the server");
  rlock_lock_t *l = th_lock(c, "uc:after-timeout");
  CHECK_OK(rlock_lock_trylock(l, 0, 5000));
  CHECK_OK(rlock_lock_unlock(l));
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* Connections of the test server named `name`. */
typedef struct named {
  const char *name;
  int want;
} named_t;

static int count_named(const char *name) {
  char *list = th_cmd_str(srv, "CLIENT", "LIST", NULL);
  CHECK(list != NULL);
  char needle[128];
  snprintf(needle, sizeof needle, " name=%s ", name);
  int n = 0;
  for (char *p = list; (p = strstr(p, needle)); p++) n++;
  free(list);
  return n;
}

static int named_count_is(void *arg) {
  named_t *n = arg;
  return count_named(n->name) == n->want;
}

typedef struct reconnect_wait {
  rlock_client_t *c;
  uint64_t want;
} reconnect_wait_t;

static int reconnected(void *arg) {
  reconnect_wait_t *w = arg;
  rlock_stats_t st;
  rlock_client_stats(w->c, &st);
  return st.reconnects >= w->want;
}

TEST(own_connection_survives_client_kill) {
  rlock_client_t *c = client_with(0, 0, "uc-kill");
  /* Opened on first use only: the lock and subscriber connections first. */
  named_t two = {"uc-kill", 2}, three = {"uc-kill", 3};
  CHECK_MSG(th_wait_until(named_count_is, &two, 5000), "want 2 connections before any command, have %d",
            count_named("uc-kill"));
  rlock_lock_t *l = th_lock(c, "uc:kill");
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  int64_t id = client_id(c);
  CHECK_MSG(named_count_is(&three), "want 3 connections after a command, have %d", count_named("uc-kill"));

  rlock_stats_t st;
  rlock_client_stats(c, &st);
  char ids[32];
  snprintf(ids, sizeof ids, "%lld", (long long)id);
  CHECK_EQ(th_cmd_int(srv, "CLIENT", "KILL", "ID", ids, NULL), 1);
  int64_t t0 = rlock_now_ms();
  reconnect_wait_t w = {c, st.reconnects + 1};
  CHECK_MSG(th_wait_until(reconnected, &w, 10000), "the user connection did not come back");
  printf("user connection back %lld ms after CLIENT KILL\n", (long long)(rlock_now_ms() - t0));
  int64_t id2 = client_id(c);
  CHECK(id2 != id);
  ping(c);
  CHECK_EQ(count_named("uc-kill"), 3);
  /* Only the user connection went down: the hold is untouched. */
  rlock_stats_t st2;
  rlock_client_stats(c, &st2);
  CHECK_EQ(st2.reconnects, st.reconnects + 1);
  CHECK_EQ(st2.locks_lost, 0);
  int held = 0;
  CHECK_OK(rlock_lock_is_held(l, RLOCK_OWNER_SELF, &held));
  CHECK_EQ(held, 1);
  CHECK_OK(rlock_lock_unlock(l));
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* ------------------------------------------------------------ transactions */

static rlock_reply_t *tx(rlock_client_t *c, size_t n, const rlock_command_t *cmds) {
  rlock_reply_t *r = NULL;
  CHECK_OK(rlock_client_transaction(c, n, cmds, &r));
  CHECK(r != NULL);
  return r;
}

TEST(transaction_results) {
  const char *set[] = {"SET", "uc:tx", "1"}, *incr[] = {"INCR", "uc:tx"}, *get[] = {"GET", "uc:tx"};
  rlock_command_t ok[] = {{3, set, NULL}, {2, incr, NULL}, {2, get, NULL}};
  rlock_reply_t *r = tx(cli, 3, ok);
  CHECK_EQ(r->type, RLOCK_REPLY_ARRAY);
  CHECK_EQ(r->elements, 3);
  CHECK_EQ(r->element[0]->type, RLOCK_REPLY_STATUS);
  CHECK_EQ(r->element[1]->integer, 2);
  CHECK_STREQ(r->element[2]->str, "2");
  rlock_reply_free(r);

  /* A command failing while it runs: an error element, the others ran. */
  const char *sets[] = {"SET", "uc:txs", "abc"}, *incrs[] = {"INCR", "uc:txs"}, *set2[] = {"SET", "uc:txs2", "x"};
  rlock_command_t runtime[] = {{3, sets, NULL}, {2, incrs, NULL}, {3, set2, NULL}};
  r = tx(cli, 3, runtime);
  CHECK_EQ(r->type, RLOCK_REPLY_ARRAY);
  CHECK_EQ(r->elements, 3);
  CHECK_EQ(r->element[1]->type, RLOCK_REPLY_ERROR);
  CHECK_EQ(r->element[2]->type, RLOCK_REPLY_STATUS);
  rlock_reply_free(r);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "uc:txs2", NULL), 1);

  /* A command Redis refuses while queueing: EXECABORT, nothing ran. */
  const char *seta[] = {"SET", "uc:txa", "1"}, *bad[] = {"INCR"};
  rlock_command_t aborted[] = {{3, seta, NULL}, {1, bad, NULL}};
  r = tx(cli, 2, aborted);
  CHECK_EQ(r->type, RLOCK_REPLY_ERROR);
  CHECK_MSG(strncmp(r->str, "EXECABORT", 9) == 0, "reply %s", r->str);
  rlock_reply_free(r);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "uc:txa", NULL), 0);

  /* A refused command inside: nothing is sent at all. */
  const char *sub[] = {"subscribe", "uc:ch"};
  rlock_command_t refused_inside[] = {{3, seta, NULL}, {2, sub, NULL}};
  r = (rlock_reply_t *)1;
  CHECK_RC(rlock_client_transaction(cli, 2, refused_inside, &r), RLOCK_EINVAL);
  CHECK(r == NULL);
  CHECK_MSG(strstr(rlock_last_error(), "SUBSCRIBE") != NULL, "message: %s", rlock_last_error());
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "uc:txa", NULL), 0);

  /* Bad arguments. */
  CHECK_RC(rlock_client_transaction(cli, 0, ok, &r), RLOCK_EINVAL);
  CHECK_RC(rlock_client_transaction(cli, 1, NULL, &r), RLOCK_EINVAL);
  CHECK_RC(rlock_client_transaction(cli, 1, ok, NULL), RLOCK_EINVAL);
  CHECK_RC(rlock_client_transaction(NULL, 1, ok, &r), RLOCK_EINVAL);
  rlock_command_t empty[] = {{0, set, NULL}};
  CHECK_RC(rlock_client_transaction(cli, 1, empty, &r), RLOCK_EINVAL);
  ping(cli);
}

#define TX_THREADS 4
#define TX_ROUNDS 150
#define LOCK_THREADS 2
#define LOCK_ROUNDS 100

static atomic_int tx_errors, lock_errors, inside;

static void *tx_thread(void *arg) {
  (void)arg;
  const char *a[] = {"INCR", "uc:ta"}, *b[] = {"INCR", "uc:tb"};
  rlock_command_t cmds[] = {{2, a, NULL}, {2, b, NULL}};
  for (int i = 0; i < TX_ROUNDS; i++) {
    rlock_reply_t *r = NULL;
    int rc = rlock_client_transaction(cli, 2, cmds, &r);
    /* uc:ta and uc:tb only ever move together: equal inside every EXEC. */
    if (rc || r->type != RLOCK_REPLY_ARRAY || r->elements != 2 || r->element[0]->integer != r->element[1]->integer)
      atomic_fetch_add(&tx_errors, 1);
    rlock_reply_free(r);
  }
  return NULL;
}

static void *lock_thread(void *arg) {
  rlock_lock_t *l = arg;
  for (int i = 0; i < LOCK_ROUNDS; i++) {
    if (rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG)) {
      atomic_fetch_add(&lock_errors, 1);
      continue;
    }
    if (atomic_fetch_add(&inside, 1) != 0) atomic_fetch_add(&lock_errors, 1);
    atomic_fetch_sub(&inside, 1);
    if (rlock_lock_unlock(l)) atomic_fetch_add(&lock_errors, 1);
  }
  return NULL;
}

TEST(transactions_beside_lock_traffic) {
  rlock_lock_t *l = th_lock(cli, "uc:txlock");
  rlock_stats_t st0, st1;
  rlock_client_stats(cli, &st0);
  pthread_t t[TX_THREADS + LOCK_THREADS];
  for (int i = 0; i < TX_THREADS; i++) CHECK_EQ(pthread_create(&t[i], NULL, tx_thread, NULL), 0);
  for (int i = 0; i < LOCK_THREADS; i++) CHECK_EQ(pthread_create(&t[TX_THREADS + i], NULL, lock_thread, l), 0);
  for (int i = 0; i < TX_THREADS + LOCK_THREADS; i++) pthread_join(t[i], NULL);
  CHECK_EQ(atomic_load(&tx_errors), 0);
  CHECK_EQ(atomic_load(&lock_errors), 0);
  char *a = th_cmd_str(srv, "GET", "uc:ta", NULL), *b = th_cmd_str(srv, "GET", "uc:tb", NULL);
  CHECK_EQ(strtoll(a, NULL, 10), TX_THREADS * TX_ROUNDS);
  CHECK_EQ(strtoll(b, NULL, 10), TX_THREADS * TX_ROUNDS);
  free(a);
  free(b);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "uc:txlock", NULL), 0);
  rlock_client_stats(cli, &st1);
  CHECK_EQ(st1.user_commands - st0.user_commands, TX_THREADS * TX_ROUNDS * 4);
  CHECK_EQ(st1.held, 0);
  CHECK_EQ(st1.locks_lost, 0);
  rlock_lock_free(l);
}

/* ------------------------------------------------------------ per-call timeouts, stats, db */

static int popper_done(void *arg) { return atomic_load(&((popper_t *)arg)->done); }

typedef struct timed_popper {
  popper_t p;
  int64_t timeout_ms;
  const char *key;
} timed_popper_t;

static void *timed_blpop_thread(void *arg) {
  timed_popper_t *t = arg;
  const char *argv[] = {"BLPOP", t->key, "0"};
  t->p.rc = rlock_client_command_timeout(t->p.c, t->timeout_ms, 3, argv, NULL, &t->p.reply);
  atomic_store(&t->p.done, 1);
  return NULL;
}

#define SHORT_TIMEOUT_MS 300

TEST(per_call_timeout) {
  rlock_client_t *c = client_with(0, SHORT_TIMEOUT_MS, NULL);
  /* Outlives the client's command timeout when asked to. */
  timed_popper_t t = {.p = {.c = c}, .timeout_ms = 30000, .key = "uc:slow"};
  pthread_t th;
  CHECK_EQ(pthread_create(&th, NULL, timed_blpop_thread, &t), 0);
  CHECK_MSG(th_wait_until(some_client_blocked, NULL, 10000), "BLPOP never blocked on the server");
  CHECK_MSG(!th_wait_until(popper_done, &t.p, 3 * SHORT_TIMEOUT_MS), "ended after %s: %s", rlock_err_name(t.p.rc),
            rlock_last_error());
  CHECK_EQ(th_cmd_int(srv, "RPUSH", "uc:slow", "v", NULL), 1);
  pthread_join(th, NULL);
  CHECK_OK(t.p.rc);
  CHECK_EQ(t.p.reply->elements, 2);
  CHECK_STREQ(t.p.reply->element[1]->str, "v");
  rlock_reply_free(t.p.reply);

  /* A shorter one times out with its own figure in the message. */
  const char *blpop[] = {"BLPOP", "uc:never", "0"}, *pingv[] = {"PING"};
  rlock_reply_t *r = NULL;
  CHECK_RC(rlock_client_command_timeout(c, 100, 3, blpop, NULL, &r), RLOCK_ETIMEDOUT);
  CHECK_MSG(strstr(rlock_last_error(), "100 ms") != NULL, "message: %s", rlock_last_error());
  ping(c);
  CHECK_OK(rlock_client_command_timeout(c, RLOCK_WAIT_FOREVER, 1, pingv, NULL, &r));
  CHECK_STREQ(r->str, "PONG");
  rlock_reply_free(r);
  CHECK_RC(rlock_client_command_timeout(c, 0, 1, pingv, NULL, &r), RLOCK_EINVAL);
  CHECK_RC(rlock_client_command_timeout(c, -5, 1, pingv, NULL, &r), RLOCK_EINVAL);
  CHECK_RC(rlock_client_command_timeout(NULL, 100, 1, pingv, NULL, &r), RLOCK_EINVAL);
  CHECK_MSG(th_wait_until(no_client_blocked, NULL, 5000), "a timed-out BLPOP still blocks on the server");
  rlock_client_free(c);
}

/* A blocking command keeps the user connection silent by design: the liveness
 * PING (which would queue behind it and miss its deadline) must not take the
 * connection, and the command with it, down. */
TEST(blocking_command_outlives_ping_interval) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = srv->url;
  o.command_timeout_ms = 200;
  o.ping_interval_ms = 50;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  rlock_stats_t s0, s1;
  rlock_client_stats(c, &s0);
  timed_popper_t t = {.p = {.c = c}, .timeout_ms = 30000, .key = "uc:pinged"};
  pthread_t th;
  CHECK_EQ(pthread_create(&th, NULL, timed_blpop_thread, &t), 0);
  CHECK_MSG(th_wait_until(some_client_blocked, NULL, 10000), "BLPOP never blocked on the server");
  /* the scenario: stay blocked for many ping intervals and PING deadlines */
  CHECK_MSG(!th_wait_until(popper_done, &t.p, 20 * 50 + 3 * 200), "ended after %s: %s", rlock_err_name(t.p.rc),
            rlock_last_error());
  CHECK_EQ(th_cmd_int(srv, "RPUSH", "uc:pinged", "v", NULL), 1);
  pthread_join(th, NULL);
  CHECK_OK(t.p.rc);
  CHECK_STREQ(t.p.reply->element[1]->str, "v");
  rlock_reply_free(t.p.reply);
  rlock_client_stats(c, &s1);
  CHECK_EQ(s1.reconnects - s0.reconnects, 0);
  rlock_client_free(c);
}

/* Freeing the client ends a user command that would wait forever. */
TEST(free_ends_a_blocked_command) {
  rlock_client_t *c = client_with(0, 0, NULL);
  timed_popper_t t = {.p = {.c = c}, .timeout_ms = RLOCK_WAIT_FOREVER, .key = "uc:forever"};
  pthread_t th;
  CHECK_EQ(pthread_create(&th, NULL, timed_blpop_thread, &t), 0);
  CHECK_MSG(th_wait_until(some_client_blocked, NULL, 10000), "BLPOP never blocked on the server");
  rlock_client_free(c);
  pthread_join(th, NULL);
  CHECK_RC(t.p.rc, RLOCK_ECLOSED);
  CHECK(t.p.reply == NULL);
  CHECK_MSG(th_wait_until(no_client_blocked, NULL, 5000), "the BLPOP still blocks after the client was freed");
}

TEST(stats_count_user_commands_apart) {
  rlock_client_t *c = client_with(0, 0, "uc-stats");
  named_t two = {"uc-stats", 2};
  CHECK(th_wait_until(named_count_is, &two, 5000)); /* both lock connections' handshakes written */
  /* A lock query's round trip: the command connection's handshake is over
   * and its writes are counted (a write is counted at the end of the pass
   * that queued it, which may come after the server saw the bytes). */
  rlock_lock_t *l = th_lock(c, "uc-stats:barrier");
  int locked = -1;
  CHECK_OK(rlock_lock_is_locked(l, &locked));
  rlock_lock_free(l);
  rlock_stats_t st0, st1;
  rlock_client_stats(c, &st0);
  for (int i = 0; i < 3; i++) ping(c);
  rlock_client_stats(c, &st1);
  CHECK_EQ(st1.commands_sent, st0.commands_sent);
  CHECK_EQ(st1.writes, st0.writes);
  /* 3 PINGs, and the user connection's own handshake (CLIENT SETNAME). */
  CHECK_EQ(st1.user_commands - st0.user_commands, 4);
  rlock_client_free(c);
}

/* The user connection selects the URL's database, as the lock connection does. */
TEST(user_connection_uses_the_url_db) {
  char url[400];
  snprintf(url, sizeof url, "%s/3", srv->url);
  rlock_client_t *c = th_client(url, 0);
  const char *set[] = {"SET", "uc:db", "three"};
  rlock_reply_free(ucmd(c, 3, set));
  rlock_lock_t *l = th_lock(c, "uc:dblock");
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  redisContext *raw = th_raw_connect(srv);
  redisReply *rr = redisCommand(raw, "SELECT 3");
  freeReplyObject(rr);
  rr = redisCommand(raw, "GET uc:db");
  CHECK(rr && rr->type == REDIS_REPLY_STRING && strcmp(rr->str, "three") == 0);
  freeReplyObject(rr);
  rr = redisCommand(raw, "EXISTS uc:dblock");
  CHECK(rr && rr->integer == 1);
  freeReplyObject(rr);
  redisFree(raw);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "uc:db", NULL), 0); /* not in db 0 */
  CHECK_OK(rlock_lock_unlock(l));
  rlock_lock_free(l);
  rlock_client_free(c);
}

static int selected(int argc, char **argv, const char *name) { return argc < 2 || strcmp(argv[1], name) == 0; }
#define RUN_SEL(name)                           \
  do {                                          \
    if (selected(argc, argv, #name)) RUN(name); \
  } while (0)

int main(int argc, char **argv) {
  th_init(argc, argv, 120);
  srv = th_server_start(NULL);
  cli = th_client(srv->url, 0);
  RUN_SEL(multi_refused_and_locks_unaffected);
  RUN_SEL(connection_state_commands_refused);
  RUN_SEL(blocking_command_does_not_stall_lock_traffic);
  RUN_SEL(timed_out_blocking_command_does_not_block_later_ones);
  RUN_SEL(own_connection_survives_client_kill);
  RUN_SEL(transaction_results);
  RUN_SEL(transactions_beside_lock_traffic);
  RUN_SEL(per_call_timeout);
  RUN_SEL(blocking_command_outlives_ping_interval);
  RUN_SEL(free_ends_a_blocked_command);
  RUN_SEL(stats_count_user_commands_apart);
  RUN_SEL(user_connection_uses_the_url_db);
  rlock_client_free(cli);
  th_server_stop(srv);
  return th_done();
}
