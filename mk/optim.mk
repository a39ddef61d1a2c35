# optim.mk: AdamW with its moments in NVFP4 (--optimizer-state nvfp4; llmc/fp4/optim_state.h, llmc/adamw.cuh), and
# Muon (--optimizer muon; llmc/base/muon_ref.h, llmc/muon.cuh, llmc/model/muon_plan.h).
#   build/test_optim_state       the encoder, the guards, SR's bias, the segment layout, the CPU twin against FP32
#                                AdamW (CPU)
#   build/test_optim_state_gpu   the two update kernels against the CPU twin, bit for bit (GPU test)
CPU_TESTS += build/test_optim_state
GPU_TESTS += build/test_optim_state_gpu
build/test_optim_state: llmc/fp4/optim_state.h llmc/base/adamw_step.h
build/test_optim_state_gpu: llmc/fp4/optim_state.h llmc/base/adamw_step.h llmc/adamw.cuh
#   build/test_muon              Muon's reference twin (llmc/base/muon_ref.h) against PyTorch's muon_update
#                                (dev/golden/muon_golden.bin, from dev/ref/muon_ref.py), Newton-Schulz's scalar map,
#                                its singular-value band, transposition, the scale rules; --optimizer muon's routing and
#                                matrix list (llmc/model/muon_plan.h) for both families, the ZeRO-1 owners, and
#                                --ns-fp4's settings and twin (llmc/fp4/ns_fp4.h: specs, GEMM sets, refusals, the
#                                twin against the BF16 NS) (CPU)
#   build/test_muon_gpu          the GPU path (llmc/muon.cuh) against the twin: NS and the whole update on square, tall,
#                                wide and d6 shapes, the singular-value band, zero gradients, repeatability; --ns-fp4's
#                                copies, scales and alphas bit for bit, its NS and update against its twin (GPU test)
CPU_TESTS += build/test_muon
GPU_TESTS += build/test_muon_gpu
build/test_muon: llmc/base/muon_ref.h llmc/model/muon_plan.h llmc/fp4/ns_fp4.h dev/golden/muon_golden.bin dev/test/spectra.h
build/test_muon_gpu: llmc/base/muon_ref.h llmc/muon.cuh llmc/fp4/ns_fp4.h dev/test/kernel_check.cuh dev/test/spectra.h
#   build/ns_fp4_table           --ns-fp4's table (docs/FULLSTACK_FP4.md section 3): the twin's Newton-Schulz with each
#                                set of GEMMs quantized against BF16's, per spec and input (a CPU tool, not a test)
build/ns_fp4_table: dev/ns_fp4_table.c llmc/base/muon_ref.h llmc/fp4/ns_fp4.h dev/test/spectra.h $(FP4_HEADERS)
	@mkdir -p build
	$(CXX) $(CXX_FLAGS) -x c++ $< -o $@ -lm
