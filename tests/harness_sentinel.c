/* harness_sentinel.c -- a Sentinel deployment for the tests (see
 * harness_sentinel.h): the master and replicas are the harness's
 * redis-servers; the sentinels are spawned here (redis-server <conf>
 * --sentinel needs a config file of its own, which it rewrites). */
#include "harness_sentinel.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

int th_dead_port(void) { return th_free_port(); }

/* Every sentinel of the process, killed at exit (they also die with the
 * thread that started them: PR_SET_PDEATHSIG). */
static th_sentinel_t *live[16];
static void kill_all(void) {
  for (int i = 0; i < 16; i++)
    if (live[i] && live[i]->pid > 0) {
      kill(live[i]->pid, SIGKILL);
      waitpid(live[i]->pid, NULL, 0);
      live[i]->pid = 0;
    }
}

static void track(th_sentinel_t *s, bool add) {
  static bool registered;
  if (!registered) atexit(kill_all), registered = true;
  for (int i = 0; i < 16; i++)
    if (add ? !live[i] : live[i] == s) {
      live[i] = add ? s : NULL;
      return;
    }
}

static void write_conf(const th_sentinel_t *s, const char *name, int master_port, int quorum, const char *requirepass,
                       const char *extra) {
  char path[300];
  snprintf(path, sizeof path, "%s/sentinel.conf", s->dir);
  FILE *f = fopen(path, "w");
  if (!f) th_fail(__FILE__, __LINE__, "cannot write %s: %s", path, strerror(errno));
  fprintf(f,
          "port %d\nbind 127.0.0.1\ndir %s\n"
          "sentinel monitor %s 127.0.0.1 %d %d\n"
          "sentinel down-after-milliseconds %s 1000\n"
          "sentinel failover-timeout %s 5000\n"
          "sentinel parallel-syncs %s 1\n",
          s->port, s->dir, name, master_port, quorum, name, name, name);
  if (requirepass) fprintf(f, "requirepass %s\n", requirepass);
  if (extra) fputs(extra, f);
  if (s->tls_port) { /* TLS to its clients and to the instances it monitors */
    const th_tls_certs_t *c = th_tls_certs();
    fprintf(f,
            "tls-port %d\ntls-cert-file %s\ntls-key-file %s\ntls-ca-cert-file %s\n"
            "tls-auth-clients no\ntls-replication yes\n",
            s->tls_port, c->server_cert, c->server_key, c->ca);
  }
  fclose(f);
}

/* Spawns the sentinel and reads its log until it monitors the master.
 * 0, or 1 if its port was taken (the caller picks another). */
static int spawn_sentinel(th_sentinel_t *s) {
  char conf[300];
  snprintf(conf, sizeof conf, "%s/sentinel.conf", s->dir);
  const char *argv[] = {"redis-server", conf, "--sentinel", NULL};
  return th_spawn_ready(argv, "+monitor master", &s->pid);
}

static redisContext *sentinel_connect(const th_sentinel_t *s) {
  struct timeval tv = {2, 0};
  redisContext *c = redisConnectWithTimeout("127.0.0.1", s->port, tv);
  if (!c || c->err) {
    if (c) redisFree(c);
    return NULL;
  }
  redisSetTimeout(c, tv);
  return c;
}

redisReply *th_sentinel_cmd(th_sentinels_t *t, int i, const char *fmt, ...) {
  if (t->sent[i].pid <= 0) return NULL;
  redisContext *c = sentinel_connect(&t->sent[i]);
  if (!c) return NULL;
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = redisvCommand(c, fmt, ap);
  va_end(ap);
  redisFree(c);
  return r;
}

/* A number field of a SENTINEL MASTER reply (flat name/value array). */
static long long master_field(th_sentinels_t *t, int i, const char *field) {
  redisReply *r = th_sentinel_cmd(t, i, "SENTINEL MASTER %s", t->name);
  long long v = -1;
  if (r && r->type == REDIS_REPLY_ARRAY)
    for (size_t k = 0; k + 1 < r->elements; k += 2)
      if (!strcmp(r->element[k]->str, field)) v = atoll(r->element[k + 1]->str);
  if (r) freeReplyObject(r);
  return v;
}

int th_sentinel_master_port(th_sentinels_t *t, int i) {
  redisReply *r = th_sentinel_cmd(t, i, "SENTINEL GET-MASTER-ADDR-BY-NAME %s", t->name);
  int port = 0;
  if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2) port = atoi(r->element[1]->str);
  if (r) freeReplyObject(r);
  return port;
}

th_server_t *th_sentinels_node(th_sentinels_t *t, int port) {
  for (int i = 0; i < t->nnodes; i++)
    if (t->nodes[i] && t->nodes[i]->port == port) return t->nodes[i];
  return NULL;
}

/* Every sentinel knows every replica and every other sentinel; every
 * replica is online (past its first sync: a client that sees none online
 * while Sentinel lists replicas asks WAIT of one, and a replica in its
 * first sync acknowledges nothing). */
static int deployment_ready(void *arg) {
  th_sentinels_t *t = arg;
  for (int i = 0; i < t->nsent; i++)
    if (master_field(t, i, "num-slaves") != t->nnodes - 1 || master_field(t, i, "num-other-sentinels") != t->nsent - 1)
      return 0;
  redisReply *r = th_cmd(t->nodes[0], "INFO", "replication", NULL);
  int online = 0;
  for (const char *p = r && r->type == REDIS_REPLY_STRING ? r->str : NULL; p && (p = strstr(p, "state=online")); p++)
    online++;
  th_reply_free(r);
  return online == t->nnodes - 1;
}

th_sentinels_t *th_sentinels_start(const char *name, int nreplicas, int nsentinels) {
  th_sentinels_t *t = calloc(1, sizeof *t);
  if (!t || nreplicas > TH_MAX_REPLICAS || nsentinels > TH_MAX_SENTINELS || nsentinels < 1)
    th_fail(__FILE__, __LINE__, "bad sentinel deployment");
  snprintf(t->name, sizeof t->name, "%s", name);
  t->nodes[0] = th_server_start(NULL);
  t->nnodes = 1;
  for (int i = 0; i < nreplicas; i++) {
    const char **a = t->args[i];
    snprintf(t->replicaof[i], sizeof t->replicaof[i], "%d", t->nodes[0]->port);
    a[0] = "--replicaof", a[1] = "127.0.0.1", a[2] = t->replicaof[i], a[3] = NULL;
    th_server_opts_t o = {.extra_args = a};
    t->nodes[t->nnodes++] = th_server_start(&o);
  }
  int n = snprintf(t->url, sizeof t->url, "redis+sentinel://");
  for (int i = 0; i < nsentinels; i++) {
    th_sentinel_t *s = &t->sent[i];
    snprintf(s->dir, sizeof s->dir, "%s", th_tempdir());
    for (int attempt = 0;; attempt++) {
      s->port = th_free_port();
      write_conf(s, t->name, t->nodes[0]->port, nsentinels / 2 + 1, NULL, NULL);
      if (spawn_sentinel(s) == 0) break;
      if (attempt == 10) th_fail(__FILE__, __LINE__, "no free port for redis-sentinel");
    }
    track(s, true);
    t->nsent++;
    n += snprintf(t->url + n, sizeof t->url - (size_t)n, "%s127.0.0.1:%d", i ? "," : "", s->port);
  }
  snprintf(t->url + n, sizeof t->url - (size_t)n, "/%s", name);
  if (!th_wait_until(deployment_ready, t, 60000))
    th_fail(__FILE__, __LINE__, "the sentinels did not discover the replicas and each other within 60 s");
  return t;
}

th_sentinel_t *th_sentinel_start_alone(const char *name, int master_port, const char *requirepass, int tls) {
  th_sentinel_t *s = calloc(1, sizeof *s);
  if (!s) th_fail(__FILE__, __LINE__, "out of memory");
  snprintf(s->dir, sizeof s->dir, "%s", th_tempdir());
  for (int attempt = 0;; attempt++) {
    s->port = th_free_port();
    s->tls_port = tls ? th_free_port() : 0;
    write_conf(s, name, master_port, 1, requirepass, NULL);
    if (spawn_sentinel(s) == 0) break;
    if (attempt == 10) th_fail(__FILE__, __LINE__, "no free port for redis-sentinel");
  }
  track(s, true);
  return s;
}

th_sentinel_t *th_sentinel_start_stale(th_sentinels_t *t, int master_port) {
  /* The user the stale sentinel logs in as on every node: no channel
   * (Redis 7: resetchannels), so it neither hears nor sends the other
   * sentinels' hello messages and they never tell it of a failover; and no
   * REPLICAOF: a stale sentinel that can reach the promoted replica would
   * "+convert-to-slave" it back under its old master (one on the minority
   * side of a partition cannot reach it). */
  for (int i = 0; i < t->nnodes; i++) {
    if (!t->nodes[i] || t->nodes[i]->pid <= 0) continue;
    redisContext *raw = th_raw_connect(t->nodes[i]);
    redisReply *r = redisCommand(
        raw, "ACL SETUSER stale on >stalepw ~* resetchannels +@all -replicaof -slaveof -failover -config");
    if (!r || r->type != REDIS_REPLY_STATUS)
      th_fail(__FILE__, __LINE__, "ACL SETUSER stale: %s", r && r->str ? r->str : "no reply");
    freeReplyObject(r);
    redisFree(raw);
  }
  th_sentinel_t *s = calloc(1, sizeof *s);
  if (!s) th_fail(__FILE__, __LINE__, "out of memory");
  snprintf(s->dir, sizeof s->dir, "%s", th_tempdir());
  char extra[300];
  snprintf(extra, sizeof extra, "sentinel auth-user %s stale\nsentinel auth-pass %s stalepw\n", t->name, t->name);
  for (int attempt = 0;; attempt++) {
    s->port = th_free_port();
    write_conf(s, t->name, master_port, 2, NULL, extra);
    if (spawn_sentinel(s) == 0) break;
    if (attempt == 10) th_fail(__FILE__, __LINE__, "no free port for redis-sentinel");
  }
  track(s, true);
  return s;
}

void th_sentinel_stop_alone(th_sentinel_t *s) {
  if (s->pid > 0) {
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
  }
  track(s, false);
  free(s);
}

void th_sentinel_kill(th_sentinels_t *t, int i) {
  th_sentinel_t *s = &t->sent[i];
  if (s->pid > 0) {
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
  }
  s->pid = 0;
}

typedef struct failover_wait {
  th_sentinels_t *t;
  int old_port, port;
} failover_wait_t;

static int failed_over(void *arg) {
  failover_wait_t *w = arg;
  int port = 0;
  for (int i = 0; i < w->t->nsent; i++) {
    if (w->t->sent[i].pid <= 0) continue;
    int p = th_sentinel_master_port(w->t, i);
    if (p == 0 || p == w->old_port || (port && p != port)) return 0;
    port = p;
  }
  th_server_t *s = th_sentinels_node(w->t, port);
  if (!s) return 0;
  redisContext *raw = th_raw_connect(s);
  redisReply *r = redisCommand(raw, "ROLE");
  int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements && !strcmp(r->element[0]->str, "master");
  if (r) freeReplyObject(r);
  redisFree(raw);
  w->port = port;
  return ok;
}

th_server_t *th_sentinels_wait_failover(th_sentinels_t *t, int old_port, int64_t timeout_ms) {
  failover_wait_t w = {t, old_port, 0};
  if (!th_wait_until(failed_over, &w, timeout_ms)) return NULL;
  /* A demoted node's clients were killed (CLIENT KILL TYPE normal): the
   * cached raw connections (th_cmd) of every node start afresh. */
  for (int i = 0; i < t->nnodes; i++)
    if (t->nodes[i]->raw) {
      redisFree(t->nodes[i]->raw);
      t->nodes[i]->raw = NULL;
    }
  return th_sentinels_node(t, w.port);
}

typedef struct replicas_wait {
  th_server_t *m;
  int n;
} replicas_wait_t;

/* INFO replication of the master lists n replicas in state online. */
static int replicas_online(void *arg) {
  replicas_wait_t *w = arg;
  redisContext *raw = th_raw_connect(w->m);
  redisReply *r = redisCommand(raw, "INFO replication");
  int online = 0;
  for (const char *p = r && r->type == REDIS_REPLY_STRING ? r->str : NULL; p && (p = strstr(p, "state=online")); p++)
    online++;
  if (r) freeReplyObject(r);
  redisFree(raw);
  return online >= w->n;
}

int th_sentinels_wait_replicas(th_server_t *m, int n, int64_t timeout_ms) {
  replicas_wait_t w = {m, n};
  return th_wait_until(replicas_online, &w, timeout_ms);
}

void th_sentinels_stop(th_sentinels_t *t) {
  if (!t) return;
  for (int i = 0; i < t->nsent; i++) {
    th_sentinel_kill(t, i);
    track(&t->sent[i], false);
  }
  for (int i = 0; i < t->nnodes; i++) th_server_stop(t->nodes[i]);
  free(t);
}

void th_sentinels_monitor(th_sentinels_t *t, int port) {
  char p[16], quorum[16];
  snprintf(p, sizeof p, "%d", port);
  snprintf(quorum, sizeof quorum, "%d", t->nsent / 2 + 1);
  for (int i = 0; i < t->nsent; i++) {
    redisReply *r = th_sentinel_cmd(t, i, "SENTINEL REMOVE %s", t->name);
    if (r) freeReplyObject(r);
    r = th_sentinel_cmd(t, i, "SENTINEL MONITOR %s 127.0.0.1 %s %s", t->name, p, quorum);
    if (!r || r->type != REDIS_REPLY_STATUS)
      th_fail(__FILE__, __LINE__, "SENTINEL MONITOR: %s", r && r->str ? r->str : "no reply");
    freeReplyObject(r);
  }
}

/* ------------------------------------------------------------ the waiter */

static pthread_mutex_t waiter_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t waiter_cv = PTHREAD_COND_INITIALIZER;

static void *waiter_run(void *p) {
  th_waiter_t *w = p;
  int rc = rlock_lock_trylock(w->lock, 120000, w->lease_ms);
  int64_t now = th_now_ms();
  pthread_mutex_lock(&waiter_mu);
  w->rc = rc, w->done = 1, w->done_at = now;
  pthread_cond_broadcast(&waiter_cv);
  pthread_mutex_unlock(&waiter_mu);
  if (rc == 0) CHECK_OK(rlock_lock_unlock(w->lock));
  return NULL;
}

void th_waiter_start(th_waiter_t *w) {
  if (pthread_create(&w->thread, NULL, waiter_run, w) != 0) th_fail(__FILE__, __LINE__, "pthread_create");
}

int th_waiter_done(th_waiter_t *w, int64_t timeout_ms) {
  int64_t deadline = th_now_ms() + timeout_ms;
  pthread_mutex_lock(&waiter_mu);
  while (!w->done && th_now_ms() < deadline) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 50 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&waiter_cv, &waiter_mu, &ts);
  }
  int d = w->done;
  pthread_mutex_unlock(&waiter_mu);
  return d;
}

void th_waiter_join(th_waiter_t *w) {
  if (pthread_join(w->thread, NULL) != 0) th_fail(__FILE__, __LINE__, "pthread_join");
}
