// gpt_config.h: model shapes of the two families (GPT-2 and Llama, docs/MODELS.md), their named presets, the
// shape flags that override them, and their checks. Plain C (the CPU tests build models' checkpoints).
// defines: GPTConfig, Arch, ARCH_NAMES, ShapeFlags, config_gpt2(), config_from_descriptor(), config_apply_shape(),
//          config_check(), config_same_shape(), config_describe(), config_descriptor_of(), config_head_size(),
//          config_kv_heads(), config_qkv_channels(), MODEL_NAMES, GPT_DEFAULT_MODEL, CONFIG_MAX_CHANNELS, CONFIG_MAX_MLP
#pragma once
#include "llmc/base/common.h"

typedef enum { ARCH_GPT2, ARCH_LLAMA, NUM_ARCHS } Arch;
static const char* const ARCH_NAMES[NUM_ARCHS] = {"gpt2", "llama"};

typedef struct {
    int arch;               // Arch
    int max_seq_len;        // positions: GPT-2's wpe rows, Llama's RoPE table
    int vocab_size;         // real tokens
    int padded_vocab_size;  // rows of wte: vocab rounded up to a multiple of 128 for fast GEMMs
    int num_layers;
    int num_heads;          // query heads
    int channels;
    // Llama's (a GPT-2 shape is its six sizes above; config_gpt2 fills these as GPT-2 has them, and nothing reads them)
    int kv_heads;           // key/value heads (grouped-query attention; GPT-2: num_heads)
    int mlp_hidden;         // the MLP's hidden width (GPT-2: 4C; Llama: the SwiGLU's H)
    int tied;               // the LM head is the token embedding (GPT-2: always)
    float rope_theta;       // Llama: RoPE's base (GPT-2: 0)
    float norm_eps;         // Llama: RMSNorm's epsilon (GPT-2's LayerNorm: 1e-5, fixed in its kernel)
} GPTConfig;

#define GPT_DEFAULT_MODEL "d12"

// The widest shapes config_check takes: the program forms GPT-2's MLP width 4C, the QKV outputs (up to 3C) and
// SwiGLU's fused 2H in 32-bit ints, which these keep from overflowing (with room: Llama 3.1-405B has C = 16384).
#define CONFIG_MAX_CHANNELS (1 << 27)
#define CONFIG_MAX_MLP (1 << 29)

// A GPT-2 shape: L layers of C channels and NH heads, a vocabulary of V tokens padded to Vp, maxT positions.
static inline GPTConfig config_gpt2(int L, int NH, int C, int V, int Vp, int maxT) {
    GPTConfig c;
    memset(&c, 0, sizeof(c));
    c.arch = ARCH_GPT2;
    c.num_layers = L; c.num_heads = NH; c.channels = C;
    c.vocab_size = V; c.padded_vocab_size = Vp; c.max_seq_len = maxT;
    c.kv_heads = NH; c.mlp_hidden = C > 0 && C <= CONFIG_MAX_CHANNELS ? 4 * C : 0; c.tied = 1;   // (config_check refuses C)
    c.rope_theta = 0.0f; c.norm_eps = 1e-5f;
    return c;
}

// Llama's MLP width by default: 2/3 of 4C rounded up to a multiple of 256 (Llama's rule; Quartet II's models).
// (0 for a width config_check refuses, rather than a product past an int)
static inline int llama_default_hidden(int C) {
    return C > 0 && C <= CONFIG_MAX_CHANNELS ? (int)ceil_div((int64_t)8 * C / 3, 256) * 256 : 0;
}

static inline GPTConfig config_llama(int L, int NH, int C, int V, int Vp, int maxT) {
    GPTConfig c = config_gpt2(L, NH, C, V, Vp, maxT);
    c.arch = ARCH_LLAMA;
    c.mlp_hidden = llama_default_hidden(C);
    c.tied = 0;
    c.rope_theta = 10000.0f;
    return c;
}

// The named models: GPT-2 by depth (d12 is GPT-2 124M, d24 350M, d36 774M, d48 1.5B) and Llama by
// non-embedding parameters (Quartet II's sweep shapes, docs/MODELS.md), all with GPT-2's tokenizer.
static const char* const MODEL_NAMES[] = {"d6", "d12", "d24", "d36", "d48", "llama-tiny", "llama-30m", "llama-50m",
                                          "llama-100m", "llama-200m"};
#define NUM_MODEL_NAMES ((int)(sizeof(MODEL_NAMES) / sizeof(MODEL_NAMES[0])))

static inline int config_named(const char* d, GPTConfig* out) {
    const int V = 50257, Vp = 50304, T = 1024;
    if (strcmp(d, "d6") == 0)              *out = config_gpt2(6, 6, 384, V, Vp, T);
    else if (strcmp(d, "d12") == 0)        *out = config_gpt2(12, 12, 768, V, Vp, T);
    else if (strcmp(d, "d24") == 0)        *out = config_gpt2(24, 16, 1024, V, Vp, T);
    else if (strcmp(d, "d36") == 0)        *out = config_gpt2(36, 20, 1280, V, Vp, T);
    else if (strcmp(d, "d48") == 0)        *out = config_gpt2(48, 25, 1600, V, Vp, T);
    else if (strcmp(d, "llama-tiny") == 0) { *out = config_llama(2, 4, 128, V, Vp, T); out->kv_heads = 2; }
    else if (strcmp(d, "llama-30m") == 0)  *out = config_llama(6, 5, 640, V, Vp, T);
    else if (strcmp(d, "llama-50m") == 0)  *out = config_llama(7, 6, 768, V, Vp, T);
    else if (strcmp(d, "llama-100m") == 0) *out = config_llama(8, 8, 1024, V, Vp, T);
    else if (strcmp(d, "llama-200m") == 0) *out = config_llama(10, 10, 1280, V, Vp, T);
    else return -1;
    return 0;
}

static inline GPTConfig config_from_descriptor(const char* d) {
    GPTConfig c;
    if (config_named(d, &c))
        fail("unknown --model '%s': use d6, d12, d24, d36, d48 (GPT-2), llama-tiny, llama-30m, llama-50m, llama-100m "
             "or llama-200m (or --init-from a checkpoint)", d);
    return c;
}

// The shape flags (--n-layer ... --tie-embeddings): a value <= 0 keeps the preset's; tie < 0 keeps it.
typedef struct {
    int n_layer, n_embd, n_head, kv_heads, mlp_hidden;
    float rope_theta, norm_eps;
    int tie;                // 1 on, 0 off, -1 the preset's
} ShapeFlags;

// The shape flags over a preset. GPT-2 takes --n-layer, --n-embd and --n-head; the rest are Llama's. Returns -1
// with err saying which flag does not apply.
static inline int config_apply_shape(GPTConfig* c, const ShapeFlags* f, char* err, size_t n) {
    if (c->arch == ARCH_GPT2 && (f->kv_heads > 0 || f->mlp_hidden > 0 || f->rope_theta > 0 || f->norm_eps > 0 ||
                                 f->tie == 0)) {
        snprintf(err, n, "--kv-heads, --mlp-hidden, --rope-theta, --norm-eps and --tie-embeddings off are Llama's "
                 "options (GPT-2 has %d-wide MLPs, one key/value head per head, LayerNorm and a tied head): "
                 "pick a llama model or --arch llama", 4 * c->channels);
        return -1;
    }
    const int C0 = c->channels;
    if (f->n_layer > 0) c->num_layers = f->n_layer;
    if (f->n_embd > 0) c->channels = f->n_embd;
    if (f->n_head > 0) c->num_heads = f->n_head;
    if (c->arch == ARCH_GPT2) {
        c->kv_heads = c->num_heads;
        c->mlp_hidden = c->channels > 0 && c->channels <= CONFIG_MAX_CHANNELS ? 4 * c->channels : 0;
        return 0;
    }
    if (f->n_head > 0 && f->kv_heads <= 0) c->kv_heads = c->num_heads;   // a new head count: no GQA unless asked
    if (f->kv_heads > 0) c->kv_heads = f->kv_heads;
    if (f->mlp_hidden > 0) c->mlp_hidden = f->mlp_hidden;
    else if (c->channels != C0) c->mlp_hidden = llama_default_hidden(c->channels);
    if (f->rope_theta > 0) c->rope_theta = f->rope_theta;
    if (f->norm_eps > 0) c->norm_eps = f->norm_eps;
    if (f->tie >= 0) c->tied = f->tie;
    return 0;
}

static inline int config_head_size(const GPTConfig* c) { return c->channels / c->num_heads; }
// The QKV linear's outputs: the query heads, then the key heads, then the value heads.
static inline int config_kv_heads(const GPTConfig* c) { return c->arch == ARCH_GPT2 ? c->num_heads : c->kv_heads; }
static inline int config_qkv_channels(const GPTConfig* c) {
    return (c->num_heads + 2 * config_kv_heads(c)) * config_head_size(c);
}

// 0 when the shape is one the program can build; else -1 with err saying what is wrong.
static inline int config_check(const GPTConfig* c, char* err, size_t n) {
    if (c->arch < 0 || c->arch >= NUM_ARCHS) {
        snprintf(err, n, "model config: unknown architecture %d", c->arch);
        return -1;
    }
    if (c->channels > CONFIG_MAX_CHANNELS) {
        snprintf(err, n, "model config: %d channels are more than the %d this program takes (it forms 4C in a 32-bit "
                 "int)", c->channels, CONFIG_MAX_CHANNELS);
        return -1;
    }
    if (c->arch == ARCH_LLAMA && c->mlp_hidden > CONFIG_MAX_MLP) {
        snprintf(err, n, "model config: an MLP %d wide is more than the %d this program takes (it forms SwiGLU's 2H in a "
                 "32-bit int)", c->mlp_hidden, CONFIG_MAX_MLP);
        return -1;
    }
    if (c->num_layers <= 0 || c->channels <= 0 || c->num_heads <= 0 || c->vocab_size <= 0 || c->max_seq_len <= 0 ||
        (c->arch == ARCH_LLAMA && (c->kv_heads <= 0 || c->mlp_hidden <= 0))) {
        snprintf(err, n, "model config: every size must be positive (layers %d, heads %d, kv heads %d, channels %d, "
                 "mlp %d, vocab %d, positions %d)", c->num_layers, c->num_heads, c->kv_heads, c->channels,
                 c->mlp_hidden, c->vocab_size, c->max_seq_len);
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
    if (c->arch == ARCH_LLAMA) {
        const int hs = c->channels / c->num_heads;
        if (c->num_heads % c->kv_heads != 0) {
            snprintf(err, n, "model config: heads %d must be a multiple of kv heads %d (grouped-query attention)",
                     c->num_heads, c->kv_heads);
            return -1;
        }
        if (hs != 32 && hs != 64 && hs != 128) {
            snprintf(err, n, "model config: a Llama head size must be 32, 64 or 128 (channels %d / heads %d = %d)",
                     c->channels, c->num_heads, hs);
            return -1;
        }
        if (c->mlp_hidden % 8 != 0) {
            snprintf(err, n, "model config: the MLP width must be a multiple of 8 (got %d)", c->mlp_hidden);
            return -1;
        }
        if (!(c->rope_theta > 0.0f) || !(c->norm_eps > 0.0f)) {
            snprintf(err, n, "model config: RoPE theta (%g) and the RMSNorm epsilon (%g) must be positive",
                     c->rope_theta, c->norm_eps);
            return -1;
        }
    }
    return 0;
}

// (A GPT-2 shape is its six sizes: its kv heads, MLP width and tied head follow from them.)
static inline int config_same_shape(const GPTConfig* a, const GPTConfig* b) {
    const int same = a->arch == b->arch && a->num_layers == b->num_layers && a->num_heads == b->num_heads &&
                     a->channels == b->channels && a->vocab_size == b->vocab_size &&
                     a->padded_vocab_size == b->padded_vocab_size && a->max_seq_len == b->max_seq_len;
    if (!same || a->arch == ARCH_GPT2) return same;
    return a->kv_heads == b->kv_heads && a->mlp_hidden == b->mlp_hidden && a->tied == b->tied &&
           a->rope_theta == b->rope_theta && a->norm_eps == b->norm_eps;
}

// The --model name of a shape ("d6", "llama-30m", ...), or NULL when it is none of them.
static inline const char* config_descriptor_of(const GPTConfig* c) {
    for (int i = 0; i < NUM_MODEL_NAMES; i++) {
        GPTConfig d;
        config_named(MODEL_NAMES[i], &d);
        if (config_same_shape(&d, c)) return MODEL_NAMES[i];
    }
    return NULL;
}

static inline const char* config_describe(const GPTConfig* c, char* buf, size_t n) {
    if (c->arch == ARCH_GPT2)
        snprintf(buf, n, "%d layers, %d heads, %d channels, vocab %d, %d positions", c->num_layers, c->num_heads,
                 c->channels, c->vocab_size, c->max_seq_len);
    else
        snprintf(buf, n, "llama: %d layers, %d heads (%d kv), %d channels, MLP %d, vocab %d, %d positions, %s head, "
                 "rope theta %g, eps %g", c->num_layers, c->num_heads, c->kv_heads, c->channels, c->mlp_hidden,
                 c->vocab_size, c->max_seq_len, c->tied ? "tied" : "untied", c->rope_theta, c->norm_eps);
    return buf;
}
