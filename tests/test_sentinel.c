/* test_sentinel.c -- redis+sentinel:// against a real Sentinel deployment
 * (harness_sentinel.c: a master, 2 replicas, 3 sentinels): URL forms and
 * errors, redaction, connecting with the first sentinel dead or silent, a
 * master name no sentinel knows, no sentinel reachable, sentinel_password,
 * rediss+sentinel:// (TLS), the CLI, and the master SIGKILLed
 * while a lock is held and waited for: the clients follow the promoted
 * replica (+switch-master), the waiter is resubscribed and woken by the
 * holder's unlock message, the hold (replicated with WAIT before the kill)
 * survives, and the lock is never held twice; the same after SENTINEL
 * FAILOVER (the old master demoted under open connections); and the poll
 * alone moves a client when the sentinels change their master without an
 * event. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness_replica.h"
#include "harness_sentinel.h"

#define NAME "sentinel:lock"
#define CHANNEL "redisson_lock__channel:{" NAME "}"

static th_sentinels_t *dep;

/* ------------------------------------------------------------ URLs */

static void check_bad_url(const char *url, const char *why) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = url;
  rlock_client_t *c = NULL;
  int rc = rlock_client_new(&c, &o);
  CHECK_MSG(rc == RLOCK_EURL, "%s: rc %d (%s), want RLOCK_EURL", url, rc, rlock_last_error());
  CHECK_MSG(strstr(rlock_last_error(), why), "%s: message \"%s\" lacks \"%s\"", url, rlock_last_error(), why);
  CHECK_MSG(!strstr(rlock_last_error(), "s3cr3t"), "%s: the message shows the password", url);
  CHECK(c == NULL);
}

TEST(url_errors) {
  check_bad_url("redis+sentinel://127.0.0.1:26379", "names its master");
  check_bad_url("redis+sentinel://127.0.0.1:26379/", "names its master");
  check_bad_url("redis+sentinel://:s3cr3t@127.0.0.1:26379?sentinel_password=x", "names its master");
  check_bad_url("redis+sentinel://h1:1,,h2:2/m", "missing sentinel host");
  check_bad_url("redis+sentinel://h1:1,/m", "missing sentinel host");
  check_bad_url("redis+sentinel://h1:99999/m", "port must be a number");
  check_bad_url("redis+sentinel://h1/m/x", "database must be a number");
  check_bad_url("redis+sentinel://h1/m?password=s3cr3t", "only sentinel_password");
  check_bad_url("redis+sentinel://h1/m?sentinel_password=a&b", "%26");
  check_bad_url("redis+sentinel://h1/m#frag", "fragments");
  check_bad_url("redis+sentinel://h1/m%20x", "printable");
  check_bad_url("redis+sentinel://h1/%00", "printable");
  check_bad_url("redis+sentinel:/h1/m", "must be followed by '//'");
  check_bad_url("redis+sentinel://u:s3cr3t@/m", "missing sentinel host");
  check_bad_url("redis://h1:1,h2:2", "redis+sentinel://");
  check_bad_url("redis+sentinal://h1/m", "unknown scheme"); /* a typo */
}

static void check_redacted(const char *url, const char *want) {
  char buf[512];
  rlock_url_redact(url, buf, sizeof buf);
  CHECK_MSG(!strcmp(buf, want), "redact(%s) = %s, want %s", url, buf, want);
}

TEST(url_redaction) {
  check_redacted("redis+sentinel://u:s3cr3t@h1:1,h2:2/m?sentinel_password=t0p",
                 "redis+sentinel://u:***@h1:1,h2:2/m?sentinel_password=***");
  check_redacted("rediss+sentinel://s3cr3t@[::1]:1,h2/m/3", "rediss+sentinel://***@[::1]:1,h2/m/3");
  check_redacted("REDIS+SENTINEL://h1/m?SENTINEL_PASSWORD=a%26b", "REDIS+SENTINEL://h1/m?SENTINEL_PASSWORD=***");
}

/* ------------------------------------------------------------ connecting */

/* A client on url with the replica-sync policy `sync`. */
static rlock_client_t *client_synced(const char *url, const char *name, int sync) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = url;
  o.client_name = name;
  o.replica_sync = sync;
  o.reconnect_min_ms = 50;
  o.reconnect_max_ms = 1000;
  rlock_client_t *c = NULL;
  int rc = rlock_client_new(&c, &o);
  CHECK_MSG(rc == 0, "client on %s: %s: %s", url, rlock_err_name(rc), rlock_last_error());
  return c;
}

static rlock_client_t *client_on(const char *url, const char *name) {
  return client_synced(url, name, RLOCK_REPLICA_SYNC_ONE);
}

/* A lock taken through the sentinels lands on the master. */
static void lock_on_master(rlock_client_t *c, th_server_t *master, const char *name) {
  rlock_lock_t *l = th_lock(c, name);
  CHECK_OK(rlock_lock_lock(l, 10000));
  CHECK_EQ(th_cmd_int(master, "EXISTS", name, NULL), 1);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmd_int(master, "EXISTS", name, NULL), 0);
  rlock_lock_free(l);
}

TEST(connect_first_sentinel_dead) {
  char url[1200];
  snprintf(url, sizeof url, "redis+sentinel://127.0.0.1:%d,%s", th_dead_port(), dep->url + strlen("redis+sentinel://"));
  rlock_client_t *c = client_on(url, "first-dead");
  lock_on_master(c, dep->nodes[0], "sentinel:first-dead");
  rlock_client_free(c);
}

/* A sentinel that accepts connections and never answers (a listening
 * socket nobody reads) comes first: the client skips it after the short
 * sentinel bound (1 s), not after its 30 s connect timeout. */
TEST(connect_first_sentinel_silent) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 16) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0);
  char url[1200];
  snprintf(url, sizeof url, "redis+sentinel://127.0.0.1:%d,%s", ntohs(a.sin_port),
           dep->url + strlen("redis+sentinel://"));
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = url;
  o.connect_timeout_ms = 30000;
  rlock_client_t *c = NULL;
  int64_t t0 = th_now_ms();
  CHECK_OK(rlock_client_new(&c, &o));
  CHECK_MSG(th_now_ms() - t0 < 15000, "connecting took %lld ms", (long long)(th_now_ms() - t0));
  lock_on_master(c, dep->nodes[0], "sentinel:first-silent");
  rlock_client_free(c);
  close(fd);
}

TEST(connect_with_db_and_user_command) {
  char url[1200];
  snprintf(url, sizeof url, "%s/3", dep->url);
  rlock_client_t *c = client_on(url, "db3");
  const char *argv[3] = {"SET", "sentinel:db3", "x"};
  rlock_reply_t *r = NULL;
  CHECK_OK(rlock_client_command(c, 3, argv, NULL, &r));
  rlock_reply_free(r);
  CHECK_EQ(th_cmd_int(dep->nodes[0], "EXISTS", "sentinel:db3", NULL), 0); /* db 0 */
  redisReply *x = th_cmd(dep->nodes[0], "SELECT", "3", NULL);
  th_reply_free(x);
  CHECK_EQ(th_cmd_int(dep->nodes[0], "EXISTS", "sentinel:db3", NULL), 1);
  x = th_cmd(dep->nodes[0], "SELECT", "0", NULL);
  th_reply_free(x);
  rlock_client_free(c);
}

TEST(unknown_master) {
  char url[1200];
  snprintf(url, sizeof url, "%.*sno-such-master", (int)(strrchr(dep->url, '/') + 1 - dep->url), dep->url);
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = url;
  rlock_client_t *c = NULL;
  CHECK_RC(rlock_client_new(&c, &o), RLOCK_ECONNECT);
  CHECK_MSG(strstr(rlock_last_error(), "does not know master 'no-such-master'"), "message: %s", rlock_last_error());
}

/* Issue 23: a sentinel's refusal was cut mid-word (at 60 bytes): an ACL
 * that denies the query gives a long NOPERM reply, said whole. */
TEST(sentinel_refusal_said_whole) {
  for (int i = 0; i < dep->nsent; i++) {
    redisReply *x = th_sentinel_cmd(dep, i, "ACL SETUSER default -sentinel|get-master-addr-by-name");
    CHECK(x && x->type == REDIS_REPLY_STATUS);
    freeReplyObject(x);
  }
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = dep->url;
  rlock_client_t *c = NULL;
  int rc = rlock_client_new(&c, &o);
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", rlock_last_error());
  for (int i = 0; i < dep->nsent; i++) {
    redisReply *x = th_sentinel_cmd(dep, i, "ACL SETUSER default +@all");
    if (x) freeReplyObject(x);
  }
  if (!rc) rlock_client_free(c);
  CHECK_RC(rc, RLOCK_ECONNECT);
  CHECK_MSG(strstr(msg, "get-master-addr-by-name' command"), "cut: %s", msg);
}

TEST(no_sentinel_reachable) {
  char url[200];
  snprintf(url, sizeof url, "redis+sentinel://127.0.0.1:%d,127.0.0.1:%d/%s", th_dead_port(), th_dead_port(), dep->name);
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = url;
  o.reconnect_min_ms = 10;
  rlock_client_t *c = NULL;
  CHECK_RC(rlock_client_new(&c, &o), RLOCK_ECONNECT);
  CHECK_MSG(strstr(rlock_last_error(), "no Sentinel answered"), "message: %s", rlock_last_error());
}

TEST(cli_exec_and_status) {
  const char *exec_argv[] = {RLOCK_CLI, "-u", dep->url, "exec", "sentinel:cli", "--", "true", NULL};
  CHECK_EQ(th_exec(exec_argv), 0);
  const char *status_argv[] = {RLOCK_CLI, "-u", dep->url, "status", "sentinel:cli", NULL};
  CHECK_EQ(th_exec(status_argv), 1); /* read through Sentinel: free (exit 1) */
  /* the exec left nothing behind on the master */
  CHECK_EQ(th_cmd_int(dep->nodes[0], "EXISTS", "sentinel:cli", NULL), 0);
}

/* A sentinel with requirepass: sentinel_password is sent to it (and
 * never shown); without it, or with a wrong one, RLOCK_EAUTH. */
TEST(sentinel_password) {
  th_sentinel_t *g = th_sentinel_start_alone("guarded", dep->nodes[0]->port, "s3ntin3l", 0);
  char url[300];
  snprintf(url, sizeof url, "redis+sentinel://127.0.0.1:%d/guarded?sentinel_password=s3ntin3l", g->port);
  rlock_client_t *c = client_on(url, "guarded");
  lock_on_master(c, dep->nodes[0], "sentinel:guarded");
  rlock_client_free(c);
  const char *bad[2] = {"redis+sentinel://127.0.0.1:%d/guarded",
                        "redis+sentinel://127.0.0.1:%d/guarded?sentinel_password=wr0ng"};
  for (int i = 0; i < 2; i++) {
    snprintf(url, sizeof url, bad[i], g->port);
    rlock_options_t o;
    rlock_options_init(&o);
    o.url = url;
    CHECK_RC(rlock_client_new(&c, &o), RLOCK_EAUTH);
    CHECK_MSG(!strstr(rlock_last_error(), "wr0ng") && !strstr(rlock_last_error(), "s3ntin3l"), "message: %s",
              rlock_last_error());
  }
  th_sentinel_stop_alone(g);
}

/* rediss+sentinel://: TLS to the sentinel and to the master it names (its
 * TLS port), verified against the test CA. */
TEST(tls_sentinel_and_master) {
  th_server_opts_t so = {.tls = 1};
  th_server_t *m = th_server_start(&so);
  th_sentinel_t *g = th_sentinel_start_alone("tls-master", m->tls_port, NULL, 1);
  char url[300];
  snprintf(url, sizeof url, "rediss+sentinel://127.0.0.1:%d/tls-master", g->tls_port);
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = url;
  o.tls_ca_file = th_tls_certs()->ca;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  lock_on_master(c, m, "sentinel:tls");
  rlock_client_free(c);
  snprintf(url, sizeof url, "redis+sentinel://127.0.0.1:%d/tls-master", g->port); /* plain to the sentinel: */
  CHECK_RC(rlock_client_new(&c, &o), RLOCK_ECONNECT); /* it names a TLS port, spoken to in plain text */
  th_sentinel_stop_alone(g);
  th_server_stop(m);
}

struct trylock_job {
  rlock_lock_t *lock;
  int rc;
};
static void *trylock_thread(void *p) {
  struct trylock_job *j = p;
  j->rc = rlock_lock_acquire(j->lock, 7, 30000, 10000, NULL); /* owner 7: released by the test thread */
  return NULL;
}

struct tx_job {
  rlock_client_t *c;
  int rc;
  rlock_reply_t *reply;
};
static void *tx_thread(void *p) {
  struct tx_job *j = p;
  const char *set[3] = {"SET", "sentinel:tx", "1"};
  rlock_command_t tx = {3, set, NULL};
  j->rc = rlock_client_transaction(j->c, 1, &tx, &j->reply);
  return NULL;
}

static th_server_t *aborting;
static int aborted(void *arg) {
  (void)arg;
  char *info = th_cmd_str(aborting, "INFO", "errorstats", NULL);
  int yes = info && strstr(info, "errorstat_EXECABORT:");
  free(info);
  return yes;
}

static rlock_client_t *attempting;
static int attempted(void *want) {
  rlock_stats_t st;
  rlock_client_stats(attempting, &st);
  return st.acquire_attempts >= *(uint64_t *)want;
}

/* The master is demoted by hand (REPLICAOF: its clients stay connected, no
 * event) and a lock is asked for: the READONLY refusal resets the
 * connection, the acquire waits for the master (Sentinel still names the
 * demoted node: ROLE refuses it) and lands on the new one once Sentinel
 * names it. Before: the trylock failed at once with RLOCK_ESERVER. A user
 * transaction refused there fails and is not sent again (its SET alone would
 * run outside the transaction). */
TEST(readonly_after_a_silent_demotion) {
  th_server_t *x = th_server_start(NULL), *y = th_server_start(NULL);
  th_sentinel_t *g = th_sentinel_start_alone("ro", x->port, NULL, 0);
  char url[300], port[16];
  snprintf(url, sizeof url, "redis+sentinel://127.0.0.1:%d/ro", g->port);
  rlock_client_t *c = client_on(url, "demoted");
  lock_on_master(c, x, "sentinel:ro");
  const char *ping[1] = {"PING"};
  rlock_reply_t *pr = NULL;
  CHECK_OK(rlock_client_command(c, 1, ping, NULL, &pr)); /* the user connection is up on x */
  rlock_reply_free(pr);
  snprintf(port, sizeof port, "%d", y->port);
  redisReply *r = th_cmd(x, "REPLICAOF", "127.0.0.1", port, NULL);
  th_reply_free(r);
  struct tx_job tj = {.c = c};
  pthread_t tt;
  CHECK(pthread_create(&tt, NULL, tx_thread, &tj) == 0);
  aborting = x;
  CHECK_MSG(th_wait_until(aborted, NULL, 20000), "the transaction never reached the demoted node");
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  uint64_t want = st.acquire_attempts + 1;
  struct trylock_job j = {.lock = th_lock(c, "sentinel:ro")};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, trylock_thread, &j) == 0);
  attempting = c;
  CHECK_MSG(th_wait_until(attempted, &want, 20000), "the acquire was never tried");
  /* y's replica (x, demoted under it) online before Sentinel names y: the
   * try's WAIT there needs it (else RLOCK_ENOSYNC, seen under valgrind) */
  CHECK_MSG(th_sentinels_wait_replicas(y, 1, 20000), "x never came online as y's replica");
  redisContext *sc = redisConnect("127.0.0.1", g->port);
  CHECK(sc && !sc->err);
  r = redisCommand(sc, "SENTINEL REMOVE ro");
  if (r) freeReplyObject(r);
  r = redisCommand(sc, "SENTINEL MONITOR ro 127.0.0.1 %d 1", y->port);
  CHECK_MSG(r && r->type == REDIS_REPLY_STATUS, "SENTINEL MONITOR: %s", r && r->str ? r->str : "no reply");
  freeReplyObject(r);
  redisFree(sc);
  CHECK(pthread_join(t, NULL) == 0);
  CHECK_MSG(j.rc == 0, "trylock: %s", rlock_err_name(j.rc));
  CHECK(pthread_join(tt, NULL) == 0);
  CHECK_MSG(tj.rc != 0 || (tj.reply && tj.reply->type == RLOCK_REPLY_ERROR), "the transaction succeeded on a replica");
  rlock_reply_free(tj.reply);
  CHECK_EQ(th_cmd_int(y, "EXISTS", "sentinel:ro", NULL), 1);
  CHECK_EQ(th_cmd_int(y, "EXISTS", "sentinel:tx", NULL), 0); /* the refused transaction never ran */
  CHECK_OK(rlock_lock_release(j.lock, 7));
  rlock_lock_free(j.lock);
  rlock_client_free(c);
  th_sentinel_stop_alone(g);
  th_server_stop(y);
  th_server_stop(x);
}

/* The fast path (lib/fast.c) under Sentinel: the fast connection goes to the
 * master the command connection found, with its ROLE check; once the master
 * is silently demoted and Sentinel names another, a fast lock meets READONLY
 * there, goes through the I/O thread (which follows Sentinel to the new
 * master), and the fast calls after it go to the new master too. */
TEST(fast_path_follows_the_master) {
  th_server_t *x = th_server_start(NULL), *y = th_server_start(NULL);
  th_sentinel_t *g = th_sentinel_start_alone("fp", x->port, NULL, 0);
  char url[300], port[16];
  snprintf(url, sizeof url, "redis+sentinel://127.0.0.1:%d/fp", g->port);
  /* replica sync off: x, demoted below, becomes y's replica, and a WAIT
   * (which the fast path does not send) is then needed on y once Sentinel
   * or INFO lists it: a race with the test, not what it is about */
  rlock_client_t *c = client_synced(url, "fast-follow", RLOCK_REPLICA_SYNC_OFF);
  rlock_lock_t *l = th_lock(c, "sentinel:fast");
  rlock_stats_t s0, s1;
  for (int i = 0; i < 2; i++) { /* the first pair teaches the thread the count; the second is fast */
    rlock_client_stats(c, &s0);
    CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
    CHECK_EQ(th_cmd_int(x, "EXISTS", "sentinel:fast", NULL), 1);
    CHECK_OK(rlock_lock_unlock(l));
    rlock_client_stats(c, &s1);
  }
  CHECK_EQ(s1.fast_calls, s0.fast_calls + 2);
  snprintf(port, sizeof port, "%d", y->port);
  th_reply_free(th_cmd(x, "REPLICAOF", "127.0.0.1", port, NULL));
  redisContext *sc = redisConnect("127.0.0.1", g->port);
  CHECK(sc && !sc->err);
  redisReply *r = redisCommand(sc, "SENTINEL REMOVE fp");
  if (r) freeReplyObject(r);
  r = redisCommand(sc, "SENTINEL MONITOR fp 127.0.0.1 %d 1", y->port);
  CHECK_MSG(r && r->type == REDIS_REPLY_STATUS, "SENTINEL MONITOR: %s", r && r->str ? r->str : "no reply");
  freeReplyObject(r);
  redisFree(sc);
  CHECK_OK(rlock_lock_trylock(l, 20000, RLOCK_LEASE_WATCHDOG)); /* READONLY on x: through the I/O thread to y */
  CHECK_EQ(th_cmd_int(y, "EXISTS", "sentinel:fast", NULL), 1);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmd_int(y, "EXISTS", "sentinel:fast", NULL), 0);
  rlock_client_stats(c, &s0);
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  CHECK_EQ(th_cmd_int(y, "EXISTS", "sentinel:fast", NULL), 1);
  CHECK_OK(rlock_lock_unlock(l));
  rlock_client_stats(c, &s1);
  CHECK_MSG(s1.fast_calls == s0.fast_calls + 2, "the calls on the new master were not fast (%llu of 2)",
            (unsigned long long)(s1.fast_calls - s0.fast_calls));
  CHECK_EQ(th_cmd_int(y, "EXISTS", "sentinel:fast", NULL), 0);
  rlock_lock_free(l);
  rlock_client_free(c);
  th_sentinel_stop_alone(g);
  th_server_stop(y);
  th_server_stop(x);
}

/* Every sentinel and the master gone under a running client: a lock call
 * ends with RLOCK_ECONNECT (the connections wait for a sentinel to answer,
 * nothing hangs; after the 3 s command timeout, not the 1 s wait: a try
 * queued while disconnected waits for its own deadline, as with one server)
 * and rlock_client_free returns at once. */
TEST(everything_gone) {
  th_server_t *m = th_server_start(NULL);
  th_sentinel_t *g = th_sentinel_start_alone("gone", m->port, NULL, 0);
  char url[300];
  snprintf(url, sizeof url, "redis+sentinel://127.0.0.1:%d/gone", g->port);
  rlock_client_t *c = client_on(url, "gone");
  lock_on_master(c, m, "sentinel:gone");
  th_sentinel_stop_alone(g);
  th_server_stop(m);
  rlock_lock_t *l = th_lock(c, "sentinel:gone");
  int64_t t0 = th_now_ms();
  CHECK_RC(rlock_lock_trylock(l, 1000, 10000), RLOCK_ECONNECT);
  int64_t took = th_now_ms() - t0;
  CHECK_MSG(took >= 900 && took < 10000, "trylock(1000 ms) took %lld ms", (long long)took);
  printf("# figures: everything gone: trylock(1000 ms) RLOCK_ECONNECT after %lld ms\n", (long long)took);
  rlock_lock_free(l);
  t0 = th_now_ms();
  rlock_client_free(c);
  took = th_now_ms() - t0;
  CHECK_MSG(took < 10000, "rlock_client_free took %lld ms", (long long)took);
  printf("# figures: everything gone: rlock_client_free took %lld ms\n", (long long)took);
}

/* ------------------------------------------------------------ failover */

static th_lost_t lost = TH_LOST_INIT; /* the holder's lock-lost calls */

static th_server_t *watched;
static int subscribed(void *chan) { return th_numsub(watched, chan) >= 1; }

/* Both clients have their command and subscriber connections on `watched`. */
static int connections_there(void *arg) {
  (void)arg;
  return th_clients_named(watched, "holder") >= 2 && th_clients_named(watched, "waiter") >= 2;
}

static th_server_t *current_master(void) {
  th_server_t *m = th_sentinels_node(dep, th_sentinel_master_port(dep, 0));
  CHECK_MSG(m, "the sentinels name no master of the deployment");
  return m;
}

/* A lock held (replicated with WAIT) and waited for while the master
 * changes (kill: SIGKILL; else SENTINEL FAILOVER, the old master demoted
 * with the clients' connections open): both clients follow, the waiter is
 * resubscribed, the hold survives, and the holder's unlock wakes the waiter
 * by its message. */
/* The live nodes other than m: its replicas once they are all attached. */
static int live_replicas(const th_server_t *m) {
  int n = 0;
  for (int i = 0; i < dep->nnodes; i++) n += dep->nodes[i] != m && dep->nodes[i]->pid > 0;
  return n;
}

/* Whether the waiter's client has read a message since messages_before. */
static rlock_client_t *waiter_client;
static uint64_t messages_before;
static int message_counted(void *arg) {
  rlock_stats_t s;
  rlock_client_stats(waiter_client, &s);
  return s.messages > messages_before;
}

static void held_and_waited_across_failover(bool kill) {
  th_server_t *old = current_master();
  /* every live replica, not one: Sentinel may promote any of them (after the
   * previous failover the demoted node re-attaches last, and with WAIT 1 it
   * was promoted without the hold: the hold "lost" under ASan) */
  int nrep = live_replicas(old);
  CHECK_MSG(th_sentinels_wait_replicas(old, nrep, 60000), "the master's %d replicas are not all online", nrep);
  rlock_client_t *h = client_on(dep->url, "holder"), *w = client_on(dep->url, "waiter");
  th_lost_reset(&lost);
  rlock_client_on_lost(h, th_lost_record, &lost);
  rlock_lock_t *hl = th_lock(h, NAME);
  th_waiter_t wt = {.lock = th_lock(w, NAME), .lease_ms = RLOCK_LEASE_WATCHDOG};

  /* the hold, replicated to every replica before the master changes */
  CHECK_OK(rlock_lock_lock(hl, RLOCK_LEASE_WATCHDOG));
  /* a write, then WAIT on that connection: a raw WAIT alone answers at once
   * (its connection wrote nothing), and a replica just come online gets the
   * stream only at its first periodic ACK (redis 7.0) */
  th_replicas_caught_up(old, nrep, 10000);
  th_waiter_start(&wt);
  watched = old;
  CHECK_MSG(th_wait_until(subscribed, CHANNEL, 30000), "the waiter never subscribed");

  int64_t changed_at = th_now_ms();
  if (kill) {
    th_server_kill(old);
  } else {
    redisReply *r = th_sentinel_cmd(dep, 0, "SENTINEL FAILOVER %s", dep->name);
    CHECK_MSG(r && r->type == REDIS_REPLY_STATUS, "SENTINEL FAILOVER: %s", r && r->str ? r->str : "no reply");
    freeReplyObject(r);
  }
  th_server_t *m = th_sentinels_wait_failover(dep, old->port, 60000);
  CHECK_MSG(m, "no failover within 60 s");
  watched = m;
  int64_t promoted_at = th_now_ms();
  CHECK_MSG(th_wait_until(connections_there, NULL, 30000), "the clients did not follow the new master");
  CHECK_MSG(th_wait_until(subscribed, CHANNEL, 30000), "the waiter was not resubscribed on the new master");
  int64_t followed_at = th_now_ms();
  CHECK(!th_waiter_done(&wt, 0)); /* still waiting: the hold survived */
  /* a replica of the new master online again: the clients saw replicas, so
   * the waiter's grant asks WAIT of one (a replica still resyncing
   * acknowledges nothing: RLOCK_ENOSYNC) */
  CHECK_MSG(th_sentinels_wait_replicas(m, 1, 60000), "the new master has no replica online");

  /* the holder's unlock on the new master wakes the waiter by its message,
   * long before the 30 s lease could */
  rlock_stats_t before;
  rlock_client_stats(w, &before);
  int64_t unlocked_at = th_now_ms();
  CHECK_OK(rlock_lock_unlock(hl));
  CHECK_MSG(th_waiter_done(&wt, 15000), "the waiter did not wake within 15 s of the unlock");
  CHECK_OK(wt.rc);
  CHECK(wt.done_at >= unlocked_at); /* never held twice */
  printf(
      "# figures: %s: sentinels agreed on the new master %lld ms after the change, clients there and "
      "resubscribed %lld ms later; waiter granted %lld ms after the unlock\n",
      kill ? "kill" : "SENTINEL FAILOVER", (long long)(promoted_at - changed_at),
      (long long)(followed_at - promoted_at), (long long)(wt.done_at - unlocked_at));
  /* the message reached the waiter's client (a try in flight since the
   * resubscription may land first and be granted before the message is read) */
  waiter_client = w, messages_before = before.messages;
  CHECK_MSG(th_wait_until(message_counted, NULL, 5000), "the unlock message never reached the waiter's client");
  th_waiter_join(&wt);
  pthread_mutex_lock(&lost.mu);
  CHECK_MSG(lost.calls == 0, "lock lost: %s", rlock_lost_reason_str(lost.reason));
  pthread_mutex_unlock(&lost.mu);
  CHECK_EQ(th_cmd_int(m, "EXISTS", NAME, NULL), 0);
  rlock_stats_t hs;
  rlock_client_stats(h, &hs);
  CHECK(hs.reconnects >= 1);

  /* and new locks go to the new master */
  lock_on_master(h, m, "sentinel:after");
  rlock_lock_free(hl);
  rlock_lock_free(wt.lock);
  rlock_client_free(h);
  rlock_client_free(w);
}

TEST(manual_failover_while_held_and_waited_for) { held_and_waited_across_failover(false); }

TEST(master_killed_while_held_and_waited_for) { held_and_waited_across_failover(true); }

/* A raw command on a fresh connection (th_cmd's cached one may have been
 * killed by a demotion: Sentinel sends CLIENT KILL TYPE normal). */
static redisReply *fresh_cmd(th_server_t *n, const char *fmt, ...) {
  redisContext *raw = th_raw_connect(n);
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = redisvCommand(raw, fmt, ap);
  va_end(ap);
  redisFree(raw);
  return r;
}

/* The hold never reached the replica that gets promoted (deleted there by
 * hand: what a failover before replication does): the new master has no
 * lock, the waiter is woken by its resubscription and takes it, and the
 * holder is told at its reconnect (renewal answers 0), not at the end of
 * its 30 s lease. Without the replica-sync check this overlap is the
 * deployment's, not the client's: the test shows both sides learn at once.
 * The check is off here: with it, the promoted node (no replica left alive)
 * would refuse the waiter with RLOCK_ENOSYNC (the clients saw replicas). */
TEST(unreplicated_hold_is_lost_and_the_waiter_wakes) {
  th_server_t *old = current_master();
  CHECK_MSG(th_sentinels_wait_replicas(old, 1, 60000), "the master has no replica online");
  rlock_client_t *h = client_synced(dep->url, "holder", RLOCK_REPLICA_SYNC_OFF),
                 *w = client_synced(dep->url, "waiter", RLOCK_REPLICA_SYNC_OFF);
  th_lost_reset(&lost);
  rlock_client_on_lost(h, th_lost_record, &lost);
  rlock_lock_t *hl = th_lock(h, NAME);
  th_waiter_t wt = {.lock = th_lock(w, NAME), .lease_ms = RLOCK_LEASE_WATCHDOG};
  CHECK_OK(rlock_lock_lock(hl, RLOCK_LEASE_WATCHDOG));
  /* the hold on the replica before it is deleted there (else it may arrive
   * after the DEL: a raw WAIT alone proves nothing, see above) */
  th_replicas_caught_up(old, 1, 10000);
  for (int i = 0; i < dep->nnodes; i++) {
    th_server_t *n = dep->nodes[i];
    if (n == old || n->pid <= 0) continue;
    redisReply *r = fresh_cmd(n, "CONFIG SET replica-read-only no");
    freeReplyObject(r);
    redisContext *raw = th_raw_connect(n);
    r = redisCommand(raw, "DEL %s", NAME);
    freeReplyObject(r);
    r = redisCommand(raw, "CONFIG SET replica-read-only yes");
    freeReplyObject(r);
    redisFree(raw);
  }
  th_waiter_start(&wt);
  watched = old;
  CHECK_MSG(th_wait_until(subscribed, CHANNEL, 30000), "the waiter never subscribed");
  th_server_kill(old);
  th_server_t *m = th_sentinels_wait_failover(dep, old->port, 60000);
  CHECK_MSG(m, "no failover within 60 s");
  int64_t failed_over_at = th_now_ms();
  CHECK_MSG(th_waiter_done(&wt, 20000), "the waiter still sleeps 20 s after the failover (lease: 30 s)");
  CHECK_OK(wt.rc);
  CHECK_MSG(th_wait_until(th_lost_once, &lost, 20000), "the holder was not told within 20 s");
  int64_t told_at = th_now_ms();
  CHECK(told_at - failed_over_at < 25000);
  printf(
      "# figures: unreplicated hold: waiter granted %lld ms, holder told by %lld ms after the sentinels "
      "agreed\n",
      (long long)(wt.done_at - failed_over_at), (long long)(told_at - failed_over_at));
  pthread_mutex_lock(&lost.mu);
  CHECK_EQ(lost.reason, RLOCK_LOST_DELETED);
  pthread_mutex_unlock(&lost.mu);
  CHECK_RC(rlock_lock_unlock(hl), RLOCK_ENOTHELD);
  th_waiter_join(&wt);
  CHECK_EQ(th_cmd_int(m, "EXISTS", NAME, NULL), 0);
  rlock_lock_free(hl);
  rlock_lock_free(wt.lock);
  rlock_client_free(h);
  rlock_client_free(w);
}

static th_server_t *other;
static int on_other(void *arg) {
  (void)arg;
  return th_clients_named(other, "poller") >= 2;
}

/* The sentinels are told to monitor another server under the same name: no
 * +switch-master is published and no connection drops, so only the poll
 * can move the client there. The replica-sync check is off: the master's
 * replicas were killed by the tests above, Sentinel still lists them, so
 * with it every lock there would end RLOCK_ENOSYNC (issue 20). */
TEST(poll_follows_without_event) {
  rlock_client_t *c = client_synced(dep->url, "poller", RLOCK_REPLICA_SYNC_OFF);
  lock_on_master(c, current_master(), "sentinel:poll");
  other = th_server_start(NULL);
  th_sentinels_monitor(dep, other->port);
  CHECK_MSG(th_wait_until(on_other, NULL, 30000), "the client did not follow the sentinels' new master");
  lock_on_master(c, other, "sentinel:poll");
  rlock_client_free(c);
  th_server_stop(other);
}

/* A primary and its replica, the replica monitored by the sentinels as the
 * master (Sentinel names a node that is not a master). */
static th_server_t *replica_named_master(th_server_t **primary) {
  *primary = th_server_start(NULL);
  char pport[16];
  snprintf(pport, sizeof pport, "%d", (*primary)->port);
  const char *args[] = {"--replicaof", "127.0.0.1", pport, NULL};
  th_server_opts_t ro = {.extra_args = args};
  th_server_t *rep = th_server_start(&ro);
  th_sentinels_monitor(dep, rep->port);
  return rep;
}

/* Sentinel names a replica as the master (monitoring it under the name):
 * the ROLE check refuses it, so nothing is written to a replica. */
TEST(role_check_refuses_a_replica) {
  th_server_t *primary, *rep = replica_named_master(&primary);
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = dep->url;
  o.connect_timeout_ms = 1500; /* the refusal is asked again until then */
  rlock_client_t *c = NULL;
  int64_t t0 = th_now_ms();
  CHECK_RC(rlock_client_new(&c, &o), RLOCK_ECONNECT);
  int64_t took = th_now_ms() - t0;
  CHECK_MSG(strstr(rlock_last_error(), "is not a master (ROLE: slave)"), "message: %s", rlock_last_error());
  /* a lower bound from the option: it kept asking, it did not give up at the first refusal */
  CHECK_MSG(took >= 1400, "rlock_client_new gave up after %lld ms of a 1500 ms connect timeout", (long long)took);
  th_server_stop(rep);
  th_server_stop(primary);
}

/* A client created while Sentinel still names a node that is not a master
 * (mid-failover: the promotion has not happened yet) keeps asking within
 * connect_timeout_ms instead of failing at the first refusal: once the node
 * is promoted, rlock_client_new succeeds and locks there. */
typedef struct {
  rlock_options_t o;
  rlock_client_t *c;
  int rc;
  char msg[256];
} new_arg_t;

static void *client_new_thread(void *p) {
  new_arg_t *a = p;
  a->rc = rlock_client_new(&a->c, &a->o);
  snprintf(a->msg, sizeof a->msg, "%s", rlock_last_error());
  return NULL;
}

static th_server_t *refusing;
static int role_refused(void *arg) {
  (void)arg;
  return th_cmdstat(refusing, "role") >= 1;
}

TEST(role_refusal_then_promoted) {
  th_server_t *primary, *rep = replica_named_master(&primary);
  new_arg_t a;
  memset(&a, 0, sizeof a);
  rlock_options_init(&a.o);
  a.o.url = dep->url;
  a.o.connect_timeout_ms = 60000; /* generous: the promotion below ends the wait */
  pthread_t t;
  CHECK(pthread_create(&t, NULL, client_new_thread, &a) == 0);
  refusing = rep;
  CHECK_MSG(th_wait_until(role_refused, NULL, 30000), "the client never asked ROLE");
  redisReply *r = th_cmd(rep, "REPLICAOF", "NO", "ONE", NULL);
  CHECK(r && r->type == REDIS_REPLY_STATUS);
  freeReplyObject(r);
  pthread_join(t, NULL);
  CHECK_MSG(a.rc == 0, "rlock_client_new: %d %s", a.rc, a.msg);
  if (a.rc == 0) {
    lock_on_master(a.c, rep, "sentinel:promoted");
    rlock_client_free(a.c);
  }
  th_server_stop(rep);
  th_server_stop(primary);
}

/* A node Sentinel keeps naming that is never promoted: rlock_client_new
 * answers at connect_timeout_ms, whatever the reconnect backoff (the next
 * attempt after a refusal is not put off past the deadline). */
TEST(role_refusal_bounded_by_connect_timeout) {
  th_server_t *primary, *rep = replica_named_master(&primary);
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = dep->url;
  /* 2500 ms: under valgrind beside another valgrind process 1000 ms once
   * ended before the first ROLE answer came ("asking the next Sentinel") */
  o.connect_timeout_ms = 2500;
  o.reconnect_min_ms = o.reconnect_max_ms = 10000; /* a backoff far beyond the connect timeout */
  rlock_client_t *c = NULL;
  int64_t t0 = th_now_ms();
  CHECK_RC(rlock_client_new(&c, &o), RLOCK_ECONNECT);
  int64_t took = th_now_ms() - t0;
  CHECK_MSG(strstr(rlock_last_error(), "is not a master (ROLE: slave)"), "message: %s", rlock_last_error());
  /* The start's own deadline answers it (under valgrind too: it once took
   * 7008 ms there, the connect timeout plus a 6 s Sentinel backoff). */
  CHECK_MSG(took >= 2400 && took < 5000, "rlock_client_new answered after %lld ms (connect timeout 2500 ms)",
            (long long)took);
  th_server_stop(rep);
  th_server_stop(primary);
}

/* Every sentinel of the URL accepts the connection and never answers: no
 * connection attempt of the client fails by itself within the connect
 * timeout (each question waits its command timeout, and a whole round of
 * them backs off). rlock_client_new still answers RLOCK_ECONNECT once
 * connect_timeout_ms has passed: the start has its own deadline. */
TEST(silent_sentinels_bounded_by_connect_timeout) {
  int fds[3];
  char url[300];
  size_t at = (size_t)snprintf(url, sizeof url, "redis+sentinel://");
  for (int i = 0; i < 3; i++) {
    fds[i] = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    CHECK(fds[i] >= 0 && bind(fds[i], (struct sockaddr *)&a, sizeof a) == 0 && listen(fds[i], 16) == 0 &&
          getsockname(fds[i], (struct sockaddr *)&a, &len) == 0);
    at += (size_t)snprintf(url + at, sizeof url - at, "%s127.0.0.1:%d", i ? "," : "", ntohs(a.sin_port));
  }
  snprintf(url + at, sizeof url - at, "/mymaster");
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = url;
  o.connect_timeout_ms = 1000;
  o.command_timeout_ms = 5000;
  o.reconnect_min_ms = o.reconnect_max_ms = 6000;
  rlock_client_t *c = NULL;
  int64_t t0 = th_now_ms();
  CHECK_RC(rlock_client_new(&c, &o), RLOCK_ECONNECT);
  int64_t took = th_now_ms() - t0;
  printf("rlock_client_new answered after %lld ms: %s\n", (long long)took, rlock_last_error());
  CHECK_MSG(took >= 900 && took < 3000, "rlock_client_new answered after %lld ms (connect timeout 1000 ms)",
            (long long)took);
  for (int i = 0; i < 3; i++) close(fds[i]);
}

/* test_sentinel [NAME...]: the named tests only (all by default). */
static int wanted(int argc, char **argv, const char *name) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], name) == 0) return 1;
  return argc < 2;
}
#define RUN_WANTED(name) \
  if (wanted(argc, argv, #name)) RUN(name)

int main(int argc, char **argv) {
  th_init(argc, argv, 600);
  RUN_WANTED(url_errors);
  RUN_WANTED(url_redaction);
  dep = th_sentinels_start("mymaster", 2, 3);
  RUN_WANTED(connect_first_sentinel_dead);
  RUN_WANTED(connect_first_sentinel_silent);
  RUN_WANTED(connect_with_db_and_user_command);
  RUN_WANTED(unknown_master);
  RUN_WANTED(sentinel_refusal_said_whole);
  RUN_WANTED(no_sentinel_reachable);
  RUN_WANTED(cli_exec_and_status);
  RUN_WANTED(sentinel_password);
  RUN_WANTED(tls_sentinel_and_master);
  RUN_WANTED(readonly_after_a_silent_demotion);
  RUN_WANTED(fast_path_follows_the_master);
  RUN_WANTED(everything_gone);
  RUN_WANTED(manual_failover_while_held_and_waited_for);
  RUN_WANTED(master_killed_while_held_and_waited_for);
  RUN_WANTED(unreplicated_hold_is_lost_and_the_waiter_wakes);
  RUN_WANTED(poll_follows_without_event);
  RUN_WANTED(role_check_refuses_a_replica);
  RUN_WANTED(role_refusal_then_promoted);
  RUN_WANTED(role_refusal_bounded_by_connect_timeout);
  RUN_WANTED(silent_sentinels_bounded_by_connect_timeout);
  th_sentinels_stop(dep);
  return th_done();
}
