/* test_sentinel_stale.c -- a stale sentinel never moves a client back to the
 * old master (issue 20, items 7 and 8), against real sentinels
 * (redis-server --sentinel) and replicas (--replicaof). The stale sentinel
 * (th_sentinel_start_stale) monitors the first master and never hears of a
 * failover, like a sentinel on the minority side of a partition: it keeps
 * naming the old master with config-epoch 0.
 *   - a poll answer of the stale sentinel after a failover the client
 *     followed: the client stays on the new master (the lock held there is
 *     busy; it never connects to the old master again, which stays writable
 *     for seconds after SENTINEL FAILOVER);
 *   - the stale sentinel asked first, the poll off: the old master's ROLE
 *     refusal (once Sentinel demotes it) counts against that sentinel, the
 *     next one is asked and names the new master;
 *   - a master that Sentinel lists replicas for, none of them online: a new
 *     client waits for one (RLOCK_ENOSYNC), it does not lock without WAIT;
 *   - a sentinel whose ACL refuses SENTINEL MASTER: answers without an epoch
 *     still count (a move then needs a majority).
 * Internal API: rlock__sentinel_poll_ms. */
#include <stdlib.h>
#include <string.h>

#include "harness_sentinel.h"
#include "internal.h"

/* Commands the clients ran on a sentinel since counting began: its
 * total_commands_processed (a sentinel has no INFO commandstats) read over
 * one connection of the test's own, less the test's own INFOs. */
typedef struct counter {
  redisContext *c;
  long long base, reads;
} counter_t;

static long long processed(counter_t *k) {
  redisReply *r = redisCommand(k->c, "INFO stats");
  const char *key = "total_commands_processed:";
  const char *p = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, key) : NULL;
  CHECK_MSG(p, "INFO stats of a sentinel: %s", k->c->errstr);
  long long v = atoll(p + strlen(key));
  freeReplyObject(r);
  return v - k->reads++; /* each INFO counts once it ran */
}

static void counter_start(counter_t *k, int port) {
  struct timeval tv = {2, 0};
  k->c = redisConnectWithTimeout("127.0.0.1", port, tv);
  CHECK_MSG(k->c && !k->c->err, "cannot connect to the sentinel on port %d", port);
  k->reads = 0;
  k->base = processed(k);
}

static rlock_client_t *client_on(const char *url, const char *name) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = url;
  o.client_name = name;
  o.ping_interval_ms = 0; /* no PING: a sentinel counts only the questions (stale_answered_twice) */
  o.reconnect_min_ms = 50;
  o.reconnect_max_ms = 1000;
  rlock_client_t *c = NULL;
  int rc = rlock_client_new(&c, &o);
  CHECK_MSG(rc == 0, "client on %s: %s: %s", url, rlock_err_name(rc), rlock_last_error());
  return c;
}

/* "redis+sentinel://" followed by the sentinels' ports in the order given (0
 * ends the list) and "/name". */
static void url_of(char *url, size_t n, const char *name, const int *ports) {
  size_t k = (size_t)snprintf(url, n, "redis+sentinel://");
  for (int i = 0; ports[i]; i++) k += (size_t)snprintf(url + k, n - k, "%s127.0.0.1:%d", i ? "," : "", ports[i]);
  snprintf(url + k, n - k, "/%s", name);
}

static th_server_t *watched;
static const char *watched_name;
static int on_watched(void *arg) {
  (void)arg;
  return th_clients_named(watched, watched_name) >= 2; /* command and subscriber connections */
}

/* The stale sentinel answered the client twice: its query connection ran
 * at least 6 commands there (CLIENT SETNAME and the two SENTINEL questions
 * per visit; its subscriber connection adds at most 2, SETNAME and
 * SUBSCRIBE, with PING off). One question at a time: the second was asked
 * once the client had handled the first answer. */
static counter_t stale_count;
static int stale_answered_twice(void *arg) {
  (void)arg;
  return processed(&stale_count) - stale_count.base >= 8;
}

static void failover(th_sentinels_t *d) {
  redisReply *r = th_sentinel_cmd(d, 0, "SENTINEL FAILOVER %s", d->name);
  CHECK_MSG(r && r->type == REDIS_REPLY_STATUS, "SENTINEL FAILOVER: %s", r && r->str ? r->str : "no reply");
  if (r) freeReplyObject(r);
}

/* The client follows a SENTINEL FAILOVER; then its first sentinel dies and
 * its questions go to the stale one, which names the old master (still a
 * writable master for seconds after the failover, with no replica left).
 * Before: the client moved back at the first poll answer and took a lock
 * that another client held on the new master (two holders). */
TEST(stale_poll_answer_never_moves_the_client_back) {
  th_sentinels_t *d = th_sentinels_start("stale", 2, 3);
  th_server_t *old = d->nodes[0];
  th_sentinel_t *x = th_sentinel_start_stale(d, old->port);
  char url[600];
  int ports[] = {d->sent[0].port, x->port, d->sent[1].port, d->sent[2].port, 0};
  url_of(url, sizeof url, d->name, ports);
  rlock_client_t *c = client_on(url, "stale-c");
  rlock_lock_t *l = th_lock(c, "stale:lock");
  CHECK_OK(rlock_lock_trylock(l, 0, 10000));
  CHECK_EQ(th_cmd_int(old, "EXISTS", "stale:lock", NULL), 1);
  CHECK_OK(rlock_lock_unlock(l));

  failover(d);
  th_server_t *m = th_sentinels_wait_failover(d, old->port, 60000);
  CHECK_MSG(m, "no failover within 60 s");
  watched = m, watched_name = "stale-c";
  CHECK_MSG(th_wait_until(on_watched, NULL, 30000), "the client did not follow the failover");
  CHECK_MSG(th_sentinels_wait_replicas(m, 1, 60000), "the new master has no replica online");
  /* another client (the real sentinels only) holds the lock on the new master */
  rlock_client_t *h = client_on(d->url, "stale-h");
  rlock_lock_t *hl = th_lock(h, "stale:lock");
  CHECK_OK(rlock_lock_trylock(hl, 0, 60000));
  CHECK_EQ(th_cmd_int(m, "EXISTS", "stale:lock", NULL), 1);

  /* the client's first sentinel dies: its questions go to the others, the
   * stale one among them */
  long long roles = th_cmdstat(old, "role");
  counter_start(&stale_count, x->port);
  int64_t t0 = th_now_ms();
  th_sentinel_kill(d, 0);
  CHECK_MSG(th_wait_until(stale_answered_twice, NULL, 30000), "the stale sentinel was not asked twice");
  int64_t asked_at = th_now_ms();
  /* never back: no connection to the old master, the lock is busy */
  int rc = rlock_lock_trylock(l, 0, 10000);
  long long back = th_cmdstat(old, "role") - roles;
  printf(
      "# figures: stale sentinel asked twice within %lld ms after the first sentinel died; the client "
      "connected to the old master %lld times since; trylock: %s\n",
      (long long)(asked_at - t0), back, rlock_err_name(rc));
  CHECK_MSG(back == 0, "the client went back to the old master (%lld ROLE calls there)", back);
  CHECK_MSG(rc == RLOCK_EBUSY, "trylock of a lock held on the new master: %s (%s)", rlock_err_name(rc),
            rlock_last_error());
  CHECK_EQ(th_clients_named(old, "stale-c"), 0);
  CHECK(th_clients_named(m, "stale-c") >= 2);
  redisFree(stale_count.c);
  CHECK_OK(rlock_lock_unlock(hl));
  CHECK_OK(rlock_lock_trylock(l, 0, 10000)); /* on the new master */
  CHECK_EQ(th_cmd_int(m, "EXISTS", "stale:lock", NULL), 1);
  CHECK_OK(rlock_lock_unlock(l));
  rlock_lock_free(l);
  rlock_lock_free(hl);
  rlock_client_free(c);
  rlock_client_free(h);
  th_sentinel_stop_alone(x);
  th_sentinels_stop(d);
}

/* The stale sentinel is the one the client asks (first in its URL; the poll
 * off, and the subscription on the stale sentinel hears no +switch-master):
 * once Sentinel demotes the old master (about 10 s after SENTINEL FAILOVER,
 * killing its clients' connections), the reconnect is refused by ROLE. The
 * refusal counts against the stale sentinel: the next one is asked and names
 * the new master. Before: the same sentinel was asked again after every
 * refusal, and the client kept reconnecting to the demoted node. */
TEST(role_refusal_asks_the_next_sentinel) {
  th_sentinels_t *d = th_sentinels_start("refused", 1, 3);
  th_server_t *old = d->nodes[0];
  th_sentinel_t *x = th_sentinel_start_stale(d, old->port);
  int64_t saved = rlock__sentinel_poll_ms;
  rlock__sentinel_poll_ms = 3600 * 1000;
  char url[600];
  int ports[] = {x->port, d->sent[0].port, d->sent[1].port, d->sent[2].port, 0};
  url_of(url, sizeof url, d->name, ports);
  rlock_client_t *c = client_on(url, "refused-c");
  watched = old, watched_name = "refused-c";
  CHECK_MSG(th_wait_until(on_watched, NULL, 30000), "the client is not on the master");
  failover(d);
  th_server_t *m = th_sentinels_wait_failover(d, old->port, 60000);
  CHECK_MSG(m, "no failover within 60 s");
  int64_t t0 = th_now_ms();
  watched = m;
  CHECK_MSG(th_wait_until(on_watched, NULL, 60000), "the client never reached the new master (ROLE refusals: %lld)",
            th_cmdstat(old, "role"));
  printf(
      "# figures: stale sentinel first, poll off: the client on the new master %lld ms after the sentinels "
      "agreed\n",
      (long long)(th_now_ms() - t0));
  /* the client saw a replica: its grant asks WAIT of one (the demoted old
   * master, once it synced from the new one) */
  CHECK_MSG(th_sentinels_wait_replicas(m, 1, 60000), "the new master has no replica online");
  rlock_lock_t *l = th_lock(c, "refused:lock");
  CHECK_OK(rlock_lock_trylock(l, 0, 10000));
  CHECK_EQ(th_cmd_int(m, "EXISTS", "refused:lock", NULL), 1);
  CHECK_OK(rlock_lock_unlock(l));
  rlock_lock_free(l);
  rlock_client_free(c);
  rlock__sentinel_poll_ms = saved;
  th_sentinel_stop_alone(x);
  th_sentinels_stop(d);
}

static th_server_t *listed_master;
static int no_replica_listed(void *arg) {
  (void)arg;
  redisContext *raw = th_raw_connect(listed_master);
  redisReply *r = redisCommand(raw, "INFO replication");
  int gone = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "connected_slaves:0");
  if (r) freeReplyObject(r);
  redisFree(raw);
  return gone;
}

/* Sentinel lists a replica for the master (down now: the master reports
 * none online). A new client, which never saw the replica itself, still
 * waits for one: the acquire ends RLOCK_ENOSYNC and nothing stays held.
 * Before: no WAIT (the master reported 0 replicas), granted. */
TEST(sentinel_listed_replicas_are_waited_for) {
  th_sentinels_t *d = th_sentinels_start("listed", 1, 1);
  th_server_t *mst = d->nodes[0];
  th_server_kill(d->nodes[1]);
  listed_master = mst;
  CHECK_MSG(th_wait_until(no_replica_listed, NULL, 30000), "the master still lists its killed replica");
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = d->url;
  o.client_name = "listed-c";
  o.retry_attempts = 1;
  o.replica_sync_timeout_ms = 200;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  rlock_lock_t *l = th_lock(c, "listed:lock");
  int rc = rlock_lock_trylock(l, 0, 10000);
  printf("# figures: a master Sentinel lists 1 replica for, none online: trylock %s (%s)\n", rlock_err_name(rc),
         rlock_last_error());
  CHECK_MSG(rc == RLOCK_ENOSYNC, "trylock: %s (%s)", rlock_err_name(rc), rlock_last_error());
  CHECK_EQ(th_cmd_int(mst, "EXISTS", "listed:lock", NULL), 0);
  rlock_lock_free(l);
  rlock_client_free(c);
  th_sentinels_stop(d);
}

/* A sentinel whose ACL refuses SENTINEL MASTER (the epoch): its answers
 * count with an unknown epoch, so the client still connects, and follows a
 * re-pointing the (only, so a majority of) sentinel names. Before the
 * fallback: no answer counted, rlock_client_new failed RLOCK_ECONNECT. */
TEST(sentinel_master_refused_still_follows) {
  th_server_t *a = th_server_start(NULL), *b = th_server_start(NULL);
  th_sentinel_t *g = th_sentinel_start_alone("noepoch", a->port, NULL, 0);
  struct timeval tv = {2, 0};
  redisContext *sc = redisConnectWithTimeout("127.0.0.1", g->port, tv);
  CHECK(sc && !sc->err);
  redisReply *r = redisCommand(sc, "ACL SETUSER default -sentinel|master");
  CHECK_MSG(r && r->type == REDIS_REPLY_STATUS, "ACL SETUSER on the sentinel: %s", r && r->str ? r->str : "no reply");
  freeReplyObject(r);
  char url[300];
  snprintf(url, sizeof url, "redis+sentinel://127.0.0.1:%d/noepoch", g->port);
  rlock_client_t *c = client_on(url, "noepoch-c");
  rlock_lock_t *l = th_lock(c, "noepoch:lock");
  CHECK_OK(rlock_lock_trylock(l, 0, 10000));
  CHECK_EQ(th_cmd_int(a, "EXISTS", "noepoch:lock", NULL), 1);
  CHECK_OK(rlock_lock_unlock(l));
  r = redisCommand(sc, "SENTINEL REMOVE noepoch");
  if (r) freeReplyObject(r);
  r = redisCommand(sc, "SENTINEL MONITOR noepoch 127.0.0.1 %d 1", b->port);
  CHECK_MSG(r && r->type == REDIS_REPLY_STATUS, "SENTINEL MONITOR: %s", r && r->str ? r->str : "no reply");
  freeReplyObject(r);
  redisFree(sc);
  watched = b, watched_name = "noepoch-c";
  CHECK_MSG(th_wait_until(on_watched, NULL, 30000), "the client did not follow the re-pointed master");
  CHECK_OK(rlock_lock_trylock(l, 0, 10000));
  CHECK_EQ(th_cmd_int(b, "EXISTS", "noepoch:lock", NULL), 1);
  CHECK_OK(rlock_lock_unlock(l));
  rlock_lock_free(l);
  rlock_client_free(c);
  th_sentinel_stop_alone(g);
  th_server_stop(b);
  th_server_stop(a);
}

/* An unknown epoch (the ACL of the sentinel the client first heard refuses
 * SENTINEL MASTER) is not older than every known one: a second sentinel
 * that names another master with epoch 0 (a stale one; the URL has two, so
 * one is no majority) never moves the client. Before: 0 > -1 was "newer":
 * the first poll of that sentinel moved the client to the other node. */
TEST(unknown_epoch_is_not_older) {
  th_server_t *a = th_server_start(NULL), *b = th_server_start(NULL);
  th_sentinel_t *g = th_sentinel_start_alone("unk", b->port, NULL, 0);
  th_sentinel_t *x = th_sentinel_start_alone("unk", a->port, NULL, 0);
  struct timeval tv = {2, 0};
  redisContext *sc = redisConnectWithTimeout("127.0.0.1", g->port, tv);
  CHECK(sc && !sc->err);
  redisReply *r = redisCommand(sc, "ACL SETUSER default -sentinel|master");
  CHECK_MSG(r && r->type == REDIS_REPLY_STATUS, "ACL SETUSER on the sentinel: %s", r && r->str ? r->str : "no reply");
  freeReplyObject(r);
  redisFree(sc);
  char url[300];
  int ports[] = {g->port, x->port, 0};
  url_of(url, sizeof url, "unk", ports);
  rlock_client_t *c = client_on(url, "unk-c");
  rlock_lock_t *l = th_lock(c, "unk:lock");
  CHECK_OK(rlock_lock_trylock(l, 0, 10000));
  CHECK_EQ(th_cmd_int(b, "EXISTS", "unk:lock", NULL), 1);
  CHECK_OK(rlock_lock_unlock(l));
  counter_start(&stale_count, x->port);
  CHECK_MSG(th_wait_until(stale_answered_twice, NULL, 30000), "the other sentinel was not asked twice");
  CHECK_EQ(th_clients_named(a, "unk-c"), 0);
  CHECK_OK(rlock_lock_trylock(l, 0, 10000));
  CHECK_EQ(th_cmd_int(b, "EXISTS", "unk:lock", NULL), 1);
  CHECK_OK(rlock_lock_unlock(l));
  redisFree(stale_count.c);
  rlock_lock_free(l);
  rlock_client_free(c);
  th_sentinel_stop_alone(x);
  th_sentinel_stop_alone(g);
  th_server_stop(b);
  th_server_stop(a);
}

/* test_sentinel_stale [NAME...]: the named tests only (all by default). */
static int wanted(int argc, char **argv, const char *name) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], name) == 0) return 1;
  return argc < 2;
}
#define RUN_WANTED(name) \
  if (wanted(argc, argv, #name)) RUN(name)

int main(int argc, char **argv) {
  th_init(argc, argv, 280);
  RUN_WANTED(stale_poll_answer_never_moves_the_client_back);
  RUN_WANTED(role_refusal_asks_the_next_sentinel);
  RUN_WANTED(sentinel_listed_replicas_are_waited_for);
  RUN_WANTED(sentinel_master_refused_still_follows);
  RUN_WANTED(unknown_epoch_is_not_older);
  return th_done();
}
