/* test_many.c -- scale: thousands of watchdog locks held by one client are
 * all kept alive by batched renewals (watchdog 1000 ms), many waiters on
 * many different locks (one channel each) are all woken by their unlocks,
 * and waiters on binary and maximum-length names are woken through their
 * channels. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static th_server_t *srv;

#define NLOCKS 3000

TEST(thousands_renewed) {
  rlock_client_t *c = th_client(srv->url, 1000);
  rlock_lock_t **l = calloc(NLOCKS, sizeof *l);
  char name[64];
  for (int i = 0; i < NLOCKS; i++) {
    snprintf(name, sizeof name, "many:%d", i);
    l[i] = th_lock(c, name);
    CHECK_OK(rlock_lock_acquire(l[i], 1 + (uint64_t)(i % 3), 0, RLOCK_LEASE_WATCHDOG, NULL));
  }
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  CHECK_EQ(st.held, NLOCKS);
  th_sleep_ms(2500); /* 2.5 watchdog timeouts */
  /* Every lock still there: count the keys with a TTL in one script. */
  redisReply *r = th_cmd(srv, "EVAL",
                         "local n = 0 for i = 0, tonumber(ARGV[1]) - 1 do "
                         "if redis.call('pttl', 'many:' .. i) > 0 then n = n + 1 end end "
                         "return n",
                         "0", "3000", NULL);
  CHECK_EQ(r->integer, NLOCKS);
  th_reply_free(r);
  rlock_client_stats(c, &st);
  CHECK_EQ(st.locks_lost, 0);
  CHECK(st.renewed_locks >= 2 * NLOCKS);
  printf("# %llu renewal calls for %llu renewed holds\n", (unsigned long long)st.renewals,
         (unsigned long long)st.renewed_locks);
  for (int i = 0; i < NLOCKS; i++) {
    CHECK_OK(rlock_lock_release(l[i], 1 + (uint64_t)(i % 3)));
    rlock_lock_free(l[i]);
  }
  free(l);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "many:0", "many:1", "many:2999", NULL), 0);
  rlock_client_stats(c, &st);
  CHECK_EQ(st.held, 0);
  rlock_client_free(c);
}

#define NWAIT 50

struct waiter {
  rlock_lock_t *lock;
  int rc;
};

static void *wait_thread(void *p) {
  struct waiter *w = p;
  w->rc = rlock_lock_acquire(w->lock, 7, 20000, 10000, NULL);
  return NULL;
}

static int all_subscribed(void *arg) {
  (void)arg;
  redisReply *r = th_cmd(srv, "PUBSUB", "CHANNELS", "redisson_lock__channel:{many:w:*", NULL);
  size_t n = r->elements;
  th_reply_free(r);
  return n >= NWAIT;
}

TEST(many_channels) {
  rlock_client_t *h = th_client(srv->url, 0), *w = th_client(srv->url, 0);
  rlock_lock_t *hl[NWAIT];
  struct waiter ws[NWAIT];
  pthread_t t[NWAIT];
  char name[64];
  for (int i = 0; i < NWAIT; i++) {
    snprintf(name, sizeof name, "many:w:%d", i);
    hl[i] = th_lock(h, name);
    CHECK_OK(rlock_lock_acquire(hl[i], 1, 0, 60000, NULL));
    ws[i].lock = th_lock(w, name);
    CHECK_EQ(pthread_create(&t[i], NULL, wait_thread, &ws[i]), 0);
  }
  CHECK_MSG(th_wait_until(all_subscribed, NULL, 10000), "not all channels subscribed");
  int64_t t0 = th_now_ms();
  for (int i = 0; i < NWAIT; i++) CHECK_OK(rlock_lock_release(hl[i], 1));
  for (int i = 0; i < NWAIT; i++) {
    pthread_join(t[i], NULL);
    CHECK_OK(ws[i].rc);
  }
  int64_t took = th_now_ms() - t0;
  CHECK_MSG(took < 5000, "%d waiters took %lld ms (lease 60 s: woken by messages?)", NWAIT, (long long)took);
  for (int i = 0; i < NWAIT; i++) {
    CHECK_OK(rlock_lock_release(ws[i].lock, 7));
    rlock_lock_free(ws[i].lock);
    rlock_lock_free(hl[i]);
  }
  rlock_client_free(h);
  rlock_client_free(w);
}

static void odd_name_waiter(const void *name, size_t len) {
  rlock_client_t *h = th_client(srv->url, 0), *w = th_client(srv->url, 0);
  rlock_lock_t *hl = NULL, *wl = NULL;
  CHECK_OK(rlock_lock_new(h, name, len, &hl));
  CHECK_OK(rlock_lock_new(w, name, len, &wl));
  CHECK_OK(rlock_lock_acquire(hl, 1, 0, 60000, NULL));
  struct waiter ws = {.lock = wl};
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, wait_thread, &ws), 0);
  /* The channel is the name's bytes in the prefix form. */
  char *chan = malloc(len + 40);
  int has_brace = memchr(name, '{', len) != NULL;
  size_t n = (size_t)sprintf(chan, "redisson_lock__channel:%s", has_brace ? "" : "{");
  memcpy(chan + n, name, len);
  n += len;
  if (!has_brace) chan[n++] = '}';
  const char *argv[] = {"PUBSUB", "NUMSUB", chan};
  size_t lens[] = {6, 6, n};
  int64_t deadline = th_now_ms() + 10000;
  long long subs = 0;
  while (subs < 1 && th_now_ms() < deadline) {
    redisReply *r = th_cmdv(srv, 3, argv, lens);
    subs = r->element[1]->integer;
    th_reply_free(r);
    if (subs < 1) th_sleep_ms(5);
  }
  CHECK_MSG(subs >= 1, "nobody subscribed to the channel of a %zu-byte name", len);
  free(chan);
  int64_t t0 = th_now_ms();
  CHECK_OK(rlock_lock_release(hl, 1));
  pthread_join(t, NULL);
  CHECK_OK(ws.rc);
  CHECK_MSG(th_now_ms() - t0 < 2000, "woken after %lld ms", (long long)(th_now_ms() - t0));
  CHECK_OK(rlock_lock_release(wl, 7));
  rlock_lock_free(hl);
  rlock_lock_free(wl);
  rlock_client_free(h);
  rlock_client_free(w);
}

TEST(binary_and_huge_names) {
  const char bin[] = {'m', 0, 'a', (char)0xfe, 'n', '\n', 'y', ' ', '*'};
  odd_name_waiter(bin, sizeof bin);
  char *huge = malloc(RLOCK_NAME_MAX);
  for (size_t i = 0; i < RLOCK_NAME_MAX; i++) huge[i] = (char)('a' + i % 26);
  odd_name_waiter(huge, RLOCK_NAME_MAX);
  free(huge);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 170);
  srv = th_server_start(NULL);
  RUN(thousands_renewed);
  RUN(many_channels);
  RUN(binary_and_huge_names);
  th_server_stop(srv);
  return th_done();
}
