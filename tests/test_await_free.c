/* test_await_free.c -- rlock_lock_await_free (wait until a lock is free
 * without taking it; lib/semaphore.c OP_AWAIT_FREE) against a real
 * redis-server:
 *   free_at_once        a missing key: 0 at once, nothing subscribed
 *   woken_by_unlock     a lock held with a 60 s lease: the waiter subscribes
 *                       to the lock's channel and returns once the holder
 *                       unlocks, after a handful of PTTLs (no polling), and
 *                       the lock is left free (never taken)
 *   expiry_without_message  a hold whose lease runs out publishes nothing:
 *                       the waiter wakes at the holder's TTL
 *   bound               still held at wait_ms: RLOCK_EBUSY; 0 is one look
 *   rwlock              a read-write lock's key: woken by its own channel
 *   shares_channel      an acquirer of the same client parked on the same
 *                       channel still gets the unlock's wake-up (the
 *                       free-waiter hands it on), then its release wakes
 *                       the free-waiter
 *   simple_foreign_release  a simple lock of another library without a TTL,
 *                       released by a DEL (no message): the waiter looks
 *                       again as the kind's acquirers do, and sees it free
 *   resubscribed        the subscriber connection killed, the unlock's
 *                       message lost meanwhile: the resubscription wakes it
 *   client_freed        rlock_client_free while it waits: RLOCK_ECLOSED
 *   ends_beside_acquirer  a free-waiter that ends at its bound leaves a
 *                       parked acquirer of the same client its wake-up
 *   fair                a fair lock held with a 60 s lease, nobody queued: its
 *                       unlock, a force unlock and an undone acquire each
 *                       say "free" on the lock's own channel (rlock's
 *                       addition: Redisson's fair unlock tells only the
 *                       queue's head), so the waiter returns long before the
 *                       TTL (before: at its 20 s bound, still held); and an
 *                       unlock whose count check disagrees (the -1 path)
 *   spin                a spin lock (no pub/sub) held with a 60 s lease: the
 *                       waiter looks again as the spin lock's acquirers do
 *                       (its backoff, up to 128 ms), so an unlock is seen
 *                       long before the TTL (before: at its 20 s bound)
 *   last_ms             a look in the holder's last ms (PTTL 0): it looks
 *                       again 1 ms later (before: no timer, asleep forever)
 *   fair_no_ttl_java_unlock  a fair lock without a TTL freed by Redisson's
 *                       unlock (no message where it listens): seen within a
 *                       third of watchdog_timeout_ms (before: never)
 *   fair_long_ttl_java_unlock  the same with a TTL far longer than that
 *                       (Redisson's fixed lease): seen within a third of
 *                       watchdog_timeout_ms too (before: at the TTL)
 *   bad_input           a semaphore handle, a bad wait: RLOCK_EINVAL
 *   rides_out_lost_answers  CLIENT PAUSE ALL longer than (1 + retry_attempts)
 *                       command timeouts while its PTTL is out: the look is
 *                       sent again until the wait bound, and the unlock after
 *                       the pause wakes it (before: RLOCK_ETIMEDOUT) */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "harness.h"

static th_server_t *srv;

typedef struct waiter_arg {
  rlock_lock_t *lock;
  int64_t wait_ms;
  atomic_int done;
  int rc;
  int64_t took_ms;
} waiter_arg_t;

static void *waiter(void *p) {
  waiter_arg_t *a = p;
  int64_t t0 = th_now_ms();
  a->rc = rlock_lock_await_free(a->lock, a->wait_ms, NULL);
  a->took_ms = th_now_ms() - t0;
  atomic_store(&a->done, 1);
  return NULL;
}

static int is_done(void *p) { return atomic_load(&((waiter_arg_t *)p)->done); }

typedef struct numsub_want {
  const char *chan;
  long long n;
} numsub_want_t;

static int numsub_is(void *p) {
  numsub_want_t *w = p;
  return th_numsub(srv, w->chan) == w->n;
}

TEST(free_at_once) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = th_lock(c, "af:free");
  rlock_stats_t st;
  CHECK_OK(rlock_lock_await_free(l, 5000, NULL));
  CHECK_OK(rlock_lock_await_free(l, 0, NULL));
  CHECK_OK(rlock_lock_await_free(l, RLOCK_WAIT_FOREVER, NULL));
  rlock_client_stats(c, &st);
  CHECK_EQ(st.subscribes, 0);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "af:free", NULL), 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(woken_by_unlock) {
  rlock_client_t *h = th_client(srv->url, 0), *c = th_client(srv->url, 0);
  rlock_lock_t *hl = th_lock(h, "af:unlock"), *l = th_lock(c, "af:unlock");
  CHECK_OK(rlock_lock_lock(hl, 60000));
  long long pttl0 = th_cmdstat(srv, "pttl");
  waiter_arg_t a = {.lock = l, .wait_ms = RLOCK_WAIT_FOREVER};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, waiter, &a) == 0);
  numsub_want_t w = {"redisson_lock__channel:{af:unlock}", 1};
  CHECK_MSG(th_wait_until(numsub_is, &w, 5000), "the waiter did not subscribe to the lock's channel");
  CHECK_EQ(is_done(&a), 0);
  CHECK_OK(rlock_lock_unlock(hl));
  CHECK_MSG(th_wait_until(is_done, &a, 5000), "the unlock did not wake the waiter");
  pthread_join(t, NULL);
  CHECK_OK(a.rc);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "af:unlock", NULL), 0); /* never taken */
  long long pttls = th_cmdstat(srv, "pttl") - pttl0;
  CHECK_MSG(pttls >= 2 && pttls <= 4, "%lld PTTLs: a look before, one after the wake (and one on the subscription)",
            pttls);
  rlock_lock_free(l);
  rlock_lock_free(hl);
  rlock_client_free(c);
  rlock_client_free(h);
}

TEST(expiry_without_message) {
  rlock_client_t *h = th_client(srv->url, 0), *c = th_client(srv->url, 0);
  rlock_lock_t *hl = th_lock(h, "af:expiry"), *l = th_lock(c, "af:expiry");
  CHECK_OK(rlock_lock_lock(hl, 700));
  CHECK_OK(rlock_lock_await_free(l, 20000, NULL));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "af:expiry", NULL), 0);
  rlock_lock_free(l);
  rlock_lock_free(hl);
  rlock_client_free(c);
  rlock_client_free(h);
}

TEST(bound) {
  rlock_client_t *h = th_client(srv->url, 0), *c = th_client(srv->url, 0);
  rlock_lock_t *hl = th_lock(h, "af:bound"), *l = th_lock(c, "af:bound");
  CHECK_OK(rlock_lock_lock(hl, 60000));
  CHECK_RC(rlock_lock_await_free(l, 0, NULL), RLOCK_EBUSY);
  CHECK_RC(rlock_lock_await_free(l, 300, NULL), RLOCK_EBUSY);
  CHECK_MSG(strstr(rlock_last_error(), "still held") != NULL, "message: %s", rlock_last_error());
  rlock_cancel_t *k = NULL;
  CHECK_OK(rlock_cancel_new(&k));
  rlock_cancel_trigger(k);
  CHECK_RC(rlock_lock_await_free(l, RLOCK_WAIT_FOREVER, k), RLOCK_ECANCELED);
  rlock_cancel_free(k);
  CHECK_OK(rlock_lock_unlock(hl));
  rlock_lock_free(l);
  rlock_lock_free(hl);
  rlock_client_free(c);
  rlock_client_free(h);
}

TEST(rwlock) {
  rlock_client_t *h = th_client(srv->url, 0), *c = th_client(srv->url, 0);
  rlock_lock_t *r = NULL, *wr = NULL, *r2 = NULL, *w2 = NULL;
  CHECK_OK(rlock_rwlock_new(h, "af:rw", 5, &r, &wr));
  CHECK_OK(rlock_rwlock_new(c, "af:rw", 5, &r2, &w2));
  CHECK_OK(rlock_lock_lock(r, 60000));
  waiter_arg_t a = {.lock = w2, .wait_ms = 20000};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, waiter, &a) == 0);
  numsub_want_t w = {"redisson_rwlock:{af:rw}", 1};
  CHECK_MSG(th_wait_until(numsub_is, &w, 5000), "the waiter did not subscribe to the rwlock's channel");
  CHECK_OK(rlock_lock_unlock(r));
  CHECK_MSG(th_wait_until(is_done, &a, 5000), "the read unlock did not wake the waiter");
  pthread_join(t, NULL);
  CHECK_OK(a.rc);
  rlock_lock_free(r), rlock_lock_free(wr), rlock_lock_free(r2), rlock_lock_free(w2);
  rlock_client_free(c);
  rlock_client_free(h);
}

static atomic_int acquired;
static void on_acquired(rlock_lock_t *l, int status, int64_t v, void *arg) {
  (void)l, (void)v, (void)arg;
  if (status == 0) atomic_store(&acquired, 1);
}
static int got_it(void *p) {
  (void)p;
  return atomic_load(&acquired);
}

TEST(shares_channel) {
  rlock_client_t *h = th_client(srv->url, 0), *c = th_client(srv->url, 0);
  rlock_lock_t *hl = th_lock(h, "af:share"), *l = th_lock(c, "af:share");
  CHECK_OK(rlock_lock_lock(hl, 60000));
  /* the free-waiter joins first (it is the first parked of the channel) */
  waiter_arg_t a = {.lock = l, .wait_ms = 30000};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, waiter, &a) == 0);
  numsub_want_t w = {"redisson_lock__channel:{af:share}", 1};
  CHECK_MSG(th_wait_until(numsub_is, &w, 5000), "the waiter did not subscribe");
  CHECK_OK(rlock_lock_acquire_async(l, 77, 30000, 60000, NULL, on_acquired, NULL));
  /* the acquirer parked: a try, and one more once on the channel (it was
   * subscribed already), both answered. (With only its first try sent, a
   * try of it could run after the unlock and take the lock with no wake-up
   * at all: the case then passed with the free-waiter taking the wake-up, 2
   * of 6 runs.) */
  CHECK(TH_STAT_REACHES(c, acquire_attempts, 2, 5000));
  th_settled(c);
  CHECK_OK(rlock_lock_unlock(hl));
  /* the unlock's one wake-up: the free-waiter looks and hands it on */
  CHECK_MSG(th_wait_until(got_it, NULL, 5000), "the parked acquirer was not woken by the unlock");
  CHECK_OK(rlock_lock_release(l, 77)); /* the free-waiter (if it saw the acquirer's hold) wakes now */
  CHECK_MSG(th_wait_until(is_done, &a, 5000), "the free-waiter did not return");
  pthread_join(t, NULL);
  CHECK_OK(a.rc);
  rlock_lock_free(l);
  rlock_lock_free(hl);
  rlock_client_free(c);
  rlock_client_free(h);
}

/* A simple lock of another library (redis-py's Lock(timeout=None): SET
 * without a TTL) released by a compare-and-DEL, which publishes nothing. */
TEST(simple_foreign_release) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = NULL;
  CHECK_OK(rlock_lock_new_simple(c, "af:simple", 9, &l));
  th_reply_free(th_cmd(srv, "SET", "af:simple", "py-token", NULL));
  waiter_arg_t a = {.lock = l, .wait_ms = RLOCK_WAIT_FOREVER};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, waiter, &a) == 0);
  numsub_want_t w = {"rlock_simple__channel:{af:simple}", 1};
  CHECK_MSG(th_wait_until(numsub_is, &w, 5000), "the waiter did not subscribe to the simple lock's channel");
  CHECK_EQ(is_done(&a), 0);
  CHECK_EQ(th_cmd_int(srv, "DEL", "af:simple", NULL), 1);
  CHECK_MSG(th_wait_until(is_done, &a, 5000), "the free-waiter never saw the lock freed by another library");
  pthread_join(t, NULL);
  CHECK_OK(a.rc);
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(resubscribed) {
  rlock_client_t *h = th_client(srv->url, 0), *c = th_client(srv->url, 0);
  rlock_lock_t *hl = th_lock(h, "af:kill"), *l = th_lock(c, "af:kill");
  CHECK_OK(rlock_lock_lock(hl, 60000));
  waiter_arg_t a = {.lock = l, .wait_ms = RLOCK_WAIT_FOREVER};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, waiter, &a) == 0);
  numsub_want_t w = {"redisson_lock__channel:{af:kill}", 1};
  CHECK_MSG(th_wait_until(numsub_is, &w, 5000), "the waiter did not subscribe");
  th_reply_free(th_cmd(srv, "CLIENT", "KILL", "TYPE", "pubsub", NULL));
  CHECK_OK(rlock_lock_unlock(hl));
  CHECK_MSG(th_wait_until(is_done, &a, 5000),
            "the resubscription did not wake the waiter (the unlock's message was lost)");
  pthread_join(t, NULL);
  CHECK_OK(a.rc);
  rlock_lock_free(l);
  rlock_lock_free(hl);
  rlock_client_free(c);
  rlock_client_free(h);
}

static void *freer(void *p) {
  rlock_client_free(p);
  return NULL;
}

TEST(client_freed) {
  rlock_client_t *h = th_client(srv->url, 0), *c = th_client(srv->url, 0);
  rlock_lock_t *hl = th_lock(h, "af:cfree"), *l = th_lock(c, "af:cfree");
  CHECK_OK(rlock_lock_lock(hl, 60000));
  waiter_arg_t a = {.lock = l, .wait_ms = RLOCK_WAIT_FOREVER};
  pthread_t t, f;
  CHECK(pthread_create(&t, NULL, waiter, &a) == 0);
  numsub_want_t w = {"redisson_lock__channel:{af:cfree}", 1};
  CHECK_MSG(th_wait_until(numsub_is, &w, 5000), "the waiter did not subscribe");
  CHECK(pthread_create(&f, NULL, freer, c) == 0);
  CHECK_MSG(th_wait_until(is_done, &a, 5000), "rlock_client_free did not end the wait");
  pthread_join(t, NULL);
  pthread_join(f, NULL);
  CHECK_RC(a.rc, RLOCK_ECLOSED);
  rlock_lock_free(l);
  rlock_lock_free(hl);
  rlock_client_free(h);
}

TEST(ends_beside_acquirer) {
  rlock_client_t *h = th_client(srv->url, 0), *c = th_client(srv->url, 0);
  rlock_lock_t *hl = th_lock(h, "af:obt"), *l = th_lock(c, "af:obt");
  CHECK_OK(rlock_lock_lock(hl, 60000));
  waiter_arg_t a = {.lock = l, .wait_ms = 300};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, waiter, &a) == 0);
  numsub_want_t w = {"redisson_lock__channel:{af:obt}", 1};
  CHECK_MSG(th_wait_until(numsub_is, &w, 5000), "the waiter did not subscribe");
  CHECK_OK(rlock_lock_acquire_async(l, 77, 30000, 60000, NULL, on_acquired, NULL));
  pthread_join(t, NULL);
  CHECK_RC(a.rc, RLOCK_EBUSY);
  CHECK_OK(rlock_lock_unlock(hl));
  CHECK_MSG(th_wait_until(got_it, NULL, 5000), "the parked acquirer was not woken by the unlock");
  CHECK_OK(rlock_lock_release(l, 77));
  rlock_lock_free(l);
  rlock_lock_free(hl);
  rlock_client_free(c);
  rlock_client_free(h);
}

/* fair_acquire_undo.lua (from the source tree) run as lib/kinds/fair.c
 * sends it for a try whose answer was lost, the owner keeping 0 holds. */
static void th_fair_undo(th_server_t *srv_, const char *name, const char *owner) {
  char path[512], k2[128], k3[128], k4[128], k5[160];
  snprintf(path, sizeof path, "%s/lua/fair_acquire_undo.lua", RLOCK_SOURCE_DIR);
  FILE *f = fopen(path, "rb");
  CHECK_MSG(f != NULL, "cannot open %s", path);
  char body[16384];
  size_t n = fread(body, 1, sizeof body - 1, f);
  fclose(f);
  body[n] = 0;
  snprintf(k2, sizeof k2, "redisson_lock_queue:{%s}", name);
  snprintf(k3, sizeof k3, "redisson_lock_timeout:{%s}", name);
  snprintf(k4, sizeof k4, "redisson_lock__channel:{%s}", name);
  snprintf(k5, sizeof k5, "rlock_acquire_latch:{%s}:test-undo", name);
  const char *argv[] = {"EVAL", body, "5", name, k2, k3, k4, k5, "0", owner, "publish", "10000", "0", "5000", "0"};
  redisReply *r = th_cmdv(srv_, 15, argv, NULL);
  CHECK_MSG(r->type == REDIS_REPLY_INTEGER && r->integer == 1, "undo: type %d, %lld, %s", r->type, r->integer,
            r->str ? r->str : "");
  th_reply_free(r);
}

/* One free-waiter on the fair lock name, woken by what frees it (free()),
 * well before the lock's 60 s lease or the waiter's 20 s bound. */
static void fair_freed_by(const char *name, void (*hold)(rlock_lock_t *),
                          void (*free_it)(rlock_lock_t *, const char *)) {
  rlock_client_t *h = th_client(srv->url, 0), *c = th_client(srv->url, 0);
  rlock_lock_t *hl = NULL, *l = NULL;
  CHECK_OK(rlock_lock_new_fair(h, name, strlen(name), &hl));
  CHECK_OK(rlock_lock_new_fair(c, name, strlen(name), &l));
  hold(hl);
  waiter_arg_t a = {.lock = l, .wait_ms = 20000};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, waiter, &a) == 0);
  char chan[128];
  snprintf(chan, sizeof chan, "redisson_lock__channel:{%s}", name);
  numsub_want_t w = {chan, 1};
  CHECK_MSG(th_wait_until(numsub_is, &w, 5000), "the waiter did not subscribe to the lock's channel");
  free_it(hl, name);
  CHECK_MSG(th_wait_until(is_done, &a, 15000), "%s: freeing the fair lock did not wake the free-waiter", name);
  pthread_join(t, NULL);
  CHECK_OK(a.rc);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", name, NULL), 0);
  rlock_lock_free(l);
  rlock_lock_free(hl);
  rlock_client_free(c);
  rlock_client_free(h);
}
static void hold_60s(rlock_lock_t *l) { CHECK_OK(rlock_lock_lock(l, 60000)); }
static void by_unlock(rlock_lock_t *l, const char *name) {
  (void)name;
  CHECK_OK(rlock_lock_unlock(l));
}
static void by_force(rlock_lock_t *l, const char *name) {
  (void)name;
  int was = 0;
  CHECK_OK(rlock_lock_force_unlock(l, &was));
  CHECK_EQ(was, 1);
}
/* The holder's own second acquire, then the undo of it and of the first
 * hold (fair_acquire_undo.lua keeping 0): the lock goes free by an undo. */
static void hold_to_undo(rlock_lock_t *l) { CHECK_OK(rlock_lock_lock(l, 60000)); }
static void by_undo(rlock_lock_t *l, const char *name) {
  (void)l;
  /* fair_acquire_undo.lua as lib/kinds/fair.c sends it for a hold the
   * client may keep 0 of: the one field goes, the lock is free */
  char *owner = NULL;
  redisReply *r = th_cmd(srv, "HKEYS", name, NULL);
  CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 1);
  owner = strdup(r->element[0]->str);
  th_reply_free(r);
  th_fair_undo(srv, name, owner);
  free(owner);
}
/* The unlock's count check disagrees (the server counts 2 holds, the client
 * 1): fair_unlock.lua's -1 path removes the owner's field and the lock goes
 * free; it says so as a plain unlock does. */
static void by_mismatch(rlock_lock_t *l, const char *name) {
  redisReply *r = th_cmd(srv, "HKEYS", name, NULL);
  CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 1);
  char *owner = strdup(r->element[0]->str);
  th_reply_free(r);
  th_reply_free(th_cmd(srv, "HSET", name, owner, "2", NULL));
  free(owner);
  int rc = rlock_lock_unlock(l);
  CHECK_MSG(rc == 0 || rc == RLOCK_ENOTHELD, "unlock: %s (%s)", rlock_err_name(rc), rlock_last_error());
  printf("# mismatch unlock: %s\n", rc ? rlock_err_name(rc) : "0");
}
TEST(fair) {
  fair_freed_by("af:fair:unlock", hold_60s, by_unlock);
  fair_freed_by("af:fair:force", hold_60s, by_force);
  fair_freed_by("af:fair:undo", hold_to_undo, by_undo);
  fair_freed_by("af:fair:mismatch", hold_60s, by_mismatch);
}

TEST(spin) {
  rlock_client_t *h = th_client(srv->url, 0), *c = th_client(srv->url, 0);
  rlock_lock_t *hl = NULL, *l = NULL;
  CHECK_OK(rlock_lock_new_spin(h, "af:spin", 7, NULL, &hl));
  CHECK_OK(rlock_lock_new_spin(c, "af:spin", 7, NULL, &l));
  CHECK_OK(rlock_lock_lock(hl, 60000));
  long long pttl0 = th_cmdstat(srv, "pttl");
  waiter_arg_t a = {.lock = l, .wait_ms = 20000};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, waiter, &a) == 0);
  CHECK(!th_wait_until(is_done, &a, 300)); /* held: it waits (a bound, not a sync) */
  CHECK_OK(rlock_lock_unlock(hl));
  CHECK_MSG(th_wait_until(is_done, &a, 15000), "a spin lock's unlock was not seen by the free-waiter");
  pthread_join(t, NULL);
  CHECK_OK(a.rc);
  long long pttls = th_cmdstat(srv, "pttl") - pttl0;
  printf("# spin: %lld PTTLs while held about %lld ms\n", pttls, (long long)a.took_ms);
  CHECK_EQ(th_numsub(srv, "redisson_lock__channel:{af:spin}"), 0); /* no pub/sub */
  rlock_lock_free(l);
  rlock_lock_free(hl);
  rlock_client_free(c);
  rlock_client_free(h);
}

/* A look in the holder's last ms: PTTL answers 0 (the key lives to the end
 * of that ms). That is a TTL of 0 ms, not "no TTL": the waiter looks again
 * at once. Here a simple lock of another program (SET PX 20, no message at
 * its end) and 8 free-waiters polling it, 60 times: some look in its last ms
 * (the count of 0 answers is not known to the test; each waiter must end
 * within 5 s of the key's end all the same). Before: a look that got 0
 * armed no timer (0 read as "none"), and the waiter slept on with the lock
 * free, forever. */
#define LAST_MS_WAITERS 8
TEST(last_ms) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = NULL;
  CHECK_OK(rlock_lock_new_simple(c, "af:lastms", 9, &l));
  for (int trial = 0; trial < 60; trial++) {
    th_reply_free(th_cmd(srv, "SET", "af:lastms", "other-program", "PX", "20", NULL));
    waiter_arg_t a[LAST_MS_WAITERS];
    pthread_t t[LAST_MS_WAITERS];
    for (int i = 0; i < LAST_MS_WAITERS; i++) {
      a[i] = (waiter_arg_t){.lock = l, .wait_ms = RLOCK_WAIT_FOREVER};
      CHECK(pthread_create(&t[i], NULL, waiter, &a[i]) == 0);
    }
    for (int i = 0; i < LAST_MS_WAITERS; i++) {
      CHECK_MSG(th_wait_until(is_done, &a[i], 5000), "trial %d: waiter %d asleep with the lock free", trial, i);
      pthread_join(t[i], NULL);
      CHECK_OK(a[i].rc);
    }
  }
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* A fair lock held without a TTL (Redisson's clearExpire: PERSIST) and
 * freed by Redisson's unlock: its DEL publishes on the queue head's channel
 * only, nothing on the lock's own (nobody queued: nothing at all). No TTL,
 * no message: the waiter looks again every third of watchdog_timeout_ms (as
 * a spin lock's waiter without a TTL). Before: no timer at all, asleep
 * beside the free lock forever. */
TEST(fair_no_ttl_java_unlock) {
  rlock_client_t *c = th_client(srv->url, 3000);
  rlock_lock_t *l = NULL;
  CHECK_OK(rlock_lock_new_fair(c, "af:fair:nottl", 13, &l));
  th_reply_free(th_cmd(srv, "HSET", "af:fair:nottl", "00000000-0000-4000-8000-000000000000:1", "1", NULL));
  waiter_arg_t a = {.lock = l, .wait_ms = RLOCK_WAIT_FOREVER};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, waiter, &a) == 0);
  numsub_want_t w = {"redisson_lock__channel:{af:fair:nottl}", 1};
  CHECK_MSG(th_wait_until(numsub_is, &w, 5000), "the waiter did not subscribe to the lock's channel");
  th_reply_free(th_cmd(srv, "DEL", "af:fair:nottl", NULL)); /* Redisson's fair unlock, nobody queued */
  CHECK_MSG(th_wait_until(is_done, &a, 15000), "a fair lock without a TTL freed by Java: the waiter slept on");
  pthread_join(t, NULL);
  CHECK_OK(a.rc);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* A fair lock held with a fixed lease far longer than watchdog_timeout_ms
 * (Redisson's lock(60 s)), freed by Redisson's fair unlock: no message where
 * the waiter listens, as above. Its TTL must not bound the wait: the waiter
 * looks again every third of watchdog_timeout_ms. Before: it slept to the
 * TTL (60 s) beside the free lock. */
TEST(fair_long_ttl_java_unlock) {
  rlock_client_t *c = th_client(srv->url, 3000);
  rlock_lock_t *l = NULL;
  CHECK_OK(rlock_lock_new_fair(c, "af:fair:ttl", 11, &l));
  th_reply_free(th_cmd(srv, "HSET", "af:fair:ttl", "00000000-0000-4000-8000-000000000000:1", "1", NULL));
  th_reply_free(th_cmd(srv, "PEXPIRE", "af:fair:ttl", "60000", NULL));
  waiter_arg_t a = {.lock = l, .wait_ms = RLOCK_WAIT_FOREVER};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, waiter, &a) == 0);
  numsub_want_t w = {"redisson_lock__channel:{af:fair:ttl}", 1};
  CHECK_MSG(th_wait_until(numsub_is, &w, 5000), "the waiter did not subscribe to the lock's channel");
  th_reply_free(th_cmd(srv, "DEL", "af:fair:ttl", NULL)); /* Redisson's fair unlock, nobody queued */
  int done = th_wait_until(is_done, &a, 15000);
  if (!done) th_reply_free(th_cmd(srv, "PUBLISH", "redisson_lock__channel:{af:fair:ttl}", "0", NULL)); /* end it */
  pthread_join(t, NULL);
  CHECK_MSG(done, "a fair lock with a 60 s TTL freed by Java: the waiter slept on (to the TTL)");
  CHECK_OK(a.rc);
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(bad_input) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = th_lock(c, "af:bad");
  CHECK_RC(rlock_lock_await_free(NULL, 0, NULL), RLOCK_EINVAL);
  CHECK_RC(rlock_lock_await_free(l, -7, NULL), RLOCK_EINVAL);
  rlock_semaphore_t *s = NULL;
  CHECK_OK(rlock_semaphore_new(c, "af:bad", 6, &s));
  CHECK_RC(rlock_lock_await_free((rlock_lock_t *)(void *)s, 0, NULL), RLOCK_EINVAL);
  rlock_semaphore_free(s);
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(rides_out_lost_answers) {
  rlock_client_t *h = th_client(srv->url, 0), *c = th_client_timeouts(srv->url, 300, 3);
  rlock_lock_t *hl = th_lock(h, "af:ride"), *l = th_lock(c, "af:ride");
  CHECK_OK(rlock_lock_lock(hl, 60000));
  rlock_stats_t s0, s1;
  rlock_client_stats(c, &s0);
  /* 2000 ms: more than 4 sends of 300 ms each */
  redisReply *r = th_cmd(srv, "CLIENT", "PAUSE", "2000", "ALL", NULL);
  CHECK_MSG(r->type == REDIS_REPLY_STATUS, "CLIENT PAUSE: %s", r->str);
  th_reply_free(r);
  waiter_arg_t a = {.lock = l, .wait_ms = 20000};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, waiter, &a) == 0);
  th_reply_free(th_cmd(srv, "PING", NULL)); /* answered once the pause is over */
  rlock_client_stats(c, &s1);
  CHECK_MSG(s1.timeouts - s0.timeouts >= 4, "%llu timeouts: the pause did not bite",
            (unsigned long long)(s1.timeouts - s0.timeouts));
  numsub_want_t w = {"redisson_lock__channel:{af:ride}", 1};
  th_wait_until(numsub_is, &w, 5000);
  CHECK_MSG(!is_done(&a), "the waiter ended %s during the pause", rlock_err_name(a.rc));
  CHECK_OK(rlock_lock_unlock(hl));
  CHECK_MSG(th_wait_until(is_done, &a, 10000), "the unlock did not wake the waiter");
  pthread_join(t, NULL);
  CHECK_OK(a.rc);
  rlock_lock_free(l);
  rlock_lock_free(hl);
  rlock_client_free(c);
  rlock_client_free(h);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 120);
  srv = th_server_start(NULL);
  RUN(free_at_once);
  RUN(woken_by_unlock);
  RUN(expiry_without_message);
  RUN(bound);
  RUN(rwlock);
  RUN(shares_channel);
  RUN(simple_foreign_release);
  RUN(resubscribed);
  RUN(client_freed);
  atomic_store(&acquired, 0);
  RUN(ends_beside_acquirer);
  RUN(fair);
  RUN(spin);
  RUN(last_ms);
  RUN(rides_out_lost_answers);
  RUN(fair_no_ttl_java_unlock);
  RUN(fair_long_ttl_java_unlock);
  RUN(bad_input);
  th_server_stop(srv);
  return th_done();
}
