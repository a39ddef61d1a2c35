// optim_state.h: AdamW's moments stored in NVFP4 (--optimizer-state nvfp4; docs/FULLSTACK_FP4.md section 2),
// plain C: the arithmetic the GPU update (llmc/adamw.cuh, adamw_nvfp4_update) and its CPU twin here share, the
// layout of the state, and the twin itself.
// defines: Opt4Seg, Opt4Step, opt4_step_init(), opt4_s_enc(), opt4_decode(), opt4_moments(), opt4_param(),
//          opt4_encode_block(), opt4_segments(), opt4_bytes(), opt4_tensor_id(), Opt4HostState, opt4_state_in(),
//          opt4_update_cpu()
//
// What is stored, per segment (one parameter tensor of one layer, or its part in this rank's ZeRO-1 shard) and
// per state (m, and u = sqrt(v)):
//   codes   E2M1 nibbles, two per byte, element 2j in the low nibble; 8 bytes per 16 elements
//   scales  one E4M3 block scale per 16 consecutive elements of the segment (the last block padded with 0)
//   amax    one FP32 per (segment, state): the max |x| the codes were encoded under; the tensor scale is
//           S_enc = 6 * 448 / amax (1 when amax is 0), as NVFP4's, and a code decodes to
//           value(code) * e4m3(scale) * (1 / S_enc).
// 4.5 bits per element and state against FP32's 32: m and v take 1.125 bytes per parameter instead of 8.
//
// Why u = sqrt(v) [P]: v spans twice as many binades as u, and its small values sit under a square root in the
// step's denominator; a v that decoded to 0 would turn the step into m / eps. With u stored, a block keeps
// values down to 1/24 of its max in u, i.e. 1/576 in v, and the update needs sqrt(v) = u anyway.
// Guards (docs/FULLSTACK_FP4.md, G1-G6):
//   G1  an element with u > 0 never decodes to 0: a code of 0 becomes the smallest positive one (0.5);
//   G2  a block with a positive max whose E4M3 scale rounds to 0 takes the smallest E4M3, 2^-9;
//   G3  stochastic rounding of both states (16 bits per element from rng_bits32, key opt4_tensor_id), so
//       E[decoded] = the FP32 value and a slowly decaying v still decays;
//   G4  eps outside the root: step = m_hat / (sqrt(v_hat) + eps);
//   G5  fresh state (every byte 0, amax 0) decodes to 0;
//   G6  NaN never reaches the encoder silently: the trainer checks the gradients first (a NaN amax makes the
//       whole segment decode to NaN, which the next step's checks catch).
// The update, per segment, in two passes (both on the GPU, both here):
//   1. per element: decode m, u; mt, vt from the gradient (opt4_moments, FP32); the new parameter from mt, vt
//      (opt4_param); the segment's new amaxes: max |mt| and max sqrt(vt) (max is order-free: deterministic);
//   2. per 16-element block: decode again, recompute mt, vt (the same bits), encode them under the new amaxes.
// Every FP32 operation is written with explicit rounding (f32_*_rn), so the GPU (which would contract a*b+c
// into one FMA) and this twin give the same bits; the bias corrections 1 - beta^t come from the host.
#pragma once
#include <math.h>
#include "llmc/base/common.h"
#include "llmc/base/rng.h"
#include "llmc/base/adamw_step.h"
#include "llmc/fp4/formats.h"
#include "llmc/fp4/stochastic_round.h"

#define OPT4_BLOCK 16
#define OPT4_STATES 2        // m, u = sqrt(v)

HD float f32_add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}
HD float f32_sqrt_rn(float a) {
#if defined(__CUDA_ARCH__)
    return __fsqrt_rn(a);
#else
    return sqrtf(a);
#endif
}

// One AdamW step's constants: AdamW's, plus the bias corrections 1 - beta1^t, 1 - beta2^t (host powf).
typedef struct {
    AdamWParams a;
    float bc1, bc2;
} Opt4Step;

static inline Opt4Step opt4_step_init(const AdamWParams* a) {
    Opt4Step s;
    s.a = *a;
    s.bc1 = 1.0f - powf(a->beta1, (float)a->t);
    s.bc2 = 1.0f - powf(a->beta2, (float)a->t);
    return s;
}

// The tensor encode scale: 6 * 448 / amax; 1 when amax is 0 (fresh state) or the quotient is 0.
HD float opt4_s_enc(float amax) {
    float s = fminf(f32_div_rn(2688.0f, amax), FLT_MAX);
    if (amax == 0.0f || s == 0.0f) s = 1.0f;
    return s;
}

// g: the E2M1 row of quant_grid_table (kernels get a copy as an argument, as the quantizer's do).
// Element i of a segment's state: value(code) * e4m3(block scale) * (1 / S_enc).
HD float opt4_decode(const GridTraits* g, const uint8_t* codes, const uint8_t* scales, float s_dec, size_t i) {
    const uint8_t code = (uint8_t)((codes[i >> 1] >> (4 * (i & 1))) & 0xF);
    return f32_mul_rn(f32_mul_rn(grid_code_value(g, code), e4m3_value(scales[i / OPT4_BLOCK])), s_dec);
}

// The new moments from the decoded m and u and the gradient g (before clipping): mt = b1 m + (1 - b1) g',
// vt = b2 u^2 + (1 - b2) g'^2, g' = g * grad_scale.
HD void opt4_moments(float m, float u, float g, const AdamWParams* a, float* mt, float* vt) {
    g = f32_mul_rn(g, a->grad_scale);
    *mt = f32_add_rn(f32_mul_rn(a->beta1, m), f32_mul_rn(1.0f - a->beta1, g));
    *vt = f32_add_rn(f32_mul_rn(a->beta2, f32_mul_rn(u, u)), f32_mul_rn(f32_mul_rn(1.0f - a->beta2, g), g));
}

// The new parameter: p - lr (m_hat / (sqrt(v_hat) + eps) + wd p) (G4).
HD float opt4_param(float p, float mt, float vt, const Opt4Step* s) {
    const float mhat = f32_div_rn(mt, s->bc1), vhat = f32_div_rn(vt, s->bc2);
    const float step = f32_add_rn(f32_div_rn(mhat, f32_add_rn(f32_sqrt_rn(vhat), s->a.eps)), f32_mul_rn(s->a.weight_decay, p));
    return f32_add_rn(p, -f32_mul_rn(s->a.lr, step));
}

// Encodes count <= 16 values x of one block (the rest of the block is padding: code 0) under the tensor
// scale s_enc: an E4M3 block scale from the block max (G2), E2M1 codes by stochastic rounding with 16 bits of
// rng_bits32(key, idx0 + j) for element j (G3), and for a non-negative state (u) no positive value at code 0
// (G1). Writes 8 code bytes and one scale byte.
HD void opt4_encode_block(const GridTraits* g, const float* x, int count, float s_enc, int positive, uint64_t key,
                          uint64_t idx0, uint8_t* codes8, uint8_t* scale) {
    float bamax = 0.0f;
    for (int j = 0; j < count; j++) bamax = fmaxf(bamax, fabsf(x[j]));
    QuantBlockScale b = quant_block_scale_e4m3_pre(bamax, s_enc * (1.0f / 6.0f), 1.0f / s_enc);
    if (b.sdec == 0.0f && bamax > 0.0f) {                     // G2: the smallest positive E4M3, 2^-9
        b.sdec = 0.001953125f;
        b.bits = 1;
        b.inv = fminf(1.0f / (b.sdec * (1.0f / s_enc)), FLT_MAX);
    }
    *scale = b.bits;
    for (int j = 0; j < OPT4_BLOCK; j += 2) {
        uint8_t c[2] = {0, 0};
        for (int k = 0; k < 2; k++) {
            if (j + k >= count) continue;
            const float v = x[j + k];
            c[k] = grid_round_sr(g, f32_mul_rn(v, b.inv), rng_bits32(key, idx0 + (uint64_t)(j + k)) >> 16);
            if (positive && v > 0.0f && (c[k] & 7) == 0) c[k] = 1;   // G1
        }
        codes8[j >> 1] = (uint8_t)(c[0] | (c[1] << 4));
    }
}

// The rng tensor id of (parameter tensor, layer, state): apart from AdamW's weight rounding (1000 + id) and
// from the quantizer's ids.
HD uint32_t opt4_tensor_id(int tensor, int layer, int state) {
    return 0x20000000u | ((uint32_t)tensor << 16) | ((uint32_t)layer << 1) | (uint32_t)state;
}

// One segment: elements [begin, begin + n) of the flat parameter vector, the part of (tensor, layer) inside
// this rank's optimizer range; index0 is begin's index within its (tensor, layer) (so the random bits do not
// depend on the sharding); base is its first element in the state arrays (a multiple of 16).
typedef struct {
    size_t begin, n, index0, base;
    int tensor, layer;
} Opt4Seg;

// The segments of the optimizer range [lo, lo + count) over tensors laid out one after another (sizes[i]
// elements, per_layer[i]: split into layers equal slices), at most cap of them; returns how many (cap too
// small: -1) and the state arrays' element count (a multiple of 16) in *elems.
static inline int opt4_segments(const size_t* sizes, const int* per_layer, int num_tensors, int layers, size_t lo,
                                size_t count, Opt4Seg* out, int cap, size_t* elems) {
    size_t off = 0, base = 0;
    const size_t hi = lo + count;
    int k = 0;
    for (int t = 0; t < num_tensors; t++) {
        const int parts = per_layer[t] ? layers : 1;
        const size_t slice = sizes[t] / (size_t)parts;
        for (int l = 0; l < parts; l++, off += slice) {
            const size_t b = off > lo ? off : lo, e = off + slice < hi ? off + slice : hi;
            if (b >= e) continue;
            if (k == cap) return -1;
            out[k].begin = b; out[k].n = e - b; out[k].index0 = b - off; out[k].base = base;
            out[k].tensor = t; out[k].layer = per_layer[t] ? l : 0;
            base += (e - b + OPT4_BLOCK - 1) / OPT4_BLOCK * OPT4_BLOCK;
            k++;
        }
    }
    *elems = base;
    return k;
}

// Bytes of one state's codes and scales over elems elements (a multiple of 16), and where the amaxes start in the
// one buffer that holds m's codes and scales, u's, then the amaxes (rounded up to 16 bytes: the floats stay aligned).
static inline size_t opt4_code_bytes(size_t elems) { return elems / 2; }
static inline size_t opt4_scale_bytes(size_t elems) { return elems / OPT4_BLOCK; }
static inline size_t opt4_amax_offset(size_t elems) {
    return (OPT4_STATES * (opt4_code_bytes(elems) + opt4_scale_bytes(elems)) + 15) / 16 * 16;
}
// What the checkpoint's optimizer section holds for the state: that buffer up to the end of the amaxes.
static inline size_t opt4_bytes(size_t elems, int segments) {
    return opt4_amax_offset(elems) + (size_t)segments * OPT4_STATES * sizeof(float);
}

// The state's arrays inside its one buffer of elems elements (host or device memory: only addresses are formed):
// m's codes, m's scales, u's codes, u's scales, then the amaxes ([segments][2]; the trainer and the GPU update
// keep this update's amaxes after them, another [segments][2]).
typedef struct {
    uint8_t* codes[OPT4_STATES];
    uint8_t* scales[OPT4_STATES];
    float* amax;        // [segments][2]
} Opt4HostState;

static inline Opt4HostState opt4_state_in(uint8_t* mem, size_t elems) {
    Opt4HostState h;
    const size_t cb = opt4_code_bytes(elems), sb = opt4_scale_bytes(elems);
    for (int k = 0; k < OPT4_STATES; k++) {
        h.codes[k] = mem + (size_t)k * (cb + sb);
        h.scales[k] = h.codes[k] + cb;
    }
    h.amax = (float*)(mem + opt4_amax_offset(elems));
    return h;
}

// ---------------------------------------------------------------------------------------------------
// The CPU twin (tests): the state in host memory, the parameters as FP32 values.

// One AdamW update of segment s (its n parameters p, gradients g; p updated in place to the new FP32 values,
// which the trainer then rounds to BF16 as AdamW does), with step constants st, random keys from (seed, step).
static inline void opt4_update_cpu(float* p, const float* g, const Opt4Seg* sg, int s, Opt4HostState* h,
                                   const Opt4Step* st, uint64_t seed, uint32_t step) {
    const size_t n = sg->n;
    uint8_t* codes[2] = {h->codes[0] + sg->base / 2, h->codes[1] + sg->base / 2};
    uint8_t* scales[2] = {h->scales[0] + sg->base / OPT4_BLOCK, h->scales[1] + sg->base / OPT4_BLOCK};
    const GridTraits* g2 = grid_traits(QGRID_E2M1);
    const float sdec[2] = {1.0f / opt4_s_enc(h->amax[2 * s]), 1.0f / opt4_s_enc(h->amax[2 * s + 1])};
    float amax_new[2] = {0.0f, 0.0f};
    float* mt = (float*)xmalloc(n * sizeof(float));
    float* ut = (float*)xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {   // pass 1
        const float m0 = opt4_decode(g2, codes[0], scales[0], sdec[0], i);
        const float u0 = opt4_decode(g2, codes[1], scales[1], sdec[1], i);
        float vt;
        opt4_moments(m0, u0, g[i], &st->a, &mt[i], &vt);
        ut[i] = f32_sqrt_rn(vt);
        p[i] = opt4_param(p[i], mt[i], vt, st);
        amax_new[0] = fmaxf(amax_new[0], fabsf(mt[i]));
        amax_new[1] = fmaxf(amax_new[1], ut[i]);
    }
    const uint64_t key[2] = {rng_key(seed, step, opt4_tensor_id(sg->tensor, sg->layer, 0)),
                             rng_key(seed, step, opt4_tensor_id(sg->tensor, sg->layer, 1))};
    for (size_t b0 = 0; b0 < n; b0 += OPT4_BLOCK) {   // pass 2
        const int count = n - b0 < OPT4_BLOCK ? (int)(n - b0) : OPT4_BLOCK;
        opt4_encode_block(g2, mt + b0, count, opt4_s_enc(amax_new[0]), 0, key[0], sg->index0 + b0, codes[0] + b0 / 2,
                          scales[0] + b0 / OPT4_BLOCK);
        opt4_encode_block(g2, ut + b0, count, opt4_s_enc(amax_new[1]), 1, key[1], sg->index0 + b0, codes[1] + b0 / 2,
                          scales[1] + b0 / OPT4_BLOCK);
    }
    h->amax[2 * s] = amax_new[0];
    h->amax[2 * s + 1] = amax_new[1];
    free(mt);
    free(ut);
}
