// route.h: which kernels make a quantizer call's copies: the GPU quantizer's one routing decision, in plain C so
// that the CPU test runs it for every preset and slot option (dev/test/test_quant_route.c).
// defines: QuantOutForm (QF_OUT_*), QuantKernel (QK_*), QuantAmaxKernel (QA_*), QuantCall, QuantRouteTarget,
//          QuantRouteCall, QuantStep, QuantRoute, quant_route(), quant_route_target(), quant_kernel_takes(),
//          QUANT_KERNEL_NAMES, QUANT_AMAX_NAMES, qf_grid_id(), qf_shape_ok()
//
// A call (quant/dispatch.cuh) quantizes one BF16 view for one or two targets (quant_target.cuh: a copy's spec,
// axis and outputs). quant_route takes a description of the call, the targets as plain data (spec, axis, the form
// of their outputs, whether their buffers pass the dispatch's pointer checks), and returns:
//   supported   whether the quantizer takes the call at all (quant_fast_supported): grids e2m1 / int4 / e1m2 /
//               fp8 (E4M3 elements, round to nearest), blocks 1x16, 1x32, 16x16, 32x32, scales e4m3 / e8m0 /
//               e8m0ceil / 4o6, rne or sr, Hadamard 0, 2, 4, 8, 16, 32 with any signs; MS-EDEN (e2m1 1x16 e4m3
//               h128, its signs set) alone; blocks and Hadamard groups tiling the view (qf_shape_ok); a pair of
//               targets one row-wise and one column-wise with Hadamard sizes of a pair kernel, (0, 0), (0, 16),
//               (0, 32), (16, 16), (32, 32) (a pair with other sizes runs as two calls, the caller's choice);
//   amax        the kernel of the amax pass (QA_*), if the call runs one;
//   kernel[k]   the kernel that makes the copy of slot k (0: the row-wise target, 1: the column-wise one): the
//               first kernel in QUANT_ONE_COPY_ORDER whose contract (quant_kernel_takes) takes the copy, unless a
//               pair kernel makes both copies from one read (QK_DUAL, QK_FOLD2D_PAIR), or the one-pass row kernel
//               makes the row-wise copy with the amax pass (QK_ROWFOLD);
//   step[]      the apply pass's launches in order: by output form (fake, packed, statistics, FP8), then the
//               group kernels (4o6, MS-EDEN), the 2D fold, the others, each by slot.
// The launch code (dispatch.cuh) runs the amax pass and the steps with a switch on these enums and decides
// nothing. LLMC_QF_PATCH=1 (patch_only) keeps every copy but the group rules' on the patch kernel.
#pragma once
#include <string.h>
#include "llmc/base/common.h"
#include "llmc/fp4/formats.h"
#include "llmc/fp4/fp8_fold.h"   // fp8_foldable

// The output forms of the apply kernels, each its own instantiation (the fake one, the trainer's hot path on
// Hopper, is compiled exactly as without the others):
//   QF_OUT_FAKE    BF16 code * block scale in the view's layout;
//   QF_OUT_PACKED  4-bit codes and raw block scale bytes, operand-major (the native GEMM's operands);
//   QF_OUT_STATS   no output: the diagnostics' QuantStats of the quantization, added into a device struct;
//   QF_OUT_FP8     E8M0-scaled specs folded into E4M3 for FP8 GEMMs (fp8_fold.h): the fake values times a
//                  power of two per GEMM row, the reduction axis contiguous (a column-wise copy transposed);
//                  the amax pass also takes each GEMM row's maximum (QFTarget.fold_max).
typedef enum { QF_OUT_FAKE = 0, QF_OUT_PACKED, QF_OUT_STATS, QF_OUT_FP8, QF_OUT_COUNT } QuantOutForm;

// The apply kernels (quant/*.cuh), each by what it makes.
typedef enum {
    QK_NONE = 0,       // no copy made in this slot by this call (no target, an amax-only one, or not supported)
    QK_PATCH,          // qf_apply_kernel (patch.cuh): any copy but the group rules', one per kernel
    QK_ROW2,           // qf_row2_kernel (whole_block.cuh): row-wise fake copies in 1D blocks, H16 or none
    QK_COLFAKE,        // qf_colfake_kernel (whole_block.cuh): column-wise fake copies in 1x16 blocks, H16 or none
    QK_DUAL,           // qf_colfake_kernel with its row-wise copy: both fake copies of a pair from one read
    QK_ROWFOLD,        // qf_rowfold_kernel (fold.cuh): a row-wise FP8 copy in one read, in the amax pass (QA_ROWFOLD)
    QK_COLFOLD,        // qf_colfold_kernel (fold.cuh): column-wise FP8 copies in 1D blocks
    QK_FOLD2D,         // qf_colfold_kernel's TWO_D form: an FP8 copy in 32 x 32 blocks, either axis
    QK_FOLD2D_PAIR,    // the TWO_D form making both 2D copies of a pair from one read (they round alike)
    QK_4O6,            // qg_4o6_kernel (group.cuh): Four Over Six's copies the whole-block kernels do not make
    QK_EDEN,           // qg_eden_apply_kernel (group.cuh): MS-EDEN, rotating the source itself
    QK_EDEN_ROTATED,   // qg_eden_apply_kernel<FAKE, PRE>: MS-EDEN's fake copy from the rotated operand the amax
                       // pass stored in it (QA_EDEN_STORE): the rotation once
    QK_COUNT
} QuantKernel;
static const char* const QUANT_KERNEL_NAMES[QK_COUNT] = {"none", "patch", "row2", "colfake", "dual", "rowfold", "colfold",
                                                         "fold2d", "fold2d-pair", "4o6", "eden", "eden-rotated"};

// The amax pass's kernels.
typedef enum {
    QA_NONE = 0,       // no amax pass: the apply pass alone (the amax on the device already), or statistics
    QA_PATCH,          // qf_amax_kernel<HA, HB, false> (patch.cuh): every target's tensor amax from one read
    QA_PATCH_FOLD,     // qf_amax_kernel<HA, HB, true>: and the per-row maxima of the targets with fold_max
    QA_ROWFOLD,        // qf_rowfold_kernel: every target's amax (and a column-wise FP8 target's maxima) and the
                       // row-wise FP8 copy (kernel[0] = QK_ROWFOLD) from one read
    QA_EDEN,           // qg_eden_amax_kernel<false> (group.cuh): MS-EDEN's amax of the 128-point rotation
    QA_EDEN_STORE,     // qg_eden_amax_kernel<true>: and the rotated operand into the fake copy (QK_EDEN_ROTATED)
    QA_COUNT
} QuantAmaxKernel;
static const char* const QUANT_AMAX_NAMES[QA_COUNT] = {"none", "patch", "patch-fold", "rowfold", "eden", "eden-store"};

// The quantizer's calls (dispatch.cuh).
typedef enum {
    QCALL_QUANTIZE,    // quantize_fast_gpu: both passes; targets marked ahead take the amax pass only
    QCALL_AMAX,        // quant_fast_amax_gpu: the amax pass alone (outputs neither written nor checked)
    QCALL_APPLY,       // quant_fast_apply_gpu, quant_fast_supported, quant_fast_delayed_ok: the apply pass alone
    QCALL_STATS,       // quant_fast_stats_gpu: the statistics of the apply pass (outputs neither written nor checked)
    QCALL_COUNT
} QuantCall;

// One target as the routing sees it: its spec and axis, the form of its outputs, and what the dispatch found of its
// buffers (qf_route_target in dispatch.cuh: pointers are the buffers' business, not the spec's).
typedef struct {
    QuantParams p;
    int axis;            // 1 row-wise, 0 column-wise
    QuantOutForm out;    // the outputs it has: QF_OUT_FP8 (an fp8 buffer), else QF_OUT_PACKED (codes), else QF_OUT_FAKE
    int has_scalars;     // its amax and scale_dec are given (every target needs them)
    int buffers_ok;      // its output buffers are usable for out (alignment, ld; FP8: the fold's buffers; fake and
                         // packed outputs not mixed); read only where the call writes them
    int fold_max;        // a buffer for the FP8 per-row maxima is given (the amax pass takes them)
    int src_dec;         // a dequantized source (QuantTarget.src_dec: MS-EDEN's src=fprop only)
    int ahead;           // QCALL_QUANTIZE: an amax-only target (a later call's copy), after the call's own
} QuantRouteTarget;

typedef struct {
    QuantCall call;
    int64_t rows, cols, ld;   // the BF16 view
    int n;                    // targets in t (ahead ones included); more than 2 is not supported
    QuantRouteTarget t[2];
    int patch_only;           // LLMC_QF_PATCH=1: the patch kernel for every copy it can make (timing comparisons)
} QuantRouteCall;

typedef struct {
    QuantKernel kernel;
    int slot;            // 0: the row-wise copy, 1: the column-wise one (QK_DUAL, QK_FOLD2D_PAIR: both, slot 0)
    QuantOutForm out;    // the form the kernel writes (its instantiation)
} QuantStep;

typedef struct {
    int supported;
    QuantAmaxKernel amax;
    int amax_slot;          // QA_EDEN, QA_EDEN_STORE: the MS-EDEN target's slot
    QuantKernel kernel[2];  // what makes the row-wise copy [0] and the column-wise one [1]
    int delayed_ok[2];      // the copy may take the delayed amax rule (QuantTarget.amax_next): its kernel takes every
                            // block amax of the view anyway (the whole-block kernels) and it has an FP32 tensor scale
    int nsteps;
    QuantStep step[2];      // the apply pass's launches, in order
} QuantRoute;

// A target of spec p on axis with outputs of form out, every buffer usable (what the CPU test describes).
static inline QuantRouteTarget quant_route_target(const QuantParams* p, int axis, QuantOutForm out) {
    QuantRouteTarget t;
    memset(&t, 0, sizeof(t));
    t.p = *p;
    t.axis = axis;
    t.out = out;
    t.has_scalars = 1;
    t.buffers_ok = 1;
    t.fold_max = out == QF_OUT_FP8;
    return t;
}

static inline int qf_grid_id(const GridTraits* g) {
    for (int i = QGRID_E2M1; i < QGRID_COUNT; i++)
        if (!memcmp(g, &quant_grid_table[i].t, sizeof(GridTraits))) return i;
    return -1;
}

// ---------------------------------------------------------------------------------------------------
// What the quantizer takes

// The Hadamard-size combinations with a kernel (each is a separate instantiation, so the list is kept to
// what the recipes use): one target of either axis with H 0/2/4/8/16/32; two targets (row-wise,
// column-wise) with H (0, 0), (0, 16), (0, 32), (16, 16), (32, 32). A pair with a smaller H runs as two
// single-target passes (the caller's choice, see quant_fast_supported).
static inline int qf_combo_ok(int ha, int hb) {
    if (ha < 0 || hb < 0) return 1;
    if ((ha > 0 && ha < 16) || (hb > 0 && hb < 16)) return 0;
    return ha == 0 || ha == hb;
}

static inline int qf_h_ok(int h) { return h == 0 || h == 2 || h == 4 || h == 8 || h == 16 || h == 32; }

static inline int qf_shape_ok(const QuantParams* p, int64_t rows, int64_t cols, int axis) {
    if (rows <= 0 || cols <= 0) return 0;
    const int64_t M = axis ? rows : cols, K = axis ? cols : rows;
    if (K % p->block_l || M % p->block_w) return 0;
    if (p->hadamard && K % p->hadamard) return 0;
    return 1;
}

// The outputs a target asks for: fake only (16-byte aligned, ld % 8 == 0), packed only (codes 8-byte aligned:
// a column-wise thread stores 8 bytes per column; a grid with a 4-bit form), or FP8 only (E8M0 4-bit specs,
// 16-byte aligned; column-wise copies write whole 16-row patches transposed). The pointers' part is the
// dispatch's (buffers_ok), the spec's part here.
static inline int qf_outputs_ok(const QuantRouteTarget* t, int64_t rows) {
    if (!t->buffers_ok) return 0;
    if (t->out == QF_OUT_FP8) return fp8_foldable(&t->p) && (t->axis == 1 || rows % 16 == 0);
    if (t->out == QF_OUT_PACKED) return !t->p.grid.e4m3;
    return 1;
}

// outputs = 0: a pass that writes none of the target's outputs (the amax pass, statistics, an ahead target).
static inline int qf_target_ok(const QuantRouteTarget* t, int64_t rows, int64_t cols, int outputs) {
    const QuantParams* p = &t->p;
    if (t->axis != 0 && t->axis != 1) return 0;
    const int gid = qf_grid_id(&p->grid);
    if (gid != QGRID_E2M1 && gid != QGRID_INT4 && gid != QGRID_E1M2 && gid != QGRID_E4M3) return 0;
    if (gid == QGRID_E4M3 && p->rounding != QROUND_RNE) return 0;
    if (!(p->block_l == 16 || p->block_l == 32) || !(p->block_w == 1 || p->block_w == p->block_l)) return 0;
    if (p->rounding == QROUND_EDEN)   // MS-EDEN (group.cuh): e2m1 1x16 e4m3 h128, the call's signs set
        return gid == QGRID_E2M1 && p->block_w == 1 && p->block_l == 16 && p->scale == QSCALE_E4M3 &&
               p->hadamard == 128 && p->signs_set && t->has_scalars && (!outputs || qf_outputs_ok(t, rows)) &&
               qf_shape_ok(p, rows, cols, t->axis);
    if (t->src_dec) return 0;   // a dequantized source is MS-EDEN's operand source only
    if (p->scale < QSCALE_E4M3 || p->scale >= QSCALE_COUNT || (p->rounding != QROUND_RNE && p->rounding != QROUND_SR))
        return 0;
    // 4o6 (group.cuh's apply pass): E2M1 only, no FP8 form (its scales are E4M3)
    if (p->scale == QSCALE_E4M3_4O6 && (gid != QGRID_E2M1 || t->out == QF_OUT_FP8)) return 0;
    if (!qf_h_ok(p->hadamard)) return 0;
    if (!t->has_scalars || (outputs && !qf_outputs_ok(t, rows))) return 0;
    return qf_shape_ok(p, rows, cols, t->axis);
}

// Targets t[0..n) of one pass over the view.
static inline int qf_supported(const QuantRouteTarget* t, int n, int64_t rows, int64_t cols, int64_t ld, int outputs) {
    if (!t || n < 1 || n > 2) return 0;
    if (ld < cols || ld % 8 || cols % 8 || rows <= 0 || cols <= 0) return 0;
    if (n == 2 && t[0].axis == t[1].axis) return 0;
    int h[2] = {-1, -1};
    for (int k = 0; k < n; k++) {
        if (!qf_target_ok(&t[k], rows, cols, outputs)) return 0;
        if (t[k].p.rounding == QROUND_EDEN) return n == 1;   // its own kernels, one target at a time
        h[t[k].axis ? 0 : 1] = t[k].p.hadamard;
    }
    return qf_combo_ok(h[0], h[1]);
}

// ---------------------------------------------------------------------------------------------------
// The kernels' contracts

// Whether kernel k makes the copy of target t alone (the pair kernels: its half of a pair), writing form (the
// target's own, or QF_OUT_STATS for the statistics pass), in a supported call over a rows x cols view.
static inline int quant_kernel_takes(QuantKernel k, const QuantRouteTarget* t, QuantOutForm form, int64_t rows,
                                     int64_t cols, int patch_only) {
    const QuantParams* p = &t->p;
    const int eden = p->rounding == QROUND_EDEN, sr = p->rounding == QROUND_SR, f46 = p->scale == QSCALE_E4M3_4O6;
    const int h = p->hadamard, bw = p->block_w, bl = p->block_l, fp8_grid = p->grid.e4m3;
    // the kernels laid out for whole blocks per lane (qf_row2_kernel, qf_colfake_kernel): a fake copy in 1D blocks
    // with a 16-point Hadamard or none, not MS-EDEN, and with 4o6 only in 1x16 blocks
    const int whole_block = (h == 0 || h == 16) && form == QF_OUT_FAKE && bw == 1 && !eden && (!f46 || bl == 16) &&
                            !patch_only;
    switch (k) {
    case QK_PATCH:
        return !eden && !f46;
    case QK_ROW2:
        return t->axis == 1 && whole_block;
    case QK_COLFAKE:   // 1x16 blocks on a 4-bit grid (the fp8 grid's every block takes the reference elements), rows
                       // a multiple of 16
        return t->axis == 0 && whole_block && bl == 16 && !fp8_grid && rows % 16 == 0;
    case QK_DUAL:      // both copies round to nearest, neither 4o6 (the Hadamard pair: quant_route)
        return (t->axis ? quant_kernel_takes(QK_ROW2, t, form, rows, cols, patch_only)
                        : quant_kernel_takes(QK_COLFAKE, t, form, rows, cols, patch_only)) && !sr && !f46;
    case QK_ROWFOLD:   // FP8, 1D blocks, no Hadamard, round to nearest, rows of at most 20 chunks of 256 columns
        return t->axis == 1 && h == 0 && form == QF_OUT_FP8 && !sr && bw == 1 && !fp8_grid &&
               ceil_div(cols, (int64_t)256) <= 20 && !patch_only;
    case QK_COLFOLD:   // FP8, 1D blocks, no Hadamard, RNE or SR
        return t->axis == 0 && h == 0 && form == QF_OUT_FP8 && bw == 1 && !fp8_grid && !patch_only;
    case QK_FOLD2D:    // FP8, 32 x 32 blocks, no Hadamard, RNE or SR, either axis
    case QK_FOLD2D_PAIR:
        return h == 0 && form == QF_OUT_FP8 && bw == 32 && bl == 32 && !fp8_grid && !patch_only;
    case QK_4O6:
        return f46 && !eden;
    case QK_EDEN:
        return eden;
    case QK_EDEN_ROTATED:
        return eden && form == QF_OUT_FAKE;
    default:
        return 0;
    }
}

// The kernels that make one copy alone, the first that takes a copy making it: MS-EDEN's; the 2D fold; the
// whole-block kernels (4o6 copies among them); the fold kernels; Four Over Six's kernel for the 4o6 copies they
// do not make; the patch kernel for the rest.
static const QuantKernel QUANT_ONE_COPY_ORDER[] = {QK_EDEN, QK_FOLD2D, QK_ROW2, QK_COLFAKE, QK_COLFOLD, QK_4O6, QK_PATCH};

// Launch order within an output form: the group kernels, then the 2D fold, then the others.
static inline int quant_kernel_phase(QuantKernel k) {
    return k == QK_4O6 || k == QK_EDEN || k == QK_EDEN_ROTATED ? 0 : k == QK_FOLD2D || k == QK_FOLD2D_PAIR ? 1 : 2;
}

// ---------------------------------------------------------------------------------------------------
// The routing

static inline void quant_route_add_step(QuantRoute* R, QuantKernel k, int slot, QuantOutForm out) {
    R->step[R->nsteps].kernel = k;
    R->step[R->nsteps].slot = slot;
    R->step[R->nsteps].out = out;
    R->nsteps++;
}

static inline QuantRoute quant_route(const QuantRouteCall* c) {
    QuantRoute R;
    memset(&R, 0, sizeof(R));   // QK_NONE, QA_NONE
    R.amax_slot = -1;
    if (c->n < 1 || c->n > 2) return R;
    // the targets of the call's own copies (a QCALL_QUANTIZE's ahead targets come after them) and their slots
    int own = 0;
    while (own < c->n && !(c->call == QCALL_QUANTIZE && c->t[own].ahead)) own++;
    for (int k = own; k < c->n; k++)
        if (!c->t[k].ahead) return R;   // (ahead targets last)
    const int outputs = c->call == QCALL_QUANTIZE || c->call == QCALL_APPLY;
    R.supported = qf_supported(c->t, own, c->rows, c->cols, c->ld, outputs) &&
                  (own == c->n || qf_supported(c->t, c->n, c->rows, c->cols, c->ld, 0));
    if (!R.supported) return R;
    const QuantRouteTarget* all[2] = {NULL, NULL};   // by slot: every target of the call
    const QuantRouteTarget* mine[2] = {NULL, NULL};  // by slot: the targets whose copies the call makes
    for (int k = 0; k < c->n; k++) {
        const int slot = c->t[k].axis ? 0 : 1;
        all[slot] = &c->t[k];
        if (k < own) mine[slot] = &c->t[k];
    }
    // the amax pass
    if (c->call == QCALL_QUANTIZE || c->call == QCALL_AMAX) {
        int fold = 0;
        for (int s = 0; s < 2; s++) {
            if (!all[s]) continue;
            fold |= all[s]->fold_max;
            if (all[s]->p.rounding == QROUND_EDEN && R.amax_slot < 0) R.amax_slot = s;
        }
        R.amax = R.amax_slot >= 0 ? QA_EDEN : fold ? QA_PATCH_FOLD : QA_PATCH;
    }
    if (c->call == QCALL_AMAX) return R;
    const QuantOutForm stats = QF_OUT_STATS;
    QuantOutForm form[2] = {QF_OUT_FAKE, QF_OUT_FAKE};
    for (int s = 0; s < 2; s++)
        if (mine[s]) form[s] = c->call == QCALL_STATS ? stats : mine[s]->out;
    if (c->call == QCALL_QUANTIZE) {
        // an MS-EDEN fake copy (always alone): the amax pass stores the rotated operand in it, the apply pass reads it
        for (int s = 0; s < 2; s++)
            if (mine[s] && quant_kernel_takes(QK_EDEN_ROTATED, mine[s], form[s], c->rows, c->cols, c->patch_only)) {
                R.amax = QA_EDEN_STORE;
                R.amax_slot = s;
                R.kernel[s] = QK_EDEN_ROTATED;
                quant_route_add_step(&R, QK_EDEN_ROTATED, s, form[s]);
                return R;
            }
        // a row-wise FP8 copy the one-pass kernel makes, with the amax pass's work for every target: a column-wise
        // partner (the call's own or ahead) an FP8 copy in 1D blocks without a Hadamard, whose per-row maxima it takes
        const QuantRouteTarget* col = all[1];
        if (mine[0] && quant_kernel_takes(QK_ROWFOLD, mine[0], form[0], c->rows, c->cols, c->patch_only) &&
            (!col || (col->p.hadamard == 0 && col->out == QF_OUT_FP8 && col->p.block_w == 1))) {
            R.amax = QA_ROWFOLD;
            R.kernel[0] = QK_ROWFOLD;
            mine[0] = NULL;   // made; the column-wise copy, if the call makes one, remains
        }
    }
    // the apply pass: both copies of a pair from one read where a pair kernel makes them, else a kernel each
    const QuantRouteTarget *r = mine[0], *k1 = mine[1];
    if (r && k1 && quant_kernel_takes(QK_DUAL, r, form[0], c->rows, c->cols, c->patch_only) &&
        quant_kernel_takes(QK_DUAL, k1, form[1], c->rows, c->cols, c->patch_only) &&
        qf_combo_ok(r->p.hadamard, k1->p.hadamard)) {
        R.kernel[0] = R.kernel[1] = QK_DUAL;
    } else {
        for (int s = 0; s < 2; s++) {
            if (!mine[s]) continue;
            for (size_t i = 0; i < sizeof(QUANT_ONE_COPY_ORDER) / sizeof(QUANT_ONE_COPY_ORDER[0]); i++)
                if (quant_kernel_takes(QUANT_ONE_COPY_ORDER[i], mine[s], form[s], c->rows, c->cols, c->patch_only)) {
                    R.kernel[s] = QUANT_ONE_COPY_ORDER[i];
                    break;
                }
        }
        if (R.kernel[0] == QK_FOLD2D && R.kernel[1] == QK_FOLD2D &&
            (r->p.rounding == QROUND_SR) == (k1->p.rounding == QROUND_SR))
            R.kernel[0] = R.kernel[1] = QK_FOLD2D_PAIR;
    }
    // the launches: by output form, then phase, then slot; a pair kernel once
    for (int f = 0; f < QF_OUT_COUNT; f++)
        for (int ph = 0; ph < 3; ph++)
            for (int s = 0; s < 2; s++) {
                if (!mine[s] || form[s] != (QuantOutForm)f || quant_kernel_phase(R.kernel[s]) != ph) continue;
                if (s == 1 && (R.kernel[1] == QK_DUAL || R.kernel[1] == QK_FOLD2D_PAIR)) continue;
                quant_route_add_step(&R, R.kernel[s], s, form[s]);
            }
    for (int s = 0; s < 2; s++) {
        const QuantKernel k = R.kernel[s];
        R.delayed_ok[s] = mine[s] && quant_scale_is_e4m3(mine[s]->p.scale) &&
                          (k == QK_ROW2 || k == QK_COLFAKE || k == QK_DUAL);
    }
    return R;
}
