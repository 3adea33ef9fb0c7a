/* test_latch.c -- the count-down latch (rlock_latch_*, lib/semaphore.c,
 * Redisson's RCountDownLatch) against a real redis-server:
 *   layout            NAME is a string count without TTL; try-set (1, then 0)
 *                     publishes 1, the count-down to zero deletes the key and
 *                     publishes 0, on redisson_countdownlatch__channel__{NAME}
 *   braces_always     a braced NAME still gets braces around it in the channel
 *   count_and_extra   Redisson's testCountDown / testCount: a missing latch
 *                     counts 0, extra count-downs keep it at 0 and publish nothing
 *   await_open        await on a missing or open latch returns at once
 *   await_wakes_all   five async awaiters (Redisson's testMultiAwait) are all
 *                     woken by the message at zero, none before
 *   await_timeout     a latch not at zero within wait_ms: RLOCK_EBUSY
 *   bad_input         count 0 or negative, a bad wait, a semaphore handle:
 *                     RLOCK_EINVAL, nothing sent
 *   count_down_resent_counts_once
 *                     CLIENT PAUSE WRITE longer than the command timeout: the
 *                     count-down is re-sent with one request id and counts once
 *   await_rides_out_lost_answers
 *                     CLIENT PAUSE ALL longer than (1 + retry_attempts) command
 *                     timeouts while an await's GET is out: the GET is sent
 *                     again until the wait bound, and the count-down after the
 *                     pause opens the await (it used to end RLOCK_ETIMEDOUT) */
#include <hiredis/hiredis.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "harness.h"

static th_server_t *srv;

static rlock_latch_t *latch(rlock_client_t *c, const char *name) {
  rlock_latch_t *l = NULL;
  CHECK_OK(rlock_latch_new(c, name, strlen(name), &l));
  return l;
}

static redisContext *sub_open(const char *chan) {
  redisContext *rc = th_raw_connect(srv);
  struct timeval tv = {5, 0};
  redisSetTimeout(rc, tv);
  redisReply *r = redisCommand(rc, "SUBSCRIBE %s", chan);
  CHECK(r && r->type == REDIS_REPLY_ARRAY);
  freeReplyObject(r);
  return rc;
}

static void want_msg(redisContext *rc, const char *want) {
  redisReply *r = NULL;
  CHECK_MSG(redisGetReply(rc, (void **)&r) == REDIS_OK && r, "no message within 5 s");
  CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 3);
  CHECK_STREQ(r->element[2]->str, want);
  freeReplyObject(r);
}

TEST(layout) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_latch_t *l = latch(c, "latch:layout");
  redisContext *sub = sub_open("redisson_countdownlatch__channel__{latch:layout}");
  int set = -1;
  int64_t v = -1;
  CHECK_OK(rlock_latch_try_set_count(l, 2, &set));
  CHECK_EQ(set, 1);
  want_msg(sub, "1");
  CHECK_OK(rlock_latch_try_set_count(l, 5, &set));
  CHECK_EQ(set, 0);
  CHECK_EQ(th_get_num(srv, "latch:layout"), 2);
  CHECK_EQ(th_cmd_int(srv, "PTTL", "latch:layout", NULL), -1);
  CHECK_OK(rlock_latch_count_down(l, &v));
  CHECK_EQ(v, 1);
  CHECK_EQ(th_get_num(srv, "latch:layout"), 1);
  CHECK_OK(rlock_latch_count_down(l, &v));
  CHECK_EQ(v, 0);
  want_msg(sub, "0"); /* nothing was published between: the next message is the 0 */
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "latch:layout", NULL), 0);
  CHECK_OK(rlock_latch_get_count(l, &v));
  CHECK_EQ(v, 0);
  redisFree(sub);
  rlock_latch_free(l);
  rlock_client_free(c);
}

TEST(braces_always) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_latch_t *l = latch(c, "{latch}:b");
  redisContext *sub = sub_open("redisson_countdownlatch__channel__{{latch}:b}");
  CHECK_OK(rlock_latch_try_set_count(l, 1, NULL));
  want_msg(sub, "1");
  CHECK_OK(rlock_latch_count_down(l, NULL));
  want_msg(sub, "0");
  redisFree(sub);
  rlock_latch_free(l);
  rlock_client_free(c);
}

TEST(count_and_extra) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_latch_t *l = latch(c, "latch:extra");
  int64_t v = -1;
  CHECK_OK(rlock_latch_get_count(l, &v));
  CHECK_EQ(v, 0);
  CHECK_OK(rlock_latch_count_down(l, &v)); /* missing: DECR to -1, deleted */
  CHECK_EQ(v, 0);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "latch:extra", NULL), 0);
  CHECK_OK(rlock_latch_try_set_count(l, 1, NULL));
  CHECK_OK(rlock_latch_count_down(l, &v));
  CHECK_OK(rlock_latch_count_down(l, &v));
  CHECK_EQ(v, 0);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "latch:extra", NULL), 0);
  rlock_latch_free(l);
  rlock_client_free(c);
}

TEST(await_open) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_latch_t *l = latch(c, "latch:open");
  CHECK_OK(rlock_latch_await(l, 0, NULL));
  CHECK_OK(rlock_latch_await(l, RLOCK_WAIT_FOREVER, NULL));
  rlock_latch_free(l);
  rlock_client_free(c);
}

static atomic_int woken, woken_ok;
static void on_open(rlock_latch_t *l, int status, int64_t value, void *arg) {
  (void)l, (void)value, (void)arg;
  if (status == 0) atomic_fetch_add(&woken_ok, 1);
  atomic_fetch_add(&woken, 1);
}
static int all_woken(void *arg) { return atomic_load(&woken) >= *(int *)arg; }

typedef struct numsub_want {
  const char *chan;
  long long n;
} numsub_want_t;
static int numsub_is(void *arg) {
  numsub_want_t *w = arg;
  return th_numsub(srv, w->chan) == w->n;
}

TEST(await_wakes_all) {
  rlock_client_t *a = th_client(srv->url, 0), *b = th_client(srv->url, 0);
  rlock_latch_t *la = latch(a, "latch:all"), *lb = latch(b, "latch:all");
  CHECK_OK(rlock_latch_try_set_count(lb, 2, NULL));
  for (int i = 0; i < 5; i++) CHECK_OK(rlock_latch_await_async(la, 10000, NULL, on_open, NULL));
  numsub_want_t w = {"redisson_countdownlatch__channel__{latch:all}", 1};
  CHECK_MSG(th_wait_until(numsub_is, &w, 5000), "the awaiters did not subscribe");
  CHECK_OK(rlock_latch_count_down(lb, NULL));
  CHECK_EQ(atomic_load(&woken), 0); /* the count is 1: the latch stays shut */
  CHECK_OK(rlock_latch_count_down(lb, NULL));
  int five = 5;
  CHECK_MSG(th_wait_until(all_woken, &five, 5000), "the message at zero did not wake every awaiter");
  CHECK_EQ(atomic_load(&woken_ok), 5);
  rlock_latch_free(la);
  rlock_latch_free(lb);
  rlock_client_free(a);
  rlock_client_free(b);
}

TEST(await_timeout) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_latch_t *l = latch(c, "latch:timeout");
  CHECK_OK(rlock_latch_try_set_count(l, 1, NULL));
  CHECK_RC(rlock_latch_await(l, 200, NULL), RLOCK_EBUSY);
  CHECK_RC(rlock_latch_await(l, 0, NULL), RLOCK_EBUSY);
  CHECK_EQ(th_get_num(srv, "latch:timeout"), 1);
  rlock_latch_free(l);
  rlock_client_free(c);
}

TEST(bad_input) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_latch_t *l = latch(c, "latch:bad");
  long long before = th_scripts_run(srv);
  CHECK_RC(rlock_latch_try_set_count(l, 0, NULL), RLOCK_EINVAL);
  CHECK_RC(rlock_latch_try_set_count(l, -2, NULL), RLOCK_EINVAL);
  CHECK_RC(rlock_latch_await(l, -7, NULL), RLOCK_EINVAL);
  CHECK_RC(rlock_latch_get_count(l, NULL), RLOCK_EINVAL);
  CHECK_RC(rlock_latch_count_down(NULL, NULL), RLOCK_EINVAL);
  rlock_semaphore_t *s = NULL;
  CHECK_OK(rlock_semaphore_new(c, "latch:bad", 9, &s));
  CHECK_RC(rlock_latch_count_down((rlock_latch_t *)s, NULL), RLOCK_EINVAL);
  CHECK(strstr(rlock_last_error(), "not a latch") != NULL);
  CHECK_EQ(th_scripts_run(srv), before);
  rlock_semaphore_free(s);
  rlock_latch_free(l);
  rlock_client_free(c);
}

static void pause_scripts(const char *ms) {
  redisReply *r = th_cmd(srv, "CLIENT", "PAUSE", ms, "WRITE", NULL);
  CHECK_MSG(r->type == REDIS_REPLY_STATUS, "CLIENT PAUSE: %s", r->str);
  th_reply_free(r);
}

typedef struct mark {
  rlock_client_t *c;
  long long srv;
  uint64_t cli;
} mark_t;
static int ran(void *arg) {
  const mark_t *m = arg;
  rlock_stats_t st;
  rlock_client_stats(m->c, &st);
  return th_scripts_run(srv) - m->srv >= (long long)(st.scripts_sent - m->cli);
}

TEST(count_down_resent_counts_once) {
  rlock_client_t *c = th_client_timeouts(srv->url, 400, 3);
  rlock_latch_t *l = latch(c, "latch:resend");
  CHECK_OK(rlock_latch_try_set_count(l, 5, NULL));
  CHECK_OK(rlock_latch_count_down(l, NULL)); /* cached: EVALSHA from now on */
  rlock_stats_t s0, s1;
  rlock_client_stats(c, &s0);
  mark_t m = {c, th_scripts_run(srv), s0.scripts_sent};
  pause_scripts("1000");
  int64_t left = -1;
  int rc = rlock_latch_count_down(l, &left);
  rlock_client_stats(c, &s1);
  CHECK_MSG(s1.timeouts > s0.timeouts, "no request timed out: the pause did not bite");
  th_reply_free(th_cmd(srv, "EVAL", "return 1", "0", NULL)); /* the pause is over */
  CHECK_MSG(th_wait_until(ran, &m, 10000), "the server did not run every copy");
  CHECK_MSG(s1.scripts_sent - s0.scripts_sent >= 2, "the count-down was not re-sent");
  CHECK_OK(rc);
  CHECK_EQ(left, 3);
  CHECK_EQ(th_get_num(srv, "latch:resend"), 3); /* counted once */
  rlock_latch_free(l);
  rlock_client_free(c);
}

/* A read has no request id: a wait re-sends it until its bound, however
 * many answers were lost (lib/semaphore.c failed()). */
static atomic_int ride_status = -1000;
static void on_ride(rlock_latch_t *l, int status, int64_t value, void *arg) {
  (void)l, (void)value, (void)arg;
  atomic_store(&ride_status, status);
}
static int ride_ended(void *arg) {
  (void)arg;
  return atomic_load(&ride_status) != -1000;
}
TEST(await_rides_out_lost_answers) {
  rlock_client_t *c = th_client_timeouts(srv->url, 300, 3);
  rlock_latch_t *l = latch(c, "latch:ride");
  CHECK_OK(rlock_latch_try_set_count(l, 1, NULL));
  rlock_stats_t s0, s1;
  rlock_client_stats(c, &s0);
  /* 2000 ms: more than 4 sends of 300 ms each */
  redisReply *r = th_cmd(srv, "CLIENT", "PAUSE", "2000", "ALL", NULL);
  CHECK_MSG(r->type == REDIS_REPLY_STATUS, "CLIENT PAUSE: %s", r->str);
  th_reply_free(r);
  CHECK_OK(rlock_latch_await_async(l, 20000, NULL, on_ride, NULL));
  th_reply_free(th_cmd(srv, "PING", NULL)); /* answered once the pause is over */
  rlock_client_stats(c, &s1);
  CHECK_MSG(s1.timeouts - s0.timeouts >= 4, "%llu timeouts: the pause did not bite",
            (unsigned long long)(s1.timeouts - s0.timeouts));
  numsub_want_t w = {"redisson_countdownlatch__channel__{latch:ride}", 1};
  th_wait_until(numsub_is, &w, 5000);
  CHECK_MSG(atomic_load(&ride_status) == -1000, "the await ended %s during the pause",
            rlock_err_name(atomic_load(&ride_status)));
  rlock_client_t *d = th_client(srv->url, 0);
  rlock_latch_t *ld = latch(d, "latch:ride");
  CHECK_OK(rlock_latch_count_down(ld, NULL));
  CHECK_MSG(th_wait_until(ride_ended, NULL, 10000), "the await did not open after the count-down");
  CHECK_OK(atomic_load(&ride_status));
  rlock_latch_free(ld);
  rlock_client_free(d);
  rlock_latch_free(l);
  rlock_client_free(c);
}

/* A short wait (0: one look; or shorter than one command timeout) whose read
 * lost its answer: the read is still re-sent up to retry_attempts times, as
 * before (and as a lock try is: lib/lock.c acquire_failed, "the wait bound is
 * about waiting for the lock, not about the transport"). The bound ends the
 * wait, not the transport's re-sends. */
TEST(short_await_rides_out_lost_answer) {
  rlock_client_t *c = th_client_timeouts(srv->url, 300, 3);
  rlock_latch_t *l = latch(c, "latch:short"); /* never set: open */
  CHECK_OK(rlock_latch_await(l, 0, NULL));    /* connected, answered */
  /* 500 ms: the first GET and its first re-send time out, the second re-send is answered */
  redisReply *r = th_cmd(srv, "CLIENT", "PAUSE", "500", "ALL", NULL);
  CHECK_MSG(r->type == REDIS_REPLY_STATUS, "CLIENT PAUSE: %s", r->str);
  th_reply_free(r);
  int rc = rlock_latch_await(l, 0, NULL);
  CHECK_MSG(rc == 0, "one look at an open latch during a 500 ms pause: %s (%s)", rlock_err_name(rc),
            rlock_last_error());
  th_reply_free(th_cmd(srv, "PING", NULL)); /* the pause is over */
  r = th_cmd(srv, "CLIENT", "PAUSE", "500", "ALL", NULL);
  th_reply_free(r);
  rc = rlock_latch_await(l, 100, NULL);
  CHECK_MSG(rc == 0, "a 100 ms await of an open latch during a 500 ms pause: %s (%s)", rlock_err_name(rc),
            rlock_last_error());
  th_reply_free(th_cmd(srv, "PING", NULL));
  rlock_latch_free(l);
  rlock_client_free(c);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 120);
  srv = th_server_start(NULL);
  RUN(layout);
  RUN(braces_always);
  RUN(count_and_extra);
  RUN(await_open);
  RUN(await_wakes_all);
  RUN(await_timeout);
  RUN(bad_input);
  RUN(count_down_resent_counts_once);
  RUN(await_rides_out_lost_answers);
  RUN(short_await_rides_out_lost_answer);
  th_server_stop(srv);
  return th_done();
}
