// fp8_fold.h: MXFP4 operands written as FP8 (E4M3), exactly, for FP8 tensor-core GEMMs (Hopper).
// defines: Fp8Window, fp8_fold_window(), fp8_foldable(), fp8_fold_offset(), fp8_fold_scale(), fp8_fold_value(),
//          fp8_fold_counted(), fp8_fold_cpu()
//
// Why it is exact. An operand with power-of-two (E8M0) block scales holds values c * 2^e_b, c a level of
// its 4-bit grid (E2M1: 0.5 .. 6, one significant bit after the leading one). c * 2^d is an E4M3 number
// for every d in a window [dmin, dmax] (E2M1: [-8, 6]; E4M3 has 3 mantissa bits, subnormals k * 2^-9
// and max 448). So with one power-of-two offset o per GEMM row (a row of the stored operand: the
// reduction axis is contiguous), chosen from that row's largest block exponent e_max as
// o = e_max - dmax, every block with e_b >= o + dmin, i.e. at most dmax - dmin (14) binades below the
// row's largest, is stored exactly as the E4M3 value c * 2^(e_b - o), and the GEMM
//     sum_k A[m][k] B[n][k] = 2^(oA[m] + oB[n]) sum_k A8[m][k] B8[n][k]
// runs on FP8 tensor cores with the offsets as cuBLASLt's outer-vector scales (one FP32 per row of A and
// per column of B). Blocks further below the row's largest ("below the window") round to E4M3's
// subnormal grid: their error is below 2^(o - 10) per element, below 2^-16 of the row's largest value; the
// quantizer counts them (fp8_fold_counted) and the diagnostics report the count.
//
// e_max comes from the row's amax: e8m0_exponent is monotone in the block amax, so the largest block
// exponent of a row is the exponent of its largest value (for 2D blocks: of the largest value of the row's
// band of block_w rows, whose blocks the row shares). fp8_fold_cpu derives it the other way, from the
// row's block scales, which the CPU test then checks against the kernels.
// Rows holding inf or NaN: their blocks are NaN (E8M0 has no inf) and so is every output they touch,
// whatever the offset; the offset is 0, and their finite blocks are counted against it like any others
// (a count that means nothing there, kept the same in the kernels and the CPU twin).
#pragma once
#include "llmc/fp4/formats.h"

typedef struct {
    int dmin, dmax;   // c * 2^d is exact in E4M3 for every level c of the grid and d in [dmin, dmax]
} Fp8Window;

// The window of a 4-bit grid: dmax the largest d with maxval * 2^d <= 448, dmin the smallest with
// (smallest nonzero level) * 2^d >= 2^-9 (E4M3's quantum). Every level is a multiple of the smallest with
// at most 3 significant bits, so the whole window is exact (checked for every level and d by
// dev/test/test_fp4_cpu.c).
HD Fp8Window fp8_fold_window(const GridTraits* g) {
    Fp8Window w = {0, 0};
    while (g->maxval * exp2_exact(w.dmax + 1) <= 448.0f) w.dmax++;
    while (g->levels[1] * exp2_exact(w.dmin) >= 0x1p-9f) w.dmin--;
    w.dmin++;
    return w;
}

// A spec whose quantized values fold into E4M3: a 4-bit grid with power-of-two block scales.
HD int fp8_foldable(const QuantParams* p) {
    return !p->grid.e4m3 && p->grid.maxval > 0.0f && (p->scale == QSCALE_E8M0_FLOOR || p->scale == QSCALE_E8M0_CEIL);
}

// The offset o of a row from its amax bits (as the kernels take them: FP32 bits of the largest BF16
// magnitude, NaN above 0x7F800000). Clamped to >= -126 so that 2^o and 2^-o are normal floats (cuBLASLt need
// not honour a subnormal scale); the clamp loses nothing: where it applies, every block exponent e of the
// row (>= -127, E8M0's smallest) has -1 <= e - o < dmax, inside the window.
// dmax: fp8_fold_window's (the kernels take it precomputed).
HD int fp8_fold_offset(const QuantParams* p, int dmax, uint32_t amax_bits) {
    if (amax_bits >= 0x7F800000u) return 0;
    const int o = e8m0_exponent(f32_from_bits(amax_bits), &p->grid, p->scale == QSCALE_E8M0_CEIL) - dmax;
    return o < -126 ? -126 : o;
}

// The GEMM's scale of a row: 2^o.
HD float fp8_fold_scale(int o) { return exp2_exact(o); }

// One element: the BF16 quantized value v (c * 2^e_b) -> its E4M3 byte c * 2^(e_b - o), rounded to
// nearest even below the window; NaN -> 0x7F.
HD uint8_t fp8_fold_value(float v, int o) {
    if (v != v) return 0x7F;
    const float y = v * exp2_exact(-o);   // a power of two: exact
    return (uint8_t)(e4m3_bits(e4m3_rne_satfinite(y)) | ((f32_bits(y) >> 24) & 0x80u));
}

// Whether a block (E8M0 scale bits) in a row of offset o is counted as below the exact window: its exponent
// lies below o + dmin. Blocks at E8M0's smallest exponent (-127: zero blocks, and blocks of values below
// 2^-125 whose error is then below 2^-133) and NaN blocks are not counted.
HD int fp8_fold_counted(uint8_t bits, int o, int dmin) {
    return bits != 0 && bits != 0xFF && (int)bits - 127 - o < dmin;
}

// CPU twin. fake: the quantized tensor (BF16 bits, rows x cols, ld_fake), scales: its raw E8M0 block scales
// as quant_cpu writes them (row-major, M x (K / block_l), M the non-reduction
// extent); axis as the quantizer's. Writes the E4M3 operand with the reduction axis contiguous
// (rows x cols for axis 1, cols x rows for axis 0), each GEMM row's scale 2^o, and returns the number of
// blocks below the window (fp8_fold_counted).
static inline int64_t fp8_fold_cpu(const QuantParams* p, int axis, const uint16_t* fake, int64_t rows, int64_t cols,
                                   int64_t ld_fake, const uint8_t* scales, uint8_t* out, float* row_scale) {
    const int64_t M = axis ? rows : cols, K = axis ? cols : rows;
    const int64_t nbk = K / p->block_l;
    const Fp8Window win = fp8_fold_window(&p->grid);
    int64_t below = 0;
    for (int64_t m = 0; m < M; m++) {
        const uint8_t* s = scales + m * nbk;   // (2D tiles repeat their scale on each of their rows)
        int emax = -127, nan = 0;
        for (int64_t b = 0; b < nbk; b++) {
            if (s[b] == 0xFF) nan = 1;
            else if (s[b] - 127 > emax) emax = s[b] - 127;
        }
        int o = nan ? 0 : emax - win.dmax;
        if (o < -126) o = -126;
        row_scale[m] = fp8_fold_scale(o);
        for (int64_t k = 0; k < K; k++) {
            const int64_t r = axis ? m : k, c = axis ? k : m;
            out[m * K + k] = fp8_fold_value(bf16_bits_to_float(fake[r * ld_fake + c]), o);
        }
        if (m % p->block_w) continue;   // a 2D block is counted once, at its first row
        for (int64_t b = 0; b < nbk; b++)
            if (fp8_fold_counted(s[b], o, win.dmin)) below++;
    }
    return below;
}
