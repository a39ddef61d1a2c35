// kernel_check.cuh: the host helpers the GPU kernel tests share (test_kernels.cu, test_llama_kernels.cu): a seeded
// generator, BF16 conversions, device buffers (upload, download, poison), random inputs, and the comparisons (against
// per-element tolerances, relative ones, and bit for bit), each printing its worst element and one CHECK line.
// The including file defines KERNEL_CHECK_SEED, the generator's start (each test keeps its own inputs).
#pragma once
#include <vector>
#include <math.h>
#include <string.h>
#include "llmc/base/cuda_common.cuh"
#include "dev/test/testing.h"

static uint64_t rng_state = KERNEL_CHECK_SEED;
static double uniform01(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return ((rng_state >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
static double randn(void) {
    return sqrt(-2.0 * log(uniform01())) * cos(6.283185307179586 * uniform01());
}
static float bf(floatX x) { return __bfloat162float(x); }
static floatX tobf(double x) { return __float2bfloat16_rn((float)x); }

template <class T> static T* dev_alloc(size_t n, size_t guard = 0) {
    T* p;
    cuda_check(cudaMalloc((void**)&p, (n + guard) * sizeof(T)));
    return p;
}
template <class T> static T* dev_upload(const std::vector<T>& h) {
    T* p = dev_alloc<T>(h.size());
    cuda_check(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return p;
}
template <class T> static void dev_set(T* p, const std::vector<T>& h) {
    cuda_check(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
}
template <class T> static std::vector<T> dev_download(const T* p, size_t n) {
    std::vector<T> h(n);
    cuda_check(cudaDeviceSynchronize());
    cuda_check(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}
template <class T> static void poison(T* p, size_t n) { cuda_check(cudaMemset(p, 0xFF, n * sizeof(T))); }

static std::vector<floatX> rand_bf16(size_t n, double scale, double offset = 0.0) {
    std::vector<floatX> v(n);
    for (size_t i = 0; i < n; i++) v[i] = tobf(offset + scale * randn());
    return v;
}
static std::vector<float> rand_f32(size_t n, double scale) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) v[i] = (float)(scale * randn());
    return v;
}

// Compares n values; tol[i] is the allowed |got - want|. Prints the worst few with their index and one CHECK
// line per array.
static void check_array(const char* what, const std::vector<double>& got, const std::vector<double>& want,
                        const std::vector<double>& tol) {
    size_t bad = 0, first = (size_t)-1, worst = 0;
    double worst_ratio = 0.0;
    for (size_t i = 0; i < want.size(); i++) {
        double err = fabs(got[i] - want[i]);
        bool ok = err <= tol[i];                           // NaN fails
        double ratio = ok ? err / (tol[i] > 0 ? tol[i] : 1e-300) : INFINITY;
        if (!ok) {
            if (bad < 5) printf("  %s[%zu]: got %.9g want %.9g (|err| %.3g > tol %.3g)\n", what, i, got[i], want[i], err, tol[i]);
            if (first == (size_t)-1) first = i;
            bad++;
        }
        if (ratio > worst_ratio || i == 0) { worst_ratio = ratio; worst = i; }
    }
    CHECK(bad == 0 && got.size() == want.size(), "%s: %zu of %zu elements out of tolerance (first at %zu)", what, bad,
          want.size(), first);
    if (bad == 0) printf("  ok %-52s n=%-9zu worst err/tol %.3f at %zu\n", what, want.size(), worst_ratio, worst);
}
static void check_array_rel(const char* what, const std::vector<double>& got, const std::vector<double>& want,
                            double atol, double rtol) {
    std::vector<double> tol(want.size());
    for (size_t i = 0; i < want.size(); i++) tol[i] = atol + rtol * fabs(want[i]);
    check_array(what, got, want, tol);
}
static std::vector<double> as_double(const std::vector<floatX>& v) {
    std::vector<double> d(v.size());
    for (size_t i = 0; i < v.size(); i++) d[i] = bf(v[i]);
    return d;
}
static std::vector<double> as_double(const std::vector<float>& v) {
    std::vector<double> d(v.size());
    for (size_t i = 0; i < v.size(); i++) d[i] = v[i];
    return d;
}
// a and b the same bits (what: "run 2 vs run 1", "kernel vs CPU twin", ...).
template <class T> static void check_bits(const char* what, const std::vector<T>& a, const std::vector<T>& b) {
    size_t first = (size_t)-1, bad = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); i++)
        if (memcmp(&a[i], &b[i], sizeof(T)) != 0) { if (first == (size_t)-1) first = i; bad++; }
    CHECK(bad == 0 && a.size() == b.size(), "%s: %zu of %zu elements differ in their bits (first at %zu)",
          what, bad, a.size(), first);
    if (bad == 0 && a.size() == b.size()) printf("  ok %-52s n=%-9zu bit for bit\n", what, a.size());
}
