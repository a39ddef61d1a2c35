// lane_ops.cuh: the GPU quantizer's device building blocks, shared by its kernels: maxima over BF16 words and
// lanes, BF16 conversions, SR draws, an element pair through the fast path or the reference path (to a fake word,
// codes or statistics), Hadamard butterflies within a lane and across lanes, the FP8 fold's per-word steps.
// defines: quant_amax_accumulate(), qf_max(), qf_vmax(), qf_hmax(), qf_shfl_max(), qf_rmax(), qf_lo(), qf_hi(),
//          qf_cvt2(), qf_rng64(), qf_rng_row(), qf_rng_rows(), qf_fold_offset(), qf_fold2(), qf_count_below(),
//          qf_slow_*(), qf_fast_*(), qf_fake_word(), qf_pick(), qf_butterfly(), qf_xstage(), QF_HSMALL, qf_hrun(),
//          qf_rot_row(), qf_rot_cols(), qf_row_signs(), qf_col16_amax(), qf_col_sign_masks(), qf_col_signs()
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include "llmc/base/cuda_common.cuh"
#include "llmc/fp4/formats.h"
#include "llmc/fp4/stochastic_round.h"
#include "llmc/fp4/quant_cpu.h"           // amax_bits_update, BF16_CANONICAL_NAN, QuantStats, quant_stats_element
#include "llmc/fp4/fp8_fold.h"            // the FP8 output form's arithmetic
#include "llmc/fp4/quant/element.cuh"
#include "llmc/fp4/quant/kernel_args.cuh"

// ---------------------------------------------------------------------------------------------------
// Device helpers

__device__ __forceinline__ uint32_t qf_max(uint32_t a, uint32_t b) { return a > b ? a : b; }
__device__ __forceinline__ uint32_t qf_vmax(uint32_t a, uint32_t b) { return __vmaxu2(a, b); }
// max of the two BF16 halves (magnitudes), as FP32 bits
__device__ __forceinline__ uint32_t qf_hmax(uint32_t m2) { return qf_max(m2 << 16, m2 & 0xFFFF0000u); }
__device__ __forceinline__ uint32_t qf_shfl_max(uint32_t m, int x) { return qf_max(m, __shfl_xor_sync(0xFFFFFFFFu, m, x)); }
__device__ __forceinline__ uint32_t qf_absbits(float y) { return f32_bits(y) & 0x7FFFFFFFu; }
// Folds the amax bits m of this lane's values (magnitude bits, as amax_bits_update() takes them) into the device
// amax: a warp maximum, then one atomicMax. The apply kernels' delayed amax (QFTarget.amax_next) takes it so; a
// kernel that produces a tensor can too, for specs without a Hadamard (a rotated copy's amax is taken after the
// rotation). The amax float must be zeroed first; every lane of the warp must call it.
__device__ __forceinline__ void quant_amax_accumulate(float* amax, uint32_t m) {
#pragma unroll
    for (int x = 16; x > 0; x >>= 1) m = qf_shfl_max(m, x);
    if ((threadIdx.x & 31) == 0 && m) atomicMax((unsigned int*)amax, m);
}
// BF16 rounding of FP32 magnitude bits, as FP32 bits
__device__ __forceinline__ uint32_t qf_round_bits(uint32_t m) { return (uint32_t)bf16_bits_rne(f32_from_bits(m)) << 16; }
// The amax bits of n values after BF16 rounding, given m = the max of their unrounded magnitude bits:
// the rounding of m when m is not NaN (rounding is monotone there); NaN payloads do not round
// monotonically ((u >> 16) | 0x40), so a NaN group is rounded value by value (rare path).
template <int N>
__device__ __forceinline__ uint32_t qf_rmax(uint32_t m, const float (&y)[N]) {
    if (m <= 0x7F800000u) return qf_round_bits(m);
    uint32_t r = 0;
#pragma unroll
    for (int j = 0; j < N; j++) r = qf_max(r, qf_round_bits(qf_absbits(y[j])));
    return r;
}
__device__ __forceinline__ float qf_lo(uint32_t w) { return f32_from_bits(w << 16); }
__device__ __forceinline__ float qf_hi(uint32_t w) { return f32_from_bits(w & 0xFFFF0000u); }
__device__ __forceinline__ uint32_t qf_cvt2(float a, float b) {   // RNE, a -> low half
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    uint32_t u;
    memcpy(&u, &h, 4);
    return u;
}
__device__ __forceinline__ uint32_t qf_cvt2_ref(float a, float b) {
    return (uint32_t)bf16_bits_rne(a) | ((uint32_t)bf16_bits_rne(b) << 16);
}
// rng_bits64(key, index) given index * RNG_INDEX_MUL (kept incrementally by the callers)
__device__ __forceinline__ uint64_t qf_rng64(uint64_t key, uint64_t idx_mul) { return rng_mix64(key ^ idx_mul); }
// The 32 bits of a 2 x 2 square's draw that go to the column pair of row r: low half for an even row.
__device__ __forceinline__ uint32_t qf_rng_row(uint64_t w, int r) { return (uint32_t)(w >> ((r & 1) * 32)); }
// A square's draw (idx_mul: its index times QF_RNG_MUL) -> the bits of its even row and of its odd row
__device__ __forceinline__ void qf_rng_rows(uint64_t key, uint64_t idx_mul, uint32_t& even, uint32_t& odd) {
    const uint64_t w = qf_rng64(key, idx_mul);
    even = qf_rng_row(w, 0);
    odd = qf_rng_row(w, 1);
}

// FP8 output (fp8_fold.h). Offset of GEMM row i of a folding target, from the amax pass's maxima.
__device__ __forceinline__ int qf_fold_offset(const QFTarget& T, int64_t i) {
    return fp8_fold_offset(&T.p, T.dmax, __ldg(T.fold_max + (i >> T.bw_log2)));
}
// Two BF16 quantized values (a word) times 2^-o -> two E4M3 bytes (low byte: the low half), RNE, NaN -> 0x7F.
__device__ __forceinline__ uint32_t qf_fold2(uint32_t w, float inv) {
    return (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(QF_MUL(qf_lo(w), inv), QF_MUL(qf_hi(w), inv)), __NV_SATFINITE,
                                              __NV_E4M3);
}
// One row of 16 lanes' values (each lane v[0..15], one per row) -> lane cg holds the maximum of row cg over
// the 16 lanes: a transposing butterfly (15 shuffles instead of 16 x 4).
__device__ __forceinline__ uint32_t qf_transpose_max16(uint32_t (&v)[16], int cg) {
#pragma unroll
    for (int s = 8; s >= 1; s >>= 1) {
        const bool up = cg & s;
#pragma unroll
        for (int j = 0; j < s; j++) {
            const uint32_t send = up ? v[j] : v[j + s], keep = up ? v[j + s] : v[j];
            v[j] = qf_max(keep, __shfl_xor_sync(0xFFFFFFFFu, send, s));
        }
    }
    return v[0];
}
__device__ __forceinline__ void qf_count_below(const QFTarget& T, unsigned n) {
#pragma unroll
    for (int x = 16; x > 0; x >>= 1) n += __shfl_xor_sync(0xFFFFFFFFu, n, x);
    if ((threadIdx.x & 31) == 0 && n) atomicAdd(T.fold_below, n);
}

// Reference element (exactly qt_process of the reference kernels, dev/ref/nvfp4_ref.cuh): any block,
// including inf / NaN ones. x = v * bs.inv -> its code.
__device__ __forceinline__ uint8_t qf_slow_code(const QuantParams& p, float x, const QuantBlockScale& bs, int sr,
                                                uint32_t r16) {
    return bs.is_nan ? 0 : sr ? grid_round_sr(&p.grid, x, r16) : grid_round_rne(&p.grid, x);
}
__device__ __forceinline__ uint32_t qf_slow_elem(const QuantParams& p, float v, const QuantBlockScale& bs, int sr,
                                                 uint32_t r16) {
    float x = v * bs.inv;
    uint8_t c = qf_slow_code(p, x, bs, sr, r16);
    return bs.is_nan ? (uint32_t)BF16_CANONICAL_NAN : (uint32_t)bf16_bits_rne(grid_code_value(&p.grid, c) * bs.sdec);
}
// The statistics of one element (quant_stats_element, as the reference's statistics pass adds them).
__device__ __forceinline__ void qf_slow_stats(const QuantParams& p, float v, const QuantBlockScale& bs, int sr,
                                              uint32_t r16, float tdec, QuantStats* st) {
    float x = v * bs.inv;
    quant_stats_element(st, &p.grid, v, x, qf_slow_code(p, x, bs, sr, r16), &bs, tdec);
}

// Fast element pair -> the magnitudes m0, m1 of their code values.
template <bool SR>
__device__ __forceinline__ void qf_fast_mags(const QFGrid& g, float v0, float v1, float inv0, float inv1, uint32_t rnd,
                                             float& m0, float& m1) {
    const float a0 = fabsf(QF_MUL(v0, inv0)), a1 = fabsf(QF_MUL(v1, inv1));
    if (SR) {   // 0x4B000000 | r16 of each half: one PRMT each, not a mask (or shift) and an OR
        m0 = qf_sr_mag_x(g, a0, __byte_perm(rnd, 0x4B000000u, 0x7610));
        m1 = qf_sr_mag_x(g, a1, __byte_perm(rnd, 0x4B000000u, 0x7632));
    }
    else { m0 = qf_rne_mag(g, a0); m1 = qf_rne_mag(g, a1); }
}

// The fake BF16 word of a pair from its products p = |q| * sdec (exact in BF16, taken by truncation) and the signs
// of sw (the pair's BF16 bits).
__device__ __forceinline__ uint32_t qf_fake_word(float p0, float p1, uint32_t sw) {
    return __byte_perm(f32_bits(p0), f32_bits(p1), 0x7632) | (sw & 0x80008000u);
}

// Fast element pair -> packed BF16 word. sw: the BF16 bits of the pair (signs).
template <bool SR>
__device__ __forceinline__ uint32_t qf_fast_pair(const QFGrid& g, float v0, float v1, uint32_t sw, float inv0, float sd0,
                                                 float inv1, float sd1, uint32_t rnd) {
    float m0, m1;
    qf_fast_mags<SR>(g, v0, v1, inv0, inv1, rnd, m0, m1);
    return qf_fake_word(QF_MUL(m0, sd0), QF_MUL(m1, sd1), sw);
}

// Fast element pair -> their two codes (element 0 in the low nibble). A code's sign is its input's (x = v
// inv with inv > 0, -0 included), bit 15 / 31 of sw.
template <bool SR>
__device__ __forceinline__ uint32_t qf_fast_codes(const QFTarget& T, float v0, float v1, uint32_t sw, float inv0,
                                                  float inv1, uint32_t rnd) {
    float m0, m1;
    qf_fast_mags<SR>(T.g, v0, v1, inv0, inv1, rnd, m0, m1);
    return qf_code_index(m0, T.code_mul, T.code_shift) | (qf_code_index(m1, T.code_mul, T.code_shift) << 4) |
           ((sw >> 12) & 0x8u) | ((sw >> 24) & 0x80u);
}

// A block's fast-path words -> their fake BF16 words (row-wise targets: qf_apply_axis1, qf_row2_pair).
template <bool SR, int N>
__device__ __forceinline__ void qf_fast_words(const QFGrid& g, const uint32_t (&vw)[N], const QuantBlockScale& bs,
                                              const uint32_t (&rnd)[N], uint32_t (&o)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) o[i] = qf_fast_pair<SR>(g, qf_lo(vw[i]), qf_hi(vw[i]), vw[i], bs.inv, bs.sdec, bs.inv, bs.sdec, rnd[i]);
}

__device__ __forceinline__ uint32_t qf_slow_pair(const QuantParams& p, float v0, float v1, const QuantBlockScale& b0,
                                                 const QuantBlockScale& b1, int sr, uint32_t rnd) {
    return qf_slow_elem(p, v0, b0, sr, rnd & 0xFFFFu) | (qf_slow_elem(p, v1, b1, sr, rnd >> 16) << 16);
}
__device__ __forceinline__ uint32_t qf_slow_codes(const QuantParams& p, float v0, float v1, const QuantBlockScale& b0,
                                                  const QuantBlockScale& b1, int sr, uint32_t rnd) {
    return (uint32_t)qf_slow_code(p, v0 * b0.inv, b0, sr, rnd & 0xFFFFu) |
           ((uint32_t)qf_slow_code(p, v1 * b1.inv, b1, sr, rnd >> 16) << 4);
}
__device__ __forceinline__ void qf_slow_stats_pair(const QuantParams& p, float v0, float v1, const QuantBlockScale& b0,
                                                   const QuantBlockScale& b1, int sr, uint32_t rnd, float tdec,
                                                   QuantStats* st) {
    qf_slow_stats(p, v0, b0, sr, rnd & 0xFFFFu, tdec, st);
    qf_slow_stats(p, v1, b1, sr, rnd >> 16, tdec, st);
}

// Register-array access with a run-time index through selects (keeps the arrays in registers): for the
// rolled slow paths, so that the reference code appears once per call site.
template <typename T, int N>
__device__ __forceinline__ T qf_pick(const T (&a)[N], int i) {
    T x = a[0];
#pragma unroll
    for (int k = 1; k < N; k++) x = i == k ? a[k] : x;
    return x;
}

// Stages h = 1 .. N/2 of hadamard_f32_n, or only those with h < STOP and h < rstop (a run-time bound: the
// sizes below 16 share one instantiation, QF_HSMALL).
template <int N, int STOP = N>
__device__ __forceinline__ void qf_butterfly(float* v, int rstop = STOP) {
#pragma unroll
    for (int h = 1; h < STOP; h <<= 1) {
        if (h >= rstop) break;
#pragma unroll
        for (int j = 0; j < N; j++) {
            if (j & h) continue;
            const float a = v[j], b = v[j + h];
            v[j] = QF_ADD(a, b);
            v[j + h] = QF_SUB(a, b);
        }
    }
}

// Cross-lane butterfly stage: the lower lane (up == 0) holds a = v[j], the partner b = v[j + h]:
// lower gets a + b, upper gets a - b (a the partner's value).
__device__ __forceinline__ float qf_xstage(float own, int lanexor, uint32_t upmask) {
    const float o = __shfl_xor_sync(0xFFFFFFFFu, own, lanexor);
    return upmask ? QF_SUB(o, own) : QF_ADD(own, o);
}

// The Hadamard sizes 2, 4 and 8 run on the kernels instantiated for H = QF_HSMALL: their groups lie within a
// lane's 8 values (row-wise) or a thread's 16 rows (column-wise), and they differ only in how many butterfly
// stages run, a run-time bound (hrun, the target's size; qf_hrun). A separate instantiation per size would add
// kernels (and compile time) for sizes no preset uses.
#define QF_HSMALL 8
template <int H>
__device__ __forceinline__ int qf_hrun(const QFTarget& T) { return H == QF_HSMALL ? T.p.hadamard : H; }

// Axis 1: rotate one row's 8 values (columns c0..c0+7 of an H-group spread over H/8 lanes).
template <int H>
__device__ __forceinline__ void qf_rot_row(const uint32_t (&w)[4], const uint32_t (&smask)[4], float hscale, int cg,
                                           float (&y)[8], int hrun = H) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint32_t x = w[i] ^ smask[i];
        y[2 * i] = qf_lo(x);
        y[2 * i + 1] = qf_hi(x);
    }
    qf_butterfly<8>(y, hrun);   // H <= 8: every group lies within the lane's 8 values
#pragma unroll
    for (int h = 8; h < H; h <<= 1) {
        const int lx = h / 8;
        const uint32_t up = cg & lx;
#pragma unroll
        for (int j = 0; j < 8; j++) y[j] = qf_xstage(y[j], lx, up);
    }
#pragma unroll
    for (int j = 0; j < 8; j++) y[j] = QF_MUL(y[j], hscale);
}

// Axis 0: rotate the column pair p over the thread's 16 rows (H32: with lane rg ^ 1). w holds sign-flipped input.
template <int H>
__device__ __forceinline__ void qf_rot_cols(const uint32_t (&w)[QF_ROWS][4], int p, float hscale, int rg,
                                            float (&lo)[QF_ROWS], float (&hi)[QF_ROWS], int hrun = H) {
#pragma unroll
    for (int r = 0; r < QF_ROWS; r++) { lo[r] = qf_lo(w[r][p]); hi[r] = qf_hi(w[r][p]); }
    qf_butterfly<16>(lo, hrun);   // H < 16: groups within the thread's 16 rows
    qf_butterfly<16>(hi, hrun);
    if (H == 32) {
#pragma unroll
        for (int r = 0; r < QF_ROWS; r++) { lo[r] = qf_xstage(lo[r], 16, rg); hi[r] = qf_xstage(hi[r], 16, rg); }
    }
#pragma unroll
    for (int r = 0; r < QF_ROWS; r++) { lo[r] = QF_MUL(lo[r], hscale); hi[r] = QF_MUL(hi[r], hscale); }
}

template <int N>
__device__ __forceinline__ void qf_row_signs(const QFTarget& T, int H, int cg, uint32_t (&smask)[N]) {
    const uint32_t sb = H ? T.hsigns >> ((cg * 8) & (H - 1)) : 0u;
#pragma unroll
    for (int i = 0; i < N; i++)
        smask[i] = (((sb >> (2 * i)) & 1u) ? 0x8000u : 0u) | (((sb >> (2 * i + 1)) & 1u) ? 0x80000000u : 0u);
}

// Column-wise amax of one column of 16 rows under a 16-point rotation (v: the sign-flipped values; consumed):
// folds the maximum unrounded magnitude into *m, or a group holding a NaN its rounded maximum into *m_nan
// (qf_amax_kernel's rules). The last butterfly stage is not formed: max(|RN(a + b)|, |RN(a - b)|) =
// RN(|a| + |b|) (RN is monotone and odd, and max(|a + b|, |a - b|) = |a| + |b|), one add for two outputs,
// and the scale comes after the maximum (x -> RN(x hscale) is monotone). Where an input of that stage is
// inf or NaN (a + b or a - b may be NaN where |a| + |b| is not), the full rotation, value by value.
__device__ __forceinline__ void qf_col16_amax(float (&v)[QF_ROWS], float hscale, uint32_t* m, uint32_t* m_nan) {
    qf_butterfly<16, 8>(v);   // stages h = 1, 2, 4
    uint32_t mc = 0;
#pragma unroll
    for (int j = 0; j < 8; j++) mc = qf_max(mc, f32_bits(QF_ADD(fabsf(v[j]), fabsf(v[j + 8]))));
    if (mc < 0x7F800000u) {
        *m = qf_max(*m, qf_absbits(QF_MUL(f32_from_bits(mc), hscale)));
        return;
    }
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const float a = v[j], b = v[j + 8];
        v[j] = QF_MUL(QF_ADD(a, b), hscale);
        v[j + 8] = QF_MUL(QF_SUB(a, b), hscale);
    }
    mc = 0;
#pragma unroll
    for (int j = 0; j < QF_ROWS; j++) mc = qf_max(mc, qf_absbits(v[j]));
    if (mc <= 0x7F800000u) *m = qf_max(*m, mc);
    else *m_nan = qf_max(*m_nan, qf_rmax(mc, v));
}

// The rotation's sign flip of row r of a column group (rows 16 rg + r of an H32 group), on both halves of a
// word; none without a Hadamard
__device__ __forceinline__ void qf_col_sign_masks(const QFTarget& T, int H, int rg, uint32_t (&mk)[QF_ROWS]) {
    const uint32_t sb = H ? T.hsigns >> (H == 32 ? 16 * rg : 0) : 0u;
#pragma unroll
    for (int r = 0; r < QF_ROWS; r++) mk[r] = ((sb >> r) & 1u) ? 0x80008000u : 0u;
}
__device__ __forceinline__ void qf_col_signs(const QFTarget& T, int H, int rg, uint32_t (&w)[QF_ROWS][4]) {
    uint32_t mk[QF_ROWS];
    qf_col_sign_masks(T, H, rg, mk);
#pragma unroll
    for (int r = 0; r < QF_ROWS; r++) {
#pragma unroll
        for (int p = 0; p < 4; p++) w[r][p] ^= mk[r];
    }
}
