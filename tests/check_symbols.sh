#!/usr/bin/env bash
# tests/check_symbols.sh -- librlock exports nothing outside its namespace: every
# global symbol defined in librlock.a starts with rlock_ (public) or rlock__
# (internal), and librlock.so exports only the public rlock_ calls
# (compiler-generated __ names, e.g. sanitizer instrumentation, aside). A program
# linked statically with librlock can then define map_get or conn_send itself.
# usage: check_symbols.sh BUILD_DIR
set -u
dir=${1:?usage: check_symbols.sh BUILD_DIR}
fail=0
bad=$(nm -g --defined-only "$dir/librlock.a" 2>/dev/null | awk 'NF == 3 && $2 ~ /[TDBRVW]/ {print $3}' | grep -v '^rlock_' | grep -v '^__' | sort -u)
if [ -n "$bad" ]; then
  echo "FAIL: librlock.a defines global symbols outside the rlock_ prefix:"; echo "$bad" | sed 's/^/  /'; fail=1
fi
internal=$(nm -D --defined-only "$dir/librlock.so" 2>/dev/null | awk 'NF == 3 && $2 ~ /[TDBRVW]/ {print $3}' | grep -E '^rlock__|^[^r]' | sort -u)
if [ -n "$internal" ]; then
  echo "FAIL: librlock.so exports internal symbols:"; echo "$internal" | sed 's/^/  /'; fail=1
fi
n=$(nm -g --defined-only "$dir/librlock.a" | awk 'NF == 3 && $2 ~ /[TDBRVW]/' | wc -l)
[ "$n" -gt 0 ] || { echo "FAIL: no symbols read from $dir/librlock.a"; fail=1; }
((fail)) || echo "ok: $n global symbols in librlock.a, all prefixed rlock_"
exit $fail
