/* cli.h -- shared declarations of the rlock command-line tool: exit codes,
 * the global options, the helpers of args.c and the sub-commands (cmd_*.c).
 * The tool is built only on the public header rlock.h. */
#ifndef RLOCK_CLI_H
#define RLOCK_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <sysexits.h>

#include "rlock.h"

/* Options given before (or inside) the sub-command: where and how to connect. */
#define CLI_URLS_MAX 64
typedef struct cli_global {
  const char *url;                /* -u/--url, else $RLOCK_URL, else redis://127.0.0.1:6379 */
  const char *urls[CLI_URLS_MAX]; /* every -u given, in order (exec --redlock: one per node) */
  int nurls;
  const char *tls_ca, *tls_cert, *tls_key, *tls_server_name; /* --tls-*, NULL: not given */
  int insecure;                                              /* --insecure */
  int replica_sync;                /* --replica-sync: RLOCK_REPLICA_SYNC_* + 1, 0: not given */
  int64_t replica_sync_timeout_ms; /* --replica-sync-timeout, 0: not given */
} cli_global_t;

/* The connection options, accepted before the sub-command and by each one:
 * put CLI_CONNECT_LONGOPTS in a getopt_long table and hand every option
 * code the sub-command does not know to cli_connect_option. A password in
 * the -u value is wiped from argv (the value is copied first). */
enum {
  OPT_TLS_CA = 256,
  OPT_TLS_CERT,
  OPT_TLS_KEY,
  OPT_TLS_SERVER_NAME,
  OPT_INSECURE,
  OPT_REPLICA_SYNC,
  OPT_REPLICA_SYNC_TIMEOUT
};
#define CLI_CONNECT_LONGOPTS                                                                                        \
  {"url", required_argument, NULL, 'u'}, {"tls-ca", required_argument, NULL, OPT_TLS_CA},                           \
      {"tls-cert", required_argument, NULL, OPT_TLS_CERT}, {"tls-key", required_argument, NULL, OPT_TLS_KEY},       \
      {"tls-server-name", required_argument, NULL, OPT_TLS_SERVER_NAME},                                            \
      {"insecure", no_argument, NULL, OPT_INSECURE}, {"replica-sync", required_argument, NULL, OPT_REPLICA_SYNC}, { \
    "replica-sync-timeout", required_argument, NULL, OPT_REPLICA_SYNC_TIMEOUT                                       \
  }
/* The help lines of those options. */
#define CLI_CONNECT_HELP                                                                  \
  "  -u, --url URL            Redis URL: redis://[[user]:password@]host[:port][/db],\n"   \
  "                           rediss://... (TLS), unix:///path?db=N&user=U&password=P,\n" \
  "                           Sentinel: redis+sentinel://[[user]:password@]S[,S...]\n"    \
  "                             /MASTER[/db][?sentinel_password=P]\n"                     \
  "                             (S: a sentinel's host[:port], default port 26379)\n"      \
  "                             or rediss+sentinel://... (TLS),\n"                        \
  "                           Cluster: redis+cluster://[[user]:password@]N[,N...]\n"      \
  "                             (N: a seed's host[:port], tried in order; no /db)\n"      \
  "                             or rediss+cluster://... (TLS)\n"                          \
  "                           (default: $RLOCK_URL, else redis://127.0.0.1:6379)\n"       \
  "      --tls-ca FILE        PEM file of the CAs that verify the server (rediss://;\n"   \
  "                           default: the system's)\n"                                   \
  "      --tls-cert FILE      client certificate (PEM), with --tls-key\n"                 \
  "      --tls-key FILE       client private key (PEM)\n"                                 \
  "      --tls-server-name N  name to verify in the certificate and send as SNI\n"        \
  "                           (default: the URL's host)\n"                                \
  "      --insecure           do not verify the server's certificate\n"                   \
  "      --replica-sync POLICY  WAIT for the server's replicas after each lock write:\n"  \
  "                           off, one (default), majority or all\n"                      \
  "      --replica-sync-timeout DUR\n"                                                    \
  "                           how long that WAIT waits (default 1s)\n"
/* Handles option c (from getopt_long, value arg) of sub-command cmd (NULL:
 * the top level): 0 if it was a connection option, else the usage error
 * (EX_USAGE) for an unknown option. */
int cli_connect_option(const char *cmd, cli_global_t *g, int c, char *arg, char **argv);

/* Every sub-command: argv[0] is the sub-command's name. Returns the exit code. */
int cmd_exec(cli_global_t *g, int argc, char **argv);
int cmd_status(cli_global_t *g, int argc, char **argv);
int cmd_unlock(cli_global_t *g, int argc, char **argv);
int cmd_demo(cli_global_t *g, int argc, char **argv);
int cmd_semaphore(cli_global_t *g, int argc, char **argv); /* cmd_semaphore.c */
int cmd_latch(cli_global_t *g, int argc, char **argv);
int cmd_acquire(cli_global_t *g, int argc, char **argv); /* cmd_hold.c */
int cmd_extend(cli_global_t *g, int argc, char **argv);
int cmd_release(cli_global_t *g, int argc, char **argv);
int cmd_ls(cli_global_t *g, int argc, char **argv); /* cmd_ls.c */

/* "rlock: <message>\n" on stderr. */
void cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A usage error of sub-command cmd (NULL: the top level): prints the message
 * and a hint to --help, returns EX_USAGE. */
int cli_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The usage error for getopt_long's return c ('?' or ':') at argv[optind - 1]. */
int cli_bad_option(const char *cmd, int c, char **argv);

/* The longest duration an option takes: 365 days. */
/* `status`: the lock is free (0: held; errors are sysexits codes, 64 up). */
#define CLI_EXIT_FREE 1
#define CLI_DURATION_MAX ((int64_t)365 * 24 * 3600 * 1000)
/* Parses the duration s given to option opt: 0, or a usage error (EX_USAGE)
 * unless min_ms <= value <= CLI_DURATION_MAX. */
int cli_duration(const char *cmd, const char *opt, const char *s, int64_t min_ms, int64_t *out);
/* Parses an integer in [min, max] given to option opt: 0 or EX_USAGE. */
int cli_count(const char *cmd, const char *opt, const char *s, long min, long max, long *out);

/* The exit code for a failed rlock call: EX_UNAVAILABLE for connection
 * trouble, EX_USAGE for a bad URL or argument, EX_DATAERR for a key that is
 * not a lock, EX_SOFTWARE for the rest. */
int cli_exit_for(int err);
/* Prints "rlock: <what>: <brief> (<detail>)" for a failed rlock call (the
 * library's message, said once); returns cli_exit_for(err). */
int cli_fail(int err, const char *what);

/* Creates a client for g's URL and TLS options with opts (NULL: defaults);
 * on failure prints why (URL redacted) and returns the exit code (EX_UNAVAILABLE
 * also for a server that does not speak RESP), else 0. */
int cli_connect(const cli_global_t *g, rlock_options_t *opts, rlock_client_t **out);
/* Fills opts (TLS, client name) from g as cli_connect does, without
 * connecting: 0 or the usage error's exit code. */
int cli_options(const cli_global_t *g, rlock_options_t *opts);
/* Opens the lock NAME (a C string) or prints why not; 0 or the exit code. */
int cli_lock(rlock_client_t *client, const char *name, rlock_lock_t **out);
/* The same for a simple lock (SET NX PX: rlock_lock_new_simple). */
int cli_lock_simple(rlock_client_t *client, const char *name, rlock_lock_t **out);
/* The same for a fair lock (Redisson's RFairLock: rlock_lock_new_fair). */
int cli_lock_fair(rlock_client_t *client, const char *name, rlock_lock_t **out);
/* The lock kinds exec opens (--simple, --nonreentrant, --read...), and the same for one of them
 * (--read, --write: that lock of a read-write lock, rlock_rwlock_new). */
enum {
  CLI_KIND_REENTRANT,
  CLI_KIND_SIMPLE,
  CLI_KIND_NONREENTRANT,
  CLI_KIND_FENCED,
  CLI_KIND_SPIN,
  CLI_KIND_FAIR,
  CLI_KIND_READ,
  CLI_KIND_WRITE
};
int cli_lock_kind(rlock_client_t *client, const char *name, int kind, rlock_lock_t **out);
/* A kind option given: *kind = k, or EX_USAGE if another kind was given. */
int cli_set_kind(const char *cmd, int *kind, int k);

/* Checks that the key NAME is free or holds the kind's type (a hash; simple
 * 1: a string, but not a count without TTL, a semaphore's or latch's; 2: a
 * string, a count too: the permit semaphore's): 0, or EX_DATAERR with "NAME
 * is not a lock (holds a list)". */
int cli_check_type(rlock_client_t *client, const char *name, int simple);

/* Checks a lock name given on the command line: 0, or EX_USAGE if it is
 * empty or too long. */
int cli_name(const char *cmd, const char *name);

/* exec_group.c: CMD of `rlock exec` in its own process group. group_run
 * forks cmd into a new group (given the terminal if rlock has it), runs
 * in_child in the child before exec and started() in rlock (group lock held)
 * once the group can be signalled, waits for every member of the group, and
 * returns CMD's exit status (128+N if killed by signal N, 127 if it could not
 * run). group_kill signals the whole group while it runs (async-signal-safe);
 * another thread holds group_lock around its decision to signal. */
int group_run(char **cmd, const sigset_t *child_mask, void (*in_child)(void), void (*started)(void));
/* After group_run: if a terminal's SIGINT/SIGQUIT killed CMD while its group
 * had the terminal, rlock dies of it too (call once the lock is released). */
void group_die_like_cmd(void);
int group_kill(int sig); /* 1 if the group existed and was signalled */
void group_lock(void);
void group_unlock(void);

/* detect.c: what a key holds. kind: the CLI_KIND_* to open it with
 * (reentrant for a missing key), -1 not a lock; code: a short name for JSON
 * ("none", "reentrant", "fair", "fenced", "rwlock", "simple", "semaphore_or_latch",
 * "permit_semaphore", "other"); what: the same for people. */
typedef struct cli_found {
  int kind;
  int exists;
  const char *code;
  char what[80];
  long long count; /* semaphore or latch: the count */
} cli_found_t;
/* Given the key's TYPE reply (type), fills f (never fails: a failed look
 * leaves the plainest answer). */
int cli_detect(rlock_client_t *client, const char *name, size_t len, const char *type, cli_found_t *f);
/* TYPE, then cli_detect: 0, or the exit code (EX_DATAERR with "NAME is not a
 * lock (...)" for a key that is none). */
int cli_detect_kind(rlock_client_t *client, const char *name, cli_found_t *f);
/* Redisson's prefixName of NAME (malloc'd; NULL for rlock's own form of names
 * with odd braces). */
char *cli_prefixed(const char *prefix, const char *name, size_t len);
int cmd_wait(cli_global_t *g, int argc, char **argv); /* cmd_wait.c */

/* cancel.c: SIGINT, SIGTERM, SIGHUP cancel the wait of the token begin
 * returns (NULL: out of memory, the signals keep their default). end, once
 * the call returned rc: restores the handlers and frees the token; 128+N (said on stderr) when
 * a signal cancelled it, else 0. */
rlock_cancel_t *cli_cancel_begin(void);
int cli_cancel_end(int rc);

/* Writes bytes as a JSON string (quoted, escaped; invalid UTF-8 as \u00XX). */
void json_string(FILE *f, const char *s, size_t len);

#endif /* RLOCK_CLI_H */
