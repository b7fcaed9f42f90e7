/* adamw.c: AdamW (Loshchilov & Hutter) as torch.optim.AdamW (amsgrad off):
 *   p *= 1 - lr * wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
 *   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps) */
#include <math.h>

#include "optim.h"

#include "../runtime/ctx.h"
#include "../runtime/error.h"
#include "../runtime/registry.h"

typedef struct adamw_hp {
    float beta1, beta2, eps;
} adamw_hp;

static void adamw_step(dpt_ctx *ctx, const dpt_optim_group *g, const void *hpv, float lr, int64_t t)
{
    const adamw_hp *hp = hpv;
    float bc1 = (float)(1.0 - pow(hp->beta1, (double)t));
    float bc2 = (float)(1.0 - pow(hp->beta2, (double)t));
    const dpt_tensor_list *l = g->fused;
    if (ctx->be->adamw_step_multi) {
        ctx->be->adamw_step_multi(ctx, l, lr, hp->beta1, hp->beta2, hp->eps, g->weight_decay, bc1, bc2);
        return;
    }
    for (int i = 0; i < l->count; i++) {
        float *const *q = &l->ptr[i * l->width];
        ctx->be->adamw_step(ctx, l->numel[i], q[0], q[1], q[2], q[3], lr, hp->beta1, hp->beta2, hp->eps,
                            g->weight_decay, bc1, bc2);
    }
}

static bool adamw_configure(void *hpv, const dpt_config *cfg, dpt_error *err)
{
    adamw_hp *hp = hpv;
    hp->beta1 = (float)dpt_config_float(cfg, "optim", "beta1");
    hp->beta2 = (float)dpt_config_float(cfg, "optim", "beta2");
    hp->eps = (float)dpt_config_float(cfg, "optim", "eps");
    (void)err; /* the keys' ranges are all it needs */
    return true;
}

static const dpt_optim_impl adamw_impl = {
    .nstate = 2, .hp_size = sizeof(adamw_hp), .configure = adamw_configure, .step = adamw_step};

static const dpt_config_key adamw_keys[] = {
    {NULL, "beta1", DPT_KEY_FLOAT, "0.9", 0, 0.9999999, NULL, "first-moment decay", 0},
    {NULL, "beta2", DPT_KEY_FLOAT, "0.999", 0, 0.9999999, NULL, "second-moment decay", 0},
    {NULL, "eps", DPT_KEY_FLOAT, "1e-8", 0, 1, NULL, "denominator epsilon", 0},
};
DPT_BUILTIN(optim_adamw) = {DPT_KIND_OPTIMIZER, "adamw", "Adam with decoupled weight decay (torch.optim.AdamW)",
                            adamw_keys, DPT_COUNT(adamw_keys), &adamw_impl};

dpt_optim *dpt_adamw_new(dpt_model *model, float lr, float beta1, float beta2, float eps, float weight_decay)
{
    DPT_ASSERT(beta1 >= 0.0f && beta1 < 1.0f && beta2 >= 0.0f && beta2 < 1.0f,
               "AdamW betas (%g, %g) outside [0, 1)", beta1, beta2);
    adamw_hp hp = {beta1, beta2, eps};
    return dpt_optim_new(model, "adamw", &hp, lr, weight_decay);
}
