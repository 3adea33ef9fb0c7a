/* cmd_hold.c -- locks held across shell commands: `rlock acquire NAME --lease
 * DUR` takes a reentrant lock with a fixed lease and prints an owner token
 * (the hold's field in Redis, "<client id>:owner-1"); `rlock extend NAME TOKEN
 * --lease DUR` and `rlock release NAME TOKEN` act as that owner. Every check
 * is made on the server against the token: a wrong token extends or frees
 * nothing (exit 1, "not held by that token"). */
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define HOLD_OWNER ((rlock_owner_t)1) /* the explicit owner every token names */

static const char acquire_text[] =
    "Usage: rlock acquire --lease DUR [--wait DUR] NAME\n"
    "Takes the reentrant lock NAME with a fixed lease and prints its owner token on\n"
    "stdout. The lock stays held after rlock exits, until the lease runs out or\n"
    "'rlock release NAME TOKEN'. Exit 0 acquired, 75 busy (--wait ran out), 74\n"
    "the token could not be written (the lock released again).\n\n"
    "  --lease DUR    required: how long the hold lasts (e.g. 60s)\n"
    "  --wait DUR     wait at most DUR for the lock (default 0: one try;\n"
    "                 'forever' waits until acquired)\n"
    "  -u, --url URL ...    Redis URL and TLS options: see 'rlock --help'\n";
static const char extend_text[] =
    "Usage: rlock extend --lease DUR NAME TOKEN\n"
    "Sets the lease of the hold of TOKEN (from 'rlock acquire') on NAME to DUR from\n"
    "now. Exit 0 extended, 1 not held by TOKEN (nothing changed).\n\n"
    "  --lease DUR    required: the new lease\n"
    "  -u, --url URL ...    Redis URL and TLS options: see 'rlock --help'\n";
static const char release_text[] =
    "Usage: rlock release NAME TOKEN\n"
    "Releases the hold of TOKEN (from 'rlock acquire') on NAME and wakes waiters.\n"
    "Exit 0 released, 1 not held by TOKEN (nothing changed).\n\n"
    "  -u, --url URL ...    Redis URL and TLS options: see 'rlock --help'\n";

/* A token is "<36-character client id>:owner-1": 0 with the id copied, or
 * the usage error. */
static int parse_token(const char *cmd, const char *token, char id[37]) {
  if (strlen(token) != 44 || strcmp(token + 36, ":owner-1") != 0)
    return cli_usage(cmd, "TOKEN is not an owner token printed by 'rlock acquire'");
  memcpy(id, token, 36);
  id[36] = '\0';
  return 0;
}

/* Parses the options of acquire/extend/release; positional args in argv[optind..]. */
static int parse(cli_global_t *g, const char *cmd, const char *text, int argc, char **argv, int64_t *lease,
                 int64_t *wait) {
  static const struct option longopts[] = {{"lease", required_argument, NULL, 'l'},
                                           {"wait", required_argument, NULL, 'w'},
                                           CLI_CONNECT_LONGOPTS,
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  int c, ex = 0;
  while ((c = getopt_long(argc, argv, ":u:h", longopts, NULL)) != -1) {
    switch (c) {
    case 'l': ex = lease ? cli_duration(cmd, "--lease", optarg, 1, lease) : cli_bad_option(cmd, '?', argv); break;
    case 'w':
      if (!wait) ex = cli_bad_option(cmd, '?', argv);
      else if (strcmp(optarg, "forever") == 0) *wait = RLOCK_WAIT_FOREVER;
      else ex = cli_duration(cmd, "--wait", optarg, 0, wait);
      break;
    case 'h': fputs(text, stdout); return -1;
    default: ex = cli_connect_option(cmd, g, c, optarg, argv);
    }
    if (ex) return ex;
  }
  if (lease && *lease <= 0) return cli_usage(cmd, "--lease DUR is required");
  return 0;
}

int cmd_acquire(cli_global_t *g, int argc, char **argv) {
  int64_t lease = 0, wait = 0;
  int ex = parse(g, "acquire", acquire_text, argc, argv, &lease, &wait);
  if (ex) return ex < 0 ? 0 : ex;
  if (optind != argc - 1) return cli_usage("acquire", "expected exactly one lock NAME");
  const char *name = argv[optind];
  if ((ex = cli_name("acquire", name))) return ex;
  rlock_client_t *client;
  rlock_lock_t *lock;
  if ((ex = cli_connect(g, NULL, &client))) return ex;
  if (!(ex = cli_check_type(client, name, 0)) && !(ex = cli_lock(client, name, &lock))) {
    int rc = rlock_lock_acquire(lock, HOLD_OWNER, wait, lease, cli_cancel_begin());
    if ((ex = cli_cancel_end(rc))) /* a signal: the try in flight was undone, nothing held */
      ;
    else if (rc == RLOCK_EBUSY) cli_err("%s is busy", name), ex = EX_TEMPFAIL;
    else if (rc) ex = cli_fail(rc, "cannot acquire the lock");
    else if (signal(SIGPIPE, SIG_IGN) == SIG_ERR || /* a closed pipe: EPIPE, not death with the hold kept */
             printf("%s:owner-1\n", rlock_client_id(client)) < 0 || fflush(stdout) != 0 || ferror(stdout)) {
      /* nobody would know the token: the hold would stay until its lease */
      int rel = rlock_lock_release(lock, HOLD_OWNER);
      cli_err("cannot write the owner token to stdout: %s",
              rel ? "the lock stays held until its lease ends" : "the lock was released");
      ex = EX_IOERR;
    }
    rlock_lock_free(lock);
  }
  rlock_client_free(client); /* holds are not released: the lease runs */
  return ex;
}

/* Connects as the client of token. */
static int connect_as(cli_global_t *g, const char *cmd, const char *token, rlock_client_t **client) {
  char id[37];
  int ex = parse_token(cmd, token, id);
  if (ex) return ex;
  rlock_options_t opts;
  rlock_options_init(&opts);
  opts.client_id = id;
  return cli_connect(g, &opts, client);
}

/* Redisson's renewal: the lease is set only while the token's field exists. */
static const char extend_script[] =
    "if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then "
    "redis.call('pexpire', KEYS[1], ARGV[1]); return 1; end; return 0;";

int cmd_extend(cli_global_t *g, int argc, char **argv) {
  int64_t lease = 0;
  int ex = parse(g, "extend", extend_text, argc, argv, &lease, NULL);
  if (ex) return ex < 0 ? 0 : ex;
  if (optind != argc - 2) return cli_usage("extend", "expected a lock NAME and a TOKEN");
  const char *name = argv[optind], *token = argv[optind + 1];
  if ((ex = cli_name("extend", name))) return ex;
  rlock_client_t *client;
  if ((ex = connect_as(g, "extend", token, &client))) return ex;
  if (!(ex = cli_check_type(client, name, 0))) {
    char ms[24];
    snprintf(ms, sizeof ms, "%lld", (long long)lease);
    const char *const av[] = {"EVAL", extend_script, "1", name, ms, token};
    rlock_reply_t *r = NULL;
    int rc = rlock_client_command(client, 6, av, NULL, &r);
    if (rc) ex = cli_fail(rc, "cannot extend the lock");
    else if (r->type == RLOCK_REPLY_ERROR) cli_err("cannot extend the lock: %.200s", r->str), ex = EX_SOFTWARE;
    else if (r->type == RLOCK_REPLY_INTEGER && r->integer == 1) printf("extended %s\n", name);
    else cli_err("%s is not held by that token (nothing changed)", name), ex = CLI_EXIT_FREE;
    rlock_reply_free(r);
  }
  rlock_client_free(client);
  return ex;
}

int cmd_release(cli_global_t *g, int argc, char **argv) {
  int ex = parse(g, "release", release_text, argc, argv, NULL, NULL);
  if (ex) return ex < 0 ? 0 : ex;
  if (optind != argc - 2) return cli_usage("release", "expected a lock NAME and a TOKEN");
  const char *name = argv[optind], *token = argv[optind + 1];
  if ((ex = cli_name("release", name))) return ex;
  rlock_client_t *client;
  rlock_lock_t *lock;
  if ((ex = connect_as(g, "release", token, &client))) return ex;
  if (!(ex = cli_check_type(client, name, 0)) && !(ex = cli_lock(client, name, &lock))) {
    int rc = rlock_lock_release(lock, HOLD_OWNER);
    if (rc == RLOCK_ENOTHELD) cli_err("%s is not held by that token (nothing changed)", name), ex = CLI_EXIT_FREE;
    else if (rc) ex = cli_fail(rc, "cannot release the lock");
    else printf("released %s\n", name);
    rlock_lock_free(lock);
  }
  rlock_client_free(client);
  return ex;
}
