/* test_signals.c -- the client's I/O thread runs with every signal blocked:
 * a write to a connection the server closed must give EPIPE, never a SIGPIPE
 * that kills the application (which keeps SIGPIPE at its default here), and
 * the application's signals must reach its own threads. Checked through
 * /proc/self/task/<tid>/status (SigBlk), then by killing the server under a
 * stream of commands with SIGPIPE at its default action. */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "harness.h"

static th_server_t *srv;

/* SigBlk mask of thread tid. */
static unsigned long long sigblk(long tid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/self/task/%ld/status", tid);
  FILE *f = fopen(path, "r");
  unsigned long long m = 0;
  if (!f) return 0;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "SigBlk:", 7)) m = strtoull(line + 7, NULL, 16);
  fclose(f);
  return m;
}

TEST(io_thread_blocks_signals) {
  long self = (long)syscall(SYS_gettid);
  rlock_client_t *c = th_client(srv->url, 0);
  DIR *d = opendir("/proc/self/task");
  CHECK(d != NULL);
  int others = 0, blocked = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    long tid = atol(e->d_name);
    if (tid <= 0 || tid == self) continue;
    others++;
    unsigned long long m = sigblk(tid);
    if ((m >> (SIGPIPE - 1)) & 1 && (m >> (SIGINT - 1)) & 1 && (m >> (SIGTERM - 1)) & 1) blocked++;
  }
  if (d) closedir(d);
  CHECK(others >= 1);          /* the client's I/O thread */
  CHECK_EQ(blocked, others);   /* ...with SIGPIPE, SIGINT, SIGTERM blocked */
  /* The caller's own mask is left as it was. */
  CHECK_EQ((sigblk(self) >> (SIGPIPE - 1)) & 1, 0);
  rlock_client_free(c);
}

TEST(server_killed_under_load_no_sigpipe) {
  signal(SIGPIPE, SIG_DFL); /* as in an application that never heard of it */
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = srv->url;
  o.command_timeout_ms = 200;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  rlock_lock_t *l = th_lock(c, "signals:load");
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  th_server_kill(srv); /* SIGKILL: the sockets are reset */
  int errors = 0;
  for (int i = 0; i < 30; i++) {
    const char *argv[] = {"PING"};
    rlock_reply_t *r = NULL;
    if (rlock_client_command(c, 1, argv, NULL, &r)) errors++;
    rlock_reply_free(r);
  }
  CHECK(errors > 0); /* we got here: no SIGPIPE killed the process */
  rlock_lock_free(l);
  rlock_client_free(c);
  signal(SIGPIPE, SIG_IGN);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 100);
  srv = th_server_start(NULL);
  RUN(io_thread_blocks_signals);
  RUN(server_killed_under_load_no_sigpipe);
  th_server_stop(srv);
  return th_done();
}
