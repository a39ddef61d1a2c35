// test_core.c: CPU tests of the trainer's host-side pieces: option parsing (llmc/args.h),
// learning-rate schedules (llmc/schedule.h), atomic checkpoint files (llmc/checkpoint.h), the JSON
// escaping of the log (llmc/logger.h) and BF16 rounding (llmc/stochastic_round.cuh).
#include "llmc/args.h"
#include "llmc/schedule.h"
#include "llmc/checkpoint.h"
#include "llmc/logger.h"
#include "llmc/stochastic_round.cuh"
#include "dev/test/testing.h"

typedef struct { int b; float lr; const char* model; int shuffle; const char* out; } Cfg;

static int parse(Cfg* c, int argc, const char** argv) {
    Option opts[] = {
        {"batch-size", 'b', OPT_INT, &c->b, NULL, "batch"},
        {"lr", 'l', OPT_FLOAT, &c->lr, NULL, "lr"},
        {"model", 'e', OPT_CHOICE, &c->model, "d6|d12", "model"},
        {"shuffle", 0, OPT_BOOL, &c->shuffle, NULL, "shuffle"},
        {"out-dir", 'o', OPT_STRING, &c->out, NULL, "out"},
    };
    return parse_options(opts, 5, argc, (char**)argv);
}

typedef struct { int argc; const char* argv[4]; const char* message; } BadArgs;

static void parse_bad(const void* arg) {
    const BadArgs* b = (const BadArgs*)arg;
    Cfg c = {1, 0.1f, "d6", 1, "x"};
    parse(&c, b->argc, (const char**)b->argv);
}

static void test_args(void) {
    Cfg c = {1, 0.1f, "d6", 1, "x"};
    const char* ok[] = {"prog", "--batch-size", "16", "-l", "3e-4", "--model=d12", "--shuffle", "off", "-o", "runs/a"};
    CHECK(parse(&c, 10, ok) == 0, "valid options rejected");
    CHECK(c.b == 16 && fabsf(c.lr - 3e-4f) < 1e-9f && strcmp(c.model, "d12") == 0 && c.shuffle == 0 &&
          strcmp(c.out, "runs/a") == 0, "parsed values wrong: b=%d lr=%g model=%s shuffle=%d out=%s",
          c.b, c.lr, c.model, c.shuffle, c.out);

    BadArgs bad[] = {
        {2, {"prog", "--batchsize"}, "unknown option '--batchsize'"},
        {3, {"prog", "-bz", "8"}, "unknown option '-bz'"},          // llm.c's "-bz 8" silently set -b
        {3, {"prog", "--batch-size", "8x"}, "--batch-size expects an integer, got '8x'"},
        {3, {"prog", "--batch-size", "99999999999"}, "expects an integer"},
        {2, {"prog", "--lr"}, "option --lr needs a value"},
        {3, {"prog", "--lr", "nan"}, "--lr expects a number"},
        {3, {"prog", "--model", "d7"}, "--model expects one of d6|d12, got 'd7'"},
        {3, {"prog", "--shuffle", "maybe"}, "--shuffle expects on or off"},
        {2, {"prog", "stray"}, "unexpected argument 'stray'"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char err[1024];
        int rc = test_run_child(parse_bad, &bad[i], err, sizeof(err));
        CHECK(rc == 1 && strstr(err, bad[i].message) != NULL, "case %zu: exit %d, stderr '%s', expected '%s'",
              i, rc, err, bad[i].message);
    }
}

static void test_schedules(void) {
    LRSchedule s = {"cosine", 1.0f, 10, 110, 0.1f, 0.2f};
    CHECK_CLOSE(lr_at_step(&s, 0), 0.1, 1e-6, 0, "warmup start");
    CHECK_CLOSE(lr_at_step(&s, 9), 1.0, 1e-6, 0, "warmup end");
    CHECK_CLOSE(lr_at_step(&s, 10), 1.0, 1e-6, 0, "cosine start");
    CHECK_CLOSE(lr_at_step(&s, 109), 0.1, 1e-6, 0, "cosine end");
    CHECK_CLOSE(lr_at_step(&s, 59), 0.1 + 0.9 * 0.5 * (1 + cos(M_PI * 49.0 / 99.0)), 1e-5, 0, "cosine middle");
    s.kind = "linear";
    CHECK_CLOSE(lr_at_step(&s, 109), 0.1, 1e-6, 0, "linear end");
    CHECK_CLOSE(lr_at_step(&s, 10), 1.0, 1e-6, 0, "linear start");
    s.kind = "constant";
    CHECK_CLOSE(lr_at_step(&s, 100), 1.0, 1e-6, 0, "constant");
    s.kind = "wsd";  // decay over the last 22 steps (ceil(0.2 * 110))
    CHECK_CLOSE(lr_at_step(&s, 87), 1.0, 1e-6, 0, "wsd stable");
    CHECK_CLOSE(lr_at_step(&s, 88), 1.0, 1e-6, 0, "wsd decay start");
    CHECK_CLOSE(lr_at_step(&s, 109), 0.1, 1e-6, 0, "wsd end");
    CHECK(lr_at_step(&s, 100) < 1.0f && lr_at_step(&s, 100) > 0.1f, "wsd decays");
    // a decay fraction of the steps that is not whole: ceil(0.25 * 110) = 28 steps, 82 .. 109, the
    // first at lr (progress 0), then 1/27 of the way down per step (27 steps would start at 83)
    s.decay_frac = 0.25f;
    CHECK_CLOSE(lr_at_step(&s, 81), 1.0, 1e-6, 0, "wsd 0.25 x 110: stable before step 82");
    CHECK_CLOSE(lr_at_step(&s, 82), 1.0, 1e-6, 0, "wsd 0.25 x 110: decay starts at step 82");
    CHECK_CLOSE(lr_at_step(&s, 83), 1.0 - 0.9 / 27, 1e-6, 0, "wsd 0.25 x 110: step 83 is 1/27 down");
    CHECK_CLOSE(lr_at_step(&s, 109), 0.1, 1e-6, 0, "wsd 0.25 x 110: end");
}

static void test_checkpoint_files(void) {
    char dir[] = "/tmp/test_core_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char path[256], path2[256], latest[512];
    snprintf(path, sizeof(path), "%s/ckpt_00000010.bin", dir);
    snprintf(path2, sizeof(path2), "%s/ckpt_00000020.bin", dir);
    CHECK(!find_latest_checkpoint(dir, latest, sizeof(latest)), "empty dir has no checkpoint");
    CheckpointWriter w;
    ckpt_begin(&w, path);
    ckpt_write(&w, "good", 4);
    ckpt_commit(&w);
    // a crash while writing the next checkpoint: only the .tmp exists; the good one is untouched
    ckpt_begin(&w, path2);
    ckpt_write(&w, "half", 4);
    fclose(w.f);
    CHECK(find_latest_checkpoint(dir, latest, sizeof(latest)) && strcmp(latest, path) == 0,
          "latest checkpoint should be %s, got %s", path, latest);
    FILE* f = fopen(path, "rb");
    char buf[8] = {0};
    CHECK(f && fread(buf, 1, 8, f) == 4 && memcmp(buf, "good", 4) == 0, "committed checkpoint content");
    if (f) fclose(f);
    ckpt_begin(&w, path2);
    ckpt_write(&w, "new!", 4);
    ckpt_commit(&w);
    CHECK(find_latest_checkpoint(dir, latest, sizeof(latest)) && strcmp(latest, path2) == 0, "newest checkpoint wins");
    char tmp[300];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path2);
    CHECK(access(tmp, F_OK) != 0, "commit leaves no .tmp file behind");
    remove(path); remove(path2); rmdir(dir);
}

static void test_json_escape(void) {
    char out[64];
    json_escape("a\"b\\c\nd\x01", out, sizeof(out));
    CHECK(strcmp(out, "a\\\"b\\\\c\\nd\\u0001") == 0, "json_escape gave '%s'", out);
}

static void test_bf16_rounding(void) {
    // RNE ties: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 -> even (1.0)
    CHECK(bf16_bits_rne(1.0f + 1.0f / 256) == 0x3F80, "RNE tie to even");
    CHECK(bf16_bits_rne(1.0f + 3.0f / 256) == 0x3F82, "RNE tie to even (up)");
    // SR: over many keys, the mean of the rounded value equals x (unbiased)
    float x = 1.0f + 1.0f / 512;  // a quarter of the way from 1 to 1 + 2^-7
    double sum = 0;
    const int n = 200000;
    uint64_t key = rng_key(1, 2, 3);
    for (int i = 0; i < n; i++) {
        uint32_t u = (uint32_t)bf16_bits_sr(x, rng_bits32(key, i)) << 16;
        float r;
        memcpy(&r, &u, 4);
        sum += r;
    }
    // each draw is 1 or 1+2^-7 with p = 1/4: sd of the mean = 2^-7 * sqrt(3/16) / sqrt(n) ~ 7.7e-6; 5 sd
    CHECK_CLOSE(sum / n, x, 4e-5, 0, "BF16 stochastic rounding is unbiased");
}

int main(void) {
    test_args();
    test_schedules();
    test_checkpoint_files();
    test_json_escape();
    test_bf16_rounding();
    return test_summary("test_core");
}
