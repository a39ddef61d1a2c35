#!/usr/bin/env bash
# check_identical.sh: does a change to the trainer keep its behaviour bit for bit? Runs ./train_gpt_fp4 over a
# matrix of recipes and options at d6 (30 steps, gradient accumulation, validation, text samples, FP4
# diagnostics, held-out tasks; LLMC_ATTENTION=own, the deterministic attention), and keeps of each run's
# log.jsonl what a refactor must not change: every train, val, sample, quant, eval and event line, without the
# timings, and the MD5 of the final checkpoint (weights, optimizer state, run state: every bit). With a reference directory (the same script run on the commit before the change, on the same kind
# of GPU), compares each case line for line.
# usage: bash dev/test/check_identical.sh OUTDIR [REFDIR]
# env: STEPS [30], CASES (a subset of the case names below, space separated)
# Output: OUTDIR/<case>.jsonl, and per case "same" or "DIFFERENT" (with the first differing line) when REFDIR
# is given. Exit status 1 if a run failed or a case differs. A GPU script: skips without a GPU.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?usage: check_identical.sh OUTDIR [REFDIR]}
REF=${2:-}
STEPS=${STEPS:-30}
source scripts/gpu_or_skip.sh
gpu_or_skip check_identical
mkdir -p "$OUT"
common=(--model d6 --batch-size 8 --seq-len 256 --total-batch 4096 --steps "$STEPS" --val-every 10 --val-batches 2
        --sample-every 15 --sample-tokens 16 --diag-every 10 --ckpt-every 0)
declare -A cases=(
    [bf16]="--recipe bf16"
    [nvfp4]="--recipe nvfp4"
    [nvfp4-naive]="--recipe nvfp4-naive"
    [mxfp4]="--recipe mxfp4"
    [mxfp4-emulated]="--recipe mxfp4 --fp4-gemm emulated"
    [mxfp4-2d]="--recipe mxfp4-2d"
    [mxfp4-2d-qk]="--recipe mxfp4-2d --qk-fp8 on"
    [ufp4]="--recipe ufp4"
    [nvfp4-4o6]="--recipe nvfp4-4o6"
    [quartet2]="--recipe quartet2"
    [quartet2-4o6]="--recipe quartet2-4o6"
    [nvfp4-delayed]="--recipe nvfp4 --amax delayed"
    [nvfp4-tail]="--recipe nvfp4 --bf16-forward-from 0.3"
    [nvfp4-fp32-zero]="--recipe nvfp4 --master-weights fp32 --zero on"
    [nvfp4-eval]="--recipe nvfp4 --eval-every 15 --eval-items 40"
    [slots]="--recipe nvfp4 --fprop-x 'int4,seed=3' --dgrad-dy 'mxfp4-2d,sr' --fp4-wgrad off --bf16-first-layers 1"
    # the preset of docs/FULLSTACK_FP4.md section 5: nvfp4's linears, FP4 attention (dS SR), NVFP4 AdamW state,
    # LoRA-SVD rank 16 (new with issue #50 item 5: a reference directory from before it has no such case)
    [fullstack]="--recipe fullstack"
)
names=${CASES:-$(printf '%s\n' "${!cases[@]}" | LC_ALL=C sort)}
rc=0
for name in $names; do
    eval "extra=(${cases[$name]})"
    rm -rf "$OUT/run_$name"
    if ! LLMC_ATTENTION=own ./train_gpt_fp4 "${common[@]}" "${extra[@]}" --out-dir "$OUT/run_$name" \
            > "$OUT/$name.txt" 2>&1; then
        echo "check_identical: $name FAILED:"; tail -n 5 "$OUT/$name.txt"; rc=1; continue
    fi
    python3 - "$OUT/run_$name/log.jsonl" "$OUT/$name.jsonl" <<'PY'
import json, sys
drop = {"ms", "compute_ms", "quant_ms", "gemm_ms", "comm_ms", "tok_per_s", "mfu", "seconds", "gpu_memory_used_gib"}
keep = {"train", "val", "sample", "quant", "eval", "event"}
with open(sys.argv[1]) as f, open(sys.argv[2], "w") as out:
    for line in f:
        d = json.loads(line)
        if d.get("type") not in keep:
            continue
        out.write(json.dumps({k: v for k, v in d.items() if k not in drop}, sort_keys=True) + "\n")
PY
    for f in "$OUT/run_$name"/ckpt_*.bin; do
        echo "{\"type\": \"checkpoint\", \"file\": \"${f##*/}\", \"md5\": \"$(md5sum < "$f" | cut -c1-32)\"}" >> "$OUT/$name.jsonl"
    done
    rm -rf "$OUT/run_$name"
    if [ -n "$REF" ]; then
        if [ ! -f "$REF/$name.jsonl" ]; then
            echo "check_identical: $name: no reference in $REF"
        elif cmp -s "$REF/$name.jsonl" "$OUT/$name.jsonl"; then
            echo "check_identical: $name same ($(wc -l < "$OUT/$name.jsonl") lines)"
        else
            echo "check_identical: $name DIFFERENT; first difference:"
            diff "$REF/$name.jsonl" "$OUT/$name.jsonl" | head -n 4
            rc=1
        fi
    else
        echo "check_identical: $name written ($(wc -l < "$OUT/$name.jsonl") lines)"
    fi
done
exit $rc
