# gpu_or_skip.sh: sourced by the GPU check scripts. gpu_or_skip NAME: the number of usable GPUs in $ngpu,
# or the script ends with its summary line: skipped (exit 0) without a GPU, as the GPU test binaries do,
# failed (exit 1) with an installed but unusable driver or with REQUIRE_GPU=1 and no GPU.
# build/test_gpu_presence --count applies the binaries' rule (llmc/base/cuda_common.cuh, CUDA_VISIBLE_DEVICES
# included); without it (a script run by hand before `make test`), nvidia-smi decides.
gpu_or_skip() {
    local name=$1
    if [ -x build/test_gpu_presence ]; then
        if ! ngpu=$(build/test_gpu_presence --count); then
            echo "FAIL $name: no usable GPU, and skipping is not allowed here (see the error above)"
            echo "TESTS $name: passed=0 failed=1 skipped=0"
            exit 1
        fi
    else
        ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
    fi
    if [ "$ngpu" -eq 0 ]; then
        if [ -n "${REQUIRE_GPU:-}" ] && [ "${REQUIRE_GPU}" != 0 ]; then
            echo "FAIL $name: REQUIRE_GPU=$REQUIRE_GPU is set, but this machine has no CUDA GPU"
            echo "TESTS $name: passed=0 failed=1 skipped=0"
            exit 1
        fi
        echo "SKIP $name: no CUDA GPU on this machine"
        echo "TESTS $name: passed=0 failed=0 skipped=1"
        exit 0
    fi
}
