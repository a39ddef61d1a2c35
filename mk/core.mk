CPU_TESTS += build/test_core
CPU_TESTS += build/test_recipe
CPU_TESTS += build/test_plan
