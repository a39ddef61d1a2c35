// adamw_step.h: one AdamW element step, plain C (HD), shared by the GPU update (llmc/adamw.cuh) and the CPU
// tests. defines: AdamWParams, adamw_step_ref()
#pragma once
#include <math.h>
#include "llmc/base/common.h"

typedef struct {
    float lr, beta1, beta2, eps, weight_decay;  // weight_decay already 0 for tensors not decayed
    float grad_scale;                           // gradient clipping factor (1 when not clipping)
    int t;                                      // 1-based step count for bias correction
    uint64_t rng_key;                           // rng_key(seed, step, tensor id)
} AdamWParams;

// One element: updates m, v, and returns the new FP32 parameter value. Shared by the kernel and the
// CPU reference twin.
HD float adamw_step_ref(float p, float g, float* m, float* v, const AdamWParams* a) {
    g *= a->grad_scale;
    float mt = a->beta1 * *m + (1.0f - a->beta1) * g;
    float vt = a->beta2 * *v + (1.0f - a->beta2) * g * g;
    *m = mt;
    *v = vt;
    float mhat = mt / (1.0f - powf(a->beta1, (float)a->t));
    float vhat = vt / (1.0f - powf(a->beta2, (float)a->t));
    return p - a->lr * (mhat / (sqrtf(vhat) + a->eps) + a->weight_decay * p);
}
