// test_cli.c: runs ./train_gpt_fp4 with bad command lines, data files and checkpoints, and checks that
// each stops with exit status 1 and one "error:" line that names the problem, before the GPU is touched
// (CPU only, for CI). The trainer runs with CUDA_VISIBLE_DEVICES="" so that on a machine with a GPU too,
// anything that got past the CPU checks would stop with "no CUDA GPU found" instead of training: that
// message is what the valid command lines here must reach, and what no bad one may.
// Checkpoints are written with llmc/run/checkpoint.h and llmc/model/gpt_config.h for a tiny model (1 layer, 8
// channels, vocabulary 128), so they take a few kilobytes.
// usage: build/test_cli [path to train_gpt_fp4]   (default ./train_gpt_fp4; skips if it is not built)
#include <signal.h>
#include <time.h>
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
static void expect_v(const char* what, const char* const* env, const char* want1, const char* want2, ...) {
    const char* args[64];
    int n = 0;
    va_list ap;
    va_start(ap, want2);
    for (const char* a; n < 63 && (a = va_arg(ap, const char*)) != NULL;) args[n++] = a;
    va_end(ap);
    args[n] = NULL;
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
} CkptSpec;

// A checkpoint the trainer would have written after spec->step steps of a one-process run with this
// data: every section the size the trainer expects, run state consistent with the shards.
static void write_checkpoint(const char* path, const CkptSpec* spec) {
    int32_t h[CKPT_HEADER_INTS] = {0};
    config_to_header(&spec->config, h);
    size_t np = num_parameters(&spec->config);
    h[H_STEP] = spec->step; h[H_ADAM_T] = spec->step; h[H_HAS_MASTER] = 0;
    h[H_B] = spec->B; h[H_T] = spec->T; h[H_GRAD_ACCUM] = 1; h[H_WORLD] = spec->world; h[H_ZERO] = 0;
    h[H_RANK] = 0; h[H_HAS_PARAMS] = 1;
    header_set_u64(h, H_OPT_BEGIN_LO, 0);
    size_t opt_count = spec->weights_bytes ? 0 : np;
    header_set_u64(h, H_OPT_COUNT_LO, opt_count);
    Recipe r;
    recipe_preset(&r, spec->recipe);
    recipe_resolve_layers(&r, spec->config.num_layers);
    char text[1024];
    recipe_describe(&r, text, sizeof(text));
    DataLoader dl;
    dataloader_init(&dl, train_shard, spec->B, spec->T, 0, spec->world, 1, (uint64_t)spec->seed, spec->config.vocab_size);
    for (int i = 0; i < spec->step; i++) dataloader_next_batch(&dl);
    DataLoaderState ds = dataloader_get_state(&dl);
    dataloader_free(&dl);
    struct { uint64_t seed; int64_t step; } rng = {(uint64_t)spec->seed, spec->step};   // the trainer's RngState
    double spike[5] = {0};                                                               // and SpikeState
    size_t wbytes = spec->weights_bytes ? spec->weights_bytes : np * 2;
    uint8_t* zeros = (uint8_t*)calloc(1, 4 * opt_count > wbytes ? 4 * opt_count : wbytes);
    CheckpointWriter w;
    ckpt_begin(&w, path, h, text);
    ckpt_section(&w, CKPT_WEIGHTS);
    ckpt_write(&w, zeros, wbytes);
    ckpt_section(&w, CKPT_OPTIMIZER);
    ckpt_write(&w, zeros, 4 * opt_count);   // Adam m
    ckpt_write(&w, zeros, 4 * opt_count);   // Adam v
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
    EXPECT("--ckpt-every below -1", NULL, "--ckpt-every must be >= 0, or -1 for no checkpoint at all", NULL,
           "-i", train_shard, "--ckpt-every", "-2");
    EXPECT("--ckpt-every -1 (no checkpoint) reaches the GPU check", NULL, "no CUDA GPU found", NULL,
           "-i", train_shard, "-j", val_shard, "-o", tmpdir, "-b", "2", "-t", "16", "--ckpt-every", "-1");
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
    EXPECT("--eval-only without a checkpoint", NULL, "--eval-only evaluates a checkpoint", "--init-from CKPT", "--eval-only");
    EXPECT("--eval-only with --resume", NULL, "--eval-only evaluates a checkpoint", "(not --resume)",
           "--eval-only", "--resume", "latest", "-o", tmpdir);
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
    EXPECT("--eval-items below 0", NULL, "--eval-every and --eval-items must be >= 0", NULL, "--eval-items", "-1");
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
    EXPECT("--bf16-first-layers below -1", NULL, "must be >= 0, or -1 for the recipe's rule", NULL,
           "-i", train_shard, "--bf16-first-layers", "-5");
    EXPECT("negative --diag-every", NULL, "--diag-every must be >= 0", NULL, "-i", train_shard, "--diag-every", "-1");
    EXPECT("negative --spike-z", NULL, "--spike-z must be >= 0", NULL, "-i", train_shard, "--spike-z", "-3");
    EXPECT("--peak-tflops 0 (an infinite MFU in the log)", NULL, "--peak-tflops must be positive", NULL,
           "-i", train_shard, "--peak-tflops", "0");
    EXPECT("a value missing before the next option", NULL, "option -o needs a value, but the next argument is the "
           "option '--eval-only'", "--out-dir=VALUE", "-i", train_shard, "-o", "--eval-only");
    EXPECT("a switch given a separate value", NULL, "--eval-only is a switch", "--eval-only=on",
           "-i", train_shard, "--eval-only", "on");
    EXPECT("a number outside the float range", NULL, "--lr: 1e39 is outside the range of a float", NULL,
           "-i", train_shard, "--lr", "1e39");
    EXPECT("a slot spec of only a space (was nvfp4)", NULL, "an empty spec", NULL,
           "-i", train_shard, "--recipe", "nvfp4", "--fprop-x", " ");
    EXPECT("an empty --out-dir", NULL, "--out-dir must not be empty", NULL, "-i", train_shard, "-j", "", "-o", "");
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
    test_models();
    test_data_files();
    test_checkpoints();
    test_heldout();
    test_bf16_forward();
    test_values();
    char log[128];
    snprintf(log, sizeof(log), "%s/log.jsonl", tmpdir);
    remove(log);
    remove(train_shard);
    remove(val_shard);
    if (rmdir(tmpdir) != 0) printf("note: %s not empty, left in place\n", tmpdir);
    return test_summary("test_cli");
}
