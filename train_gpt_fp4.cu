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
#include "llmc/muon.cuh"                 // defines: muon_update_gpu, MuonScratch; NsFp4, ns_fp4_set (--ns-fp4)
#include "llmc/model/muon_plan.h"         // defines: optimizer_of, muon_matrices, MuonConfig
#include "llmc/model/gpt_config.h"       // defines: GPTConfig, config_from_descriptor, config_check
#include "llmc/model/models.h"           // defines: ModelFamily, model_family, param_sizes; GPT-2's and Llama's tables
#include "llmc/model/rmsnorm.cuh"        // defines: rmsnorm_forward, fused_residual_rmsnorm_forward, rmsnorm_backward
#include "llmc/model/rope.cuh"           // defines: rope_table_fill, rope_forward, rope_backward
#include "llmc/model/swiglu.cuh"         // defines: swiglu_forward, swiglu_backward
#include "llmc/model/encoder.cuh"        // defines: encoder_forward, encoder_backward
#include "llmc/model/layernorm.cuh"      // defines: layernorm_forward, fused_residual_layernorm_forward, layernorm_backward
#include "llmc/model/gelu.cuh"           // defines: gelu_forward, gelu_backward_inplace
#include "llmc/model/attention.cuh"      // defines: attention_forward, attention_backward
#include "llmc/model/fused_classifier.cuh" // defines: fused_classifier
#include "llmc/model/reduce.cuh"         // defines: bias_backward, sum_squares
#include "llmc/model/target_argmax.cuh"  // defines: target_is_argmax
#include "llmc/nvfp4.cuh"                // defines: Recipe, RecipeSchedule, LinearExec, linear_forward, linear_backward
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
// Model configuration: GPTConfig and the GPT-2 shapes (d6 ... d48) live in llmc/model/gpt_config.h, the checkpoint
// header fields that record them in llmc/run/ckpt_fields.h, so that the CPU tests can write checkpoints too.

// Fails with the reason when the shape cannot be built; `where` names its source (a checkpoint file).
static void config_require(const GPTConfig* c, const char* where) {
    char err[256];
    if (config_check(c, err, sizeof(err)) == 0) return;
    if (where) fail("%s: %s", where, err);
    fail("%s", err);
}

// The recipe's shape checks (llmc/fp4/recipe.h) over this model's linears (its family's table), for N tokens.
static int recipe_check_model(const Recipe* r, int64_t N, const GPTConfig* c, int backward, char* err, size_t n) {
    const ModelFamily* f = model_family(c);
    RecipeLinear lin[NUM_LINEARS];
    for (int k = 0; k < NUM_LINEARS; k++) {
        const LinearRow* row = &f->linears[k];
        lin[k] = {row->name, dim_value(c, row->in), dim_value(c, row->out), dim_value(c, row->qk_split)};
    }
    return recipe_check_linears(r, N, lin, NUM_LINEARS, backward, err, n);
}

// ----------------------------------------------------------------------------------------------
// Parameters: a registry of named tensors (the model family's table, llmc/model/gpt2.h or llama.h: names, shapes,
// decay, init), laid out in one allocation in that order (the order of the PyTorch reference dump, dev/ref/gpt_ref.py).

// Typed views into one flat buffer of parameters (or gradients).
template <typename T>
struct ParamTensors {
    T* t[MAX_PARAM_TENSORS];
    // layer l's slice of a per-layer tensor
    T* layer(int id, int l, size_t per_layer) const { return t[id] + (size_t)l * per_layer; }
};

template <typename T>
static void point_params(ParamTensors<T>* p, T* base, const size_t* sizes, int n) {
    size_t off = 0;
    for (int i = 0; i < n; i++) { p->t[i] = base + off; off += sizes[i]; }
}

// ----------------------------------------------------------------------------------------------
// Activations kept for the backward pass, per layer unless noted. N = B*T tokens; the widths are the linears':
// QKV = the qkv linear's outputs (GPT-2 3C, Llama (NH + 2 KVH) HS), FC = the MLP's first linear's (GPT-2 4C, Llama
// 2H: gate and up), ACT = the MLP's activation (GPT-2 4C, Llama H). The norms are LayerNorms (GPT-2: mean and rstd
// kept) or RMSNorms (Llama: rstd only).

typedef struct {
    floatX* encoded;     // (N, C) token (+ position) embeddings
    floatX* ln1;         // (L, N, C)
    float* ln1_mean;     // (L, N) GPT-2 only
    float* ln1_rstd;     // (L, N)
    floatX* qkv;         // (L, N, QKV) (Llama: q and k rotated)
    floatX* atty;        // (L, N, C) attention output before the projection
    float* att_stats;    // (L, B, NH, T) softmax log-sum-exp
    floatX* residual2;   // (L, N, C) after the attention block
    floatX* ln2;         // (L, N, C)
    float* ln2_mean;     // (L, N) GPT-2 only
    float* ln2_rstd;     // (L, N)
    floatX* fch;         // (L, N, FC) MLP hidden, before the activation
    floatX* fch_gelu;    // (L, N, ACT) after it (GELU, or SwiGLU's silu(g) * u)
    floatX* residual3;   // (L, N, C) after the MLP block
    floatX* lnf;         // (N, C)
    float* lnf_mean;     // (N) GPT-2 only
    float* lnf_rstd;     // (N)
    floatX* logits;      // (N, Vp); the classifier overwrites it with dlogits
    float* losses;       // (N)
    floatX* proj_out;    // (N, C) scratch: output of attproj / fcproj before the residual add
    // backward scratch
    floatX* dresidual;   // (N, C) gradient of the residual stream
    floatX* dbuf_c;      // (N, C)
    floatX* dbuf_3c;     // (N, QKV)
    floatX* dbuf_4c;     // (N, FC)
    floatX* dbuf_act;    // (N, ACT) Llama only: the activation's gradient (GPT-2's GELU backward runs in place)
    float* rope_cos;     // (maxT, HS/2) Llama only: RoPE's table (rope_table_fill)
    float* rope_sin;
} Activations;

typedef struct {
    GPTConfig config;
    const ModelFamily* family;      // the tables of the model's family (llmc/model/gpt2.h, llama.h)
    int B, T;                       // largest batch the buffers hold
    int num_tensors;                // the family's parameter tensors
    size_t param_sizes[MAX_PARAM_TENSORS];
    size_t num_parameters;
    ParamTensors<floatX> params;    // BF16 weights used by the forward pass
    ParamTensors<float> grads;      // FP32, accumulated over micro-steps
    // Optimizer state (FP32 master weights, or NULL for BF16 + stochastic rounding; Adam moments) for
    // the parameters [opt_begin, opt_begin + opt_count): all of them, or this rank's shard (ZeRO-1).
    float* master;
    float* adam_m;                  // FP32 moments (NULL with --optimizer-state nvfp4)
    float* adam_v;
    size_t opt_begin, opt_count;
    // --optimizer-state nvfp4 (llmc/fp4/optim_state.h): m and sqrt(v) in NVFP4 blocks, per segment (a tensor's
    // layer inside [opt_begin, opt_begin + opt_count)); one allocation: m's codes, m's scales, u's codes, u's
    // scales, then the amaxes the codes hold and this update's ([segments][2] each)
    int opt4;
    Opt4Seg* opt4_segs;
    int opt4_nseg;
    size_t opt4_elems;              // elements of the state arrays (each segment rounded up to 16)
    uint8_t* opt4_mem;
    float* opt4_amax;               // inside opt4_mem: [opt4_nseg][2], then the new ones, [opt4_nseg][2]
    // --optimizer muon (llmc/muon.cuh): the blocks' linear weights, matrix by matrix (llmc/model/muon_plan.h).
    // Without ZeRO-1 their FP32 momentum lives in adam_m (and their masters in master) at the weights' own offsets,
    // their slots of adam_v unused (zero). With ZeRO-1 each matrix is owned whole by rank muon_owner(i, world), which
    // keeps its momentum (and master) in muon_m (muon_master) at muon_off[i] (SIZE_MAX: another rank's).
    int optimizer;                  // OPTIMIZER_ADAMW or OPTIMIZER_MUON
    MuonConfig muon;
    NsFp4 ns_fp4;                   // --ns-fp4: Newton-Schulz's quantized GEMMs (off: BF16)
    MuonMatrix* muon_mats;
    int muon_nmat;
    MuonScratch muon_scratch;
    size_t* muon_off;
    size_t muon_owned;              // elements of muon_m (ZeRO-1), 0 without ZeRO-1
    float* muon_m;
    float* muon_master;
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
    LinearExec lin;                 // the FP4 linear executor (llmc/fp4/linear.cuh): recipe, plans, scalars, timer
    // --attention-fp4 (llmc/fp4/attention_fp4.h): the specs, the quantizer the attention calls, and per layer the
    // quantized Q/K/V copy (L, N, QKV) that the forward writes and the backward reads, with its factors and amaxes
    // (L x 6 floats: dec[3], amax[3]); the copies only when Q, K, V are quantized
    AttnFp4 attn_fp4;
    AttnQuantizer attn_quantizer;
    floatX* qkv_fp4;
    float* attn_fp4_scalars;
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

// The executor's table of this model's linears (the family's): shapes, weights, gradients. Its copies may use the
// logits buffer, idle between the classifier's forward and backward.
static void gpt_bind_linears(GPT* m) {
    const GPTConfig* c = &m->config;
    LinearDesc kinds[NUM_LINEARS];
    for (int k = 0; k < NUM_LINEARS; k++) {
        const LinearRow* row = &m->family->linears[k];
        kinds[k] = {row->name, (int)dim_value(c, row->in), (int)dim_value(c, row->out), (int)dim_value(c, row->qk_split),
                    m->params.t[row->weight], row->bias >= 0 ? m->params.t[row->bias] : NULL, m->grads.t[row->weight]};
    }
    const size_t N = (size_t)m->B * m->T;
    linear_exec_init(&m->lin, kinds, NUM_LINEARS, c->num_layers, (int)N, m->acts.logits,
                     N * c->padded_vocab_size * sizeof(floatX), m->stream);
}

static void gpt_allocate_activations(GPT* m, size_t* bytes) {
    const GPTConfig* c = &m->config;
    const int llama = c->arch == ARCH_LLAMA;
    const size_t L = c->num_layers, C = c->channels, NH = c->num_heads, Vp = c->padded_vocab_size, B = m->B, T = m->T;
    const size_t N = B * T, QKV = config_qkv_channels(c);
    const size_t FC = dim_value(c, m->family->linears[LIN_FC].out), ACT = dim_value(c, m->family->linears[LIN_FCPROJ].in);
    Activations* a = &m->acts;
    a->encoded = device_alloc<floatX>(N * C, bytes);
    a->ln1 = device_alloc<floatX>(L * N * C, bytes);
    a->ln1_mean = llama ? NULL : device_alloc<float>(L * N, bytes);
    a->ln1_rstd = device_alloc<float>(L * N, bytes);
    a->qkv = device_alloc<floatX>(L * N * QKV, bytes);
    a->atty = device_alloc<floatX>(L * N * C, bytes);
    a->att_stats = device_alloc<float>(L * B * NH * T, bytes);
    a->residual2 = device_alloc<floatX>(L * N * C, bytes);
    a->ln2 = device_alloc<floatX>(L * N * C, bytes);
    a->ln2_mean = llama ? NULL : device_alloc<float>(L * N, bytes);
    a->ln2_rstd = device_alloc<float>(L * N, bytes);
    a->fch = device_alloc<floatX>(L * N * FC, bytes);
    a->fch_gelu = device_alloc<floatX>(L * N * ACT, bytes);
    a->residual3 = device_alloc<floatX>(L * N * C, bytes);
    a->lnf = device_alloc<floatX>(N * C, bytes);
    a->lnf_mean = llama ? NULL : device_alloc<float>(N, bytes);
    a->lnf_rstd = device_alloc<float>(N, bytes);
    a->logits = device_alloc<floatX>(N * Vp, bytes);
    a->losses = device_alloc<float>(N, bytes);
    a->proj_out = device_alloc<floatX>(N * C, bytes);
    a->dresidual = device_alloc<floatX>(N * C, bytes);
    a->dbuf_c = device_alloc<floatX>(N * C, bytes);
    a->dbuf_3c = device_alloc<floatX>(N * QKV, bytes);
    a->dbuf_4c = device_alloc<floatX>(N * FC, bytes);
    a->dbuf_act = llama ? device_alloc<floatX>(N * ACT, bytes) : NULL;
    m->ln_scratch = device_alloc<char>(llama ? rmsnorm_backward_scratch_bytes((int)N, (int)C)
                                             : layernorm_backward_scratch_bytes((int)N, (int)C), bytes);
    m->bias_scratch = llama ? NULL : device_alloc<char>(bias_backward_scratch_bytes((int)N, (int)(4 * C)), bytes);
    if (llama) {   // RoPE's cos/sin table, computed once on the host (in double, rounded to float)
        const size_t HS = config_head_size(c), cells = (size_t)c->max_seq_len * (HS / 2);
        float* host = (float*)xmalloc(2 * cells * sizeof(float));
        rope_table_fill(host, host + cells, c->max_seq_len, (int)HS, c->rope_theta);
        a->rope_cos = device_alloc<float>(cells, bytes);
        a->rope_sin = device_alloc<float>(cells, bytes);
        cuda_check(cudaMemcpy(a->rope_cos, host, cells * sizeof(float), cudaMemcpyHostToDevice));
        cuda_check(cudaMemcpy(a->rope_sin, host + cells, cells * sizeof(float), cudaMemcpyHostToDevice));
        free(host);
    }
}

static void gpt_allocate(GPT* m, const GPTConfig* config, int B, int T, int world) {
    config_require(config, NULL);
    fail_if(T > config->max_seq_len, "sequence length %d exceeds the model's %d positions", T, config->max_seq_len);
    memset(m, 0, sizeof(*m));
    m->config = *config;
    m->B = B;
    m->T = T;
    m->family = model_family(config);
    m->num_tensors = param_sizes(config, m->param_sizes);
    for (int i = 0; i < m->num_tensors; i++) m->num_parameters += m->param_sizes[i];
    size_t n = m->num_parameters, bytes = 0;
    m->params_padded = shard_padded_size(n, world);
    m->params_memory = device_alloc<floatX>(m->params_padded, &bytes);
    m->grads_memory = device_alloc<float>(n, &bytes);
    cuda_check(cudaMemset(m->params_memory, 0, m->params_padded * sizeof(floatX)));
    cuda_check(cudaMemset(m->grads_memory, 0, n * sizeof(float)));
    point_params(&m->params, m->params_memory, m->param_sizes, m->num_tensors);
    point_params(&m->grads, m->grads_memory, m->param_sizes, m->num_tensors);
    gpt_allocate_activations(m, &bytes);
    const size_t N = (size_t)B * T;
    m->norm_scratch = device_alloc<char>(sum_squares_scratch_bytes(n), &bytes);
    m->norm_device = device_alloc<float>(1, &bytes);
    m->inputs_device = device_alloc<int>(N, &bytes);
    m->targets_device = device_alloc<int>(N, &bytes);
    m->losses_host = (float*)xmalloc(N * sizeof(float));
    encoder_backward_init(&m->encoder_bw, B, T, config->channels);
    cuda_check(cudaStreamCreate(&m->stream));
    gpt_bind_linears(m);
    if (config->arch == ARCH_GPT2)
        printf("model: %d layers, %d heads, %d channels, vocab %d (padded %d), %zu parameters; "
               "GPU memory for parameters, gradients and activations: %.2f GiB\n", config->num_layers,
               config->num_heads, config->channels, config->vocab_size, config->padded_vocab_size, n,
               bytes / (double)(1 << 30));
    else {
        char shape[256];
        printf("model: %s (padded vocab %d), %zu parameters (%zu without the embeddings); GPU memory for parameters, "
               "gradients and activations: %.2f GiB\n", config_describe(config, shape, sizeof(shape)),
               config->padded_vocab_size, n, n - m->param_sizes[0] - (config->tied ? 0 : m->param_sizes[LP_LM_HEAD]),
               bytes / (double)(1 << 30));
    }
}

__global__ void bf16_to_float_kernel(float* out, const floatX* in, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __bfloat162float(in[i]);
}

// The element offset of Muon matrix i in params_memory.
static size_t gpt_muon_base(const GPT* m, int i) {
    return (size_t)(m->params.t[m->muon_mats[i].tensor] - m->params_memory) + m->muon_mats[i].offset;
}

// FP32 master weights start as the BF16 parameters (exact); with ZeRO-1 and Muon, also the masters of the Muon
// matrices this rank owns.
static void gpt_init_master_from_params(GPT* m) {
    if (!m->master) return;
    if (m->opt_count) {
        bf16_to_float_kernel<<<(unsigned)ceil_div((int64_t)m->opt_count, 256), 256, 0, m->stream>>>(
            m->master, m->params_memory + m->opt_begin, m->opt_count);
        cuda_check_last();
    }
    if (!m->muon_master) return;
    for (int i = 0; i < m->muon_nmat; i++) {
        if (m->muon_off[i] == SIZE_MAX) continue;
        const size_t nk = (size_t)m->muon_mats[i].rows * m->muon_mats[i].cols;
        bf16_to_float_kernel<<<(unsigned)ceil_div((int64_t)nk, 256), 256, 0, m->stream>>>(
            m->muon_master + m->muon_off[i], m->params_memory + gpt_muon_base(m, i), nk);
        cuda_check_last();
    }
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

// The NVFP4 optimizer state's segments for the parameters [begin, begin + count) of a model: one per tensor and
// layer inside the range (xmalloc'd into *segs); returns their number, the state's element count in *elems.
static int opt4_layout(const GPTConfig* c, size_t begin, size_t count, Opt4Seg** segs, size_t* elems) {
    const ModelFamily* f = model_family(c);
    size_t sizes[MAX_PARAM_TENSORS];
    int per_layer[MAX_PARAM_TENSORS];
    const int n = param_sizes(c, sizes);
    for (int i = 0; i < n; i++) per_layer[i] = f->params[i].per_layer;
    const int cap = n * c->num_layers;
    *segs = (Opt4Seg*)xmalloc((size_t)cap * sizeof(Opt4Seg));
    const int k = opt4_segments(sizes, per_layer, n, c->num_layers, begin, count, *segs, cap, elems);
    fail_if(k < 0, "opt4_layout: more segments than %d", cap);
    return k;
}

// --lora-svd-rank R: the BF16 factors every file's optimizer section ends with (llmc/fp4/linear.cuh,
// linear_lora_bytes): per layer and linear, US (OC x R) then Vt (R x K); 0 bytes at rank 0.
static size_t lora_checkpoint_bytes(const GPTConfig* c, int rank) {
    const ModelFamily* f = model_family(c);
    size_t per_layer = 0;
    for (int k = 0; k < NUM_LINEARS; k++)
        per_layer += (size_t)(dim_value(c, f->linears[k].in) + dim_value(c, f->linears[k].out)) * rank;
    return (size_t)c->num_layers * per_layer * sizeof(floatX);
}

// The optimizer section's bytes after the master weights: FP32 m and v, or the NVFP4 state.
static size_t optimizer_state_bytes(const GPTConfig* c, int opt4, size_t begin, size_t count) {
    if (!opt4) return 2 * count * sizeof(float);
    Opt4Seg* segs;
    size_t elems;
    const int k = opt4_layout(c, begin, count, &segs, &elems);
    free(segs);
    return opt4_bytes(elems, k);
}

// Optimizer state for the parameters [begin, begin + count): all of them, or one ZeRO-1 shard; the moments in
// FP32, or (nvfp4_state) in NVFP4 blocks. Needs m->dist and m->zero set (for the traffic summary it prints).
static void gpt_allocate_optimizer(GPT* m, int fp32_master, int nvfp4_state, size_t begin, size_t count) {
    gpt_print_comm_per_step(m);
    m->opt_begin = begin;
    m->opt_count = count;
    size_t alloc = count ? count : 1;
    m->master = fp32_master ? device_alloc<float>(alloc, NULL) : NULL;
    m->opt4 = nvfp4_state;
    if (!nvfp4_state) {
        m->adam_m = device_alloc<float>(alloc, NULL);
        m->adam_v = device_alloc<float>(alloc, NULL);
        cuda_check(cudaMemset(m->adam_m, 0, alloc * sizeof(float)));
        cuda_check(cudaMemset(m->adam_v, 0, alloc * sizeof(float)));
        return;
    }
    m->opt4_nseg = opt4_layout(&m->config, begin, count, &m->opt4_segs, &m->opt4_elems);
    const size_t bytes = opt4_bytes(m->opt4_elems, m->opt4_nseg) + (size_t)m->opt4_nseg * OPT4_STATES * sizeof(float);
    m->opt4_mem = device_alloc<uint8_t>(bytes ? bytes : 1, NULL);
    cuda_check(cudaMemset(m->opt4_mem, 0, bytes ? bytes : 1));   // fresh state: every code, scale and amax 0 (G5)
    m->opt4_amax = opt4_state_in(m->opt4_mem, m->opt4_elems).amax;
    const double MiB = 1024.0 * 1024.0;
    dist_printf(m->dist, "optimizer state: NVFP4 m and sqrt(v), %d segments, %.1f MiB (FP32 m and v: %.1f MiB)\n",
                m->opt4_nseg, bytes / MiB, 2.0 * count * sizeof(float) / MiB);
}

// --optimizer muon on the optimizer gpt_allocate_optimizer made (FP32 moments): the matrix list, with ZeRO-1 the
// state of the matrices this rank owns, and the Newton-Schulz scratch (with --ns-fp4's copies), sized for the largest
// matrix. Needs m->dist.
static void gpt_setup_muon(GPT* m, const MuonConfig* mc, const NsFp4* ns) {
    fail_if(m->opt4, "internal: --optimizer muon needs FP32 moments (not --optimizer-state nvfp4)");
    m->optimizer = OPTIMIZER_MUON;
    m->muon = *mc;
    m->ns_fp4 = *ns;
    m->muon_nmat = muon_matrices(&m->config, mc->split_qkv, NULL);
    m->muon_mats = (MuonMatrix*)xmalloc((size_t)m->muon_nmat * sizeof(MuonMatrix));
    m->muon_off = (size_t*)xmalloc((size_t)m->muon_nmat * sizeof(size_t));
    muon_matrices(&m->config, mc->split_qkv, m->muon_mats);
    const int world = m->dist ? m->dist->world : 1, rank = m->dist ? m->dist->rank : 0;
    size_t max_nk = 0, max_nn = 0, muon_params = 0;
    for (int i = 0; i < m->muon_nmat; i++) {
        const MuonMatrix* x = &m->muon_mats[i];
        const size_t nk = (size_t)x->rows * x->cols, n = x->rows < x->cols ? x->rows : x->cols;
        max_nk = nk > max_nk ? nk : max_nk;
        max_nn = n * n > max_nn ? n * n : max_nn;
        muon_params += nk;
    }
    m->muon_owned = muon_owned_offsets(m->muon_mats, m->muon_nmat, world, rank, m->muon_off);
    if (!m->zero) {   // every rank updates every matrix, its state in adam_m (and master)
        m->muon_owned = 0;
        for (int i = 0; i < m->muon_nmat; i++) m->muon_off[i] = SIZE_MAX;
    }
    const double MiB = 1024.0 * 1024.0;
    if (m->zero) {   // (the shard's adam_m, adam_v and master slots of Muon elements stay unused)
        m->muon_m = device_alloc<float>(m->muon_owned ? m->muon_owned : 1, NULL);
        cuda_check(cudaMemset(m->muon_m, 0, (m->muon_owned ? m->muon_owned : 1) * sizeof(float)));
        m->muon_master = m->master ? device_alloc<float>(m->muon_owned ? m->muon_owned : 1, NULL) : NULL;
        dist_printf(m->dist, "optimizer: ZeRO-1 with Muon: matrix i owned whole by rank i mod %d; rank 0 keeps %.1f MiB "
                    "of Muon state; Muon's gradients are all-reduced, its matrices broadcast from their owners\n",
                    world, m->muon_owned * (m->master ? 8.0 : 4.0) / MiB);
    }
    const size_t bytes = muon_scratch_alloc(&m->muon_scratch, max_nk ? max_nk : 1, max_nn ? max_nn : 1, ns);
    char ns_text[256] = "BF16";
    if (ns->on) {
        char desc[200];
        ns_fp4_describe(ns, desc, sizeof(desc));
        snprintf(ns_text, sizeof(ns_text), "--ns-fp4 %s", desc);
    }
    dist_printf(m->dist, "optimizer: Muon on %d matrices (%zu parameters; momentum %g%s, scale %s, QKV %s, %d "
                "Newton-Schulz steps, %s), AdamW on the other %zu parameters; Newton-Schulz scratch %.1f MiB\n",
                m->muon_nmat, muon_params, mc->beta, mc->nesterov ? " Nesterov" : "",
                mc->scale_rule == MUON_SCALE_MOONLIGHT ? "moonlight" : "keller", mc->split_qkv ? "split" : "fused",
                mc->ns_steps, ns_text, m->num_parameters - muon_params, bytes / MiB);
}

static void gpt_free(GPT* m) {
    cudaFree(m->params_memory); cudaFree(m->grads_memory); cudaFree(m->adam_m); cudaFree(m->adam_v);
    cudaFree(m->master); cudaFree(m->opt4_mem); free(m->opt4_segs);
    if (m->optimizer == OPTIMIZER_MUON) muon_scratch_free(&m->muon_scratch);
    free(m->muon_mats); free(m->muon_off); cudaFree(m->muon_m); cudaFree(m->muon_master);
    linear_exec_free(&m->lin);
    Activations* a = &m->acts;
    void* bufs[] = {a->encoded, a->ln1, a->ln1_mean, a->ln1_rstd, a->qkv, a->atty, a->att_stats, a->residual2,
                    a->ln2, a->ln2_mean, a->ln2_rstd, a->fch, a->fch_gelu, a->residual3, a->lnf, a->lnf_mean,
                    a->lnf_rstd, a->logits, a->losses, a->proj_out, a->dresidual, a->dbuf_c, a->dbuf_3c,
                    a->dbuf_4c, a->dbuf_act, a->rope_cos, a->rope_sin, m->ln_scratch, m->bias_scratch, m->norm_scratch,
                    m->norm_device, m->inputs_device, m->targets_device, m->qkv_fp4, m->attn_fp4_scalars};
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
    for (int id = 0; id < m->num_tensors; id++) {
        size_t n = m->param_sizes[id];
        if (n == 0) continue;   // a tied LM head
        unsigned grid = (unsigned)ceil_div((int64_t)n, block);
        const ParamInit init = m->family->params[id].init;
        if (init == INIT_NORMAL || init == INIT_RESIDUAL) {
            float std = init == INIT_RESIDUAL ? residual_std : 0.02f;
            init_normal_kernel<<<grid, block>>>(m->params.t[id], n, std, rng_key(seed, 0, (uint32_t)id));
        } else {
            fill_kernel<<<grid, block>>>(m->params.t[id], n, init == INIT_ONES ? 1.0f : 0.0f);
        }
        cuda_check_last();
    }
    // the padded vocabulary rows are never a target: keep them zero (the embedding's, and an untied head's)
    const GPTConfig* c = &m->config;
    size_t pad = (size_t)(c->padded_vocab_size - c->vocab_size) * c->channels;
    size_t start = (size_t)c->vocab_size * c->channels;
    cuda_check(cudaMemset(m->params.t[0] + start, 0, pad * sizeof(floatX)));
    if (c->arch == ARCH_LLAMA && !c->tied) cuda_check(cudaMemset(m->params.t[LP_LM_HEAD] + start, 0, pad * sizeof(floatX)));
    cuda_check(cudaDeviceSynchronize());
    gpt_init_master_from_params(m);
}

// ----------------------------------------------------------------------------------------------
// Linear layers run through the FP4 executor (llmc/fp4/linear.cuh), which holds the recipe and the plans.

// --bf16-forward-from: from its switch step on, the run's recipe with the forward GEMMs (fprop's two slots
// of every linear) in BF16, dgrad and wgrad as they were (llmc/fp4/recipe_schedule.h says why fprop only). The
// plans are rebuilt as for any recipe change; r is the run's own recipe, to return to with bf16_forward = 0.
static void gpt_set_bf16_forward(GPT* m, const Recipe* r, int bf16_forward, uint64_t seed, const char* gemm_mode) {
    Recipe now = bf16_forward ? recipe_with_bf16_forward(r) : *r;
    linear_set_recipe(&m->lin, &now, seed, gemm_mode);
}

// ----------------------------------------------------------------------------------------------
// Forward pass. With targets, also the per-token losses (and, when `backward` is set, the
// classifier writes dlogits in place, scaled by dloss); returns the mean loss (NAN without targets).
// The blocks of each family: gpt2_block_forward, llama_block_forward; the embedding and the head around them.

// Where layer l's activations live (the per-layer slices of Activations).
typedef struct {
    const floatX* residual;   // the block's input: the embeddings, or the previous block's output
    floatX *ln1, *qkv, *atty, *residual2, *ln2, *fch, *fch_gelu, *residual3;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *stats;
} LayerActs;

static LayerActs layer_acts(GPT* m, int l, int B, int T) {
    const GPTConfig* c = &m->config;
    Activations* a = &m->acts;
    const size_t N = (size_t)B * T, nc = N * c->channels;
    const size_t fc = dim_value(c, m->family->linears[LIN_FC].out), act = dim_value(c, m->family->linears[LIN_FCPROJ].in);
    LayerActs x;
    x.residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * nc;
    x.ln1 = a->ln1 + l * nc;
    x.qkv = a->qkv + l * N * config_qkv_channels(c);
    x.atty = a->atty + l * nc;
    x.residual2 = a->residual2 + l * nc;
    x.ln2 = a->ln2 + l * nc;
    x.fch = a->fch + l * N * fc;
    x.fch_gelu = a->fch_gelu + l * N * act;
    x.residual3 = a->residual3 + l * nc;
    x.ln1_mean = a->ln1_mean ? a->ln1_mean + l * N : NULL;
    x.ln1_rstd = a->ln1_rstd + l * N;
    x.ln2_mean = a->ln2_mean ? a->ln2_mean + l * N : NULL;
    x.ln2_rstd = a->ln2_rstd + l * N;
    x.stats = a->att_stats + (size_t)l * B * c->num_heads * T;
    return x;
}

static AttnShape attn_shape(const GPT* m, int B, int T) {
    const GPTConfig* c = &m->config;
    return AttnShape{B, T, c->num_heads, config_kv_heads(c), config_head_size(c)};
}

// --attention-fp4: the FP4 module's quantizers behind the model's AttnQuantizer hook.
static AttnFp4Shape attn_fp4_shape(AttnShape sh) { return AttnFp4Shape{sh.B, sh.T, sh.NH, sh.KVH, sh.HS}; }
static void attn_fp4_hook_qkv(const void* ctx, const floatX* qkv, floatX* fake, float* amax, float* dec, AttnShape sh,
                              uint64_t key, cudaStream_t s) {
    attn_fp4_quantize_qkv_gpu((const AttnFp4*)ctx, qkv, fake, amax, dec, attn_fp4_shape(sh), key, s);
}
static int attn_fp4_hook_ds(const void* ctx, const floatX* ds, floatX* rows, floatX* cols, float* amax, float* dec,
                            AttnShape sh, uint64_t key, cudaStream_t s) {
    return attn_fp4_quantize_ds_gpu((const AttnFp4*)ctx, ds, rows, cols, amax, dec, attn_fp4_shape(sh), key, s);
}

// Turns --attention-fp4 on for this model (after gpt_allocate): the hook and, when Q, K, V are quantized, their copies.
static void gpt_set_attention_fp4(GPT* m, const AttnFp4* a) {
    m->attn_fp4 = *a;
    if (!a->on) return;
    m->attn_quantizer.ctx = &m->attn_fp4;
    m->attn_quantizer.qkv = a->qkv.grid != QGRID_BF16 ? attn_fp4_hook_qkv : NULL;
    m->attn_quantizer.ds = a->ds.grid != QGRID_BF16 ? attn_fp4_hook_ds : NULL;
    m->attn_quantizer.dropin = a->dropin;
    if (!m->attn_quantizer.qkv) return;
    const GPTConfig* c = &m->config;
    size_t bytes = 0;
    m->qkv_fp4 = device_alloc<floatX>((size_t)c->num_layers * m->B * m->T * config_qkv_channels(c), &bytes);
    m->attn_fp4_scalars = device_alloc<float>((size_t)c->num_layers * 6, &bytes);
    cuda_check(cudaMemset(m->attn_fp4_scalars, 0, (size_t)c->num_layers * 6 * sizeof(float)));
}

// Layer l's attention call: the SR key (distinct from every linear's: rng_key's tensor ids above 0xA7700000) and the
// quantized copy of this forward's N tokens.
static uint64_t attn_fp4_key_of(const GPT* m, int l) {
    return rng_key(m->lin.seed, (uint32_t)m->lin.step, 0xA7700000u + (uint32_t)(m->lin.micro * m->config.num_layers + l));
}
static AttnFp4Copy attn_fp4_copy_of(const GPT* m, int l, int B, int T) {
    AttnFp4Copy cp = {NULL, NULL, NULL};
    if (!m->qkv_fp4) return cp;
    cp.qkv = m->qkv_fp4 + (size_t)l * B * T * config_qkv_channels(&m->config);
    cp.dec = m->attn_fp4_scalars + 6 * l;
    cp.amax = cp.dec + 3;
    return cp;
}

// The attention of layer l: cuDNN or the own kernels in BF16, or (--attention-fp4) the own kernels with FP4 Q, K, V, dS.
static void gpt_attention_forward(GPT* m, int l, const LayerActs* x, AttnShape sh) {
    if (!m->attn_fp4.on) {
        attention_forward(x->atty, x->stats, x->qkv, sh, m->stream);
        return;
    }
    attention_fp4_forward(x->atty, x->stats, x->qkv, attn_fp4_copy_of(m, l, sh.B, sh.T), sh, &m->attn_quantizer,
                          attn_fp4_key_of(m, l), m->stream);
}
static void gpt_attention_backward(GPT* m, int l, const LayerActs* x, AttnShape sh) {
    Activations* a = &m->acts;
    if (!m->attn_fp4.on) {
        attention_backward(a->dbuf_3c, a->dbuf_c, x->qkv, x->atty, x->stats, sh, m->stream);
        return;
    }
    attention_fp4_backward(a->dbuf_3c, a->dbuf_c, x->qkv, attn_fp4_copy_of(m, l, sh.B, sh.T), x->atty, x->stats, sh,
                           &m->attn_quantizer, attn_fp4_key_of(m, l), m->stream);
}

static void gpt2_block_forward(GPT* m, int l, int B, int T) {
    const GPTConfig* c = &m->config;
    const int L = c->num_layers, C = c->channels, N = B * T;
    cudaStream_t s = m->stream;
    Activations* a = &m->acts;
    ParamTensors<floatX>* p = &m->params;
    LayerActs x = layer_acts(m, l, B, T);
    linear_forward(&m->lin, l, LIN_QKV, x.qkv, x.ln1);
    gpt_attention_forward(m, l, &x, attn_shape(m, B, T));
    linear_forward(&m->lin, l, LIN_ATTPROJ, a->proj_out, x.atty);
    const LayerNormTensors ln2 = {.weight = p->layer(P_LN2W, l, C), .bias = p->layer(P_LN2B, l, C), .mean = x.ln2_mean,
                                  .rstd = x.ln2_rstd};
    fused_residual_layernorm_forward(x.residual2, x.ln2, x.residual, a->proj_out, ln2, N, C, s);
    linear_forward(&m->lin, l, LIN_FC, x.fch, x.ln2);
    gelu_forward(x.fch_gelu, x.fch, (size_t)N * 4 * C, s);
    linear_forward(&m->lin, l, LIN_FCPROJ, a->proj_out, x.fch_gelu);
    // the residual add of this block, fused with the LayerNorm that opens the next one (or lnf)
    if (l + 1 < L) {
        LayerActs next = layer_acts(m, l + 1, B, T);
        const LayerNormTensors ln1 = {.weight = p->layer(P_LN1W, l + 1, C), .bias = p->layer(P_LN1B, l + 1, C),
                                      .mean = next.ln1_mean, .rstd = next.ln1_rstd};
        fused_residual_layernorm_forward(x.residual3, next.ln1, x.residual2, a->proj_out, ln1, N, C, s);
    } else {
        const LayerNormTensors lnf = {.weight = p->t[P_LNFW], .bias = p->t[P_LNFB], .mean = a->lnf_mean,
                                      .rstd = a->lnf_rstd};
        fused_residual_layernorm_forward(x.residual3, a->lnf, x.residual2, a->proj_out, lnf, N, C, s);
    }
}

static void llama_block_forward(GPT* m, int l, int B, int T) {
    const GPTConfig* c = &m->config;
    const int L = c->num_layers, C = c->channels, N = B * T;
    const float eps = c->norm_eps;
    cudaStream_t s = m->stream;
    Activations* a = &m->acts;
    ParamTensors<floatX>* p = &m->params;
    LayerActs x = layer_acts(m, l, B, T);
    const AttnShape sh = attn_shape(m, B, T);
    linear_forward(&m->lin, l, LIN_QKV, x.qkv, x.ln1);
    rope_forward(x.qkv, a->rope_cos, a->rope_sin, B, T, sh.NH, sh.KVH, sh.HS, s);
    gpt_attention_forward(m, l, &x, sh);
    linear_forward(&m->lin, l, LIN_ATTPROJ, a->proj_out, x.atty);
    const RMSNormTensors ln2 = {.weight = p->layer(LP_LN2W, l, C), .rstd = x.ln2_rstd};
    fused_residual_rmsnorm_forward(x.residual2, x.ln2, x.residual, a->proj_out, ln2, N, C, eps, s);
    linear_forward(&m->lin, l, LIN_FC, x.fch, x.ln2);
    swiglu_forward(x.fch_gelu, x.fch, N, c->mlp_hidden, s);
    linear_forward(&m->lin, l, LIN_FCPROJ, a->proj_out, x.fch_gelu);
    // the residual add of this block, fused with the RMSNorm that opens the next one (or the final one)
    if (l + 1 < L) {
        LayerActs next = layer_acts(m, l + 1, B, T);
        const RMSNormTensors ln1 = {.weight = p->layer(LP_LN1W, l + 1, C), .rstd = next.ln1_rstd};
        fused_residual_rmsnorm_forward(x.residual3, next.ln1, x.residual2, a->proj_out, ln1, N, C, eps, s);
    } else {
        const RMSNormTensors lnf = {.weight = p->t[LP_LNFW], .rstd = a->lnf_rstd};
        fused_residual_rmsnorm_forward(x.residual3, a->lnf, x.residual2, a->proj_out, lnf, N, C, eps, s);
    }
}

// The LM head's weights: the token embedding (tied) or a matrix of its own.
static int head_tensor(const GPT* m) {
    return m->config.arch == ARCH_LLAMA && !m->config.tied ? LP_LM_HEAD : 0;
}

static float gpt_forward(GPT* m, const int* inputs, const int* targets, int B, int T, int backward, float dloss) {
    // any B x T within the buffers: evaluation runs more, shorter rows than training (eval_shape)
    fail_if(T > m->T || (int64_t)B * T > (int64_t)m->B * m->T, "internal: batch %dx%d exceeds the allocated %dx%d",
            B, T, m->B, m->T);
    const GPTConfig* c = &m->config;
    const int L = c->num_layers, C = c->channels, V = c->vocab_size, Vp = c->padded_vocab_size, N = B * T;
    const int llama = c->arch == ARCH_LLAMA;
    cudaStream_t s = m->stream;
    Activations* a = &m->acts;
    ParamTensors<floatX>* p = &m->params;
    cuda_check(cudaMemcpyAsync(m->inputs_device, inputs, N * sizeof(int), cudaMemcpyHostToDevice, s));
    linear_begin_forward(&m->lin, N, backward);
    if (targets) cuda_check(cudaMemcpyAsync(m->targets_device, targets, N * sizeof(int), cudaMemcpyHostToDevice, s));

    LayerActs first = layer_acts(m, 0, B, T);
    if (llama) {
        encoder_forward(a->encoded, m->inputs_device, p->t[LP_WTE], NULL, B, T, C, s);
        const RMSNormTensors ln1 = {.weight = p->t[LP_LN1W], .rstd = first.ln1_rstd};
        rmsnorm_forward(first.ln1, a->encoded, ln1, N, C, c->norm_eps, s);
    } else {
        encoder_forward(a->encoded, m->inputs_device, p->t[P_WTE], p->t[P_WPE], B, T, C, s);
        const LayerNormTensors ln1 = {.weight = p->t[P_LN1W], .bias = p->t[P_LN1B], .mean = first.ln1_mean,
                                      .rstd = first.ln1_rstd};
        layernorm_forward(first.ln1, a->encoded, ln1, N, C, s);
    }
    for (int l = 0; l < L; l++) {
        if (llama) llama_block_forward(m, l, B, T);
        else gpt2_block_forward(m, l, B, T);
    }
    matmul_forward(a->logits, a->lnf, p->t[head_tensor(m)], NULL, N, C, Vp, NULL, s);
    if (!targets) return NAN;
    fused_classifier(a->logits, a->losses, dloss, m->targets_device, N, V, Vp, backward, s);
    cuda_check(cudaMemcpyAsync(m->losses_host, a->losses, N * sizeof(float), cudaMemcpyDeviceToHost, s));
    cuda_check(cudaStreamSynchronize(s));
    linear_timer_harvest(&m->lin);
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

// The gradient slices of the per-layer tensors of layer l (per_layer = 1), or of the other tensors (per_layer = 0);
// route: only the tensors of that optimizer (OPTIMIZER_*), or -1: all.
static int gpt_grad_slices(GPT* m, int per_layer, int l, int route, float** bufs, size_t* counts) {
    int n = 0;
    for (int id = 0; id < m->num_tensors; id++) {
        if (m->family->params[id].per_layer != per_layer || m->param_sizes[id] == 0) continue;
        if (route >= 0 && optimizer_of(m->family, id, m->optimizer) != route) continue;
        counts[n] = per_layer ? gpt_per_layer(m, id) : m->param_sizes[id];
        bufs[n] = per_layer ? m->grads.layer(id, l, counts[n]) : m->grads.t[id];
        n++;
    }
    return n;
}

// One layer's gradient slices, as soon as the backward pass has finished them. ZeRO-1 with Muon: the Muon tensors'
// slices are all-reduced (the owner of a matrix needs all of it, and every rank's grad norm then still finds its
// shard's sums in place), the others reduced to their shards.
static void gpt_reduce_layer_grads(GPT* m, int l) {
    float* bufs[MAX_PARAM_TENSORS];
    size_t counts[MAX_PARAM_TENSORS];
    if (m->zero && m->optimizer == OPTIMIZER_MUON) {
        dist_allreduce_sum_async(m->dist, bufs, counts, gpt_grad_slices(m, 1, l, OPTIMIZER_MUON, bufs, counts), m->stream);
        gpt_reduce_grads_async(m, bufs, counts, gpt_grad_slices(m, 1, l, OPTIMIZER_ADAMW, bufs, counts));
        return;
    }
    gpt_reduce_grads_async(m, bufs, counts, gpt_grad_slices(m, 1, l, -1, bufs, counts));
}

// The tensors outside the layers (embeddings, final norm, head), after the embedding's backward, then the compute
// stream waits for all of the step's reductions.
static void gpt_reduce_other_grads(GPT* m) {
    float* bufs[MAX_PARAM_TENSORS];
    size_t counts[MAX_PARAM_TENSORS];
    gpt_reduce_grads_async(m, bufs, counts, gpt_grad_slices(m, 0, 0, -1, bufs, counts));
    dist_wait(m->dist, m->stream);
}

// Layer l's linear `kind` in the backward: its bias gradient (from BF16 dout, where the table gives it a bias), then
// the executor's data and weight gradients.
static void gpt_linear_backward(GPT* m, int l, int kind, floatX* dinp, const floatX* dout, const floatX* inp, int N) {
    const LinearRow* row = &m->family->linears[kind];
    if (row->bias >= 0) {
        const int OC = m->lin.kind[kind].OC;
        bias_backward(m->grads.layer(row->bias, l, OC), m->bias_scratch, dout, N, OC, m->stream);
    }
    linear_backward(&m->lin, l, kind, dinp, dout, inp);
}

// dresidual holds the gradient of the block's output; leaves the gradient of its input there.
static void gpt2_block_backward(GPT* m, int l, int B, int T) {
    const GPTConfig* c = &m->config;
    const int C = c->channels, N = B * T;
    cudaStream_t s = m->stream;
    Activations* a = &m->acts;
    ParamTensors<floatX>* p = &m->params;
    ParamTensors<float>* g = &m->grads;
    LayerActs x = layer_acts(m, l, B, T);
    // MLP: dresidual is the gradient of residual3 = residual2 + fcproj(gelu(fc(ln2(residual2))))
    gpt_linear_backward(m, l, LIN_FCPROJ, a->dbuf_4c, a->dresidual, x.fch_gelu, N);
    gelu_backward_inplace(a->dbuf_4c, x.fch, (size_t)N * 4 * C, s);
    gpt_linear_backward(m, l, LIN_FC, a->dbuf_c, a->dbuf_4c, x.ln2, N);
    const LayerNormTensors ln2 = {.weight = p->layer(P_LN2W, l, C), .dweight = g->layer(P_LN2W, l, C),
                                  .dbias = g->layer(P_LN2B, l, C), .mean = x.ln2_mean, .rstd = x.ln2_rstd};
    layernorm_backward(a->dresidual, a->dbuf_c, x.residual2, ln2, m->ln_scratch, N, C, s);
    // attention: dresidual is now the gradient of residual2 = residual + attproj(attn(qkv(ln1(residual))))
    gpt_linear_backward(m, l, LIN_ATTPROJ, a->dbuf_c, a->dresidual, x.atty, N);
    gpt_attention_backward(m, l, &x, attn_shape(m, B, T));
    gpt_linear_backward(m, l, LIN_QKV, a->dbuf_c, a->dbuf_3c, x.ln1, N);
    const LayerNormTensors ln1 = {.weight = p->layer(P_LN1W, l, C), .dweight = g->layer(P_LN1W, l, C),
                                  .dbias = g->layer(P_LN1B, l, C), .mean = x.ln1_mean, .rstd = x.ln1_rstd};
    layernorm_backward(a->dresidual, a->dbuf_c, x.residual, ln1, m->ln_scratch, N, C, s);
}

static void llama_block_backward(GPT* m, int l, int B, int T) {
    const GPTConfig* c = &m->config;
    const int C = c->channels, N = B * T;
    cudaStream_t s = m->stream;
    Activations* a = &m->acts;
    ParamTensors<floatX>* p = &m->params;
    ParamTensors<float>* g = &m->grads;
    LayerActs x = layer_acts(m, l, B, T);
    const AttnShape sh = attn_shape(m, B, T);
    // MLP: dresidual is the gradient of residual3 = residual2 + down(silu(gate) * up), (gate | up) = fc(rms2(residual2))
    gpt_linear_backward(m, l, LIN_FCPROJ, a->dbuf_act, a->dresidual, x.fch_gelu, N);
    swiglu_backward(a->dbuf_4c, a->dbuf_act, x.fch, N, c->mlp_hidden, s);
    gpt_linear_backward(m, l, LIN_FC, a->dbuf_c, a->dbuf_4c, x.ln2, N);
    const RMSNormTensors ln2 = {.weight = p->layer(LP_LN2W, l, C), .dweight = g->layer(LP_LN2W, l, C),
                                .rstd = x.ln2_rstd};
    rmsnorm_backward(a->dresidual, a->dbuf_c, x.residual2, ln2, m->ln_scratch, N, C, s);
    // attention: dresidual is now the gradient of residual2 = residual + attproj(attn(rope(qkv(rms1(residual)))))
    gpt_linear_backward(m, l, LIN_ATTPROJ, a->dbuf_c, a->dresidual, x.atty, N);
    gpt_attention_backward(m, l, &x, sh);
    rope_backward(a->dbuf_3c, a->rope_cos, a->rope_sin, B, T, sh.NH, sh.KVH, sh.HS, s);
    gpt_linear_backward(m, l, LIN_QKV, a->dbuf_c, a->dbuf_3c, x.ln1, N);
    const RMSNormTensors ln1 = {.weight = p->layer(LP_LN1W, l, C), .dweight = g->layer(LP_LN1W, l, C),
                                .rstd = x.ln1_rstd};
    rmsnorm_backward(a->dresidual, a->dbuf_c, x.residual, ln1, m->ln_scratch, N, C, s);
}

// reduce: this is the last micro-step of the optimizer step, so the gradients are summed over ranks
// (each layer's as soon as it is final). ZeRO-1 takes this path also with one process (--zero on),
// so that its collectives can be tested on one GPU.
static void gpt_backward(GPT* m, const int* inputs, int B, int T, int reduce) {
    reduce = reduce && m->dist && (m->dist->world > 1 || m->zero);
    const GPTConfig* c = &m->config;
    const int L = c->num_layers, C = c->channels, Vp = c->padded_vocab_size, N = B * T;
    const int llama = c->arch == ARCH_LLAMA;
    const size_t nc = (size_t)N * C;
    cudaStream_t s = m->stream;
    Activations* a = &m->acts;
    ParamTensors<floatX>* p = &m->params;
    ParamTensors<float>* g = &m->grads;
    fail_if(N != m->lin.tokens, "internal: a backward of %d tokens after a forward of %d", N, m->lin.tokens);

    // classifier: a->logits holds dlogits
    const int head = head_tensor(m);
    matmul_dgrad(a->dbuf_c, a->logits, p->t[head], N, C, Vp, NULL, s);
    matmul_wgrad(g->t[head], a->logits, a->lnf, N, C, Vp, NULL, s);
    cuda_check(cudaMemsetAsync(a->dresidual, 0, nc * sizeof(floatX), s));
    const floatX* last = a->residual3 + (L - 1) * nc;
    if (llama) {
        const RMSNormTensors lnf = {.weight = p->t[LP_LNFW], .dweight = g->t[LP_LNFW], .rstd = a->lnf_rstd};
        rmsnorm_backward(a->dresidual, a->dbuf_c, last, lnf, m->ln_scratch, N, C, s);
    } else {
        const LayerNormTensors lnf = {.weight = p->t[P_LNFW], .dweight = g->t[P_LNFW], .dbias = g->t[P_LNFB],
                                      .mean = a->lnf_mean, .rstd = a->lnf_rstd};
        layernorm_backward(a->dresidual, a->dbuf_c, last, lnf, m->ln_scratch, N, C, s);
    }
    for (int l = L - 1; l >= 0; l--) {
        if (llama) llama_block_backward(m, l, B, T);
        else gpt2_block_backward(m, l, B, T);
        if (reduce) gpt_reduce_layer_grads(m, l);
    }
    encoder_backward(&m->encoder_bw, g->t[0], llama ? NULL : g->t[P_WPE], a->dresidual, inputs, B, T, C, s);
    if (reduce) gpt_reduce_other_grads(m);
    linear_end_backward(&m->lin);   // this micro-step's amaxes are the next one's (the delayed rule)
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

// AdamW with the moments in NVFP4, segment by segment (two kernels each: llmc/adamw.cuh); the amaxes of this
// update replace the old ones after every segment is done (pass 2 of each decodes with the old ones).
static void gpt_update_nvfp4(GPT* m, AdamWParams* a, float weight_decay, int step, uint64_t seed) {
    const int S = m->opt4_nseg;
    if (S == 0) return;
    cuda_check(cudaMemsetAsync(m->opt4_amax + 2 * S, 0, (size_t)S * OPT4_STATES * sizeof(float), m->stream));
    for (int s = 0; s < S; s++) {
        const Opt4Seg* sg = &m->opt4_segs[s];
        const size_t off = m->params.t[sg->tensor] - m->params_memory;   // the whole tensor's start (all layers)
        a->weight_decay = m->family->params[sg->tensor].decay ? weight_decay : 0.0f;
        a->rng_key = rng_key(seed, (uint32_t)step, 1000u + (uint32_t)sg->tensor);   // the weights' BF16 rounding
        const Opt4Step st = opt4_step_init(a);
        const Opt4Device view = opt4_device_view(m->opt4_mem, m->opt4_elems, S, sg, s, seed, step);
        const size_t b = sg->begin;
        adamw_nvfp4_update(m->params_memory + b, m->master ? m->master + (b - m->opt_begin) : NULL, m->grads_memory + b,
                           &view, sg->n, b - off, &st, m->stream);
    }
    cuda_check(cudaMemcpyAsync(m->opt4_amax, m->opt4_amax + 2 * S, (size_t)S * OPT4_STATES * sizeof(float),
                               cudaMemcpyDeviceToDevice, m->stream));
}

// Muon on its matrices, one at a time; the BF16 rounding of the weights keys on the tensor as AdamW's does. Without
// ZeRO-1 every rank updates every matrix (the momentum and masters at the weights' offsets: opt_begin is 0). With
// it, each rank updates the matrices it owns, after the AdamW shards' all-gather, and broadcasts them.
static void gpt_update_muon(GPT* m, const OptimizerConfig* o, float lr, float grad_scale, int step, uint64_t seed) {
    MuonParams p;
    p.lr = lr;
    p.beta = m->muon.beta;
    p.nesterov = m->muon.nesterov;
    p.scale_rule = m->muon.scale_rule;
    p.ns_steps = m->muon.ns_steps;
    for (int i = 0; i < m->muon_nmat; i++) {
        const MuonMatrix* x = &m->muon_mats[i];
        const size_t b = gpt_muon_base(m, i);
        float *mom, *master;
        if (!m->zero) {
            mom = m->adam_m + b;
            master = m->master ? m->master + b : NULL;
        } else if (m->muon_off[i] != SIZE_MAX) {
            mom = m->muon_m + m->muon_off[i];
            master = m->muon_master ? m->muon_master + m->muon_off[i] : NULL;
        } else {
            continue;   // another rank's
        }
        p.weight_decay = m->family->params[x->tensor].decay ? o->weight_decay : 0.0f;
        muon_update_gpu(m->params_memory + b, master, m->grads_memory + b, mom, x->rows, x->cols, &p, grad_scale,
                        rng_key(seed, (uint32_t)step, 1000u + (uint32_t)x->tensor), x->offset, &m->ns_fp4,
                        &m->muon_scratch, m->stream);
    }
    if (!m->zero || !m->dist) return;
    const int world = m->dist->world;
    for (int i0 = 0; i0 < m->muon_nmat; i0 += 64) {   // the updated matrices from their owners, 64 to an NCCL group
        floatX* bufs[64];
        size_t counts[64];
        int roots[64], n = 0;
        for (int i = i0; i < m->muon_nmat && n < 64; i++, n++) {
            bufs[n] = m->params_memory + gpt_muon_base(m, i);
            counts[n] = (size_t)m->muon_mats[i].rows * m->muon_mats[i].cols;
            roots[n] = muon_owner(i, world);
        }
        dist_broadcast_bf16_group(m->dist, bufs, counts, roots, n, m->stream);
    }
}

// AdamW on every tensor (or, with --optimizer muon, on those Muon does not take); `step` keys the stochastic
// rounding. grad_norm is the pre-clip norm.
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
    if (m->opt4) {
        gpt_update_nvfp4(m, &a, o->weight_decay, step, seed);
        if (m->zero) dist_allgather_bf16(m->dist, m->params_memory, m->params_padded, m->stream);
        return;
    }
    for (int id = 0; id < m->num_tensors; id++) {
        if (optimizer_of(m->family, id, m->optimizer) != OPTIMIZER_ADAMW) continue;
        size_t off = m->params.t[id] - m->params_memory;
        size_t b = off > lo ? off : lo, e = off + m->param_sizes[id] < hi ? off + m->param_sizes[id] : hi;
        if (b >= e) continue;
        a.weight_decay = m->family->params[id].decay ? o->weight_decay : 0.0f;
        a.rng_key = rng_key(seed, (uint32_t)step, 1000u + (uint32_t)id);
        adamw_update(m->params_memory + b, m->master ? m->master + (b - lo) : NULL, m->grads_memory + b,
                     m->adam_m + (b - lo), m->adam_v + (b - lo), e - b, b - off, &a, m->stream);
    }
    if (m->zero) dist_allgather_bf16(m->dist, m->params_memory, m->params_padded, m->stream);
    if (m->optimizer == OPTIMIZER_MUON) gpt_update_muon(m, o, lr, a.grad_scale, step, seed);   // (after: see there)
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
// Checkpoints: model, optimizer state, data position and run state, as the checksummed sections of
// llmc/run/checkpoint.h (written atomically; each section's CRC32 is checked when it is read). The main
// file, ckpt_XXXXXXXX.bin, written by rank 0:
//   header           the model's shape and the run's settings (H_* in llmc/model/gpt_config.h), the recipe text
//   weights          the BF16 parameters
//   optimizer state  rank 0's FP32 master params (if any), then Adam m and v, for the parameters
//                    [opt_begin, opt_begin + opt_count): FP32, or (header H_OPT_STATE 1) the NVFP4 state
//                    (m's codes and scales, u's, the amaxes: llmc/fp4/optim_state.h); then, with --lora-svd-rank
//                    (header H_LORA_RANK), the LoRA-SVD factors, in every rank's file (each rank holds all of them)
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
        h[H_ZERO] = m->zero; h[H_RANK] = rank; h[H_HAS_PARAMS] = rank == 0; h[H_OPT_STATE] = m->opt4;
        h[H_OPTIMIZER] = m->optimizer;
        header_set_u64(h, H_MUON_OWNED_LO, m->muon_owned);
        h[H_LORA_RANK] = m->lin.lora_rank;
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
        if (m->opt4) {   // codes and scales of m and u, then the amaxes they were encoded under
            write_device(&w, m->opt4_mem, opt4_bytes(m->opt4_elems, m->opt4_nseg), staging);
        } else {
            write_device(&w, m->adam_m, m->opt_count * sizeof(float), staging);
            write_device(&w, m->adam_v, m->opt_count * sizeof(float), staging);
        }
        if (m->muon_owned) {   // ZeRO-1 with Muon: the owned matrices' momentum, then their masters
            write_device(&w, m->muon_m, m->muon_owned * sizeof(float), staging);
            if (m->muon_master) write_device(&w, m->muon_master, m->muon_owned * sizeof(float), staging);
        }
        // derived state, but the next refresh starts from it (warm), so a resume needs it to continue bit for bit
        if (m->lin.lora_rank) write_device(&w, m->lin.lora_factors, linear_lora_bytes(&m->lin), staging);
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
static void check_checkpoint_sizes(const CheckpointReader* r, const GPTConfig* c) {
    const int32_t* h = r->header;
    const size_t num_parameters = param_count(c);
    uint64_t begin = header_u64(h, H_OPT_BEGIN_LO), count = header_u64(h, H_OPT_COUNT_LO);
    fail_if(h[H_OPT_STATE] != 0 && h[H_OPT_STATE] != 1, "checkpoint '%s': optimizer state kind %d unknown (written by "
            "an incompatible build?)", r->path, h[H_OPT_STATE]);
    fail_if(h[H_OPTIMIZER] < 0 || h[H_OPTIMIZER] >= NUM_OPTIMIZERS, "checkpoint '%s': optimizer %d unknown (written by "
            "an incompatible build?)", r->path, h[H_OPTIMIZER]);
    fail_if(h[H_LORA_RANK] < 0 || h[H_LORA_RANK] > 64, "checkpoint '%s': LoRA-SVD rank %d (written by an incompatible "
            "build?)", r->path, h[H_LORA_RANK]);
    uint64_t want[CKPT_NUM_SECTIONS] = {0};
    want[CKPT_WEIGHTS] = h[H_HAS_PARAMS] ? num_parameters * sizeof(floatX) : 0;
    const uint64_t muon_owned = header_u64(h, H_MUON_OWNED_LO);
    want[CKPT_OPTIMIZER] = (h[H_HAS_MASTER] ? count * sizeof(float) : 0) +
                           (begin + count <= num_parameters ? optimizer_state_bytes(c, h[H_OPT_STATE], begin, count) : 0) +
                           (muon_owned <= num_parameters ? muon_owned * sizeof(float) * (h[H_HAS_MASTER] ? 2 : 1) : 0) +
                           (h[H_LORA_RANK] > 0 && h[H_LORA_RANK] <= 64 ? lora_checkpoint_bytes(c, h[H_LORA_RANK]) : 0);
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
    check_checkpoint_sizes(&r, &c);
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
    check_checkpoint_sizes(&r, &m->config);
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
        check_checkpoint_sizes(&r, &m->config);
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
    fail_if(r.header[H_OPT_STATE] != m->opt4, "checkpoint '%s' holds %s optimizer state; this run keeps it in %s "
            "(--optimizer-state)", r.path, r.header[H_OPT_STATE] ? "NVFP4" : "FP32", m->opt4 ? "NVFP4" : "FP32");
    fail_if(r.header[H_OPTIMIZER] != m->optimizer, "checkpoint '%s' holds %s's state; this run uses --optimizer %s",
            r.path, OPTIMIZER_NAMES[r.header[H_OPTIMIZER]], OPTIMIZER_NAMES[m->optimizer]);
    if (m->opt4) {
        read_device(&r, m->opt4_mem, opt4_bytes(m->opt4_elems, m->opt4_nseg), staging);
    } else {
        read_device(&r, m->adam_m, count * sizeof(float), staging);
        read_device(&r, m->adam_v, count * sizeof(float), staging);
    }
    const uint64_t muon_owned = header_u64(r.header, H_MUON_OWNED_LO);
    fail_if(muon_owned != m->muon_owned, "checkpoint '%s' holds the Muon state of %llu elements for this rank; this run "
            "gives it %zu (resume with the same --muon-split-qkv and processes)", r.path, (unsigned long long)muon_owned,
            m->muon_owned);
    if (muon_owned) {
        read_device(&r, m->muon_m, muon_owned * sizeof(float), staging);
        if (r.header[H_HAS_MASTER]) read_device(&r, m->muon_master, muon_owned * sizeof(float), staging);
    }
    fail_if(r.header[H_LORA_RANK] != m->lin.lora_rank, "checkpoint '%s' holds LoRA-SVD factors of rank %d; this run "
            "has --lora-svd-rank %d", r.path, r.header[H_LORA_RANK], m->lin.lora_rank);
    if (m->lin.lora_rank) {
        read_device(&r, m->lin.lora_factors, linear_lora_bytes(&m->lin), staging);
        linear_lora_loaded(&m->lin);
    }
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
        linear_set_step(&m->lin, step, batch);
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
    const Recipe trained = m->lin.recipe;
    const int to_bf16 = h->bf16 && m->lin.fp4_any;
    if (to_bf16) {
        Recipe bf16;
        recipe_preset(&bf16, "bf16");
        linear_set_recipe(&m->lin, &bf16, m->lin.seed, "emulated");
    }
    HeldOutScores sc;
    memset(&sc, 0, sizeof(sc));
    for (int k = 0; k < h->n_tasks; k++) sc.res[k] = held_out_task(m, h, k, step);
    if (to_bf16) linear_set_recipe(&m->lin, &trained, m->lin.seed, h->gemm_mode);
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
    const char* arch;
    int n_layer, n_embd, n_head, kv_heads, mlp_hidden;
    float rope_theta, norm_eps;
    const char* tie_embeddings;
    const char* init_from;
    const char* resume;
    int batch_size, seq_len, total_batch, steps;
    float lr, final_lr_frac, wsd_decay_frac;
    int warmup;
    const char* schedule;
    float beta1, beta2, eps, weight_decay, grad_clip;
    const char* master_weights;
    const char* optimizer_state;
    const char* optimizer;
    const char* muon_scale;
    float muon_momentum;
    int muon_nesterov, muon_split_qkv;
    const char* ns_fp4;
    const char* ns_fp4_gemms;
    int seed;
    int val_every, val_batches, sample_every, sample_tokens, ckpt_every;
    float spike_z;
    int shuffle;
    int deterministic;
    float peak_tflops;
    const char* zero;
    const char* nccl_id_file;
    int diag_every;
    int lora_svd_rank, lora_svd_every;
    const char* fp4_gemm_mode;
    const char* amax;
    const char* recipe;
    const char* slot_override[NUM_SLOTS];
    int fp4_gemm[3];
    int bf16_first_layers, bf16_last_layers;
    int qk_fp8;
    const char* attention_fp4;
    const char* attention_fp4_ds;
    const char* attention_fp4_backward;
    const char* bf16_forward_from;
    int allow_recipe_change;
    int eval_every, eval_items, eval_only;
    const char* eval_tasks;
    const char* hellaswag;
    const char* lambada;
    const char* eval_precision;
    const char* eval_dump;
    // which of the options a --recipe stack (RECIPE_STACKS, llmc/fp4/recipe.h) sets the command line gave itself
    int attention_fp4_given, optimizer_state_given, lora_svd_rank_given;
} TrainConfig;

static TrainConfig default_config(void) {
    TrainConfig t;
    memset(&t, 0, sizeof(t));
    t.train_data = "data/tinyshakespeare/tiny_shakespeare_train.bin";
    t.val_data = "data/tinyshakespeare/tiny_shakespeare_val.bin";
    t.tokenizer = "data/gpt2_tokenizer.bin";
    t.out_dir = "out";
    t.model = "";   // d12 (llama-30m with --arch llama) for a new run; with --resume / --init-from the checkpoint's
    t.arch = "auto";
    t.tie_embeddings = "default";   // (0 values of the shape flags: the model's own)
    t.init_from = "";
    t.resume = "";
    t.batch_size = 8; t.seq_len = 1024; t.total_batch = 0; t.steps = 100;
    t.lr = 6e-4f; t.warmup = 10; t.schedule = "cosine"; t.final_lr_frac = 0.1f; t.wsd_decay_frac = 0.2f;
    t.beta1 = 0.9f; t.beta2 = 0.95f; t.eps = 1e-8f; t.weight_decay = 0.1f; t.grad_clip = 1.0f;
    t.master_weights = "bf16";
    t.optimizer_state = "fp32";
    t.optimizer = "adamw";
    t.muon_scale = "moonlight";
    t.muon_momentum = 0.95f;
    t.muon_nesterov = 1;
    t.muon_split_qkv = 0;
    t.ns_fp4 = "off";
    t.ns_fp4_gemms = "";
    t.seed = 1337;
    t.val_every = 25; t.val_batches = 20; t.sample_every = 50; t.sample_tokens = 64; t.ckpt_every = 0;
    t.spike_z = 0.0f;
    t.shuffle = 1;
    t.deterministic = 1;
    t.peak_tflops = 989.0f;
    t.zero = "auto";
    t.diag_every = 50;
    t.lora_svd_rank = 0;
    t.lora_svd_every = 1;
    t.fp4_gemm_mode = "auto";
    t.amax = "now";
    t.nccl_id_file = "";
    t.recipe = "bf16";
    t.attention_fp4 = "off";
    t.attention_fp4_ds = "";
    t.attention_fp4_backward = "reuse";
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

// The command line: one table that parses and prints --help (llmc/run/args.h). Returns 1 when it printed the help.
static int parse_command_line(TrainConfig* tc, int argc, char** argv) {
    const Option options[] = {
        {"train-data", 'i', OPT_STRING, &tc->train_data, NULL, "training shards (glob pattern, llm.c .bin format)"},
        {"val-data", 'j', OPT_STRING, &tc->val_data, NULL, "validation shards (glob pattern); empty: no validation"},
        {"tokenizer", 0, OPT_STRING, &tc->tokenizer, NULL, "tokenizer file for decoding samples"},
        {"out-dir", 'o', OPT_STRING, &tc->out_dir, NULL, "directory for log.jsonl and checkpoints"},
        {"model", 'e', OPT_CHOICE, &tc->model, "d6|d12|d24|d36|d48|llama-tiny|llama-30m|llama-50m|llama-100m|llama-200m", "model: GPT-2 by depth (d12 = 124M) or Llama by non-embedding parameters (docs/MODELS.md); default d12 (llama-30m with --arch llama), or with --resume/--init-from the checkpoint's (which must agree with --model if both are given)"},
        {"arch", 0, OPT_CHOICE, &tc->arch, "auto|gpt2|llama", "model family (auto: the --model's, or the checkpoint's): GPT-2 (LayerNorm, GELU, learned positions, tied head) or Llama (RMSNorm, SwiGLU, RoPE, grouped-query attention, no biases)"},
        {"n-layer", 0, OPT_INT, &tc->n_layer, NULL, "layers (0: the model's)"},
        {"n-embd", 0, OPT_INT, &tc->n_embd, NULL, "channels (0: the model's)"},
        {"n-head", 0, OPT_INT, &tc->n_head, NULL, "query heads (0: the model's)"},
        {"kv-heads", 0, OPT_INT, &tc->kv_heads, NULL, "Llama: key/value heads, grouped-query attention (0: the model's; with --n-head, as many as query heads)"},
        {"mlp-hidden", 0, OPT_INT, &tc->mlp_hidden, NULL, "Llama: the SwiGLU MLP's width (0: the model's, or 2/3 of 4C rounded up to a multiple of 256)"},
        {"rope-theta", 0, OPT_FLOAT, &tc->rope_theta, NULL, "Llama: RoPE's base (0: the model's, 10000)"},
        {"norm-eps", 0, OPT_FLOAT, &tc->norm_eps, NULL, "Llama: the RMSNorm epsilon (0: the model's, 1e-5)"},
        {"tie-embeddings", 0, OPT_CHOICE, &tc->tie_embeddings, "default|on|off", "Llama: the LM head is the token embedding (default: off, a head of its own)"},
        {"init-from", 0, OPT_STRING, &tc->init_from, NULL, "start from this checkpoint's weights (fresh optimizer)"},
        {"resume", 0, OPT_STRING, &tc->resume, NULL, "resume a run: a checkpoint path, or 'latest' in --out-dir"},
        {"batch-size", 'b', OPT_INT, &tc->batch_size, NULL, "micro-batch size (sequences per GPU per micro-step)"},
        {"seq-len", 't', OPT_INT, &tc->seq_len, NULL, "sequence length"},
        {"total-batch", 'd', OPT_INT, &tc->total_batch, NULL, "tokens per optimizer step (0: one micro-batch); gradient accumulation makes up the rest"},
        {"steps", 'x', OPT_INT, &tc->steps, NULL, "optimizer steps"},
        {"lr", 'l', OPT_FLOAT, &tc->lr, NULL, "peak learning rate"},
        {"warmup", 'u', OPT_INT, &tc->warmup, NULL, "linear warmup steps"},
        {"schedule", 0, OPT_CHOICE, &tc->schedule, "cosine|linear|constant|wsd", "learning-rate schedule after warmup"},
        {"final-lr-frac", 'q', OPT_FLOAT, &tc->final_lr_frac, NULL, "final learning rate as a fraction of the peak"},
        {"wsd-decay-frac", 0, OPT_FLOAT, &tc->wsd_decay_frac, NULL, "wsd: fraction of steps spent decaying"},
        {"beta1", 0, OPT_FLOAT, &tc->beta1, NULL, "AdamW beta1"},
        {"beta2", 0, OPT_FLOAT, &tc->beta2, NULL, "AdamW beta2"},
        {"eps", 0, OPT_FLOAT, &tc->eps, NULL, "AdamW epsilon"},
        {"weight-decay", 'c', OPT_FLOAT, &tc->weight_decay, NULL, "AdamW weight decay (matrices only)"},
        {"grad-clip", 0, OPT_FLOAT, &tc->grad_clip, NULL, "clip the global gradient norm to this (0: off)"},
        {"master-weights", 0, OPT_CHOICE, &tc->master_weights, "bf16|fp32", "bf16: BF16 weights updated with stochastic rounding; fp32: FP32 master copy"},
        {"optimizer-state", 0, OPT_CHOICE, &tc->optimizer_state, "fp32|nvfp4", "AdamW's m and v in FP32, or nvfp4: m and sqrt(v) in NVFP4 blocks with stochastic rounding, 1.125 bytes per parameter instead of 8 (docs/FULLSTACK_FP4.md section 2; --recipe fullstack: nvfp4 unless given)"},
        {"optimizer", 0, OPT_CHOICE, &tc->optimizer, "adamw|muon", "muon: Muon (momentum, 5 Newton-Schulz steps in BF16, or with --ns-fp4 some GEMMs in FP4) on the blocks' linear weights, AdamW on embeddings, head, norms and biases; one lr and weight decay for both (docs/FULLSTACK_FP4.md section 3)"},
        {"muon-scale", 0, OPT_CHOICE, &tc->muon_scale, "moonlight|keller", "Muon's update scale: moonlight 0.2 sqrt(max(rows, cols)), which matches AdamW's update RMS so the lr carries over; keller sqrt(max(1, rows/cols)), which wants a larger lr (about 0.02)"},
        {"muon-momentum", 0, OPT_FLOAT, &tc->muon_momentum, NULL, "Muon's momentum beta"},
        {"muon-nesterov", 0, OPT_BOOL, &tc->muon_nesterov, NULL, "Muon's Nesterov momentum (on|off)"},
        {"muon-split-qkv", 0, OPT_BOOL, &tc->muon_split_qkv, NULL, "orthogonalise the fused QKV weight's Q, K and V rows as three matrices (on|off)"},
        {"ns-fp4", 0, OPT_STRING, &tc->ns_fp4, NULL, "--optimizer muon: off (BF16 Newton-Schulz), or a spec (nvfp4, nvfp4-2d, mxfp4, ...; round to nearest, no Hadamard) for the operands of the Newton-Schulz GEMMs --ns-fp4-gemms names: fake copies from the GPU quantizer, tensor scales in the GEMM's alpha (docs/FULLSTACK_FP4.md section 3)"},
        {"ns-fp4-gemms", 0, OPT_STRING, &tc->ns_fp4_gemms, NULL, "with --ns-fp4 SPEC: which GEMMs of each Newton-Schulz step are quantized, comma separated: xx (A = X X^T), aa ((c A) A), bx (B X), or all; default xx, the set closest to the BF16 result (with aa or bx, Newton-Schulz diverges on dense random matrices: docs/FULLSTACK_FP4.md section 3)"},
        {"seed", 0, OPT_INT, &tc->seed, NULL, "seed for init, data order and stochastic rounding"},
        {"val-every", 'v', OPT_INT, &tc->val_every, NULL, "validation loss every N steps and at the end (0: off)"},
        {"val-batches", 'm', OPT_INT, &tc->val_batches, NULL, "batches per validation (0: the whole split)"},
        {"sample-every", 's', OPT_INT, &tc->sample_every, NULL, "print a text sample every N steps (0: off)"},
        {"sample-tokens", 'g', OPT_INT, &tc->sample_tokens, NULL, "tokens per sample"},
        {"ckpt-every", 'n', OPT_INT, &tc->ckpt_every, NULL, "checkpoint every N steps and at the end (0: at the end only; -1: never, for benchmarks)"},
        {"spike-z", 0, OPT_FLOAT, &tc->spike_z, NULL, "skip an update whose loss or grad norm is this many sd above its running mean (0: off)"},
        {"shuffle", 0, OPT_BOOL, &tc->shuffle, NULL, "shuffle shards and sequences each epoch (on|off)"},
        {"deterministic", 0, OPT_BOOL, &tc->deterministic, NULL, "on: the same command repeats bit for bit (cuDNN's deterministic attention backward); off: cuDNN may sum the attention's dQ with atomics, not repeatable (and no faster at d12 on an H100; README, \"Reproducibility\")"},
        {"peak-tflops", 0, OPT_FLOAT, &tc->peak_tflops, NULL, "the GPU's dense BF16 peak, for MFU (H100/H200 SXM: 989)"},
        {"zero", 0, OPT_CHOICE, &tc->zero, "auto|on|off", "ZeRO-1: shard the optimizer state, reduce each gradient to its shard's owner, all-gather the weights; auto: on with several processes; on: also with one (tests the path on one GPU)"},
        {"nccl-id-file", 0, OPT_STRING, &tc->nccl_id_file, NULL, "launch without MPI: a path on a shared filesystem where rank 0 leaves NCCL's id (or set NCCL_COMM_ID)"},
        {"recipe", 'r', OPT_CHOICE, &tc->recipe, "bf16|nvfp4|nvfp4-naive|mxfp4|mxfp4-2d|ufp4|nvfp4-4o6|quartet2|quartet2-4o6|fullstack",
         "precision recipe of the linear layers' GEMMs (see README); fullstack: nvfp4's, plus --attention-fp4 nvfp4-2d, "
         "--optimizer-state nvfp4 and --lora-svd-rank 16 wherever those options are not given (docs/FULLSTACK_FP4.md "
         "section 5)"},
        {"fprop-x", 0, OPT_STRING, &tc->slot_override[SLOT_FPROP_X], NULL, "override slot fprop.x: a spec like bf16, nvfp4, 'nvfp4,sr', 'mxfp4-2d,h32'"},
        {"fprop-w", 0, OPT_STRING, &tc->slot_override[SLOT_FPROP_W], NULL, "override slot fprop.w"},
        {"dgrad-dy", 0, OPT_STRING, &tc->slot_override[SLOT_DGRAD_DY], NULL, "override slot dgrad.dy"},
        {"dgrad-w", 0, OPT_STRING, &tc->slot_override[SLOT_DGRAD_W], NULL, "override slot dgrad.w"},
        {"wgrad-dy", 0, OPT_STRING, &tc->slot_override[SLOT_WGRAD_DY], NULL, "override slot wgrad.dy"},
        {"wgrad-x", 0, OPT_STRING, &tc->slot_override[SLOT_WGRAD_X], NULL, "override slot wgrad.x"},
        {"fp4-fprop", 0, OPT_BOOL, &tc->fp4_gemm[0], NULL, "off: the forward GEMM stays BF16 (on|off)"},
        {"fp4-dgrad", 0, OPT_BOOL, &tc->fp4_gemm[1], NULL, "off: the data-gradient GEMM stays BF16 (on|off)"},
        {"fp4-wgrad", 0, OPT_BOOL, &tc->fp4_gemm[2], NULL, "off: the weight-gradient GEMM stays BF16 (on|off)"},
        {"bf16-first-layers", 0, OPT_INT, &tc->bf16_first_layers, NULL, "blocks at the start kept in BF16 (-1: the recipe's rule)"},
        {"bf16-last-layers", 0, OPT_INT, &tc->bf16_last_layers, NULL, "blocks at the end kept in BF16 (-1: the recipe's rule)"},
        {"qk-fp8", 0, OPT_BOOL, &tc->qk_fp8, NULL, "Q and K projections in MXFP8 (E4M3, 1x32, E8M0) where the recipe uses FP4 (on|off)"},
        {"attention-fp4", 0, OPT_STRING, &tc->attention_fp4, NULL, "off (cuDNN or the own kernels, BF16), or a spec for Q, K and V (nvfp4-2d, nvfp4, mxfp4, 'nvfp4-2d,sr', ...; bf16: the own kernels, nothing quantized): the own attention kernels read one quantized copy in the forward and the backward, P.V and dO.V^T stay BF16 (docs/FULLSTACK_FP4.md section 1; --recipe fullstack: nvfp4-2d unless given)"},
        {"attention-fp4-ds", 0, OPT_STRING, &tc->attention_fp4_ds, NULL, "the backward's dS spec (default: the --attention-fp4 spec with sr; bf16: dS unquantized, the fused backward)"},
        {"attention-fp4-backward", 0, OPT_CHOICE, &tc->attention_fp4_backward, "reuse|bf16", "reuse: the backward reads the forward's quantized Q, K, V; bf16: Attn-QAT's \"drop-in\" control (BF16 Q, K, V and dS in the backward; an ablation that trains unstably)"},
        {"bf16-forward-from", 0, OPT_STRING, &tc->bf16_forward_from, NULL, "FRACTION in (0, 1]: the last FRACTION of the steps run the forward GEMMs (fprop of every quantized linear) in BF16; dgrad and wgrad keep the recipe (e.g. 0.1; see README)"},
        {"fp4-gemm", 0, OPT_CHOICE, &tc->fp4_gemm_mode, "auto|native|fp8|emulated", "FP4 GEMMs: native cuBLASLt NVFP4 (compute capability 10.x), FP8 tensor cores for E8M0-scaled (MXFP4) operands (9.0+), exact BF16 emulation, or auto (native, else fp8 where operands fold)"},
        {"amax", 0, OPT_CHOICE, &tc->amax, "now|delayed", "FP32 tensor scales of the X and dY copies: from this micro-step's amax (an amax pass reads the tensor first), or delayed: from the previous micro-step's, where the whole-block kernels make the copy (a numerics change; README, \"The delayed amax\")"},
        {"lora-svd-rank", 0, OPT_INT, &tc->lora_svd_rank, NULL, "LoRA-SVD: each quantized linear's forward and data gradient also add a rank-R approximation of its weight's quantization residual W - Q(W), through two thin BF16 GEMMs; R a multiple of 8, at most 56; 0: off (docs/FULLSTACK_FP4.md section 4; --recipe fullstack: 16 unless given)"},
        {"lora-svd-every", 0, OPT_INT, &tc->lora_svd_every, NULL, "LoRA-SVD: refresh the factors from the current weights every K steps (randomized subspace iteration, warm-started from the previous factors)"},
        {"diag-every", 0, OPT_INT, &tc->diag_every, NULL, "FP4 diagnostics (per layer and slot: error, flushed, clipped, weight copy disagreement) in the log every N steps (0: off)"},
        {"allow-recipe-change", 0, OPT_BOOL, &tc->allow_recipe_change, NULL, "let --resume continue a checkpoint under a different recipe (on|off)"},
        {"eval-every", 0, OPT_INT, &tc->eval_every, NULL, "HellaSwag and LAMBADA accuracy every N steps and after the last (0: off)"},
        {"eval-tasks", 0, OPT_STRING, &tc->eval_tasks, NULL, "held-out tasks to run, comma separated: hellaswag, lambada"},
        {"hellaswag", 0, OPT_STRING, &tc->hellaswag, NULL, "HellaSwag token file (python3 dev/data/eval_prepro.py writes it)"},
        {"lambada", 0, OPT_STRING, &tc->lambada, NULL, "LAMBADA token file (python3 dev/data/eval_prepro.py writes it)"},
        {"eval-items", 0, OPT_INT, &tc->eval_items, NULL, "evaluate the first N items of each task (0: all)"},
        {"eval-precision", 0, OPT_CHOICE, &tc->eval_precision, "recipe|bf16", "the evaluation forward: the recipe's (FP4 as trained) or BF16"},
        {"eval-only", 0, OPT_FLAG, &tc->eval_only, NULL, "evaluate the --init-from checkpoint (validation loss on --val-data, and --eval-tasks), append the results to --out-dir/eval.jsonl and exit"},
        {"eval-dump", 0, OPT_STRING, &tc->eval_dump, NULL, "a directory for each evaluation's per-row scores and first batch's logits (dev/eval/check_eval.py reads them)"},
    };
    const int num_options = (int)(sizeof(options) / sizeof(options[0]));
    unsigned char given[sizeof(options) / sizeof(options[0])];
    if (parse_options_given(options, num_options, argc, argv, given)) return 1;
    tc->attention_fp4_given = option_given(options, num_options, given, "attention-fp4");
    tc->optimizer_state_given = option_given(options, num_options, given, "optimizer-state");
    tc->lora_svd_rank_given = option_given(options, num_options, given, "lora-svd-rank");
    return 0;
}

// A --recipe that sets more than the linears (fullstack; RECIPE_STACKS in llmc/fp4/recipe.h): its values of the options
// the command line left out. An option given keeps its value (--recipe fullstack --attention-fp4 off: no FP4 attention).
static void apply_recipe_stack(TrainConfig* tc) {
    const RecipeStack* st = recipe_find_stack(tc->recipe);
    if (!st) return;
    if (!tc->attention_fp4_given) tc->attention_fp4 = st->attention_fp4;
    if (!tc->optimizer_state_given) tc->optimizer_state = st->optimizer_state;
    if (!tc->lora_svd_rank_given) tc->lora_svd_rank = st->lora_svd_rank;
}

// The options' own ranges, and the pairs that exclude each other.
static void check_options(const TrainConfig* tc) {
    fail_if(tc->batch_size <= 0, "--batch-size must be positive (got %d)", tc->batch_size);
    fail_if(tc->seq_len <= 0, "--seq-len must be positive (got %d)", tc->seq_len);
    fail_if(tc->steps <= 0, "--steps must be positive (got %d)", tc->steps);
    fail_if(tc->lr <= 0.0f, "--lr must be positive");
    fail_if(tc->warmup < 0, "--warmup must be >= 0");
    fail_if(tc->final_lr_frac < 0.0f || tc->final_lr_frac > 1.0f, "--final-lr-frac must be in [0, 1]");
    fail_if(tc->wsd_decay_frac < 0.0f || tc->wsd_decay_frac > 1.0f, "--wsd-decay-frac must be in [0, 1]");
    fail_if(tc->beta1 < 0.0f || tc->beta1 >= 1.0f || tc->beta2 < 0.0f || tc->beta2 >= 1.0f,
            "--beta1/--beta2 must be in [0, 1)");
    fail_if(tc->eps <= 0.0f || tc->weight_decay < 0.0f || tc->grad_clip < 0.0f,
            "--eps must be > 0, --weight-decay and --grad-clip >= 0");
    fail_if(tc->val_every < 0 || tc->sample_every < 0 || tc->val_batches < 0 || tc->sample_tokens < 0,
            "--val-every, --val-batches, --sample-every and --sample-tokens must be >= 0");
    fail_if(tc->ckpt_every < -1, "--ckpt-every must be >= 0, or -1 for no checkpoint at all");
    fail_if(tc->init_from[0] && tc->resume[0], "--init-from and --resume exclude each other");
    fail_if(tc->eval_every < 0 || tc->eval_items < 0, "--eval-every and --eval-items must be >= 0");
    fail_if(!tc->out_dir[0], "--out-dir must not be empty (the directory for log.jsonl and checkpoints)");
    fail_if(tc->diag_every < 0, "--diag-every must be >= 0 (0: off)");
    fail_if(tc->lora_svd_rank < 0, "--lora-svd-rank must be >= 0 (0: off)");
    fail_if(tc->lora_svd_every < 1, "--lora-svd-every must be >= 1 (steps between refreshes of the LoRA-SVD factors)");
    fail_if(tc->spike_z < 0.0f, "--spike-z must be >= 0 (0: off)");
    fail_if(tc->peak_tflops <= 0.0f, "--peak-tflops must be positive (the GPU's dense BF16 peak, for the MFU)");
    fail_if(tc->bf16_first_layers < -1 || tc->bf16_last_layers < -1,
            "--bf16-first-layers and --bf16-last-layers must be >= 0, or -1 for the recipe's rule");
    fail_if(tc->n_layer < 0 || tc->n_embd < 0 || tc->n_head < 0 || tc->kv_heads < 0 || tc->mlp_hidden < 0 ||
            tc->rope_theta < 0.0f || tc->norm_eps < 0.0f,
            "--n-layer, --n-embd, --n-head, --kv-heads, --mlp-hidden, --rope-theta and --norm-eps must be >= 0 "
            "(0: the model's)");
    fail_if(tc->eval_only && !tc->init_from[0], "--eval-only evaluates a checkpoint: give it with --init-from CKPT%s",
            tc->resume[0] ? " (not --resume)" : "");
    fail_if(tc->muon_momentum < 0.0f || tc->muon_momentum >= 1.0f, "--muon-momentum must be in [0, 1) (got %g)",
            tc->muon_momentum);
    NsFp4 ns;
    char ns_err[512];
    fail_if(ns_fp4_set(&ns, tc->ns_fp4, tc->ns_fp4_gemms, ns_err, sizeof(ns_err)), "%s", ns_err);
    fail_if(ns.on && strcmp(tc->optimizer, "muon") != 0, "--ns-fp4 %s quantizes Muon's Newton-Schulz: it needs "
            "--optimizer muon (this run's optimizer is %s)", tc->ns_fp4, tc->optimizer);
    char from[64] = "";   // the value a --recipe stack set (apply_recipe_stack), said so
    if (recipe_find_stack(tc->recipe) && !tc->optimizer_state_given)
        snprintf(from, sizeof(from), " (--recipe %s's)", tc->recipe);
    fail_if(!strcmp(tc->optimizer, "muon") && !strcmp(tc->optimizer_state, "nvfp4"), "--optimizer muon with "
            "--optimizer-state nvfp4%s is not built yet (Muon keeps its momentum in FP32); use --optimizer-state fp32, or "
            "--optimizer adamw", from);
}

// ----------------------------------------------------------------------------------------------
// The run: what main() decides before the GPU, then opens and owns, in the order it happens.

typedef struct {
    TrainConfig tc;
    // the launch: this process's place among those the launcher started, and the batch arithmetic
    int world, rank, zero;
    MuonConfig muon;               // --optimizer muon's settings (used only with it)
    NsFp4 ns_fp4;                  // --ns-fp4, --ns-fp4-gemms (off unless --optimizer muon)
    int B, T, grad_accum;
    int64_t total_batch;           // tokens per optimizer step
    BatchPlan batch;
    // the model, and the checkpoint it starts from (if any)
    GPTConfig config;
    char resume_path[4096];
    RunState saved;                // a resume's run state
    char saved_recipe[1024];
    char ckpt_recipe[1024];        // the recipe the checkpoint was trained with (--eval-only compares)
    int ckpt_step;
    long long ckpt_tokens;         // tokens it was trained on
    // the recipe, resolved for this depth, and its schedule (--bf16-forward-from)
    Recipe recipe;
    AttnFp4 attn_fp4;               // --attention-fp4, --attention-fp4-ds
    char recipe_text[1024];
    int quantizes;
    RecipeSchedule schedule;
    // data, tokenizer and held-out tasks (read and checked before the GPU)
    DataLoader train_loader, val_loader;
    int have_val, have_tasks;
    Tokenizer tokenizer;
    HeldOut held;
    // the GPU side
    Dist dist;
    cudaDeviceProp prop;
    GPT model;
    RunState rs;                   // the run state checkpoints record
    Logger logger;
    CheckpointTrail trail;         // which checkpoint a divergence names as the one to resume from
    double ema_ms;                 // step time, for the ETA
    double bucket_sum[LINEAR_BUCKETS];   // the executor's timer buckets over the steps after the first
    int bucket_steps;
} Run;

// This process's place among those the launcher started (dist_init confirms it once CUDA is up), ZeRO, and the
// batch arithmetic (in 64-bit).
static void plan_launch(Run* r) {
    const TrainConfig* tc = &r->tc;
#ifdef ENABLE_MPI
    const int mpi_build = 1;
#else
    const int mpi_build = 0;
#endif
    const char* launcher = dist_host_place(mpi_build, &r->world, &r->rank);
#ifndef ENABLE_NCCL
    fail_if(r->world > 1, "started as rank %d of %d (%s), but this build has no NCCL, so it runs as one process only: "
            "rebuild where nccl.h and libnccl.so are found (see the Makefile's build: lines)", r->rank, r->world, launcher);
#endif
    (void)launcher;
    r->zero = strcmp(tc->zero, "on") == 0 || (strcmp(tc->zero, "auto") == 0 && r->world > 1);
    r->muon = (MuonConfig){.scale_rule = strcmp(tc->muon_scale, "keller") == 0 ? MUON_SCALE_KELLER : MUON_SCALE_MOONLIGHT,
                           .beta = tc->muon_momentum, .nesterov = tc->muon_nesterov, .split_qkv = tc->muon_split_qkv,
                           .ns_steps = 5};
    r->B = tc->batch_size;
    r->T = tc->seq_len;
    char err[2048];
    fail_if(batch_plan(r->B, r->T, r->world, tc->total_batch, &r->batch, err, sizeof(err)), "%s", err);
    r->grad_accum = r->batch.grad_accum;
    r->total_batch = r->batch.step_tokens;
}

// A resume's run state must match this launch: processes, ZeRO, accumulation, seed, steps left.
static void check_resume(const Run* r, const CheckpointReader* ckr) {
    const RunState* saved = &r->saved;
    const char* path = r->resume_path;
    fail_if(saved->world != r->world || saved->zero != r->zero,
            "cannot resume '%s' on %d process(es) with ZeRO %s: it was written by %d process(es) with ZeRO %s. "
            "Resume with the same number of processes and --zero setting (or use --init-from for the weights "
            "only)", path, r->world, r->zero ? "on" : "off", saved->world, saved->zero ? "on" : "off");
    fail_if(saved->grad_accum != r->grad_accum,
            "cannot resume '%s' bit for bit: it was written with gradient accumulation %d; this run has %d "
            "(keep --batch-size, --seq-len and --total-batch)", path, saved->grad_accum, r->grad_accum);
    fail_if(saved->seed != (uint64_t)r->tc.seed, "cannot resume '%s': it was trained with --seed %llu, not %d",
            path, (unsigned long long)saved->seed, r->tc.seed);
    const int opt4 = strcmp(r->tc.optimizer_state, "nvfp4") == 0;
    fail_if(ckr->header[H_OPT_STATE] != opt4, "cannot resume '%s': its optimizer state is %s; this run asks for "
            "--optimizer-state %s (resume with --optimizer-state %s, or use --init-from for the weights only)", path,
            ckr->header[H_OPT_STATE] ? "nvfp4" : "fp32", r->tc.optimizer_state, ckr->header[H_OPT_STATE] ? "nvfp4" : "fp32");
    const char* saved_opt = OPTIMIZER_NAMES[ckr->header[H_OPTIMIZER]];
    fail_if(strcmp(saved_opt, r->tc.optimizer) != 0, "cannot resume '%s': it was trained with --optimizer %s; this run "
            "asks for --optimizer %s (resume with --optimizer %s, or use --init-from for the weights only, with a fresh "
            "optimizer)", path, saved_opt, r->tc.optimizer, saved_opt);
    fail_if(ckr->header[H_LORA_RANK] != r->tc.lora_svd_rank, "cannot resume '%s' bit for bit: it was trained with "
            "--lora-svd-rank %d; this run asks for %d (resume with --lora-svd-rank %d, or use --init-from for the weights "
            "only)", path, ckr->header[H_LORA_RANK], r->tc.lora_svd_rank, ckr->header[H_LORA_RANK]);
    fail_if(saved->step >= r->tc.steps, "nothing to do: '%s' is already at step %d of --steps %d", path,
            saved->step, r->tc.steps);
    if (r->rank != 0 && r->zero) check_shard_file(path, ckr, r->rank);
}

// --arch: ARCH_* or -1 (auto).
static int arch_asked(const TrainConfig* tc) {
    for (int a = 0; a < NUM_ARCHS; a++)
        if (!strcmp(tc->arch, ARCH_NAMES[a])) return a;
    return -1;
}

// A new model's shape: --model's preset (or the family's default), then the shape flags.
static GPTConfig new_model_config(const TrainConfig* tc) {
    const int arch = arch_asked(tc);
    GPTConfig c = config_from_descriptor(tc->model[0] ? tc->model : arch == ARCH_LLAMA ? "llama-30m" : GPT_DEFAULT_MODEL);
    fail_if(arch >= 0 && arch != c.arch, "--arch %s conflicts with --model %s, a %s model: leave one out", tc->arch,
            tc->model, ARCH_NAMES[c.arch]);
    const ShapeFlags flags = {.n_layer = tc->n_layer, .n_embd = tc->n_embd, .n_head = tc->n_head, .kv_heads = tc->kv_heads,
                              .mlp_hidden = tc->mlp_hidden, .rope_theta = tc->rope_theta, .norm_eps = tc->norm_eps,
                              .tie = !strcmp(tc->tie_embeddings, "on") ? 1 : !strcmp(tc->tie_embeddings, "off") ? 0 : -1};
    char err[512];
    fail_if(config_apply_shape(&c, &flags, err, sizeof(err)), "%s", err);
    char where[64];
    snprintf(where, sizeof(where), "the model's shape flags (--n-layer ... --kv-heads ...)");
    config_require(&c, tc->n_layer > 0 || tc->n_embd > 0 || tc->n_head > 0 || tc->kv_heads > 0 || tc->mlp_hidden > 0
                           ? where : NULL);
    return c;
}

// The model: a checkpoint's (its header and, for a resume, its run state), or --model's.
static void plan_model(Run* r) {
    const TrainConfig* tc = &r->tc;
    if (tc->resume[0]) {
        if (strcmp(tc->resume, "latest") == 0)
            fail_if(!find_latest_checkpoint(tc->out_dir, r->resume_path, sizeof(r->resume_path)),
                    "--resume latest: no checkpoint (ckpt_XXXXXXXX.bin) in '%s'", tc->out_dir);
        else
            snprintf(r->resume_path, sizeof(r->resume_path), "%s", tc->resume);
    }
    const char* weights_from = r->resume_path[0] ? r->resume_path : tc->init_from;
    const int shape_flags = tc->n_layer > 0 || tc->n_embd > 0 || tc->n_head > 0 || tc->kv_heads > 0 ||
                            tc->mlp_hidden > 0 || tc->rope_theta > 0 || tc->norm_eps > 0 ||
                            strcmp(tc->tie_embeddings, "default") != 0;
    if (!weights_from[0]) {
        r->config = new_model_config(tc);
    } else {
        fail_if(shape_flags, "a checkpoint's weights fix the model's shape: leave --n-layer, --n-embd, --n-head, "
                "--kv-heads, --mlp-hidden, --rope-theta, --norm-eps and --tie-embeddings out with --%s",
                r->resume_path[0] ? "resume" : "init-from");
        CheckpointReader ckr;
        r->config = open_checkpoint(&ckr, weights_from);
        const int32_t* ch = ckr.header;
        r->ckpt_step = ch[H_STEP];
        r->ckpt_tokens = (long long)ch[H_STEP] * ch[H_B] * ch[H_T] * ch[H_GRAD_ACCUM] * ch[H_WORLD];
        snprintf(r->ckpt_recipe, sizeof(r->ckpt_recipe), "%s", ckr.text);
        fail_if(!ch[H_HAS_PARAMS], "'%s' is the optimizer shard of rank %d; give the main checkpoint file "
                "(ckpt_%08d.bin)", weights_from, ch[H_RANK], ch[H_STEP]);
        if (tc->model[0]) {
            // a checkpoint's weights fix the shape: a --model that disagrees is a mistake, not a request
            GPTConfig asked = config_from_descriptor(tc->model);
            const char* name = config_descriptor_of(&r->config);
            char shape[160];
            fail_if(!config_same_shape(&asked, &r->config), "--model %s conflicts with checkpoint '%s', which holds a %s "
                    "model (%s): leave --model out to continue with the checkpoint's model, or start a new run "
                    "without --%s", tc->model, weights_from, name ? name : "custom",
                    config_describe(&r->config, shape, sizeof(shape)), r->resume_path[0] ? "resume" : "init-from");
        }
        const int arch = arch_asked(tc);
        fail_if(arch >= 0 && arch != r->config.arch, "--arch %s conflicts with checkpoint '%s', which holds a %s model",
                tc->arch, weights_from, ARCH_NAMES[r->config.arch]);
        check_checkpoint_sizes(&ckr, &r->config);
        if (r->resume_path[0]) {
            read_run_state(&ckr, &r->saved, r->saved_recipe, sizeof(r->saved_recipe));
            check_resume(r, &ckr);
        }
        ckpt_close(&ckr);
    }
    fail_if(r->T > r->config.max_seq_len, "--seq-len %d exceeds the model's %d positions", r->T, r->config.max_seq_len);
}

// --bf16-forward-from: the step from which the forward GEMMs run in BF16 (a resume keeps the checkpoint's).
static void plan_schedule(Run* r) {
    const TrainConfig* tc = &r->tc;
    char err[2048];
    float bf16_forward_from = 0.0f;
    if (tc->bf16_forward_from[0]) {
        const Recipe* recipe = &r->recipe;
        const int L = r->config.num_layers;
        fail_if(bf16_forward_parse(tc->bf16_forward_from, &bf16_forward_from, err, sizeof(err)), "%s", err);
        fail_if(!recipe_forward_quantized(recipe, L), "--bf16-forward-from %s: recipe %s runs no forward "
                "GEMM in FP4 (%s), so there is nothing to switch to BF16; leave the option out, or pick a recipe that "
                "quantizes fprop", tc->bf16_forward_from, tc->recipe, recipe_is_bf16(recipe) ? "a BF16 recipe"
                : !tc->fp4_gemm[0] ? "--fp4-fprop off" : !recipe_quantizes(recipe, L)
                ? "every block is kept in BF16" : "both fprop slots are BF16");
        const Recipe tail = recipe_with_bf16_forward(recipe);   // what the switch will ask of --fp4-gemm fp8
        fail_if(!strcmp(tc->fp4_gemm_mode, "fp8") && !recipe_fp8_gemms(&tail), "--bf16-forward-from %s with --fp4-gemm "
                "fp8: once the forward GEMMs are BF16, no GEMM of recipe %s has two operands with power-of-two (E8M0) "
                "block scales for the FP8 path; use --fp4-gemm auto (FP8 where the operands fold, emulation elsewhere)",
                tc->bf16_forward_from, tc->recipe);
    }
    recipe_schedule_init(&r->schedule, bf16_forward_from, tc->steps);
    if (r->resume_path[0]) {
        RecipeSchedule asked = r->schedule;
        fail_if(recipe_schedule_resume(&r->saved.schedule, &asked, tc->allow_recipe_change, &r->schedule, err,
                                       sizeof(err)), "cannot resume '%s': %s", r->resume_path, err);
    }
}

// --attention-fp4: the specs, the shapes they need (the training rows, and the evaluation rows, whose length is a
// multiple of 64), and the recipe text's "; attention: ..." (so that a checkpoint records it and --resume checks it).
static void plan_attention_fp4(Run* r) {
    const TrainConfig* tc = &r->tc;
    attn_fp4_set(&r->attn_fp4, tc->attention_fp4, tc->attention_fp4_ds[0] ? tc->attention_fp4_ds : NULL);
    r->attn_fp4.dropin = strcmp(tc->attention_fp4_backward, "bf16") == 0;
    const char* why = attn_fp4_dropin_problem(&r->attn_fp4);
    fail_if(why != NULL, "--attention-fp4-backward bf16 %s", why);
    fail_if(r->attn_fp4.dropin && tc->attention_fp4_ds[0], "--attention-fp4-backward bf16 keeps dS in BF16: drop "
            "--attention-fp4-ds");
    if (!r->attn_fp4.on) return;
    const GPTConfig* c = &r->config;
    const AttnFp4Shape sh = {r->B, r->T, c->num_heads, config_kv_heads(c), config_head_size(c)};
    char err[512], desc[256];
    fail_if(!attn_fp4_check_shape(&r->attn_fp4, sh, err, sizeof(err)), "%s (--seq-len %d)", err, r->T);
    fail_if(sh.HS != 32 && sh.HS != 64 && sh.HS != 128, "--attention-fp4 runs the own attention kernels, which take head "
            "sizes 32, 64 and 128 (this model's is %d)", sh.HS);
    attn_fp4_describe(&r->attn_fp4, desc, sizeof(desc));
    const size_t n = strlen(r->recipe_text);
    snprintf(r->recipe_text + n, sizeof(r->recipe_text) - n, "; attention: %s", desc);
}

// --ns-fp4 (with --optimizer muon; check_options refused it otherwise): the spec, the shapes of Muon's matrices it
// must block, and the recipe text's "; newton-schulz: ..." (so that a checkpoint records it and --resume checks it).
static void plan_ns_fp4(Run* r) {
    const TrainConfig* tc = &r->tc;
    char err[512];
    fail_if(ns_fp4_set(&r->ns_fp4, tc->ns_fp4, tc->ns_fp4_gemms, err, sizeof(err)), "%s", err);
    if (!r->ns_fp4.on) return;
    const int nmat = muon_matrices(&r->config, r->muon.split_qkv, NULL);
    MuonMatrix* mats = (MuonMatrix*)xmalloc((size_t)nmat * sizeof(MuonMatrix));
    muon_matrices(&r->config, r->muon.split_qkv, mats);
    const ModelFamily* f = model_family(&r->config);
    const int side = r->ns_fp4.spec.block_l > r->ns_fp4.spec.block_w ? r->ns_fp4.spec.block_l : r->ns_fp4.spec.block_w;
    for (int i = 0; i < nmat; i++) {
        const int n = mats[i].rows < mats[i].cols ? mats[i].rows : mats[i].cols;
        const int k = mats[i].rows < mats[i].cols ? mats[i].cols : mats[i].rows;
        const char* why = ns_fp4_shape_problem(&r->ns_fp4, n, k);
        fail_if(why, "--ns-fp4 %s: Muon's %s matrix is %d x %d, and %s (%d); use a model whose widths are multiples of "
                "%d, or --ns-fp4 off", tc->ns_fp4, f->params[mats[i].tensor].name, mats[i].rows, mats[i].cols, why,
                side, side);
    }
    free(mats);
    char desc[256];
    ns_fp4_describe(&r->ns_fp4, desc, sizeof(desc));
    const size_t n = strlen(r->recipe_text);
    snprintf(r->recipe_text + n, sizeof(r->recipe_text) - n, "; newton-schulz: %s", desc);
}

// The recipe, resolved for this depth, and the token and channel counts it must quantize.
static void plan_recipe(Run* r) {
    const TrainConfig* tc = &r->tc;
    Recipe* recipe = &r->recipe;
    const GPTConfig* config = &r->config;
    recipe_preset(recipe, tc->recipe);
    for (int i = 0; i < NUM_SLOTS; i++)
        if (tc->slot_override[i][0]) recipe_set_slot(recipe, (Slot)i, tc->slot_override[i]);
    for (int g = 0; g < NUM_GEMMS; g++)
        if (!tc->fp4_gemm[g]) recipe_disable_gemm(recipe, g);
    if (tc->bf16_first_layers >= 0) recipe->bf16_first = tc->bf16_first_layers;
    if (tc->bf16_last_layers >= 0) recipe->bf16_last = tc->bf16_last_layers;
    recipe->qk_fp8 = tc->qk_fp8;
    recipe->amax_delayed = !strcmp(tc->amax, "delayed");
    recipe_resolve_layers(recipe, config->num_layers);
    recipe_check(recipe);
    r->quantizes = recipe_quantizes(recipe, config->num_layers);
    fail_if(recipe->amax_delayed && !r->quantizes, "--amax delayed: recipe %s quantizes nothing, so it has no amax to "
            "delay", tc->recipe);
    if (r->quantizes) {
        char err[2048];
        int rc = recipe_check_model(recipe, r->batch.micro_tokens, config, 1, err, sizeof(err));
        fail_if(rc == 1, "recipe %s with --batch-size %d x --seq-len %d: %s. Change --batch-size or --seq-len",
                tc->recipe, r->B, r->T, err);
        if (config->arch == ARCH_LLAMA)
            fail_if(rc == 2, "recipe %s on a Llama model of %d channels, %d QKV outputs and an MLP of %d: %s", tc->recipe,
                    config->channels, config_qkv_channels(config), config->mlp_hidden, err);
        fail_if(rc == 2, "recipe %s on a model of %d channels: %s", tc->recipe, config->channels, err);
    }
    if (tc->lora_svd_rank > 0) {   // --lora-svd-rank: what linear_lora_enable refuses, before the GPU
        const int R = tc->lora_svd_rank;
        const ModelFamily* f = model_family(config);
        for (int k = 0; k < NUM_LINEARS; k++) {
            const int K = (int)dim_value(config, f->linears[k].in), OC = (int)dim_value(config, f->linears[k].out);
            const char* why = lora_rank_problem(R, OC, K);
            fail_if(why, "--lora-svd-rank %d: %s (linear %s is %d x %d)", R, why, f->linears[k].name, OC, K);
        }
        fail_if(!r->quantizes || quant_spec_is_bf16(&recipe->slot[SLOT_FPROP_W]), "--lora-svd-rank %d: recipe %s does "
                "not quantize the forward weight (fprop.w), so there is no quantization residual to correct; use an FP4 "
                "recipe (e.g. --recipe nvfp4) or --lora-svd-rank 0", R, tc->recipe);
        const char* why = lora_spec_problem(&recipe->slot[SLOT_FPROP_W]);
        fail_if(why, "--lora-svd-rank %d: %s", R, why);
    }
    recipe_describe(recipe, r->recipe_text, sizeof(r->recipe_text));
    plan_attention_fp4(r);
    plan_ns_fp4(r);
    if (r->resume_path[0] && strcmp(r->saved_recipe, r->recipe_text) != 0)
        fail_if(!tc->allow_recipe_change, "cannot resume '%s': it was trained with recipe '%s', this run uses '%s' "
                "(add --allow-recipe-change on to switch recipes on purpose)", r->resume_path, r->saved_recipe,
                r->recipe_text);
    plan_schedule(r);
}

// Held-out tasks: their token files, and the batch shape each runs in (in the recipe's precision, the token counts
// its forward slots need).
static void open_tasks(Run* r) {
    const TrainConfig* tc = &r->tc;
    HeldOut* held = &r->held;
    held_out_load(held, tc->eval_tasks, tc->hellaswag, tc->lambada, r->config.vocab_size, r->B, r->T);
    held->max_items = tc->eval_items;
    held->bf16 = strcmp(tc->eval_precision, "bf16") == 0;
    held->gemm_mode = tc->fp4_gemm_mode;
    held->dump_dir = tc->eval_dump;
    char err[2048];
    for (int k = 0; k < held->n_tasks && r->quantizes && !held->bf16; k++) {
        const EvalShape* es = &held->shape[k];
        fail_if(recipe_check_model(&r->recipe, (int64_t)es->rows * es->seq, &r->config, 0, err, sizeof(err)),
                "recipe %s: the %s evaluation runs the forward on %d rows of %d tokens: %s. Change --batch-size or "
                "--seq-len, or evaluate with --eval-precision bf16", tc->recipe, held->task[k].name, es->rows,
                es->seq, err);
    }
    if (tc->eval_dump[0]) make_dirs(tc->eval_dump);
}

// Data and tokenizer files (--eval-only reads no training data), the held-out tasks, the output directory.
static void open_data(Run* r) {
    const TrainConfig* tc = &r->tc;
    const int B = r->B, T = r->T, V = r->config.vocab_size;
    if (!tc->eval_only) {
        dataloader_init(&r->train_loader, tc->train_data, B, T, r->rank, r->world, tc->shuffle, (uint64_t)tc->seed, V);
        if (r->rank == 0) dataloader_print(&r->train_loader, "train");
        if (r->resume_path[0]) dataloader_set_state(&r->train_loader, &r->saved.loader);
    }
    r->have_val = tc->val_data[0] != '\0' && (tc->val_every > 0 || tc->eval_only);
    if (r->have_val) {
        dataloader_init(&r->val_loader, tc->val_data, B, T, r->rank, r->world, 0, 0, V);
        if (r->rank == 0) dataloader_print(&r->val_loader, "val");
    }
    Tokenizer* tok = &r->tokenizer;
    tokenizer_init(tok, tc->tokenizer);
    if (tok->init_ok && tc->sample_every > 0 && tok->eot_token >= (uint32_t)V && r->rank == 0)
        printf("note: the tokenizer's end-of-text token %u is not in the model's vocabulary of %d (a tokenizer of another "
               "model?): text samples start from token 0\n", tok->eot_token, V);
    if (r->quantizes && tc->sample_every > 0 && tok->init_ok && !tc->eval_only) {
        // text samples run the forward on one sequence of min(T, 256) tokens (sample_text)
        char err[2048];
        int T_gen = T < 256 ? T : 256;
        fail_if(recipe_check_model(&r->recipe, T_gen, &r->config, 0, err, sizeof(err)),
                "recipe %s: text samples run the forward on %d tokens (one sequence of --seq-len, at most 256): %s. "
                "Change --seq-len, or turn samples off with --sample-every 0", tc->recipe, T_gen, err);
    }
    r->have_tasks = tc->eval_only || tc->eval_every > 0;
    if (r->have_tasks) open_tasks(r);
    if (tc->eval_only && strcmp(r->ckpt_recipe, r->recipe_text) != 0)
        printf("note: '%s' was trained with recipe '%s'; this evaluation uses '%s' (pass the training run's --recipe "
               "flags to evaluate it as trained)\n", tc->init_from, r->ckpt_recipe, r->recipe_text);
    make_dirs(tc->out_dir);
}

// The processes, the device, the model with its optimizer state and recipe, and the weights it starts from.
static void setup_gpu(Run* r) {
    const TrainConfig* tc = &r->tc;
    Dist* dist = &r->dist;
    GPT* model = &r->model;
    fail_if(device_count_or_zero() == 0, "no CUDA GPU found: train_gpt_fp4 needs an NVIDIA GPU (the tests' CPU part "
            "runs without one)");
    dist_init(dist, tc->nccl_id_file[0] ? tc->nccl_id_file : NULL);
    fail_if(dist->world != r->world || dist->rank != r->rank, "the launcher's environment made this process rank %d of "
            "%d, but %s says rank %d of %d: set one launcher's variables only", r->rank, r->world, dist_launch_name(dist),
            dist->rank, dist->world);
    cuda_check(cudaGetDeviceProperties(&r->prop, dist->device));
    dist_printf(dist, "device: %s (compute capability %d.%d, %d SMs, %.0f GiB)\n", r->prop.name, r->prop.major,
                r->prop.minor, r->prop.multiProcessorCount, r->prop.totalGlobalMem / (double)(1 << 30));

    matmul_init();
    attention_set_deterministic(tc->deterministic);
    attention_init();
    gpt_allocate(model, &r->config, r->B, r->T, r->world);
    gpt_set_attention_fp4(model, &r->attn_fp4);
    model->dist = dist;
    model->zero = r->zero;
    size_t opt_begin = 0, opt_count = model->num_parameters;
    if (model->zero) dist_shard_range(dist, model->num_parameters, &opt_begin, &opt_count);
    if (!tc->eval_only) {
        gpt_allocate_optimizer(model, strcmp(tc->master_weights, "fp32") == 0, strcmp(tc->optimizer_state, "nvfp4") == 0,
                               opt_begin, opt_count);
        if (!strcmp(tc->optimizer, "muon")) gpt_setup_muon(model, &r->muon, &r->ns_fp4);
    }
    if (r->world > 1)
        dist_printf(dist, "data parallel: %d processes (%s), ZeRO-1 %s\n", r->world, dist_launch_name(dist),
                    model->zero ? "on: optimizer state sharded" : "off");
    linear_set_recipe(&model->lin, &r->recipe, (uint64_t)tc->seed, tc->fp4_gemm_mode);
    dist_printf(dist, "recipe %s\n", r->recipe_text);
    if (recipe_find_stack(tc->recipe))
        dist_printf(dist, "recipe %s's options: --attention-fp4 %s (%s), --optimizer-state %s (%s), --lora-svd-rank %d "
                    "(%s)\n", tc->recipe, tc->attention_fp4, tc->attention_fp4_given ? "given" : "the preset's",
                    tc->optimizer_state, tc->optimizer_state_given ? "given" : "the preset's", tc->lora_svd_rank,
                    tc->lora_svd_rank_given ? "given" : "the preset's");
    const size_t lora_bytes = linear_lora_enable(&model->lin, tc->lora_svd_rank, tc->lora_svd_every);
    if (lora_bytes) {
        double flops = 0.0, linear_flops = 0.0;
        for (int l = 0; l < r->config.num_layers; l++)
            for (int k = 0; k < model->lin.nkinds; k++) {
                const LinearDesc* d = &model->lin.kind[k];
                linear_flops += 6.0 * r->total_batch * d->OC * d->K;
                if (linear_lora_fprop(&model->lin, l, k)) flops += lora_refresh_flops(tc->lora_svd_rank, d->OC, d->K);
            }
        dist_printf(dist, "lora-svd: rank %d, refreshed every %d step(s); %.1f MiB of GPU memory (factors %.1f MiB, "
                    "refresh scratch and side-GEMM buffer the rest); a refresh is %.3g GFLOP, %.2f%% of a step's linear "
                    "flops\n", tc->lora_svd_rank, tc->lora_svd_every, lora_bytes / 1048576.0,
                    linear_lora_bytes(&model->lin) / 1048576.0, flops * 1e-9, 100.0 * flops / linear_flops);
    }
    const RecipeSchedule* sch = &r->schedule;
    if (sch->bf16_forward_step >= 0)
        dist_printf(dist, "bf16 forward: the forward GEMMs run in BF16 from step %d of %d (the last %d steps, "
                    "--bf16-forward-from %g); dgrad and wgrad keep the recipe\n", sch->bf16_forward_step, tc->steps,
                    tc->steps - sch->bf16_forward_step, sch->bf16_forward_from);
    if (model->lin.fp4_any) {
        const char* path[] = {"exact emulation (BF16 tensor cores, tensor scales in alpha)",
                              "native NVFP4 (cuBLASLt, Blackwell)",
                              "FP8 tensor cores for the GEMMs whose operands have E8M0 block scales (exact within the "
                              "window, llmc/fp4/fp8_fold.h), exact emulation for the others"};
        dist_printf(dist, "FP4 GEMMs: %s\n", path[model->lin.gemm_path]);
    }
    RunState* rs = &r->rs;
    memset(rs, 0, sizeof(*rs));
    rs->grad_accum = r->grad_accum;
    rs->world = r->world;
    rs->zero = model->zero;
    rs->seed = (uint64_t)tc->seed;
    rs->recipe = r->recipe_text;
    rs->schedule = r->schedule;
    if (sch->bf16_forward) {   // resumed after the switch: in the switched state from the first step
        gpt_set_bf16_forward(model, &r->recipe, 1, (uint64_t)tc->seed, tc->fp4_gemm_mode);
        dist_printf(dist, "bf16 forward: resumed with the forward GEMMs in BF16 (since step %d)\n", sch->bf16_forward_step);
    }
    if (r->resume_path[0]) {
        load_checkpoint(model, r->resume_path, 1);
        if (strcmp(r->saved_recipe, r->recipe_text) != 0)
            dist_printf(dist, "resuming under a different recipe (was: %s)\n", r->saved_recipe);
        rs->step = r->saved.step;
        rs->spike = r->saved.spike;
        dist_printf(dist, "resumed from %s at step %d\n", r->resume_path, rs->step);
    } else if (tc->init_from[0]) {
        load_checkpoint(model, tc->init_from, 0);
        dist_printf(dist, "weights from %s\n", tc->init_from);
    } else {
        gpt_init_random(model, (uint64_t)tc->seed);
    }
    if (r->have_tasks) held_out_alloc(&r->held, r->B, r->T);
}

// --eval-only: evaluate the checkpoint, append one line to out_dir/eval.jsonl.
static void run_eval_only(Run* r) {
    const TrainConfig* tc = &r->tc;
    Logger elog;
    memset(&elog, 0, sizeof(elog));
    if (r->rank == 0) logger_append(&elog, tc->out_dir, "eval.jsonl");
    char fields[9000], path_esc[4200], num[64];
    int o = snprintf(fields, sizeof(fields), ",\"checkpoint\":\"%s\"", json_escape(tc->init_from, path_esc,
                                                                                     sizeof(path_esc)));
    if (r->have_val) {
        float val_loss = evaluate(&r->model, &r->val_loader, tc->val_batches);
        dist_printf(&r->dist, "step %d | val loss %.4f\n", r->ckpt_step, val_loss);
        snprintf(fields + o, sizeof(fields) - o, ",\"val_loss\":%s", json_num(val_loss, num, sizeof(num)));
    }
    HeldOutScores sc = held_out_evaluate(&r->model, &r->held, r->ckpt_step);
    held_out_report(&r->dist, &elog, &r->held, &sc, r->ckpt_step, r->ckpt_tokens, fields);
    logger_close(&elog);
}

// ----------------------------------------------------------------------------------------------
// Training: the log's first lines, then per step: switch the recipe (--bf16-forward-from), evaluate, train, log,
// checkpoint.

// The log (resumed: the lines an interrupted run wrote after the checkpoint dropped), its config and comm lines.
static void open_log(Run* r) {
    const TrainConfig* tc = &r->tc;
    const GPTConfig* config = &r->config;
    GPT* model = &r->model;
    Logger* lg = &r->logger;
    memset(lg, 0, sizeof(*lg));
    if (r->rank == 0 && r->resume_path[0]) {
        long dropped = logger_resume(lg, tc->out_dir, r->rs.step, r->resume_path);
        if (dropped) printf("log: dropped %ld line%s the interrupted run wrote after step %d (this run writes them "
                            "again)\n", dropped, dropped == 1 ? "" : "s", r->rs.step);
    } else if (r->rank == 0) {
        logger_open(lg, tc->out_dir);
    }
    char esc[4][1024], ns_desc[256];
    ns_fp4_describe(&r->ns_fp4, ns_desc, sizeof(ns_desc));   // ("off" without --optimizer muon)
    const char* model_name = config_descriptor_of(config);   // the shape trained, also after --resume
    int cuda_runtime_version = 0;   // the libraries the run used: their versions decide GEMM and attention kernels
    cuda_check(cudaRuntimeGetVersion(&cuda_runtime_version));
    logger_line(lg,
        "{\"type\":\"config\",\"model\":\"%s\",\"layers\":%d,\"heads\":%d,\"channels\":%d,\"vocab\":%d,"
        "\"parameters\":%zu,\"batch_size\":%d,\"seq_len\":%d,\"total_batch\":%lld,\"grad_accum\":%d,\"processes\":%d,"
        "\"steps\":%d,\"lr\":%g,\"warmup\":%d,\"schedule\":\"%s\",\"final_lr_frac\":%g,\"beta1\":%g,\"beta2\":%g,"
        "\"eps\":%g,\"weight_decay\":%g,\"grad_clip\":%g,\"master_weights\":\"%s\",\"seed\":%d,\"recipe\":\"%s\","
        "\"bf16_forward_from\":%g,\"bf16_forward_step\":%d,"
        "\"train_data\":\"%s\",\"val_data\":\"%s\",\"attention\":\"%s\",\"device\":\"%s\",\"sms\":%d,"
        "\"cuda_runtime\":%d,\"cublaslt\":%zu,\"cudnn\":%zu,\"resumed_at\":%d,\"arch\":\"%s\",\"kv_heads\":%d,"
        "\"mlp_hidden\":%d,\"tied\":%d,\"deterministic\":%d,\"optimizer_state\":\"%s\",\"optimizer\":\"%s\","
        "\"muon_scale\":\"%s\",\"muon_momentum\":%g,\"muon_nesterov\":%d,\"muon_split_qkv\":%d,\"ns_fp4\":\"%s\"}",
        model_name ? model_name : "custom", config->num_layers, config->num_heads, config->channels, config->vocab_size,
        model->num_parameters, r->B, r->T, (long long)r->total_batch, r->grad_accum, r->world, tc->steps, tc->lr,
        tc->warmup, tc->schedule, tc->final_lr_frac, tc->beta1, tc->beta2, tc->eps, tc->weight_decay, tc->grad_clip,
        tc->master_weights, tc->seed, json_escape(r->recipe_text, esc[3], sizeof(esc[3])), r->schedule.bf16_forward_from,
        r->schedule.bf16_forward_step, json_escape(tc->train_data, esc[0], sizeof(esc[0])),
        json_escape(tc->val_data, esc[1], sizeof(esc[1])), r->attn_fp4.on ? "own kernel, fp4" : attention_backend_name(),
        json_escape(r->prop.name, esc[2], sizeof(esc[2])), r->prop.multiProcessorCount, cuda_runtime_version,
        cublasLtGetVersion(), attention_cudnn_version(), r->rs.step, ARCH_NAMES[config->arch], config_kv_heads(config),
        (int)dim_value(config, r->model.family->linears[LIN_FCPROJ].in), config->tied, attention_is_deterministic(),
        tc->optimizer_state, tc->optimizer, tc->muon_scale, tc->muon_momentum, tc->muon_nesterov, tc->muon_split_qkv,
        ns_desc);
    if (tc->lora_svd_rank)   // a line of its own, so that a run without the correction logs what it always did
        logger_line(lg, "{\"type\":\"lora_svd\",\"rank\":%d,\"every\":%d,\"oversample\":%d,\"power_steps\":%d}",
                    tc->lora_svd_rank, tc->lora_svd_every, LORA_OVERSAMPLE, LORA_POWER_STEPS);
    // the bytes each rank sends and receives per step (ring algorithms), as printed at start
    const double grad_bytes = (double)model->num_parameters * sizeof(float);
    const double gather_bytes = (double)model->params_padded * sizeof(floatX);
    logger_line(lg, "{\"type\":\"comm\",\"processes\":%d,\"zero\":%d,\"grad_reduce_bytes\":%.0f,"
                "\"weight_gather_bytes\":%.0f}", r->world, model->zero,
                model->zero ? dist_ring_share_bytes(&r->dist, grad_bytes) : dist_ring_allreduce_bytes(&r->dist, grad_bytes),
                model->zero ? dist_ring_share_bytes(&r->dist, gather_bytes) : 0.0);
    dist_printf(&r->dist, "training: %d steps of %lld tokens (micro-batch %d x %d, %d accumulation step%s), lr %g %s, "
                "optimizer %s, master weights %s, recipe %s, attention: %s%s\n", tc->steps, (long long)r->total_batch, r->B,
                r->T, r->grad_accum, r->grad_accum == 1 ? "" : "s", tc->lr, tc->schedule, tc->optimizer,
                tc->master_weights, tc->recipe,
                r->attn_fp4.on ? "own kernel, FP4 (--attention-fp4; cuDNN not used)" : attention_backend_name(),
                attention_is_deterministic() || r->attn_fp4.on ? "" : " (non-deterministic backward)");
}

// --bf16-forward-from: the switch comes before this step's validation and sample, so that everything from the
// switch step on runs the same forward.
static void switch_recipe_at(Run* r, int step) {
    RecipeSchedule* sch = &r->schedule;
    const int bf16_forward = recipe_schedule_bf16_forward_at(sch, step);
    if (bf16_forward == sch->bf16_forward) return;
    gpt_set_bf16_forward(&r->model, &r->recipe, bf16_forward, (uint64_t)r->tc.seed, r->tc.fp4_gemm_mode);
    sch->bf16_forward = bf16_forward;
    if (bf16_forward)
        dist_printf(&r->dist, "step %d | bf16 forward: the forward GEMMs switch to BF16 for the last %d steps "
                    "(--bf16-forward-from %g); dgrad and wgrad keep the recipe\n", step, r->tc.steps - step,
                    sch->bf16_forward_from);
    else
        dist_printf(&r->dist, "step %d | bf16 forward: the forward GEMMs return to the recipe's (the resumed "
                    "run has no switch here)\n", step);
    logger_line(&r->logger, "{\"type\":\"event\",\"step\":%d,\"event\":\"bf16_forward\",\"on\":%d,"
                "\"switch_step\":%d,\"fraction\":%g}", step, bf16_forward, sch->bf16_forward_step,
                sch->bf16_forward_from);
}

// Validation loss, held-out tasks and a text sample, each when its period comes round.
static void evaluate_at(Run* r, int step, int last) {
    const TrainConfig* tc = &r->tc;
    if (r->have_val && (step % tc->val_every == 0 || last)) {
        float val_loss = evaluate(&r->model, &r->val_loader, tc->val_batches);
        dist_printf(&r->dist, "step %d | val loss %.4f\n", step, val_loss);
        logger_line(&r->logger, "{\"type\":\"val\",\"step\":%d,\"tokens\":%lld,\"val_loss\":%.6f}", step,
                    (long long)step * r->total_batch, val_loss);
        if (!isfinite(val_loss)) {
            char what[256];
            snprintf(what, sizeof(what), "validation loss %f at step %d", val_loss, step);
            stop_diverged(&r->trail, r->rank, what);
        }
    }
    if (r->have_tasks && tc->eval_every > 0 && step % tc->eval_every == 0) {
        HeldOutScores sc = held_out_evaluate(&r->model, &r->held, step);
        held_out_report(&r->dist, &r->logger, &r->held, &sc, step, (long long)step * r->total_batch, "");
    }
    if (tc->sample_every > 0 && step > 0 && step % tc->sample_every == 0 && r->tokenizer.init_ok && r->rank == 0) {
        char sample[4096], sample_esc[8192];
        sample_text(&r->model, &r->tokenizer, tc->sample_tokens, (uint64_t)tc->seed, step, sample, sizeof(sample));
        dist_printf(&r->dist, "step %d | sample: %s\n", step, sample);
        logger_line(&r->logger, "{\"type\":\"sample\",\"step\":%d,\"text\":\"%s\"}", step,
                    json_escape(sample, sample_esc, sizeof(sample_esc)));
    }
}

// What one optimizer step measured.
typedef struct {
    float loss, norm, lr;
    int skipped;
    double ms, quant_ms, gemm_ms, comm_ms;
} StepStats;

static void log_emit(void* logger, const char* line) { logger_line((Logger*)logger, "%s", line); }

// One optimizer step: the micro-steps' forward and backward (gradients reduced over ranks in the last), the norm,
// the divergence and spike checks, the update; then the FP4 diagnostics of the step when they are due.
static StepStats train_step(Run* r, int step, int last) {
    const TrainConfig* tc = &r->tc;
    GPT* model = &r->model;
    StepStats st;
    memset(&st, 0, sizeof(st));
    linear_timer_take(&model->lin, NULL, NULL, NULL);   // drop what validation and samples quantized and multiplied
    dist_take_comm_ms(&r->dist);                       // and what validation and checkpoints communicated
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const int diag = model->lin.fp4_any && tc->diag_every > 0 && (step % tc->diag_every == 0 || last);
    if (diag) linear_diag_begin(&model->lin);
    gpt_zero_grad(model);
    double loss_sum = 0.0;
    for (int micro = 0; micro < r->grad_accum; micro++) {
        linear_set_step(&model->lin, step, dataloader_global_micro_index(&r->train_loader, micro));
        dataloader_next_batch(&r->train_loader);
        loss_sum += gpt_forward(model, r->train_loader.inputs, r->train_loader.targets, r->B, r->T, 1,
                                1.0f / ((float)r->B * r->T * r->grad_accum * r->world));
        gpt_backward(model, r->train_loader.inputs, r->B, r->T, micro == r->grad_accum - 1);
    }
    st.loss = (float)((r->world > 1 ? dist_sum_double(&r->dist, loss_sum) : loss_sum) / ((double)r->grad_accum * r->world));
    st.norm = gpt_grad_norm(model);
    if (!isfinite(st.loss) || !isfinite(st.norm)) {
        char what[256];
        snprintf(what, sizeof(what), "loss %f, gradient norm %f at step %d (stopping without an update)", st.loss,
                 st.norm, step);
        stop_diverged(&r->trail, r->rank, what);
    }
    ckpt_trail_confirm(&r->trail);   // the weights of the newest checkpoint gave a finite loss
    LRSchedule sched = {tc->schedule, tc->lr, tc->warmup, tc->steps, tc->final_lr_frac, tc->wsd_decay_frac};
    st.lr = lr_at_step(&sched, step);
    char why[256] = "";
    st.skipped = spike_check(&r->rs.spike, tc->spike_z, st.loss, st.norm, why, sizeof(why));
    if (st.skipped) {
        dist_printf(&r->dist, "step %d | skipping the update: %s\n", step, why);
        logger_line(&r->logger, "{\"type\":\"event\",\"step\":%d,\"event\":\"skip\",\"why\":\"%s\"}", step, why);
    } else {
        OptimizerConfig opt = {tc->lr, tc->beta1, tc->beta2, tc->eps, tc->weight_decay, tc->grad_clip};
        gpt_update(model, &opt, st.lr, st.norm, step, (uint64_t)tc->seed);
    }
    cuda_check(cudaStreamSynchronize(model->stream));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    st.ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) * 1e-6;
    float quant_ms, gemm_ms, buckets[LINEAR_BUCKETS];
    linear_timer_take(&model->lin, &quant_ms, &gemm_ms, buckets);
    if (step > r->rs.step) {   // the first step builds plans
        for (int b = 0; b < LINEAR_BUCKETS; b++) r->bucket_sum[b] += buckets[b];
        r->bucket_steps++;
    }
    st.quant_ms = quant_ms;
    st.gemm_ms = gemm_ms;
    st.comm_ms = dist_take_comm_ms(&r->dist);
    if (diag) linear_diag_end(&model->lin, step + 1, log_emit, &r->logger);
    if (diag && model->lin.lora_rank) {
        char captured[512];
        linear_lora_summary(&model->lin, captured, sizeof(captured));
        dist_printf(&r->dist, "step %5d | lora-svd captured fraction 1 - |E - E_R|^2 / |E|^2, mean over layers: %s\n",
                    step + 1, captured);
    }
    return st;
}

// The progress line (loss, tokens/s, MFU, ETA) and the log's train line.
static void log_step(Run* r, int step, const StepStats* st) {
    const TrainConfig* tc = &r->tc;
    if (step > r->rs.step) r->ema_ms = r->ema_ms == 0.0 ? st->ms : 0.9 * r->ema_ms + 0.1 * st->ms;
    const double flops_per_token = 6.0 * r->model.num_parameters + 12.0 * r->config.num_layers * r->config.channels * r->T;
    double tok_s = r->total_batch / (st->ms * 1e-3);
    double mfu = tok_s * flops_per_token / (tc->peak_tflops * 1e12);
    double eta_s = (tc->steps - step - 1) * (r->ema_ms > 0 ? r->ema_ms : st->ms) * 1e-3;
    dist_printf(&r->dist, "step %5d/%d | loss %.4f | lr %.2e | norm %.3f | %.1f ms | %.0f tok/s | MFU %.1f%% | "
                "ETA %dh%02dm%02ds%s\n", step + 1, tc->steps, st->loss, st->lr, st->norm, st->ms, tok_s, 100.0 * mfu,
                (int)(eta_s / 3600), (int)fmod(eta_s / 60, 60), (int)fmod(eta_s, 60), st->skipped ? " (skipped)" : "");
    logger_line(&r->logger, "{\"type\":\"train\",\"step\":%d,\"tokens\":%lld,\"loss\":%.6f,\"lr\":%.6e,"
                "\"grad_norm\":%.6f,\"ms\":%.3f,\"compute_ms\":%.3f,\"quant_ms\":%.3f,\"gemm_ms\":%.3f,"
                "\"comm_ms\":%.3f,\"tok_per_s\":%.1f,\"mfu\":%.4f,\"skipped\":%d}", step + 1,
                (long long)(step + 1) * r->total_batch, st->loss, st->lr, st->norm, st->ms,
                st->ms - st->quant_ms - st->comm_ms, st->quant_ms, st->gemm_ms, st->comm_ms, tok_s, mfu, st->skipped);
}

// A checkpoint every --ckpt-every steps and after the last (never from weights an update left NaN or Inf).
static void checkpoint_at(Run* r, int step, int last) {
    const TrainConfig* tc = &r->tc;
    if (!((tc->ckpt_every > 0 && (step + 1) % tc->ckpt_every == 0) || (last && tc->ckpt_every >= 0))) return;
    // an update can leave NaN or Inf weights behind a finite loss: never checkpoint them
    double nonfinite = gpt_count_nonfinite_weights(&r->model);
    if (nonfinite > 0) {
        char what[256];
        snprintf(what, sizeof(what), "the update of step %d left %.0f NaN or Inf weights (no checkpoint written from "
                 "them)", step, nonfinite);
        stop_diverged(&r->trail, r->rank, what);
    }
    r->rs.step = step + 1;
    r->rs.loader = dataloader_get_state(&r->train_loader);
    r->rs.schedule = r->schedule;
    char ckpt_path[4200], esc[4300];
    snprintf(ckpt_path, sizeof(ckpt_path), "%s/ckpt_%08d.bin", tc->out_dir, step + 1);
    save_checkpoint(&r->model, tc->out_dir, &r->rs);
    dist_printf(&r->dist, "checkpoint: %s\n", ckpt_path);
    logger_line(&r->logger, "{\"type\":\"checkpoint\",\"step\":%d,\"path\":\"%s\"}", step + 1,
                json_escape(ckpt_path, esc, sizeof(esc)));
    ckpt_trail_written(&r->trail, ckpt_path);
}

// The run's time per bucket, the held-out tasks on the final weights (the ones the last checkpoint holds), the
// memory used.
static void finish_training(Run* r) {
    char line[4096];
    if (linear_phase_breakdown(&r->model.lin, r->bucket_sum, r->bucket_steps, line, sizeof(line)))
        logger_line(&r->logger, "%s", line);
    const int steps = r->tc.steps;
    if (r->have_tasks) {
        HeldOutScores sc = held_out_evaluate(&r->model, &r->held, steps);
        held_out_report(&r->dist, &r->logger, &r->held, &sc, steps, (long long)steps * r->total_batch, "");
    }
    size_t free_b, total_b;
    cuda_check(cudaMemGetInfo(&free_b, &total_b));
    logger_line(&r->logger, "{\"type\":\"event\",\"step\":%d,\"event\":\"done\",\"gpu_memory_used_gib\":%.3f}", steps,
                (total_b - free_b) / (double)(1 << 30));
    logger_close(&r->logger);
}

static void train(Run* r) {
    open_log(r);
    ckpt_trail_init(&r->trail, r->resume_path[0] ? r->resume_path : NULL);
    for (int step = r->rs.step; step < r->tc.steps; step++) {
        const int last = step == r->tc.steps - 1;
        switch_recipe_at(r, step);
        evaluate_at(r, step, last);
        const StepStats st = train_step(r, step, last);
        log_step(r, step, &st);
        checkpoint_at(r, step, last);
    }
    finish_training(r);
}

// One teardown for both ends of a run.
static void teardown(Run* r) {
    if (r->have_tasks) held_out_free(&r->held);
    gpt_free(&r->model);
    attention_destroy();
    matmul_fp4_destroy();
    matmul_fp8_destroy();
    matmul_destroy();
    dist_finalize(&r->dist);
    if (!r->tc.eval_only) dataloader_free(&r->train_loader);
    if (r->have_val) dataloader_free(&r->val_loader);
    tokenizer_free(&r->tokenizer);
}

int main(int argc, char** argv) {
    static Run run;   // (large: outside the stack)
    Run* r = &run;
    r->tc = default_config();
    if (parse_command_line(&r->tc, argc, argv)) return 0;
    apply_recipe_stack(&r->tc);
    // Everything that needs no GPU is checked first (options, batch arithmetic, the checkpoint's header and run state,
    // the recipe and the shapes it can quantize, the data and tokenizer files), so that a mistake fails in
    // milliseconds, and on machines without a GPU, where CI tests it.
    check_options(&r->tc);
    plan_launch(r);
    plan_model(r);
    plan_recipe(r);
    open_data(r);
    // The GPU from here on.
    setup_gpu(r);
    if (r->tc.eval_only) run_eval_only(r);
    else train(r);
    teardown(r);
    return 0;
}
#endif
