/* cmd_exec.c -- `rlock exec`: acquire a lock, run a command as a child
 * process while holding it, release it, and exit with the command's status.
 * Signals: SIGINT/SIGTERM/SIGHUP cancel the wait, or are forwarded to the
 * command once it runs. A lost lock (lock-lost callback) sends the command
 * SIGTERM and makes rlock exit 76. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

static const char usage_text[] =
    "Usage: rlock exec [--wait DUR] [--lease DUR | --watchdog DUR] NAME -- CMD [ARG...]\n"
    "Acquires the lock NAME, runs CMD, releases the lock, and exits with CMD's status\n"
    "(128+N if CMD was killed by signal N).\n\n"
    "  --wait DUR      give up after DUR (exit 75); default: wait forever\n"
    "  --lease DUR     fixed lease: the lock expires after DUR even if CMD still runs\n"
    "  --watchdog DUR  lease of the watchdog-renewed lock (default 30s, renewed every third)\n"
    "  -u, --url URL ...  Redis URL and TLS options: see 'rlock --help'\n\n"
    "Exit codes: CMD's status; 127 CMD could not be run; 64 usage; 69 Redis unavailable;\n"
    "75 timed out waiting; 76 the lock was lost while CMD ran (CMD got SIGTERM);\n"
    "128+N interrupted by signal N while waiting.\n";

/* The shortest watchdog lease the library takes (renewed every third of it). */
#define WATCHDOG_MIN_MS 3

static rlock_cancel_t *g_cancel;
static volatile sig_atomic_t g_signal; /* the last SIGINT/SIGTERM/SIGHUP received */
static atomic_int g_child;             /* the command's pid while it can be signalled */
static atomic_int g_lost;              /* the lock-lost callback fired */
static pthread_mutex_t g_child_mu = PTHREAD_MUTEX_INITIALIZER; /* lost callback vs reaping */

/* Signals reach only the main thread (blocked in the library's thread). */
static void on_signal(int sig, siginfo_t *si, void *ctx) {
  (void)ctx;
  g_signal = sig;
  pid_t child = atomic_load(&g_child);
  if (child <= 0)
    rlock_cancel_trigger(g_cancel);
  else if (si->si_code != SI_KERNEL) /* a terminal's signal already reached the group */
    kill(child, sig);
}

/* On the library's I/O thread: nothing blocking here. */
static void on_lost(const char *name, size_t name_len, uint64_t owner, void *arg) {
  (void)name, (void)name_len, (void)owner, (void)arg;
  pthread_mutex_lock(&g_child_mu);
  atomic_store(&g_lost, 1);
  pid_t child = atomic_load(&g_child);
  if (child > 0) kill(child, SIGTERM);
  pthread_mutex_unlock(&g_child_mu);
}

#define NSIG_HANDLED 3
static const int handled[NSIG_HANDLED] = {SIGINT, SIGTERM, SIGHUP};
static struct sigaction g_orig_action[NSIG_HANDLED];

/* Installs on_signal for the handled signals, except those the caller of
 * rlock ignores (they stay ignored, for rlock and the command). */
static void install_handlers(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO;
  for (int i = 0; i < NSIG_HANDLED; i++) {
    sigaction(handled[i], NULL, &g_orig_action[i]);
    if (g_orig_action[i].sa_handler != SIG_IGN) sigaction(handled[i], &sa, NULL);
  }
}

static void restore_handlers(void) {
  for (int i = 0; i < NSIG_HANDLED; i++) sigaction(handled[i], &g_orig_action[i], NULL);
}

/* Forks and execs cmd; returns its exit status (127 if it could not run). */
static int run_child(char **cmd, const sigset_t *orig_mask) {
  int errpipe[2];
  if (pipe2(errpipe, O_CLOEXEC) < 0) {
    cli_err("pipe: %s", strerror(errno));
    return EX_OSERR;
  }
  sigset_t all;
  sigfillset(&all);
  sigset_t before;
  pthread_sigmask(SIG_BLOCK, &all, &before);
  pid_t pid = fork();
  if (pid == 0) {
    restore_handlers();
    sigprocmask(SIG_SETMASK, orig_mask, NULL);
    execvp(cmd[0], cmd);
    int e = errno;
    (void)!write(errpipe[1], &e, sizeof e);
    _exit(127);
  }
  int fork_errno = errno;
  if (pid > 0) {
    pthread_mutex_lock(&g_child_mu);
    atomic_store(&g_child, pid);
    if (atomic_load(&g_lost)) kill(pid, SIGTERM);
    pthread_mutex_unlock(&g_child_mu);
    if (g_signal) kill(pid, g_signal); /* came after the last check, before the fork */
  }
  pthread_sigmask(SIG_SETMASK, &before, NULL);
  close(errpipe[1]);
  if (pid < 0) {
    close(errpipe[0]);
    cli_err("fork: %s", strerror(fork_errno));
    return EX_OSERR;
  }
  int exec_errno = 0;
  ssize_t n;
  while ((n = read(errpipe[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
  }
  close(errpipe[0]);
  /* Wait without reaping, so that the pid cannot be reused while signalled. */
  siginfo_t si;
  while (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
  }
  pthread_mutex_lock(&g_child_mu);
  atomic_store(&g_child, 0);
  pthread_mutex_unlock(&g_child_mu);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (n == (ssize_t)sizeof exec_errno) {
    cli_err("cannot run %s: %s", cmd[0], strerror(exec_errno));
    return 127;
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Holds the lock around the command; returns the exit code. */
static int hold_and_run(rlock_lock_t *lock, const char *name, int64_t wait_ms, int64_t lease_ms,
                        char **cmd, const sigset_t *orig_mask) {
  int rc = rlock_lock_acquire(lock, RLOCK_OWNER_SELF, wait_ms, lease_ms, g_cancel);
  if (rc == RLOCK_EBUSY) {
    cli_err("timed out waiting for %s", name);
    return EX_TEMPFAIL;
  }
  if (rc == RLOCK_ECANCELED) {
    cli_err("interrupted by signal %d while waiting for %s", (int)g_signal, name);
    return 128 + g_signal;
  }
  if (rc) return cli_fail(rc, "cannot acquire the lock");
  int ex = 128 + g_signal;
  if (g_signal)
    cli_err("interrupted by signal %d before the command started", (int)g_signal);
  else if (!atomic_load(&g_lost))
    ex = run_child(cmd, orig_mask);
  if (atomic_load(&g_lost)) {
    cli_err("lock %s lost while the command ran", name);
    return EX_PROTOCOL;
  }
  rc = rlock_lock_unlock(lock);
  if (rc == RLOCK_ENOTHELD) {
    cli_err("lock %s lost while the command ran", name);
    return EX_PROTOCOL;
  }
  if (rc) return cli_fail(rc, "cannot release the lock (its lease will run out)");
  return ex;
}

int cmd_exec(cli_global_t *g, int argc, char **argv) {
  static const struct option longopts[] = {
      {"wait", required_argument, NULL, 'w'},     {"lease", required_argument, NULL, 'l'},
      {"watchdog", required_argument, NULL, 'd'}, CLI_CONNECT_LONGOPTS,
      {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0}};
  int64_t wait_ms = RLOCK_WAIT_FOREVER, lease_ms = RLOCK_LEASE_WATCHDOG, watchdog_ms = 0;
  int c, ex = 0;
  while ((c = getopt_long(argc, argv, "+:u:h", longopts, NULL)) != -1) {
    switch (c) {
      case 'w': ex = cli_duration("exec", "--wait", optarg, 0, &wait_ms); break;
      case 'l': ex = cli_duration("exec", "--lease", optarg, 1, &lease_ms); break;
      case 'd': ex = cli_duration("exec", "--watchdog", optarg, WATCHDOG_MIN_MS, &watchdog_ms); break;
      case 'h': fputs(usage_text, stdout); return 0;
      default: ex = cli_connect_option("exec", g, c, optarg, argv);
    }
    if (ex) return ex;
  }
  if (lease_ms != RLOCK_LEASE_WATCHDOG && watchdog_ms)
    return cli_usage("exec", "--lease and --watchdog exclude each other");
  if (optind >= argc) return cli_usage("exec", "missing the lock NAME");
  const char *name = argv[optind++];
  if ((ex = cli_name("exec", name))) return ex;
  if (optind < argc && strcmp(argv[optind], "--") == 0) optind++;
  if (optind >= argc) return cli_usage("exec", "missing the command to run after NAME --");
  char **cmd = argv + optind;

  rlock_options_t opts;
  rlock_options_init(&opts);
  if (watchdog_ms) opts.watchdog_timeout_ms = watchdog_ms;
  if (rlock_cancel_new(&g_cancel)) return cli_fail(RLOCK_ENOMEM, "cannot create a cancel token");
  /* Block the signals while the client starts: its thread inherits the mask. */
  sigset_t sigs, orig_mask;
  sigemptyset(&sigs);
  for (int i = 0; i < NSIG_HANDLED; i++) sigaddset(&sigs, handled[i]);
  pthread_sigmask(SIG_BLOCK, &sigs, &orig_mask);
  install_handlers();
  rlock_client_t *client = NULL;
  rlock_lock_t *lock = NULL;
  ex = cli_connect(g, &opts, &client);
  pthread_sigmask(SIG_SETMASK, &orig_mask, NULL);
  if (!ex) {
    rlock_client_on_lost(client, on_lost, NULL);
    ex = cli_lock(client, name, &lock);
  }
  if (!ex) ex = hold_and_run(lock, name, wait_ms, lease_ms, cmd, &orig_mask);
  if (lock) rlock_lock_free(lock);
  if (client) rlock_client_free(client);
  restore_handlers();
  rlock_cancel_free(g_cancel);
  g_cancel = NULL;
  return ex;
}
