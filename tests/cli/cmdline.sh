#!/usr/bin/env bash
# tests/cli/cmdline.sh -- the password of a URL given with -u/--url does not
# stay readable in rlock's command line (/proc/PID/cmdline, what `ps` shows
# to every user of the machine) while `rlock exec` runs its command: rlock
# hides it as soon as it has read its options. The command itself reads
# rlock's command line (it is rlock's child: $PPID).
. "$(dirname "$0")/common.sh"
start_redis --requirepass PWsecret1
UPW="redis://:PWsecret1@127.0.0.1:$PORT"
show_parent='tr "\0" " " </proc/$PPID/cmdline'

check_hidden() { # DESCRIPTION: $T/out holds rlock's command line as CMD saw it
  if grep -q PWsecret1 "$T/out"; then fail "$1: the password is in rlock's command line: $(cat "$T/out")"
  else pass "$1: the password is not in rlock's command line"; fi
  grep -q "127.0.0.1:$PORT" "$T/out" && pass "$1: the rest of the URL is still shown" ||
    fail "$1: the URL is gone from the command line: $(cat "$T/out")"
}

expect 0 "-u URL before the command" "$RLOCK" -u "$UPW" exec job -- sh -c "$show_parent"
check_hidden "-u URL"
expect 0 "--url=URL" "$RLOCK" --url="$UPW" exec job -- sh -c "$show_parent"
check_hidden "--url=URL"
expect 0 "-u URL after the command name" "$RLOCK" exec -u "$UPW" job -- sh -c "$show_parent"
check_hidden "exec -u URL"
expect 0 "-uURL" "$RLOCK" "-u$UPW" exec job -- sh -c "$show_parent"
check_hidden "-uURL"
# Two -u: the first one (overridden) is hidden too.
expect 0 "two -u" "$RLOCK" -u "redis://:PWsecret1@127.0.0.1:1" -u "$UPW" exec job -- sh -c "$show_parent"
check_hidden "two -u"
# A unix URL's password= parameter.
expect 69 "unix URL with password=" "$RLOCK" -u "unix://$T/none?password=PWsecret1" exec job -- true
grep -q PWsecret1 "$T/err" && fail "unix URL: password printed" || pass "unix URL: password not printed"
finish
