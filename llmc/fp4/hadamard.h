// hadamard.h: the (randomized) Hadamard transform applied along a GEMM's reduction dimension.
// defines: hadamard_scale(), hadamard_f32_n<N>(), hadamard_f32(), hadamard_bf16()
// y_j = sum_i (s_i x_i) H[i][j] / sqrt(n) over n consecutive elements, H the Sylvester matrix
// H[i][j] = (-1)^popcount(i & j), s the sign vector (bit i of `signs` set -> s_i = -1; see
// quant_sign_mask() in fp4/formats.h for fixed and seeded vectors). diag(s) H / sqrt(n) is orthonormal,
// so applying it to both operands of a GEMM along the reduction dim leaves the product unchanged:
// (X M)(W M)^T = X W^T.
// The arithmetic order is part of the definition (the reference and the kernels must agree to the
// bit): signs are applied by negation, then log2(n) butterfly stages h = 1, 2, 4, ... each mapping
// (v[j], v[j+h]) -> (v[j] + v[j+h], v[j] - v[j+h]) for j with (j & h) == 0, all in FP32; then one
// multiply by hadamard_scale(n); the quantizer then rounds each result to BF16 (RNE).
// Plain HD functions: the kernels call hadamard_f32_n<N> on registers, the CPU path the same code.
#pragma once
#include "llmc/base/common.h"
#include "llmc/fp4/formats.h"
#include "llmc/fp4/stochastic_round.h"

// 1/sqrt(n) as the float used by the transform: exact 2^-k/2 for even log2(n); for odd log2(n)
// the float nearest 1/sqrt(2) times an exact power of two.
HD float hadamard_scale(int n) {
    int k = 0;
    while ((1 << k) < n) k++;
    float s = exp2_exact(-(k / 2));
    return (k & 1) ? s * 0.70710678118654752440f : s;
}

template <int N>
HD void hadamard_f32_n(float* v, const uint32_t* signs) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int i = 0; i < N; i++)
        if ((signs[i >> 5] >> (i & 31)) & 1u) v[i] = -v[i];
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int h = 1; h < N; h <<= 1) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
        for (int j = 0; j < N; j++) {
            if (j & h) continue;
            float a = v[j], b = v[j + h];
            v[j] = a + b;
            v[j + h] = a - b;
        }
    }
    const float sc = hadamard_scale(N);
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int i = 0; i < N; i++) v[i] = v[i] * sc;
}

// Runtime-size front end (n a power of two, 2..128); fails on any other n.
static inline void hadamard_f32(float* v, int n, const uint32_t* signs) {
    switch (n) {
        case 2: hadamard_f32_n<2>(v, signs); break;
        case 4: hadamard_f32_n<4>(v, signs); break;
        case 8: hadamard_f32_n<8>(v, signs); break;
        case 16: hadamard_f32_n<16>(v, signs); break;
        case 32: hadamard_f32_n<32>(v, signs); break;
        case 64: hadamard_f32_n<64>(v, signs); break;
        case 128: hadamard_f32_n<128>(v, signs); break;
        default: fail("hadamard size %d: use a power of two from 2 to 128", n);
    }
}

// The transform as the quantizer uses it: FP32 transform, then each value rounded to BF16.
static inline void hadamard_bf16(float* v, int n, const uint32_t* signs) {
    hadamard_f32(v, n, signs);
    for (int i = 0; i < n; i++) v[i] = bf16_bits_to_float(bf16_bits_rne(v[i]));
}
