/* cmd_semaphore.c -- `rlock semaphore NAME set N | acquire [N] [--wait T] |
 * release [N] | status` (Redisson's RSemaphore) and `rlock latch NAME set N |
 * down | await [--wait T] | status` (Redisson's RCountDownLatch), text or
 * --json. A semaphore has no owners: permits taken by `acquire` stay taken
 * after rlock exits, until some process releases them. */
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* The exit code of a wait that ended with rc (cancelled: 128+N). busy: what
 * a wait that ran out says (once: rlock_strerror names a lock). */
static int wait_exit(int rc, const char *what, const char *busy) {
  int sig = cli_cancel_end(rc);
  if (sig) return sig;
  if (rc == RLOCK_EBUSY) {
    cli_err("%s", busy);
    return cli_exit_for(rc);
  }
  return cli_fail(rc, what);
}

static const char sem_usage[] =
    "Usage: rlock semaphore [--json] NAME set N | acquire [N] [--wait T] | release [N] | status\n"
    "A semaphore stored as Redisson's RSemaphore: the key NAME holds the available\n"
    "permits; releases publish the new count on redisson_sc:{NAME}.\n\n"
    "  set N          set the permits to N if the semaphore has none yet\n"
    "  acquire [N]    take N permits (default 1), waiting for releases; they stay\n"
    "                 taken after rlock exits (a semaphore has no owners)\n"
    "  release [N]    give N permits back (default 1)\n"
    "  status         show the available permits\n"
    "  --wait T       acquire: wait at most T (e.g. 500ms, 3s; 0: one try; default:\n"
    "                 until acquired); exit 75 when it runs out\n"
    "  --json         print one JSON object\n"
    "  -u, --url URL ...    Redis URL and TLS options: see 'rlock --help'\n";

static const char latch_usage[] =
    "Usage: rlock latch [--json] NAME set N | down | await [--wait T] | status\n"
    "A count-down latch stored as Redisson's RCountDownLatch: the key NAME holds the\n"
    "count; reaching zero publishes 0 on redisson_countdownlatch__channel__{NAME}.\n\n"
    "  set N          set the count to N if the latch has none (it is open)\n"
    "  down           count down by one\n"
    "  await          wait until the count is zero (the latch is open)\n"
    "  status         show the count\n"
    "  --wait T       await: wait at most T (default: until open); exit 75 when it\n"
    "                 runs out\n"
    "  --json         print one JSON object\n"
    "  -u, --url URL ...    Redis URL and TLS options: see 'rlock --help'\n";

static void json_head(const char *kind, const char *name) {
  fputs("{\"name\":", stdout);
  json_string(stdout, name, strlen(name));
  printf(",\"kind\":\"%s\"", kind);
}

/* The options and positional words of either command: 0 or the exit code. */
static int parse(const char *cmd, const char *usage, cli_global_t *g, int argc, char **argv, int *json,
                 int64_t *wait_ms, int *pos) {
  static const struct option longopts[] = {{"json", no_argument, NULL, 'j'},
                                           {"wait", required_argument, NULL, 'w'},
                                           CLI_CONNECT_LONGOPTS,
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  int c, ex = 0;
  while ((c = getopt_long(argc, argv, ":u:h", longopts, NULL)) != -1) {
    switch (c) {
    case 'j': *json = 1; break;
    case 'w': ex = cli_duration(cmd, "--wait", optarg, 0, wait_ms); break;
    case 'h': fputs(usage, stdout); return -1;
    default: ex = cli_connect_option(cmd, g, c, optarg, argv);
    }
    if (ex) return ex;
  }
  *pos = optind;
  if (argc - optind < 2) return cli_usage(cmd, "expected NAME and an action");
  return cli_name(cmd, argv[optind]);
}

static int count_arg(const char *cmd, const char *what, const char *s, long min, long *out) {
  return cli_count(cmd, what, s, min, 999999999999999L, out);
}

/* How many rlock waiters queue for NAME (ZCARD of rlock_semaphore_queue:{NAME}):
 * 0 or an exit code. */
static int queue_length(rlock_client_t *client, const char *name, int64_t *out) {
  char *q = cli_prefixed("rlock_semaphore_queue", name, strlen(name));
  *out = 0;
  if (!q) return 0; /* a NAME with odd braces: the key is not Redisson's form (none shown) */
  const char *argv[2] = {"ZCARD", q};
  rlock_reply_t *r = NULL;
  int rc = rlock_client_command(client, 2, argv, NULL, &r);
  free(q);
  if (!rc && r->type != RLOCK_REPLY_INTEGER) rc = RLOCK_EPROTO;
  if (!rc) *out = r->integer;
  rlock_reply_free(r);
  return rc ? cli_fail(rc, "cannot read the queue") : 0;
}

int cmd_semaphore(cli_global_t *g, int argc, char **argv) {
  int json = 0, pos = 0, ex;
  int64_t wait_ms = -1;
  if ((ex = parse("semaphore", sem_usage, g, argc, argv, &json, &wait_ms, &pos))) return ex < 0 ? 0 : ex;
  const char *name = argv[pos], *action = argv[pos + 1];
  int nargs = argc - pos - 2;
  long n = 1;
  if (!strcmp(action, "set")) {
    if (nargs != 1) return cli_usage("semaphore", "set takes one N");
    if ((ex = count_arg("semaphore", "N", argv[pos + 2], 0, &n))) return ex;
  } else if (!strcmp(action, "acquire") || !strcmp(action, "release")) {
    if (nargs > 1) return cli_usage("semaphore", "%s takes at most one N", action);
    if (nargs == 1 && (ex = count_arg("semaphore", "N", argv[pos + 2], 1, &n))) return ex;
  } else if (!strcmp(action, "status")) {
    if (nargs) return cli_usage("semaphore", "status takes no argument");
  } else {
    return cli_usage("semaphore", "unknown action '%s' (set, acquire, release, status)", action);
  }
  if (wait_ms >= 0 && strcmp(action, "acquire")) return cli_usage("semaphore", "--wait is for acquire");
  rlock_client_t *client;
  rlock_semaphore_t *s = NULL;
  if ((ex = cli_connect(g, NULL, &client))) return ex;
  int rc = rlock_semaphore_new(client, name, strlen(name), &s);
  int64_t avail = 0;
  int set = 0;
  if (rc) {
    ex = cli_fail(rc, name);
  } else if (!strcmp(action, "set")) {
    if ((rc = rlock_semaphore_try_set_permits(s, n, &set)) || (rc = rlock_semaphore_available(s, &avail)))
      ex = cli_fail(rc, "cannot set the permits");
    else if (json)
      json_head("semaphore", name),
          printf(",\"set\":%s,\"available\":%lld}\n", set ? "true" : "false", (long long)avail);
    else if (set) printf("%s: set to %ld permits\n", name, n);
    else printf("%s: not set, it exists already (%lld available)\n", name, (long long)avail);
  } else if (!strcmp(action, "acquire")) {
    rc = rlock_semaphore_acquire(s, n, wait_ms < 0 ? RLOCK_WAIT_FOREVER : wait_ms, cli_cancel_begin());
    if (!rc) cli_cancel_end(rc); /* else wait_exit */
    if (!rc) rc = rlock_semaphore_available(s, &avail);
    char busy[300];
    snprintf(busy, sizeof busy, "not enough permits of %.200s: timed out waiting for them", name);
    if (rc) {
      ex = wait_exit(rc, "cannot acquire", busy);
    } else {
      signal(SIGPIPE, SIG_IGN); /* a closed pipe: EPIPE, not death with the permits taken */
      if (json) json_head("semaphore", name), printf(",\"acquired\":%ld,\"available\":%lld}\n", n, (long long)avail);
      else printf("%s: acquired %ld permit%s (%lld available)\n", name, n, n == 1 ? "" : "s", (long long)avail);
      if (fflush(stdout) != 0 || ferror(stdout)) {
        /* the caller cannot tell they were taken: give them back */
        int rel = rlock_semaphore_release(s, n, NULL);
        cli_err("cannot write to stdout: %s", rel ? "the permits stay taken" : "the permits were given back");
        ex = EX_IOERR;
      }
    }
  } else if (!strcmp(action, "release")) {
    if ((rc = rlock_semaphore_release(s, n, &avail))) ex = cli_fail(rc, "cannot release");
    else if (json) json_head("semaphore", name), printf(",\"released\":%ld,\"available\":%lld}\n", n, (long long)avail);
    else printf("%s: released %ld permit%s (%lld available)\n", name, n, n == 1 ? "" : "s", (long long)avail);
  } else {
    int64_t queued = 0;
    if ((rc = rlock_semaphore_available(s, &avail))) ex = cli_fail(rc, "cannot read the semaphore");
    else if ((ex = queue_length(client, name, &queued))) (void)0;
    else if (json)
      json_head("semaphore", name),
          printf(",\"available\":%lld,\"queued\":%lld}\n", (long long)avail, (long long)queued);
    else if (queued)
      printf("%s: %lld permit%s available, %lld rlock waiter%s queued\n", name, (long long)avail, avail == 1 ? "" : "s",
             (long long)queued, queued == 1 ? "" : "s");
    else printf("%s: %lld permit%s available\n", name, (long long)avail, avail == 1 ? "" : "s");
  }
  rlock_semaphore_free(s);
  rlock_client_free(client);
  return ex;
}

int cmd_latch(cli_global_t *g, int argc, char **argv) {
  int json = 0, pos = 0, ex;
  int64_t wait_ms = -1;
  if ((ex = parse("latch", latch_usage, g, argc, argv, &json, &wait_ms, &pos))) return ex < 0 ? 0 : ex;
  const char *name = argv[pos], *action = argv[pos + 1];
  int nargs = argc - pos - 2;
  long n = 0;
  if (!strcmp(action, "set")) {
    if (nargs != 1) return cli_usage("latch", "set takes one N");
    if ((ex = count_arg("latch", "N", argv[pos + 2], 1, &n))) return ex;
  } else if (!strcmp(action, "down") || !strcmp(action, "await") || !strcmp(action, "status")) {
    if (nargs) return cli_usage("latch", "%s takes no argument", action);
  } else {
    return cli_usage("latch", "unknown action '%s' (set, down, await, status)", action);
  }
  if (wait_ms >= 0 && strcmp(action, "await")) return cli_usage("latch", "--wait is for await");
  rlock_client_t *client;
  rlock_latch_t *l = NULL;
  if ((ex = cli_connect(g, NULL, &client))) return ex;
  int rc = rlock_latch_new(client, name, strlen(name), &l);
  int64_t count = 0;
  int set = 0;
  if (rc) {
    ex = cli_fail(rc, name);
  } else if (!strcmp(action, "set")) {
    if ((rc = rlock_latch_try_set_count(l, n, &set)) || (rc = rlock_latch_get_count(l, &count)))
      ex = cli_fail(rc, "cannot set the count");
    else if (json)
      json_head("latch", name), printf(",\"set\":%s,\"count\":%lld}\n", set ? "true" : "false", (long long)count);
    else if (set) printf("%s: count set to %ld\n", name, n);
    else printf("%s: not set, it exists already (count %lld)\n", name, (long long)count);
  } else if (!strcmp(action, "down")) {
    if ((rc = rlock_latch_count_down(l, &count))) ex = cli_fail(rc, "cannot count down");
    else if (json)
      json_head("latch", name), printf(",\"count\":%lld,\"open\":%s}\n", (long long)count, count ? "false" : "true");
    else printf("%s: count %lld%s\n", name, (long long)count, count ? "" : " (open)");
  } else if (!strcmp(action, "await")) {
    rc = rlock_latch_await(l, wait_ms < 0 ? RLOCK_WAIT_FOREVER : wait_ms, cli_cancel_begin());
    if (!rc) cli_cancel_end(rc); /* else wait_exit */
    char busy[300];
    snprintf(busy, sizeof busy, "the latch %.200s did not open: timed out waiting for it", name);
    if (rc) ex = wait_exit(rc, "cannot await", busy);
    else if (json) json_head("latch", name), fputs(",\"count\":0,\"open\":true}\n", stdout);
    else printf("%s: open\n", name);
  } else {
    if ((rc = rlock_latch_get_count(l, &count))) ex = cli_fail(rc, "cannot read the latch");
    else if (json)
      json_head("latch", name), printf(",\"count\":%lld,\"open\":%s}\n", (long long)count, count ? "false" : "true");
    else printf("%s: count %lld%s\n", name, (long long)count, count ? "" : " (open)");
  }
  rlock_latch_free(l);
  rlock_client_free(client);
  return ex;
}
