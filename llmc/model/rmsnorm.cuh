// rmsnorm.cuh: RMSNorm forward (plain and fused with the residual add) and backward, Llama's norm.
// defines: RMSNormTensors, rmsnorm_forward(), fused_residual_rmsnorm_forward(), rmsnorm_backward_scratch_bytes(),
//          rmsnorm_backward()
// y = bf16(x * rstd * weight), rstd = 1 / sqrtf(mean(x^2) + eps) (IEEE sqrtf and division), statistics in fp32,
// rstd saved per row for the backward pass (docs/MODELS.md, "RMSNorm").
// The layout of layernorm.cuh: one warp per row, the row in registers (lane l holds 16-byte chunks l, l+32, ...),
// each element read from memory once; NV, the chunks per lane, a template parameter: C <= 2048.
// Backward is deterministic: each block sums dweight over a fixed range of rows in registers, combines its warps
// in fixed order and writes one partial row; column_sums_add (reduce.cuh) adds the partial rows in order into
// the fp32 gradient.
#pragma once
#include "llmc/base/cuda_common.cuh"
#include "llmc/base/vec128.cuh"
#include "llmc/model/reduce.cuh"

#define RMS_WARPS 8            // rows per block in forward
#define RMSB_WARPS 8           // warps per block in backward
#define RMSB_MAX_BLOCKS 1024   // backward blocks (and scratch partial rows) at most
#define RMS_MAX_NV 8           // C <= 8 * 32 * RMS_MAX_NV = 2048

// One RMSNorm's tensors: its weight (C), the weight's FP32 gradient (the backward adds to it; the forward ignores it)
// and the per-row rstd (N) that the forward saves for the backward (NULL in a forward that saves nothing).
typedef struct {
    const floatX* weight;
    float* dweight;
    float* rstd;
} RMSNormTensors;

// ---------------------------------------------------------------------------------------------
// forward. FUSED: x = bf16(inp1 + inp2) is written to residual and normalized; otherwise x = inp1.

template <int NV, bool FUSED>
__global__ void __launch_bounds__(RMS_WARPS * 32)
rmsnorm_forward_kernel(floatX* residual, floatX* out, float* rstd, const floatX* inp1, const floatX* inp2,
                       const floatX* weight, int N, int C, float eps) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * RMS_WARPS + threadIdx.x / 32;
    if (row >= N) return;
    size_t base = (size_t)row * C;
    float x[NV][8];
    float ss = 0.0f;
    #pragma unroll
    for (int k = 0; k < NV; k++) {
        int c = (lane + 32 * k) * 8;
        if (c < C) {
            bf16x8 a = load_bf16x8(inp1 + base + c);
            if (FUSED) {
                float b[8];
                bf16x8_to_float(a, x[k]);
                bf16x8_to_float(load_bf16x8(inp2 + base + c), b);
                #pragma unroll
                for (int j = 0; j < 8; j++) x[k][j] += b[j];
                a = float_to_bf16x8(x[k]);
                store_bf16x8(residual + base + c, a);
            }
            bf16x8_to_float(a, x[k]);       // normalize exactly the bf16 values that were stored
            #pragma unroll
            for (int j = 0; j < 8; j++) ss += x[k][j] * x[k][j];
        }
    }
    float rs = 1.0f / sqrtf(warp_sum(ss) / C + eps);
    #pragma unroll
    for (int k = 0; k < NV; k++) {
        int c = (lane + 32 * k) * 8;
        if (c < C) {
            float w[8], y[8];
            bf16x8_to_float(load_bf16x8(weight + c), w);
            #pragma unroll
            for (int j = 0; j < 8; j++) y[j] = x[k][j] * rs * w[j];
            store_bf16x8(out + base + c, float_to_bf16x8(y));
        }
    }
    if (lane == 0 && rstd) rstd[row] = rs;
}

template <bool FUSED>
static void rmsnorm_forward_launch(floatX* residual, floatX* out, const floatX* inp1, const floatX* inp2,
                                   RMSNormTensors rms, int N, int C, float eps, cudaStream_t s) {
    const char* who = FUSED ? "fused_residual_rmsnorm_forward" : "rmsnorm_forward";
    fail_if(C % 8 != 0 || C < 8 || C > 256 * RMS_MAX_NV, "%s: C=%d must be a multiple of 8 in [8, %d]", who, C,
            256 * RMS_MAX_NV);
    fail_if(!(eps > 0.0f), "%s: eps %g must be positive (--norm-eps)", who, (double)eps);
    if (N <= 0) return;
    require_aligned16(who, out);
    require_aligned16(who, inp1);
    require_aligned16(who, rms.weight);
    if (FUSED) {
        require_aligned16(who, inp2);
        require_aligned16(who, residual);
    }
    int nv = (int)ceil_div(C / 8, 32);
    unsigned grid = (unsigned)ceil_div(N, RMS_WARPS);
    #define RMSF_CASE(K) case K: rmsnorm_forward_kernel<K, FUSED><<<grid, RMS_WARPS * 32, 0, s>>>( \
        residual, out, rms.rstd, inp1, inp2, rms.weight, N, C, eps); break;
    switch (nv) {
        RMSF_CASE(1) RMSF_CASE(2) RMSF_CASE(3) RMSF_CASE(4) RMSF_CASE(5) RMSF_CASE(6) RMSF_CASE(7) RMSF_CASE(8)
    }
    #undef RMSF_CASE
    cuda_check_last();
}

// out = rmsnorm(inp) with rms's weight; rms.rstd gets the statistics, or is NULL (inference: nothing saved).
void rmsnorm_forward(floatX* out, const floatX* inp, RMSNormTensors rms, int N, int C, float eps, cudaStream_t s) {
    rmsnorm_forward_launch<false>(NULL, out, inp, NULL, rms, N, C, eps, s);
}

// residual = bf16(inp1 + inp2) (one rounding of the fp32 sum); normed = rmsnorm(residual), in one pass over memory.
void fused_residual_rmsnorm_forward(floatX* residual, floatX* normed, const floatX* inp1, const floatX* inp2,
                                    RMSNormTensors rms, int N, int C, float eps, cudaStream_t s) {
    rmsnorm_forward_launch<true>(residual, normed, inp1, inp2, rms, N, C, eps, s);
}

// ---------------------------------------------------------------------------------------------
// backward. Per row, with xhat = x * rstd and g = dout * weight:
//   dinp += rstd * (g - xhat * mean(g * xhat))
//   dweight += dout * xhat
// Rows are split into G contiguous ranges of rows_per_block (a multiple of RMSB_WARPS); warp w of a
// block takes rows w, w + RMSB_WARPS, ... of its range. Both G and the ranges depend only on N.

static void rmsnorm_backward_grid(int N, int* G, int* rows_per_block) {
    int64_t per_warp = ceil_div(N, (int64_t)RMSB_WARPS * RMSB_MAX_BLOCKS);
    if (per_warp < 1) per_warp = 1;
    *rows_per_block = (int)(per_warp * RMSB_WARPS);
    *G = (int)ceil_div(N, *rows_per_block);
    if (*G < 1) *G = 1;
}

// G <= min(RMSB_MAX_BLOCKS, ceil(N / RMSB_WARPS)); sized by that bound, nondecreasing in N and C.
size_t rmsnorm_backward_scratch_bytes(int N, int C) {
    int64_t g = ceil_div(N, RMSB_WARPS);
    if (g > RMSB_MAX_BLOCKS) g = RMSB_MAX_BLOCKS;
    if (g < 1) g = 1;
    return (size_t)g * C * sizeof(float);
}

template <int NV>
__global__ void __launch_bounds__(RMSB_WARPS * 32)
rmsnorm_backward_kernel(floatX* dinp, float* partials, const floatX* dout, const floatX* inp, const floatX* weight,
                        const float* rstd, int N, int C, int rows_per_block) {
    extern __shared__ float block_sums[];          // [C]: dweight of this block
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int cv = C / 8;
    float dw[NV][8];
    #pragma unroll
    for (int k = 0; k < NV; k++)
        #pragma unroll
        for (int j = 0; j < 8; j++) dw[k][j] = 0.0f;

    int row_end = min((int)(blockIdx.x + 1) * rows_per_block, N);
    for (int row = (int)blockIdx.x * rows_per_block + warp; row < row_end; row += RMSB_WARPS) {
        size_t base = (size_t)row * C;
        float rs = rstd[row];
        // All three row loads up front (dinp does not depend on the row sum), so one memory
        // round trip per row. The weight is re-read from L1 instead of held in registers.
        bf16x8 dy[NV], xin[NV], dx[NV];
        #pragma unroll
        for (int k = 0; k < NV; k++) {
            int c = (lane + 32 * k) * 8;
            if (c < C) {
                dy[k] = load_bf16x8_cs(dout + base + c);
                xin[k] = load_bf16x8_cs(inp + base + c);
                dx[k] = load_bf16x8(dinp + base + c);
            }
        }
        float sgx = 0.0f;
        #pragma unroll
        for (int k = 0; k < NV; k++) {
            if (lane + 32 * k < cv) {
                float d[8], x[8], wf[8];
                bf16x8_to_float(dy[k], d);
                bf16x8_to_float(xin[k], x);
                bf16x8_to_float(load_bf16x8(weight + (lane + 32 * k) * 8), wf);
                #pragma unroll
                for (int j = 0; j < 8; j++) sgx += (d[j] * wf[j]) * (x[j] * rs);
            }
        }
        float mgx = warp_sum(sgx) / C;
        #pragma unroll
        for (int k = 0; k < NV; k++) {
            int c = (lane + 32 * k) * 8;
            if (c < C) {
                float d[8], x[8], wf[8], acc[8];
                bf16x8_to_float(dy[k], d);
                bf16x8_to_float(xin[k], x);
                bf16x8_to_float(load_bf16x8(weight + c), wf);
                bf16x8_to_float(dx[k], acc);
                #pragma unroll
                for (int j = 0; j < 8; j++) {
                    float xhat = x[j] * rs;
                    acc[j] += rs * (d[j] * wf[j] - xhat * mgx);
                    dw[k][j] += d[j] * xhat;
                }
                store_bf16x8(dinp + base + c, float_to_bf16x8(acc));
            }
        }
    }

    // Combine the warps in order 0, 1, ..., RMSB_WARPS-1 (each lane owns its columns).
    for (int i = 0; i < RMSB_WARPS; i++) {
        if (warp == i) {
            #pragma unroll
            for (int k = 0; k < NV; k++) {
                int c = (lane + 32 * k) * 8;
                if (c < C) {
                    #pragma unroll
                    for (int j = 0; j < 8; j++) block_sums[c + j] = i == 0 ? dw[k][j] : block_sums[c + j] + dw[k][j];
                }
            }
        }
        __syncthreads();
    }
    float* dst = partials + (size_t)blockIdx.x * C;
    for (int i = threadIdx.x; i < C; i += blockDim.x) dst[i] = block_sums[i];
}

// dinp (bf16) += dRMSNorm/dinp . dout (the fp32 sum of the old value and the gradient, rounded once); rms.dweight
// (fp32) += its gradient. rms.rstd: the forward's. scratch: at least rmsnorm_backward_scratch_bytes(N, C), 16-byte
// aligned, contents irrelevant.
void rmsnorm_backward(floatX* dinp, const floatX* dout, const floatX* inp, RMSNormTensors rms, void* scratch, int N,
                      int C, cudaStream_t s) {
    fail_if(C % 8 != 0 || C < 8 || C > 256 * RMS_MAX_NV, "rmsnorm_backward: C=%d must be a multiple of 8 in [8, %d]",
            C, 256 * RMS_MAX_NV);
    if (N <= 0) return;
    require_aligned16("rmsnorm_backward", dinp);
    require_aligned16("rmsnorm_backward", dout);
    require_aligned16("rmsnorm_backward", inp);
    require_aligned16("rmsnorm_backward", rms.weight);
    int G, rpb;
    rmsnorm_backward_grid(N, &G, &rpb);
    int nv = (int)ceil_div(C / 8, 32);
    size_t smem = (size_t)C * sizeof(float);
    float* partials = (float*)scratch;
    #define RMSB_CASE(K) case K: rmsnorm_backward_kernel<K><<<G, RMSB_WARPS * 32, smem, s>>>( \
        dinp, partials, dout, inp, rms.weight, rms.rstd, N, C, rpb); break;
    switch (nv) {
        RMSB_CASE(1) RMSB_CASE(2) RMSB_CASE(3) RMSB_CASE(4) RMSB_CASE(5) RMSB_CASE(6) RMSB_CASE(7) RMSB_CASE(8)
    }
    #undef RMSB_CASE
    cuda_check_last();
    column_sums_add(rms.dweight, partials, G, C, (size_t)C, s);
}
