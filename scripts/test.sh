#!/usr/bin/env bash
# The whole test suite, from any directory and any state (fresh clone or already built).
# Installs missing Debian packages, then runs, each in its own build directory:
#   1. build/        the full ctest suite (unit, real-server, fault, torture, examples, bench smoke)
#   2. build-asan/   the suite under AddressSanitizer + UndefinedBehaviorSanitizer (clang)
#   3. build-tsan/   the suite under ThreadSanitizer (clang)
#   4. valgrind memcheck on a subset (the plain build's test binary)
#   5. libFuzzer on Endpoint::parse and the reply handling, 30 s each (build-fuzz/)
#   6. consumers: the library built and used as a user would (find_package, add_subdirectory,
#      FetchContent, pkg-config; static and shared), and the .deb installed, used and removed
#      (tests/consumers/run.sh --deb, build-consumers/)
#   7. the API reference: doxygen docs/Doxyfile, warnings as errors (build-docs/)
#   8. the documentation: scripts/check_docs.sh (mkdocs build --strict into build-docs/site/,
#      links, every C++ block of README.md and docs/ compiled, every redlock-run line run,
#      the versions, the built site, the benchmark plots, the CMake blocks, headless Chromium
#      screenshots of three pages in build-docs/screenshots/)
# In stages 1-3 a failed ctest case runs once more; the last lines name every case that failed a
# run (run_ctest below). The script ends with one line "stages: N passed, M failed". `--quick` runs stage 1 only, without the
# ctest labels in quick_excluded below (torture runs, the TLS and ACL re-runs, [slow] cases,
# the Sentinel, Cluster and PostgreSQL cases, the bench smoke run, the examples and demo runs,
# the asio token programs, which the quick build leaves out):
# unit and real-server cases, about 2.7 minutes on 2 cores once built (465 cases, 162 s).
set -uo pipefail
REDLOCK_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$REDLOCK_ROOT/scripts/deps.sh"
quick=0
[ "${1:-}" = "--quick" ] && quick=1
quick_excluded='torture|tls|acl|slow|sentinel|cluster|postgres|bench|example|asio'
if [ $quick -eq 1 ]; then
  redlock_install_deps "${REDLOCK_DEPS_TEST[@]}" || exit 1
else
  # ccache, dpkg-dev (dpkg-shlibdeps) and file: the consumer stage. The docs stages install theirs.
  redlock_install_deps "${REDLOCK_DEPS_TEST[@]}" clang libclang-rt-14-dev valgrind ccache \
    dpkg-dev file || exit 1
fi
jobs="$(nproc)"
passed=0
failed=0
failures=()
case_reports=()  # "stage: case (outcome)" for every case that failed a run, retried or not
current_stage=""
stage() {  # stage NAME COMMAND...: runs one stage, records the outcome, never stops the script
  local name="$1"
  shift
  echo
  echo "=== $name ==="
  local start=$SECONDS
  current_stage="$name"
  if "$@"; then
    passed=$((passed + 1))
    echo "=== $name: passed ($((SECONDS - start)) s) ==="
  else
    failed=$((failed + 1))
    failures+=("$name")
    echo "=== $name: FAILED ($((SECONDS - start)) s) ==="
  fi
}

# run_ctest DIR ARGS...: ctest -j2 in DIR, a failed case run once more (--repeat until-pass:2).
# Every case that failed a run is named in the summary at the end, also when its second run
# passed, so that a case that fails now and then is seen and not hidden by the retry. Returns
# ctest's status: nonzero when a case failed both runs.
run_ctest() {
  local dir="$1"
  shift
  local log="$dir/ctest-output.log"
  (cd "$dir" && ctest --output-on-failure -j2 --repeat until-pass:2 "$@") 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]} name outcome
  while IFS='|' read -r name outcome; do
    if sed -n '/^The following tests FAILED:/,$p' "$log" | grep -qF " - $name ("; then
      case_reports+=("$current_stage: $name ($outcome, failed its second run too)")
    else
      case_reports+=("$current_stage: $name ($outcome, passed its second run)")
    fi
  done < <(sed -nE 's/.*Test +#[0-9]+: (.*[^ ]) \.+ *\*\*\*([A-Za-z ]+[a-z]).*/\1|\2/p' "$log" |
    sort -u)
  return "$rc"
}

# The suite's builds carry line tables only (-g1, not RelWithDebInfo's -g): sanitizer, valgrind
# and crash reports keep file:line, and every build is about a quarter faster.
line_tables=-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG"

# redlock_async_tests (the [async] suite) exists when asio was found: its name, or nothing.
async_target() {
  cmake --build "$1" --target help 2>/dev/null | grep -o 'redlock_async_tests' | head -1
}
plain() {
  local dir="$REDLOCK_ROOT/build"
  if [ $quick -eq 1 ]; then  # only what the quick tier runs: no bench, torture, examples, demo
    cmake -S "$REDLOCK_ROOT" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$line_tables" >/dev/null &&
      cmake --build "$dir" -j"$(nproc)" --target redlock_tests redlock_tests_cxx20 redlock-run \
        $(async_target "$dir") &&
      run_ctest "$dir" --timeout 600 -LE "$quick_excluded"
  else
    redlock_build "$dir" "$line_tables" && run_ctest "$dir" --timeout 600
  fi
}
# The sanitizer stages run the cases that can find races and memory errors, not the re-runs nor
# the [slow] cases (long fleet, fault and liveness timings that the plain stage runs once):
# everything but the torture runs, the lock suites' re-runs over TLS (label tls: they keep the
# suites' 200 ms connect timeout for the handshake too, which a sanitized build's handshake CPU
# can exceed; the TLS cases of test_tls.cpp, with 1 s timeouts, run) and as the minimal ACL user
# (label acl: the same code paths as the plain run, only the login differs), and the docs checks.
# TSan also leaves out the Sentinel and Cluster topologies (label sentinel, cluster: seconds of
# failover waits each, on the I/O paths ASan runs; their threads are the ones the other cases
# drive) and redlock-run's cases (label cli: the tool as a child process, mostly waiting for it).
# The async suite (redlock_async_tests, label async) runs in both, whole: under a sanitizer its
# loops run a quarter of their rounds (tests/async_fixture.hpp, rounds()), the same cases.
# The examples, redlock-demo and redlock-torture are not built there: their runs drive the
# library code that the suite's own cases reach, and the plain stage runs them.
sanitized() {  # sanitized DIR SANITIZERS [MORE_EXCLUDED_LABELS]
  local dir="$REDLOCK_ROOT/$1"
  redlock_build "$dir" "$line_tables" -DCMAKE_CXX_COMPILER=clang++ -DREDLOCK_SANITIZE="$2" \
    -DREDLOCK_BUILD_BENCH=OFF -DREDLOCK_BUILD_EXAMPLES=OFF -DREDLOCK_BUILD_TORTURE=OFF \
    >/dev/null &&
    run_ctest "$dir" --timeout 900 -LE "torture|tls|acl|docs|slow${3:+|$3}"
}
memcheck() {
  # Threads, sockets and child processes under valgrind are slow: a subset without timing bounds.
  # [pool] is left out: its bursts of 200 threads queue for connections, and valgrind runs one
  # thread at a time, so a queued request can see no connection come back within its patience.
  valgrind --quiet --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite \
    "$REDLOCK_ROOT/build/tests/redlock_tests" \
    "[unit],[client]~[fault]~[pool],Lock acquires*,Lock is re-entrant*,Fencing tokens*,Redlock basics*,scoped_lock*,Watchdog gives the lock up at max_hold,A fair waiter that times out*,Fair mode: fence tokens*" \
    --use-colour no
}
fuzz() {
  local dir="$REDLOCK_ROOT/build-fuzz"
  redlock_build "$dir" "$line_tables" -DCMAKE_CXX_COMPILER=clang++ -DREDLOCK_BUILD_FUZZ=ON \
    -DREDLOCK_SANITIZE=address,undefined -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link \
    -DREDLOCK_BUILD_TESTS=OFF -DREDLOCK_BUILD_EXAMPLES=OFF -DREDLOCK_BUILD_TOOLS=OFF \
    -DREDLOCK_BUILD_BENCH=OFF >/dev/null ||
    return 1
  local target corpus rc=0
  for target in endpoint replies; do
    corpus="$(mktemp -d)"
    cp "$REDLOCK_ROOT/tests/fuzz/corpus/$target/"* "$corpus/"
    (cd "$corpus" && "$dir/tests/fuzz/fuzz_$target" -max_total_time=30 -max_len=65536 \
      -print_final_stats=1 "$corpus" 2>&1 | tail -4) || rc=1
    ls "$corpus" | grep -q '^crash-' && rc=1
    rm -rf "$corpus"
  done
  return $rc
}

api_reference() {
  redlock_install_deps doxygen || return 1
  (cd "$REDLOCK_ROOT" && rm -rf build-docs && doxygen docs/Doxyfile &&
    test -s build-docs/html/index.html)
}
documentation() {
  redlock_install_deps mkdocs mkdocs-material doxygen python3-matplotlib chromium || return 1
  bash "$REDLOCK_ROOT/scripts/check_docs.sh" "$REDLOCK_ROOT/build"
}

stage "plain build + ctest" plain
if [ $quick -eq 0 ]; then
  stage "ASan+UBSan build + ctest" sanitized build-asan address,undefined
  stage "TSan build + ctest" sanitized build-tsan thread "sentinel|cluster|cli"
  stage "valgrind memcheck (subset)" memcheck
  stage "libFuzzer (30 s per target)" fuzz
  stage "consumers (static + shared) and .deb" bash "$REDLOCK_ROOT/tests/consumers/run.sh" --deb
  stage "API reference (doxygen)" api_reference
  stage "documentation (mkdocs, snippets, screenshots)" documentation
fi
echo
if [ ${#case_reports[@]} -gt 0 ]; then
  echo "cases that failed a run:"
  printf '  %s\n' "${case_reports[@]}"
fi
[ $failed -gt 0 ] && echo "failed stages: ${failures[*]}"
echo "stages: $passed passed, $failed failed"
[ $failed -eq 0 ]
