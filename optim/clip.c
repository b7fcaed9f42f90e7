/* clip.c: gradient clipping by global L2 norm, as torch.nn.utils.clip_grad_norm_. Under DDP
 * it runs after the AllReduce, on identical gradients, so every rank clips alike. */
#include <math.h>

#include "../runtime/ctx.h"
#include "../runtime/zero.h"

double dpt_clip_grad_norm(dpt_ctx *ctx, dpt_model *model, double max_norm)
{
    return dpt_unscale_clip_grad_norm(ctx, model, 1.0, max_norm);
}

/* Over elements [lo[i], hi[i]) of each gradient (NULL: all), the squares summed over ranks by
 * sum (NULL: this process's are all). */
static double clip_ranges(dpt_ctx *ctx, dpt_model *model, const int64_t *lo, const int64_t *hi, float *const *where,
                          double inv_scale, double max_norm, void (*sum)(double *total, void *user), void *user)
{
    int n = dpt_model_num_params(model);
    dpt_tensor_list l;
    dpt_tensor_list_init(&l, n, 1);
    for (int i = 0, k = 0; i < n; i++) {
        dpt_tensor *g = dpt_model_param_at(model, i)->grad;
        int64_t a = lo ? lo[i] : 0, b = hi ? hi[i] : g->numel;
        float *at = where ? where[i] : g->data + a;
        if (b > a) dpt_tensor_list_set(&l, k++, b - a, &at);
        else l.count--;
    }
    dpt_tensor_list_seal(&l);
    double total = 0.0;
    if (ctx->be->sumsq_multi) { /* one launch and one read-back instead of one per parameter */
        total = l.count ? ctx->be->sumsq_multi(ctx, &l) : 0.0;
        ctx->host_syncs++;
    } else {
        for (int i = 0; i < l.count; i++)
            total += ctx->be->dot(ctx, l.ptr[i], l.ptr[i], l.numel[i]);
        ctx->host_syncs += l.count;
    }
    if (sum) sum(&total, user);
    double norm = sqrt(total) * inv_scale; /* the unscaled gradients' */
    double factor = inv_scale;
    if (max_norm > 0 && isfinite(norm) && norm > max_norm) factor *= max_norm / (norm + 1e-6);
    if (isfinite(norm) && factor != 1.0) {
        float scale = (float)factor;
        if (ctx->be->scale_multi && l.count)
            ctx->be->scale_multi(ctx, &l, scale);
        else
            for (int i = 0; i < l.count; i++)
                ctx->be->scale(ctx, l.numel[i], scale, l.ptr[i], l.ptr[i]);
    }
    dpt_tensor_list_free(&l);
    return norm;
}

double dpt_unscale_clip_grad_norm(dpt_ctx *ctx, dpt_model *model, double inv_scale, double max_norm)
{
    return clip_ranges(ctx, model, NULL, NULL, NULL, inv_scale, max_norm, NULL, NULL);
}

double dpt_unscale_clip_grad_norm_ranges(dpt_ctx *ctx, dpt_model *model, const int64_t *lo, const int64_t *hi,
                                         float *const *at, double inv_scale, double max_norm,
                                         void (*sum)(double *total, void *user), void *user)
{
    return clip_ranges(ctx, model, lo, hi, at, inv_scale, max_norm, sum, user);
}
