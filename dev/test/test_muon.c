// test_muon.c: CPU tests of llmc/base/muon_ref.h, Muon's reference twin (issue #50 item 3; the GPU path,
// llmc/muon.cuh, is checked against it by test_muon_gpu), and of llmc/model/muon_plan.h, --optimizer muon's routing.
// Checks: the momentum and the weight step against PyTorch's (dev/golden/muon_golden.bin, written by
// dev/ref/muon_ref.py from Keller Jordan's muon_update) and the orthogonalised update against it to BF16 rounding;
// Newton-Schulz's scalar map on diagonal matrices (each singular value follows phi(s) = a s + b s^3 + c s^5, computed
// in double); the singular values of the result inside the band five steps give; transposition symmetry
// (NS(G^T) = NS(G)^T); the two scale rules; zero gradients. The routing: every named tensor of both families goes to
// the optimizer the Muon README gives it; the matrix list of d6 and llama-tiny (shapes, offsets, --muon-split-qkv's
// Q/K/V rows) and the ZeRO-1 owner arithmetic, against hand-computed values. --ns-fp4 (llmc/fp4/ns_fp4.h): its
// settings and their refusals, and its twin against the BF16 NS.
#include "llmc/base/muon_ref.h"
#include "llmc/model/muon_plan.h"
#include "llmc/fp4/ns_fp4.h"
#include "dev/test/testing.h"
#include "dev/test/spectra.h"

static uint64_t lcg = 0xA4093822299F31D0ull;
static double urand(void) {
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return ((lcg >> 11) + 0.5) / 9007199254740992.0;
}
static double nrand(void) { return sqrt(-2.0 * log(urand())) * cos(6.283185307179586 * urand()); }

static double rel_l2(const float* a, const float* b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) { num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]); den += (double)b[i] * b[i]; }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void test_golden(void) {
    const char* path = "dev/golden/muon_golden.bin";
    FILE* f = fopen(path, "rb");
    if (!f) { CHECK(0, "cannot open %s (python3 dev/ref/muon_ref.py writes it)", path); return; }
    char magic[8];
    int32_t count = 0;
    CHECK(fread(magic, 1, 8, f) == 8 && memcmp(magic, "MUONGLD1", 8) == 0 && fread(&count, 4, 1, f) == 1 && count > 0,
          "%s: bad header", path);
    for (int c = 0; c < count; c++) {
        int32_t iv[5];
        float fv[3];
        if (fread(iv, 4, 5, f) != 5 || fread(fv, 4, 3, f) != 3) { CHECK(0, "%s: truncated at case %d", path, c); break; }
        const int rows = iv[0], cols = iv[1];
        const size_t n = (size_t)rows * cols;
        float* t[6];
        int ok = 1;
        for (int k = 0; k < 6; k++) { t[k] = (float*)xmalloc(n * 4); ok &= fread(t[k], 4, n, f) == n; }
        CHECK(ok, "%s: case %d truncated", path, c);
        MuonParams p = {fv[0], fv[1], fv[2], iv[2], iv[3], iv[4]};
        float* w = (float*)xmalloc(n * 4); float* m = (float*)xmalloc(n * 4); float* up = (float*)xmalloc(n * 4);
        memcpy(w, t[0], n * 4); memcpy(m, t[2], n * 4);
        muon_update_ref(w, t[1], m, rows, cols, &p, up);
        const double em = rel_l2(m, t[3], n), eu = rel_l2(up, t[4], n), ew = rel_l2(w, t[5], n);
        printf("  case %d (%dx%d, nesterov %d, %s scale): momentum %.2e, update %.2e, weights %.2e (relative L2 vs PyTorch)\n",
               c, rows, cols, iv[2], iv[3] ? "moonlight" : "keller", em, eu, ew);
        CHECK(em < 1e-6, "case %d: momentum against PyTorch: relative L2 %.3g", c, em);
        CHECK(eu < 3e-2, "case %d: update against PyTorch (BF16 Newton-Schulz, sums in another order): %.3g", c, eu);
        CHECK(ew < 1e-3, "case %d: weights against PyTorch: %.3g", c, ew);
        for (int k = 0; k < 6; k++) free(t[k]);
        free(w); free(m); free(up);
    }
    fclose(f);
}

// phi applied 5 times to s / ||s|| for a diagonal matrix, with each operation rounded to BF16 as the matrix
// code rounds it (a product of diagonal matrices sums one nonzero term, so the rounding is the same): exact
static float ns_scalar_bf16(float s, float norm, int steps) {
    float x = muon_bf16(s / (norm + 1e-7f));
    for (int i = 0; i < steps; i++) {
        const float a = muon_bf16(x * x), ca = muon_bf16(MUON_NS_C * a), caa = muon_bf16(ca * a);
        const float b = muon_bf16(muon_bf16(MUON_NS_B * a) + caa);
        x = muon_bf16(muon_bf16(MUON_NS_A * x) + muon_bf16(b * x));
    }
    return x;
}
// ... and in double, without rounding: the map the BF16 iteration approximates
static double ns_scalar(double s, double norm, int steps) {
    double x = s / norm;
    for (int i = 0; i < steps; i++) x = MUON_NS_A * x + MUON_NS_B * x * x * x + MUON_NS_C * x * x * x * x * x;
    return x;
}

static void test_scalar_map(void) {
    const int n = 8;
    float x[64], scratch[3 * 64 + 64];
    const float s[8] = {1.0f, 0.5f, 0.25f, 0.1f, 0.05f, 0.01f, 0.003f, 0.0f};
    float ss = 0.0f;
    for (int i = 0; i < n; i++) ss += muon_bf16(s[i]) * muon_bf16(s[i]);
    const float norm = muon_bf16(sqrtf(ss));
    memset(x, 0, sizeof(x));
    for (int i = 0; i < n; i++) x[i * n + i] = s[i];
    muon_newton_schulz(x, n, n, 5, scratch);
    for (int i = 0; i < n; i++) {
        const float want = ns_scalar_bf16(muon_bf16(s[i]), norm, 5);
        const double exact = ns_scalar(s[i], norm, 5);
        CHECK(x[i * n + i] == want, "diagonal %g: NS gives %g, the BF16 scalar map %g", s[i], x[i * n + i], want);
        printf("  diagonal %-6g -> %.4f (BF16 map %.4f, exact map %.4f)\n", s[i], x[i * n + i], want, exact);
    }
    int offdiag0 = 1;
    for (int i = 0; i < n; i++) for (int j = 0; j < n; j++) if (i != j) offdiag0 &= x[i * n + j] == 0.0f;
    CHECK(offdiag0, "a diagonal matrix stays diagonal");
}

// The singular values of NS(G) for a random G (test_singular_band: Jacobi on X X^T, double) lie in [0.6, 1.25]
// except for directions below the ~1e-3 floor, which random Gaussian matrices do not have.
static void test_band_and_transpose(void) {
    const int n = 12, k = 40;
    float g[12 * 40], x[12 * 40], scratch[3 * 144 + 480];
    for (int i = 0; i < n * k; i++) g[i] = (float)nrand();
    memcpy(x, g, sizeof(g));
    muon_newton_schulz(x, n, k, 5, scratch);
    double lo, hi;
    test_singular_band(x, n, k, &lo, &hi);
    printf("  NS of a random 12x40 matrix: singular values in [%.3f, %.3f]\n", lo, hi);
    CHECK(lo > 0.6 && hi < 1.25, "singular values in [0.6, 1.25]: [%.3f, %.3f]", lo, hi);
    // transposition: the update of G^T (40 x 12) is the transpose of G's
    MuonParams p = {0.0f, 0.0f, 0.0f, 0, MUON_SCALE_KELLER, 5};
    float w1[480] = {0}, w2[480] = {0}, m1[480] = {0}, m2[480] = {0}, u1[480], u2[480], gt[480];
    for (int i = 0; i < n; i++) for (int j = 0; j < k; j++) gt[j * n + i] = g[i * k + j];
    muon_update_ref(w1, g, m1, n, k, &p, u1);
    muon_update_ref(w2, gt, m2, k, n, &p, u2);
    int same = 1;
    const float sc = muon_scale(k, n, MUON_SCALE_KELLER);
    for (int i = 0; i < n; i++) for (int j = 0; j < k; j++) same &= u2[j * n + i] == u1[i * k + j] * sc;
    CHECK(same, "NS(G^T) = NS(G)^T, with the tall matrix's scale sqrt(40/12)");
}

static void test_scales_and_zero(void) {
    CHECK(muon_scale(16, 32, MUON_SCALE_KELLER) == 1.0f && fabsf(muon_scale(48, 24, MUON_SCALE_KELLER) - sqrtf(2.0f)) < 1e-6f,
          "Keller's scale: sqrt(max(1, rows / cols))");
    CHECK(fabsf(muon_scale(16, 64, MUON_SCALE_MOONLIGHT) - 1.6f) < 1e-6f, "Moonlight's scale: 0.2 sqrt(max(rows, cols))");
    float w[64], g[64] = {0}, m[64] = {0}, u[64];
    for (int i = 0; i < 64; i++) w[i] = 1.0f;
    MuonParams p = {0.1f, 0.95f, 0.5f, 1, MUON_SCALE_KELLER, 5};
    muon_update_ref(w, g, m, 8, 8, &p, u);
    int ok = 1;
    for (int i = 0; i < 64; i++) ok &= u[i] == 0.0f && w[i] == 1.0f - 0.1f * 0.5f;
    CHECK(ok, "a zero gradient: a zero update, only the decay moves the weights");
}

// Every tensor of both families by name: Muon takes exactly the blocks' linear weights.
static void test_routing(void) {
    const ModelFamily* fams[2] = {&GPT2_FAMILY, &LLAMA_FAMILY};
    const char* muon_names[] = {"qkvw", "attprojw", "fcw", "fcprojw"};
    for (int f = 0; f < 2; f++) {
        int bad = 0, muons = 0;
        for (int id = 0; id < fams[f]->num_params; id++) {
            const char* name = fams[f]->params[id].name;
            int want = OPTIMIZER_ADAMW;
            for (int k = 0; k < 4; k++) if (!strcmp(name, muon_names[k])) want = OPTIMIZER_MUON;
            const int got = optimizer_of(fams[f], id, OPTIMIZER_MUON);
            if (got != want) { printf("  %s: %s goes to %s\n", fams[f]->name, name, OPTIMIZER_NAMES[got]); bad++; }
            muons += got == OPTIMIZER_MUON;
            bad += optimizer_of(fams[f], id, OPTIMIZER_ADAMW) != OPTIMIZER_ADAMW;   // --optimizer adamw: all AdamW
        }
        CHECK(bad == 0 && muons == 4, "%s: Muon on qkvw, attprojw, fcw, fcprojw; AdamW on the %d others (wte, norms, "
              "biases, head)", fams[f]->name, fams[f]->num_params - 4);
    }
}

// The matrix list, against shapes and offsets worked out by hand.
static void test_matrices(void) {
    GPTConfig d6 = config_from_descriptor("d6");   // C = 384, 6 layers
    CHECK(muon_matrices(&d6, 0, NULL) == 24 && muon_matrices(&d6, 1, NULL) == 36, "d6: 24 matrices, 36 with split QKV");
    MuonMatrix m[64];
    muon_matrices(&d6, 0, m);
    // layer 1: qkvw 1152 x 384 from element 1152*384, attprojw 384 x 384, fcw 1536 x 384, fcprojw 384 x 1536
    CHECK(m[4].tensor == P_QKVW && m[4].layer == 1 && m[4].rows == 1152 && m[4].cols == 384 && m[4].offset == 442368 &&
          m[5].tensor == P_ATTPROJW && m[5].rows == 384 && m[5].cols == 384 && m[5].offset == 147456 &&
          m[6].tensor == P_FCW && m[6].rows == 1536 && m[6].cols == 384 && m[6].offset == 589824 &&
          m[7].tensor == P_FCPROJW && m[7].rows == 384 && m[7].cols == 1536 && m[7].offset == 589824,
          "d6 layer 1: qkvw, attprojw, fcw, fcprojw shapes and offsets");
    muon_matrices(&d6, 1, m);
    // split: layer 1's Q, K, V are 384 x 384 each, at rows 0, 384, 768 of its 1152
    CHECK(m[6].tensor == P_QKVW && m[6].layer == 1 && m[6].row0 == 0 && m[6].rows == 384 && m[6].offset == 442368 &&
          m[7].row0 == 384 && m[7].rows == 384 && m[7].offset == 442368 + 147456 &&
          m[8].row0 == 768 && m[8].rows == 384 && m[8].offset == 442368 + 294912 && m[9].tensor == P_ATTPROJW,
          "d6 split QKV: Q, K, V as 384 x 384 at rows 0, 384, 768");
    GPTConfig lt = config_from_descriptor("llama-tiny");   // C 128, 4 heads of 32, 2 KV heads, MLP 512, 2 layers
    muon_matrices(&lt, 1, m);
    // qkvw (4 + 2 + 2) * 32 = 256 rows: Q 128, K 64, V 64; fcw 1024 x 128 (gate and up); fcprojw 128 x 512
    CHECK(muon_matrices(&lt, 1, NULL) == 12 && m[0].tensor == LP_QKVW && m[0].rows == 128 && m[1].row0 == 128 &&
          m[1].rows == 64 && m[2].row0 == 192 && m[2].rows == 64 && m[2].offset == 192 * 128 &&
          m[3].tensor == LP_ATTPROJW && m[4].tensor == LP_FCW && m[4].rows == 1024 && m[4].cols == 128 &&
          m[5].tensor == LP_FCPROJW && m[5].rows == 128 && m[5].cols == 512 && m[6].layer == 1 && m[6].offset == 256 * 128,
          "llama-tiny split QKV: Q 128, K 64, V 64 rows; gate/up 1024 x 128; down 128 x 512");
    int sum = 0;
    for (int i = 0; i < 12; i++) sum += m[i].rows * m[i].cols;
    CHECK(sum == 2 * (256 * 128 + 128 * 128 + 1024 * 128 + 128 * 512), "llama-tiny: the matrices cover the four weights");
    // ZeRO-1's owners: round-robin over the list
    CHECK(muon_owner(0, 4) == 0 && muon_owner(5, 4) == 1 && muon_owner(23, 4) == 3 && muon_owner(7, 1) == 0,
          "ZeRO-1 owner: matrix i on rank i mod world");
    // d6 on 4 ranks: matrix 4 l + k goes to rank k, so rank 0 holds the 6 qkvw (1152 x 384), rank 1 the attprojw
    // (384 x 384), ranks 2 and 3 fcw and fcprojw (1536 x 384 elements each)
    muon_matrices(&d6, 0, m);
    size_t off[64], owned[4], total = 0;
    for (int r = 0; r < 4; r++) { owned[r] = muon_owned_offsets(m, 24, 4, r, off); total += owned[r]; }
    CHECK(owned[0] == 6 * 442368 && owned[1] == 6 * 147456 && owned[2] == 6 * 589824 && owned[3] == 6 * 589824 &&
          total == 10616832, "d6 on 4 ranks: Muon state per rank %zu, %zu, %zu, %zu", owned[0], owned[1], owned[2], owned[3]);
    muon_owned_offsets(m, 24, 4, 2, off);
    CHECK(off[2] == 0 && off[6] == 589824 && off[22] == 5 * 589824 && off[0] == SIZE_MAX && off[3] == SIZE_MAX,
          "d6 rank 2 of 4: fcw of layers 0, 1, 5 at 0, 589824, 2949120; the others not owned");
    // 3 ranks: matrix i on rank i mod 3; one rank holds everything
    CHECK(muon_owned_offsets(m, 24, 1, 0, off) == 10616832 && off[23] == 10616832 - 589824,
          "d6 on 1 rank (--zero on with one process): every matrix, in list order");
    size_t r3 = 0;
    for (int r = 0; r < 3; r++) r3 += muon_owned_offsets(m, 24, 3, r, off);
    CHECK(r3 == 10616832 && off[2] == 0 && off[5] == 589824, "d6 on 3 ranks: every element owned once; rank 2 owns "
          "matrices 2 (layer 0 fcw, at 0) and 5 (layer 1 attprojw, at 589824), ...");
}

// A gradient-like matrix (n x k): rank 16, singular values falling by 0.7 per rank, plus N(0,1) noise of 10% of its
// norm (dev/ns_fp4_table.c's grad-NxK, from this file's generator).
static void gradient_like(float* x, int n, int k) {
    double* g = (double*)xmalloc((size_t)n * k * sizeof(double));
    test_gradient_like(g, n, k, 16, nrand);
    for (size_t i = 0; i < (size_t)n * k; i++) x[i] = (float)(0.01 * g[i]);
    free(g);
}

// --ns-fp4's settings (llmc/fp4/ns_fp4.h): the specs NS takes, --ns-fp4-gemms' lists, and the checks that refuse the
// others, each with the words the trainer prints.
static void test_ns_fp4_settings(void) {
    const char* ok_specs[] = {"nvfp4", "mxfp4", "nvfp4-2d", "mxfp8", "mxfp4-2d"};
    const char* bad_specs[] = {"nvfp4,sr", "nvfp4,h16", "bf16", "nvfp4,src=fprop"};
    QuantSpec sp;
    char err[512];
    for (int i = 0; i < 5; i++)
        CHECK(quant_spec_parse(ok_specs[i], &sp, err, sizeof(err)) == 0 && ns_fp4_spec_problem(&sp) == NULL,
              "--ns-fp4 %s is a spec NS can run", ok_specs[i]);
    for (int i = 0; i < 4; i++)
        CHECK(quant_spec_parse(bad_specs[i], &sp, err, sizeof(err)) == 0 && ns_fp4_spec_problem(&sp) != NULL,
              "--ns-fp4 %s is refused", bad_specs[i]);
    struct { const char* text; int gemms; } lists[] = {
        {"xx", NS_GEMM_XX}, {"bx,xx", NS_GEMM_XX | NS_GEMM_BX}, {"aa", NS_GEMM_AA}, {"all", NS_GEMM_ALL},
        {"xx,aa,bx", NS_GEMM_ALL}, {"xx,xx", -1}, {"yy", -1}, {"", -1}, {",", -1}, {"xx,", NS_GEMM_XX},
    };
    for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++) {
        int g = 0;
        const int rc = ns_fp4_gemms_parse(lists[i].text, &g, err, sizeof(err));
        CHECK(lists[i].gemms < 0 ? rc != 0 : rc == 0 && g == lists[i].gemms, "--ns-fp4-gemms '%s': %s", lists[i].text,
              lists[i].gemms < 0 ? "refused" : "parsed");
    }
    char text[160];
    ns_fp4_gemms_format(NS_GEMM_BX | NS_GEMM_XX, text, sizeof(text));
    CHECK(!strcmp(text, "xx,bx"), "the canonical list: '%s'", text);
    NsFp4 f;
    CHECK(ns_fp4_set(&f, "off", "", err, sizeof(err)) == 0 && !f.on, "--ns-fp4 off");
    CHECK(ns_fp4_set(&f, "nvfp4", "", err, sizeof(err)) == 0 && f.on && f.gemms == NS_GEMM_XX &&
          NS_FP4_GEMMS_DEFAULT == NS_GEMM_XX, "--ns-fp4 nvfp4 quantizes xx by default");
    ns_fp4_describe(&f, text, sizeof(text));
    CHECK(!strcmp(text, "e2m1,1x16,e4m3,rne,h0 on xx"), "described as '%s'", text);
    const struct { const char* spec; const char* gemms; const char* want; } bad[] = {
        {"off", "xx", "--ns-fp4-gemms xx needs --ns-fp4 SPEC (it is off)"},
        {"nvfp4,7x7", "", "--ns-fp4 'nvfp4,7x7': block '7x7'"},
        {"nvfp4,sr", "", "--ns-fp4 'nvfp4,sr': Newton-Schulz's operands round to nearest (rne) only"},
        {"nvfp4", "xy", "--ns-fp4-gemms: unknown GEMM 'xy'"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        CHECK(ns_fp4_set(&f, bad[i].spec, bad[i].gemms, err, sizeof(err)) != 0 && strstr(err, bad[i].want),
              "--ns-fp4 '%s' --ns-fp4-gemms '%s' refused with \"%s\" (got \"%s\")", bad[i].spec, bad[i].gemms,
              bad[i].want, err);
    }
    ns_fp4_set(&f, "mxfp4", "", err, sizeof(err));
    CHECK(ns_fp4_shape_problem(&f, 384, 1152) == NULL && ns_fp4_shape_problem(&f, 208, 624) != NULL &&
          ns_fp4_shape_problem(&f, 384, 1136) != NULL, "mxfp4's 1x32 blocks: 384 x 1152 fits, 208 x 624 and 384 x 1136 "
          "do not");
}

// --ns-fp4's twin: with no GEMM quantized it is the BF16 NS bit for bit (and the whole update muon_update_ref's); one
// step with all three quantized is within 5% of the BF16 step; five steps of the default set (xx) stay near the BF16
// result on a gradient-like matrix. Printed only: what five steps of each set do to a dense Gaussian matrix (those
// with aa or bx diverge: docs/FULLSTACK_FP4.md section 3), and whether another summation order changes the result.
static void test_ns_fp4_twin(void) {
    NsFp4 f;
    char err[512];
    ns_fp4_set(&f, "nvfp4", "all", err, sizeof(err));
    const int n = 64, k = 256;
    const size_t nk = (size_t)n * k;
    float* x0 = (float*)xmalloc(nk * 4);
    float* x = (float*)xmalloc(nk * 4);
    float* y = (float*)xmalloc(nk * 4);
    float* scratch = (float*)xmalloc((3 * (size_t)n * n + nk) * 4);
    for (size_t i = 0; i < nk; i++) x0[i] = (float)nrand() * 0.01f;
    memcpy(x, x0, nk * 4);
    memcpy(y, x0, nk * 4);
    muon_newton_schulz_fp4_ref(x, n, k, 5, &f.q, 0);
    muon_newton_schulz(y, n, k, 5, scratch);
    CHECK(memcmp(x, y, nk * 4) == 0, "the FP4 twin with no GEMM quantized is the BF16 NS, bit for bit");
    memcpy(x, x0, nk * 4);
    memcpy(y, x0, nk * 4);
    muon_newton_schulz_fp4_ref(x, n, k, 1, &f.q, NS_GEMM_ALL);
    muon_newton_schulz(y, n, k, 1, scratch);
    const double one = rel_l2(x, y, nk);
    CHECK(one < 0.05, "one NVFP4 NS step (xx, aa, bx) within 5%% of the BF16 one: %.3g", one);
    for (int g = 1; g <= NS_GEMM_ALL; g++) {
        char names[16];
        ns_fp4_gemms_format(g, names, sizeof(names));
        memcpy(x, x0, nk * 4);
        memcpy(y, x0, nk * 4);
        muon_newton_schulz_fp4_ref(x, n, k, 5, &f.q, g);
        muon_newton_schulz(y, n, k, 5, scratch);
        printf("  NS %dx%d (0.01 N(0,1)), 5 steps, %-8s in NVFP4: relative L2 %.3g from the BF16 NS\n", n, k, names,
               rel_l2(x, y, nk));
    }
    gradient_like(x0, n, k);
    memcpy(x, x0, nk * 4);
    memcpy(y, x0, nk * 4);
    muon_newton_schulz_fp4_ref(x, n, k, 5, &f.q, NS_FP4_GEMMS_DEFAULT);
    muon_newton_schulz(y, n, k, 5, scratch);
    const double def = rel_l2(x, y, nk);
    printf("  NS %dx%d gradient-like, 5 steps, xx in NVFP4: relative L2 %.3g from the BF16 NS\n", n, k, def);
    CHECK(def < 0.25, "five steps of the default set (xx) on a gradient-like matrix within 0.25 of BF16: %.3g", def);
    for (int g = NS_GEMM_XX; g <= NS_GEMM_ALL; g += NS_GEMM_ALL - NS_GEMM_XX) {
        memcpy(x, x0, nk * 4);
        memcpy(y, x0, nk * 4);
        muon_newton_schulz_fp4_chunked(x, n, k, 5, &f.q, g, 0);
        muon_newton_schulz_fp4_chunked(y, n, k, 5, &f.q, g, 32);
        printf("  the same, %s in NVFP4, sums in 32-wide chunks against index order: relative L2 %.3g\n",
               g == NS_GEMM_ALL ? "all three" : "xx", rel_l2(y, x, nk));
    }
    // the whole update, off: muon_update_ref's bits
    MuonParams p = {0.02f, 0.95f, 0.1f, 1, MUON_SCALE_MOONLIGHT, 5};
    const int rows = 96, cols = 32;
    float g[96 * 32], w1[96 * 32], w2[96 * 32], m1[96 * 32] = {0}, m2[96 * 32] = {0}, u1[96 * 32], u2[96 * 32];
    for (int i = 0; i < rows * cols; i++) { g[i] = (float)nrand(); w1[i] = w2[i] = 0.02f * (float)nrand(); }
    ns_fp4_set(&f, "off", "", err, sizeof(err));
    muon_update_ref(w1, g, m1, rows, cols, &p, u1);
    muon_update_fp4_ref(w2, g, m2, rows, cols, &p, &f, u2);
    CHECK(!memcmp(w1, w2, sizeof(w1)) && !memcmp(m1, m2, sizeof(m1)) && !memcmp(u1, u2, sizeof(u1)),
          "muon_update_fp4_ref with --ns-fp4 off is muon_update_ref, bit for bit");
    free(x0); free(x); free(y); free(scratch);
}

int main(void) {
    test_routing();
    test_matrices();
    test_golden();
    test_scalar_map();
    test_band_and_transpose();
    test_scales_and_zero();
    test_ns_fp4_settings();
    test_ns_fp4_twin();
    return test_summary("muon");
}
