// test_eval.c: the held-out tasks' host side (llmc/run/eval_tasks.h) on the CPU: the token-file reader and
// every error it reports, the rows (context cut from the left, targets only on the candidate), the
// batch shapes, and the scoring, run end to end with a stand-in forward whose per-token losses are known,
// against a direct computation from the definition, for 1 and 3 ranks. Also reads the shipped files
// in data/eval (run from the repository root). Lengths at their boundaries, with rows written out by hand: a row
// exactly context + candidate long, one token longer and shorter, the candidate one token shorter than the row, the
// shapes' rounding to 64 and their cap at T, and every count the reader checks one past its limit. The rows live in
// buffers of exactly their size, so the sanitizer build (make SANITIZE=1) catches a write one token off.
#include "llmc/run/eval_tasks.h"
#include "dev/test/testing.h"
#include "dev/test/check_coverage.h"

// The reader and the shapes, each message they return recorded for the every-check scan (test_every_check).
static int task_load(EvalTask* t, const char* name, const char* path, int want_kind, int vocab, char* err, size_t cap) {
    const int rc = eval_task_load(t, name, path, want_kind, vocab, err, cap);
    if (rc) check_seen(err);
    return rc;
}
static int task_shape(const EvalTask* t, int B, int T, EvalShape* s, char* err, size_t cap) {
    const int rc = eval_shape(t, B, T, s, err, cap);
    if (rc) check_seen(err);
    return rc;
}

static char tmpdir[64];

// --- writing token files ------------------------------------------------------------------------------

typedef struct {
    int ctx_len, k, label;
    const uint16_t* ctx;
    int lens[8];
    const uint16_t* cand[8];
} Item;

// Writes items in the file format; `damage` alters one thing afterwards (see the cases below).
typedef enum { OK, BAD_MAGIC, BAD_VERSION, BAD_COUNT, BAD_CRC, BAD_MAXLEN, TRUNCATED, BIG_TOKEN, BAD_LABEL,
               SHORT1, LONG1, TRAILING, EXTRA_ITEM, BAD_MAXCAND, FEW_CHOICES, MAX_CHOICES, MANY_CHOICES } Damage;
// SHORT1 / LONG1: the file one token shorter / longer than its header says; TRAILING: one token after the last item
// (counted in the header and the checksum); EXTRA_ITEM: the header counts one item more; BAD_MAXCAND: the header's
// longest candidate one too long; FEW_CHOICES: the header's most candidates one below an item's; MAX_CHOICES /
// MANY_CHOICES: the header says 255 (the most a file may) / 256.
static int header_vocab = 50257;   // header field [7], the vocabulary the tokens are for

static void write_task(const char* path, int kind, const Item* items, int n, Damage damage) {
    uint16_t stream[4096];
    int p = 0, longest = 0, longest_cand = 0, most = 0;
    for (int i = 0; i < n; i++) {
        const Item* it = &items[i];
        stream[p++] = (uint16_t)it->ctx_len;
        stream[p++] = (uint16_t)it->k;
        stream[p++] = (uint16_t)(damage == BAD_LABEL && i == n - 1 ? it->k : it->label);
        int cmax = 0;
        for (int c = 0; c < it->k; c++) { stream[p++] = (uint16_t)it->lens[c]; cmax = it->lens[c] > cmax ? it->lens[c] : cmax; }
        for (int j = 0; j < it->ctx_len; j++) stream[p++] = it->ctx[j];
        for (int c = 0; c < it->k; c++)
            for (int j = 0; j < it->lens[c]; j++) stream[p++] = it->cand[c][j];
        longest = it->ctx_len + cmax > longest ? it->ctx_len + cmax : longest;
        longest_cand = cmax > longest_cand ? cmax : longest_cand;
        most = it->k > most ? it->k : most;
    }
    if (damage == BIG_TOKEN) stream[p - 1] = 60000;
    if (damage == TRAILING) stream[p++] = 7;
    int32_t h[EVAL_HEADER_INTS] = {0};
    h[0] = damage == BAD_MAGIC ? 20240520 : EVAL_MAGIC;
    h[1] = damage == BAD_VERSION ? 2 : EVAL_VERSION;
    h[2] = kind; h[3] = n + (damage == EXTRA_ITEM); h[4] = p; h[5] = longest + (damage == BAD_MAXLEN);
    h[6] = longest_cand + (damage == BAD_MAXCAND); h[7] = header_vocab;
    h[8] = (int32_t)crc32_update(0, stream, (size_t)p * 2);
    h[9] = damage == FEW_CHOICES ? most - 1 : damage == MAX_CHOICES ? 255 : damage == MANY_CHOICES ? 256 : most;
    if (damage == BAD_COUNT) h[4] = p + 1;
    if (damage == BAD_CRC) stream[5] ^= 1;   // after the checksum was taken
    if (damage == LONG1) stream[p] = 0;
    const int written = damage == TRUNCATED ? p - 3 : damage == SHORT1 ? p - 1 : damage == LONG1 ? p + 1 : p;
    FILE* f = fopen_check(path, "wb");
    fwrite_check(h, sizeof(int32_t), EVAL_HEADER_INTS, f, path);
    fwrite_check(stream, sizeof(uint16_t), (size_t)written, f, path);
    fclose_check(f, path);
}

// A multiple-choice task (3 items of 2-4 candidates) and a last-word task (2 items) over small tokens.
static const uint16_t CTX0[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, CTX1[] = {11, 12}, CTX2[] = {13, 14, 15, 16};
static const uint16_t A0[] = {20, 21, 22}, B0[] = {23}, C0[] = {24, 25}, D0[] = {26, 27, 28, 29};
static const uint16_t A1[] = {30, 31}, B1[] = {32, 33, 34};
static const uint16_t A2[] = {40}, B2[] = {41, 42}, C2[] = {43};
static Item choice_items[3], word_items[2];

static void make_items(void) {
    Item a = {10, 4, 2, CTX0, {3, 1, 2, 4}, {A0, B0, C0, D0}};   // right by the mean; the lowest sum is candidate 1
    Item b = {2, 2, 0, CTX1, {2, 3}, {A1, B1}};   // wrong: candidate 1 has the lower mean loss
    Item c = {4, 3, 0, CTX2, {1, 2, 1}, {A2, B2, C2}};
    choice_items[0] = a; choice_items[1] = b; choice_items[2] = c;
    Item w0 = {10, 1, 0, CTX0, {2}, {C0}};
    Item w1 = {4, 1, 0, CTX2, {3}, {A0}};
    word_items[0] = w0; word_items[1] = w1;
}

// --- the reader ---------------------------------------------------------------------------------------

static void test_reader(void) {
    char path[128], err[4096];
    snprintf(path, sizeof(path), "%s/choice.bin", tmpdir);
    write_task(path, EVAL_CHOICE, choice_items, 3, OK);
    EvalTask t;
    int rc = task_load(&t, "hellaswag", path, EVAL_CHOICE, 50257, err, sizeof(err));
    CHECK(rc == 0, "a good file refused: %s", err);
    if (rc == 0) {
        CHECK(t.n_items == 3 && t.max_len == 14 && t.max_cand == 4 && t.max_choices == 4, "header: items %d, longest %d, "
              "longest candidate %d, most %d", t.n_items, t.max_len, t.max_cand, t.max_choices);
        EvalItem it = eval_task_item(&t, 1);
        CHECK(it.ctx_len == 2 && it.n_choices == 2 && it.label == 0 && it.ctx[1] == 12 && it.lens[1] == 3 &&
              it.cands[2] == 32, "item 1 read back wrong");
        eval_task_free(&t);
    }

    struct { Damage d; int kind; const char* want; } cases[] = {
        {BAD_MAGIC, EVAL_CHOICE, "bad magic 20240520"},
        {BAD_VERSION, EVAL_CHOICE, "version 2, this program reads version 1"},
        {OK, EVAL_LASTWORD, "it holds a multiple-choice task, --hellaswag wants a last-word task"},
        {BAD_COUNT, EVAL_CHOICE, "its header says"},
        {TRUNCATED, EVAL_CHOICE, "truncated or damaged"},
        {BAD_CRC, EVAL_CHOICE, "the item stream is damaged (CRC32"},
        {BAD_MAXLEN, EVAL_CHOICE, "longest item disagrees"},
        {BIG_TOKEN, EVAL_CHOICE, "holds token 60000, not below the vocabulary size 50257"},
        {BAD_LABEL, EVAL_CHOICE, "item 2 has 4 context tokens, 3 candidates, label 3"},
        {SHORT1, EVAL_CHOICE, "truncated or damaged"},
        {LONG1, EVAL_CHOICE, "truncated or damaged"},
        {TRAILING, EVAL_CHOICE, "the items end before the stream does"},
        {EXTRA_ITEM, EVAL_CHOICE, "the items run past the end of the stream"},
        {BAD_MAXCAND, EVAL_CHOICE, "longest item disagrees"},
        {FEW_CHOICES, EVAL_CHOICE, "item 0 has 10 context tokens, 4 candidates, label 2"},
        {MANY_CHOICES, EVAL_CHOICE, "impossible counts in its header"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        write_task(path, EVAL_CHOICE, choice_items, 3, cases[i].d);
        rc = task_load(&t, "hellaswag", path, cases[i].kind, 50257, err, sizeof(err));
        CHECK(rc == -1 && strstr(err, cases[i].want) && strstr(err, path) && strstr(err, "eval_prepro.py"),
              "case %zu: rc %d, want an error with \"%s\", the path and the fix; got: %s", i, rc, cases[i].want, err);
        if (rc == 0) eval_task_free(&t);
    }
    snprintf(path, sizeof(path), "%s/none.bin", tmpdir);
    rc = task_load(&t, "lambada", path, EVAL_LASTWORD, 50257, err, sizeof(err));
    CHECK(rc == -1 && strstr(err, "not found") && strstr(err, "--lambada"), "missing file: %s", err);
    rc = task_load(&t, "lambada", tmpdir, EVAL_LASTWORD, 50257, err, sizeof(err));
    CHECK(rc == -1 && strstr(err, "not a regular file"), "a directory: %s", err);
    snprintf(path, sizeof(path), "%s/short.bin", tmpdir);
    FILE* f = fopen_check(path, "wb");
    fputs("tiny", f);
    fclose(f);
    rc = task_load(&t, "lambada", path, EVAL_LASTWORD, 50257, err, sizeof(err));
    CHECK(rc == -1 && strstr(err, "shorter than its 1024-byte header"), "a 4-byte file: %s", err);
    // one byte short of the header, and the header alone (an empty stream)
    int32_t h[EVAL_HEADER_INTS] = {0};
    h[0] = EVAL_MAGIC; h[1] = EVAL_VERSION; h[2] = EVAL_LASTWORD;
    f = fopen_check(path, "wb");
    fwrite_check(h, 1, sizeof(h) - 1, f, path);
    fclose(f);
    rc = task_load(&t, "lambada", path, EVAL_LASTWORD, 50257, err, sizeof(err));
    CHECK(rc == -1 && strstr(err, "(1023 bytes, shorter than its 1024-byte header)"), "a 1023-byte file: %s", err);
    f = fopen_check(path, "wb");
    fwrite_check(h, 1, sizeof(h), f, path);
    fclose(f);
    rc = task_load(&t, "lambada", path, EVAL_LASTWORD, 50257, err, sizeof(err));
    CHECK(rc == -1 && strstr(err, "impossible counts in its header (items 0, stream 0)"), "the header alone: %s", err);
    remove(path);

    // the limits on both sides: most candidates 255 (taken) and 256; a vocabulary of exactly the header's and one
    // less; the largest token id one below the model's vocabulary, and equal to it (the choice items' largest is 43)
    snprintf(path, sizeof(path), "%s/limits.bin", tmpdir);
    write_task(path, EVAL_CHOICE, choice_items, 3, MAX_CHOICES);
    rc = task_load(&t, "hellaswag", path, EVAL_CHOICE, 50257, err, sizeof(err));
    CHECK(rc == 0 && t.max_choices == 255, "a header of 255 candidates: %s", err);
    if (rc == 0) eval_task_free(&t);
    header_vocab = 44;
    write_task(path, EVAL_CHOICE, choice_items, 3, OK);
    rc = task_load(&t, "hellaswag", path, EVAL_CHOICE, 44, err, sizeof(err));
    CHECK(rc == 0, "tokens below 44 for a model of 44: %s", err);
    if (rc == 0) eval_task_free(&t);
    rc = task_load(&t, "hellaswag", path, EVAL_CHOICE, 43, err, sizeof(err));
    CHECK(rc == -1 && strstr(err, "its tokens are for a vocabulary of 44, the model has 43"), "vocabulary 43: %s", err);
    header_vocab = 43;   // a header that understates its tokens: token 43 is found in the items
    write_task(path, EVAL_CHOICE, choice_items, 3, OK);
    rc = task_load(&t, "hellaswag", path, EVAL_CHOICE, 43, err, sizeof(err));
    CHECK(rc == -1 && strstr(err, "item 2 holds token 43, not below the vocabulary size 43"), "token 43 of 43: %s", err);
    header_vocab = 50257;
    // an empty context, an empty candidate
    static const uint16_t ONE[] = {5};
    Item no_ctx = {0, 1, 0, CTX0, {1}, {ONE}};
    write_task(path, EVAL_LASTWORD, &no_ctx, 1, OK);
    rc = task_load(&t, "lambada", path, EVAL_LASTWORD, 50257, err, sizeof(err));
    CHECK(rc == -1 && strstr(err, "item 0 has 0 context tokens"), "an empty context: %s", err);
    Item no_cand = {1, 2, 0, CTX0, {1, 0}, {ONE, ONE}};
    write_task(path, EVAL_CHOICE, &no_cand, 1, OK);
    rc = task_load(&t, "hellaswag", path, EVAL_CHOICE, 50257, err, sizeof(err));
    CHECK(rc == -1 && strstr(err, "item 0 has an empty candidate"), "an empty candidate: %s", err);
    remove(path);
    snprintf(path, sizeof(path), "%s/choice.bin", tmpdir);
    remove(path);
}

// --- rows and shapes ----------------------------------------------------------------------------------


// --- rows at their boundaries, by hand ------------------------------------------------------------------

static const uint16_t LENS0[4] = {3, 1, 2, 4};   // CTX0 (1..10) with A0 (20 21 22), B0 (23), C0 (24 25), D0 (26..29)
static const uint16_t CANDS0[10] = {20, 21, 22, 23, 24, 25, 26, 27, 28, 29};

// eval_row into buffers of exactly seq ints; its inputs, targets, count and truncation against the hand-written ones
static void expect_row(const EvalItem* it, int c, int seq, const int* want_in, const int* want_tg, int want_n,
                       int want_trunc, const char* what) {
    int* in = (int*)xmalloc((size_t)seq * sizeof(int));
    int* tg = (int*)xmalloc((size_t)seq * sizeof(int));
    int trunc = -1;
    int n = eval_row(it, c, seq, in, tg, &trunc);
    int ok = n == want_n && trunc == want_trunc;
    for (int i = 0; i < seq; i++) ok &= in[i] == want_in[i] && tg[i] == want_tg[i];
    CHECK(ok, "%s: n %d trunc %d, inputs %d .. %d, targets %d .. %d", what, n, trunc, in[0], in[seq - 1], tg[0], tg[seq - 1]);
    free(in);
    free(tg);
}

typedef struct { int ctx_len, clen, seq; } RowArgs;
static void row_too_short(const void* arg) {
    const RowArgs* a = (const RowArgs*)arg;
    static const uint16_t toks[64] = {0};
    uint16_t lens[1] = {(uint16_t)a->clen};
    EvalItem it = {a->ctx_len, 1, 0, toks, lens, toks};
    int* in = (int*)xmalloc((size_t)a->seq * sizeof(int));
    int* tg = (int*)xmalloc((size_t)a->seq * sizeof(int));
    int trunc;
    eval_row(&it, 0, a->seq, in, tg, &trunc);
    free(in);
    free(tg);
}

static void test_row_boundaries(void) {
    const int E = EVAL_EOT;
    EvalItem it = {10, 4, 2, CTX0, LENS0, CANDS0};
    // context 10 + candidate 3 = 13: a row of exactly 13, of 14 (one pad), of 12 (the oldest context token cut)
    const int in13[13] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 21, 22};
    const int tg13[13] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, 20, 21, 22, -1};
    expect_row(&it, 0, 13, in13, tg13, 3, 0, "context + candidate = the row");
    const int in14[14] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 21, 22, E};
    const int tg14[14] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, 20, 21, 22, -1, -1};
    expect_row(&it, 0, 14, in14, tg14, 3, 0, "one token shorter than the row");
    const int in12[12] = {2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 21, 22};
    const int tg12[12] = {-1, -1, -1, -1, -1, -1, -1, -1, 20, 21, 22, -1};
    expect_row(&it, 0, 12, in12, tg12, 3, 1, "one token longer than the row");
    // the last candidate (after 3 + 1 + 2 tokens of the others), exactly filling 14
    const int in14d[14] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 26, 27, 28, 29};
    const int tg14d[14] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, 26, 27, 28, 29, -1};
    expect_row(&it, 3, 14, in14d, tg14d, 4, 0, "the last candidate");
    // the tightest rows: the candidate and one context token
    const int in2[2] = {10, 23}, tg2[2] = {23, -1};
    expect_row(&it, 1, 2, in2, tg2, 1, 1, "a 1-token candidate in rows of 2");
    const int in5[5] = {10, 26, 27, 28, 29}, tg5[5] = {26, 27, 28, 29, -1};
    expect_row(&it, 3, 5, in5, tg5, 4, 1, "a 4-token candidate in rows of 5");
    static const uint16_t one_ctx[1] = {5}, three[3] = {7, 8, 9}, len3[1] = {3};
    EvalItem single = {1, 1, 0, one_ctx, len3, three};
    const int in4[4] = {5, 7, 8, 9}, tg4[4] = {7, 8, 9, -1};
    expect_row(&single, 0, 4, in4, tg4, 3, 0, "one context token, nothing cut");
    // a candidate as long as the row (what eval_shape refuses) and an empty context stop with a message, not a write
    // before the row
    const RowArgs bad[] = {{10, 4, 4}, {1, 5, 4}, {0, 3, 8}};
    for (int i = 0; i < 3; i++) {
        char err[512];
        int rc = test_run_child(row_too_short, &bad[i], err, sizeof(err));
        CHECK(rc == 1 && strstr(err, "internal: a row of"), "context %d, candidate %d, row %d: exit %d '%s'", bad[i].ctx_len,
              bad[i].clen, bad[i].seq, rc, err);
        if (rc == 1) check_seen(err);
    }

    // eval_run_fill: the batch is always rows x seq; rows past this rank's last are <|endoftext|> with no targets
    EvalTask t;
    char path[128], err[1024];
    snprintf(path, sizeof(path), "%s/fill.bin", tmpdir);
    write_task(path, EVAL_LASTWORD, word_items, 2, OK);
    if (task_load(&t, "lambada", path, EVAL_LASTWORD, 50257, err, sizeof(err))) { CHECK(0, "%s", err); return; }
    const EvalShape s = {16, 3};
    EvalRun r;
    eval_run_init(&r, &t, &s, 0, 0, 1);
    int* in = (int*)xmalloc(3 * 16 * sizeof(int));
    int* tg = (int*)xmalloc(3 * 16 * sizeof(int));
    const int real = eval_run_fill(&r, in, tg);
    const int want_in[3][16] = {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 24, 25, E, E, E, E},
                                {13, 14, 15, 16, 20, 21, 22, E, E, E, E, E, E, E, E, E},
                                {E, E, E, E, E, E, E, E, E, E, E, E, E, E, E, E}};
    const int want_tg[3][16] = {{-1, -1, -1, -1, -1, -1, -1, -1, -1, 24, 25, -1, -1, -1, -1, -1},
                                {-1, -1, -1, 20, 21, 22, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1},
                                {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1}};
    CHECK(real == 2 && eval_run_done(&r) && !memcmp(in, want_in, sizeof(want_in)) && !memcmp(tg, want_tg, sizeof(want_tg)) &&
          r.row_ntok[0] == 2 && r.row_ntok[1] == 3, "two rows and a padding row: %d real", real);
    eval_run_free(&r);
    // exactly as many rows as the batch holds: one batch, nothing padded
    const EvalShape s2 = {16, 2};
    eval_run_init(&r, &t, &s2, 0, 0, 1);
    CHECK(eval_run_fill(&r, in, tg) == 2 && eval_run_done(&r) && !memcmp(in, want_in, 2 * 16 * sizeof(int)),
          "two rows in a batch of two");
    eval_run_free(&r);
    free(in);
    free(tg);
    eval_task_free(&t);
    remove(path);
}

static void test_rows(void) {
    EvalItem it = {10, 1, 0, CTX0, NULL, NULL};
    uint16_t lens[1] = {3};
    it.lens = lens;
    it.cands = A0;
    int in[16], tg[16], trunc = -1;
    // room for all: context, candidate, padding; targets on the 3 positions that predict the candidate
    int n = eval_row(&it, 0, 16, in, tg, &trunc);
    const int want_in[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 21, 22, EVAL_EOT, EVAL_EOT, EVAL_EOT};
    const int want_tg[16] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, 20, 21, 22, -1, -1, -1, -1};
    CHECK(n == 3 && trunc == 0 && memcmp(in, want_in, sizeof(in)) == 0 && memcmp(tg, want_tg, sizeof(tg)) == 0,
          "row of 16: n %d trunc %d", n, trunc);
    // 8 tokens: the oldest context tokens go, the candidate stays whole
    n = eval_row(&it, 0, 8, in, tg, &trunc);
    const int want_in8[8] = {6, 7, 8, 9, 10, 20, 21, 22}, want_tg8[8] = {-1, -1, -1, -1, 20, 21, 22, -1};
    CHECK(n == 3 && trunc == 1 && memcmp(in, want_in8, sizeof(want_in8)) == 0 && memcmp(tg, want_tg8, sizeof(want_tg8)) == 0,
          "row of 8: n %d trunc %d", n, trunc);
    // the tightest row: one context token
    n = eval_row(&it, 0, 4, in, tg, &trunc);
    CHECK(n == 3 && trunc == 1 && in[0] == 10 && tg[0] == 20 && tg[2] == 22 && tg[3] == -1, "row of 4");

    test_row_boundaries();

    EvalTask t;
    memset(&t, 0, sizeof(t));
    snprintf(t.name, sizeof(t.name), "hellaswag");
    t.max_len = 151; t.max_cand = 90;
    EvalShape s;
    char err[512];
    CHECK(task_shape(&t, 8, 1024, &s, err, sizeof(err)) == 0 && s.seq == 192 && s.rows == 42, "B 8 T 1024: %d x %d", s.rows, s.seq);
    CHECK(task_shape(&t, 4, 128, &s, err, sizeof(err)) == 0 && s.seq == 128 && s.rows == 4, "B 4 T 128: %d x %d", s.rows, s.seq);
    CHECK(task_shape(&t, 4, 64, &s, err, sizeof(err)) == -1 && strstr(err, "needs rows of at least 91 tokens") &&
          strstr(err, "--seq-len is 64"), "T 64: %s", err);
    // the boundaries: rows are the longest item rounded up to 64, at most T, as many as B x T holds; the longest
    // candidate needs one context token before it
    const struct { int max_len, max_cand, B, T, ok, seq, rows; } sh[] = {
        {64, 10, 2, 1024, 1, 64, 32},    // exactly one 64-token block
        {65, 10, 2, 1024, 1, 128, 16},   // one token more: two blocks
        {2, 1, 2, 1024, 1, 64, 32},      // the shortest item
        {100, 10, 3, 96, 1, 96, 3},      // capped at T
        {100, 95, 3, 96, 1, 96, 3},      // the candidate and one context token fill the row
        {100, 96, 3, 96, 0, 0, 0},       // the candidate alone fills it
        {64, 10, 3, 100, 1, 64, 4},      // 300 tokens hold 4 rows of 64 (and 44 unused)
        {128, 127, 1, 128, 1, 128, 1},   // one row, as long as T
        {129, 128, 1, 128, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof(sh) / sizeof(sh[0]); i++) {
        t.max_len = sh[i].max_len; t.max_cand = sh[i].max_cand;
        memset(&s, 0, sizeof(s));
        int rc = task_shape(&t, sh[i].B, sh[i].T, &s, err, sizeof(err));
        char want[96];
        snprintf(want, sizeof(want), "a candidate of %d tokens needs rows of at least %d tokens", sh[i].max_cand,
                 sh[i].max_cand + 1);
        CHECK(sh[i].ok ? rc == 0 && s.seq == sh[i].seq && s.rows == sh[i].rows : rc == -1 && strstr(err, want) != NULL,
              "longest %d, candidate %d, B %d, T %d: rc %d, %d rows of %d (want %s %d x %d) %s", sh[i].max_len,
              sh[i].max_cand, sh[i].B, sh[i].T, rc, s.rows, s.seq, sh[i].ok ? "" : "refused", sh[i].rows, sh[i].seq,
              rc ? err : "");
    }
}

// --- scoring, end to end ------------------------------------------------------------------------------

// The stand-in forward: the loss of predicting token y after token x, and whether y is the argmax there.
static float fake_loss(int x, int y) { return 0.1f * (float)((x * 7 + y * 3) % 11) + 0.05f; }
static int fake_hit(int x, int y) { return (x + y) % 3 != 0; }

// Runs a task through EvalRun as the trainer does, `world` ranks one after the other; returns the sums.
static EvalResult run_task(const EvalTask* t, int B, int T, int world, int max_items, int64_t* batches) {
    EvalShape s;
    char err[512];
    EvalResult total;
    memset(&total, 0, sizeof(total));
    if (task_shape(t, B, T, &s, err, sizeof(err))) { CHECK(0, "eval_shape: %s", err); return total; }
    const int N = s.rows * s.seq;
    int* in = (int*)xmalloc(N * sizeof(int));
    int* tg = (int*)xmalloc(N * sizeof(int));
    float* losses = (float*)xmalloc(N * sizeof(float));
    int* hits = (int*)xmalloc(N * sizeof(int));
    *batches = 0;
    for (int rank = 0; rank < world; rank++) {
        EvalRun r;
        eval_run_init(&r, t, &s, max_items, rank, world);
        while (!eval_run_done(&r)) {
            eval_run_fill(&r, in, tg);
            int at_end = 0;
            for (int i = 0; i < N; i++) {   // like the classifier: no loss where there is no target
                losses[i] = tg[i] < 0 ? 0.0f : fake_loss(in[i], tg[i]);
                hits[i] = tg[i] < 0 ? 0 : fake_hit(in[i], tg[i]);
                at_end += i % s.seq == s.seq - 1 && tg[i] >= 0;
            }
            CHECK(at_end == 0, "%d targets at a row's last position (they would predict the next row)", at_end);
            eval_run_take(&r, losses, t->kind == EVAL_LASTWORD ? hits : NULL, tg);
            (*batches)++;
        }
        EvalResult part = eval_run_result(&r);
        total.items += part.items; total.correct += part.correct; total.loss_sum += part.loss_sum;
        total.tokens += part.tokens; total.truncated += part.truncated;
        eval_run_free(&r);
    }
    free(in); free(tg); free(losses); free(hits);
    return total;
}

// The same numbers from the definition, straight from the items (no rows, no batches).
static EvalResult direct(const Item* items, int n, int kind) {
    EvalResult res;
    memset(&res, 0, sizeof(res));
    for (int i = 0; i < n; i++) {
        const Item* it = &items[i];
        double best = 1e30;
        int winner = -1, all_hit = 1;
        double label_loss = 0;
        for (int c = 0; c < it->k; c++) {
            double sum = 0;
            int prev = it->ctx[it->ctx_len - 1];
            for (int j = 0; j < it->lens[c]; j++) {
                sum += fake_loss(prev, it->cand[c][j]);
                if (c == it->label && !fake_hit(prev, it->cand[c][j])) all_hit = 0;
                prev = it->cand[c][j];
            }
            if (sum / it->lens[c] < best) { best = sum / it->lens[c]; winner = c; }
            if (c == it->label) label_loss = sum;
        }
        res.items += 1;
        res.correct += kind == EVAL_CHOICE ? winner == it->label : all_hit;
        res.loss_sum += label_loss;
        res.tokens += it->lens[it->label];
    }
    return res;
}

static void check_same(const EvalResult* a, const EvalResult* b, const char* what) {
    CHECK(a->items == b->items && a->correct == b->correct && a->tokens == b->tokens &&
          fabs(a->loss_sum - b->loss_sum) < 1e-5, "%s: items %.0f/%.0f correct %.0f/%.0f tokens %.0f/%.0f loss %.6f/%.6f",
          what, a->items, b->items, a->correct, b->correct, a->tokens, b->tokens, a->loss_sum, b->loss_sum);
}

static void test_scoring(void) {
    // the winner is the lowest mean, not the lowest sum, and the first of equals
    const double loss[3] = {3.0, 1.5, 0.9}, tie[2] = {2.0, 1.0};
    const int ntok[3] = {6, 2, 1}, tie_n[2] = {2, 1};
    CHECK(eval_choice_winner(loss, ntok, 3) == 0, "lowest mean loss (0.5) must win over lowest sum (0.9)");
    CHECK(eval_choice_winner(tie, tie_n, 2) == 0, "a tie goes to the first");

    char path[128], err[1024];
    snprintf(path, sizeof(path), "%s/choice.bin", tmpdir);
    write_task(path, EVAL_CHOICE, choice_items, 3, OK);
    EvalTask t;
    CHECK(task_load(&t, "hellaswag", path, EVAL_CHOICE, 50257, err, sizeof(err)) == 0, "%s", err);
    EvalResult want = direct(choice_items, 3, EVAL_CHOICE);
    CHECK(want.correct >= 1 && want.correct <= 2, "the crafted items should be neither all right nor all wrong (%.0f)", want.correct);
    int64_t batches;
    // one rank, rows of 64 (two batches of 4 rows... and padding rows), and 3 ranks (one has two items)
    EvalResult got = run_task(&t, 1, 64 * 4, 1, 0, &batches);
    check_same(&got, &want, "choice, 1 rank");
    CHECK(got.truncated == 0, "nothing truncated at rows of 64");
    got = run_task(&t, 1, 64, 3, 0, &batches);
    check_same(&got, &want, "choice, 3 ranks, one row per batch");
    CHECK(batches == 9, "9 rows in 9 batches of one row, got %lld batches", (long long)batches);
    // the first item only
    EvalResult want1 = direct(choice_items, 1, EVAL_CHOICE);
    got = run_task(&t, 2, 64, 2, 1, &batches);
    check_same(&got, &want1, "--eval-items 1 over 2 ranks");
    // rows of 8: item 0 loses context tokens, which the stand-in does not see (it uses the last one only)
    got = run_task(&t, 2, 8, 1, 0, &batches);
    check_same(&got, &want, "choice, rows of 8");
    CHECK(got.truncated == 1, "one item truncated at rows of 8, got %.0f", got.truncated);
    eval_task_free(&t);

    write_task(path, EVAL_LASTWORD, word_items, 2, OK);
    CHECK(task_load(&t, "lambada", path, EVAL_LASTWORD, 50257, err, sizeof(err)) == 0, "%s", err);
    want = direct(word_items, 2, EVAL_LASTWORD);
    CHECK(want.correct == 1, "one of the two crafted words is greedy-decoded (got %.0f)", want.correct);
    got = run_task(&t, 3, 64, 1, 0, &batches);
    check_same(&got, &want, "last word, 1 rank");
    got = run_task(&t, 1, 64, 2, 0, &batches);
    check_same(&got, &want, "last word, 2 ranks");
    eval_task_free(&t);
    remove(path);
}

// --- the shipped files --------------------------------------------------------------------------------

static void test_shipped(void) {
    const struct { const char* name; const char* path; int kind, items, max_len; } files[] = {
        {"hellaswag", "data/eval/hellaswag_val.bin", EVAL_CHOICE, 10042, 151},
        {"lambada", "data/eval/lambada_test.bin", EVAL_LASTWORD, 5153, 224},
    };
    for (int i = 0; i < 2; i++) {
        if (!test_fixture_ok(files[i].name, files[i].path)) continue;
        EvalTask t;
        char err[2048];
        int rc = task_load(&t, files[i].name, files[i].path, files[i].kind, 50257, err, sizeof(err));
        CHECK(rc == 0, "%s", err);
        if (rc) continue;
        CHECK(t.n_items == files[i].items && t.max_len == files[i].max_len, "%s: %d items, longest %d", files[i].path,
              t.n_items, t.max_len);
        int64_t rows = 0, labels[4] = {0};
        for (int k = 0; k < t.n_items; k++) {
            EvalItem it = eval_task_item(&t, k);
            rows += it.n_choices;
            labels[it.label]++;
        }
        if (files[i].kind == EVAL_CHOICE)   // HellaSwag's labels are spread over the four endings
            CHECK(rows == 4 * t.n_items && labels[0] > 2000 && labels[3] > 2000, "hellaswag: %lld rows, labels %lld %lld %lld %lld",
                  (long long)rows, (long long)labels[0], (long long)labels[1], (long long)labels[2], (long long)labels[3]);
        else
            CHECK(rows == t.n_items, "lambada: one candidate per item");
        EvalShape s;
        CHECK(task_shape(&t, 8, 1024, &s, err, sizeof(err)) == 0 && s.seq == (files[i].kind == EVAL_CHOICE ? 192 : 256),
              "%s: rows of %d tokens", files[i].name, s.seq);
        eval_task_free(&t);
    }
}

int main(void) {
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_eval_XXXXXX");
    if (!mkdtemp(tmpdir)) { printf("FAIL: mkdtemp\n"); return 1; }
    make_items();
    test_reader();
    test_rows();
    test_scoring();
    test_shipped();
    // every message of the reader, the shapes and the rows was drawn by a case above
    static const CheckSite sites[] = {{"llmc/run/eval_tasks.h", "eval_task_load", 1}, {"llmc/run/eval_tasks.h", "eval_shape", 1},
                                      {"llmc/run/eval_tasks.h", "eval_row"}};
    static const CheckExempt exempt[] = {
        {"cannot open %s file '%s': %s", "stat found a regular file that fopen cannot open (no permission: root reads it)"},
        {"read error", "fread of a file stat measured"},
    };
    check_every_site("test_eval", sites, sizeof(sites) / sizeof(sites[0]), exempt, sizeof(exempt) / sizeof(exempt[0]));
    rmdir(tmpdir);
    return test_summary("test_eval");
}
