// test_export.c: scripts/export_hf.py on the CPU. Writes a small checkpoint whose every BF16 weight is a
// distinct value (2 layers, 16 channels, vocabulary 300 padded to 384), exports it, and reads the
// safetensors file back here: every GPT-2 tensor must hold exactly the trainer's values, transposed for
// the Conv1D weights, the embedding cut to the vocabulary, in FP32 and with --dtype bfloat16. config.json
// must describe the model; a damaged checkpoint must be refused. Needs python3 with numpy (PYTHON=...,
// python3 or /usr/bin/python3); skips without it. The transformers side is dev/eval/check_export.py (GPU).
#include "llmc/run/checkpoint.h"
#include "llmc/model/gpt_config.h"
#include "llmc/run/ckpt_fields.h"
#include "dev/test/testing.h"

static char tmpdir[64];
static char python[256];

enum { L = 2, NH = 2, C = 16, V = 300, VP = 384, MAXT = 32 };

// The tensors in the trainer's order and their element counts (train_gpt_fp4.cu, param_sizes).
static const char* const NAMES[16] = {"wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                                      "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};
static size_t sizes[16], offsets[16], total;

static void layout(void) {
    const size_t s[16] = {(size_t)VP * C, (size_t)MAXT * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C,
                          L * C, L * C, L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C, C, C};
    total = 0;
    for (int i = 0; i < 16; i++) { sizes[i] = s[i]; offsets[i] = total; total += s[i]; }
}

// Weight i's BF16 bits: distinct for every i below 4096 (more than any one tensor here), all finite.
static uint16_t weight_bits(size_t i) { return (uint16_t)(0x3B80 + (i % 0x0800) + ((i / 0x0800) % 2) * 0x8000); }
static float bits_to_float(uint16_t b) { uint32_t u = (uint32_t)b << 16; float f; memcpy(&f, &u, 4); return f; }

static void write_ckpt(const char* path) {
    GPTConfig c = {MAXT, V, VP, L, NH, C};
    int32_t h[CKPT_HEADER_INTS] = {0};
    config_to_header(&c, h);
    h[H_STEP] = 7; h[H_B] = 1; h[H_T] = 16; h[H_GRAD_ACCUM] = 1; h[H_WORLD] = 1; h[H_HAS_PARAMS] = 1;
    uint16_t* w = (uint16_t*)xmalloc(total * sizeof(uint16_t));
    for (size_t i = 0; i < total; i++) w[i] = weight_bits(i);
    char zeros[64] = {0};
    CheckpointWriter cw;
    ckpt_begin(&cw, path, h, "bf16: test recipe");
    ckpt_section(&cw, CKPT_WEIGHTS);
    ckpt_write(&cw, w, total * sizeof(uint16_t));
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

static int run_export(const char* ckpt, const char* out, const char* extra, char* log, size_t cap) {
    char cmd[1024], logpath[160];
    snprintf(logpath, sizeof(logpath), "%s/export.log", tmpdir);
    snprintf(cmd, sizeof(cmd), "%s scripts/export_hf.py %s %s %s > %s 2>&1", python, ckpt, out, extra, logpath);
    int rc = system(cmd);
    size_t n = 0;
    char* text = read_all(logpath, &n);
    snprintf(log, cap, "%s", text ? text : "");
    free(text);
    remove(logpath);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void check_export(const char* ckpt, int bf16) {
    char out[128], log[4096], path[200];
    snprintf(out, sizeof(out), "%s/hf_%s", tmpdir, bf16 ? "bf16" : "f32");
    int rc = run_export(ckpt, out, bf16 ? "--dtype bfloat16" : "", log, sizeof(log));
    CHECK(rc == 0, "export_hf.py exited %d: %s", rc, log);
    if (rc) return;
    snprintf(path, sizeof(path), "%s/model.safetensors", out);
    size_t n = 0;
    char* file = read_all(path, &n);
    CHECK(file != NULL && n > 8, "%s missing", path);
    if (!file) return;
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

    snprintf(path, sizeof(path), "%s/config.json", out);
    char* config = read_all(path, &n);
    CHECK(config && strstr(config, "\"n_layer\": 2") && strstr(config, "\"n_head\": 2") && strstr(config, "\"n_embd\": 16") &&
          strstr(config, "\"vocab_size\": 300") && strstr(config, "\"n_positions\": 32") &&
          strstr(config, "\"tie_word_embeddings\": true") && strstr(config, "\"gelu_new\"") &&
          strstr(config, "\"layer_norm_epsilon\": 1e-05"), "config.json: %s", config ? config : "(missing)");
    free(config);
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
    layout();
    char ckpt[128], cmd[512], log[4096];
    snprintf(ckpt, sizeof(ckpt), "%s/ckpt_00000007.bin", tmpdir);
    write_ckpt(ckpt);
    check_export(ckpt, 0);
    check_export(ckpt, 1);

    // a damaged weight: refused, with the section named
    FILE* f = fopen(ckpt, "r+b");
    fseek(f, 4 * CKPT_HEADER_INTS + 40 + 1000, SEEK_SET);
    fputc(0x55, f);
    fclose(f);
    char out[128];
    snprintf(out, sizeof(out), "%s/hf_damaged", tmpdir);
    int rc = run_export(ckpt, out, "", log, sizeof(log));
    CHECK(rc == 1 && strstr(log, "the weights section is corrupt"), "damaged checkpoint: exit %d, %s", rc, log);
    rc = run_export("/nonexistent/ckpt.bin", out, "", log, sizeof(log));
    CHECK(rc == 1 && strstr(log, "cannot open checkpoint"), "missing checkpoint: exit %d, %s", rc, log);

    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", tmpdir);
    return test_summary("test_export");
}
