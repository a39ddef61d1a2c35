// bench_overlap.cu: how much of a quantizer pass hides under a BF16 GEMM that runs at the same time on a
// second stream (issue #12's unmeasured lever: passes that do not wait on the GEMM before them, such as X's
// wgrad copy made in the forward, or the next linear's dY copies made while this linear's wgrad GEMM runs).
// At GPT-2 d12 training shapes (B*T = 65,536 tokens, C = 768), each pair timed four ways, us per pair:
//   serial   GEMM then pass on one stream (what the trainer does today)
//   g|q      GEMM launched first, pass on a second stream (fork-join with events around the pair)
//   q|g      pass launched first
//   q*|g     pass first, on a high-priority stream
// hidden% = (serial - best overlapped) / pass alone: the share of the pass's time the overlap removes.
// Usage: build/bench_overlap [-n iters]
#include "llmc/fp4/quant.cuh"
#include "llmc/base/matmul.cuh"
#include "dev/bench/bench_common.cuh"

struct Pair {
    const char* name;
    int gemm;          // 0 fprop, 1 wgrad
    int N, K, OC;      // the GEMM: fprop out (N x OC) = X (N x K) W^T; wgrad dW (OC x K) += dY (N x OC)^T X (N x K)
    const char* spec[2];
    int axis[2], n;    // the quantizer pass: n targets over an R x C tensor
    int64_t R, C;
};

int main(int argc, char** argv) {
    Bench b;
    if (!bench_init(b, argc, argv, "bench_overlap")) return 0;
    const int BT = 65536, Cm = 768;
    const Pair pairs[] = {
        {"fprop qkv | wgrad X copy (col H16)", 0, BT, Cm, 3 * Cm, {"nvfp4,h16,fixed", NULL}, {0, 0}, 1, BT, Cm},
        {"fprop fc | wgrad X copy (col H16)", 0, BT, Cm, 4 * Cm, {"nvfp4,h16,fixed", NULL}, {0, 0}, 1, BT, Cm},
        {"fprop fcproj | wgrad X copy (3072)", 0, BT, 4 * Cm, Cm, {"nvfp4,h16,fixed", NULL}, {0, 0}, 1, BT, 4 * Cm},
        {"wgrad fcproj | dual dY (3072)", 1, BT, 4 * Cm, Cm, {"nvfp4,sr", "nvfp4,sr,h16,fixed"}, {1, 0}, 2, BT, 4 * Cm},
        {"wgrad fc | dual dY (768)", 1, BT, Cm, 4 * Cm, {"nvfp4,sr", "nvfp4,sr,h16,fixed"}, {1, 0}, 2, BT, Cm},
        {"wgrad qkv | dual dY (768)", 1, BT, Cm, 3 * Cm, {"nvfp4,sr", "nvfp4,sr,h16,fixed"}, {1, 0}, 2, BT, Cm},
    };
    matmul_init();
    const size_t big = (size_t)BT * 4 * Cm;
    uint16_t *ga, *gb, *in, *f[2];
    float *gd, *sc;
    cuda_check(cudaMalloc(&ga, big * 2));
    cuda_check(cudaMalloc(&gb, big * 2));
    cuda_check(cudaMalloc(&gd, big * 4));
    cuda_check(cudaMalloc(&in, big * 2));
    for (int k = 0; k < 2; k++) cuda_check(cudaMalloc(&f[k], big * 2));
    cuda_check(cudaMalloc(&sc, 64));
    cuda_check(cudaMemset(ga, 0x3C, big * 2));
    cuda_check(cudaMemset(gb, 0x3C, big * 2));
    cuda_check(cudaMemset(gd, 0, big * 4));
    bench_fill_uniform(in, big);   // the pass's input (its kernels' speed does not depend on the values)
    int lo, hi;
    cuda_check(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    cudaStream_t s1, s2, s2hi;
    cuda_check(cudaStreamCreate(&s1));
    cuda_check(cudaStreamCreate(&s2));
    cuda_check(cudaStreamCreateWithPriority(&s2hi, cudaStreamDefault, hi));
    cudaEvent_t fork, join;
    cuda_check(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    cuda_check(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));

    printf("%-36s %8s %8s %8s %8s %8s %8s %8s\n", "GEMM | pass", "gemm", "pass", "serial", "g|q", "q|g", "q*|g",
           "hidden%");
    for (const Pair& p : pairs) {
        QuantParams qp[2];
        QuantTarget t[2];
        for (int k = 0; k < p.n; k++) {
            qp[k] = bench_params(p.spec[k]);
            t[k] = quant_target_fake(&qp[k], p.axis[k], rng_key(7, 1, 10 + k), (floatX*)f[k], p.C, sc + 2 * k, sc + 2 * k + 1);
        }
        fail_if(!quant_fast_supported(t, p.n, p.R, p.C, p.C), "bench_overlap: %s: pass not supported", p.name);
        auto gemm = [&](cudaStream_t s) {
            if (p.gemm == 0) matmul_forward((floatX*)gd, (floatX*)ga, (floatX*)gb, NULL, p.N, p.K, p.OC, NULL, s);
            else matmul_wgrad(gd, (floatX*)ga, (floatX*)gb, p.N, p.K, p.OC, NULL, s);
        };
        auto pass = [&](cudaStream_t s) { quantize_fast_gpu((const floatX*)in, p.R, p.C, p.C, t, p.n, s); };
        // one fork-join pair: both streams start after what s1 did before, s1 waits for both
        auto pair = [&](int order, cudaStream_t q) {
            cuda_check(cudaEventRecord(fork, s1));
            cuda_check(cudaStreamWaitEvent(q, fork, 0));
            if (order == 0) { gemm(s1); pass(q); }
            else { pass(q); gemm(s1); }
            cuda_check(cudaEventRecord(join, q));
            cuda_check(cudaStreamWaitEvent(s1, join, 0));
        };
        // bench_ms times on the legacy stream, which waits for s1 and s2 (blocking streams)
        const double tg = bench_us(b, [&] { gemm(s1); });
        const double tq = bench_us(b, [&] { pass(s1); });
        const double ser = bench_us(b, [&] { gemm(s1); pass(s1); });
        const double gq = bench_us(b, [&] { pair(0, s2); });
        const double qg = bench_us(b, [&] { pair(1, s2); });
        const double qhg = bench_us(b, [&] { pair(1, s2hi); });
        double best = gq < qg ? gq : qg;
        if (qhg < best) best = qhg;
        printf("%-36s %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %7.0f%%\n", p.name, tg, tq, ser, gq, qg, qhg,
               100.0 * (ser - best) / tq);
    }
    printf("\nper-step reading at d12 (11 FP4 blocks): the forward's four X copies per block, and the backward's\n"
           "dY copies of the linear after each wgrad GEMM, are the passes such a schedule would overlap.\n");
    matmul_destroy();
    return 0;
}
