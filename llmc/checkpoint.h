// checkpoint.h: atomic checkpoint files. A checkpoint is written to NAME.tmp, flushed to disk, and
// renamed over NAME only when complete, so a crash (or a full disk) while writing leaves the last
// good checkpoint intact and never a half-written file under a checkpoint's name.
// defines: CheckpointWriter, ckpt_begin(), ckpt_write(), ckpt_commit(), find_latest_checkpoint(),
//          CKPT_MAGIC, CKPT_VERSION
#pragma once
#include <dirent.h>
#include <unistd.h>
#include <errno.h>
#include "common.h"

#define CKPT_MAGIC 20261129
#define CKPT_VERSION 1

typedef struct {
    FILE* f;
    char path[4200];
    char tmp_path[4208];
} CheckpointWriter;

static inline void ckpt_begin(CheckpointWriter* w, const char* path) {
    snprintf(w->path, sizeof(w->path), "%s", path);
    snprintf(w->tmp_path, sizeof(w->tmp_path), "%s.tmp", path);
    w->f = fopen(w->tmp_path, "wb");
    fail_if(!w->f, "cannot write checkpoint '%s': %s", w->tmp_path, strerror(errno));
}

static inline void ckpt_write(CheckpointWriter* w, const void* data, size_t bytes) {
    if (bytes == 0) return;
    if (fwrite(data, 1, bytes, w->f) != bytes) {
        fclose(w->f);
        remove(w->tmp_path);
        fail("writing checkpoint '%s' failed (disk full?); the previous checkpoint is intact", w->tmp_path);
    }
}

static inline void ckpt_commit(CheckpointWriter* w) {
    int bad = fflush(w->f) != 0 || fsync(fileno(w->f)) != 0;
    bad |= fclose(w->f) != 0;
    if (bad) {
        remove(w->tmp_path);
        fail("flushing checkpoint '%s' failed (disk full?); the previous checkpoint is intact", w->tmp_path);
    }
    fail_if(rename(w->tmp_path, w->path) != 0, "cannot rename '%s' to '%s': %s", w->tmp_path, w->path, strerror(errno));
}

// The checkpoint with the highest step in dir (files named ckpt_XXXXXXXX.bin); 0 if none.
static inline int find_latest_checkpoint(const char* dir, char* out, size_t cap) {
    DIR* d = opendir(dir);
    if (!d) return 0;
    long best = -1;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        long step;
        char tail[8];
        if (sscanf(e->d_name, "ckpt_%ld.%4s", &step, tail) == 2 && strcmp(tail, "bin") == 0 &&
            strlen(e->d_name) == strlen("ckpt_00000000.bin") && step > best) best = step;
    }
    closedir(d);
    if (best < 0) return 0;
    snprintf(out, cap, "%s/ckpt_%08ld.bin", dir, best);
    return 1;
}
