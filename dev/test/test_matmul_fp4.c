// test_matmul_fp4.c: the data layout contract of the native NVFP4 GEMM (llmc/fp4/matmul_fp4_layout.h), on the
// CPU (CI). It checks
//   - the scale swizzle twin: every (r, c) lands at the documented offset, padding is zero, no two sources
//     share a byte, the buffer size is the padded size;
//   - the CPU reference of the native GEMM (codes + swizzled scales, exactly what cuBLASLt reads) equals the
//     plain product of the dequantized tensors (unswizzled layout), for the three GEMMs of a linear layer
//     mapped onto matmul_fp4_native's (a, b, M, N, K) the way llmc/fp4/matmul_fp4.cuh does: bit for bit;
//   - which quantizer specs the native path accepts.
#include <math.h>
#include "llmc/fp4/quant_cpu.h"
#include "llmc/fp4/matmul_fp4_layout.h"
#include "dev/test/testing.h"

// The offset formula of docs/FP4_NUMERICS.md, transcribed here independently of fp4/formats.h.
static int64_t doc_offset(int64_t r, int64_t c, int64_t C) {
    return ((r / 128) * ((C + 3) / 4) + c / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + c % 4;
}

static uint32_t g_lcg = 1;
static uint32_t lcg(void) { g_lcg = g_lcg * 1664525u + 1013904223u; return g_lcg; }
static float urand(void) { return (float)((lcg() >> 8) + 0.5) / 16777216.0f; }   // (0, 1)
static float nrand(void) { return sqrtf(-2.0f * logf(urand())) * cosf(6.2831853f * urand()); }

// ----------------------------------------------------------------------------------------------------
// swizzle

// The inverse (matmul_fp4_swizzle_source, which the GPU swizzle kernel and the CPU twin both run), by hand: byte o of
// tile t = o / 512 (tiles_c = ceil(C / 4) per 128 rows), w = o % 512: row (t / tiles_c) * 128 + (w % 16) / 4 * 32 +
// w / 16, 16-block (t % tiles_c) * 4 + w % 4.
static void test_swizzle_source_literal(void) {
    const int64_t cases[][4] = {
        // {o, C, r, c}
        {0, 8, 0, 0},      {1, 8, 0, 1},      {3, 8, 0, 3},       {4, 8, 32, 0},      // w 4: (4 / 4) * 32
        {15, 8, 96, 3},    {16, 8, 1, 0},     {511, 8, 127, 3},                      // the first tile's last byte
        {512, 8, 0, 4},    {1023, 8, 127, 7}, {1024, 8, 128, 0},                     // tiles_c 2: tile 2 is rows 128..
        {512, 6, 0, 4},    {1024, 6, 128, 0},                                        // C 6: still 2 tiles per row band
        {512, 1, 128, 0},  {3, 1, 0, 3},                                             // C 1: one tile per band; c 3 is padding
        {512, 4, 128, 0},  {512, 5, 0, 4},                                           // C = 4 and 4 + 1 on both sides
        {5 * 512 + 100, 12, 166, 8},   // C 12: 3 tiles per band; t 5 = band 1, tile 2 (c 8); w 100: 32 + 100 / 16 = 38
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const int64_t* t = cases[i];
        int64_t r = -1, c = -1;
        matmul_fp4_swizzle_source(t[0], t[1], &r, &c);
        CHECK(r == t[2] && c == t[3], "swizzle_source(o=%lld, C=%lld) = (%lld, %lld), want (%lld, %lld)", (long long)t[0],
              (long long)t[1], (long long)r, (long long)c, (long long)t[2], (long long)t[3]);
    }
}


static void test_scale_bytes(void) {
    const int shapes[][3] = {{1, 1, 512}, {128, 4, 512}, {129, 4, 1024}, {128, 5, 1024}, {300, 6, 3 * 128 * 8},
                             {768, 48, 768 * 48}, {8192, 192, 8192 * 192},
                             // rows and 16-blocks at 128 - 1, 128, 128 + 1 and 4 - 1, 4, 4 + 1 (by hand: 128 x 4 per tile)
                             {127, 3, 512}, {256, 8, 2048}, {257, 9, 384 * 12}, {255, 7, 256 * 8}};
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
        CHECK(matmul_fp4_scale_bytes(shapes[i][0], shapes[i][1]) == (size_t)shapes[i][2],
              "scale_bytes(%d, %d) = %zu, want %d", shapes[i][0], shapes[i][1],
              matmul_fp4_scale_bytes(shapes[i][0], shapes[i][1]), shapes[i][2]);
}

static void test_offsets_literal(void) {
    // worked by hand from the formula: (r, c, C) -> offset
    const int64_t cases[][4] = {{0, 0, 8, 0},      {0, 1, 8, 1},     {0, 4, 8, 512},   {1, 0, 8, 16},
                                {32, 0, 8, 4},     {33, 5, 8, 533},  {127, 3, 8, 511}, {128, 0, 8, 1024},
                                {128, 0, 6, 1024}, {131, 7, 8, 1587}, {5, 0, 1, 80}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const int64_t* t = cases[i];
        CHECK(nvfp4_swizzled_scale_offset(t[0], t[1], t[2]) == t[3] && doc_offset(t[0], t[1], t[2]) == t[3],
              "offset(r=%lld, c=%lld, C=%lld) = %lld, want %lld", (long long)t[0], (long long)t[1], (long long)t[2],
              (long long)nvfp4_swizzled_scale_offset(t[0], t[1], t[2]), (long long)t[3]);
    }
}

static void test_swizzle_twin(int R, int C) {
    const size_t bytes = matmul_fp4_scale_bytes(R, C);
    uint8_t* src = (uint8_t*)xmalloc((size_t)R * C);
    uint8_t* dst = (uint8_t*)xmalloc(bytes);
    int* hits = (int*)calloc(bytes, sizeof(int));
    for (int64_t i = 0; i < (int64_t)R * C; i++) src[i] = (uint8_t)(1 + lcg() % 255);   // never 0
    memset(dst, 0xA5, bytes);                                                          // garbage
    fp4_swizzle_scales_cpu(dst, src, R, C);
    int wrong_formula = 0, out_of_range = 0, wrong_value = 0, inverse_bad = 0;
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) {
            int64_t o = nvfp4_swizzled_scale_offset(r, c, C);
            wrong_formula += o != doc_offset(r, c, C);
            if (o < 0 || o >= (int64_t)bytes) { out_of_range++; continue; }
            hits[o]++;
            wrong_value += dst[o] != src[r * C + c];
            int64_t rr, cc;
            matmul_fp4_swizzle_source(o, C, &rr, &cc);
            inverse_bad += rr != r || cc != c;
        }
    int collisions = 0, padding_dirty = 0, padding_count = 0;
    for (size_t o = 0; o < bytes; o++) {
        collisions += hits[o] > 1;
        if (hits[o] == 0) { padding_count++; padding_dirty += dst[o] != 0; }
    }
    // the padded matrix is (roundup(R,128), roundup(C,4)): every padded cell is a distinct byte too
    int padded_bad = 0;
    const int64_t Rp = ceil_div(R, 128) * 128, Cp = ceil_div(C, 4) * 4;
    memset(hits, 0, bytes * sizeof(int));
    for (int64_t r = 0; r < Rp; r++)
        for (int64_t c = 0; c < Cp; c++) {
            int64_t o = nvfp4_swizzled_scale_offset(r, c, C);
            if (o < 0 || o >= (int64_t)bytes || hits[o]++) padded_bad++;
        }
    CHECK(wrong_formula == 0, "swizzle %dx%d: fp4_formats offset != documented formula at %d cells", R, C, wrong_formula);
    CHECK(out_of_range == 0, "swizzle %dx%d: %d offsets outside the %zu-byte buffer", R, C, out_of_range, bytes);
    CHECK(wrong_value == 0, "swizzle %dx%d: %d cells not at their documented offset", R, C, wrong_value);
    CHECK(inverse_bad == 0, "swizzle %dx%d: %d cells where the inverse map disagrees", R, C, inverse_bad);
    CHECK(collisions == 0, "swizzle %dx%d: %d bytes receive two sources", R, C, collisions);
    CHECK(padding_dirty == 0, "swizzle %dx%d: %d of %d padding bytes not zeroed", R, C, padding_dirty, padding_count);
    CHECK(padding_count == (int)(bytes - (size_t)R * C), "swizzle %dx%d: %d padding bytes, want %zu", R, C,
          padding_count, bytes - (size_t)R * C);
    CHECK(padded_bad == 0, "swizzle %dx%d: the padded matrix does not tile the buffer one to one (%d)", R, C, padded_bad);
    free(src); free(dst); free(hits);
}

// ----------------------------------------------------------------------------------------------------
// the GEMM contract

typedef struct {
    uint8_t *codes, *scales, *sw;   // packed (M x K/2), row-major scales (M x K/16), swizzled scales
    uint16_t* fake;                  // the view's layout: code * block scale (exact BF16)
    float dec;
    int M, K;
} Operand;

static Operand quantize(const char* spec_txt, const uint16_t* view, int rows, int cols, int axis, uint64_t key) {
    QuantSpec spec;
    char err[512];
    fail_if(quant_spec_parse(spec_txt, &spec, err, sizeof(err)), "%s", err);
    QuantParams p = quant_params(&spec);
    fail_if(!matmul_fp4_spec_ok(&p), "spec %s is not native-capable", spec_txt);
    Operand o;
    o.M = axis ? rows : cols;
    o.K = axis ? cols : rows;
    o.codes = (uint8_t*)calloc((size_t)o.M * o.K / 2, 1);
    o.scales = (uint8_t*)xmalloc((size_t)o.M * o.K / 16);
    o.sw = (uint8_t*)xmalloc(matmul_fp4_scale_bytes(o.M, o.K / 16));
    o.fake = (uint16_t*)xmalloc(sizeof(uint16_t) * rows * cols);
    QuantView v = {view, rows, cols, cols};
    o.dec = quant_cpu(&p, v, axis, key, o.fake, cols, o.codes, o.scales, NULL);
    fp4_swizzle_scales_cpu(o.sw, o.scales, o.M, o.K / 16);
    // the packed form dequantizes (through the unswizzled layout) to the fake output
    uint16_t* deq = (uint16_t*)xmalloc(sizeof(uint16_t) * rows * cols);
    dequant_packed_cpu(&p, o.codes, o.scales, NULL, rows, cols, axis, deq, cols);
    CHECK(memcmp(deq, o.fake, sizeof(uint16_t) * rows * cols) == 0, "%s axis %d: dequant(packed) != fake", spec_txt, axis);
    free(deq);
    return o;
}
static void operand_free(Operand* o) { free(o->codes); free(o->scales); free(o->sw); free(o->fake); }
// the operand as the native GEMM reads it
static Fp4Operand packed(const Operand* o) {
    const Fp4Operand f = {o->codes, o->sw};
    return f;
}

static uint16_t* random_view(int rows, int cols) {
    uint16_t* v = (uint16_t*)xmalloc(sizeof(uint16_t) * rows * cols);
    for (int r = 0; r < rows; r++) {
        float row_scale = ldexpf(1.0f, (int)(lcg() % 9) - 4);   // spread block scales over 2^-4 .. 2^4
        for (int c = 0; c < cols; c++) v[r * cols + c] = bf16_bits_rne(nrand() * row_scale);
    }
    return v;
}

static float bf(uint16_t b) { return bf16_bits_to_float(b); }

// The three GEMMs in their natural form on the dequantized (fake) tensors, FP32, reduction index ascending,
// and the same through matmul_fp4_reference_cpu with the (a, b, M, N, K) of llmc/matmul_fp4.cuh.
static void test_linear_layer(int Ntok, int C, int OC) {
    uint16_t* X = random_view(Ntok, C);
    uint16_t* W = random_view(OC, C);
    uint16_t* dY = random_view(Ntok, OC);
    Operand x_rw = quantize("nvfp4", X, Ntok, C, 1, 0);
    Operand x_cw = quantize("nvfp4,h16", X, Ntok, C, 0, 0);
    Operand w_rw = quantize("nvfp4-2d", W, OC, C, 1, 0);
    Operand w_cw = quantize("nvfp4-2d", W, OC, C, 0, 0);
    Operand g_rw = quantize("nvfp4,sr", dY, Ntok, OC, 1, rng_key(7, 3, 11));
    Operand g_cw = quantize("nvfp4,h16,sr", dY, Ntok, OC, 0, rng_key(7, 3, 12));
    float* bias = (float*)xmalloc(sizeof(float) * OC);
    for (int o = 0; o < OC; o++) bias[o] = bf(bf16_bits_rne(nrand()));

    // fprop: out (Ntok x OC) = X @ W^T + bias; native: a = W rw (M = OC), b = X rw (N = Ntok), K = C
    {
        const float alpha = w_rw.dec * x_rw.dec;
        float* want = (float*)xmalloc(sizeof(float) * Ntok * OC);
        float* got = (float*)xmalloc(sizeof(float) * Ntok * OC);
        for (int n = 0; n < Ntok; n++)
            for (int o = 0; o < OC; o++) {
                float acc = 0.0f;
                for (int c = 0; c < C; c++) acc = acc + bf(w_rw.fake[o * C + c]) * bf(x_rw.fake[n * C + c]);
                float y = alpha * acc;
                want[n * OC + o] = y + bias[o];
            }
        CHECK(w_rw.M == OC && w_rw.K == C && x_rw.M == Ntok && x_rw.K == C, "fprop operand shapes");
        matmul_fp4_reference_cpu(got, packed(&w_rw), packed(&x_rw), OC, Ntok, C, alpha, bias, 0);
        CHECK(memcmp(got, want, sizeof(float) * Ntok * OC) == 0, "fprop %dx%dx%d: native contract != X @ W^T", Ntok, C, OC);
        // sensitivity: the unswizzled scales read as if swizzled give a different product. The reference
        // reads a buffer of the swizzled (padded) size, so they go at the start of one, zero padded.
        const size_t sw_bytes = matmul_fp4_scale_bytes(OC, C / 16);
        uint8_t* unswizzled = (uint8_t*)calloc(sw_bytes, 1);
        memcpy(unswizzled, w_rw.scales, (size_t)OC * (C / 16));
        const Fp4Operand w_unswizzled = {w_rw.codes, unswizzled};
        matmul_fp4_reference_cpu(got, w_unswizzled, packed(&x_rw), OC, Ntok, C, alpha, bias, 0);
        CHECK(memcmp(got, want, sizeof(float) * Ntok * OC) != 0, "fprop: the check cannot see a missing swizzle");
        free(unswizzled); free(want); free(got);
    }
    // dgrad: dX (Ntok x C) = dY @ W; native: a = W cw (M = C, K = OC), b = dY rw (N = Ntok), K = OC
    {
        const float alpha = w_cw.dec * g_rw.dec;
        float* want = (float*)xmalloc(sizeof(float) * Ntok * C);
        float* got = (float*)xmalloc(sizeof(float) * Ntok * C);
        for (int n = 0; n < Ntok; n++)
            for (int c = 0; c < C; c++) {
                float acc = 0.0f;
                for (int o = 0; o < OC; o++) acc = acc + bf(w_cw.fake[o * C + c]) * bf(g_rw.fake[n * OC + o]);
                want[n * C + c] = alpha * acc;
            }
        CHECK(w_cw.M == C && w_cw.K == OC && g_rw.M == Ntok && g_rw.K == OC, "dgrad operand shapes");
        matmul_fp4_reference_cpu(got, packed(&w_cw), packed(&g_rw), C, Ntok, OC, alpha, NULL, 0);
        CHECK(memcmp(got, want, sizeof(float) * Ntok * C) == 0, "dgrad %dx%dx%d: native contract != dY @ W", Ntok, C, OC);
        free(want); free(got);
    }
    // wgrad: dW (OC x C) += dY^T @ X; native: a = X cw (M = C, K = Ntok), b = dY cw (N = OC), K = Ntok
    {
        const float alpha = x_cw.dec * g_cw.dec;
        float* want = (float*)xmalloc(sizeof(float) * OC * C);
        float* got = (float*)xmalloc(sizeof(float) * OC * C);
        for (int i = 0; i < OC * C; i++) want[i] = got[i] = nrand();   // what was accumulated before
        for (int o = 0; o < OC; o++)
            for (int c = 0; c < C; c++) {
                float acc = 0.0f;
                for (int n = 0; n < Ntok; n++) acc = acc + bf(x_cw.fake[n * C + c]) * bf(g_cw.fake[n * OC + o]);
                float y = alpha * acc;
                want[o * C + c] = y + want[o * C + c];
            }
        CHECK(x_cw.M == C && x_cw.K == Ntok && g_cw.M == OC && g_cw.K == Ntok, "wgrad operand shapes");
        matmul_fp4_reference_cpu(got, packed(&x_cw), packed(&g_cw), C, OC, Ntok, alpha, NULL, 1);
        CHECK(memcmp(got, want, sizeof(float) * OC * C) == 0, "wgrad %dx%dx%d: native contract != dY^T @ X", Ntok, C, OC);
        free(want); free(got);
    }
    // 2D weight tiles: the column-wise copy is the exact transpose of the row-wise one (same values)
    {
        int bad = 0;
        for (int o = 0; o < OC; o++)
            for (int c = 0; c < C; c++) bad += w_rw.fake[o * C + c] != w_cw.fake[o * C + c];
        CHECK(bad == 0 && w_rw.dec == w_cw.dec, "2D weight copies differ at %d elements", bad);
    }
    operand_free(&x_rw); operand_free(&x_cw); operand_free(&w_rw); operand_free(&w_cw);
    operand_free(&g_rw); operand_free(&g_cw);
    free(X); free(W); free(dY); free(bias);
}

static void test_spec_ok(void) {
    const char* yes[] = {"nvfp4", "nvfp4-2d", "nvfp4,sr", "nvfp4,h16", "nvfp4,h32,seed=3,sr"};
    const char* no[] = {"mxfp4", "mxfp4-ceil", "mxfp4-2d", "int4", "e1m2", "nvfp4,1x32", "nvfp4,e8m0"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]) + sizeof(no) / sizeof(no[0]); i++) {
        int want = i < sizeof(yes) / sizeof(yes[0]);
        const char* t = want ? yes[i] : no[i - sizeof(yes) / sizeof(yes[0])];
        QuantSpec s;
        char err[512];
        if (quant_spec_parse(t, &s, err, sizeof(err))) { CHECK(0, "parse %s: %s", t, err); continue; }
        QuantParams p = quant_params(&s);
        CHECK(matmul_fp4_spec_ok(&p) == want, "matmul_fp4_spec_ok(%s) = %d, want %d", t, matmul_fp4_spec_ok(&p), want);
    }
}

int main(void) {
    test_scale_bytes();
    test_offsets_literal();
    test_swizzle_source_literal();
    const int shapes[][2] = {{1, 1}, {1, 2}, {5, 3}, {31, 4}, {128, 4}, {129, 5}, {160, 6}, {256, 48}, {300, 7},
                             {37, 130}, {768, 192}};
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) test_swizzle_twin(shapes[i][0], shapes[i][1]);
    test_spec_ok();
    test_linear_layer(160, 96, 224);   // every dimension padded somewhere: 160, 96, 224 rows; 6, 14, 10 blocks
    test_linear_layer(128, 64, 128);   // exact tiles
    return test_summary("matmul_fp4");
}
