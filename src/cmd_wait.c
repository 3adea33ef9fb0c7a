/* cmd_wait.c -- `rlock wait [--wait DUR] [--json] NAME`: wait until the lock
 * NAME is free (its key gone), without taking it (rlock_lock_await_free:
 * woken by the unlock message of the kind found, and looking again with a
 * backoff for a release that says nothing there), and say so as text or JSON. */
#include <getopt.h>
#include <pthread.h>
#include <string.h>

#include "cli.h"

static const char usage_text[] =
    "Usage: rlock wait [--wait DUR] [--json] NAME\n"
    "Waits until the lock NAME is free (no holder of any kind: its key is gone),\n"
    "without taking it. Woken by the unlock message (pub/sub), and it looks again\n"
    "with a backoff (up to 250-500 ms apart) for a release without a message\n"
    "there: a spin lock's, Redisson's fair unlock, a lock of another kind taken\n"
    "meanwhile. The lock's kind (a read-write lock listens on its own channel) is\n"
    "found by itself.\n\n"
    "  --wait DUR     wait at most DUR (default: forever; 0: one look)\n"
    "  --json         print one JSON object: {\"name\":...,\"free\":BOOL,\"waited_ms\":N}\n"
    "  -u, --url URL ...    Redis URL and TLS options: see 'rlock --help'\n\n"
    "Exit codes: 0 free; 1 still held when --wait ran out; 64 usage; 65 NAME is\n"
    "not a lock; 69 Redis unavailable; 70 other errors.\n";

/* A second free-waiter beside the one of the kind found: a spin lock's
 * (PTTL looks with a backoff, no channel). The hash of a reentrant lock is a
 * spin lock's too (rlock cannot tell them apart), and a spin unlock, a
 * Java fair unlock (it tells only the queue's head) and the release of a lock
 * of another kind taken while it waits (another channel) say nothing where
 * the first waiter listens: without it, it slept on while the lock was free,
 * to the TTL. Whichever sees the lock free first stops the other. */
#define POLL_BACKOFF \
  { 4, 250, 2 } /* 4 ms, doubling to 250 ms, + a jitter: then 250-500 ms */
typedef struct poller {
  rlock_lock_t *lock;
  int64_t wait;
  rlock_cancel_t *mine, *other;
  int rc;
} poller_t;

static void *poll_free(void *arg) {
  poller_t *p = arg;
  p->rc = rlock_lock_await_free(p->lock, p->wait, p->mine);
  if (p->rc == 0) rlock_cancel_trigger(p->other);
  return NULL;
}

/* rlock_lock_await_free on lock, with the poller beside it (none for a
 * simple lock, whose waiter looks again so already, or a single look). */
static int await_free(rlock_client_t *client, const char *name, rlock_lock_t *lock, int kind, int64_t wait) {
  if (kind == CLI_KIND_SIMPLE || wait == 0) return rlock_lock_await_free(lock, wait, NULL);
  rlock_backoff_t b = POLL_BACKOFF;
  poller_t p = {.wait = wait};
  rlock_cancel_t *mine = NULL;
  int rc = rlock_cancel_new(&mine);
  if (!rc && !(rc = rlock_cancel_new(&p.mine))) rc = rlock_lock_new_spin(client, name, strlen(name), &b, &p.lock);
  pthread_t t;
  if (!rc) {
    p.other = mine;
    if (pthread_create(&t, NULL, poll_free, &p) == 0) {
      rc = rlock_lock_await_free(lock, wait, mine);
      rlock_cancel_trigger(p.mine);
      pthread_join(t, NULL);
      if (p.rc == 0 || rc == RLOCK_ECANCELED) rc = p.rc; /* cancelled only once the poller saw it free */
    } else {
      rc = rlock_lock_await_free(lock, wait, NULL);
    }
  }
  rlock_lock_free(p.lock);
  rlock_cancel_free(p.mine);
  rlock_cancel_free(mine);
  return rc;
}

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
    int rc = found.exists ? await_free(client, name, lock, found.kind, wait) : 0;
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
