/* test_semaphore_queue.c -- rlock's queue of semaphore waiters
 * (rlock_semaphore_queue:{NAME}, rlock_semaphore_timeout:{NAME};
 * lua/semaphore_acquire.lua) against a real redis-server. The clients serve
 * waiters in order at once (semaphore_fair_after_ms 0) unless a case says:
 *   no_barging        a waiter is queued; another client releases a permit
 *                     and at once tries to take one: the try is refused (the
 *                     permit is the waiter's), and the waiter takes it
 *   young_waiter_competes  the same with semaphore_fair_after_ms 60 s: the
 *                     queued waiter has not waited that long, and the try
 *                     takes the permit (tries compete until then)
 *   fifo_order        four waiters of four clients, queued in turn, take one
 *                     released permit each in the order they came
 *   big_head_blocks_small  a waiter for 3 is ahead of a waiter for 1: a
 *                     release of 2 lets neither take (the small one waits its
 *                     turn: the big one never starves; the head counts for
 *                     the 3 it asks, not 1); 1 more lets the big one take,
 *                     the next 1 the small one
 *   dead_waiter_gone  a process queued and was killed (SIGKILL): its entry
 *                     holds the permit back only until its deadline (its
 *                     slot), then the live waiter behind it takes it
 *   leave_wakes_next  the head's wait ends (its wait bound) while a permit is
 *                     there: its leaving says so on the channel, and the
 *                     waiter behind it takes the permit (no release comes)
 *   woken_passes_ahead a client's first waiter came back to the queue at the
 *                     tail (its entry was taken out): a release's one wake-up
 *                     reaches it first, and it passes the wake-up to the
 *                     client's waiter ahead of it, which takes the permit
 *   cancel_and_close_leave  a cancelled waiter and a parked waiter of a
 *                     client being freed leave no entry behind
 *   short_slot_keeps_long  a client with a 200 ms slot queues behind one with
 *                     30 s: the queue's keys still live to the long waiter's
 *                     deadline (its entry and place are not lost to the
 *                     short client's PEXPIRE)
 *   churn             12 threads of 3 clients take 1 to 3 of 3 permits with
 *                     waits of 5-65 ms, a quarter with a cancel (half of
 *                     those triggered before): never more than 3 inside, 3
 *                     available at the end and no entry left
 *   lost_answer_leaves  a queued waiter's last try (at its wait bound) is
 *                     held back by CLIENT PAUSE WRITE past its command timeout
 *                     and its one re-send: RLOCK_ETIMEDOUT; once the copies
 *                     ran, its entry is gone (the undo leaves the queue), and
 *                     the waiter behind it takes the next permit */
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static th_server_t *srv;

/* A client whose semaphore waiters are served in order at once (fair after
 * 0 ms), with this waiter slot. */
static rlock_client_t *client_slot(int64_t slot_ms) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = srv->url;
  o.fair_waiter_timeout_ms = slot_ms;
  o.semaphore_fair_after_ms = 0;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  return c;
}

static rlock_semaphore_t *sem(rlock_client_t *c, const char *name) {
  rlock_semaphore_t *s = NULL;
  CHECK_OK(rlock_semaphore_new(c, name, strlen(name), &s));
  return s;
}

typedef struct done {
  atomic_int n;
  atomic_int status;
  atomic_int order; /* its place among the completions of a test (1, 2, ...) */
} done_t;
static atomic_int completions;

static void on_done(rlock_semaphore_t *s, int status, int64_t value, void *arg) {
  (void)s, (void)value;
  done_t *d = arg;
  atomic_store(&d->status, status);
  atomic_store(&d->order, atomic_fetch_add(&completions, 1) + 1);
  atomic_fetch_add(&d->n, 1);
}
static int is_done(void *arg) { return atomic_load(&((done_t *)arg)->n) >= 1; }

typedef struct queued_want {
  const char *key;
  long long n;
} queued_want_t;
static int queued_is(void *arg) {
  queued_want_t *w = arg;
  return th_cmd_int(srv, "ZCARD", w->key, NULL) == w->n;
}

/* Waits until the queue of sem:<name> has n entries and c has nothing in flight. */
static void wait_queued(rlock_client_t *c, const char *qkey, long long n) {
  queued_want_t w = {qkey, n};
  CHECK_MSG(th_wait_until(queued_is, &w, 5000), "%s: %lld entries, not %lld", qkey,
            th_cmd_int(srv, "ZCARD", qkey, NULL), n);
  th_settled(c);
}

TEST(no_barging) {
  rlock_client_t *a = client_slot(10000), *b = client_slot(10000);
  rlock_semaphore_t *sa = sem(a, "semq:barge"), *sb = sem(b, "semq:barge");
  done_t d = {0};
  CHECK_OK(rlock_semaphore_acquire_async(sa, 1, 30000, NULL, on_done, &d));
  wait_queued(a, "rlock_semaphore_queue:{semq:barge}", 1);
  /* b's try goes out right behind its release, on the same connection, and
   * reaches the server before a's try (woken by the release's message): it
   * would win the permit without the queue */
  done_t rel = {0}, try_b = {0};
  CHECK_OK(rlock_semaphore_release_async(sb, 1, on_done, &rel));
  CHECK_OK(rlock_semaphore_acquire_async(sb, 1, 0, NULL, on_done, &try_b));
  CHECK_MSG(th_wait_until(is_done, &try_b, 5000), "b's try did not end");
  CHECK_OK(atomic_load(&rel.status));
  CHECK_RC(atomic_load(&try_b.status), RLOCK_EBUSY);
  CHECK_MSG(th_wait_until(is_done, &d, 5000), "the queued waiter did not take the permit");
  CHECK_OK(atomic_load(&d.status));
  CHECK_EQ(th_get_num(srv, "semq:barge"), 0);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "rlock_semaphore_queue:{semq:barge}", NULL), 0);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "rlock_semaphore_timeout:{semq:barge}", NULL), 0);
  rlock_semaphore_free(sa);
  rlock_semaphore_free(sb);
  rlock_client_free(a);
  rlock_client_free(b);
}

/* The same with fair after 60 s: the queued waiter is young, and the try
 * behind the release takes the permit (tries compete until a waiter waited
 * that long); the waiter takes the next one. */
TEST(young_waiter_competes) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = srv->url;
  o.semaphore_fair_after_ms = 60000;
  rlock_client_t *a = client_slot(10000), *b = NULL;
  CHECK_OK(rlock_client_new(&b, &o));
  rlock_semaphore_t *sa = sem(a, "semq:young"), *sb = sem(b, "semq:young");
  done_t d = {0}, rel = {0}, try_b = {0};
  CHECK_OK(rlock_semaphore_acquire_async(sa, 1, 30000, NULL, on_done, &d));
  wait_queued(a, "rlock_semaphore_queue:{semq:young}", 1);
  CHECK_OK(rlock_semaphore_release_async(sb, 1, on_done, &rel));
  CHECK_OK(rlock_semaphore_acquire_async(sb, 1, 0, NULL, on_done, &try_b));
  CHECK_MSG(th_wait_until(is_done, &try_b, 5000), "b's try did not end");
  CHECK_OK(atomic_load(&try_b.status));
  CHECK_OK(rlock_semaphore_release(sb, 1, NULL));
  CHECK_MSG(th_wait_until(is_done, &d, 5000), "the queued waiter did not take the next permit");
  CHECK_OK(atomic_load(&d.status));
  CHECK_EQ(th_get_num(srv, "semq:young"), 0);
  rlock_semaphore_free(sa);
  rlock_semaphore_free(sb);
  rlock_client_free(a);
  rlock_client_free(b);
}

TEST(fifo_order) {
  enum { N = 4 };
  rlock_client_t *c[N], *r = client_slot(10000);
  rlock_semaphore_t *s[N], *sr = sem(r, "semq:fifo");
  done_t d[N];
  memset(d, 0, sizeof d);
  atomic_store(&completions, 0);
  for (int i = 0; i < N; i++) {
    c[i] = client_slot(10000);
    s[i] = sem(c[i], "semq:fifo");
    CHECK_OK(rlock_semaphore_acquire_async(s[i], 1, 30000, NULL, on_done, &d[i]));
    wait_queued(c[i], "rlock_semaphore_queue:{semq:fifo}", i + 1);
  }
  for (int i = 0; i < N; i++) {
    CHECK_OK(rlock_semaphore_release(sr, 1, NULL));
    CHECK_MSG(th_wait_until(is_done, &d[i], 5000), "waiter %d (queued %d) did not take the permit", i + 1, i + 1);
    CHECK_OK(atomic_load(&d[i].status));
    CHECK_EQ(atomic_load(&d[i].order), i + 1);
  }
  CHECK_EQ(th_get_num(srv, "semq:fifo"), 0);
  for (int i = 0; i < N; i++) {
    rlock_semaphore_free(s[i]);
    rlock_client_free(c[i]);
  }
  rlock_semaphore_free(sr);
  rlock_client_free(r);
}

TEST(big_head_blocks_small) {
  rlock_client_t *a = client_slot(10000), *b = client_slot(10000);
  rlock_semaphore_t *sa = sem(a, "semq:big"), *sb = sem(b, "semq:big");
  done_t big = {0}, small = {0};
  CHECK_OK(rlock_semaphore_acquire_async(sa, 3, 30000, NULL, on_done, &big));
  wait_queued(a, "rlock_semaphore_queue:{semq:big}", 1);
  CHECK_OK(rlock_semaphore_acquire_async(sa, 1, 30000, NULL, on_done, &small));
  wait_queued(a, "rlock_semaphore_queue:{semq:big}", 2);
  rlock_stats_t st;
  rlock_client_stats(a, &st);
  CHECK_OK(rlock_semaphore_release(sb, 2, NULL));
  /* the message 2 wakes both waiters; then the subscription is cut, and each
   * waiter tries again once it is back: the small one too, and it must not
   * take the permit */
  CHECK_MSG(TH_STAT_REACHES(a, acquire_attempts, st.acquire_attempts + 2, 5000),
            "the waiters did not try after the release");
  th_reply_free(th_cmd(srv, "CLIENT", "KILL", "TYPE", "pubsub", NULL));
  CHECK_MSG(TH_STAT_REACHES(a, acquire_attempts, st.acquire_attempts + 4, 5000),
            "the waiters did not try again after the resubscription");
  th_settled(a);
  CHECK_EQ(atomic_load(&small.n), 0);
  CHECK_EQ(atomic_load(&big.n), 0);
  CHECK_EQ(th_get_num(srv, "semq:big"), 2);
  CHECK_OK(rlock_semaphore_release(sb, 1, NULL));
  CHECK_MSG(th_wait_until(is_done, &big, 5000), "the waiter for 3 was not woken (3 available)");
  CHECK_OK(atomic_load(&big.status));
  th_settled(a);
  CHECK_EQ(atomic_load(&small.n), 0);
  CHECK_OK(rlock_semaphore_release(sb, 1, NULL));
  CHECK_MSG(th_wait_until(is_done, &small, 5000), "the waiter for 1 was not woken");
  CHECK_OK(atomic_load(&small.status));
  CHECK_EQ(th_get_num(srv, "semq:big"), 0);
  rlock_semaphore_free(sa);
  rlock_semaphore_free(sb);
  rlock_client_free(a);
  rlock_client_free(b);
}

TEST(dead_waiter_gone) {
  /* the child queues with a 600 ms slot and is killed; nothing else of this
   * process runs yet (no client: fork with one thread) */
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {                     /* no CHECK here: a failing child must not run the harness's exit */
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlives a failed test */
    alarm(60);
    rlock_options_t o;
    rlock_options_init(&o);
    o.url = srv->url;
    o.fair_waiter_timeout_ms = 600;
    o.semaphore_fair_after_ms = 0;
    rlock_client_t *c = NULL;
    rlock_semaphore_t *s = NULL;
    if (rlock_client_new(&c, &o) || rlock_semaphore_new(c, "semq:dead", 9, &s)) _exit(2);
    rlock_semaphore_acquire(s, 1, RLOCK_WAIT_FOREVER, NULL);
    _exit(3);
  }
  queued_want_t w = {"rlock_semaphore_queue:{semq:dead}", 1};
  CHECK_MSG(th_wait_until(queued_is, &w, 5000), "the child did not queue");
  kill(pid, SIGKILL);
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK(WIFSIGNALED(st));
  rlock_client_t *a = client_slot(30000), *b = client_slot(10000);
  rlock_semaphore_t *sa = sem(a, "semq:dead"), *sb = sem(b, "semq:dead");
  done_t d = {0};
  CHECK_OK(rlock_semaphore_acquire_async(sa, 1, 30000, NULL, on_done, &d));
  CHECK_OK(rlock_semaphore_release(sb, 1, NULL));
  /* held back by the dead entry until its deadline (600 ms), then taken;
   * a's own keep-alive would come only after 15 s */
  CHECK_MSG(th_wait_until(is_done, &d, 5000), "the live waiter behind a dead one did not take the permit");
  CHECK_OK(atomic_load(&d.status));
  CHECK_EQ(th_get_num(srv, "semq:dead"), 0);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "rlock_semaphore_queue:{semq:dead}", NULL), 0);
  rlock_semaphore_free(sa);
  rlock_semaphore_free(sb);
  rlock_client_free(a);
  rlock_client_free(b);
}

TEST(leave_wakes_next) {
  rlock_client_t *a = client_slot(30000), *b = client_slot(30000);
  rlock_semaphore_t *sa = sem(a, "semq:leave"), *sb = sem(b, "semq:leave");
  CHECK_OK(rlock_semaphore_try_set_permits(sa, 1, NULL));
  done_t big = {0}, small = {0};
  /* 1.5 s: the waiter behind must be queued before it ends (400 ms was too
   * short on a loaded machine: the head left first and small took at once) */
  CHECK_OK(rlock_semaphore_acquire_async(sa, 2, 1500, NULL, on_done, &big));
  wait_queued(a, "rlock_semaphore_queue:{semq:leave}", 1);
  CHECK_OK(rlock_semaphore_acquire_async(sb, 1, 30000, NULL, on_done, &small));
  wait_queued(b, "rlock_semaphore_queue:{semq:leave}", 2);
  CHECK_EQ(atomic_load(&small.n), 0); /* the permit is there, but the head asks 2 */
  CHECK_MSG(th_wait_until(is_done, &big, 5000), "the head's wait did not end");
  CHECK_RC(atomic_load(&big.status), RLOCK_EBUSY);
  /* no release comes; b's keep-alive would come only after 15 s */
  CHECK_MSG(th_wait_until(is_done, &small, 5000), "the waiter behind the head that left was not woken");
  CHECK_OK(atomic_load(&small.status));
  CHECK_EQ(th_get_num(srv, "semq:leave"), 0);
  rlock_semaphore_free(sa);
  rlock_semaphore_free(sb);
  rlock_client_free(a);
  rlock_client_free(b);
}

/* The member at place n of the queue of semq:ahead, malloc'd. */
static char *member_at(int n) {
  redisReply *r = th_cmd(srv, "ZRANGE", "rlock_semaphore_queue:{semq:ahead}", n == 0 ? "0" : "1", n == 0 ? "0" : "1",
                         NULL);
  CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 1);
  char *m = strdup(r->element[0]->str);
  th_reply_free(r);
  return m;
}

typedef struct last_want {
  const char *member;
} last_want_t;
static int is_last(void *arg) {
  last_want_t *w = arg;
  redisReply *r = th_cmd(srv, "ZRANGE", "rlock_semaphore_queue:{semq:ahead}", "-1", "-1", NULL);
  int ok = r->type == REDIS_REPLY_ARRAY && r->elements == 1 && !strcmp(r->element[0]->str, w->member);
  th_reply_free(r);
  return ok;
}

TEST(woken_passes_ahead) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = srv->url;
  o.fair_waiter_timeout_ms = 30000;
  o.semaphore_fair_after_ms = 0;
  o.client_name = "semq-ahead";
  rlock_client_t *a = NULL, *b = client_slot(10000);
  CHECK_OK(rlock_client_new(&a, &o));
  rlock_semaphore_t *sa = sem(a, "semq:ahead"), *sb = sem(b, "semq:ahead");
  done_t first = {0}, second = {0};
  CHECK_OK(rlock_semaphore_acquire_async(sa, 1, 30000, NULL, on_done, &first));
  wait_queued(a, "rlock_semaphore_queue:{semq:ahead}", 1);
  CHECK_OK(rlock_semaphore_acquire_async(sa, 1, 30000, NULL, on_done, &second));
  wait_queued(a, "rlock_semaphore_queue:{semq:ahead}", 2);
  /* the first waiter's entry is taken out (as if it had been gone), and its
   * next try puts it back at the tail: the subscription is cut, and each
   * waiter tries again once it is back */
  char *m = member_at(0);
  th_reply_free(th_cmd(srv, "ZREM", "rlock_semaphore_queue:{semq:ahead}", m, NULL));
  th_reply_free(th_cmd(srv, "ZREM", "rlock_semaphore_timeout:{semq:ahead}", m, NULL));
  th_reply_free(th_cmd(srv, "CLIENT", "KILL", "TYPE", "pubsub", NULL));
  last_want_t lw = {m};
  CHECK_MSG(th_wait_until(is_last, &lw, 5000), "the first waiter did not come back at the tail");
  wait_queued(a, "rlock_semaphore_queue:{semq:ahead}", 2);
  th_settled(a);
  CHECK_OK(rlock_semaphore_release(sb, 1, NULL));
  /* the message 1 wakes a's first parked waiter: the one now behind */
  CHECK_MSG(th_wait_until(is_done, &second, 5000), "the waiter ahead was not passed the wake-up");
  CHECK_OK(atomic_load(&second.status));
  CHECK_EQ(atomic_load(&first.n), 0);
  CHECK_OK(rlock_semaphore_release(sb, 1, NULL));
  CHECK_MSG(th_wait_until(is_done, &first, 5000), "the last waiter was not woken");
  free(m);
  rlock_semaphore_free(sa);
  rlock_semaphore_free(sb);
  rlock_client_free(a);
  rlock_client_free(b);
}

TEST(cancel_and_close_leave) {
  rlock_client_t *a = client_slot(10000), *b = client_slot(10000);
  rlock_semaphore_t *sa = sem(a, "semq:gone"), *sb = sem(b, "semq:gone");
  rlock_cancel_t *cn = NULL;
  CHECK_OK(rlock_cancel_new(&cn));
  done_t d = {0}, e = {0};
  CHECK_OK(rlock_semaphore_acquire_async(sa, 1, RLOCK_WAIT_FOREVER, cn, on_done, &d));
  wait_queued(a, "rlock_semaphore_queue:{semq:gone}", 1);
  CHECK_OK(rlock_semaphore_acquire_async(sb, 1, RLOCK_WAIT_FOREVER, NULL, on_done, &e));
  wait_queued(b, "rlock_semaphore_queue:{semq:gone}", 2);
  rlock_cancel_trigger(cn);
  CHECK_MSG(th_wait_until(is_done, &d, 5000), "the cancel did not end the wait");
  CHECK_EQ(atomic_load(&d.status), RLOCK_ECANCELED);
  wait_queued(a, "rlock_semaphore_queue:{semq:gone}", 1);
  rlock_client_free(b);     /* its parked waiter ends (RLOCK_ECLOSED) and leaves */
  rlock_semaphore_free(sb); /* after: the close path's leave reads the handle */
  CHECK_EQ(atomic_load(&e.status), RLOCK_ECLOSED);
  queued_want_t w = {"rlock_semaphore_queue:{semq:gone}", 0};
  CHECK_MSG(th_wait_until(queued_is, &w, 5000), "the closed client's waiter stayed queued");
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "rlock_semaphore_timeout:{semq:gone}", NULL), 0);
  rlock_cancel_free(cn);
  rlock_semaphore_free(sa);
  rlock_client_free(a);
}

/* The server's clock (ms). */
static long long server_ms(void) {
  redisReply *r = th_cmd(srv, "TIME", NULL);
  CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 2);
  long long ms = strtoll(r->element[0]->str, NULL, 10) * 1000 + strtoll(r->element[1]->str, NULL, 10) / 1000;
  th_reply_free(r);
  return ms;
}

/* Both keys of semq:ttl live at least to the deadline of member m. */
static void keys_outlive(const char *m, const char *when) {
  char *v = th_cmd_str(srv, "ZSCORE", "rlock_semaphore_timeout:{semq:ttl}", m, NULL);
  CHECK_MSG(v, "%s: the 30 s waiter has no deadline", when);
  long long dl = strtoll(v, NULL, 10);
  free(v);
  long long now = server_ms(); /* before the PTTLs: now + PTTL is at most the expiry */
  long long q = th_cmd_int(srv, "PTTL", "rlock_semaphore_queue:{semq:ttl}", NULL);
  long long z = th_cmd_int(srv, "PTTL", "rlock_semaphore_timeout:{semq:ttl}", NULL);
  CHECK_MSG(q >= dl - now && z >= dl - now,
            "%s: the queue's keys expire in %lld and %lld ms, the 30 s waiter's deadline is in %lld ms", when, q, z,
            dl - now);
}

TEST(short_slot_keeps_long) {
  rlock_client_t *a = client_slot(30000), *b = client_slot(200);
  rlock_semaphore_t *sa = sem(a, "semq:ttl"), *sb = sem(b, "semq:ttl");
  rlock_cancel_t *cn = NULL;
  CHECK_OK(rlock_cancel_new(&cn));
  done_t d = {0}, e = {0};
  CHECK_OK(rlock_semaphore_acquire_async(sa, 1, 60000, NULL, on_done, &d));
  wait_queued(a, "rlock_semaphore_queue:{semq:ttl}", 1);
  redisReply *r = th_cmd(srv, "ZRANGE", "rlock_semaphore_queue:{semq:ttl}", "0", "0", NULL);
  CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 1);
  char *m = strdup(r->element[0]->str);
  th_reply_free(r);
  keys_outlive(m, "a alone");
  rlock_stats_t st;
  rlock_client_stats(b, &st);
  CHECK_OK(rlock_semaphore_acquire_async(sb, 1, RLOCK_WAIT_FOREVER, cn, on_done, &e));
  wait_queued(b, "rlock_semaphore_queue:{semq:ttl}", 2);
  /* b's keep-alives (every 100 ms) write its TTL again each time */
  CHECK_MSG(TH_STAT_REACHES(b, acquire_attempts, st.acquire_attempts + 3, 5000), "b's waiter did not try again");
  keys_outlive(m, "b queued behind a");
  rlock_cancel_trigger(cn);
  CHECK_MSG(th_wait_until(is_done, &e, 5000), "the cancel did not end b's wait");
  CHECK_EQ(atomic_load(&e.status), RLOCK_ECANCELED);
  wait_queued(b, "rlock_semaphore_queue:{semq:ttl}", 1);
  keys_outlive(m, "b left");
  CHECK_OK(rlock_semaphore_release(sb, 1, NULL));
  CHECK_MSG(th_wait_until(is_done, &d, 5000), "a did not take the released permit");
  CHECK_OK(atomic_load(&d.status));
  free(m);
  rlock_cancel_free(cn);
  rlock_semaphore_free(sa);
  rlock_semaphore_free(sb);
  rlock_client_free(a);
  rlock_client_free(b);
}

static rlock_client_t *churn_c[3];
static atomic_int inside, max_inside, ok_n, busy_n, cancel_n;
static void *churn_worker(void *arg) {
  int i = (int)(intptr_t)arg;
  rlock_semaphore_t *s = sem(churn_c[i % 3], "semq:churn");
  unsigned seed = (unsigned)i * 7919u + 1;
  for (int r = 0; r < 60; r++) {
    int p = 1 + (int)(rand_r(&seed) % 3);
    int64_t w = 5 + rand_r(&seed) % 60;
    rlock_cancel_t *cn = NULL;
    bool use_cancel = rand_r(&seed) % 4 == 0;
    if (use_cancel) CHECK_OK(rlock_cancel_new(&cn));
    if (use_cancel && rand_r(&seed) % 2) rlock_cancel_trigger(cn);
    int rc = rlock_semaphore_acquire(s, p, w, cn);
    if (rc == 0) {
      int in = atomic_fetch_add(&inside, p) + p;
      for (int m = atomic_load(&max_inside); in > m;)
        if (atomic_compare_exchange_weak(&max_inside, &m, in)) break;
      atomic_fetch_add(&ok_n, 1);
      th_sleep_ms(1 + rand_r(&seed) % 4); /* holds the permits a while (load, not a wait) */
      atomic_fetch_sub(&inside, p);
      CHECK_OK(rlock_semaphore_release(s, p, NULL));
    } else if (rc == RLOCK_EBUSY) atomic_fetch_add(&busy_n, 1);
    else if (rc == RLOCK_ECANCELED) atomic_fetch_add(&cancel_n, 1);
    else CHECK_OK(rc);
    if (cn) rlock_cancel_free(cn);
  }
  rlock_semaphore_free(s);
  return NULL;
}
TEST(churn) {
  for (int i = 0; i < 3; i++) churn_c[i] = client_slot(400);
  rlock_semaphore_t *s0 = sem(churn_c[0], "semq:churn");
  CHECK_OK(rlock_semaphore_try_set_permits(s0, 3, NULL));
  pthread_t t[12];
  for (int i = 0; i < 12; i++) pthread_create(&t[i], NULL, churn_worker, (void *)(intptr_t)i);
  for (int i = 0; i < 12; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 3; i++) th_settled(churn_c[i]);
  fprintf(stderr, "# ok %d busy %d cancel %d max inside %d\n", ok_n, busy_n, cancel_n, max_inside);
  CHECK(atomic_load(&max_inside) <= 3);
  CHECK_EQ(th_get_num(srv, "semq:churn"), 3);
  CHECK_EQ(th_cmd_int(srv, "ZCARD", "rlock_semaphore_queue:{semq:churn}", NULL), 0);
  CHECK_EQ(th_cmd_int(srv, "ZCARD", "rlock_semaphore_timeout:{semq:churn}", NULL), 0);
  rlock_semaphore_free(s0);
  for (int i = 0; i < 3; i++) rlock_client_free(churn_c[i]);
}

TEST(lost_answer_leaves) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = srv->url;
  o.fair_waiter_timeout_ms = 30000;
  o.semaphore_fair_after_ms = 0;
  o.command_timeout_ms = 200;
  o.retry_attempts = 1;
  rlock_client_t *a = NULL, *b = client_slot(30000);
  CHECK_OK(rlock_client_new(&a, &o));
  rlock_semaphore_t *sa = sem(a, "semq:lost"), *sb = sem(b, "semq:lost");
  done_t w = {0}, v = {0};
  CHECK_OK(rlock_semaphore_acquire_async(sa, 1, 1500, NULL, on_done, &w));
  wait_queued(a, "rlock_semaphore_queue:{semq:lost}", 1);
  CHECK_OK(rlock_semaphore_acquire_async(sb, 1, 30000, NULL, on_done, &v));
  wait_queued(b, "rlock_semaphore_queue:{semq:lost}", 2);
  /* a's try at its wait bound (1.5 s) comes during the pause */
  redisReply *r = th_cmd(srv, "CLIENT", "PAUSE", "3000", "WRITE", NULL);
  CHECK_MSG(r->type == REDIS_REPLY_STATUS, "CLIENT PAUSE: %s", r->str);
  th_reply_free(r);
  CHECK_MSG(th_wait_until(is_done, &w, 5000), "a's wait did not end");
  CHECK_RC(atomic_load(&w.status), RLOCK_ETIMEDOUT);
  th_reply_free(th_cmd(srv, "EVAL", "return 1", "0", NULL)); /* the pause is over */
  queued_want_t q = {"rlock_semaphore_queue:{semq:lost}", 1};
  CHECK_MSG(th_wait_until(queued_is, &q, 5000), "the waiter whose answer was lost stayed queued (%lld entries)",
            th_cmd_int(srv, "ZCARD", "rlock_semaphore_queue:{semq:lost}", NULL));
  CHECK_OK(rlock_semaphore_release(sa, 1, NULL));
  CHECK_MSG(th_wait_until(is_done, &v, 5000), "the waiter behind did not take the permit");
  CHECK_OK(atomic_load(&v.status));
  CHECK_EQ(th_get_num(srv, "semq:lost"), 0);
  rlock_semaphore_free(sa);
  rlock_semaphore_free(sb);
  rlock_client_free(a);
  rlock_client_free(b);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 120);
  srv = th_server_start(NULL);
  RUN(dead_waiter_gone); /* first: it forks while no client thread runs */
  RUN(no_barging);
  RUN(young_waiter_competes);
  RUN(fifo_order);
  RUN(big_head_blocks_small);
  RUN(leave_wakes_next);
  RUN(woken_passes_ahead);
  RUN(cancel_and_close_leave);
  RUN(short_slot_keeps_long);
  RUN(churn);
  RUN(lost_answer_leaves);
  th_server_stop(srv);
  return th_done();
}
