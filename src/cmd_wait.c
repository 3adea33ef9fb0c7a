/* cmd_wait.c -- `rlock wait [--wait DUR] [--json] NAME`: wait until the lock
 * NAME is free (its key gone), without taking it (rlock_lock_await_free:
 * woken by the unlock message, never polling), and say so as text or JSON. */
#include <getopt.h>
#include <string.h>

#include "cli.h"

static const char usage_text[] =
    "Usage: rlock wait [--wait DUR] [--json] NAME\n"
    "Waits until the lock NAME is free (no holder of any kind: its key is gone),\n"
    "without taking it. Woken by the unlock message (pub/sub), or at the holder's\n"
    "TTL (a lease that runs out publishes nothing); it never polls. The lock's kind\n"
    "(a read-write lock listens on its own channel) is found by itself.\n\n"
    "  --wait DUR     wait at most DUR (default: forever; 0: one look)\n"
    "  --json         print one JSON object: {\"name\":...,\"free\":BOOL,\"waited_ms\":N}\n"
    "  -u, --url URL ...    Redis URL and TLS options: see 'rlock --help'\n\n"
    "Exit codes: 0 free; 1 still held when --wait ran out; 64 usage; 65 NAME is\n"
    "not a lock; 69 Redis unavailable; 70 other errors.\n";

int cmd_wait(cli_global_t *g, int argc, char **argv) {
  static const struct option longopts[] = {{"json", no_argument, NULL, 'j'},
                                           {"wait", required_argument, NULL, 'w'},
                                           CLI_CONNECT_LONGOPTS,
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  int c, json = 0, ex = 0;
  int64_t wait = RLOCK_WAIT_FOREVER;
  while ((c = getopt_long(argc, argv, ":u:h", longopts, NULL)) != -1) {
    switch (c) {
    case 'j': json = 1; break;
    case 'w':
      if (strcmp(optarg, "forever") == 0) wait = RLOCK_WAIT_FOREVER;
      else ex = cli_duration("wait", "--wait", optarg, 0, &wait);
      break;
    case 'h': fputs(usage_text, stdout); return 0;
    default: ex = cli_connect_option("wait", g, c, optarg, argv);
    }
    if (ex) return ex;
  }
  if (optind != argc - 1) return cli_usage("wait", "expected exactly one lock NAME");
  const char *name = argv[optind];
  if ((ex = cli_name("wait", name))) return ex;
  rlock_client_t *client;
  if ((ex = cli_connect(g, NULL, &client))) return ex;
  cli_found_t found;
  rlock_lock_t *lock = NULL;
  /* The kind is found once, by the key's type. A key missing then is a free
   * lock: it is said at once, with no wait behind it (a lock of another kind
   * taken right after would be waited for on the wrong channel). */
  if (!(ex = cli_detect_kind(client, name, &found)) &&
      !(ex = cli_lock_kind(client, name, found.kind == CLI_KIND_READ ? CLI_KIND_WRITE : found.kind, &lock))) {
    int64_t t0 = rlock_now_ms();
    int rc = found.exists ? rlock_lock_await_free(lock, wait, NULL) : 0;
    int64_t waited = rlock_now_ms() - t0;
    if (rc == 0 || rc == RLOCK_EBUSY) {
      if (json) {
        fputs("{\"name\":", stdout);
        json_string(stdout, name, strlen(name));
        printf(",\"free\":%s,\"waited_ms\":%lld}\n", rc ? "false" : "true", (long long)waited);
      } else if (rc == 0) {
        printf("%s: free\n", name);
      } else {
        printf("%s: still held after %lld ms\n", name, (long long)waited);
      }
      ex = rc ? CLI_EXIT_FREE : 0; /* 1: the other state, as status's 1 */
    } else {
      ex = cli_fail(rc, "cannot wait for the lock");
    }
    rlock_lock_free(lock);
  }
  rlock_client_free(client);
  return ex;
}
