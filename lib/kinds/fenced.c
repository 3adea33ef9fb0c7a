/* kinds/fenced.c -- the fenced lock (Redisson's RFencedLock) as a lock kind
 * (kind.h): RLock's hash and channel, plus the token counter
 * redisson_lock_token:{NAME}, bumped by every acquisition (re-entries too) in
 * the acquire script itself (lua/fenced_acquire.lua) and returned by the
 * acquire (granted: op->token). The token is never reset: a storage layer
 * that keeps the highest token it saw refuses a writer whose lease ran out
 * (docs/api/kinds.md). The unlock, its undo, force unlock and the renewal are
 * the reentrant lock's scripts (same hash): the token key is left as it is. */
#include "kinds/kind.h"

#include <stdlib.h>

#define CHANNEL "redisson_lock__channel"
#define TOKEN_PREFIX "redisson_lock_token"

static int init(rlock_lock_t *l) { return rlock__kind_init_channel(l, CHANNEL); }

int rlock__fenced_token_key(const rlock_lock_t *l, bytes_t *out) {
  return rlock__names_prefixed(out, TOKEN_PREFIX, l->name, l->len) ? RLOCK_ENOMEM : 0;
}

/* fenced_acquire.lua: KEYS name, token, latch; ARGV lease, owner, latch TTL. */
static req_t *try_req(op_t *op, const bytes_t *latch, req_done_fn done) {
  bytes_t tk;
  if (rlock__fenced_token_key(op->lock, &tk)) return NULL;
  char lbuf[24], tbuf[24];
  size_t leasen, ttln;
  const char *lease = rlock__dec(&op->cl->dec_lease, rlock__op_lease_ms(op), lbuf, &leasen);
  const char *ttl = rlock__dec(&op->cl->dec_latch_ttl, rlock__client_latch_ttl(op->cl), tbuf, &ttln);
  const char *keys[3] = {op->lock->name, tk.p, latch->p};
  size_t kl[3] = {op->lock->len, tk.n, latch->n};
  const char *args[3] = {lease, op->owner_id, ttl};
  size_t al[3] = {leasen, op->owner_len, ttln};
  req_t *r = rlock__script_req(SCRIPT_FENCED_ACQUIRE, 3, keys, kl, 3, args, al, op->cl->opt.command_timeout_ms, done,
                               op);
  free(tk.p);
  return r;
}

/* {-1, token}: acquired; an integer >= -1: the holder's PTTL; -3: undone
 * (never expected). */
static int try_reply(const rlock_reply_t *reply, int64_t *wait_ms) {
  if (reply->type == RLOCK_REPLY_ARRAY && reply->elements == 2 && reply->element[0]->type == RLOCK_REPLY_INTEGER &&
      reply->element[0]->integer == -1 && reply->element[1]->type == RLOCK_REPLY_INTEGER &&
      reply->element[1]->integer > 0)
    return KIND_GRANTED;
  if (reply->type != RLOCK_REPLY_INTEGER || reply->integer < -1)
    return rlock__fail(RLOCK_EPROTO, "acquire: unexpected reply");
  *wait_ms = reply->integer;
  return KIND_BUSY;
}

/* A granted try's token (try_reply checked the shape). */
static void granted(op_t *op, const rlock_reply_t *reply) { op->token = reply->element[1]->integer; }

/* The rest is the reentrant lock's (same hash, same channel). */
static req_t *undo_req(const kind_undo_t *u, req_done_fn done, void *ctx) {
  return rlock__kind_reentrant.undo_req(u, done, ctx);
}
static req_t *release_req(op_t *op, const bytes_t *latch, const kind_release_t *rel, req_done_fn done) {
  return rlock__kind_reentrant.release_req(op, latch, rel, done);
}
static int release_reply(const rlock_reply_t *reply, release_t *how, bool *notified) {
  return rlock__kind_reentrant.release_reply(reply, how, notified);
}
static req_t *force_req(op_t *op, req_done_fn done) { return rlock__kind_reentrant.force_req(op, done); }

const lock_kind_t rlock__kind_fenced = {
    .name = "fenced",
    .init = init,
    .try_req = try_req,
    .try_reply = try_reply,
    .undo_req = undo_req,
    .undo_reply = rlock__kind_undo_ran,
    .release_req = release_req,
    .release_reply = release_reply,
    .wake = rlock__kind_wake_one, /* an unlock frees the lock for one owner */
    .force_req = force_req,
    .granted = granted,
};
