// test_llama_kernels.cu: the Llama family's layer kernels against plain CPU references.
// Covers rmsnorm.cuh, rope.h/rope.cuh and swiglu.cuh, with test_kernels.cu's conventions: every pure output is
// poisoned (all bits set: NaN in bf16 and fp32) before each run so an unwritten element fails; accumulated
// gradients start from random nonzero values so "+=" is checked; guard elements past the end of each output (and
// before and after the in-place RoPE buffer) must keep their bits; every kernel runs twice and the two results
// must be bit-identical.
// Tolerances. A bf16 output rounds once to nearest: |error| <= half an ulp <= 2^-8 |exact|, hence rtol = 2^-8
// (BF16_RTOL) on every bf16 result, plus a small term for the fp32 arithmetic before that rounding (which can tip
// a near-tie to the other neighbour), sized per kernel below. fp32 sums are checked against an atol scaled by the
// sum of |terms|, with the factor chosen from the longest chain of sequential fp32 additions in the kernel (about
// 100 here: 100 * 2^-24 = 6e-6 < 1e-5). RoPE is also checked bit for bit against its CPU twin (rope_apply_cpu,
// the same FP32 operations on the same float table, no FMA on either side).
#include <vector>
#include <math.h>
#include "llmc/model/rmsnorm.cuh"   // rmsnorm_forward, fused_residual_rmsnorm_forward, rmsnorm_backward
#include "llmc/model/rope.cuh"      // rope_forward, rope_backward (rope.h: rope_table_fill, rope_apply_cpu)
#include "llmc/model/swiglu.cuh"    // swiglu_forward, swiglu_backward
#include "dev/test/testing.h"

#define BF16_RTOL 0.00390625          // 2^-8: half an ulp of bf16, relative
#define SUM_RTOL 1e-5                 // fp32 sums, relative to the sum of |terms|
#define GUARD 64                      // poisoned elements past the end of outputs (a multiple of 8: keeps alignment)

// ---------------------------------------------------------------------------------------------
// host helpers (as in test_kernels.cu)

#define KERNEL_CHECK_SEED 0x13198A2E03707344ull
#include "dev/test/kernel_check.cuh"   // rng, device buffers, check_array, check_bits, as_double
// The GUARD elements at p must still be all-ones bytes.
template <class T> static void check_guard(const char* what, const T* p, size_t n) {
    std::vector<T> g = dev_download(p + n, GUARD);
    std::vector<unsigned char> ones(GUARD * sizeof(T), 0xFF);
    CHECK(memcmp(g.data(), ones.data(), ones.size()) == 0, "%s: wrote past its end (element %zu..)", what, n);
}

// ---------------------------------------------------------------------------------------------
// RMSNorm

// Row rstd in double from the bf16 values.
static std::vector<double> rms_rstd(const std::vector<double>& x, int N, int C, double eps) {
    std::vector<double> rstd(N);
    for (int i = 0; i < N; i++) {
        double ss = 0;
        for (int c = 0; c < C; c++) ss += x[(size_t)i * C + c] * x[(size_t)i * C + c];
        rstd[i] = 1.0 / sqrt(ss / C + eps);
    }
    return rstd;
}

// Per-row offsets and scales (RMS from ~0.05 to ~4): rstd varies by row, as on the residual stream.
static std::vector<floatX> rms_input(int N, int C) {
    std::vector<floatX> x((size_t)N * C);
    for (int i = 0; i < N; i++) {
        double off = 2.0 * (uniform01() - 0.5), sc = i % 5 == 4 ? 0.05 : 0.2 + 2.0 * uniform01();
        for (int c = 0; c < C; c++) x[(size_t)i * C + c] = tobf(off + sc * randn());
    }
    return x;
}

static void test_rmsnorm_forward(int N, int C, bool fused, float eps) {
    const char* name = fused ? "fused_residual_rmsnorm_forward" : "rmsnorm_forward";
    printf("%s N=%d C=%d eps=%g\n", name, N, C, (double)eps);
    size_t n = (size_t)N * C;
    std::vector<floatX> in1 = rms_input(N, C), in2 = rand_bf16(n, 0.5);
    std::vector<floatX> w = rand_bf16(C, 0.1, 1.0);
    floatX *d_in1 = dev_upload(in1), *d_in2 = dev_upload(in2), *d_w = dev_upload(w);
    floatX *d_out = dev_alloc<floatX>(n, GUARD), *d_res = dev_alloc<floatX>(n, GUARD);
    float* d_rstd = dev_alloc<float>(N, GUARD);
    std::vector<floatX> out[3], res[3];
    std::vector<float> rstd[2];
    for (int r = 0; r < 3; r++) {                          // run 3: rstd NULL (inference)
        float* rs = r < 2 ? d_rstd : NULL;
        poison(d_out, n + GUARD); poison(d_res, n + GUARD);
        if (r < 2) poison(d_rstd, N + GUARD);
        const RMSNormTensors rms = {.weight = d_w, .rstd = rs};
        if (fused) fused_residual_rmsnorm_forward(d_res, d_out, d_in1, d_in2, rms, N, C, eps, 0);
        else rmsnorm_forward(d_out, d_in1, rms, N, C, eps, 0);
        out[r] = dev_download(d_out, n);
        if (r < 2) rstd[r] = dev_download(d_rstd, N);
        if (fused) res[r] = dev_download(d_res, n);
    }
    // The normalized input: for the fused kernel the bf16-rounded fp32 sum (exactly reproducible).
    std::vector<double> x(n);
    for (size_t i = 0; i < n; i++) x[i] = fused ? bf(tobf(bf(in1[i]) + bf(in2[i]))) : bf(in1[i]);
    std::vector<double> rs = rms_rstd(x, N, C, eps);
    std::vector<double> want(n), tol(n);
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) {
            size_t k = (size_t)i * C + c;
            want[k] = x[k] * rs[i] * bf(w[c]);
            // Before the one bf16 rounding: rstd's fp32 error (below: < 4e-6 relative) and two fp32 products.
            tol[k] = (BF16_RTOL + 1e-5) * fabs(want[k]) + 1e-7;
        }
    char what[128];
    snprintf(what, sizeof what, "%s out C=%d", name, C);
    check_array(what, as_double(out[0]), want, tol);
    // rstd: the fp32 sum of squares (chains of at most 64 + 5 additions of positive terms: < 4.2e-6 relative),
    // sqrtf and the division (correctly rounded), halved by the square root: < 3e-6.
    std::vector<double> rtol(N);
    for (int i = 0; i < N; i++) rtol[i] = 1e-5 * rs[i];
    snprintf(what, sizeof what, "%s rstd C=%d", name, C);
    check_array(what, as_double(rstd[0]), rs, rtol);
    if (fused) {
        std::vector<double> zero(n, 0.0);
        snprintf(what, sizeof what, "%s residual C=%d (exact)", name, C);
        check_array(what, as_double(res[0]), x, zero);
        check_bits("fused residual: run 2 vs run 1", res[0], res[1]);
        check_bits("fused residual: rstd NULL vs saved", res[0], res[2]);
        check_guard("fused residual", d_res, n);
    }
    check_bits("rmsnorm out: run 2 vs run 1", out[0], out[1]);
    check_bits("rmsnorm out: rstd NULL vs saved", out[0], out[2]);
    check_bits("rmsnorm rstd: run 2 vs run 1", rstd[0], rstd[1]);
    check_guard("rmsnorm out", d_out, n);
    check_guard("rmsnorm rstd", d_rstd, N);
    cuda_check(cudaFree(d_in1)); cuda_check(cudaFree(d_in2)); cuda_check(cudaFree(d_w));
    cuda_check(cudaFree(d_out)); cuda_check(cudaFree(d_res)); cuda_check(cudaFree(d_rstd));
}

static void test_rmsnorm_backward(int N, int C) {
    printf("rmsnorm_backward N=%d C=%d\n", N, C);
    const double eps = 1e-5;
    size_t n = (size_t)N * C;
    std::vector<floatX> inp = rms_input(N, C), dout = rand_bf16(n, 1.0), dinp0 = rand_bf16(n, 0.5);
    std::vector<floatX> w = rand_bf16(C, 0.1, 1.0);
    std::vector<float> dw0 = rand_f32(C, 1.0);
    std::vector<double> x = as_double(inp), rd = rms_rstd(x, N, C, eps);
    std::vector<float> rstd(N);                            // the saved statistic, as the forward keeps it
    for (int i = 0; i < N; i++) rstd[i] = (float)rd[i];
    floatX *d_inp = dev_upload(inp), *d_dout = dev_upload(dout), *d_dinp = dev_alloc<floatX>(n, GUARD), *d_w = dev_upload(w);
    float *d_rstd = dev_upload(rstd), *d_dw = dev_alloc<float>(C, GUARD);
    size_t scratch_bytes = rmsnorm_backward_scratch_bytes(N, C);
    void* d_scratch;
    cuda_check(cudaMalloc(&d_scratch, scratch_bytes));
    std::vector<floatX> dinp[2];
    std::vector<float> dw[2];
    for (int r = 0; r < 2; r++) {
        poison(d_dinp, n + GUARD); poison(d_dw, C + GUARD);
        dev_set(d_dinp, dinp0); dev_set(d_dw, dw0);
        cuda_check(cudaMemset(d_scratch, 0xFF, scratch_bytes));
        const RMSNormTensors rms = {.weight = d_w, .dweight = d_dw, .rstd = d_rstd};
        rmsnorm_backward(d_dinp, d_dout, d_inp, rms, d_scratch, N, C, 0);
        dinp[r] = dev_download(d_dinp, n); dw[r] = dev_download(d_dw, C);
    }
    std::vector<double> want(n), tol(n), wdw(C), adw(C);
    for (int c = 0; c < C; c++) { wdw[c] = dw0[c]; adw[c] = fabs(dw0[c]); }
    for (int i = 0; i < N; i++) {
        double rs = rstd[i], sgx = 0, agx = 0;
        for (int c = 0; c < C; c++) {
            size_t k = (size_t)i * C + c;
            double g = bf(dout[k]) * bf(w[c]), xhat = x[k] * rs;
            sgx += g * xhat; agx += fabs(g * xhat);
        }
        sgx /= C; agx /= C;
        for (int c = 0; c < C; c++) {
            size_t k = (size_t)i * C + c;
            double d = bf(dout[k]), g = d * bf(w[c]), xhat = x[k] * rs;
            want[k] = bf(dinp0[k]) + rs * (g - xhat * sgx);
            // Before the one bf16 rounding: the fp32 row mean (chains <= 69 additions: < 4.2e-6 of the mean
            // |g xhat|) and the fp32 arithmetic and add (~1e-6 relative of each term).
            tol[k] = BF16_RTOL * fabs(want[k]) + 1e-5 * (fabs(bf(dinp0[k])) + rs * (fabs(g) + fabs(xhat) * agx)) + 1e-6;
            wdw[c] += d * xhat; adw[c] += fabs(d * xhat);
        }
    }
    std::vector<double> tdw(C);
    for (int c = 0; c < C; c++) tdw[c] = SUM_RTOL * adw[c];
    char what[128];
    snprintf(what, sizeof what, "rmsnorm_backward dinp (+=) N=%d C=%d", N, C);
    check_array(what, as_double(dinp[0]), want, tol);
    snprintf(what, sizeof what, "rmsnorm_backward dweight (+=) N=%d C=%d", N, C);
    check_array(what, as_double(dw[0]), wdw, tdw);
    check_bits("rmsnorm_backward dinp: run 2 vs run 1", dinp[0], dinp[1]);
    check_bits("rmsnorm_backward dweight: run 2 vs run 1", dw[0], dw[1]);
    check_guard("rmsnorm_backward dinp", d_dinp, n);
    check_guard("rmsnorm_backward dweight", d_dw, C);
    cuda_check(cudaFree(d_inp)); cuda_check(cudaFree(d_dout)); cuda_check(cudaFree(d_dinp)); cuda_check(cudaFree(d_w));
    cuda_check(cudaFree(d_rstd)); cuda_check(cudaFree(d_dw)); cuda_check(cudaFree(d_scratch));
}

// ---------------------------------------------------------------------------------------------
// RoPE

// Host-only (runs without a GPU too): the table against cos/sin of an angle computed another way (exp/log in
// place of pow), to within the float rounding (half an ulp <= 2^-25 for |v| < 1) and the angle's double error;
// and the twin's convention on a hand-checked case.
static void test_rope_table(void) {
    printf("rope_table_fill and rope_apply_cpu (host)\n");
    const int T = 2048, HS = 128, half = HS / 2;
    std::vector<float> cs((size_t)T * half), sn((size_t)T * half);
    rope_table_fill(cs.data(), sn.data(), T, HS, 10000.0);
    size_t bad = 0;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            double a = t * exp(-2.0 * i / HS * log(10000.0));
            size_t k = (size_t)t * half + i;
            if (!(fabs(cs[k] - cos(a)) <= 3.5e-8 && fabs(sn[k] - sin(a)) <= 3.5e-8)) {
                if (bad++ < 5) printf("  table[t=%d, i=%d]: cos %.9g (want %.9g) sin %.9g (want %.9g)\n", t, i, cs[k], cos(a), sn[k], sin(a));
            }
        }
    CHECK(bad == 0 && cs[0] == 1.0f && sn[0] == 0.0f, "rope_table_fill: %zu of %zu entries off", bad, cs.size());
    // One head of HS = 4 at t = 1 (theta 100: angles 1 and 0.1): x = (1, 2, 3, 4) pairs (1, 3) and (2, 4).
    float c4[4], s4[4];
    rope_table_fill(c4, s4, 2, 4, 100.0);
    float qq[24];                                               // B = 1, T = 2, NH = KVH = 1, HS = 4: rows of 12
    memset(qq, 0, sizeof qq);
    for (int j = 0; j < 4; j++) qq[12 + j] = (float)(j + 1);   // token 1 (position 1): q = (1, 2, 3, 4), k = v = 0
    rope_apply_cpu(qq, c4, s4, 1, 2, 1, 1, 4, 0);
    double want[4] = {1 * cos(1.0) - 3 * sin(1.0), 2 * cos(0.1) - 4 * sin(0.1), 1 * sin(1.0) + 3 * cos(1.0),
                      2 * sin(0.1) + 4 * cos(0.1)};
    int ok = 1;
    for (int j = 0; j < 4; j++) ok &= fabs(qq[12 + j] - want[j]) < 1e-6;
    for (int j = 0; j < 12; j++) ok &= qq[j] == 0.0f;                      // token 0 (all zero) stays zero
    for (int j = 4; j < 12; j++) ok &= qq[12 + j] == 0.0f;                 // k and v of token 1 were zero
    CHECK(ok, "rope_apply_cpu: the rotate-halves convention at t=1 gives (%g %g %g %g), want (%g %g %g %g)",
          qq[12], qq[13], qq[14], qq[15], want[0], want[1], want[2], want[3]);
}

// The pair partner and the position of element (token n, column col) of the rotated part: returns 0 for the v heads.
// Independent of rope.h: angle in double, straight from docs/MODELS.md.
static int rope_ref_pair(int n, int col, int T, int NH, int KVH, int HS, double theta, int* partner, double* angle,
                         int* first) {
    if (col >= (NH + KVH) * HS) return 0;
    int h = col / HS, e = col % HS, half = HS / 2, i = e % half;
    *first = e < half;
    *partner = h * HS + (e < half ? e + half : e - half);
    *angle = (double)(n % T) * pow(theta, -2.0 * i / HS);
    return 1;
}

static void test_rope(int B, int T, int NH, int KVH, int HS, double theta) {
    printf("rope B=%d T=%d NH=%d KVH=%d HS=%d theta=%g\n", B, T, NH, KVH, HS, theta);
    const int N = B * T, W = (NH + 2 * KVH) * HS, half = HS / 2, maxT = T + 17;   // a table longer than T
    size_t n = (size_t)N * W;
    std::vector<float> cs((size_t)maxT * half), sn((size_t)maxT * half);
    rope_table_fill(cs.data(), sn.data(), maxT, HS, theta);
    float *d_cos = dev_upload(cs), *d_sin = dev_upload(sn);
    std::vector<floatX> x = rand_bf16(n, 1.0), dy = rand_bf16(n, 0.3);
    // The device buffer: GUARD poisoned elements, the data, GUARD more.
    floatX* d_buf = dev_alloc<floatX>(n, 2 * GUARD);
    floatX* d = d_buf + GUARD;
    auto run = [&](const std::vector<floatX>& in, int backward, int times) {
        poison(d_buf, n + 2 * GUARD);
        dev_set(d, in);
        for (int k = 0; k < times; k++) {
            if (backward == 1 || (backward == 2 && k == 1)) rope_backward(d, d_cos, d_sin, B, T, NH, KVH, HS, 0);
            else rope_forward(d, d_cos, d_sin, B, T, NH, KVH, HS, 0);
        }
        check_guard("rope: the guard before the buffer", d_buf, 0);
        check_guard("rope: the guard after the buffer", d, n);
        return dev_download(d, n);
    };
    char what[160];
    for (int backward = 0; backward <= 1; backward++) {
        const char* name = backward ? "rope_backward" : "rope_forward";
        const std::vector<floatX>& in = backward ? dy : x;
        std::vector<floatX> got = run(in, backward, 1), again = run(in, backward, 1);
        // The CPU twin: the same FP32 operations on the same table, then one RNE rounding.
        std::vector<float> f(n);
        for (size_t k = 0; k < n; k++) f[k] = bf(in[k]);
        rope_apply_cpu(f.data(), cs.data(), sn.data(), B, T, NH, KVH, HS, backward);
        std::vector<floatX> twin(n);
        for (size_t k = 0; k < n; k++) twin[k] = __float2bfloat16_rn(f[k]);
        snprintf(what, sizeof what, "%s vs rope_apply_cpu HS=%d", name, HS);
        check_bits(what, got, twin);
        snprintf(what, sizeof what, "%s: run 2 vs run 1", name);
        check_bits(what, got, again);
        // The independent reference, in double (v heads: unchanged, exactly).
        std::vector<double> want(n), tol(n);
        for (int i = 0; i < N; i++)
            for (int col = 0; col < W; col++) {
                size_t k = (size_t)i * W + col;
                int partner, first;
                double a;
                if (!rope_ref_pair(i, col, T, NH, KVH, HS, theta, &partner, &a, &first)) {
                    want[k] = bf(in[k]); tol[k] = 0.0;
                    continue;
                }
                double self = bf(in[k]), other = bf(in[(size_t)i * W + partner]), s = backward ? -sin(a) : sin(a);
                want[k] = first ? self * cos(a) - other * s : other * s + self * cos(a);
                // Before the one bf16 rounding: the float table (2^-25 each) and four fp32 roundings (2^-24 each).
                tol[k] = BF16_RTOL * fabs(want[k]) + 2e-7 * (fabs(self) + fabs(other)) + 1e-30;
            }
        snprintf(what, sizeof what, "%s vs double HS=%d (v heads exact)", name, HS);
        check_array(what, as_double(got), want, tol);
    }
    // backward(forward(x)) = x up to the two bf16 roundings: the first one's error (<= 2^-8 |y| per element)
    // turned back (<= 2^-8 (|y0| + |y1|)), then the second rounding (2^-8 of the result), and both rotations'
    // fp32 errors (~1.5e-7 (|x0| + |x1|) each, and |x0| + |x1| <= sqrt(2) (|y0| + |y1|)).
    std::vector<floatX> y = run(x, 0, 1), back = run(x, 2, 2);
    std::vector<double> want(n), tol(n);
    for (int i = 0; i < N; i++)
        for (int col = 0; col < W; col++) {
            size_t k = (size_t)i * W + col;
            int partner, first;
            double a;
            want[k] = bf(x[k]);
            if (!rope_ref_pair(i, col, T, NH, KVH, HS, theta, &partner, &a, &first)) { tol[k] = 0.0; continue; }
            double ys = fabs(bf(y[k])) + fabs(bf(y[(size_t)i * W + partner]));
            tol[k] = BF16_RTOL * ys * (1 + BF16_RTOL) + BF16_RTOL * fabs(want[k]) + 5e-7 * ys + 1e-30;
        }
    snprintf(what, sizeof what, "rope_backward(rope_forward(x)) = x HS=%d", HS);
    check_array(what, as_double(back), want, tol);
    cuda_check(cudaFree(d_cos)); cuda_check(cudaFree(d_sin)); cuda_check(cudaFree(d_buf));
}

// ---------------------------------------------------------------------------------------------
// SwiGLU

static double sig_d(double g) { return 1.0 / (1.0 + exp(-g)); }

static void test_swiglu(int N, int H) {
    printf("swiglu N=%d H=%d\n", N, H);
    size_t nh = (size_t)N * H, ngu = 2 * nh;
    std::vector<floatX> gu = rand_bf16(ngu, 2.0), dh = rand_bf16(nh, 1.0);
    // Saturated gates on purpose (expf(-g) overflows to inf below g = -88.7, underflows above +104).
    const double extreme[] = {-120.0, -90.0, -30.0, -10.0, 10.0, 30.0, 90.0, 120.0};
    for (int k = 0; k < 8 && (size_t)k * 97 < (size_t)H; k++)
        for (int i = 0; i < N; i += 7) gu[(size_t)i * 2 * H + k * 97] = tobf(extreme[k]);
    floatX *d_gu = dev_upload(gu), *d_dh = dev_upload(dh);
    floatX *d_h = dev_alloc<floatX>(nh, GUARD), *d_dgu = dev_alloc<floatX>(ngu, GUARD);
    std::vector<floatX> h[2], dgu[2];
    for (int r = 0; r < 2; r++) {
        poison(d_h, nh + GUARD);
        swiglu_forward(d_h, d_gu, N, H, 0);
        h[r] = dev_download(d_h, nh);
        poison(d_dgu, ngu + GUARD);
        swiglu_backward(d_dgu, d_dh, d_gu, N, H, 0);
        dgu[r] = dev_download(d_dgu, ngu);
    }
    check_guard("swiglu_forward h", d_h, nh);
    check_guard("swiglu_backward dgu", d_dgu, ngu);
    // In place: dgu = gu's own buffer.
    poison(d_dgu, ngu + GUARD);
    dev_set(d_dgu, gu);
    swiglu_backward(d_dgu, d_dh, d_dgu, N, H, 0);
    std::vector<floatX> inplace = dev_download(d_dgu, ngu);
    check_guard("swiglu_backward in place", d_dgu, ngu);

    std::vector<double> wh(nh), th(nh), wdgu(ngu), tdgu(ngu);
    for (int i = 0; i < N; i++)
        for (int c = 0; c < H; c++) {
            size_t k = (size_t)i * H + c, kg = (size_t)i * 2 * H + c, ku = kg + H;
            double g = bf(gu[kg]), u = bf(gu[ku]), d = bf(dh[k]), sg = sig_d(g), silu = g * sg;
            // fp32 expf (<= 2 ulp), the add, the division and the product: < 1e-6 relative.
            wh[k] = silu * u;
            th[k] = (BF16_RTOL + 1e-6) * fabs(wh[k]) + 1e-30;
            wdgu[ku] = d * silu;
            tdgu[ku] = (BF16_RTOL + 1e-6) * fabs(wdgu[ku]) + 1e-30;
            // dg: the factor 1 + g (1 - sig) cancels near g = -1.28; its fp32 error is ~ulps of 1 + |g|.
            wdgu[kg] = d * u * sg * (1.0 + g * (1.0 - sg));
            tdgu[kg] = BF16_RTOL * fabs(wdgu[kg]) + 1e-6 * fabs(d * u * sg) * (1.0 + 2.0 * fabs(g)) + 1e-30;
        }
    char what[128];
    snprintf(what, sizeof what, "swiglu_forward h H=%d", H);
    check_array(what, as_double(h[0]), wh, th);
    snprintf(what, sizeof what, "swiglu_backward dgu H=%d", H);
    check_array(what, as_double(dgu[0]), wdgu, tdgu);
    check_bits("swiglu_forward: run 2 vs run 1", h[0], h[1]);
    check_bits("swiglu_backward: run 2 vs run 1", dgu[0], dgu[1]);
    check_bits("swiglu_backward: in place vs out of place", inplace, dgu[0]);
    cuda_check(cudaFree(d_gu)); cuda_check(cudaFree(d_dh)); cuda_check(cudaFree(d_h)); cuda_check(cudaFree(d_dgu));
}

// ---------------------------------------------------------------------------------------------

// Host-only: the backward grid covers every row once, and the scratch sized for the largest shape serves every
// smaller one.
static void test_rmsnorm_scratch_sizes(void) {
    int Ns[] = {1, 7, 8, 9, 515, 8192, 8193, 20000, 65536, 131072};
    int Cs[] = {8, 128, 640, 768, 1024, 1280, 2048};
    int bad = 0;
    for (int n : Ns)
        for (int c : Cs) {
            int G, rpb;
            rmsnorm_backward_grid(n, &G, &rpb);
            if ((size_t)G * c * sizeof(float) > rmsnorm_backward_scratch_bytes(n, c) || (int64_t)G * rpb < n ||
                (int64_t)(G - 1) * rpb >= n || rpb % RMSB_WARPS != 0 || G > RMSB_MAX_BLOCKS) {
                bad++;
                printf("  rmsnorm grid N=%d C=%d: G=%d rows/block=%d\n", n, c, G, rpb);
            }
        }
    for (int i = 1; i < 10; i++)
        if (rmsnorm_backward_scratch_bytes(Ns[i], 768) < rmsnorm_backward_scratch_bytes(Ns[i - 1], 768)) { bad++; printf("  rmsnorm scratch not monotone in N\n"); }
    CHECK(bad == 0, "rmsnorm scratch sizes: %d problems", bad);
}

int main(void) {
    test_rmsnorm_scratch_sizes();
    test_rope_table();
    if (device_count_or_zero() == 0) {
        test_skip("test_llama_kernels", "no CUDA GPU on this machine");
        return test_summary("test_llama_kernels");
    }
    int Cs[] = {128, 640, 768, 1024, 1280, 2048};        // llama-tiny and the presets; 2048 the largest NV
    for (int c : Cs) test_rmsnorm_forward(515, c, false, 1e-5f);
    for (int c : Cs) test_rmsnorm_forward(515, c, true, 1e-5f);
    test_rmsnorm_forward(3, 640, false, 1e-6f);          // fewer rows than a block's warps; another eps
    for (int c : Cs) test_rmsnorm_backward(515, c);
    test_rmsnorm_backward(20000, 128);                   // many rows per warp; last block partial
    test_rmsnorm_backward(3, 768);                       // fewer rows than warps

    int HSs[] = {32, 64, 128};
    int heads[][2] = {{4, 2}, {5, 5}, {8, 2}};
    for (int hs : HSs)
        for (auto& nk : heads) test_rope(3, 171, nk[0], nk[1], hs, 10000.0);
    test_rope(4, 512, 5, 5, 128, 10000.0);               // llama-30m: C 640, 5 heads of 128; N = 2048
    test_rope(2, 64, 4, 2, 32, 500000.0);                // Llama 3's theta

    test_swiglu(1000, 512);
    test_swiglu(777, 1792);                              // llama-50m's H (2/3 of 4 * 768 rounded to 256)
    test_swiglu(3, 8);
    return test_summary("test_llama_kernels");
}
