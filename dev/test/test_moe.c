// test_moe.c: CPU tests of llmc/model/moe.h, the mixture-of-experts reference twin (docs/MOE.md): routes worked out
// by hand (E = 4, k = 2: ties, a token whose scores are all equal, -0 against +0, NaN logits, an expert with no
// tokens, k = E, k = 1), the sigmoid family with a bias that flips a choice, the permutation written out by hand
// (unpadded and padded to 4), round trips (combine(gather(x)) with weights 1/k is x), the combine's slot order and
// backward, the load-balancing and z losses at values worked out by hand, the gradients of both losses and of the
// routing weights against central finite differences of float64 re-implementations written here, the bias update,
// interleaving, and property sweeps over random routes (k distinct experts, the true top k in rank order, weights
// summing to 1, counts summing to N k, padded offsets, the permutation's inverse). Bad calls fail with a message.
#include "llmc/model/moe.h"
#include "dev/test/testing.h"

static uint64_t lcg_state = 0x9E3779B97F4A7C15ull;
static double urand(void) {
    lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
    return ((lcg_state >> 11) + 0.5) / 9007199254740992.0;
}
static double nrand(void) { return sqrt(-2.0 * log(urand())) * cos(6.283185307179586 * urand()); }
static int irand(int n) { return (int)(urand() * n); }

static int same_ints(const int* a, const int* b, int n) {
    for (int i = 0; i < n; i++) if (a[i] != b[i]) return 0;
    return 1;
}
static void print_ints(const char* what, const int* a, int n) {
    printf("  %s:", what);
    for (int i = 0; i < n; i++) printf(" %d", a[i]);
    printf("\n");
}
#define CHECK_INTS(got, want, n, what) do {                                          \
    int ok_ = same_ints(got, want, n);                                               \
    CHECK(ok_, "%s differ", what);                                                   \
    if (!ok_) { print_ints("got ", got, n); print_ints("want", want, n); }           \
} while (0)

// --- float64 re-implementations (from the formulas of docs/MOE.md, not from moe.h) ----------------------------------

static void ref_probs(MoeScore kind, const double* l, int E, double* p) {
    double m = -INFINITY, Z = 0.0;
    for (int i = 0; i < E; i++) m = l[i] > m ? l[i] : m;
    for (int i = 0; i < E; i++) { p[i] = kind == MOE_SCORE_SOFTMAX ? exp(l[i] - m) : 1.0 / (1.0 + exp(-l[i])); Z += p[i]; }
    for (int i = 0; i < E; i++) p[i] /= Z;
}
static double ref_aux(MoeScore kind, const double* l, const int* counts, int N, int E, int k, double alpha) {
    double p[64], loss = 0.0;
    for (int e = 0; e < E; e++) {
        double P = 0.0;
        for (int t = 0; t < N; t++) { ref_probs(kind, l + t * E, E, p); P += p[e] / N; }
        loss += (double)counts[e] / ((double)N * k) * P;
    }
    return alpha * E * loss;
}
static double ref_z(const double* l, int N, int E, double beta) {
    double sum = 0.0;
    for (int t = 0; t < N; t++) {
        double Z = 0.0;
        for (int i = 0; i < E; i++) Z += exp(l[t * E + i]);
        sum += log(Z) * log(Z);
    }
    return beta * sum / N;
}
// sum over tokens and slots of c * w, the weights of the fixed choice ids
static double ref_route_loss(MoeScore kind, const double* l, const int* ids, const double* c, int N, int E, int k) {
    double loss = 0.0;
    for (int t = 0; t < N; t++) {
        double v[64], S = 0.0;
        for (int j = 0; j < k; j++) {
            double x = l[t * E + ids[t * k + j]];
            v[j] = kind == MOE_SCORE_SOFTMAX ? exp(x) : 1.0 / (1.0 + exp(-x));
            S += v[j];
        }
        for (int j = 0; j < k; j++) loss += c[t * k + j] * v[j] / S;
    }
    return loss;
}

// The gradient g (float, from moe.h) against central differences of f over the logits l (as doubles).
typedef double (*LossOfLogits)(const double* l, const void* ctx);
static void check_gradient(LossOfLogits f, const void* ctx, const float* logits, const float* g, int n, const char* what) {
    double l[512];
    int bad = 0, worst = -1;
    double worst_err = 0.0, fd_worst = 0.0;
    for (int i = 0; i < n; i++) l[i] = logits[i];
    for (int i = 0; i < n; i++) {
        const double h = 1e-4, x = l[i];
        l[i] = x + h;
        double up = f(l, ctx);
        l[i] = x - h;
        double down = f(l, ctx);
        l[i] = x;
        double fd = (up - down) / (2 * h), err = fabs(g[i] - fd);
        if (err > 1e-6 + 1e-4 * fabs(fd)) bad++;
        if (err > worst_err) { worst_err = err; worst = i; fd_worst = fd; }
    }
    CHECK(bad == 0, "%s: %d of %d gradient entries off finite differences (worst [%d]: %.9g vs %.9g)", what, bad, n,
          worst, worst >= 0 ? (double)g[worst] : 0.0, fd_worst);
}
typedef struct { MoeScore kind; const int* counts; const int* ids; const double* c; int N, E, k; double coef; } LossCtx;
static double aux_of(const double* l, const void* p) {
    const LossCtx* x = (const LossCtx*)p;
    return ref_aux(x->kind, l, x->counts, x->N, x->E, x->k, x->coef);
}
static double z_of(const double* l, const void* p) {
    const LossCtx* x = (const LossCtx*)p;
    return ref_z(l, x->N, x->E, x->coef);
}
static double route_of(const double* l, const void* p) {
    const LossCtx* x = (const LossCtx*)p;
    return ref_route_loss(x->kind, l, x->ids, x->c, x->N, x->E, x->k);
}

// --- routes worked out by hand ------------------------------------------------------------------------------------

static void test_softmax_by_hand(void) {
    const float nan = NAN;
    // E = 4, k = 2
    const float logits[7][4] = {
        {1, 3, 2, 0},           // clear order: 1, 2
        {0.5f, 0.5f, 0.5f, 0.5f},   // all equal: the two lowest indices, 1/2 each
        {4, 1, 2, 2},           // a tie for the second place: 2 before 3
        {-1, 5, -1, 5},         // a tie for the first place: 1 before 3
        {-0.0f, 0.0f, -1, -2},  // -0 == +0: a tie, 0 before 1
        {nan, 1, nan, 0},       // NaN ranks last: 1, 3, finite weights
        {nan, nan, nan, nan},   // all NaN: still two distinct experts
    };
    const int want_ids[7][2] = {{1, 2}, {0, 1}, {0, 2}, {1, 3}, {0, 1}, {1, 3}, {0, 1}};
    int ids[14];
    float w[14];
    moe_route_softmax_topk(&logits[0][0], 7, 4, 2, ids, w);
    CHECK_INTS(ids, &want_ids[0][0], 14, "softmax top-2 ids (ties, all equal, -0/+0, NaN)");
    const double e1 = exp(-1.0), e2 = exp(-2.0);
    const double want_w[6][2] = {{1 / (1 + e1), e1 / (1 + e1)}, {0.5, 0.5}, {1 / (1 + e2), e2 / (1 + e2)},
                                 {0.5, 0.5}, {0.5, 0.5}, {1 / (1 + e1), e1 / (1 + e1)}};
    for (int t = 0; t < 6; t++)
        for (int j = 0; j < 2; j++) {
            char what[64];
            snprintf(what, sizeof(what), "softmax weight token %d slot %d", t, j);
            CHECK_CLOSE(w[t * 2 + j], want_w[t][j], 0, 2e-7, what);
        }
    CHECK(w[2] == 0.5f && w[3] == 0.5f && w[6] == 0.5f && w[7] == 0.5f && w[8] == 0.5f && w[9] == 0.5f,
          "equal chosen logits give exactly 1/2 each");
    CHECK(isnan(w[12]) && isnan(w[13]), "all-NaN logits give NaN weights (the loss shows it), not a crash");

    // k = 1: the argmax, weight exactly 1
    int id1[7];
    float w1[7];
    moe_route_softmax_topk(&logits[0][0], 7, 4, 1, id1, w1);
    const int want1[7] = {1, 0, 0, 1, 0, 1, 0};
    CHECK_INTS(id1, want1, 7, "softmax top-1 ids");
    CHECK(w1[0] == 1.0f && w1[1] == 1.0f && w1[2] == 1.0f && w1[3] == 1.0f && w1[5] == 1.0f, "top-1 weights are 1");

    // k = E: every expert, in rank order, with the full softmax as weights
    const float l4[4] = {0.1f, 0.4f, 0.3f, 0.2f};
    int id4[4];
    float w4[4];
    moe_route_softmax_topk(l4, 1, 4, 4, id4, w4);
    const int want4[4] = {1, 2, 3, 0};
    CHECK_INTS(id4, want4, 4, "k = E ids in rank order");
    double p[4], l4d[4] = {0.1f, 0.4f, 0.3f, 0.2f};
    ref_probs(MOE_SCORE_SOFTMAX, l4d, 4, p);
    for (int j = 0; j < 4; j++) CHECK_CLOSE(w4[j], p[id4[j]], 0, 3e-7, "k = E weight = the full softmax");
    float probs[4];
    moe_probs(MOE_SCORE_SOFTMAX, l4, 1, 4, probs);
    for (int i = 0; i < 4; i++) CHECK_CLOSE(probs[i], p[i], 0, 3e-7, "moe_probs softmax");
    int idE1[1];
    float wE1[1];
    moe_route_softmax_topk(l4, 1, 1, 1, idE1, wE1);
    CHECK(idE1[0] == 0 && wE1[0] == 1.0f, "E = 1: expert 0, weight 1");

    // an expert that no token chooses
    const float lz[3][4] = {{3, 2, 1, 0}, {0, 2, 3, -1}, {1, 0, 2, -5}};
    int idz[6], counts[4], offsets[5], row_of[6], slot_of_row[48];
    float wz[6];
    moe_route_softmax_topk(&lz[0][0], 3, 4, 2, idz, wz);
    const int want_idz[6] = {0, 1, 2, 1, 2, 0};
    CHECK_INTS(idz, want_idz, 6, "ids with expert 3 unused");
    const MoePerm perm = {counts, offsets, row_of, slot_of_row};
    int rows = moe_permute(idz, 3, 4, 2, 1, perm, 6);
    const int want_counts[4] = {2, 2, 2, 0}, want_off[5] = {0, 2, 4, 6, 6};
    CHECK(rows == 6, "rows %d", rows);
    CHECK_INTS(counts, want_counts, 4, "counts with an empty expert");
    CHECK_INTS(offsets, want_off, 5, "offsets with an empty expert");
    rows = moe_permute(idz, 3, 4, 2, 16, perm, 48);
    const int want_off16[5] = {0, 16, 32, 48, 48};
    CHECK(rows == 48, "padded rows %d", rows);
    CHECK_INTS(offsets, want_off16, 5, "padded offsets: the empty expert has no rows, not 16 rows of pad");
    CHECK(moe_rows_bound(3, 4, 2, 16) == 6 + 4 * 15 && rows <= moe_rows_bound(3, 4, 2, 16), "rows bound");
}

static void test_sigmoid_by_hand(void) {
    const float l[4] = {2.0f, 1.9f, 0.0f, -1.0f};
    double s[4];
    for (int i = 0; i < 4; i++) s[i] = 1.0 / (1.0 + exp(-(double)l[i]));
    int ids[2];
    float w[2];
    moe_route_sigmoid_bias(l, NULL, 1, 4, 2, ids, w);
    CHECK(ids[0] == 0 && ids[1] == 1, "sigmoid without bias: ids %d %d", ids[0], ids[1]);
    CHECK_CLOSE(w[0], s[0] / (s[0] + s[1]), 0, 2e-7, "sigmoid weight 0");
    CHECK_CLOSE(w[1], s[1] / (s[0] + s[1]), 0, 2e-7, "sigmoid weight 1");
    // the bias lifts expert 2 (0.5 + 0.5 = 1 > 0.88) to the first slot; its weight is its score, not score + bias
    const float bias[4] = {0.0f, 0.0f, 0.5f, 0.0f};
    moe_route_sigmoid_bias(l, bias, 1, 4, 2, ids, w);
    CHECK(ids[0] == 2 && ids[1] == 0, "the bias flips the choice: ids %d %d (want 2 0)", ids[0], ids[1]);
    CHECK_CLOSE(w[0], 0.5 / (0.5 + s[0]), 0, 2e-7, "biased choice, weight of the unbiased score (slot 0)");
    CHECK_CLOSE(w[1], s[0] / (0.5 + s[0]), 0, 2e-7, "biased choice, weight of the unbiased score (slot 1)");
    // a bias that makes a tie: expert 1's key equals expert 0's, and the lower index wins
    const float lt[4] = {1.0f, 0.0f, -3.0f, -3.0f};
    float bt[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    bt[1] = moe_sigmoid(1.0f) - moe_sigmoid(0.0f);   // exact (Sterbenz), so s(0) + bt[1] == s(1): a tie
    moe_route_sigmoid_bias(lt, bt, 1, 4, 1, ids, w);
    if (moe_sigmoid(0.0f) + bt[1] == moe_sigmoid(1.0f)) CHECK(ids[0] == 0, "a biased tie: the lower index wins");
    else test_skip("sigmoid biased tie", "0.5 + (s(1) - 0.5) is not s(1) in FP32");
    // equal logits: the lowest indices, 1/2 each; moe_route dispatches
    const float eq[4] = {0.25f, 0.25f, 0.25f, 0.25f};
    moe_route(MOE_SCORE_SIGMOID, eq, NULL, 1, 4, 2, ids, w);
    CHECK(ids[0] == 0 && ids[1] == 1 && w[0] == 0.5f && w[1] == 0.5f, "sigmoid all equal: ids %d %d w %g %g", ids[0],
          ids[1], w[0], w[1]);
    // probabilities: s / sum s, without the bias
    float probs[4];
    moe_probs(MOE_SCORE_SIGMOID, l, 1, 4, probs);
    const double S = s[0] + s[1] + s[2] + s[3];
    for (int i = 0; i < 4; i++) CHECK_CLOSE(probs[i], s[i] / S, 0, 3e-7, "moe_probs sigmoid");
    CHECK(moe_sigmoid(0.0f) == 0.5f && moe_sigmoid(-INFINITY) == 0.0f && moe_sigmoid(INFINITY) == 1.0f &&
          moe_exp(0.0f) == 1.0f && moe_exp(-INFINITY) == 0.0f, "moe_sigmoid and moe_exp at 0 and the infinities");
}

// --- the permutation ----------------------------------------------------------------------------------------------

static void test_permute_by_hand(void) {
    // the first five tokens of test_softmax_by_hand: (1 2) (0 1) (0 2) (1 3) (0 1)
    const int ids[10] = {1, 2, 0, 1, 0, 2, 1, 3, 0, 1};
    int counts[4], offsets[5], row_of[10], slot_of_row[16];
    const MoePerm perm = {counts, offsets, row_of, slot_of_row};
    int rows = moe_permute(ids, 5, 4, 2, 1, perm, 10);
    const int c[4] = {3, 4, 2, 1}, off[5] = {0, 3, 7, 9, 10};
    const int ro[10] = {3, 7, 0, 4, 1, 8, 5, 9, 2, 6}, sr[10] = {2, 4, 8, 0, 3, 6, 9, 1, 5, 7};
    CHECK(rows == 10, "rows %d", rows);
    CHECK_INTS(counts, c, 4, "counts");
    CHECK_INTS(offsets, off, 5, "offsets");
    CHECK_INTS(row_of, ro, 10, "row_of (by expert, then token, then slot)");
    CHECK_INTS(slot_of_row, sr, 10, "slot_of_row");
    // padded to 4 rows per expert: pad rows -1
    rows = moe_permute(ids, 5, 4, 2, 4, perm, 16);
    const int off4[5] = {0, 4, 8, 12, 16}, ro4[10] = {4, 8, 0, 5, 1, 9, 6, 12, 2, 7};
    const int sr4[16] = {2, 4, 8, -1, 0, 3, 6, 9, 1, 5, -1, -1, 7, -1, -1, -1};
    CHECK(rows == 16, "padded rows %d", rows);
    CHECK_INTS(counts, c, 4, "counts (padded)");
    CHECK_INTS(offsets, off4, 5, "offsets padded to 4");
    CHECK_INTS(row_of, ro4, 10, "row_of padded to 4");
    CHECK_INTS(slot_of_row, sr4, 16, "slot_of_row padded to 4");

    // gather: rows are copies of their token's x, pad rows zero
    float x[5 * 3], xp[16 * 3];
    for (int i = 0; i < 15; i++) x[i] = (float)(i + 1);
    for (int i = 0; i < 48; i++) xp[i] = -7.0f;
    moe_gather(x, 5, 3, 2, slot_of_row, rows, xp);
    int ok = 1;
    for (int r = 0; r < 16; r++)
        for (int cc = 0; cc < 3; cc++)
            ok &= xp[r * 3 + cc] == (sr4[r] < 0 ? 0.0f : x[(sr4[r] / 2) * 3 + cc]);
    CHECK(ok, "gather: token rows copied, pad rows zero");
}

// combine(gather(x)) with weights 1/k is x: exactly when 1/k is a power of two, to an ulp or so otherwise; with no
// weights, the gather's backward adds a token's k rows.
static void test_round_trips(void) {
    const int N = 37, C = 5, E = 6;
    float logits[N * E], x[N * C], out[N * C], w[N * E], ones_w[N * E];
    float xp[(N * E + E * 15) * C];
    int ids[N * E], counts[E], offsets[E + 1], row_of[N * E], slot_of_row[N * E + E * 15];
    for (int i = 0; i < N * E; i++) logits[i] = (float)nrand();
    for (int i = 0; i < N * C; i++) x[i] = (float)nrand();
    const int ks[5] = {1, 2, 3, 4, 6}, mults[2] = {1, 16};
    const MoePerm perm = {counts, offsets, row_of, slot_of_row};
    for (int a = 0; a < 5; a++)
        for (int b = 0; b < 2; b++) {
            const int k = ks[a], M = mults[b];
            moe_route_softmax_topk(logits, N, E, k, ids, w);
            int rows = moe_permute(ids, N, E, k, M, perm, (int)moe_rows_bound(N, E, k, M));
            moe_gather(x, N, C, k, slot_of_row, rows, xp);
            for (int i = 0; i < N * k; i++) ones_w[i] = 1.0f / k;
            const MoeRouted weighted = {xp, row_of, ones_w, rows}, unweighted = {xp, row_of, NULL, rows};
            moe_combine(weighted, NULL, N, k, C, out);
            const int exact = (k & (k - 1)) == 0;
            int bad = 0;
            for (int i = 0; i < N * C; i++)
                bad += exact ? out[i] != x[i] : fabs(out[i] - x[i]) > 4e-7 * fabs(x[i]);
            CHECK(bad == 0, "combine(gather(x)) with weights 1/%d, padded to %d: %d of %d elements differ", k, M, bad,
                  N * C);
            // the gather's backward: combine without weights sums the k rows of each token
            moe_combine(unweighted, NULL, N, k, C, out);
            bad = 0;
            for (int i = 0; i < N * C; i++) bad += exact ? out[i] != k * x[i] : fabs(out[i] - k * x[i]) > 1e-6 * fabs(k * x[i]);
            CHECK(bad == 0, "gather backward (k = %d, multiple %d): %d elements differ from k x", k, M, bad);
        }
}

static void test_combine(void) {
    // slot order: base first, then slot 0, then slot 1 (in FP32, 1 is lost against 1e8)
    const float yp[2] = {1.0f, -1e8f}, base[1] = {1e8f};
    const int row_of[2] = {0, 1};
    float out[1];
    const MoeRouted in = {yp, row_of, NULL, 2};
    moe_combine(in, base, 1, 2, 1, out);
    CHECK(out[0] == 0.0f, "combine order: base + slot 0 + slot 1 = (1e8 + 1) - 1e8 = %g (want 0)", out[0]);
    const int row_rev[2] = {1, 0};
    const float yr[2] = {-1e8f, 1.0f};
    const MoeRouted rev = {yr, row_rev, NULL, 2};
    moe_combine(rev, base, 1, 2, 1, out);
    CHECK(out[0] == 0.0f, "combine reads slots through row_of, in slot order: %g", out[0]);
    // one rounding per slot (fmaf): (1 + 2^-12)^2 - (1 + 2^-11) = 2^-24, which a rounded product would lose
    const float wf[1] = {1.0f + 0x1p-12f}, yf[1] = {1.0f + 0x1p-12f}, bf[1] = {-(1.0f + 0x1p-11f)};
    const MoeRouted one = {yf, row_of, wf, 1};
    moe_combine(one, bf, 1, 1, 1, out);
    CHECK(out[0] == 0x1p-24f, "combine with fmaf: %a (want 0x1p-24)", out[0]);

    // backward: dyp = w * dout in each token slot's row, pad rows zero; dweights = dot(dout, that row of yp)
    const int N = 9, C = 7, E = 5, k = 2, M = 8;
    float logits[N * E], w[N * k], dout[N * C], yp2[(N * k + E * (M - 1)) * C], dyp[(N * k + E * (M - 1)) * C];
    float dw[N * k];
    int ids[N * k], counts[E], offsets[E + 1], ro[N * k], sr[N * k + E * (M - 1)];
    for (int i = 0; i < N * E; i++) logits[i] = (float)nrand();
    for (int i = 0; i < N * C; i++) dout[i] = (float)nrand();
    moe_route_softmax_topk(logits, N, E, k, ids, w);
    const MoePerm perm = {counts, offsets, ro, sr};
    int rows = moe_permute(ids, N, E, k, M, perm, N * k + E * (M - 1));
    for (int i = 0; i < rows * C; i++) yp2[i] = (float)nrand();
    for (int i = 0; i < rows * C; i++) dyp[i] = 123.0f;
    const MoeRouted routed = {yp2, ro, w, rows};
    moe_combine_backward(dout, routed, N, k, C, dyp, dw);
    int ok_dyp = 1, ok_dw = 1;
    for (int r = 0; r < rows; r++) {
        const int s = sr[r];
        for (int c = 0; c < C; c++) ok_dyp &= dyp[r * C + c] == (s < 0 ? 0.0f : w[s] * dout[(s / k) * C + c]);
    }
    for (int s = 0; s < N * k; s++) {
        double dot = 0.0;
        for (int c = 0; c < C; c++) dot += (double)dout[(s / k) * C + c] * yp2[ro[s] * C + c];
        ok_dw &= fabs(dw[s] - dot) <= 1e-6 * (1 + fabs(dot));
    }
    CHECK(ok_dyp, "combine backward: dyp = w dout in the slot's row, 0 in pad rows");
    CHECK(ok_dw, "combine backward: dweights = <dout, yp row>");
    // and it is the derivative of the combine: L = <g, combine> moves by dweights when a weight moves
    float out2[N * C], w2[N * k];
    memcpy(w2, w, sizeof(w));
    const int s0 = 3;
    w2[s0] += 0.25f;
    float out1[N * C];
    const MoeRouted routed2 = {yp2, ro, w2, rows};
    moe_combine(routed, NULL, N, k, C, out1);
    moe_combine(routed2, NULL, N, k, C, out2);
    double dl = 0.0;
    for (int i = 0; i < N * C; i++) dl += (double)dout[i] * ((double)out2[i] - out1[i]);
    CHECK_CLOSE(dl / (w2[s0] - w[s0]), dw[s0], 1e-5, 1e-4, "dweights as a difference quotient of the combine");
}

// --- losses ---------------------------------------------------------------------------------------------------------

static void test_losses_by_hand(void) {
    // uniform logits: p = 1/4, so L = alpha sum_e f_e = alpha whatever the counts; the gradient alpha p (f_i - 1/4)
    const int N = 4, E = 4, k = 2;
    float logits[N * E] = {0}, dl[N * E] = {0};
    const int counts[E] = {4, 2, 2, 0};
    float L = moe_aux_loss(MOE_SCORE_SOFTMAX, logits, counts, N, E, k, 0.02f, dl);
    CHECK(L == 0.02f, "aux loss at uniform probabilities = alpha: %.9g", L);
    const double want_g[E] = {0.02 * 0.0625, 0.0, 0.0, -0.02 * 0.0625};
    int ok = 1;
    for (int t = 0; t < N; t++)
        for (int i = 0; i < E; i++) ok &= fabs(dl[t * E + i] - want_g[i]) <= 1e-9;
    CHECK(ok, "aux gradient at uniform probabilities: alpha * 1/4 * (f - 1/4) = %g %g %g %g", dl[0], dl[1], dl[2], dl[3]);
    // balanced counts and uniform scores: L = alpha for the sigmoid family too
    const int bal[E] = {2, 2, 2, 2};
    CHECK_CLOSE(moe_aux_loss(MOE_SCORE_SIGMOID, logits, bal, N, E, k, 1.0f, NULL), 1.0, 0, 1e-7,
                "sigmoid aux at balance");
    // every token on experts 0 and 1 with all its probability there: f = (1/2, 1/2, 0, 0), P -> (1/2, 1/2, 0, 0),
    // L -> E * (1/4 + 1/4) = 2 (the worst for k = 2 is E / k)
    float peaked[N * E];
    for (int t = 0; t < N; t++) { peaked[t * E + 0] = 40; peaked[t * E + 1] = 40; peaked[t * E + 2] = -40; peaked[t * E + 3] = -40; }
    const int two[E] = {4, 4, 0, 0};
    CHECK_CLOSE(moe_aux_loss(MOE_SCORE_SOFTMAX, peaked, two, N, E, k, 1.0f, NULL), 2.0, 1e-6, 0, "aux loss, collapsed");

    // z-loss: lse of zeros is log 4
    float dz[N * E] = {0};
    float Lz = moe_z_loss(logits, N, E, 0.001f, dz);
    CHECK_CLOSE(Lz, 0.001 * log(4.0) * log(4.0), 0, 1e-6, "z loss at zero logits = beta log(E)^2");
    CHECK_CLOSE(dz[5], 2 * 0.001 / N * log(4.0) * 0.25, 0, 1e-6, "z gradient at zero logits");
    float big[E] = {100, 100, 100, 100};
    CHECK_CLOSE(moe_z_loss(big, 1, E, 1.0f, NULL), (100 + log(4.0)) * (100 + log(4.0)), 0, 1e-6,
                "z loss of large logits (no overflow: the max is subtracted)");
}

static void test_gradients(void) {
    const int N = 6, E = 5;
    float logits[N * E];
    for (int i = 0; i < N * E; i++) logits[i] = (float)(1.5 * nrand());
    for (int kind = 0; kind < MOE_SCORE_COUNT; kind++) {
        for (int k = 1; k <= 3; k += 2) {
            const MoeScore sk = (MoeScore)kind;
            float bias[E], w[N * 3];
            for (int e = 0; e < E; e++) bias[e] = (float)(0.1 * nrand());
            int ids[N * 3], counts[E], offsets[E + 1], ro[N * 3], sr[N * 3];
            moe_route(sk, logits, bias, N, E, k, ids, w);
            const MoePerm perm = {counts, offsets, ro, sr};
            moe_permute(ids, N, E, k, 1, perm, N * k);
            char what[96];
            // aux loss: value and gradient
            float g[N * E] = {0};
            const float alpha = 0.7f;
            float L = moe_aux_loss(sk, logits, counts, N, E, k, alpha, g);
            double ld[N * E];
            for (int i = 0; i < N * E; i++) ld[i] = logits[i];
            snprintf(what, sizeof(what), "%s aux loss (k %d)", MOE_SCORE_NAMES[kind], k);
            CHECK_CLOSE(L, ref_aux(sk, ld, counts, N, E, k, alpha), 0, 1e-6, what);
            LossCtx ctx = {sk, counts, ids, NULL, N, E, k, alpha};
            snprintf(what, sizeof(what), "%s aux gradient (k %d)", MOE_SCORE_NAMES[kind], k);
            check_gradient(aux_of, &ctx, logits, g, N * E, what);
            // the gradient adds into dlogits
            float g2[N * E];
            for (int i = 0; i < N * E; i++) g2[i] = 1.0f;
            moe_aux_loss(sk, logits, counts, N, E, k, alpha, g2);
            int adds = 1;
            for (int i = 0; i < N * E; i++) adds &= g2[i] == 1.0f + g[i];
            CHECK(adds, "%s aux gradient adds into dlogits", MOE_SCORE_NAMES[kind]);
            // the routing weights' gradient
            double c[N * 3];
            float dw[N * 3], gr[N * E] = {0};
            for (int i = 0; i < N * k; i++) { c[i] = nrand(); dw[i] = (float)c[i]; }
            moe_route_backward(sk, logits, ids, w, dw, N, E, k, gr);
            LossCtx rc = {sk, counts, ids, c, N, E, k, 0};
            snprintf(what, sizeof(what), "%s routing-weight gradient (k %d)", MOE_SCORE_NAMES[kind], k);
            check_gradient(route_of, &rc, logits, gr, N * E, what);
        }
    }
    // z-loss
    float g[N * E] = {0};
    const float beta = 0.3f;
    float L = moe_z_loss(logits, N, E, beta, g);
    double ld[N * E];
    for (int i = 0; i < N * E; i++) ld[i] = logits[i];
    CHECK_CLOSE(L, ref_z(ld, N, E, beta), 0, 1e-6, "z loss value");
    LossCtx ctx = {MOE_SCORE_SOFTMAX, NULL, NULL, NULL, N, E, 1, beta};
    check_gradient(z_of, &ctx, logits, g, N * E, "z loss gradient");
}

// --- bias update, interleaving, BF16 -------------------------------------------------------------------------------

static void test_bias_update(void) {
    const int64_t load[4] = {5, 1, 2, 0};   // mean 2: over, under, at, under (no tokens)
    float bias[4] = {0.1f, -0.2f, 0.3f, 0.0f};
    const float g = 0.001f;
    const float want[4] = {0.1f - g, -0.2f + g, 0.3f, 0.0f + g};
    moe_bias_update(load, 4, g, bias);
    CHECK(bias[0] == want[0] && bias[1] == want[1] && bias[2] == want[2] && bias[3] == want[3],
          "bias update: %g %g %g %g", bias[0], bias[1], bias[2], bias[3]);
    // a mean that is not an integer: 7 / 3 per expert; 2 is under, 3 over
    const int64_t l3[3] = {2, 3, 2};
    float b3[3] = {0, 0, 0};
    moe_bias_update(l3, 3, 0.5f, b3);
    CHECK(b3[0] == 0.5f && b3[1] == -0.5f && b3[2] == 0.5f, "bias update, fractional mean: %g %g %g", b3[0], b3[1], b3[2]);
    // the update moves the choice toward the underloaded expert: equal scores, expert 1 underloaded
    const float eq[2] = {0.0f, 0.0f};
    const int64_t l2[2] = {10, 2};
    float b2[2] = {0, 0};
    int id[1];
    float w[1];
    moe_route_sigmoid_bias(eq, b2, 1, 2, 1, id, w);
    CHECK(id[0] == 0, "before the update the tie goes to expert 0");
    moe_bias_update(l2, 2, 1e-3f, b2);
    moe_route_sigmoid_bias(eq, b2, 1, 2, 1, id, w);
    CHECK(id[0] == 1 && w[0] == 1.0f, "after it, to the underloaded expert 1 (weight 1: the bias is not in it)");
}

static void test_interleave(void) {
    int ok = 1;
    for (int l = 0; l < 12; l++) ok &= moe_layer_is_moe(l, 1) && moe_layer_index(l, 1) == l;
    CHECK(ok && moe_num_layers(12, 1) == 12, "--moe-every 1: every layer");
    const int want2[7] = {-1, 0, -1, 1, -1, 2, -1};
    int got[7];
    for (int l = 0; l < 7; l++) got[l] = moe_layer_index(l, 2);
    CHECK_INTS(got, want2, 7, "--moe-every 2 over 7 layers: layers 1, 3, 5");
    CHECK(moe_num_layers(7, 2) == 3 && moe_num_layers(7, 3) == 2 && moe_layer_index(5, 3) == 1 &&
          moe_layer_index(4, 3) == -1, "--moe-every 3 over 7 layers: layers 2, 5");
    CHECK(moe_num_layers(12, 0) == 0 && !moe_layer_is_moe(0, 0) && moe_layer_index(3, 0) == -1, "--moe-every 0: none");
}

static void test_bf16(void) {
    CHECK(moe_bf16_rne(1.0f) == 1.0f && moe_bf16_rne(1.0f + 0x1p-8f) == 1.0f &&
          moe_bf16_rne(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f && moe_bf16_rne(1.0f + 0x1p-8f + 0x1p-20f) == 1.0f + 0x1p-7f,
          "BF16 rounding: ties to even, above the tie up");
    CHECK(isnan(moe_bf16_rne(NAN)) && moe_bf16_rne(-INFINITY) == -INFINITY && moe_bf16_rne(3.4e38f) == INFINITY,
          "BF16 rounding of NaN, -inf, and a float above BF16's largest");
}

// --- property sweeps --------------------------------------------------------------------------------------------------

static void test_sweep(void) {
    enum { NMAX = 64, EMAX = 16, MMAX = 32 };
    static float logits[NMAX * EMAX], w[NMAX * EMAX];
    static int ids[NMAX * EMAX], row_of[NMAX * EMAX], slot_of_row[NMAX * EMAX + EMAX * MMAX];
    const int mults[4] = {1, 2, 16, 32};
    int bad_ids = 0, bad_rank = 0, bad_w = 0, bad_perm = 0, trials = 400;
    for (int trial = 0; trial < trials; trial++) {
        const int N = 1 + irand(NMAX), E = 1 + irand(EMAX), k = 1 + irand(E), M = mults[irand(4)];
        const MoeScore kind = (MoeScore)irand(2);
        const int ties = irand(2);   // small integers: many equal logits
        float bias[EMAX];
        const int with_bias = kind == MOE_SCORE_SIGMOID && irand(2);
        for (int e = 0; e < E; e++) bias[e] = ties ? 0.125f * irand(3) : (float)(0.05 * nrand());
        for (int i = 0; i < N * E; i++) logits[i] = ties ? (float)(irand(3) - 1) : (float)(2 * nrand());
        moe_route(kind, logits, with_bias ? bias : NULL, N, E, k, ids, w);
        for (int t = 0; t < N; t++) {
            const int* id = ids + t * k;
            const float* l = logits + t * E;
            int chosen[EMAX] = {0};
            double sum = 0.0;
            for (int j = 0; j < k; j++) {
                if (id[j] < 0 || id[j] >= E || chosen[id[j]]) { bad_ids++; break; }
                chosen[id[j]] = 1;
                sum += w[t * k + j];
                if (!(w[t * k + j] >= 0.0f && w[t * k + j] <= 1.0f)) bad_w++;
            }
            if (fabs(sum - 1.0) > 1e-6 * k) bad_w++;
            const float* b = with_bias ? bias : NULL;
            for (int j = 0; j + 1 < k; j++)   // rank order within the slots
                if (!moe_ranks_before(moe_select_key(kind, l[id[j]], b, id[j]), id[j],
                                      moe_select_key(kind, l[id[j + 1]], b, id[j + 1]), id[j + 1])) bad_rank++;
            for (int i = 0; i < E; i++)   // every chosen expert ranks before every other
                if (!chosen[i] && !moe_ranks_before(moe_select_key(kind, l[id[k - 1]], b, id[k - 1]), id[k - 1],
                                                    moe_select_key(kind, l[i], b, i), i)) bad_rank++;
            if (kind == MOE_SCORE_SOFTMAX)   // softmax weights follow the rank order
                for (int j = 0; j + 1 < k; j++) if (w[t * k + j] < w[t * k + j + 1]) bad_w++;
        }
        int counts[EMAX], offsets[EMAX + 1];
        const int cap = (int)moe_rows_bound(N, E, k, M);
        const MoePerm perm = {counts, offsets, row_of, slot_of_row};
        const int rows = moe_permute(ids, N, E, k, M, perm, cap);
        int64_t total = 0;
        int ok = offsets[0] == 0 && rows == offsets[E] && rows <= cap;
        for (int e = 0; e < E; e++) {
            total += counts[e];
            const int span = offsets[e + 1] - offsets[e];
            ok &= span >= counts[e] && span % M == 0 && span - counts[e] < M && (counts[e] > 0 || span == 0);
            for (int r = offsets[e]; r < offsets[e + 1]; r++) {
                const int s = slot_of_row[r];
                if (r < offsets[e] + counts[e]) {
                    ok &= s >= 0 && s < N * k && ids[s] == e && row_of[s] == r;
                    if (r > offsets[e]) ok &= s > slot_of_row[r - 1];   // by token, then slot
                } else {
                    ok &= s == -1;
                }
            }
        }
        ok &= total == (int64_t)N * k;
        for (int s = 0; s < N * k; s++) ok &= row_of[s] >= 0 && row_of[s] < rows && slot_of_row[row_of[s]] == s;
        for (int r = rows; r < cap; r++) ok &= slot_of_row[r] == -1;
        bad_perm += !ok;
    }
    CHECK(bad_ids == 0, "sweep: %d tokens without k distinct valid experts", bad_ids);
    CHECK(bad_rank == 0, "sweep: %d choices out of rank order or missing a better expert", bad_rank);
    CHECK(bad_w == 0, "sweep: %d tokens whose weights are outside [0, 1], do not sum to 1, or are out of order", bad_w);
    CHECK(bad_perm == 0, "sweep: %d of %d permutations break counts, offsets, padding, order or the inverse", bad_perm,
          trials);
}

// --- bad calls ----------------------------------------------------------------------------------------------------------

static void bad_k(const void*) { float l[4] = {0}, w[5]; int id[5]; moe_route_softmax_topk(l, 1, 4, 5, id, w); }
static void bad_expert(const void*) {
    const int ids[2] = {0, 4};
    int c[4], o[5], ro[2], sr[2];
    const MoePerm perm = {c, o, ro, sr};
    moe_permute(ids, 1, 4, 2, 1, perm, 2);
}
static void bad_twice(const void*) {
    const int ids[4] = {0, 1, 2, 2};
    int c[4], o[5], ro[4], sr[4];
    const MoePerm perm = {c, o, ro, sr};
    moe_permute(ids, 2, 4, 2, 1, perm, 4);
}
static void bad_cap(const void*) {
    const int ids[2] = {0, 1};
    int c[4], o[5], ro[2], sr[8];
    const MoePerm perm = {c, o, ro, sr};
    moe_permute(ids, 1, 4, 2, 4, perm, 7);
}
static void bad_counts(const void*) {
    float l[8] = {0};
    const int c[4] = {1, 1, 1, 0};
    moe_aux_loss(MOE_SCORE_SOFTMAX, l, c, 2, 4, 2, 0.01f, NULL);
}
static void bad_gamma(const void*) { const int64_t load[2] = {1, 1}; float b[2] = {0}; moe_bias_update(load, 2, -1.0f, b); }

static void test_bad_calls(void) {
    struct { void (*f)(const void*); const char* msg; } bad[] = {
        {bad_k, "top-k 5 must be in [1, 4]"},
        {bad_expert, "routes to expert 4 (of 4)"},
        {bad_twice, "routes to expert 2 twice"},
        {bad_cap, "exceed the buffer's 7 (size it with moe_rows_bound)"},
        {bad_counts, "counts sum to 3, not N k = 4"},
        {bad_gamma, "gamma -1 must be finite and >= 0"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char err[1024];
        int rc = test_run_child(bad[i].f, NULL, err, sizeof(err));
        CHECK(rc == 1 && strstr(err, bad[i].msg) != NULL, "bad call %zu: exit %d, stderr '%s', expected '%s'", i, rc,
              err, bad[i].msg);
    }
}

int main(void) {
    test_softmax_by_hand();
    test_sigmoid_by_hand();
    test_permute_by_hand();
    test_round_trips();
    test_combine();
    test_losses_by_hand();
    test_gradients();
    test_bias_update();
    test_interleave();
    test_bf16();
    test_sweep();
    test_bad_calls();
    return test_summary("test_moe");
}
