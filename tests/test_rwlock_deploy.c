/* test_rwlock_deploy.c -- the read-write lock (rlock_rwlock_new) on the
 * other deployments, real servers:
 *   replicas_wait       a master with one replica: every read/write acquire
 *                       and unlock carries its WAIT; the replica has the
 *                       hash and the read hold's timeout key
 *   replica_paused_undo the replica paused: a read acquire and a write
 *                       acquire end in RLOCK_ENOSYNC and their undo
 *                       (rw_acquire_undo.lua) leaves nothing on the master
 *   cluster_shards      a 3-master Cluster (sharded pub/sub): for names
 *                       plain, with a {tag} and Redisson's "{test}:abc:key",
 *                       every key (hash, timeout keys) on the slot's master;
 *                       a writer waiting on another client's reader is
 *                       woken by the read unlock's SPUBLISH "0"; the write
 *                       unlock SPUBLISHes "1" (a raw SSUBSCRIBE hears it);
 *                       the watchdog renews read holds there (per-slot batch)
 *   sentinel_master     redis+sentinel:// (a master, a replica, 3 sentinels):
 *                       readers of two clients, a writer woken by the last
 *                       read unlock, the keys on the master, the replica
 *                       acknowledging (WAIT) */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "harness_cluster.h"
#include "harness_replica.h"
#include "harness_sentinel.h"

static th_server_t *master;

static rlock_client_t *client_of(const char *url, int policy, int64_t watchdog_ms, int64_t sync_ms) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = url;
  o.replica_sync = policy;
  if (sync_ms) o.replica_sync_timeout_ms = sync_ms;
  if (watchdog_ms) o.watchdog_timeout_ms = watchdog_ms;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  return c;
}

static void timeout_key(rlock_client_t *c, const char *name, uint64_t owner, int i, char *buf, size_t len) {
  char id[128];
  th_owner_id(c, owner, id, sizeof id);
  if (strchr(name, '{')) snprintf(buf, len, "%s:%s:rwlock_timeout:%d", name, id, i);
  else snprintf(buf, len, "{%s}:%s:rwlock_timeout:%d", name, id, i);
}

TEST(replicas_wait) {
  th_server_t *rep = th_replica_start(master);
  th_replicas_wait(master, 1, 30000);
  rlock_client_t *c = client_of(master->url, RLOCK_REPLICA_SYNC_ALL, 0, 0);
  rlock_lock_t *r, *w;
  CHECK_OK(rlock_rwlock_new(c, "rwd:wait", 8, &r, &w));
  long long w0 = th_cmdstat(master, "wait");
  CHECK_OK(rlock_lock_acquire(r, 1, 0, 30000, NULL));
  CHECK_EQ(th_cmdstat(master, "wait") - w0, 1);
  char key[512];
  timeout_key(c, "rwd:wait", 1, 1, key, sizeof key);
  th_replicas_caught_up(master, 1, 30000); /* (its own WAITs) */
  CHECK_EQ(th_cmd_int(rep, "EXISTS", "rwd:wait", NULL), 1);
  CHECK_EQ(th_cmd_int(rep, "EXISTS", key, NULL), 1);
  w0 = th_cmdstat(master, "wait");
  CHECK_OK(rlock_lock_release(r, 1));
  CHECK_OK(rlock_lock_acquire(w, 1, 0, 30000, NULL));
  CHECK_OK(rlock_lock_release(w, 1));
  CHECK_EQ(th_cmdstat(master, "wait") - w0, 3); /* unlock, acquire, unlock */
  rlock_lock_free(r), rlock_lock_free(w);
  rlock_client_free(c);
  th_server_stop(rep);
  th_replicas_wait(master, 0, 30000);
}

TEST(replica_paused_undo) {
  th_server_t *rep = th_replica_start(master);
  th_replicas_wait(master, 1, 30000);
  rlock_client_t *c = client_of(master->url, RLOCK_REPLICA_SYNC_ALL, 0, 200);
  rlock_lock_t *r, *w;
  CHECK_OK(rlock_rwlock_new(c, "rwd:pause", 9, &r, &w));
  th_server_pause(rep);
  CHECK_RC(rlock_lock_acquire(r, 1, 0, 30000, NULL), RLOCK_ENOSYNC);
  CHECK_EQ(th_cmd_int(master, "EXISTS", "rwd:pause", NULL), 0);
  char key[512];
  timeout_key(c, "rwd:pause", 1, 1, key, sizeof key);
  CHECK_EQ(th_cmd_int(master, "EXISTS", key, NULL), 0); /* the undo took the timeout key too */
  CHECK_RC(rlock_lock_acquire(w, 1, 0, 30000, NULL), RLOCK_ENOSYNC);
  CHECK_EQ(th_cmd_int(master, "EXISTS", "rwd:pause", NULL), 0);
  th_server_resume(rep);
  CHECK_OK(rlock_lock_acquire(r, 1, 0, 30000, NULL));
  CHECK_OK(rlock_lock_release(r, 1));
  CHECK_EQ(th_cmd_int(master, "EXISTS", "rwd:pause", NULL), 0);
  rlock_lock_free(r), rlock_lock_free(w);
  rlock_client_free(c);
  th_server_stop(rep);
  th_replicas_wait(master, 0, 30000);
}

/* ------------------------------------------------------------ Cluster */

static th_cluster_t *cl;

static long long shard_numsub(th_server_t *s, const char *chan) {
  redisReply *r = th_cmd(s, "PUBSUB", "SHARDNUMSUB", chan, NULL);
  long long n = r->type == REDIS_REPLY_ARRAY && r->elements == 2 ? r->element[1]->integer : 0;
  th_reply_free(r);
  return n;
}

typedef struct chan_on {
  th_server_t *s;
  const char *chan;
} chan_on_t;
static int chan_subscribed(void *arg) {
  chan_on_t *c = arg;
  return shard_numsub(c->s, c->chan) > 0;
}

typedef struct waiter {
  rlock_lock_t *lock;
  int rc;
  int64_t at;
  atomic_int done;
} waiter_t;
static void *waiter_main(void *arg) {
  waiter_t *w = arg;
  w->rc = rlock_lock_acquire(w->lock, 7, 60000, 60000, NULL);
  w->at = th_now_ms();
  atomic_store(&w->done, 1);
  return NULL;
}
static int waiter_done(void *arg) { return atomic_load(&((waiter_t *)arg)->done); }
static int numsub_one(void *s) { return th_numsub(s, "redisson_rwlock:{rws:lock}") >= 1; }

TEST(cluster_shards) {
  rlock_client_t *a = client_of(cl->url, RLOCK_REPLICA_SYNC_ONE, 1500, 0);
  rlock_client_t *b = client_of(cl->url, RLOCK_REPLICA_SYNC_ONE, 0, 0);
  const char *names[] = {"rw-plain", "rw{tag}x", "{test}:abc:key", NULL};
  for (int i = 0; names[i]; i++) {
    const char *name = names[i];
    rlock_lock_t *ra, *wa, *rb, *wb;
    CHECK_OK(rlock_rwlock_new(a, name, strlen(name), &ra, &wa));
    CHECK_OK(rlock_rwlock_new(b, name, strlen(name), &rb, &wb));
    th_server_t *owner = th_cluster_owner(cl, th_cluster_keyslot(cl, name));
    CHECK(owner != NULL);
    CHECK_OK(rlock_lock_acquire(ra, 1, 0, RLOCK_LEASE_WATCHDOG, NULL));
    CHECK_OK(rlock_lock_acquire(rb, 2, 0, 60000, NULL)); /* two readers, two clients */
    char key[512];
    timeout_key(a, name, 1, 1, key, sizeof key);
    CHECK_MSG(th_cmd_int(owner, "EXISTS", key, NULL) == 1, "%s: timeout key %s not on the slot's master", name, key);
    CHECK_OK(rlock_lock_release(rb, 2));
    th_sleep_ms(2000); /* past a's 1.5 s lease: only a's renewal keeps its read hold */
    CHECK_MSG(th_cmd_int(owner, "EXISTS", key, NULL) == 1, "%s: the read hold was not renewed", name);
    /* a writer of client b waits, sharded-subscribed on the slot's master */
    char chan[256];
    if (strchr(name, '{')) snprintf(chan, sizeof chan, "redisson_rwlock:%s", name);
    else snprintf(chan, sizeof chan, "redisson_rwlock:{%s}", name);
    CHECK_EQ(th_cluster_keyslot(cl, chan), th_cluster_keyslot(cl, name));
    waiter_t wt = {.lock = wb};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, waiter_main, &wt) == 0);
    chan_on_t co = {owner, chan};
    CHECK_MSG(th_wait_until(chan_subscribed, &co, 20000), "%s: the writer never subscribed", name);
    int64_t t0 = th_now_ms();
    CHECK_OK(rlock_lock_release(ra, 1)); /* SPUBLISH "0" */
    CHECK_MSG(th_wait_until(waiter_done, &wt, 30000), "%s: the writer never got in", name);
    CHECK(pthread_join(t, NULL) == 0);
    CHECK_OK(wt.rc);
    CHECK_MSG(wt.at - t0 < 20000, "%s: the writer entered %lld ms after the read unlock", name,
              (long long)(wt.at - t0));
    /* the write unlock's "1" on the sharded channel */
    redisContext *sub = th_raw_connect(owner);
    redisReply *r = redisCommand(sub, "SSUBSCRIBE %s", chan);
    CHECK(r && r->type == REDIS_REPLY_ARRAY);
    freeReplyObject(r);
    CHECK_OK(rlock_lock_release(wb, 7));
    CHECK(redisGetReply(sub, (void **)&r) == REDIS_OK && r && r->type == REDIS_REPLY_ARRAY && r->elements == 3);
    CHECK_STREQ(r->element[0]->str, "smessage");
    CHECK_STREQ(r->element[2]->str, "1");
    freeReplyObject(r);
    redisFree(sub);
    CHECK_EQ(th_cmd_int(owner, "EXISTS", name, NULL), 0);
    rlock_lock_free(ra), rlock_lock_free(wa), rlock_lock_free(rb), rlock_lock_free(wb);
  }
  rlock_client_free(a);
  rlock_client_free(b);
}

/* ------------------------------------------------------------ Sentinel */

static th_sentinels_t *dep;

TEST(sentinel_master) {
  rlock_client_t *a = client_of(dep->url, RLOCK_REPLICA_SYNC_ONE, 0, 0);
  rlock_client_t *b = client_of(dep->url, RLOCK_REPLICA_SYNC_ONE, 0, 0);
  th_server_t *m = dep->nodes[0];
  rlock_lock_t *ra, *wa, *rb, *wb;
  CHECK_OK(rlock_rwlock_new(a, "rws:lock", 8, &ra, &wa));
  CHECK_OK(rlock_rwlock_new(b, "rws:lock", 8, &rb, &wb));
  long long w0 = th_cmdstat(m, "wait");
  CHECK_OK(rlock_lock_acquire(ra, 1, 0, 60000, NULL));
  CHECK_OK(rlock_lock_acquire(rb, 1, 0, 60000, NULL));
  CHECK(th_cmdstat(m, "wait") - w0 >= 2); /* the replica acknowledged each */
  char key[512];
  timeout_key(b, "rws:lock", 1, 1, key, sizeof key);
  CHECK_EQ(th_cmd_int(m, "EXISTS", key, NULL), 1);
  CHECK_RC(rlock_lock_acquire(wa, 2, 0, 60000, NULL), RLOCK_EBUSY);
  CHECK_OK(rlock_lock_release(rb, 1));
  waiter_t wt = {.lock = wb};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, waiter_main, &wt) == 0);
  CHECK(th_wait_until(numsub_one, m, 20000));
  int64_t t0 = th_now_ms();
  CHECK_OK(rlock_lock_release(ra, 1)); /* the last reader: "0" */
  CHECK_MSG(th_wait_until(waiter_done, &wt, 30000), "the writer never got in");
  CHECK(pthread_join(t, NULL) == 0);
  CHECK_OK(wt.rc);
  CHECK(wt.at - t0 < 20000); /* the message, not the 60 s lease */
  CHECK_OK(rlock_lock_release(wb, 7));
  CHECK_EQ(th_cmd_int(m, "EXISTS", "rws:lock", NULL), 0);
  rlock_lock_free(ra), rlock_lock_free(wa), rlock_lock_free(rb), rlock_lock_free(wb);
  rlock_client_free(a);
  rlock_client_free(b);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 400);
  master = th_server_start(NULL);
  RUN(replicas_wait);
  RUN(replica_paused_undo);
  th_server_stop(master);
  cl = th_cluster_start(3, 0, 5000);
  RUN(cluster_shards);
  th_cluster_stop(cl);
  dep = th_sentinels_start("rwmaster", 1, 3);
  RUN(sentinel_master);
  th_sentinels_stop(dep);
  return th_done();
}
