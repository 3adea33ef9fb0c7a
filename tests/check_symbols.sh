#!/usr/bin/env bash
# tests/check_symbols.sh -- librlock exports nothing outside its namespace: every
# global symbol defined in librlock.a starts with rlock_ (public) or rlock__
# (internal), and librlock.so exports only the public rlock_ calls
# (compiler-generated __ names, e.g. sanitizer instrumentation, aside). A program
# linked statically with librlock can then define map_get or conn_send itself.
# The public prefix is only for what include/rlock.h declares: a global symbol
# rlock_x, or a name rlock_x in lib/'s code, that rlock.h does not declare is an
# internal name missing its rlock__ prefix. The shipped libraries hold no test
# hooks (rlock__test_*: only the tests' build has them, RLOCK_TEST_HOOKS).
# usage: check_symbols.sh BUILD_DIR [SOURCE_DIR]
set -u
dir=${1:?usage: check_symbols.sh BUILD_DIR [SOURCE_DIR]}
src=${2:-$(cd "$(dirname "$0")/.." && pwd)}
fail=0
bad=$(nm -g --defined-only "$dir/librlock.a" 2>/dev/null | awk 'NF == 3 && $2 ~ /[TDBRVW]/ {print $3}' | grep -v '^rlock_' | grep -v '^__' | sort -u)
if [ -n "$bad" ]; then
  echo "FAIL: librlock.a defines global symbols outside the rlock_ prefix:"; echo "$bad" | sed 's/^/  /'; fail=1
fi
internal=$(nm -D --defined-only "$dir/librlock.so" 2>/dev/null | awk 'NF == 3 && $2 ~ /[TDBRVW]/ {print $3}' | grep -E '^rlock__|^[^r]' | sort -u)
if [ -n "$internal" ]; then
  echo "FAIL: librlock.so exports internal symbols:"; echo "$internal" | sed 's/^/  /'; fail=1
fi
# The names rlock.h declares (its comments left out).
strip_comments() { perl -0pe 's{/\*.*?\*/}{ }gs; s{//[^\n]*}{}g' "$@"; }
public=$(strip_comments "$src/include/rlock.h" | grep -oE '\brlock_[a-z][a-z0-9_]*' | sort -u)
unprefixed=$(nm -g --defined-only "$dir/librlock.a" 2>/dev/null | awk 'NF == 3 && $2 ~ /[TDBRVW]/ {print $3}' |
  grep -E '^rlock_[a-z]' | sort -u | comm -23 - <(echo "$public"))
if [ -n "$unprefixed" ]; then
  echo "FAIL: librlock.a defines rlock_ symbols that rlock.h does not declare (internal: use rlock__):"
  echo "$unprefixed" | sed 's/^/  /'; fail=1
fi
names=$(find "$src/lib" -name '*.[ch]' -print0 | xargs -0 perl -0ne 's{/\*.*?\*/}{ }gs; s{"(?:[^"\\\n]|\\.)*"}{""}g; print' |
  grep -oE '\brlock_[a-z][a-z0-9_]*' | sort -u | comm -23 - <(echo "$public"))
if [ -n "$names" ]; then
  echo "FAIL: lib/ uses rlock_ names that rlock.h does not declare (internal: use rlock__):"
  echo "$names" | sed 's/^/  /'; fail=1
fi
hooks=$(nm --defined-only "$dir/librlock.a" "$dir/librlock.so" 2>/dev/null | awk 'NF == 3 {print $3}' | grep '^rlock__test_' | sort -u)
if [ -n "$hooks" ]; then
  echo "FAIL: the shipped libraries hold test hooks (build them only with RLOCK_TEST_HOOKS):"
  echo "$hooks" | sed 's/^/  /'; fail=1
fi
n=$(nm -g --defined-only "$dir/librlock.a" | awk 'NF == 3 && $2 ~ /[TDBRVW]/' | wc -l)
[ "$n" -gt 0 ] || { echo "FAIL: no symbols read from $dir/librlock.a"; fail=1; }
((fail)) || echo "ok: $n global symbols in librlock.a, all prefixed rlock_ (public ones declared in rlock.h), no test hooks"
exit $fail
