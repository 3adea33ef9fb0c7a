/* reply.c -- the RESP reader: hiredis's parser building rlock_reply_t trees
 * directly (no copy), with bounds so a hostile server cannot make the client
 * allocate without limit. */
#include "reply.h"

#include <stdlib.h>
#include <string.h>

#define MAX_ARRAY_ELEMENTS (4 * 1024 * 1024)

static void *attach(const redisReadTask *task, rlock_reply_t *r) {
  if (task->parent) {
    rlock_reply_t *parent = task->parent->obj;
    if (!parent || parent->type != RLOCK_REPLY_ARRAY || task->idx < 0 || (size_t)task->idx >= parent->elements) {
      rlock_reply_free(r);
      return NULL;
    }
    parent->element[task->idx] = r;
  }
  return r;
}

static void *create_string(const redisReadTask *task, char *str, size_t len) {
  rlock_reply_t *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->type = task->type == REDIS_REPLY_ERROR    ? RLOCK_REPLY_ERROR
            : task->type == REDIS_REPLY_STATUS ? RLOCK_REPLY_STATUS
                                               : RLOCK_REPLY_STRING;
  r->str = rlock__strndup(str, len);
  if (!r->str) {
    free(r);
    return NULL;
  }
  r->len = len;
  return attach(task, r);
}

static void *create_array(const redisReadTask *task, int elements) {
  if (elements < 0 || elements > MAX_ARRAY_ELEMENTS) return NULL;
  rlock_reply_t *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->type = RLOCK_REPLY_ARRAY;
  if (elements > 0 && !(r->element = calloc((size_t)elements, sizeof *r->element))) {
    free(r);
    return NULL;
  }
  r->elements = (size_t)elements;
  return attach(task, r);
}

static void *create_integer(const redisReadTask *task, long long v) {
  rlock_reply_t *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->type = RLOCK_REPLY_INTEGER;
  r->integer = v;
  return attach(task, r);
}

static void *create_nil(const redisReadTask *task) {
  rlock_reply_t *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->type = RLOCK_REPLY_NIL;
  return attach(task, r);
}

/* The engine's own replies (the command connection's: never handed to the
 * caller, only read) share one nil and the small integers the lock scripts
 * answer with: no allocation for them; rlock_reply_free leaves them alone. */
static rlock_reply_t shared_nil = {.type = RLOCK_REPLY_NIL};
static rlock_reply_t shared_ints[] = {
    {.type = RLOCK_REPLY_INTEGER, .integer = -3}, {.type = RLOCK_REPLY_INTEGER, .integer = -2},
    {.type = RLOCK_REPLY_INTEGER, .integer = -1}, {.type = RLOCK_REPLY_INTEGER, .integer = 0},
    {.type = RLOCK_REPLY_INTEGER, .integer = 1},  {.type = RLOCK_REPLY_INTEGER, .integer = 2},
    {.type = RLOCK_REPLY_INTEGER, .integer = 3}};
#define SHARED_MIN (-3)
#define NSHARED_INTS ((long long)(sizeof shared_ints / sizeof *shared_ints))

static bool is_shared(const rlock_reply_t *r) {
  return r == &shared_nil || (r >= shared_ints && r < shared_ints + NSHARED_INTS);
}

static void *create_integer_shared(const redisReadTask *task, long long v) {
  if (v < SHARED_MIN || v >= SHARED_MIN + NSHARED_INTS) return create_integer(task, v);
  return attach(task, &shared_ints[v - SHARED_MIN]);
}

static void *create_nil_shared(const redisReadTask *task) { return attach(task, &shared_nil); }

/* The command connection's usual replies, whole at p: an integer (":N",
 * N of 1 to 18 digits, an optional '-') or a nil ("$-1", "*-1"), built as
 * the shared reader builds them, *used the bytes they took. NULL: anything
 * else, or not whole yet (hiredis's reader takes it). */
rlock_reply_t *rlock__reply_fast(const char *p, size_t n, size_t *used) {
  if (n >= 5 && (p[0] == '$' || p[0] == '*') && p[1] == '-' && p[2] == '1' && p[3] == '\r' && p[4] == '\n') {
    *used = 5;
    return &shared_nil;
  }
  if (n < 4 || p[0] != ':') return NULL;
  size_t i = 1;
  bool neg = p[1] == '-';
  i += neg;
  long long v = 0;
  size_t start = i;
  for (; i < n && p[i] >= '0' && p[i] <= '9'; i++) {
    if (i - start == 18) return NULL; /* long: hiredis's reader checks the range */
    v = v * 10 + (p[i] - '0');
  }
  if (i == start || i + 1 >= n || p[i] != '\r' || p[i + 1] != '\n') return NULL;
  if (p[start] == '0' && (i - start > 1 || neg)) return NULL; /* "007", "-0": the reader's call */
  if (neg) v = -v;
  rlock_reply_t *r;
  if (v >= SHARED_MIN && v < SHARED_MIN + NSHARED_INTS) {
    r = &shared_ints[v - SHARED_MIN];
  } else {
    if (!(r = calloc(1, sizeof *r))) return NULL;
    r->type = RLOCK_REPLY_INTEGER;
    r->integer = v;
  }
  *used = i + 2;
  return r;
}

/* The reader holds no part of a reply: the next byte fed starts one. Every
 * byte it was fed is taken (pos == len), and no reply is under way: its
 * task stack is empty (ridx -1), or hiredis's GetReply set up the first task
 * and found no byte to read (ridx 0, that task's type still unset: -1), as
 * it does on the last call of each read (conn.c feed calls it until it finds
 * no reply). A type byte read, or an array under way, leave a type set or
 * ridx above 0. */
bool rlock__reply_reader_idle(const redisReader *r) {
  if (r->err || r->pos != r->len) return false;
  if (r->ridx == -1) return true;
#if HIREDIS_MAJOR >= 1
  return r->ridx == 0 && r->task && r->task[0] && r->task[0]->type == -1;
#else
  return r->ridx == 0 && r->rstack[0].type == -1;
#endif
}

static void free_object(void *p) { rlock_reply_free(p); }

static redisReplyObjectFunctions fns = {create_string, create_array, create_integer, create_nil, free_object};
static redisReplyObjectFunctions fns_shared = {create_string, create_array, create_integer_shared, create_nil_shared,
                                               free_object};

redisReader *rlock__reply_reader_new(bool shared) {
  return redisReaderCreateWithFunctions(shared ? &fns_shared : &fns);
}

RLOCK_API void rlock_reply_free(rlock_reply_t *r) {
  if (!r || is_shared(r)) return;
  for (size_t i = 0; i < r->elements; i++) rlock_reply_free(r->element[i]);
  free(r->element);
  free(r->str);
  free(r);
}

bool rlock__reply_is_error(const rlock_reply_t *r, const char *prefix) {
  return r && r->type == RLOCK_REPLY_ERROR && r->str && !strncmp(r->str, prefix, strlen(prefix));
}

bool rlock__reply_not_run(const rlock_reply_t *r) {
  return rlock__reply_is_error(r, "LOADING") || rlock__reply_is_error(r, "MASTERDOWN") ||
         rlock__reply_is_error(r, "BUSY ") || (rlock__reply_is_error(r, "BUSY") && !strcmp(r->str, "BUSY"));
}

int rlock__reply_error_code(const rlock_reply_t *r) {
  return rlock__reply_is_error(r, "NOPERM") ? RLOCK_ENOPERM : RLOCK_ESERVER;
}
