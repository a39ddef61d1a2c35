// bench_kernels.cu: times the elementwise, normalization and loss kernels at GPT-2 124M training
// shapes (B=64, T=1024, C=768) and prints the achieved bandwidth against the bytes each one must
// move (compulsory traffic: every input read once, every output written once). A device-to-device
// copy is timed first as the practical ceiling.
//   build/bench_kernels [iters]
#include <vector>
#include <math.h>
#include <time.h>
#include "llmc/model/encoder.cuh"           // encoder_forward, encoder_backward
#include "llmc/model/layernorm.cuh"         // layernorm_forward, fused_residual_layernorm_forward, layernorm_backward
#include "llmc/model/gelu.cuh"              // gelu_forward, gelu_backward_inplace
#include "llmc/model/fused_classifier.cuh"  // fused_classifier
#include "llmc/model/reduce.cuh"            // bias_backward, sum_squares

// Deterministic pseudo-random fill: value = scale * (uniform(-1, 1)) + offset.
__device__ __forceinline__ float hash_uniform(uint64_t i, uint32_t seed) {
    uint64_t x = i * 0x9E3779B97F4A7C15ull + seed;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    return (float)((x >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}
__global__ void fill_bf16_kernel(floatX* p, size_t n, float scale, float offset, uint32_t seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = __float2bfloat16_rn(offset + scale * hash_uniform(i, seed));
}
__global__ void fill_f32_kernel(float* p, size_t n, float scale, float offset, uint32_t seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = offset + scale * hash_uniform(i, seed);
}
static uint32_t seed_counter = 1;
static floatX* alloc_bf16(size_t n, float scale, float offset = 0.0f) {
    floatX* p;
    cuda_check(cudaMalloc((void**)&p, n * sizeof(floatX)));
    fill_bf16_kernel<<<1024, 256>>>(p, n, scale, offset, seed_counter++);
    cuda_check_last();
    return p;
}
static float* alloc_f32(size_t n, float scale, float offset = 0.0f) {
    float* p;
    cuda_check(cudaMalloc((void**)&p, n * sizeof(float)));
    fill_f32_kernel<<<1024, 256>>>(p, n, scale, offset, seed_counter++);
    cuda_check_last();
    return p;
}
static void* alloc_raw(size_t bytes) {
    void* p;
    cuda_check(cudaMalloc(&p, bytes ? bytes : 1));
    return p;
}

static int iters = 20;
static cudaEvent_t ev0, ev1;

// Runs f once to warm up, then iters times; returns the mean milliseconds per call.
template <class F> static float time_ms(F f) {
    f();
    cuda_check(cudaDeviceSynchronize());
    cuda_check(cudaEventRecord(ev0, 0));
    for (int i = 0; i < iters; i++) f();
    cuda_check(cudaEventRecord(ev1, 0));
    cuda_check(cudaEventSynchronize(ev1));
    float ms;
    cuda_check(cudaEventElapsedTime(&ms, ev0, ev1));
    return ms / iters;
}
static void report(const char* name, const char* shape, float ms, double bytes) {
    printf("%-34s %-28s %9.1f us %9.1f MB %8.0f GB/s\n", name, shape, ms * 1e3, bytes / 1e6, bytes / (ms * 1e-3) / 1e9);
}
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
    if (device_count_or_zero() == 0) { printf("bench_kernels: no CUDA GPU on this machine\n"); return 0; }
    if (argc > 1) iters = atoi(argv[1]);
    cudaDeviceProp prop;
    cuda_check(cudaGetDeviceProperties(&prop, 0));
    printf("bench_kernels on %s (%d SMs), %d iterations each\n", prop.name, prop.multiProcessorCount, iters);
    cuda_check(cudaEventCreate(&ev0));
    cuda_check(cudaEventCreate(&ev1));
    const int B = 64, T = 1024, C = 768, V = 50257, Vp = 50304, NC = 8192;
    const int N = B * T;
    const size_t NCs = (size_t)N * C;
    char shape[64];
    printf("%-34s %-28s %12s %12s %13s\n", "kernel", "shape", "time", "bytes", "bandwidth");

    {   // ceiling: device-to-device copy
        size_t bytes = (size_t)1 << 30;
        void *a = alloc_raw(bytes), *b = alloc_raw(bytes);
        float ms = time_ms([&] { cuda_check(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, 0)); });
        report("cudaMemcpy D2D (ceiling)", "1 GiB", ms, 2.0 * bytes);
        cuda_check(cudaFree(a)); cuda_check(cudaFree(b));
    }

    {   // encoder
        std::vector<int> inp(N);
        // Log-uniform token ids: a heavy head like real text (a few tokens take a large share).
        uint64_t st = 12345;
        for (int i = 0; i < N; i++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            double u = ((st >> 11) + 0.5) / 9007199254740992.0;
            inp[i] = (int)(exp(u * log((double)V))) - 1;
            if (inp[i] >= V) inp[i] = V - 1;
        }
        std::vector<char> seen(V, 0);
        int unique = 0;
        for (int i = 0; i < N; i++) if (!seen[inp[i]]++) unique++;
        int* d_inp = (int*)alloc_raw(N * sizeof(int));
        cuda_check(cudaMemcpy(d_inp, inp.data(), N * sizeof(int), cudaMemcpyHostToDevice));
        floatX *wte = alloc_bf16((size_t)V * C, 0.1f), *wpe = alloc_bf16((size_t)T * C, 0.1f), *out = alloc_bf16(NCs, 0.0f);
        snprintf(shape, sizeof shape, "B=%d T=%d C=%d", B, T, C);
        float ms = time_ms([&] { encoder_forward(out, d_inp, wte, wpe, B, T, C, 0); });
        report("encoder_forward", shape, ms, N * 4.0 + (double)unique * C * 2 + (double)T * C * 2 + NCs * 2.0);
        float *dwte = alloc_f32((size_t)V * C, 0.0f), *dwpe = alloc_f32((size_t)T * C, 0.0f);
        EncoderBackward eb;
        encoder_backward_init(&eb, B, T, C);
        double bytes = NCs * 2.0 * 2 + (double)unique * C * 8 + (double)T * C * 8;   // dout read by both passes
        ms = time_ms([&] { encoder_backward(&eb, dwte, dwpe, out, inp.data(), B, T, C, 0); });
        snprintf(shape, sizeof shape, "B=%d T=%d C=%d, %d unique", B, T, C, unique);
        report("encoder_backward (GPU stream)", shape, ms, bytes);
        cuda_check(cudaDeviceSynchronize());
        double t0 = now_s();
        for (int i = 0; i < iters; i++) encoder_backward(&eb, dwte, dwpe, out, inp.data(), B, T, C, 0);
        double host_s = (now_s() - t0) / iters;
        cuda_check(cudaDeviceSynchronize());
        printf("%-34s %-28s %9.1f us (host time per call: counting sort, item list, launches)\n",
               "encoder_backward host part", "", host_s * 1e6);
        encoder_backward_free(&eb);
        cuda_check(cudaFree(d_inp)); cuda_check(cudaFree(wte)); cuda_check(cudaFree(wpe)); cuda_check(cudaFree(out));
        cuda_check(cudaFree(dwte)); cuda_check(cudaFree(dwpe));
    }

    int Cs[] = {768, 1600};
    for (int c : Cs) {  // layernorm
        size_t n = (size_t)N * c;
        floatX *x = alloc_bf16(n, 2.0f, 0.5f), *x2 = alloc_bf16(n, 1.0f), *y = alloc_bf16(n, 0.0f), *res = alloc_bf16(n, 0.0f);
        floatX *w = alloc_bf16(c, 0.1f, 1.0f), *b = alloc_bf16(c, 0.1f);
        float *mean = alloc_f32(N, 0.0f), *rstd = alloc_f32(N, 0.0f);
        snprintf(shape, sizeof shape, "N=%d C=%d", N, c);
        floatX* dinp = alloc_bf16(n, 0.0f);
        float *dw = alloc_f32(c, 0.0f), *db = alloc_f32(c, 0.0f);
        const LayerNormTensors ln = {.weight = w, .bias = b, .dweight = dw, .dbias = db, .mean = mean, .rstd = rstd};
        float ms = time_ms([&] { layernorm_forward(y, x, ln, N, c, 0); });
        report("layernorm_forward", shape, ms, n * 4.0 + N * 8.0);
        ms = time_ms([&] { fused_residual_layernorm_forward(res, y, x, x2, ln, N, c, 0); });
        report("fused_residual_layernorm_forward", shape, ms, n * 8.0 + N * 8.0);
        void* scratch = alloc_raw(layernorm_backward_scratch_bytes(N, c));
        ms = time_ms([&] { layernorm_backward(dinp, y, x, ln, scratch, N, c, 0); });
        report("layernorm_backward", shape, ms, n * 8.0 + N * 8.0);
        cuda_check(cudaFree(x)); cuda_check(cudaFree(x2)); cuda_check(cudaFree(y)); cuda_check(cudaFree(res));
        cuda_check(cudaFree(w)); cuda_check(cudaFree(b)); cuda_check(cudaFree(mean)); cuda_check(cudaFree(rstd));
        cuda_check(cudaFree(dinp)); cuda_check(cudaFree(dw)); cuda_check(cudaFree(db)); cuda_check(cudaFree(scratch));
    }

    {   // gelu on the MLP hidden activations
        size_t n = (size_t)N * 4 * C;
        floatX *x = alloc_bf16(n, 3.0f), *y = alloc_bf16(n, 0.0f), *d = alloc_bf16(n, 1e-3f);
        snprintf(shape, sizeof shape, "n=N*4C=%zu", n);
        float ms = time_ms([&] { gelu_forward(y, x, n, 0); });
        report("gelu_forward", shape, ms, n * 4.0);
        ms = time_ms([&] { gelu_backward_inplace(d, x, n, 0); });
        report("gelu_backward_inplace", shape, ms, n * 6.0);
        cuda_check(cudaFree(x)); cuda_check(cudaFree(y)); cuda_check(cudaFree(d));
    }

    {   // classifier, NC rows per call
        size_t n = (size_t)NC * Vp;
        floatX* logits = alloc_bf16(n, 4.0f);
        float* losses = alloc_f32(NC, 0.0f);
        std::vector<int> tg(NC);
        for (int i = 0; i < NC; i++) tg[i] = (int)(((uint64_t)i * 2654435761u) % V);
        int* d_tg = (int*)alloc_raw(NC * sizeof(int));
        cuda_check(cudaMemcpy(d_tg, tg.data(), NC * sizeof(int), cudaMemcpyHostToDevice));
        snprintf(shape, sizeof shape, "N=%d V=%d Vp=%d", NC, V, Vp);
        float ms = time_ms([&] { fused_classifier(logits, losses, 1.0f / N, d_tg, NC, V, Vp, 0, 0); });
        report("fused_classifier (loss only)", shape, ms, n * 2.0 + NC * 8.0);
        // With dlogits the logits are overwritten by small finite gradients; the work is the same.
        ms = time_ms([&] { fused_classifier(logits, losses, 1.0f / N, d_tg, NC, V, Vp, 1, 0); });
        report("fused_classifier (+dlogits)", shape, ms, n * 4.0 + NC * 8.0);
        cuda_check(cudaFree(logits)); cuda_check(cudaFree(losses)); cuda_check(cudaFree(d_tg));
    }

    int OCs[] = {768, 2304, 3072};
    for (int oc : OCs) {  // bias gradients of the linear layers
        floatX* dout = alloc_bf16((size_t)N * oc, 1.0f);
        float* dbias = alloc_f32(oc, 0.0f);
        void* scratch = alloc_raw(bias_backward_scratch_bytes(N, oc));
        snprintf(shape, sizeof shape, "N=%d OC=%d", N, oc);
        float ms = time_ms([&] { bias_backward(dbias, scratch, dout, N, oc, 0); });
        report("bias_backward", shape, ms, (double)N * oc * 2.0);
        cuda_check(cudaFree(dout)); cuda_check(cudaFree(dbias)); cuda_check(cudaFree(scratch));
    }

    {   // global gradient norm over all GPT-2 124M parameters
        size_t n = 124475904;
        float* g = alloc_f32(n, 1e-3f);
        float* out = alloc_f32(1, 0.0f);
        void* scratch = alloc_raw(sum_squares_scratch_bytes(n));
        snprintf(shape, sizeof shape, "n=%zu", n);
        float ms = time_ms([&] { sum_squares(out, scratch, g, n, 0); });
        report("sum_squares", shape, ms, n * 4.0);
        cuda_check(cudaFree(g)); cuda_check(cudaFree(out)); cuda_check(cudaFree(scratch));
    }
    cuda_check(cudaDeviceSynchronize());
    printf("bench_kernels: done\n");
    return 0;
}
