/* test_lock_node.c -- rlock_lock_node (the node a lock's commands go to) on
 * a Redis Cluster (each name's slot master, and the new one after a slot
 * move) and under Sentinel (the master), and every CLI command (exec,
 * status, unlock, demo) against redis+cluster:// and
 * redis+sentinel:// URLs,
 * `status --json` naming the node that answered. The other URL forms are
 * covered from the shell: redis:// in every tests/cli script, unix:// in
 * tests/cli/status.sh and cmdline.sh, rediss:// in tests/cli/tls.sh. */
#include "harness_cluster.h"
#include "harness_sentinel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static th_cluster_t *cl;
static th_sentinels_t *dep;

static void expect_node(rlock_lock_t *l, int port) {
  char want[64], got[300];
  snprintf(want, sizeof want, "127.0.0.1:%d", port);
  CHECK_OK(rlock_lock_node(l, got, sizeof got));
  CHECK_STREQ(got, want);
}

/* Runs the CLI with args (a shell word list, no quoting needed); its stdout
 * (first 4 KiB) in out; returns its exit status. */
static int cli(char *out, size_t n, const char *url, const char *args) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "%s -u '%s' %s 2>&1", RLOCK_CLI, url, args);
  FILE *p = popen(cmd, "r");
  CHECK(p != NULL);
  size_t got = fread(out, 1, n - 1, p);
  out[got] = 0;
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Bad arguments: a clear error, nothing written past buflen. */
TEST(bad_arguments) {
  rlock_client_t *c = th_client(cl->url, 0);
  rlock_lock_t *l;
  CHECK_OK(rlock_lock_new(c, "node:args", 9, &l));
  char buf[4] = "xyz";
  CHECK_RC(rlock_lock_node(l, NULL, 10), RLOCK_EINVAL);
  CHECK_RC(rlock_lock_node(l, buf, 0), RLOCK_EINVAL);
  CHECK_RC(rlock_lock_node(NULL, buf, sizeof buf), RLOCK_EINVAL);
  CHECK_RC(rlock_lock_node(l, buf, sizeof buf), RLOCK_EINVAL);
  CHECK_MSG(strstr(rlock_last_error(), "needs"), "message: %s", rlock_last_error());
  CHECK_STREQ(buf, "");
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* Cluster: each name's node is its slot's master, also after the slot moved
 * (the next command follows MOVED and the node follows the map). */
TEST(cluster_slot_owner) {
  rlock_client_t *c = th_client(cl->url, 0);
  int seen[TH_CLUSTER_MAX] = {0}, covered = 0;
  char name[32];
  for (int i = 0; i < 200 && covered < cl->masters; i++) {
    snprintf(name, sizeof name, "node:%d", i);
    th_server_t *owner = th_cluster_owner(cl, th_cluster_keyslot(cl, name));
    CHECK(owner != NULL);
    int m = 0;
    while (cl->node[m] != owner) m++;
    if (seen[m]) continue;
    seen[m] = 1, covered++;
    rlock_lock_t *l;
    CHECK_OK(rlock_lock_new(c, name, strlen(name), &l));
    int locked;
    CHECK_OK(rlock_lock_is_locked(l, &locked));
    expect_node(l, owner->port);
    rlock_lock_free(l);
  }
  CHECK_EQ(covered, cl->masters);
  /* move the last name's slot to another master */
  rlock_lock_t *l;
  CHECK_OK(rlock_lock_new(c, name, strlen(name), &l));
  int slot = th_cluster_keyslot(cl, name);
  th_server_t *from = th_cluster_owner(cl, slot), *to = cl->node[from == cl->node[0] ? 1 : 0];
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  expect_node(l, from->port);
  th_cluster_move_slot(cl, slot, to, NULL, NULL);
  CHECK_OK(rlock_lock_unlock(l)); /* redirected by MOVED to the new owner */
  expect_node(l, to->port);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* Sentinel: the node is the master (not a sentinel). */
TEST(sentinel_master) {
  rlock_client_t *c = th_client(dep->url, 0);
  rlock_lock_t *l;
  CHECK_OK(rlock_lock_new(c, "node:sentinel", 13, &l));
  CHECK_OK(rlock_lock_lock(l, 60000));
  expect_node(l, dep->nodes[0]->port);
  CHECK_OK(rlock_lock_unlock(l));
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* Every CLI command on url: exec, status (text and --json: locked by a
 * library client, with the node), unlock --force, and demo (its data keys
 * share one hash tag: user commands go to that slot's master). */
static void every_command(const char *url, const char *name, int node_port) {
  char out[4096], args[256], want[128];
  snprintf(args, sizeof args, "exec %s -- true", name);
  CHECK_EQ(cli(out, sizeof out, url, args), 0);
  rlock_client_t *c = th_client(url, 0);
  rlock_lock_t *l;
  CHECK_OK(rlock_lock_new(c, name, strlen(name), &l));
  CHECK_OK(rlock_lock_lock(l, 60000));
  snprintf(args, sizeof args, "status --json %s", name);
  CHECK_EQ(cli(out, sizeof out, url, args), 0);
  snprintf(want, sizeof want, "\"node\":\"127.0.0.1:%d\"}", node_port);
  CHECK_MSG(strstr(out, want) && strstr(out, "\"locked\":true"), "status --json on %s: %s", url, out);
  snprintf(args, sizeof args, "status %s", name);
  CHECK_EQ(cli(out, sizeof out, url, args), 0);
  snprintf(want, sizeof want, "  node 127.0.0.1:%d\n", node_port);
  CHECK_MSG(strstr(out, want) && strstr(out, "locked, ttl"), "status on %s: %s", url, out);
  snprintf(args, sizeof args, "unlock --force %s", name);
  CHECK_EQ(cli(out, sizeof out, url, args), 0);
  CHECK_MSG(strstr(out, "was locked"), "unlock --force on %s: %s", url, out);
  int locked = 1;
  CHECK_OK(rlock_lock_is_locked(l, &locked));
  CHECK_EQ(locked, 0);
  rlock_lock_free(l);
  rlock_client_free(c);
  CHECK_MSG(cli(out, sizeof out, url, "demo --workers 2 --stock 20") == 0, "demo on %s: %s", url, out);
}

TEST(cli_on_cluster) {
  const char *name = "node:cli";
  every_command(cl->url, name, th_cluster_owner(cl, th_cluster_keyslot(cl, name))->port);
}

TEST(cli_on_sentinel) { every_command(dep->url, "node:cli", dep->nodes[0]->port); }

int main(int argc, char **argv) {
  th_init(argc, argv, 600);
  cl = th_cluster_start(3, 0, 2000);
  RUN(bad_arguments);
  RUN(cluster_slot_owner);
  RUN(cli_on_cluster);
  th_cluster_stop(cl);
  dep = th_sentinels_start("nodes", 1, 3);
  RUN(sentinel_master);
  RUN(cli_on_sentinel);
  th_sentinels_stop(dep);
  return th_done();
}
