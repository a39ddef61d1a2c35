// muon.cuh: Muon's update of one 2D weight matrix on the GPU (--optimizer muon; docs/FULLSTACK_FP4.md section 3),
// the twin of llmc/base/muon_ref.h: FP32 momentum, then Newton-Schulz on BF16 X with cuBLASLt's BF16 GEMMs (FP32
// accumulation, BF16 results), rounded at the same points as the twin, then the scaled update with decoupled weight
// decay. One matrix at a time; the scratch (MuonScratch) is sized for the largest matrix and reused.
// defines: MuonScratch, muon_scratch_alloc(), muon_scratch_free(), muon_newton_schulz_gpu(), muon_update_gpu()
// Every elementwise FP32 operation is written with explicit rounding (__f*_rn), as the twin's plain C does it, so
// only the GEMMs' summation order (cuBLASLt's tiles and split-K, the twin's index order) separates the two.
// --ns-fp4 (NsFp4, llmc/fp4/ns_fp4.h, whose muon_newton_schulz_fp4_ref is the twin): the GEMMs of its set take the
// GPU quantizer's BF16 fake copies (llmc/fp4/quant.cuh, bit for bit quant_cpu's) and the product of the copies'
// dequantization scales as their device alpha, computed as the twin's muon_ns_alpha; the other GEMMs and every
// elementwise step are the BF16 path's. Without it (NULL, or off) NS runs exactly the BF16 path's launches.
#pragma once
#include "llmc/base/cuda_common.cuh"
#include "llmc/base/matmul.cuh"        // defines: matmul_forward, matmul_dgrad
#include "llmc/base/muon_ref.h"        // defines: MUON_NS_*, MUON_SCALE_*, muon_scale
#include "llmc/stochastic_round.cuh"   // defines: bf16_bits_rne, bf16_bits_sr
#include "llmc/fp4/ns_fp4.h"           // defines: NsFp4, NS_GEMM_*
#include "llmc/fp4/quant.cuh"          // defines: quantize_fast_gpu, quant_target_fake, quant_fast_supported

#define MUON_NORM_BLOCKS 128   // the sum of squares' partial sums: a fixed grid, so the sum is deterministic

// --ns-fp4's device floats in MuonScratch.qf: amax and dequantization scale per copy, then alpha per GEMM.
enum { MUON_QF_XR = 0, MUON_QF_XC, MUON_QF_A, MUON_QF_B, MUON_QF_COPIES };
enum { MUON_QF_AMAX = 0, MUON_QF_DEC = MUON_QF_COPIES, MUON_QF_ALPHA = 2 * MUON_QF_COPIES,
       MUON_QF_FLOATS = MUON_QF_ALPHA + 3 };

typedef struct {
    floatX *x, *a, *b, *aa, *bx;   // X and B X (n k); A, B and (c A) A (n n)
    float* partial;                // [MUON_NORM_BLOCKS]
    float* denom;                  // ||X||_F + 1e-7
    size_t cap_nk, cap_nn;
    // --ns-fp4: the fake copies of the GEMMs in fp4_gemms (the others NULL): X row-blocked (xx) and column-blocked
    // (bx), n k each; A (aa) and B (bx), n n each; and qf, MUON_QF_FLOATS device floats (amax, dec, alpha)
    int fp4_gemms;
    floatX *qxr, *qxc, *qa, *qb;
    float* qf;
} MuonScratch;

// Scratch for matrices of up to max_nk elements whose smaller side squared is at most max_nn, and, when fp4 is on,
// the fake copies its GEMMs need; returns its bytes.
static size_t muon_scratch_alloc(MuonScratch* s, size_t max_nk, size_t max_nn, const NsFp4* fp4) {
    memset(s, 0, sizeof(*s));
    s->cap_nk = max_nk;
    s->cap_nn = max_nn;
    cuda_malloc(&s->x, max_nk * sizeof(floatX));
    cuda_malloc(&s->bx, max_nk * sizeof(floatX));
    cuda_malloc(&s->a, max_nn * sizeof(floatX));
    cuda_malloc(&s->b, max_nn * sizeof(floatX));
    cuda_malloc(&s->aa, max_nn * sizeof(floatX));
    cuda_malloc(&s->partial, (MUON_NORM_BLOCKS + 1) * sizeof(float));
    s->denom = s->partial + MUON_NORM_BLOCKS;
    size_t bytes = (2 * max_nk + 3 * max_nn) * sizeof(floatX) + (MUON_NORM_BLOCKS + 1) * sizeof(float);
    if (!fp4 || !fp4->on) return bytes;
    s->fp4_gemms = fp4->gemms;
    if (fp4->gemms & NS_GEMM_XX) { cuda_malloc(&s->qxr, max_nk * sizeof(floatX)); bytes += max_nk * sizeof(floatX); }
    if (fp4->gemms & NS_GEMM_AA) { cuda_malloc(&s->qa, max_nn * sizeof(floatX)); bytes += max_nn * sizeof(floatX); }
    if (fp4->gemms & NS_GEMM_BX) {
        cuda_malloc(&s->qxc, max_nk * sizeof(floatX));
        cuda_malloc(&s->qb, max_nn * sizeof(floatX));
        bytes += (max_nk + max_nn) * sizeof(floatX);
    }
    cuda_malloc(&s->qf, MUON_QF_FLOATS * sizeof(float));
    cuda_check(cudaMemset(s->qf, 0, MUON_QF_FLOATS * sizeof(float)));
    return bytes + MUON_QF_FLOATS * sizeof(float);
}

static void muon_scratch_free(MuonScratch* s) {
    cudaFree(s->x); cudaFree(s->bx); cudaFree(s->a); cudaFree(s->b); cudaFree(s->aa); cudaFree(s->partial);
    cudaFree(s->qxr); cudaFree(s->qxc); cudaFree(s->qa); cudaFree(s->qb); cudaFree(s->qf);
    memset(s, 0, sizeof(*s));
}

__device__ inline float muon_bf16_dev(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// Step 1 and 2: M <- M + (1 - beta)(G - M); U = G + beta (M - G) (Nesterov) or M; X = bf16(U), transposed when
// rows > cols. g is scaled by grad_scale (the trainer's clipping; 1: not at all) first.
__global__ void muon_momentum_kernel(floatX* x, float* m, const float* g, int rows, int cols, int tr, float beta,
                                     float one_minus_beta, int nesterov, float grad_scale) {
    const size_t n = (size_t)rows * cols;
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float gi = grad_scale == 1.0f ? g[i] : __fmul_rn(g[i], grad_scale);
    const float mi = __fadd_rn(m[i], __fmul_rn(one_minus_beta, __fsub_rn(gi, m[i])));
    m[i] = mi;
    const float u = nesterov ? __fadd_rn(gi, __fmul_rn(beta, __fsub_rn(mi, gi))) : mi;
    const size_t r = i / cols, c = i % cols;
    x[tr ? c * rows + r : i] = __float2bfloat16_rn(u);
}

// The sum of squares of x, in MUON_NORM_BLOCKS partial sums (a fixed grid: the same order every run).
__global__ void muon_sumsq_kernel(float* partial, const floatX* x, size_t n) {
    float s = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float v = __bfloat162float(x[i]);
        s = __fmaf_rn(v, v, s);
    }
    __shared__ float warp_sums[32];
    for (int d = 16; d >= 1; d >>= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, d);
    if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0.0f;
        for (int w = 0; w < (int)blockDim.x / 32; w++) t += warp_sums[w];
        partial[blockIdx.x] = t;
    }
}

// denom = bf16(sqrt(sum of the partials)) + 1e-7 (the twin's norm + 1e-7f); one warp.
__global__ void muon_norm_kernel(float* denom, const float* partial) {
    float s = 0.0f;
    for (int j = threadIdx.x; j < MUON_NORM_BLOCKS; j += 32) s += partial[j];
    for (int d = 16; d >= 1; d >>= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, d);
    if (threadIdx.x == 0) *denom = __fadd_rn(muon_bf16_dev(__fsqrt_rn(s)), 1e-7f);
}

__global__ void muon_normalize_kernel(floatX* x, const float* denom, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __float2bfloat16_rn(__fdiv_rn(__bfloat162float(x[i]), *denom));
}

// out = bf16(bf16(alpha a) + b), or bf16(alpha a) when b is NULL (out may be a).
__global__ void muon_axpy_kernel(floatX* out, float alpha, const floatX* a, const floatX* b, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float t = muon_bf16_dev(__fmul_rn(alpha, __bfloat162float(a[i])));
    if (b) t = __fadd_rn(t, __bfloat162float(b[i]));
    out[i] = __float2bfloat16_rn(t);
}

static unsigned muon_grid(size_t n) { return (unsigned)ceil_div((int64_t)n, 256); }

// alpha = (c0 d1) d2, each product rounded once: the twin's muon_ns_alpha. One thread.
__global__ void muon_ns_alpha_kernel(float* alpha, float c0, const float* d1, const float* d2) {
    *alpha = __fmul_rn(__fmul_rn(c0, *d1), *d2);
}

// The fake copies of view (rows x cols, row-major) for the targets' axes (1 row-blocked, 0 column-blocked) into
// fake[i], amax and dequantization scale into qf's slots copy[i]; one call for two targets where the quantizer has a
// pair kernel (one amax pass: both copies share the tensor's amax).
static void muon_ns_quant_gpu(const NsFp4* f, const floatX* view, int rows, int cols, const int* axis, floatX* const* fake,
                              const int* copy, int n, float* qf, cudaStream_t stream) {
    QuantTarget t[2];
    for (int i = 0; i < n; i++) {
        t[i] = quant_target_fake(&f->q, axis[i], /*key=*/0, fake[i], cols, qf + MUON_QF_AMAX + copy[i],
                                 qf + MUON_QF_DEC + copy[i]);
        fail_if(!quant_fast_supported(&t[i], 1, rows, cols, cols), "--ns-fp4: the GPU quantizer has no kernel for this "
                "spec on a %d x %d Newton-Schulz operand; try nvfp4, nvfp4-2d or mxfp4", rows, cols);
    }
    if (n == 2 && quant_fast_supported(t, 2, rows, cols, cols)) {
        quantize_fast_gpu(view, rows, cols, cols, t, 2, stream);
    } else {
        for (int i = 0; i < n; i++) quantize_fast_gpu(view, rows, cols, cols, &t[i], 1, stream);
    }
}

// alpha slot `gemm` (0 xx, 1 aa, 2 bx) of qf = (c0 dec[d1]) dec[d2].
static const float* muon_ns_alpha_gpu(float* qf, int gemm, float c0, int d1, int d2, cudaStream_t stream) {
    float* alpha = qf + MUON_QF_ALPHA + gemm;
    muon_ns_alpha_kernel<<<1, 1, 0, stream>>>(alpha, c0, qf + MUON_QF_DEC + d1, qf + MUON_QF_DEC + d2);
    cuda_check_last();
    return alpha;
}

// Newton-Schulz on x (n x k, n <= k, row-major BF16, in place) as muon_newton_schulz: Frobenius normalisation, then
// `steps` steps A = X X^T; B = b A + (c A) A; X <- a X + B X. Dimensions must suit cuBLASLt (multiples of 8). With
// fp4 on (fp4 may be NULL), the GEMMs of its set quantized, as muon_newton_schulz_fp4_ref; after the last step the
// scratch holds that step's fake copies, A and B (test_muon_gpu compares the copies with quant_cpu's).
static void muon_newton_schulz_gpu(floatX* x, int n, int k, int steps, const NsFp4* fp4, MuonScratch* s,
                                   cudaStream_t stream) {
    const size_t nk = (size_t)n * k, nn = (size_t)n * n;
    fail_if(nk > s->cap_nk || nn > s->cap_nn, "muon: a %d x %d matrix exceeds the scratch (%zu, %zu)", n, k,
            s->cap_nk, s->cap_nn);
    const int q = fp4 && fp4->on ? fp4->gemms : 0;
    fail_if(q & ~s->fp4_gemms, "muon: the scratch has no --ns-fp4 copies for these GEMMs (muon_scratch_alloc with the "
            "same NsFp4)");
    const char* why = q ? ns_fp4_shape_problem(fp4, n, k) : NULL;
    fail_if(why, "--ns-fp4: a %d x %d Newton-Schulz matrix: %s", n, k, why);
    muon_sumsq_kernel<<<MUON_NORM_BLOCKS, 256, 0, stream>>>(s->partial, x, nk);
    muon_norm_kernel<<<1, 32, 0, stream>>>(s->denom, s->partial);
    muon_normalize_kernel<<<muon_grid(nk), 256, 0, stream>>>(x, s->denom, nk);
    cuda_check_last();
    for (int step = 0; step < steps; step++) {
        if (q & (NS_GEMM_XX | NS_GEMM_BX)) {   // X's copies, from the X the step starts with
            int axis[2], copy[2], m = 0;
            floatX* fake[2];
            if (q & NS_GEMM_XX) { axis[m] = 1; copy[m] = MUON_QF_XR; fake[m++] = s->qxr; }
            if (q & NS_GEMM_BX) { axis[m] = 0; copy[m] = MUON_QF_XC; fake[m++] = s->qxc; }
            muon_ns_quant_gpu(fp4, x, n, k, axis, fake, copy, m, s->qf, stream);
        }
        if (q & NS_GEMM_XX) {   // A = dx^2 Qr(X) Qr(X)^T
            const float* alpha = muon_ns_alpha_gpu(s->qf, 0, 1.0f, MUON_QF_XR, MUON_QF_XR, stream);
            matmul_forward(s->a, s->qxr, s->qxr, /*bias=*/NULL, /*N=*/n, /*K=*/k, /*OC=*/n, alpha, stream);
        } else {   // A (n x n) = X X^T: the forward GEMM's out = inp weight^T with inp = weight = X
            matmul_forward(s->a, x, x, /*bias=*/NULL, /*N=*/n, /*K=*/k, /*OC=*/n, /*alpha_dev=*/NULL, stream);
        }
        if (q & NS_GEMM_AA) {   // (c A) A = c da^2 Qr(A) Qr(A)^T (A is symmetric)
            const int axis = 1, copy = MUON_QF_A;
            muon_ns_quant_gpu(fp4, s->a, n, n, &axis, &s->qa, &copy, 1, s->qf, stream);
            const float* alpha = muon_ns_alpha_gpu(s->qf, 1, MUON_NS_C, MUON_QF_A, MUON_QF_A, stream);
            matmul_forward(s->aa, s->qa, s->qa, /*bias=*/NULL, /*N=*/n, /*K=*/n, /*OC=*/n, alpha, stream);
        } else {
            muon_axpy_kernel<<<muon_grid(nn), 256, 0, stream>>>(s->b, MUON_NS_C, s->a, NULL, nn);           // c A
            matmul_dgrad(s->aa, /*dout=*/s->b, /*weight=*/s->a, /*N=*/n, /*K=*/n, /*OC=*/n, NULL, stream);  // (c A) A
        }
        muon_axpy_kernel<<<muon_grid(nn), 256, 0, stream>>>(s->b, MUON_NS_B, s->a, s->aa, nn);          // B
        if (q & NS_GEMM_BX) {   // B X = db dxc Qr(B) Qc(X)
            const int axis = 1, copy = MUON_QF_B;
            muon_ns_quant_gpu(fp4, s->b, n, n, &axis, &s->qb, &copy, 1, s->qf, stream);
            const float* alpha = muon_ns_alpha_gpu(s->qf, 2, 1.0f, MUON_QF_B, MUON_QF_XC, stream);
            matmul_dgrad(s->bx, /*dout=*/s->qb, /*weight=*/s->qxc, /*N=*/n, /*K=*/k, /*OC=*/n, alpha, stream);
        } else {
            matmul_dgrad(s->bx, /*dout=*/s->b, /*weight=*/x, /*N=*/n, /*K=*/k, /*OC=*/n, NULL, stream);     // B X
        }
        muon_axpy_kernel<<<muon_grid(nk), 256, 0, stream>>>(x, MUON_NS_A, x, s->bx, nk);                // a X + B X
        cuda_check_last();
    }
}

// Step 5 and 6: update = X (transposed back) scale; W <- W decay - lr update, decay = 1 - lr wd (from the host, as
// the twin computes it). The BF16 weights as adamw_update's: the master's RNE rounding, or stochastic rounding keyed
// on (rng_key, index_offset + i).
__global__ void muon_apply_kernel(floatX* params, float* master, const floatX* x, int rows, int cols, int tr,
                                  float scale, float lr, float decay, uint64_t rng_key, size_t index_offset) {
    const size_t n = (size_t)rows * cols;
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const size_t r = i / cols, c = i % cols;
    const float up = __fmul_rn(__bfloat162float(x[tr ? c * rows + r : i]), scale);
    const float p = master ? master[i] : __bfloat162float(params[i]);
    const float np = __fsub_rn(__fmul_rn(p, decay), __fmul_rn(lr, up));
    uint16_t bits;
    if (master) {
        master[i] = np;
        bits = bf16_bits_rne(np);
    } else {
        bits = bf16_bits_sr(np, rng_bits32(rng_key, index_offset + i));
    }
    params[i] = __ushort_as_bfloat16(bits);
}

// One Muon update of the matrix W (rows x cols, row-major) at params (and master, or NULL), with its gradient and
// FP32 momentum. p holds lr, beta, weight decay, nesterov, the scale rule and the steps; grad_scale the clipping;
// fp4 --ns-fp4 (NULL: off). index_offset: params[0]'s index in its whole tensor, rng_key the tensor's (both for the
// SR of BF16 weights).
static void muon_update_gpu(floatX* params, float* master, const float* grads, float* momentum, int rows, int cols,
                            const MuonParams* p, float grad_scale, uint64_t rng_key, size_t index_offset,
                            const NsFp4* fp4, MuonScratch* s, cudaStream_t stream) {
    const size_t nk = (size_t)rows * cols;
    const int tr = rows > cols, n = tr ? cols : rows, k = tr ? rows : cols;
    fail_if(nk > s->cap_nk, "muon: a %d x %d matrix exceeds the scratch", rows, cols);
    muon_momentum_kernel<<<muon_grid(nk), 256, 0, stream>>>(s->x, momentum, grads, rows, cols, tr, p->beta,
                                                            1.0f - p->beta, p->nesterov, grad_scale);
    cuda_check_last();
    muon_newton_schulz_gpu(s->x, n, k, p->ns_steps, fp4, s, stream);
    const float decay = 1.0f - p->lr * p->weight_decay;
    muon_apply_kernel<<<muon_grid(nk), 256, 0, stream>>>(params, master, s->x, rows, cols, tr,
                                                         muon_scale(rows, cols, p->scale_rule), p->lr, decay, rng_key,
                                                         index_offset);
    cuda_check_last();
}
