/* sched_step.c: the step schedule: lr x gamma every step_epochs epochs (torch's StepLR). */
#include <math.h>

#include "dpt.h"
#include "../runtime/registry.h"

typedef struct step_state {
    double gamma;
    int64_t step_epochs;
} step_state;

static bool step_configure(void *state, const dpt_config *cfg, dpt_error *err)
{
    step_state *s = state;
    s->gamma = dpt_config_float(cfg, "optim", "gamma");
    s->step_epochs = dpt_config_int(cfg, "optim", "step_epochs");
    (void)err;
    return true;
}

static double step_lr(const void *state, double target_lr, double epoch, double progress)
{
    const step_state *s = state;
    (void)progress;
    return target_lr * pow(s->gamma, floor(epoch / (double)s->step_epochs));
}

static const dpt_schedule_impl step_impl = {
    .state_size = sizeof(step_state), .configure = step_configure, .lr = step_lr};

static const dpt_config_key step_keys[] = {
    {NULL, "step_epochs", DPT_KEY_INT, "30", 1, 1e6, NULL, "epochs between decays", 0},
    {NULL, "gamma", DPT_KEY_FLOAT, "0.1", 0, 1, NULL, "the decay factor", 0},
};
DPT_BUILTIN(schedule_step) = {DPT_KIND_SCHEDULE, "step", "lr x gamma every step_epochs", step_keys,
                              DPT_COUNT(step_keys), &step_impl};
