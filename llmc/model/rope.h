// rope.h: rotary position embedding (RoPE), the plain-C half: the cos/sin table, the rotation of one pair
// (shared by the kernels in rope.cuh and the CPU twin), and the CPU twin of rope_forward/rope_backward.
// defines: rope_table_fill(), rope_mul_rn(), rope_rotate(), rope_apply_cpu()
// The "rotate halves" convention of transformers' LlamaForCausalLM (docs/MODELS.md, "RoPE"): within a head of
// size HS, element i < HS/2 pairs with element i + HS/2, and at position t the pair turns by the angle
// t * theta^(-2i/HS):  (x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos). The backward turns the gradient by the
// opposite angle (sin -> -sin; negation is exact, so it is the same code).
// Arithmetic: the table in double, rounded once to float. The rotation in FP32 with each product rounded on its
// own and then added (no FMA: rope_mul_rn keeps nvcc from contracting a*b - c*d on the device), so the kernel
// and rope_apply_cpu give the same FP32 bits, and after the one BF16 rounding the same BF16 bits.
#pragma once
#include <math.h>
#include "llmc/base/common.h"

// cosv[t * (HS/2) + i] = cos(t * theta^(-2i/HS)), sinv likewise, for t < T, i < HS/2; HS even.
// T here is the table's length (the longest sequence, maxT): a table for maxT serves every T <= maxT.
static inline void rope_table_fill(float* cosv, float* sinv, int T, int HS, double theta) {
    fail_if(HS <= 0 || HS % 2 != 0, "rope_table_fill: head size %d must be positive and even", HS);
    fail_if(!(theta > 1.0), "rope_table_fill: theta %g must be > 1 (--rope-theta, default 10000)", theta);
    int half = HS / 2;
    for (int i = 0; i < half; i++) {
        double inv_freq = pow(theta, -2.0 * i / HS);
        for (int t = 0; t < T; t++) {
            double angle = (double)t * inv_freq;
            cosv[(size_t)t * half + i] = (float)cos(angle);
            sinv[(size_t)t * half + i] = (float)sin(angle);
        }
    }
}

// An FP32 product that the device never contracts with a following add into an FMA (the host does not either).
HD float rope_mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

// The pair (x0, x1) turned by the angle with cosine c and sine s (s negated: the opposite angle).
HD void rope_rotate(float x0, float x1, float c, float s, float* y0, float* y1) {
    *y0 = rope_mul_rn(x0, c) - rope_mul_rn(x1, s);
    *y1 = rope_mul_rn(x0, s) + rope_mul_rn(x1, c);
}

// The CPU twin of rope_forward (backward = 0) and rope_backward (backward = 1), in place on an FP32 copy of the
// (B*T, (NH + 2 KVH) HS) qkv buffer: q heads, then k heads (rotated), then v heads (untouched); position
// t = token % T; cosv/sinv from rope_table_fill with at least T rows. The values left in the q and k heads are
// the kernel's FP32 results before its one BF16 rounding: round each to nearest even to get its bits.
static inline void rope_apply_cpu(float* qkv, const float* cosv, const float* sinv, int B, int T, int NH, int KVH,
                                  int HS, int backward) {
    int half = HS / 2;
    size_t width = (size_t)(NH + 2 * KVH) * HS;
    for (int64_t n = 0; n < (int64_t)B * T; n++) {
        int t = (int)(n % T);
        for (int h = 0; h < NH + KVH; h++) {              // the q heads, then the k heads: contiguous
            float* x = qkv + (size_t)n * width + (size_t)h * HS;
            for (int i = 0; i < half; i++) {
                float c = cosv[(size_t)t * half + i], s = sinv[(size_t)t * half + i];
                rope_rotate(x[i], x[i + half], c, backward ? -s : s, &x[i], &x[i + half]);
            }
        }
    }
}
