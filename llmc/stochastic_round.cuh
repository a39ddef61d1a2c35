// stochastic_round.cuh: the public header of rounding onto a coarser grid, to nearest-even or stochastically
// (BF16 master weights, FP4 grids). The arithmetic is plain C (HD functions) in llmc/fp4/stochastic_round.h,
// shared by the GPU kernels and the CPU tests; GPU code includes this header.
// defines: bf16_bits_rne(), bf16_bits_sr(), sr_bits16(), grid_round_sr()
#pragma once
#include "llmc/fp4/stochastic_round.h"
