// san_probe.cu: which writes does compute-sanitizer's initcheck see? (issue #49 item 4)
// In a training step, initcheck reports "uninitialized __global__ memory read" in our kernels that read
// the outputs of library kernels: qf_amax_kernel reads the attention output cuDNN wrote (the output
// projection's input), attn_own_forward_kernel reads the QKV activations cuBLASLt wrote (the QKV linear's
// output). The poison check (dev/bench/check_repro.sh part 3: every allocation filled with NaN bytes,
// the same losses) says those reads see written values. This program isolates the question. Each case
// allocates a fresh buffer, lets one writer fill it, and reads it with a kernel of its own name:
//   read_after_kernel    a plain CUDA kernel wrote it (initcheck must stay quiet)
//   read_after_memset    cudaMemset wrote it (quiet)
//   read_after_cublaslt  cuBLASLt's BF16 GEMM (the trainer's call, D = A.B) wrote it
//   read_after_cudnn     cuDNN's fused attention forward (llmc/model/attention.cuh) wrote it
//   read_uninitialized   nothing wrote it (the positive control: initcheck must report it)
// Every read kernel also checks the values against what the writer must have produced (the sums are
// printed), so a report on read_after_cublaslt or read_after_cudnn, with correct values, is initcheck
// missing the library's stores (on Hopper these kernels store through TMA / bulk copies), not our bug.
// usage: compute-sanitizer --tool initcheck build/san_probe [CASE]   (plain: build/san_probe checks the values)
//        CASE: one of the names above (its writer and its read only, so that initcheck's error summary counts
//        that case's reports alone); none: every case
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
#include <cublasLt.h>
#include "llmc/base/cuda_common.cuh"
#include "llmc/model/attention.cuh"

#define lt_check(call) do { cublasStatus_t st_ = (call); if (st_ != CUBLAS_STATUS_SUCCESS) { \
    fprintf(stderr, "san_probe: %s failed: %d\n", #call, (int)st_); exit(1); } } while (0)

#define PROBE_READER(name)                                                                 \
    __global__ void name(const floatX* x, size_t n, float* sum) {                         \
        float s = 0.0f;                                                                    \
        for (size_t i = threadIdx.x; i < n; i += blockDim.x) s += (float)x[i];             \
        atomicAdd(sum, s);                                                                 \
    }
PROBE_READER(read_after_kernel)
PROBE_READER(read_after_memset)
PROBE_READER(read_after_cublaslt)
PROBE_READER(read_after_cudnn)
PROBE_READER(read_uninitialized)

__global__ void fill_kernel(floatX* x, size_t n, float v) {
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) x[i] = (floatX)v;
}

typedef void (*Reader)(const floatX*, size_t, float*);
static float read_sum(Reader k, const floatX* x, size_t n, float* d_sum) {
    cuda_check(cudaMemset(d_sum, 0, sizeof(float)));
    k<<<1, 256>>>(x, n, d_sum);
    cuda_check(cudaGetLastError());
    float s = 0.0f;
    cuda_check(cudaMemcpy(&s, d_sum, sizeof(float), cudaMemcpyDeviceToHost));
    return s;
}

static int failures = 0;
static void expect(const char* what, float got, float want) {
    const bool ok = fabsf(got - want) <= 1e-3f * fabsf(want) + 1e-3f;
    printf("%-22s sum %.4f (want %.4f) %s\n", what, got, want, ok ? "ok" : "WRONG");
    failures += !ok;
}

static floatX* fresh(size_t n) {   // cudaMalloc'd, never written
    floatX* p = NULL;
    cuda_check(cudaMalloc(&p, n * sizeof(floatX)));
    return p;
}

// D (m x n, column-major, BF16) = A^T (k x m) . B (k x n), as the trainer's forward calls cuBLASLt.
static void cublaslt_gemm(floatX* d, const floatX* a, const floatX* b, int m, int n, int k) {
    cublasLtHandle_t lt;
    lt_check(cublasLtCreate(&lt));
    cublasLtMatmulDesc_t op;
    lt_check(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t t = CUBLAS_OP_T, nt = CUBLAS_OP_N;
    lt_check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)));
    lt_check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &nt, sizeof(nt)));
    cublasLtMatrixLayout_t la, lb, ld;
    lt_check(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, k, m, k));
    lt_check(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, n, k));
    lt_check(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, m, n, m));
    const float one = 1.0f, zero = 0.0f;
    lt_check(cublasLtMatmul(lt, op, &one, a, la, b, lb, &zero, d, ld, d, ld, NULL, NULL, 0, 0));
    cuda_check(cudaDeviceSynchronize());
    cublasLtMatrixLayoutDestroy(la); cublasLtMatrixLayoutDestroy(lb); cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(op);
    cublasLtDestroy(lt);
}

static const char* only = NULL;   // the one case to run (argv[1]), or NULL: all
static bool run(const char* name) { return only == NULL || strcmp(only, name) == 0; }

int main(int argc, char** argv) {
    if (argc > 1) only = argv[1];
    const char* names[] = {"read_after_kernel", "read_after_memset", "read_after_cublaslt", "read_after_cudnn", "read_uninitialized"};
    bool known = only == NULL;
    for (const char* nm : names) known = known || strcmp(only, nm) == 0;
    if (!known) { fprintf(stderr, "san_probe: unknown case '%s'\n", only); return 2; }
    if (device_count_or_zero() == 0) { printf("san_probe: no CUDA GPU; nothing to probe\n"); return 0; }
    float* d_sum = NULL;
    cuda_check(cudaMalloc(&d_sum, sizeof(float)));
    const size_t n = 256 * 256;

    if (run("read_after_kernel")) {
        floatX* x = fresh(n);
        fill_kernel<<<64, 256>>>(x, n, 0.5f);
        expect("read_after_kernel", read_sum(read_after_kernel, x, n, d_sum), 0.5f * n);
    }
    if (run("read_after_memset")) {
        floatX* y = fresh(n);
        cuda_check(cudaMemset(y, 0, n * sizeof(floatX)));
        expect("read_after_memset", read_sum(read_after_memset, y, n, d_sum), 0.0f);
    }

    // GEMM: A = B = all 1/16 (written by fill_kernel), K = 256: every element of D is 256/256 = 1
    if (run("read_after_cublaslt")) {
        const int m = 256, k = 256;
        floatX* a = fresh((size_t)k * m);
        floatX* b = fresh((size_t)k * m);
        fill_kernel<<<64, 256>>>(a, (size_t)k * m, 1.0f / 16);
        fill_kernel<<<64, 256>>>(b, (size_t)k * m, 1.0f / 16);
        floatX* d = fresh((size_t)m * m);
        cublaslt_gemm(d, a, b, m, m, k);
        expect("read_after_cublaslt", read_sum(read_after_cublaslt, d, (size_t)m * m, d_sum), (float)m * m);
    }

    // attention: V = 1 everywhere, so every output element is 1 (a convex combination of ones)
    if (run("read_after_cudnn")) {
    const AttnShape sh = {2, 256, 4, 4, 64};
    const size_t n_qkv = (size_t)sh.B * sh.T * (sh.NH + 2 * sh.KVH) * sh.HS, n_out = (size_t)sh.B * sh.T * sh.NH * sh.HS;
    floatX* qkv = fresh(n_qkv);
    fill_kernel<<<64, 256>>>(qkv, n_qkv, 1.0f);
    floatX* out = fresh(n_out);
    float* stats = NULL;
    cuda_check(cudaMalloc(&stats, (size_t)sh.B * sh.NH * sh.T * sizeof(float)));
    attention_init();
    attention_forward(out, stats, qkv, sh, 0);
    cuda_check(cudaDeviceSynchronize());
    printf("attention backend: %s\n", attention_backend_name());
    expect("read_after_cudnn", read_sum(read_after_cudnn, out, n_out, d_sum), (float)n_out);
    attention_destroy();
    }
    if (run("read_uninitialized")) {
        floatX* u = fresh(n);
        const float su = read_sum(read_uninitialized, u, n, d_sum);   // any value: never written
        printf("%-22s sum %g (anything: the buffer was never written)\n", "read_uninitialized", su);
    }
    printf("san_probe: %d wrong value(s)\n", failures);
    return failures ? 1 : 0;
}
