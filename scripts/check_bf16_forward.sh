#!/usr/bin/env bash
# --bf16-forward-from across resumes (GPU): scripts/check_resume.sh under the nvfp4 recipe with the switch
# after the resume point (0.25 of 12 steps: step 9; the resume is at 6) and before it (0.75: step 3, so
# the resumed run must start in the switched state). Each must give the uninterrupted run's losses bit for
# bit and its bf16_forward event at the same step, once; the kill -9 case resumes wherever it lands.
# usage: scripts/check_bf16_forward.sh   (needs a GPU and ./train_gpt_fp4; skips without a GPU)
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/summary_lib.sh
for frac in 0.25 0.75; do
    out=$(CHECK_DIR=/tmp/check_bf16_forward_$frac scripts/check_resume.sh --recipe nvfp4 --bf16-forward-from "$frac" 2>&1)
    rc=$?
    printf '%s\n' "$out" | sed "s/^/[$frac] /"
    add_summary "check_bf16_forward: --bf16-forward-from $frac: check_resume.sh" "$out" "$rc"
    if [ "$p" -gt 0 ]; then   # it ran: the switch must be in the log, at its step
        want=$(python3 -c "import math; print(12 - max(1, min(12, math.floor($frac * 12 + 0.5))))")
        if grep -q "\"event\":\"bf16_forward\",\"on\":1,\"switch_step\":$want," "/tmp/check_bf16_forward_$frac/full/log.jsonl"; then
            echo "check_bf16_forward: OK: --bf16-forward-from $frac switched at step $want"
            passed=$((passed + 1))
        else
            echo "FAIL check_bf16_forward: --bf16-forward-from $frac: no bf16_forward event at step $want in the log"
            failed=$((failed + 1))
        fi
    fi
done
echo "TESTS check_bf16_forward: passed=$passed failed=$failed skipped=$skipped"
[ "$failed" -eq 0 ]
