// test_optim_state.c: CPU tests of llmc/fp4/optim_state.h, AdamW's moments in NVFP4 (--optimizer-state nvfp4):
// the block encoder (scales, codes, padding, the guards G1, G2, G5), stochastic rounding's unbiasedness over
// keys, the decode, the segment layout (per layer, sharded, alignment, sizes), the twin's update against FP32
// AdamW (the moments and the parameter of the first step exactly where the state holds the values exactly, then
// a toy problem trained both ways), and determinism. The GPU kernels are checked against this twin bit for bit
// by dev/test/test_optim_state_gpu.cu.
#include "llmc/fp4/optim_state.h"
#include "dev/test/testing.h"

static uint64_t lcg = 0x243F6A8885A308D3ull;
static double urand(void) {
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return ((lcg >> 11) + 0.5) / 9007199254740992.0;
}
static double nrand(void) { return sqrt(-2.0 * log(urand())) * cos(6.283185307179586 * urand()); }

static const GridTraits* E2M1 = NULL;

// decode one encoded block's element j
static float block_value(const uint8_t* codes8, uint8_t scale, float s_enc, int j) {
    return opt4_decode(E2M1, codes8, &scale, 1.0f / s_enc, (size_t)j);
}

static void test_encode_basics(void) {
    // G5: a fresh block (all bytes 0) under amax 0 decodes to 0
    uint8_t z[8] = {0}, zs = 0;
    for (int j = 0; j < 16; j++) CHECK(block_value(z, zs, opt4_s_enc(0.0f), j) == 0.0f, "fresh state decodes to 0");
    CHECK(opt4_s_enc(0.0f) == 1.0f && opt4_s_enc(2688.0f) == 1.0f && opt4_s_enc(1.0f) == 2688.0f,
          "S_enc = 2688 / amax, 1 for amax 0 (got %g %g %g)", opt4_s_enc(0.0f), opt4_s_enc(2688.0f), opt4_s_enc(1.0f));
    // values exactly on the grid of their block survive any rounding: max 6 -> block scale 1 under amax 2688
    float x[16];
    const float grid[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    for (int j = 0; j < 16; j++) x[j] = (j & 1 ? -1.0f : 1.0f) * grid[j % 8];
    x[7] = 6.0f;
    uint8_t c[8], sc;
    opt4_encode_block(E2M1, x, 16, opt4_s_enc(2688.0f), 0, 1, 0, c, &sc);
    CHECK(sc == e4m3_bits(1.0f), "block scale 1 (bits 0x%02x)", sc);
    for (int j = 0; j < 16; j++)
        CHECK(block_value(c, sc, opt4_s_enc(2688.0f), j) == x[j], "grid value %d: %g decodes to %g", j, x[j],
              block_value(c, sc, opt4_s_enc(2688.0f), j));
    // padding: a block of 5 values leaves codes 5..15 at 0
    opt4_encode_block(E2M1, x, 5, opt4_s_enc(2688.0f), 0, 1, 0, c, &sc);
    int pad0 = 1;
    for (int j = 5; j < 16; j++) pad0 &= ((c[j >> 1] >> (4 * (j & 1))) & 0xF) == 0;
    CHECK(pad0, "the padding's codes are 0");
    // every decoded value is within one grid step of the block (at most 2 * block scale / tensor scale) of x
    for (int rep = 0; rep < 2000; rep++) {
        const float amax = (float)exp(nrand() * 8.0);
        float v[16], bmax = 0.0f;
        const float bscale = (float)(amax * urand());
        for (int j = 0; j < 16; j++) { v[j] = (float)(bscale * nrand()); bmax = fmaxf(bmax, fabsf(v[j])); }
        const float a = fmaxf(amax, bmax);
        opt4_encode_block(E2M1, v, 16, opt4_s_enc(a), 0, 77, (uint64_t)rep * 16, c, &sc);
        const float step = 2.0f * e4m3_value(sc) / opt4_s_enc(a);
        for (int j = 0; j < 16; j++) {
            const float d = block_value(c, sc, opt4_s_enc(a), j);
            if (!(fabsf(d - v[j]) <= step * 1.0001f + 1e-30f)) {
                CHECK(0, "rep %d element %d: %g decodes to %g (block step %g)", rep, j, v[j], d, step);
                return;
            }
        }
    }
    CHECK(1, "2000 random blocks: every value within one grid step");
}

static void test_guards(void) {
    uint8_t c[8], sc;
    // G1: u values far below their block max (1/100 and 1e-6 of it) never decode to 0
    float u[16];
    for (int j = 0; j < 16; j++) u[j] = j == 0 ? 1.0f : (j < 8 ? 0.01f : 1e-6f);
    int zeros_pos = 0, zeros_signed = 0;
    for (int rep = 0; rep < 50; rep++) {
        opt4_encode_block(E2M1, u, 16, opt4_s_enc(1.0f), 1, 5, (uint64_t)rep * 16, c, &sc);
        for (int j = 0; j < 16; j++) zeros_pos += block_value(c, sc, opt4_s_enc(1.0f), j) == 0.0f;
        opt4_encode_block(E2M1, u, 16, opt4_s_enc(1.0f), 0, 5, (uint64_t)rep * 16, c, &sc);
        for (int j = 0; j < 16; j++) zeros_signed += block_value(c, sc, opt4_s_enc(1.0f), j) == 0.0f;
    }
    CHECK(zeros_pos == 0, "G1: %d positive u values decoded to 0", zeros_pos);
    CHECK(zeros_signed > 0, "without G1 (the m state), small values may flush to 0 (%d did)", zeros_signed);
    // G2: a block whose max is 1e-12 of the tensor amax: E4M3 would round its scale to 0; it gets 2^-9
    for (int j = 0; j < 16; j++) u[j] = 1e-12f;
    opt4_encode_block(E2M1, u, 16, opt4_s_enc(1.0f), 1, 5, 0, c, &sc);
    CHECK(sc == 1, "G2: the smallest E4M3 scale (bits 0x01), got 0x%02x", sc);
    CHECK(block_value(c, sc, opt4_s_enc(1.0f), 3) > 0.0f, "G2 + G1: a tiny u still decodes above 0");
    // zeros stay zeros, negative zero too
    for (int j = 0; j < 16; j++) u[j] = j & 1 ? -0.0f : 0.0f;
    opt4_encode_block(E2M1, u, 16, opt4_s_enc(1.0f), 1, 5, 0, c, &sc);
    int all0 = sc == 0;
    for (int j = 0; j < 16; j++) all0 &= block_value(c, sc, opt4_s_enc(1.0f), j) == 0.0f;
    CHECK(all0, "a block of zeros: scale 0 and every value 0");
}

// Stochastic rounding: over many keys the mean decoded value is the value (G3), for values between grid points.
static void test_sr_unbiased(void) {
    const int K = 20000;
    const float x[4] = {0.3f, 1.2f, 2.6f, 5.1f};   // in units where the block max 6 maps to the block scale
    double sum[4] = {0, 0, 0, 0};
    float v[16];
    for (int j = 0; j < 16; j++) v[j] = 0.0f;
    v[15] = 6.0f;
    for (int k = 0; k < K; k++) {
        uint8_t c[8], sc;
        for (int i = 0; i < 4; i++) v[i] = x[i];
        opt4_encode_block(E2M1, v, 16, opt4_s_enc(2688.0f), 0, rng_key(9, (uint32_t)k, 3), 0, c, &sc);
        for (int i = 0; i < 4; i++) sum[i] += block_value(c, sc, opt4_s_enc(2688.0f), i);
    }
    for (int i = 0; i < 4; i++) {
        const double mean = sum[i] / K, se = 1.0 / sqrt((double)K);   // grid gaps <= 2: sd <= 1
        CHECK(fabs(mean - x[i]) < 4 * se, "SR mean of %g over %d keys: %g (4 se %g)", x[i], K, mean, 4 * se);
    }
}

static void test_segments(void) {
    // three tensors: 10 x 2 layers per layer, 7 whole, 33 x 2 layers per layer; layers = 2
    const size_t sizes[3] = {20, 7, 66};
    const int per_layer[3] = {1, 0, 1};
    Opt4Seg s[8];
    size_t elems = 0;
    int k = opt4_segments(sizes, per_layer, 3, 2, 0, 93, s, 8, &elems);
    CHECK(k == 5, "whole range: 5 segments, got %d", k);
    const size_t want_n[5] = {10, 10, 7, 33, 33}, want_begin[5] = {0, 10, 20, 27, 60};
    size_t base = 0;
    for (int i = 0; i < k && i < 5; i++) {
        CHECK(s[i].n == want_n[i] && s[i].begin == want_begin[i] && s[i].index0 == 0 && s[i].base == base,
              "segment %d: begin %zu n %zu index0 %zu base %zu", i, s[i].begin, s[i].n, s[i].index0, s[i].base);
        base += (want_n[i] + 15) / 16 * 16;
    }
    CHECK(elems == base && elems % 16 == 0, "elements %zu (want %zu)", elems, base);
    CHECK(s[3].tensor == 2 && s[3].layer == 0 && s[4].layer == 1 && s[2].layer == 0, "tensors and layers");
    // a shard [15, 65): cuts tensor 0 layer 1 at 5, and tensor 2 layer 1 at 5
    k = opt4_segments(sizes, per_layer, 3, 2, 15, 50, s, 8, &elems);
    CHECK(k == 4 && s[0].begin == 15 && s[0].n == 5 && s[0].index0 == 5 && s[0].layer == 1 && s[3].n == 5 &&
          s[3].index0 == 0 && s[3].layer == 1, "shard [15, 65): %d segments", k);
    size_t tot = 0;
    for (int i = 0; i < k; i++) tot += s[i].n;
    CHECK(tot == 50, "the shard's segments cover its 50 elements (%zu)", tot);
    CHECK(opt4_segments(sizes, per_layer, 3, 2, 0, 93, s, 4, &elems) == -1, "too small an output: -1");
    CHECK(opt4_bytes(64, 3) == 80 + 3 * 2 * 4, "bytes of 64 elements, 3 segments: %zu", opt4_bytes(64, 3));
    CHECK(opt4_amax_offset(496) == 560 && opt4_amax_offset(512) == 576, "the amaxes start 16-byte aligned (%zu, %zu)",
          opt4_amax_offset(496), opt4_amax_offset(512));
    k = opt4_segments(sizes, per_layer, 3, 2, 93, 0, s, 8, &elems);
    CHECK(k == 0 && elems == 0, "an empty shard: no segments");
}

// AdamW's first step from a fresh state is exact in the twin: m0 = u0 = 0, so mt, vt and the parameter are
// adamw_step_ref's up to how each rounds (compared with a relative bound), and the stored state decodes to
// mt and sqrt(vt) within one grid step.
static void test_first_step(void) {
    const size_t n = 100;
    float p[100], q[100], g[100];
    for (size_t i = 0; i < n; i++) { p[i] = q[i] = (float)nrand() * 0.02f; g[i] = (float)nrand() * 1e-3f; }
    AdamWParams a = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1, 0};
    const size_t sizes[1] = {n};
    const int per_layer[1] = {0};
    Opt4Seg sg;
    size_t elems;
    opt4_segments(sizes, per_layer, 1, 1, 0, n, &sg, 1, &elems);
    uint8_t codes[2][64] = {{0}}, scales[2][8] = {{0}};
    float amax[2] = {0, 0};
    Opt4HostState h = {{codes[0], codes[1]}, {scales[0], scales[1]}, amax};
    const Opt4Step st = opt4_step_init(&a);
    opt4_update_cpu(p, g, &sg, 0, &h, &st, 1, 1);
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        float m = 0, v = 0;
        const float want = adamw_step_ref(q[i], g[i], &m, &v, &a);
        worst = fmax(worst, fabs(p[i] - want) / fmax(fabs(want), 1e-6));
        const float sdm = 1.0f / opt4_s_enc(amax[0]), sdu = 1.0f / opt4_s_enc(amax[1]);
        const float dm = opt4_decode(E2M1, codes[0], scales[0], sdm, i), du = opt4_decode(E2M1, codes[1], scales[1], sdu, i);
        const float stepm = 2.0f * e4m3_value(scales[0][i / 16]) * sdm, stepu = 2.0f * e4m3_value(scales[1][i / 16]) * sdu;
        CHECK(fabsf(dm - m) <= stepm * 1.0001f && fabsf(du - sqrtf(v)) <= stepu * 1.0001f && du > 0.0f,
              "element %zu: m %g stored as %g, sqrt(v) %g as %g", i, m, dm, sqrtf(v), du);
    }
    CHECK(worst < 1e-6, "first step's parameters against adamw_step_ref: worst relative difference %g", worst);
    CHECK(amax[0] > 0.0f && amax[1] > 0.0f, "the amaxes are set (%g, %g)", amax[0], amax[1]);
}

// A toy problem: minimize sum_i c_i (p_i - t_i)^2 with noisy gradients, 300 steps, FP32 AdamW against the twin.
static void test_toy_training(void) {
    const size_t n = 4096;
    float* p32 = (float*)xmalloc(n * 4); float* p4 = (float*)xmalloc(n * 4); float* t = (float*)xmalloc(n * 4);
    float* c = (float*)xmalloc(n * 4); float* m = (float*)xmalloc(n * 4); float* v = (float*)xmalloc(n * 4);
    float* g32 = (float*)xmalloc(n * 4); float* g4 = (float*)xmalloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        p32[i] = p4[i] = 0.0f; t[i] = (float)nrand(); c[i] = (float)exp(nrand() * 2.0); m[i] = v[i] = 0.0f;
    }
    const size_t sizes[1] = {n};
    const int per_layer[1] = {0};
    Opt4Seg sg;
    size_t elems;
    opt4_segments(sizes, per_layer, 1, 1, 0, n, &sg, 1, &elems);
    uint8_t* codes0 = (uint8_t*)calloc(elems / 2, 1); uint8_t* codes1 = (uint8_t*)calloc(elems / 2, 1);
    uint8_t* sc0 = (uint8_t*)calloc(elems / 16, 1); uint8_t* sc1 = (uint8_t*)calloc(elems / 16, 1);
    float amax[2] = {0, 0};
    Opt4HostState h = {{codes0, codes1}, {sc0, sc1}, amax};
    double loss0 = 0, l32 = 0, l4 = 0;
    for (size_t i = 0; i < n; i++) loss0 += c[i] * (double)t[i] * t[i];
    for (int step = 1; step <= 300; step++) {
        for (size_t i = 0; i < n; i++) {
            const float noise = (float)nrand() * 0.1f;
            g32[i] = 2.0f * c[i] * (p32[i] - t[i]) + noise;
            g4[i] = 2.0f * c[i] * (p4[i] - t[i]) + noise;
        }
        AdamWParams a = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, step, 0};
        for (size_t i = 0; i < n; i++) p32[i] = adamw_step_ref(p32[i], g32[i], &m[i], &v[i], &a);
        const Opt4Step st = opt4_step_init(&a);
        opt4_update_cpu(p4, g4, &sg, 0, &h, &st, 3, (uint32_t)step);
    }
    for (size_t i = 0; i < n; i++) {
        l32 += c[i] * (double)(p32[i] - t[i]) * (p32[i] - t[i]);
        l4 += c[i] * (double)(p4[i] - t[i]) * (p4[i] - t[i]);
    }
    printf("  toy problem: loss %.4g at the start, %.4g after 300 steps with FP32 moments, %.4g with NVFP4 moments\n",
           loss0, l32, l4);
    CHECK(l32 < 0.05 * loss0 && l4 < 0.05 * loss0, "both train (loss %.4g, %.4g of %.4g)", l32, l4, loss0);
    CHECK(l4 < 3.0 * l32 + 1e-3 * loss0, "NVFP4 moments within 3x of FP32's final loss (%.4g vs %.4g)", l4, l32);
    free(p32); free(p4); free(t); free(c); free(m); free(v); free(g32); free(g4);
    free(codes0); free(codes1); free(sc0); free(sc1);
}

// Determinism: the same update twice from the same state gives the same bytes; another seed draws other codes.
static void test_determinism(void) {
    const size_t n = 1000;
    const size_t sizes[1] = {n};
    const int per_layer[1] = {0};
    Opt4Seg sg;
    size_t elems;
    opt4_segments(sizes, per_layer, 1, 1, 0, n, &sg, 1, &elems);
    uint8_t bytes[3][2][512], scl[3][2][64];
    float p[3][1000], amax[3][2];
    float g[1000];
    for (size_t i = 0; i < n; i++) g[i] = (float)nrand();
    const uint64_t seeds[3] = {1, 1, 2};
    for (int r = 0; r < 3; r++) {
        memset(bytes[r], 0, sizeof(bytes[r])); memset(scl[r], 0, sizeof(scl[r]));
        amax[r][0] = amax[r][1] = 0.0f;
        for (size_t i = 0; i < n; i++) p[r][i] = 0.5f;
        Opt4HostState h = {{bytes[r][0], bytes[r][1]}, {scl[r][0], scl[r][1]}, amax[r]};
        AdamWParams a = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1, 0};
        const Opt4Step st = opt4_step_init(&a);
        for (uint32_t step = 1; step <= 3; step++) opt4_update_cpu(p[r], g, &sg, 0, &h, &st, seeds[r], step);
    }
    CHECK(memcmp(bytes[0], bytes[1], sizeof(bytes[0])) == 0 && memcmp(p[0], p[1], sizeof(p[0])) == 0,
          "the same update twice: the same state and parameters");
    CHECK(memcmp(bytes[0], bytes[2], sizeof(bytes[0])) != 0, "another seed: other stochastic roundings");
}

// The layout helpers the trainer, the GPU kernels (through opt4_device_view) and the CPU twin share, against values
// worked out by hand at their boundaries (none of them derived from the helpers themselves).
static void test_layout_boundaries(void) {
    // elems (a multiple of 16): codes elems / 2 bytes per state, scales elems / 16, the amaxes after both states'
    // codes and scales, 2 (elems / 2 + elems / 16) = 9 elems / 8 bytes rounded up to 16
    const struct { size_t elems, code, scale, amax; } sizes[] = {
        {0, 0, 0, 0},        // nothing: the amaxes at 0
        {16, 8, 1, 32},      // 18 -> 32
        {32, 16, 2, 48},     // 36 -> 48
        {48, 24, 3, 64},     // 54 -> 64
        {64, 32, 4, 80},     // 72 -> 80
        {112, 56, 7, 128},   // 126 -> 128
        {128, 64, 8, 144},   // 144: already aligned, stays
        {144, 72, 9, 176},   // 162 -> 176
        {4294967296ull, 2147483648ull, 268435456ull, 4831838208ull},   // 2^32: 9 * 2^29, a multiple of 16 (no 32-bit wrap)
    };
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        const size_t e = sizes[i].elems;
        CHECK(opt4_code_bytes(e) == sizes[i].code && opt4_scale_bytes(e) == sizes[i].scale &&
              opt4_amax_offset(e) == sizes[i].amax, "elems %zu: codes %zu scales %zu amax at %zu, want %zu %zu %zu", e,
              opt4_code_bytes(e), opt4_scale_bytes(e), opt4_amax_offset(e), sizes[i].code, sizes[i].scale, sizes[i].amax);
    }
    // the checkpoint's bytes: the amax offset plus 2 floats per segment
    CHECK(opt4_bytes(0, 0) == 0 && opt4_bytes(0, 1) == 8 && opt4_bytes(16, 1) == 40 && opt4_bytes(32, 2) == 64 &&
          opt4_bytes(4294967296ull, 3) == 4831838232ull, "opt4_bytes: %zu %zu %zu %zu %zu", opt4_bytes(0, 0),
          opt4_bytes(0, 1), opt4_bytes(16, 1), opt4_bytes(32, 2), opt4_bytes(4294967296ull, 3));
    // the arrays inside one buffer of 48 elements: m's codes at 0 (24 bytes), m's scales at 24 (3), u's codes at 27,
    // u's scales at 51, the amaxes at 64
    static uint8_t mem[128];
    const Opt4HostState h = opt4_state_in(mem, 48);
    CHECK(h.codes[0] == mem && h.scales[0] == mem + 24 && h.codes[1] == mem + 27 && h.scales[1] == mem + 51 &&
          (uint8_t*)h.amax == mem + 64, "opt4_state_in(48): %td %td %td %td %td", h.codes[0] - mem, h.scales[0] - mem,
          h.codes[1] - mem, h.scales[1] - mem, (uint8_t*)h.amax - mem);
    // rng tensor ids: 0x20000000 | tensor << 16 | layer << 1 | state
    const struct { int tensor, layer, state; uint32_t id; } ids[] = {
        {0, 0, 0, 0x20000000u}, {0, 0, 1, 0x20000001u}, {0, 1, 0, 0x20000002u}, {1, 0, 0, 0x20010000u},
        {12, 47, 1, 0x200C005Fu},        // 12 << 16 = 0xC0000, 47 << 1 | 1 = 95 = 0x5F
        {15, 32767, 1, 0x200FFFFFu},     // the largest layer before the tensor's bits
    };
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++)
        CHECK(opt4_tensor_id(ids[i].tensor, ids[i].layer, ids[i].state) == ids[i].id, "opt4_tensor_id(%d, %d, %d) = %#x, "
              "want %#x", ids[i].tensor, ids[i].layer, ids[i].state,
              opt4_tensor_id(ids[i].tensor, ids[i].layer, ids[i].state), ids[i].id);
    // segments at a block's edges: each starts a new 16-element block in the state (base), whatever its length
    const struct {
        size_t sizes[2];
        int per_layer[2], layers;
        size_t lo, count;
        int k;
        size_t elems, begin[2], n[2], index0[2], base[2];
        int tensor[2], layer[2];
    } segs[] = {
        {{16, 0}, {0, 0}, 1, 0, 16, 1, 16, {0}, {16}, {0}, {0}, {0}, {0}},   // one block exactly
        {{15, 0}, {0, 0}, 1, 0, 15, 1, 16, {0}, {15}, {0}, {0}, {0}, {0}},   // block - 1: padded to 16
        {{17, 0}, {0, 0}, 1, 0, 17, 1, 32, {0}, {17}, {0}, {0}, {0}, {0}},   // block + 1: two blocks
        {{1, 0}, {0, 0}, 1, 0, 1, 1, 16, {0}, {1}, {0}, {0}, {0}, {0}},      // one element
        {{16, 1}, {0, 0}, 1, 0, 17, 2, 32, {0, 16}, {16, 1}, {0, 0}, {0, 16}, {0, 1}, {0, 0}},
        {{16, 16}, {0, 0}, 1, 16, 1, 1, 16, {16}, {1}, {0}, {0}, {1}, {0}},  // a shard of tensor 1's first element
        {{16, 16}, {0, 0}, 1, 15, 2, 2, 32, {15, 16}, {1, 1}, {15, 0}, {0, 16}, {0, 1}, {0, 0}},   // across the edge
        {{48, 0}, {1, 0}, 3, 16, 16, 1, 16, {16}, {16}, {0}, {0}, {0}, {1}},   // layer 1 of 3 slices of 16
        {{48, 0}, {1, 0}, 3, 31, 2, 2, 32, {31, 32}, {1, 1}, {15, 0}, {0, 16}, {0, 0}, {1, 2}},   // layers 1 and 2
        {{16, 16}, {0, 0}, 1, 32, 0, 0, 0, {0}, {0}, {0}, {0}, {0}, {0}},    // at the end, empty
    };
    for (size_t i = 0; i < sizeof(segs) / sizeof(segs[0]); i++) {
        Opt4Seg out[4];
        size_t elems = 12345;
        const int k = opt4_segments(segs[i].sizes, segs[i].per_layer, 2, segs[i].layers, segs[i].lo, segs[i].count, out,
                                    segs[i].k, &elems);   // (cap = exactly the count: enough)
        int ok = k == segs[i].k && elems == segs[i].elems;
        for (int j = 0; ok && j < k; j++)
            ok = out[j].begin == segs[i].begin[j] && out[j].n == segs[i].n[j] && out[j].index0 == segs[i].index0[j] &&
                 out[j].base == segs[i].base[j] && out[j].tensor == segs[i].tensor[j] && out[j].layer == segs[i].layer[j];
        CHECK(ok, "segments case %zu: %d segments over %zu elements (want %d over %zu)", i, k, elems, segs[i].k,
              segs[i].elems);
        if (segs[i].k > 0)
            CHECK(opt4_segments(segs[i].sizes, segs[i].per_layer, 2, segs[i].layers, segs[i].lo, segs[i].count, out,
                                segs[i].k - 1, &elems) == -1, "segments case %zu: one short of room: -1", i);
    }
}

int main(void) {
    E2M1 = grid_traits(QGRID_E2M1);
    test_encode_basics();
    test_guards();
    test_sr_unbiased();
    test_segments();
    test_layout_boundaries();
    test_first_step();
    test_toy_training();
    test_determinism();
    return test_summary("optim_state");
}
