// target_argmax.cuh: whether each position's target is the argmax of its logits (greedy decoding would
// produce it), for LAMBADA's last-word accuracy.
// defines: target_is_argmax()
// One block per position; positions without a target (target < 0) are skipped. "Is the argmax" is
// torch.argmax's rule: the target's logit is above every logit before it and not below any after it,
// so on a tie the lowest index wins. BF16 logits tie more often than FP32 ones would; that is part of
// evaluating the model as it computes.
#pragma once
#include "llmc/base/cuda_common.cuh"

#define TA_THREADS 256

__global__ void target_is_argmax_kernel(const floatX* logits, const int* targets, int* hits, int V, int Vp) {
    const int target = targets[blockIdx.x];
    if (target < 0 || target >= V) {
        if (threadIdx.x == 0) hits[blockIdx.x] = 0;
        return;
    }
    const floatX* x = logits + (size_t)blockIdx.x * Vp;
    const float xt = __bfloat162float(x[target]);
    int beaten = 0;
    for (int v = threadIdx.x; v < V && !beaten; v += TA_THREADS) {
        float xv = __bfloat162float(x[v]);
        beaten = v < target ? xv >= xt : xv > xt;
    }
    beaten = __syncthreads_or(beaten);
    if (threadIdx.x == 0) hits[blockIdx.x] = !beaten;
}

// hits[i] = 1 when targets[i] >= 0 is the argmax of logits row i over its first V columns, else 0.
void target_is_argmax(const floatX* logits, const int* targets, int* hits, int N, int V, int Vp, cudaStream_t s) {
    if (N <= 0) return;
    target_is_argmax_kernel<<<N, TA_THREADS, 0, s>>>(logits, targets, hits, V, Vp);
    cuda_check_last();
}
