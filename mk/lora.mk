# lora.mk: the LoRA-SVD correction (--lora-svd-rank; llmc/fp4/lora_svd.h, llmc/fp4/lora_svd.cuh).
#   build/test_lora_svd       the CPU twin: exact reconstruction below the rank, the residual against known spectra,
#                             the captured fraction of an NVFP4 residual, the side GEMMs, the resume logic (CPU)
#   build/test_lora_svd_gpu   the GPU refresh and side GEMMs against the twin, and rank 0 against no correction
#                             (GPU test: skips without a GPU)
CPU_TESTS += build/test_lora_svd
GPU_TESTS += build/test_lora_svd_gpu
build/test_lora_svd: llmc/fp4/lora_svd.h dev/test/spectra.h $(FP4_HEADERS)
build/test_lora_svd_gpu: llmc/fp4/lora_svd.h llmc/fp4/lora_svd.cuh dev/test/kernel_check.cuh dev/test/spectra.h
