/* sched_multistep.c: the multistep schedule: lr x gamma at each milestone epoch (torch's
 * MultiStepLR). */
#include <math.h>

#include "dpt.h"
#include "../runtime/registry.h"

enum { MAX_MILESTONES = 16 };

typedef struct multistep_state {
    double gamma;
    int64_t milestones[MAX_MILESTONES];
    int n;
} multistep_state;

static bool multistep_configure(void *state, const dpt_config *cfg, dpt_error *err)
{
    multistep_state *s = state;
    s->gamma = dpt_config_float(cfg, "optim", "gamma");
    s->n = dpt_config_int_list(cfg, "optim", "milestones", s->milestones, MAX_MILESTONES);
    if (s->n > MAX_MILESTONES)
        return dpt_errorf(err, "%s: [optim] milestones lists %d epochs; the multistep schedule takes at most %d",
                          dpt_config_where(cfg, "optim", "milestones"), s->n, MAX_MILESTONES);
    return true;
}

static double multistep_lr(const void *state, double target_lr, double epoch, double progress)
{
    const multistep_state *s = state;
    (void)progress;
    int passed = 0;
    for (int i = 0; i < s->n; i++)
        passed += epoch >= (double)s->milestones[i];
    return target_lr * pow(s->gamma, passed);
}

static const dpt_schedule_impl multistep_impl = {
    .state_size = sizeof(multistep_state), .configure = multistep_configure, .lr = multistep_lr};

static const dpt_config_key multistep_keys[] = {
    {NULL, "milestones", DPT_KEY_INT_LIST, "30,60,90", 1, 1e6, NULL,
     "epochs at which the lr is multiplied by gamma", 0},
    {NULL, "gamma", DPT_KEY_FLOAT, "0.1", 0, 1, NULL, "the decay factor", 0},
};
DPT_BUILTIN(schedule_multistep) = {DPT_KIND_SCHEDULE, "multistep", "lr x gamma at each milestone epoch",
                                   multistep_keys, DPT_COUNT(multistep_keys), &multistep_impl};
