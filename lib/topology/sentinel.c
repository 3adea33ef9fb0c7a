/* topology/sentinel.c -- a master found through Redis Sentinel
 * (redis+sentinel://h1:p1,h2:p2/MASTER), after the Sentinel client spec:
 *
 *   ask     before every connection attempt of the command, subscriber and
 *           user connections (the before_connect hook), ask the sentinels in
 *           order "SENTINEL get-master-addr-by-name MASTER" together with
 *           "SENTINEL MASTER MASTER" (its config-epoch and num-slaves); the
 *           one that answers moves to the front of the list. A sentinel that
 *           is down or does not know the master is skipped (the next one is
 *           tried at once; a whole round without an answer backs off).
 *   never back  the client's master only moves forward: an answer is
 *           followed if it names a higher config epoch than the master in
 *           use (a failover: Sentinel bumps the epoch, and only a majority of
 *           sentinels can). An answer with a lower epoch, or another address
 *           with the same epoch (a stale sentinel, on the minority side of a
 *           partition), is a dispute: the next sentinel is asked, and such an
 *           address is followed only once a majority of the URL's sentinels
 *           name it with that epoch (sentinels re-pointed by hand with
 *           SENTINEL MONITOR restart at epoch 0). choose() asserts it.
 *   verify  every connection to the master starts with ROLE in its handshake
 *           (the handshake entry; conn.c and fast.c send it): a node that is not a master fails the attempt; the
 *           refusal counts against the sentinel that named it: the next
 *           sentinel is asked, and every one is asked before the refused
 *           node is tried again ("wait and start again").
 *   follow  a connection subscribed to +switch-master on a sentinel: the
 *           event carries no epoch, so it starts a chase: sentinels are asked
 *           in turn until one names a higher epoch (followed at once: every
 *           connection pointed at the new master, those up reset; the
 *           engine's reconnect path does the rest: lock requests re-sent
 *           with their latches, channels resubscribed and every waiter
 *           woken, a renewal round to find lost holds) or all were asked.
 *   poll    every POLL_MS (and whenever the subscription comes back) the
 *           master is asked for again, each time of the next sentinel, so a
 *           missed +switch-master never strands the client on a demoted
 *           node and no one sentinel (a stale one) holds the client back.
 *   replicas  a master for which Sentinel lists replicas (num-slaves) marks
 *           the command connection as having had replicas: the replica-sync
 *           check never drops to "no WAIT" for it (client.c).
 *   refused a READONLY reply (a node demoted under an open connection) resets
 *           that connection and sends the refused command again once it is
 *           back on the master (on_error_reply).
 *
 * The sentinels are asked over conn.c's non-blocking connections (TLS, PING
 * liveness and backoff as every connection; a connect bound of
 * SENTINEL_CONNECT_MS, so a silent sentinel costs little): the I/O thread
 * never blocks on a sentinel. One server's semantics otherwise:
 * requests go to the master's connections, slots do not matter. */
#include "client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POLL_MS 1000
int64_t rlock__sentinel_poll_ms = POLL_MS; /* tests set it (topology.h) */
#define SENTINEL_CONNECT_MS 1000           /* a silent sentinel costs at most this (or connect_timeout_ms if less) */
#define NDATA 3                            /* the client's command, subscriber and user connections */

/* One sentinel's answer in a survey (see decide()). */
typedef struct vote {
  bool in; /* it answered in this survey */
  char host[256];
  int port;
  int64_t epoch;
} vote_t;

typedef struct sentinel {
  client_t *cl;
  conn_t q;                   /* queries: SENTINEL get-master-addr-by-name + SENTINEL MASTER */
  conn_t sub;                 /* SUBSCRIBE +switch-master */
  int *order;                 /* the sentinels, the last one that answered first */
  int qi;                     /* the position (in order) q talks to */
  int sk;                     /* the sentinel (URL index) sub talks to */
  int failed;                 /* sentinels that failed in a row (a whole round at start: report) */
  int64_t round_ms, again_ms; /* backoff between rounds (q) and between questions */
  bool q_started, sub_started, asking, closed;
  int q_to;      /* kick_cb moves q to this sentinel (URL index; -1: stay) */
  int poll_k;    /* the sentinel (URL index) the last poll asked */
  bool ask_next; /* kick_cb asks once q has moved */
  char *host;    /* the master, once known */
  int port;
  int64_t epoch; /* its config epoch (SENTINEL MASTER) */
  /* A survey: the sentinels asked in turn after a dispute (an answer that
   * is older than the master in use), a +switch-master or a ROLE refusal. */
  vote_t *votes; /* by URL index */
  bool survey;   /* on */
  bool chase;    /* look for a newer master: a confirmation does not end it */
  int confirmed; /* sentinels that named the master in use in this survey */
  struct {
    bool waiting; /* its connection attempt waits for an answer */
    bool fresh;   /* its node was just set: the next attempt connects at once */
    bool reset;   /* up on a master that is no longer the master: reset it */
    bool start;   /* start it (out of the callback that learnt the node) */
  } d[NDATA];
  req_t *held, *held_tail; /* refused with READONLY: sent again once the connection is reset */
  struct event *poll, *kick, *again;
} sentinel_t;

static conn_t *data_conn(client_t *cl, int i) { return i == 0 ? &cl->cmd : i == 1 ? &cl->ps.conn : &cl->uc.conn; }

static int data_index(client_t *cl, const conn_t *c) {
  for (int i = 0; i < NDATA; i++)
    if (data_conn(cl, i) == c) return i;
  return -1;
}

static const url_node_t *node_at(const sentinel_t *s, int i) { return &s->cl->url.sentinels[s->order[i]]; }
static const url_node_t *sentinel_k(const sentinel_t *s, int k) { return &s->cl->url.sentinels[k]; }

/* The position in order of the sentinel with URL index k. */
static int pos_of(const sentinel_t *s, int k) {
  for (int i = 0; i < s->cl->url.nsentinels; i++)
    if (s->order[i] == k) return i;
  return 0;
}

static void kick(sentinel_t *s) {
  if (!s->closed) event_active(s->kick, EV_TIMEOUT, 0);
}

static bool anyone_waiting(const sentinel_t *s) {
  for (int i = 0; i < NDATA; i++)
    if (s->d[i].waiting) return true;
  return false;
}

/* ------------------------------------------------------------ the master */

static void ask(sentinel_t *s);

/* The master is host:port: connections waiting for it start; if it moved,
 * every connection is pointed at it and the ones that are up are reset.
 * Called by choose() (a new master) and for the master in use (the
 * connections waiting for it start). */
static void use_master(sentinel_t *s, const char *host, int port) {
  client_t *cl = s->cl;
  bool moved = !s->host || strcmp(s->host, host) || s->port != port;
  if (moved) {
    char *h = strdup(host);
    if (!h) return; /* out of memory: the next poll tries again */
    free(s->host);
    s->host = h;
    s->port = port;
  }
  for (int i = 0; i < NDATA; i++) {
    conn_t *c = data_conn(cl, i);
    if (c->state == CS_CLOSED || (!moved && !s->d[i].waiting)) continue;
    if (rlock__conn_set_node(c, host, port)) continue;
    s->d[i].fresh = true;
    if (s->d[i].waiting) {
      s->d[i].waiting = false;
      s->d[i].start = true;
    } else if (c->state != CS_IDLE) {
      s->d[i].reset = true;
    } else if (evtimer_pending(c->retry, NULL)) {
      s->d[i].start = true; /* its backoff may be long: the new master is worth trying now */
    }
  }
  kick(s);
}

static bool is_master(const sentinel_t *s, const char *host, int port) {
  return s->host && !strcmp(s->host, host) && s->port == port;
}

/* The master from now on is host:port of config epoch `epoch`; `votes`
 * sentinels of this survey named it. Never backwards: the first master, a
 * higher epoch, or what a majority of the URL's sentinels name. */
static void choose(sentinel_t *s, const char *host, int port, int64_t epoch, int votes) {
  RLOCK__ASSERT(!s->host || (s->epoch >= 0 && epoch > s->epoch) || (epoch == s->epoch && is_master(s, host, port)) ||
                2 * votes > s->cl->url.nsentinels);
  s->epoch = epoch;
  use_master(s, host, port);
}

/* Sentinel lists replicas for the master: the command connection had
 * replicas, whatever the master reports online now (client.c: the
 * replica-sync check never drops to "no WAIT" for it). */
static void note_replicas(sentinel_t *s, long long listed) {
  conn_t *c = &s->cl->cmd;
  if (listed <= 0 || c->had_replicas) return;
  c->had_replicas = true;
  if (c->state == CS_READY) rlock__fast_cmd_ready(s->cl); /* the fast path now needs a WAIT */
}

static void survey_end(sentinel_t *s) {
  s->survey = s->chase = false;
  s->confirmed = 0;
  for (int i = 0; i < s->cl->url.nsentinels; i++) s->votes[i].in = false;
}

static void survey_start(sentinel_t *s, bool chase) {
  if (!s->survey) {
    survey_end(s);
    s->survey = true;
  }
  s->chase |= chase;
}

/* Ask the sentinel after q's (or sentinel k if k >= 0) next: kick_cb moves q. */
static void ask_other(sentinel_t *s, int k) {
  s->q_to = k >= 0 ? k : s->order[(s->qi + 1) % s->cl->url.nsentinels];
  s->ask_next = true;
  kick(s);
}

/* Every sentinel was asked in this survey and none named a newer master. A
 * chase that some sentinel confirmed the master in use for starts the
 * connections waiting for it again; else they wait for the next question. */
static void again_later(sentinel_t *s);
static void survey_undecided(sentinel_t *s) {
  bool confirmed = s->confirmed > 0;
  survey_end(s);
  if (confirmed) use_master(s, s->host, s->port);
  else if (anyone_waiting(s)) again_later(s);
}

/* The next sentinel of the survey, or its end once all answered. */
static void survey_next(sentinel_t *s) {
  int n = s->cl->url.nsentinels, in = 0;
  for (int i = 0; i < n; i++) in += s->votes[i].in;
  if (in >= n) survey_undecided(s);
  else ask_other(s, -1);
}

/* "+switch-master NAME OLDIP OLDPORT NEWIP NEWPORT": the event has no epoch,
 * so it is not followed as it is: a chase asks the sentinels in turn, the
 * one that sent it first, until one names a master of a higher epoch. */
static void on_switch(sentinel_t *s, const char *msg) {
  char name[256], oldip[64], newip[64];
  int oldport, newport;
  if (sscanf(msg, "%255s %63s %d %63s %d", name, oldip, &oldport, newip, &newport) != 5) return;
  if (strcmp(name, s->cl->url.master) || newport < 1 || newport > 65535 || is_master(s, newip, newport)) return;
  survey_start(s, true);
  if (s->order[s->qi] != s->sk) ask_other(s, s->sk);
  else ask(s);
}

/* ------------------------------------------------------------ asking */

static void again_later(sentinel_t *s) {
  if (s->closed || evtimer_pending(s->again, NULL)) return;
  struct timeval tv;
  rlock__tv_from_ms(&tv, s->again_ms);
  evtimer_add(s->again, &tv);
  s->again_ms = s->again_ms * 2 > s->cl->opt.reconnect_max_ms ? s->cl->opt.reconnect_max_ms : s->again_ms * 2;
}

/* A sentinel failed (down, or it does not know the master). While the
 * client is starting, a whole round of failures is its answer. */
static void sentinel_failed(sentinel_t *s, int err, const char *msg) {
  client_t *cl = s->cl;
  rlock__client_start_note(cl, msg);
  if (++s->failed < cl->url.nsentinels || cl->cmd.ever_ready || !cl->cmd.on_error) return;
  char m[640];
  snprintf(m, sizeof m, "no Sentinel answered for master '%.100s' (%d tried; last: %.480s)", cl->url.master,
           cl->url.nsentinels, msg);
  cl->cmd.on_error(&cl->cmd, err, m);
}

/* The answer of the two questions: [ip, port] (get-master-addr-by-name) and
 * SENTINEL MASTER's field/value list (config-epoch, num-slaves). A sentinel
 * that refuses SENTINEL MASTER gives epoch -1: no answer is newer than
 * another then, and a move needs a majority of the sentinels. */
static bool parse_answer(const rlock_reply_t *all, const char **host, int *port, int64_t *epoch, long long *listed) {
  if (!all || all->type != RLOCK_REPLY_ARRAY || all->elements != 2) return false;
  const rlock_reply_t *r = all->element[0], *m = all->element[1];
  if (!r || r->type != RLOCK_REPLY_ARRAY || r->elements != 2 || !r->element[0]->str || !r->element[1]->str)
    return false;
  char *end;
  long p = strtol(r->element[1]->str, &end, 10);
  if (*end || p < 1 || p > 65535 || strlen(r->element[0]->str) >= sizeof((vote_t *)0)->host) return false;
  *listed = 0;
  if (m && m->type == RLOCK_REPLY_ERROR) { /* SENTINEL MASTER refused (an ACL): the epoch is unknown */
    *epoch = -1;
    *host = r->element[0]->str;
    *port = (int)p;
    return true;
  }
  if (!m || m->type != RLOCK_REPLY_ARRAY) return false;
  bool have_epoch = false;
  for (size_t i = 0; i + 1 < m->elements; i += 2) {
    const char *k = m->element[i]->str, *v = m->element[i + 1]->str;
    if (!k || !v) continue;
    if (!strcmp(k, "config-epoch")) {
      long long e = strtoll(v, &end, 10);
      if (*end || e < 0) return false;
      *epoch = e;
      have_epoch = true;
    } else if (!strcmp(k, "num-slaves")) {
      *listed = strtoll(v, &end, 10);
    }
  }
  if (!have_epoch) return false;
  *host = r->element[0]->str;
  *port = (int)p;
  return true;
}

/* The sentinel at position i answered: it goes first from now on. */
static void to_front(sentinel_t *s, int i) {
  int n = s->order[i];
  memmove(s->order + 1, s->order, (size_t)i * sizeof *s->order);
  s->order[0] = n;
  s->qi = 0;
}

static void start_sub(sentinel_t *s) {
  if (s->sub_started) return;
  s->sub_started = true;
  s->sk = s->order[0];
  if (rlock__conn_set_node(&s->sub, sentinel_k(s, s->sk)->host, sentinel_k(s, s->sk)->port) == 0)
    rlock__conn_start(&s->sub);
}

/* Sentinel k (at position qi) named host:port of config epoch `epoch`.
 *   a higher epoch than the master in use (or the first answer): followed;
 *   the master in use, same epoch: confirmed (the connections waiting for
 *     it start), unless a chase looks for a newer one: the next is asked;
 *   anything else (an older epoch, or another address of the same epoch): a
 *     dispute; the next sentinel is asked, and the address is followed only
 *     once a majority of the URL's sentinels name it with that epoch.
 * A survey ends when a sentinel asked in it answers again. */
static void decide(sentinel_t *s, int k, const char *host, int port, int64_t epoch, long long listed) {
  int n = s->cl->url.nsentinels;
  /* an unknown epoch (-1) is not older than a known one: after it only
   * the same address confirms, and a move needs a majority */
  if (!s->host || (s->epoch >= 0 && epoch > s->epoch)) {
    survey_end(s);
    to_front(s, s->qi);
    note_replicas(s, listed);
    choose(s, host, port, epoch, 1);
    return;
  }
  if (s->survey && s->votes[k].in) { /* around once */
    survey_undecided(s);
    return;
  }
  vote_t *v = &s->votes[k];
  if ((epoch == s->epoch || s->epoch < 0) && is_master(s, host, port)) {
    note_replicas(s, listed);
    if (s->survey && s->chase) {
      v->in = true, v->port = 0; /* a confirmation, not a vote for another master */
      s->confirmed++;
      survey_next(s);
      return;
    }
    survey_end(s);
    to_front(s, s->qi);
    use_master(s, host, port);
    return;
  }
  survey_start(s, false);
  v->in = true;
  snprintf(v->host, sizeof v->host, "%s", host);
  v->port = port;
  v->epoch = epoch;
  int agree = 0;
  for (int i = 0; i < n; i++) {
    const vote_t *o = &s->votes[i];
    agree += o->in && o->port == port && o->epoch == epoch && !strcmp(o->host, host);
  }
  if (2 * agree > n) { /* the deployment was re-pointed (SENTINEL MONITOR starts again at epoch 0) */
    survey_end(s);
    to_front(s, s->qi);
    note_replicas(s, listed);
    choose(s, host, port, epoch, agree);
    return;
  }
  survey_next(s);
}

static void answered(req_t *r, int status, rlock_reply_t *reply) {
  sentinel_t *s = r->ctx;
  const char *host;
  int port;
  int64_t epoch = 0;
  long long listed = 0;
  s->asking = false;
  if (s->closed || status == RLOCK_ECLOSED) {
    rlock_reply_free(reply);
    return;
  }
  if (status == 0 && parse_answer(reply, &host, &port, &epoch, &listed)) {
    s->failed = 0;
    s->again_ms = s->cl->opt.reconnect_min_ms;
    decide(s, s->order[s->qi], host, port, epoch, listed);
    start_sub(s);
  } else {
    char msg[480];
    const rlock_reply_t *why = reply && reply->type == RLOCK_REPLY_ARRAY && reply->elements == 2 ? reply->element[1]
                                                                                                 : reply;
    /* an error reply of either question is the reason (an ACL refusal of the first) */
    for (size_t i = 0; reply && reply->type == RLOCK_REPLY_ARRAY && i < reply->elements; i++)
      if (reply->element[i] && reply->element[i]->type == RLOCK_REPLY_ERROR) {
        why = reply->element[i];
        break;
      }
    if (status == 0) /* the reason whole: a cut one loses the part that says what is missing */
      snprintf(msg, sizeof msg, "Sentinel %.100s:%d does not know master '%.100s'%s%.200s", node_at(s, s->qi)->host,
               node_at(s, s->qi)->port, s->cl->url.master, why && why->str ? ": " : "",
               why && why->str ? why->str : "");
    else snprintf(msg, sizeof msg, "%s", rlock__msg());
    if (status == 0 || status == RLOCK_ETIMEDOUT) { /* ask the next sentinel (ECONNLOST/ECONNECT: q moves on itself) */
      sentinel_failed(s, status ? status : RLOCK_ECONNECT, msg);
      vote_t *v = &s->votes[s->order[s->qi]];
      if (s->survey && v->in) {
        survey_undecided(s); /* around once */
      } else {
        if (s->survey) v->in = true, v->port = -1; /* asked, no vote */
        ask_other(s, -1);
        s->ask_next = s->survey; /* a survey goes on at once; else the poll or again_later asks */
      }
    }
    if (anyone_waiting(s)) again_later(s);
  }
  rlock_reply_free(reply);
}

/* One question at a time; connections waiting for the master get the
 * answer. Both questions go in one request: a sentinel answers them one
 * after the other, so the address and its epoch are of the same moment. */
static void ask(sentinel_t *s) {
  if (s->asking || s->closed) return;
  const char *argv[3] = {"SENTINEL", "get-master-addr-by-name", s->cl->url.master};
  const char *argm[3] = {"SENTINEL", "MASTER", s->cl->url.master};
  req_t *r = rlock__req_new(3, argv, NULL, s->cl->opt.command_timeout_ms, answered, s);
  if (r && rlock__req_append(r, 3, argm, NULL)) {
    rlock__req_free(r);
    r = NULL;
  }
  if (!r) {
    again_later(s);
    return;
  }
  s->asking = true;
  rlock__conn_send(&s->q, r);
  rlock__conn_flush(&s->q);
  if (!s->q_started) {
    s->q_started = true;
    rlock__conn_start(&s->q);
  }
}

/* ------------------------------------------------------------ the sentinel connections */

static sentinel_t *of_q(conn_t *c) { return (sentinel_t *)((char *)c - offsetof(sentinel_t, q)); }
static sentinel_t *of_sub(conn_t *c) { return (sentinel_t *)((char *)c - offsetof(sentinel_t, sub)); }

/* q could not reach its sentinel: the next one is tried at once, and after
 * a whole round the backoff grows. */
static void q_error(conn_t *c, int err, const char *msg) {
  sentinel_t *s = of_q(c);
  int n = s->cl->url.nsentinels;
  s->qi = (s->qi + 1) % n;
  rlock__conn_set_node(c, node_at(s, s->qi)->host, node_at(s, s->qi)->port);
  if (s->qi) {
    c->backoff_ms = 0;
  } else {
    c->backoff_ms = s->round_ms;
    s->round_ms = s->round_ms * 2 > s->cl->opt.reconnect_max_ms ? s->cl->opt.reconnect_max_ms : s->round_ms * 2;
  }
  sentinel_failed(s, err, msg);
}

static void q_ready(conn_t *c) { of_q(c)->round_ms = rlock__client_of(c)->opt.reconnect_min_ms; }

static void sub_error(conn_t *c, int err, const char *msg) {
  (void)err, (void)msg;
  sentinel_t *s = of_sub(c);
  s->sk = (s->sk + 1) % s->cl->url.nsentinels;
  rlock__conn_set_node(c, sentinel_k(s, s->sk)->host, sentinel_k(s, s->sk)->port);
}

static void subscribed(req_t *r, int status, rlock_reply_t *reply) {
  (void)r, (void)status;
  rlock_reply_free(reply); /* refused or lost: the poll still follows the master */
}

/* (Re)subscribed: events may have been missed meanwhile, so ask as well. */
static void sub_ready(conn_t *c) {
  sentinel_t *s = of_sub(c);
  const char *argv[2] = {"SUBSCRIBE", "+switch-master"};
  req_t *r = rlock__req_new(2, argv, NULL, s->cl->opt.command_timeout_ms, subscribed, s);
  if (r) rlock__conn_send(c, r);
  rlock__conn_flush(c);
  ask(s);
}

static void sub_push(conn_t *c, rlock_reply_t *msg) {
  sentinel_t *s = of_sub(c);
  if (msg->elements == 3 && msg->element[1]->str && !strcmp(msg->element[1]->str, "+switch-master") &&
      msg->element[2]->str)
    on_switch(s, msg->element[2]->str);
  rlock_reply_free(msg);
}

/* ------------------------------------------------------------ events */

/* What the callbacks decided, done outside them (rlock__conn_reset must not
 * run inside a request's completion). */
static void kick_cb(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  sentinel_t *s = arg;
  char msg[200];
  if (s->q_to >= 0) { /* q moves to another sentinel; a question in flight there ends ECONNLOST */
    int i = pos_of(s, s->q_to);
    s->q_to = -1;
    if (i != s->qi) {
      s->qi = i;
      rlock__conn_set_node(&s->q, node_at(s, i)->host, node_at(s, i)->port);
      if (s->q.state != CS_IDLE) {
        s->q.backoff_ms = 0; /* reconnect at once */
        rlock__conn_reset(&s->q, "asking the next Sentinel");
      }
    }
  }
  if (s->ask_next) {
    s->ask_next = false;
    ask(s);
  }
  for (int i = 0; i < NDATA; i++) {
    conn_t *c = data_conn(s->cl, i);
    if (s->d[i].reset) {
      s->d[i].reset = false;
      snprintf(msg, sizeof msg, "Sentinel: reconnecting to the master (last named: %.100s:%d)", s->host, s->port);
      if (c->state != CS_IDLE && c->state != CS_CLOSED) rlock__conn_reset(c, msg);
    }
    if (s->d[i].start) {
      s->d[i].start = false;
      rlock__conn_start(c);
    }
  }
  req_t *r;
  while ((r = s->held)) { /* their connections are down now: they wait for the master */
    s->held = r->next;
    r->next = NULL;
    rlock__conn_send(s->cl->topo->route(s->cl, r), r);
  }
  s->held_tail = NULL;
}

/* Each poll asks the next sentinel: none of them (a stale one) is the only
 * one the client hears. */
static void poll_cb(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  sentinel_t *s = arg;
  if (s->cl->url.nsentinels > 1 && !s->asking && !s->survey && s->host) {
    s->poll_k = (s->poll_k + 1) % s->cl->url.nsentinels; /* round robin in the URL's order */
    ask_other(s, s->poll_k);
  } else {
    ask(s);
  }
}

static void again_cb(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  sentinel_t *s = arg;
  if (anyone_waiting(s)) ask(s);
}

/* ------------------------------------------------------------ the table */

static bool before_connect(client_t *cl, conn_t *c) {
  sentinel_t *s = cl->topo_state;
  int i = data_index(cl, c);
  if (i < 0 || !s) return true; /* a sentinel connection, or closing */
  if (c->node_refused) {
    /* the node named was not a master: that counts against the sentinel
     * that named it; the others are asked before it is tried again */
    c->node_refused = false;
    s->d[i].fresh = false;
    s->d[i].waiting = true;
    if (!s->survey || !s->chase) {
      survey_start(s, true);
      if (cl->url.nsentinels > 1) {
        ask_other(s, -1);
        return false;
      }
    }
    ask(s);
    return false;
  }
  if (s->d[i].fresh) {
    s->d[i].fresh = false;
    return true;
  }
  s->d[i].waiting = true;
  ask(s);
  return false;
}

static void sentinel_close(client_t *cl) {
  sentinel_t *s = cl->topo_state;
  if (!s) return;
  s->closed = true;
  for (req_t *r = s->held, *next; r; r = next) {
    next = r->next;
    r->completed = true;
    rlock__set_msg("client closed");
    if (r->done) r->done(r, RLOCK_ECLOSED, NULL);
    rlock__req_free(r);
  }
  rlock__conn_close(&s->q);
  rlock__conn_close(&s->sub);
  if (s->poll) event_free(s->poll);
  if (s->kick) event_free(s->kick);
  if (s->again) event_free(s->again);
  free(s->order);
  free(s->votes);
  free(s->host);
  free(s);
  cl->topo_state = NULL;
}

static int sentinel_init(client_t *cl) {
  sentinel_t *s = calloc(1, sizeof *s);
  if (!s) return RLOCK_ENOMEM;
  cl->topo_state = s;
  s->cl = cl;
  s->q_to = -1;
  s->round_ms = s->again_ms = cl->opt.reconnect_min_ms;
  s->order = malloc((size_t)cl->url.nsentinels * sizeof *s->order);
  s->votes = calloc((size_t)cl->url.nsentinels, sizeof *s->votes);
  s->poll = event_new(cl->base, -1, EV_PERSIST, poll_cb, s);
  s->kick = event_new(cl->base, -1, 0, kick_cb, s);
  s->again = evtimer_new(cl->base, again_cb, s);
  if (!s->order || !s->votes || !s->poll || !s->kick || !s->again || rlock__conn_init(&s->q, &cl->net, CONN_CMD) ||
      rlock__conn_init(&s->sub, &cl->net, CONN_SUB)) {
    sentinel_close(cl);
    return RLOCK_ENOMEM;
  }
  for (int i = 0; i < cl->url.nsentinels; i++) s->order[i] = i;
  s->q.topo_own = s->sub.topo_own = true;
  int64_t ms = cl->opt.connect_timeout_ms < SENTINEL_CONNECT_MS ? cl->opt.connect_timeout_ms : SENTINEL_CONNECT_MS;
  s->q.connect_timeout_ms = s->sub.connect_timeout_ms = ms;
  s->q.on_error = q_error;
  s->q.on_ready = q_ready;
  s->sub.on_error = sub_error;
  s->sub.on_ready = sub_ready;
  s->sub.on_push = sub_push;
  if (rlock__conn_set_node(&s->q, node_at(s, 0)->host, node_at(s, 0)->port)) {
    sentinel_close(cl);
    return RLOCK_ENOMEM;
  }
  struct timeval tv;
  rlock__tv_from_ms(&tv, rlock__sentinel_poll_ms);
  evtimer_add(s->poll, &tv);
  return 0;
}

/* A sentinel's connection: AUTH with the URL's sentinel_password (CLIENT
 * SETNAME follows, nothing else). The master's (and the fast path's): ROLE,
 * which must name a master. */
static void handshake(client_t *cl, const conn_t *c, hs_list_t *hs) {
  if (c && c->topo_own) {
    const char *a[2] = {"AUTH", cl->url.sentinel_password};
    if (a[1]) rlock__hs_add(hs, HS_AUTH, 2, a);
    return;
  }
  const char *a[1] = {"ROLE"};
  rlock__hs_add(hs, HS_CHECKED, 1, a);
}

/* ROLE's answer names a master: ["master", offset, replicas]. Anything else
 * (a replica, an error reply): the node is refused and Sentinel asked again. */
static int handshake_check(client_t *cl, const rlock_reply_t *reply, char *msg, size_t n) {
  (void)cl;
  const char *role = reply && reply->type == RLOCK_REPLY_ARRAY && reply->elements >= 1 ? reply->element[0]->str : NULL;
  if (role && !strcmp(role, "master")) return 0;
  snprintf(msg, n, "is not a master (ROLE: %.40s): asking Sentinel again", role ? role : "no answer");
  return RLOCK_ECONNECT;
}

static conn_t *route(client_t *cl, const req_t *r) {
  return rlock__topology_single.route(cl, r); /* the master's connections */
}

/* READONLY: the node was demoted under an open connection (the poll or the
 * event will name the new master). The connection is reset, so its next
 * attempt asks Sentinel again, and a single command of the lock engine is
 * sent again once it is back: a replica refused its write, nothing of it was
 * applied. So is a compound whose other command is its WAIT (the refused
 * script comes first; WAIT changes nothing). Another compound (a command
 * after the refused one may have run) and a user command (it may be one of a
 * MULTI ... EXEC: sent alone it would run outside its transaction) complete
 * with the error. */
static bool on_error_reply(client_t *cl, conn_t *c, req_t *r, const rlock_reply_t *err) {
  sentinel_t *s = cl->topo_state;
  int i = data_index(cl, c);
  if (!s || s->closed || i < 0 || !rlock__reply_is_error(err, "READONLY")) return false;
  s->d[i].reset = true;
  kick(s);
  if ((r->ncmds != 1 && !(r->waits && r->ncmds == 2)) || c->kind == CONN_USER) return false;
  r->next = NULL;
  if (s->held_tail) s->held_tail->next = r;
  else s->held = r;
  s->held_tail = r;
  return true;
}

const topology_ops_t rlock__topology_sentinel = {
    .name = "sentinel",
    .slots_matter = false,
    .route = route,
    .on_error_reply = on_error_reply,
    .init = sentinel_init,
    .close = sentinel_close,
    .before_connect = before_connect,
    .handshake = handshake,
    .handshake_check = handshake_check,
    .no_node_yet = "the master is not known yet (no Sentinel answered)",
};
