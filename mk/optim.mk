# optim.mk: AdamW with its moments in NVFP4 (--optimizer-state nvfp4; llmc/fp4/optim_state.h, llmc/adamw.cuh).
#   build/test_optim_state       the encoder, the guards, SR's bias, the segment layout, the CPU twin against FP32
#                                AdamW (CPU)
#   build/test_optim_state_gpu   the two update kernels against the CPU twin, bit for bit (GPU test)
CPU_TESTS += build/test_optim_state
GPU_TESTS += build/test_optim_state_gpu
build/test_optim_state: llmc/fp4/optim_state.h llmc/base/adamw_step.h
build/test_optim_state_gpu: llmc/fp4/optim_state.h llmc/base/adamw_step.h llmc/adamw.cuh
#   build/test_muon              Muon's reference twin (llmc/base/muon_ref.h) against PyTorch's muon_update
#                                (dev/golden/muon_golden.bin, from dev/ref/muon_ref.py), Newton-Schulz's scalar map,
#                                its singular-value band, transposition, the scale rules (CPU; the GPU path is not built)
CPU_TESTS += build/test_muon
build/test_muon: llmc/base/muon_ref.h dev/golden/muon_golden.bin
