#!/usr/bin/env bash
# Runs each test program given on the command line and sums their closing lines
#   TESTS <name>: passed=P failed=F skipped=S
# into one final line "N passed, N failed, N skipped" (scripts/summary_lib.sh: a program that crashes, prints no
# summary or counts no check is one failure). Exit status: nonzero when anything failed.
set -u
source "$(dirname "$0")/summary_lib.sh"
for t in "$@"; do
    echo "=== $t"
    out=$("$t" 2>&1); rc=$?
    printf '%s\n' "$out"
    add_summary "$t" "$out" "$rc"
done
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
