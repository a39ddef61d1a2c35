// schedule.h: learning-rate schedules.
// defines: LRSchedule, lr_at_step()
// Linear warmup from lr/warmup to lr over `warmup` steps, then one of:
//   cosine:   from lr down to lr*final_frac along half a cosine, ending at the last step
//   linear:   straight line from lr down to lr*final_frac
//   constant: lr
//   wsd:      warmup-stable-decay: lr until the last decay_frac of the steps, then linear to lr*final_frac
#pragma once
#include <math.h>
#include "llmc/base/common.h"

typedef struct {
    const char* kind;   // "cosine", "linear", "constant", "wsd"
    float lr;
    int warmup;
    int total_steps;
    float final_frac;
    float decay_frac;   // wsd only
} LRSchedule;

static inline float lr_at_step(const LRSchedule* s, int step) {
    if (step < s->warmup) return s->lr * (float)(step + 1) / (float)s->warmup;
    float lo = s->lr * s->final_frac;
    int span = s->total_steps - s->warmup;
    float progress = span > 1 ? (float)(step - s->warmup) / (float)(span - 1) : 1.0f;
    if (progress > 1.0f) progress = 1.0f;
    if (strcmp(s->kind, "constant") == 0) return s->lr;
    if (strcmp(s->kind, "linear") == 0) return s->lr + (lo - s->lr) * progress;
    if (strcmp(s->kind, "cosine") == 0) return lo + 0.5f * (s->lr - lo) * (1.0f + cosf((float)M_PI * progress));
    if (strcmp(s->kind, "wsd") == 0) {
        int decay_steps = (int)ceilf(s->decay_frac * (float)s->total_steps);
        int decay_start = s->total_steps - decay_steps;
        if (step < decay_start || decay_steps <= 0) return s->lr;
        float q = decay_steps > 1 ? (float)(step - decay_start) / (float)(decay_steps - 1) : 1.0f;
        return s->lr + (lo - s->lr) * (q > 1.0f ? 1.0f : q);
    }
    fail("unknown learning-rate schedule '%s'", s->kind);
    return 0.0f;
}
