# scripts/deps.sh: sourced by demo.sh and test.sh. Installs what redlock needs from Debian's
# archive (bookworm) when something is missing. Needs root (or sudo) only if it must install.
#
# Groups, so that each caller installs only what it uses:
#   REDLOCK_DEPS_BUILD   compile the library (with redlock::asio: libasio-dev), the examples
#                        and the demo
#   REDLOCK_DEPS_REDIS   run redis-server (standalone, Sentinel, Cluster: redis-cli --cluster)
#   REDLOCK_DEPS_TLS     make throwaway certificates (the demo's --tls, the TLS tests)
#   REDLOCK_DEPS_TEST    what the test suite adds: the above, faketime, PostgreSQL 15, ZooKeeper
#                        and its JRE, standalone asio (redlock::asio and its [async] suite),
#                        etcd (server and etcdctl) and python3-kazoo (the bench's section 14
#                        measures against them; without them its rows print "skipped")
# redlock_install_deps installs BUILD and REDIS, plus the packages named as its arguments
# (test.sh passes "${REDLOCK_DEPS_TEST[@]}" and its stage tools; the demo passes openssl for
# --tls and nothing else: no Java, no ZooKeeper, no PostgreSQL for any of its topologies).
REDLOCK_DEPS_BUILD=(g++ cmake make pkg-config libhiredis-dev libssl-dev catch2 libfmt-dev
                    libcli11-dev libasio-dev)
REDLOCK_DEPS_REDIS=(redis-server redis-tools)
REDLOCK_DEPS_TLS=(openssl)
REDLOCK_DEPS_TEST=("${REDLOCK_DEPS_TLS[@]}" faketime postgresql-15 libpq-dev libzookeeper-mt-dev
                   zookeeper default-jre-headless libasio-dev etcd-server etcd-client
                   python3-kazoo)

# Prints the packages among "$@" that are not installed, one per line.
redlock_missing_packages() {
  local pkg
  for pkg in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
      echo "$pkg"
    fi
  done
}

redlock_install_deps() {
  local missing=()
  mapfile -t missing < <(redlock_missing_packages "${REDLOCK_DEPS_BUILD[@]}" \
    "${REDLOCK_DEPS_REDIS[@]}" "$@")
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "redlock: installing ${missing[*]}" >&2
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null; then sudo="sudo"; else
      echo "redlock: missing packages (${missing[*]}) and not root; install them first" >&2
      return 1
    fi
  fi
  # Keep the distribution's redis-server service from starting: tests run their own servers.
  if [ ! -e /usr/sbin/policy-rc.d ] && [ -z "$sudo" ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    local remove_policy=1
  fi
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
  local rc=$?
  if [ -n "${remove_policy:-}" ]; then rm -f /usr/sbin/policy-rc.d; fi
  return $rc
}

# Configures and builds into $1 (default: build/ at the top of the repository) with -j<cores>.
redlock_build() {
  local build_dir="$1"
  shift
  cmake -S "$REDLOCK_ROOT" -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
  cmake --build "$build_dir" -j"$(nproc)"
}
