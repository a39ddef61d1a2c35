// logger.h: the run's machine-readable log, one JSON object per line (out_dir/log.jsonl).
// defines: Logger, logger_open(), logger_line(), logger_close(), json_escape(), make_dirs()
// Line types: {"type":"config",...}, {"type":"train",...}, {"type":"val",...}, {"type":"sample",...},
// {"type":"checkpoint",...}, {"type":"event",...}. scripts/plot_loss.py reads them.
// Each line is flushed as written, so a crash loses at most the line being written.
#pragma once
#include <sys/stat.h>
#include <errno.h>
#include "common.h"

typedef struct {
    FILE* f;
} Logger;

// mkdir -p
static inline void make_dirs(const char* path) {
    char buf[4096];
    fail_if(strlen(path) >= sizeof(buf), "path too long: %s", path);
    strcpy(buf, path);
    for (char* p = buf + 1; ; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST) fail("cannot create directory '%s': %s", buf, strerror(errno));
            *p = c;
            if (c == '\0') break;
        }
    }
}

// append = 1 when resuming, so the log of the whole run stays in one file
static inline void logger_open(Logger* lg, const char* out_dir, int append) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/log.jsonl", out_dir);
    lg->f = fopen(path, append ? "a" : "w");
    fail_if(!lg->f, "cannot open log file '%s': %s", path, strerror(errno));
}

static inline void logger_line(Logger* lg, const char* fmt, ...) {
    if (!lg->f) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(lg->f, fmt, ap);
    va_end(ap);
    fputc('\n', lg->f);
    fflush(lg->f);
}

static inline void logger_close(Logger* lg) {
    if (lg->f) fclose(lg->f);
    lg->f = NULL;
}

// JSON string body for s (quotes not included), truncated to fit `cap`.
static inline const char* json_escape(const char* s, char* out, size_t cap) {
    size_t o = 0;
    for (const unsigned char* p = (const unsigned char*)s; *p && o + 7 < cap; p++) {
        if (*p == '"' || *p == '\\') { out[o++] = '\\'; out[o++] = (char)*p; }
        else if (*p == '\n') { out[o++] = '\\'; out[o++] = 'n'; }
        else if (*p < 0x20) o += snprintf(out + o, cap - o, "\\u%04x", *p);
        else out[o++] = (char)*p;
    }
    out[o] = '\0';
    return out;
}
