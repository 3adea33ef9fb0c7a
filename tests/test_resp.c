/* test_resp.c -- the request writer (lib/resp.c, internal API): every byte
 * librlock puts on the wire for a command must be what hiredis's
 * redisFormatCommandArgv writes for the same arguments (the form every
 * Redis, and Redisson's tests of rlock's keys, already read). Checked for
 * chosen argument shapes (none, empty, binary with CR LF and NUL, lengths
 * around each power of ten, 100 arguments), for random argument vectors,
 * for requests made and freed in turn (freed ones are reused), for
 * rlock__req_new / rlock__req_append (a compound request), for the
 * script requests with their precomputed EVALSHA prefix (rlock__script_req)
 * and for their NOSCRIPT form (rlock__script_to_eval); and the reply fast
 * path (rlock__reply_fast) against hiredis's reader, the reader idle test that gates
 * it, and util.c's integer and request-id writers. No server needed. */
#include "harness.h"
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/evp.h>

/* hiredis's bytes for argv (the reference). */
static char *reference(int argc, const char **argv, const size_t *lens, size_t *n) {
  char *cmd = NULL;
  int len = redisFormatCommandArgv(&cmd, argc, argv, lens);
  CHECK(len >= 0);
  *n = (size_t)len;
  return cmd;
}

/* resp.c's bytes for argv equal hiredis's, and the size is exact. */
static void check_same(int argc, const char **argv, const size_t *lens) {
  size_t want_n;
  char *want = reference(argc, argv, lens, &want_n);
  size_t size = rlock__resp_size(argc, argv, lens);
  CHECK_EQ(size, want_n);
  char *got = malloc(size + 1);
  CHECK(got);
  got[size] = 'X'; /* nothing written past the size */
  CHECK_EQ(rlock__resp_write(got, argc, argv, lens), want_n);
  CHECK(got[size] == 'X');
  CHECK_MSG(!memcmp(got, want, want_n), "argc %d: RESP differs from redisFormatCommandArgv", argc);
  free(got);
  free(want);
}

TEST(chosen_shapes) {
  const char *none[1] = {NULL};
  check_same(0, none, NULL);
  const char *one[] = {"PING"};
  check_same(1, one, NULL);
  const char *empty[] = {"SET", "", ""};
  size_t empty_l[] = {3, 0, 0};
  check_same(3, empty, empty_l);
  check_same(3, empty, NULL); /* argvlen NULL: strlen */
  const char *binary[] = {"SET", "a\r\nb\0c", "\0\0\r\n"};
  size_t binary_l[] = {3, 6, 4};
  check_same(3, binary, binary_l);
  /* lengths at and around every power of ten up to 10^6 */
  static char big[1000001];
  memset(big, 'x', sizeof big);
  for (size_t p = 1; p <= 1000000; p *= 10) {
    for (size_t d = p > 1 ? p - 1 : 0; d <= p + 1; d++) {
      const char *argv[] = {"SET", big, big};
      size_t lens[] = {3, d, d == 0 ? 0 : d - 1};
      check_same(3, argv, lens);
    }
  }
  /* argument counts with one, two and three digits */
  const char *many[100];
  for (int i = 0; i < 100; i++) many[i] = i % 3 ? "k" : "";
  for (int argc = 1; argc <= 100; argc++) check_same(argc, many, NULL);
}

/* Random argument vectors: random counts, lengths and bytes (CR, LF, NUL
 * included), fixed seed so a failure repeats. */
TEST(random_vectors) {
  srand(10);
  static char pool[4096];
  for (size_t i = 0; i < sizeof pool; i++) pool[i] = (char)(rand() % 256);
  for (int round = 0; round < 20000; round++) {
    int argc = rand() % 40;
    const char *argv[40];
    size_t lens[40];
    for (int i = 0; i < argc; i++) {
      size_t len = (size_t)(rand() % 8 == 0 ? rand() % 2048 : rand() % 24);
      argv[i] = pool + rand() % (int)(sizeof pool - len);
      lens[i] = len;
    }
    check_same(argc, argc ? argv : (const char *[]){NULL}, lens);
  }
}

/* Requests of random sizes made and freed in turn (freed ones are reused,
 * rooms of every size): each holds exactly its own command. */
TEST(reused_requests) {
  srand(11);
  static char pool[4096];
  for (size_t i = 0; i < sizeof pool; i++) pool[i] = (char)(rand() % 256);
  req_t *held[8] = {0};
  for (int round = 0; round < 5000; round++) {
    int argc = 1 + rand() % 12;
    const char *argv[12];
    size_t lens[12];
    for (int i = 0; i < argc; i++) {
      lens[i] = (size_t)(rand() % 4 == 0 ? rand() % 1500 : rand() % 40);
      argv[i] = pool + rand() % (int)(sizeof pool - lens[i]);
    }
    req_t *r = rlock__req_new(argc, argv, lens, 1000, NULL, NULL);
    CHECK(r);
    size_t n;
    char *want = reference(argc, argv, lens, &n);
    CHECK_EQ(r->len, n);
    CHECK_MSG(!memcmp(r->cmd, want, n), "round %d: request bytes differ", round);
    CHECK(r->ncmds == 1 && r->slot == -1 && !r->replies && !r->script && !r->completed && !r->next);
    free(want);
    int k = rand() % 8; /* keep a few alive, free others in another order */
    rlock__req_free(held[k]);
    held[k] = r;
  }
  for (int k = 0; k < 8; k++) rlock__req_free(held[k]);
}

/* A request's bytes and a compound (script + WAIT) one's. */
TEST(requests) {
  const char *argv[] = {"GET", "some\r\nkey"};
  size_t lens[] = {3, 9};
  req_t *r = rlock__req_new(2, argv, lens, 1000, NULL, NULL);
  CHECK(r);
  size_t n1;
  char *want1 = reference(2, argv, lens, &n1);
  CHECK_EQ(r->len, n1);
  CHECK(!memcmp(r->cmd, want1, n1));
  CHECK_EQ(r->ncmds, 1);
  const char *wait[] = {"WAIT", "1", "1000"};
  CHECK_OK(rlock__req_append(r, 3, wait, NULL));
  size_t n2;
  char *want2 = reference(3, wait, NULL, &n2);
  CHECK_EQ(r->len, n1 + n2);
  CHECK(!memcmp(r->cmd, want1, n1) && !memcmp(r->cmd + n1, want2, n2));
  CHECK_EQ(r->ncmds, 2);
  rlock__req_free(r);
  free(want1);
  free(want2);
}

/* SHA1 of a script's body in hex: what EVALSHA names it by. */
static void sha1_hex(const char *body, char out[41]) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  CHECK(EVP_Digest(body, strlen(body), md, &n, EVP_sha1(), NULL) && n == 20);
  for (unsigned i = 0; i < n; i++) snprintf(out + 2 * i, 3, "%02x", md[i]);
}

/* rlock__script_req's bytes (its precomputed prefix) against the argv
 * EVALSHA sha nkeys keys... args..., for every script and several shapes;
 * and its EVAL form after NOSCRIPT against EVAL body nkeys keys... args.... */
TEST(script_requests) {
  rlock__script_init();
  const char *keys[] = {"lock", "redisson_lock__channel:{lock}", "rlock_acquire_latch:{lock}:0123", "k\r\n\0"};
  size_t kl[] = {4, 29, 31, 4};
  const char *args[] = {"30000", "6c2a5b8e-58a5-4b0f-9d0e-5f3c9a1e2b7d:1234", "", "publish", "-1", "x"};
  size_t al[] = {5, 41, 0, 7, 2, 1};
  for (int script = 1; script <= SCRIPT_N; script++) {
    for (int nkeys = 0; nkeys <= 4; nkeys++) {
      for (int nargs = 0; nargs <= 6; nargs++) {
        req_t *r = rlock__script_req(script, nkeys, keys, kl, nargs, args, nargs % 2 ? al : NULL, 1000, NULL, NULL);
        CHECK(r);
        CHECK_EQ(r->script, script);
        const char *argv[16];
        size_t lens[16];
        char nk[8];
        snprintf(nk, sizeof nk, "%d", nkeys);
        char sha[41];
        sha1_hex(rlock__script_body(script), sha);
        argv[0] = "EVALSHA", argv[1] = sha, argv[2] = nk;
        lens[0] = 7, lens[1] = 40, lens[2] = strlen(nk);
        for (int i = 0; i < nkeys; i++) argv[3 + i] = keys[i], lens[3 + i] = kl[i];
        for (int i = 0; i < nargs; i++) argv[3 + nkeys + i] = args[i], lens[3 + nkeys + i] = al[i];
        size_t n;
        char *want = reference(3 + nkeys + nargs, argv, lens, &n);
        CHECK_EQ(r->len, n);
        CHECK_MSG(!memcmp(r->cmd, want, n), "script %d, %d keys, %d args: EVALSHA bytes differ", script, nkeys, nargs);
        free(want);
        CHECK_OK(rlock__script_to_eval(r));
        argv[0] = "EVAL", lens[0] = 4;
        argv[1] = rlock__script_body(script), lens[1] = strlen(argv[1]);
        want = reference(3 + nkeys + nargs, argv, lens, &n);
        CHECK_EQ(r->len, n);
        CHECK_MSG(!memcmp(r->cmd, want, n), "script %d: EVAL bytes differ", script);
        free(want);
        rlock__req_free(r);
      }
    }
  }
}

/* rlock__reply_fast (the command connection's integer and nil replies,
 * parsed without the reader) gives what the shared reader gives for the
 * same bytes, or NULL: never another reply, never another length. */
static void check_fast(const char *bytes) {
  size_t n = strlen(bytes), used = 0;
  rlock_reply_t *fast = rlock__reply_fast(bytes, n, &used);
  redisReader *rd = rlock__reply_reader_new(true);
  CHECK(rd);
  CHECK(redisReaderFeed(rd, bytes, n) == REDIS_OK);
  void *want = NULL;
  int rc = redisReaderGetReply(rd, &want);
  if (fast) {
    CHECK_MSG(rc == REDIS_OK && want, "fast parse of %s: the reader finds no whole reply", bytes);
    rlock_reply_t *w = want;
    CHECK_MSG(fast->type == w->type, "fast parse of %s: another type", bytes);
    CHECK_MSG(fast->integer == w->integer, "fast parse of %s: %lld, the reader %lld", bytes, (long long)fast->integer,
              (long long)w->integer);
    CHECK_MSG(used == n - rd->len + rd->pos, "fast parse of %s: %zu bytes taken", bytes, used);
  }
  rlock_reply_free(fast);
  if (rc == REDIS_OK) rlock_reply_free(want);
  redisReaderFree(rd);
}

TEST(fast_replies) {
  const char *cases[] = {":0\r\n",
                         ":1\r\n",
                         ":2\r\n",
                         ":-1\r\n",
                         ":-3\r\n",
                         ":-4\r\n",
                         ":-0\r\n",
                         ":00\r\n",
                         ":3\r\n",
                         ":4\r\n",
                         ":29999\r\n",
                         ":-29999\r\n",
                         ":007\r\n",
                         ":123456789012345678\r\n",
                         ":1234567890123456789\r\n",
                         ":9223372036854775807\r\n",
                         "$-1\r\n",
                         "*-1\r\n",
                         "$-1\r\n:1\r\n",
                         ":1\r\n:2\r\n",
                         ":1\r",
                         ":1",
                         ":",
                         ":-\r\n",
                         ":\r\n",
                         ":1x\r\n",
                         ":+1\r\n",
                         "$-2\r\n",
                         "$1\r\na\r\n",
                         "+OK\r\n",
                         "-ERR x\r\n",
                         "*2\r\n:1\r\n:2\r\n",
                         "$-1\r",
                         ""};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check_fast(cases[i]);
  size_t used;
  CHECK(rlock__reply_fast(":-1\r\n", 5, &used) && used == 5);       /* the shared -1 */
  CHECK(!rlock__reply_fast(":12", 3, &used));                       /* not whole */
  CHECK(!rlock__reply_fast("+OK\r\n", 5, &used));                   /* not an integer or nil */
  CHECK(!rlock__reply_fast(":1234567890123456789\r\n", 22, &used)); /* long: the reader's */
  rlock_reply_t *big = rlock__reply_fast(":29999\r\n", 8, &used);
  CHECK(big && big->type == RLOCK_REPLY_INTEGER && big->integer == 29999 && used == 8);
  rlock_reply_free(big);
  rlock_reply_t *neg = rlock__reply_fast(":-29999\r\n", 9, &used);
  CHECK(neg && neg->integer == -29999 && used == 9);
  rlock_reply_free(neg);
}

/* rlock__reply_reader_idle: the reader holds nothing once every whole reply
 * is taken (GetReply called until it finds none, as conn.c feed does), and
 * something while a reply is partly read (its type byte, an array's first
 * elements). hiredis leaves ridx at 0 after a GetReply that found no byte. */
static void drain(redisReader *rd) {
  for (;;) {
    void *r = NULL;
    CHECK(redisReaderGetReply(rd, &r) == REDIS_OK);
    if (!r) return;
    rlock_reply_free(r);
  }
}

static int idle_after(const char *const *pieces) {
  redisReader *rd = rlock__reply_reader_new(true);
  CHECK(rd);
  for (; *pieces; pieces++) {
    CHECK(redisReaderFeed(rd, *pieces, strlen(*pieces)) == REDIS_OK);
    drain(rd);
  }
  int idle = rlock__reply_reader_idle(rd);
  redisReaderFree(rd);
  return idle;
}

TEST(reader_idle) {
  CHECK(idle_after((const char *const[]){NULL}));
  CHECK_MSG(idle_after((const char *const[]){":1\r\n", NULL}), "a whole integer read: the reader holds nothing");
  CHECK_MSG(idle_after((const char *const[]){"+OK\r\n$3\r\nabc\r\n", ":5\r\n", NULL}), "after whole replies");
  CHECK_MSG(idle_after((const char *const[]){":1", "2\r\n", NULL}), "a reply completed by a second read");
  CHECK_MSG(idle_after((const char *const[]){"*2\r\n:1\r\n", ":2\r\n", NULL}), "an array completed");
  CHECK_MSG(!idle_after((const char *const[]){":", NULL}), "a type byte read: not idle");
  CHECK_MSG(!idle_after((const char *const[]){":1\r\n:", NULL}), "a type byte read after a reply: not idle");
  CHECK_MSG(!idle_after((const char *const[]){":12", NULL}), "an integer partly read: not idle");
  CHECK_MSG(!idle_after((const char *const[]){"*2\r\n:1\r\n", NULL}), "an array's first element read: not idle");
  CHECK_MSG(!idle_after((const char *const[]){"*2\r\n", NULL}), "an array's header read: not idle");
  CHECK_MSG(!idle_after((const char *const[]){"$5\r\nab", NULL}), "a bulk string partly read: not idle");
}

/* util.c's integer and hex writers (two digits per step, 8 nibbles per
 * step): every length, both ends, random values, against snprintf. */
static void check_int(int64_t v) {
  char want[32], got[32];
  int wn = snprintf(want, sizeof want, "%lld", (long long)v);
  memset(got, 'X', sizeof got);
  CHECK_EQ(rlock__i64toa(v, got), (size_t)wn);
  CHECK_MSG(!strcmp(got, want), "i64toa(%s) wrote %s", want, got);
  if (v >= 0) {
    memset(got, 'X', sizeof got);
    CHECK_EQ(rlock__u64toa((uint64_t)v, got), (size_t)wn);
    CHECK_MSG(!strcmp(got, want), "u64toa(%s) wrote %s", want, got);
  }
}

TEST(integer_and_hex_formatting) {
  check_int(0), check_int(INT64_MAX), check_int(INT64_MIN), check_int(-1);
  int64_t p = 1;
  for (int k = 0; k < 19; k++) { /* p = 10^k */
    check_int(p - 1), check_int(p), check_int(p + 1), check_int(-p), check_int(-p + 1), check_int(-p - 1);
    if (k < 18) p *= 10;
  }
  char want[32], got[32];
  CHECK_EQ(rlock__u64toa(UINT64_MAX, got), 20u);
  snprintf(want, sizeof want, "%llu", (unsigned long long)UINT64_MAX);
  CHECK(!strcmp(got, want));
  rlock__prng_t g;
  rlock__prng_seed(&g);
  for (int i = 0; i < 100000; i++) {
    uint64_t r = rlock__prng_next(&g);
    check_int((int64_t)r);
    check_int((int64_t)(r >> (r & 63)));
  }
  /* request ids: 32 lowercase hex digits, the two words' nibbles, NUL */
  rlock__prng_t a, b;
  rlock__prng_seed(&a);
  b = a;
  for (int i = 0; i < 10000; i++) {
    char id[33];
    memset(id, 'X', sizeof id);
    rlock__prng_hex(&a, id);
    uint64_t w[2] = {rlock__prng_next(&b), rlock__prng_next(&b)};
    CHECK(id[32] == 0);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ /* (big-endian: another order of the same digits) */
    for (int k = 0; k < 32; k++) {
      unsigned nib = (unsigned)(w[k / 16] >> (4 * (k % 16))) & 15;
      CHECK_MSG(id[k] == "0123456789abcdef"[nib], "id %s: digit %d is not nibble %u", id, k, nib);
    }
#else
    for (int k = 0; k < 32; k++) CHECK(strchr("0123456789abcdef", id[k]) && id[k]);
#endif
  }
}

int main(int argc, char **argv) {
  th_init(argc, argv, 110);
  RUN(chosen_shapes);
  RUN(random_vectors);
  RUN(reused_requests);
  RUN(requests);
  RUN(script_requests);
  RUN(fast_replies);
  RUN(reader_idle);
  RUN(integer_and_hex_formatting);
  return th_done();
}
