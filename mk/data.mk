# data.mk: the data loader and tokenizer tests (CPU only).
CPU_TESTS += build/test_data
build/test_data: dev/test/check_coverage.h
