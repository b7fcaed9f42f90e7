/* layernorm.c: the LayerNorm layer (torch.nn.LayerNorm over the last dim): a weight (1) and a
 * bias (0) of the normalised size, over the dpt_layer_norm primitive. A layer is this much: its
 * parameters, registered on the model in creation order, and a forward that calls ops. */
#include <stdio.h>

#include "dpt.h"

struct dpt_layernorm {
    int64_t dim;
    float eps;
    dpt_tensor *weight, *bias; /* (dim) each, or NULL without affine */
};

dpt_layernorm *dpt_layernorm_new(dpt_model *model, const char *name, int64_t dim, float eps, bool affine)
{
    if (dim <= 0 || !(eps > 0.0f)) {
        dpt_model_errorf(model, "layernorm %s: dim %lld and eps %g must be positive", name, (long long)dim, (double)eps);
        dim = dim > 0 ? dim : 1, eps = eps > 0.0f ? eps : 1e-5f;
    }
    dpt_layernorm *l = dpt_model_alloc(model, sizeof *l);
    l->dim = dim, l->eps = eps;
    if (affine) {
        char pname[DPT_NAME_MAX + 33]; /* longer than DPT_NAME_MAX, cut or not: refused by dpt_model_param */
        snprintf(pname, sizeof pname, "%s.weight", name);
        l->weight = dpt_model_param(model, pname, 1, &dim);
        dpt_init_constant(l->weight, 1.0f);
        snprintf(pname, sizeof pname, "%s.bias", name); /* zero-filled */
        l->bias = dpt_model_param(model, pname, 1, &dim);
    }
    dpt_shape3 out = {dim, 1, 1}; /* per row of the normalised axis */
    dpt_model_note(model, "layernorm", name, &out, affine ? 2 * dim : 0, 8.0 * (double)dim);
    return l;
}

dpt_tensor *dpt_layernorm_forward(dpt_ctx *ctx, dpt_layernorm *l, dpt_tensor *x)
{
    return dpt_layer_norm(ctx, x, l->weight, l->bias, l->eps);
}
