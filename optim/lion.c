/* lion.c: Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"), written
 * with the public list ops only, as a program's own optimizer would be:
 *   c = b1 m + (1 - b1) g;  p = (1 - lr wd) p - lr sign(c);  m = b2 m + (1 - b2) g
 * One state tensor (m) per parameter. Its betas are keys of their own: Lion's defaults (0.9,
 * 0.99) are not AdamW's. */
#include <stdlib.h>

#include "dpt.h"
#include "../runtime/registry.h"

typedef struct lion_hp {
    float beta1, beta2;
} lion_hp;

static bool lion_configure(void *hpv, const dpt_config *cfg, dpt_error *err)
{
    lion_hp *hp = hpv;
    hp->beta1 = (float)dpt_config_float(cfg, "optim", "lion_beta1");
    hp->beta2 = (float)dpt_config_float(cfg, "optim", "lion_beta2");
    (void)err; /* the keys' ranges are all it needs */
    return true;
}

static void lion_step(dpt_ctx *ctx, const dpt_optim_group *g, const void *hpv, float lr, int64_t t)
{
    const lion_hp *hp = hpv;
    (void)t;
    int n = g->count;
    dpt_tensor **c = calloc((size_t)n, sizeof *c); /* the update's direction, one tensor per parameter */
    if (!c) return;
    for (int i = 0; i < n; i++) {
        int64_t shape[DPT_MAX_DIMS];
        for (int d = 0; d < dpt_tensor_ndim(g->params[i]); d++)
            shape[d] = dpt_tensor_dim(g->params[i], d);
        c[i] = dpt_tensor_new(ctx, dpt_tensor_ndim(g->params[i]), shape);
    }
    dpt_tensor *const *m = g->state[0];
    dpt_foreach_axpby(ctx, n, c, hp->beta1, m, 0.0f);               /* c = b1 m */
    dpt_foreach_axpby(ctx, n, c, 1.0f - hp->beta1, g->grads, 1.0f); /* c += (1 - b1) g */
    dpt_foreach_unary(ctx, n, c, DPT_UNARY_SIGN, c);
    dpt_foreach_axpby(ctx, n, g->params, -lr, c, 1.0f - lr * g->weight_decay); /* decoupled decay, then the step */
    dpt_foreach_axpby(ctx, n, m, 1.0f - hp->beta2, g->grads, hp->beta2);      /* m = b2 m + (1 - b2) g */
    for (int i = 0; i < n; i++)
        dpt_tensor_free(c[i]);
    free(c);
}

static const dpt_optim_impl lion_impl = {
    .nstate = 1, .hp_size = sizeof(lion_hp), .configure = lion_configure, .step = lion_step};

static const dpt_config_key lion_keys[] = {
    {NULL, "lion_beta1", DPT_KEY_FLOAT, "0.9", 0, 0.9999999, NULL, "the interpolation of the update's direction", 0},
    {NULL, "lion_beta2", DPT_KEY_FLOAT, "0.99", 0, 0.9999999, NULL, "the momentum's decay", 0},
};
DPT_BUILTIN(optim_lion) = {DPT_KIND_OPTIMIZER, "lion", "Lion: sign of an interpolated momentum (Chen et al. 2023)",
                           lion_keys, DPT_COUNT(lion_keys), &lion_impl};
