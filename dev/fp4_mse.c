// fp4_mse.c: each 4-bit format's quantization error on N(0,1) and on heavy-tailed data, per block shape,
// scale rule, rounding mode and Hadamard setting. Uses the CPU path (llmc/fp4/quant_cpu.h), which is
// bit-identical to the GPU kernels, so it runs anywhere.
//   build/fp4_mse [--rows R] [--cols C] [--seed S] [--axis 0|1] [--spec SPEC ...]
// Prints MSE = mean((dequant(x) - x)^2) and NMSE = MSE / mean(x^2). Heavy-tailed data: Student t with
// 3 degrees of freedom times a per-row log-normal scale (outlier channels). Reference figures on N(0,1)
// (Quartet II, arXiv 2601.22813): NVFP4 1x16 RNE ~9.0e-3, 16x16 ~12.4e-3.
#include <math.h>
#include "llmc/fp4/quant_cpu.h"

static uint64_t st = 1;
static double urand(void) {
    st = st * 6364136223846793005ull + 1442695040888963407ull;
    return ((double)(st >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
static double nrand(void) { return sqrt(-2 * log(urand())) * cos(6.283185307179586 * urand()); }
static double student_t3(void) {
    double z = nrand(), c = 0;
    for (int i = 0; i < 3; i++) { double g = nrand(); c += g * g; }
    return z / sqrt(c / 3);
}

static const char* default_specs[] = {
    "nvfp4", "nvfp4,sr", "nvfp4-2d", "nvfp4-2d,sr", "nvfp4,1x32", "nvfp4,32x32", "nvfp4,h16", "nvfp4,h16,sr",
    "nvfp4,h32", "mxfp4", "mxfp4,sr", "mxfp4-ceil", "mxfp4-ceil,sr", "mxfp4,32x32", "mxfp4-2d", "mxfp4,h32",
    "e2m1,1x16,e8m0", "e2m1,1x16,e8m0ceil", "int4", "int4,sr", "int4,16x16", "int4,h16", "int4,h16,sr", "int4,1x32",
    "int4,1x32,e8m0ceil", "e1m2", "e1m2,h32",
};

int main(int argc, char** argv) {
    int64_t rows = 256, cols = 4096;
    int axis = 1;
    const char* specs[64];
    int nspecs = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rows") && i + 1 < argc) rows = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--cols") && i + 1 < argc) cols = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) st = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--axis") && i + 1 < argc) axis = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--spec") && i + 1 < argc && nspecs < 64) specs[nspecs++] = argv[++i];
        else fail("usage: %s [--rows R] [--cols C] [--seed S] [--axis 0|1] [--spec SPEC]... (got '%s')", argv[0], argv[i]);
    }
    if (!nspecs)
        for (size_t i = 0; i < sizeof(default_specs) / sizeof(default_specs[0]); i++) specs[nspecs++] = default_specs[i];
    const int64_t n = rows * cols;
    uint16_t* data[2];
    uint16_t* out = (uint16_t*)xmalloc(2 * n);
    const char* dname[2] = {"N(0,1)", "heavy"};
    for (int d = 0; d < 2; d++) {
        data[d] = (uint16_t*)xmalloc(2 * n);
        for (int64_t r = 0; r < rows; r++) {
            double rs = d ? exp(1.5 * nrand()) : 1.0;
            for (int64_t c = 0; c < cols; c++) data[d][r * cols + c] = bf16_bits_rne((float)(d ? rs * student_t3() : nrand()));
        }
    }
    printf("quantization error, %lld x %lld, axis %d (%s)\n\n", (long long)rows, (long long)cols, axis,
           axis ? "row-wise" : "column-wise");
    printf("| %-36s | %-10s | %-10s | %-10s | %-10s |\n", "spec (canonical)", "MSE N(0,1)", "NMSE", "MSE heavy", "NMSE");
    printf("|--------------------------------------|------------|------------|------------|------------|\n");
    for (int s = 0; s < nspecs; s++) {
        QuantSpec spec; char err[256], canon[128];
        fail_if(quant_spec_parse(specs[s], &spec, err, sizeof(err)), "%s", err);
        QuantParams p = quant_params(&spec);
        quant_spec_format(&spec, canon, sizeof(canon));
        double mse[2], nmse[2];
        for (int d = 0; d < 2; d++) {
            QuantView v = {data[d], rows, cols, cols};
            float sdec = quant_cpu(&p, v, axis, rng_key(5, 0, (uint32_t)s), out, cols, NULL, NULL, NULL);
            // with a Hadamard the quantized tensor lives in the rotated basis: rotate back (the
            // transform is orthonormal, so diag(s)H/sqrt(n) inverse is its transpose) before comparing
            double e2 = 0, x2 = 0;
            int64_t M, K;
            quant_operand_dims(rows, cols, axis, &M, &K);
            float buf[128];
            for (int64_t i = 0; i < M; i++)
                for (int64_t k0 = 0; k0 < K; k0 += (p.hadamard ? p.hadamard : 1)) {
                    int len = p.hadamard ? p.hadamard : 1;
                    for (int e = 0; e < len; e++)
                        buf[e] = bf16_bits_to_float(out[quant_view_offset(i, k0 + e, axis, cols)]) * sdec;
                    if (p.hadamard) {   // inverse: H^T then signs (H symmetric, so apply H, then signs)
                        uint32_t none[4] = {0, 0, 0, 0};
                        hadamard_f32(buf, len, none);
                        for (int e = 0; e < len; e++)
                            if ((p.signs[e >> 5] >> (e & 31)) & 1u) buf[e] = -buf[e];
                    }
                    for (int e = 0; e < len; e++) {
                        double x = bf16_bits_to_float(data[d][quant_view_offset(i, k0 + e, axis, cols)]);
                        e2 += (buf[e] - x) * (buf[e] - x);
                        x2 += x * x;
                    }
                }
            mse[d] = e2 / n;
            nmse[d] = e2 / x2;
        }
        printf("| %-36s | %10.4e | %10.4e | %10.4e | %10.4e |\n", canon, mse[0], nmse[0], mse[1], nmse[1]);
    }
    (void)dname;
    free(out); free(data[0]); free(data[1]);
    return 0;
}
