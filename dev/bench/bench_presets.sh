#!/usr/bin/env bash
# bench_presets.sh: every recipe preset's training step time against BF16's, measured in the same run, at
# each model size (the #12 report): dev/bench/bench_train.sh per size, B chosen so the step fits one H200.
# usage: bash dev/bench/bench_presets.sh [size ...]     (default: d12 d24 d36; B = 64, 32, 16)
# env: OUT [/tmp/bench_presets] (bench_presets_SIZE.txt there), STEPS [20], RECIPES (default: every preset
#      in llmc/fp4/recipe.h, bf16 first), GPU_ARCHS [90]; builds train_gpt_fp4 first.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/bench_presets}
mkdir -p "$OUT"
sizes=("$@"); [ ${#sizes[@]} -gt 0 ] || sizes=(d12 d24 d36)
RECIPES=${RECIPES:-"bf16 nvfp4 nvfp4-naive mxfp4 mxfp4-2d ufp4 nvfp4-4o6 quartet2 quartet2-4o6"}
make -j"$(nproc)" train_gpt_fp4 GPU_ARCHS="${GPU_ARCHS:-90}" > "$OUT/build.txt" 2>&1 ||
    { grep -E "error" "$OUT/build.txt" | head -n 20; echo "bench_presets: the build FAILED"; exit 1; }
rc=0
for m in "${sizes[@]}"; do
    case $m in d12) b=64 ;; d24) b=32 ;; d36) b=16 ;; d48) b=8 ;; *) b=${B:-16} ;; esac
    t0=$SECONDS
    echo "== $m, B=$b, T=1024, ${STEPS:-20} steps"
    MODEL=$m B=$b STEPS=${STEPS:-20} BENCH_OUT="$OUT/runs_$m" dev/bench/bench_train.sh $RECIPES > "$OUT/bench_presets_$m.txt" 2>&1 || rc=1
    cat "$OUT/bench_presets_$m.txt"
    rm -rf "$OUT/runs_$m"
    echo "($((SECONDS - t0)) s)"
done
exit $rc
