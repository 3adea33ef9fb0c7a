/* test_scripts.c -- the server-side Lua scripts (lua/ directory) on their own:
 * each file is read at test time from the source tree and run through raw
 * EVAL with hand-made KEYS/ARGV against a real redis-server, checking the
 * Redisson data layout, the replies, the publishes and the request latches. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"

static th_server_t *srv;

static char *read_script(const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/lua/%s.lua", RLOCK_SOURCE_DIR, name);
  FILE *f = fopen(path, "rb");
  CHECK_MSG(f != NULL, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  CHECK(buf && fread(buf, 1, (size_t)n, f) == (size_t)n);
  buf[n] = 0;
  fclose(f);
  return buf;
}

/* EVAL <script file> numkeys args (NULL-terminated) on server s; the reply
 * as it comes (errors too). */
static redisReply *evalv(th_server_t *s, const char *script, int numkeys, va_list ap) {
  char *body = read_script(script);
  char nk[16];
  snprintf(nk, sizeof nk, "%d", numkeys);
  const char *argv[64] = {"EVAL", body, nk};
  int n = 3;
  for (const char *a; (a = va_arg(ap, const char *)) != NULL && n < 64;) argv[n++] = a;
  redisReply *r = th_cmdv(s, n, argv, NULL);
  free(body);
  return r;
}

/* The same on the test's server; an error reply fails the test. */
static redisReply *eval(const char *script, int numkeys, ...) {
  va_list ap;
  va_start(ap, numkeys);
  redisReply *r = evalv(srv, script, numkeys, ap);
  va_end(ap);
  CHECK_MSG(r->type != REDIS_REPLY_ERROR, "EVAL %s: %s", script, r->str);
  return r;
}

/* The same on server s, the reply as it comes (errors too). */
static redisReply *eval_on(th_server_t *s, const char *script, int numkeys, ...) {
  va_list ap;
  va_start(ap, numkeys);
  redisReply *r = evalv(s, script, numkeys, ap);
  va_end(ap);
  return r;
}

static void want_nil(redisReply *r) {
  CHECK_MSG(r->type == REDIS_REPLY_NIL, "want nil, got type %d (%lld)", r->type, r->integer);
  th_reply_free(r);
}

static long long want_int(redisReply *r) {
  CHECK_MSG(r->type == REDIS_REPLY_INTEGER, "want an integer, got type %d", r->type);
  long long v = r->integer;
  th_reply_free(r);
  return v;
}

/* Value of a string/hash field as a number; -1000 when absent. */
static long long get_num(const char *cmd, const char *key, const char *field) {
  redisReply *r = field ? th_cmd(srv, cmd, key, field, NULL) : th_cmd(srv, cmd, key, NULL);
  long long v = r->type == REDIS_REPLY_NIL ? -1000 : strtoll(r->str, NULL, 10);
  th_reply_free(r);
  return v;
}

static void flush(void) { th_reply_free(th_cmd(srv, "FLUSHALL", NULL)); }

#define OWNER_A "3f2b8c1e-5d9f-4a4e-9c1b-0123456789ab:101"
#define OWNER_B "3f2b8c1e-5d9f-4a4e-9c1b-0123456789ab:202"
#define CHAN "redisson_lock__channel:{L}"

TEST(acquire) {
  flush();
  const char *latch = "rlock_acquire_latch:{L}:r1";
  want_nil(eval("reentrant_acquire", 2, "L", latch, "30000", OWNER_A, "60000", NULL));
  CHECK_EQ(get_num("HGET", "L", OWNER_A), 1);
  CHECK_EQ(th_cmd_int(srv, "HLEN", "L", NULL), 1);
  long long pttl = th_cmd_int(srv, "PTTL", "L", NULL);
  CHECK(pttl > 25000 && pttl <= 30000);
  CHECK_EQ(get_num("GET", latch, NULL), 1);
  pttl = th_cmd_int(srv, "PTTL", latch, NULL);
  CHECK(pttl > 50000 && pttl <= 60000);

  /* A re-send of the same request: acquired, counted once. */
  want_nil(eval("reentrant_acquire", 2, "L", latch, "30000", OWNER_A, "60000", NULL));
  CHECK_EQ(get_num("HGET", "L", OWNER_A), 1);

  /* Reentrant acquire (new request id): count 2, lease reset. */
  want_nil(eval("reentrant_acquire", 2, "L", "rlock_acquire_latch:{L}:r2", "50000", OWNER_A, "60000", NULL));
  CHECK_EQ(get_num("HGET", "L", OWNER_A), 2);
  CHECK(th_cmd_int(srv, "PTTL", "L", NULL) > 40000);

  /* Another owner: gets the PTTL, changes nothing, leaves no latch. */
  long long ttl = want_int(
      eval("reentrant_acquire", 2, "L", "rlock_acquire_latch:{L}:r3", "1000", OWNER_B, "60000", NULL));
  CHECK(ttl > 40000 && ttl <= 50000);
  CHECK_EQ(th_cmd_int(srv, "HEXISTS", "L", OWNER_B, NULL), 0);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "rlock_acquire_latch:{L}:r3", NULL), 0);

  /* A lock without TTL held by someone else: -1. */
  th_reply_free(th_cmd(srv, "HSET", "M", OWNER_B, "1", NULL));
  CHECK_EQ(want_int(eval("reentrant_acquire", 2, "M", "rlock_acquire_latch:{M}:r4", "1000", OWNER_A, "60000", NULL)),
           -1);
}

TEST(acquire_after_undo_tombstone) {
  flush();
  const char *latch = "rlock_acquire_latch:{L}:t1";
  /* The undo got there first (request not applied): plants a tombstone. */
  CHECK_EQ(want_int(eval("reentrant_acquire_undo", 3, "L", CHAN, latch, "0", OWNER_A, "publish", "60000", NULL)), 0);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", latch, NULL), 1);
  /* The late acquire never applies. */
  CHECK_EQ(want_int(eval("reentrant_acquire", 2, "L", latch, "30000", OWNER_A, "60000", NULL)), -3);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "L", NULL), 0);
  /* A re-send of the undo. */
  CHECK_EQ(want_int(eval("reentrant_acquire_undo", 3, "L", CHAN, latch, "0", OWNER_A, "publish", "60000", NULL)), 2);
}

TEST(acquire_undo_applied) {
  flush();
  th_reply_free(th_cmd(srv, "CONFIG", "RESETSTAT", NULL));
  const char *l1 = "rlock_acquire_latch:{L}:u1", *l2 = "rlock_acquire_latch:{L}:u2";
  want_nil(eval("reentrant_acquire", 2, "L", l1, "30000", OWNER_A, "60000", NULL));
  want_nil(eval("reentrant_acquire", 2, "L", l2, "30000", OWNER_A, "60000", NULL));
  CHECK_EQ(get_num("HGET", "L", OWNER_A), 2);
  /* Undo one of two holds: count 1, no publish. */
  CHECK_EQ(want_int(eval("reentrant_acquire_undo", 3, "L", CHAN, l2, "0", OWNER_A, "publish", "60000", NULL)), 1);
  CHECK_EQ(get_num("HGET", "L", OWNER_A), 1);
  CHECK_EQ(th_cmdstat(srv, "publish"), 0);
  /* A re-send changes nothing. */
  CHECK_EQ(want_int(eval("reentrant_acquire_undo", 3, "L", CHAN, l2, "0", OWNER_A, "publish", "60000", NULL)), 2);
  CHECK_EQ(get_num("HGET", "L", OWNER_A), 1);
  /* Undo the last hold: key deleted, waiters woken once. */
  CHECK_EQ(want_int(eval("reentrant_acquire_undo", 3, "L", CHAN, l1, "0", OWNER_A, "publish", "60000", NULL)), 1);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "L", NULL), 0);
  CHECK_EQ(th_cmdstat(srv, "publish"), 1);
  /* Applied, but the lease already ran out: still 1, nothing else touched. */
  const char *l3 = "rlock_acquire_latch:{L}:u3";
  want_nil(eval("reentrant_acquire", 2, "L", l3, "30000", OWNER_A, "60000", NULL));
  th_reply_free(th_cmd(srv, "DEL", "L", NULL));
  th_reply_free(th_cmd(srv, "HSET", "L", OWNER_B, "1", NULL));
  CHECK_EQ(want_int(eval("reentrant_acquire_undo", 3, "L", CHAN, l3, "0", OWNER_A, "publish", "60000", NULL)), 1);
  CHECK_EQ(get_num("HGET", "L", OWNER_B), 1);
  CHECK_EQ(th_cmdstat(srv, "publish"), 1);
}

TEST(unlock) {
  flush();
  th_reply_free(th_cmd(srv, "CONFIG", "RESETSTAT", NULL));
  th_reply_free(th_cmd(srv, "HSET", "L", OWNER_A, "2", NULL));
  th_reply_free(th_cmd(srv, "PEXPIRE", "L", "5000", NULL));
  const char *u1 = "redisson_unlock_latch:{L}:q1", *u2 = "redisson_unlock_latch:{L}:q2";

  /* Not the owner: nil, lock untouched. */
  want_nil(eval("reentrant_unlock", 3, "L", CHAN, "redisson_unlock_latch:{L}:q0", "0", "30000", OWNER_B, "publish",
                "60000", NULL));
  CHECK_EQ(get_num("HGET", "L", OWNER_A), 2);

  /* 2 -> 1: still held, lease reset to ARGV[2], latch "0". */
  CHECK_EQ(want_int(eval("reentrant_unlock", 3, "L", CHAN, u1, "0", "30000", OWNER_A, "publish", "60000", NULL)), 0);
  CHECK_EQ(get_num("HGET", "L", OWNER_A), 1);
  CHECK(th_cmd_int(srv, "PTTL", "L", NULL) > 25000);
  CHECK_EQ(get_num("GET", u1, NULL), 0);
  long long lttl = th_cmd_int(srv, "PTTL", u1, NULL);
  CHECK(lttl > 50000 && lttl <= 60000);
  /* Re-send: same answer, no second release. */
  CHECK_EQ(want_int(eval("reentrant_unlock", 3, "L", CHAN, u1, "0", "30000", OWNER_A, "publish", "60000", NULL)), 0);
  CHECK_EQ(get_num("HGET", "L", OWNER_A), 1);
  CHECK_EQ(th_cmdstat(srv, "publish"), 0);

  /* Subscribe to the channel to see the release message. */
  redisContext *sub = th_raw_connect(srv);
  redisReply *r = redisCommand(sub, "SUBSCRIBE %s", CHAN);
  CHECK(r && r->type == REDIS_REPLY_ARRAY);
  th_reply_free(r);

  /* 1 -> 0: released, key deleted, "0" published once and received by a
   * subscriber (reply and latch "2": waiters exist). */
  CHECK_EQ(want_int(eval("reentrant_unlock", 3, "L", CHAN, u2, "0", "30000", OWNER_A, "publish", "60000", NULL)), 2);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "L", NULL), 0);
  CHECK_EQ(get_num("GET", u2, NULL), 2);
  CHECK_EQ(th_cmdstat(srv, "publish"), 1);
  void *m = NULL;
  CHECK(redisGetReply(sub, &m) == REDIS_OK);
  r = m;
  CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 3);
  CHECK_STREQ(r->element[0]->str, "message");
  CHECK_STREQ(r->element[1]->str, CHAN);
  CHECK_STREQ(r->element[2]->str, "0");
  th_reply_free(r);
  redisFree(sub);

  /* Re-send after the release: the first answer again, nothing published,
   * nothing deleted (someone else may hold the lock by now). */
  th_reply_free(th_cmd(srv, "HSET", "L", OWNER_B, "1", NULL));
  CHECK_EQ(want_int(eval("reentrant_unlock", 3, "L", CHAN, u2, "0", "30000", OWNER_A, "publish", "60000", NULL)), 2);
  CHECK_EQ(get_num("HGET", "L", OWNER_B), 1);
  CHECK_EQ(th_cmdstat(srv, "publish"), 1);

  /* The publish command is a parameter (SPUBLISH for sharded pub/sub). */
  CHECK_EQ(want_int(eval("reentrant_unlock", 3, "L", CHAN, "redisson_unlock_latch:{L}:q3", "0", "30000", OWNER_B,
                         "spublish", "60000", NULL)),
           1);
  CHECK_EQ(th_cmdstat(srv, "spublish"), 1);
  CHECK_EQ(th_cmdstat(srv, "publish"), 1);
}

/* A re-send of an applied try whose hold is gone (lease ran out) while another
 * owner holds the lock now: that owner's PTTL, not "acquired" (before, the
 * latch answered nil and two owners believed they held the lock). */
TEST(acquire_resend_after_loss) {
  flush();
  const char *latch = "rlock_acquire_latch:{L}:s1";
  want_nil(eval("reentrant_acquire", 2, "L", latch, "30000", OWNER_A, "60000", NULL));
  th_reply_free(th_cmd(srv, "DEL", "L", NULL)); /* A's lease ran out */
  want_nil(eval("reentrant_acquire", 2, "L", "rlock_acquire_latch:{L}:s2", "20000", OWNER_B, "60000", NULL));
  long long ttl = want_int(eval("reentrant_acquire", 2, "L", latch, "30000", OWNER_A, "60000", NULL));
  CHECK(ttl > 15000 && ttl <= 20000);
  CHECK_EQ(th_cmd_int(srv, "HLEN", "L", NULL), 1);
  CHECK_EQ(get_num("HGET", "L", OWNER_B), 1);
  /* Free again: the re-send is answered by its latch (applied once), and
   * takes nothing (the client's hold of that try is lost: its renewal says so). */
  th_reply_free(th_cmd(srv, "DEL", "L", NULL));
  want_nil(eval("reentrant_acquire", 2, "L", latch, "30000", OWNER_A, "60000", NULL));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "L", NULL), 0);
}

/* unlock(ARGV 6, 7): the count the client expects to be left, and how many
 * more the server may count (releases whose outcome the client never saw). */
static long long unlock_with(const char *latch, const char *want, const char *extra) {
  return want_int(
      eval("reentrant_unlock", 3, "L", CHAN, latch, "0", "30000", OWNER_A, "publish", "60000", want, extra, NULL));
}

TEST(unlock_expected_counts) {
  flush();
  th_reply_free(th_cmd(srv, "CONFIG", "RESETSTAT", NULL));
  th_reply_free(th_cmd(srv, "HSET", "L", OWNER_A, "3", NULL));
  /* 3 -> 2 as expected: still held. */
  CHECK_EQ(unlock_with("redisson_unlock_latch:{L}:c1", "2", "0"), 0);
  CHECK_EQ(get_num("HGET", "L", OWNER_A), 2);
  /* 2 -> 1, the client expects 0 and allows 1 more: the unseen release counts
   * now, so this one frees the lock. */
  CHECK_EQ(unlock_with("redisson_unlock_latch:{L}:c2", "0", "1"), 1);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "L", NULL), 0);
  CHECK_EQ(th_cmdstat(srv, "publish"), 1);
  /* 4 -> 3 while the client expects 1 (+1): more holds than it took: all of
   * the owner's holds dropped, the lock freed, waiters told, latch -1. */
  th_reply_free(th_cmd(srv, "HSET", "L", OWNER_A, "4", NULL));
  CHECK_EQ(unlock_with("redisson_unlock_latch:{L}:c3", "1", "1"), -1);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "L", NULL), 0);
  CHECK_EQ(th_cmdstat(srv, "publish"), 2);
  CHECK_EQ(get_num("GET", "redisson_unlock_latch:{L}:c3", NULL), -1);
  /* Fewer than expected while another owner holds too: only A's field goes,
   * nothing published. */
  th_reply_free(th_cmd(srv, "HSET", "L", OWNER_A, "1", OWNER_B, "1", NULL));
  CHECK_EQ(unlock_with("redisson_unlock_latch:{L}:c4", "1", "0"), -1);
  CHECK_EQ(th_cmd_int(srv, "HEXISTS", "L", OWNER_A, NULL), 0);
  CHECK_EQ(get_num("HGET", "L", OWNER_B), 1);
  CHECK_EQ(th_cmdstat(srv, "publish"), 2);
  /* A re-send of that release: its first answer, nothing else. */
  CHECK_EQ(unlock_with("redisson_unlock_latch:{L}:c4", "1", "0"), -1);
  /* 3 -> 2, expected 1 (+1): the unseen release counts: 1 left. */
  th_reply_free(th_cmd(srv, "HSET", "L", OWNER_A, "3", NULL));
  CHECK_EQ(unlock_with("redisson_unlock_latch:{L}:c5", "1", "1"), 0);
  CHECK_EQ(get_num("HGET", "L", OWNER_A), 1);
  /* A re-send after the owner took the lock again: the first answer, the new
   * hold untouched. */
  CHECK_EQ(unlock_with("redisson_unlock_latch:{L}:c2", "0", "1"), 1);
  CHECK_EQ(get_num("HGET", "L", OWNER_A), 1);
}

/* Bad arguments to the acquire and unlock scripts: an error reply, nothing
 * written (no hold, no latch, no count change). */
TEST(acquire_unlock_check_arguments_first) {
  flush();
  const char *latch = "rlock_acquire_latch:{L}:b1";
  const char *bad_acquire[][3] = {{"0", OWNER_A, "60000"},     {"030000", OWNER_A, "60000"},
                                  {"3e4", OWNER_A, "60000"},   {"1234567890123456", OWNER_A, "60000"},
                                  {"30000", OWNER_A, "0"},     {"30000", OWNER_A, "-5"},
                                  {"30000", OWNER_A, " 6000"}, {"30000", "", "60000"}};
  char *body = read_script("reentrant_acquire");
  for (size_t i = 0; i < sizeof bad_acquire / sizeof bad_acquire[0]; i++) {
    const char *argv[] = {"EVAL", body, "2", "L", latch, bad_acquire[i][0], bad_acquire[i][1], bad_acquire[i][2]};
    redisReply *r = th_cmdv(srv, 8, argv, NULL);
    CHECK_MSG(r->type == REDIS_REPLY_ERROR && strstr(r->str, "ERR rlock: "), "acquire case %zu: no rlock error reply",
              i);
    th_reply_free(r);
    CHECK_EQ(th_cmd_int(srv, "EXISTS", "L", latch, NULL), 0);
  }
  free(body);

  th_reply_free(th_cmd(srv, "HSET", "L", OWNER_A, "2", NULL));
  const char *ulatch = "redisson_unlock_latch:{L}:b2";
  const char *bad_unlock[][5] = {
      {"0", OWNER_A, "publish", "60000", "1"},      {"30000", OWNER_A, "publish", "0", "1"},
      {"30000", "", "publish", "60000", "1"},       {"30000", OWNER_A, "del", "60000", "1"},
      {"30000", OWNER_A, "publish", "60000", "x"},  {"30000", OWNER_A, "publish", "60000", "-2"},
      {"30000", OWNER_A, "publish", "60000", "0.5"}};
  body = read_script("reentrant_unlock");
  for (size_t i = 0; i < sizeof bad_unlock / sizeof bad_unlock[0]; i++) {
    const char *argv[] = {"EVAL",
                          body,
                          "3",
                          "L",
                          CHAN,
                          ulatch,
                          "0",
                          bad_unlock[i][0],
                          bad_unlock[i][1],
                          bad_unlock[i][2],
                          bad_unlock[i][3],
                          bad_unlock[i][4],
                          "0"};
    redisReply *r = th_cmdv(srv, 13, argv, NULL);
    CHECK_MSG(r->type == REDIS_REPLY_ERROR && strstr(r->str, "ERR rlock: "), "unlock case %zu: no rlock error reply",
              i);
    th_reply_free(r);
    CHECK_EQ(get_num("HGET", "L", OWNER_A), 2);
    CHECK_EQ(th_cmd_int(srv, "EXISTS", ulatch, NULL), 0);
  }
  free(body);
}

/* An unlock answered nil (the owner held nothing: its hold ran out) whose
 * answer was lost is re-sent; an earlier copy of it still on its way (a
 * connection given up) must not release the hold the owner takes after that
 * answer. Before, the nil path wrote no latch: the late copy released the new
 * hold (the lock freed under its owner: a second owner gets in). */
TEST(unlock_late_copy_after_not_held) {
  flush();
  const char *u = "redisson_unlock_latch:{L}:n1";
  want_nil(eval("reentrant_unlock", 3, "L", CHAN, u, "0", "30000", OWNER_A, "publish", "60000", "0", "0", NULL));
  /* the owner takes the lock again */
  want_nil(eval("reentrant_acquire", 2, "L", "rlock_acquire_latch:{L}:n2", "30000", OWNER_A, "60000", NULL));
  /* the late copy of the unlock: its first answer, the new hold untouched */
  want_nil(eval("reentrant_unlock", 3, "L", CHAN, u, "0", "30000", OWNER_A, "publish", "60000", "0", "0", NULL));
  CHECK_EQ(get_num("HGET", "L", OWNER_A), 1);
  CHECK(th_cmd_int(srv, "PTTL", "L", NULL) > 0);

  /* The simple lock (token = owner id, the same for every hold): the same. */
  const char *su = "redisson_unlock_latch:{S}:n3", *sch = "rlock_simple__channel:{S}";
  want_nil(eval("simple_unlock", 3, "S", sch, su, "0", OWNER_A, "publish", "60000", NULL));
  want_nil(eval("simple_acquire", 2, "S", "rlock_acquire_latch:{S}:n4", "30000", OWNER_A, "60000", NULL));
  want_nil(eval("simple_unlock", 3, "S", sch, su, "0", OWNER_A, "publish", "60000", NULL));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "S", NULL), 1);
}

/* The fast path's first copies (acquire: no ARGV[3]; unlock: mark '0') act
 * as the latched ones but leave no key behind on the common answers, and one
 * that finds its id's latch (planted by a later request of the id: the undo's
 * tombstone, an unlock's re-send) is late and changes nothing. */
TEST(unlatched_first_copies) {
  flush();
  th_reply_free(th_cmd(srv, "CONFIG", "RESETSTAT", NULL));
  const char *a1 = "rlock_acquire_latch:{L}:f1", *a2 = "rlock_acquire_latch:{L}:f2";
  want_nil(eval("reentrant_acquire", 2, "L", a1, "30000", OWNER_A, NULL));
  /* a free lock: Redisson's three calls (one EXISTS for the lock and the latch) */
  CHECK_EQ(th_cmdstat(srv, "exists"), 1);
  CHECK_EQ(th_cmdstat(srv, "pttl"), 0);
  CHECK_EQ(th_cmdstat(srv, "hincrby") + th_cmdstat(srv, "pexpire"), 2);
  want_nil(eval("reentrant_acquire", 2, "L", a2, "30000", OWNER_A, NULL));
  /* the owner's lock: still one EXISTS, the latch read from its count */
  CHECK_EQ(th_cmdstat(srv, "exists"), 2);
  CHECK_EQ(get_num("HGET", "L", OWNER_A), 2);
  CHECK_EQ(th_cmd_int(srv, "DBSIZE", NULL), 1); /* the lock only */
  /* another owner: the PTTL, nothing written */
  long long ttl = want_int(eval("reentrant_acquire", 2, "L", "rlock_acquire_latch:{L}:f3", "30000", OWNER_B, NULL));
  CHECK(ttl > 20000 && ttl <= 30000);
  /* unlock 2 -> 1, then the last: no latch, the lock freed, waiters told */
  CHECK_EQ(want_int(eval("reentrant_unlock", 3, "L", CHAN, "redisson_unlock_latch:{L}:f4", "0", "30000", OWNER_A,
                         "publish", "60000", "1", "0", "0", NULL)),
           0);
  CHECK_EQ(get_num("HGET", "L", OWNER_A), 1);
  CHECK_EQ(want_int(eval("reentrant_unlock", 3, "L", CHAN, "redisson_unlock_latch:{L}:f5", "0", "30000", OWNER_A,
                         "publish", "60000", "0", "0", "0", NULL)),
           1);
  CHECK_EQ(th_cmd_int(srv, "DBSIZE", NULL), 0);
  CHECK_EQ(th_cmdstat(srv, "publish"), 1);
  /* not held: nil, latched (a re-send could not tell it from a release) */
  want_nil(eval("reentrant_unlock", 3, "L", CHAN, "redisson_unlock_latch:{L}:f6", "0", "30000", OWNER_A, "publish",
                "60000", "0", "0", "0", NULL));
  CHECK_EQ(th_cmd_int(srv, "DBSIZE", NULL), 1);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "redisson_unlock_latch:{L}:f6", NULL), 1);

  /* a late acquire copy after its undo planted the tombstone: -3, no hold */
  const char *a7 = "rlock_acquire_latch:{L}:f7";
  CHECK_EQ(want_int(eval("reentrant_acquire_undo", 3, "L", CHAN, a7, "0", OWNER_A, "publish", "60000", "0", NULL)), 0);
  CHECK_EQ(want_int(eval("reentrant_acquire", 2, "L", a7, "30000", OWNER_A, NULL)), -3);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "L", NULL), 0);
  /* a late re-entry copy after its undo: the count stays */
  th_reply_free(th_cmd(srv, "HSET", "L", OWNER_A, "1", NULL));
  const char *a8 = "rlock_acquire_latch:{L}:f8";
  CHECK_EQ(want_int(eval("reentrant_acquire_undo", 3, "L", CHAN, a8, "0", OWNER_A, "publish", "60000", "1", NULL)), 0);
  CHECK_EQ(want_int(eval("reentrant_acquire", 2, "L", a8, "30000", OWNER_A, NULL)), -3);
  CHECK_EQ(get_num("HGET", "L", OWNER_A), 1);
  /* the undo after the copy applied (its answer lost): the count above keep goes */
  const char *a9 = "rlock_acquire_latch:{L}:f9";
  want_nil(eval("reentrant_acquire", 2, "L", a9, "30000", OWNER_A, NULL));
  CHECK_EQ(get_num("HGET", "L", OWNER_A), 2);
  CHECK_EQ(want_int(eval("reentrant_acquire_undo", 3, "L", CHAN, a9, "0", OWNER_A, "publish", "60000", "1", NULL)), 1);
  CHECK_EQ(get_num("HGET", "L", OWNER_A), 1);
  /* a late unlock copy after its re-send wrote the latch: nil, the hold stays */
  const char *u = "redisson_unlock_latch:{L}:f10";
  th_reply_free(th_cmd(srv, "SET", u, "0", "PX", "60000", NULL));
  want_nil(eval("reentrant_unlock", 3, "L", CHAN, u, "0", "30000", OWNER_A, "publish", "60000", "0", "0", "0", NULL));
  CHECK_EQ(get_num("HGET", "L", OWNER_A), 1);
  CHECK_EQ(th_cmdstat(srv, "publish"), 1);
}

/* An unlock re-sent with the re-send mark (ARGV[8] '1': its first copy wrote
 * no latch): the count tells whether that copy was applied. */
static long long unlock_resend(const char *latch, const char *want) {
  redisReply *r = eval("reentrant_unlock", 3, "L", CHAN, latch, "0", "30000", OWNER_A, "publish", "60000", want, "0",
                       "1", NULL);
  if (r->type == REDIS_REPLY_NIL) {
    th_reply_free(r);
    return -100;
  }
  return want_int(r);
}

TEST(unlock_resend_mark) {
  flush();
  th_reply_free(th_cmd(srv, "CONFIG", "RESETSTAT", NULL));
  /* 3 holds; the first copy (3 -> 2) was applied: the re-send finds 2 = the
   * expected count, answers 0 and releases nothing more */
  th_reply_free(th_cmd(srv, "HSET", "L", OWNER_A, "2", NULL));
  th_reply_free(th_cmd(srv, "PEXPIRE", "L", "50000", NULL));
  CHECK_EQ(unlock_resend("redisson_unlock_latch:{L}:m1", "2"), 0);
  CHECK_EQ(get_num("HGET", "L", OWNER_A), 2);
  CHECK_EQ(get_num("GET", "redisson_unlock_latch:{L}:m1", NULL), 0);
  /* the first copy was not applied (2 = expected + 1): the re-send does it */
  CHECK_EQ(unlock_resend("redisson_unlock_latch:{L}:m2", "1"), 0);
  CHECK_EQ(get_num("HGET", "L", OWNER_A), 1);
  /* ... and the late first copy then changes nothing */
  want_nil(eval("reentrant_unlock", 3, "L", CHAN, "redisson_unlock_latch:{L}:m2", "0", "30000", OWNER_A, "publish",
                "60000", "1", "0", "0", NULL));
  CHECK_EQ(get_num("HGET", "L", OWNER_A), 1);
  /* the last hold: not applied yet, the re-send frees it and tells waiters */
  CHECK_EQ(unlock_resend("redisson_unlock_latch:{L}:m3", "0"), 1);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "L", NULL), 0);
  CHECK_EQ(th_cmdstat(srv, "publish"), 1);
  /* the last hold, the first copy applied: the field gone, counted as
   * released, nothing published again */
  CHECK_EQ(unlock_resend("redisson_unlock_latch:{L}:m4", "0"), 1);
  CHECK_EQ(th_cmdstat(srv, "publish"), 1);
  CHECK_EQ(get_num("GET", "redisson_unlock_latch:{L}:m4", NULL), 1);
  /* a re-send of a re-send: the stored answer */
  th_reply_free(th_cmd(srv, "HSET", "L", OWNER_A, "5", NULL));
  CHECK_EQ(unlock_resend("redisson_unlock_latch:{L}:m4", "0"), 1);
  CHECK_EQ(get_num("HGET", "L", OWNER_A), 5);
  /* neither count (5, expected 1): not the holds the client took (-1) */
  CHECK_EQ(unlock_resend("redisson_unlock_latch:{L}:m5", "1"), -1);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "L", NULL), 0);
  /* not held, expected 1 left: nil */
  CHECK_EQ(unlock_resend("redisson_unlock_latch:{L}:m6", "1"), -100);
}

/* The first copies' bad lease: an error reply, nothing written. */
TEST(unlatched_lease_checks) {
  flush();
  th_reply_free(th_cmd(srv, "HSET", "L", OWNER_A, "2", NULL));
  const char *ul = "redisson_unlock_latch:{L}:x1";
  /* (bad marks: unlatched_forms) the first copies still check the lease */
  redisReply *r = eval_on(srv, "reentrant_acquire", 2, "F", "rlock_acquire_latch:{F}:x2", "0", OWNER_A, NULL);
  CHECK(r->type == REDIS_REPLY_ERROR && strstr(r->str, "ERR rlock: "));
  th_reply_free(r);
  r = eval_on(srv, "reentrant_unlock", 3, "L", CHAN, ul, "0", "0", OWNER_A, "publish", "60000", "1", "0", "0", NULL);
  CHECK(r->type == REDIS_REPLY_ERROR && strstr(r->str, "ERR rlock: "));
  th_reply_free(r);
  CHECK_EQ(get_num("HGET", "L", OWNER_A), 2);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "F", ul, NULL), 0);
}

static void want_refusal(redisReply *r, const char *code, const char *what) {
  CHECK_MSG(r->type == REDIS_REPLY_ERROR && !strncmp(r->str, code, strlen(code)), "%s: want a %s error, got %s", what,
            code, r->type == REDIS_REPLY_ERROR ? r->str : "no error");
  th_reply_free(r);
}

/* A write the server refuses (READONLY: a master demoted under an open
 * connection; OOM) reaches the client as the server's own error, never as an
 * argument error: the Sentinel topology re-sends a READONLY-refused request
 * to the new master (lib/topology/sentinel.c on_error_reply). Before, the
 * latch's SET under redis.pcall turned both into "ERR rlock: invalid latch
 * TTL (ms)" (test_sentinel readonly_after_a_silent_demotion failed too). */
TEST(acquire_unlock_pass_server_refusals) {
  th_server_t *r = th_server_start(NULL);
  th_reply_free(th_cmd(r, "HSET", "L", OWNER_A, "2", NULL));
  th_reply_free(th_cmd(r, "PEXPIRE", "L", "100000", NULL));
  th_reply_free(th_cmd(r, "REPLICAOF", "127.0.0.1", "1", NULL)); /* no master there: it keeps its data, read-only */
  want_refusal(eval_on(r, "reentrant_acquire", 2, "F", "rlock_acquire_latch:{F}:ro1", "30000", OWNER_A, "60000", NULL),
               "READONLY", "acquire of a free lock on a replica");
  want_refusal(eval_on(r, "reentrant_acquire", 2, "L", "rlock_acquire_latch:{L}:ro2", "30000", OWNER_A, "60000", NULL),
               "READONLY", "re-entry on a replica");
  want_refusal(eval_on(r, "reentrant_unlock", 3, "L", CHAN, "redisson_unlock_latch:{L}:ro3", "0", "30000", OWNER_A,
                       "publish", "60000", NULL),
               "READONLY", "unlock on a replica");
  /* the fast path's check-only forms: the refusal of their first write */
  want_refusal(eval_on(r, "reentrant_acquire", 2, "F", "rlock_acquire_latch:{F}:ro4", "30000", OWNER_A, NULL),
               "READONLY", "check-only acquire on a replica");
  want_refusal(eval_on(r, "reentrant_unlock", 3, "L", CHAN, "redisson_unlock_latch:{L}:ro5", "0", "30000", OWNER_A,
                       "publish", "60000", "1", "0", "0", NULL),
               "READONLY", "check-only unlock on a replica");
  th_reply_free(th_cmd(r, "REPLICAOF", "NO", "ONE", NULL));
  CHECK_EQ(th_cmd_int(r, "EXISTS", "F", "rlock_acquire_latch:{F}:ro1", "rlock_acquire_latch:{L}:ro2",
                      "redisson_unlock_latch:{L}:ro3", NULL),
           0);
  redisReply *c = th_cmd(r, "HGET", "L", OWNER_A, NULL);
  CHECK(c->type == REDIS_REPLY_STRING && !strcmp(c->str, "2"));
  th_reply_free(c);

  th_reply_free(th_cmd(r, "CONFIG", "SET", "maxmemory", "1", NULL)); /* every first write of a script: OOM */
  want_refusal(eval_on(r, "reentrant_acquire", 2, "F", "rlock_acquire_latch:{F}:oom1", "30000", OWNER_A, "60000", NULL),
               "OOM", "acquire of a free lock out of memory");
  want_refusal(eval_on(r, "reentrant_unlock", 3, "L", CHAN, "redisson_unlock_latch:{L}:oom2", "0", "30000", OWNER_A,
                       "publish", "60000", NULL),
               "OOM", "unlock out of memory");
  want_refusal(eval_on(r, "reentrant_acquire", 2, "F", "rlock_acquire_latch:{F}:oom3", "30000", OWNER_A, NULL), "OOM",
               "check-only acquire out of memory");
  want_refusal(eval_on(r, "reentrant_unlock", 3, "L", CHAN, "redisson_unlock_latch:{L}:oom4", "0", "30000", OWNER_A,
                       "publish", "60000", "1", "0", "0", NULL),
               "OOM", "check-only unlock out of memory");
  th_reply_free(th_cmd(r, "CONFIG", "SET", "maxmemory", "0", NULL));
  c = th_cmd(r, "HGET", "L", OWNER_A, NULL);
  CHECK(c->type == REDIS_REPLY_STRING && !strcmp(c->str, "2"));
  th_reply_free(c);
  th_server_stop(r);
}

TEST(renew) {
  flush();
  th_reply_free(th_cmd(srv, "HSET", "k1", OWNER_A, "1", NULL));
  th_reply_free(th_cmd(srv, "PEXPIRE", "k1", "1000", NULL));
  th_reply_free(th_cmd(srv, "HSET", "k2", OWNER_B, "3", NULL));
  th_reply_free(th_cmd(srv, "PEXPIRE", "k2", "1000", NULL));
  th_reply_free(th_cmd(srv, "HSET", "k3", OWNER_B, "1", NULL)); /* held by B, we ask for A */
  th_reply_free(th_cmd(srv, "PEXPIRE", "k3", "1000", NULL));
  redisReply *r = eval("reentrant_renew", 4, "k1", "k2", "k3", "k4", "30000", OWNER_A, OWNER_B, OWNER_A, OWNER_A, NULL);
  /* one character per name: renewed, renewed, held by another, gone */
  CHECK_MSG(r->type == REDIS_REPLY_STRING && r->len == 4 && !memcmp(r->str, "1100", 4), "reply type %d %.*s", r->type,
            r->type == REDIS_REPLY_STRING ? (int)r->len : 0, r->type == REDIS_REPLY_STRING ? r->str : "");
  th_reply_free(r);
  CHECK(th_cmd_int(srv, "PTTL", "k1", NULL) > 25000);
  CHECK(th_cmd_int(srv, "PTTL", "k2", NULL) > 25000);
  CHECK(th_cmd_int(srv, "PTTL", "k3", NULL) <= 1000);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "k4", NULL), 0);
  CHECK_EQ(get_num("HGET", "k2", OWNER_B), 3); /* counts untouched */
  /* '?': only asks (the reconnect's check of fixed-lease holds): the answer
   * as above, no TTL touched, however short */
  th_reply_free(th_cmd(srv, "PEXPIRE", "k1", "1000", NULL));
  r = eval("reentrant_renew", 3, "k1", "k3", "k4", "?", OWNER_A, OWNER_A, OWNER_A, NULL);
  CHECK(r->type == REDIS_REPLY_STRING && r->len == 3 && !memcmp(r->str, "100", 3));
  th_reply_free(r);
  CHECK(th_cmd_int(srv, "PTTL", "k1", NULL) <= 1000);
  th_reply_free(th_cmd(srv, "SET", "s1", OWNER_A, "PX", "1000", NULL));
  r = eval("simple_renew", 2, "s1", "k4", "?", OWNER_A, OWNER_A, NULL);
  CHECK(r->type == REDIS_REPLY_STRING && r->len == 2 && !memcmp(r->str, "10", 2));
  th_reply_free(r);
  CHECK(th_cmd_int(srv, "PTTL", "s1", NULL) <= 1000);
}

TEST(force_unlock) {
  flush();
  th_reply_free(th_cmd(srv, "CONFIG", "RESETSTAT", NULL));
  th_reply_free(th_cmd(srv, "HSET", "L", OWNER_A, "1", OWNER_B, "2", NULL));
  CHECK_EQ(want_int(eval("reentrant_force_unlock", 2, "L", CHAN, "0", "publish", NULL)), 1);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "L", NULL), 0);
  CHECK_EQ(th_cmdstat(srv, "publish"), 1);
  CHECK_EQ(want_int(eval("reentrant_force_unlock", 2, "L", CHAN, "0", "publish", NULL)), 0);
  CHECK_EQ(th_cmdstat(srv, "publish"), 1);
  /* Redisson's forceUnlock sends its publish command in upper case */
  th_reply_free(th_cmd(srv, "HSET", "L", OWNER_A, "1", NULL));
  CHECK_EQ(want_int(eval("reentrant_force_unlock", 2, "L", CHAN, "0", "PUBLISH", NULL)), 1);
  CHECK_EQ(th_cmdstat(srv, "publish"), 2);
}

/* Every script that publishes takes the publish command in any case, as
 * Redisson sends it (PUBLISH, SPUBLISH): Redisson's unlock request (5 ARGV)
 * runs through rlock's unlock script (test_redisson runs one Redisson really
 * sent). */
TEST(publish_command_any_case) {
  flush();
  th_reply_free(th_cmd(srv, "CONFIG", "RESETSTAT", NULL));
  th_reply_free(th_cmd(srv, "HSET", "L", OWNER_A, "2", NULL));
  const char *latch = "redisson_unlock_latch:{L}:0123456789abcdef0123456789abcdef";
  CHECK_EQ(want_int(eval("reentrant_unlock", 3, "L", CHAN, latch, "0", "30000", OWNER_A, "PUBLISH", "16000", NULL)), 0);
  CHECK_EQ(want_int(eval("reentrant_unlock", 3, "L", CHAN, latch, "0", "30000", OWNER_A, "PUBLISH", "16000", NULL)), 0);
  CHECK_EQ(get_num("HGET", "L", OWNER_A), 1); /* the re-send counted once */
  CHECK_EQ(want_int(eval("reentrant_unlock", 3, "L", CHAN, "redisson_unlock_latch:{L}:x2", "0", "30000", OWNER_A,
                         "Publish", "16000", NULL)),
           1);
  CHECK_EQ(th_cmdstat(srv, "publish"), 1);
  th_reply_free(th_cmd(srv, "SET", "S", "tok", NULL));
  CHECK_EQ(want_int(eval("simple_force_unlock", 2, "S", CHAN, "0", "PUBLISH", NULL)), 1);
  CHECK_EQ(th_cmdstat(srv, "publish"), 2);
  /* another command in any case is still refused */
  redisReply *r = eval_on(srv, "reentrant_force_unlock", 2, "L", CHAN, "0", "DEL", NULL);
  CHECK(r->type == REDIS_REPLY_ERROR && strstr(r->str, "invalid publish command"));
  th_reply_free(r);
}

/* Bad arguments get an error reply before anything is written: the lock and
 * its waiters are left as they are. */
TEST(force_unlock_checks_arguments_first) {
  flush();
  th_reply_free(th_cmd(srv, "HSET", "L", OWNER_A, "1", NULL));
  char *body = read_script("reentrant_force_unlock");
  const char *bad[][3] = {{"0", "bogus", "0"}, {"0", "del", "1"}, {"0", "publish", "2"}, {"0", "publish", ""}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const char *argv[] = {"EVAL", body, "2", "L", CHAN, bad[i][0], bad[i][1], bad[i][2]};
    redisReply *r = th_cmdv(srv, 8, argv, NULL);
    CHECK_MSG(r->type == REDIS_REPLY_ERROR, "case %zu: no error reply", i);
    th_reply_free(r);
    CHECK_EQ(th_cmd_int(srv, "EXISTS", "L", NULL), 1);
  }
  free(body);
}

/* The fast path's unlatched forms (lib/fast.c): an acquire without latch
 * TTL, an unlock's first copy (ARGV[8] '0') and its re-send ('1'). */
TEST(unlatched_forms) {
  flush();
  const char *a1 = "rlock_acquire_latch:{L}:f1", *a2 = "rlock_acquire_latch:{L}:f2";
  /* check-only acquire: granted, re-entered, no latch */
  want_nil(eval("reentrant_acquire", 2, "L", a1, "30000", OWNER_A, NULL));
  want_nil(eval("reentrant_acquire", 2, "L", a2, "30000", OWNER_A, NULL));
  CHECK_EQ(get_num("HGET", "L", OWNER_A), 2);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", a1, a2, NULL), 0);
  /* its undo (keep 1) gives the copy's hold back; the late copy changes nothing */
  CHECK_EQ(want_int(eval("reentrant_acquire_undo", 3, "L", CHAN, a2, "0", OWNER_A, "publish", "60000", "1", NULL)), 1);
  CHECK_EQ(get_num("HGET", "L", OWNER_A), 1);
  CHECK_EQ(want_int(eval("reentrant_acquire", 2, "L", a2, "30000", OWNER_A, NULL)), -3);
  CHECK_EQ(get_num("HGET", "L", OWNER_A), 1);

  /* unlock, first copy: 2 -> 1 (answer 0) writes no latch */
  th_reply_free(th_cmd(srv, "HSET", "L", OWNER_A, "2", NULL));
  const char *u1 = "redisson_unlock_latch:{L}:f3";
  CHECK_EQ(want_int(eval("reentrant_unlock", 3, "L", CHAN, u1, "0", "30000", OWNER_A, "publish", "60000", "1", "0", "0",
                         NULL)),
           0);
  CHECK_EQ(get_num("HGET", "L", OWNER_A), 1);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", u1, NULL), 0);
  /* its re-send reads the count: applied, only the latch written */
  CHECK_EQ(want_int(eval("reentrant_unlock", 3, "L", CHAN, u1, "0", "30000", OWNER_A, "publish", "60000", "1", "0", "1",
                         NULL)),
           0);
  CHECK_EQ(get_num("HGET", "L", OWNER_A), 1);
  CHECK_EQ(get_num("GET", u1, NULL), 0);
  /* a first copy that comes after a re-send: nothing */
  want_nil(eval("reentrant_unlock", 3, "L", CHAN, u1, "0", "30000", OWNER_A, "publish", "60000", "1", "0", "0", NULL));
  CHECK_EQ(get_num("HGET", "L", OWNER_A), 1);
  /* a re-send that comes first: applied once, latched */
  const char *u2 = "redisson_unlock_latch:{L}:f4";
  CHECK_EQ(want_int(eval("reentrant_unlock", 3, "L", CHAN, u2, "0", "30000", OWNER_A, "publish", "60000", "0", "0", "1",
                         NULL)),
           1);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "L", NULL), 0);
  want_nil(eval("reentrant_unlock", 3, "L", CHAN, u2, "0", "30000", OWNER_A, "publish", "60000", "0", "0", "0", NULL));

  /* not held: the first copy latches nil, its re-send answers nil (not "released") */
  const char *u3 = "redisson_unlock_latch:{L}:f5";
  want_nil(eval("reentrant_unlock", 3, "L", CHAN, u3, "0", "30000", OWNER_A, "publish", "60000", "0", "0", "0", NULL));
  want_nil(eval("reentrant_unlock", 3, "L", CHAN, u3, "0", "30000", OWNER_A, "publish", "60000", "0", "0", "1", NULL));
  /* a count mismatch: the first copy latches -1, its re-send answers -1 */
  th_reply_free(th_cmd(srv, "HSET", "L", OWNER_A, "3", NULL));
  const char *u4 = "redisson_unlock_latch:{L}:f6";
  CHECK_EQ(want_int(eval("reentrant_unlock", 3, "L", CHAN, u4, "0", "30000", OWNER_A, "publish", "60000", "0", "0", "0",
                         NULL)),
           -1);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "L", NULL), 0);
  CHECK_EQ(want_int(eval("reentrant_unlock", 3, "L", CHAN, u4, "0", "30000", OWNER_A, "publish", "60000", "0", "0", "1",
                         NULL)),
           -1);

  /* bad marks and the first copy's latch TTL: an error, nothing written */
  th_reply_free(th_cmd(srv, "HSET", "L", OWNER_A, "2", NULL));
  const char *u5 = "redisson_unlock_latch:{L}:f7";
  const char *bad[][4] = {{"60000", "1", "0", "2"},  {"60000", "1", "0", ""},  {"60000", "1", "0", "x"},
                          {"60000", "-1", "0", "1"}, {"60000", "1", "1", "1"}, {"60000", "-1", "0", "0"},
                          {"60000", "1", "1", "0"},  {"none", "1", "0", "0"},  {"0", "1", "0", "0"},
                          {"none", "1", "0", "1"}};
  char *body = read_script("reentrant_unlock");
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const char *argv[] = {"EVAL",  body,    "3",       "L",       CHAN,      u5,        "0",
                          "30000", OWNER_A, "publish", bad[i][0], bad[i][1], bad[i][2], bad[i][3]};
    redisReply *r = th_cmdv(srv, 14, argv, NULL);
    CHECK_MSG(r->type == REDIS_REPLY_ERROR && strstr(r->str, "ERR rlock: "),
              "unlock mark case %zu: no rlock error reply", i);
    th_reply_free(r);
    CHECK_EQ(get_num("HGET", "L", OWNER_A), 2);
    CHECK_EQ(th_cmd_int(srv, "EXISTS", u5, NULL), 0);
  }
  free(body);
}

/* Counts are whole decimal numbers, as HINCRBY writes them, and a script checks
 * them before it writes (issue 20, hole 6). Before, the unlock read counts with
 * tonumber ('0x1', '1e0', ' 0 ', '1.0' passed), and the acquire wrote a re-entry's
 * latch before an HINCRBY that failed (count at INT64_MAX): a re-send of that id
 * was then told "granted" with the count unchanged. */
TEST(counts_are_strict) {
  flush();
  char *unlock = read_script("reentrant_unlock");
  const char *ulatch = "redisson_unlock_latch:{L}:c1";
  /* the expected counts (ARGV[6], ARGV[7]) */
  th_reply_free(th_cmd(srv, "HSET", "L", OWNER_A, "2", NULL));
  const char *bad_args[][2] = {{"0x1", "0"}, {"1e0", "0"}, {" 1 ", "0"}, {"1.0", "0"}, {"01", "0"}, {"-0", "0"},
                               {"1", "0x0"}, {"1", "1e0"}, {"1", " 0"},  {"1", "0.0"}, {"1", "-1"}, {"+1", "0"}};
  for (size_t i = 0; i < sizeof bad_args / sizeof bad_args[0]; i++) {
    const char *argv[] = {"EVAL",  unlock,  "3",       "L",     CHAN,           ulatch,        "0",
                          "30000", OWNER_A, "publish", "60000", bad_args[i][0], bad_args[i][1]};
    redisReply *r = th_cmdv(srv, 13, argv, NULL);
    CHECK_MSG(r->type == REDIS_REPLY_ERROR && strstr(r->str, "ERR rlock: invalid expected count"),
              "unlock expected counts '%s' '%s': %s", bad_args[i][0], bad_args[i][1],
              r->type == REDIS_REPLY_ERROR ? r->str : "no error");
    th_reply_free(r);
    CHECK_EQ(get_num("HGET", "L", OWNER_A), 2);
    CHECK_EQ(th_cmd_int(srv, "EXISTS", ulatch, NULL), 0);
  }
  /* a stored count that is not one: an error, nothing written (no latch, no
   * publish, the field as it was), on the latched and the fast path's forms */
  const char *bad_stored[] = {
      "0x1", "1e0", " 1 ", "1.0", "0", "-1", "abc", "99999999999999999999", "9223372036854775808"};
  th_reply_free(th_cmd(srv, "CONFIG", "RESETSTAT", NULL));
  const char *forms[][14] = {
      {"EVAL", NULL, "3", "L", CHAN, NULL, "0", "30000", OWNER_A, "publish", "60000"},
      {"EVAL", NULL, "3", "L", CHAN, NULL, "0", "30000", OWNER_A, "publish", "60000", "1", "0"},
      {"EVAL", NULL, "3", "L", CHAN, NULL, "0", "30000", OWNER_A, "publish", "60000", "0", "0", "0"},
      {"EVAL", NULL, "3", "L", CHAN, NULL, "0", "30000", OWNER_A, "publish", "60000", "0", "0", "1"}};
  int nargs[] = {11, 13, 14, 14};
  for (size_t f = 0; f < 4; f++) forms[f][1] = unlock, forms[f][5] = ulatch;
  for (size_t i = 0; i < sizeof bad_stored / sizeof bad_stored[0]; i++) {
    th_reply_free(th_cmd(srv, "HSET", "L", OWNER_A, bad_stored[i], NULL));
    for (size_t f = 0; f < 4; f++) {
      redisReply *r = th_cmdv(srv, nargs[f], forms[f], NULL);
      CHECK_MSG(r->type == REDIS_REPLY_ERROR && strstr(r->str, "ERR rlock: hold count"),
                "unlock form %zu of stored count '%s': %s", f, bad_stored[i],
                r->type == REDIS_REPLY_ERROR ? r->str : "no error");
      th_reply_free(r);
      redisReply *c = th_cmd(srv, "HGET", "L", OWNER_A, NULL);
      CHECK(c->type == REDIS_REPLY_STRING && !strcmp(c->str, bad_stored[i]));
      th_reply_free(c);
      CHECK_EQ(th_cmd_int(srv, "EXISTS", ulatch, NULL), 0);
    }
  }
  /* a count of 16 to 19 digits (up to INT64_MAX) is more than any client
   * took: a mismatch (-1, the field removed) when the client sends its count,
   * an error (nothing written) when it does not */
  const char *big[] = {"1234567890123456", "9223372036854775807"};
  for (size_t i = 0; i < 2; i++) {
    th_reply_free(th_cmd(srv, "HSET", "L", OWNER_A, big[i], NULL));
    redisReply *r = th_cmdv(srv, nargs[0], forms[0], NULL);
    CHECK_MSG(r->type == REDIS_REPLY_ERROR && strstr(r->str, "ERR rlock: hold count"), "unchecked unlock of '%s'",
              big[i]);
    th_reply_free(r);
    CHECK_EQ(th_cmd_int(srv, "EXISTS", ulatch, NULL), 0);
    for (size_t f = 1; f < 3; f++) {
      th_reply_free(th_cmd(srv, "HSET", "L", OWNER_A, big[i], NULL));
      const char *u = f == 1 ? "redisson_unlock_latch:{L}:c3" : "redisson_unlock_latch:{L}:c4";
      forms[f][5] = u;
      CHECK_EQ(want_int(th_cmdv(srv, nargs[f], forms[f], NULL)), -1);
      forms[f][5] = ulatch;
      CHECK_EQ(th_cmd_int(srv, "EXISTS", "L", NULL), 0);
      th_reply_free(th_cmd(srv, "DEL", u, NULL));
    }
  }
  CHECK_EQ(th_cmdstat(srv, "publish"), 4); /* each mismatch freed the lock */
  th_reply_free(th_cmd(srv, "CONFIG", "RESETSTAT", NULL));
  free(unlock);

  /* a re-entry of a count HINCRBY cannot raise, or that is not a count: an
   * error before the latch; a re-send of the same id is refused the same way,
   * never told "granted" */
  const char *alatch = "rlock_acquire_latch:{L}:c2";
  const char *no_reentry[] = {"9223372036854775807", "99999999999999999999", "0x1", "1.0", " 1", "0", "01"};
  for (size_t i = 0; i < sizeof no_reentry / sizeof no_reentry[0]; i++) {
    th_reply_free(th_cmd(srv, "HSET", "L", OWNER_A, no_reentry[i], NULL));
    for (int copy = 0; copy < 2; copy++) {
      redisReply *r = eval_on(srv, "reentrant_acquire", 2, "L", alatch, "30000", OWNER_A, "60000", NULL);
      CHECK_MSG(r->type == REDIS_REPLY_ERROR && strstr(r->str, "ERR rlock: hold count"),
                "re-entry of count '%s', copy %d: %s", no_reentry[i], copy,
                r->type == REDIS_REPLY_ERROR ? r->str : "no error");
      th_reply_free(r);
      CHECK_EQ(th_cmd_int(srv, "EXISTS", alatch, NULL), 0);
    }
    /* the fast path's first copy (no latch TTL) */
    redisReply *r = eval_on(srv, "reentrant_acquire", 2, "L", alatch, "30000", OWNER_A, NULL);
    CHECK_MSG(r->type == REDIS_REPLY_ERROR && strstr(r->str, "ERR rlock: hold count"),
              "fast re-entry of count '%s': %s", no_reentry[i], r->type == REDIS_REPLY_ERROR ? r->str : "no error");
    th_reply_free(r);
    redisReply *c = th_cmd(srv, "HGET", "L", OWNER_A, NULL);
    CHECK(c->type == REDIS_REPLY_STRING && !strcmp(c->str, no_reentry[i]));
    th_reply_free(c);
    CHECK_EQ(th_cmd_int(srv, "EXISTS", alatch, NULL), 0);
  }
  /* the largest count that can still be raised is raised */
  th_reply_free(th_cmd(srv, "HSET", "L", OWNER_A, "9223372036854775806", NULL));
  want_nil(eval("reentrant_acquire", 2, "L", alatch, "30000", OWNER_A, "60000", NULL));
  CHECK_EQ(get_num("HGET", "L", OWNER_A), INT64_MAX);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", alatch, NULL), 1);
}

/* A late copy of a granted read or write try (its re-send was answered, the
 * owner went on and released the hold) must take nothing: the latch says the
 * try was applied once. rw_read_acquire.lua / rw_write_acquire.lua took the
 * lock again when the owner's field was gone, a hold nobody counts that kept
 * writers out for a lease. */
#define RW_TP "{R}:" OWNER_A ":rwlock_timeout"
#define RW_CHAN "redisson_rwlock:{R}"
TEST(rw_late_copy_after_release) {
  flush();
  const char *latch = "rlock_acquire_latch:{R}:w1", *ul = "redisson_unlock_latch:{R}:u1";
  want_nil(eval("rw_read_acquire", 3, "R", RW_TP, latch, "30000", OWNER_A, OWNER_A ":write", "60000", NULL));
  CHECK_EQ(want_int(eval("rw_read_unlock", 5, "R", RW_CHAN, RW_TP, "{R}", ul, "0", OWNER_A, "publish", "60000", NULL)),
           1);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "R", NULL), 0);
  want_nil(eval("rw_read_acquire", 3, "R", RW_TP, latch, "30000", OWNER_A, OWNER_A ":write", "60000", NULL));
  CHECK_MSG(th_cmd_int(srv, "EXISTS", "R", NULL) == 0, "a late read copy took the lock again");
  CHECK_EQ(th_cmd_int(srv, "EXISTS", RW_TP ":1", NULL), 0);
  /* the same beside another reader: no second hold of A */
  want_nil(eval("rw_read_acquire", 3, "R", "{R}:" OWNER_B ":rwlock_timeout", "rlock_acquire_latch:{R}:w2", "30000",
                OWNER_B, OWNER_B ":write", "60000", NULL));
  want_nil(eval("rw_read_acquire", 3, "R", RW_TP, latch, "30000", OWNER_A, OWNER_A ":write", "60000", NULL));
  CHECK_MSG(th_cmd_int(srv, "HEXISTS", "R", OWNER_A, NULL) == 0, "a late read copy took a hold beside B");
  flush();
  latch = "rlock_acquire_latch:{R}:w3";
  want_nil(eval("rw_write_acquire", 2, "R", latch, "30000", OWNER_A ":write", "60000", OWNER_A, NULL));
  ul = "redisson_unlock_latch:{R}:u2";
  CHECK_EQ(
      want_int(eval("rw_write_unlock", 3, "R", RW_CHAN, ul, "1", "30000", OWNER_A ":write", "publish", "60000", NULL)),
      1);
  want_nil(eval("rw_write_acquire", 2, "R", latch, "30000", OWNER_A ":write", "60000", OWNER_A, NULL));
  CHECK_MSG(th_cmd_int(srv, "EXISTS", "R", NULL) == 0, "a late write copy took the lock again");
  /* held by another owner: the copy gets the wait, as a re-send would */
  want_nil(eval("rw_write_acquire", 2, "R", "rlock_acquire_latch:{R}:w4", "20000", OWNER_B ":write", "60000", OWNER_B,
                NULL));
  long long ttl = want_int(eval("rw_write_acquire", 2, "R", latch, "30000", OWNER_A ":write", "60000", OWNER_A, NULL));
  CHECK(ttl > 0 && ttl <= 20000);
  CHECK_EQ(th_cmd_int(srv, "HLEN", "R", NULL), 2);
}

/* An error reply whose text contains want; nothing else checked. */
static void want_err(redisReply *r, const char *want) {
  CHECK_MSG(r->type == REDIS_REPLY_ERROR && strstr(r->str, want), "want an error with '%s', got type %d %s", want,
            r->type, r->type == REDIS_REPLY_ERROR ? r->str : "");
  th_reply_free(r);
}

#define SEM_CHAN "redisson_sc:{S}"
#define SEM_Q "rlock_semaphore_queue:{S}"
#define SEM_T "rlock_semaphore_timeout:{S}"

/* The semaphore's scripts: Redisson's steps, the request latches (a re-send
 * answers the first answer and changes nothing), the undo, bad arguments. */
TEST(semaphore_scripts) {
  flush();
  const char *l1 = "rlock_semaphore_latch:{S}:a1", *l2 = "rlock_semaphore_latch:{S}:a2";
  /* try-set: missing -> SET, 1; again (another id) 0; a re-send of the first id: its answer */
  CHECK_EQ(want_int(eval("semaphore_set", 3, "S", SEM_CHAN, l1, "3", "publish", "60000", NULL)), 1);
  CHECK_EQ(want_int(eval("semaphore_set", 3, "S", SEM_CHAN, l2, "9", "publish", "60000", NULL)), 0);
  CHECK_EQ(want_int(eval("semaphore_set", 3, "S", SEM_CHAN, l1, "9", "publish", "60000", NULL)), 1);
  CHECK_EQ(get_num("GET", "S", NULL), 3);
  /* acquire: 2 of 3, then a re-send of that id takes nothing more */
  const char *a = "rlock_semaphore_latch:{S}:b1";
  CHECK_EQ(want_int(eval("semaphore_acquire", 4, "S", a, SEM_Q, SEM_T, "2", "60000", "w1", "10000", "t", "0", NULL)),
           1);
  CHECK_EQ(want_int(eval("semaphore_acquire", 4, "S", a, SEM_Q, SEM_T, "2", "60000", "w1", "10000", "t", "0", NULL)),
           1);
  CHECK_EQ(get_num("GET", "S", NULL), 1);
  /* too few: 0, nothing written, no latch */
  CHECK_EQ(want_int(eval("semaphore_acquire", 4, "S", "rlock_semaphore_latch:{S}:b2", SEM_Q, SEM_T, "2", "60000", "w1",
                         "10000", "t", "0", NULL)),
           0);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "rlock_semaphore_latch:{S}:b2", NULL), 0);
  /* the undo of the applied try gives its 2 back once */
  CHECK_EQ(want_int(eval("semaphore_acquire_undo", 5, "S", SEM_CHAN, a, SEM_Q, SEM_T, "2", "publish", "60000", "", "0",
                         NULL)),
           1);
  CHECK_EQ(want_int(eval("semaphore_acquire_undo", 5, "S", SEM_CHAN, a, SEM_Q, SEM_T, "2", "publish", "60000", "", "0",
                         NULL)),
           2);
  CHECK_EQ(get_num("GET", "S", NULL), 3);
  CHECK_EQ(want_int(eval("semaphore_acquire", 4, "S", a, SEM_Q, SEM_T, "2", "60000", "w1", "10000", "t", "0", NULL)),
           -3); /* a late copy */
  CHECK_EQ(get_num("GET", "S", NULL), 3);
  /* the undo of a try that never applied: a tombstone, then the copy never applies */
  const char *t = "rlock_semaphore_latch:{S}:b3";
  CHECK_EQ(want_int(eval("semaphore_acquire_undo", 5, "S", SEM_CHAN, t, SEM_Q, SEM_T, "1", "publish", "60000", "", "0",
                         NULL)),
           0);
  CHECK_EQ(want_int(eval("semaphore_acquire", 4, "S", t, SEM_Q, SEM_T, "1", "60000", "w1", "10000", "t", "0", NULL)),
           -3);
  CHECK_EQ(get_num("GET", "S", NULL), 3);
  /* release: INCRBY and the new count; a re-send counts once */
  const char *r = "rlock_semaphore_latch:{S}:c1";
  CHECK_EQ(want_int(eval("semaphore_release", 3, "S", SEM_CHAN, r, "4", "publish", "60000", NULL)), 7);
  CHECK_EQ(want_int(eval("semaphore_release", 3, "S", SEM_CHAN, r, "4", "publish", "60000", NULL)), 7);
  CHECK_EQ(get_num("GET", "S", NULL), 7);
  /* add: negative too; drops the TTL; a re-send counts once */
  th_reply_free(th_cmd(srv, "PEXPIRE", "S", "100000", NULL));
  const char *d = "rlock_semaphore_latch:{S}:d1";
  CHECK_EQ(want_int(eval("semaphore_add", 3, "S", SEM_CHAN, d, "-10", "publish", "60000", NULL)), -3);
  CHECK_EQ(want_int(eval("semaphore_add", 3, "S", SEM_CHAN, d, "-10", "publish", "60000", NULL)), -3);
  CHECK_EQ(th_cmd_int(srv, "PTTL", "S", NULL), -1);
  /* drain: the old value (negative here), SET 0; a re-send answers it again */
  const char *e = "rlock_semaphore_latch:{S}:e1";
  CHECK_EQ(want_int(eval("semaphore_drain", 2, "S", e, "60000", NULL)), -3);
  CHECK_EQ(want_int(eval("semaphore_drain", 2, "S", e, "60000", NULL)), -3);
  CHECK_EQ(get_num("GET", "S", NULL), 0);
  CHECK_EQ(want_int(eval("semaphore_drain", 2, "M", "rlock_semaphore_latch:{M}:e2", "60000", NULL)), 0);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "M", NULL), 0);
  /* bad arguments: an error, nothing written */
  want_err(eval_on(srv, "semaphore_acquire", 4, "S", "rlock_semaphore_latch:{S}:x", SEM_Q, SEM_T, "0", "60000", "w1",
                   "10000", "t", "0", NULL),
           "invalid permits");
  want_err(eval_on(srv, "semaphore_acquire", 4, "S", "rlock_semaphore_latch:{S}:x", SEM_Q, SEM_T, "-1", "60000", "w1",
                   "10000", "t", "0", NULL),
           "invalid permits");
  want_err(
      eval_on(srv, "semaphore_release", 3, "S", SEM_CHAN, "rlock_semaphore_latch:{S}:x", "1", "post", "60000", NULL),
      "invalid publish command");
  want_err(
      eval_on(srv, "semaphore_add", 3, "S", SEM_CHAN, "rlock_semaphore_latch:{S}:x", "1.5", "publish", "60000", NULL),
      "invalid permits");
  th_reply_free(th_cmd(srv, "SET", "S", "abc", NULL));
  want_err(eval_on(srv, "semaphore_acquire", 4, "S", "rlock_semaphore_latch:{S}:x", SEM_Q, SEM_T, "1", "60000", "w1",
                   "10000", "t", "0", NULL),
           "does not hold an integer");
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "rlock_semaphore_latch:{S}:x", NULL), 0);
}

#define LATCH_CHAN "redisson_countdownlatch__channel__{C}"

/* The latch's scripts: Redisson's trySetCount and countDown, the request latch. */
TEST(latch_scripts) {
  flush();
  const char *s1 = "rlock_countdown_latch:{C}:s1";
  CHECK_EQ(want_int(eval("latch_set", 3, "C", LATCH_CHAN, s1, "1", "2", "publish", "60000", NULL)), 1);
  CHECK_EQ(want_int(eval("latch_set", 3, "C", LATCH_CHAN, "rlock_countdown_latch:{C}:s2", "1", "5", "publish", "60000",
                         NULL)),
           0);
  CHECK_EQ(get_num("GET", "C", NULL), 2);
  CHECK_EQ(th_cmd_int(srv, "PTTL", "C", NULL), -1);
  const char *d1 = "rlock_countdown_latch:{C}:d1";
  CHECK_EQ(want_int(eval("latch_count_down", 3, "C", LATCH_CHAN, d1, "0", "publish", "60000", NULL)), 1);
  CHECK_EQ(want_int(eval("latch_count_down", 3, "C", LATCH_CHAN, d1, "0", "publish", "60000", NULL)), 1); /* re-send */
  CHECK_EQ(get_num("GET", "C", NULL), 1);
  CHECK_EQ(want_int(eval("latch_count_down", 3, "C", LATCH_CHAN, "rlock_countdown_latch:{C}:d2", "0", "publish",
                         "60000", NULL)),
           0);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "C", NULL), 0);
  /* a missing latch: DECR to -1, deleted, 0 */
  CHECK_EQ(want_int(eval("latch_count_down", 3, "C", LATCH_CHAN, "rlock_countdown_latch:{C}:d3", "0", "publish",
                         "60000", NULL)),
           0);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "C", NULL), 0);
  want_err(
      eval_on(srv, "latch_set", 3, "C", LATCH_CHAN, "rlock_countdown_latch:{C}:x", "1", "0", "publish", "60000", NULL),
      "invalid count");
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "C", NULL), 0);
}

/* ------------------------------------------------------------ permit-expirable semaphore */

#define PES_ID "00112233445566778899aabbccddeeff"
static char pes_now[24];
static const char *pes_time(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  snprintf(pes_now, sizeof pes_now, "%lld", (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
  return pes_now;
}

/* One acquire of PES_ID with its own latch. */
static redisReply *pes_try(const char *latch) {
  return eval("pes_acquire", 4, "sem", "{sem}:timeout", "redisson_sc:{sem}", latch, "30000", PES_ID, "10000",
              pes_time(), "publish", NULL);
}

/* A permit id is counted once: a second request of the same id (another
 * latch: a re-try after its answer was lost and its latch expired) finds it
 * in the zset and takes nothing more. */
TEST(pes_same_id_once) {
  flush();
  th_reply_free(th_cmd(srv, "SET", "sem", "2", NULL));
  want_nil(pes_try("l1"));
  CHECK_EQ(get_num("GET", "sem", NULL), 1);
  want_nil(pes_try("l1")); /* the same request re-sent: its latch */
  want_nil(pes_try("l2")); /* another request of the same id */
  CHECK_EQ(get_num("GET", "sem", NULL), 1);
  CHECK_EQ(th_cmd_int(srv, "ZCARD", "{sem}:timeout", NULL), 1);
  redisReply *r = th_cmd(srv, "ZRANGE", "{sem}:timeout", "0", "-1", NULL);
  CHECK(r->elements == 1 && r->element[0]->len == 16); /* 16 raw bytes */
  CHECK(memcmp(r->element[0]->str, "\x00\x11\x22\x33\x44\x55\x66\x77\x88\x99\xaa\xbb\xcc\xdd\xee\xff", 16) == 0);
  th_reply_free(r);
}

/* The undo gives back an applied acquire once; a tombstone stops a late copy. */
TEST(pes_undo) {
  flush();
  th_reply_free(th_cmd(srv, "SET", "sem", "1", NULL));
  want_nil(pes_try("l1"));
  CHECK_EQ(get_num("GET", "sem", NULL), 0);
  CHECK_EQ(want_int(eval("pes_acquire_undo", 4, "sem", "{sem}:timeout", "redisson_sc:{sem}", "l1", PES_ID, "publish",
                         "10000", "-1", NULL)),
           1);
  CHECK_EQ(get_num("GET", "sem", NULL), 1);
  CHECK_EQ(th_cmd_int(srv, "ZCARD", "{sem}:timeout", NULL), 0);
  CHECK_EQ(want_int(eval("pes_acquire_undo", 4, "sem", "{sem}:timeout", "redisson_sc:{sem}", "l1", PES_ID, "publish",
                         "10000", "-1", NULL)),
           2); /* re-sent: nothing more */
  CHECK_EQ(get_num("GET", "sem", NULL), 1);
  /* a request undone before it ran never applies */
  CHECK_EQ(want_int(eval("pes_acquire_undo", 4, "sem", "{sem}:timeout", "redisson_sc:{sem}", "l2", PES_ID, "publish",
                         "10000", "0", NULL)),
           0);
  CHECK_EQ(want_int(pes_try("l2")), -3);
  CHECK_EQ(get_num("GET", "sem", NULL), 1);
}

/* A release re-sent after its answer was lost answers as the first did and
 * counts the permit back once. */
TEST(pes_release_once) {
  flush();
  th_reply_free(th_cmd(srv, "SET", "sem", "1", NULL));
  want_nil(pes_try("l1"));
  for (int i = 0; i < 2; i++)
    CHECK_EQ(want_int(eval("pes_release", 4, "sem", "redisson_sc:{sem}", "{sem}:timeout", "u1", PES_ID, pes_time(),
                           "publish", "10000", NULL)),
             1);
  CHECK_EQ(get_num("GET", "sem", NULL), 1);
  CHECK_EQ(want_int(eval("pes_release", 4, "sem", "redisson_sc:{sem}", "{sem}:timeout", "u2", PES_ID, pes_time(),
                         "publish", "10000", NULL)),
           0); /* another release of it: not held */
  CHECK_EQ(get_num("GET", "sem", NULL), 1);
}

/* Renewal moves a live permit's score on, never a dead one's. */
TEST(pes_renew) {
  flush();
  th_reply_free(th_cmd(srv, "SET", "sem", "1", NULL));
  want_nil(pes_try("l1"));
  redisReply *r = eval("pes_renew", 1, "sem", "600000", PES_ID, NULL);
  CHECK(r->type == REDIS_REPLY_STRING && strcmp(r->str, "1") == 0);
  th_reply_free(r);
  r = th_cmd(srv, "ZRANGE", "{sem}:timeout", "0", "0", "WITHSCORES", NULL);
  CHECK(r->elements == 2 && atoll(r->element[1]->str) > atoll(pes_time()) + 500000);
  th_reply_free(r);
  r = eval("pes_renew", 1, "sem", "600000", "ffeeddccbbaa99887766554433221100", NULL);
  CHECK(r->type == REDIS_REPLY_STRING && strcmp(r->str, "0") == 0);
  th_reply_free(r);
  r = eval_on(srv, "pes_renew", 1, "sem", "0", PES_ID, NULL);
  CHECK(r->type == REDIS_REPLY_ERROR);
  th_reply_free(r);
}

/* A read hold given back by rw_acquire_undo.lua takes its lease with it:
 * NAME's TTL becomes the longest live read hold's (B's 1.5 s), as a read
 * unlock makes it, and the shorter TTL is published. Before, NAME kept the
 * undone hold's 60 s and a writer waited that long behind B's dead hold. */
TEST(rw_undo_gives_back_lease) {
  flush();
  want_nil(eval("rw_read_acquire", 3, "R", "{R}:" OWNER_B ":rwlock_timeout", "rlock_acquire_latch:{R}:b1", "1500",
                OWNER_B, OWNER_B ":write", "60000", NULL));
  want_nil(eval("rw_read_acquire", 3, "R", RW_TP, "rlock_acquire_latch:{R}:a1", "60000", OWNER_A, OWNER_A ":write",
                "60000", NULL));
  CHECK(th_cmd_int(srv, "PTTL", "R", NULL) > 50000);
  CHECK_EQ(want_int(eval("rw_acquire_undo", 3, "R", RW_CHAN, "rlock_acquire_latch:{R}:a1", "0", OWNER_A, "publish",
                         "60000", "-1", "read", NULL)),
           1);
  CHECK_EQ(th_cmd_int(srv, "HEXISTS", "R", OWNER_A, NULL), 0);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", RW_TP ":1", NULL), 0);
  long long ttl = th_cmd_int(srv, "PTTL", "R", NULL);
  CHECK_MSG(ttl > 0 && ttl <= 1500, "PTTL %lld after the undo: the undone read hold's lease kept", ttl);
  /* with no live read hold left (B's timeout key gone), NAME goes */
  flush();
  want_nil(eval("rw_read_acquire", 3, "R", "{R}:" OWNER_B ":rwlock_timeout", "rlock_acquire_latch:{R}:b2", "1500",
                OWNER_B, OWNER_B ":write", "60000", NULL));
  want_nil(eval("rw_read_acquire", 3, "R", RW_TP, "rlock_acquire_latch:{R}:a2", "60000", OWNER_A, OWNER_A ":write",
                "60000", NULL));
  th_reply_free(th_cmd(srv, "DEL", "{R}:" OWNER_B ":rwlock_timeout:1", NULL)); /* B's lease ran out */
  CHECK_EQ(want_int(eval("rw_acquire_undo", 3, "R", RW_CHAN, "rlock_acquire_latch:{R}:a2", "0", OWNER_A, "publish",
                         "60000", "-1", "read", NULL)),
           1);
  CHECK_MSG(th_cmd_int(srv, "EXISTS", "R", NULL) == 0, "a hash with only a dead read hold left after the undo");
}

int main(int argc, char **argv) {
  th_init(argc, argv, 60);
  srv = th_server_start(NULL);
  RUN(acquire);
  RUN(acquire_after_undo_tombstone);
  RUN(acquire_undo_applied);
  RUN(unlock);
  RUN(acquire_resend_after_loss);
  RUN(unlock_expected_counts);
  RUN(acquire_unlock_check_arguments_first);
  RUN(acquire_unlock_pass_server_refusals);
  RUN(unlock_late_copy_after_not_held);
  RUN(unlatched_forms);
  RUN(unlatched_first_copies);
  RUN(unlock_resend_mark);
  RUN(unlatched_lease_checks);
  RUN(renew);
  RUN(force_unlock);
  RUN(publish_command_any_case);
  RUN(force_unlock_checks_arguments_first);
  RUN(counts_are_strict);
  RUN(rw_late_copy_after_release);
  RUN(rw_undo_gives_back_lease);
  RUN(semaphore_scripts);
  RUN(latch_scripts);
  RUN(pes_same_id_once);
  RUN(pes_undo);
  RUN(pes_release_once);
  RUN(pes_renew);
  th_server_stop(srv);
  return th_done();
}
