/* test_cluster.c -- redis+cluster://: a real Redis Cluster (3 masters, 3
 * replicas, harness_cluster.c). The URL form; locks on every one of the
 * 16384 slots and on hash-tagged names, each landing on the master that owns
 * its slot; two processes contending through different seed nodes; a slot
 * migrated live (MIGRATING/IMPORTING, MIGRATE, SETSLOT NODE) while its lock is
 * held, renewed and waited for; a replica promoted with CLUSTER FAILOVER under
 * a held and waited-for lock; a waiter that leaves after a failover learnt by
 * MOVED only unsubscribes where its subscription is; a latch await on a
 * master that died before the client's connection to it was ever ready
 * follows its promoted replica. Internal test: it names slots with the
 * library's own tags (rlock__names_tag). */
#include "harness.h"
#include "harness_cluster.h"
#include "internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

static th_cluster_t *cl;

/* A client on url with a short watchdog lease (renewed every third). */
static rlock_client_t *client_on(const char *url, int64_t watchdog_ms) { return th_client(url, watchdog_ms); }

/* The cluster URL starting with node i (the first seed the client asks). */
static void url_from(int i, char *buf, size_t n) {
  size_t off = (size_t)snprintf(buf, n, "redis+cluster://");
  for (int k = 0; k < cl->masters; k++)
    off += (size_t)snprintf(buf + off, n - off, "%s127.0.0.1:%d", k ? "," : "", cl->node[(i + k) % cl->masters]->port);
}

TEST(url_forms) {
  rlock_options_t o;
  rlock_options_init(&o);
  rlock_client_t *c = NULL;
  const char *bad[] = {
      "redis+cluster://",          "redis+cluster://h:1,",  "redis+cluster://h:1,h2",       "redis+cluster://h:1,h2:0",
      "redis+cluster://h:1,h 2:3", "redis+cluster://h:1/2", "redis+cluster://h:1,h2:70000", NULL};
  for (int i = 0; bad[i]; i++) {
    o.url = bad[i];
    CHECK_RC(rlock_client_new(&c, &o), RLOCK_EURL);
    CHECK(c == NULL);
  }
  o.url = "redis+cluster://:secret-pw@127.0.0.1:1,127.0.0.1:2";
  o.connect_timeout_ms = 200;
  CHECK_RC(rlock_client_new(&c, &o), RLOCK_ECONNECT); /* both seeds tried, both refused */
  CHECK(strstr(rlock_last_error(), "secret-pw") == NULL);
  /* a first seed that is down: the next one is used */
  char url[200];
  snprintf(url, sizeof url, "redis+cluster://127.0.0.1:1,127.0.0.1:%d", cl->node[1]->port);
  o.url = url;
  o.connect_timeout_ms = 3000;
  CHECK_OK(rlock_client_new(&c, &o));
  rlock_lock_t *l = th_lock(c, "seed-fallback");
  CHECK_OK(rlock_lock_trylock(l, 0, 10000));
  CHECK_OK(rlock_lock_unlock(l));
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* The lock key of a name lands on the master that owns its slot. */
static void check_on_owner(const char *name, int present) {
  int slot = th_cluster_keyslot(cl, name);
  th_server_t *owner = th_cluster_owner(cl, slot);
  CHECK(owner != NULL);
  CHECK_EQ(th_cmd_int(owner, "EXISTS", name, NULL), present);
}

TEST(every_slot) {
  rlock_client_t *c = client_on(cl->url, 0);
  static char names[16384][16];
  static rlock_lock_t *locks[16384];
  for (int s = 0; s < 16384; s++) {
    snprintf(names[s], sizeof names[s], "{%s}", rlock__names_tag((uint16_t)s));
    CHECK_EQ(rlock__names_slot(names[s], strlen(names[s])), s);
    locks[s] = th_lock(c, names[s]);
    CHECK_OK(rlock_lock_trylock(locks[s], 0, 60000));
  }
  for (int s = 0; s < 16384; s += 997) check_on_owner(names[s], 1);
  int total = 0;
  for (int i = 0; i < cl->masters; i++) total += (int)th_cmd_int(cl->node[i], "DBSIZE", NULL);
  CHECK(total >= 16384); /* every lock key (and maybe latches not yet deleted) */
  for (int s = 0; s < 16384; s++) {
    CHECK_OK(rlock_lock_unlock(locks[s]));
    rlock_lock_free(locks[s]);
  }
  for (int s = 0; s < 16384; s += 997) check_on_owner(names[s], 0);
  rlock_client_free(c);
}

TEST(hash_tags) {
  rlock_client_t *a = client_on(cl->url, 0), *b = client_on(cl->url, 0);
  const char *names[] = {"{user42}:profile", "{user42}:cart", "orders:{user42}", "plain-name", "x{}y", NULL};
  for (int i = 0; names[i]; i++) {
    rlock_lock_t *la = th_lock(a, names[i]), *lb = th_lock(b, names[i]);
    CHECK_OK(rlock_lock_trylock(la, 0, 30000));
    check_on_owner(names[i], 1);
    CHECK_RC(rlock_lock_trylock(lb, 0, 30000), RLOCK_EBUSY);
    int locked = 0;
    CHECK_OK(rlock_lock_is_locked(lb, &locked));
    CHECK_EQ(locked, 1);
    CHECK_OK(rlock_lock_unlock(la));
    CHECK_OK(rlock_lock_trylock(lb, 0, 30000));
    CHECK_OK(rlock_lock_unlock(lb));
    rlock_lock_free(la);
    rlock_lock_free(lb);
  }
  rlock_client_free(a);
  rlock_client_free(b);
}

/* Two processes, each through another first seed, take turns on names on
 * every master: never both inside. */
typedef struct shared {
  atomic_int inside, overlaps, done;
} shared_t;

static void contend(int seed, shared_t *sh, int rounds) {
  char url[300];
  url_from(seed, url, sizeof url);
  rlock_client_t *c = client_on(url, 0);
  rlock_lock_t *l[3] = {th_lock(c, "contend-a"), th_lock(c, "contend-b"), th_lock(c, "contend-c")};
  for (int i = 0; i < rounds; i++) {
    rlock_lock_t *x = l[i % 3];
    CHECK_OK(rlock_lock_trylock(x, 60000, 30000));
    if (atomic_fetch_add(&sh[i % 3].inside, 1) != 0) atomic_fetch_add(&sh[i % 3].overlaps, 1);
    th_sleep_ms(1); /* a critical section long enough for the other process to try */
    atomic_fetch_sub(&sh[i % 3].inside, 1);
    atomic_fetch_add(&sh[i % 3].done, 1);
    CHECK_OK(rlock_lock_unlock(x));
  }
  for (int i = 0; i < 3; i++) rlock_lock_free(l[i]);
  rlock_client_free(c);
}

TEST(two_processes_two_seeds) {
  shared_t *sh = mmap(NULL, 3 * sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(sh != MAP_FAILED);
  memset(sh, 0, 3 * sizeof *sh);
  const int rounds = 300;
  pid_t kid = th_fork();
  if (kid == 0) {
    contend(1, sh, rounds);
    const char *argv[] = {"true", NULL};
    execvp("true", (char *const *)argv); /* leave without the parent's cleanup */
    _exit(1);
  }
  contend(0, sh, rounds);
  CHECK_EQ(th_wait_child(kid), 0);
  int done = 0;
  for (int i = 0; i < 3; i++) {
    CHECK_EQ(atomic_load(&sh[i].overlaps), 0);
    done += atomic_load(&sh[i].done);
  }
  CHECK_EQ(done, 2 * rounds);
  munmap(sh, 3 * sizeof *sh);
}

/* ------------------------------------------------------------ live migration */

/* A name whose slot master is m. */
static void name_on(th_server_t *m, const char *prefix, char *buf, size_t n) {
  for (int i = 0;; i++) {
    snprintf(buf, n, "%s-%d", prefix, i);
    if (th_cluster_owner(cl, th_cluster_keyslot(cl, buf)) == m) return;
  }
}

/* A master other than m (the owner of some slot). */
static th_server_t *other_master(th_server_t *m) {
  for (int s = 0; s < 16384; s += 512) {
    th_server_t *o = th_cluster_owner(cl, s);
    if (o && o != m) return o;
  }
  th_fail(__FILE__, __LINE__, "no other master");
}

typedef struct waiter_arg {
  rlock_lock_t *lock;
  int rc;
  atomic_int granted;
  int64_t at;
} waiter_arg_t;

static void *waiter_main(void *arg) {
  waiter_arg_t *w = arg;
  w->rc = rlock_lock_acquire(w->lock, 7, 120000, RLOCK_LEASE_WATCHDOG, NULL); /* owner 7: released by main */
  w->at = th_now_ms();
  atomic_store(&w->granted, 1);
  return NULL;
}

static int is_granted(void *arg) { return atomic_load(&((waiter_arg_t *)arg)->granted); }

/* Sharded subscribers of a channel on s (PUBSUB SHARDNUMSUB). */
static long long shard_numsub(th_server_t *s, const char *chan) {
  redisReply *r = th_cmd(s, "PUBSUB", "SHARDNUMSUB", chan, NULL);
  long long n = r->type == REDIS_REPLY_ARRAY && r->elements == 2 ? r->element[1]->integer : 0;
  th_reply_free(r);
  return n;
}

/* The master that owns the lock's slot has a sharded subscriber on its
 * channel (the client probed sharded pub/sub: Redis 7). */
static int subscribed(void *arg) {
  char chan[128];
  snprintf(chan, sizeof chan, "redisson_lock__channel:{%s}", (const char *)arg);
  th_server_t *owner = th_cluster_owner(cl, th_cluster_keyslot(cl, arg));
  return owner && shard_numsub(owner, chan) > 0;
}
static void wait_subscribed(const char *name) {
  CHECK_MSG(th_wait_until(subscribed, (void *)name, 20000), "the waiter never subscribed");
}

typedef struct renewed_arg {
  rlock_client_t *c;
  uint64_t base;
} renewed_arg_t;

static uint64_t renewed(rlock_client_t *c) {
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  return st.renewed_locks;
}
static int renewed_twice(void *arg) {
  renewed_arg_t *r = arg;
  return renewed(r->c) >= r->base + 2;
}

typedef struct released {
  atomic_int done;
  int status;
} released_t;

static void on_released(rlock_lock_t *l, int status, int64_t value, void *arg) {
  (void)l, (void)value;
  released_t *r = arg;
  r->status = status;
  atomic_store(&r->done, 1);
}
static int is_released(void *arg) { return atomic_load(&((released_t *)arg)->done); }

/* TRYAGAIN errors a node has answered (INFO errorstats). */
static long long tryagains(th_server_t *s) {
  char *info = th_cmd_str(s, "INFO", "errorstats", NULL);
  const char *p = info ? strstr(info, "errorstat_TRYAGAIN:count=") : NULL;
  long long n = p ? atoll(p + strlen("errorstat_TRYAGAIN:count=")) : 0;
  free(info);
  return n;
}

typedef struct tryagain_arg {
  th_server_t *s;
  long long base;
} tryagain_arg_t;
static int tryagain_seen(void *arg) {
  tryagain_arg_t *t = arg;
  return tryagains(t->s) > t->base;
}

typedef struct mig {
  rlock_client_t *holder, *waiter_client;
  rlock_lock_t *held;
  waiter_arg_t *w;
  th_server_t *to;
  const char *name;
  released_t rel;
  int64_t finished_at; /* the migration's SETSLOT NODE calls returned */
} mig_t;

/* Keys moved, slot still MIGRATING/IMPORTING: renewals reach the target
 * through ASK. The unlock is sent then: its latch key is not on the target,
 * so the target answers TRYAGAIN until the slot is its own (SETSLOT NODE
 * right after): the unlock lands then, and the waiter is granted. */
static void during_move(void *arg, int phase) {
  mig_t *m = arg;
  if (phase != 1) return;
  th_reply_free(th_cmd(m->to, "ASKING", NULL));            /* the slot is only importing there */
  CHECK_EQ(th_cmd_int(m->to, "EXISTS", m->name, NULL), 1); /* the lock key moved */
  renewed_arg_t r = {m->holder, renewed(m->holder)};
  CHECK_MSG(th_wait_until(renewed_twice, &r, 20000), "the holder's renewals did not reach the new owner");
  CHECK(!is_granted(m->w));
  tryagain_arg_t t = {m->to, tryagains(m->to)};
  CHECK_OK(rlock_lock_release_async(m->held, RLOCK_OWNER_SELF, on_released, &m->rel));
  /* the slot is finished only once the unlock met TRYAGAIN there */
  CHECK_MSG(th_wait_until(tryagain_seen, &t, 20000), "the unlock never reached the importing node");
  CHECK(!is_released(&m->rel));
}

/* A first seed that accepts TCP but never answers (a listening socket
 * nobody accepts on): its handshake times out, the next seed is used, and
 * the pub/sub probe waits for it (the client starts in sharded mode, not in
 * classic mode because the probe's first copy expired with the first seed). */
TEST(first_seed_hangs) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t alen = sizeof a;
  CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 16) == 0);
  CHECK(getsockname(fd, (struct sockaddr *)&a, &alen) == 0);
  char url[200];
  snprintf(url, sizeof url, "redis+cluster://127.0.0.1:%d,127.0.0.1:%d", ntohs(a.sin_port), cl->node[1]->port);
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = url;
  o.connect_timeout_ms = 500;
  rlock_client_t *h = NULL, *wc = NULL;
  CHECK_OK(rlock_client_new(&h, &o));
  CHECK_OK(rlock_client_new(&wc, &o));
  const char *name = "first-seed-hangs";
  rlock_lock_t *lh = th_lock(h, name), *lw = th_lock(wc, name);
  CHECK_OK(rlock_lock_trylock(lh, 0, 30000));
  waiter_arg_t w = {.lock = lw};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, waiter_main, &w) == 0);
  wait_subscribed(name); /* sharded: on the slot's master */
  CHECK_OK(rlock_lock_unlock(lh));
  CHECK_MSG(th_wait_until(is_granted, &w, 20000), "the waiter was not granted after the unlock");
  CHECK_OK(w.rc);
  CHECK(pthread_join(t, NULL) == 0);
  CHECK_OK(rlock_lock_release(lw, 7));
  rlock_lock_free(lh);
  rlock_lock_free(lw);
  rlock_client_free(h);
  rlock_client_free(wc);
  close(fd);
}

TEST(slot_migrated_live) {
  const char *name = "migrating-lock";
  rlock_client_t *h = client_on(cl->url, 1500), *wc = client_on(cl->url, 1500);
  rlock_lock_t *lh = th_lock(h, name), *lw = th_lock(wc, name);
  CHECK_OK(rlock_lock_trylock(lh, 0, RLOCK_LEASE_WATCHDOG));
  waiter_arg_t w = {.lock = lw};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, waiter_main, &w) == 0);
  int slot = th_cluster_keyslot(cl, name);
  th_server_t *from = th_cluster_owner(cl, slot), *to = NULL;
  to = other_master(from);
  wait_subscribed(name); /* the waiter is parked before the move starts */
  mig_t m = {.holder = h, .waiter_client = wc, .held = lh, .w = &w, .to = to, .name = name};
  th_cluster_move_slot(cl, slot, to, during_move, &m);
  m.finished_at = th_now_ms();
  CHECK_MSG(th_wait_until(is_released, &m.rel, 20000), "the unlock sent during the move never ended");
  CHECK_OK(m.rel.status);
  CHECK_MSG(th_wait_until(is_granted, &w, 20000), "the waiter was not granted after the unlock");
  CHECK_OK(w.rc);
  printf("# unlock sent mid-migration: waiter granted %lld ms after the slot was finished\n",
         (long long)(w.at - m.finished_at));
  CHECK(pthread_join(t, NULL) == 0);
  CHECK(th_cluster_wait_ok(cl, 30000));
  CHECK(th_cluster_owner(cl, slot) == to);
  /* the new holder renews on the new owner (MOVED followed, map refreshed) */
  renewed_arg_t r = {wc, renewed(wc)};
  CHECK(th_wait_until(renewed_twice, &r, 20000));
  CHECK_EQ(th_cmd_int(to, "EXISTS", name, NULL), 1);
  CHECK(th_cmd_int(to, "PTTL", name, NULL) > 0);
  CHECK_OK(rlock_lock_release(lw, 7));
  CHECK_EQ(th_cmd_int(to, "EXISTS", name, NULL), 0);
  rlock_stats_t st;
  rlock_client_stats(h, &st);
  CHECK_EQ(st.locks_lost, 0);
  rlock_client_stats(wc, &st);
  CHECK_EQ(st.locks_lost, 0);
  rlock_lock_free(lh);
  rlock_lock_free(lw);
  rlock_client_free(h);
  rlock_client_free(wc);
}

/* Redisson's side of the wire in sharded mode: a lock held by a foreign
 * owner (a Java client's hash, 60 s TTL), freed the way Redisson's unlock
 * does it (DEL + SPUBLISH "0" on redisson_lock__channel:{NAME} on the slot's
 * master): the rlock waiter is woken by that message, long before the TTL. */
TEST(foreign_unlock_spublish) {
  const char *name = "foreign-held";
  char chan[128];
  snprintf(chan, sizeof chan, "redisson_lock__channel:{%s}", name);
  th_server_t *owner = th_cluster_owner(cl, th_cluster_keyslot(cl, name));
  th_reply_free(th_cmd(owner, "HSET", name, "java-uuid:1", "1", NULL));
  th_reply_free(th_cmd(owner, "PEXPIRE", name, "60000", NULL));
  rlock_client_t *wc = client_on(cl->url, 0);
  rlock_lock_t *lw = th_lock(wc, name);
  waiter_arg_t w = {.lock = lw};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, waiter_main, &w) == 0);
  wait_subscribed(name);
  int64_t freed_at = th_now_ms();
  th_reply_free(th_cmd(owner, "DEL", name, NULL));
  CHECK_EQ(th_cmd_int(owner, "SPUBLISH", chan, "0", NULL), 1);
  CHECK_MSG(th_wait_until(is_granted, &w, 30000), "the waiter was not granted");
  CHECK_OK(w.rc);
  CHECK_MSG(w.at - freed_at < 30000, "granted %lld ms after the unlock (the TTL, not the message)",
            (long long)(w.at - freed_at));
  CHECK(pthread_join(t, NULL) == 0);
  /* and rlock's own unlock publishes the same way: a sharded subscriber hears it */
  redisContext *sub = th_raw_connect(owner);
  redisReply *r = redisCommand(sub, "SSUBSCRIBE %s", chan);
  CHECK(r && r->type == REDIS_REPLY_ARRAY);
  freeReplyObject(r);
  CHECK_OK(rlock_lock_release(lw, 7));
  CHECK(redisGetReply(sub, (void **)&r) == REDIS_OK && r && r->type == REDIS_REPLY_ARRAY && r->elements == 3);
  CHECK_STREQ(r->element[0]->str, "smessage");
  CHECK_STREQ(r->element[2]->str, "0");
  freeReplyObject(r);
  redisFree(sub);
  rlock_lock_free(lw);
  rlock_client_free(wc);
}

/* rlock_client_free while an acquire waits out a TRYAGAIN backoff (slot in
 * migration): the call ends once (RLOCK_ECLOSED), no key is left behind once
 * the slot is finished, and the delayed request is freed (a leak there is
 * what ASan / valgrind report: the op itself ends through the close). */
typedef struct once {
  atomic_int calls;
  int status;
} once_t;
static void on_once(rlock_lock_t *l, int status, int64_t value, void *arg) {
  (void)l, (void)value;
  once_t *o = arg;
  o->status = status;
  atomic_fetch_add(&o->calls, 1);
}
typedef struct close_mid {
  th_server_t *to;
  once_t done;
} close_mid_t;
static void close_in_window(void *arg, int phase) {
  close_mid_t *m = arg;
  if (phase != 1) return;
  rlock_client_t *c = client_on(cl->url, 0);
  rlock_lock_t *l = th_lock(c, "closed-mid-migration");
  tryagain_arg_t ta = {m->to, tryagains(m->to) + 2};
  CHECK_OK(rlock_lock_acquire_async(l, 9, 10000, 10000, NULL, on_once, &m->done));
  CHECK_MSG(th_wait_until(tryagain_seen, &ta, 20000), "the acquire did not meet TRYAGAIN");
  rlock_client_free(c); /* ends the call: the client is gone */
  CHECK_EQ(atomic_load(&m->done.calls), 1);
  CHECK_RC(m->done.status, RLOCK_ECLOSED);
  rlock_lock_free(l);
}

TEST(close_during_tryagain) {
  const char *name = "closed-mid-migration";
  int slot = th_cluster_keyslot(cl, name);
  close_mid_t m = {.to = other_master(th_cluster_owner(cl, slot))};
  th_cluster_move_slot(cl, slot, m.to, close_in_window, &m);
  CHECK_EQ(th_cmd_int(m.to, "EXISTS", name, NULL), 0);
  CHECK_EQ(atomic_load(&m.done.calls), 1);
}

/* A waiter whose tries meet TRYAGAIN for longer than its command timeout
 * (keys moved, slot not yet finished): it keeps waiting (each try ends as
 * "not run" and is queued again within its wait bound), and is granted once
 * the slot is finished and the holder's unlock lands. */
typedef struct window_wait {
  tryagain_arg_t t;
  waiter_arg_t *w;
} window_wait_t;
static int window_over(void *arg) { /* enough TRYAGAINs, or the waiter ended */
  window_wait_t *x = arg;
  return tryagain_seen(&x->t) || is_granted(x->w);
}

typedef struct long_window {
  rlock_lock_t *held;
  waiter_arg_t *w;
  th_server_t *to;
  released_t rel;
} long_window_t;

static void long_tryagain(void *arg, int phase) {
  long_window_t *m = arg;
  if (phase != 1) return;
  pthread_t t;
  window_wait_t ww = {{m->to, tryagains(m->to) + 30}, m->w}; /* > 3 command timeouts of backoffs */
  CHECK(pthread_create(&t, NULL, waiter_main, m->w) == 0);
  CHECK(pthread_detach(t) == 0);
  CHECK_MSG(th_wait_until(window_over, &ww, 30000), "the waiter's tries did not meet TRYAGAIN");
  CHECK_MSG(!is_granted(m->w), "the waiter gave up: %s", rlock_strerror(m->w->rc));
  CHECK_OK(rlock_lock_release_async(m->held, RLOCK_OWNER_SELF, on_released, &m->rel));
}

TEST(tryagain_longer_than_timeout) {
  const char *name = "long-tryagain";
  rlock_client_t *h = client_on(cl->url, 0);
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = cl->url;
  o.command_timeout_ms = 300;
  rlock_client_t *wc = NULL;
  CHECK_OK(rlock_client_new(&wc, &o));
  rlock_lock_t *lh = th_lock(h, name), *lw = th_lock(wc, name);
  CHECK_OK(rlock_lock_trylock(lh, 0, 60000));
  int slot = th_cluster_keyslot(cl, name);
  waiter_arg_t w = {.lock = lw};
  long_window_t m = {.held = lh, .w = &w, .to = other_master(th_cluster_owner(cl, slot))};
  th_cluster_move_slot(cl, slot, m.to, long_tryagain, &m);
  CHECK_MSG(th_wait_until(is_released, &m.rel, 20000), "the unlock never ended");
  CHECK_OK(m.rel.status);
  CHECK_MSG(th_wait_until(is_granted, &w, 20000), "the waiter was not granted");
  CHECK_OK(w.rc);
  CHECK_OK(rlock_lock_release(lw, 7));
  rlock_lock_free(lh);
  rlock_lock_free(lw);
  rlock_client_free(h);
  rlock_client_free(wc);
}

/* A waiter parked on a lock whose slot moves (no unlock meanwhile): the old
 * owner pushes an unsolicited sunsubscribe when SETSLOT NODE takes the slot
 * away. The client tells it from a reply (no connection dropped),
 * subscribes on the new owner, and the waiter tries again at once (not a
 * lease later); the unlock then reaches it as a message. */
typedef struct attempts_arg {
  rlock_client_t *c;
  uint64_t base;
} attempts_arg_t;
static uint64_t attempts(rlock_client_t *c) {
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  return st.acquire_attempts;
}
static int attempted(void *arg) {
  attempts_arg_t *a = arg;
  return attempts(a->c) > a->base;
}
/* A waiter may be granted (its retry after subscribing ran after the
 * unlock) before its subscriber connection's message is read: the message
 * count is waited for (TH_STAT_REACHES), never read once. */
static uint64_t messages(rlock_client_t *c) {
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  return st.messages;
}
typedef struct sub_on {
  th_server_t *s;
  const char *name;
} sub_on_t;
static int subscribed_on(void *arg) {
  sub_on_t *o = arg;
  char chan[128];
  snprintf(chan, sizeof chan, "redisson_lock__channel:{%s}", o->name);
  return shard_numsub(o->s, chan) > 0;
}

TEST(slot_moved_under_waiter) {
  const char *name = "moved-under-waiter";
  const int64_t lease = 30000; /* a waiter's own retry comes >= 20 s apart */
  rlock_client_t *h = client_on(cl->url, lease), *wc = client_on(cl->url, lease);
  rlock_lock_t *lh = th_lock(h, name), *lw = th_lock(wc, name);
  CHECK_OK(rlock_lock_trylock(lh, 0, RLOCK_LEASE_WATCHDOG));
  waiter_arg_t w = {.lock = lw};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, waiter_main, &w) == 0);
  wait_subscribed(name);
  int slot = th_cluster_keyslot(cl, name);
  th_server_t *from = th_cluster_owner(cl, slot), *to = other_master(from);
  rlock_stats_t st;
  rlock_client_stats(wc, &st);
  uint64_t reconnects = st.reconnects;
  attempts_arg_t a = {wc, attempts(wc)};
  th_cluster_move_slot(cl, slot, to, NULL, NULL);
  sub_on_t o = {to, name};
  CHECK_MSG(th_wait_until(subscribed_on, &o, 10000), "the waiter did not subscribe on the new owner");
  CHECK_MSG(th_wait_until(attempted, &a, 10000), "the waiter did not try again at once");
  rlock_client_stats(wc, &st);
  CHECK_EQ(st.reconnects, reconnects); /* the push was not taken for a stray reply */
  CHECK(!is_granted(&w));
  int64_t unlocked_at = th_now_ms();
  CHECK_OK(rlock_lock_unlock(lh));
  CHECK_MSG(th_wait_until(is_granted, &w, 30000), "the waiter was not granted after the unlock");
  CHECK_OK(w.rc);
  CHECK_MSG(w.at - unlocked_at < lease / 2, "granted %lld ms after the unlock", (long long)(w.at - unlocked_at));
  printf("# waiter granted %lld ms after the unlock\n", (long long)(w.at - unlocked_at));
  CHECK_MSG(TH_STAT_REACHES(wc, messages, 1, 10000), "the unlock's message never reached the waiter");
  CHECK(pthread_join(t, NULL) == 0);
  CHECK_OK(rlock_lock_release(lw, 7));
  CHECK_EQ(th_cmd_int(to, "EXISTS", name, NULL), 0);
  rlock_lock_free(lh);
  rlock_lock_free(lw);
  rlock_client_free(h);
  rlock_client_free(wc);
}

/* ------------------------------------------------------------ replica sync per node */

/* The replica-sync check (default policy one: a WAIT after each script when
 * the node has replicas) holds on the first request a fresh client sends to
 * a master that is not its first seed: that node's command connection was
 * opened by the slot map a moment before and has not read INFO replication
 * yet. Each master here has a replica, so every acquire carries a WAIT. */
TEST(fresh_node_gets_wait) {
  for (int round = 0; round < 5; round++) {
    char name[32];
    th_server_t *owner = NULL;
    for (int s = 0; s < 16384; s += 101) { /* a slot served by another master than the first seed */
      snprintf(name, sizeof name, "{%s}fresh%d", rlock__names_tag((uint16_t)s), round);
      owner = th_cluster_owner(cl, th_cluster_keyslot(cl, name));
      if (owner != cl->node[0]) break;
    }
    CHECK(owner != NULL && owner != cl->node[0]);
    long long waits = th_cmdstat(owner, "wait");
    rlock_client_t *c = client_on(cl->url, 0); /* first seed: node[0] */
    rlock_lock_t *l = th_lock(c, name);
    CHECK_OK(rlock_lock_trylock(l, 0, 30000));
    CHECK_MSG(th_cmdstat(owner, "wait") > waits, "round %d: the acquire ran on a master with a replica without WAIT",
              round);
    CHECK_OK(rlock_lock_unlock(l));
    rlock_lock_free(l);
    rlock_client_free(c);
  }
}

/* The first seed is a replica (any node may be a seed) that does not
 * answer CLUSTER SLOTS to this user (an ACL): the client's first acquire
 * goes to the replica (no replicas of its own: no WAIT), is redirected by
 * MOVED to the master, which has a replica: it must run there with its
 * WAIT, as if it had been routed there in the first place. */
TEST(moved_from_replica_seed_gets_wait) {
  th_server_t *m = cl->node[1], *rep = th_cluster_replica_of(cl, m);
  CHECK(rep != NULL);
  for (int i = 0; i < cl->n; i++)
    if (cl->node[i]->pid > 0)
      th_reply_free(
          th_cmd(cl->node[i], "ACL", "SETUSER", "rseed", "reset", "on", ">rseed-pw", "~*", "&*", "+@all", NULL));
  th_reply_free(th_cmd(rep, "ACL", "SETUSER", "rseed", "-cluster|slots", NULL));
  char name[64], url[128];
  name_on(m, "replica-seed", name, sizeof name);
  snprintf(url, sizeof url, "redis+cluster://rseed:rseed-pw@127.0.0.1:%d", rep->port);
  long long waits = th_cmdstat(m, "wait");
  rlock_client_t *c = client_on(url, 0);
  rlock_lock_t *l = th_lock(c, name);
  CHECK_OK(rlock_lock_trylock(l, 0, 30000));
  CHECK_MSG(th_cmdstat(m, "wait") > waits, "the acquire redirected to a master with a replica ran without WAIT");
  CHECK_OK(rlock_lock_unlock(l));
  rlock_lock_free(l);
  rlock_client_free(c);
  for (int i = 0; i < cl->n; i++)
    if (cl->node[i]->pid > 0) th_reply_free(th_cmd(cl->node[i], "ACL", "DELUSER", "rseed", NULL));
}

/* The simple lock on a cluster URL: its key (the raw NAME), latch and
 * channel in NAME's slot whatever braces NAME holds; the lock key lands on
 * the slot's master; a waiter on another client is woken by the unlock's
 * SPUBLISH (well before its polling backoff would matter: 3 s lease). */
typedef struct simple_waiter {
  rlock_lock_t *lock;
  int rc;
  atomic_int done;
  int64_t at;
} simple_waiter_t;
static void *simple_waiter_main(void *arg) {
  simple_waiter_t *w = arg;
  w->rc = rlock_lock_acquire(w->lock, 7, 20000, 30000, NULL); /* owner 7: released by main */
  w->at = th_now_ms();
  atomic_store(&w->done, 1);
  return NULL;
}
static int simple_done(void *arg) { return atomic_load(&((simple_waiter_t *)arg)->done); }
typedef struct chan_on {
  th_server_t *s;
  const char *chan;
} chan_on_t;
static int chan_subscribed(void *arg) {
  chan_on_t *c = arg;
  return shard_numsub(c->s, c->chan) > 0;
}

TEST(simple_lock_on_cluster) {
  rlock_client_t *a = client_on(cl->url, 0), *b = client_on(cl->url, 0);
  const char *names[] = {"simple-plain", "simple{tag}x", "a{b", "x}{y}", "x{}y", "{}", NULL};
  for (int i = 0; names[i]; i++) {
    rlock_lock_t *la = NULL, *lb = NULL;
    CHECK_OK(rlock_lock_new_simple(a, names[i], strlen(names[i]), &la));
    CHECK_OK(rlock_lock_new_simple(b, names[i], strlen(names[i]), &lb));
    CHECK_OK(rlock_lock_trylock(la, 0, 3000));
    check_on_owner(names[i], 1);
    CHECK_RC(rlock_lock_trylock(lb, 0, 30000), RLOCK_EBUSY);
    simple_waiter_t w = {.lock = lb};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, simple_waiter_main, &w) == 0);
    bytes_t chan; /* the simple lock's channel (names.c), sharded-subscribed on the slot's master */
    CHECK_OK(rlock__names_prefixed(&chan, "rlock_simple__channel", names[i], strlen(names[i])));
    CHECK_EQ(rlock__names_slot(chan.p, chan.n), th_cluster_keyslot(cl, names[i]));
    chan_on_t co = {th_cluster_owner(cl, th_cluster_keyslot(cl, names[i])), chan.p};
    CHECK_MSG(th_wait_until(chan_subscribed, &co, 20000), "%s: the waiter never subscribed", names[i]);
    free(chan.p);
    uint64_t m0 = messages(b);
    int64_t unlocked_at = th_now_ms();
    CHECK_OK(rlock_lock_unlock(la));
    CHECK_MSG(th_wait_until(simple_done, &w, 20000), "%s: the waiter never ended", names[i]);
    CHECK_MSG(TH_STAT_REACHES(b, messages, m0 + 1, 10000), "%s: the unlock's SPUBLISH did not reach the waiter",
              names[i]);
    CHECK(pthread_join(t, NULL) == 0);
    CHECK_OK(w.rc);
    CHECK_MSG(w.at - unlocked_at < 2000, "%s: granted %lld ms after the unlock", names[i],
              (long long)(w.at - unlocked_at));
    check_on_owner(names[i], 1);
    CHECK_OK(rlock_lock_release(lb, 7));
    check_on_owner(names[i], 0);
    rlock_lock_free(la);
    rlock_lock_free(lb);
  }
  rlock_client_free(a);
  rlock_client_free(b);
}

/* rlock_client_free while the first CLUSTER SLOTS (and the node
 * connections it opens) are in flight, and while a MOVED's refresh is
 * pending: returns, no leak or stale callback (run under ASan). */
TEST(free_during_refresh) {
  for (int i = 0; i < 20; i++) {
    rlock_client_t *c = client_on(cl->url, 0);
    if (i % 2) {
      char name[32];
      snprintf(name, sizeof name, "{%s}free", rlock__names_tag((uint16_t)(i * 811)));
      rlock_lock_t *l = th_lock(c, name);
      CHECK_OK(rlock_lock_trylock(l, 0, 2000));
      rlock_lock_free(l); /* held: its 2 s lease frees it */
    }
    rlock_client_free(c);
  }
}

/* A slot moved back and forth between two masters while four threads on
 * two clients take and give back two locks of that slot: every call
 * succeeds (MOVED/ASK/TRYAGAIN followed within the deadlines), never two
 * holders of one lock. */
typedef struct churn {
  rlock_client_t *c;
  const char *name;
  atomic_int *inside, *overlaps, *stop, *errors, *rounds;
} churn_t;
static void *churn_main(void *arg) {
  churn_t *x = arg;
  rlock_lock_t *l = th_lock(x->c, x->name);
  while (!atomic_load(x->stop)) {
    int rc = rlock_lock_acquire(l, RLOCK_OWNER_THREAD | (uint64_t)th_gettid(), 20000, 10000, NULL);
    if (rc) {
      fprintf(stderr, "# churn acquire %s: %s (%s)\n", x->name, rlock_err_name(rc), rlock_last_error());
      atomic_fetch_add(x->errors, 1);
      continue;
    }
    if (atomic_fetch_add(x->inside, 1) != 0) atomic_fetch_add(x->overlaps, 1);
    atomic_fetch_sub(x->inside, 1);
    rc = rlock_lock_unlock(l);
    if (rc) {
      fprintf(stderr, "# churn unlock %s: %s (%s)\n", x->name, rlock_err_name(rc), rlock_last_error());
      atomic_fetch_add(x->errors, 1);
    }
    atomic_fetch_add(x->rounds, 1);
  }
  rlock_lock_free(l);
  return NULL;
}

TEST(slot_churn) {
  char a[32], b[32];
  const char *tag = rlock__names_tag(4242);
  snprintf(a, sizeof a, "{%s}churn-a", tag);
  snprintf(b, sizeof b, "{%s}churn-b", tag);
  int slot = th_cluster_keyslot(cl, a);
  rlock_client_t *c1 = client_on(cl->url, 0), *c2 = client_on(cl->url, 0);
  atomic_int inside[2] = {0}, overlaps = 0, stop = 0, errors = 0, rounds = 0;
  churn_t x[4] = {{c1, a, &inside[0], &overlaps, &stop, &errors, &rounds},
                  {c2, a, &inside[0], &overlaps, &stop, &errors, &rounds},
                  {c1, b, &inside[1], &overlaps, &stop, &errors, &rounds},
                  {c2, b, &inside[1], &overlaps, &stop, &errors, &rounds}};
  pthread_t t[4];
  for (int i = 0; i < 4; i++) CHECK(pthread_create(&t[i], NULL, churn_main, &x[i]) == 0);
  th_server_t *home = th_cluster_owner(cl, slot), *away = other_master(home);
  for (int i = 0; i < 6; i++) {
    th_cluster_move_slot(cl, slot, i % 2 ? home : away, NULL, NULL);
    /* every node agrees before the next move (moved back at once, the nodes
     * can stay split for many seconds, each sending the slot to the other) */
    CHECK(th_cluster_wait_ok(cl, 30000));
    CHECK(th_cluster_owner(cl, slot) == (i % 2 ? home : away));
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < 4; i++) CHECK(pthread_join(t[i], NULL) == 0);
  printf("# slot churn: %d rounds, %d errors, %d overlaps\n", atomic_load(&rounds), atomic_load(&errors),
         atomic_load(&overlaps));
  rlock_stats_t s1, s2;
  rlock_client_stats(c1, &s1);
  rlock_client_stats(c2, &s2);
  printf("# slot churn: acquire sync misses %llu, unlock sync misses %llu\n",
         (unsigned long long)(s1.acquire_sync_misses + s2.acquire_sync_misses),
         (unsigned long long)(s1.unlock_sync_misses + s2.unlock_sync_misses));
  CHECK_EQ(atomic_load(&overlaps), 0);
  CHECK_EQ(atomic_load(&errors), 0);
  CHECK(atomic_load(&rounds) > 0);
  rlock_client_free(c1);
  rlock_client_free(c2);
}

/* A RedLock whose node is a cluster URL, in both formats: its key lands on
 * the master of the name's slot, a second RedLock on the same name is
 * refused while it is held, the release frees it. */
TEST(redlock_on_cluster_url) {
  rlock_options_t o;
  rlock_options_init(&o);
  const char *urls[1] = {cl->url};
  const char *name = "redlock-on-cluster";
  for (unsigned flags = 0; flags <= RLOCK_REDLOCK_SIMPLE; flags++) {
    rlock_redlock_t *a = NULL, *b = NULL;
    CHECK_OK(rlock_redlock_new(&a, &o, urls, 1, name, strlen(name), flags));
    CHECK_OK(rlock_redlock_new(&b, &o, urls, 1, name, strlen(name), flags));
    int64_t vu = 0;
    CHECK_OK(rlock_redlock_acquire(a, 0, 10000, NULL, &vu));
    check_on_owner(name, 1);
    CHECK_RC(rlock_redlock_acquire(b, 0, 10000, NULL, &vu), RLOCK_EBUSY);
    CHECK_OK(rlock_redlock_release(a));
    check_on_owner(name, 0);
    CHECK_OK(rlock_redlock_acquire(b, 0, 10000, NULL, &vu));
    CHECK_OK(rlock_redlock_release(b));
    rlock_redlock_free(a);
    rlock_redlock_free(b);
  }
}

/* ------------------------------------------------------------ watchdog per shard */

typedef struct lost_log {
  pthread_mutex_t mu;
  char names[8][64];
  int n;
} lost_log_t;

static void on_lost(const char *name, size_t len, uint64_t owner, rlock_lost_reason_t reason, void *arg) {
  (void)owner, (void)reason;
  lost_log_t *l = arg;
  pthread_mutex_lock(&l->mu);
  if (l->n < 8) snprintf(l->names[l->n++], sizeof l->names[0], "%.*s", (int)len, name);
  pthread_mutex_unlock(&l->mu);
}
static int lost_any(void *arg) {
  lost_log_t *l = arg;
  pthread_mutex_lock(&l->mu);
  int n = l->n;
  pthread_mutex_unlock(&l->mu);
  return n;
}

/* Holds on every master; one master stops answering scripts (CLIENT PAUSE
 * WRITE: no failover, its keys do not expire meanwhile). Its hold is
 * reported lost once its lease may have run out, and only it: the other
 * shards' holds keep being renewed in the same rounds. */
TEST(one_shard_failing) {
  const int64_t lease = 2400; /* renewed every 800 ms */
  rlock_client_t *c = client_on(cl->url, lease);
  lost_log_t log = {.mu = PTHREAD_MUTEX_INITIALIZER};
  rlock_client_on_lost(c, on_lost, &log);
  th_server_t *masters[3] = {th_cluster_owner(cl, 0), NULL, NULL};
  masters[1] = other_master(masters[0]);
  for (int s = 0; s < 16384 && !masters[2]; s += 512) {
    th_server_t *o = th_cluster_owner(cl, s);
    if (o && o != masters[0] && o != masters[1]) masters[2] = o;
  }
  CHECK(masters[2] != NULL);
  char names[3][64];
  rlock_lock_t *l[3];
  for (int i = 0; i < 3; i++) {
    name_on(masters[i], "shard-hold", names[i], sizeof names[i]);
    l[i] = th_lock(c, names[i]);
    CHECK_OK(rlock_lock_trylock(l[i], 0, RLOCK_LEASE_WATCHDOG));
  }
  int64_t paused_at = th_now_ms();
  th_reply_free(th_cmd(masters[0], "CLIENT", "PAUSE", "30000", "WRITE", NULL));
  CHECK_MSG(th_wait_until(lost_any, &log, 30000), "the paused shard's hold was never reported lost");
  int64_t lost_after = th_now_ms() - paused_at;
  CHECK_STREQ(log.names[0], names[0]);
  CHECK_MSG(lost_after <= 2 * lease + 5000, "lost %lld ms after the pause", (long long)lost_after);
  printf("# paused shard's hold reported lost %lld ms after the pause (lease %lld)\n", (long long)lost_after,
         (long long)lease);
  /* two more leases: the other shards' holds are still renewed */
  int64_t until = th_now_ms() + 2 * lease;
  while (th_now_ms() < until) {
    for (int i = 1; i < 3; i++) CHECK(th_cmd_int(masters[i], "PTTL", names[i], NULL) > 0);
    th_sleep_ms(100); /* sampling the servers' state over time, not waiting for an event */
  }
  CHECK_EQ(lost_any(&log), 1);
  th_reply_free(th_cmd(masters[0], "CLIENT", "UNPAUSE", NULL));
  for (int i = 1; i < 3; i++) CHECK_OK(rlock_lock_unlock(l[i]));
  for (int i = 0; i < 3; i++) rlock_lock_free(l[i]);
  rlock_client_free(c);
  th_reply_free(th_cmd(masters[0], "DEL", names[0], NULL));
}

/* ------------------------------------------------------------ failover */

typedef struct replica_has {
  th_server_t *replica;
  const char *key;
} replica_has_t;

/* The replica holds key (a replica answers reads after READONLY). */
static int replica_has_key(void *arg) {
  replica_has_t *r = arg;
  th_reply_free(th_cmd(r->replica, "READONLY", NULL));
  return th_cmd_int(r->replica, "EXISTS", r->key, NULL) == 1;
}

typedef struct owner_is {
  int slot;
  th_server_t *s;
} owner_is_t;
static int owner_is(void *arg) {
  owner_is_t *o = arg;
  return th_cluster_owner(cl, o->slot) == o->s;
}

/* A held lock and a waiter across a failover of the master that owns it:
 * `how` promotes its replica. The holder renews on the new master, nothing
 * is reported lost, the unlock grants the waiter. */
static void across_failover(th_server_t *m, const char *prefix, int64_t watchdog_ms,
                            void (*how)(th_server_t *m, th_server_t *rep)) {
  char name[64];
  name_on(m, prefix, name, sizeof name);
  int slot = th_cluster_keyslot(cl, name);
  th_server_t *rep = th_cluster_replica_of(cl, m);
  CHECK(rep != NULL);
  rlock_client_t *h = client_on(cl->url, watchdog_ms), *wc = client_on(cl->url, watchdog_ms);
  rlock_lock_t *lh = th_lock(h, name), *lw = th_lock(wc, name);
  CHECK_OK(rlock_lock_trylock(lh, 0, RLOCK_LEASE_WATCHDOG));
  replica_has_t rh = {rep, name};
  CHECK(th_wait_until(replica_has_key, &rh, 20000)); /* the hold survives the failover */
  waiter_arg_t w = {.lock = lw};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, waiter_main, &w) == 0);
  wait_subscribed(name);
  int64_t failover_at = th_now_ms();
  how(m, rep);
  owner_is_t o = {slot, rep};
  CHECK_MSG(th_wait_until(owner_is, &o, 60000), "the replica did not take the slot");
  int64_t owner_at = th_now_ms();
  CHECK(th_cluster_wait_ok(cl, 60000));
  renewed_arg_t r = {h, renewed(h)};
  CHECK_MSG(th_wait_until(renewed_twice, &r, 60000), "the holder does not renew on the promoted replica");
  CHECK(th_cmd_int(rep, "PTTL", name, NULL) > 0);
  CHECK(!is_granted(&w));
  /* the waiter's subscription followed the slot to the promoted replica */
  wait_subscribed(name);
  int64_t unlocked_at = th_now_ms();
  CHECK_OK(rlock_lock_unlock(lh));
  CHECK_MSG(th_wait_until(is_granted, &w, 30000), "the waiter was not granted after the unlock");
  CHECK_OK(w.rc);
  /* woken by the unlock message (the subscription followed the cluster),
   * not by its lease-long park: the waiter re-tries at most every 2/3 lease */
  CHECK_MSG(TH_STAT_REACHES(wc, messages, 1, 10000), "the unlock's message never reached the waiter");
  CHECK_MSG(w.at - unlocked_at < watchdog_ms / 2, "granted %lld ms after the unlock", (long long)(w.at - unlocked_at));
  printf("# slot owner changed %lld ms after the failover began; waiter granted %lld ms after the unlock\n",
         (long long)(owner_at - failover_at), (long long)(w.at - unlocked_at));
  CHECK(pthread_join(t, NULL) == 0);
  CHECK_OK(rlock_lock_release(lw, 7));
  CHECK_EQ(th_cmd_int(rep, "EXISTS", name, NULL), 0);
  rlock_stats_t st;
  rlock_client_stats(h, &st);
  CHECK_EQ(st.locks_lost, 0);
  rlock_client_stats(wc, &st);
  CHECK_EQ(st.locks_lost, 0);
  rlock_lock_free(lh);
  rlock_lock_free(lw);
  rlock_client_free(h);
  rlock_client_free(wc);
}

static void manual_failover(th_server_t *m, th_server_t *rep) {
  (void)m;
  redisReply *r = th_cmd(rep, "CLUSTER", "FAILOVER", NULL);
  CHECK(r->type == REDIS_REPLY_STATUS);
  th_reply_free(r);
}

static void kill_master(th_server_t *m, th_server_t *rep) {
  (void)rep;
  th_server_kill(m); /* the replica takes over after cluster-node-timeout */
}

/* CLUSTER FAILOVER under a waiter whose client has nothing else to say
 * (its only traffic is the parked wait; a 30 s lease: its own re-try comes
 * 20 s apart). The holder's unlock runs on the promoted replica right after
 * the failover: the waiter must be granted by the unlock's message, not by
 * its lease-long park. The demoted master keeps the waiter's SSUBSCRIBE
 * (Redis 7.0) and nothing tells the waiter's client that the slot moved. */
TEST(failover_under_an_idle_waiter) {
  th_server_t *m = cl->node[2], *rep = th_cluster_replica_of(cl, m);
  CHECK(rep != NULL);
  char name[64];
  name_on(m, "idle-waiter", name, sizeof name);
  int slot = th_cluster_keyslot(cl, name);
  rlock_client_t *h = client_on(cl->url, 30000), *wc = client_on(cl->url, 30000);
  rlock_lock_t *lh = th_lock(h, name), *lw = th_lock(wc, name);
  CHECK_OK(rlock_lock_trylock(lh, 0, RLOCK_LEASE_WATCHDOG));
  replica_has_t rh = {rep, name};
  CHECK(th_wait_until(replica_has_key, &rh, 20000));
  waiter_arg_t w = {.lock = lw};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, waiter_main, &w) == 0);
  wait_subscribed(name);
  owner_is_t o = {slot, rep};
  int promoted = 0;
  for (int i = 0; i < 6 && !promoted; i++) { /* a manual failover times out (5 s) on a loaded host: again */
    manual_failover(m, rep);
    promoted = th_wait_until(owner_is, &o, 10000);
  }
  CHECK_MSG(promoted, "the replica did not take the slot");
  CHECK(th_cluster_wait_ok(cl, 60000));
  int64_t unlocked_at = th_now_ms();
  CHECK_OK(rlock_lock_unlock(lh));
  int granted = th_wait_until(is_granted, &w, 40000);
  printf("# idle waiter granted %lld ms after the unlock\n", (long long)(th_now_ms() - unlocked_at));
  CHECK_MSG(granted, "the waiter was not granted after the unlock");
  CHECK_OK(w.rc);
  CHECK_MSG(w.at - unlocked_at < 5000, "the idle waiter slept %lld ms while the lock was free",
            (long long)(w.at - unlocked_at));
  CHECK(pthread_join(t, NULL) == 0);
  CHECK_OK(rlock_lock_release(lw, 7));
  rlock_lock_free(lh);
  rlock_lock_free(lw);
  rlock_client_free(h);
  rlock_client_free(wc);
}

/* A waiter that leaves after a failover its client learnt of by a MOVED
 * only (its user may not run CLUSTER SLOTS any more: no refresh moves the
 * subscription): its SUNSUBSCRIBE goes to the connection holding the
 * subscription, the demoted master, which keeps it otherwise (Redis 7.0).
 * Before the fix it went where the slot map says now (the promoted
 * replica), and the old master kept the channel for ever (issue 20 item 11). */
typedef struct cancel_waiter {
  rlock_lock_t *lock;
  rlock_cancel_t *cancel;
  int rc;
} cancel_waiter_t;
static void *cancel_waiter_main(void *arg) {
  cancel_waiter_t *w = arg;
  w->rc = rlock_lock_acquire(w->lock, 7, 120000, RLOCK_LEASE_WATCHDOG, w->cancel);
  return NULL;
}

typedef struct numsub_is {
  th_server_t *s;
  const char *chan;
  long long want;
} numsub_is_t;
static int numsub_is(void *arg) {
  numsub_is_t *n = arg;
  return shard_numsub(n->s, n->chan) == n->want;
}

static void acl_all(const char *rule) {
  for (int i = 0; i < cl->n; i++)
    if (cl->node[i]) th_reply_free(th_cmd(cl->node[i], "ACL", "SETUSER", "rlw", rule, NULL));
}

TEST(leave_after_failover_learnt_by_moved) {
  th_server_t *m = other_master(cl->node[0]), *rep = th_cluster_replica_of(cl, m); /* master_killed: node[0] */
  CHECK(rep != NULL);
  char name[64], chan[128], url[sizeof cl->url + 32];
  name_on(m, "leave-moved", name, sizeof name);
  snprintf(chan, sizeof chan, "redisson_lock__channel:{%s}", name);
  int slot = th_cluster_keyslot(cl, name);
  for (int i = 0; i < cl->n; i++)
    if (cl->node[i])
      th_reply_free(th_cmd(cl->node[i], "ACL", "SETUSER", "rlw", "on", ">rlwpw", "~*", "&*", "+@all", NULL));
  snprintf(url, sizeof url, "redis+cluster://rlw:rlwpw@%s", cl->url + strlen("redis+cluster://"));
  rlock_client_t *h = client_on(cl->url, 30000), *wc = client_on(url, 30000);
  rlock_lock_t *lh = th_lock(h, name), *lw = th_lock(wc, name);
  CHECK_OK(rlock_lock_trylock(lh, 0, RLOCK_LEASE_WATCHDOG));
  replica_has_t rh = {rep, name};
  CHECK(th_wait_until(replica_has_key, &rh, 20000));
  cancel_waiter_t w = {.lock = lw};
  CHECK_OK(rlock_cancel_new(&w.cancel));
  pthread_t t;
  CHECK(pthread_create(&t, NULL, cancel_waiter_main, &w) == 0);
  wait_subscribed(name);     /* on m */
  acl_all("-cluster|slots"); /* the waiter's client learns the failover by MOVED only */
  owner_is_t o = {slot, rep};
  int promoted = 0;
  for (int i = 0; i < 6 && !promoted; i++) { /* a manual failover times out (5 s) on a loaded host: again */
    manual_failover(m, rep);
    promoted = th_wait_until(owner_is, &o, 10000);
  }
  CHECK_MSG(promoted, "the replica did not take the slot");
  CHECK(th_cluster_wait_ok(cl, 60000));
  int locked = -1;
  CHECK_OK(rlock_lock_is_locked(lw, &locked)); /* to m: MOVED, the slot map names rep now */
  CHECK_EQ(locked, 1);
  /* the scenario needs the demoted master to have kept the subscription
   * (Redis 7.0 does, as a rule); once in a loaded CI run it had none left
   * (cause not known: a retried failover, or a refresh before the ACL
   * change): then the leave's target cannot be seen, and the case says so */
  long long kept = shard_numsub(m, chan);
  if (kept != 1)
    printf("# NOTE: the demoted master holds %lld subscription(s), not 1: the leave is not checked\n", kept);
  rlock_cancel_trigger(w.cancel);
  CHECK(pthread_join(t, NULL) == 0);
  CHECK_RC(w.rc, RLOCK_ECANCELED);
  numsub_is_t gone = {m, chan, 0};
  int left = th_wait_until(numsub_is, &gone, 5000);
  printf("# after the waiter left: %lld subscriber(s) on the demoted master, %lld on the new one\n",
         shard_numsub(m, chan), shard_numsub(rep, chan));
  CHECK_MSG(left, "the demoted master keeps the channel of a waiter that left");
  acl_all("+cluster|slots");
  CHECK_OK(rlock_lock_unlock(lh));
  rlock_lock_free(lh);
  rlock_lock_free(lw);
  rlock_client_free(h);
  rlock_client_free(wc);
  rlock_cancel_free(w.cancel);
  for (int i = 0; i < cl->n; i++)
    if (cl->node[i]) th_reply_free(th_cmd(cl->node[i], "ACL", "DELUSER", "rlw", NULL));
}

TEST(replica_promoted_by_cluster_failover) { across_failover(cl->node[1], "manual-failover", 6000, manual_failover); }

/* ------------------------------------------------------------ renewals in a half-migrated slot */

typedef struct renewed_n {
  rlock_client_t *c;
  uint64_t base, n;
} renewed_n_t;
static int renewed_n(void *arg) {
  renewed_n_t *r = arg;
  return renewed(r->c) >= r->base + r->n;
}

/* The key's PTTL on s (ASKING first: the slot may be only importing
 * there); -2 also for a redirect (the key is not there). */
static long long pttl_on(th_server_t *s, const char *key) {
  th_reply_free(th_cmd(s, "ASKING", NULL));
  redisReply *r = th_cmd(s, "PTTL", key, NULL);
  long long v = r->type == REDIS_REPLY_INTEGER ? r->integer : -2;
  th_reply_free(r);
  return v;
}

/* Issue 20 item 10: two watchdog holds in one slot (one renewal call for
 * both), the slot marked MIGRATING/IMPORTING and one of the two keys
 * migrated: the batch's keys are now on two nodes (the source answers
 * TRYAGAIN, or ASK and then the target TRYAGAIN, for as long as the slot
 * stays so). The slot stays half-moved for several leases (watchdog
 * 1500 ms): both holds are renewed where their key is (one by one), neither
 * is lost, both unlock after the slot is finished. Before, the batch ended as
 * not run after TRYAGAINs until the command timeout, every round, and both
 * holds ran out. */
TEST(renewal_batch_in_half_migrated_slot) {
  const char *a = "{halfmove}-a", *b = "{halfmove}-b";
  rlock_client_t *h = client_on(cl->url, 1500);
  rlock_lock_t *la = th_lock(h, a), *lb = th_lock(h, b);
  CHECK_OK(rlock_lock_trylock(la, 0, RLOCK_LEASE_WATCHDOG));
  CHECK_OK(rlock_lock_trylock(lb, 0, RLOCK_LEASE_WATCHDOG));
  int slot = th_cluster_keyslot(cl, a);
  CHECK_EQ(th_cluster_keyslot(cl, b), slot);
  th_server_t *from = th_cluster_owner(cl, slot), *to = other_master(from);
  char s[16], port[16];
  snprintf(s, sizeof s, "%d", slot);
  snprintf(port, sizeof port, "%d", to->port);
  char *from_id = th_cluster_id(from), *to_id = th_cluster_id(to);
  redisReply *r = th_cmd(to, "CLUSTER", "SETSLOT", s, "IMPORTING", from_id, NULL);
  CHECK(r->type == REDIS_REPLY_STATUS);
  th_reply_free(r);
  r = th_cmd(from, "CLUSTER", "SETSLOT", s, "MIGRATING", to_id, NULL);
  CHECK(r->type == REDIS_REPLY_STATUS);
  th_reply_free(r);
  r = th_cmd(from, "MIGRATE", "127.0.0.1", port, a, "0", "10000", NULL);
  CHECK_MSG(r->type == REDIS_REPLY_STATUS, "MIGRATE %s: %s", a, r->str ? r->str : "?");
  th_reply_free(r);
  int64_t since = th_now_ms();
  /* the slot half-moved for over 2.5 leases: each hold renewed 8 times */
  renewed_n_t rn = {h, renewed(h), 16};
  int ok = th_wait_until(renewed_n, &rn, 8000);
  long long pa = pttl_on(to, a), pb = pttl_on(from, b);
  printf("# half-moved for %lld ms: %llu holds renewed; PTTL %s %lld (target), %s %lld (source)\n",
         (long long)(th_now_ms() - since), (unsigned long long)(renewed(h) - rn.base), a, pa, b, pb);
  th_cluster_move_slot(cl, slot, to, NULL, NULL); /* b moves, SETSLOT NODE */
  CHECK(th_cluster_wait_ok(cl, 30000));
  CHECK_MSG(ok, "the two holds were not renewed while their slot was half-moved");
  CHECK_MSG(pa > 0 && pb > 0, "a hold ran out while its slot was half-moved (PTTL %lld, %lld)", pa, pb);
  rlock_stats_t st;
  rlock_client_stats(h, &st);
  CHECK_EQ(st.locks_lost, 0);
  CHECK_OK(rlock_lock_unlock(la));
  CHECK_OK(rlock_lock_unlock(lb));
  CHECK_EQ(th_cmd_int(to, "EXISTS", a, NULL), 0);
  CHECK_EQ(th_cmd_int(to, "EXISTS", b, NULL), 0);
  free(from_id), free(to_id);
  rlock_lock_free(la), rlock_lock_free(lb);
  rlock_client_free(h);
}

/* ------------------------------------------------------------ MultiLock order across a slot move */

/* The test's single server and the lock name on it and on the cluster. */
typedef struct ml_pair {
  th_server_t *s; /* the single server */
  const char *name;
  rlock_lock_t *on_cluster, *on_single; /* members of one MultiLock */
} ml_pair_t;

static long long numsub(th_server_t *s, const char *chan) {
  redisReply *r = th_cmd(s, "PUBSUB", "NUMSUB", chan, NULL);
  long long n = r->type == REDIS_REPLY_ARRAY && r->elements == 2 ? r->element[1]->integer : 0;
  th_reply_free(r);
  return n;
}

/* A subscriber on the lock's channel: on the single server, or (sharded) on
 * the master that owns the name's slot. */
typedef struct ml_sub {
  ml_pair_t *p;
  int on_single;
} ml_sub_t;
static int ml_subscribed(void *arg) {
  ml_sub_t *q = arg;
  char chan[128];
  snprintf(chan, sizeof chan, "redisson_lock__channel:{%s}", q->p->name);
  if (q->on_single) return numsub(q->p->s, chan) > 0;
  th_server_t *owner = th_cluster_owner(cl, th_cluster_keyslot(cl, q->p->name));
  return owner && shard_numsub(owner, chan) > 0;
}

static int ml_unsubscribed(void *arg) { return !ml_subscribed(arg); }

typedef struct ml_run {
  rlock_multilock_t *m;
  uint64_t owner;
  rlock_cancel_t *cancel;
  int rc;
  atomic_int done;
} ml_run_t;

static void *ml_run_main(void *arg) {
  ml_run_t *r = arg;
  r->rc = rlock_multilock_acquire(r->m, r->owner, RLOCK_WAIT_FOREVER, RLOCK_LEASE_WATCHDOG, r->cancel);
  if (r->rc == 0) CHECK_OK(rlock_multilock_release(r->m, r->owner));
  atomic_store(&r->done, 1);
  return NULL;
}
static int ml_run_done(void *arg) { return atomic_load(&((ml_run_t *)arg)->done); }

/* Which member the MultiLock m over p takes first: 1 the single server's.
 * The single server's member is held by another client; m's acquire parks
 * on it, having taken the cluster's member first only if that comes first. */
static int ml_single_first(ml_pair_t *p, rlock_multilock_t *m) {
  rlock_client_t *hc = client_on(p->s->url, 0);
  rlock_lock_t *h = th_lock(hc, p->name);
  CHECK_OK(rlock_lock_acquire(h, 99, 0, 60000, NULL));
  ml_run_t r = {.m = m, .owner = 5};
  CHECK_OK(rlock_cancel_new(&r.cancel));
  pthread_t t;
  CHECK(pthread_create(&t, NULL, ml_run_main, &r) == 0);
  ml_sub_t q = {p, 1};
  CHECK_MSG(th_wait_until(ml_subscribed, &q, 20000), "the MultiLock never waited for the single server's member");
  th_server_t *owner = th_cluster_owner(cl, th_cluster_keyslot(cl, p->name));
  int single_first = th_cmd_int(owner, "EXISTS", p->name, NULL) == 0;
  rlock_cancel_trigger(r.cancel);
  CHECK(pthread_join(t, NULL) == 0);
  CHECK_RC(r.rc, RLOCK_ECANCELED);
  rlock_cancel_free(r.cancel);
  CHECK_MSG(th_wait_until(ml_unsubscribed, &q, 20000), "the cancelled MultiLock stayed subscribed");
  CHECK_OK(rlock_lock_release(h, 99));
  CHECK_EQ(th_cmd_int(owner, "EXISTS", p->name, NULL), 0);
  rlock_lock_free(h);
  rlock_client_free(hc);
  return single_first;
}

static void node_key(int port, char *buf, size_t n) { snprintf(buf, n, "127.0.0.1:%d/0", port); }

/* Issue 20 item 9: MultiLock's canonical order never changes for the same
 * members, in any process at any time. One name on the cluster and on a
 * single server whose address sorts between two masters': m1 made while
 * the name's slot is on the master sorting before it, the slot moved to the
 * one sorting after, m2 made then (members given the other way round).
 * Both take the same member first. Then the two wait for each other with
 * RLOCK_WAIT_FOREVER the way a cycle needs: m1's owner holds its first
 * member and waits for its second, which m2's owner held (re-entrantly)
 * before its acquire began and gives up once m2 waits. Ordered by the node
 * serving each member at creation (before), m2 took that second member first
 * and waits for m1's first: a deadlock, caught by the test's own bound and
 * broken with the cancel tokens. One name on the cluster named by its seeds
 * in another order is one lock: a member twice (RLOCK_EINVAL). */
TEST(multilock_order_across_slot_move) {
  th_server_t *m[3] = {th_cluster_owner(cl, 0), th_cluster_owner(cl, 8192), th_cluster_owner(cl, 16383)};
  CHECK(m[0] && m[1] && m[2] && m[0] != m[1] && m[1] != m[2] && m[0] != m[2]);
  th_server_t *s = NULL, *lo = NULL, *hi = NULL;
  char ks[64];
  /* a single server on a port whose address sorts between two masters'
   * (tried upward from the lower of two neighbours in port order) */
  int order[3] = {0, 1, 2};
  for (int i = 0; i < 3; i++)
    for (int j = i + 1; j < 3; j++)
      if (m[order[j]]->port < m[order[i]]->port) {
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
      }
  for (int k = 0; !s && k < 2; k++) {
    lo = m[order[k]];
    hi = m[order[k + 1]];
    char klo[64], khi[64];
    node_key(lo->port, klo, sizeof klo);
    node_key(hi->port, khi, sizeof khi);
    for (int port = lo->port + 1, tried = 0; !s && port < hi->port && tried < 200; port++) {
      node_key(port, ks, sizeof ks);
      if (strcmp(klo, ks) >= 0 || strcmp(ks, khi) >= 0) continue;
      th_server_opts_t so = {.port = port};
      s = th_server_start(&so);
      tried++;
    }
  }
  CHECK_MSG(s != NULL, "no free port sorts between the masters'");
  char name[64];
  name_on(lo, "ml-order", name, sizeof name);
  int slot = th_cluster_keyslot(cl, name);

  rlock_client_t *c1 = client_on(cl->url, 0), *d1 = client_on(s->url, 0);
  ml_pair_t p1 = {s, name, th_lock(c1, name), th_lock(d1, name)};
  rlock_lock_t *in1[2] = {p1.on_cluster, p1.on_single};
  rlock_multilock_t *ml1 = NULL;
  CHECK_OK(rlock_multilock_new(&ml1, in1, 2));

  th_cluster_move_slot(cl, slot, hi, NULL, NULL);
  owner_is_t o = {slot, hi};
  CHECK(th_wait_until(owner_is, &o, 30000));
  CHECK(th_cluster_wait_ok(cl, 30000));

  rlock_client_t *c2 = client_on(cl->url, 0), *d2 = client_on(s->url, 0);
  ml_pair_t p2 = {s, name, th_lock(c2, name), th_lock(d2, name)};
  char node[64];
  CHECK_OK(rlock_lock_node(p2.on_cluster, node, sizeof node)); /* c2 knows the slot moved */
  rlock_lock_t *in2[2] = {p2.on_single, p2.on_cluster};
  rlock_multilock_t *ml2 = NULL;
  CHECK_OK(rlock_multilock_new(&ml2, in2, 2));

  int first1 = ml_single_first(&p1, ml1), first2 = ml_single_first(&p2, ml2);
  printf("# slot %d moved %d -> %d (single server %d); served by %s; first member: %s / %s\n", slot, lo->port, hi->port,
         s->port, node, first1 ? "single" : "cluster", first2 ? "single" : "cluster");

  /* the cycle: m1's second member held by m2's owner (2) through m2's own member */
  rlock_lock_t *second2 = first1 ? p2.on_cluster : p2.on_single;
  CHECK_OK(rlock_lock_acquire(second2, 2, 0, RLOCK_LEASE_WATCHDOG, NULL));
  ml_run_t a = {.m = ml1, .owner = 1}, b = {.m = ml2, .owner = 2};
  CHECK_OK(rlock_cancel_new(&a.cancel));
  CHECK_OK(rlock_cancel_new(&b.cancel));
  pthread_t ta, tb;
  CHECK(pthread_create(&ta, NULL, ml_run_main, &a) == 0);
  ml_sub_t a_waits = {&p1, !first1}; /* m1 holds its first member and waits for its second */
  CHECK_MSG(th_wait_until(ml_subscribed, &a_waits, 20000), "m1 never waited for its second member");
  CHECK(pthread_create(&tb, NULL, ml_run_main, &b) == 0);
  ml_sub_t b_waits = {&p2, first1}; /* m2 waits for m1's first member */
  CHECK_MSG(th_wait_until(ml_subscribed, &b_waits, 20000), "m2 never waited for m1's first member");
  CHECK_OK(rlock_lock_release(second2, 2)); /* the outer hold goes: m1 can go on, unless m2 took it too */
  int both = th_wait_until(ml_run_done, &a, 20000) && th_wait_until(ml_run_done, &b, 20000);
  if (!both) rlock_cancel_trigger(a.cancel), rlock_cancel_trigger(b.cancel);
  CHECK(pthread_join(ta, NULL) == 0);
  CHECK(pthread_join(tb, NULL) == 0);
  CHECK_MSG(both,
            "deadlock: two MultiLocks over the same members, made before and after a slot move, "
            "waited for each other for ever (ended by the test's cancel: %s, %s)",
            rlock_err_name(a.rc), rlock_err_name(b.rc));
  CHECK_MSG(first1 == first2, "m1 (made before the slot moved) takes the %s member first, m2 (after) the %s one",
            first1 ? "single server's" : "cluster's", first2 ? "single server's" : "cluster's");
  CHECK_OK(a.rc);
  CHECK_OK(b.rc);
  CHECK_EQ(th_cmd_int(s, "EXISTS", name, NULL), 0);
  CHECK_EQ(th_cmd_int(hi, "EXISTS", name, NULL), 0);
  /* one name on the cluster named by its seeds in another order: one lock, a member twice */
  char rotated[TH_CLUSTER_MAX * 24 + 32];
  url_from(1, rotated, sizeof rotated);
  rlock_client_t *c3 = client_on(rotated, 0);
  rlock_lock_t *x3 = th_lock(c3, name), *twice[2] = {p1.on_cluster, x3};
  rlock_multilock_t *ml3 = NULL;
  CHECK_RC(rlock_multilock_new(&ml3, twice, 2), RLOCK_EINVAL);
  CHECK_MSG(strstr(rlock_last_error(), "twice"), "message: %s", rlock_last_error());
  rlock_lock_free(x3);
  rlock_client_free(c3);
  rlock_cancel_free(a.cancel), rlock_cancel_free(b.cancel);
  rlock_multilock_free(ml1), rlock_multilock_free(ml2);
  rlock_lock_free(p1.on_cluster), rlock_lock_free(p1.on_single);
  rlock_lock_free(p2.on_cluster), rlock_lock_free(p2.on_single);
  rlock_client_free(c1), rlock_client_free(d1), rlock_client_free(c2), rlock_client_free(d2);
  th_server_stop(s);
}

/* The killed master is the first seed: the control and subscriber
 * connections move to another node too. Lease 15 s: longer than the
 * failover (node timeout 2 s + election). */
TEST(master_killed) { across_failover(cl->node[0], "killed-master", 15000, kill_master); }

/* A master that dies while the client's connection to it has never been
 * ready: the client learnt the slot map naming it (from a live seed) and its
 * first connection to it was still coming up, as for the fault test
 * latch_master_killed's third awaiter (its await began 7.7 ms before the
 * kill, its client just made). Such a connection never goes down (it was
 * never up), and before the fix nothing else asked for a refresh: the map
 * named the dead master for ever, the await's GET went on to its connection
 * (re-queued there each command timeout), the await never subscribed on the
 * promoted replica and slept with the latch open. Here the master is killed
 * before the client is made (the same path: its first connection is
 * refused), the replica takes the slot by CLUSTER FAILOVER TAKEOVER at once,
 * and the latch is opened there (DEL and SPUBLISH 0, as a count-down to 0).
 * Fails before the fix ('the await did not open ...'), after: about a second. */
typedef struct await_done {
  atomic_int done;
  int status;
  int64_t at;
} await_done_t;
static void on_await(rlock_latch_t *l, int status, int64_t value, void *arg) {
  (void)l, (void)value;
  await_done_t *d = arg;
  d->status = status;
  d->at = th_now_ms();
  atomic_store(&d->done, 1);
}
static int await_done(void *arg) { return atomic_load(&((await_done_t *)arg)->done); }

TEST(master_dead_before_connected) {
  th_server_t *m = NULL, *rep = NULL;
  for (int s = 0; s < 16384 && !m; s += 256) { /* a live master with a live replica */
    th_server_t *o = th_cluster_owner(cl, s);
    if (o && (rep = th_cluster_replica_of(cl, o))) m = o;
  }
  CHECK_MSG(m != NULL, "no master with a replica left");
  th_server_t *other = other_master(m);
  char name[64], warm[64], url[64], chan[128];
  name_on(m, "never-ready", name, sizeof name);
  name_on(other, "never-ready-warm", warm, sizeof warm);
  int slot = th_cluster_keyslot(cl, name);
  snprintf(url, sizeof url, "redis+cluster://127.0.0.1:%d", other->port); /* a live seed only */
  snprintf(chan, sizeof chan, "redisson_countdownlatch__channel__{%s}", name);
  /* the latch closed (count 1), on the replica too */
  th_reply_free(th_cmd(m, "SET", name, "1", NULL));
  replica_has_t rh = {rep, name};
  CHECK(th_wait_until(replica_has_key, &rh, 20000));
  th_server_kill(m);
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = url;
  o.reconnect_max_ms = 500;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  /* an await on the seed's own slots: answered on the connection that asked
   * CLUSTER SLOTS, or on a node's once the map is known: either way after
   * the map's answer (one connection answers in order), so the map, naming
   * the dead master, is known before the await below is sent */
  rlock_latch_t *lw = NULL, *l = NULL;
  CHECK_OK(rlock_latch_new(c, warm, strlen(warm), &lw));
  CHECK_OK(rlock_latch_await(lw, 5000, NULL));
  CHECK_OK(rlock_latch_new(c, name, strlen(name), &l));
  static await_done_t d;
  atomic_store(&d.done, 0);
  CHECK_OK(rlock_latch_await_async(l, 20000, NULL, on_await, &d));
  redisReply *r = th_cmd(rep, "CLUSTER", "FAILOVER", "TAKEOVER", NULL);
  CHECK(r->type == REDIS_REPLY_STATUS);
  th_reply_free(r);
  owner_is_t ow = {slot, rep};
  CHECK_MSG(th_wait_until(owner_is, &ow, 20000), "the replica did not take the slot");
  int64_t promoted_at = th_now_ms();
  CHECK(!await_done(&d)); /* its count is 1 */
  /* the count-down to 0, on the promoted replica */
  th_reply_free(th_cmd(rep, "DEL", name, NULL));
  th_reply_free(th_cmd(rep, "SPUBLISH", chan, "0", NULL));
  int opened = th_wait_until(await_done, &d, 8000);
  printf("# await %s %lld ms after the promotion\n", opened ? "opened" : "still asleep",
         (long long)(th_now_ms() - promoted_at));
  CHECK_MSG(opened,
            "the await did not open within 8 s of the promotion (its client's slot map still names the "
            "dead master: no refresh)");
  CHECK_OK(d.status);
  rlock_latch_free(lw);
  rlock_latch_free(l);
  rlock_client_free(c);
}

/* TEST_ONLY=name runs that test alone (the cluster is started either way). */
#define RUN_SOME(name)                              \
  do {                                              \
    const char *only_ = getenv("TEST_ONLY");        \
    if (!only_ || !strcmp(only_, #name)) RUN(name); \
  } while (0)

int main(int argc, char **argv) {
  th_init(argc, argv, 900);
  cl = th_cluster_start(3, 1, 2000);
  RUN_SOME(url_forms);
  RUN_SOME(first_seed_hangs);
  RUN_SOME(hash_tags);
  RUN_SOME(every_slot);
  RUN_SOME(two_processes_two_seeds);
  RUN_SOME(slot_migrated_live);
  RUN_SOME(slot_moved_under_waiter);
  RUN_SOME(fresh_node_gets_wait);
  RUN_SOME(moved_from_replica_seed_gets_wait);
  RUN_SOME(simple_lock_on_cluster);
  RUN_SOME(free_during_refresh);
  RUN_SOME(slot_churn);
  RUN_SOME(redlock_on_cluster_url);
  RUN_SOME(foreign_unlock_spublish);
  RUN_SOME(tryagain_longer_than_timeout);
  RUN_SOME(close_during_tryagain);
  RUN_SOME(one_shard_failing);
  RUN_SOME(renewal_batch_in_half_migrated_slot);
  RUN_SOME(multilock_order_across_slot_move);
  RUN_SOME(failover_under_an_idle_waiter);
  RUN_SOME(replica_promoted_by_cluster_failover);
  RUN_SOME(leave_after_failover_learnt_by_moved); /* after the tests that fail node[1], node[2] over */
  RUN_SOME(master_killed);                        /* the cluster has one master fewer after it */
  RUN_SOME(master_dead_before_connected);         /* last: kills another master (its replica takes over) */
  th_cluster_stop(cl);
  return th_done();
}
