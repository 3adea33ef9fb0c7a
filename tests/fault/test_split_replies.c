/* test_split_replies.c -- the command connection's replies cut at any byte
 * (the proxy's trickle: a few bytes per segment, read apart). The lock
 * scripts' integer and nil answers are parsed without hiredis's reader while
 * it holds nothing (conn.c feed, rlock__reply_fast); a reply that starts in
 * one read and ends in a later one, errors (NOSCRIPT) among integers and
 * negative integers must all reach the right request, in order. And an
 * array's integers (CLUSTER SLOTS' ports and slot ranges) arriving in reads
 * of their own belong to the array, not to the requests behind it. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "fault_harness.h"
#include "harness_cluster.h"
#include "proxy.h"

static th_server_t *srv;
static fp_proxy_t *px;

#define NLOCKS 24
#define OWNER_A ((rlock_owner_t)7)
#define OWNER_B ((rlock_owner_t)8)

typedef struct tally {
  atomic_int done;
  int status[NLOCKS];
  int64_t value[NLOCKS];
} tally_t;

typedef struct slot_arg {
  tally_t *t;
  int i;
} slot_arg_t;

static slot_arg_t args[NLOCKS];

static void cb(rlock_lock_t *l, int status, int64_t value, void *arg) {
  (void)l;
  slot_arg_t *a = arg;
  a->t->status[a->i] = status;
  a->t->value[a->i] = value;
  atomic_fetch_add(&a->t->done, 1);
}

static int all_done(void *arg) { return atomic_load(&((tally_t *)arg)->done) == NLOCKS; }

static void tally_reset(tally_t *t) {
  memset(t, 0, sizeof *t);
  for (int i = 0; i < NLOCKS; i++) args[i] = (slot_arg_t){t, i};
}

static void await_all(tally_t *t, const char *what) {
  CHECK_MSG(th_wait_until(all_done, t, 60000), "%s: %d of %d answered", what, atomic_load(&t->done), NLOCKS);
}

static rlock_client_t *client(void) {
  char url[64];
  snprintf(url, sizeof url, "redis://127.0.0.1:%d", fp_port(px));
  rlock_client_t *c = fh_client(url, 0, 60000, 1);
  rlock_lock_t *l = th_lock(c, "split:warm");
  int64_t ttl = 0;
  CHECK_OK(rlock_lock_ttl(l, &ttl)); /* connected, scripts loaded */
  rlock_lock_free(l);
  return c;
}

/* Pipelined acquires (nil), contended tries (the holder's TTL), reentrant
 * counts, TTLs of free names (-2), releases (0 then 1), with every reply cut
 * into pieces of 1 to `piece` bytes. */
static void run_round(size_t piece) {
  rlock_client_t *c = client();
  rlock_lock_t *l[NLOCKS];
  char name[32];
  for (int i = 0; i < NLOCKS; i++) {
    snprintf(name, sizeof name, "split:%zu:%d", piece, i);
    l[i] = th_lock(c, name);
  }
  fp_trickle(px, FP_DOWN, piece);
  tally_t t;

  tally_reset(&t);
  for (int i = 0; i < NLOCKS; i++) CHECK_OK(rlock_lock_acquire_async(l[i], OWNER_A, 0, 600000, NULL, cb, &args[i]));
  await_all(&t, "acquire");
  for (int i = 0; i < NLOCKS; i++) CHECK_MSG(t.status[i] == 0, "acquire %d: %s", i, rlock_err_name(t.status[i]));

  tally_reset(&t);
  for (int i = 0; i < NLOCKS; i++) CHECK_OK(rlock_lock_acquire_async(l[i], OWNER_B, 0, 600000, NULL, cb, &args[i]));
  await_all(&t, "contended try");
  for (int i = 0; i < NLOCKS; i++)
    CHECK_MSG(t.status[i] == RLOCK_EBUSY, "contended try %d: %s", i, rlock_err_name(t.status[i]));

  tally_reset(&t);
  for (int i = 0; i < NLOCKS; i++) CHECK_OK(rlock_lock_acquire_async(l[i], OWNER_A, 0, 600000, NULL, cb, &args[i]));
  await_all(&t, "reentrant acquire");
  for (int i = 0; i < NLOCKS; i++) CHECK_MSG(t.status[i] == 0, "reentrant %d: %s", i, rlock_err_name(t.status[i]));

  tally_reset(&t);
  for (int i = 0; i < NLOCKS; i++) CHECK_OK(rlock_lock_ttl_async(l[i], cb, &args[i]));
  await_all(&t, "ttl");
  for (int i = 0; i < NLOCKS; i++)
    CHECK_MSG(t.status[i] == 0 && t.value[i] > 500000 && t.value[i] <= 600000, "ttl %d: %s %lld", i,
              rlock_err_name(t.status[i]), (long long)t.value[i]);

  /* the server forgets the scripts: NOSCRIPT errors come among the answers */
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "split:nothing", NULL), 0);
  th_reply_free(th_cmd(srv, "SCRIPT", "FLUSH", NULL));
  tally_reset(&t);
  for (int i = 0; i < NLOCKS; i++) {
    if (i % 2) CHECK_OK(rlock_lock_release_async(l[i], OWNER_A, cb, &args[i]));
    else CHECK_OK(rlock_lock_ttl_async(l[i], cb, &args[i]));
  }
  await_all(&t, "release after SCRIPT FLUSH");
  for (int i = 0; i < NLOCKS; i++) {
    CHECK_MSG(t.status[i] == 0, "%s %d: %s", i % 2 ? "release" : "ttl", i, rlock_err_name(t.status[i]));
    if (i % 2) CHECK_MSG(t.value[i] == 0, "release %d: freed (%lld) at count 2", i, (long long)t.value[i]);
  }

  tally_reset(&t);
  for (int i = 0; i < NLOCKS; i++) CHECK_OK(rlock_lock_release_async(l[i], OWNER_A, cb, &args[i]));
  await_all(&t, "last releases");
  for (int i = 0; i < NLOCKS; i++) {
    CHECK_MSG(t.status[i] == 0, "last release %d: %s", i, rlock_err_name(t.status[i]));
    int64_t want = i % 2 ? 1 : 0; /* odd: released once already */
    CHECK_MSG(t.value[i] == want, "last release %d: %lld, not %lld", i, (long long)t.value[i], (long long)want);
  }

  tally_reset(&t);
  for (int i = 0; i < NLOCKS; i++) CHECK_OK(rlock_lock_ttl_async(l[i], cb, &args[i]));
  await_all(&t, "ttl after the releases");
  for (int i = 0; i < NLOCKS; i++) /* odd: free (-2); even: still held once */
    CHECK_MSG(t.status[i] == 0 && (i % 2 ? t.value[i] < 0 : t.value[i] > 0), "ttl %d: %s %lld", i,
              rlock_err_name(t.status[i]), (long long)t.value[i]);

  fp_trickle(px, FP_DOWN, 0);
  for (int i = 0; i < NLOCKS; i++) {
    snprintf(name, sizeof name, "split:%zu:%d", piece, i);
    CHECK_MSG(th_cmd_int(srv, "EXISTS", name, NULL) == (i % 2 ? 0 : 1), "%s: wrong state on the server", name);
    rlock_lock_free(l[i]);
  }
  rlock_client_free(c);
}

TEST(replies_one_byte_at_a_time) { run_round(1); }
TEST(replies_in_pieces_of_1_to_9) { run_round(9); }
TEST(replies_in_pieces_of_1_to_13) { run_round(13); }

/* The seed node behind a trickling proxy: its CLUSTER SLOTS reply comes in
 * pieces, many starting at an element such as ":0\r\n" (a slot range's
 * start) while the reader is inside the array. */
TEST(cluster_slots_split) {
  th_cluster_t *cl = th_cluster_start(3, 0, 5000);
  fp_proxy_t *seed = fp_start(cl->node[0]->port);
  fp_trickle(seed, FP_DOWN, 9);
  char url[64];
  snprintf(url, sizeof url, "redis+cluster://127.0.0.1:%d", fp_port(seed));
  rlock_client_t *c = fh_client(url, 0, 30000, 1);
  for (int i = 0; i < 12; i++) {
    char name[32];
    snprintf(name, sizeof name, "split:cluster:%d", i);
    rlock_lock_t *l = th_lock(c, name);
    CHECK_OK(rlock_lock_trylock(l, 0, 600000));
    CHECK_OK(rlock_lock_unlock(l));
    rlock_lock_free(l);
  }
  rlock_client_free(c);
  fp_stop(seed);
  th_cluster_stop(cl);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 150);
  srv = th_server_start(NULL);
  px = fp_start(srv->port);
  RUN(replies_one_byte_at_a_time);
  RUN(replies_in_pieces_of_1_to_9);
  RUN(replies_in_pieces_of_1_to_13);
  fp_stop(px);
  th_server_stop(srv);
  RUN(cluster_slots_split);
  return th_done();
}
