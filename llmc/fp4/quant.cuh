// quant.cuh: the GPU quantizer's entry points, one include for the FP4 module's executor, tests and benchmarks.
// defines: QuantTarget, quant_fast_supported(), quantize_fast_gpu(), quant_fast_apply_gpu(), quant_fast_stats_gpu(),
//          quant_fast_delayed_ok(), quant_compare_gpu()
#pragma once
#include "llmc/fp4/quant_fast.cuh"
#include "llmc/fp4/quant_diag.cuh"
