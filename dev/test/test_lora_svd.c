// test_lora_svd.c: the LoRA-SVD correction's CPU twin (llmc/fp4/lora_svd.h; docs/FULLSTACK_FP4.md section 4 and
// section 6 test 4):
//   (a) E of rank below R is reconstructed exactly (to FP32 rounding; the BF16 factors to BF16 rounding);
//   (b) E = U diag(sigma) V^T with a known spectrum: |E - E_R|^2 within 1% of sum_{i>R} sigma_i^2, cold and warm
//       started, and the captured fraction the refresh reports equals the explicit one;
//   (c) the residual of a real NVFP4 quantization (random W, the nvfp4 recipe's fprop.w spec through quant_cpu): the
//       captured fraction, printed, in a sane range around R / min(m, n);
//   (d) the side GEMMs (forward and data gradient) against plain double loops;
//   (e) the refresh is a pure function of E, the key and the previous factors: a resume that loads the stored factors
//       continues bit for bit, a resume that recomputes them cold does not (why the checkpoint stores them).
#include "llmc/fp4/lora_svd.h"
#include "llmc/fp4/quant_cpu.h"
#include "dev/test/testing.h"
#include "dev/test/spectra.h"

static uint64_t lcg = 0x2545F4914F6CDD1Dull;
static double urand(void) {
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return ((lcg >> 11) + 0.5) / 9007199254740992.0;
}
static double nrand(void) { return sqrt(-2.0 * log(urand())) * cos(6.283185307179586 * urand()); }

// rows x cols with orthonormal columns (Gram-Schmidt twice, double).
static double* random_orthonormal(int rows, int cols) {
    double* Q = (double*)xmalloc((size_t)rows * cols * sizeof(double));
    for (int i = 0; i < rows * cols; i++) Q[i] = nrand();
    test_orthonormalize_columns(Q, rows, cols);
    return Q;
}

// E = U diag(sigma) V^T, m x n, FP32; sigma has k entries.
static float* make_spectrum(int m, int n, const double* sigma, int k) {
    double* U = random_orthonormal(m, k);
    double* V = random_orthonormal(n, k);
    float* E = (float*)xmalloc((size_t)m * n * sizeof(float));
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0.0;
            for (int r = 0; r < k; r++) s += U[i * k + r] * sigma[r] * V[j * k + r];
            E[(size_t)i * n + j] = (float)s;
        }
    free(U);
    free(V);
    return E;
}

// |E - US Vt|_F^2 in double, from FP32 factors (us, vt) or BF16 ones (US, Vt).
static double residual2(const float* E, int m, int n, int R, const float* us, const float* vt, const uint16_t* US,
                        const uint16_t* Vt) {
    double r2 = 0.0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0.0;
            for (int r = 0; r < R; r++)
                s += us ? (double)us[i * R + r] * vt[(size_t)r * n + j]
                        : (double)bf16_bits_to_float(US[i * R + r]) * bf16_bits_to_float(Vt[(size_t)r * n + j]);
            const double d = E[(size_t)i * n + j] - s;
            r2 += d * d;
        }
    return r2;
}
static double norm2(const float* E, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)E[i] * E[i];
    return s;
}

typedef struct {
    uint16_t *US, *Vt;
    float *us, *vt;
} Factors;
static Factors factors_new(int m, int n, int R) {
    Factors f;
    f.US = (uint16_t*)xmalloc((size_t)m * R * 2);
    f.Vt = (uint16_t*)xmalloc((size_t)R * n * 2);
    f.us = (float*)xmalloc((size_t)m * R * 4);
    f.vt = (float*)xmalloc((size_t)R * n * 4);
    return f;
}
static void factors_free(Factors* f) {
    free(f->US);
    free(f->Vt);
    free(f->us);
    free(f->vt);
}

static void test_small_steps(void) {
    // lora_orth_small on a Gram matrix of 3 rows, one a multiple of another: T Y has 2 orthonormal rows and a zero row
    const float Y[3 * 4] = {1, 2, 0, 1, 2, 4, 0, 2, 0, 1, 3, -1};
    float G[9], T[9], Q[12];
    double work[LORA_MAX_WIDTH * LORA_MAX_WIDTH + 2 * LORA_MAX_WIDTH];
    lora_gemm_cpu(G, Y, 0, Y, 1, 3, 3, 4);
    const int kept = lora_orth_small(G, 3, T, work);
    lora_gemm_cpu(Q, T, 0, Y, 0, 3, 4, 3);
    double off = 0.0, zero = 0.0, diag = 0.0;
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            double d = 0.0;
            for (int k = 0; k < 4; k++) d += (double)Q[a * 4 + k] * Q[b * 4 + k];
            if (a == 1 || b == 1) zero = fmax(zero, fabs(d));
            else if (a == b) diag = fmax(diag, fabs(d - 1.0));
            else off = fmax(off, fabs(d));
        }
    CHECK(kept == 2 && zero == 0.0 && diag < 1e-6 && off < 1e-6, "orth of a rank-2 Gram: kept %d, dropped row %g, "
          "|diag - 1| %g, off-diagonal %g", kept, zero, diag, off);
    // lora_eig_small on a known symmetric matrix: eigenvalues 6, 3, 1 of [[2,1,1],[1,3,2],[1,2,...]]: use diag(1,6,3)
    // rotated by a known orthonormal basis
    double* Qb = random_orthonormal(5, 5);
    const double lam[5] = {0.5, 6.0, 3.0, 1e-3, 2.0};
    double A[25], V[25], l[5];
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 5; j++) {
            double s = 0.0;
            for (int k = 0; k < 5; k++) s += Qb[i * 5 + k] * lam[k] * Qb[j * 5 + k];
            A[i * 5 + j] = s;
        }
    lora_eig_small(A, 5, V, l);
    const double want[5] = {6.0, 3.0, 2.0, 0.5, 1e-3};
    double err = 0.0;
    for (int i = 0; i < 5; i++) err = fmax(err, fabs(l[i] - want[i]));
    CHECK(err < 1e-12, "Jacobi eigenvalues, descending: worst error %g", err);
    free(Qb);
}

// (a) rank(E) = 5 <= R = 8: exact.
static void test_exact_low_rank(void) {
    const int m = 64, n = 96, R = 8, k = 5;
    const double sigma[5] = {3.0, 1.0, 0.5, 0.25, 0.01};
    float* E = make_spectrum(m, n, sigma, k);
    Factors f = factors_new(m, n, R);
    LoraCpuStats st = lora_factorize_cpu(E, m, n, R, lora_key(1, 0, 0, 0), NULL, f.US, f.Vt, f.us, f.vt);
    const double e2 = norm2(E, (size_t)m * n);
    const double rel32 = sqrt(residual2(E, m, n, R, f.us, f.vt, NULL, NULL) / e2);
    const double rel16 = sqrt(residual2(E, m, n, R, NULL, NULL, f.US, f.Vt) / e2);
    printf("  (a) rank 5, R 8: relative residual %.3g (FP32 factors), %.3g (BF16 factors), captured %.9f\n", rel32, rel16,
           st.captured);
    CHECK(rel32 < 2e-6, "(a) rank-5 E at R = 8: FP32 factors' relative residual %g (want FP32 rounding, < 2e-6)", rel32);
    CHECK(rel16 < 8e-3, "(a) rank-5 E at R = 8: BF16 factors' relative residual %g (want BF16 rounding, < 8e-3)", rel16);
    CHECK(fabs(st.captured - 1.0) < 1e-5, "(a) captured fraction %.9f (want 1)", st.captured);
    factors_free(&f);
    free(E);
}

// (b) known spectra: the randomized residual within 1% of the optimum, cold and warm.
static void test_known_spectrum(const char* name, double (*sig)(int), int m, int n, int R) {
    const int k = m < n ? m : n;
    double* sigma = (double*)xmalloc((size_t)k * sizeof(double));
    double tail = 0.0, total = 0.0;
    for (int i = 0; i < k; i++) {
        sigma[i] = sig(i);
        total += sigma[i] * sigma[i];
        if (i >= R) tail += sigma[i] * sigma[i];
    }
    float* E = make_spectrum(m, n, sigma, k);
    Factors f = factors_new(m, n, R);
    for (int warm = 0; warm < 2; warm++) {
        LoraCpuStats st = lora_factorize_cpu(E, m, n, R, lora_key(3, warm, 1, 2), warm ? f.Vt : NULL, f.US, f.Vt, f.us,
                                             f.vt);
        const double r2 = residual2(E, m, n, R, f.us, f.vt, NULL, NULL);
        const double r2b = residual2(E, m, n, R, NULL, NULL, f.US, f.Vt);
        const double explicit_captured = 1.0 - r2 / norm2(E, (size_t)m * n);
        printf("  (b) %s %dx%d R %d %s: |E-E_R|^2 %.6g, optimum %.6g (ratio %.5f; BF16 factors %.5f), captured %.5f "
               "(explicit %.5f, optimum %.5f)\n", name, m, n, R, warm ? "warm" : "cold", r2, tail, r2 / tail, r2b / tail,
               st.captured, explicit_captured, 1.0 - tail / total);
        CHECK(r2 <= 1.01 * tail && r2 >= 0.999 * tail, "(b) %s %s: residual %g vs optimum %g (ratio %g, want within 1%%)",
              name, warm ? "warm" : "cold", r2, tail, r2 / tail);
        CHECK(fabs(st.captured - explicit_captured) < 1e-4, "(b) %s: reported captured %g vs explicit %g", name,
              st.captured, explicit_captured);
    }
    factors_free(&f);
    free(E);
    free(sigma);
}
static double sig_geometric(int i) { return pow(0.85, i); }
static double sig_poly(int i) { return 1.0 / (1.0 + i); }
static double sig_sqrt(int i) { return 1.0 / sqrt(1.0 + i); }

// The residual of an NVFP4 quantization of W (m x n) with the nvfp4 recipe's fprop.w spec (nvfp4-2d, RNE).
static float* quant_residual(const uint16_t* W, int m, int n) {
    QuantSpec spec;
    char err[256];
    fail_if(quant_spec_parse("nvfp4-2d", &spec, err, sizeof(err)), "%s", err);
    QuantParams p = quant_params(&spec);
    uint16_t* fake = (uint16_t*)xmalloc((size_t)m * n * 2);
    QuantView v = {W, m, n, n};
    const float sd = quant_cpu(&p, v, 1, 0, fake, n, NULL, NULL, NULL);
    float* E = (float*)xmalloc((size_t)m * n * sizeof(float));
    for (size_t i = 0; i < (size_t)m * n; i++) E[i] = bf16_bits_to_float(W[i]) - bf16_bits_to_float(fake[i]) * sd;
    free(fake);
    return E;
}

// (c) a real quantization residual.
static void test_quant_residual(int m, int n, int R) {
    uint16_t* W = (uint16_t*)xmalloc((size_t)m * n * 2);
    for (size_t i = 0; i < (size_t)m * n; i++) W[i] = bf16_bits_rne((float)(0.02 * nrand()));
    float* E = quant_residual(W, m, n);
    Factors f = factors_new(m, n, R);
    LoraCpuStats st = lora_factorize_cpu(E, m, n, R, lora_key(5, 0, 0, 1), NULL, f.US, f.Vt, f.us, f.vt);
    LoraCpuStats st2 = lora_factorize_cpu(E, m, n, R, lora_key(5, 1, 0, 1), f.Vt, f.US, f.Vt, f.us, f.vt);
    const double wnorm = sqrt(norm2(E, (size_t)m * n));
    double w2 = 0.0;
    for (size_t i = 0; i < (size_t)m * n; i++) w2 += (double)bf16_bits_to_float(W[i]) * bf16_bits_to_float(W[i]);
    const double white = (double)R / (m < n ? m : n);
    const double explicit_captured = 1.0 - residual2(E, m, n, R, NULL, NULL, f.US, f.Vt) / norm2(E, (size_t)m * n);
    printf("  (c) NVFP4 (nvfp4-2d) residual of a random %dx%d W: |E|/|W| %.4f; R %d captures %.4f cold, %.4f after a warm "
           "refresh (BF16 factors, explicit: %.4f); R/min(m,n) = %.4f (ratio %.2f)\n", m, n, wnorm / sqrt(w2), R,
           st.captured, st2.captured, explicit_captured, white, st2.captured / white);
    CHECK(st.captured > white && st.captured < 4.0 * white, "(c) captured %g outside (R/min, 4 R/min) = (%g, %g)",
          st.captured, white, 4.0 * white);
    CHECK(st2.captured >= st.captured - 1e-3, "(c) the warm refresh captures %g, less than the cold one's %g",
          st2.captured, st.captured);
    factors_free(&f);
    free(E);
    free(W);
}

// (d) side GEMMs against double loops without the intermediate rounding; the tolerance is the BF16 roundings the
// GPU makes: the output (half an ulp, 2^-9 relative) and T or S (2^-9 relative each, summed in magnitude).
static void test_side_gemms(void) {
    const int N = 24, K = 40, OC = 56, R = 16;
    uint16_t *X = (uint16_t*)xmalloc(N * K * 2), *Y = (uint16_t*)xmalloc(N * OC * 2), *US = (uint16_t*)xmalloc(OC * R * 2);
    uint16_t *Vt = (uint16_t*)xmalloc(R * K * 2), *dY = (uint16_t*)xmalloc(N * OC * 2), *dX = (uint16_t*)xmalloc(N * K * 2);
    for (int i = 0; i < N * K; i++) X[i] = bf16_bits_rne((float)nrand());
    for (int i = 0; i < N * OC; i++) Y[i] = bf16_bits_rne((float)nrand());
    for (int i = 0; i < OC * R; i++) US[i] = bf16_bits_rne((float)(0.1 * nrand()));
    for (int i = 0; i < R * K; i++) Vt[i] = bf16_bits_rne((float)(0.2 * nrand()));
    for (int i = 0; i < N * OC; i++) dY[i] = bf16_bits_rne((float)nrand());
    for (int i = 0; i < N * K; i++) dX[i] = bf16_bits_rne((float)nrand());
    uint16_t *Y2 = (uint16_t*)xmalloc(N * OC * 2), *dX2 = (uint16_t*)xmalloc(N * K * 2);
    memcpy(Y2, Y, N * OC * 2);
    memcpy(dX2, dX, N * K * 2);
    lora_forward_cpu(Y2, X, US, Vt, N, K, OC, R);
    lora_dgrad_cpu(dX2, dY, US, Vt, N, K, OC, R);
    int bad_f = 0, bad_d = 0;
    double worst_f = 0.0, worst_d = 0.0;
    for (int i = 0; i < N; i++) {
        double t[16], s[16];
        for (int r = 0; r < R; r++) {
            t[r] = 0.0;
            for (int k = 0; k < K; k++) t[r] += (double)bf16_bits_to_float(X[i * K + k]) * bf16_bits_to_float(Vt[r * K + k]);
            s[r] = 0.0;
            for (int o = 0; o < OC; o++) s[r] += (double)bf16_bits_to_float(dY[i * OC + o]) * bf16_bits_to_float(US[o * R + r]);
        }
        for (int o = 0; o < OC; o++) {
            double want = bf16_bits_to_float(Y[i * OC + o]), mag = 0.0;
            for (int r = 0; r < R; r++) {
                want += t[r] * bf16_bits_to_float(US[o * R + r]);
                mag += fabs(t[r] * bf16_bits_to_float(US[o * R + r]));
            }
            const double tol = fabs(want) * 0x1p-8 + mag * 0x1p-8 + 1e-30;
            const double e = fabs(bf16_bits_to_float(Y2[i * OC + o]) - want) / tol;
            worst_f = fmax(worst_f, e);
            bad_f += e > 1.0;
        }
        for (int k = 0; k < K; k++) {
            double want = bf16_bits_to_float(dX[i * K + k]), mag = 0.0;
            for (int r = 0; r < R; r++) {
                want += s[r] * bf16_bits_to_float(Vt[r * K + k]);
                mag += fabs(s[r] * bf16_bits_to_float(Vt[r * K + k]));
            }
            const double tol = fabs(want) * 0x1p-8 + mag * 0x1p-8 + 1e-30;
            const double e = fabs(bf16_bits_to_float(dX2[i * K + k]) - want) / tol;
            worst_d = fmax(worst_d, e);
            bad_d += e > 1.0;
        }
    }
    printf("  (d) side GEMMs vs double loops: worst error / tolerance %.3f (forward), %.3f (data gradient)\n", worst_f,
           worst_d);
    CHECK(bad_f == 0, "(d) forward side GEMM: %d elements beyond BF16 rounding of the double loop", bad_f);
    CHECK(bad_d == 0, "(d) dgrad side GEMM: %d elements beyond BF16 rounding of the double loop", bad_d);
    free(X); free(Y); free(US); free(Vt); free(dY); free(dX); free(Y2); free(dX2);
}

// (e) the resume argument: refreshes E1 (cold, step 0) then E2 (warm, step 1). Resuming after the first refresh with
// its stored BF16 factors gives the second bit for bit; recomputing them cold at resume does not.
static void test_resume_logic(void) {
    const int m = 48, n = 64, R = 8;
    uint16_t* W = (uint16_t*)xmalloc((size_t)m * n * 2);
    for (size_t i = 0; i < (size_t)m * n; i++) W[i] = bf16_bits_rne((float)(0.02 * nrand()));
    float* E1 = quant_residual(W, m, n);
    for (size_t i = 0; i < (size_t)m * n; i++) W[i] = bf16_bits_rne(bf16_bits_to_float(W[i]) + (float)(1e-3 * nrand()));
    float* E2 = quant_residual(W, m, n);
    Factors run = factors_new(m, n, R), resumed = factors_new(m, n, R), cold = factors_new(m, n, R);
    lora_factorize_cpu(E1, m, n, R, lora_key(9, 0, 2, 3), NULL, run.US, run.Vt, NULL, NULL);
    memcpy(resumed.Vt, run.Vt, (size_t)R * n * 2);   // what the checkpoint stores: the BF16 factors
    memcpy(resumed.US, run.US, (size_t)m * R * 2);
    lora_factorize_cpu(E2, m, n, R, lora_key(9, 1, 2, 3), run.Vt, run.US, run.Vt, NULL, NULL);
    lora_factorize_cpu(E2, m, n, R, lora_key(9, 1, 2, 3), resumed.Vt, resumed.US, resumed.Vt, NULL, NULL);
    lora_factorize_cpu(E2, m, n, R, lora_key(9, 1, 2, 3), NULL, cold.US, cold.Vt, NULL, NULL);
    const int same = !memcmp(run.US, resumed.US, (size_t)m * R * 2) && !memcmp(run.Vt, resumed.Vt, (size_t)R * n * 2);
    const int cold_same = !memcmp(run.US, cold.US, (size_t)m * R * 2) && !memcmp(run.Vt, cold.Vt, (size_t)R * n * 2);
    CHECK(same, "(e) a resume from the stored factors continues bit for bit");
    CHECK(!cold_same, "(e) recomputing the factors cold at resume gives other bits (so they are stored)");
    printf("  (e) resume from stored factors: %s; cold recompute at resume: %s\n", same ? "same bits" : "DIFFERENT",
           cold_same ? "same bits" : "different bits (expected)");
    // the sketch is the generator's: balanced signs, and another key gives another sketch
    int plus = 0, differ = 0;
    for (int j = 0; j < 4096; j++) {
        plus += lora_sketch_sign(lora_key(9, 0, 0, 0), 3, 4096, j) > 0;
        differ += lora_sketch_sign(lora_key(9, 0, 0, 0), 3, 4096, j) != lora_sketch_sign(lora_key(9, 1, 0, 0), 3, 4096, j);
    }
    CHECK(plus > 1900 && plus < 2196 && differ > 1900 && differ < 2196, "sketch signs: %d of 4096 positive, %d differ "
          "between steps", plus, differ);
    factors_free(&run);
    factors_free(&resumed);
    factors_free(&cold);
    free(E1);
    free(E2);
    free(W);
}

static void test_rank_rules(void) {
    CHECK(lora_rank_problem(16, 768, 768) == NULL, "rank 16 on 768 x 768");
    CHECK(lora_rank_problem(12, 768, 768) != NULL, "rank 12 is not a multiple of 8");
    CHECK(lora_rank_problem(64, 768, 768) != NULL, "rank 64 + 8 exceeds the small steps' 64");
    CHECK(lora_rank_problem(56, 768, 768) == NULL && lora_rank_problem(56, 60, 768) != NULL, "rank 56, widths");
    const double f = lora_refresh_flops(16, 768, 3072), train = 6.0 * 8192 * 768 * 3072;
    printf("  cost: one refresh of a 768 x 3072 linear at R 16: %.3g flops, %.2f%% of a training step on 8192 tokens\n",
           f, 100.0 * f / train);
    CHECK(f > 2.0 * 24 * 768 * 3072 * 6 && f < 1.1 * 2.0 * 24 * 768 * 3072 * 6, "refresh flops %g ~ 2 w m n (2q + 2)", f);
}

int main(void) {
    test_small_steps();
    test_exact_low_rank();
    test_known_spectrum("geometric 0.85^i", sig_geometric, 128, 192, 16);
    test_known_spectrum("1/(1+i)", sig_poly, 128, 192, 16);
    test_known_spectrum("1/sqrt(1+i)", sig_sqrt, 96, 160, 16);
    test_quant_residual(256, 384, 16);
    test_side_gemms();
    test_resume_logic();
    test_rank_rules();
    return test_summary("lora_svd");
}
