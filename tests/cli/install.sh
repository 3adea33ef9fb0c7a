#!/usr/bin/env bash
# tests/cli/install.sh -- `cmake --install` into a temp prefix (not a system
# directory), then: the installed `rlock` starts without LD_LIBRARY_PATH
# (RPATH $ORIGIN/../lib), and consumers of the installed library run: a C
# program built with `pkg-config --cflags --libs rlock` (with the -Wl,-rpath
# the README shows, and with LD_LIBRARY_PATH), and a CMake project using
# find_package(rlock). Arguments: BUILD_DIR [SANITIZE_FLAGS].
set -u
build=${1:?usage: $0 BUILD_DIR [SANITIZE]}
san=${2:-}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
FAILS=0
fail() { echo "FAIL: $*" >&2; FAILS=$((FAILS + 1)); }
pass() { echo "ok: $*"; }
cflags=()
[ -n "$san" ] && cflags=("-fsanitize=$san")

cmake --install "$build" --prefix "$T/prefix" >"$T/install.log" 2>&1 || { cat "$T/install.log"; exit 1; }
pass "cmake --install"
# What scripts/demo builds can be installed (issue 23: it built only the CLI,
# and a later `cmake --install` failed half-way; without DEMO_TARGETS: the
# CLI alone, as it was).
src=$(cd "$(dirname "$0")/../.." && pwd)
( cd "$src" && . scripts/lib.sh && BUILD_TARGETS=${DEMO_TARGETS:-rlock_cli} build "$T/demo-build" -DRLOCK_BUILD_TESTS=OFF ) \
  >"$T/demo-build.log" 2>&1 || fail "the demo's build failed: $(tail -5 "$T/demo-build.log")"
if cmake --install "$T/demo-build" --prefix "$T/demo-prefix" >"$T/demo-install.log" 2>&1; then
  pass "cmake --install after the demo's build"
else
  fail "cmake --install after the demo's build: $(tail -3 "$T/demo-install.log")"
fi
[ -x "$T/prefix/bin/rlock" ] && pass "rlock installed" || fail "no bin/rlock"
for f in share/man/man1/rlock.1 share/man/man3/librlock.3 share/bash-completion/completions/rlock share/zsh/site-functions/_rlock; do
  [ -f "$T/prefix/$f" ] && pass "$f installed" || fail "no $f"
done
if command -v man >/dev/null && [ -f "$T/prefix/share/man/man1/rlock.1" ]; then
  MANPATH="$T/prefix/share/man" man rlock 2>/dev/null | grep -q "conflict-exit-code" && pass "man rlock reads the page" ||
    fail "man rlock did not show the installed page"
fi
if out=$(env -u LD_LIBRARY_PATH "$T/prefix/bin/rlock" --version 2>&1); then
  pass "the installed rlock starts without LD_LIBRARY_PATH: $out"
else
  fail "the installed rlock does not start from $T/prefix: $out"
fi
pc=$(dirname "$(find "$T/prefix" -name rlock.pc | head -n 1)")
libdir=$(dirname "$pc")
[ -f "$pc/rlock.pc" ] && pass "rlock.pc installed in $pc" || fail "no rlock.pc"

cat >"$T/use.c" <<'C'
/* A consumer of the installed librlock: version and error strings. */
#include <rlock.h>
#include <stdio.h>
#include <string.h>
int main(void) {
  if (strcmp(rlock_version(), RLOCK_VERSION_STRING) != 0) return 1;
  printf("librlock %s: %s\n", rlock_version(), rlock_strerror(RLOCK_EBUSY));
  return 0;
}
C
flags=$(PKG_CONFIG_PATH="$pc" pkg-config --cflags --libs rlock) || fail "pkg-config rlock"
case "$flags" in *"$T/prefix"*) pass "pkg-config points into the install prefix: $flags" ;;
  *) fail "pkg-config flags do not point into the install prefix (rlock.pc hard-codes the configure-time prefix?): $flags" ;; esac
# shellcheck disable=SC2086
if gcc -std=c11 -Wall -Werror "${cflags[@]}" "$T/use.c" -o "$T/use" $flags; then
  out=$(LD_LIBRARY_PATH="$libdir" "$T/use") && pass "pkg-config consumer runs: $out" || fail "pkg-config consumer failed"
else
  fail "pkg-config consumer does not compile"
fi
# The README's line for a prefix the dynamic linker does not search.
rpath=$(PKG_CONFIG_PATH="$pc" pkg-config --variable=libdir rlock)
# shellcheck disable=SC2086
if gcc -std=c11 -Wall -Werror "${cflags[@]}" "$T/use.c" -o "$T/use_rpath" $flags -Wl,-rpath,"$rpath"; then
  out=$(env -u LD_LIBRARY_PATH "$T/use_rpath" 2>&1) && pass "pkg-config consumer with -Wl,-rpath runs: $out" ||
    fail "pkg-config consumer with -Wl,-rpath does not start: $out"
else
  fail "pkg-config consumer with -Wl,-rpath does not compile"
fi

mkdir -p "$T/cm"
cat >"$T/cm/CMakeLists.txt" <<'CM'
# A CMake consumer of the installed rlock package.
cmake_minimum_required(VERSION 3.18)
project(use_rlock C)
find_package(rlock 0.1 REQUIRED)
add_executable(use use.c)
target_link_libraries(use PRIVATE rlock::rlock_shared)
add_executable(use_static use.c)
target_link_libraries(use_static PRIVATE rlock::rlock_static)
CM
cp "$T/use.c" "$T/cm/use.c"
if cmake -S "$T/cm" -B "$T/cm/build" -DCMAKE_PREFIX_PATH="$T/prefix" -DCMAKE_C_FLAGS="${cflags[*]}" \
    >"$T/cm.log" 2>&1 && cmake --build "$T/cm/build" >>"$T/cm.log" 2>&1; then
  "$T/cm/build/use" >/dev/null && pass "find_package consumer (shared) runs" || fail "find_package consumer (shared) failed"
  "$T/cm/build/use_static" >/dev/null && pass "find_package consumer (static) runs" || fail "static consumer failed"
else
  cat "$T/cm.log"
  fail "find_package(rlock) consumer does not build"
fi
((FAILS == 0)) && { echo "all checks passed"; exit 0; }
exit 1
