/* args.c -- helpers shared by the rlock sub-commands: error and usage
 * messages, option values (durations, counts, connection and TLS options),
 * mapping of rlock error codes to sysexits exit codes, and opening a client /
 * a lock with clear errors. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli.h"

void cli_err(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("rlock: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

int cli_usage(const char *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs(cmd ? "rlock " : "rlock", stderr);
  fputs(cmd ? cmd : "", stderr);
  fputs(": ", stderr);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\nTry 'rlock %s%s--help'.\n", cmd ? cmd : "", cmd ? " " : "");
  va_end(ap);
  return EX_USAGE;
}

int cli_bad_option(const char *cmd, int c, char **argv) {
  extern int optind, optopt;
  if (c == ':') return cli_usage(cmd, "option '%s' needs a value", argv[optind - 1]);
  if (optopt) return cli_usage(cmd, "unknown option '-%c'", optopt);
  return cli_usage(cmd, "unknown option '%s'", argv[optind - 1]);
}

int cli_duration(const char *cmd, const char *opt, const char *s, int64_t min_ms, int64_t *out) {
  if (rlock_duration_parse(s, out) != 0 || *out < 0)
    return cli_usage(cmd, "bad duration '%s' for %s (use e.g. 500ms, 10s, 2m)", s, opt);
  if (*out < min_ms)
    return min_ms == 1 ? cli_usage(cmd, "%s must be more than 0", opt)
                       : cli_usage(cmd, "%s must be at least %lldms", opt, (long long)min_ms);
  if (*out > CLI_DURATION_MAX)
    return cli_usage(cmd, "%s must be at most %llds (365 days)", opt, (long long)(CLI_DURATION_MAX / 1000));
  return 0;
}

/* A file option's value must name a readable file. */
static int readable(const char *cmd, const char *opt, const char *file, const char **out) {
  if (access(file, R_OK) != 0) return cli_usage(cmd, "cannot read %s %s: %s", opt, file, strerror(errno));
  *out = file;
  return 0;
}

/* The URL given with -u is kept in a copy, and its password is wiped from
 * the command line itself (the argument is overwritten with the redacted
 * URL): /proc/PID/cmdline, which `ps` shows to every user, would otherwise
 * show it for as long as rlock runs (an `exec` can run for hours). */
static int take_url(cli_global_t *g, char *arg) {
  size_t n = strlen(arg), cap = 3 * n + 4;
  char *copy = strdup(arg), *shown = malloc(cap);
  if (!copy || !shown) {
    free(copy), free(shown);
    cli_err("out of memory");
    return EX_OSERR;
  }
  rlock_url_redact(arg, shown, cap);
  if (!strstr(arg, "://")) { /* no scheme: maybe a password in the wrong place */
    memset(arg, 0, n);
  } else if (strcmp(shown, arg) != 0) { /* a password: never longer than the original once cut */
    memset(arg, 0, n);
    memcpy(arg, shown, strlen(shown) < n ? strlen(shown) : n);
  }
  free(shown);
  if (g->nurls == CLI_URLS_MAX) {
    free(copy);
    return cli_usage(NULL, "at most %d -u URLs", CLI_URLS_MAX);
  }
  /* every -u is kept for the process's lifetime (exec --redlock uses them
   * all); the last one is the URL of the other commands */
  static char *kept[CLI_URLS_MAX];
  g->url = g->urls[g->nurls] = kept[g->nurls] = copy;
  g->nurls++;
  return 0;
}

/* --replica-sync POLICY: off, one, majority, all. */
static int replica_sync(const char *cmd, const char *arg, int *out) {
  static const char *names[] = {"off", "one", "majority", "all"};
  for (int i = 0; i < 4; i++)
    if (!strcmp(arg, names[i])) {
      *out = RLOCK_REPLICA_SYNC_OFF + i + 1;
      return 0;
    }
  return cli_usage(cmd, "bad value '%s' for --replica-sync (off, one, majority or all)", arg);
}

int cli_connect_option(const char *cmd, cli_global_t *g, int c, char *arg, char **argv) {
  switch (c) {
  case 'u': return take_url(g, arg);
  case OPT_TLS_CA: return readable(cmd, "--tls-ca", arg, &g->tls_ca);
  case OPT_TLS_CERT: return readable(cmd, "--tls-cert", arg, &g->tls_cert);
  case OPT_TLS_KEY: return readable(cmd, "--tls-key", arg, &g->tls_key);
  case OPT_TLS_SERVER_NAME:
    if (!*arg) return cli_usage(cmd, "--tls-server-name must not be empty");
    g->tls_server_name = arg;
    return 0;
  case OPT_INSECURE: g->insecure = 1; return 0;
  case OPT_REPLICA_SYNC: return replica_sync(cmd, arg, &g->replica_sync);
  case OPT_REPLICA_SYNC_TIMEOUT:
    return cli_duration(cmd, "--replica-sync-timeout", arg, 1, &g->replica_sync_timeout_ms);
  default: return cli_bad_option(cmd, c, argv);
  }
}

/* The TLS options make sense only together and with a rediss:// URL. */
static int check_tls(const cli_global_t *g) {
  if (!g->tls_ca && !g->tls_cert && !g->tls_key && !g->tls_server_name && !g->insecure) return 0;
  if (strncasecmp(g->url, "rediss://", 9) != 0 && strncasecmp(g->url, "rediss+sentinel://", 18) != 0 &&
      strncasecmp(g->url, "rediss+cluster://", 17) != 0)
    return cli_usage(NULL, "TLS options need a rediss://, rediss+sentinel:// or rediss+cluster:// URL");
  if (!g->tls_cert != !g->tls_key) return cli_usage(NULL, "--tls-cert and --tls-key go together");
  if (g->insecure && (g->tls_ca || g->tls_server_name))
    return cli_usage(NULL, "--insecure verifies nothing: it excludes --tls-ca and --tls-server-name");
  return 0;
}

int cli_count(const char *cmd, const char *opt, const char *s, long min, long max, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < min || v > max)
    return cli_usage(cmd, "bad value '%s' for %s (a number from %ld to %ld)", s, opt, min, max);
  *out = v;
  return 0;
}

int cli_exit_for(int err) {
  switch (err) {
  case RLOCK_EURL:
  case RLOCK_EINVAL: return EX_USAGE;
  case RLOCK_ECONNECT:
  case RLOCK_EAUTH:
  case RLOCK_ETLS:
  case RLOCK_ETIMEDOUT:
  case RLOCK_ECONNLOST:
  case RLOCK_ECLOSED: return EX_UNAVAILABLE;
  case RLOCK_EBUSY:
  case RLOCK_ENOSYNC: return EX_TEMPFAIL;
  case RLOCK_ENOTLOCK: return EX_DATAERR;
  case RLOCK_ENOPERM: return EX_NOPERM;
  default: return EX_SOFTWARE;
  }
}

int cli_fail(int err, const char *what) {
  const char *brief = rlock_strerror(err), *detail = rlock_last_error();
  if (!detail || !*detail) cli_err("%s: %s", what, brief);
  else if (strncasecmp(detail, brief, strlen(brief)) == 0) /* the detail says it already */
    cli_err("%s: %s", what, detail);
  else cli_err("%s: %s (%s)", what, brief, detail);
  /* a Cluster node reached with a plain URL redirects every key */
  if (err == RLOCK_ESERVER && detail && (strstr(detail, "MOVED ") || strstr(detail, "ASK "))) {
    cli_err("the server is a Redis Cluster node: use a redis+cluster:// (or rediss+cluster://) URL");
    return EX_USAGE;
  }
  return cli_exit_for(err);
}

int cli_options(const cli_global_t *g, rlock_options_t *opts) {
  int ex = check_tls(g);
  if (ex) return ex;
  opts->url = g->url;
  opts->client_name = "rlock-cli";
  opts->tls_ca_file = g->tls_ca;
  opts->tls_cert_file = g->tls_cert;
  opts->tls_key_file = g->tls_key;
  opts->tls_server_name = g->tls_server_name;
  if (g->insecure) opts->tls_verify = 0;
  if (g->replica_sync) opts->replica_sync = g->replica_sync - 1;
  if (g->replica_sync_timeout_ms) opts->replica_sync_timeout_ms = g->replica_sync_timeout_ms;
  if (opts->replica_sync != RLOCK_REPLICA_SYNC_OFF && g->replica_sync_timeout_ms &&
      opts->replica_sync_timeout_ms >= opts->command_timeout_ms)
    return cli_usage(NULL, "--replica-sync-timeout must be less than the command timeout (%lldms)",
                     (long long)opts->command_timeout_ms);
  return 0;
}

int cli_connect(const cli_global_t *g, rlock_options_t *opts, rlock_client_t **out) {
  rlock_options_t defaults;
  if (!opts) {
    rlock_options_init(&defaults);
    opts = &defaults;
  }
  int ex = cli_options(g, opts);
  if (ex) return ex;
  int rc = rlock_client_new(out, opts);
  if (rc == 0) return 0;
  char shown[512];
  if (strstr(g->url, "://")) rlock_url_redact(g->url, shown, sizeof shown);
  else /* no scheme: maybe a password put in the wrong place, never echoed */
    snprintf(shown, sizeof shown, "the URL given (not shown: it has no scheme such as redis://)");
  ex = cli_fail(rc, shown);
  return rc == RLOCK_EPROTO ? EX_UNAVAILABLE : ex; /* not a Redis server */
}

int cli_lock(rlock_client_t *client, const char *name, rlock_lock_t **out) {
  int rc = rlock_lock_new(client, name, strlen(name), out);
  return rc ? cli_fail(rc, "cannot open the lock") : 0;
}

int cli_check_type(rlock_client_t *client, const char *name, int simple) {
  const char *const argv[] = {"TYPE", name};
  rlock_reply_t *r = NULL;
  if (rlock_client_command(client, 2, argv, NULL, &r) || !r) return 0; /* the lock's own calls say why */
  int ex = 0;
  const char *t = r->type == RLOCK_REPLY_STATUS || r->type == RLOCK_REPLY_STRING ? r->str : NULL;
  if (t && !strcmp(t, "string") && simple != 2) { /* a count without TTL: a semaphore's or latch's, not a simple lock */
    cli_found_t f;
    cli_detect(client, name, strlen(name), "string", &f);
    const char *pa[] = {"PTTL", name};
    rlock_reply_t *p = NULL;
    if (f.kind < 0 && rlock_client_command(client, 2, pa, NULL, &p) == 0 && p->type == RLOCK_REPLY_INTEGER &&
        p->integer == -1) {
      cli_err("%s is not a lock (a %s, count %lld)", name, f.what, f.count);
      ex = EX_DATAERR;
    }
    rlock_reply_free(p);
    if (ex) {
      rlock_reply_free(r);
      return ex;
    }
  }
  if (t && strcmp(t, "none") && strcmp(t, simple ? "string" : "hash")) {
    const char *hint = !simple && !strcmp(t, "string") ? "; try --simple"
                       : simple && !strcmp(t, "hash")  ? "; try without --simple"
                                                       : "";
    cli_err("%s is not a lock (holds a %.20s%s)", name, t, hint);
    ex = EX_DATAERR;
  }
  rlock_reply_free(r);
  return ex;
}

int cli_lock_simple(rlock_client_t *client, const char *name, rlock_lock_t **out) {
  int rc = rlock_lock_new_simple(client, name, strlen(name), out);
  return rc ? cli_fail(rc, "cannot open the lock") : 0;
}

int cli_set_kind(const char *cmd, int *kind, int k) {
  if (*kind && *kind != k)
    return cli_usage(cmd, "the lock kind options (--simple, --fair, --read...) exclude each other");
  *kind = k;
  return 0;
}

int cli_lock_fair(rlock_client_t *client, const char *name, rlock_lock_t **out) {
  int rc = rlock_lock_new_fair(client, name, strlen(name), out);
  return rc ? cli_fail(rc, "cannot open the lock") : 0;
}

int cli_lock_kind(rlock_client_t *client, const char *name, int kind, rlock_lock_t **out) {
  size_t n = strlen(name);
  if (kind == CLI_KIND_READ || kind == CLI_KIND_WRITE) {
    rlock_lock_t *r = NULL, *w = NULL;
    int rc = rlock_rwlock_new(client, name, n, &r, &w);
    if (rc) return cli_fail(rc, "cannot open the read-write lock");
    *out = kind == CLI_KIND_READ ? r : w;
    rlock_lock_free(kind == CLI_KIND_READ ? w : r);
    return 0;
  }
  int rc = kind == CLI_KIND_SIMPLE         ? rlock_lock_new_simple(client, name, n, out)
           : kind == CLI_KIND_NONREENTRANT ? rlock_lock_new_nonreentrant(client, name, n, out)
           : kind == CLI_KIND_FENCED       ? rlock_lock_new_fenced(client, name, n, out)
           : kind == CLI_KIND_SPIN         ? rlock_lock_new_spin(client, name, n, NULL, out)
           : kind == CLI_KIND_FAIR         ? rlock_lock_new_fair(client, name, n, out)
                                           : rlock_lock_new(client, name, n, out);
  return rc ? cli_fail(rc, "cannot open the lock") : 0;
}

int cli_name(const char *cmd, const char *name) {
  size_t len = strlen(name);
  if (len == 0) return cli_usage(cmd, "the lock name must not be empty");
  if (len > RLOCK_NAME_MAX) return cli_usage(cmd, "the lock name is longer than %d bytes", RLOCK_NAME_MAX);
  return 0;
}
