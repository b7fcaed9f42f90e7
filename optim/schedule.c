/* schedule.c: learning-rate schedules, as functions of the optimizer step (so a resumed run
 * recomputes the same rate): the warm-up and linear scaling every schedule shares, and the
 * constant schedule. The others register from their own files (sched_*.c). Linear scaling
 * (Goyal et al., "Accurate, Large Minibatch SGD"): with k times the global batch use k times
 * the lr, reached by a linear warm-up from the single-worker lr so that the first steps stay
 * stable. */
#include <math.h>
#include <string.h>

#include "dpt.h"
#include "../runtime/error.h"
#include "../runtime/registry.h"

static const dpt_config_key schedule_keys[] = {
    {"optim", "schedule", DPT_KEY_ENUM, "constant", 1, 0, "@schedule",
     "lr schedule after warm-up: a registered one (built in: constant, cosine (to min_lr), linear (to min_lr), wsd "
     "(held, then to min_lr over the last decay_fraction), inverse_sqrt, multistep (x gamma at each milestone), step "
     "(x gamma every step_epochs))",
     0},
    {"optim", "lr_scaling", DPT_KEY_ENUM, "none", 1, 0, "none|linear",
     "linear: lr x (world size x accum_steps), the linear scaling rule of Goyal et al.", 0},
    {"optim", "warmup_epochs", DPT_KEY_FLOAT, "0", 0, 1e4, NULL,
     "linear warm-up length; ramps from lr (linear scaling) or from 0 (none) to the target lr", 0},
};
DPT_BUILTIN(settings_schedule) = {DPT_KIND_SETTINGS, "schedule", "the learning-rate schedule", schedule_keys,
                                  DPT_COUNT(schedule_keys), NULL};

static double constant_lr(const void *state, double target_lr, double epoch, double progress)
{
    (void)state, (void)epoch, (void)progress;
    return target_lr;
}
static const dpt_schedule_impl constant_impl = {.lr = constant_lr};
DPT_BUILTIN(schedule_constant) = {DPT_KIND_SCHEDULE, "constant", "the lr after warm-up, unchanged", NULL, 0,
                                  &constant_impl};

double dpt_lr_at(const dpt_lr_schedule *s, int64_t step)
{
    if (step < s->warmup_steps)
        return s->start_lr + (s->target_lr - s->start_lr) * (double)(step + 1) / (double)s->warmup_steps;
    double epoch = (double)step / (double)(s->steps_per_epoch > 0 ? s->steps_per_epoch : 1);
    int64_t span = s->total_steps - s->warmup_steps;
    double progress = span > 0 ? (double)(step - s->warmup_steps) / (double)span : 1.0;
    if (progress > 1.0) progress = 1.0;
    return s->impl ? s->impl->lr(s->state.bytes, s->target_lr, epoch, progress) : s->target_lr;
}

bool dpt_lr_schedule_build(const dpt_config *cfg, int world_size, int64_t steps_per_epoch, int64_t total_steps,
                           dpt_lr_schedule *s, dpt_error *err)
{
    double lr = dpt_config_float(cfg, "optim", "lr");
    bool linear = dpt_config_enum(cfg, "optim", "lr_scaling") == 1;
    double k = (double)world_size * (double)dpt_config_int(cfg, "distributed", "accum_steps");
    memset(s, 0, sizeof *s);
    const dpt_registration *r = dpt_config_choice(cfg, "optim", "schedule");
    s->impl = r->impl;
    s->target_lr = linear ? lr * k : lr;
    s->start_lr = linear ? lr : 0.0;
    s->warmup_steps = (int64_t)(dpt_config_float(cfg, "optim", "warmup_epochs") * (double)steps_per_epoch + 0.5);
    s->total_steps = total_steps;
    s->steps_per_epoch = steps_per_epoch;
    DPT_ASSERT(s->impl->state_size <= sizeof s->state.bytes, "schedule %s keeps %zu bytes of state", r->name,
               s->impl->state_size);
    return !s->impl->configure || s->impl->configure(s->state.bytes, cfg, err);
}
