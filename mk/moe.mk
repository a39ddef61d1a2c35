# moe.mk: the mixture-of-experts MLP's reference twin (llmc/model/moe.h, docs/MOE.md; issue #51) and its kernels
# (llmc/model/moe.cuh).
#   build/test_moe       routing (softmax top-k, sigmoid with a selection bias, the tie rule), the permutation by expert
#                        and its padding, gather and combine, the load-balancing and z losses and the gradients, the bias
#                        update, interleaving: by hand, against finite differences, and as properties (CPU)
#   build/test_moe_gpu   the kernels against the twin on 11 shapes (ties, NaN rows, a starved expert, every token on
#                        one expert, E up to 256, k 1 to 8): bit for bit where moe.h says exact, a stated tolerance
#                        for sums; every case run twice, bit-identical (GPU test)
CPU_TESTS += build/test_moe
GPU_TESTS += build/test_moe_gpu
build/test_moe: llmc/model/moe.h
build/test_moe_gpu: llmc/model/moe.h llmc/model/moe.cuh dev/test/kernel_check.cuh
