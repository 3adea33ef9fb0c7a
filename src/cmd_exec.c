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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

static const char usage_text[] =
    "Usage: rlock exec [--wait DUR] [--lease DUR | --watchdog DUR] [--kill-after DUR]\n"
    "                  [--simple | --fair | --nonreentrant | --fenced | --spin | --read | --write]\n"
    "                  [--redlock] NAME [NAME...] -- CMD [ARG...]\n"
    "       rlock exec --permit [--permits N] [--wait DUR] [--lease DUR | --watchdog DUR]\n"
    "                  NAME -- CMD [ARG...]\n"
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
    "  --fair          the fair lock (Redisson's RFairLock): waiters, Java's too, get\n"
    "                  it in the order they queued\n"
    "  --nonreentrant  Redisson's non-reentrant lock (getNonReentrantLock: RLock's\n"
    "                  layout; a second acquire by the holder fails at once)\n"
    "  --fenced        Redisson's fenced lock (RFencedLock; one NAME): CMD gets the\n"
    "                  acquire's token in RLOCK_TOKEN (a number that grows with every\n"
    "                  acquire: the storage refuses writes with a token below the last)\n"
    "  --spin          Redisson's spin lock (getSpinLock): RLock's hash, no pub/sub;\n"
    "                  a waiter retries after a backoff (1 ms doubling to 128 ms)\n"
    "  --read, --write the read or the write lock of Redisson's RReadWriteLock NAME:\n"
    "                  many readers or one writer\n"
    "  --redlock       RedLock: every -u URL is an independent master (1 to 64;\n"
    "                  an odd count: 3 or 5);\n"
    "                  held with a majority of them (one NAME)\n"
    "  -E, --conflict-exit-code N  exit N (0-255) in place of 75 when the lock stays\n"
    "                  busy until --wait runs out (as flock -E)\n"
    "  --permit        hold one permit of the permit-expirable semaphore NAME\n"
    "                  (Redisson's RPermitExpirableSemaphore) while CMD runs: at most\n"
    "                  N such commands at once, cluster-wide; the permit is renewed\n"
    "                  (the watchdog) and returns about one lease after rlock dies.\n"
    "                  CMD gets the permit's id in RLOCK_PERMIT_ID\n"
    "  --permits N     with --permit: create the semaphore with N permits if it\n"
    "                  does not exist (an existing one keeps its count)\n"
    "  -u, --url URL ...  Redis URL and TLS options: see 'rlock --help'\n\n"
    "Exit codes: CMD's status; 127 CMD could not be run; 64 usage; 69 Redis unavailable\n"
    "(--redlock: too many nodes unreachable for a majority);\n"
    "75 timed out waiting; 76 the lock was lost while CMD ran (CMD got SIGTERM);\n"
    "128+N interrupted by signal N while waiting.\n\n"
    "CMD runs in its own process group; signals and the SIGTERM of a lost lock go to\n"
    "the whole group, and the lock is released once every process of it has ended.\n"
    "On a terminal the group has the terminal while it runs.\n\n"
    "CMD's environment: RLOCK_NAME (the NAMEs, space-separated), RLOCK_NODE (the\n"
    "node that granted the lock, host:port; one NAME, not with --redlock),\n"
    "RLOCK_TOKEN (--fenced: the acquire's token).\n";

/* The shortest watchdog lease exec takes (renewed every third of it): a
 * renewal's round trip and a busy machine's scheduling delay must fit in a
 * third (the library takes 3 ms, which loses the lock at once). */
#define WATCHDOG_MIN_MS 500

static rlock_cancel_t *g_cancel;
static volatile sig_atomic_t g_signal; /* the last handled signal received */
static atomic_int g_running;           /* CMD's group exists: signals go to it */
static atomic_int g_lost;              /* the lock-lost callback fired */
static atomic_int g_lost_reason;       /* its reason (rlock_lost_reason_t) */
static char g_lost_name[256];          /* the lock it named (a MultiLock's member), set before g_lost */

/* Signals reach only the main thread (blocked in the library's thread).
 * While CMD runs they go to its whole group: a terminal's signals too, since
 * CMD's group is not rlock's (when rlock had the terminal, CMD has it now and
 * rlock does not get them). */
static void on_signal(int sig, siginfo_t *si, void *ctx) {
  (void)si, (void)ctx;
  g_signal = sig;
  if (atomic_load(&g_running)) group_kill(sig);
  else rlock_cancel_trigger(g_cancel);
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
static void on_lost(const char *name, size_t name_len, uint64_t owner, rlock_lost_reason_t reason, void *arg) {
  (void)owner, (void)arg;
  group_lock();
  bool first = !atomic_load(&g_lost);
  if (first) {
    size_t n = name_len < sizeof g_lost_name - 1 ? name_len : sizeof g_lost_name - 1;
    memcpy(g_lost_name, name, n);
    g_lost_name[n] = 0;
    atomic_store(&g_lost_reason, (int)reason);
    atomic_store(&g_lost, 1);
  }
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
static const int fixed_handled[] = {
    SIGHUP,    SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF, SIGXCPU, SIGXFSZ, SIGIO,
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
  int fenced;               /* a fenced lock: its token goes to CMD's environment */
  rlock_permits_t *permits; /* --permit: one permit of this semaphore */
  char permit_id[RLOCK_PERMIT_ID_LEN + 1];
} guard_t;

static int64_t g_connect_timeout_ms = 3000; /* the clients' connect timeout */
static int g_busy_exit = EX_TEMPFAIL;       /* -E: the exit code of a wait that ran out */

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A RedLock's wait, in slices of the connect timeout: a busy lock is waited
 * for as long as --wait says (forever without it), but when no majority of
 * the masters can be reached, rlock says so at once and gives up
 * (RLOCK_ECONNECT: exit 69) once that has lasted the connect timeout. */
static int redlock_acquire(rlock_redlock_t *rl, int64_t wait_ms, int64_t lease_ms) {
  int64_t deadline = wait_ms < 0 ? -1 : mono_ms() + wait_ms, down_since = -1;
  for (;;) {
    int64_t start = mono_ms(), slice = g_connect_timeout_ms;
    if (deadline >= 0 && deadline - start < slice) slice = deadline > start ? deadline - start : 0;
    int rc = rlock_redlock_acquire(rl, slice, lease_ms, g_cancel, NULL);
    if (rc != RLOCK_EBUSY && rc != RLOCK_ECONNECT) return rc;
    int64_t now = mono_ms();
    if (rc == RLOCK_ECONNECT) {
      if (down_since < 0) {
        down_since = start;
        cli_err("no majority of the RedLock's masters can be reached (%s); trying for %lld ms", rlock_last_error(),
                (long long)g_connect_timeout_ms);
      }
      if (now - down_since >= g_connect_timeout_ms) return rc;
    } else {
      down_since = -1; /* a majority answered: the lock is busy */
    }
    if (deadline >= 0 && now >= deadline) return rc;
  }
}

static int guard_acquire(guard_t *gd, int64_t wait_ms, int64_t lease_ms) {
  if (gd->permits) {
    int rc = rlock_permits_acquire(gd->permits, wait_ms, lease_ms, g_cancel, gd->permit_id);
    /* set before CMD is forked */
    if (!rc && setenv("RLOCK_PERMIT_ID", gd->permit_id, 1)) rc = RLOCK_ENOMEM;
    return rc;
  }
  if (gd->redlock) return redlock_acquire(gd->redlock, wait_ms, lease_ms);
  if (gd->multi) return rlock_multilock_acquire(gd->multi, RLOCK_OWNER_SELF, wait_ms, lease_ms, g_cancel);
  if (gd->fenced) {
    int64_t token = 0;
    int rc = rlock_fenced_acquire(gd->lock, RLOCK_OWNER_SELF, wait_ms, lease_ms, g_cancel, &token);
    char buf[24];
    snprintf(buf, sizeof buf, "%lld", (long long)token);
    /* set before CMD is forked (the library reads no environment variable) */
    if (!rc && setenv("RLOCK_TOKEN", buf, 1)) rc = RLOCK_ENOMEM;
    return rc;
  }
  return rlock_lock_acquire(gd->lock, RLOCK_OWNER_SELF, wait_ms, lease_ms, g_cancel);
}

static int guard_release(guard_t *gd) {
  if (gd->permits) return rlock_permits_release(gd->permits, gd->permit_id);
  if (gd->redlock) return rlock_redlock_release(gd->redlock);
  if (gd->multi) return rlock_multilock_release(gd->multi, RLOCK_OWNER_SELF);
  return rlock_lock_unlock(gd->lock);
}

/* RLOCK_NODE for CMD (RLOCK_NAME is set before the wait, RLOCK_TOKEN by the
 * fenced acquire): the node that granted a single lock ("host:port", never a
 * URL: no password in it). */
static int set_env(const guard_t *gd) {
  if (!gd->fenced && unsetenv("RLOCK_TOKEN")) return RLOCK_ESYS; /* not one of this lock's */
  if (!gd->permits && unsetenv("RLOCK_PERMIT_ID")) return RLOCK_ESYS;
  if (!gd->lock || gd->multi || gd->redlock) return unsetenv("RLOCK_NODE") ? RLOCK_ESYS : 0;
  char node[512];
  int rc = rlock_lock_node(gd->lock, node, sizeof node);
  if (rc) return rc;
  return setenv("RLOCK_NODE", node, 1) ? RLOCK_ENOMEM : 0;
}

/* RLOCK_NAME for CMD: names, space-separated. */
static int set_name_env(char **names, int n) {
  size_t len = 1;
  for (int i = 0; i < n; i++) len += strlen(names[i]) + 1;
  char *v = malloc(len);
  if (!v) return RLOCK_ENOMEM;
  size_t o = 0;
  for (int i = 0; i < n; i++) {
    size_t l = strlen(names[i]);
    if (i) v[o++] = ' ';
    memcpy(v + o, names[i], l);
    o += l;
  }
  v[o] = 0;
  int rc = setenv("RLOCK_NAME", v, 1) ? RLOCK_ENOMEM : 0;
  free(v);
  return rc;
}

/* Holds the lock around the command; returns the exit code. */
static int hold_and_run(guard_t *gd, const char *name, int64_t wait_ms, int64_t lease_ms, char **cmd,
                        const sigset_t *orig_mask) {
  int rc = guard_acquire(gd, wait_ms, lease_ms);
  if (rc == RLOCK_EBUSY) {
    const char *why = rlock_last_error();
    if (!why || !*why || strstr(why, rlock_strerror(RLOCK_EBUSY))) /* said once */
      cli_err("timed out waiting for %s", name);
    else cli_err("timed out waiting for %s (%s)", name, why);
    return g_busy_exit;
  }
  if (rc == RLOCK_ECANCELED) {
    cli_err("interrupted by signal %d while waiting for %s", (int)g_signal, name);
    return 128 + g_signal;
  }
  if (rc) return cli_fail(rc, "cannot acquire the lock");
  if ((rc = set_env(gd)) != 0) {
    guard_release(gd);
    return cli_fail(rc, "cannot set CMD's environment");
  }
  int ex = 128 + g_signal;
  if (g_signal) cli_err("interrupted by signal %d before the command started", (int)g_signal);
  else if (!atomic_load(&g_lost)) ex = group_run(cmd, orig_mask, restore_handlers, started);
  if (atomic_load(&g_lost)) {
    const char *why = rlock_lost_reason_str((rlock_lost_reason_t)atomic_load(&g_lost_reason));
    if (gd->multi) /* which member, of which MultiLock */
      cli_err("lock %s (of the MultiLock %s) lost while the command ran: %s", g_lost_name, name, why);
    else cli_err("lock %s lost while the command ran: %s", name, why);
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

/* What rlock needs of the server's ACL for a lock, checked with Redis 7's
 * redis.acl_check_cmd (a server without it, or without ACL users, passes).
 * KEYS[1] NAME; ARGV[1] the channel published and subscribed to (the fair
 * lock: one waiter's channel, standing for all of them), ARGV[2] '1' for
 * sharded pub/sub (Cluster), ARGV[3] the kind: 'r' reentrant (and the
 * non-reentrant, fenced), 's' simple, 'p' spin (no pub/sub), 'f' fair, 'w'
 * read-write, 'e' a permit of a permit-expirable semaphore (--permit: NAME a
 * string count, ARGV[7] its "{NAME}:timeout" zset); ARGV[4] and ARGV[5] a key of the acquire and the unlock latch;
 * ARGV[6] the channel's name as the scripts get it as a key; ARGV[7..] the
 * kind's other keys (fair: queue, deadlines; read-write: a timeout key and
 * the key prefix). Reply: the missing permissions. */
static const char acl_script[] =
    "if not redis.acl_check_cmd then return {} end\n"
    "local name, ch, kind, miss = KEYS[1], ARGV[1], ARGV[3], {}\n"
    "local function need(what, ...)\n"
    "  if not redis.acl_check_cmd(...) then miss[#miss + 1] = what end\n"
    "end\n"
    "local pub, sub = 'publish', 'subscribe'\n"
    "if ARGV[2] == '1' then pub, sub = 'spublish', 'ssubscribe' end\n"
    "if kind ~= 'p' then\n"
    "  local shown = kind == 'f' and ARGV[6] .. ':<owner id>' or ch\n"
    "  need(pub .. ' on channel ' .. shown, pub, ch, '0')\n"
    "  need(sub .. ' on channel ' .. shown, sub, ch)\n"
    "end\n"
    "need('key ' .. ARGV[6] .. ' (the scripts get the channel as a key)', 'exists', ARGV[6])\n"
    "need('evalsha', 'evalsha', '0000000000000000000000000000000000000000', '0')\n"
    "need('script load', 'script', 'load', 'return 1')\n"
    "need('script exists', 'script', 'exists', '0000000000000000000000000000000000000000')\n"
    "local cmds = {'exists', 'pttl', 'pexpire', 'del', 'type', 'hget', 'hset', 'hdel', 'hincrby', 'hexists', 'hlen',\n"
    "  'hgetall', 'get', 'set'}\n"
    "if kind == 'w' then cmds[#cmds + 1] = 'hkeys' end\n"
    "if kind == 'e' then cmds = {'exists', 'pttl', 'del', 'type', 'get', 'set', 'incrby', 'decrby'} end\n"
    "for _, c in ipairs(cmds) do\n"
    "  local args = {c, name}\n"
    "  if c == 'pexpire' then args[3] = '1' end\n"
    "  if c == 'hget' or c == 'hexists' or c == 'hdel' then args[3] = 'f' end\n"
    "  if c == 'hset' or c == 'hincrby' then args[3], args[4] = 'f', '1' end\n"
    "  if c == 'set' or c == 'incrby' or c == 'decrby' then args[3] = '1' end\n"
    "  need(c .. ' on key ' .. name, unpack(args))\n"
    "end\n"
    "local function all(key, list)\n"
    "  for _, c in ipairs(list) do\n"
    "    local args = {c[1], key}\n"
    "    for i = 2, #c do args[#args + 1] = c[i] end\n"
    "    need(c[1] .. ' on key ' .. key, unpack(args))\n"
    "  end\n"
    "end\n"
    "local str = {{'get'}, {'set', '1'}, {'del'}, {'exists'}}\n"
    "all(ARGV[4], str)\n"
    "all(ARGV[5], str)\n"
    "if kind == 'f' then\n"
    "  all(ARGV[7], {{'lindex', '0'}, {'lpop'}, {'rpush', 'w'}, {'lrange', '0', '-1'}, {'lrem', '0', 'w'}})\n"
    "  all(ARGV[8], {{'zscore', 'w'}, {'zadd', '1', 'w'}, {'zrem', 'w'}, {'zincrby', '1', 'w'},\n"
    "    {'zrange', '0', '-1'}})\n"
    "elseif kind == 'e' then\n"
    "  all(ARGV[7], {{'zadd', '1', 'w'}, {'zrem', 'w'}, {'zscore', 'w'}, {'zrange', '0', '-1'},\n"
    "    {'zrangebyscore', '0', '1'}, {'zcount', '0', '1'}, {'pexpire', '1'}, {'del'}})\n"
    "elseif kind == 'w' then\n"
    "  all(ARGV[7], {{'set', '1'}, {'pexpire', '1'}, {'pttl'}, {'del'}})\n"
    "  need('key ' .. ARGV[8] .. ' (the scripts get the key prefix as a key)', 'exists', ARGV[8])\n"
    "end\n"
    "return miss\n";

/* Checks, before anything is written, that the server's ACL lets this user
 * do what the lock NAME of this kind needs (issue 23: a user without channel
 * permission ran CMD, then the unlock failed half-way). 0, or EX_NOPERM with
 * a message naming what is missing; a failed check for another reason is
 * left to the lock's own calls. The fair lock's scripts publish to other
 * waiters' channels, known only then: one made-up waiter's channel stands
 * for them here, and the scripts check each one before they write. */
#define ACL_PERMIT (-1) /* check_acl's kind for --permit */

/* Redisson's prefixName (and rlock's for its latches): "PREFIX:{NAME}SUFFIX",
 * or "PREFIX:NAMESUFFIX" when NAME has a brace (no braces added). */
static void rname(char *buf, size_t n, const char *prefix, const char *name, const char *suffix) {
  snprintf(buf, n, strchr(name, '{') ? "%s:%s%s" : "%s:{%s}%s", prefix, name, suffix);
}

static int check_acl(const cli_global_t *g, rlock_client_t *client, const char *name, int kind) {
  const char *url = g->url ? g->url : "";
  int sharded = strstr(url, "+cluster://") != NULL;
  char ch[700], chkey[600], l1[600], l2[600], k7[700] = "", k8[600] = "";
  const char *letter = "r";
  if (kind == ACL_PERMIT) { /* Redisson's names: no braces added to a NAME that has one */
    letter = "e";
    rname(chkey, sizeof chkey, "redisson_sc", name, "");
    snprintf(k7, sizeof k7, strchr(name, '{') ? "%s:timeout" : "{%s}:timeout", name);
  } else if (kind == CLI_KIND_SIMPLE) {
    letter = "s";
    rname(chkey, sizeof chkey, "rlock_simple__channel", name, "");
  } else if (kind == CLI_KIND_READ || kind == CLI_KIND_WRITE) {
    letter = "w";
    rname(chkey, sizeof chkey, "redisson_rwlock", name, "");
    /* Redisson's key prefix: "{NAME}", or NAME when it holds '{' */
    snprintf(k8, sizeof k8, strchr(name, '{') ? "%s" : "{%s}", name);
    snprintf(k7, sizeof k7, "%s:00000000-0000-0000-0000-000000000000:1:rwlock_timeout:1", k8);
  } else {
    rname(chkey, sizeof chkey, "redisson_lock__channel", name, "");
    if (kind == CLI_KIND_SPIN) letter = "p";
    if (kind == CLI_KIND_FAIR) {
      letter = "f";
      rname(k7, sizeof k7, "redisson_lock_queue", name, "");
      rname(k8, sizeof k8, "redisson_lock_timeout", name, "");
    }
  }
  snprintf(ch, sizeof ch, "%s%s", chkey, kind == CLI_KIND_FAIR ? ":00000000-0000-0000-0000-000000000000:1" : "");
  rname(l1, sizeof l1, "rlock_acquire_latch", name, ":0");
  rname(l2, sizeof l2, "redisson_unlock_latch", name, ":0");
  const char *argv[] = {"EVAL", acl_script, "1", name, ch, sharded ? "1" : "0", letter, l1, l2, chkey, k7, k8};
  int argc = *k7 ? 12 : 10;
  rlock_reply_t *reply = NULL;
  int rc = rlock_client_command(client, argc, argv, NULL, &reply);
  if (rc || !reply) return 0;
  int ex = 0;
  if (reply->type == RLOCK_REPLY_ERROR && strncmp(reply->str, "NOPERM", 6) == 0) {
    cli_err("the Redis user may not run what rlock needs for %s: %s (see 'ACL' in rlock's docs/cli.md)", name,
            reply->str);
    ex = EX_NOPERM;
  } else if (reply->type == RLOCK_REPLY_ARRAY && reply->elements > 0) {
    char list[2048];
    size_t o = 0;
    list[0] = 0;
    for (size_t i = 0; i < reply->elements && o + 1 < sizeof list; i++) {
      const rlock_reply_t *e = reply->element[i];
      int w = snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", e->str ? e->str : "?");
      if (w < 0) break;
      o += (size_t)w;
    }
    cli_err("the Redis user lacks permissions rlock needs for %s: %s (see 'ACL' in rlock's docs/cli.md)", name, list);
    ex = EX_NOPERM;
  }
  rlock_reply_free(reply);
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
static int open_locks(rlock_client_t *client, char **names, int n, int kind, rlock_lock_t **locks, guard_t *gd) {
  if (n > CLI_NAMES_MAX) return cli_usage("exec", "at most %d NAMEs", CLI_NAMES_MAX);
  for (int i = 0; i < n; i++) {
    int ex = cli_lock_kind(client, names[i], kind, &locks[i]);
    if (ex) return ex;
  }
  gd->lock = locks[0];
  if (n == 1) return 0;
  int rc = rlock_multilock_new(&gd->multi, locks, (size_t)n);
  return rc ? cli_fail(rc, "cannot make the MultiLock") : 0;
}

/* The semaphore NAME for --permit; created with permits permits if it does
 * not exist (permits >= 0). A semaphore without any permit would make CMD
 * wait for ever: refused (exit 64) with a hint. */
static int open_permits(rlock_client_t *client, const char *name, int64_t permits, guard_t *gd) {
  int rc = rlock_permits_new(client, name, strlen(name), &gd->permits);
  if (rc) return cli_fail(rc, "cannot open the semaphore");
  int set = 0;
  if (permits >= 0 && (rc = rlock_permits_try_set(gd->permits, permits, &set)))
    return cli_fail(rc, "cannot set the permits");
  int64_t total = 0;
  if ((rc = rlock_permits_total(gd->permits, &total))) return cli_fail(rc, "cannot read the permits");
  if (total <= 0)
    return cli_usage("exec",
                     "the semaphore %s has no permits (give --permits N, or set them with 'rlock semaphore %s set N')",
                     name, name);
  return 0;
}

/* A RedLock over every -u URL (one master each). */
static int open_redlock(const cli_global_t *g, rlock_options_t *opts, const char *name, int simple, guard_t *gd) {
  int ex = cli_options(g, opts);
  if (ex) return ex;
  const char *one[1] = {g->url};
  const char *const *urls = g->nurls ? g->urls : one;
  size_t n = g->nurls ? (size_t)g->nurls : 1;
  if (opts->connect_timeout_ms > 0) g_connect_timeout_ms = opts->connect_timeout_ms;
  int rc = rlock_redlock_new(&gd->redlock, opts, urls, n, name, strlen(name), simple ? RLOCK_REDLOCK_SIMPLE : 0);
  if (rc) return cli_fail(rc, "cannot make the RedLock");
  rlock_redlock_on_lost(gd->redlock, on_lost, NULL);
  return 0;
}

int cmd_exec(cli_global_t *g, int argc, char **argv) {
  static const struct option longopts[] = {{"wait", required_argument, NULL, 'w'},
                                           {"lease", required_argument, NULL, 'l'},
                                           {"watchdog", required_argument, NULL, 'd'},
                                           {"kill-after", required_argument, NULL, 'k'},
                                           {"simple", no_argument, NULL, 's'},
                                           {"redlock", no_argument, NULL, 'r'},
                                           {"fair", no_argument, NULL, 'f'},
                                           {"nonreentrant", no_argument, NULL, 'N'},
                                           {"fenced", no_argument, NULL, 'F'},
                                           {"spin", no_argument, NULL, 'S'},
                                           {"read", no_argument, NULL, 'R'},
                                           {"write", no_argument, NULL, 'W'},
                                           {"conflict-exit-code", required_argument, NULL, 'E'},
                                           {"permit", no_argument, NULL, 'P'},
                                           {"permits", required_argument, NULL, 'n'},
                                           CLI_CONNECT_LONGOPTS,
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  int64_t wait_ms = RLOCK_WAIT_FOREVER, lease_ms = RLOCK_LEASE_WATCHDOG, watchdog_ms = 0;
  int c, ex = 0, kind = CLI_KIND_REENTRANT, kinds = 0, redlock = 0, permit = 0;
  int64_t permits = -1;
  long busy_exit = EX_TEMPFAIL;
  while ((c = getopt_long(argc, argv, "+:u:hE:", longopts, NULL)) != -1) {
    switch (c) {
    case 'w': ex = cli_duration("exec", "--wait", optarg, 0, &wait_ms); break;
    case 'E': ex = cli_count("exec", "--conflict-exit-code", optarg, 0, 255, &busy_exit); break;
    case 'l': ex = cli_duration("exec", "--lease", optarg, 1, &lease_ms); break;
    case 'd': ex = cli_duration("exec", "--watchdog", optarg, WATCHDOG_MIN_MS, &watchdog_ms); break;
    case 'k': ex = cli_duration("exec", "--kill-after", optarg, 0, &g_kill_after_ms); break;
    case 's': kind = CLI_KIND_SIMPLE, kinds++; break;
    case 'N': kind = CLI_KIND_NONREENTRANT, kinds++; break;
    case 'F': kind = CLI_KIND_FENCED, kinds++; break;
    case 'S': kind = CLI_KIND_SPIN, kinds++; break;
    case 'R': kind = CLI_KIND_READ, kinds++; break;
    case 'W': kind = CLI_KIND_WRITE, kinds++; break;
    case 'r': redlock = 1; break;
    case 'f': kind = CLI_KIND_FAIR, kinds++; break;
    case 'P': permit = 1, kinds++; break;
    case 'n': {
      char *end;
      errno = 0;
      long long v = strtoll(optarg, &end, 10);
      if (!*optarg || *end || errno || v < 1 || v > RLOCK_PERMITS_MAX)
        return cli_usage("exec", "--permits wants a count of 1 or more, not '%s'", optarg);
      permits = v;
      break;
    }
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
  if (kinds > 1)
    return cli_usage("exec", "--simple, --fair, --nonreentrant, --permit and the other lock kinds exclude each other");
  if (permits >= 0 && !permit) return cli_usage("exec", "--permits goes with --permit");
  if (permit && (nnames > 1 || redlock)) return cli_usage("exec", "--permit takes one NAME (and no --redlock)");
  if (kind == CLI_KIND_FENCED && nnames > 1) return cli_usage("exec", "--fenced takes one NAME (one token)");
  if (redlock && kind != CLI_KIND_REENTRANT && kind != CLI_KIND_SIMPLE)
    return cli_usage("exec", "--redlock takes the reentrant or the simple lock");
  int simple = kind == CLI_KIND_SIMPLE;
  g_busy_exit = (int)busy_exit;
  if (set_name_env(argv + first, nnames)) return cli_fail(RLOCK_ENOMEM, "cannot set CMD's environment");
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
  guard_t gd = {.fenced = kind == CLI_KIND_FENCED};
  rlock_client_t *client = NULL;
  rlock_lock_t *locks[CLI_NAMES_MAX] = {0};
  if (redlock) {
    ex = open_redlock(g, &opts, argv[first], simple, &gd);
  } else {
    ex = cli_connect(g, &opts, &client);
    if (!ex) rlock_client_on_lost(client, on_lost, NULL);
    if (permit) { /* the count is a string, as the simple lock's key */
      if (!ex) ex = cli_check_type(client, argv[first], 2);
      if (!ex) ex = check_acl(g, client, argv[first], ACL_PERMIT); /* before CMD (and the try-set) */
      if (!ex) ex = open_permits(client, argv[first], permits, &gd);
    } else {
      if (!ex) ex = open_locks(client, argv + first, nnames, kind, locks, &gd);
      for (int i = 0; !ex && i < nnames; i++) ex = check_acl(g, client, argv[first + i], kind);
      for (int i = 0; !ex && i < nnames; i++) ex = cli_check_type(client, argv[first + i], simple);
    }
  }
  pthread_sigmask(SIG_SETMASK, &orig_mask, NULL);
  if (!ex) ex = hold_and_run(&gd, shown, wait_ms, lease_ms, cmd, &orig_mask);
  rlock_redlock_free(gd.redlock);
  rlock_multilock_free(gd.multi);
  for (int i = 0; i < nnames && i < CLI_NAMES_MAX; i++) rlock_lock_free(locks[i]);
  rlock_permits_free(gd.permits);
  if (client) rlock_client_free(client);
  restore_handlers();
  rlock_cancel_free(g_cancel);
  g_cancel = NULL;
  group_die_like_cmd(); /* a Ctrl-C at the terminal stops the caller's script too */
  return ex;
}
