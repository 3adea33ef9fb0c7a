/* usercmd.c -- the user's own Redis commands (rlock_client_command and
 * rlock_client_transaction), kept away from the lock traffic.
 *
 * They run on a third connection of the client, the user connection, opened
 * on first use with the same handshake as the command connection (AUTH,
 * SELECT, CLIENT SETNAME) but no scripts. Nothing a user sends can then
 * delay a renewal or an acquire (BLPOP 0, WAIT, XREAD BLOCK) or put the lock
 * connection in another state. The user connection is shared by every
 * thread, so commands that change its state or would break the one-reply-
 * per-command stream (SUBSCRIBE, MONITOR, SELECT, HELLO, CLIENT REPLY, QUIT,
 * RESET, MULTI/EXEC, WATCH...) are refused before anything is sent; a
 * transaction is sent as one unit instead (MULTI, the commands, EXEC in one
 * write, so no other thread's command can land inside it).
 *
 * A command that outlives its timeout leaves the connection waiting for its
 * reply (a BLPOP 0 stays blocked on the server): once nothing still running
 * is ahead of such a command, the connection is dropped and reopened, so the
 * commands after it are not stuck behind it. That holds for each user
 * connection: on a Cluster there is one per master besides the first seed's.
 *
 * Cluster routing: a call is sent with its key (the topology routes it to
 * the key's slot master; single-server deployments ignore it). The key is
 * argv[1] for the data commands listed in keyed[] (strings, keys, hashes,
 * lists, sets, sorted sets, streams, HyperLogLog, bitmaps, geo, SPUBLISH's
 * channel), argv[2] for those of second[] (BITOP op dest, OBJECT ENCODING
 * key...) and of counted[] ("SINTERCARD numkeys
 * key..."), argv[3] for EVAL/EVALSHA/FCALL (and _RO), BLMPOP, BZMPOP with
 * numkeys > 0; any
 * other command is keyless (the first seed). A transaction takes the key of
 * its first keyed command, and its parts are pinned: a redirect inside it
 * is not followed (the commands would run outside MULTI), EXEC's
 * EXECABORT comes back to the caller. */
#include "client.h"
#include "op.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ the filter */

static const char STREAM[] = "it would turn the shared user connection into a stream of messages";
static const char STATE[] = "it would change the state of the user connection, which all threads share";
static const char DB[] = "the database is the URL's (redis://host:port/DB)";
static const char TX[] =
    "the user connection is shared by all threads: use rlock_client_transaction "
    "(WATCH is not available: hold an rlock around the read-modify-write instead)";

typedef struct refusal {
  const char *name;
  const char *why;
} refusal_t;

static const refusal_t refused[] = {
    {"SUBSCRIBE", STREAM},
    {"PSUBSCRIBE", STREAM},
    {"SSUBSCRIBE", STREAM},
    {"UNSUBSCRIBE", STREAM},
    {"PUNSUBSCRIBE", STREAM},
    {"SUNSUBSCRIBE", STREAM},
    {"MONITOR", STREAM},
    {"SYNC", STREAM},
    {"PSYNC", STREAM},
    {"REPLCONF", STREAM},
    {"SELECT", DB},
    {"HELLO", STATE},
    {"AUTH", STATE},
    {"RESET", STATE},
    {"READONLY", STATE},
    {"READWRITE", STATE},
    {"ASKING", STATE},
    {"QUIT", "it would close the user connection, which all threads share"},
    {"MULTI", TX},
    {"EXEC", TX},
    {"DISCARD", TX},
    {"WATCH", TX},
    {"UNWATCH", TX},
};

/* CLIENT subcommands that set state of the calling connection. */
static const char *const client_refused[] = {"REPLY",   "TRACKING", "CACHING", "SETNAME",
                                             "SETINFO", "NO-EVICT", "NO-TOUCH"};

/* ASCII case folding, as Redis looks commands up: strncasecmp follows the
 * application's locale (in Turkish 'i' and 'I' are not one letter). */
static bool word_is(const char *arg, size_t len, const char *word) {
  return len == strlen(word) && rlock__ascii_ncaseeq(arg, word, len);
}

static size_t arg_len(const char *const *argv, const size_t *argvlen, int i) {
  return argvlen ? argvlen[i] : strlen(argv[i]);
}

int rlock__usercmd_check(int argc, const char *const *argv, const size_t *argvlen) {
  size_t len = arg_len(argv, argvlen, 0);
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
    if (word_is(argv[0], len, refused[i].name))
      return rlock__fail(RLOCK_EINVAL, "%s is refused by rlock_client_command: %s", refused[i].name, refused[i].why);
  if (argc < 2 || !word_is(argv[0], len, "CLIENT")) return 0;
  size_t sublen = arg_len(argv, argvlen, 1);
  for (size_t i = 0; i < sizeof client_refused / sizeof client_refused[0]; i++)
    if (word_is(argv[1], sublen, client_refused[i]))
      return rlock__fail(RLOCK_EINVAL, "CLIENT %s is refused by rlock_client_command: %s", client_refused[i], STATE);
  return 0;
}

/* ------------------------------------------------------------ the key */

/* Commands whose first key is argv[1]. */
static const char *const keyed[] = {
    "GET",
    "SET",
    "SETNX",
    "SETEX",
    "PSETEX",
    "GETSET",
    "GETDEL",
    "GETEX",
    "APPEND",
    "STRLEN",
    "INCR",
    "INCRBY",
    "INCRBYFLOAT",
    "DECR",
    "DECRBY",
    "GETRANGE",
    "SETRANGE",
    "SUBSTR",
    "MGET",
    "MSET",
    "MSETNX",
    "LCS",
    "DEL",
    "UNLINK",
    "EXISTS",
    "TYPE",
    "TTL",
    "PTTL",
    "EXPIRE",
    "PEXPIRE",
    "EXPIREAT",
    "PEXPIREAT",
    "EXPIRETIME",
    "PEXPIRETIME",
    "PERSIST",
    "DUMP",
    "RESTORE",
    "TOUCH",
    "RENAME",
    "RENAMENX",
    "COPY",
    "SORT",
    "SORT_RO",
    "HSET",
    "HSETNX",
    "HMSET",
    "HGET",
    "HMGET",
    "HDEL",
    "HGETALL",
    "HKEYS",
    "HVALS",
    "HLEN",
    "HEXISTS",
    "HSTRLEN",
    "HINCRBY",
    "HINCRBYFLOAT",
    "HSCAN",
    "HRANDFIELD",
    "LPUSH",
    "RPUSH",
    "LPUSHX",
    "RPUSHX",
    "LPOP",
    "RPOP",
    "LLEN",
    "LRANGE",
    "LINDEX",
    "LSET",
    "LREM",
    "LTRIM",
    "LINSERT",
    "LPOS",
    "LMOVE",
    "RPOPLPUSH",
    "BLPOP",
    "BRPOP",
    "BLMOVE",
    "BRPOPLPUSH",
    "SADD",
    "SREM",
    "SMEMBERS",
    "SISMEMBER",
    "SMISMEMBER",
    "SCARD",
    "SPOP",
    "SRANDMEMBER",
    "SINTER",
    "SUNION",
    "SDIFF",
    "SINTERSTORE",
    "SUNIONSTORE",
    "SDIFFSTORE",
    "SMOVE",
    "SSCAN",
    "ZADD",
    "ZREM",
    "ZCARD",
    "ZSCORE",
    "ZMSCORE",
    "ZINCRBY",
    "ZRANK",
    "ZREVRANK",
    "ZCOUNT",
    "ZLEXCOUNT",
    "ZRANGE",
    "ZRANGEBYSCORE",
    "ZRANGEBYLEX",
    "ZREVRANGE",
    "ZREVRANGEBYSCORE",
    "ZREVRANGEBYLEX",
    "ZRANGESTORE",
    "ZPOPMIN",
    "ZPOPMAX",
    "BZPOPMIN",
    "BZPOPMAX",
    "ZREMRANGEBYRANK",
    "ZREMRANGEBYSCORE",
    "ZREMRANGEBYLEX",
    "ZSCAN",
    "ZRANDMEMBER",
    "ZUNIONSTORE",
    "ZINTERSTORE",
    "ZDIFFSTORE",
    "XADD",
    "XLEN",
    "XRANGE",
    "XREVRANGE",
    "XDEL",
    "XTRIM",
    "XACK",
    "XCLAIM",
    "XAUTOCLAIM",
    "XPENDING",
    "XSETID",
    "PFADD",
    "PFCOUNT",
    "PFMERGE",
    "SETBIT",
    "GETBIT",
    "BITCOUNT",
    "BITPOS",
    "BITFIELD",
    "BITFIELD_RO",
    "GEOADD",
    "GEODIST",
    "GEOHASH",
    "GEOPOS",
    "GEOSEARCH",
    "GEOSEARCHSTORE",
    "GEORADIUS",
    "GEORADIUS_RO",
    "GEORADIUSBYMEMBER",
    "GEORADIUSBYMEMBER_RO",
    "SPUBLISH",
};

/* Commands whose first key is argv[2], after an operation or subcommand
 * (BITOP OR dest..., OBJECT ENCODING key, MEMORY USAGE key, XGROUP CREATE
 * key..., XINFO STREAM key); their forms without one (OBJECT HELP, MEMORY
 * STATS) have no argv[2] and are keyless. */
static const char *const second[] = {"BITOP", "OBJECT", "MEMORY", "XGROUP", "XINFO"};

/* Commands "NAME numkeys key...": the first key is argv[2] when numkeys > 0
 * (argv[1] is a count, not a key: hashed, it would pick a wrong master). */
static const char *const counted[] = {"SINTERCARD", "ZINTERCARD", "ZINTER", "ZUNION", "ZDIFF", "LMPOP", "ZMPOP"};

/* Commands "NAME script numkeys key..." (BLMPOP/BZMPOP: "NAME timeout
 * numkeys key..."): the first key is argv[3] when numkeys > 0. */
static const char *const scripted[] = {"EVAL",  "EVALSHA",  "EVAL_RO", "EVALSHA_RO",
                                       "FCALL", "FCALL_RO", "BLMPOP",  "BZMPOP"};

/* Argument i of r's formatted command (RESP "*N\r\n$L\r\n...\r\n"). */
static bool resp_arg(const req_t *r, int i, const char **arg, size_t *len) {
  const char *p = r->cmd, *end = r->cmd + r->len;
  if (p >= end || *p++ != '*') return false;
  size_t argc = 0;
  while (p < end && *p >= '0' && *p <= '9') argc = argc * 10 + (size_t)(*p++ - '0');
  if ((size_t)i >= argc) return false;
  for (p += 2;; p += 2) {
    if (p >= end || *p++ != '$') return false;
    size_t n = 0;
    while (p < end && *p >= '0' && *p <= '9') n = n * 10 + (size_t)(*p++ - '0');
    p += 2;
    if (n > (size_t)(end - p)) return false;
    if (i-- == 0) {
      *arg = p, *len = n;
      return true;
    }
    p += n;
  }
}

static bool listed(const char *name, size_t len, const char *const *list, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (word_is(name, len, list[i])) return true;
  return false;
}

/* The key r's command is routed by (false: keyless or not a known layout). */
static bool command_key(const req_t *r, const char **key, size_t *klen) {
  const char *name, *numkeys;
  size_t len, nlen;
  if (!resp_arg(r, 0, &name, &len)) return false;
  if (listed(name, len, keyed, sizeof keyed / sizeof keyed[0])) return resp_arg(r, 1, key, klen);
  if (listed(name, len, second, sizeof second / sizeof second[0])) return resp_arg(r, 2, key, klen);
  int at = listed(name, len, counted, sizeof counted / sizeof counted[0])      ? 1
           : listed(name, len, scripted, sizeof scripted / sizeof scripted[0]) ? 2
                                                                               : 0;
  if (!at || !resp_arg(r, at, &numkeys, &nlen) || nlen == 0 || (nlen == 1 && numkeys[0] == '0')) return false;
  return resp_arg(r, at + 1, key, klen);
}

/* ------------------------------------------------------------ the connection */

/* The connection waits for the reply of a command that already timed out,
 * with nothing still running ahead of it: drop it (the server then lets go of
 * a blocked command) and reconnect. Never from inside a request callback. */
static void unstick_one(conn_t *c) {
  if (c->state == CS_READY && c->inflight.head && c->inflight.head->completed)
    rlock__conn_reset(c, "user connection reset: an earlier command outlived its timeout");
}

static void unstick(usercmd_t *u) {
  unstick_one(&u->conn);
  for (int i = 0; i < u->nmore; i++) unstick_one(u->more[i]);
}

static void unstick_cb(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  usercmd_t *u = arg;
  unstick(u);
  rlock__client_flush(u->cl);
}

int rlock__usercmd_init(usercmd_t *u, client_t *cl) {
  memset(u, 0, sizeof *u);
  u->cl = cl;
  u->unstick = evtimer_new(cl->base, unstick_cb, u);
  if (!u->unstick) return RLOCK_ENOMEM;
  return rlock__conn_init(&u->conn, &cl->net, CONN_USER);
}

void rlock__usercmd_close(usercmd_t *u) {
  u->closed = true;
  rlock__conn_close(&u->conn); /* every command still waiting ends with RLOCK_ECLOSED */
  for (int i = 0; i < u->nmore; i++) rlock__conn_close(u->more[i]);
  rlock__usercmd_detach_all(u); /* closed: no more are attached */
  if (u->unstick) event_free(u->unstick);
  u->unstick = NULL;
}

int rlock__usercmd_attach(usercmd_t *u, conn_t *c) {
  if (u->closed) return RLOCK_ECLOSED;
  if (u->nmore == u->capmore) {
    int cap = u->capmore ? u->capmore * 2 : 4;
    conn_t **m = realloc(u->more, (size_t)cap * sizeof *m);
    if (!m) return RLOCK_ENOMEM;
    u->more = m, u->capmore = cap;
  }
  u->more[u->nmore++] = c;
  return 0;
}

void rlock__usercmd_detach_all(usercmd_t *u) {
  free(u->more);
  u->more = NULL;
  u->nmore = u->capmore = 0;
}

/* ------------------------------------------------------------ running a command */

/* One call: a command (one part) or MULTI, the commands, EXEC. The reply of
 * the last part is the result. */
typedef struct call {
  op_t *op;
  int left;   /* parts not answered yet */
  int status; /* of the last part */
  rlock_reply_t *reply;
  char msg[256];
  char multi_err[200]; /* MULTI refused: the commands ran outside a transaction */
} call_t;

static void part_end(call_t *x) {
  if (--x->left > 0) return;
  op_t *op = x->op;
  int status = x->status;
  rlock_reply_t *reply = x->reply;
  if (status == 0 && x->multi_err[0]) {
    rlock_reply_free(reply);
    reply = NULL;
    status = rlock__fail(RLOCK_ESERVER, "MULTI refused (%s): the commands may have run outside a transaction",
                         x->multi_err);
  } else if (status < 0) {
    rlock__set_msg(x->msg);
  }
  free(x);
  op->cl->lock_up->op_finish(op, status, 0, reply, 0);
}

static void timed_out(call_t *x) {
  /* done() runs inside the connection's timeout scan: look at the queue after it. */
  event_active(x->op->cl->uc.unstick, EV_TIMEOUT, 0);
}

static void multi_done(req_t *r, int status, rlock_reply_t *reply) {
  call_t *x = r->ctx;
  if (status == 0 && reply->type == RLOCK_REPLY_ERROR)
    snprintf(x->multi_err, sizeof x->multi_err, "%.150s", reply->str);
  if (status == RLOCK_ETIMEDOUT) timed_out(x);
  rlock_reply_free(reply);
  part_end(x);
}

/* A command inside MULTI: "+QUEUED", or an error that EXEC reports (EXECABORT). */
static void queued_done(req_t *r, int status, rlock_reply_t *reply) {
  call_t *x = r->ctx;
  if (status == RLOCK_ETIMEDOUT) timed_out(x);
  rlock_reply_free(reply);
  part_end(x);
}

static void last_done(req_t *r, int status, rlock_reply_t *reply) {
  call_t *x = r->ctx;
  x->status = status;
  x->reply = reply;
  if (status == RLOCK_ETIMEDOUT) {
    timed_out(x);
    rlock__fail(RLOCK_ETIMEDOUT, "Redis did not answer within %lld ms", (long long)x->op->wait_ms);
  }
  if (status < 0) snprintf(x->msg, sizeof x->msg, "%s", rlock__msg());
  part_end(x);
}

void rlock__usercmd_start(op_t *op) {
  usercmd_t *u = &op->cl->uc;
  call_t *x = calloc(1, sizeof *x);
  if (!x) {
    op->cl->lock_up->op_finish(op, rlock__fail(RLOCK_ENOMEM, "out of memory"), 0, NULL, 0);
    return;
  }
  x->op = op;
  for (req_t *r = op->raw; r; r = r->next) x->left++;
  if (!u->started) {
    u->started = true;
    rlock__conn_start(&u->conn);
  } else {
    unstick(u); /* before queueing behind a command that will never answer */
  }
  /* The slot's tag (names.c: a static string in that slot), not the key:
   * a part may be freed as soon as it is sent (the client is closing). */
  const char *key = NULL, *tag = NULL;
  size_t klen = 0;
  for (req_t *r = op->raw; r && !tag; r = r->next) /* a transaction: its first keyed command's */
    if (command_key(r, &key, &klen)) tag = rlock__names_tag(rlock__names_slot(key, klen));
  req_t *r = op->raw;
  op->raw = NULL;
  for (int i = 0; r; i++) {
    req_t *next = r->next;
    r->next = NULL;
    r->done = !next ? last_done : i == 0 ? multi_done : queued_done;
    r->ctx = x;
    r->deadline = op->deadline; /* all parts alike: they time out together */
    r->conn = CONN_USER;
    r->pinned = x->left > 1;
    rlock__client_send(op->cl, tag, tag ? strlen(tag) : 0,
                       r); /* may complete it at once (closed): x lives until the last part */
    r = next;
  }
}
