/* cmd_demo.c -- `rlock demo`: the stock-deduction scenario. Sets a stock
 * counter in Redis, forks worker processes (demo_worker.c) that sell it one
 * unit at a time under one lock, shows live progress, and checks at the end
 * that exactly the initial stock was sold (no oversell, no lost sale). */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "demo.h"

static const char usage_text[] =
    "Usage: rlock demo [--workers N] [--stock N]\n"
    "Stock deduction under a distributed lock: sets " DEMO_STOCK
    " to the stock, then N\n"
    "worker processes, each with its own client, loop lock " DEMO_LOCK
    " -> GET stock ->\n"
    "sell one if any is left -> unlock. Prints PASS if the units sold equal the\n"
    "initial stock and the final stock is 0 (exit 0), else FAIL (exit 1), with\n"
    "lock acquisitions/s, handoffs/s and the wait to acquire (p50/p99/max).\n\n"
    "  --workers N    worker processes (default 8, at most 256)\n"
    "  --stock N      initial stock (default 1000, at most 10000000)\n"
    "  -u, --url URL ...    Redis URL and TLS options: see 'rlock --help'\n";

/* GET of the stock: its value, or -1 (message printed) on failure. */
static long long get_stock(rlock_client_t *c) {
  static const char *const argv[] = {"GET", DEMO_STOCK};
  rlock_reply_t *r;
  int rc = rlock_client_command(c, 2, argv, NULL, &r);
  if (rc) return cli_fail(rc, "GET " DEMO_STOCK), -1;
  long long v = r->type == RLOCK_REPLY_STRING ? strtoll(r->str, NULL, 10) : -1;
  rlock_reply_free(r);
  return v;
}

/* Sets the stock, clears the last-holder key and any stale lock; 0 or exit code. */
static int prepare(cli_global_t *g, long stock) {
  rlock_client_t *c;
  int ex = cli_connect(g, NULL, &c);
  if (ex) return ex;
  char n[32];
  snprintf(n, sizeof n, "%ld", stock);
  const char *const set[] = {"SET", DEMO_STOCK, n}, *const del[] = {"DEL", DEMO_LAST};
  rlock_reply_t *r = NULL;
  rlock_lock_t *lock = NULL;
  int rc = rlock_client_command(c, 3, set, NULL, &r);
  if (!rc) rlock_reply_free(r), rc = rlock_client_command(c, 2, del, NULL, &r);
  if (!rc) rlock_reply_free(r), rc = rlock_lock_new(c, DEMO_LOCK, strlen(DEMO_LOCK), &lock);
  if (!rc) rc = rlock_lock_force_unlock(lock, NULL);
  if (rc) ex = cli_fail(rc, "cannot set up the demo keys");
  if (lock) rlock_lock_free(lock);
  rlock_client_free(c);
  return ex;
}

/* Forks the workers; they wait for go_fd to close. 0 or exit code. */
static int spawn(cli_global_t *g, worker_t *w, int n, int go[2]) {
  fflush(stdout), fflush(stderr);
  pid_t parent = getpid();
  for (int i = 0; i < n; i++) {
    int p[2];
    if (pipe(p) < 0) return cli_err("pipe: %s", strerror(errno)), EX_OSERR;
    w[i].pid = fork();
    if (w[i].pid < 0) return cli_err("fork: %s", strerror(errno)), close(p[0]), close(p[1]), EX_OSERR;
    if (w[i].pid == 0) {
      /* the worker dies with the parent (SIGKILL of it, a crash): never sells on alone */
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(EX_SOFTWARE); /* the parent died before the line above */
      close(go[1]);
      for (int j = 0; j < i; j++) close(w[j].fd);
      close(p[0]);
      exit(demo_worker(g, i + 1, go[0], p[1]));
    }
    close(p[1]);
    w[i].fd = p[0];
  }
  close(go[0]);
  for (int i = 0; i < n; i++) { /* each sends one byte once connected */
    char b;
    ssize_t r;
    while ((r = read(w[i].fd, &b, 1)) < 0 && errno == EINTR) {
    }
    if (r != 1) return cli_err("worker %d failed to start", i + 1), EX_SOFTWARE;
  }
  return 0;
}

static void progress(rlock_client_t *c, long stock, int64_t t0) {
  long long left = get_stock(c);
  double s = (double)(demo_now_us() - t0) / 1e6;
  if (left >= 0)
    fprintf(stderr, "\rstock %lld/%ld  sold %lld  %.0f sales/s   ", left, stock, stock - left,
            s > 0 ? (double)(stock - left) / s : 0.0);
}

/* Makes room to read more from w; 0 if out of memory (its report is then
 * incomplete and the worker counts as failed). */
static int grow(worker_t *w) {
  if (w->len < w->cap) return 1;
  size_t cap = w->cap ? w->cap * 2 : 65536;
  char *buf = realloc(w->buf, cap);
  if (!buf) return 0;
  w->buf = buf, w->cap = cap;
  return 1;
}

/* Reads every worker's report until all pipes are closed, showing progress on
 * a terminal. */
static void collect(rlock_client_t *c, worker_t *w, int n, long stock, int64_t t0) {
  struct pollfd pfd[DEMO_MAX_WORKERS];
  int open_fds = n, tty = isatty(2);
  for (int i = 0; i < n; i++) pfd[i] = (struct pollfd){.fd = w[i].fd, .events = POLLIN};
  int64_t next = t0;
  int told = 0;
  while (open_fds) {
    if (demo_stop && !told) { /* Ctrl-C reached the workers too; a signal to the parent alone is passed on */
      for (int i = 0; i < n; i++) kill(w[i].pid, SIGINT);
      told = 1;
    }
    if (tty && demo_now_us() >= next) progress(c, stock, t0), next += 200000;
    if (poll(pfd, (nfds_t)n, 200) <= 0) continue;
    for (int i = 0; i < n; i++) {
      if (pfd[i].fd < 0 || !pfd[i].revents) continue;
      ssize_t r = -1;
      if (grow(&w[i])) r = read(w[i].fd, w[i].buf + w[i].len, w[i].cap - w[i].len);
      if (r > 0) w[i].len += (size_t)r;
      else if (r == 0 || errno != EINTR) close(w[i].fd), pfd[i].fd = -1, open_fds--;
    }
  }
  if (tty) fputs("\r                                                  \r", stderr);
}

int cmd_demo(cli_global_t *g, int argc, char **argv) {
  static const struct option longopts[] = {{"workers", required_argument, NULL, 'w'},
                                           {"stock", required_argument, NULL, 's'},
                                           CLI_CONNECT_LONGOPTS,
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  long workers = 8, stock = 1000;
  int c, ex = 0;
  while ((c = getopt_long(argc, argv, ":u:h", longopts, NULL)) != -1) {
    switch (c) {
    case 'w': ex = cli_count("demo", "--workers", optarg, 1, DEMO_MAX_WORKERS, &workers); break;
    case 's': ex = cli_count("demo", "--stock", optarg, 1, 10000000, &stock); break;
    case 'h': fputs(usage_text, stdout); return 0;
    default: ex = cli_connect_option("demo", g, c, optarg, argv);
    }
    if (ex) return ex;
  }
  if (optind != argc) return cli_usage("demo", "unexpected argument '%s'", argv[optind]);
  if ((ex = prepare(g, stock))) return ex;
  /* SIGINT, SIGTERM: the workers stop after their current sale, and the
   * summary so far is printed (the workers inherit the handler) */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = demo_on_stop;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  int n = (int)workers, go[2];
  worker_t *w = calloc((size_t)n, sizeof *w);
  if (!w || pipe(go) < 0) return free(w), cli_err("out of resources"), EX_OSERR;
  for (int i = 0; i < n; i++) w[i].fd = -1;
  rlock_client_t *client = NULL;
  ex = spawn(g, w, n, go);
  if (!ex) ex = cli_connect(g, NULL, &client);
  if (ex) /* stop the workers already started */
    for (int i = 0; i < n; i++)
      if (w[i].pid > 0) kill(w[i].pid, SIGTERM);
  close(go[1]); /* the start signal for every worker */
  int64_t t0 = demo_now_us();
  if (!ex) collect(client, w, n, stock, t0);
  double secs = (double)(demo_now_us() - t0) / 1e6;
  for (int i = 0; i < n; i++) {
    if (ex && w[i].fd >= 0) close(w[i].fd);
    while (w[i].pid > 0 && waitpid(w[i].pid, &w[i].status, 0) < 0 && errno == EINTR) {
    }
  }
  if (!ex && demo_stop) {
    int sig = (int)demo_stop;
    demo_report_interrupted(g->url, w, n, stock, get_stock(client), secs, sig);
    ex = 128 + sig;
  } else if (!ex) {
    ex = demo_report(g->url, w, n, stock, get_stock(client), secs);
  }
  for (int i = 0; i < n; i++) free(w[i].buf);
  if (client) rlock_client_free(client);
  free(w);
  return ex;
}
