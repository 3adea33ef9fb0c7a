/* soak.c -- the soak run behind scripts/soak (issue 20, "find the next ones
 * yourselves"): minutes, bounded, never run by ctest or scripts/test.
 *
 * Each run starts one deployment (single, replicas, sentinel or cluster) with
 * the test harness (real redis-server / sentinel processes on loopback,
 * random ports, temp dirs), forks client processes (each one rlock client
 * with several threads) that take and release a few names over and over, and
 * drives a nemesis against the servers meanwhile. Two independent checks:
 *
 *   owner word   a shared-memory word per name: a holder writes its id into it
 *                when it enters and clears it when it leaves; finding another
 *                id there on entry is a raw overlap (two holders at once);
 *   history      every attempt, grant (with valid-until), entry, exit,
 *                release and lock-lost callback goes to the history file of
 *                tests/fault/history.h; its checker (HIST_MUTEX_LEASE) counts
 *                an overlap as a violation unless the earlier holder's lease
 *                had run out before the later grant AND it was told (lost).
 *
 * A "silent loss" is an unlock that answers RLOCK_ENOTHELD while no lock-lost
 * callback told the holder (the hold vanished without a word). Under
 * Sentinel a watcher thread per client counts "backward moves": the client
 * followed a failover to the new master, then went back to the old one.
 * Each overlap is attributed to the last nemesis action before the later
 * grant. --seed fixes the nemesis' and the holders' choices, not the timing.
 *
 * Layout: the top process parses options and forks one child per run (the
 * run owns the harness state: servers die with it, temp dirs go at its exit
 * or on a signal); the run forks the client processes. The run sends its
 * counts back on a pipe. Exit status: 0 clean, 1 an overlap, a silent loss or
 * a backward move was found, 2 bad usage, 3 a run failed to set up or finish
 * (harness error).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "harness_cluster.h"
#include "harness_replica.h"
#include "harness_sentinel.h"
#include "history.h"

/* ------------------------------------------------------------ options */

enum { D_SINGLE, D_REPLICAS, D_SENTINEL, D_CLUSTER, D_N };
static const char *const dep_names[D_N] = {"single", "replicas", "sentinel", "cluster"};

/* The lock kind the holders take (--kind). rw: even threads read, odd
 * threads write, checked as HIST_RW (readers together, a writer alone). */
enum { K_REENTRANT, K_FAIR, K_FENCED, K_SPIN, K_NONREENTRANT, K_WRITE, K_RW, K_N };
static const char *const kind_names[K_N] = {"reentrant", "fair", "fenced", "spin", "nonreentrant", "write", "rw"};

#define MAX_CLIENTS 8
#define MAX_THREADS 8
#define MAX_NAMES 8

static struct {
  int deps[D_N];
  int64_t seconds;     /* per deployment */
  int64_t run_seconds; /* per run (one deployment lifetime) */
  uint64_t seed;
  int fast; /* 1 on, 0 off, -1 alternate per run */
  int clients, threads, names;
  int verbose;
  int kind;
} opt = {.seconds = 180, .run_seconds = 20, .fast = -1, .clients = 2, .threads = 3, .names = 2, .kind = K_REENTRANT};

/* Client-side settings: short command timeouts, so that a stalled server
 * (DEBUG SLEEP, CLIENT PAUSE) makes answers late and requests re-sent. */
#define COMMAND_TIMEOUT_MS 400
#define WATCHDOG_MS 6000

/* ------------------------------------------------------------ shared state */

/* The nemesis' actions (--faults takes these names). */
enum {
  A_KILL,
  A_SLEEP,
  A_SIGSTOP,
  A_PAUSE,
  A_FLUSH,
  A_FLUSH_KILL,
  A_FLUSH_SLEEP,
  A_FLUSH_PAUSE,
  A_RESTART,
  A_PROMOTE,
  A_FAILOVER,
  A_STALE,
  A_CFAILOVER,
  A_MIGRATE,
  A_MKILL,
  A_N
};
static const char *const action_names[A_N] = {"client-kill",      "debug-sleep",  "sigstop",     "pause-write",
                                              "script-flush",     "flush+kill",   "flush+sleep", "flush+pause",
                                              "restart",          "promote",      "failover",    "stale-sentinel",
                                              "cluster-failover", "slot-migrate", "master-kill"};
static int allowed[A_N]; /* --faults */

typedef struct shared {
  _Atomic uint64_t word[MAX_NAMES]; /* the holder's worker id + 1, 0: free (a reader leaves it 0) */
  atomic_int readers[MAX_NAMES];    /* --kind rw: readers inside */
  atomic_int stop, ready;
  atomic_ullong grants, fails, raw_overlaps, lost, silent, unlock_enotheld, errors;
  /* Sentinel: the master every sentinel but the stale one agrees on (0 while
   * a failover is on its way), the one before it, and a generation */
  atomic_int master_port, prev_master, master_gen;
  atomic_ullong backward; /* a client went back to prev_master after it had been on master_port */
  /* the clients' rlock_stats_t, summed at their end */
  atomic_ullong st_sync_misses, st_noscript, st_timeouts, st_reconnects, st_fast_calls;
} shared_t;

typedef struct result {
  int setup_ok, finished;
  int64_t ms;
  uint64_t grants, fails, raw_overlaps, lost, silent, unlock_enotheld, errors, backward;
  uint64_t st_sync_misses, st_noscript, st_timeouts, st_reconnects, st_fast_calls;
  uint64_t hist_overlaps, hist_permitted, hist_violations;
  int hist_verdict;
  int actions[A_N];
  int after[A_N]; /* violations by the last nemesis action started before them */
} result_t;

static shared_t *sh;
static const char *hist_path;
static char names[MAX_NAMES][32];
static uint64_t rng_state;

static uint64_t rnd(void) { /* xorshift64* */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717ULL;
}
static int64_t rnd_between(int64_t lo, int64_t hi) { return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1)); }

static int64_t run_t0;
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
  if (!opt.verbose) return;
  va_list ap;
  va_start(ap, fmt);
  printf("  [%7.3f s] ", (double)(th_now_ms() - run_t0) / 1000.0);
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
}

/* ------------------------------------------------------------ clients */

typedef struct client_proc {
  int index;
  rlock_client_t *cl;
  int hist_fd;
  pthread_t th[MAX_THREADS];
  _Atomic int64_t tid[MAX_THREADS];
  atomic_int lost_flag[MAX_THREADS][MAX_NAMES]; /* a lost callback for the current hold */
} client_proc_t;

static client_proc_t cp;

static int worker_id(int t) { return cp.index * opt.threads + t; }

static int name_index(const char *name, size_t len) {
  for (int i = 0; i < opt.names; i++)
    if (strlen(names[i]) == len && memcmp(names[i], name, len) == 0) return i;
  return -1;
}

/* The lock-lost callback (I/O thread): recorded as HK_LOST of the thread
 * whose owner it names. */
static void on_lost(const char *name, size_t len, uint64_t owner, rlock_lost_reason_t reason, void *arg) {
  (void)arg;
  int64_t tid = (int64_t)(owner & ~RLOCK_OWNER_THREAD);
  int n = name_index(name, len);
  for (int t = 0; t < opt.threads; t++)
    if (atomic_load(&cp.tid[t]) == tid) {
      hist_log(cp.hist_fd, HK_LOST, worker_id(t), name, len, (int)reason, 0, 0);
      if (n >= 0) atomic_store(&cp.lost_flag[t][n], 1);
      atomic_fetch_add(&sh->lost, 1);
      return;
    }
}

/* A handle on name of the kind --kind names (rw: the read or the write half). */
static int open_lock(const char *name, int reader, rlock_lock_t **out) {
  size_t len = strlen(name);
  rlock_lock_t *rd = NULL, *wr = NULL;
  int rc;
  switch (opt.kind) {
  case K_FAIR: return rlock_lock_new_fair(cp.cl, name, len, out);
  case K_FENCED: return rlock_lock_new_fenced(cp.cl, name, len, out);
  case K_SPIN: return rlock_lock_new_spin(cp.cl, name, len, NULL, out);
  case K_NONREENTRANT: return rlock_lock_new_nonreentrant(cp.cl, name, len, out);
  case K_WRITE:
  case K_RW:
    if ((rc = rlock_rwlock_new(cp.cl, name, len, &rd, &wr))) return rc;
    *out = reader ? rd : wr;
    rlock_lock_free(reader ? wr : rd);
    return 0;
  default: return rlock_lock_new(cp.cl, name, len, out);
  }
}

typedef struct thread_arg {
  int t;
  uint64_t seed;
} thread_arg_t;

static void *holder(void *arg) {
  thread_arg_t *ta = arg;
  int t = ta->t, w = worker_id(t);
  uint64_t st = ta->seed | 1;
#define TRND() (st ^= st >> 12, st ^= st << 25, st ^= st >> 27, st * 2685821657736338717ULL)
  atomic_store(&cp.tid[t], (int64_t)th_gettid());
  rlock_lock_t *locks[MAX_NAMES];
  int reader = opt.kind == K_RW && t % 2 == 0;
  /* SOAK_MUTATE=allread (a mutation of the check: the run must fail): the
   * writers of --kind rw take the read lock */
  const char *mut = getenv("SOAK_MUTATE");
  int take_read = reader || (opt.kind == K_RW && mut && !strcmp(mut, "allread"));
  for (int n = 0; n < opt.names; n++)
    if (open_lock(names[n], take_read, &locks[n])) {
      fprintf(stderr, "soak: a %s lock: %s\n", kind_names[opt.kind], rlock_last_error());
      _exit(3);
    }
  int n = 0, retry_same = 0;
  while (!atomic_load(&sh->stop)) {
    /* after a refusal, mostly the same name again: the owner's next try is
     * what a late undo of its previous one must not overtake */
    if (!retry_same || TRND() % 10 >= 7) n = (int)(TRND() % (uint64_t)opt.names);
    retry_same = 0;
    const char *nm = names[n];
    size_t nl = strlen(nm);
    uint64_t r = TRND() % 100;
    int64_t wait = r < 30 ? 0 : r < 85 ? (int64_t)(TRND() % 600) : 2000;
    int64_t lease = TRND() % 4 == 0 ? 1500 + (int64_t)(TRND() % 3000) : RLOCK_LEASE_WATCHDOG;
    atomic_store(&cp.lost_flag[t][n], 0);
    hist_log(cp.hist_fd, HK_ATTEMPT, w, nm, nl, 0, 0, 0);
    int rc = rlock_lock_trylock(locks[n], wait, lease);
    if (rc) {
      hist_log(cp.hist_fd, HK_FAIL, w, nm, nl, rc, 0, 0);
      retry_same = 1;
      atomic_fetch_add(&sh->fails, 1);
      if (rc != RLOCK_EBUSY) {
        atomic_fetch_add(&sh->errors, 1);
        th_sleep_ms(20 + (int64_t)(TRND() % 30));
      }
      continue;
    }
    int64_t vu = 0, grant_at = th_now_ms();
    if (rlock_lock_valid_until(locks[n], RLOCK_OWNER_SELF, &vu)) vu = 0;
    hist_log(cp.hist_fd, HK_GRANT, w, nm, nl, 0, vu * 1000000, 0);
    atomic_fetch_add(&sh->grants, 1);
    hist_log(cp.hist_fd, HK_ENTER, w, nm, nl, reader, 0, 0);
    uint64_t other;
    int readers_in = 0;
    if (reader) { /* (seq_cst: a reader and a writer entering at once see each other) */
      atomic_fetch_add(&sh->readers[n], 1);
      other = atomic_load(&sh->word[n]);
    } else {
      other = atomic_exchange(&sh->word[n], (uint64_t)w + 1);
      readers_in = atomic_load(&sh->readers[n]);
    }
    if (other || readers_in) {
      if (atomic_fetch_add(&sh->raw_overlaps, 1) < 5)
        printf("  owner word: worker %d (%s) entered '%s' while %s was inside\n", w, reader ? "reader" : "writer", nm,
               other ? "a writer" : "a reader");
    }
    /* mostly short, sometimes long enough for a late undo to land inside */
    th_sleep_ms(TRND() % 10 == 0 ? 30 + (int64_t)(TRND() % 120) : 1 + (int64_t)(TRND() % 15));
    uint64_t mine = (uint64_t)w + 1;
    if (reader) atomic_fetch_sub(&sh->readers[n], 1);
    else atomic_compare_exchange_strong(&sh->word[n], &mine, 0);
    int64_t vnow = 0;
    int stale = rlock_lock_valid_until(locks[n], RLOCK_OWNER_SELF, &vnow) != 0 || rlock_now_ms() >= vnow;
    hist_log(cp.hist_fd, HK_EXIT, w, nm, nl, stale, 0, 0);
    int64_t unlock_at = th_now_ms();
    rc = rlock_lock_unlock(locks[n]);
    hist_log(cp.hist_fd, HK_RELEASE, w, nm, nl, rc, 0, 0);
    if (rc == RLOCK_ENOTHELD) {
      atomic_fetch_add(&sh->unlock_enotheld, 1);
      /* told by now, or within a moment (the callback runs on the I/O thread) */
      int64_t until = th_now_ms() + 1000;
      while (!atomic_load(&cp.lost_flag[t][n]) && th_now_ms() < until) th_sleep_ms(10);
      if (!atomic_load(&cp.lost_flag[t][n])) {
        if (atomic_fetch_add(&sh->silent, 1) < 5) {
          char node[300] = "?";
          rlock_lock_node(locks[n], node, sizeof node);
          printf(
              "  [%7.3f s] silent loss: worker %d's unlock of '%s' answered ENOTHELD and no lost callback came"
              " (lease %s%lld ms, wait %lld ms; unlock sent %lld ms after the grant and %lld ms before the"
              " valid-until, answered in %lld ms; node now %s)\n",
              (double)(unlock_at - run_t0) / 1000.0, w, nm, lease == RLOCK_LEASE_WATCHDOG ? "watchdog " : "",
              (long long)(lease == RLOCK_LEASE_WATCHDOG ? WATCHDOG_MS : lease), (long long)wait,
              (long long)(unlock_at - grant_at), (long long)(vu - (int64_t)rlock_now_ms() + (th_now_ms() - unlock_at)),
              (long long)(th_now_ms() - unlock_at), node);
        }
      }
    }
    if (TRND() % 4 == 0) th_sleep_ms((int64_t)(TRND() % 5));
  }
  for (int k = 0; k < opt.names; k++) rlock_lock_free(locks[k]);
  return NULL;
#undef TRND
}

/* Sentinel: watches the master this client uses (rlock_lock_node) against
 * the one the nemesis saw every sentinel but the stale one agree on. Once the
 * client was on the new master, a move back to the old one is a backward
 * move (issue 20, hole 7: the choice of master never moves backwards). */
static void *master_watch(void *arg) {
  (void)arg;
  rlock_lock_t *lk;
  if (rlock_lock_new(cp.cl, names[0], strlen(names[0]), &lk)) return NULL;
  int gen = -1, on_current = 0;
  while (!atomic_load(&sh->stop)) {
    char node[300];
    int port = 0;
    if (rlock_lock_node(lk, node, sizeof node) == 0 && strrchr(node, ':')) port = atoi(strrchr(node, ':') + 1);
    int g = atomic_load(&sh->master_gen), m = atomic_load(&sh->master_port), prev = atomic_load(&sh->prev_master);
    if (g != gen) gen = g, on_current = 0;
    if (m && port == m) {
      on_current = 1;
    } else if (m && on_current && port && port == prev) {
      on_current = 0;
      if (atomic_fetch_add(&sh->backward, 1) < 5)
        printf("  backward move: client %d went back to the old master %d after it had followed the failover to %d\n",
               cp.index, port, m);
    }
    th_sleep_ms(20);
  }
  rlock_lock_free(lk);
  return NULL;
}

/* A client process: one rlock client, opt.threads holder threads. */
static void client_main(int index, const char *url, int fast, uint64_t seed, int watch) {
  cp.index = index;
  cp.hist_fd = hist_open(hist_path);
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = url;
  o.client_name = "soak";
  o.fast_path = fast;
  o.command_timeout_ms = COMMAND_TIMEOUT_MS;
  o.watchdog_timeout_ms = WATCHDOG_MS;
  o.connect_timeout_ms = 3000;
  o.reconnect_max_ms = 1000;
  int rc = -1;
  for (int attempt = 0; attempt < 20 && rc; attempt++) {
    rc = rlock_client_new(&cp.cl, &o);
    if (rc) th_sleep_ms(500);
  }
  if (rc) {
    fprintf(stderr, "soak: client %d: rlock_client_new: %s\n", index, rlock_last_error());
    _exit(3);
  }
  rlock_client_on_lost(cp.cl, on_lost, NULL);
  thread_arg_t ta[MAX_THREADS];
  for (int t = 0; t < opt.threads; t++) {
    ta[t] = (thread_arg_t){t, seed * 1000003u + (uint64_t)(index * 31 + t) * 7919u};
    pthread_create(&cp.th[t], NULL, holder, &ta[t]);
  }
  pthread_t watcher;
  if (watch) pthread_create(&watcher, NULL, master_watch, NULL);
  atomic_fetch_add(&sh->ready, 1);
  for (int t = 0; t < opt.threads; t++) pthread_join(cp.th[t], NULL);
  if (watch) pthread_join(watcher, NULL);
  rlock_stats_t st;
  rlock_client_stats(cp.cl, &st);
  atomic_fetch_add(&sh->st_sync_misses, st.acquire_sync_misses);
  atomic_fetch_add(&sh->st_noscript, st.noscript_fallbacks);
  atomic_fetch_add(&sh->st_timeouts, st.timeouts);
  atomic_fetch_add(&sh->st_reconnects, st.reconnects);
  atomic_fetch_add(&sh->st_fast_calls, st.fast_calls);
  rlock_client_free(cp.cl);
  close(cp.hist_fd);
  _exit(0);
}

/* ------------------------------------------------------------ raw commands */

/* One command on a fresh connection (never fails the run: NULL on error). */
static redisReply *raw(int port, int timeout_ms, const char *fmt, ...) {
  struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
  if (!c || c->err) {
    if (c) redisFree(c);
    return NULL;
  }
  redisSetTimeout(c, tv);
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = redisvCommand(c, fmt, ap);
  va_end(ap);
  redisFree(c);
  return r;
}

static void raw_do(int port, int timeout_ms, const char *fmt, ...) {
  struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
  if (!c || c->err) {
    if (c) redisFree(c);
    return;
  }
  redisSetTimeout(c, tv);
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = redisvCommand(c, fmt, ap);
  va_end(ap);
  if (r) freeReplyObject(r);
  redisFree(c);
}

/* CLIENT KILL of every connection of the soak clients (named "soak"). */
static int kill_soak_clients(int port) {
  redisReply *r = raw(port, 2000, "CLIENT LIST");
  int n = 0;
  if (!r) return 0;
  if (r->type == REDIS_REPLY_STRING) {
    char *save = NULL;
    for (char *line = strtok_r(r->str, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
      if (!strstr(line, " name=soak ")) continue;
      unsigned long long id;
      if (sscanf(line, "id=%llu", &id) != 1) continue;
      char ids[32];
      snprintf(ids, sizeof ids, "%llu", id);
      raw_do(port, 2000, "CLIENT KILL ID %s", ids);
      n++;
    }
  }
  freeReplyObject(r);
  return n;
}

/* ROLE of the node on port: 'm' master, 's' replica, 0 unknown. */
static char role_of(int port) {
  redisReply *r = raw(port, 1000, "ROLE");
  char c = 0;
  if (r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 && r->element[0]->type == REDIS_REPLY_STRING)
    c = r->element[0]->str[0] == 'm' ? 'm' : 's';
  if (r) freeReplyObject(r);
  return c;
}

/* The stalls every deployment gets, on the node at port: a = A_KILL,
 * A_SLEEP (DEBUG SLEEP), A_SIGSTOP (SIGSTOP of pid: Sentinel and Cluster
 * nodes have no DEBUG), A_PAUSE, A_FLUSH, or SCRIPT FLUSH followed at once by
 * a kill, a sleep (DEBUG SLEEP or SIGSTOP: sigstop says which) or a pause. */
static void stall_faults(int a, int port, pid_t pid, int sigstop, int64_t max_sleep_ms) {
  int64_t ms = rnd_between(150, max_sleep_ms);
  char buf[32];
  if (a == A_FLUSH || a == A_FLUSH_KILL || a == A_FLUSH_SLEEP || a == A_FLUSH_PAUSE) {
    raw_do(port, 2000, "SCRIPT FLUSH");
    say("SCRIPT FLUSH on %d", port);
    if (a != A_FLUSH) th_sleep_ms(rnd_between(0, 30));
  }
  if (a == A_KILL || a == A_FLUSH_KILL) {
    int k = kill_soak_clients(port);
    say("CLIENT KILL of %d soak connections on %d", k, port);
    if (a == A_FLUSH_KILL) { /* and again once the clients are back: re-sent requests meet NOSCRIPT */
      th_sleep_ms(rnd_between(50, 300));
      raw_do(port, 2000, "SCRIPT FLUSH");
      say("SCRIPT FLUSH on %d", port);
    }
  } else if ((a == A_SLEEP || a == A_FLUSH_SLEEP) && !sigstop) {
    snprintf(buf, sizeof buf, "%.3f", (double)ms / 1000.0);
    say("DEBUG SLEEP %s on %d", buf, port);
    raw_do(port, (int)ms + 3000, "DEBUG SLEEP %s", buf);
  } else if (a == A_SIGSTOP || a == A_FLUSH_SLEEP) {
    say("SIGSTOP %lld ms of %d", (long long)ms, port);
    kill(pid, SIGSTOP);
    th_sleep_ms(ms);
    kill(pid, SIGCONT);
  } else if (a == A_PAUSE || a == A_FLUSH_PAUSE) {
    snprintf(buf, sizeof buf, "%lld", (long long)ms);
    say("CLIENT PAUSE %s WRITE on %d", buf, port);
    raw_do(port, 2000, "CLIENT PAUSE %s WRITE", buf);
    th_sleep_ms(ms);
  }
}

/* A stall allowed by --faults (sigstop: the node has no DEBUG SLEEP), or -1. */
static int pick_stall(int sigstop) {
  int c[8], n = 0;
  const int all[] = {A_KILL,       sigstop ? A_SIGSTOP : A_SLEEP, A_PAUSE, A_FLUSH, A_FLUSH_KILL, A_FLUSH_SLEEP,
                     A_FLUSH_PAUSE};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (allowed[all[i]]) c[n++] = all[i];
  return n ? c[rnd() % (uint64_t)n] : -1;
}

/* Picks a deployment action (each with its share in percent) or a stall. */
static int pick(const int *special, const int *share, int n, int sigstop) {
  int r = (int)(rnd() % 100), acc = 0;
  for (int i = 0; i < n; i++) {
    acc += share[i];
    if (r < acc && allowed[special[i]]) return special[i];
  }
  int a = pick_stall(sigstop);
  if (a >= 0) return a;
  int c[8], m = 0;
  for (int i = 0; i < n; i++)
    if (allowed[special[i]]) c[m++] = special[i];
  return m ? c[rnd() % (uint64_t)m] : -1;
}

/* ------------------------------------------------------------ deployments */

typedef struct run_ctx {
  int dep;
  th_server_t *single;
  th_server_t *rep_a, *rep_b; /* replicas deployment: rep_a starts as master */
  th_server_t *master;        /* replicas: the current master */
  th_sentinels_t *sent;
  th_cluster_t *cluster;
  char url[MAX_CLIENTS][1200];
  result_t *res;
} run_ctx_t;

static const char *debug_args[] = {"--enable-debug-command", "yes", NULL};

static void start_deployment(run_ctx_t *x) {
  switch (x->dep) {
  case D_SINGLE: {
    th_server_opts_t o = {.extra_args = debug_args, .appendonly = 1};
    x->single = th_server_start(&o);
    for (int c = 0; c < opt.clients; c++) snprintf(x->url[c], sizeof x->url[c], "%s", x->single->url);
    break;
  }
  case D_REPLICAS: {
    /* two nodes that swap roles: a promotion (REPLICAOF NO ONE) splits them,
     * the heal makes the old master a replica of the new one. Client 0 .. n-2
     * use node a, the last client node b (a replica at the start: its
     * commands are refused until b is promoted). */
    static const char *b_args[6];
    static char port[16];
    th_server_opts_t oa = {.extra_args = debug_args};
    x->rep_a = th_server_start(&oa);
    snprintf(port, sizeof port, "%d", x->rep_a->port);
    b_args[0] = "--enable-debug-command", b_args[1] = "yes", b_args[2] = "--replicaof", b_args[3] = "127.0.0.1",
    b_args[4] = port, b_args[5] = NULL;
    th_server_opts_t ob = {.extra_args = b_args};
    x->rep_b = th_server_start(&ob);
    th_replicas_wait(x->rep_a, 1, 30000);
    x->master = x->rep_a;
    for (int c = 0; c < opt.clients; c++)
      snprintf(x->url[c], sizeof x->url[c], "%s", c == opt.clients - 1 ? x->rep_b->url : x->rep_a->url);
    break;
  }
  case D_SENTINEL: {
    /* 3 sentinels; sentinel 0 is the one the nemesis makes stale. Client 0
     * asks sentinel 0 first, the others ask it last. */
    x->sent = th_sentinels_start("soak", 2, 3);
    for (int c = 0; c < opt.clients; c++) {
      int ord[3] = {0, 1, 2};
      if (c > 0) ord[0] = 1, ord[1] = 2, ord[2] = 0;
      snprintf(x->url[c], sizeof x->url[c], "redis+sentinel://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/soak",
               x->sent->sent[ord[0]].port, x->sent->sent[ord[1]].port, x->sent->sent[ord[2]].port);
    }
    break;
  }
  case D_CLUSTER:
    x->cluster = th_cluster_start(3, 1, 2000);
    for (int c = 0; c < opt.clients; c++) snprintf(x->url[c], sizeof x->url[c], "%s", x->cluster->url);
    break;
  }
}

static void stop_deployment(run_ctx_t *x) {
  if (x->single) th_server_stop(x->single);
  if (x->rep_a) th_server_stop(x->rep_a);
  if (x->rep_b) th_server_stop(x->rep_b);
  if (x->sent) th_sentinels_stop(x->sent);
  if (x->cluster) th_cluster_stop(x->cluster);
}

/* ---- replicas: promotion of the replica (split brain), then the heal */

static void replicas_promote(run_ctx_t *x) {
  th_server_t *old = x->master, *nu = x->master == x->rep_a ? x->rep_b : x->rep_a;
  say("REPLICAOF NO ONE on the replica %d (master %d keeps running: split)", nu->port, old->port);
  raw_do(nu->port, 2000, "REPLICAOF NO ONE");
  th_sleep_ms(rnd_between(1000, 2500));
  char port[16];
  snprintf(port, sizeof port, "%d", nu->port);
  say("heal: REPLICAOF 127.0.0.1 %d on the old master %d", nu->port, old->port);
  raw_do(old->port, 2000, "REPLICAOF 127.0.0.1 %s", port);
  x->master = nu;
  int64_t until = th_now_ms() + 20000;
  while (th_now_ms() < until) {
    redisReply *r = raw(nu->port, 1000, "INFO replication");
    int ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "state=online") != NULL;
    if (r) freeReplyObject(r);
    if (ok) break;
    th_sleep_ms(50);
  }
}

/* ---- sentinel */

/* The master sentinel i names (port), 0 unknown. */
static int sentinel_master(run_ctx_t *x, int i) {
  redisReply *r = raw(x->sent->sent[i].port, 1000, "SENTINEL get-master-addr-by-name soak");
  int p = 0;
  if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2) p = atoi(r->element[1]->str);
  if (r) freeReplyObject(r);
  return p;
}

static th_server_t *sentinel_node(run_ctx_t *x, int port) {
  for (int i = 0; i < x->sent->nnodes; i++)
    if (x->sent->nodes[i]->port == port) return x->sent->nodes[i];
  return NULL;
}

/* Sentinel 0 made to name old_port again, as a sentinel on the minority side
 * of a partition would: it forgets the master and monitors the old one
 * (config epoch 0); the others' hello messages correct it within ~2 s, so
 * it is set again every 700 ms for the window. */
static void make_stale(run_ctx_t *x, int old_port, int64_t window_ms) {
  int sp = x->sent->sent[0].port;
  char p[16];
  snprintf(p, sizeof p, "%d", old_port);
  int64_t until = th_now_ms() + window_ms;
  while (th_now_ms() < until) {
    raw_do(sp, 1000, "SENTINEL REMOVE soak");
    raw_do(sp, 1000, "SENTINEL MONITOR soak 127.0.0.1 %s 2", p);
    raw_do(sp, 1000, "SENTINEL SET soak down-after-milliseconds 1000 failover-timeout 5000");
    th_sleep_ms(700);
  }
}

static void sentinel_failover(run_ctx_t *x, int stale) {
  int old = sentinel_master(x, 1);
  if (!old) return;
  say("SENTINEL FAILOVER (master %d)%s", old, stale ? ", then sentinel 0 stale" : "");
  atomic_store(&sh->master_port, 0); /* on its way: no backward check */
  raw_do(x->sent->sent[1].port, 2000, "SENTINEL FAILOVER soak");
  int64_t until = th_now_ms() + 30000;
  int nu = 0;
  while (th_now_ms() < until) {
    int a = sentinel_master(x, 1), b = sentinel_master(x, 2);
    if (a && a != old && a == b && role_of(a) == 'm') {
      nu = a;
      break;
    }
    th_sleep_ms(50);
  }
  if (!nu) {
    say("the failover did not finish within 30 s");
    atomic_store(&sh->master_port, sentinel_master(x, 1));
    atomic_fetch_add(&sh->master_gen, 1);
    return;
  }
  say("new master %d", nu);
  atomic_store(&sh->prev_master, old);
  atomic_store(&sh->master_port, nu);
  atomic_fetch_add(&sh->master_gen, 1);
  if (stale) {
    make_stale(x, old, rnd_between(4000, 9000));
    say("sentinel 0 left alone (old master %d is a %s now)", old, role_of(old) == 'm' ? "master" : "replica");
  }
  /* settle: every sentinel names the new master, the old one is its replica */
  until = th_now_ms() + 30000;
  while (th_now_ms() < until) {
    if (sentinel_master(x, 0) == nu && role_of(old) == 's') break;
    th_sleep_ms(100);
  }
  if (sentinel_master(x, 0) != nu) { /* heal sentinel 0 by hand */
    char p[16];
    snprintf(p, sizeof p, "%d", nu);
    raw_do(x->sent->sent[0].port, 1000, "SENTINEL REMOVE soak");
    raw_do(x->sent->sent[0].port, 1000, "SENTINEL MONITOR soak 127.0.0.1 %s 2", p);
    raw_do(x->sent->sent[0].port, 1000, "SENTINEL SET soak down-after-milliseconds 1000 failover-timeout 5000");
  }
  th_server_t *m = sentinel_node(x, nu);
  if (m) th_sentinels_wait_replicas(m, 2, 20000);
}

/* ---- cluster */

static void cluster_failover(run_ctx_t *x, int slot) {
  th_server_t *m = th_cluster_owner(x->cluster, slot);
  th_server_t *r = m ? th_cluster_replica_of(x->cluster, m) : NULL;
  if (!r) return;
  say("CLUSTER FAILOVER on %d (replica of %d)", r->port, m->port);
  raw_do(r->port, 2000, "CLUSTER FAILOVER");
  int64_t until = th_now_ms() + 20000;
  while (th_now_ms() < until && th_cluster_owner(x->cluster, slot) != r) th_sleep_ms(50);
  th_cluster_wait_ok(x->cluster, 20000);
}

static void cluster_migrate(run_ctx_t *x, int slot) {
  th_server_t *m = th_cluster_owner(x->cluster, slot), *to = NULL;
  if (!m) return;
  for (int tries = 0; tries < 20 && !to; tries++) {
    th_server_t *c = x->cluster->node[rnd() % (uint64_t)x->cluster->n];
    if (c != m && role_of(c->port) == 'm') to = c;
  }
  if (!to) return;
  say("slot %d moves %d -> %d", slot, m->port, to->port);
  th_cluster_move_slot(x->cluster, slot, to, NULL, NULL);
  th_cluster_wait_ok(x->cluster, 20000);
}

/* Cluster: kill -9 the master of slot, wait until its replica took the
 * slot, start the killed node again (it comes back as a replica). */
static void cluster_master_kill(run_ctx_t *x, int slot) {
  th_server_t *m = th_cluster_owner(x->cluster, slot);
  th_server_t *r = m ? th_cluster_replica_of(x->cluster, m) : NULL;
  if (!r) return;
  say("kill -9 of master %d (replica %d)", m->port, r->port);
  th_server_kill(m);
  int64_t until = th_now_ms() + 30000;
  while (th_now_ms() < until && role_of(r->port) != 'm') th_sleep_ms(50);
  say("replica %d is %s; %d starts again", r->port, role_of(r->port) == 'm' ? "master" : "not master yet", m->port);
  th_server_restart(m);
  th_cluster_wait_ok(x->cluster, 30000);
}

/* One nemesis step on the deployment: the action it took, or -1. */
static int nemesis_step(run_ctx_t *x) {
  int a = -1;
  switch (x->dep) {
  case D_SINGLE: {
    static const int sp[] = {A_RESTART}, sh_[] = {8};
    a = pick(sp, sh_, 1, 0);
    if (a == A_RESTART) {
      say("restart (kill -9, AOF appendfsync always)");
      th_server_restart(x->single);
    } else if (a >= 0) {
      stall_faults(a, x->single->port, x->single->pid, 0, 2000);
    }
    break;
  }
  case D_REPLICAS: {
    static const int sp[] = {A_PROMOTE}, sh_[] = {20};
    a = pick(sp, sh_, 1, 0);
    if (a == A_PROMOTE) replicas_promote(x);
    else if (a >= 0) stall_faults(a, x->master->port, x->master->pid, 0, 1500);
    break;
  }
  case D_SENTINEL: {
    static const int sp[] = {A_FAILOVER, A_STALE}, sh_[] = {12, 25};
    a = pick(sp, sh_, 2, 1);
    if (a == A_FAILOVER || a == A_STALE) {
      sentinel_failover(x, a == A_STALE);
    } else if (a >= 0) {
      int mp = sentinel_master(x, 1);
      th_server_t *m = mp ? sentinel_node(x, mp) : NULL;
      if (!m) return -1;
      stall_faults(a, m->port, m->pid, 1, 900); /* under down-after (1000 ms) */
    }
    break;
  }
  case D_CLUSTER: {
    static const int sp[] = {A_CFAILOVER, A_MIGRATE, A_MKILL}, sh_[] = {12, 12, 5};
    int slot = th_cluster_keyslot(x->cluster, names[rnd() % (uint64_t)opt.names]);
    a = pick(sp, sh_, 3, 1);
    if (a == A_CFAILOVER) cluster_failover(x, slot);
    else if (a == A_MIGRATE) cluster_migrate(x, slot);
    else if (a == A_MKILL) cluster_master_kill(x, slot);
    else if (a >= 0) {
      th_server_t *m = th_cluster_owner(x->cluster, slot);
      if (!m) return -1;
      stall_faults(a, m->port, m->pid, 1, 1200); /* under the node timeout (2000 ms) */
    }
    break;
  }
  }
  if (a >= 0) x->res->actions[a]++;
  return a;
}

/* ------------------------------------------------------------ one run */

/* The whole history file (for the details of an overlap); NULL on error. */
static hist_rec_t *read_history(size_t *n) {
  FILE *f = fopen(hist_path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  hist_rec_t *r = len > 0 ? malloc((size_t)len) : NULL;
  *n = r ? fread(r, sizeof *r, (size_t)len / sizeof *r, f) : 0;
  fclose(f);
  return r;
}

/* How the hold of worker on name that was left at exit_ns ended: the status
 * of its release (RLOCK_ENOTHELD: the holder learnt of the loss only there),
 * and whether a lost callback came for it before that (*told). */
static int release_of(const hist_rec_t *r, size_t n, int worker, const char *name, size_t len, int64_t grant_ns,
                      int64_t exit_ns, int *told) {
  int rc = 1;
  int64_t best = INT64_MAX;
  *told = 0;
  for (size_t i = 0; i < n; i++) {
    if (r[i].worker != worker || r[i].name_len != len || memcmp(r[i].name, name, len)) continue;
    if (r[i].kind == HK_RELEASE && r[i].t_ns >= exit_ns && r[i].t_ns < best) best = r[i].t_ns, rc = r[i].status;
  }
  for (size_t i = 0; i < n; i++)
    if (r[i].worker == worker && r[i].kind == HK_LOST && r[i].name_len == len && !memcmp(r[i].name, name, len) &&
        r[i].t_ns >= grant_ns && r[i].t_ns <= best)
      *told = 1;
  return rc;
}

static void run_once(int dep, int run, int fast, uint64_t seed, result_t *res) {
  memset(res, 0, sizeof *res);
  rng_state = seed ? seed : 1;
  run_t0 = th_now_ms();
  run_ctx_t x = {.dep = dep, .res = res};
  for (int i = 0; i < opt.names; i++) snprintf(names[i], sizeof names[i], "soak-%d-%c", run, 'a' + i);
  start_deployment(&x);
  res->setup_ok = 1;
  say("%s up (%lld ms)", dep_names[dep], (long long)(th_now_ms() - run_t0));

  const char *dir = th_tempdir();
  static char hp[300];
  snprintf(hp, sizeof hp, "%s/history.bin", dir);
  hist_path = hp;
  if (hist_create(hist_path)) th_fail(__FILE__, __LINE__, "cannot create %s", hist_path);
  int hfd = hist_open(hist_path);
  sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) th_fail(__FILE__, __LINE__, "mmap: %s", strerror(errno));
  memset(sh, 0, sizeof *sh);
  if (dep == D_SENTINEL) atomic_store(&sh->master_port, x.sent->nodes[0]->port);

  pid_t pids[MAX_CLIENTS];
  for (int c = 0; c < opt.clients; c++) {
    uint64_t cs = rnd();
    pids[c] = th_fork();
    if (pids[c] == 0) client_main(c, x.url[c], fast, cs, dep == D_SENTINEL);
  }
  int64_t until = th_now_ms() + 30000;
  while (atomic_load(&sh->ready) < opt.clients && th_now_ms() < until) th_sleep_ms(20);
  if (atomic_load(&sh->ready) < opt.clients) th_fail(__FILE__, __LINE__, "the clients did not start within 30 s");

  int64_t t0 = th_now_ms(), end = t0 + opt.run_seconds * 1000;
  /* when each nemesis action started: overlaps are attributed to the last one before them */
  static int64_t at_ns[4096];
  static int at_a[4096];
  int nat = 0;
  while (th_now_ms() < end) {
    th_sleep_ms(rnd_between(100, 800));
    if (th_now_ms() >= end) break;
    int64_t t = hist_now_ns();
    int a = nemesis_step(&x);
    if (a >= 0 && nat < 4096) at_ns[nat] = t, at_a[nat++] = a;
  }
  atomic_store(&sh->stop, 1);
  /* the clients finish their current try (bounded); a stuck one is killed */
  int64_t reap_until = th_now_ms() + 60000;
  int alive = opt.clients;
  int done[MAX_CLIENTS] = {0};
  res->finished = 1;
  while (alive && th_now_ms() < reap_until) {
    for (int c = 0; c < opt.clients; c++) {
      int st;
      if (!done[c] && waitpid(pids[c], &st, WNOHANG) == pids[c]) {
        done[c] = 1, alive--;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) res->finished = 0;
      }
    }
    th_sleep_ms(20);
  }
  for (int c = 0; c < opt.clients; c++)
    if (!done[c]) {
      fprintf(stderr, "soak: client %d did not finish within 60 s of the stop: killed\n", c);
      kill(pids[c], SIGKILL);
      waitpid(pids[c], NULL, 0);
      for (int t = 0; t < opt.threads; t++) hist_log(hfd, HK_DIED, c * opt.threads + t, "", 0, 0, 0, 0);
      res->finished = 0;
    }
  res->ms = th_now_ms() - t0;
  close(hfd);

  hist_check_opts_t ho = {.mode = opt.kind == K_RW ? HIST_RW : HIST_MUTEX_LEASE};
  hist_report_t rep;
  res->hist_verdict = hist_check_file(hist_path, &ho, &rep);
  res->hist_overlaps = rep.overlaps, res->hist_permitted = rep.permitted, res->hist_violations = rep.violations;
  if (rep.verdict != HIST_OK || opt.verbose) {
    hist_report_t shown = rep;
    if (shown.nlist > 8) shown.nlist = 8;
    hist_report_print(stdout, &shown);
    if (rep.nlist > 8) printf("  ... %zu more overlaps\n", rep.nlist - 8);
  }
  size_t nrec = 0;
  hist_rec_t *recs = rep.nlist ? read_history(&nrec) : NULL;
  for (size_t i = 0; i < rep.nlist; i++) {
    const hist_overlap_t *o = &rep.list[i];
    if (o->permitted) continue;
    int k = -1;
    for (int j = 0; j < nat && at_ns[j] <= o->b.grant_ns; j++) k = j;
    if (k >= 0) res->after[at_a[k]]++;
    if (i >= 8) continue;
    int told = 0,
        rc = release_of(recs, nrec, o->a.worker, o->a.name, o->a.name_len, o->a.grant_ns, o->a.exit_ns, &told);
    printf("  overlap %zu: A (worker %d) %s%s; B (worker %d) granted %.3f s after %s began (at %.3f s)\n", i + 1,
           o->a.worker,
           rc == 1 ? "still inside at the end"
           : rc    ? "then its unlock answered "
                   : "then unlocked (OK)",
           rc == 1 || rc == 0 ? "" : rlock_err_name(rc), o->b.worker,
           k >= 0 ? (double)(o->b.grant_ns - at_ns[k]) / 1e9 : 0.0, k >= 0 ? action_names[at_a[k]] : "(none)",
           k >= 0 ? (double)(at_ns[k] / 1000000 - run_t0) / 1000.0 : 0.0);
    if (!told) printf("             A was never told (no lock-lost callback for that hold)\n");
  }
  free(recs);
  hist_report_free(&rep);
  res->grants = sh->grants, res->fails = sh->fails, res->raw_overlaps = sh->raw_overlaps, res->lost = sh->lost;
  res->silent = sh->silent, res->unlock_enotheld = sh->unlock_enotheld, res->errors = sh->errors;
  res->backward = sh->backward;
  res->st_sync_misses = sh->st_sync_misses, res->st_noscript = sh->st_noscript, res->st_timeouts = sh->st_timeouts;
  res->st_reconnects = sh->st_reconnects, res->st_fast_calls = sh->st_fast_calls;
  stop_deployment(&x);
}

/* ------------------------------------------------------------ the top */

static int dep_uses_watch(int d) { return d == D_SENTINEL; }

/* Per deployment and fast-path setting. */
typedef struct total {
  int runs, failed_runs;
  int64_t ms;
  uint64_t grants, violations, permitted, raw, lost, silent, enotheld, backward;
  int actions[A_N], after[A_N];
} total_t;

static volatile sig_atomic_t interrupted;
static void on_int(int sig) {
  (void)sig;
  interrupted = 1;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: soak [--deployment single|replicas|sentinel|cluster|all] [--seconds N | --minutes N]\n"
          "            [--run-seconds N] [--seed N] [--fast on|off|mix] [--clients N] [--threads N]\n"
          "            [--names N] [--faults F1,F2,...] [--kind K] [--verbose]\n"
          "  --kind               the lock the holders take: reentrant (default), fair, fenced,\n"
          "                       spin, nonreentrant, write, rw (even threads read, odd ones write)\n"
          "  --seconds/--minutes  time per deployment (default 180 s); runs of --run-seconds each\n"
          "                       (default 20) until it is used up (at least one run)\n"
          "  --fast               the client fast path: on, off, or mix (default: alternate per run)\n"
          "  --faults             only these nemesis actions (default all that apply): client-kill,\n"
          "                       debug-sleep, sigstop, pause-write, script-flush, flush+kill,\n"
          "                       flush+sleep, flush+pause, restart (single), promote (replicas),\n"
          "                       failover, stale-sentinel (sentinel), cluster-failover, slot-migrate,\n"
          "                       master-kill (cluster)\n"
          "  --seed               fixes the nemesis' and the holders' choices (not the timing)\n"
          "exit status: 0 clean, 1 an overlap, a silent loss or a backward move, 2 usage,\n"
          "3 a run failed (harness)\n");
}

int main(int argc, char **argv) {
  static const struct option lo[] = {{"deployment", required_argument, NULL, 'd'},
                                     {"seconds", required_argument, NULL, 's'},
                                     {"minutes", required_argument, NULL, 'm'},
                                     {"run-seconds", required_argument, NULL, 'r'},
                                     {"seed", required_argument, NULL, 'S'},
                                     {"fast", required_argument, NULL, 'f'},
                                     {"clients", required_argument, NULL, 'c'},
                                     {"threads", required_argument, NULL, 't'},
                                     {"names", required_argument, NULL, 'n'},
                                     {"verbose", no_argument, NULL, 'v'},
                                     {"faults", required_argument, NULL, 'F'},
                                     {"kind", required_argument, NULL, 'k'},
                                     {"help", no_argument, NULL, 'h'},
                                     {NULL, 0, NULL, 0}};
  int ch, any_dep = 0, any_fault = 0;
  opt.seed = (uint64_t)time(NULL);
  while ((ch = getopt_long(argc, argv, "d:s:m:r:S:f:c:t:n:k:vh", lo, NULL)) != -1) {
    switch (ch) {
    case 'd': {
      char *list = strdup(optarg), *save = NULL;
      for (char *p = strtok_r(list, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        int found = 0;
        for (int d = 0; d < D_N; d++)
          if (!strcmp(p, dep_names[d]) || !strcmp(p, "all")) opt.deps[d] = 1, found = 1;
        if (!found) {
          fprintf(stderr, "soak: unknown deployment '%s'\n", p);
          usage(stderr);
          return 2;
        }
      }
      free(list);
      any_dep = 1;
      break;
    }
    case 's': opt.seconds = atoll(optarg); break;
    case 'm': opt.seconds = (int64_t)(atof(optarg) * 60); break;
    case 'r': opt.run_seconds = atoll(optarg); break;
    case 'S': opt.seed = strtoull(optarg, NULL, 0); break;
    case 'f':
      if (!strcmp(optarg, "on")) opt.fast = 1;
      else if (!strcmp(optarg, "off")) opt.fast = 0;
      else if (!strcmp(optarg, "mix")) opt.fast = -1;
      else {
        usage(stderr);
        return 2;
      }
      break;
    case 'c': opt.clients = atoi(optarg); break;
    case 't': opt.threads = atoi(optarg); break;
    case 'n': opt.names = atoi(optarg); break;
    case 'v': opt.verbose = 1; break;
    case 'F': {
      char *list = strdup(optarg), *save = NULL;
      for (char *p = strtok_r(list, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        int found = 0;
        for (int a = 0; a < A_N; a++)
          if (!strcmp(p, action_names[a])) allowed[a] = 1, found = 1;
        if (!found) {
          fprintf(stderr, "soak: unknown fault '%s'\n", p);
          usage(stderr);
          return 2;
        }
      }
      free(list);
      any_fault = 1;
      break;
    }
    case 'k': {
      int found = -1;
      for (int k = 0; k < K_N; k++)
        if (!strcmp(optarg, kind_names[k])) found = k;
      if (found < 0) {
        fprintf(stderr, "soak: unknown kind '%s'\n", optarg);
        usage(stderr);
        return 2;
      }
      opt.kind = found;
      break;
    }
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
  }
  if (optind != argc || opt.seconds < 1 || opt.run_seconds < 5 || opt.clients < 2 || opt.clients > MAX_CLIENTS ||
      opt.threads < 1 || opt.threads > MAX_THREADS || opt.names < 1 || opt.names > MAX_NAMES) {
    usage(stderr);
    return 2;
  }
  if (!any_dep)
    for (int d = 0; d < D_N; d++) opt.deps[d] = 1;
  if (!any_fault)
    for (int a = 0; a < A_N; a++) allowed[a] = 1;
  if (opt.run_seconds > opt.seconds) opt.run_seconds = opt.seconds;
  setvbuf(stdout, NULL, _IOLBF, 0);
  signal(SIGINT, on_int);
  signal(SIGTERM, on_int);
  signal(SIGPIPE, SIG_IGN);
  printf("soak: %s lock, seed %" PRIu64
         ", %lld s per deployment in runs of %lld s, %d clients x %d threads x %d names, "
         "fast path %s\n",
         kind_names[opt.kind], opt.seed, (long long)opt.seconds, (long long)opt.run_seconds, opt.clients, opt.threads,
         opt.names,
         opt.fast < 0 ? "on/off alternating"
         : opt.fast   ? "on"
                      : "off");

  total_t tot[D_N][2];
  memset(tot, 0, sizeof tot);
  int status = 0;
  uint64_t seed = opt.seed;
  for (int d = 0; d < D_N && !interrupted; d++) {
    if (!opt.deps[d]) continue;
    int64_t dep_end = th_now_ms() + opt.seconds * 1000;
    for (int run = 0; !interrupted && (run == 0 || th_now_ms() + opt.run_seconds * 500 < dep_end); run++) {
      int fast = opt.fast >= 0 ? opt.fast : run % 2 == 0;
      uint64_t rs = seed++ * 0x9E3779B97F4A7C15ULL + (uint64_t)d;
      int pfd[2];
      if (pipe(pfd)) return 3;
      fflush(stdout);
      pid_t pid = fork();
      if (pid == 0) {
        close(pfd[0]);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        th_init(argc, argv, (int)opt.run_seconds + 300); /* cleanup on exit and signals; a hard bound */
        result_t res;
        printf("%s run %d (fast path %s, seed %" PRIu64 "):\n", dep_names[d], run + 1, fast ? "on" : "off", rs);
        run_once(d, run, fast, rs, &res);
        if (write(pfd[1], &res, sizeof res) != (ssize_t)sizeof res) _exit(3);
        close(pfd[1]);
        exit(0); /* atexit: servers killed, temp dirs removed */
      }
      close(pfd[1]);
      result_t res;
      memset(&res, 0, sizeof res);
      /* Ctrl-C reaches the run too (same process group); a signal sent to
       * this process alone is passed on after 2 s (not at once: a second
       * signal would cut the run's own clean-up short). */
      ssize_t got = -1;
      int64_t int_at = 0;
      for (;;) {
        struct pollfd pf = {pfd[0], POLLIN, 0};
        if (interrupted && !int_at) int_at = th_now_ms();
        if (int_at > 0 && th_now_ms() - int_at > 2000) {
          kill(pid, SIGTERM);
          int_at = -1;
        }
        if (poll(&pf, 1, 200) <= 0) continue;
        got = read(pfd[0], &res, sizeof res);
        if (got < 0 && errno == EINTR) continue;
        break;
      }
      close(pfd[0]);
      int st = 0;
      while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
      }
      int ok = got == (ssize_t)sizeof res && WIFEXITED(st) && WEXITSTATUS(st) == 0;
      total_t *t = &tot[d][fast];
      if (!ok) {
        if (!interrupted)
          printf("  run failed (harness: exit %d)\n", WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
        t->failed_runs++;
        if (!interrupted && status == 0) status = 3;
        continue;
      }
      t->runs++;
      t->ms += res.ms;
      t->grants += res.grants, t->violations += res.hist_violations, t->permitted += res.hist_permitted;
      t->raw += res.raw_overlaps, t->lost += res.lost, t->silent += res.silent, t->enotheld += res.unlock_enotheld;
      t->backward += res.backward;
      for (int a = 0; a < A_N; a++) t->actions[a] += res.actions[a], t->after[a] += res.after[a];
      if (!res.finished) {
        t->failed_runs++;
        if (status == 0) status = 3;
      }
      printf("  %.1f s: %" PRIu64 " acquisitions, %" PRIu64 " failed tries (%" PRIu64 " errors), overlaps %" PRIu64
             " (permitted %" PRIu64 ", owner word %" PRIu64 "), lost %" PRIu64 " told, %" PRIu64
             " silent (unlock ENOTHELD %" PRIu64 ")",
             (double)res.ms / 1000.0, res.grants, res.fails, res.errors, res.hist_violations, res.hist_permitted,
             res.raw_overlaps, res.lost, res.silent, res.unlock_enotheld);
      if (dep_uses_watch(d)) printf(", %" PRIu64 " backward moves", res.backward);
      printf("\n  clients: %" PRIu64 " fast calls, %" PRIu64 " timeouts, %" PRIu64 " reconnects, %" PRIu64
             " NOSCRIPT re-sends, %" PRIu64 " acquires undone for too few replica acks\n  nemesis:",
             res.st_fast_calls, res.st_timeouts, res.st_reconnects, res.st_noscript, res.st_sync_misses);
      for (int a = 0; a < A_N; a++)
        if (res.actions[a]) printf(" %s %d", action_names[a], res.actions[a]);
      printf("\n");
      if (res.hist_violations) {
        printf("  overlaps by the last nemesis action before the later grant:");
        for (int a = 0; a < A_N; a++)
          if (res.after[a]) printf(" %s %d", action_names[a], res.after[a]);
        printf("\n");
      }
      if (res.hist_violations || res.silent || res.backward || res.hist_verdict == HIST_BADHIST) status = 1;
    }
  }
  printf("\nsoak summary (%s lock, seed %" PRIu64 "%s):\n", kind_names[opt.kind], opt.seed,
         interrupted ? ", interrupted" : "");
  printf("%-9s %-4s %5s %8s %12s %9s %10s %10s %6s %7s %9s\n", "deploy", "fast", "runs", "minutes", "acquisitions",
         "overlaps", "permitted", "ownerword", "lost", "silent", "backward");
  for (int d = 0; d < D_N; d++)
    for (int f = 1; f >= 0; f--) {
      total_t *t = &tot[d][f];
      if (!t->runs && !t->failed_runs) continue;
      char back[24] = "-";
      if (dep_uses_watch(d)) snprintf(back, sizeof back, "%" PRIu64, t->backward);
      printf("%-9s %-4s %5d %8.1f %12" PRIu64 " %9" PRIu64 " %10" PRIu64 " %10" PRIu64 " %6" PRIu64 " %7" PRIu64
             " %9s%s\n",
             dep_names[d], f ? "on" : "off", t->runs, (double)t->ms / 60000.0, t->grants, t->violations, t->permitted,
             t->raw, t->lost, t->silent, back, t->failed_runs ? " (some runs failed)" : "");
      int any = 0;
      for (int a = 0; a < A_N; a++) any |= t->after[a];
      if (any) {
        printf("%-14s overlaps after:", "");
        for (int a = 0; a < A_N; a++)
          if (t->after[a]) printf(" %s %d", action_names[a], t->after[a]);
        printf("\n");
      }
      printf("%-14s nemesis:", "");
      for (int a = 0; a < A_N; a++)
        if (t->actions[a]) printf(" %s %d", action_names[a], t->actions[a]);
      printf("\n");
    }
  if (interrupted) return status ? status : 130;
  return status;
}
