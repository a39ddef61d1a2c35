// nvfp4_ref.cuh: the reference GPU quantizer: plain tile kernels over the HD arithmetic of fp4/formats.h /
// hadamard.cuh / stochastic_round.cuh, for every 4-bit format (NVFP4, MXFP4, INT4/E1M2) and fp8, with optional
// Hadamard rotation (up to 32) and stochastic rounding; any mix of fake and packed outputs per target.
// defines: quant_amax_gpu(), quant_apply_gpu(), quantize_gpu(), quant_fake_gpu(), dequant_packed_gpu(),
//          quant_stats_gpu(), QUANT_GPU_MAX_HADAMARD
// Not part of the trainer: it runs llmc/fp4/quant.cuh. These kernels are the GPU twin that the fast kernels
// are tested against (dev/test/test_quant_fast.cu) and timed against (dev/bench/bench_quant_fast.cu); they
// are themselves tested against the numpy golden vectors and the CPU quantizer (dev/test/test_fp4_gpu.cu).
// The output is bit-identical to the CPU path (fp4/quant_cpu.h, which documents orientation, layouts and SR
// indices); targets and their outputs: llmc/quant_target.cuh.
//
// Two passes, no host sync: quant_amax_gpu (tensor amax of the possibly rotated view into a device
// float) then quant_apply_gpu (reads that amax on the device). quantize_gpu runs both. Up to two
// targets (e.g. the row-wise and the column-wise copy of X, each with its own spec and SR key) are
// produced from ONE read of the input per pass; any of a target's fake / codes / scales may be NULL.
// Shapes: K % L == 0, M % W == 0 (2D blocks), K % hadamard == 0, else a clear error. Hadamard sizes on the
// GPU: up to 32 (the CPU path goes to 128). The kernels are deterministic (max is order-independent).
// quant_stats_gpu: the error, flushed and clipped counts of a quantization (QuantStats in fp4/quant_cpu.h).
#pragma once
#include "llmc/base/cuda_common.cuh"
#include "llmc/fp4/formats.h"
#include "llmc/fp4/stochastic_round.h"
#include "llmc/fp4/hadamard.h"
#include "llmc/fp4/quant_cpu.h"   // quant_check_shape, orientation helpers, BF16_CANONICAL_NAN
#include "llmc/fp4/quant_target.cuh"
#include "llmc/fp4/quant_diag.cuh"  // quant_warp_sum

#define QUANT_GPU_MAX_HADAMARD 32
#define QT_TILE 64      // a CTA owns a 64 x 64 tile of the view
#define QT_UNIT 32      // a thread owns 32 consecutive elements along the reduction dim
#define QT_STRIDE 72    // smem row stride in BF16 (64 + 8): 16-byte aligned rows, conflict-free unit reads
#define QT_THREADS 128  // 64 units along the tile's non-reduction edge x 2 chunks of 32

typedef struct {
    QuantTarget t[2];
    int n;
} QuantTargets;

enum { QMODE_AMAX = 0, QMODE_APPLY = 1, QMODE_STATS = 2 };

typedef struct {
    QuantStats* s[2];   // QMODE_STATS: one device accumulator per target
} QuantStatsOut;

// ---------------------------------------------------------------------------------------------------
// device helpers

__device__ __forceinline__ float qt_bf16_round(float x) { return bf16_bits_to_float(bf16_bits_rne(x)); }

template <int N>
__device__ __forceinline__ void qt_hadamard_unit(float* v, const uint32_t* signs) {
#pragma unroll
    for (int o = 0; o < QT_UNIT; o += N) hadamard_f32_n<N>(v + o, signs);
#pragma unroll
    for (int e = 0; e < QT_UNIT; e++) v[e] = qt_bf16_round(v[e]);
}

__device__ __forceinline__ void qt_rotate(float* v, const QuantParams& p) {
    switch (p.hadamard) {
        case 2: qt_hadamard_unit<2>(v, p.signs); break;
        case 4: qt_hadamard_unit<4>(v, p.signs); break;
        case 8: qt_hadamard_unit<8>(v, p.signs); break;
        case 16: qt_hadamard_unit<16>(v, p.signs); break;
        case 32: qt_hadamard_unit<32>(v, p.signs); break;
        default: break;
    }
}

__device__ __forceinline__ uint32_t qt_warp_max(uint32_t m, int width) {
    for (int off = 1; off < width; off <<= 1) {
        uint32_t o = __shfl_xor_sync(0xFFFFFFFFu, m, off);
        m = o > m ? o : m;
    }
    return m;
}

// Load the tile [r0, r0+64) x [c0, c0+64) of the view into smem (zeros outside the view).
__device__ __forceinline__ void qt_load_tile(uint16_t (*tile)[QT_STRIDE], const floatX* in, int64_t rows,
                                             int64_t cols, int64_t ld, int64_t r0, int64_t c0, bool vec) {
    const uint16_t* src = (const uint16_t*)in;
#pragma unroll
    for (int it = 0; it < 4; it++) {
        int lin = it * QT_THREADS + threadIdx.x;
        int tr = lin >> 3, tc = (lin & 7) * 8;
        int64_t r = r0 + tr, c = c0 + tc;
        if (vec && r < rows && c + 8 <= cols) {
            *(uint4*)&tile[tr][tc] = __ldcs((const uint4*)(src + r * ld + c));
        } else {
#pragma unroll
            for (int e = 0; e < 8; e++)
                tile[tr][tc + e] = (r < rows && c + e < cols) ? src[r * ld + c + e] : (uint16_t)0;
        }
    }
}

__device__ __forceinline__ void qt_store_tile(uint16_t (*tile)[QT_STRIDE], floatX* out, int64_t rows, int64_t cols,
                                              int64_t ld, int64_t r0, int64_t c0, bool vec) {
    uint16_t* dst = (uint16_t*)out;
#pragma unroll
    for (int it = 0; it < 4; it++) {
        int lin = it * QT_THREADS + threadIdx.x;
        int tr = lin >> 3, tc = (lin & 7) * 8;
        int64_t r = r0 + tr, c = c0 + tc;
        if (vec && r < rows && c + 8 <= cols) {
            __stcs((uint4*)(dst + r * ld + c), *(uint4*)&tile[tr][tc]);
        } else {
            for (int e = 0; e < 8; e++)
                if (r < rows && c + e < cols) dst[r * ld + c + e] = tile[tr][tc + e];
        }
    }
}

// One target over the CTA's tile. Thread -> unit: u = tid % 64 along the operand's non-reduction dim
// (so a warp holds 32 consecutive operand rows: 2D blocks reduce their amax with shuffles), j = tid / 64
// the 32-chunk along the reduction dim.
// QMODE_STATS runs the same code as QMODE_APPLY up to each element's code, then adds the element to
// *acc (this thread's accumulator) instead of writing outputs; it does not write *T.scale_dec.
template <int MODE>
__device__ void qt_process(const QuantTarget& T, uint16_t (*tile)[QT_STRIDE], uint16_t (*otile)[QT_STRIDE],
                           int64_t rows, int64_t cols, int64_t r0, int64_t c0, QuantStats* acc) {
    const QuantParams& p = T.p;
    const int u = threadIdx.x & 63, j = threadIdx.x >> 6;
    const int axis = T.axis;
    const int64_t M = axis ? rows : cols, K = axis ? cols : rows;
    const int64_t i = (axis ? r0 : c0) + u;
    const int64_t kb = (axis ? c0 : r0) + j * QT_UNIT;
    const int valid = (i < M && kb < K) ? (int)min((int64_t)QT_UNIT, K - kb) : 0;   // 0, 16 or 32

    float v[QT_UNIT];
#pragma unroll
    for (int e = 0; e < QT_UNIT; e++) {
        uint16_t b = axis ? tile[u][j * QT_UNIT + e] : tile[j * QT_UNIT + e][u];
        v[e] = e < valid ? bf16_bits_to_float(b) : 0.0f;
    }
    if (p.hadamard) qt_rotate(v, p);

    uint32_t m0 = 0, m1 = 0;
#pragma unroll
    for (int e = 0; e < 16; e++) {
        m0 = amax_bits_update(m0, v[e]);
        m1 = amax_bits_update(m1, v[e + 16]);
    }
    if (MODE == QMODE_AMAX) {
        uint32_t m = qt_warp_max(m0 > m1 ? m0 : m1, 32);
        if ((threadIdx.x & 31) == 0 && m) atomicMax((unsigned int*)T.amax, m);
        return;
    }
    if (p.block_l == 32) m0 = m1 = (m0 > m1 ? m0 : m1);
    if (p.block_w > 1) { m0 = qt_warp_max(m0, p.block_w); m1 = qt_warp_max(m1, p.block_w); }

    const float s_enc = quant_tensor_scale_enc(&p, *T.amax);
    if (MODE == QMODE_APPLY && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0)
        *T.scale_dec = p.scale == QSCALE_E4M3 ? 1.0f / s_enc : 1.0f;
    if (!valid && (MODE == QMODE_STATS || !T.fake)) return;
    const float tdec = quant_tensor_scale_dec(&p, s_enc);   // QMODE_STATS only

    uint32_t words[4] = {0, 0, 0, 0};
    uint8_t sbits[2] = {0, 0};
#pragma unroll
    for (int h = 0; h < 2; h++) {
        QuantBlockScale bs = quant_block_scale(&p, f32_from_bits(h ? m1 : m0), s_enc);
        sbits[h] = bs.bits;
#pragma unroll
        for (int e2 = 0; e2 < 16; e2 += 2) {
            const int e = 16 * h + e2;
            uint32_t r16[2] = {0, 0};
            if (p.rounding == QROUND_SR) {                 // view element (i, k) (axis 1) or (k, i) (axis 0)
                const uint64_t k0 = (uint64_t)(kb + e);
                r16[0] = axis ? sr_bits16(T.key, i, k0, cols) : sr_bits16(T.key, k0, i, cols);
                r16[1] = axis ? sr_bits16(T.key, i, k0 + 1, cols) : sr_bits16(T.key, k0 + 1, i, cols);
            }
#pragma unroll
            for (int q = 0; q < 2; q++) {
                float x = v[e + q] * bs.inv;
                uint8_t c = bs.is_nan ? 0
                          : p.rounding == QROUND_SR ? grid_round_sr(&p.grid, x, r16[q]) : grid_round_rne(&p.grid, x);
                if (MODE == QMODE_STATS) {
                    if (e + q < valid) quant_stats_element(acc, &p.grid, v[e + q], x, c, &bs, tdec);
                    continue;
                }
                words[(e + q) >> 3] |= (uint32_t)c << (4 * ((e + q) & 7));
                if (T.fake) {
                    uint16_t o = bs.is_nan ? (uint16_t)BF16_CANONICAL_NAN
                                           : bf16_bits_rne(grid_code_value(&p.grid, c) * bs.sdec);
                    if (axis) otile[u][j * QT_UNIT + e + q] = o;
                    else otile[j * QT_UNIT + e + q][u] = o;
                }
            }
        }
    }
    if (MODE == QMODE_STATS) return;
    if (T.codes && valid) {
        uint8_t* dst = T.codes + i * (K / 2) + kb / 2;     // 8-byte aligned: K/2 % 8 == 0, kb/2 % 16 == 0
        *(uint2*)dst = make_uint2(words[0], words[1]);
        if (valid == 32) *(uint2*)(dst + 8) = make_uint2(words[2], words[3]);
    }
    if (T.scales && valid) {
        if (p.block_l == 32) T.scales[i * (K / 32) + kb / 32] = sbits[0];
        else {
            T.scales[i * (K / 16) + kb / 16] = sbits[0];
            if (valid == 32) T.scales[i * (K / 16) + kb / 16 + 1] = sbits[1];
        }
    }
}

// Sum a per-thread accumulator over the CTA (shuffles, then the warps in a fixed order) and add it
// to *out with one set of atomics. Every thread of the CTA must call it.
__device__ void qt_stats_reduce(QuantStats a, QuantStats* out, QuantStats* red) {
    a.err2 = quant_warp_sum(a.err2); a.src2 = quant_warp_sum(a.src2); a.n = quant_warp_sum(a.n);
    a.flushed = quant_warp_sum(a.flushed); a.clipped = quant_warp_sum(a.clipped);
    a.zero_blocks = quant_warp_sum(a.zero_blocks); a.nonfinite = quant_warp_sum(a.nonfinite);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = a;
    __syncthreads();
    if (threadIdx.x == 0) {
        QuantStats s = red[0];
        for (int w = 1; w < (int)(blockDim.x >> 5); w++) quant_stats_add(&s, &red[w]);
        if (s.n) {
            atomicAdd(&out->err2, s.err2); atomicAdd(&out->src2, s.src2); atomicAdd(&out->n, s.n);
            if (s.flushed) atomicAdd(&out->flushed, s.flushed);
            if (s.clipped) atomicAdd(&out->clipped, s.clipped);
            if (s.zero_blocks) atomicAdd(&out->zero_blocks, s.zero_blocks);
        }
        if (s.nonfinite) atomicAdd(&out->nonfinite, s.nonfinite);
    }
    __syncthreads();
}

template <int MODE>
__global__ void __launch_bounds__(QT_THREADS) quant_tile_kernel(const floatX* __restrict__ in, int64_t rows,
                                                                 int64_t cols, int64_t ld, bool vec_in,
                                                                 const __grid_constant__ QuantTargets targets,
                                                                 int vec_out_mask, QuantStatsOut stats) {
    __shared__ __align__(16) uint16_t tile[QT_TILE][QT_STRIDE];
    __shared__ __align__(16) uint16_t otile[MODE == QMODE_APPLY ? QT_TILE : 1][QT_STRIDE];
    __shared__ QuantStats red[MODE == QMODE_STATS ? QT_THREADS / 32 : 1];
    const int64_t r0 = (int64_t)blockIdx.y * QT_TILE, c0 = (int64_t)blockIdx.x * QT_TILE;
    qt_load_tile(tile, in, rows, cols, ld, r0, c0, vec_in);
    __syncthreads();
    for (int k = 0; k < targets.n; k++) {
        const QuantTarget& T = targets.t[k];
        if constexpr (MODE == QMODE_STATS) {
            QuantStats acc;
            memset(&acc, 0, sizeof(acc));
            qt_process<MODE>(T, tile, otile, rows, cols, r0, c0, &acc);
            qt_stats_reduce(acc, stats.s[k], red);
            continue;
        } else {
            qt_process<MODE>(T, tile, otile, rows, cols, r0, c0, nullptr);
        }
        if (MODE == QMODE_APPLY && T.fake) {
            __syncthreads();
            qt_store_tile(otile, T.fake, rows, cols, T.ld_fake, r0, c0, (vec_out_mask >> k) & 1);
            __syncthreads();
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// launchers

static inline bool qt_aligned16(const void* p, int64_t ld, int64_t cols) {
    return ((uintptr_t)p % 16 == 0) && ld % 8 == 0 && cols % 8 == 0;
}

static inline void qt_check_targets(const QuantTarget* t, int n, int64_t rows, int64_t cols, int64_t ld) {
    fail_if(n < 1 || n > 2, "quantize_gpu: 1 or 2 targets per pass, got %d", n);
    fail_if(ld < cols, "quantize_gpu: ld %lld < cols %lld", (long long)ld, (long long)cols);
    for (int k = 0; k < n; k++) {
        quant_check_shape(&t[k].p, rows, cols, t[k].axis, "quantize_gpu");
        fail_if(t[k].p.hadamard > QUANT_GPU_MAX_HADAMARD, "quantize_gpu: Hadamard size %d is CPU-only; "
                "the GPU kernels support sizes up to %d", t[k].p.hadamard, QUANT_GPU_MAX_HADAMARD);
        fail_if(!t[k].amax || !t[k].scale_dec, "quantize_gpu: target %d needs device amax and scale_dec", k);
        fail_if(t[k].fake && t[k].ld_fake < cols, "quantize_gpu: fake output ld %lld < cols %lld",
                (long long)t[k].ld_fake, (long long)cols);
        fail_if(t[k].codes && ((uintptr_t)t[k].codes % 8), "quantize_gpu: codes must be 8-byte aligned");
        fail_if(!t[k].codes != !t[k].scales, "quantize_gpu: packed output needs both codes and scales");
        fail_if(t[k].codes && t[k].p.grid.e4m3, "quantize_gpu: the e4m3 grid has no packed 4-bit form (fake output only)");
        fail_if(t[k].fp8 != NULL, "quantize_gpu: FP8-folded output is made by the fast kernels only (llmc/fp4/quant/fold.cuh)");
    }
}

static inline QuantTargets qt_pack_targets(const QuantTarget* t, int n) {
    QuantTargets ts;
    memset(&ts, 0, sizeof(ts));
    for (int k = 0; k < n; k++) ts.t[k] = t[k];
    ts.n = n;
    return ts;
}

// Pass 1: the tensor amax of each target's (rotated) view into *t[k].amax. Targets that share the
// same rotation and axis-independent amax (no Hadamard) could share an amax pointer; each target
// still gets its own write.
static inline void quant_amax_gpu(const floatX* in, int64_t rows, int64_t cols, int64_t ld,
                                  const QuantTarget* t, int n, cudaStream_t stream) {
    qt_check_targets(t, n, rows, cols, ld);
    for (int k = 0; k < n; k++) cuda_check(cudaMemsetAsync(t[k].amax, 0, sizeof(float), stream));
    dim3 grid((unsigned)ceil_div(cols, QT_TILE), (unsigned)ceil_div(rows, QT_TILE));
    fail_if(grid.y > 65535, "quantize_gpu: %lld rows is too many for one launch", (long long)rows);
    quant_tile_kernel<QMODE_AMAX><<<grid, QT_THREADS, 0, stream>>>(in, rows, cols, ld, qt_aligned16(in, ld, cols),
                                                                    qt_pack_targets(t, n), 0, QuantStatsOut{});
    cuda_check_last();
}

// Pass 2: quantize with the amax already on the device (from quant_amax_gpu, or any producer).
static inline void quant_apply_gpu(const floatX* in, int64_t rows, int64_t cols, int64_t ld,
                                   const QuantTarget* t, int n, cudaStream_t stream) {
    qt_check_targets(t, n, rows, cols, ld);
    int vec_out = 0;
    for (int k = 0; k < n; k++)
        if (t[k].fake && qt_aligned16(t[k].fake, t[k].ld_fake, cols)) vec_out |= 1 << k;
    dim3 grid((unsigned)ceil_div(cols, QT_TILE), (unsigned)ceil_div(rows, QT_TILE));
    fail_if(grid.y > 65535, "quantize_gpu: %lld rows is too many for one launch", (long long)rows);
    quant_tile_kernel<QMODE_APPLY><<<grid, QT_THREADS, 0, stream>>>(in, rows, cols, ld, qt_aligned16(in, ld, cols),
                                                                     qt_pack_targets(t, n), vec_out, QuantStatsOut{});
    cuda_check_last();
}

// Both passes: 1 or 2 targets from one read of the input per pass.
static inline void quantize_gpu(const floatX* in, int64_t rows, int64_t cols, int64_t ld,
                                const QuantTarget* t, int n, cudaStream_t stream) {
    quant_amax_gpu(in, rows, cols, ld, t, n, stream);
    quant_apply_gpu(in, rows, cols, ld, t, n, stream);
}

// The common case in one call: fake-quantize a view along `axis` into `out` (same layout, ld_out).
// scalars: 2 device floats, [0] = amax, [1] = scale_dec.
static inline void quant_fake_gpu(const QuantParams* p, const floatX* in, int64_t rows, int64_t cols, int64_t ld,
                                  int axis, uint64_t key, floatX* out, int64_t ld_out, float* scalars,
                                  cudaStream_t stream) {
    QuantTarget t = quant_target_fake(p, axis, key, out, ld_out, scalars, scalars + 1);
    quantize_gpu(in, rows, cols, ld, &t, 1, stream);
}

// Packed -> BF16 in the view's layout (rows x cols, ld_out). with_tensor_scale = 0 reproduces the fake
// output exactly (code * block scale); 1 gives BF16(FP32(code * block scale) * *scale_dec).
__global__ void dequant_packed_kernel(const __grid_constant__ QuantParams p, const uint8_t* __restrict__ codes,
                                      const uint8_t* __restrict__ scales, const float* scale_dec, int64_t rows,
                                      int64_t cols, int axis, int with_tensor_scale, floatX* out, int64_t ld_out) {
    const int64_t M = axis ? rows : cols, K = axis ? cols : rows;
    const int64_t chunks = K / 16;
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= M * chunks) return;
    const int64_t i = t % M, kb = (t / M) * 16;     // i fastest: column-wise output is coalesced
    const float sd = with_tensor_scale ? *scale_dec : 1.0f;
    uint2 w = *(const uint2*)(codes + i * (K / 2) + kb / 2);
    float s = quant_packed_scale_value(&p, scales[i * (K / p.block_l) + kb / p.block_l]);
    uint16_t* dst = (uint16_t*)out;
#pragma unroll
    for (int e = 0; e < 16; e++) {
        uint8_t c = ((e < 8 ? w.x : w.y) >> (4 * (e & 7))) & 15;
        uint16_t o;
        if (s != s) o = BF16_CANONICAL_NAN;
        else {
            float y = grid_code_value(&p.grid, c) * s;
            if (with_tensor_scale) y = y * sd;
            o = bf16_bits_rne(y);
        }
        dst[axis ? i * ld_out + kb + e : (kb + e) * ld_out + i] = o;
    }
}

static inline void dequant_packed_gpu(const QuantParams* p, const uint8_t* codes, const uint8_t* scales,
                                      const float* scale_dec, int64_t rows, int64_t cols, int axis,
                                      int with_tensor_scale, floatX* out, int64_t ld_out, cudaStream_t stream) {
    quant_check_shape(p, rows, cols, axis, "dequant_packed_gpu");
    fail_if(p->grid.e4m3, "dequant_packed_gpu: the e4m3 grid has no packed 4-bit form");
    fail_if(ld_out < cols, "dequant_packed_gpu: ld_out %lld < cols %lld", (long long)ld_out, (long long)cols);
    fail_if((uintptr_t)codes % 8, "dequant_packed_gpu: codes must be 8-byte aligned");
    int64_t n = rows * cols / 16;
    dequant_packed_kernel<<<(unsigned)ceil_div(n, 256), 256, 0, stream>>>(*p, codes, scales, scale_dec, rows, cols,
                                                                          axis, with_tensor_scale, out, ld_out);
    cuda_check_last();
}

// ---------------------------------------------------------------------------------------------------
// diagnostics

// Statistics of quantizing the view with each target (QuantStats, fp4/quant_cpu.h): the same kernel
// code as quant_apply_gpu up to each element's code, so it describes exactly what the GEMM sees (the
// rotated operand with a Hadamard; the same SR bits for the same key). Needs each target's *amax on
// the device (from quant_amax_gpu, quantize_gpu, or a producer); derives S_dec from it and writes
// nothing but the statistics (not even *scale_dec). stats: n device QuantStats (stats[k] for t[k]),
// zeroed by the caller; they accumulate. One read of the input for both targets. Counts are exact
// (and equal quant_stats_cpu's); the double sums use atomics, so their last bits depend on the order.
static inline void quant_stats_gpu(const floatX* in, int64_t rows, int64_t cols, int64_t ld, const QuantTarget* t,
                                   int n, QuantStats* stats, cudaStream_t stream) {
    qt_check_targets(t, n, rows, cols, ld);
    QuantStatsOut so;
    memset(&so, 0, sizeof(so));
    for (int k = 0; k < n; k++) {
        fail_if(!stats, "quant_stats_gpu: needs a device QuantStats per target");
        so.s[k] = stats + k;
    }
    dim3 grid((unsigned)ceil_div(cols, QT_TILE), (unsigned)ceil_div(rows, QT_TILE));
    fail_if(grid.y > 65535, "quant_stats_gpu: %lld rows is too many for one launch", (long long)rows);
    quant_tile_kernel<QMODE_STATS><<<grid, QT_THREADS, 0, stream>>>(in, rows, cols, ld, qt_aligned16(in, ld, cols),
                                                                     qt_pack_targets(t, n), 0, so);
    cuda_check_last();
}
