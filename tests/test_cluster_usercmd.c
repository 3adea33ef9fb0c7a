/* test_cluster_usercmd.c -- the user's own commands (rlock_client_command,
 * rlock_client_transaction) on a Redis Cluster (redis+cluster://): a command
 * whose first key is argv[1] runs on the master of that key's slot (checked
 * with a raw command on that node), a MOVED after a slot move and an ASK
 * during one are followed, a transaction runs on its keys' slot, keyless
 * commands run on the first seed, EVAL/EVALSHA with keys run on their first
 * key's master (malformed numkeys: the server's answer), SINTERCARD on
 * its argv[2] key's (not argv[1], a count), a transaction of BITOP/OBJECT/XGROUP
 * on their argv[2] key's, a multi-key command across slots gets the
 * server's CROSSSLOT, a timed-out blocking command on a shard's user
 * connection leaves no later command stuck behind it, and freeing the
 * client ends one blocked forever there.
 * Usage: test_cluster_usercmd [test name] (all tests without one). */
#include "harness_cluster.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static th_cluster_t *cl;

static rlock_reply_t *ucmd(rlock_client_t *c, int argc, const char *const *argv) {
  rlock_reply_t *r = NULL;
  CHECK_OK(rlock_client_command(c, argc, argv, NULL, &r));
  CHECK(r != NULL);
  return r;
}

/* A reply that is the string want (not an error such as MOVED). */
static void expect_str(rlock_reply_t *r, const char *want) {
  CHECK_MSG(r->type == RLOCK_REPLY_STRING && !strcmp(r->str, want), "reply type %d: %s (want %s)", (int)r->type,
            r->str ? r->str : "(none)", want);
  rlock_reply_free(r);
}

static void expect_ok(rlock_reply_t *r) {
  CHECK_MSG(r->type == RLOCK_REPLY_STATUS && !strcmp(r->str, "OK"), "reply type %d: %s", (int)r->type,
            r->str ? r->str : "(none)");
  rlock_reply_free(r);
}

/* A key "<prefix><n>" whose slot master is m (written into buf). */
static void key_on(th_server_t *m, const char *prefix, char *buf, size_t n) {
  for (int i = 0; i < 10000; i++) {
    snprintf(buf, n, "%s%d", prefix, i);
    if (th_cluster_owner(cl, th_cluster_keyslot(cl, buf)) == m) return;
  }
  CHECK_MSG(0, "no key %s* on port %d", prefix, m->port);
}

/* How many times node s answered the error `code` (INFO errorstats). */
static long long errorstat(th_server_t *s, const char *code) {
  char *info = th_cmd_str(s, "INFO", "errorstats", NULL), want[64];
  snprintf(want, sizeof want, "errorstat_%s:count=", code);
  const char *p = info ? strstr(info, want) : NULL;
  long long n = p ? atoll(p + strlen(want)) : 0;
  free(info);
  return n;
}

/* SET and GET on a key of every master: each lands on its slot's master. */
TEST(every_master) {
  rlock_client_t *c = th_client(cl->url, 0);
  for (int i = 0; i < cl->masters; i++) {
    char key[64], val[32];
    key_on(cl->node[i], "ucmd:every:", key, sizeof key);
    snprintf(val, sizeof val, "v%d", i);
    const char *set[] = {"SET", key, val}, *get[] = {"GET", key};
    expect_ok(ucmd(c, 3, set));
    char *raw = th_cmd_str(cl->node[i], "GET", key, NULL);
    CHECK_MSG(raw && !strcmp(raw, val), "node %d holds %s", cl->node[i]->port, raw ? raw : "(nil)");
    free(raw);
    expect_str(ucmd(c, 2, get), val);
  }
  /* The slot map is known now: each command goes straight to its master (a
   * command sent to the first seed would come back MOVED and be followed,
   * which the replies above cannot tell apart). */
  long long moved = 0, after = 0;
  for (int i = 0; i < cl->masters; i++) moved += errorstat(cl->node[i], "MOVED");
  for (int i = 0; i < cl->masters; i++) {
    char key[64];
    key_on(cl->node[i], "ucmd:every:", key, sizeof key);
    const char *get[] = {"GET", key};
    rlock_reply_free(ucmd(c, 2, get));
  }
  for (int i = 0; i < cl->masters; i++) after += errorstat(cl->node[i], "MOVED");
  CHECK_EQ(after, moved);
  rlock_client_free(c);
}

typedef struct move {
  rlock_client_t *c;
  th_server_t *from, *to;
  const char *fresh; /* a key of the slot that does not exist yet */
} move_t;

/* Slot marked MIGRATING/IMPORTING, keys not moved yet: a SET of a key the
 * source does not hold is answered ASK; the client follows it to the target. */
static void during_move(void *arg, int phase) {
  move_t *m = arg;
  if (phase != 0) return;
  const char *set[] = {"SET", m->fresh, "asked"};
  long long asks = errorstat(m->from, "ASK");
  expect_ok(ucmd(m->c, 3, set));
  CHECK_EQ(errorstat(m->from, "ASK"), asks + 1); /* the source answered ASK, once */
  th_reply_free(th_cmd(m->to, "ASKING", NULL));  /* the slot is only importing there */
  char *raw = th_cmd_str(m->to, "GET", m->fresh, NULL);
  CHECK_MSG(raw && !strcmp(raw, "asked"), "the importing node holds %s", raw ? raw : "(nil)");
  free(raw);
}

/* A slot moves to another master: ASK followed during the move, MOVED after
 * it. A transaction that meets the MOVED is not redirected part by part (its
 * SET would run outside MULTI): EXECABORT comes back, nothing ran, and the
 * same transaction sent again runs on the new owner. */
TEST(moved_and_ask) {
  rlock_client_t *c = th_client(cl->url, 0), *tx = th_client(cl->url, 0);
  const char *key = "{ucmd:mv}old", *fresh = "{ucmd:mv}fresh";
  int slot = th_cluster_keyslot(cl, key);
  th_server_t *from = th_cluster_owner(cl, slot), *to = cl->node[from == cl->node[1] ? 2 : 1];
  const char *set[] = {"SET", key, "before"}, *get[] = {"GET", key}, *getf[] = {"GET", fresh};
  expect_ok(ucmd(c, 3, set));             /* the client knows the slot's old owner */
  expect_str(ucmd(tx, 2, get), "before"); /* so does tx */
  move_t m = {c, from, to, fresh};
  th_cluster_move_slot(cl, slot, to, during_move, &m);
  CHECK(th_cluster_owner(cl, slot) == to);
  long long moved = errorstat(from, "MOVED");
  expect_str(ucmd(c, 2, get), "before"); /* MOVED from the old owner, followed */
  CHECK_EQ(errorstat(from, "MOVED"), moved + 1);
  const char *txset[] = {"SET", key, "tx"};
  rlock_command_t cmds[] = {{3, txset, NULL}};
  rlock_reply_t *r = NULL;
  CHECK_OK(rlock_client_transaction(tx, 1, cmds, &r));
  CHECK_MSG(r->type == RLOCK_REPLY_ERROR && !strncmp(r->str, "EXECABORT", 9), "stale transaction: type %d %s",
            (int)r->type, r->str ? r->str : "");
  rlock_reply_free(r);
  expect_str(ucmd(c, 2, get), "before");               /* its SET did not run */
  CHECK_OK(rlock_client_transaction(tx, 1, cmds, &r)); /* the map learnt the MOVED */
  CHECK_MSG(r->type == RLOCK_REPLY_ARRAY && r->elements == 1, "transaction again: type %d %s", (int)r->type,
            r->str ? r->str : "");
  rlock_reply_free(r);
  expect_str(ucmd(c, 2, get), "tx");
  rlock_client_free(tx);
  expect_str(ucmd(c, 2, getf), "asked");
  char *raw = th_cmd_str(to, "GET", key, NULL);
  CHECK_MSG(raw && !strcmp(raw, "tx"), "the new owner holds %s", raw ? raw : "(nil)");
  free(raw);
  rlock_client_free(c);
}

/* A transaction runs as one unit on the master of its first keyed command's slot. */
TEST(transaction_on_slot) {
  rlock_client_t *c = th_client(cl->url, 0);
  char key[64];
  key_on(cl->node[cl->masters - 1], "ucmd:tx:", key, sizeof key);
  const char *get[] = {"GET", key};
  rlock_reply_t *r = ucmd(c, 2, get); /* the client learns the slot's owner */
  rlock_reply_free(r);
  const char *set[] = {"SET", key, "1"}, *incr[] = {"INCR", key};
  rlock_command_t cmds[] = {{3, set, NULL}, {2, incr, NULL}};
  CHECK_OK(rlock_client_transaction(c, 2, cmds, &r));
  CHECK_MSG(r->type == RLOCK_REPLY_ARRAY && r->elements == 2, "EXEC reply type %d: %s", (int)r->type,
            r->str ? r->str : "");
  CHECK_EQ(r->element[1]->type, RLOCK_REPLY_INTEGER);
  CHECK_EQ(r->element[1]->integer, 2);
  rlock_reply_free(r);
  char *raw = th_cmd_str(cl->node[cl->masters - 1], "GET", key, NULL);
  CHECK_MSG(raw && !strcmp(raw, "2"), "the slot's master holds %s", raw ? raw : "(nil)");
  free(raw);
  rlock_client_free(c);
}

/* Keyless commands run on the first seed; keys across slots: CROSSSLOT. */
TEST(keyless_and_crossslot) {
  rlock_client_t *c = th_client(cl->url, 0);
  const char *ping[] = {"PING"};
  rlock_reply_t *r = ucmd(c, 1, ping);
  CHECK_MSG(r->type == RLOCK_REPLY_STATUS && !strcmp(r->str, "PONG"), "PING: %s", r->str ? r->str : "");
  rlock_reply_free(r);
  char a[64], b[64];
  key_on(cl->node[0], "ucmd:x:", a, sizeof a);
  key_on(cl->node[1], "ucmd:x:", b, sizeof b);
  const char *mget[] = {"MGET", a, b};
  r = ucmd(c, 3, mget);
  CHECK_MSG(r->type == RLOCK_REPLY_ERROR && !strncmp(r->str, "CROSSSLOT", 9), "MGET across slots: %s",
            r->str ? r->str : "(not an error)");
  rlock_reply_free(r);
  rlock_client_free(c);
}

static long long moved_total(void) {
  long long n = 0;
  for (int i = 0; i < cl->masters; i++) n += errorstat(cl->node[i], "MOVED");
  return n;
}

/* EVAL / EVALSHA with keys run on the master of their first key (argv[3]),
 * with no MOVED once the map is known; numkeys 0 or malformed (negative,
 * huge, not a number, no key after it) gets the server's own answer. */
TEST(scripts_on_slot) {
  rlock_client_t *c = th_client(cl->url, 0);
  const char *script = "redis.call('SET', KEYS[1], ARGV[1]) return redis.call('GET', KEYS[1])";
  const char *load[] = {"SCRIPT", "LOAD", script};
  char keys[8][64];
  for (int i = 0; i < cl->masters; i++) {
    key_on(cl->node[i], "ucmd:eval:", keys[i], sizeof keys[i]);
    const char *get[] = {"GET", keys[i]};
    rlock_reply_free(ucmd(c, 2, get)); /* the client learns the slots */
    th_reply_free(th_cmd(cl->node[i], "SCRIPT", "LOAD", script, NULL));
  }
  rlock_reply_t *r = ucmd(c, 3, load);
  CHECK_EQ(r->type, RLOCK_REPLY_STRING);
  char sha[64];
  snprintf(sha, sizeof sha, "%s", r->str ? r->str : "");
  rlock_reply_free(r);
  long long moved = moved_total();
  for (int i = 0; i < cl->masters; i++) {
    const char *eval[] = {"EVAL", script, "1", keys[i], "e"}, *evalsha[] = {"evalsha", sha, "1", keys[i], "s"};
    expect_str(ucmd(c, 5, eval), "e");
    expect_str(ucmd(c, 5, evalsha), "s");
    char *raw = th_cmd_str(cl->node[i], "GET", keys[i], NULL);
    CHECK_MSG(raw && !strcmp(raw, "s"), "node %d holds %s", cl->node[i]->port, raw ? raw : "(nil)");
    free(raw);
  }
  CHECK_EQ(moved_total(), moved);
  const char *bad[][5] = {
      {"EVAL", "return 1", "0", NULL},        {"EVAL", "return 1", "-1", "x", NULL},
      {"EVAL", "return 1", "abc", "x", NULL}, {"EVAL", "return 1", "99999999999999999999", "x", NULL},
      {"EVAL", "return 1", "1", NULL},        {"EVAL", "return 1", "2", "{t}a", NULL},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int n = 0;
    while (n < 5 && bad[i][n]) n++;
    r = NULL;
    CHECK_OK(rlock_client_command(c, n, bad[i], NULL, &r));
    CHECK(r != NULL);
    rlock_reply_free(r);
  }
  rlock_client_free(c);
}

/* Commands whose argv[1] is numkeys (SINTERCARD 1 key): the key is argv[2],
 * not "1". Hashed as a key, "1" sent the command to that slot's master: a
 * MOVED on every call, and a transaction starting with it pinned to the
 * wrong master: EXECABORT every time, however often sent again. */
TEST(numkeys_first) {
  rlock_client_t *c = th_client(cl->url, 0);
  th_server_t *wrong = th_cluster_owner(cl, th_cluster_keyslot(cl, "1"));
  char key[64];
  key_on(cl->node[wrong == cl->node[0] ? 1 : 0], "ucmd:card:", key, sizeof key);
  const char *sadd[] = {"SADD", key, "a", "b"}, *card[] = {"SINTERCARD", "1", key};
  rlock_reply_free(ucmd(c, 4, sadd)); /* the client learns the slot */
  long long moved = moved_total();
  rlock_reply_t *r = ucmd(c, 3, card);
  CHECK_MSG(r->type == RLOCK_REPLY_INTEGER && r->integer == 2, "SINTERCARD: type %d %s", (int)r->type,
            r->str ? r->str : "");
  rlock_reply_free(r);
  CHECK_EQ(moved_total(), moved); /* straight to the key's master */
  rlock_command_t cmds[] = {{3, card, NULL}, {4, sadd, NULL}};
  for (int i = 0; i < 2; i++) { /* the second time with whatever the first taught the map */
    r = NULL;
    CHECK_OK(rlock_client_transaction(c, 2, cmds, &r));
    CHECK_MSG(r->type == RLOCK_REPLY_ARRAY && r->elements == 2, "transaction %d: type %d %s", i, (int)r->type,
              r->str ? r->str : "");
    rlock_reply_free(r);
  }
  /* The other numkeys-first layouts, on a master that is neither slot "1"'s
   * nor the first seed (where a keyless transaction would go). */
  th_server_t *m = NULL;
  for (int i = 1; i < cl->masters && !m; i++)
    if (cl->node[i] != wrong) m = cl->node[i];
  char zk[64], lk[64];
  key_on(m, "ucmd:zcard:", zk, sizeof zk);
  key_on(m, "ucmd:lmpop:", lk, sizeof lk);
  const char *zadd[] = {"ZADD", zk, "1", "a"}, *rpush[] = {"RPUSH", lk, "a", "b", "c"};
  rlock_reply_free(ucmd(c, 4, zadd));
  rlock_reply_free(ucmd(c, 5, rpush));
  const char *zcard[] = {"ZINTERCARD", "1", zk}, *zinter[] = {"ZINTER", "1", zk}, *lmpop[] = {"LMPOP", "1", lk, "LEFT"},
             *blmpop[] = {"BLMPOP", "0.01", "1", lk, "LEFT"};
  const char *echo[] = {"ECHO", "x"}; /* keyless: the numkeys-first command decides the master */
  rlock_command_t each[][2] = {{{3, zcard, NULL}, {2, echo, NULL}},
                               {{3, zinter, NULL}, {2, echo, NULL}},
                               {{4, lmpop, NULL}, {2, echo, NULL}},
                               {{5, blmpop, NULL}, {2, echo, NULL}}};
  for (int i = 0; i < 4; i++) {
    r = NULL;
    CHECK_OK(rlock_client_transaction(c, 2, each[i], &r));
    CHECK_MSG(r->type == RLOCK_REPLY_ARRAY && r->elements == 2, "%s transaction: type %d %s", each[i][0].argv[0],
              (int)r->type, r->str ? r->str : "");
    rlock_reply_free(r);
  }
  rlock_client_free(c);
}

/* Commands whose key is argv[2] (BITOP op dest, OBJECT ENCODING key, XGROUP
 * CREATE key): a transaction of them alone on a master that is not the first
 * seed. rlock.h promises that after EXECABORT "the same call sent again goes
 * to the new owner": routed to the first seed as keyless, it got EXECABORT
 * every time. */
TEST(key_after_subcommand) {
  rlock_client_t *c = th_client(cl->url, 0);
  char tag[64], key[80], dest[80], stream[80];
  key_on(cl->node[1], "ucmd:sub:", tag, sizeof tag);
  snprintf(key, sizeof key, "{%s}", tag);
  snprintf(dest, sizeof dest, "{%s}:d", tag);
  snprintf(stream, sizeof stream, "{%s}:s", tag);
  const char *set[] = {"SET", key, "a"};
  expect_ok(ucmd(c, 3, set)); /* the client learns the slot */
  const char *bitop[] = {"BITOP", "OR", dest, key}, *object[] = {"OBJECT", "ENCODING", key},
             *xgroup[] = {"XGROUP", "CREATE", stream, "g", "$", "MKSTREAM"};
  rlock_command_t cmds[] = {{4, bitop, NULL}, {3, object, NULL}, {6, xgroup, NULL}};
  for (int i = 0; i < 2; i++) { /* the second time with whatever the first taught the map */
    rlock_reply_t *r = NULL;
    CHECK_OK(rlock_client_transaction(c, i ? 2 : 3, cmds, &r));
    CHECK_MSG(r->type == RLOCK_REPLY_ARRAY && r->elements == (size_t)(i ? 2 : 3), "transaction %d: type %d %s", i,
              (int)r->type, r->str ? r->str : "");
    rlock_reply_free(r);
  }
  rlock_client_free(c);
}

/* A BLPOP 0 on a shard's user connection outlives its timeout: that
 * connection is reset, and the next command on the slot answers. */
TEST(unstick_shard_connection) {
  rlock_client_t *c = th_client(cl->url, 0);
  char key[64];
  key_on(cl->node[1], "ucmd:blk:", key, sizeof key);
  const char *get[] = {"GET", key}, *blpop[] = {"BLPOP", key, "0"};
  rlock_reply_free(ucmd(c, 2, get)); /* the client learns the slot's owner */
  rlock_reply_t *r = NULL;
  CHECK_RC(rlock_client_command_timeout(c, 300, 3, blpop, NULL, &r), RLOCK_ETIMEDOUT);
  const char *set[] = {"SET", key, "after"};
  expect_ok(ucmd(c, 3, set));
  expect_str(ucmd(c, 2, get), "after");
  rlock_client_free(c);
}

typedef struct popper {
  rlock_client_t *c;
  const char *key;
  int rc;
  rlock_reply_t *reply;
} popper_t;

static void *blpop_forever(void *arg) {
  popper_t *p = arg;
  const char *blpop[] = {"BLPOP", p->key, "0"};
  p->rc = rlock_client_command_timeout(p->c, RLOCK_WAIT_FOREVER, 3, blpop, NULL, &p->reply);
  return NULL;
}

typedef struct blocked {
  th_server_t *s;
  int want;
} blocked_t;

static int blocked_is(void *arg) {
  blocked_t *b = arg;
  return th_client_blocked(b->s, "ucmd-close") == b->want;
}

/* Freeing the client ends a command blocked forever on a shard's user
 * connection (RLOCK_ECLOSED), and the server lets go of it. */
TEST(free_ends_a_shard_command) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = cl->url;
  o.client_name = "ucmd-close";
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  popper_t p = {c, NULL, 1, NULL};
  char key[64];
  key_on(cl->node[2], "ucmd:close:", key, sizeof key);
  p.key = key;
  pthread_t th;
  CHECK_EQ(pthread_create(&th, NULL, blpop_forever, &p), 0);
  blocked_t b = {cl->node[2], 1};
  CHECK_MSG(th_wait_until(blocked_is, &b, 10000), "BLPOP never blocked on the slot's master");
  rlock_client_free(c);
  pthread_join(th, NULL);
  CHECK_RC(p.rc, RLOCK_ECLOSED);
  CHECK(p.reply == NULL);
  b.want = 0;
  CHECK_MSG(th_wait_until(blocked_is, &b, 5000), "the BLPOP still blocks after the client was freed");
}

static const char *only;
#define RUN_IF(name) \
  if (!only || !strcmp(only, #name)) RUN(name)

int main(int argc, char **argv) {
  th_init(argc, argv, 600);
  only = argc > 1 ? argv[1] : NULL;
  cl = th_cluster_start(3, 0, 2000);
  RUN_IF(every_master);
  RUN_IF(transaction_on_slot);
  RUN_IF(keyless_and_crossslot);
  RUN_IF(scripts_on_slot);
  RUN_IF(numkeys_first);
  RUN_IF(key_after_subcommand);
  RUN_IF(unstick_shard_connection);
  RUN_IF(free_ends_a_shard_command);
  RUN_IF(moved_and_ask);
  th_cluster_stop(cl);
  return th_done();
}
