// group.cuh: the GPU quantizer for the rules whose block decision needs sums over a whole block in a
// fixed order: Four Over Six (scale rule 4o6, docs/NUMERICS_NEXT.md section 1) and MS-EDEN (rounding eden,
// section 2).
// defines: qg_4o6_kernel, qg_eden_amax_kernel, qg_eden_apply_kernel, qg_launch_4o6(), qg_launch_eden_amax(),
//          qg_launch_eden_apply(), qg_eden_word(), qg_eden_code(), qg_eden_fake()
// 4o6: the amax pass is patch.cuh's, and the routing (route.h: QK_4O6) sends 4o6 targets here for their apply pass
// (fake, packed or statistics output; E2M1 grid, blocks 1x16 to 32x32, Hadamard 0..32, as quant_fast_supported
// checks) unless the whole-block kernels make them (fake copies in 1x16 blocks with H16 or none, the trainer's 1D
// ones: qf_46_words, qf_46_pair, the same arithmetic).
// MS-EDEN: both passes here (its 128-point rotation), one target per call.
// Bit-identical to the CPU twin (fp4/quant_cpu.h, quant_cpu_pass with
// quant_block_scale_4o6_cpu); dev/test/test_quant_gpu_cpu.cu compares them.
//
// Four Over Six. One thread per unit: W operand rows x U elements along K (W the block height: 1, 16 or 32;
// U = max(L, H), so the unit holds whole blocks and whole Hadamard groups). The thread
//   1. takes each block's amax (of the rotated, BF16-rounded values with a Hadamard),
//   2. rounds every element with both candidates (the block max to 6, and to 4; the same SR bits) and sums
//      each candidate's squared error in the twin's order (operand row by row, along k; no FMA),
//   3. keeps the 4-candidate iff its sum is strictly smaller, and writes the outputs of the chosen one.
// Elements of a block whose amax is finite take element.cuh's magnitude functions (qf_rne_mag / qf_sr_mag,
// checked against the reference rounding in test_quant_fast); a block holding inf or NaN keeps 6 and takes
// the reference element path. SR bits: one draw per 2 x 2 square, shared by the candidates and the outputs.
// A 1D unit loads its row and draws its bits once; a 2D unit (weights) reads its rows once per step.
// Coalescing: row-wise (axis 1), consecutive threads take consecutive units along K of one operand row;
// column-wise (axis 0), consecutive operand rows (view columns), so each element load of a warp is 32
// neighbouring view columns.
#pragma once
#include <cuda_fp8.h>
#include "llmc/base/cuda_common.cuh"
#include "llmc/fp4/formats.h"
#include "llmc/fp4/hadamard.h"
#include "llmc/fp4/stochastic_round.h"
#include "llmc/fp4/quant_cpu.h"            // QuantStats, amax_bits_update, quant_stats_element
#include "llmc/fp4/quant_diag.cuh"         // quant_stats_warp_flush
#include "llmc/fp4/quant/element.cuh"
#include "llmc/fp4/quant/kernel_args.cuh"
#include "llmc/fp4/quant/lane_ops.cuh"
#include "llmc/fp4/quant/block_rule.cuh"  // qf_46_add, qf_scale_table

#define QG_THREADS 128

// v[0..U) <- operand row i, elements [k0, k0 + U) as the quantizer sees them: rotated by H (groups of H,
// the spec's sign mask) and rounded to BF16 when the spec has a Hadamard (hadamard_bf16's arithmetic).
// Row-wise the U elements are contiguous and 16-byte aligned (k0 % 16 == 0, ld % 8 == 0): 16-byte loads.
template <int U>
__device__ __forceinline__ void qg_load_row(const QFTarget& T, const QFArgs& A, int axis, int64_t i, int64_t k0,
                                            float (&v)[U]) {
    if (axis) {
        const uint4* p = (const uint4*)(A.in + i * A.ld + k0);
#pragma unroll
        for (int q = 0; q < U / 8; q++) {
            const uint4 w = p[q];
            const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
            for (int h = 0; h < 4; h++) { v[8 * q + 2 * h] = qf_lo(ws[h]); v[8 * q + 2 * h + 1] = qf_hi(ws[h]); }
        }
    } else {
#pragma unroll
        for (int j = 0; j < U; j++) v[j] = bf16_bits_to_float(A.in[(k0 + j) * A.ld + i]);
    }
    const int H = T.p.hadamard;
    if (!H) return;
#pragma unroll
    for (int g = 0; g < U; g += 2) {   // groups of H at g = 0, H, 2H, .. (H >= 2)
        if (g % H) continue;
        switch (H) {
            case 2: hadamard_f32_n<2>(v + g, T.p.signs); break;
            case 4: if (g + 4 <= U) hadamard_f32_n<4>(v + g, T.p.signs); break;
            case 8: if (g + 8 <= U) hadamard_f32_n<8>(v + g, T.p.signs); break;
            case 16: if (g + 16 <= U) hadamard_f32_n<16>(v + g, T.p.signs); break;
            case 32: if (g + 32 <= U) hadamard_f32_n<32>(v + g, T.p.signs); break;
        }
    }
#pragma unroll
    for (int j = 0; j < U; j++) v[j] = bf16_bits_to_float(bf16_bits_rne(v[j]));
}

// SR bits of operand row i's elements [k0, k0 + U): sr_bits16 of each element's view position, element j in
// half j & 1 of rb[j / 2]. Elements 2q and 2q + 1 lie in one 2 x 2 square (k0 even): one draw per pair.
template <int U>
__device__ __forceinline__ void qg_sr_row(const QFTarget& T, const QFArgs& A, int axis, int64_t i, int64_t k0,
                                          uint32_t (&rb)[U / 2]) {
    const uint64_t half = (uint64_t)((A.cols + 1) >> 1);
#pragma unroll
    for (int q = 0; q < U / 2; q++) {
        const int64_t k = k0 + 2 * q;
        // row-wise: view (i, k), (i, k + 1), sub-squares 2 (i & 1) + 0 / 1; column-wise: view (k, i),
        // (k + 1, i), sub-squares 0 / 2 + (i & 1)
        const uint64_t w = axis ? rng_bits64(T.key, (uint64_t)(i >> 1) * half + (uint64_t)(k >> 1))
                                : rng_bits64(T.key, (uint64_t)(k >> 1) * half + (uint64_t)(i >> 1));
        const int s0 = axis ? (int)((i & 1) << 1) : (int)(i & 1), ds = axis ? 1 : 2;
        rb[q] = ((uint32_t)(w >> (16 * s0)) & 0xFFFFu) | (((uint32_t)(w >> (16 * (s0 + ds))) & 0xFFFFu) << 16);
    }
}

// |code value| of v * inv (the block's candidate), as grid_round_rne / grid_round_sr round it: the fast
// magnitude functions of quant_fast for a block whose amax is finite, the reference ones otherwise.
__device__ __forceinline__ float qg_mag(const QFTarget& T, float v, float inv, uint32_t r16, bool fast) {
    if (fast) {
        const float a = fabsf(QF_MUL(v, inv));
        return T.sr ? qf_sr_mag(T.g, a, r16) : qf_rne_mag(T.g, a);
    }
    const float x = QF_MUL(v, inv);
    const uint8_t c = T.sr ? grid_round_sr(&T.p.grid, x, r16) : grid_round_rne(&T.p.grid, x);
    return fabsf(grid_code_value(&T.p.grid, c));
}

// One candidate's squared-error term (quant_4o6_err_add with code value +-m and x = +-|v|: the signs cancel
// exactly), added to err.
__device__ __forceinline__ void qg_err_add(float& err, float m, float sdec, float v, float s_enc) {
    err = qf_46_add(err, QF_MUL(m, sdec), QF_MUL(fabsf(v), s_enc));
}

// Step 3 for one operand row: the chosen candidates' codes, written in the target's output form (fast blocks:
// sign(v) | BF16(m * sdec) by truncation, exact; others: the reference element).
template <int U, int NB, int OUT>
__device__ __forceinline__ void qg_4o6_out_row(const QFTarget& T, const QFArgs& A, int axis, int64_t i, int64_t k0,
                                               const float (&v)[U], const uint32_t (&rb)[U / 2],
                                               const QuantBlockScale (&bs)[NB], const bool (&fb)[NB], float tdec,
                                               QuantStats* st) {
    constexpr int L = U / NB;
    const int64_t K = axis ? A.cols : A.rows;
    uint32_t o[U / 2];   // fake: BF16 pairs; packed: 8 codes per word in o[0 .. U / 8)
#pragma unroll
    for (int q = 0; q < U / 2; q++) o[q] = 0;
#pragma unroll
    for (int j = 0; j < U; j++) {
        const QuantBlockScale& b = bs[j / L];
        const uint32_t r16 = (rb[j / 2] >> (16 * (j & 1))) & 0xFFFFu;
        const uint32_t vs = f32_bits(v[j]) & 0x80000000u;
        if constexpr (OUT == QF_OUT_STATS) {
            const float x = QF_MUL(v[j], b.inv);
            const uint8_t c = T.sr ? grid_round_sr(&T.p.grid, x, r16) : grid_round_rne(&T.p.grid, x);
            quant_stats_element(st, &T.p.grid, v[j], x, c, &b, tdec);
        } else if (fb[j / L]) {
            const float m = qg_mag(T, v[j], b.inv, r16, true);
            if constexpr (OUT == QF_OUT_PACKED)
                o[j / 8] |= (qf_code_index(m, T.code_mul, T.code_shift) | (vs >> 28)) << (4 * (j % 8));
            else
                o[j / 2] |= ((f32_bits(QF_MUL(m, b.sdec)) >> 16) | (vs >> 16)) << (16 * (j & 1));
        } else {
            const float x = QF_MUL(v[j], b.inv);
            const uint8_t c = T.sr ? grid_round_sr(&T.p.grid, x, r16) : grid_round_rne(&T.p.grid, x);
            if constexpr (OUT == QF_OUT_PACKED) o[j / 8] |= (uint32_t)c << (4 * (j % 8));
            else o[j / 2] |= (uint32_t)bf16_bits_rne(grid_code_value(&T.p.grid, c) * b.sdec) << (16 * (j & 1));
        }
    }
    if constexpr (OUT == QF_OUT_PACKED) {
#pragma unroll
        for (int q = 0; q < U / 8; q++) *(uint32_t*)(T.codes + i * (K / 2) + k0 / 2 + 4 * q) = o[q];
#pragma unroll
        for (int b = 0; b < NB; b++) T.scales[i * (K / L) + k0 / L + b] = bs[b].bits;
    } else if constexpr (OUT == QF_OUT_FAKE) {
        if (axis) {
            uint4* dst = (uint4*)(T.fake + i * T.ld_fake + k0);
#pragma unroll
            for (int q = 0; q < U / 8; q++) dst[q] = make_uint4(o[4 * q], o[4 * q + 1], o[4 * q + 2], o[4 * q + 3]);
        } else {
#pragma unroll
            for (int j = 0; j < U; j++) T.fake[(k0 + j) * T.ld_fake + i] = (uint16_t)(o[j / 2] >> (16 * (j & 1)));
        }
    }
}

// One unit per thread (see the top of the file). U: the unit length along K; NB = U / L blocks per row. A 1D
// unit (W = 1) loads its row and draws its SR bits once; a 2D unit reads its rows once per step.
template <int U, int NB, int OUT>
__global__ void __launch_bounds__(QG_THREADS) qg_4o6_kernel(const __grid_constant__ QFArgs A, int slot) {
    constexpr int L = U / NB;
    const QFTarget& T = A.t[slot];
    const int axis = slot == 0;
    const int64_t M = axis ? A.rows : A.cols, K = axis ? A.cols : A.rows;
    const int W = T.bw;
    const int64_t units_k = K / U, units_m = M / W;
    const int64_t u = (int64_t)blockIdx.x * QG_THREADS + threadIdx.x;
    const float s_enc = quant_tensor_scale_enc(&T.p, *T.amax);
    const float tdec = quant_tensor_scale_dec(&T.p, s_enc);
    if (OUT != QF_OUT_STATS && u == 0) *T.scale_dec = tdec;
    QuantStats st;
    memset(&st, 0, sizeof(st));
    if (u < units_k * units_m) {   // (statistics: every lane reaches the warp flush below)
        const int64_t ib = axis ? u / units_k : u % units_m, kb = axis ? u % units_k : u / units_m;
        const int64_t i0 = ib * W, k0 = kb * U;
        float v[U];
        uint32_t rb[U / 2];
#pragma unroll
        for (int q = 0; q < U / 2; q++) rb[q] = 0;
        // 1. block amaxes (NaN bits sort above inf, as amax_bits_update)
        uint32_t bm[NB];
#pragma unroll
        for (int b = 0; b < NB; b++) bm[b] = 0;
        for (int r = 0; r < W; r++) {
            qg_load_row<U>(T, A, axis, i0 + r, k0, v);
#pragma unroll
            for (int j = 0; j < U; j++) bm[j / L] = amax_bits_update(bm[j / L], v[j]);
        }
        bool fb[NB], any = false;   // per block: its amax is finite (the fast element path)
        QuantBlockScale c6[NB], c4[NB], bs[NB];
        float e6[NB], e4[NB];
#pragma unroll
        for (int b = 0; b < NB; b++) {
            fb[b] = bm[b] < 0x7F800000u;
            any = any || fb[b];
            c6[b] = quant_block_scale_e4m3_to(f32_from_bits(bm[b]), s_enc, 6.0f);
            c4[b] = quant_block_scale_e4m3_to(f32_from_bits(bm[b]), s_enc, 4.0f);
            e6[b] = 0.0f;
            e4[b] = 0.0f;
        }
        // 2. both candidates' squared errors, operand row by row, each along k (a block holding inf or NaN
        //    has NaN or inf sums, so it keeps 6: its sums are not needed)
        if (T.sr && W == 1) qg_sr_row<U>(T, A, axis, i0, k0, rb);
        for (int r = 0; r < W && any; r++) {
            if (W > 1) {
                qg_load_row<U>(T, A, axis, i0 + r, k0, v);
                if (T.sr) qg_sr_row<U>(T, A, axis, i0 + r, k0, rb);
            }
#pragma unroll
            for (int j = 0; j < U; j++) {
                const int b = j / L;
                const uint32_t r16 = (rb[j / 2] >> (16 * (j & 1))) & 0xFFFFu;
                if (!fb[b]) continue;
                qg_err_add(e6[b], qg_mag(T, v[j], c6[b].inv, r16, true), c6[b].sdec, v[j], s_enc);
                qg_err_add(e4[b], qg_mag(T, v[j], c4[b].inv, r16, true), c4[b].sdec, v[j], s_enc);
            }
        }
        // 3. the choice (ties: 6), then the outputs
#pragma unroll
        for (int b = 0; b < NB; b++) bs[b] = fb[b] && e4[b] < e6[b] ? c4[b] : c6[b];
        for (int r = 0; r < W; r++) {
            if (W > 1) {
                qg_load_row<U>(T, A, axis, i0 + r, k0, v);
                if (T.sr) qg_sr_row<U>(T, A, axis, i0 + r, k0, rb);
            }
            qg_4o6_out_row<U, NB, OUT>(T, A, axis, i0 + r, k0, v, rb, bs, fb, tdec, &st);
        }
    }
    if constexpr (OUT == QF_OUT_STATS) quant_stats_warp_flush(st, T.stats);
}

template <int U, int NB, int OUT>
static inline void qg_launch_4o6_u(const QFLaunch& L, int slot, cudaStream_t s) {
    const QFTarget& T = L.a.t[slot];
    const int64_t M = slot == 0 ? L.a.rows : L.a.cols, K = slot == 0 ? L.a.cols : L.a.rows;
    const int64_t units = (M / T.bw) * (K / U);
    fail_if(ceil_div(units, (int64_t)QG_THREADS) >= ((int64_t)1 << 31), "quantize_fast_gpu: %lld x %lld is too large "
            "for the 4o6 kernel's grid", (long long)L.a.rows, (long long)L.a.cols);
    qg_4o6_kernel<U, NB, OUT><<<(unsigned)ceil_div(units, QG_THREADS), QG_THREADS, 0, s>>>(L.a, slot);
    cuda_check_last();
}

// The apply pass of the 4o6 target in slot (0: row-wise, 1: column-wise) of a prepared launch.
template <int OUT>
static inline void qg_launch_4o6(const QFLaunch& L, int slot, cudaStream_t s) {
    const QFTarget& T = L.a.t[slot];
    const int U = T.p.hadamard > T.bl ? T.p.hadamard : T.bl;   // 16 or 32
    if (U == 16) qg_launch_4o6_u<16, 1, OUT>(L, slot, s);
    else if (T.bl == 32) qg_launch_4o6_u<32, 1, OUT>(L, slot, s);
    else qg_launch_4o6_u<32, 2, OUT>(L, slot, s);
}

// ---------------------------------------------------------------------------------------------------
// MS-EDEN (rounding `eden`, docs/NUMERICS_NEXT.md section 2): E2M1 codes rounded to nearest after a 128-point
// Hadamard with the call's signs, 1x16 E4M3 group scales under the 256 * V tensor scale, each 128-group's
// correction <u,u> / <u,q> folded into its 8 scales by stochastic rounding to neighbouring E4M3 values.
// A CTA owns a tile of 32 operand rows x one 128-group along K, staged in shared memory in operand layout
// (so a column-wise operand is read and written coalesced, in 16-byte words). A row is on 8 lanes, each
// holding one 16-element group as 8 BF16 words: lane l of warp w takes tile row 16 t + 4 w + l / 8 (t = 0, 1),
// elements 16 g .. 16 g + 15 with g = l % 8.
// Rotation (qg_eden_rotate_words): the words' sign bits flipped by the signs (XOR), butterflies h = 1 .. 8 in
// registers, h = 16, 32, 64 as shuffles (lane xor h/16; one FMA: the partner's value plus or minus the lane's,
// exact as the add or subtract it replaces), the scale, and BF16 rounding by the hardware (cvt.rn.bf16x2: equal
// to bf16_bits_rne except for NaN payloads, so a lane whose words hold a NaN rounds them with bf16_bits_rne).
// Apply (qg_eden_apply_kernel): the group's amax from its BF16 words (16-bit max), its pre-correction scale and
// inverse from the hardware's E4M3 conversion and a per-CTA table of the 128 scale bytes (qg_eden_pre_scale:
// eden_group_scale and quant_block_scale's inverse, checked for every BF16 group amax under 13 tensor amaxes in
// test_quant_fast), the codes by element.cuh's RNE magnitude function
// (a warp whose groups all have finite amaxes; else the reference element functions), and the 128-group's sums
// as the spec's tree: the lane's 4 chunk sums p_(4g+q) (4 terms each, in order), the stages d = 16, 8, 4 as
// shuffles (lane xor d/4), d = 2, 1 in registers (eden_sum128's operations, so its bits).
// Two kernels: the tensor amax of the rotated operand, then the apply pass (fake, packed or statistics output).
// When both run in one call for a fake copy (quantize_fast_gpu, the trainer's path), the rotation runs once:
// the amax pass also writes the rotated operand (BF16, exactly what the apply pass rounds) into the fake copy's
// memory, and the apply pass reads it from there and overwrites it with the fake values (a CTA reads its whole
// tile before writing it; tiles are disjoint; so the fake copy must not overlap the input unless it is the same view,
// same pointer and ld: the amax pass writes rotated tiles while other CTAs still read the input). Called apart
// (quant_fast_amax_gpu, quant_fast_apply_gpu) and for packed or statistics outputs, the apply pass rotates the
// source itself. With a source scale (QFTarget.src_dec)
// the input is a fake copy, dequantized element by element first: BF16(FP32(fake) * S_dec) (the operand source
// `src=fprop`).

#define QG_EDEN_ROWS 32
#define QG_EDEN_PITCH 130   // BF16 per shared row: 65 words, so a column of the tile spans 32 banks
#define QG_EDEN_ROWS_PER_PASS 16   // tile rows the CTA's 4 warps hold at once (4 each, 8 lanes per row)
static_assert(QG_EDEN_ROWS_PER_PASS == 4 * (QG_THREADS / 32) && QG_EDEN_ROWS % QG_EDEN_ROWS_PER_PASS == 0, "MS-EDEN lane layout");

// The tile travels in 16-byte words of 8 BF16: QG_EDEN_WORDS per thread. Word e of a tile starts at operand
// row r, k offset kk: along an operand row for axis 1 (16 words per row), across 8 neighbouring operand rows
// (view columns) of one view row for axis 0 (4 words per view row). Rows past M read 0 and are not stored (M
// is a multiple of 8 for axis 0, cols % 8 == 0: a word is wholly in or out).
#define QG_EDEN_WORDS (QG_EDEN_ROWS * 128 / 8 / QG_THREADS)

HD void qg_eden_word(int axis, int e, int* r, int* kk) {
    if (axis) { *r = e >> 4; *kk = 8 * (e & 15); }
    else { *r = 8 * (e & 3); *kk = e >> 2; }
}

// One element of a 16-group, u = y * inv -> its code (returned), |val(code)| (*mag) and the correction's term
// u * val(code) (*td), as quant_eden_cpu computes them. fast (the group's amax is finite): element.cuh's RNE
// magnitude function, the code index from its bits and u's sign, and u * val(code) = |u| * |val(code)| (the
// code carries u's sign); else the reference element functions. test_quant_fast checks both on the CPU.
HD uint8_t qg_eden_code(const QFGrid& g, float code_mul, int code_shift, const GridTraits* grid, float u, bool fast,
                        float* mag, float* td) {
    if (fast) {
        const float a = fabsf(u);
        *mag = qf_rne_mag(g, a);
        *td = QF_MUL(a, *mag);
        return (uint8_t)(qf_code_index(*mag, code_mul, code_shift) | ((f32_bits(u) >> 28) & 8u));
    }
    const uint8_t c = grid_round_rne(grid, u);
    *mag = fabsf(grid_code_value(grid, c));
    *td = QF_MUL(u, grid_code_value(grid, c));
    return c;
}

// The fake value of a code with magnitude mag under the stored scale sdec (an E4M3 value): sign | BF16(mag * sdec)
// by truncation, as mag * sdec has at most 6 significant bits (exact in BF16) = bf16_bits_rne(val(code) * sdec).
HD uint16_t qg_eden_fake(uint8_t c, float mag, float sdec) {
    return (uint16_t)(((uint32_t)(c & 8u) << 12) | (f32_bits(QF_MUL(mag, sdec)) >> 16));
}

// The pieces of the 128-point rotation and of eden_sum128 that a lane computes on its own, HD so that
// test_quant_fast runs them on the CPU with the exchanges between the 8 lanes of a row simulated:
// qg_eden_bfly_regs: the butterflies h = 1 .. 8 on the lane's 16 elements (a, b) -> (a + b, a - b);
// qg_eden_bfly_lane: one element of a butterfly h >= 16 from its own value and its partner's, the lower
// element of the pair (bit h clear) keeps the sum, the upper one the difference lower - upper, both as one
// FMA with the lane's value times +1 or -1 (an exact product: the same rounding as the add or subtract);
// qg_eden_sum_regs: the stages d = 2, 1 of eden_sum128 on the lane's 4 chunk sums (chunks 4g .. 4g + 3).
HD void qg_eden_bfly_regs(float (&y)[16]) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int h = 1; h < 16; h <<= 1) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
        for (int j = 0; j < 16; j++) {
            if (j & h) continue;
            const float a = y[j], b = y[j | h];
            y[j] = QF_ADD(a, b);
            y[j | h] = QF_SUB(a, b);
        }
    }
}
HD float qg_eden_bfly_lane(float mine, float other, bool upper) {
#if defined(__CUDA_ARCH__)
    return __fmaf_rn(mine, upper ? -1.0f : 1.0f, other);
#else
    return fmaf(mine, upper ? -1.0f : 1.0f, other);
#endif
}
HD float qg_eden_sum_regs(const float (&p)[4]) {
    float n[4];
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int q = 0; q < 4; q++) n[q] = QF_ADD(p[q], p[q ^ 2]);
    return QF_ADD(n[0], n[1]);
}

__device__ __forceinline__ int64_t qg_eden_view_offset(int axis, int64_t i, int64_t k, int64_t ld) {
    return axis ? i * ld + k : k * ld + i;
}

// Tile (operand rows [i0, i0 + 32) x k [k0, k0 + 128)) <- src, a view of M operand rows with leading dimension
// ld, in two steps: qg_eden_fetch loads a thread's words into registers (all of them before any is used, so a
// tile's loads are in flight together; L2 loads: the apply pass of QK_EDEN_ROTATED reads a tile it then
// overwrites), qg_eden_commit stores them into the shared tile, each element
// dequantized first where dec (a source scale) is given: BF16(FP32(x) * dec), by the hardware's rounding (a
// NaN product takes bf16_bits_rne, as in qg_eden_rotate_words).
__device__ __forceinline__ void qg_eden_fetch(const uint16_t* src, int64_t ld, int64_t M, int axis, int64_t i0,
                                              int64_t k0, uint4 (&w)[QG_EDEN_WORDS]) {
#pragma unroll
    for (int q = 0; q < QG_EDEN_WORDS; q++) {
        int r, kk;
        qg_eden_word(axis, threadIdx.x + q * QG_THREADS, &r, &kk);
        w[q] = make_uint4(0u, 0u, 0u, 0u);
        if (i0 + r < M) w[q] = __ldcg((const uint4*)(src + qg_eden_view_offset(axis, i0 + r, k0 + kk, ld)));
    }
}

__device__ __forceinline__ uint32_t qg_dequant2(uint32_t u, float dec) {
    const float a = QF_MUL(qf_lo(u), dec), b = QF_MUL(qf_hi(u), dec);
    const uint32_t v = qf_cvt2(a, b);
    return qf_hmax(v & 0x7FFF7FFFu) > 0x7F800000u ? qf_cvt2_ref(a, b) : v;
}

__device__ __forceinline__ void qg_eden_commit(const float* src_dec, int axis, const uint4 (&w)[QG_EDEN_WORDS],
                                               uint16_t* tile) {
    const float dec = src_dec ? *src_dec : 1.0f;
#pragma unroll
    for (int q = 0; q < QG_EDEN_WORDS; q++) {
        int r, kk;
        qg_eden_word(axis, threadIdx.x + q * QG_THREADS, &r, &kk);
        uint32_t u[4] = {w[q].x, w[q].y, w[q].z, w[q].w};
        if (src_dec) {
#pragma unroll
            for (int h = 0; h < 4; h++) u[h] = qg_dequant2(u[h], dec);
        }
        if (axis) {   // 8 elements along k: 4 aligned words of the shared row (QG_EDEN_PITCH and kk are even)
            uint32_t* p = (uint32_t*)(tile + r * QG_EDEN_PITCH + kk);
#pragma unroll
            for (int h = 0; h < 4; h++) p[h] = u[h];
        } else {      // element 2h (+1) of the word: operand row r + 2h (+1), k offset kk
#pragma unroll
            for (int h = 0; h < 4; h++) {
                tile[(r + 2 * h) * QG_EDEN_PITCH + kk] = (uint16_t)(u[h] & 0xFFFFu);
                tile[(r + 2 * h + 1) * QG_EDEN_PITCH + kk] = (uint16_t)(u[h] >> 16);
            }
        }
    }
}

// The shared tile -> dst (a view with leading dimension ld; the inverse of qg_eden_fetch / qg_eden_commit);
// operand rows past M are not stored.
__device__ __forceinline__ void qg_eden_store_tile(uint16_t* dst, int64_t ld, int64_t M, int axis, int64_t i0,
                                                   int64_t k0, const uint16_t* tile) {
#pragma unroll
    for (int q = 0; q < QG_EDEN_WORDS; q++) {
        int r, kk;
        qg_eden_word(axis, threadIdx.x + q * QG_THREADS, &r, &kk);
        if (i0 + r >= M) continue;
        uint32_t u[4];
        if (axis) {
            const uint32_t* p = (const uint32_t*)(tile + r * QG_EDEN_PITCH + kk);
#pragma unroll
            for (int h = 0; h < 4; h++) u[h] = p[h];
        } else {
#pragma unroll
            for (int h = 0; h < 4; h++)
                u[h] = (uint32_t)tile[(r + 2 * h) * QG_EDEN_PITCH + kk] | ((uint32_t)tile[(r + 2 * h + 1) * QG_EDEN_PITCH + kk] << 16);
        }
        __stcg((uint4*)(dst + qg_eden_view_offset(axis, i0 + r, k0 + kk, ld)), make_uint4(u[0], u[1], u[2], u[3]));
    }
}

// The lane's 8 words (group g of tile row r): read from / written to the shared tile (4-byte aligned: the pitch
// is even).
__device__ __forceinline__ void qg_eden_words_get(const uint16_t* tile, int r, int g, uint32_t (&x)[8]) {
    const uint32_t* p = (const uint32_t*)(tile + r * QG_EDEN_PITCH + 16 * g);
#pragma unroll
    for (int q = 0; q < 8; q++) x[q] = p[q];
}
__device__ __forceinline__ void qg_eden_words_put(uint16_t* tile, int r, int g, const uint32_t (&x)[8]) {
    uint32_t* p = (uint32_t*)(tile + r * QG_EDEN_PITCH + 16 * g);
#pragma unroll
    for (int q = 0; q < 8; q++) p[q] = x[q];
}

// The sign bits of group g's 16 elements as XOR masks of its 8 BF16 words (bit 15: the even element, 31: the odd).
__device__ __forceinline__ void qg_eden_sign_words(const QFTarget& T, int g, uint32_t (&sm)[8]) {
    const uint32_t sg = (T.p.signs[g >> 1] >> (16 * (g & 1))) & 0xFFFFu;
#pragma unroll
    for (int q = 0; q < 8; q++) sm[q] = ((sg >> (2 * q)) & 1u) << 15 | ((sg >> (2 * q + 1)) & 1u) << 31;
}

// The 16-bit maximum of the magnitudes of 8 BF16 words (a NaN's bits sort above inf's, as amax_bits_update).
__device__ __forceinline__ uint32_t qg_words_max(const uint32_t (&x)[8]) {
    uint32_t m2 = 0;
#pragma unroll
    for (int q = 0; q < 8; q++) m2 = qf_vmax(m2, x[q] & 0x7FFF7FFFu);
    return m2;
}

// The lane's 8 words of group g (its sign masks sm) -> rotated as hadamard_bf16 with n = 128 (the butterflies,
// one multiply by hadamard_scale(128), BF16 rounding), in place; returns their qg_words_max. Every lane of the
// warp calls it (shuffles).
__device__ __forceinline__ uint32_t qg_eden_rotate_words(uint32_t (&x)[8], const uint32_t (&sm)[8], int g, float sc) {
    float y[16];
#pragma unroll
    for (int q = 0; q < 8; q++) {
        const uint32_t v = x[q] ^ sm[q];
        y[2 * q] = qf_lo(v);
        y[2 * q + 1] = qf_hi(v);
    }
    qg_eden_bfly_regs(y);
#pragma unroll
    for (int s = 1; s < 8; s <<= 1) {   // h = 16 s: the partner lane (group g ^ s) holds element e ^ h
        const bool upper = g & s;
#pragma unroll
        for (int j = 0; j < 16; j++) y[j] = qg_eden_bfly_lane(y[j], __shfl_xor_sync(0xFFFFFFFFu, y[j], s), upper);
    }
#pragma unroll
    for (int q = 0; q < 8; q++) x[q] = qf_cvt2(QF_MUL(y[2 * q], sc), QF_MUL(y[2 * q + 1], sc));
    uint32_t m2 = qg_words_max(x);
    if (qf_hmax(m2) > 0x7F800000u) {   // a NaN: bf16_bits_rne's (the same 0x7FFF for the GPU's canonical NaN; kept
                                       // so that no NaN's rounding rests on the hardware's)
#pragma unroll
        for (int q = 0; q < 8; q++) x[q] = qf_cvt2_ref(QF_MUL(y[2 * q], sc), QF_MUL(y[2 * q + 1], sc));
        m2 = qg_words_max(x);
    }
    return m2;
}

// The pre-correction scale of a group with amax bits m and its inverse, (eden_group_scale(amax, S_enc),
// fminf(1 / (s * (1 / S_enc)), FLT_MAX)) as quant_block_scale's eden rule: the byte of the hardware's E4M3
// conversion of fminf(amax * mult, FLT_MAX), mult = S_enc * (1 / EDEN_V), looked up in tab, which
// qf_scale_table(tab, 1 / S_enc, 1) filled (eden's byte 0 -> 1).
__device__ __forceinline__ float2 qg_eden_pre_scale(const float2* tab, float mult, uint32_t m) {
    return tab[__nv_cvt_float_to_fp8(fminf(QF_MUL(f32_from_bits(m), mult), FLT_MAX), __NV_SATFINITE, __NV_E4M3)];
}

// eden_sum128 of a row's 128 terms from the lane's 4 chunk sums p[q] = p_(4g+q) (each 4 terms added in order):
// the stages d = 16, 8, 4 pair chunk j with j ^ d, which another lane of the row holds (lane xor d/4); d = 2, 1
// pair chunks of this lane. Every lane of the warp calls it; all 8 lanes of a row return the row's sum.
__device__ __forceinline__ float qg_eden_sum_lanes(float (&p)[4]) {
#pragma unroll
    for (int x = 4; x >= 1; x >>= 1) {
#pragma unroll
        for (int q = 0; q < 4; q++) p[q] = QF_ADD(p[q], __shfl_xor_sync(0xFFFFFFFFu, p[q], x));
    }
    return qg_eden_sum_regs(p);
}

__device__ __forceinline__ void qg_eden_tile_origin(const QFArgs& A, int axis, int64_t t, int64_t* i0, int64_t* k0) {
    const int64_t M = axis ? A.rows : A.cols;
    const int64_t tiles_m = ceil_div(M, (int64_t)QG_EDEN_ROWS);
    *i0 = (t % tiles_m) * QG_EDEN_ROWS;
    *k0 = (t / tiles_m) * 128;
}

static inline int64_t qg_eden_tiles(const QFArgs& A, int axis) {
    const int64_t M = axis ? A.rows : A.cols, K = axis ? A.cols : A.rows;
    return ceil_div(M, (int64_t)QG_EDEN_ROWS) * (K / 128);
}

// Pass 1: max |y| over the rotated operand into *T.amax (NaN bits sort above inf; zeroed by the caller). A CTA
// walks its tiles with the next tile's words in flight while it rotates the current one. STORE: the rotated
// tile also goes to the target's fake copy (the apply pass then reads it: qg_eden_apply_kernel<.., true>).
// Tile rows past M hold zeros (the fetch's, times a finite source scale 1 / S_enc where there is one): they
// rotate to zeros, with no effect on the maximum, and are not stored.
template <bool STORE>
__global__ void __launch_bounds__(QG_THREADS) qg_eden_amax_kernel(const __grid_constant__ QFArgs A, int slot, int64_t tiles) {
    __shared__ __align__(16) uint16_t tile[QG_EDEN_ROWS * QG_EDEN_PITCH];   // read and written in words too
    const QFTarget& T = A.t[slot];
    const int axis = slot == 0;
    const int64_t M = axis ? A.rows : A.cols;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane & 7;
    const float sc = hadamard_scale(128);
    uint32_t sm[8];
    qg_eden_sign_words(T, g, sm);
    uint32_t m2 = 0;
    uint4 w[QG_EDEN_WORDS];
    int64_t i0 = 0, k0 = 0;
    if (blockIdx.x < tiles) {
        qg_eden_tile_origin(A, axis, blockIdx.x, &i0, &k0);
        qg_eden_fetch(A.in, A.ld, M, axis, i0, k0, w);
    }
    for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
        const int64_t ti0 = i0, tk0 = k0;
        __syncthreads();   // every warp is done with the previous tile
        qg_eden_commit(T.src_dec, axis, w, tile);
        __syncthreads();
        if (t + gridDim.x < tiles) {
            qg_eden_tile_origin(A, axis, t + gridDim.x, &i0, &k0);
            qg_eden_fetch(A.in, A.ld, M, axis, i0, k0, w);
        }
#pragma unroll
        for (int pass = 0; pass < QG_EDEN_ROWS / QG_EDEN_ROWS_PER_PASS; pass++) {
            const int r = pass * QG_EDEN_ROWS_PER_PASS + 4 * warp + (lane >> 3);
            uint32_t x[8];
            qg_eden_words_get(tile, r, g, x);
            m2 = qf_vmax(m2, qg_eden_rotate_words(x, sm, g, sc));
            if (STORE) qg_eden_words_put(tile, r, g, x);   // (only this lane reads these words)
        }
        if (STORE) {
            __syncthreads();
            qg_eden_store_tile(T.fake, T.ld_fake, M, axis, ti0, tk0, tile);
        }
    }
    uint32_t m = qf_hmax(m2);
#pragma unroll
    for (int x = 16; x > 0; x >>= 1) m = qf_shfl_max(m, x);
    if (lane == 0 && m) atomicMax((unsigned int*)T.amax, m);
}

// Pass 2: one tile per CTA. PRE: the tile comes rotated from the fake copy (the amax pass's STORE), else from
// the source, rotated here.
template <int OUT, bool PRE>
__global__ void __launch_bounds__(QG_THREADS) qg_eden_apply_kernel(const __grid_constant__ QFArgs A, int slot) {
    __shared__ __align__(16) uint16_t tile[QG_EDEN_ROWS * QG_EDEN_PITCH];   // read and written in words too
    __shared__ float2 tab[128];   // [E4M3 byte] = (pre-correction scale, its inverse): qg_eden_pre_scale
    const QFTarget& T = A.t[slot];
    const int axis = slot == 0;
    const int64_t M = axis ? A.rows : A.cols, K = axis ? A.cols : A.rows;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane & 7;
    const float s_enc = quant_tensor_scale_enc(&T.p, *T.amax);
    const float tdec = quant_tensor_scale_dec(&T.p, s_enc);
    if (OUT != QF_OUT_STATS && blockIdx.x == 0 && threadIdx.x == 0) *T.scale_dec = tdec;
    // eden_group_scale: e4m3(fminf(bamax * mult, FLT_MAX)), byte 0 -> 1; inv = fminf(1 / (s * (1 / S_enc)), FLT_MAX),
    // as quant_block_scale computes it (the division once per byte, not per group)
    const float mult = s_enc * (1.0f / EDEN_V);
    qf_scale_table(tab, 1.0f / s_enc, 1.0f);
    int64_t i0, k0;
    qg_eden_tile_origin(A, axis, blockIdx.x, &i0, &k0);
    {
        uint4 w[QG_EDEN_WORDS];
        if (PRE) qg_eden_fetch(T.fake, T.ld_fake, M, axis, i0, k0, w);
        else qg_eden_fetch(A.in, A.ld, M, axis, i0, k0, w);
        qg_eden_commit(PRE ? nullptr : T.src_dec, axis, w, tile);
    }
    __syncthreads();   // (the table too)
    uint32_t sm[8] = {};
    if (!PRE) qg_eden_sign_words(T, g, sm);
    const float sc = hadamard_scale(128);
    QuantStats st;
    memset(&st, 0, sizeof(st));
#pragma unroll
    for (int pass = 0; pass < QG_EDEN_ROWS / QG_EDEN_ROWS_PER_PASS; pass++) {
        const int r = pass * QG_EDEN_ROWS_PER_PASS + 4 * warp + (lane >> 3);
        const int64_t i = i0 + r;
        const bool live = i < M;   // rows past M (zeros) are computed, not stored
        uint32_t x[8];
        qg_eden_words_get(tile, r, g, x);
        const uint32_t bm = qf_hmax(PRE ? qg_words_max(x) : qg_eden_rotate_words(x, sm, g, sc));
        const float2 e = qg_eden_pre_scale(tab, mult, bm);
        const float sg = e.x, inv = e.y;
        float mag[16], pn[4], pd[4];
        uint8_t c[16];   // codes (packed and statistics outputs, and the reference element path)
        // every group of the warp has a finite amax: element.cuh's magnitude function for every element
        const bool fast = OUT != QF_OUT_STATS && __all_sync(0xFFFFFFFFu, bm < 0x7F800000u);
        if (fast) {
#pragma unroll
            for (int j = 0; j < 16; j++) {
                const float u = QF_MUL(j & 1 ? qf_hi(x[j >> 1]) : qf_lo(x[j >> 1]), inv);
                const float tn = QF_MUL(u, u), a = fabsf(u);
                mag[j] = qf_rne_mag(T.g, a);
                const float td = QF_MUL(a, mag[j]);
                pn[j >> 2] = j & 3 ? QF_ADD(pn[j >> 2], tn) : tn;   // chunk 4g + j / 4: its terms in order
                pd[j >> 2] = j & 3 ? QF_ADD(pd[j >> 2], td) : td;
                if (OUT == QF_OUT_PACKED)
                    c[j] = (uint8_t)(qf_code_index(mag[j], T.code_mul, T.code_shift) | ((f32_bits(u) >> 28) & 8u));
            }
        } else {
            const bool fg = bm < 0x7F800000u;   // this group's amax is finite
#pragma unroll
            for (int j = 0; j < 16; j++) {
                float td;
                const float u = QF_MUL(j & 1 ? qf_hi(x[j >> 1]) : qf_lo(x[j >> 1]), inv);
                const float tn = QF_MUL(u, u);
                c[j] = qg_eden_code(T.g, T.code_mul, T.code_shift, &T.p.grid, u, fg, &mag[j], &td);
                pn[j >> 2] = j & 3 ? QF_ADD(pn[j >> 2], tn) : tn;
                pd[j >> 2] = j & 3 ? QF_ADD(pd[j >> 2], td) : td;
            }
        }
        const float num = qg_eden_sum_lanes(pn), den = qg_eden_sum_lanes(pd);
        const float C = eden_correction(num, den);
        if (OUT != QF_OUT_STATS && T.eden_corr && live && g == 0) T.eden_corr[i * (K / 128) + k0 / 128] = C;
        const int64_t j = i * (K / 16) + k0 / 16 + g;   // the scale's index, operand-major
        const float sdec = eden_scale_sr(QF_MUL(sg, C), eden_scale_r16(T.key, (uint64_t)j));
        if constexpr (OUT == QF_OUT_STATS) {
            if (live) {
                QuantBlockScale bs;
                bs.sdec = sdec;
                bs.inv = inv;
                bs.bits = e4m3_bits(sdec);
                bs.is_nan = 0;
#pragma unroll
                for (int q = 0; q < 16; q++) {
                    const float y = q & 1 ? qf_hi(x[q >> 1]) : qf_lo(x[q >> 1]);
                    quant_stats_element(&st, &T.p.grid, y, QF_MUL(y, inv), c[q], &bs, tdec);
                }
            }
        } else if constexpr (OUT == QF_OUT_PACKED) {
            if (live) {
                uint32_t wc[2] = {0u, 0u};
#pragma unroll
                for (int q = 0; q < 16; q++) wc[q >> 3] |= (uint32_t)c[q] << (4 * (q & 7));
                *(uint2*)(T.codes + i * (K / 2) + (k0 + 16 * g) / 2) = make_uint2(wc[0], wc[1]);   // 8-byte aligned
                T.scales[j] = e4m3_bits(sdec);
            }
        } else {   // the fake values back into the tile (rows past M are not stored by qg_eden_store_tile)
            if (fast) {   // sign(y) | BF16(mag * sdec) by truncation (exact), two per word
#pragma unroll
                for (int q = 0; q < 8; q++)
                    x[q] = __byte_perm(f32_bits(QF_MUL(mag[2 * q], sdec)), f32_bits(QF_MUL(mag[2 * q + 1], sdec)), 0x7632) |
                           (x[q] & 0x80008000u);
            } else {
#pragma unroll
                for (int q = 0; q < 8; q++)
                    x[q] = (uint32_t)qg_eden_fake(c[2 * q], mag[2 * q], sdec) | ((uint32_t)qg_eden_fake(c[2 * q + 1], mag[2 * q + 1], sdec) << 16);
            }
            qg_eden_words_put(tile, r, g, x);
        }
    }
    if constexpr (OUT == QF_OUT_STATS) quant_stats_warp_flush(st, T.stats);
    if constexpr (OUT == QF_OUT_FAKE) {
        __syncthreads();
        qg_eden_store_tile(T.fake, T.ld_fake, M, axis, i0, k0, tile);
    }
}

static inline void qg_launch_eden_amax(const QFLaunch& L, int slot, cudaStream_t s, bool store = false) {
    const int64_t tiles = qg_eden_tiles(L.a, slot == 0);
    int64_t blocks = tiles < 4096 ? tiles : 4096;
    if (store) qg_eden_amax_kernel<true><<<(unsigned)blocks, QG_THREADS, 0, s>>>(L.a, slot, tiles);
    else qg_eden_amax_kernel<false><<<(unsigned)blocks, QG_THREADS, 0, s>>>(L.a, slot, tiles);
    cuda_check_last();
}

template <int OUT, bool PRE = false>
static inline void qg_launch_eden_apply(const QFLaunch& L, int slot, cudaStream_t s) {
    const int64_t tiles = qg_eden_tiles(L.a, slot == 0);
    qg_eden_apply_kernel<OUT, PRE><<<(unsigned)tiles, QG_THREADS, 0, s>>>(L.a, slot);
    cuda_check_last();
}
