/* test_redisson_cluster.c -- rlock and the real Redisson 4.7.0 share locks on
 * a Redis Cluster (3 masters, harness_cluster.h). Both use sharded pub/sub
 * there (Redis 7: SSUBSCRIBE, and the unlock scripts SPUBLISH), so a wake-up
 * crosses the languages only if both pick it:
 *   wakeups_cross_sharded  for a name on each master: Java holds, the C
 *                          waiter is woken by Java's SPUBLISH; C holds, Java's
 *                          lock() is woken by rlock's; each waiter's
 *                          subscription is sharded, on the slot's master
 *   tagged_name            the same for a name with a hash tag ("{t}x"),
 *                          whose channel Redisson builds without new braces
 * 60 s leases: only the message explains a wake-up seconds after the unlock. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "harness_cluster.h"
#include "harness_redisson.h"

static th_cluster_t *cl;
static char peer_addrs[TH_CLUSTER_MAX * 32];

#define LONG_LEASE 60000
#define WAKE_MS 5000

static void channel_of(const char *name, char *buf, size_t len) {
  if (strchr(name, '{')) snprintf(buf, len, "redisson_lock__channel:%s", name);
  else snprintf(buf, len, "redisson_lock__channel:{%s}", name);
}

static long long shard_numsub(th_server_t *s, const char *chan) {
  redisReply *r = th_cmd(s, "PUBSUB", "SHARDNUMSUB", chan, NULL);
  long long n = r->type == REDIS_REPLY_ARRAY && r->elements == 2 ? r->element[1]->integer : 0;
  th_reply_free(r);
  return n;
}

typedef struct sub_wait {
  th_server_t *owner;
  const char *chan;
} sub_wait_t;
static int sharded_subscribed(void *arg) {
  sub_wait_t *w = arg;
  return shard_numsub(w->owner, w->chan) >= 1;
}

/* Waits until a waiter subscribed (sharded) on the owner of name's slot;
 * checks nobody subscribed to the channel with plain SUBSCRIBE anywhere. */
static void wait_sharded_subscriber(th_server_t *owner, const char *name) {
  char ch[256];
  channel_of(name, ch, sizeof ch);
  sub_wait_t w = {owner, ch};
  CHECK_MSG(th_wait_until(sharded_subscribed, &w, 20000), "no sharded subscriber of %s on its master", ch);
  for (int i = 0; i < cl->masters; i++) CHECK_EQ(th_numsub(cl->node[i], ch), 0);
}

static void both_ways(th_peer_t *j, rlock_client_t *c, const char *name) {
  th_server_t *owner = th_cluster_owner(cl, th_cluster_keyslot(cl, name));
  CHECK(owner);
  /* Java holds, C waits, Java's unlock wakes it */
  th_peer_expect(j, "a", "ok", "getLock %s", name);
  th_peer_expect(j, "a", "ok", "lock %d", LONG_LEASE);
  th_cwaiter_t w = {.l = th_lock(c, name), .wait_ms = RLOCK_WAIT_FOREVER, .lease_ms = LONG_LEASE};
  th_cwaiter_start(&w);
  wait_sharded_subscriber(owner, name);
  long long sp0 = th_cmdstat(owner, "spublish"), p0 = th_cmdstat(owner, "publish");
  int64_t t0 = th_now_ms();
  th_peer_expect(j, "a", "ok", "unlock");
  CHECK_MSG(th_wait_until(th_cwaiter_done, &w, WAKE_MS), "%s: Java's unlock did not wake the C waiter", name);
  pthread_join(w.t, NULL);
  CHECK_OK(w.rc);
  CHECK_EQ(th_cmdstat(owner, "spublish"), sp0 + 1); /* Redisson published with SPUBLISH */
  CHECK_EQ(th_cmdstat(owner, "publish"), p0);
  fprintf(stderr, "# %s: Java unlock (SPUBLISH) -> C holds: %lld ms\n", name, (long long)(w.done_at - t0));

  /* C holds, Java waits, rlock's unlock wakes it */
  th_peer_send(j, "a", "lock");
  wait_sharded_subscriber(owner, name);
  sp0 = th_cmdstat(owner, "spublish");
  t0 = th_now_ms();
  CHECK_OK(rlock_lock_release(w.l, w.owner));
  char *got = th_peer_answer(j, "a", WAKE_MS);
  CHECK_STREQ(got, "ok");
  free(got);
  CHECK_EQ(th_cmdstat(owner, "spublish"), sp0 + 1); /* rlock published with SPUBLISH */
  CHECK_EQ(th_cmdstat(owner, "publish"), p0);
  fprintf(stderr, "# %s: C unlock (SPUBLISH) -> Java holds: %lld ms\n", name, (long long)(th_now_ms() - t0));
  CHECK_RC(rlock_lock_trylock(w.l, 0, 1000), RLOCK_EBUSY);
  th_peer_expect(j, "a", "ok", "unlock");
  rlock_lock_free(w.l);
}

TEST(wakeups_cross_sharded) {
  th_peer_t *j = th_peer_start("cluster", peer_addrs, 0, 0);
  rlock_client_t *c = th_client(cl->url, 0);
  /* one name on each master */
  char names[TH_CLUSTER_MAX][32];
  int found = 0;
  th_server_t *seen[TH_CLUSTER_MAX] = {0};
  for (int i = 0; found < cl->masters && i < 1000; i++) {
    char n[32];
    snprintf(n, sizeof n, "rsc:%d", i);
    th_server_t *o = th_cluster_owner(cl, th_cluster_keyslot(cl, n));
    int dup = 0;
    for (int k = 0; k < found; k++) dup |= seen[k] == o;
    if (dup) continue;
    seen[found] = o;
    snprintf(names[found++], sizeof names[0], "%s", n);
  }
  CHECK_EQ(found, cl->masters);
  for (int i = 0; i < found; i++) both_ways(j, c, names[i]);
  rlock_client_free(c);
  th_peer_stop(j);
}

TEST(tagged_name) {
  th_peer_t *j = th_peer_start("cluster", peer_addrs, 0, 0);
  rlock_client_t *c = th_client(cl->url, 0);
  both_ways(j, c, "rsc:{orders}:lock");
  rlock_client_free(c);
  th_peer_stop(j);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 170);
  const char *why = th_peer_unavailable();
  if (why) {
    printf("SKIP test_redisson_cluster: %s\n", why);
    return 77;
  }
  signal(SIGPIPE, SIG_IGN);
  cl = th_cluster_start(3, 0, 2000);
  size_t off = 0;
  for (int i = 0; i < cl->n; i++)
    off += (size_t)snprintf(peer_addrs + off, sizeof peer_addrs - off, "%sredis://127.0.0.1:%d", i ? "," : "",
                            cl->node[i]->port);
  RUN(wakeups_cross_sharded);
  RUN(tagged_name);
  th_cluster_stop(cl);
  return th_done();
}
