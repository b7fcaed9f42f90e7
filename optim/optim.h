/* optim.h: the optimizer interface behind dpt_optim. An optimizer keeps per-parameter state
 * tensors (momentum, moments) in parameter order, so checkpoints can save them by name. */
#ifndef DPT_OPTIM_H
#define DPT_OPTIM_H

#include "dpt.h"

typedef struct dpt_optim_ops {
    const char *name;
    void (*step)(dpt_ctx *ctx, dpt_optim *optim);
} dpt_optim_ops;

#define DPT_OPTIM_MAX_STATE 2

struct dpt_optim {
    const dpt_optim_ops *ops;
    dpt_model *model;
    float lr;
    int64_t steps;      /* completed steps (AdamW's t, SGD's "first step" flag) */
    float hyper[6];     /* the optimizer's own hyper-parameters, named in its file */
    int nstate;         /* state tensors per parameter */
    dpt_tensor **state; /* nparams * nstate, parameter-major */
};

/* Allocate the common part with nstate zeroed state tensors per parameter. */
dpt_optim *dpt_optim_alloc(const dpt_optim_ops *ops, dpt_model *model, float lr, int nstate);

#endif
