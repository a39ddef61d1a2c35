// test_fp8_fold.cu: the FP8 path for E8M0-scaled operands (llmc/fp4/fp8_fold.h, the fold in quant/fold.cuh,
// llmc/fp4/matmul_fp8.cuh).
// CPU part (runs everywhere):
//   - the window: for every 4-bit grid, every level times 2^d is exactly an E4M3 number for d in
//     [dmin, dmax], and the window is the widest such (one level fails just outside it);
//   - fp8_fold_value equals CUDA's own float -> E4M3 conversion (__nv_cvt_float_to_fp8, RNE, satfinite) for
//     every BF16 value and a range of offsets, and round-trips exactly inside the window.
// GPU part (skips without a GPU):
//   - quantize_fast_gpu with FP8 targets against the CPU twin (quant_cpu, then fp8_fold_cpu): E4M3 bytes,
//     per-row scales and the count of blocks below the window, bit for bit, for every E8M0 spec shape
//     (1x32, 32x32, 1x16, 16x16; floor and ceil; RNE and SR; Hadamard 0, 16, 32), both axes, the trainer's
//     pairs, on normal, heavy-tailed, special and non-finite data, and on rows whose blocks spread over
//     more than the window (crafted: a known number of blocks below it); each case three ways: one
//     quantize_fast_gpu call (the one-pass row kernel, qf_rowfold_kernel, where it applies), the amax and
//     apply passes called apart, and for pairs the column copy's maxima taken ahead by the row copy's call
//     and the column copy made alone afterwards (the trainer's X); which calls take the one-pass row kernel
//     and the column kernel (qf_colfold_kernel: the column-wise 1D copies, RNE and SR, in every mode; its TWO_D
//     form: the 32 x 32 copies of either axis, both copies of a pair from one read);
//   - qf_e8m0_exponent (that kernel's block exponent) against e8m0_exponent for every BF16 magnitude;
//   - matmul_fp8 on folded operands against the BF16 GEMM of the same values (the emulated path):
//     within FP32 accumulation noise (tolerance below).
#include <limits.h>
#include <math.h>
#include <algorithm>
#include <vector>
#include <cuda_fp8.h>
#include "llmc/fp4/quant.cuh"
#include "llmc/fp4/quant_cpu.h"
#include "llmc/fp4/matmul_fp8.cuh"
#include "dev/test/testing.h"

static QuantParams parse(const char* s) {
    QuantSpec spec;
    char err[256];
    fail_if(quant_spec_parse(s, &spec, err, sizeof(err)), "%s", err);
    return quant_params(&spec);
}

static int e4m3_exact(float v) { return e4m3_value(e4m3_bits(e4m3_rne_satfinite(v))) == v && fabsf(v) <= 448.0f; }

static void cpu_checks(void) {
    const int grids[3] = {QGRID_E2M1, QGRID_INT4, QGRID_E1M2};
    for (int gi = 0; gi < 3; gi++) {
        const GridTraits* g = grid_traits((QuantGrid)grids[gi]);
        const Fp8Window w = fp8_fold_window(g);
        int inside = 1, below = 1, above = 1;
        for (int d = w.dmin; d <= w.dmax; d++)
            for (int c = 1; c < 8; c++) inside &= e4m3_exact(g->levels[c] * exp2_exact(d));
        for (int c = 1; c < 8; c++) {
            below &= e4m3_exact(g->levels[c] * exp2_exact(w.dmin - 1));
            above &= e4m3_exact(g->levels[c] * exp2_exact(w.dmax + 1));
        }
        CHECK(inside && !below && !above, "grid %s: window [%d, %d] exact inside %d, exact below %d / above %d",
              quant_grid_table[grids[gi]].name, w.dmin, w.dmax, inside, below, above);
    }
    const Fp8Window w = fp8_fold_window(grid_traits(QGRID_E2M1));
    CHECK(w.dmin == -8 && w.dmax == 6, "E2M1 window [%d, %d], want [-8, 6] (FP4_NUMERICS: 2^-9 .. 448)", w.dmin, w.dmax);

    // fp8_fold_value vs the CUDA conversion, every BF16 bit pattern, offsets -127 .. 127
    long bad = 0, trips = 0, bad_trip = 0;
    for (int o = -127; o <= 127; o += 3)
        for (uint32_t b = 0; b < 65536; b++) {
            const float v = bf16_bits_to_float((uint16_t)b);
            const uint8_t got = fp8_fold_value(v, o);
            const float y = v * exp2_exact(-o);
            const uint8_t want = v != v ? 0x7F : (uint8_t)__nv_cvt_float_to_fp8(y, __NV_SATFINITE, __NV_E4M3);
            if (got != want && bad++ < 3) printf("  fold mismatch v %g o %d: 0x%02x, cuda 0x%02x\n", v, o, got, want);
            if (v == v && y * exp2_exact(o) == v && fabsf(y) <= 448.0f && e4m3_exact(y)) {   // y exact, in range
                trips++;
                bad_trip += e4m3_value(got) * exp2_exact(o) != v;
            }
        }
    CHECK(bad == 0, "fp8_fold_value differs from __nv_cvt_float_to_fp8 in %ld cases", bad);
    CHECK(bad_trip == 0 && trips > 10000, "round trip: %ld of %ld exact values do not come back", bad_trip, trips);
}

// ---------------------------------------------------------------------------------------------------
// GPU: the fold against the CPU twin

static uint64_t lcg = 777;
static double urand(void) {
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(lcg >> 11) * (1.0 / 9007199254740992.0);
}
static double nrand(void) { return sqrt(-2 * log(urand() + 1e-300)) * cos(6.283185307179586 * urand()); }

enum { D_NORMAL, D_HEAVY, D_SPECIAL, D_NONFINITE, D_SPREAD, D_COUNT };
static const char* const DNAMES[D_COUNT] = {"normal", "heavy", "special", "nonfinite", "spread"};

static std::vector<uint16_t> make_data(int64_t rows, int64_t cols, int kind) {
    std::vector<uint16_t> h(rows * cols);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            double x = nrand();
            if (kind == D_HEAVY) x *= exp(2.0 * nrand());
            if (kind == D_SPECIAL) {
                uint64_t t = rng_mix64((uint64_t)(r / 16) * 7919 + (uint64_t)(c / 16) * 104729) % 8;
                if (t == 0) x = 0.0;
                else if (t == 1) x *= 1e-40;
                else if (t == 2) x *= 1e-36;
                else if (t == 3) x *= 1e30;
                else if (t == 4) x *= 6e37;   // blocks around 2^127 (the fast path's top) and some inf
                else if (t == 5) x *= 3e-36;  // blocks around 2^-118 (its bottom)
            }
            // blocks 2^-12 .. 2^-24 below the rest of their row and column: some inside the window, some below
            if (kind == D_SPREAD && rng_mix64((uint64_t)(r / 8) * 31 + (uint64_t)(c / 8) * 17) % 5 == 0)
                x *= exp2(-12.0 - (double)(rng_mix64((uint64_t)(r / 8) * 7 + (uint64_t)(c / 8)) % 13));
            // non-finite rows and columns that also hold a block far below their others (counted against the
            // offset 0 such rows get, the same in the kernels and the twin)
            const int tiny = kind == D_NONFINITE && ((r % 7 == 3 && c >= 32 && c < 64) || (c % 7 == 3 && r >= 32 && r < 64));
            uint16_t b = bf16_bits_rne((float)(tiny ? x * 1e-6 : x));
            if (kind == D_NONFINITE && (urand() < 0.002 || (r % 7 == 3 && c == 0) || (c % 7 == 3 && r == 0)))
                b = urand() < 0.5 ? 0x7F80 : 0xFFC3;
            h[r * cols + c] = b;
        }
    return h;
}

static int n_cases = 0, n_fail = 0;
static long long n_below = 0;

// One pass of one or two targets (different axes) over a rows x cols view; each target against the twin.
// How the pass runs: quantize_fast_gpu (one pass for the row-wise copies QK_ROWFOLD takes), the amax pass
// and the apply pass called apart (always two), or (pairs) the row-wise copy with the column-wise target's
// amax taken ahead and the column-wise copy made later from it, as the trainer's forward and backward do X.
enum { M_ONE_CALL, M_TWO_PASSES, M_AHEAD, M_COUNT };
static const char* const MNAMES[M_COUNT] = {"one call", "two passes", "ahead"};

// pad: the input's rows are cols + pad elements apart (ld), the padding NaN, which no kernel may read into a copy.
static void run_case(const char* const* specs, const int* axes, int n, int64_t rows, int64_t cols, int kind,
                     int mode = M_ONE_CALL, int64_t pad = 0) {
    QuantParams p[2];
    for (int k = 0; k < n; k++) p[k] = parse(specs[k]);
    std::vector<uint16_t> h = make_data(rows, cols, kind);
    const int64_t ld = cols + pad;
    std::vector<uint16_t> hp(rows * ld, 0x7FC0);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) hp[r * ld + c] = h[r * cols + c];
    uint16_t* in;
    uint8_t* fp8[2];
    float *rs[2], *sc;
    uint32_t* mx[2];
    unsigned* below;
    cuda_check(cudaMalloc(&in, hp.size() * 2));
    cuda_check(cudaMemcpy(in, hp.data(), hp.size() * 2, cudaMemcpyHostToDevice));
    cuda_check(cudaMalloc(&sc, 8 * sizeof(float)));
    cuda_check(cudaMalloc(&below, 2 * sizeof(unsigned)));
    cuda_check(cudaMemset(below, 0, 2 * sizeof(unsigned)));
    QuantTarget t[2];
    const int64_t n_el = rows * cols, most = rows > cols ? rows : cols;
    for (int k = 0; k < n; k++) {
        cuda_check(cudaMalloc(&fp8[k], n_el));
        cuda_check(cudaMemset(fp8[k], 0x5A, n_el));
        cuda_check(cudaMalloc(&rs[k], most * sizeof(float)));
        cuda_check(cudaMemset(rs[k], 0xFF, most * sizeof(float)));   // NaN: a row scale the kernels miss shows
        cuda_check(cudaMalloc(&mx[k], most * sizeof(uint32_t)));
        cuda_check(cudaMemset(mx[k], 0, most * sizeof(uint32_t)));
        t[k] = quant_target_fake(&p[k], axes[k], rng_key(9, 4, 200 + k), NULL, 0, sc + 2 * k, sc + 2 * k + 1);
        t[k].fp8 = fp8[k];
        t[k].fold_max = mx[k];
        t[k].fold_scale = rs[k];
        t[k].fold_below = below + k;
    }
    char desc[300];
    snprintf(desc, sizeof(desc), "[%s ax%d%s%s] %lldx%lld%s %s, %s", specs[0], axes[0], n == 2 ? " + " : "",
             n == 2 ? specs[1] : "", (long long)rows, (long long)cols, pad ? " (padded ld)" : "", DNAMES[kind], MNAMES[mode]);
    if (!quant_fast_supported(t, n, rows, cols, ld)) {
        n_fail++;
        printf("FAIL %s: quant_fast_supported refuses an FP8 target\n", desc);
        return;
    }
    const floatX* x = (const floatX*)in;
    if (mode == M_ONE_CALL) {
        quantize_fast_gpu(x, rows, cols, ld, t, n, 0);
    } else if (mode == M_TWO_PASSES) {
        quant_fast_amax_gpu(x, rows, cols, ld, t, n, 0);
        quant_fast_apply_gpu(x, rows, cols, ld, t, n, 0);
    } else {
        quantize_fast_gpu(x, rows, cols, ld, t, 1, 0, 0, n - 1);
        if (n == 2) quant_fast_apply_gpu(x, rows, cols, ld, &t[1], 1, 0);
    }
    cuda_check(cudaDeviceSynchronize());
    unsigned got_below[2];
    cuda_check(cudaMemcpy(got_below, below, sizeof(got_below), cudaMemcpyDeviceToHost));
    for (int k = 0; k < n; k++) {
        const int64_t M = axes[k] ? rows : cols, K = axes[k] ? cols : rows;
        std::vector<uint16_t> fake(n_el);
        std::vector<uint8_t> scales(M * (K / p[k].block_l)), want(n_el), got(n_el);
        std::vector<float> want_rs(M), got_rs(M);
        QuantView v = {h.data(), rows, cols, cols};
        quant_cpu(&p[k], v, axes[k], t[k].key, fake.data(), cols, NULL, scales.data(), NULL);
        const int64_t wb = fp8_fold_cpu(&p[k], axes[k], fake.data(), rows, cols, cols, scales.data(), want.data(),
                                        want_rs.data());
        cuda_check(cudaMemcpy(got.data(), fp8[k], n_el, cudaMemcpyDeviceToHost));
        cuda_check(cudaMemcpy(got_rs.data(), rs[k], M * sizeof(float), cudaMemcpyDeviceToHost));
        int64_t bad = 0, first = -1, bad_rs = 0;
        for (int64_t i = 0; i < n_el; i++)
            if (got[i] != want[i] && !bad++) first = i;
        for (int64_t i = 0; i < M; i++) bad_rs += f32_bits(got_rs[i]) != f32_bits(want_rs[i]);
        // without a Hadamard the amax pass (or the one-pass kernel) takes the input's exact maxima: the tensor
        // amax and each GEMM row's (per band of block_w rows), as FP32 bits of the largest BF16 magnitude,
        // NaN payloads included; the offsets above see them only to the binade, so they are checked here
        int64_t bad_max = 0;
        if (!p[k].hadamard) {
            const int64_t nmax = M / p[k].block_w;
            std::vector<uint32_t> want_mx(nmax, 0), got_mx(nmax);
            uint32_t want_amax = 0, got_amax;
            for (int64_t r = 0; r < rows; r++)
                for (int64_t c = 0; c < cols; c++) {
                    const uint32_t m = (uint32_t)(h[r * cols + c] & 0x7FFF) << 16;
                    const int64_t i = (axes[k] ? r : c) / p[k].block_w;
                    want_mx[i] = m > want_mx[i] ? m : want_mx[i];
                    want_amax = m > want_amax ? m : want_amax;
                }
            cuda_check(cudaMemcpy(got_mx.data(), mx[k], nmax * sizeof(uint32_t), cudaMemcpyDeviceToHost));
            cuda_check(cudaMemcpy(&got_amax, sc + 2 * k, sizeof(uint32_t), cudaMemcpyDeviceToHost));
            for (int64_t i = 0; i < nmax; i++) bad_max += got_mx[i] != want_mx[i];
            bad_max += got_amax != want_amax;
        }
        n_below += wb;
        if (bad || bad_rs || bad_max || (int64_t)got_below[k] != wb) {
            n_fail++;
            if (n_fail <= 10)
                printf("FAIL %s t%d: %lld bytes differ (first [%lld] 0x%02x want 0x%02x), %lld row scales differ, "
                       "%lld maxima differ, %u blocks below the window, want %lld\n", desc, k, (long long)bad, (long long)first,
                       first >= 0 ? got[first] : 0, first >= 0 ? want[first] : 0, (long long)bad_rs, (long long)bad_max,
                       got_below[k], (long long)wb);
        }
        cudaFree(fp8[k]); cudaFree(rs[k]); cudaFree(mx[k]);
    }
    n_cases++;
    cudaFree(in); cudaFree(sc); cudaFree(below);
}

// qf_e8m0_exponent (the one-pass kernel's) against e8m0_exponent for every finite BF16 magnitude, each grid
// with a fold, both rules.
__global__ void e8m0_exp_kernel(int* out, GridTraits g, int ceil_rule) {
    const uint32_t b = blockIdx.x * blockDim.x + threadIdx.x;   // BF16 magnitudes 0 .. 0x7F7F
    if (b < 0x7F80u) out[b] = qf_e8m0_exponent(b << 16, g, ceil_rule);
}
static void e8m0_checks(void) {
    int* d;
    cuda_check(cudaMalloc(&d, 0x7F80 * sizeof(int)));
    std::vector<int> got(0x7F80);
    const int grids[3] = {QGRID_E2M1, QGRID_INT4, QGRID_E1M2};
    long bad = 0;
    for (int gi = 0; gi < 3; gi++)
        for (int ceil_rule = 0; ceil_rule < 2; ceil_rule++) {
            const GridTraits* g = grid_traits((QuantGrid)grids[gi]);
            e8m0_exp_kernel<<<0x7F80 / 128, 128>>>(d, *g, ceil_rule);
            cuda_check(cudaMemcpy(got.data(), d, got.size() * sizeof(int), cudaMemcpyDeviceToHost));
            for (uint32_t b = 0; b < 0x7F80u; b++) {
                const int want = e8m0_exponent(bf16_bits_to_float((uint16_t)b), g, ceil_rule);
                if (got[b] != want && bad++ < 3)
                    printf("  qf_e8m0_exponent(0x%04x, %s, %s) = %d, want %d\n", b, quant_grid_table[grids[gi]].name,
                           ceil_rule ? "ceil" : "floor", got[b], want);
            }
        }
    cudaFree(d);
    CHECK(bad == 0, "qf_e8m0_exponent differs from e8m0_exponent for %ld BF16 magnitudes", bad);
}

// qf_bf2_fold (the fold kernels' round-to-nearest fast path, packed BF16) against the reference element
// (quant_block_scale_e8m0, grid_round_rne, the fake BF16 value) folded by fp8_fold_value: every BF16 value v
// that a block of exponent e taken by the path can hold (|v| 2^-e < 2^(emax + 1), and |v| < 2^127 as its
// amax, qf_bf2_block_ok) in the low half and -v in the high half, each half with its own block exponent and
// offset (the column kernel's case), for every block exponent the path takes (and -127 with v = 0, the
// all-zero block) and, in each half, offsets that put the block at the top of the window, at its bottom, just
// below it, at the -30 clamp, and o = 0 (a row holding inf / NaN: e - o up to 126, the conversion
// saturates), within fp8_fold_offset's range [-126, 127 - dmax]; each grid. Twice: the
// kernel's bytes (GPU), and a CPU model of its arithmetic (bf2_fold_model, every fma.rn.bf16x2 rounded once
// from double), which checks the derivation in quant/fold.cuh where there is no GPU (CI).
__global__ void bf2_fold_kernel(uint16_t* out, QFGrid g, int e0, int o0, int e1, int o1) {
    const uint32_t b = blockIdx.x * blockDim.x + threadIdx.x;   // BF16 magnitudes 0 .. 0x7F7F
    if (b >= 0x7F80u) return;
    uint32_t si, so;
    qf_bf2_scales(e0, o0, e1, o1, si, so);
    const uint32_t f = qf_bf2_fold(qf_grid2(g), b | ((b | 0x8000u) << 16), si, so);
    out[b] = (uint16_t)qf_e4m3x2(f << 16, f & 0xFFFF0000u);
}
// x rounded to BF16, to nearest even, subnormals kept (BF16's quantum 2^-133). The model's sums that are not
// exact in double are M plus a value below 2^-44 M, far from any BF16 tie, so rounding them twice is safe.
static float bf16_rne_double(double x) {
    if (x == 0) return (float)x;
    int ex;
    frexp(fabs(x), &ex);
    const int q = ex - 8 < -133 ? -133 : ex - 8;   // the BF16 quantum at |x|
    return (float)copysign(ldexp(nearbyint(ldexp(fabs(x), -q)), q), x);
}
// qf_bf2_fold's steps on one value (block exponent e, row offset o), each rounded as fma.rn.bf16x2 rounds
static uint8_t bf2_fold_model(const QFGrid& g, uint16_t vb, int e, int o) {
    const float v = bf16_bits_to_float(vb);
    const float a = bf16_rne_double(fabs((double)v) * ldexp(1.0, -e));
    const float t = f32_from_bits(f32_bits(bf16_rne_double((double)a * (g.mul * 0x1p-16f))) & 0x7F800000u);
    const float M = fmaxf(t, g.mlo * 0x1p-16f);
    const float q = fminf(bf16_rne_double((double)bf16_rne_double((double)a + M) - M), g.maxval);
    const float f = bf16_rne_double((double)q * ldexp(1.0, e - o > -30 ? e - o : -30));
    return (uint8_t)__nv_cvt_float_to_fp8(f32_from_bits(f32_bits(f) | (f32_bits(v) & 0x80000000u)), __NV_SATFINITE, __NV_E4M3);
}
static uint8_t ref_fold(const GridTraits* g, uint16_t vb, int e, int o) {
    const QuantBlockScale bs = quant_block_scale_e8m0(e);
    const uint8_t c = grid_round_rne(g, bf16_bits_to_float(vb) * bs.inv);
    return fp8_fold_value(bf16_bits_to_float(bf16_bits_rne(grid_code_value(g, c) * bs.sdec)), o);
}
static void bf2_fold_checks(int gpu) {
    uint16_t* d = NULL;
    if (gpu) cuda_check(cudaMalloc(&d, 0x7F80 * sizeof(uint16_t)));
    std::vector<uint16_t> got(0x7F80);
    const int grids[3] = {QGRID_E2M1, QGRID_INT4, QGRID_E1M2};
    const char* what = gpu ? "qf_bf2_fold" : "qf_bf2_fold's CPU model";
    long bad = 0, checked = 0;
    for (int gi = 0; gi < 3; gi++) {
        const GridTraits* g = grid_traits((QuantGrid)grids[gi]);
        const QFGrid qg = qf_grid_consts(grids[gi]);
        const Fp8Window win = fp8_fold_window(g);
        // e - o for each half (INT_MIN: o = 0); e: -127 (the all-zero block), then -120 .. 126 (-126 .. -121 are
        // not taken)
        const int ds[7] = {win.dmax, win.dmax - 3, win.dmin, win.dmin - 1, -30, -31, INT_MIN};
        for (int e = -127; e <= 126; e = e == -127 ? -120 : e + 1) {
            // the high half's block exponent: another one the path takes, so that each half sees every e
            const int eh[2] = {e, e == -127 ? -127 : -120 + (e + 120 + 101) % 247};
            for (int k = 0; k < 7; k++) {
                int o[2];
                for (int h = 0; h < 2; h++) {
                    const int dk = ds[(k + 3 * h) % 7];
                    o[h] = dk == INT_MIN ? 0 : std::min(std::max(eh[h] - dk, -126), 127 - win.dmax);
                }
                if (gpu) {
                    bf2_fold_kernel<<<0x7F80 / 128, 128>>>(d, qg, eh[0], o[0], eh[1], o[1]);
                    cuda_check(cudaMemcpy(got.data(), d, got.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost));
                }
                for (uint32_t b = 0; b < (e == -127 ? 1u : 0x7F00u); b++)
                    for (int h = 0; h < 2; h++) {
                        if (bf16_bits_to_float((uint16_t)b) * exp2_exact(-eh[h]) >= exp2_exact(g->emax + 1)) continue;
                        const uint16_t vb = (uint16_t)(b | (h << 15));
                        const uint8_t want = ref_fold(g, vb, eh[h], o[h]);
                        const uint8_t have = gpu ? (uint8_t)(got[b] >> (8 * h)) : bf2_fold_model(qg, vb, eh[h], o[h]);
                        checked++;
                        if (have != want && bad++ < 3)
                            printf("  %s(0x%04x, %s, e %d, o %d) = 0x%02x, want 0x%02x\n", what, vb,
                                   quant_grid_table[grids[gi]].name, eh[h], o[h], have, want);
                    }
            }
        }
    }
    if (gpu) cudaFree(d);
    CHECK(bad == 0 && checked > 10000000, "%s differs from the reference fold in %ld of %ld values", what, bad, checked);
}

// The route of a call (quantize_fast_gpu's: both passes) of n FP8 targets (spec[k] on axes[k]): which kernels would
// run. The pointers are placeholders, never dereferenced (qf_route reads only the targets' specs, forms and the shape).
static QuantRoute eligibility_route(const char* const* spec, const int* axes, int n, int64_t rows, int64_t cols,
                                    QuantParams* p, QuantTarget* t) {
    for (int k = 0; k < n; k++) {
        p[k] = parse(spec[k]);
        t[k] = quant_target_fake(&p[k], axes[k], 1, NULL, 0, (float*)16, (float*)32);
        t[k].fp8 = (uint8_t*)64; t[k].fold_max = (uint32_t*)128; t[k].fold_scale = (float*)256; t[k].fold_below = (unsigned*)512;
    }
    return qf_route(QCALL_QUANTIZE, t, n, 0, rows, cols, cols);
}

static void fold_checks(int quick) {
    const char* specs[] = {"mxfp4", "mxfp4-ceil", "mxfp4-2d", "mxfp4,sr", "mxfp4-2d,sr", "mxfp4,h16", "mxfp4,sr,h32,seed=3",
                           "mxfp4,16x16", "mxfp4,1x16,sr", "mxfp4,1x16", "int4,e8m0", "e1m2,e8m0ceil,32x32", "mxfp4,h16,fixed,sr"};
    // partial tiles too: 48 and 16 rows (32-row tiles), 96 and 160 columns (128-column tiles); for the one-pass
    // row kernel rows of 1 to 20 chunks of 256 columns, a partly filled chunk (96, 160, 384, 1408 columns), row
    // counts that are not a multiple of its 4 rows per warp (50, 18: row-wise specs only), and one row too long
    // for it (5376 columns: two passes); 40 columns: a warp of the column kernel partly valid (column-wise specs)
    const int64_t shapes[][2] = {{64, 96}, {96, 160}, {32, 256}, {160, 64}, {256, 384}, {48, 96}, {16, 128},
                                 {48, 2304}, {16, 3840}, {32, 5120}, {16, 5376}, {96, 1280}, {50, 384}, {18, 2304},
                                 {32, 1408}, {64, 40}};
    const int nshape = sizeof(shapes) / sizeof(shapes[0]);
    const int nspec = sizeof(specs) / sizeof(specs[0]);
    for (int i = 0; i < nspec; i++)
        for (int ax = 0; ax < 2; ax++)
            for (int si = 0; si < nshape; si++)
                for (int kind = 0; kind < D_COUNT; kind++)
                    for (int mode = M_ONE_CALL; mode <= M_TWO_PASSES; mode++) {
                        if (quick && ((si > 1 && si != 7 && si != 9) || kind == D_HEAVY)) continue;
                        const QuantParams p = parse(specs[i]);
                        const int64_t rows = shapes[si][0], cols = shapes[si][1];
                        const int64_t M = ax ? rows : cols, K = ax ? cols : rows;
                        if (K % p.block_l || M % p.block_w || (p.hadamard && K % p.hadamard)) continue;
                        run_case(&specs[i], &ax, 1, rows, cols, kind, mode);
                    }
    printf("fold: %d single-copy cases run\n", n_cases);
    // the trainer's pairs: dY's two copies (rows + columns), as the recipes make them
    // (2D pairs: one kernel makes both copies where they round alike, each with its own exponent: the grids and
    // rules may differ; else one kernel each)
    const char* pairs[][2] = {{"mxfp4-2d,sr", "mxfp4-2d,sr"}, {"mxfp4,sr", "mxfp4,sr,h32,seed=7"}, {"mxfp4", "mxfp4,h16"},
                              {"mxfp4", "mxfp4"}, {"mxfp4-2d", "e1m2,e8m0ceil,32x32"}, {"mxfp4-2d,sr", "mxfp4-2d"}};
    const int axes[2] = {1, 0};
    for (auto& pr : pairs)
        for (int kind = 0; kind < D_COUNT; kind++)
            for (int mode = 0; mode < M_COUNT; mode++) {
                run_case(pr, axes, 2, 256, 384, kind, mode);
                run_case(pr, axes, 2, 64, 2304, kind, mode);
                run_case(pr, axes, 2, 96, 384, kind, mode, 8);   // rows 392 elements apart, NaN between
                if (!quick) run_case(pr, axes, 2, 1024, 768, kind, mode);
            }
    printf("fold: %d cases run, with the trainer's pairs\n", n_cases);
    // shapes tall enough that the one-pass kernel's warps take several row groups (its grid is at most the
    // resident CTAs: on an H200 about 8448 rows of 384 columns, 2640 of 2304, 1584 of 5120), so the next group's
    // loads issued while folding (the software pipeline) and the column maxima gathered over many groups are
    // checked; mxfp4-2d's forward X pair (an SR column copy) among them. The column kernel's CTAs take 4 row
    // blocks each here (its grid gives each at least 4 where the rows allow: its 4 cp.async stages filled);
    // 131072 x 64 has more row blocks than 4 per CTA of the resident grid (its capped grid: ~10 each on an
    // H200, so each CTA refills its stages; 64 columns keep the CPU twin's share of the test's time small).
    const char* tall[][2] = {{"mxfp4", NULL}, {"mxfp4", "mxfp4"}, {"mxfp4-ceil", "mxfp4-ceil,sr"}};
    const int64_t tall_shapes[][2] = {{9216, 384}, {3072, 2304}, {2048, 5120}, {131072, 64}};
    const int tall_kinds[] = {D_SPREAD, D_NORMAL, D_NONFINITE};   // quick: the first
    for (auto& tp : tall)
        for (auto& sh : tall_shapes)
            for (int ki = 0; ki < (quick ? 1 : 3); ki++)
                for (int mode = 0; mode < (tp[1] ? M_COUNT : M_AHEAD); mode++)   // ahead: pairs only
                    run_case(tp, axes, tp[1] ? 2 : 1, sh[0], sh[1], tall_kinds[ki], mode);
    // 2D pairs (the column kernel's TWO_D form making both copies): tall enough that its CTAs refill their
    // stages (65536 x 64: ~5 row blocks per CTA of its capped grid on an H200), and 3 CTAs across (8192 x 768)
    const char* sr2d[2] = {"mxfp4-2d,sr", "mxfp4-2d,sr"}, *rne2d[2] = {"mxfp4-2d", "mxfp4-2d"};
    for (int mode = 0; mode < M_COUNT; mode++) run_case(sr2d, axes, 2, 65536, 64, tall_kinds[mode], mode);
    if (!quick) {
        run_case(sr2d, axes, 2, 8192, 768, D_NONFINITE, M_ONE_CALL);
        run_case(rne2d, axes, 2, 8192, 768, D_SPREAD, M_ONE_CALL);
    }
    // column-wise copies alone, tall and wide enough that every CTA of the column kernel refills its 4 stages
    // several times with all 4 warps' columns valid and 2 CTAs across (on an H200 its grid is capped at ~200
    // CTAs down: ~5 tiles each at 1x32 blocks, ~10 at 1x16), RNE and SR, non-finite data (the slow path) too
    const char* cwide[] = {"mxfp4", "mxfp4,sr", "mxfp4,1x16,sr"};
    const int ax0[1] = {0};
    for (const char* sp : cwide)
        for (int ki = 0; ki < (quick ? 1 : 3); ki++) run_case(&sp, ax0, 1, 32768, 512, tall_kinds[ki], M_ONE_CALL);
    // the one-pass kernel is what the one-call cases above ran for these (else they ran the two passes twice)
    struct { const char* spec[2]; int n; int64_t rows, cols; int want; } rf[] = {
        {{"mxfp4", NULL}, 1, 256, 384, 1}, {{"mxfp4", "mxfp4"}, 2, 256, 384, 1}, {{"mxfp4-ceil", "mxfp4-ceil,sr"}, 2, 64, 2304, 1},
        {{"mxfp4", NULL}, 1, 32, 5120, 1}, {{"mxfp4,1x16", NULL}, 1, 16, 3840, 1}, {{"mxfp4", NULL}, 1, 16, 5376, 0},
        {{"mxfp4,sr", NULL}, 1, 256, 384, 0}, {{"mxfp4", "mxfp4,h16"}, 2, 256, 384, 0}, {{"mxfp4-2d", NULL}, 1, 256, 384, 0},
        {{"mxfp4,h16", NULL}, 1, 256, 384, 0}, {{"mxfp4", "mxfp4-2d"}, 2, 64, 384, 0}};
    int rf_bad = 0;
    for (auto& c : rf) {
        QuantTarget t[2];
        QuantParams p[2];
        const QuantRoute R = eligibility_route(c.spec, axes, c.n, c.rows, c.cols, p, t);
        const int want = c.want && !qf_patch_only();   // LLMC_QF_PATCH=1: always two passes
        if ((R.kernel[0] == QK_ROWFOLD) != want && rf_bad++ < 3)
            printf("  rowfold(%s%s%s, %lldx%lld) = %d, want %d\n", c.spec[0], c.n == 2 ? " + " : "", c.n == 2 ? c.spec[1] : "",
                   (long long)c.rows, (long long)c.cols, !want, want);
    }
    CHECK(rf_bad == 0, "fold: the one-pass row kernel must take exactly the row-wise RNE 1D FP8 copies of <= 5120 columns, "
          "with at most a column-wise FP8 1D partner without a Hadamard");
    // and the column kernel (qf_colfold_kernel) what the column-wise cases above ran for exactly these copies
    struct { const char* spec; int want; } cf[] = {
        {"mxfp4", 1}, {"mxfp4-ceil", 1}, {"mxfp4,1x16", 1}, {"int4,e8m0", 1}, {"mxfp4,sr", 1}, {"mxfp4-ceil,sr", 1},
        {"mxfp4-2d", 0}, {"mxfp4-2d,sr", 0}, {"mxfp4,16x16", 0}, {"mxfp4,h16", 0}, {"mxfp4,1x16,sr", 1}, {"mxfp4,sr,h32", 0}};
    int cf_bad = 0;
    for (auto& c : cf) {
        QuantTarget t;
        QuantParams p;
        const QuantRoute R = eligibility_route(&c.spec, ax0, 1, 256, 384, &p, &t);
        const int want = c.want && !qf_patch_only();
        if ((R.kernel[1] == QK_COLFOLD) != want && cf_bad++ < 3)
            printf("  colfold(%s, column-wise) = %d, want %d\n", c.spec, !want, want);
    }
    CHECK(cf_bad == 0, "fold: the column kernel must take exactly the column-wise 1D FP8 copies without a Hadamard");
    // and its TWO_D form the 32 x 32 copies of either axis (QK_FOLD2D, or QK_FOLD2D_PAIR for both: bit 0 row-wise, bit 1
    // column-wise)
    struct { const char* spec[2]; int n; int want; } f2[] = {
        {{"mxfp4-2d", NULL}, 1, 1}, {{"mxfp4-2d,sr", "mxfp4-2d,sr"}, 2, 3}, {{"e1m2,e8m0ceil,32x32", "mxfp4"}, 2, 1},
        {{"mxfp4", "mxfp4-2d,sr"}, 2, 2}, {{"mxfp4,16x16", "mxfp4,16x16"}, 2, 0}, {{"mxfp4-2d,h32", NULL}, 1, 0},
        {{"mxfp4-ceil", "mxfp4-ceil,sr"}, 2, 0}};
    int f2_bad = 0;
    for (auto& c : f2)
        for (int swap = 0; swap < 2; swap++) {   // the first spec row-wise, then column-wise
            const int ax2[2] = {swap ? 0 : 1, swap ? 1 : 0};
            const char* sp[2] = {c.spec[0], c.spec[1]};
            QuantTarget t[2];
            QuantParams p[2];
            const QuantRoute R = eligibility_route(sp, ax2, c.n, 256, 384, p, t);
            const int want = qf_patch_only() ? 0 : swap ? ((c.want & 1) << 1 | c.want >> 1) : c.want;
            auto is2d = [](QuantKernel k) { return k == QK_FOLD2D || k == QK_FOLD2D_PAIR; };
            const int got = is2d(R.kernel[0]) | is2d(R.kernel[1]) << 1;
            if (got != want && f2_bad++ < 3)
                printf("  fold2d(%s on axis %d%s%s) = %d, want %d\n", sp[0], ax2[0], c.n == 2 ? " + " : "",
                       c.n == 2 ? sp[1] : "", got, want);
        }
    CHECK(f2_bad == 0, "fold: the 2D kernel must take exactly the 32 x 32 FP8 copies without a Hadamard, of either axis");
    printf("fold: %d cases against the CPU twin, %lld blocks below the window among them\n", n_cases, n_below);
    CHECK(n_fail == 0, "fold: %d of %d cases differ from the CPU twin", n_fail, n_cases);
    CHECK(n_below > 0, "fold: the spread data must put some blocks below the window (the count is tested)");
}

// ---------------------------------------------------------------------------------------------------
// GPU: matmul_fp8 vs the BF16 GEMM of the same values (the emulated path)
//
// Tolerance. Both GEMMs multiply the same exact products (4-bit codes times powers of two) and accumulate in
// different orders. The BF16 GEMM accumulates in FP32. Hopper's FP8 MMA does not: inside each chain of MMAs
// it keeps fewer bits (DeepSeek-V3's report measured about 14) before cuBLASLt promotes the partial sum to
// FP32 (fast accumulation off). Measured on the H200 (this test, 2026-12-01): the FP8 GEMM's FP32 output is
// up to 2.9e-4 (normal data) and 4.8e-4 (spread data) of sum |a b| from the exact sum, where the BF16 GEMM
// is within 1e-5. We allow 2^-10 sum |a b| (9.8e-4), plus the BF16 rounding of the outputs (both GEMMs
// round theirs: 2^-8 relative between them, with room) when the GEMM writes BF16.

static void gemm_case(int M, int Nn, int K, const char* spec_a, const char* spec_b, int spread) {
    // A (M x K) folded row-wise, B (Nn x K) row-wise: exactly the fprop layout
    QuantParams pa = parse(spec_a), pb = parse(spec_b);
    std::vector<uint16_t> ha = make_data(M, K, spread ? D_SPREAD : D_NORMAL), hb = make_data(Nn, K, D_HEAVY);
    uint16_t *a, *b, *fa, *fb;
    uint8_t *qa, *qb;
    float *ra, *rb, *sc, *d8, *d16;
    uint32_t *ma, *mb;
    unsigned* below;
    cuda_check(cudaMalloc(&a, (size_t)M * K * 2)); cuda_check(cudaMalloc(&b, (size_t)Nn * K * 2));
    cuda_check(cudaMalloc(&fa, (size_t)M * K * 2)); cuda_check(cudaMalloc(&fb, (size_t)Nn * K * 2));
    cuda_check(cudaMalloc(&qa, (size_t)M * K)); cuda_check(cudaMalloc(&qb, (size_t)Nn * K));
    cuda_check(cudaMalloc(&ra, M * 4)); cuda_check(cudaMalloc(&rb, Nn * 4));
    cuda_check(cudaMalloc(&ma, M * 4)); cuda_check(cudaMalloc(&mb, Nn * 4));
    cuda_check(cudaMemset(ma, 0, M * 4)); cuda_check(cudaMemset(mb, 0, Nn * 4));
    cuda_check(cudaMalloc(&sc, 8 * 4)); cuda_check(cudaMalloc(&below, 8));
    cuda_check(cudaMemset(below, 0, 8));
    cuda_check(cudaMalloc(&d8, (size_t)M * Nn * 4)); cuda_check(cudaMalloc(&d16, (size_t)M * Nn * 4));
    cuda_check(cudaMemcpy(a, ha.data(), ha.size() * 2, cudaMemcpyHostToDevice));
    cuda_check(cudaMemcpy(b, hb.data(), hb.size() * 2, cudaMemcpyHostToDevice));
    QuantTarget t[4];
    t[0] = quant_target_fake(&pa, 1, 11, (floatX*)fa, K, sc, sc + 1);
    t[1] = quant_target_fake(&pb, 1, 12, (floatX*)fb, K, sc + 2, sc + 3);
    t[2] = quant_target_fake(&pa, 1, 11, NULL, 0, sc + 4, sc + 5);
    t[3] = quant_target_fake(&pb, 1, 12, NULL, 0, sc + 6, sc + 7);
    t[2].fp8 = qa; t[2].fold_max = ma; t[2].fold_scale = ra; t[2].fold_below = below;
    t[3].fp8 = qb; t[3].fold_max = mb; t[3].fold_scale = rb; t[3].fold_below = below + 1;
    quantize_fast_gpu((floatX*)a, M, K, K, &t[0], 1, 0);
    quantize_fast_gpu((floatX*)b, Nn, K, K, &t[1], 1, 0);
    quantize_fast_gpu((floatX*)a, M, K, K, &t[2], 1, 0);
    quantize_fast_gpu((floatX*)b, Nn, K, K, &t[3], 1, 0);
    // BF16 outputs with a bias (the forward's form), the emulated GEMM and the FP8 one
    std::vector<uint16_t> hbias = make_data(1, Nn, D_NORMAL);
    uint16_t* bias;
    cuda_check(cudaMalloc(&bias, Nn * 2));
    cuda_check(cudaMemcpy(bias, hbias.data(), Nn * 2, cudaMemcpyHostToDevice));
    matmul_forward((floatX*)d16, (floatX*)fa, (floatX*)fb, (floatX*)bias, M, K, Nn, NULL, 0);
    const Fp8Operand fa8 = {qa, ra}, fb8 = {qb, rb};
    matmul_fp8({.ptr = d8, .ld = Nn, .f32 = 0, .accumulate = 0, .bias = (floatX*)bias}, fa8, fb8, M, Nn, K, NULL, 0);
    float* f32o;   // and FP32 output (the form wgrad writes), against the exact sums
    cuda_check(cudaMalloc(&f32o, (size_t)M * Nn * 4));
    matmul_fp8({.ptr = f32o, .ld = Nn, .f32 = 1, .accumulate = 0, .bias = NULL}, fa8, fb8, M, Nn, K, NULL, 0);
    // FP32 accumulated (wgrad's form: D += ..., the split form, unscaled GEMM + fp8_scale_add_kernel;
    // also the one-step form with cuBLASLt's per-row scales), onto a known D0
    std::vector<float> d0((size_t)M * Nn);
    for (size_t i = 0; i < d0.size(); i++) d0[i] = (float)((int)(i % 17) - 8) * 0.375f;
    float* acc_o[2];
    for (int f = 0; f < 2; f++) {
        cuda_check(cudaMalloc(&acc_o[f], d0.size() * 4));
        cuda_check(cudaMemcpy(acc_o[f], d0.data(), d0.size() * 4, cudaMemcpyHostToDevice));
        g_fp8.one_step = f;
        matmul_fp8({.ptr = acc_o[f], .ld = Nn, .f32 = 1, .accumulate = 1, .bias = NULL}, fa8, fb8, M, Nn, K, NULL, 0);
    }
    // both forms again into a wider D (ldd = Nn + 8, whose last 8 columns must stay as they were) with a device alpha
    // of 1/2 (the FP8 path's alphas are powers of two)
    const int ldw = Nn + 8;
    std::vector<float> d0w((size_t)M * ldw);
    for (size_t i = 0; i < d0w.size(); i++) d0w[i] = (float)((int)(i % 13) - 6) * 0.625f;
    float *accw[2], *alpha_half;
    const float half = 0.5f;
    cuda_check(cudaMalloc(&alpha_half, sizeof(float)));
    cuda_check(cudaMemcpy(alpha_half, &half, sizeof(float), cudaMemcpyHostToDevice));
    for (int f = 0; f < 2; f++) {
        cuda_check(cudaMalloc(&accw[f], d0w.size() * 4));
        cuda_check(cudaMemcpy(accw[f], d0w.data(), d0w.size() * 4, cudaMemcpyHostToDevice));
        g_fp8.one_step = f;
        matmul_fp8({.ptr = accw[f], .ld = ldw, .f32 = 1, .accumulate = 1, .bias = NULL}, fa8, fb8, M, Nn, K, alpha_half, 0);
    }
    g_fp8.one_step = 0;
    cuda_check(cudaDeviceSynchronize());
    std::vector<float> oacc[2], oaccw[2];
    for (int f = 0; f < 2; f++) {
        oacc[f].resize(d0.size());
        cuda_check(cudaMemcpy(oacc[f].data(), acc_o[f], d0.size() * 4, cudaMemcpyDeviceToHost));
        cudaFree(acc_o[f]);
        oaccw[f].resize(d0w.size());
        cuda_check(cudaMemcpy(oaccw[f].data(), accw[f], d0w.size() * 4, cudaMemcpyDeviceToHost));
        cudaFree(accw[f]);
    }
    cudaFree(alpha_half);
    int pad_changed = 0;   // the columns past Nn of the wider D
    for (int i = 0; i < M; i++)
        for (int j = Nn; j < ldw; j++)
            for (int f = 0; f < 2; f++) pad_changed += f32_bits(oaccw[f][(size_t)i * ldw + j]) != f32_bits(d0w[(size_t)i * ldw + j]);
    std::vector<uint16_t> o8((size_t)M * Nn), o16((size_t)M * Nn);
    std::vector<uint8_t> hqa((size_t)M * K), hqb((size_t)Nn * K);
    std::vector<float> o32((size_t)M * Nn), hra(M), hrb(Nn);
    unsigned hb2[2];
    cuda_check(cudaMemcpy(hqa.data(), qa, hqa.size(), cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(hqb.data(), qb, hqb.size(), cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(hra.data(), ra, M * 4, cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(hrb.data(), rb, Nn * 4, cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(o8.data(), d8, o8.size() * 2, cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(o16.data(), d16, o16.size() * 2, cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(o32.data(), f32o, o32.size() * 4, cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(hb2, below, 8, cudaMemcpyDeviceToHost));
    double worst8 = 0, worst32 = 0, worst_rel = 0, worst_acc[2] = {0, 0}, worst_accw[2] = {0, 0};
    for (int i = 0; i < M; i += (M > 256 ? 7 : 1))
        for (int j = 0; j < Nn; j++) {
            double acc = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                const double x = (double)e4m3_value(hqa[(size_t)i * K + k]) * hra[i] * e4m3_value(hqb[(size_t)j * K + k]) * hrb[j];
                acc += x;
                mag += fabs(x);
            }
            const double g8 = bf16_bits_to_float(o8[(size_t)i * Nn + j]), g16 = bf16_bits_to_float(o16[(size_t)i * Nn + j]);
            const double tol16 = 0.0079 * fabs(acc) + 0x1p-10 * mag + 1e-30, tol32 = 0x1p-10 * mag + 1e-30;
            worst8 = fmax(worst8, fabs(g8 - g16) / (tol16 + 0.0079 * fabs(g16)));
            worst32 = fmax(worst32, fabs(o32[(size_t)i * Nn + j] - acc) / tol32);
            worst_rel = fmax(worst_rel, fabs(o32[(size_t)i * Nn + j] - acc) / (mag + 1e-30));
            const double e0 = d0[(size_t)i * Nn + j], tola = tol32 + 0x1p-23 * (fabs(e0) + fabs(acc));   // + D's rounding
            for (int f = 0; f < 2; f++) worst_acc[f] = fmax(worst_acc[f], fabs(oacc[f][(size_t)i * Nn + j] - (e0 + acc)) / tola);
            const double w0 = d0w[(size_t)i * ldw + j], tolw = 0.5 * tol32 + 0x1p-23 * (fabs(w0) + 0.5 * fabs(acc));
            for (int f = 0; f < 2; f++)
                worst_accw[f] = fmax(worst_accw[f], fabs(oaccw[f][(size_t)i * ldw + j] - (w0 + 0.5 * acc)) / tolw);
        }
    printf("  matmul_fp8 %dx%dx%d %s x %s%s: vs emulated (BF16 out) worst %.3f of tolerance; FP32 out vs the exact sum of its FP8 operands "
           "worst %.3f of tolerance, %.2e of sum|ab|; %u + %u blocks below the window\n", M, Nn, K, spec_a, spec_b,
           spread ? " (spread)" : "", worst8, worst32, worst_rel, hb2[0], hb2[1]);
    printf("    accumulated into FP32 (D0 + A B^T): split form worst %.3f of tolerance, one-step form %.3f; into a wider D "
           "with alpha 1/2: %.3f, %.3f, %d padding elements changed\n", worst_acc[0], worst_acc[1], worst_accw[0],
           worst_accw[1], pad_changed);
    // Against the emulated GEMM only where the operands are the same values: no block below the window (the spread
    // data must put some there, whose folded values lost bits; the fold checks test their count and values).
    if (spread)
        CHECK(hb2[0] + hb2[1] > 0, "matmul_fp8 %dx%dx%d: the spread data put no block below the window", M, Nn, K);
    else
        CHECK(hb2[0] + hb2[1] == 0 && worst8 <= 1.0, "matmul_fp8 %dx%dx%d: off the emulated GEMM (%.3f of tolerance; "
              "%u + %u blocks below the window)", M, Nn, K, worst8, hb2[0], hb2[1]);
    CHECK(worst32 <= 1.0, "matmul_fp8 %dx%dx%d: off the exact sum of its FP8 operands (%.3f of tolerance)", M, Nn, K,
          worst32);
    CHECK(worst_acc[0] <= 1.0 && worst_acc[1] <= 1.0, "matmul_fp8 %dx%dx%d accumulated: off the exact sum (split %.3f, "
          "one step %.3f of tolerance)", M, Nn, K, worst_acc[0], worst_acc[1]);
    CHECK(worst_accw[0] <= 1.0 && worst_accw[1] <= 1.0 && pad_changed == 0, "matmul_fp8 %dx%dx%d accumulated into "
          "ldd = Nn + 8 with alpha 1/2: off the exact sum (split %.3f, one step %.3f of tolerance) or %d padding "
          "elements written", M, Nn, K, worst_accw[0], worst_accw[1], pad_changed);
    cudaFree(a); cudaFree(b); cudaFree(fa); cudaFree(fb); cudaFree(qa); cudaFree(qb); cudaFree(ra); cudaFree(rb);
    cudaFree(ma); cudaFree(mb); cudaFree(sc); cudaFree(below); cudaFree(d8); cudaFree(d16); cudaFree(f32o); cudaFree(bias);
}

int main(int argc, char** argv) {
    int quick = argc > 1 && !strcmp(argv[1], "--quick");
    setvbuf(stdout, NULL, _IOLBF, 0);   // a run stopped by a time limit still shows how far it got
    cpu_checks();
    bf2_fold_checks(0);
    if (device_count_or_zero() == 0) {
        test_skip("fp8 fold gpu", "no CUDA GPU on this machine");
        return test_summary("fp8_fold");
    }
    e8m0_checks();
    bf2_fold_checks(1);
    fold_checks(quick);
    const char* reason = matmul_fp8_reason();
    if (reason) {
        test_skip("matmul_fp8", reason);
    } else {
        matmul_init();
        gemm_case(256, 384, 512, "mxfp4", "mxfp4", 0);
        gemm_case(512, 256, 4096, "mxfp4-2d,sr", "mxfp4-2d", 0);
        gemm_case(1024, 768, 768, "mxfp4,h32,seed=1", "mxfp4,h32,seed=1", 0);
        gemm_case(256, 256, 1024, "mxfp4", "mxfp4-ceil", 1);
        matmul_fp8_destroy();
        matmul_destroy();
    }
    return test_summary("fp8_fold");
}
