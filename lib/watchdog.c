/* watchdog.c -- the registry of holds this client has taken, keyed by
 * (owner id, name): the client's own hold count, lease renewal for watchdog
 * holds, batched (up to RENEW_BATCH holds per call of the kind's renew
 * script, reentrant_renew.lua or simple_renew.lua, every watchdog_timeout/3), the valid-until deadline of each hold,
 * and the lock-lost notification (with its reason) when a renewal finds the hold gone, the lease has certainly run out,
 * or an unlock found a count other than the client's. After a reconnect (one server, Sentinel) the check round also
 * asks about fixed-lease holds, without extending them. An unlock that finds a tracked hold gone reports it too. With
 * the replica-sync check a renewal carries WAIT; one that too few replicas acknowledged stands and is counted.
 *
 * A hold is a stack of levels, one per acquire of that owner (reentrancy):
 * each level keeps the running maxima of the fixed leases below and at it,
 * and how many of them asked for the watchdog. So the hold is renewed while
 * any level asked for the watchdog, and an unlock that leaves levels knows
 * in O(1) which TTL the rest still needs.
 *
 * Memory (100,000 holds): one allocation per hold, the registry's hash chain
 * and the expiry queue running through it, its name inline, its owner id
 * interned; levels only for holds with a fixed lease inside. Renewed holds
 * expire in the order of their renewals: one queue under one timer.
 * I/O thread only. A renewal can never extend a released lock: the script
 * only touches a key where the owner's field still exists. */
#include "client.h"
#include "replica_sync.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RENEW_BATCH 500

typedef struct level {
  int64_t lo, hi; /* max over the fixed-lease levels up to here of send + lease and
                     reply + lease (0: none) */
  int64_t nwatch; /* watchdog levels up to here */
} level_t;

/* What only some holds need: their levels once one of them is a fixed lease
 * (or re-leased), and releases with an unknown outcome. A hold without one
 * is depth watchdog levels, level i being {0, 0, i + 1}, and no unknowns. */
typedef struct hold_ext {
  int64_t unknown; /* releases with an unknown outcome, counted as done */
  size_t cap;
  level_t levels[];
} hold_ext_t;

/* An owner id, interned: the holds of one owner share it (100,000 holds of
 * one thread keep its 40-byte id once). Kept while refs is 0 until the next
 * tick, so an owner taking and releasing one lock allocates nothing. */
typedef struct owner_rec {
  watchdog_t *wd;
  uint64_t owner;
  size_t refs, len;
  char id[]; /* len bytes and a NUL */
} owner_rec_t;

enum { AT_NONE, AT_QUEUE, AT_TIMER };

/* One allocation per hold, its name inline: the registry's hash chain and
 * the expiry queue run through the holds themselves (68 bytes + the name). */
struct hold {
  hold_t *hnext; /* the registry bucket's chain */
  union {
    struct {
      hold_t *prev, *next;
    } q;              /* at == AT_QUEUE: the expiry queue */
    struct event *ev; /* at == AT_TIMER: its own timer (a deadline out of the queue's order) */
  } t;
  owner_rec_t *o;     /* NULL once forgotten */
  hold_ext_t *ext;    /* NULL: watchdog levels only, no unknowns */
  int64_t w_lo, w_hi; /* watchdog lease: last acquire/renewal send + lease, reply + lease */
  uint32_t depth;     /* the client's hold count */
  uint32_t nlen;      /* the name's length (a spare hold: the room for one) */
  uint16_t pins;      /* renewal batches in flight that name it */
  uint8_t script;     /* its kind's renew script (0: SCRIPT_RENEW) */
  uint8_t slack;      /* its kind's expiry_slack_ms: a renewal is valid from send + lease - slack */
  uint8_t at : 2;     /* where its expiry is kept */
  uint8_t dead : 1;   /* forgotten while pinned: the last batch frees it */
  char name[];
};

#define HOLD_HEAD offsetof(hold_t, name)
#define MAX_PINS UINT16_MAX
#define RENEW_WINDOW 4 /* renewal calls in flight */
#define LOAD 2         /* holds per registry bucket, at most (100,000 holds: 5 B each) */

/* A renewal call in flight: it pins its holds (a hold forgotten meanwhile
 * stays in memory, marked dead, until the batch is done), so the reply is
 * matched to them without a lookup. */
typedef struct batch {
  watchdog_t *wd;
  int script;            /* its renew script */
  bool fixed;            /* fixed-lease holds, asked about after a reconnect: their leases are not extended */
  sync_need_t sync_need; /* the WAIT behind the renewal (replica sync) */
  size_t n;
  int64_t sent_at;
  hold_t *holds[];
} batch_t;

RLOCK_API const char *rlock_lost_reason_str(rlock_lost_reason_t reason) {
  switch (reason) {
  case RLOCK_LOST_EXPIRED: return "fixed lease ran out";
  case RLOCK_LOST_RENEWAL_FAILED: return "renewals failed until the lease ran out";
  case RLOCK_LOST_DELETED: return "the hold is gone from the server";
  case RLOCK_LOST_FORCE_UNLOCKED: return "force-unlocked by this client";
  case RLOCK_LOST_COUNT_MISMATCH: return "the server's hold count disagreed with the client's";
  }
  return "unknown";
}

static const char *hold_name(const hold_t *h, size_t *len) {
  *len = h->nlen;
  return h->name;
}

static level_t level_at(const hold_t *h, size_t i) {
  return h->ext ? h->ext->levels[i] : (level_t){0, 0, (int64_t)i + 1};
}
static level_t top(const hold_t *h) { return level_at(h, h->depth - 1); }
static bool renews(const hold_t *h) { return h->depth && top(h).nwatch > 0; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t unknown_of(const hold_t *h) { return h->ext ? h->ext->unknown : 0; }

/* The earliest the server's lease can end: the last moment the hold is surely valid. */
static int64_t valid_lo(const hold_t *h) { return renews(h) ? max64(top(h).lo, h->w_lo) : top(h).lo; }

/* The latest the server's lease can end. */
static int64_t valid_hi(const hold_t *h) { return renews(h) ? max64(top(h).hi, h->w_hi) : top(h).hi; }

/* Room for at least cap levels (and the unknowns) beside the hold. */
static int ext_need(hold_t *h, size_t cap) {
  hold_ext_t *x = h->ext;
  if (x && x->cap >= cap) return 0;
  size_t c = x ? x->cap : 2;
  while (c < cap) c *= 2;
  hold_ext_t *nx = realloc(x, sizeof *nx + c * sizeof nx->levels[0]);
  if (!nx) return RLOCK_ENOMEM;
  if (!x) { /* the levels so far were watchdog levels */
    nx->unknown = 0;
    for (size_t i = 0; i < h->depth; i++) nx->levels[i] = (level_t){0, 0, (int64_t)i + 1};
  }
  nx->cap = c;
  h->ext = nx;
  return 0;
}

/* The registry key "<owner id>\n<name>" into k (strlen(owner_id) + 1 + len bytes). */
static size_t fill_key(char *k, const char *owner_id, const char *name, size_t len) {
  size_t ol = strlen(owner_id);
  memcpy(k, owner_id, ol);
  k[ol] = '\n';
  memcpy(k + ol + 1, name, len);
  return ol + 1 + len;
}

/* ---------------------------------------------------------------- owners */

static owner_rec_t *owner_find(watchdog_t *wd, const char *owner_id, size_t olen) {
  owner_rec_t *o = wd->last_owner;
  if (o && o->len == olen && !memcmp(o->id, owner_id, olen)) return o;
  if ((o = rlock__map_get(&wd->owners, owner_id, olen))) wd->last_owner = o;
  return o;
}

static owner_rec_t *owner_get(watchdog_t *wd, const char *owner_id, size_t olen, uint64_t owner) {
  owner_rec_t *o = owner_find(wd, owner_id, olen);
  if (o) return o;
  if (!(o = malloc(sizeof *o + olen + 1))) return NULL;
  o->wd = wd;
  o->owner = owner;
  o->refs = 0;
  o->len = olen;
  memcpy(o->id, owner_id, olen);
  o->id[olen] = 0;
  if (rlock__map_put(&wd->owners, o->id, olen, o)) {
    free(o);
    return NULL;
  }
  return wd->last_owner = o;
}

/* Owners no hold names any more (every tick). */
static void owners_prune(watchdog_t *wd, bool all) {
  map_iter_t it;
  rlock__map_iter_init(&it, &wd->owners);
  for (map_entry_t *e; (e = rlock__map_iter_next(&it));) {
    owner_rec_t *o = e->value;
    if (o->refs && !all) continue;
    rlock__map_del(&wd->owners, e->key, e->klen);
    if (wd->last_owner == o) wd->last_owner = NULL;
    free(o);
  }
}

/* ---------------------------------------------------------------- registry */

static size_t hash_of(const owner_rec_t *o, const char *name, size_t len) {
  return (size_t)(rlock__map_hash(name, len) ^ ((uint64_t)(uintptr_t)o * 0x9e3779b97f4a7c15ULL));
}

static hold_t **bucket_of(watchdog_t *wd, const owner_rec_t *o, const char *name, size_t len) {
  return &wd->holds.buckets[hash_of(o, name, len) & (wd->holds.nbuckets - 1)];
}

static hold_t *table_find(watchdog_t *wd, const owner_rec_t *o, const char *name, size_t len) {
  if (!wd->holds.nbuckets) return NULL;
  for (hold_t *h = *bucket_of(wd, o, name, len); h; h = h->hnext)
    if (h->o == o && h->nlen == len && !memcmp(h->name, name, len)) return h;
  return NULL;
}

static int table_grow(watchdog_t *wd) {
  size_t nb = wd->holds.nbuckets ? wd->holds.nbuckets * 2 : 16;
  hold_t **b = calloc(nb, sizeof *b);
  if (!b) return RLOCK_ENOMEM;
  for (size_t i = 0; i < wd->holds.nbuckets; i++) {
    for (hold_t *h = wd->holds.buckets[i], *n; h; h = n) {
      n = h->hnext;
      hold_t **pp = &b[hash_of(h->o, h->name, h->nlen) & (nb - 1)];
      h->hnext = *pp;
      *pp = h;
    }
  }
  free(wd->holds.buckets);
  wd->holds.buckets = b;
  wd->holds.nbuckets = nb;
  return 0;
}

static void table_del(watchdog_t *wd, hold_t *h) {
  for (hold_t **pp = bucket_of(wd, h->o, h->name, h->nlen); *pp; pp = &(*pp)->hnext) {
    if (*pp == h) {
      *pp = h->hnext;
      wd->holds.count--;
      return;
    }
  }
}

/* ---------------------------------------------------------------- expiry
 * A renewed hold's lease ends watchdog_timeout after its renewal: in the
 * order of the renewals. Those holds wait in one queue (moving one to its
 * end is O(1) and allocates nothing) under one timer at the head's end; a
 * hold with another deadline (a fixed lease) has its own timer. */

static void expire_cb(evutil_socket_t fd, short what, void *arg);

static void arm(watchdog_t *wd, int64_t deadline, int64_t now) {
  if (wd->armed_at && wd->armed_at <= deadline) return; /* it fires first, then looks again */
  struct timeval tv;
  rlock__tv_from_ms(&tv, deadline > now ? deadline - now : 0);
  evtimer_add(wd->expire, &tv);
  wd->armed_at = deadline;
}

static void q_unlink(watchdog_t *wd, hold_t *h) {
  hold_t *p = h->t.q.prev, *n = h->t.q.next;
  if (p) p->t.q.next = n;
  else wd->qhead = n;
  if (n) n->t.q.prev = p;
  else wd->qtail = p;
}

static void q_append(watchdog_t *wd, hold_t *h) {
  h->t.q.prev = wd->qtail;
  h->t.q.next = NULL;
  if (wd->qtail) wd->qtail->t.q.next = h;
  else wd->qhead = h;
  wd->qtail = h;
  h->at = AT_QUEUE;
}

static void timer_drop(watchdog_t *wd, hold_t *h) {
  event_del(h->t.ev);
  if (!wd->spare_ev) wd->spare_ev = h->t.ev;
  else event_free(h->t.ev);
}

static void expiry_drop(watchdog_t *wd, hold_t *h) {
  if (h->at == AT_QUEUE) q_unlink(wd, h);
  else if (h->at == AT_TIMER) timer_drop(wd, h);
  h->at = AT_NONE;
}

/* The expiry at hi: in the queue when hi is the hold's valid-until and a
 * watchdog lease from now (the queue's order), else on its own timer.
 * false: out of memory for a timer when hi is not the valid-until (nothing
 * changed). */
static bool rearm_until(hold_t *h, int64_t hi, bool valid_until, int64_t now) {
  watchdog_t *wd = h->o->wd;
  int64_t left = hi - now;
  if (valid_until && left == wd->cl->opt.watchdog_timeout_ms) { /* in the queue's order */
    expiry_drop(wd, h);
    q_append(wd, h);
    arm(wd, hi, now);
    return true;
  }
  if (h->at != AT_TIMER) {
    struct event *ev = wd->spare_ev;
    if (ev) {
      wd->spare_ev = NULL;
      event_assign(ev, wd->cl->base, -1, 0, expire_cb, h);
    } else if (!(ev = event_new(wd->cl->base, -1, 0, expire_cb, h))) {
      if (!valid_until) return false;
      /* out of memory: the queue, out of its order; its loss is reported
       * once the hold reaches the head and its lease has run out, never
       * early (another loss behind it may be reported late) */
      expiry_drop(wd, h);
      q_append(wd, h);
      arm(wd, hi, now);
      return true;
    }
    if (h->at == AT_QUEUE) q_unlink(wd, h);
    h->t.ev = ev;
    h->at = AT_TIMER;
  }
  struct timeval tv;
  rlock__tv_from_ms(&tv, left > 0 ? left : 0);
  evtimer_add(h->t.ev, &tv);
  return true;
}

/* The expiry at the latest moment the server's lease can still run. */
static void rearm_at(hold_t *h, int64_t now) { (void)rearm_until(h, valid_hi(h), true, now); }

static void rearm(hold_t *h) { rearm_at(h, rlock_now_ms()); }

/* ---------------------------------------------------------------- holds */

static void hold_mem_free(hold_t *h) {
  free(h->ext);
  free(h);
}

/* The hold is no longer tracked (already out of the registry); a renewal
 * batch that still names it frees it when its reply is in. */
static void hold_free(hold_t *h) {
  owner_rec_t *o = h->o;
  watchdog_t *wd = o->wd;
  stat_add(wd->cl, ST_HELD, -1);
  expiry_drop(wd, h);
  o->refs--;
  h->o = NULL;
  if (h->pins) {
    h->dead = true;
    return;
  }
  if (!wd->spare && !h->ext) wd->spare = h; /* the next hold's, if its name fits */
  else hold_mem_free(h);
}

static void forget(hold_t *h) {
  table_del(h->o->wd, h);
  hold_free(h);
}

static hold_t *hold_new(watchdog_t *wd, owner_rec_t *o, const char *name, size_t len) {
  /* not during a round's walk; after it, as often as needed */
  while (wd->holds.count + 1 > LOAD * wd->holds.nbuckets && (!wd->round_on || !wd->holds.nbuckets))
    if (table_grow(wd)) {
      if (!wd->holds.nbuckets) return NULL;
      break;
    }
  hold_t *h = wd->spare;
  if (h && h->nlen >= len) wd->spare = NULL;
  else if (!(h = malloc(HOLD_HEAD + len))) return NULL;
  memset(h, 0, HOLD_HEAD);
  h->o = o;
  o->refs++;
  h->nlen = (uint32_t)len;
  memcpy(h->name, name, len);
  hold_t **pp = bucket_of(wd, o, name, len);
  h->hnext = *pp;
  *pp = h;
  wd->holds.count++;
  stat_add(wd->cl, ST_HELD, 1);
  return h;
}

/* Lookups run on every unlock. */
static hold_t *find(watchdog_t *wd, const char *name, size_t len, const char *owner_id) {
  owner_rec_t *o = owner_find(wd, owner_id, strlen(owner_id));
  return o ? table_find(wd, o, name, len) : NULL;
}

/* Releases whose outcome is unknown outlive their hold: the last hold is
 * forgotten (its lease frees it), but until that lease can have run out the
 * server may still count it. If the owner takes the lock again meanwhile,
 * the new hold inherits them, so the unlock that frees the lock takes that
 * surplus for what it is, not for a loss. Keyed "<owner id>\n<name>". */
typedef struct residue {
  int64_t unknown, until;
} residue_t;

static void residue_keep(hold_t *h, int64_t lease_ms) {
  watchdog_t *wd = h->o->wd;
  size_t klen = h->o->len + 1 + h->nlen;
  char *key = malloc(klen);
  residue_t *r = malloc(sizeof *r);
  if (!r || !key) { /* the next unlock may then report a count mismatch: still freed */
    free(r), free(key);
    return;
  }
  fill_key(key, h->o->id, h->name, h->nlen);
  r->unknown = unknown_of(h);
  /* a renewal or unlock still in flight may push the server's TTL to a
   * lease from about now */
  r->until = max64(valid_hi(h), rlock_now_ms() + lease_ms);
  free(rlock__map_del(&wd->residue, key, klen));
  if (rlock__map_put(&wd->residue, key, klen, r)) free(r);
  free(key);
}

/* A new hold whose acquire was sent at sent_at: the server applied it after
 * that, so the old count can only be there if sent_at < until. */
static int64_t residue_take(watchdog_t *wd, const hold_t *h, int64_t sent_at) {
  if (!wd->residue.count) return 0;
  char stack[512];
  size_t klen = h->o->len + 1 + h->nlen;
  char *key = klen <= sizeof stack ? stack : malloc(klen);
  if (!key) return 0;
  fill_key(key, h->o->id, h->name, h->nlen);
  residue_t *r = rlock__map_del(&wd->residue, key, klen);
  int64_t n = r && sent_at < r->until ? r->unknown : 0;
  free(r);
  if (key != stack) free(key);
  return n;
}

static void residue_prune(watchdog_t *wd) {
  map_iter_t it;
  int64_t now = rlock_now_ms();
  rlock__map_iter_init(&it, &wd->residue);
  for (map_entry_t *e; (e = rlock__map_iter_next(&it));) {
    residue_t *r = e->value;
    /* kept a latch TTL longer: an acquire sent before until may answer late */
    if (now >= r->until + rlock__client_latch_ttl(wd->cl)) free(rlock__map_del(&wd->residue, e->key, e->klen));
  }
}

struct lost_listener {
  lost_listener_fn fn;
  void *arg;
};

int rlock__watchdog_listen(watchdog_t *wd, lost_listener_fn fn, void *arg) {
  pthread_mutex_lock(&wd->lmu);
  struct lost_listener *ls = realloc(wd->listeners, (wd->nlisteners + 1) * sizeof *ls);
  if (ls) {
    ls[wd->nlisteners++] = (struct lost_listener){fn, arg};
    wd->listeners = ls;
  }
  pthread_mutex_unlock(&wd->lmu);
  return ls ? 0 : RLOCK_ENOMEM;
}

void rlock__watchdog_unlisten(watchdog_t *wd, lost_listener_fn fn, void *arg) {
  pthread_mutex_lock(&wd->lmu);
  for (size_t i = 0; i < wd->nlisteners; i++) {
    if (wd->listeners[i].fn == fn && wd->listeners[i].arg == arg) {
      wd->listeners[i] = wd->listeners[--wd->nlisteners];
      break;
    }
  }
  pthread_mutex_unlock(&wd->lmu);
}

static void tell_listeners(watchdog_t *wd, const char *name, size_t len, uint64_t owner, rlock_lost_reason_t reason) {
  pthread_mutex_lock(&wd->lmu);
  for (size_t i = 0; i < wd->nlisteners; i++)
    wd->listeners[i].fn(wd->cl, name, len, owner, reason, wd->listeners[i].arg);
  pthread_mutex_unlock(&wd->lmu);
}

static void lost(hold_t *h, rlock_lost_reason_t reason) {
  watchdog_t *wd = h->o->wd;
  uint64_t owner = h->o->owner;
  table_del(wd, h);
  stat_add(wd->cl, ST_LOST, 1);
  rlock__client_lost(wd->cl, h->name, h->nlen, owner, reason);
  tell_listeners(wd, h->name, h->nlen, owner, reason);
  hold_free(h);
}

/* The owner's unlocks of every level of the hold are in flight, an answer
 * of each lost (fast.c's releasing marks, one per unlock: a copy may have
 * applied). Fewer unlocks than levels: a level no unlock ends is lost. */
static bool unlock_pending(hold_t *h) {
  size_t hl;
  const char *hn = hold_name(h, &hl);
  return h->depth >= 1 && rlock__fast_releasing_n(h->o->wd->cl, hn, hl, h->o->id, h->o->len) >= (int64_t)h->depth;
}

#define RECHECK_MS 50 /* a lease run out under a pending unlock: looked at again */

/* The lease ran out: the hold is lost (it ended without an unlock by its
 * owner), unless its owner's unlock of it is pending: that unlock's outcome
 * says (applied, or every answer lost: counted as done, not a loss; not
 * held: the unlock reports the loss), so the expiry looks again soon (out of
 * memory for that timer: lost now). */
static bool lease_over(hold_t *h, int64_t now) {
  if (now < valid_hi(h)) return false;
  if (unlock_pending(h) && rearm_until(h, now + RECHECK_MS, false, now)) return true;
  lost(h, renews(h) ? RLOCK_LOST_RENEWAL_FAILED : RLOCK_LOST_EXPIRED);
  return true;
}

/* A hold's own timer. A deadline counts from the loop's cached time, which
 * can be a little older than the moment the lease was extended: early, wait
 * the rest. */
static void expire_cb(evutil_socket_t fd, short what, void *arg) {
  hold_t *h = arg;
  int64_t now = rlock_now_ms();
  if (!lease_over(h, now)) rearm_at(h, now);
}

/* The queue's timer: every hold at its head whose lease has run out. */
static void queue_cb(evutil_socket_t fd, short what, void *arg) {
  watchdog_t *wd = arg;
  int64_t now = rlock_now_ms();
  wd->armed_at = 0;
  while (wd->qhead && lease_over(wd->qhead, now)) {
  }
  if (wd->qhead) arm(wd, valid_hi(wd->qhead), now);
}

int rlock__watchdog_acquired(watchdog_t *wd, const char *name, size_t len, uint64_t owner, const char *owner_id,
                             int64_t lease_ms, bool renew, int64_t sent_at) {
  owner_rec_t *o = owner_get(wd, owner_id, strlen(owner_id), owner);
  if (!o) return RLOCK_ENOMEM;
  hold_t *h = table_find(wd, o, name, len);
  if (!h) {
    if (!(h = hold_new(wd, o, name, len))) return RLOCK_ENOMEM;
    int64_t unknown = residue_take(wd, h, sent_at);
    if (unknown && !ext_need(h, 2)) h->ext->unknown = unknown; /* no room: the next unlock may report a mismatch */
  }
  /* The server set the TTL at most now (the reply is here) and never
   * shortened it (reentrant_acquire.lua): valid from send + lease to now + lease. */
  int64_t now = rlock_now_ms();
  if (renew && !h->ext) { /* watchdog levels only: nothing but the count to keep */
    h->depth++;
  } else {
    if (ext_need(h, (size_t)h->depth + 1)) {
      if (!h->depth) forget(h);
      return RLOCK_ENOMEM;
    }
    level_t next = h->depth ? top(h) : (level_t){0, 0, 0};
    if (renew) {
      next.nwatch++;
    } else {
      next.lo = max64(next.lo, sent_at + lease_ms);
      next.hi = max64(next.hi, now + lease_ms);
    }
    h->ext->levels[h->depth++] = next;
  }
  if (renew) {
    h->w_lo = max64(h->w_lo, sent_at + lease_ms);
    h->w_hi = max64(h->w_hi, now + lease_ms);
  }
  rearm_at(h, now);
  return 0;
}

void rlock__watchdog_set_renew(watchdog_t *wd, const char *name, size_t len, const char *owner_id, int script,
                               int slack_ms) {
  hold_t *h = find(wd, name, len, owner_id);
  if (h) h->script = (uint8_t)script, h->slack = (uint8_t)slack_ms;
}

static int renew_script(const hold_t *h) { return h->script ? h->script : SCRIPT_RENEW; }

bool rlock__watchdog_kind_is(watchdog_t *wd, const char *name, size_t len, const char *owner_id, int script) {
  hold_t *h = find(wd, name, len, owner_id);
  return !h || renew_script(h) == (script ? script : SCRIPT_RENEW);
}

int64_t rlock__watchdog_count(watchdog_t *wd, const char *name, size_t len, const char *owner_id, int64_t *unknown) {
  hold_t *h = find(wd, name, len, owner_id);
  *unknown = h ? unknown_of(h) : 0;
  return h ? (int64_t)h->depth : 0;
}

bool rlock__watchdog_tracks(watchdog_t *wd, const char *name, size_t len, const char *owner_id) {
  return find(wd, name, len, owner_id) != NULL;
}

int64_t rlock__watchdog_lease(watchdog_t *wd, const char *name, size_t len, const char *owner_id) {
  int64_t wdt = wd->cl->opt.watchdog_timeout_ms;
  hold_t *h = find(wd, name, len, owner_id);
  if (!h || h->depth < 2) return wdt; /* untracked: what a watchdog hold would keep */
  level_t below = level_at(h, h->depth - 2);
  int64_t lease = below.nwatch ? wdt : 0;
  lease = max64(lease, below.hi - rlock_now_ms());
  return lease > 0 ? lease : 1; /* a fixed lease that ran out: expire now */
}

int rlock__watchdog_relet(watchdog_t *wd, const char *name, size_t len, const char *owner_id, int script,
                          int64_t lease_ms, int64_t reply_by, int64_t *ttl) {
  hold_t *h = find(wd, name, len, owner_id);
  if (!h || renew_script(h) != (script ? script : SCRIPT_RENEW))
    return rlock__fail(RLOCK_ENOTHELD, "this client tracks no hold of that lock by this owner");
  if (ext_need(h, h->depth)) return rlock__fail(RLOCK_ENOMEM, "out of memory");
  level_t below = h->depth > 1 ? h->ext->levels[h->depth - 2] : (level_t){0, 0, 0};
  int64_t now = rlock_now_ms();
  *ttl = below.nwatch ? max64(lease_ms, wd->cl->opt.watchdog_timeout_ms) : max64(lease_ms, below.hi - now);
  level_t *t = &h->ext->levels[h->depth - 1];
  t->nwatch = below.nwatch;
  t->lo = max64(below.lo, now + lease_ms);
  t->hi = max64(below.hi, reply_by + *ttl);
  if (!renews(h)) h->w_lo = h->w_hi = 0;
  rearm_at(h, now);
  return 0;
}

void rlock__watchdog_released(watchdog_t *wd, const char *name, size_t len, const char *owner_id, release_t how,
                              int64_t lease_ms) {
  hold_t *h = find(wd, name, len, owner_id);
  if (!h) return;
  switch (how) {
  case REL_ALL: forget(h); return;
  case REL_NOTHELD:
    /* the owner's unlock found none of the holds this client tracks: the
     * hold ended without an unlock by its owner, a loss like any other
     * (rlock.h: the callback reports every such end). A fixed-lease hold is
     * never renewed, so this is where a server that lost it (a restart, a
     * failover to a replica that lacked it, a DEL) is first seen. */
    if (h->depth && rlock_now_ms() >= valid_lo(h)) lost(h, renews(h) ? RLOCK_LOST_RENEWAL_FAILED : RLOCK_LOST_EXPIRED);
    else lost(h, RLOCK_LOST_DELETED);
    return;
  case REL_MISMATCH: lost(h, RLOCK_LOST_COUNT_MISMATCH); return;
  case REL_ONE:
    if (h->ext) h->ext->unknown = 0; /* the script brought the server's count to the client's */
    break;
  case REL_ONE_UNCHECKED: break;
  case REL_UNKNOWN:
    /* no room to count it: the next unlock may then report a count mismatch */
    if (!ext_need(h, h->depth)) h->ext->unknown++;
    break;
  }
  if (h->depth <= 1) { /* the last hold: nobody renews it, its lease frees it */
    if (unknown_of(h)) residue_keep(h, lease_ms);
    forget(h);
    return;
  }
  h->depth--;
  if ((how == REL_ONE || how == REL_ONE_UNCHECKED) && renews(h)) h->w_hi = max64(h->w_hi, rlock_now_ms() + lease_ms);
  rearm(h);
}

int rlock__watchdog_valid_until(watchdog_t *wd, const char *name, size_t len, const char *owner_id, int64_t *out) {
  hold_t *h = find(wd, name, len, owner_id);
  if (!h) return rlock__fail(RLOCK_ENOTHELD, "this client tracks no hold of that lock by this owner");
  *out = valid_lo(h);
  return 0;
}

void rlock__watchdog_forget(watchdog_t *wd, const char *name, size_t len) {
  for (size_t i = 0; i < wd->holds.nbuckets; i++) {
    for (hold_t *h = wd->holds.buckets[i], *n; h; h = n) {
      n = h->hnext;
      if (h->nlen == len && !memcmp(h->name, name, len)) lost(h, RLOCK_LOST_FORCE_UNLOCKED);
    }
  }
}

/* ---------------------------------------------------------------- renewal */

static batch_t *batch_new(watchdog_t *wd) {
  batch_t *b = calloc(1, sizeof *b + RENEW_BATCH * sizeof b->holds[0]);
  if (b) b->wd = wd;
  return b;
}

static void batch_add(batch_t *b, hold_t *h) {
  b->holds[b->n++] = h;
  h->pins++;
}

static void batch_free(batch_t *b) {
  for (size_t i = 0; i < b->n; i++) {
    hold_t *h = b->holds[i];
    if (!--h->pins && h->dead) hold_mem_free(h);
  }
  free(b);
}

/* A renewal applied on the master that fewer replicas acknowledged than the
 * policy needs: it stands (the hold is valid on the master), the miss is
 * counted, and the node's replica count read again. */
static void renewal_sync_missed(batch_t *b) {
  size_t len;
  const char *name = hold_name(b->holds[0], &len); /* a dead hold keeps its name */
  stat_add(b->wd->cl, ST_RENEWAL_SYNC_MISSES, 1);
  rlock__client_sync_refresh(b->wd->cl, name, len);
}

static void round_step(watchdog_t *wd);
static void batch_send(watchdog_t *wd, int script, batch_t *b);
static bool due(const hold_t *h);
static bool fixed_due(const hold_t *h, int64_t now);

/* b's live holds, each in a call of its own. */
static void renew_one_by_one(const batch_t *b) {
  RLOCK__ASSERT(b->n > 1); /* only a batch of several keys is split */
  for (size_t i = 0; i < b->n; i++) {
    hold_t *h = b->holds[i];
    if (h->dead || (b->fixed ? !fixed_due(h, rlock_now_ms()) : !due(h))) continue;
    batch_t *one = batch_new(b->wd);
    if (!one) return; /* out of memory: the next round tries again */
    batch_add(one, h);
    one->fixed = b->fixed;
    batch_send(b->wd, b->script, one);
  }
}

static void renew_done(req_t *r, int status, rlock_reply_t *reply) {
  batch_t *b = r->ctx;
  watchdog_t *wd = b->wd;
  int acked;
  /* fast unlocks in flight or done: not losses (fast.c). Not while a round
   * step walks the registry (a call that failed at once, inside batch_send:
   * no answer to read, and the drain could free a hold the walk is on) */
  if (!wd->stepping) rlock__fast_drain(wd->cl);
  if (status == 0 && !rlock__client_sync_split(&b->sync_need, &reply, &acked) && wd->cl->cmd.state != CS_CLOSED)
    renewal_sync_missed(b);
  /* the script's reply: one character per hold, '1' renewed, '0' gone */
  if (status == 0 && reply && reply->type == RLOCK_REPLY_STRING && reply->len == b->n &&
      wd->cl->cmd.state != CS_CLOSED) {
    int64_t lease = wd->cl->opt.watchdog_timeout_ms, now = rlock_now_ms(), renewed = 0;
    for (size_t i = 0; i < b->n; i++) {
      hold_t *h = b->holds[i];
      if (h->dead || (!renews(h) && !b->fixed)) continue; /* released since (a new hold is another hold_t) */
      if (b->fixed && reply->str[i] == '1') continue;     /* still held: its own lease stands */
      if (reply->str[i] == '1') {
        h->w_lo = max64(h->w_lo, b->sent_at + lease - h->slack);
        h->w_hi = max64(h->w_hi, now + lease);
        rearm_at(h, now);
        renewed++;
      } else if (reply->str[i] == '0') {
        size_t hl;
        const char *hn = hold_name(h, &hl);
        /* gone because a fast unlock of it ran first (fast.c): not a loss */
        if (!h->o || !rlock__fast_releasing(wd->cl, hn, hl, h->o->id, h->o->len)) lost(h, RLOCK_LOST_DELETED);
      } /* anything else: not our script's answer, changes nothing */
    }
    stat_add(wd->cl, ST_RENEWED, renewed);
  }
  /* A batch whose keys are on two nodes (Cluster: its slot migrating, some
   * keys moved, TRYAGAIN) did not run: each hold of it at once on its own,
   * where its key is (ASK followed), so none runs out while the slot moves. */
  if (status == RLOCK_ECONNECT && r->split && wd->cl->cmd.state != CS_CLOSED) renew_one_by_one(b);
  /* A failed renewal changes nothing: the next round tries again, and the
   * expire timer reports the loss once the lease has certainly run out. */
  rlock_reply_free(reply);
  batch_free(b);
  wd->inflight--;
  round_step(wd);
}

/* Sends b (its holds pinned) as one call of script; b is the request's now. */
static void batch_send(watchdog_t *wd, int script, batch_t *b) {
  client_t *cl = wd->cl;
  const char *keys[RENEW_BATCH], *args[RENEW_BATCH + 2];
  size_t kl[RENEW_BATCH], al[RENEW_BATCH + 2], n = 0;
  char lease[32], wall[32];
  int64_t now = rlock_now_ms();
  for (size_t i = 0; i < b->n; i++) { /* forgotten while the call was filled */
    hold_t *h = b->holds[i];
    if (!h->dead && (!b->fixed || fixed_due(h, now))) {
      b->holds[n++] = h;
    } else if (!--h->pins && h->dead) {
      hold_mem_free(h);
    }
  }
  if (!(b->n = n)) {
    free(b);
    return;
  }
  /* A check of fixed-lease holds only asks ('?': no TTL touched). Any lease
   * would extend a hold the server reaches late (writes paused, a slow
   * script ahead): past the end its acquire set, which its owner's expire
   * timer reports as the loss; so each hold keeps exactly its own TTL. */
  if (b->fixed) snprintf(lease, sizeof lease, "?");
  else rlock__i64toa(cl->opt.watchdog_timeout_ms, lease);
  args[0] = lease, al[0] = strlen(lease);
  for (size_t i = 0; i < n; i++) {
    const hold_t *h = b->holds[i];
    keys[i] = h->name, kl[i] = h->nlen;
    args[i + 1] = h->o->id, al[i + 1] = h->o->len;
  }
  b->sent_at = rlock_now_ms();
  b->script = script;
  /* A kind whose expiry the clients judge on their wall clocks (the permit
   * semaphore): the renewal's time is this client's wall clock, read after
   * sent_at (the score then ends no earlier than sent_at + lease on it), not
   * the server's, which another client's reclaim never reads. */
  int nargs = (int)n + 1;
  if (b->holds[0]->slack) {
    al[nargs] = rlock__i64toa(rlock__client_wall_ms(), wall);
    args[nargs++] = wall;
  }
  req_t *r = rlock__script_req(script, (int)n, keys, kl, nargs, args, al, cl->opt.command_timeout_ms, renew_done, b);
  if (!r) {
    batch_free(b);
    return;
  }
  r->ahead = true;       /* never waits behind the requests queued during an outage (client.c's check) */
  r->splittable = n > 1; /* Cluster: TRYAGAIN sends its holds one by one */
  wd->inflight++;
  stat_add(cl, ST_RENEWALS, 1);
  stat_add(cl, ST_SCRIPTS, 1);
  rlock__client_send_synced(cl, keys[0], kl[0], r, &b->sync_need); /* one slot per batch where slots matter */
}

/* The holds of one renew script, in RENEW_BATCH calls of one slot each
 * (Cluster). */
static void renew_group(watchdog_t *wd, int script, hold_t **hs, size_t n) {
  size_t first, count;
  uint16_t *slots = malloc(n * sizeof *slots);
  batcher_t bt;
  /* out of memory: this round is skipped; the next one (a third of the
   * lease later) tries again, and the expire timers report a loss */
  if (!slots) return;
  for (size_t i = 0; i < n; i++) slots[i] = rlock__names_slot(hs[i]->name, hs[i]->nlen);
  if (!rlock__batcher_init(&bt, slots, n, RENEW_BATCH)) {
    while (rlock__batcher_next(&bt, &first, &count)) {
      batch_t *b = batch_new(wd);
      if (!b) continue;
      for (size_t i = 0; i < count; i++) batch_add(b, hs[batcher_item(&bt, first + i)]);
      batch_send(wd, script, b);
    }
    rlock__batcher_free(&bt);
  }
  free(slots);
}

static bool due(const hold_t *h) { return renews(h) && h->pins < MAX_PINS; }

/* A fixed-lease hold a check can ask about: its lease surely runs a while
 * yet (one that may have run out is the expire timer's). */
static bool fixed_due(const hold_t *h, int64_t now) {
  return h->depth && !renews(h) && h->pins < MAX_PINS && valid_lo(h) - now > 1;
}

/* Cluster: every watchdog hold, in one pass over the registry, grouped by
 * its renew script, then by slot; all calls at once. */
static void renew_slotted(watchdog_t *wd) {
  size_t n[SCRIPT_N + 1] = {0}, total = wd->holds.count, k = 0;
  hold_t **all = malloc(total * sizeof *all), **group = malloc(total * sizeof *group);
  uint8_t *which = malloc(total);
  if (!all || !group || !which) goto out; /* out of memory: as above */
  for (size_t i = 0; i < wd->holds.nbuckets; i++) {
    for (hold_t *h = wd->holds.buckets[i]; h; h = h->hnext) {
      if (!due(h)) continue;
      all[k] = h;
      which[k] = (uint8_t)renew_script(h);
      n[which[k++]]++;
    }
  }
  for (int s = 1; s <= SCRIPT_N; s++) {
    if (!n[s]) continue;
    size_t m = 0;
    for (size_t i = 0; i < k; i++)
      if (which[i] == s) group[m++] = all[i];
    renew_group(wd, s, group, m);
  }
out:
  free(all), free(group), free(which);
}

/* A round walks the registry bucket by bucket, straight into the calls of
 * each hold's renew script, and keeps at most RENEW_WINDOW calls in flight:
 * each reply sends the next. So a round of 100,000 holds (200 calls, 7 MB
 * of requests) never sits formatted in memory at once, and the lock
 * requests in between wait behind a few calls, not all of them. The table
 * does not grow during a round (its walk stays valid); new holds it misses
 * were just taken. */
static void round_step(watchdog_t *wd) {
  if (wd->stepping) return; /* a call that failed at once, inside batch_send: the loop goes on */
  wd->stepping = true;
  while (wd->round_on && wd->inflight < RENEW_WINDOW) {
    if (wd->round_at >= wd->holds.nbuckets) {
      for (int s = 1; s <= SCRIPT_N; s++) {
        if (wd->cur[s]) batch_send(wd, s, wd->cur[s]), wd->cur[s] = NULL;
        if (wd->cur_fixed[s]) batch_send(wd, s, wd->cur_fixed[s]), wd->cur_fixed[s] = NULL;
      }
      wd->round_on = wd->round_again;
      wd->round_again = false;
      wd->round_at = 0;
      continue;
    }
    int64_t now = rlock_now_ms();
    for (hold_t *h = wd->holds.buckets[wd->round_at++]; h; h = h->hnext) {
      if (wd->check && fixed_due(h, now)) { /* after a reconnect: is it still there? */
        int s = renew_script(h);
        if (!wd->cur_fixed[s] && !(wd->cur_fixed[s] = batch_new(wd)))
          continue; /* out of memory: its unlock or lease tells */
        wd->cur_fixed[s]->fixed = true;
        batch_add(wd->cur_fixed[s], h);
        if (wd->cur_fixed[s]->n == RENEW_BATCH) batch_send(wd, s, wd->cur_fixed[s]), wd->cur_fixed[s] = NULL;
        continue;
      }
      if (!due(h)) continue;
      int s = renew_script(h);
      if (!wd->cur[s] && !(wd->cur[s] = batch_new(wd))) continue; /* out of memory: as above */
      batch_add(wd->cur[s], h);
      if (wd->cur[s]->n == RENEW_BATCH) batch_send(wd, s, wd->cur[s]), wd->cur[s] = NULL;
    }
  }
  wd->stepping = false;
  if (wd->check && !wd->round_on && !wd->inflight) { /* every hold was asked about */
    wd->check = false;
    rlock__client_checked(wd->cl);
  }
}

/* A round now: one under way goes on, and a full one follows it (never
 * from the start again: a connection that drops again and again before a
 * round ends would leave the registry's tail unrenewed). */
static void round_start(watchdog_t *wd) {
  if (wd->cl->topo->slots_matter) {
    if (wd->holds.count) renew_slotted(wd);
  } else {
    if (wd->round_on) {
      wd->round_again = true;
    } else {
      wd->round_on = true;
      wd->round_at = 0;
    }
    round_step(wd);
  }
  rlock__client_flush(wd->cl);
}

/* A round at once (a reconnect). */
void rlock__watchdog_renew_now(watchdog_t *wd) { round_start(wd); }

/* A round at once whose calls go ahead of the queued requests, and the
 * client told once it (and a round under way, which a full one follows)
 * has asked about every hold. One server or Sentinel only (round_step). */
void rlock__watchdog_check_now(watchdog_t *wd) {
  wd->check = true;
  round_start(wd);
}

static void tick_cb(evutil_socket_t fd, short what, void *arg) {
  residue_prune(arg);
  owners_prune(arg, false);
  round_start(arg);
}

int rlock__watchdog_init(watchdog_t *wd, client_t *cl) {
  memset(wd, 0, sizeof *wd);
  wd->cl = cl;
  pthread_mutex_init(&wd->lmu, NULL);
  rlock__map_init(&wd->owners);
  rlock__map_init(&wd->residue);
  wd->tick = event_new(cl->base, -1, EV_PERSIST, tick_cb, wd);
  wd->expire = event_new(cl->base, -1, 0, queue_cb, wd);
  if (!wd->tick || !wd->expire) return RLOCK_ENOMEM;
  struct timeval tv;
  int64_t period = cl->opt.watchdog_timeout_ms / 3;
  rlock__tv_from_ms(&tv, period > 0 ? period : 1);
  evtimer_add(wd->tick, &tv);
  return 0;
}

void rlock__watchdog_close(watchdog_t *wd) {
  if (wd->tick) event_free(wd->tick);
  wd->tick = NULL;
  for (int s = 0; s <= SCRIPT_N; s++) {
    if (wd->cur[s]) batch_free(wd->cur[s]), wd->cur[s] = NULL;
    if (wd->cur_fixed[s]) batch_free(wd->cur_fixed[s]), wd->cur_fixed[s] = NULL;
  }
  wd->round_on = false;
  for (size_t i = 0; i < wd->holds.nbuckets; i++) {
    for (hold_t *h = wd->holds.buckets[i], *n; h; h = n) {
      n = h->hnext;
      hold_free(h);
    }
  }
  free(wd->holds.buckets);
  memset(&wd->holds, 0, sizeof wd->holds);
  wd->qhead = wd->qtail = NULL;
  if (wd->expire) event_free(wd->expire);
  wd->expire = NULL;
  if (wd->spare_ev) event_free(wd->spare_ev);
  wd->spare_ev = NULL;
  if (wd->spare) hold_mem_free(wd->spare);
  wd->spare = NULL;
  owners_prune(wd, true);
  rlock__map_free(&wd->owners);
  map_iter_t it;
  rlock__map_iter_init(&it, &wd->residue);
  for (map_entry_t *e; (e = rlock__map_iter_next(&it));) free(e->value);
  rlock__map_free(&wd->residue);
  free(wd->listeners);
  wd->listeners = NULL;
  wd->nlisteners = 0;
  pthread_mutex_destroy(&wd->lmu);
}
