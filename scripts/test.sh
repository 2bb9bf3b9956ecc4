#!/usr/bin/env bash
# The whole test suite, from any directory and any state (fresh clone or already built):
# installs missing Debian packages, builds into build/, runs every test with ctest.
set -euo pipefail
REDLOCK_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$REDLOCK_ROOT/scripts/deps.sh"
redlock_install_deps
redlock_build "$REDLOCK_ROOT/build"
cd "$REDLOCK_ROOT/build"
ctest --output-on-failure -j2 --timeout 300
