// test_attention_fp4.cu: FP4 attention on the GPU (attention_fp4_forward/backward in llmc/model/attention.cuh, the
// quantization in llmc/fp4/attention_fp4.cuh) against its CPU twin (llmc/fp4/attention_fp4.h).
// Checks, for nvfp4-2d (one dS copy), nvfp4 and mxfp4 (1D: two dS copies), multi-head and grouped-query, T a multiple
// of 64 and not (T = 96), head sizes 64 and 128:
//   - the quantized Q/K/V copy and its three factors equal the twin's (quant_cpu) bit for bit;
//   - out and stats match the twin's forward on that copy;
//   - the dS copies equal quant_cpu of the GPU's BF16 dS bit for bit (the quantizer's exactness), and the GPU's dS
//     matches the twin's dS;
//   - dqkv matches the twin's backward fed with the GPU's dS bits (so both multiply the same quantized dS);
//   - a second run gives the same bits (out, stats, the copies, dqkv);
//   - --attention-fp4 bf16 (own kernels, nothing quantized) gives the bits of the plain own kernels, forward and
//     backward; Q/K/V quantized with a BF16 dS matches the twin too (the fused backward with the copy's factors);
//   - the drop-in control (--attention-fp4-backward bf16) is the plain own backward on the BF16 qkv, bit for bit.
// Tolerances, and why. The twin runs in double on the same BF16 copies and factors, so differences come from the
// GPU's rounding alone (test_attention.cu discusses each): out, dqkv and dS stored in BF16 (2^-9 relative); P
// rounded to BF16 before P.V and P^T.dO; S, dP accumulated in FP32; D from the BF16 out (the twin takes the GPU's
// out). Each element: |got - want| <= 2^-5 rms(want) + 2^-6 |want|, and the tensor's relative L2 error <= 2^-7, as
// test_attention.cu minus its per-term allowance, which its rows of up to 2048 keys needed and these of <= 128 do
// not. dQ and dK from a quantized dS multiply exact BF16 copies (fake values, code x block scale) in FP32, so they
// are tighter: 2^-8 |want| + 2^-10 rms(want) (the BF16 rounding of the result, and FP32 sums of <= 128 terms).
// dS itself (GPU, FP32 then BF16, against the twin's double): 2^-5 rms + 2^-6 |want|, as for the outputs.
#define KERNEL_CHECK_SEED 0xA77E4F4ull
#include "llmc/model/attention.cuh"
#include "llmc/fp4/attention_fp4.cuh"
#include "dev/test/kernel_check.cuh"

// The model's AttnQuantizer from the FP4 module's functions (as the trainer wires them).
static AttnFp4Shape fp4_shape(AttnShape sh) { return AttnFp4Shape{sh.B, sh.T, sh.NH, sh.KVH, sh.HS}; }
static void hook_qkv(const void* ctx, const floatX* qkv, floatX* fake, float* amax, float* dec, AttnShape sh,
                     uint64_t key, cudaStream_t s) {
    attn_fp4_quantize_qkv_gpu((const AttnFp4*)ctx, qkv, fake, amax, dec, fp4_shape(sh), key, s);
}
static int hook_ds(const void* ctx, const floatX* ds, floatX* rows, floatX* cols, float* amax, float* dec, AttnShape sh,
                   uint64_t key, cudaStream_t s) {
    return attn_fp4_quantize_ds_gpu((const AttnFp4*)ctx, ds, rows, cols, amax, dec, fp4_shape(sh), key, s);
}
static AttnQuantizer quantizer_of(const AttnFp4* a) {
    AttnQuantizer q = {};   // every field: dropin (not set below) must be 0, not stack garbage
    q.ctx = a;
    q.dropin = a->dropin;
    q.qkv = a->qkv.grid != QGRID_BF16 ? hook_qkv : NULL;
    q.ds = a->ds.grid != QGRID_BF16 ? hook_ds : NULL;
    return q;
}

static std::vector<uint16_t> bits_of(const std::vector<floatX>& v) {
    std::vector<uint16_t> b(v.size());
    memcpy(b.data(), v.data(), v.size() * sizeof(uint16_t));
    return b;
}
static std::vector<double> rms_tol(const std::vector<double>& want, double atol_rms, double rtol) {
    double s = 0.0;
    for (double w : want) s += w * w;
    const double rms = sqrt(s / (want.size() ? want.size() : 1));
    std::vector<double> tol(want.size());
    for (size_t i = 0; i < want.size(); i++) tol[i] = atol_rms * rms + rtol * fabs(want[i]) + 1e-30;
    return tol;
}
static void check_close(const char* what, const std::vector<double>& got, const std::vector<double>& want,
                        double atol_rms, double rtol) {
    check_array(what, got, want, rms_tol(want, atol_rms, rtol));
    double d = 0.0, r = 0.0;
    for (size_t i = 0; i < want.size(); i++) { d += (got[i] - want[i]) * (got[i] - want[i]); r += want[i] * want[i]; }
    const double l2 = sqrt(d / (r > 0 ? r : 1.0));
    CHECK(l2 <= 1.0 / 128, "%s: relative L2 error %.3g > 2^-7", what, l2);
}
// The columns [c0, c0 + n) of each W-wide row.
static std::vector<double> columns(const std::vector<double>& v, int64_t W, int64_t c0, int64_t n) {
    std::vector<double> o;
    for (size_t r = 0; r < v.size() / W; r++)
        for (int64_t c = 0; c < n; c++) o.push_back(v[r * W + c0 + c]);
    return o;
}

struct GpuRun {
    std::vector<floatX> out, copy, dqkv, ds, ds_rows, ds_cols;
    std::vector<float> stats, dec, ds_scalars;
};

static GpuRun run_gpu(const AttnFp4* a, AttnShape sh, floatX* d_qkv, floatX* d_dout, uint64_t key) {
    const size_t nq = (size_t)sh.B * sh.T * (sh.NH + 2 * sh.KVH) * sh.HS, no = (size_t)sh.B * sh.T * sh.NH * sh.HS;
    const size_t ns = (size_t)sh.B * sh.NH * sh.T, nds = ns * sh.T;
    floatX* out = dev_alloc<floatX>(no);
    floatX* dqkv = dev_alloc<floatX>(nq);
    float* stats = dev_alloc<float>(ns);
    AttnFp4Copy cp = {dev_alloc<floatX>(nq), dev_alloc<float>(3), dev_alloc<float>(3)};
    poison(out, no); poison(dqkv, nq); poison(stats, ns); poison(cp.qkv, nq);
    const AttnQuantizer q = quantizer_of(a);
    attention_fp4_forward(out, stats, d_qkv, cp, sh, &q, key, 0);
    attention_fp4_backward(dqkv, d_dout, d_qkv, cp, out, stats, sh, &q, key + 1, 0);
    GpuRun r;
    r.out = dev_download(out, no);
    r.stats = dev_download(stats, ns);
    r.dqkv = dev_download(dqkv, nq);
    if (q.qkv) { r.copy = dev_download(cp.qkv, nq); r.dec = dev_download(cp.dec, 3); }
    if (q.ds) {
        const floatX *ds, *rows, *cols;
        const float* scalars;
        attention_fp4_ds_buffers(&ds, &rows, &cols, &scalars);
        r.ds = dev_download(ds, nds);
        r.ds_rows = dev_download(rows, nds);
        r.ds_cols = attn_fp4_ds_square(a) ? r.ds_rows : dev_download(cols, nds);
        r.ds_scalars = dev_download(scalars, 4);
    }
    cuda_check(cudaFree(out)); cuda_check(cudaFree(dqkv)); cuda_check(cudaFree(stats));
    cuda_check(cudaFree(cp.qkv)); cuda_check(cudaFree(cp.dec)); cuda_check(cudaFree(cp.amax));
    return r;
}

static void test_case(AttnShape sh, const char* spec, const char* ds_spec) {
    printf("--attention-fp4 %s --attention-fp4-ds %s: B=%d T=%d NH=%d KVH=%d HS=%d\n", spec, ds_spec ? ds_spec : "(default)",
           sh.B, sh.T, sh.NH, sh.KVH, sh.HS);
    AttnFp4 a;
    attn_fp4_set(&a, spec, ds_spec);
    const AttnFp4Shape fs = fp4_shape(sh);
    const int64_t W = (int64_t)(sh.NH + 2 * sh.KVH) * sh.HS, nq = (int64_t)sh.B * sh.T * W;
    const int64_t no = (int64_t)sh.B * sh.T * sh.NH * sh.HS, nds = (int64_t)sh.B * sh.NH * sh.T * sh.T;
    std::vector<floatX> qkv = rand_bf16(nq, 1.0), dout = rand_bf16(no, 1.0);
    floatX* d_qkv = dev_upload(qkv);
    floatX* d_dout = dev_upload(dout);
    const uint64_t key = 0xC0FFEE;
    GpuRun g = run_gpu(&a, sh, d_qkv, d_dout, key);

    // the copy
    std::vector<uint16_t> fake(nq);
    float dec[3];
    attn_fp4_quantize_qkv_cpu(&a, fs, bits_of(qkv).data(), key, fake.data(), dec);
    check_bits("Q/K/V copy vs the twin", bits_of(g.copy), fake);
    CHECK(memcmp(g.dec.data(), dec, sizeof(dec)) == 0, "factors: GPU %g %g %g, twin %g %g %g", g.dec[0], g.dec[1],
          g.dec[2], dec[0], dec[1], dec[2]);

    // forward
    std::vector<double> out(no), lse((size_t)sh.B * sh.NH * sh.T);
    attn_fp4_forward_cpu(fs, fake.data(), dec, out.data(), lse.data());
    check_close("out vs the twin", as_double(g.out), out, 1.0 / 32, 1.0 / 64);
    check_array_rel("stats vs the twin", as_double(g.stats), lse, 1e-3, 1e-3);

    // backward: the twin with its own dS, and with the GPU's dS bits
    const std::vector<double> gout = as_double(g.out);
    std::vector<uint16_t> ds(nds), rows(nds), cols(nds);
    AttnFp4CpuDs dso = {ds.data(), rows.data(), cols.data(), {0, 0}};
    std::vector<double> dqkv_own(nq), dqkv(nq);
    attn_fp4_backward_cpu(&a, fs, fake.data(), dec, bits_of(dout).data(), gout.data(), key + 1, NULL, dqkv_own.data(), &dso);
    const bool qds = a.ds.grid != QGRID_BF16;
    if (qds) {
        std::vector<double> ds_want(nds);
        for (int64_t i = 0; i < nds; i++) ds_want[i] = attn_bf(ds[i]);
        check_close("dS (GPU BF16) vs the twin", as_double(g.ds), ds_want, 1.0 / 32, 1.0 / 64);
        std::vector<uint16_t> gds = bits_of(g.ds);
        attn_fp4_backward_cpu(&a, fs, fake.data(), dec, bits_of(dout).data(), gout.data(), key + 1, gds.data(),
                              dqkv.data(), &dso);
        check_bits("dS copy for dQ vs quant_cpu of the GPU's dS", bits_of(g.ds_rows), rows);
        check_bits("dS copy for dK vs quant_cpu of the GPU's dS", bits_of(g.ds_cols), cols);
        CHECK(g.ds_scalars[2] == dso.ds_dec[0] && g.ds_scalars[3] == dso.ds_dec[1], "dS factors: GPU %g %g, twin %g %g",
              g.ds_scalars[2], g.ds_scalars[3], dso.ds_dec[0], dso.ds_dec[1]);
    } else {
        dqkv = dqkv_own;
    }
    const std::vector<double> gd = as_double(g.dqkv);
    const int64_t kq = (int64_t)sh.NH * sh.HS, kk = (int64_t)sh.KVH * sh.HS;
    const double dq_atol = qds ? 1.0 / 1024 : 1.0 / 32, dq_rtol = qds ? 1.0 / 256 : 1.0 / 64;
    check_close("dq vs the twin", columns(gd, W, 0, kq), columns(dqkv, W, 0, kq), dq_atol, dq_rtol);
    check_close("dk vs the twin", columns(gd, W, kq, kk), columns(dqkv, W, kq, kk), dq_atol, dq_rtol);
    check_close("dv vs the twin", columns(gd, W, kq + kk, kk), columns(dqkv, W, kq + kk, kk), 1.0 / 32, 1.0 / 64);

    // a second run: the same bits
    GpuRun g2 = run_gpu(&a, sh, d_qkv, d_dout, key);
    check_bits("run 2 vs run 1: out", bits_of(g2.out), bits_of(g.out));
    check_bits("run 2 vs run 1: stats", g2.stats, g.stats);
    check_bits("run 2 vs run 1: dqkv", bits_of(g2.dqkv), bits_of(g.dqkv));
    if (qds) check_bits("run 2 vs run 1: dS copy", bits_of(g2.ds_rows), bits_of(g.ds_rows));
    cuda_check(cudaFree(d_qkv)); cuda_check(cudaFree(d_dout));
}

// --attention-fp4 bf16: the plain own kernels' bits.
static void test_bf16_identity(AttnShape sh) {
    printf("--attention-fp4 bf16 vs the own kernels: B=%d T=%d NH=%d KVH=%d HS=%d\n", sh.B, sh.T, sh.NH, sh.KVH, sh.HS);
    AttnFp4 a;
    attn_fp4_set(&a, "bf16", NULL);
    const int64_t nq = (int64_t)sh.B * sh.T * (sh.NH + 2 * sh.KVH) * sh.HS, no = (int64_t)sh.B * sh.T * sh.NH * sh.HS;
    std::vector<floatX> qkv = rand_bf16(nq, 1.0), dout = rand_bf16(no, 1.0);
    floatX* d_qkv = dev_upload(qkv);
    floatX* d_dout = dev_upload(dout);
    GpuRun g = run_gpu(&a, sh, d_qkv, d_dout, 1);
    attention_force_own_kernel(1);
    floatX* out = dev_alloc<floatX>(no);
    floatX* dqkv = dev_alloc<floatX>(nq);
    float* stats = dev_alloc<float>((size_t)sh.B * sh.NH * sh.T);
    attention_forward(out, stats, d_qkv, sh, 0);
    attention_backward(dqkv, d_dout, d_qkv, out, stats, sh, 0);
    check_bits("bf16: out = the own kernel's", bits_of(g.out), bits_of(dev_download(out, no)));
    check_bits("bf16: dqkv = the own kernel's", bits_of(g.dqkv), bits_of(dev_download(dqkv, nq)));
    attention_force_own_kernel(0);
    cuda_check(cudaFree(out)); cuda_check(cudaFree(dqkv)); cuda_check(cudaFree(stats));
    cuda_check(cudaFree(d_qkv)); cuda_check(cudaFree(d_dout));
}

// --attention-fp4-backward bf16 (the drop-in control): the forward quantizes, the backward is the plain own backward
// on the BF16 qkv with the forward's out and stats, bit for bit.
static void test_dropin(AttnShape sh) {
    printf("the drop-in control (nvfp4-2d forward, BF16 backward): B=%d T=%d NH=%d KVH=%d HS=%d\n", sh.B, sh.T, sh.NH,
           sh.KVH, sh.HS);
    AttnFp4 a;
    attn_fp4_set(&a, "nvfp4-2d", NULL);
    a.dropin = 1;
    AttnQuantizer q = quantizer_of(&a);
    q.dropin = 1;
    const int64_t nq = (int64_t)sh.B * sh.T * (sh.NH + 2 * sh.KVH) * sh.HS, no = (int64_t)sh.B * sh.T * sh.NH * sh.HS;
    const size_t ns = (size_t)sh.B * sh.NH * sh.T;
    std::vector<floatX> qkv = rand_bf16(nq, 1.0), dout = rand_bf16(no, 1.0);
    floatX* d_qkv = dev_upload(qkv);
    floatX* d_dout = dev_upload(dout);
    floatX* out = dev_alloc<floatX>(no);
    floatX* dqkv = dev_alloc<floatX>(nq);
    floatX* dqkv_own = dev_alloc<floatX>(nq);
    float* stats = dev_alloc<float>(ns);
    AttnFp4Copy cp = {dev_alloc<floatX>(nq), dev_alloc<float>(3), dev_alloc<float>(3)};
    attention_fp4_forward(out, stats, d_qkv, cp, sh, &q, 5, 0);
    attention_fp4_backward(dqkv, d_dout, d_qkv, cp, out, stats, sh, &q, 6, 0);
    attention_force_own_kernel(1);
    attention_backward(dqkv_own, d_dout, d_qkv, out, stats, sh, 0);
    attention_force_own_kernel(0);
    check_bits("drop-in: dqkv = the own backward on BF16 qkv with the FP4 forward's out and stats",
               bits_of(dev_download(dqkv, nq)), bits_of(dev_download(dqkv_own, nq)));
    floatX* bufs[] = {d_qkv, d_dout, out, dqkv, dqkv_own, cp.qkv};
    for (floatX* b : bufs) cuda_check(cudaFree(b));
    cuda_check(cudaFree(stats)); cuda_check(cudaFree(cp.dec)); cuda_check(cudaFree(cp.amax));
}

int main(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        test_skip("attention_fp4", "no CUDA GPU on this machine");
        return test_summary("attention_fp4");
    }
    const AttnShape gqa = {2, 128, 4, 2, 64}, mha = {1, 128, 4, 4, 64}, odd = {2, 96, 2, 1, 64}, wide = {1, 64, 2, 2, 128};
    test_bf16_identity(gqa);
    test_bf16_identity(odd);
    test_case(gqa, "nvfp4-2d", NULL);
    test_case(mha, "nvfp4", NULL);
    test_case(odd, "nvfp4-2d", NULL);
    test_case(wide, "mxfp4", NULL);
    test_case(gqa, "nvfp4", "bf16");
    test_dropin(gqa);
    attention_destroy();
    return test_summary("attention_fp4");
}
