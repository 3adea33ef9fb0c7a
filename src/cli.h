/* cli.h -- shared declarations of the rlock command-line tool: exit codes,
 * the global options, the helpers of args.c and the sub-commands (cmd_*.c).
 * The tool is built only on the public header rlock.h. */
#ifndef RLOCK_CLI_H
#define RLOCK_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sysexits.h>

#include "rlock.h"

/* Options given before (or inside) the sub-command. */
typedef struct cli_global {
  const char *url; /* -u/--url, else $RLOCK_URL, else redis://127.0.0.1:6379 */
} cli_global_t;

/* Every sub-command: argv[0] is the sub-command's name. Returns the exit code. */
int cmd_exec(cli_global_t *g, int argc, char **argv);
int cmd_status(cli_global_t *g, int argc, char **argv);
int cmd_unlock(cli_global_t *g, int argc, char **argv);
int cmd_demo(cli_global_t *g, int argc, char **argv);

/* "rlock: <message>\n" on stderr. */
void cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A usage error of sub-command cmd (NULL: the top level): prints the message
 * and a hint to --help, returns EX_USAGE. */
int cli_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The usage error for getopt_long's return c ('?' or ':') at argv[optind - 1]. */
int cli_bad_option(const char *cmd, int c, char **argv);

/* Parses the duration s given to option opt: 0, or a usage error (EX_USAGE).
 * positive: also rejects 0. */
int cli_duration(const char *cmd, const char *opt, const char *s, int positive, int64_t *out);
/* Parses an integer in [min, max] given to option opt: 0 or EX_USAGE. */
int cli_count(const char *cmd, const char *opt, const char *s, long min, long max, long *out);

/* The exit code for a failed rlock call: EX_UNAVAILABLE for connection
 * trouble, EX_USAGE for a bad URL or argument, EX_SOFTWARE for the rest. */
int cli_exit_for(int err);
/* Prints "rlock: <what>: <detail>" for a failed rlock call; returns cli_exit_for(err). */
int cli_fail(int err, const char *what);

/* Creates a client for g->url with opts (NULL: defaults); on failure prints
 * why (URL redacted) and returns the exit code, else 0. */
int cli_connect(const cli_global_t *g, rlock_options_t *opts, rlock_client_t **out);
/* Opens the lock NAME (a C string) or prints why not; 0 or the exit code. */
int cli_lock(rlock_client_t *client, const char *name, rlock_lock_t **out);

/* Checks a lock name given on the command line: 0, or EX_USAGE if it is
 * empty or too long. */
int cli_name(const char *cmd, const char *name);

/* Writes bytes as a JSON string (quoted, escaped; invalid UTF-8 as \u00XX). */
void json_string(FILE *f, const char *s, size_t len);

#endif /* RLOCK_CLI_H */
