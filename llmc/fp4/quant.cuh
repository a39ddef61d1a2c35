// quant.cuh: the GPU quantizer's entry points, one include for the FP4 module's executor, tests and benchmarks.
// defines: QuantTarget, quant_fast_supported(), quantize_fast_gpu(), quant_fast_amax_gpu(), quant_fast_apply_gpu(),
//          quant_fast_stats_gpu(), quant_fast_delayed_ok(), quant_amax_accumulate(), quant_compare_gpu()
// Outputs bit-identical to the CPU quantizer (fp4/quant_cpu.h: fake BF16 or packed codes and scales, *amax,
// *scale_dec; targets and layouts: quant_target.cuh) and to the reference GPU kernels (dev/ref/nvfp4_ref.cuh),
// for the targets quant_fast_supported() accepts:
//   - 1 target, or 2 targets with different axes (one row-wise, one column-wise): the amax pass reads the
//     input once for both, the apply pass runs one kernel per target or one for both (quant/route.h);
//   - grids e2m1 / int4 / e1m2, and fp8 (E4M3 elements, MXFP8: round-to-nearest only; every block takes
//     the reference element path, as these kernels have no magic-number rounding for it);
//     blocks 1x16, 1x32, 16x16, 32x32; scales e4m3, e8m0 (floor, ceil), 4o6 (E2M1);
//     rne and sr, and MS-EDEN (eden: e2m1 1x16 e4m3 h128, one target); Hadamard 0, 2, 4, 8, 16 or 32 with any
//     signs (pairs: see qf_combo_ok);
//   - per target a fake output (16-byte aligned, ld % 8 == 0), a packed one (codes and scales, codes 8-byte
//     aligned; 4-bit grids) or an FP8 one (E8M0-scaled 4-bit specs, fp8_fold.h); a 16-byte aligned input with
//     ld % 8 == 0, cols % 8 == 0; and a shape quant_check_shape accepts (K % L, M % W, K % H).
// quant_fast_stats_gpu: the diagnostics' QuantStats of a quantization (the same targets, outputs unused).
// Anything else: quant_fast_supported() returns 0 (the trainer checks shapes before it starts, and a pair
// without a pair kernel runs as two single-target passes).
//
// The quantizer's files (llmc/fp4/quant/), by kernel family:
//   route.h            which kernels make a call's copies: the one routing decision (plain C, CPU-tested)
//   dispatch.cuh       the entry points: targets resolved for the kernels, routed, launched
//   element.cuh        element arithmetic: magic-number RNE and SR onto a grid, code index, grid constants
//   kernel_args.cuh    the kernels' arguments (QFTarget, QFArgs, QFLaunch), launch helpers
//   lane_ops.cuh       device building blocks: maxima, BF16 words, SR draws, element pairs, butterflies
//   patch.cuh          the amax pass and the general (patch) apply kernel
//   block_rule.cuh     block-scale rules per CTA, Four Over Six's candidates
//   whole_block.cuh    row-wise and column-wise fake copies laid out for whole blocks per lane, the dual form
//   tile_pipeline.cuh  the cp.async tile stages of the shared-memory column kernels
//   fold.cuh           the FP8 fold kernels: one-pass rows, columns, 32 x 32 blocks
//   group.cuh          Four Over Six's apply pass and MS-EDEN
// and the diagnostics' sums on the GPU: quant_diag.cuh (quant_compare_gpu).
#pragma once
#include "llmc/fp4/quant_target.cuh"      // QuantTarget, quant_target_fake(), quant_target_packed()
#include "llmc/fp4/quant/dispatch.cuh"    // quantize_fast_gpu(), quant_fast_*()
#include "llmc/fp4/quant_diag.cuh"        // quant_compare_gpu()
