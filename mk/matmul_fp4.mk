# matmul_fp4.mk: the native NVFP4 GEMM for compute capability 10.x (llmc/fp4/matmul_fp4.cuh, cuBLASLt) and its
# data layout contract (llmc/fp4/matmul_fp4_layout.h).
#   build/test_matmul_fp4       scale swizzle twin + CPU reference of the native GEMM vs dequantize-then-
#                               multiply, for fprop / dgrad / wgrad (CPU, CI)
#   build/test_matmul_fp4_gpu   swizzle kernel vs CPU twin on any GPU; on cc 10.x the native GEMM vs the
#                               emulation (dequantized BF16 + matmul.cuh); skips the GEMM part elsewhere
CPU_TESTS += build/test_matmul_fp4
GPU_TESTS += build/test_matmul_fp4_gpu

build/test_matmul_fp4: llmc/fp4/matmul_fp4_layout.h llmc/fp4/quant_cpu.h llmc/fp4/formats.h
build/test_matmul_fp4_gpu: llmc/fp4/matmul_fp4.cuh llmc/fp4/matmul_fp4_layout.h llmc/base/matmul.cuh dev/ref/nvfp4_ref.cuh

# A GEMM of our own on Hopper's wgmma against cuBLASLt's BF16 GEMM at d12 shapes (the first step towards a GEMM
# that reads packed FP4; not a test). wgmma needs the architecture-specific target sm_90a.
#   build/bench_gemm_sm90
build/bench_gemm_sm90: dev/bench/bench_gemm_sm90.cu dev/bench/bench_common.cuh llmc/base/matmul.cuh
	@mkdir -p build
	$(NVCC) $(filter-out -gencode arch=%,$(NVCC_FLAGS)) -gencode arch=compute_90a,code=sm_90a $< $(LDFLAGS) $(LDLIBS) -o $@
