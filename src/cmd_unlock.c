/* cmd_unlock.c -- `rlock unlock --force [--any-type] NAME`: deletes a lock
 * whoever holds it and wakes its waiters; a key of that name that is not a
 * lock is left alone (exit 65) unless --any-type. Only --force exists: a hold
 * taken by `rlock acquire` ends with `rlock release NAME TOKEN` (cmd_hold.c). */
#include <getopt.h>

#include "cli.h"

static const char usage_text[] =
    "Usage: rlock unlock --force [--any-type] [--simple | --fair | --read | --write] NAME\n"
    "Deletes the lock NAME whoever holds it (Redisson forceUnlock) and wakes its\n"
    "waiters. A holder using a watchdog learns that it lost the lock at its next\n"
    "renewal (an `rlock exec` holder then stops its command and exits 76).\n"
    "A key NAME that is not a lock (not a hash of owner -> count) is left as it\n"
    "is (exit 65).\n\n"
    "  --force        required (a hold of 'rlock acquire': 'rlock release NAME TOKEN')\n"
    "  --any-type     delete NAME even if it is not a lock\n"
    "  --simple       NAME is a simple lock (a string: exec --simple, redis-py...)\n"
    "  --fair         NAME is a fair lock (exec --fair, RFairLock): wakes the queue's head\n"
    "  --read, --write  NAME is a read-write lock: break it only while it is in\n"
    "                 that mode (Redisson's readLock()/writeLock().forceUnlock())\n"
    "  -u, --url URL ...    Redis URL and TLS options: see 'rlock --help'\n";

int cmd_unlock(cli_global_t *g, int argc, char **argv) {
  static const struct option longopts[] = {{"force", no_argument, NULL, 'f'},
                                           {"any-type", no_argument, NULL, 'a'},
                                           {"simple", no_argument, NULL, 's'},
                                           {"fair", no_argument, NULL, 'F'},
                                           {"read", no_argument, NULL, 'R'},
                                           {"write", no_argument, NULL, 'W'},
                                           CLI_CONNECT_LONGOPTS,
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  int c, force = 0, any_type = 0, kind = CLI_KIND_REENTRANT, ex = 0;
  while ((c = getopt_long(argc, argv, ":fu:h", longopts, NULL)) != -1) {
    switch (c) {
    case 'f': force = 1; break;
    case 'a': any_type = 1; break;
    case 's': ex = cli_set_kind("unlock", &kind, CLI_KIND_SIMPLE); break;
    case 'F': ex = cli_set_kind("unlock", &kind, CLI_KIND_FAIR); break;
    case 'R': ex = cli_set_kind("unlock", &kind, CLI_KIND_READ); break;
    case 'W': ex = cli_set_kind("unlock", &kind, CLI_KIND_WRITE); break;
    case 'h': fputs(usage_text, stdout); return 0;
    default: ex = cli_connect_option("unlock", g, c, optarg, argv);
    }
    if (ex) return ex;
  }
  if (!force)
    return cli_usage("unlock",
                     "only 'unlock --force NAME' is supported (holds end with 'rlock exec', "
                     "or 'rlock release NAME TOKEN' after 'rlock acquire')");
  if (optind != argc - 1) return cli_usage("unlock", "expected exactly one lock NAME");
  const char *name = argv[optind];
  if ((ex = cli_name("unlock", name))) return ex;
  rlock_client_t *client;
  rlock_lock_t *lock;
  if ((ex = cli_connect(g, NULL, &client))) return ex;
  if (!(ex = cli_lock_kind(client, name, kind, &lock))) {
    int was_locked = 0;
    int rc = rlock_lock_force_unlock_flags(lock, any_type ? RLOCK_FORCE_ANY_TYPE : 0, &was_locked);
    if (rc == RLOCK_ENOTLOCK)
      ex = cli_fail(rc, name), fputs("rlock: use 'unlock --force --any-type' to delete it anyway\n", stderr);
    else if (rc) ex = cli_fail(rc, "cannot force-unlock");
    else if (was_locked == 2) printf("deleted %s (it was not a lock)\n", name);
    else if (was_locked) printf("unlocked %s (was locked)\n", name);
    else printf("%s was not locked\n", name);
    rlock_lock_free(lock);
  }
  rlock_client_free(client);
  return ex;
}
