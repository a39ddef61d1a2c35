// spectra.h: matrices with a known spectrum, and the spectrum of a result, for the tests and dev tools that check
// orthogonalization (Muon's Newton-Schulz) and low-rank fits (LoRA-SVD). Plain C, in double.
// defines: test_orthonormalize_columns(), test_gradient_like(), test_singular_band()
#pragma once
#include <math.h>
#include <stdlib.h>
#include "llmc/base/common.h"

// Orthonormalizes the columns of Q (rows x cols, row-major) in place: Gram-Schmidt, each column twice against the ones
// before it. Tests that build matrices with a known spectrum fill Q with noise and call this.
static inline void test_orthonormalize_columns(double* Q, int rows, int cols) {
    for (int j = 0; j < cols; j++)
        for (int pass = 0; pass < 2; pass++) {
            for (int k = 0; k < j; k++) {
                double d = 0.0;
                for (int i = 0; i < rows; i++) d += Q[i * cols + j] * Q[i * cols + k];
                for (int i = 0; i < rows; i++) Q[i * cols + j] -= d * Q[i * cols + k];
            }
            double nrm = 0.0;
            for (int i = 0; i < rows; i++) nrm += Q[i * cols + j] * Q[i * cols + j];
            nrm = sqrt(nrm);
            for (int i = 0; i < rows; i++) Q[i * cols + j] /= nrm;
        }
}

// A gradient-like matrix g (n x k, row-major): the sum over r < rank (and < n, k) of 0.7^r u_r v_r^T, u_r's entries
// N(0, 1/n) and v_r's N(0, 1/k), plus N(0,1) noise of 10% of that low-rank part's RMS, which it returns. rnd draws
// N(0,1): u_r then v_r for each r, then the noise in index order (callers with their own generators get their own
// matrices, the same ones as before this function was shared).
static inline double test_gradient_like(double* g, int n, int k, int rank, double (*rnd)(void)) {
    const size_t nk = (size_t)n * k;
    double* u = (double*)xmalloc((size_t)n * sizeof(double));
    double* v = (double*)xmalloc((size_t)k * sizeof(double));
    for (size_t i = 0; i < nk; i++) g[i] = 0.0;
    double s = 1.0, ss = 0.0;
    for (int r = 0; r < rank && r < n && r < k; r++, s *= 0.7) {
        for (int i = 0; i < n; i++) u[i] = rnd() / sqrt((double)n);
        for (int j = 0; j < k; j++) v[j] = rnd() / sqrt((double)k);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < k; j++) g[(size_t)i * k + j] += s * u[i] * v[j];
    }
    for (size_t i = 0; i < nk; i++) ss += g[i] * g[i];
    const double rms = sqrt(ss / nk), noise = 0.1 * rms;
    for (size_t i = 0; i < nk; i++) g[i] += noise * rnd();
    free(u);
    free(v);
    return rms;
}

// The smallest and largest singular value of x (n x k, n <= k): the square roots of X X^T's eigenvalues, by cyclic
// Jacobi in double, sweeping until no off-diagonal entry is above 1e-12 of its diagonal pair (50 sweeps at most).
static inline void test_singular_band(const float* x, int n, int k, double* lo, double* hi) {
    double* a = (double*)xmalloc((size_t)n * n * sizeof(double));
    for (int i = 0; i < n; i++)
        for (int j = i; j < n; j++) {
            double s = 0;
            for (int t = 0; t < k; t++) s += (double)x[(size_t)i * k + t] * x[(size_t)j * k + t];
            a[(size_t)i * n + j] = a[(size_t)j * n + i] = s;
        }
    for (int sweep = 0; sweep < 50; sweep++) {
        int rotated = 0;
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++) {
                const double apq = a[(size_t)p * n + q], app = a[(size_t)p * n + p], aqq = a[(size_t)q * n + q];
                if (fabs(apq) <= 1e-12 * sqrt(fabs(app * aqq)) || apq == 0) continue;
                rotated = 1;
                const double th = 0.5 * atan2(2 * apq, aqq - app), c = cos(th), s = sin(th);
                for (int r = 0; r < n; r++) {
                    const double ap = a[(size_t)r * n + p], aq = a[(size_t)r * n + q];
                    a[(size_t)r * n + p] = c * ap - s * aq;
                    a[(size_t)r * n + q] = s * ap + c * aq;
                }
                for (int r = 0; r < n; r++) {
                    const double ap = a[(size_t)p * n + r], aq = a[(size_t)q * n + r];
                    a[(size_t)p * n + r] = c * ap - s * aq;
                    a[(size_t)q * n + r] = s * ap + c * aq;
                }
            }
        if (!rotated) break;
    }
    *lo = INFINITY;
    *hi = 0;
    for (int i = 0; i < n; i++) {
        const double sv = sqrt(fmax(a[(size_t)i * n + i], 0));
        *lo = fmin(*lo, sv);
        *hi = fmax(*hi, sv);
    }
    free(a);
}
