// moe.cuh: the mixture-of-experts MLP's routing kernels (issue #51, docs/MOE.md), each the GPU side of a function of
// the reference twin llmc/model/moe.h, which is the spec: the same operations in the same order, so that a kernel
// gives the twin's bits where moe.h says "exact" (and "exact in practice" for its double exponentials).
// defines: MOE_MAX_EXPERTS, MOE_MAX_TOP_K, moe_route_gpu(), moe_permute_scratch_bytes(), moe_permute_gpu(),
//          moe_gather_gpu(), moe_combine_gpu(), moe_combine_backward_gpu(), moe_route_backward_gpu(),
//          moe_loss_scratch_bytes(), moe_aux_loss_gpu(), moe_z_loss_gpu(), moe_bias_update_gpu()
// Every buffer is a device buffer of the caller's; the launchers check shapes on the host with the twin's messages
// and enqueue on the stream (no synchronization). Tensors of activations (x, xp, yp, base, out, dout, dyp) are BF16,
// logits, weights, dweights, dlogits, bias and losses FP32, ids and the permutation int.
// Determinism: no float atomics, no atomics at all. The permutation counts each block's slots with warp votes
// (__match_any_sync) and places them by a stable scan in slot order; sums over channels or tokens run in a fixed
// order (per-lane chains, then a fixed butterfly or tree, then blocks in index order), so a rerun gives the same bits.
// Where the twin's arithmetic could be contracted by nvcc (a*b + c -> fma), the kernels use __fmul_rn/__fadd_rn:
// the host twin (g++, no -mfma) rounds each operation.
#pragma once
#include "llmc/base/cuda_common.cuh"
#include "llmc/base/vec128.cuh"   // bf16x8, warp_sum, warp_max
#include "llmc/model/moe.h"      // the twin: moe_ranks_before, moe_exp, moe_sigmoid, moe_select_key, moe_prob_stats,
                                 // moe_prob, moe_bf16_rne, moe_check_shape, moe_rows_bound, MoePerm, MoeScore

#define MOE_MAX_EXPERTS 256                           // one warp holds a token's keys: 8 per lane
#define MOE_MAX_TOP_K 8                               // slot j's id and weight live in lane j
#define MOE_KEYS_PER_LANE (MOE_MAX_EXPERTS / 32)
#define MOE_THREADS 256                               // every kernel's block; the permutation's chunk of slots
#define MOE_WARPS (MOE_THREADS / 32)

// FP32 -> BF16 by the twin's rounding (moe_bf16_rne: NaN keeps its payload, quieted; __float2bfloat16_rn does not
// promise that).
__device__ __forceinline__ floatX moe_to_bf16(float x) {
    return __ushort_as_bfloat16((unsigned short)(__float_as_uint(moe_bf16_rne(x)) >> 16));
}

// V consecutive BF16 values of a row as floats, and back: V = 8 moves 16 bytes (C % 8 == 0, aligned rows), V = 1 one.
template <int V> __device__ __forceinline__ void moe_load(const floatX* p, float f[V]) {
    if constexpr (V == 8) bf16x8_to_float(load_bf16x8(p), f);
    else f[0] = __bfloat162float(p[0]);
}
template <int V> __device__ __forceinline__ void moe_store(floatX* p, const float f[V]) {
    if constexpr (V == 8) {
        bf16x8 r;
        floatX* h = reinterpret_cast<floatX*>(&r);
        #pragma unroll
        for (int v = 0; v < 8; v++) h[v] = moe_to_bf16(f[v]);
        store_bf16x8(p, r);
    } else {
        p[0] = moe_to_bf16(f[0]);
    }
}

// --- routing -------------------------------------------------------------------------------------------------------

// One warp per token. Lane l holds the keys of experts l, l + 32, ... (moe_select_key). Each of the k rounds takes,
// in every lane, its best expert not yet chosen, then the warp's best by a butterfly under moe_ranks_before: that
// order is total on (key, expert) pairs (distinct experts; NaN after every number), so the winner does not depend on
// the reduction's order and is the twin's moe_select_topk's. Lane j keeps slot j's expert; the weights follow the
// twin's formulas with its exponentials, the sum S over slots in slot order (every lane adds the same k values in
// the same order), one division.
template <MoeScore KIND>
__global__ void __launch_bounds__(MOE_THREADS)
moe_route_kernel(const float* logits, const float* bias, int N, int E, int k, int* ids, float* weights) {
    const int t = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32), lane = threadIdx.x % 32;
    if (t >= N) return;                                  // the whole warp: blockDim is a multiple of 32
    const float* l = logits + (size_t)t * E;
    float key[MOE_KEYS_PER_LANE];
    float m = -INFINITY;                                 // the largest logit, NaN skipped (fmaxf: order-free)
    #pragma unroll
    for (int q = 0; q < MOE_KEYS_PER_LANE; q++) {
        const int i = lane + 32 * q;
        key[q] = 0.0f;
        if (i < E) {
            key[q] = moe_select_key(KIND, l[i], bias, i);
            m = fmaxf(m, l[i]);
        }
    }
    m = warp_max(m);
    unsigned taken = 0;                                  // bit q: expert lane + 32 q is chosen
    int mine = -1;                                       // lane j < k: the expert of slot j
    for (int j = 0; j < k; j++) {
        int best = -1;
        float best_key = 0.0f;
        #pragma unroll
        for (int q = 0; q < MOE_KEYS_PER_LANE; q++) {
            const int i = lane + 32 * q;
            if (i < E && !((taken >> q) & 1u) && (best < 0 || moe_ranks_before(key[q], i, best_key, best))) {
                best = i;
                best_key = key[q];
            }
        }
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const int other = __shfl_xor_sync(0xFFFFFFFFu, best, o);
            const float other_key = __shfl_xor_sync(0xFFFFFFFFu, best_key, o);
            if (other >= 0 && (best < 0 || moe_ranks_before(other_key, other, best_key, best))) {
                best = other;
                best_key = other_key;
            }
        }
        if (best % 32 == lane) taken |= 1u << (best / 32);
        if (lane == j) mine = best;
    }
    float v = 0.0f;                                      // slot `lane`'s unnormalized weight
    if (lane < k) v = KIND == MOE_SCORE_SOFTMAX ? moe_exp(l[mine] - m) : moe_sigmoid(l[mine]);
    float S = 0.0f;
    for (int j = 0; j < k; j++) S += __shfl_sync(0xFFFFFFFFu, v, j);
    if (lane < k) {
        ids[(size_t)t * k + lane] = mine;
        weights[(size_t)t * k + lane] = v / S;
    }
}

static void moe_check_route_shape(const char* who, int N, int E, int k) {
    moe_check_shape(who, N, E, k, 1);
    fail_if(E > MOE_MAX_EXPERTS, "%s: %d experts; the GPU routing takes at most %d (--moe-experts)", who, E,
            MOE_MAX_EXPERTS);
    fail_if(k > MOE_MAX_TOP_K, "%s: top-k %d; the GPU routing takes at most %d (--moe-top-k)", who, k, MOE_MAX_TOP_K);
}

// moe_route (either family; bias [E] or NULL, ignored by softmax): logits [N][E] -> ids [N][k], weights [N][k].
static void moe_route_gpu(MoeScore kind, const float* logits, const float* bias, int N, int E, int k, int* ids,
                          float* weights, cudaStream_t s) {
    fail_if((int)kind < 0 || kind >= MOE_SCORE_COUNT, "moe_route_gpu: unknown scoring %d", (int)kind);
    moe_check_route_shape("moe_route_gpu", N, E, k);
    const unsigned blocks = (unsigned)ceil_div((int64_t)N * 32, MOE_THREADS);
    if (kind == MOE_SCORE_SOFTMAX)
        moe_route_kernel<MOE_SCORE_SOFTMAX><<<blocks, MOE_THREADS, 0, s>>>(logits, NULL, N, E, k, ids, weights);
    else
        moe_route_kernel<MOE_SCORE_SIGMOID><<<blocks, MOE_THREADS, 0, s>>>(logits, bias, N, E, k, ids, weights);
    cuda_check_last();
}

// --- permutation (dropless) ----------------------------------------------------------------------------------------

// The token slots s = t k + j, in chunks of MOE_THREADS (one block each). Within a warp, __match_any_sync groups the
// lanes of one expert; the group's lowest lane writes its size into the warp's histogram (one writer per entry: no
// atomics). Both passes rebuild the same histograms.
__device__ __forceinline__ void moe_warp_histogram(int e, int (*hist)[MOE_MAX_EXPERTS], int E, unsigned* group) {
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    for (int i = threadIdx.x; i < MOE_WARPS * MOE_MAX_EXPERTS; i += blockDim.x) (&hist[0][0])[i] = 0;
    __syncthreads();
    const unsigned mask = __match_any_sync(0xFFFFFFFFu, e);
    if (e >= 0 && e < E && lane == __ffs(mask) - 1) hist[w][e] = __popc(mask);
    *group = mask;
    __syncthreads();
}

// Pass 1: chunk_counts[b][e] = expert e's slots in chunk b.
__global__ void __launch_bounds__(MOE_THREADS)
moe_count_kernel(const int* ids, int NK, int E, int* chunk_counts) {
    __shared__ int hist[MOE_WARPS][MOE_MAX_EXPERTS];
    const int s = blockIdx.x * MOE_THREADS + threadIdx.x;
    unsigned group;
    moe_warp_histogram(s < NK ? ids[s] : -1, hist, E, &group);
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        int sum = 0;
        for (int w = 0; w < MOE_WARPS; w++) sum += hist[w][e];
        chunk_counts[(size_t)blockIdx.x * E + e] = sum;
    }
}

// Pass 2 (one block): per expert, its total (counts) and each chunk's start within it (chunk_counts becomes the
// exclusive scan over chunks, in chunk order); then offsets, each count rounded up to `multiple`, scanned in expert
// order by one thread (E <= 256).
__global__ void __launch_bounds__(MOE_THREADS)
moe_offsets_kernel(int* chunk_counts, int chunks, int E, int multiple, int* counts, int* offsets) {
    __shared__ int padded[MOE_MAX_EXPERTS];
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        int run = 0;
        for (int b = 0; b < chunks; b++) {
            const int c = chunk_counts[(size_t)b * E + e];
            chunk_counts[(size_t)b * E + e] = run;
            run += c;
        }
        counts[e] = run;
        padded[e] = (run + multiple - 1) / multiple * multiple;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int o = 0;
        offsets[0] = 0;
        for (int e = 0; e < E; e++) offsets[e + 1] = o += padded[e];
    }
}

// Pass 3: slot s of expert e goes to row offsets[e] + (its chunk's start in e) + (e's slots in earlier warps of the
// chunk) + (e's slots in earlier lanes of its warp): the twin's order, by slot index within an expert.
__global__ void __launch_bounds__(MOE_THREADS)
moe_scatter_kernel(const int* ids, int NK, int E, const int* chunk_start, const int* offsets, int* row_of,
                   int* slot_of_row) {
    __shared__ int hist[MOE_WARPS][MOE_MAX_EXPERTS];
    const int s = blockIdx.x * MOE_THREADS + threadIdx.x;
    const int e = s < NK ? ids[s] : -1;
    unsigned group;
    moe_warp_histogram(e, hist, E, &group);
    if (e < 0 || e >= E) return;
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    int r = offsets[e] + chunk_start[(size_t)blockIdx.x * E + e] + __popc(group & ((1u << lane) - 1u));
    for (int v = 0; v < w; v++) r += hist[v][e];
    row_of[s] = r;
    slot_of_row[r] = s;
}

// The scratch moe_permute_gpu needs: one count per expert per chunk of MOE_THREADS slots (nondecreasing in each
// argument).
static size_t moe_permute_scratch_bytes(int N, int E, int k) {
    return (size_t)ceil_div((int64_t)N * k, MOE_THREADS) * E * sizeof(int);
}

// moe_permute: ids [N][k] (each token's experts distinct and in [0, E), as moe_route_gpu writes them; not checked
// here) -> perm.counts [E], perm.offsets [E+1], perm.row_of [N*k], perm.slot_of_row [rows_cap] (-1 for pad rows and
// rows past offsets[E]). rows_cap must be at least moe_rows_bound (the rows used, offsets[E], are known only on the
// device). scratch: moe_permute_scratch_bytes.
static void moe_permute_gpu(const int* ids, int N, int E, int k, int multiple, MoePerm perm, int rows_cap,
                            void* scratch, cudaStream_t s) {
    moe_check_shape("moe_permute_gpu", N, E, k, multiple);
    fail_if(E > MOE_MAX_EXPERTS, "moe_permute_gpu: %d experts; the GPU permutation takes at most %d (--moe-experts)",
            E, MOE_MAX_EXPERTS);
    fail_if(!ids || !perm.counts || !perm.offsets || !perm.row_of || !perm.slot_of_row || !scratch,
            "moe_permute_gpu: NULL buffer");
    fail_if(rows_cap < moe_rows_bound(N, E, k, multiple), "moe_permute_gpu: rows_cap %d is below moe_rows_bound's "
            "%lld (%d tokens x top-k %d, padded per expert to %d); size the buffers with moe_rows_bound", rows_cap,
            (long long)moe_rows_bound(N, E, k, multiple), N, k, multiple);
    const int NK = N * k, chunks = (int)ceil_div(NK, MOE_THREADS);
    int* chunk_counts = (int*)scratch;
    cuda_check(cudaMemsetAsync(perm.slot_of_row, 0xFF, (size_t)rows_cap * sizeof(int), s));   // -1
    moe_count_kernel<<<chunks, MOE_THREADS, 0, s>>>(ids, NK, E, chunk_counts);
    cuda_check_last();
    moe_offsets_kernel<<<1, MOE_THREADS, 0, s>>>(chunk_counts, chunks, E, multiple, perm.counts, perm.offsets);
    cuda_check_last();
    moe_scatter_kernel<<<chunks, MOE_THREADS, 0, s>>>(ids, NK, E, chunk_counts, perm.offsets, perm.row_of,
                                                      perm.slot_of_row);
    cuda_check_last();
}

// --- gather, combine and their backward ----------------------------------------------------------------------------

// One thread per V channels of a row.
template <int V>
__global__ void __launch_bounds__(MOE_THREADS)
moe_gather_kernel(const floatX* x, int C, int k, const int* slot_of_row, size_t chunks, floatX* xp) {
    const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= chunks) return;
    const size_t r = i / (C / V), c = (i % (C / V)) * V;
    const int slot = slot_of_row[r];
    float f[V];
    if (slot < 0) {
        #pragma unroll
        for (int v = 0; v < V; v++) f[v] = 0.0f;
    } else {
        moe_load<V>(x + (size_t)(slot / k) * C + c, f);
    }
    moe_store<V>(xp + r * C + c, f);                     // BF16 values: the round trip is exact
}

// combine (weights NULL: 1, the gather's backward), per element: acc = base (or 0); acc = fmaf(w_j, y_j, acc) for
// j = 0 .. k-1; out = BF16(acc).
template <int V>
__global__ void __launch_bounds__(MOE_THREADS)
moe_combine_kernel(const floatX* yp, const int* row_of, const float* weights, const floatX* base, int C, int k,
                   size_t chunks, floatX* out) {
    const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= chunks) return;
    const size_t t = i / (C / V), c = (i % (C / V)) * V;
    float acc[V];
    if (base) moe_load<V>(base + t * C + c, acc);
    else {
        #pragma unroll
        for (int v = 0; v < V; v++) acc[v] = 0.0f;
    }
    for (int j = 0; j < k; j++) {
        const float w = weights ? weights[t * k + j] : 1.0f;
        float y[V];
        moe_load<V>(yp + (size_t)row_of[t * k + j] * C + c, y);
        #pragma unroll
        for (int v = 0; v < V; v++) acc[v] = fmaf(w, y[v], acc[v]);
    }
    moe_store<V>(out + t * C + c, acc);
}

// The combine's backward into the experts' rows: dyp = BF16(w * dout) in a slot's row, zero in a pad row.
template <int V>
__global__ void __launch_bounds__(MOE_THREADS)
moe_combine_backward_rows_kernel(const floatX* dout, const int* slot_of_row, const float* weights, int C, int k,
                                 size_t chunks, floatX* dyp) {
    const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= chunks) return;
    const size_t r = i / (C / V), c = (i % (C / V)) * V;
    const int slot = slot_of_row[r];
    float f[V];
    if (slot < 0) {
        #pragma unroll
        for (int v = 0; v < V; v++) f[v] = 0.0f;
    } else {
        const float w = weights[slot];
        moe_load<V>(dout + (size_t)(slot / k) * C + c, f);
        #pragma unroll
        for (int v = 0; v < V; v++) f[v] = __fmul_rn(w, f[v]);
    }
    moe_store<V>(dyp + r * C + c, f);
}

// dweights[s] = <dout[t], yp[row_of[s]]>: one warp per slot; lane l sums channels l, l + 32, ... with fmaf in
// channel order, then the warp's fixed butterfly.
__global__ void __launch_bounds__(MOE_THREADS)
moe_dweights_kernel(const floatX* dout, const floatX* yp, const int* row_of, int NK, int C, int k, float* dweights) {
    const int slot = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32), lane = threadIdx.x % 32;
    if (slot >= NK) return;
    const floatX* d = dout + (size_t)(slot / k) * C;
    const floatX* y = yp + (size_t)row_of[slot] * C;
    float acc = 0.0f;
    for (int c = lane; c < C; c += 32) acc = fmaf(__bfloat162float(d[c]), __bfloat162float(y[c]), acc);
    acc = warp_sum(acc);
    if (lane == 0) dweights[slot] = acc;
}

// V = 8 when every row starts 16-byte aligned (C % 8 == 0 and each base pointer aligned), else V = 1.
static int moe_vec_width(int C, const void* const* ptrs, int n) {
    if (C % 8 != 0) return 1;
    for (int i = 0; i < n; i++)
        if (ptrs[i] && (uintptr_t)ptrs[i] % 16 != 0) return 1;
    return 8;
}
static unsigned moe_blocks(size_t threads) { return (unsigned)ceil_div((int64_t)threads, MOE_THREADS); }

// moe_gather: x [N][C] -> xp [rows][C], row r token slot_of_row[r] / k's row, pad rows (slot -1) zero. rows: any
// count up to the permutation's rows_cap (rows_cap itself when offsets[E] stays on the device).
static void moe_gather_gpu(const floatX* x, int N, int C, int k, const int* slot_of_row, int rows, floatX* xp,
                           cudaStream_t s) {
    fail_if(N < 1 || C < 1 || k < 1 || rows < 0, "moe_gather_gpu: N %d, C %d, k %d, rows %d", N, C, k, rows);
    fail_if(!x || !slot_of_row || !xp, "moe_gather_gpu: NULL buffer");
    if (rows == 0) return;
    const void* ptrs[2] = {x, xp};
    if (moe_vec_width(C, ptrs, 2) == 8) {
        const size_t chunks = (size_t)rows * (C / 8);
        moe_gather_kernel<8><<<moe_blocks(chunks), MOE_THREADS, 0, s>>>(x, C, k, slot_of_row, chunks, xp);
    } else {
        const size_t chunks = (size_t)rows * C;
        moe_gather_kernel<1><<<moe_blocks(chunks), MOE_THREADS, 0, s>>>(x, C, k, slot_of_row, chunks, xp);
    }
    cuda_check_last();
}

// moe_combine: yp [rows][C] (rows of the token slots row_of [N*k]), weights [N][k] (NULL: 1), base [N][C] (NULL: 0)
// -> out [N][C], rounded once to BF16. With weights NULL and base the shared experts' dX, it is the gather's
// backward (dx = base + the sum of a token's k rows of dxp, in slot order).
static void moe_combine_gpu(const floatX* yp, const int* row_of, const float* weights, const floatX* base, int N,
                            int k, int C, floatX* out, cudaStream_t s) {
    fail_if(N < 1 || C < 1 || k < 1, "moe_combine_gpu: N %d, C %d, k %d", N, C, k);
    fail_if(!yp || !row_of || !out, "moe_combine_gpu: NULL buffer");
    const void* ptrs[3] = {yp, base, out};
    if (moe_vec_width(C, ptrs, 3) == 8) {
        const size_t chunks = (size_t)N * (C / 8);
        moe_combine_kernel<8><<<moe_blocks(chunks), MOE_THREADS, 0, s>>>(yp, row_of, weights, base, C, k, chunks, out);
    } else {
        const size_t chunks = (size_t)N * C;
        moe_combine_kernel<1><<<moe_blocks(chunks), MOE_THREADS, 0, s>>>(yp, row_of, weights, base, C, k, chunks, out);
    }
    cuda_check_last();
}

// moe_combine_backward: dout [N][C] and the forward's yp, weights -> dyp [rows][C] (BF16(w dout) in each slot's row,
// zero in pad rows: every row < rows is written) and dweights [N][k] (NULL: not wanted; FP32 dot products, a
// tolerance against the twin's double sums). perm: row_of and slot_of_row of moe_permute_gpu.
static void moe_combine_backward_gpu(const floatX* dout, const floatX* yp, MoePerm perm, const float* weights,
                                     int rows, int N, int k, int C, floatX* dyp, float* dweights, cudaStream_t s) {
    fail_if(N < 1 || C < 1 || k < 1 || rows < 0, "moe_combine_backward_gpu: N %d, C %d, k %d, rows %d", N, C, k,
            rows);
    fail_if(!dout || !yp || !perm.row_of || !perm.slot_of_row || !weights || !dyp,
            "moe_combine_backward_gpu: NULL buffer");
    const void* ptrs[2] = {dout, dyp};
    if (rows > 0) {
        if (moe_vec_width(C, ptrs, 2) == 8) {
            const size_t chunks = (size_t)rows * (C / 8);
            moe_combine_backward_rows_kernel<8><<<moe_blocks(chunks), MOE_THREADS, 0, s>>>(
                dout, perm.slot_of_row, weights, C, k, chunks, dyp);
        } else {
            const size_t chunks = (size_t)rows * C;
            moe_combine_backward_rows_kernel<1><<<moe_blocks(chunks), MOE_THREADS, 0, s>>>(
                dout, perm.slot_of_row, weights, C, k, chunks, dyp);
        }
        cuda_check_last();
    }
    if (dweights) {
        moe_dweights_kernel<<<moe_blocks((size_t)N * k * 32), MOE_THREADS, 0, s>>>(dout, yp, perm.row_of, N * k, C,
                                                                                  k, dweights);
        cuda_check_last();
    }
}

// --- the routing weights' gradient ---------------------------------------------------------------------------------

// One thread per token: the twin's loop, operation for operation (c by fmaf in slot order; each product and
// difference rounded; one add into dlogits). A token's experts are distinct: no two threads write one element.
template <MoeScore KIND>
__global__ void __launch_bounds__(MOE_THREADS)
moe_route_backward_kernel(const float* logits, const int* ids, const float* weights, const float* dweights, int N,
                          int E, int k, float* dlogits) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= N) return;
    const int* id = ids + (size_t)t * k;
    const float* w = weights + (size_t)t * k;
    const float* dw = dweights + (size_t)t * k;
    float c = 0.0f;
    for (int j = 0; j < k; j++) c = fmaf(w[j], dw[j], c);
    for (int j = 0; j < k; j++) {
        float g = w[j];
        const size_t at = (size_t)t * E + id[j];
        if (KIND == MOE_SCORE_SIGMOID) g = __fmul_rn(g, __fsub_rn(1.0f, moe_sigmoid(logits[at])));
        dlogits[at] = __fadd_rn(dlogits[at], __fmul_rn(g, __fsub_rn(dw[j], c)));
    }
}

// moe_route_backward: dweights [N][k] -> ADDED into dlogits [N][E] at the chosen experts (ids, weights of the
// forward; logits read by the sigmoid family).
static void moe_route_backward_gpu(MoeScore kind, const float* logits, const int* ids, const float* weights,
                                   const float* dweights, int N, int E, int k, float* dlogits, cudaStream_t s) {
    moe_check_shape("moe_route_backward_gpu", N, E, k, 1);
    fail_if((int)kind < 0 || kind >= MOE_SCORE_COUNT, "moe_route_backward_gpu: unknown scoring %d", (int)kind);
    fail_if(!logits || !ids || !weights || !dweights || !dlogits, "moe_route_backward_gpu: NULL buffer");
    if (kind == MOE_SCORE_SOFTMAX)
        moe_route_backward_kernel<MOE_SCORE_SOFTMAX><<<moe_blocks(N), MOE_THREADS, 0, s>>>(logits, ids, weights,
                                                                                          dweights, N, E, k, dlogits);
    else
        moe_route_backward_kernel<MOE_SCORE_SIGMOID><<<moe_blocks(N), MOE_THREADS, 0, s>>>(logits, ids, weights,
                                                                                          dweights, N, E, k, dlogits);
    cuda_check_last();
}

// --- losses --------------------------------------------------------------------------------------------------------

// One thread per token, with the twin's per-token arithmetic (moe_prob_stats, moe_prob; doubles rounded operation by
// operation): each token's term and each gradient element are the twin's in practice. The loss sums the tokens'
// terms in double: a fixed tree per block, then the blocks in order (the twin: token order; a tolerance).
__device__ __forceinline__ void moe_block_sum_double(double v, double* partial) {
    __shared__ double part[MOE_THREADS];
    part[threadIdx.x] = v;
    __syncthreads();
    for (int h = MOE_THREADS / 2; h > 0; h >>= 1) {
        if ((int)threadIdx.x < h) part[threadIdx.x] = __dadd_rn(part[threadIdx.x], part[threadIdx.x + h]);
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = part[0];
}

template <MoeScore KIND>
__global__ void __launch_bounds__(MOE_THREADS)
moe_aux_loss_kernel(const float* logits, const int* counts, int N, int E, double nk, double scale, float* dlogits,
                    double* partial) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    double q = 0.0;
    if (t < N) {
        const float* l = logits + (size_t)t * E;
        float m, Z;
        moe_prob_stats(KIND, l, E, &m, &Z);
        for (int e = 0; e < E; e++) q = __dadd_rn(q, __dmul_rn(counts[e] / nk, (double)moe_prob(KIND, l[e], m, Z)));
        if (dlogits) {
            for (int i = 0; i < E; i++) {
                double d;
                if (KIND == MOE_SCORE_SOFTMAX) d = moe_prob(KIND, l[i], m, Z);
                else { const double sg = moe_sigmoid(l[i]); d = __dmul_rn(sg, 1.0 - sg) / Z; }
                const size_t at = (size_t)t * E + i;
                dlogits[at] = __fadd_rn(dlogits[at], (float)__dmul_rn(__dmul_rn(scale, d), counts[i] / nk - q));
            }
        }
    }
    moe_block_sum_double(q, partial);
}

__global__ void __launch_bounds__(MOE_THREADS)
moe_z_loss_kernel(const float* logits, int N, int E, double grad_scale, float* dlogits, double* partial) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    double sq = 0.0;
    if (t < N) {
        const float* l = logits + (size_t)t * E;
        float m, Z;
        moe_prob_stats(MOE_SCORE_SOFTMAX, l, E, &m, &Z);
        const double lse = (double)m + log((double)Z);
        sq = __dmul_rn(lse, lse);
        if (dlogits) {
            const double g = __dmul_rn(grad_scale, lse);
            for (int i = 0; i < E; i++) {
                const size_t at = (size_t)t * E + i;
                dlogits[at] = __fadd_rn(dlogits[at],
                                        (float)__dmul_rn(g, (double)moe_prob(MOE_SCORE_SOFTMAX, l[i], m, Z)));
            }
        }
    }
    moe_block_sum_double(sq, partial);
}

// *loss = (float)(mul * (the partials summed in block order) / div): one thread.
__global__ void moe_loss_finish_kernel(const double* partial, int blocks, double mul, double div, float* loss) {
    double sum = 0.0;
    for (int b = 0; b < blocks; b++) sum += partial[b];
    *loss = (float)(__dmul_rn(mul, sum) / div);
}

// The scratch moe_aux_loss_gpu and moe_z_loss_gpu need: one double per block of tokens.
static size_t moe_loss_scratch_bytes(int N) { return (size_t)ceil_div(N, MOE_THREADS) * sizeof(double); }

// moe_aux_loss: logits [N][E], counts [E] (moe_permute_gpu's; they must sum to N k, not checked here) -> *loss
// (device float) = alpha E / N sum_t q_t; with dlogits non-NULL, ADDS the gradient.
static void moe_aux_loss_gpu(MoeScore kind, const float* logits, const int* counts, int N, int E, int k, float alpha,
                             float* dlogits, float* loss, void* scratch, cudaStream_t s) {
    moe_check_shape("moe_aux_loss_gpu", N, E, k, 1);
    fail_if((int)kind < 0 || kind >= MOE_SCORE_COUNT, "moe_aux_loss_gpu: unknown scoring %d", (int)kind);
    fail_if(!logits || !counts || !loss || !scratch, "moe_aux_loss_gpu: NULL buffer");
    const double nk = (double)N * k, scale = (double)alpha * E / N;
    const unsigned blocks = moe_blocks(N);
    double* partial = (double*)scratch;
    if (kind == MOE_SCORE_SOFTMAX)
        moe_aux_loss_kernel<MOE_SCORE_SOFTMAX><<<blocks, MOE_THREADS, 0, s>>>(logits, counts, N, E, nk, scale,
                                                                            dlogits, partial);
    else
        moe_aux_loss_kernel<MOE_SCORE_SIGMOID><<<blocks, MOE_THREADS, 0, s>>>(logits, counts, N, E, nk, scale,
                                                                            dlogits, partial);
    cuda_check_last();
    moe_loss_finish_kernel<<<1, 1, 0, s>>>(partial, (int)blocks, scale, 1.0, loss);
    cuda_check_last();
}

// moe_z_loss: logits [N][E] -> *loss (device float) = beta / N sum_t lse_t^2; with dlogits non-NULL, ADDS
// 2 beta / N lse_t softmax(l_t).
static void moe_z_loss_gpu(const float* logits, int N, int E, float beta, float* dlogits, float* loss, void* scratch,
                           cudaStream_t s) {
    moe_check_shape("moe_z_loss_gpu", N, E, 1, 1);
    fail_if(!logits || !loss || !scratch, "moe_z_loss_gpu: NULL buffer");
    const unsigned blocks = moe_blocks(N);
    double* partial = (double*)scratch;
    moe_z_loss_kernel<<<blocks, MOE_THREADS, 0, s>>>(logits, N, E, 2.0 * beta / N, dlogits, partial);
    cuda_check_last();
    moe_loss_finish_kernel<<<1, 1, 0, s>>>(partial, (int)blocks, (double)beta, (double)N, loss);
    cuda_check_last();
}

// --- auxiliary-loss-free balancing ---------------------------------------------------------------------------------

// One block: every thread sums the loads (integers: any order), then its experts compare E load to the total.
__global__ void __launch_bounds__(MOE_THREADS) moe_bias_update_kernel(const int64_t* load, int E, float gamma,
                                                                      float* bias) {
    int64_t total = 0;
    for (int e = 0; e < E; e++) total += load[e];
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        const int64_t el = (int64_t)E * load[e];
        if (el > total) bias[e] = __fsub_rn(bias[e], gamma);
        else if (el < total) bias[e] = __fadd_rn(bias[e], gamma);
    }
}

// moe_bias_update: load [E] (device int64, the step's assignments per expert; non-negative and at most
// INT64_MAX / 1024 each, not checked here) -> bias [E] moved by gamma toward balance (exact).
static void moe_bias_update_gpu(const int64_t* load, int E, float gamma, float* bias, cudaStream_t s) {
    fail_if(E < 1 || !load || !bias, "moe_bias_update_gpu: E %d or a NULL buffer", E);
    fail_if(!(gamma >= 0.0f) || isinf(gamma),
            "moe_bias_update_gpu: gamma %g must be finite and >= 0 (--moe-bias-rate)", (double)gamma);
    moe_bias_update_kernel<<<1, MOE_THREADS, 0, s>>>(load, E, gamma, bias);
    cuda_check_last();
}
