// bench_common.cuh: what the quantizer benchmarks share: timing a launch with CUDA events (after one
// warm-up call) and the device copy bandwidth measured in the same run, the baseline every table
// row is compared with.
// defines: Bench, bench_ms(), bench_us(), bench_fill_uniform(), bench_wants(), bench_wants_shape(), bench_init(),
//          bench_params()
#pragma once
#include <vector>
#include "llmc/base/cuda_common.cuh"
#include "llmc/fp4/formats.h"
#include "llmc/fp4/stochastic_round.h"   // bf16_bits_rne

struct Bench {
    int iters;
    const char* only;        // -f SUBSTR: only the table rows whose name contains it (NULL: all)
    long long shape[2];      // -s RxC: only that tensor shape (0x0: all)
    double copy_gbs;   // cudaMemcpyAsync D2D of 1 GiB, bytes read + written
    cudaEvent_t e0, e1;
};

// Mean milliseconds per call of f over b.iters calls.
template <typename F>
static double bench_ms(Bench& b, F f) {
    f();  // warm up
    cuda_check(cudaDeviceSynchronize());
    cuda_check(cudaEventRecord(b.e0));
    for (int i = 0; i < b.iters; i++) f();
    cuda_check(cudaEventRecord(b.e1));
    cuda_check(cudaEventSynchronize(b.e1));
    float ms;
    cuda_check(cudaEventElapsedTime(&ms, b.e0, b.e1));
    return ms / b.iters;
}

// Microseconds per call of f.
template <typename F>
static double bench_us(Bench& b, F f) { return bench_ms(b, f) * 1e3; }

// n BF16 values uniform in [-1, 1) (a 64-bit LCG from state 1, the top 24 bits), copied to the device buffer.
static void bench_fill_uniform(uint16_t* dev, size_t n) {
    std::vector<uint16_t> h(n);
    uint64_t s = 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        h[i] = bf16_bits_rne((float)((int64_t)(s >> 40) - (1 << 23)) / (1 << 23));
    }
    cuda_check(cudaMemcpy(dev, h.data(), 2 * n, cudaMemcpyHostToDevice));
}

// Whether a table row (-f) or a shape (-s) is asked for: profilers time one kernel of one row at one shape.
static int bench_wants(const Bench& b, const char* name) { return !b.only || strstr(name, b.only); }
static int bench_wants_shape(const Bench& b, long long r, long long c) {
    return !b.shape[0] || (b.shape[0] == r && b.shape[1] == c);
}

// Parses [-n iters] [-f SUBSTR] [-s RxC], measures the copy bandwidth and prints the device line. Returns 0 (after saying
// so) when there is no GPU.
static int bench_init(Bench& b, int argc, char** argv, const char* name) {
    b.iters = 20;
    b.only = NULL;
    b.shape[0] = b.shape[1] = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-n") && i + 1 < argc) b.iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-f") && i + 1 < argc) b.only = argv[++i];
        else if (!strcmp(argv[i], "-s") && i + 1 < argc && sscanf(argv[i + 1], "%lldx%lld", &b.shape[0], &b.shape[1]) == 2) i++;
        else fail("usage: %s [-n iters] [-f row-name-substring] [-s ROWSxCOLS]", argv[0]);
    }
    if (device_count_or_zero() == 0) { printf("%s: no CUDA GPU on this machine, nothing to time\n", name); return 0; }
    cudaDeviceProp prop;
    cuda_check(cudaGetDeviceProperties(&prop, 0));
    cuda_check(cudaEventCreate(&b.e0));
    cuda_check(cudaEventCreate(&b.e1));
    size_t cbytes = (size_t)1 << 30;
    void *ca, *cb;
    cuda_check(cudaMalloc(&ca, cbytes));
    cuda_check(cudaMalloc(&cb, cbytes));
    cuda_check(cudaMemset(ca, 1, cbytes));
    double ms = bench_ms(b, [&] { cuda_check(cudaMemcpyAsync(cb, ca, cbytes, cudaMemcpyDeviceToDevice, 0)); });
    b.copy_gbs = 2.0 * cbytes / (ms * 1e-3) / 1e9;
    cudaFree(ca);
    cudaFree(cb);
    printf("device: %s, %d SMs; copy bandwidth (cudaMemcpy D2D, 1 GiB, read+write): %.0f GB/s\n\n", prop.name,
           prop.multiProcessorCount, b.copy_gbs);
    return 1;
}

static QuantParams bench_params(const char* s) {
    QuantSpec spec;
    char err[256];
    fail_if(quant_spec_parse(s, &spec, err, sizeof(err)), "%s", err);
    return quant_params(&spec);
}
