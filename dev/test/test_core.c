// test_core.c: CPU tests of the trainer's host-side pieces: option parsing (llmc/run/args.h; every option type's
// values, the malformed and the out-of-range refused, each range limit on both sides),
// learning-rate schedules (llmc/run/schedule.h), batch arithmetic (llmc/run/batch.h), the log (llmc/run/logger.h: JSON escaping, the resumed log
// without repeated steps) and BF16 rounding (llmc/fp4/stochastic_round.h). Checkpoint files:
// test_checkpoint.c.
#include "llmc/run/args.h"
#include "llmc/run/schedule.h"
#include "llmc/run/logger.h"
#include "llmc/run/batch.h"
#include "llmc/fp4/stochastic_round.h"
#include "llmc/model/gpt_config.h"
#include "dev/test/testing.h"
#include "dev/test/check_coverage.h"

typedef struct { int b; float lr; const char* model; int shuffle; const char* out; int only; } Cfg;

static int parse(Cfg* c, int argc, const char** argv) {
    Option opts[] = {
        {"batch-size", 'b', OPT_INT, &c->b, NULL, "batch"},
        {"lr", 'l', OPT_FLOAT, &c->lr, NULL, "lr"},
        {"model", 'e', OPT_CHOICE, &c->model, "d6|d12", "model"},
        {"shuffle", 0, OPT_BOOL, &c->shuffle, NULL, "shuffle"},
        {"out-dir", 'o', OPT_STRING, &c->out, NULL, "out"},
        {"eval-only", 0, OPT_FLAG, &c->only, NULL, "a switch"},
    };
    return parse_options(opts, 6, argc, (char**)argv);
}

typedef struct { int argc; const char* argv[4]; const char* message; } BadArgs;

static void parse_bad(const void* arg) {
    const BadArgs* b = (const BadArgs*)arg;
    Cfg c = {1, 0.1f, "d6", 1, "x", 0};
    parse(&c, b->argc, (const char**)b->argv);
}

static void test_args(void) {
    Cfg c = {1, 0.1f, "d6", 1, "x", 0};
    const char* ok[] = {"prog", "--batch-size", "16", "-l", "3e-4", "--model=d12", "--shuffle", "off", "-o", "runs/a"};
    CHECK(parse(&c, 10, ok) == 0, "valid options rejected");
    CHECK(c.b == 16 && fabsf(c.lr - 3e-4f) < 1e-9f && strcmp(c.model, "d12") == 0 && c.shuffle == 0 &&
          strcmp(c.out, "runs/a") == 0, "parsed values wrong: b=%d lr=%g model=%s shuffle=%d out=%s",
          c.b, c.lr, c.model, c.shuffle, c.out);
    // a flag takes no value: the next argument is an option of its own
    const char* flag[] = {"prog", "--eval-only", "-b", "4"};
    CHECK(parse(&c, 4, flag) == 0 && c.only == 1 && c.b == 4, "--eval-only -b 4: only=%d b=%d", c.only, c.b);
    const char* flag_off[] = {"prog", "--eval-only=off"};
    CHECK(parse(&c, 2, flag_off) == 0 && c.only == 0, "--eval-only=off: only=%d", c.only);
    const char* dashes[] = {"prog", "--out-dir=--x", "--eval-only=on"};
    CHECK(parse(&c, 3, dashes) == 0 && !strcmp(c.out, "--x") && c.only == 1, "--out-dir=--x: out=%s only=%d", c.out, c.only);

    BadArgs bad[] = {
        {2, {"prog", "--batchsize"}, "unknown option '--batchsize'"},
        {3, {"prog", "-bz", "8"}, "unknown option '-bz'"},          // llm.c's "-bz 8" silently set -b
        {3, {"prog", "--batch-size", "8x"}, "--batch-size expects an integer, got '8x'"},
        {3, {"prog", "--batch-size", "99999999999"}, "--batch-size: 99999999999 is outside the range of an int"},
        {2, {"prog", "--lr"}, "option --lr needs a value"},
        {3, {"prog", "--lr", "nan"}, "--lr expects a number"},
        {3, {"prog", "--model", "d7"}, "--model expects one of d6|d12, got 'd7'"},
        {3, {"prog", "--shuffle", "maybe"}, "--shuffle expects on or off"},
        {2, {"prog", "stray"}, "unexpected argument 'stray'"},
        {2, {"prog", "--eval-only=maybe"}, "--eval-only expects on or off"},
        // a switch given a separate value; a value missing before the next option (--out-dir=--x below is taken)
        {3, {"prog", "--eval-only", "on"}, "unexpected argument 'on': --eval-only is a switch that takes no separate "
                                           "value (--eval-only turns it on, --eval-only=on sets it)"},
        {3, {"prog", "-o", "--eval-only"}, "option -o needs a value, but the next argument is the option '--eval-only' "
                                           "(a value that starts with -- is given as --out-dir=VALUE)"},
    };
    // parse_options_given: which options the command line gave, whatever their values (the default's own value too)
    {
        Option opts[] = {
            {"batch-size", 'b', OPT_INT, &c.b, NULL, "batch"},
            {"model", 'e', OPT_CHOICE, &c.model, "d6|d12", "model"},
            {"eval-only", 0, OPT_FLAG, &c.only, NULL, "a switch"},
        };
        unsigned char given[3] = {7, 7, 7};
        const char* args[] = {"prog", "-b", "1", "--eval-only=off"};
        CHECK(parse_options_given(opts, 3, 4, (char**)args, given) == 0 && given[0] == 1 && given[1] == 0 &&
              given[2] == 1, "given: %d %d %d, want 1 0 1", given[0], given[1], given[2]);
        CHECK(option_given(opts, 3, given, "eval-only") && !option_given(opts, 3, given, "model"),
              "option_given disagrees with the flags");
        const char* none[] = {"prog"};
        CHECK(parse_options_given(opts, 3, 1, (char**)none, given) == 0 && !given[0] && !given[1] && !given[2],
              "no options: given %d %d %d", given[0], given[1], given[2]);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char err[1024];
        int rc = test_run_child(parse_bad, &bad[i], err, sizeof(err));
        CHECK(rc == 1 && strstr(err, bad[i].message) != NULL, "case %zu: exit %d, stderr '%s', expected '%s'",
              i, rc, err, bad[i].message);
        if (rc == 1 && strstr(err, bad[i].message)) check_seen(err);
    }
}

// Numbers, as each numeric option type reads them (option_number_ok, then strtoll / strtof): decimal only, the
// whole text, inside the type's range; each range limit on both sides (the last value taken, the first refused).
typedef struct { const char* text; double want; } GoodNumber;
typedef struct { const char* text; const char* message; } BadNumber;

static void parse_one_bad(const void* arg) {
    const char* const* a = (const char* const*)arg;   // {option, value}: "--name value", or {"--name=value", NULL}
    const char* argv[3] = {"prog", a[0], a[1]};
    Cfg c = {1, 0.1f, "d6", 1, "x", 0};
    parse(&c, a[1] ? 3 : 2, argv);
}

// option (NULL: given as --lr=VALUE) and b->text must stop the parse with exit 1 and "error: ..." naming it
static void expect_bad_value(const char* option, const BadNumber* b) {
    char joined[128];
    snprintf(joined, sizeof(joined), "--lr=%s", b->text);
    const char* arg[2] = {option ? option : joined, option ? b->text : NULL};
    char err[1024];
    int rc = test_run_child(parse_one_bad, arg, err, sizeof(err));
    CHECK(rc == 1 && strstr(err, b->message) != NULL && strncmp(err, "error: ", 7) == 0,
          "%s '%s': exit %d, stderr '%s', want '%s'", option ? option : "--lr=", b->text, rc, err, b->message);
    if (rc == 1 && strstr(err, b->message)) check_seen(err);
}

static void test_numbers(void) {
    const GoodNumber good_int[] = {
        {"0", 0}, {"-0", 0}, {"+8", 8}, {"007", 7},                      // decimal, even with leading zeros (not octal)
        {"2147483647", 2147483647.0}, {"-2147483648", -2147483648.0},   // INT_MAX and INT_MIN: the last ones taken
    };
    for (size_t i = 0; i < sizeof(good_int) / sizeof(good_int[0]); i++) {
        Cfg c = {1, 0.1f, "d6", 1, "x", 0};
        const char* argv[3] = {"prog", "--batch-size", good_int[i].text};
        CHECK(parse(&c, 3, argv) == 0 && (double)c.b == good_int[i].want, "--batch-size '%s' gave %d, want %.0f",
              good_int[i].text, c.b, good_int[i].want);
    }
    const BadNumber bad_int[] = {
        {"", "--batch-size expects an integer, got ''"},
        {" 8", "expects an integer, got ' 8'"},       // strtoll skips leading spaces
        {"8 ", "expects an integer, got '8 '"},
        {"10abc", "expects an integer, got '10abc'"},
        {"0x10", "expects an integer, got '0x10'"},
        {"1e3", "expects an integer, got '1e3'"},
        {"1.5", "expects an integer, got '1.5'"},
        {"-", "expects an integer, got '-'"},
        {"+-1", "expects an integer, got '+-1'"},
        {"\xd9\xa1", "expects an integer"},             // a digit of another script
        {"2147483648", "--batch-size: 2147483648 is outside the range of an int (-2147483648 to 2147483647)"},
        {"-2147483649", "--batch-size: -2147483649 is outside the range of an int"},
        {"99999999999999999999999", "is outside the range of an int"},   // past long long too (strtoll: ERANGE)
    };
    for (size_t i = 0; i < sizeof(bad_int) / sizeof(bad_int[0]); i++) expect_bad_value("--batch-size", &bad_int[i]);

    const GoodNumber good_float[] = {
        {"3e-4", 3e-4f}, {".5", 0.5}, {"5.", 5.0}, {"-0", 0.0}, {"+2.5", 2.5}, {"1E3", 1000.0}, {"-.5e-2", -0.005f},
        {"0", 0.0}, {"0e999", 0.0},                                       // zero, whatever its exponent
        {"3.4028235e38", 3.4028234663852886e38},                          // FLT_MAX: the last one taken
        {"1.17549435e-38", 1.1754943508222875e-38},                       // FLT_MIN: the smallest normal float
        {"-1.17549435e-38", -1.1754943508222875e-38},
    };
    for (size_t i = 0; i < sizeof(good_float) / sizeof(good_float[0]); i++) {
        Cfg c = {1, 0.1f, "d6", 1, "x", 0};
        const char* argv[3] = {"prog", "--lr", good_float[i].text};
        CHECK(parse(&c, 3, argv) == 0 && c.lr == (float)good_float[i].want, "--lr '%s' gave %.9g, want %.9g",
              good_float[i].text, c.lr, (float)good_float[i].want);
    }
    const BadNumber bad_float[] = {
        {"", "--lr expects a number, got ''"},
        {" 1", "expects a number, got ' 1'"},          // strtof skips leading spaces
        {"1 ", "expects a number, got '1 '"},
        {"1e-3x", "expects a number, got '1e-3x'"},
        {"0x10", "expects a number, got '0x10'"},      // strtof reads hexadecimal: 16
        {"0x1p-3", "expects a number, got '0x1p-3'"},  // and hexadecimal floats: 0.125
        {"inf", "expects a number, got 'inf'"},
        {"-inf", "expects a number, got '-inf'"},
        {"infinity", "expects a number, got 'infinity'"},
        {"nan", "expects a number, got 'nan'"},
        {"nan(1)", "expects a number, got 'nan(1)'"},
        {".", "expects a number, got '.'"},
        {"e5", "expects a number, got 'e5'"},
        {"1e", "expects a number, got '1e'"},
        {"1e+", "expects a number, got '1e+'"},
        {"1,5", "expects a number, got '1,5'"},
        {"1.2.3", "expects a number, got '1.2.3'"},
        {"3.4028236e38", "--lr: 3.4028236e38 is outside the range of a float"},   // the first above FLT_MAX (inf)
        {"-1e39", "--lr: -1e39 is outside the range of a float"},
        {"1.1754942e-38", "--lr: 1.1754942e-38 is outside the range of a float"}, // the largest subnormal
        {"1e-45", "is outside the range of a float"},                             // the smallest subnormal
        {"1e-50", "is outside the range of a float"},                             // underflows to 0
    };
    for (size_t i = 0; i < sizeof(bad_float) / sizeof(bad_float[0]); i++) expect_bad_value("--lr", &bad_float[i]);
    // the same checks through --name=value and the one-letter aliases
    const BadNumber via[] = {{"1e-3x", "--lr expects a number, got '1e-3x'"}, {"3.4028236e38", "is outside the range"},
                             {"", "--lr expects a number, got ''"}};   // "--lr=": an empty value, not a missing one
    for (int i = 0; i < 3; i++) expect_bad_value(NULL, &via[i]);
    const BadNumber hex = {"0x10", "--lr expects a number, got '0x10'"}, garbage = {"10abc", "--batch-size expects an integer"};
    expect_bad_value("-l", &hex);
    expect_bad_value("-b", &garbage);

    // the words of the other types: exact, case and all
    const BadNumber bad_bool[] = {{"", "--shuffle expects on or off, got ''"}, {"ON", "expects on or off, got 'ON'"},
                                  {"2", "expects on or off, got '2'"}, {"on ", "expects on or off, got 'on '"}};
    for (size_t i = 0; i < sizeof(bad_bool) / sizeof(bad_bool[0]); i++) expect_bad_value("--shuffle", &bad_bool[i]);
    const BadNumber bad_choice[] = {{"", "--model expects one of d6|d12, got ''"}, {"d1", "got 'd1'"},
                                    {"d12 ", "got 'd12 '"}, {"D6", "got 'D6'"}, {"d6|d12", "got 'd6|d12'"}};
    for (size_t i = 0; i < sizeof(bad_choice) / sizeof(bad_choice[0]); i++) expect_bad_value("--model", &bad_choice[i]);
    const char* words[] = {"on", "1", "true", "yes", "off", "0", "false", "no"};
    for (int i = 0; i < 8; i++) {
        Cfg c = {1, 0.1f, "d6", 1, "x", 0};
        c.shuffle = i < 4 ? 0 : 1;
        const char* argv[3] = {"prog", "--shuffle", words[i]};
        CHECK(parse(&c, 3, argv) == 0 && c.shuffle == (i < 4), "--shuffle %s gave %d", words[i], c.shuffle);
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


// A run with a checkpoint at step 4, killed during step 7 (its last line cut short), resumed from step 4:
// the log keeps everything up to the checkpoint, and each later step is logged once, by the resumed run.
static void test_log_resume(void) {
    char dir[] = "/tmp/test_core_log_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char path[128];
    snprintf(path, sizeof(path), "%s/log.jsonl", dir);
    const char* killed_run[] = {
        "{\"type\":\"config\",\"model\":\"d6\",\"train_data\":\"a\\\"step\\\":1.bin\",\"resumed_at\":0}\n",
        "{\"type\":\"val\",\"step\":0,\"tokens\":0,\"val_loss\":10.9}\n",
        "{\"type\":\"train\",\"step\":1,\"loss\":10.9}\n",
        "{\"type\":\"train\",\"step\":2,\"loss\":10.1}\n",
        "{\"type\":\"event\",\"step\":2,\"event\":\"skip\",\"why\":\"spike\"}\n",
        "{\"type\":\"train\",\"step\":3,\"loss\":9.5}\n",
        "{\"type\":\"train\",\"step\":4,\"loss\":9.0}\n",
        "{\"type\":\"diag\",\"step\":4,\"layer\":0}\n",
        "{\"type\":\"checkpoint\",\"step\":4,\"path\":\"x/ckpt_00000004.bin\"}\n",
        "{\"type\":\"val\",\"step\":4,\"tokens\":4,\"val_loss\":9.1}\n",           // repeated by the resumed run
        "{\"type\":\"sample\",\"step\":4,\"text\":\"the \\\"step\\\":1 of it\"}\n",   // repeated
        "{\"type\":\"train\",\"step\":5,\"loss\":8.7}\n",                        // repeated
        "{\"type\":\"event\",\"step\":5,\"event\":\"skip\",\"why\":\"spike\"}\n", // repeated
        "{\"type\":\"train\",\"step\":6,\"loss\":8.5}\n",                        // repeated
        "{\"type\":\"diag\",\"step\":6,\"layer\":0}\n",                          // repeated
        "{\"type\":\"checkpoint\",\"step\":6,\"path\":\"x/ckpt_00000006.bin\"}\n", // after the resumed-from one
        "{\"type\":\"train\",\"step\":7,\"lo",                                  // cut short by kill -9
    };
    const int kept = 9, n = (int)(sizeof(killed_run) / sizeof(killed_run[0]));
    FILE* f = fopen(path, "w");
    for (int i = 0; i < n; i++) fputs(killed_run[i], f);
    fclose(f);
    Logger lg;
    long dropped = logger_resume(&lg, dir, 4, "x/ckpt_00000004.bin");
    logger_line(&lg, "{\"type\":\"train\",\"step\":5,\"loss\":8.7}");
    logger_close(&lg);
    CHECK(dropped == n - kept, "dropped %ld lines, want %d", dropped, n - kept);
    f = fopen(path, "r");
    char line[512];
    int i = 0, ok = 1;
    while (f && fgets(line, sizeof(line), f)) {
        if (i < kept) ok &= strcmp(line, killed_run[i]) == 0;
        else if (i == kept) ok &= strstr(line, "{\"type\":\"resume\",\"step\":4,\"checkpoint\":\"x/ckpt_00000004.bin\"") == line;
        else ok &= strcmp(line, "{\"type\":\"train\",\"step\":5,\"loss\":8.7}\n") == 0;
        i++;
    }
    if (f) fclose(f);
    CHECK(ok && i == kept + 2, "resumed log: %d lines, content %s", i, ok ? "ok" : "wrong");
    // resuming again from the same checkpoint keeps the resume line and drops the new step 5
    logger_resume(&lg, dir, 4, "x/ckpt_00000004.bin");
    logger_close(&lg);
    long long v = 0;
    CHECK(log_int_field("{\"type\":\"sample\",\"step\":3,\"text\":\"\\\"step\\\":9\"}", "step", &v) && v == 3,
          "step field %lld", v);
    CHECK(!log_int_field("{\"type\":\"config\",\"path\":\"a\\\"step\\\":9\"}", "step", &v), "escaped key is no field");
    // a fresh directory: nothing to keep, just the resume line
    char dir2[128];
    snprintf(dir2, sizeof(dir2), "%s/sub", dir);
    make_dirs(dir2);
    CHECK(logger_resume(&lg, dir2, 10, "elsewhere/ckpt_00000010.bin") == 0, "no log yet");
    logger_close(&lg);
    char p2[160];
    snprintf(p2, sizeof(p2), "%s/log.jsonl", dir2);
    remove(p2); rmdir(dir2); remove(path); rmdir(dir);
}


static void test_batch_plan(void) {
    BatchPlan p;
    char err[512];
    CHECK(batch_plan(64, 1024, 1, 0, &p, err, sizeof(err)) == 0 && p.grad_accum == 1 && p.step_tokens == 65536,
          "one micro-batch: %s", err);
    CHECK(batch_plan(16, 1024, 8, 524288, &p, err, sizeof(err)) == 0 && p.grad_accum == 4 && p.micro_tokens == 16384,
          "8 processes, 4 accumulation steps: %s", err);
    // a negative total once passed the multiple check (-65536 % 65536 == 0) and trained on nothing
    CHECK(batch_plan(64, 1024, 1, -65536, &p, err, sizeof(err)) != 0 && strstr(err, "--total-batch -65536 is negative"),
          "negative total: %s", err);
    // B*T = 2^32 wrapped to 0 in int arithmetic, and the modulo by it raised SIGFPE
    CHECK(batch_plan(4194304, 1024, 1, 1048576, &p, err, sizeof(err)) != 0 &&
          strstr(err, "4294967296 tokens per micro-batch"), "B*T overflow: %s", err);
    CHECK(batch_plan(2048, 1024, 4, 1048576, &p, err, sizeof(err)) != 0 &&
          strstr(err, "must be a multiple of --batch-size x --seq-len x processes = 2048 x 1024 x 4 = 8388608"),
          "total below one step: %s", err);
    CHECK(batch_plan(16, 1024, 1, 1000, &p, err, sizeof(err)) != 0 && strstr(err, "must be a multiple"), "not a multiple");
    CHECK(batch_plan(0, 1024, 1, 0, &p, err, sizeof(err)) != 0, "B = 0");
    // every limit on both sides: B, T and the processes from 1; at most 2^24 tokens per micro-batch; at most 2^31 - 1
    // accumulation steps (--total-batch is an int, so only a caller with a 64-bit total reaches that one)
    const struct { int B, T, world; int64_t total; int accum; const char* message; } plans[] = {
        {0, 16, 1, 0, 0, "--batch-size 0 and --seq-len 16 must be positive (processes: 1)"},
        {4, 0, 1, 0, 0, "--batch-size 4 and --seq-len 0 must be positive (processes: 1)"},
        {4, 16, 0, 0, 0, "--batch-size 4 and --seq-len 16 must be positive (processes: 0)"},
        {1, 1, 1, 0, 1, NULL},
        {16777216, 1, 1, 0, 1, NULL},                                   // 2^24 tokens
        {16777217, 1, 1, 0, 0, "--batch-size 16777217 x --seq-len 1 = 16777217 tokens per micro-batch is more than the "
                               "16777216"},
        {4096, 4097, 1, 0, 0, "= 16781312 tokens per micro-batch is more than"},   // 2^24 + 4096
        {1, 1, 1, -1, 0, "--total-batch -1 is negative"},
        {1, 1, 1, 2147483647, 2147483647, NULL},                        // 2^31 - 1 accumulation steps
        {1, 1, 1, 2147483648ll, 0, "--total-batch 2147483648 needs 2147483648 accumulation steps"},
        {2, 3, 1, 12, 2, NULL},
        {2, 3, 1, 13, 0, "--total-batch 13 must be a multiple of --batch-size x --seq-len x processes = 2 x 3 x 1 = 6"},
        {2, 3, 2, 6, 0, "= 2 x 3 x 2 = 12"},
    };
    for (size_t i = 0; i < sizeof(plans) / sizeof(plans[0]); i++) {
        err[0] = '\0';
        const int rc = batch_plan(plans[i].B, plans[i].T, plans[i].world, plans[i].total, &p, err, sizeof(err));
        if (plans[i].message) {
            CHECK(rc != 0 && strstr(err, plans[i].message), "batch_plan case %zu: rc %d '%s', want '%s'", i, rc, err,
                  plans[i].message);
            if (rc != 0) check_seen(err);
        } else {
            CHECK(rc == 0 && p.grad_accum == plans[i].accum, "batch_plan case %zu: rc %d '%s', accumulation %d (want %d)",
                  i, rc, err, p.grad_accum, plans[i].accum);
        }
    }
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

// Model shapes at their width limits (llmc/model/gpt_config.h), on both sides: the widest taken, the next multiple of 8
// refused with the limit named, and far past it (where 4C, 8C/3 and 3C overflowed an int before: under the sanitizer
// build any such product stops the test).
static void test_model_widths(void) {
    const struct {
        const char* model;
        ShapeFlags flags;
        int ok, mlp;             // ok: config_check takes it, with this MLP width
        const char* message;     // else: its message
    } cases[] = {
        // GPT-2: C up to 2^27 (MLP 4C = 2^29)
        {"d12", {0, 134217728, 1, 0, 0, 0, 0, -1}, 1, 536870912, NULL},
        {"d12", {0, 134217736, 1, 0, 0, 0, 0, -1}, 0, 0, "134217736 channels are more than the 134217728 this program takes"},
        {"d12", {0, 2147483640, 1, 0, 0, 0, 0, -1}, 0, 0, "2147483640 channels are more than the 134217728"},
        // Llama: C up to 2^27 (head size 128: 2^20 heads), its default MLP 8C/3 rounded up to 256: 357914112
        {"llama-tiny", {0, 134217728, 1048576, 0, 0, 0, 0, -1}, 1, 357914112, NULL},
        {"llama-tiny", {0, 134217736, 1048576, 0, 0, 0, 0, -1}, 0, 0, "134217736 channels are more than the 134217728"},
        {"llama-tiny", {0, 1073741824, 8388608, 0, 0, 0, 0, -1}, 0, 0, "1073741824 channels are more than"},
        // Llama's MLP: up to 2^29 (2H = 2^30)
        {"llama-tiny", {0, 0, 0, 0, 536870912, 0, 0, -1}, 1, 536870912, NULL},
        {"llama-tiny", {0, 0, 0, 0, 536870920, 0, 0, -1}, 0, 0, "an MLP 536870920 wide is more than the 536870912"},
        {"llama-tiny", {0, 0, 0, 0, 2147483640, 0, 0, -1}, 0, 0, "an MLP 2147483640 wide is more than the 536870912"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        GPTConfig c = config_from_descriptor(cases[i].model);
        char err[512] = "";
        const int applied = config_apply_shape(&c, &cases[i].flags, err, sizeof(err));
        const int rc = applied ? applied : config_check(&c, err, sizeof(err));
        if (cases[i].ok)
            CHECK(rc == 0 && c.mlp_hidden == cases[i].mlp, "%s, case %zu: rc %d '%s', MLP %d (want %d)", cases[i].model, i,
                  rc, err, c.mlp_hidden, cases[i].mlp);
        else
            CHECK(rc != 0 && strstr(err, cases[i].message), "%s, case %zu: rc %d '%s', want '%s'", cases[i].model, i, rc,
                  err, cases[i].message);
    }
    // a checkpoint header's shape goes through config_gpt2 as it is: no product past an int before the check refuses it
    const int widths[] = {2147483640, -2147483647 - 1, 134217736};
    for (int i = 0; i < 3; i++) {
        GPTConfig c = config_gpt2(1, 1, widths[i], 128, 128, 16);
        char err[512] = "";
        CHECK(config_check(&c, err, sizeof(err)) != 0 && c.mlp_hidden == 0, "a header of %d channels: '%s', MLP %d",
              widths[i], err, c.mlp_hidden);
    }
    CHECK(llama_default_hidden(768) == 2048 && llama_default_hidden(640) == 1792 && llama_default_hidden(1) == 256 &&
          llama_default_hidden(96) == 256 && llama_default_hidden(97) == 512 && llama_default_hidden(0) == 0,
          "llama_default_hidden: %d %d %d %d %d", llama_default_hidden(768), llama_default_hidden(640),
          llama_default_hidden(1), llama_default_hidden(96), llama_default_hidden(97));
}

int main(void) {
    test_args();
    test_numbers();
    test_schedules();
    test_batch_plan();
    test_json_escape();
    test_log_resume();
    test_bf16_rounding();
    test_model_widths();
    // every message of the option parser and the batch arithmetic was drawn by a case above
    static const CheckSite sites[] = {{"llmc/run/args.h", "option_set"}, {"llmc/run/args.h", "parse_options_given"},
                                      {"llmc/run/batch.h", "batch_plan", 1}};
    check_every_site("test_core", sites, sizeof(sites) / sizeof(sites[0]), NULL, 0);
    return test_summary("test_core");
}
