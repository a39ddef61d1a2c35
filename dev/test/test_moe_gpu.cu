// test_moe_gpu.cu: the MoE routing kernels (llmc/model/moe.cuh) against their CPU twin (llmc/model/moe.h), which is
// the spec (docs/MOE.md). Each case routes N tokens (N a multiple of nothing) over E experts with both families and
// then runs the whole chain on both sides: routing, the dropless permutation, gather, combine (with the shared
// experts' base, and without weights: the gather's backward), the combine's backward, the routing weights' gradient,
// the aux and z losses with their gradients, the bias update. Logits hold ties (coarse grids, rows of equal values,
// -0 beside +0, sigmoid scores saturated at 1), NaN logits (a few per row, and a row of NaN only), and cases put
// every token on one expert or starve the last expert. Outputs are poisoned (a finite value no kernel writes) before
// each run, so an element a kernel does not write fails.
// What is compared, as moe.h's header classes it:
//   bit for bit: ids and weights (both families: their exponentials are moe_exp / moe_sigmoid, double rounded once,
//     "exact in practice": a failure there would be a double result on either side of a float rounding boundary,
//     which these inputs do not hit), counts, offsets, row_of, slot_of_row, gather, combine, the combine's dyp, the
//     routing weights' gradient from given dweights, the bias update. "Same bits" counts any two NaNs as equal (the
//     host's and the GPU's default NaNs differ in sign and payload);
//   to a tolerance: dweights (FP32 sums: (ceil(C / 32) + 8) 2^-24 sum |terms|), the losses (one float ulp, 2^-23
//     relative, with a margin: 1e-6), and their gradients (2^-22 (|result| + |term|): the exponentials and the log
//     are exact in practice, the term is one float rounding of a double, added once).
// Every case runs twice on the GPU; the second run must give the first's bits everywhere.
#include <vector>
#include <math.h>
#include "llmc/model/moe.cuh"   // moe_route_gpu, moe_permute_gpu, moe_gather_gpu, moe_combine_gpu, ... (and moe.h)
#include "dev/test/testing.h"

#define KERNEL_CHECK_SEED 0x5851F42D4C957F2Dull
#include "dev/test/kernel_check.cuh"   // rng, device buffers, check_array, check_bits, as_double

#define AUX_ALPHA 0.01f
#define Z_BETA 0.001f
#define BIAS_GAMMA 0.001f

struct Case {
    const char* name;
    MoeScore kind;
    int N, E, k, multiple, C;
    bool starve_last;   // expert E-1 gets no token
    bool one_expert;    // every token on expert 3 (k = 1, no special rows)
};

// --- comparisons ---------------------------------------------------------------------------------------------------

static bool same_f32(float a, float b) { return (a != a && b != b) || memcmp(&a, &b, 4) == 0; }
static bool same_bf16(floatX a, floatX b) {
    float fa = bf(a), fb = bf(b);
    return (fa != fa && fb != fb) || memcmp(&a, &b, 2) == 0;
}
static void check_same_f32(const char* what, const std::vector<float>& got, const std::vector<float>& want) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < want.size(); i++)
        if (!same_f32(got[i], want[i])) {
            if (bad < 3) printf("  %s[%zu]: got %.9g want %.9g\n", what, i, got[i], want[i]);
            if (!bad) first = i;
            bad++;
        }
    CHECK(bad == 0 && got.size() == want.size(), "%s: %zu of %zu differ from the twin's bits (first at %zu)", what,
          bad, want.size(), first);
    if (!bad) printf("  ok %-58s n=%-8zu bit for bit\n", what, want.size());
}
// want: the twin's FP32 values, which the kernel rounds once to BF16 (moe_bf16_rne).
static void check_same_bf16(const char* what, const std::vector<floatX>& got, const std::vector<float>& want) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < want.size(); i++) {
        const float r = moe_bf16_rne(want[i]);
        uint32_t u;
        memcpy(&u, &r, 4);
        __nv_bfloat16_raw raw;
        raw.x = (unsigned short)(u >> 16);
        const floatX w = raw;
        if (!same_bf16(got[i], w)) {
            if (bad < 3) printf("  %s[%zu]: got %.9g want %.9g\n", what, i, bf(got[i]), r);
            if (!bad) first = i;
            bad++;
        }
    }
    CHECK(bad == 0 && got.size() == want.size(), "%s: %zu of %zu differ from the twin's bits (first at %zu)", what,
          bad, want.size(), first);
    if (!bad) printf("  ok %-58s n=%-8zu bit for bit\n", what, want.size());
}
static void check_same_ints(const char* what, const std::vector<int>& got, const std::vector<int>& want) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < want.size(); i++)
        if (got[i] != want[i]) {
            if (bad < 3) printf("  %s[%zu]: got %d want %d\n", what, i, got[i], want[i]);
            if (!bad) first = i;
            bad++;
        }
    CHECK(bad == 0 && got.size() == want.size(), "%s: %zu of %zu differ from the twin (first at %zu)", what, bad,
          want.size(), first);
    if (!bad) printf("  ok %-58s n=%-8zu exact\n", what, want.size());
}
// A gradient ADDED into start: |got - want| <= 2^-22 (|want| + |want - start|).
static void check_added(const char* what, const std::vector<float>& got, const std::vector<float>& want,
                        const std::vector<float>& start) {
    std::vector<double> tol(want.size());
    for (size_t i = 0; i < want.size(); i++)
        tol[i] = ldexp(fabs((double)want[i]) + fabs((double)want[i] - start[i]), -22) + 1e-38;
    check_array(what, as_double(got), as_double(want), tol);
}
static char* label(const Case& c, const char* what) {
    static char buf[160];
    snprintf(buf, sizeof(buf), "%s: %s", c.name, what);
    return buf;
}

// Outputs are filled with 0x7F bytes before a run: a finite value no kernel writes (3.4e38 in FP32 and BF16, 2^31 - 1
// about in int), so an element left unwritten fails even where the twin's value is NaN.
template <class T> static void poison_finite(T* p, size_t n) { cuda_check(cudaMemset(p, 0x7F, n * sizeof(T))); }

// --- inputs --------------------------------------------------------------------------------------------------------

static std::vector<float> make_logits(const Case& c) {
    const int N = c.N, E = c.E;
    std::vector<float> l((size_t)N * E);
    for (int t = 0; t < N; t++) {
        float* r = l.data() + (size_t)t * E;
        for (int i = 0; i < E; i++) r[i] = (float)(2.0 * randn());
        if (c.one_expert) { r[3] = 40.0f; continue; }
        if (t % 7 == 1)                                  // a coarse grid: many ties
            for (int i = 0; i < E; i++) r[i] = (float)(0.5 * floor(2.0 * randn()));
        if (t % 11 == 2)                                 // every score equal: the lowest indices win
            for (int i = 0; i < E; i++) r[i] = 0.75f;
        if (t % 13 == 3) {                               // -0 against +0, the rest below
            for (int i = 0; i < E; i++) r[i] = (float)(-1.0 - fabs(randn()));
            r[0] = -0.0f; r[1] = 0.0f; r[E - 1] = -0.0f;
        }
        if (t % 9 == 6 && c.kind == MOE_SCORE_SIGMOID)   // sigmoid saturated at 1: ties among large logits
            for (int i = 0; i < E; i += 2) r[i] = (float)(30.0 + 10.0 * uniform01());
        if (t % 17 == 4) { r[1 % E] = NAN; r[E / 2] = NAN; }   // a few NaN: they rank last
        if (t == 5)                                      // a row of NaN only: still k distinct experts
            for (int i = 0; i < E; i++) r[i] = NAN;
        if (c.starve_last && t != 5) r[E - 1] = c.kind == MOE_SCORE_SOFTMAX ? -1e4f : -100.0f;   // (NaN rank last)
    }
    return l;
}
// A selection bias on a coarse grid (equal biases keep ties), the starved expert pushed down further.
static std::vector<float> make_bias(const Case& c) {
    std::vector<float> b(c.E);
    for (int i = 0; i < c.E; i++) b[i] = 0.0625f * (float)(i % 3) - 0.0625f;
    if (c.starve_last) b[c.E - 1] = -1.0f;
    if (c.one_expert) b[3] = 1.0f;
    return b;
}
static std::vector<float> to_f32(const std::vector<floatX>& v) {
    std::vector<float> f(v.size());
    for (size_t i = 0; i < v.size(); i++) f[i] = bf(v[i]);
    return f;
}
static std::vector<float> no_nan(std::vector<float> v) {
    for (float& x : v) if (x != x) x = 0.0f;
    return v;
}

// --- everything a case computes ------------------------------------------------------------------------------------

struct Inputs {
    std::vector<float> logits, clean, bias;              // clean: NaN -> 0 (the losses' input)
    std::vector<floatX> x, yp, base, dout;
    std::vector<float> dweights_in;                      // the routing weights' gradient fed to both sides
    std::vector<float> dl_route0, dl_aux0, dl_z0;        // where the gradients are added
};
struct Outputs {
    std::vector<int> ids, counts, offsets, row_of, slot_of_row;
    std::vector<float> weights, dweights, dl_route, dl_aux, dl_z, bias_after;
    std::vector<floatX> xp, out, dx, dyp;
    float aux = 0.0f, z = 0.0f;
    // the twin's FP32 results before the kernels' BF16 rounding
    std::vector<float> xp_f, out_f, dx_f, dyp_f;
};

static Outputs run_twin(const Case& c, const Inputs& in, int rows_cap) {
    const int N = c.N, E = c.E, k = c.k, C = c.C;
    Outputs o;
    o.ids.resize((size_t)N * k);
    o.weights.resize((size_t)N * k);
    moe_route(c.kind, in.logits.data(), in.bias.data(), N, E, k, o.ids.data(), o.weights.data());
    o.counts.resize(E);
    o.offsets.resize(E + 1);
    o.row_of.resize((size_t)N * k);
    o.slot_of_row.resize(rows_cap);
    MoePerm perm = {o.counts.data(), o.offsets.data(), o.row_of.data(), o.slot_of_row.data()};
    moe_permute(o.ids.data(), N, E, k, c.multiple, perm, rows_cap);
    const std::vector<float> x = to_f32(in.x), yp = to_f32(in.yp), base = to_f32(in.base), dout = to_f32(in.dout);
    o.xp_f.resize((size_t)rows_cap * C);
    moe_gather(x.data(), N, C, k, o.slot_of_row.data(), rows_cap, o.xp_f.data());
    o.out_f.resize((size_t)N * C);
    o.dx_f.resize((size_t)N * C);
    moe_combine(MoeRouted{yp.data(), o.row_of.data(), o.weights.data(), rows_cap}, base.data(), N, k, C,
                o.out_f.data());
    moe_combine(MoeRouted{yp.data(), o.row_of.data(), NULL, rows_cap}, NULL, N, k, C, o.dx_f.data());
    o.dyp_f.resize((size_t)rows_cap * C);
    o.dweights.resize((size_t)N * k);
    moe_combine_backward(dout.data(), MoeRouted{yp.data(), o.row_of.data(), o.weights.data(), rows_cap}, N, k, C,
                         o.dyp_f.data(), o.dweights.data());
    o.dl_route = in.dl_route0;
    moe_route_backward(c.kind, in.logits.data(), o.ids.data(), o.weights.data(), in.dweights_in.data(), N, E, k,
                       o.dl_route.data());
    o.dl_aux = in.dl_aux0;
    o.aux = moe_aux_loss(c.kind, in.clean.data(), o.counts.data(), N, E, k, AUX_ALPHA, o.dl_aux.data());
    o.dl_z = in.dl_z0;
    o.z = moe_z_loss(in.clean.data(), N, E, Z_BETA, o.dl_z.data());
    std::vector<int64_t> load(o.counts.begin(), o.counts.end());
    o.bias_after = in.bias;
    moe_bias_update(load.data(), E, BIAS_GAMMA, o.bias_after.data());
    return o;
}

static Outputs run_gpu(const Case& c, const Inputs& in, int rows_cap) {
    const int N = c.N, E = c.E, k = c.k, C = c.C, NK = N * k;
    const cudaStream_t s = 0;
    float* logits = dev_upload(in.logits);
    float* clean = dev_upload(in.clean);
    float* bias = dev_upload(in.bias);
    floatX *x = dev_upload(in.x), *yp = dev_upload(in.yp), *base = dev_upload(in.base), *dout = dev_upload(in.dout);
    float* dweights_in = dev_upload(in.dweights_in);
    float* dl_route = dev_upload(in.dl_route0);
    float* dl_aux = dev_upload(in.dl_aux0);
    float* dl_z = dev_upload(in.dl_z0);
    int* ids = dev_alloc<int>(NK);
    float* weights = dev_alloc<float>(NK);
    float* dweights = dev_alloc<float>(NK);
    MoePerm perm = {dev_alloc<int>(E), dev_alloc<int>(E + 1), dev_alloc<int>(NK), dev_alloc<int>(rows_cap)};
    floatX* xp = dev_alloc<floatX>((size_t)rows_cap * C);
    floatX* dyp = dev_alloc<floatX>((size_t)rows_cap * C);
    floatX* out = dev_alloc<floatX>((size_t)N * C);
    floatX* dx = dev_alloc<floatX>((size_t)N * C);
    float* losses = dev_alloc<float>(2);
    std::vector<int64_t> h_load(E);
    int64_t* load = dev_alloc<int64_t>(E);
    void* pscratch = dev_alloc<char>(moe_permute_scratch_bytes(N, E, k));
    void* lscratch = dev_alloc<char>(moe_loss_scratch_bytes(N));
    poison_finite(ids, NK); poison_finite(weights, NK); poison_finite(dweights, NK);
    poison_finite(perm.counts, E); poison_finite(perm.offsets, E + 1); poison_finite(perm.row_of, NK);
    poison_finite(perm.slot_of_row, rows_cap);
    poison_finite(xp, (size_t)rows_cap * C); poison_finite(dyp, (size_t)rows_cap * C);
    poison_finite(out, (size_t)N * C); poison_finite(dx, (size_t)N * C); poison_finite(losses, 2);

    moe_route_gpu(c.kind, logits, bias, N, E, k, ids, weights, s);
    moe_permute_gpu(ids, N, E, k, c.multiple, perm, rows_cap, pscratch, s);
    moe_gather_gpu(x, N, C, k, perm.slot_of_row, rows_cap, xp, s);
    moe_combine_gpu(yp, perm.row_of, weights, base, N, k, C, out, s);
    moe_combine_gpu(yp, perm.row_of, NULL, NULL, N, k, C, dx, s);
    moe_combine_backward_gpu(dout, yp, perm, weights, rows_cap, N, k, C, dyp, dweights, s);
    moe_route_backward_gpu(c.kind, logits, ids, weights, dweights_in, N, E, k, dl_route, s);
    moe_aux_loss_gpu(c.kind, clean, perm.counts, N, E, k, AUX_ALPHA, dl_aux, losses, lscratch, s);
    moe_z_loss_gpu(clean, N, E, Z_BETA, dl_z, losses + 1, lscratch, s);

    Outputs o;
    o.ids = dev_download(ids, NK);
    o.weights = dev_download(weights, NK);
    o.counts = dev_download(perm.counts, E);
    o.offsets = dev_download(perm.offsets, E + 1);
    o.row_of = dev_download(perm.row_of, NK);
    o.slot_of_row = dev_download(perm.slot_of_row, rows_cap);
    o.xp = dev_download(xp, (size_t)rows_cap * C);
    o.out = dev_download(out, (size_t)N * C);
    o.dx = dev_download(dx, (size_t)N * C);
    o.dyp = dev_download(dyp, (size_t)rows_cap * C);
    o.dweights = dev_download(dweights, NK);
    o.dl_route = dev_download(dl_route, (size_t)N * E);
    o.dl_aux = dev_download(dl_aux, (size_t)N * E);
    o.dl_z = dev_download(dl_z, (size_t)N * E);
    std::vector<float> l = dev_download(losses, 2);
    o.aux = l[0];
    o.z = l[1];
    for (int e = 0; e < E; e++) h_load[e] = o.counts[e];   // the step's load: this micro-step's counts
    dev_set(load, h_load);
    moe_bias_update_gpu(load, E, BIAS_GAMMA, bias, s);
    o.bias_after = dev_download(bias, E);
    cuda_check(cudaFree(logits)); cuda_check(cudaFree(clean)); cuda_check(cudaFree(bias));
    cuda_check(cudaFree(x)); cuda_check(cudaFree(yp)); cuda_check(cudaFree(base)); cuda_check(cudaFree(dout));
    cuda_check(cudaFree(dweights_in)); cuda_check(cudaFree(dl_route)); cuda_check(cudaFree(dl_aux));
    cuda_check(cudaFree(dl_z)); cuda_check(cudaFree(ids)); cuda_check(cudaFree(weights));
    cuda_check(cudaFree(dweights)); cuda_check(cudaFree(perm.counts)); cuda_check(cudaFree(perm.offsets));
    cuda_check(cudaFree(perm.row_of)); cuda_check(cudaFree(perm.slot_of_row)); cuda_check(cudaFree(xp));
    cuda_check(cudaFree(dyp)); cuda_check(cudaFree(out)); cuda_check(cudaFree(dx)); cuda_check(cudaFree(losses));
    cuda_check(cudaFree(load)); cuda_check(cudaFree(pscratch)); cuda_check(cudaFree(lscratch));
    return o;
}

// --- one case ------------------------------------------------------------------------------------------------------

static void test_case(const Case& c) {
    const int N = c.N, E = c.E, k = c.k, C = c.C;
    const int rows_cap = (int)moe_rows_bound(N, E, k, c.multiple);
    printf("%s (%s, N %d, E %d, k %d, multiple %d, C %d, rows_cap %d)\n", c.name, MOE_SCORE_NAMES[c.kind], N, E, k,
           c.multiple, C, rows_cap);
    Inputs in;
    in.logits = make_logits(c);
    in.clean = no_nan(in.logits);
    in.bias = make_bias(c);
    in.x = rand_bf16((size_t)N * C, 1.0);
    in.yp = rand_bf16((size_t)rows_cap * C, 1.0);
    in.base = rand_bf16((size_t)N * C, 0.5);
    in.dout = rand_bf16((size_t)N * C, 1.0);
    in.dweights_in = rand_f32((size_t)N * k, 1.0);
    in.dl_route0 = rand_f32((size_t)N * E, 0.01);
    in.dl_aux0 = rand_f32((size_t)N * E, 1e-4);
    in.dl_z0 = rand_f32((size_t)N * E, 1e-4);

    const Outputs w = run_twin(c, in, rows_cap);
    // the case tests what it says
    if (c.starve_last) CHECK(w.counts[E - 1] == 0, "%s: expert %d has %d tokens, not 0", c.name, E - 1, w.counts[E - 1]);
    if (c.one_expert) CHECK(w.counts[3] == N * k, "%s: expert 3 has %d of %d slots", c.name, w.counts[3], N * k);

    const Outputs g = run_gpu(c, in, rows_cap);
    check_same_ints(label(c, "route ids"), g.ids, w.ids);
    check_same_f32(label(c, "route weights"), g.weights, w.weights);
    check_same_ints(label(c, "permute counts"), g.counts, w.counts);
    check_same_ints(label(c, "permute offsets"), g.offsets, w.offsets);
    check_same_ints(label(c, "permute row_of"), g.row_of, w.row_of);
    check_same_ints(label(c, "permute slot_of_row"), g.slot_of_row, w.slot_of_row);
    check_same_bf16(label(c, "gather xp"), g.xp, w.xp_f);
    check_same_bf16(label(c, "combine out (weights, base)"), g.out, w.out_f);
    check_same_bf16(label(c, "combine dx (the gather's backward)"), g.dx, w.dx_f);
    check_same_bf16(label(c, "combine_backward dyp"), g.dyp, w.dyp_f);
    {   // dweights: FP32 sums against the twin's double ones
        std::vector<double> tol((size_t)N * k);
        const std::vector<float> dout = to_f32(in.dout), yp = to_f32(in.yp);
        for (int s = 0; s < N * k; s++) {
            double mag = 0.0;
            const int r = w.row_of[s];
            for (int ch = 0; ch < C; ch++) mag += fabs((double)dout[(size_t)(s / k) * C + ch] * yp[(size_t)r * C + ch]);
            tol[s] = ldexp((double)(ceil_div(C, 32) + 8) * mag, -24) + 1e-38;
        }
        check_array(label(c, "combine_backward dweights"), as_double(g.dweights), as_double(w.dweights), tol);
    }
    check_same_f32(label(c, "route_backward dlogits"), g.dl_route, w.dl_route);
    CHECK_CLOSE(g.aux, w.aux, 0.0, 1e-6, label(c, "aux loss"));
    CHECK_CLOSE(g.z, w.z, 0.0, 1e-6, label(c, "z loss"));
    printf("  aux loss %.9g (twin %.9g), z loss %.9g (twin %.9g)\n", g.aux, w.aux, g.z, w.z);
    check_added(label(c, "aux loss dlogits"), g.dl_aux, w.dl_aux, in.dl_aux0);
    check_added(label(c, "z loss dlogits"), g.dl_z, w.dl_z, in.dl_z0);
    check_same_f32(label(c, "bias update"), g.bias_after, w.bias_after);

    // a second run: the same bits everywhere
    const Outputs g2 = run_gpu(c, in, rows_cap);
    check_bits(label(c, "rerun: ids"), g2.ids, g.ids);
    check_bits(label(c, "rerun: weights"), g2.weights, g.weights);
    check_bits(label(c, "rerun: row_of"), g2.row_of, g.row_of);
    check_bits(label(c, "rerun: slot_of_row"), g2.slot_of_row, g.slot_of_row);
    check_bits(label(c, "rerun: offsets"), g2.offsets, g.offsets);
    check_bits(label(c, "rerun: xp"), g2.xp, g.xp);
    check_bits(label(c, "rerun: out"), g2.out, g.out);
    check_bits(label(c, "rerun: dx"), g2.dx, g.dx);
    check_bits(label(c, "rerun: dyp"), g2.dyp, g.dyp);
    check_bits(label(c, "rerun: dweights"), g2.dweights, g.dweights);
    check_bits(label(c, "rerun: route dlogits"), g2.dl_route, g.dl_route);
    check_bits(label(c, "rerun: aux dlogits"), g2.dl_aux, g.dl_aux);
    check_bits(label(c, "rerun: z dlogits"), g2.dl_z, g.dl_z);
    check_bits(label(c, "rerun: losses"), std::vector<float>{g2.aux, g2.z}, std::vector<float>{g.aux, g.z});
    check_bits(label(c, "rerun: bias"), g2.bias_after, g.bias_after);
}

// The bias update where some experts sit exactly at the mean load (they keep their bias), against the twin.
static void test_bias_update_at_mean(void) {
    const int E = 8;
    std::vector<int64_t> load = {1, 7, 4, 4, 0, 8, 4, 4};   // total 32, mean 4
    std::vector<float> bias = {0.0f, 0.5f, -0.25f, 1e-3f, -1.0f, 3.0f, 0.0f, -0.0f};
    std::vector<float> want = bias;
    moe_bias_update(load.data(), E, BIAS_GAMMA, want.data());
    int64_t* d_load = dev_upload(load);
    float* d_bias = dev_upload(bias);
    moe_bias_update_gpu(d_load, E, BIAS_GAMMA, d_bias, 0);
    std::vector<float> got = dev_download(d_bias, E);
    printf("bias update at the mean load\n");
    check_bits("bias update, experts at the mean keep their bias", got, want);
    CHECK(memcmp(&got[2], &bias[2], 4) == 0 && memcmp(&got[7], &bias[7], 4) == 0,
          "bias update: an expert at the mean load moved");
    cuda_check(cudaFree(d_load));
    cuda_check(cudaFree(d_bias));
}

int main(void) {
    if (device_count_or_zero() == 0) {
        test_skip("test_moe_gpu", "no CUDA GPU on this machine");
        return test_summary("test_moe_gpu");
    }
    const Case cases[] = {
        //  name                               kind               N     E    k  mult  C    starve one
        {"softmax E8 k2, padded to 16",       MOE_SCORE_SOFTMAX, 1000, 8,   2, 16,  72,  true,  false},
        {"sigmoid E64 k8, padded to 32",      MOE_SCORE_SIGMOID, 777,  64,  8, 32,  100, true,  false},
        {"softmax E64 k1, unpadded",          MOE_SCORE_SOFTMAX, 333,  64,  1, 1,   40,  true,  false},
        {"softmax E8 k8 (k = E)",             MOE_SCORE_SOFTMAX, 257,  8,   8, 16,  24,  false, false},
        {"softmax E8 k1, all on expert 3",    MOE_SCORE_SOFTMAX, 500,  8,   1, 16,  64,  false, true},
        {"sigmoid E8 k1, all on expert 3",    MOE_SCORE_SIGMOID, 301,  8,   1, 32,  8,   false, true},
        {"sigmoid E256 k8 (the most)",        MOE_SCORE_SIGMOID, 130,  256, 8, 16,  16,  true,  false},
        {"sigmoid E8 k2, 3 tokens",           MOE_SCORE_SIGMOID, 3,    8,   2, 32,  8,   true,  false},
        {"softmax E64 k8, one token",         MOE_SCORE_SOFTMAX, 1,    64,  8, 16,  8,   false, false},
        {"softmax E64 k8, 129 chunks",        MOE_SCORE_SOFTMAX, 4099, 64,  8, 16,  128, true,  false},
        {"sigmoid E64 k2, 7 chunks, odd C",   MOE_SCORE_SIGMOID, 871,  64,  2, 16,  33,  false, false},
    };
    for (const Case& c : cases) test_case(c);
    test_bias_update_at_mean();
    return test_summary("test_moe_gpu");
}
