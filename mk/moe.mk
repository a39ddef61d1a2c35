# moe.mk: the mixture-of-experts MLP's reference twin (llmc/model/moe.h, docs/MOE.md; issue #51).
#   build/test_moe   routing (softmax top-k, sigmoid with a selection bias, the tie rule), the permutation by expert
#                    and its padding, gather and combine, the load-balancing and z losses and the gradients, the bias
#                    update, interleaving: by hand, against finite differences, and as properties (CPU)
CPU_TESTS += build/test_moe
build/test_moe: llmc/model/moe.h
