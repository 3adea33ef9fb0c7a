/* kinds/pes.c -- Redisson's RPermitExpirableSemaphore as a lock kind
 * (kind.h): a hold is one permit, its owner id the permit id (32 lowercase
 * hex; the scripts store its 16 raw bytes). Layout (Redisson 4.7.0): NAME a
 * string, the available count; "{NAME}:timeout" a zset, member the permit
 * id, score its expiry in epoch ms (922337203685477: never); channel
 * redisson_sc:{NAME}, its message a count N that wakes up to N waiters.
 * Scripts lua/pes_*.lua. lock.c does the rest as for every kind: the
 * request latches (a re-sent acquire or release counts once), waiting on
 * the channel, undoing an acquire whose outcome is unknown, and the
 * watchdog: a permit taken with RLOCK_LEASE_WATCHDOG gets its score moved
 * to now + lease every third of the lease (pes_renew.lua), past Redisson,
 * whose permits expire only at a fixed lease. */
#include "kinds/kind.h"

#include <stdlib.h>
#include <string.h>

#define CHANNEL "redisson_sc"

static int init(rlock_lock_t *l) { return rlock__kind_init_channel(l, CHANNEL); }

/* The wall clock in epoch ms, as Redisson's permit scores are. */
static size_t now_epoch(char *buf) { return rlock__i64toa(rlock__client_wall_ms(), buf); }

/* The zset "{NAME}:timeout" (Redisson's suffixName; malloc'd). */
static int zset_key(const char *name, size_t len, bytes_t *out) {
  return rlock__names_suffixed(out, name, len, "timeout") ? RLOCK_ENOMEM : 0;
}

/* pes_acquire.lua: KEYS name, zset, channel, latch; ARGV lease, permit id,
 * latch TTL, now, publish command. */
static req_t *try_req(op_t *op, const bytes_t *latch, req_done_fn done) {
  rlock_lock_t *l = op->lock;
  bytes_t z;
  if (zset_key(l->name, l->len, &z)) return NULL;
  char lbuf[24], tbuf[24], now[24];
  size_t leasen, ttln, nown = now_epoch(now);
  const char *lease = rlock__dec(&op->cl->dec_lease, rlock__op_lease_ms(op), lbuf, &leasen);
  const char *ttl = rlock__dec(&op->cl->dec_latch_ttl, rlock__client_latch_ttl(op->cl), tbuf, &ttln);
  const char *keys[4] = {l->name, z.p, l->channel.p, latch->p};
  size_t kl[4] = {l->len, z.n, l->channel.n, latch->n};
  const char *args[5] = {lease, op->owner_id, ttl, now, rlock__publish_cmd(op->cl)};
  size_t al[5] = {leasen, op->owner_len, ttln, nown, rlock__publish_len(op->cl)};
  req_t *r = rlock__script_req(SCRIPT_PES_ACQUIRE, 4, keys, kl, 5, args, al, op->cl->opt.command_timeout_ms, done, op);
  free(z.p);
  return r;
}

/* nil: the permit is held; an integer >= 1: ms until the nearest permit
 * expires; -1: wait for a message; -3: undone (never expected). */
static int try_reply(const rlock_reply_t *reply, int64_t *wait_ms) {
  if (reply->type == RLOCK_REPLY_NIL) return KIND_GRANTED;
  if (reply->type != RLOCK_REPLY_INTEGER || reply->integer < -1 || reply->integer == 0)
    return rlock__fail(RLOCK_EPROTO, "acquire: unexpected reply");
  *wait_ms = reply->integer;
  return KIND_BUSY;
}

/* A permit id is granted once: the client tracks no hold of it before
 * (each acquire makes a fresh id; a re-sent or re-tried request of the same
 * id is answered by its latch or by the id already in the zset, and lock.c
 * grants the op once). */
static void granted(op_t *op, const rlock_reply_t *reply) {
  (void)reply;
  RLOCK__ASSERT(!rlock__watchdog_tracks(&op->cl->wd, op->lock->name, op->lock->len, op->owner_id));
}

/* pes_acquire_undo.lua: KEYS name, zset, channel, latch; ARGV permit id,
 * publish command, latch TTL, the holds the client counts (0, 1, -1). */
static req_t *undo_req(const kind_undo_t *u, req_done_fn done, void *ctx) {
  bytes_t z;
  if (zset_key(u->name, u->len, &z)) return NULL;
  char ttl[32], keep[32];
  size_t ttln = rlock__i64toa(rlock__client_latch_ttl(u->cl), ttl);
  size_t keepn = rlock__i64toa(u->keep, keep);
  const char *pub = rlock__publish_cmd(u->cl);
  const char *keys[4] = {u->name, z.p, u->channel->p, u->latch->p};
  size_t kl[4] = {u->len, z.n, u->channel->n, u->latch->n};
  const char *args[4] = {u->owner_id, pub, ttl, keep};
  size_t al[4] = {strlen(u->owner_id), strlen(pub), ttln, keepn};
  req_t *r = rlock__script_req(SCRIPT_PES_ACQUIRE_UNDO, 4, keys, kl, 4, args, al, u->cl->opt.command_timeout_ms, done,
                               ctx);
  free(z.p);
  return r;
}

/* pes_release.lua: KEYS name, channel, zset, latch (Redisson's release
 * order); ARGV permit id, now, publish command, latch TTL. A permit is one
 * hold: no count to check (rel unused). */
static req_t *release_req(op_t *op, const bytes_t *latch, const kind_release_t *rel, req_done_fn done) {
  (void)rel;
  rlock_lock_t *l = op->lock;
  bytes_t z;
  if (zset_key(l->name, l->len, &z)) return NULL;
  char tbuf[24], now[24];
  size_t ttln, nown = now_epoch(now);
  const char *ttl = rlock__dec(&op->cl->dec_latch_ttl, rlock__client_latch_ttl(op->cl), tbuf, &ttln);
  const char *keys[4] = {l->name, l->channel.p, z.p, latch->p};
  size_t kl[4] = {l->len, l->channel.n, z.n, latch->n};
  const char *args[4] = {op->owner_id, now, rlock__publish_cmd(op->cl), ttl};
  size_t al[4] = {op->owner_len, nown, rlock__publish_len(op->cl), ttln};
  req_t *r = rlock__script_req(SCRIPT_PES_RELEASE, 4, keys, kl, 4, args, al, op->cl->opt.command_timeout_ms, done, op);
  free(z.p);
  return r;
}

/* 1 released; 2 released, the message reached a subscriber; 0 not held; 3
 * it had expired (counted back now, but no longer the caller's). */
static int release_reply(const rlock_reply_t *reply, release_t *how, bool *notified) {
  if (reply->type != RLOCK_REPLY_INTEGER || reply->integer < 0 || reply->integer > 3)
    return rlock__fail(RLOCK_EPROTO, "release: unexpected reply");
  *how = reply->integer == 1 || reply->integer == 2 ? REL_ALL : REL_NOTHELD;
  *notified = reply->integer == 2;
  return 0;
}

/* The message is a count N (Redisson's SemaphorePubSub): up to N waiters
 * try again; none for N <= 0. */
static int wake(const rlock_reply_t *msg) {
  if (!msg || (msg->type != RLOCK_REPLY_STRING && msg->type != RLOCK_REPLY_INTEGER)) return 1;
  int64_t n = msg->integer;
  if (msg->type == RLOCK_REPLY_STRING) {
    char buf[24];
    size_t k = msg->len < sizeof buf - 1 ? msg->len : sizeof buf - 1;
    memcpy(buf, msg->str, k);
    buf[k] = 0;
    char *end;
    n = strtoll(buf, &end, 10);
    if (end == buf || *end) return 1; /* not a count: wake one, it tries again */
  }
  return n <= 0 ? 0 : n >= WAKE_ALL ? WAKE_ALL - 1 : (int)n;
}

/* pes_call.lua: KEYS name, zset, channel; ARGV what, now, publish command,
 * op->call_arg. */
static req_t *call_req(op_t *op, const char *what, req_done_fn done) {
  rlock_lock_t *l = op->lock;
  bytes_t z;
  if (zset_key(l->name, l->len, &z)) return NULL;
  char now[24], p[24];
  size_t nown = now_epoch(now), pn = rlock__i64toa(op->call_arg, p);
  const char *keys[3] = {l->name, z.p, l->channel.p};
  size_t kl[3] = {l->len, z.n, l->channel.n};
  const char *args[4] = {what, now, rlock__publish_cmd(op->cl), p};
  size_t al[4] = {strlen(what), nown, rlock__publish_len(op->cl), pn};
  req_t *r = rlock__script_req(SCRIPT_PES_CALL, 3, keys, kl, 4, args, al, op->cl->opt.command_timeout_ms, done, op);
  free(z.p);
  return r;
}

/* Deletes NAME and its zset, every permit with them (Redisson's delete). */
static req_t *force_req(op_t *op, req_done_fn done) { return call_req(op, "delete", done); }

/* OP_KIND_CALL: op->call is an RLOCK__PES_* (kinds/kind.h). */
static req_t *query_req(op_t *op, req_done_fn done) {
  static const char *const what[] = {[RLOCK__PES_AVAILABLE] = "available", [RLOCK__PES_PERMITS] = "permits",
                                     [RLOCK__PES_ACQUIRED] = "acquired",   [RLOCK__PES_SET] = "set",
                                     [RLOCK__PES_TRY_SET] = "try_set",     [RLOCK__PES_ADD] = "add"};
  RLOCK__ASSERT(op->kind == OP_KIND_CALL && op->call >= 0 && op->call <= RLOCK__PES_ADD);
  if (op->kind != OP_KIND_CALL || op->call < 0 || op->call > RLOCK__PES_ADD) return NULL;
  return call_req(op, what[op->call], done);
}

const lock_kind_t rlock__kind_pes = {
    .name = "permit-expirable semaphore",
    .init = init,
    .try_req = try_req,
    .try_reply = try_reply,
    .undo_req = undo_req,
    .undo_reply = rlock__kind_undo_ran,
    .release_req = release_req,
    .release_reply = release_reply,
    .wake = wake,
    .force_req = force_req,
    .renew_script = SCRIPT_PES_RENEW,
    .expiry_slack_ms = 1,
    .query_req = query_req,
    .granted = granted,
};
