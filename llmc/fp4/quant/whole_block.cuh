// whole_block.cuh: the GPU quantizer's kernels laid out for whole blocks per lane, for fake copies in 1D blocks with
// a 16-point Hadamard or none: qf_row2_kernel (row-wise), qf_colfake_kernel (column-wise, 1x16, through the tile
// pipeline), which with its row-wise copy makes both fake copies of a pair from one read (the dual form); the 4o6
// copies in 1x16 blocks among them. With their launchers.
// defines: qf_row2_kernel, qf_colfake_kernel, qf_launch_row2(), qf_launch_colfake(), qf_launch_dual(),
//          qf_rot16_max(), QFRowPair, qf_row2_load(), qf_row2_pair(), qf_ck_stages()
//
// Fake copies in 1D blocks with a 16-point Hadamard or none have kernels of their own, laid out so that a lane
// owns whole rotation groups and whole 16-element blocks (no shuffle but the two lanes of a 1x32 row block's
// maxima; fewer instructions per element, the same arithmetic): row-wise qf_row2_kernel (nvfp4's fprop X and
// dgrad dY, ufp4's), column-wise in 1x16 blocks qf_colfake_kernel (nvfp4's wgrad X and dY, ufp4's; 1x32 column
// copies stay on the patch kernel), which stages its tiles through shared memory with cp.async (a first column
// kernel of this layout that loaded into registers ran slower than the patch kernel: results/README.md, "A
// column-wise kernel laid out like qf_row2_kernel"). They also make the 4o6 fake
// copies in 1x16 blocks (qf_46_words, qf_46_pair: both candidates from the lane's registers); group.cuh
// makes the other 4o6 copies and every MS-EDEN one.
#pragma once
#include <type_traits>
#include "llmc/base/cuda_common.cuh"
#include "llmc/fp4/formats.h"
#include "llmc/fp4/quant/kernel_args.cuh"
#include "llmc/fp4/quant/lane_ops.cuh"
#include "llmc/fp4/quant/block_rule.cuh"
#include "llmc/fp4/quant/tile_pipeline.cuh"

// ---------------------------------------------------------------------------------------------------
// Row-wise fake copies in 1D blocks, with a 16-point Hadamard or none (nvfp4's fprop X and dgrad dY, ufp4's,
// mxfp4's rows on the emulated path): the arithmetic of qf_apply_axis1<H, SR, QF_OUT_FAKE> (same rotation,
// block amax, scale, SR draws and elements), laid out for fewer instructions per element. The patch kernel
// gives a lane 8 columns of 16 rows, so both lanes of a 16-element block compute its scale (and trade maxima
// by shuffle), and its rolled row loop rotates the 64-register patch (~4.6 register moves per element in its
// SASS; results/README). Here a lane owns whole blocks: 16 columns (two 16-byte loads) of 16 rows, taken one
// row pair at a time (a pair shares its SR draws) through two fixed buffers, the next pair's loads in flight
// while one pair is quantized. Warp tile: 32 rows x 256 columns (lane = rg * 16 + cg: rows rg * 16 + [0, 16),
// columns cg * 16 + [0, 16)). The default kernel for these copies (route.h: QK_ROW2); bit for bit equal
// to the reference kernels in test_quant_fast and test_quant_gpu_cpu, and on the H200 at 65536 x 3072 its
// apply ran at 227 us (RTN) and 303 us (SR) against the patch kernel's 243 and 321 (results/README, row2/).
#define QF_ROW2_TILE_C 256

// A 16-point rotation group held by one lane (y: the sign-flipped values) -> rotated in place (the butterflies
// of hadamard_f32_n in its order, then the scale, as qf_apply_axis0/1<16>); returns the block amax of the
// rotated values as rounded to BF16 (qf_rmax). A block is the group: qf_row2_kernel's rows, qf_colfake_kernel's
// columns.
__device__ __forceinline__ uint32_t qf_rot16_max(float (&y)[16], float hscale) {
    qf_butterfly<16>(y);
    uint32_t m = 0;
#pragma unroll
    for (int j = 0; j < 16; j++) { y[j] = QF_MUL(y[j], hscale); m = qf_max(m, qf_absbits(y[j])); }
    return qf_rmax(m, y);
}

typedef struct { uint4 v[2][2]; } QFRowPair;   // [row of the pair][16-byte half of the lane's 16 columns]

__device__ __forceinline__ void qf_row2_load(const uint16_t* src, int64_t ld, bool ok0, bool ok1, QFRowPair& b) {
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const bool ok = k ? ok1 : ok0;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            b.v[k][h] = make_uint4(0u, 0u, 0u, 0u);
            if (ok) b.v[k][h] = __ldcs((const uint4*)(src + k * ld) + h);
        }
    }
}

// One row pair: rows r, r + 1 (r even) at dst, dst + ld_fake. pm: this pair's first SR draw (times
// QF_RNG_MUL): the lane's 8 column pairs are 8 consecutive draws, each giving row r its low 32 bits and
// row r + 1 its high ones (qf_rng_row).
// H = 16: the row's 16 values are one rotation group (qf_apply_axis1<16>'s arithmetic: the sign flips smask, the
// butterflies of hadamard_f32_n in the same order, here all within the lane, the scale, and the block amax of the
// rounded values), then the fast path's rounding to BF16 (cvt.rn.bf16x2) or the reference's.
// F46: the target's scale rule is 4o6 (1x16 blocks): qf_46_words.
// dm: the maximum of the pair's block amaxes goes into it (the delayed amax rule's view amax; rows past the view's
// end and columns past its width were loaded as zeros).
template <int H, bool SR, bool F46>
__device__ __forceinline__ void qf_row2_pair(const QFTarget& T, const QFRowPair& b, uint16_t* dst, bool ok0, bool ok1,
                                             const QFBlockRule& R, uint64_t pm, const uint32_t (&smask)[8], uint32_t& dm) {
    uint64_t w64[8];
    if (SR) {
#pragma unroll
        for (int i = 0; i < 8; i++) w64[i] = qf_rng64(T.key, pm + (uint64_t)i * QF_RNG_MUL);
    }
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const uint32_t w[8] = {b.v[k][0].x, b.v[k][0].y, b.v[k][0].z, b.v[k][0].w,
                               b.v[k][1].x, b.v[k][1].y, b.v[k][1].z, b.v[k][1].w};
        float y[16];   // H: the rotated values
        uint32_t m;
        if constexpr (H == 16) {
#pragma unroll
            for (int i = 0; i < 8; i++) { const uint32_t x = w[i] ^ smask[i]; y[2 * i] = qf_lo(x); y[2 * i + 1] = qf_hi(x); }
            m = qf_rot16_max(y, T.hscale);
        } else {
            uint32_t m2 = 0;
#pragma unroll
            for (int i = 0; i < 8; i++) m2 = qf_vmax(m2, w[i] & 0x7FFF7FFFu);
            m = qf_hmax(m2);
        }
        dm = qf_max(dm, m);
        if (T.bl == 32) m = qf_shfl_max(m, 1);   // the block's other 16 columns
        const QuantBlockScale bs = qf_block_scale(T, R, m);
        uint32_t rnd[8];
#pragma unroll
        for (int i = 0; i < 8; i++) rnd[i] = SR ? qf_rng_row(w64[i], k) : 0u;
        uint32_t o[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (m < 0x7F800000u && !T.ref_elems) {
            uint32_t vw[8];
#pragma unroll
            for (int i = 0; i < 8; i++) vw[i] = H ? qf_cvt2(y[2 * i], y[2 * i + 1]) : w[i];
            if constexpr (F46) qf_46_words<SR>(T.g, vw, bs, qf_e4m3_scale(R, m, R.mult4), R.s_enc, rnd, o);
            else qf_fast_words<SR>(T.g, vw, bs, rnd, o);
        } else {   // rare: a block holding inf / NaN (rolled: the reference code once)
#pragma unroll 1
            for (int i = 0; i < 8; i++) {
                const uint32_t x = H ? qf_cvt2_ref(qf_pick(y, 2 * i), qf_pick(y, 2 * i + 1)) : qf_pick(w, i);
                const uint32_t ow = qf_slow_pair(T.p, qf_lo(x), qf_hi(x), bs, bs, SR, qf_pick(rnd, i));
#pragma unroll
                for (int j = 0; j < 8; j++) o[j] = j == i ? ow : o[j];
            }
        }
        if (k ? ok1 : ok0) {
            uint4* d = (uint4*)(dst + k * T.ld_fake);
            d[0] = make_uint4(o[0], o[1], o[2], o[3]);
            d[1] = make_uint4(o[4], o[5], o[6], o[7]);
        }
    }
}

template <int H, bool SR, bool F46>
__global__ void __launch_bounds__(QF_THREADS) qf_row2_kernel(const __grid_constant__ QFArgs A, int64_t tiles_c) {
    static_assert(H == 0 || H == 16, "a rotation group is a lane's 16 columns");
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const QFTarget& T = A.t[0];
    uint32_t smask[8];   // H: the sign flips of columns 2i, 2i + 1 of a group
    qf_row_signs(T, H, 0, smask);
    __shared__ float2 tab[128];
    const QFBlockRule R = qf_block_rule(T, *T.amax, tab);
    if (blockIdx.x == 0 && threadIdx.x == 0) *T.scale_dec = quant_tensor_scale_dec(&T.p, R.s_enc);
    __syncthreads();
    const uint32_t t = blockIdx.x * QF_WARPS + warp;
    const uint32_t tr = t / (uint32_t)tiles_c, tc = t - tr * (uint32_t)tiles_c;
    const int64_t r0 = (int64_t)tr * QF_TILE_R + (lane >> 4) * QF_ROWS;
    const int64_t c0 = (int64_t)tc * QF_ROW2_TILE_C + (lane & 15) * 16;
    if (r0 - (lane >> 4) * QF_ROWS >= A.rows) return;   // whole warps: past the last tile
    const bool cv = c0 < A.cols;
    const int64_t nr = A.rows - r0;
    const uint16_t* src = A.in + r0 * A.ld + c0;
    uint16_t* dst = T.fake + r0 * T.ld_fake + c0;
    uint64_t pm = 0, pstep = 0;
    if (SR) {
        pm = ((uint64_t)(r0 >> 1) * (uint64_t)(A.cols >> 1) + (uint64_t)(c0 >> 1)) * QF_RNG_MUL;
        pstep = (uint64_t)(A.cols >> 1) * QF_RNG_MUL;
    }
    QFRowPair a, b;
    uint32_t dm = 0;   // the view's amax over this lane's blocks (delayed amax rule)
    qf_row2_load(src, A.ld, cv && 0 < nr, cv && 1 < nr, a);
#pragma unroll 1
    for (int r = 0; r < QF_ROWS; r += 4) {   // rows r, r + 1 from a; r + 2, r + 3 from b
        qf_row2_load(src + (r + 2) * A.ld, A.ld, cv && r + 2 < nr, cv && r + 3 < nr, b);
        qf_row2_pair<H, SR, F46>(T, a, dst + r * T.ld_fake, cv && r < nr, cv && r + 1 < nr, R, pm, smask, dm);
        pm += pstep;
        if (r + 4 < QF_ROWS) qf_row2_load(src + (r + 4) * A.ld, A.ld, cv && r + 4 < nr, cv && r + 5 < nr, a);
        qf_row2_pair<H, SR, F46>(T, b, dst + (r + 2) * T.ld_fake, cv && r + 2 < nr, cv && r + 3 < nr, R, pm, smask, dm);
        pm += pstep;
    }
    if (T.amax_next) quant_amax_accumulate(T.amax_next, dm);
}

// ---------------------------------------------------------------------------------------------------
// Column-wise fake copies in 1x16 blocks, after a 16-point Hadamard down the columns or with none (nvfp4's
// wgrad copies of X and dY, nvfp4-naive's and ufp4's): the apply pass of qf_apply_axis0<H, SR, QF_OUT_FAKE>
// laid out as qf_colfold_kernel, the same bytes. A CTA takes 256 columns and walks 16-row tiles gridDim.y
// apart through qf_ck_stages<H>() shared-memory stages (cp.async, all but one loading); a lane owns two adjacent
// columns of a tile (one word per row), so a column's rotation group and its block are the lane's 16 values:
// no shuffle, and no rotation of a register patch (~2 moves per element in the patch kernel). The eighth
// session's kernel of this layout loaded its rows into registers and lost to the patch kernel for want of
// bytes in flight (results/README, "A column-wise kernel laid out like qf_row2_kernel"); the stages here are
// its cure, as they were the FP8 column kernel's. Each row's word goes out as one 4-byte store (a warp's
// store: 128 whole bytes of the row). test_quant_fast and test_quant_gpu_cpu check it bit for bit (the
// trainer's configurations go through it: route.h's QK_COLFAKE).
// 16-row tile stages per CTA (8 KB each), all but one loading while one is read. With the Hadamard's arithmetic
// fewer suffice: on the H200 (65536 x 3072 and x 768), 4 stages ran the H16 copies 3-7% faster than 8 and the
// copies without a Hadamard up to 7% slower (results/colfake/colfake_tunables.txt).
#ifndef QF_CK_STAGES
#define QF_CK_STAGES 8       // no Hadamard
#endif
#ifndef QF_CK_STAGES_H16
#define QF_CK_STAGES_H16 4   // H = 16
#endif
#ifndef QF_CK_MIN_CTAS
#define QF_CK_MIN_CTAS 3   // CTAs per SM the registers are budgeted for (shared memory: 3 at 8 stages)
#endif
template <int H>
__host__ __device__ constexpr int qf_ck_stages() { return H ? QF_CK_STAGES_H16 : QF_CK_STAGES; }

// A pair of rows' words (x: the BF16 pair, rotated and rounded where there is a rotation) of a block pair the
// fast path does not take: the reference elements. Not inlined (the rare path, kept out of the unrolled loop).
__device__ __noinline__ uint32_t qf_ck_slow(const QFTarget& T, uint32_t x, QuantBlockScale blo, QuantBlockScale bhi,
                                            uint32_t rnd) {
    return qf_slow_pair(T.p, qf_lo(x), qf_hi(x), blo, bhi, T.sr, rnd);
}

// HR >= 0 (a dual pass, route.h's QK_DUAL): the row-wise fake copy A.t[0] too, from the same tiles, so that the source is
// read once for both copies (pairs that round to nearest: nvfp4-naive's dY pair, a custom recipe's): 1D blocks, a
// 16-point Hadamard (HR = 16) or none. After a tile's column-wise words, each thread makes the row-wise
// blocks of one row pair (rows 2p, 2p + 1 of the tile, p = threadIdx.x / 16) in one 16-column block
// (threadIdx.x % 16 of the CTA's 16) from the stage, with qf_row2_kernel's arithmetic and stores (qf_row2_pair,
// whose lane layout it keeps: a 1x32 block's halves are lanes 2j and 2j + 1). HR = -1 compiles to the column-wise
// kernel alone.
template <int H, bool SR, bool F46, int HR = -1>
__global__ void __launch_bounds__(QF_THREADS, QF_CK_MIN_CTAS) qf_colfake_kernel(const __grid_constant__ QFArgs A) {
    static_assert(H == 0 || H == 16, "a rotation group is a block: 16 rows");
    static_assert(HR == -1 || ((HR == 0 || HR == 16) && !F46 && !SR), "the row-wise copy: H16 or none, RTN, not 4o6");
    extern __shared__ uint4 qf_ck_tiles[];   // [qf_ck_stages<H>()][16 rows][256 columns] BF16
    const QFTarget& T = A.t[1];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __shared__ float2 tab[128];   // (qf_cf_pipeline's first __syncthreads comes before its first use)
    const QFBlockRule R = qf_block_rule(T, *T.amax, tab);
    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *T.scale_dec = quant_tensor_scale_dec(&T.p, R.s_enc);
    const int64_t c0 = (int64_t)blockIdx.x * QF_WARPS * QF_CF_COLS;   // the CTA's first column
    const int64_t c = c0 + warp * QF_CF_COLS + 2 * lane;               // this lane's columns c, c + 1
    const bool cv = c < A.cols;   // cols % 8 == 0: both columns or neither
    const uint64_t pstep = SR ? (uint64_t)(A.cols >> 1) * QF_RNG_MUL : 0;
    uint32_t smask[QF_ROWS];   // the rotation's sign flip of row r of a group, on both halves of a word
    qf_col_sign_masks(T, H, 0, smask);
    uint32_t dm = 0;   // the view's amax over this lane's blocks (delayed amax rule)
    // HR >= 0: the row-wise copy's rule, sign flips and view amax, and this thread's row pair and block
    const QFTarget& TR = A.t[0];
    QFBlockRule RR{};
    uint32_t smask_r[8] = {0, 0, 0, 0, 0, 0, 0, 0}, dm_r = 0;
    const int pr = threadIdx.x >> 4;                       // rows 2 pr, 2 pr + 1 of each tile
    const int64_t cb = c0 + (threadIdx.x & 15) * 16;       // columns cb + [0, 16)
    const bool bv = cb < A.cols;                           // (cols % 16 == 0: the whole block or none of it)
    if constexpr (HR >= 0) {
        __shared__ float2 tab_r[128];
        RR = qf_block_rule(TR, *TR.amax, tab_r);
        if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *TR.scale_dec = quant_tensor_scale_dec(&TR.p, RR.s_enc);
        qf_row_signs(TR, HR, 0, smask_r);
    }
    qf_cf_pipeline<16, qf_ck_stages<H>()>(A, c0, qf_ck_tiles, [&](int64_t k, const uint32_t* t) {
        uint32_t v[16];
#pragma unroll
        for (int r = 0; r < 16; r++) v[r] = t[r * (QF_CF_ROW / 4)];
        const int64_t r0 = ((int64_t)blockIdx.y + k * gridDim.y) * 16;
        // the block maxima of columns c and c + 1 (as qf_apply_axis0: of the rotated values, BF16-rounded)
        float lo[16], hi[16];   // H: the rotated values
        uint32_t mlo, mhi;
        if constexpr (H == 16) {
#pragma unroll
            for (int r = 0; r < 16; r++) { const uint32_t x = v[r] ^ smask[r]; lo[r] = qf_lo(x); hi[r] = qf_hi(x); }
            mlo = qf_rot16_max(lo, T.hscale);
            mhi = qf_rot16_max(hi, T.hscale);
        } else {
            uint32_t m2 = 0;
#pragma unroll
            for (int r = 0; r < 16; r++) m2 = qf_vmax(m2, v[r] & 0x7FFF7FFFu);
            mlo = m2 << 16;
            mhi = m2 & 0xFFFF0000u;
        }
        if (cv) dm = qf_max(dm, qf_max(mlo, mhi));
        const QuantBlockScale blo = qf_block_scale(T, R, mlo), bhi = qf_block_scale(T, R, mhi);
        // SR: rows 2j, 2j + 1 of columns c, c + 1 are sr_bits16's square (r0 / 2 + j, c / 2)
        uint64_t pm = SR ? ((uint64_t)(r0 >> 1) * (uint64_t)(A.cols >> 1) + (uint64_t)(c >> 1)) * QF_RNG_MUL : 0;
        uint32_t* d = (uint32_t*)(T.fake + r0 * T.ld_fake + c);   // row r's word; moves down a row per store
        const int64_t ldw = T.ld_fake >> 1;                        // (ld_fake % 8 == 0)
        // the rows, with the block pair's path (fast, or a block holding inf / NaN) chosen once for all of them;
        // bl, bh: the scales of the blocks of columns c and c + 1
        auto rows = [&](auto fast_path, const QuantBlockScale& bl, const QuantBlockScale& bh) {
            constexpr bool F = decltype(fast_path)::value;
#pragma unroll
            for (int r = 0; r < 16; r += 2) {
                uint32_t rnd[2] = {0u, 0u};
                if (SR) {   // (pm moves down a row pair per draw)
                    qf_rng_rows(T.key, pm, rnd[0], rnd[1]);
                    pm += pstep;
                }
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    uint32_t x = v[r + j];   // the fast path's rounding of the rotated pair, or the reference's
                    if constexpr (H == 16) x = F ? qf_cvt2(lo[r + j], hi[r + j]) : qf_cvt2_ref(lo[r + j], hi[r + j]);
                    const uint32_t o = F ? qf_fast_pair<SR>(T.g, qf_lo(x), qf_hi(x), x, bl.inv, bl.sdec, bh.inv, bh.sdec, rnd[j])
                                         : qf_ck_slow(T, x, bl, bh, rnd[j]);
                    if (cv) *d = o;
                    d += ldw;
                }
            }
        };
        // 4o6 (F46): both candidates of both blocks, their errors from the fast path's magnitudes; a block keeps 4 iff
        // its sum is smaller, one holding inf or NaN keeps 6. With both blocks finite the chosen words are stored
        // once the sums are complete; otherwise the rows run again through the reference elements, each block with
        // its choice (a finite block's words are the same either way).
        auto rows46 = [&]() {
            const uint64_t pm0 = pm;
            const QuantBlockScale l4 = qf_e4m3_scale(R, mlo, R.mult4), h4 = qf_e4m3_scale(R, mhi, R.mult4);
            float el6 = 0.0f, eh6 = 0.0f, el4 = 0.0f, eh4 = 0.0f;
            uint32_t w6[16], w4[16];
#pragma unroll
            for (int r = 0; r < 16; r += 2) {
                uint32_t rnd[2] = {0u, 0u};
                if (SR) {
                    qf_rng_rows(T.key, pm, rnd[0], rnd[1]);
                    pm += pstep;
                }
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    uint32_t x = v[r + j];
                    if constexpr (H == 16) x = qf_cvt2(lo[r + j], hi[r + j]);
                    qf_46_pair<SR>(T.g, x, blo, bhi, l4, h4, R.s_enc, rnd[j], el6, eh6, el4, eh4, w6[r + j], w4[r + j]);
                }
            }
            const bool lo4 = mlo < 0x7F800000u && el4 < el6, hi4 = mhi < 0x7F800000u && eh4 < eh6;
            if (qf_max(mlo, mhi) >= 0x7F800000u) {
                pm = pm0;
                rows(std::false_type{}, lo4 ? l4 : blo, hi4 ? h4 : bhi);
                return;
            }
            const uint32_t pick4 = (lo4 ? 0x0000FFFFu : 0u) | (hi4 ? 0xFFFF0000u : 0u);
#pragma unroll
            for (int r = 0; r < 16; r++) {
                if (cv) *d = (w4[r] & pick4) | (w6[r] & ~pick4);
                d += ldw;
            }
        };
        if constexpr (F46) rows46();
        else if (qf_max(mlo, mhi) < 0x7F800000u) rows(std::true_type{}, blo, bhi);
        else rows(std::false_type{}, blo, bhi);
        if constexpr (HR >= 0) {   // the row-wise copy's blocks of this tile, from the same stage
            const char* st = (const char*)(t - threadIdx.x) + 2 * pr * QF_CF_ROW + (threadIdx.x & 15) * 32;
            QFRowPair b;
#pragma unroll
            for (int j = 0; j < 2; j++) {
                b.v[j][0] = ((const uint4*)(st + j * QF_CF_ROW))[0];
                b.v[j][1] = ((const uint4*)(st + j * QF_CF_ROW))[1];
            }
            qf_row2_pair<HR, false, false>(TR, b, TR.fake + (r0 + 2 * pr) * TR.ld_fake + cb, bv, bv, RR, 0, smask_r, dm_r);
        }
    });
    if (T.amax_next) quant_amax_accumulate(T.amax_next, dm);
    if constexpr (HR >= 0) {
        if (TR.amax_next) quant_amax_accumulate(TR.amax_next, dm_r);
    }
}

// ---------------------------------------------------------------------------------------------------
// Launchers

template <int H, bool SR, bool F46>
static inline void qf_launch_row2_n(const QFLaunch& L, cudaStream_t s) {
    const int64_t tiles_c = ceil_div(L.a.cols, QF_ROW2_TILE_C);
    const unsigned blocks = (unsigned)ceil_div(tiles_c * ceil_div(L.a.rows, QF_TILE_R), QF_WARPS);
    qf_row2_kernel<H, SR, F46><<<blocks, QF_THREADS, 0, s>>>(L.a, tiles_c);
    cuda_check_last();
}
// H x SR x 4o6, each its own instantiation
template <template <int, bool, bool> class K>
static inline void qf_whole_block_dispatch(const QFLaunch& L, const QFTarget& t, int h, cudaStream_t s) {
    const bool f46 = t.p.scale == QSCALE_E4M3_4O6;
    if (h == 16) {
        if (t.sr) { if (f46) K<16, true, true>::run(L, s); else K<16, true, false>::run(L, s); }
        else if (f46) K<16, false, true>::run(L, s);
        else K<16, false, false>::run(L, s);
    } else if (t.sr) { if (f46) K<0, true, true>::run(L, s); else K<0, true, false>::run(L, s); }
    else if (f46) K<0, false, true>::run(L, s);
    else K<0, false, false>::run(L, s);
}
template <int H, bool SR, bool F46> struct QFRow2Launch { static void run(const QFLaunch& L, cudaStream_t s) { qf_launch_row2_n<H, SR, F46>(L, s); } };
static inline void qf_launch_row2(const QFLaunch& L, cudaStream_t s) { qf_whole_block_dispatch<QFRow2Launch>(L, L.a.t[0], L.ha, s); }

template <int H, bool SR, bool F46, int HR = -1>
static inline void qf_launch_colfake_n(const QFLaunch& L, cudaStream_t s) {
    static int per_sm = 0;   // (as qf_launch_colfold_n's)
    const size_t smem = (size_t)qf_ck_stages<H>() * 16 * QF_CF_ROW;   // 64 KB at 8 stages
    if (!per_sm && smem > 48 * 1024)
        cuda_check(cudaFuncSetAttribute(qf_colfake_kernel<H, SR, F46, HR>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const dim3 grid = qf_cf_grid(L, 16, qf_ck_stages<H>(), qf_resident_ctas(qf_colfake_kernel<H, SR, F46, HR>, smem, &per_sm));
    qf_colfake_kernel<H, SR, F46, HR><<<grid, QF_THREADS, smem, s>>>(L.a);
    cuda_check_last();
}
template <int H, bool SR, bool F46> struct QFColfakeLaunch { static void run(const QFLaunch& L, cudaStream_t s) { qf_launch_colfake_n<H, SR, F46>(L, s); } };
static inline void qf_launch_colfake(const QFLaunch& L, cudaStream_t s) { qf_whole_block_dispatch<QFColfakeLaunch>(L, L.a.t[1], L.hb, s); }

// Both fake copies of a dual pass from one read of the source (qf_colfake_kernel with HR >= 0) instead of one
// kernel per copy, each reading it: where qf_row2_kernel would make the row-wise copy and qf_colfake_kernel the
// column-wise one, both round to nearest and neither is 4o6, with Hadamard sizes (0, 0), (0, 16) or (16, 16). The
// same numbers bit for bit (test_quant_fast). Timed on the H200 (bench_quant_fast, 65536 x 3072;
// results/dual_split_gemm90/): nvfp4-naive's dY pair 528 -> 445 us, a row + column H16 pair 540 -> 456; with
// stochastic rounding the one-read form was slower (nvfp4's dY pair 636 -> 657, ufp4's 814 -> 841: the SR draws of
// both copies in one kernel), so SR pairs keep one kernel per copy.
static inline void qf_launch_dual(const QFLaunch& L, cudaStream_t s) {
    if (L.hb == 0) qf_launch_colfake_n<0, false, false, 0>(L, s);   // (qf_combo_ok: the row-wise copy has none either)
    else if (L.ha == 0) qf_launch_colfake_n<16, false, false, 0>(L, s);
    else qf_launch_colfake_n<16, false, false, 16>(L, s);
}
