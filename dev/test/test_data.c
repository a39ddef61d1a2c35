// test_data.c: the data loader (llmc/run/dataloader.h) and tokenizer (llmc/run/tokenizer.h), on the CPU.
// Writes small shards into a temporary directory and checks batch contents, rank slicing, wrap-around,
// shuffled coverage, determinism, resume from a saved state, every error message (in a forked child),
// and that the shipped tokenizer decodes the shipped tinyshakespeare shards. Run from the repo root.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "llmc/run/dataloader.h"
#include "llmc/run/tokenizer.h"
#include "dev/test/testing.h"
#include "dev/test/check_coverage.h"

static char tmpdir[64];

// Token i of test shard s is s*5000 + i: every token says where it came from.
#define SHARD_STRIDE 5000

static void write_shard_raw(const char* path, int32_t magic, int32_t version, int32_t header_count,
                            const uint16_t* toks, int64_t n) {
    int32_t header[SHARD_HEADER_INTS] = {0};
    header[0] = magic; header[1] = version; header[2] = header_count;
    FILE* f = fopen_check(path, "wb");
    fwrite_check(header, sizeof(int32_t), SHARD_HEADER_INTS, f, path);
    if (n) fwrite_check(toks, sizeof(uint16_t), (size_t)n, f, path);
    fclose_check(f, path);
}

// Writes shards dir/name_000.bin ... with the given token counts; returns the glob pattern.
static const char* make_shards(const char* name, const int64_t* sizes, int n) {
    static char pattern[256];
    for (int s = 0; s < n; s++) {
        char path[256];
        snprintf(path, sizeof(path), "%s/%s_%03d.bin", tmpdir, name, s);
        uint16_t* toks = (uint16_t*)xmalloc(sizeof(uint16_t) * sizes[s]);
        for (int64_t i = 0; i < sizes[s]; i++) toks[i] = (uint16_t)(s * SHARD_STRIDE + i);
        write_shard_raw(path, SHARD_MAGIC, SHARD_VERSION, (int32_t)sizes[s], toks, sizes[s]);
        free(toks);
    }
    snprintf(pattern, sizeof(pattern), "%s/%s_*.bin", tmpdir, name);
    return pattern;
}

// A row as (shard, row index); -1 when the row is not a well-formed T-token window with shifted targets.
typedef struct { int shard; int64_t row; } RowId;
static RowId row_of(const DataLoader* dl, int b) {
    RowId id = {-1, -1};
    const int* in = dl->inputs + (size_t)b * dl->T;
    const int* tg = dl->targets + (size_t)b * dl->T;
    int shard = in[0] / SHARD_STRIDE, pos = in[0] % SHARD_STRIDE;
    if (pos % dl->T) return id;
    for (int t = 0; t < dl->T; t++) if (in[t] != in[0] + t || tg[t] != in[0] + t + 1) return id;
    id.shard = shard; id.row = pos / dl->T;
    return id;
}

// --- sequential order, wrap-around, rank slicing ---------------------------------------------------

// Checks world loaders (one per rank) against the unshuffled layout for `epochs` epochs.
static void check_sequential(const char* pattern, const int64_t* sizes, int nshards, int B, int T, int world, int epochs) {
    DataLoader* dls = (DataLoader*)xmalloc(sizeof(DataLoader) * world);
    for (int r = 0; r < world; r++) dataloader_init(&dls[r], pattern, B, T, r, world, 0, 0, 0);
    int64_t expect_batches = 0;
    for (int s = 0; s < nshards; s++) expect_batches += ((sizes[s] - 1) / T) / (world * B);
    CHECK(dls[0].num_batches == expect_batches, "world %d: %lld batches/epoch, want %lld", world,
          (long long)dls[0].num_batches, (long long)expect_batches);
    int bad = 0;
    for (int e = 0; e < epochs; e++) {
        for (int s = 0; s < nshards; s++) {
            int64_t nb = ((sizes[s] - 1) / T) / (world * B);
            for (int64_t k = 0; k < nb; k++) {
                for (int r = 0; r < world; r++) {
                    dataloader_next_batch(&dls[r]);
                    DataLoaderState st = dataloader_get_state(&dls[r]);
                    if (st.epoch != e) bad++;
                    for (int b = 0; b < B; b++) {
                        RowId id = row_of(&dls[r], b);
                        // rank r holds the r-th B*T slice of the k-th world*B*T chunk
                        if (id.shard != s || id.row != (k * world + r) * B + b) bad++;
                    }
                }
            }
        }
    }
    CHECK(bad == 0, "sequential layout world=%d B=%d T=%d: %d rows in the wrong place", world, B, T, bad);
    for (int r = 0; r < world; r++) dataloader_free(&dls[r]);
    free(dls);
}

static void test_sequential(void) {
    int64_t sizes[3] = {81, 100, 50};   // 10, 12, 6 rows of T=8
    const char* pat = make_shards("seq", sizes, 3);
    check_sequential(pat, sizes, 3, 2, 8, 1, 3);   // 5 + 6 + 3 batches per epoch, 3 epochs
    check_sequential(pat, sizes, 3, 2, 8, 3, 3);   // 1 + 2 + 1 batches per epoch
    check_sequential(pat, sizes, 3, 1, 8, 2, 2);

    // shards of a multiple of T tokens: the last T tokens have no target after them, so a shard of
    // 8 T tokens holds 7 rows, not 8 (the 8th would read one token past the shard)
    int64_t whole[3] = {8 * 8, 12 * 8, 5 * 8};   // 7, 11, 4 rows of T=8
    const char* patw = make_shards("wholeT", whole, 3);
    check_sequential(patw, whole, 3, 1, 8, 1, 2);
    check_sequential(patw, whole, 3, 1, 8, 2, 2);
    check_sequential(patw, whole, 3, 2, 8, 1, 2);

    // first batch exactly: inputs 0..15, targets 1..16
    DataLoader dl;
    dataloader_init(&dl, pat, 2, 8, 0, 1, 0, 0, 0);
    dataloader_next_batch(&dl);
    int bad = 0;
    for (int i = 0; i < 16; i++) bad += dl.inputs[i] != i || dl.targets[i] != i + 1;
    CHECK(bad == 0, "first batch is not tokens 0..15 with targets 1..16");
    dataloader_free(&dl);

    // a shard with exactly B*T + 1 tokens gives exactly one batch, and the last target is its last token
    int64_t one[1] = {17};
    const char* pat1 = make_shards("exact", one, 1);
    dataloader_init(&dl, pat1, 2, 8, 0, 1, 0, 0, 0);
    CHECK(dl.num_batches == 1, "17-token shard, B*T=16: %lld batches, want 1", (long long)dl.num_batches);
    dataloader_next_batch(&dl);
    CHECK(dl.targets[15] == 16, "last target %d, want 16", dl.targets[15]);
    dataloader_next_batch(&dl);   // wraps to epoch 1, same batch
    CHECK(dl.inputs[0] == 0 && dataloader_get_state(&dl).epoch == 1, "wrap-around of a one-batch shard");
    dataloader_free(&dl);
}

// --- shuffling -------------------------------------------------------------------------------------

// Runs every rank through one epoch and counts how often each (shard, row) was seen.
static int shuffled_epoch_coverage(DataLoader* dls, int world, const int64_t* rows, int nshards, RowId* seq) {
    int64_t total_rows = 0;
    for (int s = 0; s < nshards; s++) total_rows += rows[s];
    int* seen = (int*)calloc((size_t)nshards * 64, sizeof(int));
    int bad = 0, nseq = 0;
    for (int64_t k = 0; k < dls[0].num_batches; k++) {
        for (int r = 0; r < world; r++) {
            dataloader_next_batch(&dls[r]);
            for (int b = 0; b < dls[r].B; b++) {
                RowId id = row_of(&dls[r], b);
                if (id.shard < 0 || id.shard >= nshards || id.row >= rows[id.shard]) { bad++; continue; }
                seen[id.shard * 64 + id.row]++;
                seq[nseq++] = id;
            }
        }
    }
    for (int s = 0; s < nshards; s++)
        for (int64_t i = 0; i < rows[s]; i++) bad += seen[s * 64 + i] != 1;
    bad += nseq != total_rows;
    free(seen);
    return bad;
}

static int same_sequence(const RowId* a, const RowId* b, int n) {
    for (int i = 0; i < n; i++) if (a[i].shard != b[i].shard || a[i].row != b[i].row) return 0;
    return 1;
}

static void test_shuffle(void) {
    // rows divisible by world*B = 4, so one epoch sees every row exactly once
    int64_t sizes[4] = {65, 97, 33, 129};   // 8, 12, 4, 16 rows of T=8
    int64_t rows[4] = {8, 12, 4, 16};
    int n = 40;
    const char* pat = make_shards("shuf", sizes, 4);
    DataLoader dls[2];
    for (int r = 0; r < 2; r++) dataloader_init(&dls[r], pat, 2, 8, r, 2, 1, 1234, 50257);
    RowId e0[40], e1[40], e2[40];
    CHECK(shuffled_epoch_coverage(dls, 2, rows, 4, e0) == 0, "shuffled epoch 0 does not cover every row once");
    CHECK(shuffled_epoch_coverage(dls, 2, rows, 4, e1) == 0, "shuffled epoch 1 does not cover every row once");
    CHECK(shuffled_epoch_coverage(dls, 2, rows, 4, e2) == 0, "shuffled epoch 2 does not cover every row once");
    CHECK(!same_sequence(e0, e1, n) && !same_sequence(e1, e2, n), "shuffled epochs repeat the same order");
    // not the unshuffled order
    int identity = 1, pos = 0;
    for (int s = 0; s < 4; s++) for (int i = 0; i < rows[s]; i++, pos++) identity &= e0[pos].shard == s && e0[pos].row == i;
    CHECK(!identity, "shuffle on gave the unshuffled order");
    // shard order itself is permuted across epochs: the first shard of some epoch differs
    CHECK(e0[0].shard != e1[0].shard || e1[0].shard != e2[0].shard || e0[0].shard != 0,
          "every epoch starts with shard 0");
    // within an epoch a shard is read in one contiguous run (one shard in memory at a time)
    int switches = 0;
    for (int i = 1; i < n; i++) switches += e0[i].shard != e0[i - 1].shard;
    CHECK(switches == 3, "epoch 0 switches shards %d times, want 3", switches);
    // the shard order is drawn afresh each epoch: over 8 epochs not all orders agree
    int orders[8][4], distinct = 0;
    for (int e = 0; e < 8; e++) {
        RowId ep[40];
        shuffled_epoch_coverage(dls, 2, rows, 4, ep);
        int k = 0;
        orders[e][k++] = ep[0].shard;
        for (int i = 1; i < n; i++) if (ep[i].shard != ep[i - 1].shard && k < 4) orders[e][k++] = ep[i].shard;
        if (e > 0 && memcmp(orders[e], orders[0], sizeof(orders[0])) != 0) distinct++;
    }
    CHECK(distinct > 0, "8 shuffled epochs all read the shards in the same order");
    for (int r = 0; r < 2; r++) dataloader_free(&dls[r]);

    // one shard: its rows are drawn afresh each epoch too
    int64_t single[1] = {8 * 16 + 1};
    int64_t single_rows[1] = {16};
    const char* pat1 = make_shards("single", single, 1);
    DataLoader one;
    dataloader_init(&one, pat1, 4, 8, 0, 1, 1, 3, 0);
    RowId s0[16], s1[16];
    CHECK(shuffled_epoch_coverage(&one, 1, single_rows, 1, s0) == 0, "single shard: epoch 0 coverage");
    CHECK(shuffled_epoch_coverage(&one, 1, single_rows, 1, s1) == 0, "single shard: epoch 1 coverage");
    CHECK(!same_sequence(s0, s1, 16), "single shard: epochs 0 and 1 read the rows in the same order");
    dataloader_free(&one);

    // determinism: same seed, same batches; another seed, other batches
    DataLoader a, b, c;
    dataloader_init(&a, pat, 2, 8, 1, 2, 1, 99, 0);
    dataloader_init(&b, pat, 2, 8, 1, 2, 1, 99, 0);
    dataloader_init(&c, pat, 2, 8, 1, 2, 1, 100, 0);
    int differ_ab = 0, differ_ac = 0;
    for (int k = 0; k < 25; k++) {
        dataloader_next_batch(&a); dataloader_next_batch(&b); dataloader_next_batch(&c);
        differ_ab += memcmp(a.inputs, b.inputs, sizeof(int) * 16) != 0 || memcmp(a.targets, b.targets, sizeof(int) * 16) != 0;
        differ_ac += memcmp(a.inputs, c.inputs, sizeof(int) * 16) != 0;
    }
    CHECK(differ_ab == 0, "same seed gave different batches (%d of 25)", differ_ab);
    CHECK(differ_ac > 0, "seeds 99 and 100 gave the same 25 batches");
    dataloader_free(&a); dataloader_free(&b); dataloader_free(&c);

    // shards of a multiple of T tokens, shuffled: 7, 11 and 4 rows (not 8, 12, 5), each once per epoch
    int64_t whole[3] = {8 * 8, 12 * 8, 5 * 8};
    int64_t whole_rows[3] = {7, 11, 4};
    const char* patw = make_shards("wholeTs", whole, 3);
    DataLoader w1;
    dataloader_init(&w1, patw, 1, 8, 0, 1, 1, 11, 0);
    CHECK(w1.num_batches == 22, "shards of 64, 96, 40 tokens, T=8: %lld batches of one row, want 22",
          (long long)w1.num_batches);
    for (int e = 0; e < 4; e++) {
        RowId ew[22];
        CHECK(shuffled_epoch_coverage(&w1, 1, whole_rows, 3, ew) == 0,
              "shards of a multiple of T tokens, shuffled epoch %d: rows not covered exactly once", e);
    }
    dataloader_free(&w1);

    // leftover rows (not a whole batch) are skipped, but no row is ever repeated within an epoch
    int64_t odd[2] = {8 * 7 + 1, 8 * 5 + 1};   // 7 and 5 rows, world*B = 4: 1 + 1 batches
    int64_t odd_rows[2] = {7, 5};
    const char* pat2 = make_shards("odd", odd, 2);
    DataLoader d2[2];
    for (int r = 0; r < 2; r++) dataloader_init(&d2[r], pat2, 2, 8, r, 2, 1, 7, 0);
    CHECK(d2[0].num_batches == 2, "odd shards: %lld batches/epoch, want 2", (long long)d2[0].num_batches);
    int dup = 0;
    int seen[2][8] = {{0}};
    for (int k = 0; k < 2; k++)
        for (int r = 0; r < 2; r++) {
            dataloader_next_batch(&d2[r]);
            for (int bb = 0; bb < 2; bb++) {
                RowId id = row_of(&d2[r], bb);
                if (id.shard < 0 || id.row >= odd_rows[id.shard]) { dup++; continue; }
                dup += seen[id.shard][id.row]++ != 0;
            }
        }
    CHECK(dup == 0, "odd shards: %d repeated or malformed rows in one epoch", dup);
    for (int r = 0; r < 2; r++) dataloader_free(&d2[r]);
}

// Counts of each order of 4 items, one order per epoch, read from the loader: rows of a 4-row shard
// (shards = 0) or the order of 4 one-row shards (shards = 1). An order is a base-4 number: 256 slots,
// of which the 24 permutations should be hit.
static void shuffle_orders(int shards, int epochs, int* counts) {
    memset(counts, 0, sizeof(int) * 256);
    int64_t one_row[4] = {9, 9, 9, 9}, four_rows[1] = {33};
    const char* pat = shards ? make_shards("uni_shards", one_row, 4) : make_shards("uni_rows", four_rows, 1);
    DataLoader dl;
    dataloader_init(&dl, pat, 1, 8, 0, 1, 1, 2024, 0);
    for (int e = 0; e < epochs; e++) {
        int code = 0;
        for (int i = 0; i < 4; i++) {
            dataloader_next_batch(&dl);
            RowId id = row_of(&dl, 0);
            code = code * 4 + (int)(shards ? id.shard : id.row);
        }
        counts[code]++;
    }
    dataloader_free(&dl);
}

// Chi-square of the 24 permutation counts against uniform; -1 if a non-permutation showed up.
static double perm_chi2(const int* counts, int total) {
    double chi2 = 0, expect = total / 24.0;
    for (int code = 0; code < 256; code++) {
        int d[4] = {code >> 6, (code >> 4) & 3, (code >> 2) & 3, code & 3}, used = 0;
        for (int i = 0; i < 4; i++) used |= 1 << d[i];
        if (used != 15) { if (counts[code]) return -1; continue; }
        chi2 += (counts[code] - expect) * (counts[code] - expect) / expect;
    }
    return chi2;
}

// Every order is equally likely (Fisher-Yates), for the rows of a shard and for the shards of an epoch.
// Coverage cannot tell: Sattolo's variant (swap with j < i instead of j <= i) also visits every row
// once, but only ever gives the 6 cyclic orders of 4. Chi-square with 23 degrees of freedom: a uniform
// shuffle stays below 60 but for a chance of 4e-5 (and the keys are fixed, so the outcome is too);
// Sattolo's gives about 3 * the number of epochs.
static void test_shuffle_uniform(void) {
    int counts[256];
    shuffle_orders(0, 12000, counts);
    double chi2 = perm_chi2(counts, 12000);
    CHECK(chi2 >= 0 && chi2 < 60, "row orders of a 4-row shard over 12000 epochs: chi-square %.1f (23 dof), want < 60",
          chi2);
    printf("shuffle uniformity: rows chi-square %.1f (23 dof)\n", chi2);
    shuffle_orders(1, 2400, counts);
    chi2 = perm_chi2(counts, 2400);
    CHECK(chi2 >= 0 && chi2 < 60, "shard orders of 4 shards over 2400 epochs: chi-square %.1f (23 dof), want < 60",
          chi2);
    printf("shuffle uniformity: shards chi-square %.1f (23 dof)\n", chi2);
}

// --- global micro-batch index ----------------------------------------------------------------------

// world ranks with accum micro-steps each against one process with world * accum micro-steps, for
// `steps` optimizer steps: each micro-batch of a step, named by dataloader_global_micro_index(), must
// hold the same rows in both, and the indices of a step must be 0 .. world * accum - 1, each once.
// Returns the number of mismatches.
static int compare_micro_index(const char* pattern, int B, int T, int world, int accum, int shuffle, int steps) {
    const int per_step = world * accum;
    DataLoader* dls = (DataLoader*)xmalloc(sizeof(DataLoader) * world);
    for (int r = 0; r < world; r++) dataloader_init(&dls[r], pattern, B, T, r, world, shuffle, 77, 0);
    DataLoader one;
    dataloader_init(&one, pattern, B, T, 0, 1, shuffle, 77, 0);
    RowId* rows = (RowId*)xmalloc(sizeof(RowId) * per_step * B);   // the step's rows by global index
    int* filled = (int*)xmalloc(sizeof(int) * per_step);
    int bad = 0;
    for (int step = 0; step < steps; step++) {
        memset(filled, 0, sizeof(int) * per_step);
        for (int micro = 0; micro < accum; micro++)      // the trainer's loop, on every rank
            for (int r = 0; r < world; r++) {
                dataloader_next_batch(&dls[r]);
                int g = dataloader_global_micro_index(&dls[r], micro);
                if (g < 0 || g >= per_step || filled[g]++) { bad++; continue; }
                for (int b = 0; b < B; b++) rows[g * B + b] = row_of(&dls[r], b);
            }
        for (int g = 0; g < per_step; g++) bad += filled[g] != 1;
        for (int micro = 0; micro < per_step; micro++) {   // one process, world times the accumulation
            dataloader_next_batch(&one);
            int g = dataloader_global_micro_index(&one, micro);
            if (g != micro) { bad++; continue; }
            for (int b = 0; b < B; b++) {
                RowId want = row_of(&one, b), got = rows[g * B + b];
                bad += want.shard < 0 || got.shard != want.shard || got.row != want.row;
            }
        }
    }
    for (int r = 0; r < world; r++) dataloader_free(&dls[r]);
    dataloader_free(&one);
    free(dls); free(rows); free(filled);
    return bad;
}

static void test_global_micro_index(void) {
    // 48, 24 and 72 rows of T=8: multiples of every world * B below (1..8 but 5 and 7), so world
    // processes and one process read the same rows in every epoch
    int64_t sizes[3] = {48 * 8 + 1, 24 * 8 + 1, 72 * 8 + 1};
    const char* pat = make_shards("micro", sizes, 3);
    const int worlds[] = {1, 2, 3, 4}, accums[] = {1, 2, 3};
    for (int shuffle = 0; shuffle <= 1; shuffle++)
        for (int B = 1; B <= 2; B++)
            for (size_t wi = 0; wi < sizeof(worlds) / sizeof(worlds[0]); wi++)
                for (size_t ai = 0; ai < sizeof(accums) / sizeof(accums[0]); ai++) {
                    int world = worlds[wi], accum = accums[ai];
                    int steps = 2 * 144 / (world * accum * B) + 1;   // past two epochs: shard and epoch wraps
                    int bad = compare_micro_index(pat, B, 8, world, accum, shuffle, steps);
                    CHECK(bad == 0, "global micro index, %d ranks x %d micro-steps vs 1 x %d, B=%d shuffle=%d: "
                          "%d mismatches", world, accum, world * accum, B, shuffle, bad);
                }
    // the trainer's numbering, literally: rank 2 of 4, third micro-step
    DataLoader dl;
    dataloader_init(&dl, pat, 2, 8, 2, 4, 0, 0, 0);
    CHECK(dataloader_global_micro_index(&dl, 2) == 10, "rank 2 of 4, micro 2: index %d, want 10",
          dataloader_global_micro_index(&dl, 2));
    dataloader_free(&dl);
}

// --- resume and reset ------------------------------------------------------------------------------

static void test_resume(void) {
    int64_t sizes[3] = {65, 97, 33};   // world=2, B=2: 2 + 3 + 1 = 6 batches per epoch
    const char* pat = make_shards("resume", sizes, 3);
    int stops[] = {0, 1, 2, 5, 6, 7, 11, 12, 13, 20};
    for (int shuffle = 0; shuffle <= 1; shuffle++) {
        for (size_t i = 0; i < sizeof(stops) / sizeof(stops[0]); i++) {
            DataLoader a, b;
            dataloader_init(&a, pat, 2, 8, 1, 2, shuffle, 42, 0);
            for (int k = 0; k < stops[i]; k++) dataloader_next_batch(&a);
            DataLoaderState st = dataloader_get_state(&a);
            // b has been elsewhere first, so stale cached shards or permutations would show
            dataloader_init(&b, pat, 2, 8, 1, 2, shuffle, 42, 0);
            for (int k = 0; k < 3 + (int)i; k++) dataloader_next_batch(&b);
            DataLoaderState copy;
            memcpy(&copy, &st, sizeof(st));   // as if written to and read from a checkpoint
            dataloader_set_state(&b, &copy);
            int differ = 0;
            for (int k = 0; k < 15; k++) {
                dataloader_next_batch(&a); dataloader_next_batch(&b);
                differ += memcmp(a.inputs, b.inputs, sizeof(int) * 16) != 0 || memcmp(a.targets, b.targets, sizeof(int) * 16) != 0;
            }
            CHECK(differ == 0, "shuffle=%d: resume after %d batches: %d of the next 15 batches differ", shuffle, stops[i], differ);
            dataloader_free(&a); dataloader_free(&b);
        }
    }

    // validation loader: reset() gives the same batches again
    DataLoader v;
    dataloader_init(&v, pat, 2, 8, 0, 1, 0, 0, 0);
    int first[3][16];
    for (int k = 0; k < 3; k++) { dataloader_next_batch(&v); memcpy(first[k], v.inputs, sizeof(first[k])); }
    for (int k = 0; k < 17; k++) dataloader_next_batch(&v);
    dataloader_reset(&v);
    int differ = 0;
    for (int k = 0; k < 3; k++) { dataloader_next_batch(&v); differ += memcmp(first[k], v.inputs, sizeof(first[k])) != 0; }
    CHECK(differ == 0 && dataloader_get_state(&v).epoch == 0, "reset() does not restart at the first batch");
    dataloader_free(&v);
}

// --- error messages --------------------------------------------------------------------------------

// Runs fn(arg) in a child; checks it exits with want_status class (nonzero, or 0 when want_ok) and that
// its stderr holds both substrings (the second may be NULL).
static void expect_exit(const char* what, void (*fn)(const void*), const void* arg, int want_ok,
                        const char* sub1, const char* sub2) {
    char buf[4096];
    int code = test_run_child(fn, arg, buf, sizeof(buf));
    size_t len = strlen(buf);
    int exited = code >= 0;
    if (want_ok) CHECK(exited && code == 0, "%s: child exit status %d, want 0; stderr: %s", what, code, buf);
    else CHECK(exited && code != 0, "%s: child exit status %d (signal? %d), want a clean nonzero exit; stderr: %s",
               what, code, !exited, buf);
    CHECK(strstr(buf, sub1) != NULL, "%s: stderr lacks \"%s\": %s", what, sub1, buf);
    if (sub2) CHECK(strstr(buf, sub2) != NULL, "%s: stderr lacks \"%s\": %s", what, sub2, buf);
    if (!want_ok) CHECK(strncmp(buf, "error: ", 7) == 0 && strchr(buf, '\n') == buf + len - 1,
                        "%s: want exactly one line starting with 'error: ', got: %s", what, buf);
    if (!want_ok && exited && code != 0 && strstr(buf, sub1) && (!sub2 || strstr(buf, sub2))) check_seen(buf);
}

typedef struct { const char* pattern; int B, T, world, vocab; } LoadArgs;
static void load_one_batch(const void* p) {
    const LoadArgs* a = (const LoadArgs*)p;
    DataLoader dl;
    dataloader_init(&dl, a->pattern, a->B, a->T, 0, a->world, 0, 0, a->vocab);
    dataloader_next_batch(&dl);
    dataloader_free(&dl);
}
static void init_only(const void* p) {   // dataloader_init alone: what the trainer does before the GPU
    const LoadArgs* a = (const LoadArgs*)p;
    DataLoader dl;
    dataloader_init(&dl, a->pattern, a->B, a->T, 0, a->world, 0, 0, a->vocab);
    dataloader_free(&dl);
}
static void resume_mismatch(const void* p) {
    const char* pattern = (const char*)p;
    DataLoader a, b;
    dataloader_init(&a, pattern, 2, 8, 0, 1, 1, 5, 0);
    dataloader_init(&b, pattern, 2, 8, 0, 1, 1, 6, 0);
    DataLoaderState st = dataloader_get_state(&a);
    dataloader_set_state(&b, &st);
}
static void tokenizer_open(const void* p) {
    Tokenizer tok;
    tokenizer_init(&tok, (const char*)p);
    if (tokenizer_decode(&tok, 0) != NULL) fprintf(stderr, "decode gave text without a tokenizer\n");
    tokenizer_print_safe(stdout, &tok, 5);
    tokenizer_free(&tok);
}

static void test_errors(void) {
    char path[256], pat[256];
    uint16_t toks[100];
    for (int i = 0; i < 100; i++) toks[i] = (uint16_t)i;

    snprintf(pat, sizeof(pat), "%s/nothing_*.bin", tmpdir);
    LoadArgs a = {pat, 2, 8, 1, 0};
    expect_exit("no matching file", load_one_batch, &a, 0, "no data file matches", "nothing_*.bin");

    snprintf(path, sizeof(path), "%s/badmagic.bin", tmpdir);
    write_shard_raw(path, 12345, 1, 100, toks, 100);
    a.pattern = path;
    expect_exit("bad magic", load_one_batch, &a, 0, "bad magic 12345", "badmagic.bin");

    snprintf(path, sizeof(path), "%s/badversion.bin", tmpdir);
    write_shard_raw(path, SHARD_MAGIC, 7, 100, toks, 100);
    expect_exit("bad version", load_one_batch, &a, 0, "version 7", "badversion.bin");

    snprintf(path, sizeof(path), "%s/truncated.bin", tmpdir);
    write_shard_raw(path, SHARD_MAGIC, 1, 100, toks, 90);
    expect_exit("truncated file", load_one_batch, &a, 0, "truncated", "truncated.bin");

    snprintf(path, sizeof(path), "%s/headeronly.bin", tmpdir);
    FILE* f = fopen_check(path, "wb");
    fwrite_check(toks, 1, 100, f, path);
    fclose_check(f, path);
    expect_exit("file shorter than a header", load_one_batch, &a, 0, "truncated", "headeronly.bin");

    snprintf(path, sizeof(path), "%s/bigtoken.bin", tmpdir);
    uint16_t big[100];
    memcpy(big, toks, sizeof(big));
    big[5] = 60000;
    write_shard_raw(path, SHARD_MAGIC, 1, 100, big, 100);
    a.vocab = 50257;
    expect_exit("token out of vocabulary", load_one_batch, &a, 0, "token 60000 at position 5 is >= the vocabulary size 50257", "bigtoken.bin");
    a.vocab = 0;
    // the same in the second of two shards: found by dataloader_init, before the first batch (and the GPU)
    snprintf(path, sizeof(path), "%s/oov_a.bin", tmpdir);
    write_shard_raw(path, SHARD_MAGIC, 1, 100, toks, 100);
    snprintf(path, sizeof(path), "%s/oov_b.bin", tmpdir);
    big[5] = 5;
    big[77] = 50257;
    write_shard_raw(path, SHARD_MAGIC, 1, 100, big, 100);
    snprintf(pat, sizeof(pat), "%s/oov_*.bin", tmpdir);
    LoadArgs o = {pat, 2, 8, 1, 50257};
    expect_exit("token out of vocabulary in a later shard, at init", init_only, &o, 0,
                "token 50257 at position 77 is >= the vocabulary size 50257", "oov_b.bin");
    o.vocab = 50258;
    expect_exit("the same shards with a larger vocabulary", init_only, &o, 1, "", NULL);

    snprintf(path, sizeof(path), "%s/small.bin", tmpdir);
    write_shard_raw(path, SHARD_MAGIC, 1, 20, toks, 20);
    LoadArgs s = {path, 2, 8, 2, 0};
    expect_exit("too few tokens", load_one_batch, &s, 0, "has 20 tokens, too few for one batch", "= 33 tokens are needed");

    // a directory where a shard should be (it reads as 0 bytes: once reported as "file truncated")
    snprintf(path, sizeof(path), "%s/shards.bin", tmpdir);
    mkdir(path, 0755);
    a.pattern = path;
    expect_exit("directory as a shard", load_one_batch, &a, 0, "is a directory, not a shard file", "shards.bin/*_train*.bin");
    expect_exit("directory as a tokenizer", tokenizer_open, path, 0, "is a directory", "shards.bin");
    rmdir(path);

    snprintf(path, sizeof(path), "%s/fine.bin", tmpdir);
    write_shard_raw(path, SHARD_MAGIC, 1, 100, toks, 100);
    expect_exit("resume with another seed", resume_mismatch, path, 0, "cannot resume the data loader", "seed=5");

    snprintf(path, sizeof(path), "%s/no_tokenizer.bin", tmpdir);
    expect_exit("missing tokenizer", tokenizer_open, path, 1, "warning: tokenizer file", "no_tokenizer.bin");
    snprintf(path, sizeof(path), "%s/fine.bin", tmpdir);   // a shard is not a tokenizer
    expect_exit("tokenizer bad magic", tokenizer_open, path, 0, "bad magic 20240520", "fine.bin");
    snprintf(path, sizeof(path), "%s/headeronly.bin", tmpdir);
    expect_exit("tokenizer truncated", tokenizer_open, path, 0, "truncated", "headeronly.bin");
}

// The checks test_errors does not reach, each next to the nearest input taken; then every check of the loader and the
// tokenizer must have drawn its message (dev/test/check_coverage.h).
typedef struct { const char* pattern; int B, T, rank, world; } InitArgs;
static void init_at(const void* p) {
    const InitArgs* a = (const InitArgs*)p;
    DataLoader dl;
    dataloader_init(&dl, a->pattern, a->B, a->T, a->rank, a->world, 0, 0, 0);
    dataloader_free(&dl);
}
typedef struct { const char* pattern; int64_t epoch, shard_pos, batch_in_shard; } StateArgs;
static void set_state_at(const void* p) {
    const StateArgs* a = (const StateArgs*)p;
    DataLoader dl;
    dataloader_init(&dl, a->pattern, 2, 8, 0, 1, 0, 0, 0);
    DataLoaderState st = dataloader_get_state(&dl);
    st.epoch = a->epoch; st.shard_pos = a->shard_pos; st.batch_in_shard = a->batch_in_shard;
    dataloader_set_state(&dl, &st);
    dataloader_free(&dl);
}

static void test_error_edges(void) {
    char path[256], pat[256], fine[256];
    uint16_t toks[100];
    for (int i = 0; i < 100; i++) toks[i] = (uint16_t)i;
    snprintf(fine, sizeof(fine), "%s/edge_fine.bin", tmpdir);
    write_shard_raw(fine, SHARD_MAGIC, SHARD_VERSION, 100, toks, 100);
    // a shard the pattern lists but stat cannot follow (a dangling link), and one that is not a regular file (a FIFO)
    snprintf(path, sizeof(path), "%s/edge_dangling.bin", tmpdir);
    CHECK(symlink("/nonexistent/shard.bin", path) == 0, "symlink %s", path);
    snprintf(pat, sizeof(pat), "%s/edge_dangl*.bin", tmpdir);
    LoadArgs a = {pat, 2, 8, 1, 0};
    expect_exit("a dangling link as a shard", init_only, &a, 0, "data shard '", "edge_dangling.bin': cannot stat it");
    remove(path);
    snprintf(path, sizeof(path), "%s/edge_fifo.bin", tmpdir);
    CHECK(mkfifo(path, 0600) == 0, "mkfifo %s", path);
    a.pattern = path;
    expect_exit("a FIFO as a shard", init_only, &a, 0, "edge_fifo.bin' is not a regular file", NULL);
    remove(path);
    // a tokenizer's magic; a negative token count, and 0 (the header takes it, one batch does not)
    snprintf(path, sizeof(path), "%s/edge_tok.bin", tmpdir);
    write_shard_raw(path, 20240328, 1, 100, toks, 100);
    expect_exit("a tokenizer file as a shard", init_only, &a, 0, "edge_tok.bin' is a tokenizer file, not a data shard",
                NULL);
    write_shard_raw(path, SHARD_MAGIC, SHARD_VERSION, -1, toks, 0);
    expect_exit("a token count of -1", init_only, &a, 0, "has a negative token count -1 in its header", NULL);
    write_shard_raw(path, SHARD_MAGIC, SHARD_VERSION, 0, toks, 0);
    expect_exit("a token count of 0", init_only, &a, 0, "has 0 tokens, too few for one batch", NULL);
    write_shard_raw(path, SHARD_MAGIC, SHARD_VERSION, 17, toks, 17);   // B x T + 1 = 2 x 8 + 1: exactly one batch
    expect_exit("17 tokens for a batch of 2 x 8", init_only, &a, 1, "", NULL);
    write_shard_raw(path, SHARD_MAGIC, SHARD_VERSION, 16, toks, 16);
    expect_exit("16 tokens for a batch of 2 x 8", init_only, &a, 0, "has 16 tokens, too few for one batch", NULL);
    remove(path);
    // the batch shape and the rank, on both sides
    const struct { InitArgs args; int ok; const char* message; } inits[] = {
        {{fine, 0, 8, 0, 1}, 0, "data loader: batch size B=0 and sequence length T=8 must be positive"},
        {{fine, 2, 0, 0, 1}, 0, "data loader: batch size B=2 and sequence length T=0 must be positive"},
        {{fine, 1, 1, 0, 1}, 1, ""},
        {{fine, 2, 8, 2, 2}, 0, "data loader: rank 2 is not in [0, world size 2)"},
        {{fine, 2, 8, -1, 2}, 0, "data loader: rank -1 is not in [0, world size 2)"},
        {{fine, 2, 8, 0, 0}, 0, "data loader: rank 0 is not in [0, world size 0)"},
        {{fine, 2, 8, 1, 2}, 1, ""},
    };
    for (size_t i = 0; i < sizeof(inits) / sizeof(inits[0]); i++) {
        char what[96];
        snprintf(what, sizeof(what), "init B=%d T=%d rank %d of %d", inits[i].args.B, inits[i].args.T, inits[i].args.rank,
                 inits[i].args.world);
        expect_exit(what, init_at, &inits[i].args, inits[i].ok, inits[i].message, NULL);
    }
    // a saved position out of range (one shard: shard_pos 0 is the only one)
    const struct { StateArgs args; int ok; } states[] = {
        {{fine, 0, 0, 0}, 1}, {{fine, -1, 0, 0}, 0}, {{fine, 0, 1, 0}, 0}, {{fine, 0, -1, 0}, 0}, {{fine, 0, 0, -1}, 0},
        {{fine, 1000000, 0, 1000000}, 1},   // (a later epoch and batch: the loader wraps them)
    };
    for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); i++) {
        char what[96], want[160];
        snprintf(what, sizeof(what), "resume at epoch %lld, shard %lld, batch %lld", (long long)states[i].args.epoch,
                 (long long)states[i].args.shard_pos, (long long)states[i].args.batch_in_shard);
        snprintf(want, sizeof(want), "cannot resume the data loader: saved position (epoch %lld, shard %lld, batch %lld) "
                 "is out of range", (long long)states[i].args.epoch, (long long)states[i].args.shard_pos,
                 (long long)states[i].args.batch_in_shard);
        expect_exit(what, set_state_at, &states[i].args, states[i].ok, states[i].ok ? "" : want, NULL);
    }
    remove(fine);
    // the tokenizer's header: version 3, vocabulary 0 and 2^24 + 1, and a token of length 0
    snprintf(path, sizeof(path), "%s/edge_tokenizer.bin", tmpdir);
    // and an end-of-text id one past its tokens (the last one taken)
    const struct { uint32_t version, vocab, eot; int empty; const char* message; } toks_bad[] = {
        {3, 4, 0, -1, "has version 3; this program reads versions 1 and 2"},
        {2, 0, 0, -1, "has an implausible vocabulary size 0"},
        {2, (1u << 24) + 1, 0, -1, "has an implausible vocabulary size 16777217"},
        {2, 4, 0, 1, "token 1 has length 0 (corrupt file)"},
        {2, 4, 4, -1, "its end-of-text token 4 is outside its 4 tokens (corrupt file)"},
        {2, 4, 3, -1, NULL},   // taken
        {1, 4, 9, -1, NULL},   // version 1 has no end-of-text field (50256 is assumed): taken
    };
    for (size_t i = 0; i < sizeof(toks_bad) / sizeof(toks_bad[0]); i++) {
        uint32_t h[256] = {0};
        h[0] = 20240328; h[1] = toks_bad[i].version; h[2] = toks_bad[i].vocab; h[3] = toks_bad[i].eot;
        FILE* f = fopen_check(path, "wb");
        fwrite_check(h, sizeof(uint32_t), 256, f, path);
        for (int k = 0; k < 4; k++) {
            const uint8_t rec[2] = {(uint8_t)(k == toks_bad[i].empty ? 0 : 1), (uint8_t)('a' + k)};
            fwrite_check(rec, 1, k == toks_bad[i].empty ? 1 : 2, f, path);
        }
        fclose_check(f, path);
        char what[64];
        snprintf(what, sizeof(what), "tokenizer case %zu", i);
        expect_exit(what, tokenizer_open, path, toks_bad[i].message == NULL, toks_bad[i].message ? toks_bad[i].message : "",
                    NULL);
    }
    remove(path);

    static const CheckSite sites[] = {
        {"llmc/run/dataloader.h", "dataloader_read_header_"}, {"llmc/run/dataloader.h", "dataloader_check_tokens_"},
        {"llmc/run/dataloader.h", "dataloader_init"},        {"llmc/run/dataloader.h", "dataloader_set_state"},
        {"llmc/run/tokenizer.h", "tokenizer_init"},
    };
    static const CheckExempt exempt[] = {
        {"cannot list data files matching '%s' (glob error %d)", "glob fails only without memory here (no GLOB_ERR)"},
        {"data pattern '%s' matches too many files", "2^31 files"},
    };
    check_every_site("test_data", sites, sizeof(sites) / sizeof(sites[0]), exempt, sizeof(exempt) / sizeof(exempt[0]));
}

// --- the shipped dataset and tokenizer --------------------------------------------------------------

#define SHIPPED_TOKENIZER "data/gpt2_tokenizer.bin"
#define SHIPPED_TRAIN "data/tinyshakespeare/tiny_shakespeare_train.bin"
#define SHIPPED_VAL "data/tinyshakespeare/tiny_shakespeare_val.bin"

static int64_t decoded_length(const Tokenizer* tok, const char* path) {
    DataLoader dl;   // only for its header checks and shard loading
    dataloader_init(&dl, path, 1, 1, 0, 1, 0, 0, (int)tok->vocab_size);
    dataloader_load_shard_(&dl, 0);
    int64_t len = 0;
    for (int64_t i = 0; i < dl.shard_tokens[0]; i++)
        if (dl.tokens[i] != tok->eot_token) len += tokenizer_token_length(tok, dl.tokens[i]);
    dataloader_free(&dl);
    return len;
}

static void test_shipped(void) {
    if (access(SHIPPED_TOKENIZER, R_OK) != 0 || access(SHIPPED_VAL, R_OK) != 0 || access(SHIPPED_TRAIN, R_OK) != 0) {
        CHECK(0, "shipped data missing (%s, %s, %s): run the tests from the repo root", SHIPPED_TOKENIZER, SHIPPED_VAL, SHIPPED_TRAIN);
        return;
    }
    Tokenizer tok;
    tokenizer_init(&tok, SHIPPED_TOKENIZER);
    CHECK(tok.init_ok && tok.vocab_size == 50257 && tok.eot_token == 50256,
          "shipped tokenizer: ok=%d vocab=%u eot=%u", tok.init_ok, tok.vocab_size, tok.eot_token);
    if (!tok.init_ok) return;
    CHECK(strcmp(tokenizer_decode(&tok, 50256), "<|endoftext|>") == 0, "token 50256 is not <|endoftext|>");
    CHECK(tokenizer_decode(&tok, 50257) == NULL, "an out-of-range id decodes");

    // a known sequence: GPT-2 ids of "First Citizen:\nBefore"
    int known[5] = {5962, 22307, 25, 198, 8421};
    char text[256];
    tokenizer_decode_ids(&tok, known, 5, text, sizeof(text));
    CHECK(strcmp(text, "First Citizen:\nBefore") == 0, "ids 5962 22307 25 198 8421 decode to \"%s\"", text);

    // the validation shard is the start of the text: <|endoftext|>First Citizen:\nBefore we proceed ...
    DataLoader dl;
    dataloader_init(&dl, SHIPPED_VAL, 1, 64, 0, 1, 0, 0, 50257);
    dataloader_next_batch(&dl);
    CHECK(dl.inputs[0] == 50256, "val shard starts with token %d, want <|endoftext|> 50256", dl.inputs[0]);
    CHECK(memcmp(dl.inputs + 1, known, sizeof(known)) == 0, "val shard tokens 1..5 are not \"First Citizen:\\nBefore\"");
    size_t n = tokenizer_decode_ids(&tok, dl.inputs + 1, 63, text, sizeof(text));
    CHECK(n < sizeof(text) && strncmp(text, "First Citizen:\nBefore we proceed any further, hear me speak.", 60) == 0,
          "val shard decodes to \"%.60s\"", text);
    dataloader_free(&dl);

    // the trainer's default: the train shard loads and every token is in the vocabulary
    dataloader_init(&dl, SHIPPED_TRAIN, 4, 64, 0, 1, 1, 1337, 50257);
    dataloader_next_batch(&dl);
    CHECK(dl.num_batches > 1000, "train shard gives only %lld batches of 4x64", (long long)dl.num_batches);
    dataloader_free(&dl);

    // together the shards decode to all of tinyshakespeare's input.txt (1,115,394 bytes)
    int64_t total = decoded_length(&tok, SHIPPED_VAL) + decoded_length(&tok, SHIPPED_TRAIN);
    CHECK(total == 1115394, "shipped shards decode to %lld bytes, want 1115394", (long long)total);

    // safe printing escapes control bytes
    int ctrl = -1;
    for (int i = 0; i < 256 && ctrl < 0; i++)
        if (tokenizer_token_length(&tok, i) == 1 && tokenizer_decode(&tok, i)[0] == 0x01) ctrl = i;
    CHECK(ctrl >= 0, "no single-byte token for 0x01");
    FILE* f = tmpfile();
    tokenizer_print_safe(f, &tok, (uint32_t)ctrl);
    tokenizer_print_safe(f, &tok, 5962);
    tokenizer_print_safe(f, &tok, 198);
    tokenizer_print_safe(f, &tok, 99999);
    rewind(f);
    char out[64] = {0};
    size_t got = fread(out, 1, sizeof(out) - 1, f);
    fclose(f);
    CHECK(got > 0 && strcmp(out, "\\x01First\n<99999>") == 0, "safe print gave \"%s\"", out);
    tokenizer_free(&tok);
}

int main(void) {
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_data_XXXXXX");
    if (mkdtemp(tmpdir) == NULL) { printf("cannot make a temporary directory\n"); return 1; }
    test_sequential();
    test_shuffle();
    test_shuffle_uniform();
    test_global_micro_index();
    test_resume();
    test_errors();
    test_error_edges();
    test_shipped();
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", tmpdir);
    return test_summary("data");
}
