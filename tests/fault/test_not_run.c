/* test_not_run.c (fault) -- requests that did not run are sent again
 * (issue 20 item 11), on one server:
 *   unlock_never_written   the server unreachable (the fault proxy refuses
 *                          connections) for 600 ms, longer than the 300 ms
 *                          command timeout, while an unlock is queued: the
 *                          unlock was never written (RLOCK_ECONNECT); it is
 *                          sent again with its request id once the server is
 *                          back, and frees the lock (before: RLOCK_ECONNECT,
 *                          and the lock stayed for its lease)
 *   busy_script_not_run    a script runs past the busy threshold (every other
 *                          command is answered BUSY, nothing of it runs) while
 *                          a try and then an unlock are sent: both are sent
 *                          again after a backoff within their command timeout
 *                          and succeed once the script ended (before: the
 *                          BUSY reply was final, RLOCK_ESERVER)
 *   busy_fast_unlock       the same for a blocking unlock on the fast path
 *                          (the calling thread's own connection): handed to
 *                          the I/O thread and sent again, released (before:
 *                          RLOCK_ESERVER, the hold left for its lease)
 *   readonly_compound      Sentinel: the master (with a replica, so every
 *                          lock script goes with its WAIT, one compound
 *                          request) silently demoted: a try refused READONLY
 *                          is held until the connection is back on the master
 *                          Sentinel names, and granted there (before: the
 *                          compound's READONLY was final, RLOCK_ESERVER)
 *   readonly_fast_unlock   Sentinel, the fast path: a blocking unlock on the
 *                          demoted master (its replica promoted with the hold)
 *                          refused READONLY: handed to the I/O thread, released
 *                          on the master Sentinel names (before: RLOCK_ESERVER,
 *                          the hold left on the new master for its lease)
 *   loading_after_restart  a restart that loads its RDB for about 1.5 s: the
 *                          client reconnects during the load, an unlock and a
 *                          try sent then are answered LOADING and sent again
 *                          until the data is back: released, granted (before:
 *                          RLOCK_ESERVER at once, the hold left for its lease)
 * Server state is checked with a raw hiredis client. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault_harness.h"
#include "harness_replica.h"
#include "harness_sentinel.h"
#include "proxy.h"

static th_server_t *srv;
static fp_proxy_t *px;
static char purl[64];

static int conns_are(void *a) { return fp_connections(px) == *(int *)a; }

/* ------------------------------------------------------------ unlock never written */

TEST(unlock_never_written) {
  const char *name = "notrun:unlock";
  rlock_client_t *c = fh_client(purl, 30000, 300, 3);
  rlock_lock_t *l = th_lock(c, name);
  CHECK_OK(rlock_lock_acquire(l, 9, 0, RLOCK_LEASE_WATCHDOG, NULL));
  fp_refuse(px, 1);
  fp_cut(px);
  fh_latch_t got;
  fh_latch_init(&got);
  int64_t t0 = rlock_now_ms();
  CHECK_OK(rlock_lock_release_async(l, 9, fh_latch_cb, &got));
  th_sleep_ms(600); /* the outage: two command timeouts long */
  fp_refuse(px, 0);
  CHECK_MSG(fh_latch_wait(&got, 10000), "the unlock never ended");
  long long pttl = th_cmd_int(srv, "PTTL", name, NULL);
  printf("# outage 600 ms, command timeout 300 ms: unlock %s after %lld ms (%s); PTTL after: %lld\n",
         rlock_err_name(got.status), (long long)(rlock_now_ms() - t0), rlock_last_error(), pttl);
  CHECK_MSG(got.status == 0, "the unlock never written was not sent again: %s", rlock_err_name(got.status));
  CHECK_MSG(pttl == -2, "the lock stays after the unlock (PTTL %lld)", pttl);
  int two = 2;
  CHECK(th_wait_until(conns_are, &two, 5000));
  fh_result("unlock queued during an outage longer than the command timeout", "single", "reentrant",
            "sent again once the server is back: the lock is freed", 0);
  fh_latch_destroy(&got);
  if (pttl != -2) th_reply_free(th_cmd(srv, "DEL", name, NULL));
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* ------------------------------------------------------------ BUSY */

/* A script that runs ms milliseconds, on a connection of its own (th_cmd's is
 * the main thread's). */
typedef struct busy {
  int port;
  int ms;
  int ok;
} busy_t;

static void *busy_main(void *arg) {
  busy_t *b = arg;
  redisContext *rc = redisConnect("127.0.0.1", b->port);
  if (!rc || rc->err) return NULL;
  char ms[16];
  snprintf(ms, sizeof ms, "%d", b->ms);
  static const char script[] =
      "local function now() local t = redis.call('TIME') return tonumber(t[1]) * 1000 + "
      "math.floor(tonumber(t[2]) / 1000) end "
      "local s = now() while now() - s < tonumber(ARGV[1]) do end return 1";
  redisReply *r = redisCommand(rc, "EVAL %s 0 %s", script, ms);
  b->ok = r && r->type == REDIS_REPLY_INTEGER;
  freeReplyObject(r);
  redisFree(rc);
  return NULL;
}

/* The server answers BUSY (a script is running past the threshold). */
static int answers_busy(void *arg) {
  (void)arg;
  redisReply *r = th_cmd(srv, "PING", NULL);
  int busy = r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "BUSY", 4);
  th_reply_free(r);
  return busy;
}

/* A busy window of ms: call starts once the server answers BUSY. */
static void start_busy(busy_t *b, pthread_t *t, int ms) {
  b->port = srv->port, b->ms = ms, b->ok = 0;
  CHECK(pthread_create(t, NULL, busy_main, b) == 0);
  CHECK_MSG(th_wait_until(answers_busy, NULL, 5000), "the script never made the server busy");
}

TEST(busy_script_not_run) {
  const char *name = "notrun:busy";
  th_reply_free(th_cmd(srv, "CONFIG", "SET", "busy-reply-threshold", "50", NULL));
  rlock_client_t *c = fh_client(srv->url, 30000, 3000, 3);
  rlock_lock_t *l = th_lock(c, name);
  CHECK_OK(rlock_lock_acquire(l, 9, 0, RLOCK_LEASE_WATCHDOG, NULL)); /* connected, scripts loaded */
  CHECK_OK(rlock_lock_release(l, 9));
  busy_t b;
  pthread_t t;

  /* a try while the server is busy */
  start_busy(&b, &t, 1000);
  fh_latch_t got;
  fh_latch_init(&got);
  int64_t t0 = rlock_now_ms();
  CHECK_OK(rlock_lock_acquire_async(l, 9, 0, RLOCK_LEASE_WATCHDOG, NULL, fh_latch_cb, &got));
  CHECK_MSG(fh_latch_wait(&got, 10000), "the try never ended");
  CHECK(pthread_join(t, NULL) == 0);
  CHECK(b.ok);
  printf("# try during a 1000 ms script: %s after %lld ms\n", rlock_err_name(got.status),
         (long long)(rlock_now_ms() - t0));
  CHECK_MSG(got.status == 0, "a try answered BUSY (not run) ended: %s", rlock_err_name(got.status));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", name, NULL), 1);
  fh_latch_destroy(&got);

  /* an unlock while the server is busy */
  start_busy(&b, &t, 1000);
  fh_latch_init(&got);
  t0 = rlock_now_ms();
  CHECK_OK(rlock_lock_release_async(l, 9, fh_latch_cb, &got));
  CHECK_MSG(fh_latch_wait(&got, 10000), "the unlock never ended");
  CHECK(pthread_join(t, NULL) == 0);
  printf("# unlock during a 1000 ms script: %s after %lld ms; key %s\n", rlock_err_name(got.status),
         (long long)(rlock_now_ms() - t0), th_cmd_int(srv, "EXISTS", name, NULL) ? "still there" : "gone");
  CHECK_MSG(got.status == 0, "an unlock answered BUSY (not run) ended: %s", rlock_err_name(got.status));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", name, NULL), 0);
  fh_latch_destroy(&got);

  /* a busy window longer than the command timeout (300 ms): not run, RLOCK_ECONNECT */
  rlock_client_t *c2 = fh_client(srv->url, 30000, 300, 0);
  rlock_lock_t *l2 = th_lock(c2, name);
  CHECK_OK(rlock_lock_is_locked(l2, &(int){0})); /* connected */
  start_busy(&b, &t, 1500);
  t0 = rlock_now_ms();
  int rc = rlock_lock_acquire(l2, 9, 0, RLOCK_LEASE_WATCHDOG, NULL);
  int64_t took = rlock_now_ms() - t0;
  printf("# try during a 1500 ms script, command timeout 300 ms: %s after %lld ms (%s)\n", rlock_err_name(rc),
         (long long)took, rlock_last_error());
  CHECK(pthread_join(t, NULL) == 0);
  CHECK_RC(rc, RLOCK_ECONNECT);
  CHECK_MSG(took < 1500, "the not-run try was not bounded by its command timeout (%lld ms)", (long long)took);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", name, NULL), 0);
  fh_result("a script past the busy threshold (BUSY) during a try and an unlock", "single", "reentrant",
            "sent again after a backoff within the command timeout: granted, released", 0);
  rlock_lock_free(l2);
  rlock_client_free(c2);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* The fast path (a blocking unlock of the calling thread's hold, written on
 * the client's fast connection by the calling thread) answered BUSY: not
 * run, so sent again like any other unlock, not a final RLOCK_ESERVER that
 * leaves the hold for its lease. */
TEST(busy_fast_unlock) {
  const char *name = "notrun:busy-fast";
  th_reply_free(th_cmd(srv, "CONFIG", "SET", "busy-reply-threshold", "50", NULL));
  rlock_client_t *c = fh_client(srv->url, 30000, 3000, 3);
  rlock_lock_t *l = th_lock(c, name);
  CHECK_OK(rlock_lock_acquire(l, RLOCK_OWNER_SELF, 0, RLOCK_LEASE_WATCHDOG, NULL)); /* connected */
  CHECK_OK(rlock_lock_release(l, RLOCK_OWNER_SELF));
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  uint64_t fast_before = st.fast_calls;
  CHECK_OK(rlock_lock_acquire(l, RLOCK_OWNER_SELF, 0, RLOCK_LEASE_WATCHDOG, NULL));
  rlock_client_stats(c, &st);
  CHECK_MSG(st.fast_calls == fast_before + 1, "the acquire did not take the fast path");
  fast_before = st.fast_calls;
  busy_t b;
  pthread_t t;
  start_busy(&b, &t, 1000);
  int64_t t0 = rlock_now_ms();
  int rc = rlock_lock_release(l, RLOCK_OWNER_SELF);
  int64_t took = rlock_now_ms() - t0;
  char err[256];
  snprintf(err, sizeof err, "%s", rlock_last_error());
  CHECK(pthread_join(t, NULL) == 0);
  long long exists = th_cmd_int(srv, "EXISTS", name, NULL);
  rlock_client_stats(c, &st);
  printf("# blocking unlock (fast path) during a 1000 ms script: %s after %lld ms (%s); key %s; fast calls +%llu\n",
         rlock_err_name(rc), (long long)took, rc ? err : "", exists ? "still there" : "gone",
         (unsigned long long)(st.fast_calls - fast_before));
  CHECK_MSG(rc == 0, "a fast unlock answered BUSY (not run) ended: %s: %s", rlock_err_name(rc), err);
  CHECK_EQ(exists, 0);
  if (exists) th_reply_free(th_cmd(srv, "DEL", name, NULL));
  fh_result("a script past the busy threshold (BUSY) during a blocking unlock on the fast path", "single", "reentrant",
            "handed to the I/O thread, sent again after a backoff: released", 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* ------------------------------------------------------------ READONLY on a compound */

typedef struct try_job {
  rlock_lock_t *lock;
  int rc;
  char err[256];
} try_job_t;
static void *try_main(void *p) {
  try_job_t *j = p;
  j->rc = rlock_lock_acquire(j->lock, 7, 30000, 10000, NULL);
  snprintf(j->err, sizeof j->err, "%s", rlock_last_error());
  return NULL;
}

static rlock_client_t *attempting;
static int attempted(void *want) {
  rlock_stats_t st;
  rlock_client_stats(attempting, &st);
  return st.acquire_attempts >= *(uint64_t *)want;
}

TEST(readonly_compound) {
  const char *name = "notrun:ro";
  th_server_t *x = th_server_start(NULL), *y = th_server_start(NULL), *z = th_server_start(NULL);
  char port[16];
  snprintf(port, sizeof port, "%d", x->port);
  th_reply_free(th_cmd(z, "REPLICAOF", "127.0.0.1", port, NULL));
  CHECK_MSG(th_sentinels_wait_replicas(x, 1, 20000), "the replica never came online");
  th_sentinel_t *g = th_sentinel_start_alone("notrun", x->port, NULL, 0);
  char url[300];
  snprintf(url, sizeof url, "redis+sentinel://127.0.0.1:%d/notrun", g->port);
  rlock_client_t *c = fh_client(url, 30000, 3000, 3);
  rlock_lock_t *l = th_lock(c, name);
  CHECK_OK(rlock_lock_acquire(l, 7, 0, 10000, NULL)); /* on x, with WAIT 1 */
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  CHECK_MSG(st.acquire_sync_misses == 0 && th_cmd_int(x, "EXISTS", name, NULL) == 1, "not taken on x with its WAIT");
  CHECK_OK(rlock_lock_release(l, 7));
  snprintf(port, sizeof port, "%d", y->port);
  th_reply_free(th_cmd(x, "REPLICAOF", "127.0.0.1", port, NULL)); /* demoted: its clients stay connected */
  uint64_t want = st.acquire_attempts + 1;
  try_job_t j = {.lock = l};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, try_main, &j) == 0);
  attempting = c;
  CHECK_MSG(th_wait_until(attempted, &want, 20000), "the acquire was never tried");
  /* the client had replicas: its WAIT on y needs one online (x, demoted
   * under it), else RLOCK_ENOSYNC, as replica sync promises */
  CHECK_MSG(th_sentinels_wait_replicas(y, 1, 20000), "x never came online as y's replica");
  redisContext *sc = redisConnect("127.0.0.1", g->port);
  CHECK(sc && !sc->err);
  redisReply *r = redisCommand(sc, "SENTINEL REMOVE notrun");
  if (r) freeReplyObject(r);
  r = redisCommand(sc, "SENTINEL MONITOR notrun 127.0.0.1 %d 1", y->port);
  CHECK_MSG(r && r->type == REDIS_REPLY_STATUS, "SENTINEL MONITOR: %s", r && r->str ? r->str : "no reply");
  freeReplyObject(r);
  redisFree(sc);
  CHECK(pthread_join(t, NULL) == 0);
  printf("# try on the demoted master (script + WAIT): %s (%s)\n", rlock_err_name(j.rc), j.rc ? j.err : "");
  CHECK_MSG(j.rc == 0, "a compound refused READONLY ended: %s: %s", rlock_err_name(j.rc), j.err);
  CHECK_EQ(th_cmd_int(y, "EXISTS", name, NULL), 1);
  CHECK_OK(rlock_lock_release(l, 7));
  fh_result("Sentinel master silently demoted, script + WAIT refused READONLY", "sentinel", "reentrant",
            "held until the connection is back on the named master, granted there", 0);
  rlock_lock_free(l);
  rlock_client_free(c);
  th_sentinel_stop_alone(g);
  th_server_stop(z);
  th_server_stop(y);
  th_server_stop(x);
}

/* Sentinel, the fast path: a blocking unlock on a master demoted by hand
 * (its replica promoted, with the hold; Sentinel not told yet) is refused
 * READONLY on the fast connection. Nothing of it ran: it goes to the I/O
 * thread, which holds it until the connection is back on the master Sentinel
 * names, and releases the hold there (before: RLOCK_ESERVER at once, the
 * hold left on the new master for its lease). */
typedef struct replica_key {
  th_server_t *s;
  const char *key;
} replica_key_t;
static int replica_has(void *p) {
  replica_key_t *k = p;
  return th_cmd_int(k->s, "EXISTS", k->key, NULL) == 1;
}

typedef struct repoint {
  rlock_client_t *c;
  uint64_t scripts;
  int sentinel_port, to_port, ok;
} repoint_t;
static int script_sent(void *p) {
  repoint_t *r = p;
  rlock_stats_t st;
  rlock_client_stats(r->c, &st);
  return st.scripts_sent > r->scripts;
}
static void *repoint_main(void *p) {
  repoint_t *r = p;
  if (!th_wait_until(script_sent, r, 20000)) return NULL; /* the unlock left */
  redisContext *sc = redisConnect("127.0.0.1", r->sentinel_port);
  if (!sc || sc->err) return NULL;
  redisReply *x = redisCommand(sc, "SENTINEL REMOVE notrun-fast");
  if (x) freeReplyObject(x);
  x = redisCommand(sc, "SENTINEL MONITOR notrun-fast 127.0.0.1 %d 1", r->to_port);
  r->ok = x && x->type == REDIS_REPLY_STATUS;
  if (x) freeReplyObject(x);
  redisFree(sc);
  return NULL;
}

TEST(readonly_fast_unlock) {
  const char *name = "notrun:ro-fast";
  th_server_t *x = th_server_start(NULL), *y = th_server_start(NULL);
  char port[16];
  snprintf(port, sizeof port, "%d", x->port);
  th_reply_free(th_cmd(y, "REPLICAOF", "127.0.0.1", port, NULL));
  CHECK_MSG(th_sentinels_wait_replicas(x, 1, 20000), "the replica never came online");
  th_sentinel_t *g = th_sentinel_start_alone("notrun-fast", x->port, NULL, 0);
  char url[300];
  snprintf(url, sizeof url, "redis+sentinel://127.0.0.1:%d/notrun-fast", g->port);
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = url;
  o.command_timeout_ms = 3000;
  o.replica_sync = RLOCK_REPLICA_SYNC_OFF; /* no WAIT: the fast path applies */
  o.reconnect_min_ms = 50;
  o.reconnect_max_ms = 200;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  rlock_lock_t *l = th_lock(c, name);
  CHECK_OK(rlock_lock_acquire(l, RLOCK_OWNER_SELF, 0, RLOCK_LEASE_WATCHDOG, NULL)); /* connected */
  CHECK_OK(rlock_lock_release(l, RLOCK_OWNER_SELF));
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  uint64_t fast0 = st.fast_calls;
  CHECK_OK(rlock_lock_acquire(l, RLOCK_OWNER_SELF, 0, RLOCK_LEASE_WATCHDOG, NULL));
  rlock_client_stats(c, &st);
  CHECK_MSG(st.fast_calls == fast0 + 1, "the acquire did not take the fast path");
  replica_key_t rk = {y, name};
  CHECK_MSG(th_wait_until(replica_has, &rk, 10000), "the hold never reached the replica");
  th_reply_free(th_cmd(y, "REPLICAOF", "NO", "ONE", NULL)); /* promoted, with the hold */
  snprintf(port, sizeof port, "%d", y->port);
  th_reply_free(th_cmd(x, "REPLICAOF", "127.0.0.1", port, NULL)); /* demoted: its clients stay connected */
  repoint_t rp = {.c = c, .scripts = st.scripts_sent, .sentinel_port = g->port, .to_port = y->port};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, repoint_main, &rp) == 0);
  int64_t t0 = rlock_now_ms();
  int rc = rlock_lock_release(l, RLOCK_OWNER_SELF);
  int64_t took = rlock_now_ms() - t0;
  char err[256];
  snprintf(err, sizeof err, "%s", rlock_last_error());
  CHECK(pthread_join(t, NULL) == 0);
  CHECK(rp.ok);
  long long left = th_cmd_int(y, "EXISTS", name, NULL);
  printf("# blocking unlock (fast path) on the demoted master: %s after %lld ms (%s); hold on the new master: %s\n",
         rlock_err_name(rc), (long long)took, rc ? err : "", left ? "still there" : "gone");
  CHECK_MSG(rc == 0, "a fast unlock refused READONLY ended: %s: %s", rlock_err_name(rc), err);
  CHECK_EQ(left, 0);
  fh_result("Sentinel master silently demoted, a blocking unlock on the fast path refused READONLY", "sentinel",
            "reentrant", "handed to the I/O thread, held until back on the named master, released there", 0);
  rlock_lock_free(l);
  rlock_client_free(c);
  th_sentinel_stop_alone(g);
  th_server_stop(y);
  th_server_stop(x);
}

/* ------------------------------------------------------------ LOADING after a restart */

typedef struct loading_job {
  rlock_lock_t *lock;
  int release; /* 1: release (owner 9); 0: try (owner 9, wait 0) */
  int rc;
  int64_t t0, at;
  char err[256];
} loading_job_t;
static void *loading_main(void *p) {
  loading_job_t *j = p;
  j->rc = j->release ? rlock_lock_release(j->lock, 9) : rlock_lock_acquire(j->lock, 9, 0, RLOCK_LEASE_WATCHDOG, NULL);
  j->at = rlock_now_ms();
  snprintf(j->err, sizeof j->err, "%s", rlock_last_error());
  return NULL;
}

static th_server_t *loading_srv;
static int answers_loading(void *arg) {
  (void)arg;
  redisContext *rc = redisConnect("127.0.0.1", loading_srv->port);
  if (!rc || rc->err) {
    if (rc) redisFree(rc);
    return 0;
  }
  redisReply *r = redisCommand(rc, "EXISTS x");
  int loading = r && r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "LOADING", 7);
  if (r) freeReplyObject(r);
  redisFree(rc);
  return loading;
}

/* Once the server answers LOADING: the unlock and the try, each on a thread
 * of its own, both awaited. */
static void *during_load_main(void *p) {
  loading_job_t **j = p;
  if (!th_wait_until(answers_loading, NULL, 10000)) return NULL;
  pthread_t tr, tt;
  j[0]->t0 = j[1]->t0 = rlock_now_ms();
  if (pthread_create(&tr, NULL, loading_main, j[0]) || pthread_create(&tt, NULL, loading_main, j[1])) abort();
  pthread_join(tr, NULL);
  pthread_join(tt, NULL);
  return NULL;
}

/* A restart that loads its data for about 1.5 s (an RDB of 10000 keys,
 * key-load-delay 50 us): the client reconnects during the load (the
 * handshake passes: SCRIPT LOAD's LOADING is harmless), then a try and
 * an unlock sent meanwhile are answered LOADING, sent again, and succeed
 * once the data is back (the hold kept by the RDB is released). */
TEST(loading_after_restart) {
  static const char *const slow[] = {"--enable-debug-command",
                                     "yes",
                                     "--key-load-delay",
                                     "50",
                                     "--loading-process-events-interval-bytes",
                                     "1024",
                                     NULL};
  th_server_t *x = loading_srv = th_server_start(&(th_server_opts_t){.extra_args = slow});
  rlock_client_t *c = fh_client(x->url, 30000, 3000, 3);
  rlock_lock_t *held = th_lock(c, "notrun:loading:held"), *fresh = th_lock(c, "notrun:loading:fresh");
  CHECK_OK(rlock_lock_acquire(held, 9, 0, RLOCK_LEASE_WATCHDOG, NULL));
  th_reply_free(th_cmd(x, "DEBUG", "POPULATE", "10000", "fill", NULL));
  th_reply_free(th_cmd(x, "SAVE", NULL)); /* the hold is in the RDB */
  loading_job_t jr = {.lock = held, .release = 1}, jt = {.lock = fresh};
  loading_job_t *jobs[2] = {&jr, &jt};
  pthread_t d;
  CHECK(pthread_create(&d, NULL, during_load_main, jobs) == 0);
  th_server_restart(x); /* returns once loaded ("Ready to accept connections") */
  CHECK(pthread_join(d, NULL) == 0);
  CHECK_MSG(jr.at && jt.at, "the restarted server never answered LOADING");
  int64_t t0 = jr.t0;
  printf("# during the load: unlock %s after %lld ms (%s); try %s after %lld ms (%s)\n", rlock_err_name(jr.rc),
         (long long)(jr.at - t0), jr.rc ? jr.err : "", rlock_err_name(jt.rc), (long long)(jt.at - t0),
         jt.rc ? jt.err : "");
  CHECK_MSG(jr.rc == 0, "an unlock during LOADING: %s: %s", rlock_err_name(jr.rc), jr.err);
  CHECK_MSG(jt.rc == 0, "a try during LOADING: %s: %s", rlock_err_name(jt.rc), jt.err);
  CHECK_EQ(th_cmd_int(x, "EXISTS", "notrun:loading:held", NULL), 0);
  CHECK_EQ(th_cmd_int(x, "EXISTS", "notrun:loading:fresh", NULL), 1);
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  CHECK_EQ(st.locks_lost, 0);
  CHECK_OK(rlock_lock_release(fresh, 9));
  fh_result("a restart loading its RDB (LOADING for about 1.5 s) under an unlock and a try", "single", "reentrant",
            "handshake passes, both sent again until loaded: released, granted", 0);
  rlock_lock_free(held);
  rlock_lock_free(fresh);
  rlock_client_free(c);
  th_server_stop(x);
}

/* test_not_run [NAME]: all tests, or only NAME */
#define RUN_IF(name) \
  if (argc < 2 || !strcmp(argv[1], #name)) RUN(name)

/* Requests that carry a WAIT (a master with a replica, replica_sync one)
 * refused BUSY again and again: each is sent again from the connection's
 * later queue behind the others, and its deadline allows for the WAITs
 * ahead of it once, not once more at every re-send. Three tries (command
 * timeout 1000 ms, replica_sync_timeout 900 ms: each may take at most 1000 +
 * 900 + 900 per WAIT ahead, under 4 s) during an 8 s script: each ends
 * RLOCK_ECONNECT (not run) while the script still runs. Before: every re-send
 * added the WAITs then ahead of it to its deadline, so the later tries never
 * reached theirs and were granted once the script ended. */
TEST(busy_waits_ahead_counted_once) {
  th_server_t *rep = th_replica_start(srv);
  th_replicas_wait(srv, 1, 10000);
  th_reply_free(th_cmd(srv, "CONFIG", "SET", "busy-reply-threshold", "50", NULL));
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = srv->url;
  o.command_timeout_ms = 1000;
  o.retry_attempts = 0;
  o.replica_sync = RLOCK_REPLICA_SYNC_ONE;
  o.replica_sync_timeout_ms = 900;
  o.fast_path = 0;
  o.ping_interval_ms = 0;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  enum { N = 3 };
  rlock_lock_t *l[N];
  char nm[N][32];
  for (int i = 0; i < N; i++) {
    snprintf(nm[i], sizeof nm[i], "notrun:waits-%d", i);
    l[i] = th_lock(c, nm[i]);
    CHECK_OK(rlock_lock_acquire(l[i], 9, 0, RLOCK_LEASE_WATCHDOG, NULL)); /* connected, scripts loaded, WAIT sent */
    CHECK_OK(rlock_lock_release(l[i], 9));
  }
  busy_t b;
  pthread_t t;
  start_busy(&b, &t, 8000);
  fh_latch_t got[N];
  int64_t t0 = rlock_now_ms();
  for (int i = 0; i < N; i++) {
    fh_latch_init(&got[i]);
    CHECK_OK(rlock_lock_acquire_async(l[i], 9, 0, RLOCK_LEASE_WATCHDOG, NULL, fh_latch_cb, &got[i]));
  }
  int ended_busy[N];
  for (int i = 0; i < N; i++) {
    CHECK_MSG(fh_latch_wait(&got[i], 15000), "try %d never ended", i);
    ended_busy[i] = answers_busy(NULL);
    printf("# try %d during an 8000 ms script: %s after %lld ms (server %s)\n", i, rlock_err_name(got[i].status),
           (long long)(rlock_now_ms() - t0), ended_busy[i] ? "still busy" : "no longer busy");
  }
  CHECK(pthread_join(t, NULL) == 0);
  for (int i = 0; i < N; i++) {
    CHECK_MSG(got[i].status == RLOCK_ECONNECT && ended_busy[i],
              "try %d ended %s %s the script ended: its deadline grew at its re-sends", i,
              rlock_err_name(got[i].status), ended_busy[i] ? "before" : "after");
    CHECK_EQ(th_cmd_int(srv, "EXISTS", nm[i], NULL), 0);
    fh_latch_destroy(&got[i]);
    rlock_lock_free(l[i]);
  }
  fh_result("requests with WAIT refused BUSY again and again", "replicas", "reentrant",
            "each ends not run at its own deadline (WAITs ahead counted once)", 0);
  rlock_client_free(c);
  th_server_stop(rep);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 120);
  srv = th_server_start(NULL);
  px = fp_start(srv->port);
  snprintf(purl, sizeof purl, "redis://127.0.0.1:%d", fp_port(px));
  RUN_IF(unlock_never_written);
  RUN_IF(busy_script_not_run);
  RUN_IF(busy_fast_unlock);
  RUN_IF(readonly_compound);
  RUN_IF(readonly_fast_unlock);
  RUN_IF(loading_after_restart);
  RUN_IF(busy_waits_ahead_counted_once);
  fp_stop(px);
  th_server_stop(srv);
  return th_done();
}
