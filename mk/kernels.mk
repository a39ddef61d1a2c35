# kernels.mk: the elementwise, normalization and loss kernels (encoder, layernorm, gelu,
# fused_classifier, reduce): their test and their benchmark.
#   build/test_kernels   checks every kernel against a CPU reference (skips without a GPU)
#   build/bench_kernels  times them at GPT-2 124M training shapes, prints GB/s

GPU_TESTS += build/test_kernels
build/test_kernels: llmc/model/target_argmax.cuh dev/test/kernel_check.cuh

build/bench_kernels: dev/bench/bench_kernels.cu $(HEADERS)
	@mkdir -p build
	$(NVCC) $(NVCC_FLAGS) $< $(LDFLAGS) $(LDLIBS) -o $@
