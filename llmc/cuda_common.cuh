// cuda_common.cuh: CUDA error checks and the program-wide BF16 type.
// defines: floatX (= __nv_bfloat16), cuda_check(), cuda_check_last(), cublas_check(), device_count_or_zero()
#pragma once
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include "common.h"

typedef __nv_bfloat16 floatX;   // parameters, activations and GEMM operands

static inline void cuda_check_(cudaError_t e, const char* file, int line) {
    if (e == cudaErrorMemoryAllocation)
        fail("out of GPU memory at %s:%d; lower --batch-size or use a smaller model", file, line);
    if (e != cudaSuccess) fail("CUDA error at %s:%d: %s", file, line, cudaGetErrorString(e));
}
#define cuda_check(e) cuda_check_((e), __FILE__, __LINE__)
#define cuda_check_last() cuda_check_(cudaGetLastError(), __FILE__, __LINE__)

// Number of usable CUDA devices; 0 when there is no GPU or no driver (CPU-only machines, CI).
static inline int device_count_or_zero(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) { cudaGetLastError(); return 0; }
    return n;
}
