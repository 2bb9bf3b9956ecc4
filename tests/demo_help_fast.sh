#!/usr/bin/env bash
# `scripts/demo.sh --help` answers within 5 s on a copy of the repository that has never been
# built (no build/ directory), and builds nothing (issue 36).
root="$1"
copy=$(mktemp -d) || exit 1
trap 'rm -rf "$copy"' EXIT
# The sources without any build directory or git metadata, as a fresh download would be.
(cd "$root" && tar cf - --exclude='./build*' --exclude=./.git .) | (cd "$copy" && tar xf -) ||
  exit 1
start=$(date +%s%N)
# In a session of its own, so that whatever it started (a build) is stopped with it.
setsid bash "$copy/scripts/demo.sh" --help > "$copy/help.txt" 2>&1 &
pid=$!
waited=0
while kill -0 "$pid" 2>/dev/null && [ $waited -lt 50 ]; do
  sleep 0.1
  waited=$((waited + 1))
done
if kill -0 "$pid" 2>/dev/null; then
  kill -KILL -- "-$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  echo "demo.sh --help did not answer within 5 s; its output so far:"
  cat "$copy/help.txt"
  exit 1
fi
wait "$pid"
rc=$?
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "demo.sh --help: exit $rc in $elapsed_ms ms"
cat "$copy/help.txt"
[ $rc -eq 0 ] || exit 1
grep -q -- '--topology' "$copy/help.txt" || { echo "no option list in the help"; exit 1; }
[ ! -e "$copy/build" ] || { echo "--help created build/"; exit 1; }
