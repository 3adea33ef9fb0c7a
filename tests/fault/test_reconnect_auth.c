/* test_reconnect_auth.c -- a reconnect keeps the credentials and the
 * database of the URL: password-only and ACL user, both with /5, through the
 * fault proxy, and a unix socket with ?db=5&user=&password=, each through a
 * server restart (kill -9, same ports) and a cut of every connection (proxy
 * cut; CLIENT KILL for the unix socket). After each reconnect locks still
 * land in db 5 (a raw client on db 5 sees the hold, db 0 has nothing) and a
 * waiter is woken through its re-authenticated subscriber connection. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault_harness.h"
#include "proxy.h"

#define DB "5"
#define LOCK "auth:lock"

/* HGET key field in database db through a fresh raw connection (the
 * harness's cached one stays on db 0); -1000 when absent. */
static long long hget_in_db(th_server_t *s, const char *db, const char *key, const char *field) {
  redisContext *c = th_raw_connect(s);
  redisReply *r = redisCommand(c, "SELECT %s", db);
  CHECK_MSG(r && r->type == REDIS_REPLY_STATUS, "SELECT %s failed", db);
  freeReplyObject(r);
  r = redisCommand(c, "HGET %s %s", key, field);
  CHECK(r != NULL);
  long long v = r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : -1000;
  freeReplyObject(r);
  redisFree(c);
  return v;
}

static rlock_stats_t stats(rlock_client_t *c) {
  rlock_stats_t s;
  rlock_client_stats(c, &s);
  return s;
}

/* The hold of owner 1 is in db 5 and nowhere in db 0. */
static void check_lands_in_db5(th_server_t *s, rlock_client_t *c, const char *when) {
  rlock_lock_t *l = th_lock(c, LOCK);
  char owner[128];
  th_owner_id(c, 1, owner, sizeof owner);
  int rc = rlock_lock_acquire(l, 1, 0, 60000, NULL);
  CHECK_MSG(rc == 0, "%s: acquire: %s: %s", when, rlock_err_name(rc), rlock_last_error());
  CHECK_MSG(hget_in_db(s, DB, LOCK, owner) == 1, "%s: the hold is not in db %s", when, DB);
  CHECK_MSG(th_cmd_int(s, "EXISTS", LOCK, NULL) == 0, "%s: the lock landed in db 0", when);
  CHECK_OK(rlock_lock_release(l, 1));
  CHECK_EQ(hget_in_db(s, DB, LOCK, owner), -1000);
  rlock_lock_free(l);
}

static th_server_t *numsub_srv;
static int subscribed(void *chan) { return th_numsub(numsub_srv, chan) == 1; }

/* A waiter of client w is woken by the unlock message: its subscriber
 * connection is authenticated (the holder's lease is 60 s: only the message
 * can wake it within the bound). */
static void check_waiter_woken(th_server_t *s, rlock_client_t *h, rlock_client_t *w) {
  rlock_lock_t *lh = th_lock(h, LOCK), *lw = th_lock(w, LOCK);
  CHECK_OK(rlock_lock_acquire(lh, 1, 0, 60000, NULL));
  fh_latch_t got;
  fh_latch_init(&got);
  CHECK_OK(rlock_lock_acquire_async(lw, 2, RLOCK_WAIT_FOREVER, 60000, NULL, fh_latch_cb, &got));
  numsub_srv = s;
  CHECK_MSG(th_wait_until(subscribed, "redisson_lock__channel:{" LOCK "}", 5000), "the waiter never subscribed");
  CHECK_OK(rlock_lock_release(lh, 1));
  CHECK_MSG(fh_latch_wait(&got, 5000), "the waiter was not woken by the unlock message");
  CHECK_OK(got.status);
  char owner[128];
  CHECK_EQ(hget_in_db(s, DB, LOCK, th_owner_id(w, 2, owner, sizeof owner)), 1);
  CHECK_OK(rlock_lock_release(lw, 2));
  fh_latch_destroy(&got);
  rlock_lock_free(lh), rlock_lock_free(lw);
}

typedef struct reconnected {
  rlock_client_t *c[2];
  uint64_t since[2];
} reconnected_t;
static int both_reconnected(void *a) {
  reconnected_t *r = a;
  for (int i = 0; i < 2; i++)
    if (stats(r->c[i]).reconnects < r->since[i] + 2) return 0; /* command + subscriber */
  return 1;
}

static void await_reconnect(reconnected_t *r, const char *what) {
  CHECK_MSG(th_wait_until(both_reconnected, r, 10000), "%s: the clients did not reconnect", what);
}

static void mark(reconnected_t *r) {
  for (int i = 0; i < 2; i++) r->since[i] = stats(r->c[i]).reconnects;
}

/* The whole story on one URL: works, restart, works, cut, works. */
static void through_reconnects(th_server_t *s, fp_proxy_t *px, const char *url, const char *label) {
  rlock_client_t *h = fh_client(url, 0, 2000, 3), *w = fh_client(url, 0, 2000, 3);
  reconnected_t r = {{h, w}, {0, 0}};
  check_lands_in_db5(s, h, "first connection");
  check_waiter_woken(s, h, w);

  mark(&r);
  th_server_restart(s);
  await_reconnect(&r, "restart");
  check_lands_in_db5(s, h, "after the restart");
  check_waiter_woken(s, h, w);

  mark(&r);
  if (px) {
    fp_cut(px);
  } else {
    th_reply_free(th_cmd(s, "CLIENT", "KILL", "SKIPME", "yes", "TYPE", "normal", NULL));
    th_reply_free(th_cmd(s, "CLIENT", "KILL", "SKIPME", "yes", "TYPE", "pubsub", NULL));
  }
  await_reconnect(&r, "cut");
  check_lands_in_db5(s, h, "after the cut");
  check_waiter_woken(s, h, w);
  printf("%s: db %s kept through a restart and a cut (%llu + %llu reconnects)\n", label, DB,
         (unsigned long long)stats(h).reconnects, (unsigned long long)stats(w).reconnects);
  rlock_client_free(h), rlock_client_free(w);
}

static const char *acl_args[] = {"--user", "alice",  "on",      ">secret", "~*", "&*",
                                 "+@all",  "--user", "default", "off",     NULL};

TEST(password_db5_through_proxy) {
  const char *extra[] = {"--requirepass", "p@ss", NULL};
  th_server_opts_t so = {.extra_args = extra, .raw_password = "p@ss"};
  th_server_t *s = th_server_start(&so);
  fp_proxy_t *px = fp_start(s->port);
  char url[128];
  snprintf(url, sizeof url, "redis://:p%%40ss@127.0.0.1:%d/%s", fp_port(px), DB);
  through_reconnects(s, px, url, "password");
  fp_stop(px);
  th_server_stop(s);
}

TEST(acl_user_db5_through_proxy) {
  th_server_opts_t so = {.extra_args = acl_args, .raw_user = "alice", .raw_password = "secret"};
  th_server_t *s = th_server_start(&so);
  fp_proxy_t *px = fp_start(s->port);
  char url[128];
  snprintf(url, sizeof url, "redis://alice:secret@127.0.0.1:%d/%s", fp_port(px), DB);
  through_reconnects(s, px, url, "acl user");
  fp_stop(px);
  th_server_stop(s);
}

TEST(unix_socket_db5_acl_user) {
  th_server_opts_t so = {.extra_args = acl_args, .unixsocket = 1, .raw_user = "alice", .raw_password = "secret"};
  th_server_t *s = th_server_start(&so);
  char url[400];
  snprintf(url, sizeof url, "unix://%s?db=%s&user=alice&password=secret", s->sock, DB);
  through_reconnects(s, NULL, url, "unix socket");
  th_server_stop(s);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 110);
  RUN(password_db5_through_proxy);
  RUN(acl_user_db5_through_proxy);
  RUN(unix_socket_db5_acl_user);
  return th_done();
}
