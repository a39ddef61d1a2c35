// lora_svd.h: the LoRA-SVD correction's arithmetic (--lora-svd-rank R, docs/FULLSTACK_FP4.md section 4), plain C: the
// small dense steps (the GPU runs the same formulas spread over one block), and the CPU twin of the whole refresh and of
// the two side GEMMs (dev/test/test_lora_svd.c; the GPU path, llmc/fp4/lora_svd.cuh, is checked against it by
// dev/test/test_lora_svd_gpu.cu).
// defines: LORA_OVERSAMPLE, LORA_POWER_STEPS, LORA_MAX_WIDTH, lora_width(), lora_key(), lora_sketch_sign(),
//          lora_rank_problem(), lora_spec_problem(), lora_inverse_column(), lora_orth_small(), lora_eig_sort(),
//          lora_eig_small(), lora_factors_small(), lora_final_small(), LoraCpuStats,
//          lora_factorize_cpu(), lora_forward_cpu(), lora_dgrad_cpu(), lora_refresh_flops()
//
// What is built (construction (A) of the spec): E = W - Q(W), the quantization residual of a linear's weight (OC x K)
// against the forward's own copy Q(W); E_R, a rank-R approximation of E by randomized subspace iteration; the forward
// then computes Y = X Q(W)^T + (X V_R)(U_R S_R)^T and the data gradient dX = dY Q(W) + (dY U_R S_R) V_R^T, both
// through two thin BF16 GEMMs with FP32 accumulation. The factors (US = U_R S_R, OC x R, and Vt = V_R^T, R x K) are
// BF16, not trained; the weight gradient is unchanged.
//
// The refresh, for E (m x n = OC x K), w = R + p columns (p = LORA_OVERSAMPLE), q = LORA_POWER_STEPS:
//   Zt (w x n): the sketch; its first R rows are the previous Vt (warm start) when there is one, the rest (all of it
//        on the first refresh) random signs +-1 from the counter-based generator (rng_bits32 of lora_key), so the GPU
//        and the CPU twin draw the same sketch bit for bit;
//   Yt = orth(Zt E^T); then q times Zt = orth(Yt E), Yt = orth(Zt E^T): 2q + 1 products with E;
//   B = Yt E (w x n, one more product): E ~ Yt^T B, the projection of E onto the rows of Yt;
//   B B^T = W diag(lambda) W^T (Jacobi, w x w): the top R of B's SVD give Vt = diag(1/sigma) W_R^T B and
//   US = Yt^T W_R diag(sigma), so that US Vt = Yt^T W_R W_R^T B: the best rank R within the subspace.
// orth(Y) makes Y's rows orthonormal by Cholesky-QR done twice (CholeskyQR2: the Gram matrix Y Y^T, its Cholesky
// factor L, Y <- L^{-1} Y); a pivot below LORA_DROP of the largest diagonal drops that row (set to 0), so a sketch of
// rank below w (E of low rank, a zero warm-start row) loses only directions that carry no energy. The small steps
// (Cholesky, its inverse, Jacobi, w <= 64) run in double: serially here, the same formulas spread over one block's
// threads on the GPU (llmc/fp4/lora_svd.cuh); the products are FP32 (cuBLASLt on the GPU).
// Cost per refresh of one linear: 2 w m n (2q + 2) flops for the products with E, 4 w^2 (m + n) per orth, against
// 6 N m n per training step on N tokens.
//
// The captured fraction 1 - |E - E_R|^2 / |E|^2 is computed as sum_{r<R} lambda_r / |E|^2 (exact for an
// orthonormal Yt: |E - E_R|^2 = |E|^2 - |E_R|^2 when E_R is E projected onto a subspace); the CPU test checks it
// against the explicit residual of the BF16 factors.
#pragma once
#include <math.h>
#include <string.h>
#include "llmc/base/common.h"
#include "llmc/base/rng.h"
#include "llmc/fp4/formats.h"
#include "llmc/fp4/stochastic_round.h"   // bf16_bits_rne

#define LORA_OVERSAMPLE 8        // p: extra sketch columns
#define LORA_POWER_STEPS 2       // q: power (subspace) iterations
#define LORA_MAX_WIDTH 64        // R + p at most (the small steps' arrays)
#define LORA_DROP 1e-6           // a Cholesky pivot (or eigenvalue) below this fraction of the largest is dropped
#define LORA_JACOBI_SWEEPS 30    // at most; stops once the off-diagonal is below 1e-15 of the diagonal (double)
#define LORA_KEY_BASE 0x30000000u   // sketch keys: rng_key(seed, step, LORA_KEY_BASE | layer << 4 | linear)

HD int lora_width(int R) { return R + LORA_OVERSAMPLE; }
HD uint64_t lora_key(uint64_t seed, int step, int layer, int kind) {
    return rng_key(seed, (uint32_t)step, LORA_KEY_BASE | ((uint32_t)layer << 4) | (uint32_t)kind);
}
// Element (i, j) of the w x n sketch: +1 or -1.
HD float lora_sketch_sign(uint64_t key, int64_t i, int64_t n, int64_t j) {
    return (rng_bits32(key, (uint64_t)(i * n + j)) >> 31) ? -1.0f : 1.0f;
}

// Why a rank cannot run on a linear of OC x K (NULL: it can). The side GEMMs need multiples of 8 (cuBLASLt).
static inline const char* lora_rank_problem(int R, int OC, int K) {
    if (R <= 0 || R % 8) return "the rank must be a positive multiple of 8 (the side GEMMs' widths)";
    if (lora_width(R) > LORA_MAX_WIDTH) return "the rank must be at most 56 (rank + 8 oversampling columns <= 64)";
    if (lora_width(R) > OC || lora_width(R) > K) return "rank + 8 must not exceed a linear's input or output width";
    return NULL;
}

// Why the correction cannot follow a forward weight copy of this spec (NULL: it can; a BF16 spec has nothing to
// correct and is the caller's to skip).
static inline const char* lora_spec_problem(const QuantSpec* s) {
    if (s->rounding == QROUND_SR)
        return "fprop.w rounds stochastically, so W - Q(W) would be fresh noise at every step that no factors refreshed "
               "from an earlier copy can follow; give fprop.w a round-to-nearest spec (e.g. --fprop-w nvfp4-2d)";
    if (s->rounding != QROUND_RNE || s->hadamard)
        return "fprop.w is rotated (a Hadamard transform or MS-EDEN), so the forward's copy is not one of W itself; give "
               "fprop.w a spec without h<n> or eden";
    return NULL;
}

// ----------------------------------------------------------------------------------------------
// The small steps (w x w, w <= LORA_MAX_WIDTH), in double; `work` holds w * w + w doubles.

// Column j of T = L^{-1} for lora_orth_small (L: its Cholesky factor, w x w; keep: its kept pivots): forward
// substitution on the kept rows and columns, in double in col (w doubles), written to T as floats; zero in the
// dropped rows, and the whole column zero when pivot j was dropped. The twin runs it per column, the GPU kernel
// one column per thread.
HD void lora_inverse_column(const double* L, const double* keep, int w, int j, double* col, float* T) {
    for (int i = 0; i < w; i++) T[i * w + j] = 0.0f;
    if (!keep[j]) return;
    col[j] = 1.0 / L[j * w + j];
    T[j * w + j] = (float)col[j];
    for (int i = j + 1; i < w; i++) {
        if (!keep[i]) {
            col[i] = 0.0;
            continue;
        }
        double s = 0.0;
        for (int k = j; k < i; k++) s += L[i * w + k] * col[k];
        col[i] = -s / L[i * w + i];
        T[i * w + j] = (float)col[i];
    }
}

// Given the Gram matrix G = Y Y^T (w x w, row-major) of w rows, T (w x w, lower triangular) with T Y orthonormal
// rows, or zero rows where a pivot was dropped. Returns the rows kept. work: w^2 + 2w doubles.
HD int lora_orth_small(const float* G, int w, float* T, double* work) {
    double* L = work;            // Cholesky factor, w x w
    double* keep = work + w * w; // 1 kept, 0 dropped
    double maxdiag = 0.0;
    for (int i = 0; i < w; i++) maxdiag = fmax(maxdiag, (double)G[i * w + i]);
    for (int i = 0; i < w * w; i++) L[i] = 0.0;
    int kept = 0;
    for (int i = 0; i < w; i++) {   // column i of L; a dropped pivot leaves its column zero
        double d = G[i * w + i];
        for (int k = 0; k < i; k++) d -= L[i * w + k] * L[i * w + k];
        keep[i] = maxdiag > 0.0 && d > LORA_DROP * maxdiag;
        if (!keep[i]) continue;
        const double lii = sqrt(d);
        L[i * w + i] = lii;
        kept++;
        for (int j = i + 1; j < w; j++) {
            double s = G[j * w + i];
            for (int k = 0; k < i; k++) s -= L[j * w + k] * L[i * w + k];
            L[j * w + i] = s / lii;
        }
    }
    // T = L^{-1} on the kept rows and columns (forward substitution), zero elsewhere
    for (int j = 0; j < w; j++) lora_inverse_column(L, keep, w, j, work + w * w + w, T);
    return kept;
}

// Sorts the eigenvalues lambda descending, and V's columns (the eigenvectors) with them (w <= 64).
HD void lora_eig_sort(double* V, double* lambda, int w) {
    for (int i = 0; i < w; i++) {   // selection sort
        int best = i;
        for (int j = i + 1; j < w; j++)
            if (lambda[j] > lambda[best]) best = j;
        if (best == i) continue;
        const double t = lambda[i];
        lambda[i] = lambda[best];
        lambda[best] = t;
        for (int k = 0; k < w; k++) {
            const double v = V[k * w + i];
            V[k * w + i] = V[k * w + best];
            V[k * w + best] = v;
        }
    }
}

// Symmetric A (w x w, double, row-major) = V diag(lambda) V^T by cyclic Jacobi; on return lambda holds the
// eigenvalues in descending order and V (w x w, columns) their eigenvectors in the same order. A is destroyed.
HD void lora_eig_small(double* A, int w, double* V, double* lambda) {
    for (int i = 0; i < w; i++)
        for (int j = 0; j < w; j++) V[i * w + j] = i == j ? 1.0 : 0.0;
    for (int sweep = 0; sweep < LORA_JACOBI_SWEEPS; sweep++) {
        double off = 0.0, diag = 0.0;
        for (int i = 0; i < w; i++) {
            diag += A[i * w + i] * A[i * w + i];
            for (int j = i + 1; j < w; j++) off += A[i * w + j] * A[i * w + j];
        }
        if (off <= 1e-30 * diag || off == 0.0) break;
        for (int p = 0; p < w - 1; p++)
            for (int q = p + 1; q < w; q++) {
                const double apq = A[p * w + q];
                if (apq == 0.0) continue;
                const double theta = (A[q * w + q] - A[p * w + p]) / (2.0 * apq);
                const double t = (theta >= 0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1.0));
                const double c = 1.0 / sqrt(t * t + 1.0), s = t * c;
                for (int k = 0; k < w; k++) {   // A <- A J (columns p, q)
                    const double akp = A[k * w + p], akq = A[k * w + q];
                    A[k * w + p] = c * akp - s * akq;
                    A[k * w + q] = s * akp + c * akq;
                }
                for (int k = 0; k < w; k++) {   // A <- J^T A (rows p, q)
                    const double apk = A[p * w + k], aqk = A[q * w + k];
                    A[p * w + k] = c * apk - s * aqk;
                    A[q * w + k] = s * apk + c * aqk;
                }
                for (int k = 0; k < w; k++) {   // V <- V J
                    const double vkp = V[k * w + p], vkq = V[k * w + q];
                    V[k * w + p] = c * vkp - s * vkq;
                    V[k * w + q] = s * vkp + c * vkq;
                }
            }
    }
    for (int i = 0; i < w; i++) lambda[i] = A[i * w + i];
    lora_eig_sort(V, lambda, w);
}

// From the sorted eigen-decomposition of H = B B^T (V, lambda): Mt (R x w) with Vt = Mt B, and N (w x R) with
// US = Yt^T N; returns sum_{r<R} lambda_r (the energy of E_R). An eigenvalue below LORA_DROP of the largest gives zeros.
HD double lora_factors_small(const double* V, const double* lambda, int w, int R, float* Mt, float* N) {
    double energy = 0.0;
    for (int r = 0; r < R; r++) {
        const double l = lambda[r];
        const int ok = l > 0.0 && l > LORA_DROP * lambda[0];
        const double sigma = ok ? sqrt(l) : 0.0;
        if (ok) energy += l;
        for (int i = 0; i < w; i++) {
            Mt[r * w + i] = ok ? (float)(V[i * w + r] / sigma) : 0.0f;
            N[i * R + r] = ok ? (float)(V[i * w + r] * sigma) : 0.0f;
        }
    }
    return energy;
}

// From H = B B^T (w x w, FP32), serially: lora_eig_small, then lora_factors_small. work: 3 w^2 + w doubles.
HD double lora_final_small(const float* H, int w, int R, float* Mt, float* N, double* work) {
    double* A = work;
    double* V = work + w * w;
    double* lambda = work + 2 * w * w;
    for (int i = 0; i < w * w; i++) A[i] = H[i];
    lora_eig_small(A, w, V, lambda);
    return lora_factors_small(V, lambda, w, R, Mt, N);
}

// Flops of one refresh of an m x n linear at rank R: the products with E, the Gram matrices and the applications of
// orth (two passes each, 2q + 1 orths), B B^T and the two combinations.
static inline double lora_refresh_flops(int R, int m, int n) {
    const double w = lora_width(R), q = LORA_POWER_STEPS;
    const double products = 2.0 * w * m * n * (2.0 * q + 2.0);
    const double orth = (q + 1.0) * 2.0 * (4.0 * w * w * m) + q * 2.0 * (4.0 * w * w * n);
    return products + orth + 2.0 * w * w * n + 2.0 * w * R * ((double)m + n);
}

// ----------------------------------------------------------------------------------------------
// The CPU twin. Products accumulate in double and round to float, as a cuBLASLt FP32 GEMM does up to summation order.

// C (M x N) = op(A) op(B), row-major; op(A) is M x K (A stored K x M when ta), op(B) K x N (B stored N x K when tb).
static inline void lora_gemm_cpu(float* C, const float* A, int ta, const float* B, int tb, int M, int N, int K) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0.0;
            for (int k = 0; k < K; k++)
                s += (double)(ta ? A[(size_t)k * M + i] : A[(size_t)i * K + k]) *
                     (double)(tb ? B[(size_t)j * K + k] : B[(size_t)k * N + j]);
            C[(size_t)i * N + j] = (float)s;
        }
}

// Y (w x len) <- orthonormal rows of Y's span (CholeskyQR2 with dropping); tmp: w x len floats.
static inline void lora_orth_cpu(float* Y, int w, int len, float* tmp) {
    float G[LORA_MAX_WIDTH * LORA_MAX_WIDTH], T[LORA_MAX_WIDTH * LORA_MAX_WIDTH];
    double work[LORA_MAX_WIDTH * LORA_MAX_WIDTH + 2 * LORA_MAX_WIDTH];
    for (int pass = 0; pass < 2; pass++) {
        lora_gemm_cpu(G, Y, 0, Y, 1, w, w, len);
        lora_orth_small(G, w, T, work);
        lora_gemm_cpu(tmp, T, 0, Y, 0, w, len, w);
        memcpy(Y, tmp, (size_t)w * len * sizeof(float));
    }
}

typedef struct {
    double e2;          // |E|_F^2
    double energy;      // sum of the top R eigenvalues of B B^T: |E_R|^2 for orthonormal Yt
    double captured;    // energy / e2 (0 for E = 0)
} LoraCpuStats;

// One refresh on the CPU: E (m x n, FP32) -> US (m x R) and Vt (R x n) as BF16 bits; Vt_prev (R x n BF16 bits) or
// NULL for a cold start (it may alias Vt). us_f32 / vt_f32 (or NULL): the factors before BF16 rounding.
static inline LoraCpuStats lora_factorize_cpu(const float* E, int m, int n, int R, uint64_t key, const uint16_t* Vt_prev,
                                              uint16_t* US, uint16_t* Vt, float* us_f32, float* vt_f32) {
    const int w = lora_width(R), len = m > n ? m : n;
    float* Z = (float*)xmalloc((size_t)w * n * sizeof(float));
    float* Y = (float*)xmalloc((size_t)w * m * sizeof(float));
    float* tmp = (float*)xmalloc((size_t)w * len * sizeof(float));
    float* us = (float*)xmalloc((size_t)m * R * sizeof(float));
    float* vt = (float*)xmalloc((size_t)R * n * sizeof(float));
    for (int i = 0; i < w; i++)
        for (int j = 0; j < n; j++)
            Z[(size_t)i * n + j] = Vt_prev && i < R ? bf16_bits_to_float(Vt_prev[(size_t)i * n + j])
                                                    : lora_sketch_sign(key, i, n, j);
    lora_gemm_cpu(Y, Z, 0, E, 1, w, m, n);   // Yt = Zt E^T
    lora_orth_cpu(Y, w, m, tmp);
    for (int s = 0; s < LORA_POWER_STEPS; s++) {
        lora_gemm_cpu(Z, Y, 0, E, 0, w, n, m);   // Zt = Yt E
        lora_orth_cpu(Z, w, n, tmp);
        lora_gemm_cpu(Y, Z, 0, E, 1, w, m, n);
        lora_orth_cpu(Y, w, m, tmp);
    }
    lora_gemm_cpu(Z, Y, 0, E, 0, w, n, m);       // B = Yt E, in Z
    float H[LORA_MAX_WIDTH * LORA_MAX_WIDTH], Mt[LORA_MAX_WIDTH * LORA_MAX_WIDTH], N[LORA_MAX_WIDTH * LORA_MAX_WIDTH];
    double work[3 * LORA_MAX_WIDTH * LORA_MAX_WIDTH + LORA_MAX_WIDTH];
    lora_gemm_cpu(H, Z, 0, Z, 1, w, w, n);
    LoraCpuStats st;
    st.energy = lora_final_small(H, w, R, Mt, N, work);
    lora_gemm_cpu(vt, Mt, 0, Z, 0, R, n, w);     // Vt = Mt B
    lora_gemm_cpu(us, Y, 1, N, 0, m, R, w);      // US = Yt^T N
    st.e2 = 0.0;
    for (size_t i = 0; i < (size_t)m * n; i++) st.e2 += (double)E[i] * E[i];
    st.captured = st.e2 > 0.0 ? st.energy / st.e2 : 0.0;
    for (size_t i = 0; i < (size_t)m * R; i++) US[i] = bf16_bits_rne(us[i]);
    for (size_t i = 0; i < (size_t)R * n; i++) Vt[i] = bf16_bits_rne(vt[i]);
    if (us_f32) memcpy(us_f32, us, (size_t)m * R * sizeof(float));
    if (vt_f32) memcpy(vt_f32, vt, (size_t)R * n * sizeof(float));
    free(Z);
    free(Y);
    free(tmp);
    free(us);
    free(vt);
    return st;
}

// The side GEMMs as the GPU runs them: T = BF16(X Vt^T) (N x R, FP32 accumulation), then Y = BF16(Y + T US^T),
// all BF16 bits. X: N x K; Y: N x OC.
static inline void lora_forward_cpu(uint16_t* Y, const uint16_t* X, const uint16_t* US, const uint16_t* Vt, int N, int K,
                                    int OC, int R) {
    float* t = (float*)xmalloc((size_t)R * sizeof(float));
    for (int i = 0; i < N; i++) {
        for (int r = 0; r < R; r++) {
            double s = 0.0;
            for (int k = 0; k < K; k++)
                s += (double)bf16_bits_to_float(X[(size_t)i * K + k]) * bf16_bits_to_float(Vt[(size_t)r * K + k]);
            t[r] = bf16_bits_to_float(bf16_bits_rne((float)s));
        }
        for (int o = 0; o < OC; o++) {
            double s = 0.0;
            for (int r = 0; r < R; r++) s += (double)t[r] * bf16_bits_to_float(US[(size_t)o * R + r]);
            Y[(size_t)i * OC + o] = bf16_bits_rne((float)((double)bf16_bits_to_float(Y[(size_t)i * OC + o]) + s));
        }
    }
    free(t);
}

// S = BF16(dY US) (N x R), then dX = BF16(dX + S Vt). dY: N x OC; dX: N x K.
static inline void lora_dgrad_cpu(uint16_t* dX, const uint16_t* dY, const uint16_t* US, const uint16_t* Vt, int N, int K,
                                  int OC, int R) {
    float* t = (float*)xmalloc((size_t)R * sizeof(float));
    for (int i = 0; i < N; i++) {
        for (int r = 0; r < R; r++) {
            double s = 0.0;
            for (int o = 0; o < OC; o++)
                s += (double)bf16_bits_to_float(dY[(size_t)i * OC + o]) * bf16_bits_to_float(US[(size_t)o * R + r]);
            t[r] = bf16_bits_to_float(bf16_bits_rne((float)s));
        }
        for (int k = 0; k < K; k++) {
            double s = 0.0;
            for (int r = 0; r < R; r++) s += (double)t[r] * bf16_bits_to_float(Vt[(size_t)r * K + k]);
            dX[(size_t)i * K + k] = bf16_bits_rne((float)((double)bf16_bits_to_float(dX[(size_t)i * K + k]) + s));
        }
    }
    free(t);
}
