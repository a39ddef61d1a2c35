// test_lora_svd_gpu.cu: the LoRA-SVD correction on the GPU (llmc/fp4/lora_svd.cuh and its use in the executor,
// llmc/fp4/linear.cuh) against the CPU twin (llmc/fp4/lora_svd.h). Skips without a GPU.
//   1. the refresh on E with a known, gapped spectrum, cold and warm, the same sketch (counter-based signs): the
//      GPU's E_R = US Vt within 1e-2 (relative Frobenius) of the twin's, the captured fraction within 1e-4;
//   2. the refresh on a real NVFP4 residual (no gap: the top-R subspace is not unique, so the factors are compared
//      through what they capture): captured fraction and explicit residual within 1% of the twin's;
//   3. the residual kernel E = W - fake * scale_dec equals the twin's formula bit for bit;
//   4. the side GEMMs (forward, data gradient in BF16 and into an FP32 sum) against the twin;
//   5. the executor: rank 0 gives the same bits as no correction at all (outputs, data and weight gradients) and
//      allocates nothing; rank 16 adds exactly the side GEMMs of its own factors to the forward and the data gradient
//      (twin on the same bits), leaves the weight gradient's bits unchanged, and its refresh captures what the twin
//      captures from the CPU quantizer's residual of the same weights.
// Tolerances: the GPU and the twin run the same FP32 algorithm and differ in summation order (about 1e-6 relative);
// the factors are rounded to BF16 (2^-9 relative), so an element can land one BF16 ulp apart: E_R agrees to about
// 2^-8 where the subspace is well determined (1e-2 allowed). The side GEMMs round T = X Vt^T (or S = dY US) and the
// output to BF16: a one-ulp difference in either is allowed (2^-7 of |output|, at least one ulp, plus 2^-8 of
// sum |T_r US_or|).
#define KERNEL_CHECK_SEED 0x10AA5ADull
#include "llmc/nvfp4.cuh"
#include "llmc/fp4/quant_cpu.h"
#include "dev/test/kernel_check.cuh"
#include "dev/test/spectra.h"

static std::vector<double> orthonormal(int rows, int cols) {
    std::vector<double> Q((size_t)rows * cols);
    for (auto& v : Q) v = randn();
    test_orthonormalize_columns(Q.data(), rows, cols);
    return Q;
}

static std::vector<float> spectrum_matrix(int m, int n, double ratio) {
    const int k = m < n ? m : n;
    std::vector<double> U = orthonormal(m, k), V = orthonormal(n, k);
    std::vector<float> E((size_t)m * n);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0.0;
            for (int r = 0; r < k; r++) s += U[i * k + r] * pow(ratio, r) * V[j * k + r];
            E[(size_t)i * n + j] = (float)s;
        }
    return E;
}

// US Vt in double, from BF16 bits.
static std::vector<double> product(const std::vector<uint16_t>& US, const std::vector<uint16_t>& Vt, int m, int n, int R) {
    std::vector<double> P((size_t)m * n, 0.0);
    for (int i = 0; i < m; i++)
        for (int r = 0; r < R; r++) {
            const double u = bf16_bits_to_float(US[i * R + r]);
            for (int j = 0; j < n; j++) P[(size_t)i * n + j] += u * bf16_bits_to_float(Vt[(size_t)r * n + j]);
        }
    return P;
}
static double rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
    double d = 0.0, s = 0.0;
    for (size_t i = 0; i < a.size(); i++) {
        d += (a[i] - b[i]) * (a[i] - b[i]);
        s += b[i] * b[i];
    }
    return sqrt(d / (s > 0 ? s : 1e-300));
}
static double residual_fraction(const std::vector<float>& E, const std::vector<double>& P) {
    double r = 0.0, e = 0.0;
    for (size_t i = 0; i < E.size(); i++) {
        r += (E[i] - P[i]) * (E[i] - P[i]);
        e += (double)E[i] * E[i];
    }
    return r / e;
}

template <class T> static std::vector<uint16_t> bits(const std::vector<T>& v) {
    std::vector<uint16_t> b(v.size());
    memcpy(b.data(), v.data(), v.size() * 2);
    return b;
}

// One refresh on the GPU: E uploaded, factors (optionally warm from Vt_prev bits) downloaded, captured returned.
static float gpu_refresh(LoraWork* wk, const std::vector<float>& E, int m, int n, int R, uint64_t key,
                         const std::vector<uint16_t>* Vt_prev, std::vector<uint16_t>& US, std::vector<uint16_t>& Vt) {
    float* dE = dev_upload(E);
    floatX* dUS = dev_alloc<floatX>((size_t)m * R);
    floatX* dVt = dev_alloc<floatX>((size_t)R * n);
    float* dcap = dev_alloc<float>(1);
    if (Vt_prev) cuda_check(cudaMemcpy(dVt, Vt_prev->data(), (size_t)R * n * 2, cudaMemcpyHostToDevice));
    lora_factorize_gpu(wk, dE, m, n, R, key, Vt_prev ? dVt : NULL, dUS, dVt, dcap, 0);
    US = bits(dev_download(dUS, (size_t)m * R));
    Vt = bits(dev_download(dVt, (size_t)R * n));
    const float cap = dev_download(dcap, 1)[0];
    cudaFree(dE); cudaFree(dUS); cudaFree(dVt); cudaFree(dcap);
    return cap;
}

static void test_known_spectrum(void) {
    const int m = 192, n = 256, R = 16;
    std::vector<float> E = spectrum_matrix(m, n, 0.8);
    LoraWork wk;
    lora_work_alloc(&wk, m, n, R);
    std::vector<uint16_t> cUS((size_t)m * R), cVt((size_t)R * n), gUS, gVt;
    for (int warm = 0; warm < 2; warm++) {
        const uint64_t key = lora_key(11, warm, 0, 0);
        std::vector<uint16_t> prev = cVt;   // the twin's previous Vt feeds both
        const float gcap = gpu_refresh(&wk, E, m, n, R, key, warm ? &prev : NULL, gUS, gVt);
        LoraCpuStats st = lora_factorize_cpu(E.data(), m, n, R, key, warm ? prev.data() : NULL, cUS.data(), cVt.data(),
                                             NULL, NULL);
        const double d = rel_diff(product(gUS, gVt, m, n, R), product(cUS, cVt, m, n, R));
        printf("  spectrum 0.8^i %dx%d R %d %s: E_R GPU vs twin %.3g (relative), captured %.6f vs %.6f\n", m, n, R,
               warm ? "warm" : "cold", d, gcap, st.captured);
        CHECK(d < 1e-2, "known spectrum %s: GPU E_R differs from the twin's by %g (relative Frobenius > 1e-2)",
              warm ? "warm" : "cold", d);
        CHECK(fabs(gcap - st.captured) < 1e-4, "known spectrum %s: captured %g vs twin %g", warm ? "warm" : "cold", gcap,
              st.captured);
    }
    // rank below R: exact on the GPU too
    std::vector<float> E5 = spectrum_matrix(m, n, 0.0);   // 0^0 = 1: rank 1
    const float cap5 = gpu_refresh(&wk, E5, m, n, R, lora_key(11, 5, 0, 0), NULL, gUS, gVt);
    const double r5 = residual_fraction(E5, product(gUS, gVt, m, n, R));
    printf("  rank-1 E at R %d: GPU relative residual %.3g (BF16 factors), captured %.7f\n", R, sqrt(r5), cap5);
    CHECK(sqrt(r5) < 8e-3 && fabs(cap5 - 1.0f) < 1e-5, "rank-1 E: residual %g, captured %g", sqrt(r5), cap5);
    lora_work_free(&wk);
}

// The nvfp4 recipe's forward weight copy (nvfp4-2d, RNE) on the CPU: fake bits and scale_dec.
static float cpu_quant_w(const std::vector<uint16_t>& W, int m, int n, std::vector<uint16_t>& fake) {
    QuantSpec spec;
    char err[256];
    fail_if(quant_spec_parse("nvfp4-2d", &spec, err, sizeof(err)), "%s", err);
    QuantParams p = quant_params(&spec);
    fake.resize((size_t)m * n);
    QuantView v = {W.data(), m, n, n};
    return quant_cpu(&p, v, 1, 0, fake.data(), n, NULL, NULL, NULL);
}
static std::vector<float> cpu_residual(const std::vector<uint16_t>& W, const std::vector<uint16_t>& fake, float sd) {
    std::vector<float> E(W.size());
    for (size_t i = 0; i < W.size(); i++) E[i] = bf16_bits_to_float(W[i]) - bf16_bits_to_float(fake[i]) * sd;
    return E;
}

static void test_quant_residual(void) {
    const int m = 256, n = 384, R = 16;
    std::vector<uint16_t> W = bits(rand_bf16((size_t)m * n, 0.02)), fake;
    const float sd = cpu_quant_w(W, m, n, fake);
    std::vector<float> E = cpu_residual(W, fake, sd);
    // 3. the residual kernel
    floatX* dW = dev_alloc<floatX>(W.size());
    floatX* dF = dev_alloc<floatX>(W.size());
    float* dsd = dev_alloc<float>(1);
    float* dE = dev_alloc<float>(W.size());
    cuda_check(cudaMemcpy(dW, W.data(), W.size() * 2, cudaMemcpyHostToDevice));
    cuda_check(cudaMemcpy(dF, fake.data(), W.size() * 2, cudaMemcpyHostToDevice));
    cuda_check(cudaMemcpy(dsd, &sd, 4, cudaMemcpyHostToDevice));
    lora_residual_gpu(dE, dW, dF, n, dsd, m, n, 0);
    check_bits("residual E = W - fake * scale_dec vs twin", dev_download(dE, W.size()), E);
    cudaFree(dW); cudaFree(dF); cudaFree(dsd); cudaFree(dE);
    // 2. the refresh on it
    LoraWork wk;
    lora_work_alloc(&wk, m, n, R);
    std::vector<uint16_t> cUS((size_t)m * R), cVt((size_t)R * n), gUS, gVt;
    const uint64_t key = lora_key(12, 0, 1, 2);
    const float gcap = gpu_refresh(&wk, E, m, n, R, key, NULL, gUS, gVt);
    LoraCpuStats st = lora_factorize_cpu(E.data(), m, n, R, key, NULL, cUS.data(), cVt.data(), NULL, NULL);
    const double gres = residual_fraction(E, product(gUS, gVt, m, n, R));
    const double cres = residual_fraction(E, product(cUS, cVt, m, n, R));
    printf("  NVFP4 residual %dx%d R %d: captured GPU %.5f twin %.5f; explicit 1 - residual GPU %.5f twin %.5f\n", m, n,
           R, gcap, st.captured, 1.0 - gres, 1.0 - cres);
    CHECK(fabs(gcap - st.captured) < 0.01 * st.captured, "NVFP4 residual: captured %g vs twin %g", gcap, st.captured);
    CHECK(fabs(gres - cres) < 0.01 * cres, "NVFP4 residual: explicit residual %g vs twin %g", gres, cres);
    lora_work_free(&wk);
}

// |got - want| <= 2^-7 |want| + 2^-8 mag + tiny, per element: 2^-7 |want| is at least one BF16 ulp of the output
// (an ulp is between 2^-8 and 2^-7 of |x|; at 2^-8 a value just above a power of two failed by one ulp on the H100).
static void check_side(const char* what, const std::vector<double>& got, const std::vector<double>& want,
                       const std::vector<double>& mag) {
    std::vector<double> tol(want.size());
    for (size_t i = 0; i < want.size(); i++) tol[i] = 0x1p-7 * fabs(want[i]) + 0x1p-8 * mag[i] + 1e-30;
    check_array(what, got, want, tol);
}

// The magnitudes sum_r |T_r US_or| (forward) or sum_r |S_r Vt_rk| (dgrad) in double.
static std::vector<double> side_mag(const std::vector<uint16_t>& A, int N, int D, const std::vector<uint16_t>& F1, int f1_rows_are_r,
                                    const std::vector<uint16_t>& F2, int out, int R, int forward) {
    // forward: A = X (N x K = D), F1 = Vt (R x K), F2 = US (OC = out x R); dgrad: A = dY (N x OC = D), F1 = US (OC x R),
    // F2 = Vt (R x K = out)
    (void)f1_rows_are_r;
    std::vector<double> mag((size_t)N * out, 0.0);
    for (int i = 0; i < N; i++) {
        std::vector<double> t(R, 0.0);
        for (int r = 0; r < R; r++)
            for (int k = 0; k < D; k++)
                t[r] += (double)bf16_bits_to_float(A[(size_t)i * D + k]) *
                        bf16_bits_to_float(forward ? F1[(size_t)r * D + k] : F1[(size_t)k * R + r]);
        for (int o = 0; o < out; o++)
            for (int r = 0; r < R; r++)
                mag[(size_t)i * out + o] +=
                    fabs(t[r] * bf16_bits_to_float(forward ? F2[(size_t)o * R + r] : F2[(size_t)r * out + o]));
    }
    return mag;
}
static std::vector<double> bits_double(const std::vector<uint16_t>& b) {
    std::vector<double> d(b.size());
    for (size_t i = 0; i < b.size(); i++) d[i] = bf16_bits_to_float(b[i]);
    return d;
}

static void test_side_gemms(void) {
    const int N = 64, K = 128, OC = 192, R = 16;
    std::vector<uint16_t> X = bits(rand_bf16((size_t)N * K, 1.0)), Y = bits(rand_bf16((size_t)N * OC, 1.0));
    std::vector<uint16_t> US = bits(rand_bf16((size_t)OC * R, 0.05)), Vt = bits(rand_bf16((size_t)R * K, 0.1));
    std::vector<uint16_t> dY = bits(rand_bf16((size_t)N * OC, 1.0)), dX = bits(rand_bf16((size_t)N * K, 1.0));
    auto up = [](const std::vector<uint16_t>& h) {
        floatX* p = dev_alloc<floatX>(h.size());
        cuda_check(cudaMemcpy(p, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
        return p;
    };
    floatX *dXi = up(X), *dYo = up(Y), *dUS = up(US), *dVt = up(Vt), *ddY = up(dY), *ddX = up(dX);
    floatX* tmp = dev_alloc<floatX>((size_t)N * R);
    lora_side_forward(dYo, OC, dXi, dUS, dVt, tmp, N, K, OC, R, 0);
    lora_side_dgrad({.ptr = ddX, .ld = K, .f32 = 0, .accumulate = 1, .bias = NULL}, ddY, OC, dUS, dVt, tmp, N, K, OC, R, 0);
    std::vector<float> dx32(N * K);
    for (int i = 0; i < N * K; i++) dx32[i] = bf16_bits_to_float(dX[i]);
    float* dX32 = dev_upload(dx32);
    lora_side_dgrad({.ptr = dX32, .ld = K, .f32 = 1, .accumulate = 1, .bias = NULL}, ddY, OC, dUS, dVt, tmp, N, K, OC, R, 0);
    std::vector<uint16_t> Yw = Y, dXw = dX;
    lora_forward_cpu(Yw.data(), X.data(), US.data(), Vt.data(), N, K, OC, R);
    lora_dgrad_cpu(dXw.data(), dY.data(), US.data(), Vt.data(), N, K, OC, R);
    check_side("side forward Y += (X V)(US)^T vs twin", as_double(dev_download(dYo, (size_t)N * OC)), bits_double(Yw),
               side_mag(X, N, K, Vt, 1, US, OC, R, 1));
    const std::vector<double> dmag = side_mag(dY, N, OC, US, 0, Vt, K, R, 0);
    check_side("side dgrad dX += (dY US) Vt (BF16) vs twin", as_double(dev_download(ddX, (size_t)N * K)), bits_double(dXw),
               dmag);
    check_side("side dgrad into an FP32 sum vs twin", as_double(dev_download(dX32, (size_t)N * K)), bits_double(dXw), dmag);
    cudaFree(dXi); cudaFree(dYo); cudaFree(dUS); cudaFree(dVt); cudaFree(ddY); cudaFree(ddX); cudaFree(tmp); cudaFree(dX32);
}

// 5. The executor: one linear kind, two layers, the nvfp4 recipe with every layer FP4, emulated GEMMs.
typedef struct {
    std::vector<uint16_t> out[2], dinp[2];
    std::vector<float> dw;
    std::vector<uint16_t> factors;
    std::vector<float> captured;
    int allocated;
} ExecRun;

static ExecRun exec_run(int rank, const std::vector<uint16_t>& W, const std::vector<uint16_t>& X,
                        const std::vector<uint16_t>& dY, int L, int N, int K, int OC) {
    floatX* dW = dev_alloc<floatX>(W.size());
    cuda_check(cudaMemcpy(dW, W.data(), W.size() * 2, cudaMemcpyHostToDevice));
    float* dDW = dev_alloc<float>(W.size());
    cuda_check(cudaMemset(dDW, 0, W.size() * 4));
    floatX *dX = dev_alloc<floatX>(X.size()), *ddY = dev_alloc<floatX>(dY.size());
    cuda_check(cudaMemcpy(dX, X.data(), X.size() * 2, cudaMemcpyHostToDevice));
    cuda_check(cudaMemcpy(ddY, dY.data(), dY.size() * 2, cudaMemcpyHostToDevice));
    floatX *out = dev_alloc<floatX>((size_t)N * OC), *dinp = dev_alloc<floatX>((size_t)N * K);
    LinearDesc kind = {"fc", K, OC, 0, dW, NULL, dDW};
    LinearExec x;
    linear_exec_init(&x, &kind, 1, L, N, NULL, 0, 0);
    Recipe r;
    recipe_preset(&r, "nvfp4");
    r.bf16_first = r.bf16_last = 0;
    linear_set_recipe(&x, &r, 42, "emulated");
    ExecRun res;
    res.allocated = rank >= 0 && (linear_lora_enable(&x, rank, 1) > 0 || x.lora_factors != NULL);
    linear_set_step(&x, 0, 0);
    linear_begin_forward(&x, N, 1);
    for (int l = 0; l < L; l++) {
        linear_forward(&x, l, 0, out, dX);
        res.out[l] = bits(dev_download(out, (size_t)N * OC));
    }
    for (int l = L - 1; l >= 0; l--) {
        linear_backward(&x, l, 0, dinp, ddY, dX);
        res.dinp[l] = bits(dev_download(dinp, (size_t)N * K));
    }
    linear_end_backward(&x);
    res.dw = dev_download(dDW, W.size());
    if (rank > 0) {
        res.factors = bits(dev_download(x.lora_factors, linear_lora_bytes(&x) / 2));
        res.captured = dev_download(x.lora_captured, (size_t)L);
    }
    linear_exec_free(&x);
    cudaFree(dW); cudaFree(dDW); cudaFree(dX); cudaFree(ddY); cudaFree(out); cudaFree(dinp);
    return res;
}

static void test_executor(void) {
    const int L = 2, N = 64, K = 128, OC = 192, R = 16;
    std::vector<uint16_t> W = bits(rand_bf16((size_t)L * OC * K, 0.02));
    std::vector<uint16_t> X = bits(rand_bf16((size_t)N * K, 1.0)), dY = bits(rand_bf16((size_t)N * OC, 1e-3));
    ExecRun none = exec_run(-1, W, X, dY, L, N, K, OC);   // -1: linear_lora_enable never called
    ExecRun zero = exec_run(0, W, X, dY, L, N, K, OC);
    CHECK(!zero.allocated, "rank 0 allocates nothing");
    for (int l = 0; l < L; l++) {
        check_bits("rank 0 vs no correction: forward output", zero.out[l], none.out[l]);
        check_bits("rank 0 vs no correction: data gradient", zero.dinp[l], none.dinp[l]);
    }
    check_bits("rank 0 vs no correction: weight gradient", zero.dw, none.dw);
    ExecRun lora = exec_run(R, W, X, dY, L, N, K, OC);
    check_bits("rank 16: the weight gradient is unchanged", lora.dw, none.dw);
    const size_t per_layer = (size_t)(OC + K) * R;
    for (int l = 0; l < L; l++) {
        std::vector<uint16_t> US(lora.factors.begin() + l * per_layer, lora.factors.begin() + l * per_layer + OC * R);
        std::vector<uint16_t> Vt(lora.factors.begin() + l * per_layer + OC * R, lora.factors.begin() + (l + 1) * per_layer);
        std::vector<uint16_t> Yw = none.out[l], dXw = none.dinp[l];
        lora_forward_cpu(Yw.data(), X.data(), US.data(), Vt.data(), N, K, OC, R);
        lora_dgrad_cpu(dXw.data(), dY.data(), US.data(), Vt.data(), N, K, OC, R);
        check_side("rank 16: forward = plain + side GEMMs (twin)", bits_double(lora.out[l]), bits_double(Yw),
                   side_mag(X, N, K, Vt, 1, US, OC, R, 1));
        check_side("rank 16: dgrad = plain + side GEMMs (twin)", bits_double(lora.dinp[l]), bits_double(dXw),
                   side_mag(dY, N, OC, US, 0, Vt, K, R, 0));
        // the refresh: the twin on the CPU quantizer's residual of the same weights, same key (step 0, cold)
        std::vector<uint16_t> Wl(W.begin() + (size_t)l * OC * K, W.begin() + (size_t)(l + 1) * OC * K), fake;
        const float sd = cpu_quant_w(Wl, OC, K, fake);
        std::vector<float> E = cpu_residual(Wl, fake, sd);
        std::vector<uint16_t> cUS((size_t)OC * R), cVt((size_t)R * K);
        LoraCpuStats st = lora_factorize_cpu(E.data(), OC, K, R, lora_key(42, 0, l, 0), NULL, cUS.data(), cVt.data(),
                                             NULL, NULL);
        const double gres = residual_fraction(E, product(US, Vt, OC, K, R));
        printf("  executor layer %d: captured %.5f (twin %.5f), explicit 1 - residual %.5f\n", l, lora.captured[l],
               st.captured, 1.0 - gres);
        CHECK(fabs(lora.captured[l] - st.captured) < 0.01 * st.captured && fabs(1.0 - gres - st.captured) < 0.02 * st.captured,
              "executor layer %d: captured %g, explicit %g, twin %g", l, lora.captured[l], 1.0 - gres, st.captured);
    }
}

int main(void) {
    if (device_count_or_zero() == 0) {
        test_skip("lora_svd_gpu", "no CUDA GPU on this machine");
        return test_summary("lora_svd_gpu");
    }
    matmul_init();
    test_known_spectrum();
    test_quant_residual();
    test_side_gemms();
    test_executor();
    matmul_destroy();
    return test_summary("lora_svd_gpu");
}
