/* sgd.c: SGD with momentum, dampening, Nesterov and (coupled) weight decay, as torch.optim.SGD:
 *   g = grad + wd * p;  buf = g (first step) | momentum * buf + (1 - dampening) * g;
 *   g = nesterov ? g + momentum * buf : buf;  p -= lr * g */
#include "optim.h"

#include "../runtime/ctx.h"
#include "../runtime/error.h"
#include "../runtime/registry.h"

typedef struct sgd_hp {
    float momentum, dampening;
    bool nesterov;
} sgd_hp;

/* One launch over every parameter of the group where the backend can, else one per parameter;
 * the arithmetic per element is the same. */
static void sgd_step(dpt_ctx *ctx, const dpt_optim_group *g, const void *hpv, float lr, int64_t t)
{
    const sgd_hp *hp = hpv;
    const dpt_tensor_list *l = g->fused;
    bool first = t == 1;
    if (ctx->be->sgd_step_multi) {
        ctx->be->sgd_step_multi(ctx, l, lr, hp->momentum, hp->dampening, g->weight_decay, hp->nesterov, first);
        return;
    }
    for (int i = 0; i < l->count; i++) {
        float *const *q = &l->ptr[i * l->width];
        ctx->be->sgd_step(ctx, l->numel[i], q[0], q[1], q[2], lr, hp->momentum, hp->dampening, g->weight_decay,
                          hp->nesterov, first);
    }
}

static bool sgd_configure(void *hpv, const dpt_config *cfg, dpt_error *err)
{
    sgd_hp *hp = hpv;
    hp->momentum = (float)dpt_config_float(cfg, "optim", "momentum");
    hp->dampening = (float)dpt_config_float(cfg, "optim", "dampening");
    hp->nesterov = dpt_config_bool(cfg, "optim", "nesterov");
    if (hp->nesterov && (hp->momentum <= 0.0f || hp->dampening != 0.0f))
        return dpt_errorf(err, "%s: [optim] nesterov = true needs momentum > 0 and dampening = 0 (as in PyTorch)",
                          dpt_config_where(cfg, "optim", "nesterov"));
    return true;
}

static const dpt_optim_impl sgd_impl = {
    .nstate = 1, .hp_size = sizeof(sgd_hp), .configure = sgd_configure, .step = sgd_step};

static const dpt_config_key sgd_keys[] = {
    {NULL, "momentum", DPT_KEY_FLOAT, "0.9", 0, 0.9999, NULL, "momentum (0 = plain SGD)", 0},
    {NULL, "dampening", DPT_KEY_FLOAT, "0", 0, 1, NULL, "momentum dampening", 0},
    {NULL, "nesterov", DPT_KEY_BOOL, "false", 1, 0, NULL, "Nesterov momentum (needs dampening = 0)", 0},
};
DPT_BUILTIN(optim_sgd) = {DPT_KIND_OPTIMIZER, "sgd", "SGD with momentum (torch.optim.SGD)", sgd_keys,
                          DPT_COUNT(sgd_keys), &sgd_impl};

dpt_optim *dpt_sgd_new(dpt_model *model, float lr, float momentum, float dampening, float weight_decay,
                       bool nesterov)
{
    DPT_ASSERT(!nesterov || (momentum > 0.0f && dampening == 0.0f),
               "Nesterov momentum needs momentum > 0 and dampening = 0 (as in PyTorch)");
    sgd_hp hp = {momentum, dampening, nesterov};
    return dpt_optim_new(model, "sgd", &hp, lr, weight_decay);
}
