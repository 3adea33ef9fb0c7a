/* kinds/simple.c -- the simple lock as a lock kind (kind.h): SET NAME <token>
 * NX PX <lease>, released by compare-and-delete and renewed by
 * compare-and-PEXPIRE (lua/simple_*.lua). The layout redis-py's Lock,
 * node-redlock and redsync use, so a C program shares a lock with Python,
 * Node and Go programs. Not reentrant: the holder's second acquire is refused
 * (RLOCK_EBUSY, with a message saying so), never waited for.
 *
 * Layout: the string NAME, the holder's token its value (rlock's token is
 * the owner id "<client id>:<thread id>": unique, since the client id is a
 * random UUID), its TTL the lease. The other libraries have no unlock
 * message, so a waiter polls: capped exponential backoff with jitter
 * (poll_ms below), never longer than the holder's TTL left. rlock's own
 * releases also publish on rlock_simple__channel:{NAME}, so rlock waiters (of
 * this process or others) wake at once when an rlock program releases. */
#include "kinds/kind.h"

#define CHANNEL "rlock_simple__channel"
#define MESSAGE "0"     /* the unlock message */
#define POLL_MIN_MS 8   /* the first poll's delay: 4 to 8 ms */
#define POLL_MAX_MS 500 /* the cap: polls 250 to 500 ms apart */

static int init(rlock_lock_t *l) { return rlock__kind_init_channel(l, CHANNEL); }

/* simple_acquire.lua: KEYS name, latch; ARGV lease, token, latch TTL. */
static req_t *try_req(op_t *op, const bytes_t *latch, req_done_fn done) {
  return rlock__kind_try_req(SCRIPT_SIMPLE_ACQUIRE, op, latch, done);
}

/* nil: acquired; -4: this owner holds it already; an integer >= -1: the
 * holder's PTTL (-1: no TTL); -3: undone (never expected). */
static int try_reply(const rlock_reply_t *reply, int64_t *wait_ms) {
  if (reply->type == RLOCK_REPLY_NIL) return KIND_GRANTED;
  if (reply->type == RLOCK_REPLY_INTEGER && reply->integer == -4)
    return rlock__fail(RLOCK_EBUSY, "this owner holds the lock already (a simple lock is not reentrant)");
  if (reply->type != RLOCK_REPLY_INTEGER || reply->integer < -1)
    return rlock__fail(RLOCK_EPROTO, "acquire: unexpected reply");
  *wait_ms = reply->integer;
  return KIND_BUSY;
}

/* simple_acquire_undo.lua: KEYS name, channel, latch; ARGV message, token,
 * publish command, latch TTL, the holds the owner may keep (0, 1, -1). */
static req_t *undo_req(const kind_undo_t *u, req_done_fn done, void *ctx) {
  return rlock__kind_undo_req(SCRIPT_SIMPLE_ACQUIRE_UNDO, MESSAGE, rlock__publish_cmd(u->cl), u, done, ctx);
}

/* simple_unlock.lua: KEYS name, channel, latch; ARGV message, token, publish
 * command, latch TTL. A simple hold has no count to check (rel unused). */
static req_t *release_req(op_t *op, const bytes_t *latch, const kind_release_t *rel, req_done_fn done) {
  (void)rel;
  rlock_lock_t *l = op->lock;
  char tbuf[24];
  size_t ttln;
  const char *ttl = rlock__dec(&op->cl->dec_latch_ttl, rlock__client_latch_ttl(op->cl), tbuf, &ttln);
  const char *keys[3] = {l->name, l->channel.p, latch->p};
  size_t kl[3] = {l->len, l->channel.n, latch->n};
  const char *args[4] = {MESSAGE, op->owner_id, rlock__publish_cmd(op->cl), ttl};
  size_t al[4] = {sizeof MESSAGE - 1, op->owner_len, rlock__publish_len(op->cl), ttln};
  return rlock__script_req(SCRIPT_SIMPLE_UNLOCK, 3, keys, kl, 4, args, al, op->cl->opt.command_timeout_ms, done, op);
}

/* 1 released; 2 released and the message reached a subscriber; nil the key
 * does not hold this token. */
static int release_reply(const rlock_reply_t *reply, release_t *how, bool *notified) {
  if (reply->type == RLOCK_REPLY_NIL) {
    *how = REL_NOTHELD;
    return 0;
  }
  if (reply->type != RLOCK_REPLY_INTEGER || reply->integer < 1 || reply->integer > 2)
    return rlock__fail(RLOCK_EPROTO, "unlock: unexpected reply");
  *how = REL_ALL;
  *notified = reply->integer == 2;
  return 0;
}

/* simple_force_unlock.lua: KEYS name, channel; ARGV message, publish command, any type. */
static req_t *force_req(op_t *op, req_done_fn done) {
  rlock_lock_t *l = op->lock;
  const char *keys[2] = {l->name, l->channel.p};
  size_t kl[2] = {l->len, l->channel.n};
  const char *args[3] = {MESSAGE, rlock__publish_cmd(op->cl), op->any_type ? "1" : "0"};
  return rlock__script_req(SCRIPT_SIMPLE_FORCE_UNLOCK, 2, keys, kl, 3, args, NULL, op->cl->opt.command_timeout_ms, done,
                           op);
}

/* The n-th busy answer of an acquire waits up to min(POLL_MIN_MS x 2^n,
 * POLL_MAX_MS), a uniform draw in its upper half (the jitter spreads waiters
 * that started together), and never past the holder's TTL left. */
static int64_t poll_ms(op_t *op, int64_t ttl) {
  int shift = op->polls < 7 ? op->polls : 7;
  int64_t cap = (int64_t)POLL_MIN_MS << shift;
  if (cap > POLL_MAX_MS) cap = POLL_MAX_MS;
  if (op->polls < INT_MAX) op->polls++;
  int64_t delay = cap / 2 + (int64_t)(rlock__prng_next(&op->cl->prng) % (uint64_t)(cap / 2 + 1));
  return ttl >= 0 && ttl < delay ? ttl : delay;
}

/* A free-waiter: the other programs (redis-py, node-redlock, redsync)
 * release without a message, and may hold it without a TTL: it looks again
 * as the acquirers try again (the capped backoff), never later. */
static int64_t look_ms(op_t *op, int64_t ttl) { return poll_ms(op, ttl); }

/* simple_query.lua: KEYS name; ARGV which query, token. */
static req_t *query_req(op_t *op, req_done_fn done) {
  const char *what = op->kind == OP_IS_HELD ? "held" : op->kind == OP_COUNT ? "count" : "holders";
  const char *keys[1] = {op->lock->name};
  size_t kl[1] = {op->lock->len};
  const char *args[2] = {what, op->owner_id};
  return rlock__script_req(SCRIPT_SIMPLE_QUERY, 1, keys, kl, 2, args, NULL, op->cl->opt.command_timeout_ms, done, op);
}

const lock_kind_t rlock__kind_simple = {
    .name = "simple",
    .init = init,
    .try_req = try_req,
    .try_reply = try_reply,
    .undo_req = undo_req,
    .undo_reply = rlock__kind_undo_ran,
    .release_req = release_req,
    .release_reply = release_reply,
    .wake = rlock__kind_wake_one, /* an unlock frees the lock for one owner */
    .force_req = force_req,
    .poll_ms = poll_ms,
    .look_ms = look_ms,
    .renew_script = SCRIPT_SIMPLE_RENEW,
    .query_req = query_req,
};
