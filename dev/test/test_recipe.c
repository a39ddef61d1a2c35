// test_recipe.c: CPU tests of llmc/recipe.h: the presets resolve to the slot specs RECIPES.md
// describes, overrides and GEMM switches act on the right slots, the BF16-block rule scales with
// depth, the canonical description is stable, and invalid recipes fail with a clear message.
#include "llmc/recipe.h"
#include "dev/test/testing.h"

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

    // invalid recipes: one clear message, exit 1
    struct { void (*f)(const void*); const char* msg; } bad[] = {
        {bad_hadamard, "must use the same Hadamard transform"},
        {bad_preset, "unknown --recipe 'fp3'"},
        {bad_spec, "--fprop-x 'nvfp4,7x7'"},
        {too_many_bf16, "exceed the 12 blocks"},
        {qk_on_bf16, "--qk-fp8: the recipe quantizes nothing"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char err[2048];
        int rc = test_run_child(bad[i].f, NULL, err, sizeof(err));
        CHECK(rc == 1 && strstr(err, bad[i].msg) != NULL, "case %zu: exit %d, stderr '%s', expected '%s'", i, rc, err,
              bad[i].msg);
    }
    return test_summary("test_recipe");
}
