/* optim.h: the optimizer behind dpt_optim. Each optimizer is a registration (its own file:
 * sgd.c, adamw.c, lion.c, ...) whose impl keeps its hyper-parameters in a struct of its own;
 * what they share (state tensors per parameter, the two weight-decay groups, the step count,
 * building one from [optim]) lives in optim.c. */
#ifndef DPT_OPTIM_H
#define DPT_OPTIM_H

#include "dpt.h"
#include "../runtime/backend.h"

struct dpt_optim {
    const dpt_optim_impl *impl;
    const char *name; /* its registration's */
    dpt_model *model;
    float lr, weight_decay;
    int64_t steps;       /* completed steps (AdamW's t, SGD's "first step" flag) */
    void *hp;            /* the impl's hyper-parameters (impl->hp_size bytes) */
    int nstate;          /* state tensors per parameter */
    dpt_tensor **state;  /* nparams * nstate, parameter-major */
    bool decay_1d;       /* weight decay also on 1-D parameters (biases, norm scales, shifts) */
    /* [optim] groups and freeze: rules GLOB -> lr scale (0: frozen) and weight decay (NAN: the
     * optimizer's), the first that matches a parameter's name wins */
    int nrules;
    struct optim_rule {
        char *glob;
        float lr_scale, weight_decay;
    } *rules;
    /* the parameter groups as of now (rebuilt when decay_1d or the rules change): each
     * parameter's group (-1: frozen, never stepped), each group's lr scale and weight decay,
     * and its (param, grad, state...) list for the fused kernels */
    /* [distributed] zero: the elements [lo[i], hi[i]) of parameter i this rank steps (NULL:
     * all); their state tensors are 1-D slices of hi - lo (NULL where empty), or the whole
     * state while `full` (a resumed run's, loaded before dpt_optim_shard) */
    int64_t *lo, *hi;
    bool full;
    /* dpt_optim_set_grad_slices: where element lo[i] of parameter i's gradient is (NULL: in
     * its .grad) */
    float *const *grad_at;
    void (*gather)(int param, float *whole, const float *mine, void *user); /* dpt_optim_set_gather */
    void *gather_user;
    dpt_tensor *whole; /* dpt_optim_state_whole's last */
    bool grouped;
    int *group_of, ngroups;
    float *group_scale, *group_decay;
    dpt_tensor_list *list;
};

#endif
