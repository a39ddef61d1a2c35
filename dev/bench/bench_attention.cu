// bench_attention.cu: forward and backward time of llmc/model/attention.cuh at GPT-2 124M shapes and a
// grouped-query (Llama-style) shape, for each backend (cuDNN when built with it, and the own kernels).
// Not a test: prints ms and TFLOP/s.
// Causal FLOPs: forward = half of 4*B*NH*T*T*HS (Q.K^T and P.V over the lower triangle, per query
// head, GQA or not); backward = 2.5x forward (five GEMMs instead of two), the usual flash-attention
// accounting.
// Usage: build/bench_attention [iterations]
#include "llmc/model/attention.cuh"

static float bench_ms(int iters, cudaEvent_t e0, cudaEvent_t e1, void (*fn)(void*), void* arg) {
    for (int i = 0; i < 3; i++) fn(arg);   // warm-up (and plan building)
    cuda_check(cudaEventRecord(e0, 0));
    for (int i = 0; i < iters; i++) fn(arg);
    cuda_check(cudaEventRecord(e1, 0));
    cuda_check(cudaEventSynchronize(e1));
    float ms = 0;
    cuda_check(cudaEventElapsedTime(&ms, e0, e1));
    return ms / iters;
}

typedef struct {
    AttnShape sh;
    floatX *qkv, *out, *dout, *dqkv;
    float* stats;
} Case;

static void run_forward(void* a) {
    Case* c = (Case*)a;
    attention_forward(c->out, c->stats, c->qkv, c->sh, 0);
}
static void run_backward(void* a) {
    Case* c = (Case*)a;
    attention_backward(c->dqkv, c->dout, c->qkv, c->out, c->stats, c->sh, 0);
}

// Fills n BF16 values with a cheap hash-based pattern in [-1, 1) (timing only needs finite data).
__global__ void bench_fill(floatX* x, size_t n, uint32_t salt) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    uint32_t h = (uint32_t)i * 2654435761u ^ salt;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    x[i] = __float2bfloat16((float)(h & 0xffff) / 32768.0f - 1.0f);
}

int main(int argc, char** argv) {
    const int iters = argc > 1 ? atoi(argv[1]) : 20;
    if (device_count_or_zero() == 0) {
        printf("bench_attention: no CUDA GPU on this machine\n");
        return 0;
    }
    attention_init();
    cudaEvent_t e0, e1;
    cuda_check(cudaEventCreate(&e0));
    cuda_check(cudaEventCreate(&e1));
    const AttnShape shapes[] = {   // B, T, NH, KVH, HS
        {16, 1024, 12, 12, 64},    // GPT-2 124M
        {64, 1024, 12, 12, 64},
        {16, 1024, 8, 2, 128},     // grouped-query: 8 query heads over 2 key/value heads
    };
    printf("%-11s %-20s %9s %9s %9s %9s\n", "backend", "B,T,NH,KVH,HS", "fwd ms", "fwd TF/s", "bwd ms", "bwd TF/s");
    for (const auto& s : shapes) {
        Case c = {s, NULL, NULL, NULL, NULL, NULL};
        const AttnShape& sh = c.sh;
        const size_t n_qkv = (size_t)sh.B * sh.T * (sh.NH + 2 * sh.KVH) * sh.HS, n_out = (size_t)sh.B * sh.T * sh.NH * sh.HS;
        cuda_check(cudaMalloc(&c.qkv, n_qkv * sizeof(floatX)));
        cuda_check(cudaMalloc(&c.dqkv, n_qkv * sizeof(floatX)));
        cuda_check(cudaMalloc(&c.out, n_out * sizeof(floatX)));
        cuda_check(cudaMalloc(&c.dout, n_out * sizeof(floatX)));
        cuda_check(cudaMalloc(&c.stats, (size_t)sh.B * sh.NH * sh.T * sizeof(float)));
        bench_fill<<<(unsigned)ceil_div(n_qkv, 256), 256>>>(c.qkv, n_qkv, 1);
        bench_fill<<<(unsigned)ceil_div(n_out, 256), 256>>>(c.dout, n_out, 2);
        cuda_check_last();
        const double fwd_flops = 0.5 * 4.0 * sh.B * sh.NH * (double)sh.T * sh.T * sh.HS, bwd_flops = 2.5 * fwd_flops;
        for (int own = 0; own <= 1; own++) {
            if (!own) { attention_destroy(); attention_init(); }   // each shape gets its own chance at cuDNN
            attention_force_own_kernel(own);
            const char* backend = attention_backend_name();
            if (!own && strcmp(backend, "cudnn") != 0) {
                printf("%-11s (skipped: %s)\n", "cudnn", attention_cudnn_unavailable_reason());
                continue;
            }
            const float fms = bench_ms(iters, e0, e1, run_forward, &c);
            const float bms = bench_ms(iters, e0, e1, run_backward, &c);
            char shape[48];
            snprintf(shape, sizeof(shape), "%d,%d,%d,%d,%d", sh.B, sh.T, sh.NH, sh.KVH, sh.HS);
            printf("%-11s %-20s %9.3f %9.1f %9.3f %9.1f%s\n", attention_backend_name(), shape, fms, fwd_flops / (fms * 1e9),
                   bms, bwd_flops / (bms * 1e9), strcmp(attention_backend_name(), backend) ? "  (backend changed mid-run)" : "");
        }
        cuda_check(cudaFree(c.qkv));
        cuda_check(cudaFree(c.dqkv));
        cuda_check(cudaFree(c.out));
        cuda_check(cudaFree(c.dout));
        cuda_check(cudaFree(c.stats));
    }
    attention_destroy();
    return 0;
}
