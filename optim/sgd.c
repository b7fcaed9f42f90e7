/* sgd.c: SGD with momentum, dampening, Nesterov and (coupled) weight decay, as torch.optim.SGD:
 *   g = grad + wd * p;  buf = g (first step) | momentum * buf + (1 - dampening) * g;
 *   g = nesterov ? g + momentum * buf : buf;  p -= lr * g */
#include "optim.h"

#include "../runtime/ctx.h"
#include "../runtime/error.h"

/* One launch over every parameter where the backend can (dpt_optim_list), else one per
 * parameter; the arithmetic per element is the same. */
static void sgd_step(dpt_ctx *ctx, dpt_optim *o)
{
    float momentum = o->hp.sgd.momentum, dampening = o->hp.sgd.dampening, wd = o->hp.sgd.weight_decay;
    bool nesterov = o->hp.sgd.nesterov, first = o->steps == 0;
    for (int g = 0; g < 2; g++) { /* the parameters with weight decay, then those without */
        const dpt_tensor_list *l = dpt_optim_list(o, g);
        float decay = g ? 0.0f : wd;
        if (!l->count) continue;
        if (ctx->be->sgd_step_multi) {
            ctx->be->sgd_step_multi(ctx, l, o->lr, momentum, dampening, decay, nesterov, first);
            continue;
        }
        for (int i = 0; i < l->count; i++) {
            float *const *q = &l->ptr[i * l->width];
            ctx->be->sgd_step(ctx, l->numel[i], q[0], q[1], q[2], o->lr, momentum, dampening, decay, nesterov, first);
        }
    }
}

static dpt_optim *sgd_from_config(dpt_model *model, const dpt_config *cfg, float lr, float weight_decay)
{
    return dpt_sgd_new(model, lr, (float)dpt_config_float(cfg, "optim", "momentum"),
                       (float)dpt_config_float(cfg, "optim", "dampening"), weight_decay,
                       dpt_config_bool(cfg, "optim", "nesterov"));
}

const dpt_optim_ops dpt_sgd_ops = {.name = "sgd", .nstate = 1, .step = sgd_step, .from_config = sgd_from_config};

dpt_optim *dpt_sgd_new(dpt_model *model, float lr, float momentum, float dampening, float weight_decay,
                       bool nesterov)
{
    DPT_ASSERT(!nesterov || (momentum > 0.0f && dampening == 0.0f),
               "Nesterov momentum needs momentum > 0 and dampening = 0 (as in PyTorch)");
    dpt_optim *o = dpt_optim_alloc(&dpt_sgd_ops, model, lr);
    o->hp.sgd.momentum = momentum;
    o->hp.sgd.dampening = dampening;
    o->hp.sgd.weight_decay = weight_decay;
    o->hp.sgd.nesterov = nesterov;
    return o;
}
