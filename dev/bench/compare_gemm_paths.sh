#!/usr/bin/env bash
# The FP8 path's loss curve against exact emulation's, and against seed noise: one recipe trained three
# times, --fp4-gemm fp8 (seed 1), emulated (seed 1) and emulated (seed 2), then the mean |difference| of the
# training loss over the last 100 steps (FP8 vs emulated, same seed; emulated seed 1 vs seed 2), the
# validation losses side by side, and the FP8 run's blocks below the exact window per diagnostics step.
# usage: dev/bench/compare_gemm_paths.sh [recipe]        (default mxfp4-2d; needs a GPU with FP8 tensor cores)
# env: STEPS (440), MODEL (d12), B (32), T (1024), DATA (tinyshakespeare train shard), OUT (/tmp/compare_gemm_paths)
# results/README.md ("The FP8 path") was made with the defaults (logs: results/fp8_path/*.jsonl).
set -euo pipefail
RECIPE=${1:-mxfp4-2d}; STEPS=${STEPS:-440}; MODEL=${MODEL:-d12}; B=${B:-32}; T=${T:-1024}
DATA=${DATA:-data/tinyshakespeare/tiny_shakespeare_train.bin}
OUT=${OUT:-/tmp/compare_gemm_paths}
mkdir -p "$OUT"
run() {   # name, then extra flags
    local name=$1; shift
    ./train_gpt_fp4 --model "$MODEL" -b "$B" -t "$T" --total-batch $((B * T)) --steps "$STEPS" --recipe "$RECIPE" \
        --train-data "$DATA" --val-every $((STEPS / 4)) --val-batches 8 --sample-every 0 --ckpt-every 0 \
        --diag-every $((STEPS / 4)) -o "$OUT/$name" "$@" > "$OUT/$name.txt"
}
run fp8_s1 --fp4-gemm fp8 --seed 1
run emu_s1 --fp4-gemm emulated --seed 1
run emu_s2 --fp4-gemm emulated --seed 2
python3 - "$OUT" <<'PY'
import collections, json, sys
out = sys.argv[1]
def load(name):
    train, val, below = {}, {}, collections.Counter()
    for line in open(f"{out}/{name}/log.jsonl"):
        d = json.loads(line)
        if d.get("type") == "train": train[d["step"]] = d["loss"]
        elif d.get("type") == "val": val[d["step"]] = d["val_loss"]
        elif d.get("type") == "quant":
            for k, v in d.items():
                if k.endswith("_fp8_below"): below[(d["step"], k[:-len("_fp8_below")])] += v
    return train, val, below
fp8, emu, emu2 = load("fp8_s1"), load("emu_s1"), load("emu_s2")
def gap(a, b):
    last = sorted(a[0])[-100:]
    return sum(abs(a[0][k] - b[0][k]) for k in last) / len(last)
print(f"mean |train loss difference| over the last 100 steps: FP8 vs emulated (seed 1) {gap(fp8, emu):.4f}; "
      f"emulated seed 1 vs seed 2 {gap(emu, emu2):.4f}")
for s in sorted(fp8[1]):
    print(f"val step {s}: FP8 {fp8[1][s]:.4f}  emulated {emu[1].get(s, float('nan')):.4f}  "
          f"emulated seed 2 {emu2[1].get(s, float('nan')):.4f}")
for (step, slot), n in sorted(fp8[2].items()):
    if n: print(f"blocks below the exact window, step {step}, {slot}: {n}")
PY
