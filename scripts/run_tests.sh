#!/usr/bin/env bash
# Runs each test binary given on the command line and sums their closing lines
#   TESTS <name>: passed=P failed=F skipped=S
# into one final line "N passed, N failed, N skipped". A binary that crashes or prints no summary
# counts as one failure, and so does a summary that counts no check (passed, failed and skipped all 0).
# Exit status: nonzero when anything failed.
set -u
passed=0; failed=0; skipped=0
for t in "$@"; do
    echo "=== $t"
    out=$("$t" 2>&1); rc=$?
    printf '%s\n' "$out"
    line=$(printf '%s\n' "$out" | grep -E '^TESTS [^:]+: passed=[0-9]+ failed=[0-9]+ skipped=[0-9]+$' | tail -n 1)
    if [ -z "$line" ]; then
        echo "FAIL $t: exited with status $rc without a summary line"
        failed=$((failed + 1)); continue
    fi
    p=$(sed -E 's/.*passed=([0-9]+).*/\1/' <<<"$line")
    f=$(sed -E 's/.*failed=([0-9]+).*/\1/' <<<"$line")
    s=$(sed -E 's/.*skipped=([0-9]+).*/\1/' <<<"$line")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL $t: exit status $rc with no failed check"; f=1
    fi
    if [ $((p + f + s)) -eq 0 ]; then
        echo "FAIL $t: its summary counts no check at all"; f=1
    fi
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
done
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
