// bench_quant.cu: bandwidth of the reference quantize / dequantize kernels (dev/ref/nvfp4_ref.cuh) at GPT-2
// training shapes, against the device copy bandwidth measured in the same run (cudaMemcpyAsync D2D). The
// trainer's quantizer is timed by bench_quant_fast.
// A benchmark, not a test. Run through dev/bench/bench_quant.sh, or: build/bench_quant [-n iters]
//
// Columns: time per call; "eff GB/s" = minimal bytes (input read once + outputs written) / time, and its
// share of the copy bandwidth; "traffic GB/s" = bytes the kernels actually move (the amax pass reads the
// input a second time) / time. The issue's target: eff >= 70% of copy for the row-wise NVFP4 path.
#include <vector>
#include "dev/ref/nvfp4_ref.cuh"
#include "dev/bench/bench_common.cuh"

// ms per call
template <typename F>
static double run(Bench& b, F f) { return bench_ms(b, f); }

static void row(Bench& b, const char* name, int64_t R, int64_t C, double ms, double min_bytes, double traffic) {
    double eff = min_bytes / (ms * 1e-3) / 1e9, tr = traffic / (ms * 1e-3) / 1e9;
    printf("| %-44s | %6lld x %-5lld | %9.1f | %8.0f | %5.1f%% | %8.0f | %5.1f%% |\n", name, (long long)R, (long long)C,
           ms * 1e3, eff, 100 * eff / b.copy_gbs, tr, 100 * tr / b.copy_gbs);
}

static QuantParams params(const char* s) { return bench_params(s); }

int main(int argc, char** argv) {
    Bench b;
    if (!bench_init(b, argc, argv, "bench_quant")) return 0;
    printf("| %-44s | %-14s | %-9s | %-8s | %-6s | %-8s | %-6s |\n", "kernel", "shape", "time us", "eff GB/s", "% copy",
           "trafGB/s", "% copy");
    printf("|%s|%s|%s|%s|%s|%s|%s|\n", "----------------------------------------------", "----------------",
           "-----------", "----------", "--------", "----------", "--------");

    const int64_t shapes[][2] = {{65536, 768}, {65536, 3072}, {3072, 768}};
    for (auto& sh : shapes) {
        const int64_t R = sh[0], C = sh[1], n = R * C;
        floatX *in, *f1, *f2;
        uint8_t *c1, *s1, *c2, *s2;
        float* sc;
        cuda_check(cudaMalloc(&in, 2 * n));
        cuda_check(cudaMalloc(&f1, 2 * n));
        cuda_check(cudaMalloc(&f2, 2 * n));
        cuda_check(cudaMalloc(&c1, n / 2));
        cuda_check(cudaMalloc(&c2, n / 2));
        cuda_check(cudaMalloc(&s1, n / 16));
        cuda_check(cudaMalloc(&s2, n / 16));
        cuda_check(cudaMalloc(&sc, 64));
        {   // random BF16 input
            std::vector<uint16_t> h(n);
            uint64_t s = 1;
            for (int64_t i = 0; i < n; i++) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                h[i] = bf16_bits_rne(((float)(s >> 40) / (float)(1 << 24) - 0.5f) * 4.0f);
            }
            cuda_check(cudaMemcpy(in, h.data(), 2 * n, cudaMemcpyHostToDevice));
        }
        const double E = (double)n, IN = 2 * E, FK = 2 * E, PK = 0.5 * E + E / 16;
        const uint64_t key = rng_key(1, 1, 1), key2 = rng_key(1, 1, 2);
        QuantParams nv = params("nvfp4"), nvsr = params("nvfp4,sr"), nvh = params("nvfp4,h16,sr"),
                    nv2d = params("nvfp4-2d"), mx = params("mxfp4"), u4 = params("int4,h16,sr");
        QuantTarget t;
        QuantTarget tt[2];

        t = quant_target_packed(&nv, 1, key, c1, s1, sc, sc + 1);
        row(b, "amax pass only (nvfp4 row)", R, C, run(b, [&] { quant_amax_gpu(in, R, C, C, &t, 1, 0); }), IN, IN);
        row(b, "apply pass only: nvfp4 row packed", R, C, run(b, [&] { quant_apply_gpu(in, R, C, C, &t, 1, 0); }),
            IN + PK, IN + PK);
        row(b, "nvfp4 row packed (amax + apply)", R, C, run(b, [&] { quantize_gpu(in, R, C, C, &t, 1, 0); }), IN + PK,
            2 * IN + PK);
        t = quant_target_fake(&nv, 1, key, f1, C, sc, sc + 1);
        row(b, "apply pass only: nvfp4 row fake (bf16 out)", R, C,
            run(b, [&] { quant_apply_gpu(in, R, C, C, &t, 1, 0); }), IN + FK, IN + FK);
        row(b, "nvfp4 row fake (amax + apply)", R, C, run(b, [&] { quantize_gpu(in, R, C, C, &t, 1, 0); }), IN + FK,
            2 * IN + FK);
        t = quant_target_fake(&nvsr, 1, key, f1, C, sc, sc + 1);
        row(b, "nvfp4 row fake, SR", R, C, run(b, [&] { quantize_gpu(in, R, C, C, &t, 1, 0); }), IN + FK, 2 * IN + FK);
        t = quant_target_fake(&nvh, 0, key, f1, C, sc, sc + 1);
        row(b, "nvfp4 col fake, H16 + SR", R, C, run(b, [&] { quantize_gpu(in, R, C, C, &t, 1, 0); }), IN + FK,
            2 * IN + FK);
        tt[0] = quant_target_fake(&nv, 1, key, f1, C, sc, sc + 1);
        tt[1] = quant_target_fake(&nvh, 0, key2, f2, C, sc + 2, sc + 3);
        row(b, "dual fake: row nvfp4 + col H16 SR (X)", R, C, run(b, [&] { quantize_gpu(in, R, C, C, tt, 2, 0); }),
            IN + 2 * FK, 2 * IN + 2 * FK);
        tt[0] = quant_target_packed(&nv, 1, key, c1, s1, sc, sc + 1);
        tt[1] = quant_target_packed(&nvh, 0, key2, c2, s2, sc + 2, sc + 3);
        row(b, "dual packed: row nvfp4 + col H16 SR", R, C, run(b, [&] { quantize_gpu(in, R, C, C, tt, 2, 0); }),
            IN + 2 * PK, 2 * IN + 2 * PK);
        tt[0] = quant_target_fake(&nv2d, 1, key, f1, C, sc, sc + 1);
        tt[1] = quant_target_fake(&nv2d, 0, key, f2, C, sc + 2, sc + 3);
        row(b, "dual fake: nvfp4 16x16 row + col (W)", R, C, run(b, [&] { quantize_gpu(in, R, C, C, tt, 2, 0); }),
            IN + 2 * FK, 2 * IN + 2 * FK);
        t = quant_target_packed(&mx, 1, key, c1, s1, sc, sc + 1);
        row(b, "mxfp4 row packed", R, C, run(b, [&] { quantize_gpu(in, R, C, C, &t, 1, 0); }), IN + PK, 2 * IN + PK);
        t = quant_target_fake(&u4, 1, key, f1, C, sc, sc + 1);
        row(b, "int4 row fake, H16 + SR", R, C, run(b, [&] { quantize_gpu(in, R, C, C, &t, 1, 0); }), IN + FK,
            2 * IN + FK);
        t = quant_target_packed(&nv, 1, key, c1, s1, sc, sc + 1);
        quantize_gpu(in, R, C, C, &t, 1, 0);
        row(b, "dequant packed -> bf16 (row)", R, C,
            run(b, [&] { dequant_packed_gpu(&nv, c1, s1, sc + 1, R, C, 1, 0, f1, C, 0); }), PK + FK, PK + FK);
        cudaFree(in); cudaFree(f1); cudaFree(f2); cudaFree(c1); cudaFree(c2); cudaFree(s1); cudaFree(s2); cudaFree(sc);
    }
    printf("\neff = (input read once + outputs written) / time; traffic counts the amax pass's second read.\n");
    return 0;
}
