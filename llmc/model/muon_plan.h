// muon_plan.h: which parameter tensors --optimizer muon gives to Muon, and the list of matrices it orthogonalises
// (docs/FULLSTACK_FP4.md section 3). Plain C, decided from the family's tables (llmc/model/gpt2.h, llama.h), so
// that dev/test/test_muon.c checks the routing of every named tensor of both families without a GPU.
// defines: OPTIMIZER_*, OPTIMIZER_NAMES, MuonConfig, optimizer_of(), MuonMatrix, muon_matrices(), muon_owner(),
//          muon_owned_offsets()
#pragma once
#include "llmc/model/models.h"

enum { OPTIMIZER_ADAMW = 0, OPTIMIZER_MUON = 1, NUM_OPTIMIZERS };
static const char* const OPTIMIZER_NAMES[NUM_OPTIMIZERS] = {"adamw", "muon"};

// --optimizer muon's settings (llmc/base/muon_ref.h's MuonParams, less the step's lr and weight decay)
typedef struct {
    int scale_rule;    // MUON_SCALE_KELLER or MUON_SCALE_MOONLIGHT (llmc/base/muon_ref.h)
    float beta;        // momentum, 0.95
    int nesterov;      // 1 (default)
    int split_qkv;     // 1: the fused QKV weight's Q, K and V rows are three matrices
    int ns_steps;      // 5
} MuonConfig;

// The optimizer of parameter tensor id under --optimizer `optimizer`. Muon takes the weights of a block's linears
// (the family's linear table: GPT-2's and Llama's qkvw, attprojw, fcw, fcprojw); AdamW keeps the rest: embeddings,
// the LM head, norm gains and biases (the Muon README's split).
static inline int optimizer_of(const ModelFamily* f, int id, int optimizer) {
    if (optimizer != OPTIMIZER_MUON) return OPTIMIZER_ADAMW;
    for (int k = 0; k < f->num_linears; k++)
        if (f->linears[k].weight == id && f->params[id].per_layer) return OPTIMIZER_MUON;
    return OPTIMIZER_ADAMW;
}

// One matrix Muon orthogonalises: rows [row0, row0 + rows) of layer `layer`'s slice of tensor `tensor`, row-major,
// cols wide; `offset` is its first element's index in the whole tensor (all layers).
typedef struct {
    int tensor, layer, linear;
    int row0, rows, cols;
    size_t offset;
} MuonMatrix;

// The matrices of a model, layer by layer, each layer's in the linears' order, the QKV weight as one matrix or
// (split_qkv) as Q (C rows), K and V (DIM_QK - C rows each: GPT-2 C, Llama KVH HS). out may be NULL (count only).
// Returns the count.
static inline int muon_matrices(const GPTConfig* c, int split_qkv, MuonMatrix* out) {
    const ModelFamily* f = model_family(c);
    int n = 0;
    for (int l = 0; l < c->num_layers; l++)
        for (int k = 0; k < f->num_linears; k++) {
            const LinearRow* row = &f->linears[k];
            const int rows = (int)dim_value(c, row->out), cols = (int)dim_value(c, row->in);
            const int q = (int)dim_value(c, row->qk_split) - c->channels;   // K's (and V's) rows when split
            const int split = split_qkv && k == LIN_QKV && row->qk_split != DIM_0;
            const int parts = split ? 3 : 1;
            for (int p = 0; p < parts; p++) {
                const int r0 = p == 0 ? 0 : c->channels + (p - 1) * q;
                const int nr = !split ? rows : p == 0 ? c->channels : q;
                if (out) out[n] = (MuonMatrix){row->weight, l, k, r0, nr, cols,
                                               ((size_t)l * rows + r0) * (size_t)cols};
                n++;
            }
        }
    return n;
}

// ZeRO-1 with Muon (docs/FULLSTACK_FP4.md section 3): matrix i of muon_matrices' list is owned, whole, by rank
// i mod world, which keeps its momentum (and master), updates it and broadcasts it.
static inline int muon_owner(int i, int world) { return i % world; }

// ZeRO-1: rank `rank`'s matrices of the list mats[0..n): off[i] is matrix i's offset in the rank's Muon state (its
// owned matrices one after another, in list order), or SIZE_MAX for another rank's. Returns the state's elements.
static inline size_t muon_owned_offsets(const MuonMatrix* mats, int n, int world, int rank, size_t* off) {
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        off[i] = SIZE_MAX;
        if (muon_owner(i, world) != rank) continue;
        off[i] = total;
        total += (size_t)mats[i].rows * mats[i].cols;
    }
    return total;
}
