// test_plan.c: CPU tests of llmc/fp4/linear_plan.h: for every preset, with and without FP8 Q/K projections,
// on BF16 and FP4 blocks, with a GEMM switched off, on the native path and on the FP8 path, each linear's plan reads each
// slot from the right tensor along the right axis, in the form the recipe asks, with the recipe's spec;
// the passes make every quantized copy exactly once from one read of its source; the forward takes the
// amax of exactly the backward copies that can share its read; a split QKV has the Q/K part [0, 2C) on
// MXFP8 and the V part [2C, 3C) on the recipe.
// The expectations are written out here from docs/RECIPES.md, not taken from the plan code.
#include "llmc/fp4/linear_plan.h"
#include "dev/test/testing.h"

// fprop.x fprop.w dgrad.dy dgrad.w wgrad.dy wgrad.x: source and axis
static const OperandSource WANT_SOURCE[NUM_SLOTS] = {SRC_X, SRC_W, SRC_DY, SRC_W, SRC_DY, SRC_X};
static const int WANT_AXIS[NUM_SLOTS] = {1, 1, 1, 0, 0, 0};

static int same_spec(const QuantSpec* a, const QuantSpec* b) {
    char x[96], y[96];
    quant_spec_format(a, x, sizeof(x));
    quant_spec_format(b, y, sizeof(y));
    return strcmp(x, y) == 0;
}

// A spec the FP8 path takes: 4-bit elements (not the fp8 grid) with power-of-two block scales.
static int want_foldable(const QuantSpec* s) {
    return s->grid != QGRID_BF16 && s->grid != QGRID_E4M3 && (s->scale == QSCALE_E8M0_FLOOR || s->scale == QSCALE_E8M0_CEIL);
}

static void check_part(const Recipe* r, const LinearPart* p, int fp4, int qk, GemmPath path, const char* what) {
    for (int s = 0; s < NUM_SLOTS; s++) {
        const OperandPlan* o = &p->op[s];
        CHECK(o->slot == s && o->src == WANT_SOURCE[s] && o->axis == WANT_AXIS[s], "%s: slot %s reads %s along axis %d",
              what, SLOT_NAMES[s], SOURCE_NAMES[o->src], o->axis);
        const int quantized = fp4 && !quant_spec_is_bf16(&r->slot[s]);
        const int other = s ^ 1;   // the other operand of the same GEMM
        const int gemm_native = path == GEMM_PATH_NATIVE && !qk && quantized && !quant_spec_is_bf16(&r->slot[other]);
        QuantSpec mine = qk ? recipe_qk_spec(r, (Slot)s) : r->slot[s], theirs = qk ? recipe_qk_spec(r, (Slot)other) : r->slot[other];
        const int gemm_fp8 = path == GEMM_PATH_FP8 && quantized && !quant_spec_is_bf16(&r->slot[other]) &&
                             want_foldable(&mine) && want_foldable(&theirs);
        const OperandForm want = !quantized ? FORM_BF16 : gemm_native ? FORM_PACKED : gemm_fp8 ? FORM_FP8 : FORM_FAKE;
        CHECK(o->form == want, "%s: slot %s form %s, want %s", what, SLOT_NAMES[s], FORM_NAMES[o->form], FORM_NAMES[want]);
        if (quantized) {
            QuantSpec spec = qk ? recipe_qk_spec(r, (Slot)s) : r->slot[s];
            CHECK(same_spec(&o->spec, &spec), "%s: slot %s has another spec than the recipe's", what, SLOT_NAMES[s]);
        }
    }
    // every quantized slot made exactly once, in its GEMM's phase, by a pass over its source
    int made[NUM_SLOTS] = {0};
    for (int ph = 0; ph < 2; ph++)
        for (int i = 0; i < p->npasses[ph]; i++) {
            const QuantPass* q = &p->pass[ph][i];
            CHECK(q->ntargets >= 1 && q->ntargets <= 2, "%s: a pass with %d copies", what, q->ntargets);
            if (q->ntargets == 2)
                CHECK(WANT_AXIS[q->target[0]] != WANT_AXIS[q->target[1]], "%s: two copies of one axis in a pass", what);
            for (int k = 0; k < q->ntargets; k++) {
                const Slot s = q->target[k];
                CHECK(WANT_SOURCE[s] == q->src && (s >= 2) == ph, "%s: pass over %s makes %s in the %s", what,
                      SOURCE_NAMES[q->src], SLOT_NAMES[s], ph ? "backward" : "forward");
                made[s]++;
            }
            // the forward takes ahead the amax of the backward copy of its source, when the backward makes it
            // alone and both are fake-quant copies or both FP8 (X: wgrad.x, W: dgrad.w; never dY, which has no
            // forward), unless that copy reads the forward's dequantized copy (src=fprop) or is MS-EDEN's (its
            // amax is of the 128-point rotation, taken by its own pass)
            int want_ahead = NO_SLOT;
            if (!ph && q->ntargets == 1) {
                const int b = q->src == SRC_X ? SLOT_WGRAD_X : SLOT_DGRAD_W;
                const OperandForm f = p->op[q->target[0]].form;
                const int eden_or_fprop = p->op[b].form != FORM_BF16 &&
                                          (p->op[b].spec.rounding == QROUND_EDEN || p->op[b].spec.source == QSRC_FPROP);
                if (f == p->op[b].form && (f == FORM_FAKE || f == FORM_FP8) && !eden_or_fprop) want_ahead = b;
            }
            CHECK(q->ahead == want_ahead, "%s: pass over %s takes ahead %s, want %s", what, SOURCE_NAMES[q->src],
                  q->ahead == NO_SLOT ? "nothing" : SLOT_NAMES[q->ahead], want_ahead == NO_SLOT ? "nothing" : SLOT_NAMES[want_ahead]);
        }
    for (int s = 0; s < NUM_SLOTS; s++)
        CHECK(made[s] == (p->op[s].form != FORM_BF16), "%s: slot %s made %d times", what, SLOT_NAMES[s], made[s]);
    // src=fprop: dgrad.w and wgrad.x read the forward's copy of W and X when the forward quantizes it; MS-EDEN's
    // operands draw their Hadamard signs per call
    for (int s = 0; s < NUM_SLOTS; s++) {
        const OperandPlan* o = &p->op[s];
        const int fs = s == SLOT_DGRAD_W ? SLOT_FPROP_W : SLOT_FPROP_X;
        const int want_fprop = (s == SLOT_DGRAD_W || s == SLOT_WGRAD_X) && o->form != FORM_BF16 &&
                               o->spec.source == QSRC_FPROP && p->op[fs].form != FORM_BF16;
        CHECK(o->from_fprop == want_fprop, "%s: slot %s from the forward's copy: %d, want %d", what, SLOT_NAMES[s],
              o->from_fprop, want_fprop);
        CHECK((o->form != FORM_BF16 && o->q.step_signs) == (o->form != FORM_BF16 && o->spec.signs == QSIGNS_STEP), "%s: slot %s step signs", what,
              SLOT_NAMES[s]);
    }
    // the dY copies share one read
    if (p->op[SLOT_DGRAD_DY].form != FORM_BF16 && p->op[SLOT_WGRAD_DY].form != FORM_BF16) {
        int shared = 0;
        for (int i = 0; i < p->npasses[1]; i++) shared |= p->pass[1][i].src == SRC_DY && p->pass[1][i].ntargets == 2;
        CHECK(shared, "%s: dY's two copies take two reads", what);
    }
}

static void check_recipe(const Recipe* r0, int L, int C, GemmPath path, const char* label) {
    Recipe r = *r0;
    recipe_resolve_layers(&r, L);
    recipe_check(&r);
    int plans = 0;
    for (int l = 0; l < L; l++)
        for (int kind = 0; kind < 4; kind++) {
            const int OC = kind == 0 ? 3 * C : kind == 2 ? 4 * C : C;
            LinearPlan lp;
            linear_plan_build(&lp, &r, l, L, kind == 0 ? 2 * C : 0, OC, path);
            const int fp4 = !recipe_is_bf16(&r) && l >= r.bf16_first && l < L - r.bf16_last;
            const int split = fp4 && r.qk_fp8 && kind == 0;
            char what[160];
            snprintf(what, sizeof(what), "%s layer %d linear %d", label, l, kind);
            CHECK(lp.quantized == fp4 && lp.nparts == (split ? 2 : 1), "%s: %d parts", what, lp.nparts);
            if (split) {
                CHECK(lp.part[0].o0 == 0 && lp.part[0].n == 2 * C && lp.part[0].qk && lp.part[1].o0 == 2 * C &&
                      lp.part[1].n == C && !lp.part[1].qk, "%s: split parts", what);
            } else {
                CHECK(lp.part[0].o0 == 0 && lp.part[0].n == OC && !lp.part[0].qk, "%s: one part of all %d outputs", what, OC);
            }
            for (int p = 0; p < lp.nparts; p++) check_part(&r, &lp.part[p], fp4, lp.part[p].qk, path, what);
            plans++;
        }
    printf("  %s: %d plans\n", label, plans);
}

int main(void) {
    const int L = 12, C = 768;
    for (int i = 0; i < NUM_RECIPE_PRESETS; i++) {
        Recipe r;
        char label[96];
        recipe_preset(&r, RECIPE_PRESETS[i].name);
        check_recipe(&r, L, C, GEMM_PATH_EMULATED, RECIPE_PRESETS[i].name);
        snprintf(label, sizeof(label), "%s, FP8 path", RECIPE_PRESETS[i].name);
        check_recipe(&r, L, C, GEMM_PATH_FP8, label);
        if (recipe_is_bf16(&r)) continue;
        r.qk_fp8 = 1;
        snprintf(label, sizeof(label), "%s --qk-fp8", RECIPE_PRESETS[i].name);
        check_recipe(&r, L, C, GEMM_PATH_EMULATED, label);
        snprintf(label, sizeof(label), "%s --qk-fp8, FP8 path", RECIPE_PRESETS[i].name);
        check_recipe(&r, L, C, GEMM_PATH_FP8, label);
        r.qk_fp8 = 0;
        recipe_disable_gemm(&r, 1);
        r.bf16_first = 1;
        snprintf(label, sizeof(label), "%s --fp4-dgrad off --bf16-first-layers 1", RECIPE_PRESETS[i].name);
        check_recipe(&r, L, C, GEMM_PATH_EMULATED, label);
        snprintf(label, sizeof(label), "%s --fp4-dgrad off --bf16-first-layers 1, FP8 path", RECIPE_PRESETS[i].name);
        check_recipe(&r, L, C, GEMM_PATH_FP8, label);
    }
    Recipe r;
    recipe_preset(&r, "nvfp4-naive");
    check_recipe(&r, L, C, GEMM_PATH_NATIVE, "nvfp4-naive, native GEMMs");
    recipe_preset(&r, "nvfp4");
    recipe_disable_gemm(&r, 2);
    check_recipe(&r, L, C, GEMM_PATH_NATIVE, "nvfp4 --fp4-wgrad off, native GEMMs");
    recipe_preset(&r, "mxfp4");
    recipe_set_slot(&r, SLOT_DGRAD_DY, "bf16");   // one BF16 operand: the GEMM's other operand alone is quantized
    check_recipe(&r, L, C, GEMM_PATH_EMULATED, "mxfp4 --dgrad-dy bf16");
    check_recipe(&r, L, C, GEMM_PATH_FP8, "mxfp4 --dgrad-dy bf16, FP8 path");
    recipe_preset(&r, "mxfp4");
    recipe_set_slot(&r, SLOT_WGRAD_X, "nvfp4");   // E4M3 scales on one side: that GEMM stays emulated
    recipe_set_slot(&r, SLOT_FPROP_X, "int4,e8m0");
    check_recipe(&r, L, C, GEMM_PATH_FP8, "mxfp4 --wgrad-x nvfp4 --fprop-x int4,e8m0, FP8 path");

    // what a plan reads like (nvfp4's fc linear, and the split QKV)
    LinearPlan lp;
    char text[2048];
    recipe_preset(&r, "nvfp4");
    recipe_resolve_layers(&r, L);
    linear_plan_build(&lp, &r, 5, L, 0, 4 * C, GEMM_PATH_EMULATED);
    linear_plan_describe(&lp, text, sizeof(text));
    printf("  nvfp4 fc: %s\n", text);
    CHECK(strstr(text, "bwd pass dY->dgrad.dy+wgrad.dy") != NULL, "description: dY's shared pass");
    r.qk_fp8 = 1;
    linear_plan_build(&lp, &r, 5, L, 2 * C, 3 * C, GEMM_PATH_EMULATED);
    linear_plan_describe(&lp, text, sizeof(text));
    printf("  nvfp4 --qk-fp8 qkv: %s\n", text);
    recipe_preset(&r, "mxfp4-2d");
    recipe_resolve_layers(&r, L);
    r.qk_fp8 = 1;
    linear_plan_build(&lp, &r, 5, L, 2 * C, 3 * C, GEMM_PATH_FP8);
    linear_plan_describe(&lp, text, sizeof(text));
    printf("  mxfp4-2d --qk-fp8 qkv, FP8 path: %s\n", text);
    CHECK(lp.part[0].op[SLOT_FPROP_X].form == FORM_FAKE && lp.part[1].op[SLOT_FPROP_X].form == FORM_FP8,
          "FP8 path: the Q/K part (MXFP8) stays emulated, the V part folds");
    return test_summary("test_plan");
}
