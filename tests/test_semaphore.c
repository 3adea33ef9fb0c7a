/* test_semaphore.c -- the semaphore (rlock_semaphore_*, lib/semaphore.c,
 * Redisson's RSemaphore) against a real redis-server:
 *   layout           NAME is a string counter; try-set (1, then 0), acquire,
 *                    release, add (negative too, drops the TTL), drain (drops
 *                    the TTL), available; every release, add and set publishes
 *                    the new count on redisson_sc:{NAME} (Redisson's values)
 *   zero_and_missing Redisson's testAcquireWithoutSetPermits and
 *                    testReleaseWithoutPermits: a missing key is 0 permits,
 *                    release makes it
 *   bad_input        permits 0, negative, too large; a bad wait; a NULL or
 *                    wrong handle: RLOCK_EINVAL, nothing sent
 *   wait_timeout     too few permits within wait_ms: RLOCK_EBUSY, nothing taken
 *   wake_on_release  a waiter parked on the channel takes the permit when
 *                    another client releases it (the message), without polling
 *   release_n_wakes_n three waiters, release(2): two take a permit, the third
 *                    waits on for the next release
 *   multi_permits    acquire(4) with 2 available completes after two single
 *                    releases (Redisson's testBlockingNAcquire)
 *   cancel           a waiter's cancel token ends it with RLOCK_ECANCELED
 *   contention       4 threads x 40 rounds on 2 permits: never more than 2
 *                    inside, all permits back at the end
 *   release_resent_counts_once / acquire_resent_counts_once /
 *   acquire_gives_up_and_undoes
 *                    CLIENT PAUSE WRITE longer than the command timeout: the
 *                    client re-sends with the same request id; when the
 *                    server runs every copy, a release adds its permits once,
 *                    an acquire takes them once, and an acquire that gave up
 *                    takes none (undone)
 *   (the order of waiters: test_semaphore_queue.c)
 *   cancel_in_flight_gives_back  a cancel while the try is held back on the
 *                    server: RLOCK_ECANCELED, and the permit the try took is
 *                    given back */
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "harness.h"

static th_server_t *srv;

static rlock_semaphore_t *sem(rlock_client_t *c, const char *name) {
  rlock_semaphore_t *s = NULL;
  CHECK_OK(rlock_semaphore_new(c, name, strlen(name), &s));
  return s;
}

/* A raw subscriber of one channel: the next message's payload (malloc'd). */
static redisContext *sub_open(const char *chan) {
  redisContext *rc = th_raw_connect(srv);
  struct timeval tv = {5, 0};
  redisSetTimeout(rc, tv);
  redisReply *r = redisCommand(rc, "SUBSCRIBE %s", chan);
  CHECK(r && r->type == REDIS_REPLY_ARRAY);
  freeReplyObject(r);
  return rc;
}

static char *sub_next(redisContext *rc) {
  redisReply *r = NULL;
  CHECK_MSG(redisGetReply(rc, (void **)&r) == REDIS_OK && r, "no message within 5 s");
  CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 3);
  char *s = strdup(r->element[2]->str);
  freeReplyObject(r);
  return s;
}

static void want_msg(redisContext *rc, const char *want) {
  char *m = sub_next(rc);
  CHECK_STREQ(m, want);
  free(m);
}

static int no_keys(void *pattern) {
  redisReply *k = th_cmd(srv, "KEYS", (const char *)pattern, NULL);
  int none = k->elements == 0;
  th_reply_free(k);
  return none;
}

TEST(layout) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_semaphore_t *s = sem(c, "sem:layout");
  redisContext *sub = sub_open("redisson_sc:{sem:layout}");
  int set = -1;
  int64_t v = -1;
  CHECK_OK(rlock_semaphore_try_set_permits(s, 3, &set));
  CHECK_EQ(set, 1);
  want_msg(sub, "3");
  CHECK_OK(rlock_semaphore_try_set_permits(s, 7, &set));
  CHECK_EQ(set, 0);
  char *type = th_cmd_str(srv, "TYPE", "sem:layout", NULL);
  (void)type;
  free(type);
  CHECK_EQ(th_get_num(srv, "sem:layout"), 3);
  CHECK_OK(rlock_semaphore_try_acquire(s, 2));
  CHECK_EQ(th_get_num(srv, "sem:layout"), 1);
  CHECK_RC(rlock_semaphore_try_acquire(s, 2), RLOCK_EBUSY);
  CHECK_EQ(th_get_num(srv, "sem:layout"), 1);
  CHECK_OK(rlock_semaphore_available(s, &v));
  CHECK_EQ(v, 1);
  CHECK_OK(rlock_semaphore_release(s, 2, &v));
  CHECK_EQ(v, 3);
  want_msg(sub, "3");
  /* Redisson's testReducePermits: add(-5) on 0 gives -5; release(10) gives 5 */
  CHECK_OK(rlock_semaphore_drain(s, &v));
  CHECK_EQ(v, 3);
  CHECK_EQ(th_get_num(srv, "sem:layout"), 0);
  th_reply_free(th_cmd(srv, "PEXPIRE", "sem:layout", "100000", NULL));
  CHECK_OK(rlock_semaphore_add_permits(s, -5, &v));
  CHECK_EQ(v, -5);
  want_msg(sub, "-5");
  CHECK_EQ(th_cmd_int(srv, "PTTL", "sem:layout", NULL), -1); /* add drops the TTL (Redisson's SET) */
  CHECK_OK(rlock_semaphore_release(s, 10, &v));
  CHECK_EQ(v, 5);
  want_msg(sub, "5");
  th_reply_free(th_cmd(srv, "PEXPIRE", "sem:layout", "100000", NULL));
  CHECK_OK(rlock_semaphore_drain(s, &v));
  CHECK_EQ(v, 5);
  CHECK_EQ(th_cmd_int(srv, "PTTL", "sem:layout", NULL), -1); /* drain drops it too */
  CHECK_OK(rlock_semaphore_drain(s, &v));
  CHECK_EQ(v, 0);
  /* no request latch is left behind (their DELs are batched) */
  CHECK_MSG(th_wait_until(no_keys, "rlock_semaphore_latch:*", 5000), "request latches left behind");
  redisFree(sub);
  rlock_semaphore_free(s);
  rlock_client_free(c);
}

TEST(zero_and_missing) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_semaphore_t *s = sem(c, "sem:missing");
  int64_t v = -1;
  CHECK_OK(rlock_semaphore_available(s, &v));
  CHECK_EQ(v, 0);
  CHECK_RC(rlock_semaphore_try_acquire(s, 1), RLOCK_EBUSY);
  CHECK_OK(rlock_semaphore_drain(s, &v));
  CHECK_EQ(v, 0);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "sem:missing", NULL), 0);
  CHECK_OK(rlock_semaphore_release(s, 1, &v));
  CHECK_EQ(v, 1);
  CHECK_OK(rlock_semaphore_release(s, 1, NULL));
  CHECK_OK(rlock_semaphore_acquire(s, 2, RLOCK_WAIT_FOREVER, NULL));
  CHECK_EQ(th_get_num(srv, "sem:missing"), 0);
  rlock_semaphore_free(s);
  rlock_client_free(c);
}

TEST(bad_input) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_semaphore_t *s = sem(c, "sem:bad");
  int64_t v;
  int set;
  long long before = th_scripts_run(srv);
  CHECK_RC(rlock_semaphore_acquire(s, 0, 0, NULL), RLOCK_EINVAL);
  CHECK_RC(rlock_semaphore_acquire(s, -1, 0, NULL), RLOCK_EINVAL);
  CHECK_RC(rlock_semaphore_acquire(s, RLOCK_PERMITS_MAX + 1, 0, NULL), RLOCK_EINVAL);
  CHECK_RC(rlock_semaphore_acquire(s, 1, -5, NULL), RLOCK_EINVAL);
  CHECK_RC(rlock_semaphore_try_acquire(s, 0), RLOCK_EINVAL);
  CHECK_RC(rlock_semaphore_release(s, 0, &v), RLOCK_EINVAL);
  CHECK_RC(rlock_semaphore_release(s, -3, &v), RLOCK_EINVAL);
  CHECK_RC(rlock_semaphore_try_set_permits(s, -1, &set), RLOCK_EINVAL);
  CHECK_RC(rlock_semaphore_add_permits(s, RLOCK_PERMITS_MAX + 1, &v), RLOCK_EINVAL);
  CHECK_RC(rlock_semaphore_available(s, NULL), RLOCK_EINVAL);
  CHECK_RC(rlock_semaphore_acquire(NULL, 1, 0, NULL), RLOCK_EINVAL);
  rlock_semaphore_t *none = s;
  CHECK_RC(rlock_semaphore_new(c, "", 0, &none), RLOCK_EINVAL);
  CHECK(none == NULL);
  /* a latch handle is not a semaphore */
  rlock_latch_t *l = NULL;
  CHECK_OK(rlock_latch_new(c, "sem:bad", 7, &l));
  CHECK_RC(rlock_semaphore_release((rlock_semaphore_t *)l, 1, NULL), RLOCK_EINVAL);
  CHECK(strstr(rlock_last_error(), "not a semaphore") != NULL);
  CHECK_EQ(th_scripts_run(srv), before); /* nothing was sent */
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "sem:bad", NULL), 0);
  /* a key that is not a counter: the server's refusal, nothing changed */
  th_reply_free(th_cmd(srv, "SET", "sem:bad", "abc", NULL));
  CHECK_RC(rlock_semaphore_try_acquire(s, 1), RLOCK_ESERVER);
  char *kept = th_cmd_str(srv, "GET", "sem:bad", NULL);
  CHECK_STREQ(kept, "abc");
  free(kept);
  rlock_latch_free(l);
  rlock_semaphore_free(s);
  rlock_client_free(c);
}

TEST(wait_timeout) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_semaphore_t *s = sem(c, "sem:timeout");
  CHECK_OK(rlock_semaphore_try_set_permits(s, 1, NULL));
  CHECK_RC(rlock_semaphore_acquire(s, 2, 200, NULL), RLOCK_EBUSY);
  CHECK_EQ(th_get_num(srv, "sem:timeout"), 1);
  rlock_semaphore_free(s);
  rlock_client_free(c);
}

typedef struct done {
  atomic_int n;
  atomic_int status[8];
} done_t;

static void on_done(rlock_semaphore_t *s, int status, int64_t value, void *arg) {
  (void)s, (void)value;
  done_t *d = arg;
  int i = atomic_fetch_add(&d->n, 1);
  if (i < 8) atomic_store(&d->status[i], status);
}

static int done_reaches_1(void *arg) { return atomic_load(&((done_t *)arg)->n) >= 1; }
static int done_reaches_2(void *arg) { return atomic_load(&((done_t *)arg)->n) >= 2; }
static int done_reaches_3(void *arg) { return atomic_load(&((done_t *)arg)->n) >= 3; }

typedef struct numsub_want {
  const char *chan;
  long long n;
} numsub_want_t;
static int numsub_is(void *arg) {
  numsub_want_t *w = arg;
  return th_numsub(srv, w->chan) == w->n;
}

TEST(wake_on_release) {
  rlock_client_t *a = th_client(srv->url, 0), *b = th_client(srv->url, 0);
  rlock_semaphore_t *sa = sem(a, "sem:wake"), *sb = sem(b, "sem:wake");
  done_t d = {0};
  CHECK_OK(rlock_semaphore_acquire_async(sa, 1, RLOCK_WAIT_FOREVER, NULL, on_done, &d));
  numsub_want_t w = {"redisson_sc:{sem:wake}", 1};
  CHECK_MSG(th_wait_until(numsub_is, &w, 5000), "the waiter did not subscribe");
  rlock_stats_t s0, s1;
  rlock_client_stats(a, &s0);
  CHECK_EQ(atomic_load(&d.n), 0);
  CHECK_OK(rlock_semaphore_release(sb, 1, NULL));
  CHECK_MSG(th_wait_until(done_reaches_1, &d, 5000), "the release did not wake the waiter");
  CHECK_OK(atomic_load(&d.status[0]));
  CHECK(TH_STAT_REACHES(a, messages, s0.messages + 1, 10000)); /* woken by the message */
  rlock_client_stats(a, &s1);
  CHECK(s1.acquire_attempts - s0.acquire_attempts <= 2);
  CHECK_EQ(th_get_num(srv, "sem:wake"), 0);
  w.n = 0;
  CHECK_MSG(th_wait_until(numsub_is, &w, 5000), "the channel stayed subscribed");
  rlock_semaphore_free(sa);
  rlock_semaphore_free(sb);
  rlock_client_free(a);
  rlock_client_free(b);
}

TEST(release_n_wakes_n) {
  rlock_client_t *a = th_client(srv->url, 0), *b = th_client(srv->url, 0);
  rlock_semaphore_t *sa = sem(a, "sem:n"), *sb = sem(b, "sem:n");
  done_t d = {0};
  for (int i = 0; i < 3; i++) CHECK_OK(rlock_semaphore_acquire_async(sa, 1, RLOCK_WAIT_FOREVER, NULL, on_done, &d));
  numsub_want_t w = {"redisson_sc:{sem:n}", 1};
  CHECK_MSG(th_wait_until(numsub_is, &w, 5000), "the waiters did not subscribe");
  CHECK_OK(rlock_semaphore_release(sb, 2, NULL));
  CHECK_MSG(th_wait_until(done_reaches_2, &d, 5000), "release(2) did not wake two waiters");
  CHECK_OK(atomic_load(&d.status[0]));
  CHECK_OK(atomic_load(&d.status[1]));
  CHECK_EQ(th_get_num(srv, "sem:n"), 0);
  CHECK(atomic_load(&d.n) == 2); /* no permit left for the third */
  CHECK_OK(rlock_semaphore_release(sb, 1, NULL));
  CHECK_MSG(th_wait_until(done_reaches_3, &d, 5000), "the third waiter was not woken");
  CHECK_EQ(th_get_num(srv, "sem:n"), 0);
  rlock_semaphore_free(sa);
  rlock_semaphore_free(sb);
  rlock_client_free(a);
  rlock_client_free(b);
}

TEST(multi_permits) {
  rlock_client_t *a = th_client(srv->url, 0), *b = th_client(srv->url, 0);
  rlock_semaphore_t *sa = sem(a, "sem:multi"), *sb = sem(b, "sem:multi");
  CHECK_OK(rlock_semaphore_try_set_permits(sb, 2, NULL));
  done_t d = {0};
  CHECK_OK(rlock_semaphore_acquire_async(sa, 4, 30000, NULL, on_done, &d));
  numsub_want_t w = {"redisson_sc:{sem:multi}", 1};
  CHECK_MSG(th_wait_until(numsub_is, &w, 5000), "the waiter did not subscribe");
  CHECK_OK(rlock_semaphore_release(sb, 1, NULL));
  CHECK_OK(rlock_semaphore_release(sb, 1, NULL));
  CHECK_MSG(th_wait_until(done_reaches_1, &d, 10000), "acquire(4) did not complete");
  CHECK_OK(atomic_load(&d.status[0]));
  CHECK_EQ(th_get_num(srv, "sem:multi"), 0);
  rlock_semaphore_free(sa);
  rlock_semaphore_free(sb);
  rlock_client_free(a);
  rlock_client_free(b);
}

TEST(cancel) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_semaphore_t *s = sem(c, "sem:cancel");
  rlock_cancel_t *cn = NULL;
  CHECK_OK(rlock_cancel_new(&cn));
  done_t d = {0};
  CHECK_OK(rlock_semaphore_acquire_async(s, 1, RLOCK_WAIT_FOREVER, cn, on_done, &d));
  numsub_want_t w = {"redisson_sc:{sem:cancel}", 1};
  CHECK_MSG(th_wait_until(numsub_is, &w, 5000), "the waiter did not subscribe");
  rlock_cancel_trigger(cn);
  CHECK_MSG(th_wait_until(done_reaches_1, &d, 5000), "the cancel did not end the wait");
  CHECK_EQ(atomic_load(&d.status[0]), RLOCK_ECANCELED);
  rlock_cancel_free(cn);
  rlock_semaphore_free(s);
  rlock_client_free(c);
}

static atomic_int inside, most, rounds_done;
static rlock_client_t *shared_c;

static void *worker(void *arg) {
  (void)arg;
  rlock_semaphore_t *s = sem(shared_c, "sem:contend");
  for (int i = 0; i < 40; i++) {
    CHECK_OK(rlock_semaphore_acquire(s, 1, RLOCK_WAIT_FOREVER, NULL));
    int now = atomic_fetch_add(&inside, 1) + 1;
    int m = atomic_load(&most);
    while (now > m && !atomic_compare_exchange_weak(&most, &m, now)) {
    }
    atomic_fetch_sub(&inside, 1);
    CHECK_OK(rlock_semaphore_release(s, 1, NULL));
    atomic_fetch_add(&rounds_done, 1);
  }
  rlock_semaphore_free(s);
  return NULL;
}

TEST(contention) {
  rlock_client_t *c2 = th_client(srv->url, 0);
  shared_c = th_client(srv->url, 0);
  rlock_semaphore_t *s = sem(c2, "sem:contend");
  CHECK_OK(rlock_semaphore_try_set_permits(s, 2, NULL));
  pthread_t t[4];
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, worker, NULL);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  CHECK_EQ(atomic_load(&rounds_done), 160);
  CHECK(atomic_load(&most) <= 2);
  CHECK_EQ(th_get_num(srv, "sem:contend"), 2);
  rlock_semaphore_free(s);
  rlock_client_free(shared_c);
  rlock_client_free(c2);
}

/* ------------------------------------------------------------ re-sends */

static rlock_client_t *retry_client(int64_t timeout_ms, int attempts) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = srv->url;
  o.command_timeout_ms = timeout_ms;
  o.retry_attempts = attempts;
  o.reconnect_min_ms = 20;
  o.reconnect_max_ms = 200;
  o.dead_after_timeouts = 0; /* keep the connection: its copies must all run */
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  return c;
}

static void pause_scripts(const char *ms) {
  redisReply *r = th_cmd(srv, "CLIENT", "PAUSE", ms, "WRITE", NULL);
  CHECK_MSG(r->type == REDIS_REPLY_STATUS, "CLIENT PAUSE: %s", r->str);
  th_reply_free(r);
}

/* Returns once the pause is over: a raw script is held back like the client's. */
static void wait_pause_over(void) { th_reply_free(th_cmd(srv, "EVAL", "return 1", "0", NULL)); }

typedef struct mark {
  rlock_client_t *c;
  long long srv;
  uint64_t cli;
} mark_t;
static mark_t mark(rlock_client_t *c) {
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  mark_t m = {c, th_scripts_run(srv), st.scripts_sent};
  return m;
}
static int ran(void *arg) {
  const mark_t *m = arg;
  rlock_stats_t st;
  rlock_client_stats(m->c, &st);
  return th_scripts_run(srv) - m->srv >= (long long)(st.scripts_sent - m->cli);
}

TEST(release_resent_counts_once) {
  rlock_client_t *c = retry_client(400, 3);
  rlock_semaphore_t *s = sem(c, "sem:resend:rel");
  CHECK_OK(rlock_semaphore_release(s, 1, NULL)); /* the script is cached: EVALSHA from now on */
  mark_t m = mark(c);
  rlock_stats_t s0, s1;
  rlock_client_stats(c, &s0);
  pause_scripts("1000");
  int64_t v = -1;
  int rc = rlock_semaphore_release(s, 2, &v);
  rlock_client_stats(c, &s1);
  CHECK_MSG(s1.timeouts > s0.timeouts, "no request timed out: the pause did not bite");
  wait_pause_over();
  CHECK_MSG(th_wait_until(ran, &m, 10000), "the server did not run every copy");
  CHECK_MSG(s1.scripts_sent - s0.scripts_sent >= 2, "the release was not re-sent");
  CHECK_OK(rc);
  CHECK_EQ(v, 3);
  CHECK_EQ(th_get_num(srv, "sem:resend:rel"), 3); /* 1 + 2, once */
  rlock_semaphore_free(s);
  rlock_client_free(c);
}

TEST(acquire_resent_counts_once) {
  rlock_client_t *c = retry_client(400, 3);
  rlock_semaphore_t *s = sem(c, "sem:resend:acq");
  CHECK_OK(rlock_semaphore_try_set_permits(s, 6, NULL));
  CHECK_OK(rlock_semaphore_try_acquire(s, 1)); /* cached */
  mark_t m = mark(c);
  rlock_stats_t s0, s1;
  rlock_client_stats(c, &s0);
  pause_scripts("1000");
  int rc = rlock_semaphore_acquire(s, 2, 5000, NULL);
  rlock_client_stats(c, &s1);
  CHECK_MSG(s1.timeouts > s0.timeouts, "no request timed out: the pause did not bite");
  wait_pause_over();
  CHECK_MSG(th_wait_until(ran, &m, 10000), "the server did not run every copy");
  CHECK_MSG(s1.scripts_sent - s0.scripts_sent >= 2, "the acquire was not re-sent");
  CHECK_OK(rc);
  CHECK_EQ(th_get_num(srv, "sem:resend:acq"), 3); /* 6 - 1 - 2: taken once */
  rlock_semaphore_free(s);
  rlock_client_free(c);
}

/* A request latch matching pattern holds the undo's tombstone. */
static int undo_marked(void *pattern) {
  int ok = 0;
  redisReply *k = th_cmd(srv, "KEYS", (const char *)pattern, NULL);
  for (size_t j = 0; j < k->elements && !ok; j++) {
    char *val = th_cmd_str(srv, "GET", k->element[j]->str, NULL);
    ok = val && !strcmp(val, "u");
    free(val);
  }
  th_reply_free(k);
  return ok;
}

TEST(acquire_gives_up_and_undoes) {
  rlock_client_t *c = retry_client(200, 1);
  rlock_semaphore_t *s = sem(c, "sem:resend:undo");
  CHECK_OK(rlock_semaphore_try_set_permits(s, 5, NULL));
  CHECK_OK(rlock_semaphore_try_acquire(s, 1)); /* cached */
  CHECK_OK(rlock_semaphore_release(s, 1, NULL));
  pause_scripts("2000");
  int rc = rlock_semaphore_acquire(s, 2, 0, NULL);
  CHECK_RC(rc, RLOCK_ETIMEDOUT);
  wait_pause_over();
  /* the copies ran, then the undo gave their permits back (its tombstone
   * 'u' marks the id): 5 again */
  CHECK_MSG(th_wait_until(undo_marked, "rlock_semaphore_latch:{sem:resend:undo}:*", 10000), "no undo ran");
  CHECK_EQ(th_get_num(srv, "sem:resend:undo"), 5);
  rlock_semaphore_free(s);
  rlock_client_free(c);
}

static int available_is_2(void *arg) { return th_get_num(srv, (const char *)arg) == 2; }
static int blocked(void *name) { return th_client_blocked(srv, (const char *)name); }

/* A cancel that comes while the try is held back on the server (CLIENT PAUSE
 * WRITE): the try then takes its permit, its answer finds the op cancelled,
 * and the permit is given back (the undo). */
TEST(cancel_in_flight_gives_back) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = srv->url;
  o.client_name = "sem-cancel";
  o.fast_path = 0;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  rlock_semaphore_t *s = sem(c, "sem:cancelfl");
  CHECK_OK(rlock_semaphore_try_set_permits(s, 2, NULL));
  CHECK_OK(rlock_semaphore_try_acquire(s, 1)); /* cached */
  CHECK_OK(rlock_semaphore_release(s, 1, NULL));
  rlock_cancel_t *cn = NULL;
  CHECK_OK(rlock_cancel_new(&cn));
  done_t d = {0};
  pause_scripts("1000");
  CHECK_OK(rlock_semaphore_acquire_async(s, 1, RLOCK_WAIT_FOREVER, cn, on_done, &d));
  CHECK_MSG(th_wait_until(blocked, "sem-cancel", 5000), "the try was not held back by the pause");
  rlock_cancel_trigger(cn);
  CHECK_MSG(th_wait_until(done_reaches_1, &d, 5000), "the cancelled acquire did not end");
  CHECK_EQ(atomic_load(&d.status[0]), RLOCK_ECANCELED);
  wait_pause_over();
  CHECK_MSG(th_wait_until(available_is_2, "sem:cancelfl", 5000), "the permit was not given back: %lld available",
            th_get_num(srv, "sem:cancelfl"));
  rlock_cancel_free(cn);
  rlock_semaphore_free(s);
  rlock_client_free(c);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 240);
  srv = th_server_start(NULL);
  RUN(layout);
  RUN(zero_and_missing);
  RUN(bad_input);
  RUN(wait_timeout);
  RUN(wake_on_release);
  RUN(release_n_wakes_n);
  RUN(multi_permits);
  RUN(cancel);
  RUN(contention);
  RUN(release_resent_counts_once);
  RUN(acquire_resent_counts_once);
  RUN(acquire_gives_up_and_undoes);
  RUN(cancel_in_flight_gives_back);
  th_server_stop(srv);
  return th_done();
}
