/* test_kinds.c -- the lock-kind seam (lib/kinds/kind.h) is real: a kind
 * written here, in the test, with its own scripts (plain EVAL) and its own
 * data layout, runs through the unchanged machinery of lock.c against a real
 * redis-server (internal API, linked with the static library):
 *   default_kind      rlock_lock_new gives the reentrant kind (a hash)
 *   new_kind          "duo", a lock two owners may hold at once (a set of
 *                     owner ids): acquire, busy, wait on its channel, woken by
 *                     its release message, release, not held, force unlock;
 *                     every step went through the duo table
 *   new_kind_undo     a try whose answer never came (the server held it back
 *                     past the command timeout) is given back by duo's undo
 *   wake_policy       pubsub wakes as many parked waiters as the kind's
 *                     policy says (one, all), on a bare subscriber connection
 *                     driven by the test thread */
#include "harness.h"
#include "kinds/kind.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static th_server_t *srv;

/* ------------------------------------------------------------ the duo kind
 * NAME is a set of at most two owner ids, its TTL the longest lease asked;
 * channel "duo_channel:{NAME}"; a release publishes "one", a force unlock
 * "all". Its replies differ from the reentrant lock's on purpose: a granted
 * try answers "granted", a release of a permit not held "not held". */

static const char *DUO_ACQUIRE =
    "local latch = redis.call('get', KEYS[2])\n"
    "if latch == '1' then return 'granted' end\n" /* a re-send of an applied try */
    "if latch then return -3 end\n"               /* undone: never apply */
    "if redis.call('sismember', KEYS[1], ARGV[2]) == 0 and redis.call('scard', KEYS[1]) >= 2 then\n"
    "  return redis.call('pttl', KEYS[1])\n"
    "end\n"
    "redis.call('sadd', KEYS[1], ARGV[2])\n"
    "if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then redis.call('pexpire', KEYS[1], ARGV[1]) end\n"
    "redis.call('set', KEYS[2], '1', 'px', ARGV[3])\n"
    "return 'granted'\n";

static const char *DUO_RELEASE =
    "local latch = redis.call('get', KEYS[3])\n"
    "if latch then return tonumber(latch) end\n"
    "if redis.call('srem', KEYS[1], ARGV[1]) == 0 then return 'not held' end\n"
    "local reached = redis.call('publish', KEYS[2], 'one')\n"
    "redis.call('set', KEYS[3], reached, 'px', ARGV[2])\n"
    "return reached\n";

static const char *DUO_UNDO =
    "local latch = redis.call('get', KEYS[3])\n"
    "if latch == '1' then\n"
    "  redis.call('srem', KEYS[1], ARGV[1])\n"
    "  redis.call('publish', KEYS[2], 'one')\n"
    "end\n"
    "redis.call('set', KEYS[3], 'undone', 'px', ARGV[2])\n"
    "if latch == '1' then return 1 end\n"
    "return 0\n";

static const char *DUO_FORCE =
    "if redis.call('del', KEYS[1]) == 1 then\n"
    "  redis.call('publish', KEYS[2], 'all')\n"
    "  return 1\n"
    "end\n"
    "return 0\n";

/* Every call of the duo table (the I/O thread writes, the test reads). */
static _Atomic int n_init, n_try, n_try_reply, n_granted, n_busy, n_undo, n_undo_landed, n_release, n_release_reply,
    n_wake, n_force;

/* EVAL body with nkeys keys then args. */
static req_t *eval_req(const char *body, int nkeys, const char **keys, const size_t *kl, int nargs, const char **args,
                       client_t *cl, req_done_fn done, void *ctx) {
  const char *argv[12];
  size_t lens[12];
  char nk[8];
  snprintf(nk, sizeof nk, "%d", nkeys);
  int argc = 0;
  argv[argc] = "EVAL", lens[argc++] = 4;
  argv[argc] = body, lens[argc++] = strlen(body);
  argv[argc] = nk, lens[argc++] = strlen(nk);
  for (int i = 0; i < nkeys; i++) argv[argc] = keys[i], lens[argc++] = kl[i];
  for (int i = 0; i < nargs; i++) argv[argc] = args[i], lens[argc++] = strlen(args[i]);
  return rlock__req_new(argc, argv, lens, cl->opt.command_timeout_ms, done, ctx);
}

static int duo_init(rlock_lock_t *l) {
  n_init++;
  return rlock__names_prefixed(&l->channel, "duo_channel", l->name, l->len) ? RLOCK_ENOMEM : 0;
}

static req_t *duo_try(op_t *op, const bytes_t *latch, req_done_fn done) {
  char lease[32], ttl[32];
  snprintf(lease, sizeof lease, "%lld", (long long)rlock__op_lease_ms(op));
  snprintf(ttl, sizeof ttl, "%lld", (long long)rlock__client_latch_ttl(op->cl));
  const char *keys[2] = {op->lock->name, latch->p};
  size_t kl[2] = {op->lock->len, latch->n};
  const char *args[3] = {lease, op->owner_id, ttl};
  n_try++;
  return eval_req(DUO_ACQUIRE, 2, keys, kl, 3, args, op->cl, done, op);
}

static int duo_try_reply(const rlock_reply_t *reply, int64_t *wait_ms) {
  n_try_reply++;
  if (reply->type == RLOCK_REPLY_STRING && !strcmp(reply->str, "granted")) {
    n_granted++;
    return KIND_GRANTED;
  }
  if (reply->type != RLOCK_REPLY_INTEGER || reply->integer < -1)
    return rlock__fail(RLOCK_EPROTO, "duo acquire: unexpected reply");
  n_busy++;
  *wait_ms = reply->integer;
  return KIND_BUSY;
}

static req_t *duo_undo(const kind_undo_t *u, req_done_fn done, void *ctx) {
  char ttl[32];
  snprintf(ttl, sizeof ttl, "%lld", (long long)rlock__client_latch_ttl(u->cl));
  const char *keys[3] = {u->name, u->channel->p, u->latch->p};
  size_t kl[3] = {u->len, u->channel->n, u->latch->n};
  const char *args[2] = {u->owner_id, ttl};
  n_undo++;
  return eval_req(DUO_UNDO, 3, keys, kl, 2, args, u->cl, done, ctx);
}

static bool duo_undo_reply(const rlock_reply_t *reply) {
  bool ran = reply->type == RLOCK_REPLY_INTEGER;
  if (ran) n_undo_landed++;
  return ran;
}

static req_t *duo_release(op_t *op, const bytes_t *latch, const kind_release_t *rel, req_done_fn done) {
  (void)rel; /* one permit per owner: no count to check */
  char ttl[32];
  snprintf(ttl, sizeof ttl, "%lld", (long long)rlock__client_latch_ttl(op->cl));
  const char *keys[3] = {op->lock->name, op->lock->channel.p, latch->p};
  size_t kl[3] = {op->lock->len, op->lock->channel.n, latch->n};
  const char *args[2] = {op->owner_id, ttl};
  n_release++;
  return eval_req(DUO_RELEASE, 3, keys, kl, 2, args, op->cl, done, op);
}

static int duo_release_reply(const rlock_reply_t *reply, release_t *how, bool *notified) {
  n_release_reply++;
  if (reply->type == RLOCK_REPLY_STRING && !strcmp(reply->str, "not held")) {
    *how = REL_NOTHELD;
    return 0;
  }
  if (reply->type != RLOCK_REPLY_INTEGER || reply->integer < 0)
    return rlock__fail(RLOCK_EPROTO, "duo release: unexpected reply");
  *how = REL_ALL; /* the owner's only permit */
  *notified = reply->integer > 0;
  return 0;
}

static int duo_wake(const rlock_reply_t *msg) {
  n_wake++;
  return msg && msg->type == RLOCK_REPLY_STRING && !strcmp(msg->str, "all") ? WAKE_ALL : 1;
}

static req_t *duo_force(op_t *op, req_done_fn done) {
  const char *keys[2] = {op->lock->name, op->lock->channel.p};
  size_t kl[2] = {op->lock->len, op->lock->channel.n};
  n_force++;
  return eval_req(DUO_FORCE, 2, keys, kl, 0, NULL, op->cl, done, op);
}

static const lock_kind_t duo = {
    .name = "duo",
    .init = duo_init,
    .try_req = duo_try,
    .try_reply = duo_try_reply,
    .undo_req = duo_undo,
    .undo_reply = duo_undo_reply,
    .release_req = duo_release,
    .release_reply = duo_release_reply,
    .wake = duo_wake,
    .force_req = duo_force,
};

static rlock_lock_t *duo_lock(rlock_client_t *c, const char *name) {
  rlock_lock_t *l = NULL;
  CHECK_OK(rlock__lock_new_kind(c, &duo, name, strlen(name), &l));
  CHECK(l->kind == &duo);
  return l;
}

static char *type_of(const char *key) { return th_cmd_str(srv, "TYPE", key, NULL); }

/* ------------------------------------------------------------ default_kind */

TEST(default_kind) {
  th_reply_free(th_cmd(srv, "FLUSHALL", NULL));
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = th_lock(c, "kinds:default");
  CHECK(l->kind == &rlock__kind_reentrant);
  CHECK_STREQ(l->kind->name, "reentrant");
  CHECK_STREQ(l->channel.p, "redisson_lock__channel:{kinds:default}");
  CHECK_OK(rlock_lock_acquire(l, 1, 0, 60000, NULL));
  char *t = type_of("kinds:default");
  CHECK_STREQ(t, "hash");
  free(t);
  CHECK_OK(rlock_lock_release(l, 1));
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* ------------------------------------------------------------ new_kind */

typedef struct outcome {
  _Atomic int done, status;
} outcome_t;

static void on_acquired(rlock_lock_t *l, int status, int64_t value, void *arg) {
  (void)l, (void)value;
  outcome_t *o = arg;
  o->status = status;
  o->done = 1;
}

static int is_done(void *arg) { return ((outcome_t *)arg)->done; }

static int subscribed(void *arg) { return th_numsub(srv, arg) >= 1; }

/* The waiter is parked: its tries (the first, the one after subscribing, and
 * any a wake token caused) are all answered busy. */
static int waiter_parked(void *arg) {
  (void)arg;
  return n_busy >= 2 && n_try == n_try_reply;
}

TEST(new_kind) {
  th_reply_free(th_cmd(srv, "FLUSHALL", NULL));
  const char *name = "kinds:duo", *chan = "duo_channel:{kinds:duo}";
  rlock_client_t *a = th_client(srv->url, 0), *b = th_client(srv->url, 0);
  int inits = n_init;
  rlock_lock_t *la = duo_lock(a, name), *lb = duo_lock(b, name);
  CHECK_EQ(n_init, inits + 2);
  CHECK_STREQ(la->channel.p, chan);

  /* two owners hold it at once: duo's layout (a set), not a hash */
  int tries = n_try;
  CHECK_OK(rlock_lock_acquire(la, 1, 0, 120000, NULL));
  CHECK_OK(rlock_lock_acquire(la, 2, 0, 120000, NULL));
  char *t = type_of(name);
  CHECK_STREQ(t, "set");
  free(t);
  CHECK_EQ(th_cmd_int(srv, "SCARD", name, NULL), 2);
  CHECK_EQ(n_try, tries + 2);
  CHECK(n_granted >= 2);

  /* a third is busy: no wait, RLOCK_EBUSY */
  int busy = n_busy;
  CHECK_RC(rlock_lock_acquire(la, 3, 0, 120000, NULL), RLOCK_EBUSY);
  CHECK_EQ(n_busy, busy + 1);

  /* a waiter in another client: subscribes to duo's channel and parks; the
   * busy reply's bound is the set's PTTL (~120 s) and its wait 60 s, so only
   * the release message can let it in within 30 s */
  n_busy = 0;
  n_try = 0;
  n_try_reply = 0;
  outcome_t o = {0, 1};
  CHECK_OK(rlock_lock_acquire_async(lb, 3, 60000, 120000, NULL, on_acquired, &o));
  CHECK_MSG(th_wait_until(subscribed, (void *)chan, 10000), "the waiter never subscribed to %s", chan);
  CHECK(th_wait_until(waiter_parked, NULL, 10000));
  CHECK_EQ(o.done, 0);
  int wakes = n_wake, releases = n_release;
  CHECK_OK(rlock_lock_release(la, 1));
  CHECK_EQ(n_release, releases + 1);
  CHECK_MSG(th_wait_until(is_done, &o, 30000), "the waiter was not woken by duo's release message");
  CHECK_OK(o.status);
  CHECK(n_wake > wakes); /* the message went through duo's wake policy */
  CHECK_EQ(th_cmd_int(srv, "SISMEMBER", name, th_owner_id(b, 3, (char[128]){0}, 128), NULL), 1);

  /* releases: duo's replies, through the client's hold count */
  CHECK_OK(rlock_lock_release(lb, 3));
  CHECK_OK(rlock_lock_release(la, 2));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", name, NULL), 0);
  CHECK_RC(rlock_lock_release(la, 2), RLOCK_ENOTHELD); /* "not held" */

  /* force unlock: duo's script */
  int was = -1, forces = n_force;
  CHECK_OK(rlock_lock_acquire(la, 1, 0, 120000, NULL));
  CHECK_OK(rlock_lock_force_unlock(la, &was));
  CHECK_EQ(was, 1);
  CHECK_EQ(n_force, forces + 1);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", name, NULL), 0);
  CHECK_OK(rlock_lock_force_unlock(la, &was));
  CHECK_EQ(was, 0);

  rlock_lock_free(la);
  rlock_lock_free(lb);
  rlock_client_free(a);
  rlock_client_free(b);
}

/* ------------------------------------------------------------ new_kind_undo */

static int undo_landed(void *arg) { return n_undo_landed >= *(int *)arg; }

TEST(new_kind_undo) {
  th_reply_free(th_cmd(srv, "FLUSHALL", NULL));
  const char *name = "kinds:undo";
  rlock_options_t opt;
  rlock_options_init(&opt);
  opt.url = srv->url;
  opt.command_timeout_ms = 500;
  opt.retry_attempts = 0;      /* give up at the first lost answer: undo */
  opt.dead_after_timeouts = 0; /* keep the connection: its copies run after the pause */
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &opt));
  rlock_lock_t *l = duo_lock(c, name);
  int undos = n_undo, want = n_undo_landed + 1;
  /* scripts are held back (CLIENT PAUSE WRITE) past the command timeout: the
   * try times out, the client gives up and sends duo's undo (re-sent every
   * timeout, 3 times at most: copies until ~2.5 s, the pause ends at 1.2 s);
   * they run when the pause ends, the try first (it takes a permit), then
   * the undo copies (the first gives it back) */
  redisReply *r = th_cmd(srv, "CLIENT", "PAUSE", "1200", "WRITE", NULL);
  CHECK_MSG(r->type == REDIS_REPLY_STATUS, "CLIENT PAUSE: %s", r->str);
  th_reply_free(r);
  CHECK_RC(rlock_lock_acquire(l, 5, 0, 120000, NULL), RLOCK_ETIMEDOUT);
  CHECK_MSG(th_wait_until(undo_landed, &want, 15000), "duo's undo never ran");
  CHECK(n_undo >= undos + 1);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", name, NULL), 0); /* the permit the try took is back */
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* ------------------------------------------------------------ wake_policy
 * A bare subscriber connection (a client_t with only its pubsub) on the test
 * thread's own event loop: every message is handled in one on_push call, so
 * what it woke is known as soon as anything was woken. */

static waiter_t ws[2];
static int woken[2]; /* on_wake calls of ws[i] */

static void record_wake(waiter_t *w) { woken[w - ws]++; }

static void tick(evutil_socket_t fd, short what, void *arg) { (void)fd, (void)what, (void)arg; }

/* Runs the loop until pred(arg), at most timeout_ms (a 5 ms tick bounds each turn). */
static int spin(struct event_base *base, int (*pred)(void *), void *arg, int64_t timeout_ms) {
  struct event *t = event_new(base, -1, EV_PERSIST, tick, NULL);
  struct timeval tv = {0, 5000};
  evtimer_add(t, &tv);
  int64_t end = rlock_now_ms() + timeout_ms;
  int ok;
  while (!(ok = pred(arg)) && rlock_now_ms() < end) event_base_loop(base, EVLOOP_ONCE);
  event_free(t);
  return ok;
}

static int total_woken(void) { return woken[0] + woken[1]; }
static int woken_at_least(void *arg) { return total_woken() >= *(int *)arg; }

/* Publishes msg on chan and runs the loop until a waiter is woken by it:
 * returns how many it woke. */
static int publish_wakes(struct event_base *base, const char *chan, const char *msg) {
  int before = total_woken(), want = before + 1;
  CHECK_EQ(th_cmd_int(srv, "PUBLISH", chan, msg, NULL), 1);
  CHECK_MSG(spin(base, woken_at_least, &want, 10000), "message %s woke nobody", msg);
  return total_woken() - before;
}

TEST(wake_policy) {
  const char *chan = "duo_channel:{kinds:wake}";
  struct event_base *base = event_base_new();
  client_t *cl = calloc(1, sizeof *cl);
  rlock_options_init(&cl->opt);
  cl->s_name = strdup("rlock-kinds-test");
  CHECK_OK(rlock__url_parse(&cl->url, srv->url));
  cl->base = base;
  cl->thread = pthread_self(); /* this thread runs its loop: its I/O thread (RLOCK__ASSERTs) */
  cl->topo = &rlock__topology_single;
  rlock__client_net_init(cl);
  CHECK_OK(rlock__pubsub_init(&cl->ps, cl));
  rlock__conn_start(&cl->ps.conn);

  /* two waiters of one channel with duo's policy, w[0] first */
  waiter_t *w = ws;
  memset(ws, 0, sizeof ws);
  for (int i = 0; i < 2; i++) {
    w[i].on_wake = record_wake;
    w[i].wake = duo_wake;
    CHECK_EQ(rlock__pubsub_join(&cl->ps, &w[i], chan, strlen(chan)), 0); /* subscribing */
  }
  int two = 2;
  CHECK_MSG(spin(base, woken_at_least, &two, 10000), "the subscription woke nobody");
  CHECK(rlock__pubsub_park(&w[0]));                                /* the subscription's token, for a try in flight */
  CHECK(!rlock__pubsub_park(&w[0]) && !rlock__pubsub_park(&w[1])); /* both parked */

  int w0 = woken[0], w1 = woken[1];
  CHECK_EQ(publish_wakes(base, chan, "one"), 1); /* duo: "one" wakes one... */
  CHECK_EQ(woken[0], w0 + 1);                    /* ...the first that joined */
  CHECK_EQ(woken[1], w1);
  CHECK(!rlock__pubsub_park(&w[0]));
  CHECK_EQ(publish_wakes(base, chan, "all"), 2); /* "all" wakes every parked waiter */
  CHECK(rlock__pubsub_park(&w[0]));              /* and leaves a token for a try in flight */

  /* without a policy a message wakes one */
  for (int i = 0; i < 2; i++) rlock__pubsub_leave(&cl->ps, &w[i]);
  memset(ws, 0, sizeof ws);
  for (int i = 0; i < 2; i++) {
    w[i].on_wake = record_wake;
    CHECK_EQ(rlock__pubsub_join(&cl->ps, &w[i], chan, strlen(chan)), 0);
  }
  int want = total_woken() + 2;
  CHECK(spin(base, woken_at_least, &want, 10000));
  CHECK(rlock__pubsub_park(&w[0]));
  CHECK(!rlock__pubsub_park(&w[0]) && !rlock__pubsub_park(&w[1]));
  CHECK_EQ(publish_wakes(base, chan, "all"), 1);

  for (int i = 0; i < 2; i++) rlock__pubsub_leave(&cl->ps, &w[i]);
  rlock__pubsub_close(&cl->ps);
  rlock__url_free(&cl->url);
  free(cl->s_name);
  free(cl);
  event_base_free(base);
}

#define RUN_IF(name) \
  if (argc < 2 || !strcmp(argv[1], #name)) RUN(name)

int main(int argc, char **argv) {
  th_init(argc, argv, 110);
  srv = th_server_start(NULL);
  RUN_IF(default_kind);
  RUN_IF(new_kind);
  RUN_IF(new_kind_undo);
  RUN_IF(wake_policy);
  th_server_stop(srv);
  return th_done();
}
