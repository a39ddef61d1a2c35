// swiglu.cuh: Llama's gated MLP activation h = silu(g) * u, forward and backward, computed in fp32.
// defines: swiglu_forward(), swiglu_backward(), swiglu_ref(), swiglu_grad_ref()
// gu is the fc output, N rows of 2H: the gate g = gu[:, 0:H], the up projection u = gu[:, H:2H] (docs/MODELS.md).
//   h  = silu(g) u,                          silu(g) = g / (1 + exp(-g)),  sig(g) = 1 / (1 + exp(-g))
//   dg = dh u sig(g) (1 + g (1 - sig(g))),   du = dh silu(g)
// exp is expf (the accurate one, not __expf; the build has no fast math), the division IEEE. Each output is
// rounded once to BF16. g -> -inf: expf overflows to inf, silu -> -0 and sig -> 0, no NaN.
// One thread per 8 columns of a row (16-byte loads of g and of u, 16-byte stores); H % 8 == 0, so no tail.
// Pointers must be 16-byte aligned (activation buffers are).
#pragma once
#include <math.h>
#include "llmc/base/cuda_common.cuh"
#include "llmc/base/vec128.cuh"

// The scalar formulas, shared by the kernels and any CPU reference.
HD float swiglu_ref(float g, float u) {
    return g / (1.0f + expf(-g)) * u;
}
HD void swiglu_grad_ref(float g, float u, float dh, float* dg, float* du) {
    float d = 1.0f + expf(-g);
    float sig = 1.0f / d;
    float silu = g / d;
    *dg = dh * u * sig * (1.0f + g * (1.0f - sig));
    *du = dh * silu;
}

#define SWIGLU_THREADS 256

template <bool BACKWARD>
__global__ void __launch_bounds__(SWIGLU_THREADS)
swiglu_kernel(floatX* out, const floatX* dh, const floatX* gu, int H, size_t nvec) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nvec) return;
    int hv = H / 8;                                        // 8-column chunks per row of h
    size_t row = i / hv;
    int c = (int)(i % hv) * 8;
    const floatX* gp = gu + row * 2 * (size_t)H + c;       // g; u is H further on
    float g[8], u[8];
    bf16x8_to_float(load_bf16x8_cs(gp), g);
    bf16x8_to_float(load_bf16x8_cs(gp + H), u);
    if (!BACKWARD) {
        float h[8];
        #pragma unroll
        for (int k = 0; k < 8; k++) h[k] = swiglu_ref(g[k], u[k]);
        store_bf16x8(out + row * (size_t)H + c, float_to_bf16x8(h));
    } else {
        float d[8], dg[8], du[8];
        bf16x8_to_float(load_bf16x8_cs(dh + row * (size_t)H + c), d);
        #pragma unroll
        for (int k = 0; k < 8; k++) swiglu_grad_ref(g[k], u[k], d[k], &dg[k], &du[k]);
        floatX* o = out + row * 2 * (size_t)H + c;         // same layout as gu: dg, then du H further on
        store_bf16x8(o, float_to_bf16x8(dg));
        store_bf16x8(o + H, float_to_bf16x8(du));
    }
}

template <bool BACKWARD>
static void swiglu_launch(floatX* out, const floatX* dh, const floatX* gu, int N, int H, cudaStream_t s) {
    const char* who = BACKWARD ? "swiglu_backward" : "swiglu_forward";
    fail_if(H <= 0 || H % 8 != 0, "%s: H=%d must be a positive multiple of 8 (--mlp-hidden)", who, H);
    if (N <= 0) return;
    require_aligned16(who, out);
    require_aligned16(who, gu);
    if (BACKWARD) require_aligned16(who, dh);
    size_t nvec = (size_t)N * (H / 8);
    unsigned blocks = (unsigned)ceil_div((int64_t)nvec, SWIGLU_THREADS);
    swiglu_kernel<BACKWARD><<<blocks, SWIGLU_THREADS, 0, s>>>(out, dh, gu, H, nvec);
    cuda_check_last();
}

// h (N, H) = bf16(silu(g) * u), gu (N, 2H).
void swiglu_forward(floatX* h, const floatX* gu, int N, int H, cudaStream_t s) {
    swiglu_launch<false>(h, NULL, gu, N, H, s);
}

// dgu (N, 2H) = [dg | du] from dh (N, H) and the forward's input gu; written, not accumulated. dgu may be gu
// itself (in place: each thread reads its g and u before it writes their gradients).
void swiglu_backward(floatX* dgu, const floatX* dh, const floatX* gu, int N, int H, cudaStream_t s) {
    swiglu_launch<true>(dgu, dh, gu, N, H, s);
}
