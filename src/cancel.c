/* cancel.c -- SIGINT, SIGTERM and SIGHUP while a command waits (acquire,
 * semaphore acquire, latch await): the wait is cancelled through an
 * rlock_cancel_t instead of the process dying, so a try in flight is undone
 * by the library (nothing is left taken that nobody knows of), and the
 * command exits 128+N. exec has its own handler (it also signals CMD). */
#include <signal.h>
#include <string.h>

#include "cli.h"

static rlock_cancel_t *g_cancel;
static volatile sig_atomic_t g_signal;
static const int handled[] = {SIGINT, SIGTERM, SIGHUP};
static struct sigaction g_orig[3];

static void on_signal(int sig) {
  g_signal = sig;
  if (g_cancel) rlock_cancel_trigger(g_cancel);
}

rlock_cancel_t *cli_cancel_begin(void) {
  if (g_cancel || rlock_cancel_new(&g_cancel)) return g_cancel; /* no token: the signals keep their default */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < 3; i++) {
    sigaction(handled[i], NULL, &g_orig[i]);
    if (g_orig[i].sa_handler != SIG_IGN) sigaction(handled[i], &sa, NULL);
  }
  return g_cancel;
}

int cli_cancel_end(int rc) {
  if (!g_cancel) return 0;
  for (int i = 0; i < 3; i++) sigaction(handled[i], &g_orig[i], NULL);
  rlock_cancel_free(g_cancel); /* the handlers are gone: nothing triggers it now */
  g_cancel = NULL;
  if (rc != RLOCK_ECANCELED || !g_signal) return 0;
  cli_err("interrupted by signal %d while waiting", (int)g_signal);
  return 128 + g_signal;
}
