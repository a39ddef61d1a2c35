# quant_fast.mk: the bandwidth-bound fake-quant kernels (llmc/quant_fast.cuh), bit-exact twins of
# quantize_gpu for the trainer's configurations.
#   build/test_quant_fast    fast vs quantize_gpu bit for bit (GPU), element arithmetic vs reference (CPU);
#                            --exhaustive checks every float bit pattern on the CPU (minutes), --quick fewer cases
#   build/bench_quant_fast   quantize_gpu vs quantize_fast_gpu vs device copy at training shapes
GPU_TESTS += build/test_quant_fast
build/test_quant_fast: llmc/quant_fast.cuh llmc/nvfp4.cuh $(FP4_HEADERS)

build/bench_quant_fast: dev/bench/bench_quant_fast.cu dev/bench/bench_common.cuh llmc/quant_fast.cuh llmc/nvfp4.cuh $(FP4_HEADERS)
	@mkdir -p build
	$(NVCC) $(NVCC_FLAGS) $< $(LDFLAGS) $(LDLIBS) -o $@
