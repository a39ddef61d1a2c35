# llama.mk: the Llama family's layer kernels (llmc/model/rmsnorm.cuh, rope.h, rope.cuh, swiglu.cuh).
#   build/test_llama_kernels   each kernel against a CPU reference, RoPE bit for bit against its CPU twin
#                              (rope_apply_cpu); the table and grid checks run without a GPU, the rest skip
GPU_TESTS += build/test_llama_kernels

LLAMA_KERNEL_HEADERS := llmc/model/rmsnorm.cuh llmc/model/rope.h llmc/model/rope.cuh llmc/model/swiglu.cuh \
                        llmc/model/reduce.cuh

build/test_llama_kernels: $(LLAMA_KERNEL_HEADERS) dev/test/kernel_check.cuh
# dev/test/check_resume_llama.sh: check_resume.sh on llama-tiny under nvfp4 (GPU; skips without one).
GPU_TESTS += dev/test/check_resume_llama.sh
