// attention.cuh: causal multi-head self-attention, with grouped-query attention (GQA), for GPT-2 and
// Llama training (fused "flash" attention).
// defines: AttnShape, attention_init, attention_destroy, attention_forward, attention_backward,
//          attention_backend_name, attention_cudnn_version, attention_force_own_kernel, attention_cudnn_unavailable_reason,
//          attention_set_verbose, attention_set_deterministic, attention_is_deterministic,
//          AttnQuantizer, AttnFp4Copy, attention_fp4_forward, attention_fp4_backward, attention_fp4_ds_buffers
// Two implementations behind one API, with the same numbers in and out:
//   - cuDNN's fused flash-attention engines (llmc/model/attention_cudnn.cuh), when built with -DENABLE_CUDNN
//     and cuDNN can build the graph at run time;
//   - our own flash-style kernels (llmc/model/attention_kernels.cuh) otherwise: tensor cores, online
//     softmax, deterministic backward.
// The choice is made once, in attention_init; if cuDNN then fails to build or run a graph, one line
// says why and the own kernels take over for good. Environment: LLMC_ATTENTION=own forces the own
// kernels; LLMC_ATTENTION_VERBOSE=1 logs every cuDNN build step that fails and the engine chosen.
// Shapes: AttnShape {B, T, NH, KVH, HS}: NH query heads of size HS, KVH key/value heads (NH % KVH ==
// 0; query head h reads key/value head h / (NH / KVH), as transformers' repeat_kv); KVH == NH is plain
// multi-head attention (GPT-2).
// HS is 32, 64 or 128 (what both backends run, so a fallback from cuDNN never meets a size it lacks).
// Tensors: qkv and dqkv (B, T, NH + 2 KVH, HS) BF16 (per token: the NH q heads, then the KVH k heads,
// then the KVH v heads; with KVH == NH that is (B, T, 3, NH, HS)); dK and dV of a key/value head are
// the sums over its NH/KVH query heads; out and dout (B, T, NH, HS) BF16; stats (B, NH, T) FP32 =
// natural log-sum-exp of each scaled, causally masked score row, written by the forward and read by
// the backward. Scale 1/sqrt(HS).
// cuDNN plans are built once per shape and reused; one workspace, grown only when a plan needs more.
// Determinism: both backends are bitwise deterministic by default (the same inputs give the same bits,
// run after run, on the same GPU and library versions). cuDNN's backward is built in its deterministic
// form (dQ = dS.K without atomics, attention_cudnn.cuh); attention_set_deterministic(0) (the trainer's
// --deterministic off) asks it for the form that sums dQ with FP32 atomics in no fixed order. The
// own backward is deterministic either way. If cuDNN cannot build the asked-for graph, the own kernels
// take over, as on any other cuDNN failure.
// FP4 attention (--attention-fp4, llmc/fp4/attention_fp4.h, docs/FULLSTACK_FP4.md section 1) always runs on the own
// kernels: attention_fp4_forward quantizes Q, K, V into the layer's copy, which the forward and the backward read;
// attention_fp4_backward materialises dS per layer, quantizes it and takes dQ, dK from that copy. The quantizing is
// the FP4 module's (fp4/attention_fp4.cuh), handed in as an AttnQuantizer: the model does not read the module.
#pragma once
#include <stdlib.h>
#include <string.h>
#include "llmc/base/cuda_common.cuh"
#include "llmc/model/attention_kernels.cuh"   // defines: attn_own_forward, attn_own_backward
#include "llmc/model/attention_cudnn.cuh"     // defines: AttnCudnnPlan, attn_cudnn_build_forward, ... (ENABLE_CUDNN only)

// One attention call's shape: batch, sequence, query heads, key/value heads, head size.
typedef struct { int B, T, NH, KVH, HS; } AttnShape;

#define ATTN_MAX_PLANS 16

static struct {
    int initialized;
    int use_cudnn;                  // 1 while cuDNN is the backend
    int force_own;                  // attention_force_own_kernel() or LLMC_ATTENTION=own
    int verbose;
    int nondeterministic;           // attention_set_deterministic(0): cuDNN's atomic dQ backward
    char why_not_cudnn[2048];       // why cuDNN is not (or no longer) the backend
    float* dsum;                    // own backward scratch: B*NH*T floats
    size_t dsum_bytes;
    floatX *fp4_ds, *fp4_ds_rows, *fp4_ds_cols;   // FP4 backward scratch: dS and its copies, B*NH*T*T each
    size_t fp4_ds_elems;
    float* fp4_ds_scalars;          // device: amax[2], dec[2] of the dS copies
#ifdef ENABLE_CUDNN
    cudnnHandle_t handle;
    AttnCudnnPlan* plans[ATTN_MAX_PLANS];
    int n_plans;
    void* workspace;
    size_t workspace_bytes;
#endif
} attn_state;

static void attention_set_verbose(int on) { attn_state.verbose = on; }

// 1 (the default): every backward bitwise deterministic; 0: cuDNN may sum dQ with atomics (no faster at d12, H100).
// Set before the first attention call of a shape (plans are built once per shape and setting).
static void attention_set_deterministic(int on) { attn_state.nondeterministic = !on; }
static int attention_is_deterministic(void) { return !attn_state.nondeterministic; }

void attention_init(void) {
    if (attn_state.initialized) return;
    attn_state.initialized = 1;
    const char* env = getenv("LLMC_ATTENTION");
    if (env && strcmp(env, "own") == 0) attn_state.force_own = 1;
    const char* verbose = getenv("LLMC_ATTENTION_VERBOSE");
    if (verbose && atoi(verbose) > 0) attn_state.verbose = 1;
#ifdef ENABLE_CUDNN
    cudaDeviceProp prop;
    int dev = 0;
    cuda_check(cudaGetDevice(&dev));
    cuda_check(cudaGetDeviceProperties(&prop, dev));
    if (prop.major < 8) {
        snprintf(attn_state.why_not_cudnn, sizeof(attn_state.why_not_cudnn), "cuDNN fused attention needs compute capability 8.0+, this GPU is %d.%d", prop.major, prop.minor);
    } else {
        cudnnStatus_t s = cudnnCreate(&attn_state.handle);
        if (s == CUDNN_STATUS_SUCCESS) {
            attn_state.use_cudnn = 1;
        } else {
            snprintf(attn_state.why_not_cudnn, sizeof(attn_state.why_not_cudnn), "cudnnCreate failed: %s", cudnnGetErrorString(s));
            attn_state.handle = NULL;
        }
    }
    if (!attn_state.use_cudnn) printf("attention: cuDNN unavailable (%s); using the own kernel\n", attn_state.why_not_cudnn);
    else if (attn_state.verbose) printf("attention: cuDNN %zu (compiled against %d)\n", cudnnGetVersion(), CUDNN_VERSION);
#else
    snprintf(attn_state.why_not_cudnn, sizeof(attn_state.why_not_cudnn), "built without cuDNN");
#endif
}

void attention_destroy(void) {
    if (!attn_state.initialized) return;
#ifdef ENABLE_CUDNN
    for (int i = 0; i < attn_state.n_plans; i++) {
        attn_cudnn_plan_destroy(attn_state.plans[i]);
        free(attn_state.plans[i]);
    }
    attn_state.n_plans = 0;
    if (attn_state.workspace) cuda_check(cudaFree(attn_state.workspace));
    attn_state.workspace = NULL;
    attn_state.workspace_bytes = 0;
    if (attn_state.handle) cudnnDestroy(attn_state.handle);
    attn_state.handle = NULL;
#endif
    if (attn_state.dsum) cuda_check(cudaFree(attn_state.dsum));
    attn_state.dsum = NULL;
    attn_state.dsum_bytes = 0;
    floatX* fp4_bufs[] = {attn_state.fp4_ds, attn_state.fp4_ds_rows, attn_state.fp4_ds_cols};
    for (floatX* b : fp4_bufs) if (b) cuda_check(cudaFree(b));
    if (attn_state.fp4_ds_scalars) cuda_check(cudaFree(attn_state.fp4_ds_scalars));
    int force_own = attn_state.force_own, verbose = attn_state.verbose, nondet = attn_state.nondeterministic;
    memset(&attn_state, 0, sizeof(attn_state));
    attn_state.force_own = force_own;     // settings survive a destroy/init cycle
    attn_state.verbose = verbose;
    attn_state.nondeterministic = nondet;
}

// 1: use the own kernels from now on (for tests and benchmarks); 0: back to cuDNN if it is usable.
static void attention_force_own_kernel(int force) {
    attention_init();
    attn_state.force_own = force;
}

// The cuDNN library's version at run time (0 when built without cuDNN), for the run's log.
size_t attention_cudnn_version(void) {
#ifdef ENABLE_CUDNN
    return cudnnGetVersion();
#else
    return 0;
#endif
}

const char* attention_backend_name(void) {
    attention_init();
    return attn_state.use_cudnn && !attn_state.force_own ? "cudnn" : "own kernel";
}

// Why cuDNN is not the backend ("" while it is, or before anything was tried).
static const char* attention_cudnn_unavailable_reason(void) { return attn_state.why_not_cudnn; }

static void attn_check_shape(const char* fn, AttnShape sh) {
    fail_if(sh.B <= 0 || sh.T <= 0 || sh.NH <= 0 || sh.KVH <= 0 || sh.HS <= 0, "%s: bad shape B=%d T=%d NH=%d KVH=%d HS=%d",
            fn, sh.B, sh.T, sh.NH, sh.KVH, sh.HS);
    fail_if(sh.NH % sh.KVH != 0, "%s: %d query heads do not split into groups over %d key/value heads; "
            "choose KVH (--kv-heads) dividing NH", fn, sh.NH, sh.KVH);
    fail_if(!attn_own_supported_head_size(sh.HS), "%s: head size %d is not supported (32, 64 or 128); "
            "choose channels and heads so that C / NH is one of those", fn, sh.HS);
}

#ifdef ENABLE_CUDNN
static void attn_give_up_cudnn(const char* why) {
    attn_state.use_cudnn = 0;
    snprintf(attn_state.why_not_cudnn, sizeof(attn_state.why_not_cudnn), "%s", why);
    printf("attention: cuDNN disabled, using the own kernel from now on: %s\n", why);
}

static void attn_cudnn_reserve_workspace(size_t bytes) {
    if (bytes <= attn_state.workspace_bytes) return;
    if (attn_state.workspace) cuda_check(cudaFree(attn_state.workspace));   // synchronizes: safe to free
    cuda_malloc(&attn_state.workspace, bytes);
    attn_state.workspace_bytes = bytes;
}

// The forward and backward plans for this shape, built together the first time the shape is seen
// (so a shape either runs on cuDNN both ways or not at all). NULL when cuDNN cannot do it.
static AttnCudnnPlan* attn_cudnn_plan_for(AttnShape sh, int backward) {
    const int B = sh.B, T = sh.T, NH = sh.NH, KVH = sh.KVH, HS = sh.HS;
    for (int i = 0; i < attn_state.n_plans; i++) {
        AttnCudnnPlan* p = attn_state.plans[i];
        if (p->B == B && p->T == T && p->NH == NH && p->KVH == KVH && p->HS == HS && p->backward == backward &&
            p->deterministic == !attn_state.nondeterministic) return p;
    }
    if (attn_state.n_plans + 2 > ATTN_MAX_PLANS) {
        attn_give_up_cudnn("more than 8 distinct attention shapes (raise ATTN_MAX_PLANS)");
        return NULL;
    }
    AttnCudnnPlan* fwd = (AttnCudnnPlan*)xmalloc(sizeof(AttnCudnnPlan));
    AttnCudnnPlan* bwd = (AttnCudnnPlan*)xmalloc(sizeof(AttnCudnnPlan));
    attn_cudnn_plan_init(fwd, B, T, NH, KVH, HS, 0, attn_state.verbose);
    attn_cudnn_plan_init(bwd, B, T, NH, KVH, HS, 1, attn_state.verbose);
    fwd->deterministic = bwd->deterministic = !attn_state.nondeterministic;
    bool ok_f = attn_cudnn_build_forward(fwd, attn_state.handle);
    bool ok_b = ok_f && attn_cudnn_build_backward(bwd, attn_state.handle);
    if (ok_f && !ok_b && KVH != NH) {
        // GQA: cudnn-frontend has typed the per-query-head dK, dV (before the head-group sum) as BF16
        // (Q's type) in some releases and FP32 in others; an engine that wants the other one gets it.
        char first[1536];
        snprintf(first, sizeof(first), "%s", bwd->err);
        if (attn_state.verbose) printf("attention: cuDNN GQA backward with BF16 per-head dK/dV failed (%s); trying FP32\n", first);
        attn_cudnn_plan_destroy(bwd);
        attn_cudnn_plan_init(bwd, B, T, NH, KVH, HS, 1, attn_state.verbose);
        bwd->deterministic = !attn_state.nondeterministic;
        bwd->fullhead_type = CUDNN_DATA_FLOAT;
        ok_b = attn_cudnn_build_backward(bwd, attn_state.handle);
        if (!ok_b) {
            char both[1536];
            snprintf(both, sizeof(both), "with BF16 per-head dK/dV: %.700s; with FP32: %.700s", first, bwd->err);
            snprintf(bwd->err, sizeof(bwd->err), "%s", both);
        }
    }
    if (!ok_f || !ok_b) {
        char why[2048];
        snprintf(why, sizeof(why), "%s%s graph for B=%d T=%d NH=%d KVH=%d HS=%d: %s", ok_f ? "backward" : "forward",
                 ok_f && bwd->deterministic ? " (deterministic)" : "", B, T, NH, KVH, HS, ok_f ? bwd->err : fwd->err);
        attn_cudnn_plan_destroy(fwd);
        attn_cudnn_plan_destroy(bwd);
        free(fwd);
        free(bwd);
        attn_give_up_cudnn(why);
        return NULL;
    }
    if (attn_state.verbose) {
        printf("attention: cuDNN plans for B=%d T=%d NH=%d KVH=%d HS=%d: forward %lld ops, workspace %lld B, %s\n",
               B, T, NH, KVH, HS, (long long)fwd->n_ops, (long long)fwd->plan_workspace, fwd->engine);
        printf("attention: cuDNN plans for B=%d T=%d NH=%d KVH=%d HS=%d: backward (%s) %lld ops, workspace %lld B (+%lld ours), %s\n",
               B, T, NH, KVH, HS, bwd->deterministic ? "deterministic" : "atomic dQ", (long long)bwd->n_ops,
               (long long)bwd->plan_workspace, (long long)bwd->extra_workspace, bwd->engine);
    }
    int64_t need = attn_cudnn_workspace_needed(fwd);
    if (attn_cudnn_workspace_needed(bwd) > need) need = attn_cudnn_workspace_needed(bwd);
    attn_cudnn_reserve_workspace((size_t)need);
    attn_state.plans[attn_state.n_plans++] = fwd;
    attn_state.plans[attn_state.n_plans++] = bwd;
    return backward ? bwd : fwd;
}

// Element offsets of K and V inside a token's row of qkv (and of dK, dV inside dqkv): after the NH q
// heads, and after the KVH k heads (KVH == NH: C and 2 C).
static size_t attn_k_offset(AttnShape sh) { return (size_t)sh.NH * sh.HS; }
static size_t attn_v_offset(AttnShape sh) { return (size_t)(sh.NH + sh.KVH) * sh.HS; }

static bool attn_cudnn_forward(floatX* out, float* stats, const floatX* qkv, AttnShape sh, cudaStream_t stream) {
    AttnCudnnPlan* p = attn_cudnn_plan_for(sh, 0);
    if (!p) return false;
    int64_t uids[] = {ATTN_UID_Q, ATTN_UID_K, ATTN_UID_V, ATTN_UID_O, ATTN_UID_STATS, ATTN_UID_SCALE, ATTN_UID_NEG_BIG};
    void* ptrs[] = {(void*)qkv, (void*)(qkv + attn_k_offset(sh)), (void*)(qkv + attn_v_offset(sh)), out, stats, &p->scale, &p->neg_big};
    char err[1536];
    if (attn_cudnn_execute(p, attn_state.handle, 7, uids, ptrs, attn_state.workspace, stream, err, sizeof(err))) return true;
    char why[2048];
    snprintf(why, sizeof(why), "executing the forward plan (B=%d T=%d NH=%d KVH=%d HS=%d): %s", sh.B, sh.T, sh.NH, sh.KVH, sh.HS, err);
    attn_give_up_cudnn(why);
    return false;
}

static bool attn_cudnn_backward(floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* out, const float* stats,
                                AttnShape sh, cudaStream_t stream) {
    AttnCudnnPlan* p = attn_cudnn_plan_for(sh, 1);
    if (!p) return false;
    const size_t ko = attn_k_offset(sh), vo = attn_v_offset(sh);
    char* ws = (char*)attn_state.workspace;
    void* dsum = ws + attn_cudnn_sum_offset(p);
    void* dqacc = ws + attn_cudnn_acc_offset(p);
    if (!p->deterministic && cudnnGetVersion() < 90600)   // older cuDNN expects the dQ accumulator zeroed by the caller
        cuda_check(cudaMemsetAsync(dqacc, 0, (size_t)sh.B * sh.NH * sh.T * sh.HS * sizeof(float), stream));
    // the variant pack: the dQ accumulator (last) only where the graph has one
    int64_t uids[] = {ATTN_UID_Q, ATTN_UID_K, ATTN_UID_V, ATTN_UID_O, ATTN_UID_STATS, ATTN_UID_DO,
                      ATTN_UID_DQ, ATTN_UID_DK, ATTN_UID_DV, ATTN_UID_SOFTMAX_SUM,
                      ATTN_UID_SCALE, ATTN_UID_NEG_BIG, ATTN_UID_ONE, ATTN_UID_DQ_ACCUM};
    void* ptrs[] = {(void*)qkv, (void*)(qkv + ko), (void*)(qkv + vo), (void*)out, (void*)stats, (void*)dout,
                    dqkv, dqkv + ko, dqkv + vo, dsum, &p->scale, &p->neg_big, &p->one, dqacc};
    const int n = p->deterministic ? 13 : 14;
    char err[1536];
    if (attn_cudnn_execute(p, attn_state.handle, n, uids, ptrs, attn_state.workspace, stream, err, sizeof(err))) return true;
    char why[2048];
    snprintf(why, sizeof(why), "executing the backward plan (B=%d T=%d NH=%d KVH=%d HS=%d): %s", sh.B, sh.T, sh.NH, sh.KVH, sh.HS, err);
    attn_give_up_cudnn(why);
    return false;
}
#endif  // ENABLE_CUDNN

// out (B, T, NH, HS) and stats (B, NH, T) from qkv (B, T, NH + 2 KVH, HS).
void attention_forward(floatX* out, float* stats, const floatX* qkv, AttnShape sh, cudaStream_t stream) {
    attention_init();
    attn_check_shape("attention_forward", sh);
#ifdef ENABLE_CUDNN
    if (attn_state.use_cudnn && !attn_state.force_own && attn_cudnn_forward(out, stats, qkv, sh, stream)) return;
#endif
    attn_own_forward(out, stats, qkv, sh.B, sh.T, sh.NH, sh.KVH, sh.HS, stream);
}

// The own backward's dsum scratch, grown to fit sh.
static void attn_reserve_dsum(AttnShape sh) {
    const size_t need = (size_t)sh.B * sh.NH * sh.T * sizeof(float);
    if (need > attn_state.dsum_bytes) {
        if (attn_state.dsum) cuda_check(cudaFree(attn_state.dsum));
        cuda_malloc(&attn_state.dsum, need);
        attn_state.dsum_bytes = need;
    }
}

// dqkv (B, T, NH + 2 KVH, HS), every element overwritten, from dout and the forward's qkv, out, stats.
void attention_backward(floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* out, const float* stats,
                        AttnShape sh, cudaStream_t stream) {
    attention_init();
    attn_check_shape("attention_backward", sh);
#ifdef ENABLE_CUDNN
    if (attn_state.use_cudnn && !attn_state.force_own && attn_cudnn_backward(dqkv, dout, qkv, out, stats, sh, stream)) return;
#endif
    attn_reserve_dsum(sh);
    const AttnBackwardIn in = {dout, qkv, out, stats};
    attn_own_backward(dqkv, in, attn_state.dsum, sh.B, sh.T, sh.NH, sh.KVH, sh.HS, stream);
}

// ----------------------------------------------------------------------------------------------
// FP4 attention

// How FP4 attention quantizes, from the FP4 module (the trainer fills it from fp4/attention_fp4.cuh). A NULL
// function leaves that tensor in BF16: qkv NULL runs the own kernels on qkv itself; ds NULL keeps the fused backward.
typedef struct {
    const void* ctx;   // the module's configuration (AttnFp4), passed back to each function
    // Q, K, V of qkv (B, T, NH + 2 KVH, HS) into fake (the same layout); amax[3], dec[3]: device floats per part
    void (*qkv)(const void* ctx, const floatX* qkv, floatX* fake, float* amax, float* dec, AttnShape sh, uint64_t key,
                cudaStream_t stream);
    // dS (B NH T rows of T) into rows (dQ's copy) and cols (dK's); amax[2], dec[2]: device floats. Returns 1 when
    // the rows copy serves dK as well (a square 2D tile is its own transpose) and cols was not written.
    int (*ds)(const void* ctx, const floatX* ds, floatX* rows, floatX* cols, float* amax, float* dec, AttnShape sh,
               uint64_t key, cudaStream_t stream);
    int dropin;        // 1: the backward reads qkv (BF16), not the forward's copy, and keeps dS in BF16 (Attn-QAT's
                       // "drop-in" control: the forward's lse and O with other scores; an ablation, unstable)
} AttnQuantizer;

// One layer's quantized Q, K, V: the copy the forward writes and both passes read.
typedef struct {
    floatX* qkv;     // (B, T, NH + 2 KVH, HS): fake values (code * block scale), laid out as qkv
    float* dec;      // device, 3 floats: the tensor dequantization factors of Q, K, V
    float* amax;     // device, 3 floats: their amax (for the log)
} AttnFp4Copy;

// out, stats as attention_forward, on the own kernels, with Q, K, V quantized into cp (q->qkv NULL: qkv as is).
// key: the call's SR key.
void attention_fp4_forward(floatX* out, float* stats, const floatX* qkv, AttnFp4Copy cp, AttnShape sh,
                           const AttnQuantizer* q, uint64_t key, cudaStream_t stream) {
    attention_init();
    attn_check_shape("attention_fp4_forward", sh);
    if (!q->qkv) {
        attn_own_forward(out, stats, qkv, sh.B, sh.T, sh.NH, sh.KVH, sh.HS, stream);
        return;
    }
    q->qkv(q->ctx, qkv, cp.qkv, cp.amax, cp.dec, sh, key, stream);
    attn_own_forward(out, stats, cp.qkv, sh.B, sh.T, sh.NH, sh.KVH, sh.HS, stream, cp.dec);
}

static void attn_fp4_reserve_ds(size_t elems) {
    if (elems <= attn_state.fp4_ds_elems) return;
    floatX** bufs[] = {&attn_state.fp4_ds, &attn_state.fp4_ds_rows, &attn_state.fp4_ds_cols};
    for (floatX** b : bufs) {
        if (*b) cuda_check(cudaFree(*b));   // synchronizes: safe to free
        cuda_malloc(b, elems * sizeof(floatX));
    }
    if (!attn_state.fp4_ds_scalars) cuda_malloc(&attn_state.fp4_ds_scalars, 4 * sizeof(float));
    attn_state.fp4_ds_elems = elems;
}

// dqkv as attention_backward, from the forward's copy cp (qkv itself when q->qkv is NULL). With q->ds, dS is
// materialised (B, NH, T, T) in BF16, quantized, and dQ, dK read its copies; else the fused backward.
void attention_fp4_backward(floatX* dqkv, const floatX* dout, const floatX* qkv, AttnFp4Copy cp, const floatX* out,
                            const float* stats, AttnShape sh, const AttnQuantizer* q, uint64_t key, cudaStream_t stream) {
    attention_init();
    attn_check_shape("attention_fp4_backward", sh);
    attn_reserve_dsum(sh);
    const int copy = q->qkv && !q->dropin;
    const AttnBackwardIn in = {dout, copy ? cp.qkv : qkv, out, stats};
    AttnFp4Io io = {};
    io.qkv_dec = copy ? cp.dec : NULL;
    attn_own_dsum(attn_state.dsum, in, sh.B, sh.T, sh.NH, sh.HS, stream);
    if (q->ds && !q->dropin) {
        attn_fp4_reserve_ds((size_t)sh.B * sh.NH * sh.T * sh.T);
        attn_own_backward_ds(attn_state.fp4_ds, in, attn_state.dsum, sh.B, sh.T, sh.NH, sh.KVH, sh.HS, io.qkv_dec, stream);
        float* amax = attn_state.fp4_ds_scalars;
        float* dec = attn_state.fp4_ds_scalars + 2;
        const int one_copy = q->ds(q->ctx, attn_state.fp4_ds, attn_state.fp4_ds_rows, attn_state.fp4_ds_cols, amax, dec,
                                   sh, key, stream);
        io.ds_rows = attn_state.fp4_ds_rows;
        io.ds_cols = one_copy ? attn_state.fp4_ds_rows : attn_state.fp4_ds_cols;
        io.ds_dec = dec;
    }
    attn_own_backward_grads(dqkv, in, attn_state.dsum, sh.B, sh.T, sh.NH, sh.KVH, sh.HS, io, stream);
}

// For tests: the last FP4 backward's dS (B, NH, T, T) BF16, the copies dQ (rows) and dK (cols; unwritten when the
// quantizer returned one copy) read, and the device
// floats amax[2], dec[2] of those copies (rows, cols). NULLs before any quantized-dS backward.
static void attention_fp4_ds_buffers(const floatX** ds, const floatX** rows, const floatX** cols, const float** scalars) {
    *ds = attn_state.fp4_ds;
    *rows = attn_state.fp4_ds_rows;
    *cols = attn_state.fp4_ds_cols;
    *scalars = attn_state.fp4_ds_scalars;
}
