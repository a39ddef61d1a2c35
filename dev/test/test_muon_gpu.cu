// test_muon_gpu.cu: --optimizer muon's GPU path (llmc/muon.cuh) against its CPU twin (llmc/base/muon_ref.h), and the
// checks that need no twin. Shapes: square 64 x 64, tall 192 x 64, wide 64 x 256, and d6's fcw (1536 x 384, tall:
// transposed) and fcprojw (384 x 1536).
//   - Newton-Schulz alone and the whole update (momentum, NS, scale, decoupled decay; FP32 masters and BF16 weights
//     with stochastic rounding; Nesterov on and off; both scale rules; a step with gradient clipping's scale).
//   - The momentum must be equal bit for bit (the same FP32 operations, each rounded once, in both).
//   - NS output and update: the GEMMs sum in another order (cuBLASLt's tiles and split-K, the twin's index order), so
//     a sum lands on the other side of a BF16 rounding now and then. NS then carries that difference through five
//     steps, and it amplifies it along small singular values (slope a = 3.4 per step). Measured on the CPU by running
//     the twin with its sums in 32-wide chunks (another order, same rounding points): at 64 x 64 and 64 x 256 no
//     element moved; at 128 x 384 relative L2 2.4e-4, the largest element difference 0.02 rms; at 384 x 384 and
//     384 x 1536 relative L2 0.013 and 0.0094, the largest 0.12 and 0.16 rms (61-68% of elements off by some BF16
//     ulps). The bound: relative L2 <= 0.04 and every element within 0.5 rms of the twin's (about 3x the measured
//     worst); the weights within lr times that, plus one rounding of the weight (FP32 or BF16).
//   - Without the twin: the singular values of NS(G) lie in the band five steps give ([0.6, 1.25]; the twin's test
//     finds [0.68, 1.13]); a zero gradient gives a zero update (the weights only decay); two runs agree bit for bit.
// --ns-fp4 (the twin: llmc/fp4/ns_fp4.h's muon_newton_schulz_fp4_ref and muon_update_fp4_ref), on gradient-like
// inputs (rank 16 plus 10% noise; on dense Gaussian ones the sets with aa or bx diverge, docs/FULLSTACK_FP4.md
// section 3, and a diverging iteration makes any comparison meaningless):
//   - the copies, bit for bit: one step with all three GEMMs quantized (nvfp4, nvfp4-2d, mxfp4); X's two copies,
//     A's and B's against quant_cpu of the GPU's own normalised X, A and B, their dequantization scales, and the
//     three alphas against muon_ns_alpha. The GEMMs' outputs A, (c A) A and B X against the CPU product of the
//     GPU's copies, within one BF16 ulp (only the summation order differs; a missing alpha would be far off).
//   - NS (5 steps) and the whole update against the twin: relative L2 <= 0.04 and every element within 0.6 rms of
//     the twin's. Measured on the CPU (build/ns_fp4_table --order) with the twin's sums in 32-wide chunks: with xx
//     alone, relative L2 up to 0.0081 and the largest element 0.21 rms (nvfp4-2d at 384 x 1536; nvfp4 0.0081 and
//     0.18); with all three, or xx and bx, nothing moved (products of fake copies, 4-bit codes times 4-bit scales,
//     sum exactly in FP32, and B's quantization absorbs (c A) A's last bits). The bound is about 3x the worst.
//   - --ns-fp4 off gives the BF16 path's bits; two runs agree bit for bit.
#include <vector>
#include "llmc/base/cuda_common.cuh"
#include "llmc/muon.cuh"
#define KERNEL_CHECK_SEED 0x5D3C2A8BF00D1234ull
#include "dev/test/kernel_check.cuh"
#include "dev/test/spectra.h"

static MuonScratch g_scratch;   // with every --ns-fp4 copy (its BF16 path ignores them)

static NsFp4 ns_fp4_of(const char* spec, const char* gemms) {
    NsFp4 f;
    char err[512];
    fail_if(ns_fp4_set(&f, spec, gemms, err, sizeof(err)), "%s", err);
    return f;
}

// A gradient-like matrix (rows x cols): rank 16, singular values falling by 0.7 per rank, plus noise of 10% of its
// norm (test_muon.c's and dev/ns_fp4_table.c's generator, with this file's random numbers), scaled by `scale`.
static std::vector<float> gradient_like(int rows, int cols, double scale) {
    std::vector<double> g((size_t)rows * cols);
    const double norm = test_gradient_like(g.data(), rows, cols, 16, randn);
    std::vector<float> out(g.size());
    for (size_t i = 0; i < g.size(); i++) out[i] = (float)(scale * g[i] / norm);
    return out;
}
static std::vector<floatX> to_bf16(const std::vector<float>& v) {
    std::vector<floatX> b(v.size());
    for (size_t i = 0; i < v.size(); i++) b[i] = tobf(v[i]);
    return b;
}

static double rms_of(const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x * x;
    return v.empty() ? 0 : sqrt(s / v.size());
}

// got against want: relative L2 <= 0.04, each element within elem_rms rms(want) (times scale, plus tol_abs[i] if
// given): 0.5 for the BF16 path, 0.6 for --ns-fp4's (see the top).
static void check_ns_like(const char* what, const std::vector<double>& got, const std::vector<double>& want,
                          double scale, const std::vector<double>* tol_abs, double elem_rms = 0.5) {
    double num = 0, den = 0;
    size_t differ = 0;
    for (size_t i = 0; i < want.size(); i++) {
        num += (got[i] - want[i]) * (got[i] - want[i]);
        den += want[i] * want[i];
        differ += got[i] != want[i];
    }
    const double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    CHECK(rel <= 0.04, "%s: relative L2 %.3g vs the twin > 0.04", what, rel);
    printf("  %s: relative L2 %.3g, %.1f%% of elements differ from the twin\n", what, rel, 100.0 * differ / want.size());
    std::vector<double> tol(want.size(), elem_rms * rms_of(want) * scale);
    if (tol_abs) for (size_t i = 0; i < tol.size(); i++) tol[i] = elem_rms * rms_of(want) * scale + (*tol_abs)[i];
    char name[160];
    snprintf(name, sizeof(name), "%s (elementwise)", what);
    check_array(name, got, want, tol);
}

// NS alone: x (n x k, BF16) on the GPU (fp4: --ns-fp4, or NULL), `steps` steps.
static std::vector<floatX> run_ns_gpu(const std::vector<floatX>& x, int n, int k, const NsFp4* fp4 = NULL,
                                      int steps = 5) {
    floatX* d = dev_upload(x);
    muon_newton_schulz_gpu(d, n, k, steps, fp4, &g_scratch, 0);
    std::vector<floatX> out = dev_download(d, x.size());
    cudaFree(d);
    return out;
}

static void test_ns(int n, int k) {
    std::vector<floatX> x = rand_bf16((size_t)n * k, 0.01);
    std::vector<float> xf(x.size()), scratch(3 * (size_t)n * n + x.size());
    for (size_t i = 0; i < x.size(); i++) xf[i] = bf(x[i]);
    muon_newton_schulz(xf.data(), n, k, 5, scratch.data());
    std::vector<floatX> got = run_ns_gpu(x, n, k);
    char what[96];
    snprintf(what, sizeof(what), "NS %d x %d vs twin", n, k);
    check_ns_like(what, as_double(got), as_double(xf), 1.0, NULL);
    std::vector<floatX> again = run_ns_gpu(x, n, k);
    snprintf(what, sizeof(what), "NS %d x %d: run 2 vs run 1", n, k);
    check_bits(what, again, got);
    const NsFp4 off = ns_fp4_of("off", "");
    std::vector<floatX> off_run = run_ns_gpu(x, n, k, &off);
    snprintf(what, sizeof(what), "NS %d x %d: --ns-fp4 off vs the BF16 path", n, k);
    check_bits(what, off_run, got);
}

// The fake copy of a BF16 view (rows x cols) along axis, by the CPU quantizer; returns its dequantization scale.
static float quant_cpu_of(const NsFp4* f, const std::vector<floatX>& view, int rows, int cols, int axis,
                          std::vector<floatX>& fake) {
    fake.resize(view.size());
    const QuantView v = {(const uint16_t*)view.data(), rows, cols, cols};
    return quant_cpu(&f->q, v, axis, /*key=*/0, (uint16_t*)fake.data(), cols, NULL, NULL, NULL);
}

// out (M x N) = alpha a (M x K) b (N x K)^T in double, from BF16 copies (b given K x N when b_transposed); mag: the
// same with |a| |b| (what bounds an FP32 sum's rounding).
static std::vector<double> product_abt(const std::vector<floatX>& a, const std::vector<floatX>& b, int M, int N, int K,
                                       double alpha, int b_transposed, std::vector<double>& mag) {
    std::vector<double> out((size_t)M * N);
    mag.assign((size_t)M * N, 0.0);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0, m = 0;
            for (int t = 0; t < K; t++) {
                const double p = (double)bf(a[(size_t)i * K + t]) *
                                 bf(b_transposed ? b[(size_t)t * N + j] : b[(size_t)j * K + t]);
                s += p;
                m += fabs(p);
            }
            out[(size_t)i * N + j] = alpha * s;
            mag[(size_t)i * N + j] = fabs(alpha) * m;
        }
    return out;
}

// --ns-fp4's copies of one step with all three GEMMs quantized, against quant_cpu's of the GPU's own operands, bit for
// bit; the alphas against muon_ns_alpha; the GEMMs' outputs against the CPU product of the copies, within one BF16 ulp
// of the result (2^-7 relative) plus K 2^-24 of the sum of |products| (the worst case of an FP32 sum of K products in
// any order).
static void test_ns_fp4_copies(const char* spec, int n, int k) {
    const NsFp4 f = ns_fp4_of(spec, "all");
    const size_t nk = (size_t)n * k, nn = (size_t)n * n;
    const std::vector<floatX> x = to_bf16(gradient_like(n, k, 0.01));
    const std::vector<floatX> xn = run_ns_gpu(x, n, k, &f, /*steps=*/0);   // the normalised X the step starts from
    run_ns_gpu(x, n, k, &f, /*steps=*/1);
    const MuonScratch* s = &g_scratch;
    const std::vector<floatX> qxr = dev_download(s->qxr, nk), qxc = dev_download(s->qxc, nk);
    const std::vector<floatX> a = dev_download(s->a, nn), qa = dev_download(s->qa, nn), aa = dev_download(s->aa, nn);
    const std::vector<floatX> b = dev_download(s->b, nn), qb = dev_download(s->qb, nn), bx = dev_download(s->bx, nk);
    const std::vector<float> qf = dev_download(s->qf, MUON_QF_FLOATS);
    std::vector<floatX> want_xr, want_xc, want_a, want_b;
    float dec[MUON_QF_COPIES];
    dec[MUON_QF_XR] = quant_cpu_of(&f, xn, n, k, 1, want_xr);
    dec[MUON_QF_XC] = quant_cpu_of(&f, xn, n, k, 0, want_xc);
    dec[MUON_QF_A] = quant_cpu_of(&f, a, n, n, 1, want_a);
    dec[MUON_QF_B] = quant_cpu_of(&f, b, n, n, 1, want_b);
    char what[160];
    const char* names[MUON_QF_COPIES] = {"X row-blocked", "X column-blocked", "A", "B"};
    const std::vector<floatX>* got[MUON_QF_COPIES] = {&qxr, &qxc, &qa, &qb};
    const std::vector<floatX>* want[MUON_QF_COPIES] = {&want_xr, &want_xc, &want_a, &want_b};
    for (int c = 0; c < MUON_QF_COPIES; c++) {
        snprintf(what, sizeof(what), "--ns-fp4 %s %d x %d: %s's copy vs quant_cpu", spec, n, k, names[c]);
        check_bits(what, *got[c], *want[c]);
        CHECK(qf[MUON_QF_DEC + c] == dec[c], "--ns-fp4 %s %d x %d: %s's dequantization scale %.9g, quant_cpu's %.9g",
              spec, n, k, names[c], qf[MUON_QF_DEC + c], dec[c]);
    }
    const float alpha[3] = {muon_ns_alpha(1.0f, dec[MUON_QF_XR], dec[MUON_QF_XR]),
                            muon_ns_alpha(MUON_NS_C, dec[MUON_QF_A], dec[MUON_QF_A]),
                            muon_ns_alpha(1.0f, dec[MUON_QF_B], dec[MUON_QF_XC])};
    for (int g = 0; g < 3; g++)
        CHECK(qf[MUON_QF_ALPHA + g] == alpha[g], "--ns-fp4 %s %d x %d: alpha of %s %.9g, muon_ns_alpha's %.9g", spec, n,
              k, NS_GEMM_NAMES[g], qf[MUON_QF_ALPHA + g], alpha[g]);
    std::vector<double> mag[3];
    const std::vector<double> want_out[3] = {product_abt(qxr, qxr, n, n, k, alpha[0], 0, mag[0]),
                                             product_abt(qa, qa, n, n, n, alpha[1], 0, mag[1]),
                                             product_abt(qb, qxc, n, k, n, alpha[2], 1, mag[2])};
    const std::vector<floatX>* got_out[3] = {&a, &aa, &bx};
    const char* gemm[3] = {"A = X X^T", "(c A) A", "B X"};
    const int K[3] = {k, n, n};
    for (int g = 0; g < 3; g++) {   // one BF16 ulp of the result, plus an FP32 sum's rounding in any order
        std::vector<double> tol(want_out[g].size());
        for (size_t i = 0; i < tol.size(); i++) tol[i] = ldexp(fabs(want_out[g][i]), -7) + K[g] * ldexp(mag[g][i], -24);
        snprintf(what, sizeof(what), "--ns-fp4 %s %d x %d: %s from the copies", spec, n, k, gemm[g]);
        check_array(what, as_double(*got_out[g]), want_out[g], tol);
    }
}

// --ns-fp4's NS, 5 steps on a gradient-like x (n x k), against the twin; and two runs bit for bit.
static void test_ns_fp4(const char* spec, const char* gemms, int n, int k) {
    const NsFp4 f = ns_fp4_of(spec, gemms);
    const std::vector<floatX> x = to_bf16(gradient_like(n, k, 0.01));
    std::vector<float> xf(x.size());
    for (size_t i = 0; i < x.size(); i++) xf[i] = bf(x[i]);
    muon_newton_schulz_fp4_ref(xf.data(), n, k, 5, &f.q, f.gemms);
    const std::vector<floatX> got = run_ns_gpu(x, n, k, &f);
    char what[160];
    snprintf(what, sizeof(what), "--ns-fp4 %s on %s: NS %d x %d vs twin", spec, gemms, n, k);
    check_ns_like(what, as_double(got), as_double(xf), 1.0, NULL, 0.6);
    const std::vector<floatX> again = run_ns_gpu(x, n, k, &f);
    snprintf(what, sizeof(what), "--ns-fp4 %s on %s: NS %d x %d, run 2 vs run 1", spec, gemms, n, k);
    check_bits(what, again, got);
}

// Singular values of x (n x k, n <= k, BF16): test_singular_band on its float values.
static void singular_range(const std::vector<floatX>& x, int n, int k, double* lo, double* hi) {
    std::vector<float> f(x.size());
    for (size_t i = 0; i < x.size(); i++) f[i] = bf(x[i]);
    test_singular_band(f.data(), n, k, lo, hi);
}

static void test_band(int n, int k) {
    std::vector<floatX> x = rand_bf16((size_t)n * k, 1.0);
    std::vector<floatX> got = run_ns_gpu(x, n, k);
    double lo, hi;
    singular_range(got, n, k, &lo, &hi);
    CHECK(lo > 0.6 && hi < 1.25, "NS %d x %d on the GPU: singular values in [0.6, 1.25]: [%.3f, %.3f]", n, k, lo, hi);
    printf("  NS %d x %d on the GPU: singular values in [%.3f, %.3f]\n", n, k, lo, hi);
}

// The whole update, `steps` steps, against muon_update_ref (with fp4: muon_update_fp4_ref, on gradient-like
// gradients). Before each step the GPU gets the twin's weights (so that one step's difference is checked, not a sum
// over steps); momentum carries over on both sides and must stay equal.
static void test_update(int rows, int cols, int fp32_master, int nesterov, int scale_rule, int steps,
                        const NsFp4* fp4 = NULL) {
    const double elem_rms = fp4 ? 0.6 : 0.5;
    const size_t n = (size_t)rows * cols;
    MuonParams p = {0.02f, 0.95f, 0.1f, nesterov, scale_rule, 5};
    std::vector<float> w = rand_f32(n, 0.02), m(n, 0.0f), up(n);
    for (size_t i = 0; i < n; i++) w[i] = bf(tobf(w[i]));   // BF16-representable start, as the trainer's weights
    float* d_m = dev_alloc<float>(n);
    float* d_g = dev_alloc<float>(n);
    float* d_master = fp32_master ? dev_alloc<float>(n) : NULL;
    floatX* d_params = dev_alloc<floatX>(n);
    cuda_check(cudaMemset(d_m, 0, n * sizeof(float)));
    char name[160];
    char ns[200] = "BF16 NS";
    if (fp4) {
        char desc[180];
        ns_fp4_describe(fp4, desc, sizeof(desc));
        snprintf(ns, sizeof(ns), "--ns-fp4 %s", desc);
    }
    snprintf(name, sizeof(name), "update %d x %d, %s, nesterov %d, %s, %s", rows, cols,
             fp32_master ? "FP32 masters" : "BF16 + SR", nesterov, scale_rule == MUON_SCALE_MOONLIGHT ? "moonlight" : "keller",
             ns);
    for (int step = 1; step <= steps; step++) {
        const float grad_scale = step == 2 ? 0.5f : 1.0f;   // the trainer's clipping factor, on one step
        std::vector<float> g = fp4 ? gradient_like(rows, cols, step == 3 ? 1e-4 : 1.0) : rand_f32(n, step == 3 ? 1e-4 : 1.0);
        std::vector<float> gs(n);
        for (size_t i = 0; i < n; i++) gs[i] = g[i] * grad_scale;   // exact (a power of two)
        std::vector<floatX> wb(n);
        for (size_t i = 0; i < n; i++) wb[i] = tobf(w[i]);
        dev_set(d_params, wb);
        if (d_master) dev_set(d_master, w);
        dev_set(d_g, g);
        const std::vector<float> w_before = w;
        if (fp4) muon_update_fp4_ref(w.data(), gs.data(), m.data(), rows, cols, &p, fp4, up.data());
        else muon_update_ref(w.data(), gs.data(), m.data(), rows, cols, &p, up.data());
        const uint64_t key = rng_key(7, (uint32_t)step, 1004);
        muon_update_gpu(d_params, d_master, d_g, d_m, rows, cols, &p, grad_scale, key, 0, fp4, &g_scratch, 0);
        char what[256];
        snprintf(what, sizeof(what), "%s, step %d: momentum", name, step);
        check_bits(what, dev_download(d_m, n), m);
        // the update the GPU applied, from its weights: (w_before decay - w_after) / lr, checked as NS output
        const float decay = 1.0f - p.lr * p.weight_decay;
        std::vector<double> got_w, want_w(w.begin(), w.end()), tol(n);
        if (fp32_master) {
            got_w = as_double(dev_download(d_master, n));
            for (size_t i = 0; i < n; i++) tol[i] = 2 * 1.2e-7 * fabs(w[i]);   // the FP32 rounding of two products
        } else {
            got_w = as_double(dev_download(d_params, n));
            for (size_t i = 0; i < n; i++) tol[i] = ldexp(1.0, ilogb(fmax(fabs(w[i]), 1e-30)) - 7);   // one BF16 ulp (SR)
        }
        std::vector<double> got_u(n), want_u(n);
        for (size_t i = 0; i < n; i++) {
            got_u[i] = ((double)w_before[i] * decay - got_w[i]) / p.lr;
            want_u[i] = ((double)w_before[i] * decay - want_w[i]) / p.lr;
        }
        if (fp32_master) {   // the applied update, as NS output (times the scale), then the weights
            snprintf(what, sizeof(what), "%s, step %d: applied update", name, step);
            std::vector<double> tol_u(n);
            for (size_t i = 0; i < n; i++) tol_u[i] = tol[i] / p.lr;
            check_ns_like(what, got_u, want_u, 1.0, &tol_u, elem_rms);
        }
        std::vector<double> tol_w(n);
        const double rms_u = rms_of(want_u);
        for (size_t i = 0; i < n; i++) tol_w[i] = p.lr * elem_rms * rms_u + tol[i];
        snprintf(what, sizeof(what), "%s, step %d: weights", name, step);
        check_array(what, got_w, want_w, tol_w);
        // the BF16 weights with masters are the masters' RNE rounding
        if (fp32_master) {
            std::vector<floatX> pb = dev_download(d_params, n);
            std::vector<float> mw = dev_download(d_master, n);
            size_t bad = 0;
            for (size_t i = 0; i < n; i++) {
                uint16_t bits;
                memcpy(&bits, &pb[i], 2);
                bad += bf16_bits_rne(mw[i]) != bits;
            }
            CHECK(bad == 0, "%s, step %d: %zu BF16 weights are not their master's RNE rounding", name, step, bad);
        }
        w = std::vector<float>(got_w.begin(), got_w.end());   // the next step starts from the GPU's weights
    }
    cudaFree(d_m); cudaFree(d_g); cudaFree(d_master); cudaFree(d_params);
}

// A zero gradient with zero momentum: the update is zero and the weights only decay (bit for bit), and a repeated run
// of a whole update is bit for bit the same.
static void test_zero_and_repeat(int rows, int cols) {
    const size_t n = (size_t)rows * cols;
    MuonParams p = {0.01f, 0.95f, 0.1f, 1, MUON_SCALE_MOONLIGHT, 5};
    std::vector<float> w = rand_f32(n, 0.02);
    float* d_m = dev_alloc<float>(n);
    float* d_g = dev_alloc<float>(n);
    float* d_master = dev_upload(w);
    floatX* d_params = dev_alloc<floatX>(n);
    cuda_check(cudaMemset(d_m, 0, n * sizeof(float)));
    cuda_check(cudaMemset(d_g, 0, n * sizeof(float)));
    muon_update_gpu(d_params, d_master, d_g, d_m, rows, cols, &p, 1.0f, 1, 0, NULL, &g_scratch, 0);
    std::vector<float> got = dev_download(d_master, n), want(n);
    const float decay = 1.0f - p.lr * p.weight_decay;
    for (size_t i = 0; i < n; i++) want[i] = w[i] * decay;
    char what[128];
    snprintf(what, sizeof(what), "zero gradient %d x %d: weights only decay", rows, cols);
    check_bits(what, got, want);
    // two runs from the same state: the same bits (momentum, masters, BF16 weights)
    std::vector<float> g = rand_f32(n, 1.0), m0 = rand_f32(n, 0.1);
    std::vector<floatX> wb(n);
    for (size_t i = 0; i < n; i++) wb[i] = tobf(w[i]);
    std::vector<float> res[2], mres[2];
    std::vector<floatX> pres[2], srres[2];
    for (int run = 0; run < 2; run++) {   // a BF16 + SR update, then one with masters, from the same start
        dev_set(d_master, w);
        dev_set(d_params, wb);
        dev_set(d_m, m0);
        dev_set(d_g, g);
        muon_update_gpu(d_params, NULL, d_g, d_m, rows, cols, &p, 1.0f, 99, 5, NULL, &g_scratch, 0);
        srres[run] = dev_download(d_params, n);
        muon_update_gpu(d_params, d_master, d_g, d_m, rows, cols, &p, 1.0f, 99, 5, NULL, &g_scratch, 0);
        res[run] = dev_download(d_master, n);
        mres[run] = dev_download(d_m, n);
        pres[run] = dev_download(d_params, n);
    }
    snprintf(what, sizeof(what), "update %d x %d: run 2 vs run 1 (BF16 weights with SR)", rows, cols);
    check_bits(what, srres[1], srres[0]);
    snprintf(what, sizeof(what), "update %d x %d: run 2 vs run 1 (masters)", rows, cols);
    check_bits(what, res[1], res[0]);
    snprintf(what, sizeof(what), "update %d x %d: run 2 vs run 1 (momentum)", rows, cols);
    check_bits(what, mres[1], mres[0]);
    snprintf(what, sizeof(what), "update %d x %d: run 2 vs run 1 (BF16 weights)", rows, cols);
    check_bits(what, pres[1], pres[0]);
    cudaFree(d_m); cudaFree(d_g); cudaFree(d_master); cudaFree(d_params);
}

int main(void) {
    if (device_count_or_zero() == 0) {
        test_skip("muon_gpu", "no CUDA GPU on this machine");
        return test_summary("muon_gpu");
    }
    matmul_init();
    const NsFp4 all = ns_fp4_of("nvfp4", "all");   // (the scratch's copies serve every spec and set)
    muon_scratch_alloc(&g_scratch, 1536 * 384, 384 * 384, &all);
    test_ns(64, 64);
    test_ns(64, 256);
    test_ns(128, 384);
    test_ns(384, 1536);        // d6's fcw (transposed) and fcprojw
    test_band(64, 256);        // (a square Gaussian matrix has singular values far below 1e-3 of its norm, which
    test_band(48, 384);        // five steps do not lift into the band: wide ones only)
    test_update(64, 64, 1, 1, MUON_SCALE_MOONLIGHT, 3);
    test_update(192, 64, 1, 0, MUON_SCALE_KELLER, 3);      // tall: transposed
    test_update(64, 256, 0, 1, MUON_SCALE_MOONLIGHT, 3);   // wide, BF16 weights with SR
    test_update(1536, 384, 1, 1, MUON_SCALE_MOONLIGHT, 2); // d6's fcw
    test_update(384, 1536, 0, 1, MUON_SCALE_KELLER, 2);    // d6's fcprojw
    test_zero_and_repeat(192, 64);
    test_zero_and_repeat(384, 1536);
    // --ns-fp4
    const char* specs[3] = {"nvfp4", "nvfp4-2d", "mxfp4"};
    for (int i = 0; i < 3; i++) {
        test_ns_fp4_copies(specs[i], 64, 256);
        test_ns_fp4_copies(specs[i], 128, 384);
    }
    test_ns_fp4("nvfp4", "xx", 64, 256);        // the default set
    test_ns_fp4("nvfp4", "xx", 128, 384);
    test_ns_fp4("nvfp4", "xx", 384, 1536);
    test_ns_fp4("nvfp4-2d", "xx", 384, 1536);
    test_ns_fp4("mxfp4", "xx", 128, 384);
    test_ns_fp4("nvfp4", "all", 384, 1536);     // every quantized GEMM (stable on this input: the twin's band [0.64, 1.37])
    test_ns_fp4("nvfp4-2d", "xx,bx", 128, 384);
    const NsFp4 xx = ns_fp4_of("nvfp4", ""), xxbx = ns_fp4_of("nvfp4", "xx,bx");
    test_update(192, 64, 1, 1, MUON_SCALE_MOONLIGHT, 3, &xx);     // tall: transposed
    test_update(384, 1536, 0, 1, MUON_SCALE_KELLER, 2, &xx);      // d6's fcprojw, BF16 weights with SR
    test_update(1536, 384, 1, 1, MUON_SCALE_MOONLIGHT, 2, &xxbx); // d6's fcw
    muon_scratch_free(&g_scratch);
    matmul_destroy();
    return test_summary("muon_gpu");
}
