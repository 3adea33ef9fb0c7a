/* topology/cluster.c -- Redis Cluster (redis+cluster://h1:p1,h2:p2...).
 *
 * The node table: one command connection per master, opened as the slot map
 * names it; the slot map (slot -> node) comes from CLUSTER SLOTS. Requests go
 * by their key's slot (r->slot, Redis's hash-tag rule in names.c); before the
 * map is known, and for requests without a key, to the client's command
 * connection (the first seed that answers: the control connection, which
 * also asks CLUSTER SLOTS).
 *
 * Redirects (the on_error_reply hook), MOVED/ASK at most MAX_REDIRECTS times
 * in a row (between two TRYAGAIN backoffs), always within the request's deadline:
 *   MOVED s h:p      slot s now lives on h:p: the map says so at once, the
 *                    request goes there, a full refresh follows (throttled)
 *   ASK s h:p        ASKING + the request on h:p, once; the map is untouched
 *   TRYAGAIN,        the request is sent again after a backoff (a slot in
 *   CLUSTERDOWN      migration: a script whose latch key is not on the
 *                    target yet; a failover under way) if it still fits its
 *                    deadline, else it completes as never written
 *                    (RLOCK_ECONNECT: it did not run; an acquire is queued
 *                    again until its wait bound). A renewal batch (several
 *                    holds of one slot, `splittable`) answered TRYAGAIN has
 *                    its keys on two nodes: it completes so at once, `split`
 *                    set, and the watchdog renews its holds one by one
 * A node connection that goes down, or fails to connect while the map gives
 * its node slots (it may never have been ready), or a refresh that finds a
 * node not reachable, asks for another refresh a second later, until the map
 * names only reachable masters (a failover: the promoted replica takes the
 * slots).
 * Requests still queued (never written) on a node that lost its slots move
 * to the new owner at once.
 *
 * Pub/sub: PUBSUB SHARDNUMSUB is probed once on the control connection
 * (the client's start waits for it). Sharded (Redis 7): each channel is
 * SSUBSCRIBEd on the subscriber connection of its slot's master (opened on
 * first use, its pushes handled by pubsub.c) and the scripts SPUBLISH;
 * after every slot-map change pubsub.c moves channels whose node no longer
 * serves their slot. Classic: the client's subscriber connection SUBSCRIBEs
 * on one node (Cluster forwards every PUBLISH to every node); when that node
 * cannot be reached it moves to another known master, as the control
 * connection does.
 *
 * User commands (usercmd.c sends them with their first key, or none) go to
 * the user connection of their slot's master (opened on first use, attached
 * to usercmd.c, which unsticks and closes it with the others), keyless ones
 * and those whose slot is not known yet to the first seed's. MOVED and ASK
 * are followed as for the locks (at most MAX_REDIRECTS, within the command's
 * own deadline), on the target's user connection; TRYAGAIN, CLUSTERDOWN and
 * CROSSSLOT come back to the caller. The parts of a transaction are pinned:
 * a MOVED inside one only updates the map (the caller sees EXECABORT). */
#include "client.h"
#include "replica_sync.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NSLOTS 16384
#define MAX_REDIRECTS 5
#define REFRESH_MIN_MS 1000 /* at most one CLUSTER SLOTS a second */
#define TRYAGAIN_MIN_MS 10  /* first backoff after TRYAGAIN / CLUSTERDOWN, doubled each time */
#define TRYAGAIN_MAX_MS 500
/* What Cluster keeps per request, in its bytes of req_t.topo: the MOVED/ASK
 * followed since the last TRYAGAIN, and the TRYAGAIN/CLUSTERDOWN backoffs so far. */
#define REDIRECTS(r) ((r)->topo[0])
#define TRYAGAINS(r) ((r)->topo[1])

typedef struct cnode {
  char *host;
  int port;
  conn_t cmd;
  conn_t sub;    /* sharded pub/sub: SSUBSCRIBE for the channels of its slots */
  bool has_sub;  /* sub was opened (on first use) */
  conn_t user;   /* the user's commands on its slots (rlock_client_command) */
  bool has_user; /* user was opened (on first use) */
} cnode_t;

typedef struct delayed delayed_t;

typedef struct cluster {
  client_t *cl;
  cnode_t **nodes;
  int nnodes, cap;
  int16_t owner[NSLOTS]; /* index into nodes, -1: not known */
  struct event *refresh;
  int64_t last_refresh;  /* monotonic ms of the last CLUSTER SLOTS sent */
  bool refreshing;       /* a CLUSTER SLOTS is in flight */
  conn_t *asked;         /* where it went (a node with no host in its reply is that one's) */
  delayed_t *delayed;    /* requests waiting out a TRYAGAIN / CLUSTERDOWN backoff */
  char **seeds;          /* the URL's seeds after the first, "host:port" */
  int nseeds, next_seed; /* next_seed: the next one to try for the control connection */
  void (*cmd_on_error)(conn_t *c, int err, const char *msg); /* the client's */
  void (*cmd_on_ready)(conn_t *c);                           /* the client's */
  bool probed; /* PUBSUB SHARDNUMSUB answered (or failed): pub/sub mode known */
} cluster_t;

struct delayed {
  delayed_t *prev, *next;
  cluster_t *k;
  req_t *r;
  struct event *ev;
};

static const char asking_marker[] = "ASKING";

static cluster_t *state(client_t *cl) { return cl->topo_state; }

/* ------------------------------------------------------------ node table */

static void node_ready(conn_t *c) {
  client_t *cl = rlock__client_of(c);
  if (cl->wd.holds.count) rlock__watchdog_renew_now(&cl->wd); /* a shard back: renew its holds now */
}

static void schedule_refresh(cluster_t *k, int64_t delay_ms);

static void node_down(conn_t *c) { schedule_refresh(state(rlock__client_of(c)), REFRESH_MIN_MS); }

/* Whether the slot map gives the node of command connection c a slot. */
static bool node_named(const cluster_t *k, const conn_t *c) {
  int idx = -1;
  for (int i = 0; i < k->nnodes && idx < 0; i++)
    if (&k->nodes[i]->cmd == c) idx = i;
  for (int s = 0; idx >= 0 && s < NSLOTS; s++)
    if (k->owner[s] == idx) return true;
  return false;
}

/* A node's connection attempt failed (refused, or cut or timed out before it
 * was ready). A connection that never was ready never goes down (node_down
 * is not called): a master that died while the client's first connection to
 * it was still coming up (the map just learnt), or whose reconnect was under
 * way when a refresh answered (apply_slots counts a node connecting as
 * coming up), asked for no refresh, and the map named the dead master for
 * ever: every request of its slots waited on its connection until its own
 * bound, a waiter's SSUBSCRIBE too, after the promoted replica took the
 * slots. While the map gives the node slots, look again a second later. */
static void node_error(conn_t *c, int err, const char *msg) {
  (void)err, (void)msg;
  cluster_t *k = state(rlock__client_of(c));
  if (k && node_named(k, c)) schedule_refresh(k, REFRESH_MIN_MS);
}

/* The node host:port of the table, added (and connecting) if new; -1 when out of memory. */
static int node_index(cluster_t *k, const char *host, size_t hlen, int port) {
  for (int i = 0; i < k->nnodes; i++)
    if (k->nodes[i]->port == port && strlen(k->nodes[i]->host) == hlen && !memcmp(k->nodes[i]->host, host, hlen))
      return i;
  if (k->nnodes == INT16_MAX) return -1;
  if (k->nnodes == k->cap) {
    int cap = k->cap ? k->cap * 2 : 8;
    cnode_t **n = realloc(k->nodes, (size_t)cap * sizeof *n);
    if (!n) return -1;
    k->nodes = n, k->cap = cap;
  }
  cnode_t *n = calloc(1, sizeof *n);
  if (!n || !(n->host = rlock__strndup(host, hlen)) || rlock__conn_init(&n->cmd, &k->cl->net, CONN_CMD) ||
      rlock__conn_set_node(&n->cmd, n->host, port)) {
    if (n) rlock__conn_close(&n->cmd);
    if (n) free(n->host);
    free(n);
    return -1;
  }
  n->port = port;
  n->cmd.on_ready = node_ready;
  n->cmd.on_down = node_down;
  n->cmd.on_error = node_error;
  k->nodes[k->nnodes] = n;
  rlock__conn_start(&n->cmd);
  return k->nnodes++;
}

/* The host a node answered about a peer: its own when it gave none. */
static void peer_host(const conn_t *c, const char **host, size_t *hlen) {
  if (*hlen == 0 || (*hlen == 1 && **host == '?')) {
    *host = c->host ? c->host : rlock__client_of(c)->url.host;
    *hlen = strlen(*host);
  }
}

/* ------------------------------------------------------------ the slot map */

static bool node_usable(const cnode_t *n) { return n->cmd.state == CS_READY; }

/* Requests queued on node i (never written) whose slot another node owns
 * now go there: a dead master's requests do not wait for their deadline. */
static void move_queued(cluster_t *k, int i) {
  conn_t *c = &k->nodes[i]->cmd;
  req_queue_t keep = {0};
  req_t *r;
  while ((r = c->pending.head)) {
    c->pending.head = r->next;
    if (!c->pending.head) c->pending.tail = NULL;
    c->pending.n--;
    r->next = NULL;
    if (r->slot >= 0 && k->owner[r->slot] >= 0 && k->owner[r->slot] != i) {
      rlock__conn_send(&k->nodes[k->owner[r->slot]]->cmd, r);
      continue;
    }
    if (keep.tail) keep.tail->next = r;
    else keep.head = r;
    keep.tail = r;
    keep.n++;
  }
  c->pending = keep;
}

/* Sharded pub/sub: the SSUBSCRIBEs still queued on node i (down) whose slot
 * another node owns now fail at once (ECONNECT: never written); pubsub.c
 * marks their channels unsubscribed and wakes their waiters, and the
 * resubscribe after the map change sends them to the new owner. */
static void fail_queued_subs(cluster_t *k, int i) {
  conn_t *c = &k->nodes[i]->sub;
  req_queue_t keep = {0}, doomed = {0};
  req_t *r;
  while ((r = c->pending.head)) {
    c->pending.head = r->next;
    r->next = NULL;
    req_queue_t *q = r->slot >= 0 && k->owner[r->slot] >= 0 && k->owner[r->slot] != i ? &doomed : &keep;
    if (q->tail) q->tail->next = r;
    else q->head = r;
    q->tail = r;
    q->n++;
  }
  c->pending = keep; /* before the callbacks below, which may queue more */
  while ((r = doomed.head)) {
    doomed.head = r->next;
    rlock__set_msg("the slot moved to another node");
    r->completed = true;
    if (r->done) r->done(r, RLOCK_ECONNECT, NULL);
    rlock__req_free(r);
  }
}

/* A CLUSTER SLOTS reply: [[start, end, [host, port, id...], replicas...]...]. */
static void apply_slots(cluster_t *k, const conn_t *from, const rlock_reply_t *rep) {
  bool all_usable = true;
  for (size_t i = 0; i < rep->elements; i++) {
    const rlock_reply_t *e = rep->element[i];
    if (e->type != RLOCK_REPLY_ARRAY || e->elements < 3 || e->element[0]->type != RLOCK_REPLY_INTEGER ||
        e->element[1]->type != RLOCK_REPLY_INTEGER || e->element[2]->type != RLOCK_REPLY_ARRAY)
      continue;
    const rlock_reply_t *m = e->element[2];
    if (m->elements < 2 || m->element[0]->type != RLOCK_REPLY_STRING || m->element[1]->type != RLOCK_REPLY_INTEGER)
      continue;
    const char *host = m->element[0]->str;
    size_t hlen = m->element[0]->len;
    peer_host(from, &host, &hlen);
    int idx = node_index(k, host, hlen, (int)m->element[1]->integer);
    if (idx < 0) continue;
    all_usable &= node_usable(k->nodes[idx]) || k->nodes[idx]->cmd.state == CS_CONNECTING ||
                  k->nodes[idx]->cmd.state == CS_HANDSHAKE;
    long long lo = e->element[0]->integer, hi = e->element[1]->integer; /* clamped: a broken node's range */
    for (long long s = lo < 0 ? 0 : lo; s <= hi && s < NSLOTS; s++) k->owner[s] = (int16_t)idx;
  }
  for (int i = 0; i < k->nnodes; i++)
    if (!node_usable(k->nodes[i])) {
      move_queued(k, i);
      if (k->nodes[i]->has_sub) fail_queued_subs(k, i);
    }
  if (k->cl->sharded_pubsub) rlock__pubsub_resubscribe(&k->cl->ps);
  if (!all_usable) schedule_refresh(k, REFRESH_MIN_MS); /* a failover may be under way: look again */
}

static void slots_done(req_t *r, int status, rlock_reply_t *reply) {
  cluster_t *k = r->ctx;
  k->refreshing = false;
  if (status == 0 && reply && reply->type == RLOCK_REPLY_ARRAY && reply->elements > 0) apply_slots(k, k->asked, reply);
  else if (status != RLOCK_ECLOSED) schedule_refresh(k, REFRESH_MIN_MS);
  rlock_reply_free(reply);
}

/* The connection to ask: a ready master of the table, else the control connection. */
static conn_t *control(cluster_t *k) {
  for (int i = 0; i < k->nnodes; i++)
    if (node_usable(k->nodes[i])) return &k->nodes[i]->cmd;
  return &k->cl->cmd;
}

static void refresh_now(cluster_t *k) {
  if (k->refreshing || k->cl->cmd.state == CS_CLOSED) return;
  const char *argv[2] = {"CLUSTER", "SLOTS"};
  req_t *r = rlock__req_new(2, argv, NULL, k->cl->opt.command_timeout_ms, slots_done, k);
  if (!r) {
    schedule_refresh(k, REFRESH_MIN_MS);
    return;
  }
  k->refreshing = true;
  k->last_refresh = rlock_now_ms();
  k->asked = control(k);
  rlock__conn_send(k->asked, r);
}

static void refresh_cb(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  refresh_now(arg);
}

/* A refresh at least delay_ms from now and REFRESH_MIN_MS after the last one. */
static void schedule_refresh(cluster_t *k, int64_t delay_ms) {
  if (!k || !k->refresh || evtimer_pending(k->refresh, NULL)) return;
  int64_t earliest = k->last_refresh + REFRESH_MIN_MS - rlock_now_ms();
  if (delay_ms < earliest) delay_ms = earliest;
  struct timeval tv;
  rlock__tv_from_ms(&tv, delay_ms > 0 ? delay_ms : 0);
  evtimer_add(k->refresh, &tv);
}

/* ------------------------------------------------------------ routing */

/* Node n's subscriber connection, opened on first use; NULL when out of memory. */
static conn_t *node_sub(cluster_t *k, cnode_t *n) {
  if (!n->has_sub) {
    if (rlock__conn_init(&n->sub, &k->cl->net, CONN_SUB) || rlock__conn_set_node(&n->sub, n->host, n->port)) {
      rlock__conn_close(&n->sub);
      return NULL;
    }
    n->has_sub = true;
    rlock__pubsub_attach(&k->cl->ps, &n->sub);
    rlock__conn_start(&n->sub);
  }
  return &n->sub;
}

/* Node n's user connection, opened on first use (the handshake of the
 * client's user connection: no scripts); NULL when out of memory or the
 * user connections are closed (the client is closing). */
static conn_t *node_user(cluster_t *k, cnode_t *n) {
  if (!n->has_user) {
    if (rlock__conn_init(&n->user, &k->cl->net, CONN_USER) || rlock__conn_set_node(&n->user, n->host, n->port) ||
        rlock__usercmd_attach(&k->cl->uc, &n->user)) {
      rlock__conn_close(&n->user);
      return NULL;
    }
    n->has_user = true;
    rlock__conn_start(&n->user);
  }
  return &n->user;
}

static conn_t *route(client_t *cl, const req_t *r) {
  cluster_t *k = state(cl);
  bool known = r->slot >= 0 && r->slot < NSLOTS && k->owner[r->slot] >= 0;
  if (r->conn == CONN_SUB) { /* classic: any node hears every PUBLISH; sharded: the slot's master */
    conn_t *c = cl->sharded_pubsub && known ? node_sub(k, k->nodes[k->owner[r->slot]]) : NULL;
    return c ? c : &cl->ps.conn;
  }
  if (r->conn == CONN_USER) { /* by the slot of its first key; keyless or not known: the first seed */
    conn_t *c = known ? node_user(k, k->nodes[k->owner[r->slot]]) : NULL;
    return c ? c : &cl->uc.conn;
  }
  return known ? &k->nodes[k->owner[r->slot]]->cmd : &cl->cmd;
}

/* "MOVED 3999 127.0.0.1:6381" / "ASK ...": the slot and the node's index. */
static int parse_redirect(cluster_t *k, const conn_t *c, const rlock_reply_t *err, int *slot) {
  const char *p = strchr(err->str, ' ');
  if (!p) return -1;
  char *end;
  long s = strtol(p + 1, &end, 10);
  if (end == p + 1 || *end != ' ' || s < 0 || s >= NSLOTS) return -1;
  const char *addr = end + 1, *colon = strrchr(addr, ':');
  if (!colon) return -1;
  long port = strtol(colon + 1, &end, 10);
  if (end == colon + 1 || port < 1 || port > 65535) return -1;
  const char *host = addr;
  size_t hlen = (size_t)(colon - addr);
  peer_host(c, &host, &hlen);
  *slot = (int)s;
  return node_index(k, host, hlen, (int)port);
}

static void delayed_cb(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  delayed_t *d = arg;
  cluster_t *k = d->k;
  if (d->prev) d->prev->next = d->next;
  else k->delayed = d->next;
  if (d->next) d->next->prev = d->prev;
  req_t *r = d->r;
  event_free(d->ev);
  free(d);
  rlock__conn_send(route(k->cl, r), r);
  rlock__client_flush(k->cl);
}

/* r did not run (TRYAGAIN / CLUSTERDOWN) and its deadline comes before the
 * next backoff ends: it completes as "never written" (RLOCK_ECONNECT), which
 * the lock machinery answers as for a connection not up yet (an acquire is
 * queued again until its wait bound; nothing to undo for it). */
static bool not_run(req_t *r, const rlock_reply_t *err) {
  char msg[160];
  snprintf(msg, sizeof msg, "Redis Cluster answered %.100s until the command timeout", err->str);
  rlock__set_msg(msg);
  r->completed = true;
  if (r->done) r->done(r, RLOCK_ECONNECT, NULL);
  rlock__req_free(r);
  return true;
}

/* TRYAGAIN / CLUSTERDOWN: r again after a backoff, if that fits its deadline. */
static bool send_later(cluster_t *k, req_t *r, const rlock_reply_t *err) {
  int64_t ms = TRYAGAIN_MIN_MS << (TRYAGAINS(r) < 6 ? TRYAGAINS(r) : 6);
  if (ms > TRYAGAIN_MAX_MS) ms = TRYAGAIN_MAX_MS;
  if (rlock_now_ms() + ms >= r->deadline) return not_run(r, err);
  delayed_t *d = calloc(1, sizeof *d);
  if (!d || !(d->ev = evtimer_new(k->cl->base, delayed_cb, d))) {
    free(d);
    return not_run(r, err);
  }
  d->k = k, d->r = r;
  d->next = k->delayed;
  if (k->delayed) k->delayed->prev = d;
  k->delayed = d;
  if (TRYAGAINS(r) < UINT8_MAX) TRYAGAINS(r)++;
  REDIRECTS(r) = 0; /* the way back (MOVED/ASK) may be taken again */
  struct timeval tv;
  rlock__tv_from_ms(&tv, ms);
  evtimer_add(d->ev, &tv);
  return true;
}

/* A user command answered MOVED / ASK: to the target's user connection
 * (ASKING first for ASK), unless it is part of a transaction. */
static bool user_redirect(cluster_t *k, conn_t *c, req_t *r, const rlock_reply_t *err) {
  bool moved = rlock__reply_is_error(err, "MOVED");
  if (!moved && !rlock__reply_is_error(err, "ASK")) return false;
  int slot, idx = parse_redirect(k, c, err, &slot);
  if (idx < 0) return false;
  if (moved) {
    k->owner[slot] = (int16_t)idx;
    schedule_refresh(k, 0);
  }
  conn_t *to = r->pinned || REDIRECTS(r) >= MAX_REDIRECTS ? NULL : node_user(k, k->nodes[idx]);
  if (!to) return false;
  REDIRECTS(r)++;
  if (!moved) {
    const char *argv[1] = {"ASKING"};
    req_t *a = rlock__req_new(1, argv, NULL, k->cl->opt.command_timeout_ms, NULL, (void *)asking_marker);
    if (!a) return false;
    a->conn = CONN_USER;
    rlock__conn_send(to, a);
  }
  rlock__conn_send(to, r);
  return true;
}

static bool on_error_reply(client_t *cl, conn_t *c, req_t *r, const rlock_reply_t *err) {
  cluster_t *k = state(cl);
  if (!err->str || r->ctx == asking_marker) return false;
  if (r->conn == CONN_SUB) { /* SSUBSCRIBE on a node that lost the slot: learn, fail (pubsub re-sends) */
    int slot, idx = rlock__reply_is_error(err, "MOVED") ? parse_redirect(k, c, err, &slot) : -1;
    if (idx >= 0) k->owner[slot] = (int16_t)idx;
    if (idx >= 0) schedule_refresh(k, 0);
    return false;
  }
  if (r->conn == CONN_USER) return user_redirect(k, c, r, err);
  if (r->conn != CONN_CMD) return false;
  if (rlock__reply_is_error(err, "TRYAGAIN") && r->splittable) { /* its keys are on two nodes: one by one */
    r->split = true;
    return not_run(r, err);
  }
  if (rlock__reply_is_error(err, "TRYAGAIN") || rlock__reply_is_error(err, "CLUSTERDOWN")) {
    if (rlock__reply_is_error(err, "CLUSTERDOWN")) schedule_refresh(k, 0);
    return send_later(k, r, err);
  }
  bool moved = rlock__reply_is_error(err, "MOVED");
  if ((!moved && !rlock__reply_is_error(err, "ASK")) || REDIRECTS(r) >= MAX_REDIRECTS) return false;
  int slot, idx = parse_redirect(k, c, err, &slot);
  if (idx < 0) return false;
  REDIRECTS(r)++;
  conn_t *to = &k->nodes[idx]->cmd;
  rlock__client_sync_redirected(cl, r); /* sent without WAIT: the new node may have replicas */
  if (moved) {
    k->owner[slot] = (int16_t)idx;
    schedule_refresh(k, 0);
  } else { /* ASKING, then the request, on the same connection: the pair stays in order */
    const char *argv[1] = {"ASKING"};
    req_t *a = rlock__req_new(1, argv, NULL, cl->opt.command_timeout_ms, NULL, (void *)asking_marker);
    if (!a) return false;
    a->conn = CONN_CMD;
    rlock__conn_send(to, a);
  }
  rlock__conn_send(to, r);
  return true;
}

/* ------------------------------------------------------------ pub/sub mode */

/* PUBSUB SHARDNUMSUB answered: sharded pub/sub (Redis 7) if it is a command
 * there, as Redisson's AUTO mode decides. The client's start waits for it,
 * so every lock of the client publishes and subscribes one way. */
static int send_probe(cluster_t *k);

static void probe_done(req_t *r, int status, rlock_reply_t *reply) {
  cluster_t *k = r->ctx;
  bool sharded = status == 0 && reply && reply->type == RLOCK_REPLY_ARRAY;
  rlock_reply_free(reply);
  if (status == RLOCK_ECLOSED) return;
  /* no answer (not connected yet: the seeds are still being tried): ask
   * again; out of memory: classic pub/sub */
  if (status != 0 && !send_probe(k)) return;
  k->cl->sharded_pubsub = sharded;
  k->probed = true;
  if (k->cmd_on_ready && k->cl->cmd.state == CS_READY) k->cmd_on_ready(&k->cl->cmd);
}

/* The control connection is ready: the client hears of it once the probe
 * has answered (the first time), at once afterwards (reconnects). */
static void control_ready(conn_t *c) {
  cluster_t *k = state(rlock__client_of(c));
  if (k->probed && k->cmd_on_ready) k->cmd_on_ready(c);
}

static int send_probe(cluster_t *k) {
  const char *argv[2] = {"PUBSUB", "SHARDNUMSUB"};
  req_t *r = rlock__req_new(2, argv, NULL, k->cl->opt.connect_timeout_ms, probe_done, k);
  if (!r) return RLOCK_ENOMEM;
  rlock__conn_send(&k->cl->cmd, r);
  return 0;
}

/* ------------------------------------------------------------ seeds */

/* The control connection (the client's command connection) could not reach
 * its node: the next seed of the URL, then any master of the table. The
 * client hears of the failure (rlock_client_new's result) only when every
 * seed failed once. */
static void control_error(conn_t *c, int err, const char *msg) {
  cluster_t *k = state(rlock__client_of(c));
  if (k->next_seed < k->nseeds) {
    const char *s = k->seeds[k->next_seed++], *colon = strrchr(s, ':');
    char *host = rlock__strndup(s, (size_t)(colon - s));
    if (host && host[0] == '[') { /* [v6]:port */
      memmove(host, host + 1, strlen(host));
      host[strlen(host) - 1] = 0;
    }
    if (host && !rlock__conn_set_node(c, host, atoi(colon + 1))) {
      free(host);
      if (!c->ever_ready) return; /* the next seed decides */
    } else {
      free(host);
    }
  } else if (c->ever_ready) {
    for (int i = 0; i < k->nnodes; i++)
      if (node_usable(k->nodes[i])) {
        rlock__conn_set_node(c, k->nodes[i]->host, k->nodes[i]->port);
        break;
      }
  }
  if (k->cmd_on_error) k->cmd_on_error(c, err, msg);
}

/* The subscriber connection could not reach its node: another master. */
static void sub_error(conn_t *c, int err, const char *msg) {
  (void)err, (void)msg;
  cluster_t *k = state(rlock__client_of(c));
  for (int i = 0; i < k->nnodes; i++)
    if (node_usable(k->nodes[i])) {
      rlock__conn_set_node(c, k->nodes[i]->host, k->nodes[i]->port);
      return;
    }
}

static int split_seeds(cluster_t *k, const char *list) {
  for (const char *p = list; p && *p;) {
    const char *e = strchr(p, ',');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    char **s = realloc(k->seeds, (size_t)(k->nseeds + 1) * sizeof *s);
    if (!s) return RLOCK_ENOMEM;
    k->seeds = s;
    if (!(k->seeds[k->nseeds] = rlock__strndup(p, n))) return RLOCK_ENOMEM;
    k->nseeds++;
    p = e ? e + 1 : NULL;
  }
  return 0;
}

/* ------------------------------------------------------------ lifecycle */

static void cluster_close(client_t *cl);

static int cluster_init(client_t *cl) {
  cluster_t *k = calloc(1, sizeof *k);
  if (!k) return RLOCK_ENOMEM;
  cl->topo_state = k;
  k->cl = cl;
  memset(k->owner, 0xff, sizeof k->owner); /* -1: not known */
  k->refresh = evtimer_new(cl->base, refresh_cb, k);
  if (!k->refresh || split_seeds(k, cl->url.seeds)) {
    cluster_close(cl);
    return RLOCK_ENOMEM;
  }
  k->cmd_on_error = cl->cmd.on_error;
  k->cmd_on_ready = cl->cmd.on_ready;
  cl->cmd.on_error = control_error;
  cl->cmd.on_ready = control_ready;
  cl->ps.conn.on_error = sub_error;
  if (send_probe(k)) { /* queued on the control connection: the first things it sends */
    cluster_close(cl);
    return RLOCK_ENOMEM;
  }
  refresh_now(k);
  return 0;
}

static void cluster_flush(client_t *cl) {
  cluster_t *k = state(cl);
  for (int i = 0; k && i < k->nnodes; i++) {
    rlock__conn_flush(&k->nodes[i]->cmd);
    if (k->nodes[i]->has_sub) rlock__conn_flush(&k->nodes[i]->sub);
    if (k->nodes[i]->has_user) rlock__conn_flush(&k->nodes[i]->user);
  }
}

static void cluster_close(client_t *cl) {
  cluster_t *k = state(cl);
  if (!k) return;
  for (int i = 0; i < k->nnodes; i++) {
    rlock__conn_close(&k->nodes[i]->cmd);
    if (k->nodes[i]->has_sub) rlock__conn_close(&k->nodes[i]->sub);
    if (k->nodes[i]->has_user) rlock__conn_close(&k->nodes[i]->user);
  }
  rlock__usercmd_detach_all(&cl->uc); /* freed below */
  rlock__set_msg("client closed");
  while (k->delayed) {
    delayed_t *d = k->delayed;
    k->delayed = d->next;
    event_free(d->ev);
    req_t *r = d->r;
    free(d);
    r->completed = true;
    if (r->done) r->done(r, RLOCK_ECLOSED, NULL);
    rlock__req_free(r);
  }
  for (int i = 0; i < k->nnodes; i++) {
    free(k->nodes[i]->host);
    free(k->nodes[i]);
  }
  for (int i = 0; i < k->nseeds; i++) free(k->seeds[i]);
  free(k->seeds);
  free(k->nodes);
  if (k->refresh) event_free(k->refresh);
  free(k);
  cl->topo_state = NULL;
}

const topology_ops_t rlock__topology_cluster = {
    .name = "cluster",
    .slots_matter = true,
    .route = route,
    .on_error_reply = on_error_reply,
    .init = cluster_init,
    .flush = cluster_flush,
    .close = cluster_close,
};
