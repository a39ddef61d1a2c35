// matmul_fp8.cuh: GEMMs on FP8 (E4M3 x E4M3) tensor cores with one FP32 scale per row of each operand,
// for MXFP4 operands folded into E4M3 (fp8_fold.h).
// defines: Fp8Operand, matmul_fp8(), matmul_fp8_available(), matmul_fp8_reason()
// D (M x Nn, row-major, rows ldd apart) [+]= alpha * diag(sa) A B^T diag(sb) [+ bias]: A is M x K and B is
// Nn x K, both with K contiguous (cuBLASLt's FP8 GEMMs on Hopper take only this "TN" layout), sa and sb
// their per-row scales (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F, cuBLASLt 12.9+). Fast accumulation is
// off: inside an MMA chain Hopper's FP8 tensor cores add with less than FP32 precision, and cuBLASLt
// promotes the partial sums into FP32 only in this mode (dev/bench/bench_fp8_gemm.cu measures the
// difference to a BF16 GEMM of the same values).
// The split form, for the weight gradient's GEMMs (FP32 output accumulated, no bias, an output of at most
// FP8_SPLIT_MAX_BYTES): the FP8 GEMM without scales into an FP32 scratch, then D += alpha * sa_i * sb_j * P_ij
// (fp8_scale_add_kernel). Why: cuBLASLt's per-row scaled kernels for the d12 wgrad shapes (K = the tokens, 65,536)
// ran at 0.53-1.58x the BF16 GEMM's time, the split form at 0.48-0.60x (build/bench_fp8_fold on the H200,
// 2026-12-06); the scale-add reads and writes the small FP32 output twice. The scales are powers of two
// (fp8_fold.h), so sa_i sb_j P_ij is exact and D takes one rounding, as in cuBLASLt's epilogue; only the GEMM's
// accumulation order differs, as between any two cuBLASLt kernels (test_fp8_fold checks both forms against the
// exact sums).
#pragma once
#include "llmc/base/matmul.cuh"

typedef struct {
    int M, Nn, K, ldd, out_fp32, bias, accumulate, unscaled;   // unscaled: the split form's GEMM (no scale vectors)
} Fp8Key;

typedef struct {
    Fp8Key key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
} Fp8Plan;

#define MATMUL_FP8_MAX_PLANS 64
#define FP8_SPLIT_MAX_BYTES ((size_t)64 << 20)
static struct {
    Fp8Plan plans[MATMUL_FP8_MAX_PLANS];
    int num_plans;
    float* split_tmp;       // the split form's FP32 product (grown on demand, up to FP8_SPLIT_MAX_BYTES)
    size_t split_bytes;
    int one_step;           // tests and bench_fp8_fold only: the one-step form where the split form would run
} g_fp8;

// Returns NULL when this GPU and cuBLASLt run the FP8 path, else why not.
static inline const char* matmul_fp8_reason(void) {
    int dev = 0, major = 0;
    cuda_check(cudaGetDevice(&dev));
    cuda_check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    if (major < 9) return "FP8 GEMMs with per-row scales need compute capability 9.0 or newer";
    if (cublasLtGetVersion() < 120900) return "FP8 GEMMs with per-row scales need cuBLASLt 12.9 or newer";
    return NULL;
}
static inline int matmul_fp8_available(void) { return matmul_fp8_reason() == NULL; }

// Builds the descriptor, layouts and algorithm of one GEMM; returns the heuristic's status (the plan is
// usable when it is CUBLAS_STATUS_SUCCESS).
static cublasStatus_t matmul_fp8_try_plan(Fp8Plan* p, const Fp8Key* key) {
    // cuBLASLt is column-major: D^T (Nn x M) = B A^T, its "A" is our B (op T) and its "B" our A (op N)
    cublas_check(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublas_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    cublas_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    const cublasLtPointerMode_t pm = CUBLASLT_POINTER_MODE_DEVICE;
    cublas_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm, sizeof(pm)));
    const int8_t fast = 0;
    cublas_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
    if (!key->unscaled) {   // (unscaled: cuBLASLt's default, one scale of 1 per operand)
        const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
        cublas_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof(mode)));
        cublas_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof(mode)));
        // the heuristic wants the scale pointers set (to anything on the device); each call sets its own
        const float* any = g_matmul.constants;
        cublas_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &any, sizeof(any)));
        cublas_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &any, sizeof(any)));
    }
    const cublasLtEpilogue_t epi = key->bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    cublas_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    if (key->bias) {
        const cudaDataType_t bt = CUDA_R_16BF;
        cublas_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
        const void* any_bias = g_matmul.constants;
        cublas_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &any_bias, sizeof(any_bias)));
    }
    cublas_check(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_8F_E4M3, key->K, key->Nn, key->K));
    cublas_check(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_8F_E4M3, key->K, key->M, key->K));
    cublas_check(cublasLtMatrixLayoutCreate(&p->d, key->out_fp32 ? CUDA_R_32F : CUDA_R_16BF, key->Nn, key->M, key->ldd));
    return matmul_heuristic(p->desc, p->a, p->b, p->d, &p->algo);
}

static void matmul_fp8_release(Fp8Plan* p) {
    if (p->desc) cublasLtMatmulDescDestroy(p->desc);
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->b) cublasLtMatrixLayoutDestroy(p->b);
    if (p->d) cublasLtMatrixLayoutDestroy(p->d);
    p->desc = NULL; p->a = p->b = p->d = NULL;
}

static Fp8Plan* matmul_fp8_plan(const Fp8Key* key) {
    for (int i = 0; i < g_fp8.num_plans; i++)
        if (!memcmp(&g_fp8.plans[i].key, key, sizeof(Fp8Key))) return &g_fp8.plans[i];
    fail_if(g_fp8.num_plans == MATMUL_FP8_MAX_PLANS, "matmul_fp8: more than %d distinct GEMM shapes", MATMUL_FP8_MAX_PLANS);
    Fp8Plan* p = &g_fp8.plans[g_fp8.num_plans++];
    memset(p, 0, sizeof(*p));
    p->key = *key;
    const cublasStatus_t st = matmul_fp8_try_plan(p, key);
    fail_if(st != CUBLAS_STATUS_SUCCESS,
            "cuBLASLt %zu has no FP8 GEMM with per-row scales for M=%d N=%d K=%d (out_fp32=%d, status %d); "
            "use --fp4-gemm emulated", cublasLtGetVersion(), key->M, key->Nn, key->K, key->out_fp32, (int)st);
    return p;
}

// D (M x Nn, rows ldd apart) += alpha * sa_i * sb_j * P_ij, P the unscaled product (M x Nn, dense); 4 columns a thread.
__global__ void fp8_scale_add_kernel(float* d, int ldd, const float* p, const float* sa, const float* sb, int M, int Nn,
                                     const float* alpha) {
    const int q = Nn / 4;
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (int64_t)M * q) return;
    const int i = (int)(t / q), j = (int)(t - (int64_t)i * q) * 4;
    const float4 v = *(const float4*)(p + (size_t)i * Nn + j);
    const float4 b = make_float4(sb[j], sb[j + 1], sb[j + 2], sb[j + 3]);   // (sb need not be 16-byte aligned)
    const float a = sa[i], al = alpha ? *alpha : 1.0f;
    float4* o = (float4*)(d + (size_t)i * ldd + j);
    float4 r = *o;
    r.x += al * (v.x * (a * b.x));
    r.y += al * (v.y * (a * b.y));
    r.z += al * (v.z * (a * b.z));
    r.w += al * (v.w * (a * b.w));
    *o = r;
}

// Whether a GEMM takes the split form (see the top of this file); d and the scratch are 16-byte aligned.
static inline int matmul_fp8_split(int M, int Nn, int ldd, int out_fp32, const floatX* bias, int accumulate) {
    return !g_fp8.one_step && out_fp32 && accumulate && !bias && Nn % 4 == 0 && ldd % 4 == 0 &&
           (size_t)M * Nn * sizeof(float) <= FP8_SPLIT_MAX_BYTES;
}

// An operand of the FP8 GEMM: E4M3 values, K contiguous, and one FP32 scale per row.
typedef struct {
    const uint8_t* values;
    const float* row_scale;
} Fp8Operand;

// d (M x Nn, GemmOut of llmc/base/matmul.cuh) [+]= alpha * diag(a.row_scale) A B^T diag(b.row_scale) [+ d.bias]
static void matmul_fp8(GemmOut d, Fp8Operand a, Fp8Operand b, int M, int Nn, int K, const float* alpha_dev,
                       cudaStream_t stream) {
    const floatX* bias = d.bias;
    const float* sa = a.row_scale;
    const float* sb = b.row_scale;
    if (matmul_fp8_split(M, Nn, d.ld, d.f32, bias, d.accumulate)) {
        const size_t bytes = (size_t)M * Nn * sizeof(float);
        if (bytes > g_fp8.split_bytes) {   // (the first step of a run: every later one reuses it)
            if (g_fp8.split_tmp) { cuda_check(cudaStreamSynchronize(stream)); cuda_check(cudaFree(g_fp8.split_tmp)); }
            cuda_check(cudaMalloc(&g_fp8.split_tmp, bytes));
            g_fp8.split_bytes = bytes;
        }
        Fp8Key key = {M, Nn, K, Nn, 1, 0, 0, 1};
        Fp8Plan* p = matmul_fp8_plan(&key);
        cublas_check(cublasLtMatmul(g_matmul.handle, p->desc, g_matmul.constants + 1, b.values, p->a, a.values, p->b,
                                    g_matmul.constants, g_fp8.split_tmp, p->d, g_fp8.split_tmp, p->d, &p->algo,
                                    g_matmul.workspace, g_matmul.workspace_bytes, stream));
        const int64_t n = (int64_t)M * (Nn / 4);
        fp8_scale_add_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>((float*)d.ptr, d.ld, g_fp8.split_tmp, sa, sb,
                                                                           M, Nn, alpha_dev);
        cuda_check_last();
        return;
    }
    Fp8Key key = {M, Nn, K, d.ld, d.f32, bias != NULL, d.accumulate, 0};
    Fp8Plan* p = matmul_fp8_plan(&key);
    cublas_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sb, sizeof(sb)));
    cublas_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sa, sizeof(sa)));
    if (bias) cublas_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    const float* alpha = alpha_dev ? alpha_dev : g_matmul.constants + 1;
    const float* beta = g_matmul.constants + (d.accumulate ? 1 : 0);
    cublas_check(cublasLtMatmul(g_matmul.handle, p->desc, alpha, b.values, p->a, a.values, p->b, beta, d.ptr, p->d, d.ptr,
                                p->d, &p->algo, g_matmul.workspace, g_matmul.workspace_bytes, stream));
}

static void matmul_fp8_destroy(void) {
    for (int i = 0; i < g_fp8.num_plans; i++) matmul_fp8_release(&g_fp8.plans[i]);
    g_fp8.num_plans = 0;
    if (g_fp8.split_tmp) cudaFree(g_fp8.split_tmp);
    g_fp8.split_tmp = NULL;
    g_fp8.split_bytes = 0;
}
