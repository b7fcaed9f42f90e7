/* sgd.c: SGD with momentum, dampening, Nesterov and (coupled) weight decay, as torch.optim.SGD:
 *   g = grad + wd * p;  buf = g (first step) | momentum * buf + (1 - dampening) * g;
 *   g = nesterov ? g + momentum * buf : buf;  p -= lr * g */
#include "optim.h"

#include "../runtime/ctx.h"
#include "../runtime/error.h"

enum { MOMENTUM, DAMPENING, WEIGHT_DECAY, NESTEROV };

/* One launch over every parameter where the backend can (dpt_optim_list), else one per
 * parameter; the arithmetic per element is the same. */
static void sgd_step(dpt_ctx *ctx, dpt_optim *o)
{
    bool nesterov = o->hyper[NESTEROV] != 0.0f, first = o->steps == 0;
    const dpt_tensor_list *l = dpt_optim_list(o);
    if (ctx->be->sgd_step_multi) {
        ctx->be->sgd_step_multi(ctx, l, o->lr, o->hyper[MOMENTUM], o->hyper[DAMPENING],
                                o->hyper[WEIGHT_DECAY], nesterov, first);
        return;
    }
    for (int i = 0; i < l->count; i++) {
        float *const *q = &l->ptr[i * l->width];
        ctx->be->sgd_step(ctx, l->numel[i], q[0], q[1], q[2], o->lr, o->hyper[MOMENTUM], o->hyper[DAMPENING],
                          o->hyper[WEIGHT_DECAY], nesterov, first);
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
