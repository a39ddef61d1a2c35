# fp8.mk: E8M0-scaled (MXFP4) operands folded into E4M3 for FP8 tensor-core GEMMs (llmc/fp4/fp8_fold.h, the fold
# in llmc/fp4/quant/fold.cuh, llmc/fp4/matmul_fp8.cuh).
#   build/test_fp8_fold     window and element fold vs CUDA's conversion (CPU); the fold kernels vs the CPU
#                           twin bit for bit, and matmul_fp8 vs the emulated GEMM (GPU); --quick fewer cases
#   build/bench_fp8_fold    fold vs fake-quant copy timings, matmul_fp8 vs BF16 GEMM at d12 shapes
#   build/bench_fp8_gemm    BF16 vs FP8 (tensor and per-row scales) cuBLASLt GEMMs at GPT-2 d12 shapes
GPU_TESTS += build/test_fp8_fold
build/test_fp8_fold: llmc/fp4/fp8_fold.h llmc/fp4/quant.cuh $(wildcard llmc/fp4/quant/*) llmc/fp4/matmul_fp8.cuh $(FP4_HEADERS)

build/bench_fp8_gemm: dev/bench/bench_fp8_gemm.cu dev/bench/bench_common.cuh llmc/base/matmul.cuh
	@mkdir -p build
	$(NVCC) $(NVCC_FLAGS) $< $(LDFLAGS) $(LDLIBS) -o $@

build/bench_fp8_fold: dev/bench/bench_fp8_fold.cu dev/bench/bench_common.cuh llmc/fp4/quant.cuh $(wildcard llmc/fp4/quant/*) llmc/fp4/matmul_fp8.cuh $(FP4_HEADERS)
	@mkdir -p build
	$(NVCC) $(NVCC_FLAGS) $< $(LDFLAGS) $(LDLIBS) -o $@
