# numerics.mk: build rules for the FP4 numerics (llmc/fp4/formats.h, fp4/quant_cpu.h, hadamard.cuh,
# stochastic_round.cuh; the reference GPU kernels dev/ref/nvfp4_ref.cuh).
#   build/test_fp4_cpu   CPU path vs dev/golden/fp4_golden.bin + property tests (CI)
#   build/test_eden      MS-EDEN beyond the golden vectors: scale SR, sum order, unbiasedness, MSE (CI)
#   make fp4-golden      regenerate the golden vectors with the numpy reference (dev/fp4_ref.py)
CPU_TESTS += build/test_fp4_cpu build/test_eden

build/test_fp4_cpu: $(FP4_HEADERS) dev/golden/fp4_golden.bin
build/test_eden: $(FP4_HEADERS)

.PHONY: fp4-golden
fp4-golden:
	python3 dev/fp4_ref.py --check

# GPU side: kernels vs the same golden vectors and vs the CPU path; MSE tool; bandwidth benchmark.
# (nvcc 13 rejects "--use_fast_math=false", a flag the Makefile may carry; fast math is off by default.)
GPU_TESTS += build/test_fp4_gpu
FP4_NVCC_FLAGS = $(filter-out --use_fast_math=false,$(NVCC_FLAGS))
build/test_fp4_gpu build/bench_quant: NVCC_FLAGS := $(FP4_NVCC_FLAGS)
build/test_fp4_gpu: $(FP4_HEADERS) dev/ref/nvfp4_ref.cuh dev/golden/fp4_golden.bin

build/fp4_mse: dev/fp4_mse.c $(FP4_HEADERS)
	@mkdir -p build
	$(CXX) $(CXX_FLAGS) -x c++ $< -o $@ -lm

build/bench_quant: dev/bench/bench_quant.cu dev/bench/bench_common.cuh $(FP4_HEADERS) dev/ref/nvfp4_ref.cuh
	@mkdir -p build
	$(NVCC) $(NVCC_FLAGS) $< $(LDFLAGS) $(LDLIBS) -o $@
