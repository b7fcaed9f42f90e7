/* optim.c: what every optimizer shares, and building one from [optim]. */
#include "optim.h"

#include <stdlib.h>
#include <string.h>

#include "../runtime/error.h"
#include "../runtime/tensor.h"

dpt_optim *dpt_optim_alloc(const dpt_optim_ops *ops, dpt_model *model, float lr)
{
    int nstate = ops->nstate;
    DPT_ASSERT(nstate <= DPT_OPTIM_MAX_STATE, "%d state tensors", nstate);
    dpt_optim *o = calloc(1, sizeof *o);
    if (!o) dpt_fatal("out of host memory for an optimizer");
    o->ops = ops;
    o->model = model;
    o->lr = lr;
    o->nstate = nstate;
    o->decay_1d = true; /* torch.optim's default: every parameter */
    int n = dpt_model_num_params(model);
    o->state = calloc((size_t)(n * nstate) + 1, sizeof *o->state);
    if (!o->state) dpt_fatal("out of host memory for optimizer state");
    for (int i = 0; i < n; i++) {
        dpt_tensor *p = dpt_model_param_at(model, i);
        for (int s = 0; s < nstate; s++) {
            dpt_tensor *t = dpt_tensor_new(p->ctx, p->ndim, p->shape);
            snprintf(t->name, sizeof t->name, "%.48s.%s%d", p->name, ops->name, s);
            o->state[i * nstate + s] = t;
        }
    }
    return o;
}

void dpt_optim_step(dpt_ctx *ctx, dpt_optim *optim)
{
    optim->ops->step(ctx, optim);
    optim->steps++;
}

void dpt_optim_set_lr(dpt_optim *optim, float lr)
{
    optim->lr = lr;
}
float dpt_optim_lr(const dpt_optim *optim)
{
    return optim->lr;
}
const char *dpt_optim_name(const dpt_optim *optim)
{
    return optim->ops->name;
}

void dpt_optim_free(dpt_optim *optim)
{
    if (!optim) return;
    int n = dpt_model_num_params(optim->model) * optim->nstate;
    for (int i = 0; i < n; i++)
        dpt_tensor_free(optim->state[i]);
    free(optim->state);
    dpt_tensor_list_free(&optim->list[0]);
    dpt_tensor_list_free(&optim->list[1]);
    free(optim);
}

static int group_of(const dpt_optim *o, const dpt_tensor *p)
{
    return !o->decay_1d && p->ndim <= 1;
}

const dpt_tensor_list *dpt_optim_list(dpt_optim *o, int group)
{
    int n = dpt_model_num_params(o->model), count = 0;
    dpt_tensor_list *l = &o->list[group];
    for (int i = 0; i < n; i++)
        count += group_of(o, dpt_model_param_at(o->model, i)) == group;
    if (!l->ptr || l->count != count) {
        dpt_tensor_list_free(l);
        dpt_tensor_list_init(l, count, 2 + o->nstate);
    }
    for (int i = 0, k = 0; i < n; i++) {
        dpt_tensor *p = dpt_model_param_at(o->model, i);
        if (group_of(o, p) != group) continue;
        float *ptrs[2 + DPT_OPTIM_MAX_STATE] = {p->data, p->grad->data};
        for (int s = 0; s < o->nstate; s++)
            ptrs[2 + s] = o->state[i * o->nstate + s]->data;
        dpt_tensor_list_set(l, k++, p->numel, ptrs);
    }
    dpt_tensor_list_seal(l);
    return l;
}

void dpt_optim_set_decay_1d(dpt_optim *o, bool decay)
{
    o->decay_1d = decay;
}

/* What a checkpoint saves and restores, without knowing an optimizer's insides. */
int dpt_optim_num_state(const dpt_optim *o)
{
    return dpt_model_num_params(o->model) * o->nstate;
}
dpt_tensor *dpt_optim_state_at(const dpt_optim *o, int i)
{
    DPT_ASSERT(i >= 0 && i < dpt_optim_num_state(o), "optimizer state %d of %d", i, dpt_optim_num_state(o));
    return o->state[i];
}
int64_t dpt_optim_steps(const dpt_optim *o)
{
    return o->steps;
}
void dpt_optim_set_steps(dpt_optim *o, int64_t steps)
{
    o->steps = steps;
}

static const dpt_optim_ops *const optimizers[] = {&dpt_sgd_ops, &dpt_adamw_ops};

dpt_optim *dpt_optim_build(dpt_model *model, const dpt_config *cfg, dpt_error *err)
{
    const char *name = dpt_config_str(cfg, "optim", "name");
    float lr = (float)dpt_config_float(cfg, "optim", "lr");
    float wd = (float)dpt_config_float(cfg, "optim", "weight_decay");
    for (size_t i = 0; i < sizeof optimizers / sizeof optimizers[0]; i++)
        if (!strcmp(optimizers[i]->name, name)) {
            dpt_optim *o = optimizers[i]->from_config(model, cfg, lr, wd);
            if (o) o->decay_1d = dpt_config_bool(cfg, "optim", "decay_norm_and_bias");
            return o;
        }
    dpt_errorf(err, "[optim] name = %s: unknown optimizer\nHINT: use sgd or adamw", name);
    return NULL;
}
