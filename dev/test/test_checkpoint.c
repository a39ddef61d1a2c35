// test_checkpoint.c: CPU tests of llmc/run/checkpoint.h: CRC32 against known values, a small checkpoint-like
// file written and read back section by section, every byte of it damaged in turn (each refused with
// the file and the right section named), every truncation refused, old-version and foreign files
// refused, atomic writes (a crash or a kill -9 while writing leaves the previous checkpoint intact),
// which checkpoint a diverged run names as the one to resume from, and that a version-2 file (written
// by the program before the recipe schedule section, dev/golden/ckpt_v2_synthetic.bin) still reads.
#include <signal.h>
#include "llmc/run/checkpoint.h"
#include "dev/test/testing.h"
#include "dev/test/check_coverage.h"

static char tmpdir[64];

// Section contents of the synthetic checkpoint: a few dozen bytes each, distinct patterns.
static const size_t SECTION_BYTES[CKPT_NUM_SECTIONS] = {0, 40, 96, 24, 16, 8, 12};
static const char* TEXT = "nvfp4: fprop.x=e2m1,1x16,e4m3,rne,h0; bf16 blocks: first 0, last 2";

static void fill_section(int s, uint8_t* buf) {
    for (size_t i = 0; i < SECTION_BYTES[s]; i++) buf[i] = (uint8_t)(s * 37 + i * 11 + 1);
}

static void write_synthetic(const char* path) {
    int32_t h[CKPT_HEADER_INTS] = {0};
    for (int i = CKPT_H_USER; i < CKPT_H_USER + 20; i++) h[i] = 1000 + i;
    CheckpointWriter w;
    ckpt_begin(&w, path, h, TEXT);
    for (int s = 1; s < CKPT_NUM_SECTIONS; s++) {
        uint8_t buf[128];
        fill_section(s, buf);
        ckpt_section(&w, (CkptSection)s);
        // in two pieces, as the trainer streams large sections in chunks
        ckpt_write(&w, buf, SECTION_BYTES[s] / 2);
        ckpt_write(&w, buf + SECTION_BYTES[s] / 2, SECTION_BYTES[s] - SECTION_BYTES[s] / 2);
    }
    ckpt_commit(&w);
}

static long file_size(const char* path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static uint8_t* read_all(const char* path, long* n) {
    *n = file_size(path);
    uint8_t* b = (uint8_t*)xmalloc((size_t)*n);
    FILE* f = fopen(path, "rb");
    if (!f || fread(b, 1, (size_t)*n, f) != (size_t)*n) *n = -1;
    if (f) fclose(f);
    return b;
}

static void write_all(const char* path, const uint8_t* b, long n) {
    FILE* f = fopen(path, "wb");
    if (f) { fwrite(b, 1, (size_t)n, f); fclose(f); }
}

// Opens and checks every section; returns 0 or -1 with the message in err.
static int open_and_verify(const char* path, char* err, size_t cap) {
    CheckpointReader r;
    int rc = ckpt_open(&r, path);
    if (rc == 0) rc = ckpt_verify(&r);
    snprintf(err, cap, "%s", rc ? r.err : "");
    if (rc) check_seen(r.err);   // (for the every-check scan at the end)
    ckpt_close(&r);
    return rc;
}

static void test_crc32(void) {
    CHECK(crc32_update(0, "123456789", 9) == 0xCBF43926u, "crc32('123456789') = %08x, want cbf43926",
          crc32_update(0, "123456789", 9));
    CHECK(crc32_update(0, "", 0) == 0, "crc32 of nothing is 0");
    // any split gives the same result, and unaligned starts work
    uint8_t buf[1000];
    for (int i = 0; i < 1000; i++) buf[i] = (uint8_t)(i * 7 + 3);
    uint32_t whole = crc32_update(0, buf + 1, 999);
    int same = 1;
    for (int cut = 0; cut <= 999; cut += 37) same &= crc32_update(crc32_update(0, buf + 1, cut), buf + 1 + cut, 999 - cut) == whole;
    CHECK(same, "crc32 over pieces differs from crc32 over the whole");
    // against the bitwise definition
    uint32_t c = 0xFFFFFFFFu;
    for (int i = 1; i < 1000; i++) {
        c ^= buf[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    CHECK(~c == whole, "crc32 slicing-by-8 %08x differs from the bitwise one %08x", whole, ~c);
}

static void test_roundtrip(const char* path) {
    write_synthetic(path);
    long want = (long)(sizeof(int32_t) * CKPT_HEADER_INTS + strlen(TEXT));
    for (int s = 1; s < CKPT_NUM_SECTIONS; s++) want += (long)SECTION_BYTES[s];
    CHECK(file_size(path) == want, "file is %ld bytes, want %ld", file_size(path), want);
    CheckpointReader r;
    CHECK(ckpt_open(&r, path) == 0, "open: %s", r.err);
    CHECK(strcmp(r.text, TEXT) == 0, "text '%s'", r.text);
    CHECK(r.header[CKPT_H_USER + 5] == 1000 + CKPT_H_USER + 5, "program's header field lost");
    for (int s = CKPT_NUM_SECTIONS - 1; s >= 1; s--) {   // any order: sections are found by the table
        uint8_t got[128], exp[128];
        fill_section(s, exp);
        CHECK(ckpt_read_section(&r, (CkptSection)s, got, SECTION_BYTES[s]) == 0, "section %d: %s", s, r.err);
        CHECK(memcmp(got, exp, SECTION_BYTES[s]) == 0, "section %s content differs", CKPT_SECTION_NAMES[s]);
    }
    uint8_t tmp[64];
    // a section read as another size: one byte less and one more refused, its own size taken (above)
    CHECK(ckpt_read_section(&r, CKPT_DATA, tmp, 23) != 0 && strstr(r.err, "the data position section holds 24 bytes where "
          "this program expects 23"), "a size mismatch is refused: %s", r.err);
    check_seen(r.err);
    CHECK(ckpt_read_section(&r, CKPT_DATA, tmp, 25) != 0 && strstr(r.err, "holds 24 bytes where this program expects 25"),
          "one byte more: %s", r.err);
    // a partly read section is still checked in full by ckpt_section_end
    CHECK(ckpt_section_begin(&r, CKPT_OPTIMIZER) == 0 && ckpt_read(&r, tmp, 10) == 0 && ckpt_section_end(&r) == 0,
          "partial read then end: %s", r.err);
    // reading past a section: its 16 bytes in one read taken, 17 refused
    CHECK(ckpt_section_begin(&r, CKPT_RNG) == 0 && ckpt_read(&r, tmp, 17) != 0 &&
          strstr(r.err, "the rng section holds 16 more bytes, not the 17 asked for"), "reading past a section: %s", r.err);
    check_seen(r.err);
    CHECK(ckpt_section_begin(&r, CKPT_RNG) == 0 && ckpt_read(&r, tmp, 16) == 0 && ckpt_section_end(&r) == 0,
          "the whole rng section in one read: %s", r.err);
    ckpt_close(&r);
}

// The section byte i of the file belongs to.
static int section_of(long i) {
    long end = (long)(sizeof(int32_t) * CKPT_HEADER_INTS + strlen(TEXT));
    if (i < end) return CKPT_HEADER;
    for (int s = 1; s < CKPT_NUM_SECTIONS; s++) {
        end += (long)SECTION_BYTES[s];
        if (i < end) return s;
    }
    return -1;
}

static void test_every_byte(const char* path) {
    write_synthetic(path);
    long n;
    uint8_t* orig = read_all(path, &n);
    CHECK(n > 0, "read back");
    const uint8_t flips[] = {0x01, 0x80, 0xFF};
    int refused = 0, named = 0, total = 0;
    int fd = open(path, O_RDWR);   // damage in place: rewriting whole files is slow on some filesystems
    CHECK(fd >= 0, "open %s", path);
    for (long i = 0; i < n; i++) {
        for (size_t k = 0; k < sizeof(flips); k++) {
            uint8_t bad = orig[i] ^ flips[k];
            if (pwrite(fd, &bad, 1, i) != 1) CHECK(0, "pwrite byte %ld", i);
            char err[4800], want[64];
            int rc = open_and_verify(path, err, sizeof(err));
            snprintf(want, sizeof(want), "the %s section", CKPT_SECTION_NAMES[section_of(i)]);
            total++;
            refused += rc != 0;
            named += rc != 0 && strstr(err, path) != NULL && strstr(err, want) != NULL;
            if (rc == 0 || !strstr(err, want) || !strstr(err, path))
                CHECK(0, "byte %ld ^ 0x%02x (%s): %s", i, flips[k], want, rc ? err : "accepted");
            if (pwrite(fd, &orig[i], 1, i) != 1) CHECK(0, "pwrite byte %ld", i);
        }
    }
    close(fd);
    CHECK(refused == total && named == total, "%d of %d damaged files refused, %d named file and section", refused,
          total, named);
    printf("every byte: %d damaged copies of a %ld-byte checkpoint, all refused with file and section named\n", total, n);
    char err[4800];
    CHECK(open_and_verify(path, err, sizeof(err)) == 0, "the undamaged file: %s", err);
    free(orig);
}

static void test_truncated_and_foreign(const char* path) {
    write_synthetic(path);
    long n;
    uint8_t* orig = read_all(path, &n);
    int ok = 1;
    for (long len = n - 1; len >= 0; len--) {
        if (truncate(path, len) != 0) CHECK(0, "truncate to %ld", len);
        char err[4800];
        int rc = open_and_verify(path, err, sizeof(err));
        if (rc == 0 || !strstr(err, path) || !(strstr(err, "truncated") || strstr(err, "section"))) {
            CHECK(0, "truncated to %ld bytes: %s", len, rc ? err : "accepted");
            ok = 0;
            break;
        }
    }
    CHECK(ok, "every truncation refused");
    // trailing bytes
    uint8_t* longer = (uint8_t*)xmalloc((size_t)n + 1);
    memcpy(longer, orig, (size_t)n);
    longer[n] = 0;
    write_all(path, longer, n + 1);
    char err[4800];
    CHECK(open_and_verify(path, err, sizeof(err)) != 0 && strstr(err, "sections end at byte"), "trailing byte: %s", err);
    free(longer);

    // a version-1 checkpoint (header ints then the recipe, no table, no checksum)
    int32_t h[CKPT_HEADER_INTS] = {0};
    h[0] = CKPT_MAGIC; h[1] = 1; h[2] = 6;
    uint8_t v1[sizeof(h) + 64] = {0};
    memcpy(v1, h, sizeof(h));
    write_all(path, v1, sizeof(v1));
    CHECK(open_and_verify(path, err, sizeof(err)) != 0 && strstr(err, "format version 1") && strstr(err, path),
          "old version: %s", err);
    // a data shard given as a checkpoint
    h[0] = 20240520;
    memcpy(v1, h, sizeof(h));
    write_all(path, v1, sizeof(v1));
    CHECK(open_and_verify(path, err, sizeof(err)) != 0 && strstr(err, "not a train_gpt_fp4 checkpoint"),
          "foreign file: %s", err);
    CHECK(open_and_verify(tmpdir, err, sizeof(err)) != 0 && strstr(err, "is a directory"), "directory: %s", err);
    char missing[128];
    snprintf(missing, sizeof(missing), "%s/nothing.bin", tmpdir);
    CHECK(open_and_verify(missing, err, sizeof(err)) != 0 && strstr(err, missing), "missing file: %s", err);
    char fifo[128];   // a FIFO named as a checkpoint: refused before it is opened (which would wait for a writer)
    snprintf(fifo, sizeof(fifo), "%s/fifo.bin", tmpdir);
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo %s", fifo);
    CHECK(open_and_verify(fifo, err, sizeof(err)) != 0 && strstr(err, "is not a regular file, so not a checkpoint"),
          "FIFO: %s", err);
    remove(fifo);
    free(orig);
    remove(path);
}

static void test_atomic(void) {
    char path[256], path2[256], latest[512];
    snprintf(path, sizeof(path), "%s/ckpt_00000010.bin", tmpdir);
    snprintf(path2, sizeof(path2), "%s/ckpt_00000020.bin", tmpdir);
    CHECK(!find_latest_checkpoint(tmpdir, latest, sizeof(latest)), "empty dir has no checkpoint");
    write_synthetic(path);
    // a crash while writing the next checkpoint: only the .tmp exists; the good one is untouched
    int32_t h[CKPT_HEADER_INTS] = {0};
    CheckpointWriter w;
    ckpt_begin(&w, path2, h, "half");
    ckpt_section(&w, CKPT_WEIGHTS);
    ckpt_write(&w, "half", 4);
    fclose(w.f);
    free(w.text);
    CHECK(find_latest_checkpoint(tmpdir, latest, sizeof(latest)) && strcmp(latest, path) == 0,
          "latest checkpoint should be %s, got %s", path, latest);
    char err[4800];
    CHECK(open_and_verify(path, err, sizeof(err)) == 0, "the committed checkpoint: %s", err);
    write_synthetic(path2);
    CHECK(find_latest_checkpoint(tmpdir, latest, sizeof(latest)) && strcmp(latest, path2) == 0, "newest checkpoint wins");
    {   // names of the same length that are not ckpt_ + 8 digits + .bin are passed by (strtol-style parsing took
        // ckpt_+0000099.bin for step 99, and --resume latest then asked for ckpt_00000099.bin)
        const char* odd[] = {"ckpt_+0000099.bin", "ckpt_ 0000099.bin", "ckpt_-0000099.bin", "ckpt_0000099x.bin",
                             "ckpt_00000099.bix"};
        char o[300];
        for (const char* name : odd) {
            snprintf(o, sizeof(o), "%s/%s", tmpdir, name);
            FILE* f = fopen(o, "wb");
            if (f) fclose(f);
        }
        CHECK(find_latest_checkpoint(tmpdir, latest, sizeof(latest)) && strcmp(latest, path2) == 0,
              "names other than ckpt_ + 8 digits + .bin are not checkpoints: latest %s, want %s", latest, path2);
        for (const char* name : odd) {
            snprintf(o, sizeof(o), "%s/%s", tmpdir, name);
            remove(o);
        }
    }
    char tmp[300];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path2);
    CHECK(access(tmp, F_OK) != 0, "commit leaves no .tmp file behind");

    // kill -9 in the middle of a write: a child streams a large section slowly; the parent kills it once
    // the temporary file has grown. The newest whole checkpoint stays the newest and reads back clean.
    char path3[256], tmp3[300];
    snprintf(path3, sizeof(path3), "%s/ckpt_00000030.bin", tmpdir);
    snprintf(tmp3, sizeof(tmp3), "%s.tmp", path3);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        CheckpointWriter cw;
        int32_t hh[CKPT_HEADER_INTS] = {0};
        ckpt_begin(&cw, path3, hh, "killed");
        ckpt_section(&cw, CKPT_WEIGHTS);
        static uint8_t chunk[1 << 16];
        for (int i = 0; i < 100000; i++) { ckpt_write(&cw, chunk, sizeof(chunk)); fflush(cw.f); usleep(1000); }
        ckpt_commit(&cw);
        _exit(0);
    }
    for (int i = 0; i < 2000 && file_size(tmp3) < (1 << 20); i++) usleep(1000);
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL && file_size(tmp3) > 0, "the writer was killed mid-write");
    CHECK(access(path3, F_OK) != 0, "a killed write leaves no file under the checkpoint's name");
    CHECK(find_latest_checkpoint(tmpdir, latest, sizeof(latest)) && strcmp(latest, path2) == 0 &&
          open_and_verify(latest, err, sizeof(err)) == 0, "after kill -9 the latest is still %s and whole", path2);
    remove(tmp3);
    remove(path); remove(path2); remove(tmp);
}

static void test_trail(void) {
    char a[256], b[256], msg[9000];
    snprintf(a, sizeof(a), "%s/ckpt_00000004.bin", tmpdir);
    snprintf(b, sizeof(b), "%s/ckpt_00000008.bin", tmpdir);
    write_synthetic(a);
    write_synthetic(b);
    CheckpointTrail t;
    // a fresh run: checkpoint a confirmed by the step after it, b written, then the loss is NaN
    ckpt_trail_init(&t, NULL);
    ckpt_trail_written(&t, a);
    ckpt_trail_confirm(&t);
    ckpt_trail_written(&t, b);
    ckpt_trail_diverged(&t, 1, msg, sizeof(msg));
    char moved[300];
    snprintf(moved, sizeof(moved), "%s.diverged", b);
    CHECK(strstr(msg, "newest good checkpoint is") && strstr(msg, a) && access(b, F_OK) != 0 && access(moved, F_OK) == 0,
          "diverged after b: %s", msg);
    char latest[512];
    CHECK(find_latest_checkpoint(tmpdir, latest, sizeof(latest)) && strcmp(latest, a) == 0,
          "--resume latest now finds %s, got %s", a, latest);
    remove(moved);
    // diverging before any checkpoint, and right after resuming from one (which is not renamed)
    ckpt_trail_init(&t, NULL);
    ckpt_trail_diverged(&t, 1, msg, sizeof(msg));
    CHECK(strstr(msg, "no good checkpoint"), "nothing written: %s", msg);
    ckpt_trail_init(&t, a);
    ckpt_trail_diverged(&t, 1, msg, sizeof(msg));
    CHECK(strstr(msg, "resumed from") && strstr(msg, "no good checkpoint") && access(a, F_OK) == 0, "resumed: %s", msg);
    ckpt_trail_init(&t, a);
    ckpt_trail_confirm(&t);
    ckpt_trail_diverged(&t, 1, msg, sizeof(msg));
    CHECK(strstr(msg, "newest good checkpoint is") && strstr(msg, a), "resumed and confirmed: %s", msg);
    remove(a);
}

// dev/golden/ckpt_v2_synthetic.bin was written by the version-2 llmc/run/checkpoint.h (commit 898f9f6) with this
// file's synthetic content for the five sections version 2 has (SECTION_BYTES without the last).
#define V2_FIXTURE "dev/golden/ckpt_v2_synthetic.bin"

static void test_version2(const char* path) {
    if (!test_fixture_ok("version-2 checkpoint", V2_FIXTURE)) return;
    CheckpointReader r;
    CHECK(ckpt_open(&r, V2_FIXTURE) == 0, "a version-2 checkpoint opens: %s", r.err);
    CHECK(r.header[CKPT_H_VERSION] == 2 && strcmp(r.text, TEXT) == 0, "version %d, text '%s'", r.header[CKPT_H_VERSION],
          r.text ? r.text : "");
    for (int s = 1; s < CKPT_SCHEDULE; s++) {
        uint8_t got[128], exp[128];
        fill_section(s, exp);
        CHECK(ckpt_read_section(&r, (CkptSection)s, got, SECTION_BYTES[s]) == 0 && memcmp(got, exp, SECTION_BYTES[s]) == 0,
              "version 2: section %s: %s", CKPT_SECTION_NAMES[s], r.err);
    }
    CHECK(r.bytes[CKPT_SCHEDULE] == 0 && ckpt_read_section(&r, CKPT_SCHEDULE, NULL, 0) == 0,
          "version 2 reads as an empty recipe schedule section: %llu bytes, %s",
          (unsigned long long)r.bytes[CKPT_SCHEDULE], r.err);
    CHECK(ckpt_verify(&r) == 0, "version 2 verifies: %s", r.err);
    ckpt_close(&r);
    // its checksums still guard it: a damaged byte of its last section is refused, naming the section
    long n;
    uint8_t* b = read_all(V2_FIXTURE, &n);
    b[n - 1] ^= 0x10;
    write_all(path, b, n);
    char err[4800];
    CHECK(open_and_verify(path, err, sizeof(err)) != 0 && strstr(err, "the spike detector section is corrupt"),
          "damaged version 2: %s", err);
    // a version this program does not know (the next one) is refused with the versions it reads
    b[n - 1] ^= 0x10;
    int32_t h[CKPT_HEADER_INTS];
    memcpy(h, b, sizeof(h));
    h[CKPT_H_VERSION] = CKPT_VERSION + 1;
    h[CKPT_H_HEADER_CRC] = (int32_t)ckpt_header_crc_(h, (const char*)b + sizeof(h), (size_t)h[CKPT_H_TEXT_BYTES]);
    memcpy(b, h, sizeof(h));
    write_all(path, b, n);
    CHECK(open_and_verify(path, err, sizeof(err)) != 0 && strstr(err, "reads versions 2 to 3"), "future version: %s", err);
    free(b);
    remove(path);
}

// The header text's length limit (CKPT_MAX_TEXT) on both sides, for the writer and the reader, and text lengths the
// reader must find impossible (negative, past the file).
static void write_text(const void* arg) {
    const char* const* a = (const char* const*)arg;   // {path, text}
    int32_t h[CKPT_HEADER_INTS] = {0};
    CheckpointWriter w;
    ckpt_begin(&w, a[0], h, a[1]);
    ckpt_commit(&w);
}

static void test_text_limits(void) {
    char path[128], err[4800];
    snprintf(path, sizeof(path), "%s/text.bin", tmpdir);
    char* text = (char*)xmalloc(CKPT_MAX_TEXT + 2);
    memset(text, 'a', CKPT_MAX_TEXT + 1);
    text[CKPT_MAX_TEXT] = '\0';   // 65536 characters: taken by the writer and the reader
    const char* args[2] = {path, text};
    CHECK(test_run_child(write_text, args, err, sizeof(err)) == 0, "a text of %d bytes written: %s", CKPT_MAX_TEXT, err);
    CheckpointReader r;
    CHECK(ckpt_open(&r, path) == 0 && strlen(r.text) == CKPT_MAX_TEXT && ckpt_verify(&r) == 0, "read back: %s", r.err);
    ckpt_close(&r);
    // the same file claiming one byte more of text (and one more byte there): refused as impossible, before the CRC
    long n;
    uint8_t* b = read_all(path, &n);
    uint8_t* grown = (uint8_t*)xmalloc((size_t)n + 1);
    memcpy(grown, b, (size_t)n);
    grown[n] = 'a';
    const int32_t lengths[] = {CKPT_MAX_TEXT + 1, -1, 2147483647};
    for (int i = 0; i < 3; i++) {
        memcpy(grown + CKPT_H_TEXT_BYTES * sizeof(int32_t), &lengths[i], sizeof(int32_t));
        write_all(path, grown, n + 1);
        char want[96];
        snprintf(want, sizeof(want), "the header section is corrupt (text length %d is impossible)", lengths[i]);
        CHECK(open_and_verify(path, err, sizeof(err)) != 0 && strstr(err, want), "text length %d: %s", lengths[i], err);
    }
    // a text length past the end of a file within the limit
    const int32_t past = 100;
    memcpy(b + CKPT_H_TEXT_BYTES * sizeof(int32_t), &past, sizeof(int32_t));
    write_all(path, b, (long)(CKPT_HEADER_INTS * sizeof(int32_t) + 99));
    CHECK(open_and_verify(path, err, sizeof(err)) != 0 && strstr(err, "text length 100 is impossible"), "past the end: %s",
          err);
    // the writer refuses 65537 characters
    text[CKPT_MAX_TEXT] = 'a';
    text[CKPT_MAX_TEXT + 1] = '\0';
    CHECK(test_run_child(write_text, args, err, sizeof(err)) == 1 &&
          strstr(err, "header text of 65537 bytes is over the 65536 allowed"), "a text of 65537 bytes: %s", err);
    free(b);
    free(grown);
    free(text);
    remove(path);
    char tmp[140];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    remove(tmp);
}

int main(void) {
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_checkpoint_XXXXXX");
    if (!mkdtemp(tmpdir)) { printf("FAIL: mkdtemp\n"); return 1; }
    char path[128];
    snprintf(path, sizeof(path), "%s/ckpt_00000001.bin", tmpdir);
    test_crc32();
    test_roundtrip(path);
    test_every_byte(path);
    test_truncated_and_foreign(path);
    test_atomic();
    test_trail();
    test_version2(path);
    test_text_limits();
    // every message of the reader was drawn above
    static const CheckSite sites[] = {{"llmc/run/checkpoint.h", "ckpt_open", 1}, {"llmc/run/checkpoint.h", "ckpt_read", 1},
                                      {"llmc/run/checkpoint.h", "ckpt_section_end", 1},
                                      {"llmc/run/checkpoint.h", "ckpt_read_section", 1}};
    static const CheckExempt exempt[] = {
        {"checkpoint '%s': cannot read its header", "fread of a file stat measured"},
        {"checkpoint '%s': read error in the %s section", "fread of a file stat measured"},
    };
    check_every_site("test_checkpoint", sites, sizeof(sites) / sizeof(sites[0]), exempt, sizeof(exempt) / sizeof(exempt[0]));
    remove(path);
    rmdir(tmpdir);
    return test_summary("test_checkpoint");
}
