// eval_tasks.h: held-out tasks (HellaSwag, LAMBADA) as token files, the rows the model runs on, and their
// scoring. The trainer only runs the forward in between (train_gpt_fp4.cu, "Held-out tasks").
// defines: EvalTask, eval_task_load(), eval_task_free(), eval_task_item(), EvalItem, EvalShape,
//          eval_shape(), EvalRun, eval_run_init(), eval_run_fill(), eval_run_take(), eval_run_done(),
//          eval_run_result(), eval_run_free(), EvalResult, eval_choice_winner(), EVAL_MAGIC
// Plain C, so the CPU tests check the file reader, the rows and the scoring (dev/test/test_eval.c).
//
// Token files (dev/data/eval_prepro.py writes them; the GPT-2 tokens of every context and candidate):
//   int32 header[256]: [0] magic 20261205, [1] version 1, [2] kind (EVAL_CHOICE / EVAL_LASTWORD),
//       [3] items, [4] uint16 values in the item stream, [5] longest item (context + longest candidate),
//       [6] longest candidate, [7] vocabulary size the tokens are below, [8] CRC32 of the stream,
//       [9] most candidates of one item
//   uint16 item stream, per item: context length n, candidates k, label, the k candidate lengths, the n
//       context tokens, then each candidate's tokens.
//
// Rows. Every (item, candidate) pair is one row of S tokens (EvalShape.seq): the context, then the
// candidate, then <|endoftext|> padding. Causal attention makes what follows the candidate irrelevant,
// so a row scores exactly as the pair alone would. A context too long for the row loses its oldest
// tokens (the item counts as truncated); a candidate always fits whole (eval_shape refuses otherwise).
// Targets are the next tokens at the positions that predict the candidate's tokens, -1 (no loss)
// everywhere else, so the forward's per-token losses at those positions are the candidate's own.
// Rows never share a sequence: packing two items into one row would let the second attend to the first.
//
// Scoring (per item, from each candidate's summed loss L_k over its n_k tokens):
//   EVAL_CHOICE (HellaSwag): the candidate with the lowest mean loss L_k / n_k wins (the first on a
//       tie); accuracy = share of items whose winner is the label. This is llm.c's "acc_norm"; lm-eval's
//       acc_norm divides by the candidate's length in bytes instead of tokens.
//   EVAL_LASTWORD (LAMBADA): correct when every candidate token is the argmax of its logits (greedy
//       decoding reproduces the word); perplexity = exp(sum of L over items / items), the per-word
//       perplexity lm-eval reports for lambada_openai.
//
// Data parallel: rank r scores the items r, r + world, r + 2 world, ...; the ranks' counts and loss
// sums add up to the whole task's (the trainer sums them over ranks).
#pragma once
#include <math.h>
#include <errno.h>
#include <sys/stat.h>
#include "llmc/base/common.h"
#include "llmc/run/checkpoint.h"   // crc32_update

#define EVAL_MAGIC 20261205
#define EVAL_VERSION 1
#define EVAL_HEADER_INTS 256
#define EVAL_EOT 50256
#define EVAL_PREPRO_HINT "python3 dev/data/eval_prepro.py"

typedef enum { EVAL_CHOICE = 1, EVAL_LASTWORD = 2 } EvalKind;

typedef struct {
    char name[32];          // "hellaswag", "lambada": the prefix of its fields in the log
    char path[1024];
    int kind;
    int n_items;            // items in the file
    int max_len;            // longest context + longest candidate
    int max_cand;           // longest candidate
    int max_choices;
    uint16_t* stream;
    int64_t stream_len;
    int64_t* item_off;      // where each item's record starts in the stream
} EvalTask;

// One item, pointing into the task's stream.
typedef struct {
    int ctx_len, n_choices, label;
    const uint16_t* ctx;
    const uint16_t* lens;   // n_choices candidate lengths
    const uint16_t* cands;  // the candidates' tokens, one after the other
} EvalItem;

static inline EvalItem eval_task_item(const EvalTask* t, int i) {
    const uint16_t* p = t->stream + t->item_off[i];
    EvalItem it;
    it.ctx_len = p[0];
    it.n_choices = p[1];
    it.label = p[2];
    it.lens = p + 3;
    it.ctx = p + 3 + it.n_choices;
    it.cands = it.ctx + it.ctx_len;
    return it;
}

static inline void eval_task_free(EvalTask* t) {
    free(t->stream);
    free(t->item_off);
    memset(t, 0, sizeof(*t));
}

// Reads and checks a token file: 0, or -1 with err saying what is wrong with the file and what to do.
// want_kind: the kind the caller expects (0: any); vocab: token ids must be below it.
static inline int eval_task_load(EvalTask* t, const char* name, const char* path, int want_kind, int vocab,
                                 char* err, size_t cap) {
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    snprintf(t->path, sizeof(t->path), "%s", path);
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, cap, "%s file '%s' not found: make the eval token files with %s (or point --%s at them)",
                 name, path, EVAL_PREPRO_HINT, name);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, cap, "%s file '%s' is not a regular file (give the .bin file %s writes)", name, path, EVAL_PREPRO_HINT);
        return -1;
    }
    const int64_t hbytes = EVAL_HEADER_INTS * sizeof(int32_t);
    int32_t h[EVAL_HEADER_INTS];
    FILE* f = fopen(path, "rb");
    if (!f) {
        snprintf(err, cap, "cannot open %s file '%s': %s", name, path, strerror(errno));
        return -1;
    }
    if ((int64_t)st.st_size < hbytes || fread(h, 1, (size_t)hbytes, f) != (size_t)hbytes) {
        fclose(f);
        snprintf(err, cap, "%s file '%s' is truncated (%lld bytes, shorter than its 1024-byte header); rewrite it "
                 "with %s", name, path, (long long)st.st_size, EVAL_PREPRO_HINT);
        return -1;
    }
    const char* bad = NULL;
    char why[256];
    if (h[0] != EVAL_MAGIC) {
        snprintf(why, sizeof(why), "bad magic %d, want %d: not an eval token file", h[0], EVAL_MAGIC);
        bad = why;
    } else if (h[1] != EVAL_VERSION) {
        snprintf(why, sizeof(why), "version %d, this program reads version %d", h[1], EVAL_VERSION);
        bad = why;
    } else if (want_kind && h[2] != want_kind) {
        snprintf(why, sizeof(why), "it holds a %s task, --%s wants a %s task",
                 h[2] == EVAL_CHOICE ? "multiple-choice" : h[2] == EVAL_LASTWORD ? "last-word" : "unknown", name,
                 want_kind == EVAL_CHOICE ? "multiple-choice" : "last-word");
        bad = why;
    } else if (h[3] <= 0 || h[4] <= 0 || h[5] <= 0 || h[6] <= 0 || h[9] <= 0 || h[9] > 255) {
        snprintf(why, sizeof(why), "impossible counts in its header (items %d, stream %d)", h[3], h[4]);
        bad = why;
    } else if ((int64_t)st.st_size != hbytes + 2 * (int64_t)h[4]) {
        snprintf(why, sizeof(why), "%lld bytes, its header says %lld (truncated or damaged)", (long long)st.st_size,
                 (long long)(hbytes + 2 * (int64_t)h[4]));
        bad = why;
    } else if (h[7] > vocab) {
        snprintf(why, sizeof(why), "its tokens are for a vocabulary of %d, the model has %d", h[7], vocab);
        bad = why;
    }
    if (bad) {
        fclose(f);
        snprintf(err, cap, "%s file '%s': %s; rewrite it with %s", name, path, bad, EVAL_PREPRO_HINT);
        return -1;
    }
    t->kind = h[2];
    t->n_items = h[3];
    t->stream_len = h[4];
    t->max_len = h[5];
    t->max_cand = h[6];
    t->max_choices = h[9];
    t->stream = (uint16_t*)xmalloc((size_t)t->stream_len * sizeof(uint16_t));
    t->item_off = (int64_t*)xmalloc((size_t)t->n_items * sizeof(int64_t));
    size_t got = fread(t->stream, sizeof(uint16_t), (size_t)t->stream_len, f);
    fclose(f);
    if (got != (size_t)t->stream_len) bad = "read error";
    uint32_t crc = bad ? 0 : crc32_update(0, t->stream, (size_t)t->stream_len * sizeof(uint16_t));
    if (!bad && crc != (uint32_t)h[8]) {
        snprintf(why, sizeof(why), "the item stream is damaged (CRC32 %08x, recorded %08x)", crc, (uint32_t)h[8]);
        bad = why;
    }
    // walk the items: every length inside the stream and the header's maxima, labels and tokens valid
    int64_t p = 0;
    int longest = 0, longest_cand = 0;
    for (int i = 0; i < t->n_items && !bad; i++) {
        t->item_off[i] = p;
        if (p + 3 > t->stream_len) { bad = "the items run past the end of the stream"; break; }
        int n = t->stream[p], k = t->stream[p + 1], label = t->stream[p + 2];
        if (n == 0 || k == 0 || k > t->max_choices || label >= k || p + 3 + k > t->stream_len) {
            snprintf(why, sizeof(why), "item %d has %d context tokens, %d candidates, label %d", i, n, k, label);
            bad = why;
            break;
        }
        int64_t total = n, cand_max = 0;
        for (int c = 0; c < k; c++) {
            int len = t->stream[p + 3 + c];
            if (len == 0) { snprintf(why, sizeof(why), "item %d has an empty candidate", i); bad = why; }
            total += len;
            cand_max = len > cand_max ? len : cand_max;
        }
        if (bad) break;
        p += 3 + k;
        if (p + total > t->stream_len) { bad = "the items run past the end of the stream"; break; }
        for (int64_t j = p; j < p + total; j++)
            if (t->stream[j] >= vocab) {
                snprintf(why, sizeof(why), "item %d holds token %d, not below the vocabulary size %d", i, t->stream[j], vocab);
                bad = why;
                break;
            }
        p += total;
        longest = n + cand_max > longest ? (int)(n + cand_max) : longest;
        longest_cand = cand_max > longest_cand ? (int)cand_max : longest_cand;
    }
    if (!bad && p != t->stream_len) bad = "the items end before the stream does";
    if (!bad && (longest != t->max_len || longest_cand != t->max_cand)) bad = "its header's longest item disagrees with its items";
    if (bad) {
        snprintf(err, cap, "%s file '%s': %s; rewrite it with %s", name, path, bad, EVAL_PREPRO_HINT);
        eval_task_free(t);
        return -1;
    }
    return 0;
}

// The forward's shape for a task: rows of `seq` tokens, `rows` at a time, within the trainer's B x T
// token buffers. seq is the longest item rounded up to 64 (whole 64-token blocks keep the FP4 recipes'
// token multiples), at most T. Returns 0, or -1 with err when a candidate cannot fit (T too short).
typedef struct {
    int seq, rows;
} EvalShape;

static inline int eval_shape(const EvalTask* t, int B, int T, EvalShape* s, char* err, size_t cap) {
    int seq = (int)ceil_div(t->max_len, 64) * 64;
    s->seq = seq < T ? seq : T;
    s->rows = (int)(((int64_t)B * T) / s->seq);
    if (t->max_cand + 1 > s->seq) {
        snprintf(err, cap, "%s: a candidate of %d tokens needs rows of at least %d tokens (one context token before "
                 "it), but --seq-len is %d; use a longer --seq-len or drop %s from --eval-tasks", t->name, t->max_cand,
                 t->max_cand + 1, T, t->name);
        return -1;
    }
    return 0;
}

// One row: inputs and targets (seq each) for candidate c of an item. Returns the candidate's token count;
// *truncated says whether context tokens were left out.
static inline int eval_row(const EvalItem* it, int c, int seq, int* inputs, int* targets, int* truncated) {
    const uint16_t* cand = it->cands;
    for (int k = 0; k < c; k++) cand += it->lens[k];
    const int clen = it->lens[c];
    const int keep = it->ctx_len < seq - clen ? it->ctx_len : seq - clen;   // eval_shape makes this >= 1
    // (0 would write the target before the row, targets[-1]: a candidate as long as the row, or an empty context)
    fail_if(keep < 1, "internal: a row of %d tokens for a candidate of %d after %d context tokens (eval_shape leaves "
            "one context token)", seq, clen, it->ctx_len);
    const uint16_t* ctx = it->ctx + (it->ctx_len - keep);
    int n = 0;
    for (int i = 0; i < keep; i++) inputs[n++] = ctx[i];
    for (int i = 0; i < clen; i++) inputs[n++] = cand[i];
    for (int i = n; i < seq; i++) inputs[i] = EVAL_EOT;
    for (int i = 0; i < seq; i++) targets[i] = -1;
    for (int i = keep - 1; i < n - 1; i++) targets[i] = inputs[i + 1];   // the positions that predict the candidate
    *truncated = keep < it->ctx_len;
    return clen;
}

// The winner of a multiple-choice item: the lowest mean loss, the first on a tie.
static inline int eval_choice_winner(const double* loss, const int* ntok, int k) {
    int best = 0;
    for (int c = 1; c < k; c++)
        if (loss[c] / ntok[c] < loss[best] / ntok[best]) best = c;
    return best;
}

typedef struct {
    double items, correct, loss_sum, tokens, truncated;   // sums over the items scored (doubles: summed over ranks)
} EvalResult;

// One rank's pass over a task: rows in order (this rank's items, each item's candidates), Shape.rows
// at a time; per row its item and candidate, and when taken its summed loss, token count and greedy hit.
typedef struct {
    const EvalTask* task;
    EvalShape shape;
    int n_items;             // items of the task evaluated (the first n_items), over all ranks
    int64_t n_rows, next;    // this rank's rows, and the first not yet handed out
    int* row_item;           // per row of this rank: item index, candidate index
    int* row_cand;
    double* row_loss;        // filled by eval_run_take
    int* row_ntok;
    int* row_hit;
    int* row_trunc;
    int64_t batch_first;     // the rows of the batch eval_run_fill handed out last
    int batch_rows;
} EvalRun;

// max_items: the first max_items items only (0: all). rank/world: this rank's items only.
static inline void eval_run_init(EvalRun* r, const EvalTask* t, const EvalShape* s, int max_items, int rank, int world) {
    memset(r, 0, sizeof(*r));
    r->task = t;
    r->shape = *s;
    r->n_items = max_items > 0 && max_items < t->n_items ? max_items : t->n_items;
    for (int i = rank; i < r->n_items; i += world) r->n_rows += eval_task_item(t, i).n_choices;
    size_t n = (size_t)(r->n_rows ? r->n_rows : 1);
    r->row_item = (int*)xmalloc(n * sizeof(int));
    r->row_cand = (int*)xmalloc(n * sizeof(int));
    r->row_loss = (double*)calloc(n, sizeof(double));
    r->row_ntok = (int*)calloc(n, sizeof(int));
    r->row_hit = (int*)calloc(n, sizeof(int));
    r->row_trunc = (int*)calloc(n, sizeof(int));
    fail_if(!r->row_loss || !r->row_ntok || !r->row_hit || !r->row_trunc, "out of host memory for the %s rows", t->name);
    int64_t k = 0;
    for (int i = rank; i < r->n_items; i += world) {
        int nc = eval_task_item(t, i).n_choices;
        for (int c = 0; c < nc; c++, k++) { r->row_item[k] = i; r->row_cand[k] = c; }
    }
}

static inline int eval_run_done(const EvalRun* r) { return r->next >= r->n_rows; }

// The next batch: always shape.rows rows of shape.seq tokens (the forward keeps one shape); rows past
// this rank's last are <|endoftext|> with no targets. Returns how many rows are real.
static inline int eval_run_fill(EvalRun* r, int* inputs, int* targets) {
    const int S = r->shape.seq, R = r->shape.rows;
    int64_t left = r->n_rows - r->next;
    int real = left < R ? (int)left : R;
    for (int b = 0; b < R; b++) {
        int* in = inputs + (size_t)b * S;
        int* tg = targets + (size_t)b * S;
        if (b >= real) {
            for (int i = 0; i < S; i++) { in[i] = EVAL_EOT; tg[i] = -1; }
            continue;
        }
        int64_t row = r->next + b;
        EvalItem it = eval_task_item(r->task, r->row_item[row]);
        r->row_ntok[row] = eval_row(&it, r->row_cand[row], S, in, tg, &r->row_trunc[row]);
        r->row_loss[row] = 0.0;
        r->row_hit[row] = 1;
    }
    r->batch_first = r->next;
    r->batch_rows = real;
    r->next += real;
    return real;
}

// The forward's results for the batch eval_run_fill handed out: per-token losses (0 where there is no
// target) and, for last-word tasks, hits[i] != 0 when position i's target is the argmax of its logits
// (NULL: not computed). targets: the batch's targets, as filled.
static inline void eval_run_take(EvalRun* r, const float* losses, const int* hits, const int* targets) {
    const int S = r->shape.seq;
    for (int b = 0; b < r->batch_rows; b++) {
        int64_t row = r->batch_first + b;
        double sum = 0.0;
        int hit = 1;
        for (int i = 0; i < S; i++) {
            size_t k = (size_t)b * S + i;
            if (targets[k] < 0) continue;
            sum += losses[k];
            if (hits && !hits[k]) hit = 0;
        }
        r->row_loss[row] = sum;
        r->row_hit[row] = hits ? hit : 0;
    }
}

// This rank's sums, once every row is taken.
static inline EvalResult eval_run_result(const EvalRun* r) {
    EvalResult res;
    memset(&res, 0, sizeof(res));
    for (int64_t k = 0; k < r->n_rows;) {
        const int item = r->row_item[k];
        EvalItem it = eval_task_item(r->task, item);
        const double* loss = r->row_loss + k;
        const int* ntok = r->row_ntok + k;
        res.items += 1;
        int trunc = 0;
        for (int c = 0; c < it.n_choices; c++) trunc |= r->row_trunc[k + c];
        res.truncated += trunc;
        if (r->task->kind == EVAL_CHOICE) {
            res.correct += eval_choice_winner(loss, ntok, it.n_choices) == it.label;
            res.loss_sum += loss[it.label];
            res.tokens += ntok[it.label];
        } else {
            res.correct += r->row_hit[k + it.label] != 0;
            res.loss_sum += loss[it.label];
            res.tokens += ntok[it.label];
        }
        k += it.n_choices;
    }
    return res;
}

static inline void eval_run_free(EvalRun* r) {
    free(r->row_item); free(r->row_cand); free(r->row_loss); free(r->row_ntok); free(r->row_hit); free(r->row_trunc);
    memset(r, 0, sizeof(*r));
}
