// dispatch.cuh: the GPU quantizer's entry points: a call's targets resolved for the kernels (qf_target, qf_prepare),
// routed once (route.h's quant_route), and launched: the amax pass and each routed kernel by a switch on route.h's
// enums. Nothing here chooses a kernel.
// defines: quant_fast_supported(), quantize_fast_gpu(), quant_fast_amax_gpu(), quant_fast_apply_gpu(),
//          quant_fast_stats_gpu(), quant_fast_delayed_ok(), qf_route(), qf_prepare(), qf_target(), qf_patch_only()
#pragma once
#include "llmc/base/cuda_common.cuh"
#include "llmc/fp4/formats.h"
#include "llmc/fp4/hadamard.h"            // hadamard_scale
#include "llmc/fp4/fp8_fold.h"            // fp8_fold_window
#include "llmc/fp4/quant_cpu.h"           // QuantStats
#include "llmc/fp4/quant_target.cuh"      // QuantTarget
#include "llmc/fp4/quant/route.h"
#include "llmc/fp4/quant/kernel_args.cuh"
#include "llmc/fp4/quant/patch.cuh"
#include "llmc/fp4/quant/whole_block.cuh"
#include "llmc/fp4/quant/fold.cuh"
#include "llmc/fp4/quant/group.cuh"

// LLMC_QF_PATCH=1 in the environment: the patch kernel (qf_apply_kernel) for the copies qf_row2_kernel,
// qf_colfake_kernel and the FP8 column kernel make, and the two passes (amax, then the patch kernel) for those
// qf_rowfold_kernel makes: the same numbers more slowly, for timing one against the other in one run
// (COMPARE_ENV=LLMC_QF_PATCH=1 dev/bench/check_quant_gpu.sh).
static inline int qf_patch_only(void) {
    static const int on = env_flag("LLMC_QF_PATCH");
    return on;
}

// ---------------------------------------------------------------------------------------------------
// Routing

// A target's buffers, usable for the outputs it has: fake only (16-byte aligned, ld % 8 == 0, ld >= cols), packed
// only (codes 8-byte aligned), or FP8 only (16-byte aligned, with the fold's row maxima, scales and count). The
// spec's part of the same rules is route.h's (qf_outputs_ok).
static inline int qf_buffers_ok(const QuantTarget* t, int64_t cols) {
    if (t->fp8)
        return !t->fake && !t->codes && !t->scales && t->fold_max && t->fold_scale && t->fold_below &&
               (uintptr_t)t->fp8 % 16 == 0;
    if (t->fake && !t->codes && !t->scales) return (uintptr_t)t->fake % 16 == 0 && t->ld_fake % 8 == 0 && t->ld_fake >= cols;
    if (!t->fake && t->codes && t->scales) return (uintptr_t)t->codes % 8 == 0;
    return 0;
}

// A target as the routing sees it (ahead: an amax-only target of quantize_fast_gpu).
static inline QuantRouteTarget qf_route_target(const QuantTarget* t, int64_t cols, int ahead) {
    QuantRouteTarget r;
    memset(&r, 0, sizeof(r));
    r.p = t->p;
    r.axis = t->axis;
    r.out = t->fp8 ? QF_OUT_FP8 : t->codes ? QF_OUT_PACKED : QF_OUT_FAKE;
    r.has_scalars = t->amax && t->scale_dec;
    r.buffers_ok = qf_buffers_ok(t, cols);
    r.fold_max = t->fold_max != NULL;
    r.src_dec = t->src_dec != NULL;
    r.ahead = ahead;
    return r;
}

// The route of a call over the targets t[0..n + n_ahead) of a rows x cols view with leading dimension ld (the last
// n_ahead: quantize_fast_gpu's amax-only targets). Reads only the targets' specs, axes and which buffers they have:
// a test may ask it with placeholder pointers. (Not inlined: a caller's partly filled target array, t[1] unset where
// n is 1, would otherwise draw the host compiler's -Wmaybe-uninitialized.)
static __noinline__ QuantRoute qf_route(QuantCall call, const QuantTarget* t, int n, int n_ahead, int64_t rows, int64_t cols,
                                  int64_t ld) {
    QuantRouteCall c;
    memset(&c, 0, sizeof(c));
    c.call = call;
    c.rows = rows; c.cols = cols; c.ld = ld;
    c.n = t ? n + n_ahead : 0;
    c.patch_only = qf_patch_only();
    for (int k = 0; k < c.n && k < 2; k++) c.t[k] = qf_route_target(&t[k], cols, k >= n);
    return quant_route(&c);
}

static inline QuantRoute qf_route_checked(QuantCall call, const QuantTarget* t, int n, int n_ahead, int64_t rows,
                                          int64_t cols, int64_t ld) {
    const QuantRoute R = qf_route(call, t, n, n_ahead, rows, cols, ld);
    fail_if(!R.supported,
            "quantize_fast_gpu: targets not supported (check quant_fast_supported first; %lld x %lld, ld %lld, %d targets)",
            (long long)rows, (long long)cols, (long long)ld, n + n_ahead);
    return R;
}

static inline int quant_fast_supported(const QuantTarget* t, int n, int64_t rows, int64_t cols, int64_t ld) {
    return qf_route(QCALL_APPLY, t, n, 0, rows, cols, ld).supported;
}

// ---------------------------------------------------------------------------------------------------
// The kernels' arguments

// The sign bits of rotated positions 0..31 as the kernels read them (8 per lane row-wise, 16 per thread
// column-wise): a group shorter than 32 repeats its H bits along them.
static inline uint32_t qf_hadamard_signs(const QuantParams* p) {
    if (!p->hadamard) return 0;
    uint32_t s = p->signs[0];
    for (int h = p->hadamard; h < 32; h *= 2) s = (s & ((1u << h) - 1u)) | (s << h);
    return s;
}

static inline QFTarget qf_target(const QuantTarget* t) {
    QFTarget q;
    memset(&q, 0, sizeof(q));
    q.p = t->p;
    q.g = qf_grid_consts(qf_grid_id(&t->p.grid));
    q.key = t->key;
    q.fake = (uint16_t*)t->fake;
    q.ld_fake = t->ld_fake;
    q.amax = t->amax;
    q.scale_dec = t->scale_dec;
    q.amax_next = t->amax_next;
    q.hscale = t->p.hadamard ? hadamard_scale(t->p.hadamard) : 1.0f;
    q.hsigns = qf_hadamard_signs(&t->p);
    q.sr = t->p.rounding == QROUND_SR;
    q.bw = t->p.block_w;
    q.bl = t->p.block_l;
    q.ref_elems = t->p.grid.e4m3;
    q.out = t->fp8 ? QF_OUT_FP8 : t->codes ? QF_OUT_PACKED : QF_OUT_FAKE;
    q.fp8 = t->fp8;
    q.fold_max = t->fold_max;
    q.fold_scale = t->fold_scale;
    q.fold_below = t->fold_below;
    const Fp8Window win = fp8_fold_window(&t->p.grid);
    q.dmin = win.dmin;
    q.dmax = win.dmax;
    q.bw_log2 = q.bw == 32 ? 5 : q.bw == 16 ? 4 : 0;   // block_w is 1, 16 or 32 (qf_target_ok)
    q.codes = t->codes;
    q.scales = t->scales;
    qf_code_consts(qf_grid_id(&t->p.grid), &q.code_mul, &q.code_shift);
    q.src_dec = t->src_dec;
    q.eden_corr = t->eden_corr;
    q.eden = t->p.rounding == QROUND_EDEN;
    return q;
}

// The kernels' arguments for the targets t[0..n) of a call the route took.
static inline QFLaunch qf_prepare(const floatX* in, int64_t rows, int64_t cols, int64_t ld, const QuantTarget* t, int n) {
    fail_if((uintptr_t)in % 16, "quantize_fast_gpu: input must be 16-byte aligned");
    QFLaunch L;
    memset(&L, 0, sizeof(L));
    L.ha = L.hb = -1;
    for (int k = 0; k < n; k++) {
        const int slot = t[k].axis ? 0 : 1;
        L.a.t[slot] = qf_target(&t[k]);
        const int h = t[k].p.hadamard > 0 && t[k].p.hadamard < 16 ? QF_HSMALL : t[k].p.hadamard;   // the kernel's H
        if (slot == 0) { L.ha = h; L.sra = L.a.t[0].sr; }
        else { L.hb = h; L.srb = L.a.t[1].sr; }
    }
    L.a.in = (const uint16_t*)in;
    L.a.rows = rows; L.a.cols = cols; L.a.ld = ld;
    L.a.t[0].ld_fp8 = cols;   // FP8 output: the reduction axis contiguous
    L.a.t[1].ld_fp8 = rows;
    L.a.tiles_c = ceil_div(cols, QF_TILE_C);
    L.a.tiles = L.a.tiles_c * ceil_div(rows, QF_TILE_R);
    fail_if(L.a.tiles >= ((int64_t)1 << 31), "quantize_fast_gpu: %lld x %lld is too large (tile indices are 32-bit)",
            (long long)rows, (long long)cols);
    return L;
}

// ---------------------------------------------------------------------------------------------------
// Launches: what the route says, in its order

// The amax pass of a launch (qf_amax_kernel's instantiation for its Hadamard sizes).
template <bool FOLD>
static inline void qf_launch_amax_h(const QFLaunch& L, cudaStream_t s) {
#define QF_CASE(A, B) if (L.ha == A && L.hb == B) { qf_launch_amax<A, B, FOLD>(L, s); return; }
    QF_CASE(0, -1) QF_CASE(16, -1) QF_CASE(32, -1) QF_CASE(-1, 0) QF_CASE(-1, 16) QF_CASE(-1, 32)
    QF_CASE(QF_HSMALL, -1) QF_CASE(-1, QF_HSMALL)
    QF_CASE(0, 0) QF_CASE(0, 16) QF_CASE(0, 32) QF_CASE(16, 16) QF_CASE(32, 32)
#undef QF_CASE
    fail("quantize_fast_gpu: internal: no amax kernel for Hadamard sizes %d / %d", L.ha, L.hb);
}

// The amax pass reads the input once for both targets; the apply pass runs one kernel per target:
// a dual-target apply kernel needs 168 registers (12 warps per SM) and ran slower than the two
// single-target kernels together (bench_quant_fast, nvfp4 dY pair at 65536 x 3072: 1323 us dual vs
// 1113 us split), although it reads the input once instead of twice.
static inline void qf_run_amax(const QuantRoute& R, const QFLaunch& L, cudaStream_t s) {
    switch (R.amax) {
    case QA_NONE: return;
    case QA_PATCH: qf_launch_amax_h<false>(L, s); return;
    case QA_PATCH_FOLD: qf_launch_amax_h<true>(L, s); return;
    case QA_ROWFOLD: qf_launch_rowfold(L, s); return;
    case QA_EDEN: qg_launch_eden_amax(L, R.amax_slot, s); return;
    case QA_EDEN_STORE: qg_launch_eden_amax(L, R.amax_slot, s, true); return;
    default: fail("quantize_fast_gpu: internal: no amax kernel %d", (int)R.amax);
    }
}

// The patch kernel for the copy of one slot (its instantiation for the launch's Hadamard size).
template <int OUT>
static inline void qf_launch_patch(const QFLaunch& L, int slot, cudaStream_t s) {
    if (slot == 0) {
        if (L.ha == 0) qf_launch_apply<0, -1, OUT>(L, s);
        else if (L.ha == QF_HSMALL) qf_launch_apply<QF_HSMALL, -1, OUT>(L, s);
        else if (L.ha == 16) qf_launch_apply<16, -1, OUT>(L, s);
        else if (L.ha == 32) qf_launch_apply<32, -1, OUT>(L, s);
    } else {
        if (L.hb == 0) qf_launch_apply<-1, 0, OUT>(L, s);
        else if (L.hb == QF_HSMALL) qf_launch_apply<-1, QF_HSMALL, OUT>(L, s);
        else if (L.hb == 16) qf_launch_apply<-1, 16, OUT>(L, s);
        else if (L.hb == 32) qf_launch_apply<-1, 32, OUT>(L, s);
    }
}

template <int OUT>
static inline void qf_run_step(const QuantStep& st, const QFLaunch& L, cudaStream_t s) {
    switch (st.kernel) {
    case QK_PATCH: qf_launch_patch<OUT>(L, st.slot, s); return;
    case QK_ROW2: qf_launch_row2(L, s); return;
    case QK_COLFAKE: qf_launch_colfake(L, s); return;
    case QK_DUAL: qf_launch_dual(L, s); return;
    case QK_COLFOLD: qf_launch_colfold(L, s); return;
    case QK_FOLD2D: qf_launch_fold2d(L, st.slot == 0 ? 1 : 2, s); return;
    case QK_FOLD2D_PAIR: qf_launch_fold2d(L, 3, s); return;
    case QK_4O6: qg_launch_4o6<OUT>(L, st.slot, s); return;
    case QK_EDEN: qg_launch_eden_apply<OUT>(L, st.slot, s); return;
    case QK_EDEN_ROTATED: qg_launch_eden_apply<QF_OUT_FAKE, true>(L, st.slot, s); return;
    default: fail("quantize_fast_gpu: internal: no apply launch for kernel %s", QUANT_KERNEL_NAMES[st.kernel]);
    }
}

static inline void qf_run_apply(const QuantRoute& R, const QFLaunch& L, cudaStream_t s) {
    for (int i = 0; i < R.nsteps; i++) {
        const QuantStep& st = R.step[i];
        switch (st.out) {
        case QF_OUT_FAKE: qf_run_step<QF_OUT_FAKE>(st, L, s); break;
        case QF_OUT_PACKED: qf_run_step<QF_OUT_PACKED>(st, L, s); break;
        case QF_OUT_STATS: qf_run_step<QF_OUT_STATS>(st, L, s); break;
        case QF_OUT_FP8: qf_run_step<QF_OUT_FP8>(st, L, s); break;
        default: fail("quantize_fast_gpu: internal: output form %d", (int)st.out);
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// Entry points

// Pass 1: the tensor amax of each target's (rotated) view into *t[k].amax (a maximum into it: zeroed here
// unless the caller says it already is). The targets' outputs are not used (they may have none).
static inline void quant_fast_amax_gpu(const floatX* in, int64_t rows, int64_t cols, int64_t ld, const QuantTarget* t,
                                       int n, cudaStream_t s, int zeroed = 0) {
    const QuantRoute R = qf_route_checked(QCALL_AMAX, t, n, 0, rows, cols, ld);
    const QFLaunch L = qf_prepare(in, rows, cols, ld, t, n);
    for (int k = 0; k < n && !zeroed; k++) cuda_check(cudaMemsetAsync(t[k].amax, 0, sizeof(float), s));
    qf_run_amax(R, L, s);
}

// The delayed amax rule (QuantTarget.amax_next) is taken by the kernels laid out for whole blocks (qf_row2_kernel,
// qf_colfake_kernel), which compute every block amax of the view anyway: E4M3-scaled fake copies in 1D blocks, H16 or
// no Hadamard (nvfp4's and nvfp4-naive's X and dY copies, ufp4's, the 4o6 1x16 copies, quartet2's forward); route.h's
// delayed_ok.
// Whether a single target (amax_next ignored) can be quantized under the delayed amax rule.
static inline int quant_fast_delayed_ok(const QuantTarget* t, int64_t rows, int64_t cols, int64_t ld) {
    const QuantRoute R = qf_route(QCALL_APPLY, t, 1, 0, rows, cols, ld);
    return R.supported && R.delayed_ok[t->axis ? 0 : 1];
}

// Pass 2: quantize with the amax already on the device (from pass 1, or, for targets with amax_next, the previous
// micro-step's: the delayed amax rule, quant_fast_delayed_ok).
static inline void quant_fast_apply_gpu(const floatX* in, int64_t rows, int64_t cols, int64_t ld, const QuantTarget* t,
                                        int n, cudaStream_t s) {
    const QuantRoute R = qf_route_checked(QCALL_APPLY, t, n, 0, rows, cols, ld);
    const QFLaunch L = qf_prepare(in, rows, cols, ld, t, n);
    for (int k = 0; k < 2; k++)
        fail_if((k ? L.hb : L.ha) >= 0 && L.a.t[k].amax_next && !R.delayed_ok[k],
                "quant_fast_apply_gpu: a delayed amax for a copy the whole-block kernels do not make "
                "(check quant_fast_delayed_ok first)");
    qf_run_apply(R, L, s);
}

// Both passes (the contract of the reference quantize_gpu) for t[0..n); the amax pass also takes the amax
// (and FP8 per-row maxima) of n_ahead amax-only targets t[n..n + n_ahead), whose outputs are not written
// (a backward copy taken ahead by the forward). zeroed: the caller zeroed every target's *amax (else
// this does). A row-wise FP8 copy the one-pass kernel takes (route.h: QA_ROWFOLD) is made in one read with the
// amax pass's work for the other targets; an MS-EDEN fake copy rotates once (QA_EDEN_STORE: the amax
// pass stores the rotated operand in the copy, the apply pass reads it there); anything else runs the amax
// pass, then the apply pass.
static inline void quantize_fast_gpu(const floatX* in, int64_t rows, int64_t cols, int64_t ld, const QuantTarget* t,
                                     int n, cudaStream_t s, int zeroed = 0, int n_ahead = 0) {
    for (int k = 0; k < n + n_ahead; k++)
        fail_if(t[k].amax_next != NULL, "quantize_fast_gpu: a delayed amax runs the apply pass alone (quant_fast_apply_gpu)");
    const QuantRoute R = qf_route_checked(QCALL_QUANTIZE, t, n, n_ahead, rows, cols, ld);
    const QFLaunch L = qf_prepare(in, rows, cols, ld, t, n);
    const QFLaunch La = n_ahead ? qf_prepare(in, rows, cols, ld, t, n + n_ahead) : L;   // the amax pass's targets
    for (int k = 0; k < n + n_ahead && !zeroed; k++) cuda_check(cudaMemsetAsync(t[k].amax, 0, sizeof(float), s));
    qf_run_amax(R, La, s);
    qf_run_apply(R, L, s);
}

// The diagnostics' statistics of quantizing the view with each target (QuantStats, fp4/quant_cpu.h): the
// apply pass up to each element's code, through the reference element arithmetic (counts equal the CPU
// twin's quant_stats_cpu), so they describe exactly what the GEMM sees (the rotated operand with a
// Hadamard; the same SR bits for the same key). Needs each target's *amax on the device; writes nothing
// but the statistics (not *scale_dec, not the target's outputs, which it need not have). stats: n device
// QuantStats, stats[k] for t[k], zeroed by the caller; they accumulate. The double sums are added with
// atomics, so their last bits depend on the order.
static inline void quant_fast_stats_gpu(const floatX* in, int64_t rows, int64_t cols, int64_t ld, const QuantTarget* t,
                                        int n, QuantStats* stats, cudaStream_t s) {
    fail_if(!stats || n < 1 || n > 2, "quant_fast_stats_gpu: 1 or 2 targets, and a device QuantStats for each");
    for (int k = 0; k < n; k++) {   // one kernel per target, as the apply pass
        const QuantRoute R = qf_route_checked(QCALL_STATS, &t[k], 1, 0, rows, cols, ld);
        QFLaunch L = qf_prepare(in, rows, cols, ld, &t[k], 1);
        QFTarget& q = L.a.t[t[k].axis ? 0 : 1];
        q.out = QF_OUT_STATS;
        q.amax_next = NULL;   // (statistics take no amax)
        q.stats = stats + k;
        qf_run_apply(R, L, s);
    }
}
