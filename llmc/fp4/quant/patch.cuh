// patch.cuh: the GPU quantizer's general kernels: the amax pass (qf_amax_kernel: every target's tensor amax, and
// FP8 targets' per-row maxima, from one read) and the patch apply kernel (qf_apply_kernel: any copy but the group
// rules', in every output form, and the statistics), with their launchers.
// defines: qf_amax_kernel, qf_apply_kernel, qf_launch_amax(), qf_launch_apply(), qf_apply_axis1(), qf_apply_axis0(),
//          qf_load(), qf_tile_origin(), qf_store_packed_row(), qf_store_packed_cols()
//
// Output forms (QF_OUT_*): each is its own instantiation of the apply kernel, the form only choosing what the
// element loop computes (BF16 value, code, statistics) and how a row / column is stored
// (qf_store_packed_row / _cols, or the fake store in place); the fake kernels compile as they did alone.
//
// Layout. A warp owns a 32 x 128 tile of the view; lane = rg * 16 + cg holds the 16 rows
// [rg*16, rg*16+16) x 8 columns [cg*8, cg*8+8) of it as 16 16-byte words in registers (coalesced: each row
// load of a half-warp is 256 contiguous bytes). Row-wise (axis 1) blocks span 2 (L=16) or 4 (L=32) lanes
// of one row: block amax and the Hadamard stages h >= 8 go through shuffles. Column-wise (axis 0) blocks
// are a column of the thread's 16 rows (L=16) or of two lanes rg = 0, 1 (L=32, H32: shuffle xor 16).
// 2D tiles: the thread's 16 x 8 patch plus lanes xor 1 (16x16) or xor 1, 2, 16 (32x32).
// Hadamard: the butterflies of hadamard_f32_n in the same order (cross-lane stages as shuffles); the
// rotated values are rounded to BF16 by the hardware (cvt.rn.bf16x2) when the block amax is finite (equal
// to bf16_bits_rne for non-NaN inputs), else by bf16_bits_rne. Block and tensor amax of the rounded values
// are taken as the rounding of the max of the unrounded ones (rounding is monotone on non-NaN magnitudes;
// a group holding a NaN is rounded value by value).
// SR bits: sr_bits16(key, r, c, cols): one 64-bit draw per 2 x 2 square, 32 bits per column pair of a row.
#pragma once
#include "llmc/base/cuda_common.cuh"
#include "llmc/fp4/formats.h"
#include "llmc/fp4/quant_cpu.h"            // QuantStats
#include "llmc/fp4/quant_diag.cuh"         // quant_stats_warp_flush
#include "llmc/fp4/fp8_fold.h"
#include "llmc/fp4/quant/kernel_args.cuh"
#include "llmc/fp4/quant/lane_ops.cuh"

__device__ __forceinline__ void qf_load(const QFArgs& A, int64_t r0, int64_t c0, bool stream, uint32_t (&w)[QF_ROWS][4]) {
    const bool cv = c0 < A.cols;
    const int64_t nr = A.rows - r0;
    const uint16_t* src = A.in + r0 * A.ld + c0;
#pragma unroll
    for (int r = 0; r < QF_ROWS; r++) {
        uint4 u = make_uint4(0u, 0u, 0u, 0u);
        if (cv && r < nr) {
            const uint4* ptr = (const uint4*)(src + r * A.ld);
            u = stream ? __ldcs(ptr) : __ldg(ptr);
        }
        w[r][0] = u.x; w[r][1] = u.y; w[r][2] = u.z; w[r][3] = u.w;
    }
}

// The apply loops are rolled to keep the code small: fully unrolled, a dual-target kernel is ~14k
// straight-line instructions per tile, more than the instruction caches hold, and ncu showed 40% of
// its stalls waiting on instruction fetch at 30% issue. A rolled body always works on the same
// registers (rows 0..QF_RGROUP-1, or word 0 of every row) and rotates the patch after each
// iteration, so every index stays static (no local memory); after a full loop the patch is back in
// order (row-wise) or holds the outputs in order (column-wise).
#define QF_RGROUP 4   // rows per iteration of the row-wise loop

__device__ __forceinline__ void qf_rotate_rows(uint32_t (&w)[QF_ROWS][4]) {   // rows r <- r + QF_RGROUP
#pragma unroll
    for (int i = 0; i < 4; i++) {
        uint32_t t[QF_RGROUP];
#pragma unroll
        for (int r = 0; r < QF_RGROUP; r++) t[r] = w[r][i];
#pragma unroll
        for (int r = 0; r < QF_ROWS - QF_RGROUP; r++) w[r][i] = w[r + QF_RGROUP][i];
#pragma unroll
        for (int r = 0; r < QF_RGROUP; r++) w[QF_ROWS - QF_RGROUP + r][i] = t[r];
    }
}

__device__ __forceinline__ void qf_rotate_cols(uint32_t (&w)[QF_ROWS][4]) {   // words i <- i + 1
#pragma unroll
    for (int r = 0; r < QF_ROWS; r++) {
        const uint32_t t = w[r][0];
        w[r][0] = w[r][1]; w[r][1] = w[r][2]; w[r][2] = w[r][3]; w[r][3] = t;
    }
}

// ---------------------------------------------------------------------------------------------------
// Packed stores (quant_target.cuh's layout: M x K/2 code bytes and M x K/L scale bytes, operand-major). Scale
// indices by shifts: 64-bit divisions are long subroutines, and these kernels are bound by the integer pipe.

__device__ __forceinline__ int qf_log2_block(const QFTarget& T) { return T.bl == 32 ? 5 : 4; }

// Row-wise: row r's 8 codes from column c0 (4 bytes), and the block's scale from the lane its block starts in.
__device__ __forceinline__ void qf_store_packed_row(const QFTarget& T, int64_t cols, int64_t r, int64_t c0, uint32_t codes,
                                                    uint8_t sbits) {
    const int lg = qf_log2_block(T);
    *(uint32_t*)(T.codes + r * (cols >> 1) + (c0 >> 1)) = codes;
    if (!(c0 & (T.bl - 1))) T.scales[r * (cols >> lg) + (c0 >> lg)] = sbits;
}

// Column-wise (the copy is transposed): the 16 codes of columns c and c + 1 over rows [r0, r0 + 16) (8 bytes
// each), and their blocks' scales from the thread the blocks start in (rg = 0 for L = 32).
__device__ __forceinline__ void qf_store_packed_cols(const QFTarget& T, int64_t rows, int64_t c, int64_t r0, uint64_t clo,
                                                     uint64_t chi, uint8_t slo, uint8_t shi) {
    const int lg = qf_log2_block(T);
    uint8_t* dst = T.codes + c * (rows >> 1) + (r0 >> 1);
    *(uint64_t*)dst = clo;
    *(uint64_t*)(dst + (rows >> 1)) = chi;
    if (!(r0 & (T.bl - 1))) {
        T.scales[c * (rows >> lg) + (r0 >> lg)] = slo;
        T.scales[(c + 1) * (rows >> lg) + (r0 >> lg)] = shi;
    }
}

// ---------------------------------------------------------------------------------------------------
// Apply, row-wise target (axis 1). OUT: the output form (QF_OUT_*); st: QF_OUT_STATS's accumulator.

template <int H, bool SR, int OUT>
__device__ __forceinline__ void qf_apply_axis1(const QFTarget& T, const QFArgs& A, uint32_t (&w)[QF_ROWS][4],
                                               int64_t r0, int64_t c0, int lane, float s_enc, QuantStats* st) {
    const int cg = lane & 15;
    uint32_t smask[4];
    qf_row_signs(T, H, cg, smask);
    const bool twod = T.bw > 1;
    const int l4 = T.bl == 32;
    uint32_t tile_m = 0;
    if (twod) {
        if (H) {
#pragma unroll
            for (int r = 0; r < QF_ROWS; r++) {
                float y[8];
                qf_rot_row<H>(w[r], smask, T.hscale, cg, y, qf_hrun<H>(T));
                uint32_t mr = 0;
#pragma unroll
                for (int j = 0; j < 8; j++) mr = qf_max(mr, qf_absbits(y[j]));
                tile_m = qf_max(tile_m, qf_rmax(mr, y));
            }
        } else {
            uint32_t m2 = 0;
#pragma unroll
            for (int r = 0; r < QF_ROWS; r++)
#pragma unroll
                for (int i = 0; i < 4; i++) m2 = qf_vmax(m2, w[r][i] & 0x7FFF7FFFu);
            tile_m = qf_hmax(m2);
        }
        tile_m = qf_shfl_max(tile_m, 1);
        if (l4) { tile_m = qf_shfl_max(tile_m, 2); tile_m = qf_shfl_max(tile_m, 16); }
    }
    const bool cv = c0 < A.cols;
    const int64_t nr = A.rows - r0;
    uint16_t* dst = OUT == QF_OUT_FAKE ? T.fake + r0 * T.ld_fake + c0 : nullptr;
    const float tdec = quant_tensor_scale_dec(&T.p, s_enc);   // statistics only
    // FP8: blocks below the window counted once, by their first lane (and for 2D blocks their first row);
    // each row's offset computed once, by lane cg = row (of its half), and shuffled to the others below;
    // the first tile column writes the row's GEMM scale
    const bool leader = (cg & (l4 ? 3 : 1)) == 0;
    unsigned below = 0;
    int my_off = 0;
    float my_inv = 1.0f;
    if constexpr (OUT == QF_OUT_FP8) {
        if (cg < nr) {
            my_off = qf_fold_offset(T, r0 + cg);
            my_inv = exp2_exact(-my_off);
            if (c0 == cg * 8) T.fold_scale[r0 + cg] = fp8_fold_scale(my_off);
        }
    }
    // SR: one draw per 2 x 2 square (sr_bits16): square (r / 2, c / 2) is draw (r / 2) (cols / 2) + c / 2,
    // the lane's 4 column pairs are consecutive draws, a row pair further on is cols / 2 draws on
    uint64_t pm = 0, pstep = 0, w64[4] = {0, 0, 0, 0};
    if (SR) {
        pm = ((uint64_t)(r0 >> 1) * (uint64_t)(A.cols >> 1) + (uint64_t)(c0 >> 1)) * QF_RNG_MUL;
        pstep = (uint64_t)(A.cols >> 1) * QF_RNG_MUL;
    }
#pragma unroll 1
    for (int g = 0; g < QF_ROWS; g += QF_RGROUP) {   // rolled (see qf_rotate_rows); w[rr] is row g + rr
#pragma unroll
    for (int rr = 0; rr < QF_RGROUP; rr++) {
        const int r = g + rr;
        float y[8];
        uint32_t m;
        if (H) {
            qf_rot_row<H>(w[rr], smask, T.hscale, cg, y, qf_hrun<H>(T));
            m = 0;
#pragma unroll
            for (int j = 0; j < 8; j++) m = qf_max(m, qf_absbits(y[j]));
            m = qf_rmax(m, y);
        } else {
            const uint32_t m2 = qf_vmax(qf_vmax(w[rr][0] & 0x7FFF7FFFu, w[rr][1] & 0x7FFF7FFFu),
                                        qf_vmax(w[rr][2] & 0x7FFF7FFFu, w[rr][3] & 0x7FFF7FFFu));
            m = qf_hmax(m2);
        }
        if (!twod) {
            m = qf_shfl_max(m, 1);
            if (l4) m = qf_shfl_max(m, 2);
        } else {
            m = tile_m;
        }
        const QuantBlockScale bs = quant_block_scale(&T.p, f32_from_bits(m), s_enc);
        // statistics take the reference elements (off the hot path), as the reference's statistics pass does
        const bool fast = OUT != QF_OUT_STATS && m < 0x7F800000u && !T.ref_elems;
        uint32_t vw[4];
#pragma unroll
        for (int i = 0; i < 4; i++) vw[i] = H ? qf_cvt2(y[2 * i], y[2 * i + 1]) : w[rr][i];   // fast path's rounding
        uint32_t rnd[4] = {0, 0, 0, 0};
        if (SR) {   // rows g + rr, g + rr + 1 (rr even; r0 and g are even) share the draws of their squares
            if (!(rr & 1)) {
#pragma unroll
                for (int i = 0; i < 4; i++) w64[i] = qf_rng64(T.key, pm + (uint64_t)i * QF_RNG_MUL);
                pm += pstep;
            }
#pragma unroll
            for (int i = 0; i < 4; i++) rnd[i] = qf_rng_row(w64[i], rr);
        }
        uint32_t o[4] = {0, 0, 0, 0};   // fake: the row's 8 BF16 values; packed: o[0] its 8 codes
        if (fast) {
            if constexpr (OUT == QF_OUT_PACKED) {
#pragma unroll
                for (int i = 0; i < 4; i++)
                    o[0] |= qf_fast_codes<SR>(T, qf_lo(vw[i]), qf_hi(vw[i]), vw[i], bs.inv, bs.inv, rnd[i]) << (8 * i);
            } else {
                qf_fast_words<SR>(T.g, vw, bs, rnd, o);
            }
        } else {   // rare: a block holding inf / NaN; rolled so that the reference code appears once
#pragma unroll 1
            for (int i = 0; i < 4; i++) {
                // the reference rounding of the rotated values (NaN payloads), here only: a select
                // between the two in the fast path would make the compiler compute both
                const uint32_t x = H ? qf_cvt2_ref(qf_pick(y, 2 * i), qf_pick(y, 2 * i + 1)) : qf_pick(vw, i);
                if constexpr (OUT == QF_OUT_STATS) {
                    if (cv && r < nr) qf_slow_stats_pair(T.p, qf_lo(x), qf_hi(x), bs, bs, T.sr, qf_pick(rnd, i), tdec, st);
                } else if constexpr (OUT == QF_OUT_PACKED) {
                    o[0] |= qf_slow_codes(T.p, qf_lo(x), qf_hi(x), bs, bs, SR, qf_pick(rnd, i)) << (8 * i);
                } else {
                    const uint32_t ow = qf_slow_pair(T.p, qf_lo(x), qf_hi(x), bs, bs, SR, qf_pick(rnd, i));
#pragma unroll
                    for (int k = 0; k < 4; k++) o[k] = k == i ? ow : o[k];
                }
            }
        }
        if constexpr (OUT == QF_OUT_FAKE) {
            if (cv && r < nr) *(uint4*)(dst + r * T.ld_fake) = make_uint4(o[0], o[1], o[2], o[3]);
        } else if constexpr (OUT == QF_OUT_PACKED) {
            if (cv && r < nr) qf_store_packed_row(T, A.cols, r0 + r, c0, o[0], bs.bits);
        } else if constexpr (OUT == QF_OUT_FP8) {   // row r's offset from the lane that computed it (all lanes)
            const int off = __shfl_sync(0xFFFFFFFFu, my_off, (lane & 16) | r);
            const float inv = __shfl_sync(0xFFFFFFFFu, my_inv, (lane & 16) | r);
            if (cv && r < nr) {
                const int64_t row = r0 + r;
                const uint32_t b01 = qf_fold2(o[0], inv) | (qf_fold2(o[1], inv) << 16);
                const uint32_t b23 = qf_fold2(o[2], inv) | (qf_fold2(o[3], inv) << 16);
                *(uint2*)(T.fp8 + row * T.ld_fp8 + c0) = make_uint2(b01, b23);
                below += leader && (row & (T.bw - 1)) == 0 && fp8_fold_counted(bs.bits, off, T.dmin);
            }
        }
    }
    qf_rotate_rows(w);
    }
    if constexpr (OUT == QF_OUT_FP8) qf_count_below(T, below);
}

// ---------------------------------------------------------------------------------------------------
// Apply, column-wise target (axis 0). Consumes w (sign flips, then fake outputs in place). OUT, st: as axis 1.

template <int H, bool SR, int OUT>
__device__ __forceinline__ void qf_apply_axis0(const QFTarget& T, const QFArgs& A, uint32_t (&w)[QF_ROWS][4],
                                               int64_t r0, int64_t c0, int lane, float s_enc, QuantStats* st) {
    const int rg = lane >> 4;
    if (H) qf_col_signs(T, H, rg, w);
    const bool twod = T.bw > 1;
    const int l32 = T.bl == 32;
    uint32_t tile_m = 0;
    if (twod) {
        if (H) {
#pragma unroll
            for (int p = 0; p < 4; p++) {
                float lo[QF_ROWS], hi[QF_ROWS];
                qf_rot_cols<H>(w, p, T.hscale, rg, lo, hi, qf_hrun<H>(T));
                uint32_t ml = 0, mh = 0;
#pragma unroll
                for (int r = 0; r < QF_ROWS; r++) { ml = qf_max(ml, qf_absbits(lo[r])); mh = qf_max(mh, qf_absbits(hi[r])); }
                tile_m = qf_max(tile_m, qf_max(qf_rmax(ml, lo), qf_rmax(mh, hi)));
            }
        } else {
            uint32_t m2 = 0;
#pragma unroll
            for (int r = 0; r < QF_ROWS; r++)
#pragma unroll
                for (int i = 0; i < 4; i++) m2 = qf_vmax(m2, w[r][i] & 0x7FFF7FFFu);
            tile_m = qf_hmax(m2);
        }
        tile_m = qf_shfl_max(tile_m, 1);
        if (l32) { tile_m = qf_shfl_max(tile_m, 2); tile_m = qf_shfl_max(tile_m, 16); }
    }
    // SR: as in qf_apply_axis1; the column pair p of the thread's 16 rows is 8 squares, cols / 2 draws apart
    const uint64_t pm0 = SR ? ((uint64_t)(r0 >> 1) * (uint64_t)(A.cols >> 1) + (uint64_t)(c0 >> 1)) * QF_RNG_MUL : 0;
    const uint64_t pstep = SR ? (uint64_t)(A.cols >> 1) * QF_RNG_MUL : 0;
    // packed and statistics: the thread's columns exist, and then all its 16 rows (rows % L == 0)
    const bool valid = c0 < A.cols && r0 < A.rows;
    const float tdec = quant_tensor_scale_dec(&T.p, s_enc);   // statistics only
    // FP8: each column's offset; blocks counted once, by their first lane (rg 0 for 32 rows; for 2D blocks
    // also the first lane and column pair of the block's columns)
    int off[8];
#pragma unroll
    for (int j = 0; j < 8; j++) off[j] = OUT == QF_OUT_FP8 && c0 < A.cols ? qf_fold_offset(T, c0 + j) : 0;
    const bool leader = OUT == QF_OUT_FP8 && c0 < A.cols && (!l32 || rg == 0) && (!twod || (lane & 15 & (l32 ? 3 : 1)) == 0);
    unsigned below = 0;
#pragma unroll 1
    for (int p = 0; p < 4; p++) {   // rolled (see qf_rotate_cols): column pair p is in w[.][0]
        uint32_t mlo, mhi;
        uint32_t vw[QF_ROWS];
        float lo[QF_ROWS], hi[QF_ROWS];
        if (H) {
            qf_rot_cols<H>(w, 0, T.hscale, rg, lo, hi, qf_hrun<H>(T));
            mlo = 0; mhi = 0;
#pragma unroll
            for (int r = 0; r < QF_ROWS; r++) { mlo = qf_max(mlo, qf_absbits(lo[r])); mhi = qf_max(mhi, qf_absbits(hi[r])); }
            mlo = qf_rmax(mlo, lo); mhi = qf_rmax(mhi, hi);
            if (l32 && !twod) { mlo = qf_shfl_max(mlo, 16); mhi = qf_shfl_max(mhi, 16); }
        } else {
            uint32_t m2 = 0;
#pragma unroll
            for (int r = 0; r < QF_ROWS; r++) m2 = qf_vmax(m2, w[r][0] & 0x7FFF7FFFu);
            if (l32 && !twod) m2 = qf_vmax(m2, __shfl_xor_sync(0xFFFFFFFFu, m2, 16));
            mlo = m2 << 16; mhi = m2 & 0xFFFF0000u;
        }
        if (twod) { mlo = tile_m; mhi = tile_m; }
        const QuantBlockScale blo = quant_block_scale(&T.p, f32_from_bits(mlo), s_enc);
        const QuantBlockScale bhi = twod ? blo : quant_block_scale(&T.p, f32_from_bits(mhi), s_enc);
        // statistics take the reference elements, as in axis 1
        const bool fast = OUT != QF_OUT_STATS && qf_max(mlo, mhi) < 0x7F800000u && !T.ref_elems;
        if (OUT == QF_OUT_FP8 && leader && (!twod || p == 0))
            below += fp8_fold_counted(blo.bits, qf_pick(off, 2 * p), T.dmin) +
                     (!twod && fp8_fold_counted(bhi.bits, qf_pick(off, 2 * p + 1), T.dmin));
#pragma unroll
        for (int r = 0; r < QF_ROWS; r++) vw[r] = H ? qf_cvt2(lo[r], hi[r]) : w[r][0];   // fast path's rounding
        uint64_t pm = pm0 + (uint64_t)p * QF_RNG_MUL;
        uint64_t clo = 0, chi = 0;   // packed: the 16 codes of column 2p and of column 2p + 1, row r in nibble r
        if (fast) {
            uint64_t w64 = 0;
#pragma unroll
            for (int r = 0; r < QF_ROWS; r++) {
                if (SR && !(r & 1)) { w64 = qf_rng64(T.key, pm); pm += pstep; }
                const uint32_t rnd = SR ? qf_rng_row(w64, r) : 0u;
                if constexpr (OUT == QF_OUT_PACKED) {
                    const uint32_t cb = qf_fast_codes<SR>(T, qf_lo(vw[r]), qf_hi(vw[r]), vw[r], blo.inv, bhi.inv, rnd);
                    clo |= (uint64_t)(cb & 15u) << (4 * r);
                    chi |= (uint64_t)(cb >> 4) << (4 * r);
                } else {
                    w[r][0] = qf_fast_pair<SR>(T.g, qf_lo(vw[r]), qf_hi(vw[r]), vw[r], blo.inv, blo.sdec, bhi.inv, bhi.sdec, rnd);
                }
            }
        } else {   // rare: a block holding inf / NaN; rolled so that the reference code appears once
#pragma unroll 1
            for (int r = 0; r < QF_ROWS; r++) {
                const uint32_t rnd = SR ? qf_rng_row(qf_rng64(T.key, pm + (uint64_t)(r >> 1) * pstep), r) : 0u;
                const uint32_t x = H ? qf_cvt2_ref(qf_pick(lo, r), qf_pick(hi, r)) : qf_pick(vw, r);   // as in axis 1
                if constexpr (OUT == QF_OUT_STATS) {
                    if (valid) qf_slow_stats_pair(T.p, qf_lo(x), qf_hi(x), blo, bhi, T.sr, rnd, tdec, st);
                } else if constexpr (OUT == QF_OUT_PACKED) {
                    const uint32_t cb = qf_slow_codes(T.p, qf_lo(x), qf_hi(x), blo, bhi, SR, rnd);
                    clo |= (uint64_t)(cb & 15u) << (4 * r);
                    chi |= (uint64_t)(cb >> 4) << (4 * r);
                } else {
                    const uint32_t ow = qf_slow_pair(T.p, qf_lo(x), qf_hi(x), blo, bhi, SR, rnd);
#pragma unroll
                    for (int k = 0; k < QF_ROWS; k++) w[k][0] = k == r ? ow : w[k][0];
                }
            }
        }
        if constexpr (OUT == QF_OUT_PACKED) {
            if (valid) qf_store_packed_cols(T, A.rows, c0 + 2 * p, r0, clo, chi, blo.bits, bhi.bits);
        }
        qf_rotate_cols(w);
    }
    if constexpr (OUT == QF_OUT_FAKE) {
        const bool cv = c0 < A.cols;
        const int64_t nr = A.rows - r0;
        uint16_t* dst = T.fake + r0 * T.ld_fake + c0;
#pragma unroll
        for (int r = 0; r < QF_ROWS; r++)
            if (cv && r < nr) *(uint4*)(dst + r * T.ld_fake) = make_uint4(w[r][0], w[r][1], w[r][2], w[r][3]);
    }
    if constexpr (OUT == QF_OUT_FP8) {   // column j of the patch -> 16 consecutive bytes of row c0 + j of the
        if (valid) {                      // transposed operand (rows % 16 == 0: whole patches)
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const float inv = exp2_exact(-off[j]);
                uint32_t b[4];
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    uint32_t pr[2];
#pragma unroll
                    for (int h = 0; h < 2; h++) {   // rows 4q + 2h, 4q + 2h + 1: one word of BF16 halves j & 1
                        const uint32_t a = w[4 * q + 2 * h][j >> 1], c = w[4 * q + 2 * h + 1][j >> 1];
                        const uint32_t pair = (j & 1) ? __byte_perm(a, c, 0x7632) : __byte_perm(a, c, 0x5410);
                        pr[h] = qf_fold2(pair, inv);
                    }
                    b[q] = pr[0] | (pr[1] << 16);
                }
                *(uint4*)(T.fp8 + (c0 + j) * T.ld_fp8 + r0) = make_uint4(b[0], b[1], b[2], b[3]);
                if (r0 == 0) T.fold_scale[c0 + j] = fp8_fold_scale(off[j]);
            }
        }
        qf_count_below(T, below);
    }
}

// ---------------------------------------------------------------------------------------------------
// Kernels. HA: Hadamard size of the row-wise target (-1: none), HB: of the column-wise target.

// 32-bit division (tile counts are below 2^31, qf_prepare): a 64-bit one is a long subroutine, and the apply
// kernels are bound by the integer pipe.
__device__ __forceinline__ void qf_tile_origin(const QFArgs& A, int64_t t, int lane, int64_t* r0, int64_t* c0) {
    const uint32_t tr = (uint32_t)t / (uint32_t)A.tiles_c, tc = (uint32_t)t - tr * (uint32_t)A.tiles_c;
    *r0 = (int64_t)tr * QF_TILE_R + (lane >> 4) * QF_ROWS;
    *c0 = (int64_t)tc * QF_TILE_C + (lane & 15) * 8;
}

// The FP8 output form's per-row maxima (fp8_fold.h), taken by the amax pass. Row-wise target: rm[r] the
// (rounded) maximum of the thread's part of row r0 + r; one atomicMax per row of the tile (per band of
// block_w rows for 2D blocks).
__device__ __forceinline__ void qf_fold_rows(const QFTarget& T, uint32_t (&rm)[QF_ROWS], int64_t r0, int lane,
                                             int64_t rows) {
    const int cg = lane & 15;
    if (T.bw == 1) {
        const uint32_t m = qf_transpose_max16(rm, cg);
        if (r0 + cg < rows && m) atomicMax(T.fold_max + r0 + cg, m);
        return;
    }
    uint32_t m = 0;
#pragma unroll
    for (int r = 0; r < QF_ROWS; r++) m = qf_max(m, rm[r]);
#pragma unroll
    for (int x = 1; x < 16; x <<= 1) m = qf_shfl_max(m, x);
    if (T.bw == 32) m = qf_shfl_max(m, 16);
    if (cg == 0 && (T.bw == 16 || lane < 16) && r0 < rows && m) atomicMax(T.fold_max + (r0 >> T.bw_log2), m);
}
// Column-wise target: cm[j] the maximum of column c0 + j over the rows the warp has seen (both row groups
// combined); one atomicMax per column (per band of block_w columns).
__device__ __forceinline__ void qf_fold_cols(const QFTarget& T, const uint32_t (&cm)[8], int64_t c0, int lane,
                                             int64_t cols) {
    if (T.bw == 1) {
#pragma unroll
        for (int j = 0; j < 8; j++)
            if (lane < 16 && c0 + j < cols && cm[j]) atomicMax(T.fold_max + c0 + j, cm[j]);
        return;
    }
    uint32_t m = 0;
#pragma unroll
    for (int j = 0; j < 8; j++) m = qf_max(m, cm[j]);
    m = qf_shfl_max(m, 1);
    if (T.bw == 32) m = qf_shfl_max(m, 2);
    if (lane < 16 && (lane & (T.bw == 32 ? 3 : 1)) == 0 && c0 < cols && m) atomicMax(T.fold_max + (c0 >> T.bw_log2), m);
}

// FOLD: also the FP8 targets' per-row maxima (a separate instantiation, so that the others keep their registers).
template <int HA, int HB, bool FOLD>
__global__ void __launch_bounds__(QF_THREADS, QF_MIN_CTAS) qf_amax_kernel(const __grid_constant__ QFArgs A) {
    __shared__ uint32_t red[2][QF_WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int cg = lane & 15, rg = lane >> 4;
    uint32_t m2raw = 0, ma = 0, mb = 0, ma_nan = 0, mb_nan = 0;   // unrounded maxima; rounded maxima of NaN groups
    uint32_t smask[4] = {0, 0, 0, 0};
    if (HA > 0) qf_row_signs(A.t[0], HA, cg, smask);
    // FP8 maxima: per row of each tile; per column, kept while the warp stays on one tile column (the
    // launch makes that the whole run) and flushed when it moves
    const bool fold_r = FOLD && HA >= 0 && A.t[0].fold_max, fold_c = FOLD && HB >= 0 && A.t[1].fold_max;
    uint32_t cacc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t cacc_c0 = -1;
    for (int64_t t = (int64_t)blockIdx.x * QF_WARPS + warp; t < A.tiles; t += (int64_t)gridDim.x * QF_WARPS) {
        int64_t r0, c0;
        qf_tile_origin(A, t, lane, &r0, &c0);
        uint32_t w[QF_ROWS][4];
        qf_load(A, r0, c0, false, w);
        uint32_t rm[QF_ROWS];
        if (HA == 0 && fold_r) {
#pragma unroll
            for (int r = 0; r < QF_ROWS; r++)
                rm[r] = qf_hmax(qf_vmax(qf_vmax(w[r][0] & 0x7FFF7FFFu, w[r][1] & 0x7FFF7FFFu),
                                        qf_vmax(w[r][2] & 0x7FFF7FFFu, w[r][3] & 0x7FFF7FFFu)));
        }
        if (HA == 0 || HB == 0) {
#pragma unroll
            for (int r = 0; r < QF_ROWS; r++)
#pragma unroll
                for (int i = 0; i < 4; i++) m2raw = qf_vmax(m2raw, w[r][i] & 0x7FFF7FFFu);
        }
        if (HA > 0) {
#pragma unroll
            for (int r = 0; r < QF_ROWS; r++) {
                float y[8];
                qf_rot_row<HA>(w[r], smask, A.t[0].hscale, cg, y, qf_hrun<HA>(A.t[0]));
                uint32_t mr = 0;
#pragma unroll
                for (int j = 0; j < 8; j++) mr = qf_max(mr, qf_absbits(y[j]));
                if (mr <= 0x7F800000u) ma = qf_max(ma, mr);
                else ma_nan = qf_max(ma_nan, qf_rmax(mr, y));
                if (fold_r) rm[r] = qf_rmax(mr, y);
            }
        }
        if (fold_r) qf_fold_rows(A.t[0], rm, r0, lane, A.rows);
        if (fold_c && c0 != cacc_c0) {
            if (cacc_c0 >= 0) qf_fold_cols(A.t[1], cacc, cacc_c0, lane, A.cols);
#pragma unroll
            for (int j = 0; j < 8; j++) cacc[j] = 0;
            cacc_c0 = c0;
        }
        if (HB == 0 && fold_c) {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                uint32_t m2 = 0;
#pragma unroll
                for (int r = 0; r < QF_ROWS; r++) m2 = qf_vmax(m2, w[r][i] & 0x7FFF7FFFu);
                m2 = qf_vmax(m2, __shfl_xor_sync(0xFFFFFFFFu, m2, 16));
                cacc[2 * i] = qf_max(cacc[2 * i], m2 << 16);
                cacc[2 * i + 1] = qf_max(cacc[2 * i + 1], m2 & 0xFFFF0000u);
            }
        }
        // column-wise with a Hadamard: H16's tensor amax needs only the last butterfly stage's |a| + |b|
        // (qf_col16_amax); an FP8 target's column maxima need the rotated columns themselves
        if (HB == 16 && !fold_c) {
            qf_col_signs(A.t[1], HB, rg, w);
#pragma unroll
            for (int p = 0; p < 4; p++) {
                float lo[QF_ROWS], hi[QF_ROWS];
#pragma unroll
                for (int r = 0; r < QF_ROWS; r++) { lo[r] = qf_lo(w[r][p]); hi[r] = qf_hi(w[r][p]); }
                qf_col16_amax(lo, A.t[1].hscale, &mb, &mb_nan);
                qf_col16_amax(hi, A.t[1].hscale, &mb, &mb_nan);
            }
        } else if (HB > 0) {
            qf_col_signs(A.t[1], HB, rg, w);
#pragma unroll
            for (int p = 0; p < 4; p++) {
                float lo[QF_ROWS], hi[QF_ROWS];
                qf_rot_cols<HB>(w, p, A.t[1].hscale, rg, lo, hi, qf_hrun<HB>(A.t[1]));
                uint32_t ml = 0, mh = 0;
#pragma unroll
                for (int r = 0; r < QF_ROWS; r++) { ml = qf_max(ml, qf_absbits(lo[r])); mh = qf_max(mh, qf_absbits(hi[r])); }
                if (qf_max(ml, mh) <= 0x7F800000u) mb = qf_max(mb, qf_max(ml, mh));
                else mb_nan = qf_max(mb_nan, qf_max(qf_rmax(ml, lo), qf_rmax(mh, hi)));
                if (fold_c) {   // the column pair's rounded maxima, both row groups
                    cacc[2 * p] = qf_max(cacc[2 * p], qf_shfl_max(qf_rmax(ml, lo), 16));
                    cacc[2 * p + 1] = qf_max(cacc[2 * p + 1], qf_shfl_max(qf_rmax(mh, hi), 16));
                }
            }
        }
    }
    if (fold_c && cacc_c0 >= 0) qf_fold_cols(A.t[1], cacc, cacc_c0, lane, A.cols);
    const uint32_t raw = qf_hmax(m2raw);
    uint32_t m[2] = {HA > 0 ? qf_max(qf_round_bits(ma), ma_nan) : raw, HB > 0 ? qf_max(qf_round_bits(mb), mb_nan) : raw};
#pragma unroll
    for (int k = 0; k < 2; k++) {
#pragma unroll
        for (int x = 16; x > 0; x >>= 1) m[k] = qf_shfl_max(m[k], x);
        if (lane == 0) red[k][warp] = m[k];
    }
    __syncthreads();
    if (threadIdx.x < 2) {
        const int k = threadIdx.x;
        if ((k == 0 && HA < 0) || (k == 1 && HB < 0)) return;
        uint32_t mm = 0;
        for (int i = 0; i < QF_WARPS; i++) mm = qf_max(mm, red[k][i]);
        if (mm) atomicMax((unsigned int*)A.t[k].amax, mm);
    }
}

// Registers: the thread's patch (64) plus one target's working set; 128-thread CTAs, at least 3 per SM
// (at most 168 registers; a cap of 128 spilled ~320 bytes in the column-wise Hadamard kernel).
// OUT: the output form of its targets (QF_OUT_*); a statistics kernel has one target, and its double sums
// and reference elements need more registers (diagnostics: fewer CTAs per SM rather than spills).
template <int HA, int HB, int OUT>
__global__ void __launch_bounds__(QF_THREADS, OUT == QF_OUT_STATS ? 1 : QF_MIN_CTAS)
    qf_apply_kernel(const __grid_constant__ QFArgs A) {
    static_assert(OUT != QF_OUT_STATS || (HA < 0) != (HB < 0), "a statistics kernel has one target");
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float s_enc[2] = {1.0f, 1.0f};
#pragma unroll
    for (int k = 0; k < 2; k++) {
        if ((k == 0 && HA < 0) || (k == 1 && HB < 0)) continue;
        s_enc[k] = quant_tensor_scale_enc(&A.t[k].p, *A.t[k].amax);
        if (OUT != QF_OUT_STATS && blockIdx.x == 0 && threadIdx.x == 0)   // statistics write nothing else
            *A.t[k].scale_dec = quant_tensor_scale_dec(&A.t[k].p, s_enc[k]);
    }
    const int64_t t = (int64_t)blockIdx.x * QF_WARPS + warp;
    if (t >= A.tiles) return;
    int64_t r0, c0;
    qf_tile_origin(A, t, lane, &r0, &c0);
    uint32_t w[QF_ROWS][4];
    qf_load(A, r0, c0, true, w);
    QuantStats st;   // QF_OUT_STATS: this thread's sums (dead code in the other forms)
    memset(&st, 0, sizeof(st));
    // statistics: one instantiation, which draws the SR bits and rounds as T.sr says (diagnostics only)
    if constexpr (HA >= 0) {
        constexpr int H = HA > 0 ? HA : 0;
        if constexpr (OUT == QF_OUT_STATS) qf_apply_axis1<H, true, OUT>(A.t[0], A, w, r0, c0, lane, s_enc[0], &st);
        else if (A.t[0].sr) qf_apply_axis1<H, true, OUT>(A.t[0], A, w, r0, c0, lane, s_enc[0], &st);
        else qf_apply_axis1<H, false, OUT>(A.t[0], A, w, r0, c0, lane, s_enc[0], &st);
    }
    if constexpr (HB >= 0) {
        constexpr int H = HB > 0 ? HB : 0;
        if constexpr (OUT == QF_OUT_STATS) qf_apply_axis0<H, true, OUT>(A.t[1], A, w, r0, c0, lane, s_enc[1], &st);
        else if (A.t[1].sr) qf_apply_axis0<H, true, OUT>(A.t[1], A, w, r0, c0, lane, s_enc[1], &st);
        else qf_apply_axis0<H, false, OUT>(A.t[1], A, w, r0, c0, lane, s_enc[1], &st);
    }
    if constexpr (OUT == QF_OUT_STATS) quant_stats_warp_flush(st, A.t[HA >= 0 ? 0 : 1].stats);   // whole warps
}

// ---------------------------------------------------------------------------------------------------
// Launchers

template <int HA, int HB, bool FOLD>
static inline void qf_launch_amax(const QFLaunch& L, cudaStream_t s) {
    static int per_sm = 0;
    int64_t blocks = ceil_div(L.a.tiles, QF_WARPS);
    const int64_t cap = qf_resident_ctas(qf_amax_kernel<HA, HB, FOLD>, 0, &per_sm);
    if (blocks > cap) blocks = cap;
    // a column-wise FP8 target keeps its column maxima while a warp stays on one tile column: with a grid
    // stride (blocks x warps tiles) that is a multiple of the tile columns, it always does
    if (FOLD && L.a.t[1].fold_max && blocks > L.a.tiles_c) blocks -= blocks % L.a.tiles_c;
    qf_amax_kernel<HA, HB, FOLD><<<(unsigned)blocks, QF_THREADS, 0, s>>>(L.a);
    cuda_check_last();
}


template <int HA, int HB, int OUT>
static inline void qf_launch_apply(const QFLaunch& L, cudaStream_t s) {
    qf_apply_kernel<HA, HB, OUT><<<(unsigned)ceil_div(L.a.tiles, QF_WARPS), QF_THREADS, 0, s>>>(L.a);
    cuda_check_last();
}
