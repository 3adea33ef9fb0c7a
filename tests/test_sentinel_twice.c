/* test_sentinel_twice.c -- two Sentinel failovers in a row (a master, 2
 * replicas, 3 sentinels: tests/harness_sentinel.h). Seen once in a CI dry
 * run: after a failover, rlock's subscriber connection sat on a replica of
 * the new master for more than 60 s while its command connection was on the
 * new master (a replica gets the master's messages only while it stays
 * linked). The suspected sequence: a first failover promoted A (the client
 * followed), a second moved to B while the client's connections were
 * reconnecting to A or in their handshake there. Each case below promotes
 * A, then B, with a waiter parked on a lock another client holds, and checks
 * by CLIENT LIST on every node (the clients' names) that every connection of
 * both clients (command, subscriber, user) ends on the master the sentinels
 * settle on (B, or another if they fail over once more on their own) and
 * nowhere else, then that the holder's unlock there wakes the waiter by its
 * message:
 *   settled    the second failover once the clients are on A;
 *   at_once    the second failover as soon as the first one ends (the
 *              clients reconnect to A meanwhile);
 *   handshake  A paused (CLIENT PAUSE ALL) as soon as the sentinels name
 *              it, so the clients' connections to A hang in their handshake
 *              (ROLE unanswered), and the second failover starts while they
 *              do;
 *   killed     the master SIGKILLed (the CI run's fault), then the second
 *              failover as soon as the sentinels name A; the killed node
 *              comes back as a replica afterwards.
 * A connection left on another node while the others are on the master
 * fails the case after SPLIT_MS: Sentinel's own CLIENT KILL on the node it
 * demotes would otherwise hide one the client never moved.
 * TH_TWICE_CASES=a,b runs those cases (ctest: at_once, about 20 s; all four
 * take about 80 s); TH_TWICE_RUNS=n repeats each n times. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness_replica.h"
#include "harness_sentinel.h"

static th_sentinels_t *dep;

static th_server_t *current_master(void) {
  th_server_t *m = th_sentinels_node(dep, th_sentinel_master_port(dep, 0));
  CHECK_MSG(m, "the sentinels name no master of the deployment");
  return m;
}

static rlock_client_t *client_named(const char *name) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = dep->url;
  o.client_name = name;
  o.reconnect_min_ms = 50;
  o.reconnect_max_ms = 1000;
  o.command_timeout_ms = 8000; /* a WAIT after a failover must end within it */
  o.replica_sync_timeout_ms = 4000;
  rlock_client_t *c = NULL;
  int rc = rlock_client_new(&c, &o);
  CHECK_MSG(rc == 0, "client %s: %s: %s", name, rlock_err_name(rc), rlock_last_error());
  return c;
}

/* A user command: the client's user connection is opened too. */
static void user_ping(rlock_client_t *c) {
  const char *argv[1] = {"PING"};
  rlock_reply_t *r = NULL;
  CHECK_OK(rlock_client_command(c, 1, argv, NULL, &r));
  rlock_reply_free(r);
}

/* ------------------------------------------------------------ where the connections are */

/* Connections named `name` on s, and how many of them are subscribed
 * (flag P); -1 if s cannot be asked (dead, or paused past the timeout). */
static int named_on(th_server_t *s, const char *name, int *subscribers) {
  *subscribers = 0;
  if (s->pid <= 0) return 0;
  redisContext *raw = th_raw_connect(s);
  redisReply *r = raw ? redisCommand(raw, "CLIENT LIST") : NULL;
  int n = -1;
  if (r && r->type == REDIS_REPLY_STRING) {
    char want[96];
    snprintf(want, sizeof want, " name=%s ", name);
    n = 0;
    for (char *line = r->str; line && *line;) {
      char *eol = strchr(line, '\n');
      if (eol) *eol = 0;
      if (strstr(line, want)) {
        n++;
        const char *f = strstr(line, " flags=");
        if (f && memchr(f + 7, 'P', strcspn(f + 7, " "))) ++*subscribers;
      }
      line = eol ? eol + 1 : NULL;
    }
  }
  if (r) freeReplyObject(r);
  if (raw) redisFree(raw);
  return n;
}

typedef struct placed {
  th_server_t *m;
  const char *names[2];
} placed_t;

/* Every connection of both clients is on m (command, subscriber, user: 3
 * each; the waiter's subscriber subscribed), none on another node. */
static int all_on_master(void *arg) {
  placed_t *p = arg;
  for (int k = 0; k < 2; k++) {
    int subs = 0, n = named_on(p->m, p->names[k], &subs);
    if (n < 3 || (k == 1 && subs < 1)) return 0;
    for (int i = 0; i < dep->nnodes; i++) {
      if (dep->nodes[i] == p->m) continue;
      if (named_on(dep->nodes[i], p->names[k], &subs) != 0) return 0;
    }
  }
  return 1;
}

/* The clients' connections on m and on the other live nodes. */
static void count_placement(const placed_t *p, int *on_m, int *elsewhere) {
  *on_m = *elsewhere = 0;
  for (int i = 0; i < dep->nnodes; i++)
    for (int k = 0; k < 2; k++) {
      int subs, n = named_on(dep->nodes[i], p->names[k], &subs);
      if (n > 0) *(dep->nodes[i] == p->m ? on_m : elsewhere) += n;
    }
}

/* A client moves every connection at once (reset in one pass), so some on
 * the master and some on another node is a state of a few milliseconds (the
 * server reading the closes). One that lasts SPLIT_MS (the poll's period) is
 * a connection the move left behind. */
#define SPLIT_MS 1000

static void print_placement(placed_t *p);

/* Every connection of both clients ends on p->m within timeout_ms, never
 * split between it and another node for SPLIT_MS. */
static void check_follow(placed_t *p, int64_t timeout_ms, const char *what) {
  int64_t end = th_now_ms() + timeout_ms, split_since = 0;
  for (;;) {
    if (all_on_master(p)) return;
    int on_m, elsewhere;
    count_placement(p, &on_m, &elsewhere);
    int64_t now = th_now_ms();
    if (on_m > 0 && elsewhere > 0) {
      if (!split_since) split_since = now;
    } else {
      split_since = 0;
    }
    if ((split_since && now - split_since >= SPLIT_MS) || now >= end) {
      print_placement(p);
      if (split_since && now - split_since >= SPLIT_MS)
        CHECK_MSG(0,
                  "%s: %d connection(s) of the clients stayed on another node for %d ms while %d were on the master %d",
                  what, elsewhere, SPLIT_MS, on_m, p->m->port);
      CHECK_MSG(0, "%s: the clients' connections are not all on the master %d after %lld ms", what, p->m->port,
                (long long)timeout_ms);
    }
    th_sleep_ms(20);
  }
}

static void print_placement(placed_t *p) {
  for (int i = 0; i < dep->nnodes; i++) {
    th_server_t *n = dep->nodes[i];
    if (n->pid <= 0) continue;
    redisContext *raw = th_raw_connect(n);
    redisReply *r = raw ? redisCommand(raw, "CLIENT LIST") : NULL;
    fprintf(stderr, "# node %d%s:\n", n->port, n == p->m ? " (the master)" : "");
    for (char *line = r && r->type == REDIS_REPLY_STRING ? r->str : NULL; line && *line;) {
      char *eol = strchr(line, '\n');
      if (eol) *eol = 0;
      if (strstr(line, " name=tw-")) fprintf(stderr, "#   %s\n", line);
      line = eol ? eol + 1 : NULL;
    }
    if (r) freeReplyObject(r);
    if (raw) redisFree(raw);
  }
}

/* One line of what each sentinel names (port/config-epoch) and where the
 * clients' connections are (per node: connections/subscribed), for a
 * failure's report. */
static void trace(const placed_t *p, int64_t t0) {
  char line[1024];
  int off = snprintf(line, sizeof line, "# +%lld ms: sentinels", (long long)(th_now_ms() - t0));
  for (int i = 0; i < dep->nsent; i++) {
    redisReply *r = th_sentinel_cmd(dep, i, "SENTINEL MASTER %s", dep->name);
    const char *port = "?", *epoch = "?";
    for (size_t k = 0; r && r->type == REDIS_REPLY_ARRAY && k + 1 < r->elements; k += 2) {
      if (!strcmp(r->element[k]->str, "port")) port = r->element[k + 1]->str;
      if (!strcmp(r->element[k]->str, "config-epoch")) epoch = r->element[k + 1]->str;
    }
    off += snprintf(line + off, sizeof line - (size_t)off, " %s/%s", port, epoch);
    if (r) freeReplyObject(r);
  }
  off += snprintf(line + off, sizeof line - (size_t)off, "; clients");
  for (int i = 0; i < dep->nnodes; i++) {
    int s0 = 0, s1 = 0, n0 = named_on(dep->nodes[i], p->names[0], &s0), n1 = named_on(dep->nodes[i], p->names[1], &s1);
    off += snprintf(line + off, sizeof line - (size_t)off, " %d:%d/%d+%d/%d", dep->nodes[i]->port, n0, s0, n1, s1);
  }
  fprintf(stderr, "%s\n", line);
}

/* ------------------------------------------------------------ failovers */

/* SENTINEL FAILOVER, again while the last one is in progress (INPROG):
 * 1 once a sentinel accepted it. */
static int failover_accepted(void *arg) {
  (void)arg;
  redisReply *r = th_sentinel_cmd(dep, 0, "SENTINEL FAILOVER %s", dep->name);
  int ok = r && r->type == REDIS_REPLY_STATUS;
  if (r && !ok && r->str && !strstr(r->str, "INPROG") && !strstr(r->str, "NOGOODSLAVE"))
    fprintf(stderr, "# SENTINEL FAILOVER: %s\n", r->str);
  if (r) freeReplyObject(r);
  return ok;
}

typedef struct named {
  int old_port;
  int port;
} named_t;

/* Sentinel 0 names a master other than old_port. */
static int sentinel_moved(void *arg) {
  named_t *w = arg;
  w->port = th_sentinel_master_port(dep, 0);
  return w->port && w->port != w->old_port;
}

/* Every sentinel names one master, none is failing over, and that node
 * says it is a master with a replica online, for 1.5 s in a row. */
typedef struct settled {
  int port;
  int64_t since;
} settled_t;
static int settled(void *arg) {
  settled_t *w = arg;
  int port = 0;
  bool ok = true;
  for (int i = 0; i < dep->nsent && ok; i++) {
    redisReply *r = th_sentinel_cmd(dep, i, "SENTINEL MASTER %s", dep->name);
    int p = 0;
    for (size_t k = 0; r && r->type == REDIS_REPLY_ARRAY && k + 1 < r->elements; k += 2) {
      if (!strcmp(r->element[k]->str, "port")) p = atoi(r->element[k + 1]->str);
      if (!strcmp(r->element[k]->str, "flags") && strstr(r->element[k + 1]->str, "failover")) ok = false;
    }
    if (r) freeReplyObject(r);
    if (!p || (port && p != port)) ok = false;
    port = p;
  }
  th_server_t *m = ok ? th_sentinels_node(dep, port) : NULL;
  if (m) {
    redisContext *raw = th_raw_connect(m);
    redisReply *r = raw ? redisCommand(raw, "INFO replication") : NULL;
    ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "role:master") && strstr(r->str, "state=online");
    if (r) freeReplyObject(r);
    if (raw) redisFree(raw);
  }
  if (!m || !ok) {
    w->port = 0;
    return 0;
  }
  if (w->port != port) {
    w->port = port;
    w->since = th_now_ms();
  }
  return th_now_ms() - w->since >= 1500;
}

typedef enum { SETTLED, AT_ONCE, HANDSHAKE, KILLED } when_t;

static int64_t worst_ms; /* the longest wait for the placement, over the runs */

static void twice(when_t when, int run) {
  static const char *what[] = {"settled", "at_once", "handshake", "killed"};
  char lock[64], wname[32], hname[32];
  snprintf(lock, sizeof lock, "tw:%s:%d", what[when], run);
  snprintf(wname, sizeof wname, "tw-w-%s-%d", what[when], run);
  snprintf(hname, sizeof hname, "tw-h-%s-%d", what[when], run);
  th_server_t *old = current_master();
  int nrep = 0;
  for (int i = 0; i < dep->nnodes; i++) nrep += dep->nodes[i] != old && dep->nodes[i]->pid > 0;
  CHECK_MSG(th_sentinels_wait_replicas(old, nrep, 60000), "the master's %d replicas are not online", nrep);

  rlock_client_t *h = client_named(hname), *w = client_named(wname);
  user_ping(h), user_ping(w);
  rlock_lock_t *hl = th_lock(h, lock);
  CHECK_OK(rlock_lock_lock(hl, 120000)); /* no renewal needed across the failovers */
  th_replicas_caught_up(old, nrep, 10000);
  th_waiter_t wt = {.lock = th_lock(w, lock), .lease_ms = RLOCK_LEASE_WATCHDOG};
  th_waiter_start(&wt);
  placed_t p = {old, {hname, wname}};
  if (!th_wait_until(all_on_master, &p, 30000)) {
    print_placement(&p);
    CHECK_MSG(0, "the clients are not all on the master before the failovers");
  }
  char chan[96];
  snprintf(chan, sizeof chan, "redisson_lock__channel:{%s}", lock);
  CHECK_MSG(th_numsub(old, chan) >= 1, "the waiter is not subscribed");

  /* the first failover: A (killed: the master SIGKILLed, as in the CI run) */
  if (when == KILLED) th_server_kill(old);
  else CHECK_MSG(failover_accepted(NULL), "the first SENTINEL FAILOVER was refused");
  named_t nm = {old->port, 0};
  CHECK_MSG(th_wait_until(sentinel_moved, &nm, 60000), "the first failover named no new master");
  th_server_t *a = th_sentinels_node(dep, nm.port);
  CHECK(a);
  if (when == HANDSHAKE) { /* the clients' connections to A hang in their handshake */
    redisReply *r = th_cmd(a, "CLIENT", "PAUSE", "1500", "ALL", NULL);
    CHECK_MSG(r && r->type == REDIS_REPLY_STATUS, "CLIENT PAUSE on %d", a->port);
    th_reply_free(r);
  }
  if (when == SETTLED) {
    p.m = a;
    CHECK_MSG(th_wait_until(all_on_master, &p, 30000), "the clients did not follow the first failover");
  }
  /* the second failover: B (INPROG until the first one ended) */
  CHECK_MSG(th_wait_until(failover_accepted, NULL, 30000), "the second SENTINEL FAILOVER was never accepted");
  th_server_t *b = th_sentinels_wait_failover(dep, a->port, 60000);
  CHECK_MSG(b, "the second failover named no master within 60 s");
  int64_t named_at = th_now_ms();
  /* the deployment settles (with A paused the sentinels may fail over once
   * more on their own: the master is the one they end on) */
  settled_t st = {0};
  if (!th_wait_until(settled, &st, 60000)) {
    for (int i = 0; i < 10; i++, th_sleep_ms(500)) trace(&p, named_at);
    CHECK_MSG(0, "the deployment did not settle within 60 s of the second failover");
  }
  th_server_t *m = th_sentinels_node(dep, st.port);
  CHECK(m);
  int64_t settled_at = th_now_ms();
  fprintf(stderr, "# %s run %d: %d -> %d -> %d, settled on %d\n", what[when], run, old->port, a->port, b->port,
          m->port);

  /* every connection of both clients on the master, none elsewhere */
  p.m = m;
  check_follow(&p, 15000, what[when]);
  int64_t placed_ms = th_now_ms() - settled_at;
  if (placed_ms > worst_ms) worst_ms = placed_ms;
  CHECK_MSG(th_numsub(m, chan) >= 1, "the waiter is not subscribed on the master");
  CHECK(!th_waiter_done(&wt, 0)); /* the hold survived: still waiting */

  /* the holder's unlock on the master wakes the waiter by its message (the hold's
   * lease has about 2 minutes left) */
  int64_t unlocked_at = th_now_ms();
  CHECK_OK(rlock_lock_unlock(hl));
  CHECK_MSG(th_waiter_done(&wt, 10000), "the waiter did not wake within 10 s of the unlock on the master");
  CHECK_OK(wt.rc);
  fprintf(stderr, "# %s run %d: all on the master %lld ms after it settled; waiter granted %lld ms after the unlock\n",
          what[when], run, (long long)placed_ms, (long long)(wt.done_at - unlocked_at));
  th_waiter_join(&wt);
  if (when == KILLED) { /* back as a replica of the master, for the next run */
    static char port[16];
    static const char *args[4];
    snprintf(port, sizeof port, "%d", m->port);
    args[0] = "--replicaof", args[1] = "127.0.0.1", args[2] = port, args[3] = NULL;
    old->opts.extra_args = args;
    th_server_restart(old);
  }
  rlock_lock_free(hl);
  rlock_lock_free(wt.lock);
  rlock_client_free(h);
  rlock_client_free(w);
}

static int runs = 1;

/* TH_TWICE_CASES=a,b runs those cases (default: all). */
static int chosen(const char *name) {
  const char *list = getenv("TH_TWICE_CASES");
  if (!list || !*list) return 1;
  size_t n = strlen(name);
  for (const char *p = list; (p = strstr(p, name)); p += n)
    if ((p == list || p[-1] == ',') && (p[n] == ',' || !p[n])) return 1;
  return 0;
}

TEST(settled) {
  for (int i = 0; i < runs; i++) twice(SETTLED, i);
}
TEST(at_once) {
  for (int i = 0; i < runs; i++) twice(AT_ONCE, i);
}
TEST(handshake) {
  for (int i = 0; i < runs; i++) twice(HANDSHAKE, i);
}
TEST(killed) {
  for (int i = 0; i < runs; i++) twice(KILLED, i);
}

int main(int argc, char **argv) {
  const char *n = getenv("TH_TWICE_RUNS");
  if (n && atoi(n) > 0) runs = atoi(n);
  th_init(argc, argv, 150 * runs + 60);
  dep = th_sentinels_start("tw", 2, 3);
  if (chosen("settled")) RUN(settled);
  if (chosen("at_once")) RUN(at_once);
  if (chosen("handshake")) RUN(handshake);
  if (chosen("killed")) RUN(killed);
  fprintf(stderr, "# the longest wait for the placement after the deployment settled: %lld ms\n", (long long)worst_ms);
  th_sentinels_stop(dep);
  return th_done();
}
