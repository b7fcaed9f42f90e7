/* optim.c: what every optimizer shares: state tensors per parameter (zero-filled, named for
 * checkpoints), the two weight-decay groups, the step count, and building the one [optim] name
 * selects from the registry. */
#include "optim.h"

#include <stdlib.h>
#include <string.h>

#include "../runtime/error.h"
#include "../runtime/registry.h"
#include "../runtime/tensor.h"

static const dpt_config_key optim_keys[] = {
    {"optim", "name", DPT_KEY_ENUM, "adamw", 1, 0, "@optimizer",
     "optimizer: a registered one (built in: adamw, lion, sgd; a program adds its own with dpt_register)", 0},
    {"optim", "lr", DPT_KEY_FLOAT, "0.001", 0, 100, NULL, "learning rate", 0},
    {"optim", "weight_decay", DPT_KEY_FLOAT, "0", 0, 10, NULL,
     "weight decay, in each optimizer's form (sgd: added to the gradient; adamw and lion: decoupled)", 0},
    {"optim", "decay_norm_and_bias", DPT_KEY_BOOL, "true", 1, 0, NULL,
     "weight decay also on the parameters of one dimension: biases and batch-norm scales and shifts (true, as "
     "torch.optim; false: the usual ResNet/ImageNet recipe, decay on weights only)",
     0},
};
DPT_BUILTIN(settings_optim) = {DPT_KIND_SETTINGS, "optim", "the optimizer", optim_keys, DPT_COUNT(optim_keys), NULL};

static dpt_optim *create(const dpt_registration *r, dpt_model *model, const void *hp, float lr, float weight_decay)
{
    const dpt_optim_impl *impl = r->impl;
    int nstate = impl->nstate;
    DPT_ASSERT(nstate >= 0 && nstate <= DPT_OPTIM_MAX_STATE, "optimizer %s: %d state tensors", r->name, nstate);
    dpt_optim *o = calloc(1, sizeof *o);
    if (!o) dpt_fatal("out of host memory for an optimizer");
    o->impl = impl;
    o->name = r->name;
    o->model = model;
    o->lr = lr;
    o->weight_decay = weight_decay;
    o->nstate = nstate;
    o->decay_1d = true; /* torch.optim's default: every parameter */
    o->hp = calloc(1, impl->hp_size + 1);
    if (!o->hp) dpt_fatal("out of host memory for an optimizer");
    if (hp) memcpy(o->hp, hp, impl->hp_size);
    int n = dpt_model_num_params(model);
    o->state = calloc((size_t)(n * nstate) + 1, sizeof *o->state);
    if (!o->state) dpt_fatal("out of host memory for optimizer state");
    for (int i = 0; i < n; i++) {
        dpt_tensor *p = dpt_model_param_at(model, i);
        for (int s = 0; s < nstate; s++) {
            dpt_tensor *t = dpt_tensor_new(p->ctx, p->ndim, p->shape);
            snprintf(t->name, sizeof t->name, "%.48s.%s%d", p->name, r->name, s);
            o->state[i * nstate + s] = t;
        }
    }
    return o;
}

dpt_optim *dpt_optim_new(dpt_model *model, const char *name, const void *hp, float lr, float weight_decay)
{
    const dpt_registration *r = dpt_registry_find(DPT_KIND_OPTIMIZER, name);
    DPT_ASSERT(r, "no optimizer %s is registered", name);
    return create(r, model, hp, lr, weight_decay);
}

const void *dpt_optim_hp(const dpt_optim *o)
{
    return o->hp;
}

/* The (param, grad, state...) list of group 0 (parameters with weight decay) or group 1
 * (without: the 1-D ones when decay_1d is false; empty otherwise) as of now: gradients move
 * (DDP puts them in its buckets), so it is rebuilt each step; its key changes only when a
 * pointer does. */
static int group_of(const dpt_optim *o, const dpt_tensor *p)
{
    return !o->decay_1d && p->ndim <= 1;
}

static const dpt_tensor_list *fused_list(dpt_optim *o, int group)
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

void dpt_optim_step(dpt_ctx *ctx, dpt_optim *o)
{
    int n = dpt_model_num_params(o->model);
    dpt_tensor **arrays = malloc((size_t)(n + 1) * (2 + (size_t)o->nstate) * sizeof *arrays);
    if (!arrays) dpt_fatal("out of host memory in an optimizer step");
    for (int group = 0; group < 2; group++) { /* the parameters with weight decay, then those without */
        dpt_tensor **params = arrays, **grads = arrays + n;
        dpt_optim_group g = {.params = params, .grads = grads, .weight_decay = group ? 0.0f : o->weight_decay};
        for (int s = 0; s < o->nstate; s++)
            g.state[s] = arrays + (size_t)(2 + s) * (size_t)n;
        for (int i = 0; i < n; i++) {
            dpt_tensor *p = dpt_model_param_at(o->model, i);
            if (group_of(o, p) != group) continue;
            params[g.count] = p, grads[g.count] = p->grad;
            for (int s = 0; s < o->nstate; s++)
                arrays[(size_t)(2 + s) * (size_t)n + (size_t)g.count] = o->state[i * o->nstate + s];
            g.count++;
        }
        if (!g.count) continue;
        g.fused = fused_list(o, group);
        o->impl->step(ctx, &g, o->hp, o->lr, o->steps + 1);
    }
    free(arrays);
    o->steps++;
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
    return optim->name;
}

void dpt_optim_free(dpt_optim *optim)
{
    if (!optim) return;
    int n = dpt_model_num_params(optim->model) * optim->nstate;
    for (int i = 0; i < n; i++)
        dpt_tensor_free(optim->state[i]);
    free(optim->state);
    free(optim->hp);
    dpt_tensor_list_free(&optim->list[0]);
    dpt_tensor_list_free(&optim->list[1]);
    free(optim);
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

dpt_optim *dpt_optim_build(dpt_model *model, const dpt_config *cfg, dpt_error *err)
{
    const dpt_registration *r = dpt_config_choice(cfg, "optim", "name");
    const dpt_optim_impl *impl = r->impl;
    void *hp = calloc(1, impl->hp_size + 1);
    if (!hp) dpt_fatal("out of host memory for an optimizer");
    if (impl->configure && !impl->configure(hp, cfg, err)) {
        free(hp);
        return NULL;
    }
    dpt_optim *o = create(r, model, hp, (float)dpt_config_float(cfg, "optim", "lr"),
                          (float)dpt_config_float(cfg, "optim", "weight_decay"));
    free(hp);
    o->decay_1d = dpt_config_bool(cfg, "optim", "decay_norm_and_bias");
    return o;
}
