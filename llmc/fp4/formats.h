// fp4/formats.h: the 4-bit number formats as data, and their rounding and scale arithmetic.
// defines: QuantGrid, GridTraits, quant_grid_table[], grid_traits(), f32_bits(), f32_from_bits(),
//          exp2_exact(), bf16_bits_to_float(), e4m3_rne_satfinite(), e4m3_bits(), e4m3_value(),
//          e8m0_exponent(), e8m0_value(), grid_round_rne(), grid_code_value(), grid_code_is_zero(),
//          QuantScaleRule, QuantRounding, QuantSigns, QuantSpec, quant_presets[], quant_spec_parse(),
//          quant_spec_format(), quant_spec_is_valid(), QuantParams, quant_sign_mask(), quant_params(),
//          quant_scale_is_e4m3(), quant_tensor_scale_enc(), quant_tensor_scale_dec(), QuantBlockScale,
//          quant_block_scale_e4m3_pre(), quant_block_scale_e4m3_to(), quant_block_scale_e8m0(), quant_block_scale(),
//          f32_mul_rn(), quant_4o6_err_add(), quant_packed_scale_value(), nvfp4_swizzled_scale_offset(), QuantSource,
//          quant_source_names[], quant_spec_eden_problem(), quant_step_sign_mask(), quant_params_set_step_signs(),
//          EDEN_SIGN_DRAW_BASE, EDEN_SCALE_DRAW_BASE, EDEN_V, EDEN_SCALE_MAX, f32_div_rn(), eden_tensor_scale_enc(),
//          eden_group_scale(), eden_scale_sr(), eden_scale_r16(), eden_sum128(), eden_correction()
// Every function the quantizer applies to a number lives here as an HD function, so the CPU path
// (CI, no GPU) and the GPU kernels run the same code. The exact rules are docs/FP4_NUMERICS.md;
// dev/fp4_ref.py re-derives them independently in numpy and produces the golden vectors.
//
// Conventions used throughout:
// - A "code" is a 4-bit sign-magnitude value: bit 3 = sign, bits 2..0 = index into the grid's levels
//   (the 8-bit e4m3 grid: an E4M3 byte, sign in bit 7).
// - Two codes per byte: element 2i in the low nibble, element 2i+1 in the high nibble.
// - The quantizer never produces NaN codes: a NaN element rounds to +max (its sign is dropped
//   because the sign of a NaN differs between x86 and CUDA arithmetic). Infinities saturate to +-max.
// - No a*b+c expressions in the exact paths: nvcc would contract them into FMA on the device and the
//   host would not, and the two would differ in the last bit.
#pragma once
#include <errno.h>
#include <float.h>
#include <math.h>
#include "llmc/base/common.h"
#include "llmc/base/rng.h"

// ---------------------------------------------------------------------------------------------------
// The element grids. One row per grid: the table is the only place a level appears.

typedef enum { QGRID_BF16 = 0, QGRID_E2M1, QGRID_INT4, QGRID_E1M2, QGRID_E4M3, QGRID_COUNT } QuantGrid;

typedef struct {
    float levels[8];   // magnitude of codes 0..7, increasing
    float mids[7];     // (levels[i] + levels[i+1]) / 2, the RNE decision points
    float maxval;      // levels[7]: where rounding saturates
    int emax;          // floor(log2(maxval)): the E8M0 floor rule subtracts this
    uint32_t max_mant; // FP32 mantissa bits of maxval: the E8M0 ceil rule compares against this
    int e4m3;          // 1: the 8-bit E4M3 grid (FP8, for Q/K projections): codes are E4M3 bytes, not
                       // 4-bit indices into levels; rounding is e4m3_rne_satfinite; fake outputs only
} GridTraits;

typedef struct {
    const char* name;
    GridTraits t;
} GridRow;

// bf16 has no 4-bit grid: its row exists so that a spec can name it and the table has one row per
// enum value; quantizers refuse it (the caller uses the tensor as is). fp8 (E4M3) is the one 8-bit grid
// (MXFP8 elements, max 448 = 1.75 * 2^8): too many levels for the table, so it is marked and rounded
// by e4m3_rne_satfinite; its codes are E4M3 bytes (sign in bit 7), never packed into nibbles. Kernels get a copy of a row
// (inside QuantParams) as a kernel argument, so host and device read the same numbers.
static const GridRow quant_grid_table[QGRID_COUNT] = {
    {"bf16", {{0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0}, 0.0f, 0, 0, 0}},
    {"e2m1", {{0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f},
              {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f}, 6.0f, 2, 0x400000u, 0}},
    {"int4", {{0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f},
              {0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f, 6.5f}, 7.0f, 2, 0x600000u, 0}},
    {"e1m2", {{0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 2.5f, 3.0f, 3.5f},
              {0.25f, 0.75f, 1.25f, 1.75f, 2.25f, 2.75f, 3.25f}, 3.5f, 1, 0x600000u, 0}},
    {"fp8", {{0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0}, 448.0f, 8, 0x600000u, 1}},
};

static inline const GridTraits* grid_traits(QuantGrid g) {
    fail_if((int)g < 0 || g >= QGRID_COUNT, "grid_traits: unknown grid id %d", (int)g);
    return &quant_grid_table[g].t;
}

// ---------------------------------------------------------------------------------------------------
// Bits <-> float without aliasing trouble, on host and device.

HD uint32_t f32_bits(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
HD float f32_from_bits(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }
// 2^e as an exact float for e in [-149, 127] (subnormal below -126).
HD float exp2_exact(int e) {
    if (e >= -126) return f32_from_bits((uint32_t)(e + 127) << 23);
    return f32_from_bits(1u << (e + 149));
}
// BF16 bits -> float (exact).
HD float bf16_bits_to_float(uint16_t b) { return f32_from_bits((uint32_t)b << 16); }

// ---------------------------------------------------------------------------------------------------
// E4M3 (OCP "FN" variant: bias 7, no inf, max 448 = 1.75 * 2^8, subnormals k * 2^-9).

// Round a float to the nearest E4M3 value, ties to even, saturating at +-448 (NaN -> 448: callers
// pass fminf(..., FLT_MAX) results, which are never NaN, so this is only a safe default).
HD float e4m3_rne_satfinite(float y) {
    uint32_t u = f32_bits(y);
    uint32_t sign = u & 0x80000000u;
    float a = f32_from_bits(u & 0x7FFFFFFFu);
    float r;
    if (!(a < 448.0f)) {
        r = 448.0f;
    } else if (a < 0.015625f) {                       // below 2^-6: fixed quantum 2^-9
        r = rintf(a * 512.0f) * (1.0f / 512.0f);      // both scalings are exact powers of two
    } else {                                          // normal: keep 3 mantissa bits, RNE on the rest
        uint32_t v = u & 0x7FFFFFFFu;
        v += 0x7FFFFu + ((v >> 20) & 1u);
        v &= ~0xFFFFFu;
        r = f32_from_bits(v);                         // a < 448 rounds to at most 448
    }
    return f32_from_bits(f32_bits(r) | sign);
}

// Bit pattern of a value that is exactly representable in E4M3 (as returned above).
HD uint8_t e4m3_bits(float v) {
    uint32_t u = f32_bits(v);
    uint8_t s = (uint8_t)((u >> 24) & 0x80u);
    float a = f32_from_bits(u & 0x7FFFFFFFu);
    if (a < 0.015625f) return (uint8_t)(s | (uint8_t)(a * 512.0f));   // subnormal: k * 2^-9
    uint32_t au = f32_bits(a);
    int e = (int)(au >> 23) - 127 + 7;
    return (uint8_t)(s | (e << 3) | ((au >> 20) & 7u));
}

HD float e4m3_value(uint8_t b) {
    int e = (b >> 3) & 15, m = b & 7;
    float a;
    if (e == 15 && m == 7) a = NAN;
    else if (e == 0) a = (float)m * (1.0f / 512.0f);
    else a = f32_from_bits((uint32_t)(e - 7 + 127) << 23 | (uint32_t)m << 20);
    return (b & 0x80) ? -a : a;
}

// ---------------------------------------------------------------------------------------------------
// E8M0 (power-of-two scale 2^e, e in [-127, 127], biased code e + 127, 0xFF = NaN).

// The block exponent for a finite block amax >= 0. floor rule (OCP): e = floor(log2(bamax)) - emax,
// values above maxval * 2^e saturate. ceil rule (truncation-free): the smallest e with
// maxval * 2^e >= bamax, so nothing clips. Integer arithmetic on the FP32 exponent and mantissa: exact,
// no log2f. A zero block gets the smallest scale (its codes are all 0). Clamped to [-127, 127].
HD int e8m0_exponent(float bamax, const GridTraits* g, int ceil_rule) {
    uint32_t u = f32_bits(bamax) & 0x7FFFFFFFu;
    if (u == 0) return -127;
    int E = (int)(u >> 23) - 127;
    uint32_t mant = u & 0x7FFFFFu;
    if ((u >> 23) == 0) {                     // FP32 subnormal: normalize
        int lz = 0;
        while (!(mant & 0x400000u)) { mant <<= 1; lz++; }
        E = -127 - lz;
        mant = (mant << 1) & 0x7FFFFFu;
    }
    int e = E - g->emax;
    if (ceil_rule && mant > g->max_mant) e += 1;
    if (e < -127) e = -127;
    if (e > 127) e = 127;
    return e;
}
HD float e8m0_value(uint8_t b) { return b == 0xFF ? NAN : exp2_exact((int)b - 127); }

// ---------------------------------------------------------------------------------------------------
// Rounding onto a 4-bit grid, to nearest with ties to the even code (for E2M1 that is IEEE
// ties-to-even: 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4), saturating at +-max.

HD uint8_t grid_round_rne(const GridTraits* g, float v) {
    uint32_t u = f32_bits(v);
    float a = f32_from_bits(u & 0x7FFFFFFFu);
    if (g->e4m3) {                           // E4M3 byte; NaN -> +448 (0x7E), inf -> +-448
        if (a != a) return 0x7E;
        return (uint8_t)(e4m3_bits(e4m3_rne_satfinite(a)) | ((u >> 24) & 0x80u));
    }
    if (a != a) return 7;                    // NaN -> +max (see conventions above)
    uint8_t code = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int i = 0; i < 7; i++)              // count the decision points below a; at a tie between
        code += (a > g->mids[i]) || (a == g->mids[i] && (i & 1));  // codes i, i+1 take the even one
    return (uint8_t)(code | ((u >> 28) & 8u));
}

// A code of magnitude zero (what the diagnostics count as flushed).
HD int grid_code_is_zero(const GridTraits* g, uint8_t code) { return (code & (g->e4m3 ? 0x7F : 7)) == 0; }

HD float grid_code_value(const GridTraits* g, uint8_t code) {
    if (g->e4m3) return e4m3_value(code);
    float a = g->levels[code & 7];
    return (code & 8) ? -a : a;
}

// ---------------------------------------------------------------------------------------------------
// Recipes as data: one QuantSpec per GEMM operand slot.

// QSCALE_E4M3_4O6: Four Over Six (docs/NUMERICS_NEXT.md section 1): E4M3 block scales under an FP32 tensor
// scale bounded at 256, each block mapping its max to 6 or to 4, whichever quantizes it with the smaller
// squared error. E2M1 only. GPU: llmc/fp4/quant/group.cuh.
typedef enum { QSCALE_E4M3 = 0, QSCALE_E8M0_FLOOR, QSCALE_E8M0_CEIL, QSCALE_E4M3_4O6, QSCALE_COUNT } QuantScaleRule;
// QROUND_EDEN: MS-EDEN (Quartet II, docs/NUMERICS_NEXT.md section 2): 128-point Hadamard with signs re-drawn
// every call (QSIGNS_STEP), RTN codes, one correction factor per 128 elements folded into the E4M3 block
// scales by stochastic rounding. e2m1, 1x16, e4m3, h128, step only. GPU: llmc/fp4/quant/group.cuh.
typedef enum { QROUND_RNE = 0, QROUND_SR, QROUND_EDEN, QROUND_COUNT } QuantRounding;
// QSIGNS_STEP: the Hadamard signs are drawn for every call from a key the caller supplies
// (quant_params_set_step_signs); the spec alone does not fix them. Only with eden.
typedef enum { QSIGNS_NONE = 0, QSIGNS_FIXED, QSIGNS_SEEDED, QSIGNS_STEP, QSIGNS_COUNT } QuantSigns;
// Where the operand comes from (docs/NUMERICS_NEXT.md 2.4): the BF16 tensor (default), or the forward pass's
// dequantized FP4 copy of the same tensor. The quantizer ignores it (the caller hands it the source tensor);
// only the parser, the canonical format and the validity check know it.
typedef enum { QSRC_BF16 = 0, QSRC_FPROP, QSRC_COUNT } QuantSource;

// Block shape "W x L": L elements along the operand's reduction dimension, W along the other one.
// 1x16 and 1x32 are 1D blocks; 16x16 and 32x32 are 2D tiles (one scale for the whole tile, so the
// row-wise and column-wise copies of the same tensor are exact transposes of each other).
typedef struct {
    QuantGrid grid;           // QGRID_BF16 = leave the operand in BF16
    int block_w, block_l;     // 1x16, 1x32, 16x16, 32x32
    QuantScaleRule scale;     // e4m3 block scale + fp32 tensor scale, or e8m0 (floor / ceil rule)
    QuantRounding rounding;   // rne, or sr (keyed on seed, step, tensor id, element position)
    int hadamard;             // 0 (none) or a power of two 2..128, applied along the reduction dim
    QuantSigns signs;         // Hadamard sign vector: none (plain), fixed (0xD7E8 pattern), seeded, step (per call)
    QuantSource source;       // the operand's source: bf16 (default) or the forward's dequantized copy (fprop)
    uint64_t sign_seed;       // for QSIGNS_SEEDED
} QuantSpec;                  // no padding bytes (8 x 4 + 8): specs compare with memcmp

static const char* const quant_scale_names[QSCALE_COUNT] = {"e4m3", "e8m0", "e8m0ceil", "4o6"};
static const char* const quant_round_names[QROUND_COUNT] = {"rne", "sr", "eden"};
static const char* const quant_sign_names[QSIGNS_COUNT] = {"plain", "fixed", "seeded", "step"};
static const char* const quant_source_names[QSRC_COUNT] = {"bf16", "fprop"};

// Named presets (docs/FP4_NUMERICS.md, docs/RECIPES.md); options after the preset override its fields.
typedef struct { const char* name; QuantSpec spec; } QuantPreset;
static const QuantPreset quant_presets[] = {
    {"bf16",       {QGRID_BF16, 1, 16, QSCALE_E4M3, QROUND_RNE, 0, QSIGNS_NONE, QSRC_BF16, 0}},
    {"nvfp4",      {QGRID_E2M1, 1, 16, QSCALE_E4M3, QROUND_RNE, 0, QSIGNS_NONE, QSRC_BF16, 0}},
    {"nvfp4-2d",   {QGRID_E2M1, 16, 16, QSCALE_E4M3, QROUND_RNE, 0, QSIGNS_NONE, QSRC_BF16, 0}},
    {"mxfp4",      {QGRID_E2M1, 1, 32, QSCALE_E8M0_FLOOR, QROUND_RNE, 0, QSIGNS_NONE, QSRC_BF16, 0}},
    {"mxfp4-ceil", {QGRID_E2M1, 1, 32, QSCALE_E8M0_CEIL, QROUND_RNE, 0, QSIGNS_NONE, QSRC_BF16, 0}},
    {"mxfp4-2d",   {QGRID_E2M1, 32, 32, QSCALE_E8M0_CEIL, QROUND_RNE, 0, QSIGNS_NONE, QSRC_BF16, 0}},
    {"int4",       {QGRID_INT4, 1, 16, QSCALE_E4M3, QROUND_RNE, 0, QSIGNS_NONE, QSRC_BF16, 0}},
    {"e1m2",       {QGRID_E1M2, 1, 16, QSCALE_E4M3, QROUND_RNE, 0, QSIGNS_NONE, QSRC_BF16, 0}},
    {"mxfp8",      {QGRID_E4M3, 1, 32, QSCALE_E8M0_FLOOR, QROUND_RNE, 0, QSIGNS_NONE, QSRC_BF16, 0}},
};
#define QUANT_NUM_PRESETS ((int)(sizeof(quant_presets) / sizeof(quant_presets[0])))

// What makes a spec's eden / step / src options inconsistent: NULL when they are fine, else the reason.
// Shared by quant_spec_parse and quant_spec_is_valid so both refuse the same specs with the same words.
static inline const char* quant_spec_eden_problem(const QuantSpec* s) {
    if ((int)s->source < 0 || s->source >= QSRC_COUNT) return "unknown operand source (use src=bf16 or src=fprop)";
    if (s->signs == QSIGNS_STEP && s->rounding != QROUND_EDEN)
        return "'step' Hadamard signs (re-drawn every call from the caller's key) are only valid with eden "
               "(MS-EDEN); use fixed or seed=N signs otherwise";
    if (s->rounding != QROUND_EDEN) return NULL;
    if (s->grid != QGRID_E2M1) return "eden (MS-EDEN) needs the e2m1 grid";
    if (s->block_w != 1 || s->block_l != 16) return "eden (MS-EDEN) needs 1x16 blocks";
    if (s->scale != QSCALE_E4M3) return "eden (MS-EDEN) needs e4m3 block scales (not 4o6, not e8m0)";
    if (s->hadamard != 128) return "eden (MS-EDEN) needs the 128-point Hadamard (h128)";
    if (s->signs != QSIGNS_STEP) return "eden (MS-EDEN) needs 'step' Hadamard signs (re-drawn every call)";
    return NULL;
}

// Parse "PRESET[,OPTION...]" or "OPTION[,OPTION...]" (starting from nvfp4), OPTION one of
//   grid:   e2m1 | int4 | e1m2 | fp8 (8-bit E4M3 elements, rne only) | bf16
//   block:  1x16 | 1x32 | 16x16 | 32x32
//   scale:  e4m3 | e8m0 (= e8m0floor, the OCP rule) | e8m0ceil | 4o6 (Four Over Six: e4m3, max to 6 or 4)
//   round:  rne | sr | eden (MS-EDEN; when no hadamard was given before it, also h128 with step signs, so
//           "nvfp4,eden" is "e2m1,1x16,e4m3,eden,h128,step"; needs exactly e2m1, 1x16, e4m3, h128, step)
//   hadamard: h0 | h2 .. h128 (power of two; turns on fixed signs unless signs were given);
//   signs:  plain (none) | fixed | seed=N | step (drawn per call from the caller's key; eden only)
//   source: src=bf16 (default) | src=fprop (the forward's dequantized FP4 copy of the tensor)
// e.g. "nvfp4,sr", "nvfp4,h16", "nvfp4,h16,plain", "mxfp4,e8m0ceil,32x32,sr", "int4,h32,seed=7",
// "nvfp4,eden,src=fprop".
// The numbers in a spec (block sides, Hadamard points, seeds) are decimal digits and nothing else: no sign, no
// space, no overflow (sscanf's %d would take "+16" and wrap "h4294967312" to h16; strtoull takes "-1" as 2^64 - 1).
// A side or a point count: 1 to 3 digits, -1 otherwise; *end is where the digits stop.
static inline int quant_spec_count_(const char* s, const char** end) {
    int v = 0, n = 0;
    for (; *s >= '0' && *s <= '9' && n < 4; s++, n++) v = 10 * v + (*s - '0');
    *end = s;
    return n >= 1 && n <= 3 ? v : -1;
}

// Returns 0 on success; on failure writes a message to err (if given) and returns -1.
static inline int quant_spec_parse(const char* text, QuantSpec* out, char* err, size_t errlen) {
    QuantSpec s = quant_presets[1].spec;  // nvfp4
    char buf[256];
    if (strlen(text) >= sizeof(buf)) { if (err) snprintf(err, errlen, "spec too long"); return -1; }
    strcpy(buf, text);
    int first = 1, hadamard_given = 0;
    char* save = NULL;
    for (char* tok = strtok_r(buf, ",: ", &save); tok; tok = strtok_r(NULL, ",: ", &save), first = 0) {
        int found = 0;
        for (int i = 0; i < QUANT_NUM_PRESETS && first; i++)
            if (!strcmp(tok, quant_presets[i].name)) { s = quant_presets[i].spec; found = 1; break; }
        if (found) continue;
        for (int g = 0; g < QGRID_COUNT; g++)
            if (!strcmp(tok, quant_grid_table[g].name)) { s.grid = (QuantGrid)g; found = 1; }
        for (int i = 0; i < QSCALE_COUNT; i++)
            if (!strcmp(tok, quant_scale_names[i])) { s.scale = (QuantScaleRule)i; found = 1; }
        if (!strcmp(tok, "e8m0floor")) { s.scale = QSCALE_E8M0_FLOOR; found = 1; }
        for (int i = 0; i < QROUND_COUNT; i++)
            if (!strcmp(tok, quant_round_names[i])) { s.rounding = (QuantRounding)i; found = 1; }
        if (!strcmp(tok, "eden") && !hadamard_given) { s.hadamard = 128; s.signs = QSIGNS_STEP; }
        if (!strcmp(tok, "plain")) { s.signs = QSIGNS_NONE; found = 1; }
        if (!strcmp(tok, "fixed")) { s.signs = QSIGNS_FIXED; found = 1; }
        if (!strcmp(tok, "step")) { s.signs = QSIGNS_STEP; found = 1; }
        if (!strncmp(tok, "seed=", 5)) {
            // decimal, or hexadecimal after 0x; strtoull's base 0 would read a leading 0 as octal ("seed=010": 8)
            const char* digits = tok + 5;
            const int hex = digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X');
            char* end;
            errno = 0;
            unsigned long long v = strtoull(digits + 2 * hex, &end, hex ? 16 : 10);
            const char first = digits[2 * hex];
            if (!((first >= '0' && first <= '9') || (hex && ((first >= 'a' && first <= 'f') || (first >= 'A' && first <= 'F'))))
                || *end || errno) {
                if (err) snprintf(err, errlen, "bad seed in '%s': give a number from 0 to 2^64 - 1 (decimal, or 0x hex)", tok);
                return -1;
            }
            s.signs = QSIGNS_SEEDED; s.sign_seed = v; found = 1;
        }
        if (!strncmp(tok, "src=", 4)) {
            int k = -1;
            for (int i = 0; i < QSRC_COUNT; i++) if (!strcmp(tok + 4, quant_source_names[i])) k = i;
            if (k < 0) { if (err) snprintf(err, errlen, "'%s': use src=bf16 or src=fprop", tok); return -1; }
            s.source = (QuantSource)k; found = 1;
        }
        const char* e = tok;
        int w = found ? -1 : quant_spec_count_(tok, &e), l = -1, h = -1;
        if (w >= 0 && *e == 'x') {
            l = quant_spec_count_(e + 1, &e);
            if (*e) l = -1;
        }
        if (l >= 0) {
            if (!((w == 1 || w == l) && (l == 16 || l == 32))) {
                if (err) snprintf(err, errlen, "block '%s': use 1x16, 1x32, 16x16 or 32x32", tok);
                return -1;
            }
            s.block_w = w; s.block_l = l; found = 1;
        }
        if (!found && tok[0] == 'h') {
            h = quant_spec_count_(tok + 1, &e);
            if (*e) h = -1;
        }
        if (h >= 0) {
            if (h != 0 && (h < 2 || h > 128 || (h & (h - 1)))) {
                if (err) snprintf(err, errlen, "hadamard '%s': use h0 or a power of two 2..128", tok);
                return -1;
            }
            s.hadamard = h; found = 1; hadamard_given = 1;
            if (h && s.signs == QSIGNS_NONE) s.signs = QSIGNS_FIXED;
        }
        if (!found) {
            if (err) snprintf(err, errlen, "unknown quantization option '%s' (presets: bf16 nvfp4 "
                              "nvfp4-2d mxfp4 mxfp4-ceil mxfp4-2d int4 e1m2 mxfp8; options: e2m1|int4|e1m2|fp8|bf16, "
                              "1x16|1x32|16x16|32x32, e4m3|e8m0|e8m0ceil|4o6, rne|sr|eden, h0..h128, "
                              "plain|fixed|seed=N|step, src=bf16|fprop)", tok);
            return -1;
        }
    }
    if (first) {   // no word at all ("", " ", ","): not a silent nvfp4
        if (err) snprintf(err, errlen, "an empty spec: name a preset (e.g. nvfp4, or bf16) and options");
        return -1;
    }
    const char* why = quant_spec_eden_problem(&s);   // before h0 drops the signs: "nvfp4,step" is refused
    if (why) { if (err) snprintf(err, errlen, "'%s': %s", text, why); return -1; }
    if (s.hadamard == 0) { s.signs = QSIGNS_NONE; s.sign_seed = 0; }
    if (s.signs != QSIGNS_SEEDED) s.sign_seed = 0;
    if (s.grid == QGRID_E4M3 && s.rounding == QROUND_SR) {
        if (err) snprintf(err, errlen, "'%s': the fp8 (E4M3) grid rounds to nearest only (no sr)", text);
        return -1;
    }
    if (s.scale == QSCALE_E4M3_4O6 && s.grid != QGRID_E2M1) {
        if (err) snprintf(err, errlen, "'%s': 4o6 (Four Over Six) chooses between mapping a block's max to 6 or to 4 "
                          "of the e2m1 grid; use it with e2m1 only", text);
        return -1;
    }
    *out = s;
    return 0;
}

// The canonical text form, which quant_spec_parse reads back to the same spec. The source is printed only
// when it is not the default (",src=fprop").
static inline void quant_spec_format(const QuantSpec* s, char* buf, size_t n) {
    char src[16] = "";
    if (s->source != QSRC_BF16 && (int)s->source > 0 && s->source < QSRC_COUNT)
        snprintf(src, sizeof(src), ",src=%s", quant_source_names[s->source]);
    if (s->grid == QGRID_BF16) { snprintf(buf, n, "bf16%s", src); return; }
    char had[48] = "h0";
    if (s->hadamard) {
        if (s->signs == QSIGNS_SEEDED)
            snprintf(had, sizeof(had), "h%d,seed=%llu", s->hadamard, (unsigned long long)s->sign_seed);
        else
            snprintf(had, sizeof(had), "h%d,%s", s->hadamard, quant_sign_names[s->signs]);
    }
    snprintf(buf, n, "%s,%dx%d,%s,%s,%s%s", quant_grid_table[s->grid].name, s->block_w, s->block_l,
             quant_scale_names[s->scale], quant_round_names[s->rounding], had, src);
}

static inline int quant_spec_is_valid(const QuantSpec* s, char* err, size_t errlen) {
    if (s->grid <= QGRID_BF16 || s->grid >= QGRID_COUNT) {
        snprintf(err, errlen, "grid '%s' is not a 4-bit grid (a bf16 slot is not quantized)",
                 s->grid == QGRID_BF16 ? "bf16" : "?");
        return 0;
    }
    if ((int)s->rounding < 0 || s->rounding >= QROUND_COUNT || (int)s->signs < 0 || s->signs >= QSIGNS_COUNT) {
        snprintf(err, errlen, "rounding %d / signs %d: unknown", (int)s->rounding, (int)s->signs);
        return 0;
    }
    if (s->grid == QGRID_E4M3 && s->rounding != QROUND_RNE) {
        snprintf(err, errlen, "the fp8 (E4M3) grid rounds to nearest only (no sr)");
        return 0;
    }
    if ((int)s->scale < 0 || s->scale >= QSCALE_COUNT || (s->scale == QSCALE_E4M3_4O6 && s->grid != QGRID_E2M1)) {
        snprintf(err, errlen, "scale rule %d: 4o6 needs the e2m1 grid", (int)s->scale);
        return 0;
    }
    if (!((s->block_l == 16 || s->block_l == 32) && (s->block_w == 1 || s->block_w == s->block_l))) {
        snprintf(err, errlen, "block %dx%d: use 1x16, 1x32, 16x16 or 32x32", s->block_w, s->block_l);
        return 0;
    }
    if (s->hadamard && (s->hadamard < 2 || s->hadamard > 128 || (s->hadamard & (s->hadamard - 1)))) {
        snprintf(err, errlen, "hadamard %d: use 0 or a power of two 2..128", s->hadamard);
        return 0;
    }
    const char* why = quant_spec_eden_problem(s);
    if (why) {
        snprintf(err, errlen, "%s", why);
        return 0;
    }
    return 1;
}

// ---------------------------------------------------------------------------------------------------
// What a kernel needs, resolved on the host from a QuantSpec: passed by value to kernels.

typedef struct {
    GridTraits grid;
    int scale;          // QuantScaleRule
    int rounding;       // QuantRounding
    int block_w, block_l;
    int hadamard;       // 0 or n
    uint32_t signs[4];  // Hadamard sign mask, bit i (of 128) set -> s_i = -1
    int step_signs;     // 1: QSIGNS_STEP, the mask is drawn per call (quant_params_set_step_signs)
    int signs_set;      // 1 when signs holds the mask the rotation uses (always, except a step spec not yet set)
} QuantParams;

#define HADAMARD_FIXED_SIGNS_16 0xD7E8u     // Transformer Engine's fixed vector for size 16
#define HADAMARD_SIGN_TENSOR_ID 0xFFFFFFF0u // rng tensor id reserved for drawing seeded signs

// The Hadamard sign mask of a spec: fixed signs tile 0xD7E8 every 16 positions (for size 16 that is
// exactly Transformer Engine's vector); seeded signs take bit 31 of
// rng_bits32(rng_key(seed, 0, HADAMARD_SIGN_TENSOR_ID), i) for position i.
// Step signs (eden) are not a function of the spec: their mask stays zero here (quant_step_sign_mask).
static inline void quant_sign_mask(const QuantSpec* s, uint32_t mask[4]) {
    for (int i = 0; i < 4; i++) mask[i] = 0;
    if (!s->hadamard || s->signs == QSIGNS_NONE || s->signs == QSIGNS_STEP) return;
    uint64_t key = rng_key(s->sign_seed, 0, HADAMARD_SIGN_TENSOR_ID);
    for (int i = 0; i < s->hadamard; i++) {
        uint32_t bit = s->signs == QSIGNS_FIXED ? (HADAMARD_FIXED_SIGNS_16 >> (i & 15)) & 1u
                                                : rng_bits32(key, (uint64_t)i) >> 31;
        mask[i >> 5] |= bit << (i & 31);
    }
}

static inline QuantParams quant_params(const QuantSpec* s) {
    char err[160];
    fail_if(!quant_spec_is_valid(s, err, sizeof(err)), "quantization spec: %s", err);
    QuantParams p;
    memset(&p, 0, sizeof(p));
    p.grid = *grid_traits(s->grid);
    p.scale = s->scale;
    p.rounding = s->rounding;
    p.block_w = s->block_w;
    p.block_l = s->block_l;
    p.hadamard = s->hadamard;
    quant_sign_mask(s, p.signs);
    p.step_signs = s->hadamard && s->signs == QSIGNS_STEP;
    p.signs_set = !p.step_signs;
    return p;
}

// Draw indices of the MS-EDEN randomness under one key (docs/NUMERICS_NEXT.md 2.1, 2.3): the element SR
// draws stay below 2^62, the Hadamard signs take 2^62 + i, the block-scale SR 2^63 + j.
#define EDEN_SIGN_DRAW_BASE (1ull << 62)
#define EDEN_SCALE_DRAW_BASE (1ull << 63)

// The step sign mask drawn from key: s_i = bit 31 of rng_bits32(key, 2^62 + i), i < 128 (bit set ->
// s_i = -1), stored as quant_sign_mask stores it (bit i & 31 of word i >> 5). The trainer's key is the
// dgrad.dy slot's SR key of the micro-step, shared by the four backward operands of that linear.
HD void quant_step_sign_mask(uint64_t key, uint32_t mask[4]) {
    for (int w = 0; w < 4; w++) mask[w] = 0;
    for (int i = 0; i < 128; i++) mask[i >> 5] |= (rng_bits32(key, EDEN_SIGN_DRAW_BASE + (uint64_t)i) >> 31) << (i & 31);
}

// Fill a step spec's signs for one call (quant_cpu refuses a step spec whose signs were never set).
static inline void quant_params_set_step_signs(QuantParams* p, uint64_t sign_key) {
    fail_if(!p->step_signs, "quant_params_set_step_signs: the spec's Hadamard signs are not 'step' (eden) signs");
    quant_step_sign_mask(sign_key, p->signs);
    p->signs_set = 1;
}

// ---------------------------------------------------------------------------------------------------
// MS-EDEN element arithmetic (docs/NUMERICS_NEXT.md section 2): HD, the CPU twin and the GPU kernel call
// these. All FP32, round to nearest even, no FMA contraction (f32_mul_rn where a product feeds a sum).

// The level a group's max maps to: the FP32 nearest 6 / ((17/16) * 0.93) = 9600/1581 (0x40C24EB2).
#define EDEN_V 6.0721064f
// The largest pre-correction block scale (Quartet II's 255.99): leaves 448/256 of headroom for the correction.
#define EDEN_SCALE_MAX 256.0f

// An FP32 quotient that the device computes correctly rounded whatever the compile flags (the host's '/' is).
HD float f32_div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}

// S_enc = fminf(256 * V / amax, FLT_MAX) (256 * V exact); amax 0, inf (quotient 0): 1; NaN: FLT_MAX.
HD float eden_tensor_scale_enc(float amax) {
    float s = fminf(f32_div_rn(EDEN_SCALE_MAX * EDEN_V, amax), FLT_MAX);
    if (amax == 0.0f || s == 0.0f) s = 1.0f;
    return s;
}

// The pre-correction E4M3 scale of a 16-group: e4m3(fminf(bamax * (S_enc * (1/V)), FLT_MAX)), 0 -> 1.
HD float eden_group_scale(float bamax, float s_enc) {
    const float mult = s_enc * (1.0f / EDEN_V);
    const float s = e4m3_rne_satfinite(fminf(bamax * mult, FLT_MAX));
    return s == 0.0f ? 1.0f : s;
}

// Stochastic rounding of t >= 0 (or NaN) to one of its two neighbouring E4M3 values: !(t < 448) -> 448;
// else lo = the largest E4M3 value <= t, hi = the next one, f = (t - lo) / (hi - lo), and hi iff
// 2 * r16 + 1 < f * 2^17 (P(hi) = f within 2^-17; an E4M3 t has f = 0 and stays). Below 2^-6 the grid is
// the subnormal one, spacing 2^-9 (from 0). Every step is exact: t - lo by Sterbenz (or by clearing bits
// below 2^-9), the spacing q and 1/q powers of two built from the exponent bits.
HD float eden_scale_sr(float t, uint32_t r16) {
    if (!(t < 448.0f)) return 448.0f;
    const uint32_t u = f32_bits(t);
    const int sub = t < 0.015625f;
    const uint32_t e = u & 0x7F800000u;                                       // t's exponent field
    const float lo = sub ? floorf(t * 512.0f) * (1.0f / 512.0f) : f32_from_bits(u & 0xFFF00000u);
    const float q = sub ? (1.0f / 512.0f) : f32_from_bits(e - (3u << 23));    // 2^(E-3): 3 mantissa bits
    const float qinv = sub ? 512.0f : f32_from_bits((257u << 23) - e);        // 2^(3-E)
    const float f = (t - lo) * qinv;
    const int up = (float)(2u * (r16 & 0xFFFFu) + 1u) < f * 131072.0f;
    return up ? lo + q : lo;
}

// The 16 random bits of block scale j (its index in the operand's row-major (M, K/16) scale matrix).
HD uint32_t eden_scale_r16(uint64_t key, uint64_t j) { return rng_bits32(key, EDEN_SCALE_DRAW_BASE + j) >> 16; }

// The FP32 sum of one 128-element rotation group's terms t[0..127], in the order 32 lanes compute it:
// p_j = ((t[4j] + t[4j+1]) + t[4j+2]) + t[4j+3], j < 32; then for d = 16, 8, 4, 2, 1 every p_j becomes
// p_j + p_(j xor d) (from the previous stage's values: a butterfly / shuffle-xor reduction); the result
// is p_0 (all p_j are then equal: FP32 addition is commutative).
HD float eden_sum128(const float* t) {
    float p[32], n[32];
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int j = 0; j < 32; j++) p[j] = ((t[4 * j] + t[4 * j + 1]) + t[4 * j + 2]) + t[4 * j + 3];
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int d = 16; d >= 1; d >>= 1) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
        for (int j = 0; j < 32; j++) n[j] = p[j] + p[j ^ d];
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
        for (int j = 0; j < 32; j++) p[j] = n[j];
    }
    return p[0];
}

// EDEN's correction of a 128-group from its sums num = sum u^2 and den = sum u * val(c):
// 1 when den == 0 (every code 0) or a sum is not finite (a NaN or inf in the group), else num / den.
HD float eden_correction(float num, float den) {
    if (den == 0.0f || !(fabsf(num) <= FLT_MAX) || !(fabsf(den) <= FLT_MAX)) return 1.0f;
    return f32_div_rn(num, den);
}

// ---------------------------------------------------------------------------------------------------
// Scales.

// E4M3 block scales with an FP32 tensor scale: e4m3 and 4o6 (the E8M0 rules have neither).
HD int quant_scale_is_e4m3(int scale) { return scale == QSCALE_E4M3 || scale == QSCALE_E4M3_4O6; }

// The largest E4M3 block scale 4o6 lets the 6-candidate reach: its 4-candidate is then at most
// 1.5 * 256 = 384 <= 448, so neither saturates (docs/NUMERICS_NEXT.md 1.1).
#define QUANT_4O6_SCALE_MAX 256.0f

// Tensor-level encode scale S_enc (the FP32 second level of NVFP4 and the uniform grids). amax is the
// max |x| over the whole tensor view, NaN if any element is NaN. E8M0 formats have none (1).
// MS-EDEN (rounding eden): eden_tensor_scale_enc, 256 * V / amax.
HD float quant_tensor_scale_enc(const QuantParams* p, float amax) {
    if (!quant_scale_is_e4m3(p->scale)) return 1.0f;
    if (p->rounding == QROUND_EDEN) return eden_tensor_scale_enc(amax);
    // maxval * 448 exact: 2688, 3136, 1568; 4o6: 6 * 256 = 1536
    const float top = p->scale == QSCALE_E4M3_4O6 ? QUANT_4O6_SCALE_MAX : 448.0f;
    float s = fminf(p->grid.maxval * top / amax, FLT_MAX);
    if (amax == 0.0f || s == 0.0f) s = 1.0f;
    return s;
}

// The tensor-level dequantization factor S_dec that goes with S_enc (what quant_cpu returns and the
// kernels store in *scale_dec): 1 / S_enc for E4M3 formats, 1 for E8M0 ones.
HD float quant_tensor_scale_dec(const QuantParams* p, float s_enc) {
    return quant_scale_is_e4m3(p->scale) ? 1.0f / s_enc : 1.0f;
}

typedef struct {
    float sdec;      // the block scale value: dequantized = code_value * sdec * tensor scale_dec
    float inv;       // what the element is multiplied by before rounding onto the grid
    uint8_t bits;    // E4M3 or E8M0 bit pattern of sdec, as stored in packed form
    uint8_t is_nan;  // E8M0 block holding a NaN or inf: the whole block dequantizes to NaN (OCP)
} QuantBlockScale;

// The E4M3 block scale that maps the block amax (NaN if the block holds a NaN) to m, under the tensor
// encode scale (docs/FP4_NUMERICS.md, NVFP4 steps 3-4, with m in place of 6):
//   mult = S_enc * (1/m); sdec = e4m3(fminf(bamax * mult, FLT_MAX)); inv = fminf(1/(sdec*S_dec), FLT_MAX)
// m is the grid's max, or for 4o6 one of its two candidates, 6 and 4.
// The same with the tensor's two constants given (mult = s_enc (1 / m), s_dec = 1 / s_enc): kernels
// compute them once instead of per block.
HD QuantBlockScale quant_block_scale_e4m3_pre(float bamax, float mult, float s_dec) {
    QuantBlockScale b;
    b.is_nan = 0;
    b.sdec = e4m3_rne_satfinite(fminf(bamax * mult, FLT_MAX));
    b.bits = e4m3_bits(b.sdec);
    b.inv = fminf(1.0f / (b.sdec * s_dec), FLT_MAX);
    return b;
}
HD QuantBlockScale quant_block_scale_e4m3_to(float bamax, float s_enc, float m) {
    return quant_block_scale_e4m3_pre(bamax, s_enc * (1.0f / m), 1.0f / s_enc);
}

// The E8M0 block scale 2^e of a finite block (e from e8m0_exponent): sdec = 2^e, inv = 2^-e (x * 2^-e is
// exactly the correctly rounded x / 2^e).
HD QuantBlockScale quant_block_scale_e8m0(int e) {
    QuantBlockScale b;
    b.sdec = exp2_exact(e);
    b.inv = exp2_exact(-e);
    b.bits = (uint8_t)(e + 127);
    b.is_nan = 0;
    return b;
}

// Block scale from the block amax and the tensor encode scale. MS-EDEN: the pre-correction scale
// eden_group_scale (the stored one is its corrected, stochastically rounded successor). E4M3: quant_block_scale_e4m3_to the grid's
// max (for 4o6 that is its 6-candidate; the choice between 6 and 4 needs the block's values, see
// quant_4o6_err_add). E8M0: sdec = 2^e, inv = 2^-e (x * 2^-e is exactly the correctly rounded x / 2^e).
HD QuantBlockScale quant_block_scale(const QuantParams* p, float bamax, float s_enc) {
    QuantBlockScale b;
    b.is_nan = 0;
    if (p->rounding == QROUND_EDEN) {          // the pre-correction scale (the correction needs the group's values)
        b.sdec = eden_group_scale(bamax, s_enc);
        b.bits = e4m3_bits(b.sdec);
        b.inv = fminf(1.0f / (b.sdec * (1.0f / s_enc)), FLT_MAX);
    } else if (quant_scale_is_e4m3(p->scale)) {
        b = quant_block_scale_e4m3_to(bamax, s_enc, p->grid.maxval);
    } else if (!(bamax <= FLT_MAX)) {
        b.sdec = NAN; b.inv = 0.0f; b.bits = 0xFF; b.is_nan = 1;
    } else {
        b = quant_block_scale_e8m0(e8m0_exponent(bamax, &p->grid, p->scale == QSCALE_E8M0_CEIL));
    }
    return b;
}

// An FP32 product that the device never contracts with a following add into an FMA (the host does not
// either), for sums that host and device must compute to the same bits.
HD float f32_mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

// Four Over Six's error criterion (docs/NUMERICS_NEXT.md 1.3): one element's term, added to *err, of a
// candidate's squared error in the tensor-scaled domain, (code_value * sdec - x * S_enc)^2, where the block
// max is at most 1536 so nothing overflows (in original units the squares overflow from |x| = 2^64).
// Callers add the terms in the block's element order (operand row by row, each along k) and pick the
// 4-candidate only when its sum is strictly smaller (ties, NaN and inf blocks: 6).
HD void quant_4o6_err_add(float* err, const GridTraits* g, uint8_t code, float sdec, float x, float s_enc) {
    const float d = f32_mul_rn(grid_code_value(g, code), sdec) - f32_mul_rn(x, s_enc);
    *err = *err + f32_mul_rn(d, d);
}

// The block scale value stored in packed form.
HD float quant_packed_scale_value(const QuantParams* p, uint8_t bits) {
    return quant_scale_is_e4m3(p->scale) ? e4m3_value(bits) : e8m0_value(bits);
}

// Blackwell cuBLASLt VEC16_UE4M3 scale layout (docs/FP4_NUMERICS.md): the byte offset of scale (r, c),
// r the non-K row, c the 16-block index along K, C the number of 16-blocks along K, for a scale
// matrix padded to (roundup(R,128), roundup(C,4)). For the native path; the packed layout of this
// project's quantizer is plain row-major (see fp4/quant_cpu.h).
HD int64_t nvfp4_swizzled_scale_offset(int64_t r, int64_t c, int64_t C) {
    return ((r / 128) * ceil_div(C, 4) + c / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + c % 4;
}
