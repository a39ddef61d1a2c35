// quant_target.cuh: what one pass of the GPU quantizer writes for one copy of a GEMM operand, and where.
// defines: QuantTarget, quant_target_fake(), quant_target_packed()
// The quantizer is llmc/fp4/quant.cuh (llmc/fp4/quant/); its twins, which define the same outputs bit for bit, are the
// CPU quantizer (fp4/quant_cpu.h: orientation, layouts, SR indices) and the reference GPU kernels
// (dev/ref/nvfp4_ref.cuh, for tests and benchmarks).
//
// For a GEMM operand held as a rows x cols row-major BF16 view:
//   axis 1 (row-wise): blocks along cols (fprop X and W, dgrad dY);
//   axis 0 (column-wise): blocks along rows (dgrad W, wgrad dY and X).
// Outputs per target:
//   fake   BF16, same layout as the input (its own ld): code * block scale, exact in BF16, rotated if the
//          spec has a Hadamard. Dequantized tensor = fake * (*scale_dec); GEMM alpha = dec_A * dec_B.
//   codes  packed 4-bit, operand-major: M x K/2 bytes (M = rows, K = cols for axis 1; M = cols, K = rows
//          for axis 0, i.e. the column-wise copy is stored transposed, TN-ready); element 2i low nibble.
//   scales M x K/L bytes (E4M3 or E8M0 bits), row-major; 2D tiles repeat their scale on each row.
//   fp8    E4M3 bytes c * 2^(e - o), the reduction axis contiguous (axis 0 stored transposed), with per-row
//          scales 2^o (fp8_fold.h): E8M0-scaled specs only, for FP8 tensor-core GEMMs.
//   amax, scale_dec: device floats (amax kept for logging).
//   amax_next (or NULL): the delayed amax rule (Recipe.amax_delayed). The apply pass alone runs (no amax pass),
//          its tensor scale from *amax (the previous micro-step's amax of this copy), and it maxes this view's
//          own amax into *amax_next (zeroed by the caller): the same bits the amax pass would have taken. Only
//          the copies the whole-block kernels make (quant_fast_delayed_ok).
#pragma once
#include "llmc/base/cuda_common.cuh"
#include "llmc/fp4/formats.h"

typedef struct {
    QuantParams p;
    int axis;             // 1 row-wise, 0 column-wise
    uint64_t key;         // SR: rng_key(seed, step, tensor id); bits sr_bits16(key, r, c, cols) of view element (r, c)
    floatX* fake;         // fake output (or NULL)
    int64_t ld_fake;
    uint8_t* codes;       // packed output (or NULL)
    uint8_t* scales;      // with codes
    float* amax;          // required: device float
    float* scale_dec;     // required: device float
    float* amax_next;     // delayed amax (or NULL): see above
    // FP8 output (the fold, fp8_fold.h), instead of fake: E4M3 values with the reduction axis contiguous
    // (rows x cols for axis 1, cols x rows for axis 0), for FP8 tensor-core GEMMs
    uint8_t* fp8;
    uint32_t* fold_max;   // with fp8: per GEMM row (per block_w of them) the amax bits; zeroed by the caller,
                          // maximized into by the amax pass
    float* fold_scale;    // with fp8: per GEMM row 2^o, written by the apply pass (the GEMM's outer-vector scale)
    unsigned* fold_below; // with fp8: the apply pass adds the number of blocks below the exact window
    const float* src_dec; // MS-EDEN (rounding eden) only, or NULL: the input is a fake copy, and the operand its
                          // dequantized values BF16(FP32(fake) * *src_dec) (the operand source src=fprop)
    float* eden_corr;     // MS-EDEN, tests: the corrections C, one per 128-group, operand row-major (or NULL)
} QuantTarget;

static inline QuantTarget quant_target_fake(const QuantParams* p, int axis, uint64_t key, floatX* fake,
                                            int64_t ld_fake, float* amax, float* scale_dec) {
    QuantTarget t;
    memset(&t, 0, sizeof(t));
    t.p = *p; t.axis = axis; t.key = key; t.fake = fake; t.ld_fake = ld_fake;
    t.amax = amax; t.scale_dec = scale_dec;
    return t;
}
static inline QuantTarget quant_target_packed(const QuantParams* p, int axis, uint64_t key, uint8_t* codes,
                                              uint8_t* scales, float* amax, float* scale_dec) {
    QuantTarget t;
    memset(&t, 0, sizeof(t));
    t.p = *p; t.axis = axis; t.key = key; t.codes = codes; t.scales = scales;
    t.amax = amax; t.scale_dec = scale_dec;
    return t;
}
