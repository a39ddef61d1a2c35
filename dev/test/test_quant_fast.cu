// test_quant_fast.cu: the GPU quantizer (llmc/fp4/quant.cuh) against the reference kernels
// (dev/ref/nvfp4_ref.cuh: quantize_gpu, quant_stats_gpu), bit for bit.
// CPU part (runs everywhere): the fast element arithmetic (qf_rne_mag, qf_sr_mag) against grid_round_rne /
// grid_round_sr over float bit patterns (a sample by default, every non-negative float up to inf with
// --exhaustive), the BF16 exactness of every code * block scale product, the SR threshold construction,
// the code index of every grid level (packed output); MS-EDEN's element path, fake values, lane layout
// (the rotation's butterflies and the sums) and tile words.
// GPU part (skips without a GPU): quantize_fast_gpu vs quantize_gpu (fake outputs including the padding
// between rows, packed codes and scales, amax and scale_dec bits) and quant_fast_stats_gpu vs
// quant_stats_gpu (exact counts) for every supported configuration on small shapes, trainer-like dual
// targets and large shapes, on normal, heavy-tailed and special-value data; quant_fast_supported() false
// for what the fast path does not handle. (test_quant_gpu_cpu compares the same kernels with the CPU twin.)
// Usage: build/test_quant_fast [--exhaustive] [--quick]
#include <math.h>
#include <thread>
#include <vector>
#include <atomic>
#include <algorithm>
#include "llmc/fp4/quant.cuh"
#include "dev/ref/nvfp4_ref.cuh"
#include "dev/test/testing.h"

// ----------------------------------------------------------------------------------------------------
// CPU: element arithmetic

static const int GRIDS[3] = {QGRID_E2M1, QGRID_INT4, QGRID_E1M2};

// Checks every pattern u = start, start + stride, ... <= end (non-negative floats and +inf) for one grid.
// Returns the number of mismatches; prints the first few.
static long long check_elem_range(int gid, uint32_t start, uint32_t end, uint32_t stride) {
    const GridTraits* g = grid_traits((QuantGrid)gid);
    const QFGrid G = qf_grid_consts(gid);
    long long bad = 0;
    for (uint64_t uu = start; uu <= end; uu += stride) {
        const uint32_t u = (uint32_t)uu;
        const float a = f32_from_bits(u);
        // RNE
        const uint8_t c = grid_round_rne(g, a);
        const float want = g->levels[c & 7];
        const float got = qf_rne_mag(G, a);
        int ok = (c & 8) == 0 && f32_bits(got) == f32_bits(want);
        ok = ok && grid_round_rne(g, -a) == (uint8_t)(c | 8);   // sign handled outside: code | 8
        // SR: find the step of qf_sr_mag in r16 (r < rb rounds up), check both sides against the reference
        const float up0 = qf_sr_mag(G, a, 0), dn0 = qf_sr_mag(G, a, 65535);
        int lo = 0, hi = 65536;   // first r with result == dn0 (monotone step)
        if (f32_bits(up0) == f32_bits(dn0)) lo = hi = 0;
        else {
            while (lo < hi) {
                int mid = (lo + hi) / 2;
                if (f32_bits(qf_sr_mag(G, a, (uint32_t)mid)) == f32_bits(dn0)) hi = mid; else lo = mid + 1;
            }
        }
        const int rb = lo;
        const int rs[4] = {0, 65535, rb - 1, rb};
        for (int k = 0; k < 4 && ok; k++) {
            const int r = rs[k];
            if (r < 0 || r > 65535) continue;
            const uint8_t cs = grid_round_sr(g, a, (uint32_t)r);
            const float m = qf_sr_mag(G, a, (uint32_t)r);
            ok = (cs & 8) == 0 && f32_bits(m) == f32_bits(g->levels[cs & 7]) &&
                 grid_round_sr(g, -a, (uint32_t)r) == (uint8_t)(cs | 8);
            // the step is a single one: everything below rb equals up0, from rb on equals dn0
            if (ok && rb > 0 && rb <= 65535) ok = f32_bits(qf_sr_mag(G, a, (uint32_t)(rb - 1))) == f32_bits(up0);
        }
        if (!ok) {
            if (bad < 5)
                printf("  elem mismatch grid %s |x| = %.9g (0x%08x): rne ref code %d got %.9g; sr step %d\n",
                       quant_grid_table[gid].name, a, u, c, got, rb);
            bad++;
        }
    }
    return bad;
}

// MS-EDEN's apply kernel (quant/group.cuh): its element path against quant_eden_cpu's arithmetic, its fake
// values, and the 16-byte words that move a 32 x 128 tile (each element exactly once, aligned).
static void eden_cpu_checks(int exhaustive) {
    const GridTraits* g = grid_traits(QGRID_E2M1);
    const QFGrid fg = qf_grid_consts(QGRID_E2M1);
    float mul;
    int shift;
    qf_code_consts(QGRID_E2M1, &mul, &shift);
    long long bad = 0, n = 0;
    auto one = [&](float u, bool fast) {
        float mag, td;
        const uint8_t c = qg_eden_code(fg, mul, shift, g, u, fast, &mag, &td);
        const uint8_t cr = grid_round_rne(g, u);
        const float tdr = f32_mul_rn(u, grid_code_value(g, cr));
        n++;
        if (c != cr || f32_bits(mag) != f32_bits(fabsf(grid_code_value(g, cr))) || f32_bits(td) != f32_bits(tdr)) bad++;
    };
    // magnitudes: every 37th pattern up to 16, every 65521st above (every pattern with --exhaustive), then inf;
    // both signs. The reference path (fast = false) checks only qg_eden_code's mag and td of it.
    const uint32_t dense = exhaustive ? 1 : 37, sparse = exhaustive ? 1 : 65521;
    for (uint64_t b = 0; b <= 0x7F800000u; b += (b < 0x41800000u ? dense : sparse))
        for (int sg = 0; sg < 2; sg++) {
            const float u = f32_from_bits((uint32_t)b | (sg ? 0x80000000u : 0u));
            one(u, true);
            if (!exhaustive) one(u, false);
        }
    one(INFINITY, true);
    one(-INFINITY, true);
    for (int i = 0; i < 15; i++)   // around every level and decision point, both signs
        for (int d = -64; d <= 64; d++)
            for (int sg = 0; sg < 2; sg++) {
                const float v = i < 8 ? g->levels[i] : g->mids[i - 8];
                const float u = f32_from_bits((uint32_t)((int64_t)f32_bits(v) + d) | (sg ? 0x80000000u : 0u));
                if (!(fabsf(u) >= 0.0f)) continue;
                one(u, true);
            }
    one(NAN, false);
    one(-NAN, false);
    CHECK(bad == 0, "MS-EDEN element path (fast and reference) vs quant_eden_cpu's arithmetic: %lld of %lld differ", bad, n);
    bad = 0;
    for (int c = 0; c < 16; c++)   // every code under every E4M3 scale value (0 to 448)
        for (int sb = 0; sb < 0x7F; sb++) {
            const float sd = e4m3_value((uint8_t)sb), v = grid_code_value(g, (uint8_t)c);
            if (qg_eden_fake((uint8_t)c, fabsf(v), sd) != bf16_bits_rne(v * sd)) bad++;
        }
    CHECK(bad == 0, "MS-EDEN fake values sign | BF16(|val| * sdec) == bf16_bits_rne(val * sdec): %lld exceptions", bad);
    uint64_t st = 0x9E3779B97F4A7C15ull;
    auto next = [&]() { st = st * 6364136223846793005ull + 1442695040888963407ull; return (uint32_t)(st >> 32); };
    const float sc = hadamard_scale(128);
    // the kernels' lane layout (8 lanes per row, 16 elements each): their per-lane pieces with the exchanges of
    // __shfl_xor_sync simulated == hadamard_bf16's rotation and eden_sum128's sum, bit for bit
    {
        long long bad_rot = 0, bad_sum = 0;
        for (int trial = 0; trial < 20000; trial++) {
            uint32_t signs[4];
            for (int w = 0; w < 4; w++) signs[w] = next();
            float ref[128], t[128], y[8][16], o[8][16];
            for (int e = 0; e < 128; e++) {   // BF16 inputs of mixed magnitudes (cancellations, rounding in the sums)
                const uint32_t b = (next() & 0x807FFFFFu) | ((uint32_t)(110 + next() % 36) << 23);
                ref[e] = bf16_bits_to_float((uint16_t)(b >> 16));
                t[e] = f32_from_bits((next() & 0x807FFFFFu) | ((uint32_t)(100 + next() % 40) << 23));
            }
            for (int l = 0; l < 8; l++)
                for (int j = 0; j < 16; j++) {
                    const int e = 16 * l + j;
                    y[l][j] = ((signs[e >> 5] >> (e & 31)) & 1u) ? -ref[e] : ref[e];
                }
            hadamard_bf16(ref, 128, signs);
            for (int l = 0; l < 8; l++) qg_eden_bfly_regs(y[l]);
            for (int x = 1; x < 8; x <<= 1) {
                for (int l = 0; l < 8; l++)
                    for (int j = 0; j < 16; j++) o[l][j] = qg_eden_bfly_lane(y[l][j], y[l ^ x][j], (l & x) != 0);
                memcpy(y, o, sizeof(y));
            }
            for (int l = 0; l < 8; l++)
                for (int j = 0; j < 16; j++)
                    bad_rot += f32_bits(bf16_bits_to_float(bf16_bits_rne(QF_MUL(y[l][j], sc)))) != f32_bits(ref[16 * l + j]);
            float p[8][4], pn[8][4];
            for (int l = 0; l < 8; l++)
                for (int q = 0; q < 4; q++) {
                    const float* c = t + 16 * l + 4 * q;
                    p[l][q] = QF_ADD(QF_ADD(QF_ADD(c[0], c[1]), c[2]), c[3]);
                }
            for (int x = 4; x >= 1; x >>= 1) {
                for (int l = 0; l < 8; l++)
                    for (int q = 0; q < 4; q++) pn[l][q] = QF_ADD(p[l][q], p[l ^ x][q]);
                memcpy(p, pn, sizeof(p));
            }
            const uint32_t want = f32_bits(eden_sum128(t));
            for (int l = 0; l < 8; l++) bad_sum += f32_bits(qg_eden_sum_regs(p[l])) != want;
        }
        CHECK(bad_rot == 0, "MS-EDEN lanes (16 elements each): butterflies in registers and across lanes == hadamard_bf16 "
              "(%lld of 2560000 values differ)", bad_rot);
        CHECK(bad_sum == 0, "MS-EDEN lanes: chunk sums, 3 lane stages and 2 register stages == eden_sum128 (%lld of 160000 "
              "lane results differ)", bad_sum);
    }
    for (int axis = 0; axis < 2; axis++) {
        static_assert(QG_EDEN_WORDS * QG_THREADS * 8 == QG_EDEN_ROWS * 128, "the words cover the tile");
        int count[QG_EDEN_ROWS][128] = {};
        bad = 0;
        for (int e = 0; e < QG_EDEN_WORDS * QG_THREADS; e++) {
            int r, kk;
            qg_eden_word(axis, e, &r, &kk);
            bad += axis ? kk % 8 != 0 : r % 8 != 0;   // 16-byte aligned in the view (i0 % 32 == 0, k0 % 128 == 0)
            for (int j = 0; j < 8; j++) {
                const int rr = axis ? r : r + j, k = axis ? kk + j : kk;
                if (rr < 0 || rr >= QG_EDEN_ROWS || k < 0 || k >= 128) { bad++; continue; }
                count[rr][k]++;
            }
        }
        for (int rr = 0; rr < QG_EDEN_ROWS; rr++)
            for (int k = 0; k < 128; k++) bad += count[rr][k] != 1;
        CHECK(bad == 0, "MS-EDEN tile words, axis %d: every element of the 32 x 128 tile once, words aligned (%lld bad)", axis,
              bad);
    }
}

static void cpu_element_checks(int exhaustive) {
    const int nthreads = std::max(1u, std::thread::hardware_concurrency());
    for (int gi = 0; gi < 3; gi++) {
        const int gid = GRIDS[gi];
        std::atomic<long long> bad(0);
        // dense: every pattern in [0, 16] with a small stride (all with --exhaustive), sparse: up to +inf
        const uint32_t end16 = f32_bits(16.0f), endinf = 0x7F800000u;
        const uint32_t s_dense = exhaustive ? 1 : 97, s_sparse = exhaustive ? 1 : 65521;
        std::vector<std::thread> th;
        for (int t = 0; t < nthreads; t++)
            th.emplace_back([&, t] {
                const uint64_t n = (uint64_t)end16 / s_dense + 1;
                const uint64_t a = n * t / nthreads, b = n * (t + 1) / nthreads;
                if (b > a) bad += check_elem_range(gid, (uint32_t)(a * s_dense), (uint32_t)((b - 1) * s_dense), s_dense);
                const uint64_t n2 = (uint64_t)(endinf - end16) / s_sparse + 1;
                const uint64_t a2 = n2 * t / nthreads, b2 = n2 * (t + 1) / nthreads;
                if (b2 > a2)
                    bad += check_elem_range(gid, end16 + (uint32_t)(a2 * s_sparse), end16 + (uint32_t)((b2 - 1) * s_sparse),
                                            s_sparse);
            });
        for (auto& x : th) x.join();
        // every pattern within +-4096 ulps of each level and decision point (the interesting spots)
        const GridTraits* g = grid_traits((QuantGrid)gid);
        for (int i = 0; i < 15; i++) {
            float v = i < 8 ? g->levels[i] : g->mids[i - 8];
            uint32_t u = f32_bits(v);
            uint32_t s = u > 4096 ? u - 4096 : 0;
            bad += check_elem_range(gid, s, u + 4096, 1);
        }
        bad += check_elem_range(gid, 0, 70000, 1);   // zero and the subnormals
        CHECK(bad == 0, "fast element arithmetic vs reference, grid %s: %lld mismatches (%s)", quant_grid_table[gid].name,
              (long long)bad, exhaustive ? "exhaustive" : "sampled");
    }
    // the code * block scale product is exact in BF16 (or inf), so truncation == bf16_bits_rne, with sign
    long long bad = 0;
    for (int gi = 0; gi < 3; gi++) {
        const GridTraits* g = grid_traits((QuantGrid)GRIDS[gi]);
        for (int k = 0; k < 8; k++) {
            for (int sb = 0; sb < 256 + 255; sb++) {
                float sd;
                if (sb < 256) { if ((sb & 0x7F) == 0x7F || (sb & 0x80)) continue; sd = e4m3_value((uint8_t)sb); }
                else sd = exp2_exact(sb - 256 - 127);
                float pr = g->levels[k] * sd;
                uint32_t b = f32_bits(pr);
                if (bf16_bits_rne(pr) != (uint16_t)(b >> 16) || bf16_bits_rne(-g->levels[k] * sd) != (uint16_t)(0x8000 | (b >> 16)))
                    bad++;
            }
        }
    }
    CHECK(bad == 0, "code * scale products exact in BF16: %lld exceptions", bad);
    // r16 + 0.5 construction (qf_sr_mag_x)
    bad = 0;
    for (uint32_t r = 0; r < 65536; r++)
        if (f32_from_bits(0x4B000000u | r) - 8388607.5f != (float)r + 0.5f) bad++;
    CHECK(bad == 0, "SR threshold construction: %lld exceptions", bad);
    // amax of BF16-rounded values == rounding of the max: bf16_bits_rne is monotone on non-NaN magnitudes
    // (NaN payloads are not: the kernels round a group holding a NaN value by value)
    bad = 0;
    uint32_t prev = 0;
    for (uint64_t u = 0; u <= 0x7F800000u; u += (u > 0x7F7F0000u ? 1 : 251)) {
        uint32_t r = bf16_bits_rne(f32_from_bits((uint32_t)u));
        if (r < prev) bad++;
        prev = r;
    }
    CHECK(bad == 0, "bf16_bits_rne monotone on non-NaN magnitudes: %lld exceptions", bad);
    // packed output: every level's code index from its float bits
    bad = 0;
    for (int gi = 0; gi < 3; gi++) {
        const GridTraits* g = grid_traits((QuantGrid)GRIDS[gi]);
        float mul;
        int shift;
        qf_code_consts(GRIDS[gi], &mul, &shift);
        for (uint32_t k = 0; k < 8; k++) bad += qf_code_index(g->levels[k], mul, shift) != k;
    }
    CHECK(bad == 0, "code index of the grid levels: %lld wrong", bad);
    eden_cpu_checks(exhaustive);
}

// ----------------------------------------------------------------------------------------------------
// GPU: fast vs reference

static uint64_t lcg = 12345;
static double urand(void) {
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(lcg >> 11) * (1.0 / 9007199254740992.0);
}
static double nrand(void) { return sqrt(-2 * log(urand() + 1e-300)) * cos(6.283185307179586 * urand()); }

enum { D_NORMAL = 0, D_HEAVY, D_SPECIAL, D_NONFINITE, D_COUNT };
static const char* const DNAMES[D_COUNT] = {"normal", "heavy", "special", "nonfinite"};

// BF16 data of a rows x cols view (ld), padding NaN-filled (never read).
static std::vector<uint16_t> make_data(int64_t rows, int64_t cols, int64_t ld, int kind) {
    std::vector<uint16_t> h(rows * ld, 0x7FC1);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) {
            double x = nrand();
            if (kind == D_HEAVY) x *= exp(1.5 * nrand());
            if (kind >= D_SPECIAL) {
                // region type by 16x16 tile (deterministic in the tile), so whole blocks share a kind
                uint64_t tt = (uint64_t)(r / 16) * 7919 + (uint64_t)(c / 16) * 104729 + (uint64_t)kind * 31;
                tt = rng_mix64(tt) % 8;
                if (tt == 0) x = 0.0;
                else if (tt == 1) x *= 1e-40;      // BF16 subnormals
                else if (tt == 2) x *= 1e-30;      // tiny: E4M3 block scale underflows
                else if (tt == 3) x *= 1e37;       // huge: rotations overflow to inf
                else if (tt == 4) x = (urand() < 0.5 ? -0.0 : 0.0);
                else if (tt == 5) x *= 3e38 * urand();
            }
            uint16_t b = bf16_bits_rne((float)x);
            if (kind == D_NONFINITE && urand() < 0.002) {
                double u = urand();
                b = u < 0.4 ? 0x7F80 : u < 0.8 ? 0xFF80 : (u < 0.9 ? 0x7FC0 : 0xFFC3);
            }
            h[r * ld + c] = b;
        }
    }
    return h;
}

static QuantParams parse(const char* s) {
    QuantSpec spec;
    char err[256];
    fail_if(quant_spec_parse(s, &spec, err, sizeof(err)), "%s", err);
    return quant_params(&spec);
}

struct Case {
    const char* spec[2];
    int axis[2];
    int n;
};

// Pairs the one-read dual form takes (route.h's QK_DUAL: both copies round to nearest; checked on the CPU in main), beyond
// the trainer's: every Hadamard pair, 1x32 row-wise blocks (a block's halves on two lanes), the other 4-bit grids and
// scale rules.
static const Case DUALS[] = {
    {{"nvfp4", "nvfp4"}, {1, 0}, 2},
    {{"nvfp4", "nvfp4,h16,fixed"}, {1, 0}, 2},
    {{"int4,h16,seed=1", "int4,h16,seed=1"}, {1, 0}, 2},
    {{"e2m1,1x32,e4m3,rne,h16", "nvfp4,h16,fixed"}, {1, 0}, 2},
    {{"e2m1,1x32,e8m0,rne,h0", "e2m1,1x16,e8m0,rne,h0"}, {1, 0}, 2},
    {{"e1m2,1x32,e8m0ceil,rne,h16,plain", "e1m2,1x16,e4m3,rne,h16,plain"}, {1, 0}, 2},
    {{"int4,1x16,e4m3,rne,h16,fixed", "e2m1,1x16,e8m0ceil,rne,h16,seed=7"}, {1, 0}, 2},
};

// What quant_fast_supported must say, written from the kernels' contract (quant.cuh's header), not with its
// helpers: blocks along the reduction axis (a row-wise target's columns, a column-wise one's rows) tile it, the
// block width tiles the other axis, a Hadamard of 0, 2, 4, 8, 16 or 32 tiles the reduction axis, cols % 8 == 0;
// a pair is one row-wise and one column-wise target with Hadamard sizes (row, column) of a pair kernel.
static int expect_supported(const QuantParams* p, int n, const int* axes, const int* hs, int64_t rows, int64_t cols) {
    if (rows <= 0 || cols <= 0 || cols % 8) return 0;
    for (int k = 0; k < n; k++) {
        const int64_t along = axes[k] ? cols : rows, across = axes[k] ? rows : cols;
        const int h = p[k].hadamard;
        if (along % p[k].block_l || across % p[k].block_w) return 0;
        if (!(h == 0 || h == 2 || h == 4 || h == 8 || h == 16 || h == 32) || (h && along % h)) return 0;
    }
    if (n == 2) {
        if (axes[0] == axes[1]) return 0;
        const int hr = axes[0] ? hs[0] : hs[1], hc = axes[0] ? hs[1] : hs[0];
        static const int pairs[][2] = {{0, 0}, {0, 16}, {0, 32}, {16, 16}, {32, 32}};
        for (const auto& q : pairs)
            if (hr == q[0] && hc == q[1]) return 1;
        return 0;
    }
    return 1;
}

static int n_cases = 0, n_skipped_shape = 0, n_fail = 0, n_supp_bad = 0, n_delayed = 0, n_delayed_fail = 0, n_dual = 0;

// The delayed amax rule (quant_fast_delayed_ok): the apply pass alone for the n targets tf (one copy, or both copies
// of a pair in one call), each tensor scale from a given amax (the previous micro-step's), against the reference
// apply pass (quant_apply_gpu) from the same amax, for the amax of this tensor and for stale ones: a tensor that grew
// 4x, 1000x (block scales saturate at 448, elements clip) or from zero, and one that shrank 8x. Bit for bit: each
// copy and scale_dec; and the amax each hands on (amax_next, from the block amaxes) equals the amax pass's,
// amax_fast[k] (device).
static void check_delayed(const QuantTarget* tf, int n, const uint16_t* in, int64_t rows, int64_t cols, int64_t ld,
                          const float* const* amax_fast, const char* desc) {
    const size_t bytes = (size_t)rows * ld * 2;
    uint16_t *fake[2], *fref[2];
    float* d;   // target k: [8k] stale amax, [8k + 1] amax_next, [8k + 2] scale_dec; the reference's [8k + 4], [8k + 5]
    for (int k = 0; k < n; k++) {
        cuda_check(cudaMalloc(&fake[k], bytes));
        cuda_check(cudaMalloc(&fref[k], bytes));
    }
    cuda_check(cudaMalloc(&d, 16 * sizeof(float)));
    float amax[2];
    for (int k = 0; k < n; k++) cuda_check(cudaMemcpy(&amax[k], amax_fast[k], sizeof(float), cudaMemcpyDeviceToHost));
    const float factors[] = {1.0f, 0.25f, 1e-3f, 0.0f, 8.0f};
    std::vector<uint16_t> a(rows * ld), b(rows * ld);
    for (float f : factors) {
        QuantTarget td[2], tr[2];
        cuda_check(cudaMemset(d, 0, 16 * sizeof(float)));
        for (int k = 0; k < n; k++) {
            const float stale = amax[k] * f;
            cuda_check(cudaMemset(fake[k], 0x5A, bytes));
            cuda_check(cudaMemset(fref[k], 0x5A, bytes));
            cuda_check(cudaMemcpy(d + 8 * k, &stale, sizeof(float), cudaMemcpyHostToDevice));
            cuda_check(cudaMemcpy(d + 8 * k + 4, &stale, sizeof(float), cudaMemcpyHostToDevice));
            td[k] = tr[k] = tf[k];
            td[k].fake = (floatX*)fake[k];
            td[k].amax = d + 8 * k;
            td[k].amax_next = d + 8 * k + 1;
            td[k].scale_dec = d + 8 * k + 2;
            tr[k].fake = (floatX*)fref[k];
            tr[k].amax = d + 8 * k + 4;
            tr[k].amax_next = NULL;
            tr[k].scale_dec = d + 8 * k + 5;
            quant_apply_gpu((const floatX*)in, rows, cols, ld, &tr[k], 1, 0);
        }
        quant_fast_apply_gpu((const floatX*)in, rows, cols, ld, td, n, 0);   // both copies of a pair in one call
        cuda_check(cudaDeviceSynchronize());
        float h[16];
        cuda_check(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
        for (int k = 0; k < n; k++) {
            cuda_check(cudaMemcpy(a.data(), fref[k], bytes, cudaMemcpyDeviceToHost));
            cuda_check(cudaMemcpy(b.data(), fake[k], bytes, cudaMemcpyDeviceToHost));
            int64_t bad = 0;
            for (int64_t i = 0; i < rows * ld; i++) bad += a[i] != b[i];
            const float* g = h + 8 * k;
            const int ok = bad == 0 && f32_bits(g[1]) == f32_bits(amax[k]) && f32_bits(g[2]) == f32_bits(g[5]);
            n_delayed++;
            if (!ok && ++n_delayed_fail <= 8)
                printf("FAIL delayed amax %s t%d of %d, stale amax %g x %g: %lld elements differ; amax_next %08x, amax pass "
                       "%08x; sdec %08x / ref %08x\n", desc, k, n, amax[k], f, (long long)bad, f32_bits(g[1]),
                       f32_bits(amax[k]), f32_bits(g[2]), f32_bits(g[5]));
        }
    }
    for (int k = 0; k < n; k++) {
        cudaFree(fake[k]);
        cudaFree(fref[k]);
    }
    cudaFree(d);
}

static int stats_same(const QuantStats& a, const QuantStats& b) {
    return a.n == b.n && a.flushed == b.flushed && a.clipped == b.clipped && a.zero_blocks == b.zero_blocks &&
           a.nonfinite == b.nonfinite && fabs(a.err2 - b.err2) <= 1e-9 * fabs(b.err2) &&
           fabs(a.src2 - b.src2) <= 1e-9 * fabs(b.src2);
}

// The packed copies (4-bit grids) and the statistics of one case's targets, fast vs reference: codes, scales,
// amax and scale_dec bits; statistics counts exactly, sums to 1e-9 (atomics in another order), and the
// statistics pass leaves *scale_dec alone. Returns the number of targets that differ.
static int compare_packed_and_stats(const Case& cs, const QuantParams* p, const uint16_t* in, int64_t rows, int64_t cols,
                                    int64_t ld, uint64_t seed, const char* desc) {
    int bad_targets = 0;
    uint8_t *cref[2], *cfast[2];
    float* sc;
    QuantStats* st;
    size_t cbytes[2] = {0, 0}, sbytes[2] = {0, 0};
    cuda_check(cudaMalloc(&sc, 16 * sizeof(float)));
    cuda_check(cudaMalloc(&st, 4 * sizeof(QuantStats)));
    cuda_check(cudaMemset(sc, 0xFF, 16 * sizeof(float)));
    QuantTarget tr[2], tf[2];
    int packed = 1;
    for (int k = 0; k < cs.n; k++) {
        const int64_t MK = rows * cols;
        cbytes[k] = MK / 2;
        sbytes[k] = MK / p[k].block_l;
        cuda_check(cudaMalloc(&cref[k], cbytes[k] + sbytes[k]));
        cuda_check(cudaMalloc(&cfast[k], cbytes[k] + sbytes[k]));
        cuda_check(cudaMemset(cref[k], 0x5A, cbytes[k] + sbytes[k]));
        cuda_check(cudaMemset(cfast[k], 0x5A, cbytes[k] + sbytes[k]));
        const uint64_t key = rng_key(seed, 3, 100 + k);
        tr[k] = quant_target_packed(&p[k], cs.axis[k], key, cref[k], cref[k] + cbytes[k], sc + 4 * k, sc + 4 * k + 1);
        tf[k] = quant_target_packed(&p[k], cs.axis[k], key, cfast[k], cfast[k] + cbytes[k], sc + 4 * k + 2, sc + 4 * k + 3);
        packed &= !p[k].grid.e4m3;
    }
    if (packed) {
        CHECK(quant_fast_supported(tf, cs.n, rows, cols, ld), "packed targets not supported where fake ones are: %s", desc);
        quantize_gpu((const floatX*)in, rows, cols, ld, tr, cs.n, 0);
        quantize_fast_gpu((const floatX*)in, rows, cols, ld, tf, cs.n, 0);
    } else {   // the fp8 grid has no packed form: fake targets for the amaxes the statistics need
        for (int k = 0; k < cs.n; k++) { tr[k].codes = tr[k].scales = tf[k].codes = tf[k].scales = NULL; }
        quant_amax_gpu((const floatX*)in, rows, cols, ld, tr, cs.n, 0);
        quant_fast_amax_gpu((const floatX*)in, rows, cols, ld, tf, cs.n, 0);
    }
    float s_before[16];   // the scalars of the packed pass
    cuda_check(cudaMemcpy(s_before, sc, sizeof(s_before), cudaMemcpyDeviceToHost));
    const float sentinel = 12345.0f;
    for (int k = 0; k < cs.n; k++) cuda_check(cudaMemcpy(sc + 4 * k + 3, &sentinel, 4, cudaMemcpyHostToDevice));
    cuda_check(cudaMemset(st, 0, 4 * sizeof(QuantStats)));
    quant_stats_gpu((const floatX*)in, rows, cols, ld, tr, cs.n, st, 0);
    quant_fast_stats_gpu((const floatX*)in, rows, cols, ld, tf, cs.n, st + 2, 0);
    cuda_check(cudaDeviceSynchronize());
    float s[16];
    QuantStats hs[4];
    cuda_check(cudaMemcpy(s, sc, sizeof(s), cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(hs, st, sizeof(hs), cudaMemcpyDeviceToHost));
    for (int k = 0; k < cs.n; k++) {
        int ok = f32_bits(s[4 * k]) == f32_bits(s[4 * k + 2]) && f32_bits(s[4 * k + 3]) == f32_bits(sentinel);
        int64_t first = -1;
        if (packed) {
            std::vector<uint8_t> a(cbytes[k] + sbytes[k]), b(cbytes[k] + sbytes[k]);
            cuda_check(cudaMemcpy(a.data(), cref[k], a.size(), cudaMemcpyDeviceToHost));
            cuda_check(cudaMemcpy(b.data(), cfast[k], b.size(), cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < a.size() && first < 0; i++)
                if (a[i] != b[i]) first = (int64_t)i;
            ok = ok && first < 0 && f32_bits(s_before[4 * k + 1]) == f32_bits(s_before[4 * k + 3]);
        }
        const int sok = stats_same(hs[2 + k], hs[k]);
        if (!ok || !sok) {
            bad_targets++;
            if (++n_fail <= 12) {
                printf("FAIL %s t%d (packed %d): amax %08x/%08x, scale_dec %08x/%08x after statistics %08x", desc, k, packed,
                       f32_bits(s[4 * k]), f32_bits(s[4 * k + 2]), f32_bits(s_before[4 * k + 1]),
                       f32_bits(s_before[4 * k + 3]), f32_bits(s[4 * k + 3]));
                if (first >= 0)
                    printf("; first differing %s byte %lld", first < (int64_t)cbytes[k] ? "code" : "scale",
                           (long long)(first < (int64_t)cbytes[k] ? first : first - (int64_t)cbytes[k]));
                printf("%s\n", sok ? "" : "; statistics differ:");
                if (!sok)
                    for (int j = 0; j < 2; j++) {
                        const QuantStats& q = hs[j ? 2 + k : k];
                        printf("     %s n=%llu flushed=%llu clipped=%llu zero_blocks=%llu nonfinite=%llu err2=%.12g src2=%.12g\n",
                               j ? "fast" : "ref ", q.n, q.flushed, q.clipped, q.zero_blocks, q.nonfinite, q.err2, q.src2);
                    }
            }
        }
    }
    for (int k = 0; k < cs.n; k++) { cudaFree(cref[k]); cudaFree(cfast[k]); }
    cudaFree(sc);
    cudaFree(st);
    return bad_targets;
}

// Runs one case; returns 1 if it ran (supported), 0 if the fast path does not take it.
static int run_case(const Case& cs, int64_t rows, int64_t cols, int64_t pad, int kind, uint64_t seed) {
    const int64_t ld = cols + pad;
    QuantParams p[2];
    int hs[2];
    for (int k = 0; k < cs.n; k++) { p[k] = parse(cs.spec[k]); hs[k] = p[k].hadamard; }
    int any_shape_bad = 0;
    for (int k = 0; k < cs.n; k++) any_shape_bad |= !qf_shape_ok(&p[k], rows, cols, cs.axis[k]);
    std::vector<uint16_t> h = make_data(rows, cols, ld, kind);
    uint16_t *in, *fref[2], *ffast[2];
    float* sc;
    const size_t bytes = (size_t)rows * ld * 2;
    cuda_check(cudaMalloc(&in, bytes));
    cuda_check(cudaMemcpy(in, h.data(), bytes, cudaMemcpyHostToDevice));
    for (int k = 0; k < 2; k++) {
        cuda_check(cudaMalloc(&fref[k], bytes));
        cuda_check(cudaMalloc(&ffast[k], bytes));
        cuda_check(cudaMemset(fref[k], 0x5A, bytes));
        cuda_check(cudaMemset(ffast[k], 0x5A, bytes));
    }
    cuda_check(cudaMalloc(&sc, 16 * sizeof(float)));
    cuda_check(cudaMemset(sc, 0xFF, 16 * sizeof(float)));
    QuantTarget tr[2], tf[2];
    for (int k = 0; k < cs.n; k++) {
        uint64_t key = rng_key(seed, 3, 100 + k);
        tr[k] = quant_target_fake(&p[k], cs.axis[k], key, (floatX*)fref[k], ld, sc + 4 * k, sc + 4 * k + 1);
        tf[k] = quant_target_fake(&p[k], cs.axis[k], key, (floatX*)ffast[k], ld, sc + 4 * k + 2, sc + 4 * k + 3);
    }
    int sup = quant_fast_supported(tf, cs.n, rows, cols, ld);
    int want_sup = expect_supported(p, cs.n, cs.axis, hs, rows, cols);
    char desc[400];
    snprintf(desc, sizeof(desc), "[%s ax%d%s%s%s] %lldx%lld ld %lld %s", cs.spec[0], cs.axis[0], cs.n == 2 ? " + " : "",
             cs.n == 2 ? cs.spec[1] : "", cs.n == 2 ? (cs.axis[1] ? " ax1" : " ax0") : "", (long long)rows,
             (long long)cols, (long long)ld, DNAMES[kind]);
    if (sup != want_sup && ++n_supp_bad <= 5) printf("FAIL quant_fast_supported = %d, expected %d for %s\n", sup, want_sup, desc);
    if (!sup || any_shape_bad) {
        n_skipped_shape++;
        cudaFree(in); for (int k = 0; k < 2; k++) { cudaFree(fref[k]); cudaFree(ffast[k]); } cudaFree(sc);
        return 0;
    }
    quantize_gpu((floatX*)in, rows, cols, ld, tr, cs.n, 0);
    quantize_fast_gpu((floatX*)in, rows, cols, ld, tf, cs.n, 0);
    cuda_check(cudaDeviceSynchronize());
    float s[16];
    std::vector<uint16_t> a(rows * ld), b(rows * ld);
    // the fast copies (ffast, scalars at sc + 4k + 2) against the reference's, bit for bit
    auto compare = [&](const char* how) {
        cuda_check(cudaMemcpy(s, sc, sizeof(s), cudaMemcpyDeviceToHost));
        for (int k = 0; k < cs.n; k++) {
            cuda_check(cudaMemcpy(a.data(), fref[k], bytes, cudaMemcpyDeviceToHost));
            cuda_check(cudaMemcpy(b.data(), ffast[k], bytes, cudaMemcpyDeviceToHost));
            int64_t bad = 0, first = -1;
            for (int64_t i = 0; i < rows * ld; i++)
                if (a[i] != b[i]) { if (first < 0) first = i; bad++; }
            uint32_t ar = f32_bits(s[4 * k]), af = f32_bits(s[4 * k + 2]), dr = f32_bits(s[4 * k + 1]), df = f32_bits(s[4 * k + 3]);
            const int ok = bad == 0 && ar == af && dr == df;
            if (!ok) {
                n_fail++;
                if (n_fail <= 12) {
                    int64_t r = first < 0 ? 0 : first / ld, c = first < 0 ? 0 : first % ld;
                    printf("FAIL %s%s t%d: %lld/%lld differ", desc, how, k, (long long)bad, (long long)(rows * ld));
                    if (bad) printf(" first (%lld,%lld) in %04x ref %04x fast %04x", (long long)r, (long long)c, h[first], a[first], b[first]);
                    printf("; amax %08x/%08x sdec %08x/%08x\n", ar, af, dr, df);
                    int shown = 0;
                    for (int64_t i = first + 1; bad && i < rows * ld && shown < 2; i++)
                        if (a[i] != b[i]) {
                            printf("     (%lld,%lld) in %04x ref %04x fast %04x\n", (long long)(i / ld), (long long)(i % ld), h[i], a[i], b[i]);
                            shown++;
                        }
                }
            }
        }
    };
    compare("");
    // a pair the dual form takes (both copies from one read, QK_DUAL): counted, so main can tell that some ran
    if (cs.n == 2 && qf_route(QCALL_QUANTIZE, tf, cs.n, 0, rows, cols, ld).kernel[0] == QK_DUAL) n_dual++;
    compare_packed_and_stats(cs, p, in, rows, cols, ld, seed, desc);
    const float* amax_fast[2] = {sc + 2, sc + 6};
    int delayed_all = 1;
    for (int k = 0; k < cs.n; k++)
        if (quant_fast_delayed_ok(&tf[k], rows, cols, ld)) check_delayed(&tf[k], 1, in, rows, cols, ld, &amax_fast[k], desc);
        else delayed_all = 0;
    // a pair both of whose copies can be: both in one apply call (the trainer's call; the dual form where it takes them)
    if (cs.n == 2 && delayed_all) check_delayed(tf, 2, in, rows, cols, ld, amax_fast, desc);
    n_cases++;
    cudaFree(in);
    for (int k = 0; k < 2; k++) { cudaFree(fref[k]); cudaFree(ffast[k]); }
    cudaFree(sc);
    return 1;
}

static void gpu_checks(int quick) {
    // every single-target configuration on small shapes
    const char* grids[] = {"e2m1", "int4", "e1m2"};
    const char* blocks[] = {"1x16", "1x32", "16x16", "32x32"};
    const char* scales[] = {"e4m3", "e8m0", "e8m0ceil"};
    const char* rounds[] = {"rne", "sr"};
    const char* hads[] = {"h0", "h16", "h32,seed=5", "h16,plain", "h32,fixed", "h8", "h4,seed=9", "h2,fixed"};
    static char specbuf[2000][96];
    int nspec = 0;
    for (auto g : grids)
        for (auto b : blocks)
            for (auto s : scales)
                for (auto r : rounds)
                    for (auto h : hads)
                        snprintf(specbuf[nspec++], 96, "%s,%s,%s,%s,%s", g, b, s, r, h);
    // 47 x 272: odd rows (a row pair with one valid row, a partly valid half-warp) and a partial last tile
    // of 256 columns (qf_row2_kernel), in the quick subset too
    const int64_t small[][3] = {{64, 96, 0}, {47, 272, 16}, {96, 160, 8}, {48, 80, 0}, {32, 256, 24}, {160, 48, 0}};
    const int nsmall = (int)(sizeof(small) / sizeof(small[0]));
    int ran = 0;
    for (int i = 0; i < nspec; i++) {
        for (int axis = 0; axis < 2; axis++) {
            Case c = {{specbuf[i], NULL}, {axis, 0}, 1};
            const int nsh = quick ? 2 : nsmall;
            for (int sh = 0; sh < nsh; sh++) {
                int kind = (i + sh + axis) % D_COUNT;
                ran += run_case(c, small[sh][0], small[sh][1], small[sh][2], kind, 1000 + i);
            }
        }
    }
    printf("single targets, small shapes: %d cases ran\n", ran);
    // the fp8 (E4M3) grid (MXFP8, --qk-fp8): round-to-nearest only, every block shape, scale rule and Hadamard
    ran = 0;
    static char fp8buf[64][96];
    int nfp8 = 0;
    for (auto b : blocks)
        for (auto s : scales)
            for (auto h : {"h0", "h16", "h32,seed=5", "h8"}) snprintf(fp8buf[nfp8++], 96, "fp8,%s,%s,rne,%s", b, s, h);
    for (int i = 0; i < nfp8; i++)
        for (int axis = 0; axis < 2; axis++)
            for (int sh = 0; sh < (quick ? 2 : nsmall); sh++) {
                Case c = {{fp8buf[i], NULL}, {axis, 0}, 1};
                ran += run_case(c, small[sh][0], small[sh][1], small[sh][2], (i + sh + axis) % D_COUNT, 3000 + i);
            }
    for (int i = 0; i < nfp8; i++) {   // the Q/K part's dY pair, and fp8 with a 4-bit copy of the same source
        Case c = {{fp8buf[i], i % 2 ? fp8buf[(i * 7) % nfp8] : specbuf[(i * 37) % nspec]}, {1, 0}, 2};
        ran += run_case(c, small[i % nsmall][0], small[i % nsmall][1], small[i % nsmall][2], i % D_COUNT, 3500 + i);
    }
    printf("fp8 grid: %d cases ran\n", ran);
    // dual targets (row-wise + column-wise), random spec pairs on small shapes, every data kind
    ran = 0;
    for (int i = 0; i < (quick ? 150 : 600); i++) {
        int a = (int)(urand() * nspec), b = (int)(urand() * nspec);
        Case c = {{specbuf[a], specbuf[b]}, {1, 0}, 2};
        if (urand() < 0.5) { c.axis[0] = 0; c.axis[1] = 1; }
        const int sh = i % nsmall;
        ran += run_case(c, small[sh][0], small[sh][1], small[sh][2], i % D_COUNT, 2000 + i);
    }
    printf("dual targets, small shapes: %d cases ran\n", ran);
    // the trainer's configurations (recipes.h presets) at training shapes
    const Case trainer[] = {
        {{"nvfp4", NULL}, {1, 0}, 1},                                   // fprop X
        {{"nvfp4-2d", NULL}, {1, 0}, 1},                                // fprop W
        {{"nvfp4-2d", NULL}, {0, 0}, 1},                                // dgrad W
        {{"nvfp4,sr", "nvfp4,sr,h16,fixed"}, {1, 0}, 2},                // dY
        {{"nvfp4,h16,fixed", NULL}, {0, 0}, 1},                         // wgrad X
        {{"nvfp4", "nvfp4,h16,fixed"}, {1, 0}, 2},                      // X both copies
        {{"mxfp4-ceil", NULL}, {1, 0}, 1},
        {{"mxfp4-2d,sr", "mxfp4-2d,sr"}, {1, 0}, 2},
        {{"mxfp4-ceil,sr", NULL}, {0, 0}, 1},
        {{"mxfp4", NULL}, {1, 0}, 1},
        {{"int4,sr,h16,seed=1", "int4,sr,h16,seed=1"}, {1, 0}, 2},
        {{"int4,h16,seed=1", NULL}, {1, 0}, 1},
        {{"int4,h16,seed=1", NULL}, {0, 0}, 1},
        {{"nvfp4-2d", "nvfp4-2d"}, {1, 0}, 2},
        {{"nvfp4,sr", NULL}, {1, 0}, 1},
        {{"nvfp4,sr,h16,fixed", NULL}, {0, 0}, 1},
    };
    const int64_t big[][3] = {{768, 3072, 0}, {3072, 768, 0}, {2304, 768, 0}, {4096, 768, 0}, {480, 272, 16}, {8192, 3072, 0},
                              {65536, 768, 0}};
    ran = 0;
    const int nbig = quick ? 5 : 7;
    for (size_t i = 0; i < sizeof(trainer) / sizeof(trainer[0]); i++)
        for (int sh = 0; sh < nbig; sh++) {
            int kind = (int)((i + sh) % D_COUNT);
            if (big[sh][0] * big[sh][1] > (int64_t)8192 * 3072 && (i % 3)) continue;   // 65536 x 768: a third of them
            ran += run_case(trainer[i], big[sh][0], big[sh][1], big[sh][2], kind, 3000 + i);
        }
    printf("trainer configurations, training shapes: %d cases ran\n", ran);
    const int64_t dshapes[][3] = {{64, 96, 0}, {96, 160, 8}, {48, 80, 0}, {32, 256, 24}, {160, 48, 0}, {480, 272, 16},
                                  {768, 3072, 0}, {4096, 768, 0}};
    ran = 0;
    for (size_t i = 0; i < sizeof(DUALS) / sizeof(DUALS[0]); i++)
        for (int sh = 0; sh < (quick ? 4 : 8); sh++)
            ran += run_case(DUALS[i], dshapes[sh][0], dshapes[sh][1], dshapes[sh][2], (int)((i + sh) % D_COUNT), 4000 + i);
    printf("dual pairs, small and training shapes: %d cases ran\n", ran);

    // not handled: quant_fast_supported must say so
    {
        QuantParams p = parse("nvfp4"), ph8 = parse("nvfp4,h8"), ph64 = parse("nvfp4,h64");
        floatX* buf;
        uint8_t* codes;
        float* sc;
        cuda_check(cudaMalloc(&buf, 1 << 20));
        cuda_check(cudaMalloc(&codes, 1 << 16));
        cuda_check(cudaMalloc(&sc, 64));
        QuantTarget t = quant_target_fake(&p, 1, 1, buf, 256, sc, sc + 1);
        CHECK(quant_fast_supported(&t, 1, 64, 256, 256), "plain nvfp4 row-wise should be supported");
        QuantTarget tp = quant_target_packed(&p, 1, 1, codes, codes + 8192, sc, sc + 1);
        CHECK(quant_fast_supported(&tp, 1, 64, 256, 256), "packed output is supported");
        QuantTarget tpf = tp;
        tpf.fake = buf; tpf.ld_fake = 256;
        CHECK(!quant_fast_supported(&tpf, 1, 64, 256, 256), "fake and packed outputs of one target are not supported");
        QuantTarget tpm = quant_target_packed(&p, 1, 1, codes + 4, codes + 8192, sc, sc + 1);
        CHECK(!quant_fast_supported(&tpm, 1, 64, 256, 256), "codes not 8-byte aligned are not supported");
        QuantParams p8 = parse("mxfp8");
        QuantTarget tp8 = quant_target_packed(&p8, 1, 1, codes, codes + 8192, sc, sc + 1);
        CHECK(!quant_fast_supported(&tp8, 1, 64, 256, 256), "the fp8 grid has no packed form");
        QuantTarget t8 = quant_target_fake(&ph8, 1, 1, buf, 256, sc, sc + 1);
        CHECK(quant_fast_supported(&t8, 1, 64, 256, 256), "H8 is supported");
        QuantTarget t64 = quant_target_fake(&ph64, 1, 1, buf, 256, sc, sc + 1);
        CHECK(!quant_fast_supported(&t64, 1, 64, 256, 256), "H64 is not supported");
        CHECK(!quant_fast_supported(&t, 1, 64, 256, 260), "ld %% 8 != 0 is not supported");
        QuantTarget tmis = quant_target_fake(&p, 1, 1, (floatX*)((char*)buf + 8), 256, sc, sc + 1);
        CHECK(!quant_fast_supported(&tmis, 1, 64, 256, 256), "misaligned fake output is not supported");
        QuantTarget tt[2] = {t, t};
        CHECK(!quant_fast_supported(tt, 2, 64, 256, 256), "two targets on the same axis are not supported");
        QuantTarget t3[3] = {t, t, t};
        CHECK(!quant_fast_supported(t3, 3, 64, 256, 256), "three targets are not supported");
        CHECK(!quant_fast_supported(&t, 1, 64, 250, 256), "cols %% 16 != 0 for 1x16 row-wise is not supported");
        QuantParams pb = parse("nvfp4");
        pb.grid.levels[7] = 5.0f;
        QuantTarget tb = quant_target_fake(&pb, 1, 1, buf, 256, sc, sc + 1);
        CHECK(!quant_fast_supported(&tb, 1, 64, 256, 256), "an unknown grid is not supported");
        QuantParams ph16 = parse("nvfp4,h16"), ph32 = parse("nvfp4,h32");
        QuantTarget d1[2] = {quant_target_fake(&ph16, 1, 1, buf, 256, sc, sc + 1),
                             quant_target_fake(&ph32, 0, 1, buf, 256, sc + 2, sc + 3)};
        CHECK(!quant_fast_supported(d1, 2, 64, 256, 256), "dual H16 row + H32 col has no kernel");
        QuantTarget d2[2] = {quant_target_fake(&ph8, 1, 1, buf, 256, sc, sc + 1),
                             quant_target_fake(&ph8, 0, 1, buf, 256, sc + 2, sc + 3)};
        CHECK(!quant_fast_supported(d2, 2, 64, 256, 256) && quant_fast_supported(&d2[1], 1, 64, 256, 256),
              "a pair with H8 runs as two single-target passes");
        cudaFree(buf); cudaFree(codes); cudaFree(sc);
    }
    printf("cases compared: %d (skipped as unsupported shape/config: %d)\n", n_cases, n_skipped_shape);
    CHECK(n_cases > 0, "no case compared the fast kernels with the reference ones");
    CHECK(n_fail == 0, "fast vs reference (fake; packed and statistics): %d target comparisons differ in %d cases (first "
          "12 printed above)", n_fail, n_cases);
    CHECK(n_supp_bad == 0, "quant_fast_supported disagreed with the expectation %d times", n_supp_bad);
    printf("dual pairs made by one kernel from one read (QK_DUAL): %d\n", n_dual);
    CHECK(n_dual > 0 || qf_patch_only(), "no dual pair ran in one kernel (QK_DUAL took none of the cases)");
    printf("delayed amax (apply pass alone from a given amax, this tensor's or stale, against the reference apply): "
           "%d copies compared\n", n_delayed);
    CHECK((n_delayed > 0 || qf_patch_only()) && n_delayed_fail == 0, "delayed amax: %d of %d copies differ from the reference apply pass "
          "(fake copy, scale_dec) or hand on another amax than the amax pass's", n_delayed_fail, n_delayed);
}

// The device versions of the element functions (the SR ceiling there is done with adds rounding up, on
// the host in double) equal the host ones, which cpu_element_checks proves against the reference: every
// 61st float pattern in [0, 2^24] and a sparse sweep up to +inf, each with 8 random-bit values.
__global__ void elem_kernel(QFGrid g, uint32_t start, uint32_t stride, uint32_t n, const uint32_t* r16s,
                            uint32_t* out) {
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float a = f32_from_bits(start + i * stride);
    out[9 * (size_t)i] = f32_bits(qf_rne_mag(g, a));
    for (int k = 0; k < 8; k++) out[9 * (size_t)i + 1 + k] = f32_bits(qf_sr_mag(g, a, r16s[k]));
}

static void gpu_element_checks(void) {
    const uint32_t r16s[8] = {0, 1, 255, 32767, 32768, 40000, 65534, 65535};
    uint32_t *dr, *dout;
    const uint32_t n = 1u << 20;
    cuda_check(cudaMalloc(&dr, sizeof(r16s)));
    cuda_check(cudaMalloc(&dout, (size_t)9 * n * 4));
    cuda_check(cudaMemcpy(dr, r16s, sizeof(r16s), cudaMemcpyHostToDevice));
    std::vector<uint32_t> got((size_t)9 * n);
    for (int gi = 0; gi < 3; gi++) {
        const QFGrid G = qf_grid_consts(GRIDS[gi]);
        long long bad = 0;
        const uint32_t sweeps[2][2] = {{0u, 61u}, {f32_bits(16777216.0f), 0x0800u}};   // {start, stride}
        for (int sw = 0; sw < 2; sw++) {
            const uint32_t start = sweeps[sw][0], stride = sweeps[sw][1];
            for (uint32_t base = 0; base < 24; base++) {   // up to 24 launches of 2^20 patterns, to +inf
                const uint64_t st = (uint64_t)start + (uint64_t)base * n * stride;
                if (st > 0x7F800000u) break;
                const uint32_t cnt = (uint32_t)std::min<uint64_t>(n, (0x7F800000u - st) / stride + 1);
                elem_kernel<<<(cnt + 255) / 256, 256>>>(G, (uint32_t)st, stride, cnt, dr, dout);
                cuda_check_last();
                cuda_check(cudaMemcpy(got.data(), dout, (size_t)9 * cnt * 4, cudaMemcpyDeviceToHost));
                for (uint32_t i = 0; i < cnt; i++) {
                    const float a = f32_from_bits((uint32_t)st + i * stride);
                    bad += got[9 * (size_t)i] != f32_bits(qf_rne_mag(G, a));
                    for (int k = 0; k < 8; k++) bad += got[9 * (size_t)i + 1 + k] != f32_bits(qf_sr_mag(G, a, r16s[k]));
                }
            }
        }
        CHECK(bad == 0, "device element functions != host, grid %s: %lld mismatches", quant_grid_table[GRIDS[gi]].name, bad);
    }
    cudaFree(dr);
    cudaFree(dout);
}

// qf_block_scale's E4M3 path (the hardware's conversion and the per-CTA table of qf_block_rule) against
// quant_block_scale_e4m3_pre, the reference's arithmetic, comparing bits, sdec, inv and is_nan:
//   mult1 = 1: the rule's mult replaced by 1, so y = the block amax itself, for every float bit pattern m in
//              [start, start + n): the conversion and the table on every y in [0, FLT_MAX], and inf and NaN;
//   mult1 = 0: the rule as the kernels take it from a tensor amax, for m = each BF16 magnitude (<< 16) in
//              [start, start + n); with 4o6 also its 4-candidate (qf_e4m3_scale with mult4) against
//              quant_block_scale_e4m3_to(., S_enc, 4).
__global__ void block_scale_kernel(QFTarget T, float amax, int mult1, uint32_t start, uint32_t n,
                                   unsigned long long* bad) {
    __shared__ float2 tab[128];
    QFBlockRule R = qf_block_rule(T, amax, tab);
    if (mult1) R.mult = 1.0f;
    __syncthreads();
    unsigned long long nb = 0;
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const uint32_t m = mult1 ? start + i : (start + i) << 16;
        const QuantBlockScale g = qf_block_scale(T, R, m);
        const QuantBlockScale w = quant_block_scale_e4m3_pre(f32_from_bits(m), R.mult, R.s_dec);
        nb += g.bits != w.bits || f32_bits(g.sdec) != f32_bits(w.sdec) || f32_bits(g.inv) != f32_bits(w.inv) ||
              g.is_nan != w.is_nan;
        if (!mult1 && T.p.scale == QSCALE_E4M3_4O6) {   // 4o6's 4-candidate, as the CPU twin computes it
            const QuantBlockScale g4 = qf_e4m3_scale(R, m, R.mult4);
            const QuantBlockScale w4 = quant_block_scale_e4m3_to(f32_from_bits(m), R.s_enc, 4.0f);
            nb += g4.bits != w4.bits || f32_bits(g4.sdec) != f32_bits(w4.sdec) || f32_bits(g4.inv) != f32_bits(w4.inv) ||
                  g4.is_nan != w4.is_nan;
        }
    }
    if (nb) atomicAdd(bad, nb);
}

// MS-EDEN's pre-correction group scale (qg_eden_pre_scale and its table) against quant_block_scale's eden rule
// (eden_group_scale and its inverse) for m = each BF16 magnitude (<< 16) under the tensor amax: sdec and inv bits.
__global__ void eden_scale_kernel(QuantParams p, float amax, unsigned long long* bad) {
    __shared__ float2 tab[128];
    const float s_enc = quant_tensor_scale_enc(&p, amax);
    qf_scale_table(tab, 1.0f / s_enc, 1.0f);
    __syncthreads();
    const float mult = s_enc * (1.0f / EDEN_V);
    unsigned long long nb = 0;
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < 0x8000u; i += gridDim.x * blockDim.x) {
        const float2 g = qg_eden_pre_scale(tab, mult, i << 16);
        const QuantBlockScale w = quant_block_scale(&p, f32_from_bits(i << 16), s_enc);
        nb += f32_bits(g.x) != f32_bits(w.sdec) || f32_bits(g.y) != f32_bits(w.inv);
    }
    if (nb) atomicAdd(bad, nb);
}

static void gpu_block_scale_checks(void) {
    unsigned long long* dbad;
    cuda_check(cudaMalloc(&dbad, sizeof(*dbad)));
    auto run = [&](const QFTarget& T, float amax, int mult1, uint32_t start, uint32_t n) {
        cuda_check(cudaMemset(dbad, 0, sizeof(*dbad)));
        block_scale_kernel<<<1024, 256>>>(T, amax, mult1, start, n, dbad);
        cuda_check_last();
        unsigned long long b = 0;
        cuda_check(cudaMemcpy(&b, dbad, sizeof(b), cudaMemcpyDeviceToHost));
        return b;
    };
    const char* specs[] = {"nvfp4", "int4,sr,h16,seed=1", "e1m2,1x16,e4m3", "nvfp4,4o6"};
    const float amaxes[] = {0.0f,   1e-40f, 1e-30f, 3e-7f,   0.37f,    1.0f, 448.0f,
                            2688.0f, 3e5f,  1e38f,  FLT_MAX, INFINITY, NAN};
    for (const char* spec : specs) {
        QFTarget T;
        memset(&T, 0, sizeof(T));
        T.p = parse(spec);
        CHECK(quant_scale_is_e4m3(T.p.scale), "%s: expected E4M3 block scales", spec);
        // every float bit pattern from +0 to +inf, and a quiet NaN (the tensor amax sets the table's s_dec)
        unsigned long long b = run(T, 0.37f, 1, 0u, 0x7F800001u) + run(T, 0.37f, 1, 0x7FC00000u, 1u);
        CHECK(b == 0, "%s: E4M3 block scale (hardware conversion, table) != reference on %llu of the floats +0..+inf, NaN",
              spec, b);
        for (float a : amaxes) {
            b = run(T, a, 0, 0u, 0x8000u);   // every BF16 magnitude, inf and NaNs included
            CHECK(b == 0, "%s: E4M3 block scale != reference for %llu BF16 block amaxes (tensor amax %g)", spec, b,
                  (double)a);
        }
    }
    {
        const QuantParams pe = parse("nvfp4,eden");
        for (float a : amaxes) {
            cuda_check(cudaMemset(dbad, 0, sizeof(*dbad)));
            eden_scale_kernel<<<64, 256>>>(pe, a, dbad);
            cuda_check_last();
            unsigned long long b = 0;
            cuda_check(cudaMemcpy(&b, dbad, sizeof(b), cudaMemcpyDeviceToHost));
            CHECK(b == 0, "MS-EDEN group scale (hardware conversion, table) != eden_group_scale for %llu BF16 group amaxes "
                  "(tensor amax %g)", b, (double)a);
        }
    }
    cudaFree(dbad);
}

int main(int argc, char** argv) {
    int exhaustive = 0, quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--exhaustive")) exhaustive = 1;
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else fail("usage: %s [--exhaustive] [--quick]", argv[0]);
    }
    cpu_element_checks(exhaustive);
    {   // the fp8 (E4M3) grid runs on the fast kernels (reference elements); it has no packed form
        static uint16_t fake[64] __attribute__((aligned(16)));
        static uint8_t codes[64] __attribute__((aligned(16)));
        static float sc[2];
        QuantParams p8 = parse("mxfp8"), p4 = parse("mxfp4");
        QuantTarget t8 = quant_target_fake(&p8, 1, 0, (floatX*)fake, 64, sc, sc + 1);
        QuantTarget t4 = quant_target_fake(&p4, 1, 0, (floatX*)fake, 64, sc, sc + 1);
        QuantTarget tp = quant_target_packed(&p4, 1, 0, codes, codes + 32, sc, sc + 1);
        QuantTarget tp8 = quant_target_packed(&p8, 1, 0, codes, codes + 32, sc, sc + 1);
        CHECK(quant_fast_supported(&t8, 1, 32, 64, 64) && quant_fast_supported(&t4, 1, 32, 64, 64) &&
              quant_fast_supported(&tp, 1, 32, 64, 64) && !quant_fast_supported(&tp8, 1, 32, 64, 64),
              "quant_fast_supported: must take mxfp8 and mxfp4 fake copies and mxfp4 packed ones, refuse mxfp8 packed");
    }
    {   // which copies the kernels laid out for whole blocks per lane make: qf_row2_kernel the row-wise fake 1D ones
        // (QK_ROW2), qf_colfake_kernel the column-wise fake 1x16 ones (QK_COLFAKE), each with H16 or no
        // Hadamard, so gpu_checks' cases compare them with the reference kernels. The routes only ask: their
        // pointers are placeholders, never dereferenced (qf_route reads the targets' specs, forms and the shape).
        struct { const char* spec; int row, col; } ck[] = {
            {"nvfp4,h16,fixed", 1, 1}, {"nvfp4,sr,h16,fixed", 1, 1}, {"nvfp4", 1, 1}, {"nvfp4,sr", 1, 1},
            {"int4,sr,h16,seed=1", 1, 1}, {"e1m2,1x16,e8m0ceil,sr,h16,plain", 1, 1}, {"mxfp4", 1, 0}, {"mxfp4,h16", 1, 0},
            {"nvfp4-2d", 0, 0}, {"nvfp4,h32", 0, 0}, {"nvfp4,h8", 0, 0}, {"nvfp4,sr,h4", 0, 0}, {"nvfp4,4o6", 1, 1},
            {"nvfp4,4o6,sr,h16,fixed", 1, 1}, {"nvfp4-2d,4o6", 0, 0}, {"e2m1,1x32,4o6", 0, 0}, {"nvfp4,4o6,h32", 0, 0},
            {"fp8,1x16,e4m3,rne,h0", 1, 0}};
        int bad = 0;
        for (auto& c : ck)
            for (int axis = 0; axis < 2; axis++) {
                const QuantParams p = parse(c.spec);
                const QuantTarget t = quant_target_fake(&p, axis, 1, (floatX*)4096, 384, (float*)16, (float*)32);
                const QuantRoute R = qf_route(QCALL_APPLY, &t, 1, 0, 256, 384, 384);
                const int got = R.kernel[axis ? 0 : 1] == (axis ? QK_ROW2 : QK_COLFAKE), want = (axis ? c.row : c.col) && !qf_patch_only();
                if (got != want && bad++ < 3)
                    printf("  %s(%s) = %d, want %d\n", axis ? "row2" : "colfake", c.spec, got, want);
                // the delayed amax: exactly these copies, where they have an FP32 tensor scale (E4M3 block scales)
                const int dgot = quant_fast_delayed_ok(&t, 256, 384, 384), dwant = want && quant_scale_is_e4m3(p.scale);
                if (dgot != dwant && bad++ < 3) printf("  quant_fast_delayed_ok(%s, axis %d) = %d, want %d\n", c.spec, axis, dgot, dwant);
            }
        for (int axis = 0; axis < 2; axis++) {   // packed copies (Blackwell's) are the patch kernel's
            const QuantParams p = parse("nvfp4,h16,fixed");
            const QuantTarget t = quant_target_packed(&p, axis, 1, (uint8_t*)4096, (uint8_t*)65536, (float*)16, (float*)32);
            const QuantRoute R = qf_route(QCALL_APPLY, &t, 1, 0, 256, 384, 384);
            if (R.kernel[axis ? 0 : 1] != QK_PATCH && bad++ < 3) printf("  packed copy on axis %d taken\n", axis);
        }
        CHECK(bad == 0, "the whole-block kernels must take exactly the fake 1D copies they make (row-wise: H16 or none; "
                        "column-wise: 1x16, H16 or none; 4o6: 1x16 on both axes)");
    }
    {   // which dual passes (row-wise + column-wise fake copies of one source) the one-read form takes (QK_DUAL):
        // where the whole-block kernels would make both, both round to nearest, neither is 4o6, and the Hadamard sizes
        // are (0, 0), (0, 16) or (16, 16). Placeholder pointers, as above.
        struct { const char *row, *col; int want; } ck[] = {
            {"nvfp4,sr", "nvfp4,sr,h16,fixed", 0}, {"nvfp4", "nvfp4,h16,fixed", 1}, {"nvfp4", "nvfp4", 1},
            {"int4,sr,h16,seed=1", "int4,sr,h16,seed=1", 0}, {"int4,h16,seed=1", "int4,h16,seed=1", 1},
            {"nvfp4,sr", "nvfp4,h16,fixed", 0}, {"nvfp4,h16,fixed", "nvfp4", 0}, {"nvfp4,4o6,sr", "nvfp4,4o6,sr,h16,fixed", 0},
            {"nvfp4", "nvfp4,4o6", 0}, {"nvfp4", "mxfp4", 0}, {"nvfp4-2d", "nvfp4-2d", 0}, {"nvfp4", "nvfp4,h32", 0},
            {"mxfp4", "e2m1,1x16,e8m0,rne,h0", 1}, {"fp8,1x16,e4m3,rne,h0", "nvfp4", 1}};
        int bad = 0;
        for (auto& c : DUALS) {   // gpu_checks' extra pairs must be dual cases, or they would test nothing new
            const QuantParams pr = parse(c.spec[0]), pc = parse(c.spec[1]);
            const QuantTarget t[2] = {quant_target_fake(&pr, 1, 1, (floatX*)4096, 3072, (float*)16, (float*)32),
                                      quant_target_fake(&pc, 0, 2, (floatX*)8192, 3072, (float*)48, (float*)64)};
            if ((!quant_fast_supported(t, 2, 768, 3072, 3072) ||
                 qf_route(QCALL_APPLY, t, 2, 0, 768, 3072, 3072).kernel[0] != QK_DUAL) && !qf_patch_only() && bad++ < 3)
                printf("  DUALS (%s, %s) is not a dual case\n", c.spec[0], c.spec[1]);
        }
        for (auto& c : ck) {
            const QuantParams pr = parse(c.row), pc = parse(c.col);
            const QuantTarget t[2] = {quant_target_fake(&pr, 1, 1, (floatX*)4096, 384, (float*)16, (float*)32),
                                      quant_target_fake(&pc, 0, 2, (floatX*)8192, 384, (float*)48, (float*)64)};
            if (!quant_fast_supported(t, 2, 256, 384, 384)) {
                if (c.want && bad++ < 3) printf("  dual (%s, %s) not supported\n", c.row, c.col);
                continue;
            }
            const QuantRoute R = qf_route(QCALL_APPLY, t, 2, 0, 256, 384, 384);
            const int got = R.kernel[0] == QK_DUAL && R.kernel[1] == QK_DUAL, want = c.want && !qf_patch_only();
            if (got != want && bad++ < 3) printf("  dual(%s, %s): %d, want %d\n", c.row, c.col, got, want);
        }
        CHECK(bad == 0, "the one-read dual form must take exactly the pairs both whole-block kernels make alike");
    }
    if (device_count_or_zero() == 0) {
        test_skip("quant_fast gpu", "no CUDA GPU on this machine");
        return test_summary("quant_fast");
    }
    gpu_element_checks();
    gpu_block_scale_checks();
    gpu_checks(quick);
    return test_summary("quant_fast");
}
