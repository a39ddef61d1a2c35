// gpt_config.h: GPT-2 model shapes and their checks. Plain C (the CPU tests build models' checkpoints).
// defines: GPTConfig, config_from_descriptor(), config_check(), config_same_shape(), config_describe(),
//          config_descriptor_of()
#pragma once
#include "llmc/base/common.h"

typedef struct {
    int max_seq_len;        // positions in wpe
    int vocab_size;         // real tokens
    int padded_vocab_size;  // rows of wte: vocab rounded up to a multiple of 128 for fast GEMMs
    int num_layers;
    int num_heads;
    int channels;
} GPTConfig;

#define GPT_DEFAULT_MODEL "d12"

// GPT-2 shapes by depth: d12 is GPT-2 124M, d24 350M, d36 774M, d48 1.5B.
static inline GPTConfig config_from_descriptor(const char* d) {
    GPTConfig c;
    c.max_seq_len = 1024;
    c.vocab_size = 50257;
    c.padded_vocab_size = 50304;
    if (strcmp(d, "d6") == 0)       { c.num_layers = 6;  c.channels = 384;  c.num_heads = 6; }
    else if (strcmp(d, "d12") == 0) { c.num_layers = 12; c.channels = 768;  c.num_heads = 12; }
    else if (strcmp(d, "d24") == 0) { c.num_layers = 24; c.channels = 1024; c.num_heads = 16; }
    else if (strcmp(d, "d36") == 0) { c.num_layers = 36; c.channels = 1280; c.num_heads = 20; }
    else if (strcmp(d, "d48") == 0) { c.num_layers = 48; c.channels = 1600; c.num_heads = 25; }
    else fail("unknown --model '%s': use d6, d12, d24, d36 or d48 (or --init-from a checkpoint)", d);
    return c;
}

// 0 when the shape is one the program can build; else -1 with err saying what is wrong.
static inline int config_check(const GPTConfig* c, char* err, size_t n) {
    if (c->num_layers <= 0 || c->channels <= 0 || c->num_heads <= 0 || c->vocab_size <= 0 || c->max_seq_len <= 0) {
        snprintf(err, n, "model config: every size must be positive (layers %d, heads %d, channels %d, vocab %d, "
                 "positions %d)", c->num_layers, c->num_heads, c->channels, c->vocab_size, c->max_seq_len);
        return -1;
    }
    if (c->channels % c->num_heads != 0) {
        snprintf(err, n, "model config: channels %d not divisible by heads %d", c->channels, c->num_heads);
        return -1;
    }
    if (c->channels % 8 != 0) {
        snprintf(err, n, "model config: channels must be a multiple of 8 (got %d)", c->channels);
        return -1;
    }
    if ((c->channels / c->num_heads) % 8 != 0) {   // the attention kernels' 16-byte rows
        snprintf(err, n, "model config: the head size (channels %d / heads %d) must be a multiple of 8", c->channels,
                 c->num_heads);
        return -1;
    }
    if (c->padded_vocab_size < c->vocab_size || c->padded_vocab_size % 128 != 0) {
        snprintf(err, n, "model config: padded vocab %d must be >= vocab %d and a multiple of 128",
                 c->padded_vocab_size, c->vocab_size);
        return -1;
    }
    return 0;
}

static inline int config_same_shape(const GPTConfig* a, const GPTConfig* b) {
    return a->num_layers == b->num_layers && a->num_heads == b->num_heads && a->channels == b->channels &&
           a->vocab_size == b->vocab_size && a->padded_vocab_size == b->padded_vocab_size &&
           a->max_seq_len == b->max_seq_len;
}

// The --model name of a shape ("d6", ...), or NULL when it is none of them.
static inline const char* config_descriptor_of(const GPTConfig* c) {
    static const char* const names[] = {"d6", "d12", "d24", "d36", "d48"};
    for (int i = 0; i < 5; i++) {
        GPTConfig d = config_from_descriptor(names[i]);
        if (config_same_shape(&d, c)) return names[i];
    }
    return NULL;
}

static inline const char* config_describe(const GPTConfig* c, char* buf, size_t n) {
    snprintf(buf, n, "%d layers, %d heads, %d channels, vocab %d, %d positions", c->num_layers, c->num_heads,
             c->channels, c->vocab_size, c->max_seq_len);
    return buf;
}
