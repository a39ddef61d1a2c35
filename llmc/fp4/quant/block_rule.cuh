// block_rule.cuh: a target's block-scale rule with its per-tensor constants computed once per CTA (E4M3 scales from
// the hardware's conversion and a table), and Four Over Six's two candidates per block, for the kernels laid out
// for whole blocks (whole_block.cuh) and the group rules (group.cuh).
// defines: QFBlockRule, qf_scale_table(), qf_block_rule(), qf_e4m3_scale(), qf_block_scale(), qf_46_add(),
//          qf_46_words(), qf_46_pair()
#pragma once
#include <cuda_fp8.h>
#include "llmc/base/cuda_common.cuh"
#include "llmc/fp4/formats.h"
#include "llmc/fp4/quant/element.cuh"
#include "llmc/fp4/quant/kernel_args.cuh"
#include "llmc/fp4/quant/lane_ops.cuh"

// A target's block-scale rule with its per-tensor constants computed once (the kernels below). E4M3 scales:
// quant_block_scale_e4m3_pre's arithmetic (mult and s_dec hold quant_block_scale's divisions) in fewer
// instructions. Its scale byte e4m3_bits(e4m3_rne_satfinite(y)) is the hardware's RNE satfinite conversion
// (one cvt instead of a branchy rounding and re-encoding; test_quant_fast checks the two agree on every
// float in [0, FLT_MAX], and y = fminf(bamax * mult, FLT_MAX) lies there: bamax is a magnitude, mult > 0);
// sdec and inv = fminf(1 / (sdec * s_dec), FLT_MAX) are functions of that byte and the tensor, so they come
// from a 128-entry table each CTA fills once (one IEEE division per entry instead of one per block). Other
// scales: quant_block_scale itself.
typedef struct {
    float s_enc, mult, s_dec;
    float mult4;         // 4o6's 4-candidate: quant_block_scale_e4m3_to(., s_enc, 4)'s mult (R.mult is the 6-candidate's)
    int e4m3;
    const float2* tab;   // E4M3: [byte] = (sdec, inv), in shared memory
} QFBlockRule;

// The CTA's table of E4M3 block scales under a tensor's s_dec: [byte] = (sdec, fminf(1 / (sdec * s_dec), FLT_MAX)),
// quant_block_scale_e4m3_pre's values (one IEEE division per byte), with sdec = zero for byte 0 (E4M3's value; 1 for
// MS-EDEN's eden_group_scale). Byte 127 is E4M3's NaN: never looked up. The CTA syncs before the first lookup.
__device__ __forceinline__ void qf_scale_table(float2* tab, float s_dec, float zero) {
    for (int b = threadIdx.x; b < 128; b += blockDim.x) {
        const float sdec = b ? e4m3_value((uint8_t)b) : zero;
        tab[b] = make_float2(sdec, fminf(1.0f / (sdec * s_dec), FLT_MAX));
    }
}
// tab: 128 float2 of the CTA's shared memory; the CTA syncs before its first qf_block_scale
__device__ __forceinline__ QFBlockRule qf_block_rule(const QFTarget& T, float amax, float2* tab) {
    QFBlockRule R;
    R.s_enc = quant_tensor_scale_enc(&T.p, amax);
    R.e4m3 = quant_scale_is_e4m3(T.p.scale) && !T.eden;
    R.mult = R.s_enc * (1.0f / T.p.grid.maxval);
    R.mult4 = R.s_enc * (1.0f / 4.0f);
    R.s_dec = 1.0f / R.s_enc;
    R.tab = tab;
    if (R.e4m3) qf_scale_table(tab, R.s_dec, 0.0f);
    return R;
}
// m: the block amax's magnitude bits (sign clear, so y >= +0; a NaN or inf amax gives y = FLT_MAX, as in the reference)
__device__ __forceinline__ QuantBlockScale qf_e4m3_scale(const QFBlockRule& R, uint32_t m, float mult) {
    const float y = fminf(f32_from_bits(m) * mult, FLT_MAX);
    const uint32_t b = __nv_cvt_float_to_fp8(y, __NV_SATFINITE, __NV_E4M3);
    const float2 e = R.tab[b];
    QuantBlockScale bs;
    bs.sdec = e.x;
    bs.inv = e.y;
    bs.bits = (uint8_t)b;
    bs.is_nan = 0;
    return bs;
}
__device__ __forceinline__ QuantBlockScale qf_block_scale(const QFTarget& T, const QFBlockRule& R, uint32_t m) {
    if (!R.e4m3) return quant_block_scale(&T.p, f32_from_bits(m), R.s_enc);
    return qf_e4m3_scale(R, m, R.mult);
}

// Four Over Six (scale rule 4o6, docs/NUMERICS_NEXT.md section 1) in the whole-block kernels (fake copies in 1x16
// blocks, E2M1): each block's two candidates, its max to 6 (qf_block_scale) and to 4 (qf_e4m3_scale with mult4),
// round every element (the same SR bits), and the block keeps the 4-candidate iff the sum of its squared errors
// (m * sdec - |v| * S_enc)^2, added in the block's element order with no FMA, is strictly smaller (group.cuh's
// qg_err_add, the CPU twin's quant_4o6_err_add: the signs cancel). A candidate's fake word is qf_fake_word's. A block holding inf or NaN keeps 6 and takes the reference elements.
__device__ __forceinline__ float qf_46_add(float e, float p, float sv) {
    const float d = QF_SUB(p, sv);
    return QF_ADD(e, QF_MUL(d, d));
}
// One block along a row's words vw (elements 2i, 2i + 1 of word i, in order) -> its fake words o.
template <bool SR, int N>
__device__ __forceinline__ void qf_46_words(const QFGrid& g, const uint32_t (&vw)[N], const QuantBlockScale& c6,
                                            const QuantBlockScale& c4, float s_enc, const uint32_t (&rnd)[N],
                                            uint32_t (&o)[N]) {
    float e6 = 0.0f, e4 = 0.0f;
    uint32_t w4[N];
#pragma unroll
    for (int i = 0; i < N; i++) {
        const float v0 = qf_lo(vw[i]), v1 = qf_hi(vw[i]);
        const float s0 = QF_MUL(fabsf(v0), s_enc), s1 = QF_MUL(fabsf(v1), s_enc);
        float m0, m1, n0, n1;
        qf_fast_mags<SR>(g, v0, v1, c6.inv, c6.inv, rnd[i], m0, m1);
        qf_fast_mags<SR>(g, v0, v1, c4.inv, c4.inv, rnd[i], n0, n1);
        const float p0 = QF_MUL(m0, c6.sdec), p1 = QF_MUL(m1, c6.sdec), q0 = QF_MUL(n0, c4.sdec), q1 = QF_MUL(n1, c4.sdec);
        e6 = qf_46_add(qf_46_add(e6, p0, s0), p1, s1);
        e4 = qf_46_add(qf_46_add(e4, q0, s0), q1, s1);
        o[i] = qf_fake_word(p0, p1, vw[i]);
        w4[i] = qf_fake_word(q0, q1, vw[i]);
    }
#pragma unroll
    for (int i = 0; i < N; i++) o[i] = e4 < e6 ? w4[i] : o[i];
}
// One row of two column blocks (word x: column c low, c + 1 high): both candidates' words w6, w4 and error sums.
template <bool SR>
__device__ __forceinline__ void qf_46_pair(const QFGrid& g, uint32_t x, const QuantBlockScale& l6, const QuantBlockScale& h6,
                                           const QuantBlockScale& l4, const QuantBlockScale& h4, float s_enc, uint32_t rnd,
                                           float& el6, float& eh6, float& el4, float& eh4, uint32_t& w6, uint32_t& w4) {
    const float v0 = qf_lo(x), v1 = qf_hi(x);
    const float s0 = QF_MUL(fabsf(v0), s_enc), s1 = QF_MUL(fabsf(v1), s_enc);
    float m0, m1, n0, n1;
    qf_fast_mags<SR>(g, v0, v1, l6.inv, h6.inv, rnd, m0, m1);
    qf_fast_mags<SR>(g, v0, v1, l4.inv, h4.inv, rnd, n0, n1);
    const float p0 = QF_MUL(m0, l6.sdec), p1 = QF_MUL(m1, h6.sdec), q0 = QF_MUL(n0, l4.sdec), q1 = QF_MUL(n1, h4.sdec);
    el6 = qf_46_add(el6, p0, s0);
    eh6 = qf_46_add(eh6, p1, s1);
    el4 = qf_46_add(el4, q0, s0);
    eh4 = qf_46_add(eh4, q1, s1);
    w6 = qf_fake_word(p0, p1, x);
    w4 = qf_fake_word(q0, q1, x);
}
