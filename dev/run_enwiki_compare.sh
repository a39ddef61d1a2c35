#!/usr/bin/env bash
# The BF16-vs-FP4 loss comparison of results/: d12 on English Wikipedia, same seed, data order and
# schedule for every recipe. On the GPU machine the enwiki .xz files travel in an ignored folder
# (.carry/enwiki, named in the device tool's carry) and are tokenized there.
# usage: bash dev/run_enwiki_compare.sh [recipes] [steps]     (defaults: "bf16 nvfp4 nvfp4-naive", 763)
# 763 steps x 65536 tokens = 50M tokens per run. Results: $OUT (or results/enwiki_d12): loss.png,
# gaps.md, each run's log.jsonl, and the FP4 diagnostics tables.
set -euo pipefail
cd "$(dirname "$0")/.."
RECIPES=${1:-"bf16 nvfp4 nvfp4-naive"}
STEPS=${2:-763}
DEST=${OUT:-results/enwiki_d12}
ENWIKI=${ENWIKI_DIR:-.carry/enwiki}
if ! ls data/enwiki/enwiki_train_*.bin >/dev/null 2>&1; then
    SHARD_SIZE=10000000 VAL_TOKENS=1000000 bash dev/data/enwiki.sh "$ENWIKI"
fi
scripts/compare_recipes.sh /tmp/enwiki_cmp "$RECIPES" --model d12 --batch-size 64 --seq-len 1024 \
    --total-batch 65536 --steps "$STEPS" --lr 6e-4 --warmup 50 --schedule cosine --final-lr-frac 0.1 \
    --val-every 100 --val-batches 16 --diag-every 100 --seed 1337 \
    -i 'data/enwiki/enwiki_train_*.bin' -j 'data/enwiki/enwiki_val_*.bin'
mkdir -p "$DEST"
cp /tmp/enwiki_cmp/loss.png /tmp/enwiki_cmp/gaps.md "$DEST/"
for r in $RECIPES; do
    cp "/tmp/enwiki_cmp/$r/log.jsonl" "$DEST/log_$r.jsonl"
    if [ "$r" != bf16 ]; then python3 scripts/quant_table.py "/tmp/enwiki_cmp/$r/log.jsonl" --mean > "$DEST/quant_$r.txt"; fi
done
cat "$DEST/gaps.md"
