// ns_fp4.h: --ns-fp4 SPEC, Muon's Newton-Schulz with the operands of its three GEMMs quantized (docs/FULLSTACK_FP4.md
// section 3). It is emulated: each operand becomes the quantizer's BF16 fake copy (code x block scale, exact in BF16,
// fp4/quant_cpu.h), the GEMM multiplies the copies with FP32 sums, and the alpha it is scaled by is the two tensor
// scales (times c for (c A) A). Results are rounded to BF16 where the BF16 path rounds them. This file holds the spec
// check and the CPU twin of llmc/muon.cuh's FP4 path.
// defines: ns_fp4_spec_problem(), muon_ns_alpha(), muon_newton_schulz_fp4_ref()
// Each step, on X (n x k, n <= k); Qr copies are blocked along a row, Qc along a column; d is a copy's dequantization
// scale:
//   A  = bf16(dx^2 Qr(X) Qr(X)^T)           both sides from one copy of X, so A is symmetric
//   AA = bf16(c da^2 Qr(A) Qr(A)^T)         (c A) A: A is symmetric, so its row-blocked copy transposed is the
//                                           column-blocked copy the right side needs
//   B  = bf16(bf16(b A) + AA)
//   BX = bf16(db dxc Qr(B) Qc(X))           reduced over n: B by rows, X by columns (X's second copy)
//   X  = bf16(bf16(a X) + BX)
// Each alpha is computed in FP32 as (c0 d1) d2, with c0 = 1 or c. RNE only: NS is a deterministic fixed-point iteration,
// and SR would only add noise. No Hadamard and no MS-EDEN: a rotation would have to match on both sides of all three
// GEMMs.
#pragma once
#include "llmc/base/muon_ref.h"
#include "llmc/fp4/quant_cpu.h"

// NULL when NS can run with spec s, else why not.
static inline const char* ns_fp4_spec_problem(const QuantSpec* s) {
    if (s->grid == QGRID_BF16) return "a BF16 spec quantizes nothing (use --ns-fp4 off)";
    if (s->rounding != QROUND_RNE) return "Newton-Schulz's operands round to nearest (rne) only";
    if (s->hadamard) return "no Hadamard transform (it would have to match on both sides of all three GEMMs)";
    if (s->block_w != 1 && s->block_w != s->block_l) return "blocks 1xL or square tiles only";
    return NULL;
}

// The GEMM's alpha, (c0 d1) d2, in FP32 rounded once per product (the GPU computes it with __fmul_rn).
static inline float muon_ns_alpha(float c0, float d1, float d2) {
    const float t = c0 * d1;
    return t * d2;
}

// out (M x N) = bf16(alpha * a (M x K) b (N x K)^T), FP32 sums in index order (fake copies as BF16 bits).
static inline void muon_ns_gemm_abt(float* out, const uint16_t* a, const uint16_t* b, int M, int N, int K, float alpha) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float s = 0.0f;
            for (int t = 0; t < K; t++)
                s += bf16_bits_to_float(a[(size_t)i * K + t]) * bf16_bits_to_float(b[(size_t)j * K + t]);
            out[(size_t)i * N + j] = muon_bf16(alpha * s);
        }
}

// The fake copy of x (rows x cols floats, BF16 values) along axis; returns its dequantization scale.
static inline float muon_ns_quant(const QuantParams* q, const float* x, int rows, int cols, int axis, uint16_t* bits,
                                  uint16_t* fake) {
    const size_t n = (size_t)rows * cols;
    for (size_t i = 0; i < n; i++) bits[i] = bf16_bits_rne(x[i]);
    const QuantView v = {bits, rows, cols, cols};
    return quant_cpu(q, v, axis, /*key=*/0, fake, cols, NULL, NULL, NULL);
}

// Newton-Schulz on x (n x k, n <= k, row-major, in place) with quantized GEMM operands; otherwise as
// muon_newton_schulz. n and k must suit the spec's blocks (multiples of 16 or 32). Allocates its scratch.
static inline void muon_newton_schulz_fp4_ref(float* x, int n, int k, int steps, const QuantParams* q) {
    const size_t nk = (size_t)n * k, nn = (size_t)n * n;
    float* a = (float*)xmalloc(nn * sizeof(float));
    float* aa = (float*)xmalloc(nn * sizeof(float));
    float* b = (float*)xmalloc(nn * sizeof(float));
    float* bx = (float*)xmalloc(nk * sizeof(float));
    uint16_t* bits = (uint16_t*)xmalloc(nk * sizeof(uint16_t));
    uint16_t* qxr = (uint16_t*)xmalloc(nk * sizeof(uint16_t));
    uint16_t* qxc = (uint16_t*)xmalloc(nk * sizeof(uint16_t));
    uint16_t* qxct = (uint16_t*)xmalloc(nk * sizeof(uint16_t));
    uint16_t* qa = (uint16_t*)xmalloc(nn * sizeof(uint16_t));
    uint16_t* qb = (uint16_t*)xmalloc(nn * sizeof(uint16_t));
    muon_normalize(x, nk);
    for (int s = 0; s < steps; s++) {
        const float dxr = muon_ns_quant(q, x, n, k, 1, bits, qxr);
        const float dxc = muon_ns_quant(q, x, n, k, 0, bits, qxc);
        muon_ns_gemm_abt(a, qxr, qxr, n, n, k, muon_ns_alpha(1.0f, dxr, dxr));
        const float da = muon_ns_quant(q, a, n, n, 1, bits, qa);
        muon_ns_gemm_abt(aa, qa, qa, n, n, n, muon_ns_alpha(MUON_NS_C, da, da));
        for (size_t i = 0; i < nn; i++) b[i] = muon_bf16(muon_bf16(MUON_NS_B * a[i]) + aa[i]);
        const float db = muon_ns_quant(q, b, n, n, 1, bits, qb);
        for (int r = 0; r < n; r++)    // B X = Qr(B) (Qc(X)^T)^T: X's column-blocked copy, transposed to k x n
            for (int c = 0; c < k; c++) qxct[(size_t)c * n + r] = qxc[(size_t)r * k + c];
        muon_ns_gemm_abt(bx, qb, qxct, n, k, n, muon_ns_alpha(1.0f, db, dxc));
        for (size_t i = 0; i < nk; i++) x[i] = muon_bf16(muon_bf16(MUON_NS_A * x[i]) + bx[i]);
    }
    free(a); free(aa); free(b); free(bx); free(bits); free(qxr); free(qxc); free(qxct); free(qa); free(qb);
}
