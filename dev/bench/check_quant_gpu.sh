#!/usr/bin/env bash
# check_quant_gpu.sh: after a change to the quantizer kernels, on the GPU machine in one call: build, check
# them bit for bit (against the reference kernels, the CPU twin and, through the trainer's GEMM operands and
# the PyTorch dumps, test_gpt_fp4), then time them (bench_quant_fast, against the copy bandwidth measured in
# the same run) and a few training steps of each recipe against BF16 (bench_train.sh).
# usage: bash dev/bench/check_quant_gpu.sh [recipe ...]      (default: bf16 nvfp4 quartet2 quartet2-4o6)
# env: OUT (logs there: build.txt, tests.txt, bench_quant_fast.txt, bench_fp8_fold.txt, bench_train.txt; default
#      /tmp/check_quant),
#      GPU_ARCHS [90], STEPS [20], QUICK [0]: 1 runs the quick subsets of the two quantizer tests,
#      CHECK_ENV [empty]: VAR=value settings the checks run with (an experimental kernel's switch);
#      COMPARE_ENV [empty]: VAR=value settings each bench runs with a second time, after a run without them
#      (bench_quant_fast_compare.txt, bench_train_compare.txt), each against its own run's copy bandwidth
#      and BF16 step: COMPARE_ENV=LLMC_QF_PATCH=1 times the patch kernel against qf_row2_kernel; an
#      experimental switch X=1 is checked and timed with CHECK_ENV=X=1 COMPARE_ENV=X=1.
# Exit status: 1 if the build or any check failed (the benches still run after a failed check, to see it).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/check_quant}
mkdir -p "$OUT"
recipes=("$@"); [ ${#recipes[@]} -gt 0 ] || recipes=(bf16 nvfp4 quartet2 quartet2-4o6)
q=(); [ "${QUICK:-0}" = 1 ] && q=(--quick)
t0=$SECONDS
make -j"$(nproc)" train_gpt_fp4 test_gpt_fp4 build/test_quant_fast build/test_quant_gpu_cpu build/test_fp8_fold \
    build/bench_quant_fast build/bench_fp8_fold \
    GPU_ARCHS="${GPU_ARCHS:-90}" > "$OUT/build.txt" 2>&1 || { grep -E "error" "$OUT/build.txt" | head -n 20; echo "check_quant_gpu: the build FAILED"; exit 1; }
echo "check_quant_gpu: built in $((SECONDS - t0)) s"
rc=0
# the last two: the patch kernels and two-pass folds (LLMC_QF_PATCH=1, kept for A/B timing) against the references too
for t in "build/test_quant_fast ${q[*]}" "build/test_quant_gpu_cpu ${q[*]}" "build/test_fp8_fold ${q[*]}" "./test_gpt_fp4" \
         "LLMC_QF_PATCH=1 build/test_quant_fast ${q[*]}" "LLMC_QF_PATCH=1 build/test_fp8_fold ${q[*]}"; do
    t1=$SECONDS
    env ${CHECK_ENV:-} $t >> "$OUT/tests.txt" 2>&1 || rc=1
    echo "check_quant_gpu: ${CHECK_ENV:+$CHECK_ENV }$t: $(grep '^TESTS' "$OUT/tests.txt" | tail -n 1) ($((SECONDS - t1)) s)"
done
grep -E "^FAIL" "$OUT/tests.txt" | head -n 20
build/bench_quant_fast > "$OUT/bench_quant_fast.txt" 2>&1 || rc=1
cat "$OUT/bench_quant_fast.txt"
build/bench_fp8_fold > "$OUT/bench_fp8_fold.txt" 2>&1 || rc=1
cat "$OUT/bench_fp8_fold.txt"
STEPS=${STEPS:-20} dev/bench/bench_train.sh "${recipes[@]}" > "$OUT/bench_train.txt" 2>&1 || rc=1
cat "$OUT/bench_train.txt"
if [ -n "${COMPARE_ENV:-}" ]; then
    echo "check_quant_gpu: again with $COMPARE_ENV"
    env $COMPARE_ENV build/bench_quant_fast > "$OUT/bench_quant_fast_compare.txt" 2>&1 || rc=1
    cat "$OUT/bench_quant_fast_compare.txt"
    env $COMPARE_ENV STEPS=${STEPS:-20} dev/bench/bench_train.sh "${recipes[@]}" > "$OUT/bench_train_compare.txt" 2>&1 || rc=1
    cat "$OUT/bench_train_compare.txt"
fi
echo "check_quant_gpu: $([ $rc = 0 ] && echo "all passed" || echo "FAILED (see $OUT)") in $((SECONDS - t0)) s"
exit $rc
