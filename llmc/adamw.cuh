// adamw.cuh: the AdamW update of one parameter tensor, BF16 parameters with optional FP32 master copy.
// defines: adamw_update() (AdamWParams and adamw_step_ref() are in llmc/base/adamw_step.h)
// Without a master copy, the new FP32 value is stochastically rounded to BF16 (unbiased, so small
// updates survive on average instead of being rounded away); the random bits come from the
// counter-based generator keyed on (seed, step, tensor id, element index), so a run is
// reproducible and resumes bit for bit. With a master copy, BF16 params are its RNE rounding.
#pragma once
#include "llmc/base/cuda_common.cuh"
#include "llmc/stochastic_round.cuh"
#include "llmc/base/adamw_step.h"   // defines: AdamWParams, adamw_step_ref

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

// ----------------------------------------------------------------------------------------------
// --optimizer-state nvfp4: m and u = sqrt(v) in NVFP4 blocks (llmc/fp4/optim_state.h: the layout, the guards and
// the CPU twin these kernels match bit for bit). One segment (a tensor's layer, or its part in this rank's
// shard) per call, two kernels: pass 1 updates the parameters and takes the new amaxes, pass 2 encodes the
// new moments under them.
#include "llmc/fp4/optim_state.h"

typedef struct {
    uint8_t* codes[OPT4_STATES];    // the segment's codes and block scales (state arrays + base / 2, base / 16)
    uint8_t* scales[OPT4_STATES];
    const float* amax_old;          // [2]: what the codes were encoded under
    float* amax_new;                // [2]: this update's maxima (zeroed before pass 1; the caller copies them
                                    //      into amax_old after every segment's pass 2)
    size_t index0;                  // the segment's first element's index in its (tensor, layer): the SR draws
    uint64_t key[OPT4_STATES];      // rng_key(seed, step, opt4_tensor_id(tensor, layer, state))
} Opt4Device;

__global__ void adamw_nvfp4_pass1(floatX* params, float* master, const float* grads, Opt4Device st, size_t n,
                                  size_t index_offset, Opt4Step s, GridTraits g) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    float am = 0.0f, au = 0.0f;
    if (i < n) {
        const float sdec_m = f32_div_rn(1.0f, opt4_s_enc(st.amax_old[0])), sdec_u = f32_div_rn(1.0f, opt4_s_enc(st.amax_old[1]));
        const float m0 = opt4_decode(&g, st.codes[0], st.scales[0], sdec_m, i);
        const float u0 = opt4_decode(&g, st.codes[1], st.scales[1], sdec_u, i);
        float mt, vt;
        opt4_moments(m0, u0, grads[i], &s.a, &mt, &vt);
        const float p = master ? master[i] : __bfloat162float(params[i]);
        const float np = opt4_param(p, mt, vt, &s);
        uint16_t bits;
        if (master) {
            master[i] = np;
            bits = bf16_bits_rne(np);
        } else {
            bits = bf16_bits_sr(np, rng_bits32(s.a.rng_key, index_offset + i));
        }
        params[i] = __ushort_as_bfloat16(bits);
        am = fabsf(mt);
        au = f32_sqrt_rn(vt);
    }
    // the block's maxima, then one atomic per block (max is order-free: the result does not depend on timing;
    // non-negative floats order as their bit patterns)
    for (int d = 16; d >= 1; d >>= 1) {
        am = fmaxf(am, __shfl_xor_sync(0xFFFFFFFFu, am, d));
        au = fmaxf(au, __shfl_xor_sync(0xFFFFFFFFu, au, d));
    }
    if ((threadIdx.x & 31) == 0) {
        atomicMax((unsigned int*)&st.amax_new[0], __float_as_uint(am));
        atomicMax((unsigned int*)&st.amax_new[1], __float_as_uint(au));
    }
}

// One thread per 16-element block: decode, recompute the moments, encode under the new amaxes.
__global__ void adamw_nvfp4_pass2(const float* grads, Opt4Device st, size_t n, Opt4Step s, GridTraits g) {
    const size_t blk = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t b0 = blk * OPT4_BLOCK;
    if (b0 >= n) return;
    const int count = n - b0 < OPT4_BLOCK ? (int)(n - b0) : OPT4_BLOCK;
    const float sdec_m = f32_div_rn(1.0f, opt4_s_enc(st.amax_old[0])), sdec_u = f32_div_rn(1.0f, opt4_s_enc(st.amax_old[1]));
    float mt[OPT4_BLOCK], ut[OPT4_BLOCK];
    for (int j = 0; j < OPT4_BLOCK; j++) {
        mt[j] = ut[j] = 0.0f;
        if (j >= count) continue;
        const float m0 = opt4_decode(&g, st.codes[0], st.scales[0], sdec_m, b0 + j);
        const float u0 = opt4_decode(&g, st.codes[1], st.scales[1], sdec_u, b0 + j);
        float vt;
        opt4_moments(m0, u0, grads[b0 + j], &s.a, &mt[j], &vt);
        ut[j] = f32_sqrt_rn(vt);
    }
    opt4_encode_block(&g, mt, count, opt4_s_enc(st.amax_new[0]), 0, st.key[0], st.index0 + b0, st.codes[0] + b0 / 2,
                      st.scales[0] + blk);
    opt4_encode_block(&g, ut, count, opt4_s_enc(st.amax_new[1]), 1, st.key[1], st.index0 + b0, st.codes[1] + b0 / 2,
                      st.scales[1] + blk);
}

// Segment s (of S, sg its layout) of the state buffer mem of elems elements (llmc/fp4/optim_state.h's layout, with
// this update's amaxes after the stored ones), with the rng keys of (seed, step).
static Opt4Device opt4_device_view(uint8_t* mem, size_t elems, int S, const Opt4Seg* sg, int s, uint64_t seed, int step) {
    const Opt4HostState h = opt4_state_in(mem, elems);
    Opt4Device st;
    for (int k = 0; k < OPT4_STATES; k++) {
        st.codes[k] = h.codes[k] + sg->base / 2;
        st.scales[k] = h.scales[k] + sg->base / OPT4_BLOCK;
        st.key[k] = rng_key(seed, (uint32_t)step, opt4_tensor_id(sg->tensor, sg->layer, k));
    }
    st.amax_old = h.amax + 2 * s;
    st.amax_new = h.amax + 2 * (S + s);
    st.index0 = sg->index0;
    return st;
}

// Updates one segment of n elements: params, master (or NULL), grads point at its first element; index_offset is
// params[0]'s index in its whole tensor, for the BF16 rounding of the weights (as adamw_update's);
// st->amax_new must start at 0.
void adamw_nvfp4_update(floatX* params, float* master, const float* grads, const Opt4Device* st, size_t n,
                        size_t index_offset, const Opt4Step* s, cudaStream_t stream) {
    if (n == 0) return;
    const GridTraits g = *grid_traits(QGRID_E2M1);
    adamw_nvfp4_pass1<<<(unsigned)ceil_div((int64_t)n, 256), 256, 0, stream>>>(params, master, grads, *st, n,
                                                                              index_offset, *s, g);
    cuda_check_last();
    const int64_t blocks = ceil_div((int64_t)n, OPT4_BLOCK);
    adamw_nvfp4_pass2<<<(unsigned)ceil_div(blocks, 128), 128, 0, stream>>>(grads, *st, n, *s, g);
    cuda_check_last();
}
