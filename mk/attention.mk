# attention.mk: llmc/model/attention.cuh (fused causal attention: cuDNN graph or own kernels).
#   build/test_attention   correctness against an FP64 CPU reference, both backends, MHA and GQA (GPU test)
#   build/bench_attention  forward/backward timing at GPT-2 and a grouped-query shape, both backends (not a test)
GPU_TESTS += build/test_attention

ATTENTION_HEADERS := llmc/model/attention.cuh llmc/model/attention_kernels.cuh llmc/model/attention_cudnn.cuh

build/test_attention: $(ATTENTION_HEADERS)

build/bench_attention: dev/bench/bench_attention.cu $(HEADERS) $(ATTENTION_HEADERS)
	@mkdir -p build
	$(NVCC) $(NVCC_FLAGS) $< $(LDFLAGS) $(LDLIBS) -o $@

# build/san_probe: which writers compute-sanitizer's initcheck sees (a diagnostic for dev/bench/check_repro.sh,
# not a test: run it under compute-sanitizer --tool initcheck)
build/san_probe: dev/test/san_probe.cu $(HEADERS) $(ATTENTION_HEADERS)
	@mkdir -p build
	$(NVCC) $(NVCC_FLAGS) $< $(LDFLAGS) $(LDLIBS) -o $@

# FP4 attention (--attention-fp4, llmc/fp4/attention_fp4.h, docs/FULLSTACK_FP4.md section 1):
#   build/test_attention_fp4_cpu   the flags and the CPU twin: copies, reuse (the backward is the gradient at the copy), dS
#   build/test_attention_fp4       the GPU path against the twin: copies bit for bit, out/dqkv within BF16 rounding
CPU_TESTS += build/test_attention_fp4_cpu
GPU_TESTS += build/test_attention_fp4

build/test_attention_fp4: $(ATTENTION_HEADERS) llmc/fp4/attention_fp4.h llmc/fp4/attention_fp4.cuh dev/test/kernel_check.cuh
