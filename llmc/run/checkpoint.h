// checkpoint.h: checkpoint files as a container of checksummed sections, written atomically.
// defines: crc32_update(), CkptSection, CKPT_SECTION_NAMES, CheckpointWriter, ckpt_begin(), ckpt_section(),
//          ckpt_write(), ckpt_commit(), CheckpointReader, ckpt_open(), ckpt_section_begin(), ckpt_read(),
//          ckpt_section_end(), ckpt_read_section(), ckpt_verify(), ckpt_close(), find_latest_checkpoint(),
//          CheckpointTrail, ckpt_trail_*(), CKPT_MAGIC, CKPT_VERSION, CKPT_HEADER_INTS
// Plain C: the CPU tests write small checkpoint-like files with it, damage them byte by byte, and check
// that every damaged byte is refused with the file and the section named (dev/test/test_checkpoint.c).
//
// Layout (version 3), little-endian:
//   header section:  int32 header[256], then header[CKPT_H_TEXT_BYTES] bytes of text (the recipe)
//   then the sections weights, optimizer state, data position, rng, spike detector, recipe schedule, in
//   that order, each as long as the header's section table says (a section may be empty).
// Versions: 1 had no sections and no checksums (refused with a message); 2 is version 3 without the
// recipe schedule section (its table entry was written as zeros): a version-2 file is read as one whose
// recipe schedule section is empty, so old checkpoints still load. A section added later goes at the
// end in the same way, with the next version number.
// The header holds the container's fields (magic, version, text length, the section table: bytes and
// CRC32 of each section, and the CRC32 of the header section itself) at fixed indices; the program's
// own fields (model shape, step, ...) use indices [CKPT_H_USER, CKPT_H_TABLE).
//
// Why CRC32 (the zlib/PNG polynomial): it detects every error burst up to 32 bits long, so any one
// damaged byte (or any run of up to four) is caught with certainty, not with high probability as a
// hash would; it is the checksum everybody can recompute (python3 -c 'import zlib; zlib.crc32(...)');
// and table-driven 8 bytes at a time it runs at a few GB/s, well above disk speed, so checksumming
// while writing costs little. It is not a defence against deliberate tampering, and is not meant to be.
//
// Atomic writes: a checkpoint is written to NAME.tmp, its header (with the checksums, known only at
// the end) rewritten in place, flushed to disk, and renamed over NAME only when complete, so a crash
// or kill -9 while writing (or a full disk) leaves the previous checkpoint intact and never a half
// written file under a checkpoint's name. A reader checks the header section first (magic, version,
// checksum, and that the file is exactly as long as its sections), then each section as it is read.
#pragma once
#include <dirent.h>
#include <unistd.h>
#include <errno.h>
#include <sys/stat.h>
#include "llmc/base/common.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint.h: checkpoints (and crc32_update's 8-byte steps) are little-endian"
#endif

#define CKPT_MAGIC 20261129
#define CKPT_VERSION 3               // written; read: CKPT_VERSION_MIN to CKPT_VERSION
#define CKPT_VERSION_MIN 2           // 1: no sections, no checksums (refused with a message)
#define CKPT_HEADER_INTS 256
#define CKPT_MAX_TEXT 65536

typedef enum {
    CKPT_HEADER, CKPT_WEIGHTS, CKPT_OPTIMIZER, CKPT_DATA, CKPT_RNG, CKPT_SPIKE,
    CKPT_SCHEDULE,   // version 3 on
    CKPT_NUM_SECTIONS
} CkptSection;
static const char* const CKPT_SECTION_NAMES[CKPT_NUM_SECTIONS] = {
    "header", "weights", "optimizer state", "data position", "rng", "spike detector", "recipe schedule"};

// The sections (the header included) a file of format version v has; later ones read as empty.
static inline int ckpt_sections_in_version(int v) { return v >= 3 ? CKPT_NUM_SECTIONS : CKPT_SCHEDULE; }

// Header indices the container owns. Section s >= 1 has bytes (lo, hi) and CRC32 at CKPT_H_TABLE + 3*(s-1).
enum {
    CKPT_H_MAGIC = 0, CKPT_H_VERSION = 1, CKPT_H_TEXT_BYTES = 2,
    CKPT_H_USER = 3,            // first index for the program's own fields
    CKPT_H_TABLE = 224,
    CKPT_H_HEADER_CRC = 255     // CRC32 of the header (this entry taken as 0) followed by the text
};

// ----------------------------------------------------------------------------------------------
// CRC32 (reflected polynomial 0xEDB88320, as zlib): crc32_update(0, "123456789", 9) == 0xCBF43926.
// Pass the previous result to continue over more bytes. Eight bytes per step ("slicing by 8").

static uint32_t crc32_table_[8][256];
static int crc32_table_ready_ = 0;

static inline void crc32_make_table_(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
        crc32_table_[0][i] = c;
    }
    for (int i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc32_table_[t][i] = (crc32_table_[t - 1][i] >> 8) ^ crc32_table_[0][crc32_table_[t - 1][i] & 0xFF];
    crc32_table_ready_ = 1;
}

static inline uint32_t crc32_update(uint32_t crc, const void* data, size_t n) {
    if (!crc32_table_ready_) crc32_make_table_();
    const uint32_t(*T)[256] = crc32_table_;
    const uint8_t* p = (const uint8_t*)data;
    crc = ~crc;
    for (; n >= 8; p += 8, n -= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
        lo ^= crc;
        crc = T[7][lo & 0xFF] ^ T[6][(lo >> 8) & 0xFF] ^ T[5][(lo >> 16) & 0xFF] ^ T[4][lo >> 24] ^
              T[3][hi & 0xFF] ^ T[2][(hi >> 8) & 0xFF] ^ T[1][(hi >> 16) & 0xFF] ^ T[0][hi >> 24];
    }
    for (; n > 0; p++, n--) crc = T[0][(crc ^ *p) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

// The header section's checksum: the header with its own checksum entry taken as 0, then the text.
static inline uint32_t ckpt_header_crc_(const int32_t* header, const char* text, size_t text_bytes) {
    int32_t h[CKPT_HEADER_INTS];
    memcpy(h, header, sizeof(h));
    h[CKPT_H_HEADER_CRC] = 0;
    return crc32_update(crc32_update(0, h, sizeof(h)), text, text_bytes);
}

// ----------------------------------------------------------------------------------------------
// Writing

typedef struct {
    FILE* f;
    char path[4200];
    char tmp_path[4208];
    int32_t header[CKPT_HEADER_INTS];
    char* text;
    int section;                          // the section being written
    uint64_t bytes[CKPT_NUM_SECTIONS];
    uint32_t crc[CKPT_NUM_SECTIONS];
} CheckpointWriter;

static inline void ckpt_abort_(CheckpointWriter* w, const char* what) {
    if (w->f) fclose(w->f);
    w->f = NULL;
    remove(w->tmp_path);
    free(w->text);
    w->text = NULL;
    fail("%s checkpoint '%s' failed (disk full?); the previous checkpoint is intact", what, w->tmp_path);
}

static inline void ckpt_fwrite_(CheckpointWriter* w, const void* data, size_t bytes) {
    if (bytes && fwrite(data, 1, bytes, w->f) != bytes) ckpt_abort_(w, "writing");
}

// header: the program's fields (indices CKPT_H_USER and up; the container fills in the rest).
// text: the header section's text (the recipe), NUL-terminated.
static inline void ckpt_begin(CheckpointWriter* w, const char* path, const int32_t* header, const char* text) {
    memset(w, 0, sizeof(*w));
    snprintf(w->path, sizeof(w->path), "%s", path);
    snprintf(w->tmp_path, sizeof(w->tmp_path), "%s.tmp", path);
    size_t text_bytes = strlen(text);
    fail_if(text_bytes > CKPT_MAX_TEXT, "checkpoint '%s': header text of %zu bytes is over the %d allowed",
            path, text_bytes, CKPT_MAX_TEXT);
    memcpy(w->header, header, sizeof(w->header));
    w->header[CKPT_H_MAGIC] = CKPT_MAGIC;
    w->header[CKPT_H_VERSION] = CKPT_VERSION;
    w->header[CKPT_H_TEXT_BYTES] = (int32_t)text_bytes;
    w->text = (char*)xmalloc(text_bytes + 1);
    memcpy(w->text, text, text_bytes + 1);
    w->f = fopen(w->tmp_path, "wb");
    fail_if(!w->f, "cannot write checkpoint '%s': %s", w->tmp_path, strerror(errno));
    // a placeholder for the header (rewritten by ckpt_commit, once the checksums are known), then the text
    ckpt_fwrite_(w, w->header, sizeof(w->header));
    ckpt_fwrite_(w, w->text, text_bytes);
    w->section = CKPT_HEADER;
}

// Starts section s; sections come in CkptSection order, and any left out are empty.
static inline void ckpt_section(CheckpointWriter* w, CkptSection s) {
    fail_if((int)s <= w->section || s >= CKPT_NUM_SECTIONS, "internal: checkpoint section %d after section %d",
            (int)s, w->section);
    w->section = (int)s;
}

static inline void ckpt_write(CheckpointWriter* w, const void* data, size_t bytes) {
    fail_if(w->section == CKPT_HEADER, "internal: ckpt_write before ckpt_section");
    ckpt_fwrite_(w, data, bytes);
    w->bytes[w->section] += bytes;
    w->crc[w->section] = crc32_update(w->crc[w->section], data, bytes);
}

// Fills in the section table and the header checksum, then makes the file appear under its name.
static inline void ckpt_commit(CheckpointWriter* w) {
    for (int s = 1; s < CKPT_NUM_SECTIONS; s++) {
        int32_t* e = &w->header[CKPT_H_TABLE + 3 * (s - 1)];
        e[0] = (int32_t)(uint32_t)(w->bytes[s] & 0xFFFFFFFFu);
        e[1] = (int32_t)(uint32_t)(w->bytes[s] >> 32);
        e[2] = (int32_t)w->crc[s];
    }
    w->header[CKPT_H_HEADER_CRC] = (int32_t)ckpt_header_crc_(w->header, w->text, strlen(w->text));
    if (fseek(w->f, 0, SEEK_SET) != 0) ckpt_abort_(w, "writing");
    ckpt_fwrite_(w, w->header, sizeof(w->header));
    int bad = fflush(w->f) != 0 || fsync(fileno(w->f)) != 0;
    bad |= fclose(w->f) != 0;
    w->f = NULL;
    if (bad) ckpt_abort_(w, "flushing");
    free(w->text);
    w->text = NULL;
    fail_if(rename(w->tmp_path, w->path) != 0, "cannot rename '%s' to '%s': %s", w->tmp_path, w->path, strerror(errno));
}

// ----------------------------------------------------------------------------------------------
// Reading. Every function returns 0, or -1 with r->err saying what is wrong with which file and which
// section, and what to do; the trainer passes r->err to fail().

typedef struct {
    FILE* f;
    char path[4200];
    int32_t header[CKPT_HEADER_INTS];
    char* text;                           // the header's text, NUL-terminated
    uint64_t offset[CKPT_NUM_SECTIONS], bytes[CKPT_NUM_SECTIONS];
    uint32_t crc[CKPT_NUM_SECTIONS];      // as the section table records them
    int section;                          // being read (-1: none)
    uint64_t left;                        // its bytes not yet read
    uint32_t running;                     // its CRC so far
    char err[4800];
} CheckpointReader;

static inline int ckpt_error_(CheckpointReader* r, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof(r->err), fmt, ap);
    va_end(ap);
    return -1;
}

static inline void ckpt_close(CheckpointReader* r) {
    if (r->f) fclose(r->f);
    free(r->text);
    r->f = NULL;
    r->text = NULL;
}

static inline int ckpt_open(CheckpointReader* r, const char* path) {
    memset(r, 0, sizeof(*r));
    r->section = -1;
    snprintf(r->path, sizeof(r->path), "%s", path);
    struct stat st;
    if (stat(path, &st) != 0)
        return ckpt_error_(r, "cannot open checkpoint '%s': %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode))
        return ckpt_error_(r, "'%s' is a directory, not a checkpoint file: give a ckpt_XXXXXXXX.bin file in it, "
                           "or --resume latest with --out-dir '%s'", path, path);
    if (!S_ISREG(st.st_mode)) return ckpt_error_(r, "'%s' is not a regular file, so not a checkpoint", path);
    const uint64_t size = (uint64_t)st.st_size, hbytes = sizeof(r->header);
    if (size < hbytes)
        return ckpt_error_(r, "checkpoint '%s' is %llu bytes, shorter than its %llu-byte header section: truncated, "
                           "or not a checkpoint", path, (unsigned long long)size, (unsigned long long)hbytes);
    r->f = fopen(path, "rb");
    if (!r->f) return ckpt_error_(r, "cannot open checkpoint '%s': %s", path, strerror(errno));
    int32_t* h = r->header;
    if (fread(h, 1, hbytes, r->f) != hbytes) return ckpt_error_(r, "checkpoint '%s': cannot read its header", path);
    if (h[CKPT_H_MAGIC] != CKPT_MAGIC)
        return ckpt_error_(r, "'%s' is not a train_gpt_fp4 checkpoint: bad magic %d in the header section (another "
                           "kind of file, or a damaged header)", path, h[CKPT_H_MAGIC]);
    // Version 1 had no checksums, so its header checksum entry is 0 (unused entries were written as 0).
    if (h[CKPT_H_VERSION] == 1 && h[CKPT_H_HEADER_CRC] == 0)
        return ckpt_error_(r, "checkpoint '%s' has format version 1 (no checksums), written by an older "
                           "train_gpt_fp4; this program reads versions %d to %d: resume it with the program that "
                           "wrote it, or start a new run", path, CKPT_VERSION_MIN, CKPT_VERSION);
    int32_t text_bytes = h[CKPT_H_TEXT_BYTES];
    if (text_bytes < 0 || text_bytes > CKPT_MAX_TEXT || hbytes + (uint64_t)text_bytes > size)
        return ckpt_error_(r, "checkpoint '%s': the header section is corrupt (text length %d is impossible); "
                           "resume from an earlier checkpoint", path, text_bytes);
    r->text = (char*)xmalloc((size_t)text_bytes + 1);
    if (fread(r->text, 1, (size_t)text_bytes, r->f) != (size_t)text_bytes)
        return ckpt_error_(r, "checkpoint '%s': cannot read its header text", path);
    r->text[text_bytes] = '\0';
    uint32_t want = (uint32_t)h[CKPT_H_HEADER_CRC], got = ckpt_header_crc_(h, r->text, (size_t)text_bytes);
    if (got != want)
        return ckpt_error_(r, "checkpoint '%s': the header section is corrupt (CRC32 %08x, recorded %08x): the file "
                           "was damaged after it was written; resume from an earlier checkpoint", path, got, want);
    if (h[CKPT_H_VERSION] < CKPT_VERSION_MIN || h[CKPT_H_VERSION] > CKPT_VERSION)
        return ckpt_error_(r, "checkpoint '%s' has format version %d; this program reads versions %d to %d: use "
                           "the program that wrote it", path, h[CKPT_H_VERSION], CKPT_VERSION_MIN, CKPT_VERSION);
    const int nsections = ckpt_sections_in_version(h[CKPT_H_VERSION]);
    uint64_t end = hbytes + (uint64_t)text_bytes;
    r->offset[CKPT_HEADER] = 0;
    r->bytes[CKPT_HEADER] = end;
    r->crc[CKPT_HEADER] = want;
    for (int s = 1; s < CKPT_NUM_SECTIONS; s++) {
        const int32_t* e = &h[CKPT_H_TABLE + 3 * (s - 1)];
        r->offset[s] = end;
        if (s >= nsections) continue;   // not in this version: empty (CRC32 of nothing is 0)
        r->bytes[s] = ((uint64_t)(uint32_t)e[1] << 32) | (uint32_t)e[0];
        r->crc[s] = (uint32_t)e[2];
        if (r->bytes[s] > size) r->bytes[s] = size + 1;   // keeps the sum below from wrapping
        end += r->bytes[s];
    }
    if (size < end) {
        int s = 1;
        while (s + 1 < CKPT_NUM_SECTIONS && r->offset[s] + r->bytes[s] <= size) s++;
        return ckpt_error_(r, "checkpoint '%s' is truncated: %llu bytes, but its sections need %llu (the %s section "
                           "is incomplete); resume from an earlier checkpoint", path, (unsigned long long)size,
                           (unsigned long long)end, CKPT_SECTION_NAMES[s]);
    }
    if (size > end)
        return ckpt_error_(r, "checkpoint '%s' is %llu bytes, but its sections end at byte %llu: not written by "
                           "this program, or damaged", path, (unsigned long long)size, (unsigned long long)end);
    return 0;
}

static inline int ckpt_section_begin(CheckpointReader* r, CkptSection s) {
    if (fseeko(r->f, (off_t)r->offset[s], SEEK_SET) != 0)
        return ckpt_error_(r, "checkpoint '%s': cannot seek to the %s section", r->path, CKPT_SECTION_NAMES[s]);
    r->section = (int)s;
    r->left = r->bytes[s];
    r->running = 0;
    return 0;
}

// The next n bytes of the section being read.
static inline int ckpt_read(CheckpointReader* r, void* dst, size_t n) {
    const char* name = r->section >= 0 ? CKPT_SECTION_NAMES[r->section] : "(none)";
    if (r->section < 0 || n > r->left)
        return ckpt_error_(r, "checkpoint '%s': the %s section holds %llu more bytes, not the %zu asked for",
                           r->path, name, (unsigned long long)r->left, n);
    if (n && fread(dst, 1, n, r->f) != n)
        return ckpt_error_(r, "checkpoint '%s': read error in the %s section (did the file change while it was "
                           "read?)", r->path, name);
    r->running = crc32_update(r->running, dst, n);
    r->left -= n;
    return 0;
}

// Reads (and checksums) whatever of the section is left, then compares its CRC with the recorded one.
static inline int ckpt_section_end(CheckpointReader* r) {
    char buf[1 << 16];
    while (r->left > 0) {
        size_t n = r->left < sizeof(buf) ? (size_t)r->left : sizeof(buf);
        if (ckpt_read(r, buf, n)) return -1;
    }
    int s = r->section;
    r->section = -1;
    if (s >= 0 && r->running != r->crc[s])
        return ckpt_error_(r, "checkpoint '%s': the %s section is corrupt (CRC32 %08x, recorded %08x): the file was "
                           "damaged after it was written; resume from an earlier checkpoint", r->path,
                           CKPT_SECTION_NAMES[s], r->running, r->crc[s]);
    return 0;
}

// A whole section of exactly n bytes into dst.
static inline int ckpt_read_section(CheckpointReader* r, CkptSection s, void* dst, size_t n) {
    if (r->bytes[s] != n)
        return ckpt_error_(r, "checkpoint '%s': the %s section holds %llu bytes where this program expects %zu "
                           "(written by an incompatible build?)", r->path, CKPT_SECTION_NAMES[s],
                           (unsigned long long)r->bytes[s], n);
    if (ckpt_section_begin(r, s) || ckpt_read(r, dst, n) || ckpt_section_end(r)) return -1;
    return 0;
}

// Checks every section's checksum (reads the whole file).
static inline int ckpt_verify(CheckpointReader* r) {
    for (int s = 1; s < CKPT_NUM_SECTIONS; s++)
        if (ckpt_section_begin(r, (CkptSection)s) || ckpt_section_end(r)) return -1;
    return 0;
}

// ----------------------------------------------------------------------------------------------
// Finding checkpoints

// The checkpoint with the highest step in dir (files named ckpt_XXXXXXXX.bin); 0 if none.
static inline int find_latest_checkpoint(const char* dir, char* out, size_t cap) {
    DIR* d = opendir(dir);
    if (!d) return 0;
    long best = -1;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {   // exactly ckpt_ + 8 digits + .bin (not ckpt_+0000009.bin, ckpt_ -000001.bin)
        const char* n = e->d_name;
        if (strlen(n) != strlen("ckpt_00000000.bin") || strncmp(n, "ckpt_", 5) != 0 || strcmp(n + 13, ".bin") != 0) continue;
        long step = 0;
        int digits = 1;
        for (int i = 5; i < 13; i++) {
            digits &= n[i] >= '0' && n[i] <= '9';
            step = step * 10 + (n[i] - '0');
        }
        if (digits && step > best) best = step;
    }
    closedir(d);
    if (best < 0) return 0;
    snprintf(out, cap, "%s/ckpt_%08ld.bin", dir, best);
    return 1;
}

// ----------------------------------------------------------------------------------------------
// Which checkpoints to trust after training diverges. The weights a checkpoint holds are known to be
// good only once a forward pass on them gave a finite loss, which happens in the step after it was
// written: until then it is "pending". When that loss is NaN or Inf, the pending checkpoint holds the
// weights that diverged; if this run wrote it, it is renamed to NAME.diverged so that --resume latest
// passes it by, and the message names the newest confirmed one.

typedef struct {
    char good[4200];      // newest confirmed checkpoint ("" if none)
    char pending[4200];   // written (or resumed from), not yet confirmed ("" if none)
    int pending_ours;     // 1: this run wrote the pending one (0: it is the checkpoint the run resumed from)
} CheckpointTrail;

static inline void ckpt_trail_init(CheckpointTrail* t, const char* resumed_from) {
    memset(t, 0, sizeof(*t));
    snprintf(t->pending, sizeof(t->pending), "%s", resumed_from ? resumed_from : "");
}

// A forward pass on the pending checkpoint's weights gave a finite loss.
static inline void ckpt_trail_confirm(CheckpointTrail* t) {
    if (!t->pending[0]) return;
    memcpy(t->good, t->pending, sizeof(t->good));
    t->pending[0] = '\0';
}

static inline void ckpt_trail_written(CheckpointTrail* t, const char* path) {
    snprintf(t->pending, sizeof(t->pending), "%s", path);
    t->pending_ours = 1;
}

// After a non-finite loss: renames the pending checkpoint if this run wrote it (and rename_ok) and says in
// msg which checkpoint to resume from.
static inline void ckpt_trail_diverged(CheckpointTrail* t, int rename_ok, char* msg, size_t cap) {
    size_t o = 0;
    msg[0] = '\0';
    if (t->pending[0] && t->pending_ours) {
        char moved[4300];
        snprintf(moved, sizeof(moved), "%s.diverged", t->pending);
        if (!rename_ok) {
            o += (size_t)snprintf(msg + o, cap - o, "checkpoint '%s' holds the weights that diverged; ", t->pending);
        } else if (rename(t->pending, moved) == 0) {
            o += (size_t)snprintf(msg + o, cap - o, "checkpoint '%s' holds the weights that diverged and was renamed "
                                  "to '%s'; ", t->pending, moved);
        } else {
            o += (size_t)snprintf(msg + o, cap - o, "checkpoint '%s' holds the weights that diverged (renaming it "
                                  "failed: %s); do not resume from it; ", t->pending, strerror(errno));
        }
    } else if (t->pending[0]) {
        o += (size_t)snprintf(msg + o, cap - o, "the checkpoint this run resumed from, '%s', holds weights that "
                              "diverge; ", t->pending);
    }
    if (o >= cap) return;
    if (t->good[0])
        snprintf(msg + o, cap - o, "the newest good checkpoint is '%s' (resume it with --resume and a lower --lr, "
                 "or --spike-z)", t->good);
    else
        snprintf(msg + o, cap - o, "this run has no good checkpoint to resume from (start again with a lower --lr, "
                 "or --spike-z)");
}
