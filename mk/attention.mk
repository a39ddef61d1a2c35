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
