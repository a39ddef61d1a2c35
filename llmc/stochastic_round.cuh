// stochastic_round.cuh: rounding a float onto a coarser grid, to nearest-even or stochastically.
// defines: bf16_bits_rne(), bf16_bits_sr()
// The random bits come from llmc/rng.h, keyed on (seed, step, tensor id, element index).
#pragma once
#include "common.h"
#include "rng.h"

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
