// recipe_schedule.h: changes of the recipe during a run, decided by the step alone.
// defines: RecipeSchedule, bf16_forward_parse(), bf16_forward_tail_steps(), recipe_schedule_init(),
//          recipe_schedule_bf16_forward_at(), recipe_schedule_describe(), recipe_schedule_same(),
//          recipe_schedule_check(), recipe_schedule_resume(), recipe_forward_quantized(),
//          recipe_with_bf16_forward()
//
// --bf16-forward-from F: the last F of the run's steps run their forward GEMMs in BF16. "Forward GEMMs"
// means fprop (Y = X W^T) of every linear layer the recipe quantizes, both of its operand slots
// (fprop.x, fprop.w; for a QKV linear under --qk-fp8 also its Q/K part); dgrad and wgrad keep the
// recipe's specs (SR, Hadamard and all). NVIDIA's NVFP4 report (arXiv 2509.25149, appendix D, figure 7)
// finds that most of FP4's loss gap comes from the forward pass: switching the forward to BF16 for the
// last 18% of a 10T-token run took the 12B model from 1.5% to 0.5% above FP8, while switching the
// backward alone recovered nothing; torchtitan's NVFP4 recommendations repeat it ("prefer switching only
// the forward-pass GEMMs to bf16", pytorch/torchtitan#3914). Switching only fprop costs about a third of
// the tail's GEMM FLOPs.
//
// The switch is a function of the step, so a resumed run finds it again: the step is fixed when a run
// starts (from --steps then) and stored in every checkpoint with the state (whether the forward was in
// BF16 when it was written), as the checkpoint's "recipe schedule" section (llmc/run/checkpoint.h).
// Plain C: dev/test/test_recipe.c tests the arithmetic, dev/test/test_cli.c the trainer's use of it.
#pragma once
#include <math.h>
#include <errno.h>
#include "llmc/fp4/recipe.h"

// Stored as it is in checkpoints (little-endian, 16 bytes): fixed-size fields only.
typedef struct {
    float bf16_forward_from;    // F in (0, 1]; 0: no switch
    int32_t bf16_forward_step;  // the first step (0-based) whose forward GEMMs run in BF16; -1: no switch
    int32_t steps;              // the --steps it was computed from (for messages)
    int32_t bf16_forward;       // state: 1 when the last step run (the one before a checkpoint's step) used it
} RecipeSchedule;

// Parses --bf16-forward-from's value. 0 on success, else -1 with err saying what is wrong.
static inline int bf16_forward_parse(const char* text, float* out, char* err, size_t n) {
    char* end = NULL;
    errno = 0;
    float f = strtof(text, &end);
    // (strtof alone would also take leading spaces and hexadecimal: " 0.5", "0x0.8p0")
    if (errno || end == text || *end != '\0' || text[0] == ' ' || (text[0] >= '\t' && text[0] <= '\r') ||
        strpbrk(text, "xX")) {
        snprintf(err, n, "--bf16-forward-from expects a fraction of the run in (0, 1], e.g. 0.1 for the last 10%% "
                 "of the steps; got '%s'", text);
        return -1;
    }
    if (!(f > 0.0f && f <= 1.0f)) {   // also NaN and Inf
        snprintf(err, n, "--bf16-forward-from %s is outside (0, 1]: it is the fraction of the steps, at the end of "
                 "the run, whose forward GEMMs run in BF16 (e.g. 0.1 for the last 10%%; leave the option out to "
                 "keep the recipe's forward to the end)", text);
        return -1;
    }
    *out = f;
    return 0;
}

// How many of `steps` steps the tail of fraction f holds: f * steps rounded to nearest (halves up), in double
// so that 0.1 * 1000 is 100 and not 101 (0.1f is 0.100000001), and at least 1 (f > 0 asks for a switch).
static inline int bf16_forward_tail_steps(float f, int steps) {
    if (steps <= 0) return 0;
    long long tail = (long long)floor((double)f * (double)steps + 0.5);
    if (tail < 1) tail = 1;
    if (tail > steps) tail = steps;
    return (int)tail;
}

// f = 0: no switch.
static inline void recipe_schedule_init(RecipeSchedule* s, float f, int steps) {
    memset(s, 0, sizeof(*s));
    s->bf16_forward_from = f;
    s->steps = steps;
    s->bf16_forward_step = f > 0.0f ? steps - bf16_forward_tail_steps(f, steps) : -1;
}

// Whether step `step` (0-based) runs its forward GEMMs in BF16.
static inline int recipe_schedule_bf16_forward_at(const RecipeSchedule* s, int step) {
    return s->bf16_forward_step >= 0 && step >= s->bf16_forward_step;
}

static inline const char* recipe_schedule_describe(const RecipeSchedule* s, char* buf, size_t n) {
    if (s->bf16_forward_step < 0)
        snprintf(buf, n, "no BF16 forward tail");
    else
        snprintf(buf, n, "--bf16-forward-from %g: forward GEMMs in BF16 from step %d of %d", s->bf16_forward_from,
                 s->bf16_forward_step, s->steps);
    return buf;
}

// The same switch (the state aside).
static inline int recipe_schedule_same(const RecipeSchedule* a, const RecipeSchedule* b) {
    if (a->bf16_forward_step < 0 || b->bf16_forward_step < 0) return a->bf16_forward_step < 0 && b->bf16_forward_step < 0;
    return a->bf16_forward_from == b->bf16_forward_from && a->bf16_forward_step == b->bf16_forward_step;
}

// A schedule read from the checkpoint of step `step`: its fields in range and its state the one its switch
// step gives. 0, or -1 with err (a damaged section would fail its CRC first: this catches other builds).
static inline int recipe_schedule_check(const RecipeSchedule* s, int step, char* err, size_t n) {
    const int none = s->bf16_forward_step < 0;
    int ok = none ? s->bf16_forward_step == -1 && s->bf16_forward_from == 0.0f && !s->bf16_forward
                  : s->bf16_forward_from > 0.0f && s->bf16_forward_from <= 1.0f && s->bf16_forward_step < s->steps &&
                        s->bf16_forward == (step > 0 && recipe_schedule_bf16_forward_at(s, step - 1));
    if (!ok)
        snprintf(err, n, "its recipe schedule (switch step %d of %d, fraction %g, BF16 forward %d at step %d) is "
                 "inconsistent (written by an incompatible build?)", s->bf16_forward_step, s->steps,
                 s->bf16_forward_from, s->bf16_forward, step);
    return ok ? 0 : -1;
}

// The schedule a run resumed from a checkpoint follows: the checkpoint's, when this run asks for the same
// switch; another one only with allow_change (the checkpoint's state carries over, so the run switches at
// its first step if the new schedule says otherwise). 0, or -1 with err saying what differs and what to do.
static inline int recipe_schedule_resume(const RecipeSchedule* saved, const RecipeSchedule* asked, int allow_change,
                                         RecipeSchedule* out, char* err, size_t n) {
    if (recipe_schedule_same(saved, asked)) {
        *out = *saved;
        return 0;
    }
    if (!allow_change) {
        char a[160], b[160];
        snprintf(err, n, "it was trained with %s; this run asks for %s (keep --bf16-forward-from and --steps as they "
                 "were, or add --allow-recipe-change on to switch as this run says)",
                 recipe_schedule_describe(saved, a, sizeof(a)), recipe_schedule_describe(asked, b, sizeof(b)));
        return -1;
    }
    *out = *asked;
    out->bf16_forward = saved->bf16_forward;
    return 0;
}

// Whether an L-block model runs some forward GEMM quantized under this (resolved) recipe: what
// --bf16-forward-from can switch.
static inline int recipe_forward_quantized(const Recipe* r, int L) {
    return recipe_quantizes(r, L) && (!quant_spec_is_bf16(&r->slot[SLOT_FPROP_X]) ||
                                      !quant_spec_is_bf16(&r->slot[SLOT_FPROP_W]));
}

// The recipe of the steps after the switch: fprop's two slots in BF16, everything else as it was (with
// --qk-fp8 the Q/K part follows, recipe_qk_spec keeps BF16 slots in BF16).
static inline Recipe recipe_with_bf16_forward(const Recipe* r) {
    Recipe out = *r;
    recipe_disable_gemm(&out, 0);
    return out;
}
