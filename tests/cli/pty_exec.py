#!/usr/bin/env python3
"""tests/cli/pty_exec.py -- `rlock exec` typed into an interactive bash on a
pseudo-terminal, as a user would: CMD's process group is its own and is the
terminal's foreground group (CMD can read the terminal), Ctrl-C stops CMD
(exit 130) and the script that ran rlock, Ctrl-Z stops CMD and rlock so that bash gets its prompt back,
and 'fg' continues both. Arguments: RLOCK_BINARY REDIS_URL TEMP_DIR.
Prints one line per check passed; exits 1 with the terminal's output on the
first failure."""
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
    ps = os.popen(f"ps -s {term.pid} -o pid,ppid,pgid,tpgid,stat,wchan:20,args").read()
    for line in ps.splitlines()[1:]:
        try:
            st = open(f"/proc/{line.split()[0]}/status").read()
            ps += line.split()[0] + " " + " ".join(re.findall(r"(?:SigPnd|ShdPnd|SigBlk|SigIgn|SigCgt):\s*\S+", st)) + "\n"
        except OSError:
            pass
    print(f"FAIL: {msg}\n--- terminal ---\n{term.out}\n--- processes ---\n{ps}", file=sys.stderr)
    sys.exit(1)


term = Term()
term.mark = 0
term.expect(r"\$ $", "bash prompt")
rl = f"'{RLOCK}' -u '{URL}' exec"

# Foreground group, then Ctrl-C. CMD waits in the shell's own `read` (no
# child: a shell's fork-to-exec window can lose a signal, whatever rlock does).
term.run(rl + " tty-job -- sh -c 'echo PG $$ $(ps -o pgid=,tpgid= -p $$); echo READY; read x; echo AFTER'")
m = term.expect(r"^PG (\d+) +(\d+) +(\d+)\r?$", "CMD's process group")
pid, pgid, tpgid = m.groups()
if not pid == pgid == tpgid:
    fail(f"CMD {pid}: group {pgid}, terminal's foreground group {tpgid} (all three should be equal)")
print("CMD leads its own group, which has the terminal")
term.expect(r"^READY\r?$", "CMD runs")
term.send("\x03")
term.expect(r"\$ $", "bash prompt after Ctrl-C")
term.run('echo "EXIT=$?"')
term.expect(r"EXIT=130", "Ctrl-C")
if re.search(r"^AFTER\r?$", term.out, re.M):
    fail("CMD went on after Ctrl-C")
print("Ctrl-C stops CMD (exit 130)")

# In a script: Ctrl-C stops the script too (rlock dies of the SIGINT that
# killed CMD, as the shell expects of a foreground job).
term.run("bash -c \"" + rl.replace("'", "") + " tty-job -- sh -c 'echo SREADY; read x'; echo SCRIPT-WENT-ON\"")
term.expect(r"^SREADY\r?$", "CMD runs in a script")
term.send("\x03")
term.expect(r"\$ $", "bash prompt after Ctrl-C in a script")
term.run('echo "EXIT=$?"')
term.expect(r"EXIT=130", "Ctrl-C in a script")
if re.search(r"^SCRIPT-WENT-ON\r?$", term.out, re.M):
    fail("the script went on after Ctrl-C")
print("Ctrl-C stops the script that ran rlock")

# CMD reads the terminal; Ctrl-Z stops it and rlock; fg continues both.
term.run(rl + " tty-job -- sh -c 'echo ZREADY; read line; echo GOT $line'")
term.expect(r"^ZREADY\r?$", "CMD runs")
term.send("\x1a")
term.expect(r"Stopped", "Ctrl-Z: bash reports the job stopped")
term.expect(r"\$ $", "Ctrl-Z: bash prompt back")
print("Ctrl-Z stops the job and gives bash its prompt back")
term.run("fg")
term.expect(r"exec tty-job", "fg")
term.send("hello\n")
term.expect(r"^GOT hello\r?$", "CMD reads the terminal after fg")
term.expect(r"\$ $", "bash prompt after the job")
term.run("echo \"EXIT=$?\"; '" + RLOCK + "' -u '" + URL + "' status tty-job")
term.expect(r"EXIT=0", "exit status after fg")
term.expect(r"tty-job: not locked", "lock released after the job")
print("fg continues it, CMD reads the terminal, the lock is released")
term.run("exit")
