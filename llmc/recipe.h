// recipe.h: an FP4 training recipe as data: one quantization spec per GEMM operand slot, plus which
// transformer blocks stay in BF16.
// defines: Slot, SLOT_NAMES, Recipe, recipe_preset(), recipe_set_slot(), recipe_disable_gemm(),
//          recipe_resolve_layers(), recipe_check(), recipe_describe(), recipe_layer_is_fp4(),
//          RECIPE_PRESETS
//
// A linear layer y = x W^T runs three GEMMs, each with two operands (RECIPES.md):
//   fprop: X (reduce over channels) and W            -> slots fprop.x, fprop.w
//   dgrad: dY (reduce over output channels) and W^T  -> slots dgrad.dy, dgrad.w
//   wgrad: dY^T and X^T (reduce over tokens)         -> slots wgrad.dy, wgrad.x
// A slot holds a QuantSpec (llmc/fp4_formats.h): grid, block, scale rule, rounding, Hadamard. A BF16
// slot is not quantized. The training loop only ever asks "quantize this tensor for this slot".
#pragma once
#include "common.h"
#include "fp4_formats.h"

typedef enum { SLOT_FPROP_X, SLOT_FPROP_W, SLOT_DGRAD_DY, SLOT_DGRAD_W, SLOT_WGRAD_DY, SLOT_WGRAD_X, NUM_SLOTS } Slot;
static const char* const SLOT_NAMES[NUM_SLOTS] = {"fprop.x", "fprop.w", "dgrad.dy", "dgrad.w", "wgrad.dy", "wgrad.x"};
static const char* const GEMM_NAMES[3] = {"fprop", "dgrad", "wgrad"};

typedef struct {
    char name[32];
    QuantSpec slot[NUM_SLOTS];
    int bf16_first, bf16_last;   // transformer blocks kept in BF16 at each end; -1: the preset's rule
    int qk_fp8;                  // Q and K projections (QKV's first 2C output channels) in MXFP8, see
                                 // recipe_qk_spec (seed 002's option; any preset with --qk-fp8)
} Recipe;

// The presets, as slot spec strings for quant_spec_parse (see fp4_formats.h for the syntax).
// nvfp4 follows NVIDIA's recipe (arXiv 2509.25149, Transformer Engine): 16x16 weight tiles, 1x16 for X
// and dY, SR on dY (both copies), a 16-point Hadamard with TE's fixed signs on the wgrad operands, and
// about 15% of the blocks in BF16, mostly the last (their 12B run: first 2 and last 8 of 62; here
// round(2L/62) first and round(8L/62) last, so 0 and 2 of 12 for d12).
// mxfp4-2d follows seed 002: 32x32 tiles for W and both gradient roles, 1x32 for X, power-of-two
// scales rounded up (truncation-free), SR on the backward operands that are not weights (W keeps RNE
// so its forward and backward copies stay identical).
// ufp4 follows seed 003: the uniform INT4 grid with NVFP4's two-level scaling, a random Hadamard (16,
// signs drawn from seed 1) on all three GEMMs, SR on dY only.
typedef struct {
    const char* name;
    const char* slot[NUM_SLOTS];
    int bf16_first_per62, bf16_last_per62;   // blocks kept in BF16, per 62 blocks (rounded)
    const char* what;
} RecipePreset;

static const RecipePreset RECIPE_PRESETS[] = {
    {"bf16", {"bf16", "bf16", "bf16", "bf16", "bf16", "bf16"}, 0, 0, "no quantization"},
    {"nvfp4",
     {"nvfp4", "nvfp4-2d", "nvfp4,sr", "nvfp4-2d", "nvfp4,sr,h16,fixed", "nvfp4,h16,fixed"}, 2, 8,
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
};
#define NUM_RECIPE_PRESETS ((int)(sizeof(RECIPE_PRESETS) / sizeof(RECIPE_PRESETS[0])))

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
    fail_if(r->bf16_first + r->bf16_last > L, "--bf16-first-layers %d + --bf16-last-layers %d exceed the %d blocks",
            r->bf16_first, r->bf16_last, L);
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
        const QuantSpec* a = &r->slot[2 * g];
        const QuantSpec* b = &r->slot[2 * g + 1];
        int ha = quant_spec_is_bf16(a) ? 0 : a->hadamard, hb = quant_spec_is_bf16(b) ? 0 : b->hadamard;
        // (X H)(H^T W) = X W only when both operands are rotated by the same H along the reduction
        fail_if(ha != hb || (ha && (a->signs != b->signs || a->sign_seed != b->sign_seed)),
                "recipe: the two operands of %s must use the same Hadamard transform (%s: h%d, %s: h%d)",
                GEMM_NAMES[g], SLOT_NAMES[2 * g], ha, SLOT_NAMES[2 * g + 1], hb);
        fail_if(ha > 32, "recipe: Hadamard size %d on %s: the GPU kernels go up to 32", ha, GEMM_NAMES[g]);
    }
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
        snprintf(buf + o, n - o, "; q/k projections: %s", spec);
    }
}
