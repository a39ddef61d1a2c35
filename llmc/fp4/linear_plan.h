// linear_plan.h: what each GEMM of a linear layer reads, decided once from the recipe.
// defines: Gemm, OperandSource, SOURCE_NAMES, OperandForm, FORM_NAMES, SLOT_SOURCE, SLOT_AXIS, OperandPlan,
//          QuantPass, LinearPart, LinearPlan, OperandScalars, LinearScalars, linear_plan_build(),
//          linear_plan_describe(), NO_SLOT
//
// A linear layer Y = X W^T + b runs three GEMMs on three BF16 tensors (docs/RECIPES.md):
//   fprop  Y  = X W^T     reads fprop.x (X, blocks along its K)      and fprop.w (W, along K)
//   dgrad  dX = dY W      reads dgrad.dy (dY, along OC)              and dgrad.w (W, along OC)
//   wgrad  dW = dY^T X    reads wgrad.dy (dY, along the tokens)      and wgrad.x (X, along the tokens)
// so every slot is a fixed view of one source, quantized along its GEMM's reduction dimension: row-wise
// (axis 1, blocks along the source's rows) or column-wise (axis 0). SLOT_SOURCE and SLOT_AXIS say which.
//
// A LinearPlan holds, for one (layer, linear), everything the trainer needs to run it:
//   - its parts: one, or two for a QKV linear whose Q/K outputs use their own spec (--qk-fp8): output
//     channels [0, qk_split) and [qk_split, OC) (GPT-2: [0, 2C) and [2C, 3C)), each part a linear of its own with
//     its own quantized operands;
//   - per part and slot: the spec and the form the GEMM reads the operand in (the source as it is, a
//     BF16 fake-quantized copy for exact emulation, packed NVFP4 for Blackwell's native GEMM, or E8M0-scaled
//     values folded into E4M3 for FP8 tensor cores);
//   - the quantization passes of the forward and of the backward: which copies one read of a source
//     makes (dY's two copies share a pass), and which tensor amax a forward pass takes ahead for the
//     backward (X's for wgrad.x, W's for dgrad.w), so that the backward reads that source once less.
// The executor (llmc/fp4/linear.cuh) only executes plans: it never asks which recipe it runs. A new operand form
// is one more OperandForm, chosen here, and one more case in the executor's gemm_run. Plans are plain data built on the CPU (dev/test/test_plan.c).
#pragma once
#include "llmc/fp4/recipe.h"
#include "llmc/fp4/fp8_fold.h"

typedef enum { SRC_X, SRC_W, SRC_DY, NUM_SOURCES } OperandSource;
static const char* const SOURCE_NAMES[NUM_SOURCES] = {"X", "W", "dY"};

typedef enum {
    FORM_BF16,     // the BF16 source as it is (tensor scale 1)
    FORM_FAKE,     // a BF16 copy holding code * block scale (exact in BF16): exact emulation on BF16 tensor
                   // cores, the tensor scale in the GEMM's alpha
    FORM_PACKED,   // E2M1 codes and swizzled E4M3 block scales for cuBLASLt's native NVFP4 GEMM (Blackwell)
    FORM_FP8,      // E4M3 bytes c * 2^(e_b - o) with a power-of-two offset o per GEMM row, the reduction axis
                   // contiguous (fp8_fold.h): an E8M0-scaled operand on FP8 tensor cores, exact within the window
    NUM_FORMS
} OperandForm;
static const char* const FORM_NAMES[NUM_FORMS] = {"bf16", "fake", "packed", "fp8"};

// Which GEMMs leave exact BF16 emulation: none; all (native NVFP4, every quantized GEMM qualifies, the
// caller checked); or those whose two operands both fold into E4M3 (the rest stay emulated).
typedef enum { GEMM_PATH_EMULATED, GEMM_PATH_NATIVE, GEMM_PATH_FP8 } GemmPath;

// Slot -> the tensor it views and the axis its blocks run along. GEMM g reads slots 2g (its A) and 2g + 1.
static const OperandSource SLOT_SOURCE[NUM_SLOTS] = {SRC_X, SRC_W, SRC_DY, SRC_W, SRC_DY, SRC_X};
static const int SLOT_AXIS[NUM_SLOTS] = {1, 1, 1, 0, 0, 0};

#define NO_SLOT (-1)   // an int, not a Slot: -1 is no value of the enum

typedef struct {
    Slot slot;
    OperandSource src;
    int axis;             // 1: row-wise (blocks along the source's rows), 0: column-wise
    OperandForm form;
    QuantSpec spec;       // form != FORM_BF16
    QuantParams q;        // resolved from spec (what the kernels take)
    int from_fprop;       // dgrad.w / wgrad.x with src=fprop (MS-EDEN, docs/NUMERICS_NEXT.md 2.4): quantized from
                          // the forward's dequantized copy of the source, which the backward makes again (the
                          // same spec, key and amax give the same copy); 0 when the forward reads BF16
} OperandPlan;

// One read of one source: the copies it writes, and (forward only) a backward slot of the same source
// whose tensor amax the read also takes.
typedef struct {
    OperandSource src;
    Slot target[2];
    int ntargets;
    int ahead;            // NO_SLOT, or the slot whose amax the backward then need not take again
} QuantPass;

typedef struct {
    int o0, n;                    // the output channels [o0, o0 + n) this part computes
    int qk;                       // the Q/K part of a split QKV (its specs are not the recipe's own)
    OperandPlan op[NUM_SLOTS];
    QuantPass pass[2][NUM_SOURCES];   // [0] forward, [1] backward
    int npasses[2];
    int compare_w;                // diagnostics can compare the forward's and the backward's W copies
} LinearPart;

typedef struct {
    int quantized;        // some operand is quantized (0: plain BF16 GEMMs)
    int nparts;
    LinearPart part[2];
} LinearPlan;

// The device scalars of one part: each slot's tensor amax and scale_dec, each GEMM's alpha. One array
// of these for the whole model is zeroed at the start of every forward, so no amax pass needs a memset.
typedef struct {
    float amax, scale_dec;
    unsigned fold_below;   // FORM_FP8: blocks below the exact window (fp8_fold.h), since the forward began
} OperandScalars;

typedef struct {
    OperandScalars op[NUM_SLOTS];
    OperandScalars diag_fprop_w;   // diagnostics: the forward's W copy, made again in the backward
    float alpha[NUM_GEMMS];        // product of the GEMM's two scale_dec (when both are quantized)
    float pad;
} LinearScalars;

// The passes of one phase: sources in the order dY, X, W; each source's quantized slots of the phase
// (at most two, of different axes) in one pass.
static inline void linear_part_passes(LinearPart* p, int backward) {
    p->npasses[backward] = 0;
    const OperandSource order[NUM_SOURCES] = {SRC_DY, SRC_X, SRC_W};
    for (int i = 0; i < NUM_SOURCES; i++) {
        QuantPass q;
        q.src = order[i];
        q.ntargets = 0;
        q.ahead = NO_SLOT;
        for (int s = 0; s < NUM_SLOTS; s++) {
            if (slot_is_backward((Slot)s) != backward || SLOT_SOURCE[s] != q.src || p->op[s].form == FORM_BF16) continue;
            fail_if(q.ntargets == 2, "internal: three copies of %s in one phase", SOURCE_NAMES[q.src]);
            q.target[q.ntargets++] = (Slot)s;
        }
        if (q.ntargets) p->pass[backward][p->npasses[backward]++] = q;
    }
}

// A forward pass over X or W takes ahead the amax of the backward's copy of the same source, when the
// backward makes that copy alone and both copies are fake-quant, or both FP8 (then the amax pass also takes
// the backward copy's per-row maxima, kept until the backward): the fast kernels take such a pair.
static inline void linear_part_ahead(LinearPart* p) {
    for (int i = 0; i < p->npasses[0]; i++) {
        QuantPass* f = &p->pass[0][i];
        for (int j = 0; j < p->npasses[1]; j++) {
            const QuantPass* b = &p->pass[1][j];
            if (b->src != f->src || b->ntargets != 1 || f->ntargets != 1) continue;
            const OperandForm ff = p->op[f->target[0]].form, bf = p->op[b->target[0]].form;
            const OperandPlan* bo = &p->op[b->target[0]];
            if (bo->from_fprop || bo->q.step_signs) continue;   // another source, or MS-EDEN's own amax pass
            if (ff == bf && (ff == FORM_FAKE || ff == FORM_FP8)) f->ahead = b->target[0];
        }
    }
}

// qk_split: the linear's Q/K outputs end at this output channel (--qk-fp8 splits it there; 0: a linear that is
// never split). A split QKV never runs native (its Q/K part is MXFP8); on the FP8 path each part folds where it can.
static inline void linear_plan_build(LinearPlan* lp, const Recipe* r, int layer, int num_layers, int qk_split, int OC,
                                     GemmPath path) {
    memset(lp, 0, sizeof(*lp));
    const int fp4 = !recipe_is_bf16(r) && recipe_layer_is_fp4(r, layer, num_layers);
    const int split = fp4 && r->qk_fp8 && qk_split > 0;
    fail_if(split && qk_split >= OC, "internal: a Q/K part of %d of %d outputs", qk_split, OC);
    lp->quantized = fp4;
    lp->nparts = split ? 2 : 1;
    for (int pi = 0; pi < lp->nparts; pi++) {
        LinearPart* p = &lp->part[pi];
        p->qk = split && pi == 0;
        p->o0 = split && pi == 1 ? qk_split : 0;
        p->n = split ? (pi == 0 ? qk_split : OC - qk_split) : OC;
        for (int s = 0; s < NUM_SLOTS; s++) {
            OperandPlan* o = &p->op[s];
            o->slot = (Slot)s;
            o->src = SLOT_SOURCE[s];
            o->axis = SLOT_AXIS[s];
            o->form = FORM_BF16;
            if (!fp4 || quant_spec_is_bf16(&r->slot[s])) continue;
            o->spec = p->qk ? recipe_qk_spec(r, (Slot)s) : r->slot[s];
            o->q = quant_params(&o->spec);
            o->form = FORM_FAKE;
        }
        for (int s = SLOT_DGRAD_W; s < NUM_SLOTS; s += 2) {   // dgrad.w, wgrad.x: from the forward's copy?
            OperandPlan* o = &p->op[s];
            const Slot fs = fprop_slot_of((Slot)s);
            o->from_fprop = o->form != FORM_BF16 && o->spec.source == QSRC_FPROP && p->op[fs].form != FORM_BF16;
        }
        for (int g = 0; g < NUM_GEMMS; g++) {
            OperandPlan* a = &p->op[gemm_slot_a((Gemm)g)];
            OperandPlan* b = &p->op[gemm_slot_b((Gemm)g)];
            if (a->form != FORM_FAKE || b->form != FORM_FAKE) continue;
            if (path == GEMM_PATH_NATIVE && !split) a->form = b->form = FORM_PACKED;
            if (path == GEMM_PATH_FP8 && fp8_foldable(&a->q) && fp8_foldable(&b->q)) a->form = b->form = FORM_FP8;
        }
        linear_part_passes(p, 0);
        linear_part_passes(p, 1);
        linear_part_ahead(p);
        const OperandPlan* fw = &p->op[SLOT_FPROP_W];
        const OperandPlan* dw = &p->op[SLOT_DGRAD_W];
        p->compare_w = !split && fw->form == FORM_FAKE && dw->form == FORM_FAKE && !fw->q.hadamard && !dw->q.hadamard;
    }
}

// One line per part: each GEMM's operands (slot, form, axis, spec) and the passes, e.g. for the CPU
// test and for reading a plan while debugging.
static inline void linear_plan_describe(const LinearPlan* lp, char* buf, size_t cap) {
    size_t o = 0;
    buf[0] = '\0';
    for (int pi = 0; pi < lp->nparts && o < cap; pi++) {
        const LinearPart* p = &lp->part[pi];
        o += (size_t)snprintf(buf + o, cap - o, "%s[%d,%d)%s:", pi ? " | " : "", p->o0, p->o0 + p->n, p->qk ? " q/k" : "");
        for (int s = 0; s < NUM_SLOTS && o < cap; s++) {
            char spec[96] = "";
            if (p->op[s].form != FORM_BF16) quant_spec_format(&p->op[s].spec, spec, sizeof(spec));
            o += (size_t)snprintf(buf + o, cap - o, " %s=%s%s%s%s", SLOT_NAMES[s], FORM_NAMES[p->op[s].form],
                                  p->op[s].form != FORM_BF16 ? (p->op[s].axis ? "/rows(" : "/cols(") : "", spec,
                                  p->op[s].form != FORM_BF16 ? ")" : "");
        }
        for (int ph = 0; ph < 2 && o < cap; ph++)
            for (int i = 0; i < p->npasses[ph] && o < cap; i++) {
                const QuantPass* q = &p->pass[ph][i];
                o += (size_t)snprintf(buf + o, cap - o, "; %s pass %s->%s%s%s%s%s", ph ? "bwd" : "fwd", SOURCE_NAMES[q->src],
                                      SLOT_NAMES[q->target[0]], q->ntargets > 1 ? "+" : "",
                                      q->ntargets > 1 ? SLOT_NAMES[q->target[1]] : "", q->ahead != NO_SLOT ? " amax+" : "",
                                      q->ahead != NO_SLOT ? SLOT_NAMES[q->ahead] : "");
            }
    }
}
