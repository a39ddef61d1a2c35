// rng.h: the counter-based random generator behind every stochastic rounding in the program.
// defines: rng_mix64(), rng_key(), rng_bits64(), rng_bits32()
// A random word is a pure function of (seed, step, tensor id, draw index): results never depend on
// launch geometry, and a reference implementation (dev/fp4_ref.py) reproduces them bit for bit.
// The mixer is SplitMix64's finalizer (Steele, Lea, Flood 2014), which passes BigCrush when fed a
// Weyl sequence; we feed it key ^ (index * odd constant) and use all 64 bits (rng_bits64: FP4
// stochastic rounding, 16 bits to each element of a 2 x 2 square, see sr_bits16) or the high 32
// (rng_bits32: BF16 stochastic rounding of weights, Hadamard signs).
#pragma once
#include "llmc/base/common.h"

HD uint64_t rng_mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
// One key per (seed, step, tensor): computed once on the host, passed to kernels.
HD uint64_t rng_key(uint64_t seed, uint32_t step, uint32_t tensor_id) {
    return rng_mix64(seed ^ rng_mix64(((uint64_t)step << 32) | tensor_id));
}
#define RNG_INDEX_MUL 0xD1B54A32D192ED03ull   // odd: index * RNG_INDEX_MUL is a Weyl sequence
// 64 random bits for draw `index` of that tensor.
HD uint64_t rng_bits64(uint64_t key, uint64_t index) { return rng_mix64(key ^ (index * RNG_INDEX_MUL)); }
// 32 random bits for element `index` of that tensor.
HD uint32_t rng_bits32(uint64_t key, uint64_t index) { return (uint32_t)(rng_bits64(key, index) >> 32); }
