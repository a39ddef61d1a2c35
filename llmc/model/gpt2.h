// gpt2.h: the GPT-2 model family as data. Its parameter tensors (name, shape, weight decay, initialisation) in the
// order of the one allocation, the checkpoint and the PyTorch reference dump (dev/ref/gpt_ref.py); and the linear
// layers of one block (shape, weight and bias tensors, the Q/K part --qk-fp8 splits off). The trainer's parameter
// layout, initialisation, optimizer, gradient reduction, checkpoint size, forward, backward and FP4 plans all read
// these two tables, so a layer kind or a model family is table rows, not code paths. Plain C (CPU tests read it).
// defines: GPT2_PARAMS, ParamDesc, ParamInit, Dim, dim_value(), param_sizes(), param_count(), P_* (tensor ids),
//          GPT2_LINEARS, LinearRow, LIN_* (linear ids), NUM_LINEARS
#pragma once
#include "llmc/base/common.h"
#include "llmc/model/gpt_config.h"

// A tensor's dimensions in terms of the model's shape.
typedef enum { DIM_0, DIM_1, DIM_C, DIM_2C, DIM_3C, DIM_4C, DIM_VOCAB_PADDED, DIM_POSITIONS } Dim;

static inline int64_t dim_value(const GPTConfig* c, Dim d) {
    switch (d) {
    case DIM_0: return 0;
    case DIM_1: return 1;
    case DIM_C: return c->channels;
    case DIM_2C: return 2 * (int64_t)c->channels;
    case DIM_3C: return 3 * (int64_t)c->channels;
    case DIM_4C: return 4 * (int64_t)c->channels;
    case DIM_VOCAB_PADDED: return c->padded_vocab_size;
    case DIM_POSITIONS: return c->max_seq_len;
    }
    return 0;
}

// GPT-2's initialisation: matrices N(0, 0.02), the residual projections N(0, 0.02/sqrt(2L)), biases 0, LayerNorm
// weights 1.
typedef enum { INIT_NORMAL, INIT_RESIDUAL, INIT_ONES, INIT_ZEROS } ParamInit;

typedef struct {
    const char* name;
    int per_layer;        // stacked over layers, layer index outermost
    Dim rows, cols;       // of one layer's slice (or of the whole tensor)
    int decay;            // matrices get weight decay; biases and LayerNorm parameters do not
    ParamInit init;
} ParamDesc;

enum {
    P_WTE, P_WPE, P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPROJW, P_ATTPROJB,
    P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPROJW, P_FCPROJB, P_LNFW, P_LNFB, NUM_PARAM_TENSORS
};

static const ParamDesc GPT2_PARAMS[NUM_PARAM_TENSORS] = {
    {"wte",      0, DIM_VOCAB_PADDED, DIM_C,  1, INIT_NORMAL},
    {"wpe",      0, DIM_POSITIONS,    DIM_C,  1, INIT_NORMAL},
    {"ln1w",     1, DIM_1,            DIM_C,  0, INIT_ONES},
    {"ln1b",     1, DIM_1,            DIM_C,  0, INIT_ZEROS},
    {"qkvw",     1, DIM_3C,           DIM_C,  1, INIT_NORMAL},
    {"qkvb",     1, DIM_1,            DIM_3C, 0, INIT_ZEROS},
    {"attprojw", 1, DIM_C,            DIM_C,  1, INIT_RESIDUAL},
    {"attprojb", 1, DIM_1,            DIM_C,  0, INIT_ZEROS},
    {"ln2w",     1, DIM_1,            DIM_C,  0, INIT_ONES},
    {"ln2b",     1, DIM_1,            DIM_C,  0, INIT_ZEROS},
    {"fcw",      1, DIM_4C,           DIM_C,  1, INIT_NORMAL},
    {"fcb",      1, DIM_1,            DIM_4C, 0, INIT_ZEROS},
    {"fcprojw",  1, DIM_C,            DIM_4C, 1, INIT_RESIDUAL},
    {"fcprojb",  1, DIM_1,            DIM_C,  0, INIT_ZEROS},
    {"lnfw",     0, DIM_1,            DIM_C,  0, INIT_ONES},
    {"lnfb",     0, DIM_1,            DIM_C,  0, INIT_ZEROS},
};

// Elements of each tensor (all layers), in table order.
static inline void param_sizes(const GPTConfig* c, size_t sizes[NUM_PARAM_TENSORS]) {
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        const ParamDesc* p = &GPT2_PARAMS[i];
        sizes[i] = (size_t)(dim_value(c, p->rows) * dim_value(c, p->cols)) * (p->per_layer ? (size_t)c->num_layers : 1);
    }
}

static inline size_t param_count(const GPTConfig* c) {
    size_t sizes[NUM_PARAM_TENSORS], n = 0;
    param_sizes(c, sizes);
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) n += sizes[i];
    return n;
}

// The linear layers of a block, in the order their SR keys, diagnostics and timer buckets count them:
// Y (N x out) = X (N x in) W^T + b, W the `weight` tensor's layer slice (out x in), b the `bias` tensor's.
enum { LIN_QKV, LIN_ATTPROJ, LIN_FC, LIN_FCPROJ, NUM_LINEARS };

typedef struct {
    const char* name;
    Dim in, out;
    Dim qk_split;         // --qk-fp8: the Q/K part is outputs [0, qk_split) (DIM_0: never split)
    int weight, bias;     // P_* ids (bias -1: none)
} LinearRow;

static const LinearRow GPT2_LINEARS[NUM_LINEARS] = {
    {"qkv",     DIM_C,  DIM_3C, DIM_2C, P_QKVW,     P_QKVB},
    {"attproj", DIM_C,  DIM_C,  DIM_0,  P_ATTPROJW, P_ATTPROJB},
    {"fc",      DIM_C,  DIM_4C, DIM_0,  P_FCW,      P_FCB},
    {"fcproj",  DIM_4C, DIM_C,  DIM_0,  P_FCPROJW,  P_FCPROJB},
};
