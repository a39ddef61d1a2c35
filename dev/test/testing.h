// testing.h: the tiny test harness every test binary uses.
// defines: CHECK(cond, ...), CHECK_CLOSE(), test_skip(), test_fixture_ok(), test_summary(), test_run_child(),
//          test_run_child_io()
// Each binary prints PASS/FAIL/SKIP lines and ends with one line
//   TESTS <name>: passed=P failed=F skipped=S
// which scripts/run_tests.sh sums into the closing "N passed, N failed, N skipped".
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/wait.h>

static int test_passed = 0, test_failed = 0, test_skipped = 0;

#define CHECK(cond, ...) do {                                             \
    if (cond) { test_passed++; }                                          \
    else { test_failed++; printf("FAIL %s:%d: ", __FILE__, __LINE__);     \
           printf(__VA_ARGS__); printf("\n"); }                           \
} while (0)

// |got - want| <= atol + rtol * |want|, NaN never passes.
#define CHECK_CLOSE(got, want, atol, rtol, what) do {                     \
    double g_ = (got), w_ = (want);                                       \
    CHECK(fabs(g_ - w_) <= (atol) + (rtol) * fabs(w_),                    \
          "%s: got %.9g want %.9g (atol %g rtol %g)", what, g_, w_,       \
          (double)(atol), (double)(rtol));                                \
} while (0)

static inline void test_skip(const char* what, const char* why) {
    test_skipped++;
    printf("SKIP %s: %s\n", what, why);
}

// A file committed to the repository that a test reads (path relative to its root): 1 if it is there. Missing, it is a
// failure where the test runs from the repository root (as `make test` runs it: the file was lost), and a skip
// anywhere else (the binary run by hand from another directory).
static inline int test_fixture_ok(const char* what, const char* path) {
    if (access(path, R_OK) == 0) return 1;
    if (access("llmc/base/common.h", R_OK) == 0) {
        test_failed++;
        printf("FAIL %s: the committed file %s is missing\n", what, path);
    } else {
        test_skip(what, "the committed files are not here (run from the repository root)");
    }
    return 0;
}

static inline int test_summary(const char* name) {
    printf("TESTS %s: passed=%d failed=%d skipped=%d\n", name, test_passed, test_failed, test_skipped);
    return test_failed ? 1 : 0;
}

// Runs fn(arg) in a child process (for code that is meant to exit, like fail(), or to exec a program).
// Returns the child's exit status, or minus the signal that ended it (a crash, a SIGFPE: -8), and what
// it wrote to stderr in err; its stdout goes to err too with with_stdout, else it is discarded.
static inline int test_run_child_io(void (*fn)(const void*), const void* arg, char* err, size_t cap,
                                    int with_stdout) {
    int fds[2];
    err[0] = '\0';
    if (pipe(fds) != 0) return -100;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        int devnull = with_stdout ? -1 : open("/dev/null", O_WRONLY);
        dup2(with_stdout ? fds[1] : devnull, 1);
        fn(arg);
        fflush(NULL);
        _exit(0);
    }
    close(fds[1]);
    size_t len = 0;
    ssize_t got;
    while (len + 1 < cap && (got = read(fds[0], err + len, cap - 1 - len)) > 0) len += (size_t)got;
    err[len] = '\0';
    // read the rest to its end and drop it: closing the pipe while the child still writes (a message longer than
    // cap) would kill it with SIGPIPE, and its exit status would depend on timing
    char rest[512];
    while (read(fds[0], rest, sizeof(rest)) > 0) {}
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}
static inline int test_run_child(void (*fn)(const void*), const void* arg, char* err, size_t cap) {
    return test_run_child_io(fn, arg, err, cap, 0);
}
