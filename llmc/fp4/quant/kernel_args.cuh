// kernel_args.cuh: what the GPU quantizer's kernels read (QFTarget, QFArgs, QFLaunch) and the launch helpers every
// launcher shares.
// defines: QF_THREADS, QF_MIN_CTAS, QF_WARPS, QF_ROWS, QF_TILE_R, QF_TILE_C, QF_RNG_MUL, QFTarget, QFArgs, QFLaunch,
//          qf_num_sms(), qf_resident_ctas()
// A call's targets (quant_target.cuh) resolved on the host (dispatch.cuh: qf_target, qf_prepare): a QFTarget per
// target, QFArgs for the view and its targets by slot ([0] row-wise, [1] column-wise), QFLaunch with the kernels'
// Hadamard sizes (their template arguments). The output forms QF_OUT_* are route.h's QuantOutForm.
#pragma once
#include <cuda_runtime.h>
#include "llmc/base/cuda_common.cuh"
#include "llmc/fp4/formats.h"
#include "llmc/fp4/quant_cpu.h"        // QuantStats
#include "llmc/fp4/quant/element.cuh"  // QFGrid
#include "llmc/fp4/quant/route.h"      // QF_OUT_*

#define QF_THREADS 128
#define QF_MIN_CTAS 3
#define QF_WARPS (QF_THREADS / 32)
#define QF_ROWS 16          // rows per thread
#define QF_TILE_R 32        // rows per warp tile
#define QF_TILE_C 128       // cols per warp tile
#define QF_RNG_MUL RNG_INDEX_MUL   // rng.h

// ---------------------------------------------------------------------------------------------------
// Kernel arguments

// The output forms of the apply kernels (QF_OUT_FAKE, QF_OUT_PACKED, QF_OUT_STATS, QF_OUT_FP8): route.h.

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
    int eden;         // rounding eden: group.cuh's MS-EDEN kernels
} QFTarget;

typedef struct {
    QFTarget t[2];    // [0]: the row-wise (axis 1) target, [1]: the column-wise (axis 0) target
    const uint16_t* in;
    int64_t rows, cols, ld;
    int64_t tiles_c;  // warp tiles along cols
    int64_t tiles;    // warp tiles in all
} QFArgs;

typedef struct {
    QFArgs a;
    int ha, hb;       // the kernels' Hadamard sizes (QF_HSMALL for 2, 4, 8), -1: no target on that axis
    int sra, srb;
} QFLaunch;

// ---------------------------------------------------------------------------------------------------
// Launch helpers

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
