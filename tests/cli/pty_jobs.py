#!/usr/bin/env python3
"""tests/cli/pty_jobs.py -- `rlock exec` under an interactive bash's job
control when CMD touches the terminal from the background: CMD's group is not
rlock's, so what the terminal does to CMD must be relayed to rlock's group
(the job bash knows) and back, else CMD stays stopped while rlock holds (and
renews) the lock forever, or rlock takes the terminal from bash.
  1. `rlock exec ... &` whose CMD reads the terminal: the job shows as
     stopped, 'fg' lets CMD read, the lock is released.
  2. the same with stdin/stdout redirected and CMD reading /dev/tty.
  3. Ctrl-Z, 'bg', CMD then reads the terminal: bash keeps its terminal
     (a command typed at the prompt runs), 'fg' lets CMD read.
  4. rlock run by a script in the foreground: Ctrl-Z stops the script too
     (bash gets its prompt back), 'fg' continues all of it.
  5. `rlock exec ... &` then 'fg' before CMD reads: CMD gets the terminal
     when it reads, without the job stopping.
Arguments: RLOCK_BINARY REDIS_URL TEMP_DIR. Prints one line per check passed;
exits 1 with the terminal's output on the first failure."""
import os
import pty
import re
import select
import sys
import time

RLOCK, URL, TMP = sys.argv[1:4]
DEADLINE_S = 30


class Term:
    def __init__(self):
        env = dict(os.environ, PS1="$ ", TERM="dumb", HISTFILE="/dev/null")
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.execvpe("bash", ["bash", "--norc", "--noprofile", "-i"], env)
        self.out = ""
        self.mark = 0

    def send(self, text):
        os.write(self.fd, text.encode())

    def expect(self, pattern, what):
        """Reads until pattern (a regex) appears in the output after self.mark."""
        end = time.monotonic() + DEADLINE_S
        rx = re.compile(pattern, re.M)
        while not rx.search(self.out, self.mark):
            left = end - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                fail(f"{what}: no {pattern!r} within {DEADLINE_S} s")
            try:
                self.out += os.read(self.fd, 4096).decode(errors="replace")
            except OSError:
                fail(f"{what}: the terminal closed")
        m = rx.search(self.out, self.mark)
        self.mark = m.end()
        return m

    def run(self, line):
        self.mark = len(self.out)
        self.send(line + "\n")


def fail(msg):
    ps = os.popen(f"ps -s {term.pid} -o pid,ppid,pgid,tpgid,stat,args").read()
    print(f"FAIL: {msg}\n--- terminal ---\n{term.out}\n--- processes ---\n{ps}", file=sys.stderr)
    try:
        os.kill(-term.pid, 9)
    except OSError:
        pass
    sys.exit(1)


def await_stopped(name, what):
    """Polls bash's job table (bounded) until job `name` is stopped."""
    term.run("for i in $(seq 300); do case $(jobs -l) in *Stopped*) break;; esac; sleep 0.1; done; "
             "jobs -l; echo JOBS-$((1+1))")
    term.expect(rf"Stopped.*{name}", what)
    term.expect(r"^JOBS-2\r?$", what + " (end of the job list)")
    term.expect(r"\$ $", "bash prompt after the job list")


def released(name):
    term.run(f"'{RLOCK}' -u '{URL}' status {name}")
    term.expect(rf"{name}: not locked", f"{name} released after the job")


term = Term()
term.expect(r"\$ $", "bash prompt")
rl = f"'{RLOCK}' -u '{URL}' exec"


def scenario_1():
    """1. Started in the background, CMD reads the terminal."""
    term.run(rl + " bg-read -- sh -c 'echo BGREADY; read line; echo GOT $line' &")
    term.expect(r"BGREADY\r?$", "CMD runs in the background")
    await_stopped("bg-read", "a background CMD that reads the terminal: the job is stopped")
    term.run("fg")
    term.expect(r"exec bg-read", "fg")
    term.send("hello\n")
    term.expect(r"^GOT hello\r?$", "CMD reads the terminal after fg")
    term.expect(r"\$ $", "bash prompt after the job")
    released("bg-read")
    print("background CMD reading the terminal: the job stops, fg lets CMD read, the lock is released")


def scenario_2():
    """2. The same with redirected standard streams: CMD opens /dev/tty itself."""
    term.run(rl + f" bg-tty -- sh -c 'read line </dev/tty; echo GOT $line > {TMP}/got' </dev/null >/dev/null 2>&1 &")
    await_stopped("bg-tty", "a background CMD that reads /dev/tty: the job is stopped")
    term.run("fg")
    term.expect(r"exec bg-tty", "fg (/dev/tty)")
    term.send("world\n")
    term.expect(r"\$ $", "bash prompt after the /dev/tty job")
    got = open(f"{TMP}/got").read().strip() if os.path.exists(f"{TMP}/got") else ""
    if got != "GOT world":
        fail(f"CMD read {got!r} from /dev/tty, wanted 'GOT world'")
    released("bg-tty")
    print("background CMD reading /dev/tty: the job stops, fg lets CMD read")


def scenario_3():
    """3. Ctrl-Z, bg, then CMD reads: bash keeps the terminal."""
    term.run(rl + " z-bg -- sh -c 'echo ZREADY; read x; echo GOT1 $x; read line; echo GOT2 $line'")
    term.expect(r"^ZREADY\r?$", "CMD runs")
    term.send("one\n")
    term.expect(r"^GOT1 one\r?$", "CMD reads the terminal in the foreground")
    term.send("\x1a")
    term.expect(r"Stopped", "Ctrl-Z stops the job")
    term.expect(r"\$ $", "bash prompt after Ctrl-Z")
    term.run("bg")
    term.expect(r"\$ $", "bash prompt after bg")
    # bash now waits at its prompt (running no command that would take the
    # terminal back): once the job has stopped again, the terminal is bash's.
    end = time.monotonic() + DEADLINE_S
    while not re.search(r"^T\S* .*exec z-bg", os.popen(f"ps -s {term.pid} -o stat=,args=").read(), re.M):
        if time.monotonic() > end:
            fail("the bg'd rlock did not stop when its CMD read the terminal")
        time.sleep(0.05)  # no event announces another process's stop
    if os.tcgetpgrp(term.fd) != term.pid:
        fail(f"the terminal's foreground group is {os.tcgetpgrp(term.fd)}, not bash's {term.pid}")
    await_stopped("z-bg", "the bg'd CMD that reads the terminal: the job is stopped")
    term.run("echo ALIVE-$((6*7))")
    term.expect(r"^ALIVE-42\r?$", "bash still has its terminal while the bg'd CMD wants it")
    term.run("fg")
    term.expect(r"exec z-bg", "fg after bg")
    term.send("two\n")
    term.expect(r"^GOT2 two\r?$", "CMD reads the terminal after fg")
    term.expect(r"\$ $", "bash prompt after the job")
    released("z-bg")
    print("Ctrl-Z, bg, CMD reads: bash keeps its terminal, fg lets CMD read")


def scenario_4():
    """4. rlock in a script: Ctrl-Z stops the script too, fg continues it all."""
    term.run("bash -c \"" + rl.replace("'", "") + " in-script -- sh -c 'echo SREADY; read line; echo GOT \\$line'; echo SCRIPT-$((40+2))\"")
    term.expect(r"^SREADY\r?$", "CMD runs in a script")
    term.send("\x1a")
    term.expect(r"Stopped", "Ctrl-Z stops the script's job")
    term.expect(r"\$ $", "bash prompt after Ctrl-Z in a script")
    term.run("fg")
    term.expect(r"exec in-script", "fg (script)")
    term.send("three\n")
    term.expect(r"^GOT three\r?$", "CMD reads the terminal after fg (script)")
    term.expect(r"^SCRIPT-42\r?$", "the script goes on after CMD")
    term.expect(r"\$ $", "bash prompt after the script")
    released("in-script")
    print("Ctrl-Z in a script stops the script, fg continues it")


def scenario_5():
    """5. Started in the background, brought to the foreground ('fg') before
    CMD reads the terminal: CMD reads it without the job stopping."""
    fifo = f"{TMP}/go5"
    os.mkfifo(fifo)
    term.run(rl + f" fg-later -- sh -c 'echo STARTED; read x < {fifo}; echo READING $$; read line; echo GOT $line' &")
    term.expect(r"STARTED\r?$", "CMD runs in the background")
    term.run("fg")
    term.expect(r"exec fg-later", "fg before CMD reads")
    # bash prints the job's line before it hands the job the terminal, and
    # sends no SIGCONT to a job that was running: CMD reading in between gets
    # SIGTTIN, and rlock, still in the background, stops (as any job that
    # reads the terminal then does). This scenario is 'fg' before the read,
    # so wait until bash has handed the terminal on.
    end = time.monotonic() + DEADLINE_S
    while os.tcgetpgrp(term.fd) == term.pid:
        if time.monotonic() > end:
            fail("fg never gave the job the terminal")
        time.sleep(0.05)  # no event announces a change of the terminal's foreground group
    with open(fifo, "w") as f:
        f.write("go\n")
    cmd = int(term.expect(r"^READING (\d+)\r?$", "CMD about to read the terminal").group(1))
    end = time.monotonic() + DEADLINE_S
    while os.tcgetpgrp(term.fd) != cmd:  # rlock hands CMD the terminal when CMD wants it
        if time.monotonic() > end:
            fail(f"CMD's group {cmd} never got the terminal (foreground group {os.tcgetpgrp(term.fd)})")
        time.sleep(0.05)  # no event announces a change of the terminal's foreground group
    term.send("four\n")
    term.expect(r"^GOT four\r?$", "CMD reads the terminal once rlock is in the foreground")
    term.expect(r"\$ $", "bash prompt after the job")
    if re.search(r"Stopped.*fg-later", term.out):
        fail("the job stopped although rlock had the terminal")
    released("fg-later")
    print("fg before CMD reads: CMD gets the terminal without a stop")


# ONLY=1,3 runs only those scenarios (to watch one fail on old code).
only = os.environ.get("ONLY")
for k, fn in enumerate([scenario_1, scenario_2, scenario_3, scenario_4, scenario_5], 1):
    if not only or str(k) in only.split(","):
        fn()
term.run("exit")
