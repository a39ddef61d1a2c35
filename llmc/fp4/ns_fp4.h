// ns_fp4.h: --ns-fp4 SPEC and --ns-fp4-gemms LIST, Muon's Newton-Schulz with the operands of some of its three GEMMs
// quantized (docs/FULLSTACK_FP4.md section 3). It is emulated: each operand becomes the quantizer's BF16 fake copy
// (code x block scale, exact in BF16, fp4/quant_cpu.h), the GEMM multiplies the copies with FP32 sums, and the alpha
// it is scaled by is the two tensor scales (times c for (c A) A). Results are rounded to BF16 where the BF16 path
// rounds them. This file holds the settings, their checks, and the CPU twin of llmc/muon.cuh's FP4 path.
// defines: NS_GEMM_*, NS_GEMM_NAMES, NS_FP4_GEMMS_DEFAULT, NsFp4, ns_fp4_spec_problem(), ns_fp4_gemms_parse(),
//          ns_fp4_gemms_format(), ns_fp4_set(), ns_fp4_describe(), ns_fp4_shape_problem(), muon_ns_alpha(),
//          muon_ns_quant(), muon_newton_schulz_fp4_chunked(), muon_newton_schulz_fp4_ref(), muon_update_fp4_ref()
// Each step, on X (n x k, n <= k); Qr copies are blocked along a row, Qc along a column; d is a copy's dequantization
// scale. A GEMM not in the set is the BF16 path's (llmc/base/muon_ref.h), bit for bit:
//   xx  A  = bf16(dx^2 Qr(X) Qr(X)^T)        both sides from one copy of X, so A is symmetric
//          (BF16: bf16(X X^T))
//   aa  AA = bf16(c da^2 Qr(A) Qr(A)^T)      (c A) A: A is symmetric, so its row-blocked copy transposed is the
//                                            column-blocked copy the right side needs (BF16: bf16(bf16(c A) A))
//       B  = bf16(bf16(b A) + AA)
//   bx  BX = bf16(db dxc Qr(B) Qc(X))        reduced over n: B by rows, X by columns (X's second copy)
//          (BF16: bf16(B X))
//       X  = bf16(bf16(a X) + BX)
// Each alpha is computed in FP32 as (c0 d1) d2, with c0 = 1 or c. RNE only: NS is a deterministic fixed-point iteration,
// and SR would only add noise. No Hadamard and no MS-EDEN: a rotation would have to match on both sides of each GEMM.
// Which GEMMs by default: xx alone. Of the seven sets it is the closest to the BF16 result on every input measured, and
// the only one that keeps dense Gaussian inputs (64 x 256, 384 x 1536) near the singular-value band; quantizing aa or
// bx makes those diverge (A's off-diagonal entries are small next to its diagonal, so a 1x16 block flushes them, and
// the quintic's coefficients cancel hard near sigma = 1, so errors push singular values past ~1.5 where phi grows like
// sigma^5). On gradient-like (low-rank plus noise) inputs every set stays near the band. The table:
// docs/FULLSTACK_FP4.md section 3 (dev/ns_fp4_table.c).
#pragma once
#include "llmc/base/muon_ref.h"
#include "llmc/fp4/quant_cpu.h"

// The GEMMs of a step, as bits of NsFp4.gemms, and their names in --ns-fp4-gemms (in this order).
enum { NS_GEMM_XX = 1, NS_GEMM_AA = 2, NS_GEMM_BX = 4, NS_GEMM_ALL = 7 };
static const char* const NS_GEMM_NAMES[3] = {"xx", "aa", "bx"};
#define NS_FP4_GEMMS_DEFAULT NS_GEMM_XX

typedef struct {
    int on;           // 0 (--ns-fp4 off): BF16 Newton-Schulz
    QuantSpec spec;
    QuantParams q;    // quant_params(&spec)
    int gemms;        // NS_GEMM_* bits: the GEMMs whose operands are quantized
} NsFp4;

// NULL when NS can run with spec s, else why not.
static inline const char* ns_fp4_spec_problem(const QuantSpec* s) {
    if (s->grid == QGRID_BF16) return "a BF16 spec quantizes nothing (use --ns-fp4 off)";
    if (s->rounding != QROUND_RNE) return "Newton-Schulz's operands round to nearest (rne) only";
    if (s->hadamard) return "no Hadamard transform (it would have to match on both sides of each GEMM)";
    if (s->source != QSRC_BF16) return "src=fprop applies to the linears' dgrad.w and wgrad.x only";
    if (s->block_w != 1 && s->block_w != s->block_l) return "blocks 1xL or square tiles only";
    return NULL;
}

// "xx,bx" (any order, each name once; "all" for the three) into NS_GEMM_* bits. Returns 0, or -1 with a message.
static inline int ns_fp4_gemms_parse(const char* text, int* gemms, char* err, size_t len) {
    if (!strcmp(text, "all")) { *gemms = NS_GEMM_ALL; return 0; }
    char buf[64];
    if (strlen(text) >= sizeof(buf)) { snprintf(err, len, "'%s' is too long (use xx, aa, bx, comma separated)", text); return -1; }
    strcpy(buf, text);
    int bits = 0;
    char* save = NULL;
    for (char* tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int bit = 0;
        for (int g = 0; g < 3; g++) if (!strcmp(tok, NS_GEMM_NAMES[g])) bit = 1 << g;
        if (!bit) { snprintf(err, len, "unknown GEMM '%s' (use xx, aa, bx, comma separated, or all)", tok); return -1; }
        if (bits & bit) { snprintf(err, len, "'%s' names %s twice", text, tok); return -1; }
        bits |= bit;
    }
    if (!bits) { snprintf(err, len, "an empty list (use xx, aa, bx, comma separated, or all; --ns-fp4 off for none)"); return -1; }
    *gemms = bits;
    return 0;
}

// The canonical list, "xx,bx" (names in NS_GEMM_NAMES' order).
static inline void ns_fp4_gemms_format(int gemms, char* buf, size_t len) {
    size_t o = 0;
    buf[0] = '\0';
    for (int g = 0; g < 3; g++)
        if (gemms & (1 << g)) o += snprintf(buf + o, o < len ? len - o : 0, "%s%s", o ? "," : "", NS_GEMM_NAMES[g]);
}

// spec_text: "off" or a spec (fp4/formats.h syntax); gemms_text: a list for ns_fp4_gemms_parse, or "" for the default.
// Returns 0, or -1 with a message that names the option and says what to use.
static inline int ns_fp4_set(NsFp4* f, const char* spec_text, const char* gemms_text, char* err, size_t len) {
    memset(f, 0, sizeof(*f));
    if (!strcmp(spec_text, "off")) {
        if (gemms_text[0]) { snprintf(err, len, "--ns-fp4-gemms %s needs --ns-fp4 SPEC (it is off)", gemms_text); return -1; }
        return 0;
    }
    char why[256];
    if (quant_spec_parse(spec_text, &f->spec, why, sizeof(why)) != 0) {
        snprintf(err, len, "--ns-fp4 '%s': %s", spec_text, why);
        return -1;
    }
    const char* problem = ns_fp4_spec_problem(&f->spec);
    if (problem) { snprintf(err, len, "--ns-fp4 '%s': %s (e.g. --ns-fp4 nvfp4)", spec_text, problem); return -1; }
    f->gemms = NS_FP4_GEMMS_DEFAULT;
    if (gemms_text[0] && ns_fp4_gemms_parse(gemms_text, &f->gemms, why, sizeof(why)) != 0) {
        snprintf(err, len, "--ns-fp4-gemms: %s", why);
        return -1;
    }
    f->q = quant_params(&f->spec);
    f->on = 1;
    return 0;
}

// "off", or "e2m1,1x16,e4m3,rne,h0 on xx,bx".
static inline void ns_fp4_describe(const NsFp4* f, char* buf, size_t len) {
    if (!f->on) { snprintf(buf, len, "off"); return; }
    char spec[128], gemms[16];
    quant_spec_format(&f->spec, spec, sizeof(spec));
    ns_fp4_gemms_format(f->gemms, gemms, sizeof(gemms));
    snprintf(buf, len, "%s on %s", spec, gemms);
}

// NULL when a matrix whose sides are n and k (n <= k) suits the spec's blocks, else why not. Every copy is blocked
// along n or k (X both ways, A and B along n), so both must be multiples of the block's sides.
static inline const char* ns_fp4_shape_problem(const NsFp4* f, int n, int k) {
    if (!f->on) return NULL;
    const int side = f->spec.block_l > f->spec.block_w ? f->spec.block_l : f->spec.block_w;
    if (n % side || k % side) return "its sides must be multiples of the spec's block length";
    return NULL;
}

// The GEMM's alpha, (c0 d1) d2, in FP32 rounded once per product (the GPU computes it with __fmul_rn).
static inline float muon_ns_alpha(float c0, float d1, float d2) {
    const float t = c0 * d1;
    return t * d2;
}

// out (M x N) = bf16(alpha * a (M x K) b (N x K)^T), FP32 sums in index order; chunk > 0: in chunks of that many
// terms, the chunks' sums added in order (another summation order, for measuring what one does: the GPU's GEMMs sum
// in cuBLASLt's order).
static inline void muon_ns_gemm_abt(float* out, const float* a, const float* b, int M, int N, int K, float alpha,
                                    int chunk) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            const float* ai = a + (size_t)i * K;
            const float* bj = b + (size_t)j * K;
            float s = 0.0f;
            if (chunk <= 0) {
                for (int t = 0; t < K; t++) s += ai[t] * bj[t];
            } else {
                for (int t0 = 0; t0 < K; t0 += chunk) {
                    float c = 0.0f;
                    for (int t = t0; t < t0 + chunk && t < K; t++) c += ai[t] * bj[t];
                    s += c;
                }
            }
            out[(size_t)i * N + j] = muon_bf16(alpha * s);
        }
}

// The fake copy of x (rows x cols floats, BF16 values) along axis, as BF16 bits (fake) and as floats (copy); returns
// its dequantization scale. bits: scratch of rows x cols.
static inline float muon_ns_quant(const QuantParams* q, const float* x, int rows, int cols, int axis, uint16_t* bits,
                                  uint16_t* fake, float* copy) {
    const size_t n = (size_t)rows * cols;
    for (size_t i = 0; i < n; i++) bits[i] = bf16_bits_rne(x[i]);
    const QuantView v = {bits, rows, cols, cols};
    const float dec = quant_cpu(q, v, axis, /*key=*/0, fake, cols, NULL, NULL, NULL);
    for (size_t i = 0; i < n; i++) copy[i] = bf16_bits_to_float(fake[i]);
    return dec;
}

// dst (cols x rows) = src (rows x cols) transposed.
static inline void muon_ns_transpose(float* dst, const float* src, int rows, int cols) {
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) dst[(size_t)c * rows + r] = src[(size_t)r * cols + c];
}

// muon_newton_schulz_fp4_ref with every GEMM's sums in chunks of `chunk` terms (0: index order, the twin's).
static inline void muon_newton_schulz_fp4_chunked(float* x, int n, int k, int steps, const QuantParams* q, int gemms,
                                                  int chunk) {
    const size_t nk = (size_t)n * k, nn = (size_t)n * n;
    float* a = (float*)xmalloc(nn * sizeof(float));
    float* aa = (float*)xmalloc(nn * sizeof(float));
    float* b = (float*)xmalloc(nn * sizeof(float));
    float* bx = (float*)xmalloc(nk * sizeof(float));
    float* op1 = (float*)xmalloc(nk * sizeof(float));   // a GEMM's operands as floats (a fake copy, or transposed)
    float* op2 = (float*)xmalloc(nk * sizeof(float));
    uint16_t* bits = (uint16_t*)xmalloc(nk * sizeof(uint16_t));
    uint16_t* fake = (uint16_t*)xmalloc(nk * sizeof(uint16_t));
    muon_normalize(x, nk);
    for (int s = 0; s < steps; s++) {
        if (gemms & NS_GEMM_XX) {   // A = X X^T
            const float dx = muon_ns_quant(q, x, n, k, 1, bits, fake, op1);
            muon_ns_gemm_abt(a, op1, op1, n, n, k, muon_ns_alpha(1.0f, dx, dx), chunk);
        } else {
            muon_ns_gemm_abt(a, x, x, n, n, k, 1.0f, chunk);
        }
        if (gemms & NS_GEMM_AA) {   // (c A) A, with A symmetric: (c A) A^T
            const float da = muon_ns_quant(q, a, n, n, 1, bits, fake, op1);
            muon_ns_gemm_abt(aa, op1, op1, n, n, n, muon_ns_alpha(MUON_NS_C, da, da), chunk);
        } else {
            for (size_t i = 0; i < nn; i++) b[i] = muon_bf16(MUON_NS_C * a[i]);
            muon_ns_gemm_abt(aa, b, a, n, n, n, 1.0f, chunk);
        }
        for (size_t i = 0; i < nn; i++) b[i] = muon_bf16(muon_bf16(MUON_NS_B * a[i]) + aa[i]);
        if (gemms & NS_GEMM_BX) {   // B X = Qr(B) (Qc(X)^T)^T: X's column-blocked copy, transposed to k x n
            const float dxc = muon_ns_quant(q, x, n, k, 0, bits, fake, op2);
            muon_ns_transpose(op1, op2, n, k);
            const float db = muon_ns_quant(q, b, n, n, 1, bits, fake, op2);
            muon_ns_gemm_abt(bx, op2, op1, n, k, n, muon_ns_alpha(1.0f, db, dxc), chunk);
        } else {
            muon_ns_transpose(op1, x, n, k);
            muon_ns_gemm_abt(bx, b, op1, n, k, n, 1.0f, chunk);
        }
        for (size_t i = 0; i < nk; i++) x[i] = muon_bf16(muon_bf16(MUON_NS_A * x[i]) + bx[i]);
    }
    free(a); free(aa); free(b); free(bx); free(op1); free(op2); free(bits); free(fake);
}

// Newton-Schulz on x (n x k, n <= k, row-major, in place) with the operands of the GEMMs in `gemms` (NS_GEMM_* bits)
// quantized; otherwise as muon_newton_schulz, bit for bit (gemms 0 gives its result: A is exactly symmetric, so
// (c A) A^T has A A's products in its order). n and k must suit the spec's blocks (ns_fp4_shape_problem).
// Allocates its scratch.
static inline void muon_newton_schulz_fp4_ref(float* x, int n, int k, int steps, const QuantParams* q, int gemms) {
    muon_newton_schulz_fp4_chunked(x, n, k, steps, q, gemms, /*chunk=*/0);
}

// muon_update_ref with f's Newton-Schulz (BF16 when f->on is 0).
static inline void muon_update_fp4_ref(float* w, const float* g, float* m, int rows, int cols, const MuonParams* p,
                                       const NsFp4* f, float* update) {
    const size_t nk = (size_t)rows * cols;
    const int tr = rows > cols, n = tr ? cols : rows, k = tr ? rows : cols;
    float* x = (float*)xmalloc(nk * sizeof(float));
    muon_momentum_ref(x, g, m, rows, cols, p);
    muon_newton_schulz_fp4_ref(x, n, k, p->ns_steps, &f->q, f->on ? f->gemms : 0);
    muon_apply_ref(w, x, rows, cols, p, update);
    free(x);
}
