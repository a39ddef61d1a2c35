// bench_fp8_fold.cu: the FP8 fold (quant.cuh with FP8 targets, fp8_fold.h) against the fake-quant copy of
// the same spec, at GPT-2 training shapes (d12's and d36's activations and weights), both passes and each alone,
// and the fold's extra memset.
// "fold" is quantize_fast_gpu as the trainer calls it (for the row-wise RNE copies one pass,
// qf_rowfold_kernel); "o.amax" + "o.apply" are the amax and apply passes called apart (always two), so
// fold against their sum is the one-pass kernel's gain, measured in the same run. "ahead": the second
// target's amax only (the forward's X pass, which takes wgrad.x's maxima for the backward).
// Also times matmul_fp8 against the BF16 GEMM (matmul.cuh) at the d12 linear shapes, with and without a bias.
// Usage: build/bench_fp8_fold [-n iters] [-f SUBSTR] [-s RxC]: -f / -s keep only the table rows whose config
// name holds SUBSTR / of that shape, and then skip the GEMMs (for a profiler: dev/bench/profile_quant.sh's way).
#include <vector>
#include "llmc/fp4/quant.cuh"
#include "llmc/fp4/matmul_fp8.cuh"
#include "dev/bench/bench_common.cuh"

struct Cfg {
    const char* name;
    const char* spec[2];
    int axis[2];
    int n;
    int ahead;   // the second target is amax-only
};

int main(int argc, char** argv) {
    Bench b;
    if (!bench_init(b, argc, argv, "bench_fp8_fold")) return 0;
    const Cfg cfgs[] = {
        {"mxfp4 row (fprop X)", {"mxfp4", NULL}, {1, 0}, 1},
        {"mxfp4 row + col ahead", {"mxfp4", "mxfp4"}, {1, 0}, 2, 1},
        {"DUAL mxfp4 dY", {"mxfp4", "mxfp4"}, {1, 0}, 2},
        {"mxfp4 col (wgrad X)", {"mxfp4", NULL}, {0, 0}, 1},
        {"mxfp4 col SR", {"mxfp4,sr", NULL}, {0, 0}, 1},
        {"DUAL mxfp4 dY SR", {"mxfp4,sr", "mxfp4,sr"}, {1, 0}, 2},
        {"DUAL mxfp4-2d dY SR", {"mxfp4-2d,sr", "mxfp4-2d,sr"}, {1, 0}, 2},
        {"mxfp4 col H16", {"mxfp4,h16", NULL}, {0, 0}, 1},
        {"W pair mxfp4-2d", {"mxfp4-2d", "mxfp4-2d"}, {1, 0}, 2},   // (mxfp4's W pair: the DUAL mxfp4 dY row)
    };
    // activations (the last: d36, B=16), then weights (OC x IC: qkv, attproj, fc, fcproj at d12 and d36)
    const int64_t shapes[][2] = {{65536, 3072}, {65536, 2304}, {65536, 768}, {16384, 5120}, {2304, 768}, {768, 768},
                                 {3072, 768}, {768, 3072}, {3840, 1280}, {1280, 1280}, {5120, 1280}, {1280, 5120}};
    printf("%-22s %-12s %8s %8s %8s %8s %8s %8s %8s\n", "config", "shape", "fake", "f.amax", "f.apply", "fold", "o.amax",
           "o.apply", "memset");
    for (auto& sh : shapes) {
        const int64_t R = sh[0], C = sh[1], n = R * C;
        if (!bench_wants_shape(b, R, C)) continue;
        uint16_t *in, *f[2];
        uint8_t* q[2];
        float *sc, *rs[2];
        uint32_t* mx[2];
        unsigned* below;
        cuda_check(cudaMalloc(&in, 2 * n));
        cuda_check(cudaMemset(in, 0x3F, 2 * n));
        for (int k = 0; k < 2; k++) {
            cuda_check(cudaMalloc(&f[k], 2 * n));
            cuda_check(cudaMalloc(&q[k], n));
            cuda_check(cudaMalloc(&rs[k], 4 * (R > C ? R : C)));
            cuda_check(cudaMalloc(&mx[k], 4 * (R > C ? R : C)));
        }
        cuda_check(cudaMalloc(&sc, 64));
        cuda_check(cudaMalloc(&below, 8));
        bench_fill_uniform(in, n);
        for (auto& c : cfgs) {
            if (!bench_wants(b, c.name)) continue;
            QuantParams p[2];
            QuantTarget tf[2], to[2];
            for (int k = 0; k < c.n; k++) {
                p[k] = bench_params(c.spec[k]);
                tf[k] = quant_target_fake(&p[k], c.axis[k], 5 + k, (floatX*)f[k], C, sc + 4 * k, sc + 4 * k + 1);
                to[k] = quant_target_fake(&p[k], c.axis[k], 5 + k, NULL, 0, sc + 4 * k + 2, sc + 4 * k + 3);
                to[k].fp8 = q[k]; to[k].fold_max = mx[k]; to[k].fold_scale = rs[k]; to[k].fold_below = below + k;
            }
            const floatX* x = (const floatX*)in;
            const size_t nmax = 4 * (R > C ? R : C);
            const int na = c.ahead, nq = c.n - na;   // targets quantized, amax-only
            double fk = bench_us(b, [&] { quantize_fast_gpu(x, R, C, C, tf, nq, 0, 0, na); });
            double fa = bench_us(b, [&] { quant_fast_amax_gpu(x, R, C, C, tf, c.n, 0); });
            double fp = bench_us(b, [&] { quant_fast_apply_gpu(x, R, C, C, tf, nq, 0); });
            double ms = bench_us(b, [&] { for (int k = 0; k < c.n; k++) cuda_check(cudaMemsetAsync(mx[k], 0, nmax, 0)); });
            double ok = bench_us(b, [&] {
                for (int k = 0; k < c.n; k++) cuda_check(cudaMemsetAsync(mx[k], 0, nmax, 0));
                quantize_fast_gpu(x, R, C, C, to, nq, 0, 0, na);
            });
            double oa = bench_us(b, [&] { quant_fast_amax_gpu(x, R, C, C, to, c.n, 0); });
            double op = bench_us(b, [&] { quant_fast_apply_gpu(x, R, C, C, to, nq, 0); });
            char shape[32];
            snprintf(shape, sizeof(shape), "%lldx%lld", (long long)R, (long long)C);
            printf("%-22s %-12s %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f\n", c.name, shape, fk, fa, fp, ok, oa, op, ms);
        }
        cudaFree(in);
        for (int k = 0; k < 2; k++) { cudaFree(f[k]); cudaFree(q[k]); cudaFree(rs[k]); cudaFree(mx[k]); }
        cudaFree(sc);
        cudaFree(below);
    }
    if (b.only || b.shape[0]) return 0;   // one row of the table asked for
    // GEMMs: D (M x N) = A (M x K) B (N x K)^T, the d12 linears' shapes
    matmul_init();
    const int BT = 65536, Cm = 768;
    const int g[][4] = {{BT, 3 * Cm, Cm, 1}, {BT, Cm, Cm, 1}, {BT, 4 * Cm, Cm, 1}, {BT, Cm, 4 * Cm, 1},
                        {BT, Cm, 4 * Cm, 0}, {BT, 4 * Cm, Cm, 0}, {4 * Cm, Cm, BT, 2}, {Cm, 4 * Cm, BT, 2}, {3 * Cm, Cm, BT, 2},
                        {Cm, Cm, BT, 2}};
    uint8_t *a8, *b8;
    uint16_t *a16, *b16, *bias;
    float *d, *sa, *sb;
    cuda_check(cudaMalloc(&a8, (size_t)BT * 4 * Cm)); cuda_check(cudaMalloc(&b8, (size_t)BT * 4 * Cm));
    cuda_check(cudaMalloc(&a16, (size_t)BT * 4 * Cm * 2)); cuda_check(cudaMalloc(&b16, (size_t)BT * 4 * Cm * 2));
    cuda_check(cudaMalloc(&d, (size_t)BT * 4 * Cm * 4)); cuda_check(cudaMalloc(&bias, 4 * Cm * 2));
    cuda_check(cudaMalloc(&sa, BT * 4)); cuda_check(cudaMalloc(&sb, BT * 4));
    cuda_check(cudaMemset(a8, 0x30, (size_t)BT * 4 * Cm)); cuda_check(cudaMemset(b8, 0x30, (size_t)BT * 4 * Cm));
    cuda_check(cudaMemset(a16, 0x3C, (size_t)BT * 4 * Cm * 2)); cuda_check(cudaMemset(b16, 0x3C, (size_t)BT * 4 * Cm * 2));
    cuda_check(cudaMemset(bias, 0, 4 * Cm * 2));
    std::vector<float> ones(BT, 1.0f);
    cuda_check(cudaMemcpy(sa, ones.data(), BT * 4, cudaMemcpyHostToDevice));
    cuda_check(cudaMemcpy(sb, ones.data(), BT * 4, cudaMemcpyHostToDevice));
    printf("\n%-26s %9s %9s %7s\n", "GEMM M x N x K (kind)", "bf16 us", "fp8 us", "ratio");
    const char* kinds[] = {"dgrad-like, BF16", "fprop, BF16 + bias", "wgrad, FP32 +="};
    const Fp8Operand fa = {a8, sa}, fb = {b8, sb};
    for (auto& s : g) {
        const int M = s[0], N = s[1], K = s[2], kind = s[3];
        double t16, t8, ts = 0;
        if (kind == 2) {   // FP32 accumulate, as wgrad
            t16 = bench_us(b, [&] { matmul_wgrad(d, (floatX*)a16, (floatX*)b16, K, N, M, NULL, 0); });
            const GemmOut acc = {.ptr = d, .ld = N, .f32 = 1, .accumulate = 1, .bias = NULL};
            g_fp8.one_step = 0;   // the split form: unscaled GEMM + scale-add (matmul_fp8.cuh; the default)
            ts = bench_us(b, [&] { matmul_fp8(acc, fa, fb, M, N, K, NULL, 0); });
            g_fp8.one_step = 1;   // the one-step form with cuBLASLt's per-row scales (the candidates below)
            t8 = bench_us(b, [&] { matmul_fp8(acc, fa, fb, M, N, K, NULL, 0); });
        } else {
            const floatX* bb = kind == 1 ? (const floatX*)bias : NULL;
            t16 = bench_us(b, [&] { matmul_forward((floatX*)d, (floatX*)a16, (floatX*)b16, bb, M, K, N, NULL, 0); });
            const GemmOut out = {.ptr = d, .ld = N, .f32 = 0, .accumulate = 0, .bias = bb};
            t8 = bench_us(b, [&] { matmul_fp8(out, fa, fb, M, N, K, NULL, 0); });
        }
        char name[64];
        snprintf(name, sizeof(name), "%dx%dx%d", M, N, K);
        printf("%-18s %-16s %9.1f %9.1f %7.3f\n", name, kinds[kind], t16, t8, t8 / t16);
        if (kind == 2) printf("%-18s %-16s %9.1f %9.1f %7.3f\n", "", "  split form", t16, ts, ts / t16);
        // the heuristic's other candidates for this GEMM (matmul_fp8 takes the first): how much a choice by
        // timing could gain
        Fp8Key key = {M, N, K, N, kind == 2, kind == 1, kind == 2, 0};
        Fp8Plan* p = matmul_fp8_plan(&key);
        cublasLtMatmulPreference_t pref;
        cublas_check(cublasLtMatmulPreferenceCreate(&pref));
        cublas_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                          &g_matmul.workspace_bytes, sizeof(size_t)));
        cublasLtMatmulHeuristicResult_t res[8];
        int found = 0;
        cublas_check(cublasLtMatmulAlgoGetHeuristic(g_matmul.handle, p->desc, p->a, p->b, p->d, p->d, pref, 8, res, &found));
        cublasLtMatmulPreferenceDestroy(pref);
        const cublasLtMatmulAlgo_t first = p->algo;
        printf("    candidates (us):");
        for (int i = 0; i < found; i++) {
            p->algo = res[i].algo;
            const floatX* bb = kind == 1 ? (const floatX*)bias : NULL;
            const GemmOut out = {.ptr = d, .ld = N, .f32 = kind == 2, .accumulate = kind == 2, .bias = bb};
            printf(" %.1f", bench_us(b, [&] { matmul_fp8(out, fa, fb, M, N, K, NULL, 0); }));
        }
        printf("\n");
        p->algo = first;
        g_fp8.one_step = 0;
    }
    matmul_fp8_destroy();
    matmul_destroy();
    return 0;
}
