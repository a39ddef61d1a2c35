// matmul.cuh: the three GEMMs of a linear layer through cuBLASLt, BF16 operands, FP32 accumulation.
// defines: GemmOut, MatmulOperand, matmul_init(), matmul_destroy(), matmul_forward(), matmul_dgrad(), matmul_wgrad(),
//          and their _ld variants for an operand or output whose rows are further apart than its width (column
//          slices), which take the output as a GemmOut
// All matrices are row-major as the model stores them: inp (N x K), weight (OC x K), out (N x OC).
// cuBLASLt is column-major, so each call computes the transposed product (out^T = W inp^T, ...).
// Matmul descriptors, layouts and the chosen algorithm are built once per shape and cached: the
// training loop calls the same few shapes every step.
// alpha_dev: NULL for alpha = 1, or a device float (the FP4 path passes the product of the two
// operands' tensor scales there, so no host synchronisation is needed).
#pragma once
#include <cublasLt.h>
#include "llmc/base/cuda_common.cuh"

static inline void cublas_check_(cublasStatus_t s, const char* file, int line) {
    if (s != CUBLAS_STATUS_SUCCESS) fail("cuBLAS error %d at %s:%d", (int)s, file, line);
}
#define cublas_check(s) cublas_check_((s), __FILE__, __LINE__)

// Where a GEMM writes: a row-major output, rows ld apart, and a bias (BF16, one per output column) added to
// each row. The FP8 and native FP4 GEMMs (llmc/fp4/matmul_fp8.cuh, matmul_fp4.cuh) take it too.
typedef struct {
    void* ptr;
    int ld;
    int f32, accumulate;      // FP32 (else BF16) output; add to it (else overwrite)
    const floatX* bias;       // or NULL
} GemmOut;

// A BF16 operand of cuBLASLt's column-major product as stored: columns ld apart, op(A) = A^T when trans.
typedef struct {
    const floatX* ptr;
    int ld;
    int trans;
} MatmulOperand;

typedef struct {
    int m, n, k, lda, ldb, ldd, trans_a, trans_b, out_fp32, bias, accumulate, alpha_on_device;
} MatmulKey;

typedef struct {
    MatmulKey key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
} MatmulPlan;

#define MATMUL_MAX_PLANS 128
static struct {
    cublasLtHandle_t handle;
    void* workspace;
    size_t workspace_bytes;
    float* constants;          // device {0, 1}: beta for device pointer mode
    MatmulPlan plans[MATMUL_MAX_PLANS];
    int num_plans;
} g_matmul;

void matmul_init(void) {
    cublas_check(cublasLtCreate(&g_matmul.handle));
    g_matmul.workspace_bytes = 64ull << 20;  // Hopper kernels want 32 MiB+; 64 leaves room
    cuda_malloc(&g_matmul.workspace, g_matmul.workspace_bytes);
    const float host_constants[2] = {0.0f, 1.0f};
    cuda_check(cudaMalloc(&g_matmul.constants, sizeof(host_constants)));
    cuda_check(cudaMemcpy(g_matmul.constants, host_constants, sizeof(host_constants), cudaMemcpyHostToDevice));
}

void matmul_destroy(void) {
    for (int i = 0; i < g_matmul.num_plans; i++) {
        MatmulPlan* p = &g_matmul.plans[i];
        cublasLtMatmulDescDestroy(p->desc);
        cublasLtMatrixLayoutDestroy(p->a);
        cublasLtMatrixLayoutDestroy(p->b);
        cublasLtMatrixLayoutDestroy(p->d);
    }
    g_matmul.num_plans = 0;
    cudaFree(g_matmul.workspace);
    cudaFree(g_matmul.constants);
    cublasLtDestroy(g_matmul.handle);
}

// cuBLASLt's first choice of algorithm for a descriptor and layouts (C = D), within our workspace;
// CUBLAS_STATUS_NOT_SUPPORTED when it has none.
static cublasStatus_t matmul_heuristic(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                       cublasLtMatrixLayout_t d, cublasLtMatmulAlgo_t* algo) {
    cublasLtMatmulPreference_t pref;
    cublas_check(cublasLtMatmulPreferenceCreate(&pref));
    cublas_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &g_matmul.workspace_bytes, sizeof(size_t)));
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(g_matmul.handle, desc, a, b, d, d, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st == CUBLAS_STATUS_SUCCESS && !found) st = CUBLAS_STATUS_NOT_SUPPORTED;
    if (st == CUBLAS_STATUS_SUCCESS) *algo = result.algo;
    return st;
}

static MatmulPlan* matmul_plan(const MatmulKey* key) {
    for (int i = 0; i < g_matmul.num_plans; i++)
        if (memcmp(&g_matmul.plans[i].key, key, sizeof(MatmulKey)) == 0) return &g_matmul.plans[i];
    fail_if(g_matmul.num_plans == MATMUL_MAX_PLANS, "matmul: more than %d distinct GEMM shapes", MATMUL_MAX_PLANS);
    MatmulPlan* p = &g_matmul.plans[g_matmul.num_plans++];
    memset(p, 0, sizeof(*p));
    p->key = *key;
    cublas_check(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = key->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = key->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublas_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    cublas_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    cublasLtEpilogue_t epi = key->bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    cublas_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    if (key->bias) {
        cudaDataType_t bt = CUDA_R_16BF;
        cublas_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
    }
    if (key->alpha_on_device) {
        cublasLtPointerMode_t pm = CUBLASLT_POINTER_MODE_DEVICE;
        cublas_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm, sizeof(pm)));
    }
    // column-major shapes of the stored operands
    int a_rows = key->trans_a ? key->k : key->m, a_cols = key->trans_a ? key->m : key->k;
    int b_rows = key->trans_b ? key->n : key->k, b_cols = key->trans_b ? key->k : key->n;
    cudaDataType_t dt = key->out_fp32 ? CUDA_R_32F : CUDA_R_16BF;
    cublas_check(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, a_rows, a_cols, key->lda));
    cublas_check(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, b_rows, b_cols, key->ldb));
    cublas_check(cublasLtMatrixLayoutCreate(&p->d, dt, key->m, key->n, key->ldd));

    const cublasStatus_t st = matmul_heuristic(p->desc, p->a, p->b, p->d, &p->algo);
    fail_if(st != CUBLAS_STATUS_SUCCESS,
            "cuBLASLt has no algorithm for m=%d n=%d k=%d (transA=%d transB=%d out_fp32=%d bias=%d); "
            "dimensions must be multiples of 8", key->m, key->n, key->k, key->trans_a, key->trans_b,
            key->out_fp32, key->bias);
    return p;
}

// D (m x n, column-major: d's rows are its columns) = alpha * op(A) op(B) [+ D if d.accumulate] [+ d.bias]
static void matmul_lt(GemmOut d, MatmulOperand a, MatmulOperand b, int m, int n, int k, const float* alpha_dev,
                      cudaStream_t stream) {
    MatmulKey key = {m, n, k, a.ld, b.ld, d.ld, a.trans, b.trans, d.f32, d.bias != NULL, d.accumulate, alpha_dev != NULL};
    MatmulPlan* p = matmul_plan(&key);
    const floatX* bias = d.bias;
    if (bias) cublas_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    const float one = 1.0f, zero = 0.0f;
    const void* alpha = alpha_dev ? (const void*)alpha_dev : (const void*)&one;
    const void* beta = alpha_dev ? (const void*)(g_matmul.constants + (d.accumulate ? 1 : 0))
                                 : (const void*)(d.accumulate ? &one : &zero);
    cublas_check(cublasLtMatmul(g_matmul.handle, p->desc, alpha, a.ptr, p->a, b.ptr, p->b, beta, d.ptr, p->d, d.ptr, p->d,
                                &p->algo, g_matmul.workspace, g_matmul.workspace_bytes, stream));
}

// out (N x OC, BF16, rows out.ld apart) = alpha * inp (N x K) @ weight (OC x K)^T + out.bias (OC, may be NULL)
void matmul_forward_ld(GemmOut out, const floatX* inp, const floatX* weight, int N, int K, int OC,
                       const float* alpha_dev, cudaStream_t stream) {
    matmul_lt(out, {weight, K, /*trans=*/1}, {inp, K, /*trans=*/0}, OC, N, K, alpha_dev, stream);
}
void matmul_forward(floatX* out, const floatX* inp, const floatX* weight, const floatX* bias,
                    int N, int K, int OC, const float* alpha_dev, cudaStream_t stream) {
    matmul_forward_ld({.ptr = out, .ld = OC, .f32 = 0, .accumulate = 0, .bias = bias}, inp, weight, N, K, OC, alpha_dev,
                      stream);
}

// dinp (N x K, BF16 or FP32 as dinp.f32 says, rows dinp.ld apart) = [dinp +] alpha * dout (N x OC, rows ld_dout
// apart) @ weight (OC x K). FP32: a sum of several GEMMs that must round to BF16 once, at the end.
void matmul_dgrad_ld(GemmOut dinp, const floatX* dout, int ld_dout, const floatX* weight, int N, int K, int OC,
                     const float* alpha_dev, cudaStream_t stream) {
    matmul_lt(dinp, {weight, K, /*trans=*/0}, {dout, ld_dout, /*trans=*/0}, K, N, OC, alpha_dev, stream);
}
void matmul_dgrad(floatX* dinp, const floatX* dout, const floatX* weight,
                  int N, int K, int OC, const float* alpha_dev, cudaStream_t stream) {
    matmul_dgrad_ld({.ptr = dinp, .ld = K, .f32 = 0, .accumulate = 0, .bias = NULL}, dout, OC, weight, N, K, OC,
                    alpha_dev, stream);
}

// dweight (OC x K, FP32 and accumulated as dweight says, rows dweight.ld apart) [+]= alpha * dout (N x OC, rows
// ld_dout apart)^T @ inp (N x K)
void matmul_wgrad_ld(GemmOut dweight, const floatX* dout, int ld_dout, const floatX* inp,
                     int N, int K, int OC, const float* alpha_dev, cudaStream_t stream) {
    matmul_lt(dweight, {inp, K, /*trans=*/0}, {dout, ld_dout, /*trans=*/1}, K, OC, N, alpha_dev, stream);
}
// dweight (OC x K, FP32) += alpha * dout (N x OC)^T @ inp (N x K)
void matmul_wgrad(float* dweight, const floatX* dout, const floatX* inp,
                  int N, int K, int OC, const float* alpha_dev, cudaStream_t stream) {
    matmul_wgrad_ld({.ptr = dweight, .ld = K, .f32 = 1, .accumulate = 1, .bias = NULL}, dout, OC, inp, N, K, OC,
                    alpha_dev, stream);
}
