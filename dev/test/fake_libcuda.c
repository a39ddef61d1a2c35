// fake_libcuda.c: a stand-in libcuda.so.1 with no driver API in it, for build/test_gpu_presence. The CUDA
// runtime that loads it answers as it does for a driver too old for it (cudaErrorInsufficientDriver):
// a driver that is installed but cannot be used.
int fake_libcuda_is_not_a_driver = 1;
