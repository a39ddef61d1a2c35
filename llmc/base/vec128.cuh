// vec128.cuh: 16-byte vector loads and stores, the unit every memory-bound kernel moves.
// defines: bf16x8, load_bf16x8(), load_bf16x8_cs(), store_bf16x8(), store_bf16x8_cs(),
//          bf16x8_to_float(), float_to_bf16x8(), warp_sum(), warp_max(), require_aligned16()
// One LDG.128/STG.128 per thread per step is what lets these kernels approach HBM bandwidth.
// Every pointer handed to these functions must be 16-byte aligned (cudaMalloc'd buffers and row
// starts with a multiple-of-8 width are).
#pragma once
#include "llmc/base/cuda_common.cuh"

// Launchers check their vector pointers with this; the message names the function and the pointer.
#define require_aligned16(who, p) \
    fail_if((uintptr_t)(p) % 16 != 0, "%s: %s must be 16-byte aligned (got %p)", who, #p, (const void*)(p))

struct alignas(16) bf16x8 { __nv_bfloat162 h[4]; };

__device__ __forceinline__ bf16x8 load_bf16x8(const floatX* p) {
    return *reinterpret_cast<const bf16x8*>(p);
}
// Streaming ("evict first") variants, for data read or written once and not wanted in L2.
__device__ __forceinline__ bf16x8 load_bf16x8_cs(const floatX* p) {
    int4 t = __ldcs(reinterpret_cast<const int4*>(p));
    bf16x8 r;
    memcpy(&r, &t, 16);
    return r;
}
__device__ __forceinline__ void store_bf16x8(floatX* p, const bf16x8& x) {
    *reinterpret_cast<bf16x8*>(p) = x;
}
__device__ __forceinline__ void store_bf16x8_cs(floatX* p, const bf16x8& x) {
    int4 t;
    memcpy(&t, &x, 16);
    __stcs(reinterpret_cast<int4*>(p), t);
}

__device__ __forceinline__ void bf16x8_to_float(const bf16x8& x, float f[8]) {
    #pragma unroll
    for (int k = 0; k < 4; k++) {
        float2 p = __bfloat1622float2(x.h[k]);
        f[2 * k] = p.x;
        f[2 * k + 1] = p.y;
    }
}
// Round to nearest even, once per element.
__device__ __forceinline__ bf16x8 float_to_bf16x8(const float f[8]) {
    bf16x8 r;
    #pragma unroll
    for (int k = 0; k < 4; k++) r.h[k] = __floats2bfloat162_rn(f[2 * k], f[2 * k + 1]);
    return r;
}

// Butterfly reductions: every lane ends with the same bits (IEEE addition and max are
// commutative, and at each step the two partners combine the same two operands), and the order
// is fixed, so results are deterministic.
__device__ __forceinline__ float warp_sum(float v) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
    return v;
}
