// models.h: the model families by architecture, and what their tables give for one model: the parameter layout.
// defines: model_family(), param_sizes(), param_count()
#pragma once
#include "llmc/model/gpt2.h"
#include "llmc/model/llama.h"

static inline const ModelFamily* model_family(const GPTConfig* c) {
    return c->arch == ARCH_LLAMA ? &LLAMA_FAMILY : &GPT2_FAMILY;
}

// Elements of each tensor (all layers), in table order; returns the number of tensors.
static inline int param_sizes(const GPTConfig* c, size_t sizes[MAX_PARAM_TENSORS]) {
    const ModelFamily* f = model_family(c);
    for (int i = 0; i < f->num_params; i++) {
        const ParamDesc* p = &f->params[i];
        const int none = p->untied_only && c->tied;
        sizes[i] = none ? 0 : (size_t)(dim_value(c, p->rows) * dim_value(c, p->cols)) *
                                  (p->per_layer ? (size_t)c->num_layers : 1);
    }
    return f->num_params;
}

static inline size_t param_count(const GPTConfig* c) {
    size_t sizes[MAX_PARAM_TENSORS], n = 0;
    const int k = param_sizes(c, sizes);
    for (int i = 0; i < k; i++) n += sizes[i];
    return n;
}
