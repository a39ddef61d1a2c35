// attention_fp4.cuh: the GPU quantization of FP4 attention's copies (--attention-fp4, fp4/attention_fp4.h): Q, K, V
// into a layer's fake copy, and dS into the copies dQ and dK read. model/attention.cuh calls these through its
// AttnQuantizer hook (the model does not read the FP4 module), which attn_fp4_quantizer() fills.
// defines: attn_fp4_quantize_qkv_gpu(), attn_fp4_quantize_ds_gpu()
// Each copy equals the CPU twin's (attn_fp4_quantize_qkv_cpu, attn_fp4_quantize_ds_cpu) bit for bit: the same
// quantizer (fp4/quant.cuh), the same views, axes and SR keys.
#pragma once
#include "llmc/base/cuda_common.cuh"
#include "llmc/fp4/attention_fp4.h"   // AttnFp4, attn_fp4_qkv_slice, attn_fp4_key, attn_fp4_ds_square
#include "llmc/fp4/quant.cuh"         // quantize_fast_gpu, quant_target_fake, quant_fast_supported

// Q, K, V of qkv (B, T, NH + 2 KVH, HS) into fake (the same layout); amax[3], dec[3]: device floats per part.
static void attn_fp4_quantize_qkv_gpu(const AttnFp4* a, const floatX* qkv, floatX* fake, float* amax, float* dec,
                                      AttnFp4Shape sh, uint64_t key, cudaStream_t stream) {
    const QuantParams p = quant_params(&a->qkv);
    const int64_t W = (int64_t)(sh.NH + 2 * sh.KVH) * sh.HS, rows = (int64_t)sh.B * sh.T;
    for (int part = 0; part < 3; part++) {
        int64_t col0, cols;
        int axis;
        attn_fp4_qkv_slice(sh, (AttnFp4Part)part, &col0, &cols, &axis);
        const QuantTarget t = quant_target_fake(&p, axis, attn_fp4_key(key, (AttnFp4Part)part), fake + col0, W,
                                                amax + part, dec + part);
        fail_if(!quant_fast_supported(&t, 1, rows, cols, W), "--attention-fp4: the GPU quantizer has no kernel for "
                "this spec on a %lld x %lld slice (ld %lld); try nvfp4, nvfp4-2d or mxfp4", (long long)rows,
                (long long)cols, (long long)W);
        quantize_fast_gpu(qkv + col0, rows, cols, W, &t, 1, stream);
    }
}

// dS (B NH T rows of T) into rows (the copy dQ reads, blocks along keys) and cols (dK's, along queries; a square 2D
// spec writes rows only, which serves both, copies its factor to dec[1] and returns 1); amax[2], dec[2]: device floats.
static int attn_fp4_quantize_ds_gpu(const AttnFp4* a, const floatX* ds, floatX* rows, floatX* cols, float* amax,
                                     float* dec, AttnFp4Shape sh, uint64_t key, cudaStream_t stream) {
    const QuantParams p = quant_params(&a->ds);
    const int64_t R = (int64_t)sh.B * sh.NH * sh.T, T = sh.T;
    const uint64_t k = attn_fp4_key(key, ATTN_FP4_DS);
    const int square = attn_fp4_ds_square(a);
    const QuantTarget t[2] = {quant_target_fake(&p, 1, k, rows, T, amax, dec),
                              quant_target_fake(&p, 0, k, cols, T, amax + 1, dec + 1)};
    for (int i = 0; i < (square ? 1 : 2); i++)
        fail_if(!quant_fast_supported(&t[i], 1, R, T, T), "--attention-fp4-ds: the GPU quantizer has no kernel for this "
                "spec on dS (%lld x %lld); try nvfp4-2d,sr or nvfp4,sr", (long long)R, (long long)T);
    if (square) {
        quantize_fast_gpu(ds, R, T, T, &t[0], 1, stream);
        cuda_check(cudaMemcpyAsync(dec + 1, dec, sizeof(float), cudaMemcpyDeviceToDevice, stream));
        cuda_check(cudaMemcpyAsync(amax + 1, amax, sizeof(float), cudaMemcpyDeviceToDevice, stream));
    } else if (quant_fast_supported(t, 2, R, T, T)) {
        quantize_fast_gpu(ds, R, T, T, t, 2, stream);   // one amax pass for both copies
    } else {
        quantize_fast_gpu(ds, R, T, T, &t[0], 1, stream);
        quantize_fast_gpu(ds, R, T, T, &t[1], 1, stream);
    }
    return square;
}
