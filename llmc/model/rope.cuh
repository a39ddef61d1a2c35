// rope.cuh: rotary position embedding of the q and k heads, in place in the qkv buffer, forward and backward.
// defines: rope_forward(), rope_backward()
// The convention, the table and the FP32 arithmetic are rope.h's (rope_table_fill, rope_rotate; its CPU twin
// rope_apply_cpu gives the same bits). A row of qkv is (NH + 2 KVH) HS wide: q heads [0, NH HS), k heads
// [NH HS, (NH + KVH) HS), v heads after (never touched). Token n of the B*T rows is at position t = n % T.
// One thread per 8 pairs of a head: a 16-byte load from each half of the head, two float4 loads each of cos
// and sin, one rotation per pair in FP32, each result rounded once to BF16 and stored where it was read.
// HS % 16 == 0 (8 pairs per thread; the heads of the presets are 32, 64, 128 wide).
#pragma once
#include "llmc/base/cuda_common.cuh"
#include "llmc/base/vec128.cuh"
#include "llmc/model/rope.h"

#define ROPE_THREADS 256

template <bool BACKWARD>
__global__ void __launch_bounds__(ROPE_THREADS)
rope_kernel(floatX* qkv, const float* cosv, const float* sinv, int T, int NH, int KVH, int HS, size_t nwork) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= nwork) return;
    int half = HS / 2;
    int chunks = half / 8;                                 // 8-pair chunks per head
    int chunk = (int)(idx % chunks);
    size_t rest = idx / chunks;
    int head = (int)(rest % (NH + KVH));                  // q heads 0..NH-1, then k heads: both at head * HS
    size_t token = rest / (NH + KVH);
    int t = (int)(token % T);
    floatX* x = qkv + token * (size_t)(NH + 2 * KVH) * HS + (size_t)head * HS + chunk * 8;
    const float* cp = cosv + (size_t)t * half + chunk * 8;
    const float* sp = sinv + (size_t)t * half + chunk * 8;
    float x0[8], x1[8], c[8], s[8];
    bf16x8_to_float(load_bf16x8(x), x0);
    bf16x8_to_float(load_bf16x8(x + half), x1);
    float4 c0 = __ldg(reinterpret_cast<const float4*>(cp)), c1 = __ldg(reinterpret_cast<const float4*>(cp) + 1);
    float4 s0 = __ldg(reinterpret_cast<const float4*>(sp)), s1 = __ldg(reinterpret_cast<const float4*>(sp) + 1);
    c[0] = c0.x; c[1] = c0.y; c[2] = c0.z; c[3] = c0.w; c[4] = c1.x; c[5] = c1.y; c[6] = c1.z; c[7] = c1.w;
    s[0] = s0.x; s[1] = s0.y; s[2] = s0.z; s[3] = s0.w; s[4] = s1.x; s[5] = s1.y; s[6] = s1.z; s[7] = s1.w;
    float y0[8], y1[8];
    #pragma unroll
    for (int j = 0; j < 8; j++) rope_rotate(x0[j], x1[j], c[j], BACKWARD ? -s[j] : s[j], &y0[j], &y1[j]);
    store_bf16x8(x, float_to_bf16x8(y0));
    store_bf16x8(x + half, float_to_bf16x8(y1));
}

template <bool BACKWARD>
static void rope_launch(floatX* qkv, const float* cosv, const float* sinv, int B, int T, int NH, int KVH, int HS,
                        cudaStream_t s) {
    const char* who = BACKWARD ? "rope_backward" : "rope_forward";
    fail_if(HS <= 0 || HS % 16 != 0, "%s: head size %d must be a positive multiple of 16", who, HS);
    fail_if(NH <= 0 || KVH <= 0, "%s: NH=%d and KVH=%d must be positive", who, NH, KVH);
    fail_if(B < 0 || T <= 0, "%s: B=%d, T=%d", who, B, T);
    if (B == 0) return;
    require_aligned16(who, qkv);
    require_aligned16(who, cosv);
    require_aligned16(who, sinv);
    size_t nwork = (size_t)B * T * (NH + KVH) * (HS / 16);
    unsigned grid = (unsigned)ceil_div((int64_t)nwork, ROPE_THREADS);
    rope_kernel<BACKWARD><<<grid, ROPE_THREADS, 0, s>>>(qkv, cosv, sinv, T, NH, KVH, HS, nwork);
    cuda_check_last();
}

// qkv: (B*T, (NH + 2 KVH) HS) BF16, rotated in place (q and k heads); cosv, sinv: rope_table_fill's table with at
// least T rows (row stride HS/2 floats), on the device.
void rope_forward(floatX* qkv, const float* cosv, const float* sinv, int B, int T, int NH, int KVH, int HS,
                  cudaStream_t s) {
    rope_launch<false>(qkv, cosv, sinv, B, T, NH, KVH, HS, s);
}

// dqkv: the gradient of rope_forward's output, turned in place by the opposite angle into the gradient of its
// input (the v heads' gradient untouched).
void rope_backward(floatX* dqkv, const float* cosv, const float* sinv, int B, int T, int NH, int KVH, int HS,
                   cudaStream_t s) {
    rope_launch<true>(dqkv, cosv, sinv, B, T, NH, KVH, HS, s);
}
