// test_export.c: scripts/export_hf.py on the CPU. Writes small checkpoints whose every BF16 weight is a known value
// (a hash of its index), exports them, and reads the safetensors file back here, value for value:
//   GPT-2 (2 layers, 16 channels, vocabulary 300 padded to 384): every tensor exactly the trainer's values,
//     transposed for the Conv1D weights, the embedding cut to the vocabulary, in FP32 and with --dtype bfloat16;
//   Llama (docs/MODELS.md: 2 layers, 128 channels, 4 heads of 32, 2 key/value heads, MLP 96, vocabulary 250 padded to
//     256), untied and tied (with another RoPE theta and RMSNorm epsilon): q/k/v_proj the query, key and value rows of
//     qkvw, gate/up_proj fcw's two halves, embed_tokens and lm_head cut to the vocabulary, no lm_head when tied, no
//     other tensor; the layout the test writes is the one llmc/model/models.h gives (param_sizes).
// config.json must describe each model; damaged checkpoints and impossible headers must be refused with one error line.
// Needs python3 with numpy (PYTHON=..., python3 or /usr/bin/python3); skips without it. Where torch and transformers
// are installed too, dev/eval/check_export.py loads each export with transformers and checks its config, its
// parameters and its logits against a float64 forward of the checkpoint (skipped otherwise; against the trainer's own
// logits it runs on a GPU machine: dev/eval/device_check.sh).
#include "llmc/run/checkpoint.h"
#include "llmc/model/gpt_config.h"
#include "llmc/model/models.h"
#include "llmc/run/ckpt_fields.h"
#include "dev/test/testing.h"

static char tmpdir[64];
static char python[256];
static int have_transformers;

enum { L = 2, NH = 2, C = 16, V = 300, VP = 384, MAXT = 32 };                                     // GPT-2
enum { LL = 2, LNH = 4, LKVH = 2, LC = 128, LHS = LC / LNH, LH = 96, LV = 250, LVP = 256, LMAXT = 32 };   // Llama
enum { LQKV = (LNH + 2 * LKVH) * LHS };

// The checkpoint's tensors in storage order, their element counts and offsets (set by layout_gpt2 / layout_llama).
#define MAX_TENSORS 16
static const char* names[MAX_TENSORS];
static size_t sizes[MAX_TENSORS], offsets[MAX_TENSORS], total;
static int ntensors;

static void layout(const char* const* n, const size_t* s, int count) {
    total = 0;
    ntensors = count;
    for (int i = 0; i < count; i++) { names[i] = n[i]; sizes[i] = s[i]; offsets[i] = total; total += s[i]; }
}

// GPT-2's tensors (llmc/model/gpt2.h).
static void layout_gpt2(void) {
    static const char* const n[16] = {"wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                                      "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};
    const size_t s[16] = {(size_t)VP * C, (size_t)MAXT * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C,
                          L * C, L * C, L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C, C, C};
    layout(n, s, 16);
}

// Llama's tensors as docs/MODELS.md lists them: wte ln1w qkvw attprojw ln2w fcw fcprojw lnfw [lm_head].
static void layout_llama(int tied) {
    static const char* const n[9] = {"wte", "ln1w", "qkvw", "attprojw", "ln2w", "fcw", "fcprojw", "lnfw", "lm_head"};
    const size_t s[9] = {(size_t)LVP * LC, LL * LC, (size_t)LL * LQKV * LC, (size_t)LL * LC * LC, LL * LC,
                         (size_t)LL * 2 * LH * LC, (size_t)LL * LC * LH, LC, (size_t)LVP * LC};
    layout(n, s, tied ? 8 : 9);
}

static size_t offset_of(const char* name) {
    for (int i = 0; i < ntensors; i++)
        if (strcmp(names[i], name) == 0) return offsets[i];
    printf("FAIL: no tensor %s in the layout\n", name);
    exit(1);
}

static GPTConfig llama_config(int tied, float theta, float eps) {
    GPTConfig c = config_llama(LL, LNH, LC, LV, LVP, LMAXT);
    c.kv_heads = LKVH; c.mlp_hidden = LH; c.tied = tied; c.rope_theta = theta; c.norm_eps = eps;
    return c;
}

// The layout above against the one the trainer's tables give (llmc/model/models.h): the same tensors, in the
// same order, of the same sizes.
static void check_layout_matches_models_h(const GPTConfig* c, const char* what) {
    size_t s[MAX_PARAM_TENSORS];
    const int k = param_sizes(c, s);
    const ModelFamily* f = model_family(c);
    int same = 1, j = 0;
    for (int i = 0; i < k; i++) {
        if (s[i] == 0) continue;   // the tied model's lm_head
        same &= j < ntensors && strcmp(f->params[i].name, names[j]) == 0 && s[i] == sizes[j];
        j++;
    }
    char err[256] = "";
    CHECK(same && j == ntensors && param_count(c) == total && config_check(c, err, sizeof(err)) == 0,
          "%s: the test's layout (%d tensors, %zu values) is not models.h's (%d tensors, %zu values) %s", what,
          ntensors, total, j, param_count(c), err);
}

// Weight i's BF16 bits: a hash of i, so that a slice taken at a wrong offset differs almost everywhere;
// magnitudes in [1/16, 1), either sign (1024 values): finite, and sizes at which transformers' forward is well
// conditioned (check_export.py runs it).
static uint16_t weight_bits(size_t i) {
    uint32_t x = (uint32_t)i * 2654435761u + 0x9E3779B9u;
    x ^= x >> 16; x *= 0x7FEB352Du; x ^= x >> 15; x *= 0x846CA68Bu; x ^= x >> 16;
    return (uint16_t)(0x3D80 + (x % 0x0200) + ((x >> 9) & 1) * 0x8000);
}
static float bits_to_float(uint16_t b) { uint32_t u = (uint32_t)b << 16; float f; memcpy(&f, &u, 4); return f; }

// A checkpoint of the config's shape whose weights are weight_bits(0 .. n_weights); header word `poke` (0: none)
// set to `value` after the config's (to write a damaged or impossible header).
static void write_ckpt(const char* path, const GPTConfig* c, size_t n_weights, int poke, int32_t value) {
    int32_t h[CKPT_HEADER_INTS] = {0};
    config_to_header(c, h);
    h[H_STEP] = 7; h[H_B] = 1; h[H_T] = 16; h[H_GRAD_ACCUM] = 1; h[H_WORLD] = 1; h[H_HAS_PARAMS] = 1;
    if (poke) h[poke] = value;
    uint16_t* w = (uint16_t*)xmalloc(n_weights * sizeof(uint16_t));
    for (size_t i = 0; i < n_weights; i++) w[i] = weight_bits(i);
    char zeros[64] = {0};
    CheckpointWriter cw;
    ckpt_begin(&cw, path, h, "bf16: test recipe");
    ckpt_section(&cw, CKPT_WEIGHTS);
    ckpt_write(&cw, w, n_weights * sizeof(uint16_t));
    ckpt_section(&cw, CKPT_DATA);
    ckpt_write(&cw, zeros, sizeof(zeros));
    ckpt_commit(&cw);
    free(w);
}

static char* read_all(const char* path, size_t* n) {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char* buf = (char*)xmalloc(*n + 1);
    size_t got = fread(buf, 1, *n, f);
    fclose(f);
    buf[got] = '\0';
    return buf;
}

// One tensor of a safetensors file: its entry in the JSON header and its bytes.
typedef struct {
    int found;
    char dtype[8];
    long shape[3];
    int ndim;
    const char* data;
    size_t bytes;
} StTensor;

static StTensor st_find(const char* file, size_t n, const char* name) {
    StTensor t;
    memset(&t, 0, sizeof(t));
    uint64_t hlen;
    memcpy(&hlen, file, 8);
    if (8 + hlen > n) return t;
    char key[160];
    snprintf(key, sizeof(key), "\"%s\":{", name);
    const char* p = strstr(file + 8, key);
    if (!p || p > file + 8 + hlen) return t;
    const char* d = strstr(p, "\"dtype\":\"");
    const char* s = strstr(p, "\"shape\":[");
    const char* o = strstr(p, "\"data_offsets\":[");
    if (!d || !s || !o) return t;
    sscanf(d + 9, "%7[^\"]", t.dtype);
    for (const char* q = s + 9; *q != ']' && t.ndim < 3;) {
        t.shape[t.ndim++] = strtol(q, (char**)&q, 10);
        if (*q == ',') q++;
    }
    unsigned long long a = 0, b = 0;
    sscanf(o + 16, "%llu,%llu", &a, &b);
    if (8 + hlen + b > n) return t;
    t.data = file + 8 + hlen + a;
    t.bytes = (size_t)(b - a);
    t.found = 1;
    return t;
}

// The number of tensors in a safetensors file's header (its entries other than __metadata__).
static int st_count(const char* file, size_t n) {
    uint64_t hlen;
    memcpy(&hlen, file, 8);
    if (8 + hlen > n) return -1;
    int count = 0;
    for (const char* p = file + 8; (p = strstr(p, "\"dtype\":\"")) && p < file + 8 + hlen; p++) count++;
    return count;
}

// Compares an exported tensor with the trainer's: element (r, c) of the export is trainer element
// src + (transpose ? c * rows + r : r * cols + c) of a rows x cols tensor (1-D: cols = 1).
static void check_tensor(const char* file, size_t n, const char* name, int bf16, size_t src, long rows, long cols,
                         int transpose) {
    StTensor t = st_find(file, n, name);
    long want0 = transpose ? cols : rows, want1 = transpose ? rows : cols;
    int shape_ok = t.found && (cols == 1 ? t.ndim == 1 && t.shape[0] == rows : t.ndim == 2 && t.shape[0] == want0 &&
                                                                                t.shape[1] == want1);
    CHECK(shape_ok && strcmp(t.dtype, bf16 ? "BF16" : "F32") == 0 && t.bytes == (size_t)(rows * cols) * (bf16 ? 2 : 4),
          "%s: found %d, dtype %s, shape [%ld %ld] (%d dims), %zu bytes", name, t.found, t.dtype, t.shape[0], t.shape[1],
          t.ndim, t.bytes);
    if (!shape_ok) return;
    long bad = 0;
    for (long i = 0; i < want0; i++)
        for (long j = 0; j < want1; j++) {
            long r = transpose ? j : i, c = transpose ? i : j;
            uint16_t want = weight_bits(src + (size_t)(r * cols + c));
            size_t k = (size_t)(i * want1 + j);
            if (bf16) {
                uint16_t got;
                memcpy(&got, t.data + 2 * k, 2);
                bad += got != want;
            } else {
                float got;
                memcpy(&got, t.data + 4 * k, 4);
                bad += got != bits_to_float(want);
            }
        }
    CHECK(bad == 0, "%s: %ld of %ld values differ from the checkpoint's", name, bad, rows * cols);
}

// Runs `python ARGS` from the repository root; its exit status, and its output (the last cap - 1 bytes) in log.
static int run_python(const char* args, char* log, size_t cap) {
    char cmd[1024], logpath[160];
    snprintf(logpath, sizeof(logpath), "%s/python.log", tmpdir);
    snprintf(cmd, sizeof(cmd), "%s %s > %s 2>&1", python, args, logpath);
    int rc = system(cmd);
    size_t n = 0;
    char* text = read_all(logpath, &n);
    snprintf(log, cap, "%s", text ? (n >= cap ? text + n - (cap - 1) : text) : "");
    free(text);
    remove(logpath);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static int run_export(const char* ckpt, const char* out, const char* extra, char* log, size_t cap) {
    char args[600];
    snprintf(args, sizeof(args), "scripts/export_hf.py %s %s %s", ckpt, out, extra);
    return run_python(args, log, cap);
}

// dev/eval/check_export.py on the exports (no trainer dump: loading, config, parameters, logits against its float64
// reference; 4 checks each), in one process (torch and transformers take seconds to import), where transformers is
// installed: check_later() notes an export, check_with_transformers() runs them all (GPT-2 in FP32, Llama untied in
// FP32 and BF16, Llama tied in BF16: the BF16 files loaded as FP32).
static char hf_pairs[4096];
static int hf_count;

static void check_later(const char* ckpt, const char* out) {
    size_t o = strlen(hf_pairs);
    snprintf(hf_pairs + o, sizeof(hf_pairs) - o, "%s%s %s", hf_count ? " --pair " : "", ckpt, out);
    hf_count++;
}

static void check_with_transformers(void) {
    if (!have_transformers || !hf_count) return;
    char args[4400], log[16384], want[64];
    snprintf(args, sizeof(args), "dev/eval/check_export.py %s --rows 2 --seq-len 32 --device cpu", hf_pairs);
    int rc = run_python(args, log, sizeof(log));
    snprintf(want, sizeof(want), "check_export: %d passed, 0 failed", 4 * hf_count);
    CHECK(rc == 0 && strstr(log, want), "check_export.py on %d exports exited %d (want '%s'):\n%s", hf_count, rc, want,
          log);
}

static void check_gpt2_export(const char* ckpt, int bf16) {
    char out[128], log[4096], path[200];
    snprintf(out, sizeof(out), "%s/hf_gpt2_%s", tmpdir, bf16 ? "bf16" : "f32");
    int rc = run_export(ckpt, out, bf16 ? "--dtype bfloat16" : "", log, sizeof(log));
    CHECK(rc == 0, "export_hf.py exited %d: %s", rc, log);
    if (rc) return;
    snprintf(path, sizeof(path), "%s/model.safetensors", out);
    size_t n = 0;
    char* file = read_all(path, &n);
    CHECK(file != NULL && n > 8, "%s missing", path);
    if (!file) return;
    CHECK(st_count(file, n) == 2 + 12 * L + 2, "GPT-2 export: %d tensors, want %d", st_count(file, n), 2 + 12 * L + 2);
    check_tensor(file, n, "transformer.wte.weight", bf16, offsets[0], V, C, 0);   // the first V of VP rows
    check_tensor(file, n, "transformer.wpe.weight", bf16, offsets[1], MAXT, C, 0);
    for (int l = 0; l < L; l++) {
        char name[128];
        struct { const char* hf; int id; long rows, cols; int transpose; } m[] = {
            {"ln_1.weight", 2, C, 1, 0}, {"ln_1.bias", 3, C, 1, 0},
            {"attn.c_attn.weight", 4, 3 * C, C, 1}, {"attn.c_attn.bias", 5, 3 * C, 1, 0},
            {"attn.c_proj.weight", 6, C, C, 1}, {"attn.c_proj.bias", 7, C, 1, 0},
            {"ln_2.weight", 8, C, 1, 0}, {"ln_2.bias", 9, C, 1, 0},
            {"mlp.c_fc.weight", 10, 4 * C, C, 1}, {"mlp.c_fc.bias", 11, 4 * C, 1, 0},
            {"mlp.c_proj.weight", 12, C, 4 * C, 1}, {"mlp.c_proj.bias", 13, C, 1, 0},
        };
        for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
            snprintf(name, sizeof(name), "transformer.h.%d.%s", l, m[i].hf);
            size_t per_layer = sizes[m[i].id] / L;
            check_tensor(file, n, name, bf16, offsets[m[i].id] + l * per_layer, m[i].rows, m[i].cols, m[i].transpose);
        }
    }
    check_tensor(file, n, "transformer.ln_f.weight", bf16, offsets[14], C, 1, 0);
    check_tensor(file, n, "transformer.ln_f.bias", bf16, offsets[15], C, 1, 0);
    CHECK(st_find(file, n, "lm_head.weight").found == 0, "lm_head.weight is tied to wte and must not be stored");
    free(file);
    if (!bf16) check_later(ckpt, out);

    snprintf(path, sizeof(path), "%s/config.json", out);
    char* config = read_all(path, &n);
    CHECK(config && strstr(config, "\"n_layer\": 2") && strstr(config, "\"n_head\": 2") && strstr(config, "\"n_embd\": 16") &&
          strstr(config, "\"vocab_size\": 300") && strstr(config, "\"n_positions\": 32") &&
          strstr(config, "\"tie_word_embeddings\": true") && strstr(config, "\"gelu_new\"") &&
          strstr(config, "\"layer_norm_epsilon\": 1e-05"), "config.json: %s", config ? config : "(missing)");
    free(config);
}

// config.json holds each "key": value of want (json.dump's indent=2 spelling).
static void check_config(const char* config, const char* what, const char* const* want, int n) {
    for (int i = 0; i < n; i++)
        CHECK(config && strstr(config, want[i]), "%s config.json: no %s in %s", what, want[i], config ? config : "(missing)");
}

static void check_llama_export(const char* ckpt, int tied, int bf16, const char* theta, const char* eps) {
    char out[128], log[4096], path[200], what[64];
    snprintf(what, sizeof(what), "Llama %s, %s", tied ? "tied" : "untied", bf16 ? "bfloat16" : "float32");
    snprintf(out, sizeof(out), "%s/hf_llama_%s_%s", tmpdir, tied ? "tied" : "untied", bf16 ? "bf16" : "f32");
    int rc = run_export(ckpt, out, bf16 ? "--dtype bfloat16" : "", log, sizeof(log));
    CHECK(rc == 0 && strstr(log, "Llama with 2 layers, 4 heads (2 key/value heads), 128 channels, MLP 96"),
          "%s: export_hf.py exited %d: %s", what, rc, log);
    if (rc) return;
    snprintf(path, sizeof(path), "%s/model.safetensors", out);
    size_t n = 0;
    char* file = read_all(path, &n);
    CHECK(file != NULL && n > 8, "%s missing", path);
    if (!file) return;
    const int want_count = 1 + 9 * LL + 1 + !tied;
    CHECK(st_count(file, n) == want_count, "%s: %d tensors in the export, want %d", what, st_count(file, n), want_count);
    check_tensor(file, n, "model.embed_tokens.weight", bf16, offset_of("wte"), LV, LC, 0);   // the first V of Vp rows
    for (int l = 0; l < LL; l++) {
        const size_t qkv = offset_of("qkvw") + (size_t)l * LQKV * LC, fc = offset_of("fcw") + (size_t)l * 2 * LH * LC;
        struct { const char* hf; size_t src; long rows, cols; } m[] = {
            {"input_layernorm.weight", offset_of("ln1w") + (size_t)l * LC, LC, 1},
            {"self_attn.q_proj.weight", qkv, LNH * LHS, LC},                                  // the query heads' rows
            {"self_attn.k_proj.weight", qkv + (size_t)LNH * LHS * LC, LKVH * LHS, LC},         // then the key heads'
            {"self_attn.v_proj.weight", qkv + (size_t)(LNH + LKVH) * LHS * LC, LKVH * LHS, LC},   // then the value heads'
            {"self_attn.o_proj.weight", offset_of("attprojw") + (size_t)l * LC * LC, LC, LC},
            {"post_attention_layernorm.weight", offset_of("ln2w") + (size_t)l * LC, LC, 1},
            {"mlp.gate_proj.weight", fc, LH, LC},                                              // fcw rows [0, H)
            {"mlp.up_proj.weight", fc + (size_t)LH * LC, LH, LC},                              // fcw rows [H, 2H)
            {"mlp.down_proj.weight", offset_of("fcprojw") + (size_t)l * LC * LH, LC, LH},
        };
        for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
            char name[128];
            snprintf(name, sizeof(name), "model.layers.%d.%s", l, m[i].hf);
            check_tensor(file, n, name, bf16, m[i].src, m[i].rows, m[i].cols, 0);   // nn.Linear: (out, in), as ours
        }
    }
    check_tensor(file, n, "model.norm.weight", bf16, offset_of("lnfw"), LC, 1, 0);
    if (tied) CHECK(st_find(file, n, "lm_head.weight").found == 0, "%s: lm_head.weight is tied and must not be stored", what);
    else check_tensor(file, n, "lm_head.weight", bf16, offset_of("lm_head"), LV, LC, 0);   // the first V of Vp rows
    free(file);

    snprintf(path, sizeof(path), "%s/config.json", out);
    char* config = read_all(path, &n);
    char theta_kv[64], eps_kv[64];
    snprintf(theta_kv, sizeof(theta_kv), "\"rope_theta\": %s", theta);
    snprintf(eps_kv, sizeof(eps_kv), "\"rms_norm_eps\": %s", eps);
    const char* want[] = {
        "\"architectures\": [\n    \"LlamaForCausalLM\"\n  ]", "\"model_type\": \"llama\"", "\"vocab_size\": 250",
        "\"hidden_size\": 128", "\"intermediate_size\": 96", "\"num_hidden_layers\": 2", "\"num_attention_heads\": 4",
        "\"num_key_value_heads\": 2", "\"head_dim\": 32", "\"hidden_act\": \"silu\"", "\"max_position_embeddings\": 32",
        theta_kv, eps_kv, "\"rope_type\": \"default\"", "\"attention_bias\": false", "\"mlp_bias\": false",
        tied ? "\"tie_word_embeddings\": true" : "\"tie_word_embeddings\": false", "\"bos_token_id\": 50256",
        "\"eos_token_id\": 50256", bf16 ? "\"torch_dtype\": \"bfloat16\"" : "\"torch_dtype\": \"float32\"",
    };
    check_config(config, what, want, (int)(sizeof(want) / sizeof(want[0])));
    CHECK(config && !strstr(config, "n_embd") && !strstr(config, "gpt2"), "%s config.json has GPT-2 fields: %s", what,
          config ? config : "(missing)");
    free(config);
    if (!tied || bf16) check_later(ckpt, out);   // (one tied export: its two differ only in the file's dtype)
}

// export_hf.py on a checkpoint it must refuse: exit 1, one error line that says `why`.
static void check_refused(const char* ckpt, const char* why, const char* what) {
    char out[128], log[4096];
    snprintf(out, sizeof(out), "%s/hf_refused", tmpdir);
    int rc = run_export(ckpt, out, "", log, sizeof(log));
    const char* e = strstr(log, "error: ");
    CHECK(rc == 1 && e == log && strstr(log, why) && strchr(log, '\n') == log + strlen(log) - 1,
          "%s: exit %d, want 1 and one error line with '%s': %s", what, rc, why, log);
}

int main(void) {
    const char* candidates[] = {getenv("PYTHON"), "python3", "/usr/bin/python3"};
    for (int i = 0; i < 3 && !python[0]; i++) {
        if (!candidates[i] || !candidates[i][0]) continue;
        char cmd[512];
        snprintf(cmd, sizeof(cmd), "%s -c 'import numpy' > /dev/null 2>&1", candidates[i]);
        if (system(cmd) == 0) snprintf(python, sizeof(python), "%s", candidates[i]);
    }
    if (!python[0] || access("scripts/export_hf.py", R_OK) != 0) {
        test_skip("test_export", !python[0] ? "no python3 with numpy here (pip install numpy)"
                                            : "scripts/export_hf.py not found (run from the repository root)");
        return test_summary("test_export");
    }
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_export_XXXXXX");
    if (!mkdtemp(tmpdir)) { printf("FAIL: mkdtemp\n"); return 1; }
    {
        char cmd[512];
        snprintf(cmd, sizeof(cmd), "%s -c 'import importlib.util as u, sys; sys.exit(not (u.find_spec(\"torch\") and "
                 "u.find_spec(\"transformers\")))' > /dev/null 2>&1", python);   // (found, not imported: seconds)
        have_transformers = access("dev/eval/check_export.py", R_OK) == 0 && system(cmd) == 0;
        if (!have_transformers)
            test_skip("test_export transformers", "no torch and transformers here: the exports are not loaded "
                      "(dev/eval/check_export.py; pip install torch transformers)");
    }
    char ckpt[128], cmd[512];

    // GPT-2
    layout_gpt2();
    GPTConfig g = config_gpt2(L, NH, C, V, VP, MAXT);
    check_layout_matches_models_h(&g, "GPT-2");
    snprintf(ckpt, sizeof(ckpt), "%s/ckpt_00000007.bin", tmpdir);
    write_ckpt(ckpt, &g, total, 0, 0);
    check_gpt2_export(ckpt, 0);
    check_gpt2_export(ckpt, 1);

    // Llama: untied (theta 10000, eps 1e-5: the defaults), and tied with other values
    char lckpt[2][128];
    for (int tied = 0; tied <= 1; tied++) {
        GPTConfig c = tied ? llama_config(1, 500000.0f, 1e-6f) : llama_config(0, 10000.0f, 1e-5f);
        layout_llama(tied);
        check_layout_matches_models_h(&c, tied ? "Llama, tied" : "Llama, untied");
        snprintf(lckpt[tied], sizeof(lckpt[tied]), "%s/ckpt_llama_%s.bin", tmpdir, tied ? "tied" : "untied");
        write_ckpt(lckpt[tied], &c, total, 0, 0);
        check_llama_export(lckpt[tied], tied, 0, tied ? "500000.0" : "10000.0", tied ? "1e-06" : "1e-05");
        check_llama_export(lckpt[tied], tied, 1, tied ? "500000.0" : "10000.0", tied ? "1e-06" : "1e-05");
    }
    check_with_transformers();

    // a damaged weight: refused, with the section named
    FILE* f = fopen(ckpt, "r+b");
    fseek(f, 4 * CKPT_HEADER_INTS + 40 + 1000, SEEK_SET);
    fputc(0x55, f);
    fclose(f);
    check_refused(ckpt, "the weights section is corrupt", "damaged checkpoint");
    check_refused("/nonexistent/ckpt.bin", "cannot open checkpoint", "missing checkpoint");

    // Llama headers the export must refuse: an unknown family, an impossible shape, a size that is not the header's
    GPTConfig c = llama_config(0, 10000.0f, 1e-5f);
    layout_llama(0);
    write_ckpt(lckpt[0], &c, total, H_ARCH, 7);
    check_refused(lckpt[0], "unknown model family 7", "unknown architecture");
    write_ckpt(lckpt[0], &c, total, H_KV_HEADS, 3);
    check_refused(lckpt[0], "impossible Llama model", "4 heads over 3 key/value heads");
    write_ckpt(lckpt[0], &c, total, H_TIED, 1);   // the weights still hold an lm_head
    check_refused(lckpt[0], "needs", "a tied header over untied weights");
    GPTConfig c2 = c;
    c2.arch = ARCH_GPT2;   // a GPT-2 header (H_ARCH 0) over Llama weights
    write_ckpt(lckpt[0], &c2, total, 0, 0);
    check_refused(lckpt[0], "a model of 2 layers and 128 channels needs", "a GPT-2 header over Llama weights");

    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", tmpdir);
    return test_summary("test_export");
}
