/* sched_linear.c: schedules that decay to min_lr by the end of the run, as transformer training
 * uses them: linear (Hugging Face's get_linear_schedule_with_warmup; torch's LinearLR to an end
 * factor), warm-up-stable-decay (wsd: the lr held, then decayed over the last decay_fraction of
 * the steps, Hu et al. 2024 "MiniCPM"; its 1 - sqrt shape from Hägele et al. 2024, which
 * resumes cleanly from a checkpoint of the stable phase for a longer run), and the inverse
 * square root (fairseq's inverse_sqrt: lr x sqrt(warm-up / t) after the warm-up). */
#include <math.h>

#include "dpt.h"
#include "../runtime/error.h"
#include "../runtime/registry.h"

typedef struct decay_state {
    double min_lr, fraction, warmup_epochs;
    int shape; /* wsd_shape: 0 linear, 1 sqrt (1 - sqrt), 2 cosine */
} decay_state;

static bool decay_configure(void *state, const dpt_config *cfg, dpt_error *err)
{
    decay_state *s = state;
    s->min_lr = dpt_config_float(cfg, "optim", "min_lr");
    (void)err;
    return true;
}

static double linear_lr(const void *state, double target_lr, double epoch, double progress)
{
    const decay_state *s = state;
    (void)epoch;
    return target_lr + (s->min_lr - target_lr) * progress;
}

static bool wsd_configure(void *state, const dpt_config *cfg, dpt_error *err)
{
    decay_state *s = state;
    s->fraction = dpt_config_float(cfg, "optim", "decay_fraction");
    s->shape = dpt_config_enum(cfg, "optim", "wsd_shape");
    return decay_configure(state, cfg, err); /* min_lr, as linear's */
}

/* Held at the lr until progress 1 - fraction, then from the lr to min_lr over the rest: x runs
 * 0 -> 1 over the decay, and the lr is min_lr + (lr - min_lr) * f(x). */
static double wsd_lr(const void *state, double target_lr, double epoch, double progress)
{
    const decay_state *s = state;
    (void)epoch;
    double start = 1.0 - s->fraction;
    if (progress <= start || s->fraction <= 0) return target_lr;
    double x = (progress - start) / s->fraction;
    double f = s->shape == 0 ? 1.0 - x : s->shape == 1 ? 1.0 - sqrt(x) : 0.5 * (1.0 + cos(M_PI * x));
    return s->min_lr + (target_lr - s->min_lr) * f;
}

static bool inverse_sqrt_configure(void *state, const dpt_config *cfg, dpt_error *err)
{
    decay_state *s = state;
    s->warmup_epochs = dpt_config_float(cfg, "optim", "warmup_epochs");
    if (s->warmup_epochs <= 0)
        return dpt_errorf(err,
                          "%s: [optim] schedule = inverse_sqrt decays as sqrt(warm-up / t), and [optim] "
                          "warmup_epochs is 0\nHINT: set [optim] warmup_epochs (e.g. 0.1, or what 4,000 steps are "
                          "in epochs, fairseq's default)",
                          dpt_config_where(cfg, "optim", "schedule"));
    return true;
}

/* After the warm-up (epoch >= warmup_epochs) lr x sqrt(warmup_epochs / epoch): continuous where
 * the warm-up ends, halved at 4 times its length. */
static double inverse_sqrt_lr(const void *state, double target_lr, double epoch, double progress)
{
    const decay_state *s = state;
    (void)progress;
    return epoch <= s->warmup_epochs ? target_lr : target_lr * sqrt(s->warmup_epochs / epoch);
}

static const dpt_schedule_impl linear_impl = {
    .state_size = sizeof(decay_state), .configure = decay_configure, .lr = linear_lr};
static const dpt_schedule_impl wsd_impl = {
    .state_size = sizeof(decay_state), .configure = wsd_configure, .lr = wsd_lr};
static const dpt_schedule_impl inverse_sqrt_impl = {
    .state_size = sizeof(decay_state), .configure = inverse_sqrt_configure, .lr = inverse_sqrt_lr};

static const dpt_config_key min_lr_keys[] = {
    {NULL, "min_lr", DPT_KEY_FLOAT, "0", 0, 100, NULL, "final learning rate", 0},
};
static const dpt_config_key wsd_keys[] = {
    {NULL, "min_lr", DPT_KEY_FLOAT, "0", 0, 100, NULL, "final learning rate", 0},
    {NULL, "decay_fraction", DPT_KEY_FLOAT, "0.2", 0, 1, NULL,
     "the last fraction of the steps after warm-up over which the lr decays to min_lr", 0},
    {NULL, "wsd_shape", DPT_KEY_ENUM, "sqrt", 1, 0, "linear|sqrt|cosine",
     "the decay's shape: linear, sqrt (1 - sqrt of the decay's progress, Haegele et al. 2024) or half a cosine", 0},
};
DPT_BUILTIN(schedule_linear) = {DPT_KIND_SCHEDULE, "linear", "linearly from the lr to min_lr", min_lr_keys,
                                DPT_COUNT(min_lr_keys), &linear_impl};
DPT_BUILTIN(schedule_wsd) = {DPT_KIND_SCHEDULE, "wsd",
                             "warm-up, stable, decay: the lr held, then decayed to min_lr over the last "
                             "decay_fraction of the steps",
                             wsd_keys, DPT_COUNT(wsd_keys), &wsd_impl};
DPT_BUILTIN(schedule_inverse_sqrt) = {DPT_KIND_SCHEDULE, "inverse_sqrt",
                                      "lr x sqrt(warm-up / t) after the warm-up (fairseq's inverse_sqrt)", NULL, 0,
                                      &inverse_sqrt_impl};
