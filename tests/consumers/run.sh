#!/usr/bin/env bash
# tests/consumers/run.sh: builds the library the ways a user would and runs a small program
# (app/main.cpp) against a real redis-server on a free loopback port, for each kind of library:
#   static, shared:  find_package from an install prefix (installed with `cmake --install
#                    --prefix` into a directory that was not the configure-time prefix),
#                    add_subdirectory, FetchContent (SOURCE_DIR), pkg-config plain and
#                    pkg-config --static; and, when built with it, find_package(redlock
#                    COMPONENTS zookeeper) (find-package-zookeeper/), the core package with the
#                    ZooKeeper client made unfindable, find_package(redlock COMPONENTS
#                    postgres) (find-package-postgres/), and the asio component's program
#                    (asio/main.cpp) through find_package(redlock COMPONENTS asio)
#                    (find-package-asio/), add_subdirectory, FetchContent and pkg-config
#                    redlock-asio;
#   --deb:           also `cpack -G DEB` of a shared build, dpkg -i, the find_package consumer
#                    against /usr, dpkg -P (needs root; leaves the machine as it found it).
# Work tree: build-consumers/ at the top of the repository. ccache is used when installed
# (CCACHE_BASEDIR makes the library's objects shared between the builds of one kind).
# Exit status 0 when every consumer built and ran.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/tests/consumers"
WORK="$ROOT/build-consumers"
deb=0
[ "${1:-}" = "--deb" ] && deb=1

cmake_args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
if command -v ccache >/dev/null; then
  cmake_args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="$ROOT" CCACHE_NOHASHDIR=1
fi
lib_only=(-DREDLOCK_BUILD_TESTS=OFF -DREDLOCK_BUILD_EXAMPLES=OFF -DREDLOCK_BUILD_BENCH=OFF
          -DREDLOCK_BUILD_TOOLS=OFF)

server_pid=""
server_port=""
stop_server() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null
    wait "$server_pid" 2>/dev/null
  fi
  server_pid=""
}
deb_installed=0
cleanup() {
  stop_server
  if [ $deb_installed -eq 1 ]; then dpkg -P libredlock-dev >/dev/null; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Starts a throwaway redis-server on a free loopback port (server_port). Returns 1 if none came up.
start_server() {
  local attempt
  for attempt in 1 2 3 4 5 6 7 8 9 10; do
    server_port=$((20000 + RANDOM % 30000))
    redis-server --port "$server_port" --bind 127.0.0.1 --save '' --appendonly no \
      --dir "$WORK" >"$WORK/redis.log" 2>&1 &
    server_pid=$!
    local tries
    for tries in $(seq 50); do
      kill -0 "$server_pid" 2>/dev/null || break
      if redis-cli -p "$server_port" info server 2>/dev/null | grep -q "process_id:$server_pid"; then
        return 0
      fi
      sleep 0.1
    done
    stop_server
  done
  echo "consumers: no redis-server came up (last log: $(tail -3 "$WORK/redis.log"))" >&2
  return 1
}

results=()
failed=0
# check NAME COMMAND...: runs one build-and-run step, records its outcome.
check() {
  local name="$1"
  shift
  local start=$SECONDS
  if "$@" >"$WORK/$name.log" 2>&1; then
    results+=("ok      $name ($((SECONDS - start)) s): $(tail -1 "$WORK/$name.log")")
  else
    failed=$((failed + 1))
    results+=("FAILED  $name ($((SECONDS - start)) s), log $WORK/$name.log")
    tail -20 "$WORK/$name.log" >&2
  fi
}

# cmake_app DIR SOURCE [ARGS...]: configures and builds a consumer project, then runs it (and its
# asio program, consumer_asio, when the project built one).
cmake_app() {
  local dir="$1" source="$2"
  shift 2
  cmake -S "$source" -B "$dir" "${cmake_args[@]}" "$@" &&
    cmake --build "$dir" -j"$(nproc)" &&
    "$dir/consumer_app" "redis://127.0.0.1:$server_port" || return 1
  [ ! -e "$dir/consumer_asio" ] || "$dir/consumer_asio" "redis://127.0.0.1:$server_port"
}

# build_lib KIND PREFIX BUILD_DIR [ARGS...]: builds the library alone, for PREFIX.
build_lib() {
  local kind="$1" prefix="$2" dir="$3"
  shift 3
  local shared=OFF
  [ "$kind" = shared ] && shared=ON
  cmake -S "$ROOT" -B "$dir" "${cmake_args[@]}" "${lib_only[@]}" -DBUILD_SHARED_LIBS=$shared \
    -DCMAKE_INSTALL_PREFIX="$prefix" "$@" && cmake --build "$dir" -j"$(nproc)"
}
# install_lib KIND PREFIX BUILD_DIR: build_lib for another prefix, then `cmake --install --prefix
# PREFIX`, as a user who installs into a directory of their own does: what is installed must not
# depend on the configure-time prefix (CMake package and .pc files alike).
install_lib() {
  local kind="$1" prefix="$2" dir="$3" configured="$WORK/$1/configured-prefix"
  build_lib "$kind" "$configured" "$dir" && cmake --install "$dir" --prefix "$prefix" &&
    [ ! -e "$configured" ]
}

# pkg_config_app KIND PREFIX [--static] [MODULE SOURCE]: compiles SOURCE (app/main.cpp) with the
# flags MODULE.pc (redlock.pc) gives.
pkg_config_app() {
  local kind="$1" prefix="$2" static="${3:-}" module="${4:-redlock}"
  local source="${5:-$HERE/app/main.cpp}" exe="$WORK/$1/pkg-config-${4:-redlock}${3:-}/consumer_app"
  mkdir -p "$(dirname "$exe")"
  local pc_dir
  pc_dir="$(dirname "$(find "$prefix" -name redlock.pc | head -1)")"
  local flags
  flags="$(PKG_CONFIG_PATH="$pc_dir" pkg-config $static --cflags --libs "$module")" || return 1
  echo "g++ -std=c++17 $source $flags"
  g++ -std=c++17 "$source" -o "$exe" $flags &&
    LD_LIBRARY_PATH="$(dirname "$pc_dir")" "$exe" "redis://127.0.0.1:$server_port"
}

# The core package needs no ZooKeeper client, even from a library built with the component: with
# the client made unfindable (as on a machine without libzookeeper-mt-dev), find_package(redlock)
# still works. The static component needs the client on every link, so there find_package(redlock
# COMPONENTS zookeeper) must fail (which proves the client really was unfindable); a shared
# libredlock.so links the client itself, so there the component is still found.
core_without_zookeeper() {
  local kind="$1" prefix="$2" no_zk=(-DCMAKE_DISABLE_FIND_PACKAGE_ZooKeeperMt=ON)
  local component_found=0
  cmake -S "$HERE/find-package-zookeeper" -B "$WORK/$kind/no-zookeeper-component" \
    "${cmake_args[@]}" -DCMAKE_PREFIX_PATH="$prefix" "${no_zk[@]}" && component_found=1
  if [ "$kind" = static ] && [ $component_found -eq 1 ]; then
    echo "the static zookeeper component was found without the ZooKeeper client"
    return 1
  fi
  if [ "$kind" = shared ] && [ $component_found -eq 0 ]; then
    echo "the shared zookeeper component looked for the ZooKeeper client"
    return 1
  fi
  cmake_app "$WORK/$kind/no-zookeeper" "$HERE/find-package" -DCMAKE_PREFIX_PATH="$prefix" \
    "${no_zk[@]}"
}

# As a sub-project redlock leaves the parent's build type empty and writes no
# compile_commands.json (configure only: seconds).
sets_nothing_global() {
  local dir="$WORK/static/sub-project-globals"
  cmake -S "$HERE/add-subdirectory" -B "$dir" -DREDLOCK_SOURCE_DIR="$ROOT" -DCMAKE_BUILD_TYPE= ||
    return 1
  local build_type
  build_type="$(grep '^CMAKE_BUILD_TYPE:' "$dir/CMakeCache.txt" | cut -d= -f2)"
  [ -z "$build_type" ] || { echo "CMAKE_BUILD_TYPE forced to '$build_type'"; return 1; }
  [ ! -e "$dir/compile_commands.json" ] || { echo "compile_commands.json written"; return 1; }
  echo "build type left empty, no compile_commands.json"
}

# The shared library exports the public API only (cmake/redlock.map): every defined dynamic
# symbol is in namespace redlock, none in redlock::detail except the protected LockBase
# constructor that takes a LockCore and the async door <redlock/asio.hpp> calls
# (detail::async_acquire, async_release, async_extend, hold_delivered, post_callback), and the
# SONAME carries the ABI version.
exports_only_redlock() {
  local so
  so="$(find "$1" -name 'libredlock.so' | head -1)"
  [ -n "$so" ] || { echo "no libredlock.so under $1"; return 1; }
  local all others internal
  all="$(nm -D --defined-only "$so" | awk '{print $3}')"
  others="$(grep -v -E '^_Z(N|NK|TIN|TSN|TVN|ThnN?[0-9]*_N|ZN)7redlock' <<<"$all")"
  internal="$(c++filt <<<"$all" | grep 'redlock::detail' |
    grep -v -E 'LockBase::LockBase|^redlock::detail::(async_(acquire|release|extend)|hold_delivered|post_callback)\(')"
  [ -z "$others" ] || { echo "exported outside namespace redlock:"; echo "$others" | head; return 1; }
  [ -z "$internal" ] || { echo "internals exported:"; echo "$internal" | head; return 1; }
  readelf -d "$so" | grep -q 'SONAME.*libredlock\.so\.[0-9]' || { echo "no versioned SONAME"; return 1; }
  echo "nm -D: $(wc -l <<<"$all") symbols, all in namespace redlock; $(readelf -d "$so" | grep -o 'libredlock\.so\.[0-9.]*')"
}

consumers_of_kind() {  # consumers_of_kind static|shared
  local kind="$1" prefix="$WORK/$1/prefix"
  local shared=OFF
  [ "$kind" = shared ] && shared=ON
  check "$kind-install" install_lib "$kind" "$prefix" "$WORK/$kind/install/redlock"
  [ "$kind" = shared ] && check "shared-exports" exports_only_redlock "$prefix"
  check "$kind-find-package" cmake_app "$WORK/$kind/find-package" "$HERE/find-package" \
    -DCMAKE_PREFIX_PATH="$prefix"
  check "$kind-add-subdirectory" cmake_app "$WORK/$kind/add-subdirectory" \
    "$HERE/add-subdirectory" -DREDLOCK_SOURCE_DIR="$ROOT" -DBUILD_SHARED_LIBS=$shared
  check "$kind-fetch-content" cmake_app "$WORK/$kind/fetch-content" "$HERE/fetch-content" \
    -DREDLOCK_SOURCE_DIR="$ROOT" -DBUILD_SHARED_LIBS=$shared
  check "$kind-pkg-config" pkg_config_app "$kind" "$prefix"
  check "$kind-pkg-config-static" pkg_config_app "$kind" "$prefix" --static
  # The ZooKeeper component, when the library was built with it (libzookeeper-mt-dev found).
  if [ -n "$(find "$prefix" -name redlock-zookeeper.pc | head -1)" ]; then
    check "$kind-find-package-zookeeper" cmake_app "$WORK/$kind/find-package-zookeeper" \
      "$HERE/find-package-zookeeper" -DCMAKE_PREFIX_PATH="$prefix"
    check "$kind-find-package-without-zookeeper" core_without_zookeeper "$kind" "$prefix"
    check "$kind-pkg-config-zookeeper" pkg_config_app "$kind" "$prefix" --static \
      redlock-zookeeper "$HERE/find-package-zookeeper/main.cpp"
  fi
  # The asio component, when the library was built with it (libasio-dev found); add_subdirectory
  # and FetchContent above built and ran its program too.
  if [ -n "$(find "$prefix" -name redlock-asio.pc | head -1)" ]; then
    check "$kind-asio-as-sub-project" ls "$WORK/$kind/add-subdirectory/consumer_asio" \
      "$WORK/$kind/fetch-content/consumer_asio"
    check "$kind-find-package-asio" cmake_app "$WORK/$kind/find-package-asio" \
      "$HERE/find-package-asio" -DCMAKE_PREFIX_PATH="$prefix"
    check "$kind-pkg-config-asio" pkg_config_app "$kind" "$prefix" "" redlock-asio \
      "$HERE/asio/main.cpp"
  fi
  # The PostgreSQL component, when the library was built with it (libpq-dev found).
  if [ -n "$(find "$prefix" -name redlock-postgres.pc | head -1)" ]; then
    check "$kind-find-package-postgres" cmake_app "$WORK/$kind/find-package-postgres" \
      "$HERE/find-package-postgres" -DCMAKE_PREFIX_PATH="$prefix"
    check "$kind-pkg-config-postgres" pkg_config_app "$kind" "$prefix" --static redlock-postgres \
      "$HERE/find-package-postgres/main.cpp"
  fi
}

# The .deb of a shared build for /usr: install, build the find_package consumer against it, remove.
deb_consumer() {
  local tool
  for tool in cpack dpkg-shlibdeps file; do  # packages cmake, dpkg-dev, file
    command -v "$tool" >/dev/null || { echo "--deb needs $tool"; return 1; }
  done
  local dir="$WORK/shared/deb/redlock"
  build_lib shared "/usr" "$dir" -DREDLOCK_BUILD_TOOLS=ON >/dev/null &&
    (cd "$dir" && cpack -G DEB) || return 1
  local package
  package="$(ls "$dir"/libredlock-dev_*.deb | head -1)"
  dpkg-deb --info "$package" | grep -E "Package|Version|Depends|Maintainer"
  dpkg -i "$package" || return 1
  deb_installed=1
  redlock-run --version && ls /usr/share/man/man1/redlock-run.1*
  cmake_app "$WORK/shared/deb/find-package" "$HERE/find-package" || return 1
  dpkg -P libredlock-dev && deb_installed=0
  [ ! -e /usr/include/redlock/lock.hpp ]
}

rm -rf "$WORK"
mkdir -p "$WORK"
start_server || exit 1
check "sub-project-sets-nothing-global" sets_nothing_global
consumers_of_kind static
consumers_of_kind shared
[ $deb -eq 1 ] && check "shared-deb" deb_consumer
printf '%s\n' "${results[@]}"
[ $failed -eq 0 ]
