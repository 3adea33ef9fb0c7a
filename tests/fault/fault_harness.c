/* fault_harness.c -- the fault suite's shared machinery (see
 * fault_harness.h): the deployment and lock-kind rows, worker processes that
 * run a lock loop and record their history, the parent's control of them and
 * the async completion latch. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "fault_harness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------ deployments */

static void *single_start(const fh_deploy_opts_t *o) {
  th_server_opts_t so = {0};
  so.appendonly = o ? o->appendonly : 0;
  so.extra_args = o ? o->extra_args : NULL;
  return th_server_start(&so);
}
static const char *single_url(void *d) { return ((th_server_t *)d)->url; }
static void single_restart(void *d) { th_server_restart(d); }
static void single_stop(void *d) { th_server_stop(d); }
static th_server_t *single_raw(void *d) { return d; }

const fh_deploy_t fh_deploy_single = {"single", single_start, single_url, single_restart, single_stop, single_raw};
const fh_deploy_t *const fh_deployments[] = {&fh_deploy_single, NULL};

/* ------------------------------------------------------------ lock kinds */

static int re_open(fh_worker_ctx_t *w) {
  return rlock_lock_new(w->client, w->spec->lock_name, strlen(w->spec->lock_name), &w->lock);
}
static int re_valid_until(fh_worker_ctx_t *w, int64_t *out) {
  return rlock_lock_valid_until(w->lock, RLOCK_OWNER_SELF, out);
}
static int re_acquire(fh_worker_ctx_t *w, int64_t wait_ms, int64_t lease_ms, int64_t *vu, uint64_t *token) {
  int rc = rlock_lock_acquire(w->lock, RLOCK_OWNER_SELF, wait_ms, lease_ms, NULL);
  *token = 0;
  *vu = 0;
  if (rc == 0 && re_valid_until(w, vu) != 0) *vu = 0;
  return rc;
}
static int re_release(fh_worker_ctx_t *w) { return rlock_lock_unlock(w->lock); }
static void re_close(fh_worker_ctx_t *w) {
  rlock_lock_free(w->lock);
  w->lock = NULL;
}

const fh_kind_t fh_kind_reentrant = {"reentrant", HIST_MUTEX_LEASE,         re_open,
                                     re_acquire,  re_valid_until,           re_release,
                                     re_close,    "redisson_lock__channel", 0};
/* The simple lock (SET NX PX): the same calls on another handle. */
static int simple_open(fh_worker_ctx_t *w) {
  return rlock_lock_new_simple(w->client, w->spec->lock_name, strlen(w->spec->lock_name), &w->lock);
}
const fh_kind_t fh_kind_simple = {"simple",   HIST_MUTEX_LEASE,        simple_open,
                                  re_acquire, re_valid_until,          re_release,
                                  re_close,   "rlock_simple__channel", 0};
/* The fair lock (Redisson's RFairLock): the same calls; each waiter listens
 * on "<channel>:{NAME}:<owner id>". */
static int fair_open(fh_worker_ctx_t *w) {
  return rlock_lock_new_fair(w->client, w->spec->lock_name, strlen(w->spec->lock_name), &w->lock);
}
const fh_kind_t fh_kind_fair = {"fair",   HIST_MUTEX_LEASE,         fair_open, re_acquire, re_valid_until, re_release,
                                re_close, "redisson_lock__channel", 0};
/* Redisson's non-reentrant lock (RLock's hash): the same calls. */
static int nonreentrant_open(fh_worker_ctx_t *w) {
  return rlock_lock_new_nonreentrant(w->client, w->spec->lock_name, strlen(w->spec->lock_name), &w->lock);
}
const fh_kind_t fh_kind_nonreentrant = {"nonreentrant", HIST_MUTEX_LEASE,         nonreentrant_open,
                                        re_acquire,     re_valid_until,           re_release,
                                        re_close,       "redisson_lock__channel", 0};
/* Redisson's fenced lock: the acquire's token goes into the history. */
static int fenced_open(fh_worker_ctx_t *w) {
  return rlock_lock_new_fenced(w->client, w->spec->lock_name, strlen(w->spec->lock_name), &w->lock);
}
static int fenced_acquire(fh_worker_ctx_t *w, int64_t wait_ms, int64_t lease_ms, int64_t *vu, uint64_t *token) {
  int64_t t = 0;
  int rc = rlock_fenced_acquire(w->lock, RLOCK_OWNER_SELF, wait_ms, lease_ms, NULL, &t);
  *token = rc == 0 ? (uint64_t)t : 0;
  *vu = 0;
  if (rc == 0 && re_valid_until(w, vu) != 0) *vu = 0;
  return rc;
}
const fh_kind_t fh_kind_fenced = {"fenced",       HIST_MUTEX_LEASE,         fenced_open,
                                  fenced_acquire, re_valid_until,           re_release,
                                  re_close,       "redisson_lock__channel", 0};
/* The write lock of a read-write lock (rlock_rwlock_new): a mutex among writers. */
static int write_open(fh_worker_ctx_t *w) {
  rlock_lock_t *r = NULL;
  int rc = rlock_rwlock_new(w->client, w->spec->lock_name, strlen(w->spec->lock_name), &r, &w->lock);
  rlock_lock_free(r);
  return rc;
}
const fh_kind_t fh_kind_write = {"write",    HIST_MUTEX_LEASE, write_open,        re_acquire, re_valid_until,
                                 re_release, re_close,         "redisson_rwlock", 0};
/* Its read lock: shared (HIST_RW), so not a row of the mutex scenarios. */
static int read_open(fh_worker_ctx_t *w) {
  rlock_lock_t *wr = NULL;
  int rc = rlock_rwlock_new(w->client, w->spec->lock_name, strlen(w->spec->lock_name), &w->lock, &wr);
  rlock_lock_free(wr);
  return rc;
}
const fh_kind_t fh_kind_read = {"read",     HIST_RW,  read_open,         re_acquire, re_valid_until,
                                re_release, re_close, "redisson_rwlock", 1};
const fh_kind_t *const fh_kinds[] = {&fh_kind_reentrant, &fh_kind_simple, &fh_kind_fair, &fh_kind_nonreentrant,
                                     &fh_kind_fenced,    &fh_kind_write,  NULL};

/* ------------------------------------------------------------ workers */

static void emit(fh_worker_ctx_t *w, int kind, int rc, int64_t value) {
  fh_event_t e = {(int16_t)w->id, (int16_t)kind, rc, hist_now_ns(), value};
  ssize_t n;
  do {
    n = write(w->ev_fd, &e, sizeof e);
  } while (n < 0 && errno == EINTR);
}

static void wlog(fh_worker_ctx_t *w, int kind, int status, int64_t vu_ms, uint64_t token) {
  const char *name = w->spec->lock_name;
  if (hist_log(w->hist_fd, kind, w->id, name, strlen(name), status, vu_ms * 1000000, token) != 0)
    th_fail(__FILE__, __LINE__, "worker %d: history write failed", w->id);
}

static void on_lost(const char *name, size_t len, uint64_t owner, rlock_lost_reason_t reason, void *arg) {
  fh_worker_ctx_t *w = arg;
  if (hist_log(w->hist_fd, HK_LOST, w->id, name, len, (int)reason, 0, owner) != 0) return;
  emit(w, HK_LOST, 0, 0);
}

/* Reads one command byte within timeout_ms (-1: forever). 0 on timeout, -1 on EOF. */
static int read_cmd(int fd, int64_t timeout_ms) {
  struct pollfd pfd = {.fd = fd, .events = POLLIN};
  int r = poll(&pfd, 1, timeout_ms < 0 ? -1 : (int)timeout_ms);
  if (r < 0 && errno == EINTR) return 0;
  if (r <= 0) return 0;
  char c;
  ssize_t n = read(fd, &c, 1);
  if (n < 0 && errno == EINTR) return 0;
  return n == 1 ? (unsigned char)c : -1;
}

static void answer_valid(fh_worker_ctx_t *w) {
  int64_t vu = 0;
  int rc = w->spec->kind->valid_until(w, &vu);
  wlog(w, HK_VALID, rc, rc == 0 ? vu : 0, 0);
  emit(w, HK_VALID, rc, rc == 0 ? vu : 0);
}

static void worker_main(fh_worker_ctx_t *w) {
  const fh_worker_spec_t *s = w->spec;
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = s->url;
  if (s->watchdog_ms > 0) o.watchdog_timeout_ms = s->watchdog_ms;
  if (s->command_timeout_ms > 0) o.command_timeout_ms = s->command_timeout_ms;
  if (s->reconnect_max_ms > 0) o.reconnect_max_ms = s->reconnect_max_ms;
  if (s->no_fast_path) o.fast_path = 0;
  int rc = rlock_client_new(&w->client, &o);
  if (rc != 0) th_fail(__FILE__, __LINE__, "worker %d: client: %s", w->id, rlock_last_error());
  rlock_client_on_lost(w->client, on_lost, w);
  if ((rc = s->kind->open(w)) != 0) th_fail(__FILE__, __LINE__, "worker %d: open: %s", w->id, rlock_err_name(rc));
  int quit = 0;
  for (int it = 0; !quit && (s->iterations == 0 || it < s->iterations); it++) {
    int c;
    while ((c = read_cmd(w->ctl_fd, 0)) != 0) {
      if (c == FH_CMD_QUIT || c < 0) quit = 1;
      else if (c == FH_CMD_VALID) answer_valid(w);
    }
    if (quit) break;
    wlog(w, HK_ATTEMPT, 0, 0, 0);
    emit(w, HK_ATTEMPT, 0, 0);
    int64_t vu = 0;
    uint64_t token = 0;
    rlock_stats_t st0, st1;
    rlock_client_stats(w->client, &st0);
    rc = s->kind->acquire(w, s->wait_ms, s->lease_ms, &vu, &token);
    if (rc != 0) {
      wlog(w, HK_FAIL, rc, 0, 0);
      emit(w, HK_FAIL, rc, 0);
      continue;
    }
    /* status 1: a request of this client timed out or a connection was
     * replaced meanwhile: this acquire's tries may have reached the server
     * late or never (history.h: HIST_FIFO excuses its overtakes) */
    rlock_client_stats(w->client, &st1);
    wlog(w, HK_GRANT, st1.timeouts != st0.timeouts || st1.reconnects != st0.reconnects, vu, token);
    wlog(w, HK_ENTER, s->kind->shared, 0, 0);
    emit(w, HK_ENTER, 0, vu);
    /* inside the critical section */
    int64_t until = s->hold_ms >= 0 ? rlock_now_ms() + s->hold_ms : -1;
    for (;;) {
      int64_t left = until < 0 ? -1 : until - rlock_now_ms();
      if (until >= 0 && left <= 0) break;
      c = read_cmd(w->ctl_fd, left);
      if (c == FH_CMD_VALID) answer_valid(w);
      else if (c == FH_CMD_QUIT || c < 0) {
        quit = 1;
        if (until < 0) break;
      } else if (c == FH_CMD_EXIT && until < 0) break;
    }
    int64_t now = rlock_now_ms(), cur = 0;
    int stale = s->kind->valid_until(w, &cur) != 0 || now >= cur;
    wlog(w, HK_EXIT, stale, 0, 0);
    emit(w, HK_EXIT, stale, 0);
    rc = s->kind->release(w);
    wlog(w, HK_RELEASE, rc, 0, 0);
    emit(w, HK_RELEASE, rc, 0);
  }
  emit(w, HK_MAX, 0, 0);
  s->kind->close(w);
  rlock_client_free(w->client);
  close(w->hist_fd);
  close(w->ev_fd);
  th_exit_by_exec(0);
}

static void evlog_reset(void);

void fh_pool_init(fh_pool_t *p) {
  memset(p, 0, sizeof *p);
  evlog_reset(); /* events of an earlier pool must not match this one's workers */
  snprintf(p->hist_path, sizeof p->hist_path, "%s/history.bin", th_tempdir());
  if (hist_create(p->hist_path) != 0 || (p->hist_fd = hist_open(p->hist_path)) < 0)
    th_fail(__FILE__, __LINE__, "cannot create %s", p->hist_path);
  int ev[2];
  if (pipe2(ev, O_CLOEXEC) != 0) th_fail(__FILE__, __LINE__, "pipe: %s", strerror(errno));
  p->ev_rd = ev[0], p->ev_wr = ev[1];
}

/* Events read so far (the parent's view), consumed by fh_await in any order. */
typedef struct evlog {
  fh_event_t *e;
  char *used;
  size_t n, cap;
} evlog_t;
static evlog_t g_ev;
static void evlog_reset(void) { g_ev.n = 0; }

int fh_spawn(fh_pool_t *p, const fh_worker_spec_t *spec) {
  if (p->nworkers >= FH_MAX_WORKERS) th_fail(__FILE__, __LINE__, "too many workers");
  int id = p->nworkers++;
  int ctl[2];
  if (pipe2(ctl, O_CLOEXEC) != 0) th_fail(__FILE__, __LINE__, "pipe: %s", strerror(errno));
  pid_t pid = th_fork();
  if (pid == 0) {
    close(ctl[1]);
    close(p->ev_rd);
    for (int i = 0; i < id; i++)
      if (p->w[i].ctl >= 0) close(p->w[i].ctl);
    static fh_worker_ctx_t w;
    memset(&w, 0, sizeof w);
    w.id = id;
    w.spec = spec;
    w.ctl_fd = ctl[0];
    w.ev_fd = p->ev_wr;
    w.hist_fd = hist_open(p->hist_path);
    if (w.hist_fd < 0) th_exit_by_exec(3);
    worker_main(&w);
  }
  close(ctl[0]);
  p->w[id].pid = pid;
  p->w[id].ctl = ctl[1];
  p->w[id].alive = 1;
  return id;
}

void fh_send(fh_pool_t *p, int id, char cmd) {
  if (!p->w[id].alive) return;
  if (write(p->w[id].ctl, &cmd, 1) != 1 && errno != EPIPE) /* EPIPE: it already ended */
    th_fail(__FILE__, __LINE__, "worker %d: control write: %s", id, strerror(errno));
}

static int ev_take_since(int id, int kind, int64_t since_ns, fh_event_t *out) {
  for (size_t i = 0; i < g_ev.n; i++)
    if (!g_ev.used[i] && (id < 0 || g_ev.e[i].worker == id) && g_ev.e[i].kind == kind) {
      g_ev.used[i] = 1;
      if (g_ev.e[i].t_ns <= since_ns) continue;
      *out = g_ev.e[i];
      return 1;
    }
  return 0;
}
static int ev_take(int id, int kind, fh_event_t *out) { return ev_take_since(id, kind, -1, out); }

/* Reads the events available within timeout_ms into the log; 0 on timeout. */
static int ev_read(fh_pool_t *p, int64_t timeout_ms) {
  struct pollfd pfd = {.fd = p->ev_rd, .events = POLLIN};
  int r = poll(&pfd, 1, (int)(timeout_ms < 0 ? 0 : timeout_ms));
  if (r <= 0) return 0;
  fh_event_t e;
  ssize_t n = read(p->ev_rd, &e, sizeof e);
  if (n != (ssize_t)sizeof e) return 0;
  if (g_ev.n == g_ev.cap) {
    g_ev.cap = g_ev.cap ? g_ev.cap * 2 : 256;
    g_ev.e = realloc(g_ev.e, g_ev.cap * sizeof *g_ev.e);
    g_ev.used = realloc(g_ev.used, g_ev.cap);
    if (!g_ev.e || !g_ev.used) th_fail(__FILE__, __LINE__, "out of memory");
  }
  g_ev.e[g_ev.n] = e;
  g_ev.used[g_ev.n++] = 0;
  p->events_seen++;
  return 1;
}

fh_event_t fh_await(fh_pool_t *p, int id, int kind, int64_t timeout_ms) {
  return fh_await_since(p, id, kind, -1, timeout_ms);
}

fh_event_t fh_await_since(fh_pool_t *p, int id, int kind, int64_t since_ns, int64_t timeout_ms) {
  int64_t deadline = rlock_now_ms() + timeout_ms;
  fh_event_t e;
  for (;;) {
    if (ev_take_since(id, kind, since_ns, &e)) return e;
    int64_t left = deadline - rlock_now_ms();
    if (left <= 0) break;
    ev_read(p, left);
  }
  th_fail(__FILE__, __LINE__, "no '%s' event from worker %d within %lld ms", hist_kind_name(kind), id,
          (long long)timeout_ms);
}

int fh_poll_event(fh_pool_t *p, int id, int kind, fh_event_t *ev) {
  while (ev_read(p, 0)) {
  }
  return ev_take(id, kind, ev);
}

void fh_kill9(fh_pool_t *p, int id) {
  kill(p->w[id].pid, SIGKILL);
  th_wait_child(p->w[id].pid);
  hist_log(p->hist_fd, HK_DIED, id, "", 0, 0, 0, 0);
  p->w[id].alive = 0;
  close(p->w[id].ctl);
  p->w[id].ctl = -1;
}

void fh_stop(fh_pool_t *p, int id) {
  kill(p->w[id].pid, SIGSTOP);
  /* wait until it is really stopped (WUNTRACED), not just signalled */
  int st;
  while (waitpid(p->w[id].pid, &st, WUNTRACED) < 0 && errno == EINTR) {
  }
  p->w[id].stopped = 1;
}

void fh_cont(fh_pool_t *p, int id) {
  kill(p->w[id].pid, SIGCONT);
  p->w[id].stopped = 0;
}

void fh_pool_finish(fh_pool_t *p, int64_t timeout_ms) {
  for (int i = 0; i < p->nworkers; i++) {
    if (!p->w[i].alive) continue;
    if (p->w[i].stopped) fh_cont(p, i);
    fh_send(p, i, FH_CMD_QUIT);
    fh_send(p, i, FH_CMD_EXIT);
  }
  int64_t deadline = rlock_now_ms() + timeout_ms;
  for (int i = 0; i < p->nworkers; i++) {
    if (!p->w[i].alive) continue;
    int st = 0;
    pid_t r;
    while ((r = waitpid(p->w[i].pid, &st, WNOHANG)) == 0 && rlock_now_ms() < deadline)
      ev_read(p, 20); /* drain events while waiting: the pipe must not fill up */
    if (r == 0) {
      kill(p->w[i].pid, SIGKILL);
      th_wait_child(p->w[i].pid);
      th_fail(__FILE__, __LINE__, "worker %d did not finish within %lld ms", i, (long long)timeout_ms);
    }
    p->w[i].alive = 0;
    close(p->w[i].ctl);
    p->w[i].ctl = -1;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
      th_fail(__FILE__, __LINE__, "worker %d ended badly (status 0x%x)", i, st);
  }
  while (ev_read(p, 0)) {
  }
  close(p->ev_rd), close(p->ev_wr), close(p->hist_fd);
  p->ev_rd = p->ev_wr = p->hist_fd = -1;
}

/* On a violation: every record from 3 ms before to 1 ms after the first
 * two violating entries, and each worker's last valid-until before, so a CI log
 * shows the interleaving (the history file goes with the temp dir). */
static void dump_violations(const fh_pool_t *p, const hist_report_t *rep) {
  int shown = 0;
  for (size_t i = 0; i < rep->nlist && shown < 2; i++) {
    if (rep->list[i].permitted) continue;
    shown++;
    int64_t at = rep->list[i].b.enter_ns, from = at - 3000000, to = at + 1000000;
    printf("# records around violation %d (times in ms from B's entry):\n", shown);
    FILE *f = fopen(p->hist_path, "rb");
    hist_rec_t r, last[64];
    memset(last, 0, sizeof last);
    while (f && fread(&r, sizeof r, 1, f) == 1) {
      if ((r.kind == HK_GRANT || r.kind == HK_VALID) && r.t_ns < from && r.worker < 64) last[r.worker] = r;
      if (r.t_ns < from || r.t_ns > to) continue;
      for (int w = 0; w < 64; w++) /* each worker's valid-until known before the window */
        if (last[w].magic) {
          printf("#   %+10.3f worker %d %-7s (last before) valid-until %+.3f\n", (double)(last[w].t_ns - at) / 1e6, w,
                 hist_kind_name(last[w].kind), (double)(last[w].valid_until_ns - at) / 1e6);
          last[w].magic = 0;
        }
      printf("#   %+10.3f worker %u %-7s status %d valid-until %+.3f\n", (double)(r.t_ns - at) / 1e6, r.worker,
             hist_kind_name(r.kind), r.status, r.valid_until_ns ? (double)(r.valid_until_ns - at) / 1e6 : 0.0);
    }
    if (f) fclose(f);
  }
}

int fh_check(fh_pool_t *p, hist_mode_t mode, hist_report_t *rep) {
  hist_check_opts_t o = {.mode = mode};
  return fh_check_opts(p, &o, rep);
}

int fh_check_opts(fh_pool_t *p, const hist_check_opts_t *o, hist_report_t *rep) {
  int v = hist_check_file(p->hist_path, o, rep);
  hist_report_print(stdout, rep);
  if (rep->violations) dump_violations(p, rep);
  return v;
}

/* ------------------------------------------------------------ latch */

void fh_latch_init(fh_latch_t *l) {
  memset(l, 0, sizeof *l);
  pthread_mutex_init(&l->mu, NULL);
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(&l->cond, &a);
  pthread_condattr_destroy(&a);
}

void fh_latch_destroy(fh_latch_t *l) {
  pthread_mutex_destroy(&l->mu);
  pthread_cond_destroy(&l->cond);
}

void fh_latch_cb(rlock_lock_t *lock, int status, int64_t value, void *arg) {
  fh_latch_t *l = arg;
  pthread_mutex_lock(&l->mu);
  l->done = 1;
  l->status = status;
  l->value = value;
  pthread_cond_broadcast(&l->cond);
  pthread_mutex_unlock(&l->mu);
}

int fh_latch_wait(fh_latch_t *l, int64_t timeout_ms) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_sec += (time_t)(timeout_ms / 1000);
  ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
  pthread_mutex_lock(&l->mu);
  while (!l->done && pthread_cond_timedwait(&l->cond, &l->mu, &ts) == 0) {
  }
  int d = l->done;
  pthread_mutex_unlock(&l->mu);
  return d;
}

rlock_client_t *fh_client(const char *url, int64_t watchdog_ms, int64_t command_timeout_ms, int retry_attempts) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = url;
  if (watchdog_ms > 0) o.watchdog_timeout_ms = watchdog_ms;
  if (command_timeout_ms > 0) o.command_timeout_ms = command_timeout_ms;
  if (retry_attempts >= 0) o.retry_attempts = retry_attempts;
  o.reconnect_min_ms = 50;
  o.reconnect_max_ms = 200;
  rlock_client_t *c = NULL;
  int rc = rlock_client_new(&c, &o);
  if (rc != 0) th_fail(__FILE__, __LINE__, "rlock_client_new(%s): %s: %s", url, rlock_err_name(rc), rlock_last_error());
  return c;
}

void fh_result(const char *fault, const char *deploy, const char *kind, const char *outcome, size_t violations) {
  printf("RESULT fault=%s deployment=%s kind=%s violations=%zu outcome=%s\n", fault, deploy, kind, violations, outcome);
}

/* ------------------------------------------------------------ gated workers */

/* Closes every descriptor above stderr except keep1 and keep2. */
static void close_inherited(int keep1, int keep2) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) th_fail(__FILE__, __LINE__, "opendir /proc/self/fd: %s", strerror(errno));
  int fds[4096];
  size_t n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL && n < sizeof fds / sizeof fds[0];) {
    int fd = atoi(e->d_name);
    if (fd > 2 && fd != dirfd(d) && fd != keep1 && fd != keep2) fds[n++] = fd;
  }
  closedir(d);
  for (size_t i = 0; i < n; i++) close(fds[i]);
}

int fh_spawn_gated(fh_pool_t *p, const fh_worker_spec_t *spec) {
  if (p->nworkers >= FH_MAX_WORKERS) th_fail(__FILE__, __LINE__, "too many workers");
  int id = p->nworkers++;
  int ctl[2];
  if (pipe2(ctl, O_CLOEXEC) != 0) th_fail(__FILE__, __LINE__, "pipe: %s", strerror(errno));
  pid_t pid = th_fork();
  if (pid == 0) {
    close_inherited(ctl[0], p->ev_wr);
    for (char go = 0; go != FH_CMD_GO;) { /* FH_CMD_GO, or EOF: the parent is gone */
      ssize_t n = read(ctl[0], &go, 1);
      if (n == 0 || (n < 0 && errno != EINTR)) th_exit_by_exec(0);
    }
    static fh_worker_ctx_t w;
    memset(&w, 0, sizeof w);
    w.id = id;
    w.spec = spec;
    w.ctl_fd = ctl[0];
    w.ev_fd = p->ev_wr;
    w.hist_fd = hist_open(p->hist_path);
    if (w.hist_fd < 0) th_exit_by_exec(3);
    worker_main(&w);
  }
  close(ctl[0]);
  p->w[id].pid = pid;
  p->w[id].ctl = ctl[1];
  p->w[id].alive = 1;
  return id;
}

/* ------------------------------------------------------------ failovers */

void fh_drain(fh_pool_t *p) {
  while (ev_read(p, 0)) {
  }
}

size_t fh_count_events(fh_pool_t *p, int id, int kind, int64_t since_ns) {
  fh_drain(p);
  size_t n = 0;
  for (size_t i = 0; i < g_ev.n; i++)
    n += (id < 0 || g_ev.e[i].worker == id) && g_ev.e[i].kind == kind && g_ev.e[i].t_ns > since_ns;
  return n;
}

int fh_drive(fh_pool_t *p, int keep, int (*pred)(void *), void *arg, int64_t timeout_ms) {
  int64_t deadline = rlock_now_ms() + timeout_ms;
  while (!pred(arg)) {
    if (rlock_now_ms() >= deadline) return 0;
    fh_event_t e;
    while (ev_take(-1, HK_ENTER, &e))
      if (e.worker != keep) fh_send(p, e.worker, FH_CMD_EXIT);
    ev_read(p, 50);
  }
  return 1;
}

int fh_drive_until_enter(fh_pool_t *p, uint32_t mask, int64_t timeout_ms) {
  int64_t deadline = rlock_now_ms() + timeout_ms;
  for (;;) {
    fh_event_t e;
    while (ev_take(-1, HK_ENTER, &e)) {
      if (mask & (1u << e.worker)) return e.worker;
      fh_send(p, e.worker, FH_CMD_EXIT);
    }
    int64_t left = deadline - rlock_now_ms();
    if (left <= 0)
      th_fail(__FILE__, __LINE__, "no worker of mask 0x%x entered within %lld ms", mask, (long long)timeout_ms);
    ev_read(p, left < 50 ? left : 50);
  }
}

typedef struct hold_through {
  fh_pool_t *p;
  int w, renewed, lost;
  int64_t after_ms, asked_ms;
} hold_through_t;

static int hold_settled(void *arg) {
  hold_through_t *h = arg;
  fh_event_t e;
  if (ev_take(h->w, HK_LOST, &e)) return h->lost = 1;
  while (ev_take(h->w, HK_VALID, &e)) {
    if (e.rc != 0) return h->lost = 1;
    if (e.value > h->after_ms) return h->renewed = 1;
  }
  if (rlock_now_ms() - h->asked_ms >= 200) {
    fh_send(h->p, h->w, FH_CMD_VALID);
    h->asked_ms = rlock_now_ms();
  }
  return 0;
}

int fh_hold_through(fh_pool_t *p, int w, int64_t after_ms, int64_t timeout_ms) {
  hold_through_t h = {p, w, 0, 0, after_ms, 0};
  if (!fh_drive(p, w, hold_settled, &h, timeout_ms))
    th_fail(__FILE__, __LINE__, "worker %d: hold neither renewed past %lld nor reported lost within %lld ms", w,
            (long long)after_ms, (long long)timeout_ms);
  fh_send(p, w, FH_CMD_EXIT);
  return h.renewed;
}

int fh_holder_at(const fh_pool_t *p, const char *name, int64_t t_ns) {
  int inside[FH_MAX_WORKERS] = {0};
  size_t len = strlen(name);
  FILE *f = fopen(p->hist_path, "rb");
  if (!f) th_fail(__FILE__, __LINE__, "cannot read %s", p->hist_path);
  hist_rec_t r;
  while (fread(&r, sizeof r, 1, f) == 1) {
    if (r.t_ns >= t_ns || r.worker >= FH_MAX_WORKERS) continue;
    int mine = r.name_len == len && memcmp(r.name, name, len) == 0;
    if (r.kind == HK_DIED) inside[r.worker] = 0;
    else if (mine && r.kind == HK_ENTER) inside[r.worker] = 1;
    else if (mine && r.kind == HK_EXIT) inside[r.worker] = 0;
  }
  fclose(f);
  for (int i = 0; i < FH_MAX_WORKERS; i++)
    if (inside[i]) return i;
  return -1;
}

void fh_violations_split(const hist_report_t *rep, int holder, int64_t from_ns, int64_t to_ns, size_t *inside,
                         size_t *outside) {
  *inside = *outside = 0;
  for (size_t i = 0; i < rep->nlist; i++) {
    const hist_overlap_t *o = &rep->list[i];
    if (o->permitted) continue;
    if (o->a.worker == holder && o->b.grant_ns >= from_ns && o->b.grant_ns <= to_ns) (*inside)++;
    else (*outside)++;
  }
}

static int nolock_open(fh_worker_ctx_t *w) { return 0; }
static int nolock_valid(fh_worker_ctx_t *w, int64_t *out) {
  *out = rlock_now_ms() + 3600 * 1000;
  return 0;
}
static int nolock_acquire(fh_worker_ctx_t *w, int64_t wait_ms, int64_t lease_ms, int64_t *vu, uint64_t *token) {
  *token = 0;
  return nolock_valid(w, vu);
}
static int nolock_release(fh_worker_ctx_t *w) { return 0; }
static void nolock_close(fh_worker_ctx_t *w) {}
const fh_kind_t fh_kind_nolock = {"broken-nolock",
                                  HIST_MUTEX_LEASE,
                                  nolock_open,
                                  nolock_acquire,
                                  nolock_valid,
                                  nolock_release,
                                  nolock_close,
                                  NULL,
                                  0};

static const fh_kind_t fh_kind_semaphore_release2; /* below */

const fh_kind_t *fh_kind_or_mutant(const fh_kind_t *k) {
  const char *kind = getenv("FH_KIND"); /* another kind of fh_kinds[] by name (FH_KIND=fair) */
  for (const fh_kind_t *const *o = fh_kinds; kind && *o; o++)
    if (strcmp((*o)->name, kind) == 0) {
      printf("# FH_KIND=%s\n", kind);
      k = *o;
    }
  for (const fh_kind_t *const *o = fh_kinds_family; kind && *o; o++) /* FH_KIND=pes */
    if (strcmp((*o)->name, kind) == 0) {
      printf("# FH_KIND=%s\n", kind);
      k = *o;
    }
  const char *m = getenv("FH_MUTATE");
  if (m && strcmp(m, "nolock") == 0) {
    printf("# MUTATION: FH_MUTATE=nolock: the workers take no lock (this run must fail)\n");
    return &fh_kind_nolock;
  }
  if (m && strcmp(m, "release2") == 0 && k == &fh_kind_semaphore) {
    printf("# MUTATION: FH_MUTATE=release2: each release gives 2 permits back (this run must fail)\n");
    return &fh_kind_semaphore_release2;
  }
  if (m && strcmp(m, "unfair") == 0 && k == &fh_kind_fair) {
    printf("# MUTATION: FH_MUTATE=unfair: the fair row on the reentrant lock (its FIFO check must fail)\n");
    return &fh_kind_reentrant;
  }
  return k;
}

int fh_fifo_row(void) {
  const char *kind = getenv("FH_KIND");
  return kind && strcmp(kind, "fair") == 0;
}

/* ------------------------------------------------------------ the family's other objects */

/* A section that holds no lease (a plain semaphore permit, a latch step):
 * never stale. */
static int forever_valid(fh_worker_ctx_t *w, int64_t *out) {
  (void)w;
  *out = rlock_now_ms() + 3600 * 1000;
  return 0;
}
static int no_release(fh_worker_ctx_t *w) {
  (void)w;
  return 0;
}

static int sem_open(fh_worker_ctx_t *w) {
  rlock_semaphore_t *s = NULL;
  int rc = rlock_semaphore_new(w->client, w->spec->lock_name, strlen(w->spec->lock_name), &s);
  w->extra = s;
  return rc;
}
static int sem_acquire(fh_worker_ctx_t *w, int64_t wait_ms, int64_t lease_ms, int64_t *vu, uint64_t *token) {
  (void)lease_ms;
  *vu = 0, *token = 0;
  return rlock_semaphore_acquire(w->extra, 1, wait_ms, NULL);
}
static int sem_release(fh_worker_ctx_t *w) { return rlock_semaphore_release(w->extra, 1, NULL); }
static void sem_close(fh_worker_ctx_t *w) {
  rlock_semaphore_free(w->extra);
  w->extra = NULL;
}
const fh_kind_t fh_kind_semaphore = {"semaphore", HIST_PERMITS,  sem_open, sem_acquire, forever_valid, sem_release,
                                     sem_close,   "redisson_sc", 0};
/* A broken semaphore (FH_MUTATE=release2, with FH_KIND=semaphore): each
 * release gives 2 permits back, so permits are counted twice. */
static int sem_release2(fh_worker_ctx_t *w) { return rlock_semaphore_release(w->extra, 2, NULL); }
static const fh_kind_t fh_kind_semaphore_release2 = {"semaphore-mutant-release-twice",
                                                     HIST_PERMITS,
                                                     sem_open,
                                                     sem_acquire,
                                                     forever_valid,
                                                     sem_release2,
                                                     sem_close,
                                                     "redisson_sc",
                                                     0};
int fh_kind_is_semaphore(const fh_kind_t *k) { return k->open == sem_open; }

typedef struct pes_w {
  rlock_permits_t *s;
  char id[RLOCK_PERMIT_ID_LEN + 1];
} pes_w_t;
static int pes_open(fh_worker_ctx_t *w) {
  pes_w_t *p = calloc(1, sizeof *p);
  if (!p) return RLOCK_ENOMEM;
  w->extra = p;
  return rlock_permits_new(w->client, w->spec->lock_name, strlen(w->spec->lock_name), &p->s);
}
static int pes_valid(fh_worker_ctx_t *w, int64_t *out) {
  pes_w_t *p = w->extra;
  return rlock_permits_valid_until(p->s, p->id, out);
}
static int pes_acquire(fh_worker_ctx_t *w, int64_t wait_ms, int64_t lease_ms, int64_t *vu, uint64_t *token) {
  pes_w_t *p = w->extra;
  *vu = 0, *token = 0;
  int rc = rlock_permits_acquire(p->s, wait_ms, lease_ms, NULL, p->id);
  if (rc == 0 && pes_valid(w, vu) != 0) *vu = 0;
  return rc;
}
static int pes_release(fh_worker_ctx_t *w) {
  pes_w_t *p = w->extra;
  return rlock_permits_release(p->s, p->id);
}
static void pes_close(fh_worker_ctx_t *w) {
  pes_w_t *p = w->extra;
  rlock_permits_free(p->s);
  free(p);
  w->extra = NULL;
}
const fh_kind_t fh_kind_pes = {"permit-expirable", HIST_PERMITS,  pes_open, pes_acquire, pes_valid, pes_release,
                               pes_close,          "redisson_sc", 0};

/* The latch named by name up to its last ':'. */
static size_t latch_len(const char *name) {
  const char *c = strrchr(name, ':');
  return c ? (size_t)(c - name) : strlen(name);
}
static int latch_open(fh_worker_ctx_t *w) {
  rlock_latch_t *l = NULL;
  int rc = rlock_latch_new(w->client, w->spec->lock_name, latch_len(w->spec->lock_name), &l);
  w->extra = l;
  return rc;
}
static int latch_down(fh_worker_ctx_t *w, int64_t wait_ms, int64_t lease_ms, int64_t *vu, uint64_t *token) {
  (void)wait_ms, (void)lease_ms;
  int64_t left = 0;
  *vu = 0, *token = 0;
  return rlock_latch_count_down(w->extra, &left);
}
static int latch_await(fh_worker_ctx_t *w, int64_t wait_ms, int64_t lease_ms, int64_t *vu, uint64_t *token) {
  (void)lease_ms;
  *vu = 0, *token = 0;
  return rlock_latch_await(w->extra, wait_ms, NULL);
}
static void latch_close(fh_worker_ctx_t *w) {
  rlock_latch_free(w->extra);
  w->extra = NULL;
}
const fh_kind_t fh_kind_latch_down = {"latch-count-down",
                                      HIST_PERMITS,
                                      latch_open,
                                      latch_down,
                                      forever_valid,
                                      no_release,
                                      latch_close,
                                      "redisson_countdownlatch__channel",
                                      0};
const fh_kind_t fh_kind_latch_await = {"latch-await",
                                       HIST_PERMITS,
                                       latch_open,
                                       latch_await,
                                       forever_valid,
                                       no_release,
                                       latch_close,
                                       "redisson_countdownlatch__channel",
                                       1};
const fh_kind_t *const fh_kinds_family[] = {&fh_kind_semaphore, &fh_kind_pes, &fh_kind_latch_down, &fh_kind_latch_await,
                                            NULL};

void fh_family_set(const char *url, const fh_kind_t *k, const char *name, int64_t n) {
  rlock_client_t *c = fh_client(url, 0, 0, -1);
  int set = 0, rc;
  if (fh_kind_is_semaphore(k)) {
    rlock_semaphore_t *s;
    CHECK_OK(rlock_semaphore_new(c, name, strlen(name), &s));
    rc = rlock_semaphore_try_set_permits(s, n, &set);
    rlock_semaphore_free(s);
  } else if (k == &fh_kind_pes) {
    rlock_permits_t *s;
    CHECK_OK(rlock_permits_new(c, name, strlen(name), &s));
    rc = rlock_permits_try_set(s, n, &set);
    rlock_permits_free(s);
  } else {
    rlock_latch_t *l;
    CHECK_OK(rlock_latch_new(c, name, latch_len(name), &l));
    rc = rlock_latch_try_set_count(l, n, &set);
    rlock_latch_free(l);
  }
  rlock_client_free(c);
  CHECK_OK(rc);
  if (!set) { /* there from an earlier test: every permit back, or the count as wanted */
    int64_t now = fh_family_count(url, k, name, NULL);
    CHECK_MSG(now == n, "%s %s existed already with %lld (want %lld)", k->name, name, (long long)now, (long long)n);
  }
}

int64_t fh_family_count(const char *url, const fh_kind_t *k, const char *name, int64_t *taken) {
  rlock_client_t *c = fh_client(url, 0, 0, -1);
  int64_t v = -1;
  int rc;
  if (taken) *taken = 0;
  if (fh_kind_is_semaphore(k)) {
    rlock_semaphore_t *s;
    CHECK_OK(rlock_semaphore_new(c, name, strlen(name), &s));
    rc = rlock_semaphore_available(s, &v);
    rlock_semaphore_free(s);
  } else if (k == &fh_kind_pes) {
    rlock_permits_t *s;
    CHECK_OK(rlock_permits_new(c, name, strlen(name), &s));
    rc = rlock_permits_available(s, &v);
    if (!rc && taken) rc = rlock_permits_acquired(s, taken);
    rlock_permits_free(s);
  } else {
    rlock_latch_t *l;
    CHECK_OK(rlock_latch_new(c, name, latch_len(name), &l));
    rc = rlock_latch_get_count(l, &v);
    rlock_latch_free(l);
  }
  rlock_client_free(c);
  CHECK_OK(rc);
  return v;
}

int fh_check_permits(fh_pool_t *p, int permits, hist_report_t *rep) {
  hist_check_opts_t o = {.mode = HIST_PERMITS, .permits = permits};
  int v = hist_check_file(p->hist_path, &o, rep);
  hist_report_print(stdout, rep);
  if (rep->violations) dump_violations(p, rep);
  return v;
}

typedef struct entries {
  fh_pool_t *p;
  size_t n;
  int64_t since_ns;
} entries_t;
static int enough_entries(void *arg) {
  entries_t *e = arg;
  return fh_count_events(e->p, -1, HK_ENTER, e->since_ns) >= e->n;
}

void fh_drive_entries(fh_pool_t *p, int keep, size_t n, int64_t since_ns, int64_t timeout_ms, const char *when) {
  entries_t e = {p, n, since_ns};
  if (!fh_drive(p, keep, enough_entries, &e, timeout_ms))
    th_fail(__FILE__, __LINE__, "%s: %zu of %zu entries within %lld ms", when,
            fh_count_events(p, -1, HK_ENTER, since_ns), n, (long long)timeout_ms);
}
