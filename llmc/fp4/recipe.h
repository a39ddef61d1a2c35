// recipe.h: an FP4 training recipe as data: one quantization spec per GEMM operand slot, plus which
// transformer blocks stay in BF16.
// defines: Slot, SLOT_NAMES, Recipe, recipe_preset(), recipe_set_slot(), recipe_disable_gemm(),
//          recipe_resolve_layers(), recipe_check(), recipe_quantizes(), recipe_check_shapes(), recipe_check_linears(),
//          recipe_describe(), recipe_layer_is_fp4(), RECIPE_PRESETS, RECIPE_STACKS, recipe_find_stack()
//
// A linear layer y = x W^T runs three GEMMs, each with two operands (docs/RECIPES.md):
//   fprop: X (reduce over channels) and W            -> slots fprop.x, fprop.w
//   dgrad: dY (reduce over output channels) and W^T  -> slots dgrad.dy, dgrad.w
//   wgrad: dY^T and X^T (reduce over tokens)         -> slots wgrad.dy, wgrad.x
// A slot holds a QuantSpec (llmc/fp4/formats.h): grid, block, scale rule, rounding, Hadamard. A BF16
// slot is not quantized. The training loop only ever asks "quantize this tensor for this slot".
#pragma once
#include "llmc/base/common.h"
#include "llmc/fp4/formats.h"

typedef enum { SLOT_FPROP_X, SLOT_FPROP_W, SLOT_DGRAD_DY, SLOT_DGRAD_W, SLOT_WGRAD_DY, SLOT_WGRAD_X, NUM_SLOTS } Slot;
static const char* const SLOT_NAMES[NUM_SLOTS] = {"fprop.x", "fprop.w", "dgrad.dy", "dgrad.w", "wgrad.dy", "wgrad.x"};
typedef enum { GEMM_FPROP, GEMM_DGRAD, GEMM_WGRAD, NUM_GEMMS } Gemm;
static const char* const GEMM_NAMES[NUM_GEMMS] = {"fprop", "dgrad", "wgrad"};

// The slot rules, named: GEMM g reads slots 2g (its A operand) and 2g + 1 (its B); dgrad's and wgrad's slots are
// the backward's; a src=fprop slot (dgrad.w, wgrad.x) quantizes the forward copy of fprop.w or fprop.x again.
static inline Slot gemm_slot_a(Gemm g) { return (Slot)(2 * g); }
static inline Slot gemm_slot_b(Gemm g) { return (Slot)(2 * g + 1); }
static inline int slot_is_backward(Slot s) { return s >= SLOT_DGRAD_DY; }
static inline Slot fprop_slot_of(Slot s) { return s == SLOT_DGRAD_W ? SLOT_FPROP_W : SLOT_FPROP_X; }

typedef struct {
    char name[32];
    QuantSpec slot[NUM_SLOTS];
    int bf16_first, bf16_last;   // transformer blocks kept in BF16 at each end; -1: the preset's rule
    int qk_fp8;                  // Q and K projections (QKV's first 2C output channels) in MXFP8, see
                                 // recipe_qk_spec (seed 002's option; any preset with --qk-fp8)
    int amax_delayed;            // --amax delayed: the X and dY copies of training micro-steps take their FP32
                                 // tensor scale from the previous micro-step's amax of the same copy (Quartet II's
                                 // rule), so that no amax pass reads the tensor first; a numerics change, off by
                                 // default (README, "The delayed amax")
} Recipe;

// The presets, as slot spec strings for quant_spec_parse (see fp4/formats.h for the syntax).
// nvfp4 follows NVIDIA's recipe (arXiv 2509.25149, Transformer Engine): 16x16 weight tiles, 1x16 for X
// and dY, SR on dY (both copies), a 16-point Hadamard with TE's fixed signs on the wgrad operands, and
// about 15% of the blocks in BF16, mostly the last (their 12B run: first 2 and last 8 of 62; here
// round(2L/62) first and round(8L/62) last, so 0 and 2 of 12 for d12).
// mxfp4-2d follows seed 002: 32x32 tiles for W and both gradient roles, 1x32 for X, power-of-two
// scales rounded up (truncation-free), SR on the backward operands that are not weights (W keeps RNE
// so its forward and backward copies stay identical).
// ufp4 follows seed 003: the uniform INT4 grid with NVFP4's two-level scaling, a random Hadamard (16,
// signs drawn from seed 1) on all three GEMMs, SR on dY only.
// nvfp4-4o6 is nvfp4 with the 4o6 scale rule on all six operands, as the Four Over Six authors train
// (their recipe: every linear operand 4o6, weights and activations RTN, gradients SR, 2D weight blocks,
// some last blocks BF16; docs/NUMERICS_NEXT.md 1.5).
// quartet2 follows Quartet II's scheme (docs/NUMERICS_NEXT.md 2.4-2.5): forward NVFP4 1x16 round-to-nearest
// (no 2D weights, no Hadamard), the four backward operands MS-EDEN (eden: RTN after a 128-point Hadamard
// whose signs are re-drawn every step, the correction folded into the block scales by SR), dY from BF16
// and W, X from the forward's dequantized FP4 copies (src=fprop); every block FP4. quartet2-4o6 adds Four
// Over Six to the forward (Quartet II's four_over_six option).
// fullstack is nvfp4's linears under its own name (so the recipe text, the log and a checkpoint say it), with the
// options of RECIPE_STACKS on top.
#define NVFP4_SLOTS "nvfp4", "nvfp4-2d", "nvfp4,sr", "nvfp4-2d", "nvfp4,sr,h16,fixed", "nvfp4,h16,fixed"
typedef struct {
    const char* name;
    const char* slot[NUM_SLOTS];
    int bf16_first_per62, bf16_last_per62;   // blocks kept in BF16, per 62 blocks (rounded)
    const char* what;
} RecipePreset;

static const RecipePreset RECIPE_PRESETS[] = {
    {"bf16", {"bf16", "bf16", "bf16", "bf16", "bf16", "bf16"}, 0, 0, "no quantization"},
    {"nvfp4", {NVFP4_SLOTS}, 2, 8,
     "NVIDIA NVFP4: 16x16 W, 1x16 X/dY, SR on dY, H16 (fixed signs) on wgrad, ~15% of blocks BF16"},
    {"nvfp4-naive", {"nvfp4", "nvfp4", "nvfp4", "nvfp4", "nvfp4", "nvfp4"}, 0, 0,
     "NVFP4 1x16 round-to-nearest everywhere, no Hadamard, every block FP4"},
    {"mxfp4", {"mxfp4", "mxfp4", "mxfp4", "mxfp4", "mxfp4", "mxfp4"}, 0, 0,
     "OCP MXFP4: 1x32 blocks, E8M0 floor scales, round-to-nearest"},
    {"mxfp4-2d",
     {"mxfp4-ceil", "mxfp4-2d", "mxfp4-2d,sr", "mxfp4-2d", "mxfp4-2d,sr", "mxfp4-ceil,sr"}, 0, 0,
     "seed 002: 32x32 W and dY, 1x32 X, truncation-free E8M0, SR on dY and wgrad X"},
    {"ufp4",
     {"int4,h16,seed=1", "int4,h16,seed=1", "int4,sr,h16,seed=1", "int4,h16,seed=1", "int4,sr,h16,seed=1",
      "int4,h16,seed=1"}, 0, 0,
     "seed 003: uniform INT4 grid, 1x16 E4M3 + FP32 scales, random H16 on all GEMMs, SR on dY"},
    {"nvfp4-4o6",
     {"nvfp4,4o6", "nvfp4-2d,4o6", "nvfp4,4o6,sr", "nvfp4-2d,4o6", "nvfp4,4o6,sr,h16,fixed", "nvfp4,4o6,h16,fixed"},
     2, 8, "nvfp4 with Four Over Six (arXiv 2512.02010) on every operand: each block's max to 6 or 4, lower MSE"},
    {"quartet2",
     {"nvfp4", "nvfp4", "nvfp4,eden", "nvfp4,eden,src=fprop", "nvfp4,eden", "nvfp4,eden,src=fprop"}, 0, 0,
     "Quartet II (arXiv 2601.22813): RTN 1x16 forward, MS-EDEN backward (H128, per-step signs), W and X for the "
     "backward from the forward's FP4 copies"},
    {"quartet2-4o6",
     {"nvfp4,4o6", "nvfp4,4o6", "nvfp4,eden", "nvfp4,eden,src=fprop", "nvfp4,eden", "nvfp4,eden,src=fprop"}, 0, 0,
     "quartet2 with Four Over Six in the forward"},
    {"fullstack", {NVFP4_SLOTS}, 2, 8,
     "nvfp4's linears, plus FP4 attention, NVFP4 optimizer state and LoRA-SVD (RECIPE_STACKS below)"},
};
#define NUM_RECIPE_PRESETS ((int)(sizeof(RECIPE_PRESETS) / sizeof(RECIPE_PRESETS[0])))

// The presets that turn on more than the linears' GEMMs (docs/FULLSTACK_FP4.md section 5): the trainer options they
// set. The trainer takes each value only where the command line leaves that option out, so an explicit value (off,
// fp32 and 0 included) wins; the optimizer stays AdamW. What they turn on is recorded where the option's own value
// is: the recipe text's "; attention: ...", the log's config line and the checkpoint header (optimizer state, rank).
typedef struct {
    const char* name;              // a RECIPE_PRESETS name (its linears)
    const char* attention_fp4;     // --attention-fp4 (dS: its default, the same spec with SR)
    const char* optimizer_state;   // --optimizer-state
    int lora_svd_rank;             // --lora-svd-rank
} RecipeStack;

static const RecipeStack RECIPE_STACKS[] = {
    {"fullstack", "nvfp4-2d", "nvfp4", 16},
};
#define NUM_RECIPE_STACKS ((int)(sizeof(RECIPE_STACKS) / sizeof(RECIPE_STACKS[0])))

// The stack of preset `name`, or NULL for a preset of the linears only.
static inline const RecipeStack* recipe_find_stack(const char* name) {
    for (int i = 0; i < NUM_RECIPE_STACKS; i++)
        if (strcmp(RECIPE_STACKS[i].name, name) == 0) return &RECIPE_STACKS[i];
    return NULL;
}

static inline QuantSpec recipe_parse_spec(const char* text, const char* what) {
    QuantSpec s;
    char err[512];
    fail_if(quant_spec_parse(text, &s, err, sizeof(err)) != 0, "%s '%s': %s", what, text, err);
    return s;
}

static inline int quant_spec_is_bf16(const QuantSpec* s) { return s->grid == QGRID_BF16; }

// With qk_fp8, the Q/K part of the QKV linear quantizes each operand the recipe quantizes with this
// spec (E4M3 elements, 1x32 blocks, E8M0 scales: OCP MXFP8) and leaves BF16 slots in BF16, so FP8
// replaces FP4 exactly where the recipe uses FP4 (a GEMM switched off stays BF16).
#define RECIPE_QK_SPEC "mxfp8"
static inline QuantSpec recipe_qk_spec(const Recipe* r, Slot s) {
    return recipe_parse_spec(quant_spec_is_bf16(&r->slot[s]) ? "bf16" : RECIPE_QK_SPEC, "q/k spec");
}

static inline void recipe_preset(Recipe* r, const char* name) {
    memset(r, 0, sizeof(*r));
    for (int i = 0; i < NUM_RECIPE_PRESETS; i++) {
        if (strcmp(RECIPE_PRESETS[i].name, name) != 0) continue;
        snprintf(r->name, sizeof(r->name), "%s", name);
        for (int s = 0; s < NUM_SLOTS; s++) r->slot[s] = recipe_parse_spec(RECIPE_PRESETS[i].slot[s], "recipe slot");
        r->bf16_first = r->bf16_last = -1;
        return;
    }
    char names[256] = "";
    for (int i = 0; i < NUM_RECIPE_PRESETS; i++) {
        strcat(names, i ? ", " : "");
        strcat(names, RECIPE_PRESETS[i].name);
    }
    fail("unknown --recipe '%s': use one of %s", name, names);
}

// Overrides one slot from a spec string ("bf16", "nvfp4,sr", "mxfp4-2d,h32", ...).
static inline void recipe_set_slot(Recipe* r, Slot s, const char* text) {
    char what[64];
    snprintf(what, sizeof(what), "--%s", SLOT_NAMES[s]);
    for (char* p = what; *p; p++) if (*p == '.') *p = '-';
    r->slot[s] = recipe_parse_spec(text, what);
}

// gemm: 0 fprop, 1 dgrad, 2 wgrad. Both of its operands stay BF16.
static inline void recipe_disable_gemm(Recipe* r, int gemm) {
    QuantSpec bf16 = recipe_parse_spec("bf16", "bf16");
    r->slot[2 * gemm] = bf16;
    r->slot[2 * gemm + 1] = bf16;
}

static inline const RecipePreset* recipe_find_preset(const char* name) {
    for (int i = 0; i < NUM_RECIPE_PRESETS; i++)
        if (strcmp(RECIPE_PRESETS[i].name, name) == 0) return &RECIPE_PRESETS[i];
    return NULL;
}

// Turns the preset's per-62 rule into block counts for a model of L blocks (unless set explicitly).
static inline void recipe_resolve_layers(Recipe* r, int L) {
    const RecipePreset* p = recipe_find_preset(r->name);
    if (r->bf16_first < 0) r->bf16_first = p ? (int)floor(p->bf16_first_per62 * L / 62.0 + 0.5) : 0;
    if (r->bf16_last < 0) r->bf16_last = p ? (int)floor(p->bf16_last_per62 * L / 62.0 + 0.5) : 0;
    fail_if(r->bf16_first > L || r->bf16_last > L || r->bf16_first + r->bf16_last > L,   // (no int overflow)
            "--bf16-first-layers %d + --bf16-last-layers %d exceed the %d blocks", r->bf16_first, r->bf16_last, L);
}

static inline int recipe_is_bf16(const Recipe* r) {
    for (int s = 0; s < NUM_SLOTS; s++) if (!quant_spec_is_bf16(&r->slot[s])) return 0;
    return 1;
}

// The rules a recipe must follow to compute the right product.
static inline void recipe_check(const Recipe* r) {
    fail_if(r->qk_fp8 && recipe_is_bf16(r), "--qk-fp8: the recipe quantizes nothing, so there is no FP4 for FP8 to "
            "replace in Q/K (pick an FP4 recipe)");
    for (int g = 0; g < 3; g++) {
        const QuantSpec* a = &r->slot[gemm_slot_a((Gemm)g)];
        const QuantSpec* b = &r->slot[gemm_slot_b((Gemm)g)];
        int ha = quant_spec_is_bf16(a) ? 0 : a->hadamard, hb = quant_spec_is_bf16(b) ? 0 : b->hadamard;
        // (X H)(H^T W) = X W only when both operands are rotated by the same H along the reduction
        fail_if(ha != hb || (ha && (a->signs != b->signs || a->sign_seed != b->sign_seed)),
                "recipe: the two operands of %s must use the same Hadamard transform (%s: h%d, %s: h%d)",
                GEMM_NAMES[g], SLOT_NAMES[gemm_slot_a((Gemm)g)], ha, SLOT_NAMES[gemm_slot_b((Gemm)g)], hb);
        const int eden = !quant_spec_is_bf16(a) && a->rounding == QROUND_EDEN;   // (then b is eden too: h128, step)
        fail_if(ha > 32 && !eden, "recipe: Hadamard size %d on %s: the GPU kernels go up to 32 (128: MS-EDEN's, "
                "rounding eden)", ha, GEMM_NAMES[g]);
    }
    // src=fprop: MS-EDEN's operand source (docs/NUMERICS_NEXT.md 2.4), for the two backward slots that read the
    // forward's sources, whose forward copy must hold W or X themselves (a rotated copy is W H or X H)
    for (int s = 0; s < NUM_SLOTS; s++) {
        const QuantSpec* q = &r->slot[s];
        if (quant_spec_is_bf16(q) || q->source != QSRC_FPROP) continue;
        fail_if(s != SLOT_DGRAD_W && s != SLOT_WGRAD_X, "recipe: slot %s: src=fprop (the forward's dequantized copy) "
                "applies to dgrad.w and wgrad.x only", SLOT_NAMES[s]);
        fail_if(q->rounding != QROUND_EDEN, "recipe: slot %s: src=fprop is MS-EDEN's operand source (Quartet II); "
                "use it with eden (e.g. 'nvfp4,eden,src=fprop') or drop it", SLOT_NAMES[s]);
        const QuantSpec* f = &r->slot[fprop_slot_of((Slot)s)];
        fail_if(!quant_spec_is_bf16(f) && f->hadamard, "recipe: slot %s: src=fprop needs a forward copy of %s without a "
                "Hadamard (the forward's copy holds the rotated values); give %s a spec without hN", SLOT_NAMES[s],
                s == SLOT_DGRAD_W ? "W" : "X", s == SLOT_DGRAD_W ? "--fprop-w" : "--fprop-x");
    }
}

// Whether an L-block model quantizes anything under this (resolved) recipe.
static inline int recipe_quantizes(const Recipe* r, int L) {
    return !recipe_is_bf16(r) && r->bf16_first + r->bf16_last < L;
}

// Shapes. A linear layer with K inputs and OC outputs over N tokens quantizes each operand along its
// GEMM's reduction dimension: fprop.x (N x K) and fprop.w (OC x K) along K, dgrad.dy (N x OC) and
// dgrad.w along OC, wgrad.dy and wgrad.x along the N tokens. That length must be a multiple of the block
// length (16 or 32) and of the Hadamard size; a 2D block (16x16, 32x32) also spans its width along the
// other dimension: N for fprop.x and dgrad.dy, OC for fprop.w and wgrad.dy, K for dgrad.w and wgrad.x.
// The quantization kernels would find a mismatch only deep inside a step, after every allocation;
// recipe_check_shapes finds it before anything starts.

// The multiple the token count N must be of, over every quantized slot (all constraints are powers of
// two, so their least common multiple is their maximum). backward = 0: the forward's slots only.
static inline int64_t recipe_tokens_multiple(const Recipe* r, int backward) {
    int64_t m = 1;
    for (int part = 0; part < 1 + (r->qk_fp8 != 0); part++) {
        for (int s = 0; s < (backward ? NUM_SLOTS : 2); s++) {
            QuantSpec q = part ? recipe_qk_spec(r, (Slot)s) : r->slot[s];
            if (quant_spec_is_bf16(&q)) continue;
            int64_t need = 1;
            if (s == SLOT_WGRAD_DY || s == SLOT_WGRAD_X) need = q.block_l > q.hadamard ? q.block_l : q.hadamard;
            if (s == SLOT_FPROP_X || s == SLOT_DGRAD_DY) need = q.block_w;
            if (need > m) m = need;
        }
    }
    return m;
}

// One linear layer as the shape checks see it: K inputs, OC outputs, and where --qk-fp8 splits its outputs (0: never).
typedef struct {
    const char* name;
    int64_t K, OC, qk_split;
} RecipeLinear;

// One slot's operand of one linear layer (or of one part of a split one, lin: its name, K and OC; qk: the q/k
// part, quantized with q = recipe_qk_spec): 0, or 1 (the token count N does not fit) or 2 (a channel count does not)
// with err saying which slot, which dimension and what would fit.
static inline int recipe_check_operand_(const Recipe* r, const QuantSpec* q, int qk, Slot s, const RecipeLinear* lin,
                                        int64_t N, int backward, char* err, size_t n) {
    if (quant_spec_is_bf16(q)) return 0;
    const int64_t K = lin->K, OC = lin->OC;
    const char* linear = lin->name;
    static const int red_is_n[NUM_SLOTS] = {0, 0, 0, 0, 1, 1}, other_is_n[NUM_SLOTS] = {1, 0, 1, 0, 0, 0};
    const int64_t red[NUM_SLOTS] = {K, K, OC, OC, N, N}, other[NUM_SLOTS] = {N, OC, N, K, OC, K};
    static const char* const operand[NUM_SLOTS] = {"X", "W", "dY", "W", "dY", "X"};
    int64_t R = red[s], O = other[s];
    enum { BLOCK, HADAMARD, TILE } why;
    if (R % q->block_l) why = BLOCK;
    else if (q->hadamard && R % q->hadamard) why = HADAMARD;
    else if (q->block_w > 1 && O % q->block_w) why = TILE;
    else return 0;
    const int bad_n = why == TILE ? other_is_n[s] : red_is_n[s];
    const int unit = why == BLOCK ? q->block_l : why == HADAMARD ? q->hadamard : q->block_w;
    if (why == TILE) R = O;
    char dim[64], rule[128], spec[96], fix[48];
    if (bad_n) snprintf(dim, sizeof(dim), "N = %lld tokens", (long long)R);
    else snprintf(dim, sizeof(dim), "%lld channels", (long long)R);
    if (why == BLOCK) snprintf(rule, sizeof(rule), "along its %s in blocks of %d", dim, unit);
    else if (why == HADAMARD) snprintf(rule, sizeof(rule), "along its %s with a %d-point Hadamard", dim, unit);
    else snprintf(rule, sizeof(rule), "in 2D tiles spanning %d of its %s", unit, dim);
    // how to lift the constraint without changing shapes: this slot (or the q/k projections) in BF16
    quant_spec_format(q, spec, sizeof(spec));
    if (qk) snprintf(fix, sizeof(fix), "--qk-fp8 off");
    else snprintf(fix, sizeof(fix), "--%s bf16", SLOT_NAMES[s]);
    for (char* p = fix; *p; p++) if (*p == '.') *p = '-';
    if (bad_n)
        snprintf(err, n, "slot %s (%s%s) quantizes the %s layer's %s %s: N must be a multiple of %lld for this recipe "
                 "(or keep the slot in BF16: %s)", SLOT_NAMES[s], spec, qk ? ", q/k projections" : "", linear,
                 operand[s], rule, (long long)recipe_tokens_multiple(r, backward), fix);
    else
        snprintf(err, n, "slot %s (%s%s) quantizes the %s layer's %s %s, and %lld is not a multiple of %d (keep the "
                 "slot in BF16: %s)", SLOT_NAMES[s], spec, qk ? ", q/k projections" : "", linear, operand[s], rule,
                 (long long)R, unit, fix);
    return bad_n ? 1 : 2;
}

// Whether every quantized slot can quantize the operands of these linear layers for N tokens (backward = 0: the
// forward only, as evaluation and text samples run). Returns 0, or 1 when N is the problem and 2 when a channel count
// is, with err saying which slot and what would fit. Call it for a recipe that quantizes something (recipe_quantizes).
static inline int recipe_check_linears(const Recipe* r, int64_t N, const RecipeLinear* lin, int nlin, int backward,
                                       char* err, size_t n) {
    for (int l = 0; l < nlin; l++) {
        for (int s = 0; s < (backward ? NUM_SLOTS : 2); s++) {
            const int64_t K = lin[l].K, OC = lin[l].OC, qk = lin[l].qk_split;
            char what[96];
            int rc;
            if (qk > 0 && r->qk_fp8) {
                // the layer splits into the Q/K part (recipe_qk_spec) and the V part (the recipe's own)
                QuantSpec q = recipe_qk_spec(r, (Slot)s);
                snprintf(what, sizeof(what), "%s (q/k part)", lin[l].name);
                const RecipeLinear qk_part = {what, K, qk, 0};
                rc = recipe_check_operand_(r, &q, 1, (Slot)s, &qk_part, N, backward, err, n);
                snprintf(what, sizeof(what), "%s (v part)", lin[l].name);
                const RecipeLinear v_part = {what, K, OC - qk, 0};
                if (!rc) rc = recipe_check_operand_(r, &r->slot[s], 0, (Slot)s, &v_part, N, backward, err, n);
            } else {
                rc = recipe_check_operand_(r, &r->slot[s], 0, (Slot)s, &lin[l], N, backward, err, n);
            }
            if (rc) return rc;
        }
    }
    return 0;
}

// The same for a GPT-2 model of C channels (qkv C -> 3C, attproj C -> C, fc C -> 4C, fcproj 4C -> C).
static inline int recipe_check_shapes(const Recipe* r, int64_t N, int C, int backward, char* err, size_t n) {
    const RecipeLinear lin[4] = {{"qkv", C, 3 * (int64_t)C, 2 * (int64_t)C}, {"attproj", C, C, 0},
                                 {"fc", C, 4 * (int64_t)C, 0}, {"fcproj", 4 * (int64_t)C, C, 0}};
    return recipe_check_linears(r, N, lin, 4, backward, err, n);
}

static inline int recipe_layer_is_fp4(const Recipe* r, int l, int L) {
    return l >= r->bf16_first && l < L - r->bf16_last;
}

// The canonical text of a resolved recipe: printed at start, stored in the log and the checkpoint,
// and compared on resume.
static inline void recipe_describe(const Recipe* r, char* buf, size_t n) {
    size_t o = (size_t)snprintf(buf, n, "%s: ", r->name);
    for (int s = 0; s < NUM_SLOTS && o < n; s++) {
        char spec[96];
        quant_spec_format(&r->slot[s], spec, sizeof(spec));
        o += (size_t)snprintf(buf + o, n - o, "%s=%s; ", SLOT_NAMES[s], spec);
    }
    if (o < n) o += (size_t)snprintf(buf + o, n - o, "bf16 blocks: first %d, last %d", r->bf16_first, r->bf16_last);
    if (r->qk_fp8 && o < n) {
        char spec[96];
        QuantSpec q = recipe_parse_spec(RECIPE_QK_SPEC, "q/k spec");
        quant_spec_format(&q, spec, sizeof(spec));
        o += (size_t)snprintf(buf + o, n - o, "; q/k projections: %s", spec);
    }
    if (r->amax_delayed && o < n) snprintf(buf + o, n - o, "; tensor amax: delayed");
}
