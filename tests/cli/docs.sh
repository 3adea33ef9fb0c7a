#!/usr/bin/env bash
# tests/cli/docs.sh -- the man pages and the bash and zsh completions match the
# code: every command and every long option that `rlock COMMAND --help` lists
# is in man/rlock.1 and offered by completions/rlock.bash and
# completions/_rlock (which zsh parses, when installed); every function rlock.h
# exports is named in man/librlock.3; both pages render without warnings.
# Arguments: RLOCK_BINARY SOURCE_DIR.
set -u
RLOCK=${1:?usage: $0 RLOCK_BINARY SOURCE_DIR}
src=${2:?usage: $0 RLOCK_BINARY SOURCE_DIR}
FAILS=0
fail() { echo "FAIL: $*" >&2; FAILS=$((FAILS + 1)); }
pass() { echo "ok: $*"; }
man1=$src/man/rlock.1 man3=$src/man/librlock.3 comp=$src/completions/rlock.bash zcomp=$src/completions/_rlock
# the man source escapes '-' as '\-'
in_man() { sed 's/\\-/-/g' "$man1" | grep -qF -- "$1"; }

globals=$("$RLOCK" --help | grep -oE -- '--[a-z][a-z-]+' | sort -u)
cmds=$("$RLOCK" --help | awk '/^Commands:/ {on=1; next} on && /^  [a-z]/ {print $1} on && /^$/ {exit}')
[ -n "$cmds" ] || fail "no commands in rlock --help"
for c in $cmds; do
  in_man ".B $c" && pass "rlock.1 has the command $c" || fail "rlock.1 lacks the command $c"
  grep -qE "^ *([a-z]+ \| )*$c( \| [a-z]+)*\)" "$comp" && pass "completion knows $c" || fail "completions/rlock.bash lacks the command $c"
  grep -qE "^ *'$c:" "$zcomp" && grep -qE "^ *$c\)" "$zcomp" && pass "zsh completion knows $c" ||
    fail "completions/_rlock lacks the command $c (in commands and in the case)"
  for o in $("$RLOCK" "$c" --help | grep -oE -- '--[a-z][a-z-]+' | sort -u); do
    in_man "$o" || fail "rlock.1 lacks $c's option $o"
    grep -qF -- "$o" "$comp" || fail "completions/rlock.bash lacks $c's option $o"
    # the option inside the command's own branch of the case (a global one: in $global, checked below)
    grep -qxF -- "$o" <<<"$globals" || sed -n "/^ *$c)/,/;;/p" "$zcomp" | grep -qF -- "$o" ||
      fail "completions/_rlock lacks $c's option $o"
  done
done
for o in $("$RLOCK" --help | grep -oE -- '--[a-z][a-z-]+' | sort -u); do
  in_man "$o" || fail "rlock.1 lacks the global option $o"
  grep -qF -- "$o" "$comp" || fail "completions/rlock.bash lacks the global option $o"
  grep -qF -- "$o" "$zcomp" || fail "completions/_rlock lacks the global option $o"
done
n=0
for f in $(grep -oE 'RLOCK_EXPORT[^(]*\brlock_[a-z0-9_]+\(' "$src/include/rlock.h" | grep -oE 'rlock_[a-z0-9_]+\($' | tr -d '('); do
  n=$((n + 1))
  grep -qE "\\b$f\\b" "$man3" || fail "librlock.3 does not name $f"
done
((n > 50)) && pass "librlock.3 names the $n exported functions (unless listed above)" || fail "only $n exported functions found"
if command -v groff >/dev/null; then
  for p in "$man1" "$man3"; do
    w=$(groff -man -Tutf8 -ww -z "$p" 2>&1)
    [ -z "$w" ] && pass "$(basename "$p") renders without warnings" || fail "$(basename "$p"): $w"
  done
fi
bash -n "$comp" && pass "the completion parses" || fail "completions/rlock.bash does not parse"
if command -v zsh >/dev/null; then
  zsh -n "$zcomp" && pass "the zsh completion parses" || fail "completions/_rlock does not parse"
  # offered by zsh's own completion system, in an interactive zsh on a pty
  # (zpty): each check reads until the completed text appears (20 s bound)
  zcheck() { # zcheck TYPED EXPECTED
    timeout 20 zsh -f -c 'zmodload zsh/zpty
      zpty z zsh -f -i
      zpty -w z "fpath=($1 \$fpath); autoload -Uz compinit; compinit -u -D; PS1="
      zpty -w -n z "$2"$'"'"'\t'"'"'
      zpty -r -m z out "*$3*"; r=$?; zpty -d z; exit $r' _ "$(dirname "$zcomp")" "$1" "$2" >/dev/null 2>&1
  }
  zcheck "rlock wa" "rlock wait" && pass "zsh: rlock wa<TAB> -> rlock wait" || fail "zsh: rlock wa<TAB> not completed"
  zcheck "rlock exec --kil" "--kill-after" && pass "zsh: rlock exec --kil<TAB> -> --kill-after" ||
    fail "zsh: rlock exec --kil<TAB> not completed"
  zcheck "rlock ls --js" "--json" && pass "zsh: rlock ls --js<TAB> -> --json" || fail "zsh: rlock ls --js<TAB> not completed"
else
  echo "skip: zsh not installed (apt-get install zsh): the zsh completion is only grepped"
fi
# the completion offers exec's options after 'rlock exec --w'
out=$(bash -c '. "$1"; COMP_WORDS=(rlock exec --kil); COMP_CWORD=2; _rlock; echo "${COMPREPLY[*]}"' _ "$comp")
[ "$out" = "--kill-after" ] && pass "rlock exec --kil<TAB> -> --kill-after" || fail "completion of rlock exec --kil: $out"
((FAILS == 0)) && { echo "all checks passed"; exit 0; }
echo "$FAILS check(s) failed" >&2
exit 1
