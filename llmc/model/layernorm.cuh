// layernorm.cuh: LayerNorm forward (plain and fused with the residual add) and backward.
// defines: LayerNormTensors, layernorm_forward(), fused_residual_layernorm_forward(),
//          layernorm_backward_scratch_bytes(), layernorm_backward()
// y = (x - mean) * rstd * weight + bias, rstd = 1 / sqrt(var + 1e-5), biased variance, statistics
// in fp32 and saved per row for the backward pass.
// One warp per row; the row lives in registers (lane l holds 16-byte chunks l, l+32, ...), so each
// element is read from memory once. NV, the chunks per lane, is a template parameter: C <= 2048.
// Backward is deterministic: each block sums dweight/dbias over a fixed range of rows in registers,
// combines its warps in fixed order and writes one partial row; column_sums_add (reduce.cuh) adds
// the partial rows in order into the fp32 gradients.
#pragma once
#include "llmc/base/cuda_common.cuh"
#include "llmc/base/vec128.cuh"
#include "llmc/model/reduce.cuh"

#define LN_EPS 1e-5f
#define LN_WARPS 8            // rows per block in forward
#define LNB_WARPS 8           // warps per block in backward
#define LNB_MAX_BLOCKS 1024   // backward blocks (and scratch partial rows) at most
#define LN_MAX_NV 8           // C <= 8 * 32 * LN_MAX_NV = 2048

// One LayerNorm's tensors: its parameters (C each), their FP32 gradients (the backward adds to them; the forward
// ignores them) and the per-row statistics (N each) that the forward saves for the backward (NULL in a forward
// that saves nothing).
typedef struct {
    const floatX* weight;
    const floatX* bias;
    float* dweight;
    float* dbias;
    float* mean;
    float* rstd;
} LayerNormTensors;

// ---------------------------------------------------------------------------------------------
// forward. FUSED: x = bf16(inp1 + inp2) is written to residual and normalized; otherwise x = inp1.

template <int NV, bool FUSED>
__global__ void __launch_bounds__(LN_WARPS * 32)
layernorm_forward_kernel(floatX* residual, floatX* out, float* mean, float* rstd, const floatX* inp1,
                         const floatX* inp2, const floatX* weight, const floatX* bias, int N, int C) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * LN_WARPS + threadIdx.x / 32;
    if (row >= N) return;
    int cv = C / 8;
    size_t base = (size_t)row * C;
    float x[NV][8];
    float sum = 0.0f;
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
            for (int j = 0; j < 8; j++) sum += x[k][j];
        }
    }
    float m = warp_sum(sum) / C;
    float var = 0.0f;
    #pragma unroll
    for (int k = 0; k < NV; k++) {
        if ((lane + 32 * k) < cv) {
            #pragma unroll
            for (int j = 0; j < 8; j++) { float d = x[k][j] - m; var += d * d; }
        }
    }
    float rs = rsqrtf(warp_sum(var) / C + LN_EPS);
    #pragma unroll
    for (int k = 0; k < NV; k++) {
        int c = (lane + 32 * k) * 8;
        if (c < C) {
            float w[8], b[8], y[8];
            bf16x8_to_float(load_bf16x8(weight + c), w);
            bf16x8_to_float(load_bf16x8(bias + c), b);
            #pragma unroll
            for (int j = 0; j < 8; j++) y[j] = (x[k][j] - m) * rs * w[j] + b[j];
            store_bf16x8(out + base + c, float_to_bf16x8(y));
        }
    }
    if (lane == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = rs;
    }
}

template <bool FUSED>
static void layernorm_forward_launch(floatX* residual, floatX* out, const floatX* inp1, const floatX* inp2,
                                     LayerNormTensors ln, int N, int C, cudaStream_t s) {
    fail_if(C % 8 != 0 || C < 8 || C > 256 * LN_MAX_NV, "layernorm: C=%d must be a multiple of 8 in [8, %d]", C, 256 * LN_MAX_NV);
    if (N <= 0) return;
    const char* who = FUSED ? "fused_residual_layernorm_forward" : "layernorm_forward";
    require_aligned16(who, out);
    require_aligned16(who, inp1);
    require_aligned16(who, ln.weight);
    require_aligned16(who, ln.bias);
    if (FUSED) {
        require_aligned16(who, inp2);
        require_aligned16(who, residual);
    }
    int nv = (int)ceil_div(C / 8, 32);
    unsigned grid = (unsigned)ceil_div(N, LN_WARPS);
    #define LNF_CASE(K) case K: layernorm_forward_kernel<K, FUSED><<<grid, LN_WARPS * 32, 0, s>>>( \
        residual, out, ln.mean, ln.rstd, inp1, inp2, ln.weight, ln.bias, N, C); break;
    switch (nv) {
        LNF_CASE(1) LNF_CASE(2) LNF_CASE(3) LNF_CASE(4) LNF_CASE(5) LNF_CASE(6) LNF_CASE(7) LNF_CASE(8)
    }
    #undef LNF_CASE
    cuda_check_last();
}

// out = layernorm(inp) with ln's weight and bias; ln.mean and ln.rstd get the statistics, or are NULL (inference:
// nothing saved).
void layernorm_forward(floatX* out, const floatX* inp, LayerNormTensors ln, int N, int C, cudaStream_t s) {
    layernorm_forward_launch<false>(NULL, out, inp, NULL, ln, N, C, s);
}

// residual = bf16(inp1 + inp2); normed = layernorm(residual), in one pass over memory.
void fused_residual_layernorm_forward(floatX* residual, floatX* normed, const floatX* inp1, const floatX* inp2,
                                      LayerNormTensors ln, int N, int C, cudaStream_t s) {
    layernorm_forward_launch<true>(residual, normed, inp1, inp2, ln, N, C, s);
}

// ---------------------------------------------------------------------------------------------
// backward. Per row, with xhat = (x - mean) * rstd and g = dout * weight:
//   dinp += rstd * (g - mean(g) - xhat * mean(g * xhat))
//   dweight += dout * xhat,  dbias += dout
// Rows are split into G contiguous ranges of rows_per_block (a multiple of LNB_WARPS); warp w of a
// block takes rows w, w + LNB_WARPS, ... of its range. Both G and the ranges depend only on N.

static void layernorm_backward_grid(int N, int* G, int* rows_per_block) {
    int64_t per_warp = ceil_div(N, (int64_t)LNB_WARPS * LNB_MAX_BLOCKS);
    if (per_warp < 1) per_warp = 1;
    *rows_per_block = (int)(per_warp * LNB_WARPS);
    *G = (int)ceil_div(N, *rows_per_block);
    if (*G < 1) *G = 1;
}

// G <= min(LNB_MAX_BLOCKS, ceil(N / LNB_WARPS)); sized by that bound, nondecreasing in N and C.
size_t layernorm_backward_scratch_bytes(int N, int C) {
    int64_t g = ceil_div(N, LNB_WARPS);
    if (g > LNB_MAX_BLOCKS) g = LNB_MAX_BLOCKS;
    if (g < 1) g = 1;
    return (size_t)g * 2 * C * sizeof(float);
}

template <int NV>
__global__ void __launch_bounds__(LNB_WARPS * 32)
layernorm_backward_kernel(floatX* dinp, float* partials, const floatX* dout, const floatX* inp, const floatX* weight,
                          const float* mean, const float* rstd, int N, int C, int rows_per_block) {
    extern __shared__ float block_sums[];          // [2][C]: dweight, dbias of this block
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int cv = C / 8;
    float dw[NV][8], db[NV][8];
    #pragma unroll
    for (int k = 0; k < NV; k++)
        #pragma unroll
        for (int j = 0; j < 8; j++) { dw[k][j] = 0.0f; db[k][j] = 0.0f; }

    int row_end = min((int)(blockIdx.x + 1) * rows_per_block, N);
    for (int row = (int)blockIdx.x * rows_per_block + warp; row < row_end; row += LNB_WARPS) {
        size_t base = (size_t)row * C;
        float m = mean[row], rs = rstd[row];
        // All three row loads up front (dinp does not depend on the row sums), so one memory
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
        float sg = 0.0f, sgx = 0.0f;
        #pragma unroll
        for (int k = 0; k < NV; k++) {
            if (lane + 32 * k < cv) {
                float d[8], x[8], wf[8];
                bf16x8_to_float(dy[k], d);
                bf16x8_to_float(xin[k], x);
                bf16x8_to_float(load_bf16x8(weight + (lane + 32 * k) * 8), wf);
                #pragma unroll
                for (int j = 0; j < 8; j++) {
                    float g = d[j] * wf[j];
                    sg += g;
                    sgx += g * ((x[j] - m) * rs);
                }
            }
        }
        float mg = warp_sum(sg) / C, mgx = warp_sum(sgx) / C;
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
                    float xhat = (x[j] - m) * rs;
                    acc[j] += rs * (d[j] * wf[j] - mg - xhat * mgx);
                    dw[k][j] += d[j] * xhat;
                    db[k][j] += d[j];
                }
                store_bf16x8(dinp + base + c, float_to_bf16x8(acc));
            }
        }
    }

    // Combine the warps in order 0, 1, ..., LNB_WARPS-1 (each lane owns its columns).
    for (int i = 0; i < LNB_WARPS; i++) {
        if (warp == i) {
            #pragma unroll
            for (int k = 0; k < NV; k++) {
                int c = (lane + 32 * k) * 8;
                if (c < C) {
                    #pragma unroll
                    for (int j = 0; j < 8; j++) {
                        block_sums[c + j] = i == 0 ? dw[k][j] : block_sums[c + j] + dw[k][j];
                        block_sums[C + c + j] = i == 0 ? db[k][j] : block_sums[C + c + j] + db[k][j];
                    }
                }
            }
        }
        __syncthreads();
    }
    float* dst = partials + (size_t)blockIdx.x * 2 * C;
    for (int i = threadIdx.x; i < 2 * C; i += blockDim.x) dst[i] = block_sums[i];
}

// dinp (bf16) += dLN/dinp . dout; ln.dweight, ln.dbias (fp32) += their gradients, from inp and ln's weight, mean
// and rstd (the bias is not read). scratch: at least layernorm_backward_scratch_bytes(N, C), 16-byte aligned,
// contents irrelevant.
void layernorm_backward(floatX* dinp, const floatX* dout, const floatX* inp, LayerNormTensors ln, void* scratch, int N,
                        int C, cudaStream_t s) {
    fail_if(C % 8 != 0 || C < 8 || C > 256 * LN_MAX_NV, "layernorm_backward: C=%d must be a multiple of 8 in [8, %d]",
            C, 256 * LN_MAX_NV);
    if (N <= 0) return;
    require_aligned16("layernorm_backward", dinp);
    require_aligned16("layernorm_backward", dout);
    require_aligned16("layernorm_backward", inp);
    require_aligned16("layernorm_backward", ln.weight);
    int G, rpb;
    layernorm_backward_grid(N, &G, &rpb);
    int nv = (int)ceil_div(C / 8, 32);
    size_t smem = (size_t)2 * C * sizeof(float);
    float* partials = (float*)scratch;
    #define LNB_CASE(K) case K: layernorm_backward_kernel<K><<<G, LNB_WARPS * 32, smem, s>>>( \
        dinp, partials, dout, inp, ln.weight, ln.mean, ln.rstd, N, C, rpb); break;
    switch (nv) {
        LNB_CASE(1) LNB_CASE(2) LNB_CASE(3) LNB_CASE(4) LNB_CASE(5) LNB_CASE(6) LNB_CASE(7) LNB_CASE(8)
    }
    #undef LNB_CASE
    cuda_check_last();
    column_sums_add(ln.dweight, partials, G, C, (size_t)2 * C, s);
    column_sums_add(ln.dbias, partials + C, G, C, (size_t)2 * C, s);
}
