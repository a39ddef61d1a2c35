// fp4/quant_cpu.h: the CPU quantizer, plain loops over the same HD arithmetic the kernels use.
// defines: QuantView, quant_check_shape(), quant_operand_dims(), quant_rotated_operand_cpu(),
//          quant_amax_cpu(), QuantRotated, QuantCpuOut, quant_block_scale_4o6_cpu(), quant_eden_cpu(),
//          quant_eden_corrections_cpu(), quant_cpu_pass(), quant_cpu(), dequant_packed_cpu(),
//          QuantStats, quant_stats_element(), quant_stats_cpu(), quant_stats_add(), quant_stats_format(),
//          QuantCompare, quant_compare_element(), quant_compare_cpu(), quant_compare_add(), quant_compare_format()
// It is the reference twin of the GPU quantizer, llmc/fp4/quant.cuh (dev/test/test_quant_gpu_cpu.cu compares
// them bit for bit), and of the reference GPU kernels, dev/ref/nvfp4_ref.cuh (dev/test/test_fp4_gpu.cu), and
// it is what CI checks against the numpy golden vectors (dev/fp4_ref.py).
//
// Orientation. A view is a rows x cols row-major BF16 matrix with leading dimension ld. It is
// quantized along one axis, the reduction dimension of the GEMM that consumes it:
//   axis 1 ("row-wise"):    blocks run along cols. The operand is the view itself, M = rows, K = cols.
//   axis 0 ("column-wise"): blocks run along rows. The operand is the view's transpose, M = cols, K = rows.
// Operand element (i, k) (k along the reduction) is view[i][k] for axis 1 and view[k][i] for axis 0.
// A block W x L covers W operand rows and L consecutive k.
//
// Outputs (see quant_target.cuh for the same layouts on the device):
//   fake:   BF16, the view's layout (rows x cols, ld_out), holding code_value * block_scale exactly;
//           dequantized value = fake * scale_dec (scale_dec = 1 / S_enc, or 1 for E8M0 formats).
//   packed: codes M x K/2 bytes and scales M x K/L bytes, operand row-major (so a column-wise copy is
//           stored transposed: TN-ready). 2D tiles repeat their scale on each of their W rows.
// SR random bits: sr_bits16(key, r, c, cols) with (r, c) the element's position in the view; with a
// Hadamard, (r, c) is the position of the rotated value (the rotated tensor has the view's shape).
// MS-EDEN (rounding eden, docs/NUMERICS_NEXT.md section 2): RTN codes; the key drives the block-scale SR
// (eden_scale_r16 of the scale's operand row-major index); the Hadamard signs come from the caller
// (quant_params_set_step_signs) and must be set before any call.
#pragma once
#include "llmc/base/common.h"
#include "llmc/fp4/formats.h"
#include "llmc/fp4/stochastic_round.h"
#include "llmc/fp4/hadamard.h"

#define BF16_CANONICAL_NAN 0x7FC0u

typedef struct {
    const uint16_t* data;   // BF16 bits
    int64_t rows, cols, ld;
} QuantView;

static inline void quant_operand_dims(int64_t rows, int64_t cols, int axis, int64_t* M, int64_t* K) {
    *M = axis ? rows : cols;
    *K = axis ? cols : rows;
}

// Shapes the quantizer accepts; anything else is a clear error, never padding or garbage.
static inline void quant_check_shape(const QuantParams* p, int64_t rows, int64_t cols, int axis,
                                     const char* what) {
    int64_t M, K;
    fail_if(axis != 0 && axis != 1, "%s: axis must be 0 (column-wise) or 1 (row-wise), got %d", what, axis);
    fail_if(rows <= 0 || cols <= 0, "%s: empty tensor (%lld x %lld)", what, (long long)rows, (long long)cols);
    quant_operand_dims(rows, cols, axis, &M, &K);
    const char* kname = axis ? "cols" : "rows";
    const char* mname = axis ? "rows" : "cols";
    fail_if(K % p->block_l, "%s: %s = %lld is not a multiple of the block length %d along the reduction "
            "dim; pad the tensor or pick another block shape", what, kname, (long long)K, p->block_l);
    fail_if(M % p->block_w, "%s: %s = %lld is not a multiple of the 2D block height %d; pad the tensor "
            "or use a 1D block (1x%d)", what, mname, (long long)M, p->block_w, p->block_l);
    fail_if(p->hadamard && K % p->hadamard, "%s: %s = %lld is not a multiple of the Hadamard size %d",
            what, kname, (long long)K, p->hadamard);
}

static inline int64_t quant_view_offset(int64_t i, int64_t k, int axis, int64_t ld) {
    return axis ? i * ld + k : k * ld + i;
}
// SR bits of operand element (i, k): the view's element (i, k) (axis 1) or (k, i) (axis 0).
static inline uint32_t quant_sr_bits(uint64_t key, int64_t i, int64_t k, int axis, int64_t cols) {
    return axis ? sr_bits16(key, (uint64_t)i, (uint64_t)k, (uint64_t)cols) : sr_bits16(key, (uint64_t)k, (uint64_t)i, (uint64_t)cols);
}

// The operand as the quantizer sees it: M x K floats (row-major), Hadamard-rotated along K and
// rounded to BF16 when the spec has a Hadamard. Caller frees.
static inline float* quant_rotated_operand_cpu(const QuantParams* p, QuantView v, int axis) {
    fail_if(p->step_signs && !p->signs_set, "quantizer: the spec has 'step' Hadamard signs (eden), drawn per call, "
            "and this call has none: call quant_params_set_step_signs(&params, sign_key) first");
    int64_t M, K;
    quant_operand_dims(v.rows, v.cols, axis, &M, &K);
    float* t = (float*)xmalloc(sizeof(float) * M * K);
    for (int64_t i = 0; i < M; i++) {
        for (int64_t k = 0; k < K; k++)
            t[i * K + k] = bf16_bits_to_float(v.data[quant_view_offset(i, k, axis, v.ld)]);
        if (p->hadamard)
            for (int64_t k = 0; k < K; k += p->hadamard) hadamard_bf16(t + i * K + k, p->hadamard, p->signs);
    }
    return t;
}

// max |x|, NaN if any x is NaN: the max of the magnitude bits (NaN bits sort above inf).
HD uint32_t amax_bits_update(uint32_t m, float x) {
    uint32_t a = f32_bits(x) & 0x7FFFFFFFu;
    return a > m ? a : m;
}

static inline float quant_amax_cpu(const QuantParams* p, QuantView v, int axis) {
    int64_t M, K;
    quant_operand_dims(v.rows, v.cols, axis, &M, &K);
    float* t = quant_rotated_operand_cpu(p, v, axis);
    uint32_t m = 0;
    for (int64_t j = 0; j < M * K; j++) m = amax_bits_update(m, t[j]);
    free(t);
    return f32_from_bits(m);
}

// Packed -> BF16 in the view's layout. scale_dec NULL gives exactly the fake-quant values (code * block scale);
// else BF16(FP32(code * block scale) * *scale_dec).
static inline void dequant_packed_cpu(const QuantParams* p, const uint8_t* codes, const uint8_t* scales,
                                      const float* scale_dec, int64_t rows, int64_t cols, int axis, uint16_t* out,
                                      int64_t ld_out) {
    fail_if(p->grid.e4m3, "dequant_packed_cpu: the e4m3 grid has no packed 4-bit form");
    int64_t M, K;
    quant_operand_dims(rows, cols, axis, &M, &K);
    const int L = p->block_l;
    for (int64_t i = 0; i < M; i++)
        for (int64_t k = 0; k < K; k++) {
            uint8_t sb = scales[i * (K / L) + k / L];
            uint8_t c = (codes[i * (K / 2) + k / 2] >> (4 * (k & 1))) & 15;
            float s = quant_packed_scale_value(p, sb);
            uint16_t o;
            if (s != s) o = BF16_CANONICAL_NAN;
            else {
                float y = grid_code_value(&p->grid, c) * s;
                if (scale_dec) y = y * *scale_dec;
                o = bf16_bits_rne(y);
            }
            out[quant_view_offset(i, k, axis, ld_out)] = o;
        }
}


// ---------------------------------------------------------------------------------------------------
// Quantization diagnostics (for the training log; the GPU twins: quant_fast_stats_gpu in quant/patch.cuh and
// quant_compare_gpu in quant_diag.cuh).
//
// QuantStats describes one quantization exactly as the GEMM sees it: the same rotated operand, block
// scales, rounding and SR bits (same key) as quant_cpu and the GPU quantizer. Per element, with v the value
// of the (rotated, BF16-rounded if the spec has a Hadamard) operand, x = v * inv the value rounded onto the
// grid, c its code, sdec the block scale and S_dec the tensor dequantization factor:
//   q = code_value(c) * sdec * S_dec (exact in double), the dequantized value the GEMM multiplies.
// Only nonzero finite v count (zeros quantize exactly and contribute nothing). Fields accumulate: the
// caller zeroes the struct once and may add several tensors or micro-batches.
// With a Hadamard the error is measured in the rotated space; the rotation is orthonormal, so the
// error of the un-rotated tensor is the same up to the BF16 rounding of the rotated values.
typedef struct {
    double err2;                    // sum (v - q)^2
    double src2;                    // sum v^2           -> relative error sqrt(err2 / src2)
    unsigned long long n;           // elements counted: v != 0 and finite
    unsigned long long flushed;     // of those, q == 0: code magnitude 0 or block scale 0
    unsigned long long clipped;     // of those, |x| > grid max before rounding (saturated by the scale
                                    // choice: E8M0 floor rule, E4M3 block scale rounded down), block
                                    // scale nonzero
    unsigned long long zero_blocks; // ELEMENTS (not blocks) of n whose block scale underflowed to 0 (the
                                    // whole block flushed: E4M3 block amax below ~2^-10 of the tensor
                                    // amax); a subset of flushed
    unsigned long long nonfinite;   // elements with a NaN/inf v, or in an E8M0 NaN block (they
                                    // dequantize to NaN); counted here only, not in n or the sums
} QuantStats;

// The product of two doubles, never contracted with a following add into an FMA (the device would,
// the host would not), so CPU and GPU compute the same per-element terms; only the order of the sums
// differs.
HD double qs_mul(double a, double b) {
#if defined(__CUDA_ARCH__)
    return __dmul_rn(a, b);
#else
    return a * b;
#endif
}

// Add one element. v: operand value; x = v * bs->inv; c: the code the quantizer chose for x;
// tensor_dec: S_dec (quant_tensor_scale_dec).
HD void quant_stats_element(QuantStats* s, const GridTraits* g, float v, float x, uint8_t c,
                            const QuantBlockScale* bs, float tensor_dec) {
    if (!(fabsf(v) <= FLT_MAX) || bs->is_nan) { s->nonfinite++; return; }
    if (v == 0.0f) return;
    double q = qs_mul(qs_mul((double)grid_code_value(g, c), (double)bs->sdec), (double)tensor_dec);
    double e = (double)v - q;
    s->err2 += qs_mul(e, e);
    s->src2 += qs_mul((double)v, (double)v);
    s->n++;
    unsigned long long zero_scale = bs->sdec == 0.0f;
    s->flushed += grid_code_is_zero(g, c) || zero_scale;
    s->clipped += !zero_scale && fabsf(x) > g->maxval;
    s->zero_blocks += zero_scale;
}

HD void quant_stats_add(QuantStats* acc, const QuantStats* s) {
    acc->err2 += s->err2; acc->src2 += s->src2; acc->n += s->n; acc->flushed += s->flushed;
    acc->clipped += s->clipped; acc->zero_blocks += s->zero_blocks; acc->nonfinite += s->nonfinite;
}

// The operand as the quantizer sees it (quant_rotated_operand_cpu): M x K floats, row-major.
typedef struct {
    const float* t;
    int64_t M, K;
} QuantRotated;

// Where one pass of the quantizer writes; each pointer may be NULL (not wanted).
typedef struct {
    uint16_t* fake;       // the view's layout, rows ld_fake apart
    int64_t ld_fake;
    uint8_t* codes;       // packed, operand row-major
    uint8_t* scales;
    QuantStats* st;       // statistics, accumulated
} QuantCpuOut;

// The element's code, as quant_cpu_pass rounds it: RNE, or SR with the element's view-position bits.
static inline uint8_t quant_round_cpu(const QuantParams* p, float x, uint64_t key, int64_t i, int64_t k, int axis,
                                      int64_t cols) {
    return p->rounding == QROUND_SR ? grid_round_sr(&p->grid, x, quant_sr_bits(key, i, k, axis, cols))
                                    : grid_round_rne(&p->grid, x);
}

// Four Over Six (docs/NUMERICS_NEXT.md section 1): the scale of the W x L block at operand (i0, k0) of the
// rotated operand o: the candidate mapping the block max to 4 when its codes have a strictly
// smaller squared error (quant_4o6_err_add, elements in order) than the one mapping it to 6. Both
// candidates round with the same rule and, for SR, the same bits, which the caller uses again for the codes
// of the chosen one (so they are the codes measured here).
static inline QuantBlockScale quant_block_scale_4o6_cpu(const QuantParams* p, QuantRotated o, int64_t i0, int64_t k0,
                                                        float bamax, float s_enc, uint64_t key, int axis, int64_t cols) {
    const QuantBlockScale cand[2] = {quant_block_scale_e4m3_to(bamax, s_enc, 6.0f),
                                     quant_block_scale_e4m3_to(bamax, s_enc, 4.0f)};
    float err[2] = {0.0f, 0.0f};
    for (int m = 0; m < 2; m++)
        for (int64_t i = i0; i < i0 + p->block_w; i++)
            for (int64_t k = k0; k < k0 + p->block_l; k++) {
                const float x = o.t[i * o.K + k];
                const uint8_t c = quant_round_cpu(p, x * cand[m].inv, key, i, k, axis, cols);
                quant_4o6_err_add(&err[m], &p->grid, c, cand[m].sdec, x, s_enc);
            }
    return err[1] < err[0] ? cand[1] : cand[0];
}

// MS-EDEN (docs/NUMERICS_NEXT.md section 2) over the rotated operand o (M x K, K a multiple of 128), for
// quant_cpu_pass: per operand row, per 128-element rotation group, the 8 pre-correction group scales s_g, the
// scaled values u = y * inv_g and their RTN codes c, the sums num = sum u^2 and den = sum u * val(c) in
// eden_sum128's order, the correction C, and each group's stored scale s'_g = eden_scale_sr(s_g * C, r16 of
// the scale's index). Outputs as quant_cpu_pass; the statistics see the block scale s'_g and x = u. corr (if
// not NULL): the corrections C, M x K/128 row-major (what the golden records pin down: the SR of the scales
// hides a last-bit difference in C).
static inline void quant_eden_cpu(const QuantParams* p, QuantRotated o, float s_enc, float tdec, uint64_t key, int axis,
                                  const QuantCpuOut* out, float* corr) {
    const float* t = o.t;
    const int64_t M = o.M, K = o.K;
    uint16_t* fake = out->fake;
    uint8_t *codes = out->codes, *scales = out->scales;
    QuantStats* st = out->st;
    const int64_t NB = K / 16;   // scales per operand row
    for (int64_t i = 0; i < M; i++) {
        for (int64_t k0 = 0; k0 < K; k0 += 128) {
            const float* y = t + i * K + k0;
            float sg[8], invg[8], u[128], tn[128], td[128];
            uint8_t c[128];
            for (int g = 0; g < 8; g++) {
                uint32_t bb = 0;
                for (int k = 0; k < 16; k++) bb = amax_bits_update(bb, y[16 * g + k]);
                sg[g] = eden_group_scale(f32_from_bits(bb), s_enc);
                invg[g] = fminf(1.0f / (sg[g] * tdec), FLT_MAX);
            }
            for (int k = 0; k < 128; k++) {
                u[k] = y[k] * invg[k / 16];
                c[k] = grid_round_rne(&p->grid, u[k]);
                tn[k] = f32_mul_rn(u[k], u[k]);
                td[k] = f32_mul_rn(u[k], grid_code_value(&p->grid, c[k]));
            }
            const float C = eden_correction(eden_sum128(tn), eden_sum128(td));
            if (corr) corr[i * (K / 128) + k0 / 128] = C;
            for (int g = 0; g < 8; g++) {
                const int64_t j = i * NB + k0 / 16 + g;
                QuantBlockScale bs;
                bs.sdec = eden_scale_sr(f32_mul_rn(sg[g], C), eden_scale_r16(key, (uint64_t)j));
                bs.bits = e4m3_bits(bs.sdec);
                bs.inv = invg[g];
                bs.is_nan = 0;
                if (scales) scales[j] = bs.bits;
                for (int kk = 16 * g; kk < 16 * g + 16; kk++) {
                    const int64_t k = k0 + kk;
                    if (st) quant_stats_element(st, &p->grid, y[kk], u[kk], c[kk], &bs, tdec);
                    if (codes) {
                        uint8_t* byte = codes + i * (K / 2) + k / 2;
                        *byte = (k & 1) ? (uint8_t)((*byte & 0x0F) | (c[kk] << 4)) : (uint8_t)((*byte & 0xF0) | c[kk]);
                    }
                    if (fake) fake[quant_view_offset(i, k, axis, out->ld_fake)] = bf16_bits_rne(grid_code_value(&p->grid, c[kk]) * bs.sdec);
                }
            }
        }
    }
}

// One pass of the quantizer over a view along `axis`: the outputs that are not NULL (out's fake, packed codes /
// scales and statistics accumulated into *st; the amax) of the same codes. Returns scale_dec (the tensor-level
// dequantization factor). quant_cpu and quant_stats_cpu below are its two uses.
static inline float quant_cpu_pass(const QuantParams* p, QuantView v, int axis, uint64_t key, const QuantCpuOut* out,
                                   float* amax_out, const char* who) {
    uint16_t* fake = out->fake;
    uint8_t *codes = out->codes, *scales = out->scales;
    QuantStats* st = out->st;
    quant_check_shape(p, v.rows, v.cols, axis, who);
    fail_if((codes || scales) && p->grid.e4m3, "%s: the e4m3 grid has no packed 4-bit form (fake output only)", who);
    int64_t M, K;
    quant_operand_dims(v.rows, v.cols, axis, &M, &K);
    float* t = quant_rotated_operand_cpu(p, v, axis);
    const QuantRotated rot = {t, M, K};
    uint32_t mb = 0;
    for (int64_t j = 0; j < M * K; j++) mb = amax_bits_update(mb, t[j]);
    float amax = f32_from_bits(mb);
    float s_enc = quant_tensor_scale_enc(p, amax);
    float tdec = quant_tensor_scale_dec(p, s_enc);
    const int W = p->block_w, L = p->block_l;
    if (p->rounding == QROUND_EDEN) {
        fail_if(p->hadamard != 128 || W != 1 || L != 16 || p->grid.e4m3, "%s: eden needs e2m1, 1x16 and h128", who);
        quant_eden_cpu(p, rot, s_enc, tdec, key, axis, out, NULL);
        free(t);
        if (amax_out) *amax_out = amax;
        return tdec;
    }
    for (int64_t i0 = 0; i0 < M; i0 += W) {
        for (int64_t k0 = 0; k0 < K; k0 += L) {
            uint32_t bb = 0;
            for (int64_t i = i0; i < i0 + W; i++)
                for (int64_t k = k0; k < k0 + L; k++) bb = amax_bits_update(bb, t[i * K + k]);
            QuantBlockScale bs = p->scale == QSCALE_E4M3_4O6
                ? quant_block_scale_4o6_cpu(p, rot, i0, k0, f32_from_bits(bb), s_enc, key, axis, v.cols)
                : quant_block_scale(p, f32_from_bits(bb), s_enc);
            for (int64_t i = i0; i < i0 + W; i++) {
                if (scales) scales[i * (K / L) + k0 / L] = bs.bits;
                for (int64_t k = k0; k < k0 + L; k++) {
                    float x = t[i * K + k] * bs.inv;
                    const uint8_t c = bs.is_nan ? 0 : quant_round_cpu(p, x, key, i, k, axis, v.cols);
                    if (st) quant_stats_element(st, &p->grid, t[i * K + k], x, c, &bs, tdec);
                    if (codes) {
                        uint8_t* byte = codes + i * (K / 2) + k / 2;
                        *byte = (k & 1) ? (uint8_t)((*byte & 0x0F) | (c << 4)) : (uint8_t)((*byte & 0xF0) | c);
                    }
                    if (fake) {
                        uint16_t o = bs.is_nan ? (uint16_t)BF16_CANONICAL_NAN
                                               : bf16_bits_rne(grid_code_value(&p->grid, c) * bs.sdec);
                        fake[quant_view_offset(i, k, axis, out->ld_fake)] = o;
                    }
                }
            }
        }
    }
    free(t);
    if (amax_out) *amax_out = amax;
    return tdec;
}

// The MS-EDEN corrections C of a view along `axis` (an eden spec with its step signs set), M x K/128
// row-major, as quant_cpu computes them.
static inline void quant_eden_corrections_cpu(const QuantParams* p, QuantView v, int axis, float* corr) {
    fail_if(p->rounding != QROUND_EDEN, "quant_eden_corrections_cpu: not an eden spec");
    quant_check_shape(p, v.rows, v.cols, axis, "quant_eden_corrections_cpu");
    int64_t M, K;
    quant_operand_dims(v.rows, v.cols, axis, &M, &K);
    float* t = quant_rotated_operand_cpu(p, v, axis);
    uint32_t mb = 0;
    for (int64_t j = 0; j < M * K; j++) mb = amax_bits_update(mb, t[j]);
    const float s_enc = quant_tensor_scale_enc(p, f32_from_bits(mb));
    const QuantRotated rot = {t, M, K};
    const QuantCpuOut none = {.fake = NULL, .ld_fake = 0, .codes = NULL, .scales = NULL, .st = NULL};
    quant_eden_cpu(p, rot, s_enc, quant_tensor_scale_dec(p, s_enc), 0, axis, &none, corr);
    free(t);
}

// Quantize one view along `axis`. Any of fake / codes / scales may be NULL. Returns scale_dec
// (the tensor-level dequantization factor); *amax_out (if given) gets the tensor amax.
static inline float quant_cpu(const QuantParams* p, QuantView v, int axis, uint64_t key,
                              uint16_t* fake, int64_t ld_fake, uint8_t* codes, uint8_t* scales,
                              float* amax_out) {
    const QuantCpuOut out = {.fake = fake, .ld_fake = ld_fake, .codes = codes, .scales = scales, .st = NULL};
    return quant_cpu_pass(p, v, axis, key, &out, amax_out, "quant_cpu");
}

// Accumulate the statistics of quantizing one view along `axis` into *st (the caller zeroes it):
// the codes are the ones quant_cpu produces.
static inline void quant_stats_cpu(const QuantParams* p, QuantView v, int axis, uint64_t key, QuantStats* st) {
    const QuantCpuOut out = {.fake = NULL, .ld_fake = 0, .codes = NULL, .scales = NULL, .st = st};
    quant_cpu_pass(p, v, axis, key, &out, NULL, "quant_stats_cpu");
}

// One log field: "relerr=0.0951 flush=1.23% clip=0.41% zblk=0.00%" (+ " nonfinite=N" when nonzero).
// Fractions are of the counted (nonzero finite) elements.
static inline void quant_stats_format(const QuantStats* s, char* buf, size_t len) {
    double n = s->n ? (double)s->n : 1.0;
    int w = snprintf(buf, len, "relerr=%.4g flush=%.3g%% clip=%.3g%% zblk=%.3g%%",
                     s->src2 > 0 ? sqrt(s->err2 / s->src2) : 0.0, 100.0 * s->flushed / n, 100.0 * s->clipped / n,
                     100.0 * s->zero_blocks / n);
    if (s->nonfinite && w >= 0 && (size_t)w < len)
        snprintf(buf + w, len - w, " nonfinite=%llu", s->nonfinite);
}

// QuantCompare: the forward/backward disagreement of a weight, from its row-wise and column-wise fake
// copies, both in the weight's layout, each dequantized with its own S_dec: a_i = fake_a[i] * dec_a.
// Only meaningful without a Hadamard: with one, each copy lives in its own rotated space (rotated
// along a different dimension), so callers skip the comparison for such specs. With 2D blocks
// (16x16, 32x32) the copies are transposes of each other: differ == 0 and diff2 == 0 exactly (RNE;
// SR too when both copies use the same key, since SR bits are indexed by view position).
typedef struct {
    double diff2;                 // sum (a - b)^2
    double ref2;                  // sum a^2            -> relative L2 difference sqrt(diff2 / ref2)
    unsigned long long n;         // element pairs counted (both finite), zeros included
    unsigned long long differ;    // of those, a != b
    unsigned long long nonfinite; // pairs with a NaN/inf on either side, counted here only
} QuantCompare;

HD void quant_compare_element(QuantCompare* s, uint16_t a_bits, float dec_a, uint16_t b_bits, float dec_b) {
    double a = qs_mul((double)bf16_bits_to_float(a_bits), (double)dec_a);   // exact products
    double b = qs_mul((double)bf16_bits_to_float(b_bits), (double)dec_b);
    if (!(fabs(a) <= DBL_MAX) || !(fabs(b) <= DBL_MAX)) { s->nonfinite++; return; }
    double d = a - b;
    s->diff2 += qs_mul(d, d);
    s->ref2 += qs_mul(a, a);
    s->n++;
    s->differ += a != b;
}

HD void quant_compare_add(QuantCompare* acc, const QuantCompare* s) {
    acc->diff2 += s->diff2; acc->ref2 += s->ref2; acc->n += s->n; acc->differ += s->differ;
    acc->nonfinite += s->nonfinite;
}

// Accumulate the comparison of n contiguous BF16 values into *st (the caller zeroes it).
static inline void quant_compare_cpu(const uint16_t* a, float dec_a, const uint16_t* b, float dec_b, int64_t n,
                                     QuantCompare* st) {
    for (int64_t i = 0; i < n; i++) quant_compare_element(st, a[i], dec_a, b[i], dec_b);
}

// One log field: "wdiff=3.21% wrel=0.0412" (+ " nonfinite=N" when nonzero).
static inline void quant_compare_format(const QuantCompare* s, char* buf, size_t len) {
    int w = snprintf(buf, len, "wdiff=%.3g%% wrel=%.4g", 100.0 * s->differ / (s->n ? (double)s->n : 1.0),
                     s->ref2 > 0 ? sqrt(s->diff2 / s->ref2) : 0.0);
    if (s->nonfinite && w >= 0 && (size_t)w < len)
        snprintf(buf + w, len - w, " nonfinite=%llu", s->nonfinite);
}
