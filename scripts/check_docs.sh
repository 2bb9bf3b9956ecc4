#!/usr/bin/env bash
# The documentation stage of CI (scripts/test.sh runs it after the API reference):
#   1. mkdocs build --strict: docs/ -> build-docs/site/ (a missing page or a bad link fails);
#      its hook (scripts/mkdocs_hooks.py) leaves out the files that are not pages and puts the
#      API reference (doxygen docs/Doxyfile, build-docs/html/) in site/api/
#   2. every relative link and #anchor of README.md, CHANGELOG.md and docs/ resolves
#   3. every version the docs name is CMakeLists.txt's (scripts/docs_site.py versions)
#   4. the built site: landing page, navigation, tables, page contents, plots
#      (scripts/docs_site.py site)
#   5. the benchmark plots are up to date: scripts/bench_plots.py draws them again from
#      bench/published/*.json into build-docs/plots/, and they must equal docs/img/bench/
#   6. every ```cpp block compiles and links against build/ (fragments are wrapped in a main)
#   7. every ```cmake block is built as a consumer project against build/'s install
#      (scripts/docs_site.py cmake)
#   8. every redlock-run line runs against a throwaway redis-server
#   9. headless Chromium renders the home, getting started and API guide pages at 1280 px: the
#      screenshots (build-docs/screenshots/*.png) must not be blank, and each page's DOM must
#      hold the navigation (<nav class="md-nav ...">)
# Needs mkdocs, mkdocs-material, doxygen, python3-matplotlib and chromium (test.sh installs
# them) and build/ configured.
set -uo pipefail
REDLOCK_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$REDLOCK_ROOT/build}"
site="$REDLOCK_ROOT/build-docs/site"
shots="$REDLOCK_ROOT/build-docs/screenshots"
snippets="$REDLOCK_ROOT/scripts/docs_snippets.py"
checks="$REDLOCK_ROOT/scripts/docs_site.py"
failed=0
step() {  # step NAME COMMAND...: runs one step, reports it, and goes on
  local name="$1" start=$SECONDS
  shift
  echo "--- $name"
  if "$@"; then echo "--- $name: ok ($((SECONDS - start)) s)"; else
    echo "--- $name: FAILED ($((SECONDS - start)) s)"
    failed=$((failed + 1))
  fi
}

site_build() {
  (cd "$REDLOCK_ROOT" && mkdocs build --strict --quiet --site-dir "$site")
}

# The plots drawn again from the checked-in JSON must be the ones the docs show.
plots_current() {
  local fresh="$REDLOCK_ROOT/build-docs/plots"
  rm -rf "$fresh" && /usr/bin/python3 "$REDLOCK_ROOT/scripts/bench_plots.py" --out "$fresh" &&
    diff -r "$REDLOCK_ROOT/docs/img/bench" "$fresh" >/dev/null && echo "plots up to date" ||
    { echo "FAILED docs/img/bench/ differs from scripts/bench_plots.py's output: run it"; return 1; }
}

# The library, its components and redlock-run, in build/ (already built in a full CI run).
targets() {
  local t list=(redlock redlock-run) known
  known="$(cmake --build "$build" --target help)" || return 1
  for t in redlock_zookeeper redlock_postgres; do
    grep -q "^\.\.\. $t\$" <<<"$known" && list+=("$t")
  done
  cmake --build "$build" -j"$(nproc)" --target "${list[@]}" >/dev/null
}

# screenshot PAGE NAME: renders site/PAGE, writes $shots/NAME.png, and checks the DOM's nav.
screenshot() {
  local url="file://$site/$1" png="$shots/$2.png"
  local chrome=(chromium --headless --no-sandbox --disable-gpu --hide-scrollbars
                --virtual-time-budget=5000 --window-size=1280,1000)
  rm -f "$png"
  timeout 120 "${chrome[@]}" --screenshot="$png" "$url" >/dev/null 2>&1
  python3 "$snippets" png "$png" || return 1
  if ! timeout 120 "${chrome[@]}" --dump-dom "$url" 2>/dev/null | grep -q '<nav class="md-nav'; then
    echo "FAILED $url: no navigation (<nav class=\"md-nav\">) in the rendered page"
    return 1
  fi
  echo "ok     $url: navigation present; screenshot $png"
}

mkdir -p "$shots"
step "mkdocs build --strict" site_build
step "links and anchors" python3 "$snippets" links --site "$site"
step "versions" python3 "$checks" versions
step "the built site" python3 "$checks" site --site "$site"
step "plots up to date" plots_current
step "build the library and redlock-run" targets
step "C++ blocks compile" python3 "$snippets" compile --build "$build"
step "CMake blocks build" python3 "$checks" cmake --build "$build"
step "redlock-run lines run" python3 "$snippets" run --build "$build"
step "screenshot: home" screenshot index.html home
step "screenshot: getting started" screenshot getting-started/index.html getting-started
step "screenshot: API guide" screenshot api-guide/index.html api-guide
echo "--- documentation checks: $SECONDS s"
[ $failed -eq 0 ]
