/* sgd.c: SGD with momentum, dampening, Nesterov and (coupled) weight decay, as torch.optim.SGD:
 *   g = grad + wd * p;  buf = g (first step) | momentum * buf + (1 - dampening) * g;
 *   g = nesterov ? g + momentum * buf : buf;  p -= lr * g */
#include "optim.h"

#include "../runtime/ctx.h"
#include "../runtime/error.h"

enum { MOMENTUM, DAMPENING, WEIGHT_DECAY, NESTEROV };

static void sgd_step(dpt_ctx *ctx, dpt_optim *o)
{
    bool nesterov = o->hyper[NESTEROV] != 0.0f;
    for (int i = 0; i < dpt_model_num_params(o->model); i++) {
        dpt_tensor *p = dpt_model_param_at(o->model, i);
        ctx->be->sgd_step(ctx, p->numel, p->data, p->grad->data, o->state[i]->data, o->lr, o->hyper[MOMENTUM],
                          o->hyper[DAMPENING], o->hyper[WEIGHT_DECAY], nesterov, o->steps == 0);
    }
}

static const dpt_optim_ops sgd_ops = {.name = "sgd", .step = sgd_step};

dpt_optim *dpt_sgd_new(dpt_model *model, float lr, float momentum, float dampening, float weight_decay,
                       bool nesterov)
{
    DPT_ASSERT(!nesterov || (momentum > 0.0f && dampening == 0.0f),
               "Nesterov momentum needs momentum > 0 and dampening = 0 (as in PyTorch)");
    dpt_optim *o = dpt_optim_alloc(&sgd_ops, model, lr, 1);
    o->hyper[MOMENTUM] = momentum;
    o->hyper[DAMPENING] = dampening;
    o->hyper[WEIGHT_DECAY] = weight_decay;
    o->hyper[NESTEROV] = nesterov ? 1.0f : 0.0f;
    return o;
}
