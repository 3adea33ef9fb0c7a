/* test_restart.c -- redis-server killed (-9) and restarted on the same port
 * while a holder holds (watchdog 3000 ms) and a waiter waits, for every
 * deployment x lock-kind row:
 *   without persistence: the hold is gone after the restart; the holder is
 *     told (lost callback, promptly after its reconnect) and its unlock says
 *     ENOTHELD; the waiter gets the lock. Mutual exclusion is NOT kept: the
 *     checker must report exactly one overlap, as a violation (the waiter
 *     was granted while the holder's lease was still valid): the
 *     documented limit of a non-persistent server;
 *   with AOF (appendfsync always): the hash survives with its TTL, the
 *     holder keeps its hold (renewed after the reconnect, never told lost),
 *     the waiter keeps waiting and gets the lock after the unlock; clean.
 * Every wait is bounded: nobody hangs. */
#include <stdio.h>
#include <string.h>

#include "fault_harness.h"

#define WATCHDOG_MS 3000

typedef struct ns_arg {
  th_server_t *s;
  const char *chan;
} ns_arg_t;
/* One subscriber on the kind's channel, or (the fair lock) on a channel of
 * one waiter of its own ("<channel>:<owner>"). */
static int subscribed(void *a) {
  ns_arg_t *n = a;
  if (th_numsub(n->s, n->chan) == 1) return 1;
  char pat[160];
  snprintf(pat, sizeof pat, "%s:*", n->chan);
  redisReply *r = th_cmd(n->s, "PUBSUB", "CHANNELS", pat, NULL);
  int one = r->type == REDIS_REPLY_ARRAY && r->elements == 1;
  th_reply_free(r);
  return one;
}

static void restart(const fh_deploy_t *dep, const fh_kind_t *kind, int aof) {
  fh_deploy_opts_t o = {.appendonly = aof};
  void *d = dep->start(&o);
  th_server_t *raw = dep->raw(d);
  char name[64], chan[128];
  snprintf(name, sizeof name, "restart:%s:%s", kind->name, aof ? "aof" : "none");
  snprintf(chan, sizeof chan, "%s:{%s}", kind->channel, name);
  fh_pool_t p;
  fh_pool_init(&p);
  fh_worker_spec_t s = {.url = dep->url(d),
                        .kind = kind,
                        .lock_name = name,
                        .lease_ms = RLOCK_LEASE_WATCHDOG,
                        .watchdog_ms = WATCHDOG_MS,
                        .reconnect_max_ms = 200,
                        .wait_ms = RLOCK_WAIT_FOREVER,
                        .hold_ms = -1,
                        .iterations = 1};
  int a = fh_spawn(&p, &s);
  fh_await(&p, a, HK_ENTER, 10000);
  int b = fh_spawn(&p, &s);
  fh_await(&p, b, HK_ATTEMPT, 10000);
  ns_arg_t ns = {raw, chan};
  CHECK(th_wait_until(subscribed, &ns, 5000)); /* B is parked on the channel */
  CHECK_EQ(th_cmd_int(raw, "EXISTS", name, NULL), 1);

  int64_t t0 = rlock_now_ms();
  dep->restart(d);
  int64_t t_up = rlock_now_ms();
  long long hlen = th_cmd_int(raw, "EXISTS", name, NULL); /* the hash, or the simple string */
  long long pttl = th_cmd_int(raw, "PTTL", name, NULL);
  printf("restart took %lld ms; after it: EXISTS %lld, PTTL %lld\n", (long long)(t_up - t0), hlen, pttl);
  char outcome[220];
  hist_report_t rep;
  if (!aof) {
    CHECK_EQ(hlen, 0); /* nothing survives */
    fh_event_t lost = fh_await(&p, a, HK_LOST, 10000);
    fh_event_t eb = fh_await(&p, b, HK_ENTER, 10000);
    printf("holder told %lld ms after the restart; waiter entered %lld ms after it\n",
           (long long)(lost.t_ns / 1000000 - t_up), (long long)(eb.t_ns / 1000000 - t_up));
    fh_send(&p, a, FH_CMD_EXIT);
    CHECK_RC(fh_await(&p, a, HK_RELEASE, 5000).rc, RLOCK_ENOTHELD);
    fh_send(&p, b, FH_CMD_EXIT);
    CHECK_OK(fh_await(&p, b, HK_RELEASE, 5000).rc);
    fh_pool_finish(&p, 10000);
    CHECK_EQ(fh_check(&p, HIST_MUTEX_LEASE, &rep), HIST_VIOLATION);
    CHECK_EQ(rep.overlaps, 1);
    CHECK_EQ(rep.violations, 1);
    CHECK(rep.list[0].a.lost_ns > 0); /* but the stale holder was told */
    snprintf(outcome, sizeof outcome,
             "hold lost; holder told %lld ms after restart, unlock ENOTHELD; waiter granted "
             "%lld ms after restart; 1 overlap (expected: no persistence)",
             (long long)(lost.t_ns / 1000000 - t_up), (long long)(eb.t_ns / 1000000 - t_up));
  } else {
    CHECK_EQ(hlen, 1); /* the key survived */
    CHECK(pttl > 0 && pttl <= WATCHDOG_MS);
    /* the holder's hold goes on: renewed after the reconnect */
    int64_t vu = 0;
    for (int i = 0; i < 100 && vu <= t_up + WATCHDOG_MS; i++) {
      fh_send(&p, a, FH_CMD_VALID);
      fh_event_t v = fh_await(&p, a, HK_VALID, 5000);
      CHECK_OK(v.rc); /* ENOTHELD here would mean the client dropped the hold */
      vu = v.value;
      if (vu <= t_up + WATCHDOG_MS) th_sleep_ms(50); /* no event announces a renewal */
    }
    CHECK_MSG(vu > t_up + WATCHDOG_MS, "the holder never renewed after the restart");
    fh_event_t ev;
    CHECK(!fh_poll_event(&p, a, HK_LOST, &ev));
    CHECK(!fh_poll_event(&p, b, HK_ENTER, &ev));
    fh_send(&p, a, FH_CMD_EXIT);
    CHECK_OK(fh_await(&p, a, HK_RELEASE, 5000).rc);
    fh_event_t eb = fh_await(&p, b, HK_ENTER, 5000);
    fh_send(&p, b, FH_CMD_EXIT);
    CHECK_OK(fh_await(&p, b, HK_RELEASE, 5000).rc);
    fh_pool_finish(&p, 10000);
    CHECK_EQ(fh_check(&p, HIST_MUTEX_LEASE, &rep), HIST_OK);
    CHECK_EQ(rep.overlaps, 0);
    CHECK_EQ(rep.lost, 0);
    (void)eb;
    snprintf(outcome, sizeof outcome,
             "key survived (PTTL %lld); hold kept and renewed, not reported lost; waiter "
             "granted after the unlock",
             pttl);
  }
  size_t viol = rep.violations;
  hist_report_free(&rep);
  fh_result(aof ? "server-restart(aof-always)" : "server-restart(no-persistence)", dep->name, kind->name, outcome,
            viol);
  dep->stop(d);
}

TEST(restart_without_persistence) {
  for (const fh_deploy_t *const *d = fh_deployments; *d; d++)
    for (const fh_kind_t *const *k = fh_kinds; *k; k++) restart(*d, *k, 0);
}

TEST(restart_with_aof) {
  for (const fh_deploy_t *const *d = fh_deployments; *d; d++)
    for (const fh_kind_t *const *k = fh_kinds; *k; k++) restart(*d, *k, 1);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 240);
  RUN(restart_without_persistence);
  RUN(restart_with_aof);
  return th_done();
}
