/* harness_replica.c -- replicas, pauses and connection kills for the
 * replica-sync tests (harness_replica.h). */
#include "harness_replica.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REPLICAS 64 /* replicas started by one test binary */

/* A replica's command line must outlive its start (th_server_restart reuses it). */
typedef struct replica_args {
  char port[16];
  const char *argv[4];
} replica_args_t;
static replica_args_t args[MAX_REPLICAS];
static int nargs;

th_server_t *th_replica_start(th_server_t *master) {
  if (nargs == MAX_REPLICAS) th_fail(__FILE__, __LINE__, "too many replicas");
  replica_args_t *a = &args[nargs++];
  snprintf(a->port, sizeof a->port, "%d", master->port);
  a->argv[0] = "--replicaof", a->argv[1] = "127.0.0.1", a->argv[2] = a->port, a->argv[3] = NULL;
  th_server_opts_t o = {.extra_args = a->argv};
  return th_server_start(&o);
}

int th_replicas_online(th_server_t *master) {
  redisReply *r = th_cmd(master, "INFO", "replication", NULL);
  if (r->type != REDIS_REPLY_STRING) th_fail(__FILE__, __LINE__, "INFO replication");
  int n = 0;
  for (const char *p = r->str; (p = strstr(p, "state=online")); p++) n++;
  const char *c = strstr(r->str, "connected_slaves:");
  int connected = c ? atoi(c + strlen("connected_slaves:")) : 0;
  th_reply_free(r);
  return n == connected ? n : -1; /* -1: some are still syncing */
}

typedef struct want {
  th_server_t *m;
  int n;
} want_t;

static int caught_up(void *arg);

static int replicas_are(void *arg) {
  want_t *w = arg;
  return th_replicas_online(w->m) == w->n;
}

void th_replicas_wait(th_server_t *master, int n, int64_t timeout_ms) {
  want_t w = {master, n};
  if (!th_wait_until(replicas_are, &w, timeout_ms))
    th_fail(__FILE__, __LINE__, "master did not report %d replicas online within %lld ms (now %d)", n,
            (long long)timeout_ms, th_replicas_online(master));
  if (n > 0) th_replicas_caught_up(master, n, timeout_ms);
}

/* A write, then WAIT on the same connection (WAIT waits for the
 * connection's own last write: on a connection that never wrote it answers
 * at once). Three in a row: a replica that just came online gets the
 * command stream only after its first periodic ACK (up to a second later;
 * redis 7.0). */
static int caught_up(void *arg) {
  want_t *w = arg;
  char n[16];
  snprintf(n, sizeof n, "%d", w->n);
  for (int i = 0; i < 3; i++) {
    th_reply_free(th_cmd(w->m, "INCR", "th:replica:probe", NULL));
    if (th_cmd_int(w->m, "WAIT", n, "100", NULL) < w->n) return 0;
  }
  return 1;
}

void th_replicas_caught_up(th_server_t *master, int n, int64_t timeout_ms) {
  want_t w = {master, n};
  if (!th_wait_until(caught_up, &w, timeout_ms))
    th_fail(__FILE__, __LINE__, "%d replicas did not acknowledge within %lld ms", n, (long long)timeout_ms);
}

void th_server_pause(th_server_t *s) { kill(s->pid, SIGSTOP); }
void th_server_resume(th_server_t *s) { kill(s->pid, SIGCONT); }

int th_kill_clients_named(th_server_t *s, const char *name) {
  char *list = th_cmd_str(s, "CLIENT", "LIST", NULL), pat[300];
  int n = 0;
  snprintf(pat, sizeof pat, " name=%s ", name);
  for (char *line = list ? strtok(list, "\n") : NULL; line; line = strtok(NULL, "\n")) {
    if (!strstr(line, pat) || strncmp(line, "id=", 3)) continue;
    char id[32];
    snprintf(id, sizeof id, "%lld", strtoll(line + 3, NULL, 10));
    n += (int)th_cmd_int(s, "CLIENT", "KILL", "ID", id, NULL);
  }
  free(list);
  return n;
}
