#!/usr/bin/env bash
# Resuming continues bit for bit: trains N steps in one go, and N/2 + N/2 with a checkpoint and a
# resume in between, then compares the per-step losses of the two logs exactly.
# usage: scripts/check_resume.sh [extra trainer flags...]   (needs a GPU and ./train_gpt_fp4)
# Ends with the test summary line scripts/run_tests.sh reads; skips (exit 0) without a GPU, as the GPU
# test binaries do: an installed but unusable driver, or REQUIRE_GPU=1 without a GPU, is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
# build/test_gpu_presence --count applies the binaries' rule (llmc/cuda_common.cuh); without it
# (the script run by hand before `make test`), nvidia-smi decides.
if [ -x build/test_gpu_presence ]; then
    if ! ngpu=$(build/test_gpu_presence --count); then
        echo "FAIL check_resume: no usable GPU, and skipping is not allowed here (see the error above)"
        echo "TESTS check_resume: passed=0 failed=1 skipped=0"
        exit 1
    fi
else
    ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
fi
if [ "$ngpu" -eq 0 ]; then
    if [ -n "${REQUIRE_GPU:-}" ] && [ "${REQUIRE_GPU}" != 0 ]; then
        echo "FAIL check_resume: REQUIRE_GPU=$REQUIRE_GPU is set, but this machine has no CUDA GPU"
        echo "TESTS check_resume: passed=0 failed=1 skipped=0"
        exit 1
    fi
    echo "SKIP check_resume: no CUDA GPU on this machine"
    echo "TESTS check_resume: passed=0 failed=0 skipped=1"
    exit 0
fi
STEPS=${STEPS:-12}
HALF=$((STEPS / 2))
OUT=${OUT_DIR:-/tmp/check_resume}
rm -rf "$OUT"; mkdir -p "$OUT"
common=(--model d6 --batch-size 4 --seq-len 256 --steps "$STEPS" --val-every 0 --sample-every 0 --seed 7 "$@")
./train_gpt_fp4 "${common[@]}" --out-dir "$OUT/full" > "$OUT/full.txt"
./train_gpt_fp4 "${common[@]}" --out-dir "$OUT/split" --ckpt-every "$HALF" > "$OUT/split1.txt"
# drop the second half of the split run's log and checkpoints, then resume from the middle
python3 - "$OUT/split/log.jsonl" "$HALF" <<'PY'
import json, sys
path, half = sys.argv[1], int(sys.argv[2])
lines = [l for l in open(path) if not (json.loads(l).get("type") == "train" and json.loads(l)["step"] > half)]
open(path, "w").writelines(lines)
PY
rm -f "$OUT/split/ckpt_$(printf %08d "$STEPS").bin"
./train_gpt_fp4 "${common[@]}" --out-dir "$OUT/split" --resume latest > "$OUT/split2.txt"
python3 - "$OUT/full/log.jsonl" "$OUT/split/log.jsonl" <<'PY'
import json, sys
def losses(p):
    return {d["step"]: d["loss"] for d in map(json.loads, open(p)) if d.get("type") == "train"}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert sorted(a) == sorted(b), f"steps differ: {sorted(a)} vs {sorted(b)}"
bad = [(s, a[s], b[s]) for s in sorted(a) if a[s] != b[s]]
for s in sorted(a):
    print(f"step {s:3d}  uninterrupted {a[s]:.6f}  resumed {b[s]:.6f}{'  DIFFERENT' if a[s] != b[s] else ''}")
if bad:
    print(f"FAIL check_resume: {len(bad)} of {len(a)} steps differ after resuming")
    print(f"TESTS check_resume: passed={len(a) - len(bad)} failed={len(bad)} skipped=0")
    sys.exit(1)
print(f"check_resume: OK: all {len(a)} losses identical after resuming at step {len(a) // 2}")
print(f"TESTS check_resume: passed={len(a)} failed=0 skipped=0")
PY
