/* test_slow.c -- a slow server: DEBUG SLEEP and CLIENT PAUSE longer than the
 * command timeout while locks are acquired and released. The client times
 * out and re-sends with the same latch; once the server wakes up every copy
 * is applied: the hold counts on the server prove that nothing was counted
 * twice, nothing was left behind, and that unlock is idempotent. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "fault_harness.h"

static th_server_t *srv;

/* Sends a command on its own raw connection without waiting for the reply
 * (DEBUG SLEEP blocks the whole server; CLIENT PAUSE returns at once). */
static redisContext *send_nowait(const char *fmt, ...) {
  redisContext *rc = th_raw_connect(srv);
  va_list ap;
  va_start(ap, fmt);
  CHECK(redisvAppendCommand(rc, fmt, ap) == REDIS_OK);
  va_end(ap);
  int done = 0;
  while (!done) CHECK(redisBufferWrite(rc, &done) == REDIS_OK);
  return rc;
}
static void finish(redisContext *rc) {
  void *r = NULL;
  CHECK(redisGetReply(rc, &r) == REDIS_OK);
  freeReplyObject(r);
  redisFree(rc);
}

/* A round trip on the lock connection (a lock query: user commands have a
 * connection of their own), so every request written before it is applied. */
static void ping(rlock_client_t *c) {
  rlock_lock_t *l = th_lock(c, "slow:barrier");
  int locked = -1;
  CHECK_OK(rlock_lock_is_locked(l, &locked));
  rlock_lock_free(l);
}

typedef enum { SLEEP, PAUSE } slow_t;

/* The server has taken everything sent on rc: our side has no unacknowledged
 * bytes and the server's side of the connection no unread ones. Redis runs
 * a command in the same step as it reads it, so DEBUG SLEEP is running. */
static int server_took(void *arg) {
  redisContext *rc = arg;
  int me = th_local_port(rc->fd);
  long tx = -1, rx = -1;
  return th_tcp_queues(me, srv->port, &tx, NULL) && tx == 0 && th_tcp_queues(srv->port, me, NULL, &rx) && rx == 0;
}

/* The server stops answering for ms; until it is back, returns the context
 * to finish (DEBUG SLEEP) or NULL (CLIENT PAUSE). Returns once the server is
 * slow for sure: CLIENT PAUSE has answered, DEBUG SLEEP has been read. */
static redisContext *slow_start(slow_t how, int ms) {
  if (how == SLEEP) {
    redisContext *rc = send_nowait("DEBUG SLEEP %.3f", ms / 1000.0);
    CHECK_MSG(th_wait_until(server_took, rc, 5000), "the server never read DEBUG SLEEP");
    return rc;
  }
  char arg[32];
  snprintf(arg, sizeof arg, "%d", ms);
  redisReply *r = th_cmd(srv, "CLIENT", "PAUSE", arg, "ALL", NULL);
  CHECK(r->type == REDIS_REPLY_STATUS);
  th_reply_free(r);
  return NULL;
}

/* Returns once the server answers again: the DEBUG SLEEP's reply, or a
 * PING on a new connection, which CLIENT PAUSE ALL holds back to its end. */
static void slow_end(redisContext *rc) {
  if (!rc) rc = send_nowait("PING");
  finish(rc);
}

static void scenario(slow_t how) {
  const char *what = how == SLEEP ? "debug-sleep" : "client-pause";
  char label[64], o[128];
  rlock_client_t *c = fh_client(srv->url, 30000, 250, 2);
  rlock_lock_t *l = th_lock(c, "slow:lock");
  th_owner_id(c, RLOCK_OWNER_THREAD | (uint64_t)th_gettid(), o, sizeof o);

  /* 1. acquire while the server is slow for longer than all re-sends: ETIMEDOUT,
   *    then nothing left behind once it wakes up */
  redisContext *rc = slow_start(how, 1500);
  CHECK_RC(rlock_lock_trylock(l, 0, 30000), RLOCK_ETIMEDOUT);
  slow_end(rc);
  ping(c);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "slow:lock", NULL), 0);
  snprintf(label, sizeof label, "%s-acquire", what);
  fh_result(label, "single", "reentrant", "ETIMEDOUT; no hold left behind (undo)", 0);

  /* 2. acquire while slow for less than the re-sends: succeeds, counted once */
  rc = slow_start(how, 400);
  CHECK_OK(rlock_lock_trylock(l, 0, 30000));
  slow_end(rc);
  ping(c);
  CHECK_EQ(th_hget_num(srv, "slow:lock", o), 1);

  /* 3. a reentrant acquire under a long slowdown: the count stays 1 */
  rc = slow_start(how, 1500);
  CHECK_RC(rlock_lock_trylock(l, 0, 30000), RLOCK_ETIMEDOUT);
  slow_end(rc);
  ping(c);
  CHECK_EQ(th_hget_num(srv, "slow:lock", o), 1);
  snprintf(label, sizeof label, "%s-reentrant-acquire", what);
  fh_result(label, "single", "reentrant", "ETIMEDOUT; count stays 1 (no double count)", 0);

  /* 4. unlock under a long slowdown, count 2: re-sent, applied once */
  CHECK_OK(rlock_lock_lock(l, 30000));
  CHECK_EQ(th_hget_num(srv, "slow:lock", o), 2);
  long long ev0 = th_cmdstat(srv, "evalsha");
  rc = slow_start(how, 1500);
  CHECK_RC(rlock_lock_unlock(l), RLOCK_ETIMEDOUT);
  slow_end(rc);
  ping(c);
  long long sends = th_cmdstat(srv, "evalsha") - ev0;
  printf("%s: %lld unlock sends applied, count now %lld\n", what, sends, th_hget_num(srv, "slow:lock", o));
  /* 3 copies during the call, then the unlock goes on alone (same id) until
   * answered; copies queued on a connection the client dropped meanwhile
   * may be discarded by a paused server: what counts is "applied once" */
  CHECK(sends >= 1);
  CHECK_EQ(th_hget_num(srv, "slow:lock", o), 1);
  snprintf(label, sizeof label, "%s-unlock", what);
  fh_result(label, "single", "reentrant", "ETIMEDOUT; re-sent (also after the call), count 2->1 once (idempotent)", 0);

  /* 5. unlock under a short slowdown: succeeds, the lock is gone, nothing left */
  rc = slow_start(how, 400);
  CHECK_OK(rlock_lock_unlock(l));
  slow_end(rc);
  ping(c);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "slow:lock", NULL), 0);
  rlock_stats_t s;
  rlock_client_stats(c, &s);
  CHECK_EQ(s.held, 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(debug_sleep) { scenario(SLEEP); }
TEST(client_pause) { scenario(PAUSE); }

int main(int argc, char **argv) {
  th_init(argc, argv, 200);
  const char *extra[] = {"--enable-debug-command", "yes", NULL};
  th_server_opts_t o = {.extra_args = extra};
  srv = th_server_start(&o);
  RUN(debug_sleep);
  RUN(client_pause);
  th_server_stop(srv);
  return th_done();
}
