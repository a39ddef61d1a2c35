// test_matmul_fp4_gpu.cu: the native NVFP4 GEMM (llmc/fp4/matmul_fp4.cuh).
//   any GPU:    fp4_swizzle_scales_gpu == fp4_swizzle_scales_cpu, byte for byte (padding included);
//               the availability probe says no, with its one-line reason, off compute capability 10.x.
//   cc 10.x:    the three GEMMs of a linear layer (operands from our quantizer, scales swizzled on the
//               device) against the emulation: the same quantizer's dequantized BF16 copies through
//               llmc/base/matmul.cuh with the same alpha; and an FP32-output GEMM against the CPU reference
//               that reads the very bytes cuBLASLt reads. Agreement to FP32 rounding (plus one BF16 ulp
//               for BF16 outputs). Plans are cached (a repeated shape builds nothing).
// Skips (exit 0) without a GPU; skips the GEMM part (counted) off cc 10.x.
#include <math.h>
#include <vector>
#include "dev/ref/nvfp4_ref.cuh"
#include "llmc/fp4/matmul_fp4.cuh"
#include "dev/test/testing.h"

static uint32_t g_lcg = 99;
static uint32_t lcg(void) { g_lcg = g_lcg * 1664525u + 1013904223u; return g_lcg; }
static float urand(void) { return (float)((lcg() >> 8) + 0.5) / 16777216.0f; }
static float nrand(void) { return sqrtf(-2.0f * logf(urand())) * cosf(6.2831853f * urand()); }

template <typename T>
static T* dev_alloc(size_t n) {
    T* p;
    const size_t bytes = n * sizeof(T);
    cuda_check(cudaMalloc(&p, bytes ? bytes : 1));
    return p;
}
template <typename T>
static std::vector<T> to_host(const T* d, size_t n) {
    std::vector<T> h(n);
    cuda_check(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

// ----------------------------------------------------------------------------------------------------
// swizzle kernel vs CPU twin (runs on every GPU)

static void test_swizzle_gpu(int R, int C) {
    const size_t bytes = matmul_fp4_scale_bytes(R, C);
    std::vector<uint8_t> src((size_t)R * C), want(bytes);
    for (auto& b : src) b = (uint8_t)(1 + lcg() % 255);
    fp4_swizzle_scales_cpu(want.data(), src.data(), R, C);
    uint8_t* d_src = dev_alloc<uint8_t>(src.size());
    uint8_t* d_dst = dev_alloc<uint8_t>(bytes);
    cuda_check(cudaMemcpy(d_src, src.data(), src.size(), cudaMemcpyHostToDevice));
    cuda_check(cudaMemset(d_dst, 0xA5, bytes));
    fp4_swizzle_scales_gpu(d_dst, d_src, R, C, 0);
    std::vector<uint8_t> got = to_host(d_dst, bytes);
    CHECK(got == want, "fp4_swizzle_scales_gpu(%d x %d) != CPU twin", R, C);
    cudaFree(d_src);
    cudaFree(d_dst);
}

// ----------------------------------------------------------------------------------------------------
// native GEMMs vs emulation (cc 10.x only)

struct Copy {           // one quantized copy of a tensor: fake (view layout), packed, swizzled scales
    floatX* fake;
    uint8_t *codes, *scales, *sw;
    float *amax, *dec;
    int M, K;
};

static Copy copy_alloc(int rows, int cols, int axis) {
    Copy c;
    c.M = axis ? rows : cols;
    c.K = axis ? cols : rows;
    c.fake = dev_alloc<floatX>((size_t)rows * cols);
    c.codes = dev_alloc<uint8_t>((size_t)c.M * c.K / 2);
    c.scales = dev_alloc<uint8_t>((size_t)c.M * c.K / 16);
    c.sw = dev_alloc<uint8_t>(matmul_fp4_scale_bytes(c.M, c.K / 16));
    c.amax = dev_alloc<float>(1);
    c.dec = dev_alloc<float>(1);
    return c;
}
static void copy_free(Copy* c) {
    cudaFree(c->fake); cudaFree(c->codes); cudaFree(c->scales); cudaFree(c->sw); cudaFree(c->amax); cudaFree(c->dec);
}
// the copy as the native GEMM reads it
static Fp4Operand packed(const Copy& c) { return Fp4Operand{c.codes, c.sw}; }

static QuantParams spec(const char* txt) {
    QuantSpec s;
    char err[512];
    fail_if(quant_spec_parse(txt, &s, err, sizeof(err)), "%s", err);
    QuantParams p = quant_params(&s);
    fail_if(!matmul_fp4_spec_ok(&p), "spec %s is not native-capable", txt);
    return p;
}

// Both copies of a rows x cols BF16 tensor in one quantizer pass, then their scales swizzled.
static void quantize_two(const floatX* in, int rows, int cols, const char* spec_rw, const char* spec_cw,
                         uint64_t key_rw, uint64_t key_cw, Copy* rw, Copy* cw) {
    QuantParams prw = spec(spec_rw), pcw = spec(spec_cw);
    QuantTarget t[2];
    t[0] = quant_target_packed(&prw, 1, key_rw, rw->codes, rw->scales, rw->amax, rw->dec);
    t[0].fake = rw->fake; t[0].ld_fake = cols;
    t[1] = quant_target_packed(&pcw, 0, key_cw, cw->codes, cw->scales, cw->amax, cw->dec);
    t[1].fake = cw->fake; t[1].ld_fake = cols;
    quantize_gpu(in, rows, cols, cols, t, 2, 0);
    fp4_swizzle_scales_gpu(rw->sw, rw->scales, rw->M, rw->K / 16, 0);
    fp4_swizzle_scales_gpu(cw->sw, cw->scales, cw->M, cw->K / 16, 0);
}

static floatX* random_bf16(int rows, int cols) {
    std::vector<uint16_t> h((size_t)rows * cols);
    for (int r = 0; r < rows; r++) {
        float s = ldexpf(1.0f, (int)(lcg() % 9) - 4);
        for (int c = 0; c < cols; c++) h[(size_t)r * cols + c] = bf16_bits_rne(nrand() * s);
    }
    floatX* d = dev_alloc<floatX>(h.size());
    cuda_check(cudaMemcpy(d, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
    return d;
}

static std::vector<float> host_floats(const floatX* d, size_t n) {
    std::vector<uint16_t> h(n);
    cuda_check(cudaMemcpy(h.data(), d, n * 2, cudaMemcpyDeviceToHost));
    std::vector<float> f(n);
    for (size_t i = 0; i < n; i++) f[i] = bf16_bits_to_float(h[i]);
    return f;
}

// |got - want| <= 2^-16 * alpha * sum_k |a||b| (FP32 summation in two orders) + 1 BF16 ulp of want for BF16
// outputs, or 2 FP32 ulps of want for FP32 outputs (the accumulate add rounds once more).
// A(m, k) = a[m * a_sm + k * a_sk], B(n, k) = b[n * b_sn + k * b_sk]; outputs out[n * M + m].
static void compare(const char* what, const std::vector<float>& got, const std::vector<float>& want, float alpha,
                    const std::vector<float>& a, int64_t a_sm, int64_t a_sk, const std::vector<float>& b, int64_t b_sn,
                    int64_t b_sk, int M, int N, int K, int bf16_out) {
    int bad = 0;
    int64_t first = -1;
    double fg = 0, fw = 0, ftol = 0;
    for (int n = 0; n < N; n++)
        for (int m = 0; m < M; m++) {
            double abssum = 0;
            for (int k = 0; k < K; k++) abssum += fabs((double)a[m * a_sm + k * a_sk] * b[n * b_sn + k * b_sk]);
            const int64_t i = (int64_t)n * M + m;
            double tol = ldexp(fabs(alpha) * abssum, -16) + (bf16_out ? ldexp(fabs(want[i]), -7) : ldexp(fabs(want[i]), -22)) + 1e-30;
            double err = fabs((double)got[i] - (double)want[i]);
            if (!(err <= tol)) {
                if (first < 0) { first = i; fg = got[i]; fw = want[i]; ftol = tol; }
                bad++;
            }
        }
    CHECK(bad == 0, "%s: %d of %d outputs off, first at %lld: got %.9g want %.9g tol %.3g", what, bad, M * N,
          (long long)first, fg, fw, ftol);
}

static void test_native_linear(int Ntok, int C, int OC) {
    floatX* X = random_bf16(Ntok, C);
    floatX* W = random_bf16(OC, C);
    floatX* dY = random_bf16(Ntok, OC);
    floatX* bias = random_bf16(1, OC);
    Copy x_rw = copy_alloc(Ntok, C, 1), x_cw = copy_alloc(Ntok, C, 0);
    Copy w_rw = copy_alloc(OC, C, 1), w_cw = copy_alloc(OC, C, 0);
    Copy g_rw = copy_alloc(Ntok, OC, 1), g_cw = copy_alloc(Ntok, OC, 0);
    quantize_two(X, Ntok, C, "nvfp4", "nvfp4,h16", 0, 0, &x_rw, &x_cw);
    quantize_two(W, OC, C, "nvfp4-2d", "nvfp4-2d", 0, 0, &w_rw, &w_cw);
    quantize_two(dY, Ntok, OC, "nvfp4,sr", "nvfp4,h16,sr", rng_key(5, 1, 21), rng_key(5, 1, 22), &g_rw, &g_cw);
    float* alphas = dev_alloc<float>(3);
    matmul_fp4_alpha_gpu(alphas + 0, w_rw.dec, x_rw.dec, 0);
    matmul_fp4_alpha_gpu(alphas + 1, w_cw.dec, g_rw.dec, 0);
    matmul_fp4_alpha_gpu(alphas + 2, x_cw.dec, g_cw.dec, 0);
    std::vector<float> alpha = to_host(alphas, 3);

    std::vector<float> xr = host_floats(x_rw.fake, (size_t)Ntok * C), xc = host_floats(x_cw.fake, (size_t)Ntok * C);
    std::vector<float> wr = host_floats(w_rw.fake, (size_t)OC * C), wc = host_floats(w_cw.fake, (size_t)OC * C);
    std::vector<float> gr = host_floats(g_rw.fake, (size_t)Ntok * OC), gc = host_floats(g_cw.fake, (size_t)Ntok * OC);
    char what[160];

    // fprop: out (Ntok x OC) = X @ W^T + bias
    {
        floatX* o_nat = dev_alloc<floatX>((size_t)Ntok * OC);
        floatX* o_emu = dev_alloc<floatX>((size_t)Ntok * OC);
        matmul_fp4_forward(o_nat, packed(x_rw), packed(w_rw), bias, Ntok, C, OC, alphas + 0, 0);
        matmul_forward(o_emu, x_rw.fake, w_rw.fake, bias, Ntok, C, OC, alphas + 0, 0);
        snprintf(what, sizeof(what), "fprop N=%d C=%d OC=%d", Ntok, C, OC);
        compare(what, host_floats(o_nat, (size_t)Ntok * OC), host_floats(o_emu, (size_t)Ntok * OC), alpha[0],
                wr, C, 1, xr, C, 1, OC, Ntok, C, 1);
        const int plans = g_matmul_fp4.num_plans;
        matmul_fp4_forward(o_nat, packed(x_rw), packed(w_rw), bias, Ntok, C, OC, alphas + 0, 0);
        CHECK(g_matmul_fp4.num_plans == plans, "a repeated shape built a new plan");
        cudaFree(o_nat); cudaFree(o_emu);
    }
    // dgrad: dX (Ntok x C) = dY @ W
    {
        floatX* o_nat = dev_alloc<floatX>((size_t)Ntok * C);
        floatX* o_emu = dev_alloc<floatX>((size_t)Ntok * C);
        matmul_fp4_dgrad(o_nat, packed(g_rw), packed(w_cw), Ntok, C, OC, alphas + 1, 0);
        matmul_dgrad(o_emu, g_rw.fake, w_cw.fake, Ntok, C, OC, alphas + 1, 0);
        snprintf(what, sizeof(what), "dgrad N=%d C=%d OC=%d", Ntok, C, OC);
        // A(m=c, k=o) = W[o][c], B(n, k=o) = dY[n][o]
        compare(what, host_floats(o_nat, (size_t)Ntok * C), host_floats(o_emu, (size_t)Ntok * C), alpha[1],
                wc, 1, C, gr, OC, 1, C, Ntok, OC, 1);
        cudaFree(o_nat); cudaFree(o_emu);
    }
    // wgrad: dW (OC x C, FP32) += dY^T @ X
    {
        std::vector<float> init((size_t)OC * C);
        for (auto& v : init) v = nrand();
        float* o_nat = dev_alloc<float>(init.size());
        float* o_emu = dev_alloc<float>(init.size());
        cuda_check(cudaMemcpy(o_nat, init.data(), init.size() * 4, cudaMemcpyHostToDevice));
        cuda_check(cudaMemcpy(o_emu, init.data(), init.size() * 4, cudaMemcpyHostToDevice));
        matmul_fp4_wgrad(o_nat, packed(g_cw), packed(x_cw), Ntok, C, OC, alphas + 2, 0);
        matmul_wgrad(o_emu, g_cw.fake, x_cw.fake, Ntok, C, OC, alphas + 2, 0);
        snprintf(what, sizeof(what), "wgrad N=%d C=%d OC=%d", Ntok, C, OC);
        // A(m=c, k=n) = X[n][c], B(n'=o, k=n) = dY[n][o]
        compare(what, to_host(o_nat, init.size()), to_host(o_emu, init.size()), alpha[2], xc, 1, C, gc, 1, OC,
                C, OC, Ntok, 0);
        cudaFree(o_nat); cudaFree(o_emu);
    }
    // FP32 output against the CPU reference on the device's own bytes (codes + swizzled scales)
    {
        float* o_nat = dev_alloc<float>((size_t)Ntok * OC);
        matmul_fp4_native({.ptr = o_nat, .ld = OC, .f32 = 1, .accumulate = 0, .bias = NULL}, packed(w_rw), packed(x_rw),
                          OC, Ntok, C, alphas + 0, 0);
        std::vector<uint8_t> wc8 = to_host(w_rw.codes, (size_t)OC * C / 2), ws = to_host(w_rw.sw, matmul_fp4_scale_bytes(OC, C / 16));
        std::vector<uint8_t> xc8 = to_host(x_rw.codes, (size_t)Ntok * C / 2), xs = to_host(x_rw.sw, matmul_fp4_scale_bytes(Ntok, C / 16));
        std::vector<float> ref((size_t)Ntok * OC);
        const Fp4Operand w_host = {wc8.data(), ws.data()}, x_host = {xc8.data(), xs.data()};
        matmul_fp4_reference_cpu(ref.data(), w_host, x_host, OC, Ntok, C, alpha[0], NULL, 0);
        snprintf(what, sizeof(what), "native FP32 vs CPU reference N=%d C=%d OC=%d", Ntok, C, OC);
        compare(what, to_host(o_nat, ref.size()), ref, alpha[0], wr, C, 1, xr, C, 1, OC, Ntok, C, 0);
        cudaFree(o_nat);
    }
    cuda_check(cudaDeviceSynchronize());
    copy_free(&x_rw); copy_free(&x_cw); copy_free(&w_rw); copy_free(&w_cw); copy_free(&g_rw); copy_free(&g_cw);
    cudaFree(X); cudaFree(W); cudaFree(dY); cudaFree(bias); cudaFree(alphas);
}

// matmul_fp4_alpha_gpu: the GEMM's alpha, the FP32 product of the two tensor scales, on any GPU (one IEEE multiply:
// the host's product bit for bit, subnormal results and overflow included).
static void test_alpha_gpu(void) {
    const float pairs[][2] = {{1.0f, 1.0f}, {0.0123f, 3.75e-3f}, {2.5e-20f, 1.0e-20f}, {1.0e-30f, 1.0e-10f},
                              {3.0e20f, 4.0e20f}, {-2.0f, 0.5f}, {1.1754944e-38f, 0.75f}};
    const int n = (int)(sizeof(pairs) / sizeof(pairs[0]));
    float *a = dev_alloc<float>(n), *b = dev_alloc<float>(n), *out = dev_alloc<float>(n);
    std::vector<float> ha(n), hb(n);
    for (int i = 0; i < n; i++) { ha[i] = pairs[i][0]; hb[i] = pairs[i][1]; }
    cuda_check(cudaMemcpy(a, ha.data(), n * 4, cudaMemcpyHostToDevice));
    cuda_check(cudaMemcpy(b, hb.data(), n * 4, cudaMemcpyHostToDevice));
    for (int i = 0; i < n; i++) matmul_fp4_alpha_gpu(out + i, a + i, b + i, 0);
    const std::vector<float> got = to_host(out, n);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        const float want = ha[i] * hb[i];
        if (f32_bits(got[i]) != f32_bits(want) && bad++ < 3)
            printf("  alpha %g * %g: got %.9g, want %.9g\n", ha[i], hb[i], got[i], want);
    }
    CHECK(bad == 0, "matmul_fp4_alpha_gpu: %d of %d products differ from the host's", bad, n);
    cudaFree(a); cudaFree(b); cudaFree(out);
}

int main(void) {
    if (device_count_or_zero() == 0) {
        test_skip("matmul_fp4 gpu", "no CUDA GPU on this machine");
        return test_summary("matmul_fp4_gpu");
    }
    const int shapes[][2] = {{1, 2}, {5, 3}, {128, 4}, {129, 5}, {160, 6}, {300, 7}, {768, 48}, {8192, 192}};
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) test_swizzle_gpu(shapes[i][0], shapes[i][1]);
    test_alpha_gpu();

    int dev, major, minor;
    cuda_check(cudaGetDevice(&dev));
    cuda_check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    cuda_check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    matmul_init();
    const int avail = matmul_fp4_native_available();
    const char* reason = matmul_fp4_native_reason();
    printf("matmul_fp4: %s\n", reason);
    if (major != 10) {
        char msg[160];
        snprintf(msg, sizeof(msg), "native NVFP4 GEMM needs compute capability 10.x (this GPU is %d.%d)", major, minor);
        CHECK(!avail, "the native path claims availability on cc %d.%d", major, minor);
        CHECK(!MATMUL_FP4_HAVE_LT || strcmp(reason, msg) == 0, "reason '%s', want '%s'", reason, msg);
        test_skip("matmul_fp4_native", msg);
    } else if (!avail) {
        CHECK(0, "cc %d.%d but the native NVFP4 GEMM is unavailable: %s", major, minor, reason);
    } else {
        test_native_linear(160, 96, 224);    // padding in every scale matrix (rows and 16-blocks)
        test_native_linear(512, 256, 768);
        test_native_linear(256, 768, 2304);  // GPT-2 c_attn widths
    }
    matmul_fp4_destroy();
    matmul_destroy();
    return test_summary("matmul_fp4_gpu");
}
