#!/usr/bin/env bash
# tests/cli/jobs.sh -- `rlock exec` under a shell's job control when CMD
# touches the terminal from the background (tests/cli/pty_jobs.py types
# into an interactive bash on a pseudo-terminal): the job stops instead of
# holding the lock forever, 'fg' lets CMD read, bash keeps its terminal.
. "$(dirname "$0")/common.sh"
start_redis
if python3 "$(dirname "$0")/pty_jobs.py" "$RLOCK" "$URL" "$T" >"$T/pty.out" 2>&1; then
  pass "job control: $(tr '\n' ' ' <"$T/pty.out")"
else
  fail "job control: $(cat "$T/pty.out")"
fi
finish
