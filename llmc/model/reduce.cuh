// reduce.cuh: deterministic column sums and sums of squares.
// defines: column_sums_add() (the fixed-order second pass other headers reuse),
//          bias_backward_scratch_bytes(), bias_backward(), sum_squares_scratch_bytes(), sum_squares()
// No float atomics anywhere: every kernel writes per-block partials to a scratch buffer, and a
// second pass adds them up in a fixed order. The block count of the first pass depends only on the
// problem shape, never on the device, so results are bit-identical from run to run (and the
// scratch size is known up front). Every *_scratch_bytes() here and in layernorm.cuh is
// nondecreasing in each argument: the size for the largest shape serves every smaller one.
#pragma once
#include "llmc/base/cuda_common.cuh"
#include "llmc/base/vec128.cuh"

// ---------------------------------------------------------------------------------------------
// out[m] += sum over g = 0..G-1 (in that order per slice, slices combined in order) of
// partials[g * ld + m], for m < M.
// Block (32, 16): x picks the column, y a slice of g; the 16 slices are combined in shared memory.

#define COLSUM_SLICES 16

__global__ void column_sums_add_kernel(float* out, const float* partials, int G, int M, size_t ld) {
    __shared__ float part[COLSUM_SLICES][32];
    int m = blockIdx.x * 32 + threadIdx.x;
    float acc = 0.0f;
    if (m < M) {
        #pragma unroll 4
        for (int g = threadIdx.y; g < G; g += COLSUM_SLICES) acc += partials[(size_t)g * ld + m];
    }
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && m < M) {
        float sum = 0.0f;
        #pragma unroll
        for (int y = 0; y < COLSUM_SLICES; y++) sum += part[y][threadIdx.x];
        out[m] += sum;
    }
}

static void column_sums_add(float* out, const float* partials, int G, int M, size_t ld, cudaStream_t s) {
    dim3 block(32, COLSUM_SLICES);
    column_sums_add_kernel<<<(unsigned)ceil_div(M, 32), block, 0, s>>>(out, partials, G, M, ld);
    cuda_check_last();
}

// ---------------------------------------------------------------------------------------------
// bias_backward: dbias[oc] += sum over rows of dout[row, oc].
// First pass: grid (column tiles of 256, row groups). A block of 32 x 8 threads: x owns 8 adjacent
// columns (one 16-byte load per row), y strides over the rows of the group. The 8 row-lanes are
// combined in shared memory in fixed order, giving one fp32 partial row per group.

#define BIASB_THREADS_X 32                       // 16-byte column chunks per block
#define BIASB_THREADS_Y 8                        // rows processed side by side
#define BIASB_TILE (BIASB_THREADS_X * 8)         // columns per block
#define BIASB_TARGET_BLOCKS 2112                 // about 2 waves of 8 blocks/SM on 132 SMs

// Row groups: enough blocks to fill the GPU (G * tiles <= BIASB_TARGET_BLOCKS), each group with
// at least 32 rows.
static int bias_backward_groups(int N, int OC) {
    int tiles = (int)ceil_div(OC, BIASB_TILE);
    int64_t g = BIASB_TARGET_BLOCKS / tiles;
    int64_t gmax = ceil_div(N, 32);
    if (g > gmax) g = gmax;
    return g < 1 ? 1 : (int)g;
}

// G * OC <= min(BIASB_TARGET_BLOCKS * BIASB_TILE, ceil(N / 32) * OC) (or OC when G = 1): a bound
// nondecreasing in N and OC, so the scratch sized for (N, 4C) also serves OC = C and 3C.
size_t bias_backward_scratch_bytes(int N, int OC) {
    int64_t by_blocks = (int64_t)BIASB_TARGET_BLOCKS * BIASB_TILE;
    int64_t by_rows = ceil_div(N, 32) * (int64_t)OC;
    int64_t floats = by_blocks < by_rows ? by_blocks : by_rows;
    if (floats < OC) floats = OC;
    return (size_t)floats * sizeof(float);
}

__global__ void __launch_bounds__(BIASB_THREADS_X * BIASB_THREADS_Y)
bias_backward_partial_kernel(float* partials, const floatX* dout, int N, int OC, int rows_per_group) {
    __shared__ float part[BIASB_THREADS_Y][BIASB_TILE];
    int col0 = blockIdx.x * BIASB_TILE + threadIdx.x * 8;
    int row_begin = blockIdx.y * rows_per_group;
    int row_end = min(row_begin + rows_per_group, N);
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (col0 < OC) {
        #pragma unroll 4
        for (int r = row_begin + threadIdx.y; r < row_end; r += BIASB_THREADS_Y) {
            float f[8];
            bf16x8_to_float(load_bf16x8_cs(dout + (size_t)r * OC + col0), f);
            #pragma unroll
            for (int k = 0; k < 8; k++) acc[k] += f[k];
        }
    }
    #pragma unroll
    for (int k = 0; k < 8; k++) part[threadIdx.y][threadIdx.x * 8 + k] = acc[k];
    __syncthreads();
    int t = threadIdx.y * BIASB_THREADS_X + threadIdx.x;   // 0..255: one column each
    int col = blockIdx.x * BIASB_TILE + t;
    if (col < OC) {
        float sum = 0.0f;
        #pragma unroll
        for (int y = 0; y < BIASB_THREADS_Y; y++) sum += part[y][t];
        partials[(size_t)blockIdx.y * OC + col] = sum;
    }
}

void bias_backward(float* dbias, void* scratch, const floatX* dout, int N, int OC, cudaStream_t s) {
    fail_if(OC % 8 != 0, "bias_backward: OC=%d must be a multiple of 8", OC);
    require_aligned16("bias_backward", dout);
    if (N <= 0) return;
    int G = bias_backward_groups(N, OC);
    int rows_per_group = (int)ceil_div(N, G);
    dim3 grid((unsigned)ceil_div(OC, BIASB_TILE), (unsigned)G);
    dim3 block(BIASB_THREADS_X, BIASB_THREADS_Y);
    bias_backward_partial_kernel<<<grid, block, 0, s>>>((float*)scratch, dout, N, OC, rows_per_group);
    cuda_check_last();
    column_sums_add(dbias, (const float*)scratch, G, OC, OC, s);
}

// ---------------------------------------------------------------------------------------------
// sum_squares: *out = sum of values[i]^2. First pass: a fixed grid of 256-thread blocks, each
// thread a grid-stride run of 16-byte loads, one partial per block. Second pass: one block adds
// the partials. The (at most 3 + 3) elements before the first 16-byte boundary and after the last
// whole vector go to the first threads of block 0, so any pointer and any n work.
// NaN and Inf propagate (NaN + x = NaN, Inf^2 = Inf).

#define SUMSQ_THREADS 256
#define SUMSQ_MAX_BLOCKS 2048
#define SUMSQ_FINAL_THREADS 1024

static int sum_squares_blocks(size_t n) {
    int64_t g = ceil_div((int64_t)n, SUMSQ_THREADS * 16);
    if (g > SUMSQ_MAX_BLOCKS) g = SUMSQ_MAX_BLOCKS;
    return g < 1 ? 1 : (int)g;
}

size_t sum_squares_scratch_bytes(size_t n) {
    return (size_t)sum_squares_blocks(n) * sizeof(float);
}

// Fixed-order block sum; the result is valid in thread 0. Needs 32 floats of shared memory.
__device__ __forceinline__ float block_sum_to_thread0(float v, float* shared32) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = warp_sum(v);
    if (lane == 0) shared32[warp] = v;
    __syncthreads();
    float r = 0.0f;
    if (warp == 0) {
        r = lane < nwarps ? shared32[lane] : 0.0f;
        r = warp_sum(r);
    }
    return r;
}

__global__ void __launch_bounds__(SUMSQ_THREADS)
sum_squares_partial_kernel(float* partials, const float* values, size_t n, size_t head) {
    __shared__ float shared32[32];
    const float4* vec = reinterpret_cast<const float4*>(values + head);
    size_t nvec = (n - head) / 4;
    size_t tail = head + nvec * 4;
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
    if (blockIdx.x == 0) {
        if (threadIdx.x < head) { float x = values[threadIdx.x]; a0 += x * x; }
        if (tail + threadIdx.x < n) { float x = values[tail + threadIdx.x]; a1 += x * x; }
    }
    size_t stride = (size_t)gridDim.x * blockDim.x;
    #pragma unroll 4
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < nvec; i += stride) {
        float4 v = __ldcs(vec + i);
        a0 += v.x * v.x; a1 += v.y * v.y; a2 += v.z * v.z; a3 += v.w * v.w;
    }
    float r = block_sum_to_thread0((a0 + a1) + (a2 + a3), shared32);
    if (threadIdx.x == 0) partials[blockIdx.x] = r;
}

__global__ void __launch_bounds__(SUMSQ_FINAL_THREADS)
sum_squares_final_kernel(float* out, const float* partials, int G) {
    __shared__ float shared32[32];
    float acc = 0.0f;
    for (int g = threadIdx.x; g < G; g += blockDim.x) acc += partials[g];
    float r = block_sum_to_thread0(acc, shared32);
    if (threadIdx.x == 0) *out = r;
}

void sum_squares(float* out, void* scratch, const float* values, size_t n, cudaStream_t s) {
    int G = sum_squares_blocks(n);
    size_t misalign = ((uintptr_t)values % 16) / sizeof(float);
    size_t head = misalign ? 4 - misalign : 0;
    if (head > n) head = n;
    fail_if((uintptr_t)values % sizeof(float) != 0, "sum_squares: values pointer not 4-byte aligned");
    sum_squares_partial_kernel<<<G, SUMSQ_THREADS, 0, s>>>((float*)scratch, values, n, head);
    cuda_check_last();
    sum_squares_final_kernel<<<1, SUMSQ_FINAL_THREADS, 0, s>>>(out, (const float*)scratch, G);
    cuda_check_last();
}
