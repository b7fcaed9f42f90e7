/* clip.c: gradient clipping by global L2 norm, as torch.nn.utils.clip_grad_norm_. Under DDP
 * it runs after the AllReduce, on identical gradients, so every rank clips alike. */
#include <math.h>

#include "../runtime/ctx.h"

double dpt_clip_grad_norm(dpt_ctx *ctx, dpt_model *model, double max_norm)
{
    return dpt_unscale_clip_grad_norm(ctx, model, 1.0, max_norm);
}

double dpt_unscale_clip_grad_norm(dpt_ctx *ctx, dpt_model *model, double inv_scale, double max_norm)
{
    int n = dpt_model_num_params(model);
    dpt_tensor_list l;
    dpt_tensor_list_init(&l, n, 1);
    for (int i = 0; i < n; i++) {
        dpt_tensor *g = dpt_model_param_at(model, i)->grad;
        dpt_tensor_list_set(&l, i, g->numel, &g->data);
    }
    dpt_tensor_list_seal(&l);
    double total = 0.0;
    if (ctx->be->sumsq_multi) { /* one launch and one read-back instead of one per parameter */
        total = ctx->be->sumsq_multi(ctx, &l);
        ctx->host_syncs++;
    } else {
        for (int i = 0; i < n; i++)
            total += ctx->be->dot(ctx, l.ptr[i], l.ptr[i], l.numel[i]);
        ctx->host_syncs += n;
    }
    dpt_tensor_list_free(&l);
    double norm = sqrt(total) * inv_scale; /* the unscaled gradients' */
    double factor = inv_scale;
    if (max_norm > 0 && isfinite(norm) && norm > max_norm) factor *= max_norm / (norm + 1e-6);
    if (isfinite(norm) && factor != 1.0) {
        float scale = (float)factor;
        for (int i = 0; i < dpt_model_num_params(model); i++) {
            dpt_tensor *g = dpt_model_param_at(model, i)->grad;
            ctx->be->scale(ctx, g->numel, scale, g->data, g->data);
        }
    }
    return norm;
}
