// adamw.cuh: the AdamW update of one parameter tensor, BF16 parameters with optional FP32 master copy.
// defines: AdamWParams, adamw_update(), adamw_step_ref()
// Without a master copy, the new FP32 value is stochastically rounded to BF16 (unbiased, so small
// updates survive on average instead of being rounded away); the random bits come from the
// counter-based generator keyed on (seed, step, tensor id, element index), so a run is
// reproducible and resumes bit for bit. With a master copy, BF16 params are its RNE rounding.
#pragma once
#include "llmc/base/cuda_common.cuh"
#include "llmc/stochastic_round.cuh"

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

__global__ void adamw_kernel(floatX* params, float* master, const float* grads, float* m, float* v,
                             size_t n, size_t index_offset, AdamWParams a) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float p = master ? master[i] : __bfloat162float(params[i]);
    float mi = m[i], vi = v[i];
    float np = adamw_step_ref(p, grads[i], &mi, &vi, &a);
    m[i] = mi;
    v[i] = vi;
    uint16_t bits;
    if (master) {
        master[i] = np;
        bits = bf16_bits_rne(np);
    } else {
        bits = bf16_bits_sr(np, rng_bits32(a.rng_key, index_offset + i));
    }
    params[i] = __ushort_as_bfloat16(bits);
}

// Updates n elements of one tensor. index_offset is the position of params[0] within its tensor
// (non-zero when the tensor is sharded across ranks), so the random bits do not depend on sharding.
void adamw_update(floatX* params, float* master, const float* grads, float* m, float* v, size_t n,
                  size_t index_offset, const AdamWParams* a, cudaStream_t stream) {
    if (n == 0) return;
    const int block = 256;
    adamw_kernel<<<(unsigned)ceil_div((int64_t)n, block), block, 0, stream>>>(params, master, grads, m, v, n,
                                                                            index_offset, *a);
    cuda_check_last();
}
