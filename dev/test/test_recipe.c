// test_recipe.c: CPU tests of llmc/fp4/recipe.h: the presets resolve to the slot specs docs/RECIPES.md
// describes, overrides and GEMM switches act on the right slots, the BF16-block rule scales with
// depth, the canonical description is stable, invalid recipes fail with a clear message, and
// recipe_check_shapes finds token and channel counts a recipe cannot quantize; and the recipe schedule
// (--bf16-forward-from, llmc/fp4/recipe_schedule.h): its switch step, parsing, resuming and the recipe after it.
// Every range limit (the Hadamard sizes the kernels take, the BF16 blocks, the per-62 rounding, the token multiples,
// a slot spec's Hadamard) is tested on both sides: the last value taken and the first refused.
#include "llmc/fp4/recipe.h"
#include "llmc/fp4/recipe_schedule.h"
#include "dev/test/testing.h"
#include "dev/test/check_coverage.h"

// The parsers and checks under test, each message they return recorded for the every-check scan at the end.
static int spec_parse(const char* text, QuantSpec* out, char* err, size_t n) {
    const int rc = quant_spec_parse(text, out, err, n);
    if (rc && err) check_seen(err);
    return rc;
}
static int fwd_parse(const char* text, float* out, char* err, size_t n) {
    const int rc = bf16_forward_parse(text, out, err, n);
    if (rc) check_seen(err);
    return rc;
}
static int sched_check(const RecipeSchedule* s, int step, char* err, size_t n) {
    const int rc = recipe_schedule_check(s, step, err, n);
    if (rc) check_seen(err);
    return rc;
}
static int sched_resume(const RecipeSchedule* saved, const RecipeSchedule* asked, int allow, RecipeSchedule* out, char* err,
                        size_t n) {
    const int rc = recipe_schedule_resume(saved, asked, allow, out, err, n);
    if (rc) check_seen(err);
    return rc;
}
static int shapes_check(const Recipe* r, int64_t N, int C, int backward, char* err, size_t n) {
    const int rc = recipe_check_shapes(r, N, C, backward, err, n);
    if (rc) check_seen(err);
    return rc;
}

static int spec_is(const QuantSpec* s, QuantGrid grid, int bw, int bl, QuantScaleRule scale, QuantRounding round,
                   int hadamard) {
    return s->grid == grid && s->block_w == bw && s->block_l == bl && s->scale == scale && s->rounding == round &&
           s->hadamard == hadamard;
}

static void bad_hadamard(const void*) {
    Recipe r;
    recipe_preset(&r, "nvfp4");
    recipe_set_slot(&r, SLOT_WGRAD_X, "nvfp4");   // wgrad.dy keeps its H16: the product would be wrong
    recipe_check(&r);
}
static void bad_preset(const void*) { Recipe r; recipe_preset(&r, "fp3"); }
static void bad_spec(const void*) { Recipe r; recipe_preset(&r, "bf16"); recipe_set_slot(&r, SLOT_FPROP_X, "nvfp4,7x7"); }
static void qk_on_bf16(const void*) { Recipe r; recipe_preset(&r, "bf16"); r.qk_fp8 = 1; recipe_check(&r); }
static void too_many_bf16(const void*) { Recipe r; recipe_preset(&r, "nvfp4"); r.bf16_first = 8; r.bf16_last = 8; recipe_resolve_layers(&r, 12); }
// src=fprop: only MS-EDEN's dgrad.w / wgrad.x, and only from an unrotated forward copy
static void fprop_src_not_eden(const void*) { Recipe r; recipe_preset(&r, "nvfp4"); recipe_set_slot(&r, SLOT_DGRAD_W, "nvfp4-2d,src=fprop"); recipe_check(&r); }
static void fprop_src_dy(const void*) { Recipe r; recipe_preset(&r, "quartet2"); recipe_set_slot(&r, SLOT_DGRAD_DY, "nvfp4,eden,src=fprop"); recipe_check(&r); }
static void fprop_src_rotated(const void*) {
    Recipe r; recipe_preset(&r, "quartet2");
    recipe_set_slot(&r, SLOT_FPROP_X, "nvfp4,h16,fixed"); recipe_set_slot(&r, SLOT_FPROP_W, "nvfp4,h16,fixed"); recipe_check(&r);
}


// recipe_check_shapes: rc and the words its message must hold
static void expect_shapes(const Recipe* r, int64_t N, int C, int backward, int want_rc, const char* w1, const char* w2,
                          const char* what) {
    char err[1024] = "";
    int rc = shapes_check(r, N, C, backward, err, sizeof(err));
    CHECK(rc == want_rc && (!w1 || strstr(err, w1)) && (!w2 || strstr(err, w2)), "%s: N=%lld C=%d: rc %d (want %d), '%s'",
          what, (long long)N, C, rc, want_rc, err);
}

static void test_shapes(void) {
    Recipe r;
    recipe_preset(&r, "nvfp4");
    recipe_resolve_layers(&r, 12);
    CHECK(recipe_quantizes(&r, 12) && !recipe_quantizes(&r, 2), "nvfp4 quantizes d12, not a 2-block model (0 + 2 BF16)");
    CHECK(recipe_tokens_multiple(&r, 1) == 16 && recipe_tokens_multiple(&r, 0) == 1, "nvfp4 token multiples %lld %lld",
          (long long)recipe_tokens_multiple(&r, 1), (long long)recipe_tokens_multiple(&r, 0));
    expect_shapes(&r, 64 * 1024, 768, 1, 0, NULL, NULL, "nvfp4 d12 B=64 T=1024");
    expect_shapes(&r, 4 * 50, 768, 1, 1, "slot wgrad.dy", "multiple of 16", "nvfp4 N=200: wgrad along tokens");
    expect_shapes(&r, 4 * 50, 768, 1, 1, "--wgrad-dy bf16", "N = 200 tokens", "nvfp4 N=200 names the fix");
    expect_shapes(&r, 4 * 50, 768, 0, 0, NULL, NULL, "nvfp4 forward-only N=200 (1x16 X blocks run along C)");
    expect_shapes(&r, 256, 200, 1, 2, "200 channels", "slot fprop.x", "nvfp4 C=200");
    Recipe off = r;
    recipe_disable_gemm(&off, 2);
    expect_shapes(&off, 200, 768, 1, 0, NULL, NULL, "nvfp4 with --fp4-wgrad off: N free");

    recipe_preset(&r, "mxfp4");
    expect_shapes(&r, 48, 768, 1, 1, "blocks of 32", "multiple of 32", "mxfp4 N=48");
    expect_shapes(&r, 1600 / 25 * 32, 1600, 1, 0, NULL, NULL, "mxfp4 d48 shapes");

    recipe_preset(&r, "nvfp4");
    r.qk_fp8 = 1;
    CHECK(recipe_tokens_multiple(&r, 1) == 32, "--qk-fp8 needs N %% 32");
    expect_shapes(&r, 48, 768, 1, 1, "--qk-fp8 off", "multiple of 32", "nvfp4 + qk-fp8 N=48");
    expect_shapes(&r, 64, 768, 1, 0, NULL, NULL, "nvfp4 + qk-fp8 N=64");

    // 2D tiles on fprop.x: the forward alone (text samples: B=1, T up to 256) needs N % 16
    recipe_preset(&r, "nvfp4");
    recipe_set_slot(&r, SLOT_FPROP_X, "nvfp4-2d");
    expect_shapes(&r, 200, 768, 0, 1, "2D tiles spanning 16", "slot fprop.x", "fprop.x 16x16, forward N=200");
    CHECK(recipe_tokens_multiple(&r, 0) == 16, "forward multiple with 16x16 X");
    // a Hadamard longer than the block
    recipe_preset(&r, "nvfp4");
    recipe_set_slot(&r, SLOT_WGRAD_DY, "nvfp4,sr,h32,fixed");
    recipe_set_slot(&r, SLOT_WGRAD_X, "nvfp4,h32,fixed");
    expect_shapes(&r, 16 * 3, 768, 1, 1, "32-point Hadamard", "multiple of 32", "h32 on wgrad, N=48");
}


// --- range limits, both sides ---------------------------------------------------------------------------

// A recipe built in a child: nvfp4 with one GEMM's two operands rotated by an n-point Hadamard (slot specs given),
// then recipe_check. The GPU kernels take up to 32 points (128 only with eden).
typedef struct { const char* a; const char* b; Gemm g; } HadamardCase;
static void hadamard_recipe(const void* arg) {
    const HadamardCase* c = (const HadamardCase*)arg;
    Recipe r;
    recipe_preset(&r, "nvfp4");
    recipe_set_slot(&r, gemm_slot_a(c->g), c->a);
    recipe_set_slot(&r, gemm_slot_b(c->g), c->b);
    recipe_check(&r);
}
typedef struct { int first, last, L; } LayersCase;
static void layers_recipe(const void* arg) {
    const LayersCase* c = (const LayersCase*)arg;
    Recipe r;
    recipe_preset(&r, "nvfp4");
    r.bf16_first = c->first;
    r.bf16_last = c->last;
    recipe_resolve_layers(&r, c->L);
}

static void test_limits(void) {
    // Hadamard size on each GEMM: 32 passes, 64 is refused (the wgrad pair also had no test at its limit)
    const HadamardCase had[] = {
        {"nvfp4,h32", "nvfp4-2d,h32", GEMM_FPROP},           {"nvfp4,h64", "nvfp4-2d,h64", GEMM_FPROP},
        {"nvfp4,sr,h32", "nvfp4-2d,h32", GEMM_DGRAD},        {"nvfp4,sr,h64", "nvfp4-2d,h64", GEMM_DGRAD},
        {"nvfp4,sr,h32,fixed", "nvfp4,h32,fixed", GEMM_WGRAD}, {"nvfp4,sr,h64,fixed", "nvfp4,h64,fixed", GEMM_WGRAD},
        {"nvfp4,sr,h128", "nvfp4,h128", GEMM_WGRAD},          // 128 without eden
        {"nvfp4,eden", "nvfp4,eden", GEMM_WGRAD},             // 128 with eden: MS-EDEN's own kernels
    };
    const int want_ok[] = {1, 0, 1, 0, 1, 0, 0, 1};
    for (size_t i = 0; i < sizeof(had) / sizeof(had[0]); i++) {
        char err[2048], want[96];
        const int n = strstr(had[i].a, "h64") ? 64 : 128;
        snprintf(want, sizeof(want), "Hadamard size %d on %s: the GPU kernels go up to 32", n, GEMM_NAMES[had[i].g]);
        int rc = test_run_child(hadamard_recipe, &had[i], err, sizeof(err));
        CHECK(want_ok[i] ? rc == 0 : rc == 1 && strstr(err, want) != NULL, "%s with %s / %s: exit %d, '%s'",
              GEMM_NAMES[had[i].g], had[i].a, had[i].b, rc, err);
    }
    // BF16 blocks: first + last may reach L, not pass it (12 blocks)
    const LayersCase layers[] = {{12, 0, 12}, {0, 12, 12}, {6, 6, 12}, {11, 1, 12}, {13, 0, 12}, {0, 13, 12},
                                 {6, 7, 12}, {12, 1, 12}, {1, 0, 1}, {1, 1, 1}};
    const int layers_ok[] = {1, 1, 1, 1, 0, 0, 0, 0, 1, 0};
    for (size_t i = 0; i < sizeof(layers) / sizeof(layers[0]); i++) {
        char err[1024], want[128];
        snprintf(want, sizeof(want), "--bf16-first-layers %d + --bf16-last-layers %d exceed the %d blocks",
                 layers[i].first, layers[i].last, layers[i].L);
        int rc = test_run_child(layers_recipe, &layers[i], err, sizeof(err));
        CHECK(layers_ok[i] ? rc == 0 : rc == 1 && strstr(err, want) != NULL, "%d + %d of %d BF16 blocks: exit %d, '%s'",
              layers[i].first, layers[i].last, layers[i].L, rc, err);
    }
    // the per-62 rule (first round(2L/62), last round(8L/62), halves up) where it steps: 2L/62 passes 0.5 between
    // L = 15 (0.48) and 16 (0.52), 1.5 between 46 (1.48) and 47 (1.52); 8L/62 passes 0.5 between 3 (0.39) and 4 (0.52),
    // 1.5 between 11 (1.42) and 12 (1.55)
    const int rule[][3] = {{15, 0, 2}, {16, 1, 2}, {46, 1, 6}, {47, 2, 6}, {3, 0, 0}, {4, 0, 1}, {11, 0, 1}, {12, 0, 2},
                           {1, 0, 0}};
    for (size_t i = 0; i < sizeof(rule) / sizeof(rule[0]); i++) {
        Recipe r;
        recipe_preset(&r, "nvfp4");
        recipe_resolve_layers(&r, rule[i][0]);
        CHECK(r.bf16_first == rule[i][1] && r.bf16_last == rule[i][2], "nvfp4 on %d blocks: first %d last %d, want %d %d",
              rule[i][0], r.bf16_first, r.bf16_last, rule[i][1], rule[i][2]);
    }
    // which blocks are FP4: [first, L - last)
    Recipe r;
    recipe_preset(&r, "nvfp4");
    r.bf16_first = 2; r.bf16_last = 3;
    recipe_resolve_layers(&r, 12);
    CHECK(!recipe_layer_is_fp4(&r, 1, 12) && recipe_layer_is_fp4(&r, 2, 12) && recipe_layer_is_fp4(&r, 8, 12) &&
          !recipe_layer_is_fp4(&r, 9, 12), "2 + 3 BF16 blocks of 12: FP4 from block 2 to block 8");
    CHECK(recipe_quantizes(&r, 6) && !recipe_quantizes(&r, 5), "2 + 3 BF16 blocks: 6 blocks quantize one, 5 none");

    // the token multiple N must be of (backward, forward only), per preset: the largest block length or Hadamard
    // along the tokens (wgrad) and 2D tile height across them (fprop.x, dgrad.dy)
    const struct { const char* preset; int qk; int64_t bwd, fwd; } mult[] = {
        {"bf16", 0, 1, 1}, {"nvfp4", 0, 16, 1}, {"nvfp4-naive", 0, 16, 1}, {"mxfp4", 0, 32, 1},
        {"mxfp4-2d", 0, 32, 1},   // dgrad.dy and wgrad.dy in 32x32 tiles; fprop.x in 1x32 blocks along K
        {"ufp4", 0, 16, 1}, {"nvfp4-4o6", 0, 16, 1}, {"quartet2", 0, 128, 1},   // MS-EDEN's h128 along the tokens
        {"quartet2-4o6", 0, 128, 1}, {"nvfp4", 1, 32, 1}, {"quartet2", 1, 128, 1}, {"mxfp4-2d", 1, 32, 1},
    };
    for (size_t i = 0; i < sizeof(mult) / sizeof(mult[0]); i++) {
        recipe_preset(&r, mult[i].preset);
        r.qk_fp8 = mult[i].qk && !recipe_is_bf16(&r);
        CHECK(recipe_tokens_multiple(&r, 1) == mult[i].bwd && recipe_tokens_multiple(&r, 0) == mult[i].fwd,
              "%s%s: token multiples %lld %lld, want %lld %lld", mult[i].preset, mult[i].qk ? " --qk-fp8" : "",
              (long long)recipe_tokens_multiple(&r, 1), (long long)recipe_tokens_multiple(&r, 0), (long long)mult[i].bwd,
              (long long)mult[i].fwd);
    }
    recipe_preset(&r, "nvfp4");
    recipe_set_slot(&r, SLOT_FPROP_X, "mxfp4-2d");
    CHECK(recipe_tokens_multiple(&r, 0) == 32, "32x32 X tiles: the forward needs N %% 32");
    // ... and recipe_check_shapes at those multiples: the multiple passes, one block less is refused
    recipe_preset(&r, "quartet2");
    expect_shapes(&r, 128, 768, 1, 0, NULL, NULL, "quartet2 N=128");
    expect_shapes(&r, 112, 768, 1, 1, "N must be a multiple of 128", "128-point Hadamard", "quartet2 N=112");
    expect_shapes(&r, 16, 768, 0, 0, NULL, NULL, "quartet2 forward only, N=16");
    expect_shapes(&r, 128, 128, 1, 0, NULL, NULL, "quartet2 C=128");
    expect_shapes(&r, 128, 64, 1, 2, "not a multiple of 128", NULL, "quartet2 C=64 (h128 along the outputs)");
    recipe_preset(&r, "nvfp4");
    expect_shapes(&r, 16, 768, 1, 0, NULL, NULL, "nvfp4 N=16");
    expect_shapes(&r, 8, 768, 1, 1, "multiple of 16", NULL, "nvfp4 N=8");
    expect_shapes(&r, 1, 768, 0, 0, NULL, NULL, "nvfp4 forward only, N=1");
    expect_shapes(&r, 16, 16, 1, 0, NULL, NULL, "nvfp4 C=16");
    expect_shapes(&r, 16, 8, 1, 2, "8 channels", NULL, "nvfp4 C=8");
    recipe_preset(&r, "mxfp4-2d");
    expect_shapes(&r, 32, 768, 1, 0, NULL, NULL, "mxfp4-2d N=32");
    expect_shapes(&r, 16, 768, 1, 1, "2D tiles spanning 32", "multiple of 32", "mxfp4-2d N=16 (dgrad.dy tiles)");
    expect_shapes(&r, 32, 32, 1, 0, NULL, NULL, "mxfp4-2d C=32");
    expect_shapes(&r, 32, 16, 1, 2, "16 channels", NULL, "mxfp4-2d C=16");

    // a slot's Hadamard: 0 or a power of two from 2 to 128
    const struct { const char* spec; int ok; } hs[] = {{"nvfp4,h0", 1}, {"nvfp4,h1", 0}, {"nvfp4,h2", 1}, {"nvfp4,h3", 0},
                                                       {"nvfp4,h128", 1}, {"nvfp4,h256", 0}, {"nvfp4,h-2", 0},
                                                       // numbers as digits only: no sign, no wrap-around
                                                       {"nvfp4,h+16", 0}, {"nvfp4,h4294967312", 0}, {"nvfp4,+1x+16", 0},
                                                       {"nvfp4,1x4294967312", 0}, {"int4,h16,seed=-1", 0},
                                                       {"int4,h16,seed=+5", 0}, {"int4,h16,seed=18446744073709551616", 0},
                                                       {"int4,h16,seed=18446744073709551615", 1}, {"int4,h16,seed=0x10", 1}};
    for (size_t i = 0; i < sizeof(hs) / sizeof(hs[0]); i++) {
        QuantSpec q;
        char err[512] = "";
        const int rc = spec_parse(hs[i].spec, &q, err, sizeof(err));
        CHECK(hs[i].ok ? rc == 0 : rc != 0 && err[0], "'%s': rc %d '%s'", hs[i].spec, rc, err);
    }
    // every number a spec holds, malformed: the message names the word. Seeds are decimal (leading zeros too, as the
    // option parser reads them, never octal) or hexadecimal after 0x, 0 to 2^64 - 1; sides 1 to 3 digits (16, 32);
    // Hadamard points 0 or a power of two to 128
    const struct { const char* spec; const char* message; } bad_numbers[] = {
        {"int4,h16,seed=", "bad seed in 'seed='"},           {"int4,h16,seed=1e3", "bad seed in 'seed=1e3'"},
        {"int4,h16,seed=12abc", "bad seed in 'seed=12abc'"}, {"int4,h16,seed=0x", "bad seed in 'seed=0x'"},
        {"int4,h16,seed=0x-1", "bad seed in 'seed=0x-1'"},   {"int4,h16,seed=0x+1", "bad seed in 'seed=0x+1'"},
        {"int4,h16,seed=0xg", "bad seed in 'seed=0xg'"},     {"int4,h16,seed=nan", "bad seed in 'seed=nan'"},
        {"int4,h16,seed=inf", "bad seed in 'seed=inf'"},     {"int4,h16,seed=1.5", "bad seed in 'seed=1.5'"},
        {"int4,h16,seed=0x10000000000000000", "bad seed in 'seed=0x10000000000000000'"},   // 2^64 in hex
        {"int4,h16,seed=99999999999999999999", "bad seed in 'seed=99999999999999999999'"},
        {"nvfp4,h", "unknown quantization option 'h'"},      {"nvfp4,h1e2", "unknown quantization option 'h1e2'"},
        {"nvfp4,h0x10", "unknown quantization option 'h0x10'"}, {"nvfp4,h0128", "unknown quantization option 'h0128'"},
        {"nvfp4,1x", "unknown quantization option '1x'"},    {"nvfp4,x16", "unknown quantization option 'x16'"},
        {"nvfp4,1x16.0", "unknown quantization option '1x16.0'"}, {"nvfp4,0x10", "block '0x10'"},
        {"nvfp4,16x0016", "unknown quantization option '16x0016'"},   // 4 digits: no side is that long
    };
    for (size_t i = 0; i < sizeof(bad_numbers) / sizeof(bad_numbers[0]); i++) {
        QuantSpec q;
        char err[512] = "";
        const int rc = spec_parse(bad_numbers[i].spec, &q, err, sizeof(err));
        CHECK(rc != 0 && strstr(err, bad_numbers[i].message), "'%s': rc %d '%s', want '%s'", bad_numbers[i].spec, rc, err,
              bad_numbers[i].message);
    }
    const struct { const char* spec; unsigned long long seed; int hadamard, w, l; } good_numbers[] = {
        {"int4,h16,seed=010", 10, 16, 1, 16},               // decimal (base 0 read it as octal: 8)
        {"int4,h16,seed=0", 0, 16, 1, 16},                   {"int4,h16,seed=0x10", 16, 16, 1, 16},
        {"int4,h16,seed=0XfF", 255, 16, 1, 16},              {"int4,h16,seed=0x0010", 16, 16, 1, 16},
        {"int4,h16,seed=0xffffffffffffffff", 18446744073709551615ull, 16, 1, 16},   // 2^64 - 1 in hex
        {"int4,h016,seed=7", 7, 16, 1, 16},                  // 3 digits, decimal
        {"nvfp4,016x016", 0, 0, 16, 16},                     {"nvfp4,h002", 0, 2, 1, 16},
    };
    for (size_t i = 0; i < sizeof(good_numbers) / sizeof(good_numbers[0]); i++) {
        QuantSpec q;
        char err[512] = "";
        const int rc = spec_parse(good_numbers[i].spec, &q, err, sizeof(err));
        CHECK(rc == 0 && q.sign_seed == good_numbers[i].seed && q.hadamard == good_numbers[i].hadamard &&
              q.block_w == good_numbers[i].w && q.block_l == good_numbers[i].l, "'%s': rc %d '%s', seed %llu h%d %dx%d, "
              "want seed %llu h%d %dx%d", good_numbers[i].spec, rc, err, (unsigned long long)q.sign_seed, q.hadamard,
              q.block_w, q.block_l, good_numbers[i].seed, good_numbers[i].hadamard, good_numbers[i].w, good_numbers[i].l);
    }

    // the slot rules, named: GEMM g reads slots 2g and 2g + 1; dgrad's and wgrad's are the backward's; src=fprop
    // reads fprop.w for dgrad.w and fprop.x for wgrad.x
    CHECK(gemm_slot_a(GEMM_FPROP) == SLOT_FPROP_X && gemm_slot_b(GEMM_FPROP) == SLOT_FPROP_W &&
          gemm_slot_a(GEMM_DGRAD) == SLOT_DGRAD_DY && gemm_slot_b(GEMM_DGRAD) == SLOT_DGRAD_W &&
          gemm_slot_a(GEMM_WGRAD) == SLOT_WGRAD_DY && gemm_slot_b(GEMM_WGRAD) == SLOT_WGRAD_X, "gemm_slot_a / gemm_slot_b");
    CHECK(!slot_is_backward(SLOT_FPROP_X) && !slot_is_backward(SLOT_FPROP_W) && slot_is_backward(SLOT_DGRAD_DY) &&
          slot_is_backward(SLOT_DGRAD_W) && slot_is_backward(SLOT_WGRAD_DY) && slot_is_backward(SLOT_WGRAD_X),
          "slot_is_backward");
    CHECK(fprop_slot_of(SLOT_DGRAD_W) == SLOT_FPROP_W && fprop_slot_of(SLOT_WGRAD_X) == SLOT_FPROP_X, "fprop_slot_of");

    // --bf16-forward-from: (0, 1] on both sides, and the tail's length where it rounds (halves up, at least one)
    const struct { const char* text; int ok; } ff[] = {{"1", 1}, {"1.0000001", 0}, {"1.2e-38", 1}, {"0", 0}, {"-0", 0},
                                                       {" 0.5", 0}, {"0x0.8p0", 0},   // strtof takes both: 0.5
                                                       {"", 0}, {"\t0.5", 0}, {"0.5 ", 0}, {"0.5abc", 0}, {"1e", 0},
                                                       {"1e-50", 0}, {"nan", 0}, {"-nan", 0}, {"inf", 0},
                                                       {"infinity", 0}, {"1e39", 0}, {"-0.5", 0}, {"10%", 0},
                                                       {"0X1P-1", 0}, {"+0.5", 1}, {".5", 1}, {"5e-1", 1}};
    for (size_t i = 0; i < sizeof(ff) / sizeof(ff[0]); i++) {
        float f = 0.5f;
        char err[512] = "";
        const int rc = fwd_parse(ff[i].text, &f, err, sizeof(err));
        CHECK(ff[i].ok ? rc == 0 : rc != 0 && strstr(err, ff[i].text), "--bf16-forward-from '%s': rc %d '%s'", ff[i].text,
              rc, err);
    }
    const struct { float f; int steps, tail; } tails[] = {{0.15f, 10, 2}, {0.149f, 10, 1}, {0.05f, 10, 1}, {0.01f, 10, 1},
                                                           {1.0f, 7, 7}, {0.5f, 0, 0}, {0.999f, 10, 10}, {0.949f, 10, 9}};
    for (size_t i = 0; i < sizeof(tails) / sizeof(tails[0]); i++)
        CHECK(bf16_forward_tail_steps(tails[i].f, tails[i].steps) == tails[i].tail, "tail of %g of %d steps: %d, want %d",
              tails[i].f, tails[i].steps, bf16_forward_tail_steps(tails[i].f, tails[i].steps), tails[i].tail);
}

// --bf16-forward-from: which step switches, given the fraction and the steps; what a resume keeps
static void test_schedule(void) {
    struct { float f; int steps, first; } cases[] = {
        {0.1f, 1000, 900},    // 0.1f * 1000 = 100.0000015: 100 steps, not 101
        {0.1f, 100, 90},
        {0.18f, 5000, 4100},  // NVIDIA's 18%
        {0.25f, 12, 9},
        {0.75f, 12, 3},
        {1.0f, 12, 0},        // the whole run
        {0.5f, 3, 1},         // 1.5 steps: halves round up, 2
        {0.01f, 10, 9},       // 0.1 steps: at least the last one
        {1e-6f, 1, 0},
        {0.3f, 7, 5},         // 2.1 steps: 2
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        RecipeSchedule s;
        recipe_schedule_init(&s, cases[i].f, cases[i].steps);
        CHECK(s.bf16_forward_step == cases[i].first && s.steps == cases[i].steps && s.bf16_forward == 0,
              "--bf16-forward-from %g of %d steps: switch at %d, want %d", cases[i].f, cases[i].steps,
              s.bf16_forward_step, cases[i].first);
        CHECK(!recipe_schedule_bf16_forward_at(&s, cases[i].first - 1) && recipe_schedule_bf16_forward_at(&s, cases[i].first) &&
              recipe_schedule_bf16_forward_at(&s, cases[i].steps - 1), "%g of %d: off before, on from the switch step",
              cases[i].f, cases[i].steps);
    }
    RecipeSchedule none;
    recipe_schedule_init(&none, 0.0f, 100);
    CHECK(none.bf16_forward_step == -1 && !recipe_schedule_bf16_forward_at(&none, 99), "no fraction: no switch");

    // parsing: (0, 1], numbers only
    const char* good[] = {"0.1", "1", "1.0", "0.000001", "5e-1"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        float f = -1.0f;
        char err[512] = "";
        CHECK(fwd_parse(good[i], &f, err, sizeof(err)) == 0 && f > 0.0f && f <= 1.0f, "'%s' accepted: %s",
              good[i], err);
    }
    struct { const char* text; const char* msg; } badf[] = {
        {"0", "outside (0, 1]"}, {"-0.1", "outside (0, 1]"}, {"1.5", "outside (0, 1]"}, {"nan", "outside (0, 1]"},
        {"inf", "outside (0, 1]"}, {"10%", "expects a fraction"}, {"", "expects a fraction"}, {"abc", "got 'abc'"},
    };
    for (size_t i = 0; i < sizeof(badf) / sizeof(badf[0]); i++) {
        float f = 0.5f;
        char err[512] = "";
        CHECK(fwd_parse(badf[i].text, &f, err, sizeof(err)) != 0 && strstr(err, badf[i].msg) && f == 0.5f,
              "'%s' refused with '%s': '%s'", badf[i].text, badf[i].msg, err);
    }

    // a checkpoint's schedule: consistent with its step, or refused
    RecipeSchedule s, out;
    char err[1024];
    recipe_schedule_init(&s, 0.25f, 12);   // switch at 9
    s.bf16_forward = 0;
    CHECK(sched_check(&s, 9, err, sizeof(err)) == 0, "at step 9 the last step run (8) was FP4: %s", err);
    CHECK(sched_check(&s, 10, err, sizeof(err)) != 0 && strstr(err, "inconsistent"), "at step 10 it must be on");
    s.bf16_forward = 1;
    CHECK(sched_check(&s, 10, err, sizeof(err)) == 0, "at step 10, on: %s", err);
    CHECK(sched_check(&none, 50, err, sizeof(err)) == 0, "no schedule: %s", err);
    RecipeSchedule broken = none;
    broken.bf16_forward = 1;
    CHECK(sched_check(&broken, 50, err, sizeof(err)) != 0, "on without a switch step is refused");

    // resuming: the same switch continues with the checkpoint's state; another is refused unless allowed
    RecipeSchedule asked;
    recipe_schedule_init(&asked, 0.25f, 12);
    CHECK(sched_resume(&s, &asked, 0, &out, err, sizeof(err)) == 0 && out.bf16_forward == 1 &&
          out.bf16_forward_step == 9, "same switch: resumed in the switched state");
    recipe_schedule_init(&asked, 0.25f, 24);   // --steps changed: the switch would move to 18
    CHECK(sched_resume(&s, &asked, 0, &out, err, sizeof(err)) != 0 && strstr(err, "from step 9 of 12") &&
          strstr(err, "from step 18 of 24") && strstr(err, "--allow-recipe-change on"), "moved switch refused: %s", err);
    CHECK(sched_resume(&s, &asked, 1, &out, err, sizeof(err)) == 0 && out.bf16_forward_step == 18 &&
          out.bf16_forward == 1 && !recipe_schedule_bf16_forward_at(&out, 10),
          "allowed: the new switch, the checkpoint's state (so the run switches back at its first step)");
    CHECK(sched_resume(&none, &asked, 0, &out, err, sizeof(err)) != 0 && strstr(err, "no BF16 forward tail"),
          "adding the switch to a run without one is a change: %s", err);
    CHECK(sched_resume(&none, &none, 0, &out, err, sizeof(err)) == 0 && out.bf16_forward_step == -1,
          "no switch before, none now");

    // the recipe after the switch: fprop's slots BF16, dgrad and wgrad untouched (Q/K follows)
    Recipe r;
    recipe_preset(&r, "nvfp4");
    r.qk_fp8 = 1;
    recipe_resolve_layers(&r, 12);
    Recipe t = recipe_with_bf16_forward(&r);
    QuantSpec qk_fprop = recipe_qk_spec(&t, SLOT_FPROP_X), qk_dgrad = recipe_qk_spec(&t, SLOT_DGRAD_DY);
    CHECK(quant_spec_is_bf16(&t.slot[SLOT_FPROP_X]) && quant_spec_is_bf16(&t.slot[SLOT_FPROP_W]) &&
          quant_spec_is_bf16(&qk_fprop) && !quant_spec_is_bf16(&qk_dgrad), "bf16 forward: fprop slots and Q/K fprop BF16");
    for (int sl = SLOT_DGRAD_DY; sl < NUM_SLOTS; sl++)
        CHECK(memcmp(&t.slot[sl], &r.slot[sl], sizeof(QuantSpec)) == 0, "bf16 forward keeps %s", SLOT_NAMES[sl]);
    CHECK(t.bf16_first == r.bf16_first && t.bf16_last == r.bf16_last && t.qk_fp8 == 1, "bf16 forward keeps the blocks");
    recipe_check(&t);
    CHECK(recipe_forward_quantized(&r, 12) && !recipe_forward_quantized(&t, 12), "forward quantized before, not after");
    recipe_preset(&r, "nvfp4");
    r.bf16_last = 2;
    recipe_resolve_layers(&r, 2);   // 0 + 2 blocks BF16: nothing quantized
    CHECK(!recipe_forward_quantized(&r, 2), "a model whose blocks are all BF16 has no FP4 forward");
    recipe_preset(&r, "bf16");
    CHECK(!recipe_forward_quantized(&r, 12), "bf16 has no FP4 forward");
}

int main(void) {
    Recipe r;
    recipe_preset(&r, "bf16");
    CHECK(recipe_is_bf16(&r), "bf16 preset quantizes something");

    recipe_preset(&r, "nvfp4");
    CHECK(spec_is(&r.slot[SLOT_FPROP_X], QGRID_E2M1, 1, 16, QSCALE_E4M3, QROUND_RNE, 0), "nvfp4 fprop.x");
    CHECK(spec_is(&r.slot[SLOT_FPROP_W], QGRID_E2M1, 16, 16, QSCALE_E4M3, QROUND_RNE, 0), "nvfp4 fprop.w: 16x16");
    CHECK(spec_is(&r.slot[SLOT_DGRAD_DY], QGRID_E2M1, 1, 16, QSCALE_E4M3, QROUND_SR, 0), "nvfp4 dgrad.dy: SR");
    CHECK(spec_is(&r.slot[SLOT_DGRAD_W], QGRID_E2M1, 16, 16, QSCALE_E4M3, QROUND_RNE, 0), "nvfp4 dgrad.w: 16x16");
    CHECK(spec_is(&r.slot[SLOT_WGRAD_DY], QGRID_E2M1, 1, 16, QSCALE_E4M3, QROUND_SR, 16) &&
          r.slot[SLOT_WGRAD_DY].signs == QSIGNS_FIXED, "nvfp4 wgrad.dy: SR, H16 fixed signs");
    CHECK(spec_is(&r.slot[SLOT_WGRAD_X], QGRID_E2M1, 1, 16, QSCALE_E4M3, QROUND_RNE, 16) &&
          r.slot[SLOT_WGRAD_X].signs == QSIGNS_FIXED, "nvfp4 wgrad.x: H16 fixed signs");
    recipe_check(&r);
    // NVIDIA kept the first 2 and last 8 of 62 blocks in BF16; the rule scales with depth
    recipe_resolve_layers(&r, 62);
    CHECK(r.bf16_first == 2 && r.bf16_last == 8, "62 blocks: first %d last %d", r.bf16_first, r.bf16_last);
    recipe_preset(&r, "nvfp4");
    recipe_resolve_layers(&r, 12);
    CHECK(r.bf16_first == 0 && r.bf16_last == 2, "12 blocks: first %d last %d", r.bf16_first, r.bf16_last);
    CHECK(!recipe_layer_is_fp4(&r, 10, 12) && !recipe_layer_is_fp4(&r, 11, 12) && recipe_layer_is_fp4(&r, 0, 12) &&
          recipe_layer_is_fp4(&r, 9, 12), "nvfp4 on 12 blocks: blocks 10 and 11 BF16, 0..9 FP4");
    recipe_preset(&r, "nvfp4");
    recipe_resolve_layers(&r, 48);
    CHECK(r.bf16_first == 2 && r.bf16_last == 6, "48 blocks: first %d last %d", r.bf16_first, r.bf16_last);

    recipe_preset(&r, "nvfp4-naive");
    for (int s = 0; s < NUM_SLOTS; s++)
        CHECK(spec_is(&r.slot[s], QGRID_E2M1, 1, 16, QSCALE_E4M3, QROUND_RNE, 0), "nvfp4-naive slot %s", SLOT_NAMES[s]);
    recipe_resolve_layers(&r, 12);
    CHECK(r.bf16_first == 0 && r.bf16_last == 0, "nvfp4-naive keeps no block in BF16");

    recipe_preset(&r, "mxfp4");
    for (int s = 0; s < NUM_SLOTS; s++)
        CHECK(spec_is(&r.slot[s], QGRID_E2M1, 1, 32, QSCALE_E8M0_FLOOR, QROUND_RNE, 0), "mxfp4 slot %s", SLOT_NAMES[s]);

    recipe_preset(&r, "mxfp4-2d");
    CHECK(spec_is(&r.slot[SLOT_FPROP_X], QGRID_E2M1, 1, 32, QSCALE_E8M0_CEIL, QROUND_RNE, 0), "mxfp4-2d fprop.x");
    CHECK(spec_is(&r.slot[SLOT_FPROP_W], QGRID_E2M1, 32, 32, QSCALE_E8M0_CEIL, QROUND_RNE, 0), "mxfp4-2d fprop.w");
    CHECK(spec_is(&r.slot[SLOT_DGRAD_W], QGRID_E2M1, 32, 32, QSCALE_E8M0_CEIL, QROUND_RNE, 0),
          "mxfp4-2d dgrad.w equals fprop.w (transposition invariant, RNE)");
    CHECK(spec_is(&r.slot[SLOT_DGRAD_DY], QGRID_E2M1, 32, 32, QSCALE_E8M0_CEIL, QROUND_SR, 0), "mxfp4-2d dgrad.dy");
    CHECK(spec_is(&r.slot[SLOT_WGRAD_DY], QGRID_E2M1, 32, 32, QSCALE_E8M0_CEIL, QROUND_SR, 0), "mxfp4-2d wgrad.dy");
    CHECK(spec_is(&r.slot[SLOT_WGRAD_X], QGRID_E2M1, 1, 32, QSCALE_E8M0_CEIL, QROUND_SR, 0), "mxfp4-2d wgrad.x");

    recipe_preset(&r, "ufp4");
    for (int s = 0; s < NUM_SLOTS; s++) {
        int sr = s == SLOT_DGRAD_DY || s == SLOT_WGRAD_DY;
        CHECK(spec_is(&r.slot[s], QGRID_INT4, 1, 16, QSCALE_E4M3, sr ? QROUND_SR : QROUND_RNE, 16) &&
              r.slot[s].signs == QSIGNS_SEEDED, "ufp4 slot %s: INT4, H16 seeded, SR on dY only", SLOT_NAMES[s]);
    }
    recipe_check(&r);

    // overrides and GEMM switches
    recipe_preset(&r, "nvfp4");
    recipe_set_slot(&r, SLOT_FPROP_X, "mxfp4,sr");
    CHECK(spec_is(&r.slot[SLOT_FPROP_X], QGRID_E2M1, 1, 32, QSCALE_E8M0_FLOOR, QROUND_SR, 0), "override fprop.x");
    recipe_disable_gemm(&r, 2);
    CHECK(quant_spec_is_bf16(&r.slot[SLOT_WGRAD_DY]) && quant_spec_is_bf16(&r.slot[SLOT_WGRAD_X]) &&
          !quant_spec_is_bf16(&r.slot[SLOT_DGRAD_DY]), "--fp4-wgrad off turns off exactly the wgrad slots");
    recipe_check(&r);   // wgrad has no Hadamard left on either side: valid

    // the description is canonical: stable and different for different recipes
    char a[1024], b[1024];
    recipe_preset(&r, "nvfp4");
    recipe_resolve_layers(&r, 12);
    recipe_describe(&r, a, sizeof(a));
    CHECK(strstr(a, "fprop.w=e2m1,16x16,e4m3,rne,h0") && strstr(a, "wgrad.dy=e2m1,1x16,e4m3,sr,h16,fixed") &&
          strstr(a, "bf16 blocks: first 0, last 2"), "nvfp4 description: %s", a);
    Recipe r2;
    recipe_preset(&r2, "nvfp4");
    recipe_resolve_layers(&r2, 12);
    recipe_describe(&r2, b, sizeof(b));
    CHECK(strcmp(a, b) == 0, "description not stable");
    recipe_set_slot(&r2, SLOT_DGRAD_DY, "nvfp4");
    recipe_describe(&r2, b, sizeof(b));
    CHECK(strcmp(a, b) != 0, "a changed slot must change the description");

    // Q/K in FP8: named in the description (so resuming without it is refused), MXFP8 where the recipe
    // quantizes, BF16 where a GEMM was switched off
    recipe_preset(&r2, "mxfp4-2d");
    recipe_disable_gemm(&r2, 2);
    r2.qk_fp8 = 1;
    recipe_resolve_layers(&r2, 12);
    recipe_describe(&r2, b, sizeof(b));
    QuantSpec qf = recipe_qk_spec(&r2, SLOT_FPROP_X), qw = recipe_qk_spec(&r2, SLOT_WGRAD_X);
    CHECK(strstr(b, "; q/k projections: fp8,1x32,e8m0,rne,h0") && !strstr(a, "q/k"), "q/k description: %s", b);
    CHECK(qf.grid == QGRID_E4M3 && qf.block_l == 32 && qf.scale == QSCALE_E8M0_FLOOR && qf.rounding == QROUND_RNE &&
          quant_spec_is_bf16(&qw), "q/k specs: fprop.x mxfp8, wgrad.x bf16 (wgrad switched off)");

    // the delayed amax rule: named in the description (resuming a run under the other rule is refused), with q/k too
    r2.amax_delayed = 1;
    recipe_describe(&r2, b, sizeof(b));
    CHECK(strstr(b, "; q/k projections: fp8,1x32,e8m0,rne,h0; tensor amax: delayed") != NULL, "delayed amax description: %s", b);
    recipe_preset(&r2, "nvfp4");
    recipe_resolve_layers(&r2, 12);
    r2.amax_delayed = 1;
    recipe_describe(&r2, b, sizeof(b));
    CHECK(strncmp(a, b, strlen(a)) == 0 && !strcmp(b + strlen(a), "; tensor amax: delayed") && !strstr(a, "amax"),
          "nvfp4 with the delayed amax: %s", b);

    // invalid recipes: one clear message, exit 1
    struct { void (*f)(const void*); const char* msg; } bad[] = {
        {bad_hadamard, "must use the same Hadamard transform"},
        {bad_preset, "unknown --recipe 'fp3'"},
        {bad_spec, "--fprop-x 'nvfp4,7x7'"},
        {too_many_bf16, "exceed the 12 blocks"},
        {qk_on_bf16, "--qk-fp8: the recipe quantizes nothing"},
        {fprop_src_not_eden, "src=fprop is MS-EDEN's operand source"},
        {fprop_src_dy, "applies to dgrad.w and wgrad.x only"},
        {fprop_src_rotated, "src=fprop needs a forward copy of W without a Hadamard"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char err[2048];
        int rc = test_run_child(bad[i].f, NULL, err, sizeof(err));
        CHECK(rc == 1 && strstr(err, bad[i].msg) != NULL, "case %zu: exit %d, stderr '%s', expected '%s'", i, rc, err,
              bad[i].msg);
    }
    test_shapes();
    test_limits();
    test_schedule();
    // the spec parser's remaining checks, each next to the nearest spec it takes: the length (255 characters taken,
    // 256 refused; commas alone are no words), a source, an empty spec, SR on the fp8 grid, 4o6 off e2m1
    char long255[256], long256[300];
    snprintf(long255, sizeof(long255), "nvfp4%0250d", 0);
    for (char* p = long255 + 5; *p; p++) *p = ',';
    snprintf(long256, sizeof(long256), "%s,", long255);
    const struct { const char* spec; const char* message; } specs[] = {
        {long255, NULL},        {long256, "spec too long"},
        {"nvfp4,eden,src=fprop", NULL}, {"nvfp4,eden,src=fp4", "'src=fp4': use src=bf16 or src=fprop"},
        {"nvfp4,src=", "'src=': use src=bf16 or src=fprop"},
        {"bf16", NULL},         {"", "an empty spec"},   {" ,:", "an empty spec"},
        {"fp8", NULL},          {"fp8,sr", "'fp8,sr': the fp8 (E4M3) grid rounds to nearest only (no sr)"},
        {"mxfp8,sr", "the fp8 (E4M3) grid rounds to nearest only"},
        {"nvfp4,4o6", NULL},    {"int4,4o6", "'int4,4o6': 4o6 (Four Over Six) chooses between mapping"},
        {"e1m2,e4m3,4o6", "use it with e2m1 only"},
    };
    for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
        QuantSpec q;
        char err[512] = "";
        const int rc = spec_parse(specs[i].spec, &q, err, sizeof(err));
        if (specs[i].message)
            CHECK(rc != 0 && strstr(err, specs[i].message), "'%.40s': rc %d '%s', want '%s'", specs[i].spec, rc, err,
                  specs[i].message);
        else
            CHECK(rc == 0, "'%.40s' (%zu characters): rc %d '%s'", specs[i].spec, strlen(specs[i].spec), rc, err);
    }

    // every message of the spec parser, --bf16-forward-from's parser and schedule, and the shape rules was drawn above
    static const CheckSite sites[] = {
        {"llmc/fp4/formats.h", "quant_spec_parse", 1},      {"llmc/fp4/recipe_schedule.h", "bf16_forward_parse", 1},
        {"llmc/fp4/recipe_schedule.h", "recipe_schedule_check", 1}, {"llmc/fp4/recipe_schedule.h", "recipe_schedule_resume", 1},
        {"llmc/fp4/recipe.h", "recipe_check_operand_", 1},
    };
    check_every_site("test_recipe", sites, sizeof(sites) / sizeof(sites[0]), NULL, 0);
    return test_summary("test_recipe");
}
