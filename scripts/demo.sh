#!/usr/bin/env bash
# The demo, from any directory and any state: installs the Debian packages the chosen topology
# needs, builds redlock-demo (and only what it depends on) into build/, and runs it. redlock-demo
# starts its own throwaway redis-servers on free loopback ports (or uses the servers given with
# --redis URI). --help answers at once, without installing or building anything.
set -euo pipefail
REDLOCK_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$REDLOCK_ROOT/build"
demo_bin="$build_dir/examples/redlock-demo"
# Measured: a cold build of redlock-demo and the library, RelWithDebInfo, 2 cores, no ccache.
first_build_time="about 4 min"

usage() {
  cat <<'HELP'
Usage: bash scripts/demo.sh [OPTIONS]

Worker processes x threads increment a shared counter under one Redlock while nodes are
paused, killed and restarted; then the demo reports lost updates, hand-off latency and
fairness. With no --redis it starts 6 throwaway redis-servers on free loopback ports
(5 lock nodes + 1 for the counter) and stops them on exit, also on Ctrl-C.

Options (passed to redlock-demo):
  --duration DURATION   how long the workers run (default 10s; 250ms, 0.5s, 1m30s, 90)
  --processes N         worker processes, 1 to 64 (default 3)
  --threads N           threads per worker process, sharing its lock, 1 to 64 (default 4)
  --ttl DURATION        lease ttl (default 1s)
  --node-timeout DURATION
                        connect/command timeout of the lock nodes (default 200ms)
  --redis URI           use this server as a lock node instead of starting any (repeatable;
                        no faults are injected then)
  --checker URI         with --redis: the server that holds the counter
  --faults, --no-faults inject faults (the default with own servers), or not
  --tls                 start the servers with TLS (throwaway certificates made with openssl)
                        and connect over verified rediss://
  --topology redlock|sentinel|cluster
                        redlock (default): a Redlock over 5 servers; sentinel: a Lock through
                        Sentinel (a master, 2 replicas, 3 sentinels) with a live failover and
                        the master killed; cluster: a Lock on a Redis Cluster (3 masters,
                        3 replicas) whose slot migrates, then fails over
  --no-fencing          counter writes carry no fence token
  --async               the workers acquire and release through <redlock/asio.hpp> on an
                        io_context (installs libasio-dev), with the same verdict lines
  --metrics DIR         each worker writes its Prometheus metrics to DIR/worker-N.prom
  -h, --help            this text (without building anything)

The first run installs what is missing (g++, cmake, hiredis, fmt, OpenSSL's headers, CLI11,
Catch2, redis-server, redis-tools; openssl with --tls; no Java, no PostgreSQL) and builds
redlock-demo into build/: FIRST_BUILD_TIME on 2 cores. Later runs start at once.

Exit status: 0 pass, 1 a lost update or an overlap, 64 usage, 69 servers could not be started
or reached, 130 interrupted. Once built, build/examples/redlock-demo --help says the same.
HELP
}

for arg in "$@"; do
  case "$arg" in
    --) break ;;
    -h | --help)
      usage | sed "s/FIRST_BUILD_TIME/$first_build_time/"
      exit 0
      ;;
  esac
done

source "$REDLOCK_ROOT/scripts/deps.sh"
# The build tools and redis-server (with redis-cli, for the cluster) are all any topology needs;
# --tls adds openssl for the throwaway certificates, --async asio's headers.
extra=()
for arg in "$@"; do
  [ "$arg" = "--tls" ] && extra+=("${REDLOCK_DEPS_TLS[@]}")
  [ "$arg" = "--async" ] && extra+=(libasio-dev)  # standalone asio, for redlock::asio
done
redlock_install_deps "${extra[@]}"

# Builds only redlock-demo and what it links (the library, the examples' helpers), printing
# cmake's progress lines on a first build and nothing on a rebuild that has little to do.
cmake -S "$REDLOCK_ROOT" -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
if [ ! -x "$demo_bin" ]; then
  echo "redlock: building redlock-demo (first run, $first_build_time on 2 cores; progress below)" >&2
  cmake --build "$build_dir" -j"$(nproc)" --target redlock-demo |
    sed -un 's/^\(\[ *[0-9]*%\]\) Building CXX object .*\/\([^/]*\)\.o$/  \1 \2/p' >&2
  echo "redlock: built $demo_bin" >&2
else
  cmake --build "$build_dir" -j"$(nproc)" --target redlock-demo >/dev/null
fi
exec "$demo_bin" "$@"
