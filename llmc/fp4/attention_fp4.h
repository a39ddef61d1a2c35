// attention_fp4.h: FP4 attention (--attention-fp4 SPEC, --attention-fp4-ds SPEC) as data, and its CPU twin.
// defines: AttnFp4Shape, AttnFp4, AttnFp4Part, attn_fp4_set(), attn_fp4_check_shape(), attn_fp4_dropin_problem(),
//          attn_fp4_describe(),
//          attn_fp4_key(), attn_fp4_qkv_slice(), attn_fp4_ds_square(), attn_fp4_quantize_qkv_cpu(),
//          attn_fp4_quantize_ds_cpu(), attn_fp4_forward_cpu(), attn_fp4_backward_cpu()
// The design is docs/FULLSTACK_FP4.md section 1. In short:
//   - Q, K and V are quantized once per layer and step (exact emulation: a "fake" BF16 copy holding code * block
//     scale, and one FP32 tensor dequantization factor per tensor, fp4/quant_cpu.h). The forward and both backward
//     kernels read that one copy (reuse): every product of the backward, including its two recomputations of
//     Q.K^T, sees the values the forward saw. Q and K: blocks along the head dimension d (the Q.K^T reduction);
//     V: blocks along tokens (the P.V reduction). With 2D tiles (nvfp4-2d) the copy is valid along both axes.
//   - P.V, dO.V^T and P^T.dO stay BF16 GEMMs (P and dO unquantized); they read the quantized V.
//   - dS = P * (dP - D) is materialised (B, NH, T, T) in BF16 per layer, quantized with the dS spec (SR by
//     default) with its tensor scale from this layer's own amax, and dQ = s dS.K, dK = s dS^T.Q read that copy.
//     A square 2D spec gives one copy for both; a 1D spec gives two (along keys for dQ, along queries for dK).
//   - Tensor scales are applied in FP32 to the GEMM accumulators (S: s * dec_q * dec_k, O and dP: dec_v, dQ:
//     s * dec_ds * dec_k, dK: s * dec_ds * dec_q), never folded into the BF16 copies.
// The CPU twin below computes in double from the same fake copies; the GPU path (attention.cuh) matches it within
// the BF16 rounding of P, dS and the outputs, and its quantized copies equal the twin's bit for bit.
// The GPU quantization of those copies is fp4/attention_fp4.cuh's; the kernels that read them are
// model/attention_kernels.cuh's, and model/attention.cuh runs the steps.
#pragma once
#include "llmc/base/common.h"
#include "llmc/base/rng.h"
#include "llmc/fp4/formats.h"
#include "llmc/fp4/quant_cpu.h"   // quant_cpu (the twin's quantizer)

// One attention call's shape: batch, sequence, query heads, key/value heads, head size (model/attention.cuh's
// AttnShape, field for field; the FP4 module does not read the model's headers).
typedef struct { int B, T, NH, KVH, HS; } AttnFp4Shape;

typedef struct {
    int on;           // 0 (--attention-fp4 off): the BF16 attention of before, cuDNN by default
    QuantSpec qkv;    // Q, K and V; bf16: the own kernels with nothing quantized
    QuantSpec ds;     // dS in the backward; bf16: dS stays in registers (the fused backward)
    int dropin;       // --attention-fp4-backward bf16: Attn-QAT's "drop-in" control, an ablation that trains unstably:
                      // the forward quantizes Q, K, V, the backward reads the BF16 ones (and the forward's log-sum-exp
                      // and O) and keeps dS in BF16, as a high-precision FlashAttention backward would
} AttnFp4;

typedef enum { ATTN_FP4_Q = 0, ATTN_FP4_K, ATTN_FP4_V, ATTN_FP4_DS } AttnFp4Part;

// The problem with a spec for attention, or NULL. Hadamard: (Q H)(K H)^T = Q K^T, but the backward would then
// need dQ and dK rotated back and V's rotation undone in P.V; not built. MS-EDEN and src=fprop are the linears'.
static inline const char* attn_fp4_spec_problem(const QuantSpec* s) {
    if (s->grid == QGRID_BF16) return NULL;
    if (s->hadamard) return "a Hadamard rotation (hN) is not supported for attention yet: drop the hN option";
    if (s->rounding == QROUND_EDEN) return "rounding eden (MS-EDEN) is the linears' backward scheme, not attention's";
    if (s->source != QSRC_BF16) return "src=fprop applies to the linears' dgrad.w and wgrad.x only";
    return NULL;
}

// qkv_text: "off" or a spec (fp4/formats.h syntax: nvfp4, nvfp4-2d, mxfp4, "nvfp4-2d,sr", bf16, ...).
// ds_text: a spec, or NULL for the default: the qkv spec with stochastic rounding (round-to-nearest for the fp8
// grid, which has no SR). Fails with a message that says what to use instead.
static inline void attn_fp4_set(AttnFp4* a, const char* qkv_text, const char* ds_text) {   // (dropin: 0)
    memset(a, 0, sizeof(*a));
    char err[512];
    if (strcmp(qkv_text, "off") == 0) {
        fail_if(ds_text != NULL, "--attention-fp4-ds '%s' needs --attention-fp4 SPEC (it is off)", ds_text);
        return;
    }
    a->on = 1;
    fail_if(quant_spec_parse(qkv_text, &a->qkv, err, sizeof(err)) != 0, "--attention-fp4 '%s': %s "
            "(use off, bf16 or a spec such as nvfp4-2d)", qkv_text, err);
    if (ds_text) {
        fail_if(quant_spec_parse(ds_text, &a->ds, err, sizeof(err)) != 0, "--attention-fp4-ds '%s': %s", ds_text, err);
    } else {
        a->ds = a->qkv;
        if (a->ds.grid != QGRID_BF16 && a->ds.grid != QGRID_E4M3) a->ds.rounding = QROUND_SR;
    }
    const char* why = attn_fp4_spec_problem(&a->qkv);
    fail_if(why != NULL, "--attention-fp4 '%s': %s", qkv_text, why);
    why = attn_fp4_spec_problem(&a->ds);
    fail_if(why != NULL, "--attention-fp4-ds '%s': %s", ds_text ? ds_text : qkv_text, why);
}

// The block extent of a spec along either axis (1x16: 16, 32x32: 32; bf16: 1).
static inline int attn_fp4_block_extent(const QuantSpec* s) {
    if (s->grid == QGRID_BF16) return 1;
    return s->block_l > s->block_w ? s->block_l : s->block_w;
}

// Shapes the quantized attention takes: blocks never straddle two sequences or two heads. 0 and a message if not.
static inline int attn_fp4_check_shape(const AttnFp4* a, AttnFp4Shape sh, char* err, size_t n) {
    if (!a->on) return 1;
    const QuantSpec* specs[2] = {&a->qkv, &a->ds};
    const char* names[2] = {"--attention-fp4", "--attention-fp4-ds"};
    for (int i = 0; i < 2; i++) {
        const int e = attn_fp4_block_extent(specs[i]);
        if (sh.T % e || sh.HS % e) {
            snprintf(err, n, "%s: the sequence length T = %d and the head size %d must be multiples of the spec's "
                     "block size %d (blocks may not straddle two sequences); use a T that is a multiple of %d",
                     names[i], sh.T, sh.HS, e, e);
            return 0;
        }
    }
    return 1;
}

// The drop-in control (dropin, set by the caller after attn_fp4_set) needs a forward that quantizes: NULL, or why not.
static inline const char* attn_fp4_dropin_problem(const AttnFp4* a) {
    if (!a->dropin) return NULL;
    if (!a->on || a->qkv.grid == QGRID_BF16) return "needs --attention-fp4 with a quantizing spec (the forward to compare)";
    return NULL;
}

// "q/k/v=nvfp4,16x16,e4m3,rne,h0, ds=nvfp4,16x16,e4m3,sr,h0" (or "off"; the drop-in control: "..., backward=bf16 ...").

static inline void attn_fp4_describe(const AttnFp4* a, char* buf, size_t n) {
    if (!a->on) { snprintf(buf, n, "off"); return; }
    char q[96], d[96];
    quant_spec_format(&a->qkv, q, sizeof(q));
    quant_spec_format(&a->ds, d, sizeof(d));
    if (a->dropin) snprintf(buf, n, "q/k/v=%s, backward=bf16 (drop-in control)", q);
    else snprintf(buf, n, "q/k/v=%s, ds=%s", q, d);
}

// The SR key of one part, from the call's key (the trainer's rng_key(seed, step, layer's id)).
static inline uint64_t attn_fp4_key(uint64_t key, AttnFp4Part part) { return rng_key(key, 0, 0xA770u + (uint32_t)part); }

// Where part p (Q, K or V) sits in a token's row of qkv (NH + 2 KVH heads of HS), its width, and the axis of
// its blocks: Q and K along d (axis 1, row-wise: the Q.K^T reduction), V along tokens (axis 0: P.V's).
static inline void attn_fp4_qkv_slice(AttnFp4Shape sh, AttnFp4Part p, int64_t* col0, int64_t* cols, int* axis) {
    *col0 = p == ATTN_FP4_Q ? 0 : p == ATTN_FP4_K ? (int64_t)sh.NH * sh.HS : (int64_t)(sh.NH + sh.KVH) * sh.HS;
    *cols = (int64_t)(p == ATTN_FP4_Q ? sh.NH : sh.KVH) * sh.HS;
    *axis = p == ATTN_FP4_V ? 0 : 1;
}

// 1: one dS copy serves dQ and dK (a square 2D tile is its own transpose); 0: two copies, one per axis.
static inline int attn_fp4_ds_square(const AttnFp4* a) { return a->ds.block_w == a->ds.block_l; }

// ---------------------------------------------------------------------------------------------------
// The CPU twin. BF16 tensors are uint16_t bits; results in double.

// fake: the quantized copy of qkv (B, T, NH + 2 KVH, HS) (fake values, code * block scale); dec[3]: the tensor
// dequantization factors of Q, K, V. A bf16 qkv spec copies qkv and gives factors 1.
static inline void attn_fp4_quantize_qkv_cpu(const AttnFp4* a, AttnFp4Shape sh, const uint16_t* qkv, uint64_t key,
                                             uint16_t* fake, float dec[3]) {
    const int64_t W = (int64_t)(sh.NH + 2 * sh.KVH) * sh.HS, rows = (int64_t)sh.B * sh.T;
    if (a->qkv.grid == QGRID_BF16) {
        memcpy(fake, qkv, sizeof(uint16_t) * rows * W);
        dec[0] = dec[1] = dec[2] = 1.0f;
        return;
    }
    const QuantParams p = quant_params(&a->qkv);
    for (int part = 0; part < 3; part++) {
        int64_t col0, cols;
        int axis;
        attn_fp4_qkv_slice(sh, (AttnFp4Part)part, &col0, &cols, &axis);
        const QuantView v = {qkv + col0, rows, cols, W};
        dec[part] = quant_cpu(&p, v, axis, attn_fp4_key(key, (AttnFp4Part)part), fake + col0, W, NULL, NULL, NULL);
    }
}

// dS (B NH T rows of T, BF16) -> rows: the copy dQ reads (blocks along keys, axis 1), cols: the copy dK reads
// (along queries, axis 0; the same as rows for a square 2D spec). dec[0], dec[1]: their factors.
static inline void attn_fp4_quantize_ds_cpu(const AttnFp4* a, AttnFp4Shape sh, const uint16_t* ds, uint64_t key,
                                            uint16_t* rows, uint16_t* cols, float dec[2]) {
    const int64_t R = (int64_t)sh.B * sh.NH * sh.T, T = sh.T;
    const QuantParams p = quant_params(&a->ds);
    const QuantView v = {ds, R, T, T};
    const uint64_t k = attn_fp4_key(key, ATTN_FP4_DS);
    dec[0] = quant_cpu(&p, v, 1, k, rows, T, NULL, NULL, NULL);
    if (attn_fp4_ds_square(a)) {
        memcpy(cols, rows, sizeof(uint16_t) * R * T);
        dec[1] = dec[0];
    } else {
        dec[1] = quant_cpu(&p, v, 0, k, cols, T, NULL, NULL, NULL);
    }
}

static inline double attn_bf(uint16_t b) { return (double)bf16_bits_to_float(b); }

// Row i of head h in batch b: the dequantized q (fake * dec) and the k, v of token j of its key/value head.
static inline double attn_fp4_q(AttnFp4Shape sh, const uint16_t* f, const float* dec, int b, int i, int h, int d) {
    const int64_t W = (int64_t)(sh.NH + 2 * sh.KVH) * sh.HS;
    return attn_bf(f[((int64_t)b * sh.T + i) * W + (int64_t)h * sh.HS + d]) * dec[0];
}
static inline double attn_fp4_kv(AttnFp4Shape sh, const uint16_t* f, const float* dec, int which, int b, int j, int kvh, int d) {
    const int64_t W = (int64_t)(sh.NH + 2 * sh.KVH) * sh.HS;
    const int64_t off = (int64_t)(sh.NH + which * sh.KVH) * sh.HS;   // which: 0 K, 1 V
    return attn_bf(f[((int64_t)b * sh.T + j) * W + off + (int64_t)kvh * sh.HS + d]) * dec[1 + which];
}

// P of one query row (keys 0..i), from the fake copies: p[j] = softmax_j(s q_i . k_j); returns the log-sum-exp.
// The forward and the backward both call this: the backward's scores are the forward's (reuse).
static inline double attn_fp4_probs_cpu(AttnFp4Shape sh, const uint16_t* f, const float* dec, int b, int h, int i, double* p) {
    const int kvh = h / (sh.NH / sh.KVH);
    const double scale = 1.0 / sqrt((double)sh.HS);
    double m = -INFINITY;
    for (int j = 0; j <= i; j++) {
        double s = 0.0;
        for (int d = 0; d < sh.HS; d++) s += attn_fp4_q(sh, f, dec, b, i, h, d) * attn_fp4_kv(sh, f, dec, 0, b, j, kvh, d);
        p[j] = s * scale;
        if (p[j] > m) m = p[j];
    }
    double z = 0.0;
    for (int j = 0; j <= i; j++) { p[j] = exp(p[j] - m); z += p[j]; }
    for (int j = 0; j <= i; j++) p[j] /= z;
    return m + log(z);
}

// out (B, T, NH, HS) and lse (B, NH, T), in double, from the quantized copy and its factors.
static inline void attn_fp4_forward_cpu(AttnFp4Shape sh, const uint16_t* fake, const float dec[3], double* out, double* lse) {
    double* p = (double*)xmalloc(sizeof(double) * sh.T);
    for (int b = 0; b < sh.B; b++)
        for (int h = 0; h < sh.NH; h++) {
            const int kvh = h / (sh.NH / sh.KVH);
            for (int i = 0; i < sh.T; i++) {
                lse[((int64_t)b * sh.NH + h) * sh.T + i] = attn_fp4_probs_cpu(sh, fake, dec, b, h, i, p);
                for (int d = 0; d < sh.HS; d++) {
                    double o = 0.0;
                    for (int j = 0; j <= i; j++) o += p[j] * attn_fp4_kv(sh, fake, dec, 1, b, j, kvh, d);
                    out[(((int64_t)b * sh.T + i) * sh.NH + h) * sh.HS + d] = o;
                }
            }
        }
    free(p);
}

// What the twin's backward produces besides dqkv: dS in BF16 (B, NH, T, T; the quantizer's input) and, with a
// quantized dS spec, its copies and factors. Any pointer may be NULL.
typedef struct {
    uint16_t* ds;         // dS rounded to BF16 (zeros above the diagonal)
    uint16_t* ds_rows;    // the copy dQ reads
    uint16_t* ds_cols;    // the copy dK reads
    float ds_dec[2];
} AttnFp4CpuDs;

// dqkv (B, T, NH + 2 KVH, HS) in double: the gradient of sum(out . dout) with respect to the dequantized Q, K, V
// (straight-through: it is also the gradient passed on to the unquantized qkv). out (B, T, NH, HS): the forward's
// output for D = rowsum(dO . O) (the GPU test passes the GPU's BF16 out, from which the GPU forms D). ds_in: NULL, or BF16 dS to quantize instead of the twin's own (the
// GPU test feeds the GPU's dS, so both quantize the same bits). ds_key: the SR key of dS.
static inline void attn_fp4_backward_cpu(const AttnFp4* a, AttnFp4Shape sh, const uint16_t* fake, const float dec[3],
                                         const uint16_t* dout, const double* out, uint64_t ds_key,
                                         const uint16_t* ds_in, double* dqkv, AttnFp4CpuDs* dsout) {
    const int B = sh.B, T = sh.T, NH = sh.NH, HS = sh.HS, group = sh.NH / sh.KVH;
    const int64_t W = (int64_t)(NH + 2 * sh.KVH) * HS, TT = (int64_t)T * T, nds = (int64_t)B * NH * TT;
    const double scale = 1.0 / sqrt((double)HS);
    const int quant_ds = a->ds.grid != QGRID_BF16;
    double* P = (double*)xmalloc(sizeof(double) * nds);      // P and dS, (B, NH, T, T), zero above the diagonal
    double* dS = (double*)xmalloc(sizeof(double) * nds);
    uint16_t* ds16 = (uint16_t*)xmalloc(sizeof(uint16_t) * nds);
    for (int64_t e = 0; e < nds; e++) { P[e] = 0.0; dS[e] = 0.0; }
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const int kvh = h / group;
            for (int i = 0; i < T; i++) {
                double* p = P + ((int64_t)b * NH + h) * TT + (int64_t)i * T;
                double* s = dS + ((int64_t)b * NH + h) * TT + (int64_t)i * T;
                attn_fp4_probs_cpu(sh, fake, dec, b, h, i, p);
                const int64_t row = (((int64_t)b * T + i) * NH + h) * HS;
                double D = 0.0;
                for (int d = 0; d < HS; d++) D += attn_bf(dout[row + d]) * out[row + d];
                for (int j = 0; j <= i; j++) {
                    double dp = 0.0;
                    for (int d = 0; d < HS; d++) dp += attn_bf(dout[row + d]) * attn_fp4_kv(sh, fake, dec, 1, b, j, kvh, d);
                    s[j] = p[j] * (dp - D);
                }
            }
        }
    for (int64_t e = 0; e < nds; e++) ds16[e] = ds_in ? ds_in[e] : bf16_bits_rne((float)dS[e]);
    uint16_t *rows = NULL, *cols = NULL;
    float ddec[2] = {1.0f, 1.0f};
    if (quant_ds) {
        rows = (uint16_t*)xmalloc(sizeof(uint16_t) * nds);
        cols = (uint16_t*)xmalloc(sizeof(uint16_t) * nds);
        attn_fp4_quantize_ds_cpu(a, sh, ds16, ds_key, rows, cols, ddec);
    }
    // the dS that dQ (r) and dK (c) multiply: the quantized copies, or dS itself (BF16 when given, as the GPU's)
    #define ATTN_DS_R(e) (quant_ds ? attn_bf(rows[e]) * ddec[0] : ds_in ? attn_bf(ds_in[e]) : dS[e])
    #define ATTN_DS_C(e) (quant_ds ? attn_bf(cols[e]) * ddec[1] : ds_in ? attn_bf(ds_in[e]) : dS[e])
    for (int64_t e = 0; e < (int64_t)B * T * W; e++) dqkv[e] = 0.0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const int kvh = h / group;
            const int64_t base = ((int64_t)b * NH + h) * TT;
            for (int i = 0; i < T; i++)
                for (int j = 0; j <= i; j++) {
                    const int64_t e = base + (int64_t)i * T + j;
                    const double dsr = ATTN_DS_R(e), dsc = ATTN_DS_C(e), p = P[e];
                    const int64_t qi = ((int64_t)b * T + i) * W + (int64_t)h * HS;
                    const int64_t kj = ((int64_t)b * T + j) * W + (int64_t)(NH + kvh) * HS;
                    const int64_t vj = kj + (int64_t)sh.KVH * HS;
                    const int64_t oi = (((int64_t)b * T + i) * NH + h) * HS;
                    for (int d = 0; d < HS; d++) {
                        dqkv[qi + d] += scale * dsr * attn_fp4_kv(sh, fake, dec, 0, b, j, kvh, d);
                        dqkv[kj + d] += scale * dsc * attn_fp4_q(sh, fake, dec, b, i, h, d);
                        dqkv[vj + d] += p * attn_bf(dout[oi + d]);
                    }
                }
        }
    #undef ATTN_DS_R
    #undef ATTN_DS_C
    if (dsout) {
        if (dsout->ds) memcpy(dsout->ds, ds16, sizeof(uint16_t) * nds);
        if (dsout->ds_rows && rows) memcpy(dsout->ds_rows, rows, sizeof(uint16_t) * nds);
        if (dsout->ds_cols && cols) memcpy(dsout->ds_cols, cols, sizeof(uint16_t) * nds);
        dsout->ds_dec[0] = ddec[0];
        dsout->ds_dec[1] = ddec[1];
    }
    free(P); free(dS); free(ds16); free(rows); free(cols);
}
