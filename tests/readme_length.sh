#!/bin/sh
# README.md is the product page: at most 300 lines (issue 36); the rest lives in docs/.
readme="$1/README.md"
lines=$(wc -l < "$readme") || exit 1
echo "README.md: $lines lines (at most 300)"
[ "$lines" -le 300 ]
