/* harness_cluster.c -- a Redis Cluster for the tests (harness_cluster.h):
 * cluster-enabled redis-servers started by the harness, joined by
 * `redis-cli --cluster create`, waited for on the servers' own state
 * (cluster_state:ok and one slot map on every node), slot moves done with
 * the raw commands redis-cli's reshard uses. */
#include "harness_cluster.h"

#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int live(const th_server_t *s) { return s && s->pid > 0; }

/* A loopback port free right now, for the cluster bus: redis-server refuses
 * a port above 55535 without an explicit cluster-port (port + 10000). */
static int bus_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t n = sizeof a;
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || getsockname(fd, (struct sockaddr *)&a, &n))
    th_fail(__FILE__, __LINE__, "no free port for a cluster bus");
  close(fd);
  return ntohs(a.sin_port);
}

th_cluster_t *th_cluster_start(int masters, int replicas_each, int node_timeout_ms) {
  th_cluster_t *c = calloc(1, sizeof *c);
  int n = masters * (1 + replicas_each);
  if (!c || masters < 3 || n > TH_CLUSTER_MAX) th_fail(__FILE__, __LINE__, "bad cluster shape");
  snprintf(c->timeout, sizeof c->timeout, "%d", node_timeout_ms);
  const char *argv[TH_CLUSTER_MAX + 8];
  char addr[TH_CLUSTER_MAX][32];
  int a = 0;
  argv[a++] = "redis-cli", argv[a++] = "--cluster", argv[a++] = "create";
  size_t off = (size_t)snprintf(c->url, sizeof c->url, "redis+cluster://");
  for (int i = 0; i < n; i++) {
    snprintf(c->bus[i], sizeof c->bus[i], "%d", bus_port());
    const char *args[] = {"--cluster-enabled",
                          "yes",
                          "--cluster-config-file",
                          "nodes.conf",
                          "--cluster-node-timeout",
                          c->timeout,
                          "--cluster-port",
                          c->bus[i],
                          "--repl-diskless-sync-delay",
                          "0",
                          NULL}; /* replicas in sync at once */
    memcpy(c->args[i], args, sizeof args);
    th_server_opts_t o = {.extra_args = c->args[i]};
    c->node[i] = th_server_start(&o);
    snprintf(addr[i], sizeof addr[i], "127.0.0.1:%d", c->node[i]->port);
    argv[a++] = addr[i];
    off += (size_t)snprintf(c->url + off, sizeof c->url - off, "%s%s", i ? "," : "", addr[i]);
  }
  char reps[8];
  snprintf(reps, sizeof reps, "%d", replicas_each);
  argv[a++] = "--cluster-replicas", argv[a++] = reps, argv[a++] = "--cluster-yes";
  argv[a] = NULL;
  c->n = n, c->masters = masters;
  int rc = th_exec(argv);
  if (rc != 0) th_fail(__FILE__, __LINE__, "redis-cli --cluster create failed (%d)", rc);
  if (!th_cluster_wait_ok(c, 60000)) th_fail(__FILE__, __LINE__, "cluster did not reach cluster_state:ok");
  return c;
}

void th_cluster_stop(th_cluster_t *c) {
  if (!c) return;
  for (int i = 0; i < c->n; i++) th_server_stop(c->node[i]);
  free(c);
}

/* The port serving each slot as s sees it (0: none); 1 if every slot has one. */
static int slot_ports(th_server_t *s, int *ports) {
  memset(ports, 0, 16384 * sizeof *ports);
  redisReply *r = th_cmd(s, "CLUSTER", "SLOTS", NULL);
  for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
    redisReply *e = r->element[i];
    if (e->elements < 3 || e->element[2]->elements < 2) continue;
    for (long long k = e->element[0]->integer; k <= e->element[1]->integer && k < 16384; k++)
      ports[k] = (int)e->element[2]->element[1]->integer;
  }
  th_reply_free(r);
  for (int k = 0; k < 16384; k++)
    if (!ports[k]) return 0;
  return 1;
}

/* cluster_state:ok, and a replica's link to its master is up (in sync). */
static int state_ok(th_server_t *s) {
  char *info = th_cmd_str(s, "CLUSTER", "INFO", NULL);
  int ok = info && strstr(info, "cluster_state:ok") != NULL;
  free(info);
  char *repl = th_cmd_str(s, "INFO", "replication", NULL);
  if (repl && strstr(repl, "role:slave") && !strstr(repl, "master_link_status:up")) ok = 0;
  free(repl);
  return ok;
}

/* Every live node is ok and has the same full slot map. */
static int all_ok(void *arg) {
  th_cluster_t *c = arg;
  static int first[16384], other[16384];
  int have = 0;
  for (int i = 0; i < c->n; i++) {
    if (!live(c->node[i])) continue;
    if (!state_ok(c->node[i]) || !slot_ports(c->node[i], have ? other : first)) return 0;
    if (have && memcmp(first, other, sizeof first)) return 0;
    have = 1;
  }
  return have;
}

int th_cluster_wait_ok(th_cluster_t *c, int64_t timeout_ms) { return th_wait_until(all_ok, c, timeout_ms); }

static th_server_t *by_port(th_cluster_t *c, int port) {
  for (int i = 0; i < c->n; i++)
    if (c->node[i]->port == port) return c->node[i];
  return NULL;
}

th_server_t *th_cluster_owner(th_cluster_t *c, int slot) {
  static int ports[16384];
  for (int i = 0; i < c->n; i++)
    if (live(c->node[i])) {
      slot_ports(c->node[i], ports);
      return ports[slot] ? by_port(c, ports[slot]) : NULL;
    }
  return NULL;
}

char *th_cluster_id(th_server_t *s) { return th_cmd_str(s, "CLUSTER", "MYID", NULL); }

int th_cluster_keyslot(th_cluster_t *c, const char *key) {
  for (int i = 0; i < c->n; i++)
    if (live(c->node[i])) return (int)th_cmd_int(c->node[i], "CLUSTER", "KEYSLOT", key, NULL);
  return -1;
}

th_server_t *th_cluster_replica_of(th_cluster_t *c, th_server_t *m) {
  for (int i = 0; i < c->n; i++) {
    if (!live(c->node[i]) || c->node[i] == m) continue;
    redisReply *r = th_cmd(c->node[i], "ROLE", NULL);
    int mine = r->type == REDIS_REPLY_ARRAY && r->elements >= 3 && !strcmp(r->element[0]->str, "slave") &&
               r->element[2]->integer == m->port;
    th_reply_free(r);
    if (mine) return c->node[i];
  }
  return NULL;
}

static void ok_reply(redisReply *r, const char *what) {
  if (!r || r->type == REDIS_REPLY_ERROR)
    th_fail(__FILE__, __LINE__, "%s: %s", what, r && r->str ? r->str : "no reply");
  th_reply_free(r);
}

void th_cluster_move_slot(th_cluster_t *c, int slot, th_server_t *to, void (*between)(void *arg, int phase),
                          void *arg) {
  th_server_t *from = th_cluster_owner(c, slot);
  if (!from || from == to) th_fail(__FILE__, __LINE__, "slot %d: no owner, or already on the target", slot);
  char s[16], port[16];
  snprintf(s, sizeof s, "%d", slot);
  snprintf(port, sizeof port, "%d", to->port);
  char *from_id = th_cluster_id(from), *to_id = th_cluster_id(to);
  ok_reply(th_cmd(to, "CLUSTER", "SETSLOT", s, "IMPORTING", from_id, NULL), "SETSLOT IMPORTING");
  ok_reply(th_cmd(from, "CLUSTER", "SETSLOT", s, "MIGRATING", to_id, NULL), "SETSLOT MIGRATING");
  if (between) between(arg, 0);
  for (;;) {
    redisReply *keys = th_cmd(from, "CLUSTER", "GETKEYSINSLOT", s, "100", NULL);
    if (keys->type != REDIS_REPLY_ARRAY || keys->elements == 0) {
      th_reply_free(keys);
      break;
    }
    const char *argv[110];
    int n = 0;
    argv[n++] = "MIGRATE", argv[n++] = "127.0.0.1", argv[n++] = port, argv[n++] = "", argv[n++] = "0";
    argv[n++] = "10000", argv[n++] = "KEYS";
    for (size_t i = 0; i < keys->elements; i++) argv[n++] = keys->element[i]->str;
    ok_reply(th_cmdv(from, n, argv, NULL), "MIGRATE");
    th_reply_free(keys);
  }
  if (between) between(arg, 1);
  ok_reply(th_cmd(to, "CLUSTER", "SETSLOT", s, "NODE", to_id, NULL), "SETSLOT NODE (target)");
  ok_reply(th_cmd(from, "CLUSTER", "SETSLOT", s, "NODE", to_id, NULL), "SETSLOT NODE (source)");
  for (int i = 0; i < c->n; i++)
    if (live(c->node[i]) && c->node[i] != to && c->node[i] != from && i < c->masters)
      th_reply_free(th_cmd(c->node[i], "CLUSTER", "SETSLOT", s, "NODE", to_id, NULL));
  free(from_id);
  free(to_id);
}
