/* harness.c -- the test harness of the rlock suite (see harness.h): test
 * framework, redis-server processes started on loopback with random ports
 * in temp dirs and killed on every exit path (atexit, fatal signals, and
 * PR_SET_PDEATHSIG as the last resort), the raw hiredis client, INFO
 * commandstats parsing and the TLS test CA. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rlock.h"

#define MAX_SERVERS 16
#define MAX_DIRS 32

static pid_t owner_pid;
static th_server_t *servers[MAX_SERVERS];
static char dirs[MAX_DIRS][256];
static int ndirs;
static atomic_int cleaning;
static int tests_run;

/* ------------------------------------------------------------ cleanup */

/* Async-signal-safe: kill and reap every server, remove the temp dirs. */
static void cleanup_all(int from_signal) {
  if (getpid() != owner_pid || atomic_exchange(&cleaning, 1)) return;
  for (int i = 0; i < MAX_SERVERS; i++) {
    th_server_t *s = servers[i];
    if (s && s->pid > 0) {
      kill(s->pid, SIGKILL);
      waitpid(s->pid, NULL, 0);
      s->pid = 0;
    }
  }
  for (int i = 0; i < ndirs; i++) {
    if (!dirs[i][0]) continue;
    if (from_signal) {
      pid_t p = fork();
      if (p == 0) {
        char *const argv[] = {"rm", "-rf", dirs[i], NULL};
        execv("/bin/rm", argv);
        _exit(127);
      }
      if (p > 0) waitpid(p, NULL, 0);
    } else {
      const char *argv[] = {"rm", "-rf", dirs[i], NULL};
      th_exec(argv);
    }
    dirs[i][0] = 0;
  }
}

static void at_exit(void) { cleanup_all(0); }

static void on_signal(int sig) {
  if (sig == SIGALRM) {
    static const char msg[] = "FAIL: test binary timed out (alarm)\n";
    if (write(2, msg, sizeof msg - 1) < 0) { /* nothing to do */
    }
    cleanup_all(1);
    _exit(1);
  }
  cleanup_all(1);
  signal(sig, SIG_DFL);
  raise(sig);
}

void th_init(int argc, char **argv, int timeout_s) {
  (void)argc;
  (void)argv;
  owner_pid = getpid();
  setvbuf(stdout, NULL, _IOLBF, 0);
  atexit(at_exit);
  int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGABRT, SIGALRM};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) signal(sigs[i], on_signal);
  signal(SIGPIPE, SIG_IGN);
  alarm((unsigned)timeout_s);
}

/* ------------------------------------------------------------ framework */

void th_fail(const char *file, int line, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "FAIL %s:%d: %s%s\n", file, line, msg, getpid() != owner_pid ? " (in a child process)" : "");
  fflush(stderr);
  fflush(stdout);
  cleanup_all(0);
  _exit(1);
}

void th_check_rc(int got, int want, const char *expr, const char *file, int line) {
  if (got == want) return;
  th_fail(file, line, "%s returned %s (%d), want %s (%d); last error: %s", expr, rlock_err_name(got), got,
          rlock_err_name(want), want, rlock_last_error());
}

void th_run(const char *name, void (*fn)(void)) {
  int64_t t0 = th_now_ms();
  printf("# %s\n", name);
  fn();
  tests_run++;
  printf("ok %d - %s (%lld ms)\n", tests_run, name, (long long)(th_now_ms() - t0));
}

int th_done(void) {
  printf("# all %d tests passed\n", tests_run);
  return 0;
}

/* ------------------------------------------------------------ time, misc */

int64_t th_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void th_sleep_ms(int64_t ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

pid_t th_gettid(void) { return (pid_t)syscall(SYS_gettid); }

int th_wait_until(int (*pred)(void *), void *arg, int64_t timeout_ms) {
  int64_t deadline = th_now_ms() + timeout_ms;
  int v;
  while (!(v = pred(arg)) && th_now_ms() < deadline) th_sleep_ms(5);
  return v;
}

pid_t th_fork(void) {
  pid_t parent = getpid();
  fflush(stdout);
  fflush(stderr);
  pid_t p = fork();
  if (p < 0) th_fail(__FILE__, __LINE__, "fork: %s", strerror(errno));
  if (p == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    alarm(0);
  }
  return p;
}

int th_wait_child(pid_t pid) {
  int st;
  while (waitpid(pid, &st, 0) < 0) {
    if (errno != EINTR) th_fail(__FILE__, __LINE__, "waitpid: %s", strerror(errno));
  }
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  return 128 + WTERMSIG(st);
}

const char *th_tempdir(void) {
  /* a slot a stopped server's directory left free first (th_server_stop) */
  int i = 0;
  while (i < ndirs && dirs[i][0]) i++;
  if (i == ndirs && ndirs >= MAX_DIRS) th_fail(__FILE__, __LINE__, "too many temp dirs");
  const char *base = getenv("TMPDIR");
  if (!base || !*base || strlen(base) > 60) base = "/tmp";
  snprintf(dirs[i], sizeof dirs[i], "%s/rlock-test-XXXXXX", base);
  if (!mkdtemp(dirs[i])) th_fail(__FILE__, __LINE__, "mkdtemp: %s", strerror(errno));
  if (i == ndirs) ndirs++;
  return dirs[i];
}

int th_exec(const char *const *argv) {
  pid_t p = fork();
  if (p < 0) th_fail(__FILE__, __LINE__, "fork: %s", strerror(errno));
  if (p == 0) {
    int fd = open("/dev/null", O_RDWR);
    if (fd >= 0) {
      dup2(fd, 0);
      dup2(fd, 1);
      dup2(fd, 2);
    }
    execvp(argv[0], (char *const *)argv);
    _exit(127);
  }
  int st;
  while (waitpid(p, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ------------------------------------------------------------ redis-server */

int th_free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || getsockname(fd, (struct sockaddr *)&a, &len) != 0)
    th_fail(__FILE__, __LINE__, "free port: %s", strerror(errno));
  close(fd);
  return ntohs(a.sin_port);
}

/* Runs argv (a redis-server) as a child that dies with this thread, reading
 * its output until a line containing ready shows. 0 (*pid set), or 1 if the
 * port was taken (the caller picks another); fails the test otherwise. */
int th_spawn_ready(const char *const *argv, const char *ready_text, pid_t *pid_out) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) th_fail(__FILE__, __LINE__, "pipe: %s", strerror(errno));
  pid_t parent = getpid();
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) th_fail(__FILE__, __LINE__, "fork: %s", strerror(errno));
  if (pid == 0) {
    /* Dies with the thread that started it, whatever happens to the test. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    dup2(p[1], 1);
    dup2(p[1], 2);
    execvp(argv[0], (char *const *)argv);
    _exit(127);
  }
  close(p[1]);
  *pid_out = pid;
  char out[16384];
  size_t len = 0;
  int64_t deadline = th_now_ms() + 20000;
  int ready = 0;
  while (!ready) {
    int64_t left = deadline - th_now_ms();
    struct pollfd pfd = {.fd = p[0], .events = POLLIN};
    if (left <= 0 || poll(&pfd, 1, (int)left) == 0) break;
    ssize_t r = read(p[0], out + len, sizeof out - 1 - len);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    len += (size_t)r;
    out[len] = 0;
    if (strstr(out, ready_text)) ready = 1;
    if (len >= sizeof out - 1) len = 0; /* keep reading; startup output is small */
  }
  /* From now on redis-server's log writes fail with EPIPE (it ignores SIGPIPE). */
  close(p[0]);
  if (ready) return 0;
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  *pid_out = 0;
  if (strstr(out, "Address already in use")) return 1;
  th_fail(__FILE__, __LINE__, "%s did not start:\n%s", argv[0], out);
}

/* Spawns redis-server and reads its output until it is ready. Returns 0, or
 * 1 if the port was taken (caller retries), failing the test otherwise. */
static int spawn(th_server_t *s) {
  char port[16], tport[16], sock[300];
  const char *argv[96];
  int n = 0;
  snprintf(port, sizeof port, "%d", s->port);
  snprintf(tport, sizeof tport, "%d", s->tls_port);
  snprintf(sock, sizeof sock, "%s/redis.sock", s->dir);
  argv[n++] = "redis-server";
  argv[n++] = "--port", argv[n++] = port;
  argv[n++] = "--bind", argv[n++] = "127.0.0.1";
  argv[n++] = "--save", argv[n++] = "";
  argv[n++] = "--dir", argv[n++] = s->dir;
  argv[n++] = "--appendonly", argv[n++] = s->opts.appendonly ? "yes" : "no";
  if (s->opts.appendonly) argv[n++] = "--appendfsync", argv[n++] = "always";
  if (s->opts.unixsocket) {
    argv[n++] = "--unixsocket", argv[n++] = sock;
    argv[n++] = "--unixsocketperm", argv[n++] = "700";
  }
  if (s->opts.tls) {
    const th_tls_certs_t *c = th_tls_certs();
    argv[n++] = "--tls-port", argv[n++] = tport;
    argv[n++] = "--tls-cert-file", argv[n++] = c->server_cert;
    argv[n++] = "--tls-key-file", argv[n++] = c->server_key;
    argv[n++] = "--tls-ca-cert-file", argv[n++] = c->ca;
    argv[n++] = "--tls-auth-clients", argv[n++] = s->opts.tls_auth_clients ? "yes" : "no";
  }
  for (const char *const *e = s->opts.extra_args; e && *e && n < 94; e++) argv[n++] = *e;
  argv[n] = NULL;

  return th_spawn_ready(argv, "Ready to accept connections", &s->pid);
}

th_server_t *th_server_start(const th_server_opts_t *opts) {
  th_server_t *s = calloc(1, sizeof *s);
  int slot = -1;
  for (int i = 0; i < MAX_SERVERS && slot < 0; i++)
    if (!servers[i]) slot = i;
  if (!s || slot < 0) th_fail(__FILE__, __LINE__, "too many servers");
  if (opts) s->opts = *opts;
  snprintf(s->dir, sizeof s->dir, "%s", th_tempdir());
  snprintf(s->sock, sizeof s->sock, "%s/redis.sock", s->dir);
  servers[slot] = s;
  for (int attempt = 0;; attempt++) {
    s->port = s->opts.port ? s->opts.port : th_free_port();
    s->tls_port = s->opts.tls ? th_free_port() : 0;
    if (spawn(s) == 0) break;
    if (s->opts.port) { /* the port asked for is taken */
      servers[slot] = NULL;
      free(s);
      return NULL;
    }
    if (attempt == 10) th_fail(__FILE__, __LINE__, "no free port for redis-server");
  }
  snprintf(s->url, sizeof s->url, "redis://127.0.0.1:%d", s->port);
  snprintf(s->tls_url, sizeof s->tls_url, "rediss://127.0.0.1:%d", s->tls_port);
  return s;
}

static void drop_raw(th_server_t *s) {
  if (s->raw) redisFree(s->raw);
  s->raw = NULL;
}

void th_server_kill(th_server_t *s) {
  drop_raw(s);
  if (s->pid > 0) {
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
  }
  s->pid = 0;
}

void th_server_restart(th_server_t *s) {
  th_server_kill(s);
  for (int attempt = 0; spawn(s) != 0; attempt++) {
    if (attempt == 50) th_fail(__FILE__, __LINE__, "port %d stays taken", s->port);
    th_sleep_ms(100); /* the old socket is going away; nothing to wait on */
  }
}

void th_server_stop(th_server_t *s) {
  if (!s) return;
  th_server_kill(s);
  for (int i = 0; i < MAX_SERVERS; i++)
    if (servers[i] == s) servers[i] = NULL;
  for (int i = 0; i < ndirs; i++) {
    if (strcmp(dirs[i], s->dir) == 0) {
      const char *argv[] = {"rm", "-rf", dirs[i], NULL};
      th_exec(argv);
      dirs[i][0] = 0;
    }
  }
  free(s);
}

/* ------------------------------------------------------------ raw client */

redisContext *th_raw_connect(th_server_t *s) {
  struct timeval tv = {5, 0};
  redisContext *c = redisConnectWithTimeout("127.0.0.1", s->port, tv);
  if (!c || c->err) th_fail(__FILE__, __LINE__, "raw connect to %d: %s", s->port, c ? c->errstr : "oom");
  struct timeval cmd_tv = {15, 0};
  redisSetTimeout(c, cmd_tv);
  if (s->opts.raw_password) {
    redisReply *r = s->opts.raw_user ? redisCommand(c, "AUTH %s %s", s->opts.raw_user, s->opts.raw_password)
                                     : redisCommand(c, "AUTH %s", s->opts.raw_password);
    if (!r || r->type == REDIS_REPLY_ERROR) th_fail(__FILE__, __LINE__, "raw AUTH: %s", r ? r->str : c->errstr);
    freeReplyObject(r);
  }
  return c;
}

redisReply *th_cmdv(th_server_t *s, int argc, const char **argv, const size_t *lens) {
  if (!s->raw || s->raw->err) {
    drop_raw(s);
    s->raw = th_raw_connect(s);
  }
  redisReply *r = redisCommandArgv(s->raw, argc, argv, lens);
  if (!r && s->raw->err == REDIS_ERR_EOF) { /* the server closed it (a demotion kills clients): once more */
    drop_raw(s);
    s->raw = th_raw_connect(s);
    r = redisCommandArgv(s->raw, argc, argv, lens);
  }
  if (!r) th_fail(__FILE__, __LINE__, "raw %s: %s", argv[0], s->raw->errstr);
  return r;
}

static redisReply *vcmd(th_server_t *s, const char *arg0, va_list ap) {
  const char *argv[64];
  int n = 0;
  for (const char *a = arg0; a && n < 64; a = va_arg(ap, const char *)) argv[n++] = a;
  return th_cmdv(s, n, argv, NULL);
}

redisReply *th_cmd(th_server_t *s, const char *arg0, ...) {
  va_list ap;
  va_start(ap, arg0);
  redisReply *r = vcmd(s, arg0, ap);
  va_end(ap);
  return r;
}

void th_reply_free(redisReply *r) {
  if (r) freeReplyObject(r);
}

long long th_cmd_int(th_server_t *s, const char *arg0, ...) {
  va_list ap;
  va_start(ap, arg0);
  redisReply *r = vcmd(s, arg0, ap);
  va_end(ap);
  if (r->type != REDIS_REPLY_INTEGER)
    th_fail(__FILE__, __LINE__, "raw %s: not an integer reply (type %d: %s)", arg0, r->type, r->str ? r->str : "");
  long long v = r->integer;
  freeReplyObject(r);
  return v;
}

long long th_cmdstat(th_server_t *s, const char *cmd) {
  redisReply *r = th_cmd(s, "INFO", "commandstats", NULL);
  if (r->type != REDIS_REPLY_STRING) th_fail(__FILE__, __LINE__, "INFO commandstats");
  char pat[128];
  snprintf(pat, sizeof pat, "cmdstat_%s:calls=", cmd);
  const char *p = strstr(r->str, pat);
  long long v = p ? strtoll(p + strlen(pat), NULL, 10) : 0;
  freeReplyObject(r);
  return v;
}

long long th_numsub(th_server_t *s, const char *channel) {
  redisReply *r = th_cmd(s, "PUBSUB", "NUMSUB", channel, NULL);
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[1]->type != REDIS_REPLY_INTEGER)
    th_fail(__FILE__, __LINE__, "PUBSUB NUMSUB: unexpected reply");
  long long v = r->element[1]->integer;
  freeReplyObject(r);
  return v;
}

char *th_cmd_str(th_server_t *s, const char *arg0, ...) {
  va_list ap;
  va_start(ap, arg0);
  redisReply *r = vcmd(s, arg0, ap);
  va_end(ap);
  if (r->type == REDIS_REPLY_NIL) {
    freeReplyObject(r);
    return NULL;
  }
  if (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS)
    th_fail(__FILE__, __LINE__, "raw %s: not a string reply (type %d: %s)", arg0, r->type, r->str ? r->str : "");
  char *v = strdup(r->str);
  freeReplyObject(r);
  return v;
}

long long th_get_num(th_server_t *s, const char *key) {
  char *v = th_cmd_str(s, "GET", key, NULL);
  if (!v) return -1000;
  long long n = strtoll(v, NULL, 10);
  free(v);
  return n;
}

long long th_hget_num(th_server_t *s, const char *key, const char *field) {
  char *v = th_cmd_str(s, "HGET", key, field, NULL);
  long long n = v ? strtoll(v, NULL, 10) : -1000;
  free(v);
  return n;
}

/* ------------------------------------------------------------ TCP state */

int th_tcp_queues(int local_port, int remote_port, long *tx, long *rx) {
  FILE *f = fopen("/proc/net/tcp", "r");
  char line[512];
  int found = 0;
  if (!f) th_fail(__FILE__, __LINE__, "/proc/net/tcp: %s", strerror(errno));
  while (!found && fgets(line, sizeof line, f)) {
    unsigned lp = 0, rp = 0;
    unsigned long t = 0, r = 0;
    if (sscanf(line, " %*d: %*x:%x %*x:%x %*x %lx:%lx", &lp, &rp, &t, &r) != 4) continue;
    if ((int)lp != local_port || (int)rp != remote_port) continue;
    found = 1;
    if (tx) *tx = (long)t;
    if (rx) *rx = (long)r;
  }
  fclose(f);
  return found;
}

int th_local_port(int fd) {
  struct sockaddr_in a;
  socklen_t len = sizeof a;
  if (getsockname(fd, (struct sockaddr *)&a, &len) != 0 || a.sin_family != AF_INET) return 0;
  return ntohs(a.sin_port);
}

/* ------------------------------------------------------------ rlock helpers */

rlock_client_t *th_client(const char *url, int64_t watchdog_ms) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = url;
  if (watchdog_ms > 0) o.watchdog_timeout_ms = watchdog_ms;
  rlock_client_t *c = NULL;
  int rc = rlock_client_new(&c, &o);
  if (rc != 0) th_fail(__FILE__, __LINE__, "rlock_client_new(%s): %s: %s", url, rlock_err_name(rc), rlock_last_error());
  return c;
}

rlock_client_t *th_client_timeouts(const char *url, int64_t command_timeout_ms, int retry_attempts) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = url;
  o.command_timeout_ms = command_timeout_ms;
  o.retry_attempts = retry_attempts;
  o.dead_after_timeouts = 0;
  rlock_client_t *c = NULL;
  int rc = rlock_client_new(&c, &o);
  if (rc != 0) th_fail(__FILE__, __LINE__, "rlock_client_new(%s): %s: %s", url, rlock_err_name(rc), rlock_last_error());
  return c;
}

rlock_lock_t *th_lock(rlock_client_t *c, const char *name) {
  rlock_lock_t *l = NULL;
  int rc = rlock_lock_new(c, name, strlen(name), &l);
  if (rc != 0) th_fail(__FILE__, __LINE__, "rlock_lock_new(%s): %s", name, rlock_err_name(rc));
  return l;
}

typedef struct stat_wait {
  rlock_client_t *c;
  size_t offset;
  uint64_t at_least;
} stat_wait_t;

static int stat_reached(void *arg) {
  stat_wait_t *w = arg;
  rlock_stats_t st;
  rlock_client_stats(w->c, &st);
  uint64_t v;
  memcpy(&v, (char *)&st + w->offset, sizeof v);
  return v >= w->at_least;
}

int th_stat_reaches(rlock_client_t *c, size_t field_offset, uint64_t at_least, int64_t timeout_ms) {
  stat_wait_t w = {c, field_offset, at_least};
  return th_wait_until(stat_reached, &w, timeout_ms);
}

void th_lost_record(const char *name, size_t len, uint64_t owner, rlock_lost_reason_t reason, void *lost) {
  th_lost_t *l = lost;
  (void)owner;
  pthread_mutex_lock(&l->mu);
  l->calls++;
  l->reason = reason;
  snprintf(l->name, sizeof l->name, "%.*s", (int)len, name);
  pthread_mutex_unlock(&l->mu);
}

int th_lost_once(void *lost) {
  th_lost_t *l = lost;
  pthread_mutex_lock(&l->mu);
  int n = l->calls;
  pthread_mutex_unlock(&l->mu);
  return n >= 1;
}

void th_lost_reset(th_lost_t *l) {
  pthread_mutex_lock(&l->mu);
  l->calls = 0;
  pthread_mutex_unlock(&l->mu);
}

const char *th_owner_id(rlock_client_t *c, uint64_t owner, char *buf, size_t len) {
  if (owner & RLOCK_OWNER_THREAD)
    snprintf(buf, len, "%s:%llu", rlock_client_id(c), (unsigned long long)(owner & ~RLOCK_OWNER_THREAD));
  else snprintf(buf, len, "%s:owner-%llu", rlock_client_id(c), (unsigned long long)owner);
  return buf;
}

/* ------------------------------------------------------------ TLS */

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f || fputs(text, f) < 0 || fclose(f) != 0) th_fail(__FILE__, __LINE__, "write %s: %s", path, strerror(errno));
}

static void gen_leaf(const char *dir, const char *name, const char *ext, const th_tls_certs_t *c, char *cert, char *key,
                     const char *serial) {
  char csr[300], extf[300];
  snprintf(cert, 300, "%s/%s.crt", dir, name);
  snprintf(key, 300, "%s/%s.key", dir, name);
  snprintf(csr, sizeof csr, "%s/%s.csr", dir, name);
  snprintf(extf, sizeof extf, "%s/%s.ext", dir, name);
  write_file(extf, ext);
  const char *req[] = {"openssl",       "req",     "-newkey", "ec",   "-pkeyopt", "ec_paramgen_curve:prime256v1",
                       "-nodes",        "-keyout", key,       "-out", csr,        "-subj",
                       "/CN=localhost", NULL};
  const char *sign[] = {"openssl",     "x509", "-req",  "-in", csr,    "-CA", c->ca,      "-CAkey", NULL /* ca key */,
                        "-set_serial", serial, "-days", "2",   "-out", cert,  "-extfile", extf,     NULL};
  char cakey[300];
  snprintf(cakey, sizeof cakey, "%s/ca.key", dir);
  sign[8] = cakey;
  if (th_exec(req) != 0 || th_exec(sign) != 0)
    th_fail(__FILE__, __LINE__, "openssl: cannot make the %s certificate", name);
}

const th_tls_certs_t *th_tls_certs(void) {
  static th_tls_certs_t c;
  static int done;
  if (done) return &c;
  const char *dir = th_tempdir();
  char cakey[300];
  snprintf(c.ca, sizeof c.ca, "%s/ca.crt", dir);
  snprintf(cakey, sizeof cakey, "%s/ca.key", dir);
  const char *ca[] = {"openssl",
                      "req",
                      "-x509",
                      "-newkey",
                      "ec",
                      "-pkeyopt",
                      "ec_paramgen_curve:prime256v1",
                      "-nodes",
                      "-keyout",
                      cakey,
                      "-out",
                      c.ca,
                      "-days",
                      "2",
                      "-subj",
                      "/CN=rlock test CA",
                      "-addext",
                      "basicConstraints=critical,CA:TRUE",
                      "-addext",
                      "keyUsage=critical,keyCertSign,cRLSign",
                      NULL};
  if (th_exec(ca) != 0) th_fail(__FILE__, __LINE__, "openssl: cannot make the test CA");
  gen_leaf(dir, "server",
           "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
           "keyUsage=critical,digitalSignature,keyEncipherment\n"
           "extendedKeyUsage=serverAuth,clientAuth\n",
           &c, c.server_cert, c.server_key, "2");
  gen_leaf(dir, "client",
           "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
           "extendedKeyUsage=clientAuth\n",
           &c, c.client_cert, c.client_key, "3");
  done = 1;
  return &c;
}

/* ------------------------------------------------------------ paused clients, script calls */

int th_client_blocked(th_server_t *s, const char *client_name) {
  char name[160];
  snprintf(name, sizeof name, "name=%s ", client_name);
  char *list = th_cmd_str(s, "CLIENT", "LIST", NULL);
  int found = 0;
  for (char *line = list; line && *line && !found;) {
    char *eol = strchr(line, '\n');
    if (eol) *eol = 0;
    found = strstr(line, name) && strstr(line, " flags=b");
    line = eol ? eol + 1 : NULL;
  }
  free(list);
  return found;
}

int th_clients_named(th_server_t *s, const char *client_name) {
  char name[160];
  snprintf(name, sizeof name, "name=%s ", client_name);
  char *list = th_cmd_str(s, "CLIENT", "LIST", NULL);
  int n = 0;
  for (const char *p = list; p && (p = strstr(p, name)); p += 5) n++;
  free(list);
  return n;
}

long long th_scripts_run(th_server_t *s) { return th_cmdstat(s, "evalsha") + th_cmdstat(s, "eval"); }

void th_exit_by_exec(int rc) {
  char code[16];
  snprintf(code, sizeof code, "%d", rc);
  execl("/bin/sh", "sh", "-c", "exit $0", code, (char *)NULL);
  _exit(rc);
}

/* The member a MultiLock over (name_a on url_a, name_b on url_b) takes
 * first: both are held by another owner, so a try with no wait fails on
 * the first member in its order and never tries the other ('a' or 'b': the
 * member whose client sent an acquire). */
char th_multilock_first_taken(const char *url_a, const char *name_a, const char *url_b, const char *name_b) {
  rlock_client_t *ca = th_client(url_a, 0), *cb = th_client(url_b, 0);
  rlock_lock_t *a = th_lock(ca, name_a), *b = th_lock(cb, name_b);
  rlock_lock_t *members[2] = {a, b};
  rlock_multilock_t *m = NULL;
  CHECK_OK(rlock_multilock_new(&m, members, 2));
  CHECK_RC(rlock_multilock_acquire(m, RLOCK_OWNER_SELF, 0, RLOCK_LEASE_WATCHDOG, NULL), RLOCK_EBUSY);
  rlock_stats_t sa, sb;
  rlock_client_stats(ca, &sa);
  rlock_client_stats(cb, &sb);
  char which = sa.acquire_attempts && !sb.acquire_attempts   ? 'a'
               : sb.acquire_attempts && !sa.acquire_attempts ? 'b'
                                                             : '?';
  rlock_multilock_free(m);
  rlock_lock_free(a), rlock_lock_free(b);
  rlock_client_free(ca), rlock_client_free(cb);
  return which;
}

void th_settled(rlock_client_t *c) {
  rlock_lock_t *b = th_lock(c, "th:settled");
  for (int i = 0; i < 100; i++) {
    rlock_stats_t x, y;
    int on = -1;
    rlock_client_stats(c, &x);
    int rc = rlock_lock_is_locked(b, &on);
    if (rc) th_fail(__FILE__, __LINE__, "th_settled: %s: %s", rlock_err_name(rc), rlock_last_error());
    rlock_client_stats(c, &y);
    if (y.commands_sent == x.commands_sent + 1) {
      rlock_lock_free(b);
      return;
    }
  }
  th_fail(__FILE__, __LINE__, "th_settled: the client kept sending");
}
