/* pubsub.c -- the subscriber connection of a client: one reference-counted
 * subscription per channel however many waiters share it; a message wakes one
 * parked waiter, or as many as the lock kind's policy says (waiter->wake), or
 * leaves a wake token for the next one to park; a
 * (re)subscription wakes them all (messages sent while we were not subscribed
 * are lost, so everyone re-tries). A SUBSCRIBE that failed (no answer within
 * the command timeout, an error reply) is sent again after a backoff while
 * the channel has waiters; a dropped connection resubscribes everything once
 * it is back. Waiters never depend on it alone: each also wakes after the
 * lock's TTL (lock.c), which is all they have while a channel is not
 * subscribed. */
#include "client.h"

#include <limits.h>

#include <stdlib.h>
#include <string.h>

typedef enum { CH_SUBSCRIBING, CH_SUBSCRIBED, CH_UNSUBSCRIBED } ch_state_t;

struct channel {
  char *name;
  size_t len;
  uint64_t gen;
  ch_state_t state;
  conn_t *on; /* the connection it was (is being) subscribed on */
  waiter_t *head, *tail;
  int wakes;     /* wake tokens: a message came while fewer waiters were parked */
  int observers; /* waiters that only look (waiter_t.observer) */
  int refused;   /* RLOCK_ENOPERM: the server refused the subscription (an ACL
                    without the channel); its waiters end, why says so */
  char *why;
  int (*wake)(const rlock_reply_t *msg); /* how many a message wakes (the kind's policy) */
};

typedef struct sub_ctx {
  pubsub_t *ps;
  uint64_t gen;
  size_t len;
  char name[];
} sub_ctx_t;

/* Wakes up to n parked waiters (in the order they joined); when fewer are
 * parked, wake tokens are left first for up to the rest of n waiters whose
 * try is in flight (each takes one as it parks and tries again)
 * (nothing touches ch once a waiter ran). INT_MAX wakes them all: every
 * waiter whose try is in flight gets a token of its own (its try may have
 * run before the release: it must try again, as the parked ones do). */
static void wake_some(channel_t *ch, int n) {
  if (n == INT_MAX)
    for (waiter_t *w = ch->head; w; w = w->next)
      if (!w->parked) w->token = true;
  /* stops at the n-th parked waiter (a lock's unlock: usually the first)
   * once it has seen every observer; only when fewer are parked has it seen
   * them all, and busy counts. Observers are not counted: each parked one
   * is woken, each busy one gets a token of its own. */
  int parked = 0, busy = 0, looking = 0, unseen = ch->observers;
  for (waiter_t *w = ch->head; w && (parked < n || unseen > 0); w = w->next)
    if (w->observer) {
      unseen--;
      if (w->parked) looking++;
      else w->token = true;
    } else if (parked < n) {
      if (w->parked) parked++;
      else busy++;
    }
  RLOCK__ASSERT(unseen == 0 || parked >= n);
  if (parked < n) {
    /* the rest are wake tokens, one each for up to that many waiters whose
     * try is in flight (it may have run before the release): one token only
     * would leave a second such waiter asleep beside a permit it fits */
    int left = n == INT_MAX ? 1 : n - parked;
    if (left > busy) left = busy;
    if (left < 1) left = 1;
    if (ch->wakes < left) ch->wakes = left;
  }
  for (waiter_t *w = ch->head, *next; w && (parked > 0 || looking > 0); w = next) {
    next = w->next;
    if (!w->parked || (!w->observer && parked == 0)) continue;
    if (w->observer) looking--;
    else parked--;
    w->parked = false;
    w->on_wake(w);
  }
}

static void resub_later(pubsub_t *ps);

/* The server refused ch's subscription for want of permission: it will refuse
 * it again, so its waiters end with RLOCK_ENOPERM (rlock__pubsub_refused)
 * instead of waiting on the TTL and re-sends. A waiter that joins later, once
 * they have all left, subscribes again (the ACL may have changed). */
static void refuse(channel_t *ch, const rlock_reply_t *reply) {
  char buf[512];
  snprintf(buf, sizeof buf,
           "this user may not subscribe to the channel %.*s (its ACL needs a & pattern matching it): %.120s",
           (int)(ch->len > 200 ? 200 : ch->len), ch->name, reply->str ? reply->str : "NOPERM");
  char *why = rlock__strndup(buf, strlen(buf));
  if (why) free(ch->why), ch->why = why;
  ch->refused = RLOCK_ENOPERM;
  for (waiter_t *w = ch->head; w; w = w->next) w->refused = ch->refused;
}

static void sub_done(req_t *r, int status, rlock_reply_t *reply) {
  sub_ctx_t *x = r->ctx;
  pubsub_t *ps = x->ps;
  channel_t *ch = rlock__map_get(&ps->channels, x->name, x->len);
  if (ch && ch->gen == x->gen && ch->state == CH_SUBSCRIBING) {
    bool ok = status == 0 && reply && reply->type == RLOCK_REPLY_ARRAY;
    bool noperm = !ok && status == 0 && reply && reply->type == RLOCK_REPLY_ERROR &&
                  rlock__reply_error_code(reply) == RLOCK_ENOPERM;
    ch->state = ok ? CH_SUBSCRIBED : CH_UNSUBSCRIBED;
    if (ok) ps->resub_ms = ps->cl->opt.reconnect_min_ms;
    else if (noperm) refuse(ch, reply); /* no re-send: the waiters end (RLOCK_ENOPERM) */
    /* failed: the waiters try now and then sleep on the TTL, until a re-send
     * (or the reconnect, if the connection dropped) subscribes it */
    else if (status != RLOCK_ECLOSED) resub_later(ps);
    if (status != RLOCK_ECLOSED) wake_some(ch, INT_MAX); /* messages may have been missed: everyone tries */
  }
  rlock_reply_free(reply);
  free(x);
}

/* SUBSCRIBE (sub) or UNSUBSCRIBE ch; SSUBSCRIBE / SUNSUBSCRIBE under sharded
 * pub/sub. A subscription goes where the topology routes the channel; its
 * UNSUBSCRIBE to the connection that holds it (ch->on): under sharded pub/sub
 * the slot map may name another node by then (a MOVED learnt before the
 * refresh moved the channel), which would leave the old one subscribed. */
static void send_sub(pubsub_t *ps, channel_t *ch, bool sub) {
  sub_ctx_t *x = NULL;
  bool sharded = ps->cl->sharded_pubsub;
  const char *verb = sub ? (sharded ? "SSUBSCRIBE" : "SUBSCRIBE") : (sharded ? "SUNSUBSCRIBE" : "UNSUBSCRIBE");
  if (sub) {
    if (!(x = malloc(sizeof *x + ch->len))) return;
    x->ps = ps, x->gen = ch->gen, x->len = ch->len;
    memcpy(x->name, ch->name, ch->len);
    ch->state = CH_SUBSCRIBING;
  }
  const char *argv[2] = {verb, ch->name};
  size_t lens[2] = {strlen(verb), ch->len};
  req_t *r = rlock__req_new(2, argv, lens, ps->cl->opt.command_timeout_ms, sub ? sub_done : NULL, x);
  if (!r) {
    free(x);
    if (sub) ch->state = CH_UNSUBSCRIBED;
    return;
  }
  stat_add(ps->cl, sub ? ST_SUBSCRIBES : ST_UNSUBSCRIBES, 1);
  r->conn = CONN_SUB;
  r->slot = rlock__names_slot(ch->name, ch->len);
  conn_t *on = ps->cl->topo->route(ps->cl, r); /* the routing point: by the channel's slot (sharded) */
  if (!sub && ch->on) on = ch->on;             /* where the subscription is, whatever the map says now */
  rlock__conn_send(on, r);
  if (sub) ch->on = on;
}

/* The channel a push names, if it is in the table. */
static channel_t *push_channel(pubsub_t *ps, const rlock_reply_t *msg) {
  const rlock_reply_t *chan = msg->element[msg->elements == 4 ? 2 : 1];
  return chan && chan->str ? rlock__map_get(&ps->channels, chan->str, chan->len) : NULL;
}

static bool is_sunsubscribe(const rlock_reply_t *r) {
  return r->type == RLOCK_REPLY_ARRAY && r->elements == 3 && r->element[0] && r->element[0]->str &&
         !strcmp(r->element[0]->str, "sunsubscribe");
}

/* A sunsubscribe for a channel still subscribed on c was not asked for (we
 * send SUNSUBSCRIBE only for channels gone from the table): the server
 * dropped the subscription (the slot moved, the node became a replica). */
static bool is_own_push(conn_t *c, const rlock_reply_t *reply) {
  if (!is_sunsubscribe(reply)) return false;
  channel_t *ch = push_channel(&rlock__client_of(c)->ps, reply);
  return ch && ch->on == c && ch->state == CH_SUBSCRIBED;
}

/* The server dropped ch's subscription: subscribe again where the slot map
 * says now (a MOVED answer updates it), and every waiter tries at once (an
 * unlock on the new owner may have gone unheard). */
static void lost_subscription(pubsub_t *ps, channel_t *ch) {
  ch->state = CH_UNSUBSCRIBED;
  send_sub(ps, ch, true);
  wake_some(ch, INT_MAX);
}

/* A handoff message "g:<id>" to the waiter whose try it names: true when
 * one took it. */
static bool grant_some(channel_t *ch, const rlock_reply_t *m) {
  if (m->type != RLOCK_REPLY_STRING || m->len < 3 || m->str[0] != 'g' || m->str[1] != ':') return false;
  for (waiter_t *w = ch->head; w; w = w->next)
    if (!w->observer && w->on_grant && w->on_grant(w, m->str + 2, m->len - 2)) return true;
  return false;
}

static void on_push(conn_t *c, rlock_reply_t *msg) {
  pubsub_t *ps = &rlock__client_of(c)->ps;
  channel_t *ch = push_channel(ps, msg);
  if (is_sunsubscribe(msg)) {
    if (ch) lost_subscription(ps, ch);
  } else {
    stat_add(ps->cl, ST_MESSAGES, 1);
    const rlock_reply_t *m = msg->element[msg->elements - 1];
    if (ch && !grant_some(ch, m)) wake_some(ch, ch->wake ? ch->wake(m) : 1);
  }
  rlock_reply_free(msg);
}

/* c dropped: its channels are not subscribed any more. Under sharded pub/sub
 * another connection may own them now (a failover): they are subscribed
 * again after a backoff wherever the slot map says, and their waiters try
 * at once; otherwise c's reconnect (on_ready) subscribes them again. */
static void on_down(conn_t *c) {
  pubsub_t *ps = &rlock__client_of(c)->ps;
  bool any = false;
  map_iter_t it;
  rlock__map_iter_init(&it, &ps->channels);
  for (map_entry_t *e; (e = rlock__map_iter_next(&it));) {
    channel_t *ch = e->value;
    if (ch->on != c || ch->state != CH_SUBSCRIBED) continue;
    ch->state = CH_UNSUBSCRIBED;
    any = true;
  }
  if (any && c != &ps->conn) resub_later(ps);
}

/* SUBSCRIBE again every channel that is not subscribed (and has waiters:
 * a channel without waiters is gone from the table). */
static void resubscribe(pubsub_t *ps) {
  map_iter_t it;
  rlock__map_iter_init(&it, &ps->channels);
  for (map_entry_t *e; (e = rlock__map_iter_next(&it));) {
    channel_t *ch = e->value;
    if (ch->state == CH_UNSUBSCRIBED) send_sub(ps, ch, true);
  }
}

static void on_ready(conn_t *c) { resubscribe(&rlock__client_of(c)->ps); }

/* The slot map changed: a channel subscribed on a connection that no longer
 * serves its slot (a replica promoted: Redis 7.0 keeps the subscription on
 * the demoted master, which hears no SPUBLISH of the new one) leaves it and
 * subscribes where the map says; its waiters try at once. Then every channel
 * not subscribed is subscribed. */
void rlock__pubsub_resubscribe(pubsub_t *ps) {
  map_iter_t it;
  rlock__map_iter_init(&it, &ps->channels);
  for (map_entry_t *e; (e = rlock__map_iter_next(&it));) {
    channel_t *ch = e->value;
    req_t where = {.slot = rlock__names_slot(ch->name, ch->len), .conn = CONN_SUB};
    if (ch->state != CH_SUBSCRIBED || ps->cl->topo->route(ps->cl, &where) == ch->on) continue;
    const char *argv[2] = {ps->cl->sharded_pubsub ? "SUNSUBSCRIBE" : "UNSUBSCRIBE", ch->name};
    size_t lens[2] = {strlen(argv[0]), ch->len};
    req_t *r = rlock__req_new(2, argv, lens, ps->cl->opt.command_timeout_ms, NULL, NULL);
    if (r) { /* on the old node itself: the routing point would pick the new one */
      r->conn = CONN_SUB;
      rlock__conn_send(ch->on, r);
    }
    ch->state = CH_UNSUBSCRIBED;
    wake_some(ch, INT_MAX);
  }
  resubscribe(ps);
}

static void resub_cb(evutil_socket_t fd, short what, void *arg) {
  pubsub_t *ps = arg;
  /* one server: on_ready will; sharded: each channel goes (or waits) where its slot is */
  if (ps->conn.state == CS_READY || ps->cl->sharded_pubsub) resubscribe(ps);
}

static void resub_later(pubsub_t *ps) {
  if (!ps->resub || evtimer_pending(ps->resub, NULL)) return;
  struct timeval tv;
  rlock__tv_from_ms(&tv, ps->resub_ms);
  evtimer_add(ps->resub, &tv);
  int64_t max = ps->cl->opt.reconnect_max_ms;
  ps->resub_ms = ps->resub_ms * 2 > max ? max : ps->resub_ms * 2;
}

int rlock__pubsub_init(pubsub_t *ps, client_t *cl) {
  ps->cl = cl;
  rlock__map_init(&ps->channels);
  ps->resub_ms = cl->opt.reconnect_min_ms;
  ps->resub = evtimer_new(cl->base, resub_cb, ps);
  int rc = rlock__conn_init(&ps->conn, &cl->net, CONN_SUB);
  if (!ps->resub) rc = RLOCK_ENOMEM;
  rlock__pubsub_attach(ps, &ps->conn);
  return rc;
}

void rlock__pubsub_attach(pubsub_t *ps, conn_t *c) {
  (void)ps; /* the callbacks find it through rlock__client_of(c) */
  c->on_push = on_push;
  c->on_down = on_down;
  c->on_ready = on_ready;
  c->is_own_push = is_own_push;
}

void rlock__pubsub_close(pubsub_t *ps) {
  rlock__conn_close(&ps->conn);
  if (ps->resub) event_free(ps->resub);
  ps->resub = NULL;
  map_iter_t it;
  rlock__map_iter_init(&it, &ps->channels);
  for (map_entry_t *e; (e = rlock__map_iter_next(&it));) {
    channel_t *ch = e->value;
    free(ch->why);
    free(ch->name);
    free(ch);
  }
  rlock__map_free(&ps->channels);
}

int rlock__pubsub_join(pubsub_t *ps, waiter_t *w, const char *chan, size_t len) {
  channel_t *ch = rlock__map_get(&ps->channels, chan, len);
  if (!ch) {
    if (!(ch = calloc(1, sizeof *ch)) || !(ch->name = rlock__strndup(chan, len)) ||
        rlock__map_put(&ps->channels, chan, len, ch)) {
      if (ch) free(ch->name);
      free(ch);
      return RLOCK_ENOMEM;
    }
    ch->len = len;
    ch->wake = w->wake;
    ch->gen = ++ps->next_gen;
    ch->state = CH_UNSUBSCRIBED;
    if (ps->conn.state == CS_CLOSED) return RLOCK_ECLOSED;
    send_sub(ps, ch, true);
  }
  w->ch = ch;
  ch->observers += w->observer;
  w->token = false;
  w->refused = ch->refused;
  w->parked = ch->state == CH_SUBSCRIBING; /* woken when the subscription is confirmed */
  w->next = NULL;
  w->prev = ch->tail;
  if (ch->tail) ch->tail->next = w;
  else ch->head = w;
  ch->tail = w;
  return ch->state == CH_SUBSCRIBING ? 0 : 1; /* 1: go on now */
}

void rlock__pubsub_leave(pubsub_t *ps, waiter_t *w) {
  channel_t *ch = w->ch;
  if (!ch) return;
  if (w->prev) w->prev->next = w->next;
  else ch->head = w->next;
  if (w->next) w->next->prev = w->prev;
  else ch->tail = w->prev;
  ch->observers -= w->observer;
  RLOCK__ASSERT(ch->observers >= 0);
  w->ch = NULL;
  w->prev = w->next = NULL;
  w->parked = false;
  w->token = false;
  w->refused = 0;
  if (ch->head) return;
  rlock__map_del(&ps->channels, ch->name, ch->len);
  if (ch->state != CH_UNSUBSCRIBED && ps->conn.state != CS_CLOSED) send_sub(ps, ch, false);
  free(ch->why);
  free(ch->name);
  free(ch);
}

bool rlock__pubsub_park(waiter_t *w) {
  if (w->token) { /* a wake-all came while its try was in flight */
    w->token = false;
    /* it was busy since that wake-all, so any message since counted it
     * among the busy waiters: its own share of the wake tokens is used,
     * the others' stay (zeroing them left a waiter whose try ran before a
     * release asleep beside a free permit). An observer has no share. */
    if (w->ch && !w->observer && w->ch->wakes > 0) w->ch->wakes--;
    return true;
  }
  if (w->ch && w->ch->wakes && !w->observer) {
    RLOCK__ASSERT(w->ch->wakes > 0);
    w->ch->wakes--;
    return true; /* a message came while we were busy: try again now */
  }
  w->parked = true;
  return false;
}

void rlock__pubsub_pass_wake(waiter_t *w) {
  channel_t *ch = w->ch;
  if (!ch) return;
  for (waiter_t *o = ch->head; o; o = o->next)
    if (o != w && o->parked && !o->observer) {
      o->parked = false;
      o->on_wake(o);
      return;
    }
  ch->wakes = 1; /* for a waiter whose try is in flight */
}

const char *rlock__pubsub_refused(const waiter_t *w) {
  return w->refused && w->ch && w->ch->why ? w->ch->why : "the server refused the subscription";
}
