/* test_dns.c -- host names are resolved without blocking the client's I/O
 * thread (libevent's evdns on the client's loop), against real redis-servers
 * on loopback and a nameserver of the test's own that never answers (a UDP
 * socket on 127.0.0.1, given to the client's evdns through the test-only
 * seam rlock__test_resolv_conf):
 *   localhost         a URL naming localhost works, through evdns (/etc/hosts);
 *                     a numeric URL never asks evdns
 *   tls_localhost     rediss://localhost: resolved, and the certificate's
 *                     name verified against it
 *   not_blocking      while the client's user connection waits for a name the
 *                     silent nameserver never answers, a lock and an unlock on
 *                     its ready command connection (same I/O thread) complete
 *                     well within the connect timeout
 *   aaaa_unanswered   a nameserver answering A and never AAAA (a test one of
 *                     its own): connected with the A address, well within
 *                     connect_timeout_ms (a real nameserver's answer, the
 *                     asynchronous path)
 *   connect_timeout   a name still unresolved at connect_timeout_ms fails the
 *                     connection with RLOCK_ECONNECT naming the host, at the
 *                     timeout (the resolution is cancelled)
 *   free_resolving    freeing the client while a resolution is in flight ends
 *                     the waiting command (RLOCK_ECLOSED); no callback into
 *                     freed memory (ASan), nothing leaked
 *   fork_resolving    a forked child that frees a client whose resolution is
 *                     in flight touches nothing; the parent's client still works
 *   cluster_hostnames a Cluster announcing "localhost" as its nodes' endpoint
 *                     (cluster-preferred-endpoint-type hostname): locks on
 *                     every shard, reached through names evdns resolved
 *   cluster_free_resolving freeing a Cluster client while a node connection
 *                     (in the node table the close frees) is resolving: the
 *                     cancelled callback never touches it (ASan)
 *   sentinel_hostnames a sentinel naming its master "localhost"
 *                     (resolve-hostnames, announce-hostnames): lock + unlock */
#include "harness.h"
#include "harness_cluster.h"
#include "harness_sentinel.h"
#include "internal.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define BAD_NAME "some.name.invalid"

/* ------------------------------------------------------------ silent nameserver */

static int silent_fd = -1;

/* A UDP socket on 127.0.0.1 that reads queries and never answers, and a
 * resolv.conf naming it, given to the clients made from now on. */
static void silent_nameserver(void) {
  static char path[300];
  if (silent_fd < 0) {
    silent_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t n = sizeof a;
    CHECK(silent_fd >= 0 && bind(silent_fd, (struct sockaddr *)&a, sizeof a) == 0);
    CHECK(getsockname(silent_fd, (struct sockaddr *)&a, &n) == 0);
    snprintf(path, sizeof path, "%s/resolv.conf", th_tempdir());
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    /* evdns would give up after its own timeout: make that later than any test */
    fprintf(f, "nameserver 127.0.0.1:%d\noptions timeout:60 attempts:1\n", ntohs(a.sin_port));
    fclose(f);
  }
  rlock__test_resolv_conf = path; /* again after a test that used the default (default_resolver) */
  char buf[512];
  while (recv(silent_fd, buf, sizeof buf, MSG_DONTWAIT) > 0) { /* forget older queries */
  }
}

/* 1 once a query for BAD_NAME reached the silent nameserver within timeout_ms. */
static int query_seen(int64_t timeout_ms) {
  int64_t end = th_now_ms() + timeout_ms;
  for (int64_t left; (left = end - th_now_ms()) > 0;) {
    struct pollfd p = {.fd = silent_fd, .events = POLLIN};
    if (poll(&p, 1, (int)left) <= 0) continue;
    char buf[512];
    ssize_t n = recv(silent_fd, buf, sizeof buf, MSG_DONTWAIT);
    for (ssize_t i = 0; i < n; i++) /* evdns randomizes the case of the name (0x20 hack) */
      if (buf[i] >= 'A' && buf[i] <= 'Z') buf[i] = (char)(buf[i] - 'A' + 'a');
    if (n > 0 && memmem(buf, (size_t)n, "\x07invalid", 8)) return 1; /* the name's last label */
  }
  return 0;
}

static void default_resolver(void) { rlock__test_resolv_conf = NULL; }

static uint64_t lookups(rlock_client_t *c) { return atomic_load(&c->net.dns_lookups); }

static rlock_client_t *client_with(const char *url, int64_t connect_timeout_ms) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = url;
  o.connect_timeout_ms = connect_timeout_ms;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  return c;
}

static void lock_unlock(rlock_client_t *c, const char *name) {
  rlock_lock_t *l = th_lock(c, name);
  CHECK_OK(rlock_lock_lock(l, 10000));
  CHECK_OK(rlock_lock_unlock(l));
  rlock_lock_free(l);
}

/* ------------------------------------------------------------ tests */

TEST(localhost) {
  default_resolver();
  th_server_t *s = th_server_start(NULL);
  char url[100];
  snprintf(url, sizeof url, "redis://localhost:%d", s->port);
  rlock_client_t *c = client_with(url, 3000);
  lock_unlock(c, "dns-localhost");
  CHECK(lookups(c) >= 1); /* the command and subscriber connections asked evdns */
  rlock_client_free(c);

  c = client_with(s->url, 3000); /* 127.0.0.1: parsed, never asked */
  lock_unlock(c, "dns-numeric");
  CHECK_EQ(lookups(c), 0);
  rlock_client_free(c);
  th_server_stop(s);
}

TEST(tls_localhost) {
  default_resolver();
  th_server_opts_t so = {.tls = 1};
  th_server_t *s = th_server_start(&so);
  char url[100];
  snprintf(url, sizeof url, "rediss://localhost:%d", s->tls_port);
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = url;
  o.tls_ca_file = th_tls_certs()->ca; /* the certificate names localhost: verified */
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  lock_unlock(c, "dns-tls");
  CHECK(lookups(c) >= 1);
  rlock_client_free(c);
  th_server_stop(s);
}

/* A user command on a thread of its own, its connection pointed at BAD_NAME. */
typedef struct user_cmd {
  rlock_client_t *c;
  int64_t timeout_ms;
  int rc;
  int64_t took_ms;
  atomic_bool done;
  pthread_t t;
} user_cmd_t;

static void *user_cmd_main(void *arg) {
  user_cmd_t *u = arg;
  const char *argv[] = {"PING"};
  rlock_reply_t *r = NULL;
  int64_t t0 = th_now_ms();
  u->rc = rlock_client_command_timeout(u->c, u->timeout_ms, 1, argv, NULL, &r);
  u->took_ms = th_now_ms() - t0;
  rlock_reply_free(r);
  atomic_store(&u->done, true);
  return NULL;
}

/* The user connection is opened on its first command, on the node set here
 * (before that command is submitted: the submit orders this write before the
 * I/O thread's read). */
static void user_cmd_start(user_cmd_t *u, rlock_client_t *c, int port, int64_t timeout_ms) {
  memset(u, 0, sizeof *u);
  u->c = c;
  u->timeout_ms = timeout_ms;
  CHECK_OK(rlock__conn_set_node(&c->uc.conn, BAD_NAME, port));
  CHECK(pthread_create(&u->t, NULL, user_cmd_main, u) == 0);
}

/* An async lock call's end, awaited by the test thread with a bound (a sync
 * call would hang with a blocked I/O thread). */
typedef struct async_call {
  atomic_bool done;
  int status;
} async_call_t;

static void call_done(rlock_lock_t *l, int status, int64_t value, void *arg) {
  async_call_t *a = arg;
  a->status = status;
  atomic_store(&a->done, true);
}

static int call_ended(void *arg) { return atomic_load(&((async_call_t *)arg)->done); }

TEST(not_blocking) {
  silent_nameserver();
  th_server_t *s = th_server_start(NULL);
  const int64_t connect_ms = 2000;
  rlock_client_t *c = client_with(s->url, connect_ms);
  user_cmd_t u;
  user_cmd_start(&u, c, s->port, 2 * connect_ms + 1000); /* outlives a few resolutions */
  /* Not fatal yet: a resolver that blocks the loop is what is under test. */
  int seen = query_seen(connect_ms);
  int64_t t0 = th_now_ms();
  rlock_lock_t *l = th_lock(c, "dns-not-blocked");
  async_call_t a = {0};
  CHECK_OK(rlock_lock_acquire_async(l, 7, 10000, RLOCK_LEASE_WATCHDOG, NULL, call_done, &a));
  CHECK_MSG(th_wait_until(call_ended, &a, connect_ms), "no lock within %lld ms while a name was being resolved",
            (long long)connect_ms);
  CHECK_OK(a.status);
  a.done = false;
  CHECK_OK(rlock_lock_release_async(l, 7, call_done, &a));
  CHECK_MSG(th_wait_until(call_ended, &a, connect_ms), "no unlock within %lld ms while a name was being resolved",
            (long long)connect_ms);
  CHECK_OK(a.status);
  int64_t took = th_now_ms() - t0;
  CHECK_MSG(took < connect_ms, "lock + unlock took %lld ms while a name was being resolved", (long long)took);
  rlock_lock_free(l);
  CHECK_MSG(!atomic_load(&u.done), "the user command ended (%s) before the resolution could", rlock_err_name(u.rc));
  CHECK_MSG(seen, "no query for " BAD_NAME " reached the test's nameserver");
  CHECK(lookups(c) >= 1);
  pthread_join(u.t, NULL);
  CHECK_EQ(u.rc, RLOCK_ECONNECT); /* never connected: its own timeout */
  CHECK(u.took_ms >= u.timeout_ms - 50);
  rlock_client_free(c);
  th_server_stop(s);
}

TEST(connect_timeout) {
  silent_nameserver();
  const int64_t connect_ms = 1000;
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = "redis://" BAD_NAME ":6379";
  o.connect_timeout_ms = connect_ms;
  rlock_client_t *c = NULL;
  int64_t t0 = th_now_ms();
  int rc = rlock_client_new(&c, &o);
  int64_t took = th_now_ms() - t0;
  CHECK_RC(rc, RLOCK_ECONNECT);
  const char *msg = rlock_last_error();
  CHECK_MSG(strstr(msg, BAD_NAME) && strstr(msg, "resolve"), "unclear message: %s", msg);
  CHECK_MSG(took >= connect_ms - 50 && took < connect_ms + 5000, "failed after %lld ms (connect timeout %lld)",
            (long long)took, (long long)connect_ms);
}

TEST(free_resolving) {
  silent_nameserver();
  th_server_t *s = th_server_start(NULL);
  rlock_client_t *c = client_with(s->url, 3000);
  user_cmd_t u;
  user_cmd_start(&u, c, s->port, RLOCK_WAIT_FOREVER);
  CHECK_MSG(query_seen(5000), "no query for " BAD_NAME " reached the test's nameserver");
  rlock_client_free(c); /* the resolution is cancelled; its callback must not touch c */
  pthread_join(u.t, NULL);
  CHECK_EQ(u.rc, RLOCK_ECLOSED);
  th_server_stop(s);
}

TEST(fork_resolving) {
  silent_nameserver();
  th_server_t *s = th_server_start(NULL);
  rlock_client_t *c = client_with(s->url, 3000);
  user_cmd_t u;
  user_cmd_start(&u, c, s->port, RLOCK_WAIT_FOREVER);
  CHECK_MSG(query_seen(5000), "no query for " BAD_NAME " reached the test's nameserver");
  pid_t pid = th_fork();
  if (pid == 0) {
    rlock_client_free(c); /* the parent's: touches nothing */
    th_exit_by_exec(0);
  }
  CHECK_EQ(th_wait_child(pid), 0);
  lock_unlock(c, "dns-after-fork");
  rlock_client_free(c);
  pthread_join(u.t, NULL);
  CHECK_EQ(u.rc, RLOCK_ECLOSED);
  th_server_stop(s);
}

/* Every node's CLUSTER SLOTS names "localhost" for every shard. */
static int announces_hostnames(void *arg) {
  th_cluster_t *k = arg;
  for (int i = 0; i < k->n; i++) {
    redisReply *r = th_cmd(k->node[i], "CLUSTER", "SLOTS", NULL);
    int ok = r->type == REDIS_REPLY_ARRAY && r->elements >= 3;
    for (size_t j = 0; ok && j < r->elements; j++) {
      redisReply *m = r->element[j]->element[2];
      ok = m->element[0]->type == REDIS_REPLY_STRING && strcmp(m->element[0]->str, "localhost") == 0;
    }
    th_reply_free(r);
    if (!ok) return 0;
  }
  return 1;
}

TEST(cluster_hostnames) {
  default_resolver();
  th_cluster_t *k = th_cluster_start(3, 0, 5000);
  for (int i = 0; i < k->n; i++) {
    th_reply_free(th_cmd(k->node[i], "CONFIG", "SET", "cluster-announce-hostname", "localhost", NULL));
    th_reply_free(th_cmd(k->node[i], "CONFIG", "SET", "cluster-preferred-endpoint-type", "hostname", NULL));
  }
  CHECK_MSG(th_wait_until(announces_hostnames, k, 30000), "the nodes do not announce localhost");
  rlock_client_t *c = client_with(k->url, 3000);
  bool shard_seen[TH_CLUSTER_MAX] = {false};
  int shards = 0;
  for (int i = 0; shards < k->masters && i < 1000; i++) {
    char name[32];
    snprintf(name, sizeof name, "dns-cluster-%d", i);
    int m = 0;
    th_server_t *owner = th_cluster_owner(k, rlock__names_slot(name, strlen(name)));
    while (k->node[m] != owner) m++;
    if (shard_seen[m]) continue;
    shard_seen[m] = true;
    shards++;
    lock_unlock(c, name);
  }
  CHECK_EQ(shards, k->masters);
  CHECK(lookups(c) >= 1); /* the shards were reached by their announced name */
  rlock_client_free(c);
  th_cluster_stop(k);
}

/* ------------------------------------------------------------ an A-only nameserver */

/* A nameserver on 127.0.0.1 that answers A queries with 127.0.0.1 and never
 * answers AAAA ones (as some resolvers and middleboxes do), on a thread of
 * its own until stopped; a resolv.conf naming it, for the clients made
 * from now on. */
typedef struct a_only {
  int fd;
  atomic_bool stop;
  atomic_int answered, dropped;
  pthread_t t;
  char conf[300];
} a_only_t;

static void *a_only_main(void *arg) {
  a_only_t *ns = arg;
  while (!atomic_load(&ns->stop)) {
    struct pollfd p = {.fd = ns->fd, .events = POLLIN};
    if (poll(&p, 1, 50) <= 0) continue; /* 50 ms: how soon it sees stop */
    unsigned char q[512], a[600];
    struct sockaddr_storage from;
    socklen_t fl = sizeof from;
    ssize_t n = recvfrom(ns->fd, q, sizeof q, 0, (struct sockaddr *)&from, &fl);
    if (n < 17) continue;
    size_t i = 12; /* the question: labels, then type and class */
    while (i < (size_t)n && q[i]) i += q[i] + 1u;
    if (i + 5 > (size_t)n) continue;
    int qtype = q[i + 1] << 8 | q[i + 2];
    size_t qend = i + 5;
    if (qtype != 1) { /* AAAA (28): no answer at all */
      atomic_fetch_add(&ns->dropped, 1);
      continue;
    }
    memcpy(a, q, qend);       /* the id and the question, as asked (the name's case too) */
    a[2] = 0x81, a[3] = 0x80; /* a response, recursion desired and available, no error */
    a[6] = 0, a[7] = 1;       /* one answer */
    a[8] = a[9] = a[10] = a[11] = 0;
    static const unsigned char rr[] = {0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 127, 0, 0, 1};
    memcpy(a + qend, rr, sizeof rr);
    sendto(ns->fd, a, qend + sizeof rr, 0, (struct sockaddr *)&from, fl);
    atomic_fetch_add(&ns->answered, 1);
  }
  return NULL;
}

static void a_only_start(a_only_t *ns) {
  memset(ns, 0, sizeof *ns);
  ns->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t n = sizeof a;
  CHECK(ns->fd >= 0 && bind(ns->fd, (struct sockaddr *)&a, sizeof a) == 0);
  CHECK(getsockname(ns->fd, (struct sockaddr *)&a, &n) == 0);
  snprintf(ns->conf, sizeof ns->conf, "%s/resolv.conf", th_tempdir());
  FILE *f = fopen(ns->conf, "w");
  CHECK(f != NULL);
  fprintf(f, "nameserver 127.0.0.1:%d\noptions timeout:60 attempts:1\n", ntohs(a.sin_port));
  fclose(f);
  rlock__test_resolv_conf = ns->conf;
  CHECK(pthread_create(&ns->t, NULL, a_only_main, ns) == 0);
}

static void a_only_stop(a_only_t *ns) {
  atomic_store(&ns->stop, true);
  pthread_join(ns->t, NULL);
  close(ns->fd);
  rlock__test_resolv_conf = NULL;
}

/* A name a nameserver answers (A) while its AAAA query goes unanswered: the
 * client connects with the address it has, well within connect_timeout_ms
 * (evdns would wait 3 s for the other family by default: longer than the
 * connect timeout, so every attempt failed although the address was known). */
TEST(aaaa_unanswered) {
  a_only_t ns;
  a_only_start(&ns);
  th_server_t *s = th_server_start(NULL);
  char url[100];
  snprintf(url, sizeof url, "redis://a-only.rlock.test:%d", s->port);
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = url;
  o.connect_timeout_ms = 2000;
  rlock_client_t *c = NULL;
  int64_t t0 = th_now_ms();
  int rc = rlock_client_new(&c, &o);
  int64_t took = th_now_ms() - t0;
  CHECK_MSG(rc == 0, "rlock_client_new after %lld ms: %s %s", (long long)took, rlock_err_name(rc), rlock_last_error());
  printf("# connected after %lld ms (connect timeout 2000 ms)\n", (long long)took);
  CHECK(atomic_load(&ns.answered) >= 1 && atomic_load(&ns.dropped) >= 1); /* both families were asked */
  lock_unlock(c, "dns-a-only");
  rlock_client_free(c);
  a_only_stop(&ns);
  th_server_stop(s);
}

/* node[0]'s CLUSTER SLOTS (what the client asks first: the URL's first
 * seed) names BAD_NAME for node[1]'s shard. */
static int announces_bad_name(void *arg) {
  th_cluster_t *k = arg;
  redisReply *r = th_cmd(k->node[0], "CLUSTER", "SLOTS", NULL);
  int found = 0;
  for (size_t j = 0; r->type == REDIS_REPLY_ARRAY && j < r->elements; j++) {
    redisReply *m = r->element[j]->element[2];
    found |= m->element[0]->type == REDIS_REPLY_STRING && strcmp(m->element[0]->str, BAD_NAME) == 0;
  }
  th_reply_free(r);
  return found;
}

/* A Cluster node connection (its conn_t lives in the node table, freed by
 * the topology's close) is resolving a name the silent nameserver never
 * answers when the client is freed: the cancelled resolution calls back
 * after the node table is gone, and must not touch it (ASan: a callback
 * that still wrote to its connection would write to freed memory). */
TEST(cluster_free_resolving) {
  silent_nameserver();
  th_cluster_t *k = th_cluster_start(3, 0, 5000);
  th_reply_free(th_cmd(k->node[1], "CONFIG", "SET", "cluster-announce-hostname", BAD_NAME, NULL));
  for (int i = 0; i < k->n; i++) /* the others have no name: "?", their address as the seed's */
    th_reply_free(th_cmd(k->node[i], "CONFIG", "SET", "cluster-preferred-endpoint-type", "hostname", NULL));
  CHECK_MSG(th_wait_until(announces_bad_name, k, 30000), "node[0] does not announce " BAD_NAME);
  silent_nameserver(); /* forget older queries */
  rlock_client_t *c = client_with(k->url, 3000);
  CHECK_MSG(query_seen(5000), "no query for " BAD_NAME " reached the test's nameserver");
  rlock_client_free(c); /* the node's resolution is cancelled; its callback runs after the node is freed */
  th_cluster_stop(k);
}

/* A raw command to the only sentinel of t that must answer OK. */
static void sentinel_ok(th_sentinels_t *t, const char *fmt, const char *a, int port) {
  redisReply *r = th_sentinel_cmd(t, 0, fmt, a, port);
  CHECK_MSG(r && r->type == REDIS_REPLY_STATUS, "sentinel: %s", r && r->str ? r->str : "no reply");
  th_reply_free(r);
}

TEST(sentinel_hostnames) {
  default_resolver();
  th_sentinels_t *t = th_sentinels_start("dnsmaster", 0, 1);
  sentinel_ok(t, "SENTINEL CONFIG SET resolve-hostnames yes", NULL, 0);
  sentinel_ok(t, "SENTINEL CONFIG SET announce-hostnames yes", NULL, 0);
  sentinel_ok(t, "SENTINEL REMOVE %s", t->name, 0);
  sentinel_ok(t, "SENTINEL MONITOR %s localhost %d 1", t->name, t->nodes[0]->port);
  redisReply *r = th_sentinel_cmd(t, 0, "SENTINEL GET-MASTER-ADDR-BY-NAME %s", t->name);
  CHECK_MSG(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && strcmp(r->element[0]->str, "localhost") == 0,
            "the sentinel does not name the master localhost");
  th_reply_free(r);
  rlock_client_t *c = client_with(t->url, 3000);
  lock_unlock(c, "dns-sentinel");
  CHECK(lookups(c) >= 1); /* the sentinels are numeric in the URL: the master's name was resolved */
  rlock_client_free(c);
  th_sentinels_stop(t);
}

/* test_dns [NAME...]: the named tests only (all by default). */
static int wanted(int argc, char **argv, const char *name) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], name) == 0) return 1;
  return argc < 2;
}
#define RUN_WANTED(name) \
  if (wanted(argc, argv, #name)) RUN(name)

int main(int argc, char **argv) {
  th_init(argc, argv, 600);
  RUN_WANTED(localhost);
  RUN_WANTED(tls_localhost);
  RUN_WANTED(not_blocking);
  RUN_WANTED(connect_timeout);
  RUN_WANTED(aaaa_unanswered);
  RUN_WANTED(free_resolving);
  RUN_WANTED(fork_resolving);
  RUN_WANTED(cluster_hostnames);
  RUN_WANTED(cluster_free_resolving);
  RUN_WANTED(sentinel_hostnames);
  return th_done();
}
