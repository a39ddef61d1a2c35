// tile_pipeline.cuh: the shared-memory column kernels' tile pipeline: tiles of TR rows x 256 columns copied into
// shared-memory stages with cp.async, all but one stage loading while one is read (qf_colfold_kernel,
// qf_colfake_kernel), and the grid those kernels launch with.
// defines: QF_CF_COLS, QF_CF_ROW, QFTileCopy, qf_cp_async16(), qf_cp_async_commit(), qf_cp_async_wait(),
//          qf_cf_copy(), qf_cf_issue(), qf_cf_pipeline(), qf_cf_grid()
#pragma once
#include "llmc/base/cuda_common.cuh"
#include "llmc/fp4/quant/kernel_args.cuh"

#define QF_CF_COLS 64   // columns per warp (32 lanes x 2)
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
