/* linear.c: fully connected layer y = x W^T + b; GEMMs read W transposed in place. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../runtime/autograd.h"
#include "../runtime/ctx.h"
#include "../runtime/error.h"

struct dpt_linear {
    char name[64];
    int64_t in_features, out_features;
    dpt_tensor *weight; /* (out, in) */
    dpt_tensor *bias;   /* (out) or NULL */
};

dpt_linear *dpt_linear_new(dpt_model *model, const char *name, int64_t in_features, int64_t out_features,
                           bool bias)
{
    if (in_features <= 0 || out_features <= 0)
        dpt_fatal("linear layer %s: features must be positive, got in=%lld out=%lld", name,
                  (long long)in_features, (long long)out_features);
    dpt_linear *layer = dpt_model_alloc(model, sizeof *layer);
    snprintf(layer->name, sizeof layer->name, "%s", name);
    layer->in_features = in_features;
    layer->out_features = out_features;
    char pname[DPT_NAME_MAX + 33]; /* longer than DPT_NAME_MAX, cut or not: refused by dpt_model_param */
    snprintf(pname, sizeof pname, "%s.weight", name);
    layer->weight = dpt_model_param(model, pname, 2, (int64_t[]){out_features, in_features});
    /* torch.nn.Linear's default: kaiming_uniform(a=sqrt(5)) = U(+-1/sqrt(in)), bias likewise. */
    float bound = 1.0f / sqrtf((float)in_features);
    dpt_init_uniform(layer->weight->ctx, layer->weight, bound);
    if (bias) {
        snprintf(pname, sizeof pname, "%s.bias", name);
        layer->bias = dpt_model_param(model, pname, 1, (int64_t[]){out_features});
        dpt_init_uniform(layer->bias->ctx, layer->bias, bound);
    }
    dpt_shape3 out = {out_features, 1, 1};
    dpt_model_note(model, "linear", name, &out, in_features * out_features + (bias ? out_features : 0),
                   2.0 * (double)in_features * (double)out_features);
    return layer;
}

static void affine_backward(dpt_ctx *ctx, dpt_node *node)
{
    dpt_tensor *x = node->in[0], *w = node->in[1], *b = node->in[2];
    const dpt_tensor *dy = node->out->grad; /* (rows, out) */
    int64_t out = w->shape[0], in = w->shape[1], batch = x->numel / in; /* rows of (..., in) */
    if (dpt_wants_grad(x)) { /* dx (B, in) += dy (B, out) W (out, in); = when dx is fresh (beta 0) */
        bool acc;
        float *dx = dpt_grad_for_write(ctx, x, &acc)->data;
        ctx->be->gemm(ctx, false, false, batch, in, out, 1.0f, dy->data, out, w->data, in, acc ? 1.0f : 0.0f, dx, in);
    }
    if (dpt_wants_grad(w)) /* dW (out, in) += dy^T (out, B) x (B, in) */
        ctx->be->gemm(ctx, true, false, out, in, batch, 1.0f, dy->data, out, x->data, in, 1.0f,
                      dpt_grad_acc(ctx, w)->data, in);
    if (dpt_wants_grad(b)) ctx->be->bias_grad(ctx, dy->data, dpt_grad_acc(ctx, b)->data, batch, out);
}

dpt_tensor *dpt_affine(dpt_ctx *ctx, dpt_tensor *x, dpt_tensor *weight, dpt_tensor *bias)
{
    char a[96], b[96];
    x = dpt_contiguous(ctx, dpt_plain(ctx, x));
    if (weight->ndim != 2 || !dpt_tensor_is_contiguous(weight) || x->ndim < 1 ||
        x->shape[x->ndim - 1] != weight->shape[1] || (bias && bias->numel != weight->shape[0]))
        dpt_fatal("affine: x %s, weight %s: x must be (..., in), the weight a dense (out, in) matrix, the bias (out)\n"
                  "HINT: flatten image batches with dpt_flatten() first",
                  dpt_shape_str(x, a, sizeof a), dpt_shape_str(weight, b, sizeof b));
    int64_t out = weight->shape[0], in = weight->shape[1], batch = x->numel / in;
    int64_t shape[DPT_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = out; /* (..., in) -> (..., out): the leading axes are rows */
    dpt_tensor *y = dpt_temp(ctx, x->ndim, shape);
    ctx->be->gemm(ctx, false, true, batch, out, in, 1.0f, x->data, in, weight->data, in, 0.0f, y->data, out);
    if (bias) ctx->be->bias_add(ctx, y->data, bias->data, batch, out);
    dpt_node *node = dpt_tape_record(ctx, "linear", affine_backward, y, 3, (dpt_tensor *[]){x, weight, bias});
    if (node) node->out_unread = true; /* backward reads x and w */
    return y;
}

dpt_tensor *dpt_linear_forward(dpt_ctx *ctx, dpt_linear *layer, dpt_tensor *x)
{
    char buf[96];
    if (x->ndim < 1 || x->shape[x->ndim - 1] != layer->in_features)
        dpt_fatal("linear layer %s expects a (..., %lld) input, got %s\n"
                  "HINT: flatten image batches with dpt_flatten() first",
                  layer->name, (long long)layer->in_features, dpt_shape_str(x, buf, sizeof buf));
    return dpt_affine(ctx, x, layer->weight, layer->bias);
}
