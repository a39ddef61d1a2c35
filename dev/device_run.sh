#!/usr/bin/env bash
# One GPU-machine session in one command: build, then the stages named in STAGES (default: all).
# Full logs go to $OUT/logs.tgz (the device tool brings $OUT back); a summary goes to stdout.
#   STAGES="tests train resume fp4 ranks bench torch" bash dev/device_run.sh
set -uo pipefail
OUT=${OUT:-/tmp/device_out}
LOGS=/tmp/device_logs
rm -rf "$LOGS"; mkdir -p "$OUT" "$LOGS"
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv > "$LOGS/gpu.txt" 2>&1
cat "$LOGS/gpu.txt"
pack() { tar -C /tmp -czf "$OUT/logs.tgz" device_logs; }
trap pack EXIT
# -k: one broken target does not stop the stages that do not need it
if make -k -j16 GPU_ARCHS=${GPU_ARCHS:-90} all > "$LOGS/build.log" 2>&1; then
    echo "build ok"
else
    echo "build FAILED for some targets:"; grep -E "error|Error" "$LOGS/build.log" | head -30
fi
stage() {
    local name=$1; shift
    local t0=$SECONDS
    ( "$@" ) > "$LOGS/$name.log" 2>&1
    local rc=$?
    echo "=== $name (rc=$rc, $((SECONDS - t0)) s)"
    grep -E "${GREP:-^(FAIL|SKIP|TESTS|error)|passed|check_|tok/s|tokens/s|TFLOP|GB/s|%|recipe|ms}" "$LOGS/$name.log" | tail -n "${TAILN:-25}"
}
for s in ${STAGES:-tests train resume fp4 ranks bench torch}; do
    case $s in
    tests)  stage tests make test
            stage distributed make check-distributed ;;
    train)  stage train ./train_gpt_fp4 --steps 40 --out-dir /tmp/run_default --sample-every 20 ;;
    resume) stage resume scripts/check_resume.sh
            LLMC_ATTENTION=own stage resume_own_attention scripts/check_resume.sh ;;
    bench)  make -j16 GPU_ARCHS=${GPU_ARCHS:-90} build/bench_attention build/bench_kernels build/bench_quant > /dev/null 2>&1
            stage bench_train dev/bench/bench_train.sh bf16 nvfp4 nvfp4-naive mxfp4-2d ufp4
            stage bench_attention build/bench_attention
            stage bench_kernels build/bench_kernels
            stage bench_quant bash dev/bench/bench_quant.sh ;;
    fp4)    stage train_nvfp4 ./train_gpt_fp4 --steps 40 --out-dir /tmp/run_nvfp4 --recipe nvfp4 --sample-every 0 --diag-every 20
            TAILN=40 GREP=. stage quant_table python3 scripts/quant_table.py /tmp/run_nvfp4/log.jsonl
            stage resume_nvfp4 scripts/check_resume.sh --recipe nvfp4 ;;
    ranks)  GREP="check_multigpu|error" stage one_rank_bf16 scripts/check_multigpu.sh 1 --tol 0
            GREP="check_multigpu|error" stage one_rank_nvfp4 scripts/check_multigpu.sh 1 --tol 0 --recipe nvfp4 ;;
    torch)  stage torch python3 dev/bench/bench_torch.py ;;
    quantfast) make -j16 GPU_ARCHS=${GPU_ARCHS:-90} build/test_quant_fast build/bench_quant_fast > /dev/null 2>&1
            stage test_quant_fast build/test_quant_fast
            TAILN=40 GREP=. stage bench_quant_fast build/bench_quant_fast ;;
    compare) TAILN=40 GREP=. stage compare bash dev/run_enwiki_compare.sh ;;
    *)      echo "unknown stage '$s'" ;;
    esac
done
