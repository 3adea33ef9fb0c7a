/* detect.c -- what a key holds, from its type, its fields and its companion
 * keys (docs/wire-format.md): a reentrant, fair, fenced or read-write lock
 * (hashes), a simple lock (a string owner id), a semaphore or latch (a
 * string count), a permit semaphore (a count with its zset). Used by
 * `rlock status` without a kind option, `rlock wait` and `rlock ls`. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static rlock_reply_t *ask(rlock_client_t *c, int argc, const char *const *argv, const size_t *lens) {
  rlock_reply_t *r = NULL;
  if (rlock_client_command(c, argc, argv, lens, &r)) return NULL;
  if (r->type == RLOCK_REPLY_ERROR) {
    rlock_reply_free(r);
    return NULL;
  }
  return r;
}

/* Redisson's prefixName: "P:{NAME}", or "P:NAME" when NAME opens a non-empty
 * tag closed later. NULL for other names with braces (rlock's own form:
 * not looked at) or no memory. */
char *cli_prefixed(const char *prefix, const char *name, size_t len) {
  const char *open = memchr(name, '{', len), *close = memchr(name, '}', len);
  int tagged = 0;
  if (open) {
    const char *end = memchr(open + 1, '}', len - (size_t)(open + 1 - name));
    if (!end || end == open + 1 || (close && close < open)) return NULL;
    tagged = 1;
  } else if (close) {
    return NULL;
  }
  size_t pl = strlen(prefix);
  char *k = malloc(pl + len + 4);
  if (!k) return NULL;
  memcpy(k, prefix, pl);
  k[pl] = ':';
  char *p = k + pl + 1;
  if (!tagged) *p++ = '{';
  memcpy(p, name, len);
  p += len;
  if (!tagged) *p++ = '}';
  *p = 0;
  return k;
}

/* Redisson's suffixName: "{NAME}:S", or "NAME:S" when NAME holds a '{'. */
static char *suffixed(const char *name, size_t len, const char *suffix) {
  int braces = memchr(name, '{', len) != NULL;
  size_t sl = strlen(suffix);
  char *k = malloc(len + sl + 4);
  if (!k) return NULL;
  char *p = k;
  if (!braces) *p++ = '{';
  memcpy(p, name, len);
  p += len;
  if (!braces) *p++ = '}';
  *p++ = ':';
  memcpy(p, suffix, sl + 1);
  return k;
}

/* 1 if the key k (NULL: unknown) exists. */
static int exists(rlock_client_t *c, char *k) {
  if (!k) return 0;
  const char *a[] = {"EXISTS", k};
  rlock_reply_t *r = ask(c, 2, a, NULL);
  int yes = r && r->type == RLOCK_REPLY_INTEGER && r->integer > 0;
  rlock_reply_free(r);
  free(k);
  return yes;
}

static int is_count(const char *s, size_t n) {
  if (n && *s == '-') s++, n--;
  return n > 0 && n <= 20 && strspn(s, "0123456789") == n;
}

static void found(cli_found_t *f, int kind, const char *code, const char *what) {
  f->kind = kind;
  f->code = code;
  snprintf(f->what, sizeof f->what, "%s", what);
}

int cli_detect(rlock_client_t *c, const char *name, size_t len, const char *type, cli_found_t *f) {
  memset(f, 0, sizeof *f);
  found(f, CLI_KIND_REENTRANT, "none", "no such key");
  if (!strcmp(type, "none")) { /* free: a fair lock's queue or a fenced lock's counter may say more */
    if (exists(c, cli_prefixed("redisson_lock_queue", name, len)))
      found(f, CLI_KIND_FAIR, "fair", "fair lock (free, with a queue)");
    else if (exists(c, cli_prefixed("redisson_lock_token", name, len)))
      found(f, CLI_KIND_FENCED, "fenced", "fenced lock (free)");
    return 0;
  }
  f->exists = 1;
  if (!strcmp(type, "hash")) {
    const char *a[] = {"HGET", name, "mode"};
    size_t l[] = {4, len, 4};
    rlock_reply_t *r = ask(c, 3, a, l);
    if (r && r->type == RLOCK_REPLY_STRING) {
      char w[64];
      snprintf(w, sizeof w, "read-write lock (%.20s mode)", r->str);
      found(f, CLI_KIND_READ, "rwlock", w);
    } else if (exists(c, cli_prefixed("redisson_lock_queue", name, len)) ||
               exists(c, cli_prefixed("redisson_lock_timeout", name, len))) {
      found(f, CLI_KIND_FAIR, "fair", "fair lock");
    } else if (exists(c, cli_prefixed("redisson_lock_token", name, len))) {
      found(f, CLI_KIND_FENCED, "fenced", "fenced lock");
    } else {
      found(f, CLI_KIND_REENTRANT, "reentrant", "reentrant lock (or non-reentrant or spin: one layout)");
    }
    rlock_reply_free(r);
    return 0;
  }
  if (!strcmp(type, "string")) {
    const char *a[] = {"GET", name};
    size_t l[] = {3, len};
    rlock_reply_t *r = ask(c, 2, a, l);
    if (r && r->type == RLOCK_REPLY_STRING && is_count(r->str, r->len)) {
      f->count = strtoll(r->str, NULL, 10);
      if (exists(c, suffixed(name, len, "timeout"))) found(f, -1, "permit_semaphore", "permit semaphore");
      else found(f, -1, "semaphore_or_latch", "semaphore or count-down latch");
    } else {
      found(f, CLI_KIND_SIMPLE, "simple", "simple lock");
    }
    rlock_reply_free(r);
    return 0;
  }
  char w[64];
  snprintf(w, sizeof w, "a %.20s", type);
  found(f, -1, "other", w);
  return 0;
}

int cli_detect_kind(rlock_client_t *client, const char *name, cli_found_t *f) {
  const char *argv[] = {"TYPE", name};
  rlock_reply_t *r = NULL;
  int rc = rlock_client_command(client, 2, argv, NULL, &r);
  if (rc) return cli_fail(rc, "cannot read the key's type");
  if (r->type == RLOCK_REPLY_ERROR) {
    cli_err("TYPE %s: %.200s", name, r->str);
    rlock_reply_free(r);
    return EX_SOFTWARE;
  }
  char type[24];
  snprintf(type, sizeof type, "%s", r->str ? r->str : "");
  rlock_reply_free(r);
  cli_detect(client, name, strlen(name), type, f);
  if (f->kind >= 0) return 0;
  if (!strcmp(f->code, "other")) cli_err("%s is not a lock (holds %s)", name, f->what);
  else
    cli_err("%s is not a lock (a %s, count %lld: try 'rlock semaphore %s status' or 'rlock latch %s status')", name,
            f->what, (long long)f->count, name, name);
  return EX_DATAERR;
}
