/* errors.c -- error codes to names and messages (rlock_strerror, rlock_err_name). */
#include "util.h"

/* Made from the one list in rlock.h. */
#define ERR_ROW(name, value, text) {RLOCK_##name, "RLOCK_" #name, text},
static const struct {
  int code;
  const char *name, *text;
} errs[] = {RLOCK_ERRNO_MAP(ERR_ROW)};
#undef ERR_ROW

RLOCK_API const char *rlock_strerror(int err) {
  for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++)
    if (errs[i].code == err) return errs[i].text;
  return "unknown error";
}

RLOCK_API const char *rlock_err_name(int err) {
  for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++)
    if (errs[i].code == err) return errs[i].name;
  return "RLOCK_E?";
}
