# harness.mk: the test harness itself.
#   dev/test/check_includes.sh  the include rules of llmc/'s rooms (CPU)
#   build/test_gpu_presence   GPU tests skip only where there is no GPU: an installed but unusable driver
#                             (a stand-in libcuda.so.1) or REQUIRE_GPU=1 without a GPU fails (runs everywhere)
GPU_TESTS += build/test_gpu_presence

build/test_gpu_presence: build/fake_driver/libcuda.so.1

build/fake_driver/libcuda.so.1: dev/test/fake_libcuda.c
	@mkdir -p $(@D)
	$(CC) -shared -fPIC $< -o $@
CPU_TESTS += dev/test/check_includes.sh
