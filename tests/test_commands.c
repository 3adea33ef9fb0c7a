/* test_commands.c -- rlock_client_command: plain Redis commands on the
 * client's user connection (strings, integers, status, nil, error
 * replies, nested arrays, binary-safe arguments, big values, concurrent
 * callers), freeing of the replies, and automatic pipelining (a burst of
 * queued requests leaves in one write). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"

static th_server_t *srv;
static rlock_client_t *cli;

static rlock_reply_t *cmd(int argc, const char *const *argv) {
  rlock_reply_t *r = NULL;
  CHECK_OK(rlock_client_command(cli, argc, argv, NULL, &r));
  CHECK(r != NULL);
  return r;
}

TEST(set_get_incr) {
  const char *set[] = {"SET", "cmd:k", "hello"};
  rlock_reply_t *r = cmd(3, set);
  CHECK_EQ(r->type, RLOCK_REPLY_STATUS);
  CHECK_STREQ(r->str, "OK");
  CHECK_EQ(r->len, 2);
  rlock_reply_free(r);

  const char *get[] = {"GET", "cmd:k"};
  r = cmd(2, get);
  CHECK_EQ(r->type, RLOCK_REPLY_STRING);
  CHECK_STREQ(r->str, "hello");
  CHECK_EQ(r->len, 5);
  rlock_reply_free(r);

  /* The raw client sees what the library wrote. */
  char *v = th_cmd_str(srv, "GET", "cmd:k", NULL);
  CHECK_STREQ(v, "hello");
  free(v);

  const char *incr[] = {"INCR", "cmd:n"};
  for (int i = 1; i <= 3; i++) {
    r = cmd(2, incr);
    CHECK_EQ(r->type, RLOCK_REPLY_INTEGER);
    CHECK_EQ(r->integer, i);
    rlock_reply_free(r);
  }
  const char *incrby[] = {"INCRBY", "cmd:n", "-10"};
  r = cmd(3, incrby);
  CHECK_EQ(r->integer, -7);
  rlock_reply_free(r);

  const char *missing[] = {"GET", "cmd:missing"};
  r = cmd(2, missing);
  CHECK_EQ(r->type, RLOCK_REPLY_NIL);
  rlock_reply_free(r);
}

TEST(error_reply) {
  const char *incr[] = {"INCR", "cmd:k"}; /* "hello" is not an integer */
  rlock_reply_t *r = NULL;
  CHECK_OK(rlock_client_command(cli, 2, incr, NULL, &r));
  CHECK_EQ(r->type, RLOCK_REPLY_ERROR);
  CHECK(r->str && strncmp(r->str, "ERR", 3) == 0);
  CHECK_EQ(r->len, strlen(r->str));
  rlock_reply_free(r);

  const char *bogus[] = {"NOSUCHCOMMAND", "x"};
  r = cmd(2, bogus);
  CHECK_EQ(r->type, RLOCK_REPLY_ERROR);
  rlock_reply_free(r);

  const char *wrongtype[] = {"HGET", "cmd:k", "f"};
  r = cmd(3, wrongtype);
  CHECK_EQ(r->type, RLOCK_REPLY_ERROR);
  CHECK(strstr(r->str, "WRONGTYPE") != NULL);
  rlock_reply_free(r);

  /* The connection is still fine afterwards. */
  const char *ping[] = {"PING"};
  r = cmd(1, ping);
  CHECK_EQ(r->type, RLOCK_REPLY_STATUS);
  CHECK_STREQ(r->str, "PONG");
  rlock_reply_free(r);
}

TEST(arrays) {
  const char *push[] = {"RPUSH", "cmd:list", "a", "bb", "ccc"};
  rlock_reply_free(cmd(5, push));
  const char *range[] = {"LRANGE", "cmd:list", "0", "-1"};
  rlock_reply_t *r = cmd(4, range);
  CHECK_EQ(r->type, RLOCK_REPLY_ARRAY);
  CHECK_EQ(r->elements, 3);
  CHECK_STREQ(r->element[0]->str, "a");
  CHECK_STREQ(r->element[2]->str, "ccc");
  CHECK_EQ(r->element[1]->len, 2);
  rlock_reply_free(r);

  const char *empty[] = {"LRANGE", "cmd:nolist", "0", "-1"};
  r = cmd(4, empty);
  CHECK_EQ(r->type, RLOCK_REPLY_ARRAY);
  CHECK_EQ(r->elements, 0);
  rlock_reply_free(r);

  /* Nested, mixed types (nil inside an array: Lua false). */
  const char *eval[] = {"EVAL", "return {1, {2, 'x', {}}, 'y', false}", "0"};
  r = cmd(3, eval);
  CHECK_EQ(r->type, RLOCK_REPLY_ARRAY);
  CHECK_EQ(r->elements, 4);
  CHECK_EQ(r->element[0]->type, RLOCK_REPLY_INTEGER);
  CHECK_EQ(r->element[0]->integer, 1);
  rlock_reply_t *in = r->element[1];
  CHECK_EQ(in->type, RLOCK_REPLY_ARRAY);
  CHECK_EQ(in->elements, 3);
  CHECK_EQ(in->element[0]->integer, 2);
  CHECK_STREQ(in->element[1]->str, "x");
  CHECK_EQ(in->element[2]->type, RLOCK_REPLY_ARRAY);
  CHECK_EQ(in->element[2]->elements, 0);
  CHECK_EQ(r->element[2]->type, RLOCK_REPLY_STRING);
  CHECK_EQ(r->element[3]->type, RLOCK_REPLY_NIL);
  rlock_reply_free(r);
}

TEST(binary_args) {
  const char key[] = "cmd:bin\0key";
  const char val[] = {'a', 0, 'b', (char)0xff, 0, 'c'};
  const char *argv[] = {"SET", key, val};
  size_t lens[] = {3, sizeof key - 1, sizeof val};
  rlock_reply_t *r = NULL;
  CHECK_OK(rlock_client_command(cli, 3, argv, lens, &r));
  CHECK_EQ(r->type, RLOCK_REPLY_STATUS);
  rlock_reply_free(r);

  const char *get[] = {"GET", key};
  size_t glens[] = {3, sizeof key - 1};
  CHECK_OK(rlock_client_command(cli, 2, get, glens, &r));
  CHECK_EQ(r->type, RLOCK_REPLY_STRING);
  CHECK_EQ(r->len, sizeof val);
  CHECK(memcmp(r->str, val, sizeof val) == 0);
  CHECK_EQ(r->str[r->len], 0); /* NUL-terminated after len bytes */
  rlock_reply_free(r);

  /* The key is exactly those bytes on the server. */
  const char *ex[] = {"STRLEN", key};
  size_t exlens[] = {6, sizeof key - 1};
  redisReply *rr = th_cmdv(srv, 2, ex, exlens);
  CHECK_EQ(rr->integer, sizeof val);
  th_reply_free(rr);
}

TEST(big_value) {
  size_t n = 4u << 20;
  char *big = malloc(n);
  CHECK(big != NULL);
  for (size_t i = 0; i < n; i++) big[i] = (char)('a' + i % 26);
  const char *argv[] = {"SET", "cmd:big", big};
  size_t lens[] = {3, 7, n};
  rlock_reply_t *r = NULL;
  CHECK_OK(rlock_client_command(cli, 3, argv, lens, &r));
  rlock_reply_free(r);
  const char *get[] = {"GET", "cmd:big"};
  r = cmd(2, get);
  CHECK_EQ(r->len, n);
  CHECK(memcmp(r->str, big, n) == 0);
  rlock_reply_free(r);
  free(big);
}

TEST(bad_args) {
  rlock_reply_t *r = NULL;
  const char *argv[] = {"PING"};
  CHECK_RC(rlock_client_command(cli, 0, argv, NULL, &r), RLOCK_EINVAL);
  CHECK_RC(rlock_client_command(cli, 1, NULL, NULL, &r), RLOCK_EINVAL);
  CHECK_RC(rlock_client_command(cli, 1, argv, NULL, NULL), RLOCK_EINVAL);
  CHECK_RC(rlock_client_command(NULL, 1, argv, NULL, &r), RLOCK_EINVAL);
  rlock_reply_free(NULL); /* a no-op, like free(NULL) */
}

#define NTHREADS 6
#define NCMDS 300

static void *incr_thread(void *arg) {
  const char *key = arg;
  for (int i = 0; i < NCMDS; i++) {
    const char *argv[] = {"INCR", key};
    rlock_reply_t *r = NULL;
    int rc = rlock_client_command(cli, 2, argv, NULL, &r);
    CHECK_OK(rc);
    CHECK_EQ(r->type, RLOCK_REPLY_INTEGER);
    CHECK_EQ(r->integer, i + 1); /* each thread's own key: replies stay in order */
    rlock_reply_free(r);
  }
  return NULL;
}

TEST(concurrent_callers) {
  pthread_t t[NTHREADS];
  char keys[NTHREADS][32];
  for (int i = 0; i < NTHREADS; i++) {
    snprintf(keys[i], sizeof keys[i], "cmd:conc:%d", i);
    CHECK_EQ(pthread_create(&t[i], NULL, incr_thread, keys[i]), 0);
  }
  for (int i = 0; i < NTHREADS; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < NTHREADS; i++) {
    char *v = th_cmd_str(srv, "GET", keys[i], NULL);
    CHECK_EQ(strtoll(v, NULL, 10), NCMDS);
    free(v);
  }
  rlock_stats_t st;
  rlock_client_stats(cli, &st);
  CHECK(st.user_commands >= NTHREADS * NCMDS);
}

/* Automatic pipelining: every request the I/O thread takes in one pass
 * leaves in one socket write (below 2 KiB: lib/conn.c EARLY_FLUSH). The
 * I/O thread is held in an async callback while a burst of NBURST requests is queued; released, it takes them all
 * in one pass: commands_sent grows by NBURST, writes by one. */
#define NBURST 50

typedef struct burst {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int held, release, done, failed;
} burst_t;

static void hold_cb(rlock_lock_t *l, int status, int64_t value, void *arg) {
  burst_t *b = arg;
  pthread_mutex_lock(&b->mu);
  b->held = 1;
  pthread_cond_broadcast(&b->cv);
  while (!b->release) pthread_cond_wait(&b->cv, &b->mu);
  pthread_mutex_unlock(&b->mu);
}

static void count_cb(rlock_lock_t *l, int status, int64_t value, void *arg) {
  burst_t *b = arg;
  pthread_mutex_lock(&b->mu);
  b->done++;
  if (status != 0) b->failed++;
  pthread_cond_broadcast(&b->cv);
  pthread_mutex_unlock(&b->mu);
}

/* Waits (bounded: 10 s) until *v >= want under b->mu. */
static int burst_wait(burst_t *b, int *v, int want) {
  int64_t deadline = th_now_ms() + 10000;
  pthread_mutex_lock(&b->mu);
  while (*v < want && th_now_ms() < deadline) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 20 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&b->cv, &b->mu, &ts);
  }
  int got = *v;
  pthread_mutex_unlock(&b->mu);
  return got;
}

/* Queues n requests while the I/O thread is held, releases it: the
 * commands sent and the socket writes that carried them. */
static void burst(int n, uint64_t *cmds, uint64_t *writes) {
  rlock_lock_t *l = th_lock(cli, "cmd:burst");
  burst_t b = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0};
  CHECK_OK(rlock_lock_is_locked_async(l, hold_cb, &b));
  CHECK_MSG(burst_wait(&b, &b.held, 1) == 1, "the holding callback never ran");
  rlock_stats_t s0, s1;
  rlock_client_stats(cli, &s0);
  for (int i = 0; i < n; i++) CHECK_OK(rlock_lock_is_locked_async(l, count_cb, &b));
  pthread_mutex_lock(&b.mu);
  b.release = 1;
  pthread_cond_broadcast(&b.cv);
  pthread_mutex_unlock(&b.mu);
  CHECK_EQ(burst_wait(&b, &b.done, n), n);
  CHECK_EQ(b.failed, 0);
  rlock_client_stats(cli, &s1);
  *cmds = s1.commands_sent - s0.commands_sent, *writes = s1.writes - s0.writes;
  printf("# burst of %d: %llu commands in %llu writes\n", n, (unsigned long long)*cmds, (unsigned long long)*writes);
  rlock_lock_free(l);
}

TEST(burst_leaves_in_one_write) {
  uint64_t cmds, writes;
  burst(NBURST, &cmds, &writes); /* 50 x 31-byte EXISTS = 1550 bytes: below the early write (lib/conn.c EARLY_FLUSH) */
  CHECK_EQ(cmds, NBURST);
  CHECK_MSG(writes == 1, "%llu commands left in %llu writes, want 1 (no pipelining)", (unsigned long long)cmds,
            (unsigned long long)writes);
}

/* A large burst leaves in a few writes, not one: the pass writes what it
 * gathered each 2 KiB (lib/conn.c EARLY_FLUSH), so the server starts on it
 * while the pass goes on; still many commands per write. */
#define NBIG 1000
TEST(large_burst_leaves_early) {
  uint64_t cmds, writes;
  burst(NBIG, &cmds, &writes);
  CHECK_EQ(cmds, NBIG);
  CHECK_MSG(writes >= 2, "%llu commands (about 30 KiB) left in one write: no early write", (unsigned long long)cmds);
  CHECK_MSG(writes <= NBIG / 20, "%llu commands left in %llu writes: fewer than 20 per write", (unsigned long long)cmds,
            (unsigned long long)writes);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 100);
  srv = th_server_start(NULL);
  cli = th_client(srv->url, 0);
  RUN(set_get_incr);
  RUN(error_reply);
  RUN(arrays);
  RUN(binary_args);
  RUN(big_value);
  RUN(bad_args);
  RUN(concurrent_callers);
  RUN(burst_leaves_in_one_write);
  RUN(large_burst_leaves_early);
  rlock_client_free(cli);
  th_server_stop(srv);
  return th_done();
}
