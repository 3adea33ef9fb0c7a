# scripts/lib.sh -- shared by scripts/demo and scripts/test: installs missing
# Debian packages (apt-get update only when something is missing) and builds
# the project with CMake. Sourced, not run.

# ensure_packages PKG...: installs those of PKG that are not installed yet.
ensure_packages() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  echo "== installing: ${missing[*]}"
  local sudo=()
  [ "$(id -u)" = 0 ] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

BUILD_PACKAGES=(cmake gcc make pkg-config libc6-dev libhiredis-dev libevent-dev libssl-dev redis-server)
# What scripts/demo builds: the CLI and the libraries, everything
# `cmake --install` installs (the tests are not needed).
DEMO_TARGETS="rlock_cli rlock_shared rlock_static"

# build DIR [CMAKE ARGS...]: configures and builds the project into DIR
# (only the targets named in $BUILD_TARGETS, if set).
build() {
  local dir=$1 targets=()
  shift
  [ -n "${BUILD_TARGETS:-}" ] && targets=(--target $BUILD_TARGETS)
  cmake -S . -B "$dir" "$@" >/dev/null && cmake --build "$dir" -j"$(nproc 2>/dev/null || echo 2)" "${targets[@]}"
}
