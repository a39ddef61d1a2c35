#!/usr/bin/env bash
# What the delayed amax rule (--amax delayed) buys and what it changes, in one GPU call:
#   1. step time against BF16, each recipe with and without the rule, measured in the same run (bench_train.sh),
#      at d12 (B=64), d24 (B=32) and d36 (B=16);
#   2. a longer d12 run (B=32, T=1024) per recipe with and without the rule: the loss curves, and the FP4
#      diagnostics at the last step (scripts/quant_table.py --mean: the clipped fraction is where a scale taken
#      from the previous micro-step's amax shows, when a tensor's amax grew since).
# usage: bash dev/bench/bench_delayed_amax.sh   env: OUT (default /tmp/bench_delayed), SIZES ("d12 d24 d36"),
#        RECIPES ("nvfp4 nvfp4-naive ufp4 quartet2"), LONG ("nvfp4 ufp4"; empty: no long runs), LONG_STEPS (400),
#        LONG_B (32)
set -uo pipefail
OUT=${OUT:-/tmp/bench_delayed}; SIZES=${SIZES:-d12 d24 d36}; RECIPES=${RECIPES:-nvfp4 nvfp4-naive ufp4 quartet2}
LONG=${LONG-nvfp4 ufp4}; LONG_STEPS=${LONG_STEPS:-400}; LONG_B=${LONG_B:-32}
# the long runs train on Wikipedia where dev/data/enwiki.sh has tokenized it (tinyshakespeare's 300K tokens are
# 40 epochs of a 400-step B=32 run: a comparison of memorization)
if ls data/enwiki/enwiki_train_*.bin > /dev/null 2>&1; then
    DATA=(-i "data/enwiki/enwiki_train_*.bin" -j "data/enwiki/enwiki_val_*.bin")
else
    DATA=()
fi
mkdir -p "$OUT"
make -j"$(nproc)" train_gpt_fp4 > "$OUT/build.txt" 2>&1 || { tail -30 "$OUT/build.txt"; exit 1; }
status=0
for size in $SIZES; do
    case $size in d12) b=64 ;; d24) b=32 ;; *) b=16 ;; esac
    list=(bf16)
    for r in $RECIPES; do list+=("$r" "$r+delayed"); done
    echo "== $size, B=$b"
    MODEL=$size B=$b STEPS=20 BENCH_OUT="$OUT/bench_$size" dev/bench/bench_train.sh "${list[@]}" 2>&1 | tee "$OUT/bench_train_$size.txt" || status=1
done
for r in $LONG; do
    for a in now delayed; do
        d="$OUT/long_${r}_$a"
        ./train_gpt_fp4 "${DATA[@]}" --model d12 --batch-size "$LONG_B" --seq-len 1024 --steps "$LONG_STEPS" --warmup 40 \
            --recipe "$r" --amax "$a" \
            --val-every 100 --val-batches 8 --sample-every 0 --ckpt-every -1 --diag-every 100 --out-dir "$d" > "$d.txt" 2>&1 || {
            echo "long $r --amax $a FAILED"; tail -5 "$d.txt"; status=1; continue; }
        python3 scripts/quant_table.py "$d/log.jsonl" --mean > "$d.quant.txt" 2>&1
    done
    python3 - "$OUT/long_${r}_now/log.jsonl" "$OUT/long_${r}_delayed/log.jsonl" "$r" <<'PY'
import json, sys
def curve(p, kind, key):
    return {d["step"]: d[key] for d in map(json.loads, open(p)) if d.get("type") == kind}
a, b = curve(sys.argv[1], "train", "loss"), curve(sys.argv[2], "train", "loss")
va, vb = curve(sys.argv[1], "val", "val_loss"), curve(sys.argv[2], "val", "val_loss")
print(f"{sys.argv[3]}: step, train loss now / delayed (mean of the 20 steps up to it), val loss now / delayed")
for s in sorted(va):
    if not all(k in a and k in b for k in range(s - 19, s + 1)):
        continue
    ma = sum(a.get(k, 0) for k in range(s - 19, s + 1)) / 20
    mb = sum(b.get(k, 0) for k in range(s - 19, s + 1)) / 20
    print(f"  {s:5d}  {ma:.4f} / {mb:.4f}  ({100 * (mb - ma) / ma:+.2f}%)   val {va[s]:.4f} / {vb.get(s, float('nan')):.4f}")
PY
done
exit $status
