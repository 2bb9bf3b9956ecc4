#!/usr/bin/env bash
# The demo, from any directory and any state: installs missing Debian packages, builds, and runs
# redlock-demo, which starts its own throwaway redis-servers on free loopback ports (or uses the
# servers given with --redis URI). Arguments are passed to redlock-demo (try --help).
set -euo pipefail
REDLOCK_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$REDLOCK_ROOT/scripts/deps.sh"
redlock_install_deps
redlock_build "$REDLOCK_ROOT/build" >/dev/null
exec "$REDLOCK_ROOT/build/examples/redlock-demo" "$@"
