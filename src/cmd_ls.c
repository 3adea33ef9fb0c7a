/* cmd_ls.c -- `rlock ls [--json] [PATTERN]`: every lock object on the server
 * whose name matches PATTERN (SCAN MATCH, default *): Redisson's lock hashes
 * (reentrant, fair, fenced, non-reentrant: kind "lock"; read-write: kind
 * "rwlock" with its mode), their holders, TTL and waiters (PUBSUB NUMSUB of
 * the lock's channel). A hash that is not a lock (a field that is not
 * "<36-character id>:<thread>" -> count) is skipped. A fair lock's waiters
 * are its queue (redisson_lock_queue:{NAME}): each waits on a channel of its
 * own. Names with a brace keep it as Redisson's prefixName does (no braces
 * added: "redisson_lock__channel:a{b}c"). One server (or the
 * Sentinel's master); a Cluster is refused (each master would need its own
 * SCAN). */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char usage_text[] =
    "Usage: rlock ls [--json] [PATTERN]\n"
    "Lists the locks whose names match PATTERN (Redis glob, default *): kind\n"
    "(lock or rwlock), holders (owner and count), TTL and waiters. Simple locks\n"
    "(strings), semaphores and latches are not listed. Not on a Cluster.\n\n"
    "  --json         one JSON array on one line\n"
    "  -u, --url URL ...    Redis URL and TLS options: see 'rlock --help'\n";

static rlock_reply_t *cmd(rlock_client_t *c, int argc, const char *const *argv, const size_t *lens) {
  rlock_reply_t *r = NULL;
  if (rlock_client_command(c, argc, argv, lens, &r)) return NULL;
  if (r->type == RLOCK_REPLY_ERROR) {
    cli_err("%s: %.200s", argv[0], r->str);
    rlock_reply_free(r);
    return NULL;
  }
  return r;
}

/* A Redisson lock hash: "mode" (rwlock) and owner fields "<36>:<x>" -> integer. */
static int is_lock(const rlock_reply_t *h, const char **mode) {
  *mode = NULL;
  if (h->type != RLOCK_REPLY_ARRAY || h->elements == 0 || h->elements % 2) return 0;
  for (size_t i = 0; i < h->elements; i += 2) {
    const rlock_reply_t *f = h->element[i], *v = h->element[i + 1];
    if (f->type != RLOCK_REPLY_STRING || v->type != RLOCK_REPLY_STRING) return 0;
    if (f->len == 4 && !memcmp(f->str, "mode", 4)) {
      *mode = v->str;
      continue;
    }
    /* the count as HINCRBY writes it: digits, no leading zero, at most 19
     * (anything else is no working lock, and would not be a JSON number) */
    if (f->len < 38 || f->str[36] != ':' || v->len == 0 || v->len > 19 || (v->len > 1 && v->str[0] == '0') ||
        strspn(v->str, "0123456789") != v->len)
      return 0;
  }
  return 1;
}

/* Redisson's prefixName: "PREFIX:{NAME}", or "PREFIX:NAME" when NAME has a
 * brace (malloc'd, NULL when out of memory; *n its length). */
static char *prefixed(const char *prefix, const rlock_reply_t *key, size_t *n) {
  int braces = memchr(key->str, '{', key->len) != NULL;
  size_t pl = strlen(prefix);
  char *p = malloc(pl + key->len + 4);
  if (!p) return NULL;
  size_t o = 0;
  memcpy(p, prefix, pl), o = pl;
  p[o++] = ':';
  if (!braces) p[o++] = '{';
  memcpy(p + o, key->str, key->len), o += key->len;
  if (!braces) p[o++] = '}';
  p[o] = 0;
  *n = o;
  return p;
}

/* An integer reply of argv (0 on any error). */
static int64_t int_of(rlock_client_t *c, int argc, const char *const *argv, const size_t *lens) {
  rlock_reply_t *r = cmd(c, argc, argv, lens);
  int64_t v = 0;
  if (r && r->type == RLOCK_REPLY_INTEGER) v = r->integer;
  else if (r && r->type == RLOCK_REPLY_ARRAY && r->elements == 2 && r->element[1]->type == RLOCK_REPLY_INTEGER)
    v = r->element[1]->integer; /* PUBSUB NUMSUB: channel, count */
  rlock_reply_free(r);
  return v;
}

static void show(rlock_client_t *c, const rlock_reply_t *key, int json, int *first) {
  const char *ka[] = {"HGETALL", key->str};
  size_t kl[] = {7, key->len};
  rlock_reply_t *h = cmd(c, 2, ka, kl);
  const char *mode;
  if (!h || !is_lock(h, &mode)) {
    rlock_reply_free(h);
    return;
  }
  const char *ta[] = {"PTTL", key->str};
  size_t tl[] = {4, key->len};
  rlock_reply_t *t = cmd(c, 2, ta, tl);
  int64_t ttl = t && t->type == RLOCK_REPLY_INTEGER ? t->integer : -2;
  rlock_reply_free(t);
  size_t chn = 0, qn = 0;
  char *ch = prefixed(mode ? "redisson_rwlock" : "redisson_lock__channel", key, &chn);
  int64_t waiters = 0;
  if (ch) {
    const char *na[] = {"PUBSUB", "NUMSUB", ch};
    size_t nl[] = {6, 6, chn};
    waiters = int_of(c, 3, na, nl);
    free(ch);
  }
  char *q = mode ? NULL : prefixed("redisson_lock_queue", key, &qn);
  if (q) { /* a fair lock: its queued waiters */
    const char *la[] = {"LLEN", q};
    size_t ll[] = {4, qn};
    waiters += int_of(c, 2, la, ll);
    free(q);
  }
  if (json) {
    fputs(*first ? "{\"name\":" : ",{\"name\":", stdout);
    json_string(stdout, key->str, key->len);
    printf(",\"kind\":\"%s\"", mode ? "rwlock" : "lock");
    if (mode) fputs(",\"mode\":", stdout), json_string(stdout, mode, strlen(mode));
    fputs(",\"holders\":[", stdout);
    int n = 0;
    for (size_t i = 0; i < h->elements; i += 2) {
      if (h->element[i]->len == 4 && !memcmp(h->element[i]->str, "mode", 4)) continue;
      fputs(n++ ? ",{\"owner\":" : "{\"owner\":", stdout);
      json_string(stdout, h->element[i]->str, h->element[i]->len);
      printf(",\"count\":%s}", h->element[i + 1]->str);
    }
    printf("],\"ttl_ms\":%lld,\"waiters\":%lld}", (long long)ttl, (long long)waiters);
  } else {
    fwrite(key->str, 1, key->len, stdout);
    printf(": %s%s%s, ttl %lld ms, %lld waiting, held by", mode ? "rwlock (" : "lock", mode ? mode : "",
           mode ? ")" : "", (long long)ttl, (long long)waiters);
    for (size_t i = 0; i < h->elements; i += 2) {
      if (h->element[i]->len == 4 && !memcmp(h->element[i]->str, "mode", 4)) continue;
      printf(" %.*s (count %s)", (int)h->element[i]->len, h->element[i]->str, h->element[i + 1]->str);
    }
    putchar('\n');
  }
  *first = 0;
  rlock_reply_free(h);
}

int cmd_ls(cli_global_t *g, int argc, char **argv) {
  static const struct option longopts[] = {{"json", no_argument, NULL, 'j'},
                                           CLI_CONNECT_LONGOPTS,
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  int c, json = 0, ex = 0;
  while ((c = getopt_long(argc, argv, ":u:h", longopts, NULL)) != -1) {
    switch (c) {
      case 'j': json = 1; break;
      case 'h': fputs(usage_text, stdout); return 0;
      default: ex = cli_connect_option("ls", g, c, optarg, argv);
    }
    if (ex) return ex;
  }
  if (optind < argc - 1) return cli_usage("ls", "expected at most one PATTERN");
  const char *pattern = optind < argc ? argv[optind] : "*";
  if (strstr(g->url, "+cluster://"))
    return cli_usage("ls", "not on a Cluster yet (each master needs its own SCAN)");
  rlock_client_t *client;
  if ((ex = cli_connect(g, NULL, &client))) return ex;
  char cursor[32] = "0";
  int first = 1;
  if (json) putchar('[');
  do {
    const char *sa[] = {"SCAN", cursor, "MATCH", pattern, "COUNT", "1000", "TYPE", "hash"};
    rlock_reply_t *r = cmd(client, 8, sa, NULL);
    if (!r || r->type != RLOCK_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != RLOCK_REPLY_STRING ||
        r->element[1]->type != RLOCK_REPLY_ARRAY) {
      if (r) cli_err("ls: unexpected SCAN reply");
      else cli_err("ls: SCAN failed: %s", rlock_last_error());
      rlock_reply_free(r);
      ex = EX_UNAVAILABLE;
      break;
    }
    snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
    for (size_t i = 0; i < r->element[1]->elements; i++)
      if (r->element[1]->element[i]->type == RLOCK_REPLY_STRING) show(client, r->element[1]->element[i], json, &first);
    rlock_reply_free(r);
  } while (strcmp(cursor, "0") != 0);
  if (json) puts("]");
  rlock_client_free(client);
  return ex;
}
