// fold.cuh: the GPU quantizer's FP8 fold kernels (E8M0-scaled copies folded into E4M3 for FP8 GEMMs, fp8_fold.h):
// qf_rowfold_kernel (row-wise copies in one read, with the amax pass's work for every target of the call) and
// qf_colfold_kernel (column-wise 1D copies through the tile pipeline; its TWO_D form 32 x 32 copies of either axis,
// both of a pair from one read), the packed-BF16 fold arithmetic they share, and their launchers.
// defines: qf_rowfold_kernel, qf_colfold_kernel, qf_launch_rowfold(), qf_launch_colfold(), qf_launch_colfold_n(),
//          qf_launch_fold2d(), qf_e8m0_exponent(), qf_fold_fast2(), qf_fold_scale(), QFGrid2, qf_grid2(), qf_bf2_*(),
//          qf_e4m3x2(), qf_bf16_pow2()
//
// On the FP8 path, row-wise copies in 1D blocks without a
// Hadamard, rounded to nearest, are made in one read (qf_rowfold_kernel), and the column-wise ones by
// qf_colfold_kernel (a lane owns whole column blocks); its TWO_D form makes 32 x 32-block copies of either
// axis, both copies of a pair (mxfp4-2d's dY) from one read.
#pragma once
#include <type_traits>
#include <cuda_fp8.h>
#include "llmc/base/cuda_common.cuh"
#include "llmc/fp4/formats.h"
#include "llmc/fp4/fp8_fold.h"
#include "llmc/fp4/quant/element.cuh"
#include "llmc/fp4/quant/kernel_args.cuh"
#include "llmc/fp4/quant/lane_ops.cuh"
#include "llmc/fp4/quant/tile_pipeline.cuh"

// ---------------------------------------------------------------------------------------------------
// Row-wise FP8 copies in one pass (mxfp4's fprop X and dgrad dY on the FP8 path): the amax pass and the
// apply pass of qf_apply_axis1<0, false, QF_OUT_FP8> in one kernel, the same bytes (qf_bf2_fold). A row's offset
// (fp8_fold.h) needs only that row's maximum, so a warp that holds whole rows in registers takes it there
// and folds them without reading the tensor again: 2 bytes read and 1 written per element instead of 2 + 2
// + 1. Lane l holds columns (32 j + l) * 8 + [0, 8) of each of its RPW rows for chunks j < NCH (coalesced
// 512-byte loads; a 1x32 block is 4 lanes of one chunk, a 1x16 block 2). The same read also takes what the
// amax pass takes for a column-wise FP8 1D target of the same source without a Hadamard (the other copy of
// the pass, or one taken ahead for the backward): its tensor amax and per-row maxima (the columns' maxima
// here), gathered per warp in shared memory and flushed once per CTA. Round to nearest, 1D blocks, rows of
// at most 20 chunks (5120 columns); the rest runs as two passes (route.h: QK_ROWFOLD). test_fp8_fold checks both
// paths against the CPU twin bit for bit (bytes, row scales, blocks below the window) and their amax and
// per-row maxima against the input's exact maxima.
#define QF_RF_CHUNK 256   // columns per chunk (32 lanes x 8)

// e8m0_exponent of a finite block amax (magnitude bits m) without its loop and branches: an FP32 subnormal
// (a BF16 subnormal block) normalized with a leading-zero count. test_fp8_fold checks it against
// e8m0_exponent for every BF16 magnitude, grid and rule.
__device__ __forceinline__ int qf_e8m0_exponent(uint32_t m, const GridTraits& g, bool ceil_rule) {
    const bool sub = m < 0x00800000u;
    const int p = 31 - __clz(m | 1u);   // a subnormal's leading one
    const int E = sub ? p - 149 : (int)(m >> 23) - 127;
    const uint32_t mant = (sub ? m << (23 - p) : m) & 0x7FFFFFu;
    const int e = E - g.emax + (ceil_rule && mant > g.max_mant);
    return m == 0 ? -127 : max(-127, min(127, e));
}
// A fast-path word (two BF16 values) -> its two E4M3 bytes, for a block of exponent e (binv = 2^-e) in a row of
// offset o: the code values' magnitudes |q| (qf_fast_mags) times so = qf_fold_scale(e, o) = 2^max(e - o, -30),
// with the input's signs, converted as qf_fold2 converts the fake word times 2^-o. The same bytes: |q| 2^e (the
// fake value, exact) times 2^-o is |q| 2^(e - o), exact in FP32 (|q| has at most 3 significant bits) where
// e - o >= -30, and where e - o < -30 both it and |q| 2^-30 lie below 2^-10 and convert to a zero of the
// input's sign; e - o <= 126 (fast blocks have e <= 126: amax < 2^127; o >= e - dmax unless o = 0 or the
// clamp at -126, where e < -126 + dmax <= -119), so so is a normal float. The fold kernels' stochastically
// rounded copies (round to nearest takes qf_bf2_fold below).
// SR: rnd holds the low value's 16 random bits in its low half, the high value's in its high half.
template <bool SR = false>
__device__ __forceinline__ uint32_t qf_fold_fast2(const QFGrid& g, uint32_t w, float binv, float so, uint32_t rnd = 0u) {
    float m0, m1;
    qf_fast_mags<SR>(g, qf_lo(w), qf_hi(w), binv, binv, rnd, m0, m1);
    const float f0 = f32_from_bits(f32_bits(QF_MUL(m0, so)) | ((w << 16) & 0x80000000u));
    const float f1 = f32_from_bits(f32_bits(QF_MUL(m1, so)) | (w & 0x80000000u));
    return (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(f0, f1), __NV_SATFINITE, __NV_E4M3);
}
__device__ __forceinline__ float qf_fold_scale(int e, int o) { return exp2_exact(max(e - o, -30)); }
// The fold of round-to-nearest copies in packed BF16 arithmetic (the fold kernels' RNE fast path): the steps
// of qf_rne_mag and qf_fold_fast2, two values an instruction (fma.rn.bf16x2, max/min.bf16x2), about half
// their instructions, the same bytes. For a word w (two BF16 values; each half with its own block exponent e
// and row offset o: si holds 2^-e, so 2^max(e - o, -30), as BF16 halves):
//   a = |w| 2^-e: exact (a power of two), except where it falls below BF16's normal range, 2^-126: the
//       blocks taken here (qf_bf2_block_ok: amax 0 or in [2^-118, 2^127)) have e >= -120, so such an a, and
//       a from a subnormal input, lies below 2^-6 and is 0 on the grid, flushed to zero or not;
//   M = max((a mul) & exponent bits, mlo) with mul, mlo qf_magic's constants times 2^-16: BF16 keeps 7
//       mantissa bits where FP32 keeps 23, so BF16's ulp at M is qf_magic's FP32 ulp at 2^16 M, the grid's
//       spacing at a (E2M1: M = 64 p for a in [p, 2p), p >= 1, else 64; INT4 128; E1M2 64), and a < M;
//   (a + M) - M: a on the grid, ties to even (the add rounds in [M, 2M), whose ulp is the spacing; the
//       subtraction is exact), then min(., maxval) saturates as qf_rne_mag;
//   times 2^max(e - o, -30): exact (a level has at most 3 significant bits; 2^-31 is normal), the E4M3 value
//       c 2^(e - o) of fp8_fold_value; where e - o < -30, c 2^(e - o) and c 2^-30 are both below 2^-10 and
//       convert to zero; above the window (e - o > dmax: only in a row holding inf / NaN, whose offset is 0)
//       the product may be inf in BF16, and the saturating conversion gives 448, as fp8_fold_value's
//       does; the input's sign is put back (qf_fast_pair's -0 for a negative value of code 0);
//   the halves widened to FP32 (exact) and converted as qf_fold2 converts them.
// test_fp8_fold checks qf_bf2_fold against the reference element and fp8_fold_value for every BF16 value, every
// block exponent taken here, offsets across the window and o = 0, on each grid (on the GPU, and a CPU model
// of these steps where there is none). The FP32 steps (qf_fold_fast2) stay for stochastic rounding, whose
// rounding up BF16 arithmetic cannot do.
typedef struct {
    uint32_t mul, mlo, maxval;   // QFGrid's, as BF16 pairs (mul and mlo times 2^-16)
} QFGrid2;
__device__ __forceinline__ uint32_t qf_bf2_splat(float f) { return (f32_bits(f) >> 16) * 0x10001u; }   // (exact BF16 f)
__device__ __forceinline__ QFGrid2 qf_grid2(const QFGrid& g) {
    return QFGrid2{qf_bf2_splat(g.mul * 0x1p-16f), qf_bf2_splat(g.mlo * 0x1p-16f), qf_bf2_splat(g.maxval)};
}
// (PTX for sm_80 and later, as the cp.async of the column kernel below)
__device__ __forceinline__ uint32_t qf_bf2_fma(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
__device__ __forceinline__ uint32_t qf_bf2_max(uint32_t a, uint32_t b) {
    uint32_t d;
    asm("max.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
__device__ __forceinline__ uint32_t qf_bf2_min(uint32_t a, uint32_t b) {
    uint32_t d;
    asm("min.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
// 2^k as a BF16 (k in [-126, 127]; the column kernel also makes k = -127 -> 0 for blocks it then leaves to the
// reference elements: no carry into a pair's other half either way)
__device__ __forceinline__ uint32_t qf_bf16_pow2(int k) { return (uint32_t)(k + 127) << 7; }
// qf_bf2_fold's scales (si, so) as BF16 pairs: block exponent e0 and row offset o0 in the low half, e1 and o1
// in the high half. (Sums, not ORs: with e0 = e1 and o0 = o1, the row kernel's case, the compiler makes each
// one multiply by 0x10001.)
__device__ __forceinline__ void qf_bf2_scales(int e0, int o0, int e1, int o1, uint32_t& si, uint32_t& so) {
    si = qf_bf16_pow2(-e0) + (qf_bf16_pow2(-e1) << 16);
    so = qf_bf16_pow2(max(e0 - o0, -30)) + (qf_bf16_pow2(max(e1 - o1, -30)) << 16);
}
// The blocks qf_bf2_fold takes (m: the block amax bits): all zero, or amax in [2^-118, 2^127); the rest
// (inf / NaN, the tiniest and the largest) take the reference elements.
__device__ __forceinline__ bool qf_bf2_block_ok(uint32_t m) { return m == 0u || m - 0x04800000u < 0x7A800000u; }
// w -> the E4M3 values c 2^(e - o) with w's signs, as a BF16 pair (the steps above)
__device__ __forceinline__ uint32_t qf_bf2_fold(const QFGrid2& g, uint32_t w, uint32_t si, uint32_t so) {
    const uint32_t nz = 0x80008000u;   // -0, -0: the addend of a product
    const uint32_t a = qf_bf2_fma(w & 0x7FFF7FFFu, si, nz);
    const uint32_t M = qf_bf2_max(qf_bf2_fma(a, g.mul, nz) & 0x7F807F80u, g.mlo);
    const uint32_t q = qf_bf2_fma(M, 0xBF80BF80u, qf_bf2_fma(a, 0x3F803F80u, M));   // (a + M) - M: a 1 + M, then M (-1) + that
    return qf_bf2_fma(qf_bf2_min(q, g.maxval), so, nz) | (w & 0x80008000u);
}
// Two BF16 values (lo, hi: FP32 bits of each, the low 16 bits zero) -> their two E4M3 bytes
__device__ __forceinline__ uint32_t qf_e4m3x2(uint32_t lo, uint32_t hi) {
    return (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(f32_from_bits(lo), f32_from_bits(hi)), __NV_SATFINITE, __NV_E4M3);
}
// A row-wise word of one block -> its two E4M3 bytes
__device__ __forceinline__ uint32_t qf_bf2_fold_bytes(const QFGrid2& g, uint32_t w, uint32_t si, uint32_t so) {
    const uint32_t f = qf_bf2_fold(g, w, si, so);
    return qf_e4m3x2(f << 16, f & 0xFFFF0000u);
}

// A chunk of 8 values of a block qf_bf2_fold does not take (m: the block amax bits): the reference elements,
// folded with 2^-o (inv); x, y: the 8 E4M3 bytes, z: the block's scale bits. Not inlined, so that the kernel's
// unrolled chunks share one copy of the reference code.
__device__ __noinline__ uint4 qf_rf_slow(const QFTarget& T, uint4 v, uint32_t m, float inv) {
    const QuantBlockScale bs = quant_block_scale(&T.p, f32_from_bits(m), 1.0f);
    const uint32_t u0 = qf_slow_pair(T.p, qf_lo(v.x), qf_hi(v.x), bs, bs, 0, 0u), u1 = qf_slow_pair(T.p, qf_lo(v.y), qf_hi(v.y), bs, bs, 0, 0u);
    const uint32_t u2 = qf_slow_pair(T.p, qf_lo(v.z), qf_hi(v.z), bs, bs, 0, 0u), u3 = qf_slow_pair(T.p, qf_lo(v.w), qf_hi(v.w), bs, bs, 0, 0u);
    return make_uint4(qf_fold2(u0, inv) | (qf_fold2(u1, inv) << 16), qf_fold2(u2, inv) | (qf_fold2(u3, inv) << 16), bs.bits, 0u);
}

template <int NCH, int RPW>
__global__ void __launch_bounds__(QF_THREADS, NCH * RPW <= 12 ? 5 : NCH * RPW <= 16 ? 4 : 3)
qf_rowfold_kernel(const __grid_constant__ QFArgs A, int col_max) {
    extern __shared__ uint4 qf_rf_cols[];   // [warp][cols / 8]: packed BF16 magnitude maxima of 8 columns
    __shared__ uint32_t red[QF_WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const QFTarget& T = A.t[0];
    const QFGrid2 g2 = qf_grid2(T.g);
    if (blockIdx.x == 0 && threadIdx.x == 0) *T.scale_dec = 1.0f;   // E8M0 scales: no tensor scale
    const int64_t nc8 = A.cols / 8;
    const int nch = (int)ceil_div(nc8, (int64_t)32);   // chunks in a row (<= NCH)
    uint4* cm = qf_rf_cols + warp * nc8;
    if (col_max)
        for (int64_t i = lane; i < nc8; i += 32) cm[i] = make_uint4(0u, 0u, 0u, 0u);
    const bool leader = (lane & (T.bl == 32 ? 3 : 1)) == 0;   // a block's first lane counts it
    uint32_t tmax = 0;
    unsigned below = 0;
    const int64_t groups = ceil_div(A.rows, (int64_t)RPW), stride = (int64_t)gridDim.x * QF_WARPS;
    int64_t g = (int64_t)blockIdx.x * QF_WARPS + warp;
    // chunk (k, j) of group g: row g * RPW + k, columns (32 j + lane) * 8 + [0, 8), at src[k] + 32 j (src[k]:
    // the lane's first piece of the row, null past the end); zeros past the ends
    auto row_src = [&](int64_t gg, int k) {
        const int64_t r = gg * RPW + k;
        return gg < groups && r < A.rows ? (const uint4*)(A.in + r * A.ld) + lane : (const uint4*)nullptr;
    };
    auto load = [&](const uint4* src, int j) {
        uint4 u = make_uint4(0u, 0u, 0u, 0u);
        if (src && j * 32 + lane < nc8) u = __ldcs(src + j * 32);
        return u;
    };
    uint4 v[RPW][NCH];
#pragma unroll
    for (int k = 0; k < RPW; k++)
#pragma unroll
        for (int j = 0; j < NCH; j++) v[k][j] = load(row_src(g, k), j);
    // software-pipelined: once chunk (k, j) is folded, its registers load that chunk of the warp's next group
    for (; g < groups; g += stride) {
        const int64_t r0 = g * RPW;
        if (col_max) {
#pragma unroll
            for (int j = 0; j < NCH; j++) {
                const int64_t c8 = (int64_t)j * 32 + lane;
                if (c8 >= nc8) continue;
                uint4 m = cm[c8];
#pragma unroll
                for (int k = 0; k < RPW; k++) {
                    m.x = qf_vmax(m.x, v[k][j].x & 0x7FFF7FFFu); m.y = qf_vmax(m.y, v[k][j].y & 0x7FFF7FFFu);
                    m.z = qf_vmax(m.z, v[k][j].z & 0x7FFF7FFFu); m.w = qf_vmax(m.w, v[k][j].w & 0x7FFF7FFFu);
                }
                cm[c8] = m;
            }
        }
#pragma unroll
        for (int k = 0; k < RPW; k++) {
            uint32_t bm[NCH], rm = 0;
#pragma unroll
            for (int j = 0; j < NCH; j++) {
                if (j >= nch) break;   // (uniform: the chunks past the row's end, 768 or 2304 columns, do nothing)
                const uint4 w = v[k][j];
                uint32_t m = qf_hmax(qf_vmax(qf_vmax(w.x & 0x7FFF7FFFu, w.y & 0x7FFF7FFFu),
                                             qf_vmax(w.z & 0x7FFF7FFFu, w.w & 0x7FFF7FFFu)));
                m = qf_shfl_max(m, 1);
                if (T.bl == 32) m = qf_shfl_max(m, 2);
                bm[j] = m;
                rm = qf_max(rm, m);
            }
#pragma unroll
            for (int x = 2; x < 32; x <<= 1) rm = qf_shfl_max(rm, x);   // (xor 1 is in every block maximum)
            tmax = qf_max(tmax, rm);
            const int64_t row = r0 + k;
            const bool rv = row < A.rows;   // warp-uniform
            const uint4* next = row_src(g + stride, k);
            uint8_t* dst = T.fp8 + (rv ? row : 0) * T.ld_fp8 + lane * 8;   // the lane's first piece of the row's copy
            const int off = fp8_fold_offset(&T.p, T.dmax, rm);
            if (lane == 0 && rv) {
                T.fold_max[row] = rm;
                T.fold_scale[row] = fp8_fold_scale(off);
            }
#pragma unroll
            for (int j = 0; j < NCH; j++) {
                if (j >= nch) break;
                const int c8 = j * 32 + lane;
                uint32_t b01, b23;   // the chunk's 8 E4M3 bytes
                uint32_t bits;       // its block's scale bits (an inf / NaN block's 0xFF: never counted)
                if (qf_bf2_block_ok(bm[j])) {
                    const int e = qf_e8m0_exponent(bm[j], T.p.grid, T.p.scale == QSCALE_E8M0_CEIL);
                    uint32_t si, so;
                    qf_bf2_scales(e, off, e, off, si, so);
                    b01 = qf_bf2_fold_bytes(g2, v[k][j].x, si, so) | (qf_bf2_fold_bytes(g2, v[k][j].y, si, so) << 16);
                    b23 = qf_bf2_fold_bytes(g2, v[k][j].z, si, so) | (qf_bf2_fold_bytes(g2, v[k][j].w, si, so) << 16);
                    bits = (uint32_t)(e + 127);
                } else {   // rare: the reference elements, folded
                    const uint4 u = qf_rf_slow(T, v[k][j], bm[j], exp2_exact(-off));
                    b01 = u.x; b23 = u.y; bits = u.z;
                }
                v[k][j] = load(next, j);
                if (rv && c8 < nc8) {
                    *(uint2*)(dst + j * 256) = make_uint2(b01, b23);
                    below += leader && fp8_fold_counted((uint8_t)bits, off, T.dmin);
                }
            }
        }
    }
    qf_count_below(T, below);
    // the tensor amax: of the row-wise target and of a column-wise one (the same values, unrotated)
    if (lane == 0) red[warp] = tmax;
    __syncthreads();
    if (threadIdx.x == 0) {
        uint32_t m = 0;
        for (int i = 0; i < QF_WARPS; i++) m = qf_max(m, red[i]);
        if (m) {
            atomicMax((unsigned int*)T.amax, m);
            if (A.t[1].amax) atomicMax((unsigned int*)A.t[1].amax, m);
        }
    }
    if (!col_max) return;   // (uniform over the grid)
    // every CTA flushes every column: each starts at its own place in them and skips the atomic where the
    // maximum is already as large, so that the CTAs, which end together, do not queue on the same addresses
    const QFTarget& C = A.t[1];
    const int64_t start = (int64_t)blockIdx.x * 37 % nc8;
    for (int64_t ii = threadIdx.x; ii < nc8; ii += QF_THREADS) {
        const int64_t i = ii + start < nc8 ? ii + start : ii + start - nc8;
        uint4 m = qf_rf_cols[i];
        for (int wi = 1; wi < QF_WARPS; wi++) {
            const uint4 u = qf_rf_cols[wi * nc8 + i];
            m.x = qf_vmax(m.x, u.x); m.y = qf_vmax(m.y, u.y); m.z = qf_vmax(m.z, u.z); m.w = qf_vmax(m.w, u.w);
        }
        const uint32_t p[4] = {m.x, m.y, m.z, m.w};
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int64_t c = i * 8 + 2 * q;
            uint32_t* lo = C.fold_max + (c >> C.bw_log2);
            uint32_t* hi = C.fold_max + ((c + 1) >> C.bw_log2);
            if ((p[q] << 16) > *(volatile uint32_t*)lo) atomicMax(lo, p[q] << 16);
            if ((p[q] & 0xFFFF0000u) > *(volatile uint32_t*)hi) atomicMax(hi, p[q] & 0xFFFF0000u);
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// Column-wise FP8 copies (mxfp4's wgrad copies of X and dY, the column-wise copy of W): the apply pass of
// qf_apply_axis0<0, false, QF_OUT_FP8> laid out for whole blocks per thread, the same bytes. A CTA takes
// 256 columns and walks row blocks gridDim.y apart; it copies each BL x 256 tile into shared memory with
// cp.async, QF_CF_STAGES tiles in flight, so that the bytes in flight are not held in registers. A lane owns
// two adjacent columns (one 4-byte word per row, a conflict-free shared load) of a tile: a whole 1 x BL block
// of each, so the block maxima need no shuffle; round to nearest, it folds rows r and r + 1 of both columns
// (qf_bf2_fold: a word holds two columns, each half with its own scales) and then picks each column's two
// bytes; stochastically, rows r, r + 1 of one column as one word (a byte permute) in FP32. Each column's 32
// E4M3 bytes (BL = 32) go out as two 16-byte stores, and lanes 2i, 2i + 1 trade halves first so that each
// store instruction writes 16 whole 32-byte sectors (the even lane a column's first 16 bytes, the odd lane its
// last 16). Measured (results/README, "The column-wise FP8 kernel"): with each lane
// storing its own column's halves the pass ran 1.27x slower; loading each warp's next block into registers
// instead of shared memory (one block per warp in flight, 80 registers with spills) left DRAM waits at the top
// of every block (52% of the stall samples) and took 265 us at 65536 x 3072 against 208 with 4 stages. Needs
// the GEMM rows' maxima (fold_max, from the amax pass or taken ahead by the row kernel above). Round to
// nearest or stochastically (SR: sr_bits16's draws, as the patch kernel's), 1D blocks, no Hadamard
// (route.h: QK_COLFOLD), or 32 x 32 blocks of either axis (the TWO_D form, QK_FOLD2D). A block's path (fast, or the
// rare reference elements) is chosen once for all its rows, outside the unrolled row loop (it was a branch per
// row pair); with qf_fold_fast2's single scaling multiply (it was two) that took the 1D SR copy from 426 to 359
// us at 65536 x 3072, the two not timed apart (results/fold_2d). test_fp8_fold checks it
// against the CPU twin bit for bit, and which calls take it.

// Rows r, r + 1 (words a, b) of a block pair the fast path does not take (mlo, mhi: the block amax bits of columns c and
// c + 1): the reference elements, folded; column c's two bytes in the low half. SR: ra, rb are rows r and
// r + 1's 32 random bits (column c's in the low half). Not inlined (and taking no array, so that the
// kernel's registers stay registers).
__device__ __noinline__ uint32_t qf_cf_slow(const QFTarget& T, uint32_t a, uint32_t b, uint32_t mlo, uint32_t mhi,
                                            float invlo, float invhi, uint32_t ra, uint32_t rb) {
    const QuantBlockScale blo = quant_block_scale(&T.p, f32_from_bits(mlo), 1.0f);
    const QuantBlockScale bhi = quant_block_scale(&T.p, f32_from_bits(mhi), 1.0f);
    const uint32_t fa = qf_slow_pair(T.p, qf_lo(a), qf_hi(a), blo, bhi, T.sr, ra);
    const uint32_t fb = qf_slow_pair(T.p, qf_lo(b), qf_hi(b), blo, bhi, T.sr, rb);
    return qf_fold2(__byte_perm(fa, fb, 0x5410), invlo) | (qf_fold2(__byte_perm(fa, fb, 0x7632), invhi) << 16);
}

// One row block of columns c, c + 1 (v: its BL words, rows r in v[r]; mlo, mhi: the block amax bits of
// each column's block, for 2D blocks both the 32 x 32 block's) folded and stored (rb: the block's index down
// the rows); returns the blocks below the window it counted (a 2D block once, by the lane of its first
// column, as fp8_fold_cpu counts it). SR: the block's rows 2k, 2k + 1 take the draw at pm + k pstep
// (sr_bits16's 2 x 2 square of these rows and columns c, c + 1).
template <int BL, bool SR, bool TWO_D>
__device__ __forceinline__ unsigned qf_cf_block(const QFTarget& T, const uint32_t (&v)[BL], int lane, int64_t c, bool cv,
                                                int64_t rb, uint32_t mlo, uint32_t mhi, int olo_off, int ohi_off,
                                                float invlo, float invhi, uint64_t pm, uint64_t pstep) {
    uint32_t olo[BL / 4], ohi[BL / 4];   // the E4M3 bytes of columns c and c + 1, 4 rows a word
    const bool fast = qf_bf2_block_ok(mlo) && qf_bf2_block_ok(mhi);
    const bool ceil_rule = T.p.scale == QSCALE_E8M0_CEIL;
    const int elo = qf_e8m0_exponent(mlo, T.p.grid, ceil_rule), ehi = qf_e8m0_exponent(mhi, T.p.grid, ceil_rule);   // (fast blocks)
    const QuantBlockScale blo = quant_block_scale_e8m0(elo), bhi = quant_block_scale_e8m0(ehi);   // (SR)
    const float solo = qf_fold_scale(elo, olo_off), sohi = qf_fold_scale(ehi, ohi_off);           // (SR)
    uint32_t si, so;   // RNE: qf_bf2_fold's scales, column c's in the low half
    qf_bf2_scales(elo, olo_off, ehi, ohi_off, si, so);
    const QFGrid2 g2 = qf_grid2(T.g);
    // the rows, with the block's path (fast or not) chosen once for all of them (F: compile time)
    auto fold_rows = [&](auto fast_path) {
        constexpr bool F = decltype(fast_path)::value;
#pragma unroll
        for (int r = 0; r < BL; r += 2) {
            uint32_t lo, hi, ra = 0u, rb2 = 0u;   // SR: rows r, r + 1's bits (column c's in the low half)
            if (SR) qf_rng_rows(T.key, pm + (uint64_t)(r >> 1) * pstep, ra, rb2);
            if constexpr (F && SR) {
                lo = qf_fold_fast2<SR>(T.g, __byte_perm(v[r], v[r + 1], 0x5410), blo.inv, solo, __byte_perm(ra, rb2, 0x5410));
                hi = qf_fold_fast2<SR>(T.g, __byte_perm(v[r], v[r + 1], 0x7632), bhi.inv, sohi, __byte_perm(ra, rb2, 0x7632));
            } else if constexpr (F) {   // rows r and r + 1 of both columns, then column c's bytes and column c + 1's
                const uint32_t fa = qf_bf2_fold(g2, v[r], si, so), fb = qf_bf2_fold(g2, v[r + 1], si, so);
                lo = qf_e4m3x2(fa << 16, fb << 16);
                hi = qf_e4m3x2(fa & 0xFFFF0000u, fb & 0xFFFF0000u);
            } else {   // rare
                const uint32_t x = qf_cf_slow(T, v[r], v[r + 1], mlo, mhi, invlo, invhi, ra, rb2);
                lo = x & 0xFFFFu;
                hi = x >> 16;
            }
            if ((r >> 1) & 1) { olo[r >> 2] |= lo << 16; ohi[r >> 2] |= hi << 16; }
            else { olo[r >> 2] = lo; ohi[r >> 2] = hi; }
        }
    };
    if (fast) fold_rows(std::true_type{});
    else fold_rows(std::false_type{});
    // the other blocks' scale bits as the reference's (E8M0 NaN: never counted)
    const uint8_t blo_bits = fast ? blo.bits : quant_block_scale(&T.p, f32_from_bits(mlo), 1.0f).bits;
    const uint8_t bhi_bits = fast ? bhi.bits : quant_block_scale(&T.p, f32_from_bits(mhi), 1.0f).bits;
    if constexpr (BL == 32) {
        // lanes 2i, 2i + 1 (columns ce .. ce + 3) trade halves: the even lane stores the first 16 bytes of
        // each of the four columns, the odd lane the last 16
        const bool odd = lane & 1;
        uint32_t rl[4], rh[4];
#pragma unroll
        for (int q4 = 0; q4 < 4; q4++) {
            rl[q4] = __shfl_xor_sync(0xFFFFFFFFu, odd ? olo[q4] : olo[4 + q4], 1);
            rh[q4] = __shfl_xor_sync(0xFFFFFFFFu, odd ? ohi[q4] : ohi[4 + q4], 1);
        }
        if (cv) {
            uint8_t* d = T.fp8 + (c - (odd ? 2 : 0)) * T.ld_fp8 + rb * BL + (odd ? 16 : 0);
            const uint4 a0 = odd ? make_uint4(rl[0], rl[1], rl[2], rl[3]) : make_uint4(olo[0], olo[1], olo[2], olo[3]);
            const uint4 a1 = odd ? make_uint4(rh[0], rh[1], rh[2], rh[3]) : make_uint4(ohi[0], ohi[1], ohi[2], ohi[3]);
            const uint4 a2 = odd ? make_uint4(olo[4], olo[5], olo[6], olo[7]) : make_uint4(rl[0], rl[1], rl[2], rl[3]);
            const uint4 a3 = odd ? make_uint4(ohi[4], ohi[5], ohi[6], ohi[7]) : make_uint4(rh[0], rh[1], rh[2], rh[3]);
            *(uint4*)d = a0;
            *(uint4*)(d + T.ld_fp8) = a1;
            *(uint4*)(d + 2 * T.ld_fp8) = a2;
            *(uint4*)(d + 3 * T.ld_fp8) = a3;
        }
    } else if (cv) {   // BL = 16: a column block is half a sector (no recipe folds 1x16 column copies)
        uint8_t* d = T.fp8 + c * T.ld_fp8 + rb * BL;
        *(uint4*)d = make_uint4(olo[0], olo[1], olo[2], olo[3]);
        *(uint4*)(d + T.ld_fp8) = make_uint4(ohi[0], ohi[1], ohi[2], ohi[3]);
    }
    if (TWO_D) return cv && (lane & 15) == 0 ? fp8_fold_counted(blo_bits, olo_off, T.dmin) : 0u;
    return cv ? fp8_fold_counted(blo_bits, olo_off, T.dmin) + fp8_fold_counted(bhi_bits, ohi_off, T.dmin) : 0u;
}

// A word of a 2D block the fast paths do not take (m: the block amax bits): the reference pair, folded with
// 2^-o (inv); its two E4M3 bytes (the low half's first). Not inlined, as qf_cf_slow.
__device__ __noinline__ uint32_t qf_r2_slow(const QFTarget& T, uint32_t w, uint32_t m, float inv, uint32_t rnd) {
    const QuantBlockScale bs = quant_block_scale(&T.p, f32_from_bits(m), 1.0f);
    return qf_fold2(qf_slow_pair(T.p, qf_lo(w), qf_hi(w), bs, bs, T.sr, rnd), inv);
}

// 2D blocks (32 x 32): the row-wise copy (T) of one tile's columns c, c + 1 (v: rows r in v[r]; m: the
// block's amax bits; off: the offset of the band of 32 rows rb, which all of the band's rows share). Each row's
// two bytes go out as one 2-byte store (a warp's store writes 64 whole bytes of the row). Returns the blocks
// below the window counted (once per block, by the lane of its first column). SR: the row-wise copy's own key
// on the same draws as the column-wise copy's (sr_bits16 of the view's position, either axis).
template <bool SR>
__device__ __forceinline__ unsigned qf_r2_block(const QFTarget& T, const uint32_t (&v)[32], int lane, int64_t c, bool cv,
                                                int64_t rb, uint32_t m, int off, uint64_t pm, uint64_t pstep) {
    const bool fast = qf_bf2_block_ok(m);
    const int e = qf_e8m0_exponent(m, T.p.grid, T.p.scale == QSCALE_E8M0_CEIL);   // (fast blocks)
    const QuantBlockScale bs = quant_block_scale_e8m0(e);                            // (SR)
    const float inv = exp2_exact(-off), sf = qf_fold_scale(e, off);
    uint32_t si, so;
    qf_bf2_scales(e, off, e, off, si, so);
    const QFGrid2 g2 = qf_grid2(T.g);
    uint16_t* d = (uint16_t*)(T.fp8 + rb * 32 * T.ld_fp8 + c);
    const int64_t ld2 = T.ld_fp8 / 2;   // (cols % 32 == 0)
    auto fold_rows = [&](auto fast_path) {   // as qf_cf_block's
        constexpr bool F = decltype(fast_path)::value;
#pragma unroll
        for (int r = 0; r < 32; r += 2) {
            uint32_t ra = 0u, rb2 = 0u;   // SR: rows r, r + 1's bits (column c's in the low half)
            if (SR) qf_rng_rows(T.key, pm + (uint64_t)(r >> 1) * pstep, ra, rb2);
            uint32_t x0, x1;   // rows r, r + 1: columns c, c + 1's bytes
            if constexpr (F && SR) {
                x0 = qf_fold_fast2<SR>(T.g, v[r], bs.inv, sf, ra);
                x1 = qf_fold_fast2<SR>(T.g, v[r + 1], bs.inv, sf, rb2);
            } else if constexpr (F) {
                x0 = qf_bf2_fold_bytes(g2, v[r], si, so);
                x1 = qf_bf2_fold_bytes(g2, v[r + 1], si, so);
            } else {   // rare
                x0 = qf_r2_slow(T, v[r], m, inv, ra);
                x1 = qf_r2_slow(T, v[r + 1], m, inv, rb2);
            }
            if (cv) {
                d[r * ld2] = (uint16_t)x0;
                d[(r + 1) * ld2] = (uint16_t)x1;
            }
        }
    };
    if (fast) fold_rows(std::true_type{});
    else fold_rows(std::false_type{});
    const uint8_t bits = fast ? bs.bits : quant_block_scale(&T.p, f32_from_bits(m), 1.0f).bits;   // (NaN: never counted)
    return cv && (lane & 15) == 0 ? fp8_fold_counted(bits, off, T.dmin) : 0u;
}

// tiles in flight per CTA (3 CTAs per SM: 64 KB of shared memory each at BL = 32); a power of two (qf_cf_pipeline)
#define QF_CF_STAGES 4

// TWO_D (BL = 32): 32 x 32 blocks, whose amax a lane takes over its 16-lane half of the warp (32 columns), and
// the row-wise copy A.t[0] too where it has one (A.t[0].fp8), from the same tile: each copy of mxfp4-2d's dY
// pair from one read. Both copies' block amax is the same; each takes its own exponent (its grid and rule),
// offsets and SR key. A 2D copy is column-wise where A.t[1].fp8 is set.
template <int BL, bool SR, bool TWO_D>
__global__ void __launch_bounds__(QF_THREADS, 3) qf_colfold_kernel(const __grid_constant__ QFArgs A) {
    extern __shared__ uint4 qf_cf_tiles[];   // [QF_CF_STAGES][BL rows][256 columns] BF16
    static_assert(!TWO_D || BL == 32, "2D blocks: 32 x 32");
    const QFTarget& T = A.t[1];
    const QFTarget& R = A.t[0];   // TWO_D: the row-wise copy
    const bool do_col = !TWO_D || T.fp8, do_row = TWO_D && R.fp8;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) {   // E8M0: no tensor scale
        if (do_col) *T.scale_dec = 1.0f;
        if (do_row) *R.scale_dec = 1.0f;
    }
    const int64_t c0 = (int64_t)blockIdx.x * QF_WARPS * QF_CF_COLS;   // the CTA's first column
    const int64_t c = c0 + warp * QF_CF_COLS + 2 * lane;               // this lane's columns c, c + 1
    const bool cv = c < A.cols;   // cols % 8 == 0: both columns or neither, and both lanes of a pair (2D: cols % 32 == 0)
    const int olo_off = do_col && cv ? qf_fold_offset(T, c) : 0, ohi_off = do_col && cv ? qf_fold_offset(T, c + 1) : 0;
    const float invlo = exp2_exact(-olo_off), invhi = exp2_exact(-ohi_off);
    if (do_col && cv && blockIdx.y == 0) {
        T.fold_scale[c] = fp8_fold_scale(olo_off);
        T.fold_scale[c + 1] = fp8_fold_scale(ohi_off);
    }
    const uint64_t pstep = SR ? (uint64_t)(A.cols >> 1) * QF_RNG_MUL : 0;
    unsigned below = 0, below_r = 0;
    qf_cf_pipeline<BL, QF_CF_STAGES>(A, c0, qf_cf_tiles, [&](int64_t k, const uint32_t* t) {
        uint32_t v[BL];
#pragma unroll
        for (int r = 0; r < BL; r++) v[r] = t[r * (QF_CF_ROW / 4)];
        const int64_t rb = (int64_t)blockIdx.y + k * gridDim.y;
        // SR: square (r / 2, c / 2) is draw (r / 2) (cols / 2) + c / 2 (as the patch kernel's)
        const uint64_t pm = SR ? ((uint64_t)rb * (BL / 2) * (uint64_t)(A.cols >> 1) + (uint64_t)(c >> 1)) * QF_RNG_MUL : 0;
        uint32_t m2 = 0;
#pragma unroll
        for (int r = 0; r < BL; r++) m2 = qf_vmax(m2, v[r] & 0x7FFF7FFFu);
        uint32_t mlo = m2 << 16, mhi = m2 & 0xFFFF0000u;
        if (TWO_D) {   // the 32 x 32 block's: over the 16 lanes of its 32 columns
            uint32_t m = qf_max(mlo, mhi);
#pragma unroll
            for (int x = 1; x < 16; x <<= 1) m = qf_shfl_max(m, x);
            mlo = mhi = m;
        }
        if (do_col) below += qf_cf_block<BL, SR, TWO_D>(T, v, lane, c, cv, rb, mlo, mhi, olo_off, ohi_off, invlo, invhi, pm, pstep);
        if constexpr (TWO_D) {
            if (do_row) {
                const int roff = qf_fold_offset(R, rb * BL);   // the band's (its first row's) offset
                if (blockIdx.x == 0 && warp == 0) R.fold_scale[rb * BL + lane] = fp8_fold_scale(roff);
                below_r += qf_r2_block<SR>(R, v, lane, c, cv, rb, mlo, roff, pm, pstep);
            }
        }
    });
    if (do_col) qf_count_below(T, below);
    if (do_row) qf_count_below(R, below_r);
}

// ---------------------------------------------------------------------------------------------------
// Launchers

template <int NCH, int RPW>
static inline void qf_launch_rowfold_n(const QFLaunch& L, int col_max, cudaStream_t s) {
    const size_t smem = col_max ? (size_t)QF_WARPS * (size_t)L.a.cols * 2 : 0;   // <= 40 KB (5120 columns)
    static int per_sm = 0;   // at the largest shared memory this instantiation takes
    const int64_t cap = qf_resident_ctas(qf_rowfold_kernel<NCH, RPW>, (size_t)QF_WARPS * NCH * QF_RF_CHUNK * 2, &per_sm);
    int64_t blocks = ceil_div(ceil_div(L.a.rows, (int64_t)RPW), (int64_t)QF_WARPS);
    if (blocks > cap) blocks = cap;
    qf_rowfold_kernel<NCH, RPW><<<(unsigned)blocks, QF_THREADS, smem, s>>>(L.a, col_max);
    cuda_check_last();
}
static inline void qf_launch_rowfold(const QFLaunch& L, cudaStream_t s) {
    const int64_t nch = ceil_div(L.a.cols, (int64_t)QF_RF_CHUNK);
    const int col_max = L.hb == 0 && L.a.t[1].fold_max != nullptr;
    if (nch <= 4) qf_launch_rowfold_n<4, 4>(L, col_max, s);
    else if (nch <= 12) qf_launch_rowfold_n<12, 1>(L, col_max, s);
    else qf_launch_rowfold_n<20, 1>(L, col_max, s);
}

template <int BL, bool SR, bool TWO_D = false>
static inline void qf_launch_colfold_n(const QFLaunch& L, cudaStream_t s) {
    static int per_sm = 0;   // (and the shared memory opt-in: per process, which drives one GPU, as qf_num_sms)
    const size_t smem = (size_t)QF_CF_STAGES * BL * QF_CF_ROW;
    if (!per_sm && smem > 48 * 1024)
        cuda_check(cudaFuncSetAttribute(qf_colfold_kernel<BL, SR, TWO_D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const dim3 grid = qf_cf_grid(L, BL, 4, qf_resident_ctas(qf_colfold_kernel<BL, SR, TWO_D>, smem, &per_sm));
    qf_colfold_kernel<BL, SR, TWO_D><<<grid, QF_THREADS, smem, s>>>(L.a);
    cuda_check_last();
}

static inline void qf_launch_colfold(const QFLaunch& L, cudaStream_t s) {
    const QFTarget& T = L.a.t[1];
    if (T.bl == 32 && T.sr) qf_launch_colfold_n<32, true>(L, s);
    else if (T.bl == 32) qf_launch_colfold_n<32, false>(L, s);
    else if (T.sr) qf_launch_colfold_n<16, true>(L, s);
    else qf_launch_colfold_n<16, false>(L, s);
}

// The 2D copies of L that which names (bit 0 the row-wise copy, bit 1 the column-wise one): both in one kernel
// (route.h's QK_FOLD2D_PAIR, where they round alike), else one.
static inline void qf_launch_fold2d(const QFLaunch& L, int which, cudaStream_t s) {
    QFLaunch M = L;
    if (!(which & 1)) M.a.t[0].fp8 = nullptr;   // (the kernel makes the copies whose fp8 is set)
    if (!(which & 2)) M.a.t[1].fp8 = nullptr;
    if (M.a.t[which & 1 ? 0 : 1].sr) qf_launch_colfold_n<32, true, true>(M, s);
    else qf_launch_colfold_n<32, false, true>(M, s);
}
