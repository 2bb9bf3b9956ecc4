#!/bin/sh
# `scripts/demo.sh --help` answers within 5 s on a copy of the repository that has never been
# built (no build/ directory), and builds nothing (issue 36).
root="$1"
copy=$(mktemp -d) || exit 1
trap 'rm -rf "$copy"' EXIT
# The sources without any build directory or git metadata, as a fresh download would be.
(cd "$root" && tar cf - --exclude='./build*' --exclude=./.git .) | (cd "$copy" && tar xf -) ||
  exit 1
start=$(date +%s%N)
timeout 5 bash "$copy/scripts/demo.sh" --help > "$copy/help.txt" 2>&1
rc=$?
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "demo.sh --help: exit $rc in $elapsed_ms ms"
cat "$copy/help.txt"
[ $rc -eq 0 ] || exit 1
grep -q -- '--topology' "$copy/help.txt" || { echo "no option list in the help"; exit 1; }
[ ! -e "$copy/build" ] || { echo "--help created build/"; exit 1; }
