// matmul_fp4.cuh: the native NVFP4 GEMM of Blackwell (compute capability 10.x) through cuBLASLt, chosen at
// run time in the same binary as the emulated path (dequantized BF16 operands through matmul.cuh).
// defines: matmul_fp4_native_available(), matmul_fp4_native_reason(), matmul_fp4_scale_bytes(),
//          fp4_swizzle_scales_gpu(), fp4_swizzle_scales_cpu(), matmul_fp4_alpha_gpu(), matmul_fp4_native(),
//          matmul_fp4_forward(), matmul_fp4_dgrad(), matmul_fp4_wgrad(), matmul_fp4_destroy()
// The data layout (codes, swizzled scales, alpha) is llmc/fp4/matmul_fp4_layout.h, with a CPU reference
// (matmul_fp4_reference_cpu) that defines exactly what matmul_fp4_native computes.
//
// The GEMM. cuBLASLt supports FP4 only as "TN": both operands K-major (lda = ldb = K), which is how our
// quantizer stores every packed copy (the column-wise copy is stored transposed). So every GEMM of a linear
// layer is one call of
//   matmul_fp4_native(out, a, b, M, N, K, alpha)
//   a: M x K packed (M*K/2 bytes) + swizzled scales of its M x K/16 scale matrix (an Fp4Operand, matmul_fp4_layout.h)
//   b: N x K packed (N*K/2 bytes) + swizzled scales of its N x K/16 scale matrix
//   out (a GemmOut, llmc/base/matmul.cuh: N x M, row-major, rows M apart, BF16 or FP32)
//       = alpha * b @ a^T  [+ out.bias (M, BF16)]  [+ out if out.accumulate]
//   i.e. out[n][m] = alpha * sum_k a[m][k] * b[n][k]
// In cuBLASLt's column-major terms that is D (M x N, ldd = M) = alpha * op(A) op(B) + beta C with
// transa = T on A stored K x M (lda = K) and transb = N on B stored K x N (ldb = K): a row-major N x M
// matrix is the same memory as a column-major M x N one, exactly as llmc/base/matmul.cuh computes out^T.
// alpha (device float) = a's scale_dec * b's scale_dec (matmul_fp4_alpha_gpu), no host sync.
//
// The three GEMMs of a linear layer (inp N_tok x C, weight OC x C, out N_tok x OC, all row-major):
//   fprop  out (N_tok x OC)  = X @ W^T       a = W  row-wise    (OC x C),     b = X  row-wise    (N_tok x C)
//          M = OC, N = N_tok, K = C, bias allowed                                  -> matmul_fp4_forward
//   dgrad  dX (N_tok x C)    = dY @ W        a = W  column-wise (C x OC),     b = dY row-wise    (N_tok x OC)
//          M = C, N = N_tok, K = OC                                                -> matmul_fp4_dgrad
//   wgrad  dW (OC x C, FP32) += dY^T @ X     a = X  column-wise (C x N_tok),  b = dY column-wise (OC x N_tok)
//          M = C, N = OC, K = N_tok, accumulate                                    -> matmul_fp4_wgrad
// ("column-wise" = the quantizer's axis-0 copy, stored transposed: its rows are the view's columns.)
// Shapes: K % 32 == 0 (cuBLASLt); M and N as cuBLASLt accepts them (multiples of 16 are safe; a shape it
// refuses is a clear error). Pointers 16-byte aligned (cudaMalloc gives 256).
//
// Availability. matmul_fp4_native_available() is 1 only when (1) the toolkit defines the FP4 types
// (CUDA >= 12.8 headers), (2) the device is cc 10.x, (3) this binary carries cc 10.x device code (GPU_ARCHS
// with 100a), (4) cuBLASLt offers an algorithm for the configuration and (5) a small self-check GEMM on the
// device matches matmul_fp4_reference_cpu (so a layout misunderstanding disables the path instead of
// training on garbage). It probes once and caches; matmul_fp4_native_reason() says why not, in one line.
// Needs matmul_init() first (handle, workspace and the {0, 1} device constants are shared with matmul.cuh);
// call matmul_fp4_destroy() before matmul_destroy().
//
// Plans (descriptor, layouts, algorithm) are built once per shape and cached, like matmul.cuh; only the
// scale and bias pointers are set per call.
#pragma once
#include <cuda.h>
#include "llmc/base/matmul.cuh"
#include "llmc/fp4/matmul_fp4_layout.h"

// FP4 types and block-scale modes: CUDA_R_4F_E2M1 and CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3 arrived with
// CUDA 12.8 / cuBLAS 12.8. Older toolkits compile the rest and report the path unavailable.
#if defined(CUDA_VERSION) && CUDA_VERSION >= 12080 && defined(CUBLAS_VERSION) && CUBLAS_VERSION >= 120800
#define MATMUL_FP4_HAVE_LT 1
#else
#define MATMUL_FP4_HAVE_LT 0
#endif

// ---------------------------------------------------------------------------------------------------
// Scale swizzle on the device (plain CUDA, runs on any GPU): one thread per 4 destination bytes, which
// are 4 consecutive 16-blocks of one row (one source read of up to 4 bytes, one 32-bit store).

__global__ void fp4_swizzle_scales_kernel(uint32_t* __restrict__ dst, const uint8_t* __restrict__ src, int R, int C,
                                          int64_t words) {
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= words) return;
    int64_t r, c;
    matmul_fp4_swizzle_source(4 * t, C, &r, &c);    // c % 4 == 0: bytes 4t..4t+3 are (r, c..c+3)
    uint32_t w = 0;
    if (r < R) {
        const uint8_t* row = src + r * (int64_t)C;
#pragma unroll
        for (int j = 0; j < 4; j++)
            if (c + j < C) w |= (uint32_t)row[c + j] << (8 * j);
    }
    dst[t] = w;
}

// dst: matmul_fp4_scale_bytes(R, C) bytes, 4-byte aligned; src: R x C row-major (the quantizer's scales).
static inline void fp4_swizzle_scales_gpu(uint8_t* dst, const uint8_t* src, int R, int C, cudaStream_t s) {
    fail_if((uintptr_t)dst % 4, "fp4_swizzle_scales_gpu: dst must be 4-byte aligned");
    const int64_t words = (int64_t)matmul_fp4_scale_bytes(R, C) / 4;
    fp4_swizzle_scales_kernel<<<(unsigned)ceil_div(words, 256), 256, 0, s>>>((uint32_t*)dst, src, R, C, words);
    cuda_check_last();
}

// alpha = a_dec * b_dec on the device (the two operands' tensor scale_dec).
__global__ void matmul_fp4_alpha_kernel(float* alpha, const float* a_dec, const float* b_dec) {
    *alpha = *a_dec * *b_dec;
}
static inline void matmul_fp4_alpha_gpu(float* alpha, const float* a_dec, const float* b_dec, cudaStream_t s) {
    matmul_fp4_alpha_kernel<<<1, 1, 0, s>>>(alpha, a_dec, b_dec);
    cuda_check_last();
}

// Reports the architecture of the device code this binary runs on this GPU (0 from a host-only pass).
__global__ void matmul_fp4_arch_probe_kernel(int* arch) {
#if defined(__CUDA_ARCH__)
    *arch = __CUDA_ARCH__;
#endif
}

// ---------------------------------------------------------------------------------------------------
// Plans

typedef struct {
    int m, n, k, out_fp32, bias, accumulate;
} MatmulFp4Key;

typedef struct {
    MatmulFp4Key key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
} MatmulFp4Plan;

#define MATMUL_FP4_MAX_PLANS 64
static struct {
    MatmulFp4Plan plans[MATMUL_FP4_MAX_PLANS];
    int num_plans;
    int state;              // -1 not probed, 0 unavailable, 1 available
    char reason[384];
} g_matmul_fp4 = {{}, 0, -1, ""};

static inline void matmul_fp4_plan_release(MatmulFp4Plan* p) {
    if (p->desc) cublasLtMatmulDescDestroy(p->desc);
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->b) cublasLtMatrixLayoutDestroy(p->b);
    if (p->d) cublasLtMatrixLayoutDestroy(p->d);
    memset(p, 0, sizeof(*p));
}

void matmul_fp4_destroy(void) {
    for (int i = 0; i < g_matmul_fp4.num_plans; i++) matmul_fp4_plan_release(&g_matmul_fp4.plans[i]);
    g_matmul_fp4.num_plans = 0;
    g_matmul_fp4.state = -1;   // a later matmul_init() + call probes again
}

#if MATMUL_FP4_HAVE_LT
// Builds the plan into *p; returns the first failing cuBLASLt status (CUBLAS_STATUS_NOT_SUPPORTED when the
// heuristic finds nothing), never exits: the probe uses it to decide availability.
static cublasStatus_t matmul_fp4_plan_build(MatmulFp4Plan* p, const MatmulFp4Key* key, const void* a_scales,
                                            const void* b_scales) {
    memset(p, 0, sizeof(*p));
    p->key = *key;
    cublasStatus_t st;
#define FP4_TRY(x) do { st = (x); if (st != CUBLAS_STATUS_SUCCESS) return st; } while (0)
    FP4_TRY(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    FP4_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    FP4_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3;
    FP4_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof(mode)));
    FP4_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof(mode)));
    FP4_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scales, sizeof(a_scales)));
    FP4_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scales, sizeof(b_scales)));
    // BF16 / FP32 output: no D scale, no D output scale (those are for FP4 / FP8 outputs).
    const cublasLtPointerMode_t pm = CUBLASLT_POINTER_MODE_DEVICE;   // alpha and beta are device floats
    FP4_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm, sizeof(pm)));
    const cublasLtEpilogue_t epi = key->bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    FP4_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    if (key->bias) {
        const cudaDataType_t bt = CUDA_R_16BF;
        FP4_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
    }
    // Layout sizes and leading dimensions count FP4 elements, not bytes.
    FP4_TRY(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_4F_E2M1, key->k, key->m, key->k));
    FP4_TRY(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_4F_E2M1, key->k, key->n, key->k));
    FP4_TRY(cublasLtMatrixLayoutCreate(&p->d, key->out_fp32 ? CUDA_R_32F : CUDA_R_16BF, key->m, key->n, key->m));

    cublasLtMatmulPreference_t pref;
    FP4_TRY(cublasLtMatmulPreferenceCreate(&pref));
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                              &g_matmul.workspace_bytes, sizeof(size_t));
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(g_matmul.handle, p->desc, p->a, p->b, p->d, p->d, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (found == 0) return CUBLAS_STATUS_NOT_SUPPORTED;
    p->algo = result.algo;
    return CUBLAS_STATUS_SUCCESS;
#undef FP4_TRY
}

// The cached plan for key, built on first use; NULL (with *status) if cuBLASLt refuses it.
static MatmulFp4Plan* matmul_fp4_plan(const MatmulFp4Key* key, const void* a_scales, const void* b_scales,
                                      cublasStatus_t* status) {
    *status = CUBLAS_STATUS_SUCCESS;
    for (int i = 0; i < g_matmul_fp4.num_plans; i++)
        if (memcmp(&g_matmul_fp4.plans[i].key, key, sizeof(MatmulFp4Key)) == 0) return &g_matmul_fp4.plans[i];
    fail_if(g_matmul_fp4.num_plans == MATMUL_FP4_MAX_PLANS, "matmul_fp4: more than %d distinct GEMM shapes",
            MATMUL_FP4_MAX_PLANS);
    MatmulFp4Plan* p = &g_matmul_fp4.plans[g_matmul_fp4.num_plans];
    *status = matmul_fp4_plan_build(p, key, a_scales, b_scales);
    if (*status != CUBLAS_STATUS_SUCCESS) { matmul_fp4_plan_release(p); return NULL; }
    g_matmul_fp4.num_plans++;
    return p;
}

static cublasStatus_t matmul_fp4_launch(MatmulFp4Plan* p, void* out, Fp4Operand a, Fp4Operand b, const floatX* bias,
                                        const float* alpha_dev, cudaStream_t s) {
    const uint8_t* a_scales = a.scales;
    const uint8_t* b_scales = b.scales;
    cublasStatus_t st;
    st = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scales, sizeof(a_scales));
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    st = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scales, sizeof(b_scales));
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (bias) {
        st = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
        if (st != CUBLAS_STATUS_SUCCESS) return st;
    }
    const float* beta = g_matmul.constants + (p->key.accumulate ? 1 : 0);
    return cublasLtMatmul(g_matmul.handle, p->desc, alpha_dev, a.codes, p->a, b.codes, p->b, beta, out, p->d, out, p->d,
                          &p->algo, g_matmul.workspace, g_matmul.workspace_bytes, s);
}
#endif  // MATMUL_FP4_HAVE_LT

// ---------------------------------------------------------------------------------------------------
// Availability probe (once per process)

static inline int matmul_fp4_unavailable(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_matmul_fp4.reason, sizeof(g_matmul_fp4.reason), fmt, ap);
    va_end(ap);
    g_matmul_fp4.state = 0;
    return 0;
}

#if MATMUL_FP4_HAVE_LT
// The self-check's inputs, the same for every configuration: the operands, alpha and the bias on the device, and
// on the host what an accumulated output holds before the GEMM.
typedef struct {
    Fp4Operand a, b;
    const float* alpha;
    const floatX* bias;       // used where the configuration has one
    const float* before;
} MatmulFp4Probe;

// A 256 x 128 x 128 GEMM (two 128-row scale tiles for a, two 4-block tile columns, every code and four
// scale exponents present) through fp4_swizzle_scales_gpu + cuBLASLt, against matmul_fp4_reference_cpu
// (the spec of this path's layout; the comparison with the emulated path is dev/test/test_matmul_fp4_gpu.cu),
// in each configuration the trainer uses: FP32 out (self-check proper), BF16 out with a bias (fprop),
// FP32 out accumulated onto what the output held (wgrad, beta = 1).
// The bound separates the two ways the result can differ. A layout error (nibble order, scale layout,
// operand orientation) moves an output by the order of its magnitude m = |alpha| sum_k |a_k b_k| (+ |bias|,
// + |out before|): about m / sqrt(K) ~ m / 11 for random signs. Accumulation is NVIDIA's business:
// the FP4 tensor cores' adder width is not documented (Hopper's FP8 MMA keeps about 14 significant bits
// inside a chain), so a difference up to m / 128 (7 bits kept) is accepted as accumulation, plus the
// BF16 rounding of a BF16 output. The largest difference seen, relative to m, is reported either way.
static double matmul_fp4_check_config(const MatmulFp4Key* key, const MatmulFp4Probe* in, const float* ref,
                                      const float* mag, char* why, size_t whylen) {
    const int M = key->m, N = key->n;
    const size_t n = (size_t)M * N, out_bytes = n * (key->out_fp32 ? 4 : 2);
    void* d_out;
    cuda_check(cudaMalloc(&d_out, out_bytes));
    if (key->accumulate) cuda_check(cudaMemcpy(d_out, in->before, n * sizeof(float), cudaMemcpyHostToDevice));
    cublasStatus_t st;
    MatmulFp4Plan* p = matmul_fp4_plan(key, in->a.scales, in->b.scales, &st);
    double worst = -1.0;
    if (!p) {
        snprintf(why, whylen, "cuBLASLt %d has no NVFP4 algorithm (status %d) for out_fp32=%d bias=%d accumulate=%d",
                 (int)cublasLtGetVersion(), (int)st, key->out_fp32, key->bias, key->accumulate);
    } else if ((st = matmul_fp4_launch(p, d_out, in->a, in->b, key->bias ? in->bias : NULL, in->alpha, 0)) !=
               CUBLAS_STATUS_SUCCESS) {
        snprintf(why, whylen, "cuBLASLt rejected the NVFP4 probe GEMM at launch (status %d; out_fp32=%d bias=%d "
                 "accumulate=%d)", (int)st, key->out_fp32, key->bias, key->accumulate);
    } else {
        float* got = (float*)xmalloc(n * sizeof(float));
        if (key->out_fp32) {
            cuda_check(cudaMemcpy(got, d_out, n * sizeof(float), cudaMemcpyDeviceToHost));
        } else {
            uint16_t* h = (uint16_t*)xmalloc(n * sizeof(uint16_t));
            cuda_check(cudaMemcpy(h, d_out, n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < n; i++) got[i] = bf16_bits_to_float(h[i]);
            free(h);
        }
        worst = 0.0;
        size_t at = 0, bad = 0;
        for (size_t i = 0; i < n; i++) {
            const double err = fabs((double)got[i] - (double)ref[i]);
            const double round = key->out_fp32 ? 0.0 : fabs((double)ref[i]) / 256.0;
            const double r = (err - round > 0 ? err - round : 0.0) / ((double)mag[i] + 1e-30);
            if (!(r <= 1.0 / 128)) bad++;
            if (!(r <= worst)) { worst = r; at = i; }   // NaN counts as worst
        }
        if (bad)
            snprintf(why, whylen, "the NVFP4 self-check GEMM (out_fp32=%d bias=%d accumulate=%d) disagrees with the CPU "
                     "reference in %zu of %zu outputs, worst out[%zu] = %g, want %g (%.3g of its magnitude; accumulation "
                     "error is allowed 1/128): layout contract broken", key->out_fp32, key->bias, key->accumulate, bad, n,
                     at, (double)got[at], (double)ref[at], worst);
        if (bad) worst = -1.0;
        free(got);
    }
    cudaFree(d_out);
    return worst;
}

static int matmul_fp4_self_check(char* why, size_t whylen, double* worst_seen) {
    const int M = 256, N = 128, K = 128, C = K / 16;
    const size_t n = (size_t)M * N, sa_bytes = matmul_fp4_scale_bytes(M, C), sb_bytes = matmul_fp4_scale_bytes(N, C);
    uint8_t* h_ac = (uint8_t*)xmalloc((size_t)M * K / 2);
    uint8_t* h_bc = (uint8_t*)xmalloc((size_t)N * K / 2);
    uint8_t* h_abs_ac = (uint8_t*)xmalloc((size_t)M * K / 2);
    uint8_t* h_abs_bc = (uint8_t*)xmalloc((size_t)N * K / 2);
    uint8_t* h_as = (uint8_t*)xmalloc((size_t)M * C);
    uint8_t* h_bs = (uint8_t*)xmalloc((size_t)N * C);
    uint8_t* h_asw = (uint8_t*)xmalloc(sa_bytes);
    uint8_t* h_bsw = (uint8_t*)xmalloc(sb_bytes);
    float* ref = (float*)xmalloc(sizeof(float) * n);
    float* mag = (float*)xmalloc(sizeof(float) * n);
    float* before = (float*)xmalloc(sizeof(float) * n);
    float* bias = (float*)xmalloc(sizeof(float) * M);
    uint16_t* bias_bf16 = (uint16_t*)xmalloc(sizeof(uint16_t) * M);
    uint32_t x = 12345u;
#define FP4_LCG() (x = x * 1664525u + 1013904223u, x >> 24)
    for (int i = 0; i < M * K / 2; i++) h_ac[i] = (uint8_t)FP4_LCG();
    for (int i = 0; i < N * K / 2; i++) h_bc[i] = (uint8_t)FP4_LCG();
    for (int i = 0; i < M * C; i++) h_as[i] = (uint8_t)((6 + FP4_LCG() % 4) << 3);   // 2^-1 .. 2^2
    for (int i = 0; i < N * C; i++) h_bs[i] = (uint8_t)((6 + FP4_LCG() % 4) << 3);
    for (int i = 0; i < M; i++) {   // small integers: exact in BF16
        bias_bf16[i] = bf16_bits_rne((float)((int)(FP4_LCG() % 64) - 32));
        bias[i] = bf16_bits_to_float(bias_bf16[i]);
    }
    for (size_t i = 0; i < n; i++) before[i] = (float)((int)(FP4_LCG() % 256) - 128) * 0.25f;
#undef FP4_LCG
    for (int i = 0; i < M * K / 2; i++) h_abs_ac[i] = h_ac[i] & 0x77;   // sign bits off: |a|
    for (int i = 0; i < N * K / 2; i++) h_abs_bc[i] = h_bc[i] & 0x77;
    fp4_swizzle_scales_cpu(h_asw, h_as, M, C);
    fp4_swizzle_scales_cpu(h_bsw, h_bs, N, C);
    const float alpha = 0.5f;
    matmul_fp4_reference_cpu(mag, {h_abs_ac, h_asw}, {h_abs_bc, h_bsw}, M, N, K, alpha, NULL, 0);

    uint8_t *d_ac, *d_bc, *d_as, *d_bs, *d_asw, *d_bsw;
    float* d_alpha;
    floatX* d_bias;
    cuda_check(cudaMalloc(&d_ac, (size_t)M * K / 2));
    cuda_check(cudaMalloc(&d_bc, (size_t)N * K / 2));
    cuda_check(cudaMalloc(&d_as, (size_t)M * C));
    cuda_check(cudaMalloc(&d_bs, (size_t)N * C));
    cuda_check(cudaMalloc(&d_asw, sa_bytes));
    cuda_check(cudaMalloc(&d_bsw, sb_bytes));
    cuda_check(cudaMalloc(&d_alpha, sizeof(float)));
    cuda_check(cudaMalloc(&d_bias, sizeof(uint16_t) * M));
    cuda_check(cudaMemcpy(d_ac, h_ac, (size_t)M * K / 2, cudaMemcpyHostToDevice));
    cuda_check(cudaMemcpy(d_bc, h_bc, (size_t)N * K / 2, cudaMemcpyHostToDevice));
    cuda_check(cudaMemcpy(d_as, h_as, (size_t)M * C, cudaMemcpyHostToDevice));
    cuda_check(cudaMemcpy(d_bs, h_bs, (size_t)N * C, cudaMemcpyHostToDevice));
    cuda_check(cudaMemcpy(d_alpha, &alpha, sizeof(float), cudaMemcpyHostToDevice));
    cuda_check(cudaMemcpy(d_bias, bias_bf16, sizeof(uint16_t) * M, cudaMemcpyHostToDevice));
    fp4_swizzle_scales_gpu(d_asw, d_as, M, C, 0);
    fp4_swizzle_scales_gpu(d_bsw, d_bs, N, C, 0);

    // {out_fp32, bias, accumulate}: the self-check proper, fprop's BF16 + bias, wgrad's FP32 accumulate
    const MatmulFp4Key keys[3] = {{M, N, K, 1, 0, 0}, {M, N, K, 0, 1, 0}, {M, N, K, 1, 0, 1}};
    const MatmulFp4Probe in = {.a = {d_ac, d_asw}, .b = {d_bc, d_bsw}, .alpha = d_alpha, .bias = d_bias,
                               .before = before};
    int ok = 1;
    *worst_seen = 0.0;
    for (int c = 0; c < 3 && ok; c++) {
        const MatmulFp4Key* k = &keys[c];
        if (k->accumulate) memcpy(ref, before, n * sizeof(float));
        matmul_fp4_reference_cpu(ref, {h_ac, h_asw}, {h_bc, h_bsw}, M, N, K, alpha, k->bias ? bias : NULL,
                                 k->accumulate);
        float* m = (float*)xmalloc(sizeof(float) * n);
        for (size_t i = 0; i < n; i++)
            m[i] = mag[i] + (k->bias ? fabsf(bias[i % M]) : 0.0f) + (k->accumulate ? fabsf(before[i]) : 0.0f);
        double w = matmul_fp4_check_config(k, &in, ref, m, why, whylen);
        free(m);
        if (w < 0) ok = 0;
        else if (w > *worst_seen) *worst_seen = w;
    }
    cuda_check(cudaDeviceSynchronize());
    cudaFree(d_ac); cudaFree(d_bc); cudaFree(d_as); cudaFree(d_bs); cudaFree(d_asw); cudaFree(d_bsw);
    cudaFree(d_alpha); cudaFree(d_bias);
    free(h_ac); free(h_bc); free(h_abs_ac); free(h_abs_bc); free(h_as); free(h_bs); free(h_asw); free(h_bsw);
    free(ref); free(mag); free(before); free(bias); free(bias_bf16);
    return ok;
}
#endif

int matmul_fp4_native_available(void) {
    if (g_matmul_fp4.state >= 0) return g_matmul_fp4.state;
#if !MATMUL_FP4_HAVE_LT
    return matmul_fp4_unavailable("built with CUDA %d / cuBLAS %d headers; the FP4 GEMM types need CUDA >= 12.8",
                                  (int)CUDART_VERSION, (int)CUBLAS_VERSION);
#else
    int dev = 0, major = 0, minor = 0;
    if (device_count_or_zero() == 0) return matmul_fp4_unavailable("no CUDA GPU on this machine");
    cuda_check(cudaGetDevice(&dev));
    cuda_check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    cuda_check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    if (major != 10)
        return matmul_fp4_unavailable("native NVFP4 GEMM needs compute capability 10.x (this GPU is %d.%d)", major, minor);
    // Which device code of this binary runs here: the path is meant for binaries built for sm_100a.
    int* d_arch;
    int arch = 0;
    cuda_check(cudaMalloc(&d_arch, sizeof(int)));
    cuda_check(cudaMemset(d_arch, 0, sizeof(int)));
    matmul_fp4_arch_probe_kernel<<<1, 1>>>(d_arch);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaMemcpy(&arch, d_arch, sizeof(int), cudaMemcpyDeviceToHost);
    cudaFree(d_arch);
    if (e != cudaSuccess)
        return matmul_fp4_unavailable("this binary has no device code for compute capability %d.%d (%s); "
                                      "build with GPU_ARCHS=100a", major, minor, cudaGetErrorString(e));
    if (arch < 1000 || arch >= 1100)
        return matmul_fp4_unavailable("this binary runs sm_%d code on this cc %d.%d GPU; build with GPU_ARCHS "
                                      "including 100a", arch / 10, major, minor);
    fail_if(g_matmul.handle == NULL, "matmul_fp4_native_available: call matmul_init() first");
    // the headers said 12.8+; the library loaded at run time must be as new (an older one on the library
    // path has no FP4 types and would refuse every descriptor)
    const size_t lt_version = cublasLtGetVersion();
    if (lt_version < 120800)
        return matmul_fp4_unavailable("cuBLASLt %zu is loaded at run time (built against %d); the NVFP4 GEMM needs "
                                      "12.8 or newer on the library path", lt_version, (int)CUBLAS_VERSION);
    char why[384];
    double worst = 0.0;
    if (!matmul_fp4_self_check(why, sizeof(why), &worst)) {
        matmul_fp4_destroy();            // drop any probe plans
        return matmul_fp4_unavailable("%s", why);
    }
    snprintf(g_matmul_fp4.reason, sizeof(g_matmul_fp4.reason),
             "native NVFP4 GEMM available (cc %d.%d, cuBLASLt %zu, self-check passed in 3 configurations, largest "
             "difference %.2g of the output's magnitude)", major, minor, lt_version, worst);
    g_matmul_fp4.state = 1;
    return 1;
#endif
}

// One line: why the native path is off (or that it is on). Probes if not done yet.
const char* matmul_fp4_native_reason(void) {
    matmul_fp4_native_available();
    return g_matmul_fp4.reason;
}

// ---------------------------------------------------------------------------------------------------
// The GEMM (see the top of the file for the contract and the mapping of the three GEMMs).

void matmul_fp4_native(GemmOut out, Fp4Operand a, Fp4Operand b, int M, int N, int K, const float* alpha_dev,
                       cudaStream_t s) {
    fail_if(!matmul_fp4_native_available(), "matmul_fp4_native: %s", matmul_fp4_native_reason());
    fail_if(M <= 0 || N <= 0 || K <= 0 || K % 32, "matmul_fp4_native: M=%d N=%d K=%d; K must be a positive "
            "multiple of 32", M, N, K);
    fail_if(out.ld != M, "matmul_fp4_native: the output's rows must be M = %d apart (got ld %d)", M, out.ld);
    fail_if(alpha_dev == NULL, "matmul_fp4_native: alpha must be a device float (a_dec * b_dec)");
    fail_if(((uintptr_t)out.ptr | (uintptr_t)a.codes | (uintptr_t)b.codes | (uintptr_t)a.scales |
             (uintptr_t)b.scales) % 16, "matmul_fp4_native: operands, scales and output must be "
            "16-byte aligned");
#if MATMUL_FP4_HAVE_LT
    MatmulFp4Key key = {M, N, K, out.f32 ? 1 : 0, out.bias != NULL, out.accumulate ? 1 : 0};
    cublasStatus_t st;
    MatmulFp4Plan* p = matmul_fp4_plan(&key, a.scales, b.scales, &st);
    fail_if(!p, "cuBLASLt has no NVFP4 algorithm for M=%d N=%d K=%d (out_fp32=%d bias=%d accumulate=%d), "
            "status %d; M and N multiples of 16 and K a multiple of 32 are the safe shapes",
            M, N, K, key.out_fp32, key.bias, key.accumulate, (int)st);
    cublas_check(matmul_fp4_launch(p, out.ptr, a, b, out.bias, alpha_dev, s));
#else
    (void)out; (void)s;
#endif
}

// The three GEMMs of a linear layer in the terms of llmc/base/matmul.cuh (inp N x C, weight OC x C, out N x OC;
// "rw" = row-wise copy, "cw" = column-wise copy; scales already swizzled; alpha = dec * dec on the device).

// out (N x OC, BF16) = alpha * inp @ weight^T + bias (OC, may be NULL)
void matmul_fp4_forward(floatX* out, Fp4Operand inp_rw, Fp4Operand w_rw, const floatX* bias, int N, int C, int OC,
                        const float* alpha_dev, cudaStream_t s) {
    const GemmOut o = {.ptr = out, .ld = OC, .f32 = 0, .accumulate = 0, .bias = bias};
    matmul_fp4_native(o, w_rw, inp_rw, OC, N, C, alpha_dev, s);
}

// dinp (N x C, BF16) = alpha * dout @ weight
void matmul_fp4_dgrad(floatX* dinp, Fp4Operand dout_rw, Fp4Operand w_cw, int N, int C, int OC, const float* alpha_dev,
                      cudaStream_t s) {
    const GemmOut o = {.ptr = dinp, .ld = C, .f32 = 0, .accumulate = 0, .bias = NULL};
    matmul_fp4_native(o, w_cw, dout_rw, C, N, OC, alpha_dev, s);
}

// dweight (OC x C, FP32) += alpha * dout^T @ inp
void matmul_fp4_wgrad(float* dweight, Fp4Operand dout_cw, Fp4Operand inp_cw, int N, int C, int OC,
                      const float* alpha_dev, cudaStream_t s) {
    const GemmOut o = {.ptr = dweight, .ld = C, .f32 = 1, .accumulate = 1, .bias = NULL};
    matmul_fp4_native(o, inp_cw, dout_cw, C, OC, N, alpha_dev, s);
}
