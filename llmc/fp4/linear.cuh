// linear.cuh: the FP4 linear executor. Every linear layer of the model runs through linear_forward and
// linear_backward, which execute the layer's plan (llmc/fp4/linear_plan.h, built once per recipe by
// linear_set_recipe):
//   forward:  quantize what the forward's passes ask of X and W, run the fprop GEMM;
//   backward: quantize what the backward's passes ask of dY, X and W, run the dgrad and wgrad GEMMs.
// BF16 layers run the same code with plans whose operands are all the BF16 sources. The model knows only
// its linears' table (LinearDesc: name, shape, weights) and calls linear_forward(x, l, kind, out, inp); operand
// forms, scale slots and quantization passes stay in here.
// defines: LinearDesc, LinearExec, GemmProbe, linear_exec_init(), linear_exec_free(), linear_set_recipe(),
//          linear_set_step(), linear_begin_forward(), linear_forward(), linear_backward(), linear_end_backward(),
//          linear_key(), linear_plan_at(), linear_diag_begin(), linear_diag_end(), linear_timer_take(),
//          linear_timer_harvest(), linear_phase_breakdown(), LINEAR_MAX_KINDS, LINEAR_BUCKETS,
//          linear_lora_enable(), linear_lora_bytes(), linear_lora_summary() (--lora-svd-rank)
//
// FP4 on Hopper is exact emulation: a quantized operand is a BF16 copy holding code * block scale
// (exact in BF16), the GEMM runs in BF16 with FP32 accumulation, and the operands' FP32 tensor scales
// go into its alpha (a device pointer, so no host synchronisation). A GEMM whose two operands have
// power-of-two (E8M0) block scales runs on FP8 tensor cores instead (--fp4-gemm fp8, the default where it
// applies): its operands are written as E4M3 with a power-of-two offset per GEMM row, exact within a
// window of 14 binades below the row's largest block (llmc/fp4/fp8_fold.h). Every copy is quantized from the
// BF16 source, except that a src=fprop slot (Quartet II's dgrad.w and wgrad.x) quantizes the forward's
// dequantized copy of W or X, which the backward makes again (same spec, key and amax: the same copy; no
// memory kept from the forward). The copies live in a buffer the model lends (GPT-2's logits buffer, which
// holds nothing between the classifier's forward and backward uses), so an FP4 run needs no more activation
// memory than a BF16 run.
#pragma once
#include "llmc/base/cuda_common.cuh"
#include "llmc/base/rng.h"
#include "llmc/base/matmul.cuh"
#include "llmc/base/event_timer.cuh"
#include "llmc/fp4/recipe.h"
#include "llmc/fp4/linear_plan.h"
#include "llmc/fp4/quant.cuh"
#include "llmc/fp4/matmul_fp4.cuh"
#include "llmc/fp4/matmul_fp8.cuh"
#include "llmc/fp4/lora_svd.cuh"

#define LINEAR_MAX_KINDS 8

// One linear of a block, as the model family's table describes it: Y (N x OC) = X (N x K) W^T (+ b).
typedef struct {
    const char* name;     // in logs: "qkv", "fc", ...
    int K, OC;            // input and output channels
    int qk_split;         // --qk-fp8: outputs [0, qk_split) are the Q/K part, the rest the V part (0: never split)
    const floatX* w;      // every layer's weights, OC x K each, layer after layer (linear_exec_init binds them)
    const floatX* b;      // every layer's biases (OC each), or NULL
    float* dw;            // the FP32 weight gradients, laid out as w
} LinearDesc;

// Test hook (test_gpt_fp4.cu checks every GEMM of every linear exactly): called after each GEMM of a
// linear layer with the operands it read, and once more (gemm = -1) when the linear's pass is done.
typedef struct {
    int l, kind, gemm, backward;   // layer, linear (table index), GEMM (0 fprop, 1 dgrad, 2 wgrad; -1: pass done)
    int o0, n;                     // the output channels [o0, o0 + n) of this part (a split QKV has two)
    const floatX* a; int lda; const float* a_dec;   // the operands as the GEMM read them, in the layout of
    const floatX* b; int ldb; const float* b_dec;   // their BF16 source; dec: tensor scale (NULL: 1)
    const uint8_t* a_fp8; const float* a_rs;        // FP8 path (else NULL): the E4M3 operands, reduction axis
    const uint8_t* b_fp8; const float* b_rs;        // contiguous, and their per-row scales (a, b unused)
} GemmProbe;

// The timer's buckets (the run's "phase_breakdown" log line): a quantization call of one linear kind's source
// (X, W, dY) in the forward or the backward, a diagnostic copy, or one GEMM of a linear kind.
enum {
    LINEAR_BUCKET_DIAG = LINEAR_MAX_KINDS * NUM_SOURCES * 2,
    LINEAR_BUCKET_LORA,   // --lora-svd-rank: the refreshes and the side GEMMs (counted in quant_ms)
    LINEAR_BUCKET_GEMM,
    LINEAR_BUCKETS = LINEAR_BUCKET_GEMM + LINEAR_MAX_KINDS * NUM_GEMMS
};
static inline int linear_quant_bucket(int kind, int src, int backward) { return (kind * NUM_SOURCES + src) * 2 + backward; }
static inline int linear_gemm_bucket(int kind, int g) { return LINEAR_BUCKET_GEMM + kind * NUM_GEMMS + g; }

typedef struct {
    // the model's linears (bound once)
    LinearDesc kind[LINEAR_MAX_KINDS];
    int nkinds, num_layers;
    int max_tokens;                 // the most tokens one forward runs (B*T)
    int fold_rows;                  // per site, the most FP8 per-row maxima kept ahead (the widest K or OC)
    floatX* lend;                   // a buffer the model lends for the copies (or NULL), and its bytes
    size_t lend_bytes;
    cudaStream_t stream;
    // the recipe and the plans of its linear layers
    Recipe recipe;
    LinearPlan* plans;              // per (layer, kind), built by linear_set_recipe
    int fp4_any;                    // some slot of some block is quantized
    GemmPath gemm_path;             // emulated, native NVFP4 (compute capability 10.x), or FP8 where operands fold
    uint8_t* scratch;               // quantized GEMM operands: the lent buffer when that is big enough
    size_t scratch_bytes;
    int scratch_owned;
    // device scalars per (layer, kind, part), zeroed once at the start of each forward, so that no amax pass
    // needs a memset of its own
    LinearScalars* scalars;
    // the delayed amax rule (Recipe.amax_delayed): the previous training micro-step's scalars (its copies' amaxes),
    // copied from `scalars` at the end of each backward; amax_prev_ready once a whole micro-step has filled them
    LinearScalars* scalars_prev;
    int amax_prev_ready;
    // per (layer, kind, part): the backward slots (bits) whose tensor amax this micro-step's forward already took,
    // in a pass that read the same source anyway (QuantPass.ahead)
    unsigned* amax_ahead;
    uint32_t* fold_ahead;           // device: per site, the FP8 fold's per-row maxima of wgrad.x and dgrad.w taken
                                    // ahead by the forward (fold_rows entries each)
    int tokens;                     // tokens of the forward running now (linear_begin_forward)
    int fwd_for_backward;           // the forward running now will be followed by a backward
    uint64_t seed;                  // SR keys: rng_key(seed, step, tensor id)
    int step, micro;
    // diagnostics: per (layer, kind, slot) quantization statistics, and per (layer, kind) the forward/backward
    // weight copy comparison; gathered only while diag_active
    int diag_active;
    QuantStats* diag_stats;
    QuantCompare* diag_compare;
    // time per bucket: CUDA event pairs around each quantization pass and each GEMM, for every recipe (bf16 too:
    // its GEMM time is the baseline's)
    EventTimer timer;
    int bucket;                     // the bucket of the quantization calls being made now
    void (*probe)(void* ctx, const GemmProbe* p);   // test hook, NULL in training
    void* probe_ctx;
    // --lora-svd-rank (linear_lora_enable; llmc/fp4/lora_svd.h): per (layer, kind) the BF16 factors US (OC x R) then
    // Vt (R x K) of W - Q(W), refreshed every lora_every steps; rank 0: all zero, no launch and no allocation
    int lora_rank, lora_every;
    floatX* lora_factors;
    float* lora_captured;           // device, per (layer, kind): the captured fraction of its last refresh
    LoraWork lora_work;
    floatX* lora_tmp;               // the side GEMMs' N x R intermediate
    floatX* lora_copy;              // the forward's W copy made again (BF16 fake, OC x K)
    float* lora_scalars;            // its amax and scale_dec, per part
    int lora_have;                  // factors present (refreshed, or loaded from a checkpoint): the next is warm
    int lora_done_step;             // the step of the last refresh (-1: none since the start or the resume)
} LinearExec;

// Sites of per-part state (scalars, amax bits): (layer, kind, part).
static size_t linear_sites(const LinearExec* x) { return (size_t)x->num_layers * x->nkinds * 2; }
static size_t linear_site(const LinearExec* x, int l, int kind, int part) {
    return ((size_t)l * x->nkinds + kind) * 2 + part;
}
static const LinearPlan* linear_plan_at(const LinearExec* x, int l, int kind) {
    return &x->plans[(size_t)l * x->nkinds + kind];
}

// SR keys differ for every step, micro-batch, layer, linear and slot (the parts of a split QKV share
// them: their elements are disjoint).
static uint64_t linear_key(const LinearExec* x, int l, int kind, Slot slot) {
    uint32_t id = (((uint32_t)x->micro * x->num_layers + l) * x->nkinds + kind) * NUM_SLOTS + slot;
    return rng_key(x->seed, (uint32_t)x->step, id);
}

// The model's linears (`kinds`, in the order of its table), the most tokens a forward runs, and a device buffer
// the copies may use (or NULL) when it is big enough.
static void linear_exec_init(LinearExec* x, const LinearDesc* kinds, int nkinds, int num_layers, int max_tokens,
                             floatX* lend, size_t lend_bytes, cudaStream_t stream) {
    fail_if(nkinds > LINEAR_MAX_KINDS, "internal: %d linear kinds (at most %d)", nkinds, LINEAR_MAX_KINDS);
    memset(x, 0, sizeof(*x));
    for (int k = 0; k < nkinds; k++) {
        x->kind[k] = kinds[k];
        const int wide = kinds[k].K > kinds[k].OC ? kinds[k].K : kinds[k].OC;
        x->fold_rows = wide > x->fold_rows ? wide : x->fold_rows;
    }
    x->nkinds = nkinds;
    x->num_layers = num_layers;
    x->max_tokens = max_tokens;
    x->lend = lend;
    x->lend_bytes = lend_bytes;
    x->stream = stream;
    // one event pair per quantization call and per GEMM; a harvest window (a backward and the next forward) holds
    // per part a forward of 2 calls + 1 GEMM and a backward of up to 6 calls (MS-EDEN's dY pair as two, src=fprop's
    // two copies made again) + 2 GEMMs, + 1 diagnostic copy per linear: at most 11 for a linear, 20 for a split QKV
    // (its Q/K part is MXFP8: 3 backward calls), so 18 per linear on average covers every layer
    event_timer_init(&x->timer, 18 * nkinds * num_layers, LINEAR_BUCKETS, stream);
}

static void linear_exec_free(LinearExec* x) {
    if (x->scratch_owned) cudaFree(x->scratch);
    cudaFree(x->scalars);
    cudaFree(x->scalars_prev);
    free(x->amax_ahead);
    cudaFree(x->fold_ahead);
    free(x->plans);
    cudaFree(x->diag_stats);
    cudaFree(x->diag_compare);
    event_timer_free(&x->timer);
    if (x->lora_rank) {
        cudaFree(x->lora_factors);
        cudaFree(x->lora_captured);
        cudaFree(x->lora_tmp);
        cudaFree(x->lora_copy);
        cudaFree(x->lora_scalars);
        lora_work_free(&x->lora_work);
        lora_gemm_destroy();
    }
}

// ----------------------------------------------------------------------------------------------
// Scratch: where one linear's copies go while it runs

static size_t scratch_round(size_t bytes) { return (size_t)ceil_div((int64_t)bytes, 256) * 256; }

// Scratch bytes of one operand's copy: a BF16 fake copy; packed codes + raw scales + swizzled scales; or
// E4M3 values + per-row scales + the amax pass's per-row maxima.
static size_t operand_bytes(const OperandPlan* o, int64_t rows, int64_t cols) {
    if (o->form == FORM_BF16) return 0;
    if (o->form == FORM_FAKE) return scratch_round((size_t)(rows * cols) * sizeof(floatX));
    const int64_t R = o->axis ? rows : cols, K = o->axis ? cols : rows;
    if (o->form == FORM_FP8)
        return scratch_round((size_t)(R * K)) + scratch_round((size_t)R * sizeof(float)) +
               scratch_round((size_t)ceil_div(R, o->q.block_w) * sizeof(uint32_t));
    return scratch_round((size_t)(R * K / 2)) + scratch_round((size_t)(R * K / 16)) +
           scratch_round(matmul_fp4_scale_bytes((int)R, (int)(K / 16)));
}

// A rows x cols view of a BF16 tensor, rows ld apart.
typedef struct {
    const floatX* ptr;
    int64_t rows, cols, ld;
} TensorView;

// What a slot of a part views: X (N x K), W's rows [o0, o0 + n), dY's columns [o0, o0 + n).
static TensorView linear_source(const LinearPart* p, OperandSource src, const floatX* inp, const floatX* weight,
                                const floatX* dout, int N, int K, int OC) {
    TensorView v;
    switch (src) {
    case SRC_X:  v = {inp, N, K, K}; break;
    case SRC_W:  v = {weight ? weight + (size_t)p->o0 * K : NULL, p->n, K, K}; break;
    default:     v = {dout ? dout + p->o0 : NULL, N, p->n, OC}; break;
    }
    return v;
}

// Scratch one part needs in one phase: its copies, the diagnostics' W copy (backward), and for a split
// QKV the FP32 sum of the parts' data gradients, which follows the largest part's copies.
static size_t part_scratch_bytes(const LinearPart* p, int backward, int N, int K, int OC) {
    size_t bytes = 0;
    for (int s = 0; s < NUM_SLOTS; s++) {
        if (slot_is_backward((Slot)s) != backward) continue;
        TensorView v = linear_source(p, p->op[s].src, NULL, NULL, NULL, N, K, OC);
        bytes += operand_bytes(&p->op[s], v.rows, v.cols);
    }
    if (backward && p->compare_w) bytes += operand_bytes(&p->op[SLOT_FPROP_W], p->n, K);
    for (int s = SLOT_DGRAD_W; backward && s < NUM_SLOTS; s += 2)   // the forward's copies made again (src=fprop)
        if (p->op[s].from_fprop) {
            TensorView v = linear_source(p, p->op[s].src, NULL, NULL, NULL, N, K, OC);
            bytes += scratch_round((size_t)(v.rows * v.cols) * sizeof(floatX));
        }
    return bytes;
}
static size_t split_sum_offset(const LinearPlan* lp, int N, int K, int OC) {
    size_t off = 0;
    for (int p = 0; p < lp->nparts; p++) {
        size_t b = part_scratch_bytes(&lp->part[p], 1, N, K, OC);
        off = b > off ? b : off;
    }
    return off;
}
static size_t linear_scratch_bytes(const LinearPlan* lp, int N, int K, int OC) {
    size_t need = 0;
    for (int p = 0; p < lp->nparts; p++) {
        size_t f = part_scratch_bytes(&lp->part[p], 0, N, K, OC), b = part_scratch_bytes(&lp->part[p], 1, N, K, OC);
        need = need > f ? need : f;
        need = need > b ? need : b;
    }
    if (lp->nparts > 1) {
        size_t split = split_sum_offset(lp, N, K, OC) + scratch_round((size_t)N * K * sizeof(float));
        need = need > split ? need : split;
    }
    return need;
}

static uint8_t* scratch_take(LinearExec* x, uint8_t** cursor, size_t bytes) {
    uint8_t* p = *cursor;
    *cursor += scratch_round(bytes);
    fail_if((size_t)(*cursor - x->scratch) > x->scratch_bytes,
            "internal: FP4 operands need more scratch than the %zu bytes allocated", x->scratch_bytes);
    return p;
}

// ----------------------------------------------------------------------------------------------
// Recipes and plans

// Native NVFP4 GEMMs need every quantized GEMM to have both operands in NVFP4 (E2M1, E4M3 scales per
// 16); returns NULL when the recipe qualifies, else why not.
static const char* recipe_native_obstacle(const Recipe* r) {
    for (int g = 0; g < NUM_GEMMS; g++) {
        const QuantSpec* a = &r->slot[gemm_slot_a((Gemm)g)];
        const QuantSpec* b = &r->slot[gemm_slot_b((Gemm)g)];
        int qa = !quant_spec_is_bf16(a), qb = !quant_spec_is_bf16(b);
        if (!qa && !qb) continue;
        if (qa != qb) return "a GEMM with one BF16 and one FP4 operand";
        QuantParams pa = quant_params(a), pb = quant_params(b);
        if (!matmul_fp4_spec_ok(&pa) || !matmul_fp4_spec_ok(&pb))
            return "a slot that is not NVFP4 (cuBLASLt has FP4 GEMMs only for E2M1 with E4M3 scales per 16)";
    }
    return NULL;
}

// The GEMMs whose two operands fold into E4M3 (E8M0-scaled 4-bit specs): the FP8 path's.
static int recipe_fp8_gemms(const Recipe* r) {
    int n = 0;
    for (int g = 0; g < NUM_GEMMS; g++) {
        const QuantSpec* a = &r->slot[gemm_slot_a((Gemm)g)];
        const QuantSpec* b = &r->slot[gemm_slot_b((Gemm)g)];
        if (quant_spec_is_bf16(a) || quant_spec_is_bf16(b)) continue;
        QuantParams pa = quant_params(a), pb = quant_params(b);
        n += fp8_foldable(&pa) && fp8_foldable(&pb);
    }
    return n;
}

// Resolves the recipe for this model and builds every linear's plan (again whenever the recipe changes).
// gemm_mode: "native" (or fail), "fp8" (or fail), "emulated", or "auto": native where the GPU and the recipe
// allow, else FP8 for the GEMMs whose operands fold where the GPU has FP8 tensor cores.
static void linear_set_recipe(LinearExec* x, const Recipe* r, uint64_t seed, const char* gemm_mode) {
    const int L = x->num_layers, N = x->max_tokens;
    x->recipe = *r;
    recipe_resolve_layers(&x->recipe, L);
    recipe_check(&x->recipe);
    x->seed = seed;
    x->fp4_any = !recipe_is_bf16(&x->recipe) && x->recipe.bf16_first + x->recipe.bf16_last < L;
    x->gemm_path = GEMM_PATH_EMULATED;
    const int is_auto = !strcmp(gemm_mode, "auto");
    if (x->fp4_any && (is_auto || !strcmp(gemm_mode, "native"))) {
        const char* obstacle = matmul_fp4_native_available() ? recipe_native_obstacle(&x->recipe)
                                                             : matmul_fp4_native_reason();
        fail_if(obstacle && !is_auto, "--fp4-gemm native: %s", obstacle);
        if (!obstacle) x->gemm_path = GEMM_PATH_NATIVE;
    }
    if (x->fp4_any && x->gemm_path == GEMM_PATH_EMULATED && (is_auto || !strcmp(gemm_mode, "fp8"))) {
        const char* obstacle = matmul_fp8_reason();
        if (!obstacle && !recipe_fp8_gemms(&x->recipe))
            obstacle = "no GEMM of this recipe has two operands with power-of-two (E8M0) block scales on a 4-bit grid";
        fail_if(obstacle && !is_auto, "--fp4-gemm fp8: %s", obstacle);
        if (!obstacle) x->gemm_path = GEMM_PATH_FP8;
    }
    if (!x->plans) x->plans = (LinearPlan*)xmalloc((size_t)L * x->nkinds * sizeof(LinearPlan));
    size_t need = 0;
    for (int l = 0; l < L; l++)
        for (int k = 0; k < x->nkinds; k++) {
            const LinearDesc* d = &x->kind[k];
            LinearPlan* lp = &x->plans[(size_t)l * x->nkinds + k];
            linear_plan_build(lp, &x->recipe, l, L, d->qk_split, d->OC, x->gemm_path);
            size_t b = linear_scratch_bytes(lp, N, d->K, d->OC);
            need = need > b ? need : b;
        }
    if (!x->fp4_any) return;
    if (need > x->scratch_bytes) {
        if (x->scratch_owned) cudaFree(x->scratch);
        x->scratch_owned = 0;
        if (need <= x->lend_bytes) {
            x->scratch = (uint8_t*)x->lend;
            x->scratch_bytes = x->lend_bytes;
        } else {
            cuda_malloc(&x->scratch, need);
            x->scratch_bytes = need;
            x->scratch_owned = 1;
        }
    }
    if (x->scalars) return;
    cuda_malloc(&x->scalars, linear_sites(x) * sizeof(LinearScalars));
    cuda_malloc(&x->scalars_prev, linear_sites(x) * sizeof(LinearScalars));
    x->amax_ahead = (unsigned*)calloc(linear_sites(x), sizeof(unsigned));
    cuda_malloc(&x->fold_ahead, linear_sites(x) * 2 * (size_t)x->fold_rows * sizeof(uint32_t));
    const size_t per_layer = (size_t)L * x->nkinds;
    cuda_malloc(&x->diag_stats, per_layer * NUM_SLOTS * sizeof(QuantStats));
    cuda_malloc(&x->diag_compare, per_layer * sizeof(QuantCompare));
}

// Which optimizer step and micro-batch the next forward and backward belong to (they key stochastic rounding).
static void linear_set_step(LinearExec* x, int step, int micro) {
    x->step = step;
    x->micro = micro;
}

static void linear_lora_maybe_refresh(LinearExec* x);

// Before each forward of N tokens: a fresh set of scalars; for_backward: a backward follows this forward. With
// --lora-svd-rank, the factors' refresh when one is due.
static void linear_begin_forward(LinearExec* x, int N, int for_backward) {
    fail_if(N > x->max_tokens, "internal: a forward of %d tokens exceeds the %d allocated", N, x->max_tokens);
    x->tokens = N;
    x->fwd_for_backward = for_backward;
    if (!x->amax_ahead) return;
    if (x->lora_rank) linear_lora_maybe_refresh(x);
    memset(x->amax_ahead, 0, linear_sites(x) * sizeof(unsigned));
    cuda_check(cudaMemsetAsync(x->scalars, 0, linear_sites(x) * sizeof(LinearScalars), x->stream));
}

// After each backward: this micro-step's amaxes are the next one's (the delayed rule).
static void linear_end_backward(LinearExec* x) {
    if (!x->recipe.amax_delayed || !x->scalars) return;
    cuda_check(cudaMemcpyAsync(x->scalars_prev, x->scalars, linear_sites(x) * sizeof(LinearScalars),
                               cudaMemcpyDeviceToDevice, x->stream));
    x->amax_prev_ready = 1;
}

// ----------------------------------------------------------------------------------------------
// One part of one linear while it runs

// A GEMM operand as the GEMM reads it.
typedef struct {
    OperandForm form;
    const floatX* ptr;        // FORM_BF16: the source; FORM_FAKE: its quantized copy
    int ld;
    const uint8_t* codes;     // FORM_PACKED: E2M1 codes and cuBLASLt-swizzled E4M3 scales
    const uint8_t* scales;
    const uint8_t* fp8;       // FORM_FP8: E4M3 values, the reduction axis contiguous, and each GEMM row's 2^o
    const float* row_scale;
    const float* dec;         // the tensor scale_dec on the device; NULL for a BF16 source (1)
} GemmOperand;

// One part of one linear while it runs: its plan, scalars and sources, and the operands made so far.
typedef struct {
    int l, kind, part;
    const LinearPart* plan;
    LinearScalars* sc;                // device
    TensorView src[NUM_SOURCES];      // X (N x K), W's rows [o0, o0 + n), dY's columns [o0, o0 + n)
    GemmOperand op[NUM_SLOTS];
    uint8_t* scratch;                 // the next free byte of the FP4 scratch
} LinearRun;

static LinearRun linear_run(LinearExec* x, int l, int kind, int part, const floatX* inp, const floatX* dout) {
    const LinearDesc* d = &x->kind[kind];
    LinearRun r;
    memset(&r, 0, sizeof(r));
    r.l = l;
    r.kind = kind;
    r.part = part;
    r.plan = &linear_plan_at(x, l, kind)->part[part];
    r.sc = x->scalars ? x->scalars + linear_site(x, l, kind, part) : NULL;
    const floatX* weight = d->w + (size_t)l * d->OC * d->K;
    for (int s = 0; s < NUM_SOURCES; s++)
        r.src[s] = linear_source(r.plan, (OperandSource)s, inp, weight, dout, x->tokens, d->K, d->OC);
    for (int s = 0; s < NUM_SLOTS; s++) {   // BF16 operands read their source; quantize_pass replaces the rest
        const TensorView* v = &r.src[SLOT_SOURCE[s]];
        r.op[s].form = FORM_BF16;
        r.op[s].ptr = v->ptr;
        r.op[s].ld = (int)v->ld;
    }
    r.scratch = x->scratch;
    return r;
}

// Where the forward keeps the FP8 fold's per-row maxima of a backward copy (wgrad.x or dgrad.w) it takes ahead.
static uint32_t* fold_ahead_at(LinearExec* x, const LinearRun* r, int slot) {
    const size_t which = linear_site(x, r->l, r->kind, r->part) * 2 + (slot == SLOT_DGRAD_W);
    return x->fold_ahead + which * (size_t)x->fold_rows;
}

// The quantizer target of one slot's copy, carved from the scratch; the slot's operand now reads it.
// have_amax: the forward took this copy's amax (and FP8 per-row maxima) ahead.
static QuantTarget operand_target(LinearExec* x, LinearRun* r, Slot s, int have_amax) {
    const OperandPlan* o = &r->plan->op[s];
    const TensorView* v = &r->src[o->src];
    OperandScalars* sc = &r->sc->op[s];
    GemmOperand* g = &r->op[s];
    g->form = o->form;
    g->dec = &sc->scale_dec;
    const uint64_t key = linear_key(x, r->l, r->kind, s);
    QuantParams q = o->q;
    // MS-EDEN's signs: one draw per (step, micro-batch, layer, linear), from the linear's dgrad.dy key, shared by
    // its four backward operands (docs/NUMERICS_NEXT.md 2.1)
    if (q.step_signs) quant_params_set_step_signs(&q, linear_key(x, r->l, r->kind, SLOT_DGRAD_DY));
    if (o->form == FORM_FAKE) {
        floatX* copy = (floatX*)scratch_take(x, &r->scratch, operand_bytes(o, v->rows, v->cols));
        g->ptr = copy;
        g->ld = (int)v->cols;
        return quant_target_fake(&q, o->axis, key, copy, v->cols, &sc->amax, &sc->scale_dec);
    }
    const int64_t R = o->axis ? v->rows : v->cols, K = o->axis ? v->cols : v->rows;
    if (o->form == FORM_FP8) {
        QuantTarget t = quant_target_fake(&q, o->axis, key, NULL, 0, &sc->amax, &sc->scale_dec);
        t.fp8 = scratch_take(x, &r->scratch, (size_t)(R * K));
        t.fold_scale = (float*)scratch_take(x, &r->scratch, (size_t)R * sizeof(float));
        const size_t nmax = (size_t)ceil_div(R, o->q.block_w);
        t.fold_max = (uint32_t*)scratch_take(x, &r->scratch, nmax * sizeof(uint32_t));
        t.fold_below = &sc->fold_below;
        if (have_amax) t.fold_max = fold_ahead_at(x, r, s);
        else cuda_check(cudaMemsetAsync(t.fold_max, 0, nmax * sizeof(uint32_t), x->stream));
        g->fp8 = t.fp8;
        g->row_scale = t.fold_scale;
        return t;
    }
    uint8_t* codes = scratch_take(x, &r->scratch, (size_t)(R * K / 2));
    uint8_t* raw_scales = scratch_take(x, &r->scratch, (size_t)(R * K / 16));
    g->codes = codes;
    g->scales = scratch_take(x, &r->scratch, matmul_fp4_scale_bytes((int)R, (int)(K / 16)));
    return quant_target_packed(&q, o->axis, key, codes, raw_scales, &sc->amax, &sc->scale_dec);
}

// Quantizes a view for 1 or 2 targets (fake or packed copies), amax pass and apply pass, on the quantizer's
// kernels (llmc/fp4/quant.cuh; bit-identical to the CPU twin, dev/test/test_quant_gpu_cpu.cu). A pair they
// take only one at a time (Hadamard sizes with no pair kernel) runs as two passes.
// ahead: a target of a later pass over the same source whose tensor amax the amax pass also takes; returns
// whether it did. have_amax: the targets' amaxes are already in place.
static int quantize_view(LinearExec* x, const TensorView* v, const QuantTarget* t, int n, const QuantTarget* ahead,
                         int have_amax) {
    const int64_t R = v->rows, Cc = v->cols, ld = v->ld;
    if (n == 2 && !quant_fast_supported(t, 2, R, Cc, ld)) {
        quantize_view(x, v, &t[0], 1, NULL, have_amax);
        quantize_view(x, v, &t[1], 1, NULL, have_amax);
        return 0;
    }
    // recipe_check and recipe_check_shapes refused, before the GPU, every spec and shape the kernels do not
    // take; the views are 16-byte aligned as channels are a multiple of 8 (config_check)
    fail_if(!quant_fast_supported(t, n, R, Cc, ld), "internal: the quantizer does not take a %lld x %lld view (ld %lld) "
            "for %s", (long long)R, (long long)Cc, (long long)ld, n == 1 ? "this target" : "these targets");
    QuantTarget all[3];
    for (int i = 0; i < n; i++) all[i] = t[i];
    int took_ahead = 0;
    const int timed = event_timer_begin(&x->timer);
    if (ahead && !have_amax) {
        all[n] = *ahead;
        took_ahead = quant_fast_supported(all, n + 1, R, Cc, ld);
    }
    if (have_amax) quant_fast_apply_gpu(v->ptr, R, Cc, ld, t, n, x->stream);
    else quantize_fast_gpu(v->ptr, R, Cc, ld, all, n, x->stream, /*amax_pass=*/1, took_ahead);
    event_timer_end(&x->timer, timed, x->bucket);
    return took_ahead;
}

// A src=fprop slot's source (docs/NUMERICS_NEXT.md 2.4): the forward's copy of W or X made again, fake, in the
// source's layout (its fprop slot's spec, key and the amax the forward took: the same bits). The target then
// reads it through src_dec, the forward copy's tensor scale: BF16(FP32(fake) * scale_dec) per element.
static TensorView fprop_copy_again(LinearExec* x, LinearRun* r, Slot s, QuantTarget* t) {
    const TensorView* v = &r->src[r->plan->op[s].src];
    const Slot fs = fprop_slot_of(s);
    const OperandPlan* fo = &r->plan->op[fs];
    OperandScalars* fsc = &r->sc->op[fs];
    floatX* copy = (floatX*)scratch_take(x, &r->scratch, (size_t)(v->rows * v->cols) * sizeof(floatX));
    QuantTarget ft = quant_target_fake(&fo->q, fo->axis, linear_key(x, r->l, r->kind, fs), copy, v->cols, &fsc->amax,
                                       &fsc->scale_dec);
    quantize_view(x, v, &ft, 1, NULL, /*have_amax=*/1);
    t->src_dec = &fsc->scale_dec;
    TensorView c = {copy, v->rows, v->cols, v->cols};
    return c;
}

// The delayed amax rule (Recipe.amax_delayed) for a copy of X or dY in a training micro-step, once the previous
// micro-step has left its amaxes, where the whole-block kernels make it (quant_fast_delayed_ok): the copy's tensor
// scale from the previous micro-step's amax of the same slot, and the apply pass takes this one's into the slot's
// amax (zeroed with the scalars at the start of the forward) for the next. Returns whether it did.
static int delayed_amax(LinearExec* x, const LinearRun* r, Slot s, const TensorView* v, QuantTarget* t) {
    if (!x->recipe.amax_delayed || !x->amax_prev_ready || !x->fwd_for_backward) return 0;
    if (SLOT_SOURCE[s] == SRC_W || r->plan->op[s].from_fprop) return 0;
    if (!quant_fast_delayed_ok(t, v->rows, v->cols, v->ld)) return 0;
    t->amax_next = t->amax;
    t->amax = &x->scalars_prev[linear_site(x, r->l, r->kind, r->part)].op[s].amax;
    return 1;
}

// The amax-only target of a forward pass's `ahead` slot: its output pointers are never written by an amax pass;
// an FP8 one also takes the per-row maxima, kept for the backward.
static QuantTarget ahead_target(LinearExec* x, LinearRun* r, const QuantPass* pass, const TensorView* v,
                                const QuantTarget* first) {
    const OperandPlan* o = &r->plan->op[pass->ahead];
    QuantTarget ahead = quant_target_fake(&o->q, o->axis, 0, (floatX*)r->op[pass->target[0]].ptr, v->cols,
                                          &r->sc->op[pass->ahead].amax, &r->sc->op[pass->ahead].scale_dec);
    if (o->form == FORM_FP8) {
        const int64_t R = o->axis ? v->rows : v->cols;
        ahead.fake = NULL;
        ahead.fp8 = first->fp8;
        ahead.fold_scale = first->fold_scale;
        ahead.fold_below = first->fold_below;
        ahead.fold_max = fold_ahead_at(x, r, pass->ahead);
        fail_if(R > x->fold_rows, "internal: %lld per-row maxima to keep ahead", (long long)R);
        cuda_check(cudaMemsetAsync(ahead.fold_max, 0, (size_t)ceil_div(R, o->q.block_w) * sizeof(uint32_t), x->stream));
    }
    return ahead;
}

// One pass of the plan: the copies it asks of one source from one read, their scales, and the
// diagnostics' statistics of each.
static void quantize_pass(LinearExec* x, LinearRun* r, const QuantPass* pass, int backward) {
    const TensorView* v = &r->src[pass->src];
    x->bucket = linear_quant_bucket(r->kind, pass->src, backward);
    QuantTarget t[2], ahead;
    unsigned* ahead_bits = &x->amax_ahead[linear_site(x, r->l, r->kind, r->part)];
    const int have_amax = backward && pass->ntargets == 1 && (*ahead_bits & (1u << pass->target[0]));
    for (int i = 0; i < pass->ntargets; i++) t[i] = operand_target(x, r, pass->target[i], have_amax);
    int delayed[2] = {0, 0};
    for (int i = 0; i < pass->ntargets && !have_amax; i++) delayed[i] = delayed_amax(x, r, pass->target[i], v, &t[i]);
    const int any_delayed = delayed[0] || delayed[1];
    const int want_ahead = !backward && pass->ahead != NO_SLOT && x->fwd_for_backward && !any_delayed;
    if (want_ahead) ahead = ahead_target(x, r, pass, v, &t[0]);
    TensorView from = *v;   // what the pass reads: the source, or for a src=fprop slot the forward's copy made again
    if (backward && pass->ntargets == 1 && r->plan->op[pass->target[0]].from_fprop)
        from = fprop_copy_again(x, r, pass->target[0], &t[0]);
    // no amax pass for a delayed copy (never src=fprop): every copy of the pass delayed, the apply pass of all of them
    // in one call (a dual pass's copies from one read where the route takes them, quant/route.h); else a copy that is not
    // runs alone
    if (delayed[0] && (pass->ntargets == 1 || delayed[1]))
        quantize_view(x, v, t, pass->ntargets, NULL, /*have_amax=*/1);
    else if (any_delayed)
        for (int i = 0; i < pass->ntargets; i++) quantize_view(x, v, &t[i], 1, NULL, delayed[i]);
    else if (quantize_view(x, &from, t, pass->ntargets, want_ahead ? &ahead : NULL, have_amax))
        *ahead_bits |= 1u << pass->ahead;
    for (int i = 0; i < pass->ntargets; i++) {
        const OperandPlan* o = &r->plan->op[pass->target[i]];
        if (o->form != FORM_PACKED) continue;   // the native GEMM reads its scales swizzled
        const int64_t R = o->axis ? v->rows : v->cols, K = o->axis ? v->cols : v->rows;
        fp4_swizzle_scales_gpu((uint8_t*)r->op[pass->target[i]].scales, t[i].scales, (int)R, (int)(K / 16), x->stream);
    }
    if (x->diag_active && !r->plan->qk)   // the statistics describe the recipe's own formats
        for (int i = 0; i < pass->ntargets; i++) {
            QuantStats* st = x->diag_stats + ((size_t)r->l * x->nkinds + r->kind) * NUM_SLOTS + pass->target[i];
            quant_fast_stats_gpu(from.ptr, from.rows, from.cols, from.ld, &t[i], 1, st, x->stream);
        }
}

__global__ void linear_scale_product_kernel(float* out, const float* a, const float* b) { *out = *a * *b; }

// The GEMM's alpha: the product of its operands' tensor scales (NULL when both are BF16 sources).
static const float* gemm_alpha(LinearExec* x, LinearRun* r, Gemm g) {
    const float* a = r->op[gemm_slot_a(g)].dec;
    const float* b = r->op[gemm_slot_b(g)].dec;
    if (!a || !b) return a ? a : b;
    linear_scale_product_kernel<<<1, 1, 0, x->stream>>>(&r->sc->alpha[g], a, b);
    cuda_check_last();
    return &r->sc->alpha[g];
}

static void probe_gemm(LinearExec* x, const LinearRun* r, Gemm g) {
    if (!x->probe) return;
    const GemmOperand* a = &r->op[gemm_slot_a(g)];
    const GemmOperand* b = &r->op[gemm_slot_b(g)];
    GemmProbe p = {r->l, r->kind, g, g != GEMM_FPROP, r->plan->o0, r->plan->n, a->ptr, a->ld, a->dec, b->ptr, b->ld, b->dec,
                   a->fp8, a->row_scale, b->fp8, b->row_scale};
    x->probe(x->probe_ctx, &p);
}

static void probe_pass_done(LinearExec* x, int l, int kind, int backward) {
    if (!x->probe) return;
    GemmProbe p;
    memset(&p, 0, sizeof(p));
    p.l = l;
    p.kind = kind;
    p.gemm = -1;
    p.backward = backward;
    x->probe(x->probe_ctx, &p);
}

// GEMM g of one part on the operands its plan made: the one place that dispatches on the operand form.
// The plan gives both operands of a GEMM the same kind of form (packed only with packed).
// out (GemmOut, llmc/base/matmul.cuh): fprop BF16 rows ld apart plus a bias; dgrad BF16, or FP32 (the sum over
// the parts of a split QKV, accumulate after the first); wgrad FP32, always accumulated.
static void gemm_run(LinearExec* x, LinearRun* r, Gemm g, const GemmOut* out) {
    const GemmOperand* a = &r->op[gemm_slot_a(g)];
    const GemmOperand* b = &r->op[gemm_slot_b(g)];
    const int N = (int)r->src[SRC_X].rows, K = (int)r->src[SRC_X].cols, n = r->plan->n;
    const float* alpha = gemm_alpha(x, r, g);
    cudaStream_t s = x->stream;
    const int timed = event_timer_begin(&x->timer);
    if (a->form == FORM_FP8) {   // both operands stored with the reduction axis contiguous (see fp8_fold.h)
        const Fp8Operand fa = {a->fp8, a->row_scale}, fb = {b->fp8, b->row_scale};
        switch (g) {
        case GEMM_FPROP: matmul_fp8(*out, fa, fb, N, n, K, alpha, s); break;
        case GEMM_DGRAD: matmul_fp8(*out, fa, fb, N, K, n, alpha, s); break;
        default:         matmul_fp8(*out, fa, fb, n, K, N, alpha, s);
        }
    } else if (a->form == FORM_PACKED) {
        const Fp4Operand fa = {a->codes, a->scales}, fb = {b->codes, b->scales};
        switch (g) {
        case GEMM_FPROP: matmul_fp4_forward((floatX*)out->ptr, fa, fb, out->bias, N, K, n, alpha, s); break;
        case GEMM_DGRAD: matmul_fp4_dgrad((floatX*)out->ptr, fa, fb, N, K, n, alpha, s); break;
        default:         matmul_fp4_wgrad((float*)out->ptr, fa, fb, N, K, n, alpha, s);
        }
    } else {
        switch (g) {
        case GEMM_FPROP: matmul_forward_ld(*out, a->ptr, b->ptr, N, K, n, alpha, s); break;
        case GEMM_DGRAD: matmul_dgrad_ld(*out, a->ptr, a->ld, b->ptr, N, K, n, alpha, s); break;
        default:         matmul_wgrad_ld(*out, a->ptr, a->ld, b->ptr, N, K, n, alpha, s);
        }
    }
    event_timer_end(&x->timer, timed, linear_gemm_bucket(r->kind, g));
    probe_gemm(x, r, g);
}

// Diagnostics: how far the weight copy the forward used is from the one the backward used (seed 002's
// inconsistency; zero with 2D blocks), both in the weight's layout (without a Hadamard, plan.compare_w).
static void diag_compare_weights(LinearExec* x, LinearRun* r) {
    const OperandPlan* o = &r->plan->op[SLOT_FPROP_W];
    const TensorView* w = &r->src[SRC_W];
    floatX* copy = (floatX*)scratch_take(x, &r->scratch, operand_bytes(o, w->rows, w->cols));
    OperandScalars* sc = &r->sc->diag_fprop_w;
    QuantTarget t = quant_target_fake(&o->q, o->axis, linear_key(x, r->l, r->kind, SLOT_FPROP_W), copy, w->cols,
                                      &sc->amax, &sc->scale_dec);
    x->bucket = LINEAR_BUCKET_DIAG;
    quantize_view(x, w, &t, 1, NULL, /*have_amax=*/0);
    const GemmOperand* dw = &r->op[SLOT_DGRAD_W];
    quant_compare_gpu(dw->ptr, dw->dec, copy, &sc->scale_dec, w->rows * w->cols,
                      x->diag_compare + (size_t)r->l * x->nkinds + r->kind, x->stream);
}

__global__ void linear_f32_to_bf16_kernel(floatX* out, const float* in, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __float2bfloat16_rn(in[i]);
}

// ----------------------------------------------------------------------------------------------
// LoRA-SVD (--lora-svd-rank R; docs/FULLSTACK_FP4.md section 4, llmc/fp4/lora_svd.h): a linear whose forward reads a
// quantized W runs W_eff = Q(W) + US Vt in its forward and (where its dgrad reads a quantized W too) its data gradient,
// US Vt a rank-R approximation of E = W - Q(W), refreshed every lora_every steps from the BF16 weights and the forward's
// own copy (same spec, key and tensor amax: the amax pass over the same rows). The weight gradient is unchanged.

static size_t linear_lora_layer_elems(const LinearExec* x) {
    size_t e = 0;
    for (int k = 0; k < x->nkinds; k++) e += (size_t)(x->kind[k].OC + x->kind[k].K) * x->lora_rank;
    return e;
}
// Layer l's linear `kind`: US (OC x R), then Vt (R x K).
static floatX* linear_lora_us(const LinearExec* x, int l, int kind) {
    size_t off = (size_t)l * linear_lora_layer_elems(x);
    for (int k = 0; k < kind; k++) off += (size_t)(x->kind[k].OC + x->kind[k].K) * x->lora_rank;
    return x->lora_factors + off;
}
static floatX* linear_lora_vt(const LinearExec* x, int l, int kind) {
    return linear_lora_us(x, l, kind) + (size_t)x->kind[kind].OC * x->lora_rank;
}

// The bytes of every linear's factors, as the checkpoint stores them (0 at rank 0). The linears a recipe keeps in BF16
// hold zeros.
static size_t linear_lora_bytes(const LinearExec* x) {
    return (size_t)x->num_layers * linear_lora_layer_elems(x) * sizeof(floatX);
}

// Whether layer l's linear `kind` gets the correction in its forward (the forward quantizes W), and in its data
// gradient (the dgrad's W is quantized too: a BF16 dgrad.w is W itself, and adding E_R would count E twice).
static int linear_lora_fprop(const LinearExec* x, int l, int kind) {
    if (!x->lora_rank) return 0;
    const LinearPlan* lp = linear_plan_at(x, l, kind);
    if (!lp->quantized) return 0;
    for (int p = 0; p < lp->nparts; p++)
        if (lp->part[p].op[SLOT_FPROP_W].form == FORM_BF16) return 0;
    return 1;
}
static int linear_lora_dgrad(const LinearExec* x, int l, int kind) {
    if (!linear_lora_fprop(x, l, kind)) return 0;
    const LinearPlan* lp = linear_plan_at(x, l, kind);
    for (int p = 0; p < lp->nparts; p++)
        if (lp->part[p].op[SLOT_DGRAD_W].form == FORM_BF16) return 0;
    return 1;
}

// Why the plans' forward weight copies cannot be corrected (NULL: they can).
static const char* linear_lora_obstacle(const LinearExec* x) {
    for (size_t i = 0; i < (size_t)x->num_layers * x->nkinds; i++)
        for (int p = 0; p < x->plans[i].nparts; p++) {
            const OperandPlan* o = &x->plans[i].part[p].op[SLOT_FPROP_W];
            if (o->form == FORM_BF16) continue;
            const char* why = lora_spec_problem(&o->spec);
            if (why) return why;
        }
    return NULL;
}

// Turns the correction on at rank R, refreshed every `every` steps (after linear_set_recipe: it reads the plans).
// Fails with a message for what it cannot run. Returns the device bytes it allocated (factors, the refresh's scratch,
// the side GEMMs' intermediate). Rank 0 does nothing.
static size_t linear_lora_enable(LinearExec* x, int R, int every) {
    if (R == 0) return 0;
    fail_if(every < 1, "--lora-svd-every must be >= 1 (steps between refreshes)");
    int max_m = 0, max_n = 0;
    for (int k = 0; k < x->nkinds; k++) {
        const char* why = lora_rank_problem(R, x->kind[k].OC, x->kind[k].K);
        fail_if(why, "--lora-svd-rank %d: %s (linear %s is %d x %d)", R, why, x->kind[k].name, x->kind[k].OC, x->kind[k].K);
        max_m = x->kind[k].OC > max_m ? x->kind[k].OC : max_m;
        max_n = x->kind[k].K > max_n ? x->kind[k].K : max_n;
    }
    x->lora_rank = R;
    int any = 0;
    for (int l = 0; l < x->num_layers; l++)
        for (int k = 0; k < x->nkinds; k++) any |= linear_lora_fprop(x, l, k);
    fail_if(!any, "--lora-svd-rank %d: no linear of this recipe quantizes its forward weight (fprop.w), so there is no "
            "quantization residual to correct; use an FP4 recipe (e.g. --recipe nvfp4) or --lora-svd-rank 0", R);
    const char* why = linear_lora_obstacle(x);
    fail_if(why, "--lora-svd-rank %d: %s", R, why);
    x->lora_every = every;
    x->lora_have = 0;
    x->lora_done_step = -1;
    const size_t factors = linear_lora_bytes(x), per_layer = (size_t)x->num_layers * x->nkinds;
    cuda_malloc(&x->lora_factors, factors);
    cuda_check(cudaMemset(x->lora_factors, 0, factors));
    cuda_malloc(&x->lora_captured, per_layer * sizeof(float));
    cuda_check(cudaMemset(x->lora_captured, 0, per_layer * sizeof(float)));
    cuda_malloc(&x->lora_tmp, (size_t)x->max_tokens * R * sizeof(floatX));
    cuda_malloc(&x->lora_copy, (size_t)max_m * max_n * sizeof(floatX));
    cuda_malloc(&x->lora_scalars, 4 * sizeof(float));
    lora_work_alloc(&x->lora_work, max_m, max_n, R);
    return factors + per_layer * sizeof(float) + (size_t)x->max_tokens * R * sizeof(floatX) +
           (size_t)max_m * max_n * sizeof(floatX) + 4 * sizeof(float) + lora_work_bytes(max_m, max_n, R);
}

// Refreshes every corrected linear's factors from its weights now: E = W - Q(W) per part (the forward's copy made
// again: its spec and key, the amax pass over the same rows), then lora_factorize_gpu, warm from the factors there.
// Timed in LINEAR_BUCKET_LORA: the W copies (quantize_view's own event pairs) and each linear's residual and
// factorization (a pair each; pairs do not nest).
static void linear_lora_refresh(LinearExec* x) {
    const int R = x->lora_rank;
    int refreshed = 0;
    for (int l = 0; l < x->num_layers; l++)
        for (int k = 0; k < x->nkinds; k++) {
            if (!linear_lora_fprop(x, l, k)) continue;   // (a BF16 forward, e.g. --eval-precision bf16, has none)
            refreshed++;
            const LinearDesc* d = &x->kind[k];
            const LinearPlan* lp = linear_plan_at(x, l, k);
            const floatX* weight = d->w + (size_t)l * d->OC * d->K;
            cuda_check(cudaMemsetAsync(x->lora_scalars, 0, 4 * sizeof(float), x->stream));
            for (int p = 0; p < lp->nparts; p++) {   // the forward's copy of each part's rows, made again
                const LinearPart* part = &lp->part[p];
                const OperandPlan* o = &part->op[SLOT_FPROP_W];
                const TensorView v = linear_source(part, SRC_W, NULL, weight, NULL, 0, d->K, d->OC);
                float* amax = x->lora_scalars + 2 * p;
                const QuantTarget t = quant_target_fake(&o->q, o->axis, linear_key(x, l, k, SLOT_FPROP_W),
                                                        x->lora_copy + (size_t)part->o0 * d->K, d->K, amax, amax + 1);
                x->bucket = LINEAR_BUCKET_LORA;
                quantize_view(x, &v, &t, 1, NULL, /*have_amax=*/0);
            }
            const int timed = event_timer_begin(&x->timer);
            for (int p = 0; p < lp->nparts; p++) {   // E = W - Q(W), each part with its own tensor scale
                const size_t off = (size_t)lp->part[p].o0 * d->K;
                lora_residual_gpu(x->lora_work.E + off, weight + off, x->lora_copy + off, d->K, x->lora_scalars + 2 * p + 1,
                                  lp->part[p].n, d->K, x->stream);
            }
            floatX* vt = linear_lora_vt(x, l, k);
            lora_factorize_gpu(&x->lora_work, x->lora_work.E, d->OC, d->K, R, lora_key(x->seed, x->step, l, k),
                               x->lora_have ? vt : NULL, linear_lora_us(x, l, k), vt,
                               x->lora_captured + (size_t)l * x->nkinds + k, x->stream);
            event_timer_end(&x->timer, timed, LINEAR_BUCKET_LORA);
        }
    if (refreshed) {
        x->lora_have = 1;
        x->lora_done_step = x->step;
    }
}

// Before a forward: refresh at the first training forward of a step that is a multiple of lora_every, and before any
// forward when there are no factors yet (a fresh run's first validation, --eval-only).
static void linear_lora_maybe_refresh(LinearExec* x) {
    if (!x->lora_rank) return;
    const int due = x->fwd_for_backward && x->step % x->lora_every == 0 && x->step != x->lora_done_step;
    if (due || !x->lora_have) linear_lora_refresh(x);
}

// The factors were loaded (a resume): the next refresh is warm from them, at the next step due.
static void linear_lora_loaded(LinearExec* x) {
    x->lora_have = 1;
    x->lora_done_step = -1;
}

// The mean captured fraction of each linear kind over the corrected layers, "qkv 0.0213 attproj ...", into buf.
static void linear_lora_summary(const LinearExec* x, char* buf, size_t cap) {
    buf[0] = '\0';
    if (!x->lora_rank) return;
    const size_t n = (size_t)x->num_layers * x->nkinds;
    float* c = (float*)xmalloc(n * sizeof(float));
    cuda_check(cudaMemcpy(c, x->lora_captured, n * sizeof(float), cudaMemcpyDeviceToHost));
    size_t o = 0;
    for (int k = 0; k < x->nkinds && o < cap; k++) {
        double s = 0.0;
        int cnt = 0;
        for (int l = 0; l < x->num_layers; l++)
            if (linear_lora_fprop(x, l, k)) {
                s += c[(size_t)l * x->nkinds + k];
                cnt++;
            }
        if (cnt) o += (size_t)snprintf(buf + o, cap - o, "%s%s %.4f", o ? " " : "", x->kind[k].name, s / cnt);
    }
    free(c);
}

// ----------------------------------------------------------------------------------------------
// The API the model calls

// out (N x OC) = inp (N x K) @ W^T + b, for layer l's linear `kind` (N: linear_begin_forward's tokens).
static void linear_forward(LinearExec* x, int l, int kind, floatX* out, const floatX* inp) {
    const LinearDesc* d = &x->kind[kind];
    const LinearPlan* lp = linear_plan_at(x, l, kind);
    const floatX* bias = d->b ? d->b + (size_t)l * d->OC : NULL;
    for (int p = 0; p < lp->nparts; p++) {
        LinearRun r = linear_run(x, l, kind, p, inp, NULL);
        for (int i = 0; i < r.plan->npasses[0]; i++) quantize_pass(x, &r, &r.plan->pass[0][i], /*backward=*/0);
        const GemmOut y = {.ptr = out + r.plan->o0, .ld = d->OC, .f32 = 0, .accumulate = 0,
                           .bias = bias ? bias + r.plan->o0 : NULL};
        gemm_run(x, &r, GEMM_FPROP, &y);
    }
    if (linear_lora_fprop(x, l, kind)) {   // + (X V_R)(U_R S_R)^T
        const int timed = event_timer_begin(&x->timer);
        lora_side_forward(out, d->OC, inp, linear_lora_us(x, l, kind), linear_lora_vt(x, l, kind), x->lora_tmp, x->tokens,
                          d->K, d->OC, x->lora_rank, x->stream);
        event_timer_end(&x->timer, timed, LINEAR_BUCKET_LORA);
    }
    probe_pass_done(x, l, kind, /*backward=*/0);
}

// dinp = dout @ W; dW += dout^T @ inp (the bias gradient is the model's: it reads dout in BF16). The data
// gradient of a split QKV sums its parts in FP32 and rounds to BF16 once, as the unsplit GEMM does.
static void linear_backward(LinearExec* x, int l, int kind, floatX* dinp, const floatX* dout, const floatX* inp) {
    const LinearDesc* d = &x->kind[kind];
    const int N = x->tokens, K = d->K;
    const LinearPlan* lp = linear_plan_at(x, l, kind);
    float* dweight = d->dw + (size_t)l * d->OC * K;
    float* dsum = lp->nparts > 1 ? (float*)(x->scratch + split_sum_offset(lp, N, K, d->OC)) : NULL;
    for (int p = 0; p < lp->nparts; p++) {
        LinearRun r = linear_run(x, l, kind, p, inp, dout);
        for (int i = 0; i < r.plan->npasses[1]; i++) quantize_pass(x, &r, &r.plan->pass[1][i], /*backward=*/1);
        const GemmOut dx = dsum ? GemmOut{.ptr = dsum, .ld = K, .f32 = 1, .accumulate = p > 0, .bias = NULL}
                                : GemmOut{.ptr = dinp, .ld = K, .f32 = 0, .accumulate = 0, .bias = NULL};
        gemm_run(x, &r, GEMM_DGRAD, &dx);
        const GemmOut dw = {.ptr = dweight + (size_t)r.plan->o0 * K, .ld = K, .f32 = 1, .accumulate = 1, .bias = NULL};
        gemm_run(x, &r, GEMM_WGRAD, &dw);
        if (x->diag_active && r.plan->compare_w) diag_compare_weights(x, &r);
    }
    if (linear_lora_dgrad(x, l, kind)) {   // + (dY U_R S_R) V_R^T, into the FP32 sum of a split QKV's parts
        const int timed = event_timer_begin(&x->timer);
        const GemmOut dx = dsum ? GemmOut{.ptr = dsum, .ld = K, .f32 = 1, .accumulate = 1, .bias = NULL}
                                : GemmOut{.ptr = dinp, .ld = K, .f32 = 0, .accumulate = 1, .bias = NULL};
        lora_side_dgrad(dx, dout, d->OC, linear_lora_us(x, l, kind), linear_lora_vt(x, l, kind), x->lora_tmp, N, K, d->OC,
                        x->lora_rank, x->stream);
        event_timer_end(&x->timer, timed, LINEAR_BUCKET_LORA);
    }
    if (dsum) {
        const size_t n = (size_t)N * K;
        linear_f32_to_bf16_kernel<<<(unsigned)ceil_div((int64_t)n, 256), 256, 0, x->stream>>>(dinp, dsum, n);
        cuda_check_last();
    }
    probe_pass_done(x, l, kind, /*backward=*/1);
}

// ----------------------------------------------------------------------------------------------
// Diagnostics: the statistics linear_forward/linear_backward gather during one step, as one JSON line per layer
// and linear: {"type":"quant",...} (scripts/quant_table.py prints them).

static void linear_diag_begin(LinearExec* x) {
    size_t n = (size_t)x->num_layers * x->nkinds;
    cuda_check(cudaMemsetAsync(x->diag_stats, 0, n * NUM_SLOTS * sizeof(QuantStats), x->stream));
    cuda_check(cudaMemsetAsync(x->diag_compare, 0, n * sizeof(QuantCompare), x->stream));
    x->diag_active = 1;
}

// Ends the gathering and hands each line to emit(ctx, line).
static void linear_diag_end(LinearExec* x, int step, void (*emit)(void* ctx, const char* line), void* ctx) {
    x->diag_active = 0;
    const int L = x->num_layers;
    size_t n = (size_t)L * x->nkinds;
    QuantStats* st = (QuantStats*)xmalloc(n * NUM_SLOTS * sizeof(QuantStats));
    QuantCompare* cmp = (QuantCompare*)xmalloc(n * sizeof(QuantCompare));
    cuda_check(cudaMemcpy(st, x->diag_stats, n * NUM_SLOTS * sizeof(QuantStats), cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(cmp, x->diag_compare, n * sizeof(QuantCompare), cudaMemcpyDeviceToHost));
    LinearScalars* sc = (LinearScalars*)xmalloc(linear_sites(x) * sizeof(LinearScalars));
    cuda_check(cudaMemcpy(sc, x->scalars, linear_sites(x) * sizeof(LinearScalars), cudaMemcpyDeviceToHost));
    float* captured = NULL;   // --lora-svd-rank: each linear's captured fraction at its last refresh
    if (x->lora_rank) {
        captured = (float*)xmalloc(n * sizeof(float));
        cuda_check(cudaMemcpy(captured, x->lora_captured, n * sizeof(float), cudaMemcpyDeviceToHost));
    }
    for (int l = 0; l < L; l++) {
        if (!recipe_layer_is_fp4(&x->recipe, l, L)) continue;
        for (int k = 0; k < x->nkinds; k++) {
            char line[4096];
            int o = snprintf(line, sizeof(line), "{\"type\":\"quant\",\"step\":%d,\"layer\":%d,\"linear\":\"%s\"",
                             step, l, x->kind[k].name);
            for (int sl = 0; sl < NUM_SLOTS; sl++) {
                const QuantStats* q = &st[((size_t)l * x->nkinds + k) * NUM_SLOTS + sl];
                if (q->n == 0) continue;
                o += snprintf(line + o, sizeof(line) - o, ",\"%s\":{\"relerr\":%.5f,\"flushed\":%.5f,\"clipped\":%.5f}",
                              SLOT_NAMES[sl], q->src2 > 0 ? sqrt(q->err2 / q->src2) : 0.0,
                              (double)q->flushed / q->n, (double)q->clipped / q->n);
            }
            // FP8 path: blocks below the exact window per slot (both parts of a split QKV), this micro-step
            const LinearPlan* lp = linear_plan_at(x, l, k);
            for (int sl = 0; sl < NUM_SLOTS; sl++) {
                unsigned below = 0;
                int fp8 = 0;
                for (int p = 0; p < lp->nparts; p++)
                    if (lp->part[p].op[sl].form == FORM_FP8) {
                        fp8 = 1;
                        below += sc[linear_site(x, l, k, p)].op[sl].fold_below;
                    }
                if (fp8) o += snprintf(line + o, sizeof(line) - o, ",\"%s_fp8_below\":%u", SLOT_NAMES[sl], below);
            }
            const QuantCompare* c = &cmp[(size_t)l * x->nkinds + k];
            if (c->n > 0)
                o += snprintf(line + o, sizeof(line) - o, ",\"w_fwd_bwd\":{\"differ\":%.5f,\"rel\":%.5f}",
                              (double)c->differ / c->n, c->ref2 > 0 ? sqrt(c->diff2 / c->ref2) : 0.0);
            if (captured && linear_lora_fprop(x, l, k))
                o += snprintf(line + o, sizeof(line) - o, ",\"lora_captured\":%.5f", captured[(size_t)l * x->nkinds + k]);
            snprintf(line + o, sizeof(line) - o, "}");
            emit(ctx, line);
        }
    }
    free(st);
    free(cmp);
    free(sc);
    free(captured);
}

// ----------------------------------------------------------------------------------------------
// The timer: event pairs around each quantization pass and each GEMM (the matmul call alone), for every recipe,
// so that a recipe's extra step time over BF16's splits into its quantization, the difference of its GEMMs' time
// and the difference of everything else (dev/bench/bench_train.sh), and each pair's time also into its bucket. The
// pool holds one micro-step's worth: the model harvests it after each forward's synchronisation (when every recorded
// event has completed), the step's end once more.

static void linear_timer_harvest(LinearExec* x) { event_timer_harvest(&x->timer); }

// Milliseconds spent quantizing and in GEMMs since the last call, and per bucket (buckets may be NULL). Call once the
// stream is synchronized.
static void linear_timer_take(LinearExec* x, float* quant_ms, float* gemm_ms, float buckets[LINEAR_BUCKETS]) {
    float b[LINEAR_BUCKETS];
    event_timer_take(&x->timer, b);
    float q = 0.0f, g = 0.0f;
    for (int i = 0; i < LINEAR_BUCKETS; i++) {
        if (i >= LINEAR_BUCKET_GEMM) g += b[i];
        else q += b[i];
        if (buckets) buckets[i] = b[i];
    }
    if (quant_ms) *quant_ms = q;
    if (gemm_ms) *gemm_ms = g;
}

// A bucket's name in the phase_breakdown line: LINEAR.SOURCE.fwd|bwd for a quantization, "diag", LINEAR.GEMM.
static void linear_bucket_name(const LinearExec* x, int b, char* out, size_t cap) {
    if (b < LINEAR_BUCKET_DIAG)
        snprintf(out, cap, "%s.%s.%s", x->kind[b / (2 * NUM_SOURCES)].name, SOURCE_NAMES[(b / 2) % NUM_SOURCES],
                 b % 2 ? "bwd" : "fwd");
    else if (b == LINEAR_BUCKET_DIAG) snprintf(out, cap, "diag");
    else if (b == LINEAR_BUCKET_LORA) snprintf(out, cap, "lora_svd");
    else snprintf(out, cap, "%s.%s", x->kind[(b - LINEAR_BUCKET_GEMM) / NUM_GEMMS].name,
                  GEMM_NAMES[(b - LINEAR_BUCKET_GEMM) % NUM_GEMMS]);
}

// The time per step in each bucket over `steps` steps as one JSON line into buf:
// {"type":"phase_breakdown","steps":N,"quant_ms":{"qkv.X.fwd":...},"gemm_ms":{"qkv.fprop":...}}; buckets that took
// no time are left out. dev/bench/bench_train.sh prints it per recipe. Returns 0 (nothing written) for no steps.
static int linear_phase_breakdown(const LinearExec* x, const double sum[LINEAR_BUCKETS], int steps, char* buf,
                                  size_t cap) {
    if (steps <= 0) return 0;
    char q[2048] = "", g[1024] = "";
    int nq = 0, ng = 0;
    for (int b = 0; b < LINEAR_BUCKETS; b++) {
        if (sum[b] <= 0.0) continue;
        char name[64];
        linear_bucket_name(x, b, name, sizeof(name));
        const int gemm = b >= LINEAR_BUCKET_GEMM;
        char* out = gemm ? g : q;
        int* n = gemm ? &ng : &nq;
        *n += snprintf(out + *n, (gemm ? sizeof(g) : sizeof(q)) - (size_t)*n, "%s\"%s\":%.4f", *n ? "," : "", name,
                       sum[b] / steps);
    }
    snprintf(buf, cap, "{\"type\":\"phase_breakdown\",\"steps\":%d,\"quant_ms\":{%s},\"gemm_ms\":{%s}}", steps, q, g);
    return 1;
}
