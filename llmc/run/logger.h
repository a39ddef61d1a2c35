// logger.h: the run's machine-readable log, one JSON object per line (out_dir/log.jsonl).
// defines: Logger, logger_open(), logger_append(), logger_line(), logger_close(), json_escape(), make_dirs(),
//          log_line_after_checkpoint(), logger_resume()
// Line types: {"type":"config",...}, {"type":"train",...}, {"type":"val",...}, {"type":"eval",...}, {"type":"sample",...},
// {"type":"checkpoint",...}, {"type":"diag",...}, {"type":"event",...}, {"type":"resume",...}.
// scripts/plot_loss.py reads them. Each line is flushed as written, so a crash loses at most the line
// being written.
//
// Resuming. A run killed at step 57 after its checkpoint at step 50 has logged steps 51..57, and the
// resumed run logs them again. logger_resume drops the killed run's lines that come after the
// checkpoint (and a last line cut short by the kill) and marks the resume with one line,
//   {"type":"resume","step":50,"checkpoint":"out/ckpt_00000050.bin","dropped_lines":9}
// so the log reads as one run and every step appears once. Dropping rather than keeping both: the
// resumed run repeats the same steps bit for bit, so the dropped lines hold nothing the new ones do not,
// and every reader of the log (plots, tables, scripts) then works without knowing about resumes.
#pragma once
#include <sys/stat.h>
#include <errno.h>
#include <unistd.h>
#include "llmc/base/common.h"

typedef struct {
    FILE* f;
} Logger;

// mkdir -p; the path must end up a directory (not a file of that name)
static inline void make_dirs(const char* path) {
    char buf[4096];
    fail_if(!path[0], "an empty directory name");
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
    struct stat st;
    fail_if(stat(path, &st) != 0 || !S_ISDIR(st.st_mode), "'%s' exists and is not a directory", path);
}

static inline void logger_open(Logger* lg, const char* out_dir) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/log.jsonl", out_dir);
    lg->f = fopen(path, "w");
    fail_if(!lg->f, "cannot open log file '%s': %s", path, strerror(errno));
}

// Opens out_dir/name for appending (a log that collects lines from several runs, like eval.jsonl).
static inline void logger_append(Logger* lg, const char* out_dir, const char* name) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", out_dir, name);
    lg->f = fopen(path, "a");
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

// The integer value of a top-level "key": in a log line, or 0 if there is none. A key inside a string
// value (a sample's text, a path) is escaped (\"step\":), so only a quote after '{' or ',' counts.
static inline int log_int_field(const char* line, const char* key, long long* out) {
    char pat[64];
    snprintf(pat, sizeof(pat), "\"%s\":", key);
    for (const char* p = strstr(line, pat); p; p = strstr(p + 1, pat)) {
        if (p == line || (p[-1] != '{' && p[-1] != ',')) continue;
        char* end;
        *out = strtoll(p + strlen(pat), &end, 10);
        return end != p + strlen(pat);
    }
    return 0;
}

// 1 when a log line records something that happened after the checkpoint of step `step` was written, so
// that a run resumed from it writes the line again. Steps in the log count differently by type:
// train, diag, checkpoint and resume lines carry the number of updates done (after the checkpoint when
// above `step`); val, eval, sample and event lines the step about to run (from `step` on, as the resumed run
// starts by evaluating and sampling at `step`). Lines without a step (config) are kept.
static inline int log_line_after_checkpoint(const char* line, long long step) {
    long long s;
    if (!log_int_field(line, "step", &s)) return 0;
    const char* t = strstr(line, "\"type\":\"");
    if (!t) return 0;
    t += strlen("\"type\":\"");
    int counts_updates = strncmp(t, "train\"", 6) == 0 || strncmp(t, "diag\"", 5) == 0 ||
                         strncmp(t, "checkpoint\"", 11) == 0 || strncmp(t, "resume\"", 7) == 0;
    return counts_updates ? s > step : s >= step;
}

// Opens out_dir/log.jsonl for a run resumed from `checkpoint` at step `step`: keeps the lines up to that
// checkpoint, drops the rest (log_line_after_checkpoint) and a last line without its newline (cut short
// by a kill), and appends the resume line. The log is rewritten to a temporary file and renamed, so a
// crash here leaves the old log whole. Returns the number of lines dropped.
static inline long logger_resume(Logger* lg, const char* out_dir, long long step, const char* checkpoint) {
    char path[4096], tmp[4200];
    snprintf(path, sizeof(path), "%s/log.jsonl", out_dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    long dropped = 0;
    FILE* in = fopen(path, "r");
    if (in) {
        FILE* out = fopen(tmp, "w");
        fail_if(!out, "cannot write '%s': %s", tmp, strerror(errno));
        char* line = NULL;
        size_t cap = 0;
        ssize_t len;
        while ((len = getline(&line, &cap, in)) > 0) {
            int whole = line[len - 1] == '\n';
            if (!whole || log_line_after_checkpoint(line, step)) { dropped++; continue; }
            fail_if(fwrite(line, 1, (size_t)len, out) != (size_t)len, "writing '%s' failed (disk full?)", tmp);
        }
        free(line);
        fclose(in);
        fail_if(fflush(out) != 0 || fsync(fileno(out)) != 0 || fclose(out) != 0, "writing '%s' failed (disk full?)", tmp);
        fail_if(rename(tmp, path) != 0, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    }
    lg->f = fopen(path, "a");
    fail_if(!lg->f, "cannot open log file '%s': %s", path, strerror(errno));
    char esc[8192];
    logger_line(lg, "{\"type\":\"resume\",\"step\":%lld,\"checkpoint\":\"%s\",\"dropped_lines\":%ld}", step,
                json_escape(checkpoint, esc, sizeof(esc)), dropped);
    return dropped;
}
