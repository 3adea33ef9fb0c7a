/* cmd_ls.c -- `rlock ls [--json] [PATTERN]`: every lock object on the server
 * (a Cluster: on every master) whose name matches PATTERN (SCAN MATCH,
 * default *), with its kind (src/detect.c: reentrant, fair, fenced,
 * read-write, simple, semaphore or latch, permit semaphore), holders, TTL and
 * waiters (PUBSUB NUMSUB of its channels; a Cluster: PUBSUB SHARDNUMSUB on
 * the key's master plus NUMSUB on every master). A hash that is not in
 * Redisson's lock layout, a string that is neither a count nor a value with a
 * TTL (a simple lock always has one), other types and the objects' own
 * companion keys (queues, counters, latches) are not listed. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"

static const char usage_text[] =
    "Usage: rlock ls [--json] [PATTERN]\n"
    "Lists the lock objects whose names match PATTERN (Redis glob, default *), on\n"
    "every master of a Cluster: kind (reentrant, fair, fenced, rwlock and its mode,\n"
    "simple, semaphore_or_latch, permit_semaphore), holders (owner and count), TTL\n"
    "and waiters (subscribers of the object's channels; a fair lock: its queue).\n"
    "A string is a simple lock only with a TTL; a number is a semaphore or latch.\n\n"
    "  --json         one JSON array on one line\n"
    "  -u, --url URL ...    Redis URL and TLS options: see 'rlock --help'\n";

#define MASTERS_MAX 256

typedef struct ls {
  rlock_client_t *m[MASTERS_MAX]; /* one client per master (one server: the client) */
  char addr[MASTERS_MAX][64];     /* a Cluster master's host:port */
  int n, cluster, json, first;
} ls_t;

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

static int64_t int_cmd(rlock_client_t *c, int argc, const char *const *argv, const size_t *lens, int64_t dflt) {
  rlock_reply_t *r = cmd(c, argc, argv, lens);
  int64_t v = r && r->type == RLOCK_REPLY_INTEGER ? r->integer : dflt;
  rlock_reply_free(r);
  return v;
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

/* The keys an object keeps beside NAME: never listed as objects. */
static int companion(const char *k, size_t n) {
  static const char *const prefixes[] = {
      "redisson_lock_queue:",   "redisson_lock_timeout:", "redisson_lock_token:",
      "rlock_acquire_latch:",   "redisson_unlock_latch:", "rlock_semaphore_latch:",
      "rlock_countdown_latch:", "rlock_semaphore_queue:", "rlock_semaphore_timeout:"};
  for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
    if (n >= strlen(prefixes[i]) && !memcmp(k, prefixes[i], strlen(prefixes[i]))) return 1;
  return memmem(k, n, ":rwlock_timeout", 15) != NULL; /* a reader's hold keys */
}

/* Subscribers of channel prefix + "{" NAME "}" (braces: "{" forced, else
 * Redisson's prefixName; NULL: none) on the object's master m. */
static int64_t subs(ls_t *ls, rlock_client_t *m, const char *prefix, int braces, const char *name, size_t len) {
  char *ch;
  if (braces) {
    size_t pl = strlen(prefix);
    if (!(ch = malloc(pl + len + 2))) return 0;
    memcpy(ch, prefix, pl), memcpy(ch + pl, name, len), ch[pl + len] = '}', ch[pl + len + 1] = 0;
  } else if (!(ch = cli_prefixed(prefix, name, len))) {
    return 0;
  }
  int64_t n = 0;
  const char *na[] = {"PUBSUB", "NUMSUB", ch};
  for (int i = 0; i < ls->n; i++) { /* classic pub/sub: each node counts its own subscribers */
    rlock_reply_t *r = cmd(ls->m[i], 3, na, NULL);
    if (r && r->type == RLOCK_REPLY_ARRAY && r->elements == 2 && r->element[1]->type == RLOCK_REPLY_INTEGER)
      n += r->element[1]->integer;
    rlock_reply_free(r);
  }
  if (ls->cluster) { /* sharded pub/sub (rlock's in a Cluster): the channel's master, the key's */
    const char *sa[] = {"PUBSUB", "SHARDNUMSUB", ch};
    rlock_reply_t *r = cmd(m, 3, sa, NULL);
    if (r && r->type == RLOCK_REPLY_ARRAY && r->elements == 2 && r->element[1]->type == RLOCK_REPLY_INTEGER)
      n += r->element[1]->integer;
    rlock_reply_free(r);
  }
  free(ch);
  return n;
}

/* The object's name, kind, node, TTL and waiters (JSON: the object opened). */
static void head(ls_t *ls, int i, const char *name, size_t len, const cli_found_t *f, const char *mode, int64_t ttl,
                 int64_t waiters) {
  if (ls->json) {
    fputs(ls->first ? "{\"name\":" : ",{\"name\":", stdout);
    json_string(stdout, name, len);
    printf(",\"kind\":\"%s\"", f->code);
    if (mode) fputs(",\"mode\":", stdout), json_string(stdout, mode, strlen(mode));
    if (ls->cluster) printf(",\"node\":\"%s\"", ls->addr[i]);
  } else {
    fwrite(name, 1, len, stdout);
    printf(": %s", f->code);
    if (mode) printf(" (%s)", mode);
    if (ls->cluster) printf(", node %s", ls->addr[i]);
  }
  ls->first = 0;
  if (ls->json) printf(",\"ttl_ms\":%lld,\"waiters\":%lld", (long long)ttl, (long long)waiters);
  else printf(", ttl %lld ms, %lld waiting", (long long)ttl, (long long)waiters);
}

static void show(ls_t *ls, int i, const rlock_reply_t *key) {
  rlock_client_t *m = ls->m[i];
  const char *name = key->str;
  size_t len = key->len;
  if (companion(name, len) || memchr(name, 0, len)) return;
  const char *ta[] = {"TYPE", name}, *pa[] = {"PTTL", name};
  size_t kl[] = {4, len};
  rlock_reply_t *t = cmd(m, 2, ta, kl);
  if (!t || (t->type != RLOCK_REPLY_STATUS && t->type != RLOCK_REPLY_STRING)) {
    rlock_reply_free(t);
    return;
  }
  cli_found_t f;
  cli_detect(m, name, len, t->str, &f);
  rlock_reply_free(t);
  int64_t ttl = int_cmd(m, 2, pa, kl, -2);
  if (!strcmp(f.code, "reentrant") || !strcmp(f.code, "fair") || !strcmp(f.code, "fenced") ||
      !strcmp(f.code, "rwlock")) {
    const char *ha[] = {"HGETALL", name};
    size_t hl[] = {7, len};
    rlock_reply_t *h = cmd(m, 2, ha, hl);
    const char *mode;
    if (!h || !is_lock(h, &mode)) {
      rlock_reply_free(h);
      return;
    }
    int64_t waiters;
    if (!strcmp(f.code, "fair")) { /* each waiter listens on a channel of its own: the queue */
      char *q = cli_prefixed("redisson_lock_queue", name, len);
      const char *la[] = {"LLEN", q};
      waiters = q ? int_cmd(m, 2, la, NULL, 0) : 0;
      free(q);
    } else {
      waiters = subs(ls, m, mode ? "redisson_rwlock" : "redisson_lock__channel", 0, name, len);
    }
    head(ls, i, name, len, &f, mode, ttl, waiters);
    if (ls->json) fputs(",\"holders\":[", stdout);
    else fputs(", held by", stdout);
    int n = 0;
    for (size_t j = 0; j < h->elements; j += 2) {
      const rlock_reply_t *o = h->element[j];
      if (o->len == 4 && !memcmp(o->str, "mode", 4)) continue;
      if (ls->json) {
        fputs(n++ ? ",{\"owner\":" : "{\"owner\":", stdout);
        json_string(stdout, o->str, o->len);
        printf(",\"count\":%s}", h->element[j + 1]->str);
      } else {
        printf(" %.*s (count %s)", (int)o->len, o->str, h->element[j + 1]->str);
      }
    }
    if (ls->json) fputs("]}", stdout);
    rlock_reply_free(h);
  } else if (!strcmp(f.code, "simple")) {
    if (ttl < 0) return; /* a plain string: a simple lock always has a lease */
    const char *ga[] = {"GET", name};
    size_t gl[] = {3, len};
    rlock_reply_t *v = cmd(m, 2, ga, gl);
    if (!v || v->type != RLOCK_REPLY_STRING) {
      rlock_reply_free(v);
      return;
    }
    head(ls, i, name, len, &f, NULL, ttl, subs(ls, m, "redisson_lock__channel", 0, name, len));
    if (ls->json) {
      fputs(",\"holders\":[{\"owner\":", stdout);
      json_string(stdout, v->str, v->len);
      fputs(",\"count\":1}]}", stdout);
    } else {
      printf(", held by %.*s (count 1)", (int)v->len, v->str);
    }
    rlock_reply_free(v);
  } else if (!strcmp(f.code, "semaphore_or_latch") || !strcmp(f.code, "permit_semaphore")) {
    int pes = !strcmp(f.code, "permit_semaphore");
    int64_t waiters = subs(ls, m, "redisson_sc", 0, name, len);
    if (!pes) waiters += subs(ls, m, "redisson_countdownlatch__channel__{", 1, name, len);
    head(ls, i, name, len, &f, NULL, ttl, waiters);
    if (ls->json) printf(",\"holders\":[],\"count\":%lld}", f.count);
    else printf(", count %lld", f.count);
  } else {
    return; /* not a lock object */
  }
  if (!ls->json) putchar('\n');
}

/* SCAN of one master (ls->m[i]): 0 or EX_UNAVAILABLE. */
static int scan(ls_t *ls, int i, const char *pattern) {
  char cursor[32] = "0";
  do {
    const char *sa[] = {"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"};
    rlock_reply_t *r = cmd(ls->m[i], 6, sa, NULL);
    if (!r || r->type != RLOCK_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != RLOCK_REPLY_STRING ||
        r->element[1]->type != RLOCK_REPLY_ARRAY) {
      if (r) cli_err("ls: unexpected SCAN reply");
      else cli_err("ls: SCAN failed: %s", rlock_last_error());
      rlock_reply_free(r);
      return EX_UNAVAILABLE;
    }
    snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
    for (size_t j = 0; j < r->element[1]->elements; j++)
      if (r->element[1]->element[j]->type == RLOCK_REPLY_STRING) show(ls, i, r->element[1]->element[j]);
    rlock_reply_free(r);
  } while (strcmp(cursor, "0") != 0);
  return 0;
}

/* The masters of the Cluster client c (CLUSTER NODES: "master" without
 * "fail"), each with a client of its own on a plain URL made of g's URL
 * (its user and password, TLS or not) and the master's address. */
static int masters(ls_t *ls, const cli_global_t *g, rlock_client_t *c) {
  const char *na[] = {"CLUSTER", "NODES"};
  rlock_reply_t *r = cmd(c, 2, na, NULL);
  if (!r || (r->type != RLOCK_REPLY_STRING && r->type != RLOCK_REPLY_STATUS)) {
    cli_err("ls: cannot list the Cluster's masters (CLUSTER NODES): %s", r ? "unexpected reply" : rlock_last_error());
    rlock_reply_free(r);
    return EX_UNAVAILABLE;
  }
  const char *rest = strstr(g->url, "://") + 3, *end = rest + strcspn(rest, "/?");
  const char *at = NULL;
  for (const char *p = rest; p < end; p++)
    if (*p == '@') at = p;
  int tls = strncasecmp(g->url, "rediss", 6) == 0;
  int ex = 0;
  for (char *line = r->str, *next; line && *line && !ex; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = 0;
    char id[64], addr[300], flags[200];
    if (sscanf(line, "%63s %299s %199s", id, addr, flags) != 3) continue;
    if (!strstr(flags, "master") || strstr(flags, "fail") || strstr(flags, "noaddr")) continue;
    addr[strcspn(addr, "@,")] = 0; /* ip:port@cport[,hostname] */
    if (ls->n == MASTERS_MAX) {
      cli_err("ls: more than %d masters", MASTERS_MAX);
      ex = EX_SOFTWARE;
      break;
    }
    char url[1024];
    snprintf(url, sizeof url, "%s://%.*s%s", tls ? "rediss" : "redis", at ? (int)(at + 1 - rest) : 0, rest, addr);
    cli_global_t one = *g;
    one.url = url;
    snprintf(ls->addr[ls->n], sizeof ls->addr[0], "%.63s", addr);
    if ((ex = cli_connect(&one, NULL, &ls->m[ls->n]))) break;
    ls->n++;
  }
  rlock_reply_free(r);
  if (!ex && ls->n == 0) {
    cli_err("ls: the Cluster has no master that is up");
    ex = EX_UNAVAILABLE;
  }
  return ex;
}

int cmd_ls(cli_global_t *g, int argc, char **argv) {
  static const struct option longopts[] = {
      {"json", no_argument, NULL, 'j'}, CLI_CONNECT_LONGOPTS, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
  int c, ex = 0;
  static ls_t ls;
  ls.first = 1;
  while ((c = getopt_long(argc, argv, ":u:h", longopts, NULL)) != -1) {
    switch (c) {
    case 'j': ls.json = 1; break;
    case 'h': fputs(usage_text, stdout); return 0;
    default: ex = cli_connect_option("ls", g, c, optarg, argv);
    }
    if (ex) return ex;
  }
  if (optind < argc - 1) return cli_usage("ls", "expected at most one PATTERN");
  const char *pattern = optind < argc ? argv[optind] : "*";
  rlock_client_t *client;
  if ((ex = cli_connect(g, NULL, &client))) return ex;
  if (strstr(g->url, "+cluster://")) {
    ls.cluster = 1;
    ex = masters(&ls, g, client);
  } else {
    ls.m[ls.n++] = client;
  }
  if (!ex) {
    if (ls.json) putchar('[');
    for (int i = 0; i < ls.n && !ex; i++) ex = scan(&ls, i, pattern);
    if (ls.json) puts("]");
  }
  for (int i = 0; i < ls.n; i++)
    if (ls.m[i] != client) rlock_client_free(ls.m[i]);
  rlock_client_free(client);
  return ex;
}
