// attention_cudnn.cuh: causal attention through cuDNN's fused flash-attention engines, with the graph
// built node by node through the backend ("graph") API, since the cudnn-frontend headers are not
// available. Only compiled with -DENABLE_CUDNN.
// defines: AttnCudnnPlan, attn_cudnn_build_forward(), attn_cudnn_build_backward(),
//          attn_cudnn_execute(), attn_cudnn_plan_destroy(), attn_cudnn_check()
// cuDNN recognizes scaled-dot-product attention by the shape of the graph, so the graphs below
// follow the operation pattern that cuDNN's documentation and frontend describe for SDPA:
//   forward:  S = Q.K^T; S *= scale; causal mask (GEN_INDEX row, col; row >= col; BINARY_SELECT
//             with the lowest float); M = rowmax S; E = exp(S - M); Z = rowsum E;
//             stats = M + log Z; P = E / Z (BF16); O = P.V
//   backward: sum = rowsum(dO * O) * 1 (FP32, kept in our workspace); S as above; E = exp(S - stats);
//             dV = E^T.dO; dP = dO.V^T; dS = (dP * 1 - sum) * E * scale; dK = dS^T.Q;
//             dQ = dS.K: deterministic (the default), the product written straight to dQ (BF16), which is
//             how the backend is asked for its dP-workspace engine (cudnn-frontend's
//             set_deterministic_algorithm(true) builds the same graph; it needs about B*NH*T^2*2 bytes of
//             workspace, T rounded up to 64); or, with deterministic off, dQacc = dS.K (FP32, a non-virtual
//             tensor in our workspace: the backend then sums dQ with atomics, in no fixed order) and
//             dQ = identity(dQacc) (BF16)
// Grouped-query attention (KVH key/value heads < NH query heads, NH % KVH == 0): K and V (and K^T,
// V^T) are [B, KVH, ...] tensors while Q, O, dO, stats and the scores are [B, NH, ...]; the fused
// engine maps query head h to key/value head h / (NH / KVH). The backward computes dK and dV per query
// head into virtual [B, NH, T, HS] tensors and reduces them (ADD) onto the KVH heads of dK and dV,
// the pattern cudnn-frontend's SDPA backward node builds ("dK_fullhead", "dV_fullhead"). With
// KVH == NH the graphs are exactly the multi-head graphs (no reduction node).
// Intermediates are virtual tensors (never in memory); K and V enter as transposed views of the
// qkv buffer, so no copies. Every failing call is reported with the call, the descriptor, the
// status string and cudnnGetLastErrorString, so one run on the GPU machine says what went wrong.
#pragma once
#ifdef ENABLE_CUDNN
#include <cudnn.h>
#include "llmc/base/cuda_common.cuh"

#define ATTN_CUDNN_MAX_DESCS 160
#define ATTN_CUDNN_MAX_OPS 48

// Unique ids of the tensors the caller supplies (the variant pack); virtual ones count from 100.
enum {
    ATTN_UID_Q = 1, ATTN_UID_K, ATTN_UID_V, ATTN_UID_O, ATTN_UID_STATS, ATTN_UID_DO, ATTN_UID_DQ,
    ATTN_UID_DK, ATTN_UID_DV, ATTN_UID_SOFTMAX_SUM, ATTN_UID_DQ_ACCUM,
    ATTN_UID_SCALE, ATTN_UID_NEG_BIG, ATTN_UID_ONE,   // by-value scalars
    ATTN_UID_FIRST_VIRTUAL = 100,
};

typedef struct {
    int B, T, NH, KVH, HS, backward;
    int deterministic;             // backward: dQ = dS.K written directly (see above), not through atomics
    cudnnDataType_t fullhead_type; // GQA backward: type of the per-query-head dK, dV before the head reduction
    cudnnBackendDescriptor_t plan;
    int64_t plan_workspace;        // bytes cuDNN's plan asks for
    int64_t extra_workspace;       // bytes of our own FP32 tensors (backward: softmax sum, dQ accumulator)
    float scale, neg_big, one;     // by-value scalars; their addresses go into the variant pack
    char engine[256];              // what cuDNN picked (for the verbose log)
    // the graph: every descriptor made for it, destroyed with it
    cudnnBackendDescriptor_t descs[ATTN_CUDNN_MAX_DESCS];
    int n_descs;
    cudnnBackendDescriptor_t ops[ATTN_CUDNN_MAX_OPS];
    int n_ops;
    int64_t next_uid;
    int failed;
    char err[1536];                // the first failure, in words
    int verbose;
} AttnCudnnPlan;

static void attn_cudnn_error(AttnCudnnPlan* p, cudnnStatus_t s, const char* call, const char* what) {
    if (p->failed) return;
    p->failed = 1;
    char last[1024] = "";
#if CUDNN_VERSION >= 90000
    cudnnGetLastErrorString(last, sizeof(last));
#endif
    snprintf(p->err, sizeof(p->err), "%s(%s) -> %s (%d)%s%s", call, what, cudnnGetErrorString(s), (int)s,
             last[0] ? "; cuDNN says: " : "", last);
    for (char* c = p->err; *c; c++) if (*c == '\n') *c = ' ';
}
// Each helper is a no-op once the build has failed, so the build code reads straight down.
static bool attn_cudnn_ok(AttnCudnnPlan* p, cudnnStatus_t s, const char* call, const char* what) {
    if (s == CUDNN_STATUS_SUCCESS) return true;
    attn_cudnn_error(p, s, call, what);
    return false;
}
static cudnnBackendDescriptor_t attn_cudnn_new(AttnCudnnPlan* p, cudnnBackendDescriptorType_t type, const char* what) {
    if (p->failed) return NULL;
    if (p->n_descs == ATTN_CUDNN_MAX_DESCS) {
        p->failed = 1;
        snprintf(p->err, sizeof(p->err), "too many descriptors at %s (raise ATTN_CUDNN_MAX_DESCS)", what);
        return NULL;
    }
    cudnnBackendDescriptor_t d = NULL;
    if (!attn_cudnn_ok(p, cudnnBackendCreateDescriptor(type, &d), "cudnnBackendCreateDescriptor", what)) return NULL;
    p->descs[p->n_descs++] = d;
    return d;
}
static void attn_cudnn_set(AttnCudnnPlan* p, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                           cudnnBackendAttributeType_t type, int64_t count, const void* value, const char* what) {
    if (p->failed) return;
    char buf[160];
    snprintf(buf, sizeof(buf), "%s, attribute %d", what, (int)name);
    attn_cudnn_ok(p, cudnnBackendSetAttribute(d, name, type, count, value), "cudnnBackendSetAttribute", buf);
}
static void attn_cudnn_set_desc(AttnCudnnPlan* p, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                                cudnnBackendDescriptor_t value, const char* what) {
    attn_cudnn_set(p, d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value, what);
}
static void attn_cudnn_finalize(AttnCudnnPlan* p, cudnnBackendDescriptor_t d, const char* what) {
    if (p->failed) return;
    attn_cudnn_ok(p, cudnnBackendFinalize(d), "cudnnBackendFinalize", what);
}

// 4-D tensor. by_value: a host scalar passed in the variant pack.
static cudnnBackendDescriptor_t attn_cudnn_tensor(AttnCudnnPlan* p, const char* what, int64_t uid, cudnnDataType_t dtype,
                                                  const int64_t dims[4], const int64_t strides[4], bool is_virtual, bool by_value) {
    cudnnBackendDescriptor_t t = attn_cudnn_new(p, CUDNN_BACKEND_TENSOR_DESCRIPTOR, what);
    const int64_t alignment = 16;
    attn_cudnn_set(p, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dtype, what);
    attn_cudnn_set(p, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, what);
    attn_cudnn_set(p, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides, what);
    attn_cudnn_set(p, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, what);
    attn_cudnn_set(p, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment, what);
    if (is_virtual) attn_cudnn_set(p, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, what);
    if (by_value) attn_cudnn_set(p, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, what);
    attn_cudnn_finalize(p, t, what);
    return t;
}
static cudnnBackendDescriptor_t attn_cudnn_virtual(AttnCudnnPlan* p, const char* what, cudnnDataType_t dtype,
                                                   const int64_t dims[4], const int64_t strides[4]) {
    return attn_cudnn_tensor(p, what, p->next_uid++, dtype, dims, strides, true, false);
}
static cudnnBackendDescriptor_t attn_cudnn_scalar(AttnCudnnPlan* p, const char* what, int64_t uid) {
    const int64_t one[4] = {1, 1, 1, 1};
    return attn_cudnn_tensor(p, what, uid, CUDNN_DATA_FLOAT, one, one, false, true);
}

static void attn_cudnn_add_op(AttnCudnnPlan* p, cudnnBackendDescriptor_t op, const char* what) {
    if (p->failed) return;
    if (p->n_ops == ATTN_CUDNN_MAX_OPS) {
        p->failed = 1;
        snprintf(p->err, sizeof(p->err), "too many operations at %s (raise ATTN_CUDNN_MAX_OPS)", what);
        return;
    }
    p->ops[p->n_ops++] = op;
}

// y = mode(x [, b [, t]]). compute: the math precision (FLOAT, or INT32 / BOOLEAN for index logic).
static void attn_cudnn_pointwise(AttnCudnnPlan* p, const char* what, cudnnPointwiseMode_t mode, cudnnDataType_t compute,
                                 cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
                                 cudnnBackendDescriptor_t y, int64_t axis) {
    cudnnBackendDescriptor_t pw = attn_cudnn_new(p, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, what);
    attn_cudnn_set(p, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, what);
    attn_cudnn_set(p, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &compute, what);
    if (axis >= 0) attn_cudnn_set(p, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, what);
    attn_cudnn_finalize(p, pw, what);
    cudnnBackendDescriptor_t op = attn_cudnn_new(p, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, what);
    attn_cudnn_set_desc(p, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw, what);
    attn_cudnn_set_desc(p, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x, what);
    if (b) attn_cudnn_set_desc(p, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b, what);
    if (t) attn_cudnn_set_desc(p, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t, what);
    attn_cudnn_set_desc(p, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y, what);
    const float alpha = 1.0f;
    attn_cudnn_set(p, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &alpha, what);
    attn_cudnn_set(p, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &alpha, what);
    attn_cudnn_finalize(p, op, what);
    attn_cudnn_add_op(p, op, what);
}
static void attn_cudnn_matmul(AttnCudnnPlan* p, const char* what, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                              cudnnBackendDescriptor_t c) {
    cudnnBackendDescriptor_t mm = attn_cudnn_new(p, CUDNN_BACKEND_MATMUL_DESCRIPTOR, what);
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    attn_cudnn_set(p, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, what);
    attn_cudnn_finalize(p, mm, what);
    cudnnBackendDescriptor_t op = attn_cudnn_new(p, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, what);
    attn_cudnn_set_desc(p, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a, what);
    attn_cudnn_set_desc(p, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b, what);
    attn_cudnn_set_desc(p, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c, what);
    attn_cudnn_set_desc(p, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, mm, what);
    attn_cudnn_finalize(p, op, what);
    attn_cudnn_add_op(p, op, what);
}
// Reduces x over the axes where y's extent is 1 (and, in the GQA backward, over groups of NH/KVH heads
// onto KVH: the head-group reduction the fused SDPA engine recognizes).
static void attn_cudnn_reduction(AttnCudnnPlan* p, const char* what, cudnnReduceTensorOp_t mode,
                                 cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t rd = attn_cudnn_new(p, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, what);
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    attn_cudnn_set(p, rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode, what);
    attn_cudnn_set(p, rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, what);
    attn_cudnn_finalize(p, rd, what);
    cudnnBackendDescriptor_t op = attn_cudnn_new(p, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, what);
    attn_cudnn_set_desc(p, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x, what);
    attn_cudnn_set_desc(p, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y, what);
    attn_cudnn_set_desc(p, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, rd, what);
    attn_cudnn_finalize(p, op, what);
    attn_cudnn_add_op(p, op, what);
}
// A new view (here: a transpose) of x.
static void attn_cudnn_reshape(AttnCudnnPlan* p, const char* what, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t op = attn_cudnn_new(p, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, what);
    attn_cudnn_set_desc(p, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x, what);
    attn_cudnn_set_desc(p, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y, what);
    attn_cudnn_finalize(p, op, what);
    attn_cudnn_add_op(p, op, what);
}

// The score matrix with the causal mask applied: where row < col, the lowest float.
static cudnnBackendDescriptor_t attn_cudnn_causal_mask(AttnCudnnPlan* p, cudnnBackendDescriptor_t s,
                                                       const int64_t sdims[4], const int64_t sstr[4]) {
    cudnnBackendDescriptor_t row = attn_cudnn_virtual(p, "causal row index", CUDNN_DATA_INT32, sdims, sstr);
    cudnnBackendDescriptor_t col = attn_cudnn_virtual(p, "causal col index", CUDNN_DATA_INT32, sdims, sstr);
    cudnnBackendDescriptor_t keep = attn_cudnn_virtual(p, "causal keep", CUDNN_DATA_BOOLEAN, sdims, sstr);
    cudnnBackendDescriptor_t out = attn_cudnn_virtual(p, "masked scores", CUDNN_DATA_FLOAT, sdims, sstr);
    cudnnBackendDescriptor_t neg = attn_cudnn_scalar(p, "mask value", ATTN_UID_NEG_BIG);
    attn_cudnn_pointwise(p, "gen row index", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, s, NULL, NULL, row, 2);
    attn_cudnn_pointwise(p, "gen col index", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, s, NULL, NULL, col, 3);
    attn_cudnn_pointwise(p, "row >= col", CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, NULL, keep, -1);
    attn_cudnn_pointwise(p, "causal select", CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, s, neg, keep, out, -1);
    return out;
}

// Makes the operation graph of p->ops, asks the heuristics for engine configs, and keeps the first
// one that finalizes into an execution plan. Falls back to the fallback heuristics and then to every
// engine by global index. Tried-and-failed configs are logged when p->verbose.
static bool attn_cudnn_try_config(AttnCudnnPlan* p, cudnnHandle_t handle, cudnnBackendDescriptor_t cfg, const char* label) {
    cudnnBackendDescriptor_t plan = NULL;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(plan);
    if (s != CUDNN_STATUS_SUCCESS) {
        if (p->verbose) {
            char last[512] = "";
#if CUDNN_VERSION >= 90000
            cudnnGetLastErrorString(last, sizeof(last));
#endif
            for (char* c = last; *c; c++) if (*c == '\n') *c = ' ';
            printf("attention: cuDNN %s: execution plan not built: %s %s\n", label, cudnnGetErrorString(s), last);
        }
        if (plan) cudnnBackendDestroyDescriptor(plan);
        return false;
    }
    int64_t ws = 0, n = 0;
    cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws);
    p->plan = plan;
    p->plan_workspace = ws;
    char json[4096] = "";
    int64_t got = 0;
    if (cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
                                 sizeof(json) - 1, &got, json) == CUDNN_STATUS_SUCCESS) {
        json[got < (int64_t)sizeof(json) ? got : (int64_t)sizeof(json) - 1] = 0;
    } else {
        json[0] = 0;
    }
    snprintf(p->engine, sizeof(p->engine), "%s%s%.200s", label, json[0] ? ": " : "", json);
    return true;
}

static bool attn_cudnn_try_heuristics(AttnCudnnPlan* p, cudnnHandle_t handle, cudnnBackendDescriptor_t graph,
                                      cudnnBackendHeurMode_t mode, const char* mode_name) {
    cudnnBackendDescriptor_t heur = NULL;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(heur);
    int64_t count = 0;
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL);
    if (s != CUDNN_STATUS_SUCCESS) {
        attn_cudnn_error(p, s, "engine heuristics", mode_name);   // recorded, but we keep trying
        p->failed = 0;
        if (p->verbose) printf("attention: cuDNN heuristics %s failed: %s\n", mode_name, p->err);
        if (heur) cudnnBackendDestroyDescriptor(heur);
        return false;
    }
    if (p->verbose) printf("attention: cuDNN heuristics %s: %lld engine configs\n", mode_name, (long long)count);
    bool found = false;
    if (count > 0) {
        cudnnBackendDescriptor_t* cfgs = (cudnnBackendDescriptor_t*)xmalloc((size_t)count * sizeof(*cfgs));
        int64_t made = 0;
        for (; made < count; made++)
            if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfgs[made]) != CUDNN_STATUS_SUCCESS) break;
        int64_t got = 0;
        s = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, made, &got, cfgs);
        if (s != CUDNN_STATUS_SUCCESS && p->verbose) printf("attention: cuDNN heuristics %s: reading results: %s\n", mode_name, cudnnGetErrorString(s));
        for (int64_t i = 0; s == CUDNN_STATUS_SUCCESS && i < got && !found; i++) {
            char label[64];
            snprintf(label, sizeof(label), "heuristics %s config %lld", mode_name, (long long)i);
            found = attn_cudnn_try_config(p, handle, cfgs[i], label);
        }
        for (int64_t i = 0; i < made; i++) cudnnBackendDestroyDescriptor(cfgs[i]);
        free(cfgs);
    }
    cudnnBackendDestroyDescriptor(heur);
    return found;
}

static bool attn_cudnn_try_all_engines(AttnCudnnPlan* p, cudnnHandle_t handle, cudnnBackendDescriptor_t graph) {
    int64_t count = 0, n = 0;
    if (cudnnBackendGetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64, 1, &n, &count) != CUDNN_STATUS_SUCCESS)
        return false;
    if (p->verbose) printf("attention: cuDNN: trying all %lld engines by index\n", (long long)count);
    for (int64_t i = 0; i < count; i++) {
        cudnnBackendDescriptor_t engine = NULL, cfg = NULL;
        bool ok = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine) == CUDNN_STATUS_SUCCESS &&
                  cudnnBackendSetAttribute(engine, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph) == CUDNN_STATUS_SUCCESS &&
                  cudnnBackendSetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &i) == CUDNN_STATUS_SUCCESS &&
                  cudnnBackendFinalize(engine) == CUDNN_STATUS_SUCCESS &&
                  cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg) == CUDNN_STATUS_SUCCESS &&
                  cudnnBackendSetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &engine) == CUDNN_STATUS_SUCCESS &&
                  cudnnBackendFinalize(cfg) == CUDNN_STATUS_SUCCESS;
        char label[64];
        snprintf(label, sizeof(label), "engine %lld", (long long)i);
        bool found = ok && attn_cudnn_try_config(p, handle, cfg, label);
        if (cfg) cudnnBackendDestroyDescriptor(cfg);
        if (engine) cudnnBackendDestroyDescriptor(engine);
        if (found) return true;
    }
    return false;
}

static bool attn_cudnn_make_plan(AttnCudnnPlan* p, cudnnHandle_t handle) {
    if (p->failed) return false;
    cudnnBackendDescriptor_t graph = attn_cudnn_new(p, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
    attn_cudnn_set(p, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "operation graph");
    attn_cudnn_set(p, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, p->n_ops, p->ops, "operation graph");
    attn_cudnn_finalize(p, graph, "operation graph");
    if (p->failed) return false;
    if (attn_cudnn_try_heuristics(p, handle, graph, CUDNN_HEUR_MODE_A, "A")) return true;
    if (attn_cudnn_try_heuristics(p, handle, graph, CUDNN_HEUR_MODE_FALLBACK, "fallback")) return true;
    if (attn_cudnn_try_all_engines(p, handle, graph)) return true;
    if (!p->failed) {
        p->failed = 1;
        snprintf(p->err, sizeof(p->err), "no cuDNN engine accepts this graph (operation graph finalized; heuristics A, "
                 "fallback and all engines by index tried; set LLMC_ATTENTION_VERBOSE=1 for each engine's reason)");
    }
    return false;
}

static void attn_cudnn_plan_init(AttnCudnnPlan* p, int B, int T, int NH, int KVH, int HS, int backward, int verbose) {
    memset(p, 0, sizeof(*p));
    p->B = B; p->T = T; p->NH = NH; p->KVH = KVH; p->HS = HS; p->backward = backward; p->verbose = verbose;
    p->fullhead_type = CUDNN_DATA_BFLOAT16;   // what cudnn-frontend uses (Q's type); FLOAT is the retry
    p->next_uid = ATTN_UID_FIRST_VIRTUAL;
    p->scale = 1.0f / sqrtf((float)HS);
    p->neg_big = -3.4028234663852886e38f;   // lowest float: exp() of it minus the row max is 0
    p->one = 1.0f;
}

// The shapes and strides, in cuDNN's [batch, head, row, col] order, of views into our buffers.
// W = (H + 2 KVH) D is the width of a token's row of qkv; with KVH == H, W = 3 C as before GQA.
typedef struct {
    int64_t q[4], q_str[4];         // Q (and dQ): [B, H, T, D] inside (B, T, H + 2 KVH, D)
    int64_t kv[4], kv_str[4];       // K, V (and dK, dV): [B, KVH, T, D] inside the same rows
    int64_t kt[4], kt_str[4];       // K^T (and V^T): [B, KVH, D, T]
    int64_t o_str[4];               // O, dO: [B, H, T, D] inside (B, T, H, D)
    int64_t row[4], row_str[4];     // per-row values (stats): [B, H, T, 1]
    int64_t s[4], s_str[4];         // scores: [B, H, T, T]
    int64_t st_str[4];              // scores transposed (a view of the same [B, H, T, T])
    int64_t acc_str[4];             // [B, H, T, D], packed: dQ accumulator; GQA: dK, dV per query head
} AttnCudnnShapes;

static AttnCudnnShapes attn_cudnn_shapes(int64_t B, int64_t T, int64_t H, int64_t KVH, int64_t D) {
    const int64_t C = H * D, W = (H + 2 * KVH) * D;
    AttnCudnnShapes s = {
        {B, H, T, D}, {W * T, D, W, 1},
        {B, KVH, T, D}, {W * T, D, W, 1},
        {B, KVH, D, T}, {W * T, D, 1, W},
        {C * T, D, C, 1},
        {B, H, T, 1}, {H * T, T, 1, 1},
        {B, H, T, T}, {H * T * T, T * T, T, 1},
        {H * T * T, T * T, 1, T},
        {H * T * D, T * D, D, 1},
    };
    return s;
}

static bool attn_cudnn_build_forward(AttnCudnnPlan* p, cudnnHandle_t handle) {
    const AttnCudnnShapes d = attn_cudnn_shapes(p->B, p->T, p->NH, p->KVH, p->HS);
    const cudnnDataType_t bf16 = CUDNN_DATA_BFLOAT16, f32 = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t Q = attn_cudnn_tensor(p, "Q", ATTN_UID_Q, bf16, d.q, d.q_str, false, false);
    cudnnBackendDescriptor_t Kt = attn_cudnn_tensor(p, "K^T", ATTN_UID_K, bf16, d.kt, d.kt_str, false, false);
    cudnnBackendDescriptor_t V = attn_cudnn_tensor(p, "V", ATTN_UID_V, bf16, d.kv, d.kv_str, false, false);
    cudnnBackendDescriptor_t O = attn_cudnn_tensor(p, "O", ATTN_UID_O, bf16, d.q, d.o_str, false, false);
    cudnnBackendDescriptor_t stats = attn_cudnn_tensor(p, "stats", ATTN_UID_STATS, f32, d.row, d.row_str, false, false);
    cudnnBackendDescriptor_t scale = attn_cudnn_scalar(p, "scale", ATTN_UID_SCALE);

    cudnnBackendDescriptor_t s1 = attn_cudnn_virtual(p, "Q.K^T", f32, d.s, d.s_str);
    attn_cudnn_matmul(p, "Q.K^T", Q, Kt, s1);
    cudnnBackendDescriptor_t s2 = attn_cudnn_virtual(p, "scaled scores", f32, d.s, d.s_str);
    attn_cudnn_pointwise(p, "scale scores", CUDNN_POINTWISE_MUL, f32, s1, scale, NULL, s2, -1);
    cudnnBackendDescriptor_t s3 = attn_cudnn_causal_mask(p, s2, d.s, d.s_str);
    cudnnBackendDescriptor_t mx = attn_cudnn_virtual(p, "row max", f32, d.row, d.row_str);
    attn_cudnn_reduction(p, "row max", CUDNN_REDUCE_TENSOR_MAX, s3, mx);
    cudnnBackendDescriptor_t s4 = attn_cudnn_virtual(p, "scores - max", f32, d.s, d.s_str);
    attn_cudnn_pointwise(p, "scores - max", CUDNN_POINTWISE_SUB, f32, s3, mx, NULL, s4, -1);
    cudnnBackendDescriptor_t e = attn_cudnn_virtual(p, "exp", f32, d.s, d.s_str);
    attn_cudnn_pointwise(p, "exp", CUDNN_POINTWISE_EXP, f32, s4, NULL, NULL, e, -1);
    cudnnBackendDescriptor_t z = attn_cudnn_virtual(p, "row sum", f32, d.row, d.row_str);
    attn_cudnn_reduction(p, "row sum", CUDNN_REDUCE_TENSOR_ADD, e, z);
    cudnnBackendDescriptor_t logz = attn_cudnn_virtual(p, "log row sum", f32, d.row, d.row_str);
    attn_cudnn_pointwise(p, "log row sum", CUDNN_POINTWISE_LOG, f32, z, NULL, NULL, logz, -1);
    attn_cudnn_pointwise(p, "stats = max + log sum", CUDNN_POINTWISE_ADD, f32, mx, logz, NULL, stats, -1);
    cudnnBackendDescriptor_t prob = attn_cudnn_virtual(p, "P", bf16, d.s, d.s_str);   // BF16: the second GEMM's A type
    attn_cudnn_pointwise(p, "P = exp / sum", CUDNN_POINTWISE_DIV, f32, e, z, NULL, prob, -1);
    attn_cudnn_matmul(p, "P.V", prob, V, O);
    return attn_cudnn_make_plan(p, handle);
}

// out (dK or dV, [B, KVH, T, HS]) = a.b: directly with KVH == NH; with GQA per query head into a virtual
// [B, NH, T, HS] tensor, then summed over each group of NH/KVH heads.
static void attn_cudnn_matmul_kv(AttnCudnnPlan* p, const char* what, const char* name, cudnnBackendDescriptor_t a,
                                 cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t out, const AttnCudnnShapes* d) {
    if (p->KVH == p->NH) {
        attn_cudnn_matmul(p, what, a, b, out);
        return;
    }
    char per_head[64], sum[64];
    snprintf(per_head, sizeof(per_head), "%s per query head", name);
    snprintf(sum, sizeof(sum), "%s head-group sum", name);
    cudnnBackendDescriptor_t h = attn_cudnn_virtual(p, per_head, p->fullhead_type, d->q, d->acc_str);
    attn_cudnn_matmul(p, what, a, b, h);
    attn_cudnn_reduction(p, sum, CUDNN_REDUCE_TENSOR_ADD, h, out);
}

static bool attn_cudnn_build_backward(AttnCudnnPlan* p, cudnnHandle_t handle) {
    const AttnCudnnShapes d = attn_cudnn_shapes(p->B, p->T, p->NH, p->KVH, p->HS);
    const cudnnDataType_t bf16 = CUDNN_DATA_BFLOAT16, f32 = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t Q = attn_cudnn_tensor(p, "Q", ATTN_UID_Q, bf16, d.q, d.q_str, false, false);
    cudnnBackendDescriptor_t Kt = attn_cudnn_tensor(p, "K^T", ATTN_UID_K, bf16, d.kt, d.kt_str, false, false);
    cudnnBackendDescriptor_t Vt = attn_cudnn_tensor(p, "V^T", ATTN_UID_V, bf16, d.kt, d.kt_str, false, false);
    cudnnBackendDescriptor_t O = attn_cudnn_tensor(p, "O", ATTN_UID_O, bf16, d.q, d.o_str, false, false);
    cudnnBackendDescriptor_t dO = attn_cudnn_tensor(p, "dO", ATTN_UID_DO, bf16, d.q, d.o_str, false, false);
    cudnnBackendDescriptor_t stats = attn_cudnn_tensor(p, "stats", ATTN_UID_STATS, f32, d.row, d.row_str, false, false);
    cudnnBackendDescriptor_t dQ = attn_cudnn_tensor(p, "dQ", ATTN_UID_DQ, bf16, d.q, d.q_str, false, false);
    cudnnBackendDescriptor_t dK = attn_cudnn_tensor(p, "dK", ATTN_UID_DK, bf16, d.kv, d.kv_str, false, false);
    cudnnBackendDescriptor_t dV = attn_cudnn_tensor(p, "dV", ATTN_UID_DV, bf16, d.kv, d.kv_str, false, false);
    cudnnBackendDescriptor_t scale = attn_cudnn_scalar(p, "scale", ATTN_UID_SCALE);
    cudnnBackendDescriptor_t one = attn_cudnn_scalar(p, "one", ATTN_UID_ONE);

    // softmax_sum[b, h, i] = sum_d dO * O (the "D" of FlashAttention-2), in our workspace
    cudnnBackendDescriptor_t dOO = attn_cudnn_virtual(p, "dO*O", f32, d.q, d.o_str);
    attn_cudnn_pointwise(p, "dO*O", CUDNN_POINTWISE_MUL, f32, dO, O, NULL, dOO, -1);
    cudnnBackendDescriptor_t dsum0 = attn_cudnn_virtual(p, "rowsum dO*O", f32, d.row, d.row_str);
    attn_cudnn_reduction(p, "rowsum dO*O", CUDNN_REDUCE_TENSOR_ADD, dOO, dsum0);
    cudnnBackendDescriptor_t dsum = attn_cudnn_tensor(p, "softmax sum", ATTN_UID_SOFTMAX_SUM, f32, d.row, d.row_str, false, false);
    attn_cudnn_pointwise(p, "softmax sum * 1", CUDNN_POINTWISE_MUL, f32, dsum0, one, NULL, dsum, -1);

    // recompute P from the saved stats
    cudnnBackendDescriptor_t s1 = attn_cudnn_virtual(p, "Q.K^T", f32, d.s, d.s_str);
    attn_cudnn_matmul(p, "Q.K^T", Q, Kt, s1);
    cudnnBackendDescriptor_t s2 = attn_cudnn_virtual(p, "scaled scores", f32, d.s, d.s_str);
    attn_cudnn_pointwise(p, "scale scores", CUDNN_POINTWISE_MUL, f32, s1, scale, NULL, s2, -1);
    cudnnBackendDescriptor_t s3 = attn_cudnn_causal_mask(p, s2, d.s, d.s_str);
    cudnnBackendDescriptor_t s4 = attn_cudnn_virtual(p, "scores - stats", f32, d.s, d.s_str);
    attn_cudnn_pointwise(p, "scores - stats", CUDNN_POINTWISE_SUB, f32, s3, stats, NULL, s4, -1);
    cudnnBackendDescriptor_t prob = attn_cudnn_virtual(p, "P", f32, d.s, d.s_str);
    attn_cudnn_pointwise(p, "P = exp", CUDNN_POINTWISE_EXP, f32, s4, NULL, NULL, prob, -1);

    // dV = P^T.dO (GQA: per query head, then summed over each group of NH/KVH heads)
    cudnnBackendDescriptor_t probT = attn_cudnn_virtual(p, "P^T", bf16, d.s, d.st_str);
    attn_cudnn_reshape(p, "P^T", prob, probT);
    attn_cudnn_matmul_kv(p, "P^T.dO", "dV", probT, dO, dV, &d);

    // dS = P * (dP - softmax_sum) * scale
    cudnnBackendDescriptor_t dp1 = attn_cudnn_virtual(p, "dO.V^T", f32, d.s, d.s_str);
    attn_cudnn_matmul(p, "dO.V^T", dO, Vt, dp1);
    cudnnBackendDescriptor_t dp2 = attn_cudnn_virtual(p, "dP * 1", f32, d.s, d.s_str);
    attn_cudnn_pointwise(p, "dP * 1", CUDNN_POINTWISE_MUL, f32, dp1, one, NULL, dp2, -1);
    cudnnBackendDescriptor_t dp3 = attn_cudnn_virtual(p, "dP - sum", f32, d.s, d.s_str);
    attn_cudnn_pointwise(p, "dP - sum", CUDNN_POINTWISE_SUB, f32, dp2, dsum, NULL, dp3, -1);
    cudnnBackendDescriptor_t ds1 = attn_cudnn_virtual(p, "(dP - sum) * P", f32, d.s, d.s_str);
    attn_cudnn_pointwise(p, "(dP - sum) * P", CUDNN_POINTWISE_MUL, f32, dp3, prob, NULL, ds1, -1);
    cudnnBackendDescriptor_t ds = attn_cudnn_virtual(p, "dS", f32, d.s, d.s_str);
    attn_cudnn_pointwise(p, "dS * scale", CUDNN_POINTWISE_MUL, f32, ds1, scale, NULL, ds, -1);

    // dK = dS^T.Q (GQA: per query head, then summed over each group of NH/KVH heads)
    cudnnBackendDescriptor_t dsT = attn_cudnn_virtual(p, "dS^T", bf16, d.s, d.st_str);
    attn_cudnn_reshape(p, "dS^T", ds, dsT);
    attn_cudnn_matmul_kv(p, "dS^T.Q", "dK", dsT, Q, dK, &d);

    // dQ = dS.K: straight into dQ (deterministic), or accumulated in FP32 in our workspace, then converted
    cudnnBackendDescriptor_t K = attn_cudnn_virtual(p, "K", f32, d.kv, d.kv_str);
    attn_cudnn_reshape(p, "K from K^T", Kt, K);
    const int64_t rows = (int64_t)p->B * p->NH * p->T;
    if (p->deterministic) {
        attn_cudnn_matmul(p, "dS.K", ds, K, dQ);
        p->extra_workspace = ((rows * 4 + 255) / 256) * 256;
    } else {
        cudnnBackendDescriptor_t dqacc = attn_cudnn_tensor(p, "dQ accumulator", ATTN_UID_DQ_ACCUM, f32, d.q, d.acc_str, false, false);
        attn_cudnn_matmul(p, "dS.K", ds, K, dqacc);
        attn_cudnn_pointwise(p, "dQ = dQ accumulator", CUDNN_POINTWISE_IDENTITY, f32, dqacc, NULL, NULL, dQ, -1);
        p->extra_workspace = ((rows * 4 + 255) / 256) * 256 + rows * p->HS * 4;
    }
    return attn_cudnn_make_plan(p, handle);
}

// Byte offsets of our FP32 tensors inside the workspace: after cuDNN's own part, 256-aligned (the dQ
// accumulator only in the non-deterministic backward).
static int64_t attn_cudnn_sum_offset(const AttnCudnnPlan* p) { return ((p->plan_workspace + 255) / 256) * 256; }
static int64_t attn_cudnn_acc_offset(const AttnCudnnPlan* p) {
    const int64_t rows = (int64_t)p->B * p->NH * p->T;
    return attn_cudnn_sum_offset(p) + ((rows * 4 + 255) / 256) * 256;
}
static int64_t attn_cudnn_workspace_needed(const AttnCudnnPlan* p) {
    return p->backward ? attn_cudnn_sum_offset(p) + p->extra_workspace : p->plan_workspace;
}

// Runs the plan. On failure, fills err and returns false.
static bool attn_cudnn_execute(AttnCudnnPlan* p, cudnnHandle_t handle, int n, const int64_t* uids, void** ptrs,
                               void* workspace, cudaStream_t stream, char* err, size_t err_size) {
    cudnnBackendDescriptor_t pack = NULL;
    const char* step = "cudnnBackendCreateDescriptor(variant pack)";
    cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
    if (s == CUDNN_STATUS_SUCCESS) { step = "variant pack unique ids"; s = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids); }
    if (s == CUDNN_STATUS_SUCCESS) { step = "variant pack data pointers"; s = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs); }
    if (s == CUDNN_STATUS_SUCCESS) { step = "variant pack workspace"; s = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace); }
    if (s == CUDNN_STATUS_SUCCESS) { step = "cudnnBackendFinalize(variant pack)"; s = cudnnBackendFinalize(pack); }
    if (s == CUDNN_STATUS_SUCCESS) { step = "cudnnSetStream"; s = cudnnSetStream(handle, stream); }
    if (s == CUDNN_STATUS_SUCCESS) { step = "cudnnBackendExecute"; s = cudnnBackendExecute(handle, p->plan, pack); }
    if (s != CUDNN_STATUS_SUCCESS) {
        char last[1024] = "";
#if CUDNN_VERSION >= 90000
        cudnnGetLastErrorString(last, sizeof(last));
#endif
        for (char* c = last; *c; c++) if (*c == '\n') *c = ' ';
        snprintf(err, err_size, "%s -> %s (%d)%s%s", step, cudnnGetErrorString(s), (int)s, last[0] ? "; cuDNN says: " : "", last);
    }
    if (pack) cudnnBackendDestroyDescriptor(pack);
    return s == CUDNN_STATUS_SUCCESS;
}

static void attn_cudnn_plan_destroy(AttnCudnnPlan* p) {
    if (p->plan) cudnnBackendDestroyDescriptor(p->plan);
    for (int i = p->n_descs - 1; i >= 0; i--) cudnnBackendDestroyDescriptor(p->descs[i]);
    p->plan = NULL;
    p->n_descs = p->n_ops = 0;
}

#endif  // ENABLE_CUDNN
