/* kinds/reentrant.c -- the reentrant lock (Redisson's RLock) as a lock kind
 * (kind.h): its keys, its scripts (lua/reentrant_*.lua) and what their
 * replies mean. The machinery around them (request ids, re-sends, waiting,
 * undo, the client's hold count) is lock.c's.
 *
 * Layout: the hash NAME, owner id -> hold count, its TTL the lease; the
 * channel redisson_lock__channel:{NAME}, on which an unlock that frees the
 * lock publishes "0" (it wakes one waiter: the lock is exclusive). */
#include "kinds/kind.h"

#define CHANNEL "redisson_lock__channel"
#define MESSAGE "0" /* the unlock message */

static int init(rlock_lock_t *l) { return rlock__kind_init_channel(l, CHANNEL); }

/* reentrant_acquire.lua: KEYS name, latch; ARGV lease, owner, latch TTL. */
static req_t *try_req(op_t *op, const bytes_t *latch, req_done_fn done) {
  return rlock__kind_try_req(SCRIPT_ACQUIRE, op, latch, done);
}

/* nil: acquired; an integer: the holder's PTTL (-1: no TTL); -3: the try was
 * undone already (never expected: an undone id is never re-sent). */
static int try_reply(const rlock_reply_t *reply, int64_t *wait_ms) {
  if (reply->type == RLOCK_REPLY_NIL) return KIND_GRANTED;
  if (reply->type != RLOCK_REPLY_INTEGER || reply->integer == -3)
    return rlock__fail(RLOCK_EPROTO, "acquire: unexpected reply");
  *wait_ms = reply->integer;
  return KIND_BUSY;
}

/* reentrant_acquire_undo.lua: KEYS name, channel, latch; ARGV message,
 * owner, publish command, latch TTL, the count the owner may keep. */
static req_t *undo_req(const kind_undo_t *u, req_done_fn done, void *ctx) {
  return rlock__kind_undo_req(SCRIPT_ACQUIRE_UNDO, MESSAGE, rlock__publish_cmd(u->cl), u, done, ctx);
}

/* reentrant_unlock.lua: KEYS name, channel, latch; ARGV message, the TTL the
 * remaining holds need, owner, publish command, latch TTL, the count the
 * client expects to be left, how many more the server may count. */
static req_t *release_req(op_t *op, const bytes_t *latch, const kind_release_t *rel, req_done_fn done) {
  rlock_lock_t *l = op->lock;
  char left[32], extra[32];
  char lbuf[24], tbuf[24];
  size_t leasen, ttln;
  const char *lease = rlock__dec(&op->cl->dec_lease, rel->lease_ms, lbuf, &leasen);
  const char *ttl = rlock__dec(&op->cl->dec_latch_ttl, rlock__client_latch_ttl(op->cl), tbuf, &ttln);
  size_t leftn = rlock__i64toa(rel->left, left);
  size_t extran = rlock__i64toa(rel->unknown, extra);
  const char *keys[3] = {l->name, l->channel.p, latch->p};
  size_t kl[3] = {l->len, l->channel.n, latch->n};
  /* an unlatched id (fast.c): its first copy ('0') writes a latch only for an
   * answer its re-sends ('1') cannot read from the count */
  bool first = op->unlatched && op->retries == 0;
  const char *args[8] = {MESSAGE, lease, op->owner_id, rlock__publish_cmd(op->cl), ttl, left, extra, first ? "0" : "1"};
  size_t al[8] = {sizeof MESSAGE - 1, leasen, op->owner_len, rlock__publish_len(op->cl), ttln, leftn, extran, 1};
  int nargs = op->unlatched ? 8 : 7;
  return rlock__script_req(SCRIPT_UNLOCK, 3, keys, kl, nargs, args, al, op->cl->opt.command_timeout_ms, done, op);
}

/* 0 still held; 1 released; 2 released and the message reached a subscriber;
 * -1 the count disagreed (owner's field removed); nil not held. */
static int release_reply(const rlock_reply_t *reply, release_t *how, bool *notified) {
  if (reply->type == RLOCK_REPLY_NIL) {
    *how = REL_NOTHELD;
    return 0;
  }
  if (reply->type != RLOCK_REPLY_INTEGER || reply->integer < -1 || reply->integer > 2)
    return rlock__fail(RLOCK_EPROTO, "unlock: unexpected reply");
  *how = reply->integer == 0 ? REL_ONE : reply->integer > 0 ? REL_ALL : REL_MISMATCH;
  *notified = reply->integer == 2;
  return 0;
}

/* reentrant_force_unlock.lua: KEYS name, channel; ARGV message, publish command. */
static req_t *force_req(op_t *op, req_done_fn done) {
  rlock_lock_t *l = op->lock;
  int64_t t = op->cl->opt.command_timeout_ms;
  const char *keys[2] = {l->name, l->channel.p};
  size_t kl[2] = {l->len, l->channel.n};
  const char *args[3] = {"0", rlock__publish_cmd(op->cl), op->any_type ? "1" : "0"};
  return rlock__script_req(SCRIPT_FORCE_UNLOCK, 2, keys, kl, 3, args, NULL, t, done, op);
}

const lock_kind_t rlock__kind_reentrant = {
    .name = "reentrant",
    .init = init,
    .try_req = try_req,
    .try_reply = try_reply,
    .undo_req = undo_req,
    .undo_reply = rlock__kind_undo_ran,
    .release_req = release_req,
    .release_reply = release_reply,
    .wake = rlock__kind_wake_one, /* an unlock frees the lock for one owner */
    .force_req = force_req,
};
