/* optim.c: what every optimizer shares: state tensors per parameter (zero-filled, named for
 * checkpoints), parameter groups (weight decay on 1-D parameters or not, [optim] groups' lr
 * scales and decays, [optim] freeze), the step count, and building the one [optim] name selects
 * from the registry. */
#include "optim.h"

#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/ctx.h"
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
    {"optim", "groups", DPT_KEY_STRING, "", 1, 0, NULL,
     "parameter groups: GLOB:LR_SCALE[:WEIGHT_DECAY], comma separated, matched against parameter names (see "
     "--summary) in order, the first match wins, e.g. backbone.*:0.1,fc.*:1:0 (torch.optim's param_groups); the "
     "rest keep lr and weight_decay; decay_norm_and_bias still applies",
     0},
    {"optim", "freeze", DPT_KEY_STRING, "", 1, 0, NULL,
     "parameters kept fixed: GLOBs, comma separated, matched against parameter names, e.g. conv*,bn* (fine-tuning "
     "a head); they are never stepped (no update, no weight decay)",
     0},
};
DPT_BUILTIN(settings_optim) = {DPT_KIND_SETTINGS, "optim", "the optimizer", optim_keys, DPT_COUNT(optim_keys), NULL};

/* The name of state s of parameter p, NAME.OPTIMIZERs, whole, into name (cap bytes); dies
 * naming it when it does not fit (it was cut to the name's first 48 characters: two parameters
 * sharing them had one name, and a checkpoint two records of it). The state tensors' names
 * and the checkpoint's records both come from here. */
static void state_name(char *name, size_t cap, const dpt_tensor *p, const char *optimizer, int s)
{
    int n = snprintf(name, cap, "%s.%s%d", p->name, optimizer, s);
    if (n < 0 || (size_t)n >= cap)
        dpt_fatal("optimizer %s: the state name of %s is %d characters, more than %zu\nHINT: a shorter optimizer "
                  "name", optimizer, p->name, n, cap - 1);
}

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
            char what[128];
            snprintf(what, sizeof what, "%.24s's state of %.80s", r->name, p->name);
            dpt_tensor *t = dpt_tensor_new_for(p->ctx, p->ndim, p->shape, what);
            state_name(t->name, sizeof t->name, p, r->name, s);
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
bool dpt_optim_whole_tensors(const dpt_optim *o)
{
    return o->impl->whole_tensors;
}

/* The elements of parameter i this rank steps. */
static void slice_of(const dpt_optim *o, int i, int64_t *lo, int64_t *hi)
{
    *lo = o->lo ? o->lo[i] : 0;
    *hi = o->hi ? o->hi[i] : dpt_model_param_at(o->model, i)->numel;
}

/* Each parameter's group from the rules and decay_1d: groups are the distinct (lr scale,
 * weight decay) pairs in parameter order; a frozen parameter is in none. */
static void build_groups(dpt_optim *o)
{
    int n = dpt_model_num_params(o->model);
    for (int g = 0; g < o->ngroups; g++)
        dpt_tensor_list_free(&o->list[g]);
    free(o->list), free(o->group_of), free(o->group_scale), free(o->group_decay);
    o->group_of = malloc((size_t)(n + 1) * sizeof *o->group_of);
    o->group_scale = malloc((size_t)(n + 1) * sizeof *o->group_scale);
    o->group_decay = malloc((size_t)(n + 1) * sizeof *o->group_decay);
    o->list = calloc((size_t)n + 1, sizeof *o->list);
    if (!o->group_of || !o->group_scale || !o->group_decay || !o->list) dpt_fatal("out of host memory for an optimizer");
    o->ngroups = 0;
    for (int i = 0; i < n; i++) {
        const dpt_tensor *p = dpt_model_param_at(o->model, i);
        float scale = 1.0f, decay = o->weight_decay;
        for (int r = 0; r < o->nrules; r++)
            if (fnmatch(o->rules[r].glob, p->name, 0) == 0) {
                scale = o->rules[r].lr_scale;
                if (!isnan(o->rules[r].weight_decay)) decay = o->rules[r].weight_decay;
                break;
            }
        if (!o->decay_1d && p->ndim <= 1) decay = 0.0f;
        int g = -1;
        int64_t lo, hi;
        slice_of(o, i, &lo, &hi);
        if (scale > 0 && hi > lo) { /* frozen, or all of it another rank's: not stepped here */
            for (g = 0; g < o->ngroups; g++)
                if (o->group_scale[g] == scale && o->group_decay[g] == decay) break;
            if (g == o->ngroups) o->group_scale[g] = scale, o->group_decay[g] = decay, o->ngroups++;
        }
        o->group_of[i] = g;
    }
    o->grouped = true;
}

/* Element lo of parameter i's gradient (p's). */
static float *grad_slice(const dpt_optim *o, int i, const dpt_tensor *p, int64_t lo)
{
    return o->grad_at ? o->grad_at[i] : p->grad->data + lo;
}

/* The (param, grad, state...) list of a group as of now: gradients move (DDP puts them in its
 * buckets), so it is rebuilt each step; its key changes only when a pointer does. */
static const dpt_tensor_list *fused_list(dpt_optim *o, int group)
{
    int n = dpt_model_num_params(o->model), count = 0;
    dpt_tensor_list *l = &o->list[group];
    for (int i = 0; i < n; i++)
        count += o->group_of[i] == group;
    if (!l->ptr || l->count != count) {
        dpt_tensor_list_free(l);
        dpt_tensor_list_init(l, count, 2 + o->nstate);
    }
    for (int i = 0, k = 0; i < n; i++) {
        dpt_tensor *p = dpt_model_param_at(o->model, i);
        if (o->group_of[i] != group) continue;
        int64_t lo, hi;
        slice_of(o, i, &lo, &hi);
        float *ptrs[2 + DPT_OPTIM_MAX_STATE] = {p->data + lo, grad_slice(o, i, p, lo)};
        for (int s = 0; s < o->nstate; s++)
            ptrs[2 + s] = o->state[i * o->nstate + s]->data;
        dpt_tensor_list_set(l, k++, hi - lo, ptrs);
    }
    dpt_tensor_list_seal(l);
    return l;
}

void dpt_optim_step(dpt_ctx *ctx, dpt_optim *o)
{
    if (!o->grouped) build_groups(o);
    int n = dpt_model_num_params(o->model);
    dpt_tensor **arrays = malloc((size_t)(n + 1) * (2 + (size_t)o->nstate) * sizeof *arrays);
    if (!arrays) dpt_fatal("out of host memory in an optimizer step");
    for (int group = 0; group < o->ngroups; group++) {
        dpt_tensor **params = arrays, **grads = arrays + n;
        dpt_optim_group g = {.params = params, .grads = grads, .weight_decay = o->group_decay[group]};
        for (int s = 0; s < o->nstate; s++)
            g.state[s] = arrays + (size_t)(2 + s) * (size_t)n;
        for (int i = 0; i < n; i++) {
            dpt_tensor *p = dpt_model_param_at(o->model, i);
            if (o->group_of[i] != group) continue;
            params[g.count] = p, grads[g.count] = p->grad;
            if (o->lo) { /* sharded: the slices as 1-D views */
                int64_t lo = o->lo[i], len = o->hi[i] - o->lo[i];
                params[g.count] = dpt_tensor_wrap(ctx, p->data + lo, 1, &len);
                grads[g.count] = dpt_tensor_wrap(ctx, grad_slice(o, i, p, lo), 1, &len);
            }
            for (int s = 0; s < o->nstate; s++)
                arrays[(size_t)(2 + s) * (size_t)n + (size_t)g.count] = o->state[i * o->nstate + s];
            g.count++;
        }
        if (!g.count) continue;
        g.fused = fused_list(o, group);
        o->impl->step(ctx, &g, o->hp, o->lr * o->group_scale[group], o->steps + 1);
        for (int k = 0; o->lo && k < g.count; k++)
            dpt_tensor_free(params[k]), dpt_tensor_free(grads[k]);
    }
    free(arrays);
    o->steps++;
}

/* [optim] groups / freeze: the rules, each glob matching at least one parameter. */
static bool parse_rules(dpt_optim *o, const char *text, bool freeze, const char *where, dpt_error *err)
{
    char *copy = dpt_strf("%s", text);
    bool ok = true;
    for (char *save = NULL, *item = strtok_r(copy, ",", &save); item && ok; item = strtok_r(NULL, ",", &save)) {
        while (*item == ' ')
            item++;
        char *end = item + strlen(item);
        while (end > item && end[-1] == ' ')
            *--end = '\0';
        struct optim_rule rule = {.lr_scale = 0.0f, .weight_decay = NAN};
        char *colon = freeze ? NULL : strchr(item, ':');
        if (!freeze) {
            char *stop = NULL;
            double scale = colon ? strtod(colon + 1, &stop) : NAN, decay = NAN;
            if (stop && *stop == ':') decay = strtod(stop + 1, &stop);
            if (!colon || colon == item || !stop || *stop || !(scale >= 0 && scale <= 1e6) ||
                !(isnan(decay) || (decay >= 0 && decay <= 10))) {
                ok = dpt_errorf(err, "%s: [optim] groups: '%s' is not GLOB:LR_SCALE[:WEIGHT_DECAY] (a scale in [0, "
                                     "1e6], a decay in [0, 10])\nHINT: e.g. groups = backbone.*:0.1,fc.*:1:0",
                                where, item);
                break;
            }
            *colon = '\0';
            rule.lr_scale = (float)scale, rule.weight_decay = (float)decay;
        }
        if (!*item) {
            ok = dpt_errorf(err, "%s: [optim] %s: an empty pattern", where, freeze ? "freeze" : "groups");
            break;
        }
        int hits = 0, n = dpt_model_num_params(o->model);
        for (int i = 0; i < n; i++)
            hits += fnmatch(item, dpt_model_param_at(o->model, i)->name, 0) == 0;
        if (!hits) {
            ok = dpt_errorf(err, "%s: [optim] %s: '%s' matches no parameter of %s (its first: %s)\nHINT: a "
                                 "parameter is named LAYER.weight, LAYER.bias ...: ./train CONFIG --summary lists the "
                                 "layers, ./train --inspect CKPT every tensor",
                            where, freeze ? "freeze" : "groups", item, dpt_model_name(o->model),
                            n ? dpt_model_param_at(o->model, 0)->name : "none");
            break;
        }
        rule.glob = dpt_strf("%s", item);
        o->rules = realloc(o->rules, (size_t)(o->nrules + 1) * sizeof *o->rules);
        if (!o->rules) dpt_fatal("out of host memory for an optimizer");
        o->rules[o->nrules++] = rule;
    }
    free(copy);
    o->grouped = false;
    return ok;
}

int dpt_optim_describe(const dpt_optim *optim, char *buf, size_t cap)
{
    dpt_optim *o = (dpt_optim *)optim;
    if (!o->grouped) build_groups(o);
    int n = dpt_model_num_params(o->model);
    size_t at = 0;
    buf[0] = '\0';
    int64_t frozen = 0, frozen_tensors = 0;
    for (int i = 0; i < n; i++)
        if (o->group_of[i] < 0) frozen += dpt_model_param_at(o->model, i)->numel, frozen_tensors++;
    for (int g = 0; g < o->ngroups && at < cap; g++) {
        int64_t count = 0, tensors = 0;
        const char *first = "";
        for (int i = 0; i < n; i++)
            if (o->group_of[i] == g) {
                if (!tensors++) first = dpt_model_param_at(o->model, i)->name;
                count += dpt_model_param_at(o->model, i)->numel;
            }
        at += (size_t)snprintf(buf + at, cap - at, "%sgroup %d: lr %g (x%g) weight_decay %g, %lld tensors (%lld "
                                                   "parameters, from %s)",
                               g ? " | " : "", g, (double)(o->lr * o->group_scale[g]), (double)o->group_scale[g],
                               (double)o->group_decay[g], (long long)tensors, (long long)count, first);
    }
    if (frozen_tensors && at < cap)
        snprintf(buf + at, cap - at, "%sfrozen: %lld tensors (%lld parameters)", at ? " | " : "",
                 (long long)frozen_tensors, (long long)frozen);
    return o->ngroups;
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
    for (int g = 0; g < optim->ngroups; g++)
        dpt_tensor_list_free(&optim->list[g]);
    free(optim->list), free(optim->group_of), free(optim->group_scale), free(optim->group_decay);
    for (int r = 0; r < optim->nrules; r++)
        free(optim->rules[r].glob);
    free(optim->rules);
    free(optim->lo), free(optim->hi);
    dpt_tensor_free(optim->whole);
    free(optim);
}

static void copy_range(dpt_tensor *dst, int64_t at, const dpt_tensor *src, int64_t from, int64_t n)
{
    dst->ctx->be->dev->copy_d2d(dst->ctx, dst->data + at, src->data + from, (size_t)n * sizeof(float));
}

/* A state tensor of parameter i: its whole shape, or its slice [lo, hi) in one dimension. */
static dpt_tensor *state_tensor(const dpt_optim *o, int i, int s, bool whole, int64_t lo, int64_t hi)
{
    const dpt_tensor *p = dpt_model_param_at(o->model, i);
    int64_t len = hi - lo;
    dpt_tensor *t = whole ? dpt_tensor_new(p->ctx, p->ndim, p->shape) : dpt_tensor_new(p->ctx, 1, &len);
    state_name(t->name, sizeof t->name, p, o->name, s);
    return t;
}

/* The slices: each whole state tensor's elements [lo, hi) kept, the rest freed. */
static void keep_slices(dpt_optim *o)
{
    if (!o->lo || !o->full) return;
    int n = dpt_model_num_params(o->model);
    for (int i = 0; i < n; i++)
        for (int s = 0; s < o->nstate; s++) {
            dpt_tensor **t = &o->state[i * o->nstate + s];
            dpt_tensor *slice = NULL;
            if (o->hi[i] > o->lo[i]) {
                slice = state_tensor(o, i, s, false, o->lo[i], o->hi[i]);
                copy_range(slice, 0, *t, o->lo[i], o->hi[i] - o->lo[i]);
            }
            dpt_tensor_free(*t);
            *t = slice;
        }
    o->full = false;
}

void dpt_optim_shard(dpt_optim *o, const int64_t *lo, const int64_t *hi)
{
    DPT_ASSERT(!o->impl->whole_tensors, "optimizer %s reads whole tensors: it cannot be sharded", o->name);
    DPT_ASSERT(!o->lo, "optimizer sharded twice");
    int n = dpt_model_num_params(o->model);
    o->lo = malloc((size_t)(n + 1) * sizeof *o->lo);
    o->hi = malloc((size_t)(n + 1) * sizeof *o->hi);
    if (!o->lo || !o->hi) dpt_fatal("out of host memory for an optimizer");
    memcpy(o->lo, lo, (size_t)n * sizeof *lo);
    memcpy(o->hi, hi, (size_t)n * sizeof *hi);
    o->full = true; /* the whole state until now (a resumed run's, loaded) */
    o->grouped = false;
    keep_slices(o);
}

void dpt_optim_set_grad_slices(dpt_optim *o, float *const *at)
{
    DPT_ASSERT(o->lo || !at, "gradient slices for an optimizer that is not sharded");
    o->grad_at = at;
}

void dpt_optim_set_gather(dpt_optim *o, void (*gather)(int param, float *whole, const float *mine, void *user),
                          void *user)
{
    o->gather = gather, o->gather_user = user;
}

dpt_tensor *dpt_optim_state_whole(dpt_optim *o, int i, bool receive)
{
    DPT_ASSERT(i >= 0 && i < dpt_optim_num_state(o), "optimizer state %d of %d", i, dpt_optim_num_state(o));
    if (!o->lo || o->full) return o->state[i];
    DPT_ASSERT(o->gather, "a sharded optimizer's state asked whole without a gather");
    int p = i / o->nstate;
    dpt_tensor_free(o->whole);
    o->whole = receive ? state_tensor(o, p, i % o->nstate, true, 0, 0) : NULL;
    o->gather(p, receive ? o->whole->data : NULL, o->state[i] ? o->state[i]->data : NULL, o->gather_user);
    return o->whole;
}

void dpt_optim_set_decay_1d(dpt_optim *o, bool decay)
{
    o->decay_1d = decay;
    o->grouped = false;
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
int dpt_optim_state_param(const dpt_optim *o, int i, char *name, size_t cap)
{
    DPT_ASSERT(i >= 0 && i < dpt_optim_num_state(o), "optimizer state %d of %d", i, dpt_optim_num_state(o));
    int p = i / o->nstate;
    state_name(name, cap, dpt_model_param_at(o->model, p), o->name, i % o->nstate);
    return p;
}

const float *dpt_optim_state_mine(const dpt_optim *o, int i, int64_t *lo, int64_t *count)
{
    DPT_ASSERT(i >= 0 && i < dpt_optim_num_state(o), "optimizer state %d of %d", i, dpt_optim_num_state(o));
    DPT_ASSERT(o->lo, "the own part of an optimizer that is not sharded");
    DPT_ASSERT(dpt_ctx_device(o->state[i] ? o->state[i]->ctx : dpt_model_param_at(o->model, 0)->ctx).kind ==
                   DPT_DEVICE_CPU,
               "ZeRO's optimizer state on a device");
    int p = i / o->nstate;
    *lo = o->lo[p], *count = o->hi[p] - o->lo[p];
    if (!*count || !o->state[i]) return *count = 0, NULL;
    return o->full ? o->state[i]->data + o->lo[p] : o->state[i]->data; /* whole after a load, until a step */
}

int64_t dpt_optim_state_bytes(const dpt_optim *o)
{
    int64_t bytes = 0;
    int n = dpt_model_num_params(o->model);
    for (int i = 0; i < n * o->nstate; i++)
        if (o->state[i]) bytes += dpt_tensor_numel(o->state[i]) * (int64_t)sizeof(float);
    return bytes;
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
    /* freeze first: a frozen parameter stays frozen whatever group would match it */
    if (!parse_rules(o, dpt_config_str(cfg, "optim", "freeze"), true, dpt_config_where(cfg, "optim", "freeze"), err) ||
        !parse_rules(o, dpt_config_str(cfg, "optim", "groups"), false, dpt_config_where(cfg, "optim", "groups"), err)) {
        dpt_optim_free(o);
        return NULL;
    }
    return o;
}
