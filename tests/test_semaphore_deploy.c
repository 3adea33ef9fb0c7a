/* test_semaphore_deploy.c -- the semaphore and the count-down latch
 * (lib/semaphore.c) on every deployment:
 *   cluster   3 masters, sharded pub/sub: a semaphore waiter SSUBSCRIBEs
 *             redisson_sc:{NAME} on the master of NAME's slot and is woken by a
 *             release from another client (SPUBLISH); a latch awaiter likewise
 *             on redisson_countdownlatch__channel__{NAME}; the keys and the
 *             request latches live on that master (names with and without
 *             braces for the semaphore); a waiter whose wait ends at
 *             the head of rlock's queue wakes the one behind it (its leave
 *             runs in NAME's slot and SPUBLISHes)
 *   replicas  a master with a replica and the replica-sync WAIT: once a
 *             try-set, acquire, release or count-down returned, the replica
 *             has what it wrote
 *   sentinel  redis+sentinel:// (a master, a replica, 3 sentinels): set,
 *             acquire, busy, release, latch set, count down, await
 *   replicas_refused_grant  a queued waiter (replica sync one) is granted
 *             the permit while the replica is paused: RLOCK_ENOSYNC, the
 *             permit given back, and the undo's message wakes the waiter of
 *             another client queued behind, which takes it; no entry left
 *   replicas_close_in_flight  a client (replica sync one) takes the only
 *             permit while the replica is paused: its try ran and its WAIT
 *             waits; the client is freed meanwhile: the undo written behind
 *             the WAIT runs (the close lingers for it) and the permit is back */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "harness_cluster.h"
#include "harness_replica.h"
#include "harness_sentinel.h"

static th_cluster_t *cl;

typedef struct res {
  atomic_int done;
  int status;
} res_t;
static void on_sem(rlock_semaphore_t *s, int status, int64_t value, void *arg) {
  (void)s, (void)value;
  res_t *r = arg;
  r->status = status;
  atomic_store(&r->done, 1);
}
static void on_latch(rlock_latch_t *l, int status, int64_t value, void *arg) {
  (void)l, (void)value;
  res_t *r = arg;
  r->status = status;
  atomic_store(&r->done, 1);
}
static int is_done(void *arg) { return atomic_load(&((res_t *)arg)->done); }

static long long shard_numsub(th_server_t *s, const char *chan) {
  redisReply *r = th_cmd(s, "PUBSUB", "SHARDNUMSUB", chan, NULL);
  long long n = r->type == REDIS_REPLY_ARRAY && r->elements == 2 ? r->element[1]->integer : 0;
  th_reply_free(r);
  return n;
}
typedef struct sub_arg {
  th_server_t *owner;
  const char *chan;
} sub_arg_t;
static int subscribed(void *arg) {
  sub_arg_t *a = arg;
  return shard_numsub(a->owner, a->chan) > 0;
}

typedef struct zq_want {
  th_server_t *s;
  const char *key;
  long long n;
} zq_want_t;
static int zq_is(void *arg) {
  zq_want_t *w = arg;
  return th_cmd_int(w->s, "ZCARD", w->key, NULL) == w->n;
}

static void sem_hand_over(rlock_client_t *a, rlock_client_t *b, const char *name, const char *chan) {
  rlock_semaphore_t *sa = NULL, *sb = NULL;
  CHECK_OK(rlock_semaphore_new(a, name, strlen(name), &sa));
  CHECK_OK(rlock_semaphore_new(b, name, strlen(name), &sb));
  CHECK_OK(rlock_semaphore_try_set_permits(sb, 1, NULL));
  CHECK_OK(rlock_semaphore_try_acquire(sb, 1));
  res_t w = {0};
  CHECK_OK(rlock_semaphore_acquire_async(sa, 1, 30000, NULL, on_sem, &w));
  th_server_t *owner = th_cluster_owner(cl, th_cluster_keyslot(cl, name));
  CHECK(owner != NULL);
  sub_arg_t arg = {owner, chan};
  CHECK_MSG(th_wait_until(subscribed, &arg, 20000), "%s: the waiter never subscribed", name);
  CHECK_EQ(atomic_load(&w.done), 0);
  CHECK_OK(rlock_semaphore_release(sb, 1, NULL));
  CHECK_MSG(th_wait_until(is_done, &w, 20000), "%s: the release did not wake the waiter", name);
  CHECK_OK(w.status);
  char *v = th_cmd_str(owner, "GET", name, NULL); /* the name's master holds it */
  CHECK_STREQ(v, "0");
  free(v);
  rlock_semaphore_free(sa);
  rlock_semaphore_free(sb);
}

/* A waiter for 2 at the head of the queue, a waiter for 1 of another client
 * behind it, 1 permit: the head's wait ends and its leave (the undo script,
 * its keys and SPUBLISH in NAME's slot) wakes the one behind, which takes it. */
static void sem_leave_wakes(const char *name, const char *qkey) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = cl->url;
  o.fair_waiter_timeout_ms = 30000; /* no keep-alive within the test */
  o.semaphore_fair_after_ms = 0;
  rlock_client_t *a = NULL, *b = NULL;
  CHECK_OK(rlock_client_new(&a, &o));
  CHECK_OK(rlock_client_new(&b, &o));
  rlock_semaphore_t *sa = NULL, *sb = NULL;
  CHECK_OK(rlock_semaphore_new(a, name, strlen(name), &sa));
  CHECK_OK(rlock_semaphore_new(b, name, strlen(name), &sb));
  CHECK_OK(rlock_semaphore_add_permits(sb, 1, NULL));
  th_server_t *owner = th_cluster_owner(cl, th_cluster_keyslot(cl, name));
  CHECK(owner != NULL);
  res_t big = {0}, small = {0};
  CHECK_OK(rlock_semaphore_acquire_async(sa, 2, 1500, NULL, on_sem, &big));
  zq_want_t w1 = {owner, qkey, 1}, w2 = {owner, qkey, 2}, w0 = {owner, qkey, 0};
  CHECK_MSG(th_wait_until(zq_is, &w1, 20000), "%s: the waiter for 2 did not queue", name);
  CHECK_OK(rlock_semaphore_acquire_async(sb, 1, 30000, NULL, on_sem, &small));
  CHECK_MSG(th_wait_until(zq_is, &w2, 20000), "%s: the waiter for 1 did not queue", name);
  CHECK_MSG(th_wait_until(is_done, &big, 20000), "%s: the head's wait did not end", name);
  CHECK_RC(big.status, RLOCK_EBUSY);
  CHECK_MSG(th_wait_until(is_done, &small, 5000), "%s: the leave did not wake the waiter behind", name);
  CHECK_OK(small.status);
  CHECK_MSG(th_wait_until(zq_is, &w0, 5000), "%s: an entry stayed queued", name);
  rlock_semaphore_free(sa);
  rlock_semaphore_free(sb);
  rlock_client_free(a);
  rlock_client_free(b);
}

TEST(cluster) {
  rlock_client_t *a = th_client(cl->url, 0), *b = th_client(cl->url, 0);
  sem_hand_over(a, b, "sd:sem", "redisson_sc:{sd:sem}");
  sem_hand_over(a, b, "{sd}:sem", "redisson_sc:{sd}:sem");
  sem_leave_wakes("sd:leave", "rlock_semaphore_queue:{sd:leave}");
  sem_leave_wakes("{sd}:leave", "rlock_semaphore_queue:{sd}:leave");
  rlock_latch_t *la = NULL, *lb = NULL;
  CHECK_OK(rlock_latch_new(a, "sd:latch", 8, &la));
  CHECK_OK(rlock_latch_new(b, "sd:latch", 8, &lb));
  CHECK_OK(rlock_latch_try_set_count(lb, 1, NULL));
  res_t w = {0};
  CHECK_OK(rlock_latch_await_async(la, 30000, NULL, on_latch, &w));
  th_server_t *owner = th_cluster_owner(cl, th_cluster_keyslot(cl, "sd:latch"));
  sub_arg_t arg = {owner, "redisson_countdownlatch__channel__{sd:latch}"};
  CHECK_MSG(th_wait_until(subscribed, &arg, 20000), "the awaiter never subscribed");
  CHECK_OK(rlock_latch_count_down(lb, NULL));
  CHECK_MSG(th_wait_until(is_done, &w, 20000), "the count-down did not wake the awaiter");
  CHECK_OK(w.status);
  rlock_latch_free(la);
  rlock_latch_free(lb);
  rlock_client_free(a);
  rlock_client_free(b);
}

TEST(replicas) {
  th_server_t *m = th_server_start(NULL);
  th_server_t *r = th_replica_start(m);
  th_replicas_wait(m, 1, 20000);
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = m->url;
  o.replica_sync = RLOCK_REPLICA_SYNC_ONE;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  rlock_semaphore_t *s = NULL;
  CHECK_OK(rlock_semaphore_new(c, "rep:sem", 7, &s));
  long long waits = th_cmdstat(m, "wait");
  CHECK_OK(rlock_semaphore_try_set_permits(s, 3, NULL));
  char *v = th_cmd_str(r, "GET", "rep:sem", NULL);
  CHECK_STREQ(v, "3");
  free(v);
  CHECK_OK(rlock_semaphore_acquire(s, 2, 0, NULL));
  v = th_cmd_str(r, "GET", "rep:sem", NULL);
  CHECK_STREQ(v, "1");
  free(v);
  CHECK_OK(rlock_semaphore_release(s, 1, NULL));
  v = th_cmd_str(r, "GET", "rep:sem", NULL);
  CHECK_STREQ(v, "2");
  free(v);
  rlock_latch_t *l = NULL;
  CHECK_OK(rlock_latch_new(c, "rep:latch", 9, &l));
  CHECK_OK(rlock_latch_try_set_count(l, 2, NULL));
  CHECK_OK(rlock_latch_count_down(l, NULL));
  v = th_cmd_str(r, "GET", "rep:latch", NULL);
  CHECK_STREQ(v, "1");
  free(v);
  CHECK_EQ(th_cmdstat(m, "wait") - waits, 5); /* one WAIT behind each write */
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  CHECK_EQ(st.acquire_sync_misses, 0);
  CHECK_EQ(st.unlock_sync_misses, 0);
  rlock_latch_free(l);
  rlock_semaphore_free(s);
  rlock_client_free(c);
  th_server_stop(r);
  th_server_stop(m);
}

TEST(sentinel) {
  th_sentinels_t *t = th_sentinels_start("semaphore", 1, 3);
  rlock_client_t *c = th_client(t->url, 0);
  rlock_semaphore_t *s = NULL;
  CHECK_OK(rlock_semaphore_new(c, "sen:sem", 7, &s));
  CHECK_OK(rlock_semaphore_try_set_permits(s, 1, NULL));
  CHECK_OK(rlock_semaphore_acquire(s, 1, 0, NULL));
  CHECK_RC(rlock_semaphore_acquire(s, 1, 100, NULL), RLOCK_EBUSY);
  CHECK_OK(rlock_semaphore_release(s, 1, NULL));
  CHECK_OK(rlock_semaphore_acquire(s, 1, 0, NULL));
  CHECK_EQ(th_cmd_int(t->nodes[0], "EXISTS", "sen:sem", NULL), 1);
  rlock_latch_t *l = NULL;
  CHECK_OK(rlock_latch_new(c, "sen:latch", 9, &l));
  CHECK_OK(rlock_latch_try_set_count(l, 1, NULL));
  CHECK_RC(rlock_latch_await(l, 0, NULL), RLOCK_EBUSY);
  CHECK_OK(rlock_latch_count_down(l, NULL));
  CHECK_OK(rlock_latch_await(l, 1000, NULL));
  rlock_latch_free(l);
  rlock_semaphore_free(s);
  rlock_client_free(c);
  th_sentinels_stop(t);
}

static long long zcard(th_server_t *s, const char *key) { return th_cmd_int(s, "ZCARD", key, NULL); }
typedef struct zc_want {
  th_server_t *s;
  long long n;
} zc_want_t;
static int zc_is(void *arg) {
  zc_want_t *w = arg;
  return zcard(w->s, "rlock_semaphore_queue:{rep:semq}") == w->n;
}

TEST(replicas_refused_grant) {
  th_server_t *m = th_server_start(NULL);
  th_server_t *r = th_replica_start(m);
  th_replicas_wait(m, 1, 20000);
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = m->url;
  o.replica_sync = RLOCK_REPLICA_SYNC_ONE;
  o.replica_sync_timeout_ms = 300;
  o.fair_waiter_timeout_ms = 30000; /* keep-alives every 15 s: none in this test */
  o.semaphore_fair_after_ms = 0;
  rlock_client_t *a = NULL, *b = NULL;
  CHECK_OK(rlock_client_new(&a, &o));
  o.replica_sync = RLOCK_REPLICA_SYNC_OFF;
  CHECK_OK(rlock_client_new(&b, &o));
  rlock_semaphore_t *sa = NULL, *sb = NULL;
  CHECK_OK(rlock_semaphore_new(a, "rep:semq", 8, &sa));
  CHECK_OK(rlock_semaphore_new(b, "rep:semq", 8, &sb));
  res_t wa = {0}, wb = {0};
  CHECK_OK(rlock_semaphore_acquire_async(sa, 1, 30000, NULL, on_sem, &wa));
  zc_want_t w1 = {m, 1}, w2 = {m, 2}, w0 = {m, 0};
  CHECK_MSG(th_wait_until(zc_is, &w1, 5000), "a's waiter did not queue");
  CHECK_OK(rlock_semaphore_acquire_async(sb, 1, 30000, NULL, on_sem, &wb));
  CHECK_MSG(th_wait_until(zc_is, &w2, 5000), "b's waiter did not queue");
  th_server_pause(r);
  CHECK_OK(rlock_semaphore_release(sb, 1, NULL));
  CHECK_MSG(th_wait_until(is_done, &wa, 5000), "a's waiter did not end");
  CHECK_RC(wa.status, RLOCK_ENOSYNC);
  CHECK_MSG(th_wait_until(is_done, &wb, 5000), "b's waiter was not woken by the given-back permit");
  CHECK_OK(wb.status);
  char *v = th_cmd_str(m, "GET", "rep:semq", NULL);
  CHECK_STREQ(v, "0");
  free(v);
  CHECK_MSG(th_wait_until(zc_is, &w0, 5000), "an entry stayed queued");
  th_server_resume(r);
  rlock_semaphore_free(sa);
  rlock_semaphore_free(sb);
  rlock_client_free(a);
  rlock_client_free(b);
  th_server_stop(r);
  th_server_stop(m);
}

static int get_is_1(void *arg) {
  char *v = th_cmd_str((th_server_t *)arg, "GET", "rep:close", NULL);
  int ok = v && !strcmp(v, "1");
  free(v);
  return ok;
}
static int get_is_0(void *arg) {
  char *v = th_cmd_str((th_server_t *)arg, "GET", "rep:close", NULL);
  int ok = v && !strcmp(v, "0");
  free(v);
  return ok;
}

TEST(replicas_close_in_flight) {
  th_server_t *m = th_server_start(NULL);
  th_server_t *r = th_replica_start(m);
  th_replicas_wait(m, 1, 20000);
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = m->url;
  o.replica_sync = RLOCK_REPLICA_SYNC_ONE;
  o.command_timeout_ms = 4000;
  o.replica_sync_timeout_ms = 1500;
  rlock_client_t *a = NULL;
  CHECK_OK(rlock_client_new(&a, &o));
  rlock_semaphore_t *sa = NULL;
  CHECK_OK(rlock_semaphore_new(a, "rep:close", 9, &sa));
  /* set by hand: no latch of the client's own waits for deletion (a DEL
   * in flight would hold the close back by itself) */
  th_reply_free(th_cmd(m, "SET", "rep:close", "1", NULL));
  th_replicas_caught_up(m, 1, 5000);
  th_server_pause(r);
  res_t w = {0};
  CHECK_OK(rlock_semaphore_acquire_async(sa, 1, 30000, NULL, on_sem, &w));
  CHECK_MSG(th_wait_until(get_is_0, m, 5000), "the try did not run");
  CHECK_EQ(atomic_load(&w.done), 0); /* its WAIT waits for the paused replica */
  rlock_client_free(a);              /* lingers for the undo (behind the WAIT: up to 1.5 s) */
  CHECK_EQ(atomic_load(&w.done), 1);
  CHECK_RC(w.status, RLOCK_ECLOSED);
  rlock_semaphore_free(sa);
  CHECK_MSG(th_wait_until(get_is_1, m, 5000), "the permit the try in flight took was not given back");
  th_server_resume(r);
  th_server_stop(r);
  th_server_stop(m);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 280);
  cl = th_cluster_start(3, 0, 2000);
  RUN(cluster);
  th_cluster_stop(cl);
  RUN(replicas);
  RUN(sentinel);
  RUN(replicas_refused_grant);
  RUN(replicas_close_in_flight);
  return th_done();
}
