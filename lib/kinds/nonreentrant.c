/* kinds/nonreentrant.c -- the non-reentrant lock (Redisson 4.4's
 * getNonReentrantLock, RedissonNonReentrantLock) as a lock kind (kind.h).
 *
 * Layout: RLock's (kinds/reentrant.c): the hash NAME, owner id -> hold count
 * (always 1), its TTL the lease; the channel redisson_lock__channel:{NAME},
 * message "0". Only the acquire differs (lua/nonreentrant_acquire.lua): an
 * acquire by the owner that holds it already is refused at once with
 * RLOCK_ENOTREENTRANT, whatever the wait, and changes nothing (Redisson throws
 * IllegalMonitorStateException there). The unlock, its undo, force unlock
 * and the renewal are the reentrant lock's scripts: same keys, same state. */
#include "kinds/kind.h"

#define CHANNEL "redisson_lock__channel"

static int init(rlock_lock_t *l) { return rlock__kind_init_channel(l, CHANNEL); }

/* nonreentrant_acquire.lua: KEYS name, latch; ARGV lease, owner, latch TTL. */
static req_t *try_req(op_t *op, const bytes_t *latch, req_done_fn done) {
  return rlock__kind_try_req(SCRIPT_NONREENTRANT_ACQUIRE, op, latch, done);
}

/* nil: acquired; -4: this owner holds it already; an integer >= -1: the
 * holder's PTTL (-1: no TTL); -3: undone (never expected). */
static int try_reply(const rlock_reply_t *reply, int64_t *wait_ms) {
  if (reply->type == RLOCK_REPLY_NIL) return KIND_GRANTED;
  if (reply->type == RLOCK_REPLY_INTEGER && reply->integer == -4)
    return rlock__fail(RLOCK_ENOTREENTRANT,
                       "this owner holds the lock already (a non-reentrant lock refuses its holder's "
                       "second acquire)");
  if (reply->type != RLOCK_REPLY_INTEGER || reply->integer < -1)
    return rlock__fail(RLOCK_EPROTO, "acquire: unexpected reply");
  *wait_ms = reply->integer;
  return KIND_BUSY;
}

/* The rest is the reentrant lock's (same layout, same scripts). */
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

const lock_kind_t rlock__kind_nonreentrant = {
    .name = "nonreentrant",
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
