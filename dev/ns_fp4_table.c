// ns_fp4_table.c: --ns-fp4's table (docs/FULLSTACK_FP4.md section 3): Newton-Schulz with the operands of each set of
// its GEMMs quantized (llmc/fp4/ns_fp4.h, the CPU twin of the GPU path) against the BF16 Newton-Schulz
// (llmc/base/muon_ref.h), per spec and input.
//   build/ns_fp4_table [--steps N] [--spec SPEC ...] [--input gauss-NxK|grad-NxK ...] [--order GEMMS [--chunk N]]
// Inputs: gauss-64x256, gauss-384x384, gauss-384x1536 (0.01 N(0,1), the last d6's fcw), and grad-384x384,
// grad-384x1536: gradient-like matrices, rank 16 with singular values falling by 0.7 per rank, plus N(0,1) noise of
// 10% of their norm.
// Per (spec, GEMM set): the relative L2 distance of the result from the BF16 result, and the result's singular-value
// band [min, max] (the BF16 band first). Five steps map singular values from [1e-3, 1] of the normalised input into
// [0.68, 1.21]; a quantized NS that diverges leaves the band (max far above 1.2).
#include <math.h>
#include "llmc/fp4/ns_fp4.h"
#include "dev/test/spectra.h"

static uint64_t st = 0x9E3779B97F4A7C15ull;
static double urand(void) {
    st = st * 6364136223846793005ull + 1442695040888963407ull;
    return ((double)(st >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
static double nrand(void) { return sqrt(-2 * log(urand())) * cos(6.283185307179586 * urand()); }

typedef struct { int n, k, low_rank; } Input;
static const char* const DEFAULT_INPUTS[] = {"gauss-64x256", "gauss-384x384", "gauss-384x1536", "grad-384x384",
                                             "grad-384x1536"};

// "gauss-NxK" or "grad-NxK" (n <= k).
static Input parse_input(const char* name) {
    Input in = {0, 0, 0};
    char kind[16];
    fail_if(sscanf(name, "%15[a-z]-%dx%d", kind, &in.n, &in.k) != 3 || in.n <= 0 || in.n > in.k ||
            (strcmp(kind, "gauss") && strcmp(kind, "grad")), "input '%s': use gauss-NxK or grad-NxK, N <= K", name);
    in.low_rank = strcmp(kind, "grad") ? 0 : 16;
    return in;
}

static void make_input(const Input* in, float* x) {
    const size_t nk = (size_t)in->n * in->k;
    st = 0x9E3779B97F4A7C15ull;   // the same matrix for every spec
    if (!in->low_rank) {
        for (size_t i = 0; i < nk; i++) x[i] = (float)(0.01 * nrand());
        return;
    }
    double* g = (double*)xmalloc(nk * sizeof(double));
    test_gradient_like(g, in->n, in->k, in->low_rank, nrand);
    for (size_t i = 0; i < nk; i++) x[i] = (float)(0.01 * g[i]);
    free(g);
}

static double rel_l2(const float* a, const float* b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) { num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]); den += (double)b[i] * b[i]; }
    return sqrt(num / den);
}

// One table: per spec and GEMM set, the distance from the BF16 result and the band.
static void table(const Input* in, const char* name, const char* const* specs, int nspec, int steps) {
    const size_t nk = (size_t)in->n * in->k;
    float* x0 = (float*)xmalloc(nk * sizeof(float));
    float* ref = (float*)xmalloc(nk * sizeof(float));
    float* x = (float*)xmalloc(nk * sizeof(float));
    float* scratch = (float*)xmalloc((3 * (size_t)in->n * in->n + nk) * sizeof(float));
    make_input(in, x0);
    memcpy(ref, x0, nk * sizeof(float));
    muon_newton_schulz(ref, in->n, in->k, steps, scratch);
    double lo, hi;
    test_singular_band(ref, in->n, in->k, &lo, &hi);
    printf("%s: BF16 band [%.3f, %.3f]\n", name, lo, hi);
    fflush(stdout);
    for (int si = 0; si < nspec; si++) {
        NsFp4 f;
        char err[512];
        fail_if(ns_fp4_set(&f, specs[si], "", err, sizeof(err)), "%s", err);
        for (int gemms = 1; gemms <= NS_GEMM_ALL; gemms++) {
            char names[16];
            ns_fp4_gemms_format(gemms, names, sizeof(names));
            memcpy(x, x0, nk * sizeof(float));
            muon_newton_schulz_fp4_ref(x, in->n, in->k, steps, &f.q, gemms);
            const double rel = rel_l2(x, ref, nk);
            int finite = 1;
            for (size_t i = 0; i < nk; i++) finite &= isfinite(x[i]) != 0;
            if (finite) test_singular_band(x, in->n, in->k, &lo, &hi);
            else lo = hi = NAN;
            printf("  %-9s %-9s rel L2 %9.3g  band [%.3g, %.3g]\n", specs[si], names, rel, lo, hi);
            fflush(stdout);
        }
    }
    free(x0); free(ref); free(x); free(scratch);
}

// --order: what another summation order does (the twin with its sums in chunks, 32 wide unless --chunk says, against
// index order), per
// spec and GEMM set given: the relative L2 distance, the largest element distance in units of the result's RMS, and
// the share of elements that differ. The GPU test's tolerance (dev/test/test_muon_gpu.cu) comes from these.
static void order(const Input* in, const char* name, const char* const* specs, int nspec, const char* gemms_text,
                  int steps, int chunk) {
    const size_t nk = (size_t)in->n * in->k;
    float* x0 = (float*)xmalloc(nk * sizeof(float));
    float* x = (float*)xmalloc(nk * sizeof(float));
    float* y = (float*)xmalloc(nk * sizeof(float));
    make_input(in, x0);
    for (int si = 0; si < nspec; si++) {
        NsFp4 f;
        char err[512];
        fail_if(ns_fp4_set(&f, specs[si], gemms_text, err, sizeof(err)), "%s", err);
        memcpy(x, x0, nk * sizeof(float));
        memcpy(y, x0, nk * sizeof(float));
        muon_newton_schulz_fp4_chunked(x, in->n, in->k, steps, &f.q, f.gemms, 0);
        muon_newton_schulz_fp4_chunked(y, in->n, in->k, steps, &f.q, f.gemms, chunk);
        double ss = 0, worst = 0;
        size_t differ = 0;
        for (size_t i = 0; i < nk; i++) {
            ss += (double)x[i] * x[i];
            worst = fmax(worst, fabs((double)x[i] - y[i]));
            differ += x[i] != y[i];
        }
        char names[16];
        ns_fp4_gemms_format(f.gemms, names, sizeof(names));
        printf("%s %-9s %-9s %d-wide chunks vs index order: rel L2 %.3g, largest %.3g rms, %.1f%% of elements differ\n",
               name, specs[si], names, chunk, rel_l2(y, x, nk), worst / sqrt(ss / nk), 100.0 * differ / nk);
        fflush(stdout);
    }
    free(x0); free(x); free(y);
}

int main(int argc, char** argv) {
    const char* specs[16];
    const char* inputs[16];
    const char* gemms = NULL;
    int nspec = 0, ninput = 0, steps = 5, chunk = 32;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--spec") && i + 1 < argc && nspec < 16) specs[nspec++] = argv[++i];
        else if (!strcmp(argv[i], "--input") && i + 1 < argc && ninput < 16) inputs[ninput++] = argv[++i];
        else if (!strcmp(argv[i], "--order") && i + 1 < argc) gemms = argv[++i];
        else if (!strcmp(argv[i], "--chunk") && i + 1 < argc) chunk = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--steps N] [--spec SPEC ...] [--input gauss-NxK|grad-NxK ...] [--order GEMMS [--chunk N]]\n",
                    argv[0]);
            return 1;
        }
    }
    if (!nspec) { specs[0] = "nvfp4"; specs[1] = "nvfp4-2d"; specs[2] = "mxfp4"; nspec = 3; }
    if (!ninput) for (size_t i = 0; i < sizeof(DEFAULT_INPUTS) / sizeof(DEFAULT_INPUTS[0]); i++) inputs[ninput++] = DEFAULT_INPUTS[i];
    if (!gemms) printf("Newton-Schulz, %d steps: relative L2 from the BF16 result, and the singular-value band [min, max]\n",
                       steps);
    for (int i = 0; i < ninput; i++) {
        const Input in = parse_input(inputs[i]);
        if (gemms) order(&in, inputs[i], specs, nspec, gemms, steps, chunk);
        else table(&in, inputs[i], specs, nspec, steps);
    }
    return 0;
}
