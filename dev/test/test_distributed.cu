// test_distributed.cu: the collectives of llmc/run/distributed.cuh under whatever launch started it.
//   build/test_distributed                                     single process (no NCCL)
//   mpirun --allow-run-as-root -np N build/test_distributed    N ranks, id broadcast by MPI
//   WORLD_SIZE=N RANK=r LOCAL_RANK=r build/test_distributed --nccl-id-file PATH   (or NCCL_COMM_ID=host:port)
// Every rank fills its buffers with rank-dependent values whose reductions are exact in FP32/BF16,
// so the results are compared bit for bit with what the host computes for the whole world. Rank 0
// prints the summary and counts the failures of all ranks.
// Also: ZeRO-1's gradient path (reduction of each element to its shard's owner, the norm from the
// shards) against the all-reduce path, and that the exposed communication time counts stalls only.
#include "llmc/run/distributed.cuh"
#include "llmc/model/reduce.cuh"      // sum_squares, as the trainer's gpt_grad_norm uses it
#include "dev/test/testing.h"

static int g_rank = 0;   // for failure messages

// ---- device helpers ---------------------------------------------------------------------------

// Occupies the stream for a while, so that a missing stream dependency shows up as a wrong result
// instead of hiding behind a kernel that happened to finish first.
__global__ void spin_kernel(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
}

// x[i] = (rank + 1) * (i % 7): sums over ranks stay small integers, exact in FP32.
__host__ __device__ inline float sum_pattern(size_t i, int rank) { return (float)((rank + 1) * (int)(i % 7)); }
// values in [-50, 50] whose max over ranks depends on i
__host__ __device__ inline float max_pattern(size_t i, int rank) { return (float)((int)((i + 13 * rank) % 101) - 50); }
// x[i] = ((37 i + 11 rank) % 1000 - 500) * 0.25 * (rank + 1): quarter-integers, exact everywhere
__host__ __device__ inline float amax_pattern(size_t i, int rank) {
    return (float)((int)((37 * i + 11 * rank) % 1000) - 500) * 0.25f * (float)(rank + 1);
}
// BF16-exact integers in [-125, 125]
__host__ __device__ inline float gather_pattern(size_t i) { return (float)((int)(i % 251) - 125); }

__global__ void fill_sum_kernel(float* x, size_t n, int rank, float scale) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = scale * sum_pattern(i, rank);
}
__global__ void fill_max_kernel(float* x, size_t n, int rank) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = max_pattern(i, rank);
}
__global__ void fill_amax_kernel(float* x, size_t n, int rank) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = amax_pattern(i, rank);
}
__global__ void scale_kernel(float* x, size_t n, float s) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= s;
}
// |x| >= 0, so the float's bits order like unsigned ints and atomicMax on them is a float max
__global__ void amax_kernel(const float* x, size_t n, float* out) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicMax((unsigned int*)out, __float_as_uint(fabsf(x[i])));
}
// the real elements of this rank's shard get the pattern, everything else garbage
__global__ void fill_shard_kernel(floatX* x, size_t n_padded, size_t begin, size_t count, int rank) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_padded) return;
    x[i] = __float2bfloat16(i >= begin && i < begin + count ? gather_pattern(i) : -1000.0f - (float)rank);
}

// Gradient-like values on a grid of 2^-12 in [-8, 8), pseudo-random in (i, rank): a sum over up to
// 511 ranks, in any order, stays below 2^24 grid steps and is exact in FP32, so different reduction
// algorithms must agree bit for bit.
__host__ __device__ inline float grad_pattern(size_t i, int rank) {
    unsigned long long h = (unsigned long long)i * 0x9E3779B97F4A7C15ull + (unsigned long long)(rank + 1) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
    h *= 0x94D049BB133111EBull;
    h ^= h >> 29;
    return (float)((int)(h & 0xFFFF) - 32768) * (1.0f / 4096.0f);
}
__global__ void fill_grad_kernel(float* x, size_t first, size_t n, int rank) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[first + i] = grad_pattern(first + i, rank);
}
__global__ void fill_value_kernel(float* x, size_t n, float v) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = v;
}

// Keeps one stream busy for ns nanoseconds of wall time (the global timer, not SM clocks, so the
// length does not depend on the GPU's clock rate).
__global__ void sleep_ns_kernel(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

static unsigned blocks(size_t n) { return (unsigned)((n + 255) / 256); }

// ---- tests ------------------------------------------------------------------------------------

static void test_launch(Dist* d) {
    CHECK(d->world >= 1 && d->rank >= 0 && d->rank < d->world, "rank %d: rank %d of %d", g_rank, d->rank, d->world);
    CHECK(d->launched_by != DIST_SINGLE || (d->world == 1 && !d->use_nccl), "single launch must be world 1 without NCCL");
    int dev = -1;
    cuda_check(cudaGetDevice(&dev));
    CHECK(dev == d->device, "rank %d: current device %d, Dist says %d", g_rank, dev, d->device);
    // every rank agrees on the world size and the ranks are 0..world-1, each once
    double w = dist_sum_double(d, 1.0);
    double r1 = dist_sum_double(d, (double)d->rank);
    double r2 = dist_sum_double(d, (double)d->rank * d->rank);
    double W = d->world;
    CHECK(w == W, "rank %d: sum of 1 = %g, world %d", g_rank, w, d->world);
    CHECK(r1 == W * (W - 1) / 2 && r2 == (W - 1) * W * (2 * W - 1) / 6, "rank %d: ranks are not 0..world-1 "
          "(sum %g, sum of squares %g)", g_rank, r1, r2);
    CHECK(dist_sum_double(d, d->rank + 0.5) == W * (W - 1) / 2 + 0.5 * W, "rank %d: dist_sum_double(rank + 0.5)", g_rank);
}

static void test_allreduce(Dist* d, cudaStream_t s) {
    const size_t n = 1000003;   // odd, larger than NCCL's chunks
    float* buf;
    cuda_check(cudaMalloc(&buf, n * sizeof(float)));
    float* host = (float*)xmalloc(n * sizeof(float));
    int W = d->world;

    fill_sum_kernel<<<blocks(n), 256, 0, s>>>(buf, n, d->rank, 1.0f);
    cuda_check_last();
    dist_allreduce_sum_f32(d, buf, n, s);
    cuda_check(cudaMemcpyAsync(host, buf, n * sizeof(float), cudaMemcpyDeviceToHost, s));
    cuda_check(cudaStreamSynchronize(s));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += host[i] != (float)((i % 7) * W * (W + 1) / 2);
    CHECK(bad == 0, "rank %d: allreduce sum: %zu of %zu wrong", g_rank, bad, n);

    fill_max_kernel<<<blocks(n), 256, 0, s>>>(buf, n, d->rank);
    cuda_check_last();
    dist_allreduce_max_f32(d, buf, n, s);
    cuda_check(cudaMemcpyAsync(host, buf, n * sizeof(float), cudaMemcpyDeviceToHost, s));
    cuda_check(cudaStreamSynchronize(s));
    bad = 0;
    for (size_t i = 0; i < n; i++) {
        float want = max_pattern(i, 0);
        for (int r = 1; r < W; r++) want = fmaxf(want, max_pattern(i, r));
        bad += host[i] != want;
    }
    CHECK(bad == 0, "rank %d: allreduce max: %zu of %zu wrong", g_rank, bad, n);

    free(host);
    cuda_check(cudaFree(buf));
}

// Two "layers" of gradient slices reduced asynchronously while the compute stream keeps working,
// then one dist_wait before the compute stream reads them.
static void test_async(Dist* d, cudaStream_t s) {
    const size_t counts[5] = {1, 4097, 300000, 77, 1 << 20};
    float* bufs[5];
    for (int k = 0; k < 5; k++) cuda_check(cudaMalloc(&bufs[k], counts[k] * sizeof(float)));
    long long spin = 20 * 1000 * 1000;   // ~10 ms at 2 GHz

    // layer A: three slices, written after a delay; the reduce must wait for them
    spin_kernel<<<1, 1, 0, s>>>(spin);
    for (int k = 0; k < 3; k++) fill_sum_kernel<<<blocks(counts[k]), 256, 0, s>>>(bufs[k], counts[k], d->rank, 1.0f);
    cuda_check_last();
    dist_allreduce_sum_async(d, bufs, counts, 3, s);
    // layer B: two more slices, different scale, while A may still be in flight
    spin_kernel<<<1, 1, 0, s>>>(spin);
    for (int k = 3; k < 5; k++) fill_sum_kernel<<<blocks(counts[k]), 256, 0, s>>>(bufs[k], counts[k], d->rank, 3.0f);
    cuda_check_last();
    dist_allreduce_sum_async(d, bufs + 3, counts + 3, 2, s);
    // more "backward" on the compute stream, then wait and read everything on it
    spin_kernel<<<1, 1, 0, s>>>(spin / 4);
    dist_wait(d, s);
    for (int k = 0; k < 5; k++) scale_kernel<<<blocks(counts[k]), 256, 0, s>>>(bufs[k], counts[k], 2.0f);
    cuda_check_last();

    int W = d->world;
    for (int k = 0; k < 5; k++) {
        float* host = (float*)xmalloc(counts[k] * sizeof(float));
        cuda_check(cudaMemcpyAsync(host, bufs[k], counts[k] * sizeof(float), cudaMemcpyDeviceToHost, s));
        cuda_check(cudaStreamSynchronize(s));
        float scale = k < 3 ? 1.0f : 3.0f;
        size_t bad = 0;
        for (size_t i = 0; i < counts[k]; i++) bad += host[i] != 2.0f * scale * (float)((i % 7) * W * (W + 1) / 2);
        CHECK(bad == 0, "rank %d: async allreduce slice %d (%zu elements): %zu wrong", g_rank, k, counts[k], bad);
        free(host);
    }
    // a dist_wait with nothing pending is a no-op
    dist_wait(d, s);
    double ms = dist_take_comm_ms(d);
    CHECK(ms >= 0.0 && ms < 60000.0, "rank %d: exposed communication time %g ms", g_rank, ms);
    CHECK(dist_take_comm_ms(d) == 0.0, "rank %d: dist_take_comm_ms must reset", g_rank);
    dist_printf(d, "  exposed communication in the async test: %.3f ms\n", ms);
    for (int k = 0; k < 5; k++) cuda_check(cudaFree(bufs[k]));
}

static void test_shards_and_allgather(Dist* d, cudaStream_t s) {
    const size_t sizes[] = {1, 127, 100000, 1000003};
    for (int t = 0; t < 4; t++) {
        size_t n = sizes[t];
        size_t n_padded = dist_padded_size(d, n);
        size_t begin, count;
        size_t S = dist_shard_range(d, n, &begin, &count);
        CHECK(S * d->world == n_padded && begin == (size_t)d->rank * S && count <= S,
              "rank %d: shard of n=%zu: S=%zu begin=%zu count=%zu padded=%zu", g_rank, n, S, begin, count, n_padded);
        // the counts of all ranks add up to n
        CHECK(dist_sum_double(d, (double)count) == (double)n, "rank %d: shard counts do not add up to n=%zu", g_rank, n);

        floatX* flat;
        cuda_check(cudaMalloc(&flat, n_padded * sizeof(floatX)));
        fill_shard_kernel<<<blocks(n_padded), 256, 0, s>>>(flat, n_padded, begin, count, d->rank);
        cuda_check_last();
        dist_allgather_bf16(d, flat, n_padded, s);
        floatX* host = (floatX*)xmalloc(n_padded * sizeof(floatX));
        cuda_check(cudaMemcpyAsync(host, flat, n_padded * sizeof(floatX), cudaMemcpyDeviceToHost, s));
        cuda_check(cudaStreamSynchronize(s));
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += __bfloat162float(host[i]) != gather_pattern(i);
        CHECK(bad == 0, "rank %d: allgather of n=%zu over %d ranks: %zu of the real elements wrong", g_rank, n, d->world, bad);
        free(host);
        cuda_check(cudaFree(flat));
    }
}

// Each rank's local amax of its own slice; the max all-reduce gives the global amax, the same on
// every rank (checked by summing it: sum == world * value), equal to the host's.
static void test_shared_scale(Dist* d, cudaStream_t s) {
    const size_t n = 65536;
    float *x, *amax;
    cuda_check(cudaMalloc(&x, n * sizeof(float)));
    cuda_check(cudaMalloc(&amax, sizeof(float)));
    cuda_check(cudaMemsetAsync(amax, 0, sizeof(float), s));
    fill_amax_kernel<<<blocks(n), 256, 0, s>>>(x, n, d->rank);
    amax_kernel<<<blocks(n), 256, 0, s>>>(x, n, amax);
    cuda_check_last();
    float local = 0.0f, global = 0.0f;
    cuda_check(cudaMemcpyAsync(&local, amax, sizeof(float), cudaMemcpyDeviceToHost, s));
    dist_allreduce_max_f32(d, amax, 1, s);
    cuda_check(cudaMemcpyAsync(&global, amax, sizeof(float), cudaMemcpyDeviceToHost, s));
    cuda_check(cudaStreamSynchronize(s));

    float want_local = 0.0f, want_global = 0.0f;
    for (int r = 0; r < d->world; r++)
        for (size_t i = 0; i < n; i++) {
            float a = fabsf(amax_pattern(i, r));
            if (r == d->rank) want_local = fmaxf(want_local, a);
            want_global = fmaxf(want_global, a);
        }
    CHECK(local == want_local, "rank %d: local amax %g, want %g", g_rank, local, want_local);
    CHECK(global == want_global, "rank %d: shared amax %g, want %g", g_rank, global, want_global);
    CHECK(d->world == 1 || global > local || d->rank == d->world - 1, "rank %d: the shared amax should come from the last rank", g_rank);

    // the same value everywhere, checked with a second all-reduce on the device
    cuda_check(cudaMemcpyAsync(x, amax, sizeof(float), cudaMemcpyDeviceToDevice, s));
    dist_allreduce_sum_f32(d, x, 1, s);
    float summed = 0.0f;
    cuda_check(cudaMemcpyAsync(&summed, x, sizeof(float), cudaMemcpyDeviceToHost, s));
    cuda_check(cudaStreamSynchronize(s));
    CHECK(summed == (float)d->world * global, "rank %d: sum of the shared amax over ranks %g != world * %g", g_rank, summed, global);
    cuda_check(cudaFree(x));
    cuda_check(cudaFree(amax));
}

// ZeRO-1's gradient path against the all-reduce path. A flat "gradient" buffer of n elements is cut
// into pieces of uneven sizes that straddle shard boundaries (as a layer's tensors do), grouped into
// "layers" that are written and reduced from the last to the first with dist_reduce_to_shards_async
// while the stream keeps working, then one dist_wait. A second copy is all-reduced whole. Each rank's
// shard must equal the same slice of the all-reduced sum and the host's sum bit for bit, and the
// norm from the shards (sum of squares of the shard, summed over ranks, as gpt_grad_norm does) must
// equal the norm of the whole all-reduced buffer to float rounding.
static void test_reduce_to_shards(Dist* d, cudaStream_t s, size_t n) {
    static const size_t piece_sizes[] = {1, 4099, 127, 30011, 300, 65539, 777, 128};
    const int npiece_sizes = (int)(sizeof(piece_sizes) / sizeof(piece_sizes[0]));
    const int pieces_per_layer = 3;
    float *sharded, *whole, *norms;
    cuda_check(cudaMalloc(&sharded, n * sizeof(float)));
    cuda_check(cudaMalloc(&whole, n * sizeof(float)));
    cuda_check(cudaMalloc(&norms, 2 * sizeof(float)));
    void* scratch;
    cuda_check(cudaMalloc(&scratch, sum_squares_scratch_bytes(n)));
    size_t begin, count;
    dist_shard_range(d, n, &begin, &count);

    // the pieces [bufs[k], bufs[k] + sizes[k]) partition the buffer
    int npieces = 0;
    for (size_t at = 0; at < n; npieces++) at += piece_sizes[npieces % npiece_sizes];
    float** bufs = (float**)xmalloc(npieces * sizeof(float*));
    size_t* sizes = (size_t*)xmalloc(npieces * sizeof(size_t));
    size_t at = 0;
    for (int k = 0; k < npieces; k++) {
        sizes[k] = piece_sizes[k % npiece_sizes] < n - at ? piece_sizes[k % npiece_sizes] : n - at;
        bufs[k] = sharded + at;
        at += sizes[k];
    }

    // garbage first: every element the reduction should produce must really be written
    fill_value_kernel<<<blocks(n), 256, 0, s>>>(sharded, n, -777.0f);
    fill_grad_kernel<<<blocks(n), 256, 0, s>>>(whole, 0, n, d->rank);
    cuda_check_last();
    int nlayers = (npieces + pieces_per_layer - 1) / pieces_per_layer;
    for (int l = nlayers - 1; l >= 0; l--) {
        int k0 = l * pieces_per_layer, k1 = k0 + pieces_per_layer < npieces ? k0 + pieces_per_layer : npieces;
        sleep_ns_kernel<<<1, 1, 0, s>>>(200 * 1000);   // the "backward" of this layer takes a while
        for (int k = k0; k < k1; k++)
            fill_grad_kernel<<<blocks(sizes[k]), 256, 0, s>>>(sharded, (size_t)(bufs[k] - sharded), sizes[k], d->rank);
        cuda_check_last();
        dist_reduce_to_shards_async(d, sharded, n, bufs + k0, sizes + k0, k1 - k0, s);
    }
    dist_wait(d, s);
    dist_allreduce_sum_f32(d, whole, n, s);

    // norms: [0] from the shards, [1] of the whole all-reduced buffer
    sum_squares(norms, scratch, sharded + begin, count, s);
    dist_allreduce_sum_f32(d, norms, 1, s);
    sum_squares(norms + 1, scratch, whole, n, s);
    float* host_shard = (float*)xmalloc((count ? count : 1) * sizeof(float));
    float* host_whole = (float*)xmalloc(n * sizeof(float));
    float host_norms[2];
    cuda_check(cudaMemcpyAsync(host_shard, sharded + begin, count * sizeof(float), cudaMemcpyDeviceToHost, s));
    cuda_check(cudaMemcpyAsync(host_whole, whole, n * sizeof(float), cudaMemcpyDeviceToHost, s));
    cuda_check(cudaMemcpyAsync(host_norms, norms, 2 * sizeof(float), cudaMemcpyDeviceToHost, s));
    cuda_check(cudaStreamSynchronize(s));

    size_t bad_whole = 0, bad_shard = 0, bad_vs_whole = 0;
    double sq = 0.0;
    for (size_t i = 0; i < n; i++) {
        float want = 0.0f;
        for (int r = 0; r < d->world; r++) want += grad_pattern(i, r);
        bad_whole += host_whole[i] != want;
        sq += (double)want * want;
        if (i >= begin && i < begin + count) {
            bad_shard += host_shard[i - begin] != want;
            bad_vs_whole += host_shard[i - begin] != host_whole[i];
        }
    }
    CHECK(bad_whole == 0, "rank %d: n=%zu: all-reduce: %zu of %zu elements differ from the host's sum", g_rank, n, bad_whole, n);
    CHECK(bad_shard == 0 && bad_vs_whole == 0, "rank %d: n=%zu, %d pieces in %d layers: %zu of the shard's %zu elements "
          "[%zu, %zu) differ from the host's sum, %zu from the all-reduced buffer", g_rank, n, npieces, nlayers,
          bad_shard, count, begin, begin + count, bad_vs_whole);
    double want_norm = sqrt(sq);
    char what[128];
    snprintf(what, sizeof(what), "rank %d: n=%zu: norm from the shards vs the host's", g_rank, n);
    CHECK_CLOSE(sqrt((double)host_norms[0]), want_norm, 1e-6, 1e-5, what);
    snprintf(what, sizeof(what), "rank %d: n=%zu: norm of the all-reduced buffer vs the host's", g_rank, n);
    CHECK_CLOSE(sqrt((double)host_norms[1]), want_norm, 1e-6, 1e-5, what);
    // every rank got the same norm from the shards (so every rank clips and skips alike)
    CHECK(dist_sum_double(d, (double)host_norms[0]) == (double)d->world * host_norms[0],
          "rank %d: n=%zu: the norm from the shards differs between ranks", g_rank, n);
    dist_printf(d, "  n=%zu in %d pieces: norm from shards %.6f, of the all-reduced buffer %.6f, host %.6f\n", n,
                npieces, sqrt((double)host_norms[0]), sqrt((double)host_norms[1]), want_norm);

    free(host_shard);
    free(host_whole);
    free(bufs);
    free(sizes);
    cuda_check(cudaFree(scratch));
    cuda_check(cudaFree(norms));
    cuda_check(cudaFree(whole));
    cuda_check(cudaFree(sharded));
}

// comm_ms counts the time the compute stream (or the host) waited for communication, not the time
// communication took: a reduction hidden behind compute counts ~0, a reduction that finishes 30 ms
// after compute ran out of work counts ~30 ms, and a host-blocking sum does not count the compute
// still queued ahead of it. Needs a communicator (collectives are no-ops without one).
static void test_exposed_time(Dist* d, cudaStream_t s) {
    if (!d->use_nccl) {
        test_skip("exposed communication time", "single process without NCCL: nothing to wait for");
        return;
    }
    const unsigned long long MS = 1000 * 1000;   // nanoseconds
    size_t n = 1 << 16;
    float* buf;
    cuda_check(cudaMalloc(&buf, n * sizeof(float)));

    // hidden: compute has 30 ms of work left after the reduction was issued
    dist_barrier(d);
    dist_take_comm_ms(d);
    fill_grad_kernel<<<blocks(n), 256, 0, s>>>(buf, 0, n, d->rank);
    cuda_check_last();
    dist_allreduce_sum_async(d, &buf, &n, 1, s);
    sleep_ns_kernel<<<1, 1, 0, s>>>(30 * MS);
    dist_wait(d, s);
    cuda_check(cudaStreamSynchronize(s));
    double hidden = dist_take_comm_ms(d);
    CHECK(hidden >= 0.0 && hidden < 5.0, "rank %d: a reduction hidden behind 30 ms of compute counted %.3f ms of "
          "exposed communication (want ~0)", g_rank, hidden);

    // exposed: the communication ends 40 ms after it was issued, compute runs out after 10 ms
    dist_barrier(d);
    dist_take_comm_ms(d);
    dist_allreduce_sum_async(d, &buf, &n, 1, s);
    sleep_ns_kernel<<<1, 1, 0, d->comm_stream>>>(40 * MS);   // stands for a slow transfer
    sleep_ns_kernel<<<1, 1, 0, s>>>(10 * MS);
    cuda_check_last();
    dist_wait(d, s);
    cuda_check(cudaStreamSynchronize(s));
    double exposed = dist_take_comm_ms(d);
    CHECK(exposed > 25.0 && exposed < 45.0, "rank %d: compute waited ~30 ms for communication but comm_ms counted "
          "%.3f ms", g_rank, exposed);

    // host-blocking sum with 40 ms of compute queued ahead: only the sum itself counts
    dist_barrier(d);
    dist_take_comm_ms(d);
    sleep_ns_kernel<<<1, 1, 0, s>>>(40 * MS);
    cuda_check_last();
    double one = dist_sum_double(d, 1.0);
    double host = dist_take_comm_ms(d);
    CHECK(one == (double)d->world, "rank %d: dist_sum_double(1) = %g", g_rank, one);
    CHECK(host >= 0.0 && host < 10.0, "rank %d: dist_sum_double behind 40 ms of queued compute counted %.3f ms of "
          "exposed communication (want only the scalar all-reduce, well under 10 ms)", g_rank, host);
    dist_printf(d, "  exposed communication: hidden reduction %.3f ms, 30 ms stall %.3f ms, host sum %.3f ms\n",
                hidden, exposed, host);
    cuda_check(cudaFree(buf));
}

int main(int argc, char** argv) {
    if (device_count_or_zero() == 0) {
        test_skip("test_distributed", "no CUDA GPU on this machine");
        return test_summary("test_distributed");
    }
    const char* id_file = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--nccl-id-file") == 0 && i + 1 < argc) id_file = argv[++i];
        else fail("usage: %s [--nccl-id-file PATH]", argv[0]);
    }

    Dist d;
    dist_init(&d, id_file);
    g_rank = d.rank;
    dist_print(&d);
    dist_printf(&d, "test_distributed: launch mode %s, world %d, NCCL %s\n", dist_launch_name(&d), d.world,
                d.use_nccl ? "in use" : "not used");

    cudaStream_t s;
    cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    test_launch(&d);
    test_allreduce(&d, s);
    test_async(&d, s);
    test_shards_and_allgather(&d, s);
    test_shared_scale(&d, s);
    test_reduce_to_shards(&d, s, 300);       // shards partly padding from 2 ranks on, all padding from 4
    test_reduce_to_shards(&d, s, 1000003);
    test_exposed_time(&d, s);
    dist_barrier(&d);
    cuda_check(cudaStreamDestroy(s));

    // rank 0 speaks for everyone: its failure count becomes the world's
    int failed_everywhere = (int)dist_sum_double(&d, (double)test_failed);
    int is_main = dist_is_main(&d);
    dist_finalize(&d);
    if (!is_main) return failed_everywhere ? 1 : 0;
    test_failed = failed_everywhere;
    return test_summary("test_distributed");
}
