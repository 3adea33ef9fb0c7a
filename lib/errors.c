/* errors.c -- error codes to names and messages (rlock_strerror, rlock_err_name). */
#include "internal.h"

static const struct {
  int code;
  const char *name, *text;
} errs[] = {
    {RLOCK_OK, "RLOCK_OK", "success"},
    {RLOCK_EINVAL, "RLOCK_EINVAL", "invalid argument"},
    {RLOCK_ENOMEM, "RLOCK_ENOMEM", "out of memory"},
    {RLOCK_EURL, "RLOCK_EURL", "invalid Redis URL"},
    {RLOCK_ECONNECT, "RLOCK_ECONNECT", "cannot connect to Redis"},
    {RLOCK_EAUTH, "RLOCK_EAUTH", "authentication or handshake rejected by Redis"},
    {RLOCK_ETLS, "RLOCK_ETLS", "TLS setup or handshake failed"},
    {RLOCK_ETIMEDOUT, "RLOCK_ETIMEDOUT", "Redis did not answer in time"},
    {RLOCK_ECONNLOST, "RLOCK_ECONNLOST", "connection to Redis lost while the request was in flight"},
    {RLOCK_EBUSY, "RLOCK_EBUSY", "timed out waiting for the lock"},
    {RLOCK_ENOTHELD, "RLOCK_ENOTHELD", "lock not held by this owner"},
    {RLOCK_ECANCELED, "RLOCK_ECANCELED", "wait cancelled"},
    {RLOCK_ESERVER, "RLOCK_ESERVER", "Redis replied with an error"},
    {RLOCK_EPROTO, "RLOCK_EPROTO", "malformed or unexpected reply from Redis"},
    {RLOCK_ECLOSED, "RLOCK_ECLOSED", "client closed"},
    {RLOCK_EDEADLK, "RLOCK_EDEADLK", "blocking call made from the client's I/O thread"},
    {RLOCK_ESYS, "RLOCK_ESYS", "system call failed"},
    {RLOCK_ENOTLOCK, "RLOCK_ENOTLOCK", "the key is not a lock"},
    {RLOCK_ENOSYNC, "RLOCK_ENOSYNC", "too few replicas acknowledged the lock (replica sync)"},
    {RLOCK_EUPGRADE, "RLOCK_EUPGRADE", "a read lock cannot be upgraded to the write lock"},
};

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
