/* exec_group.c -- the command of `rlock exec` in its own process group, so
 * that a lost lock or a forwarded signal reaches everything it started
 * (a shell's children too), and rlock releases the lock only once every
 * process of the group has ended.
 *
 * - The group: CMD is forked into a new process group (id = its pid). rlock
 *   becomes a child subreaper, so members orphaned by CMD's exit become its
 *   children and can be waited for.
 * - The terminal: if rlock runs in the foreground of a terminal, the group
 *   gets the terminal (tcsetpgrp) so that CMD can read it and Ctrl-C/Ctrl-Z
 *   reach CMD directly; rlock takes it back at the end. When the group is
 *   stopped (Ctrl-Z, or SIGTTIN/SIGTTOU: terminal I/O from the background,
 *   rlock started with '&' or continued with 'bg'), rlock stops its own group
 *   the same way (the shell's job: the shell gets its prompt back) and
 *   continues CMD's group when it is continued ('fg', 'bg'). When Ctrl-C or
 *   Ctrl-\ killed CMD, rlock sends it to its own process group (itself and a
 *   script that runs it, the job the key would have reached) once the lock is
 *   released, so that the script stops as it would without rlock.
 * - Signalling: the group id stays published (group_kill) only while the
 *   group cannot have been reaped: each member is reaped with the handled
 *   signals blocked and the group lock held, and the id is withdrawn as soon
 *   as no member is left, so a signal never reaches a reused id.
 * - rlock killed (SIGKILL, a crash): a guardian process kills the group (see
 *   guardian()), so CMD never runs on without rlock to watch the lock. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

static atomic_int g_pgid; /* the group's id while it may be signalled, else 0 */
static int g_tty_sig;     /* the terminal signal that killed CMD while it had the terminal */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

void group_lock(void) { pthread_mutex_lock(&g_mu); }
void group_unlock(void) { pthread_mutex_unlock(&g_mu); }

int group_kill(int sig) {
  pid_t pgid = atomic_load(&g_pgid);
  return pgid > 0 && kill(-pgid, sig) == 0;
}

/* rlock's controlling terminal (whether rlock is in its foreground or not,
 * whatever its standard streams are: CMD may open /dev/tty), else -1. */
static int controlling_tty(void) { return open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC); }

/* Makes pgid the terminal's foreground group. From a background group this
 * needs SIGTTOU blocked (else the kernel stops the caller). */
static void give_terminal(int tty, pid_t pgid) {
  sigset_t ttou, before;
  sigemptyset(&ttou);
  sigaddset(&ttou, SIGTTOU);
  pthread_sigmask(SIG_BLOCK, &ttou, &before);
  tcsetpgrp(tty, pgid);
  pthread_sigmask(SIG_SETMASK, &before, NULL);
}

/* Reaps member `who` of group pgid (its wait status in *st). The handled
 * signals stay blocked and the group lock held until the group id is
 * withdrawn if that was the last member. */
static void reap(pid_t pgid, pid_t who, int *st) {
  sigset_t all, before;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &before);
  group_lock();
  while (waitpid(who, st, 0) < 0 && errno == EINTR) {
  }
  if (kill(-pgid, 0) < 0 && errno == ESRCH) atomic_store(&g_pgid, 0); /* nobody left */
  group_unlock();
  pthread_sigmask(SIG_SETMASK, &before, NULL);
}

/* CMD's terminal I/O from the background (SIGTTIN/SIGTTOU): CMD gets the
 * terminal if rlock's group has it ('&', then 'fg'); else rlock's group
 * stops as a background job that touched the terminal, and hands CMD the
 * terminal once brought to the foreground. The kernel decides both in one
 * step: tcsetpgrp with SIGTTOU unblocked succeeds in the foreground and, in
 * the background, stops the caller's group and runs again once continued.
 * (Checking the foreground, then stopping, lost a race with the shell's
 * 'fg': its SIGCONT came between the two, and the job stayed stopped.) An
 * orphaned group cannot be stopped (EIO): CMD is continued after a pause
 * and will stop again, no busy loop. */
static void take_terminal_for(int tty, pid_t pgid) {
  sigset_t ttou, before;
  sigemptyset(&ttou);
  sigaddset(&ttou, SIGTTOU);
  pthread_sigmask(SIG_UNBLOCK, &ttou, &before);
  int rc;
  while ((rc = tcsetpgrp(tty, pgid)) < 0 && errno == EINTR) {
  }
  pthread_sigmask(SIG_SETMASK, &before, NULL);
  if (rc < 0) {
    struct timespec pause = {0, 100 * 1000 * 1000};
    nanosleep(&pause, NULL);
  }
}

/* A member of the group was stopped (Ctrl-Z, or terminal I/O from the
 * background: SIGTTIN/SIGTTOU): the shell knows rlock's group as the job, so
 * stop that group the same way (the script that ran rlock too, as the
 * terminal would have), then, once continued ('fg', 'bg'), continue CMD's
 * group, giving it the terminal if rlock's group has it. The terminal is
 * taken back from CMD's group only if CMD's group has it (never from the
 * shell, when rlock runs in the background). Terminal I/O of CMD while
 * rlock's group has the terminal (rlock started with '&', then 'fg') just
 * hands CMD the terminal. */
static void suspend(pid_t pgid, int tty, pid_t who, int stopsig) {
  siginfo_t si;
  while (waitid(P_PID, (id_t)who, &si, WSTOPPED) < 0 && errno == EINTR) { /* consume the report */
  }
  int sig = stopsig == SIGTTIN || stopsig == SIGTTOU ? stopsig : SIGTSTP;
  struct sigaction ttou;
  if (sig != SIGTSTP && sigaction(SIGTTOU, NULL, &ttou) == 0 && ttou.sa_handler == SIG_DFL) {
    take_terminal_for(tty, pgid);
    kill(-pgid, SIGCONT);
    return;
  }
  /* (rlock's caller ignores SIGTTOU: tcsetpgrp would take the terminal from
   * the background, so check, then stop; a shell's 'fg' can slip in between) */
  if (sig != SIGTSTP && tcgetpgrp(tty) == getpgrp()) { /* rlock was put in the foreground ('fg') */
    give_terminal(tty, pgid);
    kill(-pgid, SIGCONT);
    return;
  }
  if (tcgetpgrp(tty) == pgid) give_terminal(tty, getpgrp());
  kill(0, sig); /* returns once continued; discarded if nobody could continue it (orphaned group) */
  if (tcgetpgrp(tty) == getpgrp()) {
    give_terminal(tty, pgid);
  } else if (sig != SIGTSTP) {                      /* still in the background: CMD will stop again at once */
    struct timespec pause = {0, 100 * 1000 * 1000}; /* no busy loop where the stop was discarded */
    nanosleep(&pause, NULL);
  }
  kill(-pgid, SIGCONT);
}

/* Waits (at most 100 ms) for a SIGCHLD, blocked in this thread: a child
 * ended or stopped. The timeout covers what no event announces: a member
 * that left the group (setsid, setpgid) and a member that is not rlock's
 * child (its parent left the group) ending. */
static void await_child_event(void) {
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  struct timespec pause = {0, 100 * 1000 * 1000};
  sigtimedwait(&chld, NULL, &pause);
}

/* Handles a child's report si (from waitid with WNOWAIT): a stopped member
 * of the group suspends rlock (see suspend), another stopped child's report
 * is consumed, an ended child is reaped. true if it was the leader's end
 * (its wait status in *leader). */
static bool handle_child(pid_t pgid, int tty, siginfo_t *si, int *leader) {
  if (si->si_code == CLD_STOPPED || si->si_code == CLD_TRAPPED) {
    if (getpgid(si->si_pid) == pgid) suspend(pgid, tty, si->si_pid, si->si_status);
    else
      while (waitid(P_PID, (id_t)si->si_pid, si, WSTOPPED) < 0 && errno == EINTR) {
      }
    return false;
  }
  pid_t who = si->si_pid;
  int st = 0;
  reap(pgid, who, &st);
  if (who != pgid) return false;
  *leader = st;
  return true;
}

/* Waits for the leader (CMD), then until no member of its group is left;
 * returns the leader's wait status. Until the leader ends, any child is
 * reaped (the leader may have left its group). After that the group is
 * checked for members after each child event and every 100 ms: a blocking
 * waitid(P_PGID) would never return when the last member leaves the group
 * (setsid) instead of ending, as leaving wakes no waiter. Any child that
 * ends is reaped meanwhile (rlock is a subreaper: a member that left the
 * group may come back as its child). */
static int wait_group(pid_t pgid, int tty) {
  int leader = 0;
  int flags = WEXITED | WNOWAIT | (tty >= 0 ? WSTOPPED : 0);
  for (;;) { /* until the leader's end */
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid(P_ALL, 0, &si, flags) < 0) {
      if (errno == EINTR) continue;
      break; /* ECHILD: no child at all (cannot happen while the leader is unreaped) */
    }
    if (handle_child(pgid, tty, &si, &leader)) break;
  }
  sigset_t chld, before;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  pthread_sigmask(SIG_BLOCK, &chld, &before); /* a SIGCHLD after the check below is kept for the wait */
  while (!(kill(-pgid, 0) < 0 && errno == ESRCH)) {
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid(P_ALL, 0, &si, flags | WNOHANG) == 0 && si.si_pid > 0) {
      int ignored;
      handle_child(pgid, tty, &si, &ignored);
      continue;
    }
    await_child_event();
  }
  pthread_sigmask(SIG_SETMASK, &before, NULL);
  group_lock();
  atomic_store(&g_pgid, 0);
  group_unlock();
  return leader;
}

void group_die_like_cmd(void) {
  if (!g_tty_sig) return;
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, g_tty_sig);
  signal(g_tty_sig, SIG_DFL);
  pthread_sigmask(SIG_UNBLOCK, &one, NULL);
  kill(0, g_tty_sig); /* rlock's own group: what the keypress reached before CMD had the terminal */
}

/* ------------------------------------------------------------ the guardian */

/* The guardian: a small process of its own (own group, every signal but
 * SIGKILL blocked, no descriptor but a pipe) that kills CMD's whole group if
 * rlock dies before it has waited for it (SIGKILL, OOM killer, a crash):
 * rlock holds the only write end of the pipe, so the guardian reads end of
 * file when rlock is gone, or one byte when rlock has seen the group end.
 * Without it CMD would run on unsupervised, and outside the lock once the
 * lease runs out. Forked with every signal blocked; only async-signal-safe
 * calls in it. */
static void close_all_but_0(void) {
#ifdef SYS_close_range
  if (syscall(SYS_close_range, 1U, ~0U, 0U) == 0) return;
#endif
  struct rlimit rl;
  long max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 65536 ? (long)rl.rlim_cur : 65536;
  for (long fd = 1; fd < max; fd++) close((int)fd);
}

static void guardian(pid_t pgid, int rfd) {
  prctl(PR_SET_NAME, "rlock-guardian"); /* what ps shows beside rlock */
  setpgid(0, 0);                        /* a kill of rlock's group (timeout(1), a script's group) leaves it */
  if (rfd != 0 && dup2(rfd, 0) < 0) _exit(1);
  close_all_but_0(); /* rlock's sockets, the terminal, the output pipes */
  char b;
  ssize_t n;
  while ((n = read(0, &b, 1)) < 0 && errno == EINTR) {
  }
  if (n == 0) kill(-pgid, SIGKILL); /* rlock died: the group must not run on unguarded */
  _exit(0);
}

/* Starts the guardian of group pgid (signals blocked): its pid, the write end in *wfd. */
static pid_t start_guardian(pid_t pgid, int *wfd) {
  int p[2];
  *wfd = -1;
  if (pipe2(p, O_CLOEXEC) < 0) return -1;
  pid_t g = fork();
  if (g == 0) guardian(pgid, p[0]);
  close(p[0]);
  if (g < 0) close(p[1]);
  else *wfd = p[1];
  return g;
}

/* The group has ended (all of it reaped): the guardian may go. */
static void stop_guardian(pid_t g, int wfd) {
  if (g <= 0) return;
  (void)!write(wfd, "d", 1);
  close(wfd);
  while (waitpid(g, NULL, 0) < 0 && errno == EINTR) {
  }
}

/* ------------------------------------------------------------ the command */

/* In the child: its own group, the terminal, the caller's signal setup, exec. */
static void exec_child(char **cmd, int tty, const sigset_t *mask, void (*in_child)(void), int errfd) {
  setpgid(0, 0);
  if (tty >= 0) tcsetpgrp(tty, getpid()); /* every signal is blocked here, SIGTTOU too */
  in_child();
  sigprocmask(SIG_SETMASK, mask, NULL);
  execvp(cmd[0], cmd);
  int e = errno;
  (void)!write(errfd, &e, sizeof e);
  _exit(127);
}

int group_run(char **cmd, const sigset_t *child_mask, void (*in_child)(void), void (*started)(void)) {
  int errpipe[2];
  if (pipe2(errpipe, O_CLOEXEC) < 0) return cli_err("pipe: %s", strerror(errno)), EX_OSERR;
  int tty = controlling_tty();
  int fg_tty = tty >= 0 && tcgetpgrp(tty) == getpgrp() ? tty : -1; /* rlock is in its foreground */
  prctl(PR_SET_CHILD_SUBREAPER, 1);                                /* orphaned members come back to rlock */
  sigset_t all, before;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &before);
  pid_t pid = fork();
  if (pid == 0) exec_child(cmd, fg_tty, child_mask, in_child, errpipe[1]);
  int fork_errno = errno;
  pid_t guard = -1;
  int guard_fd = -1;
  if (pid > 0) {
    setpgid(pid, pid); /* also here: no window where rlock signals its own group */
    if (fg_tty >= 0) tcsetpgrp(fg_tty, pid);
    guard = start_guardian(pid, &guard_fd); /* none (fork failed): rlock still waits for the group */
    group_lock();
    atomic_store(&g_pgid, pid);
    started();
    group_unlock();
  }
  pthread_sigmask(SIG_SETMASK, &before, NULL);
  close(errpipe[1]);
  if (pid < 0) {
    close(errpipe[0]);
    if (tty >= 0) close(tty);
    cli_err("fork: %s", strerror(fork_errno));
    return EX_OSERR;
  }
  int exec_errno = 0;
  ssize_t n;
  while ((n = read(errpipe[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
  }
  close(errpipe[0]);
  int st = wait_group(pid, tty);
  stop_guardian(guard, guard_fd);
  if (tty >= 0 && tcgetpgrp(tty) == pid) { /* CMD's group had the terminal until its end */
    give_terminal(tty, getpgrp());
    if (WIFSIGNALED(st) && (WTERMSIG(st) == SIGINT || WTERMSIG(st) == SIGQUIT)) g_tty_sig = WTERMSIG(st);
  }
  if (tty >= 0) close(tty);
  if (n == (ssize_t)sizeof exec_errno) {
    cli_err("cannot run %s: %s", cmd[0], strerror(exec_errno));
    return 127;
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
