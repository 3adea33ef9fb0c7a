/* test_family_history.c -- RedLock and MultiLock under faults, with worker
 * processes recording a history that the checker verifies (history.h):
 *   redlock_nodes_killed  3 workers loop on a RedLock over 5 redis-servers
 *                         (watchdog 1000 ms); one node is SIGSTOPped for a
 *                         while, then two nodes are killed while they run:
 *                         every worker goes on (3 of 5 is a majority), and
 *                         no two critical sections overlap (HIST_MUTEX_LEASE)
 *   multilock_orders      3 workers take MultiLocks over {a,b}, {b,c}, {c,a}
 *                         given in rotating orders: all finish (no deadlock),
 *                         and no two sections on one name overlap
 * Workers are forked processes with their own clients; the parent waits on
 * the history file (records counted), never on sleeps. */
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "fault_harness.h"

#define NODES 5
#define WORKERS 3
#define ROUNDS 30

static th_server_t *srv[NODES];
static char hist_path[300];

static int64_t ms_to_ns(int64_t ms) { return ms * 1000000; }

/* Counts the records of kind in the history. */
static size_t count_kind(int kind) {
  FILE *f = fopen(hist_path, "rb");
  if (!f) return 0;
  hist_rec_t r;
  size_t n = 0;
  while (fread(&r, sizeof r, 1, f) == 1) n += r.kind == kind;
  fclose(f);
  return n;
}

static size_t enters_wanted;
static int enough_enters(void *arg) {
  (void)arg;
  return count_kind(HK_ENTER) >= enters_wanted;
}

static int g_fd, g_id; /* the worker's history fd and id (its lost callback) */
static void on_lost(const char *name, size_t len, uint64_t owner, rlock_lost_reason_t reason, void *arg) {
  (void)owner, (void)arg;
  hist_log(g_fd, HK_LOST, g_id, name, len, (int)reason, 0, 0);
}

/* One critical section on the names, as the history records it. */
static void section(int fd, int id, const char *const *names, int n, int64_t vu_ms) {
  for (int i = 0; i < n; i++) hist_log(fd, HK_GRANT, id, names[i], strlen(names[i]), 0, ms_to_ns(vu_ms), 0);
  for (int i = 0; i < n; i++) hist_log(fd, HK_ENTER, id, names[i], strlen(names[i]), 0, 0, 0);
  th_sleep_ms(3); /* the work inside: long enough for overlaps to show */
  int stale = rlock_now_ms() >= vu_ms;
  for (int i = 0; i < n; i++) hist_log(fd, HK_EXIT, id, names[i], strlen(names[i]), stale, 0, 0);
}

static int redlock_worker(int id) {
  int fd = hist_open(hist_path);
  const char *urls[NODES];
  for (int i = 0; i < NODES; i++) urls[i] = srv[i]->url;
  rlock_options_t o;
  rlock_options_init(&o);
  o.watchdog_timeout_ms = 1000;
  o.command_timeout_ms = 1000;
  rlock_redlock_t *r;
  if (fd < 0 || rlock_redlock_new(&r, &o, urls, NODES, "fh:redlock", 10, 0)) return 10;
  rlock_redlock_set_node_timeout(r, 200); /* the default (10 ms here) is short for valgrind */
  g_fd = fd, g_id = id;
  rlock_redlock_on_lost(r, on_lost, NULL);
  const char *name = "fh:redlock";
  for (int round = 0; round < ROUNDS; round++) {
    hist_log(fd, HK_ATTEMPT, id, name, strlen(name), 0, 0, 0);
    int64_t vu = 0;
    int rc = rlock_redlock_acquire(r, 30000, RLOCK_LEASE_WATCHDOG, NULL, &vu);
    if (rc) {
      hist_log(fd, HK_FAIL, id, name, strlen(name), rc, 0, 0);
      return 20;
    }
    section(fd, id, &name, 1, vu);
    hist_log(fd, HK_RELEASE, id, name, strlen(name), rlock_redlock_release(r), 0, 0);
  }
  rlock_redlock_free(r);
  return 0;
}

static int multi_worker(int id) {
  static const char *all[3] = {"fh:m:a", "fh:m:b", "fh:m:c"};
  const char *mine[2] = {all[id % 3], all[(id + 1) % 3]};
  int fd = hist_open(hist_path);
  rlock_client_t *c = fh_client(srv[0]->url, 1000, 1000, 3);
  rlock_lock_t *ls[2];
  rlock_multilock_t *m;
  if (fd < 0 || !c) return 10;
  g_fd = fd, g_id = id;
  rlock_client_on_lost(c, on_lost, NULL);
  for (int i = 0; i < 2; i++)
    if (rlock_lock_new(c, mine[i], strlen(mine[i]), &ls[i])) return 11;
  for (int round = 0; round < ROUNDS; round++) {
    rlock_lock_t *order[2] = {ls[round % 2], ls[(round + 1) % 2]}; /* rotate the order given */
    if (rlock_multilock_new(&m, order, 2)) return 12;
    for (int i = 0; i < 2; i++) hist_log(fd, HK_ATTEMPT, id, mine[i], strlen(mine[i]), 0, 0, 0);
    int rc = rlock_multilock_acquire(m, RLOCK_OWNER_SELF, 30000, RLOCK_LEASE_WATCHDOG, NULL);
    if (rc) {
      for (int i = 0; i < 2; i++) hist_log(fd, HK_FAIL, id, mine[i], strlen(mine[i]), rc, 0, 0);
      return 20;
    }
    int64_t vu = 0;
    rlock_multilock_valid_until(m, RLOCK_OWNER_SELF, &vu);
    section(fd, id, mine, 2, vu);
    rc = rlock_multilock_release(m, RLOCK_OWNER_SELF);
    for (int i = 0; i < 2; i++) hist_log(fd, HK_RELEASE, id, mine[i], strlen(mine[i]), rc, 0, 0);
    rlock_multilock_free(m);
  }
  return 0;
}

static void check_history(const char *fault, const char *deploy, const char *kind, const char *what) {
  hist_check_opts_t opts = {.mode = HIST_MUTEX_LEASE};
  hist_report_t rep;
  int v = hist_check_file(hist_path, &opts, &rep);
  if (v != HIST_OK) hist_report_print(stdout, &rep);
  CHECK_EQ(v, HIST_OK);
  CHECK_EQ(rep.overlaps, 0);
  char outcome[200];
  snprintf(outcome, sizeof outcome, "%s; %zu sections, %zu locks, %zu lost", what, rep.sections, rep.locks, rep.lost);
  fh_result(fault, deploy, kind, outcome, rep.violations);
  hist_report_free(&rep);
}

TEST(redlock_nodes_killed) {
  snprintf(hist_path, sizeof hist_path, "%s/redlock.hist", th_tempdir());
  CHECK(hist_create(hist_path) == 0);
  pid_t pids[WORKERS];
  for (int i = 0; i < WORKERS; i++)
    if ((pids[i] = th_fork()) == 0) th_exit_by_exec(redlock_worker(i));
  enters_wanted = 10;
  CHECK(th_wait_until(enough_enters, NULL, 30000));
  kill(srv[0]->pid, SIGSTOP); /* a paused node: a failed node for every round */
  enters_wanted = count_kind(HK_ENTER) + 10;
  CHECK(th_wait_until(enough_enters, NULL, 30000));
  kill(srv[0]->pid, SIGCONT);
  th_server_kill(srv[3]);
  th_server_kill(srv[4]);
  enters_wanted = count_kind(HK_ENTER) + 10;
  CHECK(th_wait_until(enough_enters, NULL, 30000));
  for (int i = 0; i < WORKERS; i++) CHECK_EQ(th_wait_child(pids[i]), 0);
  CHECK_EQ(count_kind(HK_ENTER), WORKERS * ROUNDS);
  check_history("redlock: 1 of 5 nodes SIGSTOPped, then 2 of 5 killed", "redlock(5 single)", "reentrant",
                "every worker finished its 30 rounds");
}

TEST(multilock_orders) {
  snprintf(hist_path, sizeof hist_path, "%s/multi.hist", th_tempdir());
  CHECK(hist_create(hist_path) == 0);
  pid_t pids[WORKERS];
  for (int i = 0; i < WORKERS; i++)
    if ((pids[i] = th_fork()) == 0) th_exit_by_exec(multi_worker(i));
  for (int i = 0; i < WORKERS; i++) CHECK_EQ(th_wait_child(pids[i]), 0);
  CHECK_EQ(count_kind(HK_ENTER), WORKERS * ROUNDS * 2);
  check_history("multilock: overlapping sets {a,b} {b,c} {c,a}, orders rotated", "single", "multilock(reentrant)",
                "no deadlock: every worker finished its 30 rounds");
}

int main(int argc, char **argv) {
  th_init(argc, argv, 170);
  for (int i = 0; i < NODES; i++) srv[i] = th_server_start(NULL);
  RUN(multilock_orders);
  RUN(redlock_nodes_killed);
  for (int i = 0; i < NODES; i++) th_server_stop(srv[i]);
  return th_done();
}
