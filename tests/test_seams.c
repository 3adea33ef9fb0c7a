/* test_seams.c -- the engine's seams for many nodes (internal API, real
 * redis-server processes):
 *   batcher          renewal/DEL batches: the items' own order (one server) or
 *                    one slot per batch (Cluster), both modes
 *   compound         a request of several commands (script + WAIT) gets all
 *                    its replies; NOSCRIPT re-sends it whole; a dropped
 *                    connection or a timeout completes it once
 *   requests         keep their command and slot until answered; error replies
 *                    pass the topology's redirect hook, which can re-route a
 *                    request (a real MOVED from a two-node cluster)
 *   handshake entry  a topology's handshake commands go out on a new
 *                    connection and only its check judges their replies
 *   routing point    every request of a real client (scripts, queries, pub/sub,
 *                    DELs, renewals, user commands) passes the topology, and the
 *                    batches follow its slots_matter in both modes
 * The conn.c tests drive a bare engine (a client_t with only its command
 * connection) on the test thread's own event loop. */
#include "harness.h"
#include "internal.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <openssl/evp.h>

/* ------------------------------------------------------------ batcher */

/* Runs the batcher over slots[0..n); checks the batches cover every item
 * once, hold at most max items, and (by_slot) one slot each in item order. */
static size_t batches_of(const uint16_t *slots, size_t n, size_t max, bool by_slot) {
  batcher_t b;
  CHECK_OK(rlock__batcher_init(&b, by_slot ? slots : NULL, n, max));
  char *seen = calloc(n + 1, 1);
  size_t first, count, batches = 0, next = 0;
  while (rlock__batcher_next(&b, &first, &count)) {
    CHECK(count >= 1 && count <= max && first == next);
    next = first + count;
    batches++;
    for (size_t i = first; i < first + count; i++) {
      size_t it = batcher_item(&b, i);
      CHECK(it < n && !seen[it]);
      seen[it] = 1;
      if (!by_slot) CHECK_EQ(it, i); /* the items' own order */
      if (by_slot && i > first) {
        CHECK_EQ(slots[it], slots[batcher_item(&b, first)]);
        CHECK(it > batcher_item(&b, i - 1)); /* stable within a slot */
      }
    }
  }
  CHECK_EQ(next, n);
  rlock__batcher_free(&b);
  free(seen);
  return batches;
}

TEST(batcher_modes) {
  enum { N = 100000 };
  uint16_t *slots = malloc(N * sizeof *slots);
  for (size_t i = 0; i < N; i++) slots[i] = (uint16_t)(i * 7919 % 16384); /* 100 000 distinct-ish names */
  /* one server: 500 per call whatever the slots: 200 calls */
  CHECK_EQ(batches_of(slots, N, 500, false), 200);
  /* Cluster: one call per slot (or per 500 of one slot) */
  CHECK_EQ(batches_of(slots, N, 500, true), 16384);
  for (size_t i = 0; i < N; i++) slots[i] = (uint16_t)(i % 3); /* 3 slots, 33 334 names each at most */
  CHECK_EQ(batches_of(slots, N, 500, true), 3 * 67);
  CHECK_EQ(batches_of(slots, N, 500, false), 200);
  CHECK_EQ(batches_of(slots, 1, 500, true), 1);
  CHECK_EQ(batches_of(slots, 0, 500, true), 0);
  CHECK_EQ(batches_of(slots, 7, 128, true), 3); /* a DEL of 7 latch keys over 3 slots */
  CHECK_EQ(batches_of(slots, 7, 128, false), 1);
  free(slots);
}

/* ------------------------------------------------------------ a bare engine */

typedef struct done_rec {
  int calls, status;
  rlock_reply_t *reply;
  bool had_cmd;
  int slot;
  int64_t at;
} done_rec_t;

static void on_done(req_t *r, int status, rlock_reply_t *reply) {
  done_rec_t *d = r->ctx;
  d->calls++;
  d->status = status;
  rlock_reply_free(d->reply);
  d->reply = reply;
  d->had_cmd = r->cmd != NULL && r->len > 0;
  d->slot = r->slot;
  d->at = rlock_now_ms();
}

static void rec_reset(done_rec_t *d) {
  rlock_reply_free(d->reply);
  memset(d, 0, sizeof *d);
}

/* A client_t with only a command connection, on base (the test thread runs it). */
static client_t *bare_new(struct event_base *base, const char *url, int64_t timeout_ms, const topology_ops_t *topo) {
  client_t *cl = calloc(1, sizeof *cl);
  rlock_options_init(&cl->opt);
  cl->opt.command_timeout_ms = timeout_ms;
  cl->s_name = strdup("rlock-seams-test");
  CHECK_OK(rlock__url_parse(&cl->url, url));
  cl->base = base;
  cl->thread = pthread_self(); /* this thread runs its loop: its I/O thread (RLOCK__ASSERTs) */
  cl->topo = topo;
  rlock__script_init();
  rlock__client_net_init(cl);
  CHECK_OK(rlock__conn_init(&cl->cmd, &cl->net, CONN_CMD));
  rlock__conn_start(&cl->cmd);
  return cl;
}

static void bare_free(client_t *cl) {
  rlock__conn_close(&cl->cmd);
  rlock__url_free(&cl->url);
  free(cl->s_name);
  free(cl);
}

static void tick(evutil_socket_t fd, short what, void *arg) { (void)fd, (void)what, (void)arg; }

/* Runs the loop until pred(arg), at most timeout_ms (a 5 ms tick bounds each turn). */
static int spin(struct event_base *base, int (*pred)(void *), void *arg, int64_t timeout_ms) {
  struct event *t = event_new(base, -1, EV_PERSIST, tick, NULL);
  struct timeval tv = {0, 5000};
  evtimer_add(t, &tv);
  int64_t end = rlock_now_ms() + timeout_ms;
  int ok;
  while (!(ok = pred(arg)) && rlock_now_ms() < end) event_base_loop(base, EVLOOP_ONCE);
  event_free(t);
  return ok;
}

static int is_ready(void *arg) { return ((client_t *)arg)->cmd.state == CS_READY; }
static int answered(void *arg) { return ((done_rec_t *)arg)->calls > 0; }

static req_t *cmd_req(done_rec_t *d, const char *a0, const char *a1, const char *a2) {
  const char *argv[3] = {a0, a1, a2};
  return rlock__req_new(a2 ? 3 : a1 ? 2 : 1, argv, NULL, 3000, on_done, d);
}

static int append(req_t *r, const char *a0, const char *a1, const char *a2) {
  const char *argv[3] = {a0, a1, a2};
  return rlock__req_append(r, a2 ? 3 : a1 ? 2 : 1, argv, NULL);
}

/* reentrant_acquire.lua for name by owner (the acquire latch as second key). */
static req_t *acquire_req(done_rec_t *d, const char *name, const char *owner) {
  const char *keys[2] = {name, NULL};
  size_t kl[2] = {strlen(name), 0};
  bytes_t latch;
  CHECK_OK(rlock__names_prefixed_suffix(&latch, "rlock_acquire_latch", name, kl[0], "seams-req"));
  keys[1] = latch.p, kl[1] = latch.n;
  const char *args[3] = {"30000", owner, "10000"};
  req_t *r = rlock__script_req(SCRIPT_ACQUIRE, 2, keys, kl, 3, args, NULL, 3000, on_done, d);
  free(latch.p);
  return r;
}

static th_server_t *srv;

/* The replica-sync shape: the acquire script and WAIT 0 0 as one request. */
TEST(compound_script_wait) {
  struct event_base *base = event_base_new();
  client_t *cl = bare_new(base, srv->url, 3000, &rlock__topology_single);
  CHECK(spin(base, is_ready, cl, 10000));
  long long evalsha = th_cmdstat(srv, "evalsha"), wait = th_cmdstat(srv, "wait");
  uint64_t sent = cl->st[ST_COMMANDS];
  done_rec_t d = {0};
  req_t *r = acquire_req(&d, "seams:compound", "owner-1");
  CHECK_OK(append(r, "WAIT", "0", "0"));
  CHECK_EQ(r->ncmds, 2);
  rlock__client_send(cl, "seams:compound", 14, r);
  CHECK(spin(base, answered, &d, 10000));
  CHECK_EQ(d.calls, 1);
  CHECK_EQ(d.status, 0);
  CHECK(d.reply && d.reply->type == RLOCK_REPLY_ARRAY && d.reply->elements == 2);
  CHECK_EQ(d.reply->element[0]->type, RLOCK_REPLY_NIL); /* acquired */
  CHECK_EQ(d.reply->element[1]->type, RLOCK_REPLY_INTEGER);
  CHECK_EQ(d.reply->element[1]->integer, 0); /* no replica */
  CHECK_EQ(th_hget_num(srv, "seams:compound", "owner-1"), 1);
  CHECK_EQ(th_cmdstat(srv, "evalsha"), evalsha + 1);
  CHECK_EQ(th_cmdstat(srv, "wait"), wait + 1);
  CHECK_EQ(cl->st[ST_COMMANDS] - sent, 2);
  /* the connection is in step: the next request gets its own reply */
  rec_reset(&d);
  rlock__client_send(cl, NULL, 0, cmd_req(&d, "ECHO", "next", NULL));
  CHECK(spin(base, answered, &d, 10000));
  CHECK(d.reply && d.reply->type == RLOCK_REPLY_STRING && !strcmp(d.reply->str, "next"));
  rec_reset(&d);
  bare_free(cl);
  event_base_free(base);
}

/* A server without the script (SCRIPT FLUSH): the compound is re-sent whole as EVAL. */
TEST(compound_noscript) {
  struct event_base *base = event_base_new();
  client_t *cl = bare_new(base, srv->url, 3000, &rlock__topology_single);
  CHECK(spin(base, is_ready, cl, 10000));
  th_reply_free(th_cmd(srv, "SCRIPT", "FLUSH", NULL));
  done_rec_t d = {0};
  req_t *r = acquire_req(&d, "seams:noscript", "owner-2");
  CHECK_OK(append(r, "WAIT", "0", "0"));
  rlock__client_send(cl, "seams:noscript", 14, r);
  CHECK(spin(base, answered, &d, 10000));
  CHECK_EQ(d.calls, 1);
  CHECK_EQ(d.status, 0);
  CHECK(d.reply && d.reply->type == RLOCK_REPLY_ARRAY && d.reply->elements == 2);
  CHECK_EQ(d.reply->element[0]->type, RLOCK_REPLY_NIL);
  CHECK_EQ(d.reply->element[1]->type, RLOCK_REPLY_INTEGER);
  CHECK_EQ(cl->st[ST_NOSCRIPT], 1);
  CHECK_EQ(th_hget_num(srv, "seams:noscript", "owner-2"), 1);
  rec_reset(&d);
  bare_free(cl);
  event_base_free(base);
}

static int one_blocked(void *arg) {
  char *info = th_cmd_str(arg, "INFO", "clients", NULL);
  const char *p = info ? strstr(info, "blocked_clients:") : NULL;
  int ok = p && atoi(p + 16) >= 1;
  free(info);
  return ok;
}

typedef struct half_answered {
  req_t *r;
  done_rec_t *d;
} half_answered_t;

/* The compound's first reply is in and the server blocks on its second (or it ended). */
static int half_answered(void *arg) {
  half_answered_t *x = arg;
  if (x->d->calls > 0) return 1;
  return x->r->replies && x->r->replies->elements == 1 && one_blocked(srv);
}

/* PING answered, BLPOP blocked: the connection is killed between the two replies. */
TEST(compound_conn_lost) {
  struct event_base *base = event_base_new();
  client_t *cl = bare_new(base, srv->url, 30000, &rlock__topology_single);
  CHECK(spin(base, is_ready, cl, 10000));
  done_rec_t d = {0};
  req_t *r = cmd_req(&d, "PING", NULL, NULL);
  CHECK_OK(append(r, "BLPOP", "seams:never", "0"));
  rlock__client_send(cl, NULL, 0, r);
  half_answered_t x = {r, &d};
  CHECK(spin(base, half_answered, &x, 10000));
  CHECK_EQ(d.calls, 0);
  CHECK(cl->cmd.inflight.head == r && r->replies && r->replies->elements == 1); /* PONG is in */
  th_reply_free(th_cmd(srv, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes", NULL));
  CHECK(spin(base, answered, &d, 10000));
  CHECK_EQ(d.status, RLOCK_ECONNLOST);
  CHECK(d.reply == NULL);
  CHECK(spin(base, is_ready, cl, 10000)); /* reconnected: nothing completes twice */
  done_rec_t e = {0};
  rlock__client_send(cl, NULL, 0, cmd_req(&e, "ECHO", "after", NULL));
  CHECK(spin(base, answered, &e, 10000));
  CHECK(e.reply && e.reply->str && !strcmp(e.reply->str, "after"));
  CHECK_EQ(d.calls, 1);
  rec_reset(&d);
  rec_reset(&e);
  bare_free(cl);
  event_base_free(base);
}

/* The command timeout covers the compound: its first reply came, its last
 * did not. It completes once; the late reply is read and discarded. */
TEST(compound_timeout) {
  struct event_base *base = event_base_new();
  client_t *cl = bare_new(base, srv->url, 300, &rlock__topology_single);
  CHECK(spin(base, is_ready, cl, 10000));
  done_rec_t d = {0};
  req_t *r = cmd_req(&d, "PING", NULL, NULL);
  r->deadline = rlock_now_ms() + 300;
  CHECK_OK(append(r, "BLPOP", "seams:late", "0"));
  int64_t t0 = rlock_now_ms();
  rlock__client_send(cl, NULL, 0, r);
  CHECK(spin(base, answered, &d, 10000));
  CHECK_EQ(d.status, RLOCK_ETIMEDOUT);
  CHECK(d.at - t0 >= 300);
  CHECK(one_blocked(srv)); /* the BLPOP is still waiting on the server */
  th_reply_free(th_cmd(srv, "RPUSH", "seams:late", "x", NULL));
  done_rec_t e = {0};
  rlock__client_send(cl, NULL, 0, cmd_req(&e, "ECHO", "in-step", NULL));
  CHECK(spin(base, answered, &e, 10000));
  CHECK_EQ(e.status, 0);
  CHECK(e.reply && e.reply->type == RLOCK_REPLY_STRING && !strcmp(e.reply->str, "in-step"));
  CHECK_EQ(d.calls, 1);
  CHECK_EQ(th_cmd_int(srv, "LLEN", "seams:late", NULL), 0); /* our BLPOP took it */
  rec_reset(&d);
  rec_reset(&e);
  bare_free(cl);
  event_base_free(base);
}

/* ------------------------------------------------------------ requests and the redirect hook */

static int hook_calls;
static char hook_err[128];
static client_t *redirect_to; /* re-route MOVED here */

static bool test_hook(client_t *cl, conn_t *c, req_t *r, const rlock_reply_t *err) {
  (void)cl, (void)c;
  hook_calls++;
  snprintf(hook_err, sizeof hook_err, "%s", err->str);
  if (redirect_to && rlock__reply_is_error(err, "MOVED")) {
    CHECK_EQ(atoi(err->str + 6), r->slot); /* the request kept its slot... */
    CHECK(r->cmd && r->len);               /* ...and its command */
    rlock__conn_send(&redirect_to->cmd, r);
    return true;
  }
  return false;
}

static conn_t *route_cmd(client_t *cl, const req_t *r) {
  (void)r;
  return &cl->cmd;
}

static const topology_ops_t hook_topology = {.name = "hook-test", .route = route_cmd, .on_error_reply = test_hook};

TEST(requests_keep_command_and_slot) {
  struct event_base *base = event_base_new();
  client_t *cl = bare_new(base, srv->url, 3000, &hook_topology);
  CHECK(spin(base, is_ready, cl, 10000));
  done_rec_t d = {0};
  rlock__client_send(cl, "seams:{tag}:key", 15, cmd_req(&d, "GET", "seams:{tag}:key", NULL));
  CHECK(spin(base, answered, &d, 10000));
  CHECK(d.had_cmd); /* until it was answered */
  CHECK_EQ(d.slot, rlock__names_slot("tag", 3));
  CHECK_EQ(hook_calls, 0); /* a nil reply is no error */
  /* error replies pass the hook first (single and compound) */
  rec_reset(&d);
  rlock__client_send(cl, NULL, 0, cmd_req(&d, "GET", NULL, NULL));
  CHECK(spin(base, answered, &d, 10000));
  CHECK_EQ(hook_calls, 1);
  CHECK(!strncmp(hook_err, "ERR wrong number", 16));
  CHECK(d.reply && d.reply->type == RLOCK_REPLY_ERROR);
  CHECK_EQ(d.slot, -1);
  rec_reset(&d);
  req_t *r = cmd_req(&d, "PING", NULL, NULL);
  CHECK_OK(append(r, "NOSUCHCOMMAND", NULL, NULL));
  CHECK_OK(append(r, "ECHO", "3rd", NULL));
  rlock__client_send(cl, NULL, 0, r);
  CHECK(spin(base, answered, &d, 10000));
  CHECK_EQ(hook_calls, 2);
  CHECK(!strncmp(hook_err, "ERR unknown command", 19));
  CHECK(d.reply && d.reply->elements == 3);
  CHECK_EQ(d.reply->element[0]->type, RLOCK_REPLY_STATUS);
  CHECK_EQ(d.reply->element[1]->type, RLOCK_REPLY_ERROR);
  CHECK(!strcmp(d.reply->element[2]->str, "3rd"));
  rec_reset(&d);
  bare_free(cl);
  event_base_free(base);
  hook_calls = 0;
}

/* ------------------------------------------------------------ the handshake entry */

static int hs_checks, hs_refused_seen;
static bool hs_accept;
static char hs_seen[64];

/* The test topology's handshake: ECHO, whose reply it judges itself. */
static void hs_add(client_t *cl, const conn_t *c, hs_list_t *hs) {
  (void)cl, (void)c;
  const char *a[2] = {"ECHO", "seams-hs"};
  rlock__hs_add(hs, HS_CHECKED, 2, a);
}

static int hs_check(client_t *cl, const rlock_reply_t *reply, char *msg, size_t n) {
  (void)cl;
  hs_checks++;
  snprintf(hs_seen, sizeof hs_seen, "%s", reply && reply->str ? reply->str : "");
  if (hs_accept) return 0;
  snprintf(msg, n, "refused by the test topology");
  return RLOCK_ECONNECT;
}

static bool hs_before(client_t *cl, conn_t *c) {
  (void)cl;
  if (c->node_refused) hs_refused_seen++; /* what Sentinel's before_connect reads */
  return true;
}

static const topology_ops_t hs_topology = {.name = "handshake-test",
                                           .route = route_cmd,
                                           .on_error_reply = test_hook,
                                           .before_connect = hs_before,
                                           .handshake = hs_add,
                                           .handshake_check = hs_check};

static int refused_seen(void *arg) { return hs_refused_seen >= 1 && ((client_t *)arg)->cmd.last_err == RLOCK_ECONNECT; }

/* A topology's handshake commands go out on every new connection and its
 * check judges their replies: conn.c knows no deployment. A refusal fails
 * the attempt with the topology's reason and marks the connection for its
 * before_connect. */
TEST(handshake_entry) {
  struct event_base *base = event_base_new();
  hs_accept = true;
  client_t *cl = bare_new(base, srv->url, 3000, &hs_topology);
  CHECK(spin(base, is_ready, cl, 10000));
  CHECK_EQ(hs_checks, 1);
  CHECK(!strcmp(hs_seen, "seams-hs"));
  CHECK_EQ(hs_refused_seen, 0);
  bare_free(cl);
  hs_accept = false;
  hs_checks = 0;
  cl = bare_new(base, srv->url, 3000, &hs_topology);
  CHECK(spin(base, refused_seen, cl, 10000));
  CHECK(cl->cmd.state != CS_READY);
  CHECK(hs_checks >= 1);
  CHECK_MSG(strstr(cl->cmd.last_msg, "refused by the test topology"), "last_msg: %s", cl->cmd.last_msg);
  bare_free(cl);
  event_base_free(base);
  hook_calls = 0;
}

/* A cluster-enabled redis-server with its bus on a free port (the default,
 * port + 10000, does not exist for the harness's high ports). */
static th_server_t *cluster_node(char *bus, size_t n) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0);
  close(fd);
  snprintf(bus, n, "%d", ntohs(a.sin_port));
  const char *const args[] = {"--cluster-enabled", "yes", "--cluster-port", bus, NULL};
  th_server_opts_t o = {.extra_args = args};
  return th_server_start(&o);
}

/* The node knows both nodes' slots and serves them. */
static int knows_both(void *arg) {
  redisReply *r = th_cmd(arg, "CLUSTER", "SLOTS", NULL);
  int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2;
  th_reply_free(r);
  char *info = ok ? th_cmd_str(arg, "CLUSTER", "INFO", NULL) : NULL;
  ok = info && strstr(info, "cluster_state:ok") != NULL;
  free(info);
  return ok;
}

/* A real MOVED: node A owns slots 0-8191, B the rest. A GET for a key of B's
 * sent to A comes back MOVED; the hook re-sends the same request to B. */
TEST(redirect_hook_follows_moved) {
  char busa[16], busb[16], port[16];
  th_server_t *a = cluster_node(busa, sizeof busa), *b = cluster_node(busb, sizeof busb);
  th_reply_free(th_cmd(a, "CLUSTER", "ADDSLOTSRANGE", "0", "8191", NULL));
  th_reply_free(th_cmd(b, "CLUSTER", "ADDSLOTSRANGE", "8192", "16383", NULL));
  snprintf(port, sizeof port, "%d", b->port);
  th_reply_free(th_cmd(a, "CLUSTER", "MEET", "127.0.0.1", port, busb, NULL));
  CHECK(th_wait_until(knows_both, a, 60000) && th_wait_until(knows_both, b, 60000));
  const char *key = "seams:b"; /* find a key B owns */
  char buf[32];
  for (int i = 0; rlock__names_slot(key, strlen(key)) < 8192; i++) snprintf(buf, sizeof buf, "seams:%d", i), key = buf;
  th_reply_free(th_cmd(b, "SET", key, "on-b", NULL));

  struct event_base *base = event_base_new();
  client_t *ca = bare_new(base, a->url, 3000, &hook_topology), *cb = bare_new(base, b->url, 3000, &hook_topology);
  CHECK(spin(base, is_ready, ca, 10000) && spin(base, is_ready, cb, 10000));
  redirect_to = cb;
  done_rec_t d = {0};
  rlock__client_send(ca, key, strlen(key), cmd_req(&d, "GET", key, NULL));
  CHECK(spin(base, answered, &d, 10000));
  CHECK_EQ(d.calls, 1);
  CHECK_EQ(hook_calls, 1);
  CHECK_MSG(!strncmp(hook_err, "MOVED ", 6), "hook saw: %s", hook_err);
  CHECK(d.reply && d.reply->type == RLOCK_REPLY_STRING && !strcmp(d.reply->str, "on-b"));
  rec_reset(&d);
  redirect_to = NULL;
  hook_calls = 0;
  bare_free(ca);
  bare_free(cb);
  event_base_free(base);
  th_server_stop(a);
  th_server_stop(b);
}

/* ------------------------------------------------------------ the routing point of a real client */

/* Counts what a real client routes (verb, connection kind, keys' slots),
 * then routes as rlock__topology_single does. */
enum { V_EVALSHA, V_SUBSCRIBE, V_UNSUBSCRIBE, V_DEL, V_EXISTS, V_HGET, V_PTTL, V_HGETALL, V_ECHO, V_N };
static const char *verbs[V_N] = {"evalsha", "subscribe", "unsubscribe", "del", "exists",
                                 "hget",    "pttl",      "hgetall",     "echo"};
static _Atomic long routed[V_N];
static _Atomic long cross_slot; /* multi-key requests whose keys span slots */
static _Atomic long renew_calls, renew_keys_max;
static char renew_sha[41];

/* The n-th bulk string of a formatted command. */
static const char *arg_at(const req_t *r, int n, size_t *len) {
  const char *p = memchr(r->cmd, '\n', r->len) + 1;
  for (int i = 0;; i++) {
    size_t l = strtoul(p + 1, NULL, 10);
    p = strchr(p, '\n') + 1;
    if (i == n) {
      *len = l;
      return p;
    }
    p += l + 2;
  }
}

static conn_t *count_route(client_t *cl, const req_t *r) {
  size_t vl;
  const char *v = arg_at(r, 0, &vl);
  int argc = atoi(r->cmd + 1);
  for (int i = 0; i < V_N; i++)
    if (vl == strlen(verbs[i]) && !strncasecmp(v, verbs[i], vl)) routed[i]++;
  bool sub = vl >= 9 && !strncasecmp(v + vl - 9, "subscribe", 9);
  bool user = vl == 4 && !strncasecmp(v, "ECHO", 4); /* rlock_client_command: the user connection */
  CHECK_EQ(r->conn, sub ? CONN_SUB : user ? CONN_USER : CONN_CMD);
  int first = -1, nkeys = 0;
  if (vl == 3 && !strncasecmp(v, "DEL", 3)) first = 1, nkeys = argc - 1;
  if (vl == 7 && !strncasecmp(v, "EVALSHA", 7)) first = 3, nkeys = atoi(arg_at(r, 2, &vl));
  for (int i = 1; i < nkeys; i++) {
    size_t l0, li;
    const char *k0 = arg_at(r, first, &l0), *ki = arg_at(r, first + i, &li);
    if (rlock__names_slot(k0, l0) != rlock__names_slot(ki, li)) {
      cross_slot++;
      break;
    }
  }
  if (first == 3 && !strncmp(arg_at(r, 1, &vl), renew_sha, 40)) {
    renew_calls++;
    if (nkeys > renew_keys_max) renew_keys_max = nkeys;
  }
  if (nkeys) {
    size_t l0;
    const char *k0 = arg_at(r, first, &l0);
    CHECK_EQ(r->slot, rlock__names_slot(k0, l0)); /* the request carries its key's slot */
  }
  return rlock__topology_single.route(cl, r);
}

static bool no_redirect(client_t *cl, conn_t *c, req_t *r, const rlock_reply_t *err) {
  (void)cl, (void)c, (void)r, (void)err;
  return false;
}

static const topology_ops_t count_single = {
    .name = "count-single", .route = count_route, .on_error_reply = no_redirect};
static const topology_ops_t count_by_slot = {
    .name = "count-by-slot", .slots_matter = true, .route = count_route, .on_error_reply = no_redirect};

/* Scripts call DEL, EXISTS, HGET and PTTL themselves (counted by the server
 * too): those verbs are only checked to have been routed. */
static bool in_scripts(int v) { return v == V_DEL || v == V_EXISTS || v == V_HGET || v == V_PTTL; }

static int all_counted(void *arg) {
  (void)arg;
  for (int i = 0; i < V_N; i++)
    if (!in_scripts(i) && th_cmdstat(srv, verbs[i]) != routed[i]) return 0;
  return 1;
}

static long renew_keys_want;
static int renewed(void *arg) {
  (void)arg;
  return renew_keys_max >= renew_keys_want;
}

typedef struct lock_waiter {
  rlock_lock_t *l;
  int rc;
} lock_waiter_t;

static void *wait_lock(void *arg) {
  lock_waiter_t *w = arg;
  w->rc = rlock_lock_acquire(w->l, 2, 20000, 10000, NULL);
  return NULL;
}

static char chan[128];
static int chan_subscribed(void *arg) {
  (void)arg;
  return th_numsub(srv, chan) >= 1;
}

/* One real client through a counting topology: every request the server
 * executes was routed (per verb), and the batches follow slots_matter. */
static void routing_scenario(const topology_ops_t *topo, int nlocks) {
  th_reply_free(th_cmd(srv, "FLUSHALL", NULL));
  th_reply_free(th_cmd(srv, "CONFIG", "RESETSTAT", NULL));
  for (int i = 0; i < V_N; i++) routed[i] = 0;
  cross_slot = renew_calls = renew_keys_max = 0;
  /* the client takes the counting table when it is made: the I/O thread
   * reads it from its first pass on */
  rlock__topology_forced = topo;
  rlock_client_t *c = th_client(srv->url, 1500);
  rlock__topology_forced = NULL;
  rlock_lock_t **ls = calloc((size_t)nlocks, sizeof *ls);
  int per_slot[16384] = {0}, most = 0;
  for (int i = 0; i < nlocks; i++) {
    char name[32]; /* five of them share a slot (a hash tag) */
    snprintf(name, sizeof name, i >= 1 && i <= 5 ? "seams:{grp}:%d" : "seams:route:%d", i);
    ls[i] = th_lock(c, name);
    CHECK_OK(rlock_lock_acquire(ls[i], 1, 0, RLOCK_LEASE_WATCHDOG, NULL));
    int k = i ? ++per_slot[rlock__names_slot(name, strlen(name))] : 0; /* ls[0] is released before the rounds */
    if (k > most) most = k;
  }
  /* a waiter: SUBSCRIBE, the unlock message, UNSUBSCRIBE */
  lock_waiter_t w = {ls[0], 1};
  bytes_t ch;
  size_t nl;
  const char *nm = rlock_lock_name(ls[0], &nl);
  CHECK_OK(rlock__names_prefixed(&ch, "redisson_lock__channel", nm, nl));
  snprintf(chan, sizeof chan, "%s", ch.p);
  free(ch.p);
  pthread_t t;
  pthread_create(&t, NULL, wait_lock, &w);
  CHECK(th_wait_until(chan_subscribed, NULL, 10000));
  CHECK_OK(rlock_lock_release(ls[0], 1));
  pthread_join(t, NULL);
  CHECK_OK(w.rc);
  CHECK_OK(rlock_lock_release(ls[0], 2));
  /* queries and a user command */
  int b;
  int64_t v;
  rlock_holder_t *hs;
  size_t nh;
  CHECK_OK(rlock_lock_is_locked(ls[1], &b));
  CHECK_OK(rlock_lock_is_held(ls[1], 1, &b));
  CHECK_OK(rlock_lock_hold_count(ls[1], 1, &v));
  CHECK_OK(rlock_lock_ttl(ls[1], &v));
  CHECK_OK(rlock_lock_holders(ls[1], &hs, &nh));
  rlock_holders_free(hs, nh);
  const char *echo[2] = {"ECHO", "x"};
  rlock_reply_t *rep;
  CHECK_OK(rlock_client_command(c, 2, echo, NULL, &rep));
  rlock_reply_free(rep);
  /* renewal rounds over the other holds: one call for all (one server), or
   * one per slot (slots matter) */
  renew_keys_want = topo->slots_matter ? most : nlocks - 1;
  CHECK(th_wait_until(renewed, c, 20000));
  for (int i = 1; i < nlocks; i++) CHECK_OK(rlock_lock_release(ls[i], 1));
  int counted = th_wait_until(all_counted, NULL, 10000);
  for (int i = 0; i < V_N; i++)
    printf("#   %-11s routed %ld, executed %lld\n", verbs[i], (long)routed[i], th_cmdstat(srv, verbs[i]));
  CHECK_MSG(counted, "a request reached the server without the routing point");
  printf("# %s: %ld renewal calls, at most %ld names each; %ld cross-slot requests; at most %d names a slot\n",
         topo->name, (long)renew_calls, (long)renew_keys_max, (long)cross_slot, most);
  for (int i = 0; i < V_N; i++) CHECK_MSG(routed[i] >= 1, "no %s routed", verbs[i]);
  if (topo->slots_matter) {
    CHECK_EQ(cross_slot, 0);        /* no renewal or DEL spans two slots */
    CHECK_EQ(renew_keys_max, most); /* a call renews the holds of one slot */
  } else {
    CHECK(cross_slot > 0);               /* one server: batches span slots */
    CHECK(renew_keys_max >= nlocks - 1); /* one call renews every hold */
  }
  for (int i = 0; i < nlocks; i++) rlock_lock_free(ls[i]);
  free(ls);
  rlock_client_free(c);
}

TEST(routing_point_single) { routing_scenario(&count_single, 40); }

TEST(routing_point_by_slot) { routing_scenario(&count_by_slot, 40); }

#define RUN_IF(name) \
  if (argc < 2 || !strcmp(argv[1], #name)) RUN(name)

int main(int argc, char **argv) {
  th_init(argc, argv, 170);
  rlock__script_init();
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int mdn = 0;
  EVP_Digest(rlock__script_body(SCRIPT_RENEW), strlen(rlock__script_body(SCRIPT_RENEW)), md, &mdn, EVP_sha1(), NULL);
  for (unsigned i = 0; i < 20; i++) snprintf(renew_sha + 2 * i, 3, "%02x", md[i]);
  RUN_IF(batcher_modes);
  srv = th_server_start(NULL);
  RUN_IF(compound_script_wait);
  RUN_IF(compound_noscript);
  RUN_IF(compound_conn_lost);
  RUN_IF(compound_timeout);
  RUN_IF(requests_keep_command_and_slot);
  RUN_IF(redirect_hook_follows_moved);
  RUN_IF(handshake_entry);
  RUN_IF(routing_point_single);
  RUN_IF(routing_point_by_slot);
  th_server_stop(srv);
  return th_done();
}
