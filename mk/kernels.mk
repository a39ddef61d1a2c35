# kernels.mk: the elementwise, normalization and loss kernels (encoder, layernorm, gelu,
# fused_classifier, reduce): their test and their benchmark.
#   build/test_kernels   checks every kernel against a CPU reference (skips without a GPU)
#   build/bench_kernels  times them at GPT-2 124M training shapes, prints GB/s

# This fragment is included before the Makefile's own `all:`; keep `all` the default goal.
.DEFAULT_GOAL := all

GPU_TESTS += build/test_kernels

# nvcc 13 rejects "--use_fast_math=false" (the flag takes no value; fast math is off by default),
# so these two targets drop it.
KERNELS_NVCC_FLAGS = $(filter-out --use_fast_math=false,$(NVCC_FLAGS))
build/test_kernels build/bench_kernels: NVCC_FLAGS := $(KERNELS_NVCC_FLAGS)

build/bench_kernels: dev/bench/bench_kernels.cu $(HEADERS)
	@mkdir -p build
	$(NVCC) $(NVCC_FLAGS) $< $(LDFLAGS) $(LDLIBS) -o $@
