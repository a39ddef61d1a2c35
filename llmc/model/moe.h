// moe.h: the mixture-of-experts MLP's routing arithmetic, the plain-C reference twin that the GPU kernels (issue
// #51) are tested against: the reference is the spec (docs/MOE.md). Router scores and the top-k choice with its tie
// rule, both families' weights (softmax top-k renormalized, Mixtral; sigmoid with a selection-only bias,
// DeepSeek-V3), the dropless permutation by expert (padded per expert to a token multiple), gather and combine and
// their backward, the load-balancing and z losses with their gradients, the bias update of auxiliary-loss-free
// balancing, and which layers are MoE layers (--moe-every).
// defines: MoeScore, MOE_SCORE_NAMES, moe_ranks_before(), moe_exp(), moe_sigmoid(), moe_select_key(),
//          moe_select_topk(), moe_bf16_rne(), moe_check_shape(), moe_route_softmax_topk(), moe_route_sigmoid_bias(),
//          moe_route(), moe_route_backward(), moe_prob_stats(), moe_prob(), moe_probs(), moe_rows_bound(), MoePerm,
//          moe_permute(), moe_gather(), MoeRouted, moe_combine(), moe_combine_backward(), moe_aux_loss(), moe_z_loss(),
//          moe_bias_update(), moe_layer_is_moe(), moe_num_layers(), moe_layer_index()
//
// Arithmetic (what a kernel must do to give the same bits):
// - exact (integers, comparisons, data movement): the choice from given keys, counts, offsets, the permutation,
//   gather, the bias update; the combine and the route backward from given inputs (FP32 with fmaf, in slot order);
// - exact in practice: every exponential is moe_exp / moe_sigmoid, computed in double and rounded once to float
//   (CUDA's expf is not correctly rounded, glibc's differs from it; two double results differ by an ulp of double
//   at most, and round to different floats only across a float rounding boundary). So the softmax family's choice
//   is exact (it compares logits), and the weights and the sigmoid family's choice agree but for that;
// - to a tolerance: the losses and their gradients, and the routing weights' gradient dweights (sums over tokens or
//   channels; the reference sums in double in index order, a kernel in its own deterministic order).
// Every buffer is the caller's; nothing here allocates. Sizes are checked with fail() (a message naming the call).
#pragma once
#include <math.h>
#include <stdint.h>
#include <limits.h>
#include <string.h>
#include "llmc/base/common.h"

// How the router turns logits into scores: the softmax over all E experts (Mixtral), or a sigmoid per expert with
// a per-expert bias added for the choice only (DeepSeek-V3's auxiliary-loss-free balancing).
typedef enum { MOE_SCORE_SOFTMAX = 0, MOE_SCORE_SIGMOID = 1, MOE_SCORE_COUNT } MoeScore;
static const char* const MOE_SCORE_NAMES[MOE_SCORE_COUNT] = {"softmax", "sigmoid"};

// --- element arithmetic, shared with the kernels -------------------------------------------------------------------

// The order of the top-k choice: (a, ia) ranks before (b, ib) when a > b, or a == b and ia < ib (equal scores: the
// lower expert index wins; -0 == +0). NaN ranks after every number (and NaNs among themselves by index), so a token
// with NaN logits still gets k distinct valid experts; its weights are NaN and the loss says so.
HD int moe_ranks_before(float a, int ia, float b, int ib) {
    const int a_nan = a != a, b_nan = b != b;
    if (a_nan || b_nan) return a_nan && b_nan ? ia < ib : b_nan;
    if (a != b) return a > b;
    return ia < ib;
}

// exp and the logistic function, in double, rounded once to float (see the header: the same bits on host and device
// in practice, unlike expf).
HD float moe_exp(float x) { return (float)exp((double)x); }
HD float moe_sigmoid(float x) { return (float)(1.0 / (1.0 + exp(-(double)x))); }

// The key expert i is chosen by: its logit (softmax: monotone in the probability, and exact), or its sigmoid score
// plus its bias (one FP32 add; bias NULL: the score alone).
HD float moe_select_key(MoeScore kind, float logit, const float* bias, int i) {
    if (kind == MOE_SCORE_SOFTMAX) return logit;
    float s = moe_sigmoid(logit);
    return bias ? s + bias[i] : s;
}

// One token's choice: ids[j] is the expert of rank j (slot j) under moe_ranks_before, j < k. k passes over the E
// keys, each taking the best expert not yet chosen. ids holds k entries.
HD void moe_select_topk(MoeScore kind, const float* logits, const float* bias, int E, int k, int* ids) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        float best_key = 0.0f;
        for (int i = 0; i < E; i++) {
            int taken = 0;
            for (int m = 0; m < j; m++) taken |= ids[m] == i;
            if (taken) continue;
            float key = moe_select_key(kind, logits[i], bias, i);
            if (best < 0 || moe_ranks_before(key, i, best_key, best)) { best = i; best_key = key; }
        }
        ids[j] = best;
    }
}

// FP32 -> the nearest BF16 (ties to even), as a float; NaN stays a quiet NaN. The one rounding of the combine's output.
HD float moe_bf16_rne(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) u = (u | 0x00400000u) & 0xFFFF0000u;
    else u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    float y;
    memcpy(&y, &u, 4);
    return y;
}

// --- shapes --------------------------------------------------------------------------------------------------------

// N tokens, E experts, k of them per token, each expert's rows padded to `multiple`: every count fits an int.
static inline void moe_check_shape(const char* who, int64_t N, int E, int k, int multiple) {
    fail_if(N < 1, "%s: %lld tokens (need at least 1)", who, (long long)N);
    fail_if(E < 1, "%s: %d experts (need at least 1: --moe-experts)", who, E);
    fail_if(k < 1 || k > E, "%s: top-k %d must be in [1, %d], the number of experts (--moe-top-k)", who, k, E);
    fail_if(multiple < 1, "%s: token multiple %d must be at least 1", who, multiple);
    fail_if(N * k + (int64_t)E * (multiple - 1) > INT_MAX,
            "%s: %lld tokens x top-k %d (+ padding) exceed the int range of the permutation; use a smaller batch",
            who, (long long)N, k);
}

// --- routing (forward) ---------------------------------------------------------------------------------------------

// Softmax top-k, renormalized over the chosen k (Mixtral): logits [N][E] (FP32, the router GEMM's output) ->
// ids [N][k] (slot j = rank j) and weights [N][k]. Per token: m = the largest logit (fmaxf over index order, NaN
// skipped); e_i = moe_exp(l_i - m); S = e of slot 0 + e of slot 1 + ... (FP32, slot order; S >= 1, slot 0 has
// e = 1 unless there is a NaN); w_j = e_{ids[j]} / S (one FP32 division). The full softmax's denominator cancels:
// this is Mixtral's softmax, top-k, divide by the top-k's sum, without its extra roundings.
static inline void moe_route_softmax_topk(const float* logits, int N, int E, int k, int* ids, float* weights) {
    moe_check_shape("moe_route_softmax_topk", N, E, k, 1);
    fail_if(!logits || !ids || !weights, "moe_route_softmax_topk: NULL buffer");
    for (int t = 0; t < N; t++) {
        const float* l = logits + (size_t)t * E;
        int* id = ids + (size_t)t * k;
        float* w = weights + (size_t)t * k;
        moe_select_topk(MOE_SCORE_SOFTMAX, l, NULL, E, k, id);
        float m = -INFINITY;
        for (int i = 0; i < E; i++) m = fmaxf(m, l[i]);
        float S = 0.0f;
        for (int j = 0; j < k; j++) S += moe_exp(l[id[j]] - m);
        for (int j = 0; j < k; j++) w[j] = moe_exp(l[id[j]] - m) / S;
    }
}

// Sigmoid scores with a selection bias (DeepSeek-V3): s_i = moe_sigmoid(l_i); the choice by s_i + bias_i
// (moe_select_key; bias [E] or NULL); the weights are the chosen scores without the bias, renormalized:
// S = s of slot 0 + ... (FP32, slot order), w_j = s_{ids[j]} / S. (DeepSeek-V3 then multiplies by its
// route scale, 2.5; here 1.)
static inline void moe_route_sigmoid_bias(const float* logits, const float* bias, int N, int E, int k, int* ids,
                                          float* weights) {
    moe_check_shape("moe_route_sigmoid_bias", N, E, k, 1);
    fail_if(!logits || !ids || !weights, "moe_route_sigmoid_bias: NULL buffer");
    for (int t = 0; t < N; t++) {
        const float* l = logits + (size_t)t * E;
        int* id = ids + (size_t)t * k;
        float* w = weights + (size_t)t * k;
        moe_select_topk(MOE_SCORE_SIGMOID, l, bias, E, k, id);
        float S = 0.0f;
        for (int j = 0; j < k; j++) S += moe_sigmoid(l[id[j]]);
        for (int j = 0; j < k; j++) w[j] = moe_sigmoid(l[id[j]]) / S;
    }
}

// Either family (bias ignored by softmax).
static inline void moe_route(MoeScore kind, const float* logits, const float* bias, int N, int E, int k, int* ids,
                             float* weights) {
    fail_if((int)kind < 0 || kind >= MOE_SCORE_COUNT, "moe_route: unknown scoring %d", (int)kind);
    if (kind == MOE_SCORE_SOFTMAX) moe_route_softmax_topk(logits, N, E, k, ids, weights);
    else moe_route_sigmoid_bias(logits, bias, N, E, k, ids, weights);
}

// --- routing (backward) --------------------------------------------------------------------------------------------

// The routing weights' gradient dweights [N][k] (from moe_combine_backward) -> the logits' gradient, ADDED into
// dlogits [N][E]; the choice itself has no gradient, and the unchosen logits get none (the weights do not depend on
// them). With c = sum over slots of w_j dw_j (c = fmaf(w_j, dw_j, c) from 0, slot order):
//   softmax: dl_{ids[j]} += w_j * (dw_j - c)                    (w = the softmax over the chosen logits)
//   sigmoid: dl_{ids[j]} += (w_j * (1 - s_j)) * (dw_j - c)      (s_j = moe_sigmoid(l_{ids[j]}); w_j = s_j / S)
// each a product of FP32 roundings in the order written, then one FP32 add into dlogits.
static inline void moe_route_backward(MoeScore kind, const float* logits, const int* ids, const float* weights,
                                      const float* dweights, int N, int E, int k, float* dlogits) {
    moe_check_shape("moe_route_backward", N, E, k, 1);
    fail_if((int)kind < 0 || kind >= MOE_SCORE_COUNT, "moe_route_backward: unknown scoring %d", (int)kind);
    fail_if(!logits || !ids || !weights || !dweights || !dlogits, "moe_route_backward: NULL buffer");
    for (int t = 0; t < N; t++) {
        const int* id = ids + (size_t)t * k;
        const float* w = weights + (size_t)t * k;
        const float* dw = dweights + (size_t)t * k;
        float c = 0.0f;
        for (int j = 0; j < k; j++) c = fmaf(w[j], dw[j], c);
        for (int j = 0; j < k; j++) {
            fail_if(id[j] < 0 || id[j] >= E, "moe_route_backward: token %d slot %d has expert %d (of %d)", t, j,
                    id[j], E);
            float g = w[j];
            if (kind == MOE_SCORE_SIGMOID) g = g * (1.0f - moe_sigmoid(logits[(size_t)t * E + id[j]]));
            dlogits[(size_t)t * E + id[j]] += g * (dw[j] - c);
        }
    }
}

// --- the probabilities the load-balancing loss reads ---------------------------------------------------------------

// Per token, over all E experts before any choice: softmax: p_i = moe_exp(l_i - m) / Z, m the largest logit,
// Z = sum of moe_exp(l_i - m) (FP32, index order); sigmoid: p_i = s_i / Z, Z = sum of s_i (FP32, index order;
// DeepSeek-V3's normalized affinities, without the bias). moe_prob_stats gives m (softmax; 0 for sigmoid) and Z.
HD void moe_prob_stats(MoeScore kind, const float* l, int E, float* m_out, float* Z_out) {
    float m = 0.0f, Z = 0.0f;
    if (kind == MOE_SCORE_SOFTMAX) {
        m = -INFINITY;
        for (int i = 0; i < E; i++) m = fmaxf(m, l[i]);
        for (int i = 0; i < E; i++) Z += moe_exp(l[i] - m);
    } else {
        for (int i = 0; i < E; i++) Z += moe_sigmoid(l[i]);
    }
    *m_out = m;
    *Z_out = Z;
}
HD float moe_prob(MoeScore kind, float li, float m, float Z) {
    return (kind == MOE_SCORE_SOFTMAX ? moe_exp(li - m) : moe_sigmoid(li)) / Z;
}
static inline void moe_probs(MoeScore kind, const float* logits, int N, int E, float* probs) {
    moe_check_shape("moe_probs", N, E, 1, 1);
    fail_if((int)kind < 0 || kind >= MOE_SCORE_COUNT, "moe_probs: unknown scoring %d", (int)kind);
    fail_if(!logits || !probs, "moe_probs: NULL buffer");
    for (int t = 0; t < N; t++) {
        const float* l = logits + (size_t)t * E;
        float m, Z;
        moe_prob_stats(kind, l, E, &m, &Z);
        for (int i = 0; i < E; i++) probs[(size_t)t * E + i] = moe_prob(kind, l[i], m, Z);
    }
}

// --- permutation (dropless) ----------------------------------------------------------------------------------------

// Rows the permuted buffer may need before the counts are known: N k routed rows + at most multiple - 1 pad rows per
// expert.
static inline int64_t moe_rows_bound(int64_t N, int E, int k, int multiple) {
    return N * k + (int64_t)E * (multiple - 1);
}

// The permutation's buffers, which moe_permute fills: counts [E], offsets [E+1], row_of [N*k], slot_of_row [rows_cap].
typedef struct {
    int* counts;
    int* offsets;
    int* row_of;
    int* slot_of_row;
} MoePerm;

// Token slots -> rows of the permuted buffer, grouped by expert. ids [N][k] (each token's k experts distinct, in
// [0, E)). Writes counts (assignments per expert), offsets (offsets[0] = 0, offsets[e+1] = offsets[e] +
// counts[e] rounded up to `multiple`: expert e's rows are [offsets[e], offsets[e] + counts[e]), then its zero pad
// rows up to offsets[e+1]), row_of (token slot t*k + j -> its row) and slot_of_row (row -> t*k + j, or -1 for a pad
// row, and for rows past offsets[E]). The order within an expert is by token, then slot (stable).
// Returns the rows used, offsets[E] (<= rows_cap, else fail). counts is also the fill's cursor: no scratch.
static inline int moe_permute(const int* ids, int N, int E, int k, int multiple, MoePerm perm, int rows_cap) {
    int *counts = perm.counts, *offsets = perm.offsets, *row_of = perm.row_of, *slot_of_row = perm.slot_of_row;
    moe_check_shape("moe_permute", N, E, k, multiple);
    fail_if(!ids || !counts || !offsets || !row_of || !slot_of_row, "moe_permute: NULL buffer");
    for (int e = 0; e < E; e++) counts[e] = 0;
    for (int t = 0; t < N; t++) {
        for (int j = 0; j < k; j++) {
            int e = ids[(size_t)t * k + j];
            fail_if(e < 0 || e >= E, "moe_permute: token %d slot %d routes to expert %d (of %d)", t, j, e, E);
            for (int m = 0; m < j; m++)
                fail_if(ids[(size_t)t * k + m] == e, "moe_permute: token %d routes to expert %d twice (slots %d, %d)",
                        t, e, m, j);
            counts[e]++;
        }
    }
    offsets[0] = 0;
    for (int e = 0; e < E; e++) offsets[e + 1] = offsets[e] + (int)ceil_div(counts[e], multiple) * multiple;
    const int rows = offsets[E];
    fail_if(rows > rows_cap, "moe_permute: %d rows (%d token slots, padded per expert to %d) exceed the buffer's %d "
            "(size it with moe_rows_bound)", rows, N * k, multiple, rows_cap);
    for (int r = 0; r < rows_cap; r++) slot_of_row[r] = -1;
    for (int e = 0; e < E; e++) counts[e] = 0;
    for (int t = 0; t < N; t++) {
        for (int j = 0; j < k; j++) {
            int s = t * k + j, e = ids[s];
            int r = offsets[e] + counts[e]++;
            row_of[s] = r;
            slot_of_row[r] = s;
        }
    }
    return rows;
}

// x [N][C] -> xp [rows][C]: row r is token slot_of_row[r] / k's row, pad rows zero (exact).
static inline void moe_gather(const float* x, int N, int C, int k, const int* slot_of_row, int rows, float* xp) {
    fail_if(N < 1 || C < 1 || k < 1 || rows < 0, "moe_gather: N %d, C %d, k %d, rows %d", N, C, k, rows);
    fail_if(!x || !slot_of_row || !xp, "moe_gather: NULL buffer");
    for (int r = 0; r < rows; r++) {
        int s = slot_of_row[r];
        fail_if(s < -1 || s >= N * k, "moe_gather: row %d names token slot %d (of %d)", r, s, N * k);
        if (s < 0) memset(xp + (size_t)r * C, 0, (size_t)C * sizeof(float));
        else memcpy(xp + (size_t)r * C, x + (size_t)(s / k) * C, (size_t)C * sizeof(float));
    }
}

// --- combine -------------------------------------------------------------------------------------------------------

// What the combine reads of the experts' side: their outputs yp [rows][C] (BF16 values), each token slot's row
// row_of [N*k] (moe_permute's), and the routing weights [N][k] (NULL: 1).
typedef struct {
    const float* yp;
    const int* row_of;
    const float* weights;
    int rows;
} MoeRouted;

// Un-permute and weight: in.yp -> out [N][C] in FP32, per element
//   acc = base[t][c] (the shared experts' output; 0 when base is NULL);
//   for j = 0 .. k-1: acc = fmaf(w[t][j], yp[row_of[t*k + j]][c], acc)      (weights NULL: w = 1, acc + y)
// and the kernel rounds acc once to BF16 (moe_bf16_rne). With weights NULL it is also the gather's backward
// (dx = the sum of a token's k rows of dxp).
static inline void moe_combine(MoeRouted in, const float* base, int N, int k, int C, float* out) {
    const float *yp = in.yp, *weights = in.weights;
    const int* row_of = in.row_of;
    const int rows = in.rows;
    fail_if(N < 1 || C < 1 || k < 1 || rows < 0, "moe_combine: N %d, C %d, k %d, rows %d", N, C, k, rows);
    fail_if(!yp || !row_of || !out, "moe_combine: NULL buffer");
    for (int t = 0; t < N; t++) {
        for (int j = 0; j < k; j++)
            fail_if(row_of[(size_t)t * k + j] < 0 || row_of[(size_t)t * k + j] >= rows,
                    "moe_combine: token %d slot %d maps to row %d (of %d)", t, j, row_of[(size_t)t * k + j], rows);
        for (int c = 0; c < C; c++) {
            float acc = base ? base[(size_t)t * C + c] : 0.0f;
            for (int j = 0; j < k; j++) {
                float w = weights ? weights[(size_t)t * k + j] : 1.0f;
                acc = fmaf(w, yp[(size_t)row_of[(size_t)t * k + j] * C + c], acc);
            }
            out[(size_t)t * C + c] = acc;
        }
    }
}

// The combine's backward, from dout [N][C] (BF16 values) and what the combine read (in.weights not NULL): dyp
// [rows][C] gets w[t][j] * dout[t][c] in the row of (t, j) (one FP32 product; the kernel rounds it once to BF16) and
// zero in every other row (pads); dweights [N][k] (NULL: not wanted) gets the dot product of dout[t] and that row of
// yp, summed in double in channel order and rounded to float (a kernel's order differs: a tolerance). The base's
// gradient is dout itself.
static inline void moe_combine_backward(const float* dout, MoeRouted in, int N, int k, int C, float* dyp,
                                        float* dweights) {
    const float *yp = in.yp, *weights = in.weights;
    const int* row_of = in.row_of;
    const int rows = in.rows;
    fail_if(N < 1 || C < 1 || k < 1 || rows < 0, "moe_combine_backward: N %d, C %d, k %d, rows %d", N, C, k, rows);
    fail_if(!dout || !yp || !row_of || !weights || !dyp, "moe_combine_backward: NULL buffer");
    memset(dyp, 0, (size_t)rows * C * sizeof(float));
    for (int t = 0; t < N; t++) {
        for (int j = 0; j < k; j++) {
            int r = row_of[(size_t)t * k + j];
            fail_if(r < 0 || r >= rows, "moe_combine_backward: token %d slot %d maps to row %d (of %d)", t, j, r, rows);
            float w = weights[(size_t)t * k + j];
            double dot = 0.0;
            for (int c = 0; c < C; c++) {
                dyp[(size_t)r * C + c] = w * dout[(size_t)t * C + c];
                dot += (double)dout[(size_t)t * C + c] * yp[(size_t)r * C + c];
            }
            if (dweights) dweights[(size_t)t * k + j] = (float)dot;
        }
    }
}

// --- losses --------------------------------------------------------------------------------------------------------

// The load-balancing loss of one MoE layer (Switch / Mixtral form, normalized to alpha at perfect balance):
//   L = alpha * E * sum_e f_e * P_e,  f_e = counts[e] / (N k) (no gradient),  P_e = (1/N) sum_t p_{t,e}
// with p the probabilities of moe_probs (softmax: the full softmax before the choice; sigmoid: s / sum of s).
// Computed as alpha * E / N * sum_t q_t, q_t = sum_e f_e p_{t,e}, in double in token then expert order, returned
// as float. counts [E] from moe_permute (unpadded; they must sum to N k). With dlogits non-NULL, ADDS
//   softmax: dl_{t,i} += alpha E / N * p_{t,i} * (f_i - q_t)
//   sigmoid: dl_{t,i} += alpha E / N * s_i (1 - s_i) / Z_t * (f_i - q_t)       (Z_t = sum of s)
// (double, rounded to float, one FP32 add). Transformers' Mixtral loss is k times this (its f sums to k).
static inline float moe_aux_loss(MoeScore kind, const float* logits, const int* counts, int N, int E, int k,
                                 float alpha, float* dlogits) {
    moe_check_shape("moe_aux_loss", N, E, k, 1);
    fail_if((int)kind < 0 || kind >= MOE_SCORE_COUNT, "moe_aux_loss: unknown scoring %d", (int)kind);
    fail_if(!logits || !counts, "moe_aux_loss: NULL buffer");
    int64_t total = 0;
    for (int e = 0; e < E; e++) {
        fail_if(counts[e] < 0, "moe_aux_loss: expert %d has count %d", e, counts[e]);
        total += counts[e];
    }
    fail_if(total != (int64_t)N * k, "moe_aux_loss: counts sum to %lld, not N k = %lld (pass moe_permute's counts)",
            (long long)total, (long long)N * k);
    const double nk = (double)N * k, scale = (double)alpha * E / N;
    double sum = 0.0;
    for (int t = 0; t < N; t++) {
        const float* l = logits + (size_t)t * E;
        float m, Z;
        moe_prob_stats(kind, l, E, &m, &Z);
        double q = 0.0;
        for (int e = 0; e < E; e++) q += counts[e] / nk * moe_prob(kind, l[e], m, Z);
        sum += q;
        if (!dlogits) continue;
        for (int i = 0; i < E; i++) {
            double d;
            if (kind == MOE_SCORE_SOFTMAX) d = moe_prob(kind, l[i], m, Z);
            else { double s = moe_sigmoid(l[i]); d = s * (1.0 - s) / Z; }
            dlogits[(size_t)t * E + i] += (float)(scale * d * (counts[i] / nk - q));
        }
    }
    return (float)(scale * sum);
}

// The router z-loss (ST-MoE): L = beta * mean over tokens of lse_t^2, lse_t = m + log Z (m, Z of the softmax in
// moe_prob_stats; log in double), for either family (it bounds the logits). Summed in double in token order,
// returned as float. With dlogits non-NULL, ADDS dl_{t,i} += 2 beta / N * lse_t * p_{t,i} (p the softmax).
static inline float moe_z_loss(const float* logits, int N, int E, float beta, float* dlogits) {
    moe_check_shape("moe_z_loss", N, E, 1, 1);
    fail_if(!logits, "moe_z_loss: NULL buffer");
    double sum = 0.0;
    for (int t = 0; t < N; t++) {
        const float* l = logits + (size_t)t * E;
        float m, Z;
        moe_prob_stats(MOE_SCORE_SOFTMAX, l, E, &m, &Z);
        double lse = (double)m + log((double)Z);
        sum += lse * lse;
        if (!dlogits) continue;
        for (int i = 0; i < E; i++)
            dlogits[(size_t)t * E + i] += (float)(2.0 * beta / N * lse * moe_prob(MOE_SCORE_SOFTMAX, l[i], m, Z));
    }
    return (float)(beta * sum / N);
}

// --- auxiliary-loss-free balancing (DeepSeek-V3) -------------------------------------------------------------------

// After each optimizer step: load [E] = the step's assignments per expert (summed over micro-steps and ranks, so
// every rank keeps the same bias); an expert above the mean load N k / E gets bias - gamma, one below it
// bias + gamma, one exactly at it keeps its bias (sign(mean - load), compared in integers: E * load vs the total).
// One FP32 add: exact. Not a gradient: the bias is no parameter of AdamW.
static inline void moe_bias_update(const int64_t* load, int E, float gamma, float* bias) {
    fail_if(E < 1 || !load || !bias, "moe_bias_update: E %d or a NULL buffer", E);
    fail_if(!(gamma >= 0.0f) || isinf(gamma), "moe_bias_update: gamma %g must be finite and >= 0 (--moe-bias-rate)",
            (double)gamma);
    int64_t total = 0;
    for (int e = 0; e < E; e++) {
        fail_if(load[e] < 0 || load[e] > INT64_MAX / 1024, "moe_bias_update: expert %d has load %lld", e,
                (long long)load[e]);
        total += load[e];
    }
    for (int e = 0; e < E; e++) {
        int64_t el = (int64_t)E * load[e];
        if (el > total) bias[e] = bias[e] - gamma;
        else if (el < total) bias[e] = bias[e] + gamma;
    }
}

// --- interleaving (--moe-every N) ----------------------------------------------------------------------------------

// Layer l (0-based) has an MoE MLP when (l + 1) % every == 0 (transformers' Qwen2-MoE decoder_sparse_step): every 1
// makes every layer MoE, every 2 layers 1, 3, 5, ...; every 0 none. moe_layer_index numbers the MoE layers 0, 1, ...
// (the index of their stacked tensors), -1 for a dense layer.
HD int moe_layer_is_moe(int l, int every) { return every > 0 && l >= 0 && (l + 1) % every == 0; }
HD int moe_num_layers(int L, int every) { return every > 0 && L > 0 ? L / every : 0; }
HD int moe_layer_index(int l, int every) { return moe_layer_is_moe(l, every) ? (l + 1) / every - 1 : -1; }
