/* args.c -- helpers shared by the rlock sub-commands: error and usage
 * messages, option values (durations, counts), mapping of rlock error codes
 * to sysexits exit codes, and opening a client / a lock with clear errors. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

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

int cli_duration(const char *cmd, const char *opt, const char *s, int positive, int64_t *out) {
  if (rlock_duration_parse(s, out) != 0 || *out < 0)
    return cli_usage(cmd, "bad duration '%s' for %s (use e.g. 500ms, 10s, 2m)", s, opt);
  if (positive && *out == 0) return cli_usage(cmd, "%s must be more than 0", opt);
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
    case RLOCK_EINVAL:
      return EX_USAGE;
    case RLOCK_ECONNECT:
    case RLOCK_EAUTH:
    case RLOCK_ETLS:
    case RLOCK_ETIMEDOUT:
    case RLOCK_ECONNLOST:
    case RLOCK_ECLOSED:
      return EX_UNAVAILABLE;
    case RLOCK_EBUSY:
      return EX_TEMPFAIL;
    default:
      return EX_SOFTWARE;
  }
}

int cli_fail(int err, const char *what) {
  const char *brief = rlock_strerror(err), *detail = rlock_last_error();
  if (!detail || !*detail || strcmp(detail, brief) == 0)
    cli_err("%s: %s", what, brief);
  else
    cli_err("%s: %s (%s)", what, brief, detail);
  return cli_exit_for(err);
}

int cli_connect(const cli_global_t *g, rlock_options_t *opts, rlock_client_t **out) {
  rlock_options_t defaults;
  if (!opts) {
    rlock_options_init(&defaults);
    opts = &defaults;
  }
  opts->url = g->url;
  opts->client_name = "rlock-cli";
  int rc = rlock_client_new(out, opts);
  if (rc == 0) return 0;
  char shown[512], what[600];
  rlock_url_redact(g->url, shown, sizeof shown);
  snprintf(what, sizeof what, "%s %s", rc == RLOCK_EURL ? "bad URL" : "cannot connect to", shown);
  return cli_fail(rc, what);
}

int cli_lock(rlock_client_t *client, const char *name, rlock_lock_t **out) {
  int rc = rlock_lock_new(client, name, strlen(name), out);
  return rc ? cli_fail(rc, "cannot open the lock") : 0;
}

int cli_name(const char *cmd, const char *name) {
  size_t len = strlen(name);
  if (len == 0) return cli_usage(cmd, "the lock name must not be empty");
  if (len > RLOCK_NAME_MAX) return cli_usage(cmd, "the lock name is longer than %d bytes", RLOCK_NAME_MAX);
  return 0;
}
