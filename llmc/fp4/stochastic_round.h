// stochastic_round.h: rounding a float onto a coarser grid, to nearest-even or stochastically.
// defines: bf16_bits_rne(), bf16_bits_sr(), sr_bits16(), grid_round_sr()
// The random bits come from llmc/base/rng.h, keyed on (seed, step, tensor id, element index). Plain HD
// functions (no kernels): the CPU tests compile this file with g++.
#pragma once
#include "llmc/base/common.h"
#include "llmc/base/rng.h"
#include "llmc/fp4/formats.h"

// FP32 -> BF16 bit pattern, round to nearest even; NaN stays a (quiet) NaN.
HD uint16_t bf16_bits_rne(float x) {
    uint32_t u; memcpy(&u, &x, 4);
    if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu)) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

// FP32 -> BF16 bit pattern, stochastic: rounds away from zero in magnitude with probability equal to
// the dropped fraction of the 16 low bits, using the low 16 bits of `rbits`. Unbiased for finite x
// (the 16 dropped mantissa bits are matched by 16 random bits, so there is no 1/65536-step bias).
// Inf and NaN pass through unchanged.
HD uint16_t bf16_bits_sr(float x, uint32_t rbits) {
    uint32_t u; memcpy(&u, &x, 4);
    if ((u & 0x7F800000u) == 0x7F800000u) return bf16_bits_rne(x);
    u += (rbits & 0xFFFFu);
    return (uint16_t)(u >> 16);
}

// 16 random bits for element (r, c) of a rows x cols tensor (the quantizer's view): one 64-bit draw
// rng_bits64(key, (r / 2) * ceil(cols / 2) + c / 2) serves the 2 x 2 square of elements (r & ~1 ..,
// c & ~1 ..), bits [16 k, 16 k + 16) going to the element with k = 2 (r & 1) + (c & 1). A pure
// function of (key, r, c, cols), so independent of launch geometry, at a quarter of the hashing cost
// of one draw per element; the square serves a row-wise and a column-wise kernel alike (a pair of
// columns of two rows).
HD uint32_t sr_bits16(uint64_t key, uint64_t r, uint64_t c, uint64_t cols) {
    const uint64_t w = rng_bits64(key, (r >> 1) * ((cols + 1) >> 1) + (c >> 1));
    return (uint32_t)(w >> (16 * (((r & 1) << 1) | (c & 1)))) & 0xFFFFu;
}

// Stochastic rounding onto a 4-bit grid: between neighbouring levels lo <= |v| < hi, round up to hi
// with probability (|v| - lo) / (hi - lo), using 16 random bits r16. The fraction is exact (|v| - lo
// is exact by Sterbenz's lemma and every gap is a power of two), and "up" means
// (r16 + 1/2) / 2^16 < fraction, so P(up) is within 2^-17 of the fraction: the bias is at most
// 2^-17 of a gap, either sign. |v| >= max saturates to max; NaN -> +max, as grid_round_rne.
HD uint8_t grid_round_sr(const GridTraits* g, float v, uint32_t r16) {
    if (g->e4m3) return grid_round_rne(g, v);   // not reached: specs refuse e4m3 with sr
    uint32_t u = f32_bits(v);
    uint8_t sign = (uint8_t)((u >> 28) & 8u);
    float a = f32_from_bits(u & 0x7FFFFFFFu);
    if (a != a) return 7;
    if (!(a < g->maxval)) return (uint8_t)(7 | sign);
    int c = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int i = 1; i < 7; i++) c += (a >= g->levels[i]);
    float lo = g->levels[c], hi = g->levels[c + 1];
    float frac = (a - lo) / (hi - lo);
    int up = (float)(2u * (r16 & 0xFFFFu) + 1u) < frac * 131072.0f;
    return (uint8_t)((c + up) | sign);
}
