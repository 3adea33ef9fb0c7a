/* cmd_status.c -- `rlock status [--json] NAME`: whether the lock is held, each
 * holder's owner id and hold count, the remaining TTL and the node that
 * answered, as text or as one JSON object. */
#include <getopt.h>
#include <string.h>

#include "cli.h"

static const char usage_text[] =
    "Usage: rlock status [--json] [--simple | --read | --write] [--redlock] NAME\n"
    "Shows whether the lock NAME is held, each holder (owner id \"<client id>:<thread>\"\n"
    "and hold count) and the remaining time to live in ms (-2: not locked,\n"
    "-1: no expiry), and the node that answered: host:port (Sentinel: the master;\n"
    "Cluster: the master of NAME's slot) or a unix socket's path.\n\n"
    "  --json         print one JSON object:\n"
    "                 {\"name\":...,\"locked\":BOOL,\"holders\":[{\"owner\":...,\"count\":N}],\"ttl_ms\":N,\n"
    "                  \"node\":\"HOST:PORT\"}\n"
    "  --simple       NAME is a simple lock (SET NX PX: exec --simple, redis-py...);\n"
    "                 the holder is its token, count 1\n"
    "  --read, --write  NAME is a read-write lock (exec --read/--write, Redisson's\n"
    "                 RReadWriteLock): every holder, readers \"<client id>:<thread>\" with\n"
    "                 their read holds, the writer \"...:write\"\n"
    "  --redlock      every -u URL is a RedLock master: each one's view, and on how\n"
    "                 many of them NAME is locked\n"
    "  -u, --url URL ...    Redis URL and TLS options: see 'rlock --help'\n";

/* "locked":...,"holders":[...],"ttl_ms":N (the members of a lock's object) */
static void print_state_json(const rlock_holder_t *h, size_t n, int64_t ttl) {
  printf("\"locked\":%s,\"holders\":[", n ? "true" : "false");
  for (size_t i = 0; i < n; i++) {
    fputs(i ? ",{\"owner\":" : "{\"owner\":", stdout);
    json_string(stdout, h[i].owner, strlen(h[i].owner));
    printf(",\"count\":%lld}", (long long)h[i].count);
  }
  printf("],\"ttl_ms\":%lld", (long long)ttl);
}

static void print_json(const char *name, const rlock_holder_t *h, size_t n, int64_t ttl, const char *node) {
  fputs("{\"name\":", stdout);
  json_string(stdout, name, strlen(name));
  fputc(',', stdout);
  print_state_json(h, n, ttl);
  fputs(",\"node\":", stdout);
  json_string(stdout, node, strlen(node));
  fputs("}\n", stdout);
}

static void print_text(const char *name, const rlock_holder_t *h, size_t n, int64_t ttl, const char *node) {
  if (!n)
    printf("%s: not locked\n", name);
  else if (ttl >= 0)
    printf("%s: locked, ttl %lld ms\n", name, (long long)ttl);
  else
    printf("%s: locked, no expiry\n", name);
  for (size_t i = 0; i < n; i++)
    printf("  holder %s count %lld\n", h[i].owner, (long long)h[i].count);
  printf("  node %s\n", node);
}

/* Reads and prints the state of the lock; returns the exit code. */
static int show(rlock_lock_t *lock, const char *name, int json) {
  rlock_holder_t *holders = NULL;
  size_t n = 0;
  int64_t ttl = -2;
  char node[512];
  int rc = rlock_lock_holders(lock, &holders, &n);
  if (rc) return cli_fail(rc, "cannot read the holders");
  if (n && (rc = rlock_lock_ttl(lock, &ttl)) != 0) {
    rlock_holders_free(holders, n);
    return cli_fail(rc, "cannot read the TTL");
  }
  if ((rc = rlock_lock_node(lock, node, sizeof node)) != 0) {
    rlock_holders_free(holders, n);
    return cli_fail(rc, "cannot tell the node");
  }
  if (json)
    print_json(name, holders, n, ttl, node);
  else
    print_text(name, holders, n, ttl, node);
  rlock_holders_free(holders, n);
  return 0;
}

/* Reads the holders and TTL of lock: 0, or the failed call's error. */
static int read_state(rlock_lock_t *lock, rlock_holder_t **h, size_t *n, int64_t *ttl) {
  *ttl = -2;
  int rc = rlock_lock_holders(lock, h, n);
  if (rc == 0 && *n && (rc = rlock_lock_ttl(lock, ttl)) != 0) {
    rlock_holders_free(*h, *n);
    *h = NULL, *n = 0;
  }
  return rc;
}

/* One RedLock master's view (JSON: one element of "nodes"); 1 if locked
 * there, 0 if not, -1 if it could not be read. */
static int show_node(const cli_global_t *g, int i, const char *name, int simple, int json) {
  cli_global_t one = *g;
  one.url = g->urls[i];
  rlock_options_t opts;
  rlock_options_init(&opts);
  char shown[256];
  rlock_url_redact(one.url, shown, sizeof shown);
  rlock_client_t *client = NULL;
  rlock_lock_t *lock = NULL;
  rlock_holder_t *h = NULL;
  size_t n = 0;
  int64_t ttl = -2;
  int rc = cli_options(&one, &opts) ? RLOCK_EINVAL : rlock_client_new(&client, &opts);
  if (!rc) rc = simple ? rlock_lock_new_simple(client, name, strlen(name), &lock)
                       : rlock_lock_new(client, name, strlen(name), &lock);
  if (!rc) rc = read_state(lock, &h, &n, &ttl);
  if (json) {
    fputs(i ? ",{\"url\":" : "{\"url\":", stdout);
    json_string(stdout, shown, strlen(shown));
    if (rc) fputs(",\"error\":", stdout), json_string(stdout, rlock_last_error(), strlen(rlock_last_error()));
    else fputc(',', stdout), print_state_json(h, n, ttl);
    fputc('}', stdout);
  } else if (rc) {
    printf("  node %d %s: cannot read it (%s)\n", i + 1, shown, rlock_last_error());
  } else {
    printf("  node %d %s: %s, ttl %lld ms%s%s\n", i + 1, shown, n ? "locked" : "not locked", (long long)ttl,
           n ? ", holder " : "", n ? h[0].owner : "");
  }
  rlock_holders_free(h, n);
  rlock_lock_free(lock);
  rlock_client_free(client);
  return rc ? -1 : n > 0;
}

/* status --redlock: every -u URL's view and the count; exit 69 if no node could be read. */
static int show_redlock(const cli_global_t *g, const char *name, int simple, int json) {
  int locked = 0, read = 0, n = g->nurls;
  if (n == 0) return cli_usage("status", "--redlock needs the masters' URLs (-u URL, once per master)");
  if (json) {
    fputs("{\"name\":", stdout);
    json_string(stdout, name, strlen(name));
    fputs(",\"nodes\":[", stdout);
  } else {
    printf("%s: RedLock over %d masters\n", name, n);
  }
  for (int i = 0; i < n; i++) {
    int v = show_node(g, i, name, simple, json);
    read += v >= 0;
    locked += v > 0;
  }
  if (json) printf("],\"locked_on\":%d,\"majority\":%d}\n", locked, n / 2 + 1);
  else printf("%s: locked on %d of %d masters (a majority is %d)\n", name, locked, n, n / 2 + 1);
  return read ? 0 : EX_UNAVAILABLE;
}

int cmd_status(cli_global_t *g, int argc, char **argv) {
  static const struct option longopts[] = {{"json", no_argument, NULL, 'j'},
                                           {"simple", no_argument, NULL, 's'},
                                           {"read", no_argument, NULL, 'R'},
                                           {"write", no_argument, NULL, 'W'},
                                           {"redlock", no_argument, NULL, 'r'},
                                           CLI_CONNECT_LONGOPTS,
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  int c, json = 0, simple = 0, redlock = 0, ex = 0;
  while ((c = getopt_long(argc, argv, ":u:h", longopts, NULL)) != -1) {
    switch (c) {
      case 'j': json = 1; break;
      case 's': ex = cli_set_kind("status", &simple, CLI_KIND_SIMPLE); break;
      case 'R': ex = cli_set_kind("status", &simple, CLI_KIND_READ); break;
      case 'W': ex = cli_set_kind("status", &simple, CLI_KIND_WRITE); break;
      case 'r': redlock = 1; break;
      case 'h': fputs(usage_text, stdout); return 0;
      default: ex = cli_connect_option("status", g, c, optarg, argv);
    }
    if (ex) return ex;
  }
  if (optind != argc - 1) return cli_usage("status", "expected exactly one lock NAME");
  const char *name = argv[optind];
  if ((ex = cli_name("status", name))) return ex;
  if (redlock && simple > CLI_KIND_SIMPLE) return cli_usage("status", "--redlock takes no --read or --write");
  if (redlock) return show_redlock(g, name, simple, json);
  rlock_client_t *client;
  rlock_lock_t *lock;
  if ((ex = cli_connect(g, NULL, &client))) return ex;
  if (!(ex = cli_lock_kind(client, name, simple, &lock))) {
    ex = show(lock, name, json);
    rlock_lock_free(lock);
  }
  rlock_client_free(client);
  return ex;
}
