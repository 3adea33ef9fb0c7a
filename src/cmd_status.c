/* cmd_status.c -- `rlock status [--json] NAME`: whether the lock is held, each
 * holder's owner id and hold count, and the remaining TTL, as text or as one
 * JSON object. */
#include <getopt.h>
#include <string.h>

#include "cli.h"

static const char usage_text[] =
    "Usage: rlock status [--json] [--simple] NAME\n"
    "Shows whether the lock NAME is held, each holder (owner id \"<client id>:<thread>\"\n"
    "and hold count) and the remaining time to live in ms (-2: not locked,\n"
    "-1: no expiry).\n\n"
    "  --json         print one JSON object:\n"
    "                 {\"name\":...,\"locked\":BOOL,\"holders\":[{\"owner\":...,\"count\":N}],\"ttl_ms\":N}\n"
    "  --simple       NAME is a simple lock (SET NX PX: exec --simple, redis-py...);\n"
    "                 the holder is its token, count 1\n"
    "  -u, --url URL ...    Redis URL and TLS options: see 'rlock --help'\n";

static void print_json(const char *name, const rlock_holder_t *h, size_t n, int64_t ttl) {
  fputs("{\"name\":", stdout);
  json_string(stdout, name, strlen(name));
  printf(",\"locked\":%s,\"holders\":[", n ? "true" : "false");
  for (size_t i = 0; i < n; i++) {
    fputs(i ? ",{\"owner\":" : "{\"owner\":", stdout);
    json_string(stdout, h[i].owner, strlen(h[i].owner));
    printf(",\"count\":%lld}", (long long)h[i].count);
  }
  printf("],\"ttl_ms\":%lld}\n", (long long)ttl);
}

static void print_text(const char *name, const rlock_holder_t *h, size_t n, int64_t ttl) {
  if (!n) {
    printf("%s: not locked\n", name);
    return;
  }
  if (ttl >= 0)
    printf("%s: locked, ttl %lld ms\n", name, (long long)ttl);
  else
    printf("%s: locked, no expiry\n", name);
  for (size_t i = 0; i < n; i++)
    printf("  holder %s count %lld\n", h[i].owner, (long long)h[i].count);
}

/* Reads and prints the state of the lock; returns the exit code. */
static int show(rlock_lock_t *lock, const char *name, int json) {
  rlock_holder_t *holders = NULL;
  size_t n = 0;
  int64_t ttl = -2;
  int rc = rlock_lock_holders(lock, &holders, &n);
  if (rc) return cli_fail(rc, "cannot read the holders");
  if (n && (rc = rlock_lock_ttl(lock, &ttl)) != 0) {
    rlock_holders_free(holders, n);
    return cli_fail(rc, "cannot read the TTL");
  }
  if (json)
    print_json(name, holders, n, ttl);
  else
    print_text(name, holders, n, ttl);
  rlock_holders_free(holders, n);
  return 0;
}

int cmd_status(cli_global_t *g, int argc, char **argv) {
  static const struct option longopts[] = {{"json", no_argument, NULL, 'j'},
                                           {"simple", no_argument, NULL, 's'},
                                           CLI_CONNECT_LONGOPTS,
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  int c, json = 0, simple = 0, ex = 0;
  while ((c = getopt_long(argc, argv, ":u:h", longopts, NULL)) != -1) {
    switch (c) {
      case 'j': json = 1; break;
      case 's': simple = 1; break;
      case 'h': fputs(usage_text, stdout); return 0;
      default: ex = cli_connect_option("status", g, c, optarg, argv);
    }
    if (ex) return ex;
  }
  if (optind != argc - 1) return cli_usage("status", "expected exactly one lock NAME");
  const char *name = argv[optind];
  if ((ex = cli_name("status", name))) return ex;
  rlock_client_t *client;
  rlock_lock_t *lock;
  if ((ex = cli_connect(g, NULL, &client))) return ex;
  if (!(ex = simple ? cli_lock_simple(client, name, &lock) : cli_lock(client, name, &lock))) {
    ex = show(lock, name, json);
    rlock_lock_free(lock);
  }
  rlock_client_free(client);
  return ex;
}
