// lora_svd.cuh: the LoRA-SVD correction on the GPU (--lora-svd-rank R; the arithmetic and its CPU twin are
// llmc/fp4/lora_svd.h, which says what is computed and why): the quantization residual E = W - Q(W) of a weight, its
// rank-R factorization by randomized subspace iteration (cuBLASLt FP32 products, the small w x w steps on one block
// each), and the two thin BF16 side GEMMs of the forward and the data gradient. The executor (llmc/fp4/linear.cuh)
// owns the factors and calls these.
// defines: LoraWork, lora_work_alloc(), lora_work_free(), lora_residual_gpu(), lora_factorize_gpu(),
//          lora_side_forward(), lora_side_dgrad()
#pragma once
#include "llmc/base/cuda_common.cuh"
#include "llmc/base/matmul.cuh"
#include "llmc/fp4/lora_svd.h"

// ----------------------------------------------------------------------------------------------
// FP32 products through cuBLASLt (FP32 compute, no TF32), row-major: C (M x N, rows ldc apart) = op(A) op(B), op(A)
// M x K (A stored K x M when ta), op(B) K x N (B stored N x K when tb). Descriptors cached per shape, as matmul.cuh's.

typedef struct {
    int M, N, K, lda, ldb, ldc, ta, tb;
} LoraGemmKey;
typedef struct {
    LoraGemmKey key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
} LoraGemmPlan;
#define LORA_MAX_PLANS 64
static struct {
    LoraGemmPlan plans[LORA_MAX_PLANS];
    int n;
} g_lora_gemm;

static LoraGemmPlan* lora_gemm_plan(const LoraGemmKey* k) {
    for (int i = 0; i < g_lora_gemm.n; i++)
        if (!memcmp(&g_lora_gemm.plans[i].key, k, sizeof(*k))) return &g_lora_gemm.plans[i];
    fail_if(g_lora_gemm.n == LORA_MAX_PLANS, "lora_svd: more than %d distinct FP32 GEMM shapes", LORA_MAX_PLANS);
    LoraGemmPlan* p = &g_lora_gemm.plans[g_lora_gemm.n++];
    memset(p, 0, sizeof(*p));
    p->key = *k;
    // column-major: C^T (N x M) = op(B)^T op(A)^T, where a row-major matrix is its transpose column-major
    cublas_check(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t t1 = k->tb ? CUBLAS_OP_T : CUBLAS_OP_N, t2 = k->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublas_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &t1, sizeof(t1)));
    cublas_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &t2, sizeof(t2)));
    cublas_check(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_32F, k->tb ? k->K : k->N, k->tb ? k->N : k->K, k->ldb));
    cublas_check(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_32F, k->ta ? k->M : k->K, k->ta ? k->K : k->M, k->lda));
    cublas_check(cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, k->N, k->M, k->ldc));
    const cublasStatus_t st = matmul_heuristic(p->desc, p->a, p->b, p->c, &p->algo);
    fail_if(st != CUBLAS_STATUS_SUCCESS, "cuBLASLt has no FP32 algorithm for M=%d N=%d K=%d (ta=%d tb=%d)", k->M, k->N,
            k->K, k->ta, k->tb);
    return p;
}

static void lora_gemm(float* C, int ldc, const float* A, int lda, int ta, const float* B, int ldb, int tb, int M, int N,
                      int K, cudaStream_t s) {
    const LoraGemmKey key = {M, N, K, lda, ldb, ldc, ta, tb};
    LoraGemmPlan* p = lora_gemm_plan(&key);
    const float one = 1.0f, zero = 0.0f;
    cublas_check(cublasLtMatmul(g_matmul.handle, p->desc, &one, B, p->a, A, p->b, &zero, C, p->c, C, p->c, &p->algo,
                                g_matmul.workspace, g_matmul.workspace_bytes, s));
}

static void lora_gemm_destroy(void) {
    for (int i = 0; i < g_lora_gemm.n; i++) {
        LoraGemmPlan* p = &g_lora_gemm.plans[i];
        cublasLtMatmulDescDestroy(p->desc);
        cublasLtMatrixLayoutDestroy(p->a);
        cublasLtMatrixLayoutDestroy(p->b);
        cublasLtMatrixLayoutDestroy(p->c);
    }
    g_lora_gemm.n = 0;
}

// ----------------------------------------------------------------------------------------------
// Kernels

// Zt (w x n): the previous factors' rows first (warm start, Vt_prev R x n BF16; NULL: cold), random signs elsewhere.
__global__ void lora_sketch_kernel(float* Z, const floatX* Vt_prev, int R, int w, int n, uint64_t key) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)w * n) return;
    const int i = (int)(idx / n), j = (int)(idx % n);
    Z[idx] = Vt_prev && i < R ? __bfloat162float(Vt_prev[idx]) : lora_sketch_sign(key, i, n, j);
}

// E = W - fake * scale_dec, rows ld apart in W and fake, packed in E; no FMA (as the twin: a product, then a difference).
__global__ void lora_residual_kernel(float* E, const floatX* W, const floatX* fake, int ld, const float* scale_dec,
                                     int rows, int cols) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)rows * cols) return;
    const size_t r = idx / cols, c = idx % cols;
    E[idx] = __fsub_rn(__bfloat162float(W[r * ld + c]), __fmul_rn(__bfloat162float(fake[r * ld + c]), *scale_dec));
}

// |E|^2 in double, deterministic: LORA_SUMSQ_BLOCKS partial sums over a fixed grid, then their sum in order.
#define LORA_SUMSQ_BLOCKS 128
__global__ void lora_sumsq_kernel(const float* E, size_t n, double* partial) {
    __shared__ double part[256];
    double s = 0.0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        s += (double)E[i] * E[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int h = blockDim.x / 2; h > 0; h /= 2) {
        if ((int)threadIdx.x < h) part[threadIdx.x] += part[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = part[0];
}
__global__ void lora_sum_kernel(const double* partial, int n, double* out) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += partial[i];
    *out = s;
}

// The small steps on one block of LORA_SMALL_THREADS >= w threads: lora_orth_small's and lora_eig_small's formulas in
// the same order, each row or column of a step on its own thread (a w x w problem is a chain of w or w^2 / 2 dependent
// steps; one thread alone would take milliseconds for the Jacobi). Rounding may differ from the serial twin (FMA).
#define LORA_SMALL_THREADS 64

// T (w x w, lower triangular) with T Y orthonormal (or zero) rows, from G = Y Y^T: the Cholesky factor column by
// column (row j of column i on thread j), dropping small pivots; then T = L^{-1}, column j on thread j.
__global__ void lora_orth_small_kernel(const float* G, int w, float* T, double* work) {
    double* L = work;
    double* keep = work + w * w;
    __shared__ double maxdiag;
    const int t = threadIdx.x;
    for (int i = t; i < w * w; i += blockDim.x) L[i] = 0.0;
    if (t == 0) {
        double m = 0.0;
        for (int i = 0; i < w; i++) m = fmax(m, (double)G[i * w + i]);
        maxdiag = m;
    }
    __syncthreads();
    for (int i = 0; i < w; i++) {
        if (t == 0) {
            double d = G[i * w + i];
            for (int k = 0; k < i; k++) d -= L[i * w + k] * L[i * w + k];
            keep[i] = maxdiag > 0.0 && d > LORA_DROP * maxdiag;
            L[i * w + i] = keep[i] ? sqrt(d) : 0.0;
        }
        __syncthreads();
        if (keep[i] && t > i && t < w) {
            double s = G[t * w + i];
            for (int k = 0; k < i; k++) s -= L[t * w + k] * L[i * w + k];
            L[t * w + i] = s / L[i * w + i];
        }
        __syncthreads();
    }
    if (t < w) {   // column t of T = L^{-1} (kept rows and columns only)
        double col[LORA_MAX_WIDTH];
        lora_inverse_column(L, keep, w, t, col, T);
    }
}

// The Jacobi of lora_eig_small on H = B B^T with each rotation's column and row updates spread over the threads
// (every thread computes the same c and s), then lora_factors_small on thread 0; captured = energy / |E|^2.
// A, V and lambda live in dynamic shared memory: (2 w^2 + w) doubles, 9.4 KiB at w = 24, 65 KiB at w = 64.
static size_t lora_final_smem(int w) { return (2 * (size_t)w * w + w) * sizeof(double); }

__global__ void lora_final_small_kernel(const float* H, int w, int R, float* Mt, float* N, const double* e2,
                                        float* captured) {
    extern __shared__ double lora_smem[];
    double* A = lora_smem;
    double* V = lora_smem + w * w;
    double* lambda = lora_smem + 2 * w * w;
    __shared__ int done;
    const int t = threadIdx.x;
    for (int i = t; i < w * w; i += blockDim.x) {
        A[i] = H[i];
        V[i] = i / w == i % w ? 1.0 : 0.0;
    }
    __syncthreads();
    for (int sweep = 0; sweep < LORA_JACOBI_SWEEPS; sweep++) {
        if (t == 0) {
            double off = 0.0, diag = 0.0;
            for (int i = 0; i < w; i++) {
                diag += A[i * w + i] * A[i * w + i];
                for (int j = i + 1; j < w; j++) off += A[i * w + j] * A[i * w + j];
            }
            done = off <= 1e-30 * diag || off == 0.0;
        }
        __syncthreads();
        if (done) break;
        for (int p = 0; p < w - 1; p++)
            for (int q = p + 1; q < w; q++) {
                const double apq = A[p * w + q], app = A[p * w + p], aqq = A[q * w + q];
                __syncthreads();   // everyone has read them before they change
                if (apq == 0.0) continue;   // the same value on every thread
                const double theta = (aqq - app) / (2.0 * apq);
                const double tt = (theta >= 0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1.0));
                const double c = 1.0 / sqrt(tt * tt + 1.0), s = tt * c;
                if (t < w) {   // A <- A J
                    const double akp = A[t * w + p], akq = A[t * w + q];
                    A[t * w + p] = c * akp - s * akq;
                    A[t * w + q] = s * akp + c * akq;
                }
                __syncthreads();
                if (t < w) {   // A <- J^T A, V <- V J
                    const double apk = A[p * w + t], aqk = A[q * w + t];
                    A[p * w + t] = c * apk - s * aqk;
                    A[q * w + t] = s * apk + c * aqk;
                    const double vkp = V[t * w + p], vkq = V[t * w + q];
                    V[t * w + p] = c * vkp - s * vkq;
                    V[t * w + q] = s * vkp + c * vkq;
                }
                __syncthreads();
            }
    }
    if (t == 0) {
        for (int i = 0; i < w; i++) lambda[i] = A[i * w + i];
        lora_eig_sort(V, lambda, w);
        const double energy = lora_factors_small(V, lambda, w, R, Mt, N);
        if (captured) *captured = *e2 > 0.0 ? (float)(energy / *e2) : 0.0f;
    }
}

__global__ void lora_round_kernel(floatX* out, const float* in, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __float2bfloat16_rn(in[i]);
}

static unsigned lora_blocks(size_t n) { return (unsigned)ceil_div((int64_t)n, 256); }

// ----------------------------------------------------------------------------------------------
// The refresh's scratch, for linears up to m x n (allocated once, for the widest linear)

typedef struct {
    int max_m, max_n, max_w;
    float *E, *Y, *Z, *tmp, *small, *us, *vt;
    double *work, *e2;
} LoraWork;

static size_t lora_work_bytes(int max_m, int max_n, int R) {
    const size_t w = lora_width(R), len = max_m > max_n ? max_m : max_n;
    return ((size_t)max_m * max_n + w * max_m + w * max_n + w * len + 5 * w * w + (size_t)(max_m + max_n) * R) *
               sizeof(float) + (3 * w * w + w + LORA_SUMSQ_BLOCKS + 1) * sizeof(double);
}

static void lora_work_alloc(LoraWork* wk, int max_m, int max_n, int R) {
    memset(wk, 0, sizeof(*wk));
    wk->max_m = max_m;
    wk->max_n = max_n;
    wk->max_w = lora_width(R);
    const size_t w = wk->max_w, len = max_m > max_n ? max_m : max_n;
    cuda_malloc(&wk->E, (size_t)max_m * max_n * sizeof(float));
    cuda_malloc(&wk->Y, w * max_m * sizeof(float));
    cuda_malloc(&wk->Z, w * max_n * sizeof(float));
    cuda_malloc(&wk->tmp, w * len * sizeof(float));
    cuda_malloc(&wk->small, 5 * w * w * sizeof(float));   // G (or H), T, Mt, N (w x R), spare
    cuda_malloc(&wk->us, (size_t)max_m * R * sizeof(float));
    cuda_malloc(&wk->vt, (size_t)R * max_n * sizeof(float));
    cuda_malloc(&wk->work, (3 * w * w + w + LORA_SUMSQ_BLOCKS) * sizeof(double));
    cuda_malloc(&wk->e2, sizeof(double));
    cuda_check(cudaFuncSetAttribute(lora_final_small_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)lora_final_smem(LORA_MAX_WIDTH)));
}

static void lora_work_free(LoraWork* wk) {
    cudaFree(wk->E);
    cudaFree(wk->Y);
    cudaFree(wk->Z);
    cudaFree(wk->tmp);
    cudaFree(wk->small);
    cudaFree(wk->us);
    cudaFree(wk->vt);
    cudaFree(wk->work);
    cudaFree(wk->e2);
    memset(wk, 0, sizeof(*wk));
}

// Rows [0, rows) of E (packed, cols wide) = W - fake * scale_dec, W and fake rows ld apart.
static void lora_residual_gpu(float* E, const floatX* W, const floatX* fake, int ld, const float* scale_dec, int rows,
                              int cols, cudaStream_t s) {
    const size_t n = (size_t)rows * cols;
    lora_residual_kernel<<<lora_blocks(n), 256, 0, s>>>(E, W, fake, ld, scale_dec, rows, cols);
    cuda_check_last();
}

// Y (w x len) <- its rows orthonormalized, CholeskyQR2 with dropping (lora_orth_small).
static void lora_orth_gpu(LoraWork* wk, float* Y, int w, int len, cudaStream_t s) {
    float* G = wk->small;
    float* T = wk->small + w * w;
    for (int pass = 0; pass < 2; pass++) {
        lora_gemm(G, w, Y, len, 0, Y, len, 1, w, w, len, s);         // G = Y Y^T
        lora_orth_small_kernel<<<1, LORA_SMALL_THREADS, 0, s>>>(G, w, T, wk->work);
        cuda_check_last();
        lora_gemm(wk->tmp, len, T, w, 0, Y, len, 0, w, len, w, s);   // T Y
        cuda_check(cudaMemcpyAsync(Y, wk->tmp, (size_t)w * len * sizeof(float), cudaMemcpyDeviceToDevice, s));
    }
}

// One refresh (lora_factorize_cpu's steps): E (m x n, FP32, packed) -> US (m x R) and Vt (R x n), BF16. Vt_prev: the
// previous Vt for a warm start, or NULL; it may be Vt itself. captured (device float, or NULL): sum of the top R
// eigenvalues of B B^T over |E|^2.
static void lora_factorize_gpu(LoraWork* wk, const float* E, int m, int n, int R, uint64_t key, const floatX* Vt_prev,
                               floatX* US, floatX* Vt, float* captured, cudaStream_t s) {
    const int w = lora_width(R);
    fail_if(m > wk->max_m || n > wk->max_n || w > wk->max_w, "internal: a %d x %d refresh at rank %d in scratch for "
            "%d x %d", m, n, R, wk->max_m, wk->max_n);
    float *Y = wk->Y, *Z = wk->Z;
    lora_sketch_kernel<<<lora_blocks((size_t)w * n), 256, 0, s>>>(Z, Vt_prev, R, w, n, key);
    cuda_check_last();
    lora_gemm(Y, m, Z, n, 0, E, n, 1, w, m, n, s);   // Yt = Zt E^T
    lora_orth_gpu(wk, Y, w, m, s);
    for (int it = 0; it < LORA_POWER_STEPS; it++) {
        lora_gemm(Z, n, Y, m, 0, E, n, 0, w, n, m, s);   // Zt = Yt E
        lora_orth_gpu(wk, Z, w, n, s);
        lora_gemm(Y, m, Z, n, 0, E, n, 1, w, m, n, s);
        lora_orth_gpu(wk, Y, w, m, s);
    }
    lora_gemm(Z, n, Y, m, 0, E, n, 0, w, n, m, s);       // B = Yt E, in Z
    float* H = wk->small;
    float* Mt = wk->small + 2 * w * w;
    float* N = wk->small + 3 * w * w;
    lora_gemm(H, w, Z, n, 0, Z, n, 1, w, w, n, s);       // H = B B^T
    lora_sumsq_kernel<<<LORA_SUMSQ_BLOCKS, 256, 0, s>>>(E, (size_t)m * n, wk->work);   // (the orths' work is free)
    lora_sum_kernel<<<1, 1, 0, s>>>(wk->work, LORA_SUMSQ_BLOCKS, wk->e2);
    lora_final_small_kernel<<<1, LORA_SMALL_THREADS, lora_final_smem(w), s>>>(H, w, R, Mt, N, wk->e2, captured);
    cuda_check_last();
    lora_gemm(wk->vt, n, Mt, w, 0, Z, n, 0, R, n, w, s);     // Vt = Mt B
    lora_gemm(wk->us, R, Y, m, 1, N, R, 0, m, R, w, s);      // US = Yt^T N
    lora_round_kernel<<<lora_blocks((size_t)R * n), 256, 0, s>>>(Vt, wk->vt, (size_t)R * n);
    lora_round_kernel<<<lora_blocks((size_t)m * R), 256, 0, s>>>(US, wk->us, (size_t)m * R);
    cuda_check_last();
}

// The forward's side GEMMs: T = X Vt^T (N x R, BF16 in tmp), then out (N x OC, rows ld_out apart, BF16) += T US^T.
static void lora_side_forward(floatX* out, int ld_out, const floatX* inp, const floatX* US, const floatX* Vt, floatX* tmp,
                              int N, int K, int OC, int R, cudaStream_t s) {
    matmul_forward_ld({.ptr = tmp, .ld = R, .f32 = 0, .accumulate = 0, .bias = NULL}, inp, Vt, N, K, R, NULL, s);
    matmul_forward_ld({.ptr = out, .ld = ld_out, .f32 = 0, .accumulate = 1, .bias = NULL}, tmp, US, N, R, OC, NULL, s);
}

// The data gradient's: S = dY US (N x R, BF16 in tmp), then dinp (N x K; BF16, or FP32 for a split QKV's sum) += S Vt.
static void lora_side_dgrad(GemmOut dinp, const floatX* dout, int ld_dout, const floatX* US, const floatX* Vt, floatX* tmp,
                            int N, int K, int OC, int R, cudaStream_t s) {
    matmul_dgrad_ld({.ptr = tmp, .ld = R, .f32 = 0, .accumulate = 0, .bias = NULL}, dout, ld_dout, US, N, R, OC, NULL, s);
    dinp.accumulate = 1;
    matmul_dgrad_ld(dinp, tmp, R, Vt, N, K, R, NULL, s);
}
