/* schedule.c: learning-rate schedules. Linear scaling (Goyal et al., "Accurate, Large
 * Minibatch SGD"): with k times the global batch use k times the lr, reached by a linear
 * warm-up from the single-worker lr so that early steps stay stable. */
#include <string.h>

#include "dpt.h"

double dpt_lr_at(const dpt_lr_schedule *s, int64_t step)
{
    if (step >= s->warmup_steps) return s->target_lr;
    double frac = (double)(step + 1) / (double)s->warmup_steps;
    return s->start_lr + (s->target_lr - s->start_lr) * frac;
}

dpt_lr_schedule dpt_lr_schedule_build(const dpt_config *cfg, int world_size, int64_t steps_per_epoch)
{
    double lr = dpt_config_float(cfg, "optim", "lr");
    bool linear = strcmp(dpt_config_str(cfg, "optim", "lr_scaling"), "linear") == 0;
    double k = (double)world_size * (double)dpt_config_int(cfg, "distributed", "accum_steps");
    dpt_lr_schedule s = {
        .target_lr = linear ? lr * k : lr,
        .start_lr = linear ? lr : 0.0,
        .warmup_steps = (int64_t)(dpt_config_float(cfg, "optim", "warmup_epochs") * (double)steps_per_epoch + 0.5),
    };
    return s;
}
