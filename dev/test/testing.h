// testing.h: the tiny test harness every test binary uses.
// defines: CHECK(cond, ...), CHECK_CLOSE(), test_skip(), test_summary()
// Each binary prints PASS/FAIL/SKIP lines and ends with one line
//   TESTS <name>: passed=P failed=F skipped=S
// which scripts/run_tests.sh sums into the closing "N passed, N failed, N skipped".
#pragma once
#include <stdio.h>
#include <math.h>

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

static inline int test_summary(const char* name) {
    printf("TESTS %s: passed=%d failed=%d skipped=%d\n", name, test_passed, test_failed, test_skipped);
    return test_failed ? 1 : 0;
}
