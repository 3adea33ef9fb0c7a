/* test_multilock.c -- MultiLock (rlock_multilock_t) against real
 * redis-servers:
 *   all_and_release       every member taken, valid-until the earliest,
 *                         released in parallel; members on two servers and of
 *                         two kinds (reentrant, simple)
 *   member_held_elsewhere a member held by another owner: the acquire fails
 *                         within its wait, names that member, and leaves
 *                         nothing of its own behind
 *   cancelled             a wait (RLOCK_WAIT_FOREVER) on a member held
 *                         elsewhere, cancelled: RLOCK_ECANCELED, the member
 *                         taken before it released
 *   bad_arguments         the same lock twice, a negative wait: RLOCK_EINVAL
 *                         before anything is sent
 *   one_lease_at_the_end  a fixed lease: every member's PTTL is at most the
 *                         lease and at least the lease minus the time the
 *                         acquire and the reads took (they expire together);
 *                         valid-until within the same bounds
 *   fixed_lease_forever   a fixed lease shorter than the wait with
 *                         RLOCK_WAIT_FOREVER: the member taken first survives
 *                         the wait, then gets the lease
 *   gone_before_relet     a member deleted while a later one is awaited: the
 *                         final step finds it gone, the acquire fails
 *                         RLOCK_ENOTHELD naming it, and nothing is left held
 *   paused_at_relet       the server of the member taken first paused
 *                         (CLIENT PAUSE) while a later one is awaited: its
 *                         final step times out, the acquire fails naming it,
 *                         the other member is released at once; the paused
 *                         one (its release timed out too) by the watchdog
 *                         lease of its last renewal
 *   opposite_orders       two processes take overlapping sets given in
 *                         opposite orders, 25 times each: never a deadlock
 *                         (every acquire succeeds well within its wait), never
 *                         two inside at once
 *   lost_fires_once       a member force-unlocked by another client: the
 *                         MultiLock's lost callback fires once, naming it,
 *                         and the member clients' own callbacks still run;
 *                         a second member lost later: no second call
 *   lost_other_owner_failed owner 7 holds the MultiLock, owner 8's acquire of
 *                         it fails (busy), owner 7's member is lost: the
 *                         callback still fires for owner 7 (it did not: the
 *                         failed acquire disarmed the one report slot)
 *   lease_not_renewed     after the final step no renewal pushes a member's
 *                         TTL back up: both run out by themselves, not before
 *                         the reported valid-until
 *   lost_during_wait_watchdog  with the watchdog lease, a member taken
 *                         first is deleted and reported lost by its client
 *                         while a later one is awaited: the acquire fails
 *                         RLOCK_ENOTHELD naming it, the later one given back
 *                         (it succeeded, the member not held)
 *   outer_hold_not_cut    a member the owner already held with a longer
 *                         fixed lease keeps it through the final step and
 *                         after the MultiLock's release; the other gets the lease
 *   transient_error_retried  the second member's server paused for 2 s: its
 *                         tries time out, the first member is given back and
 *                         the acquire tried again until it succeeds (issue 9)
 *   transient_error_until_wait_runs_out  the same with a pause longer than
 *                         the wait: the member's error within the wait, nothing
 *                         left held on either server
 *   cancel_while_retrying  RLOCK_WAIT_FOREVER retrying after transient
 *                         errors, cancelled after a failed round:
 *                         RLOCK_ECANCELED, nothing held
 *   hard_error_fails_at_once  a member whose key is a string (RLOCK_ESERVER):
 *                         no retry, fails at once, the first member given back
 *   canonical_order_any_spelling  the same two servers spelled differently
 *                         (localhost, a trailing /0): the same member first;
 *                         one lock spelled two ways: a member twice (EINVAL)
 *   unix_socket_any_spelling  one lock on a unix socket spelled two ways
 *                         (dir/redis.sock, dir/./redis.sock): a member twice
 *                         (RLOCK_EINVAL), not two members that wait for each
 *                         other
 *   made_in_a_callback    rlock_multilock_new in a member client's callback:
 *                         one lock spelled two ways is a member twice there
 *                         too (that member's server was unknown there)
 *   release_from_lost_cb  rlock_multilock_release from the lost callback:
 *                         RLOCK_EDEADLK at once (it hung the member client's
 *                         I/O thread, waiting for its own answers)
 *   read_relet_keeps_other_readers  a read lock in a MultiLock with a short
 *                         lease, another client's reader holding the same
 *                         read-write lock longer: the final step leaves NAME's
 *                         TTL at least to that reader's valid-until, and no
 *                         writer gets in before it (the exact lease cut NAME
 *                         to the MultiLock's)
 *   read_relet_keeps_write_lease  the writer's own read lock in a MultiLock
 *                         with a short lease: NAME (the write hold's lease)
 *                         lives until the write hold's valid-until
 *   write_relet_keeps_read_holds  the write lock in a MultiLock with a short
 *                         lease while its owner holds a read lock inside it
 *                         for longer: NAME lives until that read hold's
 *                         valid-until
 *   relet_wakes_waiters   a waiter parked on a member's watchdog TTL (20 s)
 *                         while a later member was awaited: the final step
 *                         cuts the TTL to the 300 ms lease, which runs out
 *                         unreleased; the waiter gets the lock soon after,
 *                         not at the end of the TTL it parked on
 *   relet_write_says_1    the final step's message for a write member is
 *                         the write unlock's "1" (Redisson's READ_UNLOCK:
 *                         every Java waiter of a JVM tries again), not "0",
 *                         which wakes one per JVM: the other readers parked
 *                         on the old TTL slept on after the lease ran out
 *                         beside a lock they could read
 *   relet_wakes_fair_waiter  the same for a fair member: its queue's head,
 *                         on its own channel, is told (before: nothing was
 *                         sent, it slept on the wait it parked on) */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static th_server_t *s1, *s2;

static int exists(th_server_t *s, const char *key) { return (int)th_cmd_int(s, "EXISTS", key, NULL); }

TEST(all_and_release) {
  rlock_client_t *c1 = th_client(s1->url, 0), *c2 = th_client(s2->url, 0);
  rlock_lock_t *a = th_lock(c1, "ml:a"), *b = th_lock(c2, "ml:b"), *s = NULL;
  CHECK_OK(rlock_lock_new_simple(c1, "ml:s", 4, &s));
  rlock_lock_t *members[3] = {s, b, a};
  rlock_multilock_t *m = NULL;
  CHECK_OK(rlock_multilock_new(&m, members, 3));
  CHECK_OK(rlock_multilock_acquire(m, RLOCK_OWNER_SELF, 0, 20000, NULL));
  CHECK(exists(s1, "ml:a") && exists(s2, "ml:b") && exists(s1, "ml:s"));
  int64_t vu = 0, each = 0;
  CHECK_OK(rlock_multilock_valid_until(m, RLOCK_OWNER_SELF, &vu));
  CHECK_OK(rlock_lock_valid_until(a, RLOCK_OWNER_SELF, &each));
  CHECK(vu <= each && vu > rlock_now_ms() + 10000);
  CHECK_OK(rlock_multilock_release(m, RLOCK_OWNER_SELF));
  CHECK(!exists(s1, "ml:a") && !exists(s2, "ml:b") && !exists(s1, "ml:s"));
  CHECK_RC(rlock_multilock_release(m, RLOCK_OWNER_SELF), RLOCK_ENOTHELD);
  rlock_multilock_free(m);
  rlock_lock_free(a), rlock_lock_free(b), rlock_lock_free(s);
  rlock_client_free(c1), rlock_client_free(c2);
}

TEST(member_held_elsewhere) {
  rlock_client_t *c = th_client(s1->url, 0), *other = th_client(s1->url, 0);
  rlock_lock_t *x = th_lock(c, "ml:x"), *y = th_lock(c, "ml:y"), *z = th_lock(c, "ml:z");
  rlock_lock_t *oy = th_lock(other, "ml:y");
  CHECK_OK(rlock_lock_acquire(oy, 7, 0, 60000, NULL));
  rlock_lock_t *members[3] = {z, x, y};
  rlock_multilock_t *m = NULL;
  CHECK_OK(rlock_multilock_new(&m, members, 3));
  int64_t t0 = rlock_now_ms();
  CHECK_RC(rlock_multilock_acquire(m, RLOCK_OWNER_SELF, 300, RLOCK_LEASE_WATCHDOG, NULL), RLOCK_EBUSY);
  CHECK(rlock_now_ms() - t0 < 300 + 5000); /* its wait, plus a margin for a loaded machine */
  CHECK_MSG(strstr(rlock_last_error(), "ml:y"), "message: %s", rlock_last_error());
  /* ml:x was taken first (canonical order) and given back; ml:z never taken */
  CHECK(!exists(s1, "ml:x") && !exists(s1, "ml:z"));
  CHECK(exists(s1, "ml:y")); /* the other owner's hold is untouched */
  int held = 0;
  CHECK_OK(rlock_lock_is_held(oy, 7, &held));
  CHECK_EQ(held, 1);
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  CHECK_EQ(st.held, 0);
  CHECK_OK(rlock_lock_release(oy, 7));
  CHECK_OK(rlock_multilock_acquire(m, RLOCK_OWNER_SELF, 0, 10000, NULL)); /* free now */
  CHECK_OK(rlock_multilock_release(m, RLOCK_OWNER_SELF));
  rlock_multilock_free(m);
  rlock_lock_free(x), rlock_lock_free(y), rlock_lock_free(z), rlock_lock_free(oy);
  rlock_client_free(c), rlock_client_free(other);
}

typedef struct canceller {
  rlock_cancel_t *cancel;
} canceller_t;

static int x_taken(void *arg) {
  (void)arg;
  return exists(s1, "ml:cx") == 1;
}

/* The MultiLock waits for ml:cy: ml:cx taken, and a waiter subscribed to ml:cy's channel. */
static int waits_for_cy(void *arg) {
  (void)arg;
  return x_taken(NULL) && th_numsub(s1, "redisson_lock__channel:{ml:cy}") >= 1;
}

static void *cancel_when_waiting(void *arg) {
  canceller_t *k = arg;
  CHECK(th_wait_until(waits_for_cy, NULL, 20000));
  rlock_cancel_trigger(k->cancel);
  return NULL;
}

TEST(cancelled) {
  rlock_client_t *c = th_client(s1->url, 0), *other = th_client(s1->url, 0);
  rlock_lock_t *x = th_lock(c, "ml:cx"), *y = th_lock(c, "ml:cy"), *oy = th_lock(other, "ml:cy");
  CHECK_OK(rlock_lock_acquire(oy, 3, 0, 60000, NULL));
  rlock_lock_t *members[2] = {y, x};
  rlock_multilock_t *m = NULL;
  CHECK_OK(rlock_multilock_new(&m, members, 2));
  canceller_t k;
  CHECK_OK(rlock_cancel_new(&k.cancel));
  pthread_t t;
  pthread_create(&t, NULL, cancel_when_waiting, &k);
  CHECK_RC(rlock_multilock_acquire(m, RLOCK_OWNER_SELF, RLOCK_WAIT_FOREVER, RLOCK_LEASE_WATCHDOG, k.cancel),
           RLOCK_ECANCELED);
  pthread_join(t, NULL);
  CHECK_EQ(exists(s1, "ml:cx"), 0); /* taken first, given back */
  CHECK_OK(rlock_lock_release(oy, 3));
  rlock_cancel_free(k.cancel);
  rlock_multilock_free(m);
  rlock_lock_free(x), rlock_lock_free(y), rlock_lock_free(oy);
  rlock_client_free(c), rlock_client_free(other);
}

TEST(bad_arguments) {
  rlock_client_t *c = th_client(s1->url, 0);
  rlock_lock_t *a = th_lock(c, "ml:dup"), *a2 = th_lock(c, "ml:dup"), *b = th_lock(c, "ml:other");
  rlock_lock_t *dup[2] = {a, a2}, *two[2] = {a, b};
  rlock_multilock_t *m = NULL;
  CHECK_RC(rlock_multilock_new(&m, dup, 2), RLOCK_EINVAL);
  CHECK(m == NULL);
  CHECK_OK(rlock_multilock_new(&m, two, 2));
  CHECK_RC(rlock_multilock_acquire(m, RLOCK_OWNER_SELF, -5, 5000, NULL), RLOCK_EINVAL);
  CHECK(!exists(s1, "ml:dup") && !exists(s1, "ml:other"));
  rlock_multilock_free(m);
  rlock_lock_free(a), rlock_lock_free(a2), rlock_lock_free(b);
  rlock_client_free(c);
}

/* A child process: 25 times, the MultiLock over names (in the order given),
 * then INCR/DECR a counter inside: it must read 1. Exit 0, or the step that failed. */
static int worker(const char *const *names, size_t n) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = s1->url;
  rlock_client_t *c;
  if (rlock_client_new(&c, &o)) return 10;
  rlock_lock_t *ls[8];
  for (size_t i = 0; i < n; i++)
    if (rlock_lock_new(c, names[i], strlen(names[i]), &ls[i])) return 11;
  rlock_multilock_t *m;
  if (rlock_multilock_new(&m, ls, n)) return 12;
  for (int round = 0; round < 25; round++) {
    /* 30 s: far more than 25 short sections take; a deadlock would use it all up */
    if (rlock_multilock_acquire(m, RLOCK_OWNER_SELF, 30000, RLOCK_LEASE_WATCHDOG, NULL)) return 20;
    const char *incr[2] = {"INCR", "ml:inside"}, *decr[2] = {"DECR", "ml:inside"};
    rlock_reply_t *r = NULL;
    if (rlock_client_command(c, 2, incr, NULL, &r) || r->type != RLOCK_REPLY_INTEGER) return 21;
    int alone = r->integer == 1;
    rlock_reply_free(r);
    if (rlock_client_command(c, 2, decr, NULL, &r)) return 22;
    rlock_reply_free(r);
    if (!alone) return 23;
    if (rlock_multilock_release(m, RLOCK_OWNER_SELF)) return 24;
  }
  rlock_multilock_free(m);
  for (size_t i = 0; i < n; i++) rlock_lock_free(ls[i]);
  rlock_client_free(c);
  return 0;
}

/* A forked child ends by exec (exit status rc): it must not run the exit
 * path of the parent's memory it inherited (valgrind would report the
 * parent's cached connections as its own leaks). */
static void exit_by_exec(int rc) {
  char code[16];
  snprintf(code, sizeof code, "%d", rc);
  execl("/bin/sh", "sh", "-c", "exit $0", code, (char *)NULL);
  _exit(rc);
}

TEST(opposite_orders) {
  static const char *fwd[3] = {"ml:o1", "ml:o2", "ml:o3"}, *rev[3] = {"ml:o3", "ml:o2", "ml:o1"};
  pid_t p1 = th_fork();
  if (p1 == 0) exit_by_exec(worker(fwd, 3));
  pid_t p2 = th_fork();
  if (p2 == 0) exit_by_exec(worker(rev, 3));
  CHECK_EQ(th_wait_child(p1), 0);
  CHECK_EQ(th_wait_child(p2), 0);
  CHECK(!exists(s1, "ml:o1") && !exists(s1, "ml:o2") && !exists(s1, "ml:o3"));
}

/* What a lost callback saw (it runs on an I/O thread). */
typedef struct seen {
  pthread_mutex_t mu;
  int calls;
  char name[64];
  uint64_t owner;
  rlock_lost_reason_t reason;
} seen_t;

static void on_lost(const char *name, size_t len, uint64_t owner, rlock_lost_reason_t reason, void *arg) {
  seen_t *s = arg;
  pthread_mutex_lock(&s->mu);
  if (s->calls++ == 0) {
    snprintf(s->name, sizeof s->name, "%.*s", (int)len, name);
    s->owner = owner;
    s->reason = reason;
  }
  pthread_mutex_unlock(&s->mu);
}

static int calls(void *arg) {
  seen_t *s = arg;
  pthread_mutex_lock(&s->mu);
  int n = s->calls;
  pthread_mutex_unlock(&s->mu);
  return n;
}

static int called(void *arg) { return calls(arg) > 0; }

TEST(lost_fires_once) {
  /* a 3 s watchdog: a renewal every second finds a deleted hold */
  rlock_client_t *c1 = th_client(s1->url, 3000), *c2 = th_client(s2->url, 3000);
  rlock_client_t *o1 = th_client(s1->url, 0), *o2 = th_client(s2->url, 0);
  rlock_lock_t *a = th_lock(c1, "ml:la"), *b = th_lock(c2, "ml:lb");
  rlock_lock_t *oa = th_lock(o1, "ml:la"), *ob = th_lock(o2, "ml:lb");
  seen_t multi = {.mu = PTHREAD_MUTEX_INITIALIZER}, cl1 = multi, cl2 = multi;
  rlock_client_on_lost(c1, on_lost, &cl1);
  rlock_client_on_lost(c2, on_lost, &cl2);
  rlock_lock_t *members[2] = {b, a};
  rlock_multilock_t *m = NULL;
  CHECK_OK(rlock_multilock_new(&m, members, 2));
  rlock_multilock_on_lost(m, on_lost, &multi);
  CHECK_OK(rlock_multilock_acquire(m, 42, 0, RLOCK_LEASE_WATCHDOG, NULL));
  int was = 0;
  CHECK_OK(rlock_lock_force_unlock(oa, &was));
  CHECK_EQ(was, 1);
  /* bound: 10 watchdog periods (a renewal every second), for a loaded machine */
  CHECK(th_wait_until(called, &multi, 30000));
  CHECK_MSG(!strcmp(multi.name, "ml:la"), "name: %s", multi.name);
  CHECK_EQ(multi.owner, 42);
  CHECK_EQ(multi.reason, RLOCK_LOST_DELETED);
  CHECK(th_wait_until(called, &cl1, 30000)); /* the client's own callback still runs */
  CHECK_MSG(!strcmp(cl1.name, "ml:la"), "name: %s", cl1.name);
  /* the second member lost too: its client reports it, the MultiLock does not again */
  CHECK_OK(rlock_lock_force_unlock(ob, &was));
  CHECK_EQ(was, 1);
  CHECK(th_wait_until(called, &cl2, 30000));
  CHECK_EQ(calls(&multi), 1);
  CHECK_EQ(calls(&cl1), 1);
  rlock_multilock_release(m, 42); /* nothing held any more */
  rlock_multilock_free(m);
  rlock_lock_free(a), rlock_lock_free(b), rlock_lock_free(oa), rlock_lock_free(ob);
  rlock_client_free(c1), rlock_client_free(c2), rlock_client_free(o1), rlock_client_free(o2);
}

static int64_t pttl(th_server_t *s, const char *key) { return th_cmd_int(s, "PTTL", key, NULL); }

TEST(one_lease_at_the_end) {
  rlock_client_t *c1 = th_client(s1->url, 0), *c2 = th_client(s2->url, 0);
  rlock_lock_t *a = th_lock(c1, "ml:ea"), *b = th_lock(c2, "ml:eb"), *s = NULL;
  CHECK_OK(rlock_lock_new_simple(c1, "ml:es", 5, &s));
  rlock_lock_t *members[3] = {s, b, a};
  rlock_multilock_t *m = NULL;
  CHECK_OK(rlock_multilock_new(&m, members, 3));
  const int64_t lease = 8000;
  int64_t t0 = rlock_now_ms();
  CHECK_OK(rlock_multilock_acquire(m, 5, 20000, lease, NULL));
  int64_t ta = rlock_now_ms();
  int64_t vu = 0;
  CHECK_OK(rlock_multilock_valid_until(m, 5, &vu));
  int64_t ta_ = pttl(s1, "ml:ea"), tb = pttl(s2, "ml:eb"), ts = pttl(s1, "ml:es");
  int64_t took = rlock_now_ms() - t0; /* the acquire and the reads: the most a TTL can have run down */
  int64_t got[3] = {ta_, tb, ts};
  for (int i = 0; i < 3; i++)
    CHECK_MSG(got[i] <= lease && got[i] >= lease - took - 2, "pttl %lld, lease %lld, took %lld", (long long)got[i],
              (long long)lease, (long long)took);
  printf("lease %lld: PTTLs %lld %lld %lld, %lld ms after the acquire began\n", (long long)lease, (long long)ta_,
         (long long)tb, (long long)ts, (long long)took);
  /* valid until: the lease counted from the final step's send (after t0, before ta) */
  CHECK_MSG(vu >= t0 + lease && vu <= ta + lease, "valid until %lld, [%lld, %lld]", (long long)vu,
            (long long)(t0 + lease), (long long)(ta + lease));
  CHECK_OK(rlock_multilock_release(m, 5));
  CHECK(!exists(s1, "ml:ea") && !exists(s2, "ml:eb") && !exists(s1, "ml:es"));
  rlock_multilock_free(m);
  rlock_lock_free(a), rlock_lock_free(b), rlock_lock_free(s);
  rlock_client_free(c1), rlock_client_free(c2);
}

TEST(fixed_lease_forever) {
  rlock_client_t *c = th_client(s1->url, 0), *other = th_client(s1->url, 0);
  rlock_lock_t *w1 = th_lock(c, "ml:w1"), *w2 = th_lock(c, "ml:w2"), *o2 = th_lock(other, "ml:w2");
  const int64_t lease = 1000;
  /* the other hold runs out by itself 2.5 leases from now: ml:w1, taken
   * first, is held across a wait longer than the lease */
  CHECK_OK(rlock_lock_acquire(o2, 9, 0, 5 * lease / 2, NULL));
  rlock_lock_t *members[2] = {w2, w1};
  rlock_multilock_t *m = NULL;
  CHECK_OK(rlock_multilock_new(&m, members, 2));
  int64_t t0 = rlock_now_ms();
  CHECK_OK(rlock_multilock_acquire(m, RLOCK_OWNER_SELF, RLOCK_WAIT_FOREVER, lease, NULL));
  int64_t p1 = pttl(s1, "ml:w1"), p2 = pttl(s1, "ml:w2");
  CHECK(rlock_now_ms() - t0 >= 2 * lease); /* the wait did outlast the lease */
  CHECK_MSG(p1 > 0 && p1 <= lease && p2 > 0 && p2 <= lease, "pttl %lld %lld", (long long)p1, (long long)p2);
  printf("waited %lld ms with lease %lld: PTTLs %lld %lld\n", (long long)(rlock_now_ms() - t0), (long long)lease,
         (long long)p1, (long long)p2);
  CHECK_OK(rlock_multilock_release(m, RLOCK_OWNER_SELF));
  rlock_multilock_free(m);
  rlock_lock_free(w1), rlock_lock_free(w2), rlock_lock_free(o2);
  rlock_client_free(c), rlock_client_free(other);
}

/* The MultiLock holds ml:fa and waits for ml:fb: a waiter subscribed to its channel. */
static int waits_for_fb(void *arg) {
  (void)arg;
  return exists(s1, "ml:fa") && th_numsub(s1, "redisson_lock__channel:{ml:fb}") >= 1;
}

static void *delete_fa_when_waiting(void *arg) {
  int *ok = arg;
  *ok = th_wait_until(waits_for_fb, NULL, 30000) && th_cmd_int(s1, "DEL", "ml:fa", NULL) == 1;
  return NULL;
}

TEST(gone_before_relet) {
  rlock_client_t *c = th_client(s1->url, 0), *other = th_client(s1->url, 0);
  rlock_lock_t *fa = th_lock(c, "ml:fa"), *fb = th_lock(c, "ml:fb"), *ob = th_lock(other, "ml:fb");
  CHECK_OK(rlock_lock_acquire(ob, 9, 0, 2000, NULL)); /* runs out by itself */
  rlock_lock_t *members[2] = {fb, fa};
  rlock_multilock_t *m = NULL;
  CHECK_OK(rlock_multilock_new(&m, members, 2));
  int deleted = 0;
  pthread_t t;
  pthread_create(&t, NULL, delete_fa_when_waiting, &deleted);
  CHECK_RC(rlock_multilock_acquire(m, RLOCK_OWNER_SELF, 30000, 10000, NULL), RLOCK_ENOTHELD);
  pthread_join(t, NULL);
  CHECK(deleted);
  CHECK_MSG(strstr(rlock_last_error(), "ml:fa"), "message: %s", rlock_last_error());
  CHECK(!exists(s1, "ml:fa") && !exists(s1, "ml:fb")); /* ml:fb was taken, then given back */
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  CHECK_EQ(st.held, 0);
  rlock_multilock_free(m);
  rlock_lock_free(fa), rlock_lock_free(fb), rlock_lock_free(ob);
  rlock_client_free(c), rlock_client_free(other);
}

/* The paused test: the member taken first (the smaller URL) and the other. */
static th_server_t *first_srv, *second_srv;

static int waits_for_pq(void *arg) {
  (void)arg;
  return exists(first_srv, "ml:pp") && th_numsub(second_srv, "redisson_lock__channel:{ml:pq}") >= 1;
}

static void *pause_when_waiting(void *arg) {
  int *ok = arg;
  if (!th_wait_until(waits_for_pq, NULL, 30000)) return NULL;
  redisReply *r = th_cmd(first_srv, "CLIENT", "PAUSE", "3000", NULL);
  *ok = r && r->type == REDIS_REPLY_STATUS;
  th_reply_free(r);
  return NULL;
}

static rlock_client_t *quick_client(const char *url) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = url;
  o.command_timeout_ms = 300;   /* the 3 s pause outlasts every try of the final step */
  o.watchdog_timeout_ms = 5000; /* what frees a member whose release did not land */
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  return c;
}

static int pp_gone(void *arg) {
  (void)arg;
  return exists(first_srv, "ml:pp") == 0;
}

TEST(paused_at_relet) {
  int order = strcmp(s1->url, s2->url) < 0;
  first_srv = order ? s1 : s2, second_srv = order ? s2 : s1;
  rlock_client_t *c1 = quick_client(first_srv->url), *c2 = quick_client(second_srv->url);
  rlock_client_t *other = th_client(second_srv->url, 0);
  rlock_lock_t *pp = th_lock(c1, "ml:pp"), *pq = th_lock(c2, "ml:pq"), *oq = th_lock(other, "ml:pq");
  CHECK_OK(rlock_lock_acquire(oq, 9, 0, 1500, NULL)); /* runs out by itself, within the pause */
  rlock_lock_t *members[2] = {pq, pp};
  rlock_multilock_t *m = NULL;
  CHECK_OK(rlock_multilock_new(&m, members, 2));
  int paused = 0;
  pthread_t t;
  pthread_create(&t, NULL, pause_when_waiting, &paused);
  const int64_t lease = 10000;
  int64_t t0 = rlock_now_ms();
  int rc = rlock_multilock_acquire(m, RLOCK_OWNER_SELF, 30000, lease, NULL);
  int64_t t1 = rlock_now_ms();
  pthread_join(t, NULL);
  printf("acquire failed after %lld ms: %s\n", (long long)(t1 - t0), rlock_last_error());
  CHECK(paused);
  CHECK_MSG(rc == RLOCK_ETIMEDOUT || rc == RLOCK_ECONNLOST, "acquire: %s: %s", rlock_err_name(rc), rlock_last_error());
  CHECK_MSG(strstr(rlock_last_error(), "ml:pp"), "message: %s", rlock_last_error());
  CHECK_EQ(exists(second_srv, "ml:pq"), 0); /* given back at once */
  /* the paused member: its release timed out too (counted as done), so the
   * watchdog lease of its last renewal frees it, as after any failed release */
  CHECK(th_wait_until(pp_gone, NULL, 5000 + 20000));
  printf("ml:pp gone %lld ms after the acquire returned\n", (long long)(rlock_now_ms() - t1));
  rlock_multilock_free(m);
  rlock_lock_free(pp), rlock_lock_free(pq), rlock_lock_free(oq);
  rlock_client_free(c1), rlock_client_free(c2), rlock_client_free(other);
}

/* Owner 7 holds the MultiLock; owner 8's acquire of the same MultiLock fails
 * (busy). Owner 7's member is then lost: its MultiLock callback must fire. */
TEST(lost_other_owner_failed) {
  rlock_client_t *c1 = th_client(s1->url, 3000), *o1 = th_client(s1->url, 0);
  rlock_lock_t *a = th_lock(c1, "ml:oa"), *b = th_lock(c1, "ml:ob"), *oa = th_lock(o1, "ml:oa");
  seen_t multi = {.mu = PTHREAD_MUTEX_INITIALIZER};
  rlock_lock_t *members[2] = {a, b};
  rlock_multilock_t *m = NULL;
  CHECK_OK(rlock_multilock_new(&m, members, 2));
  rlock_multilock_on_lost(m, on_lost, &multi);
  CHECK_OK(rlock_multilock_acquire(m, 7, 0, RLOCK_LEASE_WATCHDOG, NULL));
  CHECK_RC(rlock_multilock_acquire(m, 8, 0, RLOCK_LEASE_WATCHDOG, NULL), RLOCK_EBUSY);
  int was = 0;
  CHECK_OK(rlock_lock_force_unlock(oa, &was));
  CHECK_EQ(was, 1);
  /* bound: 10 watchdog periods (a renewal every second), for a loaded machine */
  CHECK_MSG(th_wait_until(called, &multi, 30000), "owner 7's member lost, MultiLock callback never ran");
  CHECK_MSG(!strcmp(multi.name, "ml:oa"), "name: %s", multi.name);
  CHECK_EQ(multi.owner, 7);
  rlock_multilock_release(m, 7);
  rlock_multilock_free(m);
  rlock_lock_free(a), rlock_lock_free(b), rlock_lock_free(oa);
  rlock_client_free(c1), rlock_client_free(o1);
}

/* A lost callback that tries to release the rest of the MultiLock (on the
 * I/O thread of the lost member's client; the other member is on another
 * client): it hung the I/O thread (waiting for its own answers). */
typedef struct {
  rlock_multilock_t *m;
  pthread_mutex_t mu;
  int done, rc;
} release_in_cb_t;

static void release_on_lost(const char *name, size_t len, uint64_t owner, rlock_lost_reason_t reason, void *arg) {
  (void)name, (void)len, (void)reason;
  release_in_cb_t *r = arg;
  int rc = rlock_multilock_release(r->m, owner);
  pthread_mutex_lock(&r->mu);
  r->done = 1;
  r->rc = rc;
  pthread_mutex_unlock(&r->mu);
}

static int release_ran(void *arg) {
  release_in_cb_t *r = arg;
  pthread_mutex_lock(&r->mu);
  int d = r->done;
  pthread_mutex_unlock(&r->mu);
  return d;
}

TEST(release_from_lost_cb) {
  rlock_client_t *c1 = th_client(s1->url, 3000), *c2 = th_client(s2->url, 3000), *o1 = th_client(s1->url, 0);
  rlock_lock_t *a = th_lock(c1, "ml:ra"), *b = th_lock(c2, "ml:rb"), *oa = th_lock(o1, "ml:ra");
  rlock_lock_t *members[2] = {a, b};
  rlock_multilock_t *m = NULL;
  CHECK_OK(rlock_multilock_new(&m, members, 2));
  release_in_cb_t r = {.m = m, .mu = PTHREAD_MUTEX_INITIALIZER};
  rlock_multilock_on_lost(m, release_on_lost, &r);
  CHECK_OK(rlock_multilock_acquire(m, 11, 0, RLOCK_LEASE_WATCHDOG, NULL));
  int was = 0;
  CHECK_OK(rlock_lock_force_unlock(oa, &was));
  CHECK_EQ(was, 1);
  /* the callback's release must return at once: a blocking call on a
   * member client's I/O thread is RLOCK_EDEADLK, nothing released */
  CHECK_MSG(th_wait_until(release_ran, &r, 30000), "the release called from the lost callback never returned");
  CHECK_EQ(r.rc, RLOCK_EDEADLK);
  CHECK(exists(s2, "ml:rb"));
  CHECK_RC(rlock_multilock_release(m, 11), RLOCK_ENOTHELD); /* from this thread: the rest released */
  CHECK(!exists(s2, "ml:rb"));
  rlock_multilock_free(m);
  rlock_lock_free(a), rlock_lock_free(b), rlock_lock_free(oa);
  rlock_client_free(c1), rlock_client_free(c2), rlock_client_free(o1);
}

/* After the final step the members are fixed leases: no renewal may push
 * their TTLs back up (a 3 s watchdog renews every second; the lease is
 * shorter than the watchdog's), so both keys run out by themselves, not
 * before the reported valid-until. */
static th_server_t *nr_srv[2];
static int nr_both_gone(void *arg) {
  (void)arg;
  return !exists(nr_srv[0], "ml:na") && !exists(nr_srv[1], "ml:nb");
}

TEST(lease_not_renewed) {
  rlock_client_t *c1 = th_client(s1->url, 3000), *c2 = th_client(s2->url, 3000);
  rlock_lock_t *a = th_lock(c1, "ml:na"), *b = th_lock(c2, "ml:nb");
  nr_srv[0] = s1, nr_srv[1] = s2;
  rlock_lock_t *members[2] = {a, b};
  rlock_multilock_t *m = NULL;
  CHECK_OK(rlock_multilock_new(&m, members, 2));
  const int64_t lease = 1500;
  CHECK_OK(rlock_multilock_acquire(m, 3, 0, lease, NULL));
  int64_t vu = 0;
  CHECK_OK(rlock_multilock_valid_until(m, 3, &vu));
  /* bound: the lease plus 10 watchdog periods for a loaded machine; renewed
   * every second, the keys would never go */
  CHECK_MSG(th_wait_until(nr_both_gone, NULL, lease + 10 * 3000), "a member outlived its lease (renewed)");
  int64_t gone = rlock_now_ms();
  CHECK_MSG(gone >= vu, "gone at %lld, before the valid-until %lld", (long long)gone, (long long)vu);
  rlock_multilock_free(m);
  rlock_lock_free(a), rlock_lock_free(b);
  rlock_client_free(c1), rlock_client_free(c2);
}

/* With the watchdog lease: ml:ga, taken first, is deleted while ml:gb is
 * awaited, and its client reports it lost before ml:gb comes free. */
typedef struct {
  rlock_lock_t *ob;
  seen_t *client_saw;
  int ok;
} gw_t;

static int waits_for_gb(void *arg) {
  (void)arg;
  return exists(s1, "ml:ga") && th_numsub(s1, "redisson_lock__channel:{ml:gb}") >= 1;
}

static void *delete_ga_then_free_gb(void *arg) {
  gw_t *g = arg;
  g->ok = th_wait_until(waits_for_gb, NULL, 30000) && th_cmd_int(s1, "DEL", "ml:ga", NULL) == 1 &&
          th_wait_until(called, g->client_saw, 30000) && rlock_lock_release(g->ob, 9) == 0;
  return NULL;
}

TEST(lost_during_wait_watchdog) {
  rlock_client_t *c = th_client(s1->url, 3000), *other = th_client(s1->url, 0);
  rlock_lock_t *ga = th_lock(c, "ml:ga"), *gb = th_lock(c, "ml:gb"), *ob = th_lock(other, "ml:gb");
  seen_t saw = {.mu = PTHREAD_MUTEX_INITIALIZER};
  rlock_client_on_lost(c, on_lost, &saw);
  CHECK_OK(rlock_lock_acquire(ob, 9, 0, 60000, NULL));
  rlock_lock_t *members[2] = {gb, ga};
  rlock_multilock_t *m = NULL;
  CHECK_OK(rlock_multilock_new(&m, members, 2));
  gw_t g = {.ob = ob, .client_saw = &saw};
  pthread_t t;
  pthread_create(&t, NULL, delete_ga_then_free_gb, &g);
  int rc = rlock_multilock_acquire(m, 4, 30000, RLOCK_LEASE_WATCHDOG, NULL);
  pthread_join(t, NULL);
  CHECK(g.ok);
  /* the client knew ml:ga was lost before the acquire returned: success
   * would hand the caller a lock that is not held */
  CHECK_MSG(rc == RLOCK_ENOTHELD, "acquire: %s: %s", rlock_err_name(rc), rlock_last_error());
  CHECK_MSG(strstr(rlock_last_error(), "ml:ga"), "message: %s", rlock_last_error());
  CHECK(!exists(s1, "ml:gb")); /* taken, then given back */
  rlock_multilock_free(m);
  rlock_lock_free(ga), rlock_lock_free(gb), rlock_lock_free(ob);
  rlock_client_free(c), rlock_client_free(other);
}

/* The owner already holds ml:xa with a 20 s lease: the MultiLock's 2 s lease
 * must not cut it (the outer hold keeps what it needs), and ml:xb gets 2 s. */
TEST(outer_hold_not_cut) {
  rlock_client_t *c = th_client(s1->url, 0);
  rlock_lock_t *xa = th_lock(c, "ml:xa"), *xb = th_lock(c, "ml:xb");
  CHECK_OK(rlock_lock_acquire(xa, 6, 0, 20000, NULL));
  rlock_lock_t *members[2] = {xa, xb};
  rlock_multilock_t *m = NULL;
  CHECK_OK(rlock_multilock_new(&m, members, 2));
  int64_t t0 = rlock_now_ms();
  CHECK_OK(rlock_multilock_acquire(m, 6, 0, 2000, NULL));
  int64_t pa = pttl(s1, "ml:xa"), pb = pttl(s1, "ml:xb"), took = rlock_now_ms() - t0;
  CHECK_MSG(pa >= 20000 - took - 2 - 1000 && pb <= 2000 && pb > 0, "pttl %lld %lld", (long long)pa, (long long)pb);
  CHECK_OK(rlock_multilock_release(m, 6));
  CHECK(!exists(s1, "ml:xb"));
  CHECK_MSG(pttl(s1, "ml:xa") > 2000, "outer hold cut: pttl %lld", (long long)pttl(s1, "ml:xa"));
  int64_t n = 0;
  CHECK_OK(rlock_lock_hold_count(xa, 6, &n));
  CHECK_EQ(n, 1);
  CHECK_OK(rlock_lock_release(xa, 6));
  rlock_multilock_free(m);
  rlock_lock_free(xa), rlock_lock_free(xb);
  rlock_client_free(c);
}

/* A member client that gives up fast on a paused server: each try times out
 * after 300 ms and is re-sent once. */
static rlock_client_t *flaky_client(const char *url) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = url;
  o.command_timeout_ms = 300;
  o.retry_attempts = 1;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  return c;
}

static void pause_ms(th_server_t *s, const char *ms) {
  redisReply *r = th_cmd(s, "CLIENT", "PAUSE", ms, "ALL", NULL);
  CHECK(r && r->type == REDIS_REPLY_STATUS);
  th_reply_free(r);
}

/* Issue 9: the second member's server paused for 2 s, its tries time out
 * (a transient error): the member taken first is given back, and the whole
 * acquire is tried again after a short backoff until it succeeds within the
 * wait (it used to fail at the first timeout). */
TEST(transient_error_retried) {
  int order = strcmp(s1->url, s2->url) < 0;
  th_server_t *first = order ? s1 : s2, *second = order ? s2 : s1;
  rlock_client_t *c1 = th_client(first->url, 0), *c2 = flaky_client(second->url);
  rlock_lock_t *ta = th_lock(c1, "ml:ta"), *tb = th_lock(c2, "ml:tb");
  rlock_lock_t *members[2] = {tb, ta};
  rlock_multilock_t *m = NULL;
  CHECK_OK(rlock_multilock_new(&m, members, 2));
  pause_ms(second, "2000");
  int64_t t0 = rlock_now_ms();
  int rc = rlock_multilock_acquire(m, RLOCK_OWNER_SELF, 30000, RLOCK_LEASE_WATCHDOG, NULL);
  printf("acquire: %s after %lld ms (%s)\n", rlock_err_name(rc), (long long)(rlock_now_ms() - t0),
         rc ? rlock_last_error() : "");
  CHECK_OK(rc);
  CHECK(exists(first, "ml:ta") && exists(second, "ml:tb"));
  CHECK_OK(rlock_multilock_release(m, RLOCK_OWNER_SELF));
  CHECK(!exists(first, "ml:ta") && !exists(second, "ml:tb"));
  rlock_multilock_free(m);
  rlock_lock_free(ta), rlock_lock_free(tb);
  rlock_client_free(c1), rlock_client_free(c2);
}

static th_server_t *tw_second;
static int tw_gone(void *arg) {
  (void)arg;
  return exists(tw_second, "ml:wb") == 0;
}

/* The same with a pause longer than the wait: the acquire ends with the
 * member's transient error within the wait (plus one round), naming it, and
 * nothing is left held on either server (the paused member's try is undone
 * once the server answers again). */
TEST(transient_error_until_wait_runs_out) {
  int order = strcmp(s1->url, s2->url) < 0;
  th_server_t *first = order ? s1 : s2, *second = order ? s2 : s1;
  rlock_client_t *c1 = th_client(first->url, 0), *c2 = flaky_client(second->url);
  rlock_lock_t *wa = th_lock(c1, "ml:wa"), *wb = th_lock(c2, "ml:wb");
  rlock_lock_t *members[2] = {wa, wb};
  rlock_multilock_t *m = NULL;
  CHECK_OK(rlock_multilock_new(&m, members, 2));
  pause_ms(second, "4000");
  int64_t t0 = rlock_now_ms();
  int rc = rlock_multilock_acquire(m, RLOCK_OWNER_SELF, 1500, RLOCK_LEASE_WATCHDOG, NULL);
  int64_t took = rlock_now_ms() - t0;
  printf("acquire: %s after %lld ms (%s)\n", rlock_err_name(rc), (long long)took, rlock_last_error());
  CHECK_MSG(rc == RLOCK_ETIMEDOUT || rc == RLOCK_ECONNLOST || rc == RLOCK_ECONNECT, "acquire: %s", rlock_err_name(rc));
  CHECK_MSG(strstr(rlock_last_error(), "ml:wb"), "message: %s", rlock_last_error());
  CHECK(took < 1500 + 10000); /* the wait, one more round of 2 x 300 ms tries, a loaded machine */
  CHECK_EQ(exists(first, "ml:wa"), 0);
  tw_second = second;
  CHECK(th_wait_until(tw_gone, NULL, 4000 + 20000)); /* after the pause: undone, or never applied */
  rlock_stats_t st;
  rlock_client_stats(c1, &st);
  CHECK_EQ(st.held, 0);
  rlock_client_stats(c2, &st);
  CHECK_EQ(st.held, 0);
  rlock_multilock_free(m);
  rlock_lock_free(wa), rlock_lock_free(wb);
  rlock_client_free(c1), rlock_client_free(c2);
}

/* Cancel while a MultiLock with RLOCK_WAIT_FOREVER keeps retrying after
 * transient errors (its second member's server paused): RLOCK_ECANCELED,
 * nothing held. */
typedef struct retry_cancel {
  th_server_t *first;
  rlock_cancel_t *cancel;
  int saw_taken, saw_given_back;
} retry_cancel_t;

static int ca_taken(void *arg) { return exists(((retry_cancel_t *)arg)->first, "ml:ca") == 1; }
static int ca_given_back(void *arg) { return exists(((retry_cancel_t *)arg)->first, "ml:ca") == 0; }

static void *cancel_after_a_round(void *arg) {
  retry_cancel_t *k = arg;
  k->saw_taken = th_wait_until(ca_taken, k, 20000);
  k->saw_given_back = k->saw_taken && th_wait_until(ca_given_back, k, 20000); /* a round failed */
  rlock_cancel_trigger(k->cancel);
  return NULL;
}

static th_server_t *cb_server;
static int cb_gone(void *arg) {
  (void)arg;
  return exists(cb_server, "ml:cb") == 0;
}

TEST(cancel_while_retrying) {
  int order = strcmp(s1->url, s2->url) < 0;
  th_server_t *first = order ? s1 : s2, *second = order ? s2 : s1;
  rlock_client_t *c1 = th_client(first->url, 0), *c2 = flaky_client(second->url);
  rlock_lock_t *ca = th_lock(c1, "ml:ca"), *cb = th_lock(c2, "ml:cb");
  rlock_lock_t *members[2] = {ca, cb};
  rlock_multilock_t *m = NULL;
  CHECK_OK(rlock_multilock_new(&m, members, 2));
  retry_cancel_t k = {.first = first};
  CHECK_OK(rlock_cancel_new(&k.cancel));
  pause_ms(second, "3000");
  pthread_t t;
  pthread_create(&t, NULL, cancel_after_a_round, &k);
  int rc = rlock_multilock_acquire(m, RLOCK_OWNER_SELF, RLOCK_WAIT_FOREVER, RLOCK_LEASE_WATCHDOG, k.cancel);
  pthread_join(t, NULL);
  printf("acquire: %s (%s)\n", rlock_err_name(rc), rlock_last_error());
  CHECK(k.saw_taken && k.saw_given_back);
  CHECK_RC(rc, RLOCK_ECANCELED);
  CHECK_EQ(exists(first, "ml:ca"), 0);
  cb_server = second;
  CHECK(th_wait_until(cb_gone, NULL, 3000 + 20000));
  rlock_stats_t st;
  rlock_client_stats(c1, &st);
  CHECK_EQ(st.held, 0);
  rlock_client_stats(c2, &st);
  CHECK_EQ(st.held, 0);
  rlock_cancel_free(k.cancel);
  rlock_multilock_free(m);
  rlock_lock_free(ca), rlock_lock_free(cb);
  rlock_client_free(c1), rlock_client_free(c2);
}

/* A hard member error (the key is a string: the script's error reply,
 * RLOCK_ESERVER) is not retried: the acquire fails at once, long before its
 * wait, naming the member, and the member taken first is given back. */
TEST(hard_error_fails_at_once) {
  rlock_client_t *c = th_client(s1->url, 0);
  rlock_lock_t *ha = th_lock(c, "ml:ha"), *hb = th_lock(c, "ml:hb");
  redisReply *r = th_cmd(s1, "SET", "ml:hb", "not a lock", NULL);
  th_reply_free(r);
  rlock_lock_t *members[2] = {hb, ha};
  rlock_multilock_t *m = NULL;
  CHECK_OK(rlock_multilock_new(&m, members, 2));
  int64_t t0 = rlock_now_ms();
  int rc = rlock_multilock_acquire(m, RLOCK_OWNER_SELF, 60000, RLOCK_LEASE_WATCHDOG, NULL);
  CHECK_MSG(rc == RLOCK_ESERVER, "acquire: %s: %s", rlock_err_name(rc), rlock_last_error());
  CHECK_MSG(strstr(rlock_last_error(), "ml:hb"), "message: %s", rlock_last_error());
  CHECK(rlock_now_ms() - t0 < 30000); /* not the 60 s wait */
  CHECK_EQ(exists(s1, "ml:ha"), 0);
  th_reply_free(th_cmd(s1, "DEL", "ml:hb", NULL));
  rlock_multilock_free(m);
  rlock_lock_free(ha), rlock_lock_free(hb);
  rlock_client_free(c);
}

/* Member a is name_a on server `first`, b name_b on `second`: the member
 * taken first must not depend on how the servers are spelled. */
static void same_first(th_server_t *first, const char *name_a, th_server_t *second, const char *name_b) {
  char alt_first[64], alt_second[64];
  snprintf(alt_first, sizeof alt_first, "redis://localhost:%d", first->port);
  snprintf(alt_second, sizeof alt_second, "redis://127.0.0.1:%d/0", second->port);
  char one = th_multilock_first_taken(first->url, name_a, second->url, name_b);
  char two = th_multilock_first_taken(alt_first, name_a, alt_second, name_b);
  printf("%s, %s: first '%c' with %s, %s; '%c' with %s, %s\n", name_a, name_b, one, first->url, second->url, two,
         alt_first, alt_second);
  CHECK(one != '?' && two != '?');
  CHECK_EQ(one, two);
}

/* Issue 9: two processes that spell the same servers differently
 * (127.0.0.1 / localhost, a trailing /0) take the members in the same order
 * (by URL string they took them in opposite orders: a deadlock), for two
 * names and for one name on two servers; the same lock spelled two ways is
 * one member twice (RLOCK_EINVAL). */
TEST(canonical_order_any_spelling) {
  int order = strcmp(s1->url, s2->url) < 0; /* with these spellings the URL order flips */
  th_server_t *first = order ? s1 : s2, *second = order ? s2 : s1;
  rlock_client_t *other = th_client(first->url, 0), *other2 = th_client(second->url, 0);
  rlock_lock_t *oa = th_lock(other, "ml:spell-b"), *ob = th_lock(other2, "ml:spell-a");
  rlock_lock_t *sa = th_lock(other, "ml:spell"), *sb = th_lock(other2, "ml:spell");
  CHECK_OK(rlock_lock_acquire(oa, 3, 0, 60000, NULL));
  CHECK_OK(rlock_lock_acquire(ob, 3, 0, 60000, NULL));
  CHECK_OK(rlock_lock_acquire(sa, 3, 0, 60000, NULL));
  CHECK_OK(rlock_lock_acquire(sb, 3, 0, 60000, NULL));
  same_first(first, "ml:spell-b", second, "ml:spell-a");
  same_first(first, "ml:spell", second, "ml:spell");
  rlock_client_t *c1 = th_client(first->url, 0), *c2 = th_client(first->url, 0);
  char alt[64];
  snprintf(alt, sizeof alt, "redis://localhost:%d/0", first->port);
  rlock_client_free(c2);
  c2 = th_client(alt, 0);
  rlock_lock_t *x = th_lock(c1, "ml:twice"), *y = th_lock(c2, "ml:twice");
  rlock_lock_t *members[2] = {x, y};
  rlock_multilock_t *m = NULL;
  CHECK_RC(rlock_multilock_new(&m, members, 2), RLOCK_EINVAL);
  CHECK_MSG(strstr(rlock_last_error(), "twice"), "message: %s", rlock_last_error());
  CHECK_OK(rlock_lock_release(oa, 3));
  CHECK_OK(rlock_lock_release(ob, 3));
  CHECK_OK(rlock_lock_release(sa, 3));
  CHECK_OK(rlock_lock_release(sb, 3));
  rlock_lock_free(x), rlock_lock_free(y), rlock_lock_free(oa), rlock_lock_free(ob);
  rlock_lock_free(sa), rlock_lock_free(sb);
  rlock_client_free(c1), rlock_client_free(c2), rlock_client_free(other), rlock_client_free(other2);
}

/* One lock on a unix socket spelled two ways ("dir/redis.sock" and
 * "dir/./redis.sock", the same socket): a member twice (RLOCK_EINVAL), as for
 * localhost / 127.0.0.1. Accepted as two members, its second member waits
 * for the first (another client: another owner) to the end of the wait:
 * never acquired, and with RLOCK_WAIT_FOREVER a hang. */
TEST(unix_socket_any_spelling) {
  th_server_opts_t so = {.unixsocket = 1};
  th_server_t *u = th_server_start(&so);
  char url1[400], url2[400];
  snprintf(url1, sizeof url1, "unix://%s", u->sock);
  snprintf(url2, sizeof url2, "unix://%s/./redis.sock", u->dir);
  rlock_client_t *c1 = th_client(url1, 0), *c2 = th_client(url2, 0);
  rlock_lock_t *x = th_lock(c1, "ml:unix"), *y = th_lock(c2, "ml:unix");
  rlock_lock_t *members[2] = {x, y};
  rlock_multilock_t *m = NULL;
  int rc = rlock_multilock_new(&m, members, 2);
  if (!rc) {
    int acq = rlock_multilock_acquire(m, RLOCK_OWNER_SELF, 300, RLOCK_LEASE_WATCHDOG, NULL);
    printf("accepted as two members; acquire: %s (%s)\n", rlock_err_name(acq), rlock_last_error());
    if (!acq) rlock_multilock_release(m, RLOCK_OWNER_SELF);
    rlock_multilock_free(m);
  }
  CHECK_MSG(rc == RLOCK_EINVAL, "%s and %s: one lock, accepted as two members (%s)", url1, url2, rlock_err_name(rc));
  CHECK_MSG(strstr(rlock_last_error(), "twice"), "message: %s", rlock_last_error());
  rlock_lock_free(x), rlock_lock_free(y);
  rlock_client_free(c1), rlock_client_free(c2);
  th_server_stop(u);
}

/* rlock_multilock_new in a member client's callback (its I/O thread, where
 * a sync rlock_lock_node is RLOCK_EDEADLK) orders and compares that member
 * as anywhere else: one lock spelled two ways (127.0.0.1 / localhost) is a
 * member twice there too. Before, that member's server was unknown there
 * (its URL stood in): accepted as two members (never acquired), and one name
 * on two servers ordered otherwise than by the same MultiLock made on
 * another thread (a deadlock between the two). */
typedef struct in_cb {
  rlock_lock_t *members[2];
  rlock_multilock_t *m;
  int rc;
  char err[256];
  atomic_int done;
} in_cb_t;

static void new_in_cb(rlock_lock_t *l, int status, int64_t value, void *arg) {
  (void)l, (void)status, (void)value;
  in_cb_t *k = arg;
  k->rc = rlock_multilock_new(&k->m, k->members, 2);
  snprintf(k->err, sizeof k->err, "%s", rlock_last_error());
  atomic_store(&k->done, 1);
}
static int in_cb_done(void *arg) { return atomic_load(&((in_cb_t *)arg)->done); }

TEST(made_in_a_callback) {
  char lo[64];
  snprintf(lo, sizeof lo, "redis://localhost:%d/0", s1->port);
  rlock_client_t *c1 = th_client(s1->url, 0), *c2 = th_client(lo, 0);
  rlock_lock_t *x = th_lock(c1, "ml:incb"), *y = th_lock(c2, "ml:incb");
  in_cb_t k = {.members = {x, y}};
  CHECK_OK(rlock_lock_is_locked_async(x, new_in_cb, &k)); /* its callback: c1's I/O thread */
  CHECK(th_wait_until(in_cb_done, &k, 10000));
  if (!k.rc) rlock_multilock_free(k.m);
  CHECK_MSG(k.rc == RLOCK_EINVAL && strstr(k.err, "twice"),
            "made in c1's callback: %s and %s, one lock, accepted as two members (%s: %s)", s1->url, lo,
            rlock_err_name(k.rc), k.err);
  rlock_lock_free(x), rlock_lock_free(y);
  rlock_client_free(c1), rlock_client_free(c2);
}

/* The MultiLock's final step sets its read member's lease exactly: its own
 * timeout keys, not NAME below another reader's hold. Reader A (c1) holds
 * the read lock for 20 s; B's MultiLock (c2) takes the same read lock and
 * another lock with a 500 ms lease. NAME must live until A's valid-until,
 * and a writer (c3) must not get in while A's hold is valid. */
TEST(read_relet_keeps_other_readers) {
  rlock_client_t *c1 = th_client(s1->url, 0), *c2 = th_client(s1->url, 0), *c3 = th_client(s1->url, 0);
  rlock_lock_t *ra = NULL, *wa = NULL, *rb = NULL, *wb = NULL, *rc_ = NULL, *wc = NULL;
  CHECK_OK(rlock_rwlock_new(c1, "ml:rw", 5, &ra, &wa));
  CHECK_OK(rlock_rwlock_new(c2, "ml:rw", 5, &rb, &wb));
  CHECK_OK(rlock_rwlock_new(c3, "ml:rw", 5, &rc_, &wc));
  rlock_lock_t *x = th_lock(c2, "ml:rx");
  CHECK_OK(rlock_lock_acquire(ra, 1, 0, 20000, NULL));
  int64_t va = 0;
  CHECK_OK(rlock_lock_valid_until(ra, 1, &va));
  rlock_lock_t *members[2] = {rb, x};
  rlock_multilock_t *m = NULL;
  CHECK_OK(rlock_multilock_new(&m, members, 2));
  CHECK_OK(rlock_multilock_acquire(m, 2, 0, 500, NULL));
  /* now is read after PTTL's answer: the key ends by now + left at the
   * latest, so a slow answer cannot make it look short (a CI run: "ends 4 ms
   * before"); (+ 1: the client's monotonic ms and the server's wall-clock ms
   * have other phases) */
  int64_t left = pttl(s1, "ml:rw");
  int64_t now = rlock_now_ms();
  CHECK_MSG(now + left + 1 >= va, "NAME's PTTL %lld ends %lld ms before reader A's valid-until", (long long)left,
            (long long)(va - now - left));
  /* a writer waits up to 2 s: NAME must outlive the MultiLock's 500 ms */
  int rc = rlock_lock_acquire(wc, 3, 2000, 10000, NULL);
  int64_t at = rlock_now_ms();
  CHECK_MSG(rc != 0 || at >= va, "a writer got in %lld ms before reader A's valid-until", (long long)(va - at));
  if (rc == 0) CHECK_OK(rlock_lock_release(wc, 3));
  else CHECK_RC(rc, RLOCK_EBUSY);
  rlock_multilock_release(m, 2);
  rlock_lock_release(ra, 1);
  rlock_multilock_free(m);
  rlock_lock_free(ra), rlock_lock_free(wa), rlock_lock_free(rb), rlock_lock_free(wb);
  rlock_lock_free(rc_), rlock_lock_free(wc), rlock_lock_free(x);
  rlock_client_free(c1), rlock_client_free(c2), rlock_client_free(c3);
}

/* The same in write mode: the writer (owner 1, 20 s) takes its own read
 * lock in a MultiLock with a 500 ms lease. NAME's TTL is the write hold's
 * lease: the final step must not cut it. */
TEST(read_relet_keeps_write_lease) {
  rlock_client_t *c1 = th_client(s1->url, 0);
  rlock_lock_t *r = NULL, *w = NULL;
  CHECK_OK(rlock_rwlock_new(c1, "ml:rwm", 6, &r, &w));
  rlock_lock_t *x = th_lock(c1, "ml:rwx");
  CHECK_OK(rlock_lock_acquire(w, 1, 0, 20000, NULL));
  int64_t vw = 0;
  CHECK_OK(rlock_lock_valid_until(w, 1, &vw));
  rlock_lock_t *members[2] = {r, x};
  rlock_multilock_t *m = NULL;
  CHECK_OK(rlock_multilock_new(&m, members, 2));
  CHECK_OK(rlock_multilock_acquire(m, 1, 0, 500, NULL));
  int64_t left = pttl(s1, "ml:rwm");
  int64_t now = rlock_now_ms(); /* after the answer (read_relet_keeps_other_readers) */
  CHECK_MSG(now + left + 1 >= vw, "NAME's PTTL %lld ends %lld ms before the write hold's valid-until", (long long)left,
            (long long)(vw - now - left));
  CHECK_OK(rlock_multilock_release(m, 1));
  CHECK_OK(rlock_lock_release(w, 1));
  rlock_multilock_free(m);
  rlock_lock_free(r), rlock_lock_free(w), rlock_lock_free(x);
  rlock_client_free(c1);
}

/* The write lock's final step (reentrant_renew.lua '=' on its ':write'
 * field) in write mode: its owner's read holds inside (their timeout keys)
 * keep NAME alive. Owner 1 holds the write lock for 1 s and a read lock
 * for 20 s inside it, then a MultiLock over the write lock with 500 ms. */
TEST(write_relet_keeps_read_holds) {
  rlock_client_t *c1 = th_client(s1->url, 0);
  rlock_lock_t *r = NULL, *w = NULL;
  CHECK_OK(rlock_rwlock_new(c1, "ml:rwr", 6, &r, &w));
  rlock_lock_t *x = th_lock(c1, "ml:rwy");
  CHECK_OK(rlock_lock_acquire(w, 1, 0, 1000, NULL));
  CHECK_OK(rlock_lock_acquire(r, 1, 0, 20000, NULL));
  int64_t vr = 0;
  CHECK_OK(rlock_lock_valid_until(r, 1, &vr));
  rlock_lock_t *members[2] = {w, x};
  rlock_multilock_t *m = NULL;
  CHECK_OK(rlock_multilock_new(&m, members, 2));
  CHECK_OK(rlock_multilock_acquire(m, 1, 0, 500, NULL));
  int64_t left = pttl(s1, "ml:rwr");
  int64_t now = rlock_now_ms(); /* after the answer (read_relet_keeps_other_readers) */
  CHECK_MSG(now + left + 1 >= vr, "NAME's PTTL %lld ends %lld ms before the read hold's valid-until", (long long)left,
            (long long)(vr - now - left));
  CHECK_OK(rlock_multilock_release(m, 1));
  CHECK_OK(rlock_lock_release(w, 1));
  CHECK_OK(rlock_lock_release(r, 1));
  rlock_multilock_free(m);
  rlock_lock_free(r), rlock_lock_free(w), rlock_lock_free(x);
  rlock_client_free(c1);
}

typedef struct {
  rlock_multilock_t *m;
  int rc;
} ml_run_t;

static void *ml_acquire_thread(void *arg) {
  ml_run_t *r = arg;
  r->rc = rlock_multilock_acquire(r->m, 5, 20000, 300, NULL);
  return NULL;
}

typedef struct {
  atomic_int done;
  int rc;
  int64_t at;
} waiter_t;

static void waiter_cb(rlock_lock_t *l, int status, int64_t value, void *arg) {
  (void)l, (void)value;
  waiter_t *w = arg;
  w->rc = status;
  w->at = rlock_now_ms();
  atomic_store(&w->done, 1);
}
static int waiter_done(void *arg) { return atomic_load(&((waiter_t *)arg)->done); }
static int wka_held(void *arg) { return exists(s1, (const char *)arg); }

TEST(relet_wakes_waiters) {
  rlock_client_t *c1 = th_client(s1->url, 20000), *c2 = th_client(s1->url, 0), *c3 = th_client(s1->url, 0);
  rlock_lock_t *a1 = th_lock(c1, "ml:wka"), *b1 = th_lock(c1, "ml:wkb");
  rlock_lock_t *a2 = th_lock(c2, "ml:wka"), *b3 = th_lock(c3, "ml:wkb");
  CHECK_OK(rlock_lock_acquire(b3, 9, 0, 60000, NULL)); /* the later member, held elsewhere */
  rlock_lock_t *members[2] = {a1, b1};
  ml_run_t run = {NULL, -1};
  CHECK_OK(rlock_multilock_new(&run.m, members, 2));
  pthread_t t;
  pthread_create(&t, NULL, ml_acquire_thread, &run);
  CHECK(th_wait_until(wka_held, "ml:wka", 10000)); /* the first member, held with the 20 s watchdog lease */
  /* a waiter on it: its try answered (a query behind it on the same
   * connection answered), it parks on the 20 s TTL */
  waiter_t w = {0};
  CHECK_OK(rlock_lock_acquire_async(a2, 7, 15000, 5000, NULL, waiter_cb, &w));
  int locked = 0;
  CHECK_OK(rlock_lock_is_locked(a2, &locked));
  CHECK(locked && !atomic_load(&w.done));
  CHECK_OK(rlock_lock_release(b3, 9)); /* the MultiLock completes: both get 300 ms */
  pthread_join(t, NULL);
  CHECK_OK(run.rc);
  int64_t vu = 0;
  CHECK_OK(rlock_multilock_valid_until(run.m, 5, &vu));
  /* never released: the lease runs out; the waiter must not sleep on */
  CHECK(th_wait_until(waiter_done, &w, 16000));
  CHECK_OK(w.rc);
  CHECK_MSG(w.at - vu < 5000,
            "the waiter got the lock %lld ms after the MultiLock's lease ended (it slept on the TTL it parked on)",
            (long long)(w.at - vu));
  printf("# the waiter got it %lld ms after the lease's end\n", (long long)(w.at - vu));
  CHECK_OK(rlock_lock_release(a2, 7));
  rlock_multilock_free(run.m);
  rlock_lock_free(a1), rlock_lock_free(b1), rlock_lock_free(a2), rlock_lock_free(b3);
  rlock_client_free(c1), rlock_client_free(c2), rlock_client_free(c3);
}

/* relet_wakes_waiters for a fair member: its waiters listen on channels of
 * their own (the queue's head on redisson_lock__channel:{NAME}:<id>). */
TEST(relet_wakes_fair_waiter) {
  rlock_client_t *c1 = th_client(s1->url, 20000), *c2 = th_client(s1->url, 0), *c3 = th_client(s1->url, 0);
  rlock_lock_t *a1 = NULL, *a2 = NULL, *b1 = th_lock(c1, "ml:fwb"), *b3 = th_lock(c3, "ml:fwb");
  CHECK_OK(rlock_lock_new_fair(c1, "ml:fwa", 6, &a1));
  CHECK_OK(rlock_lock_new_fair(c2, "ml:fwa", 6, &a2));
  CHECK_OK(rlock_lock_acquire(b3, 9, 0, 60000, NULL));
  rlock_lock_t *members[2] = {a1, b1};
  ml_run_t run = {NULL, -1};
  CHECK_OK(rlock_multilock_new(&run.m, members, 2));
  pthread_t t;
  pthread_create(&t, NULL, ml_acquire_thread, &run);
  CHECK(th_wait_until(wka_held, "ml:fwa", 10000));
  waiter_t w = {0};
  CHECK_OK(rlock_lock_acquire_async(a2, 7, 15000, 5000, NULL, waiter_cb, &w));
  int locked = 0;
  CHECK_OK(rlock_lock_is_locked(a2, &locked));
  CHECK(locked && !atomic_load(&w.done));
  CHECK_OK(rlock_lock_release(b3, 9));
  pthread_join(t, NULL);
  CHECK_OK(run.rc);
  int64_t vu = 0;
  CHECK_OK(rlock_multilock_valid_until(run.m, 5, &vu));
  CHECK(th_wait_until(waiter_done, &w, 16000));
  CHECK_OK(w.rc);
  CHECK_MSG(w.at - vu < 2000,
            "the fair waiter got the lock %lld ms after the MultiLock's lease ended (it slept on the TTL it parked on)",
            (long long)(w.at - vu));
  printf("# the fair waiter got it %lld ms after the lease's end\n", (long long)(w.at - vu));
  CHECK_OK(rlock_lock_release(a2, 7));
  rlock_multilock_free(run.m);
  rlock_lock_free(a1), rlock_lock_free(b1), rlock_lock_free(a2), rlock_lock_free(b3);
  rlock_client_free(c1), rlock_client_free(c2), rlock_client_free(c3);
}

/* The next message on sub (NULL: none within its timeout). */
static redisReply *next_message(redisContext *sub) {
  redisReply *r = NULL;
  if (redisGetReply(sub, (void **)&r) != REDIS_OK) return NULL;
  return r;
}

TEST(relet_write_says_1) {
  rlock_client_t *c1 = th_client(s1->url, 20000);
  rlock_lock_t *r = NULL, *w = NULL;
  CHECK_OK(rlock_rwlock_new(c1, "ml:wmsg", 7, &r, &w));
  rlock_lock_t *x = th_lock(c1, "ml:wmsx");
  redisContext *sub = th_raw_connect(s1);
  redisReply *rep = redisCommand(sub, "SUBSCRIBE %s", "redisson_rwlock:{ml:wmsg}");
  CHECK(rep && rep->type == REDIS_REPLY_ARRAY);
  freeReplyObject(rep);
  rlock_lock_t *members[2] = {w, x};
  rlock_multilock_t *m = NULL;
  CHECK_OK(rlock_multilock_new(&m, members, 2));
  CHECK_OK(rlock_multilock_acquire(m, 1, 0, 500, NULL));
  rep = next_message(sub); /* the relet's: nothing else publishes there before the release */
  CHECK_MSG(rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 3, "no message on the write member's channel");
  CHECK_MSG(strcmp(rep->element[2]->str, "1") == 0,
            "the relet of a write member said '%s' (one Java waiter per JVM), not the write unlock's '1'",
            rep->element[2]->str);
  freeReplyObject(rep);
  redisFree(sub);
  CHECK_OK(rlock_multilock_release(m, 1));
  rlock_multilock_free(m);
  rlock_lock_free(r), rlock_lock_free(w), rlock_lock_free(x);
  rlock_client_free(c1);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 170);
  s1 = th_server_start(NULL);
  s2 = th_server_start(NULL);
  RUN(all_and_release);
  RUN(member_held_elsewhere);
  RUN(cancelled);
  RUN(bad_arguments);
  RUN(opposite_orders);
  RUN(lost_fires_once);
  RUN(one_lease_at_the_end);
  RUN(fixed_lease_forever);
  RUN(gone_before_relet);
  RUN(paused_at_relet);
  RUN(lost_other_owner_failed);
  RUN(release_from_lost_cb);
  RUN(lease_not_renewed);
  RUN(lost_during_wait_watchdog);
  RUN(outer_hold_not_cut);
  RUN(transient_error_retried);
  RUN(transient_error_until_wait_runs_out);
  RUN(hard_error_fails_at_once);
  RUN(cancel_while_retrying);
  RUN(canonical_order_any_spelling);
  RUN(unix_socket_any_spelling);
  RUN(made_in_a_callback);
  RUN(read_relet_keeps_other_readers);
  RUN(read_relet_keeps_write_lease);
  RUN(write_relet_keeps_read_holds);
  RUN(relet_wakes_waiters);
  RUN(relet_write_says_1);
  RUN(relet_wakes_fair_waiter);
  th_server_stop(s1);
  th_server_stop(s2);
  return th_done();
}
