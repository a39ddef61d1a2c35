#!/usr/bin/env bash
# Trains the BF16 baseline and FP4 recipes with the same model, data order, seed and schedule, then
# plots train/val loss against tokens and prints the table of loss gaps at equal tokens.
# usage: scripts/compare_recipes.sh OUT_DIR "recipe1 recipe2 ..." [trainer flags...]
#   e.g. scripts/compare_recipes.sh runs/cmp "bf16 nvfp4 nvfp4-naive" --model d12 --steps 800 \
#            --train-data 'data/enwiki/enwiki_train_*.bin' --val-data 'data/enwiki/enwiki_val_*.bin'
# Each run writes OUT_DIR/<recipe>/log.jsonl; OUT_DIR/loss.png and OUT_DIR/gaps.md are the results.
# Multi-GPU: set LAUNCH="mpirun -np 8 --allow-run-as-root" to start each run under it.
set -euo pipefail
[ $# -ge 2 ] || { sed -n 2,9p "$0"; exit 2; }
out=$1; recipes=$2; shift 2
mkdir -p "$out"
logs=()
for r in $recipes; do
    echo "=== $r"
    ${LAUNCH:-} ./train_gpt_fp4 --recipe "$r" --out-dir "$out/$r" --sample-every 0 "$@" | tee "$out/$r.txt" | \
        grep -E "^step .*(val loss|/)" | awk 'NR % 50 == 1' || true
    logs+=("$r=$out/$r/log.jsonl")
done
python3 scripts/plot_loss.py "${logs[@]}" --out "$out/loss.png" --table "$out/gaps.md"
