/* adamw.c: AdamW (Loshchilov & Hutter) as torch.optim.AdamW (amsgrad off):
 *   p *= 1 - lr * wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
 *   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps) */
#include <math.h>

#include "optim.h"

#include "../runtime/ctx.h"
#include "../runtime/error.h"

static void adamw_step(dpt_ctx *ctx, dpt_optim *o)
{
    float beta1 = o->hp.adamw.beta1, beta2 = o->hp.adamw.beta2, eps = o->hp.adamw.eps, wd = o->hp.adamw.weight_decay;
    double t = (double)(o->steps + 1);
    float bc1 = (float)(1.0 - pow(beta1, t));
    float bc2 = (float)(1.0 - pow(beta2, t));
    for (int g = 0; g < 2; g++) { /* the parameters with weight decay, then those without */
        const dpt_tensor_list *l = dpt_optim_list(o, g);
        float decay = g ? 0.0f : wd;
        if (!l->count) continue;
        if (ctx->be->adamw_step_multi) {
            ctx->be->adamw_step_multi(ctx, l, o->lr, beta1, beta2, eps, decay, bc1, bc2);
            continue;
        }
        for (int i = 0; i < l->count; i++) {
            float *const *q = &l->ptr[i * l->width];
            ctx->be->adamw_step(ctx, l->numel[i], q[0], q[1], q[2], q[3], o->lr, beta1, beta2, eps, decay, bc1,
                                bc2);
        }
    }
}

static dpt_optim *adamw_from_config(dpt_model *model, const dpt_config *cfg, float lr, float weight_decay)
{
    return dpt_adamw_new(model, lr, (float)dpt_config_float(cfg, "optim", "beta1"),
                         (float)dpt_config_float(cfg, "optim", "beta2"), (float)dpt_config_float(cfg, "optim", "eps"),
                         weight_decay);
}

const dpt_optim_ops dpt_adamw_ops = {
    .name = "adamw", .nstate = 2, .step = adamw_step, .from_config = adamw_from_config};

dpt_optim *dpt_adamw_new(dpt_model *model, float lr, float beta1, float beta2, float eps, float weight_decay)
{
    DPT_ASSERT(beta1 >= 0.0f && beta1 < 1.0f && beta2 >= 0.0f && beta2 < 1.0f,
               "AdamW betas (%g, %g) outside [0, 1)", beta1, beta2);
    dpt_optim *o = dpt_optim_alloc(&dpt_adamw_ops, model, lr);
    o->hp.adamw.beta1 = beta1;
    o->hp.adamw.beta2 = beta2;
    o->hp.adamw.eps = eps;
    o->hp.adamw.weight_decay = weight_decay;
    return o;
}
