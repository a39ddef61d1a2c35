// dataloader.h: token shards on disk -> (inputs, targets) micro-batches on the host.
// defines: DataLoader, DataLoaderState, dataloader_init(), dataloader_next_batch(), dataloader_reset(),
//          dataloader_get_state(), dataloader_set_state(), dataloader_print(), dataloader_free(),
//          dataloader_global_micro_index(), SHARD_MAGIC, SHARD_VERSION, SHARD_HEADER_INTS
//
// Shard format (llm.c's, so existing llm.c / FineWeb shards work unchanged):
//   256 x int32 header: [0] = 20240520 (magic), [1] = 1 (version), [2] = number of tokens N
//   N x uint16 tokens (little-endian), so the file is exactly 1024 + 2*N bytes.
// dev/data/prepro.py writes them.
//
// Layout of the data. A shard of N tokens holds R = (N - 1) / T rows ("samples"); row r is the T
// tokens starting at r*T, and its targets are the same T tokens shifted by one (the +1 is why N - 1).
// One optimizer-visible batch takes world*B rows; rank `rank` takes the B rows
// [(k*world + rank)*B, (k*world + rank + 1)*B) of batch k, so ranks never overlap. Unshuffled, the
// rows of a batch are consecutive: rank r reads the r-th B*T slice of each world*B*T chunk, as llm.c
// does. A shard gives floor(R / (world*B)) batches; rows past the last whole batch are left out.
//
// Shuffling (shuffle = 1): each epoch visits the shards in a permuted order and, within each shard,
// the rows in a permuted order. Both permutations are pure functions of (seed, epoch[, shard]) through
// llmc/base/rng.h, so every rank computes the same ones and a resumed run continues exactly. Every row that
// fits in a whole batch is seen exactly once per epoch; with shuffling, which leftover rows are left
// out changes from epoch to epoch.
//
// Memory: one shard's tokens at a time (2 bytes/token: a 100M-token shard takes 200 MB), plus the row
// permutation of that shard (8 bytes per row) when shuffling. Headers of every shard are checked at
// init, and every token id against vocab_size when all the shards hold at most DATALOADER_SCAN_MAX_TOKENS (else
// each time a shard is loaded).
//
// Checkpoints: DataLoaderState is a small POD; it is the same on every rank (ranks move in lock step),
// so rank 0 can save it and every rank restores it with dataloader_set_state().
#pragma once
#include <glob.h>
#include <sys/stat.h>
#include "llmc/base/common.h"
#include "llmc/base/rng.h"

#define SHARD_MAGIC 20240520
#define SHARD_VERSION 1
#define SHARD_HEADER_INTS 256

// Where a loader stands; the next batch it returns is a function of this and the loader's config.
typedef struct {
    int64_t epoch;          // passes over all shards completed
    int64_t shard_pos;      // index into this epoch's shard order
    int64_t batch_in_shard; // batches already taken from that shard
    // the configuration it was taken under; set_state refuses a mismatch (the batches would differ)
    uint64_t seed;
    int32_t B, T, world, shuffle;
    int32_t num_shards, reserved;
} DataLoaderState;

typedef struct {
    // configuration
    int B, T, rank, world, shuffle, vocab_size;
    uint64_t seed;
    // the shards: sorted file names (from glob), token counts, whole batches each
    glob_t glob_result;
    int num_shards;
    int64_t* shard_tokens;
    int64_t* shard_batches;
    int64_t num_batches;    // batches per epoch, all shards
    int64_t total_tokens;
    // position (see DataLoaderState)
    int64_t epoch, shard_pos, batch_in_shard;
    // this epoch's shard order; order_epoch is the epoch it was computed for
    int* shard_order;
    int64_t order_epoch;
    // the loaded shard: file index, its tokens, and its row permutation for perm_epoch
    int loaded_shard;
    uint16_t* tokens;
    int64_t tokens_capacity;
    int64_t* row_perm;
    int64_t row_perm_capacity;
    int64_t perm_epoch;
    // the batch next_batch() fills: B*T token ids each
    int* inputs;
    int* targets;
} DataLoader;

// --- internals ------------------------------------------------------------------------------------

// Uniform integer in [0, n) from 64 random bits (the modulo bias is below 2^-40 for any n here).
static inline int64_t dataloader_rand_below_(uint64_t key, uint64_t i, int64_t n) {
    return (int64_t)(rng_mix64(key ^ (i * 0xD1B54A32D192ED03ull)) % (uint64_t)n);
}

// Fisher-Yates shuffle of 0..n-1, keyed: the same key always gives the same permutation.
static inline void dataloader_permutation_(int64_t* out, int64_t n, uint64_t key) {
    for (int64_t i = 0; i < n; i++) out[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = dataloader_rand_below_(key, (uint64_t)i, i + 1);
        int64_t t = out[i]; out[i] = out[j]; out[j] = t;
    }
}

// RNG keys: shard order uses tag ORDER_TAG, row order of shard file f uses tag f.
#define DATALOADER_ORDER_TAG 0xFFFFFFFFu
static inline uint64_t dataloader_key_(const DataLoader* dl, int64_t epoch, uint32_t tag) {
    return rng_key(dl->seed, (uint32_t)epoch, tag);
}

static inline void dataloader_compute_order_(DataLoader* dl) {
    if (dl->order_epoch == dl->epoch) return;
    int64_t* tmp = (int64_t*)xmalloc(sizeof(int64_t) * dl->num_shards);
    if (dl->shuffle) dataloader_permutation_(tmp, dl->num_shards, dataloader_key_(dl, dl->epoch, DATALOADER_ORDER_TAG));
    else for (int i = 0; i < dl->num_shards; i++) tmp[i] = i;
    for (int i = 0; i < dl->num_shards; i++) dl->shard_order[i] = (int)tmp[i];
    free(tmp);
    dl->order_epoch = dl->epoch;
}

// Reads and checks one shard header; returns its token count. Every problem names the file.
static inline int64_t dataloader_read_header_(const char* path) {
    struct stat st;
    fail_if(stat(path, &st) != 0, "data shard '%s': cannot stat it", path);
    // a directory opens and reads as 0 bytes: say what it is rather than "truncated"
    if (S_ISDIR(st.st_mode)) {
        char dir[4096];
        snprintf(dir, sizeof(dir), "%s", path);
        for (size_t n = strlen(dir); n > 1 && dir[n - 1] == '/'; n--) dir[n - 1] = '\0';
        fail("data shard '%s' is a directory, not a shard file: give the shard files or a pattern of them, e.g. "
             "'%s/*_train*.bin' for -i/--train-data and '%s/*_val*.bin' for -j/--val-data (these match the shipped "
             "data/tinyshakespeare/tiny_shakespeare_train.bin and prepro.py's NAME_train_000000.bin)", dir, dir, dir);
    }
    fail_if(!S_ISREG(st.st_mode), "data shard '%s' is not a regular file", path);
    int64_t size = (int64_t)st.st_size;
    fail_if(size < (int64_t)(SHARD_HEADER_INTS * sizeof(int32_t)),
            "data shard '%s' is truncated: %lld bytes, shorter than the 1024-byte header; "
            "regenerate it with python dev/data/prepro.py", path, (long long)size);
    int32_t header[SHARD_HEADER_INTS];
    FILE* f = fopen_check(path, "rb");
    fread_check(header, sizeof(int32_t), SHARD_HEADER_INTS, f, path);
    fclose(f);
    if (header[0] != SHARD_MAGIC) {
        if (header[0] == 20240328)
            fail("'%s' is a tokenizer file, not a data shard; point the data pattern at *_train*.bin / *_val*.bin shards", path);
        fail("data shard '%s' has bad magic %d (want %d): not an llm.c token shard; "
             "write shards with python dev/data/prepro.py", path, header[0], SHARD_MAGIC);
    }
    fail_if(header[1] != SHARD_VERSION,
            "data shard '%s' has version %d; this program reads version %d (uint16 tokens); "
            "regenerate it with python dev/data/prepro.py", path, header[1], SHARD_VERSION);
    int64_t ntok = header[2];
    fail_if(ntok < 0, "data shard '%s' has a negative token count %lld in its header", path, (long long)ntok);
    int64_t want = (int64_t)(SHARD_HEADER_INTS * sizeof(int32_t)) + 2 * ntok;
    fail_if(size != want,
            "data shard '%s' is truncated or corrupt: %lld bytes, but its header says %lld tokens = %lld bytes; "
            "regenerate it with python dev/data/prepro.py (or finish copying it)",
            path, (long long)size, (long long)ntok, (long long)want);
    return ntok;
}

// Token ids of a shard must be below the vocabulary: tokens [0, n) of shard `path`, the first at position `pos0`.
static inline void dataloader_check_tokens_(const char* path, const uint16_t* tok, int64_t n, int64_t pos0, int vocab) {
    for (int64_t i = 0; i < n; i++)
        fail_if(tok[i] >= vocab, "data shard '%s': token %d at position %lld is >= the vocabulary size %d; "
                "the shard was written with another tokenizer (re-run python dev/data/prepro.py)",
                path, (int)tok[i], (long long)(pos0 + i), vocab);
}

// Reads every token of shard `path` (ntok of them) in chunks and checks them against the vocabulary, so that a
// shard written with another tokenizer stops the run at its start, not when the loader reaches it.
static inline void dataloader_scan_tokens_(const char* path, int64_t ntok, int vocab) {
    const int64_t chunk = (int64_t)1 << 20;
    uint16_t* buf = (uint16_t*)xmalloc(sizeof(uint16_t) * (size_t)chunk);
    FILE* f = fopen_check(path, "rb");
    fail_if(fseek(f, SHARD_HEADER_INTS * sizeof(int32_t), SEEK_SET) != 0, "data shard '%s': seek failed", path);
    for (int64_t pos = 0; pos < ntok; pos += chunk) {
        const int64_t n = ntok - pos < chunk ? ntok - pos : chunk;
        fread_check(buf, sizeof(uint16_t), (size_t)n, f, path);
        dataloader_check_tokens_(path, buf, n, pos, vocab);
    }
    fclose(f);
    free(buf);
}

// Makes shard file `s` the loaded one: reads its tokens and checks them against the vocabulary.
static inline void dataloader_load_shard_(DataLoader* dl, int s) {
    if (dl->loaded_shard == s) return;
    const char* path = dl->glob_result.gl_pathv[s];
    int64_t ntok = dl->shard_tokens[s];
    if (ntok > dl->tokens_capacity) {
        free(dl->tokens);
        dl->tokens = (uint16_t*)xmalloc(sizeof(uint16_t) * ntok);
        dl->tokens_capacity = ntok;
    }
    FILE* f = fopen_check(path, "rb");
    fail_if(fseek(f, SHARD_HEADER_INTS * sizeof(int32_t), SEEK_SET) != 0, "data shard '%s': seek failed", path);
    fread_check(dl->tokens, sizeof(uint16_t), (size_t)ntok, f, path);
    fclose(f);
    if (dl->vocab_size > 0) dataloader_check_tokens_(path, dl->tokens, ntok, 0, dl->vocab_size);
    dl->loaded_shard = s;
    dl->perm_epoch = -1;
}

// Rows of shard file `s` in this epoch's order (identity when not shuffling).
static inline void dataloader_compute_rows_(DataLoader* dl, int s) {
    if (!dl->shuffle || dl->perm_epoch == dl->epoch) return;
    int64_t nrows = (dl->shard_tokens[s] - 1) / dl->T;
    if (nrows > dl->row_perm_capacity) {
        free(dl->row_perm);
        dl->row_perm = (int64_t*)xmalloc(sizeof(int64_t) * nrows);
        dl->row_perm_capacity = nrows;
    }
    dataloader_permutation_(dl->row_perm, nrows, dataloader_key_(dl, dl->epoch, (uint32_t)s));
    dl->perm_epoch = dl->epoch;
}

// --- API ------------------------------------------------------------------------------------------

#ifndef DATALOADER_SCAN_MAX_TOKENS
#define DATALOADER_SCAN_MAX_TOKENS ((int64_t)1 << 30)   // 2 GB of tokens
#endif
// pattern: glob(3) pattern of shard files (read in sorted order). B x T: this rank's micro-batch.
// rank / world: this process and the process count (1 process: 0, 1). shuffle: 0 for validation.
// vocab_size: token ids must be below it (0 skips the check).
static inline void dataloader_init(DataLoader* dl, const char* pattern, int B, int T, int rank, int world,
                                   int shuffle, uint64_t seed, int vocab_size) {
    memset(dl, 0, sizeof(*dl));
    fail_if(B <= 0 || T <= 0, "data loader: batch size B=%d and sequence length T=%d must be positive", B, T);
    fail_if(world <= 0 || rank < 0 || rank >= world, "data loader: rank %d is not in [0, world size %d)", rank, world);
    dl->B = B; dl->T = T; dl->rank = rank; dl->world = world;
    dl->shuffle = shuffle ? 1 : 0; dl->seed = seed; dl->vocab_size = vocab_size;

    int rc = glob(pattern, 0, NULL, &dl->glob_result);
    fail_if(rc == GLOB_NOMATCH || (rc == 0 && dl->glob_result.gl_pathc == 0),
            "no data file matches '%s'; check the path, or make the shards first "
            "(bash dev/data/tinyshakespeare.sh, or python dev/data/prepro.py --help)", pattern);
    fail_if(rc != 0, "cannot list data files matching '%s' (glob error %d)", pattern, rc);
    fail_if(dl->glob_result.gl_pathc > 0x7FFFFFF0u, "data pattern '%s' matches too many files", pattern);
    dl->num_shards = (int)dl->glob_result.gl_pathc;

    // Check every header now, so a bad shard stops the run before training rather than hours in.
    dl->shard_tokens = (int64_t*)xmalloc(sizeof(int64_t) * dl->num_shards);
    dl->shard_batches = (int64_t*)xmalloc(sizeof(int64_t) * dl->num_shards);
    int64_t need = (int64_t)world * B * T + 1;
    for (int s = 0; s < dl->num_shards; s++) {
        const char* path = dl->glob_result.gl_pathv[s];
        int64_t ntok = dataloader_read_header_(path);
        fail_if(ntok < need,
                "data shard '%s' has %lld tokens, too few for one batch: B*T*processes + 1 = %d*%d*%d + 1 = %lld "
                "tokens are needed; use a smaller -b/-t, or make larger shards (python dev/data/prepro.py "
                "--val_tokens / --shard_size)", path, (long long)ntok, B, T, world, (long long)need);
        dl->shard_tokens[s] = ntok;
        dl->shard_batches[s] = ((ntok - 1) / T) / ((int64_t)world * B);
        dl->num_batches += dl->shard_batches[s];
        dl->total_tokens += ntok;
    }
    // and every token id, where the data is small enough to read at the start (up to DATALOADER_SCAN_MAX_TOKENS;
    // ~0.1 s per 100M tokens from the page cache); larger data is checked as each shard is loaded
    if (vocab_size > 0 && dl->total_tokens <= DATALOADER_SCAN_MAX_TOKENS)
        for (int s = 0; s < dl->num_shards; s++)
            dataloader_scan_tokens_(dl->glob_result.gl_pathv[s], dl->shard_tokens[s], vocab_size);
    dl->shard_order = (int*)xmalloc(sizeof(int) * dl->num_shards);
    dl->order_epoch = -1;
    dl->loaded_shard = -1;
    dl->perm_epoch = -1;
    dl->inputs = (int*)xmalloc(sizeof(int) * (size_t)B * T);
    dl->targets = (int*)xmalloc(sizeof(int) * (size_t)B * T);
}

// Fills dl->inputs and dl->targets (B*T each) with this rank's part of the next batch and advances.
// Wraps to the next shard, and after the last shard to the next epoch, forever.
static inline void dataloader_next_batch(DataLoader* dl) {
    dataloader_compute_order_(dl);
    while (dl->batch_in_shard >= dl->shard_batches[dl->shard_order[dl->shard_pos]]) {
        dl->batch_in_shard = 0;
        if (++dl->shard_pos == dl->num_shards) {
            dl->shard_pos = 0;
            dl->epoch++;
            dataloader_compute_order_(dl);
        }
    }
    int s = dl->shard_order[dl->shard_pos];
    dataloader_load_shard_(dl, s);
    dataloader_compute_rows_(dl, s);
    int B = dl->B, T = dl->T;
    int64_t first_row = (dl->batch_in_shard * dl->world + dl->rank) * (int64_t)B;
    for (int b = 0; b < B; b++) {
        int64_t row = dl->shuffle ? dl->row_perm[first_row + b] : first_row + b;
        const uint16_t* src = dl->tokens + row * T;
        int* in = dl->inputs + (size_t)b * T;
        int* tg = dl->targets + (size_t)b * T;
        for (int t = 0; t < T; t++) { in[t] = src[t]; tg[t] = src[t + 1]; }
    }
    dl->batch_in_shard++;
}

// Where the batch that dataloader_next_batch() gave for this rank's accumulation step `micro` stands
// among all the micro-batches of the optimizer step, over every rank: micro * world + rank. A step of
// `accum` micro-steps reads loader batches k0 .. k0 + accum - 1 (k0 = step * accum), and rank r's share
// of batch k0 + micro is the B rows of global micro-batch (k0 + micro) * world + r, which one process
// accumulating world * accum micro-steps reads as its micro-step micro * world + r of the same step
// (when every shard's row count is a multiple of world * B; otherwise the two leave out different rows
// at the shards' ends). Whatever is keyed on this index (stochastic rounding) is then the same for
// N processes and for one process accumulating N times as much.
static inline int dataloader_global_micro_index(const DataLoader* dl, int micro) {
    return micro * dl->world + dl->rank;
}

// Back to the first batch of epoch 0 (validation: call before each evaluation).
static inline void dataloader_reset(DataLoader* dl) {
    dl->epoch = 0; dl->shard_pos = 0; dl->batch_in_shard = 0;
}

static inline DataLoaderState dataloader_get_state(const DataLoader* dl) {
    DataLoaderState st;
    memset(&st, 0, sizeof(st));
    st.epoch = dl->epoch; st.shard_pos = dl->shard_pos; st.batch_in_shard = dl->batch_in_shard;
    st.seed = dl->seed; st.B = dl->B; st.T = dl->T; st.world = dl->world; st.shuffle = dl->shuffle;
    st.num_shards = dl->num_shards;
    return st;
}

// Continue exactly where the saved loader stopped. The loader must have been made with the same
// shards, B, T, process count, shuffle flag and seed; otherwise the batches would differ, so it fails.
static inline void dataloader_set_state(DataLoader* dl, const DataLoaderState* st) {
    fail_if(st->B != dl->B || st->T != dl->T || st->world != dl->world || st->shuffle != dl->shuffle ||
            st->seed != dl->seed || st->num_shards != dl->num_shards,
            "cannot resume the data loader: the checkpoint was taken with B=%d T=%d processes=%d shuffle=%d "
            "seed=%llu shards=%d, this run has B=%d T=%d processes=%d shuffle=%d seed=%llu shards=%d; "
            "resume with the same settings and data (or start the data from the beginning)",
            st->B, st->T, st->world, st->shuffle, (unsigned long long)st->seed, st->num_shards,
            dl->B, dl->T, dl->world, dl->shuffle, (unsigned long long)dl->seed, dl->num_shards);
    fail_if(st->epoch < 0 || st->shard_pos < 0 || st->shard_pos >= dl->num_shards || st->batch_in_shard < 0,
            "cannot resume the data loader: saved position (epoch %lld, shard %lld, batch %lld) is out of range",
            (long long)st->epoch, (long long)st->shard_pos, (long long)st->batch_in_shard);
    dl->epoch = st->epoch; dl->shard_pos = st->shard_pos; dl->batch_in_shard = st->batch_in_shard;
}

// One line for the run's start: what is read and how much of it.
static inline void dataloader_print(const DataLoader* dl, const char* name) {
    printf("%s data: %d shard%s, %lld tokens (first %s), %lld batches/epoch of %d x %d x %d processes%s\n",
           name, dl->num_shards, dl->num_shards == 1 ? "" : "s", (long long)dl->total_tokens,
           dl->glob_result.gl_pathv[0], (long long)dl->num_batches, dl->B, dl->T, dl->world,
           dl->shuffle ? ", shuffled" : "");
}

static inline void dataloader_free(DataLoader* dl) {
    globfree(&dl->glob_result);
    free(dl->shard_tokens); free(dl->shard_batches); free(dl->shard_order);
    free(dl->tokens); free(dl->row_perm); free(dl->inputs); free(dl->targets);
    memset(dl, 0, sizeof(*dl));
}
