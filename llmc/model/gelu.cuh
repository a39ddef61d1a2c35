// gelu.cuh: GPT-2's GELU (the tanh approximation), forward and backward, computed in fp32.
// defines: gelu_forward(), gelu_backward_inplace(), gelu_ref(), gelu_grad_ref()
//   gelu(x)  = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// One thread per 8 elements (16-byte loads and stores); a scalar kernel takes the n % 8 tail.
// Pointers must be 16-byte aligned (activation buffers are).
#pragma once
#include <math.h>
#include "llmc/base/cuda_common.cuh"
#include "llmc/base/vec128.cuh"

#define GELU_SCALE 0.7978845608028654f   // sqrt(2/pi)
#define GELU_CUBIC 0.044715f

// The scalar formulas, shared by the kernels and the CPU reference in the tests.
HD float gelu_ref(float x) {
    float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}
HD float gelu_grad_ref(float x) {
    float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
    float th = tanhf(u);
    float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * x * x);
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
}

#define GELU_THREADS 256

__global__ void __launch_bounds__(GELU_THREADS)
gelu_forward_kernel(floatX* out, const floatX* inp, size_t nvec) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nvec) return;
    float x[8];
    bf16x8_to_float(load_bf16x8_cs(inp + i * 8), x);
    #pragma unroll
    for (int k = 0; k < 8; k++) x[k] = gelu_ref(x[k]);
    store_bf16x8(out + i * 8, float_to_bf16x8(x));
}

__global__ void __launch_bounds__(GELU_THREADS)
gelu_backward_kernel(floatX* d_in_out, const floatX* inp, size_t nvec) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nvec) return;
    float x[8], d[8];
    bf16x8_to_float(load_bf16x8_cs(inp + i * 8), x);
    bf16x8_to_float(load_bf16x8(d_in_out + i * 8), d);
    #pragma unroll
    for (int k = 0; k < 8; k++) d[k] *= gelu_grad_ref(x[k]);
    store_bf16x8(d_in_out + i * 8, float_to_bf16x8(d));
}

// The last n % 8 elements (at most 7), one thread each.
__global__ void gelu_tail_kernel(floatX* out, const floatX* inp, size_t begin, size_t n, int backward) {
    size_t i = begin + threadIdx.x;
    if (i >= n) return;
    float x = __bfloat162float(inp[i]);
    float y = backward ? __bfloat162float(out[i]) * gelu_grad_ref(x) : gelu_ref(x);
    out[i] = __float2bfloat16_rn(y);
}

static void gelu_launch(floatX* out, const floatX* inp, size_t n, int backward, cudaStream_t s) {
    require_aligned16("gelu", out);
    require_aligned16("gelu", inp);
    size_t nvec = n / 8;
    if (nvec > 0) {
        unsigned blocks = (unsigned)ceil_div((int64_t)nvec, GELU_THREADS);
        if (backward) gelu_backward_kernel<<<blocks, GELU_THREADS, 0, s>>>(out, inp, nvec);
        else          gelu_forward_kernel<<<blocks, GELU_THREADS, 0, s>>>(out, inp, nvec);
        cuda_check_last();
    }
    if (n % 8) {
        gelu_tail_kernel<<<1, 8, 0, s>>>(out, inp, nvec * 8, n, backward);
        cuda_check_last();
    }
}

void gelu_forward(floatX* out, const floatX* inp, size_t n, cudaStream_t s) {
    gelu_launch(out, inp, n, 0, s);
}

// d_in_out = d_out * gelu'(inp), in place.
void gelu_backward_inplace(floatX* d_in_out, const floatX* inp, size_t n, cudaStream_t s) {
    gelu_launch(d_in_out, inp, n, 1, s);
}
