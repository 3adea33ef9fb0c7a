/* script.c -- the Lua scripts of lua/ (one .lua file each, named after its lock
 * kind: lua/reentrant_*.lua, lua/simple_*.lua), embedded at build time, sent as
 * EVALSHA; a NOSCRIPT answer (server restarted, SCRIPT FLUSH) turns the same
 * request into EVAL with the script body (see conn.c). */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/evp.h>

extern const char rlock_lua_reentrant_acquire[], rlock_lua_reentrant_acquire_undo[],
    rlock_lua_reentrant_unlock[], rlock_lua_reentrant_renew[], rlock_lua_reentrant_force_unlock[],
    rlock_lua_simple_acquire[], rlock_lua_simple_acquire_undo[], rlock_lua_simple_unlock[],
    rlock_lua_simple_renew[], rlock_lua_simple_force_unlock[], rlock_lua_simple_query[];

static const char *bodies[SCRIPT_N + 1];
static char shas[SCRIPT_N + 1][41];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void compute(void) {
  bodies[SCRIPT_ACQUIRE] = rlock_lua_reentrant_acquire;
  bodies[SCRIPT_ACQUIRE_UNDO] = rlock_lua_reentrant_acquire_undo;
  bodies[SCRIPT_UNLOCK] = rlock_lua_reentrant_unlock;
  bodies[SCRIPT_RENEW] = rlock_lua_reentrant_renew;
  bodies[SCRIPT_FORCE_UNLOCK] = rlock_lua_reentrant_force_unlock;
  bodies[SCRIPT_SIMPLE_ACQUIRE] = rlock_lua_simple_acquire;
  bodies[SCRIPT_SIMPLE_ACQUIRE_UNDO] = rlock_lua_simple_acquire_undo;
  bodies[SCRIPT_SIMPLE_UNLOCK] = rlock_lua_simple_unlock;
  bodies[SCRIPT_SIMPLE_RENEW] = rlock_lua_simple_renew;
  bodies[SCRIPT_SIMPLE_FORCE_UNLOCK] = rlock_lua_simple_force_unlock;
  bodies[SCRIPT_SIMPLE_QUERY] = rlock_lua_simple_query;
  for (int i = 1; i <= SCRIPT_N; i++) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_Digest(bodies[i], strlen(bodies[i]), md, &n, EVP_sha1(), NULL);
    for (unsigned j = 0; j < n && j < 20; j++) snprintf(shas[i] + 2 * j, 3, "%02x", md[j]);
  }
}

void rlock__script_init(void) { pthread_once(&once, compute); }
const char *rlock__script_body(int s) { return bodies[s]; }

req_t *rlock__script_req(int script, int nkeys, const char **keys, const size_t *keylens, int nargs,
                  const char **args, const size_t *arglens, int64_t timeout_ms, req_done_fn done,
                  void *ctx) {
  int argc = 3 + nkeys + nargs;
  const char *stackv[16];
  size_t stackl[16];
  const char **argv = argc <= 16 ? stackv : malloc(sizeof *argv * (size_t)argc);
  size_t *argl = argc <= 16 ? stackl : malloc(sizeof *argl * (size_t)argc);
  req_t *r = NULL;
  char nk[16];
  if (!argv || !argl) goto out;
  rlock__i64toa(nkeys, nk);
  argv[0] = "EVALSHA", argl[0] = 7;
  argv[1] = shas[script], argl[1] = 40;
  argv[2] = nk, argl[2] = strlen(nk);
  for (int i = 0; i < nkeys; i++) argv[3 + i] = keys[i], argl[3 + i] = keylens[i];
  for (int i = 0; i < nargs; i++)
    argv[3 + nkeys + i] = args[i], argl[3 + nkeys + i] = arglens ? arglens[i] : strlen(args[i]);
  r = rlock__req_new(argc, argv, argl, timeout_ms, done, ctx);
  if (r) r->script = script;
out:
  if (argv != stackv) free(argv);
  if (argl != stackl) free(argl);
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
  char lenbuf[32];
  int ll = snprintf(lenbuf, sizeof lenbuf, "$%zu\r\n", bl);
  size_t n = head + 10 + (size_t)ll + bl + 2 + (r->len - skip);
  char *c = malloc(n);
  if (!c) return RLOCK_ENOMEM;
  size_t o = 0;
  memcpy(c, r->cmd, head), o = head;
  memcpy(c + o, "$4\r\nEVAL\r\n", 10), o += 10;
  memcpy(c + o, lenbuf, (size_t)ll), o += (size_t)ll;
  memcpy(c + o, body, bl), o += bl;
  memcpy(c + o, "\r\n", 2), o += 2;
  memcpy(c + o, r->cmd + skip, r->len - skip), o += r->len - skip;
  free(r->cmd);
  r->cmd = c;
  r->len = o;
  r->script = 0; /* EVAL now: no further fallback */
  return 0;
}
