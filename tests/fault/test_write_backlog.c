/* test_write_backlog.c -- the direct connection's writer (conn.c
 * rlock__conn_flush: one write of the pass's buffer, what the socket refuses
 * moved to the bufferevent's output) when the socket refuses most of it: the
 * proxy stops reading the client's bytes (blackhole up) while thousands of
 * large requests are written (far past the socket buffers: partial writes,
 * EAGAIN, later passes queued behind the output), then reads again. Every
 * request must arrive once and in order: each acquire answered, each name
 * held on the server, every release then frees its name. */
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault_harness.h"
#include "proxy.h"

static th_server_t *srv;
static fp_proxy_t *px;

#define NOPS 3000
#define NAME_LEN 6000 /* 3000 x ~6 KB: ~18 MB of requests */

static atomic_int done;
static int status[NOPS];

static void cb(rlock_lock_t *l, int st, int64_t value, void *arg) {
  (void)l, (void)value;
  status[(intptr_t)arg] = st;
  atomic_fetch_add(&done, 1);
}

/* "backlog:I:nnn..." (NAME_LEN bytes) in name. */
static void name_of(char *name, int i) {
  memset(name, 'n', NAME_LEN);
  int k = snprintf(name, 32, "backlog:%d:", i);
  name[k] = 'n';
  name[NAME_LEN] = 0;
}

static int all_done(void *arg) {
  (void)arg;
  return atomic_load(&done) == NOPS;
}

TEST(requests_past_the_socket_buffers) {
  char url[64];
  snprintf(url, sizeof url, "redis://127.0.0.1:%d", fp_port(px));
  rlock_client_t *c = fh_client(url, 0, 120000, 1);
  rlock_lock_t *warm = th_lock(c, "backlog:warm");
  int64_t ttl;
  CHECK_OK(rlock_lock_ttl(warm, &ttl)); /* connected */
  rlock_lock_free(warm);
  rlock_lock_t **l = calloc(NOPS, sizeof *l);
  char *name = malloc(NAME_LEN + 1);
  CHECK(l && name);
  for (int i = 0; i < NOPS; i++) {
    name_of(name, i);
    CHECK_OK(rlock_lock_new(c, name, NAME_LEN, &l[i]));
  }
  /* the odd names held by another owner: their tries below are answered
   * with a TTL (busy), the even ones with nil (acquired) */
  atomic_store(&done, NOPS / 2);
  for (int i = 1; i < NOPS; i += 2)
    CHECK_OK(rlock_lock_acquire_async(l[i], (rlock_owner_t)9, 0, 600000, NULL, cb, (void *)(intptr_t)i));
  CHECK_MSG(th_wait_until(all_done, NULL, 90000), "%d of %d first holds", atomic_load(&done), NOPS);
  uint64_t up0 = fp_bytes(px, FP_UP);
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  uint64_t sent0 = st.commands_sent;
  fp_blackhole(px, FP_UP);
  for (int i = 0; i < NOPS; i++) status[i] = 1; /* 1: not answered */
  atomic_store(&done, 0);
  for (int i = 0; i < NOPS / 2; i++)
    CHECK_OK(rlock_lock_acquire_async(l[i], (rlock_owner_t)5, 0, 600000, NULL, cb, (void *)(intptr_t)i));
  /* every request written by the client (most of them refused by the socket) */
  CHECK_MSG(TH_STAT_REACHES(c, commands_sent, sent0 + NOPS / 2, 60000), "the tries were not all written");
  if (atomic_load(&done) != 0)
    for (int i = 0; i < NOPS / 2; i++)
      if (status[i] != 1)
        printf("# answered: name %d status %s\n", i, status[i] <= 0 ? rlock_err_name(status[i]) : "?");
  CHECK_MSG(atomic_load(&done) == 0, "%d answered while the proxy read nothing", atomic_load(&done));
  CHECK_MSG(fp_bytes(px, FP_UP) - up0 < (uint64_t)NOPS / 2 * NAME_LEN, "the proxy forwarded them all: no backlog");
  fp_blackhole(px, 0);
  /* the second half written while the first drains (a writable socket, a
   * bufferevent output still holding bytes): behind them */
  for (int i = NOPS / 2; i < NOPS; i++)
    CHECK_OK(rlock_lock_acquire_async(l[i], (rlock_owner_t)5, 0, 600000, NULL, cb, (void *)(intptr_t)i));
  CHECK_MSG(th_wait_until(all_done, NULL, 90000), "%d of %d tries answered", atomic_load(&done), NOPS);
  fprintf(stderr, "%llu bytes went up\n", (unsigned long long)(fp_bytes(px, FP_UP) - up0));
  int wrong = 0, first = -1;
  for (int i = 0; i < NOPS; i++)
    if (status[i] != (i % 2 ? RLOCK_EBUSY : 0)) wrong++, first = first < 0 ? i : first;
  CHECK_MSG(!wrong, "%d tries answered wrongly (first: %d, %s)", wrong, first,
            first < 0 ? "" : rlock_err_name(status[first]));
  /* releases: the even ones free their names; the odd ones are not held by 5 */
  atomic_store(&done, NOPS / 2);
  for (int i = 0; i < NOPS; i += 2) CHECK_OK(rlock_lock_release_async(l[i], (rlock_owner_t)5, cb, (void *)(intptr_t)i));
  CHECK_MSG(th_wait_until(all_done, NULL, 90000), "%d of %d releases answered", atomic_load(&done), NOPS);
  for (int i = 0; i < NOPS; i += 2) CHECK_MSG(status[i] == 0, "release %d: %s", i, rlock_err_name(status[i]));
  for (int i = 0; i < NOPS; i += 37) {
    name_of(name, i);
    redisReply *r = th_cmdv(srv, 2, (const char *[]){"EXISTS", name}, (const size_t[]){6, NAME_LEN});
    CHECK_MSG(r && r->type == REDIS_REPLY_INTEGER && r->integer == (i % 2), "name %d: wrong state", i);
    th_reply_free(r);
  }
  for (int i = 0; i < NOPS; i++) rlock_lock_free(l[i]);
  free(l);
  free(name);
  rlock_client_free(c);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 200);
  srv = th_server_start(NULL);
  px = fp_start(srv->port);
  RUN(requests_past_the_socket_buffers);
  fp_stop(px);
  th_server_stop(srv);
  return th_done();
}
