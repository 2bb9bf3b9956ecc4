#!/usr/bin/env python3
"""Tests the code in the documentation (README.md and docs/*.md).

  scripts/docs_snippets.py compile [--build DIR]   every ```cpp block compiles and links
  scripts/docs_snippets.py run [--build DIR]       every redlock-run line runs
  scripts/docs_snippets.py links [--site DIR]      every relative link and #anchor resolves
  scripts/docs_snippets.py png FILE...             each screenshot shows a rendered page

png: decodes each PNG (8-bit RGB or RGBA, as Chromium writes them) and fails when it is blank:
fewer than 16 distinct colours, or fewer than 2% of its pixels unlike the most common colour.

links: mkdocs 1.4 checks that a linked page exists, not its #anchor. This checks every relative
link of README.md, CHANGELOG.md and docs/*.md: the file exists, and an #anchor is the id of a
heading (in the built site for docs pages, default build-docs/site/; by GitHub's rule for
the README and the changelog).

compile: a block that is a whole program is compiled as it is. A block that is not is marked with
the HTML comment `<!-- fragment -->` on the line before it; it is then wrapped in a generated
file: the fragment's #include lines at the top, the prelude below (the library's header, common
std headers, std::chrono_literals and the placeholder functions the docs call: run_report(),
write_report(fence), do_work(), transfer(fence, fence)), and the rest as the body of main().
An unmarked block that is not a program fails like any other: nothing is skipped silently. A
block that must not be compiled says why: `<!-- not-compiled: REASON -->` (docs/async.md's
two: C++20 and the asio component; examples/async_service.cpp is compiled instead).
Each file is compiled with -Wall -Wextra -Werror against include/ and linked against the
libraries in the build directory (default build/; the targets redlock, and redlock_zookeeper
and redlock_postgres when configured, must be built).

run: every line of a ```sh block that starts with `redlock-run` runs with bash, against a
throwaway redis-server this script starts on a free loopback port (REDLOCK_REDIS points at it),
with build/tools/redlock-run/ first in PATH, each within 60 s. Its exit status must be 0, or
the N a comment on the line names as `exit N: ...`. A block whose lines cannot run against one
throwaway redis-server is marked `<!-- redlock-run: skip (REASON) -->`; the reason is printed.
"""
import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRELUDE = """#include <redlock/redlock.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

using namespace std::chrono_literals;

// Placeholders for the application code the documentation's fragments call.
[[maybe_unused]] static void run_report() {}
[[maybe_unused]] static void write_report(std::uint64_t) {}
[[maybe_unused]] static bool do_work() { return false; }
[[maybe_unused]] static void transfer(std::uint64_t, std::uint64_t) {}
"""
MARK = re.compile(r"<!--\s*(fragment|not-compiled:.*?|redlock-run:\s*skip.*?)\s*-->")


def doc_files():
    files = [os.path.join(ROOT, "README.md")]
    docs = os.path.join(ROOT, "docs")
    files += sorted(os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))
    return files


def blocks(path, language):
    """Yields (line number, marker or None, text) for each ```language block of a file."""
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```" + language:
            marker = None
            for back in (i - 1, i - 2):
                if back >= 0 and lines[back].strip():
                    found = MARK.search(lines[back])
                    marker = found.group(1) if found else None
                    break
            end = i + 1
            while end < len(lines) and lines[end].strip() != "```":
                end += 1
            yield i + 1, marker, "\n".join(lines[i + 1:end]) + "\n"
            i = end
        i += 1


def wrap_fragment(text):
    includes = [l for l in text.split("\n") if l.startswith("#include")]
    body = [l for l in text.split("\n") if not l.startswith("#include")]
    return ("\n".join(includes) + "\n" + PRELUDE + "\nint main() {\n" + "\n".join(body) +
            "\n  return 0;\n}\n")


def link_flags(build):
    libs = [os.path.join(build, name) for name in
            ("libredlock_zookeeper.a", "libredlock_postgres.a", "libredlock.a")]
    libs = [lib for lib in libs if os.path.exists(lib)]
    if not libs or not libs[-1].endswith("libredlock.a"):
        sys.exit(f"docs_snippets: {build}/libredlock.a is missing: build the target redlock first")
    system = subprocess.run(["pkg-config", "--libs", "hiredis", "fmt", "libssl", "libcrypto"],
                            check=True, capture_output=True, text=True).stdout.split()
    if any("zookeeper" in lib for lib in libs):
        system.append("-lzookeeper_mt")
    if any("postgres" in lib for lib in libs):
        system.append("-lpq")
    return libs + system + ["-pthread"]


def compile_one(job):
    source, exe, flags = job
    cmd = ["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-I", os.path.join(ROOT, "include"),
           "-I", os.path.join(flags["build"], "include"), source, "-o", exe] + flags["libs"]
    result = subprocess.run(cmd, capture_output=True, text=True)
    return result.returncode, result.stderr


def compile_all(build):
    flags = {"build": build, "libs": link_flags(build)}
    work = tempfile.mkdtemp(prefix="redlock-docs-")
    jobs, names = [], []
    for path in doc_files():
        rel = os.path.relpath(path, ROOT)
        for line, marker, text in blocks(path, "cpp"):
            name = f"{rel}:{line}"
            if marker and marker.startswith("not-compiled:"):
                print(f"not compiled (marked): {name}: {marker}")
                continue
            kind = "fragment" if marker == "fragment" else "program"
            source = os.path.join(work, f"snippet_{len(jobs)}.cpp")
            with open(source, "w", encoding="utf-8") as out:
                out.write(f"// {name} ({kind})\n")
                out.write(wrap_fragment(text) if kind == "fragment" else text)
            jobs.append((source, source[:-4], flags))
            names.append((name, kind))
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = list(pool.map(compile_one, jobs))
    failed = 0
    for (name, kind), (rc, err) in zip(names, results):
        print(f"{'ok    ' if rc == 0 else 'FAILED'} {name} ({kind})")
        if rc != 0:
            failed += 1
            print(err)
    if failed == 0:
        shutil.rmtree(work)
    else:
        print(f"sources kept in {work}")
    print(f"C++ blocks: {len(jobs)} compiled and linked, {failed} failed")
    return failed == 0 and len(jobs) > 0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(work):
    port = free_port()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                               "--save", "", "--appendonly", "no", "--dir", work],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return server, port
        except OSError:
            time.sleep(0.05)
    server.kill()
    sys.exit("docs_snippets: the throwaway redis-server did not start")


def run_all(build):
    tool_dir = os.path.join(build, "tools", "redlock-run")
    if not os.access(os.path.join(tool_dir, "redlock-run"), os.X_OK):
        sys.exit(f"docs_snippets: {tool_dir}/redlock-run is missing: build the target redlock-run")
    work = tempfile.mkdtemp(prefix="redlock-docs-run-")
    server, port = start_redis(work)
    env = dict(os.environ, PATH=tool_dir + os.pathsep + os.environ["PATH"],
               REDLOCK_REDIS=f"redis://127.0.0.1:{port}")
    ran = failed = skipped = 0
    try:
        for path in doc_files():
            rel = os.path.relpath(path, ROOT)
            for line, marker, text in blocks(path, "sh"):
                commands = [(line + n + 1, l) for n, l in enumerate(text.split("\n"))
                            if l.startswith("redlock-run")]
                if not commands:
                    continue
                if marker and marker.startswith("redlock-run"):
                    skipped += len(commands)
                    print(f"skipped (marked) {rel}:{line}: {marker}")
                    continue
                for number, command in commands:
                    expected = re.search(r"#.*\bexit (\d+)", command)
                    expected = int(expected.group(1)) if expected else 0
                    try:
                        rc = subprocess.run(["bash", "-c", command], env=env, cwd=work,
                                            capture_output=True, text=True, timeout=60).returncode
                    except subprocess.TimeoutExpired:
                        rc = "timeout"
                    ran += 1
                    good = rc == expected
                    failed += 0 if good else 1
                    print(f"{'ok    ' if good else 'FAILED'} {rel}:{number}: exit {rc} "
                          f"(expected {expected}): {command}")
    finally:
        server.kill()
        server.wait()
        shutil.rmtree(work, ignore_errors=True)
    print(f"redlock-run lines: {ran} ran, {failed} failed, {skipped} skipped (marked)")
    return failed == 0 and ran > 0


LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading):
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^a-z0-9 -]", "", text).replace(" ", "-")


def anchors_of(path, site):
    rel = os.path.relpath(path, os.path.join(ROOT, "docs"))
    if not rel.startswith("..") and rel.endswith(".md"):
        page = rel[:-3]
        html = os.path.join(site, "index.html" if page == "index" else os.path.join(page, "index.html"))
        return set(re.findall(r'id="([^"]+)"', open(html, encoding="utf-8").read()))
    text = open(path, encoding="utf-8").read()
    return {slug(m) for m in re.findall(r"^#+ (.*)$", text, re.M)}


def check_links(site):
    bad = checked = 0
    for path in doc_files() + [os.path.join(ROOT, "CHANGELOG.md")]:
        text = re.sub(r"```.*?```", "", open(path, encoding="utf-8").read(), flags=re.S)
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
            checked += 1
            problem = None
            if not os.path.exists(dest):
                problem = "no such file"
            elif anchor and dest.endswith(".md") and anchor not in anchors_of(dest, site):
                problem = f"no heading #{anchor}"
            if problem:
                bad += 1
                print(f"FAILED {os.path.relpath(path, ROOT)}: ({target}): {problem}")
    print(f"links: {checked} checked, {bad} broken")
    return bad == 0


def png_pixels(path):
    """Returns (width, height, rows of bytes, bytes per pixel) of an 8-bit RGB(A) PNG."""
    import struct
    import zlib
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = header
    if depth != 8 or colour not in (2, 6) or interlace:
        raise ValueError(f"unsupported PNG (depth {depth}, colour type {colour})")
    bpp = 3 if colour == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, rows, bpp


def check_pngs(paths):
    from collections import Counter
    ok = True
    for path in paths:
        try:
            width, height, rows, bpp = png_pixels(path)
        except (OSError, ValueError) as e:
            print(f"FAILED {path}: {e}")
            ok = False
            continue
        colours = Counter(row[i:i + 3] for row in rows for i in range(0, len(row), bpp))
        common = colours.most_common(1)[0][1]
        unlike = 1 - common / (width * height)
        good = len(colours) >= 16 and unlike >= 0.02
        ok = ok and good
        print(f"{'ok    ' if good else 'FAILED'} {path}: {width}x{height}, {len(colours)} colours, "
              f"{unlike:.1%} of the pixels unlike the background")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["compile", "run", "links", "png"])
    parser.add_argument("files", nargs="*")
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--site", default=os.path.join(ROOT, "build-docs", "site"))
    args = parser.parse_args()
    build = os.path.abspath(args.build)
    if args.what == "png":
        ok = check_pngs(args.files)
    elif args.what == "links":
        ok = check_links(os.path.abspath(args.site))
    else:
        ok = compile_all(build) if args.what == "compile" else run_all(build)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
