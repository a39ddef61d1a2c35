CPU_TESTS += build/test_core
CPU_TESTS += build/test_recipe
