// encoder.cuh: token + position embedding, forward and backward.
// defines: encoder_forward(), EncoderBackward, encoder_backward_init(), encoder_backward_free(),
//          encoder_backward()
// Backward is deterministic without atomics: the host groups the positions of each token (the
// token ids are on the host anyway), so every row of dwte is summed by one warp in a fixed order.
// A token seen more than ENC_CHUNK times is split into chunks summed side by side into a scratch
// row each, and a second kernel adds those rows in order; frequent tokens therefore do not
// serialize the whole step behind one warp.
#pragma once
#include "llmc/base/cuda_common.cuh"
#include "llmc/base/vec128.cuh"

// ---------------------------------------------------------------------------------------------
// forward: out[b,t,:] = wte[inp[b,t],:] + wpe[t,:], summed in fp32 and rounded once (wpe NULL: a model without
// learned positions, Llama's; out = wte's row). One thread per 8 channels.

#define ENC_THREADS 256

__global__ void __launch_bounds__(ENC_THREADS)
encoder_forward_kernel(floatX* out, const int* inp, const floatX* wte, const floatX* wpe, int N, int T, int C) {
    int cv = C / 8;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)N * cv) return;
    int row = (int)(i / cv), c = (int)(i % cv) * 8, t = row % T;
    int token = inp[row];
    float a[8], p[8];
    bf16x8_to_float(load_bf16x8(wte + (size_t)token * C + c), a);
    if (wpe) {
        bf16x8_to_float(load_bf16x8(wpe + (size_t)t * C + c), p);
        #pragma unroll
        for (int k = 0; k < 8; k++) a[k] += p[k];
    }
    store_bf16x8(out + (size_t)row * C + c, float_to_bf16x8(a));
}

void encoder_forward(floatX* out, const int* inp, const floatX* wte, const floatX* wpe, int B, int T, int C, cudaStream_t s) {
    fail_if(C % 8 != 0, "encoder_forward: C=%d must be a multiple of 8", C);
    require_aligned16("encoder_forward", out);
    require_aligned16("encoder_forward", wte);
    require_aligned16("encoder_forward", wpe);
    if (B * T <= 0) return;
    int64_t threads = (int64_t)B * T * (C / 8);
    encoder_forward_kernel<<<(unsigned)ceil_div(threads, ENC_THREADS), ENC_THREADS, 0, s>>>(out, inp, wte, wpe, B * T, T, C);
    cuda_check_last();
}

// ---------------------------------------------------------------------------------------------
// backward workspace.
//   items:   (int4 each) one per (token, chunk of at most ENC_CHUNK of its positions): {token, start into
//            order[], count, partial slot or -1}. A token with a single chunk adds straight into
//            dwte; the chunks of a longer token each write one fp32 scratch row.
//   order:   the N positions sorted by token, ascending position within a token (counting sort).
//   merges:  (int4 each) one per split token: {token, first slot, number of slots}.
// All three are built in one pinned buffer and copied to the same layout on the device. An event guards it:
// the next call waits for the previous copy before overwriting it.

#define ENC_CHUNK 32
#define ENC_WARPS 4     // warps per block in the backward kernels; each warp has its own work

typedef struct {
    int max_N, max_C;
    int max_slots;          // scratch rows: a split token of n > ENC_CHUNK positions needs
                            // ceil(n / ENC_CHUNK) < 2n / ENC_CHUNK rows, so 2N / ENC_CHUNK suffice
    int* host;              // pinned: items (4 ints each, up to N), merges (4 ints each, up to
                            // N / ENC_CHUNK + 1), order (N)
    int* dev;               // the same layout on the device
    float* partials;        // (max_slots, max_C) fp32
    int* counts;            // host: per-token counts, then offsets (grown on demand)
    int counts_cap;
    cudaEvent_t copied;
} EncoderBackward;

static size_t encoder_backward_ints(int N) {
    return (size_t)4 * N + (size_t)4 * (N / ENC_CHUNK + 1) + N;
}

// B, T, C are the largest shapes the workspace will be used with.
void encoder_backward_init(EncoderBackward* eb, int B, int T, int C) {
    memset(eb, 0, sizeof(*eb));
    eb->max_N = B * T;
    eb->max_C = C;
    eb->max_slots = 2 * eb->max_N / ENC_CHUNK + 1;
    size_t bytes = encoder_backward_ints(eb->max_N) * sizeof(int);
    cuda_check(cudaMallocHost((void**)&eb->host, bytes));
    cuda_malloc(&eb->dev, bytes);
    cuda_malloc(&eb->partials, (size_t)eb->max_slots * C * sizeof(float));
    cuda_check(cudaEventCreateWithFlags(&eb->copied, cudaEventDisableTiming));
}

void encoder_backward_free(EncoderBackward* eb) {
    cuda_check(cudaEventSynchronize(eb->copied));
    cuda_check(cudaFreeHost(eb->host));
    cuda_check(cudaFree(eb->dev));
    cuda_check(cudaFree(eb->partials));
    cuda_check(cudaEventDestroy(eb->copied));
    free(eb->counts);
    memset(eb, 0, sizeof(*eb));
}

// Per warp: one (item, 256-channel tile). Each lane sums 8 channels over the item's positions, in
// position order, then adds into dwte (whole token) or stores its scratch row (one chunk of it).
__global__ void __launch_bounds__(ENC_WARPS * 32)
encoder_backward_wte_kernel(float* dwte, float* partials, const int4* items, int nitems, const int* order,
                            const floatX* dout, int C) {
    int tiles = (int)ceil_div(C, 256);
    int64_t w = (int64_t)blockIdx.x * ENC_WARPS + threadIdx.x / 32;
    if (w >= (int64_t)nitems * tiles) return;
    int4 item = items[w / tiles];          // {token, start, count, slot}
    int c = (int)(w % tiles) * 256 + (threadIdx.x % 32) * 8;
    if (c >= C) return;
    const int* pos = order + item.y;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    #pragma unroll 4
    for (int p = 0; p < item.z; p++) {
        float f[8];
        bf16x8_to_float(load_bf16x8(dout + (size_t)pos[p] * C + c), f);
        #pragma unroll
        for (int k = 0; k < 8; k++) acc[k] += f[k];
    }
    float* dst = item.w < 0 ? dwte + (size_t)item.x * C + c : partials + (size_t)item.w * C + c;
    float4* d4 = reinterpret_cast<float4*>(dst);
    if (item.w < 0) {
        float4 lo = d4[0], hi = d4[1];
        lo.x += acc[0]; lo.y += acc[1]; lo.z += acc[2]; lo.w += acc[3];
        hi.x += acc[4]; hi.y += acc[5]; hi.z += acc[6]; hi.w += acc[7];
        d4[0] = lo; d4[1] = hi;
    } else {
        d4[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
        d4[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
    }
}

// Per warp: one (split token, 256-channel tile): dwte row += its scratch rows, in slot order.
__global__ void __launch_bounds__(ENC_WARPS * 32)
encoder_backward_merge_kernel(float* dwte, const float* partials, const int4* merges, int nmerges, int C) {
    int tiles = (int)ceil_div(C, 256);
    int64_t w = (int64_t)blockIdx.x * ENC_WARPS + threadIdx.x / 32;
    if (w >= (int64_t)nmerges * tiles) return;
    int4 m = merges[w / tiles];            // {token, first slot, slots, unused}
    int c = (int)(w % tiles) * 256 + (threadIdx.x % 32) * 8;
    if (c >= C) return;
    float4 lo = make_float4(0, 0, 0, 0), hi = lo;
    for (int k = 0; k < m.z; k++) {
        const float4* src = reinterpret_cast<const float4*>(partials + (size_t)(m.y + k) * C + c);
        float4 a = src[0], b = src[1];
        lo.x += a.x; lo.y += a.y; lo.z += a.z; lo.w += a.w;
        hi.x += b.x; hi.y += b.y; hi.z += b.z; hi.w += b.w;
    }
    float4* d4 = reinterpret_cast<float4*>(dwte + (size_t)m.x * C + c);
    float4 a = d4[0], b = d4[1];
    a.x += lo.x; a.y += lo.y; a.z += lo.z; a.w += lo.w;
    b.x += hi.x; b.y += hi.y; b.z += hi.z; b.w += hi.w;
    d4[0] = a; d4[1] = b;
}

// dwpe[t, c..c+8) += sum over b (in order) of dout[b, t, c..c+8). One thread per 8 channels of one t.
__global__ void __launch_bounds__(ENC_THREADS)
encoder_backward_wpe_kernel(float* dwpe, const floatX* dout, int B, int T, int C) {
    int cv = C / 8;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)T * cv) return;
    int t = (int)(i / cv), c = (int)(i % cv) * 8;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    #pragma unroll 4
    for (int b = 0; b < B; b++) {
        float f[8];
        bf16x8_to_float(load_bf16x8(dout + ((size_t)b * T + t) * C + c), f);
        #pragma unroll
        for (int k = 0; k < 8; k++) acc[k] += f[k];
    }
    float4* d4 = reinterpret_cast<float4*>(dwpe + (size_t)t * C + c);
    float4 lo = d4[0], hi = d4[1];
    lo.x += acc[0]; lo.y += acc[1]; lo.z += acc[2]; lo.w += acc[3];
    hi.x += acc[4]; hi.y += acc[5]; hi.z += acc[6]; hi.w += acc[7];
    d4[0] = lo; d4[1] = hi;
}

// dwte[v,:] += sum of dout[b,t,:] over the (b,t) with inp==v;  dwpe[t,:] += sum_b dout[b,t,:] (dwpe NULL: none).
// inp_host: the B*T token ids on the host (the same ids encoder_forward saw on the device).
void encoder_backward(EncoderBackward* eb, float* dwte, float* dwpe, const floatX* dout, const int* inp_host,
                      int B, int T, int C, cudaStream_t s) {
    int N = B * T;
    fail_if(N > eb->max_N || C > eb->max_C, "encoder_backward: B*T=%d C=%d exceed the workspace (%d, %d)",
            N, C, eb->max_N, eb->max_C);
    fail_if(C % 8 != 0, "encoder_backward: C=%d must be a multiple of 8", C);
    require_aligned16("encoder_backward", dwte);
    require_aligned16("encoder_backward", dwpe);
    require_aligned16("encoder_backward", dout);
    if (N <= 0) return;

    // Counting sort of the positions by token.
    int vocab = 0;
    for (int i = 0; i < N; i++) {
        fail_if(inp_host[i] < 0, "encoder_backward: negative token id %d at position %d", inp_host[i], i);
        if (inp_host[i] >= vocab) vocab = inp_host[i] + 1;
    }
    if (vocab + 1 > eb->counts_cap) {
        free(eb->counts);
        eb->counts_cap = vocab + 1;
        eb->counts = (int*)xmalloc((size_t)eb->counts_cap * sizeof(int));
    }
    int* counts = eb->counts;
    memset(counts, 0, (size_t)(vocab + 1) * sizeof(int));
    for (int i = 0; i < N; i++) counts[inp_host[i] + 1]++;
    for (int v = 0; v < vocab; v++) counts[v + 1] += counts[v];          // counts[v] = start of token v

    cuda_check(cudaEventSynchronize(eb->copied));                        // previous copy is done with host[]
    int* items = eb->host;                                              // same layout as eb->dev
    int* merges = items + 4 * (size_t)N;
    int* order = merges + 4 * (size_t)(N / ENC_CHUNK + 1);
    for (int i = 0; i < N; i++) order[counts[inp_host[i]]++] = i;        // now counts[v] = end of token v
    int nitems = 0, nmerges = 0, nslots = 0;
    for (int v = 0, start = 0; v < vocab; v++) {
        int end = counts[v], n = end - start;
        if (n > ENC_CHUNK) {
            int* m = merges + 4 * (size_t)nmerges++;
            m[0] = v; m[1] = nslots; m[2] = (int)ceil_div(n, ENC_CHUNK); m[3] = 0;
        }
        for (int p = start; p < end; p += ENC_CHUNK) {
            int* it = items + 4 * (size_t)nitems++;
            it[0] = v; it[1] = p; it[2] = end - p < ENC_CHUNK ? end - p : ENC_CHUNK;
            it[3] = n > ENC_CHUNK ? nslots++ : -1;
        }
        start = end;
    }
    fail_if(nslots > eb->max_slots, "encoder_backward: internal error, %d scratch rows > %d", nslots, eb->max_slots);

    // Three copies of just the used parts; items and merges stay 16-byte aligned for int4 loads.
    int* d_items = eb->dev;
    int* d_merges = d_items + 4 * (size_t)N;
    int* d_order = d_merges + 4 * (size_t)(N / ENC_CHUNK + 1);
    cuda_check(cudaMemcpyAsync(d_items, items, (size_t)nitems * 4 * sizeof(int), cudaMemcpyHostToDevice, s));
    if (nmerges > 0)
        cuda_check(cudaMemcpyAsync(d_merges, merges, (size_t)nmerges * 4 * sizeof(int), cudaMemcpyHostToDevice, s));
    cuda_check(cudaMemcpyAsync(d_order, order, (size_t)N * sizeof(int), cudaMemcpyHostToDevice, s));
    cuda_check(cudaEventRecord(eb->copied, s));

    int tiles = (int)ceil_div(C, 256);
    int64_t warps = (int64_t)nitems * tiles;
    encoder_backward_wte_kernel<<<(unsigned)ceil_div(warps, ENC_WARPS), ENC_WARPS * 32, 0, s>>>(
        dwte, eb->partials, (const int4*)d_items, nitems, d_order, dout, C);
    cuda_check_last();
    if (nmerges > 0) {
        warps = (int64_t)nmerges * tiles;
        encoder_backward_merge_kernel<<<(unsigned)ceil_div(warps, ENC_WARPS), ENC_WARPS * 32, 0, s>>>(
            dwte, eb->partials, (const int4*)d_merges, nmerges, C);
        cuda_check_last();
    }
    if (!dwpe) return;
    int64_t threads = (int64_t)T * (C / 8);
    encoder_backward_wpe_kernel<<<(unsigned)ceil_div(threads, ENC_THREADS), ENC_THREADS, 0, s>>>(dwpe, dout, B, T, C);
    cuda_check_last();
}
