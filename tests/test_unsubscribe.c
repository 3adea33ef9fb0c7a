/* test_unsubscribe.c -- waiters leave no subscription behind: after a wait
 * that ends by a grant, by RLOCK_EBUSY or by a cancel, the server's PUBSUB
 * NUMSUB for the lock's channel drops back to 0 and the client's
 * stats.unsubscribes matches the channels it left (one UNSUBSCRIBE per
 * channel, however many waiters of the client shared it). Also after the
 * subscriber connection was killed and the channel subscribed again. */
#include <pthread.h>
#include <string.h>

#include "harness.h"

static th_server_t *srv;

typedef struct done {
  pthread_mutex_t mu;
  int calls, status;
} done_t;

static void on_done(rlock_lock_t *lock, int status, int64_t value, void *arg) {
  done_t *d = arg;
  pthread_mutex_lock(&d->mu);
  d->calls++;
  d->status = status;
  pthread_mutex_unlock(&d->mu);
}
static int called(void *arg) {
  done_t *d = arg;
  pthread_mutex_lock(&d->mu);
  int n = d->calls;
  pthread_mutex_unlock(&d->mu);
  return n > 0;
}
static int status_of(done_t *d) {
  CHECK_MSG(th_wait_until(called, d, 10000), "wait did not end");
  pthread_mutex_lock(&d->mu);
  int s = d->status, n = d->calls;
  pthread_mutex_unlock(&d->mu);
  CHECK_EQ(n, 1);
  return s;
}

typedef struct numsub {
  const char *chan;
  long long want;
} numsub_t;
static int numsub_is(void *a) {
  numsub_t *n = a;
  return th_numsub(srv, n->chan) == n->want;
}
static void await_numsub(const char *chan, long long want) {
  numsub_t n = {chan, want};
  CHECK_MSG(th_wait_until(numsub_is, &n, 5000), "PUBSUB NUMSUB %s is %lld, want %lld", chan, th_numsub(srv, chan),
            want);
}

static rlock_stats_t stats(rlock_client_t *c) {
  rlock_stats_t s;
  rlock_client_stats(c, &s);
  return s;
}

/* Every subscription the client made was undone: the channel count on the
 * server is 0 and the client sent `unsubs` UNSUBSCRIBEs for `subs` SUBSCRIBEs. */
static void check_clean(rlock_client_t *c, const char *chan, uint64_t subs, uint64_t unsubs) {
  await_numsub(chan, 0);
  rlock_stats_t s = stats(c);
  CHECK_EQ(s.subscribes, subs);
  CHECK_EQ(s.unsubscribes, unsubs);
}

#define CHAN(name) "redisson_lock__channel:{" name "}"

TEST(grant_busy_cancel) {
  rlock_client_t *h = th_client(srv->url, 0), *w = th_client(srv->url, 0);
  rlock_lock_t *lh = th_lock(h, "unsub:a"), *lw = th_lock(w, "unsub:a");
  const char *chan = CHAN("unsub:a");

  /* 1. ends by a grant */
  CHECK_OK(rlock_lock_acquire(lh, 1, 0, 60000, NULL));
  done_t d1 = {PTHREAD_MUTEX_INITIALIZER, 0, 0};
  CHECK_OK(rlock_lock_acquire_async(lw, 2, RLOCK_WAIT_FOREVER, 60000, NULL, on_done, &d1));
  await_numsub(chan, 1);
  CHECK_OK(rlock_lock_release(lh, 1));
  CHECK_OK(status_of(&d1));
  check_clean(w, chan, 1, 1);
  CHECK_OK(rlock_lock_release(lw, 2));

  /* 2. ends with RLOCK_EBUSY */
  CHECK_OK(rlock_lock_acquire(lh, 1, 0, 60000, NULL));
  CHECK_RC(rlock_lock_acquire(lw, 2, 300, 60000, NULL), RLOCK_EBUSY);
  check_clean(w, chan, 2, 2);

  /* 3. ends by a cancel */
  rlock_cancel_t *tok = NULL;
  CHECK_OK(rlock_cancel_new(&tok));
  done_t d3 = {PTHREAD_MUTEX_INITIALIZER, 0, 0};
  CHECK_OK(rlock_lock_acquire_async(lw, 2, RLOCK_WAIT_FOREVER, 60000, tok, on_done, &d3));
  await_numsub(chan, 1);
  rlock_cancel_trigger(tok);
  CHECK_RC(status_of(&d3), RLOCK_ECANCELED);
  check_clean(w, chan, 3, 3);
  rlock_cancel_free(tok);

  CHECK_OK(rlock_lock_release(lh, 1));
  rlock_lock_free(lh), rlock_lock_free(lw);
  rlock_client_free(h), rlock_client_free(w);
}

/* Three waiters of one client share one subscription; they end in the three
 * ways, one after the other: the channel is left (one UNSUBSCRIBE) only when
 * the last one is done. */
TEST(shared_channel) {
  rlock_client_t *h = th_client(srv->url, 0), *w = th_client(srv->url, 0);
  rlock_lock_t *lh = th_lock(h, "unsub:b"), *lw = th_lock(w, "unsub:b");
  const char *chan = CHAN("unsub:b");
  CHECK_OK(rlock_lock_acquire(lh, 1, 0, 60000, NULL));
  rlock_cancel_t *tok = NULL;
  CHECK_OK(rlock_cancel_new(&tok));
  done_t grant = {PTHREAD_MUTEX_INITIALIZER, 0, 0}, busy = grant, cancel = grant;
  CHECK_OK(rlock_lock_acquire_async(lw, 10, RLOCK_WAIT_FOREVER, 60000, NULL, on_done, &grant));
  CHECK_OK(rlock_lock_acquire_async(lw, 11, 1500, 60000, NULL, on_done, &busy));
  CHECK_OK(rlock_lock_acquire_async(lw, 12, RLOCK_WAIT_FOREVER, 60000, tok, on_done, &cancel));
  await_numsub(chan, 1);
  rlock_cancel_trigger(tok);
  CHECK_RC(status_of(&cancel), RLOCK_ECANCELED);
  CHECK_RC(status_of(&busy), RLOCK_EBUSY);
  CHECK_EQ(th_numsub(srv, chan), 1); /* the granted-to-be waiter still waits */
  CHECK_EQ(stats(w).unsubscribes, 0);
  CHECK_OK(rlock_lock_release(lh, 1));
  CHECK_OK(status_of(&grant));
  check_clean(w, chan, 1, 1);
  CHECK_OK(rlock_lock_release(lw, 10));
  rlock_cancel_free(tok);
  rlock_lock_free(lh), rlock_lock_free(lw);
  rlock_client_free(h), rlock_client_free(w);
}

static int w_resubscribed(void *arg) { return stats(arg).subscribes >= 2; }

/* The subscriber connection is killed while a waiter waits: the channel is
 * subscribed again on the new connection; after the grant it is left once. */
TEST(after_resubscribe) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = srv->url;
  o.client_name = "unsub-waiter";
  o.reconnect_min_ms = 20;
  o.reconnect_max_ms = 100;
  rlock_client_t *h = th_client(srv->url, 0), *w = NULL;
  CHECK_OK(rlock_client_new(&w, &o));
  rlock_lock_t *lh = th_lock(h, "unsub:c"), *lw = th_lock(w, "unsub:c");
  const char *chan = CHAN("unsub:c");
  CHECK_OK(rlock_lock_acquire(lh, 1, 0, 60000, NULL));
  done_t d = {PTHREAD_MUTEX_INITIALIZER, 0, 0};
  CHECK_OK(rlock_lock_acquire_async(lw, 2, RLOCK_WAIT_FOREVER, 60000, NULL, on_done, &d));
  await_numsub(chan, 1);
  /* kill the subscribed connections (the waiter's subscriber connection) */
  th_reply_free(th_cmd(srv, "CLIENT", "KILL", "SKIPME", "yes", "TYPE", "pubsub", NULL));
  CHECK_MSG(th_wait_until(w_resubscribed, w, 5000), "the channel was not subscribed again");
  await_numsub(chan, 1);
  CHECK_OK(rlock_lock_release(lh, 1));
  CHECK_OK(status_of(&d));
  check_clean(w, chan, 2, 1);
  CHECK_OK(rlock_lock_release(lw, 2));
  rlock_lock_free(lh), rlock_lock_free(lw);
  rlock_client_free(h), rlock_client_free(w);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 110);
  srv = th_server_start(NULL);
  RUN(grant_busy_cancel);
  RUN(shared_channel);
  RUN(after_resubscribe);
  th_server_stop(srv);
  return th_done();
}
