/* script.c -- the Lua scripts of lua/ (one .lua file each, named after its lock
 * kind: lua/reentrant_*.lua, lua/simple_*.lua), embedded at build time, sent as
 * EVALSHA; a NOSCRIPT answer (server restarted, SCRIPT FLUSH) turns the same
 * request into EVAL with the script body (see conn.c). */
#include "client.h"
#include "resp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/evp.h>

/* The embedded texts (lua_<file>.c, made by cmake/embed.cmake). */
#define SCRIPT_EXTERN(e, file) extern const char rlock__lua_##file[];
RLOCK__SCRIPT_MAP(SCRIPT_EXTERN)
#undef SCRIPT_EXTERN

static const char *bodies[SCRIPT_N + 1];
static char shas[SCRIPT_N + 1][41];
/* Each script's request starts "*<argc>\r\n" then this: "$7\r\nEVALSHA\r\n$40\r\n<sha>\r\n". */
#define PREFIX_LEN (13 + 47)
static char prefixes[SCRIPT_N + 1][PREFIX_LEN];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void compute(void) {
#define SCRIPT_BODY(e, file) bodies[SCRIPT_##e] = rlock__lua_##file;
  RLOCK__SCRIPT_MAP(SCRIPT_BODY)
#undef SCRIPT_BODY
  for (int i = 1; i <= SCRIPT_N; i++) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_Digest(bodies[i], strlen(bodies[i]), md, &n, EVP_sha1(), NULL);
    for (unsigned j = 0; j < n && j < 20; j++) snprintf(shas[i] + 2 * j, 3, "%02x", md[j]);
    rlock__resp_bulk(rlock__resp_bulk(prefixes[i], "EVALSHA", 7), shas[i], 40);
  }
}

void rlock__script_init(void) { pthread_once(&once, compute); }
const char *rlock__script_body(int s) { return bodies[s]; }
const char *rlock__script_sha(int s) { return shas[s]; }

/* The n strings (lens NULL: strlen) as bulk strings at p; returns the end. */
static char *bulks(char *p, int n, const char **s, const size_t *lens) {
  for (int i = 0; i < n; i++) p = rlock__resp_bulk(p, s[i], lens ? lens[i] : strlen(s[i]));
  return p;
}

static size_t bulks_size(int n, const char **s, const size_t *lens) {
  size_t total = 0;
  for (int i = 0; i < n; i++) total += rlock__resp_bulk_size(lens ? lens[i] : strlen(s[i]));
  return total;
}

/* EVALSHA <sha> <nkeys> keys... args...: the script's precomputed prefix,
 * then the rest, written once into the request's own buffer. */
req_t *rlock__script_req(int script, int nkeys, const char **keys, const size_t *keylens, int nargs, const char **args,
                         const size_t *arglens, int64_t timeout_ms, req_done_fn done, void *ctx) {
  size_t argc = 3 + (size_t)nkeys + (size_t)nargs;
  char nk[24];
  size_t nkl = nkeys >= 0 && nkeys < 10 ? (nk[0] = (char)('0' + nkeys), 1) : rlock__i64toa(nkeys, nk);
  size_t len = rlock__resp_head_size(argc) + PREFIX_LEN + rlock__resp_bulk_size(nkl) +
               bulks_size(nkeys, keys, keylens) + bulks_size(nargs, args, arglens);
  req_t *r = rlock__req_alloc(len, timeout_ms, done, ctx);
  if (!r) return NULL;
  char *p = rlock__resp_head(r->cmd, '*', argc);
  memcpy(p, prefixes[script], PREFIX_LEN);
  p = rlock__resp_bulk(p + PREFIX_LEN, nk, nkl);
  bulks(bulks(p, nkeys, keys, keylens), nargs, args, arglens);
  r->script = script;
  return r;
}

int rlock__script_to_eval(req_t *r) {
  /* "*N\r\n" "$7\r\nEVALSHA\r\n" "$40\r\n<sha>\r\n" rest... */
  const char *crlf = memchr(r->cmd, '\n', r->len);
  if (!crlf) return RLOCK_EPROTO;
  size_t head = (size_t)(crlf + 1 - r->cmd);
  size_t skip = head + 13 + 47;
  if (skip > r->len || memcmp(r->cmd + head, "$7\r\nEVALSHA\r\n", 13)) return RLOCK_EPROTO;
  const char *body = bodies[r->script];
  size_t bl = strlen(body);
  size_t ll = rlock__resp_head_size(bl);
  size_t n = head + 10 + ll + bl + 2 + (r->len - skip);
  char *c = malloc(n);
  if (!c) return RLOCK_ENOMEM;
  size_t o = 0;
  memcpy(c, r->cmd, head), o = head;
  memcpy(c + o, "$4\r\nEVAL\r\n", 10), o += 10;
  o = (size_t)(rlock__resp_bulk(c + o, body, bl) - c);
  memcpy(c + o, r->cmd + skip, r->len - skip), o += r->len - skip;
  rlock__req_set_cmd(r, c, o);
  r->script = 0; /* EVAL now: no further fallback */
  return 0;
}
