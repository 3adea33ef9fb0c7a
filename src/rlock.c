/* rlock.c -- entry point of the rlock command-line tool: global options
 * (-u/--url and the TLS options, -h/--help, --version), top-level help,
 * `rlock help [COMMAND]` and dispatch to the sub-commands (exec, status,
 * unlock, demo, semaphore, latch). */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const struct {
  const char *name;
  int (*run)(cli_global_t *, int, char **);
  const char *summary;
} commands[] = {
    {"exec", cmd_exec, "run a command while holding a lock"},
    {"status", cmd_status, "show whether a lock is held, by whom, and its TTL"},
    {"unlock", cmd_unlock, "force-unlock a lock (--force)"},
    {"demo", cmd_demo, "stock-deduction demo: worker processes share one lock"},
    {"semaphore", cmd_semaphore, "set, acquire, release or show a semaphore's permits"},
    {"latch", cmd_latch, "set, count down, await or show a count-down latch"},
    {"acquire", cmd_acquire, "take a lock with a fixed lease; print its owner token"},
    {"extend", cmd_extend, "set the lease of a hold given its owner token"},
    {"release", cmd_release, "release a hold given its owner token"},
    {"ls", cmd_ls, "list the locks: kind, holders, TTL, waiters"},
    {"wait", cmd_wait, "wait until a lock is free, without taking it"},
};

static void help(FILE *f) {
  fputs(
      "Usage: rlock [-u URL] COMMAND [OPTIONS] [ARGS]\n"
      "Redisson-compatible distributed locks on Redis.\n\n"
      "Commands:\n",
      f);
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].summary);
  fputs("\nGlobal options (also accepted after COMMAND):\n" CLI_CONNECT_HELP
        "  -h, --help               show this help ('rlock help COMMAND' for a command)\n"
        "      --version            show the version\n\n"
        "Durations: 250ms (or 250), 1.5s, 2m, 1h, 1d, or a sum such as 1h30m.\n"
        "Exit codes: 64 usage, 65 not a lock (unlock), 69 Redis unavailable,\n"
        "70 internal error, 75 timed out waiting, 76 lock lost, 77 ACL refuses; exec: the\n"
        "command's status; status: 0 held, 1 free; extend, release: 1 not held by TOKEN.\n",
        f);
}

int main(int argc, char **argv) {
  static const struct option longopts[] = {
      CLI_CONNECT_LONGOPTS, {"help", no_argument, NULL, 'h'}, {"version", no_argument, NULL, 'V'}, {NULL, 0, NULL, 0}};
  cli_global_t g = {.url = getenv("RLOCK_URL")};
  if (!g.url || !*g.url) g.url = "redis://127.0.0.1:6379";
  opterr = 0;
  int c, ex;
  while ((c = getopt_long(argc, argv, "+:u:h", longopts, NULL)) != -1) {
    switch (c) {
    case 'h': help(stdout); return 0;
    case 'V':
      if (optind < argc) return cli_usage(NULL, "--version takes no argument");
      printf("rlock %s (librlock %s)\n", RLOCK_VERSION_STRING, rlock_version());
      return 0;
    default:
      if ((ex = cli_connect_option(NULL, &g, c, optarg, argv))) return ex;
    }
  }
  if (optind >= argc) {
    help(stderr);
    return EX_USAGE;
  }
  const char *name = argv[optind];
  char *help_argv[] = {NULL, "--help", NULL};
  if (strcmp(name, "help") == 0) { /* rlock help [COMMAND]: that command's --help */
    if (optind + 1 >= argc) {
      help(stdout);
      return 0;
    }
    if (optind + 2 < argc) return cli_usage(NULL, "'help' takes one COMMAND");
    name = help_argv[0] = argv[optind + 1];
    argc = 2, argv = help_argv, optind = 0;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
    if (strcmp(name, commands[i].name) == 0) {
      int sub_argc = argc - optind;
      char **sub_argv = argv + optind;
      optind = 0; /* GNU getopt: full re-initialisation for the sub-command */
      return commands[i].run(&g, sub_argc, sub_argv);
    }
  }
  return cli_usage(NULL, "unknown command '%s'", name);
}
