#!/usr/bin/env bash
# tests/cli/runner.sh -- scripts/test itself (the CI entry point) must fail
# whenever something is broken: a copy of scripts/test runs against stub
# cmake / ctest / dpkg-query executables (first on PATH) that build, fail or
# skip on demand, in seconds. Checked: every stage's build failure and test
# failure fails the run (exit 1, a FAIL line); a stage that selects no test
# fails (--no-tests=error reaches ctest); skips (skipped-tests.txt lines, a
# missing skipped-tests.txt, known_bug tests) print SKIP and pass, and fail
# under CI=true; the known_bug and long labels are left out of every stage
# (long only without --long); the TSan stage runs the `engine` label; the
# last line sums the stages' counts. $1: the source tree.
set -u
SRC=${1:?usage: $0 SOURCE_DIR}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
FAILS=0
fail() { echo "FAIL: $*" >&2; FAILS=$((FAILS + 1)); }
pass() { echo "ok: $*"; }

mkdir -p "$T/tree/scripts" "$T/bin"
cp "$SRC/scripts/test" "$SRC/scripts/lib.sh" "$T/tree/scripts/"

# dpkg-query: every package is installed (nothing to install).
cat >"$T/bin/dpkg-query" <<'STUB'
#!/usr/bin/env bash
echo "install ok installed"
STUB
# cmake: configure writes <dir>/skipped-tests.txt ($STUB_SKIP, unless
# $STUB_NO_SKIPFILE names the dir); --build fails for $STUB_BUILD_FAIL.
cat >"$T/bin/cmake" <<'STUB'
#!/usr/bin/env bash
dir=
build=0
while (($#)); do
  case "$1" in
    -B) dir=$2; shift ;;
    --build) build=1; dir=$2; shift ;;
  esac
  shift
done
dir=${dir#./}
if ((build)); then
  [ "$dir" = "${STUB_BUILD_FAIL:-}" ] && { echo "stub: error: build of $dir fails" >&2; exit 2; }
  exit 0
fi
mkdir -p "$dir"
rm -f "$dir/skipped-tests.txt"
[ "$dir" = "${STUB_NO_SKIPFILE:-}" ] || printf '%s' "${STUB_SKIP:-}" >"$dir/skipped-tests.txt"
exit 0
STUB
# ctest: -N lists $STUB_KNOWN_BUG; a run logs its arguments to $STUB_LOG and
# passes 5 tests, fails 1 of 5 for $STUB_TEST_FAIL, or selects none for
# $STUB_NO_TESTS (an error only with --no-tests=error, as the real ctest).
cat >"$T/bin/ctest" <<'STUB'
#!/usr/bin/env bash
dir= list=0 noerr=0
args=("$@")
while (($#)); do
  case "$1" in
    --test-dir) dir=$2; shift ;;
    -N) list=1 ;;
    --no-tests=error) noerr=1 ;;
  esac
  shift
done
dir=${dir#./}
if ((list)); then
  [ -n "${STUB_KNOWN_BUG:-}" ] && echo "  Test #20: $STUB_KNOWN_BUG"
  exit 0
fi
printf '%s\n' "$dir ${args[*]}" >>"$STUB_LOG"
if [ "$dir" = "${STUB_NO_TESTS:-}" ]; then
  echo "No tests were found!!!"
  ((noerr)) && exit 8
  exit 0
fi
if [ "$dir" = "${STUB_TEST_FAIL:-}" ]; then
  echo "80% tests passed, 1 tests failed out of 5"
  exit 8
fi
echo "100% tests passed, 0 tests failed out of 5"
STUB
chmod +x "$T/bin/"*

# run NAME WANT_RC [VAR=VALUE...] [-- ARGS]: one run of the copy; output in $T/out.
run() {
  local name=$1 want=$2 rc
  shift 2
  local envs=() args=()
  while (($#)); do
    [ "$1" = -- ] && { shift; args=("$@"); break; }
    envs+=("$1")
    shift
  done
  : >"$T/log"
  (cd "$T/tree" && env -u CI PATH="$T/bin:$PATH" STUB_LOG="$T/log" "${envs[@]}" \
    ./scripts/test "${args[@]}") >"$T/out" 2>&1
  rc=$?
  if [ "$rc" = "$want" ]; then
    pass "$name: exit $rc"
  else
    fail "$name: exit $rc, want $want; output:"
    sed 's/^/    /' "$T/out" >&2
  fi
}
has() { grep -qE -- "$2" "$T/out" && pass "$1" || fail "$1: no line matching '$2' in the output"; }
last_line() {
  local l
  l=$(tail -n 1 "$T/out")
  [ "$l" = "$2" ] && pass "$1: '$l'" || fail "$1: last line '$l', want '$2'"
}

run "all green" 0
has "all green: says so" '^all stages passed$'
last_line "all green: the counts of 3 stages" "15 passed, 0 failed"
[ "$(grep -c '^PASS ' "$T/out")" = 3 ] && pass "all green: 3 PASS lines" || fail "all green: not 3 PASS lines"

for d in build build-asan build-tsan; do
  run "$d/ does not compile" 1 STUB_BUILD_FAIL="$d"
  has "$d/ does not compile: a FAIL line" "^FAIL +$d/.*build failed"
  has "$d/ does not compile: the summary says so" '^some stages FAILED$'
  run "$d/: a test fails" 1 STUB_TEST_FAIL="$d"
  has "$d/: a test fails: a FAIL line" "^FAIL +$d/.*tests failed"
  run "$d/: no test selected" 1 STUB_NO_TESTS="$d"
done
run "a test fails: counted" 1 STUB_TEST_FAIL=build-asan
last_line "a test fails: the counts" "14 passed, 1 failed"
run "plain build fails: the other stages still run" 1 STUB_BUILD_FAIL=build
has "plain build fails: ASan stage ran" '^PASS +build-asan/'
has "plain build fails: TSan stage ran" '^PASS +build-tsan/'

run "a skipped test" 0 STUB_SKIP=$'fuzz targets: no clang\n'
has "a skipped test: a SKIP line" '^SKIP .*no clang'
run "a skipped test under CI=true" 1 STUB_SKIP=$'fuzz targets: no clang\n' CI=true
has "a skipped test under CI=true: a FAIL line" '^FAIL .*no clang'
run "no skipped-tests.txt" 0 STUB_NO_SKIPFILE=build-tsan
has "no skipped-tests.txt: a SKIP line" '^SKIP .*build-tsan.*skipped-tests.txt'
run "no skipped-tests.txt under CI=1" 1 STUB_NO_SKIPFILE=build-tsan CI=1
run "a known_bug test" 0 STUB_KNOWN_BUG=test_frob
has "a known_bug test: a SKIP line naming it" '^SKIP .*test_frob'
run "a known_bug test under CI=true" 1 STUB_KNOWN_BUG=test_frob CI=true
has "a known_bug test under CI=true: a FAIL line" '^FAIL .*test_frob'

# What each stage asks ctest for (the stub logs one line per run).
run "labels" 0
[ "$(wc -l <"$T/log")" = 3 ] && pass "labels: 3 ctest runs" || fail "labels: $(wc -l <"$T/log") ctest runs, want 3"
while read -r dir rest; do
  read -ra a <<<"$rest"
  le= l= ne=0
  for ((i = 0; i < ${#a[@]}; i++)); do
    case "${a[i]}" in
      -LE) le=${a[i + 1]} ;;
      -L) l=${a[i + 1]} ;;
      --no-tests=error) ne=1 ;;
    esac
  done
  ((ne)) && pass "$dir: --no-tests=error" || fail "$dir: ctest without --no-tests=error"
  for lab in known_bug long; do
    grep -qE -- "$le" <<<"$lab" && pass "$dir: $lab left out" || fail "$dir: label $lab not excluded (-LE '$le')"
  done
  for lab in engine cli fault fuzz unit; do
    grep -qE -- "$le" <<<"$lab" && fail "$dir: label $lab excluded (-LE '$le')"
  done
  if [ "$dir" = build-tsan ]; then
    [ "$l" = engine ] || [ "$l" = '^engine$' ] && pass "TSan runs the engine label" || fail "TSan stage: -L '$l'"
  fi
done <"$T/log"
run "--long" 0 -- --long
grep -q '^build .*-T memcheck' "$T/log" && pass "--long: memcheck stage" || fail "--long: no memcheck run"
while read -r dir rest; do
  read -ra a <<<"$rest"
  for ((i = 0; i < ${#a[@]}; i++)); do
    [ "${a[i]}" = -LE ] || continue
    le=${a[i + 1]}
    grep -qE -- "$le" <<<known_bug || fail "--long: $dir runs known_bug tests"
    [ "${a[*]}" != "${a[*]/memcheck/}" ] && continue # memcheck leaves long tests out
    grep -qE -- "$le" <<<long && fail "--long: $dir still leaves long tests out"
  done
done <"$T/log"
run "bad argument" 64 -- --frob

((FAILS == 0)) && { echo "all checks passed"; exit 0; }
echo "$FAILS check(s) failed" >&2
exit 1
