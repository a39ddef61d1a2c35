#!/usr/bin/env bash
# A run that diverges never leaves its newest checkpoint holding the broken weights, and its error
# names the checkpoint to resume from. Trains 2 steps with a checkpoint after each, then resumes from
# the second at --lr 1e6: the update of step 2 wrecks the weights, and within a step or two the loss
# (or the weights themselves) go NaN or Inf. The run must stop with "training diverged" and name a
# newest good checkpoint ckpt_G (normally ckpt_00000002.bin) whose weights gave a finite loss (the log
# holds train step G+1), and leave no later ckpt_XXXXXXXX.bin behind (the one written from the wrecked
# weights is renamed to .diverged, or never written), so that --resume latest finds ckpt_G.
# usage: scripts/check_diverge.sh   (needs a GPU and ./train_gpt_fp4; skips, exit 0, without a GPU)
# env: CHECK_DIR [/tmp/check_diverge] (the runs' logs and checkpoints)
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_or_skip.sh
gpu_or_skip check_diverge
OUT=${CHECK_DIR:-/tmp/check_diverge}   # the runs' logs and checkpoints stay there until the next run
rm -rf "$OUT"; mkdir -p "$OUT"
common=(--model d6 --batch-size 4 --seq-len 256 --val-every 0 --sample-every 0 --seed 7 --ckpt-every 1 --out-dir "$OUT")
passed=0; failed=0
check() {   # check CONDITION-EXIT-STATUS MESSAGE
    if [ "$1" -eq 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL check_diverge: $2"; fi
}
./train_gpt_fp4 "${common[@]}" --steps 2 > "$OUT/good.txt" 2>&1
check $? "the first 2 steps did not train (see $OUT/good.txt)"
./train_gpt_fp4 "${common[@]}" --steps 8 --lr 1e6 --resume latest > "$OUT/diverge.txt" 2>&1
rc=$?
err=$(grep '^error:' "$OUT/diverge.txt" | tail -n 1)
echo "exit $rc: $err"
[ "$rc" -ne 0 ]; check $? "the run at --lr 1e6 did not stop"
grep -q "training diverged" <<<"$err"; check $? "no 'training diverged' in: $err"
good=$(sed -n "s/.*newest good checkpoint is '\([^']*\)'.*/\1/p" <<<"$err")
[ -n "$good" ] && [ -f "$good" ]; check $? "the message names no newest good checkpoint that exists: $err"
g=$(basename "$good" .bin | sed 's/^ckpt_0*//')
g=${g:-0}
[ "$g" -ge 2 ] && grep -q "\"type\":\"train\",\"step\":$((g + 1))," "$OUT/log.jsonl"
check $? "'$good' is named good, but the log has no finite loss from its weights (train step $((g + 1)))"
[ "$(ls "$OUT"/ckpt_*.bin | tail -n 1)" = "$good" ]
check $? "--resume latest would not pick '$good': $(ls "$OUT"/ckpt_*.bin | tr '\n' ' ')"
echo "checkpoints left: $(cd "$OUT" && ls ckpt_* | tr '\n' ' ')"
echo "TESTS check_diverge: passed=$passed failed=$failed skipped=0"
[ "$failed" -eq 0 ]
