/* test_redisson_family_sentinel.c -- the lock family, the semaphore and the
 * latch shared with the real Redisson 4.7.0 through Redis Sentinel (a
 * master, 2 replicas, 3 sentinels: harness_sentinel.h), and both sides
 * follow a failover (issues 21, 24, 25):
 *   family_failover  before: Java holds a fair lock (watchdog) and a C
 *                    waiter is queued; C holds a write lock (watchdog) and a
 *                    Java reader waits; Java holds a semaphore's only permit
 *                    and a C acquire waits; a Java await waits on a latch of
 *                    count 1; C holds a permit-expirable semaphore's only
 *                    permit (60 s) and a Java acquire waits. SENTINEL
 *                    FAILOVER. Every hold, queue entry, permit and count is
 *                    on the new master and every waiter still waits. Then,
 *                    on the new master: Java's fair unlock wakes the C
 *                    waiter, rlock's write unlock wakes the Java reader,
 *                    Java's release wakes the C acquire, rlock's count-down
 *                    opens Java's await, rlock's permit release wakes Java's
 *                    acquire; each within seconds, far below the holds' TTLs
 *                    (only the message explains it).
 *   family_master_killed  the same with the master killed (SIGKILL) in place
 *                    of SENTINEL FAILOVER. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "harness_redisson.h"
#include "harness_replica.h"
#include "harness_sentinel.h"

static th_sentinels_t *dep;

#define WAKE_MS 8000 /* Redisson may first need its 1 s sentinel scan and a retry */

/* Subscribers of a channel (plain pub/sub) on a node, or on either of two. */
typedef struct sub_wait {
  th_server_t *node[2];
  const char *chan;
} sub_wait_t;
static int subscribed(void *arg) {
  sub_wait_t *w = arg;
  for (int i = 0; i < 2; i++)
    if (w->node[i] && th_numsub(w->node[i], w->chan) >= 1) return 1;
  return 0;
}
static void wait_subscribed(th_server_t *a, th_server_t *b, const char *chan, const char *who) {
  sub_wait_t w = {{a, b}, chan};
  if (th_wait_until(subscribed, &w, 30000)) return;
  for (int i = 0; i < dep->nnodes; i++) { /* where the subscribers are */
    th_server_t *n = dep->nodes[i];
    if (n->pid <= 0) continue;
    redisReply *r = th_cmd(n, "CLIENT", "LIST", "TYPE", "pubsub", NULL);
    fprintf(stderr, "# node %d%s: %lld subscribers of %s; pubsub clients:\n%s\n", n->port,
            n == a ? " (new master)" : "", th_numsub(n, chan), chan, r && r->str ? r->str : "?");
    th_reply_free(r);
  }
  CHECK_MSG(0, "%s never subscribed to %s", who, chan);
}

/* A live replica of m, linked to it, where chan has a subscriber (NULL: none). */
static th_server_t *subscribed_replica_of(th_server_t *m, const char *chan) {
  char want[64];
  snprintf(want, sizeof want, "master_port:%d", m->port);
  for (int i = 0; i < dep->nnodes; i++) {
    th_server_t *n = dep->nodes[i];
    if (n == m || n->pid <= 0 || th_numsub(n, chan) < 1) continue;
    redisReply *r = th_cmd(n, "INFO", "replication", NULL);
    bool linked = r && r->str && strstr(r->str, want) && strstr(r->str, "master_link_status:up");
    th_reply_free(r);
    if (linked) return n;
  }
  return NULL;
}

/* The channel has a subscriber on m, or on a replica whose link to m is up
 * (it gets m's messages by replication): where, in on. */
typedef struct placed {
  th_server_t *m;
  const char *chan;
  th_server_t *on;
} placed_t;
static bool is_master_now(th_server_t *n) {
  redisReply *r = th_cmd(n, "ROLE", NULL);
  bool yes = r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 && r->element[0]->str &&
             !strcmp(r->element[0]->str, "master");
  th_reply_free(r);
  return yes;
}
static int placed(void *arg) {
  placed_t *p = arg;
  /* a second failover after the test learnt m (a loaded machine, down-after
   * 1 s) moves every client to the master it names: follow it */
  th_server_t *cur = th_sentinels_node(dep, th_sentinel_master_port(dep, 0));
  if (cur && cur != p->m && cur->pid > 0 && is_master_now(cur) && !is_master_now(p->m)) {
    fprintf(stderr, "# NOTE: the master moved again, from %d to %d\n", p->m->port, cur->port);
    p->m = cur;
  }
  p->on = th_numsub(p->m, p->chan) >= 1 ? p->m : subscribed_replica_of(p->m, p->chan);
  return p->on != NULL;
}

/* The C semaphore waiter subscribed again, or its acquire ended. */
typedef struct sem_sub {
  sub_wait_t sub;
  th_res_t *res;
} sem_sub_t;
static int sem_subscribed_or_done(void *arg) {
  sem_sub_t *w = arg;
  return th_res_done(w->res) || subscribed(&w->sub);
}

typedef struct fair_wait {
  th_server_t *m;
  const char *queue;
} fair_wait_t;
static int queued(void *arg) {
  fair_wait_t *w = arg;
  return th_cmd_int(w->m, "LLEN", w->queue, NULL) >= 1;
}

static void family_failover(bool kill) {
  char fair[32], rw[32], sem[32], latch[32], pes[32], fairq[64], rwch[64], semch[64], latchch[96], pesch[64];
  const char *how = kill ? "kill" : "failover";
  snprintf(fair, sizeof fair, "rfs:fair:%s", how);
  snprintf(rw, sizeof rw, "rfs:rw:%s", how);
  snprintf(sem, sizeof sem, "rfs:sem:%s", how);
  snprintf(latch, sizeof latch, "rfs:latch:%s", how);
  snprintf(pes, sizeof pes, "rfs:pes:%s", how);
  snprintf(fairq, sizeof fairq, "redisson_lock_queue:{%s}", fair);
  snprintf(rwch, sizeof rwch, "redisson_rwlock:{%s}", rw);
  snprintf(semch, sizeof semch, "redisson_sc:{%s}", sem);
  snprintf(latchch, sizeof latchch, "redisson_countdownlatch__channel__{%s}", latch);
  snprintf(pesch, sizeof pesch, "redisson_sc:{%s}", pes);
  th_server_t *old = th_sentinels_node(dep, th_sentinel_master_port(dep, 0));
  CHECK(old);
  CHECK_MSG(th_sentinels_wait_replicas(old, 2, 60000), "the master's replicas are not online");
  char addrs[1200];
  size_t off = (size_t)snprintf(addrs, sizeof addrs, "%s", dep->name);
  for (int i = 0; i < dep->nsent; i++)
    off += (size_t)snprintf(addrs + off, sizeof addrs - off, ",redis://127.0.0.1:%d", dep->sent[i].port);
  th_peer_t *j = th_peer_start("sentinel", addrs, 0, 0);
  /* the replica-sync check with room for a failover on a loaded machine
   * (test_redisson_sentinel's waiter once ended RLOCK_ENOSYNC there): this
   * test is about the wake-ups across languages */
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = dep->url;
  o.command_timeout_ms = 8000; /* (a WAIT must end within it) */
  o.replica_sync_timeout_ms = 4000;
  o.retry_attempts = 6;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));

  /* fair: Java holds, a C waiter queued */
  rlock_lock_t *fl = NULL;
  CHECK_OK(rlock_lock_new_fair(c, fair, strlen(fair), &fl));
  th_peer_expect(j, "f", "ok", "getFairLock %s", fair);
  th_peer_expect(j, "f", "ok", "lock");
  th_cwaiter_t fw = {.l = fl, .wait_ms = RLOCK_WAIT_FOREVER, .lease_ms = RLOCK_LEASE_WATCHDOG};
  th_cwaiter_start(&fw);
  fair_wait_t fq = {old, fairq};
  CHECK_MSG(th_wait_until(queued, &fq, 20000), "the C fair waiter never queued");
  /* rw: C writes, a Java reader waits */
  rlock_lock_t *rd = NULL, *wr = NULL;
  CHECK_OK(rlock_rwlock_new(c, rw, strlen(rw), &rd, &wr));
  CHECK_OK(rlock_lock_lock(wr, RLOCK_LEASE_WATCHDOG));
  th_peer_expect(j, "r", "ok", "getReadLock %s", rw);
  th_peer_send(j, "r", "lock");
  wait_subscribed(old, NULL, rwch, "the Java reader");
  /* semaphore: Java holds the only permit, a C acquire waits */
  rlock_semaphore_t *s = NULL;
  CHECK_OK(rlock_semaphore_new(c, sem, strlen(sem), &s));
  th_peer_expect(j, "s", "ok", "getSemaphore %s", sem);
  th_peer_expect(j, "s", "true", "semTrySetPermits 1");
  th_peer_expect(j, "s", "ok", "semAcquire 1");
  th_res_t sw = {0};
  CHECK_OK(rlock_semaphore_acquire_async(s, 1, RLOCK_WAIT_FOREVER, NULL, th_res_sem, &sw));
  wait_subscribed(old, NULL, semch, "the C semaphore waiter");
  /* latch: count 1, Java awaits */
  rlock_latch_t *l = NULL;
  CHECK_OK(rlock_latch_new(c, latch, strlen(latch), &l));
  int set = 0;
  CHECK_OK(rlock_latch_try_set_count(l, 1, &set));
  CHECK_EQ(set, 1);
  th_peer_expect(j, "l", "ok", "getLatch %s", latch);
  th_peer_send(j, "l", "latchAwait 120000");
  wait_subscribed(old, NULL, latchch, "the Java awaiter");
  /* permit-expirable semaphore: C holds the only permit (60 s), Java's acquire waits */
  rlock_permits_t *ps = NULL;
  CHECK_OK(rlock_permits_new(c, pes, strlen(pes), &ps));
  th_peer_expect(j, "p", "ok", "getPermitSemaphore %s", pes);
  th_peer_expect(j, "p", "true", "pesTrySetPermits 1");
  char cid[RLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(rlock_permits_acquire(ps, 0, 60000, NULL, cid));
  th_peer_send(j, "p", "pesAcquire 60000");
  wait_subscribed(old, NULL, pesch, "the Java permit waiter");
  th_replicas_caught_up(old, 2, 10000);

  if (kill) {
    th_server_kill(old);
  } else {
    redisReply *r = th_sentinel_cmd(dep, 0, "SENTINEL FAILOVER %s", dep->name);
    CHECK_MSG(r && r->type == REDIS_REPLY_STATUS, "SENTINEL FAILOVER: %s", r && r->str ? r->str : "no reply");
    freeReplyObject(r);
  }
  th_server_t *demoted = kill ? NULL : old; /* a Java subscription may stay there (replicated messages) */
  th_server_t *m = th_sentinels_wait_failover(dep, old->port, 60000);
  CHECK_MSG(m, "no failover within 60 s");
  CHECK_MSG(th_sentinels_wait_replicas(m, 1, 60000), "the new master has no replica online");

  /* everything on the new master, every waiter still waiting */
  CHECK_EQ(th_cmd_int(m, "EXISTS", fair, NULL), 1);
  CHECK_EQ(th_cmd_int(m, "LLEN", fairq, NULL), 1);
  CHECK_EQ(th_cmd_int(m, "EXISTS", rw, NULL), 1);
  char *v = th_cmd_str(m, "GET", sem, NULL);
  CHECK_STREQ(v, "0");
  free(v);
  v = th_cmd_str(m, "GET", latch, NULL);
  CHECK_STREQ(v, "1");
  free(v);
  CHECK(!th_cwaiter_done(&fw));
  CHECK(!th_res_done(&sw));
  char *early = NULL;
  CHECK_MSG(!th_peer_poll(j, "r", 0, &early), "the Java reader got in beside the C writer: %s", early);
  CHECK_MSG(!th_peer_poll(j, "l", 0, &early), "Java's await ended on a closed latch: %s", early);
  CHECK_MSG(!th_peer_poll(j, "p", 0, &early), "Java took the permit C holds: %s", early);
  char pesz[64];
  snprintf(pesz, sizeof pesz, "{%s}:timeout", pes);
  CHECK_EQ(th_cmd_int(m, "ZCARD", pesz, NULL), 1);

  /* fair: Java's unlock wakes the C waiter. Timed from the unlock's answer:
   * Redisson may first look for the new master. */
  th_peer_expect(j, "f", "ok", "unlock");
  int64_t t0 = th_now_ms();
  CHECK_MSG(th_wait_until(th_cwaiter_done, &fw, WAKE_MS),
            "Java's fair unlock after the failover did not wake the C waiter");
  pthread_join(fw.t, NULL);
  CHECK_OK(fw.rc);
  fprintf(stderr, "# after the failover: Java fair unlock -> C holds: %lld ms\n", (long long)(th_now_ms() - t0));
  char owner[128];
  th_owner_id(c, fw.owner, owner, sizeof owner);
  CHECK_EQ(th_hget_num(m, fair, owner), 1);
  CHECK_OK(rlock_lock_release(fl, fw.owner));

  /* semaphore: Java's release wakes the C acquire (subscribed again on the new master) */
  sem_sub_t ss = {{{m, NULL}, semch}, &sw};
  th_wait_until(sem_subscribed_or_done, &ss, 30000);
  CHECK_MSG(!th_res_done(&sw), "the C semaphore acquire ended during the failover: %s", rlock_strerror(sw.status));
  /* Seen once in a CI dry run (master killed, a loaded machine): rlock's
   * subscriber connection stayed on a replica of the new master (connected
   * when the kill came, for more than 60 s), its command connection on the
   * new master. Not understood yet (session 14's note). A replica gets the
   * master's messages by replication, so the wake-up below still tests the
   * promise; the placement is printed, not failed. Seen again (session 19's
   * dry run): the subscriber on the other replica, which the test looked at
   * once, before its link to the new master was up; it now waits for a
   * subscriber on the new master or on a replica linked to it. */
  placed_t pl = {m, semch, NULL};
  if (!th_wait_until(placed, &pl, 30000)) { /* where it is, and what each node replicates from */
    for (int i = 0; i < dep->nnodes; i++) {
      th_server_t *n = dep->nodes[i];
      if (n->pid <= 0) continue;
      char *info = th_cmd_str(n, "INFO", "replication", NULL);
      fprintf(stderr, "# node %d: %lld subscribers of %s; %.300s\n", n->port, th_numsub(n, semch), semch,
              info ? info : "?");
      free(info);
    }
    wait_subscribed(m, NULL, semch, "the C semaphore waiter (again)"); /* fails, with the pub/sub clients */
    pl.on = m;
  }
  m = pl.m; /* (the master may have moved again) */
  if (pl.on != m)
    fprintf(stderr, "# NOTE: rlock's subscriber of %s is on replica %d of the new master %d\n", semch, pl.on->port,
            m->port);
  th_peer_expect(j, "s", "ok", "semRelease 1");
  t0 = th_now_ms();
  CHECK_MSG(th_wait_until(th_res_done, &sw, WAKE_MS), "Java's release after the failover did not wake the C acquire");
  CHECK_OK(sw.status);
  fprintf(stderr, "# after the failover: Java release -> C acquires: %lld ms\n", (long long)(th_now_ms() - t0));
  v = th_cmd_str(m, "GET", sem, NULL);
  CHECK_STREQ(v, "0");
  free(v);

  /* rw: rlock's write unlock wakes the Java reader, once Redisson has
   * subscribed again where the message reaches it (the new master, or the
   * demoted node, which gets it by replication) */
  wait_subscribed(m, demoted, rwch, "the Java reader (again)");
  t0 = th_now_ms();
  th_peer_wait_parked(j, "r"); /* a write unlock wakes only Java threads asleep */
  CHECK_OK(rlock_lock_unlock(wr));
  char *got = th_peer_answer(j, "r", WAKE_MS);
  CHECK_STREQ(got, "ok");
  free(got);
  fprintf(stderr, "# after the failover: C write unlock -> Java reads: %lld ms\n", (long long)(th_now_ms() - t0));
  th_peer_expect(j, "r", "ok", "unlock");

  /* latch: rlock's count-down opens Java's await */
  wait_subscribed(m, demoted, latchch, "the Java awaiter (again)");
  t0 = th_now_ms();
  CHECK_OK(rlock_latch_count_down(l, NULL));
  got = th_peer_answer(j, "l", WAKE_MS);
  CHECK_STREQ(got, "true");
  free(got);
  fprintf(stderr, "# after the failover: C count-down -> Java's await opens: %lld ms\n", (long long)(th_now_ms() - t0));

  /* permits: rlock's release wakes Java's acquire */
  wait_subscribed(m, demoted, pesch, "the Java permit waiter (again)");
  t0 = th_now_ms();
  CHECK_OK(rlock_permits_release(ps, cid));
  got = th_peer_answer(j, "p", WAKE_MS);
  CHECK_MSG(strlen(got) == RLOCK_PERMIT_ID_LEN, "Java's permit id: %s", got);
  fprintf(stderr, "# after the failover: C permit release -> Java acquires: %lld ms\n", (long long)(th_now_ms() - t0));
  CHECK_OK(rlock_permits_release(ps, got)); /* and C releases Java's permit by its id */
  free(got);
  int64_t avail = -1;
  CHECK_OK(rlock_permits_available(ps, &avail));
  CHECK_EQ(avail, 1);

  CHECK_OK(rlock_semaphore_release(s, 1, NULL));
  CHECK_EQ(th_cmd_int(m, "EXISTS", fair, NULL), 0);
  CHECK_EQ(th_cmd_int(m, "EXISTS", rw, NULL), 0);
  CHECK_EQ(th_cmd_int(m, "EXISTS", latch, NULL), 0);
  rlock_lock_free(fl), rlock_lock_free(rd), rlock_lock_free(wr);
  rlock_semaphore_free(s);
  rlock_permits_free(ps);
  rlock_latch_free(l);
  rlock_client_free(c);
  th_peer_stop(j);
}

TEST(family_failover) { family_failover(false); }
TEST(family_master_killed) { family_failover(true); }

int main(int argc, char **argv) {
  th_init(argc, argv, 280);
  const char *why = th_peer_unavailable();
  if (why) {
    printf("SKIP test_redisson_family_sentinel: %s\n", why);
    return 77;
  }
  signal(SIGPIPE, SIG_IGN);
  dep = th_sentinels_start("rfm", 2, 3);
  RUN(family_failover);
  RUN(family_master_killed);
  th_sentinels_stop(dep);
  return th_done();
}
