/* optim.h: the optimizer interface behind dpt_optim. An optimizer keeps per-parameter state
 * tensors (momentum, moments) in parameter order, so checkpoints can save them by name. */
#ifndef DPT_OPTIM_H
#define DPT_OPTIM_H

#include "dpt.h"
#include "../runtime/backend.h"

/* One optimizer: its name in [optim] name, its state tensors per parameter, its step, and
 * how it is made from [optim] (the table in optim.c lists them, like models/registry.c). */
typedef struct dpt_optim_ops {
    const char *name;
    int nstate;
    void (*step)(dpt_ctx *ctx, dpt_optim *optim);
    dpt_optim *(*from_config)(dpt_model *model, const dpt_config *cfg, float lr, float weight_decay);
} dpt_optim_ops;

extern const dpt_optim_ops dpt_sgd_ops, dpt_adamw_ops;

#define DPT_OPTIM_MAX_STATE 2

struct dpt_optim {
    const dpt_optim_ops *ops;
    dpt_model *model;
    float lr;
    int64_t steps;        /* completed steps (AdamW's t, SGD's "first step" flag) */
    union { /* the optimizer's own hyper-parameters */
        struct {
            float momentum, dampening, weight_decay;
            bool nesterov;
        } sgd;
        struct {
            float beta1, beta2, eps, weight_decay;
        } adamw;
    } hp;
    int nstate;              /* state tensors per parameter */
    dpt_tensor **state;      /* nparams * nstate, parameter-major */
    bool decay_1d;           /* weight decay also on 1-D parameters (biases, norm scales, shifts) */
    dpt_tensor_list list[2]; /* (param, grad, state...) of the decayed, the undecayed parameters */
};

/* The (param, grad, state...) list of group 0 (parameters with weight decay) or group 1
 * (without: the 1-D ones when decay_1d is false; empty otherwise) as of now: gradients move
 * (DDP puts them in its buckets), so it is rebuilt each step; its key changes only when a
 * pointer does. */
const dpt_tensor_list *dpt_optim_list(dpt_optim *o, int group);

/* Allocate the common part with nstate zeroed state tensors per parameter. */
dpt_optim *dpt_optim_alloc(const dpt_optim_ops *ops, dpt_model *model, float lr);

#endif
