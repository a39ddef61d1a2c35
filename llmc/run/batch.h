// batch.h: the batch arithmetic. Tokens per optimizer step (--total-batch) are made of micro-batches
// of B sequences of T tokens on each of `world` processes, plus gradient accumulation. Everything is
// computed in 64-bit, so sizes whose products overflow an int are refused with a message instead of
// wrapping around (a wrapped product once divided by zero).
// defines: BatchPlan, batch_plan(), BATCH_MAX_MICRO_TOKENS
#pragma once
#include "llmc/base/common.h"

// Tokens one micro-batch may hold. The kernels index tokens with 32-bit ints, and long before that the
// activations run out of memory: at 2^24 tokens the logits alone (50304 BF16 values per token) take
// 1.5 TiB. Larger token counts per step come from --total-batch (gradient accumulation).
#define BATCH_MAX_MICRO_TOKENS (1 << 24)

typedef struct {
    int64_t micro_tokens;   // B * T, one process's micro-batch
    int64_t step_tokens;    // tokens per optimizer step, all processes
    int grad_accum;         // micro-batches per process per step
} BatchPlan;

// total_batch: --total-batch (0: one micro-batch per process). Returns 0, or -1 with err saying which
// flags to change.
static inline int batch_plan(int B, int T, int world, int64_t total_batch, BatchPlan* p, char* err, size_t n) {
    memset(p, 0, sizeof(*p));
    if (B <= 0 || T <= 0 || world <= 0) {
        snprintf(err, n, "--batch-size %d and --seq-len %d must be positive (processes: %d)", B, T, world);
        return -1;
    }
    const int64_t micro = (int64_t)B * T, per_step = micro * world;
    if (micro > BATCH_MAX_MICRO_TOKENS) {
        snprintf(err, n, "--batch-size %d x --seq-len %d = %lld tokens per micro-batch is more than the %d one GPU "
                 "can hold; use a smaller --batch-size and reach the tokens per step with --total-batch (gradient "
                 "accumulation)", B, T, (long long)micro, BATCH_MAX_MICRO_TOKENS);
        return -1;
    }
    if (total_batch < 0) {
        snprintf(err, n, "--total-batch %lld is negative: give the tokens per optimizer step, a multiple of "
                 "--batch-size x --seq-len x processes = %lld, or 0 for one micro-batch per process",
                 (long long)total_batch, (long long)per_step);
        return -1;
    }
    if (total_batch == 0) total_batch = per_step;
    if (total_batch % per_step != 0) {
        snprintf(err, n, "--total-batch %lld must be a multiple of --batch-size x --seq-len x processes = %d x %d x %d "
                 "= %lld (or 0 for one micro-batch per process)", (long long)total_batch, B, T, world,
                 (long long)per_step);
        return -1;
    }
    if (total_batch / per_step > 0x7FFFFFFF) {
        snprintf(err, n, "--total-batch %lld needs %lld accumulation steps; use a larger --batch-size",
                 (long long)total_batch, (long long)(total_batch / per_step));
        return -1;
    }
    p->micro_tokens = micro;
    p->step_tokens = total_batch;
    p->grad_accum = (int)(total_batch / per_step);
    return 0;
}
