// test_dist_host.c: the CPU-side pieces of the data-parallel code (llmc/run/dist_host.h): rank and world
// size from the launcher's environment, ZeRO-1 shard ranges cover [0, n) exactly once for many sizes
// and world sizes, and the NCCL id file handoff (written to a temporary and renamed into place, polling
// read, timeout, refusal of a stale file).
#include <sys/inotify.h>
#include <sys/wait.h>
#include "llmc/run/dist_host.h"
#include "dev/test/testing.h"
#include "dev/test/check_coverage.h"

// Every element of [0, n) owned by exactly one rank, shards contiguous, aligned, padding bounded.
static void check_layout(size_t n, int world) {
    size_t padded = shard_padded_size(n, world);
    int ok = padded >= n && padded % ((size_t)world * DIST_SHARD_ALIGN) == 0
             && padded - n < (size_t)world * DIST_SHARD_ALIGN;
    size_t covered = 0, expect_begin = 0;
    for (int r = 0; r < world && ok; r++) {
        size_t begin, count;
        size_t S = shard_range(n, world, r, &begin, &count);
        ok = S * (size_t)world == padded && S % DIST_SHARD_ALIGN == 0 && begin == (size_t)r * S && count <= S;
        // real elements come first: a shard is partly real only if all later shards are all padding
        if (count > 0) ok = ok && begin == expect_begin;
        if (count < S) expect_begin = (size_t)-1;   // from here on, every count must be 0
        else expect_begin = begin + S;
        covered += count;
    }
    CHECK(ok && covered == n, "shard layout n=%zu world=%d: covered %zu (padded %zu)", n, world, covered, padded);
}

// For small n, mark each element to see it is owned exactly once.
static void check_marks(size_t n, int world) {
    unsigned char* owner_count = (unsigned char*)calloc(n ? n : 1, 1);
    for (int r = 0; r < world; r++) {
        size_t begin, count;
        shard_range(n, world, r, &begin, &count);
        for (size_t i = begin; i < begin + count; i++) owner_count[i]++;
    }
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += owner_count[i] != 1;
    CHECK(bad == 0, "n=%zu world=%d: %zu elements not owned exactly once", n, world, bad);
    free(owner_count);
}

static void test_shards(void) {
    const size_t sizes[] = {0, 1, 2, 3, 7, 127, 128, 129, 255, 256, 1000, 1023, 1024, 1025, 4096, 10007,
                            65536, 99991, 1000003, 124475904, 124475905, 354823168, 1557686400ull, 5000000000ull};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        for (int world = 1; world <= 64; world++) {
            check_layout(sizes[i], world);
            if (sizes[i] <= 100000 && (world <= 9 || world % 8 == 0)) check_marks(sizes[i], world);
        }
    // the shapes named in the docs: one shard per rank of exactly n / world when it divides
    size_t b, c;
    CHECK(shard_range(8 * 128 * 10, 8, 3, &b, &c) == 1280 && b == 3840 && c == 1280, "n=10240 w=8 r=3: b=%zu c=%zu", b, c);
    CHECK(shard_range(100, 4, 0, &b, &c) == 128 && b == 0 && c == 100, "n=100 w=4 r=0: b=%zu c=%zu", b, c);
    CHECK(shard_range(100, 4, 1, &b, &c) == 128 && b == 128 && c == 0, "n=100 w=4 r=1 (padding only): b=%zu c=%zu", b, c);
    CHECK(shard_range(0, 2, 1, &b, &c) == 0 && c == 0, "n=0: S must be 0");
}

// The id file appears whole: the writer writes a temporary beside it and renames it to the final name,
// so a reader polling for the name never opens a half-written file. Watched with inotify on the
// directory: the final name must arrive by a rename (IN_MOVED_TO) from a temporary that was written
// (IN_CLOSE_WRITE), and must never be created or written under its own name. (What is left on disk
// afterwards cannot tell: a file written in place leaves no temporary either.)
static void check_written_by_rename(const char* dir, const char* path, const void* id, size_t n) {
    int fd = inotify_init1(IN_NONBLOCK);
    if (fd < 0) { test_skip("id file written by rename", "inotify is not available"); return; }
    int wd = inotify_add_watch(fd, dir, IN_CREATE | IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO);
    if (wd < 0) { close(fd); test_skip("id file written by rename", "cannot watch the directory"); return; }
    id_file_write(path, id, n);
    const char* name = strrchr(path, '/') + 1;
    char tmp_written[256] = "", moved_from[256] = "";
    int final_touched = 0, moved_to_final = 0, tmp_write_before_move = 0;
    char buf[8192] __attribute__((aligned(__alignof__(struct inotify_event))));
    ssize_t len;
    while ((len = read(fd, buf, sizeof(buf))) > 0) {
        for (char* p = buf; p < buf + len;) {
            const struct inotify_event* ev = (const struct inotify_event*)p;
            const char* ev_name = ev->len ? ev->name : "";
            if (strcmp(ev_name, name) == 0) {
                if (ev->mask & (IN_CREATE | IN_MODIFY | IN_CLOSE_WRITE)) final_touched++;
                if (ev->mask & IN_MOVED_TO) { moved_to_final++; tmp_write_before_move = tmp_written[0] != 0; }
            } else {
                if (ev->mask & IN_CLOSE_WRITE) snprintf(tmp_written, sizeof(tmp_written), "%s", ev_name);
                if (ev->mask & IN_MOVED_FROM) snprintf(moved_from, sizeof(moved_from), "%s", ev_name);
            }
            p += sizeof(struct inotify_event) + ev->len;
        }
    }
    close(fd);
    CHECK(final_touched == 0, "id file: '%s' was created or written under its final name (%d events), not renamed "
          "into place; a reader can see it half written", name, final_touched);
    CHECK(moved_to_final == 1 && tmp_write_before_move && strcmp(tmp_written, moved_from) == 0,
          "id file: '%s' did not appear by renaming a written temporary (renames to it %d, temporary written '%s', "
          "renamed '%s')", name, moved_to_final, tmp_written, moved_from);
    unsigned char got[256];
    CHECK(n <= sizeof(got) && id_file_read(path, got, n, 1.0) == 1 && memcmp(got, id, n) == 0,
          "id file: the renamed file does not hold the id");
}

static void test_id_file(void) {
    char dir[] = "/tmp/test_dist_host.XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char path[512];
    snprintf(path, sizeof(path), "%s/nccl.id", dir);

    unsigned char id[128], got[128];
    for (int i = 0; i < 128; i++) id[i] = (unsigned char)(i * 37 + 11);

    // nothing there: the reader gives up after its timeout
    double t0 = id_file_now_s();
    CHECK(id_file_read(path, got, sizeof(got), 0.2) == 0, "read of a missing file must time out");
    double waited = id_file_now_s() - t0;
    CHECK(waited >= 0.19 && waited < 5.0, "timeout of 0.2 s took %.3f s", waited);

    // a writer that comes late: a child process writes after 300 ms while the parent polls
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        usleep(300 * 1000);
        id_file_write(path, id, sizeof(id));
        _exit(0);
    }
    memset(got, 0, sizeof(got));
    int ok = id_file_read(path, got, sizeof(got), 10.0);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "writer child failed");
    CHECK(ok == 1 && memcmp(got, id, sizeof(id)) == 0, "reader got the id the writer wrote");

    // no temporary left beside it: the writer renamed its file into place
    char tmp[600];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)pid);
    CHECK(access(tmp, F_OK) != 0, "temporary %s left behind", tmp);
    unlink(path);
    check_written_by_rename(dir, path, id, sizeof(id));

    // a second writer refuses an existing file (stale id); run it in a child since fail() exits
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        freopen("/dev/null", "w", stderr);
        id_file_write(path, id, sizeof(id));
        _exit(0);
    }
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) != 0, "writing over an existing id file must fail");

    unlink(path);
    rmdir(dir);
}


// The id file's checks, each message asserted (the test above only sees the exit status): an existing file, a path
// whose temporary name does not fit (4095 characters fit, 4096 do not), a directory that is not there, and a file of
// another size than the id (127 and 129 bytes for 128; 128 taken above).
typedef struct { const char* dir; int extra; } LongPath;
static void write_long(const void* arg) {
    const LongPath* a = (const LongPath*)arg;
    char pid[32], path[8192];
    const int digits = snprintf(pid, sizeof(pid), "%d", (int)getpid());
    const int len = 4095 - 5 - digits + a->extra;   // PATH.tmp.<pid>: 4095 characters (+ extra)
    snprintf(path, sizeof(path), "%s/", a->dir);
    for (int n = (int)strlen(path); n < len; n++) path[n] = 'x';
    path[len] = '\0';
    unsigned char id[4] = {1, 2, 3, 4};
    id_file_write(path, id, sizeof(id));
}
static void write_at(const void* arg) {
    unsigned char id[4] = {1, 2, 3, 4};
    id_file_write((const char*)arg, id, sizeof(id));
}
static void read_128(const void* arg) {
    unsigned char got[128];
    id_file_read((const char*)arg, got, sizeof(got), 0.1);
}

static void expect_id_error(const char* what, void (*fn)(const void*), const void* arg, const char* want) {
    char err[1024];
    const int rc = test_run_child(fn, arg, err, sizeof(err));
    CHECK(rc == 1 && strstr(err, want), "%s: exit %d '%s', want '%s'", what, rc, err, want);
    if (rc == 1 && strstr(err, want)) check_seen(err);
}

static void test_id_file_errors(void) {
    char dir[] = "/tmp/test_dist_host.XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char path[512];
    snprintf(path, sizeof(path), "%s/nccl.id", dir);
    unsigned char id[129] = {0};
    FILE* f = fopen(path, "wb");
    fwrite(id, 1, 4, f);
    fclose(f);
    expect_id_error("an id file already there", write_at, path, "already exists (left by an earlier run");
    const LongPath fits = {dir, 0}, over = {dir, 1};
    // (fits: the temporary's name fits the buffer, so the next step, creating it, is what fails: a name too long for
    // the file system)
    expect_id_error("a temporary name of 4095 characters", write_long, &fits, "cannot create NCCL id file");
    expect_id_error("a temporary name of 4096 characters", write_long, &over, "NCCL id file path too long");
    char missing[600];
    snprintf(missing, sizeof(missing), "%s/no/such/dir/nccl.id", dir);
    expect_id_error("a directory that is not there", write_at, missing, "cannot create NCCL id file");
    const size_t sizes[] = {127, 129};
    for (int i = 0; i < 2; i++) {
        f = fopen(path, "wb");
        fwrite(id, 1, sizes[i], f);
        fclose(f);
        char want[128];
        snprintf(want, sizeof(want), "has %zu bytes, expected 128: not written by this program?", sizes[i]);
        expect_id_error("an id file of another size", read_128, path, want);
    }
    unlink(path);
    rmdir(dir);
}

static void clear_launch_env(void) {
    const char* vars[] = {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "WORLD_SIZE", "RANK", "SLURM_STEP_NUM_TASKS",
                          "SLURM_NTASKS", "SLURM_PROCID", "PMI_SIZE", "PMI_RANK"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) unsetenv(vars[i]);
}

static void place_bad(const void* arg) {
    int w, r;
    (void)arg;
    dist_host_place(0, &w, &r);
}

static void test_place(void) {
    int w, r;
    clear_launch_env();
    CHECK(strcmp(dist_host_place(1, &w, &r), "") == 0 && w == 1 && r == 0, "no launcher: world 1");
    setenv("SLURM_NTASKS", "8", 1); setenv("SLURM_PROCID", "5", 1);
    CHECK(strcmp(dist_host_place(0, &w, &r), "SLURM_NTASKS") == 0 && w == 8 && r == 5, "srun: %d of %d", r, w);
    setenv("WORLD_SIZE", "4", 1); setenv("RANK", "3", 1);
    CHECK(strcmp(dist_host_place(0, &w, &r), "WORLD_SIZE") == 0 && w == 4 && r == 3, "WORLD_SIZE first: %d of %d", r, w);
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1); setenv("OMPI_COMM_WORLD_RANK", "1", 1);
    CHECK(dist_host_place(0, &w, &r) && w == 4, "without MPI, WORLD_SIZE wins over mpirun's variables");
    CHECK(strcmp(dist_host_place(1, &w, &r), "OMPI_COMM_WORLD_SIZE") == 0 && w == 2 && r == 1, "with MPI, mpirun first");
    clear_launch_env();
    setenv("WORLD_SIZE", "2", 1); setenv("RANK", "2", 1);
    char err[512];
    CHECK(test_run_child(place_bad, NULL, err, sizeof(err)) == 1 && strstr(err, "RANK=2 is not below WORLD_SIZE=2"),
          "rank out of range: %s", err);
    check_seen(err);
    setenv("RANK", "1", 1);   // the last rank taken
    CHECK(dist_host_place(0, &w, &r) && w == 2 && r == 1, "rank 1 of 2: %d of %d", r, w);
    setenv("RANK", "x", 1);
    CHECK(test_run_child(place_bad, NULL, err, sizeof(err)) == 1 && strstr(err, "RANK='x' is not"), "bad rank: %s", err);
    check_seen(err);
    unsetenv("RANK");
    CHECK(test_run_child(place_bad, NULL, err, sizeof(err)) == 1 && strstr(err, "WORLD_SIZE=2 is set but RANK is not: set "
          "both (and LOCAL_RANK, the GPU index on this node)"), "no rank: %s", err);
    check_seen(err);
    clear_launch_env();
}

// The launcher's numbers (dist_host_env_int_): decimal digits only, 0 to 2^30 on both sides; anything else stops with
// the variable named. WORLD_SIZE is read first, so its value alone decides.
static void place_world(const void* arg) {
    setenv("WORLD_SIZE", (const char*)arg, 1);
    setenv("RANK", "0", 1);
    int w, r;
    dist_host_place(0, &w, &r);
    printf("world %d\n", w);
}

static void test_env_numbers(void) {
    clear_launch_env();
    const struct { const char* text; int world; } good[] = {
        {"1", 1}, {"8", 8}, {"0008", 8},                  // decimal, leading zeros too (not octal)
        {"1073741824", 1 << 30},                          // 2^30: the largest taken
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        char out[512];
        char want[32];
        snprintf(want, sizeof(want), "world %d\n", good[i].world);
        const int rc = test_run_child_io(place_world, good[i].text, out, sizeof(out), 1);
        CHECK(rc == 0 && strcmp(out, want) == 0, "WORLD_SIZE='%s': exit %d, '%s', want '%s'", good[i].text, rc, out, want);
    }
    const char* const bad[] = {
        " 2", "2 ", "\t2", "+2", "-0", "-1", "0x2", "2x", "1e3", "2.0", "nan", "inf", "-",
        "1073741825",                                     // 2^30 + 1: the first refused
        "2147483648", "99999999999999999999",             // past int, past long (strtol: ERANGE)
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char err[512], want[128];
        snprintf(want, sizeof(want), "error: environment variable WORLD_SIZE='%s' is not a non-negative integer", bad[i]);
        const int rc = test_run_child(place_world, bad[i], err, sizeof(err));
        CHECK(rc == 1 && strncmp(err, want, strlen(want)) == 0, "WORLD_SIZE='%s': exit %d, '%s'", bad[i], rc, err);
        if (rc == 1) check_seen(err);
    }
    // WORLD_SIZE=0 parses, and is refused as a world size; the empty string counts as unset
    char err[512];
    CHECK(test_run_child(place_world, "0", err, sizeof(err)) == 1 && strstr(err, "WORLD_SIZE=0: the world size must be "
          "at least 1"), "WORLD_SIZE=0: '%s'", err);
    check_seen(err);
    CHECK(test_run_child_io(place_world, "", err, sizeof(err), 1) == 0 && strcmp(err, "world 1\n") == 0,
          "WORLD_SIZE='': '%s'", err);
    clear_launch_env();
}

int main(void) {
    test_place();
    test_env_numbers();
    test_shards();
    test_id_file();
    test_id_file_errors();
    // every check of the launcher's variables and the id file has drawn its message
    static const CheckSite sites[] = {{"llmc/run/dist_host.h", "dist_host_env_int_"},
                                      {"llmc/run/dist_host.h", "dist_host_env_source"},
                                      {"llmc/run/dist_host.h", "id_file_write"}, {"llmc/run/dist_host.h", "id_file_read"}};
    static const CheckExempt exempt[] = {
        {"cannot flush NCCL id file", "fflush and fsync of a file just created"},
        {"cannot rename '%s' to '%s'", "a rename within the directory the temporary was created in"},
    };
    check_every_site("test_dist_host", sites, sizeof(sites) / sizeof(sites[0]), exempt, sizeof(exempt) / sizeof(exempt[0]));
    return test_summary("test_dist_host");
}
