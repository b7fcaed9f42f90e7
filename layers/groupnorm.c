/* groupnorm.c: the GroupNorm layer (torch.nn.GroupNorm(groups, channels, eps, affine): diffusion
 * models' and U-Nets' normalisation, independent of the batch size): each sample's channels in
 * `groups` groups, each group normalised over its channels and positions with its own mean and
 * (biased) variance, then a per-channel weight (1) and bias (0). It is a layer norm of the
 * (N, groups, C / groups x H x W) view, so it runs on the fused dpt_layer_norm of every backend,
 * and the per-channel affine map on the broadcasting ops. */
#include <stdio.h>

#include "../runtime/error.h"
#include "../runtime/tensor.h"

struct dpt_groupnorm {
    char name[64];
    int64_t groups, channels;
    float eps;
    dpt_tensor *weight, *bias; /* (channels) each, or NULL without affine */
};

dpt_groupnorm *dpt_groupnorm_new(dpt_model *model, const char *name, int64_t groups, const dpt_shape3 *shape,
                                 float eps, bool affine)
{
    int64_t c = shape->c;
    if (groups < 1 || c < 1 || c % groups || !(eps > 0.0f)) {
        dpt_model_errorf(model, "groupnorm %s: %lld channels in %lld groups, eps %g: the groups must divide the "
                                "channels and eps be positive",
                         name, (long long)c, (long long)groups, (double)eps);
        groups = 1, c = c > 0 ? c : 1, eps = eps > 0.0f ? eps : 1e-5f;
    }
    dpt_groupnorm *l = dpt_model_alloc(model, sizeof *l);
    snprintf(l->name, sizeof l->name, "%s", name);
    l->groups = groups, l->channels = c, l->eps = eps;
    if (affine) {
        char pname[DPT_NAME_MAX + 33]; /* longer than DPT_NAME_MAX, cut or not: refused by dpt_model_param */
        snprintf(pname, sizeof pname, "%s.weight", name);
        l->weight = dpt_model_param(model, pname, 1, &c);
        dpt_init_constant(l->weight, 1.0f);
        snprintf(pname, sizeof pname, "%s.bias", name); /* zero-filled */
        l->bias = dpt_model_param(model, pname, 1, &c);
    }
    dpt_model_note(model, "groupnorm", name, shape, affine ? 2 * c : 0, 8.0 * (double)(c * shape->h * shape->w));
    return l;
}

dpt_tensor *dpt_groupnorm_forward(dpt_ctx *ctx, dpt_groupnorm *l, dpt_tensor *x)
{
    if (x->ndim != 4 || x->shape[1] != l->channels) {
        char have[96];
        dpt_fatal("groupnorm %s expects an (N, %lld, H, W) input, got %s", l->name, (long long)l->channels,
                  dpt_shape_str(x, have, sizeof have));
    }
    int64_t n = x->shape[0], shape[4] = {n, l->channels, x->shape[2], x->shape[3]};
    dpt_tensor *g = dpt_reshape(ctx, x, 3, (int64_t[]){n, l->groups, -1});
    dpt_tensor *y = dpt_reshape(ctx, dpt_layer_norm(ctx, g, NULL, NULL, l->eps), 4, shape);
    if (!l->weight) return y;
    int64_t per_channel[4] = {1, l->channels, 1, 1};
    return dpt_add(ctx, dpt_mul(ctx, y, dpt_reshape(ctx, l->weight, 4, per_channel)),
                   dpt_reshape(ctx, l->bias, 4, per_channel));
}
