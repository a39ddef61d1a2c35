#!/usr/bin/env bash
# check_muon.sh: --optimizer muon on one GPU, in about a minute and a half on an H100 (docs/FULLSTACK_FP4.md
# section 3):
#   1. build/test_muon_gpu: the GPU path against its CPU twin (llmc/base/muon_ref.h), the singular-value band, zero
#      gradients, repeatability;
#   2. d6 on tinyshakespeare, 50 steps with Muon: the mean loss of the last 5 steps must be at least 1.0 below that of
#      the first 5 (with COMPARE_ADAMW=1 an AdamW run of the same shape is printed beside it, for comparison only);
#   3. scripts/check_resume.sh --optimizer muon: resuming continues bit for bit; then the same with --zero on
#      --master-weights fp32 (ZeRO-1's Muon state, owned by the one rank, and its FP32 masters in the checkpoint).
# usage: scripts/check_muon.sh   (needs ./train_gpt_fp4 and build/test_muon_gpu, built with `make train_gpt_fp4
#        build/test_muon_gpu`); env: CHECK_DIR [/tmp/check_muon]
# Ends with the test summary line scripts/run_tests.sh reads; skips (exit 0) without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_or_skip.sh
gpu_or_skip check_muon
OUT=${CHECK_DIR:-/tmp/check_muon}
rm -rf "$OUT"; mkdir -p "$OUT"
passed=0; failed=0

if ./build/test_muon_gpu > "$OUT/test_muon_gpu.txt" 2>&1; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
grep -E "^(FAIL|TESTS)|relative L2|singular" "$OUT/test_muon_gpu.txt" || true

common=(--model d6 --batch-size 8 --seq-len 256 --steps 50 --val-every 0 --sample-every 0 --ckpt-every -1 --seed 7)
opts=(muon)
[ "${COMPARE_ADAMW:-0}" != 0 ] && opts+=(adamw)
for opt in "${opts[@]}"; do
    ./train_gpt_fp4 "${common[@]}" --optimizer "$opt" --out-dir "$OUT/$opt" > "$OUT/$opt.txt" 2>&1 ||
        { echo "FAIL check_muon: the $opt run failed (see $OUT/$opt.txt)"; tail -n 5 "$OUT/$opt.txt"; }
done
grep -E "^optimizer:" "$OUT/muon.txt" || true
if python3 - "$OUT/muon/log.jsonl" "$OUT/adamw/log.jsonl" <<'PY'
import json, sys
def losses(p):
    try:
        return [d["loss"] for d in map(json.loads, open(p)) if d.get("type") == "train"]
    except OSError:
        return []
muon, adamw = losses(sys.argv[1]), losses(sys.argv[2])
if len(muon) < 10:
    print(f"FAIL check_muon: the Muon run logged {len(muon)} steps"); sys.exit(1)
first, last = sum(muon[:5]) / 5, sum(muon[-5:]) / 5
print("muon  losses every 5 steps: " + " ".join(f"{x:.3f}" for x in muon[::5]) + f" ... {muon[-1]:.3f}")
if adamw:
    print("adamw losses every 5 steps: " + " ".join(f"{x:.3f}" for x in adamw[::5]) + f" ... {adamw[-1]:.3f}")
ok = last < first - 1.0
print(("ok" if ok else "FAIL check_muon:") + f" Muon's mean loss over the first 5 steps {first:.3f}, the last 5 {last:.3f}")
sys.exit(0 if ok else 1)
PY
then passed=$((passed + 1)); else failed=$((failed + 1)); fi

resume_check() {   # name, then the trainer flags
    local name=$1; shift
    echo "resume check: $*"
    if CHECK_DIR="$OUT/$name" scripts/check_resume.sh "$@" > "$OUT/$name.txt" 2>&1; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
    fi
    grep -E "^(check_resume: OK|FAIL|SKIP|TESTS)" "$OUT/$name.txt" || tail -n 5 "$OUT/$name.txt"
}
resume_check resume --optimizer muon
resume_check resume_zero --optimizer muon --zero on --master-weights fp32
echo "TESTS check_muon: passed=$passed failed=$failed skipped=0"
[ "$failed" = 0 ]
