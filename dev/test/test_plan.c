// test_plan.c: CPU tests of llmc/fp4/linear_plan.h: for every preset, with and without FP8 Q/K projections,
// on BF16 and FP4 blocks, with a GEMM switched off, on the native path and on the FP8 path, each linear's plan reads each
// slot from the right tensor along the right axis, in the form the recipe asks, with the recipe's spec;
// the passes make every quantized copy exactly once from one read of its source; the forward takes the
// amax of exactly the backward copies that can share its read; a split QKV has the Q/K part [0, 2C) on
// MXFP8 and the V part [2C, 3C) on the recipe. Every preset also runs with one forward operand in BF16 and the
// other in FP4 (the rules that read the forward's copy, src=fprop, and take a backward amax ahead depend on which
// one), against plans written out by hand. And the helpers the CPU twins share with the GPU kernels that size, count
// and place things (fp8_fold.h's window, offsets and count of blocks below it, the Hadamard sign masks and scales,
// the scale swizzle's inverse, exp2_exact, ceil_div, the amax order), at their boundaries, against numbers worked out
// by hand here: a twin compared only with the kernel would agree with it on a wrong count.
// The expectations are written out here from docs/RECIPES.md, not taken from the plan code.
#include "llmc/fp4/linear_plan.h"
#include "llmc/fp4/quant_cpu.h"
#include "llmc/fp4/matmul_fp4_layout.h"
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


// --- mixed forward operands, plans written out by hand --------------------------------------------------

// A part in short: each slot's form (b bf16, f fake, p packed, 8 fp8) in slot order; the forward's passes and the
// backward's, each as SOURCE:copy[+copy][^slot whose amax it takes ahead] in the order dY, X, W ("-": none); the
// slots read from the forward's copy (src=fprop); "cmp" when the diagnostics compare the two W copies.
static void part_summary(const LinearPart* p, char* buf, size_t cap) {
    static const char FORM_CHAR[NUM_FORMS] = {'b', 'f', 'p', '8'};
    size_t o = 0;
    for (int s = 0; s < NUM_SLOTS; s++) o += (size_t)snprintf(buf + o, cap - o, "%c", FORM_CHAR[p->op[s].form]);
    for (int ph = 0; ph < 2; ph++) {
        o += (size_t)snprintf(buf + o, cap - o, " | %s", ph ? "bwd" : "fwd");
        if (!p->npasses[ph]) o += (size_t)snprintf(buf + o, cap - o, " -");
        for (int i = 0; i < p->npasses[ph]; i++) {
            const QuantPass* q = &p->pass[ph][i];
            o += (size_t)snprintf(buf + o, cap - o, " %s:%s%s%s%s%s", SOURCE_NAMES[q->src], SLOT_NAMES[q->target[0]],
                                  q->ntargets > 1 ? "+" : "", q->ntargets > 1 ? SLOT_NAMES[q->target[1]] : "",
                                  q->ahead != NO_SLOT ? "^" : "", q->ahead != NO_SLOT ? SLOT_NAMES[q->ahead] : "");
        }
    }
    if (p->op[SLOT_DGRAD_W].from_fprop || p->op[SLOT_WGRAD_X].from_fprop)
        o += (size_t)snprintf(buf + o, cap - o, " | src=fprop%s%s", p->op[SLOT_DGRAD_W].from_fprop ? " dgrad.w" : "",
                              p->op[SLOT_WGRAD_X].from_fprop ? " wgrad.x" : "");
    if (p->compare_w) snprintf(buf + o, cap - o, " | cmp");
}

// Which forward operand a case keeps in BF16.
enum { MIX_NONE, MIX_X, MIX_W, MIX_BOTH };

// The preset, with fprop.x (MIX_X), fprop.w (MIX_W) or both (--fp4-fprop off) in BF16. A remaining FP4 forward
// operand drops its Hadamard (ufp4's h16): the two operands of fprop must share one, and a BF16 operand has none.
static Recipe mixed_recipe(const char* preset, int mix) {
    Recipe r;
    recipe_preset(&r, preset);
    if (mix == MIX_BOTH) recipe_disable_gemm(&r, GEMM_FPROP);
    if (mix == MIX_X || mix == MIX_W) {
        const Slot off = mix == MIX_X ? SLOT_FPROP_X : SLOT_FPROP_W, on = mix == MIX_X ? SLOT_FPROP_W : SLOT_FPROP_X;
        recipe_set_slot(&r, off, "bf16");
        QuantSpec* q = &r.slot[on];
        if (q->hadamard) { q->hadamard = 0; q->signs = QSIGNS_NONE; q->sign_seed = 0; }
    }
    return r;
}

// The backward passes every preset makes when its four backward operands are quantized
#define BWD " | bwd dY:dgrad.dy+wgrad.dy X:wgrad.x W:dgrad.w"

typedef struct {
    const char* preset;
    int mix;
    GemmPath path;
    int qk;              // --qk-fp8, on the QKV linear (two parts)
    const char* want[2]; // part 0 (the Q/K part when split), part 1
} MixedCase;

// docs/RECIPES.md and ARCHITECTURE.md ("The plan: which copy is made where"): a forward pass takes the amax of the
// backward copy of its source ahead when the backward makes that copy alone, both copies are fake (or both FP8), and
// the backward copy is neither src=fprop nor MS-EDEN's; src=fprop reads the forward's copy only where the forward
// quantizes that operand (dgrad.w: fprop.w, wgrad.x: fprop.x); the W copies are compared when both are fake and
// unrotated and the linear is not split; native GEMMs and FP8 forms need both operands of a GEMM quantized.
static const MixedCase MIXED[] = {
    {"nvfp4", MIX_NONE, GEMM_PATH_EMULATED, 0, {"ffffff | fwd X:fprop.x^wgrad.x W:fprop.w^dgrad.w" BWD " | cmp"}},
    {"nvfp4", MIX_X, GEMM_PATH_EMULATED, 0, {"bfffff | fwd W:fprop.w^dgrad.w" BWD " | cmp"}},
    {"nvfp4", MIX_W, GEMM_PATH_EMULATED, 0, {"fbffff | fwd X:fprop.x^wgrad.x" BWD}},
    {"nvfp4", MIX_BOTH, GEMM_PATH_EMULATED, 0, {"bbffff | fwd -" BWD}},
    {"nvfp4-naive", MIX_X, GEMM_PATH_EMULATED, 0, {"bfffff | fwd W:fprop.w^dgrad.w" BWD " | cmp"}},
    {"nvfp4-naive", MIX_W, GEMM_PATH_EMULATED, 0, {"fbffff | fwd X:fprop.x^wgrad.x" BWD}},
    {"mxfp4", MIX_X, GEMM_PATH_EMULATED, 0, {"bfffff | fwd W:fprop.w^dgrad.w" BWD " | cmp"}},
    {"mxfp4", MIX_W, GEMM_PATH_EMULATED, 0, {"fbffff | fwd X:fprop.x^wgrad.x" BWD}},
    {"mxfp4-2d", MIX_X, GEMM_PATH_EMULATED, 0, {"bfffff | fwd W:fprop.w^dgrad.w" BWD " | cmp"}},
    {"mxfp4-2d", MIX_W, GEMM_PATH_EMULATED, 0, {"fbffff | fwd X:fprop.x^wgrad.x" BWD}},
    {"ufp4", MIX_NONE, GEMM_PATH_EMULATED, 0, {"ffffff | fwd X:fprop.x^wgrad.x W:fprop.w^dgrad.w" BWD}},
    {"ufp4", MIX_X, GEMM_PATH_EMULATED, 0, {"bfffff | fwd W:fprop.w^dgrad.w" BWD}},   // dgrad.w keeps its h16: no cmp
    {"ufp4", MIX_W, GEMM_PATH_EMULATED, 0, {"fbffff | fwd X:fprop.x^wgrad.x" BWD}},
    {"nvfp4-4o6", MIX_X, GEMM_PATH_EMULATED, 0, {"bfffff | fwd W:fprop.w^dgrad.w" BWD " | cmp"}},
    {"nvfp4-4o6", MIX_W, GEMM_PATH_EMULATED, 0, {"fbffff | fwd X:fprop.x^wgrad.x" BWD}},
    // src=fprop: from the forward's copy only where the forward quantizes; MS-EDEN copies take no amax ahead
    {"quartet2", MIX_NONE, GEMM_PATH_EMULATED, 0, {"ffffff | fwd X:fprop.x W:fprop.w" BWD " | src=fprop dgrad.w wgrad.x"}},
    {"quartet2", MIX_X, GEMM_PATH_EMULATED, 0, {"bfffff | fwd W:fprop.w" BWD " | src=fprop dgrad.w"}},
    {"quartet2", MIX_W, GEMM_PATH_EMULATED, 0, {"fbffff | fwd X:fprop.x" BWD " | src=fprop wgrad.x"}},
    {"quartet2", MIX_BOTH, GEMM_PATH_EMULATED, 0, {"bbffff | fwd -" BWD}},
    {"quartet2-4o6", MIX_NONE, GEMM_PATH_EMULATED, 0,
     {"ffffff | fwd X:fprop.x W:fprop.w" BWD " | src=fprop dgrad.w wgrad.x"}},
    {"quartet2-4o6", MIX_X, GEMM_PATH_EMULATED, 0, {"bfffff | fwd W:fprop.w" BWD " | src=fprop dgrad.w"}},
    {"quartet2-4o6", MIX_W, GEMM_PATH_EMULATED, 0, {"fbffff | fwd X:fprop.x" BWD " | src=fprop wgrad.x"}},
    {"quartet2-4o6", MIX_BOTH, GEMM_PATH_EMULATED, 0, {"bbffff | fwd -" BWD}},
    // the FP8 path: E8M0 operands fold in pairs; a lone fprop operand stays fake, so its amax is not taken ahead
    // for the backward's FP8 copy; E4M3-scaled recipes stay emulated
    {"mxfp4", MIX_NONE, GEMM_PATH_FP8, 0, {"888888 | fwd X:fprop.x^wgrad.x W:fprop.w^dgrad.w" BWD}},
    {"mxfp4", MIX_X, GEMM_PATH_FP8, 0, {"bf8888 | fwd W:fprop.w" BWD}},
    {"mxfp4", MIX_W, GEMM_PATH_FP8, 0, {"fb8888 | fwd X:fprop.x" BWD}},
    {"mxfp4-2d", MIX_X, GEMM_PATH_FP8, 0, {"bf8888 | fwd W:fprop.w" BWD}},
    {"mxfp4-2d", MIX_W, GEMM_PATH_FP8, 0, {"fb8888 | fwd X:fprop.x" BWD}},
    {"nvfp4", MIX_X, GEMM_PATH_FP8, 0, {"bfffff | fwd W:fprop.w^dgrad.w" BWD " | cmp"}},
    {"quartet2", MIX_X, GEMM_PATH_FP8, 0, {"bfffff | fwd W:fprop.w" BWD " | src=fprop dgrad.w"}},
    {"quartet2", MIX_W, GEMM_PATH_FP8, 0, {"fbffff | fwd X:fprop.x" BWD " | src=fprop wgrad.x"}},
    // native GEMMs: packed pairs; a lone fprop operand stays fake (and src=fprop still reads its copy)
    {"nvfp4", MIX_NONE, GEMM_PATH_NATIVE, 0, {"pppppp | fwd X:fprop.x W:fprop.w" BWD}},
    {"nvfp4", MIX_X, GEMM_PATH_NATIVE, 0, {"bfpppp | fwd W:fprop.w" BWD}},
    {"nvfp4", MIX_W, GEMM_PATH_NATIVE, 0, {"fbpppp | fwd X:fprop.x" BWD}},
    {"quartet2", MIX_NONE, GEMM_PATH_NATIVE, 0, {"pppppp | fwd X:fprop.x W:fprop.w" BWD " | src=fprop dgrad.w wgrad.x"}},
    {"quartet2", MIX_X, GEMM_PATH_NATIVE, 0, {"bfpppp | fwd W:fprop.w" BWD " | src=fprop dgrad.w"}},
    {"quartet2", MIX_W, GEMM_PATH_NATIVE, 0, {"fbpppp | fwd X:fprop.x" BWD " | src=fprop wgrad.x"}},
    // --qk-fp8 on the QKV linear: the Q/K part is MXFP8 where the recipe quantizes (BF16 where it does not), read from
    // BF16 (no src=fprop, so its W amax is taken ahead); the V part is the recipe's; a split linear compares no W copies
    {"quartet2", MIX_X, GEMM_PATH_EMULATED, 1,
     {"bfffff | fwd W:fprop.w^dgrad.w" BWD, "bfffff | fwd W:fprop.w" BWD " | src=fprop dgrad.w"}},
    {"quartet2", MIX_W, GEMM_PATH_FP8, 1,
     {"fbffff | fwd X:fprop.x^wgrad.x" BWD, "fbffff | fwd X:fprop.x" BWD " | src=fprop wgrad.x"}},
    {"nvfp4", MIX_W, GEMM_PATH_EMULATED, 1, {"fbffff | fwd X:fprop.x^wgrad.x" BWD, "fbffff | fwd X:fprop.x^wgrad.x" BWD}},
    {"mxfp4", MIX_X, GEMM_PATH_FP8, 1, {"bfffff | fwd W:fprop.w^dgrad.w" BWD, "bf8888 | fwd W:fprop.w" BWD}},
    // every src=fprop preset (quartet2, quartet2-4o6) on every path with each forward operand BF16, both, or neither:
    // E4M3 block scales (4o6 too) never fold, so the FP8 path is the emulated plan; native packs each GEMM whose two
    // operands are quantized (4o6's scales are E4M3 bytes too); with the forward all BF16 nothing reads its copy
    {"quartet2", MIX_NONE, GEMM_PATH_FP8, 0, {"ffffff | fwd X:fprop.x W:fprop.w" BWD " | src=fprop dgrad.w wgrad.x"}},
    {"quartet2", MIX_BOTH, GEMM_PATH_FP8, 0, {"bbffff | fwd -" BWD}},
    {"quartet2", MIX_BOTH, GEMM_PATH_NATIVE, 0, {"bbpppp | fwd -" BWD}},
    {"quartet2-4o6", MIX_NONE, GEMM_PATH_FP8, 0, {"ffffff | fwd X:fprop.x W:fprop.w" BWD " | src=fprop dgrad.w wgrad.x"}},
    {"quartet2-4o6", MIX_X, GEMM_PATH_FP8, 0, {"bfffff | fwd W:fprop.w" BWD " | src=fprop dgrad.w"}},
    {"quartet2-4o6", MIX_W, GEMM_PATH_FP8, 0, {"fbffff | fwd X:fprop.x" BWD " | src=fprop wgrad.x"}},
    {"quartet2-4o6", MIX_BOTH, GEMM_PATH_FP8, 0, {"bbffff | fwd -" BWD}},
    {"quartet2-4o6", MIX_NONE, GEMM_PATH_NATIVE, 0,
     {"pppppp | fwd X:fprop.x W:fprop.w" BWD " | src=fprop dgrad.w wgrad.x"}},
    {"quartet2-4o6", MIX_X, GEMM_PATH_NATIVE, 0, {"bfpppp | fwd W:fprop.w" BWD " | src=fprop dgrad.w"}},
    {"quartet2-4o6", MIX_W, GEMM_PATH_NATIVE, 0, {"fbpppp | fwd X:fprop.x" BWD " | src=fprop wgrad.x"}},
    {"quartet2-4o6", MIX_BOTH, GEMM_PATH_NATIVE, 0, {"bbpppp | fwd -" BWD}},
    // ... and split by --qk-fp8: the Q/K part (MXFP8, read from BF16) takes its amaxes ahead, never packs and never
    // folds (an E4M3 grid); the V part is the recipe's, src=fprop where its forward operand is FP4
    {"quartet2", MIX_NONE, GEMM_PATH_EMULATED, 1,
     {"ffffff | fwd X:fprop.x^wgrad.x W:fprop.w^dgrad.w" BWD,
      "ffffff | fwd X:fprop.x W:fprop.w" BWD " | src=fprop dgrad.w wgrad.x"}},
    {"quartet2", MIX_NONE, GEMM_PATH_NATIVE, 1,   // a split QKV never runs native: both parts fake
     {"ffffff | fwd X:fprop.x^wgrad.x W:fprop.w^dgrad.w" BWD,
      "ffffff | fwd X:fprop.x W:fprop.w" BWD " | src=fprop dgrad.w wgrad.x"}},
    {"quartet2", MIX_X, GEMM_PATH_NATIVE, 1,
     {"bfffff | fwd W:fprop.w^dgrad.w" BWD, "bfffff | fwd W:fprop.w" BWD " | src=fprop dgrad.w"}},
    {"quartet2", MIX_W, GEMM_PATH_EMULATED, 1,
     {"fbffff | fwd X:fprop.x^wgrad.x" BWD, "fbffff | fwd X:fprop.x" BWD " | src=fprop wgrad.x"}},
    {"quartet2", MIX_BOTH, GEMM_PATH_EMULATED, 1, {"bbffff | fwd -" BWD, "bbffff | fwd -" BWD}},
    {"quartet2-4o6", MIX_X, GEMM_PATH_EMULATED, 1,
     {"bfffff | fwd W:fprop.w^dgrad.w" BWD, "bfffff | fwd W:fprop.w" BWD " | src=fprop dgrad.w"}},
    {"quartet2-4o6", MIX_W, GEMM_PATH_FP8, 1,
     {"fbffff | fwd X:fprop.x^wgrad.x" BWD, "fbffff | fwd X:fprop.x" BWD " | src=fprop wgrad.x"}},
    {"quartet2-4o6", MIX_X, GEMM_PATH_NATIVE, 1,
     {"bfffff | fwd W:fprop.w^dgrad.w" BWD, "bfffff | fwd W:fprop.w" BWD " | src=fprop dgrad.w"}},
    {"quartet2-4o6", MIX_W, GEMM_PATH_NATIVE, 1,
     {"fbffff | fwd X:fprop.x^wgrad.x" BWD, "fbffff | fwd X:fprop.x" BWD " | src=fprop wgrad.x"}},
};

static void test_mixed_forward(void) {
    const int L = 12, C = 768;
    for (size_t i = 0; i < sizeof(MIXED) / sizeof(MIXED[0]); i++) {
        const MixedCase* m = &MIXED[i];
        static const char* const MIX_NAMES[] = {"", " --fprop-x bf16", " --fprop-w bf16", " --fp4-fprop off"};
        static const char* const PATH_NAMES[] = {"emulated", "native", "FP8 path"};
        char label[160];
        snprintf(label, sizeof(label), "%s%s%s, %s", m->preset, MIX_NAMES[m->mix], m->qk ? " --qk-fp8" : "",
                 PATH_NAMES[m->path]);
        Recipe r = mixed_recipe(m->preset, m->mix);
        r.qk_fp8 = m->qk;
        recipe_resolve_layers(&r, L);
        recipe_check(&r);
        LinearPlan lp;
        // layer 0 (FP4 under every preset); the QKV linear (split at 2C with --qk-fp8), else attproj (C -> C)
        linear_plan_build(&lp, &r, 0, L, m->qk ? 2 * C : 0, m->qk ? 3 * C : C, m->path);
        CHECK(lp.quantized && lp.nparts == (m->qk ? 2 : 1), "%s: quantized %d, %d parts", label, lp.quantized, lp.nparts);
        for (int pi = 0; pi < lp.nparts && pi < 2; pi++) {
            char got[512];
            part_summary(&lp.part[pi], got, sizeof(got));
            CHECK(m->want[pi] && strcmp(got, m->want[pi]) == 0, "%s, part %d:\n      got  %s\n      want %s", label, pi,
                  got, m->want[pi] ? m->want[pi] : "(none)");
        }
    }
    // a block kept in BF16 (nvfp4 keeps the last 2 of 12): no copy, no pass, nothing from the forward, with either mix
    for (int mix = MIX_NONE; mix <= MIX_W; mix++) {
        Recipe r = mixed_recipe("nvfp4", mix);
        recipe_resolve_layers(&r, L);
        LinearPlan lp;
        linear_plan_build(&lp, &r, L - 1, L, 0, C, GEMM_PATH_EMULATED);
        char got[512];
        part_summary(&lp.part[0], got, sizeof(got));
        CHECK(!lp.quantized && lp.nparts == 1 && !strcmp(got, "bbbbbb | fwd - | bwd -"), "nvfp4 BF16 block, mix %d: %s",
              mix, got);
    }
}

// --- helpers shared by the CPU twins and the GPU kernels, at their boundaries ---------------------------

static QuantParams params_of(const char* spec) {
    QuantSpec s;
    char err[256];
    fail_if(quant_spec_parse(spec, &s, err, sizeof(err)), "%s: %s", spec, err);
    return quant_params(&s);
}

// fp8_fold.h: the exact window of each grid, which specs fold, each row's offset, the blocks counted below the
// window, single elements, and fp8_fold_cpu's outputs and count on rows built by hand.
static void test_fp8_fold_helpers(void) {
    // windows: dmax the largest d with maxval 2^d <= 448, dmin the smallest with level[1] 2^d >= 2^-9
    //   e2m1: 6 * 64 = 384, 6 * 128 = 768 > 448; 0.5 * 2^-8 = 2^-9       -> [-8, 6]
    //   int4: 7 * 64 = 448;                         1 * 2^-9             -> [-9, 6]
    //   e1m2: 3.5 * 128 = 448;                      0.5 * 2^-8 = 2^-9    -> [-8, 7]
    const struct { QuantGrid g; int dmin, dmax; } win[] = {{QGRID_E2M1, -8, 6}, {QGRID_INT4, -9, 6}, {QGRID_E1M2, -8, 7}};
    for (int i = 0; i < 3; i++) {
        const Fp8Window w = fp8_fold_window(grid_traits(win[i].g));
        CHECK(w.dmin == win[i].dmin && w.dmax == win[i].dmax, "%s window [%d, %d], want [%d, %d]",
              quant_grid_table[win[i].g].name, w.dmin, w.dmax, win[i].dmin, win[i].dmax);
    }
    const struct { const char* spec; int foldable; } fold[] = {
        {"mxfp4", 1}, {"mxfp4-ceil", 1}, {"mxfp4-2d", 1}, {"int4,e8m0", 1}, {"e1m2,e8m0ceil", 1},
        {"nvfp4", 0}, {"nvfp4,4o6", 0}, {"int4", 0}, {"mxfp8", 0},   // E4M3 scales; E4M3 elements
    };
    for (size_t i = 0; i < sizeof(fold) / sizeof(fold[0]); i++) {
        QuantParams q = params_of(fold[i].spec);
        CHECK(fp8_foldable(&q) == fold[i].foldable, "fp8_foldable(%s) = %d", fold[i].spec, fp8_foldable(&q));
    }

    // offsets o = e_max - dmax from the row's amax bits (E8M0 exponent: floor(log2 amax) - emax, +1 for the ceil rule
    // when the mantissa is above maxval's), clamped to >= -126; 0 for inf and NaN rows
    const QuantParams mx = params_of("mxfp4"), mxc = params_of("mxfp4-ceil"), i4 = params_of("int4,e8m0"),
                      e12 = params_of("e1m2,e8m0");
    const struct { const QuantParams* p; int dmax; uint32_t amax; int want; const char* what; } off[] = {
        {&mx, 6, 0x40C00000u, -6, "6: e 0"},
        {&mx, 6, 0x43E00000u, 0, "448: e 6"},
        {&mx, 6, 0x7F7FFFFFu, 119, "FLT_MAX: e 125"},
        {&mx, 6, 0x00000000u, -126, "0: e -127, o -133, clamped"},
        {&mx, 6, 0x05000000u, -125, "2^-117: e -119, o -125"},
        {&mx, 6, 0x04800000u, -126, "2^-118: e -120, o -126 (the last unclamped)"},
        {&mx, 6, 0x04000000u, -126, "2^-119: e -121, o -127 clamped"},
        {&mx, 6, 0x7F800000u, 0, "inf"},
        {&mx, 6, 0x7FC00000u, 0, "NaN"},
        {&mxc, 6, 0x40C00000u, -6, "ceil, 6 (mantissa equal to maxval's): e 0"},
        {&mxc, 6, 0x40D00000u, -5, "ceil, 6.5: e 1"},
        {&mx, 6, 0x40D00000u, -6, "floor, 6.5: e 0"},
        {&i4, 6, 0x40E00000u, -6, "int4, 7: e 0"},
        {&e12, 7, 0x40600000u, -7, "e1m2, 3.5: e 0"},
    };
    for (size_t i = 0; i < sizeof(off) / sizeof(off[0]); i++)
        CHECK(fp8_fold_offset(off[i].p, off[i].dmax, off[i].amax) == off[i].want, "fp8_fold_offset(%s) = %d, want %d",
              off[i].what, fp8_fold_offset(off[i].p, off[i].dmax, off[i].amax), off[i].want);

    // counted: a block of exponent e = bits - 127 with e - o < dmin; never zero blocks (bits 0) nor NaN blocks (0xFF)
    const struct { uint8_t bits; int o, dmin, want; } cnt[] = {
        {113, -6, -8, 0},   // e -14: e - o = -8 = dmin, inside
        {112, -6, -8, 1},   // e -15: -9, the first below
        {0, -6, -8, 0},     // a zero block
        {0, 100, -8, 0},    // ... however far below
        {0xFF, -6, -8, 0},  // NaN
        {1, -126, -8, 0},   // e -126 at the clamped offset: 0
        {1, -100, -8, 1},   // e -126, o -100: -26
        {254, 0, -8, 0},    // e 127
        {118, 0, -9, 0},    // int4's dmin: e -9 - 0 = -9, inside
        {117, 0, -9, 1},
    };
    for (size_t i = 0; i < sizeof(cnt) / sizeof(cnt[0]); i++)
        CHECK(fp8_fold_counted(cnt[i].bits, cnt[i].o, cnt[i].dmin) == cnt[i].want, "fp8_fold_counted(%d, %d, %d) = %d",
              cnt[i].bits, cnt[i].o, cnt[i].dmin, fp8_fold_counted(cnt[i].bits, cnt[i].o, cnt[i].dmin));

    // elements: v 2^-o to E4M3 (sign kept, RNE, saturating at 448), NaN -> 0x7F
    const struct { float v; int o; uint8_t want; } el[] = {
        {6.0f, 0, 0x4C},             // 1.5 * 2^2: exponent 2 + 7 = 9, mantissa 100
        {-6.0f, 0, 0xCC},
        {6.0f, -6, 0x7C},            // 384 = 1.5 * 2^8
        {448.0f, 0, 0x7E},
        {500.0f, 0, 0x7E},           // saturates
        {INFINITY, 0, 0x7E},
        {0x1p-9f, 0, 0x01},          // the smallest subnormal
        {0x1p-10f, 0, 0x00},         // half of it: the tie goes to the even 0
        {0x3p-10f, 0, 0x02},         // 1.5 quanta: the tie goes to the even 2
        {0x1p-6f, 0, 0x08},          // the smallest normal: exponent 1
        {-0.0f, 0, 0x80},
        {NAN, 5, 0x7F},
    };
    for (size_t i = 0; i < sizeof(el) / sizeof(el[0]); i++)
        CHECK(fp8_fold_value(el[i].v, el[i].o) == el[i].want, "fp8_fold_value(%g, %d) = 0x%02x, want 0x%02x", el[i].v,
              el[i].o, fp8_fold_value(el[i].v, el[i].o), el[i].want);

    // fp8_fold_cpu on mxfp4 (1x32, e2m1: dmin -8, dmax 6), one block of 32 equal values per scale, by hand:
    //   row 0: e 0, -14, -15, zero      -> e_max 0, o -6; e - o = 6, -8, -9: one block below; 2^-6
    //          values 6, 0.5 * 2^-14, 0.5 * 2^-15, 0 -> 384 (0x7C), 2^-9 (0x01), 2^-10 (0x00, the tie to even), 0
    //   row 1: NaN, e -9, e -8, zero    -> o 0; -9 below, -8 inside: one; 2^0; values NaN (0x7F), 0.5 * 2^-9 -> 2^-10
    //          (0x00), 0.5 * 2^-8 = 2^-9 (0x01), 0
    //   row 2: e -126, zero x 3         -> e_max -126, o -132, clamped to -126: nothing below; 2^-126
    //          values 6 * 2^-126 -> 6 (0x4C), then 0
    const uint8_t scale_bits[3][4] = {{127, 113, 112, 0}, {0xFF, 118, 119, 0}, {1, 0, 0, 0}};
    const float block_value[3][4] = {{6.0f, 0x1p-15f, 0x1p-16f, 0.0f}, {NAN, 0x1p-10f, 0x1p-9f, 0.0f},
                                     {0x6p-126f, 0.0f, 0.0f, 0.0f}};
    const uint8_t want_byte[3][4] = {{0x7C, 0x01, 0x00, 0x00}, {0x7F, 0x00, 0x01, 0x00}, {0x4C, 0x00, 0x00, 0x00}};
    const float want_scale[3] = {0x1p-6f, 1.0f, 0x1p-126f};
    uint16_t* fake = (uint16_t*)xmalloc(3 * 128 * sizeof(uint16_t));
    uint8_t scales[3 * 4], out[3 * 128];
    float row_scale[3];
    for (int m = 0; m < 3; m++)
        for (int b = 0; b < 4; b++) {
            scales[m * 4 + b] = scale_bits[m][b];
            for (int k = 0; k < 32; k++) fake[m * 128 + b * 32 + k] = bf16_bits_rne(block_value[m][b]);
        }
    int64_t below = fp8_fold_cpu(&mx, 1, fake, 3, 128, 128, scales, out, row_scale);
    int bytes_ok = 1;
    for (int m = 0; m < 3; m++)
        for (int k = 0; k < 128; k++) bytes_ok &= out[m * 128 + k] == want_byte[m][k / 32];
    CHECK(below == 2 && bytes_ok && row_scale[0] == want_scale[0] && row_scale[1] == want_scale[1] &&
          row_scale[2] == want_scale[2], "fp8_fold_cpu rows by hand: %lld below (want 2), bytes %s, scales %g %g %g",
          (long long)below, bytes_ok ? "ok" : "wrong", row_scale[0], row_scale[1], row_scale[2]);
    // the same blocks column-wise (axis 0): the view is the transpose, 128 rows x 3 columns; same count and bytes
    uint16_t* fake_t = (uint16_t*)xmalloc(3 * 128 * sizeof(uint16_t));
    for (int m = 0; m < 3; m++)
        for (int k = 0; k < 128; k++) fake_t[k * 3 + m] = fake[m * 128 + k];
    memset(out, 0xA5, sizeof(out));
    below = fp8_fold_cpu(&mx, 0, fake_t, 128, 3, 3, scales, out, row_scale);
    bytes_ok = 1;
    for (int m = 0; m < 3; m++)
        for (int k = 0; k < 128; k++) bytes_ok &= out[m * 128 + k] == want_byte[m][k / 32];
    CHECK(below == 2 && bytes_ok && row_scale[0] == want_scale[0], "fp8_fold_cpu column-wise: %lld below, bytes %s",
          (long long)below, bytes_ok ? "ok" : "wrong");
    // 32x32 tiles: a tile is one block, counted once for its 32 rows (its scale repeats on each): rows 0..31 hold
    // the tiles e 0 and e -15 (o -6: one below), rows 32..63 the tiles e 0 and e -14 (none)
    const QuantParams mx2 = params_of("mxfp4-2d");
    uint16_t* fake2 = (uint16_t*)xmalloc(64 * 64 * sizeof(uint16_t));
    uint8_t scales2[64 * 2], out2[64 * 64];
    float row_scale2[64];
    for (int r = 0; r < 64; r++) {
        scales2[2 * r] = 127;
        scales2[2 * r + 1] = r < 32 ? 112 : 113;
        for (int k = 0; k < 64; k++) fake2[r * 64 + k] = bf16_bits_rne(k < 32 ? 6.0f : r < 32 ? 0x1p-16f : 0x1p-15f);
    }
    below = fp8_fold_cpu(&mx2, 1, fake2, 64, 64, 64, scales2, out2, row_scale2);
    CHECK(below == 1 && row_scale2[0] == 0x1p-6f && row_scale2[63] == 0x1p-6f && out2[40] == 0x00 && out2[63 * 64 + 40] == 0x01,
          "fp8_fold_cpu 32x32 tiles: %lld below (want 1: a tile counts once)", (long long)below);
    free(fake); free(fake_t); free(fake2);
}

// formats.h, hadamard.h, quant_cpu.h, matmul_fp4_layout.h, common.h: the numbers the kernels take as arguments or
// compute the same way.
static void test_shared_helpers(void) {
    // Hadamard sign masks (bit i set: s_i = -1): fixed signs tile 0xD7E8 every 16 positions, only the first n bits
    const struct { const char* spec; uint32_t mask[4]; } signs[] = {
        {"nvfp4,h2", {0x0u, 0, 0, 0}},            // 0xD7E8's bits 0, 1: 0 0
        {"nvfp4,h4", {0x8u, 0, 0, 0}},            // bits 0..3: 1000
        {"nvfp4,h8", {0xE8u, 0, 0, 0}},
        {"nvfp4,h16", {0xD7E8u, 0, 0, 0}},         // Transformer Engine's vector
        {"nvfp4,h32", {0xD7E8D7E8u, 0, 0, 0}},
        {"int4,h64", {0xD7E8D7E8u, 0xD7E8D7E8u, 0, 0}},
        {"int4,h128", {0xD7E8D7E8u, 0xD7E8D7E8u, 0xD7E8D7E8u, 0xD7E8D7E8u}},
        {"nvfp4,h16,plain", {0, 0, 0, 0}},
        {"nvfp4", {0, 0, 0, 0}},
        {"nvfp4,eden", {0, 0, 0, 0}},              // step signs: drawn per call, not by the spec
    };
    for (size_t i = 0; i < sizeof(signs) / sizeof(signs[0]); i++) {
        QuantParams q = params_of(signs[i].spec);
        CHECK(memcmp(q.signs, signs[i].mask, sizeof(q.signs)) == 0, "%s: signs %08x %08x %08x %08x", signs[i].spec,
              q.signs[0], q.signs[1], q.signs[2], q.signs[3]);
    }
    QuantParams s16 = params_of("int4,h16,seed=1"), s16b = params_of("int4,h16,seed=2"), s32 = params_of("int4,h32,seed=1");
    CHECK((s16.signs[0] >> 16) == 0 && !s16.signs[1] && !s16.signs[2] && !s16.signs[3] && s16.signs[0] != s16b.signs[0] &&
          (s32.signs[0] & 0xFFFFu) == s16.signs[0], "seeded signs: 16 bits for h16 (%08x), another seed others (%08x), "
          "the same first 16 for h32 (%08x)", s16.signs[0], s16b.signs[0], s32.signs[0]);
    QuantParams step = params_of("nvfp4,eden");
    CHECK(step.step_signs && !step.signs_set && s16.signs_set && !s16.step_signs, "step signs are set per call");

    // 1/sqrt(n): exact powers of two for even log2(n), else the float nearest 1/sqrt(2) (0x3F3504F3) halved
    const struct { int n; uint32_t bits; } hs[] = {{1, 0x3F800000u}, {2, 0x3F3504F3u}, {4, 0x3F000000u}, {8, 0x3EB504F3u},
                                                   {16, 0x3E800000u}, {32, 0x3E3504F3u}, {64, 0x3E000000u},
                                                   {128, 0x3DB504F3u}};
    for (int i = 0; i < 8; i++)
        CHECK(f32_bits(hadamard_scale(hs[i].n)) == hs[i].bits, "hadamard_scale(%d) bits %08x, want %08x", hs[i].n,
              f32_bits(hadamard_scale(hs[i].n)), hs[i].bits);

    // 2^e, normal down to -126 and subnormal to -149
    const struct { int e; uint32_t bits; } ex[] = {{0, 0x3F800000u}, {-1, 0x3F000000u}, {127, 0x7F000000u},
                                                   {-126, 0x00800000u}, {-127, 0x00400000u}, {-149, 0x00000001u}};
    for (int i = 0; i < 6; i++)
        CHECK(f32_bits(exp2_exact(ex[i].e)) == ex[i].bits, "exp2_exact(%d) bits %08x", ex[i].e, f32_bits(exp2_exact(ex[i].e)));

    // ceil_div: the grid and buffer sizes of every launch
    const int64_t cd[][3] = {{0, 4, 0}, {1, 4, 1}, {3, 4, 1}, {4, 4, 1}, {5, 4, 2}, {127, 128, 1}, {128, 128, 1},
                             {129, 128, 2}, {1, 1, 1}, {(int64_t)1 << 40, 3, 366503875926}};
    for (int i = 0; i < 10; i++)
        CHECK(ceil_div(cd[i][0], cd[i][1]) == cd[i][2], "ceil_div(%lld, %lld) = %lld", (long long)cd[i][0],
              (long long)cd[i][1], (long long)ceil_div(cd[i][0], cd[i][1]));

    // the amax order: magnitude bits, NaN above inf, -0 as 0
    CHECK(amax_bits_update(0, -3.0f) == 0x40400000u && amax_bits_update(0x40400000u, 2.0f) == 0x40400000u &&
          amax_bits_update(0, -0.0f) == 0 && amax_bits_update(0, -INFINITY) == 0x7F800000u &&
          amax_bits_update(0x7F800000u, NAN) == 0x7FC00000u && amax_bits_update(0x7FC00000u, INFINITY) == 0x7FC00000u,
          "amax_bits_update");

    // operand (i, k) in the view: row-wise at i * ld + k, column-wise at k * ld + i; M and K by axis
    int64_t M, K;
    quant_operand_dims(4, 6, 1, &M, &K);
    const int row_ok = M == 4 && K == 6;
    quant_operand_dims(4, 6, 0, &M, &K);
    CHECK(row_ok && M == 6 && K == 4 && quant_view_offset(2, 3, 1, 10) == 23 && quant_view_offset(2, 3, 0, 10) == 32,
          "operand dims and view offsets");

    // the swizzled scale layout's inverse (fp4_swizzle_scales_kernel reads its source with it): byte o of a 128 x 4
    // tile t = o / 512 holds row 128 (t / ceil(C/4)) + 32 ((o%16) / 4) + (o%512) / 16, 16-block 4 (t % ceil(C/4)) + o % 4
    // (tiles row-major: with C = 5, tile 1 is rows 0..127, blocks 4..7, and tile 2 rows 128..255, blocks 0..3)
    const int64_t sw[][4] = {{0, 8, 0, 0}, {1, 8, 0, 1}, {3, 8, 0, 3}, {4, 8, 32, 0}, {16, 8, 1, 0}, {511, 8, 127, 3},
                             {512, 8, 0, 4}, {1024, 8, 128, 0}, {512, 4, 128, 0}, {512, 5, 0, 4}, {1023, 5, 127, 7},
                             {1535, 5, 255, 3}};
    for (size_t i = 0; i < sizeof(sw) / sizeof(sw[0]); i++) {
        int64_t r, c;
        matmul_fp4_swizzle_source(sw[i][0], sw[i][1], &r, &c);
        CHECK(r == sw[i][2] && c == sw[i][3], "swizzle source of byte %lld (C %lld): (%lld, %lld), want (%lld, %lld)",
              (long long)sw[i][0], (long long)sw[i][1], (long long)r, (long long)c, (long long)sw[i][2], (long long)sw[i][3]);
    }
    CHECK(matmul_fp4_scale_bytes(1, 1) == 512 && matmul_fp4_scale_bytes(128, 4) == 512 &&
          matmul_fp4_scale_bytes(129, 4) == 1024 && matmul_fp4_scale_bytes(128, 5) == 1024 &&
          matmul_fp4_scale_bytes(256, 8) == 2048, "matmul_fp4_scale_bytes at the tile edges");
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

    // every preset with one forward operand in BF16, on each path, under the general rules too
    for (int i = 0; i < NUM_RECIPE_PRESETS; i++) {
        if (!strcmp(RECIPE_PRESETS[i].name, "bf16")) continue;
        for (int mix = MIX_X; mix <= MIX_W; mix++) {
            char label[128];
            Recipe m = mixed_recipe(RECIPE_PRESETS[i].name, mix);
            for (int qk = 0; qk < 2; qk++) {
                m.qk_fp8 = qk;
                snprintf(label, sizeof(label), "%s --%s bf16%s", RECIPE_PRESETS[i].name, mix == MIX_X ? "fprop-x" : "fprop-w",
                         qk ? " --qk-fp8" : "");
                check_recipe(&m, L, C, GEMM_PATH_EMULATED, label);
                snprintf(label + strlen(label), sizeof(label) - strlen(label), ", FP8 path");
                check_recipe(&m, L, C, GEMM_PATH_FP8, label);
            }
        }
    }
    test_mixed_forward();
    test_fp8_fold_helpers();
    test_shared_helpers();

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
