# attention.mk: llmc/attention.cuh (fused causal attention: cuDNN graph or own kernels).
#   build/test_attention   correctness against an FP64 CPU reference, both backends (GPU test)
#   build/bench_attention  forward/backward timing at GPT-2 shapes, both backends (not a test)
GPU_TESTS += build/test_attention

ATTENTION_HEADERS := llmc/attention.cuh llmc/attention_kernels.cuh llmc/attention_cudnn.cuh

build/test_attention: $(ATTENTION_HEADERS)

build/bench_attention: dev/bench/bench_attention.cu $(HEADERS) $(ATTENTION_HEADERS)
	@mkdir -p build
	$(NVCC) $(ATTENTION_NVCC_FLAGS) $< $(LDFLAGS) $(LDLIBS) -o $@

# nvcc 13.0 rejects "--use_fast_math=false" (a switch takes no value); fast math is off by default
# anyway. Filtered here for these targets only until the Makefile drops it (a no-op after that).
ATTENTION_NVCC_FLAGS = $(filter-out --use_fast_math=false,$(NVCC_FLAGS))
build/test_attention: NVCC_FLAGS := $(ATTENTION_NVCC_FLAGS)
