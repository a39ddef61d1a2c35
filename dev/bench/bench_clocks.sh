#!/usr/bin/env bash
# The GPU's SM clock and board power while each recipe trains: the independent check of bench_train.sh's
# time split (a recipe whose GEMMs and other kernels run faster than BF16's, "d gemm" and "d rest" below zero,
# should show a higher clock). For each recipe, nvidia-smi samples clocks.sm and power.draw every 200 ms during
# a STEPS-step d12 run (B=64, T=1024); prints the medians of the last three quarters of the samples.
# usage: dev/bench/bench_clocks.sh [recipe ...]   (default: bf16 nvfp4); env STEPS (20), MODEL (d12)
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${STEPS:-20}; MODEL=${MODEL:-d12}
recipes=("$@"); [ ${#recipes[@]} -gt 0 ] || recipes=(bf16 nvfp4)
tmp=$(mktemp -d)
for r in "${recipes[@]}"; do
    nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 200 > "$tmp/$r.csv" &
    smi=$!
    extra=(); [ "$r" = bf16 ] || extra=(--recipe "$r")
    ./train_gpt_fp4 --model "$MODEL" -b 64 -t 1024 --total-batch 65536 --steps "$STEPS" --val-every 0 \
        --sample-every 0 --ckpt-every -1 --out-dir "$tmp/run" "${extra[@]}" > /dev/null
    kill "$smi"; wait "$smi" 2>/dev/null || true
    python3 - "$r" "$tmp/$r.csv" <<'PY'
import statistics, sys
rows = [l.split(",") for l in open(sys.argv[2]) if "," in l]
v = [(float(a), float(b)) for a, b in rows[len(rows) // 4:]]
print(f"{sys.argv[1]:14s} samples {len(v):4d}  SM clock median {statistics.median(x for x, _ in v):.0f} MHz"
      f"  power median {statistics.median(y for _, y in v):.0f} W")
PY
done
rm -rf "$tmp"
