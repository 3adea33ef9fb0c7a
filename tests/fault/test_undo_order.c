/* test_undo_order.c -- an undo must never land after the same owner's next
 * request of the same lock (issue 20, item 1).
 *
 * An undo (reentrant_acquire_undo.lua) gives back what a try may have taken.
 * When the try's latch says nothing (the fast path's first copy writes none,
 * a refused try writes none), the undo brings the owner's count down to the
 * count the client knew when it sent the undo. The script cannot tell that
 * count's hold from a hold the owner took later: both are the same hash
 * field. So an undo that runs after the owner's next grant removes that
 * grant, and another client takes the lock while the owner believes it
 * holds it. The engine therefore writes no later request of the pair
 * (owner, name) before every earlier undo of the pair was answered, whatever
 * made the undo late. Two ways it was late:
 *   - fast_lost_undo_behind_next_trylock: a fast first acquire whose answer
 *     is lost is undone through the I/O thread; the undo's copies are held
 *     on their way (fault proxy), the bounded wait ends the call, the undo
 *     gave up after its re-sends and the owner's next trylock went out on
 *     the fast connection; the held copies then removed that hold;
 *   - noscript_undo_behind_next_try: the undo of a refused re-sent try is
 *     answered NOSCRIPT after a SCRIPT FLUSH (the acquire script was loaded
 *     again by another client, the undo script not), and conn.c re-wrote it
 *     as EVAL behind the owner's next try, which was granted.
 * The same order holds for an unlock whose re-sends ran out with every answer
 * lost (unlock_given_up_behind_next_lock): its late copy would find the
 * owner's next grant, take it for a count mismatch and remove the field.
 * Nor does a refusal (OOM: nothing ran) or a re-send never written answer a
 * copy still on its way (unlock_unwritten_resend_behind_next_lock,
 * unlock_refused_resend_behind_next_lock, undo_refused_behind_next_trylock).
 * Each test ends with another client's trylock: it must be refused while the
 * owner holds the lock. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault_harness.h"
#include "proxy.h"

static th_server_t *srv;
static fp_proxy_t *px;
static char purl[64];

static rlock_stats_t stats(rlock_client_t *c) {
  rlock_stats_t s;
  rlock_client_stats(c, &s);
  return s;
}

/* A client through the proxy: no PING, no drop after timeouts (every copy
 * of a request stays on the connection the test holds). */
static rlock_client_t *client_named(const char *name, int fast, int64_t timeout_ms) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = purl;
  o.client_name = name;
  o.command_timeout_ms = timeout_ms;
  o.retry_attempts = 3;
  o.dead_after_timeouts = 0;
  o.ping_interval_ms = 0;
  o.fast_path = fast;
  o.reconnect_min_ms = 50;
  o.reconnect_max_ms = 200;
  rlock_client_t *cl = NULL;
  int rc = rlock_client_new(&cl, &o);
  if (rc) th_fail(__FILE__, __LINE__, "client_new: %s: %s", rlock_err_name(rc), rlock_last_error());
  return cl;
}

/* The server-side port (CLIENT LIST addr=) of the oldest (newest: the fast
 * connection, opened last) connection named `name` whose last command was
 * a script (or a latch DEL: the command connection's). */
static int script_port(const char *name, int newest) {
  redisReply *r = th_cmd(srv, "CLIENT", "LIST", NULL);
  CHECK(r->type == REDIS_REPLY_STRING);
  char want[80];
  snprintf(want, sizeof want, " name=%s ", name);
  long long best = -1;
  int port = 0;
  for (char *line = r->str, *end; line && *line; line = end ? end + 1 : NULL) {
    end = strchr(line, '\n');
    if (end) *end = 0;
    char *a = strstr(line, " addr="), *colon = a ? strchr(a + 6, ':') : NULL;
    long long id = strncmp(line, "id=", 3) ? -1 : atoll(line + 3);
    if (!strstr(line, want) || !(strstr(line, " cmd=evalsha") || strstr(line, " cmd=del ")) || !colon) continue;
    if (best < 0 || (newest ? id > best : id < best)) best = id, port = atoi(colon + 1);
  }
  th_reply_free(r);
  CHECK_MSG(port, "no script connection named %s", name);
  return port;
}

typedef struct cmdstat_arg {
  const char *cmd;
  long long want;
} cmdstat_arg_t;
static int cmdstat_reach(void *a) {
  cmdstat_arg_t *c = a;
  return th_cmdstat(srv, c->cmd) >= c->want;
}

typedef struct try_job {
  rlock_lock_t *l;
  rlock_owner_t owner;
  int64_t wait_ms;
  int rc;
} try_job_t;

static void *try_thread(void *p) {
  try_job_t *j = p;
  j->rc = rlock_lock_acquire(j->l, j->owner, j->wait_ms, RLOCK_LEASE_WATCHDOG, NULL);
  return NULL;
}

/* Another client's trylock must be refused (the owner holds the lock). */
static void check_single_holder(const char *name, const char *owner_id) {
  rlock_client_t *other = fh_client(srv->url, 0, 0, 0);
  rlock_lock_t *lo = th_lock(other, name);
  long long count = th_hget_num(srv, name, owner_id);
  int rc = rlock_lock_trylock(lo, 0, 10000);
  if (rc == 0) rlock_lock_unlock(lo);
  CHECK_MSG(rc == RLOCK_EBUSY,
            "another client took the lock the owner was told it holds (%s; the owner's count on the server: %lld): "
            "a late undo (or unlock) of the same owner removed its next grant",
            rlock_err_name(rc), count);
  CHECK_EQ(count, 1);
  rlock_lock_free(lo);
  rlock_client_free(other);
}

/* ------------------------------------------------------------ the fast path */

#define FNAME "undo-fast"

/* Releases both held connections once the owner's next trylock has gone out
 * (its attempt counted): before, on the fast connection, answered at once;
 * now held back until the undo is answered. */
typedef struct release_arg {
  rlock_client_t *c;
  uint64_t a0;
  int cport, fport;
} release_arg_t;

static void *release_when_tried(void *p) {
  release_arg_t *ra = p;
  CHECK(TH_STAT_REACHES(ra->c, acquire_attempts, ra->a0 + 1, 10000));
  fp_hold_conn(px, ra->cport, 0);
  fp_hold_conn(px, ra->fport, 0);
  return NULL;
}

TEST(fast_lost_undo_behind_next_trylock) {
  const char *name = "undo:fast";
  rlock_client_t *c = client_named(FNAME, 1, 300);
  rlock_lock_t *l = th_lock(c, name);
  char o[128];
  th_owner_id(c, RLOCK_OWNER_THREAD | (uint64_t)th_gettid(), o, sizeof o);
  /* the first lock goes through the I/O thread, the thread learns the count
   * from its unlock, then a fast pair opens the fast connection */
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  CHECK_OK(rlock_lock_unlock(l));
  uint64_t f0 = stats(c).fast_calls;
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(stats(c).fast_calls, f0 + 2);
  /* the latch DEL of the first pair has left (no other request times out below) */
  cmdstat_arg_t del = {"del", 1};
  CHECK(th_wait_until(cmdstat_reach, &del, 5000));
  int cport = script_port(FNAME, 0), fport = script_port(FNAME, 1);
  CHECK(cport != fport);

  /* A fast first acquire: applied, its answer held (lost after 300 ms). The
   * I/O thread undoes it (keep 0) on the command connection, whose requests
   * are held: the 100 ms wait ends the call while the undo is unanswered. */
  fp_hold_conn(px, fport, FP_DOWN);
  fp_hold_conn(px, cport, FP_UP);
  uint64_t t0 = stats(c).timeouts;
  int rc = rlock_lock_trylock(l, 100, RLOCK_LEASE_WATCHDOG);
  CHECK_MSG(rc != 0, "the held acquire was answered");
  CHECK_EQ(th_hget_num(srv, name, o), 1); /* the fast copy applied */
  /* The undo's answers are lost 6 times (the first ones while the call still
   * waited for it, then max(3, retries) re-sends on its own): before, it
   * gave up here and the name went back to the fast path. */
  CHECK(TH_STAT_REACHES(c, timeouts, t0 + 6, 10000));

  /* The owner's next trylock (the fast path serves the calling thread:
   * it runs here, a helper thread lets the held copies go once it went out). */
  long long ev0 = th_cmdstat(srv, "evalsha");
  release_arg_t ra = {c, stats(c).acquire_attempts, cport, fport};
  pthread_t rel;
  CHECK_EQ(pthread_create(&rel, NULL, release_when_tried, &ra), 0);
  int rc2 = rlock_lock_trylock(l, 5000, RLOCK_LEASE_WATCHDOG);
  pthread_join(rel, NULL);
  printf("  next trylock: %s, fast calls %llu, count on the server %lld\n", rlock_err_name(rc2),
         (unsigned long long)stats(c).fast_calls, th_hget_num(srv, name, o));
  CHECK_OK(rc2);
  /* the held undo copies have run (5 of them at least) */
  cmdstat_arg_t ran = {"evalsha", ev0 + 5};
  CHECK_MSG(th_wait_until(cmdstat_reach, &ran, 5000), "the held undo copies did not run");
  check_single_holder(name, o);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", name, NULL), 0);
  fh_result("fast acquire's answer lost, undo held on its way, bounded wait over, next trylock", "single", "reentrant",
            "the next request waits for the undo's answer: one holder", 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* ------------------------------------------------------------ NOSCRIPT */

#define NNAME "undo-noscript"

static int subscribed(void *chan) { return th_numsub(srv, chan) >= 1; }

TEST(noscript_undo_behind_next_try) {
  const char *name = "undo:noscript", *chan = "redisson_lock__channel:{undo:noscript}";
  rlock_client_t *a = client_named(NNAME, 0, 1000);
  rlock_client_t *b = fh_client(srv->url, 0, 0, 0), *loader = client_named("undo-loader", 0, 1000);
  rlock_lock_t *la = th_lock(a, name), *lb = th_lock(b, name), *lload = th_lock(loader, "undo:other");
  char o[128];
  const rlock_owner_t owner = 7;
  th_owner_id(a, owner, o, sizeof o);
  CHECK_OK(rlock_lock_lock(lb, RLOCK_LEASE_WATCHDOG));                    /* another owner holds it */
  CHECK_RC(rlock_lock_trylock(la, 0, RLOCK_LEASE_WATCHDOG), RLOCK_EBUSY); /* a script on a's connection */
  int port = script_port(NNAME, 0);

  /* The owner waits: busy, subscribed, busy again, parked. */
  try_job_t j = {la, owner, 20000, -1};
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, try_thread, &j), 0);
  CHECK(th_wait_until(subscribed, (void *)chan, 10000));
  CHECK(TH_STAT_REACHES(a, acquire_attempts, 3, 10000));

  /* Its answers are held from now on: a try times out and is re-sent (same
   * id), and the re-send is refused on the server (busy). */
  fp_hold_conn(px, port, FP_DOWN);
  uint64_t t0 = stats(a).timeouts;
  th_reply_free(th_cmd(srv, "PUBLISH", chan, "0", NULL)); /* a try now (or a wake token) */
  CHECK(TH_STAT_REACHES(a, timeouts, t0 + 1, 10000));
  cmdstat_arg_t resent = {"evalsha", th_cmdstat(srv, "evalsha") + 1};
  CHECK(th_wait_until(cmdstat_reach, &resent, 5000));

  /* The other owner lets go (its message leaves a wake token: the owner's
   * next try follows the refused re-send's undo at once, in one write). The
   * scripts are flushed and the acquire script alone is loaded again (by
   * another client's EVAL after NOSCRIPT): the undo will be answered
   * NOSCRIPT, the next try will run. */
  uint64_t m0 = stats(a).messages;
  CHECK_OK(rlock_lock_unlock(lb));
  CHECK(TH_STAT_REACHES(a, messages, m0 + 1, 5000));
  th_reply_free(th_cmd(srv, "SCRIPT", "FLUSH", NULL));
  CHECK_OK(rlock_lock_trylock(lload, 0, RLOCK_LEASE_WATCHDOG));
  long long ev0 = th_cmdstat(srv, "eval");
  fp_hold_conn(px, port, 0);

  pthread_join(t, NULL);
  CHECK_OK(j.rc);
  /* the undo ran as EVAL (before the fix: after the owner's next grant) */
  cmdstat_arg_t undone = {"eval", ev0 + 1};
  CHECK_MSG(th_wait_until(cmdstat_reach, &undone, 5000), "the undo was not re-written as EVAL");
  check_single_holder(name, o);
  CHECK_OK(rlock_lock_release(la, owner));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", name, NULL), 0);
  CHECK_OK(rlock_lock_unlock(lload));
  fh_result("undo answered NOSCRIPT (SCRIPT FLUSH), the owner's next try written behind it", "single", "reentrant",
            "the next try waits for the undo's answer (EVAL): one holder", 0);
  rlock_lock_free(la);
  rlock_lock_free(lb);
  rlock_lock_free(lload);
  rlock_client_free(a);
  rlock_client_free(b);
  rlock_client_free(loader);
}

/* ------------------------------------------------------------ an unlock given up */

/* The same order for an unlock whose re-sends ran out: its copies are held
 * on a stuck connection (proxy hold; the client replaces the connection at
 * the first timeout, retry_attempts 1), the call fails (counted as done),
 * the owner locks again on the new connection, then the held copies land.
 * Before: the lock re-entered the still-held hold (count 2) and the first
 * late unlock copy took it for a count mismatch and removed the owner's
 * field: another client took the lock. Now the unlock goes on alone on the
 * new connection until answered, and the lock waits for that. */
#define UNAME "undo-unlock"

typedef struct conns_arg {
  int want;
} conns_arg_t;
static int conns_are(void *a) { return fp_connections(px) == ((conns_arg_t *)a)->want; }

TEST(unlock_given_up_behind_next_lock) {
  const char *name = "undo:unlock";
  rlock_options_t opt;
  rlock_options_init(&opt);
  opt.url = purl;
  opt.client_name = UNAME;
  opt.command_timeout_ms = 300;
  opt.retry_attempts = 1;
  opt.dead_after_timeouts = 1; /* the first timeout replaces the connection */
  opt.ping_interval_ms = 0;
  opt.fast_path = 0;
  opt.reconnect_min_ms = 50;
  opt.reconnect_max_ms = 200;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &opt));
  rlock_lock_t *l = th_lock(c, name);
  char o[128];
  th_owner_id(c, RLOCK_OWNER_THREAD | (uint64_t)th_gettid(), o, sizeof o);
  long long del0 = th_cmdstat(srv, "del");
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  cmdstat_arg_t del = {"del", del0 + 1}; /* its latch DEL has left */
  CHECK(th_wait_until(cmdstat_reach, &del, 5000));
  int port = script_port(UNAME, 0);
  fp_hold_conn(px, port, FP_UP);
  int rc = rlock_lock_unlock(l);
  CHECK_MSG(rc != 0, "the held unlock was answered");
  CHECK_EQ(th_hget_num(srv, name, o), 1); /* no copy ran yet */
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  long long ev0 = th_cmdstat(srv, "evalsha");
  conns_arg_t after = {fp_connections(px) - 1};
  fp_hold_conn(px, port, 0);
  CHECK_MSG(th_wait_until(conns_are, &after, 5000), "the held connection was not delivered and closed");
  printf("  %lld script calls delivered late\n", th_cmdstat(srv, "evalsha") - ev0);
  check_single_holder(name, o);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", name, NULL), 0);
  fh_result("unlock's copies held on a replaced connection, re-sends run out, the owner locks again", "single",
            "reentrant", "the unlock goes on alone until answered, the lock waits for it: one holder", 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* The start of the held-unlock cases: a client (command timeout 300 ms,
 * 2 re-sends, the first timeout replaces the connection, no fast path)
 * holds `name` once, its latch DEL has left, and the proxy now holds its
 * script connection's requests. Returns that connection's port. */
static int held_unlock_setup(const char *client_name, const char *name, int64_t reconnect_max_ms, rlock_client_t **cp,
                             rlock_lock_t **lp, char o[128]) {
  rlock_options_t opt;
  rlock_options_init(&opt);
  opt.url = purl;
  opt.client_name = client_name;
  opt.command_timeout_ms = 300;
  opt.retry_attempts = 2;      /* copy 1 lost, copy 2 lost with the connection, copy 3 as the case says */
  opt.dead_after_timeouts = 1; /* the first timeout replaces the connection */
  opt.ping_interval_ms = 0;
  opt.fast_path = 0;
  opt.reconnect_min_ms = 50;
  opt.reconnect_max_ms = reconnect_max_ms;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &opt));
  rlock_lock_t *l = th_lock(c, name);
  th_owner_id(c, RLOCK_OWNER_THREAD | (uint64_t)th_gettid(), o, 128);
  long long del0 = th_cmdstat(srv, "del");
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  cmdstat_arg_t del = {"del", del0 + 1}; /* its latch DEL has left */
  CHECK(th_wait_until(cmdstat_reach, &del, 5000));
  int port = script_port(client_name, 0);
  fp_hold_conn(px, port, FP_UP);
  *cp = c, *lp = l;
  return port;
}

/* The same when the last re-send was never written: the unlock's first copy
 * is held on a stuck connection, the client replaces it at the timeout, and
 * the server is unreachable (the proxy refuses connections) for the re-send's
 * command timeout: the call ends RLOCK_ECONNECT. The first copy may still
 * land (it does here once the proxy lets it go), so the unlock goes on alone
 * as when its last answer was lost. Before: an unlock that ended
 * RLOCK_ECONNECT was given up though an earlier copy was on its way; the
 * owner's next lock re-entered (count 2) and the late copy removed the
 * owner's field: another client took the lock. */
#define ENAME "undo-unlock-econnect"

TEST(unlock_unwritten_resend_behind_next_lock) {
  const char *name = "undo:unlock-econnect";
  rlock_client_t *c;
  rlock_lock_t *l;
  char o[128];
  int port = held_unlock_setup(ENAME, name, 100, &c, &l, o);
  fp_refuse(px, 1); /* the replacement cannot connect: the re-send is never written */
  int rc = rlock_lock_unlock(l);
  printf("  unlock: %s (%s)\n", rlock_err_name(rc), rlock_last_error());
  CHECK_RC(rc, RLOCK_ECONNECT);
  CHECK_EQ(th_hget_num(srv, name, o), 1); /* no copy ran yet */
  fp_refuse(px, 0);
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  long long ev0 = th_cmdstat(srv, "evalsha");
  conns_arg_t after = {fp_connections(px) - 1};
  fp_hold_conn(px, port, 0);
  CHECK_MSG(th_wait_until(conns_are, &after, 5000), "the held connection was not delivered and closed");
  printf("  %lld script calls delivered late\n", th_cmdstat(srv, "evalsha") - ev0);
  check_single_holder(name, o);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", name, NULL), 0);
  fh_result("unlock's first copy held, its re-send never written (server unreachable), the owner locks again", "single",
            "reentrant", "the unlock goes on alone until answered, the lock waits for it: one holder", 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* An answer that is a refusal (the server out of memory: OOM, nothing ran)
 * says nothing of a copy still on its way on a replaced connection. The
 * unlock's first copies are held (proxy), the client replaces the
 * connection, the last re-send is refused OOM: the call fails. The owner
 * locks again once memory is back, then the held copies are delivered.
 * Before: the refusal ended the unlock; the lock re-entered (count 2) and
 * the late copy removed the owner's field: another client took the lock.
 * Now the unlock goes on alone, a refused copy sent again later (as for
 * LOADING), until a copy runs; the lock waits for it. */
#define MNAME "undo-unlock-oom"

/* The server's count of OOM refusals (INFO errorstats). */
static long long oom_refusals(void) {
  redisReply *r = th_cmd(srv, "INFO", "errorstats", NULL);
  CHECK(r->type == REDIS_REPLY_STRING);
  const char *p = strstr(r->str, "errorstat_OOM:count=");
  long long n = p ? atoll(p + strlen("errorstat_OOM:count=")) : 0;
  th_reply_free(r);
  return n;
}
typedef struct oom_arg {
  long long want;
} oom_arg_t;
static int oom_reach(void *a) { return oom_refusals() >= ((oom_arg_t *)a)->want; }

TEST(unlock_refused_resend_behind_next_lock) {
  const char *name = "undo:unlock-oom";
  rlock_client_t *c;
  rlock_lock_t *l;
  char o[128];
  int port = held_unlock_setup(MNAME, name, 100, &c, &l, o);
  long long oom0 = oom_refusals();
  th_reply_free(th_cmd(srv, "CONFIG", "SET", "maxmemory", "1", NULL)); /* every write refused: OOM */
  int rc = rlock_lock_unlock(l);
  printf("  unlock: %s (%s)\n", rlock_err_name(rc), rlock_last_error());
  CHECK_MSG(rc != 0, "the unlock was applied");
  /* the call's last re-send and then a copy sent on after it were refused */
  oom_arg_t refused = {oom0 + 2};
  CHECK_MSG(th_wait_until(oom_reach, &refused, 5000),
            "the unlock did not go on after its refused re-send (an earlier copy is on its way)");
  CHECK_EQ(th_hget_num(srv, name, o), 1); /* no copy ran yet */
  th_reply_free(th_cmd(srv, "CONFIG", "SET", "maxmemory", "0", NULL));
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  long long ev0 = th_cmdstat(srv, "evalsha");
  conns_arg_t after = {fp_connections(px) - 1};
  fp_hold_conn(px, port, 0);
  CHECK_MSG(th_wait_until(conns_are, &after, 5000), "the held connection was not delivered and closed");
  printf("  %lld script calls delivered late\n", th_cmdstat(srv, "evalsha") - ev0);
  check_single_holder(name, o);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", name, NULL), 0);
  fh_result("unlock's first copies held, its last re-send refused OOM, the owner locks again", "single", "reentrant",
            "the unlock goes on alone until a copy runs, the lock waits for it: one holder", 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* The undo's side of the same: a refusal of an undo copy does not answer
 * its copy still on its way. The owner's try runs (refused: another owner
 * holds the lock, no latch) and its answer is held; the try times out and
 * its undo (keep 0) is held on the same connection; the undo times out, the
 * client replaces the connection and sends the undo again while the server
 * is out of memory: refused OOM. Memory back, the owner's next trylock; then
 * the held undo copy is delivered. Before: the refusal opened the order
 * gate, the trylock was granted, and the held undo copy (the first to run:
 * no latch, no tombstone) brought the owner's count down to 0: another
 * client took the lock. Now the refused copy is sent again later until one
 * runs (its tombstone stops the held copy), and the trylock waits for it. */
#define RNAME "undo-refused"

TEST(undo_refused_behind_next_trylock) {
  const char *name = "undo:refused";
  rlock_options_t opt;
  rlock_options_init(&opt);
  opt.url = purl;
  opt.client_name = RNAME;
  opt.command_timeout_ms = 300;
  opt.retry_attempts = 0;      /* the try's timeout ends the call: its undo goes on alone */
  opt.dead_after_timeouts = 2; /* the undo's timeout (the second) replaces the connection */
  opt.ping_interval_ms = 0;
  opt.fast_path = 0;
  opt.reconnect_min_ms = 50;
  opt.reconnect_max_ms = 100;
  rlock_client_t *a = NULL;
  CHECK_OK(rlock_client_new(&a, &opt));
  rlock_client_t *b = fh_client(srv->url, 0, 0, 0);
  rlock_lock_t *la = th_lock(a, name), *lb = th_lock(b, name);
  char o[128];
  const rlock_owner_t owner = 9;
  th_owner_id(a, owner, o, sizeof o);
  CHECK_OK(rlock_lock_lock(lb, RLOCK_LEASE_WATCHDOG));                                 /* another owner holds it */
  CHECK_RC(rlock_lock_acquire(la, owner, 0, RLOCK_LEASE_WATCHDOG, NULL), RLOCK_EBUSY); /* a script on a's connection */
  int port = script_port(RNAME, 0);

  /* no new connection until the test says so: the undo's re-send on the
   * connection that replaces the held one comes after the unlock and CONFIG
   * SET below, whatever the machine's load (with 300 ms it once came first,
   * was applied, and no refusal followed) */
  fp_refuse(px, 1);
  /* the try runs (refused), its answer held; then the connection holds
   * both ways: the undo sent at the try's timeout stays on its way */
  fp_hold_conn(px, port, FP_DOWN);
  cmdstat_arg_t ran = {"evalsha", th_cmdstat(srv, "evalsha") + 1};
  try_job_t j = {la, owner, 0, -1};
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, try_thread, &j), 0);
  CHECK(th_wait_until(cmdstat_reach, &ran, 5000));
  fp_hold_conn(px, port, FP_BOTH);
  pthread_join(t, NULL);
  printf("  trylock: %s\n", rlock_err_name(j.rc));
  CHECK(j.rc != 0);

  /* the other owner lets go; out of memory; the undo's copy on the new
   * connection is refused */
  CHECK_OK(rlock_lock_unlock(lb));
  long long oom0 = oom_refusals();
  th_reply_free(th_cmd(srv, "CONFIG", "SET", "maxmemory", "1", NULL));
  fp_refuse(px, 0); /* the connection is replaced now */
  oom_arg_t refused = {oom0 + 1};
  CHECK_MSG(th_wait_until(oom_reach, &refused, 5000), "the undo was not sent again on a new connection");
  th_reply_free(th_cmd(srv, "CONFIG", "SET", "maxmemory", "0", NULL));

  /* the owner's next trylock; then the held copies are delivered */
  int rc2 = rlock_lock_acquire(la, owner, 5000, RLOCK_LEASE_WATCHDOG, NULL);
  printf("  next trylock: %s, count on the server %lld\n", rlock_err_name(rc2), th_hget_num(srv, name, o));
  CHECK_OK(rc2);
  long long ev0 = th_cmdstat(srv, "evalsha");
  conns_arg_t after = {fp_connections(px) - 1};
  fp_hold_conn(px, port, 0);
  CHECK_MSG(th_wait_until(conns_are, &after, 5000), "the held connection was not delivered and closed");
  printf("  %lld script calls delivered late\n", th_cmdstat(srv, "evalsha") - ev0);
  check_single_holder(name, o);
  CHECK_OK(rlock_lock_release(la, owner));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", name, NULL), 0);
  fh_result("undo's first copy held, its re-send on a new connection refused OOM, the owner's next trylock", "single",
            "reentrant", "the undo is sent again until a copy runs, the trylock waits for it: one holder", 0);
  rlock_lock_free(la);
  rlock_lock_free(lb);
  rlock_client_free(a);
  rlock_client_free(b);
}

/* The same with a refusal the list of "nothing ran, send again later"
 * errors did not name: the undo's re-send refused NOPERM (the ACL took the
 * script commands away from the client's user for a moment). Any refusal of
 * a copy says nothing of a copy still on its way: the gate stays closed
 * until a copy runs. Before: NOPERM opened the gate, the next trylock was
 * granted and the held undo copy took that hold away. */
#define PNAME "undo-noperm"

static long long noperm_refusals(void) {
  redisReply *r = th_cmd(srv, "INFO", "errorstats", NULL);
  CHECK(r->type == REDIS_REPLY_STRING);
  const char *p = strstr(r->str, "errorstat_NOPERM:count=");
  long long n = p ? atoll(p + strlen("errorstat_NOPERM:count=")) : 0;
  th_reply_free(r);
  return n;
}
static int noperm_reach(void *a) { return noperm_refusals() >= ((oom_arg_t *)a)->want; }

TEST(undo_noperm_behind_next_trylock) {
  const char *name = "undo:noperm";
  rlock_options_t opt;
  rlock_options_init(&opt);
  opt.url = purl;
  opt.client_name = PNAME;
  opt.command_timeout_ms = 300;
  opt.retry_attempts = 0;
  opt.dead_after_timeouts = 2;
  opt.ping_interval_ms = 0;
  opt.fast_path = 0;
  opt.reconnect_min_ms = 50;
  opt.reconnect_max_ms = 100;
  rlock_client_t *a = NULL;
  CHECK_OK(rlock_client_new(&a, &opt));
  rlock_client_t *b = fh_client(srv->url, 0, 0, 0);
  rlock_lock_t *la = th_lock(a, name), *lb = th_lock(b, name);
  char o[128];
  const rlock_owner_t owner = 9;
  th_owner_id(a, owner, o, sizeof o);
  CHECK_OK(rlock_lock_lock(lb, RLOCK_LEASE_WATCHDOG));
  CHECK_RC(rlock_lock_acquire(la, owner, 0, RLOCK_LEASE_WATCHDOG, NULL), RLOCK_EBUSY);
  int port = script_port(PNAME, 0);

  fp_refuse(px, 1); /* no new connection until the ACL below (as undo_refused_behind_next_trylock) */
  fp_hold_conn(px, port, FP_DOWN);
  cmdstat_arg_t ran = {"evalsha", th_cmdstat(srv, "evalsha") + 1};
  try_job_t j = {la, owner, 0, -1};
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, try_thread, &j), 0);
  CHECK(th_wait_until(cmdstat_reach, &ran, 5000));
  fp_hold_conn(px, port, FP_BOTH);
  pthread_join(t, NULL);
  printf("  trylock: %s\n", rlock_err_name(j.rc));
  CHECK(j.rc != 0);

  /* the other owner lets go; the scripts taken away; the undo's copy on
   * the new connection is refused NOPERM */
  CHECK_OK(rlock_lock_unlock(lb));
  long long np0 = noperm_refusals();
  th_reply_free(th_cmd(srv, "ACL", "SETUSER", "default", "-evalsha", "-eval", NULL));
  fp_refuse(px, 0); /* the connection is replaced now */
  oom_arg_t refused = {np0 + 1};
  int got = th_wait_until(noperm_reach, &refused, 5000);
  th_reply_free(th_cmd(srv, "ACL", "SETUSER", "default", "+@all", NULL));
  CHECK_MSG(got, "the undo was not sent again on a new connection");

  int rc2 = rlock_lock_acquire(la, owner, 5000, RLOCK_LEASE_WATCHDOG, NULL);
  printf("  next trylock: %s, count on the server %lld\n", rlock_err_name(rc2), th_hget_num(srv, name, o));
  CHECK_OK(rc2);
  long long ev0 = th_cmdstat(srv, "evalsha");
  conns_arg_t after = {fp_connections(px) - 1};
  fp_hold_conn(px, port, 0);
  CHECK_MSG(th_wait_until(conns_are, &after, 5000), "the held connection was not delivered and closed");
  printf("  %lld script calls delivered late\n", th_cmdstat(srv, "evalsha") - ev0);
  check_single_holder(name, o);
  CHECK_OK(rlock_lock_release(la, owner));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", name, NULL), 0);
  fh_result("undo's first copy held, its re-send on a new connection refused NOPERM, the owner's next trylock",
            "single", "reentrant", "the undo is sent again until a copy runs, the trylock waits for it: one holder", 0);
  rlock_lock_free(la);
  rlock_lock_free(lb);
  rlock_client_free(a);
  rlock_client_free(b);
}

/* test_undo_order [NAME]: all tests, or only NAME */
/* The same when the last re-send was never written (RLOCK_ECONNECT: the
 * proxy refuses the reconnect past the command timeout) after a copy whose
 * answer was lost: the call fails RLOCK_ECONNECT, but the first copy is
 * still on its way. Before: no go-on (only a final lost answer made one),
 * the owner locked again, the held copy landed and removed that grant. */
TEST(unlock_lost_then_not_connected_behind_next_lock) {
  const char *name = "undo:unlock-econnect";
  rlock_client_t *c;
  rlock_lock_t *l;
  char o[128];
  int port = held_unlock_setup(UNAME "-ec", name, 200, &c, &l, o);
  fp_refuse(px, 1); /* the re-send after the first copy's timeout finds no connection */
  int rc = rlock_lock_unlock(l);
  printf("  unlock: %s (%s)\n", rlock_err_name(rc), rlock_last_error());
  CHECK_MSG(rc != 0, "the held unlock was answered");
  CHECK_EQ(th_hget_num(srv, name, o), 1); /* no copy ran yet */
  fp_refuse(px, 0);
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  long long ev0 = th_cmdstat(srv, "evalsha");
  conns_arg_t after = {fp_connections(px) - 1};
  fp_hold_conn(px, port, 0);
  CHECK_MSG(th_wait_until(conns_are, &after, 5000), "the held connection was not delivered and closed");
  printf("  %lld script calls delivered late\n", th_cmdstat(srv, "evalsha") - ev0);
  check_single_holder(name, o);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", name, NULL), 0);
  fh_result("unlock's first copy held, its re-send never written (ECONNECT), the owner locks again", "single",
            "reentrant", "the unlock goes on alone until answered, the lock waits for it: one holder", 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 120);
  srv = th_server_start(NULL);
  px = fp_start(srv->port);
  snprintf(purl, sizeof purl, "redis://127.0.0.1:%d", fp_port(px));
  const char *only = argc > 1 && argv[1][0] != '-' ? argv[1] : NULL;
  if (!only || strstr("fast_lost_undo_behind_next_trylock", only)) RUN(fast_lost_undo_behind_next_trylock);
  if (!only || strstr("noscript_undo_behind_next_try", only)) RUN(noscript_undo_behind_next_try);
  if (!only || strstr("unlock_given_up_behind_next_lock", only)) RUN(unlock_given_up_behind_next_lock);
  if (!only || strstr("unlock_unwritten_resend_behind_next_lock", only)) RUN(unlock_unwritten_resend_behind_next_lock);
  if (!only || strstr("unlock_refused_resend_behind_next_lock", only)) RUN(unlock_refused_resend_behind_next_lock);
  if (!only || strstr("undo_refused_behind_next_trylock", only)) RUN(undo_refused_behind_next_trylock);
  if (!only || strstr("unlock_lost_then_not_connected_behind_next_lock", only))
    RUN(unlock_lost_then_not_connected_behind_next_lock);
  if (!only || strstr("undo_noperm_behind_next_trylock", only)) RUN(undo_noperm_behind_next_trylock);
  fp_stop(px);
  th_server_stop(srv);
  return th_done();
}
