// ckpt_fields.h: the trainer's fields of a checkpoint header (llmc/run/checkpoint.h owns the others): the
// model's shape and the run's settings. Plain C, so the CPU tests can write checkpoints the trainer reads
// (dev/test/test_cli.c, test_export.c).
// defines: H_*, config_to_header(), config_from_header(), header_u64(), header_set_u64()
#pragma once
#include "llmc/base/common.h"
#include "llmc/run/checkpoint.h"
#include "llmc/model/gpt_config.h"

// 64-bit values are split into _LO and _HI halves.
enum {
    H_LAYERS = CKPT_H_USER, H_HEADS, H_CHANNELS, H_VOCAB, H_PADDED_VOCAB, H_MAX_T,
    H_STEP,          // optimizer steps done
    H_ADAM_T,        // AdamW updates applied (bias correction; skipped updates do not count)
    H_HAS_MASTER,    // the optimizer section starts with FP32 master weights
    H_B, H_T, H_GRAD_ACCUM, H_WORLD, H_ZERO,
    H_RANK,          // the rank that wrote the file: 0 for the main file, r for ckpt_XXXXXXXX.rankRRR.bin
    H_HAS_PARAMS,    // the weights section holds the BF16 parameters (main file only)
    H_OPT_BEGIN_LO, H_OPT_BEGIN_HI, H_OPT_COUNT_LO, H_OPT_COUNT_HI   // the parameters the optimizer state covers
};

static inline void config_to_header(const GPTConfig* c, int32_t* h) {
    h[H_LAYERS] = c->num_layers; h[H_HEADS] = c->num_heads; h[H_CHANNELS] = c->channels;
    h[H_VOCAB] = c->vocab_size; h[H_PADDED_VOCAB] = c->padded_vocab_size; h[H_MAX_T] = c->max_seq_len;
}

static inline GPTConfig config_from_header(const int32_t* h) {
    GPTConfig c;
    c.num_layers = h[H_LAYERS]; c.num_heads = h[H_HEADS]; c.channels = h[H_CHANNELS];
    c.vocab_size = h[H_VOCAB]; c.padded_vocab_size = h[H_PADDED_VOCAB]; c.max_seq_len = h[H_MAX_T];
    return c;
}

static inline uint64_t header_u64(const int32_t* h, int lo) {
    return ((uint64_t)(uint32_t)h[lo + 1] << 32) | (uint32_t)h[lo];
}
static inline void header_set_u64(int32_t* h, int lo, uint64_t v) {
    h[lo] = (int32_t)(uint32_t)(v & 0xFFFFFFFFu);
    h[lo + 1] = (int32_t)(uint32_t)(v >> 32);
}
