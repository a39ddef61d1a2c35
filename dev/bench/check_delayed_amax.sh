#!/usr/bin/env bash
# The delayed amax rule (--amax delayed) on the GPU machine, in one call: builds the trainer and the tests, runs
# test_quant_fast (the apply pass alone under the delayed rule against the two-pass quantizer, bit for bit) and
# test_gpt_fp4 (the default path), then short d12 runs with and without the rule: the same recipe must train to
# within noise of the current-amax run (not the same bits: a numerics change), with one micro-step and with two.
# usage: bash dev/bench/check_delayed_amax.sh [recipe ...]   (default: nvfp4 nvfp4-naive ufp4 quartet2)
# env: OUT (results directory, default /tmp/check_delayed), STEPS (30)
set -uo pipefail
OUT=${OUT:-/tmp/check_delayed}; STEPS=${STEPS:-30}
recipes=("$@"); [ ${#recipes[@]} -gt 0 ] || recipes=(nvfp4 nvfp4-naive ufp4 quartet2)
mkdir -p "$OUT"
make -j"$(nproc)" train_gpt_fp4 test_gpt_fp4 build/test_quant_fast > "$OUT/build.txt" 2>&1 || { tail -30 "$OUT/build.txt"; exit 1; }
status=0
build/test_quant_fast > "$OUT/test_quant_fast.txt" 2>&1 || status=1
grep -E "delayed|^TESTS|FAIL" "$OUT/test_quant_fast.txt" | head -20
./test_gpt_fp4 > "$OUT/test_gpt_fp4.txt" 2>&1 || status=1
tail -1 "$OUT/test_gpt_fp4.txt"
printf '%-12s %-7s %5s %10s %10s %10s\n' recipe amax micro "loss@10" "loss@20" "loss@$STEPS"
for r in "${recipes[@]}"; do
    for tb in 16384 32768; do   # one micro-step of B=16 x T=1024, and two
        for a in now delayed; do
            d="$OUT/run_${r}_${a}_$tb"
            LLMC_ATTENTION=own ./train_gpt_fp4 --model d12 --batch-size 16 --seq-len 1024 --total-batch $tb --steps "$STEPS" \
                --recipe "$r" --amax "$a" --val-every 0 --sample-every 0 --ckpt-every -1 --out-dir "$d" > "$d.txt" 2>&1 || {
                echo "$r --amax $a FAILED:"; tail -5 "$d.txt"; status=1; continue; }
            python3 - "$d/log.jsonl" "$r" "$a" $((tb / 16384)) "$STEPS" <<'PY'
import json, sys
log = [json.loads(l) for l in open(sys.argv[1])]
loss = {d["step"]: d["loss"] for d in log if d.get("type") == "train"}
n = int(sys.argv[5])
print(f"{sys.argv[2]:<12} {sys.argv[3]:<7} {sys.argv[4]:>5} {loss.get(10, float('nan')):>10.4f} {loss.get(20, float('nan')):>10.4f} {loss.get(n, float('nan')):>10.4f}")
PY
        done
    done
done
exit $status
