/* test_family_review.c -- break-it cases for the semaphore, the count-down
 * latch and the permit-expirable semaphore (lib/semaphore.c, kinds/pes.c)
 * against a real redis-server:
 *   sem_and_pes_share_channel  a semaphore and a permit-expirable semaphore
 *                    of one NAME share the key and redisson_sc:{NAME} (as
 *                    Redisson's do): a semaphore waiter for 2 woken by a
 *                    release of 1 passes the wake-up to a permit waiter
 *                    parked behind it, which takes the permit (before: an
 *                    assertion failure, the process aborted)
 *   acl_no_channel_writes_nothing  a Redis 7 ACL user without channel
 *                    permission: release, add, try-set, the latch's try-set
 *                    and count-down, the permit release are refused with
 *                    RLOCK_ENOPERM before anything is written (before: the
 *                    write stood and the PUBLISH failed: a release reported
 *                    failed had given its permit back, so a retry counted
 *                    it twice; the last count-down deleted the count, the
 *                    latch open and its waiters never told); a permit
 *                    acquire that reclaims an expired permit, and the
 *                    undo scripts, write without the message they may not
 *                    send, and succeed
 *   pes_not_an_integer  a permit-expirable semaphore whose NAME holds a
 *                    string that is not an integer: acquire, available,
 *                    total answer an error at once, nothing written (before:
 *                    the acquire found "no permit" and waited, for ever
 *                    without a bound; Redisson's script fails there)
 *   cluster_braced_names  on a Cluster: a semaphore and a permit semaphore
 *                    whose names have braces work; a latch whose name has
 *                    braces is refused at rlock_latch_new with RLOCK_EINVAL
 *                    (its channel, braces always, is in another slot; before:
 *                    every write failed with Redis's CROSSSLOT error)
 *   script_flush_family  SCRIPT FLUSH between calls: every semaphore, latch
 *                    and permit call loads its script again (NOSCRIPT) and
 *                    counts once (no defect found: a regression guard)
 *   free_during_waits  rlock_client_free while a semaphore acquire, a latch
 *                    await and a permit acquire wait: each ends with
 *                    RLOCK_ECLOSED, nothing taken (no defect found) */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "harness_cluster.h"

static th_server_t *srv;

typedef struct done {
  atomic_int n;
  atomic_int status;
} done_t;

static void on_sem(rlock_semaphore_t *s, int status, int64_t value, void *arg) {
  (void)s, (void)value;
  done_t *d = arg;
  atomic_store(&d->status, status);
  atomic_fetch_add(&d->n, 1);
}

static void on_pes(rlock_permits_t *s, int status, int64_t value, void *arg) {
  (void)s, (void)value;
  done_t *d = arg;
  atomic_store(&d->status, status);
  atomic_fetch_add(&d->n, 1);
}

static int done_one(void *arg) { return atomic_load(&((done_t *)arg)->n) >= 1; }

typedef struct stat_want {
  rlock_client_t *c;
  uint64_t n;
} stat_want_t;
static int attempts_reach(void *arg) {
  stat_want_t *w = arg;
  rlock_stats_t st;
  rlock_client_stats(w->c, &st);
  return st.acquire_attempts >= w->n;
}

static const char *numsub_chan;
static int numsub_one(void *arg) {
  (void)arg;
  return th_numsub(srv, numsub_chan) == 1;
}

TEST(sem_and_pes_share_channel) {
  const char *name = "rev:shared";
  rlock_client_t *a = th_client(srv->url, 0), *b = th_client(srv->url, 0);
  rlock_semaphore_t *sa = NULL, *sb = NULL;
  rlock_permits_t *pa = NULL;
  CHECK_OK(rlock_semaphore_new(a, name, strlen(name), &sa));
  CHECK_OK(rlock_semaphore_new(b, name, strlen(name), &sb));
  CHECK_OK(rlock_permits_new(a, name, strlen(name), &pa));
  CHECK_OK(rlock_semaphore_try_set_permits(sb, 0, NULL));
  done_t big = {0}, one = {0};
  rlock_stats_t st;
  rlock_client_stats(a, &st);
  CHECK_OK(rlock_semaphore_acquire_async(sa, 2, 30000, NULL, on_sem, &big));
  numsub_chan = "redisson_sc:{rev:shared}";
  CHECK_MSG(th_wait_until(numsub_one, NULL, 5000), "the semaphore waiter did not subscribe");
  stat_want_t parked = {a, st.acquire_attempts + 2}; /* its first try, its try once subscribed */
  CHECK_MSG(th_wait_until(attempts_reach, &parked, 5000), "the semaphore waiter did not try twice");
  char id[RLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(rlock_permits_acquire_async(pa, 30000, RLOCK_LEASE_WATCHDOG, NULL, id, on_pes, &one));
  parked.n += 2; /* on the channel already: it tries twice too, then parks */
  CHECK_MSG(th_wait_until(attempts_reach, &parked, 5000), "the permit waiter did not try twice");
  /* both parked (every try answered): else the permit waiter's try may run
   * after the release and take the permit with no pass at all */
  th_settled(a);
  CHECK_OK(rlock_semaphore_release(sb, 1, NULL)); /* message 1: wakes the first, the waiter for 2 */
  CHECK_MSG(th_wait_until(done_one, &one, 5000), "the permit waiter was not woken (1 available)");
  CHECK_OK(atomic_load(&one.status));
  CHECK_EQ(atomic_load(&big.n), 0);
  CHECK_OK(rlock_permits_release(pa, id));
  CHECK_OK(rlock_semaphore_release(sb, 1, NULL));
  CHECK_MSG(th_wait_until(done_one, &big, 5000), "the waiter for 2 was not woken");
  CHECK_OK(atomic_load(&big.status));
  rlock_permits_free(pa);
  rlock_semaphore_free(sa);
  rlock_semaphore_free(sb);
  rlock_client_free(a);
  rlock_client_free(b);
}

static char app_url[300];

static char *get(const char *key) { return th_cmd_str(srv, "GET", key, NULL); }

static void want_str(const char *key, const char *want) {
  char *v = get(key);
  CHECK_MSG(v && !strcmp(v, want), "%s is %s, want %s", key, v ? v : "(nil)", want);
  free(v);
}

static void want_noperm(int rc, const char *what) {
  CHECK_MSG(rc == RLOCK_ENOPERM, "%s: %s (%s)", what, rlock_err_name(rc), rlock_last_error());
}

/* A script of lua/ run by the ACL user app on a raw connection. */
static redisReply *app_eval(const char *script, int nk, const char **keys, int na, const char **args) {
  char path[512];
  snprintf(path, sizeof path, "%s/lua/%s.lua", RLOCK_SOURCE_DIR, script);
  FILE *f = fopen(path, "rb");
  CHECK_MSG(f, "cannot open %s", path);
  static char body[65536];
  size_t n = fread(body, 1, sizeof body - 1, f);
  fclose(f);
  body[n] = 0;
  redisContext *rc = th_raw_connect(srv);
  redisReply *r = redisCommand(rc, "AUTH app pw");
  CHECK(r && r->type == REDIS_REPLY_STATUS);
  freeReplyObject(r);
  const char *argv[16];
  size_t lens[16];
  int argc = 0;
  char nkbuf[8];
  snprintf(nkbuf, sizeof nkbuf, "%d", nk);
  argv[argc++] = "EVAL", argv[argc++] = body, argv[argc++] = nkbuf;
  for (int i = 0; i < nk; i++) argv[argc++] = keys[i];
  for (int i = 0; i < na; i++) argv[argc++] = args[i];
  for (int i = 0; i < argc; i++) lens[i] = strlen(argv[i]);
  r = redisCommandArgv(rc, argc, argv, lens);
  redisFree(rc);
  CHECK(r);
  return r;
}

TEST(acl_no_channel_writes_nothing) {
  rlock_client_t *app = th_client(app_url, 0);
  /* the latch: its last count-down */
  th_reply_free(th_cmd(srv, "SET", "rev:acl:latch", "1", NULL));
  rlock_latch_t *l = NULL;
  CHECK_OK(rlock_latch_new(app, "rev:acl:latch", 13, &l));
  int64_t left = -1;
  want_noperm(rlock_latch_count_down(l, &left), "latch count down");
  want_str("rev:acl:latch", "1");
  rlock_latch_t *l2 = NULL;
  CHECK_OK(rlock_latch_new(app, "rev:acl:latch2", 14, &l2));
  want_noperm(rlock_latch_try_set_count(l2, 2, NULL), "latch try-set");
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "rev:acl:latch2", NULL), 0);
  /* the semaphore */
  th_reply_free(th_cmd(srv, "SET", "rev:acl:sem", "0", NULL));
  rlock_semaphore_t *s = NULL, *s2 = NULL;
  CHECK_OK(rlock_semaphore_new(app, "rev:acl:sem", 11, &s));
  want_noperm(rlock_semaphore_release(s, 1, NULL), "semaphore release");
  want_str("rev:acl:sem", "0");
  want_noperm(rlock_semaphore_add_permits(s, 3, NULL), "semaphore add");
  want_str("rev:acl:sem", "0");
  CHECK_OK(rlock_semaphore_new(app, "rev:acl:sem2", 12, &s2));
  want_noperm(rlock_semaphore_try_set_permits(s2, 3, NULL), "semaphore try-set");
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "rev:acl:sem2", NULL), 0);
  /* the permit-expirable semaphore: a permit held by app, its release refused */
  th_reply_free(th_cmd(srv, "SET", "rev:acl:pes", "1", NULL));
  rlock_permits_t *p = NULL;
  CHECK_OK(rlock_permits_new(app, "rev:acl:pes", 11, &p));
  char id[RLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(rlock_permits_try_acquire(p, 60000, id));
  want_noperm(rlock_permits_release(p, id), "permit release");
  CHECK_EQ(th_cmd_int(srv, "ZCARD", "{rev:acl:pes}:timeout", NULL), 1);
  want_str("rev:acl:pes", "0");
  want_noperm(rlock_permits_add(p, 1, NULL), "permit add");
  want_str("rev:acl:pes", "0");
  /* its lease ends (score 1): app's next acquire reclaims it and takes it */
  redisReply *z = th_cmd(srv, "ZRANGE", "{rev:acl:pes}:timeout", "0", "0", NULL);
  CHECK(z && z->type == REDIS_REPLY_ARRAY && z->elements == 1);
  const char *za[] = {"ZADD", "{rev:acl:pes}:timeout", "1", z->element[0]->str};
  size_t zl[] = {4, 21, 1, z->element[0]->len};
  th_reply_free(th_cmdv(srv, 4, za, zl));
  th_reply_free(z);
  char id2[RLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(rlock_permits_try_acquire(p, 60000, id2));
  CHECK_EQ(th_cmd_int(srv, "ZCARD", "{rev:acl:pes}:timeout", NULL), 1);
  want_str("rev:acl:pes", "0");
  /* the semaphore's undo: the permits back without the message */
  th_reply_free(th_cmd(srv, "SET", "rev:acl:undo", "0", NULL));
  th_reply_free(th_cmd(srv, "SET", "rlock_semaphore_latch:{rev:acl:undo}:x", "1", NULL));
  const char *uk[] = {"rev:acl:undo", "redisson_sc:{rev:acl:undo}", "rlock_semaphore_latch:{rev:acl:undo}:x",
                      "rlock_semaphore_queue:{rev:acl:undo}", "rlock_semaphore_timeout:{rev:acl:undo}"};
  const char *ua[] = {"2", "publish", "10000", "", "0"};
  redisReply *r = app_eval("semaphore_acquire_undo", 5, uk, 5, ua);
  CHECK_MSG(r->type == REDIS_REPLY_INTEGER && r->integer == 1, "semaphore undo: type %d %s", r->type,
            r->type == REDIS_REPLY_ERROR ? r->str : "");
  freeReplyObject(r);
  want_str("rev:acl:undo", "2");
  rlock_permits_free(p);
  rlock_semaphore_free(s);
  rlock_semaphore_free(s2);
  rlock_latch_free(l);
  rlock_latch_free(l2);
  rlock_client_free(app);
}

TEST(pes_not_an_integer) {
  rlock_client_t *c = th_client(srv->url, 0);
  th_reply_free(th_cmd(srv, "SET", "rev:pes:bad", "abc", NULL));
  rlock_permits_t *p = NULL;
  CHECK_OK(rlock_permits_new(c, "rev:pes:bad", 11, &p));
  char id[RLOCK_PERMIT_ID_LEN + 1];
  int rc = rlock_permits_acquire(p, 0, 60000, NULL, id);
  CHECK_MSG(rc == RLOCK_ESERVER && strstr(rlock_last_error(), "integer"), "acquire: %s (%s)", rlock_err_name(rc),
            rlock_last_error());
  int64_t v = 0;
  rc = rlock_permits_available(p, &v);
  CHECK_MSG(rc == RLOCK_ESERVER, "available: %s (%s) %lld", rlock_err_name(rc), rlock_last_error(), (long long)v);
  rc = rlock_permits_total(p, &v);
  CHECK_MSG(rc == RLOCK_ESERVER, "total: %s (%s) %lld", rlock_err_name(rc), rlock_last_error(), (long long)v);
  want_str("rev:pes:bad", "abc");
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "{rev:pes:bad}:timeout", NULL), 0);
  rlock_permits_free(p);
  rlock_client_free(c);
}

/* Names with braces on a Cluster: every key and channel a script gets must
 * be in NAME's slot. */
TEST(cluster_braced_names) {
  th_cluster_t *cl = th_cluster_start(3, 0, 2000);
  rlock_client_t *c = th_client(cl->url, 0);
  const char *ln = "rev{l}x";
  rlock_latch_t *l = NULL;
  /* the latch's channel has braces always (Redisson's): refused, clearly */
  CHECK_RC(rlock_latch_new(c, ln, strlen(ln), &l), RLOCK_EINVAL);
  CHECK(l == NULL);
  CHECK_MSG(strstr(rlock_last_error(), "braces"), "message: %s", rlock_last_error());
  ln = "rev:lx"; /* without braces: in NAME's slot */
  CHECK_OK(rlock_latch_new(c, ln, strlen(ln), &l));
  CHECK_OK(rlock_latch_try_set_count(l, 2, NULL));
  int64_t left = -1;
  CHECK_OK(rlock_latch_count_down(l, &left));
  CHECK_EQ(left, 1);
  CHECK_OK(rlock_latch_count_down(l, &left));
  CHECK_EQ(left, 0);
  CHECK_OK(rlock_latch_await(l, 0, NULL));
  rlock_latch_free(l);
  const char *sn = "rev{s}x";
  rlock_semaphore_t *s = NULL;
  CHECK_OK(rlock_semaphore_new(c, sn, strlen(sn), &s));
  CHECK_OK(rlock_semaphore_try_set_permits(s, 1, NULL));
  CHECK_OK(rlock_semaphore_acquire(s, 1, 0, NULL));
  CHECK_OK(rlock_semaphore_release(s, 1, NULL));
  rlock_semaphore_free(s);
  const char *pn = "rev{p}x";
  rlock_permits_t *p = NULL;
  CHECK_OK(rlock_permits_new(c, pn, strlen(pn), &p));
  int set = 0;
  CHECK_OK(rlock_permits_try_set(p, 1, &set));
  CHECK_EQ(set, 1);
  char id[RLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(rlock_permits_acquire(p, 0, RLOCK_LEASE_WATCHDOG, NULL, id));
  CHECK_OK(rlock_permits_release(p, id));
  rlock_permits_free(p);
  rlock_client_free(c);
  th_cluster_stop(cl);
}

TEST(script_flush_family) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_semaphore_t *s = NULL;
  rlock_latch_t *l = NULL;
  rlock_permits_t *p = NULL;
  CHECK_OK(rlock_semaphore_new(c, "rev:fl:s", 8, &s));
  CHECK_OK(rlock_latch_new(c, "rev:fl:l", 8, &l));
  CHECK_OK(rlock_permits_new(c, "rev:fl:p", 8, &p));
  for (int round = 0; round < 2; round++) { /* the first loads, the second meets NOSCRIPT */
    th_reply_free(th_cmd(srv, "SCRIPT", "FLUSH", NULL));
    int64_t v = -1;
    CHECK_OK(rlock_semaphore_release(s, 2, &v));
    CHECK_EQ(v, 2);
    th_reply_free(th_cmd(srv, "SCRIPT", "FLUSH", NULL));
    CHECK_OK(rlock_semaphore_acquire(s, 2, 0, NULL));
    want_str("rev:fl:s", "0");
    th_reply_free(th_cmd(srv, "SCRIPT", "FLUSH", NULL));
    CHECK_OK(rlock_latch_try_set_count(l, 2, NULL));
    th_reply_free(th_cmd(srv, "SCRIPT", "FLUSH", NULL));
    CHECK_OK(rlock_latch_count_down(l, &v));
    CHECK_EQ(v, 1);
    th_reply_free(th_cmd(srv, "SCRIPT", "FLUSH", NULL));
    CHECK_OK(rlock_latch_count_down(l, &v));
    CHECK_EQ(v, 0);
    int set = 0;
    th_reply_free(th_cmd(srv, "SCRIPT", "FLUSH", NULL));
    if (round == 0) CHECK_OK(rlock_permits_try_set(p, 1, &set));
    char id[RLOCK_PERMIT_ID_LEN + 1];
    th_reply_free(th_cmd(srv, "SCRIPT", "FLUSH", NULL));
    CHECK_OK(rlock_permits_acquire(p, 0, 60000, NULL, id));
    want_str("rev:fl:p", "0");
    th_reply_free(th_cmd(srv, "SCRIPT", "FLUSH", NULL));
    CHECK_OK(rlock_permits_release(p, id));
    want_str("rev:fl:p", "1");
  }
  rlock_permits_free(p);
  rlock_latch_free(l);
  rlock_semaphore_free(s);
  rlock_client_free(c);
}

static void on_latch(rlock_latch_t *l, int status, int64_t value, void *arg) {
  (void)l, (void)value;
  done_t *d = arg;
  atomic_store(&d->status, status);
  atomic_fetch_add(&d->n, 1);
}

TEST(free_during_waits) {
  rlock_client_t *c = th_client(srv->url, 0);
  th_reply_free(th_cmd(srv, "SET", "rev:fw:s", "0", NULL));
  th_reply_free(th_cmd(srv, "SET", "rev:fw:l", "1", NULL));
  th_reply_free(th_cmd(srv, "SET", "rev:fw:p", "0", NULL));
  rlock_semaphore_t *s = NULL;
  rlock_latch_t *l = NULL;
  rlock_permits_t *p = NULL;
  CHECK_OK(rlock_semaphore_new(c, "rev:fw:s", 8, &s));
  CHECK_OK(rlock_latch_new(c, "rev:fw:l", 8, &l));
  CHECK_OK(rlock_permits_new(c, "rev:fw:p", 8, &p));
  done_t ds = {0}, dl = {0}, dp = {0};
  char id[RLOCK_PERMIT_ID_LEN + 1];
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  CHECK_OK(rlock_semaphore_acquire_async(s, 1, RLOCK_WAIT_FOREVER, NULL, on_sem, &ds));
  CHECK_OK(rlock_latch_await_async(l, RLOCK_WAIT_FOREVER, NULL, on_latch, &dl));
  CHECK_OK(rlock_permits_acquire_async(p, RLOCK_WAIT_FOREVER, RLOCK_LEASE_WATCHDOG, NULL, id, on_pes, &dp));
  numsub_chan = "redisson_countdownlatch__channel__{rev:fw:l}";
  CHECK_MSG(th_wait_until(numsub_one, NULL, 5000), "the latch awaiter did not subscribe");
  numsub_chan = "redisson_sc:{rev:fw:s}";
  CHECK_MSG(th_wait_until(numsub_one, NULL, 5000), "the semaphore waiter did not subscribe");
  numsub_chan = "redisson_sc:{rev:fw:p}";
  CHECK_MSG(th_wait_until(numsub_one, NULL, 5000), "the permit waiter did not subscribe");
  stat_want_t tries = {c, st.acquire_attempts + 4}; /* each acquire: a try, a try once subscribed */
  CHECK_MSG(th_wait_until(attempts_reach, &tries, 5000), "the waiters did not park");
  rlock_client_free(c);
  CHECK_EQ(atomic_load(&ds.n), 1);
  CHECK_EQ(atomic_load(&dl.n), 1);
  CHECK_EQ(atomic_load(&dp.n), 1);
  CHECK_RC(atomic_load(&ds.status), RLOCK_ECLOSED);
  CHECK_RC(atomic_load(&dl.status), RLOCK_ECLOSED);
  CHECK_RC(atomic_load(&dp.status), RLOCK_ECLOSED);
  want_str("rev:fw:s", "0");
  want_str("rev:fw:l", "1");
  want_str("rev:fw:p", "0");
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "{rev:fw:p}:timeout", NULL), 0);
  rlock_permits_free(p);
  rlock_latch_free(l);
  rlock_semaphore_free(s);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 240);
  const char *extra[] = {"--user", "app", "on", ">pw", "~*", "resetchannels", "+@all", NULL};
  th_server_opts_t so = {.extra_args = extra};
  srv = th_server_start(&so);
  snprintf(app_url, sizeof app_url, "redis://app:pw@127.0.0.1:%d", srv->port);
  RUN(sem_and_pes_share_channel);
  RUN(acl_no_channel_writes_nothing);
  RUN(pes_not_an_integer);
  RUN(script_flush_family);
  RUN(free_during_waits);
  RUN(cluster_braced_names);
  th_server_stop(srv);
  return th_done();
}
