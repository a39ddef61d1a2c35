#!/usr/bin/env bash
# check_multigpu.sh: data-parallel training must follow the same loss curve as one process that
# accumulates gradients over the same total batch.
#
#   scripts/check_multigpu.sh N [--tol X] [extra trainer flags...]
#
# Trains STEPS steps of MODEL twice with the same seed, data order (--shuffle off) and total batch
# N*B*T tokens: once as one process with N gradient-accumulation micro-steps, once as N processes
# under mpirun with one micro-step each. Then compares the "loss" of the {"type":"train"} lines of
# the two out_dir/log.jsonl step by step, prints the largest absolute difference and fails when it
# exceeds --tol (default 1e-2). Bitwise equality is not expected: N ranks sum their gradients in a
# different order than N accumulation steps do (NCCL's ring/tree order vs. sequential adds into a
# BF16/FP32 buffer), and those rounding differences grow over the steps.
# Extra flags go to both runs unchanged (e.g. --recipe nvfp4, --zero off).
# Environment: MODEL (d6), B (4), T (256), STEPS (20), SEED (1337), CHECK_OUT (out/check_multigpu),
#              TRAINER (./train_gpt_fp4), MPIRUN (mpirun).
# Exit status: 0 same curve, 1 different curve (or a run failed), 2 cannot run here.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -lt 1 ] || ! [[ "$1" =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: $0 N [--tol X] [extra trainer flags...]   (N = number of GPUs/processes)" >&2
    exit 2
fi
N=$1; shift
TOL=1e-2
EXTRA=()
while [ $# -gt 0 ]; do
    case "$1" in
        --tol) [ $# -ge 2 ] || { echo "--tol needs a value" >&2; exit 2; }; TOL=$2; shift 2 ;;
        --tol=*) TOL=${1#--tol=}; shift ;;
        *) EXTRA+=("$1"); shift ;;
    esac
done

MODEL=${MODEL:-d6}; B=${B:-4}; T=${T:-256}; STEPS=${STEPS:-20}; SEED=${SEED:-1337}
OUT=${CHECK_OUT:-out/check_multigpu}
TRAINER=${TRAINER:-./train_gpt_fp4}
MPIRUN=${MPIRUN:-mpirun}

NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "$NGPU" -lt "$N" ]; then
    echo "check_multigpu: needs $N GPUs, this machine shows $NGPU (nvidia-smi -L); NCCL cannot put two ranks on one GPU" >&2
    exit 2
fi
if ! command -v "$MPIRUN" >/dev/null 2>&1; then
    echo "check_multigpu: '$MPIRUN' not found: install Open MPI (apt-get install openmpi-bin libopenmpi-dev) and rebuild" >&2
    exit 2
fi
command -v python3 >/dev/null 2>&1 || { echo "check_multigpu: python3 is needed to compare the logs" >&2; exit 2; }
if [ "$TRAINER" = ./train_gpt_fp4 ]; then make -s train_gpt_fp4; fi

TOTAL=$((N * B * T))
COMMON=(--model "$MODEL" --batch-size "$B" --seq-len "$T" --total-batch "$TOTAL" --steps "$STEPS"
        --seed "$SEED" --shuffle off --val-every 0 --sample-every 0)
SINGLE_DIR="$OUT/single_accum$N"
MULTI_DIR="$OUT/ranks$N"
rm -rf "$SINGLE_DIR" "$MULTI_DIR"

echo "== 1 process, $N accumulation steps of B=$B T=$T (total batch $TOTAL tokens) -> $SINGLE_DIR"
"$TRAINER" "${COMMON[@]}" --out-dir "$SINGLE_DIR" ${EXTRA[@]+"${EXTRA[@]}"} || { echo "check_multigpu: the single-process run failed" >&2; exit 1; }

echo "== $N processes (mpirun -np $N), 1 micro-step each -> $MULTI_DIR"
# --bind-to none: Open MPI would otherwise pin each rank to one core
"$MPIRUN" --allow-run-as-root --bind-to none -np "$N" \
    "$TRAINER" "${COMMON[@]}" --out-dir "$MULTI_DIR" ${EXTRA[@]+"${EXTRA[@]}"} || { echo "check_multigpu: the $N-process run failed" >&2; exit 1; }

python3 - "$SINGLE_DIR/log.jsonl" "$MULTI_DIR/log.jsonl" "$TOL" "$STEPS" <<'EOF'
import json, math, sys
single_path, multi_path, tol, steps = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])

def losses(path):
    out = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            rec = json.loads(line)
            if rec.get("type") == "train":
                out[rec["step"]] = float(rec["loss"])
    return out

a, b = losses(single_path), losses(multi_path)
if not a or sorted(a) != sorted(b):
    print(f"check_multigpu: FAIL: the logs have different train steps: {len(a)} in {single_path}, {len(b)} in {multi_path}")
    sys.exit(1)
if len(a) != steps:
    print(f"check_multigpu: FAIL: expected {steps} train lines, found {len(a)}")
    sys.exit(1)
worst, worst_step = 0.0, None
print(f"{'step':>5} {'1 process':>12} {'N ranks':>12} {'|diff|':>10}")
for s in sorted(a):
    d = abs(a[s] - b[s]) if math.isfinite(a[s]) and math.isfinite(b[s]) else math.inf
    print(f"{s:5d} {a[s]:12.6f} {b[s]:12.6f} {d:10.2e}")
    if d > worst or worst_step is None:
        worst, worst_step = d, s
verdict = "PASS" if worst <= tol else "FAIL"
print(f"check_multigpu: {verdict}: largest |loss difference| {worst:.3e} at step {worst_step} (tolerance {tol:g})")
sys.exit(0 if worst <= tol else 1)
EOF
