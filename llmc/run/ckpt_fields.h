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
    H_OPT_BEGIN_LO, H_OPT_BEGIN_HI, H_OPT_COUNT_LO, H_OPT_COUNT_HI,  // the parameters the optimizer state covers
    // the model family's own fields, written for Llama models only (0 in every GPT-2 checkpoint, which the
    // checkpoints written before the Llama family already were): the architecture, GQA's key/value heads, the MLP
    // width, a tied head, RoPE's theta and the RMSNorm epsilon (float bits)
    H_ARCH, H_KV_HEADS, H_MLP_HIDDEN, H_TIED, H_ROPE_THETA, H_NORM_EPS,
    H_OPT_STATE,     // the optimizer section's moments: 0 FP32 m and v (every file before it), 1 NVFP4 (--optimizer-state)
    H_OPTIMIZER,     // --optimizer: 0 AdamW (every file before it), 1 Muon (llmc/model/muon_plan.h's OPTIMIZER_*): without
                     // ZeRO-1 its matrices' momentum in m's place, their v unused
    H_MUON_OWNED_LO, H_MUON_OWNED_HI,  // ZeRO-1 with Muon: the elements of the Muon matrices this file's rank owns,
                                       // whose FP32 momentum (then masters, with H_HAS_MASTER) end the optimizer section
    H_LORA_RANK      // --lora-svd-rank: the optimizer section ends with the LoRA-SVD factors of this rank (0: none)
};

static inline void config_to_header(const GPTConfig* c, int32_t* h) {
    h[H_LAYERS] = c->num_layers; h[H_HEADS] = c->num_heads; h[H_CHANNELS] = c->channels;
    h[H_VOCAB] = c->vocab_size; h[H_PADDED_VOCAB] = c->padded_vocab_size; h[H_MAX_T] = c->max_seq_len;
    if (c->arch == ARCH_GPT2) return;
    h[H_ARCH] = c->arch; h[H_KV_HEADS] = c->kv_heads; h[H_MLP_HIDDEN] = c->mlp_hidden; h[H_TIED] = c->tied;
    memcpy(&h[H_ROPE_THETA], &c->rope_theta, 4);
    memcpy(&h[H_NORM_EPS], &c->norm_eps, 4);
}

static inline GPTConfig config_from_header(const int32_t* h) {
    GPTConfig c = config_gpt2(h[H_LAYERS], h[H_HEADS], h[H_CHANNELS], h[H_VOCAB], h[H_PADDED_VOCAB], h[H_MAX_T]);
    if (h[H_ARCH] == ARCH_GPT2) return c;
    c.arch = h[H_ARCH]; c.kv_heads = h[H_KV_HEADS]; c.mlp_hidden = h[H_MLP_HIDDEN]; c.tied = h[H_TIED];
    memcpy(&c.rope_theta, &h[H_ROPE_THETA], 4);
    memcpy(&c.norm_eps, &h[H_NORM_EPS], 4);
    return c;
}

static inline uint64_t header_u64(const int32_t* h, int lo) {
    return ((uint64_t)(uint32_t)h[lo + 1] << 32) | (uint32_t)h[lo];
}
static inline void header_set_u64(int32_t* h, int lo, uint64_t v) {
    h[lo] = (int32_t)(uint32_t)(v & 0xFFFFFFFFu);
    h[lo + 1] = (int32_t)(uint32_t)(v >> 32);
}
