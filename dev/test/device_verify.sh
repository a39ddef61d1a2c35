#!/usr/bin/env bash
# device_verify.sh: one GPU-machine call that checks a restructuring or a new model family end to end, within a
# few minutes: builds the trainer and the GPU tests, compares every preset's logs and checkpoints with a reference
# run (dev/test/check_identical.sh, REF: its output from the commit before the change, same kind of GPU), runs
# test_gpt_fp4 (GPT-2 and Llama dumps) and the GPU tests (quick modes), then short Llama runs of each family's
# presets (a few steps each, tokens/s against BF16 in the same call).
# usage: OUT=dir REF=dir bash dev/test/device_verify.sh      (logs in OUT/verify.tgz, a summary on stdout)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/verify}
LOGS=/tmp/verify_logs
rm -rf "$LOGS"; mkdir -p "$OUT" "$LOGS"
trap 'tar -C /tmp -czf "$OUT/verify.tgz" verify_logs' EXIT
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
tests=(build/test_gpu_presence build/test_llama_kernels build/test_attention build/test_kernels build/test_quant_fast
       build/test_quant_gpu_cpu build/test_fp8_fold build/test_fp4_gpu build/test_matmul_fp4_gpu)
make -j16 -k train_gpt_fp4 test_gpt_fp4 "${tests[@]}" GPU_ARCHS=90 > "$LOGS/build.txt" 2>&1 ||
    { echo "build FAILED:"; grep -E "error" "$LOGS/build.txt" | head -20; }
echo "built in $((SECONDS - t0)) s"
stage() {   # stage NAME SECONDS command...: its last lines, its status and time
    local name=$1 limit=$2; shift 2
    local t1=$SECONDS
    timeout "$limit" "$@" > "$LOGS/$name.txt" 2>&1
    local rc=$?
    echo "=== $name: rc=$rc, $((SECONDS - t1)) s"
    grep -E "^(FAIL|TESTS)|DIFFERENT|error:" "$LOGS/$name.txt" | head -n 12
}
[ -n "${REF:-}" ] && stage identical 150 bash dev/test/check_identical.sh /tmp/verify_new "$REF"
grep -c " same " "$LOGS/identical.txt" 2>/dev/null | sed 's/^/identical cases: /'
stage test_gpt_fp4 200 ./test_gpt_fp4
# Llama: every preset a few steps on the tiny model (own attention: deterministic), then llama-30m's step time
for r in bf16 nvfp4 mxfp4-2d quartet2 ufp4 nvfp4-4o6; do
    LLMC_ATTENTION=own stage "llama_tiny_$r" 60 ./train_gpt_fp4 --model llama-tiny --recipe "$r" -b 8 -t 256 \
        --steps 12 --val-every 6 --sample-every 0 --diag-every 6 --ckpt-every -1 --out-dir "/tmp/lt_$r"
    grep -E "^step +12/" "$LOGS/llama_tiny_$r.txt"
done
for r in bf16 nvfp4 mxfp4; do
    stage "llama30m_$r" 90 ./train_gpt_fp4 --model llama-30m --recipe "$r" -b 32 -t 512 --steps 24 --val-every 0 \
        --sample-every 0 --ckpt-every -1 --out-dir "/tmp/l30_$r"
    grep -E "^step +24/" "$LOGS/llama30m_$r.txt"
done
for t in "${tests[@]}"; do
    args=(); case $t in *quant_fast|*quant_gpu_cpu|*fp8_fold) args=(--quick) ;; esac
    stage "${t#build/}" 60 "$t" "${args[@]}"
done
echo "total $((SECONDS - t0)) s"
