// test_quant_route.c: CPU tests of llmc/fp4/quant/route.h, the GPU quantizer's one routing decision. For every recipe
// preset, with every slot option in each slot, on the emulated, native and FP8 paths, at the trainer's shapes (GPT-2
// d12 and a model whose 4C passes the one-pass FP8 row kernel's 5120 columns), the trainer's calls (its quantize_pass:
// the plan's passes, the forward taking the backward copy's amax ahead, the backward's apply pass alone after it, a
// src=fprop slot's forward copy made again, the delayed amax rule, the diagnostics' statistics) are routed, and:
//   - the main cases (each preset's fc linear at d12) against routes written out here from the kernels' contracts
//     (quant.cuh's file list and each kernel file's header): which amax kernel and which kernel makes each copy;
//   - every call against the contracts as properties: a supported call makes each of its copies with a kernel that
//     takes it (quant_kernel_takes), fold kernels only FP8 copies, MS-EDEN's kernels exactly its copies, 4o6's group
//     kernel only 4o6 copies the whole-block kernels do not make, the patch kernel only where no faster kernel takes
//     the copy, a pair kernel only both copies alike, each copy launched once in form order, the delayed amax only
//     on the whole-block kernels' E4M3 copies; LLMC_QF_PATCH=1 leaves only the patch and group kernels;
//   - unsupported calls (a pair on one axis, two MS-EDEN targets, Hadamard pairs without a kernel, shapes that do
//     not tile, packed fp8 grids, 4o6 on the FP8 path, missing buffers) route to nothing.
// The expectations are written from the contracts, not taken from route.h's code.
#include "llmc/fp4/quant/route.h"
#include "llmc/fp4/recipe.h"
#include "llmc/fp4/linear_plan.h"
#include "dev/test/testing.h"

// ---------------------------------------------------------------------------------------------------
// The trainer's calls

typedef struct {
    int64_t rows, cols, ld;
} View;

typedef struct {
    char what[96];        // e.g. "dgrad.dy+wgrad.dy", "fprop.x+^wgrad.x" (^: amax taken ahead), "fprop.w(again)"
    QuantRouteCall call;
    QuantRoute route;
} Call;

static const char* const CALL_NAMES[QCALL_COUNT] = {"q", "amax", "a", "s"};
static const char* const PATH_NAMES[3] = {"emulated", "native", "FP8"};

static QuantOutForm out_form(OperandForm f) {
    return f == FORM_PACKED ? QF_OUT_PACKED : f == FORM_FP8 ? QF_OUT_FP8 : QF_OUT_FAKE;
}

static QuantRouteTarget slot_target(const LinearPart* p, Slot s) {
    const OperandPlan* o = &p->op[s];
    QuantParams q = o->q;
    if (q.step_signs) quant_params_set_step_signs(&q, 0x1234);   // MS-EDEN: the call's signs (operand_target)
    QuantRouteTarget t = quant_route_target(&q, o->axis, out_form(o->form));
    t.src_dec = o->from_fprop;
    return t;
}

static QuantRouteCall make_call(QuantCall kind, const View* v, const QuantRouteTarget* t, int n, int patch_only) {
    QuantRouteCall c;
    memset(&c, 0, sizeof(c));
    c.call = kind;
    c.rows = v->rows; c.cols = v->cols; c.ld = v->ld;
    c.n = n;
    for (int k = 0; k < n && k < 2; k++) c.t[k] = t[k];
    c.patch_only = patch_only;
    return c;
}

typedef struct {
    Call calls[32];
    int n;
    int patch_only;
} Calls;

static void add(Calls* cs, QuantCall kind, const View* v, const QuantRouteTarget* t, int n, const char* what) {
    if (cs->n == 32) { printf("FAIL test_quant_route: more than 32 calls in one linear\n"); test_failed++; return; }
    Call* c = &cs->calls[cs->n++];
    snprintf(c->what, sizeof(c->what), "%s", what);
    c->call = make_call(kind, v, t, n, cs->patch_only);
    c->route = quant_route(&c->call);
}

static int supported(const View* v, const QuantRouteTarget* t, int n) {
    QuantRouteCall c = make_call(QCALL_APPLY, v, t, n, 0);
    return quant_route(&c).supported;
}

// quantize_view: a pair the quantizer takes only one copy at a time runs as two calls; the forward's pass takes the
// backward copy's amax ahead where the quantizer takes the three together; have_amax: the apply pass alone.
static int quantize_view(Calls* cs, const View* v, const QuantRouteTarget* t, int n, const QuantRouteTarget* ahead,
                         int have_amax, const char* what) {
    if (n == 2 && !supported(v, t, 2)) {
        char w[96];
        snprintf(w, sizeof(w), "%s/1", what);
        quantize_view(cs, v, &t[0], 1, NULL, have_amax, w);
        snprintf(w, sizeof(w), "%s/2", what);
        quantize_view(cs, v, &t[1], 1, NULL, have_amax, w);
        return 0;
    }
    QuantRouteTarget all[3];
    for (int i = 0; i < n; i++) all[i] = t[i];
    int took = 0;
    if (ahead && !have_amax) {
        all[n] = *ahead;
        took = n + 1 <= 2 && supported(v, all, n + 1);
        all[n].ahead = 1;
    }
    char w[96];
    snprintf(w, sizeof(w), "%s%s", what, took ? "+^" : "");
    add(cs, have_amax ? QCALL_APPLY : QCALL_QUANTIZE, v, all, n + took, w);
    return took;
}

// One linear's calls in the trainer's order: the forward's passes, then the backward's (train_gpt_fp4's linears call
// quantize_pass per plan pass); delayed: the delayed amax rule once the previous micro-step's amaxes are there.
static void linear_calls(Calls* cs, const LinearPart* p, int64_t N, int64_t K, int64_t OC, int delayed_rule) {
    const View views[NUM_SOURCES] = {{N, K, K}, {p->n, K, K}, {N, p->n, OC}};   // X, W (its rows), dY (its columns)
    unsigned ahead_bits = 0;
    cs->n = 0;
    for (int ph = 0; ph < 2; ph++)
        for (int i = 0; i < p->npasses[ph]; i++) {
            const QuantPass* pass = &p->pass[ph][i];
            const View* v = &views[pass->src];
            QuantRouteTarget t[2];
            char what[96] = "";
            for (int k = 0; k < pass->ntargets; k++) {
                t[k] = slot_target(p, pass->target[k]);
                snprintf(what + strlen(what), sizeof(what) - strlen(what), "%s%s", k ? "+" : "", SLOT_NAMES[pass->target[k]]);
            }
            const int have_amax = ph && pass->ntargets == 1 && (ahead_bits >> pass->target[0] & 1);
            // the delayed amax rule: X and dY copies not read from the forward's copy, where the apply pass alone can
            int delayed[2] = {0, 0};
            for (int k = 0; k < pass->ntargets && !have_amax && delayed_rule; k++) {
                const Slot s = pass->target[k];
                if (SLOT_SOURCE[s] == SRC_W || p->op[s].from_fprop) continue;
                QuantRouteCall c = make_call(QCALL_APPLY, v, &t[k], 1, cs->patch_only);
                const QuantRoute R = quant_route(&c);
                delayed[k] = R.supported && R.delayed_ok[t[k].axis ? 0 : 1];
            }
            const int any_delayed = delayed[0] || delayed[1];
            QuantRouteTarget ahead;
            const int want_ahead = !ph && pass->ahead != NO_SLOT && !any_delayed;
            if (want_ahead) ahead = slot_target(p, (Slot)pass->ahead);
            View from = *v;
            if (ph && pass->ntargets == 1 && p->op[pass->target[0]].from_fprop) {   // the forward's copy made again
                const Slot fs = fprop_slot_of(pass->target[0]);
                QuantRouteTarget ft = slot_target(p, fs);
                ft.out = QF_OUT_FAKE;   // (a fake copy in the source's layout, whatever the forward's GEMM read)
                char w[96];
                snprintf(w, sizeof(w), "%s(again)", SLOT_NAMES[fs]);
                quantize_view(cs, v, &ft, 1, NULL, 1, w);
                from.ld = from.cols;
            }
            if (delayed[0] && (pass->ntargets == 1 || delayed[1])) {
                strcat(what, "(delayed)");
                quantize_view(cs, v, t, pass->ntargets, NULL, 1, what);
            } else if (any_delayed) {
                for (int k = 0; k < pass->ntargets; k++)
                    quantize_view(cs, v, &t[k], 1, NULL, delayed[k], SLOT_NAMES[pass->target[k]]);
            } else if (quantize_view(cs, &from, t, pass->ntargets, want_ahead ? &ahead : NULL, have_amax, what)) {
                ahead_bits |= 1u << pass->ahead;
            }
            for (int k = 0; k < pass->ntargets; k++) {   // the diagnostics' statistics of each copy
                char w[96];
                snprintf(w, sizeof(w), "%s(stats)", SLOT_NAMES[pass->target[k]]);
                add(cs, QCALL_STATS, &from, &t[k], 1, w);
            }
        }
}

// "what call amax row col" per call, "; "-separated (statistics left out: the properties check them)
static void describe(const Calls* cs, char* buf, size_t cap) {
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < cs->n && o < cap; i++) {
        const Call* c = &cs->calls[i];
        if (c->call.call == QCALL_STATS) continue;
        const QuantRoute* R = &c->route;
        o += (size_t)snprintf(buf + o, cap - o, "%s%s %s %s %s %s", o ? "; " : "", c->what, CALL_NAMES[c->call.call],
                              R->supported ? QUANT_AMAX_NAMES[R->amax] : "unsupported",
                              R->kernel[0] ? QUANT_KERNEL_NAMES[R->kernel[0]] : "-",
                              R->kernel[1] ? QUANT_KERNEL_NAMES[R->kernel[1]] : "-");
    }
}

// ---------------------------------------------------------------------------------------------------
// Properties, from the kernels' contracts

static int fold_kernel(QuantKernel k) {
    return k == QK_ROWFOLD || k == QK_COLFOLD || k == QK_FOLD2D || k == QK_FOLD2D_PAIR;
}
static int whole_block_kernel(QuantKernel k) { return k == QK_ROW2 || k == QK_COLFAKE || k == QK_DUAL; }

static long long n_routes = 0, n_unsupported = 0, n_bad = 0;
static long long kernel_seen[QK_COUNT], amax_seen[QA_COUNT];

static void bad(const char* label, const Call* c, const char* why) {
    if (n_bad++ < 12) {
        const QuantRoute* R = &c->route;
        printf("  %s: %s (%s): %s [amax %s, %s / %s]\n", label, c->what, CALL_NAMES[c->call.call], why,
               QUANT_AMAX_NAMES[R->amax], QUANT_KERNEL_NAMES[R->kernel[0]], QUANT_KERNEL_NAMES[R->kernel[1]]);
    }
}

static void check_route(const char* label, const Call* c) {
    const QuantRoute* R = &c->route;
    const QuantRouteCall* q = &c->call;
    n_routes++;
    amax_seen[R->amax]++;
    if (!R->supported) {
        n_unsupported++;
        if (R->amax != QA_NONE || R->kernel[0] != QK_NONE || R->kernel[1] != QK_NONE || R->nsteps)
            bad(label, c, "an unsupported call routes to a kernel");
        return;
    }
    const QuantRouteTarget* mine[2] = {NULL, NULL};   // the copies the call makes, by slot
    const QuantRouteTarget* all[2] = {NULL, NULL};
    for (int k = 0; k < q->n; k++) {
        all[q->t[k].axis ? 0 : 1] = &q->t[k];
        if (!q->t[k].ahead || q->call != QCALL_QUANTIZE) mine[q->t[k].axis ? 0 : 1] = &q->t[k];
    }
    int eden_any = 0, fold_any = 0;
    for (int s = 0; s < 2; s++)
        if (all[s]) { eden_any |= all[s]->p.rounding == QROUND_EDEN; fold_any |= all[s]->fold_max; }
    // the amax pass: the call's kind says whether there is one; MS-EDEN's own; the one-pass row kernel with its copy
    if (q->call == QCALL_APPLY || q->call == QCALL_STATS) {
        if (R->amax != QA_NONE) bad(label, c, "an amax pass in an apply or statistics call");
    } else if (eden_any) {
        if (R->amax != QA_EDEN && R->amax != QA_EDEN_STORE) bad(label, c, "MS-EDEN's amax not on its kernel");
        if ((R->amax == QA_EDEN_STORE) != (q->call == QCALL_QUANTIZE && mine[R->amax_slot] &&
                                           mine[R->amax_slot]->out == QF_OUT_FAKE))
            bad(label, c, "MS-EDEN's rotation stored for exactly its fake copies made in one call");
    } else if (R->amax == QA_ROWFOLD) {
        if (R->kernel[0] != QK_ROWFOLD) bad(label, c, "the one-pass row kernel's amax without its copy");
    } else if (R->amax != (fold_any ? QA_PATCH_FOLD : QA_PATCH)) {
        bad(label, c, "the patch amax kernel takes the FP8 row maxima exactly where a target has a buffer for them");
    }
    if (q->call == QCALL_AMAX) {
        if (R->kernel[0] || R->kernel[1] || R->nsteps) bad(label, c, "an amax call makes a copy");
        return;
    }
    int launched[2] = {0, 0}, last_form = -1;
    for (int i = 0; i < R->nsteps; i++) {
        const QuantStep* st = &R->step[i];
        if ((int)st->out < last_form) bad(label, c, "launches not in output-form order");
        last_form = st->out;
        launched[st->slot]++;
        if (st->kernel == QK_DUAL || st->kernel == QK_FOLD2D_PAIR) launched[1]++;
        if (st->kernel != R->kernel[st->slot]) bad(label, c, "a launch of another kernel than the copy's");
    }
    for (int s = 0; s < 2; s++) {
        const QuantKernel k = R->kernel[s];
        kernel_seen[k]++;
        if (!mine[s]) {
            if (k != QK_NONE) bad(label, c, "a kernel for a copy the call does not make");
            continue;
        }
        const QuantRouteTarget* t = mine[s];
        const QuantOutForm form = q->call == QCALL_STATS ? QF_OUT_STATS : t->out;
        const int eden = t->p.rounding == QROUND_EDEN, f46 = t->p.scale == QSCALE_E4M3_4O6;
        if (k == QK_NONE) { bad(label, c, "a copy without a kernel"); continue; }
        if (launched[s] != (k == QK_ROWFOLD ? 0 : 1)) bad(label, c, "a copy launched other than once");
        if (!quant_kernel_takes(k, t, form, q->rows, q->cols, q->patch_only)) bad(label, c, "a kernel that does not take the copy");
        if (fold_kernel(k) && form != QF_OUT_FP8) bad(label, c, "a fold kernel for a copy that is not FP8");
        if (form == QF_OUT_FP8 && !fold_kernel(k) && k != QK_PATCH) bad(label, c, "an FP8 copy on a kernel without the fold");
        if ((k == QK_EDEN || k == QK_EDEN_ROTATED) != eden) bad(label, c, "MS-EDEN's kernels not exactly its copies");
        if (k == QK_4O6 && (!f46 || quant_kernel_takes(s ? QK_COLFAKE : QK_ROW2, t, form, q->rows, q->cols, q->patch_only)))
            bad(label, c, "the 4o6 group kernel for a copy that is not 4o6 or that a whole-block kernel makes");
        if (k == QK_PATCH && (eden || f46)) bad(label, c, "the patch kernel for a group rule's copy");
        if (whole_block_kernel(k) && (form != QF_OUT_FAKE || t->p.block_w != 1 || (t->p.hadamard != 0 && t->p.hadamard != 16)))
            bad(label, c, "a whole-block kernel for a copy that is not fake, 1D, H16 or none");
        if (k == QK_COLFAKE && t->p.block_l != 16) bad(label, c, "the column fake kernel outside 1x16 blocks");
        if (k == QK_PATCH) {   // only where no faster kernel takes the copy
            const QuantKernel faster[] = {QK_ROW2, QK_COLFAKE, QK_COLFOLD, QK_FOLD2D};
            for (int j = 0; j < 4; j++)
                if (quant_kernel_takes(faster[j], t, form, q->rows, q->cols, q->patch_only))
                    bad(label, c, "the patch kernel where a faster kernel takes the copy");
        }
        if (q->patch_only && (whole_block_kernel(k) || fold_kernel(k))) bad(label, c, "LLMC_QF_PATCH=1 and not the patch kernel");
        if ((k == QK_DUAL || k == QK_FOLD2D_PAIR) && R->kernel[!s] != k) bad(label, c, "half of a pair kernel");
        if (k == QK_DUAL && t->p.rounding != QROUND_RNE) bad(label, c, "the dual form for a stochastically rounded copy");
        if (k == QK_DUAL && s == 0) {   // the pair kernel's instantiations: row, column Hadamard (0, 0), (0, 16), (16, 16)
            const int hr = t->p.hadamard, hc = mine[1]->p.hadamard;
            if (!((hr == 0 && (hc == 0 || hc == 16)) || (hr == 16 && hc == 16))) bad(label, c, "the dual form for other Hadamard sizes");
        }
        const int delayed_want = (k == QK_ROW2 || k == QK_COLFAKE || k == QK_DUAL) && quant_scale_is_e4m3(t->p.scale);
        if (q->call == QCALL_APPLY && R->delayed_ok[s] != delayed_want)
            bad(label, c, "the delayed amax not exactly on the whole-block kernels' E4M3 copies");
    }
    if (R->kernel[0] == QK_FOLD2D_PAIR &&
        (mine[0]->p.rounding == QROUND_SR) != (mine[1]->p.rounding == QROUND_SR))
        bad(label, c, "one 2D fold kernel for copies that round differently");
    if (R->kernel[0] == QK_FOLD2D && R->kernel[1] == QK_FOLD2D &&
        (mine[0]->p.rounding == QROUND_SR) == (mine[1]->p.rounding == QROUND_SR))
        bad(label, c, "two 2D fold kernels for copies one kernel makes from one read");
}

// ---------------------------------------------------------------------------------------------------
// The main cases: each preset's fc linear (layer 5 of 12, C = 768, N = 8192 tokens), written out from the contracts:
//   whole-block kernels: fake 1D copies, H16 or none (row2: rows; colfake: columns in 1x16); both of a pair that
//     rounds to nearest from one read (dual); 4o6 1x16 copies among them, other 4o6 copies on 4o6's group kernel;
//   fold kernels (FP8 path): rows in 1D blocks, no Hadamard, RNE, in one read with every target's amax (rowfold);
//     columns in 1D blocks (colfold); 32 x 32 blocks (fold2d; both copies of a pair that rounds alike: fold2d-pair);
//   MS-EDEN: its own amax pass, which stores the rotation in a fake copy (eden-store), read back (eden-rotated);
//   the patch kernel and amax pass (patch; patch-fold with FP8 row maxima) for the rest: 2D fake and packed copies.
// Format: per call "slots call amax row-kernel col-kernel" (call: q both passes, a the apply pass alone; ^: the amax
// taken ahead for that backward copy, whose call is then "a"; (again): a src=fprop slot's forward copy made again).
typedef struct {
    const char* preset;
    GemmPath path;
    const char* want;
} MainCase;

static const MainCase MAIN_CASES[] = {
    {"nvfp4", GEMM_PATH_EMULATED,
     "fprop.x+^ q patch row2 -; fprop.w+^ q patch patch -; dgrad.dy+wgrad.dy q patch row2 colfake; "
     "wgrad.x a none - colfake; dgrad.w a none - patch"},
    {"nvfp4", GEMM_PATH_FP8,   // E4M3 scales: no fold, the emulated path's kernels
     "fprop.x+^ q patch row2 -; fprop.w+^ q patch patch -; dgrad.dy+wgrad.dy q patch row2 colfake; "
     "wgrad.x a none - colfake; dgrad.w a none - patch"},
    {"nvfp4", GEMM_PATH_NATIVE,   // packed copies: the patch kernel; no amax ahead (not fake, not FP8)
     "fprop.x q patch patch -; fprop.w q patch patch -; dgrad.dy+wgrad.dy q patch patch patch; "
     "wgrad.x q patch - patch; dgrad.w q patch - patch"},
    {"nvfp4-naive", GEMM_PATH_EMULATED,
     "fprop.x+^ q patch row2 -; fprop.w+^ q patch row2 -; dgrad.dy+wgrad.dy q patch dual dual; "
     "wgrad.x a none - colfake; dgrad.w a none - colfake"},
    {"nvfp4-naive", GEMM_PATH_NATIVE,
     "fprop.x q patch patch -; fprop.w q patch patch -; dgrad.dy+wgrad.dy q patch patch patch; "
     "wgrad.x q patch - patch; dgrad.w q patch - patch"},
    {"mxfp4", GEMM_PATH_EMULATED,   // 1x32: rows on row2, columns on the patch kernel (colfake is 1x16)
     "fprop.x+^ q patch row2 -; fprop.w+^ q patch row2 -; dgrad.dy+wgrad.dy q patch row2 patch; "
     "wgrad.x a none - patch; dgrad.w a none - patch"},
    {"mxfp4", GEMM_PATH_FP8,
     "fprop.x+^ q rowfold rowfold -; fprop.w+^ q rowfold rowfold -; dgrad.dy+wgrad.dy q rowfold rowfold colfold; "
     "wgrad.x a none - colfold; dgrad.w a none - colfold"},
    {"mxfp4-2d", GEMM_PATH_EMULATED,
     "fprop.x+^ q patch row2 -; fprop.w+^ q patch patch -; dgrad.dy+wgrad.dy q patch patch patch; "
     "wgrad.x a none - patch; dgrad.w a none - patch"},
    {"mxfp4-2d", GEMM_PATH_FP8,   // X's rows in one read with wgrad.x's amax (an SR column partner); W, dY 32 x 32
     "fprop.x+^ q rowfold rowfold -; fprop.w+^ q patch-fold fold2d -; dgrad.dy+wgrad.dy q patch-fold fold2d-pair fold2d-pair; "
     "wgrad.x a none - colfold; dgrad.w a none - fold2d"},
    {"ufp4", GEMM_PATH_EMULATED,
     "fprop.x+^ q patch row2 -; fprop.w+^ q patch row2 -; dgrad.dy+wgrad.dy q patch row2 colfake; "
     "wgrad.x a none - colfake; dgrad.w a none - colfake"},
    {"nvfp4-4o6", GEMM_PATH_EMULATED,   // 4o6 1x16 on the whole-block kernels, 16x16 on 4o6's group kernel
     "fprop.x+^ q patch row2 -; fprop.w+^ q patch 4o6 -; dgrad.dy+wgrad.dy q patch row2 colfake; "
     "wgrad.x a none - colfake; dgrad.w a none - 4o6"},
    {"nvfp4-4o6", GEMM_PATH_NATIVE,
     "fprop.x q patch 4o6 -; fprop.w q patch 4o6 -; dgrad.dy+wgrad.dy q patch 4o6 4o6; "
     "wgrad.x q patch - 4o6; dgrad.w q patch - 4o6"},
    {"quartet2", GEMM_PATH_EMULATED,   // MS-EDEN: one target a call (dY's pair as two); src=fprop: the forward's copy again
     "fprop.x q patch row2 -; fprop.w q patch row2 -; dgrad.dy+wgrad.dy/1 q eden-store eden-rotated -; "
     "dgrad.dy+wgrad.dy/2 q eden-store - eden-rotated; fprop.x(again) a none row2 -; wgrad.x q eden-store - eden-rotated; "
     "fprop.w(again) a none row2 -; dgrad.w q eden-store - eden-rotated"},
    {"quartet2", GEMM_PATH_NATIVE,
     "fprop.x q patch patch -; fprop.w q patch patch -; dgrad.dy+wgrad.dy/1 q eden eden -; "
     "dgrad.dy+wgrad.dy/2 q eden - eden; fprop.x(again) a none row2 -; wgrad.x q eden - eden; "
     "fprop.w(again) a none row2 -; dgrad.w q eden - eden"},
    {"quartet2-4o6", GEMM_PATH_EMULATED,
     "fprop.x q patch row2 -; fprop.w q patch row2 -; dgrad.dy+wgrad.dy/1 q eden-store eden-rotated -; "
     "dgrad.dy+wgrad.dy/2 q eden-store - eden-rotated; fprop.x(again) a none row2 -; wgrad.x q eden-store - eden-rotated; "
     "fprop.w(again) a none row2 -; dgrad.w q eden-store - eden-rotated"},
};

static void main_cases(void) {
    const int L = 12, C = 768, N = 8192;
    for (size_t i = 0; i < sizeof(MAIN_CASES) / sizeof(MAIN_CASES[0]); i++) {
        const MainCase* m = &MAIN_CASES[i];
        Recipe r;
        recipe_preset(&r, m->preset);
        recipe_resolve_layers(&r, L);
        recipe_check(&r);
        LinearPlan lp;
        linear_plan_build(&lp, &r, 5, L, 0, 4 * C, m->path);
        Calls cs;
        memset(&cs, 0, sizeof(cs));
        linear_calls(&cs, &lp.part[0], N, C, 4 * C, 0);
        char got[2048];
        describe(&cs, got, sizeof(got));
        CHECK(strcmp(got, m->want) == 0, "%s (%s path) fc:\n    got  %s\n    want %s", m->preset, PATH_NAMES[m->path], got, m->want);
        for (int k = 0; k < cs.n; k++) check_route(m->preset, &cs.calls[k]);
        // the statistics: the group rules' kernels for their copies, else the patch kernel (reference elements)
        for (int k = 0; k < cs.n; k++) {
            const Call* c = &cs.calls[k];
            if (c->call.call != QCALL_STATS) continue;
            const QuantRouteTarget* t = &c->call.t[0];
            const QuantKernel want = t->p.rounding == QROUND_EDEN ? QK_EDEN : t->p.scale == QSCALE_E4M3_4O6 ? QK_4O6 : QK_PATCH;
            CHECK(c->route.kernel[t->axis ? 0 : 1] == want, "%s: %s on %s, want %s", m->preset, c->what,
                  QUANT_KERNEL_NAMES[c->route.kernel[t->axis ? 0 : 1]], QUANT_KERNEL_NAMES[want]);
        }
    }
    // the delayed amax rule (--amax delayed): nvfp4's X and dY copies are the whole-block kernels' (E4M3 scales), so
    // each pass runs its apply pass alone and takes nothing ahead; mxfp4's E8M0 copies have no tensor scale to delay
    const struct { const char* preset; GemmPath path; const char* want; } delayed[] = {
        {"nvfp4", GEMM_PATH_EMULATED,
         "fprop.x(delayed) a none row2 -; fprop.w+^ q patch patch -; dgrad.dy+wgrad.dy(delayed) a none row2 colfake; "
         "wgrad.x(delayed) a none - colfake; dgrad.w a none - patch"},
        {"nvfp4-naive", GEMM_PATH_EMULATED,
         "fprop.x(delayed) a none row2 -; fprop.w+^ q patch row2 -; dgrad.dy+wgrad.dy(delayed) a none dual dual; "
         "wgrad.x(delayed) a none - colfake; dgrad.w a none - colfake"},
        {"mxfp4", GEMM_PATH_FP8,
         "fprop.x+^ q rowfold rowfold -; fprop.w+^ q rowfold rowfold -; dgrad.dy+wgrad.dy q rowfold rowfold colfold; "
         "wgrad.x a none - colfold; dgrad.w a none - colfold"},
    };
    for (size_t i = 0; i < sizeof(delayed) / sizeof(delayed[0]); i++) {
        Recipe r;
        recipe_preset(&r, delayed[i].preset);
        recipe_resolve_layers(&r, L);
        LinearPlan lp;
        linear_plan_build(&lp, &r, 5, L, 0, 4 * C, delayed[i].path);
        Calls cs;
        memset(&cs, 0, sizeof(cs));
        linear_calls(&cs, &lp.part[0], N, C, 4 * C, 1);
        char got[2048];
        describe(&cs, got, sizeof(got));
        CHECK(strcmp(got, delayed[i].want) == 0, "%s --amax delayed fc:\n    got  %s\n    want %s", delayed[i].preset, got,
              delayed[i].want);
        for (int k = 0; k < cs.n; k++) check_route(delayed[i].preset, &cs.calls[k]);
    }
}

// ---------------------------------------------------------------------------------------------------
// Every preset with every slot option

// A slot's options: the spec presets and their variants (rounding, Hadamard, scale rule), MS-EDEN, BF16.
static int slot_options(char opts[][64], int cap) {
    const char* base[] = {"nvfp4", "nvfp4-2d", "mxfp4", "mxfp4-ceil", "mxfp4-2d", "int4", "e1m2", "mxfp8",
                          "e2m1,1x32,e4m3", "nvfp4,32x32", "mxfp4,16x16", "mxfp4,1x16", "int4,e8m0", "e1m2,e8m0ceil,32x32"};
    const char* rnd[] = {"", ",sr"};
    const char* had[] = {"", ",h2", ",h8", ",h16", ",h32", ",h16,seed=3", ",h16,plain"};
    const char* sc[] = {"", ",4o6"};
    int n = 0;
    for (size_t b = 0; b < sizeof(base) / sizeof(base[0]); b++)
        for (int r = 0; r < 2; r++)
            for (int h = 0; h < 7; h++)
                for (int s = 0; s < 2; s++) {
                    char text[64];
                    QuantSpec q;
                    snprintf(text, sizeof(text), "%s%s%s%s", base[b], sc[s], rnd[r], had[h]);
                    if (quant_spec_parse(text, &q, NULL, 0) != 0) continue;   // (e.g. fp8 with sr, 4o6 off e2m1)
                    if (n < cap) snprintf(opts[n++], 64, "%s", text);
                }
    const char* extra[] = {"nvfp4,eden", "nvfp4,eden,src=fprop", "bf16"};
    for (int i = 0; i < 3 && n < cap; i++) snprintf(opts[n++], 64, "%s", extra[i]);
    return n;
}

// patch_only: LLMC_QF_PATCH=1, at d12's shape only.
static void sweep(int patch_only) {
    static char opts[512][64];
    const int nopt = slot_options(opts, 512);
    const int L = 12;
    const struct { int C; int64_t N; } shapes[] = {{768, 8192}, {1600, 4096}};   // d12; 4C = 6400 > 5120 columns
    const GemmPath paths[] = {GEMM_PATH_EMULATED, GEMM_PATH_NATIVE, GEMM_PATH_FP8};
    long long plans = 0, calls = 0;
    const long long bad_before = n_bad;
    for (int pi = 0; pi < NUM_RECIPE_PRESETS; pi++) {
        for (int s = -1; s < NUM_SLOTS; s++)
            for (int oi = 0; oi < (s < 0 ? 1 : nopt); oi++) {
                Recipe r;
                recipe_preset(&r, RECIPE_PRESETS[pi].name);
                if (s >= 0) recipe_set_slot(&r, (Slot)s, opts[oi]);
                recipe_resolve_layers(&r, L);
                char label[160];
                snprintf(label, sizeof(label), "%s%s%s%s%.63s", RECIPE_PRESETS[pi].name, s >= 0 ? " --" : "",
                         s >= 0 ? SLOT_NAMES[s] : "", s >= 0 ? " " : "", s >= 0 ? opts[oi] : "");
                for (int qk = 0; qk < 2; qk++) {
                    if (qk && (s >= 0 || recipe_is_bf16(&r))) continue;   // --qk-fp8 with the presets as they are
                    r.qk_fp8 = qk;
                    for (int si = 0; si < (patch_only ? 1 : 2); si++)
                        for (int ph = 0; ph < 3; ph++) {
                            const int C = shapes[si].C;
                            const int64_t N = shapes[si].N;
                            for (int kind = 0; kind < 4; kind++) {
                                const int K = kind == 3 ? 4 * C : C, OC = kind == 0 ? 3 * C : kind == 2 ? 4 * C : C;
                                LinearPlan lp;
                                linear_plan_build(&lp, &r, 5, L, kind == 0 ? 2 * C : 0, OC, paths[ph]);
                                for (int part = 0; part < lp.nparts; part++)
                                    for (int dl = 0; dl < 2; dl++) {
                                        Calls cs;
                                        memset(&cs, 0, sizeof(cs));
                                        cs.patch_only = patch_only;
                                        linear_calls(&cs, &lp.part[part], N, K, OC, dl);
                                        for (int k = 0; k < cs.n; k++) check_route(label, &cs.calls[k]);
                                        calls += cs.n;
                                        plans++;
                                    }
                            }
                        }
                }
            }
    }
    printf("  sweep%s: %d slot options, %lld linear plans, %lld calls routed\n", patch_only ? " (LLMC_QF_PATCH=1)" : "",
           nopt, plans, calls);
    CHECK(n_bad == bad_before, "sweep%s: %lld routes break a kernel's contract (first ones above)",
          patch_only ? " (patch only)" : "", n_bad - bad_before);
}

// ---------------------------------------------------------------------------------------------------
// Unsupported calls route to nothing

static QuantRouteTarget spec_target(const char* text, int axis, QuantOutForm out) {
    QuantSpec s;
    char err[256];
    fail_if(quant_spec_parse(text, &s, err, sizeof(err)) != 0, "test_quant_route: bad spec '%s': %s", text, err);
    QuantParams p = quant_params(&s);
    if (p.step_signs) quant_params_set_step_signs(&p, 7);
    return quant_route_target(&p, axis, out);
}

static void unsupported_calls(void) {
    // writes: 1 where only the calls that write outputs (quantize, apply) refuse it (the outputs' rules)
    const struct { const char* what; const char* a; int axa; QuantOutForm fa; const char* b; int axb; QuantOutForm fb;
                   int64_t rows, cols, ld; int writes; } cases[] = {
        {"a pair on one axis", "nvfp4", 1, QF_OUT_FAKE, "nvfp4", 1, QF_OUT_FAKE, 256, 384, 384, 0},
        {"two MS-EDEN targets", "nvfp4,eden", 1, QF_OUT_FAKE, "nvfp4,eden", 0, QF_OUT_FAKE, 256, 384, 384, 0},
        {"MS-EDEN with a partner", "nvfp4,eden", 1, QF_OUT_FAKE, "nvfp4", 0, QF_OUT_FAKE, 256, 384, 384, 0},
        {"a pair of Hadamard sizes (8, 8)", "nvfp4,h8", 1, QF_OUT_FAKE, "nvfp4,h8", 0, QF_OUT_FAKE, 256, 384, 384, 0},
        {"a pair of Hadamard sizes (16, 0)", "nvfp4,h16", 1, QF_OUT_FAKE, "nvfp4", 0, QF_OUT_FAKE, 256, 384, 384, 0},
        {"a pair of Hadamard sizes (32, 16)", "nvfp4,h32", 1, QF_OUT_FAKE, "nvfp4,h16", 0, QF_OUT_FAKE, 256, 384, 384, 0},
        {"1x16 blocks across 248 columns", "nvfp4", 1, QF_OUT_FAKE, NULL, 0, QF_OUT_FAKE, 64, 248, 256, 0},
        {"1x32 column blocks down 48 rows", "mxfp4", 0, QF_OUT_FAKE, NULL, 0, QF_OUT_FAKE, 48, 256, 256, 0},
        {"16x16 tiles across 40 rows", "nvfp4-2d", 1, QF_OUT_FAKE, NULL, 0, QF_OUT_FAKE, 40, 256, 256, 0},
        {"cols not a multiple of 8", "nvfp4", 0, QF_OUT_FAKE, NULL, 0, QF_OUT_FAKE, 64, 100, 104, 0},
        {"ld below cols", "nvfp4", 1, QF_OUT_FAKE, NULL, 0, QF_OUT_FAKE, 64, 256, 128, 0},
        {"packed fp8-grid codes", "mxfp8", 1, QF_OUT_PACKED, NULL, 0, QF_OUT_FAKE, 64, 256, 256, 1},
        {"an FP8 copy of a 4o6 spec", "nvfp4,4o6", 1, QF_OUT_FP8, NULL, 0, QF_OUT_FAKE, 64, 256, 256, 0},
        {"an FP8 copy of E4M3 scales", "nvfp4", 1, QF_OUT_FP8, NULL, 0, QF_OUT_FAKE, 64, 256, 256, 1},
        {"a 64-point Hadamard", "nvfp4,h64", 1, QF_OUT_FAKE, NULL, 0, QF_OUT_FAKE, 64, 256, 256, 0},
    };
    int nbad = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        for (int kind = 0; kind < QCALL_COUNT; kind++) {
            QuantRouteTarget t[2];
            t[0] = spec_target(cases[i].a, cases[i].axa, cases[i].fa);
            int n = 1;
            if (cases[i].b) { t[1] = spec_target(cases[i].b, cases[i].axb, cases[i].fb); n = 2; }
            const View v = {cases[i].rows, cases[i].cols, cases[i].ld};
            Call c;
            snprintf(c.what, sizeof(c.what), "%s", cases[i].what);
            c.call = make_call((QuantCall)kind, &v, t, n, 0);
            c.route = quant_route(&c.call);
            if (cases[i].writes && (kind == QCALL_AMAX || kind == QCALL_STATS)) continue;
            if (c.route.supported && nbad++ < 5) printf("  %s (%s): supported\n", cases[i].what, CALL_NAMES[kind]);
            check_route("unsupported", &c);
        }
    // targets the dispatch finds unusable (buffers, scalars), a dequantized source off MS-EDEN, MS-EDEN's signs unset,
    // more than two targets, an ahead target before the call's own
    const View v = {256, 384, 384};
    QuantRouteTarget t[2];
    t[0] = spec_target("mxfp4", 1, QF_OUT_FP8);
    t[0].buffers_ok = 0;
    QuantRouteCall c = make_call(QCALL_QUANTIZE, &v, t, 1, 0);
    nbad += quant_route(&c).supported;
    t[0] = spec_target("nvfp4", 1, QF_OUT_FAKE);
    t[0].has_scalars = 0;
    c = make_call(QCALL_AMAX, &v, t, 1, 0);
    nbad += quant_route(&c).supported;
    t[0] = spec_target("nvfp4", 1, QF_OUT_FAKE);
    t[0].src_dec = 1;
    c = make_call(QCALL_QUANTIZE, &v, t, 1, 0);
    nbad += quant_route(&c).supported;
    t[0] = spec_target("nvfp4,eden", 1, QF_OUT_FAKE);
    t[0].p.signs_set = 0;
    c = make_call(QCALL_QUANTIZE, &v, t, 1, 0);
    nbad += quant_route(&c).supported;
    t[0] = spec_target("nvfp4", 1, QF_OUT_FAKE);
    c = make_call(QCALL_APPLY, &v, t, 1, 0);
    c.n = 3;
    nbad += quant_route(&c).supported;
    t[0] = spec_target("nvfp4", 1, QF_OUT_FAKE);
    t[1] = spec_target("nvfp4", 0, QF_OUT_FAKE);
    t[0].ahead = 1;
    c = make_call(QCALL_QUANTIZE, &v, t, 2, 0);
    nbad += quant_route(&c).supported;
    CHECK(nbad == 0, "unsupported calls must route to nothing (%d did not)", nbad);
}

int main(void) {
    main_cases();
    sweep(0);
    sweep(1);
    unsupported_calls();
    printf("  %lld calls routed (%lld unsupported); kernels:", n_routes, n_unsupported);
    for (int k = 1; k < QK_COUNT; k++) printf(" %s %lld", QUANT_KERNEL_NAMES[k], kernel_seen[k]);
    printf("; amax:");
    for (int k = 1; k < QA_COUNT; k++) printf(" %s %lld", QUANT_AMAX_NAMES[k], amax_seen[k]);
    printf("\n");
    for (int k = 1; k < QK_COUNT; k++) CHECK(kernel_seen[k] > 0, "no call routed to %s", QUANT_KERNEL_NAMES[k]);
    for (int k = 1; k < QA_COUNT; k++) CHECK(amax_seen[k] > 0, "no call's amax pass on %s", QUANT_AMAX_NAMES[k]);
    CHECK(n_bad == 0, "%lld routes break a kernel's contract (first ones above)", n_bad);
    return test_summary("test_quant_route");
}
