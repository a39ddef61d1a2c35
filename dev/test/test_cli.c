// test_cli.c: runs ./train_gpt_fp4 with bad command lines, data files and checkpoints, and checks that
// each stops with exit status 1 and one "error:" line that names the problem, before the GPU is touched
// (CPU only, for CI). The trainer runs with CUDA_VISIBLE_DEVICES="" so that on a machine with a GPU too,
// anything that got past the CPU checks would stop with "no CUDA GPU found" instead of training: that
// message is what the valid command lines here must reach, and what no bad one may.
// Every check of check_options, and the checks of plan_launch, plan_model, plan_recipe, plan_schedule, open_data and
// open_tasks that no scenario below reaches, are rows of tables (test_option_checks, test_plan_checks, the rows of
// test_heldout): a negative case per check, and each range limit on both sides, its last valid value reaching the GPU
// check and its first invalid one refused.
// check_every_site (dev/test/check_coverage.h) holds the rule to that: it reads the checking functions' source
// (CHECK_SITES) and fails for any fail_if / fail whose message no passing case drew, so a check added without a row
// fails the test.
// Checkpoints are written with llmc/run/checkpoint.h and llmc/model/gpt_config.h for a tiny model (1 layer, 8
// channels, vocabulary 128), so they take a few kilobytes.
// usage: build/test_cli [path to train_gpt_fp4]   (default ./train_gpt_fp4; skips if it is not built)
#include <signal.h>
#include <time.h>
#include <sys/stat.h>
#include "llmc/run/checkpoint.h"
#include "llmc/model/gpt_config.h"
#include "llmc/model/models.h"
#include "llmc/run/ckpt_fields.h"
#include "llmc/run/dataloader.h"
#include "llmc/fp4/recipe.h"
#include "llmc/run/eval_tasks.h"
#include "llmc/fp4/recipe_schedule.h"
#include "llmc/run/tokenizer.h"
#include "dev/test/testing.h"
#include "dev/test/check_coverage.h"

static const char* trainer = "./train_gpt_fp4";
static char tmpdir[64];
static char train_shard[128], val_shard[128];

// The child's side of run_trainer: the environment of a plain launch without a GPU, then the trainer.
typedef struct {
    const char* const* args;
    const char* const* env;
} TrainerRun;

static void exec_trainer(const void* arg) {
    const TrainerRun* r = (const TrainerRun*)arg;
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    unsetenv("REQUIRE_GPU");   // the trainer is meant to find no GPU here, also under REQUIRE_GPU=1 make test
    const char* launch[] = {"WORLD_SIZE", "RANK", "LOCAL_RANK", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS",
                            "SLURM_PROCID", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_SIZE", "PMI_RANK"};
    for (size_t i = 0; i < sizeof(launch) / sizeof(launch[0]); i++) unsetenv(launch[i]);
    for (int i = 0; r->env && r->env[i]; i++) putenv((char*)r->env[i]);
    const char* argv[64];
    int n = 0;
    argv[n++] = trainer;
    for (int i = 0; r->args[i] && n < 63; i++) argv[n++] = r->args[i];
    argv[n] = NULL;
    alarm(60);
    execv(trainer, (char* const*)argv);
    _exit(127);
}

// Runs the trainer with args (NULL-terminated) and extra environment assignments ("NAME=value", NULL-
// terminated, may be NULL). Returns the exit status, or -signal when it was killed (a SIGFPE: -8); its
// stderr goes to err. Kills it after 60 s: every case here must fail long before.
static int run_trainer(const char* const* args, const char* const* env, char* err, size_t cap, double* seconds) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const TrainerRun r = {args, env};
    const int rc = test_run_child(exec_trainer, &r, err, cap);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    *seconds = (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
    return rc;
}

// One case: the trainer must exit with status 1 and its last stderr line must be "error: ..." holding
// both substrings (want2 may be NULL). want1 "no CUDA GPU found": a valid case that must pass every
// CPU check; for every other case that message is a failure (the check came after the GPU, or not at all).
static void expect_a(const char* what, const char* const* env, const char* want1, const char* want2,
                     const char* const* args) {
    char err[16384];
    double seconds = 0;
    int rc = run_trainer(args, env, err, sizeof(err), &seconds);
    const char* last = err;
    for (const char* p = err; *p; p++)
        if (*p == '\n' && p[1]) last = p + 1;
    int gpu = strstr(last, "no CUDA GPU found") != NULL;
    int wants_gpu = strstr(want1, "no CUDA GPU found") != NULL;
    int ok = rc == 1 && strncmp(last, "error: ", 7) == 0 && strstr(last, want1) && (!want2 || strstr(last, want2)) &&
             gpu == wants_gpu && seconds < 30;
    CHECK(ok, "%s: exit %d after %.1f s (want 1, before the GPU), want \"%s\"%s%s%s, got: %s", what, rc, seconds, want1,
          want2 ? " and \"" : "", want2 ? want2 : "", want2 ? "\"" : "", err);
    int shown = (int)strcspn(last + 7, "\n");
    if (ok) printf("ok   %-52s %.2f s  %.*s\n", what, seconds, shown < 90 ? shown : 90, last + 7);
    if (ok && !wants_gpu) check_seen(last + 7);
}
// The same with the arguments listed (EXPECT below).
static void expect_v(const char* what, const char* const* env, const char* want1, const char* want2, ...) {
    const char* args[64];
    int n = 0;
    va_list ap;
    va_start(ap, want2);
    for (const char* a; n < 63 && (a = va_arg(ap, const char*)) != NULL;) args[n++] = a;
    va_end(ap);
    args[n] = NULL;
    expect_a(what, env, want1, want2, args);
}

// --- files ---------------------------------------------------------------------------------------

static void write_shard(const char* path, int64_t ntok) {
    int32_t header[SHARD_HEADER_INTS] = {0};
    header[0] = SHARD_MAGIC; header[1] = SHARD_VERSION; header[2] = (int32_t)ntok;
    FILE* f = fopen_check(path, "wb");
    fwrite_check(header, sizeof(int32_t), SHARD_HEADER_INTS, f, path);
    for (int64_t i = 0; i < ntok; i++) {
        uint16_t t = (uint16_t)((i * 7 + 3) % 128);
        fwrite_check(&t, sizeof(t), 1, f, path);
    }
    fclose_check(f, path);
}

// The tiny model the checkpoints hold, and its parameter count as the trainer's param_sizes gives it:
// wte Vp*C, wpe maxT*C, per layer 12*C*C + 13*C (LayerNorms, QKV, projection, MLP), final LayerNorm 2*C.
static GPTConfig tiny_config(void) {
    return config_gpt2(1, 1, 8, 128, 128, 16);
}
static size_t num_parameters(const GPTConfig* c) {
    size_t C = c->channels, L = c->num_layers;
    if (c->arch == ARCH_LLAMA) return param_count(c);   // (the model tables' count; test_export checks the layout)
    return (size_t)c->padded_vocab_size * C + (size_t)c->max_seq_len * C + L * (12 * C * C + 13 * C) + 2 * C;
}

typedef struct {
    GPTConfig config;
    int step, B, T, world, seed;
    const char* recipe;      // preset name, described as the trainer describes it
    size_t weights_bytes;    // 0: the model's weights and optimizer state; else this many bytes of weights and no
                             // optimizer state (a file whose header is all a case needs, kept small)
    float bf16_forward_from; // the run's --bf16-forward-from (0: none), over bf16_forward_steps steps
    int bf16_forward_steps;
    int bf16_forward_state;  // 0: the state the schedule gives at `step`; else this minus 1 (an inconsistent file)
    int version2;            // write format version 2 (no recipe schedule section), as older builds did
    int adam_t_offset;       // the header's AdamW update count is step + this (0: a consistent file)
    int optimizer_shard;     // 1: the header of rank 1's ZeRO optimizer shard (no weights)
    int rng_step_offset;     // the rng section's step is step + this (0: a consistent file)
    int zero;                // written with ZeRO-1 (an optimizer shard then holds no weights)
    int long_text;           // the recipe text padded to 1500 bytes (the trainer reads up to 1023)
    int opt_state;           // the header's optimizer state kind (0: FP32 moments, as every case but one writes)
    int lora_rank;           // --lora-svd-rank: the header's H_LORA_RANK, and (unless lora_missing) its factors' bytes
    int lora_missing;        // the header says lora_rank, but the factors are not there
    size_t muon_owned;       // ZeRO-1 with Muon: the header's H_OPTIMIZER 1 and H_MUON_OWNED, and (unless muon_missing)
                             // that many FP32 momenta after Adam v, before the LoRA-SVD factors (the trainer's order)
    int muon_missing;        // the header says muon_owned, but the momenta are not there
    int muon;                // --optimizer muon without ZeRO-1: the header's H_OPTIMIZER 1 (the layout is AdamW's)
    const char* recipe_tail; // appended to the recipe text (NULL: nothing), as the trainer appends "; newton-schulz: ..."
} CkptSpec;

// A checkpoint the trainer would have written after spec->step steps of a one-process run with this
// data: every section the size the trainer expects, run state consistent with the shards.
static void write_checkpoint(const char* path, const CkptSpec* spec) {
    int32_t h[CKPT_HEADER_INTS] = {0};
    config_to_header(&spec->config, h);
    size_t np = num_parameters(&spec->config);
    h[H_STEP] = spec->step; h[H_ADAM_T] = spec->step + spec->adam_t_offset; h[H_HAS_MASTER] = 0;
    h[H_B] = spec->B; h[H_T] = spec->T; h[H_GRAD_ACCUM] = 1; h[H_WORLD] = spec->world; h[H_ZERO] = spec->zero;
    h[H_RANK] = spec->optimizer_shard; h[H_HAS_PARAMS] = !spec->optimizer_shard;
    h[H_OPT_STATE] = spec->opt_state;
    h[H_LORA_RANK] = spec->lora_rank;
    if (spec->muon_owned || spec->muon) h[H_OPTIMIZER] = 1;   // (OPTIMIZER_MUON)
    header_set_u64(h, H_MUON_OWNED_LO, spec->muon_owned);
    header_set_u64(h, H_OPT_BEGIN_LO, 0);
    size_t opt_count = spec->weights_bytes ? 0 : np;
    header_set_u64(h, H_OPT_COUNT_LO, opt_count);
    Recipe r;
    recipe_preset(&r, spec->recipe);
    recipe_resolve_layers(&r, spec->config.num_layers);
    char text[2048];
    recipe_describe(&r, text, 1024);
    if (spec->recipe_tail) snprintf(text + strlen(text), sizeof(text) - strlen(text), "%s", spec->recipe_tail);
    if (spec->long_text) snprintf(text + strlen(text), sizeof(text) - strlen(text), "%*s", 1500 - (int)strlen(text), "");
    DataLoader dl;
    dataloader_init(&dl, train_shard, spec->B, spec->T, 0, spec->world, 1, (uint64_t)spec->seed, spec->config.vocab_size);
    for (int i = 0; i < spec->step; i++) dataloader_next_batch(&dl);
    DataLoaderState ds = dataloader_get_state(&dl);
    dataloader_free(&dl);
    // the trainer's RngState and SpikeState
    struct { uint64_t seed; int64_t step; } rng = {(uint64_t)spec->seed, spec->step + spec->rng_step_offset};
    double spike[5] = {0};
    size_t wbytes = spec->optimizer_shard && spec->zero ? 0 : spec->weights_bytes ? spec->weights_bytes : np * 2;
    uint8_t* zeros = (uint8_t*)calloc(1, 4 * opt_count > wbytes ? 4 * opt_count : wbytes);
    CheckpointWriter w;
    ckpt_begin(&w, path, h, text);
    ckpt_section(&w, CKPT_WEIGHTS);
    ckpt_write(&w, zeros, wbytes);
    ckpt_section(&w, CKPT_OPTIMIZER);
    ckpt_write(&w, zeros, 4 * opt_count);   // Adam m
    ckpt_write(&w, zeros, 4 * opt_count);   // Adam v
    if (spec->muon_owned && !spec->muon_missing) {   // Muon's owned momenta (no masters: H_HAS_MASTER is 0)
        uint8_t* mm = (uint8_t*)calloc(1, 4 * spec->muon_owned);
        ckpt_write(&w, mm, 4 * spec->muon_owned);
        free(mm);
    }
    if (spec->lora_rank && !spec->lora_missing) {   // GPT-2's factors: (3C + C) + 2C + (4C + C) + (C + 4C) = 16C per rank
        const size_t bytes = (size_t)spec->config.num_layers * 16 * spec->config.channels * spec->lora_rank * 2;
        uint8_t* f = (uint8_t*)calloc(1, bytes);
        ckpt_write(&w, f, bytes);
        free(f);
    }
    ckpt_section(&w, CKPT_DATA);
    ckpt_write(&w, &ds, sizeof(ds));
    ckpt_section(&w, CKPT_RNG);
    ckpt_write(&w, &rng, sizeof(rng));
    ckpt_section(&w, CKPT_SPIKE);
    ckpt_write(&w, spike, sizeof(spike));
    if (!spec->version2) {
        RecipeSchedule sched;
        recipe_schedule_init(&sched, spec->bf16_forward_from, spec->bf16_forward_steps);
        sched.bf16_forward = spec->step > 0 && recipe_schedule_bf16_forward_at(&sched, spec->step - 1);
        if (spec->bf16_forward_state) sched.bf16_forward = spec->bf16_forward_state - 1;
        ckpt_section(&w, CKPT_SCHEDULE);
        ckpt_write(&w, &sched, sizeof(sched));
    }
    ckpt_commit(&w);
    free(zeros);
    if (spec->version2) {   // the header as version 2 wrote it: the same, but for the version and so the checksum
        FILE* f = fopen(path, "r+b");
        int32_t hh[CKPT_HEADER_INTS];
        if (!f || fread(hh, sizeof(hh), 1, f) != 1) { printf("FAIL: rereading %s\n", path); if (f) fclose(f); return; }
        hh[CKPT_H_VERSION] = 2;
        hh[CKPT_H_HEADER_CRC] = (int32_t)ckpt_header_crc_(hh, text, strlen(text));
        fseek(f, 0, SEEK_SET);
        fwrite(hh, sizeof(hh), 1, f);
        fclose(f);
    }
}

// Flips one byte of a file at offset (from the end when negative).
static void damage(const char* path, long offset) {
    FILE* f = fopen(path, "r+b");
    if (!f) return;
    fseek(f, offset, offset < 0 ? SEEK_END : SEEK_SET);
    long pos = ftell(f);
    int c = fgetc(f);
    fseek(f, pos, SEEK_SET);
    fputc(c ^ 0x5A, f);
    fclose(f);
}

static void copy_file(const char* from, const char* to) {
    FILE* a = fopen(from, "rb");
    FILE* b = fopen(to, "wb");
    char buf[65536];
    size_t n;
    while (a && b && (n = fread(buf, 1, sizeof(buf), a)) > 0) fwrite(buf, 1, n, b);
    if (a) fclose(a);
    if (b) fclose(b);
}

// --- cases ---------------------------------------------------------------------------------------

// EXPECT(what, env, want1, want2, trainer arguments...)
#define EXPECT(what, env, want1, want2, ...) expect_v(what, env, want1, want2, __VA_ARGS__, (const char*)NULL)
// the arguments of a resume of the tiny model, then the case's own
#define RESUME_ARGS "-i", train_shard, "-j", "", "-o", tmpdir, "-b", "4", "-t", "16", "--steps", "10"

// --- the checks before the GPU, one table row each ----------------------------------------------------

// One case: a name, the environment (NULL: none), the message ("no CUDA GPU found" for a command line that must pass
// every CPU check) and the arguments. Every range limit has two rows: the last value it takes, which reaches the GPU
// check, and the first it refuses. Given twice, an option's last value counts, so a row can start from BASE_ARGS.
typedef struct {
    const char* what;
    const char* const* env;
    const char* want1;
    const char* want2;
    const char* args[28];
} CliCase;

static void run_cases(const CliCase* c, size_t n) {
    for (size_t i = 0; i < n; i++) expect_a(c[i].what, c[i].env, c[i].want1, c[i].want2, c[i].args);
}

#define GPU_CHECK "no CUDA GPU found"
// a valid command line: the default model (d12, recipe bf16) on the tiny shard, no validation data
#define BASE_ARGS "-i", train_shard, "-j", "", "-o", tmpdir, "-b", "2", "-t", "16"
#define SHAPE_FLAGS "--n-layer, --n-embd, --n-head, --kv-heads, --mlp-hidden, --rope-theta and --norm-eps must be >= 0"
#define PERIODS "--val-every, --val-batches, --sample-every and --sample-tokens must be >= 0"
#define ADAM "--eps must be > 0, --weight-decay and --grad-clip >= 0"
#define BF16_BLOCKS "--bf16-first-layers and --bf16-last-layers must be >= 0, or -1 for the recipe's rule"

static const char* const WORLD2[] = {"WORLD_SIZE=2", "RANK=0", "LOCAL_RANK=0", NULL};
static const char* const RANK5[] = {"WORLD_SIZE=2", "RANK=5", NULL};

static void test_options_and_batch(void) {
    EXPECT("valid command line reaches the GPU check", NULL, "no CUDA GPU found", NULL,
           "-i", train_shard, "-j", val_shard, "-o", tmpdir, "-b", "2", "-t", "16");
    EXPECT("(a) negative --total-batch", NULL, "--total-batch -65536 is negative", "0 for one micro-batch",
           "-i", train_shard, "--total-batch", "-65536");
    EXPECT("(b) B*T beyond 32 bits (was SIGFPE)", NULL, "4294967296 tokens per micro-batch", "--total-batch",
           "-b", "4194304", "-t", "1024", "--total-batch", "1048576");
    EXPECT("--total-batch not a multiple", NULL, "multiple of --batch-size x --seq-len x processes = 4 x 16 x 1 = 64",
           NULL, "-i", train_shard, "-b", "4", "-t", "16", "--total-batch", "100");
    EXPECT("processes count in the batch arithmetic", WORLD2, "4 x 16 x 2 = 128", NULL,
           "-i", train_shard, "-b", "4", "-t", "16", "--total-batch", "64");
    EXPECT("rank outside the world size", RANK5, "RANK=5 is not below WORLD_SIZE=2", NULL, "-i", train_shard);
    EXPECT("unknown option", NULL, "unknown option '--batchsize'", NULL, "--batchsize", "4");
    EXPECT("sequence longer than the model's positions", NULL, "--seq-len 2048 exceeds the model's 1024 positions",
           NULL, "-i", train_shard, "-t", "2048");
}

static void test_recipes(void) {
    EXPECT("bad slot spec", NULL, "--fprop-x 'nvfp4,7x7'", NULL,
           "-i", train_shard, "--recipe", "nvfp4", "--fprop-x", "nvfp4,7x7");
    EXPECT("4o6 needs e2m1", NULL, "4o6 (Four Over Six)", "e2m1 only",
           "-i", train_shard, "--recipe", "nvfp4", "--fprop-x", "int4,4o6");
    EXPECT("Hadamard conflict", NULL, "must use the same Hadamard transform", NULL,
           "-i", train_shard, "--recipe", "nvfp4", "--wgrad-x", "nvfp4");
    EXPECT("(f) B*T not a multiple of the block", NULL, "N = 200 tokens", "Change --batch-size or --seq-len",
           "-i", train_shard, "--recipe", "nvfp4", "-b", "4", "-t", "50");
    EXPECT("(f) --qk-fp8 needs N % 32", NULL, "multiple of 32", "--qk-fp8 off",
           "-i", train_shard, "--recipe", "nvfp4", "--qk-fp8", "on", "-b", "1", "-t", "48");
    EXPECT("(f) the same, valid with --fp4-wgrad off", NULL, "no CUDA GPU found", NULL,
           "-i", train_shard, "-j", "", "-o", tmpdir, "--recipe", "nvfp4", "-b", "4", "-t", "50", "--fp4-wgrad", "off");
    EXPECT("--amax delayed on a BF16 recipe", NULL, "--amax delayed: recipe bf16 quantizes nothing", NULL,
           "-i", train_shard, "--amax", "delayed");
    EXPECT("--amax: a bad word", NULL, "--amax", "now|delayed", "-i", train_shard, "--amax", "later");
    EXPECT("--amax delayed with nvfp4 reaches the GPU check", NULL, "no CUDA GPU found", NULL,
           "-i", train_shard, "-j", "", "-o", tmpdir, "--recipe", "nvfp4", "-b", "4", "-t", "64", "--amax", "delayed");
    if (test_fixture_ok("text-sample shape check", "data/gpt2_tokenizer.bin"))
        EXPECT("(f) text samples: 16x16 X tiles over T=200", NULL, "text samples run the forward on 200 tokens",
               "--sample-every 0", "-i", train_shard, "-j", "", "--recipe", "nvfp4", "--fprop-x", "nvfp4-2d",
               "-b", "16", "-t", "200", "--tokenizer", "data/gpt2_tokenizer.bin");
}

// --recipe fullstack (docs/FULLSTACK_FP4.md sections 5 and 6, test 5): nvfp4's linears under the name fullstack, and
// --attention-fp4 nvfp4-2d, --optimizer-state nvfp4, --lora-svd-rank 16 wherever the command line leaves them out.
// What the preset resolved to shows before the GPU in the messages of a resume that disagrees with its checkpoint (a
// bf16 one: FP32 moments, no LoRA-SVD factors): the optimizer state, then the rank, then, with both given, the recipe
// text this run would write into its log and checkpoint, pinned here whole.
#define FULLSTACK_LINEARS_1L "fullstack: fprop.x=e2m1,1x16,e4m3,rne,h0; fprop.w=e2m1,16x16,e4m3,rne,h0; " \
    "dgrad.dy=e2m1,1x16,e4m3,sr,h0; dgrad.w=e2m1,16x16,e4m3,rne,h0; wgrad.dy=e2m1,1x16,e4m3,sr,h16,fixed; " \
    "wgrad.x=e2m1,1x16,e4m3,rne,h16,fixed; bf16 blocks: first 0, last 0"
#define FULLSTACK_ATTENTION "; attention: q/k/v=e2m1,16x16,e4m3,rne,h0, ds=e2m1,16x16,e4m3,sr,h0"
static void test_fullstack(void) {
    // the pinned text is recipe_describe's for the preset (one block: round(2/62) = round(8/62) = 0 kept in BF16)
    Recipe fs;
    recipe_preset(&fs, "fullstack");
    recipe_resolve_layers(&fs, 1);
    char text[1024];
    recipe_describe(&fs, text, sizeof(text));
    CHECK(strcmp(text, FULLSTACK_LINEARS_1L) == 0, "recipe_describe of fullstack at 1 block: got '%s'", text);
    const RecipeStack* st = recipe_find_stack("fullstack");
    CHECK(st && !strcmp(st->attention_fp4, "nvfp4-2d") && !strcmp(st->optimizer_state, "nvfp4") &&
          st->lora_svd_rank == 16 && !recipe_find_stack("nvfp4"), "RECIPE_STACKS: fullstack's options, and no other's");

    // a 1-block model the preset fits (64 channels, one head of 64: the own attention kernels' size; rank 16 <= 64)
    char ck[128];
    snprintf(ck, sizeof(ck), "%s/fullstack.bin", tmpdir);
    CkptSpec spec = {config_gpt2(1, 1, 64, 128, 128, 16), 4, 4, 16, 1, 1337, "bf16", 0};
    write_checkpoint(ck, &spec);
    static char with_attention[1024], without_attention[1024];
    snprintf(with_attention, sizeof(with_attention), "this run uses '%s%s'", FULLSTACK_LINEARS_1L, FULLSTACK_ATTENTION);
    snprintf(without_attention, sizeof(without_attention), "this run uses '%s'", FULLSTACK_LINEARS_1L);
    EXPECT("fullstack: --optimizer-state nvfp4 unless given", NULL, "its optimizer state is fp32; this run asks for "
           "--optimizer-state nvfp4", NULL, RESUME_ARGS, "--resume", ck, "--recipe", "fullstack");
    EXPECT("fullstack: --lora-svd-rank 16 unless given (--optimizer-state fp32 given wins)", NULL,
           "trained with --lora-svd-rank 0; this run asks for 16", NULL, RESUME_ARGS, "--resume", ck, "--recipe",
           "fullstack", "--optimizer-state", "fp32");
    EXPECT("fullstack: the recipe text, with --attention-fp4 nvfp4-2d (rank 0 given wins)", NULL, with_attention,
           "it was trained with recipe 'bf16:", RESUME_ARGS, "--resume", ck, "--recipe", "fullstack", "--optimizer-state",
           "fp32", "--lora-svd-rank", "0");
    EXPECT("fullstack --attention-fp4 off: the recipe text without attention", NULL, without_attention, NULL,
           RESUME_ARGS, "--resume", ck, "--recipe", "fullstack", "--optimizer-state", "fp32", "--lora-svd-rank", "0",
           "--attention-fp4", "off");
    EXPECT("fullstack with every option at the preset's value, given", NULL, with_attention, NULL, RESUME_ARGS,
           "--resume", ck, "--recipe", "fullstack", "--optimizer-state=fp32", "--lora-svd-rank=0", "--attention-fp4",
           "nvfp4-2d");
    EXPECT("fullstack --init-from the 1-block model reaches the GPU check", NULL, GPU_CHECK, NULL, RESUME_ARGS,
           "--init-from", ck, "--recipe", "fullstack");
    remove(ck);

    const CliCase cases[] = {
        {"--recipe fullstack (d12)", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--recipe", "fullstack"}},
        {"--recipe fullstack --optimizer muon: the preset's NVFP4 state", NULL, "--optimizer muon with "
         "--optimizer-state nvfp4 (--recipe fullstack's) is not built yet", NULL,
         {BASE_ARGS, "--recipe", "fullstack", "--optimizer", "muon"}},
        {"--recipe fullstack --optimizer muon --optimizer-state fp32", NULL, GPU_CHECK, NULL,
         {BASE_ARGS, "--recipe", "fullstack", "--optimizer", "muon", "--optimizer-state", "fp32"}},
        {"--recipe fullstack --optimizer muon --optimizer-state nvfp4 (given)", NULL, "--optimizer muon with "
         "--optimizer-state nvfp4 is not built yet", NULL,
         {BASE_ARGS, "--recipe", "fullstack", "--optimizer", "muon", "--optimizer-state", "nvfp4"}},
        {"--recipe fullstack --attention-fp4 mxfp4-2d (given wins)", NULL, "multiples of the spec's block size 32",
         "--seq-len 16", {BASE_ARGS, "--recipe", "fullstack", "--attention-fp4", "mxfp4-2d"}},
        {"--recipe fullstack --lora-svd-rank 12 (given wins)", NULL, "the rank must be a positive multiple of 8", NULL,
         {BASE_ARGS, "--recipe", "fullstack", "--lora-svd-rank", "12"}},
        {"--recipe fullstack with SR on fprop.w: the preset's rank refuses it", NULL, "--lora-svd-rank 16:",
         "fprop.w rounds stochastically", {BASE_ARGS, "--recipe", "fullstack", "--fprop-w", "nvfp4-2d,sr"}},
        {"--recipe fullstack with SR on fprop.w and --lora-svd-rank 0", NULL, GPU_CHECK, NULL,
         {BASE_ARGS, "--recipe", "fullstack", "--fprop-w", "nvfp4-2d,sr", "--lora-svd-rank", "0"}},
    };
    run_cases(cases, sizeof(cases) / sizeof(cases[0]));
}

// --ns-fp4 (docs/FULLSTACK_FP4.md section 3): the recipe text's "; newton-schulz: ..." is what --resume compares, and
// every refusal of the spec, of --ns-fp4-gemms and of the shapes, each beside the nearest command line it takes.
static void test_ns_fp4(void) {
    // a 1-block model of 64 channels: Muon's matrices 192 x 64, 64 x 64, 256 x 64 and 64 x 256 (multiples of 32)
    char ck[128], ck4[128];
    snprintf(ck, sizeof(ck), "%s/muon.bin", tmpdir);
    snprintf(ck4, sizeof(ck4), "%s/muon_ns.bin", tmpdir);
    CkptSpec spec = {config_gpt2(1, 1, 64, 128, 128, 16), 4, 4, 16, 1, 1337, "bf16", 0};
    spec.muon = 1;
    write_checkpoint(ck, &spec);
    spec.recipe_tail = "; newton-schulz: e2m1,1x16,e4m3,rne,h0 on xx";
    write_checkpoint(ck4, &spec);
    EXPECT("a Muon checkpoint resumed with its optimizer", NULL, GPU_CHECK, NULL, RESUME_ARGS, "--resume", ck,
           "--optimizer", "muon");
    EXPECT("a BF16-NS Muon checkpoint resumed with --ns-fp4 nvfp4", NULL, "this run uses 'bf16: ", "; newton-schulz: "
           "e2m1,1x16,e4m3,rne,h0 on xx' (add --allow-recipe-change on", RESUME_ARGS, "--resume", ck, "--optimizer",
           "muon", "--ns-fp4", "nvfp4");
    EXPECT("... with --allow-recipe-change on", NULL, GPU_CHECK, NULL, RESUME_ARGS, "--resume", ck, "--optimizer", "muon",
           "--ns-fp4", "nvfp4", "--allow-recipe-change", "on");
    EXPECT("an --ns-fp4 nvfp4 checkpoint resumed with the same", NULL, GPU_CHECK, NULL, RESUME_ARGS, "--resume", ck4,
           "--optimizer", "muon", "--ns-fp4", "nvfp4", "--ns-fp4-gemms", "xx");
    EXPECT("an --ns-fp4 nvfp4 checkpoint resumed with xx,bx", NULL, "h0 on xx,bx' (add --allow-recipe-change on",
           "it was trained with recipe 'bf16:", RESUME_ARGS, "--resume", ck4, "--optimizer", "muon", "--ns-fp4", "nvfp4",
           "--ns-fp4-gemms", "bx,xx");
    EXPECT("an --ns-fp4 nvfp4 checkpoint resumed with BF16 NS", NULL, "on xx', this run uses 'bf16:", NULL, RESUME_ARGS,
           "--resume", ck4, "--optimizer", "muon");
    EXPECT("an --ns-fp4 nvfp4 checkpoint, --init-from with BF16 NS", NULL, GPU_CHECK, NULL, RESUME_ARGS, "--init-from",
           ck4, "--optimizer", "muon");
    remove(ck);
    remove(ck4);
    char list63[64], list64[65];   // "xx,xx,...,xx," (the parser's buffer holds 63 characters), and one more
    for (int i = 0; i < 21; i++) memcpy(list63 + 3 * i, "xx,", 3);
    list63[63] = '\0';
    snprintf(list64, sizeof(list64), "%sx", list63);
    const CliCase cases[] = {
        {"--ns-fp4 nvfp4", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--optimizer", "muon", "--ns-fp4", "nvfp4"}},
        {"--ns-fp4 mxfp4 on every GEMM", NULL, GPU_CHECK, NULL,
         {BASE_ARGS, "--optimizer", "muon", "--ns-fp4", "mxfp4", "--ns-fp4-gemms", "all"}},
        {"--ns-fp4 nvfp4-2d on bx,aa, split QKV", NULL, GPU_CHECK, NULL,
         {BASE_ARGS, "--optimizer", "muon", "--ns-fp4", "nvfp4-2d", "--ns-fp4-gemms", "bx,aa", "--muon-split-qkv", "on"}},
        {"--ns-fp4 without --optimizer muon", NULL, "--ns-fp4 nvfp4 quantizes Muon's Newton-Schulz: it needs "
         "--optimizer muon (this run's optimizer is adamw)", NULL, {BASE_ARGS, "--ns-fp4", "nvfp4"}},
        {"--ns-fp4-gemms without --ns-fp4", NULL, "--ns-fp4-gemms xx needs --ns-fp4 SPEC (it is off)", NULL,
         {BASE_ARGS, "--optimizer", "muon", "--ns-fp4-gemms", "xx"}},
        {"--ns-fp4 with a bad block", NULL, "--ns-fp4 'nvfp4,7x7': block '7x7'", NULL,
         {BASE_ARGS, "--optimizer", "muon", "--ns-fp4", "nvfp4,7x7"}},
        {"--ns-fp4 with SR", NULL, "--ns-fp4 'nvfp4,sr': Newton-Schulz's operands round to nearest (rne) only",
         "(e.g. --ns-fp4 nvfp4)", {BASE_ARGS, "--optimizer", "muon", "--ns-fp4", "nvfp4,sr"}},
        {"--ns-fp4 with a Hadamard", NULL, "--ns-fp4 'nvfp4,h16': no Hadamard transform", NULL,
         {BASE_ARGS, "--optimizer", "muon", "--ns-fp4", "nvfp4,h16"}},
        {"--ns-fp4 bf16", NULL, "--ns-fp4 'bf16': a BF16 spec quantizes nothing (use --ns-fp4 off)", NULL,
         {BASE_ARGS, "--optimizer", "muon", "--ns-fp4", "bf16"}},
        {"--ns-fp4 with src=fprop", NULL, "--ns-fp4 'nvfp4,src=fprop': src=fprop applies to the linears'", NULL,
         {BASE_ARGS, "--optimizer", "muon", "--ns-fp4", "nvfp4,src=fprop"}},
        {"--ns-fp4-gemms yy", NULL, "--ns-fp4-gemms: unknown GEMM 'yy' (use xx, aa, bx, comma separated, or all)", NULL,
         {BASE_ARGS, "--optimizer", "muon", "--ns-fp4", "nvfp4", "--ns-fp4-gemms", "xx,yy"}},
        {"--ns-fp4-gemms xx,xx", NULL, "--ns-fp4-gemms: 'xx,xx' names xx twice", NULL,
         {BASE_ARGS, "--optimizer", "muon", "--ns-fp4", "nvfp4", "--ns-fp4-gemms", "xx,xx"}},
        {"--ns-fp4-gemms ,", NULL, "--ns-fp4-gemms: an empty list", NULL,
         {BASE_ARGS, "--optimizer", "muon", "--ns-fp4", "nvfp4", "--ns-fp4-gemms", ","}},
        {"--ns-fp4-gemms of 63 characters", NULL, "--ns-fp4-gemms: 'xx,xx", "names xx twice",
         {BASE_ARGS, "--optimizer", "muon", "--ns-fp4", "nvfp4", "--ns-fp4-gemms", list63}},
        {"--ns-fp4-gemms of 64 characters", NULL, "--ns-fp4-gemms: 'xx,xx", "is too long",
         {BASE_ARGS, "--optimizer", "muon", "--ns-fp4", "nvfp4", "--ns-fp4-gemms", list64}},
        {"--ns-fp4 nvfp4 on 208 channels", NULL, GPU_CHECK, NULL,
         {BASE_ARGS, "--optimizer", "muon", "--ns-fp4", "nvfp4", "--n-embd", "208", "--n-head", "1"}},
        {"--ns-fp4 mxfp4 on 208 channels", NULL, "--ns-fp4 mxfp4: Muon's qkvw matrix is 624 x 208, and its sides must "
         "be multiples of the spec's block length (32)", "or --ns-fp4 off",
         {BASE_ARGS, "--optimizer", "muon", "--ns-fp4", "mxfp4", "--n-embd", "208", "--n-head", "1"}},
    };
    run_cases(cases, sizeof(cases) / sizeof(cases[0]));
}

// The model families' options (docs/MODELS.md): each refusal before the GPU, and valid Llama shapes reaching it.
static void test_models(void) {
    EXPECT("llama-30m with nvfp4 reaches the GPU check", NULL, "no CUDA GPU found", NULL,
           "-i", train_shard, "-j", "", "-o", tmpdir, "--model", "llama-30m", "--recipe", "nvfp4", "-b", "4", "-t", "64");
    EXPECT("llama-tiny with quartet2 and GQA reaches the GPU check", NULL, "no CUDA GPU found", NULL,
           "-i", train_shard, "-j", "", "-o", tmpdir, "--model", "llama-tiny", "--recipe", "quartet2", "-b", "8", "-t", "16");
    EXPECT("Llama 3.1-8B's shape reaches the GPU check", NULL, "no CUDA GPU found", NULL,
           "-i", train_shard, "-j", "", "-o", tmpdir, "--arch", "llama", "--n-layer", "32", "--n-embd", "4096",
           "--n-head", "32", "--kv-heads", "8", "--mlp-hidden", "14336", "--rope-theta", "500000", "-b", "1", "-t", "16");
    EXPECT("--kv-heads on a GPT-2 model", NULL, "are Llama's options", "pick a llama model",
           "-i", train_shard, "--kv-heads", "2");
    EXPECT("--tie-embeddings off on a GPT-2 model", NULL, "are Llama's options", NULL,
           "-i", train_shard, "--model", "d6", "--tie-embeddings", "off");
    EXPECT("--arch gpt2 with a llama model", NULL, "--arch gpt2 conflicts with --model llama-tiny", NULL,
           "-i", train_shard, "--arch", "gpt2", "--model", "llama-tiny");
    EXPECT("heads not a multiple of kv heads", NULL, "heads 5 must be a multiple of kv heads 2", NULL,
           "-i", train_shard, "--model", "llama-30m", "--kv-heads", "2");
    EXPECT("a Llama head size the kernels lack", NULL, "a Llama head size must be 32, 64 or 128", "24",
           "-i", train_shard, "--model", "llama-tiny", "--n-embd", "96");
    EXPECT("a negative shape flag", NULL, "must be >= 0 (0: the model's)", NULL,
           "-i", train_shard, "--model", "llama-tiny", "--mlp-hidden", "-8");
    EXPECT("an MLP width not a multiple of 8", NULL, "the MLP width must be a multiple of 8", NULL,
           "-i", train_shard, "--model", "llama-tiny", "--mlp-hidden", "100");
    EXPECT("an MLP width nvfp4 cannot block", NULL, "fcproj", "not a multiple of 16",
           "-i", train_shard, "--model", "llama-tiny", "--mlp-hidden", "200", "--recipe", "nvfp4-naive", "-b", "4",
           "-t", "16");
    EXPECT("--model: a name of neither family", NULL, "--model", "llama-30m", "-i", train_shard, "--model", "llama-7b");

    // a Llama checkpoint fixes its shape and family
    char ck[128];
    snprintf(ck, sizeof(ck), "%s/llama.bin", tmpdir);
    GPTConfig tiny = config_llama(1, 2, 64, 128, 128, 16);
    tiny.kv_heads = 1;
    tiny.mlp_hidden = 64;
    CkptSpec spec = {tiny, 4, 4, 16, 1, 1337, "bf16", 0};
    write_checkpoint(ck, &spec);
    EXPECT("valid resume of a llama checkpoint reaches the GPU check", NULL, "no CUDA GPU found", NULL,
           RESUME_ARGS, "--resume", ck);
    EXPECT("shape flags with --resume", NULL, "a checkpoint's weights fix the model's shape", "--resume",
           RESUME_ARGS, "--resume", ck, "--kv-heads", "2");
    EXPECT("--arch gpt2 with a llama checkpoint", NULL, "--arch gpt2 conflicts with checkpoint", "a llama model",
           RESUME_ARGS, "--resume", ck, "--arch", "gpt2");
    EXPECT("--model d6 with a llama checkpoint", NULL, "--model d6 conflicts with checkpoint", "llama",
           RESUME_ARGS, "--init-from", ck, "--model", "d6");
    remove(ck);
}

static void test_data_files(void) {
    EXPECT("(h) a directory as a data shard", NULL, "is a directory, not a shard file", tmpdir, "-i", tmpdir);
    char pattern[128];
    snprintf(pattern, sizeof(pattern), "%s/none_*.bin", tmpdir);
    EXPECT("no shard matches", NULL, "no data file matches", "none_*.bin", "-i", pattern);
    char small[128];
    snprintf(small, sizeof(small), "%s/small.bin", tmpdir);
    write_shard(small, 20);
    EXPECT("shard too small for a batch", NULL, "too few for one batch", small, "-i", small, "-b", "4", "-t", "16");
    EXPECT("a directory as the tokenizer", NULL, "is a directory", NULL,
           "-i", train_shard, "-j", "", "-b", "2", "-t", "16", "--tokenizer", tmpdir);
    remove(small);
}

static void test_checkpoints(void) {
    GPTConfig tiny = tiny_config();
    char ckpt[128], path[160];
    snprintf(ckpt, sizeof(ckpt), "%s/ckpt_00000004.bin", tmpdir);
    CkptSpec spec = {tiny, 4, 4, 16, 1, 1337, "bf16", 0};
    write_checkpoint(ckpt, &spec);
    EXPECT("valid resume reaches the GPU check", NULL, "no CUDA GPU found", NULL, RESUME_ARGS, "--resume", "latest");
    EXPECT("valid --init-from reaches the GPU check", NULL, "no CUDA GPU found", NULL, RESUME_ARGS, "--init-from", ckpt);
    EXPECT("resume with another --seed", NULL, "trained with --seed 1337, not 7", ckpt,
           RESUME_ARGS, "--resume", ckpt, "--seed", "7");
    EXPECT("resume with another recipe", NULL, "it was trained with recipe 'bf16:", "--allow-recipe-change",
           RESUME_ARGS, "--resume", ckpt, "--bf16-last-layers", "1");
    EXPECT("resume with another batch size", NULL, "cannot resume the data loader", "B=4",
           "-i", train_shard, "-j", "", "-o", tmpdir, "-b", "2", "-t", "16", "--resume", ckpt);
    EXPECT("resume on 2 processes", WORLD2, "on 2 process(es)", "written by 1 process(es)", RESUME_ARGS, "--resume", ckpt);
    EXPECT("resume a finished run", NULL, "nothing to do", "at step 4 of --steps 4",
           "-i", train_shard, "-j", "", "-o", tmpdir, "-b", "4", "-t", "16", "--steps", "4", "--resume", ckpt);
    EXPECT("resume a directory", NULL, "is a directory, not a checkpoint file", NULL, RESUME_ARGS, "--resume", tmpdir);
    EXPECT("resume FP32 moments as NVFP4", NULL, "its optimizer state is fp32; this run asks for --optimizer-state nvfp4",
           "--init-from", RESUME_ARGS, "--resume", ckpt, "--optimizer-state", "nvfp4");
    EXPECT("resume AdamW's state with Muon", NULL, "it was trained with --optimizer adamw; this run asks for "
           "--optimizer muon", "--init-from", RESUME_ARGS, "--resume", ckpt, "--optimizer", "muon");
    EXPECT("--init-from AdamW's checkpoint into Muon", NULL, "no CUDA GPU found", NULL, RESUME_ARGS, "--init-from", ckpt,
           "--optimizer", "muon");
    EXPECT("--init-from FP32 moments into NVFP4 ones", NULL, "no CUDA GPU found", NULL, RESUME_ARGS, "--init-from", ckpt,
           "--optimizer-state", "nvfp4");
    EXPECT("resume without LoRA-SVD factors with --lora-svd-rank 16", NULL, "trained with --lora-svd-rank 0; this run "
           "asks for 16", NULL, RESUME_ARGS, "--resume", ckpt, "--lora-svd-rank", "16");
    char lora[128];
    snprintf(lora, sizeof(lora), "%s/lora.bin", tmpdir);
    CkptSpec lspec = spec;
    lspec.lora_rank = 16;
    write_checkpoint(lora, &lspec);
    EXPECT("resume LoRA-SVD factors of rank 16 without the flag", NULL, "trained with --lora-svd-rank 16; this run asks "
           "for 0", NULL, RESUME_ARGS, "--resume", lora);
    EXPECT("--init-from a checkpoint with LoRA-SVD factors", NULL, "no CUDA GPU found", NULL, RESUME_ARGS, "--init-from",
           lora);
    lspec.lora_missing = 1;
    write_checkpoint(lora, &lspec);
    EXPECT("a header with LoRA-SVD rank 16 but no factors", NULL, "the optimizer state section holds", lora, RESUME_ARGS,
           "--init-from", lora);
    // the merged layout: Muon's owned momenta (ZeRO-1), then the LoRA-SVD factors, both counted by the size check
    lspec.lora_missing = 0;
    lspec.muon_owned = 1000;
    write_checkpoint(lora, &lspec);
    EXPECT("--init-from a checkpoint with Muon's owned state and LoRA-SVD factors", NULL, "no CUDA GPU found", NULL,
           RESUME_ARGS, "--init-from", lora);
    lspec.muon_missing = 1;
    write_checkpoint(lora, &lspec);
    EXPECT("a header with Muon's owned state but no momenta (LoRA-SVD factors present)", NULL,
           "the optimizer state section holds", lora, RESUME_ARGS, "--init-from", lora);
    remove(lora);

    // (c) --model that contradicts the checkpoint: a d6 checkpoint whose header is all that matters here
    char d6[128];
    snprintf(d6, sizeof(d6), "%s/d6.bin", tmpdir);
    CkptSpec d6spec = {config_from_descriptor("d6"), 4, 4, 16, 1, 1337, "bf16", 64};
    write_checkpoint(d6, &d6spec);
    EXPECT("(c) --model d12 --resume of a d6 checkpoint", NULL, "--model d12 conflicts with checkpoint",
           "holds a d6 model", RESUME_ARGS, "--model", "d12", "--resume", d6);
    EXPECT("(c) --model d12 --init-from a d6 checkpoint", NULL, "--model d12 conflicts", "without --init-from",
           RESUME_ARGS, "--model", "d12", "--init-from", d6);
    EXPECT("--model that agrees; then the sizes are checked", NULL,
           "the weights section holds 64 bytes where its model needs", d6, RESUME_ARGS, "--model", "d6", "--resume", d6);

    // (d) a checkpoint whose header says 256 channels, 6 heads: the message names the file
    GPTConfig odd = tiny;
    odd.channels = 256; odd.num_heads = 6;
    snprintf(path, sizeof(path), "%s/odd.bin", tmpdir);
    CkptSpec oddspec = {odd, 4, 4, 16, 1, 1337, "bf16", 64};
    write_checkpoint(path, &oddspec);
    EXPECT("(d) impossible shape in a checkpoint names the file", NULL,
           "model config: channels 256 not divisible by heads 6", path, RESUME_ARGS, "--resume", path);

    // damaged checkpoints: any byte, any section, refused before the GPU with the file and section named
    // the file ends with the sections data position, rng (16 bytes), spike detector (40), recipe schedule (16)
    struct { const char* name; long offset; const char* section; } hits[] = {
        {"channel count", 4 * H_CHANNELS, "the header section is corrupt"},
        {"recipe text", 4 * CKPT_HEADER_INTS + 3, "the header section is corrupt"},
        {"last byte (recipe schedule)", -1, "the recipe schedule section is corrupt"},
        {"spike detector", -(long)(16 + 1), "the spike detector section is corrupt"},
        {"data position", -(long)(16 + 40 + 16 + 3), "the data position section is corrupt"},
        {"rng", -(long)(16 + 40 + 5), "the rng section is corrupt"},
    };
    for (size_t i = 0; i < sizeof(hits) / sizeof(hits[0]); i++) {
        char what[128];
        snprintf(path, sizeof(path), "%s/damaged.bin", tmpdir);
        copy_file(ckpt, path);
        damage(path, hits[i].offset);
        snprintf(what, sizeof(what), "damaged checkpoint: %s", hits[i].name);
        EXPECT(what, NULL, hits[i].section, path, RESUME_ARGS, "--resume", path);
    }
    snprintf(path, sizeof(path), "%s/short.bin", tmpdir);
    copy_file(ckpt, path);
    if (truncate(path, 3000) != 0) CHECK(0, "truncate");
    EXPECT("truncated checkpoint", NULL, "is truncated", "the weights section is incomplete",
           RESUME_ARGS, "--resume", path);
    // a version-1 checkpoint: the old header, no checksums
    int32_t h1[CKPT_HEADER_INTS] = {0};
    h1[0] = CKPT_MAGIC; h1[1] = 1; h1[2] = 1;
    snprintf(path, sizeof(path), "%s/v1.bin", tmpdir);
    FILE* f = fopen(path, "wb");
    fwrite(h1, sizeof(h1), 1, f);
    fclose(f);
    EXPECT("old checkpoint version", NULL, "format version 1", path, RESUME_ARGS, "--resume", path);
    EXPECT("a data shard as a checkpoint", NULL, "not a train_gpt_fp4 checkpoint", train_shard,
           RESUME_ARGS, "--resume", train_shard);
    remove(path);
    snprintf(path, sizeof(path), "%s/damaged.bin", tmpdir); remove(path);
    snprintf(path, sizeof(path), "%s/short.bin", tmpdir); remove(path);
    snprintf(path, sizeof(path), "%s/odd.bin", tmpdir); remove(path);
    remove(d6);
    remove(ckpt);
}

// Held-out evaluation (--eval-every, --eval-only): missing, corrupt and mismatched token files, tasks the
// rows cannot hold, and --eval-only without a checkpoint, all before the GPU. The token files are the
// committed data/eval ones (the test runs from the repository root).
#define EVAL_ARGS "-i", train_shard, "-j", "", "-o", tmpdir, "-b", "2", "-t", "256", "--eval-every", "5"
static void test_heldout(void) {
    if (!test_fixture_ok("held-out evaluation cases", "data/eval/hellaswag_val.bin") ||
        !test_fixture_ok("held-out evaluation cases", "data/eval/lambada_test.bin"))
        return;
    // a one-layer model with GPT-2's vocabulary, so that the real token files fit it (800 KB)
    GPTConfig gpt2_vocab = tiny_config();
    gpt2_vocab.vocab_size = 50257; gpt2_vocab.padded_vocab_size = 50304; gpt2_vocab.max_seq_len = 256;
    char ckpt[128], tiny[128], missing[128];
    snprintf(ckpt, sizeof(ckpt), "%s/eval_model.bin", tmpdir);
    snprintf(tiny, sizeof(tiny), "%s/eval_tiny.bin", tmpdir);
    snprintf(missing, sizeof(missing), "%s/none.bin", tmpdir);
    CkptSpec spec = {gpt2_vocab, 4, 4, 16, 1, 1337, "bf16", 0};
    write_checkpoint(ckpt, &spec);
    CkptSpec tiny_spec = {tiny_config(), 4, 4, 16, 1, 1337, "bf16", 0};
    write_checkpoint(tiny, &tiny_spec);
    EXPECT("--eval-only of a checkpoint reaches the GPU check", NULL, "no CUDA GPU found", NULL,
           "--eval-only", "--init-from", ckpt, "-j", "", "-o", tmpdir, "-b", "2", "-t", "256");
    EXPECT("--eval-every in training reaches the GPU check", NULL, "no CUDA GPU found", NULL, EVAL_ARGS, "--eval-items", "10");
    EXPECT("missing HellaSwag file", NULL, "hellaswag file", "not found: make the eval token files with python3 "
           "dev/data/eval_prepro.py", EVAL_ARGS, "--hellaswag", missing);
    EXPECT("a data shard as the LAMBADA file", NULL, "bad magic 20240520", "rewrite it with python3 dev/data/eval_prepro.py",
           EVAL_ARGS, "--lambada", train_shard);
    EXPECT("the LAMBADA file as HellaSwag's", NULL, "it holds a last-word task, --hellaswag wants a multiple-choice task",
           NULL, EVAL_ARGS, "--hellaswag", "data/eval/lambada_test.bin");
    EXPECT("GPT-2 tokens for a 128-token vocabulary", NULL, "tokens are for a vocabulary of 50257, the model has 128",
           NULL, "--eval-only", "--init-from", tiny, "-j", "", "-o", tmpdir, "-b", "4", "-t", "16");
    EXPECT("unknown task", NULL, "--eval-tasks: unknown task 'piqa'", NULL, EVAL_ARGS,
           "--eval-tasks", "hellaswag,piqa");
    EXPECT("rows too short for HellaSwag's endings", NULL, "needs rows of at least", "--seq-len is 64",
           "-i", train_shard, "-b", "4", "-t", "64", "--eval-every", "5");
    // the task list and the rows at their limits: a list of 255 characters (hellaswag and commas) and one of 256;
    // rows exactly as long as the longest candidate plus one context token (HellaSwag 87 + 1, LAMBADA 10 + 1,
    // the files' header fields [6]) and one token shorter
    char tasks255[256], tasks256[257];
    snprintf(tasks255, sizeof(tasks255), "hellaswag%0246d", 0);
    for (char* p = tasks255 + 9; *p; p++) *p = ',';
    snprintf(tasks256, sizeof(tasks256), "%s,", tasks255);
    const CliCase rows[] = {
        {"--eval-tasks naming hellaswag twice", NULL, "--eval-tasks names 'hellaswag' twice", NULL,
         {EVAL_ARGS, "--eval-tasks", "hellaswag,hellaswag"}},
        {"--eval-tasks of commas only", NULL, "--eval-tasks is empty: name hellaswag, lambada or both", NULL,
         {EVAL_ARGS, "--eval-tasks", ","}},
        {"--eval-tasks of 255 characters", NULL, GPU_CHECK, NULL, {EVAL_ARGS, "--eval-tasks", tasks255}},
        {"--eval-tasks of 256 characters", NULL, "is too long", NULL, {EVAL_ARGS, "--eval-tasks", tasks256}},
        {"HellaSwag in rows of 88 tokens", NULL, GPU_CHECK, NULL, {EVAL_ARGS, "--eval-tasks", "hellaswag", "-t", "88"}},
        {"HellaSwag in rows of 87 tokens", NULL, "hellaswag: a candidate of 87 tokens needs rows of at least 88 tokens",
         "--seq-len is 87", {EVAL_ARGS, "--eval-tasks", "hellaswag", "-t", "87"}},
        {"LAMBADA in rows of 11 tokens", NULL, GPU_CHECK, NULL, {EVAL_ARGS, "--eval-tasks", "lambada", "-t", "11"}},
        {"LAMBADA in rows of 10 tokens", NULL, "lambada: a candidate of 10 tokens needs rows of at least 11 tokens",
         "--seq-len is 10", {EVAL_ARGS, "--eval-tasks", "lambada", "-t", "10"}},
        {"--eval-dump naming a file", NULL, "exists and is not a directory", train_shard,
         {EVAL_ARGS, "--eval-dump", train_shard}},
    };
    run_cases(rows, sizeof(rows) / sizeof(rows[0]));
    char corrupt[128];   // one flipped byte in the item stream
    snprintf(corrupt, sizeof(corrupt), "%s/lambada_damaged.bin", tmpdir);
    copy_file("data/eval/lambada_test.bin", corrupt);
    damage(corrupt, -100);
    EXPECT("a damaged LAMBADA file", NULL, "the item stream is damaged (CRC32", corrupt,
           EVAL_ARGS, "--lambada", corrupt);
    remove(corrupt);
    remove(ckpt);
    remove(tiny);
    char eval_log[128];
    snprintf(eval_log, sizeof(eval_log), "%s/eval.jsonl", tmpdir);
    remove(eval_log);
}

// --bf16-forward-from: the option's values, the recipes it can switch, and resuming across the switch. The
// model has 16 channels, so that nvfp4 (16-wide blocks) can quantize it.
// Values and files that used to get through the CPU checks (a probe of the command line, 2026-12-05).
static void test_values(void) {
    EXPECT("--bf16-first/last-layers summing past INT_MAX", NULL, "exceed the 12 blocks", NULL,
           "-i", train_shard, "--recipe", "nvfp4", "--bf16-first-layers", "2147483647", "--bf16-last-layers", "1");
    EXPECT("a value missing before the next option", NULL, "option -o needs a value, but the next argument is the "
           "option '--eval-only'", "--out-dir=VALUE", "-i", train_shard, "-o", "--eval-only");
    EXPECT("a switch given a separate value", NULL, "--eval-only is a switch", "--eval-only=on",
           "-i", train_shard, "--eval-only", "on");
    EXPECT("a number outside the float range", NULL, "--lr: 1e39 is outside the range of a float", NULL,
           "-i", train_shard, "--lr", "1e39");
    EXPECT("a slot spec of only a space (was nvfp4)", NULL, "an empty spec", NULL,
           "-i", train_shard, "--recipe", "nvfp4", "--fprop-x", " ");
    EXPECT("a file as --out-dir", NULL, "exists and is not a directory", train_shard,
           "-i", train_shard, "-j", "", "-b", "2", "-t", "16", "-o", train_shard);
    // a training shard holding a token id past the model's vocabulary (was found only when the shard was loaded,
    // after the GPU was set up)
    char oov[128];
    snprintf(oov, sizeof(oov), "%s/oov.bin", tmpdir);
    {
        int32_t header[SHARD_HEADER_INTS] = {0};
        header[0] = SHARD_MAGIC; header[1] = SHARD_VERSION; header[2] = 100;
        uint16_t t[100];
        for (int i = 0; i < 100; i++) t[i] = (uint16_t)i;
        t[50] = 60000;
        FILE* f = fopen_check(oov, "wb");
        fwrite_check(header, sizeof(int32_t), SHARD_HEADER_INTS, f, oov);
        fwrite_check(t, sizeof(uint16_t), 100, f, oov);
        fclose_check(f, oov);
    }
    EXPECT("a token past the vocabulary in the training data", NULL,
           "token 60000 at position 50 is >= the vocabulary size 50257", oov,
           "-i", oov, "-j", "", "-o", tmpdir, "-b", "2", "-t", "16");
    remove(oov);
    // a tokenizer (version 2) whose end-of-text id is outside its own vocabulary
    char tok[128];
    snprintf(tok, sizeof(tok), "%s/tok_eot.bin", tmpdir);
    {
        uint32_t h[256] = {0};
        h[0] = TOKENIZER_MAGIC; h[1] = 2; h[2] = 4; h[3] = 9;
        FILE* f = fopen_check(tok, "wb");
        fwrite_check(h, sizeof(uint32_t), 256, f, tok);
        for (int i = 0; i < 4; i++) {
            const uint8_t rec[2] = {1, (uint8_t)('a' + i)};
            fwrite_check(rec, 1, 2, f, tok);
        }
        fclose_check(f, tok);
    }
    EXPECT("a tokenizer's end-of-text id past its tokens", NULL, "its end-of-text token 9 is outside its 4 tokens", tok,
           "-i", train_shard, "-j", "", "-o", tmpdir, "-b", "2", "-t", "16", "--tokenizer", tok);
    remove(tok);
    // checkpoints with impossible headers: a negative step; a head size the attention kernels cannot take
    char ck[128];
    snprintf(ck, sizeof(ck), "%s/odd.bin", tmpdir);
    CkptSpec neg = {tiny_config(), -5, 4, 16, 1, 1337, "bf16", 64};
    write_checkpoint(ck, &neg);
    EXPECT("a checkpoint at step -5", NULL, "its header says -5 steps", ck, RESUME_ARGS, "--init-from", ck);
    GPTConfig hs12 = tiny_config();
    hs12.channels = 24;
    hs12.num_heads = 2;
    CkptSpec odd = {hs12, 4, 4, 16, 1, 1337, "bf16", 64};
    write_checkpoint(ck, &odd);
    EXPECT("a checkpoint whose head size is 12", NULL, "the head size (channels 24 / heads 2) must be a multiple of 8",
           ck, RESUME_ARGS, "--init-from", ck);
    remove(ck);
}

static void test_bf16_forward(void) {
    EXPECT("--bf16-forward-from 0", NULL, "--bf16-forward-from 0 is outside (0, 1]", "leave the option out",
           "-i", train_shard, "--recipe", "nvfp4", "--bf16-forward-from", "0");
    EXPECT("--bf16-forward-from 1.5", NULL, "--bf16-forward-from 1.5 is outside (0, 1]", NULL,
           "-i", train_shard, "--recipe", "nvfp4", "--bf16-forward-from", "1.5");
    EXPECT("--bf16-forward-from 10%", NULL, "expects a fraction of the run in (0, 1]", "got '10%'",
           "-i", train_shard, "--recipe", "nvfp4", "--bf16-forward-from", "10%");
    EXPECT("--bf16-forward-from with the bf16 recipe", NULL, "runs no forward GEMM in FP4", "a BF16 recipe",
           "-i", train_shard, "--bf16-forward-from", "0.1");
    EXPECT("--bf16-forward-from with --fp4-gemm fp8, only fprop folding", NULL, "once the forward GEMMs are BF16",
           "use --fp4-gemm auto", "-i", train_shard, "--recipe", "mxfp4", "--dgrad-dy", "nvfp4", "--wgrad-dy", "nvfp4",
           "--fp4-gemm", "fp8", "--bf16-forward-from", "0.1");
    EXPECT("--bf16-forward-from with --fp4-gemm fp8 reaches the GPU check", NULL, "no CUDA GPU found", NULL,
           "-i", train_shard, "-j", "", "-o", tmpdir, "--recipe", "mxfp4", "-b", "4", "-t", "16", "--fp4-gemm", "fp8",
           "--bf16-forward-from", "0.1");
    EXPECT("--bf16-forward-from with --fp4-fprop off", NULL, "nothing to switch to BF16", "--fp4-fprop off",
           "-i", train_shard, "--recipe", "nvfp4", "--fp4-fprop", "off", "--bf16-forward-from", "0.1");
    EXPECT("valid --bf16-forward-from reaches the GPU check", NULL, "no CUDA GPU found", NULL,
           "-i", train_shard, "-j", "", "-o", tmpdir, "--recipe", "nvfp4", "-b", "4", "-t", "16", "--bf16-forward-from", "0.1");

    GPTConfig c16 = tiny_config();
    c16.channels = 16;
    char ckpt[128], other[128];
    snprintf(ckpt, sizeof(ckpt), "%s/ckpt_00000004.bin", tmpdir);
    snprintf(other, sizeof(other), "%s/other.bin", tmpdir);
    // 10 steps, the last 25% (2.5, rounded up: 3) in BF16: the switch at step 7
    CkptSpec before = {c16, 4, 4, 16, 1, 1337, "nvfp4", 0, 0.25f, 10, 0, 0};
    write_checkpoint(ckpt, &before);
#define R16 RESUME_ARGS, "--recipe", "nvfp4"
    EXPECT("resume before the switch, same schedule", NULL, "no CUDA GPU found", NULL, R16, "--resume", ckpt,
           "--bf16-forward-from", "0.25");
    EXPECT("resume dropping --bf16-forward-from", NULL, "cannot resume", "from step 7 of 10", R16, "--resume", ckpt);
    EXPECT("resume with --steps moving the switch", NULL, "this run asks for --bf16-forward-from 0.25: forward GEMMs "
           "in BF16 from step 15 of 20", "--allow-recipe-change on", RESUME_ARGS, "--recipe", "nvfp4", "--steps", "20",
           "--resume", ckpt, "--bf16-forward-from", "0.25");
    EXPECT("the same, allowed", NULL, "no CUDA GPU found", NULL, RESUME_ARGS, "--recipe", "nvfp4", "--steps", "20",
           "--resume", ckpt, "--bf16-forward-from", "0.25", "--allow-recipe-change", "on");
    CkptSpec after = before;
    after.step = 8;
    write_checkpoint(other, &after);
    EXPECT("resume after the switch (in the switched state)", NULL, "no CUDA GPU found", NULL, R16, "--resume", other,
           "--bf16-forward-from", "0.25");
    after.bf16_forward_state = 1;   // BF16 forward off at step 8, after a switch at 7
    write_checkpoint(other, &after);
    EXPECT("a schedule whose state contradicts its step", NULL, "its recipe schedule", "inconsistent", R16, "--resume",
           other, "--bf16-forward-from", "0.25");
    // a version-2 checkpoint (before the recipe schedule section) resumes as one without a switch
    CkptSpec v2 = {c16, 4, 4, 16, 1, 1337, "nvfp4", 0, 0.0f, 0, 0, 1};
    write_checkpoint(other, &v2);
    EXPECT("a version-2 checkpoint still resumes", NULL, "no CUDA GPU found", NULL, R16, "--resume", other);
    EXPECT("a version-2 checkpoint has no switch to keep", NULL, "it was trained with no BF16 forward tail",
           "--allow-recipe-change on", R16, "--resume", other, "--bf16-forward-from", "0.25");
#undef R16
    remove(ckpt);
    remove(other);
}

// check_options: every check, every side of every range.
static void test_option_checks(void) {
    const CliCase cases[] = {
        {"--batch-size 0", NULL, "--batch-size must be positive (got 0)", NULL, {BASE_ARGS, "-b", "0"}},
        {"--batch-size -1", NULL, "--batch-size must be positive (got -1)", NULL, {BASE_ARGS, "-b", "-1"}},
        {"--batch-size 1", NULL, GPU_CHECK, NULL, {BASE_ARGS, "-b", "1"}},
        {"--seq-len 0", NULL, "--seq-len must be positive (got 0)", NULL, {BASE_ARGS, "-t", "0"}},
        {"--seq-len 1", NULL, GPU_CHECK, NULL, {BASE_ARGS, "-t", "1"}},
        {"--steps 0", NULL, "--steps must be positive (got 0)", NULL, {BASE_ARGS, "--steps", "0"}},
        {"--steps 1", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--steps", "1"}},
        {"--lr 0", NULL, "--lr must be positive", NULL, {BASE_ARGS, "--lr", "0"}},
        {"--lr -0", NULL, "--lr must be positive", NULL, {BASE_ARGS, "--lr", "-0"}},
        {"--lr 1.2e-38 (near the smallest normal float)", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--lr", "1.2e-38"}},
        {"--warmup -1", NULL, "--warmup must be >= 0", NULL, {BASE_ARGS, "--warmup", "-1"}},
        {"--warmup 0", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--warmup", "0"}},
        {"--final-lr-frac -1e-30", NULL, "--final-lr-frac must be in [0, 1]", NULL, {BASE_ARGS, "--final-lr-frac", "-1e-30"}},
        {"--final-lr-frac 0", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--final-lr-frac", "0"}},
        {"--final-lr-frac 1", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--final-lr-frac", "1"}},
        {"--final-lr-frac 1.0000001", NULL, "--final-lr-frac must be in [0, 1]", NULL,
         {BASE_ARGS, "--final-lr-frac", "1.0000001"}},
        {"--wsd-decay-frac -1e-30", NULL, "--wsd-decay-frac must be in [0, 1]", NULL,
         {BASE_ARGS, "--wsd-decay-frac", "-1e-30"}},
        {"--wsd-decay-frac 0", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--wsd-decay-frac", "0"}},
        {"--wsd-decay-frac 1", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--wsd-decay-frac", "1"}},
        {"--wsd-decay-frac 1.0000001", NULL, "--wsd-decay-frac must be in [0, 1]", NULL,
         {BASE_ARGS, "--wsd-decay-frac", "1.0000001"}},
        {"--beta1 -1e-30", NULL, "--beta1/--beta2 must be in [0, 1)", NULL, {BASE_ARGS, "--beta1", "-1e-30"}},
        {"--beta1 0", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--beta1", "0"}},
        {"--beta1 0.99999994 (the float below 1)", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--beta1", "0.99999994"}},
        {"--beta1 1", NULL, "--beta1/--beta2 must be in [0, 1)", NULL, {BASE_ARGS, "--beta1", "1"}},
        {"--beta2 -1e-30", NULL, "--beta1/--beta2 must be in [0, 1)", NULL, {BASE_ARGS, "--beta2", "-1e-30"}},
        {"--beta2 0", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--beta2", "0"}},
        {"--beta2 0.99999994 (the float below 1)", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--beta2", "0.99999994"}},
        {"--beta2 1", NULL, "--beta1/--beta2 must be in [0, 1)", NULL, {BASE_ARGS, "--beta2", "1"}},
        {"--eps 0", NULL, ADAM, NULL, {BASE_ARGS, "--eps", "0"}},
        {"--eps 1.2e-38", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--eps", "1.2e-38"}},
        {"--weight-decay -1e-30", NULL, ADAM, NULL, {BASE_ARGS, "--weight-decay", "-1e-30"}},
        {"--weight-decay 0", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--weight-decay", "0"}},
        {"--grad-clip -1e-30", NULL, ADAM, NULL, {BASE_ARGS, "--grad-clip", "-1e-30"}},
        {"--grad-clip 0 (off)", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--grad-clip", "0"}},
        {"--val-every -1", NULL, PERIODS, NULL, {BASE_ARGS, "--val-every", "-1"}},
        {"--val-every 0", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--val-every", "0"}},
        {"--val-batches -1", NULL, PERIODS, NULL, {BASE_ARGS, "--val-batches", "-1"}},
        {"--val-batches 0 (the whole split)", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--val-batches", "0"}},
        {"--sample-every -1", NULL, PERIODS, NULL, {BASE_ARGS, "--sample-every", "-1"}},
        {"--sample-every 0", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--sample-every", "0"}},
        {"--sample-tokens -1", NULL, PERIODS, NULL, {BASE_ARGS, "--sample-tokens", "-1"}},
        {"--sample-tokens 0", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--sample-tokens", "0"}},
        {"--ckpt-every -2", NULL, "--ckpt-every must be >= 0, or -1 for no checkpoint at all", NULL,
         {BASE_ARGS, "--ckpt-every", "-2"}},
        {"--ckpt-every -1 (no checkpoint)", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--ckpt-every", "-1"}},
        {"--init-from with --resume", NULL, "--init-from and --resume exclude each other", NULL,
         {BASE_ARGS, "--init-from", "a.bin", "--resume", "b.bin"}},
        {"--eval-every -1", NULL, "--eval-every and --eval-items must be >= 0", NULL, {BASE_ARGS, "--eval-every", "-1"}},
        {"--eval-every 0 (off)", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--eval-every", "0"}},
        {"--eval-items -1", NULL, "--eval-every and --eval-items must be >= 0", NULL, {BASE_ARGS, "--eval-items", "-1"}},
        {"--eval-items 0 (all)", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--eval-items", "0"}},
        {"an empty --out-dir", NULL, "--out-dir must not be empty", NULL, {BASE_ARGS, "-o", ""}},
        {"--diag-every -1", NULL, "--diag-every must be >= 0 (0: off)", NULL, {BASE_ARGS, "--diag-every", "-1"}},
        {"--diag-every 0", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--diag-every", "0"}},
        {"--lora-svd-rank -1", NULL, "--lora-svd-rank must be >= 0 (0: off)", NULL, {BASE_ARGS, "--lora-svd-rank", "-1"}},
        {"--lora-svd-every 0", NULL, "--lora-svd-every must be >= 1", NULL, {BASE_ARGS, "--lora-svd-every", "0"}},
        {"--lora-svd-rank 12 (not a multiple of 8)", NULL, "the rank must be a positive multiple of 8", NULL,
         {BASE_ARGS, "--recipe", "nvfp4", "--lora-svd-rank", "12"}},
        {"--lora-svd-rank with the bf16 recipe", NULL, "does not quantize the forward weight (fprop.w)", NULL,
         {BASE_ARGS, "--lora-svd-rank", "16"}},
        {"--lora-svd-rank with SR on fprop.w", NULL, "fprop.w rounds stochastically", NULL,
         {BASE_ARGS, "--recipe", "nvfp4", "--fprop-w", "nvfp4-2d,sr", "--lora-svd-rank", "16"}},
        {"--lora-svd-rank 16 with nvfp4", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--recipe", "nvfp4", "--lora-svd-rank", "16"}},
        {"--spike-z -1e-30", NULL, "--spike-z must be >= 0 (0: off)", NULL, {BASE_ARGS, "--spike-z", "-1e-30"}},
        {"--spike-z 0", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--spike-z", "0"}},
        {"--peak-tflops 0 (an infinite MFU in the log)", NULL, "--peak-tflops must be positive", NULL,
         {BASE_ARGS, "--peak-tflops", "0"}},
        {"--peak-tflops 1.2e-38", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--peak-tflops", "1.2e-38"}},
        {"--bf16-first-layers -2", NULL, BF16_BLOCKS, NULL, {BASE_ARGS, "--bf16-first-layers", "-2"}},
        {"--bf16-first-layers -1", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--bf16-first-layers", "-1"}},
        {"--bf16-last-layers -2", NULL, BF16_BLOCKS, NULL, {BASE_ARGS, "--bf16-last-layers", "-2"}},
        {"--bf16-last-layers -1", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--bf16-last-layers", "-1"}},
        {"--n-layer -1", NULL, SHAPE_FLAGS, NULL, {BASE_ARGS, "--n-layer", "-1"}},
        {"--n-layer 0 (the model's)", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--n-layer", "0"}},
        {"--n-embd -1", NULL, SHAPE_FLAGS, NULL, {BASE_ARGS, "--n-embd", "-1"}},
        {"--n-embd 0", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--n-embd", "0"}},
        {"--n-head -1", NULL, SHAPE_FLAGS, NULL, {BASE_ARGS, "--n-head", "-1"}},
        {"--n-head 0", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--n-head", "0"}},
        {"--kv-heads -1", NULL, SHAPE_FLAGS, NULL, {BASE_ARGS, "--kv-heads", "-1"}},
        {"--kv-heads 0", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--kv-heads", "0"}},
        {"--mlp-hidden -1", NULL, SHAPE_FLAGS, NULL, {BASE_ARGS, "--mlp-hidden", "-1"}},
        {"--mlp-hidden 0", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--mlp-hidden", "0"}},
        {"--rope-theta -1e-30", NULL, SHAPE_FLAGS, NULL, {BASE_ARGS, "--rope-theta", "-1e-30"}},
        {"--rope-theta 0", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--rope-theta", "0"}},
        {"--norm-eps -1e-30", NULL, SHAPE_FLAGS, NULL, {BASE_ARGS, "--norm-eps", "-1e-30"}},
        {"--norm-eps 0", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--norm-eps", "0"}},
        // malformed numbers (llmc/run/args.h, option_number_ok): refused by the parser, before any check
        {"--steps ' 8' (a leading space)", NULL, "--steps expects an integer, got ' 8'", NULL, {BASE_ARGS, "--steps", " 8"}},
        {"--steps 2147483648", NULL, "--steps: 2147483648 is outside the range of an int", NULL,
         {BASE_ARGS, "--steps", "2147483648"}},
        {"--lr 0x1p-3 (hexadecimal)", NULL, "--lr expects a number, got '0x1p-3'", NULL, {BASE_ARGS, "--lr", "0x1p-3"}},
        {"--eval-only without a checkpoint", NULL, "--eval-only evaluates a checkpoint", "--init-from CKPT",
         {BASE_ARGS, "--eval-only"}},
        {"--eval-only with --resume", NULL, "--eval-only evaluates a checkpoint", "(not --resume)",
         {BASE_ARGS, "--eval-only", "--resume", "latest"}},
    };
    run_cases(cases, sizeof(cases) / sizeof(cases[0]));
}

static const char* const ENV_WORLD0[] = {"WORLD_SIZE=0", "RANK=0", NULL};
static const char* const ENV_WORLD_BAD[] = {"WORLD_SIZE=2x", "RANK=0", NULL};
static const char* const ENV_NO_RANK[] = {"WORLD_SIZE=2", NULL};
static const char* const ENV_RANK2[] = {"WORLD_SIZE=2", "RANK=2", NULL};
static const char* const ENV_RANK1[] = {"WORLD_SIZE=2", "RANK=1", "LOCAL_RANK=1", NULL};

// plan_launch, plan_model, plan_recipe, plan_schedule: the checks no other case here reaches, and the valid side of
// each limit.
static void test_plan_checks(void) {
    char ck[128], ck_adam[128], ck_adam0[128], ck_shard[128], ck_rng[128], ck_text[128], empty[128];
    snprintf(ck, sizeof(ck), "%s/table.bin", tmpdir);
    snprintf(ck_adam, sizeof(ck_adam), "%s/table_adam.bin", tmpdir);
    snprintf(ck_adam0, sizeof(ck_adam0), "%s/table_adam0.bin", tmpdir);
    snprintf(ck_shard, sizeof(ck_shard), "%s/table_shard.bin", tmpdir);
    snprintf(ck_rng, sizeof(ck_rng), "%s/table_rng.bin", tmpdir);
    snprintf(ck_text, sizeof(ck_text), "%s/table_text.bin", tmpdir);
    snprintf(empty, sizeof(empty), "%s/empty", tmpdir);
    if (mkdir(empty, 0755) != 0) CHECK(0, "mkdir %s", empty);
    CkptSpec spec = {tiny_config(), 4, 4, 16, 1, 1337, "bf16", 0};
    write_checkpoint(ck, &spec);
    CkptSpec adam = spec;
    adam.adam_t_offset = 1;                 // 5 AdamW updates in 4 steps
    write_checkpoint(ck_adam, &adam);
    CkptSpec adam0 = spec;
    adam0.step = 0; adam0.adam_t_offset = -1;   // -1 updates
    write_checkpoint(ck_adam0, &adam0);
    CkptSpec shard = spec;
    shard.optimizer_shard = 1;
    write_checkpoint(ck_shard, &shard);
    CkptSpec rng = spec;
    rng.rng_step_offset = 1;
    write_checkpoint(ck_rng, &rng);
    CkptSpec text = spec;
    text.long_text = 1;
    write_checkpoint(ck_text, &text);
    const CliCase cases[] = {
        // plan_launch: the launcher's variables, and the batch arithmetic at its limit of 2^24 tokens per micro-batch
        {"WORLD_SIZE=0", ENV_WORLD0, "WORLD_SIZE=0: the world size must be at least 1", NULL, {BASE_ARGS}},
        {"WORLD_SIZE=2x", ENV_WORLD_BAD, "environment variable WORLD_SIZE='2x' is not a non-negative integer", NULL,
         {BASE_ARGS}},
        {"WORLD_SIZE without RANK", ENV_NO_RANK, "WORLD_SIZE=2 is set but RANK is not", NULL, {BASE_ARGS}},
        {"RANK=2 of WORLD_SIZE=2", ENV_RANK2, "RANK=2 is not below WORLD_SIZE=2", NULL, {BASE_ARGS}},
        {"RANK=1 of WORLD_SIZE=2", ENV_RANK1, GPU_CHECK, NULL, {BASE_ARGS}},
        {"B x T = 2^24 tokens passes the size check", NULL, "--total-batch 1 must be a multiple",
         "16384 x 1024 x 1 = 16777216", {BASE_ARGS, "-b", "16384", "-t", "1024", "--total-batch", "1"}},
        {"B x T = 2^24 + 1024 tokens", NULL, "16385 x --seq-len 1024 = 16778240 tokens per micro-batch is more than the "
         "16777216", NULL, {BASE_ARGS, "-b", "16385", "-t", "1024"}},
        {"--total-batch -1", NULL, "--total-batch -1 is negative", NULL, {BASE_ARGS, "--total-batch", "-1"}},
        {"--total-batch 0 (one micro-batch)", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--total-batch", "0"}},
        {"--total-batch 64: two micro-batches", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--total-batch", "64"}},
        // plan_model: the checkpoint's header, its run state against this launch, and the model's positions
        {"--resume latest in a directory without one", NULL, "--resume latest: no checkpoint (ckpt_XXXXXXXX.bin) in",
         empty, {BASE_ARGS, "-o", empty, "--resume", "latest"}},
        {"--n-layer with a checkpoint", NULL, "a checkpoint's weights fix the model's shape", "with --init-from",
         {RESUME_ARGS, "--init-from", ck, "--n-layer", "1"}},
        {"--n-embd with a checkpoint", NULL, "a checkpoint's weights fix the model's shape", NULL,
         {RESUME_ARGS, "--init-from", ck, "--n-embd", "8"}},
        {"--n-head with a checkpoint", NULL, "a checkpoint's weights fix the model's shape", NULL,
         {RESUME_ARGS, "--init-from", ck, "--n-head", "1"}},
        {"--mlp-hidden with a checkpoint", NULL, "a checkpoint's weights fix the model's shape", NULL,
         {RESUME_ARGS, "--init-from", ck, "--mlp-hidden", "8"}},
        {"--rope-theta with a checkpoint", NULL, "a checkpoint's weights fix the model's shape", NULL,
         {RESUME_ARGS, "--init-from", ck, "--rope-theta", "1"}},
        {"--norm-eps with a checkpoint", NULL, "a checkpoint's weights fix the model's shape", NULL,
         {RESUME_ARGS, "--init-from", ck, "--norm-eps", "1e-5"}},
        {"--tie-embeddings on with a checkpoint", NULL, "a checkpoint's weights fix the model's shape", NULL,
         {RESUME_ARGS, "--init-from", ck, "--tie-embeddings", "on"}},
        {"shape flags at their defaults with a checkpoint", NULL, GPU_CHECK, NULL,
         {RESUME_ARGS, "--init-from", ck, "--n-layer", "0", "--norm-eps", "0", "--tie-embeddings", "default"}},
        {"a checkpoint with 5 AdamW updates in 4 steps", NULL, "its header says 4 steps and 5 AdamW updates", ck_adam,
         {RESUME_ARGS, "--init-from", ck_adam}},
        {"a checkpoint with -1 AdamW updates", NULL, "its header says 0 steps and -1 AdamW updates", ck_adam0,
         {RESUME_ARGS, "--init-from", ck_adam0}},
        {"an optimizer shard as the checkpoint", NULL, "is the optimizer shard of rank 1", "(ckpt_00000004.bin)",
         {RESUME_ARGS, "--init-from", ck_shard}},
        {"an rng section at another step", NULL, "its rng section is at step 5, its header at step 4", ck_rng,
         {RESUME_ARGS, "--resume", ck_rng}},
        {"a recipe text of 1500 bytes", NULL, "its recipe text is 1500 bytes, more than this program writes", ck_text,
         {RESUME_ARGS, "--resume", ck_text}},
        {"resume with --zero on", NULL, "on 1 process(es) with ZeRO on: it was written by 1 process(es) with ZeRO off",
         NULL, {RESUME_ARGS, "--zero", "on", "--resume", ck}},
        {"resume with another accumulation", NULL, "written with gradient accumulation 1; this run has 2", NULL,
         {RESUME_ARGS, "--total-batch", "128", "--resume", ck}},
        {"resume at step 4 of --steps 5", NULL, GPU_CHECK, NULL, {RESUME_ARGS, "--steps", "5", "--resume", ck}},
        {"--seq-len 1024, d12's positions", NULL, GPU_CHECK, NULL, {BASE_ARGS, "-t", "1024"}},
        {"--seq-len 1025", NULL, "--seq-len 1025 exceeds the model's 1024 positions", NULL, {BASE_ARGS, "-t", "1025"}},
        {"--seq-len 17 over a checkpoint's 16 positions", NULL, "--seq-len 17 exceeds the model's 16 positions", NULL,
         {RESUME_ARGS, "-t", "17", "--init-from", ck}},
        // plan_model, a new model: the shape flags (config_apply_shape, config_check)
        {"--mlp-hidden on a GPT-2 model", NULL, "are Llama's options", NULL, {BASE_ARGS, "--mlp-hidden", "8"}},
        {"--rope-theta on a GPT-2 model", NULL, "are Llama's options", NULL, {BASE_ARGS, "--rope-theta", "1"}},
        {"--norm-eps on a GPT-2 model", NULL, "are Llama's options", NULL, {BASE_ARGS, "--norm-eps", "1e-5"}},
        {"--tie-embeddings on, GPT-2's own", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--tie-embeddings", "on"}},
        {"36 channels", NULL, "model config: channels must be a multiple of 8 (got 36)", "--n-layer",
         {BASE_ARGS, "--n-embd", "36", "--n-head", "1"}},
        {"40 channels", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--n-embd", "40", "--n-head", "1"}},
        {"64 channels on 3 heads", NULL, "model config: channels 64 not divisible by heads 3", NULL,
         {BASE_ARGS, "--n-embd", "64", "--n-head", "3"}},
        {"a head size of 12", NULL, "the head size (channels 48 / heads 4) must be a multiple of 8", NULL,
         {BASE_ARGS, "--n-embd", "48", "--n-head", "4"}},
        {"a head size of 16", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--n-embd", "48", "--n-head", "3"}},
        {"a Llama head size of 40", NULL, "a Llama head size must be 32, 64 or 128", "= 40",
         {BASE_ARGS, "--model", "llama-tiny", "--n-embd", "160"}},
        {"a Llama head size of 128", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--model", "llama-tiny", "--n-embd", "512"}},
        {"--kv-heads 1 (one for all heads)", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--model", "llama-30m", "--kv-heads", "1"}},
        {"an MLP width of 104", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--model", "llama-tiny", "--mlp-hidden", "104"}},
        // the widths the program's ints take (4C, SwiGLU's 2H), on both sides; far past them, no product overflows first
        {"2^27 channels", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--n-embd", "134217728", "--n-head", "1"}},
        {"2^27 + 8 channels", NULL, "134217736 channels are more than the 134217728 this program takes", NULL,
         {BASE_ARGS, "--n-embd", "134217736", "--n-head", "1"}},
        {"2^31 - 8 channels (4C was -32)", NULL, "2147483640 channels are more than the 134217728", NULL,
         {BASE_ARGS, "--n-embd", "2147483640", "--n-head", "1"}},
        {"a Llama MLP 2^29 wide", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--model", "llama-tiny", "--mlp-hidden", "536870912"}},
        {"a Llama MLP 2^29 + 8 wide", NULL, "an MLP 536870920 wide is more than the 536870912 this program takes", NULL,
         {BASE_ARGS, "--model", "llama-tiny", "--mlp-hidden", "536870920"}},
        // plan_recipe: the presets and slot specs, the BF16 blocks, recipe_check's rules, the shapes
        {"--recipe: an unknown preset", NULL, "--recipe expects one of", "got 'fp3'", {BASE_ARGS, "--recipe", "fp3"}},
        {"bad --fprop-w spec", NULL, "--fprop-w 'nvfp4,7x7'", "block '7x7'",
         {BASE_ARGS, "--recipe", "nvfp4", "--fprop-w", "nvfp4,7x7"}},
        {"bad --dgrad-dy spec", NULL, "--dgrad-dy 'nvfp4,7x7'", "block '7x7'",
         {BASE_ARGS, "--recipe", "nvfp4", "--dgrad-dy", "nvfp4,7x7"}},
        {"bad --dgrad-w spec", NULL, "--dgrad-w 'nvfp4,7x7'", "block '7x7'",
         {BASE_ARGS, "--recipe", "nvfp4", "--dgrad-w", "nvfp4,7x7"}},
        {"bad --wgrad-dy spec", NULL, "--wgrad-dy 'nvfp4,7x7'", "block '7x7'",
         {BASE_ARGS, "--recipe", "nvfp4", "--wgrad-dy", "nvfp4,7x7"}},
        {"bad --wgrad-x spec", NULL, "--wgrad-x 'nvfp4,7x7'", "block '7x7'",
         {BASE_ARGS, "--recipe", "nvfp4", "--wgrad-x", "nvfp4,7x7"}},
        {"12 of 12 blocks BF16 at the start", NULL, GPU_CHECK, NULL,
         {BASE_ARGS, "--recipe", "nvfp4", "--bf16-first-layers", "12", "--bf16-last-layers", "0"}},
        {"13 of 12 blocks BF16 at the start", NULL, "--bf16-first-layers 13 + --bf16-last-layers 0 exceed the 12 blocks",
         NULL, {BASE_ARGS, "--recipe", "nvfp4", "--bf16-first-layers", "13", "--bf16-last-layers", "0"}},
        {"12 of 12 blocks BF16 at the end", NULL, GPU_CHECK, NULL,
         {BASE_ARGS, "--recipe", "nvfp4", "--bf16-first-layers", "0", "--bf16-last-layers", "12"}},
        {"13 of 12 blocks BF16 at the end", NULL, "--bf16-first-layers 0 + --bf16-last-layers 13 exceed the 12 blocks",
         NULL, {BASE_ARGS, "--recipe", "nvfp4", "--bf16-first-layers", "0", "--bf16-last-layers", "13"}},
        {"6 + 6 of 12 blocks BF16", NULL, GPU_CHECK, NULL,
         {BASE_ARGS, "--recipe", "nvfp4", "--bf16-first-layers", "6", "--bf16-last-layers", "6"}},
        {"6 + 7 of 12 blocks BF16", NULL, "--bf16-first-layers 6 + --bf16-last-layers 7 exceed the 12 blocks", NULL,
         {BASE_ARGS, "--recipe", "nvfp4", "--bf16-first-layers", "6", "--bf16-last-layers", "7"}},
        {"--qk-fp8 on a BF16 recipe", NULL, "--qk-fp8: the recipe quantizes nothing", NULL, {BASE_ARGS, "--qk-fp8", "on"}},
        {"--deterministic off", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--deterministic", "off"}},
        {"--attention-fp4 nvfp4-2d", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--attention-fp4", "nvfp4-2d"}},
        {"--attention-fp4 with 32x32 tiles at T = 16", NULL, "multiples of the spec's block size 32", "--seq-len 16",
         {BASE_ARGS, "--attention-fp4", "mxfp4-2d"}},
        {"--attention-fp4 with a Hadamard", NULL, "--attention-fp4 'nvfp4,h16': a Hadamard rotation", NULL,
         {BASE_ARGS, "--attention-fp4", "nvfp4,h16"}},
        {"--attention-fp4-backward bf16 without a quantizing spec", NULL, "--attention-fp4-backward bf16 needs "
         "--attention-fp4 with a quantizing spec", NULL, {BASE_ARGS, "--attention-fp4-backward", "bf16"}},
        {"--attention-fp4-ds without --attention-fp4", NULL, "--attention-fp4-ds 'nvfp4' needs --attention-fp4 SPEC",
         NULL, {BASE_ARGS, "--attention-fp4-ds", "nvfp4"}},
        {"--optimizer-state nvfp4", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--optimizer-state", "nvfp4"}},
        {"--optimizer-state fp8", NULL, "--optimizer-state expects one of fp32|nvfp4", "got 'fp8'",
         {BASE_ARGS, "--optimizer-state", "fp8"}},
        {"--optimizer muon", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--optimizer", "muon"}},
        {"--optimizer muon, every Muon option", NULL, GPU_CHECK, NULL,
         {BASE_ARGS, "--optimizer", "muon", "--muon-scale", "keller", "--muon-momentum", "0.9", "--muon-nesterov", "off",
          "--muon-split-qkv", "on", "--ns-fp4", "off", "--master-weights", "fp32"}},
        {"--optimizer sgd", NULL, "--optimizer expects one of adamw|muon", "got 'sgd'", {BASE_ARGS, "--optimizer", "sgd"}},
        {"--optimizer muon --zero on", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--optimizer", "muon", "--zero", "on"}},
        {"--optimizer muon --optimizer-state nvfp4", NULL, "--optimizer muon with --optimizer-state nvfp4 is not built",
         NULL, {BASE_ARGS, "--optimizer", "muon", "--optimizer-state", "nvfp4"}},
        {"--muon-momentum 1", NULL, "--muon-momentum must be in [0, 1)", NULL, {BASE_ARGS, "--muon-momentum", "1"}},
        {"--deterministic maybe", NULL, "--deterministic expects on or off", "got 'maybe'", {BASE_ARGS, "--deterministic", "maybe"}},
        {"a Hadamard on fprop.x alone", NULL, "the two operands of fprop must use the same Hadamard transform",
         "fprop.x: h16, fprop.w: h0", {BASE_ARGS, "--recipe", "nvfp4", "--fprop-x", "nvfp4,h16"}},
        {"a Hadamard on dgrad.dy alone", NULL, "the two operands of dgrad must use the same Hadamard transform",
         "dgrad.dy: h16, dgrad.w: h0", {BASE_ARGS, "--recipe", "nvfp4", "--dgrad-dy", "nvfp4,sr,h16"}},
        {"wgrad: fixed signs and seeded signs", NULL, "the two operands of wgrad must use the same Hadamard", NULL,
         {BASE_ARGS, "--recipe", "nvfp4", "--wgrad-x", "nvfp4,h16,seed=3"}},
        {"wgrad: signs of seed 1 and seed 2", NULL, "the two operands of wgrad must use the same Hadamard", NULL,
         {BASE_ARGS, "--recipe", "ufp4", "--wgrad-x", "int4,h16,seed=2"}},
        {"ufp4: the same seeded signs everywhere", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--recipe", "ufp4"}},
        {"h32 on wgrad, the kernels' largest", NULL, GPU_CHECK, NULL,
         {BASE_ARGS, "--recipe", "nvfp4", "--wgrad-dy", "nvfp4,sr,h32,fixed", "--wgrad-x", "nvfp4,h32,fixed"}},
        {"h64 on wgrad", NULL, "Hadamard size 64 on wgrad: the GPU kernels go up to 32", NULL,
         {BASE_ARGS, "--recipe", "nvfp4", "--wgrad-dy", "nvfp4,sr,h64,fixed", "--wgrad-x", "nvfp4,h64,fixed"}},
        {"h32 on fprop", NULL, GPU_CHECK, NULL,
         {BASE_ARGS, "--recipe", "nvfp4", "--fprop-x", "nvfp4,h32", "--fprop-w", "nvfp4-2d,h32"}},
        {"h64 on fprop", NULL, "Hadamard size 64 on fprop: the GPU kernels go up to 32", NULL,
         {BASE_ARGS, "--recipe", "nvfp4", "--fprop-x", "nvfp4,h64", "--fprop-w", "nvfp4-2d,h64"}},
        {"src=fprop on dgrad.dy", NULL, "slot dgrad.dy: src=fprop", "applies to dgrad.w and wgrad.x only",
         {BASE_ARGS, "--recipe", "quartet2", "--dgrad-dy", "nvfp4,eden,src=fprop"}},
        {"src=fprop without eden", NULL, "slot dgrad.w: src=fprop is MS-EDEN's operand source", NULL,
         {BASE_ARGS, "--recipe", "nvfp4", "--dgrad-w", "nvfp4-2d,src=fprop"}},
        {"src=fprop from a rotated W", NULL, "src=fprop needs a forward copy of W without a Hadamard", "--fprop-w",
         {BASE_ARGS, "--recipe", "quartet2", "--fprop-x", "nvfp4,h16", "--fprop-w", "nvfp4,h16"}},
        {"src=fprop from a rotated X (dgrad.w from BF16)", NULL, "src=fprop needs a forward copy of X without a Hadamard",
         "--fprop-x", {BASE_ARGS, "--recipe", "quartet2", "--dgrad-w", "nvfp4,eden", "--fprop-x", "nvfp4,h16", "--fprop-w",
                       "nvfp4,h16"}},
        {"quartet2 with fprop.x in BF16", NULL, GPU_CHECK, NULL,
         {BASE_ARGS, "--recipe", "quartet2", "--fprop-x", "bf16", "-b", "8"}},
        {"quartet2 with fprop.w in BF16", NULL, GPU_CHECK, NULL,
         {BASE_ARGS, "--recipe", "quartet2", "--fprop-w", "bf16", "-b", "8"}},
        {"nvfp4 on 200 channels", NULL, "recipe nvfp4 on a model of 200 channels", "not a multiple of 16",
         {BASE_ARGS, "--recipe", "nvfp4", "--n-embd", "200", "--n-head", "1"}},
        {"nvfp4 on 208 channels", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--recipe", "nvfp4", "--n-embd", "208", "--n-head", "1"}},
        {"nvfp4 on N = 16 tokens", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--recipe", "nvfp4", "-b", "1", "-t", "16"}},
        {"nvfp4 on N = 15 tokens", NULL, "N = 15 tokens", "Change --batch-size or --seq-len",
         {BASE_ARGS, "--recipe", "nvfp4", "-b", "1", "-t", "15"}},
        {"nvfp4 on N = 17 tokens", NULL, "N = 17 tokens", "Change --batch-size or --seq-len",
         {BASE_ARGS, "--recipe", "nvfp4", "-b", "1", "-t", "17"}},
        {"quartet2 on N = 128 tokens", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--recipe", "quartet2", "-b", "8", "-t", "16"}},
        {"quartet2 on N = 112 tokens", NULL, "N must be a multiple of 128", "128-point Hadamard",
         {BASE_ARGS, "--recipe", "quartet2", "-b", "7", "-t", "16"}},
        // plan_schedule
        {"--bf16-forward-from 1 (the whole run)", NULL, GPU_CHECK, NULL,
         {BASE_ARGS, "--recipe", "nvfp4", "--bf16-forward-from", "1"}},
        {"--bf16-forward-from 1.0000001", NULL, "--bf16-forward-from 1.0000001 is outside (0, 1]", NULL,
         {BASE_ARGS, "--recipe", "nvfp4", "--bf16-forward-from", "1.0000001"}},
        {"--bf16-forward-from 1e-30 (the last step)", NULL, GPU_CHECK, NULL,
         {BASE_ARGS, "--recipe", "nvfp4", "--bf16-forward-from", "1e-30"}},
        {"--bf16-forward-from with every block BF16", NULL, "runs no forward GEMM in FP4 (every block is kept in BF16)",
         NULL, {BASE_ARGS, "--recipe", "nvfp4", "--bf16-first-layers", "12", "--bf16-last-layers", "0",
                "--bf16-forward-from", "0.1"}},
        {"--bf16-forward-from with both fprop slots BF16", NULL, "runs no forward GEMM in FP4 (both fprop slots are BF16)",
         NULL, {BASE_ARGS, "--recipe", "nvfp4", "--fprop-x", "bf16", "--fprop-w", "bf16", "--bf16-forward-from", "0.1"}},
        {"--bf16-forward-from with fprop.x alone BF16", NULL, GPU_CHECK, NULL,
         {BASE_ARGS, "--recipe", "nvfp4", "--fprop-x", "bf16", "--bf16-forward-from", "0.1"}},
    };
    run_cases(cases, sizeof(cases) / sizeof(cases[0]));
    // check_resume under ZeRO-1: rank 1 of 2 reads its optimizer shard beside the main file (ckpt_00000004.rank001.bin)
    // before the GPU: missing, of another step, its own
    char zdir[128], ck_zero[160], ck_zero_shard[160];
    snprintf(zdir, sizeof(zdir), "%s/zero", tmpdir);
    snprintf(ck_zero, sizeof(ck_zero), "%s/ckpt_00000004.bin", zdir);
    snprintf(ck_zero_shard, sizeof(ck_zero_shard), "%s/ckpt_00000004.rank001.bin", zdir);
    if (mkdir(zdir, 0755) != 0) CHECK(0, "mkdir %s", zdir);
    CkptSpec zero = spec;
    zero.world = 2; zero.zero = 1;
    write_checkpoint(ck_zero, &zero);
    EXPECT("ZeRO resume of rank 1 without its shard", ENV_RANK1, "cannot open checkpoint", "ckpt_00000004.rank001.bin",
           RESUME_ARGS, "--resume", ck_zero);
    CkptSpec zero_shard = zero;
    zero_shard.optimizer_shard = 1;
    zero_shard.step = 5;
    write_checkpoint(ck_zero_shard, &zero_shard);
    EXPECT("ZeRO resume of rank 1 with a shard of step 5", ENV_RANK1, "does not belong to", ck_zero, RESUME_ARGS,
           "--resume", ck_zero);
    zero_shard.step = 4;
    write_checkpoint(ck_zero_shard, &zero_shard);
    EXPECT("ZeRO resume of rank 1 with its shard", ENV_RANK1, GPU_CHECK, NULL, RESUME_ARGS, "--resume", ck_zero);
    remove(ck_zero_shard); remove(ck_zero); rmdir(zdir);
    // open_data: text samples run the forward on min(T, 256) tokens (16x16 X tiles need a multiple of 16)
    if (test_fixture_ok("text-sample shape limits", "data/gpt2_tokenizer.bin")) {
        const CliCase samples[] = {
            {"text samples over T = 264: 256 tokens", NULL, GPU_CHECK, NULL,
             {BASE_ARGS, "--recipe", "nvfp4", "--fprop-x", "nvfp4-2d", "-t", "264"}},
            {"text samples over T = 248: 248 tokens", NULL, "text samples run the forward on 248 tokens",
             "--sample-every 0", {BASE_ARGS, "--recipe", "nvfp4", "--fprop-x", "nvfp4-2d", "-t", "248"}},
            {"T = 248 without text samples", NULL, GPU_CHECK, NULL,
             {BASE_ARGS, "--recipe", "nvfp4", "--fprop-x", "nvfp4-2d", "-t", "248", "--sample-every", "0"}},
        };
        run_cases(samples, sizeof(samples) / sizeof(samples[0]));
    }
    remove(ck); remove(ck_adam); remove(ck_adam0); remove(ck_shard); remove(ck_rng); remove(ck_text);
    rmdir(empty);
}

// A tokenizer file: its header (magic, version, vocabulary, end-of-text id) and `records` one-byte tokens, the one at
// `empty` (if >= 0) of length 0.
static void write_tokenizer(const char* path, uint32_t magic, uint32_t version, uint32_t vocab, uint32_t eot,
                            int records, int empty) {
    uint32_t h[256] = {0};
    h[0] = magic; h[1] = version; h[2] = vocab; h[3] = eot;
    FILE* f = fopen_check(path, "wb");
    fwrite_check(h, sizeof(uint32_t), 256, f, path);
    for (int i = 0; i < records; i++) {
        const uint8_t rec[2] = {(uint8_t)(i == empty ? 0 : 1), (uint8_t)('a' + i % 26)};
        fwrite_check(rec, 1, i == empty ? 1 : 2, f, path);
    }
    fclose_check(f, path);
}

// tokenizer_init's header checks and the optimizer state kind of a checkpoint header, each on both sides.
static void test_file_checks(void) {
    char t[7][128], ck[128], ck2[128];
    for (int i = 0; i < 7; i++) snprintf(t[i], sizeof(t[i]), "%s/tok%d.bin", tmpdir, i);
    write_tokenizer(t[0], TOKENIZER_MAGIC + 1, 2, 4, 3, 4, -1);
    write_tokenizer(t[1], TOKENIZER_MAGIC, 3, 4, 3, 4, -1);
    write_tokenizer(t[2], TOKENIZER_MAGIC, 1, 1, 0, 1, -1);              // version 1, one token: the smallest
    write_tokenizer(t[3], TOKENIZER_MAGIC, 2, 0, 0, 0, -1);
    write_tokenizer(t[4], TOKENIZER_MAGIC, 2, (1u << 24) + 1, 0, 0, -1);   // (the check comes before the tokens)
    write_tokenizer(t[5], TOKENIZER_MAGIC, 2, 4, 3, 4, 2);
    write_tokenizer(t[6], TOKENIZER_MAGIC, 2, 1u << 24, 0, 0, -1);   // 2^24 passes the check; then its tokens are missing
    snprintf(ck, sizeof(ck), "%s/kind2.bin", tmpdir);
    snprintf(ck2, sizeof(ck2), "%s/kind-1.bin", tmpdir);
    CkptSpec kind = {tiny_config(), 4, 4, 16, 1, 1337, "bf16", 0};
    kind.opt_state = 2;
    write_checkpoint(ck, &kind);
    kind.opt_state = -1;
    write_checkpoint(ck2, &kind);
    // the header's LoRA-SVD rank on both sides of its range [0, 64]: 65 and -1 refused, 64 (with its factors) taken
    char lr[3][128];
    const int lora_ranks[3] = {65, -1, 64};
    for (int i = 0; i < 3; i++) {
        snprintf(lr[i], sizeof(lr[i]), "%s/lora%d.bin", tmpdir, i);
        CkptSpec ls = {tiny_config(), 4, 4, 16, 1, 1337, "bf16", 0};
        ls.lora_rank = lora_ranks[i];
        ls.lora_missing = lora_ranks[i] != 64;
        write_checkpoint(lr[i], &ls);
    }
    const CliCase cases[] = {
        {"a tokenizer of another magic", NULL, "has bad magic 20240329 (want 20240328)", t[0],
         {BASE_ARGS, "--tokenizer", t[0]}},
        {"a tokenizer of version 3", NULL, "has version 3; this program reads versions 1 and 2", t[1],
         {BASE_ARGS, "--tokenizer", t[1]}},
        {"a version-1 tokenizer of one token", NULL, GPU_CHECK, NULL, {BASE_ARGS, "--tokenizer", t[2]}},
        {"a tokenizer of 0 tokens", NULL, "has an implausible vocabulary size 0", t[3], {BASE_ARGS, "--tokenizer", t[3]}},
        {"a tokenizer of 2^24 + 1 tokens", NULL, "has an implausible vocabulary size 16777217", t[4],
         {BASE_ARGS, "--tokenizer", t[4]}},
        {"a tokenizer with an empty token", NULL, "token 2 has length 0 (corrupt file)", t[5],
         {BASE_ARGS, "--tokenizer", t[5]}},
        {"a tokenizer of 2^24 tokens (the largest taken)", NULL, "file truncated (read 0 of 1 items)", t[6],
         {BASE_ARGS, "--tokenizer", t[6]}},
        {"optimizer state kind 2", NULL, "optimizer state kind 2 unknown", ck, {RESUME_ARGS, "--init-from", ck}},
        {"optimizer state kind -1", NULL, "optimizer state kind -1 unknown", ck2, {RESUME_ARGS, "--init-from", ck2}},
        {"a header with LoRA-SVD rank 65", NULL, "LoRA-SVD rank 65 (written by an incompatible build?)", lr[0],
         {RESUME_ARGS, "--init-from", lr[0]}},
        {"a header with LoRA-SVD rank -1", NULL, "LoRA-SVD rank -1 (written by an incompatible build?)", lr[1],
         {RESUME_ARGS, "--init-from", lr[1]}},
        {"a header with LoRA-SVD rank 64 and its factors (the largest taken)", NULL, GPU_CHECK, NULL,
         {RESUME_ARGS, "--init-from", lr[2]}},
    };
    run_cases(cases, sizeof(cases) / sizeof(cases[0]));
    for (int i = 0; i < 7; i++) remove(t[i]);
    remove(ck);
    remove(ck2);
    for (int i = 0; i < 3; i++) remove(lr[i]);
}

// Sets header fields of a checkpoint file (fields[i] = values[i]) and its header checksum again: a file whose header
// is consistent as a container but holds the given model fields.
static void patch_header(const char* path, const int* fields, const int32_t* values, int n) {
    FILE* f = fopen(path, "r+b");
    int32_t h[CKPT_HEADER_INTS];
    char text[4096];
    if (!f || fread(h, sizeof(h), 1, f) != 1 || h[CKPT_H_TEXT_BYTES] >= (int32_t)sizeof(text) ||
        fread(text, 1, (size_t)h[CKPT_H_TEXT_BYTES], f) != (size_t)h[CKPT_H_TEXT_BYTES]) {
        CHECK(0, "rereading %s", path);
        if (f) fclose(f);
        return;
    }
    for (int i = 0; i < n; i++) h[fields[i]] = values[i];
    h[CKPT_H_HEADER_CRC] = (int32_t)ckpt_header_crc_(h, text, (size_t)h[CKPT_H_TEXT_BYTES]);
    fseek(f, 0, SEEK_SET);
    fwrite(h, sizeof(h), 1, f);
    fclose(f);
}

static int32_t float_bits(float x) {
    int32_t b;
    memcpy(&b, &x, 4);
    return b;
}

// config_check on a checkpoint's header: the checks no shape flag reaches (the flags cannot name an architecture, a
// size of 0, a padded vocabulary or a RoPE theta of 0), each next to the nearest header it takes.
static void test_header_shapes(void) {
    char ck[128];
    snprintf(ck, sizeof(ck), "%s/shape.bin", tmpdir);
    const CkptSpec gpt = {tiny_config(), 4, 4, 16, 1, 1337, "bf16", 0};
    CkptSpec llama = gpt;
    llama.config = config_llama(1, 1, 32, 128, 128, 16);   // head size 32, the smallest Llama's kernels take
    const struct {
        const char* what;
        const CkptSpec* spec;
        int n, fields[2];
        int32_t values[2];
        const char* want;
    } cases[] = {
        {"a header of architecture 2", &gpt, 1, {H_ARCH}, {2}, "model config: unknown architecture 2"},
        {"a header of architecture -1", &gpt, 1, {H_ARCH}, {-1}, "model config: unknown architecture -1"},
        {"a header of architecture 1 (Llama)", &llama, 0, {0}, {0}, GPU_CHECK},
        {"a header of 0 layers", &gpt, 1, {H_LAYERS}, {0}, "model config: every size must be positive (layers 0,"},
        {"a header of 1 layer", &gpt, 0, {0}, {0}, GPU_CHECK},
        {"a header of 0 positions", &gpt, 1, {H_MAX_T}, {0}, "every size must be positive", },
        {"a header of vocabulary 0", &gpt, 1, {H_VOCAB}, {0}, "every size must be positive"},
        {"a Llama header of 0 kv heads", &llama, 1, {H_KV_HEADS}, {0}, "every size must be positive"},
        {"a Llama header of MLP width 0", &llama, 1, {H_MLP_HIDDEN}, {0}, "every size must be positive"},
        {"padded vocabulary 128 of 129 tokens", &gpt, 1, {H_VOCAB}, {129},
         "model config: padded vocab 128 must be >= vocab 129 and a multiple of 128"},
        {"padded vocabulary 248 (not a multiple of 128)", &gpt, 2, {H_PADDED_VOCAB, H_VOCAB}, {248, 200},
         "model config: padded vocab 248 must be >= vocab 200"},
        {"RoPE theta 0", &llama, 1, {H_ROPE_THETA}, {0}, "RoPE theta (0) and the RMSNorm epsilon (1e-05) must be positive"},
        {"RoPE theta NaN", &llama, 1, {H_ROPE_THETA}, {float_bits(NAN)}, "RoPE theta (nan)"},
        {"RMSNorm epsilon -1e-30", &llama, 1, {H_NORM_EPS}, {float_bits(-1e-30f)}, "the RMSNorm epsilon (-1e-30)"},
        {"RoPE theta and epsilon at the smallest float", &llama, 2, {H_ROPE_THETA, H_NORM_EPS},
         {float_bits(1.4e-45f), float_bits(1.4e-45f)}, GPU_CHECK},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        write_checkpoint(ck, cases[i].spec);
        patch_header(ck, cases[i].fields, cases[i].values, cases[i].n);
        EXPECT(cases[i].what, NULL, cases[i].want, strcmp(cases[i].want, GPU_CHECK) ? ck : NULL, RESUME_ARGS, "--init-from", ck);
    }
    remove(ck);
}

// --- every check has a case ----------------------------------------------------------------------
// The functions that stop the trainer on a bad command line, launch, checkpoint, recipe or file before the GPU (main()
// calls them before setup_gpu, and the headers' functions they call that stop the program themselves). Every fail_if
// and fail in them whose message has text of its own must have drawn its error from a passing case above: a check
// added without a case fails here, naming its message (dev/test/check_coverage.h). A message that is only a helper's
// ("%s", err) is that helper's to test (batch_plan in test_core, eval_task_load and eval_shape in test_eval,
// quant_spec_parse and the recipe's shape rules in test_recipe, the data loader in test_data).
static const CheckSite CHECK_SITES[] = {
    {"train_gpt_fp4.cu", "check_options"},    {"train_gpt_fp4.cu", "plan_launch"},
    {"train_gpt_fp4.cu", "plan_model"},       {"train_gpt_fp4.cu", "new_model_config"},
    {"train_gpt_fp4.cu", "config_require"},   {"train_gpt_fp4.cu", "open_checkpoint"},
    {"train_gpt_fp4.cu", "check_checkpoint_sizes"}, {"train_gpt_fp4.cu", "read_run_state"},
    {"train_gpt_fp4.cu", "check_resume"},     {"train_gpt_fp4.cu", "check_shard_file"},
    {"train_gpt_fp4.cu", "plan_recipe"},      {"train_gpt_fp4.cu", "plan_schedule"},
    {"train_gpt_fp4.cu", "open_data"},        {"train_gpt_fp4.cu", "open_tasks"},
    {"train_gpt_fp4.cu", "held_out_load"},    {"llmc/run/dist_host.h", "dist_host_env_int_"},
    {"llmc/run/dist_host.h", "dist_host_env_source"}, {"llmc/fp4/recipe.h", "recipe_parse_spec"},
    {"llmc/fp4/recipe.h", "recipe_preset"},   {"llmc/fp4/recipe.h", "recipe_resolve_layers"},
    {"llmc/fp4/recipe.h", "recipe_check"},    {"llmc/run/tokenizer.h", "tokenizer_init"},
    // helpers whose messages only the trainer's rows here draw
    {"llmc/model/gpt_config.h", "config_apply_shape", 1}, {"llmc/model/gpt_config.h", "config_check", 1},
    {"train_gpt_fp4.cu", "plan_ns_fp4"},      {"llmc/fp4/ns_fp4.h", "ns_fp4_set", 1},
    {"llmc/fp4/ns_fp4.h", "ns_fp4_gemms_parse", 1},
};
// Messages no command line can draw, with why.
static const CheckExempt CHECK_EXEMPT[] = {
    {"started as rank %d of %d (%s), but this build has no NCCL", "a build without NCCL only; this one may have it"},
    {"unknown --recipe '%s'", "--recipe's choice list (args.h) refuses an unknown name first; test_recipe calls it"},
    {"recipe %s: the %s evaluation runs the forward on", "an evaluation's rows hold B x T tokens (seq = T) or a multiple "
     "of 64 (seq < T), and a forward slot needs a multiple of at most 32 (its block width), which B x T already is"},
};

int main(int argc, char** argv) {
    if (argc > 1) trainer = argv[1];
    if (access(trainer, X_OK) != 0) {
        test_skip("test_cli", "the trainer is not built (make train_gpt_fp4), or give its path as the argument");
        return test_summary("test_cli");
    }
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_cli_XXXXXX");
    if (!mkdtemp(tmpdir)) { printf("FAIL: mkdtemp\n"); return 1; }
    snprintf(train_shard, sizeof(train_shard), "%s/tiny_train.bin", tmpdir);
    snprintf(val_shard, sizeof(val_shard), "%s/tiny_val.bin", tmpdir);
    write_shard(train_shard, 16 * 200 + 1);   // one batch of the largest case (B 16, T 200)
    write_shard(val_shard, 4 * 16 * 2 + 1);
    test_options_and_batch();
    test_recipes();
    test_fullstack();
    test_ns_fp4();
    test_models();
    test_data_files();
    test_checkpoints();
    test_heldout();
    test_bf16_forward();
    test_values();
    test_option_checks();
    test_plan_checks();
    test_file_checks();
    test_header_shapes();
    check_every_site("test_cli", CHECK_SITES, sizeof(CHECK_SITES) / sizeof(CHECK_SITES[0]), CHECK_EXEMPT,
                     sizeof(CHECK_EXEMPT) / sizeof(CHECK_EXEMPT[0]));
    char log[128];
    snprintf(log, sizeof(log), "%s/log.jsonl", tmpdir);
    remove(log);
    remove(train_shard);
    remove(val_shard);
    if (rmdir(tmpdir) != 0) printf("note: %s not empty, left in place\n", tmpdir);
    return test_summary("test_cli");
}
