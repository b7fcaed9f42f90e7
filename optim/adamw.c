/* adamw.c: AdamW (Loshchilov & Hutter) as torch.optim.AdamW (amsgrad off):
 *   p *= 1 - lr * wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
 *   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps) */
#include <math.h>

#include "optim.h"

#include "../runtime/ctx.h"
#include "../runtime/error.h"

enum { BETA1, BETA2, EPS, WEIGHT_DECAY };

static void adamw_step(dpt_ctx *ctx, dpt_optim *o)
{
    double t = (double)(o->steps + 1);
    float bc1 = (float)(1.0 - pow(o->hyper[BETA1], t));
    float bc2 = (float)(1.0 - pow(o->hyper[BETA2], t));
    const dpt_tensor_list *l = dpt_optim_list(o);
    if (ctx->be->adamw_step_multi) {
        ctx->be->adamw_step_multi(ctx, l, o->lr, o->hyper[BETA1], o->hyper[BETA2], o->hyper[EPS],
                                  o->hyper[WEIGHT_DECAY], bc1, bc2);
        return;
    }
    for (int i = 0; i < l->count; i++) {
        float *const *q = &l->ptr[i * l->width];
        ctx->be->adamw_step(ctx, l->numel[i], q[0], q[1], q[2], q[3], o->lr, o->hyper[BETA1], o->hyper[BETA2],
                            o->hyper[EPS], o->hyper[WEIGHT_DECAY], bc1, bc2);
    }
}

static const dpt_optim_ops adamw_ops = {.name = "adamw", .step = adamw_step};

dpt_optim *dpt_adamw_new(dpt_model *model, float lr, float beta1, float beta2, float eps, float weight_decay)
{
    DPT_ASSERT(beta1 >= 0.0f && beta1 < 1.0f && beta2 >= 0.0f && beta2 < 1.0f,
               "AdamW betas (%g, %g) outside [0, 1)", beta1, beta2);
    dpt_optim *o = dpt_optim_alloc(&adamw_ops, model, lr, 2);
    o->hyper[BETA1] = beta1;
    o->hyper[BETA2] = beta2;
    o->hyper[EPS] = eps;
    o->hyper[WEIGHT_DECAY] = weight_decay;
    return o;
}
