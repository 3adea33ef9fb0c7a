#!/bin/sh
# build.sh OUT_DIR -- builds the Redisson peer jar into OUT_DIR/redisson-peer.jar
# (Maven's work files in OUT_DIR too). Offline first (mvn -o: seconds once
# ~/.m2 holds Redisson 4.7.0 and the plugins), online only when the cache
# lacks something. Run by the CMake build (tests/CMakeLists.txt).
set -u
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd) # absolute: Maven resolves a relative one against the pom's dir
log=$out/maven.log
run() { mvn -B -q -f "$here/pom.xml" -DpeerBuildDir="$out" "$@" package >"$log" 2>&1; }
if run -o || run; then
  exit 0
fi
echo "tests/interop/redisson: mvn package failed (Maven Central unreachable and ~/.m2 lacks Redisson 4.7.0?); last lines of $log:" >&2
tail -20 "$log" >&2
exit 1
