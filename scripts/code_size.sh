#!/usr/bin/env bash
# scripts/code_size.sh: the longest functions and files under src/ (or the directories given).
#
# Functions are counted by universal-ctags, from the line of a function's name to the line of its
# closing brace (ctags' "end" field), Lua text inside raw strings included; files by `wc -l`.
# The architecture issue aims at functions of at most ~60 lines and files of at most ~400.
#
#   bash scripts/code_size.sh [--top N] [DIR...]     default: --top 10 src
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
top=10
if [ "${1:-}" = "--top" ]; then
  top="$2"
  shift 2
fi
dirs=("$@")
[ ${#dirs[@]} -gt 0 ] || dirs=(src)
command -v ctags >/dev/null || { echo "code_size.sh: needs universal-ctags (apt-get install universal-ctags)" >&2; exit 1; }

echo "Longest functions (lines, from the name to the closing brace):"
ctags -R --languages=C++ --kinds-C++=f --fields=+ne -o - "${dirs[@]}" 2>/dev/null |
  awk -F'\t' '{ l = ""; e = "";
                for (i = 4; i <= NF; i++) { if ($i ~ /^line:/) l = substr($i, 6);
                                            if ($i ~ /^end:/) e = substr($i, 5) }
                if (l != "" && e != "") printf "%5d  %s:%s  %s\n", e - l + 1, $2, l, $1 }' |
  sort -rn | head -n "$top"
echo
echo "Longest files (lines):"
find "${dirs[@]}" -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' \) -print0 |
  xargs -0 wc -l | grep -v ' total$' | sort -rn | head -n "$top" |
  awk '{ printf "%5d  %s\n", $1, $2 }'
