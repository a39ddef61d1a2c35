// test_attention_fp4_cpu.c: FP4 attention's configuration and CPU twin (llmc/fp4/attention_fp4.h), no GPU.
// Checks, at B = 1..2, NH = 2 (KVH 2 and 1: multi-head and grouped-query), T = 64..128, HS = 64:
//   - the flags: off, a spec, the dS default (the spec with SR), the errors for unsupported options and shapes;
//   - bf16 specs: the copy is qkv itself with factors 1, the forward equals an independent naive softmax attention
//     (1e-12), and the backward equals central differences of sum(out . dout) (the formulas, GQA sums included);
//   - every quantized copy equals quant_cpu of its spec on its own view, bit for bit (Q, K along d, V along tokens),
//     and a 2D copy is the same bits along either axis (one copy serves both orientations);
//   - reuse: with Q, K, V quantized, the backward is the exact gradient of the forward taken at the dequantized
//     values (central differences through the naive attention on those values): every product of the backward
//     reads the copies the forward read; the gradient at the unquantized values is measurably different;
//   - dS: its copies equal quant_cpu of the BF16 dS (one copy for a square 2D spec, two for 1D), dQ and dK from
//     them stay within FP4 noise of the unquantized ones, and under SR the mean over 16 keys is closer than one draw.
#include <math.h>
#include "llmc/fp4/attention_fp4.h"
#include "dev/test/testing.h"

static uint64_t rng = 0x5EEDA77E4ull;
static double uniform(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return ((rng >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
static double gauss(void) { return sqrt(-2.0 * log(uniform())) * cos(6.283185307179586 * uniform()); }

static int64_t qkv_elems(AttnFp4Shape sh) { return (int64_t)sh.B * sh.T * (sh.NH + 2 * sh.KVH) * sh.HS; }
static int64_t out_elems(AttnFp4Shape sh) { return (int64_t)sh.B * sh.T * sh.NH * sh.HS; }

static uint16_t* rand_bf16(int64_t n, double scale) {
    uint16_t* v = (uint16_t*)xmalloc(sizeof(uint16_t) * n);
    for (int64_t i = 0; i < n; i++) v[i] = bf16_bits_rne((float)(scale * gauss()));
    return v;
}

// Naive causal attention on double Q, K, V laid out as qkv; returns sum(out . dout) and writes out if asked.
static double naive_loss(AttnFp4Shape sh, const double* x, const double* dout, double* out) {
    const int64_t W = (int64_t)(sh.NH + 2 * sh.KVH) * sh.HS;
    const double scale = 1.0 / sqrt((double)sh.HS);
    double loss = 0.0, s[512];
    for (int b = 0; b < sh.B; b++)
        for (int h = 0; h < sh.NH; h++) {
            const int kvh = h / (sh.NH / sh.KVH);
            for (int i = 0; i < sh.T; i++) {
                const double* q = x + ((int64_t)b * sh.T + i) * W + (int64_t)h * sh.HS;
                double m = -INFINITY, z = 0.0;
                for (int j = 0; j <= i; j++) {
                    const double* k = x + ((int64_t)b * sh.T + j) * W + (int64_t)(sh.NH + kvh) * sh.HS;
                    double d = 0.0;
                    for (int c = 0; c < sh.HS; c++) d += q[c] * k[c];
                    s[j] = d * scale;
                    m = fmax(m, s[j]);
                }
                for (int j = 0; j <= i; j++) { s[j] = exp(s[j] - m); z += s[j]; }
                for (int c = 0; c < sh.HS; c++) {
                    double o = 0.0;
                    for (int j = 0; j <= i; j++)
                        o += s[j] / z * x[((int64_t)b * sh.T + j) * W + (int64_t)(sh.NH + sh.KVH + kvh) * sh.HS + c];
                    const int64_t oi = (((int64_t)b * sh.T + i) * sh.NH + h) * sh.HS + c;
                    if (out) out[oi] = o;
                    loss += o * dout[oi];
                }
            }
        }
    return loss;
}

// The dequantized copy as doubles: fake * dec of its part.
static double* dequant_qkv(AttnFp4Shape sh, const uint16_t* fake, const float dec[3]) {
    const int64_t W = (int64_t)(sh.NH + 2 * sh.KVH) * sh.HS, n = qkv_elems(sh);
    double* x = (double*)xmalloc(sizeof(double) * n);
    for (int64_t e = 0; e < n; e++) {
        const int64_t c = e % W;
        const int part = c < (int64_t)sh.NH * sh.HS ? 0 : c < (int64_t)(sh.NH + sh.KVH) * sh.HS ? 1 : 2;
        x[e] = attn_bf(fake[e]) * dec[part];
    }
    return x;
}

// Central differences of sum(out . dout) at the dequantized values, at `probes` random coordinates, against g.
static void check_gradient(const char* what, AttnFp4Shape sh, const double* x0, const double* dout, const double* g,
                           int probes, double tol) {
    const int64_t n = qkv_elems(sh);
    double* x = (double*)xmalloc(sizeof(double) * n);
    memcpy(x, x0, sizeof(double) * n);
    double worst = 0.0;
    int bad = 0;
    for (int p = 0; p < probes; p++) {
        const int64_t e = (int64_t)(uniform() * n) % n;
        const double h = 1e-5 * fmax(1.0, fabs(x0[e]));
        x[e] = x0[e] + h;
        const double lp = naive_loss(sh, x, dout, NULL);
        x[e] = x0[e] - h;
        const double lm = naive_loss(sh, x, dout, NULL);
        x[e] = x0[e];
        const double fd = (lp - lm) / (2 * h), err = fabs(fd - g[e]) / (tol * (1.0 + fabs(fd)));
        if (!(err <= 1.0)) {
            if (bad < 3) printf("  %s: d/dqkv[%lld] backward %.12g, central differences %.12g\n", what, (long long)e, g[e], fd);
            bad++;
        }
        if (err > worst || err != err) worst = err;
    }
    CHECK(bad == 0, "%s: %d of %d probes off (worst err/tol %.3g)", what, bad, probes, worst);
    if (!bad) printf("  ok %-60s %d probes, worst err/tol %.3g\n", what, probes, worst);
    free(x);
}

static double rel_l2(const double* a, const double* b, int64_t n) {
    double d = 0.0, r = 0.0;
    for (int64_t i = 0; i < n; i++) { d += (a[i] - b[i]) * (a[i] - b[i]); r += b[i] * b[i]; }
    return sqrt(d / (r > 0 ? r : 1.0));
}

static int same_bits(const uint16_t* a, const uint16_t* b, int64_t n) { return memcmp(a, b, sizeof(uint16_t) * n) == 0; }

static void test_flags(void) {
    AttnFp4 a;
    attn_fp4_set(&a, "off", NULL);
    CHECK(!a.on, "off is off");
    attn_fp4_set(&a, "nvfp4-2d", NULL);
    CHECK(a.on && a.qkv.block_w == 16 && a.qkv.block_l == 16 && a.qkv.rounding == QROUND_RNE, "nvfp4-2d: 16x16 RNE");
    CHECK(a.ds.block_w == 16 && a.ds.rounding == QROUND_SR && attn_fp4_ds_square(&a), "the dS default: the spec with sr");
    attn_fp4_set(&a, "nvfp4", "nvfp4-2d");
    CHECK(a.qkv.block_w == 1 && a.ds.block_w == 16 && a.ds.rounding == QROUND_RNE, "--attention-fp4-ds overrides");
    attn_fp4_set(&a, "bf16", NULL);
    CHECK(a.on && a.qkv.grid == QGRID_BF16 && a.ds.grid == QGRID_BF16, "bf16: the own kernels, nothing quantized");
    attn_fp4_set(&a, "mxfp8", NULL);
    CHECK(a.ds.rounding == QROUND_RNE, "mxfp8 (no SR on the fp8 grid): dS keeps round-to-nearest");
    char d[256];
    attn_fp4_set(&a, "nvfp4-2d", NULL);
    attn_fp4_describe(&a, d, sizeof(d));
    CHECK(strcmp(d, "q/k/v=e2m1,16x16,e4m3,rne,h0, ds=e2m1,16x16,e4m3,sr,h0") == 0, "describe: '%s'", d);
    a.dropin = 1;
    attn_fp4_describe(&a, d, sizeof(d));
    CHECK(strstr(d, "backward=bf16 (drop-in control)") && attn_fp4_dropin_problem(&a) == NULL, "drop-in: '%s'", d);
    attn_fp4_set(&a, "bf16", NULL);
    a.dropin = 1;
    CHECK(attn_fp4_dropin_problem(&a) != NULL, "drop-in needs a quantizing forward");
    attn_fp4_set(&a, "nvfp4-2d", NULL);
    char err[512];
    const AttnFp4Shape ok = {2, 64, 4, 2, 64}, odd = {2, 40, 4, 2, 64};
    CHECK(attn_fp4_check_shape(&a, ok, err, sizeof(err)), "T = 64 fits 16x16 blocks");
    CHECK(!attn_fp4_check_shape(&a, odd, err, sizeof(err)) && strstr(err, "multiple of 16"), "T = 40: '%s'", err);
    const char* bad[][2] = {{"nvfp4,h16", NULL}, {"nvfp4", "nvfp4,eden"}, {"nvfp5", NULL}, {"off", "nvfp4"}};
    const char* want[] = {"Hadamard", "eden", "--attention-fp4 'nvfp5'", "needs --attention-fp4"};
    for (int i = 0; i < 4; i++) {
        char out[1024];
        int st = test_run_child([](const void* arg) {
            const char* const* t = (const char* const*)arg;
            AttnFp4 x;
            attn_fp4_set(&x, t[0], t[1]);
        }, bad[i], out, sizeof(out));
        CHECK(st != 0 && strstr(out, want[i]), "--attention-fp4 %s --attention-fp4-ds %s: exit %d, '%s'", bad[i][0],
              bad[i][1] ? bad[i][1] : "(default)", st, out);
    }
}

// bf16 specs: the twin is plain attention.
static void test_bf16(AttnFp4Shape sh) {
    printf("bf16 specs, B=%d T=%d NH=%d KVH=%d HS=%d\n", sh.B, sh.T, sh.NH, sh.KVH, sh.HS);
    AttnFp4 a;
    attn_fp4_set(&a, "bf16", NULL);
    const int64_t n = qkv_elems(sh), no = out_elems(sh);
    uint16_t* qkv = rand_bf16(n, 1.0);
    uint16_t* fake = (uint16_t*)xmalloc(sizeof(uint16_t) * n);
    float dec[3];
    attn_fp4_quantize_qkv_cpu(&a, sh, qkv, 7, fake, dec);
    CHECK(same_bits(fake, qkv, n) && dec[0] == 1.0f && dec[1] == 1.0f && dec[2] == 1.0f, "bf16: the copy is qkv");
    double* x = dequant_qkv(sh, fake, dec);
    double* dout = (double*)xmalloc(sizeof(double) * no);
    uint16_t* dout16 = rand_bf16(no, 1.0);
    for (int64_t i = 0; i < no; i++) dout[i] = attn_bf(dout16[i]);
    double* out = (double*)xmalloc(sizeof(double) * no);
    double* ref = (double*)xmalloc(sizeof(double) * no);
    double* lse = (double*)xmalloc(sizeof(double) * sh.B * sh.NH * sh.T);
    attn_fp4_forward_cpu(sh, fake, dec, out, lse);
    naive_loss(sh, x, dout, ref);
    double worst = 0.0;
    for (int64_t i = 0; i < no; i++) worst = fmax(worst, fabs(out[i] - ref[i]));
    CHECK(worst < 1e-12, "bf16 forward vs naive attention: max |diff| %.3g", worst);
    double* g = (double*)xmalloc(sizeof(double) * n);
    attn_fp4_backward_cpu(&a, sh, fake, dec, dout16, out, 0, NULL, g, NULL);
    check_gradient("bf16 backward vs central differences", sh, x, dout, g, 60, 1e-6);
    free(qkv); free(fake); free(x); free(dout); free(dout16); free(out); free(ref); free(lse); free(g);
}

// The copies equal quant_cpu on their own contiguous views.
static void test_copies(AttnFp4Shape sh, const char* spec) {
    printf("copies of Q, K, V: %s, B=%d T=%d NH=%d KVH=%d HS=%d\n", spec, sh.B, sh.T, sh.NH, sh.KVH, sh.HS);
    AttnFp4 a;
    attn_fp4_set(&a, spec, NULL);
    const int64_t n = qkv_elems(sh), W = (int64_t)(sh.NH + 2 * sh.KVH) * sh.HS, R = (int64_t)sh.B * sh.T;
    uint16_t* qkv = rand_bf16(n, 0.7);
    uint16_t* fake = (uint16_t*)xmalloc(sizeof(uint16_t) * n);
    float dec[3];
    const uint64_t key = 0x1234;
    attn_fp4_quantize_qkv_cpu(&a, sh, qkv, key, fake, dec);
    const QuantParams p = quant_params(&a.qkv);
    const char* names[3] = {"Q", "K", "V"};
    for (int part = 0; part < 3; part++) {
        int64_t col0, cols;
        int axis;
        attn_fp4_qkv_slice(sh, (AttnFp4Part)part, &col0, &cols, &axis);
        CHECK(axis == (part == 2 ? 0 : 1), "%s's blocks run along %s", names[part], part == 2 ? "tokens" : "d");
        uint16_t* in = (uint16_t*)xmalloc(sizeof(uint16_t) * R * cols);
        uint16_t* want = (uint16_t*)xmalloc(sizeof(uint16_t) * R * cols);
        uint16_t* got = (uint16_t*)xmalloc(sizeof(uint16_t) * R * cols);
        for (int64_t r = 0; r < R; r++)
            for (int64_t c = 0; c < cols; c++) {
                in[r * cols + c] = qkv[r * W + col0 + c];
                got[r * cols + c] = fake[r * W + col0 + c];
            }
        const QuantView v = {in, R, cols, cols};
        const float d = quant_cpu(&p, v, axis, attn_fp4_key(key, (AttnFp4Part)part), want, cols, NULL, NULL, NULL);
        CHECK(same_bits(got, want, R * cols) && d == dec[part], "%s %s copy: quant_cpu of its view, bit for bit", spec,
              names[part]);
        if (a.qkv.block_w == a.qkv.block_l) {   // a 2D tile: the other axis gives the same copy
            uint16_t* other = (uint16_t*)xmalloc(sizeof(uint16_t) * R * cols);
            const float d2 = quant_cpu(&p, v, 1 - axis, attn_fp4_key(key, (AttnFp4Part)part), other, cols, NULL, NULL, NULL);
            CHECK(same_bits(other, want, R * cols) && d2 == d, "%s %s: the copy along the other axis is the same bits",
                  spec, names[part]);
            free(other);
        }
        int64_t changed = 0;
        for (int64_t i = 0; i < R * cols; i++) changed += bf16_bits_to_float(want[i]) * d != bf16_bits_to_float(in[i]);
        CHECK(changed > R * cols / 2, "%s %s: the copy is quantized (%lld of %lld values changed)", spec, names[part],
              (long long)changed, (long long)(R * cols));
        free(in); free(want); free(got);
    }
    free(qkv); free(fake);
}

// Reuse: the backward is the gradient of the forward at the dequantized copy; dS quantized as specified.
static void test_quantized(AttnFp4Shape sh, const char* spec) {
    printf("quantized attention: %s, B=%d T=%d NH=%d KVH=%d HS=%d\n", spec, sh.B, sh.T, sh.NH, sh.KVH, sh.HS);
    AttnFp4 a, a_nods;
    attn_fp4_set(&a, spec, NULL);
    attn_fp4_set(&a_nods, spec, "bf16");
    const int64_t n = qkv_elems(sh), no = out_elems(sh), nds = (int64_t)sh.B * sh.NH * sh.T * sh.T;
    uint16_t* qkv = rand_bf16(n, 1.0);
    uint16_t* dout16 = rand_bf16(no, 1.0);
    uint16_t* fake = (uint16_t*)xmalloc(sizeof(uint16_t) * n);
    float dec[3];
    attn_fp4_quantize_qkv_cpu(&a, sh, qkv, 99, fake, dec);
    double* x = dequant_qkv(sh, fake, dec);
    double* dout = (double*)xmalloc(sizeof(double) * no);
    for (int64_t i = 0; i < no; i++) dout[i] = attn_bf(dout16[i]);
    double* out = (double*)xmalloc(sizeof(double) * no);
    double* ref = (double*)xmalloc(sizeof(double) * no);
    double* lse = (double*)xmalloc(sizeof(double) * sh.B * sh.NH * sh.T);
    attn_fp4_forward_cpu(sh, fake, dec, out, lse);
    naive_loss(sh, x, dout, ref);
    double worst = 0.0;
    for (int64_t i = 0; i < no; i++) worst = fmax(worst, fabs(out[i] - ref[i]));
    CHECK(worst < 1e-12, "%s forward = attention of the dequantized copy: max |diff| %.3g", spec, worst);

    // dS unquantized: the exact gradient at the copy (reuse), not at the BF16 qkv
    double* g = (double*)xmalloc(sizeof(double) * n);
    attn_fp4_backward_cpu(&a_nods, sh, fake, dec, dout16, out, 0, NULL, g, NULL);
    check_gradient("backward = gradient at the forward's copy", sh, x, dout, g, 60, 1e-6);
    double* xb = (double*)xmalloc(sizeof(double) * n);   // the gradient at the unquantized values differs
    for (int64_t i = 0; i < n; i++) xb[i] = attn_bf(qkv[i]);
    const int64_t e = 5 * (int64_t)(sh.NH + 2 * sh.KVH) * sh.HS + 3;   // token 5's q, channel 3
    double gq = 0.0;
    {
        const double h = 1e-5;
        xb[e] += h; const double lp = naive_loss(sh, xb, dout, NULL);
        xb[e] -= 2 * h; const double lm = naive_loss(sh, xb, dout, NULL);
        xb[e] += h;
        gq = (lp - lm) / (2 * h);
    }
    CHECK(fabs(gq - g[e]) > 1e-4 * (1 + fabs(gq)), "the gradient at the unquantized qkv differs (%.6g vs %.6g): the "
          "check above would catch a backward that re-read BF16 Q, K, V", gq, g[e]);

    // dS quantized: its copies are quant_cpu of the BF16 dS
    uint16_t* ds = (uint16_t*)xmalloc(sizeof(uint16_t) * nds);
    uint16_t* rows = (uint16_t*)xmalloc(sizeof(uint16_t) * nds);
    uint16_t* cols = (uint16_t*)xmalloc(sizeof(uint16_t) * nds);
    uint16_t* want = (uint16_t*)xmalloc(sizeof(uint16_t) * nds);
    AttnFp4CpuDs dsout = {ds, rows, cols, {0, 0}};
    double* gq4 = (double*)xmalloc(sizeof(double) * n);
    const uint64_t key = 4242;
    attn_fp4_backward_cpu(&a, sh, fake, dec, dout16, out, key, NULL, gq4, &dsout);
    const QuantParams p = quant_params(&a.ds);
    const QuantView v = {ds, (int64_t)sh.B * sh.NH * sh.T, sh.T, sh.T};
    float d = quant_cpu(&p, v, 1, attn_fp4_key(key, ATTN_FP4_DS), want, sh.T, NULL, NULL, NULL);
    CHECK(same_bits(rows, want, nds) && d == dsout.ds_dec[0], "%s dS copy for dQ (along keys): quant_cpu, bit for bit", spec);
    d = quant_cpu(&p, v, 0, attn_fp4_key(key, ATTN_FP4_DS), want, sh.T, NULL, NULL, NULL);
    CHECK(same_bits(cols, want, nds) && d == dsout.ds_dec[1], "%s dS copy for dK (along queries): quant_cpu, bit for bit", spec);
    if (attn_fp4_ds_square(&a)) CHECK(same_bits(rows, cols, nds), "%s: a square dS tile gives one copy", spec);
    else CHECK(!same_bits(rows, cols, nds), "%s: 1D dS blocks give two different copies", spec);
    int64_t above = 0;
    for (int64_t r = 0; r < (int64_t)sh.B * sh.NH * sh.T; r++)
        for (int c = (int)(r % sh.T) + 1; c < sh.T; c++) above += ds[r * sh.T + c] != 0 || rows[r * sh.T + c] != 0;
    CHECK(above == 0, "dS and its copy are +0 above the diagonal (%lld are not)", (long long)above);
    const double e1 = rel_l2(gq4, g, n);
    CHECK(e1 > 1e-3 && e1 < 0.3, "%s: dQ, dK with FP4 dS within FP4 noise of the BF16-dS ones (rel L2 %.4f)", spec, e1);
    printf("  dqkv with FP4 dS vs BF16 dS: rel L2 %.4f\n", e1);
    if (a.ds.rounding == QROUND_SR) {   // SR is unbiased: the mean over keys converges
        double* mean = (double*)xmalloc(sizeof(double) * n);
        for (int64_t i = 0; i < n; i++) mean[i] = 0.0;
        const int K = 16;
        for (int k = 0; k < K; k++) {
            attn_fp4_backward_cpu(&a, sh, fake, dec, dout16, out, 1000 + k, NULL, gq4, NULL);
            for (int64_t i = 0; i < n; i++) mean[i] += gq4[i] / K;
        }
        const double em = rel_l2(mean, g, n);
        CHECK(em < 0.5 * e1, "%s: SR dS, the mean of %d draws is closer to the BF16-dS gradient (%.4f) than one draw (%.4f)",
              spec, K, em, e1);
        printf("  mean of %d SR draws: rel L2 %.4f\n", K, em);
        free(mean);
    }
    free(qkv); free(dout16); free(fake); free(x); free(dout); free(out); free(ref); free(lse); free(g); free(xb);
    free(ds); free(rows); free(cols); free(want); free(gq4);
}

int main(void) {
    test_flags();
    const AttnFp4Shape mha = {1, 64, 2, 2, 64}, gqa = {2, 64, 2, 1, 64}, longer = {1, 128, 2, 1, 64};
    test_bf16(mha);
    test_bf16(gqa);
    test_copies(gqa, "nvfp4");
    test_copies(gqa, "nvfp4-2d");
    test_copies(mha, "mxfp4");
    test_quantized(mha, "nvfp4-2d");
    test_quantized(gqa, "nvfp4");
    test_quantized(longer, "nvfp4-2d");
    return test_summary("attention_fp4_cpu");
}
