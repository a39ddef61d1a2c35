// muon_ref.h: Muon's update of one 2D weight matrix (docs/FULLSTACK_FP4.md section 3; issue #50 item 3), plain C:
// the reference twin that the GPU path (llmc/muon.cuh, --optimizer muon) is checked against by test_muon_gpu,
// itself checked against Keller Jordan's PyTorch muon_update by dev/test/test_muon.c (golden values from
// dev/ref/muon_ref.py).
// defines: MuonParams, MUON_SCALE_*, muon_bf16(), muon_normalize(), muon_newton_schulz(), muon_momentum_ref(),
//          muon_apply_ref(), muon_update_ref()
//
// The update of a weight W (rows x cols, row-major) with gradient G and momentum M:
//   1. M <- beta M + (1 - beta) G; U = (1 - beta) G + beta M (Nesterov) or U = M (as the reference's lerps:
//      M + (1 - beta)(G - M), G + beta (M - G))
//   2. X = bf16(U), transposed when rows > cols (so that X X^T is the smaller Gram matrix)
//   3. X <- X / (||X||_F + 1e-7)
//   4. steps times: A = X X^T; B = b A + (c A) A; X <- a X + B X, (a, b, c) = (3.4445, -4.7750, 2.0315)
//   5. transposed back, then scaled: sqrt(max(1, rows / cols)) (Keller) or 0.2 sqrt(max(rows, cols)) (Moonlight,
//      so that Muon shares AdamW's learning rate)
//   6. W <- W (1 - lr wd) - lr update
// Precision: the PyTorch reference keeps X, A and B in BF16 (each product accumulates in FP32 and rounds to BF16);
// this twin does the same, with every product and sum in FP32 in index order. On the golden cases (up to 48 x 24) it
// gives PyTorch's CPU result bit for bit; the test allows BF16 rounding, since another summation order may differ.
#pragma once
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/base/common.h"

#define MUON_NS_A 3.4445f
#define MUON_NS_B (-4.7750f)
#define MUON_NS_C 2.0315f

enum { MUON_SCALE_KELLER = 0, MUON_SCALE_MOONLIGHT = 1 };

typedef struct {
    float lr, beta, weight_decay;
    int nesterov;
    int scale_rule;      // MUON_SCALE_KELLER or MUON_SCALE_MOONLIGHT
    int ns_steps;        // 5
} MuonParams;

// FP32 -> the nearest BF16 value (ties to even), as an FP32.
static inline float muon_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7F800000u) == 0x7F800000u) return x;   // inf, NaN
    u += 0x7FFFu + ((u >> 16) & 1u);
    u &= 0xFFFF0000u;
    float y;
    memcpy(&y, &u, 4);
    return y;
}

// C (n x n) = X X^T for X (n x k), FP32 sums in index order, each result rounded to BF16.
static inline void muon_gram(float* c, const float* x, int n, int k) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            float s = 0.0f;
            for (int t = 0; t < k; t++) s += x[(size_t)i * k + t] * x[(size_t)j * k + t];
            c[(size_t)i * n + j] = muon_bf16(s);
        }
}

// X <- bf16(X) / (||X||_F + 1e-7), the norm rounded to BF16 (the reference's), in place over nk elements.
static inline void muon_normalize(float* x, size_t nk) {
    float ss = 0.0f;
    for (size_t i = 0; i < nk; i++) { x[i] = muon_bf16(x[i]); ss += x[i] * x[i]; }
    const float norm = muon_bf16(sqrtf(ss));
    for (size_t i = 0; i < nk; i++) x[i] = muon_bf16(x[i] / (norm + 1e-7f));
}

// Newton-Schulz on x (n x k, n <= k, row-major, in place): normalise by the Frobenius norm, then `steps` quintic
// steps, X kept in BF16 between them. scratch: 3 n n + n k floats.
static inline void muon_newton_schulz(float* x, int n, int k, int steps, float* scratch) {
    const size_t nk = (size_t)n * k;
    float* a = scratch;
    float* aa = a + (size_t)n * n;
    float* b = aa + (size_t)n * n;
    float* bx = b + (size_t)n * n;
    muon_normalize(x, nk);
    for (int s = 0; s < steps; s++) {
        muon_gram(a, x, n, k);                                      // A = X X^T
        for (size_t i = 0; i < (size_t)n * n; i++) b[i] = muon_bf16(MUON_NS_C * a[i]);   // c A (the reference's
        for (int i = 0; i < n; i++)                                 // "c * A @ A" is (c A) A), then (c A) A
            for (int j = 0; j < n; j++) {
                float t = 0.0f;
                for (int q = 0; q < n; q++) t += b[(size_t)i * n + q] * a[(size_t)q * n + j];
                aa[(size_t)i * n + j] = muon_bf16(t);
            }
        for (size_t i = 0; i < (size_t)n * n; i++) b[i] = muon_bf16(muon_bf16(MUON_NS_B * a[i]) + aa[i]);
        for (int i = 0; i < n; i++)                                 // B X
            for (int j = 0; j < k; j++) {
                float t = 0.0f;
                for (int q = 0; q < n; q++) t += b[(size_t)i * n + q] * x[(size_t)q * k + j];
                bx[(size_t)i * k + j] = muon_bf16(t);
            }
        for (size_t i = 0; i < nk; i++) x[i] = muon_bf16(muon_bf16(MUON_NS_A * x[i]) + bx[i]);
    }
}

// The scale step 5 applies.
static inline float muon_scale(int rows, int cols, int rule) {
    if (rule == MUON_SCALE_MOONLIGHT) return 0.2f * sqrtf((float)(rows > cols ? rows : cols));
    return sqrtf(rows > cols ? (float)rows / (float)cols : 1.0f);
}

// Steps 1 and 2: the momentum m updated in place, and X (n x k, n <= k: transposed when rows > cols) into x, for the
// update of a rows x cols matrix with gradient g.
static inline void muon_momentum_ref(float* x, const float* g, float* m, int rows, int cols, const MuonParams* p) {
    const size_t nk = (size_t)rows * cols;
    const int tr = rows > cols;
    for (size_t i = 0; i < nk; i++) {
        m[i] = m[i] + (1.0f - p->beta) * (g[i] - m[i]);              // the reference's lerp: M.lerp_(G, 1 - beta)
        const float u = p->nesterov ? g[i] + p->beta * (m[i] - g[i]) : m[i];   // G.lerp_(M, beta)
        const int r = (int)(i / cols), c = (int)(i % cols);
        x[tr ? (size_t)c * rows + r : i] = u;
    }
}

// Steps 5 and 6: w (rows x cols) from Newton-Schulz's x (as muon_momentum_ref laid it out); the orthogonalised update
// (before the learning rate) is left in update if it is not NULL.
static inline void muon_apply_ref(float* w, const float* x, int rows, int cols, const MuonParams* p, float* update) {
    const size_t nk = (size_t)rows * cols;
    const int tr = rows > cols;
    const float scale = muon_scale(rows, cols, p->scale_rule);
    for (size_t i = 0; i < nk; i++) {
        const int r = (int)(i / cols), c = (int)(i % cols);
        const float up = x[tr ? (size_t)c * rows + r : i] * scale;
        if (update) update[i] = up;
        w[i] = w[i] * (1.0f - p->lr * p->weight_decay) - p->lr * up;
    }
}

// One Muon update of w (rows x cols) from gradient g, momentum m updated in place; the orthogonalised update (before
// the learning rate) is left in update if it is not NULL. Allocates its scratch.
static inline void muon_update_ref(float* w, const float* g, float* m, int rows, int cols, const MuonParams* p,
                                   float* update) {
    const size_t nk = (size_t)rows * cols;
    const int tr = rows > cols, n = tr ? cols : rows, k = tr ? rows : cols;
    float* x = (float*)xmalloc(nk * sizeof(float));
    float* scratch = (float*)xmalloc(((size_t)3 * n * n + nk) * sizeof(float));
    muon_momentum_ref(x, g, m, rows, cols, p);
    muon_newton_schulz(x, n, k, p->ns_steps, scratch);
    muon_apply_ref(w, x, rows, cols, p, update);
    free(x);
    free(scratch);
}
