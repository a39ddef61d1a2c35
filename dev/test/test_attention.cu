// test_attention.cu: llmc/model/attention.cuh against a naive FP64 CPU reference, for both backends
// (cuDNN when built with it, and the own kernels), on small shapes including T not a multiple of 64,
// head sizes 32, 64, 128, and grouped-query attention (KVH key/value heads < NH query heads).
// Checks: out, stats and dqkv against the reference; every output element written (outputs are
// poisoned with NaN first, so an element left unwritten, or accumulated into, fails); dqkv
// overwritten rather than accumulated (the poison again); the own backward bitwise deterministic;
// own kernels, GQA: out, stats and dq bitwise equal to a multi-head run on the repeat_kv-expanded qkv
// (the same arithmetic reading the same K/V rows), and dk, dv equal to the head-group sums of that
// run's dk, dv (within BF16 rounding); the shape checks (NH % KVH, head size) fail with a message.
//
// Tolerances, and why. The reference runs in FP64 on exactly the BF16 inputs the GPU sees, so every
// difference comes from the GPU's rounding:
//   - out, dqkv are stored in BF16: relative rounding error up to 2^-9 = 0.2% of each element.
//   - P (the softmax) and dS are rounded to BF16 before the P.V, P^T.dO, dS^T.Q and dS.K GEMMs (both
//     cuDNN and our kernels do this, as does every flash attention): each product term carries up to
//     2^-9 relative error, and summed over many keys these errors mostly average out.
//   - dS = P * (dP - D) subtracts nearly equal numbers, so dq/dk elements can lose relative accuracy
//     where the difference is small: the error is relative to the size of the terms, not the result.
//   - Long rows make that cancellation worse: dq_i = scale * sum_j dS_ij K_j with sum_j dS_ij = 0, so
//     over ~1000 keys dq shrinks (rms 0.10 at T=1024 against 0.16 at T=256) while the rounding error,
//     a sum of ~1000 independent BF16 roundings of the terms, does not: its size is set by the terms,
//     ~2^-9 * sqrt(sum_j term_j^2) (the same holds for out, dk, dv with their terms). With only the
//     rms-relative bound below, a few dozen of 10^6 elements at T = 700..1024 reached 1.2-1.8x of it,
//     on both backends and with the same values (measured on an H100, cuDNN 9.14): rounding, not bugs.
//   - D_i = sum_d dO_id O_id is taken from the BF16 out (as FlashAttention-2 and cuDNN do), whose
//     error ~2^-9 (|O_id| + sqrt(sum of O_id's terms squared)) makes D_i off by ~2^-9 rss_D_i, rss_D_i =
//     sqrt(sum_d dO_id^2 (|O_id| + ...)^2). That shifts dq_id by scale dD_i sum_j P_ij K_jd and dk_jd by
//     sum_i scale P_ij dD_i Q_id: large where a row has few keys and |O| ~ |V| (dq of token 2 at T=1024
//     was off by 0.0057, 3x this estimate, on both backends alike). These enter as terms too.
// So each element must satisfy |got - want| <= ATOL * rms(want over the tensor) + RTOL * |want|
// + TERM_TOL * sqrt(sum of its terms squared) with RTOL = 2^-6 (four BF16 rounding steps), ATOL = 2^-5
// (of the tensor's rms, to cover elements near zero and the cancellation in dS) and TERM_TOL = 2^-5
// (16x the expected rounding error of the sum: a single wrong term, such as a key of the wrong
// key/value head, a masked key let in or a query head left out, is still caught unless it is below
// 1/32 of the root-sum-square of the terms), and the whole tensor ||got - want|| / ||want|| <= 2^-7.
// stats are FP32 all the way (scores from FP32 accumulation of exact BF16 products, exp/log in
// FP32), so they get 1e-3 absolute + 1e-3 relative: a 5-10x margin over FP32 exp/log error on
// rows of up to 2048 terms, yet far below what a wrong mask, scale or log base would give (>= 0.01).
#include <math.h>
#include <cmath>
#include <algorithm>
#include <vector>
#include "llmc/model/attention.cuh"
#include "dev/test/testing.h"

static const double ATOL_RMS = 1.0 / 32, RTOL = 1.0 / 64, TERM_TOL = 1.0 / 32, REL_L2 = 1.0 / 128;

static float bf16_to_float(floatX x) { return __bfloat162float(x); }

// Deterministic pseudo-random values in [-1, 1) (a 64-bit LCG; test data only).
static float test_uniform(uint64_t* s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

// Width of a token's row of qkv: NH q heads, KVH k heads, KVH v heads.
static size_t row_width(AttnShape sh) { return (size_t)(sh.NH + 2 * sh.KVH) * sh.HS; }

// Naive causal attention in FP64, with grouped-query attention as transformers' repeat_kv: query head
// h reads key/value head h / (NH / KVH), and the gradients of a key/value head sum over its query heads.
// qkv/dout are the BF16 inputs converted to float. out2 and dqkv2 hold, per element of out and dqkv,
// the sum of the squares of the terms summed into it (the scale of its rounding error).
static void reference(const std::vector<float>& qkv, const std::vector<float>& dout, AttnShape sh,
                      std::vector<double>& out, std::vector<double>& stats, std::vector<double>& dqkv,
                      std::vector<double>& out2, std::vector<double>& dqkv2) {
    const int B = sh.B, T = sh.T, NH = sh.NH, KVH = sh.KVH, HS = sh.HS, group = NH / KVH;
    const size_t C = (size_t)NH * HS, W = row_width(sh);
    const double scale = 1.0 / sqrt((double)HS);
    out.assign((size_t)B * T * C, 0.0);
    out2.assign((size_t)B * T * C, 0.0);
    stats.assign((size_t)B * NH * T, 0.0);
    dqkv.assign((size_t)B * T * W, 0.0);
    dqkv2.assign((size_t)B * T * W, 0.0);
    std::vector<double> p(T), dp(T), pk(HS);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const int kvh = h / group;
            const size_t qo = (size_t)h * HS, ko = C + (size_t)kvh * HS, vo = C + (size_t)(KVH + kvh) * HS;
            auto row = [&](int t) { return (size_t)(b * T + t) * W; };
            for (int i = 0; i < T; i++) {
                const float* qi = &qkv[row(i) + qo];
                const float* doi = &dout[(size_t)(b * T + i) * C + qo];
                double mx = -1e300;
                for (int j = 0; j <= i; j++) {
                    const float* kj = &qkv[row(j) + ko];
                    double s = 0;
                    for (int d = 0; d < HS; d++) s += (double)qi[d] * kj[d];
                    p[j] = s * scale;
                    mx = fmax(mx, p[j]);
                }
                double sum = 0;
                for (int j = 0; j <= i; j++) sum += exp(p[j] - mx);
                const double lse = mx + log(sum);
                stats[((size_t)b * NH + h) * T + i] = lse;
                for (int j = 0; j <= i; j++) p[j] = exp(p[j] - lse);
                double* o = &out[(size_t)(b * T + i) * C + qo];
                double* o2 = &out2[(size_t)(b * T + i) * C + qo];
                for (int j = 0; j <= i; j++) {
                    const float* vj = &qkv[row(j) + vo];
                    for (int d = 0; d < HS; d++) {
                        const double term = p[j] * vj[d];
                        o[d] += term;
                        o2[d] += term * term;
                    }
                }
                // scale of D_i's error on the GPU (from the BF16 out), see the tolerances above
                double rss_d = 0;
                for (int d = 0; d < HS; d++) {
                    const double e = (double)doi[d] * (fabs(o[d]) + sqrt(o2[d]));
                    rss_d += e * e;
                }
                rss_d = sqrt(rss_d);
                // backward for row i: dP_ij = dO_i . V_j; D_i = sum_j P_ij dP_ij; dS = P (dP - D)
                double D = 0;
                for (int j = 0; j <= i; j++) {
                    const float* vj = &qkv[row(j) + vo];
                    double s = 0;
                    for (int d = 0; d < HS; d++) s += (double)doi[d] * vj[d];
                    dp[j] = s;
                    D += p[j] * s;
                }
                double* dq = &dqkv[row(i) + qo];
                double* dq2 = &dqkv2[row(i) + qo];
                std::fill(pk.begin(), pk.end(), 0.0);
                for (int j = 0; j <= i; j++) {
                    const double ds = p[j] * (dp[j] - D);
                    const float* kj = &qkv[row(j) + ko];
                    double* dk = &dqkv[row(j) + ko];
                    double* dv = &dqkv[row(j) + vo];
                    double* dk2 = &dqkv2[row(j) + ko];
                    double* dv2 = &dqkv2[row(j) + vo];
                    for (int d = 0; d < HS; d++) {
                        const double tq = scale * ds * kj[d], tk = scale * ds * qi[d], tv = p[j] * doi[d];
                        const double tkd = scale * p[j] * rss_d * qi[d];   // dk's share of D_i's error
                        dq[d] += tq;
                        dk[d] += tk;
                        dv[d] += tv;
                        dq2[d] += tq * tq;
                        dk2[d] += tk * tk + tkd * tkd;
                        dv2[d] += tv * tv;
                        pk[d] += p[j] * kj[d];
                    }
                }
                for (int d = 0; d < HS; d++) {   // dq's share of D_i's error (the same dD_i for every key)
                    const double tqd = scale * rss_d * pk[d];
                    dq2[d] += tqd * tqd;
                }
            }
        }
}

// Elementwise and L2 comparison of a whole tensor; one CHECK each, with the worst element printed.
// term2 (optional): per element, the sum of its terms squared, for the TERM_TOL part of the bound.
static void compare(const char* what, const std::vector<float>& got, const std::vector<double>& want, double atol_abs,
                    double atol_rms, double rtol, double rel_l2, const std::vector<double>* term2 = NULL) {
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
        const double err = fabs((double)got[i] - want[i]);
        const double tol = atol + rtol * fabs(want[i]) + (term2 ? TERM_TOL * sqrt((*term2)[i]) : 0.0);
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

// Columns [c0, c0 + n) of every token's row (width w) of a (B*T, w) tensor, as float and double.
template <typename T>
static std::vector<double> columns_d(const std::vector<T>& x, size_t rows, size_t w, size_t c0, size_t n) {
    std::vector<double> r;
    r.reserve(rows * n);
    for (size_t t = 0; t < rows; t++)
        for (size_t c = 0; c < n; c++) r.push_back((double)x[t * w + c0 + c]);
    return r;
}
static std::vector<float> columns_f(const std::vector<float>& x, size_t rows, size_t w, size_t c0, size_t n) {
    std::vector<float> r;
    r.reserve(rows * n);
    for (size_t t = 0; t < rows; t++)
        for (size_t c = 0; c < n; c++) r.push_back(x[t * w + c0 + c]);
    return r;
}

// One shape's inputs (BF16, and the same values as float) and its FP64 reference, computed once for
// both backends.
typedef struct {
    AttnShape sh;
    std::vector<floatX> h_qkv, h_dout;
    std::vector<float> f_qkv, f_dout;
    std::vector<double> r_out, r_stats, r_dqkv, r_out2, r_dqkv2;
} Case;

static void make_case(Case* c, AttnShape sh) {
    c->sh = sh;
    const size_t n_qkv = (size_t)sh.B * sh.T * row_width(sh), n_out = (size_t)sh.B * sh.T * sh.NH * sh.HS;
    c->h_qkv.resize(n_qkv);
    c->f_qkv.resize(n_qkv);
    c->h_dout.resize(n_out);
    c->f_dout.resize(n_out);
    uint64_t seed = 1234567u + (uint64_t)sh.T * 31 + sh.HS + (sh.KVH != sh.NH ? (uint64_t)sh.KVH * 7919 : 0);
    for (size_t i = 0; i < n_qkv; i++) { c->h_qkv[i] = __float2bfloat16(2.0f * test_uniform(&seed)); c->f_qkv[i] = bf16_to_float(c->h_qkv[i]); }
    for (size_t i = 0; i < n_out; i++) { c->h_dout[i] = __float2bfloat16(test_uniform(&seed)); c->f_dout[i] = bf16_to_float(c->h_dout[i]); }
    reference(c->f_qkv, c->f_dout, sh, c->r_out, c->r_stats, c->r_dqkv, c->r_out2, c->r_dqkv2);
}

// Device buffers of one attention call, outputs poisoned (all-ones bytes are NaN in BF16 and FP32).
typedef struct {
    floatX *qkv, *out, *dout, *dqkv;
    float* stats;
    size_t n_qkv, n_out, n_stats;
} GpuBufs;

static void gpu_alloc(GpuBufs* g, AttnShape sh, const floatX* h_qkv, const floatX* h_dout) {
    g->n_qkv = (size_t)sh.B * sh.T * row_width(sh);
    g->n_out = (size_t)sh.B * sh.T * sh.NH * sh.HS;
    g->n_stats = (size_t)sh.B * sh.NH * sh.T;
    cuda_check(cudaMalloc(&g->qkv, g->n_qkv * sizeof(floatX)));
    cuda_check(cudaMalloc(&g->dqkv, g->n_qkv * sizeof(floatX)));
    cuda_check(cudaMalloc(&g->out, g->n_out * sizeof(floatX)));
    cuda_check(cudaMalloc(&g->dout, g->n_out * sizeof(floatX)));
    cuda_check(cudaMalloc(&g->stats, g->n_stats * sizeof(float)));
    cuda_check(cudaMemcpy(g->qkv, h_qkv, g->n_qkv * sizeof(floatX), cudaMemcpyHostToDevice));
    cuda_check(cudaMemcpy(g->dout, h_dout, g->n_out * sizeof(floatX), cudaMemcpyHostToDevice));
    cuda_check(cudaMemset(g->out, 0xff, g->n_out * sizeof(floatX)));
    cuda_check(cudaMemset(g->stats, 0xff, g->n_stats * sizeof(float)));
    cuda_check(cudaMemset(g->dqkv, 0xff, g->n_qkv * sizeof(floatX)));
}
static void gpu_free(GpuBufs* g) {
    cuda_check(cudaFree(g->qkv));
    cuda_check(cudaFree(g->dqkv));
    cuda_check(cudaFree(g->out));
    cuda_check(cudaFree(g->dout));
    cuda_check(cudaFree(g->stats));
}

static void run_forward(const GpuBufs* g, AttnShape sh) {
    attention_forward(g->out, g->stats, g->qkv, sh, 0);
}
static void run_backward(const GpuBufs* g, AttnShape sh) {
    attention_backward(g->dqkv, g->dout, g->qkv, g->out, g->stats, sh, 0);
}

template <typename T>
static std::vector<T> download(const T* d, size_t n) {
    std::vector<T> h(n);
    cuda_check(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

// Own kernels, GQA: the same call on repeat_kv-expanded qkv (B, T, 3, NH, HS) must give the same out,
// stats and dq bits (each query head's arithmetic is the same, on the same K/V values), and dk, dv of a
// key/value head must be the sum of the expanded run's dk, dv over the group. That run rounds each
// head's FP32 sum to BF16 and the GQA run rounds the FP32 group sum once, so they differ by at most the
// BF16 rounding (round to nearest: at most 2^-8 of the rounded FP32 value, so 2^-8 (1 + 2^-8) of the
// BF16 one) of each: |got - sum_h x_h| <= (2^-8 + 2^-15) (sum_h |x_h| + |got|), plus 2^-16 of that
// magnitude and of the tensor's rms for the two FP32 sums' different order (~2^-24 per addition).
static void check_against_expanded(const Case* c, const char* name, const std::vector<floatX>& g_out,
                                   const std::vector<float>& g_stats, const std::vector<floatX>& g_dqkv) {
    const AttnShape sh = c->sh;
    const AttnShape mh = {sh.B, sh.T, sh.NH, sh.NH, sh.HS};
    const int group = sh.NH / sh.KVH;
    const size_t rows = (size_t)sh.B * sh.T, HS = sh.HS, C = (size_t)sh.NH * HS, W = row_width(sh), W3 = 3 * C;
    std::vector<floatX> x_qkv(rows * W3);
    for (size_t t = 0; t < rows; t++)
        for (int h = 0; h < sh.NH; h++) {
            const int kvh = h / group;
            for (size_t d = 0; d < HS; d++) {
                x_qkv[t * W3 + h * HS + d] = c->h_qkv[t * W + h * HS + d];
                x_qkv[t * W3 + C + h * HS + d] = c->h_qkv[t * W + C + kvh * HS + d];
                x_qkv[t * W3 + 2 * C + h * HS + d] = c->h_qkv[t * W + C + (sh.KVH + kvh) * HS + d];
            }
        }
    GpuBufs g;
    gpu_alloc(&g, mh, x_qkv.data(), c->h_dout.data());
    run_forward(&g, mh);
    run_backward(&g, mh);
    cuda_check(cudaDeviceSynchronize());
    std::vector<floatX> x_out = download(g.out, g.n_out), x_dqkv = download(g.dqkv, g.n_qkv);
    std::vector<float> x_stats = download(g.stats, g.n_stats);
    gpu_free(&g);
    CHECK(memcmp(x_out.data(), g_out.data(), g_out.size() * sizeof(floatX)) == 0, "%s: out differs from the expanded multi-head run", name);
    CHECK(memcmp(x_stats.data(), g_stats.data(), g_stats.size() * sizeof(float)) == 0, "%s: stats differ from the expanded multi-head run", name);
    bool dq_same = true;
    for (size_t t = 0; t < rows && dq_same; t++)
        dq_same = memcmp(&x_dqkv[t * W3], &g_dqkv[t * W], C * sizeof(floatX)) == 0;
    CHECK(dq_same, "%s: dq differs from the expanded multi-head run", name);
    for (int part = 1; part <= 2; part++) {
        const size_t n = rows * sh.KVH * HS;
        std::vector<double> want(n), mag(n), got(n);
        double ss = 0;
        for (size_t t = 0; t < rows; t++)
            for (int kvh = 0; kvh < sh.KVH; kvh++)
                for (size_t d = 0; d < HS; d++) {
                    const size_t i = (t * sh.KVH + kvh) * HS + d;
                    double sum = 0, abs_sum = 0;
                    for (int j = 0; j < group; j++) {
                        const double x = bf16_to_float(x_dqkv[t * W3 + part * C + (kvh * group + j) * HS + d]);
                        sum += x;
                        abs_sum += fabs(x);
                    }
                    want[i] = sum;
                    mag[i] = abs_sum;
                    got[i] = bf16_to_float(g_dqkv[t * W + C + ((part - 1) * sh.KVH + kvh) * HS + d]);
                    ss += sum * sum;
                }
        const double rms_floor = ldexp(sqrt(ss / (double)n), -16);
        size_t bad = 0, worst = 0;
        double worst_excess = -1;
        for (size_t i = 0; i < n; i++) {
            const double mag_i = mag[i] + fabs(got[i]);
            const double err = fabs(got[i] - want[i]), tol = (ldexp(1.0, -8) + ldexp(1.0, -15) + ldexp(1.0, -16)) * mag_i + rms_floor;
            if (!(err <= tol)) bad++;
            const double excess = std::isnan(err) ? 1e300 : err / tol;
            if (excess > worst_excess) { worst_excess = excess; worst = i; }
        }
        const char* what = part == 1 ? "dk" : "dv";
        CHECK(bad == 0, "%s: %s: %zu of %zu elements differ from the expanded run's group sums by more than BF16 rounding; "
              "worst [%zu] got %.6g want %.6g", name, what, bad, n, worst, got[worst], want[worst]);
        printf("  %s = group sum of the expanded run's: max err/bound %.3f\n", what, worst_excess);
    }
}

// det: attention_set_deterministic (cuDNN builds its backward without atomics when on; the own kernels are
// deterministic either way). A deterministic backend must repeat its backward bit for bit.
static void run_case(const Case* c, bool own, bool det) {
    const AttnShape sh = c->sh;
    attention_set_deterministic(det ? 1 : 0);
    // A fresh start per cuDNN case: a shape cuDNN refuses would otherwise switch it off for the rest.
    if (!own) { attention_destroy(); attention_init(); }
    attention_force_own_kernel(own ? 1 : 0);
    const char* backend = attention_backend_name();
    char name[192];
    snprintf(name, sizeof(name), "%s%s B=%d T=%d NH=%d KVH=%d HS=%d", own ? "own" : "cudnn",
             own ? "" : det ? " deterministic" : " atomic-dQ", sh.B, sh.T, sh.NH, sh.KVH, sh.HS);
    if (!own && strcmp(backend, "cudnn") != 0) {
        CHECK(0, "%s: cuDNN backend not available: %s", name, attention_cudnn_unavailable_reason());
        return;
    }
    printf("case %s (backend %s)\n", name, backend);
    GpuBufs g;
    gpu_alloc(&g, sh, c->h_qkv.data(), c->h_dout.data());
    run_forward(&g, sh);
    run_backward(&g, sh);
    cuda_check(cudaDeviceSynchronize());
    CHECK(strcmp(attention_backend_name(), backend) == 0, "%s: backend changed during the run to '%s': %s", name,
          attention_backend_name(), attention_cudnn_unavailable_reason());

    std::vector<floatX> g_out = download(g.out, g.n_out), g_dqkv = download(g.dqkv, g.n_qkv);
    std::vector<float> g_stats = download(g.stats, g.n_stats);
    std::vector<float> f_out(g.n_out), f_dqkv(g.n_qkv);
    for (size_t i = 0; i < g.n_out; i++) f_out[i] = bf16_to_float(g_out[i]);
    for (size_t i = 0; i < g.n_qkv; i++) f_dqkv[i] = bf16_to_float(g_dqkv[i]);
    compare("out", f_out, c->r_out, 0.0, ATOL_RMS, RTOL, REL_L2, &c->r_out2);
    compare("stats", g_stats, c->r_stats, 1e-3, 0.0, 1e-3, 1e-3);
    // split dqkv into dq (NH heads), dk and dv (KVH heads each) for clearer messages
    const size_t rows = (size_t)sh.B * sh.T, W = row_width(sh), C = (size_t)sh.NH * sh.HS, KC = (size_t)sh.KVH * sh.HS;
    const size_t c0[3] = {0, C, C + KC}, n[3] = {C, KC, KC};
    for (int part = 0; part < 3; part++) {
        const std::vector<double> term2 = columns_d(c->r_dqkv2, rows, W, c0[part], n[part]);
        compare(part == 0 ? "dq" : part == 1 ? "dk" : "dv", columns_f(f_dqkv, rows, W, c0[part], n[part]),
                columns_d(c->r_dqkv, rows, W, c0[part], n[part]), 0.0, ATOL_RMS, RTOL, REL_L2, &term2);
    }

    if (own || det) {
        // a deterministic backward must be bitwise reproducible
        cuda_check(cudaMemset(g.dqkv, 0xff, g.n_qkv * sizeof(floatX)));
        run_backward(&g, sh);
        std::vector<floatX> again = download(g.dqkv, g.n_qkv);
        CHECK(memcmp(again.data(), g_dqkv.data(), g.n_qkv * sizeof(floatX)) == 0, "%s: backward not bitwise deterministic", name);
    }
    if (own && sh.KVH != sh.NH) check_against_expanded(c, name, g_out, g_stats, g_dqkv);
    gpu_free(&g);
    attention_set_deterministic(1);
}

#ifdef ENABLE_CUDNN
// cuDNN's backward at a training shape (GPT-2 d12's heads, 16 x 1024 tokens), where its atomic dQ sums were
// seen to differ between runs: REPEATS backwards of the deterministic graph must give the same bits; the
// atomic-dQ graph's results must agree with them to within rounding (how many of its repeats differ in
// any bit is printed, not asserted: atomics may happen to land in the same order).
static void test_cudnn_repeat(void) {
    const AttnShape sh = {16, 1024, 12, 12, 64};
    const int REPEATS = 5;
    const size_t n_qkv = (size_t)sh.B * sh.T * row_width(sh), n_out = (size_t)sh.B * sh.T * sh.NH * sh.HS;
    std::vector<floatX> h_qkv(n_qkv), h_dout(n_out);
    uint64_t seed = 0x5eed;
    for (auto& x : h_qkv) x = __float2bfloat16(2.0f * test_uniform(&seed) - 1.0f);
    for (auto& x : h_dout) x = __float2bfloat16((2.0f * test_uniform(&seed) - 1.0f) * 0.01f);
    GpuBufs g;
    gpu_alloc(&g, sh, h_qkv.data(), h_dout.data());
    std::vector<floatX> first;
    for (int det = 1; det >= 0; det--) {
        attention_set_deterministic(det);
        attention_destroy();
        attention_init();
        attention_force_own_kernel(0);
        if (strcmp(attention_backend_name(), "cudnn") != 0) {
            CHECK(0, "cuDNN repeat test: cuDNN backend not available: %s", attention_cudnn_unavailable_reason());
            break;
        }
        run_forward(&g, sh);
        int differ = 0;
        double worst = 0.0;
        for (int k = 0; k < REPEATS; k++) {
            cuda_check(cudaMemset(g.dqkv, 0xff, n_qkv * sizeof(floatX)));
            run_backward(&g, sh);
            std::vector<floatX> d = download(g.dqkv, n_qkv);
            CHECK(strcmp(attention_backend_name(), "cudnn") == 0, "cuDNN repeat test (%s): fell back to the own kernel: %s",
                  det ? "deterministic" : "atomic dQ", attention_cudnn_unavailable_reason());
            if (first.empty()) { first = d; continue; }
            if (memcmp(d.data(), first.data(), n_qkv * sizeof(floatX)) != 0) differ++;
            double num = 0.0, den = 0.0;
            for (size_t i = 0; i < n_qkv; i++) {
                const double a = bf16_to_float(d[i]), b = bf16_to_float(first[i]);
                num += (a - b) * (a - b);
                den += b * b;
            }
            if (den > 0 && sqrt(num / den) > worst) worst = sqrt(num / den);
        }
        if (det) {
            CHECK(differ == 0, "cuDNN deterministic backward B=%d T=%d NH=%d HS=%d: %d of %d repeats differ in some bit",
                  sh.B, sh.T, sh.NH, sh.HS, differ, REPEATS - 1);
        } else {
            CHECK(worst < REL_L2, "cuDNN atomic-dQ backward against the deterministic one: relative L2 %.3g (bound %.3g)",
                  worst, REL_L2);
            printf("  cuDNN atomic-dQ backward: %d of %d repeats differ in some bit from the deterministic one "
                   "(relative L2 at most %.3g)\n", differ, REPEATS, worst);
        }
    }
    attention_set_deterministic(1);
    gpu_free(&g);
}
#endif

// The shape checks run on the host, before any GPU work: a bad shape ends the program with a message.
static void check_shape_child(const void* arg) { attn_check_shape("attention_forward", *(const AttnShape*)arg); }

static void test_shape_checks(void) {
    const struct { AttnShape sh; const char* says; } bad[] = {
        {{1, 64, 6, 4, 64}, "do not split into groups"},     // NH % KVH != 0
        {{1, 64, 4, 8, 64}, "do not split into groups"},     // more kv heads than q heads
        {{1, 64, 4, 0, 64}, "bad shape"},
        {{1, 64, 4, 2, 96}, "head size 96 is not supported"},
    };
    for (const auto& b : bad) {
        char err[1024];
        const int rc = test_run_child(check_shape_child, &b.sh, err, sizeof(err));
        CHECK(rc == 1 && strstr(err, b.says) != NULL, "shape NH=%d KVH=%d HS=%d: exit %d, message '%s' (want exit 1 and '%s')",
              b.sh.NH, b.sh.KVH, b.sh.HS, rc, err, b.says);
    }
    const AttnShape good[] = {{1, 64, 4, 2, 64}, {1, 64, 8, 1, 128}, {1, 64, 5, 5, 32}};
    for (const auto& sh : good) {
        char err[1024];
        const int rc = test_run_child(check_shape_child, &sh, err, sizeof(err));
        CHECK(rc == 0, "shape NH=%d KVH=%d HS=%d refused: %s", sh.NH, sh.KVH, sh.HS, err);
    }
}

int main(void) {
    test_shape_checks();
    if (device_count_or_zero() == 0) {
        test_skip("attention", "no CUDA GPU on this machine");
        return test_summary("attention");
    }
    attention_set_verbose(1);   // print every cuDNN build failure and the engines chosen
    attention_init();
    printf("attention backend at start: %s%s%s\n", attention_backend_name(),
           attention_cudnn_unavailable_reason()[0] ? "; cuDNN: " : "", attention_cudnn_unavailable_reason());
    const AttnShape mha[] = {   // B, T, NH, KVH = NH, HS: multi-head attention, as GPT-2 calls it
        {1, 256, 12, 12, 64},   // GPT-2 head layout
        {2, 128, 4, 4, 64},
        {2, 100, 4, 4, 64},     // T not a multiple of 64
        {1, 200, 2, 2, 32},
        {2, 77, 2, 2, 128},
        {1, 64, 3, 3, 32},
        {2, 1, 2, 2, 64},       // a single token
    };
    const AttnShape gqa[] = {   // B, T, NH, KVH, HS: grouped-query attention
        {2, 1024, 4, 2, 64},    // groups of 2
        {4, 640, 8, 2, 128},    // groups of 4 (B*T = 2560)
        {3, 1000, 5, 5, 128},   // llama-30m's heads (KVH == NH, odd NH), T not a multiple of 64
        {3, 700, 4, 2, 64},     // GQA with T not a multiple of 64
        {2, 513, 6, 1, 64},     // multi-query (one kv head), one token past a tile
        {4, 256, 4, 2, 32},     // llama-tiny's heads
        {2, 1, 4, 2, 64},       // a single token
    };
    std::vector<Case> cases(sizeof(mha) / sizeof(mha[0]) + sizeof(gqa) / sizeof(gqa[0]));
    size_t nc = 0;
    for (const auto& sh : mha) make_case(&cases[nc++], sh);
    for (const auto& sh : gqa) make_case(&cases[nc++], sh);
    for (const auto& c : cases) run_case(&c, true, true);
#ifdef ENABLE_CUDNN
    for (const auto& c : cases) run_case(&c, false, true);
    for (const auto& c : cases) run_case(&c, false, false);
    test_cudnn_repeat();
#else
    test_skip("attention cuDNN backend", "built without cuDNN (no -DENABLE_CUDNN)");
#endif
    attention_destroy();
    return test_summary("attention");
}
