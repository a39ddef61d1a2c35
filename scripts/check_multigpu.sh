#!/usr/bin/env bash
# check_multigpu.sh: data-parallel training must follow the same loss curve as one process that
# accumulates gradients over the same total batch.
#
#   scripts/check_multigpu.sh N [--tol X] [--zero-both] [extra trainer flags...]
#
# Trains STEPS steps of MODEL twice with the same seed, data order (--shuffle off) and total batch
# N*B*T tokens: once as one process with N gradient-accumulation micro-steps, once as N processes
# under mpirun with one micro-step each. Then compares the "loss" of the {"type":"train"} lines of
# the two out_dir/log.jsonl step by step, prints the largest absolute difference and fails when it
# exceeds --tol (default 1e-2). Bitwise equality is not expected: N ranks sum their gradients in a
# different order than N accumulation steps do (NCCL's ring/tree order vs. sequential adds into a
# BF16/FP32 buffer), and those rounding differences grow over the steps.
# Extra flags go to both runs unchanged (e.g. --recipe nvfp4, --zero off).
# --zero-both: the N-process run twice, with --zero on and --zero off (ZeRO-1's reduction into the
# shards against the all-reduce), each compared with the 1-process run and the two with each other.
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
ZERO_BOTH=0
EXTRA=()
while [ $# -gt 0 ]; do
    case "$1" in
        --tol) [ $# -ge 2 ] || { echo "--tol needs a value" >&2; exit 2; }; TOL=$2; shift 2 ;;
        --tol=*) TOL=${1#--tol=}; shift ;;
        --zero-both) ZERO_BOTH=1; shift ;;
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
multi_dir() { if [ "$1" = default ]; then echo "$OUT/ranks$N"; else echo "$OUT/ranks${N}_$1"; fi; }
if [ "$ZERO_BOTH" = 1 ]; then
    for a in ${EXTRA[@]+"${EXTRA[@]}"}; do
        case "$a" in --zero|--zero=*) echo "check_multigpu: --zero-both sets --zero itself; drop $a" >&2; exit 2 ;; esac
    done
    VARIANTS=(zero_on zero_off)
else
    VARIANTS=(default)
fi
rm -rf "$SINGLE_DIR"
for v in "${VARIANTS[@]}"; do rm -rf "$(multi_dir "$v")"; done

echo "== 1 process, $N accumulation steps of B=$B T=$T (total batch $TOTAL tokens) -> $SINGLE_DIR"
"$TRAINER" "${COMMON[@]}" --out-dir "$SINGLE_DIR" ${EXTRA[@]+"${EXTRA[@]}"} || { echo "check_multigpu: the single-process run failed" >&2; exit 1; }

for v in "${VARIANTS[@]}"; do
    dir=$(multi_dir "$v")
    flags=()
    case "$v" in zero_on) flags=(--zero on) ;; zero_off) flags=(--zero off) ;; esac
    echo "== $N processes (mpirun -np $N), 1 micro-step each ${flags[*]+${flags[*]}} -> $dir"
    # --bind-to none: Open MPI would otherwise pin each rank to one core
    "$MPIRUN" --allow-run-as-root --bind-to none -np "$N" \
        "$TRAINER" "${COMMON[@]}" --out-dir "$dir" ${EXTRA[@]+"${EXTRA[@]}"} ${flags[@]+"${flags[@]}"} \
        || { echo "check_multigpu: the $N-process run ($v) failed" >&2; exit 1; }
done

# pairs of logs to compare: each N-process run against the 1-process run; with --zero-both also on
# against off
PAIRS=()
for v in "${VARIANTS[@]}"; do PAIRS+=("$SINGLE_DIR/log.jsonl" "$(multi_dir "$v")/log.jsonl"); done
if [ "$ZERO_BOTH" = 1 ]; then PAIRS+=("$(multi_dir zero_on)/log.jsonl" "$(multi_dir zero_off)/log.jsonl"); fi

python3 - "$TOL" "$STEPS" "${PAIRS[@]}" <<'EOF'
import json, math, sys
tol, steps, paths = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]

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

def compare(path_a, path_b):
    """Prints the step-by-step comparison; True when the two curves agree within tol."""
    a, b = losses(path_a), losses(path_b)
    print(f"== {path_a}  vs  {path_b}")
    if not a or sorted(a) != sorted(b):
        print(f"check_multigpu: FAIL: the logs have different train steps: {len(a)} in {path_a}, {len(b)} in {path_b}")
        return False
    if len(a) != steps:
        print(f"check_multigpu: FAIL: expected {steps} train lines, found {len(a)}")
        return False
    worst, worst_step = 0.0, None
    print(f"{'step':>5} {'first':>12} {'second':>12} {'|diff|':>10}")
    for s in sorted(a):
        d = abs(a[s] - b[s]) if math.isfinite(a[s]) and math.isfinite(b[s]) else math.inf
        print(f"{s:5d} {a[s]:12.6f} {b[s]:12.6f} {d:10.2e}")
        if d > worst or worst_step is None:
            worst, worst_step = d, s
    verdict = "PASS" if worst <= tol else "FAIL"
    print(f"check_multigpu: {verdict}: largest |loss difference| {worst:.3e} at step {worst_step} (tolerance {tol:g})")
    return worst <= tol

ok = True
for i in range(0, len(paths), 2):
    ok = compare(paths[i], paths[i + 1]) and ok
sys.exit(0 if ok else 1)
EOF
