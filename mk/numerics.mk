# numerics.mk: build rules for the FP4 numerics (llmc/fp4_formats.h, fp4_quant_cpu.h, hadamard.cuh,
# stochastic_round.cuh, nvfp4.cuh).
#   build/test_fp4_cpu   CPU path vs dev/golden/fp4_golden.bin + property tests (CI)
#   make fp4-golden      regenerate the golden vectors with the numpy reference (dev/fp4_ref.py)
CPU_TESTS += build/test_fp4_cpu

FP4_HEADERS := llmc/fp4_formats.h llmc/fp4_quant_cpu.h llmc/hadamard.cuh llmc/stochastic_round.cuh \
               dev/test/fp4_golden.h

build/test_fp4_cpu: $(FP4_HEADERS) dev/golden/fp4_golden.bin

.PHONY: fp4-golden
fp4-golden:
	python3 dev/fp4_ref.py --check
