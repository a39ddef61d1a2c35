// test_quant_gpu_cpu.cu: the GPU quantizer (llmc/fp4/quant.cuh) against its CPU twin (llmc/fp4/quant_cpu.h)
// and the numpy golden vectors (dev/fp4_ref.py), bit for bit. The CPU twin and fp4_ref.py are the references;
// test_quant_fast compares the same kernels with the reference GPU kernels.
//   - every spec a recipe can name: the slot specs of every recipe preset and of --qk-fp8 (mxfp8), the named
//     quantization presets, and every combination of the slot options (grids e2m1 / int4 / e1m2 / fp8, blocks
//     1x16 / 1x32 / 16x16 / 32x32, scales e4m3 / e8m0 / e8m0ceil / 4o6 (e2m1 only), rne / sr, Hadamard 0 / 2 / 4 / 8 / 16 / 32
//     with plain, fixed and seeded signs), each row-wise and column-wise, with fake and packed outputs (the
//     fp8 grid has no packed form), on normal, heavy-tailed, special (zeros, subnormals, tiny and huge blocks),
//     tie (values on the grid's decision points) and non-finite (inf, NaN) data, on shapes with partial warp
//     tiles and padded rows: fake values (and the padding left alone), codes, scales, amax (a NaN amax: any
//     NaN, see compare) and scale_dec bits, and the diagnostics' statistics (quant_fast_stats_gpu vs
//     quant_stats_cpu: counts exact);
//   - the trainer's passes for each preset: dY's two copies from one pass, X's and W's forward copy with the
//     backward copy's amax taken ahead and its apply pass later;
//   - the golden quantization records, through the fast kernels (fake and packed);
//   - large views, where the kernels' CTAs walk several tiles: MS-EDEN past its amax pass's grid cap (the rotated
//     tile stored and the next one committed by the same CTA), 4o6 on the whole-block kernels.
// Every configuration above must be supported by the fast kernels (quant_fast_supported).
// Skips (exit 0) without a GPU. Usage: build/test_quant_gpu_cpu [--quick]
#include <math.h>
#include <map>
#include <string>
#include <vector>
#include "llmc/fp4/quant.cuh"
#include "llmc/fp4/recipe.h"
#include "dev/test/testing.h"
#include "dev/test/fp4_golden.h"

// ----------------------------------------------------------------------------------------------------
// Data

static uint64_t lcg = 20261211;
static double urand(void) {
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(lcg >> 11) * (1.0 / 9007199254740992.0);
}
static double nrand(void) { return sqrt(-2 * log(urand() + 1e-300)) * cos(6.283185307179586 * urand()); }

enum { D_NORMAL = 0, D_HEAVY, D_SPECIAL, D_TIES, D_NONFINITE, D_COUNT };
static const char* const DNAMES[D_COUNT] = {"normal", "heavy", "special", "ties", "nonfinite"};
#define PAD_BITS 0x7FC1u   // the padding between rows: a NaN, which must never be read

// A value on (or halfway between) the grid's points, times 2^e: for E8M0 scales the block amax g->maxval 2^e
// makes the block scale exactly 2^e, so the halfway points are exact ties of the rounding.
static double tie_value(const GridTraits* g, int e) {
    double m;
    if (g->e4m3) {   // E4M3: 3 mantissa bits; odd multiples of 1/16 lie halfway
        m = 1.0 + (2.0 * (int)(urand() * 8) + 1.0) / 16.0;
        m = ldexp(m, (int)(urand() * 8) - 4);
    } else {
        const int j = (int)(urand() * 15);
        m = j < 7 ? g->mids[j] : g->levels[j - 7];
    }
    return (urand() < 0.5 ? -m : m) * ldexp(1.0, e);
}

// BF16 data of a rows x cols view with ld, the padding PAD_BITS. Special kinds choose per 16 x 16 tile, so
// whole blocks share them.
static std::vector<uint16_t> make_data(int64_t rows, int64_t cols, int64_t ld, int kind, const GridTraits* g) {
    std::vector<uint16_t> h(rows * ld, PAD_BITS);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            double x = nrand();
            const uint64_t tile = rng_mix64((uint64_t)(r / 16) * 7919 + (uint64_t)(c / 16) * 104729 + (uint64_t)kind * 31);
            if (kind == D_HEAVY) x *= exp(1.5 * nrand());
            if (kind == D_TIES) {
                const int e = (int)(tile % 21) - 10;
                x = (r + c) % 16 == 0 ? (urand() < 0.5 ? -g->maxval : g->maxval) * ldexp(1.0, e) : tie_value(g, e);
            }
            if (kind == D_SPECIAL || kind == D_NONFINITE) {
                switch (tile % 8) {
                case 0: x = 0.0; break;
                case 1: x *= 1e-40; break;                  // BF16 subnormals
                case 2: x *= 1e-30; break;                  // tiny: an E4M3 block scale underflows
                case 3: x *= 1e37; break;                   // huge: rotations overflow to inf
                case 4: x = urand() < 0.5 ? -0.0 : 0.0; break;
                case 5: x *= 3e38 * urand(); break;
                default: break;
                }
            }
            uint16_t b = bf16_bits_rne((float)x);
            if (kind == D_NONFINITE && urand() < 0.003) {
                const double u = urand();
                b = u < 0.35 ? 0x7F80 : u < 0.7 ? 0xFF80 : u < 0.8 ? 0x7FC0 : u < 0.9 ? 0xFFC3 : 0x7F81;
            }
            h[r * ld + c] = b;
        }
    return h;
}

// ----------------------------------------------------------------------------------------------------
// One target, GPU vs CPU

struct Shape { int64_t rows, cols, pad; };
static const Shape SHAPES[] = {{64, 96, 0}, {96, 160, 8}, {32, 256, 24}, {160, 32, 0}, {128, 128, 8}, {48, 80, 0},
                               {48, 256, 8}, {256, 40, 8}};   // (the last two: MS-EDEN's partial 32-row tiles)
static const int NSHAPES = (int)(sizeof(SHAPES) / sizeof(SHAPES[0]));

static int shape_ok(const QuantParams* p, int64_t rows, int64_t cols, int axis) {
    const int64_t M = axis ? rows : cols, K = axis ? cols : rows;
    return K % p->block_l == 0 && M % p->block_w == 0 && (!p->hadamard || K % p->hadamard == 0);
}

// The spec's parameters; MS-EDEN's per-call signs (step) drawn from sign_key, as the trainer draws them from
// the linear's dgrad.dy key.
static QuantParams parse(const char* s, uint64_t sign_key = 20261201) {
    QuantSpec spec;
    char err[512];
    fail_if(quant_spec_parse(s, &spec, err, sizeof(err)), "%s: %s", s, err);
    QuantParams p = quant_params(&spec);
    if (p.step_signs) quant_params_set_step_signs(&p, sign_key);
    return p;
}

// Device buffers for one view and one copy of it, reused by every case.
struct Dev {
    uint16_t *in, *fake;
    uint8_t *codes, *scales;
    float* sc;           // [2k] amax, [2k + 1] scale_dec of target k
    QuantStats* stats;   // one per target
    float* corr;         // MS-EDEN's corrections C of one copy (QuantTarget.eden_corr): one per 128 elements
    size_t in_bytes, code_bytes, scale_bytes;
};

static Dev dev_alloc(size_t in_bytes, size_t code_bytes, size_t scale_bytes, int copies) {
    Dev d;
    d.in_bytes = in_bytes; d.code_bytes = code_bytes; d.scale_bytes = scale_bytes;
    cuda_check(cudaMalloc(&d.in, in_bytes));
    cuda_check(cudaMalloc(&d.fake, in_bytes * copies));
    cuda_check(cudaMalloc(&d.codes, code_bytes * copies));
    cuda_check(cudaMalloc(&d.scales, scale_bytes * copies));
    cuda_check(cudaMalloc(&d.sc, 4 * sizeof(float) * copies));
    cuda_check(cudaMalloc(&d.stats, sizeof(QuantStats) * copies));
    cuda_check(cudaMalloc(&d.corr, in_bytes / 2 / 128 * sizeof(float)));
    return d;
}
static void dev_free(Dev& d) {
    cudaFree(d.in); cudaFree(d.fake); cudaFree(d.codes); cudaFree(d.scales); cudaFree(d.sc); cudaFree(d.stats);
    cudaFree(d.corr);
}

// The n corrections C the GPU wrote into d.corr (the outputs alone may hide a wrong sum order: test_eden).
static std::vector<float> read_corr(Dev& d, int64_t n) {
    std::vector<float> c(n);
    cuda_check(cudaMemcpy(c.data(), d.corr, n * sizeof(float), cudaMemcpyDeviceToHost));
    return c;
}

enum { OUT_FAKE = 0, OUT_PACKED = 1 };

// One copy as the GPU made it and as the CPU twin makes it.
struct Copy {
    QuantParams p;
    int axis, form;
    uint64_t key;
    std::vector<uint16_t> fake;          // rows * ld, padding included
    std::vector<uint8_t> codes, scales;
    float amax, scale_dec;
    QuantStats stats;
};

static int n_cases = 0, n_bad = 0;

static int stats_same(const QuantStats& a, const QuantStats& b) {
    return a.n == b.n && a.flushed == b.flushed && a.clipped == b.clipped && a.zero_blocks == b.zero_blocks &&
           a.nonfinite == b.nonfinite && fabs(a.err2 - b.err2) <= 1e-9 * fabs(b.err2) &&
           fabs(a.src2 - b.src2) <= 1e-9 * fabs(b.src2);
}

// The CPU twin's copy of the view (fake or packed, amax, scale_dec, statistics) in one pass.
static Copy cpu_copy(const QuantParams& p, int axis, int form, uint64_t key, const std::vector<uint16_t>& h, int64_t rows,
                     int64_t cols, int64_t ld) {
    Copy c;
    c.p = p; c.axis = axis; c.form = form; c.key = key;
    memset(&c.stats, 0, sizeof(c.stats));
    const int64_t n = rows * cols;
    if (form == OUT_FAKE) c.fake.assign(rows * ld, PAD_BITS);
    else { c.codes.assign(n / 2, 0); c.scales.assign(n / p.block_l, 0); }
    QuantView v = {h.data(), rows, cols, ld};
    const QuantCpuOut out = {.fake = form == OUT_FAKE ? c.fake.data() : NULL, .ld_fake = ld,
                             .codes = form == OUT_PACKED ? c.codes.data() : NULL,
                             .scales = form == OUT_PACKED ? c.scales.data() : NULL, .st = &c.stats};
    c.scale_dec = quant_cpu_pass(&p, v, axis, key, &out, &c.amax, "cpu twin");
    return c;
}

// The GPU target of copy k in d's buffers (sentinel-filled), and its results read back.
static QuantTarget gpu_target(Dev& d, int k, const QuantParams& p, int axis, int form, uint64_t key, int64_t ld) {
    float* sc = d.sc + 4 * k;
    if (form == OUT_FAKE) {
        uint16_t* fake = (uint16_t*)((char*)d.fake + k * d.in_bytes);
        cuda_check(cudaMemset(fake, 0x5A, d.in_bytes));   // the padding must keep it
        return quant_target_fake(&p, axis, key, (floatX*)fake, ld, sc, sc + 1);
    }
    uint8_t *codes = d.codes + k * d.code_bytes, *scales = d.scales + k * d.scale_bytes;
    cuda_check(cudaMemset(codes, 0x5A, d.code_bytes));
    cuda_check(cudaMemset(scales, 0x5A, d.scale_bytes));
    return quant_target_packed(&p, axis, key, codes, scales, sc, sc + 1);
}

static Copy gpu_read(Dev& d, int k, const QuantTarget& t, int form, int64_t rows, int64_t cols, int64_t ld) {
    Copy c;
    c.p = t.p; c.axis = t.axis; c.form = form; c.key = t.key;
    cuda_check(cudaDeviceSynchronize());
    if (form == OUT_FAKE) {
        c.fake.resize(rows * ld);
        cuda_check(cudaMemcpy(c.fake.data(), t.fake, rows * ld * 2, cudaMemcpyDeviceToHost));
        for (int64_t r = 0; r < rows; r++)   // the padding as the CPU copy has it, when left alone
            for (int64_t i = r * ld + cols; i < (r + 1) * ld; i++) c.fake[i] = c.fake[i] == 0x5A5A ? PAD_BITS : 0xDEAD;
    } else {
        const int64_t n = rows * cols;
        c.codes.resize(n / 2);
        c.scales.resize(n / t.p.block_l);
        cuda_check(cudaMemcpy(c.codes.data(), t.codes, c.codes.size(), cudaMemcpyDeviceToHost));
        cuda_check(cudaMemcpy(c.scales.data(), t.scales, c.scales.size(), cudaMemcpyDeviceToHost));
    }
    float sc[2];
    cuda_check(cudaMemcpy(sc, d.sc + 4 * k, sizeof(sc), cudaMemcpyDeviceToHost));
    c.amax = sc[0];
    c.scale_dec = sc[1];
    cuda_check(cudaMemcpy(&c.stats, d.stats + k, sizeof(QuantStats), cudaMemcpyDeviceToHost));
    return c;
}

// Compares a GPU copy with the CPU twin's; prints the first failures. with_stats: the GPU statistics were taken.
// A NaN amax may be any NaN: with a Hadamard, a NaN input reaches the amax through FP32 arithmetic, whose NaN
// results are canonical on the GPU and carry an input's payload on x86 (the scales, and so every output, are
// the same for any NaN amax).
static void compare(const Copy& g, const Copy& c, int with_stats, const char* what) {
    n_cases++;
    const int amax_ok = f32_bits(g.amax) == f32_bits(c.amax) || (g.amax != g.amax && c.amax != c.amax);
    const int dec_ok = f32_bits(g.scale_dec) == f32_bits(c.scale_dec);
    int64_t first = -1, nbad = 0;
    const char* where = "fake";
    if (c.form == OUT_FAKE) {
        for (size_t i = 0; i < c.fake.size(); i++)
            if (g.fake[i] != c.fake[i]) { if (first < 0) first = (int64_t)i; nbad++; }
    } else {
        for (size_t i = 0; i < c.codes.size(); i++)
            if (g.codes[i] != c.codes[i]) { if (first < 0) { first = (int64_t)i; where = "code byte"; } nbad++; }
        for (size_t i = 0; i < c.scales.size(); i++)
            if (g.scales[i] != c.scales[i]) { if (first < 0) { first = (int64_t)i; where = "scale byte"; } nbad++; }
    }
    const int st_ok = !with_stats || stats_same(g.stats, c.stats);
    if (amax_ok && dec_ok && nbad == 0 && st_ok) return;
    if (++n_bad > 12) return;
    printf("FAIL %s: %s", what, c.form == OUT_FAKE ? "fake" : "packed");
    if (nbad) {
        printf(" %lld differ, first %s %lld: gpu %04x cpu %04x", (long long)nbad, where, (long long)first,
               c.form == OUT_FAKE ? g.fake[first] : where[0] == 'c' ? g.codes[first] : g.scales[first],
               c.form == OUT_FAKE ? c.fake[first] : where[0] == 'c' ? c.codes[first] : c.scales[first]);
    }
    printf("; amax %08x/%08x scale_dec %08x/%08x\n", f32_bits(g.amax), f32_bits(c.amax), f32_bits(g.scale_dec),
           f32_bits(c.scale_dec));
    if (!st_ok)
        for (int j = 0; j < 2; j++) {
            const QuantStats& q = j ? c.stats : g.stats;
            printf("     %s stats n=%llu flushed=%llu clipped=%llu zero_blocks=%llu nonfinite=%llu err2=%.12g src2=%.12g\n",
                   j ? "cpu" : "gpu", q.n, q.flushed, q.clipped, q.zero_blocks, q.nonfinite, q.err2, q.src2);
        }
}

static std::map<std::string, std::vector<uint16_t>> data_cache;

static const std::vector<uint16_t>& data_for(int shape, int kind, const QuantParams& p) {
    const Shape& s = SHAPES[shape];
    char key[64];
    snprintf(key, sizeof(key), "%d/%d/%s", shape, kind, kind == D_TIES ? (p.grid.e4m3 ? "e4m3" : p.grid.maxval == 6.0f ? "e2m1"
                                                                            : p.grid.maxval == 7.0f ? "int4" : "e1m2") : "");
    auto it = data_cache.find(key);
    if (it == data_cache.end()) it = data_cache.emplace(key, make_data(s.rows, s.cols, s.cols + s.pad, kind, &p.grid)).first;
    return it->second;
}

static int n_unsupported = 0;

// One spec, one axis, one output form on one shape and data kind: quantize_fast_gpu, then quant_fast_stats_gpu,
// against quant_cpu_pass. Returns 0 when the shape does not fit the spec.
static int run_single(Dev& d, const char* spec, int axis, int form, int shape, int kind, uint64_t seed) {
    const QuantParams p = parse(spec, rng_key(seed, 3, 9));
    const Shape& s = SHAPES[shape];
    const int64_t ld = s.cols + s.pad;
    if (!shape_ok(&p, s.rows, s.cols, axis)) return 0;
    const std::vector<uint16_t>& h = data_for(shape, kind, p);
    cuda_check(cudaMemcpy(d.in, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
    const uint64_t key = rng_key(seed, 7, 40 + axis);
    QuantTarget t = gpu_target(d, 0, p, axis, form, key, ld);
    char what[256];
    snprintf(what, sizeof(what), "[%s] axis %d %lldx%lld ld %lld %s", spec, axis, (long long)s.rows, (long long)s.cols,
             (long long)ld, DNAMES[kind]);
    if (!quant_fast_supported(&t, 1, s.rows, s.cols, ld)) {
        if (++n_unsupported <= 5) printf("FAIL not supported by the fast kernels: %s %s\n", what, form ? "packed" : "fake");
        return 1;
    }
    const int64_t ncorr = p.rounding == QROUND_EDEN ? s.rows * s.cols / 128 : 0;   // MS-EDEN: C too
    if (ncorr) t.eden_corr = d.corr;
    quantize_fast_gpu((const floatX*)d.in, s.rows, s.cols, ld, &t, 1, 0);
    cuda_check(cudaMemset(d.stats, 0, sizeof(QuantStats)));
    quant_fast_stats_gpu((const floatX*)d.in, s.rows, s.cols, ld, &t, 1, d.stats, 0);
    const Copy g = gpu_read(d, 0, t, form, s.rows, s.cols, ld);
    const Copy c = cpu_copy(p, axis, form, key, h, s.rows, s.cols, ld);
    compare(g, c, 1, what);
    if (ncorr) {
        const std::vector<float> gc = read_corr(d, ncorr);
        std::vector<float> cc(ncorr);
        const QuantView v = {h.data(), s.rows, s.cols, ld};
        quant_eden_corrections_cpu(&p, v, axis, cc.data());
        CHECK(!memcmp(gc.data(), cc.data(), ncorr * sizeof(float)), "%s: the MS-EDEN corrections differ from the CPU twin's",
              what);
    }
    return 1;
}

// ----------------------------------------------------------------------------------------------------
// The specs

static std::vector<std::string> preset_specs(void) {
    std::vector<std::string> v;
    auto add = [&](const char* s) {
        for (auto& x : v) if (x == s) return;
        v.push_back(s);
    };
    for (int i = 0; i < NUM_RECIPE_PRESETS; i++)
        for (int s = 0; s < NUM_SLOTS; s++)
            if (strcmp(RECIPE_PRESETS[i].slot[s], "bf16")) add(RECIPE_PRESETS[i].slot[s]);
    add(RECIPE_QK_SPEC);
    for (int i = 0; i < QUANT_NUM_PRESETS; i++)
        if (strcmp(quant_presets[i].name, "bf16")) add(quant_presets[i].name);
    return v;
}

static std::vector<std::string> option_specs(void) {
    std::vector<std::string> v;
    const char* grids[] = {"e2m1", "int4", "e1m2", "fp8"};
    const char* blocks[] = {"1x16", "1x32", "16x16", "32x32"};
    const char* scales[] = {"e4m3", "e8m0", "e8m0ceil", "4o6"};
    const char* rounds[] = {"rne", "sr"};
    const char* hads[] = {"h2", "h4", "h8", "h16", "h32"};
    const char* signs[] = {"plain", "fixed", "seed=7"};
    char buf[128];
    for (auto g : grids)
        for (auto b : blocks)
            for (auto s : scales)
                for (auto r : rounds) {
                    if (!strcmp(g, "fp8") && !strcmp(r, "sr")) continue;   // the fp8 grid rounds to nearest only
                    if (!strcmp(s, "4o6") && strcmp(g, "e2m1")) continue;   // 4o6 is an e2m1 rule
                    snprintf(buf, sizeof(buf), "%s,%s,%s,%s,h0", g, b, s, r);
                    v.push_back(buf);
                    for (auto h : hads)
                        for (auto sg : signs) {
                            snprintf(buf, sizeof(buf), "%s,%s,%s,%s,%s,%s", g, b, s, r, h, sg);
                            v.push_back(buf);
                        }
                }
    return v;
}

static void single_targets(Dev& d, int quick) {
    const std::vector<std::string> presets = preset_specs(), options = option_specs();
    int ran = 0, i = 0;
    for (int set = 0; set < 2; set++) {
        const std::vector<std::string>& specs = set ? options : presets;
        for (const std::string& spec : specs) {
            i++;
            const int packable = !parse(spec.c_str()).grid.e4m3;
            for (int axis = 0; axis < 2; axis++)
                for (int form = 0; form < 1 + packable; form++)
                    for (int kind = 0; kind < D_COUNT; kind++) {
                        if (quick && (kind + i + axis + form) % 3 && set) continue;
                        // a shape that fits the spec, rotating through them
                        for (int k = 0; k < NSHAPES; k++) {
                            const int sh = (i + 2 * axis + form + kind + k) % NSHAPES;
                            if (run_single(d, spec.c_str(), axis, form, sh, kind, 1000 + i)) { ran++; break; }
                        }
                    }
        }
    }
    printf("single targets: %zu preset specs and %zu option combinations, %d cases\n", presets.size(), options.size(), ran);
}

// ----------------------------------------------------------------------------------------------------
// The trainer's passes (train_gpt_fp4.cu quantize_view): for each preset (and its Q/K part under --qk-fp8) at
// a training-like shape, fake and packed:
//   dY: dgrad.dy (row-wise) and wgrad.dy (column-wise) from one pass, or two when no pair kernel takes them;
//   X and W: the forward copy's pass also takes the amax of the backward copy, whose apply pass runs later.

static void pair_case(Dev& d, const QuantSpec& sa, const QuantSpec& sb, int form, int ahead, int64_t rows, int64_t cols,
                      int kind, const char* what) {
    QuantParams pa = quant_params(&sa), pb = quant_params(&sb);
    if (pa.step_signs) quant_params_set_step_signs(&pa, rng_key(5, 9, 3));   // MS-EDEN: one sign draw for the
    if (pb.step_signs) quant_params_set_step_signs(&pb, rng_key(5, 9, 3));   // linear's backward operands
    if (form == OUT_PACKED && (pa.grid.e4m3 || pb.grid.e4m3)) return;
    if (!shape_ok(&pa, rows, cols, 1) || !shape_ok(&pb, rows, cols, 0)) return;
    const std::vector<uint16_t> h = make_data(rows, cols, cols, kind, &pa.grid);
    cuda_check(cudaMemcpy(d.in, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
    const uint64_t ka = rng_key(5, 9, 1), kb = rng_key(5, 9, 2);
    QuantTarget t[2] = {gpu_target(d, 0, pa, 1, form, ka, cols), gpu_target(d, 1, pb, 0, form, kb, cols)};
    const floatX* in = (const floatX*)d.in;
    if (ahead) {   // the forward: t[0] made, t[1]'s amax taken ahead when a pair kernel takes both; the backward: t[1]
        const int both = quant_fast_supported(t, 2, rows, cols, cols);
        quant_fast_amax_gpu(in, rows, cols, cols, t, both ? 2 : 1, 0);
        quant_fast_apply_gpu(in, rows, cols, cols, &t[0], 1, 0);
        if (!both) quant_fast_amax_gpu(in, rows, cols, cols, &t[1], 1, 0);
        quant_fast_apply_gpu(in, rows, cols, cols, &t[1], 1, 0);
    } else if (quant_fast_supported(t, 2, rows, cols, cols)) {
        quantize_fast_gpu(in, rows, cols, cols, t, 2, 0);
    } else {
        quantize_fast_gpu(in, rows, cols, cols, &t[0], 1, 0);
        quantize_fast_gpu(in, rows, cols, cols, &t[1], 1, 0);
    }
    for (int k = 0; k < 2; k++) {
        const Copy g = gpu_read(d, k, t[k], form, rows, cols, cols);
        const Copy c = cpu_copy(k ? pb : pa, k ? 0 : 1, form, k ? kb : ka, h, rows, cols, cols);
        char buf[256];
        snprintf(buf, sizeof(buf), "%s copy %d (%s)", what, k, DNAMES[kind]);
        compare(g, c, 0, buf);
    }
}

static void trainer_passes(Dev& d, int quick) {
    // N = 256 tokens of a d12-like layer slice (K = 256 channels, OC = 384 outputs): X, W and dY views
    const int64_t N = 256, K = 256, OC = 384;
    int ran0 = n_cases;
    for (int i = 0; i < NUM_RECIPE_PRESETS; i++) {
        Recipe r;
        recipe_preset(&r, RECIPE_PRESETS[i].name);
        if (recipe_is_bf16(&r)) continue;
        for (int qk = 0; qk < 2; qk++) {
            QuantSpec s[NUM_SLOTS];
            for (int k = 0; k < NUM_SLOTS; k++) s[k] = qk ? recipe_qk_spec(&r, (Slot)k) : r.slot[k];
            for (int form = 0; form < 2; form++)
                for (int kind = 0; kind < D_COUNT; kind += quick ? 2 : 1) {
                    char what[160];
                    snprintf(what, sizeof(what), "%s%s dY pair", r.name, qk ? " q/k" : "");
                    pair_case(d, s[SLOT_DGRAD_DY], s[SLOT_WGRAD_DY], form, 0, N, OC, kind, what);
                    snprintf(what, sizeof(what), "%s%s X, wgrad.x amax ahead", r.name, qk ? " q/k" : "");
                    pair_case(d, s[SLOT_FPROP_X], s[SLOT_WGRAD_X], form, 1, N, K, kind, what);
                    snprintf(what, sizeof(what), "%s%s W, dgrad.w amax ahead", r.name, qk ? " q/k" : "");
                    pair_case(d, s[SLOT_FPROP_W], s[SLOT_DGRAD_W], form, 1, OC, K, kind, what);
                }
        }
    }
    printf("trainer passes: %d copies\n", n_cases - ran0);
}

// ----------------------------------------------------------------------------------------------------
// MS-EDEN from a dequantized source (the operand source src=fprop, train_gpt_fp4.cu fprop_copy_again): the
// input is a fake copy (here the CPU twin's row-wise NVFP4 copy of the data), the target reads it through
// src_dec; the CPU twin quantizes BF16(FP32(fake) * dec) itself.

static void eden_sources(Dev& d) {
    const int64_t rows = 256, cols = 256;
    float* ddec;
    cuda_check(cudaMalloc(&ddec, sizeof(float)));
    int ran = 0;
    for (int kind = 0; kind < D_COUNT; kind++)
        for (int axis = 0; axis < 2; axis++)
            for (int form = 0; form < 2; form++) {
                const QuantParams fq = parse("nvfp4"), p = parse("nvfp4,eden,src=fprop", rng_key(11, kind, axis));
                const std::vector<uint16_t> h = make_data(rows, cols, cols, kind, &fq.grid);
                std::vector<uint16_t> fake(rows * cols), src(rows * cols);
                const QuantView v = {h.data(), rows, cols, cols};
                const float fdec = quant_cpu(&fq, v, 1, rng_key(11, 1, 0), fake.data(), cols, NULL, NULL, NULL);
                for (size_t i = 0; i < src.size(); i++) src[i] = bf16_bits_rne(bf16_bits_to_float(fake[i]) * fdec);
                cuda_check(cudaMemcpy(d.in, fake.data(), fake.size() * 2, cudaMemcpyHostToDevice));
                cuda_check(cudaMemcpy(ddec, &fdec, sizeof(float), cudaMemcpyHostToDevice));
                const uint64_t key = rng_key(11, 2, axis);
                QuantTarget t = gpu_target(d, 0, p, axis, form, key, cols);
                t.src_dec = ddec;
                CHECK(quant_fast_supported(&t, 1, rows, cols, cols), "eden with a dequantized source: not supported");
                quantize_fast_gpu((const floatX*)d.in, rows, cols, cols, &t, 1, 0);
                cuda_check(cudaMemset(d.stats, 0, sizeof(QuantStats)));
                quant_fast_stats_gpu((const floatX*)d.in, rows, cols, cols, &t, 1, d.stats, 0);
                const Copy g = gpu_read(d, 0, t, form, rows, cols, cols);
                const Copy c = cpu_copy(p, axis, form, key, src, rows, cols, cols);
                char what[160];
                snprintf(what, sizeof(what), "eden from a dequantized nvfp4 copy, axis %d, %s", axis, DNAMES[kind]);
                compare(g, c, 1, what);
                ran++;
            }
    // a non-EDEN target does not take a dequantized source
    QuantTarget t = gpu_target(d, 0, parse("nvfp4"), 1, OUT_FAKE, 1, cols);
    t.src_dec = ddec;
    CHECK(!quant_fast_supported(&t, 1, rows, cols, cols), "src_dec is refused on a non-eden target");
    cuda_check(cudaFree(ddec));
    printf("eden sources: %d copies from dequantized sources\n", ran);
}

// ----------------------------------------------------------------------------------------------------
// Golden vectors (dev/fp4_ref.py) through the fast kernels

static void golden(Dev& d) {
    Golden g = golden_load(golden_find_file());
    GoldenRecord r;
    int ran = 0, skipped = 0;
    while (golden_next(&g, &r)) {
        if (r.type != GOLD_QUANT) continue;
        char spec_txt[81];
        memcpy(spec_txt, r.p + 48, 80);
        spec_txt[80] = 0;
        QuantParams p = parse(spec_txt);
        const GoldenQuant q = golden_quant_parse(&r, p.block_l);
        if (p.step_signs) quant_params_set_step_signs(&p, q.sign_key);   // MS-EDEN records carry their sign key
        const int64_t rows = q.rows, cols = q.cols, n = rows * cols;
        std::vector<uint16_t> in(n), want(n);
        golden_u16(in.data(), q.in, n);
        golden_u16(want.data(), q.fake, n);
        cuda_check(cudaMemcpy(d.in, in.data(), 2 * n, cudaMemcpyHostToDevice));
        for (int form = 0; form < 2; form++) {
            if (form == OUT_PACKED && p.grid.e4m3) continue;
            QuantTarget t = gpu_target(d, 0, p, q.axis, form, q.key, cols);
            if (q.corr) t.eden_corr = d.corr;   // MS-EDEN records: their C too
            if (!quant_fast_supported(&t, 1, rows, cols, cols)) { skipped++; continue; }   // e.g. cols % 8 != 0
            quantize_fast_gpu((const floatX*)d.in, rows, cols, cols, &t, 1, 0);
            const Copy c = gpu_read(d, 0, t, form, rows, cols, cols);
            int ok = (f32_bits(c.amax) == f32_bits(q.amax) || (isnan(c.amax) && isnan(q.amax))) &&
                     f32_bits(c.scale_dec) == f32_bits(q.scale_dec);
            if (q.corr) {
                const std::vector<float> corr = read_corr(d, (int64_t)q.ncorr);
                ok = ok && !memcmp(corr.data(), q.corr, q.ncorr * sizeof(float));
            }
            if (form == OUT_FAKE) ok = ok && !memcmp(c.fake.data(), want.data(), 2 * n);
            else ok = ok && !memcmp(c.codes.data(), q.codes, q.ncodes) && !memcmp(c.scales.data(), q.scales, q.nscales);
            CHECK(ok, "golden %s [%s] %s: the fast kernels differ from dev/fp4_ref.py", q.name, q.spec,
                  form ? "packed" : "fake");
            ran++;
        }
    }
    free(g.buf);
    printf("golden: %d quantizations through the fast kernels (%d skipped: a shape or spec they do not take)\n", ran,
           skipped);
    CHECK(ran > 0 && skipped == 0, "golden: the fast kernels must take every golden quantization record (%d ran, %d "
          "refused)", ran, skipped);
}

// ----------------------------------------------------------------------------------------------------
// Large views: 4608 x 4096 is 4608 MS-EDEN tiles of 32 x 128 on either axis, past the 4096 CTAs of its amax pass
// (qg_launch_eden_amax), so CTAs loop with the rotated tile stored between commits; the 4o6 copies of the
// whole-block kernels walk many tiles per CTA too. Fake outputs, normal and non-finite data.

static void large_views(void) {
    const int64_t rows = 4608, cols = 4096;
    static_assert(4608 / 32 * (4096 / 128) > 4096 && 4096 / 32 * (4608 / 128) > 4096, "past the grid cap on both axes");
    Dev d = dev_alloc((size_t)rows * cols * 2, 16, 16, 1);
    const char* specs[] = {"nvfp4,eden", "nvfp4,4o6", "nvfp4,4o6,sr,h16,fixed"};
    int ran = 0;
    for (const char* spec : specs)
        for (int kind : {(int)D_NORMAL, (int)D_NONFINITE})
            for (int axis = 0; axis < 2; axis++) {
                const QuantParams p = parse(spec, rng_key(13, kind, axis));
                const std::vector<uint16_t> h = make_data(rows, cols, cols, kind, &p.grid);
                cuda_check(cudaMemcpy(d.in, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
                const uint64_t key = rng_key(13, 7, axis);
                QuantTarget t = gpu_target(d, 0, p, axis, OUT_FAKE, key, cols);
                CHECK(quant_fast_supported(&t, 1, rows, cols, cols), "[%s] %lld x %lld: not supported", spec,
                      (long long)rows, (long long)cols);
                quantize_fast_gpu((const floatX*)d.in, rows, cols, cols, &t, 1, 0);
                const Copy g = gpu_read(d, 0, t, OUT_FAKE, rows, cols, cols);
                const Copy c = cpu_copy(p, axis, OUT_FAKE, key, h, rows, cols, cols);
                char what[160];
                snprintf(what, sizeof(what), "[%s] axis %d %lldx%lld %s (large view)", spec, axis, (long long)rows,
                         (long long)cols, DNAMES[kind]);
                compare(g, c, 0, what);
                ran++;
            }
    dev_free(d);
    printf("large views: %d copies of %lld x %lld\n", ran, (long long)rows, (long long)cols);
}

int main(int argc, char** argv) {
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else fail("usage: %s [--quick]", argv[0]);
    }
    if (device_count_or_zero() == 0) {
        test_skip("quant gpu vs cpu", "no CUDA GPU on this machine");
        return test_summary("quant_gpu_cpu");
    }
    // the largest view: 256 x 384 (the trainer passes); golden records are smaller
    const size_t in_bytes = 256 * 384 * 2 + 4096;
    Dev d = dev_alloc(in_bytes, in_bytes / 4, in_bytes / 32, 2);
    single_targets(d, quick);
    trainer_passes(d, quick);
    eden_sources(d);
    golden(d);
    dev_free(d);
    large_views();
    CHECK(n_unsupported == 0, "%d configurations not supported by the fast kernels", n_unsupported);
    CHECK(n_bad == 0, "GPU vs CPU: %d of %d copies differ (first 12 printed above)", n_bad, n_cases);
    return test_summary("quant_gpu_cpu");
}
