// matmul_fp4_layout.h: the data layout contract of the native NVFP4 GEMM (llmc/fp4/matmul_fp4.cuh), in plain
// C so that the CPU tests (CI, no GPU) check it.
// defines: Fp4Operand, matmul_fp4_scale_bytes(), matmul_fp4_swizzle_source(), fp4_swizzle_scales_cpu(),
//          matmul_fp4_spec_ok(), matmul_fp4_reference_cpu()
//
// What cuBLASLt reads for one NVFP4 operand (docs/FP4_NUMERICS.md, "Blackwell native path"):
//   codes   R x K E2M1 codes, K-major ("operand-major"): row r is K/2 bytes, element 2i in the low nibble.
//           That is exactly what our quantizer's packed output is (quant_target.cuh / fp4/quant_cpu.h): the
//           row-wise copy of a rows x cols view is R = rows, K = cols; the column-wise copy is stored
//           transposed, R = cols, K = rows. Our code numbering (bit 3 sign, bits 2..0 the index into
//           0, 0.5, 1, 1.5, 2, 3, 4, 6) is bit for bit the E2M1 encoding (exponent bits 2..1, mantissa bit 0).
//   scales  one UE4M3 byte per 16 consecutive K elements of a row: C = K/16 scales per row. Our quantizer
//           writes them row-major (R x C); cuBLASLt wants them in 128 x 4 tiles (rows x 16-blocks) of
//           512 bytes each, the matrix padded to (roundup(R,128), roundup(C,4)) with zero bytes:
//             offset(r, c) = ((r/128)*ceil(C/4) + c/4)*512 + (r%32)*16 + ((r%128)/32)*4 + c%4
//           (nvfp4_swizzled_scale_offset in fp4/formats.h). Our E4M3 scale bits are never negative, so
//           they read the same as UE4M3.
//   tensor  the FP32 second-level scales (scale_dec of each operand) are not seen by cuBLASLt: their
//           product goes into the GEMM's alpha (a device float).
// Quantizer specs the native path accepts: grid e2m1, scale e4m3, block length 16 along K (1x16, or
// 16x16 tiles, whose row-major scale matrix repeats each tile's scale on its 16 rows), any Hadamard and
// any rounding (they only change the values, not the layout). MXFP4 / INT4 / E1M2 have no cuBLASLt kernel.
#pragma once
#include "llmc/base/common.h"
#include "llmc/fp4/formats.h"

// One operand as the native GEMM reads it: its codes and its swizzled scales (the layout above).
typedef struct {
    const uint8_t* codes;
    const uint8_t* scales;
} Fp4Operand;

// Bytes of the swizzled scale buffer for an R x C scale matrix (R rows of the operand, C = K/16).
static inline size_t matmul_fp4_scale_bytes(int R, int C) {
    fail_if(R <= 0 || C <= 0, "matmul_fp4_scale_bytes: empty scale matrix %d x %d", R, C);
    return (size_t)ceil_div(R, 128) * 128 * (size_t)ceil_div(C, 4) * 4;
}

// The inverse of nvfp4_swizzled_scale_offset: which (r, c) of the padded scale matrix lives at byte o of
// the swizzled buffer. A 512-byte tile t holds rows 128*(t / ceil(C/4)) .. +127 and 16-blocks
// 4*(t % ceil(C/4)) .. +3; inside it, byte w holds row (w%16)/4 * 32 + w/16, 16-block w%4.
// The caller checks r < R and c < C (outside: padding, which is zero).
HD void matmul_fp4_swizzle_source(int64_t o, int64_t C, int64_t* r, int64_t* c) {
    const int64_t tiles_c = ceil_div(C, 4);
    const int64_t t = o / 512, w = o % 512;
    *r = (t / tiles_c) * 128 + ((w % 16) / 4) * 32 + w / 16;
    *c = (t % tiles_c) * 4 + w % 4;
}

// CPU twin of fp4_swizzle_scales_gpu: dst (matmul_fp4_scale_bytes(R, C) bytes) gets the 128x4-tiled
// layout of src (R x C row-major), padding zeroed. Every destination byte is written exactly once.
static inline void fp4_swizzle_scales_cpu(uint8_t* dst, const uint8_t* src, int R, int C) {
    const int64_t bytes = (int64_t)matmul_fp4_scale_bytes(R, C);
    for (int64_t o = 0; o < bytes; o++) {
        int64_t r, c;
        matmul_fp4_swizzle_source(o, C, &r, &c);
        dst[o] = (r < R && c < C) ? src[r * C + c] : (uint8_t)0;
    }
}

// 1 if an operand quantized with this spec can go to the native GEMM (see the header comment).
static inline int matmul_fp4_spec_ok(const QuantParams* p) {
    const GridTraits* e2m1 = grid_traits(QGRID_E2M1);
    return quant_scale_is_e4m3(p->scale) && p->block_l == 16 && (p->block_w == 1 || p->block_w == 16) &&
           memcmp(p->grid.levels, e2m1->levels, sizeof(e2m1->levels)) == 0;
}

// What the native GEMM computes, on the CPU, reading exactly the bytes cuBLASLt reads:
//   out[n*M + m] = alpha * sum_k a(m, k) * b(n, k) [+ bias[m]] [+ out[n*M + m] if accumulate]
// with a(m, k) = e2m1(a.codes nibble (m, k)) * ue4m3(a.scales[offset(m, k/16, K/16)]) and b alike.
// The sum runs over k ascending in FP32 (each product is exact in FP32; only the sum rounds). This is
// the spec of matmul_fp4_native (llmc/fp4/matmul_fp4.cuh): out is N x M row-major.
static inline void matmul_fp4_reference_cpu(float* out, Fp4Operand a, Fp4Operand b, int M, int N, int K, float alpha,
                                            const float* bias, int accumulate) {
    fail_if(M <= 0 || N <= 0 || K <= 0 || K % 32, "matmul_fp4_reference_cpu: M=%d N=%d K=%d (K %% 32 == 0)", M, N, K);
    const GridTraits* g = grid_traits(QGRID_E2M1);
    const int C = K / 16;
    float* av = (float*)xmalloc(sizeof(float) * (size_t)M * K);
    float* bv = (float*)xmalloc(sizeof(float) * (size_t)N * K);
    for (int pass = 0; pass < 2; pass++) {
        const int R = pass ? N : M;
        const uint8_t* codes = pass ? b.codes : a.codes;
        const uint8_t* sc = pass ? b.scales : a.scales;
        float* v = pass ? bv : av;
        for (int64_t r = 0; r < R; r++)
            for (int64_t k = 0; k < K; k++) {
                uint8_t code = (codes[r * (K / 2) + k / 2] >> (4 * (k & 1))) & 15;
                float s = e4m3_value(sc[nvfp4_swizzled_scale_offset(r, k / 16, C)]);
                v[r * K + k] = grid_code_value(g, code) * s;
            }
    }
    for (int64_t n = 0; n < N; n++)
        for (int64_t m = 0; m < M; m++) {
            float acc = 0.0f;
            for (int64_t k = 0; k < K; k++) {
                float prod = av[m * K + k] * bv[n * K + k];
                acc = acc + prod;
            }
            float y = alpha * acc;
            if (bias) y = y + bias[m];
            if (accumulate) y = y + out[n * M + m];
            out[n * M + m] = y;
        }
    free(av);
    free(bv);
}
