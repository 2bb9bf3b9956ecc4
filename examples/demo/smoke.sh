#!/bin/sh
# examples/demo/smoke.sh KIND DEMO [ARGS...]: runs redlock-demo with ARGS, which must PASS, and
# checks that its output describes the run it made (issue 31): a Sentinel or Cluster run names
# the Lock it runs (no Redlock, no quorum, no "6th server", no "no node reachable"), a Cluster run
# has no phase too short for a rate shown as one, and a --tls run says TLS, in the banner and in
# the summary; an --async run says so in both. KIND: plain, tls, sentinel, cluster or async.
kind=$1
demo=$2
shift 2
out=$(mktemp) || exit 1
trap 'rm -f "$out"' EXIT
"$demo" "$@" >"$out" 2>&1
status=$?
cat "$out"
[ $status -eq 0 ] || { echo "smoke: redlock-demo exited $status"; exit 1; }
failed=0
# has PATTERN COUNT: at least COUNT lines match; lacks PATTERN: none does.
has() {
  [ "$(grep -E -c -- "$1" "$out")" -ge "$2" ] || { echo "smoke: fewer than $2 lines with: $1"; failed=1; }
}
lacks() {
  if grep -E -q -- "$1" "$out"; then
    echo "smoke: should not say '$1': $(grep -E -- "$1" "$out" | head -1)"
    failed=1
  fi
}
lacks "no node reachable"
case $kind in
  plain) has "a Redlock over 5 nodes \(quorum 3\)" 2 ;;
  tls) has "a Redlock over 5 TLS nodes \(quorum 3\)" 2 ;;
  async) has "a Redlock over 5 nodes \(quorum 3\), acquired through asio \(--async\)" 2 ;;
  sentinel)
    has "a Lock through Sentinel" 2
    lacks "Redlock|quorum|6th server" ;;
  cluster)
    has "a Lock on a Redis Cluster" 2
    lacks "Redlock|quorum|6th server|\(0\.0 s\)|  0\.0 holds/s" ;;
  *) echo "smoke: unknown kind $kind"; exit 2 ;;
esac
exit $failed
