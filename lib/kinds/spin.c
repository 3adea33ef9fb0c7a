/* kinds/spin.c -- the spin lock (Redisson's RSpinLock, getSpinLock) as a lock
 * kind (kind.h): RLock's hash and scripts, but no pub/sub at all. Its unlock,
 * undo and force unlock publish nothing (publish command "none"), and a busy
 * acquire never subscribes: it tries again after a backoff (poll_ms below),
 * Redisson's ExponentialBackOff by default (1 ms, x2, up to 128 ms, plus a
 * jitter of up to n ms at the n-th wait, at most max), configurable per lock
 * (rlock_lock_new_spin). A Java RLock waiter of the same name is not woken
 * by a spin unlock (as with Redisson's): it waits for its TTL. */
#include "kinds/kind.h"

#define CHANNEL "redisson_lock__channel" /* a key of the scripts (same slot); never used */
#define MESSAGE "0"
#define NONE "none" /* the scripts' publish command: no message */

static int init(rlock_lock_t *l) { return rlock__kind_init_channel(l, CHANNEL); }

/* reentrant_acquire.lua, as Redisson's spin lock runs RLock's acquire. */
static req_t *try_req(op_t *op, const bytes_t *latch, req_done_fn done) {
  return rlock__kind_try_req(SCRIPT_ACQUIRE, op, latch, done);
}

static int try_reply(const rlock_reply_t *reply, int64_t *wait_ms) {
  return rlock__kind_reentrant.try_reply(reply, wait_ms);
}

static req_t *undo_req(const kind_undo_t *u, req_done_fn done, void *ctx) {
  return rlock__kind_undo_req(SCRIPT_ACQUIRE_UNDO, MESSAGE, NONE, u, done, ctx);
}

/* reentrant_unlock.lua with the publish command "none" (Redisson's spin
 * unlock: RLock's steps without the PUBLISH). */
static req_t *release_req(op_t *op, const bytes_t *latch, const kind_release_t *rel, req_done_fn done) {
  rlock_lock_t *l = op->lock;
  char left[32], extra[32], lbuf[24], tbuf[24];
  size_t leasen, ttln;
  const char *lease = rlock__dec(&op->cl->dec_lease, rel->lease_ms, lbuf, &leasen);
  const char *ttl = rlock__dec(&op->cl->dec_latch_ttl, rlock__client_latch_ttl(op->cl), tbuf, &ttln);
  size_t leftn = rlock__i64toa(rel->left, left);
  size_t extran = rlock__i64toa(rel->unknown, extra);
  const char *keys[3] = {l->name, l->channel.p, latch->p};
  size_t kl[3] = {l->len, l->channel.n, latch->n};
  const char *args[7] = {MESSAGE, lease, op->owner_id, NONE, ttl, left, extra};
  size_t al[7] = {sizeof MESSAGE - 1, leasen, op->owner_len, sizeof NONE - 1, ttln, leftn, extran};
  return rlock__script_req(SCRIPT_UNLOCK, 3, keys, kl, 7, args, al, op->cl->opt.command_timeout_ms, done, op);
}

static int release_reply(const rlock_reply_t *reply, release_t *how, bool *notified) {
  return rlock__kind_reentrant.release_reply(reply, how, notified);
}

/* reentrant_force_unlock.lua: KEYS name, channel; ARGV message, "none", any type. */
static req_t *force_req(op_t *op, req_done_fn done) {
  rlock_lock_t *l = op->lock;
  const char *keys[2] = {l->name, l->channel.p};
  size_t kl[2] = {l->len, l->channel.n};
  const char *args[3] = {MESSAGE, NONE, op->any_type ? "1" : "0"};
  return rlock__script_req(SCRIPT_FORCE_UNLOCK, 2, keys, kl, 3, args, NULL, op->cl->opt.command_timeout_ms, done, op);
}

/* The n-th busy answer (n = op->polls, from 0) waits base_n + a draw from
 * [0, min(n, max)] ms, base_0 = initial, base_n = min(base_(n-1) x multiplier, max)
 * (Redisson's ExponentialBackOff: 1, 2-3, 4-6, 8-11, ... 128-135 ms); a
 * multiplier of 1 is Redisson's ConstantBackOff (no jitter). Never past the
 * holder's TTL left. */
static int64_t poll_ms(op_t *op, int64_t ttl) {
  const rlock_lock_t *l = op->lock;
  int64_t base = l->backoff_initial_ms, cap = l->backoff_max_ms;
  int mult = l->backoff_multiplier;
  int n = op->polls;
  for (int i = 0; i < n && base < cap && mult > 1; i++) base = base > cap / mult ? cap : base * mult;
  if (op->polls < INT_MAX) op->polls++;
  int64_t delay = base, spread = n < cap ? n : cap; /* the jitter: never past 2 x max */
  if (mult > 1) delay += (int64_t)(rlock__prng_next(&op->cl->prng) % ((uint64_t)spread + 1));
  return ttl >= 0 && ttl < delay ? ttl : delay;
}

/* A free-waiter has no message to wait for: it looks again as the
 * acquirers spin (the backoff, never past the TTL), at least every third
 * of watchdog_timeout_ms when the lock has no TTL. */
static int64_t look_ms(op_t *op, int64_t ttl) {
  return poll_ms(op, ttl > 0 ? ttl : op->cl->opt.watchdog_timeout_ms / 3);
}

const lock_kind_t rlock__kind_spin = {
    .name = "spin",
    .init = init,
    .try_req = try_req,
    .try_reply = try_reply,
    .undo_req = undo_req,
    .undo_reply = rlock__kind_undo_ran,
    .release_req = release_req,
    .release_reply = release_reply,
    .wake = rlock__kind_wake_one, /* (never called: no channel) */
    .force_req = force_req,
    .poll_ms = poll_ms,
    .look_ms = look_ms,
    .no_pubsub = true,
};
