// llama.h: the Llama model family as data (docs/MODELS.md): pre-norm RMSNorm blocks, rotary positions, grouped-query
// attention, a SwiGLU MLP whose gate and up projections are one linear (fcw: the gate's H rows, then the up's),
// no biases, an LM head of its own unless tied. The parameter tensors in storage order (the checkpoint's, the
// PyTorch reference's, the export's), and the linears of a block. Plain C.
// defines: LLAMA_PARAMS, LP_* (tensor ids), LLAMA_LINEARS, LLAMA_FAMILY
#pragma once
#include "llmc/model/family.h"
#include "llmc/model/gpt2.h"   // LIN_* (the linears' order is the same in both families)

enum {
    LP_WTE, LP_LN1W, LP_QKVW, LP_ATTPROJW, LP_LN2W, LP_FCW, LP_FCPROJW, LP_LNFW, LP_LM_HEAD, NUM_LLAMA_PARAMS
};

static const ParamDesc LLAMA_PARAMS[NUM_LLAMA_PARAMS] = {
    {"wte",      0, DIM_VOCAB_PADDED, DIM_C, 1, INIT_NORMAL, 0},
    {"ln1w",     1, DIM_1,            DIM_C, 0, INIT_ONES, 0},
    {"qkvw",     1, DIM_QKV,          DIM_C, 1, INIT_NORMAL, 0},
    {"attprojw", 1, DIM_C,            DIM_C, 1, INIT_RESIDUAL, 0},
    {"ln2w",     1, DIM_1,            DIM_C, 0, INIT_ONES, 0},
    {"fcw",      1, DIM_2H,           DIM_C, 1, INIT_NORMAL, 0},
    {"fcprojw",  1, DIM_C,            DIM_H, 1, INIT_RESIDUAL, 0},
    {"lnfw",     0, DIM_1,            DIM_C, 0, INIT_ONES, 0},
    {"lm_head",  0, DIM_VOCAB_PADDED, DIM_C, 1, INIT_NORMAL, 1},
};

static const LinearRow LLAMA_LINEARS[NUM_LINEARS] = {
    {"qkv",     DIM_C, DIM_QKV, DIM_QK, LP_QKVW,     -1},
    {"attproj", DIM_C, DIM_C,   DIM_0,  LP_ATTPROJW, -1},
    {"fc",      DIM_C, DIM_2H,  DIM_0,  LP_FCW,      -1},
    {"fcproj",  DIM_H, DIM_C,   DIM_0,  LP_FCPROJW,  -1},
};

static const ModelFamily LLAMA_FAMILY = {"llama", LLAMA_PARAMS, NUM_LLAMA_PARAMS, LLAMA_LINEARS, NUM_LINEARS};
