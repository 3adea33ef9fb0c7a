/* cmd_exec.c -- `rlock exec`: acquire a lock, run a command in its own
 * process group while holding it (exec_group.c), release it once every
 * process of that group has ended, and exit with the command's status.
 * Signals: SIGINT/SIGTERM/SIGHUP and every other signal that would end rlock
 * cancel the wait, or are forwarded to the command's group once it runs. A
 * lost lock (lock-lost callback) sends the group SIGTERM (SIGKILL after
 * --kill-after) and makes rlock exit 76. */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdbool.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "cli.h"

static const char usage_text[] =
    "Usage: rlock exec [--wait DUR] [--lease DUR | --watchdog DUR] [--kill-after DUR]\n"
    "                  [--simple | --read | --write] [--redlock] NAME [NAME...] -- CMD [ARG...]\n"
    "Acquires the lock NAME, runs CMD, releases the lock, and exits with CMD's status\n"
    "(128+N if CMD was killed by signal N). Several NAMEs (then '--' is required):\n"
    "a MultiLock, all of them or none, taken in one canonical order (no deadlock).\n\n"
    "  --wait DUR      give up after DUR (exit 75); default: wait forever\n"
    "  --lease DUR     fixed lease: the lock expires after DUR even if CMD still runs\n"
    "  --watchdog DUR  lease of the watchdog-renewed lock (default 30s, renewed every third)\n"
    "  --kill-after DUR  if the lock is lost, CMD's group gets SIGTERM, then SIGKILL\n"
    "                  after DUR if still running (default 10s; 0: SIGKILL at once)\n"
    "  --simple        the simple lock (SET NAME token NX PX lease), shared with\n"
    "                  redis-py's Lock, node-redlock and redsync; default: Redisson's\n"
    "  --read, --write the read or the write lock of Redisson's RReadWriteLock NAME:\n"
    "                  many readers or one writer\n"
    "  --redlock       RedLock: every -u URL is an independent master (give 3 or 5);\n"
    "                  held with a majority of them (one NAME)\n"
    "  -u, --url URL ...  Redis URL and TLS options: see 'rlock --help'\n\n"
    "Exit codes: CMD's status; 127 CMD could not be run; 64 usage; 69 Redis unavailable\n"
    "(--redlock: too many nodes unreachable for a majority);\n"
    "75 timed out waiting; 76 the lock was lost while CMD ran (CMD got SIGTERM);\n"
    "128+N interrupted by signal N while waiting.\n\n"
    "CMD runs in its own process group; signals and the SIGTERM of a lost lock go to\n"
    "the whole group, and the lock is released once every process of it has ended.\n"
    "On a terminal the group has the terminal while it runs.\n";

/* The shortest watchdog lease the library takes (renewed every third of it). */
#define WATCHDOG_MIN_MS 3

static rlock_cancel_t *g_cancel;
static volatile sig_atomic_t g_signal; /* the last handled signal received */
static atomic_int g_running;           /* CMD's group exists: signals go to it */
static atomic_int g_lost;              /* the lock-lost callback fired */
static atomic_int g_lost_reason;       /* its reason (rlock_lost_reason_t) */

/* Signals reach only the main thread (blocked in the library's thread).
 * While CMD runs they go to its whole group: a terminal's signals too, since
 * CMD's group is not rlock's (when rlock had the terminal, CMD has it now and
 * rlock does not get them). */
static void on_signal(int sig, siginfo_t *si, void *ctx) {
  (void)si, (void)ctx;
  g_signal = sig;
  if (atomic_load(&g_running))
    group_kill(sig);
  else
    rlock_cancel_trigger(g_cancel);
}

/* After a lost lock, the group gets SIGTERM and, kill-after ms later,
 * SIGKILL if any of it is still running: the lock is gone, another process
 * may be inside already, and a command that ignores SIGTERM must not run on
 * outside the lock until it feels like stopping. */
static int64_t g_kill_after_ms = 10000;

static void *escalate(void *arg) {
  (void)arg;
  struct timespec left = {(time_t)(g_kill_after_ms / 1000), (long)(g_kill_after_ms % 1000) * 1000000};
  while (nanosleep(&left, &left) < 0 && errno == EINTR) {
  }
  group_lock();
  if (group_kill(SIGKILL))
    cli_err("the command still ran %lld ms after the lock was lost: SIGKILL", (long long)g_kill_after_ms);
  group_unlock();
  return NULL;
}

/* On the library's I/O thread: nothing blocking here (the escalation waits
 * on a thread of its own, which inherits the I/O thread's blocked signals). */
static void on_lost(const char *name, size_t name_len, uint64_t owner, rlock_lost_reason_t reason,
                    void *arg) {
  (void)name, (void)name_len, (void)owner, (void)arg;
  group_lock();
  bool first = !atomic_exchange(&g_lost, 1);
  if (first) atomic_store(&g_lost_reason, (int)reason);
  group_kill(g_kill_after_ms == 0 ? SIGKILL : SIGTERM);
  group_unlock();
  pthread_t t;
  pthread_attr_t attr;
  if (!first || g_kill_after_ms == 0 || pthread_attr_init(&attr)) return;
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&t, &attr, escalate, NULL) != 0) cli_err("cannot start the SIGKILL timer of a lost lock");
  pthread_attr_destroy(&attr);
}

/* The signals rlock handles: every one whose default action would end rlock
 * and leave CMD's group running outside the lock (forwarded to the group, or
 * ending the wait), except those the kernel raises for rlock's own faults
 * (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT) and SIGPIPE
 * (a write of rlock's own to a closed pipe). Real-time signals too. */
static const int fixed_handled[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM,
                                    SIGVTALRM, SIGPROF, SIGXCPU, SIGXFSZ, SIGIO,
#ifdef SIGPWR
                                    SIGPWR,
#endif
#ifdef SIGSTKFLT
                                    SIGSTKFLT,
#endif
};
static int handled[sizeof fixed_handled / sizeof fixed_handled[0] + 64], nhandled;
static struct sigaction g_orig_action[sizeof handled / sizeof handled[0]];

static void list_handled(sigset_t *set) {
  nhandled = 0;
  for (size_t i = 0; i < sizeof fixed_handled / sizeof fixed_handled[0]; i++) handled[nhandled++] = fixed_handled[i];
  for (int sig = SIGRTMIN; sig <= SIGRTMAX && nhandled < (int)(sizeof handled / sizeof handled[0]); sig++)
    handled[nhandled++] = sig;
  sigemptyset(set);
  for (int i = 0; i < nhandled; i++) sigaddset(set, handled[i]);
}

/* Installs on_signal for the handled signals, except those the caller of
 * rlock ignores (they stay ignored, for rlock and the command). */
static void install_handlers(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO;
  for (int i = 0; i < nhandled; i++) {
    sigaction(handled[i], NULL, &g_orig_action[i]);
    if (g_orig_action[i].sa_handler != SIG_IGN) sigaction(handled[i], &sa, NULL);
  }
}

static void restore_handlers(void) {
  for (int i = 0; i < nhandled; i++) sigaction(handled[i], &g_orig_action[i], NULL);
}

/* The group can be signalled now (group lock held, signals blocked): pass on
 * what came before it existed. */
static void started(void) {
  atomic_store(&g_running, 1);
  if (atomic_load(&g_lost)) group_kill(g_kill_after_ms == 0 ? SIGKILL : SIGTERM);
  if (g_signal) group_kill(g_signal);
}

/* What exec holds: one lock, a MultiLock or a RedLock. */
typedef struct guard {
  rlock_lock_t *lock;
  rlock_multilock_t *multi;
  rlock_redlock_t *redlock;
} guard_t;

static int guard_acquire(guard_t *gd, int64_t wait_ms, int64_t lease_ms) {
  if (gd->redlock) return rlock_redlock_acquire(gd->redlock, wait_ms, lease_ms, g_cancel, NULL);
  if (gd->multi) return rlock_multilock_acquire(gd->multi, RLOCK_OWNER_SELF, wait_ms, lease_ms, g_cancel);
  return rlock_lock_acquire(gd->lock, RLOCK_OWNER_SELF, wait_ms, lease_ms, g_cancel);
}

static int guard_release(guard_t *gd) {
  if (gd->redlock) return rlock_redlock_release(gd->redlock);
  if (gd->multi) return rlock_multilock_release(gd->multi, RLOCK_OWNER_SELF);
  return rlock_lock_unlock(gd->lock);
}

/* Holds the lock around the command; returns the exit code. */
static int hold_and_run(guard_t *gd, const char *name, int64_t wait_ms, int64_t lease_ms,
                        char **cmd, const sigset_t *orig_mask) {
  int rc = guard_acquire(gd, wait_ms, lease_ms);
  if (rc == RLOCK_EBUSY) {
    cli_err("timed out waiting for %s (%s)", name, rlock_last_error());
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
    ex = group_run(cmd, orig_mask, restore_handlers, started);
  if (atomic_load(&g_lost)) {
    cli_err("lock %s lost while the command ran: %s", name,
            rlock_lost_reason_str((rlock_lost_reason_t)atomic_load(&g_lost_reason)));
    if (gd->multi) guard_release(gd); /* the members still held: free them now, not at their lease's end */
    return EX_PROTOCOL;
  }
  rc = guard_release(gd);
  if (rc == RLOCK_ENOTHELD) {
    cli_err("lock %s lost while the command ran", name);
    return EX_PROTOCOL;
  }
  if (rc) return cli_fail(rc, "cannot release the lock (its lease will run out)");
  return ex;
}

#define CLI_NAMES_MAX 64

/* How many NAMEs start at argv[first]: all words up to a "--" (a MultiLock
 * when more than one), or just one when no "--" follows (NAME CMD...). */
static int names_before_dashes(int argc, char **argv, int first) {
  for (int i = first; i < argc; i++)
    if (strcmp(argv[i], "--") == 0) return i - first;
  return 1;
}

/* "a b c" for messages, cut to len. */
static void show_names(char **names, int n, char *out, size_t len) {
  size_t o = 0;
  out[0] = 0;
  for (int i = 0; i < n && o + 1 < len; i++) {
    int w = snprintf(out + o, len - o, "%s%s", i ? " " : "", names[i]);
    if (w < 0) break;
    o += (size_t)w;
  }
}

/* The locks NAMEs on client; a MultiLock over them when there are several. */
static int open_locks(rlock_client_t *client, char **names, int n, int simple, rlock_lock_t **locks,
                      guard_t *gd) {
  if (n > CLI_NAMES_MAX) return cli_usage("exec", "at most %d NAMEs", CLI_NAMES_MAX);
  for (int i = 0; i < n; i++) {
    int ex = cli_lock_kind(client, names[i], simple, &locks[i]);
    if (ex) return ex;
  }
  gd->lock = locks[0];
  if (n == 1) return 0;
  int rc = rlock_multilock_new(&gd->multi, locks, (size_t)n);
  return rc ? cli_fail(rc, "cannot make the MultiLock") : 0;
}

/* A RedLock over every -u URL (one master each). */
static int open_redlock(const cli_global_t *g, rlock_options_t *opts, const char *name, int simple, guard_t *gd) {
  int ex = cli_options(g, opts);
  if (ex) return ex;
  const char *one[1] = {g->url};
  const char *const *urls = g->nurls ? g->urls : one;
  size_t n = g->nurls ? (size_t)g->nurls : 1;
  int rc = rlock_redlock_new(&gd->redlock, opts, urls, n, name, strlen(name), simple ? RLOCK_REDLOCK_SIMPLE : 0);
  if (rc) return cli_fail(rc, "cannot make the RedLock");
  rlock_redlock_on_lost(gd->redlock, on_lost, NULL);
  return 0;
}

int cmd_exec(cli_global_t *g, int argc, char **argv) {
  static const struct option longopts[] = {
      {"wait", required_argument, NULL, 'w'},     {"lease", required_argument, NULL, 'l'},
      {"watchdog", required_argument, NULL, 'd'}, {"kill-after", required_argument, NULL, 'k'},
      {"simple", no_argument, NULL, 's'},         {"redlock", no_argument, NULL, 'r'},
      {"read", no_argument, NULL, 'R'},           {"write", no_argument, NULL, 'W'},
      CLI_CONNECT_LONGOPTS,
      {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0}};
  int64_t wait_ms = RLOCK_WAIT_FOREVER, lease_ms = RLOCK_LEASE_WATCHDOG, watchdog_ms = 0;
  int c, ex = 0, simple = 0, redlock = 0;
  while ((c = getopt_long(argc, argv, "+:u:h", longopts, NULL)) != -1) {
    switch (c) {
      case 'w': ex = cli_duration("exec", "--wait", optarg, 0, &wait_ms); break;
      case 'l': ex = cli_duration("exec", "--lease", optarg, 1, &lease_ms); break;
      case 'd': ex = cli_duration("exec", "--watchdog", optarg, WATCHDOG_MIN_MS, &watchdog_ms); break;
      case 'k': ex = cli_duration("exec", "--kill-after", optarg, 0, &g_kill_after_ms); break;
      case 's': ex = cli_set_kind("exec", &simple, CLI_KIND_SIMPLE); break;
      case 'R': ex = cli_set_kind("exec", &simple, CLI_KIND_READ); break;
      case 'W': ex = cli_set_kind("exec", &simple, CLI_KIND_WRITE); break;
      case 'r': redlock = 1; break;
      case 'h': fputs(usage_text, stdout); return 0;
      default: ex = cli_connect_option("exec", g, c, optarg, argv);
    }
    if (ex) return ex;
  }
  if (lease_ms != RLOCK_LEASE_WATCHDOG && watchdog_ms)
    return cli_usage("exec", "--lease and --watchdog exclude each other");
  if (optind >= argc) return cli_usage("exec", "missing the lock NAME");
  int first = optind, nnames = names_before_dashes(argc, argv, first);
  if (nnames == 0) return cli_usage("exec", "missing the lock NAME before '--'");
  for (int i = 0; i < nnames; i++)
    if ((ex = cli_name("exec", argv[first + i]))) return ex;
  optind = first + nnames;
  if (optind < argc && strcmp(argv[optind], "--") == 0) optind++;
  if (optind >= argc) return cli_usage("exec", "missing the command to run after NAME --");
  if (redlock && nnames > 1) return cli_usage("exec", "--redlock takes one NAME");
  if (redlock && simple > CLI_KIND_SIMPLE) return cli_usage("exec", "--redlock takes no --read or --write");
  char **cmd = argv + optind, shown[256];
  show_names(argv + first, nnames, shown, sizeof shown);

  rlock_options_t opts;
  rlock_options_init(&opts);
  if (watchdog_ms) opts.watchdog_timeout_ms = watchdog_ms;
  if (rlock_cancel_new(&g_cancel)) return cli_fail(RLOCK_ENOMEM, "cannot create a cancel token");
  /* Block the signals while the clients start: their threads inherit the mask. */
  sigset_t sigs, orig_mask;
  list_handled(&sigs);
  pthread_sigmask(SIG_BLOCK, &sigs, &orig_mask);
  install_handlers();
  guard_t gd = {0};
  rlock_client_t *client = NULL;
  rlock_lock_t *locks[CLI_NAMES_MAX] = {0};
  if (redlock) {
    ex = open_redlock(g, &opts, argv[first], simple, &gd);
  } else {
    ex = cli_connect(g, &opts, &client);
    if (!ex) rlock_client_on_lost(client, on_lost, NULL);
    if (!ex) ex = open_locks(client, argv + first, nnames, simple, locks, &gd);
  }
  pthread_sigmask(SIG_SETMASK, &orig_mask, NULL);
  if (!ex) ex = hold_and_run(&gd, shown, wait_ms, lease_ms, cmd, &orig_mask);
  rlock_redlock_free(gd.redlock);
  rlock_multilock_free(gd.multi);
  for (int i = 0; i < nnames && i < CLI_NAMES_MAX; i++) rlock_lock_free(locks[i]);
  if (client) rlock_client_free(client);
  restore_handlers();
  rlock_cancel_free(g_cancel);
  g_cancel = NULL;
  group_die_like_cmd(); /* a Ctrl-C at the terminal stops the caller's script too */
  return ex;
}
