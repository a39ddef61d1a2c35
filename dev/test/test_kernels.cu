// test_kernels.cu: the elementwise, normalization and loss kernels against plain CPU references.
// Covers encoder.cuh, layernorm.cuh, gelu.cuh, fused_classifier.cuh, target_argmax.cuh, reduce.cuh, adamw.cuh.
// Every output is poisoned (all bits set: NaN in bf16 and fp32) before each run so an unwritten
// element fails; accumulated gradients start from random nonzero values so "+=" is checked; guard
// elements past the end of each pure output must stay poisoned; every kernel runs twice and the
// two results must be bit-identical (training resumes bit for bit).
// Tolerances. A bf16 output rounds once to nearest: |error| <= half an ulp <= 2^-8 |exact|, hence
// rtol = 2^-8 (BF16_RTOL) on every bf16 result, plus a small atol for the fp32 arithmetic before
// that rounding (which can tip a near-tie to the other neighbour). fp32 sums are checked against
// an atol scaled by the sum of |terms|, with the factor chosen from the longest chain of
// sequential fp32 additions in the kernel (about 100 here: 100 * 2^-24 = 6e-6 < 1e-5).
#include <vector>
#include <math.h>
#include "llmc/model/encoder.cuh"           // encoder_forward, encoder_backward
#include "llmc/model/layernorm.cuh"         // layernorm_forward, fused_residual_layernorm_forward, layernorm_backward
#include "llmc/model/gelu.cuh"              // gelu_forward, gelu_backward_inplace
#include "llmc/model/fused_classifier.cuh"  // fused_classifier
#include "llmc/model/target_argmax.cuh"     // target_is_argmax
#include "llmc/model/reduce.cuh"            // bias_backward, sum_squares
#include "llmc/adamw.cuh"             // adamw_update, adamw_step_ref
#include "dev/test/testing.h"

#define BF16_RTOL 0.00390625          // 2^-8: half an ulp of bf16, relative
#define SUM_RTOL 1e-5                 // fp32 sums, relative to the sum of |terms|
#define GUARD 64                      // poisoned elements past the end of pure outputs

// ---------------------------------------------------------------------------------------------
// host helpers

#define KERNEL_CHECK_SEED 0x243F6A8885A308D3ull
#include "dev/test/kernel_check.cuh"   // rng, device buffers, check_array(_rel), check_bits, as_double
// The GUARD elements after n must still be all-ones bytes.
template <class T> static void check_guard(const char* what, const T* p, size_t n) {
    std::vector<T> g = dev_download(p + n, GUARD);
    std::vector<unsigned char> ones(GUARD * sizeof(T), 0xFF);
    CHECK(memcmp(g.data(), ones.data(), ones.size()) == 0, "%s: wrote past its end (element %zu..)", what, n);
}

// ---------------------------------------------------------------------------------------------
// encoder

static void test_encoder(int B, int T, int C, int V, double p_hot) {
    printf("encoder B=%d T=%d C=%d V=%d (fraction of the hot token %.2f)\n", B, T, C, V, p_hot);
    int N = B * T;
    std::vector<int> inp(N);
    for (int i = 0; i < N; i++) {
        double u = uniform01();
        inp[i] = u < p_hot ? 7 % V : u < p_hot + 0.1 ? 3 % V : (int)(uniform01() * V) % V;
    }
    std::vector<floatX> wte = rand_bf16((size_t)V * C, 0.1), wpe = rand_bf16((size_t)T * C, 0.05);
    std::vector<floatX> dout = rand_bf16((size_t)N * C, 1.0);
    std::vector<float> dwte0 = rand_f32((size_t)V * C, 0.5), dwpe0 = rand_f32((size_t)T * C, 0.5);
    int* d_inp = dev_upload(inp);
    floatX *d_wte = dev_upload(wte), *d_wpe = dev_upload(wpe), *d_dout = dev_upload(dout);
    floatX* d_out = dev_alloc<floatX>((size_t)N * C, GUARD);
    float *d_dwte = dev_upload(dwte0), *d_dwpe = dev_upload(dwpe0);

    // forward: the kernel's fp32 add and one rounding, reproduced exactly on the CPU.
    std::vector<floatX> runs[2];
    for (int r = 0; r < 2; r++) {
        poison(d_out, (size_t)N * C + GUARD);
        encoder_forward(d_out, d_inp, d_wte, d_wpe, B, T, C, 0);
        runs[r] = dev_download(d_out, (size_t)N * C);
    }
    std::vector<double> want((size_t)N * C);
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++)
            want[(size_t)i * C + c] = bf(tobf(bf(wte[(size_t)inp[i] * C + c]) + bf(wpe[(size_t)(i % T) * C + c])));
    check_array_rel("encoder_forward out (exact)", as_double(runs[0]), want, 0.0, 0.0);
    check_bits("encoder_forward", runs[0], runs[1]);
    check_guard("encoder_forward", d_out, (size_t)N * C);

    // backward, called twice back to back (exercises the pinned buffer reuse): grads += 2 * sum.
    EncoderBackward eb;
    encoder_backward_init(&eb, B, T, C);
    std::vector<float> gte[2], gpe[2];
    for (int r = 0; r < 2; r++) {
        dev_set(d_dwte, dwte0);
        dev_set(d_dwpe, dwpe0);
        encoder_backward(&eb, d_dwte, d_dwpe, d_dout, inp.data(), B, T, C, 0);
        encoder_backward(&eb, d_dwte, d_dwpe, d_dout, inp.data(), B, T, C, 0);
        gte[r] = dev_download(d_dwte, (size_t)V * C);
        gpe[r] = dev_download(d_dwpe, (size_t)T * C);
    }
    std::vector<double> wte_sum((size_t)V * C, 0.0), wte_abs((size_t)V * C, 0.0);
    std::vector<double> wpe_sum((size_t)T * C, 0.0), wpe_abs((size_t)T * C, 0.0);
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) {
            double d = bf(dout[(size_t)i * C + c]);
            wte_sum[(size_t)inp[i] * C + c] += d; wte_abs[(size_t)inp[i] * C + c] += fabs(d);
            wpe_sum[(size_t)(i % T) * C + c] += d; wpe_abs[(size_t)(i % T) * C + c] += fabs(d);
        }
    std::vector<double> w1((size_t)V * C), t1((size_t)V * C), w2((size_t)T * C), t2((size_t)T * C);
    for (size_t k = 0; k < w1.size(); k++) {
        w1[k] = dwte0[k] + 2 * wte_sum[k];
        t1[k] = SUM_RTOL * (fabs(dwte0[k]) + 2 * wte_abs[k]) + 1e-7;
    }
    for (size_t k = 0; k < w2.size(); k++) {
        w2[k] = dwpe0[k] + 2 * wpe_sum[k];
        t2[k] = SUM_RTOL * (fabs(dwpe0[k]) + 2 * wpe_abs[k]) + 1e-7;
    }
    check_array("encoder_backward dwte", as_double(gte[0]), w1, t1);
    check_array("encoder_backward dwpe", as_double(gpe[0]), w2, t2);
    check_bits("encoder_backward dwte", gte[0], gte[1]);
    check_bits("encoder_backward dwpe", gpe[0], gpe[1]);
    encoder_backward_free(&eb);
    cuda_check(cudaFree(d_inp)); cuda_check(cudaFree(d_wte)); cuda_check(cudaFree(d_wpe));
    cuda_check(cudaFree(d_dout)); cuda_check(cudaFree(d_out)); cuda_check(cudaFree(d_dwte)); cuda_check(cudaFree(d_dwpe));
}

// ---------------------------------------------------------------------------------------------
// layernorm

// Row statistics in double from the bf16 values.
static void ln_stats(const std::vector<double>& x, int N, int C, std::vector<double>& mean, std::vector<double>& rstd) {
    mean.assign(N, 0.0); rstd.assign(N, 0.0);
    for (int i = 0; i < N; i++) {
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) m += x[(size_t)i * C + c];
        m /= C;
        for (int c = 0; c < C; c++) { double d = x[(size_t)i * C + c] - m; v += d * d; }
        mean[i] = m;
        rstd[i] = 1.0 / sqrt(v / C + 1e-5);
    }
}

// Per-row offsets and scales, so that the mean is far from zero on some rows (tests the two-pass variance).
static std::vector<floatX> ln_input(int N, int C) {
    std::vector<floatX> x((size_t)N * C);
    for (int i = 0; i < N; i++) {
        double off = 4.0 * (uniform01() - 0.5), sc = 0.2 + 2.0 * uniform01();
        for (int c = 0; c < C; c++) x[(size_t)i * C + c] = tobf(off + sc * randn());
    }
    return x;
}

static void test_layernorm_forward(int N, int C, bool fused) {
    const char* name = fused ? "fused_residual_layernorm_forward" : "layernorm_forward";
    printf("%s N=%d C=%d\n", name, N, C);
    size_t n = (size_t)N * C;
    std::vector<floatX> in1 = ln_input(N, C), in2 = rand_bf16(n, 0.5);
    std::vector<floatX> w = rand_bf16(C, 0.1, 1.0), b = rand_bf16(C, 0.1);
    floatX *d_in1 = dev_upload(in1), *d_in2 = dev_upload(in2), *d_w = dev_upload(w), *d_b = dev_upload(b);
    floatX *d_out = dev_alloc<floatX>(n, GUARD), *d_res = dev_alloc<floatX>(n, GUARD);
    float *d_mean = dev_alloc<float>(N, GUARD), *d_rstd = dev_alloc<float>(N, GUARD);
    std::vector<floatX> out[2], res[2];
    std::vector<float> mean[2], rstd[2];
    for (int r = 0; r < 2; r++) {
        poison(d_out, n + GUARD); poison(d_res, n + GUARD); poison(d_mean, N + GUARD); poison(d_rstd, N + GUARD);
        const LayerNormTensors ln = {.weight = d_w, .bias = d_b, .mean = d_mean, .rstd = d_rstd};
        if (fused) fused_residual_layernorm_forward(d_res, d_out, d_in1, d_in2, ln, N, C, 0);
        else layernorm_forward(d_out, d_in1, ln, N, C, 0);
        out[r] = dev_download(d_out, n); mean[r] = dev_download(d_mean, N); rstd[r] = dev_download(d_rstd, N);
        if (fused) res[r] = dev_download(d_res, n);
    }
    // The normalized input: for the fused kernel the bf16-rounded fp32 sum (exactly reproducible).
    std::vector<double> x(n);
    for (size_t i = 0; i < n; i++) x[i] = fused ? bf(tobf(bf(in1[i]) + bf(in2[i]))) : bf(in1[i]);
    std::vector<double> m, rs;
    ln_stats(x, N, C, m, rs);
    std::vector<double> want(n), tol(n);
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) {
            size_t k = (size_t)i * C + c;
            double xhat = (x[k] - m[i]) * rs[i];
            want[k] = xhat * bf(w[c]) + bf(b[c]);
            // Before the one bf16 rounding: fp32 arithmetic (~1e-6 relative of |xhat w| + |b|) and the
            // fp32 mean's error (mtol below, 5e-6 (|mean| + std)) scaled by rstd |w|.
            tol[k] = BF16_RTOL * fabs(want[k]) + 1e-5 * (fabs(xhat * bf(w[c])) + fabs(bf(b[c])))
                   + 5e-6 * (fabs(m[i]) * rs[i] + 1.0) * fabs(bf(w[c])) + 1e-6;
        }
    char what[128];
    snprintf(what, sizeof what, "%s out C=%d", name, C);
    check_array(what, as_double(out[0]), want, tol);
    // mean: an fp32 sum with chains of at most 56 + 5 additions: 61 * 2^-24 * mean|x| < 5e-6 (|mean| + std).
    // rstd: the fp32 variance (same chains, ~4e-6 relative) and rsqrtf (2 ulp), halved by the square root.
    std::vector<double> mtol(N);
    for (int i = 0; i < N; i++) mtol[i] = 5e-6 * (fabs(m[i]) + 1.0 / rs[i]) + 1e-7;
    snprintf(what, sizeof what, "%s mean C=%d", name, C);
    check_array(what, as_double(mean[0]), m, mtol);
    snprintf(what, sizeof what, "%s rstd C=%d", name, C);
    check_array_rel(what, as_double(rstd[0]), rs, 0.0, 2e-5);
    if (fused) {
        snprintf(what, sizeof what, "%s residual C=%d (exact)", name, C);
        check_array_rel(what, as_double(res[0]), x, 0.0, 0.0);
        check_bits("fused residual", res[0], res[1]);
        check_guard("fused residual", d_res, n);
    }
    check_bits("layernorm out", out[0], out[1]);
    check_bits("layernorm mean", mean[0], mean[1]);
    check_bits("layernorm rstd", rstd[0], rstd[1]);
    check_guard("layernorm out", d_out, n);
    check_guard("layernorm mean", d_mean, N);
    check_guard("layernorm rstd", d_rstd, N);
    cuda_check(cudaFree(d_in1)); cuda_check(cudaFree(d_in2)); cuda_check(cudaFree(d_w)); cuda_check(cudaFree(d_b));
    cuda_check(cudaFree(d_out)); cuda_check(cudaFree(d_res)); cuda_check(cudaFree(d_mean)); cuda_check(cudaFree(d_rstd));
}

static void test_layernorm_backward(int N, int C) {
    printf("layernorm_backward N=%d C=%d\n", N, C);
    size_t n = (size_t)N * C;
    std::vector<floatX> inp = ln_input(N, C), dout = rand_bf16(n, 1.0), dinp0 = rand_bf16(n, 0.5);
    std::vector<floatX> w = rand_bf16(C, 0.1, 1.0);
    std::vector<float> dw0 = rand_f32(C, 1.0), db0 = rand_f32(C, 1.0);
    std::vector<double> x = as_double(inp), md, rd;
    ln_stats(x, N, C, md, rd);
    std::vector<float> mean(N), rstd(N);                   // the saved statistics, as the forward keeps them
    for (int i = 0; i < N; i++) { mean[i] = (float)md[i]; rstd[i] = (float)rd[i]; }
    floatX *d_inp = dev_upload(inp), *d_dout = dev_upload(dout), *d_dinp = dev_upload(dinp0), *d_w = dev_upload(w);
    float *d_mean = dev_upload(mean), *d_rstd = dev_upload(rstd), *d_dw = dev_upload(dw0), *d_db = dev_upload(db0);
    size_t scratch_bytes = layernorm_backward_scratch_bytes(N, C);
    void* d_scratch;
    cuda_check(cudaMalloc(&d_scratch, scratch_bytes));
    std::vector<floatX> dinp[2];
    std::vector<float> dw[2], db[2];
    for (int r = 0; r < 2; r++) {
        dev_set(d_dinp, dinp0); dev_set(d_dw, dw0); dev_set(d_db, db0);
        cuda_check(cudaMemset(d_scratch, 0xFF, scratch_bytes));
        const LayerNormTensors ln = {.weight = d_w, .dweight = d_dw, .dbias = d_db, .mean = d_mean, .rstd = d_rstd};
        layernorm_backward(d_dinp, d_dout, d_inp, ln, d_scratch, N, C, 0);
        dinp[r] = dev_download(d_dinp, n); dw[r] = dev_download(d_dw, C); db[r] = dev_download(d_db, C);
    }
    std::vector<double> want(n), tol(n), wdw(C), wdb(C), adw(C, 0.0), adb(C, 0.0);
    for (int c = 0; c < C; c++) { wdw[c] = dw0[c]; wdb[c] = db0[c]; adw[c] = fabs(dw0[c]); adb[c] = fabs(db0[c]); }
    for (int i = 0; i < N; i++) {
        double m = mean[i], rs = rstd[i], sg = 0, sgx = 0, ag = 0, agx = 0;
        for (int c = 0; c < C; c++) {
            size_t k = (size_t)i * C + c;
            double g = bf(dout[k]) * bf(w[c]), xhat = (x[k] - m) * rs;
            sg += g; sgx += g * xhat; ag += fabs(g); agx += fabs(g * xhat);
        }
        sg /= C; sgx /= C; ag /= C; agx /= C;
        for (int c = 0; c < C; c++) {
            size_t k = (size_t)i * C + c;
            double d = bf(dout[k]), g = d * bf(w[c]), xhat = (x[k] - m) * rs;
            double term = rs * (g - sg - xhat * sgx);
            want[k] = bf(dinp0[k]) + term;
            // Before the one bf16 rounding: the fp32 row means (chains <= 61 additions: < 4e-6 of the
            // mean |term|) and the fp32 arithmetic and add (~1e-6 relative).
            tol[k] = BF16_RTOL * fabs(want[k]) + 1e-5 * (fabs(bf(dinp0[k])) + rs * (fabs(g) + ag + fabs(xhat) * agx)) + 1e-6;
            wdw[c] += d * xhat; adw[c] += fabs(d * xhat);
            wdb[c] += d; adb[c] += fabs(d);
        }
    }
    std::vector<double> tdw(C), tdb(C);
    for (int c = 0; c < C; c++) { tdw[c] = SUM_RTOL * adw[c]; tdb[c] = SUM_RTOL * adb[c]; }
    char what[128];
    snprintf(what, sizeof what, "layernorm_backward dinp C=%d", C);
    check_array(what, as_double(dinp[0]), want, tol);
    snprintf(what, sizeof what, "layernorm_backward dweight C=%d", C);
    check_array(what, as_double(dw[0]), wdw, tdw);
    snprintf(what, sizeof what, "layernorm_backward dbias C=%d", C);
    check_array(what, as_double(db[0]), wdb, tdb);
    check_bits("layernorm_backward dinp", dinp[0], dinp[1]);
    check_bits("layernorm_backward dweight", dw[0], dw[1]);
    check_bits("layernorm_backward dbias", db[0], db[1]);
    cuda_check(cudaFree(d_inp)); cuda_check(cudaFree(d_dout)); cuda_check(cudaFree(d_dinp)); cuda_check(cudaFree(d_w));
    cuda_check(cudaFree(d_mean)); cuda_check(cudaFree(d_rstd)); cuda_check(cudaFree(d_dw)); cuda_check(cudaFree(d_db));
    cuda_check(cudaFree(d_scratch));
}

// ---------------------------------------------------------------------------------------------
// gelu

static double gelu_d(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }
static double gelu_grad_d(double x) {
    double th = tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * sqrt(2.0 / M_PI) * (1.0 + 3.0 * 0.044715 * x * x);
}

static void test_gelu(size_t n) {
    printf("gelu n=%zu\n", n);
    std::vector<floatX> x = rand_bf16(n, 3.0), dout = rand_bf16(n, 1.0);
    floatX *d_x = dev_upload(x), *d_out = dev_alloc<floatX>(n, GUARD), *d_d = dev_alloc<floatX>(n, GUARD);
    std::vector<floatX> fw[2], bw[2];
    for (int r = 0; r < 2; r++) {
        poison(d_out, n + GUARD);
        gelu_forward(d_out, d_x, n, 0);
        fw[r] = dev_download(d_out, n);
        poison(d_d, n + GUARD);
        dev_set(d_d, dout);
        gelu_backward_inplace(d_d, d_x, n, 0);
        bw[r] = dev_download(d_d, n);
    }
    std::vector<double> wf(n), tf(n), wb(n), tb(n);
    for (size_t i = 0; i < n; i++) {
        double xi = bf(x[i]), di = bf(dout[i]);
        wf[i] = gelu_d(xi);
        // fp32 tanh and 1 + tanh: ~1e-7 absolute, times |x| / 2.
        tf[i] = BF16_RTOL * fabs(wf[i]) + 1e-6 * (1.0 + fabs(xi));
        wb[i] = di * gelu_grad_d(xi);
        // 1 - tanh^2 cancels for large |u|; its fp32 error ~1e-7 is scaled by x * du ~ x^3.
        tb[i] = BF16_RTOL * fabs(wb[i]) + 1e-6 * fabs(di) * (1.0 + fabs(xi) * (1.0 + xi * xi));
    }
    check_array("gelu_forward", as_double(fw[0]), wf, tf);
    check_array("gelu_backward_inplace", as_double(bw[0]), wb, tb);
    check_bits("gelu_forward", fw[0], fw[1]);
    check_bits("gelu_backward_inplace", bw[0], bw[1]);
    check_guard("gelu_forward", d_out, n);
    check_guard("gelu_backward_inplace", d_d, n);
    cuda_check(cudaFree(d_x)); cuda_check(cudaFree(d_out)); cuda_check(cudaFree(d_d));
}

// ---------------------------------------------------------------------------------------------
// AdamW against its CPU twin adamw_step_ref (the same function, compiled for the host). m, v and the new value
// agree to FP32 rounding: the device's powf and its fused multiply-adds may differ from the host's in the last
// bits, so each is allowed a few ulps of its terms (a wrong beta, bias correction, weight decay or clipping factor
// is off by orders of magnitude more). The BF16 parameters are then exact functions of the device's new value: its
// RNE rounding with a master copy (checked bit for bit against the downloaded master), else its stochastic rounding
// with rng_bits32(key, index_offset + i), which must lie between the stochastic roundings (same bits) of the host
// value's tolerance interval. A tensor updated in two shards (the second at index_offset k, as ZeRO-1 does) must
// give the one call's bits.

static void test_adamw(size_t n, bool with_master) {
    printf("adamw n=%zu, %s\n", n, with_master ? "FP32 master copy" : "BF16 parameters, stochastic rounding");
    std::vector<floatX> p = rand_bf16(n, 0.05);
    std::vector<float> g = rand_f32(n, 0.01), m = rand_f32(n, 0.001), v(n), master(n);
    for (size_t i = 0; i < n; i++) {
        v[i] = (float)(1e-5 * uniform01());
        master[i] = bf(p[i]) + (float)(1e-5 * randn());
    }
    const AdamWParams a = {3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, 7, rng_key(1234, 6, 42)};
    floatX* d_p = dev_alloc<floatX>(n);
    float *d_g = dev_upload(g), *d_m = dev_alloc<float>(n), *d_v = dev_alloc<float>(n), *d_master = dev_alloc<float>(n);
    std::vector<floatX> got_p[2];
    std::vector<float> got_m[2], got_v[2], got_master[2];
    const size_t k = n / 3;   // the second run: shards [0, k) and [k, n)
    for (int r = 0; r < 2; r++) {
        dev_set(d_p, p); dev_set(d_m, m); dev_set(d_v, v); dev_set(d_master, master);
        float* mp = with_master ? d_master : NULL;
        if (r == 0) {
            adamw_update(d_p, mp, d_g, d_m, d_v, n, 0, &a, 0);
        } else {
            adamw_update(d_p, mp, d_g, d_m, d_v, k, 0, &a, 0);
            adamw_update(d_p + k, mp ? mp + k : NULL, d_g + k, d_m + k, d_v + k, n - k, k, &a, 0);
        }
        got_p[r] = dev_download(d_p, n);
        got_m[r] = dev_download(d_m, n);
        got_v[r] = dev_download(d_v, n);
        got_master[r] = dev_download(d_master, n);
    }
    std::vector<double> wm(n), tm(n), wv(n), tv(n), wp(n), tp(n), gm(n), gv(n), gp(n);
    size_t bad_bits = 0, first_bad = 0;
    const double ulp = 0x1p-23;
    for (size_t i = 0; i < n; i++) {
        float mi = m[i], vi = v[i];
        const float pin = with_master ? master[i] : bf(p[i]);
        const double np = adamw_step_ref(pin, g[i], &mi, &vi, &a);
        const double gs = (double)g[i] * a.grad_scale;
        wm[i] = mi; gm[i] = got_m[0][i];
        tm[i] = 4 * ulp * (a.beta1 * fabs(m[i]) + (1 - a.beta1) * fabs(gs)) + 1e-30;
        wv[i] = vi; gv[i] = got_v[0][i];
        tv[i] = 4 * ulp * (a.beta2 * v[i] + (1 - a.beta2) * gs * gs) + 1e-30;
        const double u = (mi / (1 - pow(a.beta1, a.t))) / (sqrt(vi / (1 - pow(a.beta2, a.t))) + a.eps);
        wp[i] = np;
        tp[i] = 4 * ulp * fabs(pin) + a.lr * 1e-5 * (fabs(u) + a.weight_decay * fabs(pin));
        if (with_master) {
            gp[i] = got_master[0][i];
            uint16_t pb;
            memcpy(&pb, &got_p[0][i], 2);
            if (bf16_bits_rne(got_master[0][i]) != pb && bad_bits++ == 0) first_bad = i;
        } else {
            const uint32_t rb = rng_bits32(a.rng_key, i);
            const double lo = bf16_bits_to_float(bf16_bits_sr((float)(np - tp[i]), rb));
            const double hi = bf16_bits_to_float(bf16_bits_sr((float)(np + tp[i]), rb));
            const double got = bf(got_p[0][i]);
            if (!(got >= fmin(lo, hi) && got <= fmax(lo, hi)) && bad_bits++ == 0) first_bad = i;
        }
    }
    check_array("adamw m", gm, wm, tm);
    check_array("adamw v", gv, wv, tv);
    if (with_master) check_array("adamw master", gp, wp, tp);
    CHECK(bad_bits == 0, "adamw: %zu of %zu BF16 parameters are not the %s of the new value (first at %zu)", bad_bits, n,
          with_master ? "RNE rounding" : "stochastic rounding with rng_bits32(key, i)", first_bad);
    check_bits("adamw params (two shards vs one call)", got_p[0], got_p[1]);
    check_bits("adamw m (two shards vs one call)", got_m[0], got_m[1]);
    check_bits("adamw v (two shards vs one call)", got_v[0], got_v[1]);
    if (with_master) check_bits("adamw master (two shards vs one call)", got_master[0], got_master[1]);
    cuda_check(cudaFree(d_p)); cuda_check(cudaFree(d_g)); cuda_check(cudaFree(d_m)); cuda_check(cudaFree(d_v));
    cuda_check(cudaFree(d_master));
}

// ---------------------------------------------------------------------------------------------
// fused classifier

static void test_classifier(int N, int V, int Vp) {
    printf("fused_classifier N=%d V=%d Vp=%d\n", N, V, Vp);
    size_t n = (size_t)N * Vp;
    std::vector<floatX> logits(n);
    floatX nan_bf = __ushort_as_bfloat16((unsigned short)0x7FC0);
    for (int i = 0; i < N; i++) {
        double sc = 0.5 + 3.0 * uniform01();
        for (int v = 0; v < Vp; v++) logits[(size_t)i * Vp + v] = v < V ? tobf(sc * randn()) : nan_bf;  // padding must be ignored
    }
    std::vector<int> targets(N);
    for (int i = 0; i < N; i++) targets[i] = i % 7 == 3 ? -1 : (int)(uniform01() * V) % V;
    if (N > 1) targets[1] = V - 1;                         // last valid column
    float dloss = 1.0f / (float)N;
    floatX* d_logits = dev_alloc<floatX>(n, GUARD);
    float* d_losses = dev_alloc<float>(N, GUARD);
    int* d_targets = dev_upload(targets);

    // reference
    std::vector<double> loss(N), dl(n), tdl(n), tloss(N);
    for (int i = 0; i < N; i++) {
        const floatX* row = &logits[(size_t)i * Vp];
        double m = -INFINITY, s = 0;
        for (int v = 0; v < V; v++) m = fmax(m, bf(row[v]));
        for (int v = 0; v < V; v++) s += exp(bf(row[v]) - m);
        int t = targets[i];
        loss[i] = t < 0 ? 0.0 : m + log(s) - bf(row[t]);
        // fp32: max exact, sum of exps < 2e-5 relative (=> log s within 2e-5), logf and the subtraction.
        tloss[i] = 2e-5 + 2e-6 * (fabs(m) + fabs(log(s)) + fabs(bf(row[t < 0 ? 0 : t])));
        for (int v = 0; v < Vp; v++) {
            size_t k = (size_t)i * Vp + v;
            double p = v < V ? exp(bf(row[v]) - m) / s : 0.0;
            dl[k] = (t < 0 || v >= V) ? 0.0 : (p - (v == t)) * dloss;
            // p from fp32 expf and a sum with chains of <= ~260 additions: < 2e-5 relative.
            tdl[k] = BF16_RTOL * fabs(dl[k]) + 3e-5 * p * dloss + 1e-12;
        }
    }
    for (int write = 0; write <= 1; write++) {
        std::vector<floatX> out[2];
        std::vector<float> losses[2];
        for (int r = 0; r < 2; r++) {
            poison(d_logits, n + GUARD);
            cuda_check(cudaMemcpy(d_logits, logits.data(), n * sizeof(floatX), cudaMemcpyHostToDevice));
            poison(d_losses, N + GUARD);
            fused_classifier(d_logits, d_losses, dloss, d_targets, N, V, Vp, write, 0);
            out[r] = dev_download(d_logits, n);
            losses[r] = dev_download(d_losses, N);
        }
        char what[128];
        snprintf(what, sizeof what, "fused_classifier losses V=%d write=%d", V, write);
        check_array(what, as_double(losses[0]), loss, tloss);
        if (write) {
            snprintf(what, sizeof what, "fused_classifier dlogits V=%d", V);
            check_array(what, as_double(out[0]), dl, tdl);
        } else {
            check_bits("fused_classifier write=0 leaves logits", out[0], logits);
        }
        check_bits("fused_classifier losses", losses[0], losses[1]);
        check_bits("fused_classifier dlogits", out[0], out[1]);
        check_guard("fused_classifier logits", d_logits, n);
        check_guard("fused_classifier losses", d_losses, N);
    }
    cuda_check(cudaFree(d_logits)); cuda_check(cudaFree(d_losses)); cuda_check(cudaFree(d_targets));
}

// target_is_argmax: exact (a comparison), against torch.argmax's rule on the CPU, with ties on purpose:
// BF16 logits on a coarse grid, so the target often shares the maximum with a lower or higher index.
static void test_target_argmax(int N, int V, int Vp) {
    printf("target_is_argmax N=%d V=%d Vp=%d\n", N, V, Vp);
    std::vector<floatX> logits((size_t)N * Vp);
    floatX big = tobf(1e4);
    for (int i = 0; i < N; i++)
        for (int v = 0; v < Vp; v++) logits[(size_t)i * Vp + v] = v < V ? tobf(floor(4.0 * uniform01())) : big;  // padding ignored
    std::vector<int> targets(N), want(N);
    int hits = 0;
    for (int i = 0; i < N; i++) {
        const floatX* row = &logits[(size_t)i * Vp];
        int first_max = 0;
        for (int v = 1; v < V; v++) if (bf(row[v]) > bf(row[first_max])) first_max = v;
        // a third of the targets at the argmax, a third at another maximum (a tie it loses unless it is first), the rest random
        int t = i % 3 == 0 ? first_max : (int)(uniform01() * V) % V;
        if (i % 3 == 1) for (int v = V - 1; v >= 0; v--) if (bf(row[v]) == bf(row[first_max])) { t = v; break; }
        targets[i] = i % 11 == 5 ? -1 : t;
        want[i] = targets[i] >= 0 && targets[i] == first_max;
        hits += want[i];
    }
    int* d_targets = dev_upload(targets);
    floatX* d_logits = dev_upload(logits);
    int* d_hits = dev_alloc<int>(N, GUARD);
    poison(d_hits, N + GUARD);
    target_is_argmax(d_logits, d_targets, d_hits, N, V, Vp, 0);
    std::vector<int> got = dev_download(d_hits, N);
    int bad = 0;
    for (int i = 0; i < N; i++) bad += got[i] != want[i];
    CHECK(bad == 0 && hits > 0 && hits < N, "target_is_argmax: %d of %d rows wrong (%d hits expected)", bad, N, hits);
    if (bad == 0) printf("  ok target_is_argmax                                n=%-9d %d hits\n", N, hits);
    check_guard("target_is_argmax hits", d_hits, N);
    cuda_check(cudaFree(d_targets)); cuda_check(cudaFree(d_logits)); cuda_check(cudaFree(d_hits));
}

// ---------------------------------------------------------------------------------------------
// reduce

static void test_bias_backward(int N, int OC) {
    printf("bias_backward N=%d OC=%d\n", N, OC);
    std::vector<floatX> dout = rand_bf16((size_t)N * OC, 1.0);
    std::vector<float> db0 = rand_f32(OC, 1.0);
    floatX* d_dout = dev_upload(dout);
    float* d_db = dev_upload(db0);
    size_t sb = bias_backward_scratch_bytes(N, OC);
    void* d_scratch;
    cuda_check(cudaMalloc(&d_scratch, sb));
    std::vector<float> got[2];
    for (int r = 0; r < 2; r++) {
        dev_set(d_db, db0);
        cuda_check(cudaMemset(d_scratch, 0xFF, sb));
        bias_backward(d_db, d_scratch, d_dout, N, OC, 0);
        got[r] = dev_download(d_db, OC);
    }
    std::vector<double> want(OC), tol(OC);
    for (int c = 0; c < OC; c++) {
        double s = db0[c], a = fabs(db0[c]);
        for (int i = 0; i < N; i++) { double d = bf(dout[(size_t)i * OC + c]); s += d; a += fabs(d); }
        want[c] = s; tol[c] = SUM_RTOL * a;
    }
    char what[128];
    snprintf(what, sizeof what, "bias_backward N=%d OC=%d", N, OC);
    check_array(what, as_double(got[0]), want, tol);
    check_bits("bias_backward", got[0], got[1]);
    cuda_check(cudaFree(d_dout)); cuda_check(cudaFree(d_db)); cuda_check(cudaFree(d_scratch));
}

// offset: start the input that many floats into the buffer (misaligned pointers).
static void test_sum_squares(size_t n, size_t offset) {
    printf("sum_squares n=%zu offset=%zu\n", n, offset);
    std::vector<float> v = rand_f32(n + offset, 0.01);
    float* d_v = dev_upload(v);
    size_t sb = sum_squares_scratch_bytes(n);
    void* d_scratch;
    cuda_check(cudaMalloc(&d_scratch, sb));
    float* d_out = dev_alloc<float>(1, GUARD);
    float got[2];
    for (int r = 0; r < 2; r++) {
        poison(d_out, 1 + GUARD);
        cuda_check(cudaMemset(d_scratch, 0xFF, sb));
        sum_squares(d_out, d_scratch, d_v + offset, n, 0);
        got[r] = dev_download(d_out, 1)[0];
    }
    double want = 0;
    for (size_t i = 0; i < n; i++) want += (double)v[offset + i] * v[offset + i];
    char what[128];
    snprintf(what, sizeof what, "sum_squares n=%zu offset=%zu", n, offset);
    CHECK_CLOSE(got[0], want, 1e-30, SUM_RTOL, what);
    CHECK(memcmp(&got[0], &got[1], 4) == 0, "sum_squares n=%zu: run 2 (%.9g) differs from run 1 (%.9g)", n, got[1], got[0]);
    check_guard("sum_squares out", d_out, 1);
    if (n > 1000) {                                        // one NaN, then one Inf, must reach the result
        float bad[2] = {NAN, INFINITY};
        for (int b = 0; b < 2; b++) {
            size_t at = offset + n / 3 + b;
            cuda_check(cudaMemcpy(d_v + at, &bad[b], 4, cudaMemcpyHostToDevice));
            sum_squares(d_out, d_scratch, d_v + offset, n, 0);
            float g = dev_download(d_out, 1)[0];
            CHECK(b == 0 ? isnan(g) : isinf(g), "sum_squares with %s at %zu: got %g", b ? "Inf" : "NaN", at - offset, g);
            cuda_check(cudaMemcpy(d_v + at, &v[at], 4, cudaMemcpyHostToDevice));
        }
    }
    cuda_check(cudaFree(d_v)); cuda_check(cudaFree(d_scratch)); cuda_check(cudaFree(d_out));
}

// Host-only (runs without a GPU too): the scratch sized for the largest shape must cover every
// smaller one, as the trainer allocates once for (N, 4C) and (N, C).
static void test_scratch_sizes(void) {
    int Ns[] = {1, 7, 8, 9, 515, 8192, 8193, 20000, 65536, 131072};
    int OCs[] = {8, 64, 768, 1600, 2304, 3072, 4800, 6400, 50304};
    int bad = 0;
    for (int n : Ns)
        for (int oc : OCs) {
            size_t need = (size_t)bias_backward_groups(n, oc) * oc * sizeof(float);
            if (need > bias_backward_scratch_bytes(n, oc)) { bad++; printf("  bias_backward N=%d OC=%d needs %zu > %zu\n", n, oc, need, bias_backward_scratch_bytes(n, oc)); }
            for (int oc2 : OCs)
                if (oc2 <= oc && bias_backward_scratch_bytes(n, oc2) > bias_backward_scratch_bytes(n, oc)) { bad++; printf("  bias scratch not monotone in OC\n"); }
            int G, rpb;
            layernorm_backward_grid(n, &G, &rpb);
            if ((size_t)G * 2 * oc * sizeof(float) > layernorm_backward_scratch_bytes(n, oc) || (int64_t)G * rpb < n ||
                (int64_t)(G - 1) * rpb >= n || rpb % LNB_WARPS != 0) { bad++; printf("  layernorm grid N=%d: G=%d rows/block=%d\n", n, G, rpb); }
        }
    for (int i = 1; i < 10; i++) {
        if (bias_backward_scratch_bytes(Ns[i], 3072) < bias_backward_scratch_bytes(Ns[i - 1], 3072)) { bad++; printf("  bias scratch not monotone in N\n"); }
        if (layernorm_backward_scratch_bytes(Ns[i], 768) < layernorm_backward_scratch_bytes(Ns[i - 1], 768)) { bad++; printf("  layernorm scratch not monotone in N\n"); }
    }
    CHECK(bad == 0, "scratch sizes: %d problems", bad);
}

int main(void) {
    test_scratch_sizes();
    if (device_count_or_zero() == 0) {
        test_skip("test_kernels", "no CUDA GPU on this machine");
        return test_summary("test_kernels");
    }
    test_encoder(8, 128, 768, 500, 0.4);       // hot token: 400+ positions, split into chunks and merged
    test_encoder(2, 33, 64, 50, 1.0);          // every position the same token; odd N
    test_encoder(4, 64, 1600, 5000, 0.0);      // mostly unique tokens; C=1600: partial channel tile

    int Cs[] = {64, 128, 768, 1024, 1280, 1600};
    for (int c : Cs) test_layernorm_forward(515, c, false);
    for (int c : Cs) test_layernorm_forward(515, c, true);
    for (int c : Cs) test_layernorm_backward(515, c);
    test_layernorm_backward(20000, 64);         // many rows per warp; last block partial
    test_layernorm_backward(3, 768);            // fewer rows than warps

    test_gelu(1000003);                         // tail of 3 after the 16-byte vectors
    test_gelu(8);

    test_classifier(37, 1000, 1024);
    test_classifier(16, 1001, 1008);            // V not a multiple of 8: the last chunk straddles V
    test_classifier(24, 50257, 50304);          // GPT-2
    test_classifier(4, 131000, 131072);         // row too large for shared memory: the re-read path

    test_target_argmax(300, 50257, 50304);      // GPT-2's vocabulary, ties on purpose
    test_target_argmax(64, 1001, 1008);

    test_bias_backward(515, 64);
    test_bias_backward(8192, 3072);
    test_bias_backward(1000, 6400);
    test_bias_backward(7, 2304);

    test_sum_squares(10000003, 0);
    test_sum_squares(10000003, 1);              // misaligned start: scalar head
    test_sum_squares(5, 3);
    test_sum_squares(1, 0);
    test_sum_squares(0, 0);

    test_adamw(1000003, false);
    test_adamw(1000003, true);
    return test_summary("test_kernels");
}
