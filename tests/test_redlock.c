/* test_redlock.c -- RedLock over 5 independent redis-servers
 * (rlock_redlock_t), real processes killed and stopped:
 *   majority_basics       acquire (validity returned), every node holds the
 *                         hash; a second RedLock is busy, then gets it after
 *                         the release; release frees every node
 *   simple_format         RLOCK_REDLOCK_SIMPLE: a string on every node
 *   two_killed            2 of 5 nodes killed: still acquires (3 of 5)
 *   three_killed          3 of 5 killed: RLOCK_ECONNECT within the wait
 *   stopped_node          a SIGSTOPped node does not hold the acquire
 *                         beyond the per-node timeout; after SIGCONT its late
 *                         try is given back
 *   down_at_creation      a node unreachable when the RedLock is made is a
 *                         failed node, not an error
 *   late_node             3 nodes, the third down at creation, then started:
 *                         it becomes usable; with the second killed, an
 *                         acquire gets its majority through it (issue 9: it
 *                         stayed a failed node for the object's life)
 *   freed_while_reviving  rlock_redlock_free while a missing node's client
 *                         is being made in the background: waits for it
 *   bad_url_with_slow_node  a bad URL fails rlock_redlock_new only after
 *                         every node's connecting thread ended
 *   freed_with_try_in_flight  freed while a stopped node's try is in
 *                         flight: that try, applied late, is given back
 *   lost_majority         watchdog holds deleted on 3 nodes: the lost
 *                         callback runs once, the other nodes are released
 *   validity_from_send    3 nodes asleep: the validity starts when the
 *                         tries were sent, not when they were answered
 *   lost_during_round     holds lost while the round still waits for a
 *                         slow node are not counted: losing one more
 *                         (2 of 5 left) reports the RedLock lost
 *   busy_minority         2 nodes held by another owner: still a majority
 *   restart_hazard        A holds nodes 1-3 (4 and 5 held elsewhere); node 3
 *                         restarts: without persistence it forgot A's hold
 *                         and B gets 3, 4, 5: both hold a majority (the
 *                         documented hazard, asserted); with appendfsync
 *                         always B gets no majority */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"

#define N 5
static th_server_t *srv[N];
static const char *urls[N];

static void start_all(void) {
  static const char *extra[] = {"--enable-debug-command", "yes", NULL}; /* DEBUG SLEEP; kept for restarts */
  th_server_opts_t so = {.extra_args = extra};
  for (int i = 0; i < N; i++) {
    srv[i] = th_server_start(&so);
    urls[i] = srv[i]->url;
  }
}

static void stop_all(void) {
  for (int i = 0; i < N; i++) th_server_stop(srv[i]);
}

/* The per-node timeout of these tests: the default (lease/100, 5..50 ms)
 * is too short under valgrind, where every test but the stopped node's
 * asks for answers, not for speed. */
#define NODE_TIMEOUT_MS 1000

static rlock_redlock_t *redlock(const char *name, unsigned flags, int64_t watchdog_ms) {
  rlock_options_t o;
  rlock_options_init(&o);
  if (watchdog_ms) o.watchdog_timeout_ms = watchdog_ms;
  rlock_redlock_t *r = NULL;
  CHECK_OK(rlock_redlock_new(&r, &o, urls, N, name, strlen(name), flags));
  CHECK_OK(rlock_redlock_set_node_timeout(r, NODE_TIMEOUT_MS));
  return r;
}

static int holders(const char *name) {
  int n = 0;
  for (int i = 0; i < N; i++) n += th_cmd_int(srv[i], "EXISTS", name, NULL) == 1;
  return n;
}

TEST(majority_basics) {
  rlock_redlock_t *a = redlock("rl:basic", 0, 0), *b = redlock("rl:basic", 0, 0);
  CHECK_EQ(rlock_redlock_nodes(a), N);
  int64_t t0 = rlock_now_ms(), vu = 0;
  CHECK_OK(rlock_redlock_acquire(a, 0, 10000, NULL, &vu));
  int64_t t1 = rlock_now_ms();
  /* the round's start + lease - drift (10000/100 + 2), the start within [t0, t1] */
  CHECK(vu >= t0 + 10000 - 102 && vu <= t1 + 10000 - 102);
  int64_t vu2 = 0;
  CHECK_OK(rlock_redlock_valid_until(a, &vu2));
  CHECK(vu2 >= vu - 1000 && vu2 <= rlock_now_ms() + 10000);
  CHECK_EQ(holders("rl:basic"), N);
  redisReply *t = th_cmd(srv[0], "TYPE", "rl:basic", NULL);
  CHECK_STREQ(t->str, "hash");
  th_reply_free(t);
  CHECK_RC(rlock_redlock_acquire(a, 0, 10000, NULL, NULL), RLOCK_EBUSY); /* held by this object */
  CHECK_RC(rlock_redlock_acquire(b, 0, 10000, NULL, NULL), RLOCK_EBUSY);
  CHECK_EQ(holders("rl:basic"), N); /* b's failed round left a's holds alone */
  for (int i = 0; i < N; i++) {
    int held = 0;
    int64_t ttl = 0;
    CHECK_OK(rlock_redlock_node_status(a, (size_t)i, &held, &ttl));
    CHECK(held == 1 && ttl > 0);
  }
  CHECK_OK(rlock_redlock_release(a));
  CHECK_EQ(holders("rl:basic"), 0);
  CHECK_RC(rlock_redlock_release(a), RLOCK_ENOTHELD);
  CHECK_OK(rlock_redlock_acquire(b, 5000, 10000, NULL, NULL));
  CHECK_OK(rlock_redlock_release(b));
  rlock_redlock_free(a);
  rlock_redlock_free(b);
}

TEST(simple_format) {
  rlock_redlock_t *a = redlock("rl:simple", RLOCK_REDLOCK_SIMPLE, 0);
  CHECK_OK(rlock_redlock_acquire(a, 0, 10000, NULL, NULL));
  for (int i = 0; i < N; i++) {
    redisReply *t = th_cmd(srv[i], "TYPE", "rl:simple", NULL);
    CHECK_STREQ(t->str, "string");
    th_reply_free(t);
  }
  CHECK_OK(rlock_redlock_release(a));
  CHECK_EQ(holders("rl:simple"), 0);
  rlock_redlock_free(a);
}

/* The server has read everything rc sent (its DEBUG SLEEP is running). */
static int server_took(void *arg) {
  redisContext *rc = arg;
  int me = th_local_port(rc->fd), port = rc->tcp.port;
  long tx = -1, rx = -1;
  return th_tcp_queues(me, port, &tx, NULL) && tx == 0 && th_tcp_queues(port, me, NULL, &rx) && rx == 0;
}

/* The validity counts from when the tries were SENT: 3 of 5 nodes asleep
 * (DEBUG SLEEP 3) answer 3 s after they fell asleep, and the validity
 * returned must not start from their answers. Both checks are relative to
 * when the sleeps were sent (a loaded machine may take long to see them
 * start). */
TEST(validity_from_send) {
  rlock_redlock_t *a = redlock("rl:validity", 0, 0);
  CHECK_OK(rlock_redlock_set_node_timeout(a, 10000)); /* the sleepers count as answers */
  redisContext *rc[3];
  int64_t slept = rlock_now_ms(); /* the sleeps end after slept + 3000 */
  for (int i = 0; i < 3; i++) {
    rc[i] = th_raw_connect(srv[i]);
    CHECK(redisAppendCommand(rc[i], "DEBUG SLEEP 3") == REDIS_OK);
    int done = 0;
    while (!done) CHECK(redisBufferWrite(rc[i], &done) == REDIS_OK);
  }
  for (int i = 0; i < 3; i++) CHECK(th_wait_until(server_took, rc[i], 5000));
  int64_t t0 = rlock_now_ms(), vu = 0;
  CHECK_OK(rlock_redlock_acquire(a, 0, 60000, NULL, &vu));
  int64_t t1 = rlock_now_ms();
  int64_t start = vu - (60000 - 602); /* valid_until = round start + lease - drift (60000/100 + 2) */
  /* a majority needs a sleeper's answer */
  CHECK_MSG(t1 >= slept + 3000, "the nodes did not sleep (acquire ended %lld ms after the sleeps were sent)",
            (long long)(t1 - slept));
  CHECK_MSG(start >= t0 && start < slept + 3000,
            "validity counted from %lld ms after the call (which took %lld ms, the sleepers answered after "
            "%lld ms): not from when the tries were sent",
            (long long)(start - t0), (long long)(t1 - t0), (long long)(slept + 3000 - t0));
  for (int i = 0; i < 3; i++) {
    redisReply *r = NULL;
    CHECK(redisGetReply(rc[i], (void **)&r) == REDIS_OK);
    CHECK_MSG(r->type == REDIS_REPLY_STATUS, "DEBUG SLEEP: %s", r->type == REDIS_REPLY_ERROR ? r->str : "?");
    freeReplyObject(r);
    redisFree(rc[i]);
  }
  CHECK_OK(rlock_redlock_release(a));
  rlock_redlock_free(a);
}

TEST(busy_minority) {
  /* another program holds the name on 2 nodes: 3 of 5 still grant */
  for (int i = 0; i < 2; i++) th_reply_free(th_cmd(srv[i], "SET", "rl:minority", "their-token", "PX", "60000", NULL));
  rlock_redlock_t *a = redlock("rl:minority", RLOCK_REDLOCK_SIMPLE, 0);
  CHECK_OK(rlock_redlock_acquire(a, 0, 10000, NULL, NULL));
  CHECK_OK(rlock_redlock_release(a));
  for (int i = 0; i < 2; i++) {
    char *v = th_cmd_str(srv[i], "GET", "rl:minority", NULL);
    CHECK_STREQ(v, "their-token");
    free(v);
    th_reply_free(th_cmd(srv[i], "DEL", "rl:minority", NULL));
  }
  /* on 3 nodes: no majority, and nothing of ours is left behind */
  for (int i = 0; i < 3; i++) th_reply_free(th_cmd(srv[i], "SET", "rl:minority", "their-token", "PX", "60000", NULL));
  CHECK_RC(rlock_redlock_acquire(a, 300, 10000, NULL, NULL), RLOCK_EBUSY);
  CHECK_MSG(strstr(rlock_last_error(), "no majority"), "message: %s", rlock_last_error());
  CHECK_EQ(holders("rl:minority"), 3);
  for (int i = 0; i < 3; i++) th_reply_free(th_cmd(srv[i], "DEL", "rl:minority", NULL));
  rlock_redlock_free(a);
}

/* A holds nodes 1-3 of urls u (4 and 5 are held by another token while A
 * acquires); then node 3 (s3) restarts and 4, 5 are free: 1 if B gets a
 * majority too. */
static int restart_then_b(const char *const *u, th_server_t *s3, th_server_t *s4, th_server_t *s5) {
  rlock_options_t o;
  rlock_options_init(&o);
  rlock_redlock_t *a = NULL, *b = NULL;
  CHECK_OK(rlock_redlock_new(&a, &o, u, N, "rl:restart", 10, RLOCK_REDLOCK_SIMPLE));
  CHECK_OK(rlock_redlock_new(&b, &o, u, N, "rl:restart", 10, RLOCK_REDLOCK_SIMPLE));
  CHECK_OK(rlock_redlock_set_node_timeout(a, NODE_TIMEOUT_MS));
  CHECK_OK(rlock_redlock_set_node_timeout(b, NODE_TIMEOUT_MS));
  th_reply_free(th_cmd(s4, "SET", "rl:restart", "their-token", "PX", "60000", NULL));
  th_reply_free(th_cmd(s5, "SET", "rl:restart", "their-token", "PX", "60000", NULL));
  CHECK_OK(rlock_redlock_acquire(a, 0, 30000, NULL, NULL));
  th_reply_free(th_cmd(s4, "DEL", "rl:restart", NULL));
  th_reply_free(th_cmd(s5, "DEL", "rl:restart", NULL));
  th_server_restart(s3);
  /* a wait: B's rounds go on while its client of node 3 reconnects */
  int both = rlock_redlock_acquire(b, 3000, 30000, NULL, NULL) == 0;
  if (both) CHECK_OK(rlock_redlock_release(b));
  rlock_redlock_release(a); /* node 3 may answer "not held": A's hold there is B's or gone */
  rlock_redlock_free(a);
  rlock_redlock_free(b);
  for (int i = 0; i < N; i++) th_reply_free(th_cmd(srv[i], "DEL", "rl:restart", NULL));
  return both;
}

TEST(restart_hazard) {
  CHECK_EQ(restart_then_b(urls, srv[2], srv[3], srv[4]), 1); /* the hazard: two holders */
  th_server_opts_t aof = {.appendonly = 1};
  th_server_t *durable = th_server_start(&aof);
  const char *u[N] = {urls[0], urls[1], durable->url, urls[3], urls[4]};
  CHECK_EQ(restart_then_b(u, durable, srv[3], srv[4]), 0); /* the hold survived the restart */
  th_server_stop(durable);
}

TEST(down_at_creation) {
  th_server_t *dead = th_server_start(NULL);
  const char *u[N] = {urls[0], urls[1], urls[2], urls[3], dead->url};
  th_server_kill(dead);
  rlock_options_t o;
  rlock_options_init(&o);
  rlock_redlock_t *r = NULL;
  CHECK_OK(rlock_redlock_new(&r, &o, u, N, "rl:down", 7, 0));
  CHECK_OK(rlock_redlock_set_node_timeout(r, NODE_TIMEOUT_MS));
  int held;
  int64_t ttl;
  CHECK_RC(rlock_redlock_node_status(r, 4, &held, &ttl), RLOCK_ECONNECT);
  CHECK_OK(rlock_redlock_acquire(r, 0, 10000, NULL, NULL));
  CHECK_OK(rlock_redlock_release(r));
  rlock_redlock_free(r);
  th_server_stop(dead);
  /* a bad URL is the caller's mistake */
  const char *bad[2] = {urls[0], "redis://[nope"};
  CHECK_RC(rlock_redlock_new(&r, &o, bad, 2, "rl:down", 7, 0), RLOCK_EURL);
  CHECK(r == NULL);
}

static int threads_now(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  int n = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "Threads:", 8)) n = atoi(line + 8);
  if (f) fclose(f);
  return n;
}

/* A bad URL fails rlock_redlock_new, while a node listed after it is still
 * connecting (a socket that accepts and never answers): the call must not
 * return before that node's connecting thread ended (it wrote into the freed
 * RedLock: a crash, seen intermittently with `rlock exec --redlock`). */
TEST(bad_url_with_slow_node) {
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  CHECK(ls >= 0 && bind(ls, (struct sockaddr *)&a, sizeof a) == 0 && listen(ls, 8) == 0);
  char slow[64];
  snprintf(slow, sizeof slow, "redis://127.0.0.1:%d", th_local_port(ls));
  const char *u[3] = {urls[0], "redis://[nope", slow};
  rlock_options_t o;
  rlock_options_init(&o);
  o.command_timeout_ms = 2000; /* the slow node's handshake gives up after that */
  int before = threads_now();
  rlock_redlock_t *r = NULL;
  CHECK_RC(rlock_redlock_new(&r, &o, u, 3, "rl:badurl", 9, 0), RLOCK_EURL);
  CHECK(r == NULL);
  /* the message names the node and why (not what freeing the other nodes' clients said) */
  CHECK_MSG(strstr(rlock_last_error(), "node 2") && strstr(rlock_last_error(), "invalid Redis URL"), "message: %s",
            rlock_last_error());
  CHECK_MSG(threads_now() == before,
            "threads before %d, after %d: a node's connecting thread outlived "
            "rlock_redlock_new",
            before, threads_now());
  close(ls);
}

static th_lost_t lost = TH_LOST_INIT;
static int none_hold(void *name) { return holders(name) == 0; }

TEST(lost_majority) {
  rlock_redlock_t *a = redlock("rl:lost", 0, 1000);
  rlock_redlock_on_lost(a, th_lost_record, &lost);
  CHECK_OK(rlock_redlock_acquire(a, 0, RLOCK_LEASE_WATCHDOG, NULL, NULL));
  th_reply_free(th_cmd(srv[0], "DEL", "rl:lost", NULL));
  th_reply_free(th_cmd(srv[1], "DEL", "rl:lost", NULL));
  int64_t vu;
  /* 3 of 5 still hold: a majority, no callback (renewals every ~333 ms) */
  CHECK(!th_wait_until(th_lost_once, &lost, 1500));
  CHECK_OK(rlock_redlock_valid_until(a, &vu));
  th_reply_free(th_cmd(srv[2], "DEL", "rl:lost", NULL));
  CHECK(th_wait_until(th_lost_once, &lost, 20000));
  CHECK(th_wait_until(none_hold, "rl:lost", 20000)); /* the minority left was released */
  CHECK_RC(rlock_redlock_valid_until(a, &vu), RLOCK_ENOTHELD);
  CHECK_RC(rlock_redlock_release(a), RLOCK_ENOTHELD);
  pthread_mutex_lock(&lost.mu);
  CHECK_EQ(lost.calls, 1);
  pthread_mutex_unlock(&lost.mu);
  rlock_redlock_free(a);
}

typedef struct acquirer {
  rlock_redlock_t *r;
  int rc;
} acquirer_t;
static void *acquire_thread(void *arg) {
  acquirer_t *a = arg;
  a->rc = rlock_redlock_acquire(a->r, 0, RLOCK_LEASE_WATCHDOG, NULL, NULL);
  return NULL;
}
static int first_four_hold(void *name) {
  for (int i = 0; i < 4; i++)
    if (th_cmd_int(srv[i], "EXISTS", name, NULL) != 1) return 0;
  return 1;
}
static long long race_scripts0[2];
static int renewals_ran(void *arg) { /* nodes 0 and 1 ran a renewal since the DEL */
  (void)arg;
  return th_scripts_run(srv[0]) > race_scripts0[0] && th_scripts_run(srv[1]) > race_scripts0[1];
}

/* Nodes 0 and 1 lose their holds while the round still waits for node 4
 * (asleep): their clients report the loss before the round is decided. The
 * RedLock then holds nodes 2, 3, 4 only; when node 2 loses its hold too, 2 of
 * 5 remain: the lost callback must run (the losses reported during the round
 * were dropped, the RedLock counted 5 holds and never told). */
TEST(lost_during_round) {
  /* watchdog 3 s: a renewal every ~1 s; node 4 sleeps 2 s: the losses are
   * seen ~1 s before the round ends, and the round leaves ~1 s of validity */
  rlock_redlock_t *a = redlock("rl:race", 0, 3000);
  CHECK_OK(rlock_redlock_set_node_timeout(a, 20000));
  th_lost_reset(&lost);
  rlock_redlock_on_lost(a, th_lost_record, &lost);
  redisContext *rc = th_raw_connect(srv[4]);
  CHECK(redisAppendCommand(rc, "DEBUG SLEEP 2") == REDIS_OK);
  int done = 0;
  while (!done) CHECK(redisBufferWrite(rc, &done) == REDIS_OK);
  CHECK(th_wait_until(server_took, rc, 5000));
  acquirer_t ac = {a, -1};
  pthread_t t;
  pthread_create(&t, NULL, acquire_thread, &ac);
  CHECK(th_wait_until(first_four_hold, "rl:race", 5000));
  race_scripts0[0] = th_scripts_run(srv[0]), race_scripts0[1] = th_scripts_run(srv[1]);
  th_reply_free(th_cmd(srv[0], "DEL", "rl:race", NULL));
  th_reply_free(th_cmd(srv[1], "DEL", "rl:race", NULL));
  CHECK(th_wait_until(renewals_ran, NULL, 5000)); /* a renewal found each hold gone */
  redisReply *rr = NULL;
  CHECK(redisGetReply(rc, (void **)&rr) == REDIS_OK); /* node 4 is awake */
  CHECK_MSG(rr->type == REDIS_REPLY_STATUS, "DEBUG SLEEP: %s", rr->type == REDIS_REPLY_ERROR ? rr->str : "?");
  freeReplyObject(rr);
  redisFree(rc);
  pthread_join(t, NULL);
  CHECK_OK(ac.rc); /* nodes 2, 3, 4 */
  CHECK(!th_lost_once(&lost));
  th_reply_free(th_cmd(srv[2], "DEL", "rl:race", NULL));
  CHECK_MSG(th_wait_until(th_lost_once, &lost, 20000), "2 of 5 nodes hold, and the RedLock was not reported lost");
  CHECK(th_wait_until(none_hold, "rl:race", 20000)); /* the minority left was released */
  CHECK_RC(rlock_redlock_release(a), RLOCK_ENOTHELD);
  rlock_redlock_free(a);
}

static long long stopped_scripts0;
static int try_and_undo_ran(void *arg) {
  (void)arg;
  return th_scripts_run(srv[0]) >= stopped_scripts0 + 2;
}

TEST(stopped_node) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.command_timeout_ms = 20000; /* without the per-node timeout, a stopped node would cost this */
  rlock_redlock_t *r = NULL;
  CHECK_OK(rlock_redlock_new(&r, &o, urls, N, "rl:stop", 7, 0));
  CHECK_OK(rlock_redlock_set_node_timeout(r, 500));
  long long scripts0 = th_scripts_run(srv[0]);
  kill(srv[0]->pid, SIGSTOP);
  int64_t t0 = rlock_now_ms();
  CHECK_OK(rlock_redlock_acquire(r, 0, 10000, NULL, NULL));
  int64_t took = rlock_now_ms() - t0;
  /* 500 ms per-node timeout; the bound is generous for a loaded machine (and
   * valgrind) and still half the 20 s a wait for the stopped node would take */
  CHECK_MSG(took < 10000, "the acquire took %lld ms with one node stopped", (long long)took);
  CHECK_OK(rlock_redlock_release(r));
  kill(srv[0]->pid, SIGCONT);
  /* the stopped node runs the try late (it takes the free lock there), then
   * the undo of the cancelled try gives it back */
  stopped_scripts0 = scripts0;
  CHECK(th_wait_until(try_and_undo_ran, NULL, 20000));
  CHECK_EQ(th_cmd_int(srv[0], "EXISTS", "rl:stop", NULL), 0);
  CHECK_EQ(holders("rl:stop"), 0);
  rlock_redlock_free(r);
}

/* The RedLock is freed while node 0 (SIGSTOPped) still has the round's try
 * in flight: no crash, and once node 0 runs again, the try that applies late
 * is given back (the undo its client sent behind it while closing). */
TEST(freed_with_try_in_flight) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.command_timeout_ms = 20000;
  rlock_redlock_t *r = NULL;
  CHECK_OK(rlock_redlock_new(&r, &o, urls, N, "rl:freed", 8, RLOCK_REDLOCK_SIMPLE));
  CHECK_OK(rlock_redlock_set_node_timeout(r, 500));
  long long scripts0 = th_scripts_run(srv[0]);
  kill(srv[0]->pid, SIGSTOP);
  CHECK_OK(rlock_redlock_acquire(r, 0, 60000, NULL, NULL));
  rlock_redlock_free(r); /* held on nodes 1-4: their leases free them; node 0's try in flight */
  kill(srv[0]->pid, SIGCONT);
  stopped_scripts0 = scripts0;
  CHECK(th_wait_until(try_and_undo_ran, NULL, 20000));
  CHECK_EQ(th_cmd_int(srv[0], "EXISTS", "rl:freed", NULL), 0);
  for (int i = 1; i < N; i++) th_reply_free(th_cmd(srv[i], "DEL", "rl:freed", NULL));
}

TEST(two_killed) {
  th_server_kill(srv[3]);
  th_server_kill(srv[4]);
  rlock_redlock_t *r = redlock("rl:two", 0, 0);
  CHECK_OK(rlock_redlock_acquire(r, 2000, 10000, NULL, NULL));
  CHECK_OK(rlock_redlock_release(r));
  rlock_redlock_free(r);
}

TEST(three_killed) {
  rlock_redlock_t *r = redlock("rl:three", 0, 0); /* made while 3 nodes live */
  th_server_kill(srv[2]);
  int64_t t0 = rlock_now_ms();
  CHECK_RC(rlock_redlock_acquire(r, 1000, 10000, NULL, NULL), RLOCK_ECONNECT);
  int64_t took = rlock_now_ms() - t0;
  CHECK_MSG(strstr(rlock_last_error(), "unreachable"), "message: %s", rlock_last_error());
  /* the wait, one more round (node timeout) and its releases (command
   * timeout 3 s), plus a margin for a loaded machine */
  CHECK_MSG(took < 1000 + NODE_TIMEOUT_MS + 3000 + 5000, "failed after %lld ms (wait 1000 ms)", (long long)took);
  rlock_redlock_free(r);
}

/* Issue 9: a node down when the RedLock is made is used once it comes up.
 * 3 nodes, the third down at creation; it is started, then the second is
 * killed: an acquire needs the late node for its majority. */
static rlock_redlock_t *late_r;
static int late_node_up(void *arg) {
  (void)arg;
  int held;
  int64_t ttl;
  return rlock_redlock_node_status(late_r, 2, &held, &ttl) == 0;
}

TEST(late_node) {
  th_server_t *s[3] = {th_server_start(NULL), th_server_start(NULL), th_server_start(NULL)};
  const char *u[3] = {s[0]->url, s[1]->url, s[2]->url};
  th_server_kill(s[2]);
  rlock_options_t o;
  rlock_options_init(&o);
  CHECK_OK(rlock_redlock_new(&late_r, &o, u, 3, "rl:late", 7, 0));
  CHECK_OK(rlock_redlock_set_node_timeout(late_r, NODE_TIMEOUT_MS));
  int held;
  int64_t ttl;
  CHECK_RC(rlock_redlock_node_status(late_r, 2, &held, &ttl), RLOCK_ECONNECT);
  th_server_restart(s[2]);
  CHECK_MSG(th_wait_until(late_node_up, NULL, 20000), "node 3 never became usable: %s", rlock_last_error());
  th_server_kill(s[1]);
  int64_t vu = 0;
  CHECK_OK(rlock_redlock_acquire(late_r, 5000, 10000, NULL, &vu));
  CHECK_EQ(th_cmd_int(s[0], "EXISTS", "rl:late", NULL), 1);
  CHECK_EQ(th_cmd_int(s[2], "EXISTS", "rl:late", NULL), 1);
  CHECK_OK(rlock_redlock_release(late_r));
  CHECK_EQ(th_cmd_int(s[2], "EXISTS", "rl:late", NULL), 0);
  rlock_redlock_free(late_r);
  for (int i = 0; i < 3; i++) th_server_stop(s[i]);
}

/* rlock_redlock_free while a background attempt to make a missing node's
 * client is under way (the node SIGSTOPped: the attempt waits for its
 * handshake until connect_timeout_ms): free waits for it, so no thread of
 * the RedLock outlives it (and, under ASan, nothing writes into the freed
 * object), within about connect_timeout_ms. */
static rlock_redlock_t *rv_r;
static int rv_before;
static int rv_started(void *arg) {
  (void)arg;
  int held;
  int64_t ttl;
  rlock_redlock_node_status(rv_r, 2, &held, &ttl); /* starts an attempt, at most once a second */
  return threads_now() > rv_before;
}

TEST(freed_while_reviving) {
  th_server_t *s = th_server_start(NULL);
  kill(s->pid, SIGSTOP);
  const char *u[3] = {urls[0], urls[1], s->url};
  rlock_options_t o;
  rlock_options_init(&o);
  o.connect_timeout_ms = 1500;
  int base = threads_now();
  CHECK_OK(rlock_redlock_new(&rv_r, &o, u, 3, "rl:revfree", 10, 0)); /* node 3 failed */
  rv_before = threads_now();
  CHECK_MSG(th_wait_until(rv_started, NULL, 10000), "no attempt to make node 3 started");
  int64_t t0 = th_now_ms();
  rlock_redlock_free(rv_r);
  int64_t took = th_now_ms() - t0;
  int after = threads_now();
  kill(s->pid, SIGCONT);
  CHECK_MSG(after <= base,
            "threads before the RedLock %d, after its free %d: the attempt outlived "
            "rlock_redlock_free",
            base, after);
  CHECK_MSG(took < 1500 + 5000, "free took %lld ms", (long long)took);
  th_server_stop(s);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 170);
  start_all();
  RUN(majority_basics);
  RUN(simple_format);
  RUN(validity_from_send);
  RUN(busy_minority);
  RUN(down_at_creation);
  RUN(late_node);
  RUN(freed_while_reviving);
  RUN(bad_url_with_slow_node);
  RUN(lost_majority);
  RUN(lost_during_round);
  RUN(stopped_node);
  RUN(restart_hazard);
  RUN(freed_with_try_in_flight);
  RUN(two_killed);   /* kills nodes 4 and 5 */
  RUN(three_killed); /* and node 3 */
  stop_all();
  return th_done();
}
