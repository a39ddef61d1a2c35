// test_gpu_presence.cu: when the GPU tests skip. device_count_or_zero() (llmc/base/cuda_common.cuh) must answer
// 0 only on a machine without a GPU, stop with a message when a driver is installed but unusable, and stop
// when REQUIRE_GPU=1 asks for a GPU that is not there. Each case runs this binary again with --count in a
// child with its own environment (the dynamic loader reads LD_LIBRARY_PATH when a program starts):
//   - as it is: exits 0 and prints the device count;
//   - REQUIRE_GPU=1: the same where there is a GPU, an error where there is none;
//   - LD_LIBRARY_PATH = the directory of a stand-in libcuda.so.1 without the driver API (what the CUDA
//     runtime sees of a broken or too old driver): an error naming the driver, GPU or not.
// Runs everywhere, GPU or not. `test_gpu_presence --count` prints the count alone (scripts use it).
#include <limits.h>
#include <libgen.h>
#include "llmc/base/cuda_common.cuh"
#include "dev/test/testing.h"

typedef struct {
    const char *exe, *require_gpu, *lib_path;
} CountRun;

static void exec_count(const void* arg) {
    const CountRun* r = (const CountRun*)arg;
    if (r->require_gpu) setenv("REQUIRE_GPU", r->require_gpu, 1); else unsetenv("REQUIRE_GPU");
    if (r->lib_path) setenv("LD_LIBRARY_PATH", r->lib_path, 1);
    execl(r->exe, r->exe, "--count", (char*)NULL);
    _exit(127);
}

// Runs `exe --count` with REQUIRE_GPU and LD_LIBRARY_PATH set as given (NULL: unset). Returns its exit
// status (negative if it did not exit normally), with what it wrote to stdout and stderr in out.
static int run_count(const char* exe, const char* require_gpu, const char* lib_path, char* out, size_t cap) {
    const CountRun r = {exe, require_gpu, lib_path};
    return test_run_child_io(exec_count, &r, out, cap, 1);
}

int main(int argc, char** argv) {
    if (argc == 2 && strcmp(argv[1], "--count") == 0) {
        printf("%d\n", device_count_or_zero());
        return 0;
    }
    char exe[PATH_MAX], dir[PATH_MAX], fake[PATH_MAX + 32], out[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    fail_if(n <= 0, "test_gpu_presence: cannot find its own executable");
    exe[n] = '\0';
    memcpy(dir, exe, (size_t)n + 1);
    snprintf(fake, sizeof(fake), "%s/fake_driver", dirname(dir));   // built next to it by the Makefile

    int rc = run_count(exe, NULL, NULL, out, sizeof(out));
    int devices = rc == 0 ? atoi(out) : -1;
    CHECK(rc == 0 && devices >= 0, "device_count_or_zero on this machine: exit %d: %s", rc, out);
    printf("this machine: %d CUDA device(s), NVIDIA driver library %s\n", devices,
           cuda_driver_installed() ? "installed" : "not installed");

    rc = run_count(exe, "1", NULL, out, sizeof(out));
    if (devices > 0)
        CHECK(rc == 0 && atoi(out) == devices, "REQUIRE_GPU=1 with %d GPU(s): exit %d: %s", devices, rc, out);
    else
        CHECK(rc == 1 && strstr(out, "error: REQUIRE_GPU=1 is set, but this machine has no CUDA GPU"),
              "REQUIRE_GPU=1 without a GPU must fail with a message: exit %d: %s", rc, out);
    rc = run_count(exe, "0", NULL, out, sizeof(out));
    CHECK(rc == 0 && atoi(out) == devices, "REQUIRE_GPU=0 must change nothing: exit %d: %s", rc, out);

    char probe[PATH_MAX + 64];
    snprintf(probe, sizeof(probe), "%s/libcuda.so.1", fake);
    if (access(probe, R_OK) != 0) {
        CHECK(0, "%s is missing (make builds it with build/test_gpu_presence)", probe);
    } else {
        rc = run_count(exe, NULL, fake, out, sizeof(out));
        CHECK(rc == 1 && strstr(out, "error: an NVIDIA driver is installed but CUDA cannot use it"),
              "an installed but unusable driver must fail, not skip: exit %d: %s", rc, out);
        printf("with a broken driver: %s", out);
    }
    return test_summary("gpu_presence");
}
