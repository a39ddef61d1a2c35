// element.cuh: the GPU quantizer's element arithmetic: a scaled value rounded onto a grid's levels, to nearest or
// stochastically, by magic numbers; the packed code of a level; the grids' constants. Host and device, so that the
// CPU test (dev/test/test_quant_fast.cu) checks it against the reference rounding.
// defines: QF_ADD(), QF_SUB(), QF_MUL(), QFGrid, qf_magic(), qf_rne_mag(), qf_sr_mag_x(), qf_sr_mag(),
//          qf_grid_consts(), qf_code_index(), qf_code_consts()
//
// Arithmetic. Block scales: quant_block_scale() itself, but in qf_row2_kernel and qf_colfake_kernel E4M3 ones
// come from the hardware's E4M3 conversion and a per-CTA table of 128 (sdec, inv) pairs (qf_block_scale; the
// same numbers, test_quant_fast checks every input). Elements of a block whose amax is finite take the
// fast path below; any block holding inf or NaN (or rotating to it) takes the reference path
// (grid_round_rne / grid_round_sr / bf16_bits_rne, exactly as the reference kernels).
//   fast RNE:  |q| = min((|x| + M) - M, max), M = 2^22/2^23/2^24 by region of |x| (E2M1: [0,2), [2,4), [4,8);
//              int4: 2^23; e1m2: 2^22; see qf_magic): the FPU's ties-to-even at the region's grid spacing.
//   fast SR:   |q| = min(((|x| - (r16 + 1/2) sp 2^-16 rounded up) +ru (M + sp)) - (M + sp), max): the
//              reference's "up iff (2 r16 + 1) < frac 2^17" as one ceiling on the grid; see qf_sr_mag_x.
//   output:    fake: sign(x) | BF16(|q| * sdec) by truncation: the product is exact in BF16 (or inf);
//              packed: sign(x) << 3 | the index of |q| among the levels, from the bits of |q| 2^-k (qf_code_index).
//   statistics: every element through the reference path (diagnostics only, off the hot path).
// dev/test/test_quant_fast.cu checks these against grid_round_rne / grid_round_sr over float bit patterns
// (all of them with --exhaustive), the product exactness for every code and scale and the code index of
// every level, then compares the fast kernels with the reference ones bit for bit on the GPU;
// dev/test/test_quant_gpu_cpu.cu compares them with the CPU quantizer over every preset and slot option.
#pragma once
#include <math.h>
#include "llmc/base/common.h"
#include "llmc/fp4/formats.h"

// ---------------------------------------------------------------------------------------------------
// Element arithmetic (HD: the CPU test checks it against the reference functions)

#if defined(__CUDA_ARCH__)
#define QF_ADD(a, b) __fadd_rn((a), (b))
#define QF_SUB(a, b) __fsub_rn((a), (b))
#define QF_MUL(a, b) __fmul_rn((a), (b))
#else
#define QF_ADD(a, b) ((a) + (b))
#define QF_SUB(a, b) ((a) - (b))
#define QF_MUL(a, b) ((a) * (b))
#endif

// A grid's regions as magic numbers: the region of |x| has spacing sp, and M = sp * 2^23 is the FP32
// number whose ulp is sp. E2M1: M = 2^22, 2^23, 2^24 on [0, 2), [2, 4), [4, 8); INT4: 2^23; E1M2: 2^22.
// M = max(mul |x| with its mantissa cleared, mlo), mul = 2^22 for E2M1 and 0 for the uniform grids: one
// mask and one max, no compare-and-select chains (these kernels are bound by the integer/logic pipe, where
// compares, selects and min/max run). Above the grid's top region M keeps growing with |x|, which is harmless:
// there every result is at least 8 > max and saturates, and |x| = inf (or an overflowing mul |x|) makes M
// inf and the result NaN, which fminf(., max) turns into max.
typedef struct {
    float mul;            // 2^22 (E2M1) or 0 (uniform grids)
    float mlo;            // the smallest M (the only one for the uniform grids)
    float maxval;
} QFGrid;

HD float qf_magic(const QFGrid& g, float a) {
    const float t = f32_from_bits(f32_bits(QF_MUL(a, g.mul)) & 0x7F800000u);
    return fmaxf(t, g.mlo);
}

// |x| (not NaN) -> magnitude of grid_round_rne's code value: (|x| + M) - M rounds to a multiple of
// sp, ties to even (the FPU's RNE at ulp sp).
HD float qf_rne_mag(const QFGrid& g, float a) {
    const float c = qf_magic(g, a);
    return fminf(QF_SUB(QF_ADD(a, c), c), g.maxval);
}

// |x| (not NaN), 16 random bits -> magnitude of grid_round_sr's code value. With sp the spacing of |x|'s
// region, |x| = k sp + frac sp and u = (r16 + 1/2) / 2^16, the reference rounds up iff frac > u, and
// ceil(k + frac - u) = k + [frac > u] (frac - u lies in (-1, 1)), so the code value is ceil_sp(|x| - u sp):
//   u sp = (r16 + 1/2) M 2^-39: a 17-bit number times a power of two, exact;
//   s = |x| - u sp rounded up (one FMA): s and the exact value have the same ceiling on the grid of
//       multiples of sp, whose points are floats; s > -sp;
//   (s +ru (M + sp)) - (M + sp): s + sp lies in (0, M), floats in [M, 2M) are sp apart, so the add is
//       M + ceil_sp(s + sp), and the result ceil_sp(s); M + sp = M (1 + 2^-23) is exact, and so is the
//       subtraction. Larger |x| saturate.
// No compare or select (these kernels are bound by the integer/logic pipe).
// xb: the float bits 0x4B000000 | r16 (2^23 + r16: one byte permute in the kernels).
HD float qf_sr_mag_x(const QFGrid& g, float a, uint32_t xb) {
    const float m = qf_magic(g, a);
    const float u = QF_SUB(f32_from_bits(xb), 8388607.5f);   // r16 + 1/2, exact
#if defined(__CUDA_ARCH__)
    const float msp = __fmul_rn(m, 1.00000011920928955078125f);                 // M + sp
    const float s = __fmaf_ru(-u, __fmul_rn(m, 1.8189894035458565e-12f), a);    // |x| - u M 2^-39, rounded up
    const float q = __fsub_rn(__fadd_ru(s, msp), msp);
#else   // the same value in double, without directed rounding (exact wherever the ceiling depends on it)
    const double sp = (double)m * 0x1p-23;
    const double e = (double)a + (65536.0 - (double)u) * ((double)m * 0x1p-39);   // |x| - u sp + sp > 0
    const float q = (float)(ceil(e / sp) * sp - sp);
#endif
    return fminf(q, g.maxval);
}
HD float qf_sr_mag(const QFGrid& g, float a, uint32_t r16) { return qf_sr_mag_x(g, a, 0x4B000000u | (r16 & 0xFFFFu)); }

static inline QFGrid qf_grid_consts(int gid) {
    if (gid == QGRID_E2M1) return QFGrid{4194304.0f, 4194304.0f, 6.0f};
    if (gid == QGRID_INT4) return QFGrid{0.0f, 8388608.0f, 7.0f};
    if (gid == QGRID_E4M3) return QFGrid{0.0f, 8388608.0f, 448.0f};   // unused: fp8 takes the reference elements
    fail_if(gid != QGRID_E1M2, "qf_grid_consts: no fast path for grid %d", gid);
    return QFGrid{0.0f, 4194304.0f, 3.5f};
}

// Packed output: a fast-path magnitude m (one of the grid's levels) -> its code index 0..7, read off the
// float bits of m * mul (no search over the levels): E2M1 levels times 2^-126 are the floats whose bits >> 22
// are the E2M1 encoding (0.5 -> 2^-127, a subnormal: 1; 1 -> 2: 2; 1.5: 3; 2: 4; 3: 5; 4: 6; 6 -> 1.5 * 2^-124:
// 7); INT4 levels k times 2^-149 and E1M2 levels k/2 times 2^-148 are the subnormals with bits k. Exact
// products (no rounding), with subnormals kept (these kernels are not built with flush-to-zero).
HD uint32_t qf_code_index(float m, float mul, int shift) { return f32_bits(QF_MUL(m, mul)) >> shift; }

static inline void qf_code_consts(int gid, float* mul, int* shift) {
    *mul = gid == QGRID_E2M1 ? 0x1p-126f : gid == QGRID_INT4 ? 0x1p-149f : 0x1p-148f;   // fp8: unused (no packed form)
    *shift = gid == QGRID_E2M1 ? 22 : 0;
}
