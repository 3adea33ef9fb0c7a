/* test_kinds_deploy.c -- Redisson's lock kinds (non-reentrant, fenced, spin:
 * kinds/nonreentrant.c, fenced.c, spin.c) on every deployment, through the
 * engine every kind shares:
 *   cluster            3 masters, sharded pub/sub (SSUBSCRIBE/SPUBLISH): a
 *                      non-reentrant and a fenced waiter subscribe on the
 *                      master of the name's slot and are woken by the release;
 *                      the fenced token key lives beside the lock (one slot,
 *                      names with and without braces); the holder's second
 *                      non-reentrant acquire is RLOCK_ENOTREENTRANT; a spin waiter
 *                      never subscribes and gets the lock by polling
 *   replicas           a master with a replica and the replica-sync WAIT: once
 *                      an acquire returned, the replica holds the hash (and the
 *                      fenced token) it wrote
 *   sentinel           redis+sentinel:// (a master, a replica, 3 sentinels):
 *                      each kind taken, re-taken and released */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "harness_cluster.h"
#include "harness_replica.h"
#include "harness_sentinel.h"

typedef struct res {
  atomic_int done;
  int status;
  int64_t value;
} res_t;

static void on_done(rlock_lock_t *l, int status, int64_t value, void *arg) {
  (void)l;
  res_t *r = arg;
  r->status = status;
  r->value = value;
  atomic_store(&r->done, 1);
}
static int is_done(void *arg) { return atomic_load(&((res_t *)arg)->done); }

static th_cluster_t *cl;

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

typedef struct tries_arg {
  rlock_client_t *c;
  uint64_t at_least;
} tries_arg_t;
static int tried(void *arg) {
  tries_arg_t *a = arg;
  rlock_stats_t st;
  rlock_client_stats(a->c, &st);
  return st.acquire_attempts >= a->at_least;
}

typedef int (*new_fn)(rlock_client_t *, const void *, size_t, rlock_lock_t **);
static int new_spin(rlock_client_t *c, const void *n, size_t len, rlock_lock_t **out) {
  return rlock_lock_new_spin(c, n, len, NULL, out);
}

/* A holder (owner 1) and an async waiter (owner 7) on name; the release
 * wakes it (by message, or by polling for the spin lock). */
static void hold_and_hand_over(rlock_client_t *c, new_fn make, const char *name, const char *chan, bool pubsub,
                               int64_t *token) {
  rlock_lock_t *l = NULL;
  CHECK_OK(make(c, name, strlen(name), &l));
  CHECK_OK(rlock_lock_acquire(l, 1, 0, 60000, NULL));
  res_t w = {0};
  CHECK_OK(rlock_lock_acquire_async(l, 7, 30000, 60000, NULL, on_done, &w));
  th_server_t *owner = th_cluster_owner(cl, th_cluster_keyslot(cl, name));
  CHECK(owner != NULL);
  sub_arg_t a = {owner, chan};
  if (pubsub) {
    CHECK_MSG(th_wait_until(subscribed, &a, 20000), "%s: the waiter never subscribed", name);
  } else {
    rlock_stats_t st;
    rlock_client_stats(c, &st);
    tries_arg_t ta = {c, st.acquire_attempts + 3};
    CHECK_MSG(th_wait_until(tried, &ta, 20000), "%s: the waiter does not poll", name); /* it polls */
    CHECK_EQ(shard_numsub(owner, chan), 0);
  }
  CHECK_EQ(atomic_load(&w.done), 0);
  CHECK_OK(rlock_lock_release(l, 1));
  CHECK(th_wait_until(is_done, &w, 20000)); /* long before the 60 s lease */
  CHECK_OK(w.status);
  if (token) *token = w.value;
  CHECK_EQ(th_cmd_int(owner, "EXISTS", name, NULL), 1); /* the name's master holds it */
  CHECK_OK(rlock_lock_release(l, 7));
  rlock_lock_free(l);
}

TEST(cluster) {
  rlock_client_t *c = th_client(cl->url, 0);
  hold_and_hand_over(c, rlock_lock_new_nonreentrant, "kd:nr", "redisson_lock__channel:{kd:nr}", true, NULL);
  int64_t t = 0;
  hold_and_hand_over(c, rlock_lock_new_fenced, "kd:fenced", "redisson_lock__channel:{kd:fenced}", true, &t);
  CHECK_EQ(t, 2);
  th_server_t *owner = th_cluster_owner(cl, th_cluster_keyslot(cl, "kd:fenced"));
  char *v = th_cmd_str(owner, "GET", "redisson_lock_token:{kd:fenced}", NULL);
  CHECK_STREQ(v, "2");
  free(v);
  rlock_lock_t *f = NULL;
  CHECK_OK(rlock_lock_new_fenced(c, "kd:fenced", 9, &f));
  CHECK_OK(rlock_fenced_token(f, &t)); /* read on the slot's master */
  CHECK_EQ(t, 2);
  rlock_lock_free(f);
  hold_and_hand_over(c, rlock_lock_new_fenced, "{kd}:fenced", "redisson_lock__channel:{kd}:fenced", true, &t);
  CHECK_EQ(t, 2);
  owner = th_cluster_owner(cl, th_cluster_keyslot(cl, "{kd}:fenced"));
  CHECK_EQ(th_cmd_int(owner, "EXISTS", "redisson_lock_token:{kd}:fenced", NULL), 1);
  hold_and_hand_over(c, new_spin, "kd:spin", "redisson_lock__channel:{kd:spin}", false, NULL);
  /* the holder's second non-reentrant acquire */
  rlock_lock_t *l = NULL;
  CHECK_OK(rlock_lock_new_nonreentrant(c, "kd:nr", 5, &l));
  CHECK_OK(rlock_lock_trylock(l, 0, 30000));
  CHECK_RC(rlock_lock_trylock(l, 1000, 30000), RLOCK_ENOTREENTRANT);
  CHECK_OK(rlock_lock_unlock(l));
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* Each kind on a master with a replica: the replica has what the acquire wrote once it returned. */
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
  const char *names[3] = {"rep:nr", "rep:fenced", "rep:spin"};
  new_fn makes[3] = {rlock_lock_new_nonreentrant, rlock_lock_new_fenced, new_spin};
  for (int i = 0; i < 3; i++) {
    rlock_lock_t *l = NULL;
    CHECK_OK(makes[i](c, names[i], strlen(names[i]), &l));
    CHECK_OK(rlock_lock_trylock(l, 0, 30000));
    CHECK_EQ(th_cmd_int(r, "EXISTS", names[i], NULL), 1); /* WAIT: the replica has it */
    CHECK_OK(rlock_lock_unlock(l));
    rlock_lock_free(l);
  }
  char *v = th_cmd_str(r, "GET", "redisson_lock_token:{rep:fenced}", NULL);
  CHECK_STREQ(v, "1");
  free(v);
  rlock_client_free(c);
  th_server_stop(r);
  th_server_stop(m);
}

TEST(sentinel) {
  th_sentinels_t *t = th_sentinels_start("kinds", 1, 3);
  rlock_client_t *c = th_client(t->url, 0);
  const char *names[3] = {"sen:nr", "sen:fenced", "sen:spin"};
  new_fn makes[3] = {rlock_lock_new_nonreentrant, rlock_lock_new_fenced, new_spin};
  for (int i = 0; i < 3; i++) {
    rlock_lock_t *l = NULL;
    CHECK_OK(makes[i](c, names[i], strlen(names[i]), &l));
    CHECK_OK(rlock_lock_trylock(l, 0, 30000));
    CHECK_RC(rlock_lock_acquire(l, 9, 0, 30000, NULL), RLOCK_EBUSY);
    CHECK_EQ(th_cmd_int(t->nodes[0], "EXISTS", names[i], NULL), 1);
    CHECK_OK(rlock_lock_unlock(l));
    CHECK_OK(rlock_lock_acquire(l, 9, 0, 30000, NULL));
    CHECK_OK(rlock_lock_release(l, 9));
    rlock_lock_free(l);
  }
  rlock_client_free(c);
  th_sentinels_stop(t);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 280);
  cl = th_cluster_start(3, 0, 2000);
  RUN(cluster);
  th_cluster_stop(cl);
  RUN(replicas);
  RUN(sentinel);
  return th_done();
}
