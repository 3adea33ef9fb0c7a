/* test_redisson.c -- rlock and the real Redisson 4.7.0 (a JVM driven
 * through harness_redisson.h) share reentrant locks on one redis-server:
 *   java_holds_c_waits   Java holds (60 s lease), a C waiter is woken by
 *                        Java's unlock message at once, not by the TTL
 *   c_holds_java_waits   the reverse: Java's lock() is woken by rlock's unlock
 *   reentry_counts       hold counts seen from both sides; neither side can
 *                        release the other's hold
 *   force_unlock_wakes   forceUnlock from Java wakes a C waiter, rlock's
 *                        force unlock wakes a Java waiter
 *   java_watchdog        Redisson's watchdog keeps its hold past several
 *                        leases while C waits, and the reverse
 *   killed_java_holder   kill -9 of the JVM holding a watchdog lock: it frees
 *                        after the lease and the C waiter takes it
 *   name_forms           a hash-tagged name: the same channel, wake-ups cross;
 *                        a name with unbalanced braces: rlock's slot-safe
 *                        channel differs from Redisson's (on purpose), the two
 *                        still exclude each other and the C waiter takes the
 *                        lock at the Java hold's PTTL
 *   redisson_unlock_request  Redisson's unlock as it goes on the wire (seen
 *                        with MONITOR): its keys, request id, ARGV, latch
 *                        value and DEL are the layout rlock documents; the
 *                        same request run through rlock's unlock script
 *                        releases Java's hold, and a re-send of it (same id)
 *                        counts once: it leaves a C hold taken since alone
 * Wake-ups are timed against a 60 s lease: only the unlock message can
 * explain a wake-up seconds after the unlock. Nothing sleeps to synchronise:
 * waits end on the peer's answers, the waiters' results and PUBSUB NUMSUB. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "harness.h"
#include "harness_redisson.h"

static th_server_t *srv;
static char peer_addr[64];

#define LONG_LEASE 60000 /* ms: a wake-up long before it came from a message */
#define WAKE_MS 5000     /* bound on a message wake-up (a loaded 2-core machine) */
#define WATCHDOG 1500    /* short watchdog leases on both sides */

/* Redisson's channel: P:{NAME}, or P:NAME when NAME holds a '{'. */
static void channel_of(const char *name, char *buf, size_t len) {
  if (strchr(name, '{')) snprintf(buf, len, "redisson_lock__channel:%s", name);
  else snprintf(buf, len, "redisson_lock__channel:{%s}", name);
}

typedef struct numsub_wait {
  const char *channel;
  long long n;
} numsub_wait_t;
static int numsub_reaches(void *arg) {
  numsub_wait_t *w = arg;
  return th_numsub(srv, w->channel) >= w->n;
}
/* Waits until n connections subscribe to name's channel (a waiter is parked). */
static void wait_subscribers(const char *name, long long n) {
  char ch[256];
  channel_of(name, ch, sizeof ch);
  numsub_wait_t w = {ch, n};
  CHECK_MSG(th_wait_until(numsub_reaches, &w, 20000), "no waiter subscribed to %s", ch);
}

static rlock_client_t *msg_client;
static uint64_t msg_before;
static int message_counted(void *arg) {
  (void)arg;
  rlock_stats_t s;
  rlock_client_stats(msg_client, &s);
  return s.messages > msg_before;
}

static th_peer_t *peer(int64_t watchdog_ms) { return th_peer_start("single", peer_addr, watchdog_ms, 0); }

TEST(java_holds_c_waits) {
  const char *name = "rs:java-holds";
  th_peer_t *j = peer(0);
  rlock_client_t *c = th_client(srv->url, 0);
  th_peer_expect(j, "a", "ok", "getLock %s", name);
  th_peer_expect(j, "a", "ok", "lock %d", LONG_LEASE);
  th_cwaiter_t w = {.l = th_lock(c, name), .wait_ms = RLOCK_WAIT_FOREVER, .lease_ms = LONG_LEASE};
  CHECK_RC(rlock_lock_trylock(w.l, 0, 1000), RLOCK_EBUSY);
  th_cwaiter_start(&w);
  wait_subscribers(name, 1);
  CHECK(!th_cwaiter_done(&w));
  rlock_stats_t s0;
  rlock_client_stats(c, &s0);
  int64_t t0 = th_now_ms();
  th_peer_expect(j, "a", "ok", "unlock");
  CHECK_MSG(th_wait_until(th_cwaiter_done, &w, WAKE_MS), "the C waiter was not woken by Java's unlock");
  pthread_join(w.t, NULL);
  CHECK_OK(w.rc);
  /* it heard Java's message (a try in flight since the subscription may be
   * granted before the message is read) */
  msg_client = c, msg_before = s0.messages;
  CHECK_MSG(th_wait_until(message_counted, NULL, 5000), "Java's unlock message never reached the C client");
  fprintf(stderr, "# Java unlock -> C holds: %lld ms\n", (long long)(w.done_at - t0));
  /* Redisson sees the C hold as another owner's */
  th_peer_expect(j, "a", "true", "isLocked");
  th_peer_expect(j, "a", "false", "isHeld");
  th_peer_expect(j, "a", "false", "tryLock 0 1000");
  CHECK_OK(rlock_lock_release(w.l, w.owner));
  th_peer_expect(j, "a", "false", "isLocked");
  rlock_lock_free(w.l);
  rlock_client_free(c);
  th_peer_stop(j);
}

TEST(c_holds_java_waits) {
  const char *name = "rs:c-holds";
  th_peer_t *j = peer(0);
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = th_lock(c, name);
  CHECK_OK(rlock_lock_lock(l, LONG_LEASE));
  th_peer_expect(j, "a", "ok", "getLock %s", name);
  th_peer_expect(j, "a", "false", "tryLock 0 1000");
  th_peer_send(j, "a", "lock"); /* blocks: Redisson's lock() with the watchdog */
  wait_subscribers(name, 1);
  char *early = NULL;
  CHECK_MSG(!th_peer_poll(j, "a", 0, &early), "Java got the lock rlock holds: %s", early);
  int64_t t0 = th_now_ms();
  CHECK_OK(rlock_lock_unlock(l));
  char *got = th_peer_answer(j, "a", WAKE_MS);
  CHECK_STREQ(got, "ok");
  free(got);
  fprintf(stderr, "# C unlock -> Java holds: %lld ms\n", (long long)(th_now_ms() - t0));
  /* the holder's field is the worker's "<uuid>:<thread id>" */
  th_peer_send(j, "a", "owner");
  char *owner = th_peer_answer(j, "a", 10000);
  CHECK(!strncmp(owner, j->id, strlen(j->id)));
  CHECK_EQ(th_hget_num(srv, name, owner), 1);
  rlock_holder_t *h = NULL;
  size_t n = 0;
  CHECK_OK(rlock_lock_holders(l, &h, &n));
  CHECK_EQ(n, 1);
  CHECK_STREQ(h[0].owner, owner);
  rlock_holders_free(h, n);
  free(owner);
  CHECK_RC(rlock_lock_trylock(l, 0, 1000), RLOCK_EBUSY);
  th_peer_expect(j, "a", "ok", "unlock");
  CHECK_OK(rlock_lock_trylock(l, 0, 1000));
  CHECK_OK(rlock_lock_unlock(l));
  rlock_lock_free(l);
  rlock_client_free(c);
  th_peer_stop(j);
}

TEST(reentry_counts) {
  const char *jname = "rs:reentry-java", *cname = "rs:reentry-c";
  th_peer_t *j = peer(0);
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *jl = th_lock(c, jname), *cl = th_lock(c, cname);
  /* Java re-enters twice: rlock reads count 2 under Java's owner id */
  th_peer_expect(j, "a", "ok", "getLock %s", jname);
  th_peer_expect(j, "a", "ok", "lock");
  th_peer_expect(j, "a", "ok", "lock %d", LONG_LEASE);
  th_peer_send(j, "a", "owner");
  char *jowner = th_peer_answer(j, "a", 10000);
  rlock_holder_t *h = NULL;
  size_t n = 0;
  CHECK_OK(rlock_lock_holders(jl, &h, &n));
  CHECK_EQ(n, 1);
  CHECK_STREQ(h[0].owner, jowner);
  CHECK_EQ(h[0].count, 2);
  rlock_holders_free(h, n);
  int64_t cnt = -1;
  int held = -1, locked = -1;
  CHECK_OK(rlock_lock_hold_count(jl, RLOCK_OWNER_SELF, &cnt));
  CHECK_EQ(cnt, 0);
  CHECK_OK(rlock_lock_is_held(jl, RLOCK_OWNER_SELF, &held));
  CHECK_EQ(held, 0);
  CHECK_OK(rlock_lock_is_locked(jl, &locked));
  CHECK_EQ(locked, 1);
  CHECK_RC(rlock_lock_unlock(jl), RLOCK_ENOTHELD); /* rlock cannot release Java's hold */
  CHECK_EQ(th_hget_num(srv, jname, jowner), 2);
  th_peer_expect(j, "a", "ok", "unlock");
  CHECK_EQ(th_hget_num(srv, jname, jowner), 1);
  CHECK_RC(rlock_lock_trylock(jl, 0, 1000), RLOCK_EBUSY);
  th_peer_expect(j, "a", "ok", "unlock");
  CHECK_OK(rlock_lock_is_locked(jl, &locked));
  CHECK_EQ(locked, 0);
  free(jowner);

  /* C re-enters three times: Redisson sees a lock held by another owner */
  CHECK_OK(rlock_lock_lock(cl, RLOCK_LEASE_WATCHDOG));
  CHECK_OK(rlock_lock_lock(cl, LONG_LEASE));
  CHECK_OK(rlock_lock_lock(cl, 5000));
  char cowner[128];
  th_owner_id(c, RLOCK_OWNER_THREAD | (rlock_owner_t)th_gettid(), cowner, sizeof cowner);
  CHECK_EQ(th_hget_num(srv, cname, cowner), 3);
  th_peer_expect(j, "b", "ok", "getLock %s", cname);
  th_peer_expect(j, "b", "true", "isLocked");
  th_peer_expect(j, "b", "false", "isHeld");
  th_peer_expect(j, "b", "0", "getHoldCount");
  long long ttl = th_peer_num(j, "b", "remainTimeToLive");
  CHECK_MSG(ttl > 30000 && ttl <= LONG_LEASE, "Java reads TTL %lld (the 60 s hold's)", ttl);
  th_peer_send(j, "b", "unlock"); /* Redisson refuses to release a hold it does not own */
  char *e = th_peer_answer(j, "b", 10000);
  CHECK_MSG(strstr(e, "IllegalMonitorStateException"), "Java unlock of rlock's hold: %s", e);
  free(e);
  CHECK_EQ(th_hget_num(srv, cname, cowner), 3);
  th_peer_expect(j, "b", "false", "tryLock 0 1000");
  CHECK_OK(rlock_lock_unlock(cl));
  CHECK_OK(rlock_lock_unlock(cl));
  CHECK_EQ(th_hget_num(srv, cname, cowner), 1);
  th_peer_expect(j, "b", "false", "tryLock 0 1000");
  CHECK_OK(rlock_lock_unlock(cl));
  th_peer_expect(j, "b", "true", "tryLock 0 1000");
  th_peer_expect(j, "b", "1", "getHoldCount");
  th_peer_expect(j, "b", "ok", "unlock");
  rlock_lock_free(jl), rlock_lock_free(cl);
  rlock_client_free(c);
  th_peer_stop(j);
}

TEST(force_unlock_wakes) {
  const char *name = "rs:force";
  th_peer_t *j = peer(0);
  rlock_client_t *c = th_client(srv->url, 0);
  /* Java holds, C waits, another Java thread forces the lock open */
  th_peer_expect(j, "a", "ok", "getLock %s", name);
  th_peer_expect(j, "b", "ok", "getLock %s", name);
  th_peer_expect(j, "a", "ok", "lock %d", LONG_LEASE);
  th_cwaiter_t w = {.l = th_lock(c, name), .wait_ms = RLOCK_WAIT_FOREVER, .lease_ms = LONG_LEASE};
  th_cwaiter_start(&w);
  wait_subscribers(name, 1);
  int64_t t0 = th_now_ms();
  th_peer_expect(j, "b", "true", "forceUnlock");
  CHECK_MSG(th_wait_until(th_cwaiter_done, &w, WAKE_MS), "Java's forceUnlock did not wake the C waiter");
  pthread_join(w.t, NULL);
  CHECK_OK(w.rc);
  fprintf(stderr, "# Java forceUnlock -> C holds: %lld ms\n", (long long)(w.done_at - t0));
  /* C holds now, Java waits, rlock forces it open */
  th_peer_send(j, "b", "lock");
  wait_subscribers(name, 1);
  int was = -1;
  t0 = th_now_ms();
  CHECK_OK(rlock_lock_force_unlock(w.l, &was));
  CHECK_EQ(was, 1);
  char *got = th_peer_answer(j, "b", WAKE_MS);
  CHECK_STREQ(got, "ok");
  free(got);
  fprintf(stderr, "# rlock force unlock -> Java holds: %lld ms\n", (long long)(th_now_ms() - t0));
  CHECK_RC(rlock_lock_release(w.l, w.owner), RLOCK_ENOTHELD); /* its hold was broken */
  th_peer_expect(j, "b", "ok", "unlock");
  /* a Java holder whose lock was forced open: its unlock is refused */
  th_peer_expect(j, "a", "false", "isHeld");
  rlock_lock_free(w.l);
  rlock_client_free(c);
  th_peer_stop(j);
}

TEST(java_watchdog) {
  const char *name = "rs:watchdog";
  th_peer_t *j = peer(WATCHDOG);
  rlock_client_t *c = th_client(srv->url, WATCHDOG);
  rlock_lock_t *l = th_lock(c, name);
  /* Java's watchdog renews its hold: a C wait of 3 leases ends busy */
  th_peer_expect(j, "a", "ok", "getLock %s", name);
  th_peer_expect(j, "a", "ok", "lock");
  long long ttl = th_peer_num(j, "a", "remainTimeToLive");
  CHECK_MSG(ttl > 0 && ttl <= WATCHDOG, "Java's watchdog lease: TTL %lld", ttl);
  CHECK_RC(rlock_lock_trylock(l, 3 * WATCHDOG, 1000), RLOCK_EBUSY);
  th_peer_expect(j, "a", "1", "getHoldCount");
  /* the C waiter still gets it at Java's unlock */
  th_cwaiter_t w = {.l = l, .wait_ms = RLOCK_WAIT_FOREVER, .lease_ms = RLOCK_LEASE_WATCHDOG};
  th_cwaiter_start(&w);
  wait_subscribers(name, 1);
  th_peer_expect(j, "a", "ok", "unlock");
  CHECK_MSG(th_wait_until(th_cwaiter_done, &w, WAKE_MS), "the C waiter was not woken");
  pthread_join(w.t, NULL);
  CHECK_OK(w.rc);
  /* rlock's watchdog renews the C hold: a Java wait of 3 leases ends false */
  th_peer_expect(j, "a", "false", "tryLock 4500 1000");
  th_peer_expect(j, "a", "false", "isHeld");
  th_peer_send(j, "a", "tryLock 30000 1000");
  wait_subscribers(name, 1);
  CHECK_OK(rlock_lock_release(l, w.owner));
  char *got = th_peer_answer(j, "a", WAKE_MS);
  CHECK_STREQ(got, "true");
  free(got);
  th_peer_expect(j, "a", "ok", "unlock");
  rlock_lock_free(l);
  rlock_client_free(c);
  th_peer_stop(j);
}

TEST(killed_java_holder) {
  const char *name = "rs:killed";
  th_peer_t *j = peer(WATCHDOG);
  rlock_client_t *c = th_client(srv->url, 0);
  th_peer_expect(j, "a", "ok", "getLock %s", name);
  th_peer_expect(j, "a", "ok", "lock");
  th_cwaiter_t w = {.l = th_lock(c, name), .wait_ms = 30000, .lease_ms = LONG_LEASE};
  th_cwaiter_start(&w);
  wait_subscribers(name, 1);
  /* renewed past its lease while alive */
  CHECK_RC(rlock_lock_trylock(w.l, 2 * WATCHDOG, 1000), RLOCK_EBUSY);
  CHECK(!th_cwaiter_done(&w));
  int64_t t0 = th_now_ms();
  th_peer_kill(j);
  CHECK_MSG(th_wait_until(th_cwaiter_done, &w, WATCHDOG + WAKE_MS), "the C waiter never got the dead holder's lock");
  pthread_join(w.t, NULL);
  CHECK_OK(w.rc);
  fprintf(stderr, "# kill -9 -> C holds: %lld ms (lease %d ms)\n", (long long)(w.done_at - t0), WATCHDOG);
  CHECK_OK(rlock_lock_release(w.l, w.owner));
  rlock_lock_free(w.l);
  rlock_client_free(c);
}

/* One channel of the lock "rs:a{b" has a subscriber (rlock's, whatever its form). */
static int odd_subscribed(void *arg) {
  (void)arg;
  redisReply *r = th_cmd(srv, "PUBSUB", "CHANNELS", "redisson_lock__channel:*rs:a{b", NULL);
  int ok = r->type == REDIS_REPLY_ARRAY && r->elements == 1;
  th_reply_free(r);
  return ok;
}

TEST(name_forms) {
  th_peer_t *j = peer(0);
  rlock_client_t *c = th_client(srv->url, 0);
  /* "rs:{orders}:lock": Redisson's P:NAME forms, kept by rlock */
  const char *tagged = "rs:{orders}:lock";
  th_peer_expect(j, "a", "ok", "getLock %s", tagged);
  th_peer_expect(j, "a", "ok", "lock %d", LONG_LEASE);
  th_cwaiter_t w = {.l = th_lock(c, tagged), .wait_ms = RLOCK_WAIT_FOREVER, .lease_ms = LONG_LEASE};
  th_cwaiter_start(&w);
  wait_subscribers(tagged, 1); /* on redisson_lock__channel:rs:{orders}:lock */
  th_peer_expect(j, "a", "ok", "unlock");
  CHECK_MSG(th_wait_until(th_cwaiter_done, &w, WAKE_MS), "%s: Java's unlock did not wake the C waiter", tagged);
  pthread_join(w.t, NULL);
  CHECK_OK(w.rc);
  th_peer_send(j, "a", "lock");
  wait_subscribers(tagged, 1);
  CHECK_OK(rlock_lock_release(w.l, w.owner));
  char *got = th_peer_answer(j, "a", WAKE_MS);
  CHECK_STREQ(got, "ok");
  free(got);
  th_peer_expect(j, "a", "ok", "unlock");
  rlock_lock_free(w.l);

  /* "rs:a{b": Redisson's channel P:NAME hashes to another slot than NAME;
   * rlock's is slot-safe (P:{T}NAME). Same hash NAME: they exclude each other. */
  const char *odd = "rs:a{b";
  th_peer_expect(j, "b", "ok", "getLock %s", odd);
  th_peer_expect(j, "b", "ok", "lock %d", WATCHDOG);
  th_cwaiter_t v = {.l = th_lock(c, odd), .wait_ms = 30000, .lease_ms = LONG_LEASE};
  CHECK_RC(rlock_lock_trylock(v.l, 0, 1000), RLOCK_EBUSY);
  int64_t t0 = th_now_ms();
  th_cwaiter_start(&v);
  CHECK_MSG(th_wait_until(odd_subscribed, NULL, 20000), "the C waiter never subscribed");
  redisReply *r = th_cmd(srv, "PUBSUB", "CHANNELS", "redisson_lock__channel:*rs:a{b", NULL);
  CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 1);
  CHECK(strcmp(r->element[0]->str, "redisson_lock__channel:rs:a{b") != 0);
  fprintf(stderr, "# %s: rlock's channel %s, Redisson's redisson_lock__channel:%s\n", odd, r->element[0]->str, odd);
  th_reply_free(r);
  CHECK_MSG(th_wait_until(th_cwaiter_done, &v, WATCHDOG + WAKE_MS), "the C waiter never got %s", odd);
  pthread_join(v.t, NULL);
  CHECK_OK(v.rc);
  CHECK(v.done_at - t0 >= WATCHDOG / 2); /* not before the Java hold's TTL ran out */
  th_peer_expect(j, "b", "false", "isHeld");
  th_peer_expect(j, "b", "false", "tryLock 0 1000");
  CHECK_OK(rlock_lock_release(v.l, v.owner));
  th_peer_expect(j, "b", "true", "tryLock 0 1000");
  th_peer_expect(j, "b", "ok", "unlock");
  rlock_lock_free(v.l);
  rlock_client_free(c);
  th_peer_stop(j);
}

/* The quoted arguments of a MONITOR line ('<ts> [<db> <addr>] "A" "B"...')
 * into out (malloc'd); how many. *lua: 1 if a script ran the command. */
static int monitor_args(const char *line, char **out, int max, int *lua) {
  const char *p = strchr(line, '[');
  *lua = p && !strncmp(strchr(p, ' ') ? strchr(p, ' ') + 1 : "", "lua]", 4);
  p = p ? strchr(p, ']') : NULL;
  int n = 0;
  while (p && (p = strchr(p, '"')) && n < max) {
    char *a = malloc(strlen(p) + 1), *o = a;
    for (p++; *p && *p != '"'; p++) {
      if (*p == '\\' && p[1] == 'x' && p[2] && p[3]) {
        char hex[3] = {p[2], p[3], 0};
        *o++ = (char)strtol(hex, NULL, 16);
        p += 3;
      } else if (*p == '\\' && p[1]) {
        p++;
        *o++ = *p == 'n' ? '\n' : *p == 'r' ? '\r' : *p == 't' ? '\t' : *p;
      } else {
        *o++ = *p;
      }
    }
    *o = 0;
    out[n++] = a;
    if (*p) p++;
  }
  return n;
}

static void free_args(char **a, int n) {
  for (int i = 0; i < n; i++) free(a[i]);
}

static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  CHECK_MSG(f, "open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  CHECK(fread(b, 1, (size_t)n, f) == (size_t)n);
  b[n] = 0;
  fclose(f);
  return b;
}

/* Runs rlock's unlock script (its source) with Redisson's KEYS and ARGV. */
static redisReply *rlock_script_unlock(char **keys_argv) {
  char *body = read_text(RLOCK_SOURCE_DIR "/lua/reentrant_unlock.lua");
  const char *argv[11] = {"EVAL", body, "3"};
  for (int i = 0; i < 8; i++) argv[3 + i] = keys_argv[i];
  redisReply *r = th_cmdv(srv, 11, argv, NULL);
  free(body);
  return r;
}

TEST(redisson_unlock_request) {
  const char *name = "rs:latch";
  th_peer_t *j = peer(0);
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = th_lock(c, name);
  th_peer_expect(j, "a", "ok", "getLock %s", name);
  th_peer_expect(j, "a", "ok", "lock %d", LONG_LEASE);
  th_peer_expect(j, "a", "ok", "lock %d", LONG_LEASE);
  th_peer_send(j, "a", "owner");
  char *jowner = th_peer_answer(j, "a", 10000);
  redisContext *mon = th_raw_connect(srv);
  struct timeval tv = {10, 0};
  redisSetTimeout(mon, tv);
  redisReply *r = redisCommand(mon, "MONITOR");
  CHECK(r && r->type == REDIS_REPLY_STATUS);
  freeReplyObject(r);
  th_peer_expect(j, "a", "ok", "unlock"); /* 2 -> 1 */

  /* Redisson's unlock, the latch its script wrote, and the client's DEL of it */
  char *req[16] = {0}, latch_value[16] = "";
  int nreq = 0, deleted = 0;
  char latch_prefix[128];
  snprintf(latch_prefix, sizeof latch_prefix, "redisson_unlock_latch:{%s}:", name);
  while (!deleted) {
    CHECK_MSG(redisGetReply(mon, (void **)&r) == REDIS_OK && r, "MONITOR: no more lines (%s)", mon->errstr);
    char *a[16];
    int lua = 0, n = monitor_args(r->str ? r->str : "", a, 16, &lua);
    if (!nreq && n == 11 && !strcasecmp(a[0], "evalsha") && !strncmp(a[5], latch_prefix, strlen(latch_prefix))) {
      memcpy(req, a, sizeof a);
      nreq = n;
      n = 0;
    } else if (nreq && lua && n >= 3 && !strcasecmp(a[0], "set") && !strcmp(a[1], req[5])) {
      snprintf(latch_value, sizeof latch_value, "%s", a[2]);
    } else if (nreq && !lua && n == 2 && !strcasecmp(a[0], "del") && !strcmp(a[1], req[5])) {
      deleted = 1;
    }
    free_args(a, n);
    freeReplyObject(r);
  }
  redisFree(mon);
  /* EVALSHA sha 3 NAME channel latch | 0 lease owner PUBLISH latch-TTL */
  char ch[128];
  channel_of(name, ch, sizeof ch);
  CHECK_STREQ(req[2], "3");
  CHECK_STREQ(req[3], name);
  CHECK_STREQ(req[4], ch);
  const char *id = req[5] + strlen(latch_prefix);
  CHECK_EQ(strlen(id), 32);
  CHECK_EQ(strspn(id, "0123456789abcdef"), 32);
  CHECK_STREQ(req[6], "0");
  CHECK_STREQ(req[7], "60000"); /* the lock's lease */
  CHECK_STREQ(req[8], jowner);
  CHECK(!strcasecmp(req[9], "publish"));
  long long latch_ttl = atoll(req[10]);
  CHECK_MSG(latch_ttl >= 1 && latch_ttl <= 60000, "Redisson's latch TTL %s", req[10]);
  CHECK_STREQ(latch_value, "0"); /* still held */
  fprintf(stderr, "# Redisson's unlock: EVALSHA %.8s... 3 %s %s %s %s %s %s %s %s\n", req[1], req[3], req[4], req[5],
          req[6], req[7], req[8], req[9], req[10]);
  CHECK_EQ(th_hget_num(srv, name, jowner), 1);

  /* that request through rlock's script: Java's last hold released, "0" published */
  r = rlock_script_unlock(req + 3);
  CHECK_MSG(r->type == REDIS_REPLY_INTEGER && r->integer == 1, "rlock's script on Redisson's request: type %d %s",
            r->type, r->str ? r->str : "");
  th_reply_free(r);
  th_peer_expect(j, "a", "false", "isLocked");
  CHECK_EQ(th_cmd_int(srv, "PTTL", req[5], NULL) > 0, 1); /* latched */
  /* a C hold taken since; the request sent again (same id): answered 1 by
   * the latch, the C hold untouched */
  CHECK_OK(rlock_lock_trylock(l, 0, LONG_LEASE));
  r = rlock_script_unlock(req + 3);
  CHECK_MSG(r->type == REDIS_REPLY_INTEGER && r->integer == 1, "re-send: type %d", r->type);
  th_reply_free(r);
  int held = 0;
  CHECK_OK(rlock_lock_is_held(l, RLOCK_OWNER_SELF, &held));
  CHECK_EQ(held, 1);
  th_peer_send(j, "a", "unlock"); /* Java holds nothing now */
  char *e = th_peer_answer(j, "a", 10000);
  CHECK_MSG(strstr(e, "IllegalMonitorStateException"), "Java's unlock after its hold went: %s", e);
  free(e);
  CHECK_OK(rlock_lock_unlock(l));
  free_args(req, nreq);
  free(jowner);
  rlock_lock_free(l);
  rlock_client_free(c);
  th_peer_stop(j);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 170);
  const char *why = th_peer_unavailable();
  if (why) {
    printf("SKIP test_redisson: %s\n", why);
    return 77;
  }
  signal(SIGPIPE, SIG_IGN); /* a peer that died is a failed read, not a killed test */
  srv = th_server_start(NULL);
  snprintf(peer_addr, sizeof peer_addr, "redis://127.0.0.1:%d", srv->port);
  RUN(java_holds_c_waits);
  RUN(c_holds_java_waits);
  RUN(reentry_counts);
  RUN(force_unlock_wakes);
  RUN(java_watchdog);
  RUN(killed_java_holder);
  RUN(name_forms);
  RUN(redisson_unlock_request);
  th_server_stop(srv);
  return th_done();
}
