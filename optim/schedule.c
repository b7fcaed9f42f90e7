/* schedule.c: learning-rate schedules, as functions of the optimizer step (so a resumed run
 * recomputes the same rate). Linear scaling (Goyal et al., "Accurate, Large Minibatch SGD"):
 * with k times the global batch use k times the lr, reached by a linear warm-up from the
 * single-worker lr so that the first steps stay stable. */
#include <math.h>
#include <string.h>

#include "dpt.h"

double dpt_lr_at(const dpt_lr_schedule *s, int64_t step)
{
    if (step < s->warmup_steps)
        return s->start_lr + (s->target_lr - s->start_lr) * (double)(step + 1) / (double)s->warmup_steps;
    double epoch = (double)step / (double)(s->steps_per_epoch > 0 ? s->steps_per_epoch : 1);
    switch (s->kind) {
    case DPT_LR_STEP:
        return s->target_lr * pow(s->gamma, floor(epoch / (double)s->step_epochs));
    case DPT_LR_MULTISTEP: {
        int passed = 0;
        for (int i = 0; i < s->nmilestones; i++)
            passed += epoch >= (double)s->milestones[i];
        return s->target_lr * pow(s->gamma, passed);
    }
    case DPT_LR_COSINE: {
        int64_t span = s->total_steps - s->warmup_steps;
        double t = span > 0 ? (double)(step - s->warmup_steps) / (double)span : 1.0;
        if (t > 1.0) t = 1.0;
        return s->min_lr + (s->target_lr - s->min_lr) * 0.5 * (1.0 + cos(M_PI * t));
    }
    case DPT_LR_CONSTANT:
    case DPT_LR_KIND_COUNT:
        break;
    }
    return s->target_lr;
}

dpt_lr_schedule dpt_lr_schedule_build(const dpt_config *cfg, int world_size, int64_t steps_per_epoch,
                                      int64_t total_steps)
{
    static const char *const names[] = {"constant", "step", "multistep", "cosine"};
    _Static_assert(sizeof names / sizeof names[0] == DPT_LR_KIND_COUNT, "schedule names");
    double lr = dpt_config_float(cfg, "optim", "lr");
    bool linear = strcmp(dpt_config_str(cfg, "optim", "lr_scaling"), "linear") == 0;
    double k = (double)world_size * (double)dpt_config_int(cfg, "distributed", "accum_steps");
    dpt_lr_schedule s = {
        .target_lr = linear ? lr * k : lr,
        .start_lr = linear ? lr : 0.0,
        .min_lr = dpt_config_float(cfg, "optim", "min_lr"),
        .gamma = dpt_config_float(cfg, "optim", "gamma"),
        .warmup_steps =
            (int64_t)(dpt_config_float(cfg, "optim", "warmup_epochs") * (double)steps_per_epoch + 0.5),
        .total_steps = total_steps,
        .steps_per_epoch = steps_per_epoch,
        .step_epochs = dpt_config_int(cfg, "optim", "step_epochs"),
    };
    s.nmilestones = dpt_config_int_list(cfg, "optim", "milestones", s.milestones, 16);
    if (s.nmilestones > 16) s.nmilestones = 16;
    const char *kind = dpt_config_str(cfg, "optim", "schedule");
    for (int i = 0; i < DPT_LR_KIND_COUNT; i++)
        if (strcmp(kind, names[i]) == 0) s.kind = (dpt_lr_kind)i;
    return s;
}
