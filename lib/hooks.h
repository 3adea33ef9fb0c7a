/* hooks.h -- test hooks, compiled into test builds only. */
#ifndef RLOCK_HOOKS_H
#define RLOCK_HOOKS_H

#include "conn.h"

typedef struct rlock_client client_t;

/* Test hooks: compiled only with RLOCK_TEST_HOOKS, which the tests' archive
 * (rlock_static_test) sets for the files of RLOCK_HOOKED_SOURCES
 * (lib/CMakeLists.txt); the shipped libraries have none (check_symbols.sh).
 * RLOCK__TEST_HOOK(h, args...) calls hook h if a test set it. */
enum {
  RLOCK__AT_ANSWERED = 1,
  RLOCK__AT_FAST_FELL_BACK,
  RLOCK__AT_REFUSED,
  RLOCK__AT_FAST_BEGIN,
  RLOCK__AT_FAST_COUNTED
};
#ifdef RLOCK_TEST_HOOKS
/* tests/test_dns.c: the resolv.conf a client's evdns base reads when it is
 * made (NULL, the default: /etc/resolv.conf). Set before rlock_client_new. */
extern const char *rlock__test_resolv_conf;
/* tests/test_handoff.c: called by every pass of the I/O thread right after it
 * took the submit stack, before it clears cl->awake. */
extern void (*rlock__test_pass_hook)(client_t *cl);
/* tests/test_handoff.c: called by a submit between its push and its eventfd
 * write. */
extern void (*rlock__test_submit_hook)(client_t *cl);
/* tests/test_free_races.c: called on a calling thread of a sync call at
 * `where` (RLOCK__AT_...), to widen a race with rlock_client_free. */
extern void (*rlock__test_call_hook)(client_t *cl, int where);
/* tests/test_pes_clock.c: added (in us) to the wall clock of
 * rlock__client_wall_ms: the clients' wall clocks set apart from the
 * server's, or at another phase of the ms from the monotonic clock. */
extern int64_t rlock__test_wall_offset_us;
#define RLOCK__TEST_HOOK(hook, ...) \
  do {                              \
    if (hook) hook(__VA_ARGS__);    \
  } while (0)
#else
#define RLOCK__TEST_HOOK(hook, ...) ((void)0)
#endif

#endif
