// fp4_golden.h: reader for dev/golden/fp4_golden.bin, the vectors written by dev/fp4_ref.py.
// defines: Golden, golden_load(), golden_next(), GoldenQuant, golden_quant_parse(), golden_find_file()
// The record layouts are documented at the top of dev/fp4_ref.py.
#pragma once
#include "llmc/base/common.h"

enum { GOLD_RNG = 1, GOLD_E4M3 = 3, GOLD_GRID_RNE = 4, GOLD_GRID_SR = 5, GOLD_BF16 = 6,
       GOLD_HADAMARD = 7, GOLD_QUANT = 8, GOLD_EDEN = 9 };

typedef struct {
    uint8_t* buf;
    size_t size, pos;
} Golden;

typedef struct {
    uint32_t type, len;
    const uint8_t* p;
} GoldenRecord;

// The tests run from the repo root (make, scripts/run_tests.sh) or from build/.
static inline const char* golden_find_file(void) {
    static const char* paths[] = {"dev/golden/fp4_golden.bin", "../dev/golden/fp4_golden.bin"};
    for (int i = 0; i < 2; i++) {
        FILE* f = fopen(paths[i], "rb");
        if (f) { fclose(f); return paths[i]; }
    }
    fail("dev/golden/fp4_golden.bin not found: run the test from the repo root "
         "(regenerate with python3 dev/fp4_ref.py)");
    return NULL;
}

static inline Golden golden_load(const char* path) {
    Golden g;
    FILE* f = fopen_check(path, "rb");
    fseek(f, 0, SEEK_END);
    g.size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    g.buf = (uint8_t*)xmalloc(g.size);
    fread_check(g.buf, 1, g.size, f, path);
    fclose(f);
    fail_if(g.size < 8 || memcmp(g.buf, "FP4GOLD1", 8), "%s: not a golden file (bad magic)", path);
    g.pos = 8;
    return g;
}

static inline int golden_next(Golden* g, GoldenRecord* r) {
    if (g->pos + 8 > g->size) return 0;
    memcpy(&r->type, g->buf + g->pos, 4);
    memcpy(&r->len, g->buf + g->pos + 4, 4);
    fail_if(g->pos + 8 + r->len > g->size, "golden file truncated");
    r->p = g->buf + g->pos + 8;
    g->pos += 8 + r->len;
    return 1;
}

// A QUANT record, with pointers into the record (unaligned data copied out by the user as needed).
// Records of specs with "step" Hadamard signs (MS-EDEN) carry the sign key after the key (flags bit 0);
// A reader passes it to quant_params_set_step_signs before quantizing.
#define GOLDEN_QUANT_SIGN_KEY 1u
// MS-EDEN records also end with their corrections C (one f32 per 128-group): the scale SR would hide a
// last-bit difference in C, so the outputs alone do not pin its arithmetic down.
#define GOLDEN_QUANT_CORR 2u
typedef struct {
    char name[49], spec[81];
    uint32_t rows, cols, axis;
    uint32_t flags;      // bit 0 (GOLDEN_QUANT_SIGN_KEY): sign_key is in the record; bit 1 (GOLDEN_QUANT_CORR): corr
    uint64_t key;
    uint64_t sign_key;   // the key of "step" Hadamard signs (eden records: quant_params_set_step_signs); else 0
    const uint8_t *in, *fake, *codes, *scales, *deq;   // in/fake/deq: BF16 bits, little endian
    float amax, scale_dec;
    size_t ncodes, nscales;
    const uint8_t* corr;   // MS-EDEN corrections C (f32, one per 128-group, operand row-major), or NULL
    size_t ncorr;
} GoldenQuant;

static inline GoldenQuant golden_quant_parse(const GoldenRecord* r, int block_l) {
    GoldenQuant q;
    const uint8_t* p = r->p;
    memcpy(q.name, p, 48); q.name[48] = 0; p += 48;
    memcpy(q.spec, p, 80); q.spec[80] = 0; p += 80;
    memcpy(&q.rows, p, 4); memcpy(&q.cols, p + 4, 4); memcpy(&q.axis, p + 8, 4); memcpy(&q.flags, p + 12, 4);
    p += 16;
    memcpy(&q.key, p, 8); p += 8;
    q.sign_key = 0;
    if (q.flags & GOLDEN_QUANT_SIGN_KEY) { memcpy(&q.sign_key, p, 8); p += 8; }
    size_t n = (size_t)q.rows * q.cols;
    q.in = p; p += 2 * n;
    memcpy(&q.amax, p, 4); memcpy(&q.scale_dec, p + 4, 4); p += 8;
    q.fake = p; p += 2 * n;
    q.ncodes = n / 2; q.codes = p; p += q.ncodes;
    q.nscales = n / block_l; q.scales = p; p += q.nscales;
    q.deq = p; p += 2 * n;
    q.corr = NULL; q.ncorr = 0;
    if (q.flags & GOLDEN_QUANT_CORR) { q.ncorr = n / 128; q.corr = p; p += 4 * q.ncorr; }
    fail_if((size_t)(p - r->p) != r->len, "golden quant record '%s': size mismatch", q.name);
    return q;
}

// Copy n little-endian u16 from an unaligned pointer.
static inline void golden_u16(uint16_t* dst, const uint8_t* src, size_t n) { memcpy(dst, src, 2 * n); }
