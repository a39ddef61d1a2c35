// cuda_common.cuh: CUDA error checks and the program-wide BF16 type.
// defines: floatX (= __nv_bfloat16), cuda_check(), cuda_check_last(), cuda_malloc(), device_count_or_zero(),
//          cuda_driver_installed()
#pragma once
#include <dlfcn.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include "llmc/base/common.h"

typedef __nv_bfloat16 floatX;   // parameters, activations and GEMM operands

static inline void cuda_check_(cudaError_t e, const char* file, int line) {
    if (e == cudaErrorMemoryAllocation)
        fail("out of GPU memory at %s:%d; lower --batch-size or use a smaller model", file, line);
    if (e != cudaSuccess) fail("CUDA error at %s:%d: %s", file, line, cudaGetErrorString(e));
}
#define cuda_check(e) cuda_check_((e), __FILE__, __LINE__)
#define cuda_check_last() cuda_check_(cudaGetLastError(), __FILE__, __LINE__)

// The trainer's device allocations. LLMC_POISON=1 in the environment fills each new buffer with 0xFF
// bytes (NaN in BF16 and FP32) instead of leaving whatever the allocator had: a kernel that reads memory
// nothing wrote then turns the loss into NaN or changes it, where a sanitizer's report may instead be a
// write it could not see (a library's tensor-memory stores). dev/bench/check_repro.sh's poison part
// compares such a run with a plain one, loss for loss.
template <typename T>
static inline void cuda_malloc_(T** p, size_t bytes, const char* file, int line) {
    static const int poison = env_flag("LLMC_POISON");
    cuda_check_(cudaMalloc((void**)p, bytes), file, line);
    if (poison) cuda_check_(cudaMemset(*p, 0xFF, bytes), file, line);
}
#define cuda_malloc(p, bytes) cuda_malloc_((p), (bytes), __FILE__, __LINE__)

// 1 if an NVIDIA driver library (libcuda.so.1) can be loaded at all. The CUDA runtime answers
// cudaErrorInsufficientDriver both when there is none and when the one installed is too old; only the
// first means "this machine has no GPU".
static inline int cuda_driver_installed(void) {
    void* lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (lib) dlclose(lib);
    return lib != NULL;
}

// Number of CUDA devices; 0 when the machine has none: no NVIDIA driver installed (CPU-only machines,
// CI), or a driver that sees no device. A driver that is installed but fails (older than this
// program's CUDA runtime, a broken install) stops the program instead: a GPU machine whose driver is
// broken must not quietly skip every GPU test. REQUIRE_GPU=1 in the environment makes "no GPU" an
// error too, for test runs that must exercise the GPU.
static inline int device_count_or_zero(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    cudaGetLastError();
    if (e == cudaSuccess && n > 0) return n;
    if (e == cudaSuccess || e == cudaErrorNoDevice || !cuda_driver_installed()) {
        fail_if(env_flag("REQUIRE_GPU"),
                "REQUIRE_GPU=%s is set, but this machine has no CUDA GPU (%s); run on a GPU machine, or unset "
                "REQUIRE_GPU to let the GPU tests skip", getenv("REQUIRE_GPU"),
                e == cudaSuccess || e == cudaErrorNoDevice ? "the NVIDIA driver sees no device"
                                                           : "no NVIDIA driver: libcuda.so.1 cannot be loaded");
        return 0;
    }
    int driver = 0;
    cudaDriverGetVersion(&driver);
    cudaGetLastError();
    char supports[64] = "does not say which CUDA version it supports";
    if (driver > 0) snprintf(supports, sizeof(supports), "supports CUDA %d.%d", driver / 1000, (driver % 1000) / 10);
    fail("an NVIDIA driver is installed but CUDA cannot use it: %s (%s); the driver %s, this program was "
         "built with CUDA runtime %d.%d. Check the GPU with nvidia-smi, and update or reinstall the driver (or "
         "build with a toolkit the driver supports)", cudaGetErrorName(e), cudaGetErrorString(e), supports,
         CUDART_VERSION / 1000, (CUDART_VERSION % 1000) / 10);
    return 0;
}
