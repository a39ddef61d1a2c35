// attention_kernels.cuh: the program's own causal flash attention, forward and backward, BF16 in/out.
// defines: AttnBackwardIn, AttnFp4Io, attn_own_supported_head_size(), attn_own_forward(), attn_own_backward(),
//          attn_own_dsum(), attn_own_backward_ds(), attn_own_backward_grads()
// Used when cuDNN is absent or cannot build its graph. FlashAttention-2 structure (Dao 2023): each
// block owns a 64-row tile, four warps own 16 rows each, scores never leave registers, softmax is
// online (running max and sum), and the tensor-core MMA is mma.sync.m16n8k16 BF16 -> FP32 (sm_80+).
// The score accumulator's register layout equals the A-operand layout of the next MMA, so P and dS
// go from one MMA to the next without touching shared memory.
// Backward is deterministic: dK/dV come from one kernel (a block per key tile of a key/value head,
// looping over the query heads of its group and then over query tiles) and dQ from another (a block
// per query tile, looping over key tiles): every gradient element is summed by one thread in a fixed
// order, in FP32 registers, and rounded to BF16 once; no atomics. The cost is recomputing Q.K^T and
// dO.V^T in both kernels (7 tile GEMMs instead of 5).
// Grouped-query attention: NH query heads, KVH key/value heads (NH % KVH == 0); query head h reads
// key/value head h / (NH / KVH). KVH == NH is plain multi-head attention, and then every kernel runs
// with the same grid and the same arithmetic in the same order as before GQA existed (the group loop
// of the dK/dV kernel has one iteration), so the results are the same bits.
// Layouts: qkv and dqkv (B, T, NH + 2 KVH, HS): per token NH q heads, then KVH k heads, then KVH v
// heads; out and dout (B, T, NH, HS); stats and the backward's row sums (B, NH, T) float.
// stats = natural log-sum-exp of each scaled, masked score row.
// FP4 attention (attention_fp4.h, --attention-fp4): qkv then holds the quantized fake copies, and AttnFp4Io gives
// their FP32 tensor factors, applied to the accumulators (S, O, dP, dQ, dK), and the dS pass: the dQ kernel writes
// dS to memory instead of dQ, and the gradient kernels read its quantized copies instead of their own dS. Without
// FP4 every factor is exactly 1.0f, so every product and sum has the bits it had before FP4 existed.
#pragma once
#include <math.h>
#include "llmc/base/cuda_common.cuh"

#define ATTN_TILE 64                    // rows per block tile (queries or keys), and keys per step
#define ATTN_THREADS 128                // four warps, 16 tile rows each
#define ATTN_LOG2E 1.4426950408889634f
#define ATTN_LN2 0.6931471805599453f

static inline int attn_own_supported_head_size(int HS) { return HS == 32 || HS == 64 || HS == 128; }

// What the backward reads: the output's gradient dout and the forward's qkv, out and stats.
typedef struct {
    const floatX* dout;
    const floatX* qkv;
    const floatX* out;
    const float* stats;
} AttnBackwardIn;

// FP4 attention's extra operands; all NULL for BF16 attention.
typedef struct {
    const float* qkv_dec;   // device, 3 floats: the tensor dequantization factors of Q, K, V (qkv holds fake copies)
    floatX* ds_out;         // the dS pass: the dQ kernel writes dS (B, NH, T, T) in BF16 here, and no dQ
    const floatX* ds_rows;  // (B, NH, T, T): the quantized dS copy dQ reads instead of computing dS
    const floatX* ds_cols;  // the copy dK reads
    const float* ds_dec;    // device, 2 floats: the factors of ds_rows and ds_cols
} AttnFp4Io;

// The factor at i of a device array, or exactly 1 without one (read once per block, so no host sync is needed).
__device__ __forceinline__ float attn_factor(const float* f, int i) { return f ? f[i] : 1.0f; }

// ----------------------------------------------------------------------------------------------
// device helpers

// d += a * b for one 16x8x16 tile; a: 16x16 row-major fragment, b: 16x8 column fragment (PTX ISA
// "mma.m16n8k16" fragment layouts). With g = lane/4, t = lane%4:
//   a regs: {A[g][2t..], A[g+8][2t..], A[g][2t+8..], A[g+8][2t+8..]}
//   b regs: {B[2t..][g], B[2t+8..][g]}        c/d: {C[g][2t], C[g][2t+1], C[g+8][2t], C[g+8][2t+1]}
__device__ __forceinline__ void attn_mma(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two consecutive BF16 from shared memory as one 32-bit word (lower address in the low half).
__device__ __forceinline__ uint32_t attn_ld2(const floatX* s, int offset) {
    return *reinterpret_cast<const uint32_t*>(s + offset);
}
__device__ __forceinline__ uint32_t attn_pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}

// A-operand fragment of the 16 x 16 block at (row0, col0) of a row-major shared tile.
__device__ __forceinline__ void attn_ld_a(uint32_t a[4], const floatX* s, int ld, int row0, int col0) {
    const int g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
    a[0] = attn_ld2(s, (row0 + g) * ld + col0 + 2 * t);
    a[1] = attn_ld2(s, (row0 + g + 8) * ld + col0 + 2 * t);
    a[2] = attn_ld2(s, (row0 + g) * ld + col0 + 8 + 2 * t);
    a[3] = attn_ld2(s, (row0 + g + 8) * ld + col0 + 8 + 2 * t);
}

// Score-layout accumulators of n-tiles 2kk and 2kk+1 (16 rows x 16 cols) as an A-operand fragment.
__device__ __forceinline__ void attn_c_to_a(uint32_t a[4], const float c0[4], const float c1[4]) {
    a[0] = attn_pack(c0[0], c0[1]);
    a[1] = attn_pack(c0[2], c0[3]);
    a[2] = attn_pack(c1[0], c1[1]);
    a[3] = attn_pack(c1[2], c1[3]);
}

// acc[16 x 64] = A (16 x HS, fragments in registers) . S^T, where S is a row-major shared tile of 64
// rows x HS: the "row times row" product used for Q.K^T, K.Q^T, dO.V^T and V.dO^T.
template <int HS>
__device__ __forceinline__ void attn_mma_rows(float acc[8][4], const uint32_t a[HS / 16][4], const floatX* s, int ld) {
    const int g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
    #pragma unroll
    for (int n = 0; n < 8; n++) {
        acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
        #pragma unroll
        for (int ks = 0; ks < HS / 16; ks++)
            attn_mma(acc[n], a[ks], attn_ld2(s, (n * 8 + g) * ld + ks * 16 + 2 * t),
                     attn_ld2(s, (n * 8 + g) * ld + ks * 16 + 8 + 2 * t));
    }
}

// acc[16 x HS] += P (16 x 64, score layout) . M, where M (64 x HS) is stored transposed in shared
// memory (st: HS rows x 64, leading dimension ldt).
template <int HS>
__device__ __forceinline__ void attn_mma_pv(float acc[HS / 8][4], const float p[8][4], const floatX* st, int ldt) {
    const int g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
    #pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        uint32_t a[4];
        attn_c_to_a(a, p[2 * kk], p[2 * kk + 1]);
        #pragma unroll
        for (int n = 0; n < HS / 8; n++)
            attn_mma(acc[n], a, attn_ld2(st, (n * 8 + g) * ldt + kk * 16 + 2 * t),
                     attn_ld2(st, (n * 8 + g) * ldt + kk * 16 + 8 + 2 * t));
    }
}

// Copies rows [row0, row0 + 64) of one head's HS-wide slice (row stride `stride` elements) into
// shared memory, row-major (dst, leading dimension ld) and/or transposed (dst_t, leading dimension
// ldt); rows at or past T become zeros, so padded keys and queries contribute nothing (and no NaN).
template <int HS>
__device__ __forceinline__ void attn_load_tile(floatX* dst, int ld, floatX* dst_t, int ldt,
                                               const floatX* src, int stride, int row0, int T) {
    constexpr int VPR = HS / 8;         // 16-byte vectors per row
    for (int idx = threadIdx.x; idx < ATTN_TILE * VPR; idx += ATTN_THREADS) {
        const int r = idx / VPR, c = (idx % VPR) * 8;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (row0 + r < T) v = *reinterpret_cast<const uint4*>(src + (size_t)(row0 + r) * stride + c);
        if (dst) *reinterpret_cast<uint4*>(dst + r * ld + c) = v;
        if (dst_t) {
            const floatX* e = reinterpret_cast<const floatX*>(&v);
            #pragma unroll
            for (int i = 0; i < 8; i++) dst_t[(c + i) * ldt + r] = e[i];
        }
    }
}

__device__ __forceinline__ float attn_quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float attn_quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// ----------------------------------------------------------------------------------------------
// kernels

// Forward. grid (ceil(T/64), B*NH): a block per query tile of a query head; block 128. Heaviest query
// tiles (most keys) launch first. The block reads K and V of its query head's key/value head.
template <int HS>
__global__ void __launch_bounds__(ATTN_THREADS)
attn_own_forward_kernel(floatX* out, float* stats, const floatX* qkv, int T, int NH, int KVH, float scale_log2,
                        const float* qkv_dec) {
    constexpr int LD = HS + 8, LDT = ATTN_TILE + 8, KS = HS / 16, NS = HS / 8;  // +8: no bank conflicts
    extern __shared__ __align__(16) unsigned char attn_smem[];
    floatX* sQ = reinterpret_cast<floatX*>(attn_smem);   // 64 x LD
    floatX* sK = sQ + ATTN_TILE * LD;                      // 64 x LD
    floatX* sVt = sK + ATTN_TILE * LD;                     // HS x LDT (V transposed)

    const int qt = gridDim.x - 1 - blockIdx.x, q0 = qt * ATTN_TILE;
    const int b = blockIdx.y / NH, h = blockIdx.y % NH, C = NH * HS, stride = (NH + 2 * KVH) * HS;
    const int kvh = h / (NH / KVH);
    const floatX* q = qkv + (size_t)b * T * stride + h * HS;
    const floatX* k = qkv + (size_t)b * T * stride + C + kvh * HS;   // KVH == NH: q + C
    const floatX* v = k + KVH * HS;                                  // KVH == NH: q + 2 C
    const int warp = threadIdx.x / 32, g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
    const int row0 = q0 + warp * 16 + g, row1 = row0 + 8;
    scale_log2 = scale_log2 * (attn_factor(qkv_dec, 0) * attn_factor(qkv_dec, 1));   // FP4: S = s dec_q dec_k Q.K^T
    const float dec_v = attn_factor(qkv_dec, 2);

    attn_load_tile<HS>(sQ, LD, nullptr, 0, q, stride, q0, T);
    __syncthreads();
    uint32_t qf[KS][4];
    #pragma unroll
    for (int ks = 0; ks < KS; ks++) attn_ld_a(qf[ks], sQ, LD, warp * 16, ks * 16);

    float o[NS][4];
    #pragma unroll
    for (int n = 0; n < NS; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;   // log2-domain running max; sum

    for (int kt = 0; kt <= qt; kt++) {
        __syncthreads();
        attn_load_tile<HS>(sK, LD, nullptr, 0, k, stride, kt * ATTN_TILE, T);
        attn_load_tile<HS>(nullptr, 0, sVt, LDT, v, stride, kt * ATTN_TILE, T);
        __syncthreads();
        float s[8][4];
        attn_mma_rows<HS>(s, qf, sK, LD);
        float mx0 = -INFINITY, mx1 = -INFINITY;
        #pragma unroll
        for (int n = 0; n < 8; n++) {
            #pragma unroll
            for (int e = 0; e < 4; e++) {
                const int col = kt * ATTN_TILE + n * 8 + 2 * t + (e & 1);
                float x = s[n][e] * scale_log2;
                if (col > (e < 2 ? row0 : row1)) x = -INFINITY;   // only the diagonal tile masks
                s[n][e] = x;
            }
            mx0 = fmaxf(mx0, fmaxf(s[n][0], s[n][1]));
            mx1 = fmaxf(mx1, fmaxf(s[n][2], s[n][3]));
        }
        // every row sees key 0 in tile 0, so the running max is finite from the first step on
        const float mn0 = fmaxf(m0, attn_quad_max(mx0)), mn1 = fmaxf(m1, attn_quad_max(mx1));
        const float a0 = exp2f(m0 - mn0), a1 = exp2f(m1 - mn1);
        m0 = mn0; m1 = mn1;
        float r0 = 0.0f, r1 = 0.0f;
        #pragma unroll
        for (int n = 0; n < 8; n++) {
            s[n][0] = exp2f(s[n][0] - m0); s[n][1] = exp2f(s[n][1] - m0);
            s[n][2] = exp2f(s[n][2] - m1); s[n][3] = exp2f(s[n][3] - m1);
            r0 += s[n][0] + s[n][1];
            r1 += s[n][2] + s[n][3];
        }
        l0 = l0 * a0 + r0;                  // per-thread partial sums; a0 is uniform across the quad
        l1 = l1 * a1 + r1;
        #pragma unroll
        for (int n = 0; n < NS; n++) { o[n][0] *= a0; o[n][1] *= a0; o[n][2] *= a1; o[n][3] *= a1; }
        attn_mma_pv<HS>(o, s, sVt, LDT);
    }
    l0 = attn_quad_sum(l0);
    l1 = attn_quad_sum(l1);
    const float inv0 = 1.0f / l0 * dec_v, inv1 = 1.0f / l1 * dec_v;   // O = P.(V dec_v)
    floatX* ob = out + (size_t)b * T * C + h * HS;
    #pragma unroll
    for (int n = 0; n < NS; n++) {
        if (row0 < T) *reinterpret_cast<uint32_t*>(ob + (size_t)row0 * C + n * 8 + 2 * t) = attn_pack(o[n][0] * inv0, o[n][1] * inv0);
        if (row1 < T) *reinterpret_cast<uint32_t*>(ob + (size_t)row1 * C + n * 8 + 2 * t) = attn_pack(o[n][2] * inv1, o[n][3] * inv1);
    }
    if (t == 0) {
        float* st = stats + (size_t)blockIdx.y * T;
        if (row0 < T) st[row0] = m0 * ATTN_LN2 + logf(l0);
        if (row1 < T) st[row1] = m1 * ATTN_LN2 + logf(l1);
    }
}

// Backward step 1: dsum[b, h, t] = sum_d dout . out (the "D" of FlashAttention-2). One warp per row.
__global__ void attn_own_dsum_kernel(float* dsum, const floatX* dout, const floatX* out, int B, int T, int NH, int HS) {
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;   // (b, t, h) in memory order
    if (row >= B * T * NH) return;
    const int lane = threadIdx.x % 32;
    const floatX* a = dout + (size_t)row * HS;
    const floatX* c = out + (size_t)row * HS;
    float acc = 0.0f;
    for (int d = 2 * lane; d < HS; d += 64) {
        const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(a + d));
        const float2 y = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(c + d));
        acc += x.x * y.x + x.y * y.y;
    }
    for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) {
        const int h = row % NH, bt = row / NH, b = bt / T, t = bt % T;
        dsum[((size_t)b * NH + h) * T + t] = acc;
    }
}

// Backward step 2: dK and dV. grid (ceil(T/64), B*KVH): a block per key tile of a key/value head,
// looping over the NH/KVH query heads of its group (in head order) and, for each, over the query
// tiles at or below the diagonal. Works in the transposed frame: S^T = K.Q^T, dP^T = V.dO^T, so the
// key rows stay in registers and dV = P^T.dO, dK = dS^T.Q accumulate in FP32 registers over the whole
// group, rounded to BF16 once at the end.
template <int HS>
__global__ void __launch_bounds__(ATTN_THREADS)
attn_own_backward_dkdv_kernel(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* stats,
                              const float* dsum, int T, int NH, int KVH, float scale, float scale_log2, AttnFp4Io io) {
    constexpr int LD = HS + 8, LDT = ATTN_TILE + 8, KS = HS / 16, NS = HS / 8;
    extern __shared__ __align__(16) unsigned char attn_smem[];
    floatX* sQ = reinterpret_cast<floatX*>(attn_smem);   // 64 x LD
    floatX* sdO = sQ + ATTN_TILE * LD;                     // 64 x LD
    floatX* sQt = sdO + ATTN_TILE * LD;                    // HS x LDT
    floatX* sdOt = sQt + HS * LDT;                         // HS x LDT
    float* sL = reinterpret_cast<float*>(sdOt + HS * LDT); // 64: log2-domain lse of the query tile
    float* sD = sL + ATTN_TILE;                            // 64: dsum of the query tile

    const int kt = blockIdx.x, k0 = kt * ATTN_TILE;
    const int b = blockIdx.y / KVH, kvh = blockIdx.y % KVH, group = NH / KVH;
    const int C = NH * HS, stride = (NH + 2 * KVH) * HS;
    const floatX* qb = qkv + (size_t)b * T * stride;                 // token 0 of batch row b
    const floatX* k = qb + C + kvh * HS;
    const floatX* v = k + KVH * HS;
    const int warp = threadIdx.x / 32, g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
    const int key0 = k0 + warp * 16 + g, key1 = key0 + 8;
    const float dec_q = attn_factor(io.qkv_dec, 0), dec_v = attn_factor(io.qkv_dec, 2);
    scale_log2 = scale_log2 * (dec_q * attn_factor(io.qkv_dec, 1));
    const float dk_scale = scale * (dec_q * attn_factor(io.ds_cols ? io.ds_dec : nullptr, 1));   // dK = s dec_ds dec_q dS^T.Q

    // this block's K and V rows as A fragments (staged through the Q / dO buffers)
    attn_load_tile<HS>(sQ, LD, nullptr, 0, k, stride, k0, T);
    attn_load_tile<HS>(sdO, LD, nullptr, 0, v, stride, k0, T);
    __syncthreads();
    uint32_t kf[KS][4], vf[KS][4];
    #pragma unroll
    for (int ks = 0; ks < KS; ks++) {
        attn_ld_a(kf[ks], sQ, LD, warp * 16, ks * 16);
        attn_ld_a(vf[ks], sdO, LD, warp * 16, ks * 16);
    }
    float dk[NS][4], dv[NS][4];
    #pragma unroll
    for (int n = 0; n < NS; n++)
        for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.0f;

    const int nq = (T + ATTN_TILE - 1) / ATTN_TILE;
    for (int hg = 0; hg < group; hg++) {          // the query heads of this key/value head, in order
        const int h = kvh * group + hg;
        const floatX* q = qb + h * HS;
        const floatX* dob = dout + (size_t)b * T * C + h * HS;
        const float* L = stats + ((size_t)b * NH + h) * T;
        const float* Dr = dsum + ((size_t)b * NH + h) * T;
        for (int qt = kt; qt < nq; qt++) {
            const int q0 = qt * ATTN_TILE;
            __syncthreads();
            attn_load_tile<HS>(sQ, LD, sQt, LDT, q, stride, q0, T);
            attn_load_tile<HS>(sdO, LD, sdOt, LDT, dob, C, q0, T);
            if (threadIdx.x < ATTN_TILE) {
                const int i = q0 + threadIdx.x;
                sL[threadIdx.x] = i < T ? L[i] * ATTN_LOG2E : 0.0f;
                sD[threadIdx.x] = i < T ? Dr[i] : 0.0f;
            }
            __syncthreads();
            float p[8][4], ds[8][4];
            attn_mma_rows<HS>(p, kf, sQ, LD);     // S^T (unscaled)
            if (!io.ds_cols) attn_mma_rows<HS>(ds, vf, sdO, LD);   // dP^T
            const floatX* dsq = io.ds_cols ? io.ds_cols + ((size_t)b * NH + h) * T * T : nullptr;   // FP4: (i, j) at i T + j
            #pragma unroll
            for (int n = 0; n < 8; n++) {
                #pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int il = n * 8 + 2 * t + (e & 1), i = q0 + il, j = e < 2 ? key0 : key1;
                    const float pv = (i >= j && i < T) ? exp2f(p[n][e] * scale_log2 - sL[il]) : 0.0f;
                    p[n][e] = pv;
                    if (io.ds_cols) ds[n][e] = (i >= j && i < T) ? __bfloat162float(dsq[(size_t)i * T + j]) : 0.0f;
                    else ds[n][e] = pv * (ds[n][e] * dec_v - sD[il]);
                }
            }
            attn_mma_pv<HS>(dv, p, sdOt, LDT);    // dV += P^T . dO
            attn_mma_pv<HS>(dk, ds, sQt, LDT);    // dK += dS^T . Q   (scale applied at the end)
        }
    }
    #pragma unroll
    for (int n = 0; n < NS; n++) {
        // dK at column C + kvh HS of the token's row, dV KVH HS further (KVH == NH: C + h HS, 2 C + h HS)
        floatX* d0 = dqkv + ((size_t)b * T + key0) * stride + C + kvh * HS + n * 8 + 2 * t;
        floatX* d1 = dqkv + ((size_t)b * T + key1) * stride + C + kvh * HS + n * 8 + 2 * t;
        if (key0 < T) {
            *reinterpret_cast<uint32_t*>(d0) = attn_pack(dk[n][0] * dk_scale, dk[n][1] * dk_scale);
            *reinterpret_cast<uint32_t*>(d0 + KVH * HS) = attn_pack(dv[n][0], dv[n][1]);
        }
        if (key1 < T) {
            *reinterpret_cast<uint32_t*>(d1) = attn_pack(dk[n][2] * dk_scale, dk[n][3] * dk_scale);
            *reinterpret_cast<uint32_t*>(d1 + KVH * HS) = attn_pack(dv[n][2], dv[n][3]);
        }
    }
}

// Backward step 3: dQ. grid (ceil(T/64), B*NH): a block per query tile of a query head, looping over
// the key tiles (of its key/value head) up to the diagonal; dQ = scale * dS.K accumulates in registers.
// FP4's dS pass (io.ds_out): the same blocks write dS (zeros above the diagonal) and no dQ; with io.ds_rows, dQ
// reads dS from that quantized copy.
template <int HS>
__global__ void __launch_bounds__(ATTN_THREADS)
attn_own_backward_dq_kernel(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* stats,
                            const float* dsum, int T, int NH, int KVH, float scale, float scale_log2, AttnFp4Io io) {
    constexpr int LD = HS + 8, LDT = ATTN_TILE + 8, KS = HS / 16, NS = HS / 8;
    extern __shared__ __align__(16) unsigned char attn_smem[];
    floatX* sK = reinterpret_cast<floatX*>(attn_smem);   // 64 x LD
    floatX* sV = sK + ATTN_TILE * LD;                      // 64 x LD
    floatX* sKt = sV + ATTN_TILE * LD;                     // HS x LDT

    const int qt = gridDim.x - 1 - blockIdx.x, q0 = qt * ATTN_TILE;
    const int b = blockIdx.y / NH, h = blockIdx.y % NH, C = NH * HS, stride = (NH + 2 * KVH) * HS;
    const int kvh = h / (NH / KVH);
    const floatX* q = qkv + (size_t)b * T * stride + h * HS;
    const floatX* k = qkv + (size_t)b * T * stride + C + kvh * HS;   // KVH == NH: q + C
    const floatX* v = k + KVH * HS;                                  // KVH == NH: q + 2 C
    const floatX* dob = dout + (size_t)b * T * C + h * HS;
    const int warp = threadIdx.x / 32, g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
    const int row0 = q0 + warp * 16 + g, row1 = row0 + 8;
    const float dec_k = attn_factor(io.qkv_dec, 1), dec_v = attn_factor(io.qkv_dec, 2);
    scale_log2 = scale_log2 * (attn_factor(io.qkv_dec, 0) * dec_k);
    const float dq_scale = scale * (dec_k * attn_factor(io.ds_rows ? io.ds_dec : nullptr, 0));   // dQ = s dec_ds dec_k dS.K
    const size_t ds_base = (size_t)blockIdx.y * T * T;   // (b, h)'s T x T slice of ds_out / ds_rows

    attn_load_tile<HS>(sK, LD, nullptr, 0, q, stride, q0, T);      // Q rows, staged
    attn_load_tile<HS>(sV, LD, nullptr, 0, dob, C, q0, T);         // dO rows, staged
    __syncthreads();
    uint32_t qf[KS][4], df[KS][4];
    #pragma unroll
    for (int ks = 0; ks < KS; ks++) {
        attn_ld_a(qf[ks], sK, LD, warp * 16, ks * 16);
        attn_ld_a(df[ks], sV, LD, warp * 16, ks * 16);
    }
    const float* L = stats + (size_t)blockIdx.y * T;
    const float* Dr = dsum + (size_t)blockIdx.y * T;
    const float lse0 = row0 < T ? L[row0] * ATTN_LOG2E : 0.0f, lse1 = row1 < T ? L[row1] * ATTN_LOG2E : 0.0f;
    const float D0 = row0 < T ? Dr[row0] : 0.0f, D1 = row1 < T ? Dr[row1] : 0.0f;
    float dq[NS][4];
    #pragma unroll
    for (int n = 0; n < NS; n++) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;

    for (int kt = 0; kt <= qt; kt++) {
        __syncthreads();
        attn_load_tile<HS>(sK, LD, sKt, LDT, k, stride, kt * ATTN_TILE, T);
        attn_load_tile<HS>(sV, LD, nullptr, 0, v, stride, kt * ATTN_TILE, T);
        __syncthreads();
        float s[8][4], dp[8][4];
        if (!io.ds_rows) {
            attn_mma_rows<HS>(s, qf, sK, LD);
            attn_mma_rows<HS>(dp, df, sV, LD);
        }
        #pragma unroll
        for (int n = 0; n < 8; n++) {
            #pragma unroll
            for (int e = 0; e < 4; e++) {
                const int col = kt * ATTN_TILE + n * 8 + 2 * t + (e & 1);
                const bool lo = e < 2;
                const int row = lo ? row0 : row1;
                if (io.ds_rows) {   // FP4: the quantized copy (zero above the diagonal)
                    s[n][e] = row < T && col < T ? __bfloat162float(io.ds_rows[ds_base + (size_t)row * T + col]) : 0.0f;
                    continue;
                }
                const float pv = col <= row ? exp2f(s[n][e] * scale_log2 - (lo ? lse0 : lse1)) : 0.0f;
                s[n][e] = pv * (dp[n][e] * dec_v - (lo ? D0 : D1));   // dS
                if (io.ds_out && row < T && col < T)
                    io.ds_out[ds_base + (size_t)row * T + col] = __float2bfloat16_rn(col <= row ? s[n][e] : 0.0f);
            }
        }
        if (!io.ds_out) attn_mma_pv<HS>(dq, s, sKt, LDT);
    }
    if (io.ds_out) return;
    #pragma unroll
    for (int n = 0; n < NS; n++) {
        if (row0 < T) *reinterpret_cast<uint32_t*>(dqkv + ((size_t)b * T + row0) * stride + h * HS + n * 8 + 2 * t) = attn_pack(dq[n][0] * dq_scale, dq[n][1] * dq_scale);
        if (row1 < T) *reinterpret_cast<uint32_t*>(dqkv + ((size_t)b * T + row1) * stride + h * HS + n * 8 + 2 * t) = attn_pack(dq[n][2] * dq_scale, dq[n][3] * dq_scale);
    }
}

// ----------------------------------------------------------------------------------------------
// launchers

// Dynamic shared memory above 48 KiB needs a one-time opt-in per kernel instance.
template <typename K>
static void attn_smem_opt_in(K kernel, size_t bytes, bool* done) {
    if (*done) return;
    cuda_check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    *done = true;
}

template <int HS>
static void attn_own_forward_hs(floatX* out, float* stats, const floatX* qkv, int B, int T, int NH, int KVH,
                                const float* qkv_dec, cudaStream_t stream) {
    const size_t smem = (size_t)(2 * ATTN_TILE * (HS + 8) + HS * (ATTN_TILE + 8)) * sizeof(floatX);
    static bool opted = false;
    attn_smem_opt_in(attn_own_forward_kernel<HS>, smem, &opted);
    const float scale_log2 = ATTN_LOG2E / sqrtf((float)HS);
    dim3 grid((unsigned)ceil_div(T, ATTN_TILE), (unsigned)(B * NH));
    attn_own_forward_kernel<HS><<<grid, ATTN_THREADS, smem, stream>>>(out, stats, qkv, T, NH, KVH, scale_log2, qkv_dec);
    cuda_check_last();
}

// The backward kernels after attn_own_dsum: which = 1 the dK/dV kernel, 2 the dQ kernel (or, with io.ds_out, the
// dS pass), 3 both.
template <int HS>
static void attn_own_backward_hs(floatX* dqkv, AttnBackwardIn in, const float* dsum, int B, int T, int NH, int KVH,
                                 AttnFp4Io io, int which, cudaStream_t stream) {
    const float scale = 1.0f / sqrtf((float)HS), scale_log2 = scale * ATTN_LOG2E;
    dim3 grid_kv((unsigned)ceil_div(T, ATTN_TILE), (unsigned)(B * KVH));   // a block per key tile of a kv head
    dim3 grid_q((unsigned)ceil_div(T, ATTN_TILE), (unsigned)(B * NH));     // a block per query tile of a q head
    if (which & 1) {
        const size_t smem_kv = (size_t)(2 * ATTN_TILE * (HS + 8) + 2 * HS * (ATTN_TILE + 8)) * sizeof(floatX) + 2 * ATTN_TILE * sizeof(float);
        static bool opted_kv = false;
        attn_smem_opt_in(attn_own_backward_dkdv_kernel<HS>, smem_kv, &opted_kv);
        attn_own_backward_dkdv_kernel<HS><<<grid_kv, ATTN_THREADS, smem_kv, stream>>>(dqkv, in.dout, in.qkv, in.stats, dsum, T, NH, KVH, scale, scale_log2, io);
        cuda_check_last();
    }
    if (which & 2) {
        const size_t smem_q = (size_t)(2 * ATTN_TILE * (HS + 8) + HS * (ATTN_TILE + 8)) * sizeof(floatX);
        static bool opted_q = false;
        attn_smem_opt_in(attn_own_backward_dq_kernel<HS>, smem_q, &opted_q);
        attn_own_backward_dq_kernel<HS><<<grid_q, ATTN_THREADS, smem_q, stream>>>(dqkv, in.dout, in.qkv, in.stats, dsum, T, NH, KVH, scale, scale_log2, io);
        cuda_check_last();
    }
}

// qkv (B, T, NH + 2 KVH, HS); NH % KVH == 0 (checked by the caller, attention.cuh). qkv_dec: NULL, or FP4's
// factors (AttnFp4Io).
static void attn_own_forward(floatX* out, float* stats, const floatX* qkv, int B, int T, int NH, int KVH, int HS,
                             cudaStream_t stream, const float* qkv_dec = nullptr) {
    switch (HS) {
        case 32: attn_own_forward_hs<32>(out, stats, qkv, B, T, NH, KVH, qkv_dec, stream); break;
        case 64: attn_own_forward_hs<64>(out, stats, qkv, B, T, NH, KVH, qkv_dec, stream); break;
        case 128: attn_own_forward_hs<128>(out, stats, qkv, B, T, NH, KVH, qkv_dec, stream); break;
        default: fail("attention: head size %d is not supported by the own kernel (32, 64 or 128)", HS);
    }
}

// Backward step 1 for all rows: dsum, scratch of B*NH*T floats.
static void attn_own_dsum(float* dsum, AttnBackwardIn in, int B, int T, int NH, int HS, cudaStream_t stream) {
    const int rows = B * T * NH, warps_per_block = 8;
    attn_own_dsum_kernel<<<(unsigned)ceil_div(rows, warps_per_block), 32 * warps_per_block, 0, stream>>>(dsum, in.dout, in.out, B, T, NH, HS);
    cuda_check_last();
}

static void attn_own_backward_which(floatX* dqkv, AttnBackwardIn in, const float* dsum, int B, int T, int NH, int KVH, int HS,
                                    AttnFp4Io io, int which, cudaStream_t stream) {
    fail_if(!attn_own_supported_head_size(HS), "attention: head size %d is not supported by the own kernel (32, 64 or 128)", HS);
    switch (HS) {
        case 32: attn_own_backward_hs<32>(dqkv, in, dsum, B, T, NH, KVH, io, which, stream); break;
        case 64: attn_own_backward_hs<64>(dqkv, in, dsum, B, T, NH, KVH, io, which, stream); break;
        case 128: attn_own_backward_hs<128>(dqkv, in, dsum, B, T, NH, KVH, io, which, stream); break;
    }
}

// FP4's dS pass (after attn_own_dsum): ds (B, NH, T, T) BF16, every element written (zeros above the diagonal).
static void attn_own_backward_ds(floatX* ds, AttnBackwardIn in, const float* dsum, int B, int T, int NH, int KVH, int HS,
                                 const float* qkv_dec, cudaStream_t stream) {
    cuda_check(cudaMemsetAsync(ds, 0, (size_t)B * NH * T * T * sizeof(floatX), stream));   // the tiles above the diagonal
    AttnFp4Io io = {};
    io.qkv_dec = qkv_dec;
    io.ds_out = ds;
    attn_own_backward_which(nullptr, in, dsum, B, T, NH, KVH, HS, io, 2, stream);
}

// dQ, dK, dV (after attn_own_dsum, and with io.ds_rows / ds_cols after the dS pass and its quantization).
static void attn_own_backward_grads(floatX* dqkv, AttnBackwardIn in, const float* dsum, int B, int T, int NH, int KVH, int HS,
                                    AttnFp4Io io, cudaStream_t stream) {
    attn_own_backward_which(dqkv, in, dsum, B, T, NH, KVH, HS, io, 3, stream);
}

// dsum: scratch of B*NH*T floats. dqkv: every element written (dK and dV of a key/value head hold the
// sums over its NH/KVH query heads), none accumulated into.
static void attn_own_backward(floatX* dqkv, AttnBackwardIn in, float* dsum, int B, int T, int NH, int KVH, int HS,
                              cudaStream_t stream) {
    fail_if(!attn_own_supported_head_size(HS), "attention: head size %d is not supported by the own kernel (32, 64 or 128)", HS);
    attn_own_dsum(dsum, in, B, T, NH, HS, stream);
    attn_own_backward_grads(dqkv, in, dsum, B, T, NH, KVH, HS, AttnFp4Io{}, stream);
}
