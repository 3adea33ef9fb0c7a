/* script.h -- the embedded Lua scripts (script.c; their list: scripts.h). */
#ifndef RLOCK_SCRIPT_H
#define RLOCK_SCRIPT_H

#include "conn.h"
#include "scripts.h"

/* The embedded scripts (lua/<name>.lua, numbered by the SCRIPT_* enum of
 * scripts.h): the lock kinds' (kinds/); the watchdog renews each hold with
 * its kind's renew script (SCRIPT_RENEW by default). */
void rlock__script_init(void); /* computes the SHA1s once (thread-safe) */
const char *rlock__script_body(int script);
const char *rlock__script_sha(int script); /* 40 hex digits */
/* A request running `script` with keys and args (EVALSHA form). */
req_t *rlock__script_req(int script, int nkeys, const char **keys, const size_t *keylens, int nargs, const char **args,
                         const size_t *arglens, int64_t timeout_ms, req_done_fn done, void *ctx);
/* Rewrites an EVALSHA request into its EVAL form (for NOSCRIPT). */
int rlock__script_to_eval(req_t *r);

#endif
