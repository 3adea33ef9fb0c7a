/* kinds/fair.c -- the fair lock (Redisson's RFairLock) and the non-reentrant
 * fair lock (RNonReentrantFairLock, Redisson 4.4) as lock kinds (kind.h):
 * their keys, their scripts (lua/fair_*.lua) and what the replies mean.
 *
 * Layout (Redisson 4.7.0's): the hash NAME as the reentrant lock's; the
 * queue redisson_lock_queue:{NAME} (a list of owner ids, FIFO) and the
 * deadlines redisson_lock_timeout:{NAME} (a zset, owner id -> epoch ms after
 * which that waiter counts as gone). Each waiter listens on its own channel
 * redisson_lock__channel:{NAME}:<owner id>; an unlock publishes "0" on the
 * queue head's channel. rlock's unlock, force unlock and undo that leave the
 * lock free also say "0" on redisson_lock__channel:{NAME}, for free-waiters
 * (Redisson publishes nothing there).
 *
 * A waiter's slot (Redisson's "wait": added to its deadline when it queues,
 * taken off every deadline when it acquires, off those behind it when it
 * leaves) is rlock_options_t.fair_waiter_timeout_ms. An rlock waiter keeps
 * its deadline at least 3/4 of a slot ahead on each of its tries (and every
 * waiter behind it moves with it), so a live one never loses its place and
 * a dead one stops blocking the queue one slot after it became the head.
 * A try with no wait (trylock(0)) never queues (Redisson's tryLock()). */
#include "kinds/kind.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHANNEL "redisson_lock__channel"
#define QUEUE "redisson_lock_queue"
#define TIMEOUT "redisson_lock_timeout"
/* rlock's handoff registry: "rlock_acquire_latch:{NAME}:handoff", among the
 * acquire latches (not a request id: those are hex), so the keys an ACL
 * gives the fair lock (docs/cli.md) cover it: a key outside them, declared
 * to EVAL, would have every fair script refused NOPERM */
#define LATCHES "rlock_acquire_latch"
#define HANDOFF "handoff"
#define MESSAGE "0"

static int init(rlock_lock_t *l) { return rlock__kind_init_channel(l, CHANNEL); }

/* The wall clock in epoch ms, as Redisson's deadlines are (never monotonic:
 * Java and C clients compare them). */
static size_t now_epoch(char *buf) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return rlock__i64toa((int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000, buf);
}

/* The queue and deadline keys of NAME (malloc'd). */
static int queue_keys(const char *name, size_t len, bytes_t *q, bytes_t *z) {
  return rlock__names_prefixed2(q, QUEUE, z, TIMEOUT, name, len);
}

/* ... and rlock's handoff registry (fair_acquire.lua), all three or none. */
static int queue_keys3(const char *name, size_t len, bytes_t *q, bytes_t *z, bytes_t *h) {
  if (queue_keys(name, len, q, z)) return RLOCK_ENOMEM;
  if (!rlock__names_prefixed_suffix(h, LATCHES, name, len, HANDOFF)) return 0;
  free(q->p);
  free(z->p);
  return RLOCK_ENOMEM;
}

static void free3(bytes_t *q, bytes_t *z, bytes_t *h) {
  free(q->p);
  free(z->p);
  free(h->p);
}

req_t *rlock__fair_tell_head_req(client_t *cl, const rlock_lock_t *l, req_done_fn done, void *ctx) {
  bytes_t q, z;
  if (queue_keys(l->name, l->len, &q, &z)) return NULL;
  const char *keys[2] = {q.p, l->channel.p}, *args[1] = {rlock__publish_cmd(cl)};
  size_t kl[2] = {q.n, l->channel.n}, al[1] = {rlock__publish_len(cl)};
  req_t *r = rlock__script_req(SCRIPT_FAIR_TELL_HEAD, 2, keys, kl, 1, args, al, cl->opt.command_timeout_ms, done, ctx);
  free(q.p);
  free(z.p);
  return r;
}

/* fair_acquire.lua: KEYS name, queue, deadlines, channel, latch, handoff
 * registry, the latch of the registered try; ARGV lease, owner, slot, now,
 * latch TTL, mode ('q' queue / 't' try only), not reentrant, publish
 * command, this request's id when the unlock may grant it directly (a
 * waiting watchdog hold; else ""). A try with no wait never queues. */
static req_t *try_req(op_t *op, const bytes_t *latch, req_done_fn done) {
  rlock_lock_t *l = op->lock;
  bytes_t q, z, h, prev;
  char pbuf[OP_LATCH_ROOM];
  if (queue_keys3(l->name, l->len, &q, &z, &h)) return NULL;
  if (rlock__op_reg_latch(op, pbuf, sizeof pbuf, &prev)) {
    free3(&q, &z, &h);
    return NULL;
  }
  bool direct = op->wait_ms != 0 && op->lease_ms == RLOCK_LEASE_WATCHDOG;
  char lbuf[24], tbuf[24], slot[24], now[24];
  size_t leasen, ttln;
  const char *lease = rlock__dec(&op->cl->dec_lease, rlock__op_lease_ms(op), lbuf, &leasen);
  const char *ttl = rlock__dec(&op->cl->dec_latch_ttl, rlock__client_latch_ttl(op->cl), tbuf, &ttln);
  size_t slotn = rlock__i64toa(rlock__client_waiter_slot(op->cl), slot);
  size_t nown = now_epoch(now);
  const char *keys[7] = {l->name, q.p, z.p, l->channel.p, latch->p, h.p, prev.p};
  size_t kl[7] = {l->len, q.n, z.n, l->channel.n, latch->n, h.n, prev.n};
  const char *args[9] = {lease,
                         op->owner_id,
                         slot,
                         now,
                         ttl,
                         op->wait_ms == 0 ? "t" : "q",
                         l->kind == &rlock__kind_fair_nonreentrant ? "1" : "0",
                         rlock__publish_cmd(op->cl),
                         direct ? op->reqid : ""};
  size_t al[9] = {
      leasen, op->owner_len, slotn, nown, ttln, 1, 1, rlock__publish_len(op->cl), direct ? sizeof op->reqid - 1 : 0};
  req_t *r = rlock__script_req(SCRIPT_FAIR_ACQUIRE, 7, keys, kl, 9, args, al, op->cl->opt.command_timeout_ms, done, op);
  free3(&q, &z, &h);
  if (prev.p != pbuf) free(prev.p);
  return r;
}

/* nil: acquired; >= 1: busy, try again within that many ms (or on a message
 * on the owner's channel); -5: not reentrant, held by this owner already;
 * -3: undone (never expected: an undone id is never re-sent). */
static int try_reply(const rlock_reply_t *reply, int64_t *wait_ms) {
  if (reply->type == RLOCK_REPLY_NIL) return KIND_GRANTED;
  if (reply->type == RLOCK_REPLY_INTEGER && reply->integer == -5)
    return rlock__fail(RLOCK_ENOTREENTRANT, "this owner holds the lock already (a non-reentrant fair lock)");
  if (reply->type != RLOCK_REPLY_INTEGER || reply->integer < 0)
    return rlock__fail(RLOCK_EPROTO, "acquire: unexpected reply");
  *wait_ms = reply->integer;
  return KIND_BUSY;
}

/* fair_acquire_undo.lua: KEYS name, queue, deadlines, channel, latch; ARGV
 * message, owner, publish command, latch TTL, keep, slot, stay. */
static req_t *undo_req(const kind_undo_t *u, req_done_fn done, void *ctx) {
  bytes_t q, z, h;
  if (queue_keys3(u->name, u->len, &q, &z, &h)) return NULL;
  char ttl[32], keep[32], slot[32];
  size_t ttln = rlock__i64toa(rlock__client_latch_ttl(u->cl), ttl);
  size_t keepn = rlock__i64toa(u->keep, keep);
  size_t slotn = rlock__i64toa(rlock__client_waiter_slot(u->cl), slot);
  const char *keys[6] = {u->name, q.p, z.p, u->channel->p, u->latch->p, h.p};
  size_t kl[6] = {u->len, q.n, z.n, u->channel->n, u->latch->n, h.n};
  const char *pub = rlock__publish_cmd(u->cl);
  const char *args[7] = {MESSAGE, u->owner_id, pub, ttl, keep, slot, u->stay ? "1" : "0"};
  size_t al[7] = {1, strlen(u->owner_id), strlen(pub), ttln, keepn, slotn, 1};
  req_t *r = rlock__script_req(SCRIPT_FAIR_ACQUIRE_UNDO, 6, keys, kl, 7, args, al, u->cl->opt.command_timeout_ms, done,
                               ctx);
  free3(&q, &z, &h);
  return r;
}

/* fair_unlock.lua: KEYS name, queue, deadlines, channel, latch; ARGV message,
 * the TTL the remaining holds need, owner, publish command, latch TTL, the
 * count the client expects to be left, how many more the server may count, now. */
static req_t *release_req(op_t *op, const bytes_t *latch, const kind_release_t *rel, req_done_fn done) {
  rlock_lock_t *l = op->lock;
  bytes_t q, z, h;
  if (queue_keys3(l->name, l->len, &q, &z, &h)) return NULL;
  char left[32], extra[32], lbuf[24], tbuf[24], now[24];
  size_t leasen, ttln;
  const char *lease = rlock__dec(&op->cl->dec_lease, rel->lease_ms, lbuf, &leasen);
  const char *ttl = rlock__dec(&op->cl->dec_latch_ttl, rlock__client_latch_ttl(op->cl), tbuf, &ttln);
  size_t leftn = rlock__i64toa(rel->left, left);
  size_t extran = rlock__i64toa(rel->unknown, extra);
  size_t nown = now_epoch(now);
  const char *keys[6] = {l->name, q.p, z.p, l->channel.p, latch->p, h.p};
  size_t kl[6] = {l->len, q.n, z.n, l->channel.n, latch->n, h.n};
  const char *args[8] = {MESSAGE, lease, op->owner_id, rlock__publish_cmd(op->cl), ttl, left, extra, now};
  size_t al[8] = {1, leasen, op->owner_len, rlock__publish_len(op->cl), ttln, leftn, extran, nown};
  req_t *r = rlock__script_req(SCRIPT_FAIR_UNLOCK, 6, keys, kl, 8, args, al, op->cl->opt.command_timeout_ms, done, op);
  free3(&q, &z, &h);
  return r;
}

/* 0 still held; 1 released; -1 the count disagreed (owner's field removed);
 * nil not held. The message goes to the queue's head only: no handoff
 * (the queue decides who is next). */
static int release_reply(const rlock_reply_t *reply, release_t *how, bool *notified) {
  *notified = false;
  if (reply->type == RLOCK_REPLY_NIL) {
    *how = REL_NOTHELD;
    return 0;
  }
  if (reply->type != RLOCK_REPLY_INTEGER || reply->integer < -1 || reply->integer > 1)
    return rlock__fail(RLOCK_EPROTO, "unlock: unexpected reply");
  *how = reply->integer == 0 ? REL_ONE : reply->integer > 0 ? REL_ALL : REL_MISMATCH;
  return 0;
}

/* fair_force_unlock.lua: KEYS name, queue, deadlines, channel; ARGV message,
 * publish command, any type, now. */
static req_t *force_req(op_t *op, req_done_fn done) {
  rlock_lock_t *l = op->lock;
  bytes_t q, z;
  if (queue_keys(l->name, l->len, &q, &z)) return NULL;
  char now[24];
  size_t nown = now_epoch(now);
  const char *keys[4] = {l->name, q.p, z.p, l->channel.p};
  size_t kl[4] = {l->len, q.n, z.n, l->channel.n};
  const char *args[4] = {MESSAGE, rlock__publish_cmd(op->cl), op->any_type ? "1" : "0", now};
  size_t al[4] = {1, rlock__publish_len(op->cl), 1, nown};
  req_t *r = rlock__script_req(SCRIPT_FAIR_FORCE_UNLOCK, 4, keys, kl, 4, args, al, op->cl->opt.command_timeout_ms, done,
                               op);
  free(q.p);
  free(z.p);
  return r;
}

/* The owner's own channel: redisson_lock__channel:{NAME}:<owner id>. */
static int waiter_channel(const op_t *op, bytes_t *out) {
  const bytes_t *c = &op->lock->channel;
  out->n = c->n + 1 + op->owner_len;
  if (!(out->p = malloc(out->n + 1))) return RLOCK_ENOMEM;
  memcpy(out->p, c->p, c->n);
  out->p[c->n] = ':';
  memcpy(out->p + c->n + 1, op->owner_id, op->owner_len + 1);
  return 0;
}

/* A free-waiter: Redisson's unlock tells the queue's head only and says
 * nothing on the lock's channel; held without a TTL (clearExpire) that
 * gives no wake-up at all, and with a long fixed lease none before it runs
 * out. It looks again at least every third of watchdog_timeout_ms. */
static int64_t look_ms(op_t *op, int64_t ttl) {
  int64_t every = op->cl->opt.watchdog_timeout_ms / 3;
  return ttl < 0 || ttl > every ? every : ttl;
}

/* A waiter the unlock may grant the lock to directly (a watchdog lease)
 * tries again at least every half lease: if the grant's message is lost
 * (a subscriber connection the server still counts, dead on the client's
 * side), its next try takes the hold over (fair_acquire.lua, KEYS[7])
 * before the lease the unlock gave it runs out; later, the hold would have
 * expired and the waiter, taken out of the queue by the grant, would queue
 * again at the tail. */
static int64_t poll_ms(op_t *op, int64_t ttl) {
  if (op->wait_ms == 0 || op->lease_ms != RLOCK_LEASE_WATCHDOG) return ttl;
  int64_t half = rlock__op_lease_ms(op) / 2;
  if (half < 1) half = 1;
  return ttl < 0 || ttl > half ? half : ttl;
}

const lock_kind_t rlock__kind_fair = {
    .name = "fair",
    .init = init,
    .try_req = try_req,
    .try_reply = try_reply,
    .undo_req = undo_req,
    .undo_reply = rlock__kind_undo_ran,
    .release_req = release_req,
    .release_reply = release_reply,
    .wake = rlock__kind_wake_one, /* one waiter listens on each channel */
    .force_req = force_req,
    .waiter_channel = waiter_channel,
    .handoff = true,
    .queues = true,
    .look_ms = look_ms,
    .poll_ms = poll_ms,
};

const lock_kind_t rlock__kind_fair_nonreentrant = {
    .name = "fair-nonreentrant",
    .init = init,
    .try_req = try_req,
    .try_reply = try_reply,
    .undo_req = undo_req,
    .undo_reply = rlock__kind_undo_ran,
    .release_req = release_req,
    .release_reply = release_reply,
    .wake = rlock__kind_wake_one,
    .force_req = force_req,
    .waiter_channel = waiter_channel,
    .handoff = true,
    .queues = true,
    .look_ms = look_ms,
    .poll_ms = poll_ms,
};
