CPU_TESTS += dev/test/test_python_errors.sh
