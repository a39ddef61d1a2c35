// quant_group.cuh: the GPU quantizer for the rules whose block decision needs sums over a whole block in a
// fixed order: Four Over Six (scale rule 4o6, docs/NUMERICS_NEXT.md section 1).
// defines: qg_launch_4o6()
// Part of quant_fast.cuh (included there, after its kernel arguments; not a standalone header): the amax pass
// is quant_fast's, and quant_fast's dispatch sends 4o6 targets here for their apply pass (fake, packed or
// statistics output; E2M1 grid, blocks 1x16 to 32x32, Hadamard 0..32, as quant_fast_supported checks).
// Bit-identical to the CPU twin (fp4_quant_cpu.h, quant_cpu_pass with
// quant_block_scale_4o6_cpu); dev/test/test_quant_gpu_cpu.cu compares them.
//
// Four Over Six. One thread per unit: W operand rows x U elements along K (W the block height: 1, 16 or 32;
// U = max(L, H), so the unit holds whole blocks and whole Hadamard groups). The thread
//   1. takes each block's amax (of the rotated, BF16-rounded values with a Hadamard),
//   2. rounds every element with both candidates (the block max to 6, and to 4; the same SR bits) and sums
//      each candidate's squared error in the twin's order (operand row by row, along k; no FMA),
//   3. keeps the 4-candidate iff its sum is strictly smaller, and writes the outputs of the chosen one.
// Elements go through the reference functions (grid_round_rne / grid_round_sr / bf16_bits_rne): this path
// is about exactness, not speed (a 1D unit is loaded once; a 2D unit reads its rows once per step).
// Coalescing: row-wise (axis 1), consecutive threads take consecutive units along K of one operand row;
// column-wise (axis 0), consecutive operand rows (view columns), so each element load of a warp is 32
// neighbouring view columns.
#pragma once

#define QG_THREADS 128

// v[0..U) <- operand row i, elements [k0, k0 + U) as the quantizer sees them: rotated by H (groups of H,
// the spec's sign mask) and rounded to BF16 when the spec has a Hadamard (hadamard_bf16's arithmetic).
template <int U>
__device__ __forceinline__ void qg_load_row(const QFTarget& T, const QFArgs& A, int axis, int64_t i, int64_t k0,
                                            float (&v)[U]) {
#pragma unroll
    for (int j = 0; j < U; j++) {
        const int64_t off = axis ? i * A.ld + k0 + j : (k0 + j) * A.ld + i;
        v[j] = bf16_bits_to_float(A.in[off]);
    }
    const int H = T.p.hadamard;
    if (!H) return;
#pragma unroll
    for (int g = 0; g < U; g += 2) {   // groups of H at g = 0, H, 2H, .. (H >= 2)
        if (g % H) continue;
        switch (H) {
            case 2: hadamard_f32_n<2>(v + g, T.p.signs); break;
            case 4: if (g + 4 <= U) hadamard_f32_n<4>(v + g, T.p.signs); break;
            case 8: if (g + 8 <= U) hadamard_f32_n<8>(v + g, T.p.signs); break;
            case 16: if (g + 16 <= U) hadamard_f32_n<16>(v + g, T.p.signs); break;
            case 32: if (g + 32 <= U) hadamard_f32_n<32>(v + g, T.p.signs); break;
        }
    }
#pragma unroll
    for (int j = 0; j < U; j++) v[j] = bf16_bits_to_float(bf16_bits_rne(v[j]));
}

// The code of x (already multiplied by the block's inverse scale) under the target's rounding; SR bits of
// operand element (i, k), i.e. of view element (i, k) row-wise or (k, i) column-wise.
__device__ __forceinline__ uint8_t qg_round(const QFTarget& T, const QFArgs& A, int axis, float x, int64_t i,
                                            int64_t k) {
    if (!T.sr) return grid_round_rne(&T.p.grid, x);
    const uint32_t r16 = axis ? sr_bits16(T.key, (uint64_t)i, (uint64_t)k, (uint64_t)A.cols)
                              : sr_bits16(T.key, (uint64_t)k, (uint64_t)i, (uint64_t)A.cols);
    return grid_round_sr(&T.p.grid, x, r16);
}

// Step 2 for one operand row of the unit: both candidates' error terms of each block, added in order.
template <int U, int NB>
__device__ __forceinline__ void qg_4o6_err_row(const QFTarget& T, const QFArgs& A, int axis, int64_t i, int64_t k0,
                                               const float (&v)[U], const QuantBlockScale (&c6)[NB],
                                               const QuantBlockScale (&c4)[NB], float s_enc, float (&e6)[NB],
                                               float (&e4)[NB]) {
    const int L = U / NB;
#pragma unroll
    for (int j = 0; j < U; j++) {
        const int b = j / L;
        const uint8_t q6 = qg_round(T, A, axis, QF_MUL(v[j], c6[b].inv), i, k0 + j);
        const uint8_t q4 = qg_round(T, A, axis, QF_MUL(v[j], c4[b].inv), i, k0 + j);
        quant_4o6_err_add(&e6[b], &T.p.grid, q6, c6[b].sdec, v[j], s_enc);
        quant_4o6_err_add(&e4[b], &T.p.grid, q4, c4[b].sdec, v[j], s_enc);
    }
}

// Step 3 for one operand row: the chosen candidate's codes, written in the target's output form.
template <int U, int NB, int OUT>
__device__ __forceinline__ void qg_4o6_out_row(const QFTarget& T, const QFArgs& A, int axis, int64_t i, int64_t k0,
                                               const float (&v)[U], const QuantBlockScale (&bs)[NB], float tdec,
                                               QuantStats* st) {
    const int L = U / NB;
    const int64_t K = axis ? A.cols : A.rows;
    uint32_t packed[U / 8];
#pragma unroll
    for (int q = 0; q < U / 8; q++) packed[q] = 0;
#pragma unroll
    for (int j = 0; j < U; j++) {
        const int b = j / L;
        const float x = QF_MUL(v[j], bs[b].inv);
        const uint8_t c = qg_round(T, A, axis, x, i, k0 + j);
        if constexpr (OUT == QF_OUT_STATS) {
            quant_stats_element(st, &T.p.grid, v[j], x, c, &bs[b], tdec);
        } else if constexpr (OUT == QF_OUT_PACKED) {
            packed[j / 8] |= (uint32_t)c << (4 * (j % 8));
        } else {
            const uint16_t o = bf16_bits_rne(grid_code_value(&T.p.grid, c) * bs[b].sdec);
            T.fake[axis ? i * T.ld_fake + k0 + j : (k0 + j) * T.ld_fake + i] = o;
        }
    }
    if constexpr (OUT == QF_OUT_PACKED) {
#pragma unroll
        for (int q = 0; q < U / 8; q++) *(uint32_t*)(T.codes + i * (K / 2) + k0 / 2 + 4 * q) = packed[q];
#pragma unroll
        for (int b = 0; b < NB; b++) T.scales[i * (K / L) + k0 / L + b] = bs[b].bits;
    }
}

// One unit per thread (see the top of the file). U: the unit length along K; NB = U / L blocks per row.
template <int U, int NB, int OUT>
__global__ void __launch_bounds__(QG_THREADS) qg_4o6_kernel(const __grid_constant__ QFArgs A, int slot) {
    const QFTarget& T = A.t[slot];
    const int axis = slot == 0;
    const int64_t M = axis ? A.rows : A.cols, K = axis ? A.cols : A.rows;
    const int W = T.bw;
    const int64_t units_k = K / U, units_m = M / W;
    const int64_t u = (int64_t)blockIdx.x * QG_THREADS + threadIdx.x;
    const float s_enc = quant_tensor_scale_enc(&T.p, *T.amax);
    if (OUT != QF_OUT_STATS && u == 0) *T.scale_dec = quant_tensor_scale_dec(&T.p, s_enc);
    const float tdec = quant_tensor_scale_dec(&T.p, s_enc);
    QuantStats st;
    memset(&st, 0, sizeof(st));
    if (u < units_k * units_m) {   // (statistics: every lane reaches the warp flush below)
        const int64_t ib = axis ? u / units_k : u % units_m, kb = axis ? u % units_k : u / units_m;
        const int64_t i0 = ib * W, k0 = kb * U;
        float v[U];
        // 1. block amaxes (NaN bits sort above inf, as amax_bits_update)
        uint32_t bm[NB];
#pragma unroll
        for (int b = 0; b < NB; b++) bm[b] = 0;
        for (int r = 0; r < W; r++) {
            qg_load_row<U>(T, A, axis, i0 + r, k0, v);
#pragma unroll
            for (int j = 0; j < U; j++) bm[j / (U / NB)] = amax_bits_update(bm[j / (U / NB)], v[j]);
        }
        QuantBlockScale c6[NB], c4[NB], bs[NB];
        float e6[NB], e4[NB];
#pragma unroll
        for (int b = 0; b < NB; b++) {
            c6[b] = quant_block_scale_e4m3_to(f32_from_bits(bm[b]), s_enc, 6.0f);
            c4[b] = quant_block_scale_e4m3_to(f32_from_bits(bm[b]), s_enc, 4.0f);
            e6[b] = 0.0f;
            e4[b] = 0.0f;
        }
        // 2. both candidates' squared errors, operand row by row (a 1D unit still has v loaded)
        for (int r = 0; r < W; r++) {
            if (W > 1) qg_load_row<U>(T, A, axis, i0 + r, k0, v);
            qg_4o6_err_row<U, NB>(T, A, axis, i0 + r, k0, v, c6, c4, s_enc, e6, e4);
        }
        // 3. the choice (ties, NaN and inf: 6), then the outputs
#pragma unroll
        for (int b = 0; b < NB; b++) bs[b] = e4[b] < e6[b] ? c4[b] : c6[b];
        for (int r = 0; r < W; r++) {
            if (W > 1) qg_load_row<U>(T, A, axis, i0 + r, k0, v);
            qg_4o6_out_row<U, NB, OUT>(T, A, axis, i0 + r, k0, v, bs, tdec, &st);
        }
    }
    if constexpr (OUT == QF_OUT_STATS) quant_stats_warp_flush(st, T.stats);
}

template <int U, int NB, int OUT>
static inline void qg_launch_4o6_u(const QFLaunch& L, int slot, cudaStream_t s) {
    const QFTarget& T = L.a.t[slot];
    const int64_t M = slot == 0 ? L.a.rows : L.a.cols, K = slot == 0 ? L.a.cols : L.a.rows;
    const int64_t units = (M / T.bw) * (K / U);
    qg_4o6_kernel<U, NB, OUT><<<(unsigned)ceil_div(units, QG_THREADS), QG_THREADS, 0, s>>>(L.a, slot);
    cuda_check_last();
}

// The apply pass of the 4o6 target in slot (0: row-wise, 1: column-wise) of a prepared launch.
template <int OUT>
static inline void qg_launch_4o6(const QFLaunch& L, int slot, cudaStream_t s) {
    const QFTarget& T = L.a.t[slot];
    const int U = T.p.hadamard > T.bl ? T.p.hadamard : T.bl;   // 16 or 32
    if (U == 16) qg_launch_4o6_u<16, 1, OUT>(L, slot, s);
    else if (T.bl == 32) qg_launch_4o6_u<32, 1, OUT>(L, slot, s);
    else qg_launch_4o6_u<32, 2, OUT>(L, slot, s);
}
