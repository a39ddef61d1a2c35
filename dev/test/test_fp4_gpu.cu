// test_fp4_gpu.cu: the reference quantize / dequantize kernels (dev/ref/nvfp4_ref.cuh) against the numpy
// golden vectors (bit for bit, SR included: same keys) and against the CPU path (fp4/quant_cpu.h) on larger
// random tensors, strided views, and two copies from one pass; quant_compare_gpu (llmc/fp4/quant_diag.cuh)
// against its CPU twin. Skips (exit 0) without a GPU. The trainer's quantizer (llmc/fp4/quant.cuh) is
// compared with these kernels in test_quant_fast and with the CPU path in test_quant_gpu_cpu.
#include <math.h>
#include <vector>
#include "dev/ref/nvfp4_ref.cuh"
#include "dev/test/testing.h"
#include "dev/test/fp4_golden.h"

// ----------------------------------------------------------------------------------------------------
// scalar functions on the device

__global__ void scalar_kernel(int what, int n, const float* x, const uint32_t* r, const uint64_t* keys,
                              const uint64_t* idx, GridTraits g, uint32_t* out) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    if (what == 0) out[t] = rng_bits32(keys[t], idx[t]);
    if (what == 1) out[t] = f32_bits(e4m3_rne_satfinite(x[t]));
    if (what == 2) out[t] = grid_round_rne(&g, x[t]);
    if (what == 3) out[t] = grid_round_sr(&g, x[t], r[t]);
}

template <typename T>
static T* to_dev(const void* h, size_t bytes) {
    T* d;
    cuda_check(cudaMalloc(&d, bytes ? bytes : 1));
    if (bytes) cuda_check(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}

static std::vector<uint32_t> run_scalar(int what, int n, const float* x, const uint32_t* r, const uint64_t* keys,
                                        const uint64_t* idx, GridTraits g) {
    float* dx = to_dev<float>(x, x ? 4 * n : 0);
    uint32_t* dr = to_dev<uint32_t>(r, r ? 4 * n : 0);
    uint64_t* dk = to_dev<uint64_t>(keys, keys ? 8 * n : 0);
    uint64_t* di = to_dev<uint64_t>(idx, idx ? 8 * n : 0);
    uint32_t* dout;
    cuda_check(cudaMalloc(&dout, 4 * n));
    scalar_kernel<<<(n + 127) / 128, 128>>>(what, n, dx, dr, dk, di, g, dout);
    cuda_check_last();
    std::vector<uint32_t> out(n);
    cuda_check(cudaMemcpy(out.data(), dout, 4 * n, cudaMemcpyDeviceToHost));
    cudaFree(dx); cudaFree(dr); cudaFree(dk); cudaFree(di); cudaFree(dout);
    return out;
}

static void golden_scalars(const GoldenRecord* r) {
    const GridTraits none = *grid_traits(QGRID_E2M1);
    if (r->type == GOLD_RNG) {
        uint32_t n; memcpy(&n, r->p, 4);
        std::vector<uint64_t> keys(n), idx(n); std::vector<uint32_t> want(n);
        memcpy(idx.data(), r->p + 4 + 16 * n, 8 * n);
        memcpy(keys.data(), r->p + 4 + 24 * n, 8 * n);
        memcpy(want.data(), r->p + 4 + 32 * n, 4 * n);
        CHECK(run_scalar(0, n, NULL, NULL, keys.data(), idx.data(), none) == want, "device rng_bits32 != reference");
    } else if (r->type == GOLD_E4M3) {
        uint32_t n; memcpy(&n, r->p, 4);
        std::vector<float> x(n); std::vector<uint32_t> want(n);
        memcpy(x.data(), r->p + 4, 4 * n);
        memcpy(want.data(), r->p + 4 + 4 * n, 4 * n);
        CHECK(run_scalar(1, n, x.data(), NULL, NULL, NULL, none) == want, "device e4m3 rounding != reference");
    } else if (r->type == GOLD_GRID_RNE || r->type == GOLD_GRID_SR) {
        uint32_t g, n; memcpy(&g, r->p, 4); memcpy(&n, r->p + 4, 4);
        int sr = r->type == GOLD_GRID_SR;
        std::vector<float> x(n); std::vector<uint32_t> r16(n), want(n);
        memcpy(x.data(), r->p + 8, 4 * n);
        if (sr) memcpy(r16.data(), r->p + 8 + 4 * n, 4 * n);
        const uint8_t* w = r->p + 8 + (sr ? 8 : 4) * n;
        for (uint32_t i = 0; i < n; i++) want[i] = w[i];
        CHECK(run_scalar(sr ? 3 : 2, n, x.data(), sr ? r16.data() : NULL, NULL, NULL, *grid_traits((QuantGrid)g)) == want,
              "device %s %s != reference", quant_grid_table[g].name, sr ? "SR" : "RNE");
    }
}

// ----------------------------------------------------------------------------------------------------
// quantization cases

struct DevBuf {
    floatX *in, *fake, *deq;
    uint8_t *codes, *scales;
    float* scalars;   // [0] amax fake target, [1] scale_dec fake, [2] amax packed, [3] scale_dec packed
};

static DevBuf dev_alloc(size_t in_elems, size_t n) {
    DevBuf b;
    cuda_check(cudaMalloc(&b.in, 2 * in_elems));
    cuda_check(cudaMalloc(&b.fake, 2 * in_elems));
    cuda_check(cudaMalloc(&b.deq, 2 * in_elems));
    cuda_check(cudaMalloc(&b.codes, n / 2 + 16));
    cuda_check(cudaMalloc(&b.scales, n / 16 + 16));
    cuda_check(cudaMalloc(&b.scalars, 16));
    return b;
}
static void dev_free(DevBuf b) {
    cudaFree(b.in); cudaFree(b.fake); cudaFree(b.deq); cudaFree(b.codes); cudaFree(b.scales); cudaFree(b.scalars);
}

static int diff16(const uint16_t* a, const uint16_t* b, size_t n, size_t* first) {
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) { if (!bad) *first = i; bad++; }
    return bad;
}

static void golden_quant(const GoldenRecord* r) {
    char spec_txt[81]; memcpy(spec_txt, r->p + 48, 80); spec_txt[80] = 0;
    QuantSpec spec; char err[256];
    if (quant_spec_parse(spec_txt, &spec, err, sizeof(err))) { CHECK(0, "parse %s: %s", spec_txt, err); return; }
    if (spec.scale == QSCALE_E4M3_4O6) {   // the reference kernels have no 4o6 (test_quant_gpu_cpu checks the fast path)
        test_skip(spec_txt, "4o6: not in the reference GPU kernels (build/test_quant_gpu_cpu checks quant_fast's 4o6)");
        return;
    }
    if (spec.rounding == QROUND_EDEN) {    // MS-EDEN: CPU twin and oracle only so far
        test_skip(spec_txt, "eden (MS-EDEN): not in the reference GPU kernels (build/test_quant_gpu_cpu checks quant_group's)");
        return;
    }
    QuantParams p = quant_params(&spec);
    GoldenQuant g = golden_quant_parse(r, p.block_l);
    size_t n = (size_t)g.rows * g.cols;
    std::vector<uint16_t> in(n), want_fake(n), want_deq(n), fake(n), deq(n), deq0(n);
    golden_u16(in.data(), g.in, n);
    golden_u16(want_fake.data(), g.fake, n);
    golden_u16(want_deq.data(), g.deq, n);
    DevBuf b = dev_alloc(n, n);
    cuda_check(cudaMemcpy(b.in, in.data(), 2 * n, cudaMemcpyHostToDevice));
    // both outputs from one pass: the fake-quant target and the packed target
    QuantTarget t[2] = {quant_target_fake(&p, g.axis, g.key, b.fake, g.cols, b.scalars, b.scalars + 1),
                        quant_target_packed(&p, g.axis, g.key, b.codes, b.scales, b.scalars + 2, b.scalars + 3)};
    quantize_gpu(b.in, g.rows, g.cols, g.cols, t, 2, 0);
    std::vector<uint8_t> codes(g.ncodes), scales(g.nscales);
    float sc[4];
    cuda_check(cudaMemcpy(fake.data(), b.fake, 2 * n, cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(codes.data(), b.codes, g.ncodes, cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(scales.data(), b.scales, g.nscales, cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(sc, b.scalars, 16, cudaMemcpyDeviceToHost));
    int amax_ok = (f32_bits(sc[0]) == f32_bits(g.amax) || (isnan(sc[0]) && isnan(g.amax))) &&
                  f32_bits(sc[0]) == f32_bits(sc[2]);
    CHECK(amax_ok && sc[1] == g.scale_dec && sc[3] == g.scale_dec, "%s: amax %.9g scale_dec %.9g, want %.9g %.9g",
          g.name, sc[0], sc[1], g.amax, g.scale_dec);
    size_t first = 0;
    int bad = diff16(fake.data(), want_fake.data(), n, &first);
    CHECK(bad == 0, "%s [%s]: %d of %zu fake values differ (first at %zu: got 0x%04x want 0x%04x)", g.name, g.spec, bad,
          n, first, fake[first], want_fake[first]);
    CHECK(!memcmp(codes.data(), g.codes, g.ncodes) && !memcmp(scales.data(), g.scales, g.nscales),
          "%s: packed codes/scales differ from the reference", g.name);
    dequant_packed_gpu(&p, b.codes, b.scales, b.scalars + 3, g.rows, g.cols, g.axis, 1, b.deq, g.cols, 0);
    cuda_check(cudaMemcpy(deq.data(), b.deq, 2 * n, cudaMemcpyDeviceToHost));
    bad = diff16(deq.data(), want_deq.data(), n, &first);
    CHECK(bad == 0, "%s: %d of %zu dequantized values differ", g.name, bad, n);
    dequant_packed_gpu(&p, b.codes, b.scales, b.scalars + 3, g.rows, g.cols, g.axis, 0, b.deq, g.cols, 0);
    cuda_check(cudaMemcpy(deq0.data(), b.deq, 2 * n, cudaMemcpyDeviceToHost));
    CHECK(deq0 == fake, "%s: dequant without tensor scale != fake output", g.name);
    dev_free(b);
}

// ----------------------------------------------------------------------------------------------------
// GPU vs CPU on larger random tensors (strided input and output views, two copies per pass)

static uint64_t lcg = 99;
static double urand(void) {
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(lcg >> 11) * (1.0 / 9007199254740992.0);
}
static double nrand(void) { return sqrt(-2 * log(urand() + 1e-300)) * cos(6.283185307179586 * urand()); }

static void gpu_vs_cpu(const char* spec_a, int axis_a, const char* spec_b, int axis_b, int64_t rows, int64_t cols,
                       int64_t pad, int heavy) {
    QuantSpec sa, sb;
    char err[256];
    fail_if(quant_spec_parse(spec_a, &sa, err, sizeof(err)), "%s", err);
    fail_if(spec_b && quant_spec_parse(spec_b, &sb, err, sizeof(err)), "%s", err);
    QuantParams pa = quant_params(&sa), pb = spec_b ? quant_params(&sb) : pa;
    const int64_t ld = cols + pad, n = rows * cols;
    std::vector<uint16_t> in(rows * ld, 0x7FC0);   // padding holds NaN: must never be read
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            in[r * ld + c] = bf16_bits_rne((float)(heavy ? nrand() * exp(1.5 * nrand()) : nrand()));
    DevBuf b = dev_alloc(rows * ld, n), b2 = dev_alloc(rows * ld, n);
    cuda_check(cudaMemcpy(b.in, in.data(), 2 * rows * ld, cudaMemcpyHostToDevice));
    uint64_t ka = rng_key(11, 5, 1), kb = rng_key(11, 5, 2);
    QuantTarget t[2] = {quant_target_fake(&pa, axis_a, ka, b.fake, ld, b.scalars, b.scalars + 1),
                        spec_b ? quant_target_fake(&pb, axis_b, kb, b2.fake, ld, b2.scalars, b2.scalars + 1)
                               : quant_target_packed(&pa, axis_a, ka, b.codes, b.scales, b.scalars + 2, b.scalars + 3)};
    quantize_gpu(b.in, rows, cols, ld, t, 2, 0);
    cuda_check(cudaDeviceSynchronize());
    QuantView v = {in.data(), rows, cols, ld};
    std::vector<uint16_t> want(rows * ld, 0), got(rows * ld);
    std::vector<uint8_t> wcodes(n / 2), wscales(n / 16), gcodes(n / 2), gscales(n / 16);
    float amax;
    float sdec = quant_cpu(&pa, v, axis_a, ka, want.data(), ld, spec_b ? NULL : wcodes.data(),
                           spec_b ? NULL : wscales.data(), &amax);   // packed only without a second copy
    cuda_check(cudaMemcpy(got.data(), b.fake, 2 * rows * ld, cudaMemcpyDeviceToHost));
    float sc[4];
    cuda_check(cudaMemcpy(sc, b.scalars, 16, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) bad += got[r * ld + c] != want[r * ld + c];
    CHECK(bad == 0 && sc[0] == amax && sc[1] == sdec, "gpu vs cpu %s axis %d %lldx%lld ld %lld: %d values differ "
          "(amax %g/%g)", spec_a, axis_a, (long long)rows, (long long)cols, (long long)ld, bad, sc[0], amax);
    if (spec_b) {
        quant_cpu(&pb, v, axis_b, kb, want.data(), ld, NULL, NULL, &amax);
        cuda_check(cudaMemcpy(got.data(), b2.fake, 2 * rows * ld, cudaMemcpyDeviceToHost));
        bad = 0;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++) bad += got[r * ld + c] != want[r * ld + c];
        CHECK(bad == 0, "gpu vs cpu second copy %s axis %d (dual pass with %s axis %d): %d values differ", spec_b, axis_b,
              spec_a, axis_a, bad);
    } else {
        int64_t M = axis_a ? rows : cols, K = axis_a ? cols : rows;
        cuda_check(cudaMemcpy(gcodes.data(), b.codes, M * K / 2, cudaMemcpyDeviceToHost));
        cuda_check(cudaMemcpy(gscales.data(), b.scales, M * K / pa.block_l, cudaMemcpyDeviceToHost));
        CHECK(!memcmp(gcodes.data(), wcodes.data(), M * K / 2) && !memcmp(gscales.data(), wscales.data(), M * K / pa.block_l),
              "gpu vs cpu packed %s axis %d %lldx%lld: codes/scales differ", spec_a, axis_a, (long long)rows, (long long)cols);
    }
    dev_free(b); dev_free(b2);
}

// ----------------------------------------------------------------------------------------------------
// diagnostics: quant_stats_gpu vs quant_stats_cpu, quant_compare_gpu vs quant_compare_cpu

static int stats_match(const QuantStats& g, const QuantStats& c) {
    return g.n == c.n && g.flushed == c.flushed && g.clipped == c.clipped && g.zero_blocks == c.zero_blocks &&
           g.nonfinite == c.nonfinite && fabs(g.err2 - c.err2) <= 1e-9 * fabs(c.err2) &&
           fabs(g.src2 - c.src2) <= 1e-9 * fabs(c.src2);
}
static void stats_show(const char* what, const QuantStats& s) {
    printf("  %s: n=%llu flushed=%llu clipped=%llu zero_blocks=%llu nonfinite=%llu err2=%.12g src2=%.12g\n", what, s.n,
           s.flushed, s.clipped, s.zero_blocks, s.nonfinite, s.err2, s.src2);
}

// data: 0 N(0,1); 1 heavy tails, exact zeros, rows scaled down by up to 2^-24 (zero blocks); 2 as 1 plus
// an inf and a NaN. amax_only: fill the amax with quant_amax_gpu alone (the stats must not need
// *scale_dec, and must not write it).
static void gpu_stats_vs_cpu(const char* spec_a, int axis_a, const char* spec_b, int axis_b, int64_t rows,
                             int64_t cols, int64_t pad, int data, int amax_only, QuantStats* total) {
    QuantSpec sa, sb;
    char err[256];
    fail_if(quant_spec_parse(spec_a, &sa, err, sizeof(err)), "%s", err);
    fail_if(spec_b && quant_spec_parse(spec_b, &sb, err, sizeof(err)), "%s", err);
    QuantParams p[2] = {quant_params(&sa), spec_b ? quant_params(&sb) : quant_params(&sa)};
    const int axes[2] = {axis_a, axis_b}, nt = spec_b ? 2 : 1;
    const int64_t ld = cols + pad;
    std::vector<uint16_t> in(rows * ld, 0x7FC0);   // padding holds NaN: must never be read
    for (int64_t r = 0; r < rows; r++) {
        double rs = (data && r % 7 == 3) ? ldexp(1.0, -(int)(urand() * 24)) : 1.0;
        for (int64_t c = 0; c < cols; c++)
            in[r * ld + c] = data == 0 ? bf16_bits_rne((float)nrand())
                           : (c % 13 == 5) ? 0 : bf16_bits_rne((float)(rs * nrand() * exp(1.5 * nrand())));
    }
    if (data == 2) { in[5 * ld + 17] = 0x7F80u; in[(rows - 1) * ld + cols - 3] = 0xFFC1u; }
    DevBuf b = dev_alloc(rows * ld, rows * cols);
    floatX* fake2;
    QuantStats* dstats;
    cuda_check(cudaMalloc(&fake2, 2 * rows * ld));
    cuda_check(cudaMalloc(&dstats, 2 * sizeof(QuantStats)));
    cuda_check(cudaMemcpy(b.in, in.data(), 2 * rows * ld, cudaMemcpyHostToDevice));
    uint64_t keys[2] = {rng_key(21, 8, 1), rng_key(21, 8, 2)};
    QuantTarget t[2];
    for (int k = 0; k < nt; k++)
        t[k] = quant_target_fake(&p[k], axes[k], keys[k], k ? fake2 : b.fake, ld, b.scalars + 2 * k, b.scalars + 2 * k + 1);
    const float sentinel[4] = {0.0f, 12345.0f, 0.0f, 12345.0f};
    cuda_check(cudaMemcpy(b.scalars, sentinel, 16, cudaMemcpyHostToDevice));
    if (amax_only) quant_amax_gpu(b.in, rows, cols, ld, t, nt, 0);
    else quantize_gpu(b.in, rows, cols, ld, t, nt, 0);
    cuda_check(cudaMemset(dstats, 0, 2 * sizeof(QuantStats)));
    quant_stats_gpu(b.in, rows, cols, ld, t, nt, dstats, 0);
    QuantStats got[2];
    float sc[4];
    cuda_check(cudaMemcpy(got, dstats, 2 * sizeof(QuantStats), cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(sc, b.scalars, 16, cudaMemcpyDeviceToHost));
    QuantView v = {in.data(), rows, cols, ld};
    for (int k = 0; k < nt; k++) {
        QuantStats want;
        memset(&want, 0, sizeof(want));
        quant_stats_cpu(&p[k], v, axes[k], keys[k], &want);
        int ok = stats_match(got[k], want);
        CHECK(ok, "quant_stats_gpu vs cpu: %s axis %d (target %d of %d) %lldx%lld ld %lld data %d%s", k ? spec_b : spec_a,
              axes[k], k, nt, (long long)rows, (long long)cols, (long long)ld, data, amax_only ? " amax only" : "");
        if (!ok) { stats_show("gpu", got[k]); stats_show("cpu", want); }
        if (amax_only) CHECK(sc[2 * k + 1] == 12345.0f, "quant_stats_gpu wrote *scale_dec");
        quant_stats_add(total, &want);
    }
    cudaFree(fake2); cudaFree(dstats);
    dev_free(b);
}

static void gpu_compare(const char* spec, int64_t rows, int64_t cols) {
    QuantSpec s;
    char err[256];
    fail_if(quant_spec_parse(spec, &s, err, sizeof(err)), "%s", err);
    QuantParams p = quant_params(&s);
    const int64_t n = rows * cols;
    std::vector<uint16_t> in(n), f1(n), f0(n);
    for (int64_t i = 0; i < n; i++) in[i] = bf16_bits_rne((float)(nrand() * exp(nrand())));
    DevBuf b = dev_alloc(n, n), b2 = dev_alloc(n, n);
    QuantCompare* dc;
    cuda_check(cudaMalloc(&dc, 2 * sizeof(QuantCompare)));
    cuda_check(cudaMemcpy(b.in, in.data(), 2 * n, cudaMemcpyHostToDevice));
    uint64_t key = rng_key(5, 1, 9);   // the same key for both copies: 2D SR copies agree too
    QuantTarget t[2] = {quant_target_fake(&p, 1, key, b.fake, cols, b.scalars, b.scalars + 1),
                        quant_target_fake(&p, 0, key, b2.fake, cols, b2.scalars, b2.scalars + 1)};
    quantize_gpu(b.in, rows, cols, cols, t, 2, 0);
    cuda_check(cudaMemset(dc, 0, 2 * sizeof(QuantCompare)));
    quant_compare_gpu(b.fake, b.scalars + 1, b2.fake, b2.scalars + 1, n, dc, 0);
    quant_compare_gpu(b.fake + 1, b.scalars + 1, b2.fake + 1, b2.scalars + 1, n - 1, dc + 1, 0);   // unaligned
    QuantCompare got[2];
    float d1, d0;
    cuda_check(cudaMemcpy(got, dc, 2 * sizeof(QuantCompare), cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(f1.data(), b.fake, 2 * n, cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(f0.data(), b2.fake, 2 * n, cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(&d1, b.scalars + 1, 4, cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(&d0, b2.scalars + 1, 4, cudaMemcpyDeviceToHost));
    for (int u = 0; u < 2; u++) {
        QuantCompare want;
        memset(&want, 0, sizeof(want));
        quant_compare_cpu(f1.data() + u, d1, f0.data() + u, d0, n - u, &want);
        CHECK(got[u].n == want.n && got[u].differ == want.differ && got[u].nonfinite == want.nonfinite &&
              fabs(got[u].diff2 - want.diff2) <= 1e-9 * want.diff2 && fabs(got[u].ref2 - want.ref2) <= 1e-9 * want.ref2,
              "quant_compare_gpu vs cpu %s %lldx%lld%s: differ %llu/%llu diff2 %.12g/%.12g", spec, (long long)rows,
              (long long)cols, u ? " (unaligned)" : "", got[u].differ, want.differ, got[u].diff2, want.diff2);
    }
    if (p.block_w > 1)
        CHECK(got[0].differ == 0 && got[0].diff2 == 0.0 && got[0].n == (unsigned long long)n,
              "%s: 2D row-wise and column-wise copies must agree exactly (%llu differ)", spec, got[0].differ);
    else
        CHECK(got[0].differ > 0, "%s: 1D copies should disagree somewhere", spec);
    char buf[96];
    quant_compare_format(&got[0], buf, sizeof(buf));
    printf("compare %s %lldx%lld: %s\n", spec, (long long)rows, (long long)cols, buf);
    cudaFree(dc);
    dev_free(b); dev_free(b2);
}

static void test_diagnostics(void) {
    const char* specs[] = {"nvfp4", "nvfp4,sr", "nvfp4-2d", "mxfp4", "mxfp4-ceil,sr", "mxfp4-2d", "int4,h16,sr",
                           "e1m2,h32,seed=3", "nvfp4,h16", "nvfp4,1x32,h8", "mxfp8"};
    QuantStats total;
    memset(&total, 0, sizeof(total));
    for (size_t s = 0; s < sizeof(specs) / sizeof(specs[0]); s++)
        for (int axis = 0; axis < 2; axis++) {
            gpu_stats_vs_cpu(specs[s], axis, NULL, 0, 1024, 768, 0, s & 1 ? 1 : 0, 0, &total);
            gpu_stats_vs_cpu(specs[s], axis, NULL, 0, 96, 160, 8, 2, 0, &total);   // strided, odd tiles, inf/NaN
        }
    gpu_stats_vs_cpu("nvfp4", 1, "nvfp4,h16,sr", 0, 2048, 768, 0, 1, 0, &total);     // X row + col in one pass
    gpu_stats_vs_cpu("nvfp4-2d", 1, "nvfp4-2d", 0, 768, 3072, 0, 1, 1, &total);      // W both copies, amax only
    gpu_stats_vs_cpu("nvfp4,sr", 1, "nvfp4,sr,h16", 0, 480, 272, 16, 2, 1, &total);  // dY, odd sizes, strided
    gpu_stats_vs_cpu("mxfp4-ceil,sr", 0, "mxfp4-2d,sr", 1, 320, 96, 3, 1, 0, &total); // unaligned ld
    CHECK(total.flushed && total.clipped && total.zero_blocks && total.nonfinite,
          "diagnostics data should exercise every counter (flushed %llu clipped %llu zero_blocks %llu nonfinite %llu)",
          total.flushed, total.clipped, total.zero_blocks, total.nonfinite);
    const char* cspecs[] = {"nvfp4-2d", "mxfp4-2d", "nvfp4-2d,sr", "nvfp4", "mxfp4", "nvfp4,sr"};
    for (size_t s = 0; s < sizeof(cspecs) / sizeof(cspecs[0]); s++) gpu_compare(cspecs[s], 768, 3072);
    gpu_compare("nvfp4-2d", 96, 160);
}

int main(void) {
    if (device_count_or_zero() == 0) {
        test_skip("fp4 gpu kernels", "no CUDA GPU on this machine");
        return test_summary("fp4_gpu");
    }
    Golden g = golden_load(golden_find_file());
    GoldenRecord r;
    int nq = 0;
    while (golden_next(&g, &r)) {
        if (r.type == GOLD_QUANT) { golden_quant(&r); nq++; }
        else golden_scalars(&r);
    }
    free(g.buf);
    printf("golden: %d quantization cases on the GPU\n", nq);
    const char* specs[] = {"nvfp4", "nvfp4,sr", "nvfp4-2d", "mxfp4", "mxfp4-ceil,sr", "mxfp4-2d", "int4,h16,sr",
                           "e1m2,h32,seed=3", "nvfp4,h16", "nvfp4,h32,sr,plain", "nvfp4,1x32,h8"};
    for (size_t s = 0; s < sizeof(specs) / sizeof(specs[0]); s++)
        for (int axis = 0; axis < 2; axis++) {
            gpu_vs_cpu(specs[s], axis, NULL, 0, 1024, 768, 0, s & 1);    // packed + fake
            gpu_vs_cpu(specs[s], axis, NULL, 0, 96, 160, 8, 1);          // strided, not multiples of 64
        }
    gpu_vs_cpu("nvfp4", 1, "nvfp4,h16,sr", 0, 2048, 768, 0, 0);           // NVIDIA recipe: X row + col (RHT, SR)
    gpu_vs_cpu("nvfp4-2d", 1, "nvfp4-2d", 0, 768, 3072, 0, 1);            // W both copies
    gpu_vs_cpu("nvfp4,sr", 1, "nvfp4,sr,h16", 0, 480, 272, 16, 1);        // dY, odd sizes, strided
    gpu_vs_cpu("mxfp4-ceil,sr", 0, "mxfp4-2d,sr", 1, 320, 96, 3, 0);      // unaligned ld
    gpu_vs_cpu("mxfp8", 1, "mxfp8", 0, 1024, 768, 0, 1);                  // FP8 Q/K: fake only (no packed form)
    gpu_vs_cpu("mxfp8", 0, "mxfp8", 1, 96, 160, 8, 1);                    // strided, with inf / NaN padding
    test_diagnostics();
    return test_summary("fp4_gpu");
}
