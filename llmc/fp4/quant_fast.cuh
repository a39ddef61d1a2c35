// quant_fast.cuh: the GPU quantizer: bandwidth-bound kernels for every configuration the trainer and its
// diagnostics use.
// defines: quant_fast_supported(), quantize_fast_gpu(), quant_fast_amax_gpu(), quant_fast_apply_gpu(),
//          quant_fast_stats_gpu(), quant_fast_delayed_ok(), quant_amax_accumulate(),
//          qf_rne_mag(), qf_sr_mag(), qf_sr_mag_x(), qf_code_index(), qf_code_consts(), QFGrid, qf_grid_consts(),
//          qf_grid_id()
// Outputs bit-identical to the CPU quantizer (fp4/quant_cpu.h: fake BF16 or packed codes and scales, *amax,
// *scale_dec; targets and layouts: quant_target.cuh) and to the reference GPU kernels (dev/ref/nvfp4_ref.cuh),
// for the targets quant_fast_supported() accepts:
//   - 1 target, or 2 targets with different axes (one row-wise, one column-wise): the amax pass reads the
//     input once for both, the apply pass runs one kernel per target (see qf_dispatch_apply);
//   - grids e2m1 / int4 / e1m2, and fp8 (E4M3 elements, MXFP8: round-to-nearest only; every block takes
//     the reference element path below, as these kernels have no magic-number rounding for it);
//     blocks 1x16, 1x32, 16x16, 32x32; scales e4m3, e8m0 (floor, ceil);
//     rne and sr; Hadamard 0, 2, 4, 8, 16 or 32 with any signs (pairs: see qf_combo_ok);
//   - per target either a fake output (16-byte aligned, ld % 8 == 0) or a packed one (codes and scales, codes
//     8-byte aligned; 4-bit grids); a 16-byte aligned input with ld % 8 == 0, cols % 8 == 0; and a shape
//     quant_check_shape accepts (K % L, M % W, K % H).
// quant_fast_stats_gpu: the diagnostics' QuantStats of a quantization (the same targets, outputs unused).
// Anything else: quant_fast_supported() returns 0 (the trainer checks shapes before it starts, and a pair
// without a pair kernel runs as two single-target passes).
//
// Output forms (QF_OUT_*): each is its own instantiation of the apply kernel, the form only choosing what the
// element loop computes (BF16 value, code, statistics) and how a row / column is stored
// (qf_store_packed_row / _cols, or the fake store in place); the fake kernels compile as they did alone.
//
// Layout. A warp owns a 32 x 128 tile of the view; lane = rg * 16 + cg holds the 16 rows
// [rg*16, rg*16+16) x 8 columns [cg*8, cg*8+8) of it as 16 16-byte words in registers (coalesced: each row
// load of a half-warp is 256 contiguous bytes). Row-wise (axis 1) blocks span 2 (L=16) or 4 (L=32) lanes
// of one row: block amax and the Hadamard stages h >= 8 go through shuffles. Column-wise (axis 0) blocks
// are a column of the thread's 16 rows (L=16) or of two lanes rg = 0, 1 (L=32, H32: shuffle xor 16).
// 2D tiles: the thread's 16 x 8 patch plus lanes xor 1 (16x16) or xor 1, 2, 16 (32x32).
// Fake copies in 1D blocks with a 16-point Hadamard or none have kernels of their own, laid out so that a lane
// owns whole rotation groups and whole 16-element blocks (no shuffle but the two lanes of a 1x32 row block's
// maxima; fewer instructions per element, the same arithmetic): row-wise qf_row2_kernel (nvfp4's fprop X and
// dgrad dY, ufp4's), column-wise in 1x16 blocks qf_colfake_kernel (nvfp4's wgrad X and dY, ufp4's; 1x32 column
// copies stay on the patch kernel), which stages its tiles through shared memory with cp.async (a first column
// kernel of this layout that loaded into registers ran slower than the patch kernel: results/README.md, "A
// column-wise kernel laid out like qf_row2_kernel"). On the FP8 path, row-wise copies in 1D blocks without a
// Hadamard, rounded to nearest, are made in one read (qf_rowfold_kernel), and the column-wise ones by
// qf_colfold_kernel (a lane owns whole column blocks); its TWO_D form makes 32 x 32-block copies of either
// axis, both copies of a pair (mxfp4-2d's dY) from one read. The whole-block kernels also make the 4o6 fake
// copies in 1x16 blocks (qf_46_words, qf_46_pair: both candidates from the lane's registers); quant_group.cuh
// makes the other 4o6 copies and every MS-EDEN one.
//
// Arithmetic. Block scales: quant_block_scale() itself, but in qf_row2_kernel and qf_colfake_kernel E4M3 ones
// come from the hardware's E4M3 conversion and a per-CTA table of 128 (sdec, inv) pairs (qf_block_scale; the
// same numbers, test_quant_fast checks every input). Elements of a block whose amax is finite take the
// fast path below; any block holding inf or NaN (or rotating to it) takes the reference path
// (grid_round_rne / grid_round_sr / bf16_bits_rne, exactly as the reference kernels).
//   fast RNE:  |q| = min((|x| + M) - M, max), M = 2^22/2^23/2^24 by region of |x| (E2M1: [0,2), [2,4), [4,8);
//              int4: 2^23; e1m2: 2^22; see qf_magic): the FPU's ties-to-even at the region's grid spacing.
//   fast SR:   |q| = min(((|x| - (r16 + 1/2) sp 2^-16 rounded up) +ru (M + sp)) - (M + sp), max): the
//              reference's "up iff (2 r16 + 1) < frac 2^17" as one ceiling on the grid; see qf_sr_mag_x.
//   output:    fake: sign(x) | BF16(|q| * sdec) by truncation: the product is exact in BF16 (or inf);
//              packed: sign(x) << 3 | the index of |q| among the levels, from the bits of |q| 2^-k (qf_code_index).
//   statistics: every element through the reference path (diagnostics only, off the hot path).
// dev/test/test_quant_fast.cu checks these against grid_round_rne / grid_round_sr over float bit patterns
// (all of them with --exhaustive), the product exactness for every code and scale and the code index of
// every level, then compares the fast kernels with the reference ones bit for bit on the GPU;
// dev/test/test_quant_gpu_cpu.cu compares them with the CPU quantizer over every preset and slot option.
// Hadamard: the butterflies of hadamard_f32_n in the same order (cross-lane stages as shuffles); the
// rotated values are rounded to BF16 by the hardware (cvt.rn.bf16x2) when the block amax is finite (equal
// to bf16_bits_rne for non-NaN inputs), else by bf16_bits_rne. Block and tensor amax of the rounded values
// are taken as the rounding of the max of the unrounded ones (rounding is monotone on non-NaN magnitudes;
// a group holding a NaN is rounded value by value).
// SR bits: sr_bits16(key, r, c, cols): one 64-bit draw per 2 x 2 square, 32 bits per column pair of a row.
#pragma once
#include <type_traits>
#include <cuda_bf16.h>
#include "llmc/base/cuda_common.cuh"
#include "llmc/fp4/formats.h"
#include "llmc/fp4/stochastic_round.h"
#include "llmc/fp4/hadamard.h"
#include "llmc/fp4/quant_cpu.h"   // amax_bits_update, BF16_CANONICAL_NAN, QuantStats
#include "llmc/fp4/quant_target.cuh"    // QuantTarget
#include "llmc/fp4/quant_diag.cuh"    // quant_stats_warp_flush
#include <cuda_fp8.h>
#include "llmc/fp4/fp8_fold.h"        // the FP8 output form's arithmetic

#define QF_THREADS 128
#define QF_MIN_CTAS 3
#define QF_WARPS (QF_THREADS / 32)
#define QF_ROWS 16          // rows per thread
#define QF_TILE_R 32        // rows per warp tile
#define QF_TILE_C 128       // cols per warp tile
#define QF_RNG_MUL RNG_INDEX_MUL   // rng.h

// ---------------------------------------------------------------------------------------------------
// Element arithmetic (HD: the CPU test checks it against the reference functions)

#if defined(__CUDA_ARCH__)
#define QF_ADD(a, b) __fadd_rn((a), (b))
#define QF_SUB(a, b) __fsub_rn((a), (b))
#define QF_MUL(a, b) __fmul_rn((a), (b))
#else
#define QF_ADD(a, b) ((a) + (b))
#define QF_SUB(a, b) ((a) - (b))
#define QF_MUL(a, b) ((a) * (b))
#endif

// A grid's regions as magic numbers: the region of |x| has spacing sp, and M = sp * 2^23 is the FP32
// number whose ulp is sp. E2M1: M = 2^22, 2^23, 2^24 on [0, 2), [2, 4), [4, 8); INT4: 2^23; E1M2: 2^22.
// M = max(mul |x| with its mantissa cleared, mlo), mul = 2^22 for E2M1 and 0 for the uniform grids: one
// mask and one max, no compare-and-select chains (these kernels are bound by the integer/logic pipe, where
// compares, selects and min/max run). Above the grid's top region M keeps growing with |x|, which is harmless:
// there every result is at least 8 > max and saturates, and |x| = inf (or an overflowing mul |x|) makes M
// inf and the result NaN, which fminf(., max) turns into max.
typedef struct {
    float mul;            // 2^22 (E2M1) or 0 (uniform grids)
    float mlo;            // the smallest M (the only one for the uniform grids)
    float maxval;
} QFGrid;

HD float qf_magic(const QFGrid& g, float a) {
    const float t = f32_from_bits(f32_bits(QF_MUL(a, g.mul)) & 0x7F800000u);
    return fmaxf(t, g.mlo);
}

// |x| (not NaN) -> magnitude of grid_round_rne's code value: (|x| + M) - M rounds to a multiple of
// sp, ties to even (the FPU's RNE at ulp sp).
HD float qf_rne_mag(const QFGrid& g, float a) {
    const float c = qf_magic(g, a);
    return fminf(QF_SUB(QF_ADD(a, c), c), g.maxval);
}

// |x| (not NaN), 16 random bits -> magnitude of grid_round_sr's code value. With sp the spacing of |x|'s
// region, |x| = k sp + frac sp and u = (r16 + 1/2) / 2^16, the reference rounds up iff frac > u, and
// ceil(k + frac - u) = k + [frac > u] (frac - u lies in (-1, 1)), so the code value is ceil_sp(|x| - u sp):
//   u sp = (r16 + 1/2) M 2^-39: a 17-bit number times a power of two, exact;
//   s = |x| - u sp rounded up (one FMA): s and the exact value have the same ceiling on the grid of
//       multiples of sp, whose points are floats; s > -sp;
//   (s +ru (M + sp)) - (M + sp): s + sp lies in (0, M), floats in [M, 2M) are sp apart, so the add is
//       M + ceil_sp(s + sp), and the result ceil_sp(s); M + sp = M (1 + 2^-23) is exact, and so is the
//       subtraction. Larger |x| saturate.
// No compare or select (these kernels are bound by the integer/logic pipe).
// xb: the float bits 0x4B000000 | r16 (2^23 + r16: one byte permute in the kernels).
HD float qf_sr_mag_x(const QFGrid& g, float a, uint32_t xb) {
    const float m = qf_magic(g, a);
    const float u = QF_SUB(f32_from_bits(xb), 8388607.5f);   // r16 + 1/2, exact
#if defined(__CUDA_ARCH__)
    const float msp = __fmul_rn(m, 1.00000011920928955078125f);                 // M + sp
    const float s = __fmaf_ru(-u, __fmul_rn(m, 1.8189894035458565e-12f), a);    // |x| - u M 2^-39, rounded up
    const float q = __fsub_rn(__fadd_ru(s, msp), msp);
#else   // the same value in double, without directed rounding (exact wherever the ceiling depends on it)
    const double sp = (double)m * 0x1p-23;
    const double e = (double)a + (65536.0 - (double)u) * ((double)m * 0x1p-39);   // |x| - u sp + sp > 0
    const float q = (float)(ceil(e / sp) * sp - sp);
#endif
    return fminf(q, g.maxval);
}
HD float qf_sr_mag(const QFGrid& g, float a, uint32_t r16) { return qf_sr_mag_x(g, a, 0x4B000000u | (r16 & 0xFFFFu)); }

static inline int qf_grid_id(const GridTraits* g) {
    for (int i = QGRID_E2M1; i < QGRID_COUNT; i++)
        if (!memcmp(g, &quant_grid_table[i].t, sizeof(GridTraits))) return i;
    return -1;
}

static inline QFGrid qf_grid_consts(int gid) {
    if (gid == QGRID_E2M1) return QFGrid{4194304.0f, 4194304.0f, 6.0f};
    if (gid == QGRID_INT4) return QFGrid{0.0f, 8388608.0f, 7.0f};
    if (gid == QGRID_E4M3) return QFGrid{0.0f, 8388608.0f, 448.0f};   // unused: fp8 takes the reference elements
    fail_if(gid != QGRID_E1M2, "qf_grid_consts: no fast path for grid %d", gid);
    return QFGrid{0.0f, 4194304.0f, 3.5f};
}

// Packed output: a fast-path magnitude m (one of the grid's levels) -> its code index 0..7, read off the
// float bits of m * mul (no search over the levels): E2M1 levels times 2^-126 are the floats whose bits >> 22
// are the E2M1 encoding (0.5 -> 2^-127, a subnormal: 1; 1 -> 2: 2; 1.5: 3; 2: 4; 3: 5; 4: 6; 6 -> 1.5 * 2^-124:
// 7); INT4 levels k times 2^-149 and E1M2 levels k/2 times 2^-148 are the subnormals with bits k. Exact
// products (no rounding), with subnormals kept (these kernels are not built with flush-to-zero).
HD uint32_t qf_code_index(float m, float mul, int shift) { return f32_bits(QF_MUL(m, mul)) >> shift; }

static inline void qf_code_consts(int gid, float* mul, int* shift) {
    *mul = gid == QGRID_E2M1 ? 0x1p-126f : gid == QGRID_INT4 ? 0x1p-149f : 0x1p-148f;   // fp8: unused (no packed form)
    *shift = gid == QGRID_E2M1 ? 22 : 0;
}

// ---------------------------------------------------------------------------------------------------
// Kernel arguments

// The output forms of the apply kernels, each its own instantiation (the fake one, the trainer's hot path
// on Hopper, is compiled exactly as without the others):
//   QF_OUT_FAKE    BF16 code * block scale in the view's layout;
//   QF_OUT_PACKED  4-bit codes and raw block scale bytes, operand-major (the native GEMM's operands);
//   QF_OUT_STATS   no output: the diagnostics' QuantStats of the quantization, added into a device struct;
//   QF_OUT_FP8     E8M0-scaled specs folded into E4M3 for FP8 GEMMs (fp8_fold.h): the fake values times a
//                  power of two per GEMM row, the reduction axis contiguous (a column-wise copy transposed);
//                  the amax pass also takes each GEMM row's maximum (QFTarget.fold_max).
enum { QF_OUT_FAKE = 0, QF_OUT_PACKED, QF_OUT_STATS, QF_OUT_FP8 };

typedef struct {
    QuantParams p;
    QFGrid g;
    uint64_t key;
    uint16_t* fake;
    int64_t ld_fake;
    float* amax;
    float* scale_dec;
    float* amax_next; // delayed amax (QuantTarget.amax_next): the apply kernel maxes the view's amax into it
    float hscale;     // hadamard_scale(H)
    uint32_t hsigns;  // sign bits of positions 0..31 (qf_hadamard_signs)
    int sr, bw, bl;
    int ref_elems;    // every block through the reference element path (the fp8 grid)
    int out;          // what the apply kernel writes: QF_OUT_FAKE (fake), QF_OUT_PACKED (codes, scales) or
                      // QF_OUT_STATS (stats)
    uint8_t* codes;   // packed: M x K/2 code bytes, operand-major (a column-wise copy transposed), quant_target.cuh
    uint8_t* scales;  // packed: M x K/L block scale bytes, operand-major
    float code_mul;   // packed: qf_code_index's constants (qf_code_consts)
    int code_shift;
    QuantStats* stats;   // statistics: the target's accumulator (device)
    // FP8 (fp8_fold.h): E4M3 bytes with the reduction axis contiguous, the per-row maxima, scales, count
    uint8_t* fp8;
    int64_t ld_fp8;
    uint32_t* fold_max;
    float* fold_scale;
    unsigned* fold_below;
    int dmin, dmax;   // fp8_fold_window
    int bw_log2;      // log2(bw): the fold's row index / bw as a shift (a 64-bit division is a long subroutine)
    const float* src_dec;   // MS-EDEN's dequantized source (QuantTarget.src_dec), or NULL
    float* eden_corr;       // MS-EDEN's corrections C (QuantTarget.eden_corr, tests), or NULL
    int eden;         // rounding eden: quant_group.cuh's MS-EDEN kernels
} QFTarget;

typedef struct {
    QFTarget t[2];    // [0]: the row-wise (axis 1) target, [1]: the column-wise (axis 0) target
    const uint16_t* in;
    int64_t rows, cols, ld;
    int64_t tiles_c;  // warp tiles along cols
    int64_t tiles;    // warp tiles in all
} QFArgs;

// ---------------------------------------------------------------------------------------------------
// Device helpers

__device__ __forceinline__ uint32_t qf_max(uint32_t a, uint32_t b) { return a > b ? a : b; }
__device__ __forceinline__ uint32_t qf_vmax(uint32_t a, uint32_t b) { return __vmaxu2(a, b); }
// max of the two BF16 halves (magnitudes), as FP32 bits
__device__ __forceinline__ uint32_t qf_hmax(uint32_t m2) { return qf_max(m2 << 16, m2 & 0xFFFF0000u); }
__device__ __forceinline__ uint32_t qf_shfl_max(uint32_t m, int x) { return qf_max(m, __shfl_xor_sync(0xFFFFFFFFu, m, x)); }
__device__ __forceinline__ uint32_t qf_absbits(float y) { return f32_bits(y) & 0x7FFFFFFFu; }
// Folds the amax bits m of this lane's values (magnitude bits, as amax_bits_update() takes them) into the device
// amax: a warp maximum, then one atomicMax. The apply kernels' delayed amax (QFTarget.amax_next) takes it so; a
// kernel that produces a tensor can too, for specs without a Hadamard (a rotated copy's amax is taken after the
// rotation). The amax float must be zeroed first; every lane of the warp must call it.
__device__ __forceinline__ void quant_amax_accumulate(float* amax, uint32_t m) {
#pragma unroll
    for (int x = 16; x > 0; x >>= 1) m = qf_shfl_max(m, x);
    if ((threadIdx.x & 31) == 0 && m) atomicMax((unsigned int*)amax, m);
}
// BF16 rounding of FP32 magnitude bits, as FP32 bits
__device__ __forceinline__ uint32_t qf_round_bits(uint32_t m) { return (uint32_t)bf16_bits_rne(f32_from_bits(m)) << 16; }
// The amax bits of n values after BF16 rounding, given m = the max of their unrounded magnitude bits:
// the rounding of m when m is not NaN (rounding is monotone there); NaN payloads do not round
// monotonically ((u >> 16) | 0x40), so a NaN group is rounded value by value (rare path).
template <int N>
__device__ __forceinline__ uint32_t qf_rmax(uint32_t m, const float (&y)[N]) {
    if (m <= 0x7F800000u) return qf_round_bits(m);
    uint32_t r = 0;
#pragma unroll
    for (int j = 0; j < N; j++) r = qf_max(r, qf_round_bits(qf_absbits(y[j])));
    return r;
}
__device__ __forceinline__ float qf_lo(uint32_t w) { return f32_from_bits(w << 16); }
__device__ __forceinline__ float qf_hi(uint32_t w) { return f32_from_bits(w & 0xFFFF0000u); }
__device__ __forceinline__ uint32_t qf_cvt2(float a, float b) {   // RNE, a -> low half
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    uint32_t u;
    memcpy(&u, &h, 4);
    return u;
}
__device__ __forceinline__ uint32_t qf_cvt2_ref(float a, float b) {
    return (uint32_t)bf16_bits_rne(a) | ((uint32_t)bf16_bits_rne(b) << 16);
}
// rng_bits64(key, index) given index * RNG_INDEX_MUL (kept incrementally by the callers)
__device__ __forceinline__ uint64_t qf_rng64(uint64_t key, uint64_t idx_mul) { return rng_mix64(key ^ idx_mul); }
// The 32 bits of a 2 x 2 square's draw that go to the column pair of row r: low half for an even row.
__device__ __forceinline__ uint32_t qf_rng_row(uint64_t w, int r) { return (uint32_t)(w >> ((r & 1) * 32)); }
// A square's draw (idx_mul: its index times QF_RNG_MUL) -> the bits of its even row and of its odd row
__device__ __forceinline__ void qf_rng_rows(uint64_t key, uint64_t idx_mul, uint32_t& even, uint32_t& odd) {
    const uint64_t w = qf_rng64(key, idx_mul);
    even = qf_rng_row(w, 0);
    odd = qf_rng_row(w, 1);
}

// FP8 output (fp8_fold.h). Offset of GEMM row i of a folding target, from the amax pass's maxima.
__device__ __forceinline__ int qf_fold_offset(const QFTarget& T, int64_t i) {
    return fp8_fold_offset(&T.p, T.dmax, __ldg(T.fold_max + (i >> T.bw_log2)));
}
// Two BF16 quantized values (a word) times 2^-o -> two E4M3 bytes (low byte: the low half), RNE, NaN -> 0x7F.
__device__ __forceinline__ uint32_t qf_fold2(uint32_t w, float inv) {
    return (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(QF_MUL(qf_lo(w), inv), QF_MUL(qf_hi(w), inv)), __NV_SATFINITE,
                                              __NV_E4M3);
}
// One row of 16 lanes' values (each lane v[0..15], one per row) -> lane cg holds the maximum of row cg over
// the 16 lanes: a transposing butterfly (15 shuffles instead of 16 x 4).
__device__ __forceinline__ uint32_t qf_transpose_max16(uint32_t (&v)[16], int cg) {
#pragma unroll
    for (int s = 8; s >= 1; s >>= 1) {
        const bool up = cg & s;
#pragma unroll
        for (int j = 0; j < s; j++) {
            const uint32_t send = up ? v[j] : v[j + s], keep = up ? v[j + s] : v[j];
            v[j] = qf_max(keep, __shfl_xor_sync(0xFFFFFFFFu, send, s));
        }
    }
    return v[0];
}
__device__ __forceinline__ void qf_count_below(const QFTarget& T, unsigned n) {
#pragma unroll
    for (int x = 16; x > 0; x >>= 1) n += __shfl_xor_sync(0xFFFFFFFFu, n, x);
    if ((threadIdx.x & 31) == 0 && n) atomicAdd(T.fold_below, n);
}

// Reference element (exactly qt_process of the reference kernels, dev/ref/nvfp4_ref.cuh): any block,
// including inf / NaN ones. x = v * bs.inv -> its code.
__device__ __forceinline__ uint8_t qf_slow_code(const QuantParams& p, float x, const QuantBlockScale& bs, int sr,
                                                uint32_t r16) {
    return bs.is_nan ? 0 : sr ? grid_round_sr(&p.grid, x, r16) : grid_round_rne(&p.grid, x);
}
__device__ __forceinline__ uint32_t qf_slow_elem(const QuantParams& p, float v, const QuantBlockScale& bs, int sr,
                                                 uint32_t r16) {
    float x = v * bs.inv;
    uint8_t c = qf_slow_code(p, x, bs, sr, r16);
    return bs.is_nan ? (uint32_t)BF16_CANONICAL_NAN : (uint32_t)bf16_bits_rne(grid_code_value(&p.grid, c) * bs.sdec);
}
// The statistics of one element (quant_stats_element, as the reference's statistics pass adds them).
__device__ __forceinline__ void qf_slow_stats(const QuantParams& p, float v, const QuantBlockScale& bs, int sr,
                                              uint32_t r16, float tdec, QuantStats* st) {
    float x = v * bs.inv;
    quant_stats_element(st, &p.grid, v, x, qf_slow_code(p, x, bs, sr, r16), &bs, tdec);
}

// Fast element pair -> the magnitudes m0, m1 of their code values.
template <bool SR>
__device__ __forceinline__ void qf_fast_mags(const QFGrid& g, float v0, float v1, float inv0, float inv1, uint32_t rnd,
                                             float& m0, float& m1) {
    const float a0 = fabsf(QF_MUL(v0, inv0)), a1 = fabsf(QF_MUL(v1, inv1));
    if (SR) {   // 0x4B000000 | r16 of each half: one PRMT each, not a mask (or shift) and an OR
        m0 = qf_sr_mag_x(g, a0, __byte_perm(rnd, 0x4B000000u, 0x7610));
        m1 = qf_sr_mag_x(g, a1, __byte_perm(rnd, 0x4B000000u, 0x7632));
    }
    else { m0 = qf_rne_mag(g, a0); m1 = qf_rne_mag(g, a1); }
}

// The fake BF16 word of a pair from its products p = |q| * sdec (exact in BF16, taken by truncation) and the signs
// of sw (the pair's BF16 bits).
__device__ __forceinline__ uint32_t qf_fake_word(float p0, float p1, uint32_t sw) {
    return __byte_perm(f32_bits(p0), f32_bits(p1), 0x7632) | (sw & 0x80008000u);
}

// Fast element pair -> packed BF16 word. sw: the BF16 bits of the pair (signs).
template <bool SR>
__device__ __forceinline__ uint32_t qf_fast_pair(const QFGrid& g, float v0, float v1, uint32_t sw, float inv0, float sd0,
                                                 float inv1, float sd1, uint32_t rnd) {
    float m0, m1;
    qf_fast_mags<SR>(g, v0, v1, inv0, inv1, rnd, m0, m1);
    return qf_fake_word(QF_MUL(m0, sd0), QF_MUL(m1, sd1), sw);
}

// Fast element pair -> their two codes (element 0 in the low nibble). A code's sign is its input's (x = v
// inv with inv > 0, -0 included), bit 15 / 31 of sw.
template <bool SR>
__device__ __forceinline__ uint32_t qf_fast_codes(const QFTarget& T, float v0, float v1, uint32_t sw, float inv0,
                                                  float inv1, uint32_t rnd) {
    float m0, m1;
    qf_fast_mags<SR>(T.g, v0, v1, inv0, inv1, rnd, m0, m1);
    return qf_code_index(m0, T.code_mul, T.code_shift) | (qf_code_index(m1, T.code_mul, T.code_shift) << 4) |
           ((sw >> 12) & 0x8u) | ((sw >> 24) & 0x80u);
}

// A block's fast-path words -> their fake BF16 words (row-wise targets: qf_apply_axis1, qf_row2_pair).
template <bool SR, int N>
__device__ __forceinline__ void qf_fast_words(const QFGrid& g, const uint32_t (&vw)[N], const QuantBlockScale& bs,
                                              const uint32_t (&rnd)[N], uint32_t (&o)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) o[i] = qf_fast_pair<SR>(g, qf_lo(vw[i]), qf_hi(vw[i]), vw[i], bs.inv, bs.sdec, bs.inv, bs.sdec, rnd[i]);
}

__device__ __forceinline__ uint32_t qf_slow_pair(const QuantParams& p, float v0, float v1, const QuantBlockScale& b0,
                                                 const QuantBlockScale& b1, int sr, uint32_t rnd) {
    return qf_slow_elem(p, v0, b0, sr, rnd & 0xFFFFu) | (qf_slow_elem(p, v1, b1, sr, rnd >> 16) << 16);
}
__device__ __forceinline__ uint32_t qf_slow_codes(const QuantParams& p, float v0, float v1, const QuantBlockScale& b0,
                                                  const QuantBlockScale& b1, int sr, uint32_t rnd) {
    return (uint32_t)qf_slow_code(p, v0 * b0.inv, b0, sr, rnd & 0xFFFFu) |
           ((uint32_t)qf_slow_code(p, v1 * b1.inv, b1, sr, rnd >> 16) << 4);
}
__device__ __forceinline__ void qf_slow_stats_pair(const QuantParams& p, float v0, float v1, const QuantBlockScale& b0,
                                                   const QuantBlockScale& b1, int sr, uint32_t rnd, float tdec,
                                                   QuantStats* st) {
    qf_slow_stats(p, v0, b0, sr, rnd & 0xFFFFu, tdec, st);
    qf_slow_stats(p, v1, b1, sr, rnd >> 16, tdec, st);
}

// Register-array access with a run-time index through selects (keeps the arrays in registers): for the
// rolled slow paths, so that the reference code appears once per call site.
template <typename T, int N>
__device__ __forceinline__ T qf_pick(const T (&a)[N], int i) {
    T x = a[0];
#pragma unroll
    for (int k = 1; k < N; k++) x = i == k ? a[k] : x;
    return x;
}

// Stages h = 1 .. N/2 of hadamard_f32_n, or only those with h < STOP and h < rstop (a run-time bound: the
// sizes below 16 share one instantiation, QF_HSMALL).
template <int N, int STOP = N>
__device__ __forceinline__ void qf_butterfly(float* v, int rstop = STOP) {
#pragma unroll
    for (int h = 1; h < STOP; h <<= 1) {
        if (h >= rstop) break;
#pragma unroll
        for (int j = 0; j < N; j++) {
            if (j & h) continue;
            const float a = v[j], b = v[j + h];
            v[j] = QF_ADD(a, b);
            v[j + h] = QF_SUB(a, b);
        }
    }
}

// Cross-lane butterfly stage: the lower lane (up == 0) holds a = v[j], the partner b = v[j + h]:
// lower gets a + b, upper gets a - b (a the partner's value).
__device__ __forceinline__ float qf_xstage(float own, int lanexor, uint32_t upmask) {
    const float o = __shfl_xor_sync(0xFFFFFFFFu, own, lanexor);
    return upmask ? QF_SUB(o, own) : QF_ADD(own, o);
}

// The Hadamard sizes 2, 4 and 8 run on the kernels instantiated for H = QF_HSMALL: their groups lie within a
// lane's 8 values (row-wise) or a thread's 16 rows (column-wise), and they differ only in how many butterfly
// stages run, a run-time bound (hrun, the target's size; qf_hrun). A separate instantiation per size would add
// kernels (and compile time) for sizes no preset uses.
#define QF_HSMALL 8
template <int H>
__device__ __forceinline__ int qf_hrun(const QFTarget& T) { return H == QF_HSMALL ? T.p.hadamard : H; }

// Axis 1: rotate one row's 8 values (columns c0..c0+7 of an H-group spread over H/8 lanes).
template <int H>
__device__ __forceinline__ void qf_rot_row(const uint32_t (&w)[4], const uint32_t (&smask)[4], float hscale, int cg,
                                           float (&y)[8], int hrun = H) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint32_t x = w[i] ^ smask[i];
        y[2 * i] = qf_lo(x);
        y[2 * i + 1] = qf_hi(x);
    }
    qf_butterfly<8>(y, hrun);   // H <= 8: every group lies within the lane's 8 values
#pragma unroll
    for (int h = 8; h < H; h <<= 1) {
        const int lx = h / 8;
        const uint32_t up = cg & lx;
#pragma unroll
        for (int j = 0; j < 8; j++) y[j] = qf_xstage(y[j], lx, up);
    }
#pragma unroll
    for (int j = 0; j < 8; j++) y[j] = QF_MUL(y[j], hscale);
}

// Axis 0: rotate the column pair p over the thread's 16 rows (H32: with lane rg ^ 1). w holds sign-flipped input.
template <int H>
__device__ __forceinline__ void qf_rot_cols(const uint32_t (&w)[QF_ROWS][4], int p, float hscale, int rg,
                                            float (&lo)[QF_ROWS], float (&hi)[QF_ROWS], int hrun = H) {
#pragma unroll
    for (int r = 0; r < QF_ROWS; r++) { lo[r] = qf_lo(w[r][p]); hi[r] = qf_hi(w[r][p]); }
    qf_butterfly<16>(lo, hrun);   // H < 16: groups within the thread's 16 rows
    qf_butterfly<16>(hi, hrun);
    if (H == 32) {
#pragma unroll
        for (int r = 0; r < QF_ROWS; r++) { lo[r] = qf_xstage(lo[r], 16, rg); hi[r] = qf_xstage(hi[r], 16, rg); }
    }
#pragma unroll
    for (int r = 0; r < QF_ROWS; r++) { lo[r] = QF_MUL(lo[r], hscale); hi[r] = QF_MUL(hi[r], hscale); }
}

template <int N>
__device__ __forceinline__ void qf_row_signs(const QFTarget& T, int H, int cg, uint32_t (&smask)[N]) {
    const uint32_t sb = H ? T.hsigns >> ((cg * 8) & (H - 1)) : 0u;
#pragma unroll
    for (int i = 0; i < N; i++)
        smask[i] = (((sb >> (2 * i)) & 1u) ? 0x8000u : 0u) | (((sb >> (2 * i + 1)) & 1u) ? 0x80000000u : 0u);
}

// Column-wise amax of one column of 16 rows under a 16-point rotation (v: the sign-flipped values; consumed):
// folds the maximum unrounded magnitude into *m, or a group holding a NaN its rounded maximum into *m_nan
// (qf_amax_kernel's rules). The last butterfly stage is not formed: max(|RN(a + b)|, |RN(a - b)|) =
// RN(|a| + |b|) (RN is monotone and odd, and max(|a + b|, |a - b|) = |a| + |b|), one add for two outputs,
// and the scale comes after the maximum (x -> RN(x hscale) is monotone). Where an input of that stage is
// inf or NaN (a + b or a - b may be NaN where |a| + |b| is not), the full rotation, value by value.
__device__ __forceinline__ void qf_col16_amax(float (&v)[QF_ROWS], float hscale, uint32_t* m, uint32_t* m_nan) {
    qf_butterfly<16, 8>(v);   // stages h = 1, 2, 4
    uint32_t mc = 0;
#pragma unroll
    for (int j = 0; j < 8; j++) mc = qf_max(mc, f32_bits(QF_ADD(fabsf(v[j]), fabsf(v[j + 8]))));
    if (mc < 0x7F800000u) {
        *m = qf_max(*m, qf_absbits(QF_MUL(f32_from_bits(mc), hscale)));
        return;
    }
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const float a = v[j], b = v[j + 8];
        v[j] = QF_MUL(QF_ADD(a, b), hscale);
        v[j + 8] = QF_MUL(QF_SUB(a, b), hscale);
    }
    mc = 0;
#pragma unroll
    for (int j = 0; j < QF_ROWS; j++) mc = qf_max(mc, qf_absbits(v[j]));
    if (mc <= 0x7F800000u) *m = qf_max(*m, mc);
    else *m_nan = qf_max(*m_nan, qf_rmax(mc, v));
}

// The rotation's sign flip of row r of a column group (rows 16 rg + r of an H32 group), on both halves of a
// word; none without a Hadamard
__device__ __forceinline__ void qf_col_sign_masks(const QFTarget& T, int H, int rg, uint32_t (&mk)[QF_ROWS]) {
    const uint32_t sb = H ? T.hsigns >> (H == 32 ? 16 * rg : 0) : 0u;
#pragma unroll
    for (int r = 0; r < QF_ROWS; r++) mk[r] = ((sb >> r) & 1u) ? 0x80008000u : 0u;
}
__device__ __forceinline__ void qf_col_signs(const QFTarget& T, int H, int rg, uint32_t (&w)[QF_ROWS][4]) {
    uint32_t mk[QF_ROWS];
    qf_col_sign_masks(T, H, rg, mk);
#pragma unroll
    for (int r = 0; r < QF_ROWS; r++) {
#pragma unroll
        for (int p = 0; p < 4; p++) w[r][p] ^= mk[r];
    }
}

__device__ __forceinline__ void qf_load(const QFArgs& A, int64_t r0, int64_t c0, bool stream, uint32_t (&w)[QF_ROWS][4]) {
    const bool cv = c0 < A.cols;
    const int64_t nr = A.rows - r0;
    const uint16_t* src = A.in + r0 * A.ld + c0;
#pragma unroll
    for (int r = 0; r < QF_ROWS; r++) {
        uint4 u = make_uint4(0u, 0u, 0u, 0u);
        if (cv && r < nr) {
            const uint4* ptr = (const uint4*)(src + r * A.ld);
            u = stream ? __ldcs(ptr) : __ldg(ptr);
        }
        w[r][0] = u.x; w[r][1] = u.y; w[r][2] = u.z; w[r][3] = u.w;
    }
}

// The apply loops are rolled to keep the code small: fully unrolled, a dual-target kernel is ~14k
// straight-line instructions per tile, more than the instruction caches hold, and ncu showed 40% of
// its stalls waiting on instruction fetch at 30% issue. A rolled body always works on the same
// registers (rows 0..QF_RGROUP-1, or word 0 of every row) and rotates the patch after each
// iteration, so every index stays static (no local memory); after a full loop the patch is back in
// order (row-wise) or holds the outputs in order (column-wise).
#define QF_RGROUP 4   // rows per iteration of the row-wise loop

__device__ __forceinline__ void qf_rotate_rows(uint32_t (&w)[QF_ROWS][4]) {   // rows r <- r + QF_RGROUP
#pragma unroll
    for (int i = 0; i < 4; i++) {
        uint32_t t[QF_RGROUP];
#pragma unroll
        for (int r = 0; r < QF_RGROUP; r++) t[r] = w[r][i];
#pragma unroll
        for (int r = 0; r < QF_ROWS - QF_RGROUP; r++) w[r][i] = w[r + QF_RGROUP][i];
#pragma unroll
        for (int r = 0; r < QF_RGROUP; r++) w[QF_ROWS - QF_RGROUP + r][i] = t[r];
    }
}

__device__ __forceinline__ void qf_rotate_cols(uint32_t (&w)[QF_ROWS][4]) {   // words i <- i + 1
#pragma unroll
    for (int r = 0; r < QF_ROWS; r++) {
        const uint32_t t = w[r][0];
        w[r][0] = w[r][1]; w[r][1] = w[r][2]; w[r][2] = w[r][3]; w[r][3] = t;
    }
}

// ---------------------------------------------------------------------------------------------------
// Packed stores (quant_target.cuh's layout: M x K/2 code bytes and M x K/L scale bytes, operand-major). Scale
// indices by shifts: 64-bit divisions are long subroutines, and these kernels are bound by the integer pipe.

__device__ __forceinline__ int qf_log2_block(const QFTarget& T) { return T.bl == 32 ? 5 : 4; }

// Row-wise: row r's 8 codes from column c0 (4 bytes), and the block's scale from the lane its block starts in.
__device__ __forceinline__ void qf_store_packed_row(const QFTarget& T, int64_t cols, int64_t r, int64_t c0, uint32_t codes,
                                                    uint8_t sbits) {
    const int lg = qf_log2_block(T);
    *(uint32_t*)(T.codes + r * (cols >> 1) + (c0 >> 1)) = codes;
    if (!(c0 & (T.bl - 1))) T.scales[r * (cols >> lg) + (c0 >> lg)] = sbits;
}

// Column-wise (the copy is transposed): the 16 codes of columns c and c + 1 over rows [r0, r0 + 16) (8 bytes
// each), and their blocks' scales from the thread the blocks start in (rg = 0 for L = 32).
__device__ __forceinline__ void qf_store_packed_cols(const QFTarget& T, int64_t rows, int64_t c, int64_t r0, uint64_t clo,
                                                     uint64_t chi, uint8_t slo, uint8_t shi) {
    const int lg = qf_log2_block(T);
    uint8_t* dst = T.codes + c * (rows >> 1) + (r0 >> 1);
    *(uint64_t*)dst = clo;
    *(uint64_t*)(dst + (rows >> 1)) = chi;
    if (!(r0 & (T.bl - 1))) {
        T.scales[c * (rows >> lg) + (r0 >> lg)] = slo;
        T.scales[(c + 1) * (rows >> lg) + (r0 >> lg)] = shi;
    }
}

// ---------------------------------------------------------------------------------------------------
// Apply, row-wise target (axis 1). OUT: the output form (QF_OUT_*); st: QF_OUT_STATS's accumulator.

template <int H, bool SR, int OUT>
__device__ __forceinline__ void qf_apply_axis1(const QFTarget& T, const QFArgs& A, uint32_t (&w)[QF_ROWS][4],
                                               int64_t r0, int64_t c0, int lane, float s_enc, QuantStats* st) {
    const int cg = lane & 15;
    uint32_t smask[4];
    qf_row_signs(T, H, cg, smask);
    const bool twod = T.bw > 1;
    const int l4 = T.bl == 32;
    uint32_t tile_m = 0;
    if (twod) {
        if (H) {
#pragma unroll
            for (int r = 0; r < QF_ROWS; r++) {
                float y[8];
                qf_rot_row<H>(w[r], smask, T.hscale, cg, y, qf_hrun<H>(T));
                uint32_t mr = 0;
#pragma unroll
                for (int j = 0; j < 8; j++) mr = qf_max(mr, qf_absbits(y[j]));
                tile_m = qf_max(tile_m, qf_rmax(mr, y));
            }
        } else {
            uint32_t m2 = 0;
#pragma unroll
            for (int r = 0; r < QF_ROWS; r++)
#pragma unroll
                for (int i = 0; i < 4; i++) m2 = qf_vmax(m2, w[r][i] & 0x7FFF7FFFu);
            tile_m = qf_hmax(m2);
        }
        tile_m = qf_shfl_max(tile_m, 1);
        if (l4) { tile_m = qf_shfl_max(tile_m, 2); tile_m = qf_shfl_max(tile_m, 16); }
    }
    const bool cv = c0 < A.cols;
    const int64_t nr = A.rows - r0;
    uint16_t* dst = OUT == QF_OUT_FAKE ? T.fake + r0 * T.ld_fake + c0 : nullptr;
    const float tdec = quant_tensor_scale_dec(&T.p, s_enc);   // statistics only
    // FP8: blocks below the window counted once, by their first lane (and for 2D blocks their first row);
    // each row's offset computed once, by lane cg = row (of its half), and shuffled to the others below;
    // the first tile column writes the row's GEMM scale
    const bool leader = (cg & (l4 ? 3 : 1)) == 0;
    unsigned below = 0;
    int my_off = 0;
    float my_inv = 1.0f;
    if constexpr (OUT == QF_OUT_FP8) {
        if (cg < nr) {
            my_off = qf_fold_offset(T, r0 + cg);
            my_inv = exp2_exact(-my_off);
            if (c0 == cg * 8) T.fold_scale[r0 + cg] = fp8_fold_scale(my_off);
        }
    }
    // SR: one draw per 2 x 2 square (sr_bits16): square (r / 2, c / 2) is draw (r / 2) (cols / 2) + c / 2,
    // the lane's 4 column pairs are consecutive draws, a row pair further on is cols / 2 draws on
    uint64_t pm = 0, pstep = 0, w64[4] = {0, 0, 0, 0};
    if (SR) {
        pm = ((uint64_t)(r0 >> 1) * (uint64_t)(A.cols >> 1) + (uint64_t)(c0 >> 1)) * QF_RNG_MUL;
        pstep = (uint64_t)(A.cols >> 1) * QF_RNG_MUL;
    }
#pragma unroll 1
    for (int g = 0; g < QF_ROWS; g += QF_RGROUP) {   // rolled (see qf_rotate_rows); w[rr] is row g + rr
#pragma unroll
    for (int rr = 0; rr < QF_RGROUP; rr++) {
        const int r = g + rr;
        float y[8];
        uint32_t m;
        if (H) {
            qf_rot_row<H>(w[rr], smask, T.hscale, cg, y, qf_hrun<H>(T));
            m = 0;
#pragma unroll
            for (int j = 0; j < 8; j++) m = qf_max(m, qf_absbits(y[j]));
            m = qf_rmax(m, y);
        } else {
            const uint32_t m2 = qf_vmax(qf_vmax(w[rr][0] & 0x7FFF7FFFu, w[rr][1] & 0x7FFF7FFFu),
                                        qf_vmax(w[rr][2] & 0x7FFF7FFFu, w[rr][3] & 0x7FFF7FFFu));
            m = qf_hmax(m2);
        }
        if (!twod) {
            m = qf_shfl_max(m, 1);
            if (l4) m = qf_shfl_max(m, 2);
        } else {
            m = tile_m;
        }
        const QuantBlockScale bs = quant_block_scale(&T.p, f32_from_bits(m), s_enc);
        // statistics take the reference elements (off the hot path), as the reference's statistics pass does
        const bool fast = OUT != QF_OUT_STATS && m < 0x7F800000u && !T.ref_elems;
        uint32_t vw[4];
#pragma unroll
        for (int i = 0; i < 4; i++) vw[i] = H ? qf_cvt2(y[2 * i], y[2 * i + 1]) : w[rr][i];   // fast path's rounding
        uint32_t rnd[4] = {0, 0, 0, 0};
        if (SR) {   // rows g + rr, g + rr + 1 (rr even; r0 and g are even) share the draws of their squares
            if (!(rr & 1)) {
#pragma unroll
                for (int i = 0; i < 4; i++) w64[i] = qf_rng64(T.key, pm + (uint64_t)i * QF_RNG_MUL);
                pm += pstep;
            }
#pragma unroll
            for (int i = 0; i < 4; i++) rnd[i] = qf_rng_row(w64[i], rr);
        }
        uint32_t o[4] = {0, 0, 0, 0};   // fake: the row's 8 BF16 values; packed: o[0] its 8 codes
        if (fast) {
            if constexpr (OUT == QF_OUT_PACKED) {
#pragma unroll
                for (int i = 0; i < 4; i++)
                    o[0] |= qf_fast_codes<SR>(T, qf_lo(vw[i]), qf_hi(vw[i]), vw[i], bs.inv, bs.inv, rnd[i]) << (8 * i);
            } else {
                qf_fast_words<SR>(T.g, vw, bs, rnd, o);
            }
        } else {   // rare: a block holding inf / NaN; rolled so that the reference code appears once
#pragma unroll 1
            for (int i = 0; i < 4; i++) {
                // the reference rounding of the rotated values (NaN payloads), here only: a select
                // between the two in the fast path would make the compiler compute both
                const uint32_t x = H ? qf_cvt2_ref(qf_pick(y, 2 * i), qf_pick(y, 2 * i + 1)) : qf_pick(vw, i);
                if constexpr (OUT == QF_OUT_STATS) {
                    if (cv && r < nr) qf_slow_stats_pair(T.p, qf_lo(x), qf_hi(x), bs, bs, T.sr, qf_pick(rnd, i), tdec, st);
                } else if constexpr (OUT == QF_OUT_PACKED) {
                    o[0] |= qf_slow_codes(T.p, qf_lo(x), qf_hi(x), bs, bs, SR, qf_pick(rnd, i)) << (8 * i);
                } else {
                    const uint32_t ow = qf_slow_pair(T.p, qf_lo(x), qf_hi(x), bs, bs, SR, qf_pick(rnd, i));
#pragma unroll
                    for (int k = 0; k < 4; k++) o[k] = k == i ? ow : o[k];
                }
            }
        }
        if constexpr (OUT == QF_OUT_FAKE) {
            if (cv && r < nr) *(uint4*)(dst + r * T.ld_fake) = make_uint4(o[0], o[1], o[2], o[3]);
        } else if constexpr (OUT == QF_OUT_PACKED) {
            if (cv && r < nr) qf_store_packed_row(T, A.cols, r0 + r, c0, o[0], bs.bits);
        } else if constexpr (OUT == QF_OUT_FP8) {   // row r's offset from the lane that computed it (all lanes)
            const int off = __shfl_sync(0xFFFFFFFFu, my_off, (lane & 16) | r);
            const float inv = __shfl_sync(0xFFFFFFFFu, my_inv, (lane & 16) | r);
            if (cv && r < nr) {
                const int64_t row = r0 + r;
                const uint32_t b01 = qf_fold2(o[0], inv) | (qf_fold2(o[1], inv) << 16);
                const uint32_t b23 = qf_fold2(o[2], inv) | (qf_fold2(o[3], inv) << 16);
                *(uint2*)(T.fp8 + row * T.ld_fp8 + c0) = make_uint2(b01, b23);
                below += leader && (row & (T.bw - 1)) == 0 && fp8_fold_counted(bs.bits, off, T.dmin);
            }
        }
    }
    qf_rotate_rows(w);
    }
    if constexpr (OUT == QF_OUT_FP8) qf_count_below(T, below);
}

// ---------------------------------------------------------------------------------------------------
// Apply, column-wise target (axis 0). Consumes w (sign flips, then fake outputs in place). OUT, st: as axis 1.

template <int H, bool SR, int OUT>
__device__ __forceinline__ void qf_apply_axis0(const QFTarget& T, const QFArgs& A, uint32_t (&w)[QF_ROWS][4],
                                               int64_t r0, int64_t c0, int lane, float s_enc, QuantStats* st) {
    const int rg = lane >> 4;
    if (H) qf_col_signs(T, H, rg, w);
    const bool twod = T.bw > 1;
    const int l32 = T.bl == 32;
    uint32_t tile_m = 0;
    if (twod) {
        if (H) {
#pragma unroll
            for (int p = 0; p < 4; p++) {
                float lo[QF_ROWS], hi[QF_ROWS];
                qf_rot_cols<H>(w, p, T.hscale, rg, lo, hi, qf_hrun<H>(T));
                uint32_t ml = 0, mh = 0;
#pragma unroll
                for (int r = 0; r < QF_ROWS; r++) { ml = qf_max(ml, qf_absbits(lo[r])); mh = qf_max(mh, qf_absbits(hi[r])); }
                tile_m = qf_max(tile_m, qf_max(qf_rmax(ml, lo), qf_rmax(mh, hi)));
            }
        } else {
            uint32_t m2 = 0;
#pragma unroll
            for (int r = 0; r < QF_ROWS; r++)
#pragma unroll
                for (int i = 0; i < 4; i++) m2 = qf_vmax(m2, w[r][i] & 0x7FFF7FFFu);
            tile_m = qf_hmax(m2);
        }
        tile_m = qf_shfl_max(tile_m, 1);
        if (l32) { tile_m = qf_shfl_max(tile_m, 2); tile_m = qf_shfl_max(tile_m, 16); }
    }
    // SR: as in qf_apply_axis1; the column pair p of the thread's 16 rows is 8 squares, cols / 2 draws apart
    const uint64_t pm0 = SR ? ((uint64_t)(r0 >> 1) * (uint64_t)(A.cols >> 1) + (uint64_t)(c0 >> 1)) * QF_RNG_MUL : 0;
    const uint64_t pstep = SR ? (uint64_t)(A.cols >> 1) * QF_RNG_MUL : 0;
    // packed and statistics: the thread's columns exist, and then all its 16 rows (rows % L == 0)
    const bool valid = c0 < A.cols && r0 < A.rows;
    const float tdec = quant_tensor_scale_dec(&T.p, s_enc);   // statistics only
    // FP8: each column's offset; blocks counted once, by their first lane (rg 0 for 32 rows; for 2D blocks
    // also the first lane and column pair of the block's columns)
    int off[8];
#pragma unroll
    for (int j = 0; j < 8; j++) off[j] = OUT == QF_OUT_FP8 && c0 < A.cols ? qf_fold_offset(T, c0 + j) : 0;
    const bool leader = OUT == QF_OUT_FP8 && c0 < A.cols && (!l32 || rg == 0) && (!twod || (lane & 15 & (l32 ? 3 : 1)) == 0);
    unsigned below = 0;
#pragma unroll 1
    for (int p = 0; p < 4; p++) {   // rolled (see qf_rotate_cols): column pair p is in w[.][0]
        uint32_t mlo, mhi;
        uint32_t vw[QF_ROWS];
        float lo[QF_ROWS], hi[QF_ROWS];
        if (H) {
            qf_rot_cols<H>(w, 0, T.hscale, rg, lo, hi, qf_hrun<H>(T));
            mlo = 0; mhi = 0;
#pragma unroll
            for (int r = 0; r < QF_ROWS; r++) { mlo = qf_max(mlo, qf_absbits(lo[r])); mhi = qf_max(mhi, qf_absbits(hi[r])); }
            mlo = qf_rmax(mlo, lo); mhi = qf_rmax(mhi, hi);
            if (l32 && !twod) { mlo = qf_shfl_max(mlo, 16); mhi = qf_shfl_max(mhi, 16); }
        } else {
            uint32_t m2 = 0;
#pragma unroll
            for (int r = 0; r < QF_ROWS; r++) m2 = qf_vmax(m2, w[r][0] & 0x7FFF7FFFu);
            if (l32 && !twod) m2 = qf_vmax(m2, __shfl_xor_sync(0xFFFFFFFFu, m2, 16));
            mlo = m2 << 16; mhi = m2 & 0xFFFF0000u;
        }
        if (twod) { mlo = tile_m; mhi = tile_m; }
        const QuantBlockScale blo = quant_block_scale(&T.p, f32_from_bits(mlo), s_enc);
        const QuantBlockScale bhi = twod ? blo : quant_block_scale(&T.p, f32_from_bits(mhi), s_enc);
        // statistics take the reference elements, as in axis 1
        const bool fast = OUT != QF_OUT_STATS && qf_max(mlo, mhi) < 0x7F800000u && !T.ref_elems;
        if (OUT == QF_OUT_FP8 && leader && (!twod || p == 0))
            below += fp8_fold_counted(blo.bits, qf_pick(off, 2 * p), T.dmin) +
                     (!twod && fp8_fold_counted(bhi.bits, qf_pick(off, 2 * p + 1), T.dmin));
#pragma unroll
        for (int r = 0; r < QF_ROWS; r++) vw[r] = H ? qf_cvt2(lo[r], hi[r]) : w[r][0];   // fast path's rounding
        uint64_t pm = pm0 + (uint64_t)p * QF_RNG_MUL;
        uint64_t clo = 0, chi = 0;   // packed: the 16 codes of column 2p and of column 2p + 1, row r in nibble r
        if (fast) {
            uint64_t w64 = 0;
#pragma unroll
            for (int r = 0; r < QF_ROWS; r++) {
                if (SR && !(r & 1)) { w64 = qf_rng64(T.key, pm); pm += pstep; }
                const uint32_t rnd = SR ? qf_rng_row(w64, r) : 0u;
                if constexpr (OUT == QF_OUT_PACKED) {
                    const uint32_t cb = qf_fast_codes<SR>(T, qf_lo(vw[r]), qf_hi(vw[r]), vw[r], blo.inv, bhi.inv, rnd);
                    clo |= (uint64_t)(cb & 15u) << (4 * r);
                    chi |= (uint64_t)(cb >> 4) << (4 * r);
                } else {
                    w[r][0] = qf_fast_pair<SR>(T.g, qf_lo(vw[r]), qf_hi(vw[r]), vw[r], blo.inv, blo.sdec, bhi.inv, bhi.sdec, rnd);
                }
            }
        } else {   // rare: a block holding inf / NaN; rolled so that the reference code appears once
#pragma unroll 1
            for (int r = 0; r < QF_ROWS; r++) {
                const uint32_t rnd = SR ? qf_rng_row(qf_rng64(T.key, pm + (uint64_t)(r >> 1) * pstep), r) : 0u;
                const uint32_t x = H ? qf_cvt2_ref(qf_pick(lo, r), qf_pick(hi, r)) : qf_pick(vw, r);   // as in axis 1
                if constexpr (OUT == QF_OUT_STATS) {
                    if (valid) qf_slow_stats_pair(T.p, qf_lo(x), qf_hi(x), blo, bhi, T.sr, rnd, tdec, st);
                } else if constexpr (OUT == QF_OUT_PACKED) {
                    const uint32_t cb = qf_slow_codes(T.p, qf_lo(x), qf_hi(x), blo, bhi, SR, rnd);
                    clo |= (uint64_t)(cb & 15u) << (4 * r);
                    chi |= (uint64_t)(cb >> 4) << (4 * r);
                } else {
                    const uint32_t ow = qf_slow_pair(T.p, qf_lo(x), qf_hi(x), blo, bhi, SR, rnd);
#pragma unroll
                    for (int k = 0; k < QF_ROWS; k++) w[k][0] = k == r ? ow : w[k][0];
                }
            }
        }
        if constexpr (OUT == QF_OUT_PACKED) {
            if (valid) qf_store_packed_cols(T, A.rows, c0 + 2 * p, r0, clo, chi, blo.bits, bhi.bits);
        }
        qf_rotate_cols(w);
    }
    if constexpr (OUT == QF_OUT_FAKE) {
        const bool cv = c0 < A.cols;
        const int64_t nr = A.rows - r0;
        uint16_t* dst = T.fake + r0 * T.ld_fake + c0;
#pragma unroll
        for (int r = 0; r < QF_ROWS; r++)
            if (cv && r < nr) *(uint4*)(dst + r * T.ld_fake) = make_uint4(w[r][0], w[r][1], w[r][2], w[r][3]);
    }
    if constexpr (OUT == QF_OUT_FP8) {   // column j of the patch -> 16 consecutive bytes of row c0 + j of the
        if (valid) {                      // transposed operand (rows % 16 == 0: whole patches)
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const float inv = exp2_exact(-off[j]);
                uint32_t b[4];
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    uint32_t pr[2];
#pragma unroll
                    for (int h = 0; h < 2; h++) {   // rows 4q + 2h, 4q + 2h + 1: one word of BF16 halves j & 1
                        const uint32_t a = w[4 * q + 2 * h][j >> 1], c = w[4 * q + 2 * h + 1][j >> 1];
                        const uint32_t pair = (j & 1) ? __byte_perm(a, c, 0x7632) : __byte_perm(a, c, 0x5410);
                        pr[h] = qf_fold2(pair, inv);
                    }
                    b[q] = pr[0] | (pr[1] << 16);
                }
                *(uint4*)(T.fp8 + (c0 + j) * T.ld_fp8 + r0) = make_uint4(b[0], b[1], b[2], b[3]);
                if (r0 == 0) T.fold_scale[c0 + j] = fp8_fold_scale(off[j]);
            }
        }
        qf_count_below(T, below);
    }
}

// ---------------------------------------------------------------------------------------------------
// Kernels. HA: Hadamard size of the row-wise target (-1: none), HB: of the column-wise target.

// 32-bit division (tile counts are below 2^31, qf_prepare): a 64-bit one is a long subroutine, and the apply
// kernels are bound by the integer pipe.
__device__ __forceinline__ void qf_tile_origin(const QFArgs& A, int64_t t, int lane, int64_t* r0, int64_t* c0) {
    const uint32_t tr = (uint32_t)t / (uint32_t)A.tiles_c, tc = (uint32_t)t - tr * (uint32_t)A.tiles_c;
    *r0 = (int64_t)tr * QF_TILE_R + (lane >> 4) * QF_ROWS;
    *c0 = (int64_t)tc * QF_TILE_C + (lane & 15) * 8;
}

// The FP8 output form's per-row maxima (fp8_fold.h), taken by the amax pass. Row-wise target: rm[r] the
// (rounded) maximum of the thread's part of row r0 + r; one atomicMax per row of the tile (per band of
// block_w rows for 2D blocks).
__device__ __forceinline__ void qf_fold_rows(const QFTarget& T, uint32_t (&rm)[QF_ROWS], int64_t r0, int lane,
                                             int64_t rows) {
    const int cg = lane & 15;
    if (T.bw == 1) {
        const uint32_t m = qf_transpose_max16(rm, cg);
        if (r0 + cg < rows && m) atomicMax(T.fold_max + r0 + cg, m);
        return;
    }
    uint32_t m = 0;
#pragma unroll
    for (int r = 0; r < QF_ROWS; r++) m = qf_max(m, rm[r]);
#pragma unroll
    for (int x = 1; x < 16; x <<= 1) m = qf_shfl_max(m, x);
    if (T.bw == 32) m = qf_shfl_max(m, 16);
    if (cg == 0 && (T.bw == 16 || lane < 16) && r0 < rows && m) atomicMax(T.fold_max + (r0 >> T.bw_log2), m);
}
// Column-wise target: cm[j] the maximum of column c0 + j over the rows the warp has seen (both row groups
// combined); one atomicMax per column (per band of block_w columns).
__device__ __forceinline__ void qf_fold_cols(const QFTarget& T, const uint32_t (&cm)[8], int64_t c0, int lane,
                                             int64_t cols) {
    if (T.bw == 1) {
#pragma unroll
        for (int j = 0; j < 8; j++)
            if (lane < 16 && c0 + j < cols && cm[j]) atomicMax(T.fold_max + c0 + j, cm[j]);
        return;
    }
    uint32_t m = 0;
#pragma unroll
    for (int j = 0; j < 8; j++) m = qf_max(m, cm[j]);
    m = qf_shfl_max(m, 1);
    if (T.bw == 32) m = qf_shfl_max(m, 2);
    if (lane < 16 && (lane & (T.bw == 32 ? 3 : 1)) == 0 && c0 < cols && m) atomicMax(T.fold_max + (c0 >> T.bw_log2), m);
}

// FOLD: also the FP8 targets' per-row maxima (a separate instantiation, so that the others keep their registers).
template <int HA, int HB, bool FOLD>
__global__ void __launch_bounds__(QF_THREADS, QF_MIN_CTAS) qf_amax_kernel(const __grid_constant__ QFArgs A) {
    __shared__ uint32_t red[2][QF_WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int cg = lane & 15, rg = lane >> 4;
    uint32_t m2raw = 0, ma = 0, mb = 0, ma_nan = 0, mb_nan = 0;   // unrounded maxima; rounded maxima of NaN groups
    uint32_t smask[4] = {0, 0, 0, 0};
    if (HA > 0) qf_row_signs(A.t[0], HA, cg, smask);
    // FP8 maxima: per row of each tile; per column, kept while the warp stays on one tile column (the
    // launch makes that the whole run) and flushed when it moves
    const bool fold_r = FOLD && HA >= 0 && A.t[0].fold_max, fold_c = FOLD && HB >= 0 && A.t[1].fold_max;
    uint32_t cacc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t cacc_c0 = -1;
    for (int64_t t = (int64_t)blockIdx.x * QF_WARPS + warp; t < A.tiles; t += (int64_t)gridDim.x * QF_WARPS) {
        int64_t r0, c0;
        qf_tile_origin(A, t, lane, &r0, &c0);
        uint32_t w[QF_ROWS][4];
        qf_load(A, r0, c0, false, w);
        uint32_t rm[QF_ROWS];
        if (HA == 0 && fold_r) {
#pragma unroll
            for (int r = 0; r < QF_ROWS; r++)
                rm[r] = qf_hmax(qf_vmax(qf_vmax(w[r][0] & 0x7FFF7FFFu, w[r][1] & 0x7FFF7FFFu),
                                        qf_vmax(w[r][2] & 0x7FFF7FFFu, w[r][3] & 0x7FFF7FFFu)));
        }
        if (HA == 0 || HB == 0) {
#pragma unroll
            for (int r = 0; r < QF_ROWS; r++)
#pragma unroll
                for (int i = 0; i < 4; i++) m2raw = qf_vmax(m2raw, w[r][i] & 0x7FFF7FFFu);
        }
        if (HA > 0) {
#pragma unroll
            for (int r = 0; r < QF_ROWS; r++) {
                float y[8];
                qf_rot_row<HA>(w[r], smask, A.t[0].hscale, cg, y, qf_hrun<HA>(A.t[0]));
                uint32_t mr = 0;
#pragma unroll
                for (int j = 0; j < 8; j++) mr = qf_max(mr, qf_absbits(y[j]));
                if (mr <= 0x7F800000u) ma = qf_max(ma, mr);
                else ma_nan = qf_max(ma_nan, qf_rmax(mr, y));
                if (fold_r) rm[r] = qf_rmax(mr, y);
            }
        }
        if (fold_r) qf_fold_rows(A.t[0], rm, r0, lane, A.rows);
        if (fold_c && c0 != cacc_c0) {
            if (cacc_c0 >= 0) qf_fold_cols(A.t[1], cacc, cacc_c0, lane, A.cols);
#pragma unroll
            for (int j = 0; j < 8; j++) cacc[j] = 0;
            cacc_c0 = c0;
        }
        if (HB == 0 && fold_c) {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                uint32_t m2 = 0;
#pragma unroll
                for (int r = 0; r < QF_ROWS; r++) m2 = qf_vmax(m2, w[r][i] & 0x7FFF7FFFu);
                m2 = qf_vmax(m2, __shfl_xor_sync(0xFFFFFFFFu, m2, 16));
                cacc[2 * i] = qf_max(cacc[2 * i], m2 << 16);
                cacc[2 * i + 1] = qf_max(cacc[2 * i + 1], m2 & 0xFFFF0000u);
            }
        }
        // column-wise with a Hadamard: H16's tensor amax needs only the last butterfly stage's |a| + |b|
        // (qf_col16_amax); an FP8 target's column maxima need the rotated columns themselves
        if (HB == 16 && !fold_c) {
            qf_col_signs(A.t[1], HB, rg, w);
#pragma unroll
            for (int p = 0; p < 4; p++) {
                float lo[QF_ROWS], hi[QF_ROWS];
#pragma unroll
                for (int r = 0; r < QF_ROWS; r++) { lo[r] = qf_lo(w[r][p]); hi[r] = qf_hi(w[r][p]); }
                qf_col16_amax(lo, A.t[1].hscale, &mb, &mb_nan);
                qf_col16_amax(hi, A.t[1].hscale, &mb, &mb_nan);
            }
        } else if (HB > 0) {
            qf_col_signs(A.t[1], HB, rg, w);
#pragma unroll
            for (int p = 0; p < 4; p++) {
                float lo[QF_ROWS], hi[QF_ROWS];
                qf_rot_cols<HB>(w, p, A.t[1].hscale, rg, lo, hi, qf_hrun<HB>(A.t[1]));
                uint32_t ml = 0, mh = 0;
#pragma unroll
                for (int r = 0; r < QF_ROWS; r++) { ml = qf_max(ml, qf_absbits(lo[r])); mh = qf_max(mh, qf_absbits(hi[r])); }
                if (qf_max(ml, mh) <= 0x7F800000u) mb = qf_max(mb, qf_max(ml, mh));
                else mb_nan = qf_max(mb_nan, qf_max(qf_rmax(ml, lo), qf_rmax(mh, hi)));
                if (fold_c) {   // the column pair's rounded maxima, both row groups
                    cacc[2 * p] = qf_max(cacc[2 * p], qf_shfl_max(qf_rmax(ml, lo), 16));
                    cacc[2 * p + 1] = qf_max(cacc[2 * p + 1], qf_shfl_max(qf_rmax(mh, hi), 16));
                }
            }
        }
    }
    if (fold_c && cacc_c0 >= 0) qf_fold_cols(A.t[1], cacc, cacc_c0, lane, A.cols);
    const uint32_t raw = qf_hmax(m2raw);
    uint32_t m[2] = {HA > 0 ? qf_max(qf_round_bits(ma), ma_nan) : raw, HB > 0 ? qf_max(qf_round_bits(mb), mb_nan) : raw};
#pragma unroll
    for (int k = 0; k < 2; k++) {
#pragma unroll
        for (int x = 16; x > 0; x >>= 1) m[k] = qf_shfl_max(m[k], x);
        if (lane == 0) red[k][warp] = m[k];
    }
    __syncthreads();
    if (threadIdx.x < 2) {
        const int k = threadIdx.x;
        if ((k == 0 && HA < 0) || (k == 1 && HB < 0)) return;
        uint32_t mm = 0;
        for (int i = 0; i < QF_WARPS; i++) mm = qf_max(mm, red[k][i]);
        if (mm) atomicMax((unsigned int*)A.t[k].amax, mm);
    }
}

// Registers: the thread's patch (64) plus one target's working set; 128-thread CTAs, at least 3 per SM
// (at most 168 registers; a cap of 128 spilled ~320 bytes in the column-wise Hadamard kernel).
// OUT: the output form of its targets (QF_OUT_*); a statistics kernel has one target, and its double sums
// and reference elements need more registers (diagnostics: fewer CTAs per SM rather than spills).
template <int HA, int HB, int OUT>
__global__ void __launch_bounds__(QF_THREADS, OUT == QF_OUT_STATS ? 1 : QF_MIN_CTAS)
    qf_apply_kernel(const __grid_constant__ QFArgs A) {
    static_assert(OUT != QF_OUT_STATS || (HA < 0) != (HB < 0), "a statistics kernel has one target");
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float s_enc[2] = {1.0f, 1.0f};
#pragma unroll
    for (int k = 0; k < 2; k++) {
        if ((k == 0 && HA < 0) || (k == 1 && HB < 0)) continue;
        s_enc[k] = quant_tensor_scale_enc(&A.t[k].p, *A.t[k].amax);
        if (OUT != QF_OUT_STATS && blockIdx.x == 0 && threadIdx.x == 0)   // statistics write nothing else
            *A.t[k].scale_dec = quant_tensor_scale_dec(&A.t[k].p, s_enc[k]);
    }
    const int64_t t = (int64_t)blockIdx.x * QF_WARPS + warp;
    if (t >= A.tiles) return;
    int64_t r0, c0;
    qf_tile_origin(A, t, lane, &r0, &c0);
    uint32_t w[QF_ROWS][4];
    qf_load(A, r0, c0, true, w);
    QuantStats st;   // QF_OUT_STATS: this thread's sums (dead code in the other forms)
    memset(&st, 0, sizeof(st));
    // statistics: one instantiation, which draws the SR bits and rounds as T.sr says (diagnostics only)
    if constexpr (HA >= 0) {
        constexpr int H = HA > 0 ? HA : 0;
        if constexpr (OUT == QF_OUT_STATS) qf_apply_axis1<H, true, OUT>(A.t[0], A, w, r0, c0, lane, s_enc[0], &st);
        else if (A.t[0].sr) qf_apply_axis1<H, true, OUT>(A.t[0], A, w, r0, c0, lane, s_enc[0], &st);
        else qf_apply_axis1<H, false, OUT>(A.t[0], A, w, r0, c0, lane, s_enc[0], &st);
    }
    if constexpr (HB >= 0) {
        constexpr int H = HB > 0 ? HB : 0;
        if constexpr (OUT == QF_OUT_STATS) qf_apply_axis0<H, true, OUT>(A.t[1], A, w, r0, c0, lane, s_enc[1], &st);
        else if (A.t[1].sr) qf_apply_axis0<H, true, OUT>(A.t[1], A, w, r0, c0, lane, s_enc[1], &st);
        else qf_apply_axis0<H, false, OUT>(A.t[1], A, w, r0, c0, lane, s_enc[1], &st);
    }
    if constexpr (OUT == QF_OUT_STATS) quant_stats_warp_flush(st, A.t[HA >= 0 ? 0 : 1].stats);   // whole warps
}

// ---------------------------------------------------------------------------------------------------
// A target's block-scale rule with its per-tensor constants computed once (the kernels below). E4M3 scales:
// quant_block_scale_e4m3_pre's arithmetic (mult and s_dec hold quant_block_scale's divisions) in fewer
// instructions. Its scale byte e4m3_bits(e4m3_rne_satfinite(y)) is the hardware's RNE satfinite conversion
// (one cvt instead of a branchy rounding and re-encoding; test_quant_fast checks the two agree on every
// float in [0, FLT_MAX], and y = fminf(bamax * mult, FLT_MAX) lies there: bamax is a magnitude, mult > 0);
// sdec and inv = fminf(1 / (sdec * s_dec), FLT_MAX) are functions of that byte and the tensor, so they come
// from a 128-entry table each CTA fills once (one IEEE division per entry instead of one per block). Other
// scales: quant_block_scale itself.
typedef struct {
    float s_enc, mult, s_dec;
    float mult4;         // 4o6's 4-candidate: quant_block_scale_e4m3_to(., s_enc, 4)'s mult (R.mult is the 6-candidate's)
    int e4m3;
    const float2* tab;   // E4M3: [byte] = (sdec, inv), in shared memory
} QFBlockRule;

// The CTA's table of E4M3 block scales under a tensor's s_dec: [byte] = (sdec, fminf(1 / (sdec * s_dec), FLT_MAX)),
// quant_block_scale_e4m3_pre's values (one IEEE division per byte), with sdec = zero for byte 0 (E4M3's value; 1 for
// MS-EDEN's eden_group_scale). Byte 127 is E4M3's NaN: never looked up. The CTA syncs before the first lookup.
__device__ __forceinline__ void qf_scale_table(float2* tab, float s_dec, float zero) {
    for (int b = threadIdx.x; b < 128; b += blockDim.x) {
        const float sdec = b ? e4m3_value((uint8_t)b) : zero;
        tab[b] = make_float2(sdec, fminf(1.0f / (sdec * s_dec), FLT_MAX));
    }
}
// tab: 128 float2 of the CTA's shared memory; the CTA syncs before its first qf_block_scale
__device__ __forceinline__ QFBlockRule qf_block_rule(const QFTarget& T, float amax, float2* tab) {
    QFBlockRule R;
    R.s_enc = quant_tensor_scale_enc(&T.p, amax);
    R.e4m3 = quant_scale_is_e4m3(T.p.scale) && !T.eden;
    R.mult = R.s_enc * (1.0f / T.p.grid.maxval);
    R.mult4 = R.s_enc * (1.0f / 4.0f);
    R.s_dec = 1.0f / R.s_enc;
    R.tab = tab;
    if (R.e4m3) qf_scale_table(tab, R.s_dec, 0.0f);
    return R;
}
// m: the block amax's magnitude bits (sign clear, so y >= +0; a NaN or inf amax gives y = FLT_MAX, as in the reference)
__device__ __forceinline__ QuantBlockScale qf_e4m3_scale(const QFBlockRule& R, uint32_t m, float mult) {
    const float y = fminf(f32_from_bits(m) * mult, FLT_MAX);
    const uint32_t b = __nv_cvt_float_to_fp8(y, __NV_SATFINITE, __NV_E4M3);
    const float2 e = R.tab[b];
    QuantBlockScale bs;
    bs.sdec = e.x;
    bs.inv = e.y;
    bs.bits = (uint8_t)b;
    bs.is_nan = 0;
    return bs;
}
__device__ __forceinline__ QuantBlockScale qf_block_scale(const QFTarget& T, const QFBlockRule& R, uint32_t m) {
    if (!R.e4m3) return quant_block_scale(&T.p, f32_from_bits(m), R.s_enc);
    return qf_e4m3_scale(R, m, R.mult);
}

// Four Over Six (scale rule 4o6, docs/NUMERICS_NEXT.md section 1) in the whole-block kernels (fake copies in 1x16
// blocks, E2M1): each block's two candidates, its max to 6 (qf_block_scale) and to 4 (qf_e4m3_scale with mult4),
// round every element (the same SR bits), and the block keeps the 4-candidate iff the sum of its squared errors
// (m * sdec - |v| * S_enc)^2, added in the block's element order with no FMA, is strictly smaller (quant_group.cuh's
// qg_err_add, the CPU twin's quant_4o6_err_add: the signs cancel). A candidate's fake word is qf_fake_word's. A block holding inf or NaN keeps 6 and takes the reference elements.
__device__ __forceinline__ float qf_46_add(float e, float p, float sv) {
    const float d = QF_SUB(p, sv);
    return QF_ADD(e, QF_MUL(d, d));
}
// One block along a row's words vw (elements 2i, 2i + 1 of word i, in order) -> its fake words o.
template <bool SR, int N>
__device__ __forceinline__ void qf_46_words(const QFGrid& g, const uint32_t (&vw)[N], const QuantBlockScale& c6,
                                            const QuantBlockScale& c4, float s_enc, const uint32_t (&rnd)[N],
                                            uint32_t (&o)[N]) {
    float e6 = 0.0f, e4 = 0.0f;
    uint32_t w4[N];
#pragma unroll
    for (int i = 0; i < N; i++) {
        const float v0 = qf_lo(vw[i]), v1 = qf_hi(vw[i]);
        const float s0 = QF_MUL(fabsf(v0), s_enc), s1 = QF_MUL(fabsf(v1), s_enc);
        float m0, m1, n0, n1;
        qf_fast_mags<SR>(g, v0, v1, c6.inv, c6.inv, rnd[i], m0, m1);
        qf_fast_mags<SR>(g, v0, v1, c4.inv, c4.inv, rnd[i], n0, n1);
        const float p0 = QF_MUL(m0, c6.sdec), p1 = QF_MUL(m1, c6.sdec), q0 = QF_MUL(n0, c4.sdec), q1 = QF_MUL(n1, c4.sdec);
        e6 = qf_46_add(qf_46_add(e6, p0, s0), p1, s1);
        e4 = qf_46_add(qf_46_add(e4, q0, s0), q1, s1);
        o[i] = qf_fake_word(p0, p1, vw[i]);
        w4[i] = qf_fake_word(q0, q1, vw[i]);
    }
#pragma unroll
    for (int i = 0; i < N; i++) o[i] = e4 < e6 ? w4[i] : o[i];
}
// One row of two column blocks (word x: column c low, c + 1 high): both candidates' words w6, w4 and error sums.
template <bool SR>
__device__ __forceinline__ void qf_46_pair(const QFGrid& g, uint32_t x, const QuantBlockScale& l6, const QuantBlockScale& h6,
                                           const QuantBlockScale& l4, const QuantBlockScale& h4, float s_enc, uint32_t rnd,
                                           float& el6, float& eh6, float& el4, float& eh4, uint32_t& w6, uint32_t& w4) {
    const float v0 = qf_lo(x), v1 = qf_hi(x);
    const float s0 = QF_MUL(fabsf(v0), s_enc), s1 = QF_MUL(fabsf(v1), s_enc);
    float m0, m1, n0, n1;
    qf_fast_mags<SR>(g, v0, v1, l6.inv, h6.inv, rnd, m0, m1);
    qf_fast_mags<SR>(g, v0, v1, l4.inv, h4.inv, rnd, n0, n1);
    const float p0 = QF_MUL(m0, l6.sdec), p1 = QF_MUL(m1, h6.sdec), q0 = QF_MUL(n0, l4.sdec), q1 = QF_MUL(n1, h4.sdec);
    el6 = qf_46_add(el6, p0, s0);
    eh6 = qf_46_add(eh6, p1, s1);
    el4 = qf_46_add(el4, q0, s0);
    eh4 = qf_46_add(eh4, q1, s1);
    w6 = qf_fake_word(p0, p1, x);
    w4 = qf_fake_word(q0, q1, x);
}

// ---------------------------------------------------------------------------------------------------
// Row-wise fake copies in 1D blocks, with a 16-point Hadamard or none (nvfp4's fprop X and dgrad dY, ufp4's,
// mxfp4's rows on the emulated path): the arithmetic of qf_apply_axis1<H, SR, QF_OUT_FAKE> (same rotation,
// block amax, scale, SR draws and elements), laid out for fewer instructions per element. The patch kernel
// gives a lane 8 columns of 16 rows, so both lanes of a 16-element block compute its scale (and trade maxima
// by shuffle), and its rolled row loop rotates the 64-register patch (~4.6 register moves per element in its
// SASS; results/README). Here a lane owns whole blocks: 16 columns (two 16-byte loads) of 16 rows, taken one
// row pair at a time (a pair shares its SR draws) through two fixed buffers, the next pair's loads in flight
// while one pair is quantized. Warp tile: 32 rows x 256 columns (lane = rg * 16 + cg: rows rg * 16 + [0, 16),
// columns cg * 16 + [0, 16)). The default kernel for these copies (qf_dispatch_apply_form); bit for bit equal
// to the reference kernels in test_quant_fast and test_quant_gpu_cpu, and on the H200 at 65536 x 3072 its
// apply ran at 227 us (RTN) and 303 us (SR) against the patch kernel's 243 and 321 (results/README, row2/).
#define QF_ROW2_TILE_C 256

// A 16-point rotation group held by one lane (y: the sign-flipped values) -> rotated in place (the butterflies
// of hadamard_f32_n in its order, then the scale, as qf_apply_axis0/1<16>); returns the block amax of the
// rotated values as rounded to BF16 (qf_rmax). A block is the group: qf_row2_kernel's rows, qf_colfake_kernel's
// columns.
__device__ __forceinline__ uint32_t qf_rot16_max(float (&y)[16], float hscale) {
    qf_butterfly<16>(y);
    uint32_t m = 0;
#pragma unroll
    for (int j = 0; j < 16; j++) { y[j] = QF_MUL(y[j], hscale); m = qf_max(m, qf_absbits(y[j])); }
    return qf_rmax(m, y);
}

typedef struct { uint4 v[2][2]; } QFRowPair;   // [row of the pair][16-byte half of the lane's 16 columns]

__device__ __forceinline__ void qf_row2_load(const uint16_t* src, int64_t ld, bool ok0, bool ok1, QFRowPair& b) {
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const bool ok = k ? ok1 : ok0;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            b.v[k][h] = make_uint4(0u, 0u, 0u, 0u);
            if (ok) b.v[k][h] = __ldcs((const uint4*)(src + k * ld) + h);
        }
    }
}

// One row pair: rows r, r + 1 (r even) at dst, dst + ld_fake. pm: this pair's first SR draw (times
// QF_RNG_MUL): the lane's 8 column pairs are 8 consecutive draws, each giving row r its low 32 bits and
// row r + 1 its high ones (qf_rng_row).
// H = 16: the row's 16 values are one rotation group (qf_apply_axis1<16>'s arithmetic: the sign flips smask, the
// butterflies of hadamard_f32_n in the same order, here all within the lane, the scale, and the block amax of the
// rounded values), then the fast path's rounding to BF16 (cvt.rn.bf16x2) or the reference's.
// F46: the target's scale rule is 4o6 (1x16 blocks): qf_46_words.
// dm: the maximum of the pair's block amaxes goes into it (the delayed amax rule's view amax; rows past the view's
// end and columns past its width were loaded as zeros).
template <int H, bool SR, bool F46>
__device__ __forceinline__ void qf_row2_pair(const QFTarget& T, const QFRowPair& b, uint16_t* dst, bool ok0, bool ok1,
                                             const QFBlockRule& R, uint64_t pm, const uint32_t (&smask)[8], uint32_t& dm) {
    uint64_t w64[8];
    if (SR) {
#pragma unroll
        for (int i = 0; i < 8; i++) w64[i] = qf_rng64(T.key, pm + (uint64_t)i * QF_RNG_MUL);
    }
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const uint32_t w[8] = {b.v[k][0].x, b.v[k][0].y, b.v[k][0].z, b.v[k][0].w,
                               b.v[k][1].x, b.v[k][1].y, b.v[k][1].z, b.v[k][1].w};
        float y[16];   // H: the rotated values
        uint32_t m;
        if constexpr (H == 16) {
#pragma unroll
            for (int i = 0; i < 8; i++) { const uint32_t x = w[i] ^ smask[i]; y[2 * i] = qf_lo(x); y[2 * i + 1] = qf_hi(x); }
            m = qf_rot16_max(y, T.hscale);
        } else {
            uint32_t m2 = 0;
#pragma unroll
            for (int i = 0; i < 8; i++) m2 = qf_vmax(m2, w[i] & 0x7FFF7FFFu);
            m = qf_hmax(m2);
        }
        dm = qf_max(dm, m);
        if (T.bl == 32) m = qf_shfl_max(m, 1);   // the block's other 16 columns
        const QuantBlockScale bs = qf_block_scale(T, R, m);
        uint32_t rnd[8];
#pragma unroll
        for (int i = 0; i < 8; i++) rnd[i] = SR ? qf_rng_row(w64[i], k) : 0u;
        uint32_t o[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (m < 0x7F800000u && !T.ref_elems) {
            uint32_t vw[8];
#pragma unroll
            for (int i = 0; i < 8; i++) vw[i] = H ? qf_cvt2(y[2 * i], y[2 * i + 1]) : w[i];
            if constexpr (F46) qf_46_words<SR>(T.g, vw, bs, qf_e4m3_scale(R, m, R.mult4), R.s_enc, rnd, o);
            else qf_fast_words<SR>(T.g, vw, bs, rnd, o);
        } else {   // rare: a block holding inf / NaN (rolled: the reference code once)
#pragma unroll 1
            for (int i = 0; i < 8; i++) {
                const uint32_t x = H ? qf_cvt2_ref(qf_pick(y, 2 * i), qf_pick(y, 2 * i + 1)) : qf_pick(w, i);
                const uint32_t ow = qf_slow_pair(T.p, qf_lo(x), qf_hi(x), bs, bs, SR, qf_pick(rnd, i));
#pragma unroll
                for (int j = 0; j < 8; j++) o[j] = j == i ? ow : o[j];
            }
        }
        if (k ? ok1 : ok0) {
            uint4* d = (uint4*)(dst + k * T.ld_fake);
            d[0] = make_uint4(o[0], o[1], o[2], o[3]);
            d[1] = make_uint4(o[4], o[5], o[6], o[7]);
        }
    }
}

template <int H, bool SR, bool F46>
__global__ void __launch_bounds__(QF_THREADS) qf_row2_kernel(const __grid_constant__ QFArgs A, int64_t tiles_c) {
    static_assert(H == 0 || H == 16, "a rotation group is a lane's 16 columns");
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const QFTarget& T = A.t[0];
    uint32_t smask[8];   // H: the sign flips of columns 2i, 2i + 1 of a group
    qf_row_signs(T, H, 0, smask);
    __shared__ float2 tab[128];
    const QFBlockRule R = qf_block_rule(T, *T.amax, tab);
    if (blockIdx.x == 0 && threadIdx.x == 0) *T.scale_dec = quant_tensor_scale_dec(&T.p, R.s_enc);
    __syncthreads();
    const uint32_t t = blockIdx.x * QF_WARPS + warp;
    const uint32_t tr = t / (uint32_t)tiles_c, tc = t - tr * (uint32_t)tiles_c;
    const int64_t r0 = (int64_t)tr * QF_TILE_R + (lane >> 4) * QF_ROWS;
    const int64_t c0 = (int64_t)tc * QF_ROW2_TILE_C + (lane & 15) * 16;
    if (r0 - (lane >> 4) * QF_ROWS >= A.rows) return;   // whole warps: past the last tile
    const bool cv = c0 < A.cols;
    const int64_t nr = A.rows - r0;
    const uint16_t* src = A.in + r0 * A.ld + c0;
    uint16_t* dst = T.fake + r0 * T.ld_fake + c0;
    uint64_t pm = 0, pstep = 0;
    if (SR) {
        pm = ((uint64_t)(r0 >> 1) * (uint64_t)(A.cols >> 1) + (uint64_t)(c0 >> 1)) * QF_RNG_MUL;
        pstep = (uint64_t)(A.cols >> 1) * QF_RNG_MUL;
    }
    QFRowPair a, b;
    uint32_t dm = 0;   // the view's amax over this lane's blocks (delayed amax rule)
    qf_row2_load(src, A.ld, cv && 0 < nr, cv && 1 < nr, a);
#pragma unroll 1
    for (int r = 0; r < QF_ROWS; r += 4) {   // rows r, r + 1 from a; r + 2, r + 3 from b
        qf_row2_load(src + (r + 2) * A.ld, A.ld, cv && r + 2 < nr, cv && r + 3 < nr, b);
        qf_row2_pair<H, SR, F46>(T, a, dst + r * T.ld_fake, cv && r < nr, cv && r + 1 < nr, R, pm, smask, dm);
        pm += pstep;
        if (r + 4 < QF_ROWS) qf_row2_load(src + (r + 4) * A.ld, A.ld, cv && r + 4 < nr, cv && r + 5 < nr, a);
        qf_row2_pair<H, SR, F46>(T, b, dst + (r + 2) * T.ld_fake, cv && r + 2 < nr, cv && r + 3 < nr, R, pm, smask, dm);
        pm += pstep;
    }
    if (T.amax_next) quant_amax_accumulate(T.amax_next, dm);
}

// ---------------------------------------------------------------------------------------------------
// Row-wise FP8 copies in one pass (mxfp4's fprop X and dgrad dY on the FP8 path): the amax pass and the
// apply pass of qf_apply_axis1<0, false, QF_OUT_FP8> in one kernel, the same bytes (qf_bf2_fold). A row's offset
// (fp8_fold.h) needs only that row's maximum, so a warp that holds whole rows in registers takes it there
// and folds them without reading the tensor again: 2 bytes read and 1 written per element instead of 2 + 2
// + 1. Lane l holds columns (32 j + l) * 8 + [0, 8) of each of its RPW rows for chunks j < NCH (coalesced
// 512-byte loads; a 1x32 block is 4 lanes of one chunk, a 1x16 block 2). The same read also takes what the
// amax pass takes for a column-wise FP8 1D target of the same source without a Hadamard (the other copy of
// the pass, or one taken ahead for the backward): its tensor amax and per-row maxima (the columns' maxima
// here), gathered per warp in shared memory and flushed once per CTA. Round to nearest, 1D blocks, rows of
// at most 20 chunks (5120 columns); the rest runs as two passes (qf_rowfold_ok). test_fp8_fold checks both
// paths against the CPU twin bit for bit (bytes, row scales, blocks below the window) and their amax and
// per-row maxima against the input's exact maxima.
#define QF_RF_CHUNK 256   // columns per chunk (32 lanes x 8)

// e8m0_exponent of a finite block amax (magnitude bits m) without its loop and branches: an FP32 subnormal
// (a BF16 subnormal block) normalized with a leading-zero count. test_fp8_fold checks it against
// e8m0_exponent for every BF16 magnitude, grid and rule.
__device__ __forceinline__ int qf_e8m0_exponent(uint32_t m, const GridTraits& g, bool ceil_rule) {
    const bool sub = m < 0x00800000u;
    const int p = 31 - __clz(m | 1u);   // a subnormal's leading one
    const int E = sub ? p - 149 : (int)(m >> 23) - 127;
    const uint32_t mant = (sub ? m << (23 - p) : m) & 0x7FFFFFu;
    const int e = E - g.emax + (ceil_rule && mant > g.max_mant);
    return m == 0 ? -127 : max(-127, min(127, e));
}
// A fast-path word (two BF16 values) -> its two E4M3 bytes, for a block of exponent e (binv = 2^-e) in a row of
// offset o: the code values' magnitudes |q| (qf_fast_mags) times so = qf_fold_scale(e, o) = 2^max(e - o, -30),
// with the input's signs, converted as qf_fold2 converts the fake word times 2^-o. The same bytes: |q| 2^e (the
// fake value, exact) times 2^-o is |q| 2^(e - o), exact in FP32 (|q| has at most 3 significant bits) where
// e - o >= -30, and where e - o < -30 both it and |q| 2^-30 lie below 2^-10 and convert to a zero of the
// input's sign; e - o <= 126 (fast blocks have e <= 126: amax < 2^127; o >= e - dmax unless o = 0 or the
// clamp at -126, where e < -126 + dmax <= -119), so so is a normal float. The fold kernels' stochastically
// rounded copies (round to nearest takes qf_bf2_fold below).
// SR: rnd holds the low value's 16 random bits in its low half, the high value's in its high half.
template <bool SR = false>
__device__ __forceinline__ uint32_t qf_fold_fast2(const QFGrid& g, uint32_t w, float binv, float so, uint32_t rnd = 0u) {
    float m0, m1;
    qf_fast_mags<SR>(g, qf_lo(w), qf_hi(w), binv, binv, rnd, m0, m1);
    const float f0 = f32_from_bits(f32_bits(QF_MUL(m0, so)) | ((w << 16) & 0x80000000u));
    const float f1 = f32_from_bits(f32_bits(QF_MUL(m1, so)) | (w & 0x80000000u));
    return (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(f0, f1), __NV_SATFINITE, __NV_E4M3);
}
__device__ __forceinline__ float qf_fold_scale(int e, int o) { return exp2_exact(max(e - o, -30)); }
// The fold of round-to-nearest copies in packed BF16 arithmetic (the fold kernels' RNE fast path): the steps
// of qf_rne_mag and qf_fold_fast2, two values an instruction (fma.rn.bf16x2, max/min.bf16x2), about half
// their instructions, the same bytes. For a word w (two BF16 values; each half with its own block exponent e
// and row offset o: si holds 2^-e, so 2^max(e - o, -30), as BF16 halves):
//   a = |w| 2^-e: exact (a power of two), except where it falls below BF16's normal range, 2^-126: the
//       blocks taken here (qf_bf2_block_ok: amax 0 or in [2^-118, 2^127)) have e >= -120, so such an a, and
//       a from a subnormal input, lies below 2^-6 and is 0 on the grid, flushed to zero or not;
//   M = max((a mul) & exponent bits, mlo) with mul, mlo qf_magic's constants times 2^-16: BF16 keeps 7
//       mantissa bits where FP32 keeps 23, so BF16's ulp at M is qf_magic's FP32 ulp at 2^16 M, the grid's
//       spacing at a (E2M1: M = 64 p for a in [p, 2p), p >= 1, else 64; INT4 128; E1M2 64), and a < M;
//   (a + M) - M: a on the grid, ties to even (the add rounds in [M, 2M), whose ulp is the spacing; the
//       subtraction is exact), then min(., maxval) saturates as qf_rne_mag;
//   times 2^max(e - o, -30): exact (a level has at most 3 significant bits; 2^-31 is normal), the E4M3 value
//       c 2^(e - o) of fp8_fold_value; where e - o < -30, c 2^(e - o) and c 2^-30 are both below 2^-10 and
//       convert to zero; above the window (e - o > dmax: only in a row holding inf / NaN, whose offset is 0)
//       the product may be inf in BF16, and the saturating conversion gives 448, as fp8_fold_value's
//       does; the input's sign is put back (qf_fast_pair's -0 for a negative value of code 0);
//   the halves widened to FP32 (exact) and converted as qf_fold2 converts them.
// test_fp8_fold checks qf_bf2_fold against the reference element and fp8_fold_value for every BF16 value, every
// block exponent taken here, offsets across the window and o = 0, on each grid (on the GPU, and a CPU model
// of these steps where there is none). The FP32 steps (qf_fold_fast2) stay for stochastic rounding, whose
// rounding up BF16 arithmetic cannot do.
typedef struct {
    uint32_t mul, mlo, maxval;   // QFGrid's, as BF16 pairs (mul and mlo times 2^-16)
} QFGrid2;
__device__ __forceinline__ uint32_t qf_bf2_splat(float f) { return (f32_bits(f) >> 16) * 0x10001u; }   // (exact BF16 f)
__device__ __forceinline__ QFGrid2 qf_grid2(const QFGrid& g) {
    return QFGrid2{qf_bf2_splat(g.mul * 0x1p-16f), qf_bf2_splat(g.mlo * 0x1p-16f), qf_bf2_splat(g.maxval)};
}
// (PTX for sm_80 and later, as the cp.async of the column kernel below)
__device__ __forceinline__ uint32_t qf_bf2_fma(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
__device__ __forceinline__ uint32_t qf_bf2_max(uint32_t a, uint32_t b) {
    uint32_t d;
    asm("max.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
__device__ __forceinline__ uint32_t qf_bf2_min(uint32_t a, uint32_t b) {
    uint32_t d;
    asm("min.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
// 2^k as a BF16 (k in [-126, 127]; the column kernel also makes k = -127 -> 0 for blocks it then leaves to the
// reference elements: no carry into a pair's other half either way)
__device__ __forceinline__ uint32_t qf_bf16_pow2(int k) { return (uint32_t)(k + 127) << 7; }
// qf_bf2_fold's scales (si, so) as BF16 pairs: block exponent e0 and row offset o0 in the low half, e1 and o1
// in the high half. (Sums, not ORs: with e0 = e1 and o0 = o1, the row kernel's case, the compiler makes each
// one multiply by 0x10001.)
__device__ __forceinline__ void qf_bf2_scales(int e0, int o0, int e1, int o1, uint32_t& si, uint32_t& so) {
    si = qf_bf16_pow2(-e0) + (qf_bf16_pow2(-e1) << 16);
    so = qf_bf16_pow2(max(e0 - o0, -30)) + (qf_bf16_pow2(max(e1 - o1, -30)) << 16);
}
// The blocks qf_bf2_fold takes (m: the block amax bits): all zero, or amax in [2^-118, 2^127); the rest
// (inf / NaN, the tiniest and the largest) take the reference elements.
__device__ __forceinline__ bool qf_bf2_block_ok(uint32_t m) { return m == 0u || m - 0x04800000u < 0x7A800000u; }
// w -> the E4M3 values c 2^(e - o) with w's signs, as a BF16 pair (the steps above)
__device__ __forceinline__ uint32_t qf_bf2_fold(const QFGrid2& g, uint32_t w, uint32_t si, uint32_t so) {
    const uint32_t nz = 0x80008000u;   // -0, -0: the addend of a product
    const uint32_t a = qf_bf2_fma(w & 0x7FFF7FFFu, si, nz);
    const uint32_t M = qf_bf2_max(qf_bf2_fma(a, g.mul, nz) & 0x7F807F80u, g.mlo);
    const uint32_t q = qf_bf2_fma(M, 0xBF80BF80u, qf_bf2_fma(a, 0x3F803F80u, M));   // (a + M) - M: a 1 + M, then M (-1) + that
    return qf_bf2_fma(qf_bf2_min(q, g.maxval), so, nz) | (w & 0x80008000u);
}
// Two BF16 values (lo, hi: FP32 bits of each, the low 16 bits zero) -> their two E4M3 bytes
__device__ __forceinline__ uint32_t qf_e4m3x2(uint32_t lo, uint32_t hi) {
    return (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(f32_from_bits(lo), f32_from_bits(hi)), __NV_SATFINITE, __NV_E4M3);
}
// A row-wise word of one block -> its two E4M3 bytes
__device__ __forceinline__ uint32_t qf_bf2_fold_bytes(const QFGrid2& g, uint32_t w, uint32_t si, uint32_t so) {
    const uint32_t f = qf_bf2_fold(g, w, si, so);
    return qf_e4m3x2(f << 16, f & 0xFFFF0000u);
}

// A chunk of 8 values of a block qf_bf2_fold does not take (m: the block amax bits): the reference elements,
// folded with 2^-o (inv); x, y: the 8 E4M3 bytes, z: the block's scale bits. Not inlined, so that the kernel's
// unrolled chunks share one copy of the reference code.
__device__ __noinline__ uint4 qf_rf_slow(const QFTarget& T, uint4 v, uint32_t m, float inv) {
    const QuantBlockScale bs = quant_block_scale(&T.p, f32_from_bits(m), 1.0f);
    const uint32_t u0 = qf_slow_pair(T.p, qf_lo(v.x), qf_hi(v.x), bs, bs, 0, 0u), u1 = qf_slow_pair(T.p, qf_lo(v.y), qf_hi(v.y), bs, bs, 0, 0u);
    const uint32_t u2 = qf_slow_pair(T.p, qf_lo(v.z), qf_hi(v.z), bs, bs, 0, 0u), u3 = qf_slow_pair(T.p, qf_lo(v.w), qf_hi(v.w), bs, bs, 0, 0u);
    return make_uint4(qf_fold2(u0, inv) | (qf_fold2(u1, inv) << 16), qf_fold2(u2, inv) | (qf_fold2(u3, inv) << 16), bs.bits, 0u);
}

template <int NCH, int RPW>
__global__ void __launch_bounds__(QF_THREADS, NCH * RPW <= 12 ? 5 : NCH * RPW <= 16 ? 4 : 3)
qf_rowfold_kernel(const __grid_constant__ QFArgs A, int col_max) {
    extern __shared__ uint4 qf_rf_cols[];   // [warp][cols / 8]: packed BF16 magnitude maxima of 8 columns
    __shared__ uint32_t red[QF_WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const QFTarget& T = A.t[0];
    const QFGrid2 g2 = qf_grid2(T.g);
    if (blockIdx.x == 0 && threadIdx.x == 0) *T.scale_dec = 1.0f;   // E8M0 scales: no tensor scale
    const int64_t nc8 = A.cols / 8;
    const int nch = (int)ceil_div(nc8, (int64_t)32);   // chunks in a row (<= NCH)
    uint4* cm = qf_rf_cols + warp * nc8;
    if (col_max)
        for (int64_t i = lane; i < nc8; i += 32) cm[i] = make_uint4(0u, 0u, 0u, 0u);
    const bool leader = (lane & (T.bl == 32 ? 3 : 1)) == 0;   // a block's first lane counts it
    uint32_t tmax = 0;
    unsigned below = 0;
    const int64_t groups = ceil_div(A.rows, (int64_t)RPW), stride = (int64_t)gridDim.x * QF_WARPS;
    int64_t g = (int64_t)blockIdx.x * QF_WARPS + warp;
    // chunk (k, j) of group g: row g * RPW + k, columns (32 j + lane) * 8 + [0, 8), at src[k] + 32 j (src[k]:
    // the lane's first piece of the row, null past the end); zeros past the ends
    auto row_src = [&](int64_t gg, int k) {
        const int64_t r = gg * RPW + k;
        return gg < groups && r < A.rows ? (const uint4*)(A.in + r * A.ld) + lane : (const uint4*)nullptr;
    };
    auto load = [&](const uint4* src, int j) {
        uint4 u = make_uint4(0u, 0u, 0u, 0u);
        if (src && j * 32 + lane < nc8) u = __ldcs(src + j * 32);
        return u;
    };
    uint4 v[RPW][NCH];
#pragma unroll
    for (int k = 0; k < RPW; k++)
#pragma unroll
        for (int j = 0; j < NCH; j++) v[k][j] = load(row_src(g, k), j);
    // software-pipelined: once chunk (k, j) is folded, its registers load that chunk of the warp's next group
    for (; g < groups; g += stride) {
        const int64_t r0 = g * RPW;
        if (col_max) {
#pragma unroll
            for (int j = 0; j < NCH; j++) {
                const int64_t c8 = (int64_t)j * 32 + lane;
                if (c8 >= nc8) continue;
                uint4 m = cm[c8];
#pragma unroll
                for (int k = 0; k < RPW; k++) {
                    m.x = qf_vmax(m.x, v[k][j].x & 0x7FFF7FFFu); m.y = qf_vmax(m.y, v[k][j].y & 0x7FFF7FFFu);
                    m.z = qf_vmax(m.z, v[k][j].z & 0x7FFF7FFFu); m.w = qf_vmax(m.w, v[k][j].w & 0x7FFF7FFFu);
                }
                cm[c8] = m;
            }
        }
#pragma unroll
        for (int k = 0; k < RPW; k++) {
            uint32_t bm[NCH], rm = 0;
#pragma unroll
            for (int j = 0; j < NCH; j++) {
                if (j >= nch) break;   // (uniform: the chunks past the row's end, 768 or 2304 columns, do nothing)
                const uint4 w = v[k][j];
                uint32_t m = qf_hmax(qf_vmax(qf_vmax(w.x & 0x7FFF7FFFu, w.y & 0x7FFF7FFFu),
                                             qf_vmax(w.z & 0x7FFF7FFFu, w.w & 0x7FFF7FFFu)));
                m = qf_shfl_max(m, 1);
                if (T.bl == 32) m = qf_shfl_max(m, 2);
                bm[j] = m;
                rm = qf_max(rm, m);
            }
#pragma unroll
            for (int x = 2; x < 32; x <<= 1) rm = qf_shfl_max(rm, x);   // (xor 1 is in every block maximum)
            tmax = qf_max(tmax, rm);
            const int64_t row = r0 + k;
            const bool rv = row < A.rows;   // warp-uniform
            const uint4* next = row_src(g + stride, k);
            uint8_t* dst = T.fp8 + (rv ? row : 0) * T.ld_fp8 + lane * 8;   // the lane's first piece of the row's copy
            const int off = fp8_fold_offset(&T.p, T.dmax, rm);
            if (lane == 0 && rv) {
                T.fold_max[row] = rm;
                T.fold_scale[row] = fp8_fold_scale(off);
            }
#pragma unroll
            for (int j = 0; j < NCH; j++) {
                if (j >= nch) break;
                const int c8 = j * 32 + lane;
                uint32_t b01, b23;   // the chunk's 8 E4M3 bytes
                uint32_t bits;       // its block's scale bits (an inf / NaN block's 0xFF: never counted)
                if (qf_bf2_block_ok(bm[j])) {
                    const int e = qf_e8m0_exponent(bm[j], T.p.grid, T.p.scale == QSCALE_E8M0_CEIL);
                    uint32_t si, so;
                    qf_bf2_scales(e, off, e, off, si, so);
                    b01 = qf_bf2_fold_bytes(g2, v[k][j].x, si, so) | (qf_bf2_fold_bytes(g2, v[k][j].y, si, so) << 16);
                    b23 = qf_bf2_fold_bytes(g2, v[k][j].z, si, so) | (qf_bf2_fold_bytes(g2, v[k][j].w, si, so) << 16);
                    bits = (uint32_t)(e + 127);
                } else {   // rare: the reference elements, folded
                    const uint4 u = qf_rf_slow(T, v[k][j], bm[j], exp2_exact(-off));
                    b01 = u.x; b23 = u.y; bits = u.z;
                }
                v[k][j] = load(next, j);
                if (rv && c8 < nc8) {
                    *(uint2*)(dst + j * 256) = make_uint2(b01, b23);
                    below += leader && fp8_fold_counted((uint8_t)bits, off, T.dmin);
                }
            }
        }
    }
    qf_count_below(T, below);
    // the tensor amax: of the row-wise target and of a column-wise one (the same values, unrotated)
    if (lane == 0) red[warp] = tmax;
    __syncthreads();
    if (threadIdx.x == 0) {
        uint32_t m = 0;
        for (int i = 0; i < QF_WARPS; i++) m = qf_max(m, red[i]);
        if (m) {
            atomicMax((unsigned int*)T.amax, m);
            if (A.t[1].amax) atomicMax((unsigned int*)A.t[1].amax, m);
        }
    }
    if (!col_max) return;   // (uniform over the grid)
    // every CTA flushes every column: each starts at its own place in them and skips the atomic where the
    // maximum is already as large, so that the CTAs, which end together, do not queue on the same addresses
    const QFTarget& C = A.t[1];
    const int64_t start = (int64_t)blockIdx.x * 37 % nc8;
    for (int64_t ii = threadIdx.x; ii < nc8; ii += QF_THREADS) {
        const int64_t i = ii + start < nc8 ? ii + start : ii + start - nc8;
        uint4 m = qf_rf_cols[i];
        for (int wi = 1; wi < QF_WARPS; wi++) {
            const uint4 u = qf_rf_cols[wi * nc8 + i];
            m.x = qf_vmax(m.x, u.x); m.y = qf_vmax(m.y, u.y); m.z = qf_vmax(m.z, u.z); m.w = qf_vmax(m.w, u.w);
        }
        const uint32_t p[4] = {m.x, m.y, m.z, m.w};
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int64_t c = i * 8 + 2 * q;
            uint32_t* lo = C.fold_max + (c >> C.bw_log2);
            uint32_t* hi = C.fold_max + ((c + 1) >> C.bw_log2);
            if ((p[q] << 16) > *(volatile uint32_t*)lo) atomicMax(lo, p[q] << 16);
            if ((p[q] & 0xFFFF0000u) > *(volatile uint32_t*)hi) atomicMax(hi, p[q] & 0xFFFF0000u);
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// Column-wise FP8 copies (mxfp4's wgrad copies of X and dY, the column-wise copy of W): the apply pass of
// qf_apply_axis0<0, false, QF_OUT_FP8> laid out for whole blocks per thread, the same bytes. A CTA takes
// 256 columns and walks row blocks gridDim.y apart; it copies each BL x 256 tile into shared memory with
// cp.async, QF_CF_STAGES tiles in flight, so that the bytes in flight are not held in registers. A lane owns
// two adjacent columns (one 4-byte word per row, a conflict-free shared load) of a tile: a whole 1 x BL block
// of each, so the block maxima need no shuffle; round to nearest, it folds rows r and r + 1 of both columns
// (qf_bf2_fold: a word holds two columns, each half with its own scales) and then picks each column's two
// bytes; stochastically, rows r, r + 1 of one column as one word (a byte permute) in FP32. Each column's 32
// E4M3 bytes (BL = 32) go out as two 16-byte stores, and lanes 2i, 2i + 1 trade halves first so that each
// store instruction writes 16 whole 32-byte sectors (the even lane a column's first 16 bytes, the odd lane its
// last 16). Measured (results/README, "The column-wise FP8 kernel"): with each lane
// storing its own column's halves the pass ran 1.27x slower; loading each warp's next block into registers
// instead of shared memory (one block per warp in flight, 80 registers with spills) left DRAM waits at the top
// of every block (52% of the stall samples) and took 265 us at 65536 x 3072 against 208 with 4 stages. Needs
// the GEMM rows' maxima (fold_max, from the amax pass or taken ahead by the row kernel above). Round to
// nearest or stochastically (SR: sr_bits16's draws, as the patch kernel's), 1D blocks, no Hadamard
// (qf_colfold_ok), or 32 x 32 blocks of either axis (the TWO_D form, qf_fold2d). A block's path (fast, or the
// rare reference elements) is chosen once for all its rows, outside the unrolled row loop (it was a branch per
// row pair); with qf_fold_fast2's single scaling multiply (it was two) that took the 1D SR copy from 426 to 359
// us at 65536 x 3072, the two not timed apart (results/fold_2d). test_fp8_fold checks it
// against the CPU twin bit for bit, and which calls take it.
#define QF_CF_COLS 64   // columns per warp (32 lanes x 2)

// Rows r, r + 1 (words a, b) of a block pair the fast path does not take (mlo, mhi: the block amax bits of columns c and
// c + 1): the reference elements, folded; column c's two bytes in the low half. SR: ra, rb are rows r and
// r + 1's 32 random bits (column c's in the low half). Not inlined (and taking no array, so that the
// kernel's registers stay registers).
__device__ __noinline__ uint32_t qf_cf_slow(const QFTarget& T, uint32_t a, uint32_t b, uint32_t mlo, uint32_t mhi,
                                            float invlo, float invhi, uint32_t ra, uint32_t rb) {
    const QuantBlockScale blo = quant_block_scale(&T.p, f32_from_bits(mlo), 1.0f);
    const QuantBlockScale bhi = quant_block_scale(&T.p, f32_from_bits(mhi), 1.0f);
    const uint32_t fa = qf_slow_pair(T.p, qf_lo(a), qf_hi(a), blo, bhi, T.sr, ra);
    const uint32_t fb = qf_slow_pair(T.p, qf_lo(b), qf_hi(b), blo, bhi, T.sr, rb);
    return qf_fold2(__byte_perm(fa, fb, 0x5410), invlo) | (qf_fold2(__byte_perm(fa, fb, 0x7632), invhi) << 16);
}

// One row block of columns c, c + 1 (v: its BL words, rows r in v[r]; mlo, mhi: the block amax bits of
// each column's block, for 2D blocks both the 32 x 32 block's) folded and stored (rb: the block's index down
// the rows); returns the blocks below the window it counted (a 2D block once, by the lane of its first
// column, as fp8_fold_cpu counts it). SR: the block's rows 2k, 2k + 1 take the draw at pm + k pstep
// (sr_bits16's 2 x 2 square of these rows and columns c, c + 1).
template <int BL, bool SR, bool TWO_D>
__device__ __forceinline__ unsigned qf_cf_block(const QFTarget& T, const uint32_t (&v)[BL], int lane, int64_t c, bool cv,
                                                int64_t rb, uint32_t mlo, uint32_t mhi, int olo_off, int ohi_off,
                                                float invlo, float invhi, uint64_t pm, uint64_t pstep) {
    uint32_t olo[BL / 4], ohi[BL / 4];   // the E4M3 bytes of columns c and c + 1, 4 rows a word
    const bool fast = qf_bf2_block_ok(mlo) && qf_bf2_block_ok(mhi);
    const bool ceil_rule = T.p.scale == QSCALE_E8M0_CEIL;
    const int elo = qf_e8m0_exponent(mlo, T.p.grid, ceil_rule), ehi = qf_e8m0_exponent(mhi, T.p.grid, ceil_rule);   // (fast blocks)
    const QuantBlockScale blo = quant_block_scale_e8m0(elo), bhi = quant_block_scale_e8m0(ehi);   // (SR)
    const float solo = qf_fold_scale(elo, olo_off), sohi = qf_fold_scale(ehi, ohi_off);           // (SR)
    uint32_t si, so;   // RNE: qf_bf2_fold's scales, column c's in the low half
    qf_bf2_scales(elo, olo_off, ehi, ohi_off, si, so);
    const QFGrid2 g2 = qf_grid2(T.g);
    // the rows, with the block's path (fast or not) chosen once for all of them (F: compile time)
    auto fold_rows = [&](auto fast_path) {
        constexpr bool F = decltype(fast_path)::value;
#pragma unroll
        for (int r = 0; r < BL; r += 2) {
            uint32_t lo, hi, ra = 0u, rb2 = 0u;   // SR: rows r, r + 1's bits (column c's in the low half)
            if (SR) qf_rng_rows(T.key, pm + (uint64_t)(r >> 1) * pstep, ra, rb2);
            if constexpr (F && SR) {
                lo = qf_fold_fast2<SR>(T.g, __byte_perm(v[r], v[r + 1], 0x5410), blo.inv, solo, __byte_perm(ra, rb2, 0x5410));
                hi = qf_fold_fast2<SR>(T.g, __byte_perm(v[r], v[r + 1], 0x7632), bhi.inv, sohi, __byte_perm(ra, rb2, 0x7632));
            } else if constexpr (F) {   // rows r and r + 1 of both columns, then column c's bytes and column c + 1's
                const uint32_t fa = qf_bf2_fold(g2, v[r], si, so), fb = qf_bf2_fold(g2, v[r + 1], si, so);
                lo = qf_e4m3x2(fa << 16, fb << 16);
                hi = qf_e4m3x2(fa & 0xFFFF0000u, fb & 0xFFFF0000u);
            } else {   // rare
                const uint32_t x = qf_cf_slow(T, v[r], v[r + 1], mlo, mhi, invlo, invhi, ra, rb2);
                lo = x & 0xFFFFu;
                hi = x >> 16;
            }
            if ((r >> 1) & 1) { olo[r >> 2] |= lo << 16; ohi[r >> 2] |= hi << 16; }
            else { olo[r >> 2] = lo; ohi[r >> 2] = hi; }
        }
    };
    if (fast) fold_rows(std::true_type{});
    else fold_rows(std::false_type{});
    // the other blocks' scale bits as the reference's (E8M0 NaN: never counted)
    const uint8_t blo_bits = fast ? blo.bits : quant_block_scale(&T.p, f32_from_bits(mlo), 1.0f).bits;
    const uint8_t bhi_bits = fast ? bhi.bits : quant_block_scale(&T.p, f32_from_bits(mhi), 1.0f).bits;
    if constexpr (BL == 32) {
        // lanes 2i, 2i + 1 (columns ce .. ce + 3) trade halves: the even lane stores the first 16 bytes of
        // each of the four columns, the odd lane the last 16
        const bool odd = lane & 1;
        uint32_t rl[4], rh[4];
#pragma unroll
        for (int q4 = 0; q4 < 4; q4++) {
            rl[q4] = __shfl_xor_sync(0xFFFFFFFFu, odd ? olo[q4] : olo[4 + q4], 1);
            rh[q4] = __shfl_xor_sync(0xFFFFFFFFu, odd ? ohi[q4] : ohi[4 + q4], 1);
        }
        if (cv) {
            uint8_t* d = T.fp8 + (c - (odd ? 2 : 0)) * T.ld_fp8 + rb * BL + (odd ? 16 : 0);
            const uint4 a0 = odd ? make_uint4(rl[0], rl[1], rl[2], rl[3]) : make_uint4(olo[0], olo[1], olo[2], olo[3]);
            const uint4 a1 = odd ? make_uint4(rh[0], rh[1], rh[2], rh[3]) : make_uint4(ohi[0], ohi[1], ohi[2], ohi[3]);
            const uint4 a2 = odd ? make_uint4(olo[4], olo[5], olo[6], olo[7]) : make_uint4(rl[0], rl[1], rl[2], rl[3]);
            const uint4 a3 = odd ? make_uint4(ohi[4], ohi[5], ohi[6], ohi[7]) : make_uint4(rh[0], rh[1], rh[2], rh[3]);
            *(uint4*)d = a0;
            *(uint4*)(d + T.ld_fp8) = a1;
            *(uint4*)(d + 2 * T.ld_fp8) = a2;
            *(uint4*)(d + 3 * T.ld_fp8) = a3;
        }
    } else if (cv) {   // BL = 16: a column block is half a sector (no recipe folds 1x16 column copies)
        uint8_t* d = T.fp8 + c * T.ld_fp8 + rb * BL;
        *(uint4*)d = make_uint4(olo[0], olo[1], olo[2], olo[3]);
        *(uint4*)(d + T.ld_fp8) = make_uint4(ohi[0], ohi[1], ohi[2], ohi[3]);
    }
    if (TWO_D) return cv && (lane & 15) == 0 ? fp8_fold_counted(blo_bits, olo_off, T.dmin) : 0u;
    return cv ? fp8_fold_counted(blo_bits, olo_off, T.dmin) + fp8_fold_counted(bhi_bits, ohi_off, T.dmin) : 0u;
}

// A word of a 2D block the fast paths do not take (m: the block amax bits): the reference pair, folded with
// 2^-o (inv); its two E4M3 bytes (the low half's first). Not inlined, as qf_cf_slow.
__device__ __noinline__ uint32_t qf_r2_slow(const QFTarget& T, uint32_t w, uint32_t m, float inv, uint32_t rnd) {
    const QuantBlockScale bs = quant_block_scale(&T.p, f32_from_bits(m), 1.0f);
    return qf_fold2(qf_slow_pair(T.p, qf_lo(w), qf_hi(w), bs, bs, T.sr, rnd), inv);
}

// 2D blocks (32 x 32): the row-wise copy (T) of one tile's columns c, c + 1 (v: rows r in v[r]; m: the
// block's amax bits; off: the offset of the band of 32 rows rb, which all of the band's rows share). Each row's
// two bytes go out as one 2-byte store (a warp's store writes 64 whole bytes of the row). Returns the blocks
// below the window counted (once per block, by the lane of its first column). SR: the row-wise copy's own key
// on the same draws as the column-wise copy's (sr_bits16 of the view's position, either axis).
template <bool SR>
__device__ __forceinline__ unsigned qf_r2_block(const QFTarget& T, const uint32_t (&v)[32], int lane, int64_t c, bool cv,
                                                int64_t rb, uint32_t m, int off, uint64_t pm, uint64_t pstep) {
    const bool fast = qf_bf2_block_ok(m);
    const int e = qf_e8m0_exponent(m, T.p.grid, T.p.scale == QSCALE_E8M0_CEIL);   // (fast blocks)
    const QuantBlockScale bs = quant_block_scale_e8m0(e);                            // (SR)
    const float inv = exp2_exact(-off), sf = qf_fold_scale(e, off);
    uint32_t si, so;
    qf_bf2_scales(e, off, e, off, si, so);
    const QFGrid2 g2 = qf_grid2(T.g);
    uint16_t* d = (uint16_t*)(T.fp8 + rb * 32 * T.ld_fp8 + c);
    const int64_t ld2 = T.ld_fp8 / 2;   // (cols % 32 == 0)
    auto fold_rows = [&](auto fast_path) {   // as qf_cf_block's
        constexpr bool F = decltype(fast_path)::value;
#pragma unroll
        for (int r = 0; r < 32; r += 2) {
            uint32_t ra = 0u, rb2 = 0u;   // SR: rows r, r + 1's bits (column c's in the low half)
            if (SR) qf_rng_rows(T.key, pm + (uint64_t)(r >> 1) * pstep, ra, rb2);
            uint32_t x0, x1;   // rows r, r + 1: columns c, c + 1's bytes
            if constexpr (F && SR) {
                x0 = qf_fold_fast2<SR>(T.g, v[r], bs.inv, sf, ra);
                x1 = qf_fold_fast2<SR>(T.g, v[r + 1], bs.inv, sf, rb2);
            } else if constexpr (F) {
                x0 = qf_bf2_fold_bytes(g2, v[r], si, so);
                x1 = qf_bf2_fold_bytes(g2, v[r + 1], si, so);
            } else {   // rare
                x0 = qf_r2_slow(T, v[r], m, inv, ra);
                x1 = qf_r2_slow(T, v[r + 1], m, inv, rb2);
            }
            if (cv) {
                d[r * ld2] = (uint16_t)x0;
                d[(r + 1) * ld2] = (uint16_t)x1;
            }
        }
    };
    if (fast) fold_rows(std::true_type{});
    else fold_rows(std::false_type{});
    const uint8_t bits = fast ? bs.bits : quant_block_scale(&T.p, f32_from_bits(m), 1.0f).bits;   // (NaN: never counted)
    return cv && (lane & 15) == 0 ? fp8_fold_counted(bits, off, T.dmin) : 0u;
}

// tiles in flight per CTA (3 CTAs per SM: 64 KB of shared memory each at BL = 32); a power of two (qf_cf_pipeline)
#define QF_CF_STAGES 4
__device__ __forceinline__ void qf_cp_async16(uint32_t dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void qf_cp_async_commit(void) { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void qf_cp_async_wait(void) { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }
// The shared-memory column kernels' copies of their tiles (TR rows x 256 columns, QF_CF_ROW bytes a row) into
// the stages, tile k of the CTA being rows (blockIdx.y + k gridDim.y) TR + [0, TR): a thread copies the 16-byte
// pieces of rows threadIdx.x / 32 + 4 j (j < TR / 4), columns c0 + 8 (threadIdx.x % 32) + [0, 8); columns past
// the edge are zero-filled (a copy of 0 bytes). The source address moves on by one tile per issue (the tiles
// are issued in order), so that no issue computes a 64-bit row offset.
#define QF_CF_ROW (QF_WARPS * QF_CF_COLS * 2)
typedef struct {
    const uint16_t* src;   // the thread's first piece of the next tile issued
    int64_t ld4, step;     // elements from a piece to the next (4 rows), and to the next tile's first
    uint32_t dst;          // shared address of the thread's first piece in stage 0
    int bytes;             // 16, or 0 past the edge
} QFTileCopy;
template <int TR>
__device__ __forceinline__ QFTileCopy qf_cf_copy(const QFArgs& A, int64_t c0, uint32_t sbase) {
    QFTileCopy q;
    const int row = threadIdx.x >> 5, piece = threadIdx.x & 31;
    const int64_t col = c0 + piece * 8;
    const bool ok = col < A.cols;
    q.src = ok ? A.in + ((int64_t)blockIdx.y * TR + row) * A.ld + col : A.in;
    q.ld4 = ok ? 4 * A.ld : 0;
    q.step = ok ? (int64_t)gridDim.y * TR * A.ld : 0;
    q.dst = sbase + (uint32_t)(row * QF_CF_ROW + piece * 16);
    q.bytes = ok ? 16 : 0;
    return q;
}
template <int TR>
__device__ __forceinline__ void qf_cf_issue(QFTileCopy& q, uint32_t stage_bytes) {
#pragma unroll
    for (int j = 0; j < TR / 4; j++) qf_cp_async16(q.dst + stage_bytes + j * 4 * QF_CF_ROW, q.src + j * q.ld4, q.bytes);
    q.src += q.step;
}
// The CTA's tiles (256 columns from c0; row blocks blockIdx.y + k gridDim.y of TR rows, k < nt) through STAGES
// shared-memory stages, all but one loading while one is read: tile k in stage k % STAGES, then per_tile(k, t)
// with t this lane's word of the tile's row 0 (columns c0 + 64 warp + 2 lane, + 1; row r at t[r QF_CF_ROW / 4]).
template <int TR, int STAGES, class F>
__device__ __forceinline__ void qf_cf_pipeline(const QFArgs& A, int64_t c0, const uint4* tiles, F&& per_tile) {
    static_assert(STAGES >= 2 && (STAGES & (STAGES - 1)) == 0, "stages: a power of two");
    constexpr int TILE = TR * QF_CF_ROW;
    const int64_t nrb = A.rows / TR;
    const int64_t nt = (int64_t)blockIdx.y < nrb ? (nrb - 1 - blockIdx.y) / gridDim.y + 1 : 0;
    QFTileCopy cp = qf_cf_copy<TR>(A, c0, (uint32_t)__cvta_generic_to_shared(tiles));
    auto issue = [&](int64_t k) {
        if (k < nt) qf_cf_issue<TR>(cp, (uint32_t)(k & (STAGES - 1)) * TILE);
        qf_cp_async_commit();   // (an empty group past the end, so that the waits below count alike)
    };
#pragma unroll
    for (int k = 0; k < STAGES - 1; k++) issue(k);
    for (int64_t k = 0; k < nt; k++) {   // uniform over the CTA
        qf_cp_async_wait<STAGES - 2>();   // this thread's pieces of tile k are in
        __syncthreads();                  // everyone's; and tile k - 1, whose stage is refilled next, is done
        issue(k + STAGES - 1);
        per_tile(k, (const uint32_t*)((const char*)tiles + (k & (STAGES - 1)) * TILE) + threadIdx.x);
    }
}

// TWO_D (BL = 32): 32 x 32 blocks, whose amax a lane takes over its 16-lane half of the warp (32 columns), and
// the row-wise copy A.t[0] too where it has one (A.t[0].fp8), from the same tile: each copy of mxfp4-2d's dY
// pair from one read. Both copies' block amax is the same; each takes its own exponent (its grid and rule),
// offsets and SR key. A 2D copy is column-wise where A.t[1].fp8 is set.
template <int BL, bool SR, bool TWO_D>
__global__ void __launch_bounds__(QF_THREADS, 3) qf_colfold_kernel(const __grid_constant__ QFArgs A) {
    extern __shared__ uint4 qf_cf_tiles[];   // [QF_CF_STAGES][BL rows][256 columns] BF16
    static_assert(!TWO_D || BL == 32, "2D blocks: 32 x 32");
    const QFTarget& T = A.t[1];
    const QFTarget& R = A.t[0];   // TWO_D: the row-wise copy
    const bool do_col = !TWO_D || T.fp8, do_row = TWO_D && R.fp8;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) {   // E8M0: no tensor scale
        if (do_col) *T.scale_dec = 1.0f;
        if (do_row) *R.scale_dec = 1.0f;
    }
    const int64_t c0 = (int64_t)blockIdx.x * QF_WARPS * QF_CF_COLS;   // the CTA's first column
    const int64_t c = c0 + warp * QF_CF_COLS + 2 * lane;               // this lane's columns c, c + 1
    const bool cv = c < A.cols;   // cols % 8 == 0: both columns or neither, and both lanes of a pair (2D: cols % 32 == 0)
    const int olo_off = do_col && cv ? qf_fold_offset(T, c) : 0, ohi_off = do_col && cv ? qf_fold_offset(T, c + 1) : 0;
    const float invlo = exp2_exact(-olo_off), invhi = exp2_exact(-ohi_off);
    if (do_col && cv && blockIdx.y == 0) {
        T.fold_scale[c] = fp8_fold_scale(olo_off);
        T.fold_scale[c + 1] = fp8_fold_scale(ohi_off);
    }
    const uint64_t pstep = SR ? (uint64_t)(A.cols >> 1) * QF_RNG_MUL : 0;
    unsigned below = 0, below_r = 0;
    qf_cf_pipeline<BL, QF_CF_STAGES>(A, c0, qf_cf_tiles, [&](int64_t k, const uint32_t* t) {
        uint32_t v[BL];
#pragma unroll
        for (int r = 0; r < BL; r++) v[r] = t[r * (QF_CF_ROW / 4)];
        const int64_t rb = (int64_t)blockIdx.y + k * gridDim.y;
        // SR: square (r / 2, c / 2) is draw (r / 2) (cols / 2) + c / 2 (as the patch kernel's)
        const uint64_t pm = SR ? ((uint64_t)rb * (BL / 2) * (uint64_t)(A.cols >> 1) + (uint64_t)(c >> 1)) * QF_RNG_MUL : 0;
        uint32_t m2 = 0;
#pragma unroll
        for (int r = 0; r < BL; r++) m2 = qf_vmax(m2, v[r] & 0x7FFF7FFFu);
        uint32_t mlo = m2 << 16, mhi = m2 & 0xFFFF0000u;
        if (TWO_D) {   // the 32 x 32 block's: over the 16 lanes of its 32 columns
            uint32_t m = qf_max(mlo, mhi);
#pragma unroll
            for (int x = 1; x < 16; x <<= 1) m = qf_shfl_max(m, x);
            mlo = mhi = m;
        }
        if (do_col) below += qf_cf_block<BL, SR, TWO_D>(T, v, lane, c, cv, rb, mlo, mhi, olo_off, ohi_off, invlo, invhi, pm, pstep);
        if constexpr (TWO_D) {
            if (do_row) {
                const int roff = qf_fold_offset(R, rb * BL);   // the band's (its first row's) offset
                if (blockIdx.x == 0 && warp == 0) R.fold_scale[rb * BL + lane] = fp8_fold_scale(roff);
                below_r += qf_r2_block<SR>(R, v, lane, c, cv, rb, mlo, roff, pm, pstep);
            }
        }
    });
    if (do_col) qf_count_below(T, below);
    if (do_row) qf_count_below(R, below_r);
}

// ---------------------------------------------------------------------------------------------------
// Column-wise fake copies in 1x16 blocks, after a 16-point Hadamard down the columns or with none (nvfp4's
// wgrad copies of X and dY, nvfp4-naive's and ufp4's): the apply pass of qf_apply_axis0<H, SR, QF_OUT_FAKE>
// laid out as qf_colfold_kernel, the same bytes. A CTA takes 256 columns and walks 16-row tiles gridDim.y
// apart through qf_ck_stages<H>() shared-memory stages (cp.async, all but one loading); a lane owns two adjacent
// columns of a tile (one word per row), so a column's rotation group and its block are the lane's 16 values:
// no shuffle, and no rotation of a register patch (~2 moves per element in the patch kernel). The eighth
// session's kernel of this layout loaded its rows into registers and lost to the patch kernel for want of
// bytes in flight (results/README, "A column-wise kernel laid out like qf_row2_kernel"); the stages here are
// its cure, as they were the FP8 column kernel's. Each row's word goes out as one 4-byte store (a warp's
// store: 128 whole bytes of the row). test_quant_fast and test_quant_gpu_cpu check it bit for bit (the
// trainer's configurations go through it: qf_colfake_ok).
// 16-row tile stages per CTA (8 KB each), all but one loading while one is read. With the Hadamard's arithmetic
// fewer suffice: on the H200 (65536 x 3072 and x 768), 4 stages ran the H16 copies 3-7% faster than 8 and the
// copies without a Hadamard up to 7% slower (results/colfake/colfake_tunables.txt).
#ifndef QF_CK_STAGES
#define QF_CK_STAGES 8       // no Hadamard
#endif
#ifndef QF_CK_STAGES_H16
#define QF_CK_STAGES_H16 4   // H = 16
#endif
#ifndef QF_CK_MIN_CTAS
#define QF_CK_MIN_CTAS 3   // CTAs per SM the registers are budgeted for (shared memory: 3 at 8 stages)
#endif
template <int H>
__host__ __device__ constexpr int qf_ck_stages() { return H ? QF_CK_STAGES_H16 : QF_CK_STAGES; }

// A pair of rows' words (x: the BF16 pair, rotated and rounded where there is a rotation) of a block pair the
// fast path does not take: the reference elements. Not inlined (the rare path, kept out of the unrolled loop).
__device__ __noinline__ uint32_t qf_ck_slow(const QFTarget& T, uint32_t x, QuantBlockScale blo, QuantBlockScale bhi,
                                            uint32_t rnd) {
    return qf_slow_pair(T.p, qf_lo(x), qf_hi(x), blo, bhi, T.sr, rnd);
}

// HR >= 0 (a dual pass, qf_dual_ok): the row-wise fake copy A.t[0] too, from the same tiles, so that the source is
// read once for both copies (pairs that round to nearest: nvfp4-naive's dY pair, a custom recipe's): 1D blocks, a
// 16-point Hadamard (HR = 16) or none. After a tile's column-wise words, each thread makes the row-wise
// blocks of one row pair (rows 2p, 2p + 1 of the tile, p = threadIdx.x / 16) in one 16-column block
// (threadIdx.x % 16 of the CTA's 16) from the stage, with qf_row2_kernel's arithmetic and stores (qf_row2_pair,
// whose lane layout it keeps: a 1x32 block's halves are lanes 2j and 2j + 1). HR = -1 compiles to the column-wise
// kernel alone.
template <int H, bool SR, bool F46, int HR = -1>
__global__ void __launch_bounds__(QF_THREADS, QF_CK_MIN_CTAS) qf_colfake_kernel(const __grid_constant__ QFArgs A) {
    static_assert(H == 0 || H == 16, "a rotation group is a block: 16 rows");
    static_assert(HR == -1 || ((HR == 0 || HR == 16) && !F46 && !SR), "the row-wise copy: H16 or none, RTN, not 4o6");
    extern __shared__ uint4 qf_ck_tiles[];   // [qf_ck_stages<H>()][16 rows][256 columns] BF16
    const QFTarget& T = A.t[1];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __shared__ float2 tab[128];   // (qf_cf_pipeline's first __syncthreads comes before its first use)
    const QFBlockRule R = qf_block_rule(T, *T.amax, tab);
    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *T.scale_dec = quant_tensor_scale_dec(&T.p, R.s_enc);
    const int64_t c0 = (int64_t)blockIdx.x * QF_WARPS * QF_CF_COLS;   // the CTA's first column
    const int64_t c = c0 + warp * QF_CF_COLS + 2 * lane;               // this lane's columns c, c + 1
    const bool cv = c < A.cols;   // cols % 8 == 0: both columns or neither
    const uint64_t pstep = SR ? (uint64_t)(A.cols >> 1) * QF_RNG_MUL : 0;
    uint32_t smask[QF_ROWS];   // the rotation's sign flip of row r of a group, on both halves of a word
    qf_col_sign_masks(T, H, 0, smask);
    uint32_t dm = 0;   // the view's amax over this lane's blocks (delayed amax rule)
    // HR >= 0: the row-wise copy's rule, sign flips and view amax, and this thread's row pair and block
    const QFTarget& TR = A.t[0];
    QFBlockRule RR{};
    uint32_t smask_r[8] = {0, 0, 0, 0, 0, 0, 0, 0}, dm_r = 0;
    const int pr = threadIdx.x >> 4;                       // rows 2 pr, 2 pr + 1 of each tile
    const int64_t cb = c0 + (threadIdx.x & 15) * 16;       // columns cb + [0, 16)
    const bool bv = cb < A.cols;                           // (cols % 16 == 0: the whole block or none of it)
    if constexpr (HR >= 0) {
        __shared__ float2 tab_r[128];
        RR = qf_block_rule(TR, *TR.amax, tab_r);
        if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *TR.scale_dec = quant_tensor_scale_dec(&TR.p, RR.s_enc);
        qf_row_signs(TR, HR, 0, smask_r);
    }
    qf_cf_pipeline<16, qf_ck_stages<H>()>(A, c0, qf_ck_tiles, [&](int64_t k, const uint32_t* t) {
        uint32_t v[16];
#pragma unroll
        for (int r = 0; r < 16; r++) v[r] = t[r * (QF_CF_ROW / 4)];
        const int64_t r0 = ((int64_t)blockIdx.y + k * gridDim.y) * 16;
        // the block maxima of columns c and c + 1 (as qf_apply_axis0: of the rotated values, BF16-rounded)
        float lo[16], hi[16];   // H: the rotated values
        uint32_t mlo, mhi;
        if constexpr (H == 16) {
#pragma unroll
            for (int r = 0; r < 16; r++) { const uint32_t x = v[r] ^ smask[r]; lo[r] = qf_lo(x); hi[r] = qf_hi(x); }
            mlo = qf_rot16_max(lo, T.hscale);
            mhi = qf_rot16_max(hi, T.hscale);
        } else {
            uint32_t m2 = 0;
#pragma unroll
            for (int r = 0; r < 16; r++) m2 = qf_vmax(m2, v[r] & 0x7FFF7FFFu);
            mlo = m2 << 16;
            mhi = m2 & 0xFFFF0000u;
        }
        if (cv) dm = qf_max(dm, qf_max(mlo, mhi));
        const QuantBlockScale blo = qf_block_scale(T, R, mlo), bhi = qf_block_scale(T, R, mhi);
        // SR: rows 2j, 2j + 1 of columns c, c + 1 are sr_bits16's square (r0 / 2 + j, c / 2)
        uint64_t pm = SR ? ((uint64_t)(r0 >> 1) * (uint64_t)(A.cols >> 1) + (uint64_t)(c >> 1)) * QF_RNG_MUL : 0;
        uint32_t* d = (uint32_t*)(T.fake + r0 * T.ld_fake + c);   // row r's word; moves down a row per store
        const int64_t ldw = T.ld_fake >> 1;                        // (ld_fake % 8 == 0)
        // the rows, with the block pair's path (fast, or a block holding inf / NaN) chosen once for all of them;
        // bl, bh: the scales of the blocks of columns c and c + 1
        auto rows = [&](auto fast_path, const QuantBlockScale& bl, const QuantBlockScale& bh) {
            constexpr bool F = decltype(fast_path)::value;
#pragma unroll
            for (int r = 0; r < 16; r += 2) {
                uint32_t rnd[2] = {0u, 0u};
                if (SR) {   // (pm moves down a row pair per draw)
                    qf_rng_rows(T.key, pm, rnd[0], rnd[1]);
                    pm += pstep;
                }
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    uint32_t x = v[r + j];   // the fast path's rounding of the rotated pair, or the reference's
                    if constexpr (H == 16) x = F ? qf_cvt2(lo[r + j], hi[r + j]) : qf_cvt2_ref(lo[r + j], hi[r + j]);
                    const uint32_t o = F ? qf_fast_pair<SR>(T.g, qf_lo(x), qf_hi(x), x, bl.inv, bl.sdec, bh.inv, bh.sdec, rnd[j])
                                         : qf_ck_slow(T, x, bl, bh, rnd[j]);
                    if (cv) *d = o;
                    d += ldw;
                }
            }
        };
        // 4o6 (F46): both candidates of both blocks, their errors from the fast path's magnitudes; a block keeps 4 iff
        // its sum is smaller, one holding inf or NaN keeps 6. With both blocks finite the chosen words are stored
        // once the sums are complete; otherwise the rows run again through the reference elements, each block with
        // its choice (a finite block's words are the same either way).
        auto rows46 = [&]() {
            const uint64_t pm0 = pm;
            const QuantBlockScale l4 = qf_e4m3_scale(R, mlo, R.mult4), h4 = qf_e4m3_scale(R, mhi, R.mult4);
            float el6 = 0.0f, eh6 = 0.0f, el4 = 0.0f, eh4 = 0.0f;
            uint32_t w6[16], w4[16];
#pragma unroll
            for (int r = 0; r < 16; r += 2) {
                uint32_t rnd[2] = {0u, 0u};
                if (SR) {
                    qf_rng_rows(T.key, pm, rnd[0], rnd[1]);
                    pm += pstep;
                }
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    uint32_t x = v[r + j];
                    if constexpr (H == 16) x = qf_cvt2(lo[r + j], hi[r + j]);
                    qf_46_pair<SR>(T.g, x, blo, bhi, l4, h4, R.s_enc, rnd[j], el6, eh6, el4, eh4, w6[r + j], w4[r + j]);
                }
            }
            const bool lo4 = mlo < 0x7F800000u && el4 < el6, hi4 = mhi < 0x7F800000u && eh4 < eh6;
            if (qf_max(mlo, mhi) >= 0x7F800000u) {
                pm = pm0;
                rows(std::false_type{}, lo4 ? l4 : blo, hi4 ? h4 : bhi);
                return;
            }
            const uint32_t pick4 = (lo4 ? 0x0000FFFFu : 0u) | (hi4 ? 0xFFFF0000u : 0u);
#pragma unroll
            for (int r = 0; r < 16; r++) {
                if (cv) *d = (w4[r] & pick4) | (w6[r] & ~pick4);
                d += ldw;
            }
        };
        if constexpr (F46) rows46();
        else if (qf_max(mlo, mhi) < 0x7F800000u) rows(std::true_type{}, blo, bhi);
        else rows(std::false_type{}, blo, bhi);
        if constexpr (HR >= 0) {   // the row-wise copy's blocks of this tile, from the same stage
            const char* st = (const char*)(t - threadIdx.x) + 2 * pr * QF_CF_ROW + (threadIdx.x & 15) * 32;
            QFRowPair b;
#pragma unroll
            for (int j = 0; j < 2; j++) {
                b.v[j][0] = ((const uint4*)(st + j * QF_CF_ROW))[0];
                b.v[j][1] = ((const uint4*)(st + j * QF_CF_ROW))[1];
            }
            qf_row2_pair<HR, false, false>(TR, b, TR.fake + (r0 + 2 * pr) * TR.ld_fake + cb, bv, bv, RR, 0, smask_r, dm_r);
        }
    });
    if (T.amax_next) quant_amax_accumulate(T.amax_next, dm);
    if constexpr (HR >= 0) {
        if (TR.amax_next) quant_amax_accumulate(TR.amax_next, dm_r);
    }
}

// ---------------------------------------------------------------------------------------------------
// Host side

// The Hadamard-size combinations with a kernel (each is a separate instantiation, so the list is kept to
// what the recipes use): one target of either axis with H 0/2/4/8/16/32; two targets (row-wise,
// column-wise) with H (0, 0), (0, 16), (0, 32), (16, 16), (32, 32). A pair with a smaller H runs as two
// single-target passes (the caller's choice, see quant_fast_supported).
static inline int qf_combo_ok(int ha, int hb) {
    if (ha < 0 || hb < 0) return 1;
    if ((ha > 0 && ha < 16) || (hb > 0 && hb < 16)) return 0;
    return ha == 0 || ha == hb;
}

static inline int qf_h_ok(int h) { return h == 0 || h == 2 || h == 4 || h == 8 || h == 16 || h == 32; }

static inline int qf_shape_ok(const QuantParams* p, int64_t rows, int64_t cols, int axis) {
    if (rows <= 0 || cols <= 0) return 0;
    const int64_t M = axis ? rows : cols, K = axis ? cols : rows;
    if (K % p->block_l || M % p->block_w) return 0;
    if (p->hadamard && K % p->hadamard) return 0;
    return 1;
}

// The outputs a target asks for: fake only (16-byte aligned, ld % 8 == 0), packed only (codes 8-byte aligned:
// a column-wise thread stores 8 bytes per column; a grid with a 4-bit form), or
// FP8 only (E8M0 4-bit specs, 16-byte aligned; column-wise copies write whole 16-row patches transposed).
static inline int qf_outputs_ok(const QuantTarget* t, int64_t rows, int64_t cols) {
    if (t->fp8)
        return !t->fake && !t->codes && !t->scales && fp8_foldable(&t->p) && t->fold_max && t->fold_scale && t->fold_below &&
               (uintptr_t)t->fp8 % 16 == 0 && (t->axis == 1 || rows % 16 == 0);
    if (t->fake && !t->codes && !t->scales) return (uintptr_t)t->fake % 16 == 0 && t->ld_fake % 8 == 0 && t->ld_fake >= cols;
    if (!t->fake && t->codes && t->scales) return (uintptr_t)t->codes % 8 == 0 && !t->p.grid.e4m3;
    return 0;
}

// outputs = 0: the statistics pass, which writes none of the target's outputs.
static inline int qf_target_ok(const QuantTarget* t, int64_t rows, int64_t cols, int outputs) {
    const QuantParams* p = &t->p;
    if (t->axis != 0 && t->axis != 1) return 0;
    const int gid = qf_grid_id(&p->grid);
    if (gid != QGRID_E2M1 && gid != QGRID_INT4 && gid != QGRID_E1M2 && gid != QGRID_E4M3) return 0;
    if (gid == QGRID_E4M3 && p->rounding != QROUND_RNE) return 0;
    if (!(p->block_l == 16 || p->block_l == 32) || !(p->block_w == 1 || p->block_w == p->block_l)) return 0;
    if (p->rounding == QROUND_EDEN)   // MS-EDEN (quant_group.cuh): e2m1 1x16 e4m3 h128, the call's signs set
        return gid == QGRID_E2M1 && p->block_w == 1 && p->block_l == 16 && p->scale == QSCALE_E4M3 &&
               p->hadamard == 128 && p->signs_set && t->amax && t->scale_dec &&
               (!outputs || qf_outputs_ok(t, rows, cols)) && qf_shape_ok(p, rows, cols, t->axis);
    if (t->src_dec) return 0;   // a dequantized source is MS-EDEN's operand source only
    if (p->scale < QSCALE_E4M3 || p->scale >= QSCALE_COUNT || (p->rounding != QROUND_RNE && p->rounding != QROUND_SR))
        return 0;
    // 4o6 (quant_group.cuh's apply pass): E2M1 only, no FP8 form (its scales are E4M3)
    if (p->scale == QSCALE_E4M3_4O6 && (gid != QGRID_E2M1 || t->fp8)) return 0;
    if (!qf_h_ok(p->hadamard)) return 0;
    if (!t->amax || !t->scale_dec || (outputs && !qf_outputs_ok(t, rows, cols))) return 0;
    return qf_shape_ok(p, rows, cols, t->axis);
}

static inline int qf_supported(const QuantTarget* t, int n, int64_t rows, int64_t cols, int64_t ld, int outputs) {
    if (!t || n < 1 || n > 2) return 0;
    if (ld < cols || ld % 8 || cols % 8 || rows <= 0 || cols <= 0) return 0;
    if (n == 2 && t[0].axis == t[1].axis) return 0;
    int h[2] = {-1, -1};
    for (int k = 0; k < n; k++) {
        if (!qf_target_ok(&t[k], rows, cols, outputs)) return 0;
        if (t[k].p.rounding == QROUND_EDEN) return n == 1;   // its own kernels, one target at a time
        h[t[k].axis ? 0 : 1] = t[k].p.hadamard;
    }
    return qf_combo_ok(h[0], h[1]);
}

static inline int quant_fast_supported(const QuantTarget* t, int n, int64_t rows, int64_t cols, int64_t ld) {
    return qf_supported(t, n, rows, cols, ld, 1);
}

// The sign bits of rotated positions 0..31 as the kernels read them (8 per lane row-wise, 16 per thread
// column-wise): a group shorter than 32 repeats its H bits along them.
static inline uint32_t qf_hadamard_signs(const QuantParams* p) {
    if (!p->hadamard) return 0;
    uint32_t s = p->signs[0];
    for (int h = p->hadamard; h < 32; h *= 2) s = (s & ((1u << h) - 1u)) | (s << h);
    return s;
}

static inline QFTarget qf_target(const QuantTarget* t) {
    QFTarget q;
    memset(&q, 0, sizeof(q));
    q.p = t->p;
    q.g = qf_grid_consts(qf_grid_id(&t->p.grid));
    q.key = t->key;
    q.fake = (uint16_t*)t->fake;
    q.ld_fake = t->ld_fake;
    q.amax = t->amax;
    q.scale_dec = t->scale_dec;
    q.amax_next = t->amax_next;
    q.hscale = t->p.hadamard ? hadamard_scale(t->p.hadamard) : 1.0f;
    q.hsigns = qf_hadamard_signs(&t->p);
    q.sr = t->p.rounding == QROUND_SR;
    q.bw = t->p.block_w;
    q.bl = t->p.block_l;
    q.ref_elems = t->p.grid.e4m3;
    q.out = t->fp8 ? QF_OUT_FP8 : t->codes ? QF_OUT_PACKED : QF_OUT_FAKE;
    q.fp8 = t->fp8;
    q.fold_max = t->fold_max;
    q.fold_scale = t->fold_scale;
    q.fold_below = t->fold_below;
    const Fp8Window win = fp8_fold_window(&t->p.grid);
    q.dmin = win.dmin;
    q.dmax = win.dmax;
    q.bw_log2 = q.bw == 32 ? 5 : q.bw == 16 ? 4 : 0;   // block_w is 1, 16 or 32 (qf_target_ok)
    q.codes = t->codes;
    q.scales = t->scales;
    qf_code_consts(qf_grid_id(&t->p.grid), &q.code_mul, &q.code_shift);
    q.src_dec = t->src_dec;
    q.eden_corr = t->eden_corr;
    q.eden = t->p.rounding == QROUND_EDEN;
    return q;
}

typedef struct {
    QFArgs a;
    int ha, hb;       // the kernels' Hadamard sizes (QF_HSMALL for 2, 4, 8), -1: no target on that axis
    int sra, srb;
} QFLaunch;

static inline QFLaunch qf_prepare(const floatX* in, int64_t rows, int64_t cols, int64_t ld, const QuantTarget* t,
                                  int n, int outputs = 1) {
    fail_if(!qf_supported(t, n, rows, cols, ld, outputs),
            "quantize_fast_gpu: targets not supported (check quant_fast_supported first; %lld x %lld, ld %lld, %d targets)",
            (long long)rows, (long long)cols, (long long)ld, n);
    fail_if((uintptr_t)in % 16, "quantize_fast_gpu: input must be 16-byte aligned");
    QFLaunch L;
    memset(&L, 0, sizeof(L));
    L.ha = L.hb = -1;
    for (int k = 0; k < n; k++) {
        const int slot = t[k].axis ? 0 : 1;
        L.a.t[slot] = qf_target(&t[k]);
        const int h = t[k].p.hadamard > 0 && t[k].p.hadamard < 16 ? QF_HSMALL : t[k].p.hadamard;   // the kernel's H
        if (slot == 0) { L.ha = h; L.sra = L.a.t[0].sr; }
        else { L.hb = h; L.srb = L.a.t[1].sr; }
    }
    L.a.in = (const uint16_t*)in;
    L.a.rows = rows; L.a.cols = cols; L.a.ld = ld;
    L.a.t[0].ld_fp8 = cols;   // FP8 output: the reduction axis contiguous
    L.a.t[1].ld_fp8 = rows;
    L.a.tiles_c = ceil_div(cols, QF_TILE_C);
    L.a.tiles = L.a.tiles_c * ceil_div(rows, QF_TILE_R);
    fail_if(L.a.tiles >= ((int64_t)1 << 31), "quantize_fast_gpu: %lld x %lld is too large (tile indices are 32-bit)",
            (long long)rows, (long long)cols);
    return L;
}

#include "llmc/fp4/quant_group.cuh"   // Four Over Six's apply pass (needs QFArgs, QFLaunch)

static inline int qf_num_sms(void) {
    static int sms = 0;
    if (!sms) {
        int dev = 0;
        cuda_check(cudaGetDevice(&dev));
        cuda_check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    }
    return sms;
}

// How many CTAs of a kernel (QF_THREADS each, smem bytes of dynamic shared memory) the GPU holds at once: the
// grid of the kernels that stride over their work. per_sm: the caller's cache of the occupancy (per instantiation).
template <typename K>
static inline int64_t qf_resident_ctas(K kernel, size_t smem, int* per_sm) {
    if (!*per_sm) cuda_check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(per_sm, kernel, QF_THREADS, smem));
    return (int64_t)qf_num_sms() * (*per_sm > 0 ? *per_sm : 1);
}

template <int HA, int HB, bool FOLD>
static inline void qf_launch_amax(const QFLaunch& L, cudaStream_t s) {
    static int per_sm = 0;
    int64_t blocks = ceil_div(L.a.tiles, QF_WARPS);
    const int64_t cap = qf_resident_ctas(qf_amax_kernel<HA, HB, FOLD>, 0, &per_sm);
    if (blocks > cap) blocks = cap;
    // a column-wise FP8 target keeps its column maxima while a warp stays on one tile column: with a grid
    // stride (blocks x warps tiles) that is a multiple of the tile columns, it always does
    if (FOLD && L.a.t[1].fold_max && blocks > L.a.tiles_c) blocks -= blocks % L.a.tiles_c;
    qf_amax_kernel<HA, HB, FOLD><<<(unsigned)blocks, QF_THREADS, 0, s>>>(L.a);
    cuda_check_last();
}

// LLMC_QF_PATCH=1 in the environment: the patch kernel (qf_apply_kernel) for the copies qf_row2_kernel,
// qf_colfake_kernel and the FP8 column kernel make, and the two passes (amax, then the patch kernel) for those
// qf_rowfold_kernel makes: the same numbers more slowly, for timing one against the other in one run
// (COMPARE_ENV=LLMC_QF_PATCH=1 dev/bench/check_quant_gpu.sh).
static inline int qf_patch_only(void) {
    static const int on = env_flag("LLMC_QF_PATCH");
    return on;
}
// What the kernels laid out for whole blocks per lane take (qf_row2_kernel, qf_colfake_kernel): a fake copy in
// 1D blocks with a 16-point Hadamard (h) or none, not MS-EDEN, and with 4o6 only in 1x16 blocks; not under
// LLMC_QF_PATCH=1.
static inline int qf_whole_block_ok(const QFTarget& t, int h) {
    return (h == 0 || h == 16) && t.out == QF_OUT_FAKE && t.bw == 1 && !t.eden &&
           (t.p.scale != QSCALE_E4M3_4O6 || t.bl == 16) && !qf_patch_only();
}
// qf_row2_kernel takes the row-wise target of L when it is such a copy.
static inline int qf_row2_ok(const QFLaunch& L) { return qf_whole_block_ok(L.a.t[0], L.ha); }
template <int H, bool SR, bool F46>
static inline void qf_launch_row2_n(const QFLaunch& L, cudaStream_t s) {
    const int64_t tiles_c = ceil_div(L.a.cols, QF_ROW2_TILE_C);
    const unsigned blocks = (unsigned)ceil_div(tiles_c * ceil_div(L.a.rows, QF_TILE_R), QF_WARPS);
    qf_row2_kernel<H, SR, F46><<<blocks, QF_THREADS, 0, s>>>(L.a, tiles_c);
    cuda_check_last();
}
// H x SR x 4o6, each its own instantiation
template <template <int, bool, bool> class K>
static inline void qf_whole_block_dispatch(const QFLaunch& L, const QFTarget& t, int h, cudaStream_t s) {
    const bool f46 = t.p.scale == QSCALE_E4M3_4O6;
    if (h == 16) {
        if (t.sr) { if (f46) K<16, true, true>::run(L, s); else K<16, true, false>::run(L, s); }
        else if (f46) K<16, false, true>::run(L, s);
        else K<16, false, false>::run(L, s);
    } else if (t.sr) { if (f46) K<0, true, true>::run(L, s); else K<0, true, false>::run(L, s); }
    else if (f46) K<0, false, true>::run(L, s);
    else K<0, false, false>::run(L, s);
}
template <int H, bool SR, bool F46> struct QFRow2Launch { static void run(const QFLaunch& L, cudaStream_t s) { qf_launch_row2_n<H, SR, F46>(L, s); } };
static inline void qf_launch_row2(const QFLaunch& L, cudaStream_t s) { qf_whole_block_dispatch<QFRow2Launch>(L, L.a.t[0], L.ha, s); }

// The one-pass row-wise FP8 kernel (qf_rowfold_kernel) takes L (every target of the call, amax-only ones
// included) when its row-wise target is an FP8 copy it makes (round to nearest, 1D blocks, no Hadamard,
// rows of at most 20 chunks) and a column-wise target, if any, is an FP8 copy without a Hadamard in 1D
// blocks (the pairs test_fp8_fold checks); not under LLMC_QF_PATCH=1.
// A copy the fold kernels below make (either axis): FP8, 1D blocks, 4-bit elements; round to nearest, or
// (sr_ok: the column kernel) stochastically.
static inline int qf_fold_kernel_target(const QFTarget& t, int sr_ok) {
    return t.out == QF_OUT_FP8 && (sr_ok || !t.sr) && t.bw == 1 && !t.ref_elems;
}
static inline int qf_rowfold_ok(const QFLaunch& L) {
    const QFTarget& c = L.a.t[1];
    return L.ha == 0 && qf_fold_kernel_target(L.a.t[0], 0) && (L.hb < 0 || (L.hb == 0 && c.out == QF_OUT_FP8 && c.bw == 1)) &&
           ceil_div(L.a.cols, (int64_t)QF_RF_CHUNK) <= 20 && !qf_patch_only();
}

template <int NCH, int RPW>
static inline void qf_launch_rowfold_n(const QFLaunch& L, int col_max, cudaStream_t s) {
    const size_t smem = col_max ? (size_t)QF_WARPS * (size_t)L.a.cols * 2 : 0;   // <= 40 KB (5120 columns)
    static int per_sm = 0;   // at the largest shared memory this instantiation takes
    const int64_t cap = qf_resident_ctas(qf_rowfold_kernel<NCH, RPW>, (size_t)QF_WARPS * NCH * QF_RF_CHUNK * 2, &per_sm);
    int64_t blocks = ceil_div(ceil_div(L.a.rows, (int64_t)RPW), (int64_t)QF_WARPS);
    if (blocks > cap) blocks = cap;
    qf_rowfold_kernel<NCH, RPW><<<(unsigned)blocks, QF_THREADS, smem, s>>>(L.a, col_max);
    cuda_check_last();
}
static inline void qf_launch_rowfold(const QFLaunch& L, cudaStream_t s) {
    const int64_t nch = ceil_div(L.a.cols, (int64_t)QF_RF_CHUNK);
    const int col_max = L.hb == 0 && L.a.t[1].fold_max != nullptr;
    if (nch <= 4) qf_launch_rowfold_n<4, 4>(L, col_max, s);
    else if (nch <= 12) qf_launch_rowfold_n<12, 1>(L, col_max, s);
    else qf_launch_rowfold_n<20, 1>(L, col_max, s);
}

// The column-wise FP8 kernel (qf_colfold_kernel) takes the column-wise target of L when it is an FP8 copy in
// 1D blocks without a Hadamard (RNE or SR); not under LLMC_QF_PATCH=1.
static inline int qf_colfold_ok(const QFLaunch& L) {
    return L.hb == 0 && qf_fold_kernel_target(L.a.t[1], 1) && !qf_patch_only();   // (block_l is 16 or 32: qf_target_ok)
}
// The grid of the shared-memory column kernels (CTAs of 256 columns walking tiles of tr rows): one that fits at
// once (cap CTAs, so that no CTA waits for a second wave), with each CTA taking at least min_tiles tiles where
// the rows allow (its cp.async pipeline full).
static inline dim3 qf_cf_grid(const QFLaunch& L, int tr, int min_tiles, int64_t cap) {
    const int64_t bx = ceil_div(L.a.cols, (int64_t)QF_WARPS * QF_CF_COLS), nrb = L.a.rows / tr;
    int64_t by = ceil_div(nrb, (int64_t)min_tiles);
    if (by * bx > cap) by = cap / bx > 0 ? cap / bx : 1;
    if (by > 65535) by = 65535;
    return dim3((unsigned)bx, (unsigned)by);
}
template <int BL, bool SR, bool TWO_D = false>
static inline void qf_launch_colfold_n(const QFLaunch& L, cudaStream_t s) {
    static int per_sm = 0;   // (and the shared memory opt-in: per process, which drives one GPU, as qf_num_sms)
    const size_t smem = (size_t)QF_CF_STAGES * BL * QF_CF_ROW;
    if (!per_sm && smem > 48 * 1024)
        cuda_check(cudaFuncSetAttribute(qf_colfold_kernel<BL, SR, TWO_D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const dim3 grid = qf_cf_grid(L, BL, 4, qf_resident_ctas(qf_colfold_kernel<BL, SR, TWO_D>, smem, &per_sm));
    qf_colfold_kernel<BL, SR, TWO_D><<<grid, QF_THREADS, smem, s>>>(L.a);
    cuda_check_last();
}

// The column-wise fake kernel (qf_colfake_kernel) takes the column-wise target of L when it is such a copy
// (qf_whole_block_ok) in 1x16 blocks on a 4-bit grid (not the fp8 grid, whose every block takes the reference
// elements; a block holding inf or NaN takes them in the kernel too), the rows a multiple of 16.
static inline int qf_colfake_ok(const QFLaunch& L) {
    const QFTarget& t = L.a.t[1];
    return qf_whole_block_ok(t, L.hb) && t.bl == 16 && !t.ref_elems && L.a.rows % 16 == 0;
}
template <int H, bool SR, bool F46, int HR = -1>
static inline void qf_launch_colfake_n(const QFLaunch& L, cudaStream_t s) {
    static int per_sm = 0;   // (as qf_launch_colfold_n's)
    const size_t smem = (size_t)qf_ck_stages<H>() * 16 * QF_CF_ROW;   // 64 KB at 8 stages
    if (!per_sm && smem > 48 * 1024)
        cuda_check(cudaFuncSetAttribute(qf_colfake_kernel<H, SR, F46, HR>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const dim3 grid = qf_cf_grid(L, 16, qf_ck_stages<H>(), qf_resident_ctas(qf_colfake_kernel<H, SR, F46, HR>, smem, &per_sm));
    qf_colfake_kernel<H, SR, F46, HR><<<grid, QF_THREADS, smem, s>>>(L.a);
    cuda_check_last();
}
template <int H, bool SR, bool F46> struct QFColfakeLaunch { static void run(const QFLaunch& L, cudaStream_t s) { qf_launch_colfake_n<H, SR, F46>(L, s); } };
static inline void qf_launch_colfake(const QFLaunch& L, cudaStream_t s) { qf_whole_block_dispatch<QFColfakeLaunch>(L, L.a.t[1], L.hb, s); }

// Both fake copies of a dual pass from one read of the source (qf_colfake_kernel with HR >= 0) instead of one
// kernel per copy, each reading it: where qf_row2_kernel would make the row-wise copy and qf_colfake_kernel the
// column-wise one, both round to nearest and neither is 4o6, with Hadamard sizes (0, 0), (0, 16) or (16, 16). The
// same numbers bit for bit (test_quant_fast). Timed on the H200 (bench_quant_fast, 65536 x 3072;
// results/dual_split_gemm90/): nvfp4-naive's dY pair 528 -> 445 us, a row + column H16 pair 540 -> 456; with
// stochastic rounding the one-read form was slower (nvfp4's dY pair 636 -> 657, ufp4's 814 -> 841: the SR draws of
// both copies in one kernel), so SR pairs keep one kernel per copy.
static inline int qf_dual_ok(const QFLaunch& L) {
    const QFTarget &r = L.a.t[0], &c = L.a.t[1];
    return L.ha >= 0 && L.hb >= 0 && qf_combo_ok(L.ha, L.hb) && qf_row2_ok(L) && qf_colfake_ok(L) && !r.sr && !c.sr &&
           r.p.scale != QSCALE_E4M3_4O6 && c.p.scale != QSCALE_E4M3_4O6;
}
static inline void qf_launch_dual(const QFLaunch& L, cudaStream_t s) {
    if (L.hb == 0) qf_launch_colfake_n<0, false, false, 0>(L, s);   // (qf_combo_ok: the row-wise copy has none either)
    else if (L.ha == 0) qf_launch_colfake_n<16, false, false, 0>(L, s);
    else qf_launch_colfake_n<16, false, false, 16>(L, s);
}

static inline void qf_launch_colfold(const QFLaunch& L, cudaStream_t s) {
    const QFTarget& T = L.a.t[1];
    if (T.bl == 32 && T.sr) qf_launch_colfold_n<32, true>(L, s);
    else if (T.bl == 32) qf_launch_colfold_n<32, false>(L, s);
    else if (T.sr) qf_launch_colfold_n<16, true>(L, s);
    else qf_launch_colfold_n<16, false>(L, s);
}

// 2D copies: an FP8 copy in 32 x 32 blocks without a Hadamard (RNE or SR), of either axis, is made by the column
// kernel's TWO_D form (mxfp4-2d's dY pair from one read, its W copies); not under
// LLMC_QF_PATCH=1. qf_fold2d(L) says which: bit 0 the row-wise copy, bit 1 the column-wise one.
static inline int qf_fold2d_target(const QFTarget& t) { return t.out == QF_OUT_FP8 && t.bw == 32 && t.bl == 32 && !t.ref_elems; }
static inline int qf_fold2d(const QFLaunch& L) {
    if (qf_patch_only()) return 0;
    return (L.ha == 0 && qf_fold2d_target(L.a.t[0])) | (L.hb == 0 && qf_fold2d_target(L.a.t[1])) << 1;
}
// The 2D copies of L that which (qf_fold2d's bits) names: both in one kernel where they round alike, else one each.
static inline void qf_launch_fold2d(const QFLaunch& L, int which, cudaStream_t s) {
    if (which == 3 && L.a.t[0].sr != L.a.t[1].sr) {
        qf_launch_fold2d(L, 1, s);
        qf_launch_fold2d(L, 2, s);
        return;
    }
    QFLaunch M = L;
    if (!(which & 1)) M.a.t[0].fp8 = nullptr;   // (the kernel makes the copies whose fp8 is set)
    if (!(which & 2)) M.a.t[1].fp8 = nullptr;
    if (M.a.t[which & 1 ? 0 : 1].sr) qf_launch_colfold_n<32, true, true>(M, s);
    else qf_launch_colfold_n<32, false, true>(M, s);
}

template <int HA, int HB, int OUT>
static inline void qf_launch_apply(const QFLaunch& L, cudaStream_t s) {
    qf_apply_kernel<HA, HB, OUT><<<(unsigned)ceil_div(L.a.tiles, QF_WARPS), QF_THREADS, 0, s>>>(L.a);
    cuda_check_last();
}

// The amax pass reads the input once for both targets; the apply pass runs one kernel per target:
// a dual-target apply kernel needs 168 registers (12 warps per SM) and ran slower than the two
// single-target kernels together (bench_quant_fast, nvfp4 dY pair at 65536 x 3072: 1323 us dual vs
// 1113 us split), although it reads the input once instead of twice.
static inline void qf_dispatch_amax(const QFLaunch& L, cudaStream_t s) {
    for (int k = 0; k < 2; k++)   // MS-EDEN: a single target, quant_group.cuh's amax kernel
        if ((k ? L.hb : L.ha) >= 0 && L.a.t[k].eden) { qg_launch_eden_amax(L, k, s); return; }
    const bool fold = L.a.t[0].fold_max || L.a.t[1].fold_max;   // FP8 targets: also the per-row maxima
#define QF_CASE(A, B) if (L.ha == A && L.hb == B) { \
        if (fold) qf_launch_amax<A, B, true>(L, s); else qf_launch_amax<A, B, false>(L, s); return; }
    QF_CASE(0, -1) QF_CASE(16, -1) QF_CASE(32, -1) QF_CASE(-1, 0) QF_CASE(-1, 16) QF_CASE(-1, 32)
    QF_CASE(QF_HSMALL, -1) QF_CASE(-1, QF_HSMALL)
    QF_CASE(0, 0) QF_CASE(0, 16) QF_CASE(0, 32) QF_CASE(16, 16) QF_CASE(32, 32)
#undef QF_CASE
    fail("quantize_fast_gpu: internal: no amax kernel for Hadamard sizes %d / %d", L.ha, L.hb);
}

// Whether quant_group.cuh makes the target in slot k of L: MS-EDEN, and the 4o6 copies the whole-block kernels
// (qf_row2_kernel, qf_colfake_kernel: fake, 1x16, H16 or none) do not make.
static inline int qf_group_target(const QFLaunch& L, int k) {
    const QFTarget& t = L.a.t[k];
    if (t.eden) return 1;
    return t.p.scale == QSCALE_E4M3_4O6 && !(t.out == QF_OUT_FAKE && (k ? qf_colfake_ok(L) : qf_row2_ok(L)));
}

// The apply kernels of the targets whose output form is OUT.
template <int OUT>
static inline void qf_dispatch_apply_form(const QFLaunch& L, cudaStream_t s) {
    if (OUT == QF_OUT_FAKE && qf_dual_ok(L)) {   // both copies (neither is quant_group.cuh's)
        qf_launch_dual(L, s);
        return;
    }
    for (int k = 0; k < 2; k++) {   // quant_group.cuh's rules
        if ((k ? L.hb : L.ha) < 0 || L.a.t[k].out != OUT || !qf_group_target(L, k)) continue;
        if (L.a.t[k].eden) qg_launch_eden_apply<OUT>(L, k, s);
        else qg_launch_4o6<OUT>(L, k, s);
    }
    const int f2d = OUT == QF_OUT_FP8 ? qf_fold2d(L) : 0;
    if (f2d) qf_launch_fold2d(L, f2d, s);
    if (L.ha >= 0 && L.a.t[0].out == OUT && !qf_group_target(L, 0) && !(f2d & 1)) {
        if (OUT == QF_OUT_FAKE && qf_row2_ok(L)) qf_launch_row2(L, s);
        else if (L.ha == 0) qf_launch_apply<0, -1, OUT>(L, s);
        else if (L.ha == QF_HSMALL) qf_launch_apply<QF_HSMALL, -1, OUT>(L, s);
        else if (L.ha == 16) qf_launch_apply<16, -1, OUT>(L, s);
        else if (L.ha == 32) qf_launch_apply<32, -1, OUT>(L, s);
    }
    if (L.hb >= 0 && L.a.t[1].out == OUT && !qf_group_target(L, 1) && !(f2d & 2)) {
        if (OUT == QF_OUT_FAKE && qf_colfake_ok(L)) qf_launch_colfake(L, s);
        else if (L.hb == 0 && OUT == QF_OUT_FP8 && qf_colfold_ok(L)) qf_launch_colfold(L, s);
        else if (L.hb == 0) qf_launch_apply<-1, 0, OUT>(L, s);
        else if (L.hb == QF_HSMALL) qf_launch_apply<-1, QF_HSMALL, OUT>(L, s);
        else if (L.hb == 16) qf_launch_apply<-1, 16, OUT>(L, s);
        else if (L.hb == 32) qf_launch_apply<-1, 32, OUT>(L, s);
    }
}

static inline void qf_dispatch_apply(const QFLaunch& L, cudaStream_t s) {
    qf_dispatch_apply_form<QF_OUT_FAKE>(L, s);
    qf_dispatch_apply_form<QF_OUT_PACKED>(L, s);
    qf_dispatch_apply_form<QF_OUT_STATS>(L, s);
    qf_dispatch_apply_form<QF_OUT_FP8>(L, s);
}

// Pass 1: the tensor amax of each target's (rotated) view into *t[k].amax (a maximum into it: zeroed here
// unless the caller says it already is). The targets' outputs are not used (they may have none).
static inline void quant_fast_amax_gpu(const floatX* in, int64_t rows, int64_t cols, int64_t ld, const QuantTarget* t,
                                       int n, cudaStream_t s, int zeroed = 0) {
    QFLaunch L = qf_prepare(in, rows, cols, ld, t, n, 0);
    for (int k = 0; k < n && !zeroed; k++) cuda_check(cudaMemsetAsync(t[k].amax, 0, sizeof(float), s));
    qf_dispatch_amax(L, s);
}

// The delayed amax rule (QuantTarget.amax_next) is taken by the kernels laid out for whole blocks (qf_row2_kernel,
// qf_colfake_kernel), which compute every block amax of the view anyway: E4M3-scaled fake copies in 1D blocks, H16 or
// no Hadamard (nvfp4's and nvfp4-naive's X and dY copies, ufp4's, the 4o6 1x16 copies, quartet2's forward).
static inline int qf_delayed_target_ok(const QFLaunch& L, int k) {
    const QFTarget& t = L.a.t[k];
    return quant_scale_is_e4m3(t.p.scale) && !t.eden && t.out == QF_OUT_FAKE && !qf_group_target(L, k) &&
           (k ? qf_colfake_ok(L) : qf_row2_ok(L));
}
// Whether a single target (amax_next ignored) can be quantized under the delayed amax rule.
static inline int quant_fast_delayed_ok(const QuantTarget* t, int64_t rows, int64_t cols, int64_t ld) {
    if (!quant_fast_supported(t, 1, rows, cols, ld)) return 0;
    const QFLaunch L = qf_prepare(t->fake, rows, cols, ld, t, 1);   // (the input pointer is only checked for alignment)
    return qf_delayed_target_ok(L, t->axis ? 0 : 1);
}

// Pass 2: quantize with the amax already on the device (from pass 1, or, for targets with amax_next, the previous
// micro-step's: the delayed amax rule, quant_fast_delayed_ok).
static inline void quant_fast_apply_gpu(const floatX* in, int64_t rows, int64_t cols, int64_t ld, const QuantTarget* t,
                                        int n, cudaStream_t s) {
    QFLaunch L = qf_prepare(in, rows, cols, ld, t, n);
    for (int k = 0; k < 2; k++)
        fail_if((k ? L.hb : L.ha) >= 0 && L.a.t[k].amax_next && !qf_delayed_target_ok(L, k),
                "quant_fast_apply_gpu: a delayed amax for a copy the whole-block kernels do not make "
                "(check quant_fast_delayed_ok first)");
    qf_dispatch_apply(L, s);
}

// Both passes (the contract of the reference quantize_gpu) for t[0..n); the amax pass also takes the amax
// (and FP8 per-row maxima) of n_ahead amax-only targets t[n..n + n_ahead), whose outputs are not written
// (a backward copy taken ahead by the forward). zeroed: the caller zeroed every target's *amax (else
// this does). A row-wise FP8 copy the one-pass kernel takes (qf_rowfold_ok) is made in one read with the
// amax pass's work for the other targets; an MS-EDEN fake copy rotates once (qg_launch_eden_fake: the amax
// pass stores the rotated operand in the copy, the apply pass reads it there); anything else runs the amax
// pass, then the apply pass.
static inline void quantize_fast_gpu(const floatX* in, int64_t rows, int64_t cols, int64_t ld, const QuantTarget* t,
                                     int n, cudaStream_t s, int zeroed = 0, int n_ahead = 0) {
    for (int k = 0; k < n + n_ahead; k++)
        fail_if(t[k].amax_next != NULL, "quantize_fast_gpu: a delayed amax runs the apply pass alone (quant_fast_apply_gpu)");
    QFLaunch L = qf_prepare(in, rows, cols, ld, t, n);
    const QFLaunch La = n_ahead ? qf_prepare(in, rows, cols, ld, t, n + n_ahead, 0) : L;
    for (int k = 0; k < n + n_ahead && !zeroed; k++) cuda_check(cudaMemsetAsync(t[k].amax, 0, sizeof(float), s));
    const int eden = qg_eden_fake_slot(L);   // an MS-EDEN fake copy (always alone): the rotation once
    if (eden >= 0) {
        qg_launch_eden_fake(L, eden, s);
        return;
    }
    if (L.ha == 0 && qf_rowfold_ok(La)) {
        qf_launch_rowfold(La, s);
        L.ha = -1;   // made; the column-wise copy (if any) remains
        qf_dispatch_apply(L, s);
        return;
    }
    qf_dispatch_amax(La, s);
    qf_dispatch_apply(L, s);
}

// The diagnostics' statistics of quantizing the view with each target (QuantStats, fp4/quant_cpu.h): the
// apply pass up to each element's code, through the reference element arithmetic (counts equal the CPU
// twin's quant_stats_cpu), so they describe exactly what the GEMM sees (the rotated operand with a
// Hadamard; the same SR bits for the same key). Needs each target's *amax on the device; writes nothing
// but the statistics (not *scale_dec, not the target's outputs, which it need not have). stats: n device
// QuantStats, stats[k] for t[k], zeroed by the caller; they accumulate. The double sums are added with
// atomics, so their last bits depend on the order.
static inline void quant_fast_stats_gpu(const floatX* in, int64_t rows, int64_t cols, int64_t ld, const QuantTarget* t,
                                        int n, QuantStats* stats, cudaStream_t s) {
    fail_if(!stats || n < 1 || n > 2, "quant_fast_stats_gpu: 1 or 2 targets, and a device QuantStats for each");
    for (int k = 0; k < n; k++) {   // one kernel per target, as the apply pass
        QFLaunch L = qf_prepare(in, rows, cols, ld, &t[k], 1, 0);
        QFTarget& q = L.a.t[t[k].axis ? 0 : 1];
        q.out = QF_OUT_STATS;
        q.amax_next = NULL;   // (statistics take no amax)
        q.stats = stats + k;
        qf_dispatch_apply(L, s);
    }
}
