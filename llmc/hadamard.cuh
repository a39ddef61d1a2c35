// hadamard.cuh: the public header of the (randomized) Hadamard transform the FP4 recipes apply along a GEMM's
// reduction dimension. The arithmetic is plain C (HD functions, no kernels) in llmc/fp4/hadamard.h, so that
// the CPU twin, the reference kernels and the fast quantizer are one code; GPU code includes this header.
// defines: hadamard_scale(), hadamard_f32_n<N>(), hadamard_f32(), hadamard_bf16()
#pragma once
#include "llmc/fp4/hadamard.h"
