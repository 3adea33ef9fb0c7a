/* test_names.c -- key names and hash slots (lib/names.c, internal API).
 *
 * Every key derived from a lock NAME (channel, latches, any prefix or suffix
 * form) must hash to NAME's Cluster slot whatever the name, and names whose
 * Redisson form already does so keep Redisson's exact string. Checked for the
 * awkward names ("a{b", "{}x", "{a}{b}", "x}{", "}", ...), random byte
 * strings rich in braces and long names; rlock__names_slot is checked against a real
 * server's CLUSTER KEYSLOT; and a one-node cluster (which refuses cross-slot
 * scripts with CROSSSLOT) runs lock, wait and unlock on the awkward names. */
#include "harness.h"
#include "internal.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char *awkward[] = {"a{b",   "{}x",     "{a}{b}", "x}{", "}",   "{",     "{}",         "}{",         "a}b",
                                "{{a}}", "x{}y{z}", "{a",     "a{",  "{}}", "a{b}c", "plain:name", "{tag}:lock", "{x}"};
#define NAWKWARD (sizeof awkward / sizeof *awkward)

static const char *prefixes[] = {"redisson_lock__channel", "rlock_acquire_latch", "redisson_unlock_latch",
                                 "redisson_lock_queue"};
static const char *suffixes[] = {NULL, "0123456789abcdef0123456789abcdef", "6c2a5b8e-58a5-4b0f-9d0e-5f3c9a1e2b7d:1234"};

/* ------------------------------------------------------------ reference implementations */

static uint16_t ref_crc16(const unsigned char *p, size_t n) { /* bit by bit, as in the Cluster spec */
  uint16_t crc = 0;
  for (size_t i = 0; i < n; i++) {
    crc ^= (uint16_t)(p[i] << 8);
    for (int b = 0; b < 8; b++) crc = crc & 0x8000 ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
  }
  return crc;
}

static uint16_t ref_slot(const char *k, size_t n) {
  size_t s = 0;
  while (s < n && k[s] != '{') s++;
  if (s < n) {
    size_t e = s + 1;
    while (e < n && k[e] != '}') e++;
    if (e < n && e != s + 1) return ref_crc16((const unsigned char *)k + s + 1, e - s - 1) & 16383;
  }
  return ref_crc16((const unsigned char *)k, n) & 16383;
}

/* Redisson's prefix form "P:{NAME}" / "P:NAME" (+ ":S"). */
static char *redisson_prefixed(const char *p, const char *name, size_t len, const char *s, size_t *out) {
  bool brace = memchr(name, '{', len) != NULL;
  char *k = malloc(strlen(p) + len + (s ? strlen(s) : 0) + 8);
  size_t o = (size_t)sprintf(k, "%s:%s", p, brace ? "" : "{");
  memcpy(k + o, name, len), o += len;
  if (!brace) k[o++] = '}';
  if (s) o += (size_t)sprintf(k + o, ":%s", s);
  *out = o;
  return k;
}

/* ------------------------------------------------------------ pure checks */

TEST(crc16_and_slot) {
  CHECK_EQ(rlock__names_crc16("123456789", 9), 0x31c3); /* the CRC16/XMODEM check value */
  rlock__prng_t prng;
  rlock__prng_seed(&prng);
  char buf[300];
  for (int i = 0; i < 20000; i++) {
    size_t n = rlock__prng_next(&prng) % sizeof buf;
    for (size_t j = 0; j < n; j++) {
      uint64_t r = rlock__prng_next(&prng);
      buf[j] = r % 4 == 0 ? "{}"[r / 4 % 2] : (char)(r >> 8);
    }
    CHECK_EQ(rlock__names_crc16(buf, n), ref_crc16((unsigned char *)buf, n));
    CHECK_EQ(rlock__names_slot(buf, n), ref_slot(buf, n));
  }
  CHECK_EQ(rlock__names_slot("{user1000}.following", 20), rlock__names_slot("user1000", 8));
  CHECK_EQ(rlock__names_slot("foo{}{bar}", 10), ref_crc16((const unsigned char *)"foo{}{bar}", 10) & 16383);
  CHECK_EQ(rlock__names_slot("foo{{bar}}zap", 13), rlock__names_slot("{bar", 4));
}

TEST(slot_tags) {
  /* every slot has its tag: the first string over [0-9a-z], shortest first */
  static char first[16384][5];
  const char *al = "0123456789abcdefghijklmnopqrstuvwxyz";
  int found = 0;
  for (int len = 1; len <= 4 && found < 16384; len++) {
    long total = 1;
    for (int i = 0; i < len; i++) total *= 36;
    for (long v = 0; v < total && found < 16384; v++) {
      char s[5] = {0};
      long x = v;
      for (int i = len - 1; i >= 0; i--, x /= 36) s[i] = al[x % 36];
      uint16_t slot = ref_crc16((unsigned char *)s, (size_t)len) & 16383;
      if (!first[slot][0]) memcpy(first[slot], s, 5), found++;
    }
  }
  CHECK_EQ(found, 16384);
  for (int slot = 0; slot < 16384; slot++) {
    const char *t = rlock__names_tag((uint16_t)slot);
    CHECK_MSG(!strcmp(t, first[slot]), "slot %d: tag '%s', expected '%s'", slot, t, first[slot]);
    CHECK_EQ(ref_slot(t, strlen(t)), slot);
  }
}

/* Every derived key of name lands in its slot; Redisson's exact string when
 * that one does; the slot-tag form "P:{T}NAME" otherwise. */
static void check_name(const char *name, size_t len) {
  uint16_t slot = ref_slot(name, len);
  bool braces = memchr(name, '{', len) || memchr(name, '}', len);
  for (size_t p = 0; p < sizeof prefixes / sizeof *prefixes; p++)
    for (size_t s = 0; s < sizeof suffixes / sizeof *suffixes; s++) {
      bytes_t k = {0};
      CHECK_OK(rlock__names_prefixed_suffix(&k, prefixes[p], name, len, suffixes[s]));
      CHECK_MSG(ref_slot(k.p, k.n) == slot, "'%.*s' -> '%.80s': slot %u != %u", (int)(len > 60 ? 60 : len), name, k.p,
                ref_slot(k.p, k.n), slot);
      size_t rl;
      char *red = redisson_prefixed(prefixes[p], name, len, suffixes[s], &rl);
      if (ref_slot(red, rl) == slot) {
        CHECK_MSG(k.n == rl && !memcmp(k.p, red, rl), "'%.*s': not Redisson's string", (int)len, name);
      } else {
        CHECK_MSG(braces, "a name without braces left Redisson's form: '%.*s'", (int)len, name);
        const char *t = rlock__names_tag(slot);
        size_t o = strlen(prefixes[p]) + 3 + strlen(t);
        CHECK(k.n == o + len + (suffixes[s] ? strlen(suffixes[s]) + 1 : 0));
        CHECK(!memcmp(k.p, prefixes[p], strlen(prefixes[p])) && k.p[strlen(prefixes[p])] == ':');
        CHECK(k.p[strlen(prefixes[p]) + 1] == '{' && !memcmp(k.p + strlen(prefixes[p]) + 2, t, strlen(t)));
        CHECK(k.p[o - 1] == '}' && !memcmp(k.p + o, name, len));
      }
      free(red);
      if (p == 0 && s == 0) { /* rlock__names_prefixed is the suffix-less form */
        bytes_t k2 = {0};
        CHECK_OK(rlock__names_prefixed(&k2, prefixes[p], name, len));
        CHECK(k2.n == k.n && !memcmp(k2.p, k.p, k.n));
        free(k2.p);
      }
      free(k.p);
    }
  bytes_t k = {0}; /* suffix form "{NAME}:S" */
  CHECK_OK(rlock__names_suffixed(&k, name, len, "timeout"));
  CHECK_EQ(ref_slot(k.p, k.n), slot);
  if (!braces)
    CHECK(k.n == len + 10 && k.p[0] == '{' && !memcmp(k.p + 1, name, len) && !strcmp(k.p + len + 1, "}:timeout"));
  free(k.p);
}

TEST(awkward_names) {
  for (size_t i = 0; i < NAWKWARD; i++) check_name(awkward[i], strlen(awkward[i]));
  /* exact strings: Redisson's where it lands, the slot tag where it does not */
  bytes_t k;
  CHECK_OK(rlock__names_prefixed(&k, "redisson_lock__channel", "lock:1", 6));
  CHECK_STREQ(k.p, "redisson_lock__channel:{lock:1}");
  free(k.p);
  CHECK_OK(rlock__names_prefixed(&k, "redisson_lock__channel", "{a}{b}", 6));
  CHECK_STREQ(k.p, "redisson_lock__channel:{a}{b}");
  free(k.p);
  CHECK_OK(rlock__names_prefixed_suffix(&k, "redisson_unlock_latch", "cross:{tag}:lock", 16, "r1"));
  CHECK_STREQ(k.p, "redisson_unlock_latch:cross:{tag}:lock:r1");
  free(k.p);
  char want[64];
  snprintf(want, sizeof want, "redisson_lock__channel:{%s}a{b", rlock__names_tag(rlock__names_slot("a{b", 3)));
  CHECK_OK(rlock__names_prefixed(&k, "redisson_lock__channel", "a{b", 3));
  CHECK_STREQ(k.p, want);
  free(k.p);
}

TEST(random_names) {
  rlock__prng_t prng;
  rlock__prng_seed(&prng);
  char buf[64];
  for (int i = 0; i < 5000; i++) {
    size_t n = 1 + rlock__prng_next(&prng) % 40;
    for (size_t j = 0; j < n; j++) {
      uint64_t r = rlock__prng_next(&prng);
      buf[j] = r % 3 == 0 ? "{}"[r / 3 % 2] : r % 3 == 1 ? "ab:"[r / 3 % 3] : (char)(r >> 16);
    }
    check_name(buf, n);
  }
  /* without braces: always Redisson's strings (check_name fails otherwise) */
  for (int i = 0; i < 2000; i++) {
    size_t n = 1 + rlock__prng_next(&prng) % 40;
    for (size_t j = 0; j < n; j++) {
      char c;
      do c = (char)rlock__prng_next(&prng);
      while (c == '{' || c == '}');
      buf[j] = c;
    }
    check_name(buf, n);
  }
}

TEST(long_names) {
  size_t n = RLOCK_NAME_MAX;
  char *name = malloc(n);
  for (size_t i = 0; i < n; i++) name[i] = (char)('a' + i % 26);
  check_name(name, n);
  name[n / 2] = '{';
  check_name(name, n); /* a '{' never closed */
  name[n / 2 + 1] = '}';
  check_name(name, n); /* empty tag */
  name[n - 1] = '}';
  name[n / 2 + 1] = 'x';
  check_name(name, n); /* a tag of half the name */
  free(name);
}

/* b spells a key body of a: Redisson's "{a}" or our "{T}a". */
static bool spells(const char *a, size_t al, const char *b, size_t bl) {
  if (bl == al + 2 && b[0] == '{' && b[bl - 1] == '}' && !memcmp(b + 1, a, al)) return true;
  const char *t = rlock__names_tag(rlock__names_slot(a, al));
  size_t tl = strlen(t);
  return bl == al + tl + 2 && b[0] == '{' && !memcmp(b + 1, t, tl) && b[tl + 1] == '}' && !memcmp(b + tl + 2, a, al);
}

/* Derived keys of distinct names are distinct, except where one name spells
 * the other's key body (Redisson's own "x" / "{x}", ours "a{b" / "{T}a{b"). */
TEST(distinct_keys) {
  rlock__prng_t prng;
  rlock__prng_seed(&prng);
  enum { N = 3000 };
  static char names[N][12];
  size_t lens[N];
  bytes_t keys[N];
  int same = 0;
  for (int i = 0; i < N; i++) {
    lens[i] = 1 + rlock__prng_next(&prng) % 8;
    for (size_t j = 0; j < lens[i]; j++) names[i][j] = "ab{}"[rlock__prng_next(&prng) % 4];
    CHECK_OK(rlock__names_prefixed_suffix(&keys[i], "rlock_acquire_latch", names[i], lens[i], "id"));
  }
  for (int i = 0; i < N; i++)
    for (int j = i + 1; j < N; j++) {
      if (lens[i] == lens[j] && !memcmp(names[i], names[j], lens[i])) continue;
      if (keys[i].n != keys[j].n || memcmp(keys[i].p, keys[j].p, keys[i].n)) continue;
      same++;
      CHECK_MSG(spells(names[i], lens[i], names[j], lens[j]) || spells(names[j], lens[j], names[i], lens[i]),
                "'%.*s' and '%.*s' share key %s", (int)lens[i], names[i], (int)lens[j], names[j], keys[i].p);
    }
  printf("# %d pairs of distinct names share a key, each the documented case\n", same);
  for (int i = 0; i < N; i++) free(keys[i].p);
}

/* ------------------------------------------------------------ against a real server */

/* A cluster-enabled redis-server (no slots yet). Its bus port is given: the
 * default (port + 10000) does not exist for the harness's high ports. */
static th_server_t *cluster_node(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0);
  close(fd);
  static char bus[16];
  snprintf(bus, sizeof bus, "%d", ntohs(a.sin_port));
  static const char *const args[] = {"--cluster-enabled", "yes", "--cluster-port", bus, NULL};
  th_server_opts_t o = {.extra_args = args};
  return th_server_start(&o);
}

static void check_keyslot(th_server_t *s, const char *k, size_t n) {
  const char *argv[3] = {"CLUSTER", "KEYSLOT", k};
  size_t lens[3] = {7, 7, n};
  redisReply *r = th_cmdv(s, 3, argv, lens);
  CHECK_MSG(r && r->type == REDIS_REPLY_INTEGER, "CLUSTER KEYSLOT: %s", r && r->str ? r->str : "?");
  CHECK_MSG(r->integer == rlock__names_slot(k, n), "key '%.*s': server slot %lld, ours %u", (int)n, k, r->integer,
            rlock__names_slot(k, n));
  th_reply_free(r);
}

TEST(cluster_keyslot) {
  th_server_t *s = cluster_node();
  rlock__prng_t prng;
  rlock__prng_seed(&prng);
  int checked = 0;
  for (size_t i = 0; i < NAWKWARD; i++) {
    const char *nm = awkward[i];
    check_keyslot(s, nm, strlen(nm)), checked++;
    for (size_t p = 0; p < 3; p++) {
      bytes_t k;
      CHECK_OK(rlock__names_prefixed_suffix(&k, prefixes[p], nm, strlen(nm), p ? "0123abcd" : NULL));
      check_keyslot(s, k.p, k.n), checked++;
      free(k.p);
    }
  }
  char buf[48];
  for (int i = 0; i < 300; i++) {
    size_t n = rlock__prng_next(&prng) % sizeof buf;
    for (size_t j = 0; j < n; j++) {
      uint64_t r = rlock__prng_next(&prng);
      buf[j] = r % 3 == 0 ? "{}"[r / 3 % 2] : (char)(r >> 16);
    }
    check_keyslot(s, buf, n), checked++;
  }
  printf("# %d keys: rlock__names_slot == CLUSTER KEYSLOT\n", checked);
  th_server_stop(s);
}

static int cluster_ok(void *arg) {
  char *info = th_cmd_str(arg, "CLUSTER", "INFO", NULL);
  int ok = info && strstr(info, "cluster_state:ok") != NULL;
  free(info);
  return ok;
}

typedef struct waiter_arg {
  rlock_lock_t *l;
  int rc;
} waiter_arg_t;

static void *wait_for_it(void *arg) {
  waiter_arg_t *w = arg;
  w->rc = rlock_lock_acquire(w->l, 2, 20000, 10000, NULL);
  return NULL;
}

/* A one-node cluster owning every slot refuses any script or DEL whose keys
 * span slots (CROSSSLOT): lock, re-enter, wait for (through the channel) and
 * unlock each awkward name. */
static th_server_t *node;
static char chan[128];
static int chan_subscribed(void *arg) {
  (void)arg;
  return th_numsub(node, chan) >= 1;
}

TEST(one_node_cluster_locks) {
  node = cluster_node();
  th_reply_free(th_cmd(node, "CLUSTER", "ADDSLOTSRANGE", "0", "16383", NULL));
  CHECK(th_wait_until(cluster_ok, node, 20000));
  rlock_client_t *c = th_client(node->url, 0);
  char owner[80];
  th_owner_id(c, 1, owner, sizeof owner);
  for (size_t i = 0; i < NAWKWARD; i++) {
    const char *nm = awkward[i];
    rlock_lock_t *l = th_lock(c, nm);
    CHECK_OK(rlock_lock_acquire(l, 1, 0, RLOCK_LEASE_WATCHDOG, NULL));
    CHECK_OK(rlock_lock_acquire(l, 1, 0, RLOCK_LEASE_WATCHDOG, NULL)); /* re-entry */
    CHECK_EQ(th_hget_num(node, nm, owner), 2);
    CHECK_RC(rlock_lock_acquire(l, 2, 0, 10000, NULL), RLOCK_EBUSY);
    CHECK_OK(rlock_lock_release(l, 1));
    /* a waiter parks on the lock's channel; the last unlock's message wakes it */
    bytes_t ch;
    CHECK_OK(rlock__names_prefixed(&ch, "redisson_lock__channel", nm, strlen(nm)));
    snprintf(chan, sizeof chan, "%s", ch.p);
    free(ch.p);
    waiter_arg_t w = {l, 1};
    pthread_t t;
    pthread_create(&t, NULL, wait_for_it, &w);
    CHECK(th_wait_until(chan_subscribed, NULL, 10000));
    CHECK_OK(rlock_lock_release(l, 1));
    pthread_join(t, NULL);
    CHECK_OK(w.rc); /* within 20 s of a 30 s watchdog lease: the message came */
    CHECK_OK(rlock_lock_release(l, 2));
    int locked = 1;
    CHECK_OK(rlock_lock_is_locked(l, &locked));
    CHECK_EQ(locked, 0);
    rlock_lock_free(l);
  }
  rlock_client_free(c);
  th_server_stop(node);
}

/* An argument runs only the test of that name. */
#define RUN_IF(name) \
  if (argc < 2 || !strcmp(argv[1], #name)) RUN(name)

int main(int argc, char **argv) {
  th_init(argc, argv, 110);
  RUN_IF(crc16_and_slot);
  RUN_IF(slot_tags);
  RUN_IF(awkward_names);
  RUN_IF(random_names);
  RUN_IF(long_names);
  RUN_IF(distinct_keys);
  RUN_IF(cluster_keyslot);
  RUN_IF(one_node_cluster_locks);
  return th_done();
}
