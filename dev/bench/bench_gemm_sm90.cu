// bench_gemm_sm90.cu: can a GEMM of our own on Hopper's wgmma match cuBLASLt's BF16 GEMM at GPT-2 d12 shapes?
// The first step towards a GEMM that reads packed FP4 operands (results/README.md, "The lever these floors leave
// for nvfp4"): before its main loop expands E2M1 codes, a plain BF16 kernel of the same structure must run at
// cuBLASLt's speed, or the bytes the packed operands save are lost in the GEMM.
// The kernels: D (M x N, BF16, row-major) = A (M x K) B (N x K)^T, both operands K-contiguous ("TN", the layout of
// every GEMM of the trainer once its copies are written K-major). 128 x 256 output tiles, K in steps of 64; one
// producer thread loads A's and B's tiles with the tensor memory accelerator (128-byte swizzle) into a ring of
// stages; two consumer warpgroups each multiply 64 rows of the tile with wgmma m64n256k16 (operands in shared
// memory, FP32 accumulators in registers). "tile": one CTA per output tile, 4 stages, each thread stores its
// BF16 results to global memory. "persistent": one CTA per SM walks the tiles, 3 stages, the results leave through
// shared memory and TMA stores, so the next tile's loads and multiplications overlap this tile's stores.
// "packed" (the second table): A and B as NVFP4 codes and E4M3 block scales (no tensor scales: those go to alpha),
// expanded in the kernel, its output checked against the persistent kernel's on the dequantized operands bit for bit
// (the same products in the same order). Forms: a transform warpgroup expands both operands into the shared-memory
// stage, as BF16 from two byte tables in tasks of 8 or 16 elements (bf16/8, bf16/16), or as FP16 through E4M3 and
// cvt (f16/16, expand8_f16: the values are exact in FP16 too); the consumers expand A in registers for wgmma's
// register-A form and the transform warpgroup only B (regA/*); only A packed, B read as FP16 or BF16 values (A-only,
// A-only/bf16: in the trainer's forward and data-gradient GEMMs B is a weight, small and reused by every row tile;
// SASS: 196 and 274 instructions a transform thread per stage, against f16/16's 536). diag-* rows are timing only (a
// part of the expansion left out, results wrong by design).
// Needs sm_90a (wgmma, setmaxnreg). Prints, per shape: cuBLASLt's time, each kernel's, the ratio, and
// max |ours - cuBLASLt| / max |cuBLASLt| (both round FP32 sums to BF16; they differ at most in the order of the
// additions). -f SUBSTR runs only the kernels whose name contains it.
// Measured (results/packed_gemm90/, results/README.md): persistent 0.98-1.01x cuBLASLt's time on the H200, outputs
// equal; every packed form equal to the persistent kernel bit for bit, on the H100: f16/16 1.67-1.83x (loads first),
// A-only 1.39-1.50x, A-only/bf16 1.55-1.73x. The diagnostics place the cost: without any expansion the f16/16
// pipeline runs at 1.03-1.08x and the A-only one at 1.13-1.17x (diag-none, diag-A-none); A-only with its arithmetic
// but without the expanded stage's shared-memory stores runs at 1.12-1.18x (diag-A-nostore). So the expansion's
// arithmetic hides under the MMA, and what costs is writing the expanded stage into shared memory (16 KB a stage,
// bank-conflict free by construction); the likeliest reason, not profiled: the wgmma operand reads (about 80 KB a
// stage for two m64n256 consumers) and the TMA writes already keep shared memory busy for most of the MMA's time.
// setmaxnreg: the registers a kernel's warpgroups ask for must add up to no more than its launch allocation (168 a
// thread x 384 threads): 40 + 2 x 232 and 104 + 2 x 200 warpgroups' worth; asking for more waits forever (the
// first packed runs hung with 96 + 2 x 208).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <vector>
#include <cmath>
#include "dev/bench/bench_common.cuh"
#include "llmc/base/matmul.cuh"

namespace g90 {
constexpr int BM = 128, BN = 256, BK = 64, CONSUMERS = 2;
constexpr int THREADS = 128 * (CONSUMERS + 1);
constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2;   // one stage: 16 KB + 32 KB

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_u32(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(smem_u32(bar)) : "memory");
}
// Waits until the barrier's phase of this parity has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
    uint32_t done = 0;
    while (!done)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(smem_u32(bar)), "r"(parity) : "memory");
}
// One box of a 2D tensor map (x: the inner, contiguous coordinate) into shared memory; completes on bar.
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int x, int y) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
                 :: "r"(smem_u32(dst)), "l"((uint64_t)map), "r"(smem_u32(bar)), "r"(x), "r"(y) : "memory");
}

// wgmma's shared-memory matrix descriptor for a K-major tile of 128-byte rows written by the TMA with the 128-byte
// swizzle: start address, leading offset (unused by this layout), 1024 bytes between groups of 8 rows, swizzle mode 1.
// Stepping 16 elements along K inside the 64-element row is 32 bytes added to the start address.
__device__ __forceinline__ uint64_t smem_desc(const void* p) {
    const uint64_t a = smem_u32(p);
    return ((a & 0x3FFFF) >> 4) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory");
}
// Keeps the compiler from moving accumulator reads or writes across an asynchronous wgmma.
__device__ __forceinline__ void fence_regs(float* d) {
#pragma unroll
    for (int i = 0; i < 128; i++) asm volatile("" : "+f"(d[i]) :: "memory");
}

// d (64 x 256 FP32, the m64n256 fragment: 128 registers a thread) [+]= A (64 x 16, smem) B (256 x 16, smem)^T, the
// operands BF16 or (F16) FP16
#define WGMMA_D_REGS                                                                                                   \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                          \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                                 \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                                 \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "                                 \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "                                 \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "                                 \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "                     \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
#define WGMMA_D_OPERANDS(d) \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),\
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),\
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),\
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),\
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),\
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),\
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),\
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),\
    "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),\
    "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),\
    "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),\
    "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),\
    "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),\
    "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),\
    "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),\
    "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
template <bool F16>
__device__ __forceinline__ void wgmma_m64n256k16(float* d, uint64_t desc_a, uint64_t desc_b, int accumulate) {
    if constexpr (F16)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 " WGMMA_D_REGS ", %128, %129, p, 1, 1, 0, 0;\n}\n"
                     : WGMMA_D_OPERANDS(d) : "l"(desc_a), "l"(desc_b), "r"(accumulate));
    else
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " WGMMA_D_REGS ", %128, %129, p, 1, 1, 0, 0;\n}\n"
                     : WGMMA_D_OPERANDS(d) : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// The same with A (64 x 16, FP16) from registers: the fragment of mma.m16n8k16 for each warp's 16 rows, a[0] row
// lane/4 columns 2(lane%4) + {0,1}, a[1] 8 rows further, a[2] and a[3] the same 8 columns further.
__device__ __forceinline__ void wgmma_m64n256k16_ra(float* d, const uint32_t* a, uint64_t desc_b, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 " WGMMA_D_REGS ", {%128, %129, %130, %131}, %132, p, "
                 "1, 1, 0;\n}\n"
                 : WGMMA_D_OPERANDS(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
}

// Two forms of one kernel. "tile" (DIRECT): a CTA per output tile, 4 stages, each thread stores its BF16 results to
// global memory. "persistent": one CTA per SM walks the output tiles (tile += gridDim.x), the producer running
// ahead into the next tile's stages while the consumers finish this one; each consumer warpgroup writes its
// 64 x 256 BF16 rows into shared memory (four 64 x 64 boxes in the 128-byte swizzle: a warp's 32 stores hit 32
// banks) and one thread stores them with the TMA, so the tensor cores wait only for the shared-memory writes.
constexpr int T_STAGES = 4, P_STAGES = 3;
constexpr int P_D_BYTES = 64 * 256 * 2;   // one consumer warpgroup's rows of the tile
template <int NST, bool DIRECT>
constexpr int gemm_smem_bytes() {
    return NST * (A_BYTES + B_BYTES) + (DIRECT ? 0 : CONSUMERS * P_D_BYTES) + 1024 /* alignment */ + 2 * NST * 8;
}

__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, const void* src, int x, int y) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"
                 :: "l"((uint64_t)map), "r"(smem_u32(src)), "r"(x), "r"(y) : "memory");
}
__device__ __forceinline__ void named_sync(int id, int n) { asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(n) : "memory"); }

// Dynamic shared memory from its first 1024-aligned byte (the 128-byte swizzle's atom).
__device__ __forceinline__ uint8_t* align_1024(uint8_t* raw) { return raw + ((1024 - (smem_u32(raw) & 1023)) & 1023); }

// The stages a persistent CTA runs: nk per tile, its tiles blockIdx.x, blockIdx.x + gridDim.x, ...
__device__ __forceinline__ int cta_stages(int tiles, int nk) {
    return (tiles - (int)blockIdx.x + (int)gridDim.x - 1) / (int)gridDim.x * nk;
}

// A consumer warpgroup's multiplications of one stage (its 64 rows of A at a, B at b, both in the swizzled layout),
// added to acc unless this is a tile's first stage; returns once the previous stage's are done (its slots free).
template <bool F16>
__device__ __forceinline__ void mma_stage(float* acc, const uint8_t* a, const uint8_t* b, bool accumulate) {
    fence_regs(acc);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BK / 16; kk++)
        wgmma_m64n256k16<F16>(acc, smem_desc(a + kk * 32), smem_desc(b + kk * 32), accumulate || kk > 0);
    wgmma_commit();
    fence_regs(acc);
    wgmma_wait<1>();
    fence_regs(acc);
}

// The N-tiles of one row of tiles are neighbours in tile order (they share A's rows in L2).
__device__ __forceinline__ void tile_origin(int tile, int tiles_n, int* m0, int* n0) {
    *m0 = (tile / tiles_n) * BM;
    *n0 = (tile % tiles_n) * BN;
}

// The producer thread: A's and B's boxes of every stage of this CTA's tiles into the NST-stage ring, each stage
// once the consumers have released it (empty), its arrival on full carrying the bytes.
template <int NST>
__device__ __forceinline__ void load_tiles(uint8_t* sa, uint8_t* sb, uint64_t* full, uint64_t* empty,
                                           const CUtensorMap* map_a, const CUtensorMap* map_b, int tiles, int tiles_n,
                                           int nk) {
    int it = 0;   // stage uses so far, over all tiles
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int m0, n0;
        tile_origin(tile, tiles_n, &m0, &n0);
        for (int k = 0; k < nk; k++, it++) {
            const int s = it % NST;
            if (it >= NST) mbar_wait(&empty[s], ((it / NST) & 1) ^ 1);
            mbar_expect_tx(&full[s], A_BYTES + B_BYTES);
            tma_load_2d(sa + s * A_BYTES, map_a, &full[s], k * BK, m0);
            tma_load_2d(sb + s * B_BYTES, map_b, &full[s], k * BK, n0);
        }
    }
}

// A consumer warpgroup's 64 x 256 results (the m64n256 accumulators: register 4j + {0,1} is row warp*16 + lane/4,
// columns 8j + 2*(lane%4) + {0,1}; 4j + {2,3} 8 rows further) as BF16: DIRECT into d from registers, else into its
// shared-memory buffer my_d and out by the TMA (named barrier 1 + half), the store left in flight.
template <bool DIRECT>
__device__ __forceinline__ void store_tile(const float* acc, uint8_t* my_d, const CUtensorMap* map_d, __nv_bfloat16* d,
                                           int N, int m0, int n0, int half, int t) {
    const int warp = t / 32, lane = t % 32;
    const int r = warp * 16 + lane / 4;
    if constexpr (DIRECT) {
        __nv_bfloat16* d0 = d + (size_t)(m0 + half * 64 + r) * N + n0 + 2 * (lane % 4);
        __nv_bfloat16* d8 = d0 + (size_t)8 * N;
#pragma unroll
        for (int j = 0; j < 32; j++) {
            *(__nv_bfloat162*)(d0 + 8 * j) = __floats2bfloat162_rn(acc[4 * j], acc[4 * j + 1]);
            *(__nv_bfloat162*)(d8 + 8 * j) = __floats2bfloat162_rn(acc[4 * j + 2], acc[4 * j + 3]);
        }
        return;
    }
    // the previous tile's store must have read the buffer before it is written again
    if (t == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    named_sync(1 + half, 128);
    // box j/8 (64 columns) holds columns 64(j/8) ...; in it, row r's 16-byte chunk c sits at chunk c ^ (r % 8)
#pragma unroll
    for (int j = 0; j < 32; j++) {
        uint8_t* box = my_d + (j / 8) * (64 * 128);
        const int chunk = j % 8, byte = 4 * (lane % 4);
        __nv_bfloat162 lo = __floats2bfloat162_rn(acc[4 * j], acc[4 * j + 1]);
        __nv_bfloat162 hi = __floats2bfloat162_rn(acc[4 * j + 2], acc[4 * j + 3]);
        *(__nv_bfloat162*)(box + r * 128 + ((chunk ^ (r % 8)) * 16) + byte) = lo;
        *(__nv_bfloat162*)(box + (r + 8) * 128 + ((chunk ^ ((r + 8) % 8)) * 16) + byte) = hi;
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");   // the writes, visible to the TMA
    named_sync(1 + half, 128);
    if (t == 0) {
        for (int bx = 0; bx < 4; bx++) tma_store_2d(map_d, my_d + bx * 64 * 128, n0 + 64 * bx, m0 + half * 64);
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    }
}

// The consumer warpgroup `half` (rows 64 half ... of each 128 x 256 tile): waits for each stage of the NST-stage ring
// (full), multiplies, releases it (empty: one arrival per consumer warpgroup), and stores each tile's rows
// (store_tile).
template <int NST, bool DIRECT, bool F16 = false>
__device__ __forceinline__ void consume_tiles(const uint8_t* sa, const uint8_t* sb, uint64_t* full, uint64_t* empty,
                                              uint8_t* my_d, const CUtensorMap* map_d, __nv_bfloat16* d, int N,
                                              int half, int t, int tiles, int tiles_n, int nk) {
    float acc[128];
    int it = 0;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int m0, n0;
        tile_origin(tile, tiles_n, &m0, &n0);
        for (int k = 0; k < nk; k++, it++) {
            const int s = it % NST;
            mbar_wait(&full[s], (it / NST) & 1);
            mma_stage<F16>(acc, sa + s * A_BYTES + half * 64 * BK * 2, sb + s * B_BYTES, k > 0);
            if (k > 0 && t == 0) mbar_arrive(&empty[(it - 1) % NST]);
        }
        wgmma_wait<0>();
        fence_regs(acc);
        if (t == 0) mbar_arrive(&empty[(it - 1) % NST]);
        store_tile<DIRECT>(acc, my_d, map_d, d, N, m0, n0, half, t);
    }
    if (!DIRECT && t == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

template <int NST, bool DIRECT>
__global__ void __launch_bounds__(THREADS, 1)
gemm_tn_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
               const __grid_constant__ CUtensorMap map_d, __nv_bfloat16* d, int M, int N, int K) {
    extern __shared__ uint8_t raw_smem[];
    uint8_t* smem = align_1024(raw_smem);
    uint8_t* sa = smem;
    uint8_t* sb = sa + NST * A_BYTES;
    uint8_t* sd = sb + NST * B_BYTES;                       // CONSUMERS x P_D_BYTES unless DIRECT
    uint64_t* full = (uint64_t*)(sd + (DIRECT ? 0 : CONSUMERS * P_D_BYTES));   // loaded, for the consumers
    uint64_t* empty = full + NST;                                              // consumed, for the producer
    const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
    const int tiles_n = N / BN, tiles = (M / BM) * tiles_n, nk = K / BK;
    if (threadIdx.x == 0) {
        for (int s = 0; s < NST; s++) { mbar_init(&full[s], 1); mbar_init(&empty[s], CONSUMERS); }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (wg == CONSUMERS) {   // the producer warpgroup: one thread issues the loads
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        if (t == 0) load_tiles<NST>(sa, sb, full, empty, &map_a, &map_b, tiles, tiles_n, nk);
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    consume_tiles<NST, DIRECT>(sa, sb, full, empty, sd + wg * P_D_BYTES, &map_d, d, N, wg, t, tiles, tiles_n, nk);
}

// ---- Packed FP4 operands expanded in shared memory -----------------------------------------------------------------
// Both operands as NVFP4 without their tensor scales (which would multiply the GEMM's alpha): E2M1 codes, two per byte
// (element 2j in the low nibble of byte j of a row, bit 3 of a nibble the sign), rows K/2 bytes apart, and one E4M3
// scale per 1x16 block stored K-block-major (scale of block kb of row r at kb * rows + r, so that a stage's scales
// are one TMA box). A stage of the packed ring holds A's and B's codes and scales for 64 columns of K (13.5 KB); a
// transform warpgroup expands them into a stage of the BF16 ring (the layout the wgmma descriptors read: 128-byte
// rows, chunk c of row r at chunk c ^ (r % 8)), which the two consumer warpgroups multiply. Thread 0 of the
// transform warpgroup also issues the TMA loads, PK_STAGES - 1 stages ahead. (One transform warpgroup, not two: the
// kernel's registers per thread are capped by its thread count at compile time, and the consumers' m64n256
// accumulators need more than 512 threads leave.)
constexpr int PK_STAGES = 4, PB_STAGES = 2;
constexpr int PK_A_CODES = BM * BK / 2, PK_B_CODES = BN * BK / 2, PK_A_SC = BM * BK / 16, PK_B_SC = BN * BK / 16;
constexpr int PK_BYTES = PK_A_CODES + PK_B_CODES + PK_A_SC + PK_B_SC;   // 13,824
constexpr int PK_THREADS = 384;   // transform, consumer x 2
constexpr int PK_SMEM_BYTES = PK_STAGES * PK_BYTES + PB_STAGES * (A_BYTES + B_BYTES) + CONSUMERS * P_D_BYTES + 1024 +
                              2 * (PK_STAGES + PB_STAGES) * 8;

// 8 E2M1 codes (nibble k: element k) times their block's scale s (both halves) -> 8 BF16, exact (a code has 2
// significant bits, an E4M3 scale 4). The magnitudes' high and low bytes from two 8-entry byte tables (PRMT), then
// interleaved into BF16 pairs, then each pair's two sign bits moved to bits 15 and 31.
struct ExpandTables { uint32_t hi_a, hi_b, lo_a, lo_b; };   // the two 8-entry byte tables
// BF16 of 0, 0.5, 1, 1.5, 2, 3, 4, 6: 0000 3F00 3F80 3FC0 4000 4040 4080 40C0. (PRMT takes one table word as an
// immediate; ptxas keeps the other in a uniform register and moves it into a vector register for every PRMT, 8 of
// the ~71 instructions per 16 elements in SASS.)
__device__ __forceinline__ ExpandTables expand_tables() { return {0x3F3F3F00u, 0x40404040u, 0xC0800000u, 0xC0804000u}; }
__device__ __forceinline__ uint4 expand8(uint32_t w, __nv_bfloat162 s, const ExpandTables& t) {
    const uint32_t m = w & 0x77777777u, sg = w & 0x88888888u, sg4 = sg << 4, m2 = m >> 16;
    const uint32_t hi0 = __byte_perm(t.hi_a, t.hi_b, m), lo0 = __byte_perm(t.lo_a, t.lo_b, m);
    const uint32_t hi1 = __byte_perm(t.hi_a, t.hi_b, m2), lo1 = __byte_perm(t.lo_a, t.lo_b, m2);
    uint32_t o[4] = {__byte_perm(lo0, hi0, 0x5140), __byte_perm(lo0, hi0, 0x7362), __byte_perm(lo1, hi1, 0x5140),
                     __byte_perm(lo1, hi1, 0x7362)};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        // byte i of sg4 has element 2i's sign in bit 7, byte i of sg element 2i+1's: to bits 15 and 31
        o[i] |= __byte_perm(sg4, sg, ((4 + i) << 12) | (i << 4)) & 0x80008000u;
        __nv_bfloat162 v = *(__nv_bfloat162*)&o[i];
        v = __hmul2(v, s);
        o[i] = *(uint32_t*)&v;
    }
    return make_uint4(o[0], o[1], o[2], o[3]);
}
// An E4M3 block scale (positive) as BF16 in both halves: its bits placed in an FP32's exponent and mantissa, times
// 2^120 (exact, subnormals included).
__device__ __forceinline__ __nv_bfloat162 e4m3_bf16x2(uint32_t b) {
    const float f = __uint_as_float((b & 0x7Fu) << 20) * 0x1p120f;
    return __float2bfloat162_rn(f);
}

// The FP16 form: 8 E2M1 codes -> 8 FP16 values x 2^-6, exact, through E4M3: a code's bits s e1 e0 m placed as the E4M3
// byte s 000 e1e0m 00 is the code's value times 2^-6 (E2M1's bias is 1, E4M3's 7; e = 0 lands on E4M3's subnormals,
// 0.5 x 2^-6 = 2^-7 included), so the bytes come from shifts and masks, no table, and cvt.f16x2.e4m3x2 turns two of
// them into an FP16 pair. s64 holds the block scale times 2^6 in both halves (from 2^-3 to 28,672: FP16 normals), and
// the products (at most 2 + 4 significant bits, 2^-10 to 2,688) are exact in FP16 as in BF16, so a GEMM of these FP16
// operands multiplies the same values as one of the BF16 expansion's. Per 8 elements: 7 bit operations, 2 PRMT,
// 4 cvt (F2FP, reading the high halves in place), 4 HMUL2 (against ~36 instructions for expand8's two byte tables).
__device__ __forceinline__ uint32_t cvt_e4m3x2_f16x2(uint32_t two) {   // the low 16 bits: E4M3 bytes (lo, hi)
    uint32_t h;
    asm("{\n.reg .b16 t;\ncvt.u16.u32 t, %1;\ncvt.rn.f16x2.e4m3x2 %0, t;\n}" : "=r"(h) : "r"(two));
    return h;
}
// Four E4M3 bytes -> two FP16 pairs (bytes 0-1, bytes 2-3). The halves split with mov.b32, so ptxas reads the high
// half in place (F2FP ... R.H1) instead of shifting it down first.
__device__ __forceinline__ void cvt_e4m3x4_f16x2(uint32_t four, uint32_t* lo, uint32_t* hi) {
    asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %2;\ncvt.rn.f16x2.e4m3x2 %0, l;\ncvt.rn.f16x2.e4m3x2 %1, h;\n}"
        : "=r"(*lo), "=r"(*hi) : "r"(four));
}
// s64 scales elements 0-3, t64 elements 4-7 (one block: the same; the register-A fragment: two blocks).
__device__ __forceinline__ uint4 expand8_f16(uint32_t w, __half2 s64, __half2 t64) {
    const uint32_t e = ((w << 4) & 0x80808080u) | ((w << 2) & 0x1C1C1C1Cu);   // elements 0, 2, 4, 6 as E4M3 bytes
    const uint32_t o = (w & 0x80808080u) | ((w >> 2) & 0x1C1C1C1Cu);          // elements 1, 3, 5, 7
    const uint32_t p0 = __byte_perm(e, o, 0x5140), p1 = __byte_perm(e, o, 0x7362);   // elements 0-3, 4-7
    uint32_t h[4];
    cvt_e4m3x4_f16x2(p0, &h[0], &h[1]);
    cvt_e4m3x4_f16x2(p1, &h[2], &h[3]);
    uint32_t out[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        __half2 v = __hmul2(*(const __half2*)&h[i], i < 2 ? s64 : t64);
        out[i] = *(uint32_t*)&v;
    }
    return make_uint4(out[0], out[1], out[2], out[3]);
}
// An E4M3 block scale times 2^6 as FP16 in both halves (exact: the conversion, then a power of two).
__device__ __forceinline__ __half2 e4m3_f16x2_x64(uint32_t b) {
    const uint32_t h = cvt_e4m3x2_f16x2(b * 0x101u);
    return __hmul2(*(const __half2*)&h, __half2half2(__float2half(64.0f)));
}

// A 16-element block (two code words, one scale byte) expanded to two 8-element chunks: FP16 (expand8_f16) or BF16
// (expand8). The transform loops load every task's words and scales before expanding any
// ("expand_loads_first"): shared-memory stores and loads may alias as far as the compiler knows, so a loop that
// loads, expands and stores task by task runs each task's load latency and dependent chain one after another, and a
// transform warp (one per scheduler) stalls on them.
template <bool F16>
__device__ __forceinline__ void expand16(uint2 w, uint32_t scale_byte, const ExpandTables& tab, uint4* lo, uint4* hi) {
    if constexpr (F16) {
        const __half2 s64 = e4m3_f16x2_x64(scale_byte);
        *lo = expand8_f16(w.x, s64, s64);
        *hi = expand8_f16(w.y, s64, s64);
    } else {
        const __nv_bfloat162 s2 = e4m3_bf16x2(scale_byte);
        *lo = expand8(w.x, s2, tab);
        *hi = expand8(w.y, s2, tab);
    }
}

// A transform warpgroup's share of one stage: ROWS rows x 64 elements of packed codes (K/2 = 32 bytes a row) into the
// swizzled 16-bit stage dst (128-byte rows, chunk c of row r at chunk c ^ (r % 8)); thread t takes block t % 4 of rows
// t / 4 + 32 i, its loads all first (expand16). The scale of row r, block b sits at sc[r * sc_row + b * sc_blk]
// (K-block-major: 1 and the rows; row-major boxes: 16 and 1).
template <bool F16, int ROWS>
__device__ __forceinline__ void expand_tile(const uint8_t* codes, const uint8_t* sc, int sc_row, int sc_blk, uint8_t* dst,
                                            int t, bool store = true) {
    constexpr int NT = ROWS / 32;
    const int blk = t % 4;
    uint2 w[NT];
    uint32_t sb8[NT];
#pragma unroll
    for (int i = 0; i < NT; i++) {
        const int r = t / 4 + 32 * i;
        w[i] = *(const uint2*)(codes + r * (BK / 2) + blk * 8);
        sb8[i] = sc[r * sc_row + blk * sc_blk];
    }
    const ExpandTables tab = expand_tables();
#pragma unroll
    for (int i = 0; i < NT; i++) {
        const int r = t / 4 + 32 * i;
        uint4 lo, hi;
        expand16<F16>(w[i], sb8[i], tab, &lo, &hi);
        if (!store) continue;   // (diag-A-nostore)
        *(uint4*)(dst + r * 128 + (((2 * blk) ^ (r % 8)) * 16)) = lo;
        *(uint4*)(dst + r * 128 + (((2 * blk + 1) ^ (r % 8)) * 16)) = hi;
    }
}

// The packed stage `it` of a persistent CTA (tile blockIdx.x + (it / nk) gridDim.x, k-step it % nk): A's and B's codes
// and K-block-major scales into slot it % PK_STAGES of the ring sp, once that slot's previous use is released.
__device__ __forceinline__ void load_packed_stage(uint8_t* sp, uint64_t* pfull, uint64_t* pempty, const CUtensorMap* ac,
                                                  const CUtensorMap* as, const CUtensorMap* bc, const CUtensorMap* bs,
                                                  int it, int nk, int tiles_n) {
    const int k = it % nk, s = it % PK_STAGES;
    int m0, n0;
    tile_origin(blockIdx.x + (it / nk) * gridDim.x, tiles_n, &m0, &n0);
    uint8_t* st = sp + s * PK_BYTES;
    if (it >= PK_STAGES) mbar_wait(&pempty[s], ((it / PK_STAGES) & 1) ^ 1);
    mbar_expect_tx(&pfull[s], PK_BYTES);
    tma_load_2d(st, ac, &pfull[s], k * (BK / 2), m0);
    tma_load_2d(st + PK_A_CODES, bc, &pfull[s], k * (BK / 2), n0);
    tma_load_2d(st + PK_A_CODES + PK_B_CODES, as, &pfull[s], m0, k * (BK / 16));
    tma_load_2d(st + PK_A_CODES + PK_B_CODES + PK_A_SC, bs, &pfull[s], n0, k * (BK / 16));
}

// TASK: elements a transform thread expands at a time, 8 (a chunk: one code word, its block's scale converted for
// each chunk) or 16 (a whole block: two code words, one scale). SASS per 16 elements: ~76 and ~71 instructions.
// F16 (TASK 16 only): the expansion to FP16 through E4M3 (expand8_f16) and FP16 wgmma.
template <int TASK, bool F16>
__global__ void __launch_bounds__(PK_THREADS, 1)
gemm_packed_kernel(const __grid_constant__ CUtensorMap map_ac, const __grid_constant__ CUtensorMap map_as,
                   const __grid_constant__ CUtensorMap map_bc, const __grid_constant__ CUtensorMap map_bs,
                   const __grid_constant__ CUtensorMap map_d, int M, int N, int K) {
    extern __shared__ uint8_t raw_smem[];
    uint8_t* smem = align_1024(raw_smem);
    uint8_t* sa = smem;                                    // BF16 ring: PB_STAGES x A_BYTES, then x B_BYTES
    uint8_t* sb = sa + PB_STAGES * A_BYTES;
    uint8_t* sd = sb + PB_STAGES * B_BYTES;                // CONSUMERS x P_D_BYTES
    uint8_t* sp = sd + CONSUMERS * P_D_BYTES;              // packed ring: PK_STAGES x PK_BYTES
    uint64_t* pfull = (uint64_t*)(sp + PK_STAGES * PK_BYTES);
    uint64_t* pempty = pfull + PK_STAGES;
    uint64_t* bfull = pempty + PK_STAGES;
    uint64_t* bempty = bfull + PB_STAGES;
    const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
    const int tiles_n = N / BN, tiles = (M / BM) * tiles_n, nk = K / BK;
    if (threadIdx.x == 0) {
        for (int s = 0; s < PK_STAGES; s++) { mbar_init(&pfull[s], 1); mbar_init(&pempty[s], 128); }
        for (int s = 0; s < PB_STAGES; s++) { mbar_init(&bfull[s], 128); mbar_init(&bempty[s], CONSUMERS); }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (wg == 0) {   // the transform warpgroup (and the loads)
        asm volatile("setmaxnreg.dec.sync.aligned.u32 104;");
        const int tt = threadIdx.x;   // 0..127
        const int total = cta_stages(tiles, nk);
        auto load = [&](int it) {
            load_packed_stage(sp, pfull, pempty, &map_ac, &map_as, &map_bc, &map_bs, it, nk, tiles_n);
        };
        if (tt == 0)
            for (int it = 0; it < PK_STAGES - 1 && it < total; it++) load(it);
        for (int it = 0; it < total; it++) {
            if (tt == 0 && it + PK_STAGES - 1 < total) load(it + PK_STAGES - 1);
            const int ps = it % PK_STAGES, bs = it % PB_STAGES;
            mbar_wait(&pfull[ps], (it / PK_STAGES) & 1);
            if (it >= PB_STAGES) mbar_wait(&bempty[bs], ((it / PB_STAGES) & 1) ^ 1);
            const uint8_t* st = sp + ps * PK_BYTES;
            static_assert(TASK != 8 || !F16, "the FP16 expansion runs in tasks of 16");
            if constexpr (TASK == 0) {
                // diagnostic: no expansion (the consumers multiply stale stages), the pipeline's own bound
            } else if constexpr (TASK == 8) {
                const ExpandTables tab = expand_tables();
                // 384 rows x 8 chunks of 8 elements: chunk tt % 8 of row tt / 8 + 16 i (rows 0..127 A's, then B's);
                // every task's loads first (expand_loads_first)
                uint32_t w[24], sb8[24];
#pragma unroll
                for (int i = 0; i < 24; i++) {
                    const int row = tt / 8 + 16 * i, chunk = tt % 8;
                    const bool is_a = i < 8;
                    const int r = is_a ? row : row - BM, rows = is_a ? BM : BN;
                    const uint8_t* codes = st + (is_a ? 0 : PK_A_CODES);
                    const uint8_t* sc = st + PK_A_CODES + PK_B_CODES + (is_a ? 0 : PK_A_SC);
                    w[i] = *(const uint32_t*)(codes + r * (BK / 2) + chunk * 4);
                    sb8[i] = sc[(chunk / 2) * rows + r];
                }
#pragma unroll
                for (int i = 0; i < 24; i++) {
                    const int row = tt / 8 + 16 * i, chunk = tt % 8;
                    const bool is_a = i < 8;
                    const int r = is_a ? row : row - BM;
                    uint8_t* dst = (is_a ? sa + bs * A_BYTES : sb + bs * B_BYTES) + r * 128 + ((chunk ^ (r % 8)) * 16);
                    *(uint4*)dst = expand8(w[i], e4m3_bf16x2(sb8[i]), tab);
                }
            } else {   // A's 128 rows, then B's 256
                const uint8_t* sc = st + PK_A_CODES + PK_B_CODES;
                expand_tile<F16, BM>(st, sc, 1, BM, sa + bs * A_BYTES, tt);
                expand_tile<F16, BN>(st + PK_A_CODES, sc + PK_A_SC, 1, BN, sb + bs * B_BYTES, tt);
            }
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");   // the BF16 stage, visible to wgmma
            mbar_arrive(&pempty[ps]);
            mbar_arrive(&bfull[bs]);
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 200;");
    consume_tiles<PB_STAGES, false, F16>(sa, sb, bfull, bempty, sd + (wg - 1) * P_D_BYTES, &map_d, nullptr, N, wg - 1, t,
                                     tiles, tiles_n, nk);
}

// ---- The register-A form: A expanded by the consumers, B by the transform warpgroup -------------------------------
// The consumers expand their own A fragments into registers (wgmma's register-A form), so A never passes through the
// BF16/FP16 ring: the transform warpgroup expands only B (16 of its 24 tasks), and shared memory carries B's FP16 stage
// once written and twice read instead of A's and B's. A's codes are stored in fragment order for this: in each row's
// 32-byte group (64 elements, one stage), byte q * 8 + j holds the standard layout's byte 4 j + q (elements
// 8 j + 2 q + {0, 1}), so lane q of a fragment reads its 8 bytes with one 8-byte load (fragment_order_kernel
// rewrites standard codes so); byte j = 2 kk + {0, 1} is the 16-column slice kk's a[0|1] and a[2|3] (FP16 pairs).
// A's scales stay K-block-major. nk must be even: the consumers alternate between two fragment sets, the one being
// written never the one an in-flight wgmma reads.
// Standard codes read in fragment order: byte q of each of the row group's 8 words (two 16-byte loads, 6 PRMT).
__device__ __forceinline__ uint2 gather_fragment(const uint8_t* row, int q) {
    const uint4 u = *(const uint4*)row, v = *(const uint4*)(row + 16);
    const uint32_t sel = q | ((q + 4) << 4);
    return make_uint2(__byte_perm(__byte_perm(u.x, u.y, sel), __byte_perm(u.z, u.w, sel), 0x5410),
                      __byte_perm(__byte_perm(v.x, v.y, sel), __byte_perm(v.z, v.w, sel), 0x5410));
}
template <int NB>   // FP16 stages of B
constexpr int ra_smem_bytes() {
    return PK_STAGES * PK_BYTES + NB * B_BYTES + CONSUMERS * P_D_BYTES + 1024 + 2 * (PK_STAGES + NB) * 8;
}
// FRAG_ORDER: A's codes in fragment order (one 8-byte load per row), else standard (gather_fragment). NB: FP16
// stages of B (how far the transform warpgroup may run ahead of the consumers).
// DIAG (timing only, wrong results): 1 = B not expanded, 2 = A not expanded (its fragments constant).
template <bool FRAG_ORDER, int NB, int DIAG = 0>
__global__ void __launch_bounds__(PK_THREADS, 1)
gemm_packed_ra_kernel(const __grid_constant__ CUtensorMap map_ac, const __grid_constant__ CUtensorMap map_as,
                      const __grid_constant__ CUtensorMap map_bc, const __grid_constant__ CUtensorMap map_bs,
                      const __grid_constant__ CUtensorMap map_d, int M, int N, int K) {
    extern __shared__ uint8_t raw_smem[];
    uint8_t* smem = align_1024(raw_smem);
    uint8_t* sb = smem;                                    // FP16 ring: NB x B_BYTES
    uint8_t* sd = sb + NB * B_BYTES;                // CONSUMERS x P_D_BYTES
    uint8_t* sp = sd + CONSUMERS * P_D_BYTES;              // packed ring: PK_STAGES x PK_BYTES
    uint64_t* pfull = (uint64_t*)(sp + PK_STAGES * PK_BYTES);
    uint64_t* pempty = pfull + PK_STAGES;
    uint64_t* bfull = pempty + PK_STAGES;
    uint64_t* bempty = bfull + NB;
    const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
    const int tiles_n = N / BN, tiles = (M / BM) * tiles_n, nk = K / BK;
    if (threadIdx.x == 0) {
        // a packed stage is released by the transform warpgroup's threads and each consumer warp
        for (int s = 0; s < PK_STAGES; s++) { mbar_init(&pfull[s], 1); mbar_init(&pempty[s], 128 + 4 * CONSUMERS); }
        for (int s = 0; s < NB; s++) { mbar_init(&bfull[s], 128); mbar_init(&bempty[s], CONSUMERS); }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    const int total = cta_stages(tiles, nk);
    if (wg == 0) {   // the transform warpgroup: B's expansion, and the loads
        asm volatile("setmaxnreg.dec.sync.aligned.u32 104;");
        auto load = [&](int it) {
            load_packed_stage(sp, pfull, pempty, &map_ac, &map_as, &map_bc, &map_bs, it, nk, tiles_n);
        };
        if (t == 0)
            for (int it = 0; it < PK_STAGES - 1 && it < total; it++) load(it);
        for (int it = 0; it < total; it++) {
            if (t == 0 && it + PK_STAGES - 1 < total) load(it + PK_STAGES - 1);
            const int ps = it % PK_STAGES, bs = it % NB;
            mbar_wait(&pfull[ps], (it / PK_STAGES) & 1);
            if (it >= NB) mbar_wait(&bempty[bs], ((it / NB) & 1) ^ 1);
            const uint8_t* codes = sp + ps * PK_BYTES + PK_A_CODES;
            const uint8_t* sc = sp + ps * PK_BYTES + PK_A_CODES + PK_B_CODES + PK_A_SC;
            if constexpr (DIAG != 1) expand_tile<true, BN>(codes, sc, 1, BN, sb + bs * B_BYTES, t);
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");   // the FP16 stage, visible to wgmma
            mbar_arrive(&pempty[ps]);
            mbar_arrive(&bfull[bs]);
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 200;");
    const int half = wg - 1, lane = t % 32, q = lane % 4;
    const int ra = half * 64 + (t / 32) * 16 + lane / 4;   // this thread's A rows in the tile: ra and ra + 8
    float acc[128];
    uint32_t af0[16], af1[16];   // the fragments of even and odd stages
    int it = 0;
    // one stage: A's fragment from the packed stage (released once read), then B's FP16 stage, 4 wgmmas
    auto stage = [&](uint32_t* a, int k) {
        const int ps = it % PK_STAGES, bs = it % NB;
        mbar_wait(&pfull[ps], (it / PK_STAGES) & 1);
        const uint8_t* st = sp + ps * PK_BYTES;
        uint2 c0, c1;
        if constexpr (DIAG == 2) {
            c0 = make_uint2(0x12345678u, 0x9abcdef0u);
            c1 = c0;
        } else if constexpr (FRAG_ORDER) {
            c0 = *(const uint2*)(st + ra * (BK / 2) + q * 8);
            c1 = *(const uint2*)(st + (ra + 8) * (BK / 2) + q * 8);
        } else {
            c0 = gather_fragment(st + ra * (BK / 2), q);
            c1 = gather_fragment(st + (ra + 8) * (BK / 2), q);
        }
        const uint8_t* sc = st + PK_A_CODES + PK_B_CODES;
        __half2 s0[4], s1[4];
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            s0[kk] = DIAG == 2 ? __half2half2(__float2half(1.0f)) : e4m3_f16x2_x64(sc[kk * BM + ra]);
            s1[kk] = DIAG == 2 ? s0[kk] : e4m3_f16x2_x64(sc[kk * BM + ra + 8]);
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(&pempty[ps]);
        uint32_t frag[16];
        if constexpr (DIAG == 2) {
#pragma unroll
            for (int i = 0; i < 16; i++) frag[i] = c0.x;
        } else {
            const uint4 x0 = expand8_f16(c0.x, s0[0], s0[1]), x1 = expand8_f16(c0.y, s0[2], s0[3]);   // row ra
            const uint4 y0 = expand8_f16(c1.x, s1[0], s1[1]), y1 = expand8_f16(c1.y, s1[2], s1[3]);   // row ra + 8
            const uint32_t f[16] = {x0.x, y0.x, x0.y, y0.y, x0.z, y0.z, x0.w, y0.w,
                                    x1.x, y1.x, x1.y, y1.y, x1.z, y1.z, x1.w, y1.w};
#pragma unroll
            for (int i = 0; i < 16; i++) frag[i] = f[i];
        }
#pragma unroll
        for (int i = 0; i < 16; i++) a[i] = frag[i];
        mbar_wait(&bfull[bs], (it / NB) & 1);
        fence_regs(acc);
        wgmma_fence();
        const uint8_t* b = sb + bs * B_BYTES;
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) wgmma_m64n256k16_ra(acc, a + 4 * kk, smem_desc(b + kk * 32), k > 0 || kk > 0);
        wgmma_commit();
        fence_regs(acc);
        wgmma_wait<1>();   // the previous stage's multiplications are done
        fence_regs(acc);
        if (k > 0 && t == 0) mbar_arrive(&bempty[(it - 1) % NB]);
        it++;
    };
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int m0, n0;
        tile_origin(tile, tiles_n, &m0, &n0);
        for (int k = 0; k < nk; k += 2) {
            stage(af0, k);
            stage(af1, k + 1);
        }
        wgmma_wait<0>();
        fence_regs(acc);
        if (t == 0) mbar_arrive(&bempty[(it - 1) % NB]);
        store_tile<false>(acc, sd + half * P_D_BYTES, &map_d, nullptr, N, m0, n0, half, t);
    }
    if (t == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}
// Standard codes (byte j of a row: elements 2j, 2j + 1) -> fragment order (above), one byte per thread.
__global__ void fragment_order_kernel(uint8_t* out, const uint8_t* codes, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int64_t base = i & ~(int64_t)31;
    const int p = (int)(i & 31), q = p / 8, j = p % 8;
    out[i] = codes[base + 4 * j + q];
}

// ---- Only A packed: B as FP16 values from global memory ------------------------------------------------------------
// In the trainer's forward and data-gradient GEMMs one operand is a weight (OC x C: small, and read again by every one
// of the 512 row tiles of the tokens), so expanding it inside every tile repeats work that one plain pass does once.
// Here B arrives by TMA already as FP16 values (a weight's dequantized copy: exact in FP16, see expand8_f16), and the
// transform warpgroup expands only A (4 of its 12 tasks). A is exactly what the trainer's quantizer writes for a
// packed copy (llmc/fp4/quant.cuh, QF_OUT_PACKED): standard codes and row-major scales (M x K/16), so K % 256 == 0 (a
// TMA box row of scales is at least 16 bytes: 4 stages' worth, reloaded with each stage).
// Loads: A's packed stages by the transform warpgroup's thread 0, ahead (their slots wait only on the transform); B's by
// the first consumer's thread 0, each into the slot its consumers have just multiplied, PA_B - 1 stages ahead. (From
// a transform thread, a B load would wait for the consumers to multiply that slot, which needs the transform's next
// A stage: the transform would wait on itself. A fourth, producer warpgroup would leave the consumers under 154
// registers, fewer than wgmma m64n256's 128 accumulators need with the rest.) Rings: A's packed stages (released by
// the transform), B's FP16 stages and A's expanded stages (released by the consumers).
constexpr int PA_P = 4, PA_B = 3, PA_EXP = 2;
constexpr int PA_P_BYTES = PK_A_CODES + BM * 16;      // A's codes, and a scale box of 128 rows x 16 blocks (4 stages)
constexpr int PA_SMEM_BYTES = PA_B * B_BYTES + PA_EXP * A_BYTES + CONSUMERS * P_D_BYTES + PA_P * PA_P_BYTES + 1024 +
                              2 * (PA_P + PA_B + PA_EXP) * 8;
// F16: A expanded to FP16 through E4M3 and B FP16 values; else A to BF16 from the byte tables and B BF16 (the trainer's
// weight copies as they are).
// DIAG (timing only): 1 leaves the expansion out (the consumers multiply stale stages: the pipeline's own bound); 2
// expands but stores nothing (a store the compiler cannot drop, never taken: the expansion's arithmetic without its
// shared-memory writes).
template <bool F16, int DIAG = 0>
__global__ void __launch_bounds__(PK_THREADS, 1)
gemm_packed_a_kernel(const __grid_constant__ CUtensorMap map_ac, const __grid_constant__ CUtensorMap map_as,
                     const __grid_constant__ CUtensorMap map_b, const __grid_constant__ CUtensorMap map_d, int M, int N,
                     int K) {
    extern __shared__ uint8_t raw_smem[];
    uint8_t* smem = align_1024(raw_smem);
    uint8_t* sb = smem;                                    // B: PA_B x B_BYTES
    uint8_t* sa = sb + PA_B * B_BYTES;                     // expanded A: PA_EXP x A_BYTES
    uint8_t* sd = sa + PA_EXP * A_BYTES;                   // CONSUMERS x P_D_BYTES
    uint8_t* sp = sd + CONSUMERS * P_D_BYTES;              // packed A: PA_P x PA_P_BYTES
    uint64_t* pfull = (uint64_t*)(sp + PA_P * PA_P_BYTES);
    uint64_t* pempty = pfull + PA_P;
    uint64_t* bfull = pempty + PA_P;
    uint64_t* bempty = bfull + PA_B;
    uint64_t* afull = bempty + PA_B;
    uint64_t* aempty = afull + PA_EXP;
    const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
    const int tiles_n = N / BN, tiles = (M / BM) * tiles_n, nk = K / BK;
    if (threadIdx.x == 0) {
        for (int s = 0; s < PA_P; s++) { mbar_init(&pfull[s], 1); mbar_init(&pempty[s], 128); }
        for (int s = 0; s < PA_B; s++) { mbar_init(&bfull[s], 1); mbar_init(&bempty[s], CONSUMERS); }
        for (int s = 0; s < PA_EXP; s++) { mbar_init(&afull[s], 128); mbar_init(&aempty[s], CONSUMERS); }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    const int total = cta_stages(tiles, nk);
    auto origin = [&](int it, int* m0, int* n0) { tile_origin(blockIdx.x + (it / nk) * gridDim.x, tiles_n, m0, n0); };
    if (wg == 0) {   // the transform warpgroup: A's expansion, and A's loads
        asm volatile("setmaxnreg.dec.sync.aligned.u32 104;");
        auto load = [&](int it) {
            int m0, n0;
            origin(it, &m0, &n0);
            const int ps = it % PA_P, k = it % nk;
            if (it >= PA_P) mbar_wait(&pempty[ps], ((it / PA_P) & 1) ^ 1);
            mbar_expect_tx(&pfull[ps], PA_P_BYTES);
            tma_load_2d(sp + ps * PA_P_BYTES, &map_ac, &pfull[ps], k * (BK / 2), m0);
            tma_load_2d(sp + ps * PA_P_BYTES + PK_A_CODES, &map_as, &pfull[ps], (k / 4) * 16, m0);
        };
        if (t == 0)
            for (int it = 0; it < PA_P - 1 && it < total; it++) load(it);
        for (int it = 0; it < total; it++) {
            if (t == 0 && it + PA_P - 1 < total) load(it + PA_P - 1);
            const int ps = it % PA_P, as = it % PA_EXP;
            mbar_wait(&pfull[ps], (it / PA_P) & 1);
            if (it >= PA_EXP) mbar_wait(&aempty[as], ((it / PA_EXP) & 1) ^ 1);
            const uint8_t* codes = sp + ps * PA_P_BYTES;
            const uint8_t* sc = codes + PK_A_CODES + ((it % nk) % 4) * 4;   // this stage's 4 blocks in each 16-byte row
            if constexpr (DIAG == 0) expand_tile<F16, BM>(codes, sc, 16, 1, sa + as * A_BYTES, t);
            if constexpr (DIAG == 2) expand_tile<F16, BM>(codes, sc, 16, 1, sa + as * A_BYTES, t, M < 0);
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");   // the expanded stage, visible to wgmma
            mbar_arrive(&pempty[ps]);
            mbar_arrive(&afull[as]);
        }
        return;
    }
    // B's stage it, by the first consumer's thread 0 (its slot's previous use released)
    const bool loads_b = wg == 1 && t == 0;
    auto load_b = [&](int it) {
        int m0, n0;
        origin(it, &m0, &n0);
        const int bs = it % PA_B;
        if (it >= PA_B) mbar_wait(&bempty[bs], ((it / PA_B) & 1) ^ 1);
        mbar_expect_tx(&bfull[bs], B_BYTES);
        tma_load_2d(sb + bs * B_BYTES, &map_b, &bfull[bs], (it % nk) * BK, n0);
    };
    if (loads_b)
        for (int it = 0; it < PA_B - 1 && it < total; it++) load_b(it);
    __syncwarp();   // the warp whole again before its .aligned wgmma instructions
    asm volatile("setmaxnreg.inc.sync.aligned.u32 200;");
    const int half = wg - 1;
    float acc[128];
    int it = 0;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int m0, n0;
        tile_origin(tile, tiles_n, &m0, &n0);
        for (int k = 0; k < nk; k++, it++) {
            const int bs = it % PA_B, as = it % PA_EXP;
            mbar_wait(&bfull[bs], (it / PA_B) & 1);
            mbar_wait(&afull[as], (it / PA_EXP) & 1);
            mma_stage<F16>(acc, sa + as * A_BYTES + half * 64 * BK * 2, sb + bs * B_BYTES, k > 0);
            if (k > 0 && t == 0) {
                mbar_arrive(&bempty[(it - 1) % PA_B]);
                mbar_arrive(&aempty[(it - 1) % PA_EXP]);
            }
            // B's stage it + PA_B - 1 into the slot of stage it - 1 (released just above, or at the previous tile's end)
            if (loads_b && it + PA_B - 1 < total) load_b(it + PA_B - 1);
            __syncwarp();
        }
        wgmma_wait<0>();
        fence_regs(acc);
        if (t == 0) {
            mbar_arrive(&bempty[(it - 1) % PA_B]);
            mbar_arrive(&aempty[(it - 1) % PA_EXP]);
        }
        store_tile<false>(acc, sd + half * P_D_BYTES, &map_d, nullptr, N, m0, n0, half, t);
    }
    if (t == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}
// K-block-major scales (kb * rows + r) -> row-major (r * nkb + kb), one byte per thread.
__global__ void scales_row_major_kernel(uint8_t* out, const uint8_t* in, int rows, int nkb) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)rows * nkb) return;
    const int r = (int)(i / nkb), kb = (int)(i % nkb);
    out[i] = in[(int64_t)kb * rows + r];
}
// BF16 -> FP16 (the dequantized weights' values are exact in both)
__global__ void bf16_to_f16_kernel(__half* out, const __nv_bfloat16* in, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __float2half(__bfloat162float(in[i]));
}

// The plain twin of the expansion: one element per thread, from the E2M1 and E4M3 definitions (a table of the
// eight magnitudes, the scale's exponent and mantissa), into BF16.
__global__ void dequant_packed_kernel(__nv_bfloat16* out, const uint8_t* codes, const uint8_t* scales, int rows, int K) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)rows * K) return;
    const int r = (int)(i / K), k = (int)(i % K);
    const int c = (codes[(int64_t)r * (K / 2) + k / 2] >> (4 * (k & 1))) & 0xF;
    const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    const int sb = scales[(int64_t)(k / 16) * rows + r], e = (sb >> 3) & 0xF, mt = sb & 7;
    const float scale = e ? ldexpf(1.0f + mt / 8.0f, e - 7) : ldexpf((float)mt, -9);
    out[i] = __float2bfloat16((c & 8 ? -mag[c & 7] : mag[c & 7]) * scale);
}
// Random codes (any byte) and scales (E4M3 bytes 0x20..0x4F: 2^-3 to 2^2 x 1.875, so no product is subnormal in BF16).
__global__ void fill_packed_kernel(uint8_t* codes, uint8_t* scales, int rows, int K, uint32_t seed) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    auto hash = [](uint64_t x) { x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; return x ^ (x >> 33); };
    if (i < (int64_t)rows * (K / 2)) codes[i] = (uint8_t)hash(i * 2 + ((uint64_t)seed << 40));
    if (i < (int64_t)rows * (K / 16)) scales[i] = (uint8_t)(0x20 + hash(i * 2 + 1 + ((uint64_t)seed << 40)) % 0x30);
}

// A tensor map over a row-major rows x cols BF16 matrix, boxes of box_rows x 64 with the 128-byte swizzle (the
// layout wgmma's descriptors above read, and the epilogue's stores below write).
// The driver's cuTensorMapEncodeTiled (through the runtime, so no -lcuda), looked up once.
static PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder(void) {
    static PFN_cuTensorMapEncodeTiled_v12000 encode = NULL;
    if (!encode) {
        cudaDriverEntryPointQueryResult q;
        cuda_check(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void**)&encode, 12000,
                                                    cudaEnableDefault, &q));
        fail_if(q != cudaDriverEntryPointSuccess || !encode, "cuTensorMapEncodeTiled not found");
    }
    return encode;
}
static CUtensorMap make_map(const void* ptr, int rows, int cols, int box_rows) {
    PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
    CUtensorMap map;
    const cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)cols * 2};
    const cuuint32_t box[2] = {64, (cuuint32_t)box_rows};
    const cuuint32_t elem_strides[2] = {1, 1};
    CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void*)ptr, dims, strides, box, elem_strides,
                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    fail_if(r != CUDA_SUCCESS, "cuTensorMapEncodeTiled failed (%d)", (int)r);
    return map;
}

// A tensor map over a row-major rows x cols byte matrix, boxes of box_rows x box_cols (no swizzle).
static CUtensorMap make_map_u8(const void* ptr, int rows, int cols, int box_rows, int box_cols) {
    PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
    CUtensorMap map;
    const cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)cols};
    const cuuint32_t box[2] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows};
    const cuuint32_t elem_strides[2] = {1, 1};
    CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, (void*)ptr, dims, strides, box, elem_strides,
                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    fail_if(r != CUDA_SUCCESS, "cuTensorMapEncodeTiled (bytes) failed (%d)", (int)r);
    return map;
}

// D = A B^T from packed operands (codes, K-block-major scales; see gemm_packed_kernel).
template <int TASK, bool F16>
static void gemm_packed(__nv_bfloat16* d, const uint8_t* ac, const uint8_t* as, const uint8_t* bc, const uint8_t* bs,
                        int M, int N, int K, int sms, cudaStream_t stream) {
    fail_if(M % BM || N % BN || K % BK, "gemm_packed: M, N, K must be multiples of %d, %d, %d", BM, BN, BK);
    const CUtensorMap mac = make_map_u8(ac, M, K / 2, BM, BK / 2), mas = make_map_u8(as, K / 16, M, BK / 16, BM);
    const CUtensorMap mbc = make_map_u8(bc, N, K / 2, BN, BK / 2), mbs = make_map_u8(bs, K / 16, N, BK / 16, BN);
    const CUtensorMap md = make_map(d, M, N, 64);
    const int tiles = (M / BM) * (N / BN);
    gemm_packed_kernel<TASK, F16><<<std::min(tiles, sms), PK_THREADS, PK_SMEM_BYTES, stream>>>(mac, mas, mbc, mbs, md, M, N, K);
    cuda_check(cudaGetLastError());
}

// D = A B^T from packed operands, A's codes in fragment order or standard (gemm_packed_ra_kernel).
template <bool FRAG_ORDER, int NB, int DIAG = 0>
static void gemm_packed_ra(__nv_bfloat16* d, const uint8_t* ac, const uint8_t* as, const uint8_t* bc, const uint8_t* bs,
                           int M, int N, int K, int sms, cudaStream_t stream) {
    fail_if(M % BM || N % BN || K % (2 * BK), "gemm_packed_ra: M, N, K must be multiples of %d, %d, %d", BM, BN, 2 * BK);
    const CUtensorMap mac = make_map_u8(ac, M, K / 2, BM, BK / 2), mas = make_map_u8(as, K / 16, M, BK / 16, BM);
    const CUtensorMap mbc = make_map_u8(bc, N, K / 2, BN, BK / 2), mbs = make_map_u8(bs, K / 16, N, BK / 16, BN);
    const CUtensorMap md = make_map(d, M, N, 64);
    const int tiles = (M / BM) * (N / BN);
    gemm_packed_ra_kernel<FRAG_ORDER, NB, DIAG><<<std::min(tiles, sms), PK_THREADS, ra_smem_bytes<NB>(), stream>>>(mac, mas, mbc, mbs, md, M, N, K);
    cuda_check(cudaGetLastError());
}

// D = A B^T, A packed (codes, row-major scales: the quantizer's), B FP16 (F16) or BF16 values (gemm_packed_a_kernel).
template <bool F16, int DIAG = 0>
static void gemm_packed_a(__nv_bfloat16* d, const uint8_t* ac, const uint8_t* as, const void* b, int M, int N, int K,
                          int sms, cudaStream_t stream) {
    fail_if(M % BM || N % BN || K % 256, "gemm_packed_a: M, N, K must be multiples of %d, %d, %d", BM, BN, 256);
    const CUtensorMap mac = make_map_u8(ac, M, K / 2, BM, BK / 2), mas = make_map_u8(as, M, K / 16, BM, 16);
    const CUtensorMap mb = make_map(b, N, K, BN), md = make_map(d, M, N, 64);
    const int tiles = (M / BM) * (N / BN);
    gemm_packed_a_kernel<F16, DIAG><<<std::min(tiles, sms), PK_THREADS, PA_SMEM_BYTES, stream>>>(mac, mas, mb, md, M, N, K);
    cuda_check(cudaGetLastError());
}

// D = A B^T, BF16: the "tile" form (persistent = 0, a CTA per output tile) or the persistent one (a CTA per SM).
static void gemm_tn(__nv_bfloat16* d, const __nv_bfloat16* a, const __nv_bfloat16* b, int M, int N, int K, int persistent,
                    int sms, cudaStream_t stream) {
    fail_if(M % BM || N % BN || K % BK, "gemm_tn: M, N, K must be multiples of %d, %d, %d", BM, BN, BK);
    const CUtensorMap ma = make_map(a, M, K, BM), mb = make_map(b, N, K, BN), md = make_map(d, M, N, 64);
    const int tiles = (M / BM) * (N / BN);
    if (persistent)
        gemm_tn_kernel<P_STAGES, false><<<std::min(tiles, sms), THREADS, gemm_smem_bytes<P_STAGES, false>(), stream>>>(
            ma, mb, md, d, M, N, K);
    else
        gemm_tn_kernel<T_STAGES, true><<<tiles, THREADS, gemm_smem_bytes<T_STAGES, true>(), stream>>>(ma, mb, md, d, M, N, K);
    cuda_check(cudaGetLastError());
}
}  // namespace g90

int main(int argc, char** argv) {
    Bench bench;
    if (!bench_init(bench, argc, argv, "bench_gemm_sm90")) return 0;
    int cc_major = 0;
    cuda_check(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, 0));
    if (cc_major != 9) { printf("bench_gemm_sm90: needs an sm_90 GPU (wgmma); skipped\n"); return 0; }
    matmul_init();
    cuda_check(cudaFuncSetAttribute(g90::gemm_tn_kernel<g90::T_STAGES, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    g90::gemm_smem_bytes<g90::T_STAGES, true>()));
    cuda_check(cudaFuncSetAttribute(g90::gemm_tn_kernel<g90::P_STAGES, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    g90::gemm_smem_bytes<g90::P_STAGES, false>()));
    int sms = 0;
    cuda_check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    struct Shape { const char* name; int M, N, K; };
    const int BT = 65536, C = 768;
    static const Shape shapes[] = {
        {"qkv fprop", BT, 3 * C, C}, {"attproj fprop", BT, C, C}, {"fc fprop", BT, 4 * C, C},
        {"fcproj fprop", BT, C, 4 * C}, {"fc dgrad", BT, C, 4 * C}, {"qkv dgrad", BT, C, 3 * C},
    };
    size_t maxA = 0, maxB = 0, maxD = 0;
    for (const Shape& s : shapes) {
        maxA = std::max(maxA, (size_t)s.M * s.K);
        maxB = std::max(maxB, (size_t)s.N * s.K);
        maxD = std::max(maxD, (size_t)s.M * s.N);
    }
    __nv_bfloat16 *a, *b, *d, *dref;
    cuda_check(cudaMalloc(&a, maxA * 2));
    cuda_check(cudaMalloc(&b, maxB * 2));
    cuda_check(cudaMalloc(&d, maxD * 2));
    cuda_check(cudaMalloc(&dref, maxD * 2));
    bench_fill_uniform((uint16_t*)a, maxA);
    bench_fill_uniform((uint16_t*)b, maxB);
    // the kernels: one CTA per output tile, and the persistent form
    const char* kname[2] = {"tile", "persistent"};
    int failures = 0;
    printf("ratios: our kernel's time over cuBLASLt's (same run); err: max |ours - cublas| / max |cublas|\n");
    printf("%-14s %6s %6s %6s %9s | %-10s %9s %6s %7s %8s | %-10s %9s %6s %7s %8s\n", "GEMM", "M", "N", "K", "cublas us",
           "kernel", "us", "ratio", "TFLOP/s", "err", "kernel", "us", "ratio", "TFLOP/s", "err");
    for (const Shape& s : shapes) {
        const size_t nd = (size_t)s.M * s.N;
        matmul_forward(dref, a, b, NULL, s.M, s.K, s.N, NULL, 0);
        std::vector<uint16_t> hr(nd), hd(nd);
        cuda_check(cudaMemcpy(hr.data(), dref, nd * 2, cudaMemcpyDeviceToHost));
        double maxref = 0;
        for (size_t i = 0; i < nd; i++) maxref = fmax(maxref, fabs(bf16_bits_to_float(hr[i])));
        const double us_ref = bench_us(bench, [&] { matmul_forward(dref, a, b, NULL, s.M, s.K, s.N, NULL, 0); });
        printf("%-14s %6d %6d %6d %9.1f", s.name, s.M, s.N, s.K, us_ref);
        for (int k = 0; k < 2; k++) {
            if (!bench_wants(bench, kname[k])) continue;
            cuda_check(cudaMemset(d, 0xFF, nd * 2));   // NaN where the kernel writes nothing
            g90::gemm_tn(d, a, b, s.M, s.N, s.K, k, sms, 0);
            cuda_check(cudaDeviceSynchronize());
            cuda_check(cudaMemcpy(hd.data(), d, nd * 2, cudaMemcpyDeviceToHost));
            double maxdiff = 0;
            for (size_t i = 0; i < nd; i++) {
                const float r = bf16_bits_to_float(hr[i]), o = bf16_bits_to_float(hd[i]);
                maxdiff = fmax(maxdiff, std::isnan(o) ? INFINITY : fabs((double)o - r));
            }
            const double rel = maxdiff / maxref;
            // sums of K products of values in [-1, 1): both round the FP32 sum to BF16 (2^-8 relative), and the
            // FP32 sums differ by reassociation only, far below that
            const int ok = rel <= 1.0 / 128;
            failures += !ok;
            const double us = bench_us(bench, [&] { g90::gemm_tn(d, a, b, s.M, s.N, s.K, k, sms, 0); });
            printf(" | %-10s %9.1f %6.3f %7.0f %8.1e%s", kname[k], us, us / us_ref, 2.0 * s.M * s.N * s.K / us * 1e-6, rel,
                   ok ? "" : " FAIL");
        }
        printf("\n");
        fflush(stdout);
    }
    // packed operands: the same shapes, A and B as NVFP4 codes and block scales (random), against cuBLASLt's and the
    // persistent kernel's GEMM of their BF16 values (dequant_packed_kernel): equal to the latter bit for bit (the same
    // products in the same order)
    auto allow_smem = [](auto kernel, int bytes) {
        cuda_check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    };
    allow_smem(g90::gemm_packed_kernel<8, false>, g90::PK_SMEM_BYTES);
    allow_smem(g90::gemm_packed_kernel<16, false>, g90::PK_SMEM_BYTES);
    allow_smem(g90::gemm_packed_kernel<16, true>, g90::PK_SMEM_BYTES);
    allow_smem(g90::gemm_packed_kernel<0, true>, g90::PK_SMEM_BYTES);
    allow_smem(g90::gemm_packed_ra_kernel<true, 2>, g90::ra_smem_bytes<2>());
    allow_smem(g90::gemm_packed_ra_kernel<false, 2>, g90::ra_smem_bytes<2>());
    allow_smem(g90::gemm_packed_ra_kernel<false, 3>, g90::ra_smem_bytes<3>());
    allow_smem(g90::gemm_packed_ra_kernel<true, 2, 1>, g90::ra_smem_bytes<2>());
    allow_smem(g90::gemm_packed_ra_kernel<true, 2, 2>, g90::ra_smem_bytes<2>());
    allow_smem(g90::gemm_packed_a_kernel<true>, g90::PA_SMEM_BYTES);
    allow_smem(g90::gemm_packed_a_kernel<false>, g90::PA_SMEM_BYTES);
    allow_smem(g90::gemm_packed_a_kernel<true, 1>, g90::PA_SMEM_BYTES);
    allow_smem(g90::gemm_packed_a_kernel<true, 2>, g90::PA_SMEM_BYTES);
    uint8_t *ac, *acf, *as, *bc, *bs;
    cuda_check(cudaMalloc(&ac, maxA / 2));
    cuda_check(cudaMalloc(&acf, maxA / 2));
    cuda_check(cudaMalloc(&as, maxA / 16));
    cuda_check(cudaMalloc(&bc, maxB / 2));
    cuda_check(cudaMalloc(&bs, maxB / 16));
    __nv_bfloat16* dp;
    cuda_check(cudaMalloc(&dp, maxD * 2));
    __half* b16;   // B's values in FP16 (the A-only form's B)
    cuda_check(cudaMalloc(&b16, maxB * 2));
    uint8_t* asr;  // A's scales row-major (the A-only form's)
    cuda_check(cudaMalloc(&asr, maxA / 16));
    // the expansions: BF16 from byte tables in tasks of 8 or 16 elements, FP16 through E4M3 in tasks of 16, and FP16
    // with A expanded by the consumers in registers (its codes in fragment order, or standard gathered so; 2 or 3
    // FP16 stages of B)
    // diag-*: timing only (results wrong by design, not checked): no expansion at all in the shared-memory form; regA/frag
    // with B or A not expanded; the A-only form with A not expanded (diag-A-none) or expanded but not stored
    // (diag-A-nostore)
    // A-only: A packed and expanded by the transform warpgroup, B read as FP16 (A-only) or BF16 (A-only/bf16) values
    // (a weight's dequantized copy)
    const int NX = 13, NCHECKED = 8;
    const char* xname[NX] = {"bf16/8", "bf16/16", "f16/16", "regA/frag", "regA/std", "regA/std3", "A-only",
                             "A-only/bf16", "diag-none", "diag-noB", "diag-noA", "diag-A-none", "diag-A-nostore"};
    auto packed = [&](int x, const Shape& s) {
        if (x == 0) g90::gemm_packed<8, false>(dp, ac, as, bc, bs, s.M, s.N, s.K, sms, 0);
        else if (x == 1) g90::gemm_packed<16, false>(dp, ac, as, bc, bs, s.M, s.N, s.K, sms, 0);
        else if (x == 2) g90::gemm_packed<16, true>(dp, ac, as, bc, bs, s.M, s.N, s.K, sms, 0);
        else if (x == 3) g90::gemm_packed_ra<true, 2>(dp, acf, as, bc, bs, s.M, s.N, s.K, sms, 0);
        else if (x == 4) g90::gemm_packed_ra<false, 2>(dp, ac, as, bc, bs, s.M, s.N, s.K, sms, 0);
        else if (x == 5) g90::gemm_packed_ra<false, 3>(dp, ac, as, bc, bs, s.M, s.N, s.K, sms, 0);
        else if (x == 6) g90::gemm_packed_a<true>(dp, ac, asr, b16, s.M, s.N, s.K, sms, 0);
        else if (x == 7) g90::gemm_packed_a<false>(dp, ac, asr, b, s.M, s.N, s.K, sms, 0);
        else if (x == 8) g90::gemm_packed<0, true>(dp, ac, as, bc, bs, s.M, s.N, s.K, sms, 0);
        else if (x == 9) g90::gemm_packed_ra<true, 2, 1>(dp, acf, as, bc, bs, s.M, s.N, s.K, sms, 0);
        else if (x == 10) g90::gemm_packed_ra<true, 2, 2>(dp, acf, as, bc, bs, s.M, s.N, s.K, sms, 0);
        else if (x == 11) g90::gemm_packed_a<true, 1>(dp, ac, asr, b16, s.M, s.N, s.K, sms, 0);
        else g90::gemm_packed_a<true, 2>(dp, ac, asr, b16, s.M, s.N, s.K, sms, 0);
    };
    printf("\npacked NVFP4 operands (codes + E4M3 block scales, expanded in the kernel) vs the BF16 GEMMs of their values;\n"
           "!= persist: outputs that differ from the persistent kernel's (must be 0 except in diag-* rows)\n");
    printf("%-14s %9s %9s", "GEMM", "cublas us", "persist");
    for (int x = 0; x < NX; x++)
        if (bench_wants(bench, xname[x]))
            printf(" | %-11s %9s %6s %7s %10s %8s", "form", "us", "ratio", "TFLOP/s", "!= persist", "err");
    printf("\n");
    for (const Shape& s : shapes) {
        const size_t nd = (size_t)s.M * s.N, na = (size_t)s.M * s.K, nb = (size_t)s.N * s.K;
        g90::fill_packed_kernel<<<(unsigned)((na / 2 + 255) / 256), 256>>>(ac, as, s.M, s.K, 1);
        g90::fill_packed_kernel<<<(unsigned)((nb / 2 + 255) / 256), 256>>>(bc, bs, s.N, s.K, 2);
        g90::fragment_order_kernel<<<(unsigned)((na / 2 + 255) / 256), 256>>>(acf, ac, (int64_t)(na / 2));
        g90::dequant_packed_kernel<<<(unsigned)((na + 255) / 256), 256>>>(a, ac, as, s.M, s.K);
        g90::dequant_packed_kernel<<<(unsigned)((nb + 255) / 256), 256>>>(b, bc, bs, s.N, s.K);
        g90::bf16_to_f16_kernel<<<(unsigned)((nb + 255) / 256), 256>>>(b16, b, (int64_t)nb);
        g90::scales_row_major_kernel<<<(unsigned)((na / 16 + 255) / 256), 256>>>(asr, as, s.M, s.K / 16);
        cuda_check(cudaGetLastError());
        matmul_forward(dref, a, b, NULL, s.M, s.K, s.N, NULL, 0);
        g90::gemm_tn(d, a, b, s.M, s.N, s.K, 1, sms, 0);
        cuda_check(cudaDeviceSynchronize());
        std::vector<uint16_t> hr(nd), h1(nd), h2(nd);
        cuda_check(cudaMemcpy(hr.data(), dref, nd * 2, cudaMemcpyDeviceToHost));
        cuda_check(cudaMemcpy(h1.data(), d, nd * 2, cudaMemcpyDeviceToHost));
        double maxref = 0;
        for (size_t i = 0; i < nd; i++) maxref = fmax(maxref, fabs(bf16_bits_to_float(hr[i])));
        const double us_ref = bench_us(bench, [&] { matmul_forward(dref, a, b, NULL, s.M, s.K, s.N, NULL, 0); });
        const double us_p = bench_us(bench, [&] { g90::gemm_tn(d, a, b, s.M, s.N, s.K, 1, sms, 0); });
        printf("%-14s %9.1f %9.1f", s.name, us_ref, us_p);
        fflush(stdout);
        for (int x = 0; x < NX; x++) {
            if (!bench_wants(bench, xname[x])) continue;
            cuda_check(cudaMemset(dp, 0xFF, nd * 2));
            packed(x, s);
            cuda_check(cudaDeviceSynchronize());
            cuda_check(cudaMemcpy(h2.data(), dp, nd * 2, cudaMemcpyDeviceToHost));
            double maxdiff = 0;
            size_t differ = 0, first = nd;
            for (size_t i = 0; i < nd; i++) {
                const float r = bf16_bits_to_float(hr[i]), o = bf16_bits_to_float(h2[i]);
                maxdiff = fmax(maxdiff, std::isnan(o) ? INFINITY : fabs((double)o - r));
                differ += h1[i] != h2[i];
                if (h1[i] != h2[i] && first == nd) first = i;
            }
            if (first < nd && x < NCHECKED)
                fprintf(stderr, "%s %s: first difference at row %zu column %zu: %g, persistent %g\n", s.name, xname[x],
                        first / s.N, first % s.N, bf16_bits_to_float(h2[first]), bf16_bits_to_float(h1[first]));
            const double rel = maxdiff / maxref;
            const int ok = x >= NCHECKED || (differ == 0 && rel <= 1.0 / 128);
            failures += !ok;
            const double us = bench_us(bench, [&] { packed(x, s); });
            printf(" | %-11s %9.1f %6.3f %7.0f %10zu %8.1e%s", xname[x], us, us / us_ref, 2.0 * s.M * s.N * s.K / us * 1e-6,
                   differ, rel, ok ? "" : " FAIL");
        }
        printf("\n");
        fflush(stdout);
    }
    printf("bench_gemm_sm90: %d result(s) %s\n", failures, failures ? "FAILED the check" : "failed the check");
    matmul_destroy();
    return failures ? 1 : 0;
}
