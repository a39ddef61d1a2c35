// test_attention.cu: llmc/model/attention.cuh against a naive FP64 CPU reference, for both backends
// (cuDNN when built with it, and the own kernels), on small shapes including T not a multiple of 64
// and head sizes 32, 64, 128.
// Checks: out, stats and dqkv against the reference; every output element written (outputs are
// poisoned with NaN first, so an element left unwritten, or accumulated into, fails); dqkv
// overwritten rather than accumulated (the poison again); the own backward bitwise deterministic.
//
// Tolerances, and why. The reference runs in FP64 on exactly the BF16 inputs the GPU sees, so every
// difference comes from the GPU's rounding:
//   - out, dqkv are stored in BF16: relative rounding error up to 2^-9 = 0.2% of each element.
//   - P (the softmax) and dS are rounded to BF16 before the P.V, P^T.dO, dS^T.Q and dS.K GEMMs (both
//     cuDNN and our kernels do this, as does every flash attention): each product term carries up to
//     2^-9 relative error, and summed over many keys these errors mostly average out.
//   - dS = P * (dP - D) subtracts nearly equal numbers, so dq/dk elements can lose relative accuracy
//     where the difference is small: the error is relative to the size of the terms, not the result.
// So each element must satisfy |got - want| <= ATOL * rms(want over the tensor) + RTOL * |want| with
// RTOL = 2^-6 (four BF16 rounding steps) and ATOL = 2^-5 (of the tensor's rms, to cover elements
// near zero and the cancellation in dS), and the whole tensor ||got - want|| / ||want|| <= 2^-7.
// stats are FP32 all the way (scores from FP32 accumulation of exact BF16 products, exp/log in
// FP32), so they get 1e-3 absolute + 1e-3 relative: a 5-10x margin over FP32 exp/log error on
// rows of up to 200 terms, yet far below what a wrong mask, scale or log base would give (>= 0.01).
#include <math.h>
#include <cmath>
#include <vector>
#include "llmc/model/attention.cuh"
#include "dev/test/testing.h"

static const double ATOL_RMS = 1.0 / 32, RTOL = 1.0 / 64, REL_L2 = 1.0 / 128;

static float bf16_to_float(floatX x) { return __bfloat162float(x); }

// Deterministic pseudo-random values in [-1, 1) (a 64-bit LCG; test data only).
static float test_uniform(uint64_t* s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

// Naive causal attention in FP64. q/k/v/dout are the BF16 inputs converted to float.
static void reference(const std::vector<float>& qkv, const std::vector<float>& dout, int B, int T, int NH, int HS,
                      std::vector<double>& out, std::vector<double>& stats, std::vector<double>& dqkv) {
    const int C = NH * HS;
    const double scale = 1.0 / sqrt((double)HS);
    out.assign((size_t)B * T * C, 0.0);
    stats.assign((size_t)B * NH * T, 0.0);
    dqkv.assign((size_t)B * T * 3 * C, 0.0);
    std::vector<double> p(T), dp(T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            auto Q = [&](int t, int d) { return (double)qkv[((size_t)(b * T + t) * 3 + 0) * C + h * HS + d]; };
            auto K = [&](int t, int d) { return (double)qkv[((size_t)(b * T + t) * 3 + 1) * C + h * HS + d]; };
            auto V = [&](int t, int d) { return (double)qkv[((size_t)(b * T + t) * 3 + 2) * C + h * HS + d]; };
            auto dO = [&](int t, int d) { return (double)dout[(size_t)(b * T + t) * C + h * HS + d]; };
            for (int i = 0; i < T; i++) {
                double mx = -1e300;
                for (int j = 0; j <= i; j++) {
                    double s = 0;
                    for (int d = 0; d < HS; d++) s += Q(i, d) * K(j, d);
                    p[j] = s * scale;
                    mx = fmax(mx, p[j]);
                }
                double sum = 0;
                for (int j = 0; j <= i; j++) sum += exp(p[j] - mx);
                const double lse = mx + log(sum);
                stats[((size_t)b * NH + h) * T + i] = lse;
                for (int j = 0; j <= i; j++) p[j] = exp(p[j] - lse);
                double* o = &out[(size_t)(b * T + i) * C + h * HS];
                for (int j = 0; j <= i; j++)
                    for (int d = 0; d < HS; d++) o[d] += p[j] * V(j, d);
                // backward for row i: dP_ij = dO_i . V_j; D_i = sum_j P_ij dP_ij; dS = P (dP - D)
                double D = 0;
                for (int j = 0; j <= i; j++) {
                    double s = 0;
                    for (int d = 0; d < HS; d++) s += dO(i, d) * V(j, d);
                    dp[j] = s;
                    D += p[j] * s;
                }
                double* dq = &dqkv[((size_t)(b * T + i) * 3 + 0) * C + h * HS];
                for (int j = 0; j <= i; j++) {
                    const double ds = p[j] * (dp[j] - D);
                    double* dk = &dqkv[((size_t)(b * T + j) * 3 + 1) * C + h * HS];
                    double* dv = &dqkv[((size_t)(b * T + j) * 3 + 2) * C + h * HS];
                    for (int d = 0; d < HS; d++) {
                        dq[d] += scale * ds * K(j, d);
                        dk[d] += scale * ds * Q(i, d);
                        dv[d] += p[j] * dO(i, d);
                    }
                }
            }
        }
}

// Elementwise and L2 comparison of a whole tensor; one CHECK each, with the worst element printed.
static void compare(const char* what, const std::vector<float>& got, const std::vector<double>& want, double atol_abs,
                    double atol_rms, double rtol, double rel_l2) {
    double ss = 0, se = 0;
    for (size_t i = 0; i < want.size(); i++) ss += want[i] * want[i];
    const double rms = sqrt(ss / (double)want.size());
    // A tensor whose exact value is all zeros (dq, dk at T=1: one key, softmax gradient 0) has no
    // scale of its own; cuDNN leaves FP32 rounding residue there (~1e-7 on O(1) inputs), so such a
    // tensor is held to 1e-6 absolute.
    const double atol = atol_abs + atol_rms * rms + (rms == 0.0 ? 1e-6 : 0.0);
    size_t bad = 0, worst = 0;
    double worst_excess = -1;
    for (size_t i = 0; i < want.size(); i++) {
        const double err = fabs((double)got[i] - want[i]), tol = atol + rtol * fabs(want[i]);
        if (!(err <= tol)) bad++;                       // NaN counts as bad
        const double excess = std::isnan(err) ? 1e300 : err / tol;
        if (excess > worst_excess) { worst_excess = excess; worst = i; }
        se += std::isnan(err) ? 1e300 : err * err;
    }
    const double l2 = sqrt(se / (ss > 0 ? ss : 1));
    CHECK(bad == 0, "%s: %zu of %zu elements out of tolerance; worst [%zu] got %.6g want %.6g (atol %.3g rtol %.3g)",
          what, bad, want.size(), worst, (double)got[worst], want[worst], atol, rtol);
    CHECK(l2 <= rel_l2, "%s: relative L2 error %.3g > %.3g", what, l2, rel_l2);
    printf("  %-6s rms %.3g  max err/tol %.3f  rel L2 %.2e\n", what, rms, worst_excess, l2);
}

static void run_case(int B, int T, int NH, int HS, bool own) {
    // A fresh start per cuDNN case: a shape cuDNN refuses would otherwise switch it off for the rest.
    if (!own) { attention_destroy(); attention_init(); }
    attention_force_own_kernel(own ? 1 : 0);
    const char* backend = attention_backend_name();
    char name[160];
    snprintf(name, sizeof(name), "%s B=%d T=%d NH=%d HS=%d", own ? "own" : "cudnn", B, T, NH, HS);
    if (!own && strcmp(backend, "cudnn") != 0) {
        CHECK(0, "%s: cuDNN backend not available: %s", name, attention_cudnn_unavailable_reason());
        return;
    }
    printf("case %s (backend %s)\n", name, backend);
    const int C = NH * HS;
    const size_t n_qkv = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C, n_stats = (size_t)B * NH * T;
    std::vector<floatX> h_qkv(n_qkv), h_dout(n_out);
    std::vector<float> f_qkv(n_qkv), f_dout(n_out);
    uint64_t seed = 1234567u + (uint64_t)T * 31 + HS;
    for (size_t i = 0; i < n_qkv; i++) { h_qkv[i] = __float2bfloat16(2.0f * test_uniform(&seed)); f_qkv[i] = bf16_to_float(h_qkv[i]); }
    for (size_t i = 0; i < n_out; i++) { h_dout[i] = __float2bfloat16(test_uniform(&seed)); f_dout[i] = bf16_to_float(h_dout[i]); }

    floatX *d_qkv, *d_out, *d_dout, *d_dqkv;
    float* d_stats;
    cuda_check(cudaMalloc(&d_qkv, n_qkv * sizeof(floatX)));
    cuda_check(cudaMalloc(&d_dqkv, n_qkv * sizeof(floatX)));
    cuda_check(cudaMalloc(&d_out, n_out * sizeof(floatX)));
    cuda_check(cudaMalloc(&d_dout, n_out * sizeof(floatX)));
    cuda_check(cudaMalloc(&d_stats, n_stats * sizeof(float)));
    cuda_check(cudaMemcpy(d_qkv, h_qkv.data(), n_qkv * sizeof(floatX), cudaMemcpyHostToDevice));
    cuda_check(cudaMemcpy(d_dout, h_dout.data(), n_out * sizeof(floatX), cudaMemcpyHostToDevice));
    // poison: all-ones bytes are NaN in both BF16 and FP32
    cuda_check(cudaMemset(d_out, 0xff, n_out * sizeof(floatX)));
    cuda_check(cudaMemset(d_stats, 0xff, n_stats * sizeof(float)));
    cuda_check(cudaMemset(d_dqkv, 0xff, n_qkv * sizeof(floatX)));

    attention_forward(d_out, d_stats, d_qkv, B, T, NH, HS, 0);
    attention_backward(d_dqkv, d_dout, d_qkv, d_out, d_stats, B, T, NH, HS, 0);
    cuda_check(cudaDeviceSynchronize());
    CHECK(strcmp(attention_backend_name(), backend) == 0, "%s: backend changed during the run to '%s': %s", name,
          attention_backend_name(), attention_cudnn_unavailable_reason());

    std::vector<floatX> g_out(n_out), g_dqkv(n_qkv);
    std::vector<float> g_stats(n_stats);
    cuda_check(cudaMemcpy(g_out.data(), d_out, n_out * sizeof(floatX), cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(g_dqkv.data(), d_dqkv, n_qkv * sizeof(floatX), cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(g_stats.data(), d_stats, n_stats * sizeof(float), cudaMemcpyDeviceToHost));

    std::vector<double> r_out, r_stats, r_dqkv;
    reference(f_qkv, f_dout, B, T, NH, HS, r_out, r_stats, r_dqkv);
    std::vector<float> f_out(n_out), f_dqkv(n_qkv);
    for (size_t i = 0; i < n_out; i++) f_out[i] = bf16_to_float(g_out[i]);
    for (size_t i = 0; i < n_qkv; i++) f_dqkv[i] = bf16_to_float(g_dqkv[i]);
    compare("out", f_out, r_out, 0.0, ATOL_RMS, RTOL, REL_L2);
    compare("stats", g_stats, r_stats, 1e-3, 0.0, 1e-3, 1e-3);
    // split dqkv into dq, dk, dv for clearer messages
    for (int part = 0; part < 3; part++) {
        std::vector<float> g;
        std::vector<double> w;
        for (size_t bt = 0; bt < (size_t)B * T; bt++)
            for (int c = 0; c < C; c++) {
                g.push_back(f_dqkv[(bt * 3 + part) * C + c]);
                w.push_back(r_dqkv[(bt * 3 + part) * C + c]);
            }
        compare(part == 0 ? "dq" : part == 1 ? "dk" : "dv", g, w, 0.0, ATOL_RMS, RTOL, REL_L2);
    }

    if (own) {
        // the own backward must be bitwise reproducible (no atomics)
        cuda_check(cudaMemset(d_dqkv, 0xff, n_qkv * sizeof(floatX)));
        attention_backward(d_dqkv, d_dout, d_qkv, d_out, d_stats, B, T, NH, HS, 0);
        std::vector<floatX> again(n_qkv);
        cuda_check(cudaMemcpy(again.data(), d_dqkv, n_qkv * sizeof(floatX), cudaMemcpyDeviceToHost));
        CHECK(memcmp(again.data(), g_dqkv.data(), n_qkv * sizeof(floatX)) == 0, "%s: backward not bitwise deterministic", name);
    }
    cuda_check(cudaFree(d_qkv));
    cuda_check(cudaFree(d_dqkv));
    cuda_check(cudaFree(d_out));
    cuda_check(cudaFree(d_dout));
    cuda_check(cudaFree(d_stats));
}

int main(void) {
    if (device_count_or_zero() == 0) {
        test_skip("attention", "no CUDA GPU on this machine");
        return test_summary("attention");
    }
    attention_set_verbose(1);   // print every cuDNN build failure and the engines chosen
    attention_init();
    printf("attention backend at start: %s%s%s\n", attention_backend_name(),
           attention_cudnn_unavailable_reason()[0] ? "; cuDNN: " : "", attention_cudnn_unavailable_reason());
    const int shapes[][4] = {   // B, T, NH, HS
        {1, 256, 12, 64},       // GPT-2 head layout
        {2, 128, 4, 64},
        {2, 100, 4, 64},        // T not a multiple of 64
        {1, 200, 2, 32},
        {2, 77, 2, 128},
        {1, 64, 3, 32},
        {2, 1, 2, 64},          // a single token
    };
    for (const auto& s : shapes) run_case(s[0], s[1], s[2], s[3], true);
#ifdef ENABLE_CUDNN
    for (const auto& s : shapes) run_case(s[0], s[1], s[2], s[3], false);
#else
    test_skip("attention cuDNN backend", "built without cuDNN (no -DENABLE_CUDNN)");
#endif
    attention_destroy();
    return test_summary("attention");
}
