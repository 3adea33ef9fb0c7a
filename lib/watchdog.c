/* watchdog.c -- the registry of holds this client has taken, keyed by
 * (owner id, name): lease renewal for watchdog holds, batched (up to
 * RENEW_BATCH holds per lock_renew.lua call, every watchdog_timeout/3), the
 * valid-until deadline of each hold, and the lock-lost notification when a
 * renewal finds the hold gone or the lease has certainly run out.
 * I/O thread only. A renewal can never extend a released lock: the script
 * only touches a key where the owner's field still exists. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RENEW_BATCH 500

struct hold {
  watchdog_t *wd;
  char *key; /* "<owner id>\n<name>" : the map key */
  size_t klen, olen; /* owner id is key[0..olen) ; name follows the '\n' */
  uint64_t owner;
  uint64_t gen;
  int64_t lease_ms;
  bool renew;
  int64_t valid_until;
  struct event *expire; /* fires when the lease has certainly run out */
};

typedef struct batch {
  watchdog_t *wd;
  size_t n;
  int64_t sent_at;
  uint64_t *gens;
  char **keys;
  size_t *klens;
} batch_t;

static const char *hold_name(const hold_t *h, size_t *len) {
  *len = h->klen - h->olen - 1;
  return h->key + h->olen + 1;
}

/* The registry key "<owner id>\n<name>" into k (strlen(owner_id) + 1 + len bytes). */
static size_t fill_key(char *k, const char *owner_id, const char *name, size_t len) {
  size_t ol = strlen(owner_id);
  memcpy(k, owner_id, ol);
  k[ol] = '\n';
  memcpy(k + ol + 1, name, len);
  return ol + 1 + len;
}

static char *make_key(const char *owner_id, const char *name, size_t len, size_t *klen) {
  char *k = malloc(strlen(owner_id) + 1 + len);
  if (k) *klen = fill_key(k, owner_id, name, len);
  return k;
}

static void hold_free(hold_t *h) {
  stat_add(h->wd->cl, ST_HELD, -1);
  event_free(h->expire);
  free(h->key);
  free(h);
}

static void lost(hold_t *h) {
  watchdog_t *wd = h->wd;
  map_del(&wd->holds, h->key, h->klen);
  stat_add(wd->cl, ST_LOST, 1);
  size_t len;
  const char *name = hold_name(h, &len);
  client_lost(wd->cl, name, len, h->owner);
  hold_free(h);
}

static void expire_cb(evutil_socket_t fd, short what, void *arg) { lost(arg); }

static void arm_expire(hold_t *h, int64_t ms) {
  struct timeval tv;
  rlock__tv_from_ms(&tv, ms);
  evtimer_add(h->expire, &tv);
}

void watchdog_acquired(watchdog_t *wd, const char *name, size_t len, uint64_t owner,
                       const char *owner_id, int64_t lease_ms, bool renew, int64_t sent_at) {
  size_t klen;
  char *key = make_key(owner_id, name, len, &klen);
  if (!key) return;
  hold_t *h = map_get(&wd->holds, key, klen);
  if (h) {
    free(key);
  } else {
    if (!(h = calloc(1, sizeof *h))) {
      free(key);
      return;
    }
    h->wd = wd;
    h->key = key;
    h->klen = klen;
    h->olen = strlen(owner_id);
    h->owner = owner;
    h->gen = ++wd->next_gen;
    h->expire = evtimer_new(wd->cl->base, expire_cb, h);
    if (!h->expire || map_put(&wd->holds, key, klen, h)) {
      if (h->expire) event_free(h->expire);
      free(key);
      free(h);
      return;
    }
    stat_add(wd->cl, ST_HELD, 1);
  }
  h->lease_ms = lease_ms;
  h->renew = renew;
  h->valid_until = sent_at + lease_ms;
  /* The server set the TTL at most now (the reply is here): gone by now + lease. */
  arm_expire(h, lease_ms);
}

/* Lookups run on every unlock: short keys are built on the stack. */
static hold_t *find(watchdog_t *wd, const char *name, size_t len, const char *owner_id) {
  char stack[512];
  size_t klen = strlen(owner_id) + 1 + len;
  char *key = klen <= sizeof stack ? stack : malloc(klen);
  if (!key) return NULL;
  fill_key(key, owner_id, name, len);
  hold_t *h = map_get(&wd->holds, key, klen);
  if (key != stack) free(key);
  return h;
}

void watchdog_released(watchdog_t *wd, const char *name, size_t len, const char *owner_id,
                       bool fully) {
  hold_t *h = find(wd, name, len, owner_id);
  if (!h) return;
  if (fully) {
    map_del(&wd->holds, h->key, h->klen);
    hold_free(h);
  } else {
    /* lock_unlock.lua reset the TTL to the hold's lease */
    arm_expire(h, h->lease_ms);
  }
}

int64_t watchdog_lease(watchdog_t *wd, const char *name, size_t len, const char *owner_id) {
  hold_t *h = find(wd, name, len, owner_id);
  return h ? h->lease_ms : wd->cl->opt.watchdog_timeout_ms;
}

int watchdog_valid_until(watchdog_t *wd, const char *name, size_t len, const char *owner_id,
                         int64_t *out) {
  hold_t *h = find(wd, name, len, owner_id);
  if (!h) return rlock__fail(RLOCK_ENOTHELD, "this client tracks no hold of that lock by this owner");
  *out = h->valid_until;
  return 0;
}

void watchdog_forget(watchdog_t *wd, const char *name, size_t len) {
  map_iter_t it;
  map_iter_init(&it, &wd->holds);
  for (map_entry_t *e; (e = map_iter_next(&it));) {
    hold_t *h = e->value;
    size_t hl;
    const char *hn = hold_name(h, &hl);
    if (hl == len && !memcmp(hn, name, len)) lost(h);
  }
}

static void batch_free(batch_t *b) {
  for (size_t i = 0; i < b->n; i++) free(b->keys[i]);
  free(b->keys);
  free(b->klens);
  free(b->gens);
  free(b);
}

static void renew_done(req_t *r, int status, rlock_reply_t *reply) {
  batch_t *b = r->ctx;
  watchdog_t *wd = b->wd;
  if (status == 0 && reply && reply->type == RLOCK_REPLY_ARRAY && reply->elements == b->n &&
      wd->cl->cmd.state != CS_CLOSED) {
    for (size_t i = 0; i < b->n; i++) {
      hold_t *h = map_get(&wd->holds, b->keys[i], b->klens[i]);
      if (!h || h->gen != b->gens[i] || !h->renew) continue; /* released or re-taken since */
      rlock_reply_t *e = reply->element[i];
      if (e && e->type == RLOCK_REPLY_INTEGER && e->integer == 1) {
        h->valid_until = b->sent_at + h->lease_ms;
        arm_expire(h, h->lease_ms);
        stat_add(wd->cl, ST_RENEWED, 1);
      } else {
        lost(h);
      }
    }
  }
  /* A failed renewal changes nothing: the next round tries again, and the
   * expire timer reports the loss once the lease has certainly run out. */
  rlock_reply_free(reply);
  batch_free(b);
}

static void send_batch(watchdog_t *wd, hold_t **hs, size_t n) {
  client_t *cl = wd->cl;
  batch_t *b = calloc(1, sizeof *b);
  const char **keys = malloc(n * sizeof *keys), **args = malloc((n + 1) * sizeof *args);
  size_t *kl = malloc(n * sizeof *kl), *al = malloc((n + 1) * sizeof *al);
  char lease[32];
  if (!b || !keys || !args || !kl || !al) goto out;
  b->wd = wd;
  b->keys = calloc(n, sizeof *b->keys);
  b->klens = malloc(n * sizeof *b->klens);
  b->gens = malloc(n * sizeof *b->gens);
  if (!b->keys || !b->klens || !b->gens) goto out;
  rlock__i64toa(cl->opt.watchdog_timeout_ms, lease);
  args[0] = lease, al[0] = strlen(lease);
  for (size_t i = 0; i < n; i++) {
    keys[i] = hold_name(hs[i], &kl[i]);
    args[i + 1] = hs[i]->key, al[i + 1] = hs[i]->olen;
    if (!(b->keys[i] = malloc(hs[i]->klen))) goto out;
    memcpy(b->keys[i], hs[i]->key, hs[i]->klen);
    b->klens[i] = hs[i]->klen;
    b->gens[i] = hs[i]->gen;
    b->n = i + 1;
  }
  b->sent_at = rlock_now_ms();
  req_t *r = script_req(SCRIPT_RENEW, (int)n, keys, kl, (int)n + 1, args, al, cl->opt.command_timeout_ms,
                        renew_done, b);
  if (!r) goto out;
  stat_add(cl, ST_RENEWALS, 1);
  stat_add(cl, ST_SCRIPTS, 1);
  client_send(cl, keys[0], kl[0], r); /* one slot per batch where slots matter */
  b = NULL;
out:
  if (b) batch_free(b);
  free(keys), free(args), free(kl), free(al);
}

/* One round: every watchdog hold, RENEW_BATCH per script call (and one slot
 * per call where the topology says slots matter). */
void watchdog_renew_now(watchdog_t *wd) {
  size_t n = 0, first, count;
  if (!wd->holds.count) {
    client_flush(wd->cl);
    return;
  }
  bool by_slot = wd->cl->topo->slots_matter;
  hold_t **all = malloc(wd->holds.count * sizeof *all);
  uint16_t *slots = by_slot ? malloc(wd->holds.count * sizeof *slots) : NULL;
  batcher_t b;
  /* out of memory: this round is skipped; the next one (a third of the
   * lease later) tries again, and the expire timers report a loss */
  if (!all || (by_slot && !slots)) goto out;
  map_iter_t it;
  map_iter_init(&it, &wd->holds);
  for (map_entry_t *e; (e = map_iter_next(&it));) {
    hold_t *h = e->value;
    if (!h->renew) continue;
    if (by_slot) {
      size_t len;
      const char *name = hold_name(h, &len);
      slots[n] = names_slot(name, len);
    }
    all[n++] = h;
  }
  if (batcher_init(&b, slots, n, RENEW_BATCH)) goto out;
  while (batcher_next(&b, &first, &count)) {
    hold_t *hs[RENEW_BATCH];
    for (size_t i = 0; i < count; i++) hs[i] = all[batcher_item(&b, first + i)];
    send_batch(wd, hs, count);
  }
  batcher_free(&b);
out:
  free(all);
  free(slots);
  client_flush(wd->cl);
}

static void tick_cb(evutil_socket_t fd, short what, void *arg) { watchdog_renew_now(arg); }

int watchdog_init(watchdog_t *wd, client_t *cl) {
  memset(wd, 0, sizeof *wd);
  wd->cl = cl;
  map_init(&wd->holds);
  wd->tick = event_new(cl->base, -1, EV_PERSIST, tick_cb, wd);
  if (!wd->tick) return RLOCK_ENOMEM;
  struct timeval tv;
  int64_t period = cl->opt.watchdog_timeout_ms / 3;
  rlock__tv_from_ms(&tv, period > 0 ? period : 1);
  evtimer_add(wd->tick, &tv);
  return 0;
}

void watchdog_close(watchdog_t *wd) {
  if (wd->tick) event_free(wd->tick);
  wd->tick = NULL;
  map_iter_t it;
  map_iter_init(&it, &wd->holds);
  for (map_entry_t *e; (e = map_iter_next(&it));) hold_free(e->value);
  map_free(&wd->holds);
}
