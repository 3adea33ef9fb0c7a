/* cmd_status.c -- `rlock status [--json] NAME`: whether the lock is held, each
 * holder's owner id and hold count, the remaining TTL and the node that
 * answered, as text or as one JSON object. */
#include <getopt.h>
#include <string.h>
#include <time.h>

#include "cli.h"

static const char usage_text[] =
    "Usage: rlock status [--json] [--simple | --fair | --fenced | --read | --write] [--redlock] NAME\n"
    "Shows whether the lock NAME is held, each holder (owner id \"<client id>:<thread>\"\n"
    "and hold count) and the remaining time to live in ms (-2: not locked,\n"
    "-1: no expiry), and the node that answered: host:port (Sentinel: the master;\n"
    "Cluster: the master of NAME's slot) or a unix socket's path. Without a kind\n"
    "option the kind is found from what NAME holds (a hash with \"mode\": read-write;\n"
    "a fair lock's queue; a fenced lock's counter; a string: simple) and said\n"
    "(\"  kind ... (found...)\"; JSON: \"found\":\"reentrant\", \"fair\", \"fenced\", \"rwlock\",\n"
    "\"simple\" or \"none\").\n\n"
    "  --json         print one JSON object:\n"
    "                 {\"name\":...,\"locked\":BOOL,\"holders\":[{\"owner\":...,\"count\":N}],\"ttl_ms\":N,\n"
    "                  \"node\":\"HOST:PORT\"}\n"
    "  --simple       NAME is a simple lock (SET NX PX: exec --simple, redis-py...);\n"
    "                 the holder is its token, count 1\n"
    "  --fenced       NAME is a fenced lock (exec --fenced, Redisson's RFencedLock): also\n"
    "                 its last token (JSON: \"kind\":\"fenced\",\"token\":N); without it the\n"
    "                 token is shown when NAME's counter exists\n"
    "  --fair         NAME is a fair lock (exec --fair, Redisson's RFairLock): also\n"
    "                 its queue, head first, with each waiter's deadline in ms from\n"
    "                 now (JSON: \"queue\":[{\"owner\":...,\"deadline_in_ms\":N}])\n"
    "  --read, --write  NAME is a read-write lock (exec --read/--write, Redisson's\n"
    "                 RReadWriteLock): every holder, readers \"<client id>:<thread>\" with\n"
    "                 their read holds, the writer \"...:write\"\n"
    "  --redlock      every -u URL is a RedLock master: each one's view, and on how\n"
    "                 many of them NAME is locked\n"
    "  -u, --url URL ...    Redis URL and TLS options: see 'rlock --help'\n\n"
    "Exit codes: 0 held; 1 free (--redlock: not held on a majority); 64 usage;\n"
    "65 NAME is not a lock; 69 Redis unavailable; 70 other errors.\n";

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

/* A fair lock's queue (NULL: not a fair lock). */
typedef struct queue_view {
  const rlock_fair_waiter_t *w;
  size_t n;
  int64_t now; /* epoch ms */
} queue_view_t;

static int64_t in_ms(const queue_view_t *q, size_t i) {
  return q->w[i].deadline_ms < 0 ? -1 : q->w[i].deadline_ms - q->now;
}

/* token: the fenced lock's last token (-1: not a fenced lock). */
static void print_json(const char *name, const rlock_holder_t *h, size_t n, int64_t ttl, const char *node,
                       const queue_view_t *q, int64_t token, const cli_found_t *found) {
  fputs("{\"name\":", stdout);
  json_string(stdout, name, strlen(name));
  fputc(',', stdout);
  print_state_json(h, n, ttl);
  if (token >= 0) printf(",\"kind\":\"fenced\",\"token\":%lld", (long long)token);
  if (q) {
    fputs(",\"queue\":[", stdout);
    for (size_t i = 0; i < q->n; i++) {
      fputs(i ? ",{\"owner\":" : "{\"owner\":", stdout);
      json_string(stdout, q->w[i].owner, strlen(q->w[i].owner));
      printf(",\"deadline_in_ms\":%lld}", (long long)in_ms(q, i));
    }
    fputc(']', stdout);
  }
  if (found && strcmp(found->code, "none")) printf(",\"found\":\"%s\"", found->code);
  fputs(",\"node\":", stdout);
  json_string(stdout, node, strlen(node));
  fputs("}\n", stdout);
}

static void print_text(const char *name, const rlock_holder_t *h, size_t n, int64_t ttl, const char *node,
                       const queue_view_t *q, int64_t token, const cli_found_t *found) {
  if (!n) printf("%s: not locked\n", name);
  else if (ttl >= 0) printf("%s: locked, ttl %lld ms\n", name, (long long)ttl);
  else printf("%s: locked, no expiry\n", name);
  for (size_t i = 0; i < n; i++) printf("  holder %s count %lld\n", h[i].owner, (long long)h[i].count);
  if (token >= 0) printf("  fenced token %lld (the last issued; 0: never taken)\n", (long long)token);
  for (size_t i = 0; q && i < q->n; i++)
    printf("  waiter %zu %s deadline in %lld ms\n", i + 1, q->w[i].owner, (long long)in_ms(q, i));
  if (found && found->exists) printf("  kind: %s, found by itself (no kind option)\n", found->what);
  printf("  node %s\n", node);
}

/* Reads and prints the state of the lock; returns the exit code: 0 held,
 * CLI_EXIT_FREE free, or an error's. */
/* fenced: 1 NAME is a fenced lock (its token shown), 2 it may be one (the
 * token shown when the counter exists), 0 not. */
/* found: what cli_detect found (NULL: a kind option was given). */
static int show(rlock_client_t *client, rlock_lock_t *lock, const char *name, int json, int fair, int fenced,
                const cli_found_t *found) {
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
  queue_view_t qv = {0};
  rlock_fair_waiter_t *w = NULL;
  if (fair) {
    if ((rc = rlock_lock_fair_waiters(lock, &w, &qv.n)) != 0) {
      rlock_holders_free(holders, n);
      return cli_fail(rc, "cannot read the queue");
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    qv.w = w;
    qv.now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
  }
  int64_t token = -1;
  if (fenced == 1 && (rc = rlock_fenced_token(lock, &token)) != 0) {
    rlock_holders_free(holders, n);
    rlock_fair_waiters_free(w, qv.n);
    return cli_fail(rc, "cannot read the fenced token");
  }
  if (fenced == 2) { /* a hash lock with a token counter is a fenced lock: show it */
    rlock_lock_t *f = NULL;
    if (rlock_lock_new_fenced(client, name, strlen(name), &f) == 0 && rlock_fenced_token(f, &token) == 0 && token == 0)
      token = -1; /* never taken as a fenced lock (a read that failed leaves -1 too) */
    rlock_lock_free(f);
  }
  if (json) print_json(name, holders, n, ttl, node, fair ? &qv : NULL, token, found);
  else print_text(name, holders, n, ttl, node, fair ? &qv : NULL, token, found);
  rlock_fair_waiters_free(w, qv.n);
  rlock_holders_free(holders, n);
  return n ? 0 : CLI_EXIT_FREE;
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
  if (!rc)
    rc = simple ? rlock_lock_new_simple(client, name, strlen(name), &lock)
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
  } else if (!n) {
    printf("  node %d %s: not locked\n", i + 1, shown);
  } else {
    printf("  node %d %s: locked, ttl %lld ms, holder %s\n", i + 1, shown, (long long)ttl, h[0].owner);
  }
  rlock_holders_free(h, n);
  rlock_lock_free(lock);
  rlock_client_free(client);
  return rc ? -1 : n > 0;
}

/* status --redlock: every -u URL's view and the count; exit 0 if held on a
 * majority, CLI_EXIT_FREE if not, 69 if no node could be read. */
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
  return !read ? EX_UNAVAILABLE : locked >= n / 2 + 1 ? 0 : CLI_EXIT_FREE;
}

int cmd_status(cli_global_t *g, int argc, char **argv) {
  static const struct option longopts[] = {{"json", no_argument, NULL, 'j'},    {"simple", no_argument, NULL, 's'},
                                           {"read", no_argument, NULL, 'R'},    {"write", no_argument, NULL, 'W'},
                                           {"redlock", no_argument, NULL, 'r'}, {"fair", no_argument, NULL, 'f'},
                                           {"fenced", no_argument, NULL, 'F'},  CLI_CONNECT_LONGOPTS,
                                           {"help", no_argument, NULL, 'h'},    {NULL, 0, NULL, 0}};
  int c, json = 0, simple = 0, redlock = 0, fair = 0, fenced = 0, rw = 0, ex = 0;
  while ((c = getopt_long(argc, argv, ":u:h", longopts, NULL)) != -1) {
    switch (c) {
    case 'j': json = 1; break;
    case 's': simple = 1; break;
    case 'R':
      ex = rw && rw != CLI_KIND_READ ? cli_usage("status", "--read and --write exclude each other") : 0,
      rw = CLI_KIND_READ;
      break;
    case 'W':
      ex = rw && rw != CLI_KIND_WRITE ? cli_usage("status", "--read and --write exclude each other") : 0,
      rw = CLI_KIND_WRITE;
      break;
    case 'r': redlock = 1; break;
    case 'f': fair = 1; break;
    case 'F': fenced = 1; break;
    case 'h': fputs(usage_text, stdout); return 0;
    default: ex = cli_connect_option("status", g, c, optarg, argv);
    }
    if (ex) return ex;
  }
  if (optind != argc - 1) return cli_usage("status", "expected exactly one lock NAME");
  const char *name = argv[optind];
  if ((ex = cli_name("status", name))) return ex;
  if (fair && (simple || redlock)) return cli_usage("status", "--fair goes with neither --simple nor --redlock");
  if (fenced && (simple || redlock || fair))
    return cli_usage("status", "--fenced excludes --simple, --fair and --redlock");
  if (rw && (simple || redlock || fair || fenced))
    return cli_usage("status", "--read and --write exclude --simple, --fair, --fenced and --redlock");
  if (redlock) return show_redlock(g, name, simple, json);
  rlock_client_t *client;
  rlock_lock_t *lock;
  if ((ex = cli_connect(g, NULL, &client))) return ex;
  int kind = simple ? CLI_KIND_SIMPLE : fair ? CLI_KIND_FAIR : fenced ? CLI_KIND_FENCED : rw ? rw : CLI_KIND_REENTRANT;
  cli_found_t found, *fp = NULL;
  if (!simple && !fair && !fenced && !rw) { /* no kind option: what NAME holds decides */
    if ((ex = cli_detect_kind(client, name, &found))) {
      rlock_client_free(client);
      return ex;
    }
    fp = &found;
    kind = found.kind;
    simple = kind == CLI_KIND_SIMPLE, fair = kind == CLI_KIND_FAIR, fenced = kind == CLI_KIND_FENCED;
    rw = kind == CLI_KIND_READ ? CLI_KIND_READ : 0;
  }
  if (!(ex = cli_lock_kind(client, name, kind, &lock))) {
    ex = cli_check_type(client, name, simple);
    if (!ex) ex = show(client, lock, name, json, fair, fenced ? 1 : simple || rw ? 0 : 2, fp);
    rlock_lock_free(lock);
  }
  rlock_client_free(client);
  return ex;
}
