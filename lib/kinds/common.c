/* kinds/common.c -- what several lock kinds (kind.h) share as it is: a
 * channel named after the lock, the try and undo requests of the latch
 * scripts (same keys and arguments, each kind its own script), an undo's
 * answer, and the wake of an exclusive lock. A kind uses these or its own. */
#include "kinds/kind.h"

#include <string.h>

int rlock__kind_init_channel(rlock_lock_t *l, const char *prefix) {
  /* learnt here, read-only afterwards (lock.c learns them itself otherwise) */
  l->plain = memchr(l->name, '{', l->len) || memchr(l->name, '}', l->len) ? -1 : 1;
  l->slot1 = rlock__names_slot(l->name, l->len) + 1;
  return rlock__names_prefixed(&l->channel, prefix, l->name, l->len) ? RLOCK_ENOMEM : 0;
}

/* KEYS name, latch; ARGV lease, owner id, latch TTL. */
req_t *rlock__kind_try_req(int script, op_t *op, const bytes_t *latch, req_done_fn done) {
  char lbuf[24], tbuf[24];
  size_t leasen, ttln;
  const char *lease = rlock__dec(&op->cl->dec_lease, rlock__op_lease_ms(op), lbuf, &leasen);
  const char *ttl = rlock__dec(&op->cl->dec_latch_ttl, rlock__client_latch_ttl(op->cl), tbuf, &ttln);
  const char *keys[2] = {op->lock->name, latch->p};
  size_t kl[2] = {op->lock->len, latch->n};
  const char *args[3] = {lease, op->owner_id, ttl};
  size_t al[3] = {leasen, op->owner_len, ttln};
  int nargs = op->unlatched ? 2 : 3; /* the fast path's first copy: no latch TTL, it writes no latch */
  return rlock__script_req(script, 2, keys, kl, nargs, args, al, op->cl->opt.command_timeout_ms, done, op);
}

/* KEYS name, channel, latch; ARGV message, owner id, publish command, latch
 * TTL, the holds the owner may keep. */
req_t *rlock__kind_undo_req(int script, const char *message, const char *publish, const kind_undo_t *u,
                            req_done_fn done, void *ctx) {
  char ttl[32], keep[32];
  size_t ttln = rlock__i64toa(rlock__client_latch_ttl(u->cl), ttl);
  size_t keepn = rlock__i64toa(u->keep, keep);
  const char *keys[3] = {u->name, u->channel->p, u->latch->p};
  size_t kl[3] = {u->len, u->channel->n, u->latch->n};
  const char *args[5] = {message, u->owner_id, publish, ttl, keep};
  size_t al[5] = {strlen(message), strlen(u->owner_id), strlen(publish), ttln, keepn};
  return rlock__script_req(script, 3, keys, kl, 5, args, al, u->cl->opt.command_timeout_ms, done, ctx);
}

/* 1 given back, 0 tombstone planted, 2 already undone: it ran. */
bool rlock__kind_undo_ran(const rlock_reply_t *reply) { return reply->type == RLOCK_REPLY_INTEGER; }

/* An unlock frees the lock for one owner: wake one waiter. */
int rlock__kind_wake_one(const rlock_reply_t *msg) {
  (void)msg;
  return 1;
}
