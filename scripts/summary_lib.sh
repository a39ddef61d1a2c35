# summary_lib.sh: sourced by the scripts that run test programs and sum their closing lines
#   TESTS <name>: passed=P failed=F skipped=S
# into the globals passed, failed, skipped (zeroed here). add_summary LABEL OUT RC adds one program's: its output OUT
# (the last such line counts) and exit status RC. No summary line, a nonzero status with no failed check, or a
# summary that counts no check at all is one failure. Sets p (the program's passed count) for the caller.
passed=0; failed=0; skipped=0
add_summary() {
    local label=$1 out=$2 rc=$3 line f s
    p=0
    line=$(printf '%s\n' "$out" | grep -E '^TESTS [^:]+: passed=[0-9]+ failed=[0-9]+ skipped=[0-9]+$' | tail -n 1)
    if [ -z "$line" ]; then
        echo "FAIL $label: exited with status $rc without a summary line"
        failed=$((failed + 1)); return
    fi
    p=$(sed -E 's/.*passed=([0-9]+).*/\1/' <<<"$line")
    f=$(sed -E 's/.*failed=([0-9]+).*/\1/' <<<"$line")
    s=$(sed -E 's/.*skipped=([0-9]+).*/\1/' <<<"$line")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then echo "FAIL $label: exit status $rc with no failed check"; f=1; fi
    if [ $((p + f + s)) -eq 0 ]; then echo "FAIL $label: its summary counts no check at all"; f=1; fi
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
}
