// check_coverage.h: "every check has a case" for the CPU tests. A test records the error messages its passing cases
// drew (check_seen); check_every_site then reads the source of the functions that stop the program or refuse an input
// (CheckSite: each fail_if and fail, and for a helper that returns its message, each snprintf(err, ...),
// snprintf(why, ...), ckpt_error_(r, ...) and bad = "...") and fails for every check whose message none of them
// matches, naming it: a check added without a negative case fails its test.
// defines: CheckSite, CheckExempt, check_seen(), check_every_site()
// A message matches when it holds the format's own text in order (each conversion, %d, %s, %.*s ..., standing for any
// text). Formats with fewer than 8 characters of their own ("%s", "%s: %s") pass a helper's message on and are left
// to the helper's test. A message no case can draw is a CheckExempt with why; an exemption no check uses any more
// fails too, so the list cannot go stale. Run from the repository root (the sources are read by their paths).
#pragma once
#include "dev/test/testing.h"

typedef struct {
    const char* file;       // path from the repository root
    const char* function;   // a function defined there ("static ... name(...) {")
    int messages;           // 1: also the messages it returns (snprintf(err / why, ...), ckpt_error_, bad = "...")
} CheckSite;

typedef struct {
    const char* message;   // the start of its format
    const char* why;
} CheckExempt;

static char** check_seen_texts = NULL;
static int check_seen_count = 0, check_seen_cap = 0;

// Records what a passing case's failure printed (up to its first newline: the error line).
static void check_seen(const char* text) {
    if (check_seen_count == check_seen_cap) {
        check_seen_cap = check_seen_cap ? 2 * check_seen_cap : 256;
        check_seen_texts = (char**)realloc(check_seen_texts, check_seen_cap * sizeof(char*));
    }
    size_t n = strcspn(text, "\n");
    char* copy = (char*)malloc(n + 1);
    memcpy(copy, text, n);
    copy[n] = '\0';
    check_seen_texts[check_seen_count++] = copy;
}

static char* check_read_text_file(const char* path) {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char* text = (char*)malloc((size_t)n + 1);
    size_t got = fread(text, 1, (size_t)n, f);
    text[got] = '\0';
    fclose(f);
    return text;
}

// Past a string or character literal (p at its opening quote).
static const char* skip_literal(const char* p) {
    const char q = *p++;
    for (; *p && *p != q; p++)
        if (*p == '\\' && p[1]) p++;
    return *p ? p + 1 : p;
}
// Past white space and comments.
static const char* skip_space(const char* p) {
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
        if (p[0] == '/' && p[1] == '/') { while (*p && *p != '\n') p++; continue; }
        if (p[0] == '/' && p[1] == '*') { const char* e = strstr(p + 2, "*/"); p = e ? e + 2 : p + strlen(p); continue; }
        return p;
    }
}

// The body of the function `name` defined (at file scope, "static ...") in src, between its braces.
static int function_body(const char* src, const char* name, const char** begin, const char** end) {
    const size_t n = strlen(name);
    for (const char* p = strstr(src, name); p; p = strstr(p + 1, name)) {
        if (p == src || !(p[-1] == ' ' || p[-1] == '*') || p[n] != '(') continue;
        const char* line = p;
        while (line > src && line[-1] != '\n') line--;
        if (strncmp(line, "static ", 7) != 0) continue;
        const char* q = p + n;
        int depth = 0;
        for (; *q; q++) {
            if (*q == '(') depth++;
            else if (*q == ')' && --depth == 0) break;
        }
        if (!*q) return 0;
        q = skip_space(q + 1);
        if (*q != '{') continue;   // a declaration
        const char* b = q;
        depth = 0;
        for (; *q; q++) {
            if (*q == '"' || *q == '\'') { q = skip_literal(q) - 1; continue; }
            if (q[0] == '/' && (q[1] == '/' || q[1] == '*')) { q = skip_space(q) - 1; continue; }
            if (*q == '{') depth++;
            else if (*q == '}' && --depth == 0) { *begin = b; *end = q; return 1; }
        }
        return 0;
    }
    return 0;
}

// The message format of the call whose arguments start at p, after skip_args arguments (fail: 0, fail_if: its
// condition, snprintf: the buffer and its size): its adjacent literals joined and unescaped ("" when it is not a
// literal).
static void call_format(const char* p, int skip_args, char* out, size_t cap) {
    for (int a = 0; a < skip_args; a++) {
        int depth = 0;
        for (; *p; p++) {
            if (*p == '"' || *p == '\'') { p = skip_literal(p) - 1; continue; }
            if (*p == '(' || *p == '[' || *p == '{') depth++;
            else if (*p == ')' || *p == ']' || *p == '}') depth--;
            else if (*p == ',' && depth == 0) { p++; break; }
        }
    }
    size_t o = 0;
    for (p = skip_space(p); *p == '"'; p = skip_space(p)) {
        for (p++; *p && *p != '"'; p++) {
            char c = *p;
            if (c == '\\' && p[1]) { p++; c = *p == 'n' ? '\n' : *p == 't' ? '\t' : *p; }
            if (o + 1 < cap) out[o++] = c;
        }
        if (*p) p++;
    }
    out[o] = '\0';
}

// Whether msg holds fmt's own text in order, a conversion (%d, %s, %llu, %.*s ...) standing for any text. *own: how
// many characters of fmt are its own text.
static int format_matches(const char* fmt, const char* msg, int* own) {
    char piece[2048];
    const char* at = msg;
    int ok = 1;
    *own = 0;
    for (const char* f = fmt; *f;) {
        size_t n = 0;
        while (*f && !(f[0] == '%' && f[1] != '%')) {
            if (f[0] == '%') f++;   // "%%"
            if (n + 1 < sizeof(piece)) piece[n++] = *f;
            f++;
        }
        piece[n] = '\0';
        *own += (int)n;
        if (n) {
            const char* hit = ok ? strstr(at, piece) : NULL;
            if (!hit) ok = 0;
            else at = hit + n;
        }
        if (*f == '%') {
            for (f++; *f && strchr("-+ #0123456789.*hlLqjzt", *f); f++) {}
            if (*f) f++;
        }
    }
    return ok;
}

// Every check of the sites (see the top) must match a message check_seen recorded.
static void check_every_site(const char* what, const CheckSite* sites, size_t nsites, const CheckExempt* exempt,
                             size_t nexempt) {
    int checks = 0, delegated = 0;
    int* used = (int*)calloc(nexempt + 1, sizeof(int));
    for (size_t k = 0; k < nsites; k++) {
        const CheckSite* site = &sites[k];
        if (!test_fixture_ok("every check has a case", site->file)) { free(used); return; }
        char* src = check_read_text_file(site->file);
        const char *begin = NULL, *end = NULL;
        CHECK(src && function_body(src, site->function, &begin, &end), "%s: no function %s in %s (renamed? update its "
              "check sites)", what, site->function, site->file);
        if (!begin) { free(src); continue; }
        int calls = 0;
        for (const char* p = begin; p < end; p++) {
            if (*p == '"' || *p == '\'') { p = skip_literal(p) - 1; continue; }
            if (p[0] == '/' && (p[1] == '/' || p[1] == '*')) { p = skip_space(p) - 1; continue; }
            const int is_if = !strncmp(p, "fail_if(", 8), is_fail = !strncmp(p, "fail(", 5),
                      is_msg = site->messages && (!strncmp(p, "snprintf(err, ", 14) || !strncmp(p, "snprintf(why, ", 14) ||
                                                  !strncmp(p, "ckpt_error_(r, ", 15)),
                      is_bad = site->messages && !strncmp(p, "bad = \"", 7);
            if ((!is_if && !is_fail && !is_msg && !is_bad) || p[-1] == '_' || (p[-1] >= 'a' && p[-1] <= 'z')) continue;
            calls++;
            char fmt[4096];
            const int ckpt = is_msg && p[0] == 'c';   // ckpt_error_(r, fmt, ...): one argument before the format
            call_format(p + (is_if ? 8 : is_fail ? 5 : ckpt ? 12 : is_msg ? 9 : 6), is_if || ckpt ? 1 : is_msg ? 2 : 0, fmt,
                        sizeof(fmt));
            int own = 0, seen = 0, exempted = 0;
            for (int i = 0; i < check_seen_count && !seen; i++) seen = format_matches(fmt, check_seen_texts[i], &own);
            format_matches(fmt, "", &own);
            if (own < 8) { delegated++; continue; }   // "%s", "%s: %s": a helper's message
            for (size_t e = 0; e < nexempt; e++)
                if (!strncmp(fmt, exempt[e].message, strlen(exempt[e].message))) used[e] = exempted = 1;
            if (exempted) continue;
            checks++;
            CHECK(seen, "%s: %s (%s): no case draws the check \"%s\": add a case with a value it refuses (and the "
                  "nearest one it takes)", what, site->function, site->file, fmt);
        }
        CHECK(calls > 0, "%s: %s (%s): no fail_if, fail or message found (moved? update its check sites)",
              what, site->function, site->file);
        free(src);
    }
    for (size_t e = 0; e < nexempt; e++)
        CHECK(used[e], "%s: an exemption names \"%s\", which none of its check sites has any more: drop it", what,
              exempt[e].message);
    printf("every check has a case: %d checks drawn by %d error messages (%d helper messages, %zu exempt)\n", checks,
           check_seen_count, delegated, nexempt);
    free(used);
}
