/* reply.h -- replies read from RESP (reply.c, over the hiredis reader). */
#ifndef RLOCK_REPLY_H
#define RLOCK_REPLY_H

#include "util.h"

#include <hiredis/hiredis.h>

/* hiredis reader building rlock_reply_t trees, with bounds on sizes. shared:
 * replies only the engine reads (the command connection's), nil and small
 * integers shared and read-only (no allocation; rlock_reply_free skips them). */
redisReader *rlock__reply_reader_new(bool shared);
/* The command connection's integer and nil replies, whole at p (n bytes),
 * parsed without the reader, as the shared reader builds them; *used the
 * bytes taken. NULL: another reply, or not whole (the reader takes it). */
rlock_reply_t *rlock__reply_fast(const char *p, size_t n, size_t *used);
/* The reader holds no part of a reply (rlock__reply_fast may take the next bytes). */
bool rlock__reply_reader_idle(const redisReader *r);
/* A reply is an error whose text starts with prefix. */
bool rlock__reply_is_error(const rlock_reply_t *r, const char *prefix);
/* The code of an error reply: RLOCK_ENOPERM for an ACL refusal (NOPERM), else RLOCK_ESERVER. */
int rlock__reply_error_code(const rlock_reply_t *r);
/* A refusal before the command ran (LOADING, MASTERDOWN, BUSY): nothing of
 * it applied; it may be sent again (conn.c's later queue). */
bool rlock__reply_not_run(const rlock_reply_t *r);

#endif
