// family.h: a model family as data: the rows its tables are made of (llmc/model/gpt2.h, llama.h). A parameter
// tensor's row gives its name, shape, weight decay and initialisation; a linear's row its input and output widths,
// the Q/K part --qk-fp8 splits off, and its weight and bias tensors. Shapes are written in the model's dimensions
// (Dim), resolved against a GPTConfig by dim_value.
// defines: Dim, dim_value(), ParamInit, ParamDesc, LinearRow, ModelFamily, MAX_PARAM_TENSORS
#pragma once
#include "llmc/base/common.h"
#include "llmc/model/gpt_config.h"

typedef enum {
    DIM_0, DIM_1, DIM_C, DIM_2C, DIM_3C, DIM_4C, DIM_VOCAB_PADDED, DIM_POSITIONS,
    DIM_QKV,     // the QKV linear's outputs: (NH + 2 KVH) HS
    DIM_QK,      // its query and key heads: (NH + KVH) HS
    DIM_H, DIM_2H,   // the MLP's hidden width, and its fused gate/up outputs
} Dim;

static inline int64_t dim_value(const GPTConfig* c, Dim d) {
    const int64_t C = c->channels, hs = config_head_size(c);
    switch (d) {
    case DIM_0: return 0;
    case DIM_1: return 1;
    case DIM_C: return C;
    case DIM_2C: return 2 * C;
    case DIM_3C: return 3 * C;
    case DIM_4C: return 4 * C;
    case DIM_VOCAB_PADDED: return c->padded_vocab_size;
    case DIM_POSITIONS: return c->max_seq_len;
    case DIM_QKV: return config_qkv_channels(c);
    case DIM_QK: return (c->num_heads + (int64_t)config_kv_heads(c)) * hs;
    case DIM_H: return c->mlp_hidden;
    case DIM_2H: return 2 * (int64_t)c->mlp_hidden;
    }
    return 0;
}

// Matrices N(0, 0.02), the residual projections N(0, 0.02/sqrt(2L)) (GPT-2's rule, kept for Llama), biases 0,
// norm weights 1.
typedef enum { INIT_NORMAL, INIT_RESIDUAL, INIT_ONES, INIT_ZEROS } ParamInit;

typedef struct {
    const char* name;
    int per_layer;        // stacked over layers, layer index outermost
    Dim rows, cols;       // of one layer's slice (or of the whole tensor)
    int decay;            // matrices get weight decay; biases and norm weights do not
    ParamInit init;
    int untied_only;      // the LM head: no elements when the model ties it to the token embedding
} ParamDesc;

// A linear of a block: Y (N x out) = X (N x in) W^T + b, W the `weight` tensor's layer slice (out x in).
typedef struct {
    const char* name;
    Dim in, out;
    Dim qk_split;         // --qk-fp8: the Q/K part is outputs [0, qk_split) (DIM_0: never split)
    int weight, bias;     // parameter ids (bias -1: none)
} LinearRow;

#define MAX_PARAM_TENSORS 16

// One family: its tables. The linears' order is the order their SR keys, diagnostics and timer buckets count.
typedef struct {
    const char* name;
    const ParamDesc* params;
    int num_params;
    const LinearRow* linears;
    int num_linears;
} ModelFamily;
