// bench_quant_fast.cu: the reference kernels' quantize_gpu (dev/ref/nvfp4_ref.cuh) vs the trainer's
// quantize_fast_gpu (llmc/fp4/quant.cuh) at training shapes, fake and packed (native GEMM) copies, against
// device copy bandwidth measured in the same run. Also checks, for every row, that the fast outputs equal the
// reference ones bit for bit (column "same").
// Usage: build/bench_quant_fast [-n iters] [-f row-name-substring] [-s ROWSxCOLS]   (-f, -s: a subset, e.g. for ncu)
// Columns: ref / fast: both passes (amax + apply), us per call; amax / apply: the fast passes alone;
// eff% = (input once + outputs) / fast time, as % of copy bandwidth; traf% = bytes actually moved (input
// twice + outputs) / fast time; apply% = (input + outputs) / apply time; amax% = input / amax time.
// Copy bandwidth: cudaMemcpyAsync D2D of 1 GiB (read + write counted), and of the tensor's own bytes.
// The last rows time the rules of quant/group.cuh (Four Over Six, MS-EDEN), which have no reference kernels (their
// exactness: build/test_quant_gpu_cpu); 4o6's 1x16 fake copies run on the whole-block kernels. MS-EDEN's
// amax pass rotates too, and with src=fprop reads a fake copy; its "fast" column is quantize_fast_gpu, which rotates
// once (the amax pass stores the rotated operand in the fake copy, the apply pass reads it there: 8 bytes per
// element, where eff% counts 4 and traf% 6), while "amax" and "apply" time the passes called apart, the apply pass
// rotating the source again.
// The DUAL rows that round to nearest (X's pair, nvfp4-naive's dY pair) make both copies in one kernel from one read
// (route.h's QK_DUAL); the others run one apply kernel per copy, each reading the input.
#include <vector>
#include "llmc/fp4/quant.cuh"
#include "dev/ref/nvfp4_ref.cuh"
#include "dev/bench/bench_common.cuh"

static QuantParams params(const char* s) { return bench_params(s); }

struct Cfg {
    const char* name;
    const char* spec[2];
    int axis[2];
    int n;
    int packed;   // packed copies (codes + scales) instead of fake ones
    int group;    // a rule of quant/group.cuh (4o6, MS-EDEN): timed alone, no reference kernels
    int src_dec;  // MS-EDEN from a dequantized source (src=fprop)
};

int main(int argc, char** argv) {
    Bench b;
    if (!bench_init(b, argc, argv, "bench_quant_fast")) return 0;

    const Cfg cfgs[] = {
        {"nvfp4 row (fprop X)", {"nvfp4", NULL}, {1, 0}, 1},
        {"nvfp4 row SR", {"nvfp4,sr", NULL}, {1, 0}, 1},
        {"nvfp4 col H16 (wgrad X)", {"nvfp4,h16,fixed", NULL}, {0, 0}, 1},
        {"nvfp4 col H16 SR", {"nvfp4,sr,h16,fixed", NULL}, {0, 0}, 1},
        {"DUAL dY rowSR+colH16SR", {"nvfp4,sr", "nvfp4,sr,h16,fixed"}, {1, 0}, 2},
        {"DUAL X row+colH16", {"nvfp4", "nvfp4,h16,fixed"}, {1, 0}, 2},
        {"DUAL naive dY", {"nvfp4", "nvfp4"}, {1, 0}, 2},
        {"nvfp4 col (no H)", {"nvfp4", NULL}, {0, 0}, 1},
        {"nvfp4-2d row (fprop W)", {"nvfp4-2d", NULL}, {1, 0}, 1},
        {"nvfp4-2d col (dgrad W)", {"nvfp4-2d", NULL}, {0, 0}, 1},
        {"DUAL nvfp4-2d row+col", {"nvfp4-2d", "nvfp4-2d"}, {1, 0}, 2},
        {"mxfp4 row", {"mxfp4", NULL}, {1, 0}, 1},
        {"DUAL mxfp4-2d SR", {"mxfp4-2d,sr", "mxfp4-2d,sr"}, {1, 0}, 2},
        {"int4 row H16", {"int4,h16,seed=1", NULL}, {1, 0}, 1},
        {"DUAL int4 H16 SR (ufp4)", {"int4,sr,h16,seed=1", "int4,sr,h16,seed=1"}, {1, 0}, 2},
        {"nvfp4 row H32", {"nvfp4,h32", NULL}, {1, 0}, 1},
        {"nvfp4 col H32 SR", {"nvfp4,sr,h32", NULL}, {0, 0}, 1},
        {"PACKED nvfp4 row", {"nvfp4", NULL}, {1, 0}, 1, 1},
        {"PACKED nvfp4-2d col", {"nvfp4-2d", NULL}, {0, 0}, 1, 1},
        {"PACKED DUAL dY", {"nvfp4,sr", "nvfp4,sr,h16,fixed"}, {1, 0}, 2, 1},
        {"4o6 row (fprop X)", {"nvfp4,4o6", NULL}, {1, 0}, 1, 0, 1},
        {"4o6 row SR (dgrad dY)", {"nvfp4,4o6,sr", NULL}, {1, 0}, 1, 0, 1},
        {"4o6 col H16 (wgrad X)", {"nvfp4,4o6,h16,fixed", NULL}, {0, 0}, 1, 0, 1},
        {"4o6 col H16 SR (wgrad dY)", {"nvfp4,4o6,sr,h16,fixed", NULL}, {0, 0}, 1, 0, 1},
        {"4o6 16x16 col (dgrad W)", {"nvfp4-2d,4o6", NULL}, {0, 0}, 1, 0, 1},
        {"eden row (dgrad dY)", {"nvfp4,eden", NULL}, {1, 0}, 1, 0, 1},
        {"eden col (wgrad dY)", {"nvfp4,eden", NULL}, {0, 0}, 1, 0, 1},
        {"eden col src=fprop (X)", {"nvfp4,eden,src=fprop", NULL}, {0, 0}, 1, 0, 1, 1},
    };
    const float one = 1.0f;
    const int ncfg = (int)(sizeof(cfgs) / sizeof(cfgs[0]));
    const int64_t shapes[][2] = {{65536, 3072}, {65536, 768}, {3072, 768}, {3840, 1280}, {1280, 5120}};   // (W: d12, d36)
    printf("%-26s %7s %7s %6s %6s %6s %5s %5s %6s %5s %4s\n", "config", "ref us", "fast us", "x", "amax", "apply", "eff%",
           "traf%", "apply%", "amax%", "same");
    for (auto& sh : shapes) {
        const int64_t R = sh[0], C = sh[1], n = R * C;
        if (!bench_wants_shape(b, R, C)) continue;
        uint16_t *in, *f[4];
        float* sc;
        cuda_check(cudaMalloc(&in, 2 * n));
        for (int k = 0; k < 4; k++) cuda_check(cudaMalloc(&f[k], 2 * n));   // fake copies, or codes + scales
        cuda_check(cudaMalloc(&sc, 64));   // 16 floats: 4 per target, [8] a source's scale
        {
            std::vector<uint16_t> h(n);
            uint64_t s = 1;
            for (int64_t i = 0; i < n; i++) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                double u1 = ((s >> 11) + 1) * (1.0 / 9007199254740993.0);
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                double u2 = (s >> 11) * (1.0 / 9007199254740992.0);
                h[i] = bf16_bits_rne((float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2)));
            }
            cuda_check(cudaMemcpy(in, h.data(), 2 * n, cudaMemcpyHostToDevice));
        }
        double copy_us = bench_us(b, [&] { cuda_check(cudaMemcpyAsync(f[0], in, 2 * n, cudaMemcpyDeviceToDevice, 0)); });
        printf("-- %lld x %lld: device copy of the tensor %.1f us (%.0f%% of the 1 GiB copy bandwidth)\n", (long long)R,
               (long long)C, copy_us, 100.0 * 4.0 * n / (copy_us * 1e-6) / 1e9 / b.copy_gbs);
        for (int ci = 0; ci < ncfg; ci++) {
            const Cfg& c = cfgs[ci];
            if (!bench_wants(b, c.name)) continue;
            QuantParams p[2];
            QuantTarget tr[2], tf[2];
            for (int k = 0; k < c.n; k++) {
                p[k] = params(c.spec[k]);
                if (p[k].step_signs) quant_params_set_step_signs(&p[k], rng_key(7, 1, 30));   // MS-EDEN's per-call signs
                uint64_t key = rng_key(7, 1, 10 + k);
                if (c.packed) {
                    uint8_t *cr = (uint8_t*)f[k], *cf = (uint8_t*)f[2 + k];
                    tr[k] = quant_target_packed(&p[k], c.axis[k], key, cr, cr + n / 2, sc + 4 * k, sc + 4 * k + 1);
                    tf[k] = quant_target_packed(&p[k], c.axis[k], key, cf, cf + n / 2, sc + 4 * k + 2, sc + 4 * k + 3);
                } else {
                    tr[k] = quant_target_fake(&p[k], c.axis[k], key, (floatX*)f[k], C, sc + 4 * k, sc + 4 * k + 1);
                    tf[k] = quant_target_fake(&p[k], c.axis[k], key, (floatX*)f[2 + k], C, sc + 4 * k + 2, sc + 4 * k + 3);
                }
            }
            if (!quant_fast_supported(tf, c.n, R, C, C)) {
                printf("%-26s not supported by the fast path\n", c.name);
                continue;
            }
            const floatX* x = (const floatX*)in;
            const double IN = 2.0 * n, OUT = (c.packed ? 0.5 * n + n / 16.0 : 2.0 * n) * c.n;
            auto pct = [&](double bytes, double us) { return 100.0 * bytes / (us * 1e-6) / 1e9 / b.copy_gbs; };
            if (c.group) {   // quant/group.cuh's rules: no reference kernels (build/test_quant_gpu_cpu checks them)
                if (c.src_dec) {   // a dequantized source: any positive scale will do
                    tf[0].src_dec = sc + 8;
                    cuda_check(cudaMemcpy(sc + 8, &one, sizeof(float), cudaMemcpyHostToDevice));
                }
                double fast = bench_us(b, [&] { quantize_fast_gpu(x, R, C, C, tf, c.n, 0); });
                double am = bench_us(b, [&] { quant_fast_amax_gpu(x, R, C, C, tf, c.n, 0); });
                double ap = bench_us(b, [&] { quant_fast_apply_gpu(x, R, C, C, tf, c.n, 0); });
                printf("%-26s %7s %7.1f %6s %6.1f %6.1f %4.0f%% %4.0f%% %5.0f%% %4.0f%% %4s\n", c.name, "-", fast, "-", am, ap,
                       pct(IN + OUT, fast), pct(2 * IN + OUT, fast), pct(IN + OUT, ap), pct(IN, am), "-");
                continue;
            }
            double ref = bench_us(b, [&] { quantize_gpu(x, R, C, C, tr, c.n, 0); });
            double fast = bench_us(b, [&] { quantize_fast_gpu(x, R, C, C, tf, c.n, 0); });
            double am = bench_us(b, [&] { quant_fast_amax_gpu(x, R, C, C, tf, c.n, 0); });
            double ap = bench_us(b, [&] { quant_fast_apply_gpu(x, R, C, C, tf, c.n, 0); });
            // bit-exactness at this shape (the whole buffers: packed copies leave most of them unwritten)
            for (int k = 0; k < 4; k++) cuda_check(cudaMemset(f[k], 0, 2 * n));
            quantize_gpu(x, R, C, C, tr, c.n, 0);
            quantize_fast_gpu(x, R, C, C, tf, c.n, 0);
            cuda_check(cudaDeviceSynchronize());
            int same = 1;
            {
                std::vector<uint16_t> ha(n), hb(n);
                float s[16];
                cuda_check(cudaMemcpy(s, sc, sizeof(s), cudaMemcpyDeviceToHost));
                for (int k = 0; k < c.n; k++) {
                    cuda_check(cudaMemcpy(ha.data(), f[k], 2 * n, cudaMemcpyDeviceToHost));
                    cuda_check(cudaMemcpy(hb.data(), f[2 + k], 2 * n, cudaMemcpyDeviceToHost));
                    same &= ha == hb && f32_bits(s[4 * k]) == f32_bits(s[4 * k + 2]) && f32_bits(s[4 * k + 1]) == f32_bits(s[4 * k + 3]);
                }
            }
            printf("%-26s %7.1f %7.1f %5.2fx %6.1f %6.1f %4.0f%% %4.0f%% %5.0f%% %4.0f%% %4s\n",
                   c.name, ref, fast, ref / fast, am, ap, pct(IN + OUT, fast),
                   pct(2 * IN + OUT, fast), pct(IN + OUT, ap), pct(IN, am), same ? "yes" : "NO");
        }
        cudaFree(in);
        for (int k = 0; k < 4; k++) cudaFree(f[k]);
        cudaFree(sc);
    }
    printf("\nTargets (65536 x 3072): nvfp4 row fake (amax + apply) <= ~450 us; dual dY <= ~900 us; apply%% >= 70.\n");
    return 0;
}
