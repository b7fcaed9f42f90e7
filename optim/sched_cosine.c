/* sched_cosine.c: the cosine schedule: from the target lr down to min_lr along half a cosine
 * over the steps after warm-up (torch's CosineAnnealingLR without restarts). */
#include <math.h>

#include "dpt.h"
#include "../runtime/registry.h"

typedef struct cosine_state {
    double min_lr;
} cosine_state;

static bool cosine_configure(void *state, const dpt_config *cfg, dpt_error *err)
{
    ((cosine_state *)state)->min_lr = dpt_config_float(cfg, "optim", "min_lr");
    (void)err;
    return true;
}

static double cosine_lr(const void *state, double target_lr, double epoch, double progress)
{
    const cosine_state *s = state;
    (void)epoch;
    return s->min_lr + (target_lr - s->min_lr) * 0.5 * (1.0 + cos(M_PI * progress));
}

static const dpt_schedule_impl cosine_impl = {
    .state_size = sizeof(cosine_state), .configure = cosine_configure, .lr = cosine_lr};

static const dpt_config_key cosine_keys[] = {
    {NULL, "min_lr", DPT_KEY_FLOAT, "0", 0, 100, NULL, "final learning rate", 0},
};
DPT_BUILTIN(schedule_cosine) = {DPT_KIND_SCHEDULE, "cosine", "half a cosine from the lr to min_lr", cosine_keys,
                                DPT_COUNT(cosine_keys), &cosine_impl};
