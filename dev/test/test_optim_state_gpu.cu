// test_optim_state_gpu.cu: the NVFP4-moment AdamW kernels (llmc/adamw.cuh, adamw_nvfp4_update) against their CPU
// twin (llmc/fp4/optim_state.h, opt4_update_cpu), bit for bit: every code and block scale of m and sqrt(v), every
// amax, and the parameters (BF16 with stochastic rounding, or FP32 masters and their BF16 rounding), over several
// steps of a layout with per-layer tensors, a tensor that is not a multiple of 16 and a ZeRO-1-like shard that
// cuts tensors mid-layer; gradients with a spread of magnitudes (a block far below its tensor's amax takes G2)
// and a step with clipping.
#include <vector>
#include "llmc/base/cuda_common.cuh"
#include "llmc/adamw.cuh"
#include "dev/test/testing.h"

static uint64_t lcg = 0x13198A2E03707344ull;
static double urand(void) {
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return ((lcg >> 11) + 0.5) / 9007199254740992.0;
}
static double nrand(void) { return sqrt(-2.0 * log(urand())) * cos(6.283185307179586 * urand()); }

static float bf16f(uint16_t b) { return bf16_bits_to_float(b); }

static void run_case(bool fp32_master, size_t lo, size_t count) {
    // tensors: 3 layers of 100, one of 37 (whole), 3 layers of 48; laid out one after another
    const int L = 3, T = 3;
    const size_t sizes[T] = {300, 37, 144};
    const int per_layer[T] = {1, 0, 1};
    const size_t total = 300 + 37 + 144;
    const size_t toff[T] = {0, 300, 337};
    Opt4Seg segs[16];
    size_t elems = 0;
    const int S = opt4_segments(sizes, per_layer, T, L, lo, count, segs, 16, &elems);
    char name[128];
    snprintf(name, sizeof(name), "%s, optimizer range [%zu, %zu), %d segments", fp32_master ? "FP32 masters" : "BF16 + SR",
             lo, lo + count, S);
    // host data
    std::vector<uint16_t> params(total);
    std::vector<float> master(count);
    for (size_t i = 0; i < total; i++) params[i] = bf16_bits_rne((float)nrand() * 0.02f);
    for (size_t i = 0; i < count; i++) master[i] = bf16f(params[lo + i]);
    const size_t state_bytes = opt4_bytes(elems, S) + (size_t)S * 2 * sizeof(float);
    std::vector<uint8_t> h_state(state_bytes, 0);
    Opt4HostState hs = opt4_state_in(h_state.data(), elems);
    // device
    floatX* d_params; float* d_master = NULL; float* d_grads; uint8_t* d_state;
    cuda_check(cudaMalloc(&d_params, total * sizeof(floatX)));
    cuda_check(cudaMalloc(&d_grads, total * sizeof(float)));
    cuda_check(cudaMalloc(&d_state, state_bytes));
    cuda_check(cudaMemcpy(d_params, params.data(), total * 2, cudaMemcpyHostToDevice));
    cuda_check(cudaMemset(d_state, 0, state_bytes));
    if (fp32_master) {
        cuda_check(cudaMalloc(&d_master, count * sizeof(float)));
        cuda_check(cudaMemcpy(d_master, master.data(), count * 4, cudaMemcpyHostToDevice));
    }
    float* d_amax = opt4_state_in(d_state, elems).amax;
    const uint64_t seed = 42;
    std::vector<float> grads(total);
    for (int step = 1; step <= 6; step++) {
        for (size_t i = 0; i < total; i++) {
            const double scale = i % 97 < 16 ? 1e-9 : (i % 7 == 0 ? 10.0 : 1e-2);   // blocks far below the max: G2
            grads[i] = (float)(nrand() * scale);
        }
        cuda_check(cudaMemcpy(d_grads, grads.data(), total * 4, cudaMemcpyHostToDevice));
        AdamWParams a = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step == 4 ? 0.25f : 1.0f, step, 0};
        cuda_check(cudaMemset(d_amax + 2 * S, 0, (size_t)S * 2 * sizeof(float)));
        for (int s = 0; s < S; s++) {
            const Opt4Seg* sg = &segs[s];
            a.weight_decay = sg->tensor == 1 ? 0.0f : 0.1f;
            a.rng_key = rng_key(seed, (uint32_t)step, 1000u + (uint32_t)sg->tensor);
            const Opt4Step st = opt4_step_init(&a);
            const Opt4Device v = opt4_device_view(d_state, elems, S, sg, s, seed, step);
            const size_t b = sg->begin, woff = b - toff[sg->tensor];
            adamw_nvfp4_update(d_params + b, d_master ? d_master + (b - lo) : NULL, d_grads + b, &v, sg->n, woff, &st, 0);
            // the twin
            std::vector<float> p(sg->n);
            for (size_t i = 0; i < sg->n; i++) p[i] = fp32_master ? master[b - lo + i] : bf16f(params[b + i]);
            opt4_update_cpu(p.data(), grads.data() + b, sg, s, &hs, &st, seed, (uint32_t)step);
            for (size_t i = 0; i < sg->n; i++) {
                if (fp32_master) {
                    master[b - lo + i] = p[i];
                    params[b + i] = bf16_bits_rne(p[i]);
                } else {
                    params[b + i] = bf16_bits_sr(p[i], rng_bits32(a.rng_key, woff + i));
                }
            }
        }
        cuda_check(cudaMemcpy(d_amax, d_amax + 2 * S, (size_t)S * 2 * sizeof(float), cudaMemcpyDeviceToDevice));
        // compare everything after each step
        std::vector<uint8_t> g_state(state_bytes);
        std::vector<uint16_t> g_params(total);
        cuda_check(cudaMemcpy(g_state.data(), d_state, opt4_bytes(elems, S), cudaMemcpyDeviceToHost));
        cuda_check(cudaMemcpy(g_params.data(), d_params, total * 2, cudaMemcpyDeviceToHost));
        size_t bad_state = 0, first = 0;
        for (size_t i = 0; i < opt4_bytes(elems, S); i++)
            if (g_state[i] != h_state[i]) { if (!bad_state) first = i; bad_state++; }
        size_t bad_p = 0;
        for (size_t i = 0; i < total; i++) bad_p += g_params[i] != params[i];
        CHECK(bad_state == 0, "%s, step %d: %zu of %zu state bytes differ from the twin (first at byte %zu: %u vs %u)",
              name, step, bad_state, opt4_bytes(elems, S), first, g_state[first], h_state[first]);
        CHECK(bad_p == 0, "%s, step %d: %zu of %zu BF16 parameters differ from the twin", name, step, bad_p, total);
        if (fp32_master) {
            std::vector<float> g_master(count);
            cuda_check(cudaMemcpy(g_master.data(), d_master, count * 4, cudaMemcpyDeviceToHost));
            CHECK(memcmp(g_master.data(), master.data(), count * 4) == 0, "%s, step %d: FP32 masters differ", name, step);
        }
    }
    // the state is not trivial: some G2 scales, nonzero amaxes
    int g2 = 0;
    for (size_t i = 0; i < opt4_scale_bytes(elems); i++) g2 += hs.scales[1][i] == 1;
    printf("  %s: %d blocks of sqrt(v) at the smallest scale (G2)\n", name, g2);
    cudaFree(d_params); cudaFree(d_grads); cudaFree(d_state); cudaFree(d_master);
}

int main(void) {
    if (device_count_or_zero() == 0) {
        test_skip("optim_state_gpu", "no CUDA GPU on this machine");
        return test_summary("optim_state_gpu");
    }
    run_case(false, 0, 481);     // every parameter
    run_case(true, 0, 481);
    run_case(false, 150, 250);   // a shard cutting tensor 0's layer 1 and tensor 2's layer 1
    run_case(true, 150, 250);
    return test_summary("optim_state_gpu");
}
