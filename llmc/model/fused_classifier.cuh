// fused_classifier.cuh: softmax + cross-entropy loss + its gradient, in place on the logits.
// defines: fused_classifier()
// One block per row. Pass 1 reads the row once with an online softmax (running max and rescaled
// sum of exponentials per thread, then a fixed-order block combine). Pass 2 writes
// dlogits = (softmax - onehot(target)) * dloss over the logits. With dlogits wanted and the row
// small enough (Vp * 2 bytes within the opt-in shared memory: 100 KB of 227 KB at Vp = 50304),
// pass 1 also parks the row in shared memory so HBM sees each logit read once and written once.
// The padded columns [V, Vp) never enter the softmax and get a zero gradient.
#pragma once
#include <math.h>
#include "llmc/base/cuda_common.cuh"
#include "llmc/base/vec128.cuh"

#define FC_THREADS 512

// exp(x - m) as exp2f((x - m) log2 e): exp2f is one MUFU.EX2 (2 ulp), where expf adds a range
// reduction; the special function unit, not HBM, would otherwise bound this kernel (two
// exponentials per logit at 16 per clock per SM). The rounding of (x - m) log2 e costs
// |x - m| * 2^-24 relative, ~1e-6 at the widest softmax ranges.
__device__ __forceinline__ float exp_shifted(float x, float m) {
    return exp2f((x - m) * 1.4426950408889634f);
}

// Merge two (max, sum of exp(x - max)) pairs. Symmetric to the bit, so butterfly partners agree.
__device__ __forceinline__ void softmax_merge(float& m, float& s, float m2, float s2) {
    float M = fmaxf(m, m2);
    if (M == -INFINITY) return;                          // both empty
    s = s * exp_shifted(m, M) + s2 * exp_shifted(m2, M);
    m = M;
}

__global__ void __launch_bounds__(FC_THREADS, 2)
fused_classifier_kernel(floatX* logits, float* losses, float dloss, const int* targets, int V, int Vp,
                        int write_dlogits, int use_smem) {
    extern __shared__ bf16x8 row_cache[];
    __shared__ float warp_m[FC_THREADS / 32], warp_s[FC_THREADS / 32];
    floatX* x = logits + (size_t)blockIdx.x * Vp;
    int target = targets[blockIdx.x];
    int nvec = Vp / 8;

    if (target < 0) {                                     // ignored position (whole block agrees)
        if (threadIdx.x == 0) losses[blockIdx.x] = 0.0f;
        if (write_dlogits) {
            bf16x8 z;
            for (int k = 0; k < 4; k++) z.h[k] = __floats2bfloat162_rn(0.0f, 0.0f);
            for (int i = threadIdx.x; i < nvec; i += FC_THREADS) store_bf16x8(x + i * 8, z);
        }
        return;
    }
    // Read before any thread may overwrite the row in pass 2 (pass 2 starts after a barrier).
    float x_target = 0.0f;
    if (threadIdx.x == 0) x_target = target < V ? __bfloat162float(x[target]) : NAN;   // V <= target: a bug upstream, NaN loss

    float m = -INFINITY, s = 0.0f;
    #pragma unroll 4
    for (int i = threadIdx.x; i < nvec; i += FC_THREADS) {
        bf16x8 v = load_bf16x8_cs(x + i * 8);
        if (use_smem) row_cache[i] = v;
        float f[8];
        bf16x8_to_float(v, f);
        int valid = V - i * 8;                             // elements of this chunk below V
        if (valid >= 8) {
            float lm = fmaxf(fmaxf(fmaxf(f[0], f[1]), fmaxf(f[2], f[3])), fmaxf(fmaxf(f[4], f[5]), fmaxf(f[6], f[7])));
            if (lm > m) { s *= exp_shifted(m, lm); m = lm; }
            #pragma unroll
            for (int j = 0; j < 8; j++) s += exp_shifted(f[j], m);
        } else {                                           // the chunk that straddles V, or padding
            float lm = -INFINITY;
            #pragma unroll
            for (int j = 0; j < 8; j++) if (j < valid) lm = fmaxf(lm, f[j]);
            if (lm > m) { s *= exp_shifted(m, lm); m = lm; }
            #pragma unroll
            for (int j = 0; j < 8; j++) if (j < valid) s += exp_shifted(f[j], m);
        }
    }
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        softmax_merge(m, s, __shfl_xor_sync(0xFFFFFFFFu, m, o), __shfl_xor_sync(0xFFFFFFFFu, s, o));
    if (threadIdx.x % 32 == 0) { warp_m[threadIdx.x / 32] = m; warp_s[threadIdx.x / 32] = s; }
    __syncthreads();
    m = warp_m[0]; s = warp_s[0];
    #pragma unroll
    for (int w = 1; w < FC_THREADS / 32; w++) softmax_merge(m, s, warp_m[w], warp_s[w]);   // same order in every thread

    if (threadIdx.x == 0) losses[blockIdx.x] = m + logf(s) - x_target;   // -log softmax[target]
    if (!write_dlogits) return;

    float inv_s = 1.0f / s;
    #pragma unroll 4
    for (int i = threadIdx.x; i < nvec; i += FC_THREADS) {
        bf16x8 v = use_smem ? row_cache[i] : load_bf16x8_cs(x + i * 8);
        float f[8];
        bf16x8_to_float(v, f);
        #pragma unroll
        for (int j = 0; j < 8; j++) {
            int col = i * 8 + j;
            float p = exp_shifted(f[j], m) * inv_s;
            f[j] = col < V ? (p - (col == target ? 1.0f : 0.0f)) * dloss : 0.0f;
        }
        store_bf16x8(x + i * 8, float_to_bf16x8(f));
    }
}

// logits: (N, Vp) bf16, valid columns [0, V). losses[i] = -log softmax(logits[i])[targets[i]];
// targets[i] < 0: loss 0 and (if written) a zero gradient row. With write_dlogits the logits are
// overwritten by (softmax - onehot) * dloss, zero in the padded columns.
void fused_classifier(floatX* logits, float* losses, float dloss, const int* targets, int N, int V, int Vp,
                      int write_dlogits, cudaStream_t s) {
    fail_if(Vp % 8 != 0 || V <= 0 || V > Vp, "fused_classifier: need 0 < V=%d <= Vp=%d and Vp a multiple of 8", V, Vp);
    require_aligned16("fused_classifier", logits);
    if (N <= 0) return;
    size_t smem = 0;
    int use_smem = 0;
    if (write_dlogits) {
        static int max_optin = -1, set_bytes = 0;           // queried once, attribute raised once per size
        if (max_optin < 0) {
            int dev;
            cuda_check(cudaGetDevice(&dev));
            cuda_check(cudaDeviceGetAttribute(&max_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        }
        size_t need = (size_t)Vp * sizeof(floatX);
        size_t static_smem = 2 * (FC_THREADS / 32) * sizeof(float);
        if (need + static_smem <= (size_t)max_optin) {
            use_smem = 1;
            smem = need;
            if ((int)need > set_bytes && need > 48 * 1024) {
                cuda_check(cudaFuncSetAttribute(fused_classifier_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)need));
                set_bytes = (int)need;
            }
        }
    }
    fused_classifier_kernel<<<N, FC_THREADS, smem, s>>>(logits, losses, dloss, targets, V, Vp, write_dlogits, use_smem);
    cuda_check_last();
}
