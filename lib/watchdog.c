/* watchdog.c -- the registry of holds this client has taken, keyed by
 * (owner id, name): the client's own hold count, lease renewal for watchdog
 * holds, batched (up to RENEW_BATCH holds per call of the kind's renew
 * script, reentrant_renew.lua or simple_renew.lua, every watchdog_timeout/3), the valid-until deadline of each hold, and the
 * lock-lost notification (with its reason) when a renewal finds the hold
 * gone, the lease has certainly run out, or an unlock found a count other
 * than the client's. With the replica-sync check a renewal carries WAIT; one
 * that too few replicas acknowledged stands and is counted.
 *
 * A hold is a stack of levels, one per acquire of that owner (reentrancy):
 * each level keeps the running maxima of the fixed leases below and at it,
 * and how many of them asked for the watchdog. So the hold is renewed while
 * any level asked for the watchdog, and an unlock that leaves levels knows
 * in O(1) which TTL the rest still needs.
 * I/O thread only. A renewal can never extend a released lock: the script
 * only touches a key where the owner's field still exists. */
#include "internal.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RENEW_BATCH 500

typedef struct level {
  int64_t lo, hi;  /* max over the fixed-lease levels up to here of send + lease and
                      reply + lease (0: none) */
  int64_t nwatch;  /* watchdog levels up to here */
} level_t;

#define INLINE_LEVELS 2 /* most holds are one or two acquires deep */

/* One allocation per hold: the struct, its expiry event (event_assign) and
 * its key; levels beyond INLINE_LEVELS move to the heap. */
struct hold {
  watchdog_t *wd;
  char *key; /* "<owner id>\n<name>" : the map key, stored after the event */
  size_t klen, olen; /* owner id is key[0..olen) ; name follows the '\n' */
  uint64_t owner;
  level_t *levels; /* the client's hold count is depth; inline or on the heap */
  size_t depth, cap;
  level_t inline_levels[INLINE_LEVELS];
  int64_t w_lo, w_hi; /* watchdog lease: last acquire/renewal send + lease, reply + lease */
  int64_t unknown;    /* releases with an unknown outcome, counted as done */
  struct event *expire; /* fires when the lease has certainly run out */
  int script;           /* its kind's renew script (0: SCRIPT_RENEW) */
  unsigned pins;        /* renewal batches in flight that name it */
  bool dead;            /* forgotten while pinned: the last batch frees it */
};

/* A renewal call in flight: it pins its holds (a hold forgotten meanwhile
 * stays in memory, marked dead, until the batch is done), so the reply is
 * matched to them without a lookup. */
typedef struct batch {
  watchdog_t *wd;
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
  *len = h->klen - h->olen - 1;
  return h->key + h->olen + 1;
}

static const level_t *top(const hold_t *h) { return &h->levels[h->depth - 1]; }
static bool renews(const hold_t *h) { return h->depth && top(h)->nwatch > 0; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* The earliest the server's lease can end: the last moment the hold is surely valid. */
static int64_t valid_lo(const hold_t *h) {
  return renews(h) ? max64(top(h)->lo, h->w_lo) : top(h)->lo;
}

/* The latest the server's lease can end. */
static int64_t valid_hi(const hold_t *h) {
  return renews(h) ? max64(top(h)->hi, h->w_hi) : top(h)->hi;
}

/* The registry key "<owner id>\n<name>" into k (strlen(owner_id) + 1 + len bytes). */
static size_t fill_key(char *k, const char *owner_id, const char *name, size_t len) {
  size_t ol = strlen(owner_id);
  memcpy(k, owner_id, ol);
  k[ol] = '\n';
  memcpy(k + ol + 1, name, len);
  return ol + 1 + len;
}


static void hold_mem_free(hold_t *h) {
  event_del(h->expire);
  if (h->levels != h->inline_levels) free(h->levels);
  free(h);
}

/* The hold is no longer tracked (already out of the map); a renewal batch
 * that still names it frees it when its reply is in. */
static void hold_free(hold_t *h) {
  stat_add(h->wd->cl, ST_HELD, -1);
  if (!h->pins) {
    hold_mem_free(h);
    return;
  }
  event_del(h->expire);
  h->dead = true;
}

static void forget(hold_t *h) {
  rlock__map_del(&h->wd->holds, h->key, h->klen);
  hold_free(h);
}

/* Releases whose outcome is unknown outlive their hold: the last hold is
 * forgotten (its lease frees it), but until that lease can have run out the
 * server may still count it. If the owner takes the lock again meanwhile,
 * the new hold inherits them, so the unlock that frees the lock takes that
 * surplus for what it is, not for a loss. */
typedef struct residue {
  int64_t unknown, until;
} residue_t;

static void residue_keep(hold_t *h, int64_t lease_ms) {
  residue_t *r = malloc(sizeof *r);
  if (!r) return; /* the next unlock may then report a count mismatch: still freed */
  r->unknown = h->unknown;
  /* a renewal or unlock still in flight may push the server's TTL to a
   * lease from about now */
  r->until = max64(valid_hi(h), rlock_now_ms() + lease_ms);
  free(rlock__map_del(&h->wd->residue, h->key, h->klen));
  if (rlock__map_put(&h->wd->residue, h->key, h->klen, r)) free(r);
}

/* A new hold whose acquire was sent at sent_at: the server applied it after
 * that, so the old count can only be there if sent_at < until. */
static int64_t residue_take(watchdog_t *wd, const char *key, size_t klen, int64_t sent_at) {
  residue_t *r = rlock__map_del(&wd->residue, key, klen);
  int64_t n = r && sent_at < r->until ? r->unknown : 0;
  free(r);
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

static void tell_listeners(watchdog_t *wd, const char *name, size_t len, uint64_t owner,
                           rlock_lost_reason_t reason) {
  pthread_mutex_lock(&wd->lmu);
  for (size_t i = 0; i < wd->nlisteners; i++) wd->listeners[i].fn(wd->cl, name, len, owner, reason, wd->listeners[i].arg);
  pthread_mutex_unlock(&wd->lmu);
}

static void lost(hold_t *h, rlock_lost_reason_t reason) {
  watchdog_t *wd = h->wd;
  rlock__map_del(&wd->holds, h->key, h->klen);
  stat_add(wd->cl, ST_LOST, 1);
  size_t len;
  const char *name = hold_name(h, &len);
  rlock__client_lost(wd->cl, name, len, h->owner, reason);
  tell_listeners(wd, name, len, h->owner, reason);
  hold_free(h);
}

static void rearm_at(hold_t *h, int64_t now);

static void expire_cb(evutil_socket_t fd, short what, void *arg) {
  hold_t *h = arg;
  int64_t now = rlock_now_ms();
  /* a common-timeout deadline counts from the loop's cached time, which can
   * be a little older than the moment the lease was extended: early, wait
   * the rest */
  if (now < valid_hi(h)) rearm_at(h, now);
  else lost(h, renews(h) ? RLOCK_LOST_RENEWAL_FAILED : RLOCK_LOST_EXPIRED);
}

/* The expiry timer at the latest moment the server's lease can still run.
 * The usual case, a watchdog lease just extended to now + watchdog_timeout,
 * uses libevent's common timeout for that duration: a queue in deadline
 * order, O(1) to move a hold to its end, instead of the timer heap (100,000
 * holds renewed every third of the lease made heap updates the watchdog's
 * main cost). */
static void rearm_at(hold_t *h, int64_t now) {
  watchdog_t *wd = h->wd;
  int64_t left = valid_hi(h) - now;
  if (wd->common_lease && left == wd->cl->opt.watchdog_timeout_ms) {
    evtimer_add(h->expire, wd->common_lease);
    return;
  }
  struct timeval tv;
  rlock__tv_from_ms(&tv, left);
  evtimer_add(h->expire, &tv);
}

static void rearm(hold_t *h) { rearm_at(h, rlock_now_ms()); }

/* The expiry event sits right after the struct, the key after the event. */
static size_t event_offset(void) {
  size_t a = _Alignof(max_align_t);
  return (sizeof(hold_t) + a - 1) / a * a;
}

static hold_t *hold_new(watchdog_t *wd, const char *owner_id, const char *name, size_t len, uint64_t owner) {
  size_t olen = strlen(owner_id), esize = event_get_struct_event_size();
  hold_t *h = calloc(1, event_offset() + esize + olen + 1 + len);
  if (!h) return NULL;
  h->wd = wd;
  h->expire = (struct event *)((char *)h + event_offset());
  h->key = (char *)h->expire + esize;
  h->klen = fill_key(h->key, owner_id, name, len);
  h->olen = olen;
  h->owner = owner;
  h->levels = h->inline_levels;
  h->cap = INLINE_LEVELS;
  if (event_assign(h->expire, wd->cl->base, -1, 0, expire_cb, h) || rlock__map_put(&wd->holds, h->key, h->klen, h)) {
    free(h);
    return NULL;
  }
  stat_add(wd->cl, ST_HELD, 1);
  return h;
}

/* Lookups run on every unlock: short keys are built on the stack. */
static hold_t *find(watchdog_t *wd, const char *name, size_t len, const char *owner_id) {
  char stack[512];
  size_t klen = strlen(owner_id) + 1 + len;
  char *key = klen <= sizeof stack ? stack : malloc(klen);
  if (!key) return NULL;
  fill_key(key, owner_id, name, len);
  hold_t *h = rlock__map_get(&wd->holds, key, klen);
  if (key != stack) free(key);
  return h;
}

int rlock__watchdog_acquired(watchdog_t *wd, const char *name, size_t len, uint64_t owner,
                      const char *owner_id, int64_t lease_ms, bool renew, int64_t sent_at) {
  hold_t *h = find(wd, name, len, owner_id);
  if (!h) {
    if (!(h = hold_new(wd, owner_id, name, len, owner))) return RLOCK_ENOMEM;
    h->unknown = residue_take(wd, h->key, h->klen, sent_at);
  }
  if (h->depth == h->cap) {
    size_t cap = h->cap * 2;
    bool inl = h->levels == h->inline_levels;
    level_t *lv = realloc(inl ? NULL : h->levels, cap * sizeof *lv);
    if (!lv) {
      if (!h->depth) forget(h);
      return RLOCK_ENOMEM;
    }
    if (inl) memcpy(lv, h->inline_levels, sizeof h->inline_levels);
    h->levels = lv;
    h->cap = cap;
  }
  level_t next = h->depth ? *top(h) : (level_t){0, 0, 0};
  /* The server set the TTL at most now (the reply is here) and never
   * shortened it (reentrant_acquire.lua): valid from send + lease to now + lease. */
  int64_t now = rlock_now_ms();
  if (renew) {
    next.nwatch++;
    h->w_lo = max64(h->w_lo, sent_at + lease_ms);
    h->w_hi = max64(h->w_hi, now + lease_ms);
  } else {
    next.lo = max64(next.lo, sent_at + lease_ms);
    next.hi = max64(next.hi, now + lease_ms);
  }
  h->levels[h->depth++] = next;
  rearm(h);
  return 0;
}

void rlock__watchdog_set_renew(watchdog_t *wd, const char *name, size_t len, const char *owner_id,
                               int script) {
  hold_t *h = find(wd, name, len, owner_id);
  if (h) h->script = script;
}

static int renew_script(const hold_t *h) { return h->script ? h->script : SCRIPT_RENEW; }

bool rlock__watchdog_kind_is(watchdog_t *wd, const char *name, size_t len, const char *owner_id, int script) {
  hold_t *h = find(wd, name, len, owner_id);
  return !h || renew_script(h) == (script ? script : SCRIPT_RENEW);
}

int64_t rlock__watchdog_count(watchdog_t *wd, const char *name, size_t len, const char *owner_id,
                       int64_t *unknown) {
  hold_t *h = find(wd, name, len, owner_id);
  *unknown = h ? h->unknown : 0;
  return h ? (int64_t)h->depth : 0;
}

int64_t rlock__watchdog_lease(watchdog_t *wd, const char *name, size_t len, const char *owner_id) {
  int64_t wdt = wd->cl->opt.watchdog_timeout_ms;
  hold_t *h = find(wd, name, len, owner_id);
  if (!h || h->depth < 2) return wdt; /* untracked: what a watchdog hold would keep */
  const level_t *below = &h->levels[h->depth - 2];
  int64_t lease = below->nwatch ? wdt : 0;
  lease = max64(lease, below->hi - rlock_now_ms());
  return lease > 0 ? lease : 1; /* a fixed lease that ran out: expire now */
}

int rlock__watchdog_relet(watchdog_t *wd, const char *name, size_t len, const char *owner_id, int script,
                          int64_t lease_ms, int64_t reply_by, int64_t *ttl) {
  hold_t *h = find(wd, name, len, owner_id);
  if (!h || renew_script(h) != (script ? script : SCRIPT_RENEW))
    return rlock__fail(RLOCK_ENOTHELD, "this client tracks no hold of that lock by this owner");
  level_t below = h->depth > 1 ? h->levels[h->depth - 2] : (level_t){0, 0, 0};
  int64_t now = rlock_now_ms();
  *ttl = below.nwatch ? max64(lease_ms, wd->cl->opt.watchdog_timeout_ms) : max64(lease_ms, below.hi - now);
  level_t *t = &h->levels[h->depth - 1];
  t->nwatch = below.nwatch;
  t->lo = max64(below.lo, now + lease_ms);
  t->hi = max64(below.hi, reply_by + *ttl);
  if (!renews(h)) h->w_lo = h->w_hi = 0;
  rearm(h);
  return 0;
}

void rlock__watchdog_released(watchdog_t *wd, const char *name, size_t len, const char *owner_id,
                       release_t how, int64_t lease_ms) {
  hold_t *h = find(wd, name, len, owner_id);
  if (!h) return;
  switch (how) {
  case REL_ALL:
  case REL_NOTHELD:
    forget(h);
    return;
  case REL_MISMATCH:
    lost(h, RLOCK_LOST_COUNT_MISMATCH);
    return;
  case REL_ONE:
    h->unknown = 0; /* the script brought the server's count to the client's */
    break;
  case REL_ONE_UNCHECKED:
    break;
  case REL_UNKNOWN:
    h->unknown++;
    break;
  }
  if (h->depth <= 1) { /* the last hold: nobody renews it, its lease frees it */
    if (h->unknown) residue_keep(h, lease_ms);
    forget(h);
    return;
  }
  h->depth--;
  if ((how == REL_ONE || how == REL_ONE_UNCHECKED) && renews(h)) h->w_hi = max64(h->w_hi, rlock_now_ms() + lease_ms);
  rearm(h);
}

int rlock__watchdog_valid_until(watchdog_t *wd, const char *name, size_t len, const char *owner_id,
                         int64_t *out) {
  hold_t *h = find(wd, name, len, owner_id);
  if (!h) return rlock__fail(RLOCK_ENOTHELD, "this client tracks no hold of that lock by this owner");
  *out = valid_lo(h);
  return 0;
}

void rlock__watchdog_forget(watchdog_t *wd, const char *name, size_t len) {
  map_iter_t it;
  rlock__map_iter_init(&it, &wd->holds);
  for (map_entry_t *e; (e = rlock__map_iter_next(&it));) {
    hold_t *h = e->value;
    size_t hl;
    const char *hn = hold_name(h, &hl);
    if (hl == len && !memcmp(hn, name, len)) lost(h, RLOCK_LOST_FORCE_UNLOCKED);
  }
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

static void renew_done(req_t *r, int status, rlock_reply_t *reply) {
  batch_t *b = r->ctx;
  watchdog_t *wd = b->wd;
  int acked;
  rlock__fast_drain(wd->cl); /* fast unlocks in flight or done: not losses (fast.c) */
  if (status == 0 && !rlock__client_sync_split(&b->sync_need, &reply, &acked) && wd->cl->cmd.state != CS_CLOSED)
    renewal_sync_missed(b);
  /* the script's reply: one character per hold, '1' renewed, '0' gone */
  if (status == 0 && reply && reply->type == RLOCK_REPLY_STRING && reply->len == b->n &&
      wd->cl->cmd.state != CS_CLOSED) {
    int64_t lease = wd->cl->opt.watchdog_timeout_ms, now = rlock_now_ms();
    for (size_t i = 0; i < b->n; i++) {
      hold_t *h = b->holds[i];
      if (h->dead || !renews(h)) continue; /* released since (a new hold is another hold_t) */
      if (reply->str[i] == '1') {
        h->w_lo = max64(h->w_lo, b->sent_at + lease);
        h->w_hi = max64(h->w_hi, now + lease);
        rearm_at(h, now);
        stat_add(wd->cl, ST_RENEWED, 1);
      } else if (reply->str[i] == '0') {
        size_t hl;
        const char *hn = hold_name(h, &hl);
        /* gone because a fast unlock of it ran first (fast.c): not a loss */
        if (!rlock__fast_releasing(wd->cl, hn, hl, h->key, h->olen)) lost(h, RLOCK_LOST_DELETED);
      } /* anything else: not our script's answer, changes nothing */
    }
  }
  /* A failed renewal changes nothing: the next round tries again, and the
   * expire timer reports the loss once the lease has certainly run out. */
  rlock_reply_free(reply);
  batch_free(b);
}

static void send_batch(watchdog_t *wd, int script, hold_t **hs, size_t n) {
  client_t *cl = wd->cl;
  batch_t *b = calloc(1, sizeof *b + n * sizeof b->holds[0]);
  const char **keys = malloc(n * sizeof *keys), **args = malloc((n + 1) * sizeof *args);
  size_t *kl = malloc(n * sizeof *kl), *al = malloc((n + 1) * sizeof *al);
  char lease[32];
  if (!b || !keys || !args || !kl || !al) goto out;
  b->wd = wd;
  rlock__i64toa(cl->opt.watchdog_timeout_ms, lease);
  args[0] = lease, al[0] = strlen(lease);
  for (size_t i = 0; i < n; i++) {
    keys[i] = hold_name(hs[i], &kl[i]);
    args[i + 1] = hs[i]->key, al[i + 1] = hs[i]->olen;
    b->holds[i] = hs[i];
    hs[i]->pins++;
    b->n = i + 1;
  }
  b->sent_at = rlock_now_ms();
  req_t *r = rlock__script_req(script, (int)n, keys, kl, (int)n + 1, args, al, cl->opt.command_timeout_ms,
                        renew_done, b);
  if (!r) goto out;
  stat_add(cl, ST_RENEWALS, 1);
  stat_add(cl, ST_SCRIPTS, 1);
  rlock__client_send_synced(cl, keys[0], kl[0], r, &b->sync_need); /* one slot per batch where slots matter */
  b = NULL;
out:
  if (b) batch_free(b);
  free(keys), free(args), free(kl), free(al);
}

/* The holds of one renew script, in RENEW_BATCH calls (one slot per call
 * where the topology says slots matter). */
static void renew_group(watchdog_t *wd, int script, hold_t **hs, size_t n) {
  size_t first, count;
  uint16_t *slots = NULL;
  batcher_t b;
  if (wd->cl->topo->slots_matter) {
    /* out of memory: this round is skipped; the next one (a third of the
     * lease later) tries again, and the expire timers report a loss */
    if (!(slots = malloc(n * sizeof *slots))) return;
    for (size_t i = 0; i < n; i++) {
      size_t len;
      const char *name = hold_name(hs[i], &len);
      slots[i] = rlock__names_slot(name, len);
    }
  }
  if (!rlock__batcher_init(&b, slots, n, RENEW_BATCH)) {
    while (rlock__batcher_next(&b, &first, &count)) {
      hold_t *batch[RENEW_BATCH];
      for (size_t i = 0; i < count; i++) batch[i] = hs[batcher_item(&b, first + i)];
      send_batch(wd, script, batch, count);
    }
    rlock__batcher_free(&b);
  }
  free(slots);
}

/* One round: every watchdog hold, grouped by its kind's renew script, in one
 * pass over the registry (with 100,000 holds every pass is cache misses). */
void rlock__watchdog_renew_now(watchdog_t *wd) {
  size_t n[SCRIPT_N + 1] = {0}, total = wd->holds.count;
  hold_t **all = total ? malloc(total * sizeof *all) : NULL;
  int *which = total ? malloc(total * sizeof *which) : NULL;
  hold_t **group = total ? malloc(total * sizeof *group) : NULL;
  size_t k = 0;
  if (!all || !which || !group) goto out; /* out of memory: as above */
  map_iter_t it;
  rlock__map_iter_init(&it, &wd->holds);
  for (map_entry_t *e; (e = rlock__map_iter_next(&it));) {
    hold_t *h = e->value;
    if (!renews(h)) continue;
    all[k] = h;
    which[k] = renew_script(h);
    n[which[k++]]++;
  }
  for (int s = 1; s <= SCRIPT_N; s++) {
    if (!n[s]) continue;
    size_t m = 0;
    for (size_t i = 0; i < k; i++)
      if (which[i] == s) group[m++] = all[i];
    renew_group(wd, s, group, m);
  }
out:
  free(all);
  free(which);
  free(group);
  rlock__client_flush(wd->cl);
}

static void tick_cb(evutil_socket_t fd, short what, void *arg) {
  residue_prune(arg);
  rlock__watchdog_renew_now(arg);
}

int rlock__watchdog_init(watchdog_t *wd, client_t *cl) {
  memset(wd, 0, sizeof *wd);
  wd->cl = cl;
  pthread_mutex_init(&wd->lmu, NULL);
  rlock__map_init(&wd->holds);
  rlock__map_init(&wd->residue);
  wd->tick = event_new(cl->base, -1, EV_PERSIST, tick_cb, wd);
  if (!wd->tick) return RLOCK_ENOMEM;
  struct timeval tv;
  rlock__tv_from_ms(&tv, cl->opt.watchdog_timeout_ms);
  wd->common_lease = event_base_init_common_timeout(cl->base, &tv); /* NULL: the heap for all */
  int64_t period = cl->opt.watchdog_timeout_ms / 3;
  rlock__tv_from_ms(&tv, period > 0 ? period : 1);
  evtimer_add(wd->tick, &tv);
  return 0;
}

void rlock__watchdog_close(watchdog_t *wd) {
  if (wd->tick) event_free(wd->tick);
  wd->tick = NULL;
  map_iter_t it;
  rlock__map_iter_init(&it, &wd->holds);
  for (map_entry_t *e; (e = rlock__map_iter_next(&it));) hold_free(e->value);
  rlock__map_free(&wd->holds);
  rlock__map_iter_init(&it, &wd->residue);
  for (map_entry_t *e; (e = rlock__map_iter_next(&it));) free(e->value);
  rlock__map_free(&wd->residue);
  free(wd->listeners);
  wd->listeners = NULL;
  wd->nlisteners = 0;
  pthread_mutex_destroy(&wd->lmu);
}
