CPU_TESTS += build/test_core
