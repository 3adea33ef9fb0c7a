/* kinds/rwlock.c -- the read-write lock (Redisson's RReadWriteLock) as two
 * lock kinds (kind.h), its read lock and its write lock, over one hash and
 * one channel; their scripts are lua/rw_*.lua.
 *
 * Layout (Redisson 4.7.0's, docs/wire-format.md "The read-write lock"): the
 * hash NAME with 'mode' ('read' or 'write'), '<uuid>:<tid>' -> that owner's
 * read hold count, '<uuid>:<tid>:write' -> its write hold count (the write
 * kind's owner ids carry the ":write" suffix); one string per read hold,
 * "{NAME}:<uuid>:<tid>:rwlock_timeout:<i>", whose TTL is that hold's lease,
 * so a dead reader blocks writers no longer than its own lease; the channel
 * redisson_rwlock:{NAME}: a read unlock that frees NAME publishes "0", a
 * write unlock "1" (Redisson's READ_UNLOCK: every waiter tries again).
 *
 * Past Redisson: a reader asking for the write lock is refused at once
 * (RLOCK_EUPGRADE; Redisson waits until its own read lease runs out, #4796),
 * and a downgrade (the writer, holding reads too, releases the write lock)
 * publishes "1", so waiting readers enter at once. */
#include "kinds/kind.h"

#include <stdlib.h>
#include <string.h>

#define CHANNEL "redisson_rwlock"
#define WRITE_SUFFIX ":write"
#define TIMEOUT_SUFFIX ":rwlock_timeout"

/* Only names whose every key Redisson builds lies in NAME's Cluster slot:
 * no brace at all, or a first '{' that opens a non-empty tag closed later.
 * The read holds' timeout keys are built inside the scripts (Redisson's, run
 * by Java programs too) from that rule, so rlock's slot-safe form for other
 * names (names.c) cannot be used for them. */
static int init(rlock_lock_t *l) {
  const char *open = memchr(l->name, '{', l->len);
  const char *close = open ? memchr(open + 1, '}', l->len - (size_t)(open + 1 - l->name)) : NULL;
  bool braces = open || memchr(l->name, '}', l->len);
  if (braces && !(open && close && close > open + 1))
    return rlock__fail(RLOCK_EINVAL,
                       "a read-write lock name with braces needs a non-empty {tag} (its keys would not share a "
                       "Cluster slot)");
  return rlock__kind_init_channel(l, CHANNEL);
}

/* Redisson's suffixName(NAME, s) prefix: "{NAME}", or NAME when it holds '{'. */
static int key_prefix(const rlock_lock_t *l, bytes_t *out) {
  bool braces = memchr(l->name, '{', l->len) != NULL;
  out->n = l->len + (braces ? 0 : 2);
  if (!(out->p = malloc(out->n + 1))) return RLOCK_ENOMEM;
  char *p = out->p;
  if (!braces) *p++ = '{';
  memcpy(p, l->name, l->len);
  p += l->len;
  if (!braces) *p++ = '}';
  *p = 0;
  return 0;
}

/* The owner's read field from an owner id (the write kind's: without ":write"). */
static size_t read_field_len(const op_t *op) {
  size_t n = op->owner_len, s = sizeof WRITE_SUFFIX - 1;
  if (op->lock->kind == &rlock__kind_write && n > s) n -= s;
  return n;
}

/* "{NAME}:<uuid>:<tid>:rwlock_timeout": the prefix of the owner's timeout keys. */
static int timeout_prefix(const op_t *op, bytes_t *out) {
  bytes_t kp;
  if (key_prefix(op->lock, &kp)) return RLOCK_ENOMEM;
  size_t f = read_field_len(op), s = sizeof TIMEOUT_SUFFIX - 1;
  out->n = kp.n + 1 + f + s;
  if (!(out->p = malloc(out->n + 1))) {
    free(kp.p);
    return RLOCK_ENOMEM;
  }
  char *p = out->p;
  memcpy(p, kp.p, kp.n), p += kp.n;
  *p++ = ':';
  memcpy(p, op->owner_id, f), p += f;
  memcpy(p, TIMEOUT_SUFFIX, s + 1);
  free(kp.p);
  return 0;
}

/* ------------------------------------------------------------ tries */

/* rw_read_acquire.lua: KEYS name, timeout prefix, latch; ARGV lease, owner,
 * owner's write field, latch TTL. */
static req_t *read_try_req(op_t *op, const bytes_t *latch, req_done_fn done) {
  rlock_lock_t *l = op->lock;
  bytes_t tp;
  if (timeout_prefix(op, &tp)) return NULL;
  char lbuf[24], tbuf[24], wfield[RLOCK__OWNER_ID_ROOM];
  size_t leasen, ttln;
  const char *lease = rlock__dec(&op->cl->dec_lease, rlock__op_lease_ms(op), lbuf, &leasen);
  const char *ttl = rlock__dec(&op->cl->dec_latch_ttl, rlock__client_latch_ttl(op->cl), tbuf, &ttln);
  memcpy(wfield, op->owner_id, op->owner_len);
  memcpy(wfield + op->owner_len, WRITE_SUFFIX, sizeof WRITE_SUFFIX);
  const char *keys[3] = {l->name, tp.p, latch->p};
  size_t kl[3] = {l->len, tp.n, latch->n};
  const char *args[4] = {lease, op->owner_id, wfield, ttl};
  size_t al[4] = {leasen, op->owner_len, op->owner_len + sizeof WRITE_SUFFIX - 1, ttln};
  req_t *r = rlock__script_req(SCRIPT_RW_READ_ACQUIRE, 3, keys, kl, 4, args, al, op->cl->opt.command_timeout_ms, done,
                               op);
  free(tp.p);
  return r;
}

/* rw_write_acquire.lua: KEYS name, latch; ARGV lease, owner (":write"),
 * latch TTL, the owner's read field (the upgrade check). */
static req_t *write_try_req(op_t *op, const bytes_t *latch, req_done_fn done) {
  rlock_lock_t *l = op->lock;
  char lbuf[24], tbuf[24];
  size_t leasen, ttln;
  const char *lease = rlock__dec(&op->cl->dec_lease, rlock__op_lease_ms(op), lbuf, &leasen);
  const char *ttl = rlock__dec(&op->cl->dec_latch_ttl, rlock__client_latch_ttl(op->cl), tbuf, &ttln);
  const char *keys[2] = {l->name, latch->p};
  size_t kl[2] = {l->len, latch->n};
  const char *args[4] = {lease, op->owner_id, ttl, op->owner_id};
  size_t al[4] = {leasen, op->owner_len, ttln, read_field_len(op)};
  return rlock__script_req(SCRIPT_RW_WRITE_ACQUIRE, 2, keys, kl, 4, args, al, op->cl->opt.command_timeout_ms, done, op);
}

/* nil: acquired; an integer >= -1: the PTTL (-1: no TTL); -4: an upgrade
 * (write kind); -3: undone (never expected). */
static int try_reply(const rlock_reply_t *reply, int64_t *wait_ms) {
  if (reply->type == RLOCK_REPLY_NIL) return KIND_GRANTED;
  if (reply->type == RLOCK_REPLY_INTEGER && reply->integer == -4)
    return rlock__fail(RLOCK_EUPGRADE,
                       "this owner holds the read lock: a read lock cannot be upgraded to the "
                       "write lock (release the read holds first)");
  if (reply->type != RLOCK_REPLY_INTEGER || reply->integer < -1)
    return rlock__fail(RLOCK_EPROTO, "acquire: unexpected reply");
  *wait_ms = reply->integer;
  return KIND_BUSY;
}

/* rw_acquire_undo.lua: KEYS name, channel, latch; ARGV (unused), owner
 * field, publish command, latch TTL, holds kept, mode. */
static req_t *undo_req(const kind_undo_t *u, const char *mode, req_done_fn done, void *ctx) {
  char ttl[32], keep[32];
  size_t ttln = rlock__i64toa(rlock__client_latch_ttl(u->cl), ttl);
  size_t keepn = rlock__i64toa(u->keep, keep);
  const char *publish = rlock__publish_cmd(u->cl);
  const char *keys[3] = {u->name, u->channel->p, u->latch->p};
  size_t kl[3] = {u->len, u->channel->n, u->latch->n};
  const char *args[6] = {"0", u->owner_id, publish, ttl, keep, mode};
  size_t al[6] = {1, strlen(u->owner_id), strlen(publish), ttln, keepn, strlen(mode)};
  return rlock__script_req(SCRIPT_RW_ACQUIRE_UNDO, 3, keys, kl, 6, args, al, u->cl->opt.command_timeout_ms, done, ctx);
}
static req_t *read_undo_req(const kind_undo_t *u, req_done_fn done, void *ctx) {
  return undo_req(u, "read", done, ctx);
}
static req_t *write_undo_req(const kind_undo_t *u, req_done_fn done, void *ctx) {
  return undo_req(u, "write", done, ctx);
}

/* ------------------------------------------------------------ releases */

/* rw_read_unlock.lua: KEYS name, channel, timeout prefix, key prefix, latch;
 * ARGV "0", owner, publish command, latch TTL (Redisson's positions). The
 * count check of the reentrant lock is not made (rel unused). */
static req_t *read_release_req(op_t *op, const bytes_t *latch, const kind_release_t *rel, req_done_fn done) {
  (void)rel;
  rlock_lock_t *l = op->lock;
  bytes_t tp, kp;
  if (timeout_prefix(op, &tp)) return NULL;
  if (key_prefix(l, &kp)) {
    free(tp.p);
    return NULL;
  }
  char tbuf[24];
  size_t ttln;
  const char *ttl = rlock__dec(&op->cl->dec_latch_ttl, rlock__client_latch_ttl(op->cl), tbuf, &ttln);
  const char *keys[5] = {l->name, l->channel.p, tp.p, kp.p, latch->p};
  size_t kl[5] = {l->len, l->channel.n, tp.n, kp.n, latch->n};
  const char *args[4] = {"0", op->owner_id, rlock__publish_cmd(op->cl), ttl};
  size_t al[4] = {1, op->owner_len, rlock__publish_len(op->cl), ttln};
  req_t *r = rlock__script_req(SCRIPT_RW_READ_UNLOCK, 5, keys, kl, 4, args, al, op->cl->opt.command_timeout_ms, done,
                               op);
  free(tp.p);
  free(kp.p);
  return r;
}

/* rw_write_unlock.lua: KEYS name, channel, latch; ARGV "1", the TTL the
 * remaining write holds need, owner (":write"), publish command, latch TTL. */
static req_t *write_release_req(op_t *op, const bytes_t *latch, const kind_release_t *rel, req_done_fn done) {
  rlock_lock_t *l = op->lock;
  char lbuf[24], tbuf[24];
  size_t leasen, ttln;
  const char *lease = rlock__dec(&op->cl->dec_lease, rel->lease_ms > 0 ? rel->lease_ms : 1, lbuf, &leasen);
  const char *ttl = rlock__dec(&op->cl->dec_latch_ttl, rlock__client_latch_ttl(op->cl), tbuf, &ttln);
  const char *keys[3] = {l->name, l->channel.p, latch->p};
  size_t kl[3] = {l->len, l->channel.n, latch->n};
  const char *args[5] = {"1", lease, op->owner_id, rlock__publish_cmd(op->cl), ttl};
  size_t al[5] = {1, leasen, op->owner_len, rlock__publish_len(op->cl), ttln};
  return rlock__script_req(SCRIPT_RW_WRITE_UNLOCK, 3, keys, kl, 5, args, al, op->cl->opt.command_timeout_ms, done, op);
}

/* 0 the owner's holds remain; 1 its last hold released; 2 the same and a
 * subscriber heard the message; nil it holds none. */
static int release_reply(const rlock_reply_t *reply, release_t *how, bool *notified) {
  if (reply->type == RLOCK_REPLY_NIL) {
    *how = REL_NOTHELD;
    return 0;
  }
  if (reply->type != RLOCK_REPLY_INTEGER || reply->integer < 0 || reply->integer > 2)
    return rlock__fail(RLOCK_EPROTO, "unlock: unexpected reply");
  *how = reply->integer == 0 ? REL_ONE : REL_ALL;
  *notified = reply->integer == 2;
  return 0;
}

/* Both messages may let several waiters in (readers after a write unlock;
 * anyone after the last read unlock): every waiter of this client tries
 * again, as Java's READ_UNLOCK does for "1". */
static int wake(const rlock_reply_t *msg) {
  (void)msg;
  return WAKE_ALL;
}

/* rw_force_unlock.lua: KEYS name, channel; ARGV message, publish command,
 * mode, any-type flag. */
static req_t *force_req(op_t *op, req_done_fn done) {
  rlock_lock_t *l = op->lock;
  bool write = l->kind == &rlock__kind_write;
  const char *keys[2] = {l->name, l->channel.p};
  size_t kl[2] = {l->len, l->channel.n};
  const char *args[4] = {write ? "1" : "0", rlock__publish_cmd(op->cl), write ? "write" : "read",
                         op->any_type ? "1" : "0"};
  return rlock__script_req(SCRIPT_RW_FORCE_UNLOCK, 2, keys, kl, 4, args, NULL, op->cl->opt.command_timeout_ms, done,
                           op);
}

/* rw_query.lua: KEYS name; ARGV which query, owner field, mode. */
static req_t *query_req(op_t *op, req_done_fn done) {
  const char *what = op->kind == OP_IS_LOCKED ? "locked"
                     : op->kind == OP_IS_HELD ? "held"
                     : op->kind == OP_COUNT   ? "count"
                                              : "holders";
  const char *keys[1] = {op->lock->name};
  size_t kl[1] = {op->lock->len};
  const char *args[3] = {what, op->owner_id, op->lock->kind == &rlock__kind_write ? "write" : "read"};
  size_t al[3] = {strlen(what), op->owner_len, strlen(args[2])};
  return rlock__script_req(SCRIPT_RW_QUERY, 1, keys, kl, 3, args, al, op->cl->opt.command_timeout_ms, done, op);
}

const lock_kind_t rlock__kind_read = {
    .name = "read",
    .init = init,
    .try_req = read_try_req,
    .try_reply = try_reply,
    .undo_req = read_undo_req,
    .undo_reply = rlock__kind_undo_ran,
    .release_req = read_release_req,
    .release_reply = release_reply,
    .wake = wake,
    .force_req = force_req,
    .renew_script = SCRIPT_RW_READ_RENEW, /* the owner's timeout keys, then NAME */
    .query_req = query_req,
    .query_locked = true,
};

const lock_kind_t rlock__kind_write = {
    .name = "write",
    .init = init,
    .try_req = write_try_req,
    .try_reply = try_reply,
    .undo_req = write_undo_req,
    .undo_reply = rlock__kind_undo_ran,
    .release_req = write_release_req,
    .release_reply = release_reply,
    .wake = wake,
    .force_req = force_req,
    .renew_script = 0, /* reentrant_renew.lua on '<uuid>:<tid>:write': Redisson's LockTask */
    .query_req = query_req,
    .owner_suffix = WRITE_SUFFIX,
    .query_locked = true,
};
