/* api.c -- the public lock calls: argument checks on the caller's thread,
 * then an op handed to the I/O thread. Each sync call is its async twin plus
 * a wait on a futex word (the curl "easy over multi" shape). */
#include "kinds/kind.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* ------------------------------------------------------------ lock handles */

int rlock__lock_new_kind(client_t *cl, const lock_kind_t *kind, const void *name, size_t len, rlock_lock_t **out) {
  if (!out) return rlock__fail(RLOCK_EINVAL, "out is NULL");
  *out = NULL;
  if (!cl) return rlock__fail(RLOCK_EINVAL, "client is NULL");
  if (!name || len == 0) return rlock__fail(RLOCK_EINVAL, "lock name is empty");
  if (len > RLOCK_NAME_MAX)
    return rlock__fail(RLOCK_EINVAL, "lock name is %zu bytes (the limit is %d)", len, RLOCK_NAME_MAX);
  /* One allocation: the struct and the channel, and the name unless the
   * channel holds it (every channel form ends with NAME or NAME "}"; the
   * name is not NUL-terminated): 100,000 held locks keep 100,000 handles.
   * The kind names the channel in a scratch copy. */
  rlock_lock_t tmp = {.name = (char *)name, .len = len};
  rlock_lock_t *l = NULL;
  int irc = kind->init(&tmp);
  if (irc == RLOCK_EINVAL) return irc; /* a name the kind refuses (its message set) */
  if (!irc) {
    size_t n = tmp.channel.n, at = SIZE_MAX;
    if (n >= len + 1 && !memcmp(tmp.channel.p + n - len - 1, name, len)) at = n - len - 1;
    else if (n >= len && !memcmp(tmp.channel.p + n - len, name, len)) at = n - len;
    if ((l = malloc(sizeof *l + n + 1 + (at == SIZE_MAX ? len : 0)))) {
      *l = tmp;
      l->channel.p = (char *)(l + 1);
      memcpy(l->channel.p, tmp.channel.p, n);
      l->channel.p[n] = 0;
      l->name = at == SIZE_MAX ? memcpy(l->channel.p + n + 1, name, len) : l->channel.p + at;
    }
    free(tmp.channel.p);
  }
  if (!l) return rlock__fail(RLOCK_ENOMEM, "out of memory");
  l->cl = cl;
  l->kind = kind;
  *out = l;
  return 0;
}

RLOCK_API int rlock_lock_new(rlock_client_t *cl, const void *name, size_t len, rlock_lock_t **out) {
  return rlock__lock_new_kind(cl, &rlock__kind_reentrant, name, len, out);
}

RLOCK_API int rlock_lock_new_simple(rlock_client_t *cl, const void *name, size_t len, rlock_lock_t **out) {
  return rlock__lock_new_kind(cl, &rlock__kind_simple, name, len, out);
}

RLOCK_API int rlock_lock_new_fair(rlock_client_t *cl, const void *name, size_t len, rlock_lock_t **out) {
  return rlock__lock_new_kind(cl, &rlock__kind_fair, name, len, out);
}

RLOCK_API int rlock_lock_new_fair_nonreentrant(rlock_client_t *cl, const void *name, size_t len, rlock_lock_t **out) {
  return rlock__lock_new_kind(cl, &rlock__kind_fair_nonreentrant, name, len, out);
}

RLOCK_API int rlock_lock_new_nonreentrant(rlock_client_t *cl, const void *name, size_t len, rlock_lock_t **out) {
  return rlock__lock_new_kind(cl, &rlock__kind_nonreentrant, name, len, out);
}

RLOCK_API int rlock_lock_new_fenced(rlock_client_t *cl, const void *name, size_t len, rlock_lock_t **out) {
  return rlock__lock_new_kind(cl, &rlock__kind_fenced, name, len, out);
}

RLOCK_API int rlock_lock_new_spin(rlock_client_t *cl, const void *name, size_t len, const rlock_backoff_t *backoff,
                                  rlock_lock_t **out) {
  rlock_backoff_t b = {1, 128, 2}; /* Redisson's LockOptions.defaults() */
  if (out) *out = NULL;
  if (backoff) b = *backoff;
  if (b.initial_ms < 1 || b.initial_ms > RLOCK_DURATION_MAX || b.max_ms < b.initial_ms ||
      b.max_ms > RLOCK_DURATION_MAX || b.multiplier < 1 || b.multiplier > 1000)
    return rlock__fail(RLOCK_EINVAL,
                       "spin backoff: initial %lld ms, max %lld ms, multiplier %d (want 1 <= initial <= max <= %lld, "
                       "multiplier 1 to 1000)",
                       (long long)b.initial_ms, (long long)b.max_ms, b.multiplier, (long long)RLOCK_DURATION_MAX);
  int rc = rlock__lock_new_kind(cl, &rlock__kind_spin, name, len, out);
  if (rc) return rc;
  (*out)->backoff_initial_ms = b.initial_ms;
  (*out)->backoff_max_ms = b.max_ms;
  (*out)->backoff_multiplier = b.multiplier;
  return 0;
}

RLOCK_API int rlock_rwlock_new(rlock_client_t *cl, const void *name, size_t len, rlock_lock_t **read,
                               rlock_lock_t **write) {
  if (!read || !write) return rlock__fail(RLOCK_EINVAL, "out is NULL");
  *read = *write = NULL;
  int rc = rlock__lock_new_kind(cl, &rlock__kind_read, name, len, read);
  if (!rc && (rc = rlock__lock_new_kind(cl, &rlock__kind_write, name, len, write))) {
    free(*read);
    *read = NULL;
  }
  return rc;
}

RLOCK_API void rlock_lock_free(rlock_lock_t *l) { free(l); /* name and channel inside */ }

RLOCK_API const char *rlock_lock_name(const rlock_lock_t *l, size_t *len) {
  if (len) *len = l ? l->len : 0;
  return l ? l->name : NULL;
}

/* ------------------------------------------------------------ ops
 * A call is inside its client from its first touch of it to its last
 * (rlock__client_enter/_leave), its wait and what it does after its answer
 * included: rlock_client_free refuses a call that comes once it began
 * (RLOCK_ECLOSED) and waits for every call inside. op_new enters; whoever
 * got an op leaves once (submit_async, or the sync call's end: leave_rc). */

static int enter(client_t *cl) { return rlock__client_enter(cl) ? 0 : rlock__fail(RLOCK_ECLOSED, "client closed"); }

static int leave_rc(client_t *cl, int rc) {
  rlock__client_leave(cl); /* touches nothing of cl after this */
  return rc;
}

static op_t *op_new(rlock_lock_t *l, op_kind_t kind, rlock_owner_t owner, int *rc) {
  if ((*rc = enter(l->cl))) return NULL;
  if ((*rc = rlock__client_check_fork(l->cl))) {
    rlock__client_leave(l->cl);
    return NULL;
  }
  op_t *op = rlock__op_alloc(l->cl);
  if (!op) {
    *rc = rlock__fail(RLOCK_ENOMEM, "out of memory");
    rlock__client_leave(l->cl);
    return NULL;
  }
  op->kind = kind;
  op->lock = l;
  op->cl = l->cl;
  op->owner = owner == RLOCK_OWNER_SELF ? RLOCK_OWNER_THREAD | rlock__gettid() : owner;
  op->owner_len = rlock__client_owner_id(l->cl, op->owner, op->owner_id);
  if (l->kind->owner_suffix) { /* the write lock's ":write" (fits: RLOCK__OWNER_ID_ROOM) */
    size_t n = strlen(l->kind->owner_suffix);
    RLOCK__ASSERT(op->owner_len + n < sizeof op->owner_id);
    memcpy(op->owner_id + op->owner_len, l->kind->owner_suffix, n + 1);
    op->owner_len += n;
  }
  return op;
}

static void free_parts(req_t *r);

/* An op that never reached the I/O thread. */
static void op_discard(op_t *op) {
  free_parts(op->raw);
  rlock__op_recycle(op->cl, op);
}

static int submit_async(op_t *op, rlock_cb cb, void *arg) {
  client_t *cl = op->cl;
  op->cb = cb;
  op->arg = arg;
  int rc = rlock__client_submit(cl, op);
  if (rc) op_discard(op);
  return leave_rc(cl, rc); /* op may be done and freed by now */
}

/* Runs op and waits for it. value/ptr/n receive the result. The caller
 * stays inside the client (it leaves). fast: the caller's fast call window
 * (rlock__fast_begin), closed once op is handed over. */
static int run_sync_fast(op_t *op, int64_t *value, void **ptr, size_t *n, bool fast) {
  client_t *cl = op->cl;
  if (rlock__client_on_io_thread(cl)) {
    op_discard(op);
    if (fast) rlock__fast_end(cl);
    return rlock__fail(RLOCK_EDEADLK, "blocking rlock call from the client's I/O thread (a callback)");
  }
  sync_wait_t s;
  memset(&s, 0, sizeof s);
  op->sync = &s;
  int rc = rlock__client_submit(cl, op);
  if (fast) rlock__fast_end(cl); /* a fast call's op (its answer lost) is on the stack: free undoes it */
  if (rc) {
    op_discard(op);
  } else {
    rlock__sync_wait(&s.done);
    RLOCK__TEST_HOOK(rlock__test_call_hook, cl, RLOCK__AT_ANSWERED); /* tests */
    rc = s.status;
    if (value) *value = s.value;
    if (ptr) *ptr = s.ptr;
    if (n) *n = s.n;
    if (rc) rlock__set_msg(s.msg);
  }
  return rc;
}

static int run_sync(op_t *op, int64_t *value, void **ptr, size_t *n) { return run_sync_fast(op, value, ptr, n, false); }

static int check_lock(rlock_lock_t *l) { return l ? 0 : rlock__fail(RLOCK_EINVAL, "lock is NULL"); }

/* A wait bound: 0 to RLOCK_DURATION_MAX, or RLOCK_WAIT_FOREVER (every waiting call). */
static int check_wait(int64_t wait_ms) {
  if ((wait_ms < 0 && wait_ms != RLOCK_WAIT_FOREVER) || wait_ms > RLOCK_DURATION_MAX)
    return rlock__fail(RLOCK_EINVAL, "wait time %lld ms is out of range (0 to %lld, or RLOCK_WAIT_FOREVER)",
                       (long long)wait_ms, (long long)RLOCK_DURATION_MAX);
  return 0;
}

static int check_acquire(rlock_lock_t *l, int64_t wait_ms, int64_t lease_ms) {
  if (check_lock(l)) return RLOCK_EINVAL;
  int rc = check_wait(wait_ms);
  if (rc) return rc;
  if ((lease_ms <= 0 && lease_ms != RLOCK_LEASE_WATCHDOG) || lease_ms > RLOCK_DURATION_MAX)
    return rlock__fail(RLOCK_EINVAL, "lease %lld ms is out of range (1 to %lld, or RLOCK_LEASE_WATCHDOG)",
                       (long long)lease_ms, (long long)RLOCK_DURATION_MAX);
  return 0;
}

static op_t *acquire_op(rlock_lock_t *l, rlock_owner_t owner, int64_t wait_ms, int64_t lease_ms, rlock_cancel_t *cancel,
                        int *rc) {
  if ((*rc = check_acquire(l, wait_ms, lease_ms))) return NULL;
  op_t *op = op_new(l, OP_ACQUIRE, owner, rc);
  if (!op) return NULL;
  op->wait_ms = wait_ms;
  op->lease_ms = lease_ms;
  op->cancel = cancel;
  return op;
}

RLOCK_API int rlock_lock_acquire(rlock_lock_t *l, rlock_owner_t owner, int64_t wait_ms, int64_t lease_ms,
                                 rlock_cancel_t *cancel) {
  int rc;
  op_t *op = acquire_op(l, owner, wait_ms, lease_ms, cancel, &rc);
  if (!op) return rc;
  client_t *cl = l->cl;
  RLOCK__TEST_HOOK(rlock__test_call_hook, cl, RLOCK__AT_FAST_BEGIN); /* tests */
  bool fast = rlock__fast_begin(cl);
  if (fast && rlock__fast_acquire(op, &rc)) { /* done on this thread (fast.c) */
    rlock__fast_end(cl);
    return leave_rc(cl, rc);
  }
  RLOCK__TEST_HOOK(rlock__test_call_hook, cl, RLOCK__AT_FAST_FELL_BACK); /* tests */
  return leave_rc(cl, run_sync_fast(op, NULL, NULL, NULL, fast));
}

static int check_fenced(rlock_lock_t *l, const void *out) {
  if (check_lock(l)) return RLOCK_EINVAL;
  if (l->kind != &rlock__kind_fenced) return rlock__fail(RLOCK_EINVAL, "not a fenced lock (rlock_lock_new_fenced)");
  return out ? 0 : rlock__fail(RLOCK_EINVAL, "token is NULL");
}

RLOCK_API int rlock_fenced_acquire(rlock_lock_t *l, rlock_owner_t owner, int64_t wait_ms, int64_t lease_ms,
                                   rlock_cancel_t *cancel, int64_t *token) {
  int rc;
  if ((rc = check_fenced(l, token))) return rc;
  op_t *op = acquire_op(l, owner, wait_ms, lease_ms, cancel, &rc);
  if (!op) return rc;
  int64_t v = 0;
  rc = leave_rc(l->cl, run_sync(op, &v, NULL, NULL));
  if (!rc) *token = v;
  return rc;
}

RLOCK_API int rlock_fenced_token(rlock_lock_t *l, int64_t *token) {
  int rc;
  if ((rc = check_fenced(l, token))) return rc;
  bytes_t tk;
  if (rlock__fenced_token_key(l, &tk)) return rlock__fail(RLOCK_ENOMEM, "out of memory");
  const char *argv[2] = {"GET", tk.p};
  size_t lens[2] = {3, tk.n};
  rlock_reply_t *r = NULL;
  rc = rlock_client_command(l->cl, 2, argv, lens, &r);
  free(tk.p);
  if (rc) return rc;
  char *end = NULL;
  if (r->type == RLOCK_REPLY_NIL) {
    *token = 0; /* never taken */
  } else if (r->type == RLOCK_REPLY_STRING && r->len > 0 && r->len < 20 && (*token = strtoll(r->str, &end, 10)) > 0 &&
             end == r->str + r->len) {
    /* the counter */
  } else {
    rc = rlock__fail(RLOCK_EPROTO, "the token key holds no counter");
  }
  rlock_reply_free(r);
  return rc;
}

RLOCK_API int rlock_lock_lock(rlock_lock_t *l, int64_t lease_ms) {
  return rlock_lock_acquire(l, RLOCK_OWNER_SELF, RLOCK_WAIT_FOREVER, lease_ms, NULL);
}

RLOCK_API int rlock_lock_trylock(rlock_lock_t *l, int64_t wait_ms, int64_t lease_ms) {
  return rlock_lock_acquire(l, RLOCK_OWNER_SELF, wait_ms, lease_ms, NULL);
}

RLOCK_API int rlock_lock_acquire_async(rlock_lock_t *l, rlock_owner_t owner, int64_t wait_ms, int64_t lease_ms,
                                       rlock_cancel_t *cancel, rlock_cb cb, void *arg) {
  int rc;
  op_t *op = acquire_op(l, owner, wait_ms, lease_ms, cancel, &rc);
  return op ? submit_async(op, cb, arg) : rc;
}

/* The other calls share one shape: an op of a kind, for an owner. */
static int sync_kind(rlock_lock_t *l, op_kind_t kind, rlock_owner_t owner, int64_t *value) {
  int rc;
  if (check_lock(l)) return RLOCK_EINVAL;
  op_t *op = op_new(l, kind, owner, &rc);
  return op ? leave_rc(l->cl, run_sync(op, value, NULL, NULL)) : rc;
}

static int async_kind(rlock_lock_t *l, op_kind_t kind, rlock_owner_t owner, rlock_cb cb, void *arg) {
  int rc;
  if (check_lock(l)) return RLOCK_EINVAL;
  op_t *op = op_new(l, kind, owner, &rc);
  return op ? submit_async(op, cb, arg) : rc;
}

RLOCK_API int rlock_lock_release(rlock_lock_t *l, rlock_owner_t owner) {
  int rc;
  if (check_lock(l)) return RLOCK_EINVAL;
  op_t *op = op_new(l, OP_RELEASE, owner, &rc);
  if (!op) return rc;
  client_t *cl = op->cl;
  bool fast = rlock__fast_begin(cl);
  if (fast && rlock__fast_release(op, &rc)) { /* done on this thread (fast.c) */
    rlock__fast_end(cl);
    return leave_rc(cl, rc);
  }
  uint64_t who = op->owner;
  int64_t value = 0;
  rc = run_sync_fast(op, &value, NULL, NULL, fast);
  rlock__fast_released_slow(cl, l, who, rc, value); /* the calling thread's fast table learns the count */
  return leave_rc(cl, rc);
}
RLOCK_API int rlock_lock_unlock(rlock_lock_t *l) { return rlock_lock_release(l, RLOCK_OWNER_SELF); }

static op_t *force_op(rlock_lock_t *l, unsigned flags, int *rc) {
  if ((*rc = check_lock(l))) return NULL;
  if (flags & ~RLOCK_FORCE_ANY_TYPE) {
    *rc = rlock__fail(RLOCK_EINVAL, "unknown force-unlock flags 0x%x", flags);
    return NULL;
  }
  op_t *op = op_new(l, OP_FORCE, RLOCK_OWNER_SELF, rc);
  if (op) op->any_type = flags & RLOCK_FORCE_ANY_TYPE;
  return op;
}

RLOCK_API int rlock_lock_force_unlock_flags(rlock_lock_t *l, unsigned flags, int *was_locked) {
  int rc;
  int64_t v = 0;
  op_t *op = force_op(l, flags, &rc);
  if (op) rc = leave_rc(l->cl, run_sync(op, &v, NULL, NULL));
  if (!rc && was_locked) *was_locked = (int)v;
  return rc;
}

RLOCK_API int rlock_lock_force_unlock(rlock_lock_t *l, int *was_locked) {
  return rlock_lock_force_unlock_flags(l, 0, was_locked);
}

static int sync_int(rlock_lock_t *l, op_kind_t kind, rlock_owner_t owner, int *out) {
  if (!out) return rlock__fail(RLOCK_EINVAL, "out is NULL");
  int64_t v = 0;
  int rc = sync_kind(l, kind, owner, &v);
  if (!rc) *out = (int)v;
  return rc;
}

static int sync_i64(rlock_lock_t *l, op_kind_t kind, rlock_owner_t owner, int64_t *out) {
  if (!out) return rlock__fail(RLOCK_EINVAL, "out is NULL");
  return sync_kind(l, kind, owner, out);
}

RLOCK_API int rlock_lock_is_locked(rlock_lock_t *l, int *out) {
  return sync_int(l, OP_IS_LOCKED, RLOCK_OWNER_SELF, out);
}
RLOCK_API int rlock_lock_is_held(rlock_lock_t *l, rlock_owner_t owner, int *out) {
  return sync_int(l, OP_IS_HELD, owner, out);
}
RLOCK_API int rlock_lock_hold_count(rlock_lock_t *l, rlock_owner_t owner, int64_t *out) {
  return sync_i64(l, OP_COUNT, owner, out);
}
RLOCK_API int rlock_lock_ttl(rlock_lock_t *l, int64_t *out) { return sync_i64(l, OP_TTL, RLOCK_OWNER_SELF, out); }
RLOCK_API int rlock_lock_valid_until(rlock_lock_t *l, rlock_owner_t owner, int64_t *out) {
  return sync_i64(l, OP_VALID_UNTIL, owner, out);
}

/* ------------------------------------------------------------ the node */

/* I/O thread of l's client: the node l's next command goes to (the
 * topology's route for a command on the name's slot), as "host:port",
 * "[v6]:port" or a unix socket's path, malloc'd into *out (length *len).
 * 0, RLOCK_ECONNECT (the topology named no node yet) or RLOCK_ENOMEM. Also
 * the MultiLock's order, made in a member client's callback. */
int rlock__lock_node_here(rlock_lock_t *l, char **out, size_t *len) {
  client_t *cl = l->cl;
  req_t probe;
  memset(&probe, 0, sizeof probe);
  probe.slot = rlock__names_slot(l->name, l->len);
  probe.conn = CONN_CMD;
  const conn_t *c = cl->topo->route(cl, &probe);
  if (!c->host && cl->topo->no_node_yet) /* the topology has not named the node yet */
    return rlock__fail(RLOCK_ECONNECT, "%s", cl->topo->no_node_yet);
  const char *host = c->host ? c->host : cl->url.host;
  int port = c->host ? c->port : cl->url.port;
  char *s = NULL;
  int n;
  if (!c->host && cl->url.kind == URL_UNIX) n = asprintf(&s, "%s", cl->url.path);
  else {
    bool v6 = strchr(host, ':') != NULL;
    n = asprintf(&s, "%s%s%s:%d", v6 ? "[" : "", host, v6 ? "]" : "", port);
  }
  if (n < 0) return rlock__fail(RLOCK_ENOMEM, "out of memory");
  *out = s, *len = (size_t)n;
  return 0;
}

void rlock__op_node(op_t *op) {
  char *s = NULL;
  size_t n = 0;
  int rc = rlock__lock_node_here(op->lock, &s, &n);
  rlock__op_finish(op, rc, 0, rc ? NULL : s, rc ? 0 : n);
}

RLOCK_API int rlock_lock_node(rlock_lock_t *l, char *buf, size_t buflen) {
  if (!buf || !buflen) return rlock__fail(RLOCK_EINVAL, "buf is NULL or empty");
  buf[0] = 0;
  if (check_lock(l)) return RLOCK_EINVAL;
  int rc;
  op_t *op = op_new(l, OP_NODE, RLOCK_OWNER_SELF, &rc);
  if (!op) return rc;
  void *p = NULL;
  size_t n = 0;
  if ((rc = leave_rc(l->cl, run_sync(op, NULL, &p, &n))) != 0) return rc;
  if (n >= buflen) rc = rlock__fail(RLOCK_EINVAL, "buf holds %zu bytes: the node needs %zu", buflen, n + 1);
  else memcpy(buf, p, n + 1);
  free(p);
  return rc;
}

/* The MultiLock's final step (lock.c, OP_RELET). */
int rlock__lock_relet_async(rlock_lock_t *l, uint64_t owner, int64_t lease_ms, rlock_cb cb, void *arg) {
  int rc;
  if (check_lock(l)) return RLOCK_EINVAL;
  op_t *op = op_new(l, OP_RELET, owner, &rc);
  if (!op) return rc;
  op->lease_ms = lease_ms;
  return submit_async(op, cb, arg);
}

RLOCK_API int rlock_lock_release_async(rlock_lock_t *l, rlock_owner_t owner, rlock_cb cb, void *arg) {
  return async_kind(l, OP_RELEASE, owner, cb, arg);
}
RLOCK_API int rlock_lock_force_unlock_async(rlock_lock_t *l, rlock_cb cb, void *arg) {
  return rlock_lock_force_unlock_flags_async(l, 0, cb, arg);
}
RLOCK_API int rlock_lock_force_unlock_flags_async(rlock_lock_t *l, unsigned flags, rlock_cb cb, void *arg) {
  int rc;
  op_t *op = force_op(l, flags, &rc);
  return op ? submit_async(op, cb, arg) : rc;
}
RLOCK_API int rlock_lock_is_locked_async(rlock_lock_t *l, rlock_cb cb, void *arg) {
  return async_kind(l, OP_IS_LOCKED, RLOCK_OWNER_SELF, cb, arg);
}
RLOCK_API int rlock_lock_is_held_async(rlock_lock_t *l, rlock_owner_t owner, rlock_cb cb, void *arg) {
  return async_kind(l, OP_IS_HELD, owner, cb, arg);
}
RLOCK_API int rlock_lock_hold_count_async(rlock_lock_t *l, rlock_owner_t owner, rlock_cb cb, void *arg) {
  return async_kind(l, OP_COUNT, owner, cb, arg);
}
RLOCK_API int rlock_lock_ttl_async(rlock_lock_t *l, rlock_cb cb, void *arg) {
  return async_kind(l, OP_TTL, RLOCK_OWNER_SELF, cb, arg);
}

RLOCK_API int rlock_lock_holders(rlock_lock_t *l, rlock_holder_t **out, size_t *n) {
  if (!out || !n) return rlock__fail(RLOCK_EINVAL, "out is NULL");
  *out = NULL;
  *n = 0;
  if (check_lock(l)) return RLOCK_EINVAL;
  int rc;
  op_t *op = op_new(l, OP_HOLDERS, RLOCK_OWNER_SELF, &rc);
  void *p = NULL;
  if (!op) return rc;
  rc = leave_rc(l->cl, run_sync(op, NULL, &p, n));
  *out = p;
  return rc;
}

RLOCK_API void rlock_holders_free(rlock_holder_t *h, size_t n) {
  if (!h) return;
  for (size_t i = 0; i < n; i++) free(h[i].owner);
  free(h);
}

/* ------------------------------------------------------------ plain commands */

/* Checked and formatted on the caller's thread (usercmd.c has the filter). */
static req_t *user_req(int argc, const char *const *argv, const size_t *argvlen, int *rc) {
  if (argc < 1 || !argv) {
    *rc = rlock__fail(RLOCK_EINVAL, "a command needs argc >= 1 and argv");
    return NULL;
  }
  for (int i = 0; i < argc; i++)
    if (!argv[i]) {
      *rc = rlock__fail(RLOCK_EINVAL, "argv[%d] is NULL", i);
      return NULL;
    }
  if ((*rc = rlock__usercmd_check(argc, argv, argvlen))) return NULL;
  req_t *r = rlock__req_new(argc, (const char **)argv, argvlen, 0, NULL, NULL);
  if (!r) *rc = rlock__fail(RLOCK_ENOMEM, "cannot format the command");
  return r;
}

static void free_parts(req_t *r) {
  while (r) {
    req_t *next = r->next;
    rlock__req_free(r);
    r = next;
  }
}

/* Runs the parts (one command, or MULTI ... EXEC) on the user connection. */
static int run_command(client_t *cl, int64_t timeout_ms, req_t *parts, rlock_reply_t **reply) {
  int rc = enter(cl);
  if (rc) {
    free_parts(parts);
    return rc;
  }
  if ((rc = rlock__client_check_fork(cl))) {
    free_parts(parts);
    return leave_rc(cl, rc);
  }
  op_t *op = rlock__op_alloc(cl);
  if (!op) {
    free_parts(parts);
    return leave_rc(cl, rlock__fail(RLOCK_ENOMEM, "out of memory"));
  }
  op->kind = OP_COMMAND;
  op->cl = cl;
  op->raw = parts;
  op->wait_ms = timeout_ms;
  int64_t now = rlock_now_ms();
  op->deadline = timeout_ms == RLOCK_WAIT_FOREVER || timeout_ms > INT64_MAX - now ? INT64_MAX : now + timeout_ms;
  void *p = NULL;
  rc = leave_rc(cl, run_sync(op, NULL, &p, NULL));
  *reply = p;
  return rc;
}

static int check_command_call(rlock_client_t *cl, int64_t timeout_ms, rlock_reply_t **reply) {
  if (!reply) return rlock__fail(RLOCK_EINVAL, "reply is NULL");
  *reply = NULL;
  if (!cl) return rlock__fail(RLOCK_EINVAL, "client is NULL");
  if (timeout_ms <= 0 && timeout_ms != RLOCK_WAIT_FOREVER)
    return rlock__fail(RLOCK_EINVAL, "timeout %lld ms must be > 0 (or RLOCK_WAIT_FOREVER)", (long long)timeout_ms);
  return 0;
}

RLOCK_API int rlock_client_command_timeout(rlock_client_t *cl, int64_t timeout_ms, int argc, const char *const *argv,
                                           const size_t *argvlen, rlock_reply_t **reply) {
  int rc = check_command_call(cl, timeout_ms, reply);
  req_t *r = rc ? NULL : user_req(argc, argv, argvlen, &rc);
  return r ? run_command(cl, timeout_ms, r, reply) : rc;
}

RLOCK_API int rlock_client_command(rlock_client_t *cl, int argc, const char *const *argv, const size_t *argvlen,
                                   rlock_reply_t **reply) {
  int64_t timeout_ms = cl ? cl->opt.command_timeout_ms : 1; /* a NULL client is reported there */
  return rlock_client_command_timeout(cl, timeout_ms, argc, argv, argvlen, reply);
}

RLOCK_API int rlock_client_transaction(rlock_client_t *cl, size_t ncmds, const rlock_command_t *cmds,
                                       rlock_reply_t **reply) {
  int rc = check_command_call(cl, 1, reply);
  if (rc) return rc;
  if (ncmds < 1 || !cmds) return rlock__fail(RLOCK_EINVAL, "a transaction needs ncmds >= 1 and cmds");
  static const char *const multi[] = {"MULTI"}, *const exec[] = {"EXEC"};
  req_t *head = rlock__req_new(1, (const char **)multi, NULL, 0, NULL, NULL), *tail = head;
  for (size_t i = 0; tail && i < ncmds; i++) {
    if (!(tail->next = user_req(cmds[i].argc, cmds[i].argv, cmds[i].argvlen, &rc))) {
      free_parts(head);
      return rc;
    }
    tail = tail->next;
  }
  if (!tail || !(tail->next = rlock__req_new(1, (const char **)exec, NULL, 0, NULL, NULL))) {
    free_parts(head);
    return rlock__fail(RLOCK_ENOMEM, "out of memory");
  }
  return run_command(cl, cl->opt.command_timeout_ms, head, reply);
}

/* ------------------------------------------------------------ cancellation */

RLOCK_API int rlock_cancel_new(rlock_cancel_t **out) {
  if (!out) return rlock__fail(RLOCK_EINVAL, "out is NULL");
  rlock_cancel_t *c = calloc(1, sizeof *c);
  if (!c) return rlock__fail(RLOCK_ENOMEM, "out of memory");
  c->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (c->fd < 0) {
    free(c);
    return rlock__fail(RLOCK_ESYS, "eventfd: %s", strerror(errno));
  }
  *out = c;
  return 0;
}

RLOCK_API void rlock_cancel_trigger(rlock_cancel_t *c) {
  if (!c) return;
  int saved = errno; /* async-signal-safe: an atomic store and a write(2) */
  if (!atomic_exchange(&c->triggered, 1)) {
    uint64_t one = 1;
    if (write(c->fd, &one, sizeof one) < 0) { /* cannot fail for a fresh eventfd */
    }
  }
  errno = saved;
}

RLOCK_API int rlock_cancel_is_triggered(const rlock_cancel_t *c) {
  return c ? atomic_load(&((rlock_cancel_t *)c)->triggered) : 0;
}

RLOCK_API void rlock_cancel_free(rlock_cancel_t *c) {
  if (!c) return;
  close(c->fd);
  free(c);
}

/* ------------------------------------------------------------ fair lock queue */

/* The queue and each waiter's deadline in one read (a script: consistent),
 * sent as a user command (routed by the queue key's slot on a Cluster). */
static const char FAIR_QUEUE_LUA[] =
    "local q = redis.call('lrange', KEYS[1], 0, -1) "
    "local out = {} "
    "for i = 1, #q do "
    "  out[#out + 1] = q[i] "
    "  out[#out + 1] = redis.call('zscore', KEYS[2], q[i]) or '-1' "
    "end "
    "return out";

RLOCK_API int rlock_lock_fair_waiters(rlock_lock_t *l, rlock_fair_waiter_t **out, size_t *n) {
  if (!out || !n) return rlock__fail(RLOCK_EINVAL, "out is NULL");
  *out = NULL;
  *n = 0;
  if (check_lock(l)) return RLOCK_EINVAL;
  if (l->kind != &rlock__kind_fair && l->kind != &rlock__kind_fair_nonreentrant)
    return rlock__fail(RLOCK_EINVAL, "not a fair lock handle (rlock_lock_new_fair)");
  bytes_t q = {0}, z = {0};
  if (rlock__names_prefixed(&q, "redisson_lock_queue", l->name, l->len) ||
      rlock__names_prefixed(&z, "redisson_lock_timeout", l->name, l->len)) {
    free(q.p);
    free(z.p);
    return rlock__fail(RLOCK_ENOMEM, "out of memory");
  }
  const char *argv[5] = {"EVAL", FAIR_QUEUE_LUA, "2", q.p, z.p};
  size_t lens[5] = {4, sizeof FAIR_QUEUE_LUA - 1, 1, q.n, z.n};
  rlock_reply_t *r = NULL;
  int rc = rlock_client_command(l->cl, 5, argv, lens, &r);
  free(q.p);
  free(z.p);
  if (rc) return rc;
  if (r->type == RLOCK_REPLY_ERROR) {
    rc = rlock__fail(RLOCK_ESERVER, "%.200s", r->str);
  } else if (r->type != RLOCK_REPLY_ARRAY || r->elements % 2) {
    rc = rlock__fail(RLOCK_EPROTO, "unexpected reply");
  } else if (r->elements) {
    size_t k = r->elements / 2;
    rlock_fair_waiter_t *w = calloc(k, sizeof *w);
    if (!w) rc = rlock__fail(RLOCK_ENOMEM, "out of memory");
    for (size_t i = 0; w && i < k; i++) {
      const rlock_reply_t *o = r->element[2 * i], *d = r->element[2 * i + 1];
      w[i].owner = o->str ? rlock__strndup(o->str, o->len) : NULL;
      w[i].deadline_ms = d->str ? strtoll(d->str, NULL, 10) : -1;
      if (!w[i].owner) {
        rlock_fair_waiters_free(w, k);
        w = NULL;
        rc = rlock__fail(RLOCK_EPROTO, "unexpected reply");
      }
    }
    if (w) *out = w, *n = k;
  }
  rlock_reply_free(r);
  return rc;
}

RLOCK_API void rlock_fair_waiters_free(rlock_fair_waiter_t *w, size_t n) {
  if (!w) return;
  for (size_t i = 0; i < n; i++) free(w[i].owner);
  free(w);
}

/* ------------------------------------------------------------ semaphore and latch
 * (semaphore.c). A handle is an rlock_lock_t of the semaphore or latch kind,
 * cast: the calls check the kind. */

RLOCK_API int rlock_semaphore_new(rlock_client_t *cl, const void *name, size_t len, rlock_semaphore_t **out) {
  rlock_lock_t *l = NULL;
  int rc = rlock__lock_new_kind(cl, &rlock__kind_semaphore, name, len, &l);
  if (out) *out = (rlock_semaphore_t *)l;
  return rc;
}

RLOCK_API void rlock_semaphore_free(rlock_semaphore_t *s) { rlock_lock_free((rlock_lock_t *)s); }

RLOCK_API int rlock_latch_new(rlock_client_t *cl, const void *name, size_t len, rlock_latch_t **out) {
  rlock_lock_t *l = NULL;
  int rc = rlock__lock_new_kind(cl, &rlock__kind_latch, name, len, &l);
  /* The latch's channel always has braces around NAME (Redisson's): with a
   * brace in NAME it hashes to another slot, and on a Cluster no script can
   * write NAME and publish there (CROSSSLOT). Refused here, clearly. */
  if (!rc && l && cl->url.cluster &&
      rlock__names_slot(l->channel.p, l->channel.n) != rlock__names_slot(l->name, l->len)) {
    rlock_lock_free(l);
    l = NULL;
    rc = rlock__fail(RLOCK_EINVAL,
                     "a count-down latch whose name has braces cannot be used on a Cluster: its channel "
                     "redisson_countdownlatch__channel__{NAME} (braces always, as Redisson names it) is in "
                     "another slot than NAME");
  }
  if (out) *out = (rlock_latch_t *)l;
  return rc;
}

RLOCK_API void rlock_latch_free(rlock_latch_t *c) { rlock_lock_free((rlock_lock_t *)c); }

static int check_kind(const rlock_lock_t *l, const lock_kind_t *kind) {
  if (!l) return rlock__fail(RLOCK_EINVAL, "%s is NULL", kind->name);
  return l->kind == kind ? 0 : rlock__fail(RLOCK_EINVAL, "not a %s handle", kind->name);
}

static int check_count(int64_t n, int64_t min, const char *what) {
  if (n < min || n > RLOCK_PERMITS_MAX)
    return rlock__fail(RLOCK_EINVAL, "%s %lld is out of range (%lld to %lld)", what, (long long)n, (long long)min,
                       (long long)RLOCK_PERMITS_MAX);
  return 0;
}

/* An op of a semaphore or latch call (kind checked by the caller). */
static op_t *obj_op(rlock_lock_t *l, op_kind_t kind, int script, int64_t permits, int64_t wait_ms,
                    rlock_cancel_t *cancel, int *rc) {
  op_t *op = op_new(l, kind, RLOCK_OWNER_SELF, rc);
  if (!op) return NULL;
  op->script = script;
  op->permits = permits;
  op->wait_ms = wait_ms;
  op->cancel = cancel;
  return op;
}

static int obj_sync(rlock_lock_t *l, op_kind_t kind, int script, int64_t permits, int64_t wait_ms,
                    rlock_cancel_t *cancel, int64_t *value) {
  int rc;
  op_t *op = obj_op(l, kind, script, permits, wait_ms, cancel, &rc);
  if (!op) return rc;
  int64_t v = 0;
  rc = leave_rc(l->cl, run_sync(op, &v, NULL, NULL));
  if (!rc && value) *value = v;
  return rc;
}

#define SEM(s) ((rlock_lock_t *)(s))

RLOCK_API int rlock_semaphore_acquire(rlock_semaphore_t *s, int64_t permits, int64_t wait_ms, rlock_cancel_t *cancel) {
  int rc;
  if ((rc = check_kind(SEM(s), &rlock__kind_semaphore)) || (rc = check_count(permits, 1, "permits")) ||
      (rc = check_wait(wait_ms)))
    return rc;
  return obj_sync(SEM(s), OP_SEM_ACQUIRE, 0, permits, wait_ms, cancel, NULL);
}

RLOCK_API int rlock_semaphore_try_acquire(rlock_semaphore_t *s, int64_t permits) {
  return rlock_semaphore_acquire(s, permits, 0, NULL);
}

RLOCK_API int rlock_semaphore_acquire_async(rlock_semaphore_t *s, int64_t permits, int64_t wait_ms,
                                            rlock_cancel_t *cancel, rlock_semaphore_cb cb, void *arg) {
  int rc;
  if ((rc = check_kind(SEM(s), &rlock__kind_semaphore)) || (rc = check_count(permits, 1, "permits")) ||
      (rc = check_wait(wait_ms)))
    return rc;
  op_t *op = obj_op(SEM(s), OP_SEM_ACQUIRE, 0, permits, wait_ms, cancel, &rc);
  if (!op) return rc;
  op->sem_cb = cb;
  return submit_async(op, NULL, arg);
}

RLOCK_API int rlock_semaphore_release(rlock_semaphore_t *s, int64_t permits, int64_t *available) {
  int rc;
  if ((rc = check_kind(SEM(s), &rlock__kind_semaphore)) || (rc = check_count(permits, 1, "permits"))) return rc;
  return obj_sync(SEM(s), OP_SEM_CALL, SCRIPT_SEMAPHORE_RELEASE, permits, 0, NULL, available);
}

RLOCK_API int rlock_semaphore_release_async(rlock_semaphore_t *s, int64_t permits, rlock_semaphore_cb cb, void *arg) {
  int rc;
  if ((rc = check_kind(SEM(s), &rlock__kind_semaphore)) || (rc = check_count(permits, 1, "permits"))) return rc;
  op_t *op = obj_op(SEM(s), OP_SEM_CALL, SCRIPT_SEMAPHORE_RELEASE, permits, 0, NULL, &rc);
  if (!op) return rc;
  op->sem_cb = cb;
  return submit_async(op, NULL, arg);
}

RLOCK_API int rlock_semaphore_try_set_permits(rlock_semaphore_t *s, int64_t permits, int *set) {
  int rc;
  if ((rc = check_kind(SEM(s), &rlock__kind_semaphore)) || (rc = check_count(permits, 0, "permits"))) return rc;
  int64_t v = 0;
  rc = obj_sync(SEM(s), OP_SEM_CALL, SCRIPT_SEMAPHORE_SET, permits, 0, NULL, &v);
  if (!rc && set) *set = v == 1;
  return rc;
}

RLOCK_API int rlock_semaphore_add_permits(rlock_semaphore_t *s, int64_t delta, int64_t *available) {
  int rc;
  if ((rc = check_kind(SEM(s), &rlock__kind_semaphore))) return rc;
  if (delta < -RLOCK_PERMITS_MAX || delta > RLOCK_PERMITS_MAX)
    return rlock__fail(RLOCK_EINVAL, "delta %lld is out of range (-%lld to %lld)", (long long)delta,
                       (long long)RLOCK_PERMITS_MAX, (long long)RLOCK_PERMITS_MAX);
  return obj_sync(SEM(s), OP_SEM_CALL, SCRIPT_SEMAPHORE_ADD, delta, 0, NULL, available);
}

RLOCK_API int rlock_semaphore_drain(rlock_semaphore_t *s, int64_t *drained) {
  int rc;
  if ((rc = check_kind(SEM(s), &rlock__kind_semaphore))) return rc;
  return obj_sync(SEM(s), OP_SEM_CALL, SCRIPT_SEMAPHORE_DRAIN, 0, 0, NULL, drained);
}

RLOCK_API int rlock_semaphore_available(rlock_semaphore_t *s, int64_t *out) {
  int rc;
  if ((rc = check_kind(SEM(s), &rlock__kind_semaphore))) return rc;
  if (!out) return rlock__fail(RLOCK_EINVAL, "out is NULL");
  return obj_sync(SEM(s), OP_SEM_CALL, 0, 0, 0, NULL, out);
}

#define LAT(c) ((rlock_lock_t *)(c))

RLOCK_API int rlock_latch_try_set_count(rlock_latch_t *c, int64_t count, int *set) {
  int rc;
  if ((rc = check_kind(LAT(c), &rlock__kind_latch)) || (rc = check_count(count, 1, "count"))) return rc;
  int64_t v = 0;
  rc = obj_sync(LAT(c), OP_SEM_CALL, SCRIPT_LATCH_SET, count, 0, NULL, &v);
  if (!rc && set) *set = v == 1;
  return rc;
}

RLOCK_API int rlock_latch_count_down(rlock_latch_t *c, int64_t *left) {
  int rc;
  if ((rc = check_kind(LAT(c), &rlock__kind_latch))) return rc;
  return obj_sync(LAT(c), OP_SEM_CALL, SCRIPT_LATCH_COUNT_DOWN, 0, 0, NULL, left);
}

RLOCK_API int rlock_latch_count_down_async(rlock_latch_t *c, rlock_latch_cb cb, void *arg) {
  int rc;
  if ((rc = check_kind(LAT(c), &rlock__kind_latch))) return rc;
  op_t *op = obj_op(LAT(c), OP_SEM_CALL, SCRIPT_LATCH_COUNT_DOWN, 0, 0, NULL, &rc);
  if (!op) return rc;
  op->latch_cb = cb;
  return submit_async(op, NULL, arg);
}

RLOCK_API int rlock_latch_get_count(rlock_latch_t *c, int64_t *out) {
  int rc;
  if ((rc = check_kind(LAT(c), &rlock__kind_latch))) return rc;
  if (!out) return rlock__fail(RLOCK_EINVAL, "out is NULL");
  return obj_sync(LAT(c), OP_SEM_CALL, 0, 0, 0, NULL, out);
}

RLOCK_API int rlock_latch_await(rlock_latch_t *c, int64_t wait_ms, rlock_cancel_t *cancel) {
  int rc;
  if ((rc = check_kind(LAT(c), &rlock__kind_latch)) || (rc = check_wait(wait_ms))) return rc;
  return obj_sync(LAT(c), OP_LATCH_AWAIT, 0, 0, wait_ms, cancel, NULL);
}

RLOCK_API int rlock_latch_await_async(rlock_latch_t *c, int64_t wait_ms, rlock_cancel_t *cancel, rlock_latch_cb cb,
                                      void *arg) {
  int rc;
  if ((rc = check_kind(LAT(c), &rlock__kind_latch)) || (rc = check_wait(wait_ms))) return rc;
  op_t *op = obj_op(LAT(c), OP_LATCH_AWAIT, 0, 0, wait_ms, cancel, &rc);
  if (!op) return rc;
  op->latch_cb = cb;
  return submit_async(op, NULL, arg);
}

RLOCK_API int rlock_lock_await_free(rlock_lock_t *l, int64_t wait_ms, rlock_cancel_t *cancel) {
  int rc;
  if ((rc = check_lock(l)) || (rc = check_wait(wait_ms))) return rc;
  if (l->kind == &rlock__kind_semaphore || l->kind == &rlock__kind_latch || l->kind == &rlock__kind_pes)
    return rlock__fail(RLOCK_EINVAL, "not a lock handle (a %s)", l->kind->name);
  return obj_sync(l, OP_AWAIT_FREE, 0, 0, wait_ms, cancel, NULL);
}

/* ------------------------------------------------------------ permit-expirable semaphore
 * An rlock_permits_t is a lock handle of kind rlock__kind_pes (kinds/pes.c):
 * the same struct, cast. An acquire's owner id is a fresh permit id (32
 * lowercase hex of 16 random bytes), so lock.c's latches, undo, waiting and
 * watchdog treat each permit as one hold of its own. */

static rlock_lock_t *pes_lock(rlock_permits_t *s) { return (rlock_lock_t *)(void *)s; }

static int check_pes(rlock_permits_t *s) {
  if (!s) return rlock__fail(RLOCK_EINVAL, "semaphore is NULL");
  if (pes_lock(s)->kind != &rlock__kind_pes)
    return rlock__fail(RLOCK_EINVAL, "not a permit-expirable semaphore (rlock_permits_new)");
  return 0;
}

static bool permit_id_ok(const char *id) {
  if (!id) return false;
  for (int i = 0; i < RLOCK_PERMIT_ID_LEN; i++)
    if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f'))) return false;
  return id[RLOCK_PERMIT_ID_LEN] == 0;
}

/* The op's owner becomes the permit id (and a number made from it, never a
 * thread's: the lost callback's owner). */
static void pes_owner(op_t *op, const char *id) {
  memcpy(op->owner_id, id, RLOCK_PERMIT_ID_LEN + 1);
  op->owner_len = RLOCK_PERMIT_ID_LEN;
  uint64_t o = 0;
  for (int i = 0; i < 15; i++) o = o << 4 | (uint64_t)(id[i] <= '9' ? id[i] - '0' : id[i] - 'a' + 10);
  op->owner = o + 1; /* 60 bits: the thread bit is never set */
  RLOCK__ASSERT(!(op->owner & RLOCK_OWNER_THREAD));
}

RLOCK_API int rlock_permits_new(rlock_client_t *cl, const void *name, size_t len, rlock_permits_t **out) {
  rlock_lock_t *l = NULL;
  if (!out) return rlock__fail(RLOCK_EINVAL, "out is NULL");
  int rc = rlock__lock_new_kind(cl, &rlock__kind_pes, name, len, &l);
  *out = (rlock_permits_t *)(void *)l;
  return rc;
}

RLOCK_API void rlock_permits_free(rlock_permits_t *s) { free(s); }

typedef struct pes_async {
  rlock_permits_cb cb;
  void *arg;
} pes_async_t;

static void pes_async_done(rlock_lock_t *l, int status, int64_t value, void *arg) {
  pes_async_t a = *(pes_async_t *)arg;
  free(arg);
  a.cb((rlock_permits_t *)(void *)l, status, value, a.arg);
}

/* Runs op: sync (cb NULL: *value gets the result) or async. */
static int pes_run(op_t *op, rlock_permits_cb cb, void *arg, int64_t *value) {
  client_t *cl = op->cl;
  if (!cb) return leave_rc(cl, run_sync(op, value, NULL, NULL));
  pes_async_t *a = malloc(sizeof *a);
  if (!a) {
    op_discard(op);
    return leave_rc(cl, rlock__fail(RLOCK_ENOMEM, "out of memory"));
  }
  a->cb = cb, a->arg = arg;
  int rc = submit_async(op, pes_async_done, a);
  if (rc) free(a); /* cb does not run */
  return rc;
}

static int pes_acquire(rlock_permits_t *s, int64_t wait_ms, int64_t lease_ms, rlock_cancel_t *cancel,
                       char id[RLOCK_PERMIT_ID_LEN + 1], rlock_permits_cb cb, void *arg) {
  int rc;
  if ((rc = check_pes(s))) return rc;
  if (!id) return rlock__fail(RLOCK_EINVAL, "id is NULL");
  id[0] = 0;
  rlock_lock_t *l = pes_lock(s);
  op_t *op = acquire_op(l, RLOCK_OWNER_SELF, wait_ms, lease_ms, cancel, &rc);
  if (!op) return rc;
  char fresh[RLOCK_PERMIT_ID_LEN + 1];
  rlock__random_hex(fresh, RLOCK_PERMIT_ID_LEN / 2);
  pes_owner(op, fresh);
  memcpy(id, fresh, sizeof fresh); /* the caller's before the op may end (async) */
  rc = pes_run(op, cb, arg, NULL);
  if (rc && !cb) id[0] = 0;
  return rc;
}

RLOCK_API int rlock_permits_acquire(rlock_permits_t *s, int64_t wait_ms, int64_t lease_ms, rlock_cancel_t *cancel,
                                    char id[RLOCK_PERMIT_ID_LEN + 1]) {
  return pes_acquire(s, wait_ms, lease_ms, cancel, id, NULL, NULL);
}

RLOCK_API int rlock_permits_try_acquire(rlock_permits_t *s, int64_t lease_ms, char id[RLOCK_PERMIT_ID_LEN + 1]) {
  return pes_acquire(s, 0, lease_ms, NULL, id, NULL, NULL);
}

RLOCK_API int rlock_permits_acquire_async(rlock_permits_t *s, int64_t wait_ms, int64_t lease_ms, rlock_cancel_t *cancel,
                                          char id[RLOCK_PERMIT_ID_LEN + 1], rlock_permits_cb cb, void *arg) {
  if (!cb) return rlock__fail(RLOCK_EINVAL, "cb is NULL");
  return pes_acquire(s, wait_ms, lease_ms, cancel, id, cb, arg);
}

static int pes_release(rlock_permits_t *s, const char *id, rlock_permits_cb cb, void *arg) {
  int rc;
  if ((rc = check_pes(s))) return rc;
  if (!permit_id_ok(id))
    return rlock__fail(RLOCK_EINVAL, "permit id is not %d lowercase hex characters", RLOCK_PERMIT_ID_LEN);
  op_t *op = op_new(pes_lock(s), OP_RELEASE, RLOCK_OWNER_SELF, &rc);
  if (!op) return rc;
  pes_owner(op, id);
  return pes_run(op, cb, arg, NULL);
}

RLOCK_API int rlock_permits_release(rlock_permits_t *s, const char *id) { return pes_release(s, id, NULL, NULL); }

RLOCK_API int rlock_permits_try_release(rlock_permits_t *s, const char *id, int *released) {
  if (!released) return rlock__fail(RLOCK_EINVAL, "released is NULL");
  *released = 0;
  int rc = pes_release(s, id, NULL, NULL);
  if (rc == RLOCK_ENOTHELD) return 0;
  if (!rc) *released = 1;
  return rc;
}

RLOCK_API int rlock_permits_release_async(rlock_permits_t *s, const char *id, rlock_permits_cb cb, void *arg) {
  if (!cb) return rlock__fail(RLOCK_EINVAL, "cb is NULL");
  return pes_release(s, id, cb, arg);
}

static int pes_call(rlock_permits_t *s, int call, int64_t p, rlock_permits_cb cb, void *arg, int64_t *out) {
  int rc;
  if ((rc = check_pes(s))) return rc;
  if (p < -RLOCK_PERMITS_MAX || p > RLOCK_PERMITS_MAX)
    return rlock__fail(RLOCK_EINVAL, "permit count %lld is out of range (-%lld to %lld)", (long long)p,
                       (long long)RLOCK_PERMITS_MAX, (long long)RLOCK_PERMITS_MAX);
  if ((call == RLOCK__PES_SET || call == RLOCK__PES_TRY_SET) && p < 0)
    return rlock__fail(RLOCK_EINVAL, "permit count %lld is negative", (long long)p);
  op_t *op = op_new(pes_lock(s), OP_KIND_CALL, RLOCK_OWNER_SELF, &rc);
  if (!op) return rc;
  op->call = call;
  op->call_arg = p;
  op->call_once = call == RLOCK__PES_ADD; /* not idempotent: a lost answer is not re-sent */
  int64_t v = 0;
  rc = pes_run(op, cb, arg, &v);
  if (!rc && out) *out = v;
  return rc;
}

RLOCK_API int rlock_permits_available(rlock_permits_t *s, int64_t *out) {
  if (!out) return rlock__fail(RLOCK_EINVAL, "out is NULL");
  return pes_call(s, RLOCK__PES_AVAILABLE, 0, NULL, NULL, out);
}
RLOCK_API int rlock_permits_total(rlock_permits_t *s, int64_t *out) {
  if (!out) return rlock__fail(RLOCK_EINVAL, "out is NULL");
  return pes_call(s, RLOCK__PES_PERMITS, 0, NULL, NULL, out);
}
RLOCK_API int rlock_permits_acquired(rlock_permits_t *s, int64_t *out) {
  if (!out) return rlock__fail(RLOCK_EINVAL, "out is NULL");
  return pes_call(s, RLOCK__PES_ACQUIRED, 0, NULL, NULL, out);
}
RLOCK_API int rlock_permits_set(rlock_permits_t *s, int64_t permits) {
  return pes_call(s, RLOCK__PES_SET, permits, NULL, NULL, NULL);
}
RLOCK_API int rlock_permits_try_set(rlock_permits_t *s, int64_t permits, int *set) {
  if (!set) return rlock__fail(RLOCK_EINVAL, "set is NULL");
  int64_t v = 0;
  int rc = pes_call(s, RLOCK__PES_TRY_SET, permits, NULL, NULL, &v);
  *set = !rc && v == 1;
  return rc;
}
RLOCK_API int rlock_permits_add(rlock_permits_t *s, int64_t delta, int64_t *available) {
  return pes_call(s, RLOCK__PES_ADD, delta, NULL, NULL, available);
}
RLOCK_API int rlock_permits_available_async(rlock_permits_t *s, rlock_permits_cb cb, void *arg) {
  if (!cb) return rlock__fail(RLOCK_EINVAL, "cb is NULL");
  return pes_call(s, RLOCK__PES_AVAILABLE, 0, cb, arg, NULL);
}
RLOCK_API int rlock_permits_set_async(rlock_permits_t *s, int64_t permits, rlock_permits_cb cb, void *arg) {
  if (!cb) return rlock__fail(RLOCK_EINVAL, "cb is NULL");
  return pes_call(s, RLOCK__PES_SET, permits, cb, arg, NULL);
}
RLOCK_API int rlock_permits_try_set_async(rlock_permits_t *s, int64_t permits, rlock_permits_cb cb, void *arg) {
  if (!cb) return rlock__fail(RLOCK_EINVAL, "cb is NULL");
  return pes_call(s, RLOCK__PES_TRY_SET, permits, cb, arg, NULL);
}
RLOCK_API int rlock_permits_add_async(rlock_permits_t *s, int64_t delta, rlock_permits_cb cb, void *arg) {
  if (!cb) return rlock__fail(RLOCK_EINVAL, "cb is NULL");
  return pes_call(s, RLOCK__PES_ADD, delta, cb, arg, NULL);
}
/* The permit's valid-until (rlock_now_ms clock) as this client tracks it:
 * the lease's end, moved by each renewal; RLOCK_ENOTHELD if it tracks no
 * permit of that id. */
RLOCK_API int rlock_permits_valid_until(rlock_permits_t *s, const char *id, int64_t *out) {
  int rc;
  if ((rc = check_pes(s))) return rc;
  if (!out) return rlock__fail(RLOCK_EINVAL, "out is NULL");
  if (!permit_id_ok(id))
    return rlock__fail(RLOCK_EINVAL, "permit id is not %d lowercase hex characters", RLOCK_PERMIT_ID_LEN);
  op_t *op = op_new(pes_lock(s), OP_VALID_UNTIL, RLOCK_OWNER_SELF, &rc);
  if (!op) return rc;
  pes_owner(op, id);
  return pes_run(op, NULL, NULL, out);
}
RLOCK_API int rlock_permits_delete(rlock_permits_t *s, int *deleted) {
  int rc;
  if ((rc = check_pes(s))) return rc;
  op_t *op = force_op(pes_lock(s), 0, &rc);
  if (!op) return rc;
  int64_t v = 0;
  client_t *cl = op->cl;
  rc = leave_rc(cl, run_sync(op, &v, NULL, NULL));
  if (deleted) *deleted = !rc && v == 1;
  return rc;
}
