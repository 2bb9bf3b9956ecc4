#!/usr/bin/env python3
"""Checks of the documentation that scripts/docs_snippets.py does not make (scripts/check_docs.sh
runs both):

  scripts/docs_site.py versions               every version the docs name is CMake's
  scripts/docs_site.py cmake [--build DIR]    every ```cmake block of the docs is built as a
                                              consumer project, as tests/consumers/run.sh does
  scripts/docs_site.py site [--site DIR]      the built site: what a reader sees first

versions: the one version is `project(redlock VERSION x.y.z)` in CMakeLists.txt; the SONAME's
number follows from it as cmake/RedlockSetup.cmake says (MAJOR.MINOR before 1.0, then MAJOR).
In README.md, docs/*.md and docs/redlock-run.1, every `find_package(redlock X`, every
`libredlock.so.X`, every `libredlock-dev_X_`, every "Version X" and the man page's `.TH` line
must name that version (find_package: MAJOR.MINOR or the whole version).

cmake: `cmake --install DIR --prefix` of the build directory into a temporary prefix, then for
each ```cmake block of docs/*.md, a project of its own (project(app), an executable of
main.cpp named as the block's target_link_libraries names it, then the block, with the docs' placeholder paths /opt/redlock, third_party/redlock and
/src/redlock pointing at that prefix and this checkout). A block that finds the installed package
is configured, built and run (main.cpp prints the library's version, which must be CMake's); a
block that adds the source tree (add_subdirectory, FetchContent) is configured: it must print
the configure summary (cmake/RedlockSummary.cmake), and redlock's tests, examples, bench and
tools must be off (the library alone is built by
tests/consumers/run.sh, which builds the same three ways and runs them against a server).

site: docs/building.md shows configure, build and install in one line and names every
`option(REDLOCK_...)` of CMakeLists.txt. In the site mkdocs built (default build-docs/site/): the files that are not pages
(Doxyfile, mainpage.dox, redlock-run.1) are not copied; api/ is Doxygen's reference, not the
placeholder; every page under docs/ is in the navigation; the home page is a landing page (an
example, no link to the README outside the site); getting started opens with "A first lock";
code blocks wrap instead of being clipped (docs/stylesheets/extra.css); every table has a header
row; the API guide's "API in a page" names each type in a short first column, and its page
contents reach every type (Election included); the benchmark page shows the three plots of
scripts/bench_plots.py.
"""
import argparse
import glob
import html
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cmake_version():
    text = open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8").read()
    version = re.search(r"project\(redlock VERSION (\d+)\.(\d+)\.(\d+)", text)
    major, minor, patch = version.groups()
    soversion = f"{major}.{minor}" if major == "0" else major
    return f"{major}.{minor}.{patch}", f"{major}.{minor}", soversion


def doc_files():
    return ([os.path.join(ROOT, "README.md"), os.path.join(ROOT, "docs", "redlock-run.1")] +
            sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)))


def check_versions():
    version, major_minor, soversion = cmake_version()
    rules = [(r"find_package\(redlock ([0-9.]+)", (version, major_minor), "find_package"),
             (r"libredlock\.so\.([0-9]+(?:\.[0-9]+)?)", (soversion,), "the SONAME"),
             (r"libredlock-dev_([0-9.]+)_", (version,), "the .deb"),
             (r"\bVersion ([0-9]+\.[0-9]+\.[0-9]+)", (version,), "the version"),
             (r'^\.TH .*"redlock ([0-9.]+)"', (version,), "the man page's .TH")]
    bad = seen = 0
    for path in doc_files():
        for number, line in enumerate(open(path, encoding="utf-8"), 1):
            for pattern, allowed, what in rules:
                for found in re.findall(pattern, line):
                    seen += 1
                    if found not in allowed:
                        bad += 1
                        print(f"FAILED {os.path.relpath(path, ROOT)}:{number}: {what} says "
                              f"{found}, CMakeLists.txt says {' or '.join(allowed)}")
    print(f"versions: {seen} mentions of version {version} (SONAME {soversion}), {bad} wrong")
    return bad == 0 and seen > 0


MAIN = """#include <redlock/redlock.hpp>
#include <redlock/version.hpp>

#include <cstdio>

int main() {
  redlock::Endpoint endpoint = redlock::Endpoint::parse("redis://127.0.0.1:6379");
  std::printf("%s %s\\n", REDLOCK_VERSION_STRING, endpoint.host.c_str());
  return 0;
}
"""


def cmake_blocks():
    for path in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))):
        lines = open(path, encoding="utf-8").read().split("\n")
        i = 0
        while i < len(lines):
            if lines[i].strip() == "```cmake":
                end = lines.index("```", i + 1)
                yield f"{os.path.relpath(path, ROOT)}:{i + 1}", "\n".join(lines[i + 1:end])
                i = end
            i += 1


def run(cmd, log):
    result = subprocess.run(cmd, capture_output=True, text=True)
    log.write(" ".join(cmd) + "\n" + result.stdout + result.stderr)
    return result


def cmake_consumer(name, block, work, prefix, log):
    app = os.path.join(work, re.sub(r"[^a-z0-9]+", "-", name.lower()))
    os.makedirs(os.path.join(app, "third_party"))
    os.symlink(ROOT, os.path.join(app, "third_party", "redlock"))
    block = block.replace("/src/redlock", ROOT).replace("/opt/redlock", prefix)
    target = re.search(r"target_link_libraries\((\w+)", block)
    target = target.group(1) if target else "app"
    with open(os.path.join(app, "CMakeLists.txt"), "w", encoding="utf-8") as f:
        f.write("cmake_minimum_required(VERSION 3.16)\nproject(app LANGUAGES CXX)\n"
                f"add_executable({target} main.cpp)\n" + block + "\n")
    with open(os.path.join(app, "main.cpp"), "w", encoding="utf-8") as f:
        f.write(MAIN)
    build = os.path.join(app, "build")
    configure = ["cmake", "-S", app, "-B", build, f"-DCMAKE_PREFIX_PATH={prefix}"]
    configured = run(configure, log)
    if configured.returncode != 0:
        return "configure failed"
    if "find_package(redlock" not in block:
        summary = [part for part in (f"redlock {cmake_version()[0]}: optional parts", "TLS",
                                     "asio (redlock::asio)", "Boost.Asio", "ZooKeeper",
                                     "PostgreSQL") if f"-- {part}" not in configured.stdout
                   and f"--   {part}" not in configured.stdout]
        if summary:
            return f"the configure summary lacks {summary}"
        cache = open(os.path.join(build, "CMakeCache.txt"), encoding="utf-8").read()
        on = [o for o in ("TESTS", "EXAMPLES", "BENCH", "TOOLS")
              if re.search(rf"^REDLOCK_BUILD_{o}:BOOL=ON$", cache, re.M)]
        return f"REDLOCK_BUILD_{'/'.join(on)} ON in a sub-project" if on else None
    if run(["cmake", "--build", build, "-j2"], log).returncode != 0:
        return "build failed"
    printed = run([os.path.join(build, target)], log).stdout.split()
    version = cmake_version()[0]
    return None if printed[:1] == [version] else f"the program printed {printed}, not {version}"


def check_cmake(build):
    work = tempfile.mkdtemp(prefix="redlock-docs-cmake-")
    prefix = os.path.join(work, "prefix")
    failed = count = 0
    with open(os.path.join(work, "log.txt"), "w", encoding="utf-8") as log:
        if run(["cmake", "--install", build, "--prefix", prefix], log).returncode != 0:
            print(f"FAILED cmake --install {build}: log {work}/log.txt")
            return False
        for name, block in cmake_blocks():
            count += 1
            problem = cmake_consumer(name, block, work, prefix, log)
            failed += problem is not None
            print(f"FAILED {name}: {problem}" if problem else f"ok     {name}")
    print(f"CMake blocks: {count} built as consumers, {failed} failed"
          + (f" (log {work}/log.txt)" if failed else ""))
    if not failed:
        shutil.rmtree(work)
    return failed == 0 and count > 0


def page(site, name):
    path = os.path.join(site, "index.html" if name == "index" else os.path.join(name, "index.html"))
    return open(path, encoding="utf-8").read()


def article(text):
    found = re.search(r'<article class="md-content__inner md-typeset">(.*?)</article>', text, re.S)
    return found.group(1) if found else ""


def plain(fragment):
    return html.unescape(re.sub(r"<[^>]+>", "", fragment)).strip()


def toc_links(text):
    found = re.search(r'<nav class="md-nav md-nav--secondary".*?</nav>\s*</div>', text, re.S)
    return re.findall(r'href="#([^"]+)"', found.group(0)) if found else []


def building_problems():
    """Yields (what, problem or None): docs/building.md shows the build and every option."""
    path = os.path.join(ROOT, "docs", "building.md")
    text = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
    steps = "cmake -S . -B build && cmake --build build && cmake --install build --prefix"
    yield "docs/building.md: configure, build, install", None if steps in text else "not shown"
    cmake = open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8").read()
    for option in re.findall(r"^option\((REDLOCK_\w+)", cmake, re.M):
        yield f"docs/building.md documents {option}", None if option in text else "not named"


def site_problems(site):
    """Yields (what, problem or None) for each check of the built site."""
    yield from building_problems()
    for name in ("Doxyfile", "mainpage.dox", "redlock-run.1"):
        yield f"{name} not copied into the site", (
            f"site/{name} exists" if os.path.exists(os.path.join(site, name)) else None)
    api = open(os.path.join(site, "api", "index.html"), encoding="utf-8").read()
    yield "api/ is Doxygen's reference", (
        None if '<meta name="generator" content="Doxygen' in api else "api/index.html is not "
        "Doxygen's (the placeholder?)")
    nav = open(os.path.join(ROOT, "mkdocs.yml"), encoding="utf-8").read()
    docs = os.path.join(ROOT, "docs")
    for path in sorted(glob.glob(os.path.join(docs, "**", "*.md"), recursive=True)):
        rel = os.path.relpath(path, docs)
        yield f"{rel} in the navigation", (None if f": {rel}\n" in nav else "not in mkdocs.yml's nav")
    home = article(page(site, "index"))
    yield "home: a landing page", (
        "links to the README (not in the site)" if re.search(r'href="[^"]*README', home) else
        "no example (a code block)" if 'class="highlight"' not in home else
        "fewer than 3 sections" if len(re.findall(r"<h2", home)) < 3 else None)
    first = re.search(r'<h2 id="([^"]+)"', article(page(site, "getting-started")))
    yield "getting started opens with A first lock", (
        None if first and first.group(1) == "a-first-lock" else
        f"its first section is #{first.group(1) if first else '?'}")
    css = os.path.join(site, "stylesheets", "extra.css")
    wraps = os.path.exists(css) and "white-space: pre-wrap" in open(css, encoding="utf-8").read()
    yield "code blocks wrap (stylesheets/extra.css)", None if wraps else "no pre-wrap rule"
    for path in sorted(glob.glob(os.path.join(site, "**", "index.html"), recursive=True)):
        rel = os.path.relpath(path, site)
        if rel.startswith("api" + os.sep):
            continue
        text = open(path, encoding="utf-8").read()
        if wraps and "stylesheets/extra.css" not in text:
            yield f"{rel} links extra.css", "not linked"
        for head in re.findall(r"<thead>(.*?)</thead>", text, re.S):
            cells = [plain(c) for c in re.findall(r"<th[^>]*>(.*?)</th>", head, re.S)]
            if not any(cells):
                yield f"{rel}: every table has a header row", "an empty header row"
    guide = page(site, "api-guide")
    table = re.search(r'id="the-api-in-a-page".*?<tbody>(.*?)</tbody>', guide, re.S)
    names = [plain(r) for r in re.findall(r"<tr>\s*<td[^>]*>(.*?)</td>", table.group(1), re.S)
             ] if table else []
    long = [n for n in names if len(n) > 24 or " " in n]
    yield "API guide: the API in a page names one type a row", (
        "no table" if not names else f"first column too long to stay whole: {long}" if long else None)
    links = toc_links(guide)
    yield "API guide: page contents reach every type", (
        None if "election" in links and len(links) >= len(names) > 0 else
        f"page contents: {links}")
    bench = page(site, "benchmarks")
    for plot in ("fleet-scaling", "async-vs-blocking", "degraded-redlock"):
        shown = f"img/bench/{plot}.svg" in bench and os.path.exists(
            os.path.join(site, "img", "bench", plot + ".svg"))
        yield f"benchmarks: the {plot} plot", None if shown else "not shown"


def check_site(site):
    failed = 0
    for what, problem in site_problems(site):
        failed += problem is not None
        print(f"FAILED {what}: {problem}" if problem else f"ok     {what}")
    print(f"site: {failed} checks failed")
    return failed == 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["versions", "cmake", "site"])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--site", default=os.path.join(ROOT, "build-docs", "site"))
    args = parser.parse_args()
    if args.what == "versions":
        ok = check_versions()
    elif args.what == "cmake":
        ok = check_cmake(os.path.abspath(args.build))
    else:
        ok = check_site(os.path.abspath(args.site))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
