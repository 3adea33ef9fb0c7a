/* test_options.c -- client options and error reporting:
 *   every bad option makes rlock_client_new fail with RLOCK_EINVAL, a NULL
 *   client and a message naming the option (and the limits are accepted);
 *   rlock_last_error() is per thread: threads failing in different ways
 *   each keep their own message, including a message made on the I/O
 *   thread for a sync call;
 *   retry_attempts = 0: an answer that was lost (timeout, dropped
 *   connection) is never re-sent, counted by the server's script calls;
 *   durations no arithmetic or Redis command can take (INT64_MAX) are
 *   refused up front. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "harness.h"

static th_server_t *srv;

/* ------------------------------------------------------------ validation */

typedef struct bad_opt {
  const char *field; /* the message must name it */
  void (*set)(rlock_options_t *o);
} bad_opt_t;

static void connect0(rlock_options_t *o) { o->connect_timeout_ms = 0; }
static void connect_neg(rlock_options_t *o) { o->connect_timeout_ms = -1; }
static void command0(rlock_options_t *o) { o->command_timeout_ms = 0; }
static void command_neg(rlock_options_t *o) { o->command_timeout_ms = -5; }
static void watchdog2(rlock_options_t *o) { o->watchdog_timeout_ms = 2; }
static void watchdog0(rlock_options_t *o) { o->watchdog_timeout_ms = 0; }
static void watchdog_neg(rlock_options_t *o) { o->watchdog_timeout_ms = -1; }
static void recmin0(rlock_options_t *o) { o->reconnect_min_ms = 0; }
static void recmin_neg(rlock_options_t *o) { o->reconnect_min_ms = -100; }
static void recmax_below(rlock_options_t *o) { o->reconnect_min_ms = 100, o->reconnect_max_ms = 99; }
static void retries_neg(rlock_options_t *o) { o->retry_attempts = -1; }
static void retries_101(rlock_options_t *o) { o->retry_attempts = 101; }
static void ping_neg(rlock_options_t *o) { o->ping_interval_ms = -1; }
static void dead_neg(rlock_options_t *o) { o->dead_after_timeouts = -1; }
static void keepalive_neg(rlock_options_t *o) { o->tcp_keepalive_ms = -1; }
static void keepalive_big(rlock_options_t *o) { o->tcp_keepalive_ms = 32767001; }
static void cert_no_key(rlock_options_t *o) { o->tls_cert_file = "/tmp/client.crt"; }
static void key_no_cert(rlock_options_t *o) { o->tls_key_file = "/tmp/client.key"; }
static void fast_two(rlock_options_t *o) { o->fast_path = 2; }
static void fast_neg(rlock_options_t *o) { o->fast_path = -1; }

static const bad_opt_t bad_opts[] = {
    {"connect_timeout_ms", connect0},
    {"connect_timeout_ms", connect_neg},
    {"command_timeout_ms", command0},
    {"command_timeout_ms", command_neg},
    {"watchdog_timeout_ms", watchdog2},
    {"watchdog_timeout_ms", watchdog0},
    {"watchdog_timeout_ms", watchdog_neg},
    {"reconnect_min_ms", recmin0},
    {"reconnect_min_ms", recmin_neg},
    {"reconnect_max_ms", recmax_below},
    {"retry_attempts", retries_neg},
    {"retry_attempts", retries_101},
    {"ping_interval_ms", ping_neg},
    {"dead_after_timeouts", dead_neg},
    {"tcp_keepalive_ms", keepalive_neg},
    {"tcp_keepalive_ms", keepalive_big},
    {"tls_key_file", cert_no_key},
    {"tls_cert_file", key_no_cert},
    {"fast_path", fast_two},
    {"fast_path", fast_neg},
};

/* rlock_client_new with opts must fail with RLOCK_EINVAL, leave *out NULL
 * and say which option is wrong. */
static void expect_einval(const rlock_options_t *o, const char *field, const char *what) {
  rlock_client_t *c = (rlock_client_t *)&c; /* not NULL: the call must reset it */
  int rc = rlock_client_new(&c, o);
  if (rc == 0) rlock_client_free(c);
  CHECK_MSG(rc == RLOCK_EINVAL, "%s: %s, want RLOCK_EINVAL", what, rlock_err_name(rc));
  CHECK_MSG(c == NULL, "%s: *out not reset to NULL", what);
  CHECK_MSG(strstr(rlock_last_error(), field) != NULL, "%s: message \"%s\" does not name %s", what, rlock_last_error(),
            field);
}

TEST(bad_options) {
  for (size_t i = 0; i < sizeof bad_opts / sizeof bad_opts[0]; i++) {
    rlock_options_t o;
    rlock_options_init(&o);
    o.url = srv->url; /* reachable: only the option can make it fail */
    bad_opts[i].set(&o);
    char what[64];
    snprintf(what, sizeof what, "bad option #%zu (%s)", i, bad_opts[i].field);
    expect_einval(&o, bad_opts[i].field, what);
  }
  rlock_client_t *c = (rlock_client_t *)&c;
  CHECK_RC(rlock_client_new(&c, NULL), RLOCK_EINVAL);
  CHECK(c == NULL);
  CHECK(strstr(rlock_last_error(), "options") != NULL);
  rlock_options_t o;
  rlock_options_init(&o);
  CHECK_RC(rlock_client_new(NULL, &o), RLOCK_EINVAL);
  CHECK(strstr(rlock_last_error(), "out") != NULL);
}

/* The limits themselves are valid. */
TEST(limits_accepted) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = srv->url;
  o.retry_attempts = 0;
  o.watchdog_timeout_ms = 3;
  o.reconnect_min_ms = o.reconnect_max_ms = 1;
  o.connect_timeout_ms = o.command_timeout_ms = 1000;
  o.ping_interval_ms = 0;    /* off */
  o.dead_after_timeouts = 0; /* never */
  o.tcp_keepalive_ms = 0;    /* off */
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  rlock_client_free(c);
  rlock_options_init(&o);
  o.url = srv->url;
  o.retry_attempts = 100;
  o.tcp_keepalive_ms = 32767000;
  CHECK_OK(rlock_client_new(&c, &o));
  rlock_client_free(c);
}

/* Durations nothing can use: the watchdog lease is sent as PEXPIRE (Redis
 * refuses it), the command timeout makes the latch TTL (timeout x (retries
 * + 2), sent as PX) overflow, and every deadline is now + timeout. */
static void huge_watchdog(rlock_options_t *o) { o->watchdog_timeout_ms = INT64_MAX; }
static void huge_command(rlock_options_t *o) { o->command_timeout_ms = INT64_MAX; }
static void huge_connect(rlock_options_t *o) { o->connect_timeout_ms = INT64_MAX; }
TEST(huge_durations_refused) {
  const bad_opt_t huge[] = {{"watchdog_timeout_ms", huge_watchdog},
                            {"command_timeout_ms", huge_command},
                            {"connect_timeout_ms", huge_connect}};
  for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
    rlock_options_t o;
    rlock_options_init(&o);
    o.url = srv->url;
    huge[i].set(&o);
    char what[64];
    snprintf(what, sizeof what, "%s = INT64_MAX", huge[i].field);
    expect_einval(&o, huge[i].field, what);
  }
}

/* ------------------------------------------------------------ last error per thread */

static pthread_barrier_t bar;
typedef struct failer {
  int (*fail)(void); /* fails in its own way; returns the code */
  int rc;
  char msg[256];   /* the message right after its failure */
  char later[256]; /* the message once every thread has failed */
} failer_t;

static int fail_duration(void) {
  int64_t v;
  return rlock_duration_parse("12 parsecs", &v);
}
static int fail_url(void) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = "garbage://nowhere";
  rlock_client_t *c = NULL;
  return rlock_client_new(&c, &o);
}
static rlock_lock_t *shared_lock;
static int fail_unlock(void) { return rlock_lock_release(shared_lock, 424242); } /* on the I/O thread */

static void *failer_main(void *arg) {
  failer_t *f = arg;
  static _Atomic int turn;
  int me = turn++; /* fail one after the other: each failure comes after the previous */
  for (int i = 0; i < 3; i++) {
    if (i == me) {
      f->rc = f->fail();
      snprintf(f->msg, sizeof f->msg, "%s", rlock_last_error());
    }
    pthread_barrier_wait(&bar);
  }
  snprintf(f->later, sizeof f->later, "%s", rlock_last_error());
  return NULL;
}

TEST(last_error_per_thread) {
  rlock_client_t *c = th_client(srv->url, 0);
  shared_lock = th_lock(c, "options:last-error");
  CHECK_RC(rlock_lock_new(c, "", 0, &(rlock_lock_t *){NULL}), RLOCK_EINVAL); /* main's own */
  char main_msg[256];
  snprintf(main_msg, sizeof main_msg, "%s", rlock_last_error());
  failer_t f[3] = {{.fail = fail_duration}, {.fail = fail_url}, {.fail = fail_unlock}};
  int want[3] = {RLOCK_EINVAL, RLOCK_EURL, RLOCK_ENOTHELD};
  pthread_barrier_init(&bar, NULL, 3);
  pthread_t t[3];
  for (int i = 0; i < 3; i++) CHECK_EQ(pthread_create(&t[i], NULL, failer_main, &f[i]), 0);
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&bar);
  for (int i = 0; i < 3; i++) {
    printf("thread %d: %s: \"%s\"\n", i, rlock_err_name(f[i].rc), f[i].msg);
    CHECK_RC(f[i].rc, want[i]);
    CHECK_MSG(f[i].msg[0], "thread %d: empty message", i);
    CHECK_MSG(strcmp(f[i].msg, f[i].later) == 0,
              "thread %d: its message changed when other threads failed: \"%s\" -> \"%s\"", i, f[i].msg, f[i].later);
    for (int j = 0; j < i; j++) CHECK_MSG(strcmp(f[i].msg, f[j].msg) != 0, "threads %d and %d see one message", j, i);
  }
  CHECK(strstr(f[0].msg, "parsecs") != NULL);
  CHECK(strstr(f[1].msg, "garbage") != NULL || strstr(f[1].msg, "URL") != NULL);
  CHECK(strstr(f[2].msg, "not held") != NULL);
  CHECK_STREQ(rlock_last_error(), main_msg); /* the main thread's own, untouched */
  rlock_lock_free(shared_lock);
  rlock_client_free(c);
}

/* ------------------------------------------------------------ retry_attempts = 0 */

#define R0_NAME "retry-zero"

static rlock_client_t *retry0_client(int64_t timeout_ms) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = srv->url;
  o.retry_attempts = 0;
  o.command_timeout_ms = timeout_ms;
  o.reconnect_min_ms = 20;
  o.reconnect_max_ms = 100;
  o.client_name = R0_NAME;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  return c;
}

static void pause_scripts(const char *ms) {
  redisReply *r = th_cmd(srv, "CLIENT", "PAUSE", ms, "WRITE", NULL);
  CHECK_MSG(r->type == REDIS_REPLY_STATUS, "CLIENT PAUSE: %s", r->str);
  th_reply_free(r);
}
static void unpause(void) { th_reply_free(th_cmd(srv, "CLIENT", "UNPAUSE", NULL)); }

/* The latch keys of the acquires just made are deleted in one batched DEL a
 * few ms later; a pause of writes that began before it ran would hold that
 * DEL back too (a second timeout). Wait until the server has run it. */
static int latches_gone(void *arg) {
  redisReply *r = th_cmd(srv, "KEYS", (const char *)arg, NULL);
  int gone = r->type == REDIS_REPLY_ARRAY && r->elements == 0;
  th_reply_free(r);
  return gone;
}
static void await_latch_dels(void) {
  CHECK_MSG(th_wait_until(latches_gone, "*rlock_acquire_latch*", 5000), "acquire latches never deleted");
}

/* A round trip on the client's command connection (a lock query: user
 * commands have a connection of their own): replies come in order, so once
 * it answers, every request written before it has run. */
static void ping(rlock_client_t *c) {
  rlock_lock_t *l = th_lock(c, "options:barrier");
  int locked = -1;
  CHECK_OK(rlock_lock_is_locked(l, &locked));
  CHECK_EQ(locked, 0);
  rlock_lock_free(l);
}

static rlock_stats_t stats(rlock_client_t *c) {
  rlock_stats_t s;
  rlock_client_stats(c, &s);
  return s;
}

/* An unlock whose answer times out is not re-sent: exactly one script call
 * reaches the server (a re-send would add one per attempt), applied once. */
TEST(retry_zero_unlock_timeout) {
  rlock_client_t *c = retry0_client(300);
  rlock_lock_t *l = th_lock(c, "options:r0:unlock");
  char owner[128];
  th_owner_id(c, 1, owner, sizeof owner);
  CHECK_OK(rlock_lock_acquire(l, 1, 0, 60000, NULL));
  CHECK_OK(rlock_lock_acquire(l, 1, 0, 60000, NULL));
  await_latch_dels();
  long long s0 = th_scripts_run(srv);
  pause_scripts("5000");
  CHECK_RC(rlock_lock_release(l, 1), RLOCK_ETIMEDOUT);
  unpause();
  ping(c);
  CHECK_EQ(th_scripts_run(srv) - s0, 1);
  CHECK_EQ(th_hget_num(srv, "options:r0:unlock", owner), 1);
  CHECK_EQ(stats(c).timeouts, 1);
  CHECK_OK(rlock_lock_release(l, 1));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "options:r0:unlock", NULL), 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* An acquire whose answer times out is not re-sent: one acquire try (the
 * rest of what reaches the server is the undo that gives it back), no hold. */
TEST(retry_zero_acquire_timeout) {
  rlock_client_t *c = retry0_client(300);
  rlock_lock_t *l = th_lock(c, "options:r0:acquire");
  char owner[128];
  th_owner_id(c, 1, owner, sizeof owner);
  rlock_stats_t a = stats(c);
  long long s0 = th_scripts_run(srv);
  pause_scripts("5000");
  CHECK_RC(rlock_lock_acquire(l, 1, 0, 60000, NULL), RLOCK_ETIMEDOUT);
  unpause();
  ping(c);
  rlock_stats_t b = stats(c);
  CHECK_EQ(b.acquire_attempts - a.acquire_attempts, 1);
  /* every script the client sent ran once, and nothing else */
  CHECK_EQ(th_scripts_run(srv) - s0, (long long)(b.scripts_sent - a.scripts_sent));
  CHECK_EQ(th_hget_num(srv, "options:r0:acquire", owner), -1000);
  CHECK_EQ(b.held, 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

static int r0_blocked(void *arg) { return th_client_blocked(srv, R0_NAME); }
static int reconnected(void *c) { return stats(c).reconnects >= 1; }

struct bg {
  rlock_lock_t *l;
  int rc;
};
static void *release_bg(void *p) {
  struct bg *b = p;
  b->rc = rlock_lock_release(b->l, 1);
  return NULL;
}

/* An unlock whose connection is killed while the server holds it back: the
 * request never ran, and with no retries it is not re-sent: no script call,
 * the count stays 2 on the server, the caller gets RLOCK_ECONNLOST. */
TEST(retry_zero_connection_lost) {
  rlock_client_t *c = retry0_client(10000);
  rlock_lock_t *l = th_lock(c, "options:r0:killed");
  char owner[128];
  th_owner_id(c, 1, owner, sizeof owner);
  CHECK_OK(rlock_lock_acquire(l, 1, 0, 60000, NULL));
  CHECK_OK(rlock_lock_acquire(l, 1, 0, 60000, NULL));
  long long s0 = th_scripts_run(srv);
  rlock_stats_t st0;
  rlock_client_stats(c, &st0);
  pause_scripts("20000");
  struct bg b = {l, 0};
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, release_bg, &b), 0);
  CHECK_MSG(th_wait_until(r0_blocked, NULL, 5000), "the unlock was never held back");
  th_reply_free(th_cmd(srv, "CLIENT", "KILL", "SKIPME", "yes", "TYPE", "normal", NULL));
  pthread_join(t, NULL);
  CHECK_RC(b.rc, RLOCK_ECONNLOST);
  unpause();
  CHECK(th_wait_until(reconnected, c, 5000));
  ping(c);
  /* the only script calls since: the reconnect's check of the (fixed-lease)
   * hold, which changes nothing; the unlock was not sent again */
  rlock_stats_t st1;
  rlock_client_stats(c, &st1);
  CHECK_EQ(th_scripts_run(srv) - s0, (long long)(st1.renewals - st0.renewals));
  CHECK_EQ(th_hget_num(srv, "options:r0:killed", owner), 2);
  /* rlock.h: an unlock that failed counts as done (never retry it). The next
   * unlock is the last one: it finds one hold more than expected on the
   * server (the failed release never ran) and frees the lock. */
  int64_t n = -1;
  CHECK_OK(rlock_lock_release(l, 1));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "options:r0:killed", NULL), 0);
  CHECK_RC(rlock_lock_release(l, 1), RLOCK_ENOTHELD);
  CHECK_OK(rlock_lock_hold_count(l, 1, &n));
  CHECK_EQ(n, 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* client_id: a client made with an earlier client's id acts as its owners
 * (the lock's field names that id); a wrong id holds nothing, and releases
 * nothing of the real owner; malformed ids are RLOCK_EINVAL. */
TEST(client_id_acts_as_owner) {
  static const char *const bad[] = {"",
                                    "not-a-uuid",
                                    "0123456789abcdef0123456789abcdef0123",
                                    "01234567-89ab-cdef-0123-456789abcdef0",
                                    "01234567-89ab-cdef-0123-456789abcdeg",
                                    "01234567_89ab-cdef-0123-456789abcdef"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    rlock_options_t o;
    rlock_options_init(&o);
    o.url = srv->url;
    o.client_id = bad[i];
    expect_einval(&o, "client_id", bad[i]);
  }
  rlock_client_t *a = th_client(srv->url, 0);
  rlock_lock_t *la;
  CHECK_OK(rlock_lock_new(a, "options:cid", 11, &la));
  CHECK_OK(rlock_lock_acquire(la, 7, 0, 60000, NULL));
  char id[37];
  memcpy(id, rlock_client_id(a), 37);
  rlock_lock_free(la);
  rlock_client_free(a); /* the hold stays: its lease runs */

  rlock_options_t o;
  rlock_options_init(&o);
  o.url = srv->url;
  o.client_id = "00000000-0000-4000-8000-000000000000"; /* not the holder */
  rlock_client_t *w;
  CHECK_OK(rlock_client_new(&w, &o));
  CHECK(strcmp(rlock_client_id(w), o.client_id) == 0);
  rlock_lock_t *lw;
  CHECK_OK(rlock_lock_new(w, "options:cid", 11, &lw));
  CHECK_RC(rlock_lock_release(lw, 7), RLOCK_ENOTHELD);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "options:cid", NULL), 1);
  rlock_lock_free(lw);
  rlock_client_free(w);

  o.client_id = id; /* the holder's id: owner 7 is the holder */
  rlock_client_t *b;
  CHECK_OK(rlock_client_new(&b, &o));
  CHECK(strcmp(rlock_client_id(b), id) == 0);
  rlock_lock_t *lb;
  CHECK_OK(rlock_lock_new(b, "options:cid", 11, &lb));
  int held = 0;
  CHECK_OK(rlock_lock_is_held(lb, 7, &held));
  CHECK_EQ(held, 1);
  CHECK_RC(rlock_lock_release(lb, 8), RLOCK_ENOTHELD); /* another owner of that id */
  CHECK_OK(rlock_lock_release(lb, 7));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "options:cid", NULL), 0);
  rlock_lock_free(lb);
  rlock_client_free(b);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 110);
  srv = th_server_start(NULL);
  RUN(bad_options);
  RUN(limits_accepted);
  RUN(last_error_per_thread);
  RUN(retry_zero_unlock_timeout);
  RUN(retry_zero_acquire_timeout);
  RUN(retry_zero_connection_lost);
  RUN(client_id_acts_as_owner);
  RUN(huge_durations_refused); /* last: fails until the library bounds durations */
  th_server_stop(srv);
  return th_done();
}
