// tokenizer.h: token id -> bytes, for printing generated samples (decoding only; encoding is Python's
// job, in dev/data/prepro.py).
// defines: Tokenizer, tokenizer_init(), tokenizer_decode(), tokenizer_token_length(),
//          tokenizer_print_safe(), tokenizer_decode_ids(), tokenizer_free(), TOKENIZER_MAGIC
//
// File format (llm.c's, so its gpt2_tokenizer.bin works too):
//   256 x uint32 header: [0] = 20240328 (magic), [1] = version (1 or 2), [2] = vocabulary size V,
//                        [3] = end-of-text token id (version 2; version 1 means GPT-2's 50256)
//   then for each token id 0..V-1: one uint8 length L (1..255), then L raw bytes.
// dev/data/prepro.py writes data/gpt2_tokenizer.bin.
//
// A missing file is not fatal: training does not need it. tokenizer_init() warns, and the decoding
// calls then return NULL / print "<id>" instead of text. A file that exists but is malformed fails.
#pragma once
#include <sys/stat.h>
#include "llmc/base/common.h"

#define TOKENIZER_MAGIC 20240328

typedef struct {
    int init_ok;          // 0: no file was loaded; decoding gives NULL
    uint32_t vocab_size;
    uint32_t eot_token;   // <|endoftext|>
    char** token_table;   // token_table[id]: the token's bytes, NUL-terminated (a token may hold a 0 byte)
    uint8_t* token_length;
} Tokenizer;

static inline void tokenizer_init(Tokenizer* tok, const char* path) {
    memset(tok, 0, sizeof(*tok));
    struct stat st;
    fail_if(stat(path, &st) == 0 && S_ISDIR(st.st_mode), "tokenizer file '%s' is a directory; give the tokenizer "
            "file itself (e.g. --tokenizer data/gpt2_tokenizer.bin)", path);
    FILE* f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "warning: tokenizer file '%s' not found; samples will print token ids instead of text "
                "(write it with bash dev/data/tinyshakespeare.sh or python dev/data/prepro.py)\n", path);
        return;
    }
    uint32_t header[256];
    fread_check(header, sizeof(uint32_t), 256, f, path);
    fail_if(header[0] != TOKENIZER_MAGIC,
            "tokenizer file '%s' has bad magic %u (want %u); rewrite it with python dev/data/prepro.py",
            path, header[0], (unsigned)TOKENIZER_MAGIC);
    fail_if(header[1] != 1 && header[1] != 2,
            "tokenizer file '%s' has version %u; this program reads versions 1 and 2; "
            "rewrite it with python dev/data/prepro.py", path, header[1]);
    fail_if(header[2] == 0 || header[2] > (1u << 24),
            "tokenizer file '%s' has an implausible vocabulary size %u", path, header[2]);
    tok->vocab_size = header[2];
    tok->eot_token = header[1] == 2 ? header[3] : 50256;
    fail_if(header[1] == 2 && tok->eot_token >= tok->vocab_size, "tokenizer file '%s': its end-of-text token %u is "
            "outside its %u tokens (corrupt file)", path, tok->eot_token, tok->vocab_size);
    tok->token_table = (char**)xmalloc(sizeof(char*) * tok->vocab_size);
    tok->token_length = (uint8_t*)xmalloc(tok->vocab_size);
    for (uint32_t i = 0; i < tok->vocab_size; i++) {
        uint8_t len;
        fread_check(&len, 1, 1, f, path);
        fail_if(len == 0, "tokenizer file '%s': token %u has length 0 (corrupt file)", path, i);
        tok->token_table[i] = (char*)xmalloc(len + 1);
        fread_check(tok->token_table[i], 1, len, f, path);
        tok->token_table[i][len] = '\0';
        tok->token_length[i] = len;
    }
    fclose(f);
    tok->init_ok = 1;
}

// The token's bytes (NUL-terminated), or NULL when no tokenizer is loaded or the id is out of range.
static inline const char* tokenizer_decode(const Tokenizer* tok, uint32_t id) {
    if (!tok->init_ok || id >= tok->vocab_size) return NULL;
    return tok->token_table[id];
}

// Bytes in the token (it may contain a 0 byte, so strlen can undercount); 0 when unavailable.
static inline int tokenizer_token_length(const Tokenizer* tok, uint32_t id) {
    if (!tok->init_ok || id >= tok->vocab_size) return 0;
    return tok->token_length[id];
}

// Prints a token so it cannot upset a terminal: control bytes other than newline and tab become \xNN;
// bytes >= 0x80 pass through (pieces of UTF-8 characters that the neighbouring tokens complete).
// Without a tokenizer, or for an unknown id, prints "<id>".
static inline void tokenizer_print_safe(FILE* out, const Tokenizer* tok, uint32_t id) {
    const char* s = tokenizer_decode(tok, id);
    if (s == NULL) { fprintf(out, "<%u>", id); return; }
    int n = tok->token_length[id];
    for (int i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n' || c == '\t' || (c >= 0x20 && c != 0x7F)) fputc(c, out);
        else fprintf(out, "\\x%02x", c);
    }
}

// Concatenates the bytes of n tokens into out (at most cap-1 bytes, then a NUL); returns the length
// the whole text needs (like snprintf), so a result >= cap means it was cut short. Unknown ids and a
// missing tokenizer give "<id>".
static inline size_t tokenizer_decode_ids(const Tokenizer* tok, const int* ids, int n, char* out, size_t cap) {
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        char idbuf[24];
        const char* s = tokenizer_decode(tok, (uint32_t)ids[i]);
        size_t m;
        if (s == NULL) { m = (size_t)snprintf(idbuf, sizeof(idbuf), "<%d>", ids[i]); s = idbuf; }
        else m = tok->token_length[ids[i]];
        for (size_t k = 0; k < m; k++, len++) if (len + 1 < cap) out[len] = s[k];
    }
    if (cap > 0) out[len < cap ? len : cap - 1] = '\0';
    return len;
}

static inline void tokenizer_free(Tokenizer* tok) {
    if (tok->token_table) {
        for (uint32_t i = 0; i < tok->vocab_size; i++) free(tok->token_table[i]);
    }
    free(tok->token_table);
    free(tok->token_length);
    memset(tok, 0, sizeof(*tok));
}
