// common.h: what every file of the program needs, host or device.
// defines: HD (host+device qualifier), fail(), fail_if(), env_flag(), xmalloc(), fopen_check(), fread_check(),
//          fwrite_check(), fclose_check(), ceil_div()
// Plain C/C++ with no CUDA requirement, so the CPU tests build with g++ alone.
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <stdarg.h>
#include <string.h>

#if defined(__CUDACC__)
#define HD __host__ __device__ __forceinline__
#else
#define HD static inline
#endif

// One clear message, nonzero exit. Every user-facing error goes through here.
static inline void fail(const char* fmt, ...) {
    fflush(stdout);
    fprintf(stderr, "error: ");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    exit(EXIT_FAILURE);
}
#define fail_if(cond, ...) do { if (cond) fail(__VA_ARGS__); } while (0)

// An on/off switch from the environment (REQUIRE_GPU, LLMC_POISON, LLMC_QF_PATCH): on when the variable is
// set to anything but "" or "0".
static inline int env_flag(const char* name) {
    const char* e = getenv(name);
    return e && e[0] && strcmp(e, "0") != 0;
}

static inline void* xmalloc(size_t n) {
    void* p = malloc(n ? n : 1);
    fail_if(p == NULL, "out of host memory allocating %zu bytes", n);
    return p;
}

static inline FILE* fopen_check(const char* path, const char* mode) {
    FILE* f = fopen(path, mode);
    fail_if(f == NULL, "cannot open '%s' (mode %s)", path, mode);
    return f;
}
static inline void fread_check(void* dst, size_t size, size_t count, FILE* f, const char* what) {
    size_t got = fread(dst, size, count, f);
    fail_if(got != count, "%s: file truncated (read %zu of %zu items)", what, got, count);
}
static inline void fwrite_check(const void* src, size_t size, size_t count, FILE* f, const char* what) {
    size_t put = fwrite(src, size, count, f);
    fail_if(put != count, "%s: write failed (disk full?) after %zu of %zu items", what, put, count);
}
static inline void fclose_check(FILE* f, const char* what) {
    fail_if(fclose(f) != 0, "%s: close failed (disk full?)", what);
}

HD int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
