/* rlock_bench.c -- the rlock side of the benchmark harness (issue 3), built
 * only on the public header include/rlock.h. One program, one subcommand per
 * scenario; bench/run.py drives it and does all the statistics:
 *
 *   rlock_bench s1 URL PAIRS WARMUP SAMPLES        uncontended lock+unlock pairs
 *   rlock_bench s2 URL THREADS SECONDS WARMUP_S SAMPLES   many owners, own names
 *   rlock_bench s2a URL OWNERS SECONDS WARMUP_S SAMPLES   the same, async: OWNERS
 *                                                  explicit owners on the I/O thread
 *   rlock_bench s3 URL NAME COUNTER ITERS SAMPLES  one hot-lock worker (run.py starts 8)
 *   rlock_bench s3f URL NAME COUNTER ITERS SAMPLES the same on a fair lock (rlock_lock_new_fair)
 *   rlock_bench s4 URL NAME HANDOFFS WARMUP DELAY_US CAP_S SAMPLES   two-process handoff
 *   rlock_bench s4f URL NAME HANDOFFS WARMUP DELAY_US CAP_S SAMPLES  the same on a fair lock
 *   rlock_bench s5 URL LOCKS HOLD_S WATCHDOG_MS    watchdog at scale
 *   rlock_bench s6 URL PAIRS                       plain loop for callgrind
 *   rlock_bench r1 URLS FORMAT PAIRS WARMUP SAMPLES                s1 on a RedLock
 *   rlock_bench r4 URLS FORMAT NAME HANDOFFS WARMUP DELAY_US CAP_S SAMPLES   s4 on a RedLock
 *   rlock_bench s8 URL KIND NAME COUNTER ITERS READ_PCT WORKER SAMPLES   one read-mostly worker
 *                                                  (KIND rw: the read-write lock; lock: the
 *                                                  reentrant lock for every op; run.py starts 8)
 *   rlock_bench s9 URL NAME INUSE ITERS SAMPLES    one semaphore worker (run.py starts 8 and
 *                                                  sets NAME to 3 permits first)
 *
 * r1 and r4 lock a RedLock (rlock_redlock_*) over the independent nodes of
 * URLS (comma-separated redis:// URLs) instead of one lock on one server;
 * FORMAT is simple (RLOCK_REDLOCK_SIMPLE, node-redlock's format) or
 * reentrant; the lease is fixed, REDLOCK_LEASE_MS (node-redlock has no
 * watchdog: the peer rows use the same duration).
 *
 * Each prints one JSON object on stdout; latency samples (microseconds, one
 * per line) go to SAMPLES. Any unexpected library error is printed on stderr
 * with rlock_last_error() and ends the program with status 2: the harness
 * reports it, it never hides it. Every figure uses rlock's default options
 * except where a scenario says otherwise (s5: watchdog_timeout_ms; r1, r4:
 * a fixed lease). */
#define _GNU_SOURCE
#include "rlock.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void die_rc(const char *what, int rc) {
  fprintf(stderr, "rlock_bench: %s failed: %s (%s): %s\n", what, rlock_err_name(rc), rlock_strerror(rc),
          rlock_last_error());
  fflush(stderr);
  _exit(2);
}

#define CHECK(what, expr)            \
  do {                               \
    int rc_ = (expr);                \
    if (rc_ != 0) die_rc(what, rc_); \
  } while (0)

static rlock_client_t *connect_client(const char *url, int64_t watchdog_ms) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = url;
  o.client_name = "rlock-bench";
  if (watchdog_ms > 0) o.watchdog_timeout_ms = watchdog_ms;
  rlock_client_t *c = NULL;
  CHECK("rlock_client_new", rlock_client_new(&c, &o));
  return c;
}

static rlock_lock_t *new_lock(rlock_client_t *c, const char *name) {
  rlock_lock_t *l = NULL;
  CHECK("rlock_lock_new", rlock_lock_new(c, name, strlen(name), &l));
  return l;
}

/* What scenarios 1 and 4 lock: one named lock on one client (s1, s4), or a
 * RedLock over several independent nodes (r1, r4). */
#define REDLOCK_LEASE_MS 30000 /* = REDLOCK_DURATION_MS of bench/peers/peers.js */
#define REDLOCK_MAX_NODES 16

typedef struct {
  rlock_client_t *c; /* one lock on one client ... */
  rlock_lock_t *l;
  rlock_redlock_t *rl; /* ... or a RedLock */
} target_t;

/* What to open: url (one lock on one client), or urls (comma-separated) and
 * format (simple | reentrant) for a RedLock. */
typedef struct {
  const char *url, *urls, *format;
  int fair; /* one lock: a fair lock (s4f) */
} target_spec_t;

static target_t target_redlock(const char *urls, const char *format, const char *name) {
  unsigned flags = 0;
  if (!strcmp(format, "simple")) flags = RLOCK_REDLOCK_SIMPLE;
  else if (strcmp(format, "reentrant") != 0) {
    fprintf(stderr, "rlock_bench: RedLock format '%s': simple or reentrant\n", format);
    _exit(64);
  }
  static char copy[4096];
  snprintf(copy, sizeof copy, "%s", urls);
  const char *list[REDLOCK_MAX_NODES];
  size_t n = 0;
  for (char *save = NULL, *u = strtok_r(copy, ",", &save); u && n < REDLOCK_MAX_NODES; u = strtok_r(NULL, ",", &save))
    list[n++] = u;
  rlock_options_t o;
  rlock_options_init(&o);
  o.client_name = "rlock-bench";
  target_t t = {0};
  CHECK("rlock_redlock_new", rlock_redlock_new(&t.rl, &o, list, n, name, strlen(name), flags));
  return t;
}

static target_t target_open(const target_spec_t *sp, const char *name) {
  if (sp->urls) return target_redlock(sp->urls, sp->format, name);
  target_t t = {0};
  t.c = connect_client(sp->url, 0);
  if (sp->fair) CHECK("rlock_lock_new_fair", rlock_lock_new_fair(t.c, name, strlen(name), &t.l));
  else t.l = new_lock(t.c, name);
  return t;
}

/* Waits until acquired (lock: watchdog lease; RedLock: REDLOCK_LEASE_MS). */
static void target_lock(target_t *t) {
  if (t->rl) CHECK("redlock acquire", rlock_redlock_acquire(t->rl, RLOCK_WAIT_FOREVER, REDLOCK_LEASE_MS, NULL, NULL));
  else CHECK("lock", rlock_lock_lock(t->l, RLOCK_LEASE_WATCHDOG));
}

static void target_unlock(target_t *t) {
  if (t->rl) CHECK("redlock release", rlock_redlock_release(t->rl));
  else CHECK("unlock", rlock_lock_unlock(t->l));
}

static void target_close(target_t *t) {
  if (t->rl) rlock_redlock_free(t->rl);
  if (t->l) rlock_lock_free(t->l);
  if (t->c) rlock_client_free(t->c);
}

/* A growable array of samples in ns. */
typedef struct {
  int64_t *v;
  size_t n, cap;
} samples_t;

static void samples_add(samples_t *s, int64_t x) {
  if (s->n == s->cap) {
    s->cap = s->cap ? s->cap * 2 : 4096;
    s->v = realloc(s->v, s->cap * sizeof *s->v);
    if (!s->v) {
      fprintf(stderr, "rlock_bench: out of memory\n");
      _exit(2);
    }
  }
  s->v[s->n++] = x;
}

static void samples_write(FILE *f, const samples_t *s) {
  for (size_t i = 0; i < s->n; i++) fprintf(f, "%.3f\n", (double)s->v[i] / 1000.0);
}

static FILE *open_out(const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "rlock_bench: cannot write %s: %s\n", path, strerror(errno));
    _exit(2);
  }
  return f;
}

static double cpu_s(void);

/* ------------------------------------------------------------------ s1 */

/* Scenario 1 on t: WARM pairs, then PAIRS timed pairs; samples to path.
 * The command counts come from t's client (a RedLock has one per node: 0). */
static int run_s1(target_t *t, long pairs, long warm, const char *path) {
  for (long i = 0; i < warm; i++) {
    target_lock(t);
    target_unlock(t);
  }
  rlock_stats_t st0 = {0}, st1 = {0};
  if (t->c) rlock_client_stats(t->c, &st0);
  samples_t s = {0};
  double cpu0 = cpu_s();
  int64_t t0 = now_ns();
  for (long i = 0; i < pairs; i++) {
    int64_t a = now_ns();
    target_lock(t);
    target_unlock(t);
    samples_add(&s, now_ns() - a);
  }
  int64_t t1 = now_ns();
  double cpu1 = cpu_s();
  if (t->c) rlock_client_stats(t->c, &st1);
  FILE *f = open_out(path);
  samples_write(f, &s);
  fclose(f);
  free(s.v);
  printf(
      "{\"pairs\":%ld,\"elapsed_s\":%.6f,\"cpu_us_per_pair\":%.2f,\"commands_per_pair\":%.3f,"
      "\"writes_per_pair\":%.3f,\"fast_per_pair\":%.3f}\n",
      pairs, (double)(t1 - t0) / 1e9, (cpu1 - cpu0) * 1e6 / (double)pairs,
      (double)(st1.commands_sent - st0.commands_sent) / (double)pairs,
      (double)(st1.writes - st0.writes) / (double)pairs, (double)(st1.fast_calls - st0.fast_calls) / (double)pairs);
  target_close(t);
  return 0;
}

static int cmd_s1(int argc, char **argv) {
  if (argc != 6) return 64;
  target_spec_t sp = {.url = argv[2]};
  target_t t = target_open(&sp, "bench:s1:rlock");
  return run_s1(&t, atol(argv[3]), atol(argv[4]), argv[5]);
}

static int cmd_r1(int argc, char **argv) {
  if (argc != 7) return 64;
  target_t t = target_redlock(argv[2], argv[3], "bench:r1:rlock");
  return run_s1(&t, atol(argv[4]), atol(argv[5]), argv[6]);
}

/* ------------------------------------------------------------------ s2 */

static atomic_int s2_phase; /* 0 warm-up, 1 measuring, 2 stop */

typedef struct {
  rlock_client_t *c;
  int idx;
  long counted;
  samples_t s;
} s2_thread_t;

static void *s2_run(void *arg) {
  s2_thread_t *t = arg;
  char name[64];
  snprintf(name, sizeof name, "bench:s2:rlock:%d", t->idx);
  rlock_lock_t *l = new_lock(t->c, name);
  for (;;) {
    int ph = atomic_load(&s2_phase);
    if (ph == 2) break;
    int64_t a = now_ns();
    CHECK("lock", rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
    CHECK("unlock", rlock_lock_unlock(l));
    int64_t b = now_ns();
    if (ph == 1 && atomic_load(&s2_phase) == 1) {
      t->counted++;
      samples_add(&t->s, b - a);
    }
  }
  rlock_lock_free(l);
  return NULL;
}

static void sleep_ns(int64_t ns) {
  struct timespec ts = {ns / 1000000000, ns % 1000000000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* The measured window of s2 and s2a: WARM seconds of warm-up (s2_phase 0),
 * then SECS seconds measured (s2_phase 1), then s2_phase 2 (stop); the
 * client's counters and the whole process's CPU seconds at both ends. */
typedef struct {
  double elapsed_s, cpu_s;
  uint64_t commands, writes;
} s2_window_t;

static void s2_measure(rlock_client_t *c, double warm, double secs, s2_window_t *w) {
  sleep_ns((int64_t)(warm * 1e9));
  rlock_stats_t st0, st1;
  rlock_client_stats(c, &st0);
  double cpu0 = cpu_s();
  int64_t t0 = now_ns();
  atomic_store(&s2_phase, 1);
  sleep_ns((int64_t)(secs * 1e9));
  atomic_store(&s2_phase, 2);
  int64_t t1 = now_ns();
  rlock_client_stats(c, &st1);
  w->cpu_s = cpu_s() - cpu0;
  w->elapsed_s = (double)(t1 - t0) / 1e9;
  w->commands = st1.commands_sent - st0.commands_sent;
  w->writes = st1.writes - st0.writes;
}

/* The rest of s2's and s2a's JSON line, after their own first fields. */
static void s2_print_window(const s2_window_t *w) {
  printf("\"commands\":%" PRIu64 ",\"writes\":%" PRIu64 ",\"commands_per_write\":%.2f,\"client_cpu_pct\":%.1f}\n",
         w->commands, w->writes, w->writes ? (double)w->commands / (double)w->writes : 0.0,
         100.0 * w->cpu_s / w->elapsed_s);
}

static int cmd_s2(int argc, char **argv) {
  if (argc != 7) return 64;
  const char *url = argv[2];
  int nthreads = atoi(argv[3]);
  double secs = atof(argv[4]), warm = atof(argv[5]);
  rlock_client_t *c = connect_client(url, 0);
  s2_thread_t *ts = calloc((size_t)nthreads, sizeof *ts);
  pthread_t *th = calloc((size_t)nthreads, sizeof *th);
  atomic_store(&s2_phase, 0);
  for (int i = 0; i < nthreads; i++) {
    ts[i].c = c;
    ts[i].idx = i;
    if (pthread_create(&th[i], NULL, s2_run, &ts[i]) != 0) {
      fprintf(stderr, "rlock_bench: pthread_create failed\n");
      return 2;
    }
  }
  s2_window_t w;
  s2_measure(c, warm, secs, &w);
  long total = 0;
  FILE *f = open_out(argv[6]);
  for (int i = 0; i < nthreads; i++) {
    pthread_join(th[i], NULL);
    total += ts[i].counted;
    samples_write(f, &ts[i].s);
    free(ts[i].s.v);
  }
  fclose(f);
  printf("{\"pairs\":%ld,\"elapsed_s\":%.6f,\"threads\":%d,", total, w.elapsed_s, nthreads);
  s2_print_window(&w);
  free(ts);
  free(th);
  rlock_client_free(c);
  return 0;
}

/* ------------------------------------------------------------------ s2a */

/* Scenario 2 with the async API, the model of the Node peers: no thread per
 * owner, OWNERS logical owners (explicit rlock_owner_t 1..OWNERS), each with
 * its own name, on one client. Each owner is a chain of completions on the
 * client's I/O thread: acquire -> its callback submits the release -> its
 * callback records the pair and submits the next acquire (async calls from a
 * callback are allowed; only sync calls are not). Lease: the watchdog, as in
 * s2. The main thread only switches the phases (s2_phase, as s2) and then
 * waits on a condition variable until every chain has stopped. */
typedef struct {
  rlock_lock_t *l;
  rlock_owner_t owner;
  int ph;    /* s2_phase when the current pair started */
  int64_t a; /* when it started */
  long counted;
  samples_t s;
} s2a_owner_t;

static pthread_mutex_t s2a_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t s2a_cv = PTHREAD_COND_INITIALIZER;
static int s2a_running; /* chains not yet stopped (under s2a_mu) */

static void s2a_acquired(rlock_lock_t *l, int status, int64_t value, void *arg);

/* Starts the owner's next pair, or stops its chain once the phase is 2. */
static void s2a_next(s2a_owner_t *o) {
  int ph = atomic_load(&s2_phase);
  if (ph == 2) {
    pthread_mutex_lock(&s2a_mu);
    if (--s2a_running == 0) pthread_cond_signal(&s2a_cv);
    pthread_mutex_unlock(&s2a_mu);
    return;
  }
  o->ph = ph;
  o->a = now_ns();
  CHECK("acquire_async",
        rlock_lock_acquire_async(o->l, o->owner, RLOCK_WAIT_FOREVER, RLOCK_LEASE_WATCHDOG, NULL, s2a_acquired, o));
}

static void s2a_released(rlock_lock_t *l, int status, int64_t value, void *arg) {
  s2a_owner_t *o = arg;
  if (status != 0) die_rc("release (async)", status);
  if (value != 1) {
    fprintf(stderr, "rlock_bench s2a: release left the lock held (value %" PRId64 ")\n", value);
    _exit(2);
  }
  int64_t b = now_ns();
  if (o->ph == 1 && atomic_load(&s2_phase) == 1) {
    o->counted++;
    samples_add(&o->s, b - o->a);
  }
  s2a_next(o);
}

static void s2a_acquired(rlock_lock_t *l, int status, int64_t value, void *arg) {
  s2a_owner_t *o = arg;
  if (status != 0) die_rc("acquire (async)", status);
  CHECK("release_async", rlock_lock_release_async(l, o->owner, s2a_released, o));
}

static int cmd_s2a(int argc, char **argv) {
  if (argc != 7) return 64;
  const char *url = argv[2];
  int n = atoi(argv[3]);
  double secs = atof(argv[4]), warm = atof(argv[5]);
  if (n < 1) return 64;
  rlock_client_t *c = connect_client(url, 0);
  s2a_owner_t *os = calloc((size_t)n, sizeof *os);
  if (!os) {
    fprintf(stderr, "rlock_bench: out of memory\n");
    return 2;
  }
  char name[64];
  for (int i = 0; i < n; i++) {
    snprintf(name, sizeof name, "bench:s2a:rlock:%d", i);
    os[i].l = new_lock(c, name);
    os[i].owner = (rlock_owner_t)(i + 1);
  }
  atomic_store(&s2_phase, 0);
  s2a_running = n;
  for (int i = 0; i < n; i++) s2a_next(&os[i]);
  s2_window_t w;
  s2_measure(c, warm, secs, &w);
  pthread_mutex_lock(&s2a_mu); /* every chain's last pair ends, then it stops */
  while (s2a_running > 0) pthread_cond_wait(&s2a_cv, &s2a_mu);
  pthread_mutex_unlock(&s2a_mu);
  long total = 0;
  FILE *f = open_out(argv[6]);
  for (int i = 0; i < n; i++) {
    total += os[i].counted;
    samples_write(f, &os[i].s);
    free(os[i].s.v);
  }
  fclose(f);
  printf("{\"pairs\":%ld,\"elapsed_s\":%.6f,\"owners\":%d,\"threads\":1,", total, w.elapsed_s, n);
  s2_print_window(&w);
  for (int i = 0; i < n; i++) rlock_lock_free(os[i].l);
  free(os);
  rlock_client_free(c);
  return 0;
}

/* ------------------------------------------------------------------ s3 */

#define S3_WARMUP 20 /* lock+unlock pairs before "ready" */

/* One hot-lock worker: after S3_WARMUP pairs prints "ready", waits for a line on stdin, then runs
 * ITERS x (lock, GET counter, SET counter+1, unlock). SAMPLES gets one line
 * per iteration: "<counter value read> <acquire wait in us> <acquire returned
 * ns> <unlock called ns>" (CLOCK_MONOTONIC: run.py pairs the unlock of value
 * v with the acquire that read v+1 in another worker: the handoff). fair: the
 * lock is a fair lock (s3f). */
static int cmd_s3(int argc, char **argv, int fair) {
  if (argc != 7) return 64;
  const char *url = argv[2], *name = argv[3], *counter = argv[4];
  long iters = atol(argv[5]);
  rlock_client_t *c = connect_client(url, 0);
  rlock_lock_t *l = NULL;
  if (fair) CHECK("rlock_lock_new_fair", rlock_lock_new_fair(c, name, strlen(name), &l));
  else l = new_lock(c, name);
  long *vals = calloc((size_t)iters, sizeof *vals);
  int64_t *waits = calloc((size_t)iters, sizeof *waits);
  int64_t *acqs = calloc((size_t)iters, sizeof *acqs), *rels = calloc((size_t)iters, sizeof *rels);
  for (int i = 0; i < S3_WARMUP; i++) { /* warm-up: connection, scripts, code paths */
    CHECK("lock", rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
    CHECK("unlock", rlock_lock_unlock(l));
  }
  rlock_stats_t st0;
  rlock_client_stats(c, &st0);
  printf("ready\n");
  fflush(stdout);
  char line[64];
  if (!fgets(line, sizeof line, stdin)) return 2;
  double c0 = cpu_s();
  int64_t start = now_ns();
  for (long i = 0; i < iters; i++) {
    int64_t a = now_ns();
    CHECK("lock", rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
    acqs[i] = now_ns();
    waits[i] = acqs[i] - a;
    const char *get[2] = {"GET", counter};
    rlock_reply_t *r = NULL;
    CHECK("GET", rlock_client_command(c, 2, get, NULL, &r));
    long v = 0;
    if (r->type == RLOCK_REPLY_STRING) v = atol(r->str);
    else if (r->type != RLOCK_REPLY_NIL) {
      fprintf(stderr, "rlock_bench: GET %s: unexpected reply type %d\n", counter, (int)r->type);
      _exit(2);
    }
    rlock_reply_free(r);
    vals[i] = v;
    char buf[32];
    snprintf(buf, sizeof buf, "%ld", v + 1);
    const char *set[3] = {"SET", counter, buf};
    CHECK("SET", rlock_client_command(c, 3, set, NULL, &r));
    rlock_reply_free(r);
    rels[i] = now_ns();
    CHECK("unlock", rlock_lock_unlock(l));
  }
  int64_t end = now_ns();
  double c1 = cpu_s();
  FILE *f = open_out(argv[6]);
  for (long i = 0; i < iters; i++)
    fprintf(f, "%ld %.3f %" PRId64 " %" PRId64 "\n", vals[i], (double)waits[i] / 1000.0, acqs[i], rels[i]);
  fclose(f);
  free(vals), free(waits), free(acqs), free(rels);
  rlock_stats_t st1;
  rlock_client_stats(c, &st1);
  printf("{\"start_ns\":%" PRId64 ",\"end_ns\":%" PRId64 ",\"iters\":%ld,\"acquire_tries\":%" PRIu64
         ",\"subscribes\":%" PRIu64 ",\"cpu_s\":%.6f}\n",
         start, end, iters, st1.acquire_attempts - st0.acquire_attempts, st1.subscribes - st0.subscribes, c1 - c0);
  rlock_lock_free(l);
  rlock_client_free(c);
  return 0;
}

/* ------------------------------------------------------------------ s4 */

/* Two processes pass one lock back and forth. The holder tells the other
 * (pipe) to start waiting, sleeps DELAY_US so that the waiter is parked, then
 * unlocks; relc[h] = when its unlock call started, rel[h] = when it returned,
 * acq[h] = when the other's acquire returned, for handoff h. Shared memory
 * carries the times back; CLOCK_MONOTONIC is one clock for every process of
 * the machine. SAMPLES gets one line per handoff: "RET CALL", acq - rel and
 * acq - relc in us (CALL is the handoff compared across implementations:
 * RET is negative when the waiter returns before the releaser's unlock does,
 * as with Redisson's two-round-trip unlock). */
typedef struct {
  int64_t *rel, *relc, *acq;
  atomic_long *done; /* handoffs completed */
} s4_shared_t;

static void s4_role(int first, int rd, int wr, const target_spec_t *spec, const char *name, long total,
                    int64_t delay_ns, int64_t deadline_ns, s4_shared_t *sh, int *failed) {
  target_t t = target_open(spec, name);
  long h = first ? 0 : 1; /* next handoff index this process hands off (as holder) */
  char msg;
  if (first) {
    target_lock(&t);
  } else {
    /* wait for the go of the first holder */
    if (read(rd, &msg, 1) != 1 || msg != 'G') goto out;
    int64_t a = now_ns();
    (void)a;
    target_lock(&t);
    sh->acq[0] = now_ns();
    atomic_fetch_add(sh->done, 1);
  }
  for (;;) {
    /* I hold the lock; handoff h goes from me to the other. */
    if (h >= total || now_ns() > deadline_ns) {
      msg = 'S';
      if (write(wr, &msg, 1) != 1) *failed = 1;
      target_unlock(&t);
      break;
    }
    msg = 'G';
    if (write(wr, &msg, 1) != 1) break;
    sleep_ns(delay_ns);
    sh->relc[h] = now_ns();
    target_unlock(&t);
    sh->rel[h] = now_ns();
    /* wait for my turn: the other acquires h, then hands h+1 back to me */
    if (read(rd, &msg, 1) != 1 || msg != 'G') break;
    target_lock(&t);
    sh->acq[h + 1] = now_ns();
    atomic_fetch_add(sh->done, 1);
    h += 2;
  }
out:
  target_close(&t);
}

/* argv: NAME HANDOFFS WARMUP DELAY_US CAP_S SAMPLES, both roles on spec. */
static int run_s4(const target_spec_t *spec, char **argv) {
  const char *name = argv[0];
  long handoffs = atol(argv[1]), warm = atol(argv[2]);
  int64_t delay_ns = (int64_t)atol(argv[3]) * 1000;
  double cap = atof(argv[4]);
  long total = handoffs + warm;
  size_t bytes = 3 * (size_t)(total + 2) * sizeof(int64_t) + sizeof(atomic_long);
  void *mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return 2;
  s4_shared_t sh = {mem, (int64_t *)mem + total + 2, (int64_t *)mem + 2 * (total + 2),
                    (atomic_long *)((int64_t *)mem + 3 * (total + 2))};
  atomic_store(sh.done, 0);
  int ab[2], ba[2];
  if (pipe(ab) || pipe(ba)) return 2;
  int64_t t0 = now_ns(), deadline = t0 + (int64_t)(cap * 1e9);
  pid_t pa = fork();
  if (pa == 0) {
    int failed = 0;
    s4_role(1, ba[0], ab[1], spec, name, total, delay_ns, deadline, &sh, &failed);
    _exit(failed);
  }
  pid_t pb = fork();
  if (pb == 0) {
    int failed = 0;
    s4_role(0, ab[0], ba[1], spec, name, total, delay_ns, deadline, &sh, &failed);
    _exit(failed);
  }
  close(ab[0]), close(ab[1]), close(ba[0]), close(ba[1]);
  int sa = 0, sb = 0;
  waitpid(pa, &sa, 0);
  waitpid(pb, &sb, 0);
  int64_t t1 = now_ns();
  long done = atomic_load(sh.done);
  FILE *f = open_out(argv[5]);
  long recorded = 0;
  for (long h = warm; h < done && h < total; h++) {
    fprintf(f, "%.3f %.3f\n", (double)(sh.acq[h] - sh.rel[h]) / 1000.0, (double)(sh.acq[h] - sh.relc[h]) / 1000.0);
    recorded++;
  }
  fclose(f);
  int ok = WIFEXITED(sa) && WEXITSTATUS(sa) == 0 && WIFEXITED(sb) && WEXITSTATUS(sb) == 0;
  printf("{\"handoffs\":%ld,\"recorded\":%ld,\"elapsed_s\":%.3f,\"capped\":%s,\"children_ok\":%s}\n", done, recorded,
         (double)(t1 - t0) / 1e9, done < total ? "true" : "false", ok ? "true" : "false");
  if (!ok) {
    fprintf(stderr, "rlock_bench s4: a child failed (status %d / %d)\n", sa, sb);
    return 2;
  }
  return 0;
}

static int cmd_s4(int argc, char **argv, int fair) {
  if (argc != 9) return 64;
  target_spec_t spec = {.url = argv[2], .fair = fair};
  return run_s4(&spec, argv + 3);
}

static int cmd_r4(int argc, char **argv) {
  if (argc != 10) return 64;
  target_spec_t spec = {.urls = argv[2], .format = argv[3]};
  return run_s4(&spec, argv + 4);
}

/* ------------------------------------------------------------------ s5 */

typedef struct {
  atomic_long ok, failed, held;
  atomic_long lost;
} s5_counts_t;

static s5_counts_t s5c;
#define S5_BATCH 500 /* acquires in flight at a time (peers.js: BATCH) */

static void s5_acq_cb(rlock_lock_t *l, int status, int64_t value, void *arg) {
  if (status == 0) atomic_fetch_add(&s5c.ok, 1);
  else {
    if (atomic_fetch_add(&s5c.failed, 1) < 5)
      fprintf(stderr, "rlock_bench s5: acquire failed: %s\n", rlock_err_name(status));
  }
}

static void s5_held_cb(rlock_lock_t *l, int status, int64_t value, void *arg) {
  if (status == 0 && value == 1) atomic_fetch_add(&s5c.held, 1);
  else atomic_fetch_add(&s5c.failed, 1);
}

static void s5_lost_cb(const char *name, size_t len, uint64_t owner, rlock_lost_reason_t reason, void *arg) {
  atomic_fetch_add(&s5c.lost, 1);
}

static long rss_kb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long kb = -1;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, "VmRSS:", 6) == 0) kb = atol(line + 6);
  fclose(f);
  return kb;
}

static double cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* Sum of the server's EVAL + EVALSHA calls (INFO commandstats). */
static long long server_script_calls(rlock_client_t *c) {
  const char *argv[2] = {"INFO", "commandstats"};
  rlock_reply_t *r = NULL;
  CHECK("INFO", rlock_client_command(c, 2, argv, NULL, &r));
  long long n = 0;
  if (r->type == RLOCK_REPLY_STRING) {
    const char *keys[2] = {"cmdstat_evalsha:calls=", "cmdstat_eval:calls="};
    for (int k = 0; k < 2; k++) {
      const char *p = strstr(r->str, keys[k]);
      if (p) n += atoll(p + strlen(keys[k]));
    }
  }
  rlock_reply_free(r);
  return n;
}

/* Waits until *counter + *failed reaches n (the async completions). */
static void wait_count(atomic_long *counter, long n) {
  while (atomic_load(counter) + atomic_load(&s5c.failed) < n) sleep_ns(1000000);
}

static int cmd_s5(int argc, char **argv) {
  if (argc != 6) return 64;
  const char *url = argv[2];
  long n = atol(argv[3]);
  double hold = atof(argv[4]);
  int64_t wd = atol(argv[5]);
  long rss0 = rss_kb();
  rlock_client_t *c = connect_client(url, wd);
  rlock_client_on_lost(c, s5_lost_cb, NULL);
  long rss1 = rss_kb();
  rlock_lock_t **locks = calloc((size_t)n, sizeof *locks);
  char name[64];
  int64_t a0 = now_ns();
  /* S5_BATCH acquires in flight at a time, as the peers do (peers.js):
   * 100,000 at once queue behind each other longer than the 3 s lease on a
   * loaded machine, and their requests' memory is not the cost of holding */
  for (long i = 0; i < n; i++) {
    snprintf(name, sizeof name, "bench:s5:rlock:%ld", i);
    locks[i] = new_lock(c, name);
    CHECK("acquire_async", rlock_lock_acquire_async(locks[i], (rlock_owner_t)1, RLOCK_WAIT_FOREVER,
                                                    RLOCK_LEASE_WATCHDOG, NULL, s5_acq_cb, NULL));
    if ((i + 1) % S5_BATCH == 0) wait_count(&s5c.ok, i + 1);
  }
  wait_count(&s5c.ok, n);
  int64_t a1 = now_ns();
  long acquired = atomic_load(&s5c.ok);
  long rss2 = rss_kb();
  rlock_stats_t st0, st1;
  rlock_client_stats(c, &st0);
  long long sc0 = server_script_calls(c);
  double cpu0 = cpu_s();
  int64_t t0 = now_ns();
  sleep_ns((int64_t)(hold * 1e9));
  int64_t t1 = now_ns();
  double cpu1 = cpu_s();
  long long sc1 = server_script_calls(c);
  rlock_client_stats(c, &st1);
  long rss3 = rss_kb();
  /* verify: every lock still held by us (HEXISTS through is_held) */
  for (long i = 0; i < n; i++)
    CHECK("is_held_async", rlock_lock_is_held_async(locks[i], (rlock_owner_t)1, s5_held_cb, NULL));
  wait_count(&s5c.held, n);
  long held = atomic_load(&s5c.held);
  /* release everything, so the next run starts clean */
  atomic_store(&s5c.ok, 0);
  for (long i = 0; i < n; i++)
    CHECK("release_async", rlock_lock_release_async(locks[i], (rlock_owner_t)1, s5_acq_cb, NULL));
  wait_count(&s5c.ok, n);
  double el = (double)(t1 - t0) / 1e9;
  printf(
      "{\"locks\":%ld,\"acquired\":%ld,\"acquire_s\":%.3f,\"hold_s\":%.3f,"
      "\"renewal_calls\":%" PRIu64
      ",\"renewal_calls_per_s\":%.2f,\"renewed_locks_per_s\":%.1f,"
      "\"server_script_calls_per_s\":%.2f,\"client_cpu_pct\":%.2f,"
      "\"rss_kb_base\":%ld,\"rss_kb_client\":%ld,\"rss_kb_held\":%ld,\"rss_kb_end\":%ld,"
      "\"rss_bytes_per_lock\":%.1f,\"still_held\":%ld,\"lost\":%ld,\"failed\":%ld}\n",
      n, acquired, (double)(a1 - a0) / 1e9, el, st1.renewals - st0.renewals, (double)(st1.renewals - st0.renewals) / el,
      (double)(st1.renewed_locks - st0.renewed_locks) / el, (double)(sc1 - sc0) / el, 100.0 * (cpu1 - cpu0) / el, rss0,
      rss1, rss2, rss3, (double)(rss3 - rss1) * 1024.0 / (double)n, held, atomic_load(&s5c.lost),
      atomic_load(&s5c.failed));
  for (long i = 0; i < n; i++) rlock_lock_free(locks[i]);
  free(locks);
  rlock_client_free(c);
  return 0;
}

/* ------------------------------------------------------------------ s6 */

static int cmd_s6(int argc, char **argv) {
  if (argc != 4) return 64;
  long pairs = atol(argv[3]);
  rlock_client_t *c = connect_client(argv[2], 0);
  rlock_lock_t *l = new_lock(c, "bench:s6:rlock");
  for (long i = 0; i < pairs; i++) {
    CHECK("lock", rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
    CHECK("unlock", rlock_lock_unlock(l));
  }
  printf("{\"pairs\":%ld}\n", pairs);
  rlock_lock_free(l);
  rlock_client_free(c);
  return 0;
}

/* ------------------------------------------------------------------ s8, s9 */

/* Tells run.py "ready" and waits for its go (a line on stdin). */
static int ready_go(void) {
  printf("ready\n");
  fflush(stdout);
  char line[64];
  return fgets(line, sizeof line, stdin) ? 0 : -1;
}

/* One command on the user connection whose reply is an integer (INCR, DECR)
 * or a string / nil (GET: its number, nil 0). */
static long long int_command(rlock_client_t *c, int argc, const char *const *argv) {
  rlock_reply_t *r = NULL;
  CHECK(argv[0], rlock_client_command(c, argc, argv, NULL, &r));
  long long v = 0;
  if (r->type == RLOCK_REPLY_INTEGER) v = r->integer;
  else if (r->type == RLOCK_REPLY_STRING) v = atoll(r->str);
  else if (r->type != RLOCK_REPLY_NIL) {
    fprintf(stderr, "rlock_bench: %s: unexpected reply type %d\n", argv[0], (int)r->type);
    _exit(2);
  }
  rlock_reply_free(r);
  return v;
}

/* xorshift32: the op sequence of s8, the same in Bench.java (worker w starts
 * from w * 2654435761 + 1), so every implementation does the same work. */
static uint32_t xs32(uint32_t *x) {
  *x ^= *x << 13;
  *x ^= *x >> 17;
  *x ^= *x << 5;
  return *x;
}

/* One read-mostly worker: ITERS ops, each a read (READ_PCT %: read lock, GET
 * counter, unlock) or a write (write lock, GET counter, SET counter+1,
 * unlock). KIND rw: rlock_rwlock_new's read and write handles; lock: one
 * reentrant lock for both (the same work, every op exclusive). SAMPLES gets
 * "<r|w> <acquire wait in us> <counter value read>" per op. */
static int cmd_s8(int argc, char **argv) {
  if (argc != 10) return 64;
  const char *url = argv[2], *kind = argv[3], *name = argv[4], *counter = argv[5];
  long iters = atol(argv[6]);
  int pct = atoi(argv[7]), worker = atoi(argv[8]);
  rlock_client_t *c = connect_client(url, 0);
  rlock_lock_t *rd = NULL, *wr = NULL;
  if (!strcmp(kind, "rw")) CHECK("rlock_rwlock_new", rlock_rwlock_new(c, name, strlen(name), &rd, &wr));
  else if (!strcmp(kind, "lock")) rd = wr = new_lock(c, name);
  else return 64;
  char *ops = calloc((size_t)iters, 1);
  long *vals = calloc((size_t)iters, sizeof *vals);
  int64_t *waits = calloc((size_t)iters, sizeof *waits);
  const char *get[2] = {"GET", counter};
  uint32_t warm = (uint32_t)worker * 2654435761u + 7u; /* warm-up: its own sequence */
  for (int i = 0; i < S3_WARMUP; i++) {
    rlock_lock_t *l = xs32(&warm) % 100 < (uint32_t)pct ? rd : wr;
    CHECK("lock", rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
    CHECK("unlock", rlock_lock_unlock(l));
  }
  if (ready_go() != 0) return 2;
  uint32_t x = (uint32_t)worker * 2654435761u + 1u;
  double c0 = cpu_s();
  int64_t start = now_ns();
  for (long i = 0; i < iters; i++) {
    int read = xs32(&x) % 100 < (uint32_t)pct;
    rlock_lock_t *l = read ? rd : wr;
    int64_t a = now_ns();
    CHECK("lock", rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
    waits[i] = now_ns() - a;
    long long v = int_command(c, 2, get);
    if (!read) {
      char buf[32];
      snprintf(buf, sizeof buf, "%lld", v + 1);
      const char *set[3] = {"SET", counter, buf};
      rlock_reply_t *r = NULL;
      CHECK("SET", rlock_client_command(c, 3, set, NULL, &r));
      rlock_reply_free(r);
    }
    CHECK("unlock", rlock_lock_unlock(l));
    ops[i] = read ? 'r' : 'w';
    vals[i] = (long)v;
  }
  int64_t end = now_ns();
  double c1 = cpu_s();
  FILE *f = open_out(argv[9]);
  for (long i = 0; i < iters; i++) fprintf(f, "%c %.3f %ld\n", ops[i], (double)waits[i] / 1000.0, vals[i]);
  fclose(f);
  printf("{\"start_ns\":%" PRId64 ",\"end_ns\":%" PRId64 ",\"iters\":%ld,\"cpu_s\":%.6f}\n", start, end, iters,
         c1 - c0);
  free(ops), free(vals), free(waits);
  rlock_lock_free(rd);
  if (wr != rd) rlock_lock_free(wr);
  rlock_client_free(c);
  return 0;
}

/* One semaphore worker: ITERS x (acquire 1 permit of NAME waiting as long as
 * it takes, INCR INUSE, DECR INUSE, release 1). run.py sets NAME's permits
 * (3) before the workers start. SAMPLES gets "<acquire wait in us> <INCR's
 * answer>" per iteration (never above the permits if the semaphore holds). */
static int cmd_s9(int argc, char **argv) {
  if (argc != 7) return 64;
  const char *url = argv[2], *name = argv[3], *inuse = argv[4];
  long iters = atol(argv[5]);
  rlock_client_t *c = connect_client(url, 0);
  rlock_semaphore_t *sem = NULL;
  CHECK("rlock_semaphore_new", rlock_semaphore_new(c, name, strlen(name), &sem));
  int64_t *waits = calloc((size_t)iters, sizeof *waits);
  long *seen = calloc((size_t)iters, sizeof *seen);
  for (int i = 0; i < S3_WARMUP; i++) {
    CHECK("semaphore acquire", rlock_semaphore_acquire(sem, 1, RLOCK_WAIT_FOREVER, NULL));
    CHECK("semaphore release", rlock_semaphore_release(sem, 1, NULL));
  }
  if (ready_go() != 0) return 2;
  const char *incr[2] = {"INCR", inuse}, *decr[2] = {"DECR", inuse};
  double c0 = cpu_s();
  int64_t start = now_ns();
  for (long i = 0; i < iters; i++) {
    int64_t a = now_ns();
    CHECK("semaphore acquire", rlock_semaphore_acquire(sem, 1, RLOCK_WAIT_FOREVER, NULL));
    waits[i] = now_ns() - a;
    seen[i] = (long)int_command(c, 2, incr);
    int_command(c, 2, decr);
    CHECK("semaphore release", rlock_semaphore_release(sem, 1, NULL));
  }
  int64_t end = now_ns();
  double c1 = cpu_s();
  FILE *f = open_out(argv[6]);
  for (long i = 0; i < iters; i++) fprintf(f, "%.3f %ld\n", (double)waits[i] / 1000.0, seen[i]);
  fclose(f);
  printf("{\"start_ns\":%" PRId64 ",\"end_ns\":%" PRId64 ",\"iters\":%ld,\"cpu_s\":%.6f}\n", start, end, iters,
         c1 - c0);
  free(waits), free(seen);
  rlock_semaphore_free(sem);
  rlock_client_free(c);
  return 0;
}

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);
  if (argc < 2) goto usage;
  int rc = 64;
  if (!strcmp(argv[1], "s1")) rc = cmd_s1(argc, argv);
  else if (!strcmp(argv[1], "s2")) rc = cmd_s2(argc, argv);
  else if (!strcmp(argv[1], "s2a")) rc = cmd_s2a(argc, argv);
  else if (!strcmp(argv[1], "s3")) rc = cmd_s3(argc, argv, 0);
  else if (!strcmp(argv[1], "s3f")) rc = cmd_s3(argc, argv, 1);
  else if (!strcmp(argv[1], "s4")) rc = cmd_s4(argc, argv, 0);
  else if (!strcmp(argv[1], "s4f")) rc = cmd_s4(argc, argv, 1);
  else if (!strcmp(argv[1], "s8")) rc = cmd_s8(argc, argv);
  else if (!strcmp(argv[1], "s9")) rc = cmd_s9(argc, argv);
  else if (!strcmp(argv[1], "s5")) rc = cmd_s5(argc, argv);
  else if (!strcmp(argv[1], "s6")) rc = cmd_s6(argc, argv);
  else if (!strcmp(argv[1], "r1")) rc = cmd_r1(argc, argv);
  else if (!strcmp(argv[1], "r4")) rc = cmd_r4(argc, argv);
  if (rc != 64) return rc;
usage:
  fprintf(stderr,
          "usage: rlock_bench s1|s2|s2a|s3|s4|s5|s6|r1|r4|s3f|s4f|s8|s9 URL ... (see the comment at the top of "
          "bench/rlock_bench.c)\n");
  return 64;
}
