// train_gpt_fp4.cu: GPT-2 pretraining in C/CUDA whose linear layers can run their GEMMs in FP4.
//
// One file owns the story: the model's configuration, its parameter and activation tensors, the
// forward and backward passes, the AdamW update, and the training loop with its flags, logs and
// checkpoints. Each kernel lives in a header of its own under llmc/.
//
// Precision (BF16 build): BF16 parameters, activations and GEMM operands; FP32 GEMM accumulation,
// LayerNorm statistics, softmax and loss; FP32 parameter gradients and optimizer state; BF16 master
// weights updated with stochastic rounding (or FP32 master weights with --master-weights fp32).

#include <math.h>
#include <time.h>
#include <errno.h>
#include <unistd.h>
#include <dirent.h>
#include <sys/stat.h>
#include <vector>

#include "llmc/base/common.h"            // defines: fail, fail_if, xmalloc, file helpers
#include "llmc/base/cuda_common.cuh"     // defines: floatX, cuda_check
#include "llmc/base/rng.h"               // defines: rng_key, rng_bits32
#include "llmc/base/matmul.cuh"          // defines: matmul_forward, matmul_dgrad, matmul_wgrad
#include "llmc/adamw.cuh"                // defines: adamw_update
#include "llmc/model/gpt_config.h"       // defines: GPTConfig, config_from_descriptor, config_check
#include "llmc/model/encoder.cuh"        // defines: encoder_forward, encoder_backward
#include "llmc/model/layernorm.cuh"      // defines: layernorm_forward, fused_residual_layernorm_forward, layernorm_backward
#include "llmc/model/gelu.cuh"           // defines: gelu_forward, gelu_backward_inplace
#include "llmc/model/attention.cuh"      // defines: attention_forward, attention_backward
#include "llmc/model/fused_classifier.cuh" // defines: fused_classifier
#include "llmc/model/reduce.cuh"         // defines: bias_backward, sum_squares
#include "llmc/model/target_argmax.cuh"  // defines: target_is_argmax
#include "llmc/nvfp4.cuh"                // defines: Recipe, LinearPlan, QuantTarget, quantize_fast_gpu, matmul_fp8, ...
#include "llmc/run/distributed.cuh"      // defines: Dist, dist_init, dist_allreduce_sum_async, dist_allgather_bf16
#include "llmc/run/dataloader.h"         // defines: DataLoader, dataloader_next_batch, dataloader_global_micro_index
#include "llmc/run/tokenizer.h"          // defines: Tokenizer, tokenizer_decode
#include "llmc/run/args.h"               // defines: Option, parse_options, print_usage
#include "llmc/run/logger.h"             // defines: Logger, logger_line, make_dirs
#include "llmc/run/schedule.h"           // defines: LRSchedule, lr_at_step
#include "llmc/run/checkpoint.h"         // defines: CheckpointWriter, CheckpointReader, CheckpointTrail, find_latest_checkpoint
#include "llmc/run/ckpt_fields.h"        // defines: H_* header fields, config_to_header, config_from_header
#include "llmc/run/batch.h"              // defines: batch_plan
#include "llmc/run/eval_tasks.h"         // defines: EvalTask, eval_task_load, eval_shape, EvalRun, eval_run_fill, eval_run_result

// ----------------------------------------------------------------------------------------------
// Model configuration: GPTConfig and the GPT-2 shapes (d6 ... d48) live in llmc/model/gpt_config.h, with the
// checkpoint header fields that record them, so that the CPU tests can write checkpoints too.

// Fails with the reason when the shape cannot be built; `where` names its source (a checkpoint file).
static void config_require(const GPTConfig* c, const char* where) {
    char err[256];
    if (config_check(c, err, sizeof(err)) == 0) return;
    if (where) fail("%s: %s", where, err);
    fail("%s", err);
}

// ----------------------------------------------------------------------------------------------
// Parameters: a registry of named tensors, laid out in one allocation in this order (the same order
// as the PyTorch reference dump, dev/ref/gpt_ref.py).

enum {
    P_WTE, P_WPE, P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPROJW, P_ATTPROJB,
    P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPROJW, P_FCPROJB, P_LNFW, P_LNFB, NUM_PARAM_TENSORS
};

typedef struct {
    const char* name;
    int per_layer;      // stacked over layers, layer index outermost
    int decay;          // matrices get weight decay; biases and LayerNorm parameters do not
    int residual_proj;  // init scaled by 1/sqrt(2L) (GPT-2)
} ParamInfo;

static const ParamInfo PARAM_INFO[NUM_PARAM_TENSORS] = {
    {"wte", 0, 1, 0},      {"wpe", 0, 1, 0},       {"ln1w", 1, 0, 0},     {"ln1b", 1, 0, 0},
    {"qkvw", 1, 1, 0},     {"qkvb", 1, 0, 0},      {"attprojw", 1, 1, 1}, {"attprojb", 1, 0, 0},
    {"ln2w", 1, 0, 0},     {"ln2b", 1, 0, 0},      {"fcw", 1, 1, 0},      {"fcb", 1, 0, 0},
    {"fcprojw", 1, 1, 1},  {"fcprojb", 1, 0, 0},   {"lnfw", 0, 0, 0},     {"lnfb", 0, 0, 0},
};

// Elements of one tensor (all layers).
static void param_sizes(const GPTConfig* c, size_t sizes[NUM_PARAM_TENSORS]) {
    size_t Vp = c->padded_vocab_size, C = c->channels, L = c->num_layers, maxT = c->max_seq_len;
    sizes[P_WTE] = Vp * C;          sizes[P_WPE] = maxT * C;
    sizes[P_LN1W] = L * C;          sizes[P_LN1B] = L * C;
    sizes[P_QKVW] = L * 3 * C * C;  sizes[P_QKVB] = L * 3 * C;
    sizes[P_ATTPROJW] = L * C * C;  sizes[P_ATTPROJB] = L * C;
    sizes[P_LN2W] = L * C;          sizes[P_LN2B] = L * C;
    sizes[P_FCW] = L * 4 * C * C;   sizes[P_FCB] = L * 4 * C;
    sizes[P_FCPROJW] = L * C * 4 * C; sizes[P_FCPROJB] = L * C;
    sizes[P_LNFW] = C;              sizes[P_LNFB] = C;
}

// Typed views into one flat buffer of parameters (or gradients).
template <typename T>
struct ParamTensors {
    T* t[NUM_PARAM_TENSORS];
    // layer l's slice of a per-layer tensor
    T* layer(int id, int l, size_t per_layer) const { return t[id] + (size_t)l * per_layer; }
};

template <typename T>
static void point_params(ParamTensors<T>* p, T* base, const size_t sizes[NUM_PARAM_TENSORS]) {
    size_t off = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) { p->t[i] = base + off; off += sizes[i]; }
}

// ----------------------------------------------------------------------------------------------
// Activations kept for the backward pass, per layer unless noted. N = B*T tokens.

typedef struct {
    floatX* encoded;     // (N, C) token + position embeddings
    floatX* ln1;         // (L, N, C)
    float* ln1_mean;     // (L, N)
    float* ln1_rstd;     // (L, N)
    floatX* qkv;         // (L, N, 3C)
    floatX* atty;        // (L, N, C) attention output before the projection
    float* att_stats;    // (L, B, NH, T) softmax log-sum-exp
    floatX* residual2;   // (L, N, C) after the attention block
    floatX* ln2;         // (L, N, C)
    float* ln2_mean;     // (L, N)
    float* ln2_rstd;     // (L, N)
    floatX* fch;         // (L, N, 4C) MLP hidden, before GELU
    floatX* fch_gelu;    // (L, N, 4C)
    floatX* residual3;   // (L, N, C) after the MLP block
    floatX* lnf;         // (N, C)
    float* lnf_mean;     // (N)
    float* lnf_rstd;     // (N)
    floatX* logits;      // (N, Vp); the classifier overwrites it with dlogits
    float* losses;       // (N)
    floatX* proj_out;    // (N, C) scratch: output of attproj / fcproj before the residual add
    // backward scratch
    floatX* dresidual;   // (N, C) gradient of the residual stream
    floatX* dbuf_c;      // (N, C)
    floatX* dbuf_3c;     // (N, 3C)
    floatX* dbuf_4c;     // (N, 4C)
} Activations;

// Test hook (test_gpt_fp4.cu checks every GEMM of every linear exactly): called after each GEMM of a
// linear layer with the operands it read, and once more (gemm = -1) when the linear's pass is done.
typedef struct {
    int l, kind, gemm, backward;   // layer, linear (LIN_*), GEMM (0 fprop, 1 dgrad, 2 wgrad; -1: pass done)
    int o0, n;                     // the output channels [o0, o0 + n) of this part (a split QKV has two)
    const floatX* a; int lda; const float* a_dec;   // the operands as the GEMM read them, in the layout of
    const floatX* b; int ldb; const float* b_dec;   // their BF16 source; dec: tensor scale (NULL: 1)
    const uint8_t* a_fp8; const float* a_rs;        // FP8 path (else NULL): the E4M3 operands, reduction axis
    const uint8_t* b_fp8; const float* b_rs;        // contiguous, and their per-row scales (a, b unused)
} GemmProbe;

enum { LIN_QKV, LIN_ATTPROJ, LIN_FC, LIN_FCPROJ, NUM_LINEARS };   // a block's linear layers
static const char* const LINEAR_NAMES[NUM_LINEARS] = {"qkv", "attproj", "fc", "fcproj"};

enum { PHASE_QUANT, PHASE_GEMM, NUM_PHASES };   // what the phase timer measures (see phase_begin)
// The phase timer's finer split (the run's "phase_breakdown" log line): a quantization call of one linear kind's
// source (X, W, dY: SOURCE_NAMES) in the forward or the backward, a diagnostic copy, or one GEMM of a linear kind.
enum { BUCKET_DIAG = NUM_LINEARS * NUM_SOURCES * 2, BUCKET_GEMM, NUM_BUCKETS = BUCKET_GEMM + NUM_LINEARS * NUM_GEMMS };
static int quant_bucket(int kind, int src, int backward) { return (kind * NUM_SOURCES + src) * 2 + backward; }
static int gemm_bucket(int kind, int g) { return BUCKET_GEMM + kind * NUM_GEMMS + g; }

typedef struct {
    GPTConfig config;
    int B, T;                       // largest batch the buffers hold
    size_t param_sizes[NUM_PARAM_TENSORS];
    size_t num_parameters;
    ParamTensors<floatX> params;    // BF16 weights used by the forward pass
    ParamTensors<float> grads;      // FP32, accumulated over micro-steps
    // Optimizer state (FP32 master weights, or NULL for BF16 + stochastic rounding; Adam moments) for
    // the parameters [opt_begin, opt_begin + opt_count): all of them, or this rank's shard (ZeRO-1).
    float* master;
    float* adam_m;
    float* adam_v;
    size_t opt_begin, opt_count;
    size_t params_padded;           // params_memory holds this many (padding lets ZeRO all-gather evenly)
    Dist* dist;                     // NULL: one process
    int zero;                       // 1: optimizer state sharded over ranks, weights all-gathered
    floatX* params_memory;
    float* grads_memory;
    Activations acts;
    void* ln_scratch;
    void* bias_scratch;
    void* norm_scratch;
    float* norm_device;             // one float: sum of squares of all gradients
    EncoderBackward encoder_bw;
    int* inputs_device;
    int* targets_device;
    float* losses_host;
    int adam_t;                     // updates applied so far (bias correction)
    cudaStream_t stream;
    // FP4: the recipe and the plans of its linear layers (see "Linear layers" below)
    Recipe recipe;
    LinearPlan* plans;              // per (layer, linear), built by gpt_set_recipe
    int fp4_any;                    // some slot of some block is quantized
    GemmPath gemm_path;             // emulated, native NVFP4 (compute capability 10.x), or FP8 where operands fold
    uint8_t* fp4_scratch;           // quantized GEMM operands; aliases the logits buffer when that is big enough
    size_t fp4_scratch_bytes;
    int fp4_scratch_owned;
    // device scalars per (layer, linear, part), zeroed once at the start of each forward, so that no
    // amax pass needs a memset of its own
    LinearScalars* fp4_scalars;
    // the delayed amax rule (Recipe.amax_delayed): the previous training micro-step's scalars (its copies' amaxes),
    // copied from fp4_scalars at the end of each backward; amax_prev_ready once a whole micro-step has filled them
    LinearScalars* fp4_scalars_prev;
    int amax_prev_ready;
    // per (layer, linear, part): the backward slots (bits) whose tensor amax this micro-step's forward
    // already took, in a pass that read the same source anyway (QuantPass.ahead)
    unsigned* amax_ahead;
    uint32_t* fold_ahead;           // device: per site, the FP8 fold's per-row maxima of wgrad.x and dgrad.w taken
                                    // ahead by the forward (4C entries each)
    int fwd_for_backward;           // the forward running now will be followed by a backward
    uint64_t fp4_seed;              // SR keys: rng_key(seed, step, tensor id)
    int fp4_step, fp4_micro;
    // diagnostics: per (layer, linear, slot) quantization statistics, and per (layer, linear) the
    // forward/backward weight copy comparison; gathered only while diag_active
    int diag_active;
    QuantStats* diag_stats;         // device, L * NUM_LINEARS * NUM_SLOTS
    QuantCompare* diag_compare;     // device, L * NUM_LINEARS
    // phase timer: CUDA event pairs around each quantization pass and each linear layer's GEMM
    cudaEvent_t* qt_events;
    uint8_t* qt_bucket;             // per pair: its bucket (BUCKET_*, quant_bucket, gemm_bucket)
    int qt_count, qt_capacity;
    int qt_label;                   // the bucket of the quantization calls being made now
    float phase_ms[NUM_PHASES];     // harvested so far this step
    float bucket_ms[NUM_BUCKETS];   // the same per bucket
    void (*probe)(void* ctx, const GemmProbe* p);   // test hook, NULL in training
    void* probe_ctx;
} GPT;

static size_t gpt_per_layer(const GPT* m, int id) {
    return m->param_sizes[id] / m->config.num_layers;
}

template <typename T>
static T* device_alloc(size_t count, size_t* total_bytes) {
    T* p = NULL;
    cuda_malloc(&p, count * sizeof(T));
    if (total_bytes) *total_bytes += count * sizeof(T);
    return p;
}

static void gpt_allocate(GPT* m, const GPTConfig* config, int B, int T, int world) {
    config_require(config, NULL);
    fail_if(T > config->max_seq_len, "sequence length %d exceeds the model's %d positions", T, config->max_seq_len);
    memset(m, 0, sizeof(*m));
    m->config = *config;
    m->B = B;
    m->T = T;
    param_sizes(config, m->param_sizes);
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) m->num_parameters += m->param_sizes[i];
    size_t n = m->num_parameters, bytes = 0;
    m->params_padded = shard_padded_size(n, world);
    m->params_memory = device_alloc<floatX>(m->params_padded, &bytes);
    m->grads_memory = device_alloc<float>(n, &bytes);
    cuda_check(cudaMemset(m->params_memory, 0, m->params_padded * sizeof(floatX)));
    cuda_check(cudaMemset(m->grads_memory, 0, n * sizeof(float)));
    point_params(&m->params, m->params_memory, m->param_sizes);
    point_params(&m->grads, m->grads_memory, m->param_sizes);

    size_t L = config->num_layers, C = config->channels, NH = config->num_heads, Vp = config->padded_vocab_size;
    size_t N = (size_t)B * T;
    Activations* a = &m->acts;
    a->encoded = device_alloc<floatX>(N * C, &bytes);
    a->ln1 = device_alloc<floatX>(L * N * C, &bytes);
    a->ln1_mean = device_alloc<float>(L * N, &bytes);
    a->ln1_rstd = device_alloc<float>(L * N, &bytes);
    a->qkv = device_alloc<floatX>(L * N * 3 * C, &bytes);
    a->atty = device_alloc<floatX>(L * N * C, &bytes);
    a->att_stats = device_alloc<float>(L * B * NH * T, &bytes);
    a->residual2 = device_alloc<floatX>(L * N * C, &bytes);
    a->ln2 = device_alloc<floatX>(L * N * C, &bytes);
    a->ln2_mean = device_alloc<float>(L * N, &bytes);
    a->ln2_rstd = device_alloc<float>(L * N, &bytes);
    a->fch = device_alloc<floatX>(L * N * 4 * C, &bytes);
    a->fch_gelu = device_alloc<floatX>(L * N * 4 * C, &bytes);
    a->residual3 = device_alloc<floatX>(L * N * C, &bytes);
    a->lnf = device_alloc<floatX>(N * C, &bytes);
    a->lnf_mean = device_alloc<float>(N, &bytes);
    a->lnf_rstd = device_alloc<float>(N, &bytes);
    a->logits = device_alloc<floatX>(N * Vp, &bytes);
    a->losses = device_alloc<float>(N, &bytes);
    a->proj_out = device_alloc<floatX>(N * C, &bytes);
    a->dresidual = device_alloc<floatX>(N * C, &bytes);
    a->dbuf_c = device_alloc<floatX>(N * C, &bytes);
    a->dbuf_3c = device_alloc<floatX>(N * 3 * C, &bytes);
    a->dbuf_4c = device_alloc<floatX>(N * 4 * C, &bytes);

    m->ln_scratch = device_alloc<char>(layernorm_backward_scratch_bytes((int)N, (int)C), &bytes);
    m->bias_scratch = device_alloc<char>(bias_backward_scratch_bytes((int)N, (int)(4 * C)), &bytes);
    m->norm_scratch = device_alloc<char>(sum_squares_scratch_bytes(n), &bytes);
    m->norm_device = device_alloc<float>(1, &bytes);
    m->inputs_device = device_alloc<int>(N, &bytes);
    m->targets_device = device_alloc<int>(N, &bytes);
    m->losses_host = (float*)xmalloc(N * sizeof(float));
    encoder_backward_init(&m->encoder_bw, B, T, config->channels);
    cuda_check(cudaStreamCreate(&m->stream));
    printf("model: %d layers, %d heads, %d channels, vocab %d (padded %d), %zu parameters; "
           "GPU memory for parameters, gradients and activations: %.2f GiB\n", config->num_layers,
           config->num_heads, config->channels, config->vocab_size, config->padded_vocab_size, n,
           bytes / (double)(1 << 30));
}

__global__ void bf16_to_float_kernel(float* out, const floatX* in, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __bfloat162float(in[i]);
}

// FP32 master weights start as the BF16 parameters (exact).
static void gpt_init_master_from_params(GPT* m) {
    if (!m->master || m->opt_count == 0) return;
    bf16_to_float_kernel<<<(unsigned)ceil_div((int64_t)m->opt_count, 256), 256, 0, m->stream>>>(
        m->master, m->params_memory + m->opt_begin, m->opt_count);
    cuda_check_last();
}

// Rank 0 prints what each rank sends and receives per optimizer step, with ZeRO-1 on and off (the
// loss and norm scalars, a few bytes, left out), so that the choice can be judged at start.
static void gpt_print_comm_per_step(const GPT* m) {
    const Dist* d = m->dist;
    if (!d || (d->world == 1 && !m->zero)) return;
    const double MiB = 1024.0 * 1024.0;
    double grad_bytes = (double)m->num_parameters * sizeof(float);
    double gather_bytes = (double)m->params_padded * sizeof(floatX);
    double off = dist_ring_allreduce_bytes(d, grad_bytes);
    double on_reduce = dist_ring_share_bytes(d, grad_bytes), on_gather = dist_ring_share_bytes(d, gather_bytes);
    dist_printf(d, "communication per step, sent and received by each of %d ranks (ring algorithms):\n", d->world);
    dist_printf(d, "  ZeRO-1 off: gradient all-reduce %.1f MiB (FP32)%s\n", off / MiB, m->zero ? "" : "   <- this run");
    dist_printf(d, "  ZeRO-1 on:  gradient reduction to shard owners %.1f MiB (FP32) + weight all-gather %.1f MiB "
                "(BF16) = %.1f MiB%s\n", on_reduce / MiB, on_gather / MiB, (on_reduce + on_gather) / MiB,
                m->zero ? "   <- this run" : "");
}

// Optimizer state for the parameters [begin, begin + count): all of them, or one ZeRO-1 shard.
// Needs m->dist and m->zero set (for the traffic summary it prints).
static void gpt_allocate_optimizer(GPT* m, int fp32_master, size_t begin, size_t count) {
    gpt_print_comm_per_step(m);
    m->opt_begin = begin;
    m->opt_count = count;
    size_t alloc = count ? count : 1;
    m->adam_m = device_alloc<float>(alloc, NULL);
    m->adam_v = device_alloc<float>(alloc, NULL);
    m->master = fp32_master ? device_alloc<float>(alloc, NULL) : NULL;
    cuda_check(cudaMemset(m->adam_m, 0, alloc * sizeof(float)));
    cuda_check(cudaMemset(m->adam_v, 0, alloc * sizeof(float)));
}

static void gpt_free(GPT* m) {
    cudaFree(m->params_memory); cudaFree(m->grads_memory); cudaFree(m->adam_m); cudaFree(m->adam_v);
    cudaFree(m->master);
    if (m->fp4_scratch_owned) cudaFree(m->fp4_scratch);
    cudaFree(m->fp4_scalars);
    cudaFree(m->fp4_scalars_prev);
    free(m->amax_ahead);
    cudaFree(m->fold_ahead);
    free(m->plans);
    cudaFree(m->diag_stats);
    cudaFree(m->diag_compare);
    for (int i = 0; i < m->qt_capacity; i++) cudaEventDestroy(m->qt_events[i]);
    free(m->qt_events);
    free(m->qt_bucket);
    Activations* a = &m->acts;
    void* bufs[] = {a->encoded, a->ln1, a->ln1_mean, a->ln1_rstd, a->qkv, a->atty, a->att_stats, a->residual2,
                    a->ln2, a->ln2_mean, a->ln2_rstd, a->fch, a->fch_gelu, a->residual3, a->lnf, a->lnf_mean,
                    a->lnf_rstd, a->logits, a->losses, a->proj_out, a->dresidual, a->dbuf_c, a->dbuf_3c,
                    a->dbuf_4c, m->ln_scratch, m->bias_scratch, m->norm_scratch, m->norm_device,
                    m->inputs_device, m->targets_device};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) cudaFree(bufs[i]);
    encoder_backward_free(&m->encoder_bw);
    free(m->losses_host);
    cudaStreamDestroy(m->stream);
}

// ----------------------------------------------------------------------------------------------
// Initialisation (GPT-2): weights N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)), biases 0,
// LayerNorm weights 1. Normals come from the counter-based generator keyed on (seed, tensor id),
// so the init is the same whatever the GPU.

__global__ void init_normal_kernel(floatX* p, size_t n, float std, uint64_t key) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    // Box-Muller from two 32-bit words of element i
    uint32_t a = rng_bits32(key, 2 * i), b = rng_bits32(key, 2 * i + 1);
    float u1 = ((a >> 8) + 1.0f) * (1.0f / 16777216.0f);   // (0, 1]
    float u2 = (b >> 8) * (1.0f / 16777216.0f);            // [0, 1)
    float z = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    float v = std * z;
    p[i] = __ushort_as_bfloat16(bf16_bits_rne(v));
}

__global__ void fill_kernel(floatX* p, size_t n, float value) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    p[i] = __float2bfloat16(value);
}

static void gpt_init_random(GPT* m, uint64_t seed) {
    const int block = 256;
    float residual_std = 0.02f / sqrtf(2.0f * m->config.num_layers);
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        size_t n = m->param_sizes[id];
        unsigned grid = (unsigned)ceil_div((int64_t)n, block);
        int is_ln_weight = id == P_LN1W || id == P_LN2W || id == P_LNFW;
        int is_matrix = PARAM_INFO[id].decay;
        if (is_matrix) {
            float std = PARAM_INFO[id].residual_proj ? residual_std : 0.02f;
            init_normal_kernel<<<grid, block>>>(m->params.t[id], n, std, rng_key(seed, 0, (uint32_t)id));
        } else {
            fill_kernel<<<grid, block>>>(m->params.t[id], n, is_ln_weight ? 1.0f : 0.0f);
        }
        cuda_check_last();
    }
    // the padded vocabulary rows are never a target: keep them zero
    const GPTConfig* c = &m->config;
    size_t pad = (size_t)(c->padded_vocab_size - c->vocab_size) * c->channels;
    size_t start = (size_t)c->vocab_size * c->channels;
    cuda_check(cudaMemset(m->params.t[P_WTE] + start, 0, pad * sizeof(floatX)));
    cuda_check(cudaDeviceSynchronize());
    gpt_init_master_from_params(m);
}

// ----------------------------------------------------------------------------------------------
// Linear layers. Every transformer linear layer goes through linear_forward and linear_backward, which
// execute the layer's plan (llmc/fp4/linear_plan.h, built once from the recipe by gpt_set_recipe):
//   forward:  quantize what the forward's passes ask of X and W, run the fprop GEMM;
//   backward: quantize what the backward's passes ask of dY, X and W, run the dgrad and wgrad GEMMs.
// BF16 layers run the same code with plans whose operands are all the BF16 sources.
//
// FP4 on Hopper is exact emulation: a quantized operand is a BF16 copy holding code * block scale
// (exact in BF16), the GEMM runs in BF16 with FP32 accumulation, and the operands' FP32 tensor scales
// go into its alpha (a device pointer, so no host synchronisation). A GEMM whose two operands have
// power-of-two (E8M0) block scales runs on FP8 tensor cores instead (--fp4-gemm fp8, the default where it
// applies): its operands are written as E4M3 with a power-of-two offset per GEMM row, exact within a
// window of 14 binades below the row's largest block (llmc/fp4/fp8_fold.h). Every copy is quantized from the
// BF16 source, except that a src=fprop slot (Quartet II's dgrad.w and wgrad.x) quantizes the forward's
// dequantized copy of W or X, which the backward makes again (same spec, key and amax: the same copy; no
// memory kept from the forward). The copies live in the logits buffer, which holds nothing
// between the classifier's forward and backward uses, so an FP4 run needs no more activation memory
// than a BF16 run.

// Input width K and output width OC of each linear, for channels C.
static void linear_shape(int kind, int C, int* K, int* OC) {
    const int k[NUM_LINEARS] = {C, C, C, 4 * C}, oc[NUM_LINEARS] = {3 * C, C, 4 * C, C};
    *K = k[kind];
    *OC = oc[kind];
}

// Sites of per-part state (scalars, amax bits): (layer, linear, part).
static size_t fp4_sites(const GPT* m) { return (size_t)m->config.num_layers * NUM_LINEARS * 2; }
static size_t fp4_site(int l, int kind, int part) { return ((size_t)l * NUM_LINEARS + kind) * 2 + part; }
static const LinearPlan* linear_plan(const GPT* m, int l, int kind) { return &m->plans[(size_t)l * NUM_LINEARS + kind]; }

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

// A rows x cols view of a BF16 tensor, rows ld apart.
typedef struct {
    const floatX* ptr;
    int64_t rows, cols, ld;
} TensorView;

// One part of one linear while it runs: its plan, scalars and sources, and the operands made so far.
typedef struct {
    int l, kind, part;
    const LinearPart* plan;
    LinearScalars* sc;                // device
    TensorView src[NUM_SOURCES];      // X (N x K), W's rows [o0, o0 + n), dY's columns [o0, o0 + n)
    GemmOperand op[NUM_SLOTS];
    uint8_t* scratch;                 // the next free byte of the FP4 scratch
} LinearRun;

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
        if ((s >= 2) != backward) continue;
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

static uint8_t* scratch_take(GPT* m, uint8_t** cursor, size_t bytes) {
    uint8_t* p = *cursor;
    *cursor += scratch_round(bytes);
    fail_if((size_t)(*cursor - m->fp4_scratch) > m->fp4_scratch_bytes,
            "internal: FP4 operands need more scratch than the %zu bytes allocated", m->fp4_scratch_bytes);
    return p;
}

// Native NVFP4 GEMMs need every quantized GEMM to have both operands in NVFP4 (E2M1, E4M3 scales per
// 16); returns NULL when the recipe qualifies, else why not.
static const char* recipe_native_obstacle(const Recipe* r) {
    for (int g = 0; g < NUM_GEMMS; g++) {
        const QuantSpec* a = &r->slot[2 * g];
        const QuantSpec* b = &r->slot[2 * g + 1];
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
        const QuantSpec* a = &r->slot[2 * g];
        const QuantSpec* b = &r->slot[2 * g + 1];
        if (quant_spec_is_bf16(a) || quant_spec_is_bf16(b)) continue;
        QuantParams pa = quant_params(a), pb = quant_params(b);
        n += fp8_foldable(&pa) && fp8_foldable(&pb);
    }
    return n;
}

// Resolves the recipe for this model and builds every linear's plan (again whenever the recipe
// changes). gemm_mode: "native" (or fail), "fp8" (or fail), "emulated", or "auto": native where the GPU and
// the recipe allow, else FP8 for the GEMMs whose operands fold where the GPU has FP8 tensor cores.
static void gpt_set_recipe(GPT* m, const Recipe* r, uint64_t seed, const char* gemm_mode) {
    const int L = m->config.num_layers, C = m->config.channels, N = m->B * m->T;
    m->recipe = *r;
    recipe_resolve_layers(&m->recipe, L);
    recipe_check(&m->recipe);
    m->fp4_seed = seed;
    m->fp4_any = !recipe_is_bf16(&m->recipe) && m->recipe.bf16_first + m->recipe.bf16_last < L;
    m->gemm_path = GEMM_PATH_EMULATED;
    const int is_auto = !strcmp(gemm_mode, "auto");
    if (m->fp4_any && (is_auto || !strcmp(gemm_mode, "native"))) {
        const char* obstacle = matmul_fp4_native_available() ? recipe_native_obstacle(&m->recipe)
                                                             : matmul_fp4_native_reason();
        fail_if(obstacle && !is_auto, "--fp4-gemm native: %s", obstacle);
        if (!obstacle) m->gemm_path = GEMM_PATH_NATIVE;
    }
    if (m->fp4_any && m->gemm_path == GEMM_PATH_EMULATED && (is_auto || !strcmp(gemm_mode, "fp8"))) {
        const char* obstacle = matmul_fp8_reason();
        if (!obstacle && !recipe_fp8_gemms(&m->recipe))
            obstacle = "no GEMM of this recipe has two operands with power-of-two (E8M0) block scales on a 4-bit grid";
        fail_if(obstacle && !is_auto, "--fp4-gemm fp8: %s", obstacle);
        if (!obstacle) m->gemm_path = GEMM_PATH_FP8;
    }
    if (!m->plans) m->plans = (LinearPlan*)xmalloc((size_t)L * NUM_LINEARS * sizeof(LinearPlan));
    size_t need = 0;
    for (int l = 0; l < L; l++)
        for (int kind = 0; kind < NUM_LINEARS; kind++) {
            int K, OC;
            linear_shape(kind, C, &K, &OC);
            LinearPlan* lp = &m->plans[(size_t)l * NUM_LINEARS + kind];
            linear_plan_build(lp, &m->recipe, l, L, kind == LIN_QKV, OC, m->gemm_path);
            size_t b = linear_scratch_bytes(lp, N, K, OC);
            need = need > b ? need : b;
        }
    if (!m->qt_events) {   // the phase timer, for every recipe (bf16 too: its GEMM time is the baseline's)
        // one event pair per quantization call and per GEMM; a harvest window (a backward and the next
        // forward) holds per part a forward of 2 calls + 1 GEMM and a backward of up to 6 calls (MS-EDEN's dY
        // pair as two, src=fprop's two copies made again) + 2 GEMMs, + 1 diagnostic copy per linear: at most
        // 11 for a linear, 20 for a split QKV (its Q/K part is MXFP8: 3 backward calls), so 18 per linear
        // on average covers every layer
        m->qt_capacity = 2 * 18 * NUM_LINEARS * L;
        m->qt_events = (cudaEvent_t*)xmalloc(m->qt_capacity * sizeof(cudaEvent_t));
        m->qt_bucket = (uint8_t*)xmalloc(m->qt_capacity / 2);
        for (int i = 0; i < m->qt_capacity; i++) cuda_check(cudaEventCreate(&m->qt_events[i]));
    }
    if (!m->fp4_any) return;
    if (need > m->fp4_scratch_bytes) {
        if (m->fp4_scratch_owned) cudaFree(m->fp4_scratch);
        m->fp4_scratch_owned = 0;
        size_t logits = (size_t)N * m->config.padded_vocab_size * sizeof(floatX);
        if (need <= logits) {
            m->fp4_scratch = (uint8_t*)m->acts.logits;
            m->fp4_scratch_bytes = logits;
        } else {
            cuda_malloc(&m->fp4_scratch, need);
            m->fp4_scratch_bytes = need;
            m->fp4_scratch_owned = 1;
        }
    }
    if (m->fp4_scalars) return;
    cuda_malloc(&m->fp4_scalars, fp4_sites(m) * sizeof(LinearScalars));
    cuda_malloc(&m->fp4_scalars_prev, fp4_sites(m) * sizeof(LinearScalars));
    m->amax_ahead = (unsigned*)calloc(fp4_sites(m), sizeof(unsigned));
    cuda_malloc(&m->fold_ahead, fp4_sites(m) * 2 * (size_t)(4 * C) * sizeof(uint32_t));
    size_t nstats = (size_t)L * NUM_LINEARS * NUM_SLOTS;
    cuda_malloc(&m->diag_stats, nstats * sizeof(QuantStats));
    cuda_malloc(&m->diag_compare, (size_t)L * NUM_LINEARS * sizeof(QuantCompare));
}

// --bf16-forward-from: from its switch step on, the run's recipe with the forward GEMMs (fprop's two slots
// of every linear) in BF16, dgrad and wgrad as they were (llmc/fp4/recipe_schedule.h says why fprop only). The
// plans are rebuilt as for any recipe change; r is the run's own recipe, to return to with bf16_forward = 0.
static void gpt_set_bf16_forward(GPT* m, const Recipe* r, int bf16_forward, uint64_t seed, const char* gemm_mode) {
    Recipe now = bf16_forward ? recipe_with_bf16_forward(r) : *r;
    gpt_set_recipe(m, &now, seed, gemm_mode);
}

// The phase timer: event pairs around each quantization pass (PHASE_QUANT) and each linear layer's GEMM
// (PHASE_GEMM, the matmul call alone), for every recipe, so that a recipe's extra step time over BF16's splits
// into its quantization, the difference of its GEMMs' time and the difference of everything else
// (dev/bench/bench_train.sh), and each pair's time also into its bucket (which linear kind, which source or GEMM:
// the phase_breakdown log line). The pool holds one micro-step's worth; gpt_forward harvests it after its
// synchronisation (when every recorded event has completed), the step's end once more.
static int phase_begin(GPT* m) {
    if (!m->qt_events || m->qt_count + 2 > m->qt_capacity) return 0;
    cuda_check(cudaEventRecord(m->qt_events[m->qt_count], m->stream));
    return 1;
}

// bucket: a quantization's (quant_bucket, BUCKET_DIAG) or a GEMM's (gemm_bucket)
static void phase_end(GPT* m, int timed, int bucket) {
    if (!timed) return;
    cuda_check(cudaEventRecord(m->qt_events[m->qt_count + 1], m->stream));
    m->qt_bucket[m->qt_count / 2] = (uint8_t)bucket;
    m->qt_count += 2;
}

static void phase_harvest(GPT* m) {
    for (int i = 0; i + 1 < m->qt_count; i += 2) {
        float ms = 0.0f;
        cuda_check(cudaEventElapsedTime(&ms, m->qt_events[i], m->qt_events[i + 1]));
        const int b = m->qt_bucket[i / 2];
        m->phase_ms[b >= BUCKET_GEMM ? PHASE_GEMM : PHASE_QUANT] += ms;
        m->bucket_ms[b] += ms;
    }
    m->qt_count = 0;
}

// Milliseconds spent in each phase and bucket since the last call (out, buckets may be NULL: drop them). Call
// after the stream is synchronized.
static void phase_take_ms(GPT* m, float out[NUM_PHASES], float buckets[NUM_BUCKETS]) {
    phase_harvest(m);
    for (int i = 0; i < NUM_PHASES; i++) {
        if (out) out[i] = m->phase_ms[i];
        m->phase_ms[i] = 0.0f;
    }
    for (int i = 0; i < NUM_BUCKETS; i++) {
        if (buckets) buckets[i] = m->bucket_ms[i];
        m->bucket_ms[i] = 0.0f;
    }
}

// A bucket's name in the phase_breakdown line: LINEAR.SOURCE.fwd|bwd for a quantization, "diag", LINEAR.GEMM.
static void bucket_name(int b, char* out, size_t cap) {
    if (b < BUCKET_DIAG)
        snprintf(out, cap, "%s.%s.%s", LINEAR_NAMES[b / (2 * NUM_SOURCES)], SOURCE_NAMES[(b / 2) % NUM_SOURCES],
                 b % 2 ? "bwd" : "fwd");
    else if (b == BUCKET_DIAG) snprintf(out, cap, "diag");
    else snprintf(out, cap, "%s.%s", LINEAR_NAMES[(b - BUCKET_GEMM) / NUM_GEMMS],
                  GEMM_NAMES[(b - BUCKET_GEMM) % NUM_GEMMS]);
}

// The run's time per step in each bucket, over `steps` steps (those after the first, which builds the plans), as
// one log line: {"type":"phase_breakdown","steps":N,"quant_ms":{"qkv.X.fwd":...},"gemm_ms":{"qkv.fprop":...}};
// buckets that took no time are left out. dev/bench/bench_train.sh prints it per recipe.
static void log_phase_breakdown(Logger* lg, const double sum[NUM_BUCKETS], int steps) {
    if (steps <= 0) return;
    char q[2048] = "", g[1024] = "";
    int nq = 0, ng = 0;
    for (int b = 0; b < NUM_BUCKETS; b++) {
        if (sum[b] <= 0.0) continue;
        char name[64];
        bucket_name(b, name, sizeof(name));
        const int gemm = b >= BUCKET_GEMM;
        char* buf = gemm ? g : q;
        int* n = gemm ? &ng : &nq;
        *n += snprintf(buf + *n, (gemm ? sizeof(g) : sizeof(q)) - (size_t)*n, "%s\"%s\":%.4f", *n ? "," : "", name,
                       sum[b] / steps);
    }
    logger_line(lg, "{\"type\":\"phase_breakdown\",\"steps\":%d,\"quant_ms\":{%s},\"gemm_ms\":{%s}}", steps, q, g);
}

static QuantStats* diag_stats_at(GPT* m, int l, int kind, Slot slot) {
    return m->diag_stats + ((size_t)l * NUM_LINEARS + kind) * NUM_SLOTS + slot;
}

// SR keys differ for every step, micro-batch, layer, linear and slot (the parts of a split QKV share
// them: their elements are disjoint).
static uint64_t fp4_key(const GPT* m, int l, int kind, Slot slot) {
    uint32_t id = (((uint32_t)m->fp4_micro * m->config.num_layers + l) * NUM_LINEARS + kind) * NUM_SLOTS + slot;
    return rng_key(m->fp4_seed, (uint32_t)m->fp4_step, id);
}

static LinearRun linear_run(GPT* m, int l, int kind, int part, const floatX* inp, const floatX* weight,
                            const floatX* dout, int N, int K, int OC) {
    LinearRun r;
    memset(&r, 0, sizeof(r));
    r.l = l;
    r.kind = kind;
    r.part = part;
    r.plan = &linear_plan(m, l, kind)->part[part];
    r.sc = m->fp4_scalars ? m->fp4_scalars + fp4_site(l, kind, part) : NULL;
    for (int s = 0; s < NUM_SOURCES; s++) r.src[s] = linear_source(r.plan, (OperandSource)s, inp, weight, dout, N, K, OC);
    for (int s = 0; s < NUM_SLOTS; s++) {   // BF16 operands read their source; quantize_pass replaces the rest
        const TensorView* v = &r.src[SLOT_SOURCE[s]];
        r.op[s].form = FORM_BF16;
        r.op[s].ptr = v->ptr;
        r.op[s].ld = (int)v->ld;
    }
    r.scratch = m->fp4_scratch;
    return r;
}

// Where the forward keeps the FP8 fold's per-row maxima of a backward copy (wgrad.x or dgrad.w) it takes ahead.
static uint32_t* fold_ahead_at(GPT* m, const LinearRun* r, int slot) {
    const size_t which = fp4_site(r->l, r->kind, r->part) * 2 + (slot == SLOT_DGRAD_W);
    return m->fold_ahead + which * (size_t)(4 * m->config.channels);
}

// The quantizer target of one slot's copy, carved from the scratch; the slot's operand now reads it.
// have_amax: the forward took this copy's amax (and FP8 per-row maxima) ahead.
static QuantTarget operand_target(GPT* m, LinearRun* r, Slot s, int have_amax) {
    const OperandPlan* o = &r->plan->op[s];
    const TensorView* v = &r->src[o->src];
    OperandScalars* sc = &r->sc->op[s];
    GemmOperand* g = &r->op[s];
    g->form = o->form;
    g->dec = &sc->scale_dec;
    const uint64_t key = fp4_key(m, r->l, r->kind, s);
    QuantParams q = o->q;
    // MS-EDEN's signs: one draw per (step, micro-batch, layer, linear), from the linear's dgrad.dy key, shared by
    // its four backward operands (docs/NUMERICS_NEXT.md 2.1)
    if (q.step_signs) quant_params_set_step_signs(&q, fp4_key(m, r->l, r->kind, SLOT_DGRAD_DY));
    if (o->form == FORM_FAKE) {
        floatX* copy = (floatX*)scratch_take(m, &r->scratch, operand_bytes(o, v->rows, v->cols));
        g->ptr = copy;
        g->ld = (int)v->cols;
        return quant_target_fake(&q, o->axis, key, copy, v->cols, &sc->amax, &sc->scale_dec);
    }
    const int64_t R = o->axis ? v->rows : v->cols, K = o->axis ? v->cols : v->rows;
    if (o->form == FORM_FP8) {
        QuantTarget t = quant_target_fake(&q, o->axis, key, NULL, 0, &sc->amax, &sc->scale_dec);
        t.fp8 = scratch_take(m, &r->scratch, (size_t)(R * K));
        t.fold_scale = (float*)scratch_take(m, &r->scratch, (size_t)R * sizeof(float));
        const size_t nmax = (size_t)ceil_div(R, o->q.block_w);
        t.fold_max = (uint32_t*)scratch_take(m, &r->scratch, nmax * sizeof(uint32_t));
        t.fold_below = &sc->fold_below;
        if (have_amax) t.fold_max = fold_ahead_at(m, r, s);
        else cuda_check(cudaMemsetAsync(t.fold_max, 0, nmax * sizeof(uint32_t), m->stream));
        g->fp8 = t.fp8;
        g->row_scale = t.fold_scale;
        return t;
    }
    uint8_t* codes = scratch_take(m, &r->scratch, (size_t)(R * K / 2));
    uint8_t* raw_scales = scratch_take(m, &r->scratch, (size_t)(R * K / 16));
    g->codes = codes;
    g->scales = scratch_take(m, &r->scratch, matmul_fp4_scale_bytes((int)R, (int)(K / 16)));
    return quant_target_packed(&q, o->axis, key, codes, raw_scales, &sc->amax, &sc->scale_dec);
}

// Quantizes a view for 1 or 2 targets (fake or packed copies), amax pass and apply pass, on the quantizer's
// kernels (llmc/fp4/quant_fast.cuh; bit-identical to the CPU twin, dev/test/test_quant_gpu_cpu.cu). A pair they
// take only one at a time (Hadamard sizes with no pair kernel) runs as two passes.
// ahead: a target of a later pass over the same source whose tensor amax the amax pass also takes; returns
// whether it did. have_amax: the targets' amaxes are already in place.
static int quantize_view(GPT* m, const TensorView* v, const QuantTarget* t, int n, const QuantTarget* ahead,
                         int have_amax) {
    const int64_t R = v->rows, Cc = v->cols, ld = v->ld;
    if (n == 2 && !quant_fast_supported(t, 2, R, Cc, ld)) {
        quantize_view(m, v, &t[0], 1, NULL, have_amax);
        quantize_view(m, v, &t[1], 1, NULL, have_amax);
        return 0;
    }
    // recipe_check and recipe_check_shapes refused, before the GPU, every spec and shape the kernels do not
    // take; the views are 16-byte aligned as channels are a multiple of 8 (config_check)
    fail_if(!quant_fast_supported(t, n, R, Cc, ld), "internal: the quantizer does not take a %lld x %lld view (ld %lld) "
            "for %s", (long long)R, (long long)Cc, (long long)ld, n == 1 ? "this target" : "these targets");
    QuantTarget all[3];
    for (int i = 0; i < n; i++) all[i] = t[i];
    int took_ahead = 0;
    const int timed = phase_begin(m);
    if (ahead && !have_amax) {
        all[n] = *ahead;
        took_ahead = quant_fast_supported(all, n + 1, R, Cc, ld);
    }
    if (have_amax) quant_fast_apply_gpu(v->ptr, R, Cc, ld, t, n, m->stream);
    else quantize_fast_gpu(v->ptr, R, Cc, ld, all, n, m->stream, 1, took_ahead);   // both passes, or one (qf_rowfold_ok)
    phase_end(m, timed, m->qt_label);
    return took_ahead;
}

// A src=fprop slot's source (docs/NUMERICS_NEXT.md 2.4): the forward's copy of W or X made again, fake, in the
// source's layout (its fprop slot's spec, key and the amax the forward took: the same bits). The target then
// reads it through src_dec, the forward copy's tensor scale: BF16(FP32(fake) * scale_dec) per element.
static TensorView fprop_copy_again(GPT* m, LinearRun* r, Slot s, QuantTarget* t) {
    const TensorView* v = &r->src[r->plan->op[s].src];
    const Slot fs = s == SLOT_DGRAD_W ? SLOT_FPROP_W : SLOT_FPROP_X;
    const OperandPlan* fo = &r->plan->op[fs];
    OperandScalars* fsc = &r->sc->op[fs];
    floatX* copy = (floatX*)scratch_take(m, &r->scratch, (size_t)(v->rows * v->cols) * sizeof(floatX));
    QuantTarget ft = quant_target_fake(&fo->q, fo->axis, fp4_key(m, r->l, r->kind, fs), copy, v->cols, &fsc->amax,
                                       &fsc->scale_dec);
    quantize_view(m, v, &ft, 1, NULL, 1);
    t->src_dec = &fsc->scale_dec;
    TensorView c = {copy, v->rows, v->cols, v->cols};
    return c;
}

// The delayed amax rule (Recipe.amax_delayed) for a copy of X or dY in a training micro-step, once the previous
// micro-step has left its amaxes, where the whole-block kernels make it (quant_fast_delayed_ok): the copy's tensor
// scale from the previous micro-step's amax of the same slot, and the apply pass takes this one's into the slot's
// amax (zeroed with the scalars at the start of the forward) for the next. Returns whether it did.
static int delayed_amax(GPT* m, const LinearRun* r, Slot s, const TensorView* v, QuantTarget* t) {
    if (!m->recipe.amax_delayed || !m->amax_prev_ready || !m->fwd_for_backward) return 0;
    if (SLOT_SOURCE[s] == SRC_W || r->plan->op[s].from_fprop) return 0;
    if (!quant_fast_delayed_ok(t, v->rows, v->cols, v->ld)) return 0;
    t->amax_next = t->amax;
    t->amax = &m->fp4_scalars_prev[fp4_site(r->l, r->kind, r->part)].op[s].amax;
    return 1;
}

// One pass of the plan: the copies it asks of one source from one read, their scales, and the
// diagnostics' statistics of each.
static void quantize_pass(GPT* m, LinearRun* r, const QuantPass* pass, int backward) {
    const TensorView* v = &r->src[pass->src];
    m->qt_label = quant_bucket(r->kind, pass->src, backward);
    QuantTarget t[2], ahead;
    unsigned* ahead_bits = &m->amax_ahead[fp4_site(r->l, r->kind, r->part)];
    const int have_amax = backward && pass->ntargets == 1 && (*ahead_bits & (1u << pass->target[0]));
    for (int i = 0; i < pass->ntargets; i++) t[i] = operand_target(m, r, pass->target[i], have_amax);
    int delayed[2] = {0, 0};
    for (int i = 0; i < pass->ntargets && !have_amax; i++) delayed[i] = delayed_amax(m, r, pass->target[i], v, &t[i]);
    const int any_delayed = delayed[0] || delayed[1];
    const int want_ahead = !backward && pass->ahead != NO_SLOT && m->fwd_for_backward && !any_delayed;
    if (want_ahead) {   // an amax-only target: its output pointers are never written by an amax pass
        const OperandPlan* o = &r->plan->op[pass->ahead];
        ahead = quant_target_fake(&o->q, o->axis, 0, (floatX*)r->op[pass->target[0]].ptr, v->cols,
                                  &r->sc->op[pass->ahead].amax, &r->sc->op[pass->ahead].scale_dec);
        if (o->form == FORM_FP8) {   // the per-row maxima too, kept for the backward
            const int64_t R = o->axis ? v->rows : v->cols;
            ahead.fake = NULL;
            ahead.fp8 = t[0].fp8;
            ahead.fold_scale = t[0].fold_scale;
            ahead.fold_below = t[0].fold_below;
            ahead.fold_max = fold_ahead_at(m, r, pass->ahead);
            fail_if(R > 4 * m->config.channels, "internal: %lld per-row maxima to keep ahead", (long long)R);
            cuda_check(cudaMemsetAsync(ahead.fold_max, 0, (size_t)ceil_div(R, o->q.block_w) * sizeof(uint32_t), m->stream));
        }
    }
    TensorView from = *v;   // what the pass reads: the source, or for a src=fprop slot the forward's copy made again
    if (backward && pass->ntargets == 1 && r->plan->op[pass->target[0]].from_fprop)
        from = fprop_copy_again(m, r, pass->target[0], &t[0]);
    // no amax pass for a delayed copy (never src=fprop): every copy of the pass delayed, the apply pass of all of them
    // in one call (a dual pass's copies from one read where qf_dual_ok takes them); else a copy that is not runs alone
    if (delayed[0] && (pass->ntargets == 1 || delayed[1]))
        quantize_view(m, v, t, pass->ntargets, NULL, 1);
    else if (any_delayed)
        for (int i = 0; i < pass->ntargets; i++) quantize_view(m, v, &t[i], 1, NULL, delayed[i]);
    else if (quantize_view(m, &from, t, pass->ntargets, want_ahead ? &ahead : NULL, have_amax))
        *ahead_bits |= 1u << pass->ahead;
    for (int i = 0; i < pass->ntargets; i++) {
        const OperandPlan* o = &r->plan->op[pass->target[i]];
        if (o->form != FORM_PACKED) continue;   // the native GEMM reads its scales swizzled
        const int64_t R = o->axis ? v->rows : v->cols, K = o->axis ? v->cols : v->rows;
        fp4_swizzle_scales_gpu((uint8_t*)r->op[pass->target[i]].scales, t[i].scales, (int)R, (int)(K / 16), m->stream);
    }
    if (m->diag_active && !r->plan->qk)   // the statistics describe the recipe's own formats
        for (int i = 0; i < pass->ntargets; i++)
            quant_fast_stats_gpu(from.ptr, from.rows, from.cols, from.ld, &t[i], 1,
                                 diag_stats_at(m, r->l, r->kind, pass->target[i]), m->stream);
}

__global__ void scale_product_kernel(float* out, const float* a, const float* b) { *out = *a * *b; }

// The GEMM's alpha: the product of its operands' tensor scales (NULL when both are BF16 sources).
static const float* gemm_alpha(GPT* m, LinearRun* r, int g) {
    const float* a = r->op[2 * g].dec;
    const float* b = r->op[2 * g + 1].dec;
    if (!a || !b) return a ? a : b;
    scale_product_kernel<<<1, 1, 0, m->stream>>>(&r->sc->alpha[g], a, b);
    cuda_check_last();
    return &r->sc->alpha[g];
}

// Where a GEMM writes: fprop BF16 rows ld apart plus a bias; dgrad BF16, or FP32 (the sum over the
// parts of a split QKV, accumulate after the first); wgrad FP32, always accumulated.
typedef struct {
    void* ptr;
    int ld;
    const floatX* bias;
    int f32, accumulate;
} GemmOut;

static void probe_gemm(GPT* m, const LinearRun* r, int g) {
    if (!m->probe) return;
    const GemmOperand* a = &r->op[2 * g];
    const GemmOperand* b = &r->op[2 * g + 1];
    GemmProbe p = {r->l, r->kind, g, g != GEMM_FPROP, r->plan->o0, r->plan->n, a->ptr, a->ld, a->dec, b->ptr, b->ld, b->dec,
                   a->fp8, a->row_scale, b->fp8, b->row_scale};
    m->probe(m->probe_ctx, &p);
}

static void probe_pass_done(GPT* m, int l, int kind, int backward) {
    if (!m->probe) return;
    GemmProbe p = {l, kind, -1, backward, 0, 0, NULL, 0, NULL, NULL, 0, NULL, NULL, NULL, NULL, NULL};
    m->probe(m->probe_ctx, &p);
}

// GEMM g of one part on the operands its plan made: the one place that dispatches on the operand form.
// The plan gives both operands of a GEMM the same kind of form (packed only with packed).
static void gemm_run(GPT* m, LinearRun* r, int g, const GemmOut* out) {
    const GemmOperand* a = &r->op[2 * g];
    const GemmOperand* b = &r->op[2 * g + 1];
    const int N = (int)r->src[SRC_X].rows, K = (int)r->src[SRC_X].cols, n = r->plan->n;
    const float* alpha = gemm_alpha(m, r, g);
    cudaStream_t s = m->stream;
    const int timed = phase_begin(m);
    if (a->form == FORM_FP8) {   // both operands stored with the reduction axis contiguous (see fp8_fold.h)
        switch (g) {
        case GEMM_FPROP: matmul_fp8(out->ptr, out->ld, 0, a->fp8, a->row_scale, b->fp8, b->row_scale, N, n, K, out->bias,
                                    0, alpha, s); break;
        case GEMM_DGRAD: matmul_fp8(out->ptr, K, out->f32, a->fp8, a->row_scale, b->fp8, b->row_scale, N, K, n, NULL,
                                    out->accumulate, alpha, s); break;
        default:         matmul_fp8(out->ptr, K, 1, a->fp8, a->row_scale, b->fp8, b->row_scale, n, K, N, NULL, 1, alpha, s);
        }
    } else if (a->form == FORM_PACKED) {
        switch (g) {
        case GEMM_FPROP: matmul_fp4_forward((floatX*)out->ptr, a->codes, a->scales, b->codes, b->scales, out->bias,
                                            N, K, n, alpha, s); break;
        case GEMM_DGRAD: matmul_fp4_dgrad((floatX*)out->ptr, a->codes, a->scales, b->codes, b->scales, N, K, n, alpha, s);
                         break;
        default:         matmul_fp4_wgrad((float*)out->ptr, a->codes, a->scales, b->codes, b->scales, N, K, n, alpha, s);
        }
    } else {
        switch (g) {
        case GEMM_FPROP: matmul_forward_ld((floatX*)out->ptr, out->ld, a->ptr, b->ptr, out->bias, N, K, n, alpha, s); break;
        case GEMM_DGRAD:
            if (out->f32) matmul_dgrad_f32_ld((float*)out->ptr, a->ptr, a->ld, b->ptr, N, K, n, out->accumulate, alpha, s);
            else matmul_dgrad_ld((floatX*)out->ptr, a->ptr, a->ld, b->ptr, N, K, n, out->accumulate, alpha, s);
            break;
        default:         matmul_wgrad_ld((float*)out->ptr, a->ptr, a->ld, b->ptr, N, K, n, alpha, s);
        }
    }
    phase_end(m, timed, gemm_bucket(r->kind, g));
    probe_gemm(m, r, g);
}

// Diagnostics: how far the weight copy the forward used is from the one the backward used (seed 002's
// inconsistency; zero with 2D blocks), both in the weight's layout (without a Hadamard, plan.compare_w).
static void diag_compare_weights(GPT* m, LinearRun* r) {
    const OperandPlan* o = &r->plan->op[SLOT_FPROP_W];
    const TensorView* w = &r->src[SRC_W];
    floatX* copy = (floatX*)scratch_take(m, &r->scratch, operand_bytes(o, w->rows, w->cols));
    OperandScalars* sc = &r->sc->diag_fprop_w;
    QuantTarget t = quant_target_fake(&o->q, o->axis, fp4_key(m, r->l, r->kind, SLOT_FPROP_W), copy, w->cols, &sc->amax,
                                      &sc->scale_dec);
    m->qt_label = BUCKET_DIAG;
    quantize_view(m, w, &t, 1, NULL, 0);
    const GemmOperand* dw = &r->op[SLOT_DGRAD_W];
    quant_compare_gpu(dw->ptr, dw->dec, copy, &sc->scale_dec, w->rows * w->cols,
                      m->diag_compare + (size_t)r->l * NUM_LINEARS + r->kind, m->stream);
}

__global__ void f32_to_bf16_kernel(floatX* out, const float* in, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __float2bfloat16_rn(in[i]);
}

// out (N x OC) = inp (N x K) @ weight (OC x K)^T + bias
static void linear_forward(GPT* m, int l, int kind, floatX* out, const floatX* inp, const floatX* weight,
                           const floatX* bias, int N, int K, int OC) {
    const LinearPlan* lp = linear_plan(m, l, kind);
    for (int p = 0; p < lp->nparts; p++) {
        LinearRun r = linear_run(m, l, kind, p, inp, weight, NULL, N, K, OC);
        for (int i = 0; i < r.plan->npasses[0]; i++) quantize_pass(m, &r, &r.plan->pass[0][i], 0);
        const GemmOut y = {out + r.plan->o0, OC, bias ? bias + r.plan->o0 : NULL, 0, 0};
        gemm_run(m, &r, GEMM_FPROP, &y);
    }
    probe_pass_done(m, l, kind, 0);
}

// dinp = dout @ W; dweight += dout^T @ inp; dbias += column sums of dout (from BF16 dout). The data
// gradient of a split QKV sums its parts in FP32 and rounds to BF16 once, as the unsplit GEMM does.
static void linear_backward(GPT* m, int l, int kind, floatX* dinp, float* dweight, float* dbias,
                            const floatX* dout, const floatX* inp, const floatX* weight, int N, int K, int OC) {
    if (dbias) bias_backward(dbias, m->bias_scratch, dout, N, OC, m->stream);
    const LinearPlan* lp = linear_plan(m, l, kind);
    float* dsum = lp->nparts > 1 ? (float*)(m->fp4_scratch + split_sum_offset(lp, N, K, OC)) : NULL;
    for (int p = 0; p < lp->nparts; p++) {
        LinearRun r = linear_run(m, l, kind, p, inp, weight, dout, N, K, OC);
        for (int i = 0; i < r.plan->npasses[1]; i++) quantize_pass(m, &r, &r.plan->pass[1][i], 1);
        const GemmOut dx = dsum ? GemmOut{dsum, K, NULL, 1, p > 0} : GemmOut{dinp, K, NULL, 0, 0};
        gemm_run(m, &r, GEMM_DGRAD, &dx);
        const GemmOut dw = {dweight + (size_t)r.plan->o0 * K, K, NULL, 1, 1};
        gemm_run(m, &r, GEMM_WGRAD, &dw);
        if (m->diag_active && r.plan->compare_w) diag_compare_weights(m, &r);
    }
    if (dsum) {
        const size_t n = (size_t)N * K;
        f32_to_bf16_kernel<<<(unsigned)ceil_div((int64_t)n, 256), 256, 0, m->stream>>>(dinp, dsum, n);
        cuda_check_last();
    }
    probe_pass_done(m, l, kind, 1);
}

// ----------------------------------------------------------------------------------------------
// Forward pass. With targets, also the per-token losses (and, when `backward` is set, the
// classifier writes dlogits in place, scaled by dloss); returns the mean loss (NAN without targets).

static float gpt_forward(GPT* m, const int* inputs, const int* targets, int B, int T, int backward, float dloss) {
    // any B x T within the buffers: evaluation runs more, shorter rows than training (eval_shape)
    fail_if(T > m->T || (int64_t)B * T > (int64_t)m->B * m->T, "internal: batch %dx%d exceeds the allocated %dx%d",
            B, T, m->B, m->T);
    const GPTConfig* c = &m->config;
    int L = c->num_layers, C = c->channels, NH = c->num_heads, V = c->vocab_size, Vp = c->padded_vocab_size;
    int N = B * T;
    cudaStream_t s = m->stream;
    Activations* a = &m->acts;
    ParamTensors<floatX>* p = &m->params;
    cuda_check(cudaMemcpyAsync(m->inputs_device, inputs, N * sizeof(int), cudaMemcpyHostToDevice, s));
    m->fwd_for_backward = backward;
    if (m->amax_ahead) {
        memset(m->amax_ahead, 0, fp4_sites(m) * sizeof(unsigned));
        cuda_check(cudaMemsetAsync(m->fp4_scalars, 0, fp4_sites(m) * sizeof(LinearScalars), s));
    }
    if (targets) cuda_check(cudaMemcpyAsync(m->targets_device, targets, N * sizeof(int), cudaMemcpyHostToDevice, s));

    encoder_forward(a->encoded, m->inputs_device, p->t[P_WTE], p->t[P_WPE], B, T, C, s);
    layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, a->encoded, p->t[P_LN1W], p->t[P_LN1B], N, C, s);
    for (int l = 0; l < L; l++) {
        size_t nc = (size_t)N * C;
        const floatX* residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * nc;
        floatX* ln1 = a->ln1 + l * nc;
        floatX* qkv = a->qkv + l * 3 * nc;
        floatX* atty = a->atty + l * nc;
        float* stats = a->att_stats + (size_t)l * B * NH * T;
        floatX* residual2 = a->residual2 + l * nc;
        floatX* ln2 = a->ln2 + l * nc;
        floatX* fch = a->fch + l * 4 * nc;
        floatX* fch_gelu = a->fch_gelu + l * 4 * nc;
        floatX* residual3 = a->residual3 + l * nc;

        linear_forward(m, l, LIN_QKV, qkv, ln1, p->layer(P_QKVW, l, gpt_per_layer(m, P_QKVW)),
                       p->layer(P_QKVB, l, 3 * C), N, C, 3 * C);
        attention_forward(atty, stats, qkv, B, T, NH, C / NH, s);
        linear_forward(m, l, LIN_ATTPROJ, a->proj_out, atty, p->layer(P_ATTPROJW, l, (size_t)C * C),
                       p->layer(P_ATTPROJB, l, C), N, C, C);
        fused_residual_layernorm_forward(residual2, ln2, a->ln2_mean + (size_t)l * N, a->ln2_rstd + (size_t)l * N,
                                         residual, a->proj_out, p->layer(P_LN2W, l, C), p->layer(P_LN2B, l, C), N, C, s);
        linear_forward(m, l, LIN_FC, fch, ln2, p->layer(P_FCW, l, (size_t)4 * C * C), p->layer(P_FCB, l, 4 * C), N, C, 4 * C);
        gelu_forward(fch_gelu, fch, (size_t)N * 4 * C, s);
        linear_forward(m, l, LIN_FCPROJ, a->proj_out, fch_gelu, p->layer(P_FCPROJW, l, (size_t)4 * C * C),
                       p->layer(P_FCPROJB, l, C), N, 4 * C, C);
        // the residual add of this block, fused with the LayerNorm that opens the next one (or lnf)
        if (l + 1 < L) {
            fused_residual_layernorm_forward(residual3, a->ln1 + (l + 1) * nc, a->ln1_mean + (size_t)(l + 1) * N,
                                             a->ln1_rstd + (size_t)(l + 1) * N, residual2, a->proj_out,
                                             p->layer(P_LN1W, l + 1, C), p->layer(P_LN1B, l + 1, C), N, C, s);
        } else {
            fused_residual_layernorm_forward(residual3, a->lnf, a->lnf_mean, a->lnf_rstd, residual2, a->proj_out,
                                             p->t[P_LNFW], p->t[P_LNFB], N, C, s);
        }
    }
    matmul_forward(a->logits, a->lnf, p->t[P_WTE], NULL, N, C, Vp, NULL, s);
    if (!targets) return NAN;
    fused_classifier(a->logits, a->losses, dloss, m->targets_device, N, V, Vp, backward, s);
    cuda_check(cudaMemcpyAsync(m->losses_host, a->losses, N * sizeof(float), cudaMemcpyDeviceToHost, s));
    cuda_check(cudaStreamSynchronize(s));
    phase_harvest(m);
    double sum = 0.0;
    for (int i = 0; i < N; i++) sum += m->losses_host[i];
    return (float)(sum / N);
}

// ----------------------------------------------------------------------------------------------
// Backward pass: after gpt_forward(..., backward=1), accumulates into the FP32 gradients.

static void gpt_zero_grad(GPT* m) {
    cuda_check(cudaMemsetAsync(m->grads_memory, 0, m->num_parameters * sizeof(float), m->stream));
}

// Sums gradient slices over ranks on the comm stream, overlapped with the rest of the backward pass.
// ZeRO-1: each element's sum goes only to the rank whose optimizer shard holds it, the only rank
// that reads it (gpt_grad_norm and gpt_update work on the shard [opt_begin, opt_begin + opt_count)).
static void gpt_reduce_grads_async(GPT* m, float* const* bufs, const size_t* counts, int n) {
    if (m->zero) dist_reduce_to_shards_async(m->dist, m->grads_memory, m->num_parameters, bufs, counts, n, m->stream);
    else dist_allreduce_sum_async(m->dist, bufs, counts, n, m->stream);
}

// One layer's gradient slices, as soon as the backward pass has finished them.
static void gpt_reduce_layer_grads(GPT* m, int l) {
    float* bufs[NUM_PARAM_TENSORS];
    size_t counts[NUM_PARAM_TENSORS];
    int n = 0;
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        if (!PARAM_INFO[id].per_layer) continue;
        counts[n] = gpt_per_layer(m, id);
        bufs[n] = m->grads.layer(id, l, counts[n]);
        n++;
    }
    gpt_reduce_grads_async(m, bufs, counts, n);
}

// The tensors outside the layers (embeddings, final LayerNorm), after the encoder's backward, then the
// compute stream waits for all of the step's reductions.
static void gpt_reduce_other_grads(GPT* m) {
    float* bufs[NUM_PARAM_TENSORS];
    size_t counts[NUM_PARAM_TENSORS];
    int n = 0;
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        if (PARAM_INFO[id].per_layer) continue;
        counts[n] = m->param_sizes[id];
        bufs[n] = m->grads.t[id];
        n++;
    }
    gpt_reduce_grads_async(m, bufs, counts, n);
    dist_wait(m->dist, m->stream);
}

// reduce: this is the last micro-step of the optimizer step, so the gradients are summed over ranks
// (each layer's as soon as it is final). ZeRO-1 takes this path also with one process (--zero on),
// so that its collectives can be tested on one GPU.
static void gpt_backward(GPT* m, const int* inputs, int B, int T, int reduce) {
    reduce = reduce && m->dist && (m->dist->world > 1 || m->zero);
    const GPTConfig* c = &m->config;
    int L = c->num_layers, C = c->channels, NH = c->num_heads, Vp = c->padded_vocab_size;
    int N = B * T;
    size_t nc = (size_t)N * C;
    cudaStream_t s = m->stream;
    Activations* a = &m->acts;
    ParamTensors<floatX>* p = &m->params;
    ParamTensors<float>* g = &m->grads;

    // classifier: a->logits holds dlogits
    matmul_dgrad(a->dbuf_c, a->logits, p->t[P_WTE], N, C, Vp, NULL, s);
    matmul_wgrad(g->t[P_WTE], a->logits, a->lnf, N, C, Vp, NULL, s);
    cuda_check(cudaMemsetAsync(a->dresidual, 0, nc * sizeof(floatX), s));
    layernorm_backward(a->dresidual, g->t[P_LNFW], g->t[P_LNFB], m->ln_scratch, a->dbuf_c,
                       a->residual3 + (L - 1) * nc, p->t[P_LNFW], a->lnf_mean, a->lnf_rstd, N, C, s);

    for (int l = L - 1; l >= 0; l--) {
        const floatX* residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * nc;
        const floatX* ln1 = a->ln1 + l * nc;
        const floatX* qkv = a->qkv + l * 3 * nc;
        const floatX* atty = a->atty + l * nc;
        const float* stats = a->att_stats + (size_t)l * B * NH * T;
        const floatX* residual2 = a->residual2 + l * nc;
        const floatX* ln2 = a->ln2 + l * nc;
        const floatX* fch = a->fch + l * 4 * nc;
        const floatX* fch_gelu = a->fch_gelu + l * 4 * nc;

        // MLP: dresidual is the gradient of residual3 = residual2 + fcproj(gelu(fc(ln2(residual2))))
        linear_backward(m, l, LIN_FCPROJ, a->dbuf_4c, g->layer(P_FCPROJW, l, (size_t)4 * C * C), g->layer(P_FCPROJB, l, C),
                        a->dresidual, fch_gelu, p->layer(P_FCPROJW, l, (size_t)4 * C * C), N, 4 * C, C);
        gelu_backward_inplace(a->dbuf_4c, fch, (size_t)N * 4 * C, s);
        linear_backward(m, l, LIN_FC, a->dbuf_c, g->layer(P_FCW, l, (size_t)4 * C * C), g->layer(P_FCB, l, 4 * C),
                        a->dbuf_4c, ln2, p->layer(P_FCW, l, (size_t)4 * C * C), N, C, 4 * C);
        layernorm_backward(a->dresidual, g->layer(P_LN2W, l, C), g->layer(P_LN2B, l, C), m->ln_scratch, a->dbuf_c,
                           residual2, p->layer(P_LN2W, l, C), a->ln2_mean + (size_t)l * N, a->ln2_rstd + (size_t)l * N, N, C, s);
        // attention: dresidual is now the gradient of residual2 = residual + attproj(attn(qkv(ln1(residual))))
        linear_backward(m, l, LIN_ATTPROJ, a->dbuf_c, g->layer(P_ATTPROJW, l, (size_t)C * C), g->layer(P_ATTPROJB, l, C),
                        a->dresidual, atty, p->layer(P_ATTPROJW, l, (size_t)C * C), N, C, C);
        attention_backward(a->dbuf_3c, a->dbuf_c, qkv, atty, stats, B, T, NH, C / NH, s);
        linear_backward(m, l, LIN_QKV, a->dbuf_c, g->layer(P_QKVW, l, (size_t)3 * C * C), g->layer(P_QKVB, l, 3 * C),
                        a->dbuf_3c, ln1, p->layer(P_QKVW, l, (size_t)3 * C * C), N, C, 3 * C);
        layernorm_backward(a->dresidual, g->layer(P_LN1W, l, C), g->layer(P_LN1B, l, C), m->ln_scratch, a->dbuf_c,
                           residual, p->layer(P_LN1W, l, C), a->ln1_mean + (size_t)l * N, a->ln1_rstd + (size_t)l * N, N, C, s);
        if (reduce) gpt_reduce_layer_grads(m, l);
    }
    encoder_backward(&m->encoder_bw, g->t[P_WTE], g->t[P_WPE], a->dresidual, inputs, B, T, C, s);
    if (reduce) gpt_reduce_other_grads(m);
    if (m->recipe.amax_delayed && m->fp4_scalars) {   // this micro-step's amaxes are the next one's (delayed rule)
        cuda_check(cudaMemcpyAsync(m->fp4_scalars_prev, m->fp4_scalars, fp4_sites(m) * sizeof(LinearScalars),
                                   cudaMemcpyDeviceToDevice, s));
        m->amax_prev_ready = 1;
    }
}

// Global L2 norm of all gradients (one host synchronisation per step). ZeRO-1: a rank holds the summed
// gradient of its own shard only, so each rank takes the sum of squares of its shard's real elements
// (the padding after the last parameter is not part of the gradients and is never read) and the
// ranks add their sums; NCCL's all-reduce hands every rank the same sum, so all ranks clip, and
// decide on a spike skip, alike.
static float gpt_grad_norm(GPT* m) {
    if (m->zero) {
        sum_squares(m->norm_device, m->norm_scratch, m->grads_memory + m->opt_begin, m->opt_count, m->stream);
        dist_allreduce_sum_f32(m->dist, m->norm_device, 1, m->stream);
    } else {
        sum_squares(m->norm_device, m->norm_scratch, m->grads_memory, m->num_parameters, m->stream);
    }
    float sq = 0.0f;
    cuda_check(cudaMemcpyAsync(&sq, m->norm_device, sizeof(float), cudaMemcpyDeviceToHost, m->stream));
    cuda_check(cudaStreamSynchronize(m->stream));
    return sqrtf(sq);
}

typedef struct {
    float lr, beta1, beta2, eps, weight_decay, grad_clip;
} OptimizerConfig;

// AdamW on every tensor; `step` keys the stochastic rounding. grad_norm is the pre-clip norm.
static void gpt_update(GPT* m, const OptimizerConfig* o, float lr, float grad_norm, int step, uint64_t seed) {
    m->adam_t++;
    AdamWParams a;
    a.lr = lr;
    a.beta1 = o->beta1;
    a.beta2 = o->beta2;
    a.eps = o->eps;
    a.t = m->adam_t;
    a.grad_scale = (o->grad_clip > 0.0f && grad_norm > o->grad_clip) ? o->grad_clip / grad_norm : 1.0f;
    // Each tensor's part inside [opt_begin, opt_begin + opt_count); the element index within the
    // tensor keys the stochastic rounding, so the result does not depend on the sharding.
    size_t lo = m->opt_begin, hi = m->opt_begin + m->opt_count;
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        size_t off = m->params.t[id] - m->params_memory;
        size_t b = off > lo ? off : lo, e = off + m->param_sizes[id] < hi ? off + m->param_sizes[id] : hi;
        if (b >= e) continue;
        a.weight_decay = PARAM_INFO[id].decay ? o->weight_decay : 0.0f;
        a.rng_key = rng_key(seed, (uint32_t)step, 1000u + (uint32_t)id);
        adamw_update(m->params_memory + b, m->master ? m->master + (b - lo) : NULL, m->grads_memory + b,
                     m->adam_m + (b - lo), m->adam_v + (b - lo), e - b, b - off, &a, m->stream);
    }
    if (m->zero) dist_allgather_bf16(m->dist, m->params_memory, m->params_padded, m->stream);
}


// ----------------------------------------------------------------------------------------------
// Loss-spike detector: running mean and variance (exponential) of the loss and the gradient norm;
// an update whose loss or norm sits more than z standard deviations above its mean is skipped.

typedef struct {
    double count, loss_mean, loss_var, norm_mean, norm_var;
} SpikeState;

static int spike_check(SpikeState* s, float z, float loss, float norm, char* why, size_t cap) {
    const double decay = 0.95;
    const int min_history = 20;
    int spike = 0;
    if (z > 0 && s->count >= min_history) {
        double lz = (loss - s->loss_mean) / sqrt(s->loss_var + 1e-12);
        double nz = (norm - s->norm_mean) / sqrt(s->norm_var + 1e-12);
        if (lz > z) { spike = 1; snprintf(why, cap, "loss %.4f is %.1f sd above its mean %.4f", loss, lz, s->loss_mean); }
        else if (nz > z) { spike = 1; snprintf(why, cap, "grad norm %.4f is %.1f sd above its mean %.4f", norm, nz, s->norm_mean); }
    }
    if (!spike) {  // spikes do not pollute the statistics
        if (s->count == 0) { s->loss_mean = loss; s->norm_mean = norm; }
        double dl = loss - s->loss_mean, dn = norm - s->norm_mean;
        s->loss_mean += (1 - decay) * dl;
        s->loss_var = decay * (s->loss_var + (1 - decay) * dl * dl);
        s->norm_mean += (1 - decay) * dn;
        s->norm_var = decay * (s->norm_var + (1 - decay) * dn * dn);
        s->count++;
    }
    return spike;
}

// ----------------------------------------------------------------------------------------------
// FP4 diagnostics: the statistics linear_forward/linear_backward gather during one step, written to
// the log as one {"type":"quant"} line per layer and linear (scripts/quant_table.py prints them).

static void diag_begin(GPT* m) {
    size_t n = (size_t)m->config.num_layers * NUM_LINEARS;
    cuda_check(cudaMemsetAsync(m->diag_stats, 0, n * NUM_SLOTS * sizeof(QuantStats), m->stream));
    cuda_check(cudaMemsetAsync(m->diag_compare, 0, n * sizeof(QuantCompare), m->stream));
    m->diag_active = 1;
}

static void diag_end(GPT* m, Logger* lg, int step) {
    m->diag_active = 0;
    int L = m->config.num_layers;
    size_t n = (size_t)L * NUM_LINEARS;
    QuantStats* st = (QuantStats*)xmalloc(n * NUM_SLOTS * sizeof(QuantStats));
    QuantCompare* cmp = (QuantCompare*)xmalloc(n * sizeof(QuantCompare));
    cuda_check(cudaMemcpy(st, m->diag_stats, n * NUM_SLOTS * sizeof(QuantStats), cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(cmp, m->diag_compare, n * sizeof(QuantCompare), cudaMemcpyDeviceToHost));
    LinearScalars* sc = (LinearScalars*)xmalloc(fp4_sites(m) * sizeof(LinearScalars));
    cuda_check(cudaMemcpy(sc, m->fp4_scalars, fp4_sites(m) * sizeof(LinearScalars), cudaMemcpyDeviceToHost));
    for (int l = 0; l < L; l++) {
        if (!recipe_layer_is_fp4(&m->recipe, l, L)) continue;
        for (int k = 0; k < NUM_LINEARS; k++) {
            char line[4096];
            int o = snprintf(line, sizeof(line), "{\"type\":\"quant\",\"step\":%d,\"layer\":%d,\"linear\":\"%s\"",
                             step, l, LINEAR_NAMES[k]);
            for (int sl = 0; sl < NUM_SLOTS; sl++) {
                const QuantStats* q = &st[((size_t)l * NUM_LINEARS + k) * NUM_SLOTS + sl];
                if (q->n == 0) continue;
                o += snprintf(line + o, sizeof(line) - o, ",\"%s\":{\"relerr\":%.5f,\"flushed\":%.5f,\"clipped\":%.5f}",
                              SLOT_NAMES[sl], q->src2 > 0 ? sqrt(q->err2 / q->src2) : 0.0,
                              (double)q->flushed / q->n, (double)q->clipped / q->n);
            }
            // FP8 path: blocks below the exact window per slot (both parts of a split QKV), this micro-step
            const LinearPlan* lp = linear_plan(m, l, k);
            for (int sl = 0; sl < NUM_SLOTS; sl++) {
                unsigned below = 0;
                int fp8 = 0;
                for (int p = 0; p < lp->nparts; p++)
                    if (lp->part[p].op[sl].form == FORM_FP8) {
                        fp8 = 1;
                        below += sc[fp4_site(l, k, p)].op[sl].fold_below;
                    }
                if (fp8) o += snprintf(line + o, sizeof(line) - o, ",\"%s_fp8_below\":%u", SLOT_NAMES[sl], below);
            }
            const QuantCompare* c = &cmp[(size_t)l * NUM_LINEARS + k];
            if (c->n > 0)
                o += snprintf(line + o, sizeof(line) - o, ",\"w_fwd_bwd\":{\"differ\":%.5f,\"rel\":%.5f}",
                              (double)c->differ / c->n, c->ref2 > 0 ? sqrt(c->diff2 / c->ref2) : 0.0);
            snprintf(line + o, sizeof(line) - o, "}");
            logger_line(lg, "%s", line);
        }
    }
    free(st);
    free(cmp);
    free(sc);
}

// ----------------------------------------------------------------------------------------------
// Checkpoints: model, optimizer state, data position and run state, as the checksummed sections of
// llmc/run/checkpoint.h (written atomically; each section's CRC32 is checked when it is read). The main
// file, ckpt_XXXXXXXX.bin, written by rank 0:
//   header           the model's shape and the run's settings (H_* in llmc/model/gpt_config.h), the recipe text
//   weights          the BF16 parameters
//   optimizer state  rank 0's FP32 master params (if any), then Adam m and v, for the parameters
//                    [opt_begin, opt_begin + opt_count)
//   data position    DataLoaderState
//   rng              RngState: the generators are counter based, keyed on (seed, step): that is their state
//   spike detector   SpikeState
//   recipe schedule  RecipeSchedule (llmc/fp4/recipe_schedule.h): the --bf16-forward-from switch step and whether
//                    the forward ran in BF16 when the file was written (empty in version-2 files: no switch)
// With ZeRO-1 on N > 1 ranks, rank r > 0 writes its own optimizer shard to ckpt_XXXXXXXX.rankRRR.bin
// (same layout, empty weights section) before rank 0 writes the main file, so a main file means a
// complete checkpoint. Resuming needs the same number of ranks and the same ZeRO setting (the shards
// would not line up). A resume reads the header and the small sections on the CPU, before the GPU is
// touched (open_checkpoint, read_run_state), and the weights and optimizer state straight onto the GPU,
// checksummed as they stream (load_checkpoint).

typedef struct {
    uint64_t seed;
    int64_t step;
} RngState;

#define CKPT_CHUNK (64ull << 20)

static void ckpt_must(int rc, const CheckpointReader* r) {
    if (rc) fail("%s", r->err);
}

static void write_device(CheckpointWriter* w, const void* dev, size_t bytes, char* staging) {
    for (size_t off = 0; off < bytes; off += CKPT_CHUNK) {
        size_t n = bytes - off < CKPT_CHUNK ? bytes - off : CKPT_CHUNK;
        cuda_check(cudaMemcpy(staging, (const char*)dev + off, n, cudaMemcpyDeviceToHost));
        ckpt_write(w, staging, n);
    }
}

// The next `bytes` of the section being read into device memory (dev NULL: checksummed and dropped).
static void read_device(CheckpointReader* r, void* dev, size_t bytes, char* staging) {
    for (size_t off = 0; off < bytes; off += CKPT_CHUNK) {
        size_t n = bytes - off < CKPT_CHUNK ? bytes - off : CKPT_CHUNK;
        ckpt_must(ckpt_read(r, staging, n), r);
        if (dev) cuda_check(cudaMemcpy((char*)dev + off, staging, n, cudaMemcpyHostToDevice));
    }
}

typedef struct {
    int step, grad_accum, world, zero;
    uint64_t seed;
    DataLoaderState loader;
    SpikeState spike;
    RecipeSchedule schedule;
    const char* recipe;
} RunState;

static void checkpoint_path(char* out, size_t cap, const char* dir, int step, int rank) {
    if (rank == 0) snprintf(out, cap, "%s/ckpt_%08d.bin", dir, step);
    else snprintf(out, cap, "%s/ckpt_%08d.rank%03d.bin", dir, step, rank);
}

// The optimizer shard file of `rank` next to the main file main_path.
static void checkpoint_shard_path(char* out, size_t cap, const char* main_path, int step, int rank) {
    const char* slash = strrchr(main_path, '/');
    char dir[4096];
    snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - main_path) : 1, slash ? main_path : ".");
    checkpoint_path(out, cap, dir, step, rank);
}

static size_t config_num_parameters(const GPTConfig* c) {
    size_t sizes[NUM_PARAM_TENSORS], n = 0;
    param_sizes(c, sizes);
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) n += sizes[i];
    return n;
}

// Every rank calls this: the ranks that own optimizer shards write them, then rank 0 the main file.
static void save_checkpoint(GPT* m, const char* dir, const RunState* rs) {
    int rank = m->dist ? m->dist->rank : 0;
    int writes = rank == 0 || m->zero;
    cuda_check(cudaDeviceSynchronize());
    if (m->dist && rank == 0) dist_barrier(m->dist);   // wait until the shard files are complete
    if (writes) {
        int32_t h[CKPT_HEADER_INTS] = {0};
        config_to_header(&m->config, h);
        h[H_STEP] = rs->step; h[H_ADAM_T] = m->adam_t; h[H_HAS_MASTER] = m->master != NULL;
        h[H_B] = m->B; h[H_T] = m->T; h[H_GRAD_ACCUM] = rs->grad_accum; h[H_WORLD] = rs->world;
        h[H_ZERO] = m->zero; h[H_RANK] = rank; h[H_HAS_PARAMS] = rank == 0;
        header_set_u64(h, H_OPT_BEGIN_LO, m->opt_begin);
        header_set_u64(h, H_OPT_COUNT_LO, m->opt_count);
        RngState rng = {rs->seed, rs->step};
        char path[4200];
        checkpoint_path(path, sizeof(path), dir, rs->step, rank);
        char* staging = (char*)xmalloc(CKPT_CHUNK);
        CheckpointWriter w;
        ckpt_begin(&w, path, h, rs->recipe);
        ckpt_section(&w, CKPT_WEIGHTS);
        if (rank == 0) write_device(&w, m->params_memory, m->num_parameters * sizeof(floatX), staging);
        ckpt_section(&w, CKPT_OPTIMIZER);
        if (m->master) write_device(&w, m->master, m->opt_count * sizeof(float), staging);
        write_device(&w, m->adam_m, m->opt_count * sizeof(float), staging);
        write_device(&w, m->adam_v, m->opt_count * sizeof(float), staging);
        ckpt_section(&w, CKPT_DATA);
        ckpt_write(&w, &rs->loader, sizeof(rs->loader));
        ckpt_section(&w, CKPT_RNG);
        ckpt_write(&w, &rng, sizeof(rng));
        ckpt_section(&w, CKPT_SPIKE);
        ckpt_write(&w, &rs->spike, sizeof(rs->spike));
        ckpt_section(&w, CKPT_SCHEDULE);
        ckpt_write(&w, &rs->schedule, sizeof(rs->schedule));
        ckpt_commit(&w);
        free(staging);
    }
    if (m->dist && rank != 0) dist_barrier(m->dist);
}

// Opens a checkpoint after checking its header section (magic, version, checksum, length) and the
// model shape it records; every message names the file. CPU only.
static GPTConfig open_checkpoint(CheckpointReader* r, const char* path) {
    ckpt_must(ckpt_open(r, path), r);
    GPTConfig c = config_from_header(r->header);
    char where[4300];
    snprintf(where, sizeof(where), "checkpoint '%s'", path);
    config_require(&c, where);
    const int32_t* h = r->header;
    fail_if(h[H_STEP] < 0 || h[H_ADAM_T] < 0 || h[H_ADAM_T] > h[H_STEP], "%s: its header says %d steps and %d AdamW "
            "updates (written by an incompatible build?)", where, h[H_STEP], h[H_ADAM_T]);
    return c;
}

// The sections must be as long as a model of num_parameters parameters makes them. CPU only.
static void check_checkpoint_sizes(const CheckpointReader* r, size_t num_parameters) {
    const int32_t* h = r->header;
    uint64_t count = header_u64(h, H_OPT_COUNT_LO);
    uint64_t want[CKPT_NUM_SECTIONS] = {0};
    want[CKPT_WEIGHTS] = h[H_HAS_PARAMS] ? num_parameters * sizeof(floatX) : 0;
    want[CKPT_OPTIMIZER] = (h[H_HAS_MASTER] ? 3 : 2) * count * sizeof(float);
    want[CKPT_DATA] = sizeof(DataLoaderState);
    want[CKPT_RNG] = sizeof(RngState);
    want[CKPT_SPIKE] = sizeof(SpikeState);
    want[CKPT_SCHEDULE] = ckpt_sections_in_version(h[CKPT_H_VERSION]) > CKPT_SCHEDULE ? sizeof(RecipeSchedule) : 0;
    for (int s = 1; s < CKPT_NUM_SECTIONS; s++)
        fail_if(r->bytes[s] != want[s], "checkpoint '%s': the %s section holds %llu bytes where its model needs %llu "
                "(written by an incompatible build?)", r->path, CKPT_SECTION_NAMES[s], (unsigned long long)r->bytes[s],
                (unsigned long long)want[s]);
}

// The run state a resume continues from (the data position, rng, spike detector and recipe schedule
// sections, each checksummed, and the header's run settings) and the recipe text. CPU only.
static void read_run_state(CheckpointReader* r, RunState* rs, char* recipe, size_t cap) {
    const int32_t* h = r->header;
    RngState rng;
    ckpt_must(ckpt_read_section(r, CKPT_DATA, &rs->loader, sizeof(rs->loader)), r);
    ckpt_must(ckpt_read_section(r, CKPT_RNG, &rng, sizeof(rng)), r);
    ckpt_must(ckpt_read_section(r, CKPT_SPIKE, &rs->spike, sizeof(rs->spike)), r);
    recipe_schedule_init(&rs->schedule, 0.0f, 0);   // version 2: no schedule section, so no switch
    if (r->bytes[CKPT_SCHEDULE]) {
        ckpt_must(ckpt_read_section(r, CKPT_SCHEDULE, &rs->schedule, sizeof(rs->schedule)), r);
        char why[512];
        fail_if(recipe_schedule_check(&rs->schedule, h[H_STEP], why, sizeof(why)), "checkpoint '%s': %s", r->path, why);
    }
    fail_if(rng.step != h[H_STEP], "checkpoint '%s': its rng section is at step %lld, its header at step %d "
            "(written by an incompatible build?)", r->path, (long long)rng.step, h[H_STEP]);
    fail_if(strlen(r->text) >= cap, "checkpoint '%s': its recipe text is %zu bytes, more than this program writes",
            r->path, strlen(r->text));
    snprintf(recipe, cap, "%s", r->text);
    rs->step = h[H_STEP];
    rs->grad_accum = h[H_GRAD_ACCUM];
    rs->world = h[H_WORLD];
    rs->zero = h[H_ZERO];
    rs->seed = rng.seed;
}

// Before the GPU: rank `rank`'s optimizer shard file of the checkpoint main_path (ZeRO-1) exists and
// belongs to it.
static void check_shard_file(const char* main_path, const CheckpointReader* main, int rank) {
    char path[4200];
    checkpoint_shard_path(path, sizeof(path), main_path, main->header[H_STEP], rank);
    CheckpointReader r;
    GPTConfig c = open_checkpoint(&r, path), mc = config_from_header(main->header);
    fail_if(!config_same_shape(&c, &mc) || r.header[H_STEP] != main->header[H_STEP] || r.header[H_RANK] != rank,
            "checkpoint shard '%s' does not belong to '%s' (another model, step or rank)", path, main_path);
    check_checkpoint_sizes(&r, config_num_parameters(&c));
    ckpt_close(&r);
}

// Loads the parameters from the main file and, with_optimizer, this rank's optimizer state (from the
// main file, or with ZeRO-1 from this rank's shard file); each section's checksum is checked as it
// streams to the GPU, so a damaged file stops the run before it trains.
static void load_checkpoint(GPT* m, const char* path, int with_optimizer) {
    CheckpointReader r;
    GPTConfig c = open_checkpoint(&r, path);
    fail_if(!config_same_shape(&c, &m->config), "checkpoint '%s' holds a different model shape", path);
    fail_if(!r.header[H_HAS_PARAMS], "'%s' is an optimizer shard; give the main checkpoint file", path);
    check_checkpoint_sizes(&r, m->num_parameters);
    char* staging = (char*)xmalloc(CKPT_CHUNK);
    ckpt_must(ckpt_section_begin(&r, CKPT_WEIGHTS), &r);
    read_device(&r, m->params_memory, m->num_parameters * sizeof(floatX), staging);
    ckpt_must(ckpt_section_end(&r), &r);
    if (!with_optimizer) {  // weights only (--init-from): a fresh optimizer
        ckpt_close(&r);
        free(staging);
        gpt_init_master_from_params(m);
        return;
    }
    int rank = m->dist ? m->dist->rank : 0;
    if (rank != 0 && m->zero) {
        char shard_path[4200];
        checkpoint_shard_path(shard_path, sizeof(shard_path), path, r.header[H_STEP], rank);
        ckpt_close(&r);
        open_checkpoint(&r, shard_path);
        check_checkpoint_sizes(&r, m->num_parameters);
    }
    // without ZeRO every rank holds the same optimizer state: rank 0's, in the main file
    uint64_t begin = header_u64(r.header, H_OPT_BEGIN_LO), count = header_u64(r.header, H_OPT_COUNT_LO);
    fail_if(begin != m->opt_begin || count != m->opt_count, "checkpoint '%s' holds optimizer state for "
            "parameters [%llu, %llu), this process needs [%zu, %zu)", r.path, (unsigned long long)begin,
            (unsigned long long)(begin + count), m->opt_begin, m->opt_begin + m->opt_count);
    ckpt_must(ckpt_section_begin(&r, CKPT_OPTIMIZER), &r);
    // saved FP32 masters without --master-weights fp32 are checksummed and dropped (the BF16 params suffice);
    // no saved masters with it: they start from the BF16 params (exact)
    if (r.header[H_HAS_MASTER]) read_device(&r, m->master, count * sizeof(float), staging);
    else gpt_init_master_from_params(m);
    read_device(&r, m->adam_m, count * sizeof(float), staging);
    read_device(&r, m->adam_v, count * sizeof(float), staging);
    ckpt_must(ckpt_section_end(&r), &r);
    m->adam_t = r.header[H_ADAM_T];
    ckpt_close(&r);
    free(staging);
}

// NaN and Inf values in the weights: the BF16 parameters and this rank's FP32 master shard, summed over
// ranks (every rank calls it). A checkpoint is never written from weights that hold any.
__device__ __forceinline__ float as_float(float x) { return x; }
__device__ __forceinline__ float as_float(floatX x) { return __bfloat162float(x); }

template <typename T>
__global__ void count_nonfinite_kernel(const T* p, size_t n, unsigned long long* count) {
    unsigned long long c = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        c += !isfinite(as_float(p[i]));
    if (c) atomicAdd(count, c);
}

static double gpt_count_nonfinite_weights(GPT* m) {
    unsigned long long* d = device_alloc<unsigned long long>(1, NULL);
    unsigned long long h = 0;
    cuda_check(cudaMemset(d, 0, sizeof(*d)));
    count_nonfinite_kernel<<<1024, 256, 0, m->stream>>>(m->params_memory, m->num_parameters, d);
    if (m->master && m->opt_count) count_nonfinite_kernel<<<1024, 256, 0, m->stream>>>(m->master, m->opt_count, d);
    cuda_check_last();
    cuda_check(cudaMemcpyAsync(&h, d, sizeof(h), cudaMemcpyDeviceToHost, m->stream));
    cuda_check(cudaStreamSynchronize(m->stream));
    cudaFree(d);
    return m->dist ? dist_sum_double(m->dist, (double)h) : (double)h;
}

// Stops a run whose loss (or weights) went NaN or Inf, naming the checkpoint to resume from: the
// checkpoint written from the weights that diverged (if any) is set aside (CheckpointTrail).
static void stop_diverged(CheckpointTrail* trail, int rank, const char* what) {
    char where[9000];
    ckpt_trail_diverged(trail, rank == 0, where, sizeof(where));
    fail("%s: training diverged; %s", what, where);
}

// ----------------------------------------------------------------------------------------------
// Evaluation and samples

// Mean loss over the first max_batches validation batches (all of them for 0), averaged over ranks
// (each rank reads its own part of every batch).
static float evaluate(GPT* m, DataLoader* val, int max_batches) {
    dataloader_reset(val);
    int n = val->num_batches < max_batches || max_batches <= 0 ? (int)val->num_batches : max_batches;
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        dataloader_next_batch(val);
        sum += gpt_forward(m, val->inputs, val->targets, val->B, val->T, 0, 0.0f);
    }
    int world = m->dist ? m->dist->world : 1;
    return (float)((m->dist ? dist_sum_double(m->dist, sum) : sum) / ((double)n * world));
}

// Samples `count` tokens after <|endoftext|> at temperature 1. Each token re-runs the forward over a
// window of T_gen positions (causal attention makes the padding after the cursor irrelevant).
static void sample_text(GPT* m, const Tokenizer* tok, int count, uint64_t seed, int step, char* out, size_t cap) {
    const int T_gen = m->T < 256 ? m->T : 256;
    int V = m->config.vocab_size, Vp = m->config.padded_vocab_size;
    const uint32_t eot_id = tok->init_ok ? tok->eot_token : 50256;
    const int eot = eot_id < (uint32_t)V ? (int)eot_id : 0;   // (a tokenizer of another model: never past the embedding)
    int* ids = (int*)xmalloc(sizeof(int) * T_gen);
    uint16_t* row = (uint16_t*)xmalloc(sizeof(uint16_t) * Vp);
    float* probs = (float*)xmalloc(sizeof(float) * V);
    for (int i = 0; i < T_gen; i++) ids[i] = eot;
    uint64_t key = rng_key(seed, (uint32_t)step, 0xFFFF0001u);
    int len = 1;
    for (; len < T_gen && len <= count; len++) {
        gpt_forward(m, ids, NULL, 1, T_gen, 0, 0.0f);
        cuda_check(cudaMemcpy(row, m->acts.logits + (size_t)(len - 1) * Vp, sizeof(uint16_t) * Vp, cudaMemcpyDeviceToHost));
        float mx = -INFINITY;
        for (int v = 0; v < V; v++) {
            uint32_t u = (uint32_t)row[v] << 16;
            memcpy(&probs[v], &u, 4);
            mx = fmaxf(mx, probs[v]);
        }
        double z = 0.0;
        for (int v = 0; v < V; v++) { probs[v] = expf(probs[v] - mx); z += probs[v]; }
        double r = (rng_bits32(key, (uint64_t)len) + 0.5) / 4294967296.0 * z, acc = 0.0;
        int next = V - 1;
        for (int v = 0; v < V; v++) { acc += probs[v]; if (acc >= r) { next = v; break; } }
        ids[len] = next;
    }
    size_t o = 0;
    out[0] = '\0';
    for (int i = 1; i < len && tok->init_ok; i++) {
        const char* piece = tokenizer_decode(tok, (uint32_t)ids[i]);
        if (piece) o += snprintf(out + o, o < cap ? cap - o : 0, "%s", piece);
        if (o >= cap) break;
    }
    free(ids); free(row); free(probs);
}

// ----------------------------------------------------------------------------------------------
// Held-out tasks: HellaSwag and LAMBADA. llmc/run/eval_tasks.h reads their token files, lays out the rows
// and scores them; here the rows run through gpt_forward, the forward that training runs, which gives
// every position's loss, and for LAMBADA target_is_argmax says whether greedy decoding picks each
// target. Precision: the recipe's forward (FP4 as trained: the fprop slots of every FP4 block), or the
// BF16 forward with --eval-precision bf16. An FP4 forward takes its tensor scales over the whole batch
// of rows, so an item's score depends slightly on the rows that share its batch (fixed: the same
// items, ranks and batch shape give the same batches).

#define MAX_EVAL_TASKS 2

typedef struct {
    EvalTask task[MAX_EVAL_TASKS];
    EvalShape shape[MAX_EVAL_TASKS];
    int n_tasks;
    int max_items;           // the first max_items items of each task (0: all)
    int bf16;                // 1: the forward under the BF16 recipe (--eval-precision bf16)
    const char* gemm_mode;   // --fp4-gemm, to restore the recipe's plans after a BF16 evaluation
    const char* dump_dir;    // --eval-dump: per-row scores and the first batch's logits ("": none)
    int* inputs;             // one batch of rows (host), B*T each
    int* targets;
    int* hits_device;        // per position: its target is the argmax of its logits (last-word tasks)
    int* hits_host;
} HeldOut;

typedef struct {
    EvalResult res[MAX_EVAL_TASKS];
    double seconds;
} HeldOutScores;

// CPU side, before the GPU: the tasks named in `names` (comma separated) from their files, each with its
// batch shape within B x T; fails with the file and the problem named.
static void held_out_load(HeldOut* h, const char* names, const char* hellaswag, const char* lambada, int vocab,
                          int B, int T) {
    char list[256], err[2048];
    fail_if(strlen(names) >= sizeof(list), "--eval-tasks '%s' is too long", names);
    snprintf(list, sizeof(list), "%s", names);
    for (char* save = NULL, *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        const int is_hs = strcmp(name, "hellaswag") == 0, is_lb = strcmp(name, "lambada") == 0;
        fail_if(!is_hs && !is_lb, "--eval-tasks: unknown task '%s' (the tasks are hellaswag and lambada)", name);
        for (int k = 0; k < h->n_tasks; k++)
            fail_if(strcmp(h->task[k].name, name) == 0, "--eval-tasks names '%s' twice", name);
        EvalTask* t = &h->task[h->n_tasks];
        fail_if(eval_task_load(t, name, is_hs ? hellaswag : lambada, is_hs ? EVAL_CHOICE : EVAL_LASTWORD, vocab, err,
                               sizeof(err)), "%s", err);
        fail_if(eval_shape(t, B, T, &h->shape[h->n_tasks], err, sizeof(err)), "%s", err);
        h->n_tasks++;
    }
    fail_if(h->n_tasks == 0, "--eval-tasks is empty: name hellaswag, lambada or both");
}

static void held_out_alloc(HeldOut* h, int B, int T) {
    const size_t N = (size_t)B * T;
    h->inputs = (int*)xmalloc(N * sizeof(int));
    h->targets = (int*)xmalloc(N * sizeof(int));
    h->hits_host = (int*)xmalloc(N * sizeof(int));
    cuda_malloc(&h->hits_device, N * sizeof(int));
}

static void held_out_free(HeldOut* h) {
    for (int k = 0; k < h->n_tasks; k++) eval_task_free(&h->task[k]);
    free(h->inputs); free(h->targets); free(h->hits_host);
    cudaFree(h->hits_device);
}

// --eval-dump: the first rows of a batch as the forward saw them, for comparing logits with another
// implementation (dev/eval/check_eval.py). logits.bin: int32 rows, seq, V; int32 tokens[rows][seq];
// BF16 bits logits[rows][seq][V] (the real vocabulary's columns).
static void held_out_dump_logits(const GPT* m, const HeldOut* h, const EvalShape* s) {
    const int rows = s->rows < 4 ? s->rows : 4, V = m->config.vocab_size, Vp = m->config.padded_vocab_size;
    const size_t n = (size_t)rows * s->seq;
    uint16_t* logits = (uint16_t*)xmalloc(n * Vp * sizeof(uint16_t));
    cuda_check(cudaMemcpy(logits, m->acts.logits, n * Vp * sizeof(uint16_t), cudaMemcpyDeviceToHost));
    char path[4200];
    snprintf(path, sizeof(path), "%s/logits.bin", h->dump_dir);
    FILE* f = fopen_check(path, "wb");
    const int32_t head[3] = {rows, s->seq, V};
    fwrite_check(head, sizeof(int32_t), 3, f, path);
    fwrite_check(h->inputs, sizeof(int32_t), n, f, path);
    for (size_t i = 0; i < n; i++) fwrite_check(logits + i * Vp, sizeof(uint16_t), (size_t)V, f, path);
    fclose_check(f, path);
    free(logits);
}

// --eval-dump: every row this rank scored (<task>_rows.tsv, or <task>_rows.rankRRR.tsv on rank RRR > 0).
static void held_out_dump_rows(const HeldOut* h, const EvalRun* r, int rank, int step) {
    char path[4200];
    if (rank == 0) snprintf(path, sizeof(path), "%s/%s_rows.tsv", h->dump_dir, r->task->name);
    else snprintf(path, sizeof(path), "%s/%s_rows.rank%03d.tsv", h->dump_dir, r->task->name, rank);
    FILE* f = fopen_check(path, "w");
    fprintf(f, "# %s step %d seq %d rows %d precision %s\nitem\tcandidate\tloss_sum\ttokens\thit\ttruncated\n",
            r->task->name, step, r->shape.seq, r->shape.rows, h->bf16 ? "bf16" : "recipe");
    for (int64_t k = 0; k < r->n_rows; k++)
        fprintf(f, "%d\t%d\t%.9g\t%d\t%d\t%d\n", r->row_item[k], r->row_cand[k], r->row_loss[k], r->row_ntok[k],
                r->row_hit[k], r->row_trunc[k]);
    fclose_check(f, path);
}

// Task k over this rank's items, then summed over ranks. step keys any stochastic rounding of the
// forward slots, so the same checkpoint gives the same numbers in the training run and with --eval-only
// (with the same --seed, batch shape and number of processes).
static EvalResult held_out_task(GPT* m, HeldOut* h, int k, int step) {
    const EvalTask* t = &h->task[k];
    const EvalShape* s = &h->shape[k];
    const int rank = m->dist ? m->dist->rank : 0, world = m->dist ? m->dist->world : 1;
    const int N = s->rows * s->seq, lastword = t->kind == EVAL_LASTWORD;
    EvalRun run;
    eval_run_init(&run, t, s, h->max_items, rank, world);
    for (int batch = 0; !eval_run_done(&run); batch++) {
        eval_run_fill(&run, h->inputs, h->targets);
        m->fp4_step = step;
        m->fp4_micro = batch;
        gpt_forward(m, h->inputs, h->targets, s->rows, s->seq, 0, 0.0f);   // per-position losses in losses_host
        if (lastword) {
            target_is_argmax(m->acts.logits, m->targets_device, h->hits_device, N, m->config.vocab_size,
                             m->config.padded_vocab_size, m->stream);
            cuda_check(cudaMemcpyAsync(h->hits_host, h->hits_device, N * sizeof(int), cudaMemcpyDeviceToHost, m->stream));
            cuda_check(cudaStreamSynchronize(m->stream));
        }
        if (h->dump_dir[0] && k == 0 && batch == 0 && rank == 0) held_out_dump_logits(m, h, s);
        eval_run_take(&run, m->losses_host, lastword ? h->hits_host : NULL, h->targets);
    }
    if (h->dump_dir[0]) held_out_dump_rows(h, &run, rank, step);
    EvalResult r = eval_run_result(&run);
    eval_run_free(&run);
    if (m->dist) {
        r.items = dist_sum_double(m->dist, r.items);
        r.correct = dist_sum_double(m->dist, r.correct);
        r.loss_sum = dist_sum_double(m->dist, r.loss_sum);
        r.tokens = dist_sum_double(m->dist, r.tokens);
        r.truncated = dist_sum_double(m->dist, r.truncated);
    }
    return r;
}

// Every task, in the precision asked for (every rank calls this).
static HeldOutScores held_out_evaluate(GPT* m, HeldOut* h, int step) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const Recipe trained = m->recipe;
    const int to_bf16 = h->bf16 && m->fp4_any;
    if (to_bf16) {
        Recipe bf16;
        recipe_preset(&bf16, "bf16");
        gpt_set_recipe(m, &bf16, m->fp4_seed, "emulated");
    }
    HeldOutScores sc;
    memset(&sc, 0, sizeof(sc));
    for (int k = 0; k < h->n_tasks; k++) sc.res[k] = held_out_task(m, h, k, step);
    if (to_bf16) gpt_set_recipe(m, &trained, m->fp4_seed, h->gemm_mode);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    sc.seconds = (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
    return sc;
}

// A number for a JSON line: non-finite values (an untrained model's perplexity can overflow) as null.
static const char* json_num(double x, char* buf, size_t cap) {
    if (isfinite(x)) snprintf(buf, cap, "%.6f", x);
    else snprintf(buf, cap, "null");
    return buf;
}

// The progress line (rank 0) and the log line {"type":"eval",...}; `fields` (may be "") go in after
// the type, e.g. the checkpoint of an --eval-only run.
static void held_out_report(const Dist* d, Logger* lg, const HeldOut* h, const HeldOutScores* sc, int step,
                            long long tokens, const char* fields) {
    char text[1024], json[2048], num[64];
    int o = snprintf(text, sizeof(text), "step %d | eval (%s forward)", step, h->bf16 ? "bf16" : "recipe");
    int j = snprintf(json, sizeof(json), "{\"type\":\"eval\"%s,\"step\":%d,\"tokens\":%lld,\"precision\":\"%s\","
                     "\"seconds\":%.3f", fields, step, tokens, h->bf16 ? "bf16" : "recipe", sc->seconds);
    for (int k = 0; k < h->n_tasks; k++) {
        const EvalTask* t = &h->task[k];
        const EvalResult* r = &sc->res[k];
        const double acc = r->items > 0 ? r->correct / r->items : NAN;
        o += snprintf(text + o, sizeof(text) - o, " | %s %.2f%%", t->name, 100.0 * acc);
        j += snprintf(json + j, sizeof(json) - j, ",\"%s_acc\":%s,\"%s_items\":%.0f,\"%s_seq\":%d", t->name,
                      json_num(acc, num, sizeof(num)), t->name, r->items, t->name, h->shape[k].seq);
        if (t->kind == EVAL_LASTWORD) {
            const double ppl = exp(r->loss_sum / r->items);
            o += snprintf(text + o, sizeof(text) - o, " ppl %.2f", ppl);
            j += snprintf(json + j, sizeof(json) - j, ",\"%s_ppl\":%s", t->name, json_num(ppl, num, sizeof(num)));
        }
        o += snprintf(text + o, sizeof(text) - o, " of %.0f", r->items);
        if (r->truncated > 0) {
            o += snprintf(text + o, sizeof(text) - o, " (%.0f with the context cut to %d tokens)", r->truncated,
                          h->shape[k].seq);
            j += snprintf(json + j, sizeof(json) - j, ",\"%s_truncated\":%.0f", t->name, r->truncated);
        }
    }
    snprintf(text + o, sizeof(text) - o, " | %.1f s", sc->seconds);
    snprintf(json + j, sizeof(json) - j, "}");
    dist_printf(d, "%s\n", text);
    logger_line(lg, "%s", json);
}

#ifndef TESTING
// ----------------------------------------------------------------------------------------------
// Command line

typedef struct {
    const char* train_data;
    const char* val_data;
    const char* tokenizer;
    const char* out_dir;
    const char* model;
    const char* init_from;
    const char* resume;
    int batch_size, seq_len, total_batch, steps;
    float lr, final_lr_frac, wsd_decay_frac;
    int warmup;
    const char* schedule;
    float beta1, beta2, eps, weight_decay, grad_clip;
    const char* master_weights;
    int seed;
    int val_every, val_batches, sample_every, sample_tokens, ckpt_every;
    float spike_z;
    int shuffle;
    float peak_tflops;
    const char* zero;
    const char* nccl_id_file;
    int diag_every;
    const char* fp4_gemm_mode;
    const char* amax;
    const char* recipe;
    const char* slot_override[NUM_SLOTS];
    int fp4_gemm[3];
    int bf16_first_layers, bf16_last_layers;
    int qk_fp8;
    const char* bf16_forward_from;
    int allow_recipe_change;
    int eval_every, eval_items, eval_only;
    const char* eval_tasks;
    const char* hellaswag;
    const char* lambada;
    const char* eval_precision;
    const char* eval_dump;
} TrainConfig;

static TrainConfig default_config(void) {
    TrainConfig t;
    memset(&t, 0, sizeof(t));
    t.train_data = "data/tinyshakespeare/tiny_shakespeare_train.bin";
    t.val_data = "data/tinyshakespeare/tiny_shakespeare_val.bin";
    t.tokenizer = "data/gpt2_tokenizer.bin";
    t.out_dir = "out";
    t.model = "";   // d12 for a new run; with --resume / --init-from the checkpoint's
    t.init_from = "";
    t.resume = "";
    t.batch_size = 8; t.seq_len = 1024; t.total_batch = 0; t.steps = 100;
    t.lr = 6e-4f; t.warmup = 10; t.schedule = "cosine"; t.final_lr_frac = 0.1f; t.wsd_decay_frac = 0.2f;
    t.beta1 = 0.9f; t.beta2 = 0.95f; t.eps = 1e-8f; t.weight_decay = 0.1f; t.grad_clip = 1.0f;
    t.master_weights = "bf16";
    t.seed = 1337;
    t.val_every = 25; t.val_batches = 20; t.sample_every = 50; t.sample_tokens = 64; t.ckpt_every = 0;
    t.spike_z = 0.0f;
    t.shuffle = 1;
    t.peak_tflops = 989.0f;
    t.zero = "auto";
    t.diag_every = 50;
    t.fp4_gemm_mode = "auto";
    t.amax = "now";
    t.nccl_id_file = "";
    t.recipe = "bf16";
    for (int i = 0; i < NUM_SLOTS; i++) t.slot_override[i] = "";
    t.fp4_gemm[0] = t.fp4_gemm[1] = t.fp4_gemm[2] = 1;
    t.bf16_first_layers = t.bf16_last_layers = -1;
    t.eval_every = 0; t.eval_items = 0; t.eval_only = 0;
    t.eval_tasks = "hellaswag,lambada";
    t.hellaswag = "data/eval/hellaswag_val.bin";
    t.lambada = "data/eval/lambada_test.bin";
    t.eval_precision = "recipe";
    t.eval_dump = "";
    t.bf16_forward_from = "";
    return t;
}

int main(int argc, char** argv) {
    TrainConfig tc = default_config();
    const Option options[] = {
        {"train-data", 'i', OPT_STRING, &tc.train_data, NULL, "training shards (glob pattern, llm.c .bin format)"},
        {"val-data", 'j', OPT_STRING, &tc.val_data, NULL, "validation shards (glob pattern); empty: no validation"},
        {"tokenizer", 0, OPT_STRING, &tc.tokenizer, NULL, "tokenizer file for decoding samples"},
        {"out-dir", 'o', OPT_STRING, &tc.out_dir, NULL, "directory for log.jsonl and checkpoints"},
        {"model", 'e', OPT_CHOICE, &tc.model, "d6|d12|d24|d36|d48", "model size (GPT-2 shapes; d12 = 124M); default d12, or with --resume/--init-from the checkpoint's (which must agree with --model if both are given)"},
        {"init-from", 0, OPT_STRING, &tc.init_from, NULL, "start from this checkpoint's weights (fresh optimizer)"},
        {"resume", 0, OPT_STRING, &tc.resume, NULL, "resume a run: a checkpoint path, or 'latest' in --out-dir"},
        {"batch-size", 'b', OPT_INT, &tc.batch_size, NULL, "micro-batch size (sequences per GPU per micro-step)"},
        {"seq-len", 't', OPT_INT, &tc.seq_len, NULL, "sequence length"},
        {"total-batch", 'd', OPT_INT, &tc.total_batch, NULL, "tokens per optimizer step (0: one micro-batch); gradient accumulation makes up the rest"},
        {"steps", 'x', OPT_INT, &tc.steps, NULL, "optimizer steps"},
        {"lr", 'l', OPT_FLOAT, &tc.lr, NULL, "peak learning rate"},
        {"warmup", 'u', OPT_INT, &tc.warmup, NULL, "linear warmup steps"},
        {"schedule", 0, OPT_CHOICE, &tc.schedule, "cosine|linear|constant|wsd", "learning-rate schedule after warmup"},
        {"final-lr-frac", 'q', OPT_FLOAT, &tc.final_lr_frac, NULL, "final learning rate as a fraction of the peak"},
        {"wsd-decay-frac", 0, OPT_FLOAT, &tc.wsd_decay_frac, NULL, "wsd: fraction of steps spent decaying"},
        {"beta1", 0, OPT_FLOAT, &tc.beta1, NULL, "AdamW beta1"},
        {"beta2", 0, OPT_FLOAT, &tc.beta2, NULL, "AdamW beta2"},
        {"eps", 0, OPT_FLOAT, &tc.eps, NULL, "AdamW epsilon"},
        {"weight-decay", 'c', OPT_FLOAT, &tc.weight_decay, NULL, "AdamW weight decay (matrices only)"},
        {"grad-clip", 0, OPT_FLOAT, &tc.grad_clip, NULL, "clip the global gradient norm to this (0: off)"},
        {"master-weights", 0, OPT_CHOICE, &tc.master_weights, "bf16|fp32", "bf16: BF16 weights updated with stochastic rounding; fp32: FP32 master copy"},
        {"seed", 0, OPT_INT, &tc.seed, NULL, "seed for init, data order and stochastic rounding"},
        {"val-every", 'v', OPT_INT, &tc.val_every, NULL, "validation loss every N steps and at the end (0: off)"},
        {"val-batches", 'm', OPT_INT, &tc.val_batches, NULL, "batches per validation (0: the whole split)"},
        {"sample-every", 's', OPT_INT, &tc.sample_every, NULL, "print a text sample every N steps (0: off)"},
        {"sample-tokens", 'g', OPT_INT, &tc.sample_tokens, NULL, "tokens per sample"},
        {"ckpt-every", 'n', OPT_INT, &tc.ckpt_every, NULL, "checkpoint every N steps and at the end (0: at the end only; -1: never, for benchmarks)"},
        {"spike-z", 0, OPT_FLOAT, &tc.spike_z, NULL, "skip an update whose loss or grad norm is this many sd above its running mean (0: off)"},
        {"shuffle", 0, OPT_BOOL, &tc.shuffle, NULL, "shuffle shards and sequences each epoch (on|off)"},
        {"peak-tflops", 0, OPT_FLOAT, &tc.peak_tflops, NULL, "the GPU's dense BF16 peak, for MFU (H100/H200 SXM: 989)"},
        {"zero", 0, OPT_CHOICE, &tc.zero, "auto|on|off", "ZeRO-1: shard the optimizer state, reduce each gradient to its shard's owner, all-gather the weights; auto: on with several processes; on: also with one (tests the path on one GPU)"},
        {"nccl-id-file", 0, OPT_STRING, &tc.nccl_id_file, NULL, "launch without MPI: a path on a shared filesystem where rank 0 leaves NCCL's id (or set NCCL_COMM_ID)"},
        {"recipe", 'r', OPT_CHOICE, &tc.recipe, "bf16|nvfp4|nvfp4-naive|mxfp4|mxfp4-2d|ufp4|nvfp4-4o6|quartet2|quartet2-4o6",
         "precision recipe of the linear layers' GEMMs (see README)"},
        {"fprop-x", 0, OPT_STRING, &tc.slot_override[SLOT_FPROP_X], NULL, "override slot fprop.x: a spec like bf16, nvfp4, 'nvfp4,sr', 'mxfp4-2d,h32'"},
        {"fprop-w", 0, OPT_STRING, &tc.slot_override[SLOT_FPROP_W], NULL, "override slot fprop.w"},
        {"dgrad-dy", 0, OPT_STRING, &tc.slot_override[SLOT_DGRAD_DY], NULL, "override slot dgrad.dy"},
        {"dgrad-w", 0, OPT_STRING, &tc.slot_override[SLOT_DGRAD_W], NULL, "override slot dgrad.w"},
        {"wgrad-dy", 0, OPT_STRING, &tc.slot_override[SLOT_WGRAD_DY], NULL, "override slot wgrad.dy"},
        {"wgrad-x", 0, OPT_STRING, &tc.slot_override[SLOT_WGRAD_X], NULL, "override slot wgrad.x"},
        {"fp4-fprop", 0, OPT_BOOL, &tc.fp4_gemm[0], NULL, "off: the forward GEMM stays BF16 (on|off)"},
        {"fp4-dgrad", 0, OPT_BOOL, &tc.fp4_gemm[1], NULL, "off: the data-gradient GEMM stays BF16 (on|off)"},
        {"fp4-wgrad", 0, OPT_BOOL, &tc.fp4_gemm[2], NULL, "off: the weight-gradient GEMM stays BF16 (on|off)"},
        {"bf16-first-layers", 0, OPT_INT, &tc.bf16_first_layers, NULL, "blocks at the start kept in BF16 (-1: the recipe's rule)"},
        {"bf16-last-layers", 0, OPT_INT, &tc.bf16_last_layers, NULL, "blocks at the end kept in BF16 (-1: the recipe's rule)"},
        {"qk-fp8", 0, OPT_BOOL, &tc.qk_fp8, NULL, "Q and K projections in MXFP8 (E4M3, 1x32, E8M0) where the recipe uses FP4 (on|off)"},
        {"bf16-forward-from", 0, OPT_STRING, &tc.bf16_forward_from, NULL, "FRACTION in (0, 1]: the last FRACTION of the steps run the forward GEMMs (fprop of every quantized linear) in BF16; dgrad and wgrad keep the recipe (e.g. 0.1; see README)"},
        {"fp4-gemm", 0, OPT_CHOICE, &tc.fp4_gemm_mode, "auto|native|fp8|emulated", "FP4 GEMMs: native cuBLASLt NVFP4 (compute capability 10.x), FP8 tensor cores for E8M0-scaled (MXFP4) operands (9.0+), exact BF16 emulation, or auto (native, else fp8 where operands fold)"},
        {"amax", 0, OPT_CHOICE, &tc.amax, "now|delayed", "FP32 tensor scales of the X and dY copies: from this micro-step's amax (an amax pass reads the tensor first), or delayed: from the previous micro-step's, where the whole-block kernels make the copy (a numerics change; README, \"The delayed amax\")"},
        {"diag-every", 0, OPT_INT, &tc.diag_every, NULL, "FP4 diagnostics (per layer and slot: error, flushed, clipped, weight copy disagreement) in the log every N steps (0: off)"},
        {"allow-recipe-change", 0, OPT_BOOL, &tc.allow_recipe_change, NULL, "let --resume continue a checkpoint under a different recipe (on|off)"},
        {"eval-every", 0, OPT_INT, &tc.eval_every, NULL, "HellaSwag and LAMBADA accuracy every N steps and after the last (0: off)"},
        {"eval-tasks", 0, OPT_STRING, &tc.eval_tasks, NULL, "held-out tasks to run, comma separated: hellaswag, lambada"},
        {"hellaswag", 0, OPT_STRING, &tc.hellaswag, NULL, "HellaSwag token file (python3 dev/data/eval_prepro.py writes it)"},
        {"lambada", 0, OPT_STRING, &tc.lambada, NULL, "LAMBADA token file (python3 dev/data/eval_prepro.py writes it)"},
        {"eval-items", 0, OPT_INT, &tc.eval_items, NULL, "evaluate the first N items of each task (0: all)"},
        {"eval-precision", 0, OPT_CHOICE, &tc.eval_precision, "recipe|bf16", "the evaluation forward: the recipe's (FP4 as trained) or BF16"},
        {"eval-only", 0, OPT_FLAG, &tc.eval_only, NULL, "evaluate the --init-from checkpoint (validation loss on --val-data, and --eval-tasks), append the results to --out-dir/eval.jsonl and exit"},
        {"eval-dump", 0, OPT_STRING, &tc.eval_dump, NULL, "a directory for each evaluation's per-row scores and first batch's logits (dev/eval/check_eval.py reads them)"},
    };
    const int num_options = (int)(sizeof(options) / sizeof(options[0]));
    if (parse_options(options, num_options, argc, argv)) return 0;

    // ---- Everything that needs no GPU is checked first (options, batch arithmetic, the checkpoint's
    // header and run state, the recipe and the shapes it can quantize, the data and tokenizer files),
    // so that a mistake fails in milliseconds, and on machines without a GPU, where CI tests it.
    fail_if(tc.batch_size <= 0, "--batch-size must be positive (got %d)", tc.batch_size);
    fail_if(tc.seq_len <= 0, "--seq-len must be positive (got %d)", tc.seq_len);
    fail_if(tc.steps <= 0, "--steps must be positive (got %d)", tc.steps);
    fail_if(tc.lr <= 0.0f, "--lr must be positive");
    fail_if(tc.warmup < 0, "--warmup must be >= 0");
    fail_if(tc.final_lr_frac < 0.0f || tc.final_lr_frac > 1.0f, "--final-lr-frac must be in [0, 1]");
    fail_if(tc.wsd_decay_frac < 0.0f || tc.wsd_decay_frac > 1.0f, "--wsd-decay-frac must be in [0, 1]");
    fail_if(tc.beta1 < 0.0f || tc.beta1 >= 1.0f || tc.beta2 < 0.0f || tc.beta2 >= 1.0f, "--beta1/--beta2 must be in [0, 1)");
    fail_if(tc.eps <= 0.0f || tc.weight_decay < 0.0f || tc.grad_clip < 0.0f, "--eps must be > 0, --weight-decay and --grad-clip >= 0");
    fail_if(tc.val_every < 0 || tc.sample_every < 0 || tc.val_batches < 0 || tc.sample_tokens < 0,
            "--val-every, --val-batches, --sample-every and --sample-tokens must be >= 0");
    fail_if(tc.ckpt_every < -1, "--ckpt-every must be >= 0, or -1 for no checkpoint at all");
    fail_if(tc.init_from[0] && tc.resume[0], "--init-from and --resume exclude each other");
    fail_if(tc.eval_every < 0 || tc.eval_items < 0, "--eval-every and --eval-items must be >= 0");
    fail_if(!tc.out_dir[0], "--out-dir must not be empty (the directory for log.jsonl and checkpoints)");
    fail_if(tc.diag_every < 0, "--diag-every must be >= 0 (0: off)");
    fail_if(tc.spike_z < 0.0f, "--spike-z must be >= 0 (0: off)");
    fail_if(tc.peak_tflops <= 0.0f, "--peak-tflops must be positive (the GPU's dense BF16 peak, for the MFU)");
    fail_if(tc.bf16_first_layers < -1 || tc.bf16_last_layers < -1,
            "--bf16-first-layers and --bf16-last-layers must be >= 0, or -1 for the recipe's rule");
    fail_if(tc.eval_only && !tc.init_from[0], "--eval-only evaluates a checkpoint: give it with --init-from CKPT%s",
            tc.resume[0] ? " (not --resume)" : "");

    // this process's place among those the launcher started (dist_init confirms it once CUDA is up)
#ifdef ENABLE_MPI
    const int mpi_build = 1;
#else
    const int mpi_build = 0;
#endif
    int world, rank;
    const char* launcher = dist_host_place(mpi_build, &world, &rank);
#ifndef ENABLE_NCCL
    fail_if(world > 1, "started as rank %d of %d (%s), but this build has no NCCL, so it runs as one process only: "
            "rebuild where nccl.h and libnccl.so are found (see the Makefile's build: lines)", rank, world, launcher);
#endif
    (void)launcher;
    const int zero = strcmp(tc.zero, "on") == 0 || (strcmp(tc.zero, "auto") == 0 && world > 1);
    const int B = tc.batch_size, T = tc.seq_len;
    char err[2048];
    BatchPlan plan;
    fail_if(batch_plan(B, T, world, tc.total_batch, &plan, err, sizeof(err)), "%s", err);
    const int grad_accum = plan.grad_accum;
    const int64_t total_batch = plan.step_tokens;

    // the model: a checkpoint's (its header and, for a resume, its run state), or --model's
    char resume_path[4096] = "";
    if (tc.resume[0]) {
        if (strcmp(tc.resume, "latest") == 0) {
            fail_if(!find_latest_checkpoint(tc.out_dir, resume_path, sizeof(resume_path)),
                    "--resume latest: no checkpoint (ckpt_XXXXXXXX.bin) in '%s'", tc.out_dir);
        } else {
            snprintf(resume_path, sizeof(resume_path), "%s", tc.resume);
        }
    }
    const char* weights_from = resume_path[0] ? resume_path : tc.init_from;
    GPTConfig config;
    RunState saved;
    memset(&saved, 0, sizeof(saved));
    char saved_recipe[1024] = "";
    char ckpt_recipe[1024] = "";   // the recipe the checkpoint was trained with (--eval-only compares)
    int ckpt_step = 0;
    long long ckpt_tokens = 0;     // tokens it was trained on
    if (weights_from[0]) {
        CheckpointReader ckr;
        config = open_checkpoint(&ckr, weights_from);
        const int32_t* ch = ckr.header;
        ckpt_step = ch[H_STEP];
        ckpt_tokens = (long long)ch[H_STEP] * ch[H_B] * ch[H_T] * ch[H_GRAD_ACCUM] * ch[H_WORLD];
        snprintf(ckpt_recipe, sizeof(ckpt_recipe), "%s", ckr.text);
        fail_if(!ckr.header[H_HAS_PARAMS], "'%s' is the optimizer shard of rank %d; give the main checkpoint file "
                "(ckpt_%08d.bin)", weights_from, ckr.header[H_RANK], ckr.header[H_STEP]);
        if (tc.model[0]) {
            // a checkpoint's weights fix the shape: a --model that disagrees is a mistake, not a request
            GPTConfig asked = config_from_descriptor(tc.model);
            const char* name = config_descriptor_of(&config);
            char shape[160];
            fail_if(!config_same_shape(&asked, &config), "--model %s conflicts with checkpoint '%s', which holds a %s "
                    "model (%s): leave --model out to continue with the checkpoint's model, or start a new run "
                    "without --%s", tc.model, weights_from, name ? name : "custom",
                    config_describe(&config, shape, sizeof(shape)), resume_path[0] ? "resume" : "init-from");
        }
        check_checkpoint_sizes(&ckr, config_num_parameters(&config));
        if (resume_path[0]) {
            read_run_state(&ckr, &saved, saved_recipe, sizeof(saved_recipe));
            fail_if(saved.world != world || saved.zero != zero,
                    "cannot resume '%s' on %d process(es) with ZeRO %s: it was written by %d process(es) with ZeRO %s. "
                    "Resume with the same number of processes and --zero setting (or use --init-from for the weights "
                    "only)", resume_path, world, zero ? "on" : "off", saved.world, saved.zero ? "on" : "off");
            fail_if(saved.grad_accum != grad_accum,
                    "cannot resume '%s' bit for bit: it was written with gradient accumulation %d; this run has %d "
                    "(keep --batch-size, --seq-len and --total-batch)", resume_path, saved.grad_accum, grad_accum);
            fail_if(saved.seed != (uint64_t)tc.seed, "cannot resume '%s': it was trained with --seed %llu, not %d",
                    resume_path, (unsigned long long)saved.seed, tc.seed);
            fail_if(saved.step >= tc.steps, "nothing to do: '%s' is already at step %d of --steps %d", resume_path,
                    saved.step, tc.steps);
            if (rank != 0 && zero) check_shard_file(resume_path, &ckr, rank);
        }
        ckpt_close(&ckr);
    } else {
        config = config_from_descriptor(tc.model[0] ? tc.model : GPT_DEFAULT_MODEL);
    }
    fail_if(T > config.max_seq_len, "--seq-len %d exceeds the model's %d positions", T, config.max_seq_len);

    // the recipe, resolved for this depth, and the token and channel counts it must quantize
    Recipe recipe;
    recipe_preset(&recipe, tc.recipe);
    for (int i = 0; i < NUM_SLOTS; i++)
        if (tc.slot_override[i][0]) recipe_set_slot(&recipe, (Slot)i, tc.slot_override[i]);
    for (int g = 0; g < 3; g++)
        if (!tc.fp4_gemm[g]) recipe_disable_gemm(&recipe, g);
    if (tc.bf16_first_layers >= 0) recipe.bf16_first = tc.bf16_first_layers;
    if (tc.bf16_last_layers >= 0) recipe.bf16_last = tc.bf16_last_layers;
    recipe.qk_fp8 = tc.qk_fp8;
    recipe.amax_delayed = !strcmp(tc.amax, "delayed");
    recipe_resolve_layers(&recipe, config.num_layers);
    recipe_check(&recipe);
    const int quantizes = recipe_quantizes(&recipe, config.num_layers);
    fail_if(recipe.amax_delayed && !quantizes, "--amax delayed: recipe %s quantizes nothing, so it has no amax to delay",
            tc.recipe);
    if (quantizes) {
        int rc = recipe_check_shapes(&recipe, plan.micro_tokens, config.channels, 1, err, sizeof(err));
        fail_if(rc == 1, "recipe %s with --batch-size %d x --seq-len %d: %s. Change --batch-size or --seq-len",
                tc.recipe, B, T, err);
        fail_if(rc == 2, "recipe %s on a model of %d channels: %s", tc.recipe, config.channels, err);
    }
    static char recipe_text[1024];
    recipe_describe(&recipe, recipe_text, sizeof(recipe_text));
    if (resume_path[0] && strcmp(saved_recipe, recipe_text) != 0)
        fail_if(!tc.allow_recipe_change, "cannot resume '%s': it was trained with recipe '%s', this run uses '%s' "
                "(add --allow-recipe-change on to switch recipes on purpose)", resume_path, saved_recipe, recipe_text);

    // --bf16-forward-from: the step from which the forward GEMMs run in BF16 (a resume keeps the checkpoint's)
    float bf16_forward_from = 0.0f;
    if (tc.bf16_forward_from[0]) {
        fail_if(bf16_forward_parse(tc.bf16_forward_from, &bf16_forward_from, err, sizeof(err)), "%s", err);
        fail_if(!recipe_forward_quantized(&recipe, config.num_layers), "--bf16-forward-from %s: recipe %s runs no forward "
                "GEMM in FP4 (%s), so there is nothing to switch to BF16; leave the option out, or pick a recipe that "
                "quantizes fprop", tc.bf16_forward_from, tc.recipe, recipe_is_bf16(&recipe) ? "a BF16 recipe"
                : !tc.fp4_gemm[0] ? "--fp4-fprop off" : !recipe_quantizes(&recipe, config.num_layers)
                ? "every block is kept in BF16" : "both fprop slots are BF16");
        const Recipe tail = recipe_with_bf16_forward(&recipe);   // what the switch will ask of --fp4-gemm fp8
        fail_if(!strcmp(tc.fp4_gemm_mode, "fp8") && !recipe_fp8_gemms(&tail), "--bf16-forward-from %s with --fp4-gemm "
                "fp8: once the forward GEMMs are BF16, no GEMM of recipe %s has two operands with power-of-two (E8M0) "
                "block scales for the FP8 path; use --fp4-gemm auto (FP8 where the operands fold, emulation elsewhere)",
                tc.bf16_forward_from, tc.recipe);
    }
    RecipeSchedule schedule;
    recipe_schedule_init(&schedule, bf16_forward_from, tc.steps);
    if (resume_path[0]) {
        RecipeSchedule asked = schedule;
        fail_if(recipe_schedule_resume(&saved.schedule, &asked, tc.allow_recipe_change, &schedule, err, sizeof(err)),
                "cannot resume '%s': %s", resume_path, err);
    }

    // data and tokenizer files (--eval-only reads no training data)
    DataLoader train_loader, val_loader;
    memset(&train_loader, 0, sizeof(train_loader));
    if (!tc.eval_only) {
        dataloader_init(&train_loader, tc.train_data, B, T, rank, world, tc.shuffle, (uint64_t)tc.seed, config.vocab_size);
        if (rank == 0) dataloader_print(&train_loader, "train");
        if (resume_path[0]) dataloader_set_state(&train_loader, &saved.loader);
    }
    int have_val = tc.val_data[0] != '\0' && (tc.val_every > 0 || tc.eval_only);
    if (have_val) {
        dataloader_init(&val_loader, tc.val_data, B, T, rank, world, 0, 0, config.vocab_size);
        if (rank == 0) dataloader_print(&val_loader, "val");
    }
    Tokenizer tokenizer;
    tokenizer_init(&tokenizer, tc.tokenizer);
    if (tokenizer.init_ok && tc.sample_every > 0 && tokenizer.eot_token >= (uint32_t)config.vocab_size && rank == 0)
        printf("note: the tokenizer's end-of-text token %u is not in the model's vocabulary of %d (a tokenizer of another "
               "model?): text samples start from token 0\n", tokenizer.eot_token, config.vocab_size);
    if (quantizes && tc.sample_every > 0 && tokenizer.init_ok && !tc.eval_only) {
        // text samples run the forward on one sequence of min(T, 256) tokens (sample_text)
        int T_gen = T < 256 ? T : 256;
        fail_if(recipe_check_shapes(&recipe, T_gen, config.channels, 0, err, sizeof(err)),
                "recipe %s: text samples run the forward on %d tokens (one sequence of --seq-len, at most 256): %s. "
                "Change --seq-len, or turn samples off with --sample-every 0", tc.recipe, T_gen, err);
    }
    // held-out tasks: their token files, and the batch shape each runs in (in the recipe's precision, the
    // token counts its forward slots need)
    HeldOut held;
    memset(&held, 0, sizeof(held));
    const int have_tasks = tc.eval_only || tc.eval_every > 0;
    if (have_tasks) {
        held_out_load(&held, tc.eval_tasks, tc.hellaswag, tc.lambada, config.vocab_size, B, T);
        held.max_items = tc.eval_items;
        held.bf16 = strcmp(tc.eval_precision, "bf16") == 0;
        held.gemm_mode = tc.fp4_gemm_mode;
        held.dump_dir = tc.eval_dump;
        for (int k = 0; k < held.n_tasks && quantizes && !held.bf16; k++) {
            const EvalShape* es = &held.shape[k];
            fail_if(recipe_check_shapes(&recipe, (int64_t)es->rows * es->seq, config.channels, 0, err, sizeof(err)),
                    "recipe %s: the %s evaluation runs the forward on %d rows of %d tokens: %s. Change --batch-size or "
                    "--seq-len, or evaluate with --eval-precision bf16", tc.recipe, held.task[k].name, es->rows,
                    es->seq, err);
        }
        if (tc.eval_dump[0]) make_dirs(tc.eval_dump);
    }
    if (tc.eval_only && strcmp(ckpt_recipe, recipe_text) != 0)
        printf("note: '%s' was trained with recipe '%s'; this evaluation uses '%s' (pass the training run's --recipe "
               "flags to evaluate it as trained)\n", tc.init_from, ckpt_recipe, recipe_text);
    make_dirs(tc.out_dir);

    // ---- The GPU from here on.
    fail_if(device_count_or_zero() == 0, "no CUDA GPU found: train_gpt_fp4 needs an NVIDIA GPU (the tests' CPU part runs without one)");
    Dist dist;
    dist_init(&dist, tc.nccl_id_file[0] ? tc.nccl_id_file : NULL);
    fail_if(dist.world != world || dist.rank != rank, "the launcher's environment made this process rank %d of %d, "
            "but %s says rank %d of %d: set one launcher's variables only", rank, world, dist_launch_name(&dist),
            dist.rank, dist.world);

    cudaDeviceProp prop;
    cuda_check(cudaGetDeviceProperties(&prop, dist.device));
    dist_printf(&dist, "device: %s (compute capability %d.%d, %d SMs, %.0f GiB)\n", prop.name, prop.major, prop.minor,
           prop.multiProcessorCount, prop.totalGlobalMem / (double)(1 << 30));

    matmul_init();
    attention_init();
    GPT model;
    gpt_allocate(&model, &config, B, T, world);
    model.dist = &dist;
    model.zero = zero;
    size_t opt_begin = 0, opt_count = model.num_parameters;
    if (model.zero) dist_shard_range(&dist, model.num_parameters, &opt_begin, &opt_count);
    if (!tc.eval_only) gpt_allocate_optimizer(&model, strcmp(tc.master_weights, "fp32") == 0, opt_begin, opt_count);
    if (world > 1)
        dist_printf(&dist, "data parallel: %d processes (%s), ZeRO-1 %s\n", world, dist_launch_name(&dist),
                    model.zero ? "on: optimizer state sharded" : "off");
    gpt_set_recipe(&model, &recipe, (uint64_t)tc.seed, tc.fp4_gemm_mode);
    dist_printf(&dist, "recipe %s\n", recipe_text);
    if (schedule.bf16_forward_step >= 0)
        dist_printf(&dist, "bf16 forward: the forward GEMMs run in BF16 from step %d of %d (the last %d steps, "
                    "--bf16-forward-from %g); dgrad and wgrad keep the recipe\n", schedule.bf16_forward_step, tc.steps,
                    tc.steps - schedule.bf16_forward_step, schedule.bf16_forward_from);
    if (model.fp4_any) {
        const char* path[] = {"exact emulation (BF16 tensor cores, tensor scales in alpha)",
                              "native NVFP4 (cuBLASLt, Blackwell)",
                              "FP8 tensor cores for the GEMMs whose operands have E8M0 block scales (exact within the "
                              "window, llmc/fp4/fp8_fold.h), exact emulation for the others"};
        dist_printf(&dist, "FP4 GEMMs: %s\n", path[model.gemm_path]);
    }
    RunState rs;
    memset(&rs, 0, sizeof(rs));
    rs.grad_accum = grad_accum;
    rs.world = world;
    rs.zero = model.zero;
    rs.seed = (uint64_t)tc.seed;
    rs.recipe = recipe_text;
    rs.schedule = schedule;
    if (schedule.bf16_forward) {   // resumed after the switch: in the switched state from the first step
        gpt_set_bf16_forward(&model, &recipe, 1, (uint64_t)tc.seed, tc.fp4_gemm_mode);
        dist_printf(&dist, "bf16 forward: resumed with the forward GEMMs in BF16 (since step %d)\n",
                    schedule.bf16_forward_step);
    }
    if (resume_path[0]) {
        load_checkpoint(&model, resume_path, 1);
        if (strcmp(saved_recipe, recipe_text) != 0)
            dist_printf(&dist, "resuming under a different recipe (was: %s)\n", saved_recipe);
        rs.step = saved.step;
        rs.spike = saved.spike;
        dist_printf(&dist, "resumed from %s at step %d\n", resume_path, rs.step);
    } else if (tc.init_from[0]) {
        load_checkpoint(&model, tc.init_from, 0);
        dist_printf(&dist, "weights from %s\n", tc.init_from);
    } else {
        gpt_init_random(&model, (uint64_t)tc.seed);
    }
    if (have_tasks) held_out_alloc(&held, B, T);

    if (tc.eval_only) {   // evaluate the checkpoint, append one line to out_dir/eval.jsonl, and stop
        Logger elog;
        memset(&elog, 0, sizeof(elog));
        if (rank == 0) logger_append(&elog, tc.out_dir, "eval.jsonl");
        char fields[9000], path_esc[4200], num[64];
        int o = snprintf(fields, sizeof(fields), ",\"checkpoint\":\"%s\"", json_escape(tc.init_from, path_esc, sizeof(path_esc)));
        if (have_val) {
            float val_loss = evaluate(&model, &val_loader, tc.val_batches);
            dist_printf(&dist, "step %d | val loss %.4f\n", ckpt_step, val_loss);
            snprintf(fields + o, sizeof(fields) - o, ",\"val_loss\":%s", json_num(val_loss, num, sizeof(num)));
        }
        HeldOutScores sc = held_out_evaluate(&model, &held, ckpt_step);
        held_out_report(&dist, &elog, &held, &sc, ckpt_step, ckpt_tokens, fields);
        logger_close(&elog);
        held_out_free(&held);
        gpt_free(&model);
        attention_destroy();
        matmul_fp4_destroy();
        matmul_destroy();
        dist_finalize(&dist);
        if (have_val) dataloader_free(&val_loader);
        tokenizer_free(&tokenizer);
        return 0;
    }

    OptimizerConfig opt = {tc.lr, tc.beta1, tc.beta2, tc.eps, tc.weight_decay, tc.grad_clip};
    LRSchedule sched = {tc.schedule, tc.lr, tc.warmup, tc.steps, tc.final_lr_frac, tc.wsd_decay_frac};
    double flops_per_token = 6.0 * model.num_parameters + 12.0 * config.num_layers * config.channels * T;

    Logger logger;
    memset(&logger, 0, sizeof(logger));
    if (rank == 0 && resume_path[0]) {
        long dropped = logger_resume(&logger, tc.out_dir, rs.step, resume_path);
        if (dropped) printf("log: dropped %ld line%s the interrupted run wrote after step %d (this run writes them "
                            "again)\n", dropped, dropped == 1 ? "" : "s", rs.step);
    } else if (rank == 0) {
        logger_open(&logger, tc.out_dir);
    }
    char esc[4][1024];
    const char* model_name = config_descriptor_of(&config);   // the shape trained, also after --resume
    int cuda_runtime_version = 0;   // the libraries the run used: their versions decide GEMM and attention kernels
    cuda_check(cudaRuntimeGetVersion(&cuda_runtime_version));
    logger_line(&logger,
        "{\"type\":\"config\",\"model\":\"%s\",\"layers\":%d,\"heads\":%d,\"channels\":%d,\"vocab\":%d,"
        "\"parameters\":%zu,\"batch_size\":%d,\"seq_len\":%d,\"total_batch\":%lld,\"grad_accum\":%d,\"processes\":%d,"
        "\"steps\":%d,\"lr\":%g,\"warmup\":%d,\"schedule\":\"%s\",\"final_lr_frac\":%g,\"beta1\":%g,\"beta2\":%g,"
        "\"eps\":%g,\"weight_decay\":%g,\"grad_clip\":%g,\"master_weights\":\"%s\",\"seed\":%d,\"recipe\":\"%s\","
        "\"bf16_forward_from\":%g,\"bf16_forward_step\":%d,"
        "\"train_data\":\"%s\",\"val_data\":\"%s\",\"attention\":\"%s\",\"device\":\"%s\",\"sms\":%d,"
        "\"cuda_runtime\":%d,\"cublaslt\":%zu,\"cudnn\":%zu,\"resumed_at\":%d}",
        model_name ? model_name : "custom", config.num_layers, config.num_heads,
        config.channels, config.vocab_size, model.num_parameters, B, T, (long long)total_batch, grad_accum, world, tc.steps, tc.lr,
        tc.warmup, tc.schedule, tc.final_lr_frac, tc.beta1, tc.beta2, tc.eps, tc.weight_decay, tc.grad_clip,
        tc.master_weights, tc.seed, json_escape(recipe_text, esc[3], sizeof(esc[3])), schedule.bf16_forward_from,
        schedule.bf16_forward_step, json_escape(tc.train_data, esc[0], sizeof(esc[0])),
        json_escape(tc.val_data, esc[1], sizeof(esc[1])), attention_backend_name(),
        json_escape(prop.name, esc[2], sizeof(esc[2])), prop.multiProcessorCount, cuda_runtime_version,
        cublasLtGetVersion(), attention_cudnn_version(), rs.step);
    {   // the bytes each rank sends and receives per step (ring algorithms), as printed at start
        const double grad_bytes = (double)model.num_parameters * sizeof(float);
        const double gather_bytes = (double)model.params_padded * sizeof(floatX);
        logger_line(&logger, "{\"type\":\"comm\",\"processes\":%d,\"zero\":%d,\"grad_reduce_bytes\":%.0f,"
                    "\"weight_gather_bytes\":%.0f}", world, model.zero,
                    model.zero ? dist_ring_share_bytes(&dist, grad_bytes) : dist_ring_allreduce_bytes(&dist, grad_bytes),
                    model.zero ? dist_ring_share_bytes(&dist, gather_bytes) : 0.0);
    }
    dist_printf(&dist, "training: %d steps of %lld tokens (micro-batch %d x %d, %d accumulation step%s), lr %g %s, "
           "master weights %s, recipe %s, attention: %s\n", tc.steps, (long long)total_batch, B, T, grad_accum,
           grad_accum == 1 ? "" : "s", tc.lr, tc.schedule, tc.master_weights, tc.recipe, attention_backend_name());

    // which checkpoint a divergence names as the one to resume from (see CheckpointTrail)
    CheckpointTrail trail;
    ckpt_trail_init(&trail, resume_path[0] ? resume_path : NULL);
    char what[256];
    double ema_ms = 0.0;
    double bucket_sum[NUM_BUCKETS] = {0};   // the phase timer's buckets over the steps after the first
    int bucket_steps = 0;
    char ckpt_path[4200];
    char sample[4096], sample_esc[8192];
    for (int step = rs.step; step < tc.steps; step++) {
        int last = step == tc.steps - 1;
        // --bf16-forward-from: the switch comes before this step's validation and sample, so that everything
        // from the switch step on runs the same forward
        const int bf16_forward = recipe_schedule_bf16_forward_at(&schedule, step);
        if (bf16_forward != schedule.bf16_forward) {
            gpt_set_bf16_forward(&model, &recipe, bf16_forward, (uint64_t)tc.seed, tc.fp4_gemm_mode);
            schedule.bf16_forward = bf16_forward;
            if (bf16_forward)
                dist_printf(&dist, "step %d | bf16 forward: the forward GEMMs switch to BF16 for the last %d steps "
                            "(--bf16-forward-from %g); dgrad and wgrad keep the recipe\n", step, tc.steps - step,
                            schedule.bf16_forward_from);
            else
                dist_printf(&dist, "step %d | bf16 forward: the forward GEMMs return to the recipe's (the resumed "
                            "run has no switch here)\n", step);
            logger_line(&logger, "{\"type\":\"event\",\"step\":%d,\"event\":\"bf16_forward\",\"on\":%d,"
                        "\"switch_step\":%d,\"fraction\":%g}", step, bf16_forward, schedule.bf16_forward_step,
                        schedule.bf16_forward_from);
        }
        if (have_val && (step % tc.val_every == 0 || last)) {
            float val_loss = evaluate(&model, &val_loader, tc.val_batches);
            dist_printf(&dist, "step %d | val loss %.4f\n", step, val_loss);
            logger_line(&logger, "{\"type\":\"val\",\"step\":%d,\"tokens\":%lld,\"val_loss\":%.6f}", step,
                        (long long)step * total_batch, val_loss);
            if (!isfinite(val_loss)) {
                snprintf(what, sizeof(what), "validation loss %f at step %d", val_loss, step);
                stop_diverged(&trail, rank, what);
            }
        }
        if (have_tasks && tc.eval_every > 0 && step % tc.eval_every == 0) {
            HeldOutScores sc = held_out_evaluate(&model, &held, step);
            held_out_report(&dist, &logger, &held, &sc, step, (long long)step * total_batch, "");
        }
        if (tc.sample_every > 0 && step > 0 && step % tc.sample_every == 0 && tokenizer.init_ok && rank == 0) {
            sample_text(&model, &tokenizer, tc.sample_tokens, (uint64_t)tc.seed, step, sample, sizeof(sample));
            dist_printf(&dist, "step %d | sample: %s\n", step, sample);
            logger_line(&logger, "{\"type\":\"sample\",\"step\":%d,\"text\":\"%s\"}", step,
                        json_escape(sample, sample_esc, sizeof(sample_esc)));
        }

        phase_take_ms(&model, NULL, NULL);               // drop what validation and samples quantized and multiplied
        dist_take_comm_ms(&dist);                        // and what validation and checkpoints communicated
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int diag = model.fp4_any && tc.diag_every > 0 && (step % tc.diag_every == 0 || last);
        if (diag) diag_begin(&model);
        gpt_zero_grad(&model);
        model.fp4_step = step;
        double loss_sum = 0.0;
        for (int micro = 0; micro < grad_accum; micro++) {
            model.fp4_micro = dataloader_global_micro_index(&train_loader, micro);
            dataloader_next_batch(&train_loader);
            loss_sum += gpt_forward(&model, train_loader.inputs, train_loader.targets, B, T, 1,
                                    1.0f / ((float)B * T * grad_accum * world));
            gpt_backward(&model, train_loader.inputs, B, T, micro == grad_accum - 1);
        }
        float loss = (float)((world > 1 ? dist_sum_double(&dist, loss_sum) : loss_sum) / ((double)grad_accum * world));
        float norm = gpt_grad_norm(&model);
        if (!isfinite(loss) || !isfinite(norm)) {
            snprintf(what, sizeof(what), "loss %f, gradient norm %f at step %d (stopping without an update)", loss,
                     norm, step);
            stop_diverged(&trail, rank, what);
        }
        ckpt_trail_confirm(&trail);   // the weights of the newest checkpoint gave a finite loss
        float lr = lr_at_step(&sched, step);
        char why[256] = "";
        int skipped = spike_check(&rs.spike, tc.spike_z, loss, norm, why, sizeof(why));
        if (skipped) {
            dist_printf(&dist, "step %d | skipping the update: %s\n", step, why);
            logger_line(&logger, "{\"type\":\"event\",\"step\":%d,\"event\":\"skip\",\"why\":\"%s\"}", step, why);
        } else {
            gpt_update(&model, &opt, lr, norm, step, (uint64_t)tc.seed);
        }
        cuda_check(cudaStreamSynchronize(model.stream));
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) * 1e-6;
        float phase[NUM_PHASES], buckets[NUM_BUCKETS];
        phase_take_ms(&model, phase, buckets);
        if (step > rs.step) {
            for (int b = 0; b < NUM_BUCKETS; b++) bucket_sum[b] += buckets[b];
            bucket_steps++;
        }
        const double quant_ms = phase[PHASE_QUANT], gemm_ms = phase[PHASE_GEMM];
        double comm_ms = dist_take_comm_ms(&dist);
        if (diag) diag_end(&model, &logger, step + 1);
        if (step > rs.step) ema_ms = ema_ms == 0.0 ? ms : 0.9 * ema_ms + 0.1 * ms;  // the first step builds plans
        double tok_s = total_batch / (ms * 1e-3);
        double mfu = tok_s * flops_per_token / (tc.peak_tflops * 1e12);
        double eta_s = (tc.steps - step - 1) * (ema_ms > 0 ? ema_ms : ms) * 1e-3;
        dist_printf(&dist, "step %5d/%d | loss %.4f | lr %.2e | norm %.3f | %.1f ms | %.0f tok/s | MFU %.1f%% | ETA %dh%02dm%02ds%s\n",
               step + 1, tc.steps, loss, lr, norm, ms, tok_s, 100.0 * mfu, (int)(eta_s / 3600),
               (int)fmod(eta_s / 60, 60), (int)fmod(eta_s, 60), skipped ? " (skipped)" : "");
        logger_line(&logger, "{\"type\":\"train\",\"step\":%d,\"tokens\":%lld,\"loss\":%.6f,\"lr\":%.6e,"
                    "\"grad_norm\":%.6f,\"ms\":%.3f,\"compute_ms\":%.3f,\"quant_ms\":%.3f,\"gemm_ms\":%.3f,"
                    "\"comm_ms\":%.3f,\"tok_per_s\":%.1f,\"mfu\":%.4f,\"skipped\":%d}", step + 1,
                    (long long)(step + 1) * total_batch, loss, lr, norm, ms, ms - quant_ms - comm_ms, quant_ms, gemm_ms,
                    comm_ms, tok_s, mfu, skipped);

        if ((tc.ckpt_every > 0 && (step + 1) % tc.ckpt_every == 0) || (last && tc.ckpt_every >= 0)) {
            // an update can leave NaN or Inf weights behind a finite loss: never checkpoint them
            double nonfinite = gpt_count_nonfinite_weights(&model);
            if (nonfinite > 0) {
                snprintf(what, sizeof(what), "the update of step %d left %.0f NaN or Inf weights (no checkpoint "
                         "written from them)", step, nonfinite);
                stop_diverged(&trail, rank, what);
            }
            rs.step = step + 1;
            rs.loader = dataloader_get_state(&train_loader);
            rs.schedule = schedule;
            snprintf(ckpt_path, sizeof(ckpt_path), "%s/ckpt_%08d.bin", tc.out_dir, step + 1);
            save_checkpoint(&model, tc.out_dir, &rs);
            dist_printf(&dist, "checkpoint: %s\n", ckpt_path);
            logger_line(&logger, "{\"type\":\"checkpoint\",\"step\":%d,\"path\":\"%s\"}", step + 1,
                        json_escape(ckpt_path, esc[0], sizeof(esc[0])));
            ckpt_trail_written(&trail, ckpt_path);
        }
    }
    log_phase_breakdown(&logger, bucket_sum, bucket_steps);
    if (have_tasks) {   // the final weights, the ones the last checkpoint holds
        HeldOutScores sc = held_out_evaluate(&model, &held, tc.steps);
        held_out_report(&dist, &logger, &held, &sc, tc.steps, (long long)tc.steps * total_batch, "");
    }
    size_t free_b, total_b;
    cuda_check(cudaMemGetInfo(&free_b, &total_b));
    logger_line(&logger, "{\"type\":\"event\",\"step\":%d,\"event\":\"done\",\"gpu_memory_used_gib\":%.3f}",
                tc.steps, (total_b - free_b) / (double)(1 << 30));
    logger_close(&logger);
    if (have_tasks) held_out_free(&held);
    gpt_free(&model);
    attention_destroy();
    matmul_fp4_destroy();
    matmul_fp8_destroy();
    matmul_destroy();
    dist_finalize(&dist);
    dataloader_free(&train_loader);
    if (have_val) dataloader_free(&val_loader);
    tokenizer_free(&tokenizer);
    return 0;
}
#endif
