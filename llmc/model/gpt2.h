// gpt2.h: the GPT-2 model family as data (docs/MODELS.md). Its parameter tensors (name, shape, weight decay,
// initialisation) in the order of the one allocation, the checkpoint and the PyTorch reference dump
// (dev/ref/gpt_ref.py); and the linear layers of one block (shape, weight and bias tensors, the Q/K part --qk-fp8
// splits off). The trainer's parameter layout, initialisation, optimizer, gradient reduction, checkpoint size,
// forward, backward and FP4 plans all read these tables. Plain C (CPU tests read it).
// defines: GPT2_PARAMS, P_* (tensor ids), GPT2_LINEARS, LIN_* (linear ids), NUM_LINEARS, GPT2_FAMILY
#pragma once
#include "llmc/model/family.h"

enum {
    P_WTE, P_WPE, P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPROJW, P_ATTPROJB,
    P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPROJW, P_FCPROJB, P_LNFW, P_LNFB, NUM_PARAM_TENSORS
};

static const ParamDesc GPT2_PARAMS[NUM_PARAM_TENSORS] = {
    {"wte",      0, DIM_VOCAB_PADDED, DIM_C,  1, INIT_NORMAL, 0},
    {"wpe",      0, DIM_POSITIONS,    DIM_C,  1, INIT_NORMAL, 0},
    {"ln1w",     1, DIM_1,            DIM_C,  0, INIT_ONES, 0},
    {"ln1b",     1, DIM_1,            DIM_C,  0, INIT_ZEROS, 0},
    {"qkvw",     1, DIM_3C,           DIM_C,  1, INIT_NORMAL, 0},
    {"qkvb",     1, DIM_1,            DIM_3C, 0, INIT_ZEROS, 0},
    {"attprojw", 1, DIM_C,            DIM_C,  1, INIT_RESIDUAL, 0},
    {"attprojb", 1, DIM_1,            DIM_C,  0, INIT_ZEROS, 0},
    {"ln2w",     1, DIM_1,            DIM_C,  0, INIT_ONES, 0},
    {"ln2b",     1, DIM_1,            DIM_C,  0, INIT_ZEROS, 0},
    {"fcw",      1, DIM_4C,           DIM_C,  1, INIT_NORMAL, 0},
    {"fcb",      1, DIM_1,            DIM_4C, 0, INIT_ZEROS, 0},
    {"fcprojw",  1, DIM_C,            DIM_4C, 1, INIT_RESIDUAL, 0},
    {"fcprojb",  1, DIM_1,            DIM_C,  0, INIT_ZEROS, 0},
    {"lnfw",     0, DIM_1,            DIM_C,  0, INIT_ONES, 0},
    {"lnfb",     0, DIM_1,            DIM_C,  0, INIT_ZEROS, 0},
};

// The linears of a block (both families count them in this order: qkv, attention projection, MLP in, MLP out).
enum { LIN_QKV, LIN_ATTPROJ, LIN_FC, LIN_FCPROJ, NUM_LINEARS };

static const LinearRow GPT2_LINEARS[NUM_LINEARS] = {
    {"qkv",     DIM_C,  DIM_3C, DIM_2C, P_QKVW,     P_QKVB},
    {"attproj", DIM_C,  DIM_C,  DIM_0,  P_ATTPROJW, P_ATTPROJB},
    {"fc",      DIM_C,  DIM_4C, DIM_0,  P_FCW,      P_FCB},
    {"fcproj",  DIM_4C, DIM_C,  DIM_0,  P_FCPROJW,  P_FCPROJB},
};

static const ModelFamily GPT2_FAMILY = {"gpt2", GPT2_PARAMS, NUM_PARAM_TENSORS, GPT2_LINEARS, NUM_LINEARS};
