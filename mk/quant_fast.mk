# quant_fast.mk: the GPU quantizer (llmc/fp4/quant.cuh, its files in llmc/fp4/quant/): bandwidth-bound kernels for
# every configuration the trainer and its diagnostics use (fake and packed copies, statistics), and its routing.
#   build/test_quant_route     the routing (llmc/fp4/quant/route.h) for every preset and slot option at the trainer's
#                              shapes, against the kernels' contracts (CPU)
#   build/test_quant_fast      fast vs the reference kernels (dev/ref/nvfp4_ref.cuh) bit for bit (GPU), element
#                              arithmetic vs reference (CPU); --exhaustive checks every float bit pattern on the
#                              CPU (minutes), --quick fewer cases
#   build/test_quant_gpu_cpu   fast vs the CPU quantizer (llmc/fp4/quant_cpu.h) bit for bit over every preset and
#                              slot option, special and non-finite data (GPU); --quick fewer cases
#   build/bench_quant_fast     reference vs fast kernels vs device copy at training shapes
#   build/bench_overlap        a pass on a second stream under a BF16 GEMM at d12 shapes: how much of it hides
CPU_TESTS += build/test_quant_route
GPU_TESTS += build/test_quant_fast
GPU_TESTS += build/test_quant_gpu_cpu
QUANT_HEADERS := llmc/fp4/quant.cuh $(wildcard llmc/fp4/quant/*.h llmc/fp4/quant/*.cuh)
QUANT_FAST_HEADERS := $(QUANT_HEADERS) llmc/fp4/quant_target.cuh llmc/fp4/quant_diag.cuh dev/ref/nvfp4_ref.cuh $(FP4_HEADERS)
build/test_quant_fast: $(QUANT_FAST_HEADERS)
build/test_quant_gpu_cpu: $(QUANT_FAST_HEADERS) llmc/fp4/recipe.h
build/test_quant_route: llmc/fp4/quant/route.h llmc/fp4/recipe.h llmc/fp4/linear_plan.h $(FP4_HEADERS)

build/bench_quant_fast: dev/bench/bench_quant_fast.cu dev/bench/bench_common.cuh $(QUANT_FAST_HEADERS)
	@mkdir -p build
	$(NVCC) $(NVCC_FLAGS) $< $(LDFLAGS) $(LDLIBS) -o $@

build/bench_overlap: dev/bench/bench_overlap.cu dev/bench/bench_common.cuh llmc/base/matmul.cuh $(QUANT_FAST_HEADERS)
	@mkdir -p build
	$(NVCC) $(NVCC_FLAGS) $< $(LDFLAGS) $(LDLIBS) -o $@
