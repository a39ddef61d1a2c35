// quant_diag.cuh: the quantization diagnostics on the GPU: sums of QuantStats and QuantCompare
// (fp4/quant_cpu.h, which defines them per element and has their CPU twins).
// defines: quant_warp_sum(), quant_stats_warp_flush(), quant_compare_gpu()
// The statistics of a quantization come from the quantizer's own statistics pass (quant_fast_stats_gpu, quant/dispatch.cuh,
// its kernels in quant/), which add each warp's sums with quant_stats_warp_flush. Counts are exact; the double
// sums are added with atomics, so their last bits depend on the order.
#pragma once
#include "llmc/base/cuda_common.cuh"
#include "llmc/fp4/quant_cpu.h"   // QuantStats, QuantCompare, quant_compare_element

__device__ __forceinline__ double quant_warp_sum(double x) {
    for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xFFFFFFFFu, x, off);
    return x;
}
__device__ __forceinline__ unsigned long long quant_warp_sum(unsigned long long x) {
    for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xFFFFFFFFu, x, off);
    return x;
}

// Add the warp's per-lane statistics into *out (device) with one set of atomics from lane 0. Every lane
// of the warp must call it.
__device__ __forceinline__ void quant_stats_warp_flush(QuantStats a, QuantStats* out) {
    a.err2 = quant_warp_sum(a.err2); a.src2 = quant_warp_sum(a.src2); a.n = quant_warp_sum(a.n);
    a.flushed = quant_warp_sum(a.flushed); a.clipped = quant_warp_sum(a.clipped);
    a.zero_blocks = quant_warp_sum(a.zero_blocks); a.nonfinite = quant_warp_sum(a.nonfinite);
    if ((threadIdx.x & 31) != 0) return;
    if (a.n) {
        atomicAdd(&out->err2, a.err2); atomicAdd(&out->src2, a.src2); atomicAdd(&out->n, a.n);
        if (a.flushed) atomicAdd(&out->flushed, a.flushed);
        if (a.clipped) atomicAdd(&out->clipped, a.clipped);
        if (a.zero_blocks) atomicAdd(&out->zero_blocks, a.zero_blocks);
    }
    if (a.nonfinite) atomicAdd(&out->nonfinite, a.nonfinite);
}

// Sum a per-thread QuantCompare over the CTA (shuffles, then the warps in a fixed order) and add it to *out
// with one set of atomics. Every thread of the CTA must call it.
__device__ void quant_compare_reduce(QuantCompare a, QuantCompare* out, QuantCompare* red) {
    a.diff2 = quant_warp_sum(a.diff2); a.ref2 = quant_warp_sum(a.ref2); a.n = quant_warp_sum(a.n);
    a.differ = quant_warp_sum(a.differ); a.nonfinite = quant_warp_sum(a.nonfinite);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = a;
    __syncthreads();
    if (threadIdx.x == 0) {
        QuantCompare s = red[0];
        for (int w = 1; w < (int)(blockDim.x >> 5); w++) quant_compare_add(&s, &red[w]);
        if (s.n) {
            atomicAdd(&out->diff2, s.diff2); atomicAdd(&out->ref2, s.ref2); atomicAdd(&out->n, s.n);
            if (s.differ) atomicAdd(&out->differ, s.differ);
        }
        if (s.nonfinite) atomicAdd(&out->nonfinite, s.nonfinite);
    }
}

#define QC_THREADS 256
__global__ void __launch_bounds__(QC_THREADS) quant_compare_kernel(const uint16_t* __restrict__ a,
                                                                    const float* dec_a,
                                                                    const uint16_t* __restrict__ b,
                                                                    const float* dec_b, int64_t n, bool vec,
                                                                    QuantCompare* out) {
    __shared__ QuantCompare red[QC_THREADS / 32];
    const float da = *dec_a, db = *dec_b;
    QuantCompare acc;
    memset(&acc, 0, sizeof(acc));
    const int64_t stride = (int64_t)gridDim.x * QC_THREADS * 8;
    for (int64_t i = ((int64_t)blockIdx.x * QC_THREADS + threadIdx.x) * 8; i < n; i += stride) {
        if (vec && i + 8 <= n) {
            uint4 wa = *(const uint4*)(a + i), wb = *(const uint4*)(b + i);
            const uint16_t* pa = (const uint16_t*)&wa;
            const uint16_t* pb = (const uint16_t*)&wb;
#pragma unroll
            for (int e = 0; e < 8; e++) quant_compare_element(&acc, pa[e], da, pb[e], db);
        } else {
            for (int64_t j = i; j < i + 8 && j < n; j++) quant_compare_element(&acc, a[j], da, b[j], db);
        }
    }
    quant_compare_reduce(acc, out, red);
}

// The forward/backward disagreement of a weight (QuantCompare, fp4/quant_cpu.h): a and b are its two
// fake copies (row-wise and column-wise), n contiguous BF16 values each in the weight's layout;
// dec_a, dec_b their device S_dec floats. Adds into *out (device, zeroed by the caller). Callers skip
// it for specs with a Hadamard (the copies are rotated along different dimensions). Counts are exact;
// the double sums use atomics (last bits order-dependent).
static inline void quant_compare_gpu(const floatX* a, const float* dec_a, const floatX* b, const float* dec_b,
                                     int64_t n, QuantCompare* out, cudaStream_t stream) {
    fail_if(n <= 0, "quant_compare_gpu: empty tensor");
    fail_if(!dec_a || !dec_b || !out, "quant_compare_gpu: needs device dec_a, dec_b and out");
    bool vec = (uintptr_t)a % 16 == 0 && (uintptr_t)b % 16 == 0;
    int64_t blocks = ceil_div(ceil_div(n, 8), QC_THREADS);
    if (blocks > 2048) blocks = 2048;
    quant_compare_kernel<<<(unsigned)blocks, QC_THREADS, 0, stream>>>((const uint16_t*)a, dec_a, (const uint16_t*)b,
                                                                      dec_b, n, vec, out);
    cuda_check_last();
}
