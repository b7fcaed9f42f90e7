/* activation.c: relu, gelu (tanh approximation) and softmax over the last dimension. */
#include "../runtime/autograd.h"
#include "../runtime/ctx.h"
#include "../runtime/error.h"

static void relu_backward(dpt_ctx *ctx, dpt_node *node)
{
    /* The output decides the mask (y > 0 <=> x > 0), so x need not be kept. */
    const dpt_tensor *y = node->out;
    bool acc;
    float *dx = dpt_grad_for_write(ctx, node->in[0], &acc)->data;
    if (y->dtype == DPT_BF16)
        ctx->be->relu16_bwd(ctx, (const uint16_t *)y->data, y->grad->data, dx, y->numel, acc);
    else
        ctx->be->relu_bwd(ctx, y->data, y->grad->data, dx, y->numel, acc);
}

static dpt_tensor *relu(dpt_ctx *ctx, dpt_tensor *x, bool in_place)
{
    if (!dpt_tensor_is_contiguous(x)) x = dpt_contiguous(ctx, x), in_place = false; /* a view: relu of a copy */
    /* a 16-bit activation stays one; in place, y is x's memory under a new name */
    dpt_tensor *y = in_place ? dpt_alias(ctx, x) : dpt_temp_same(ctx, x);
    if (x->dtype == DPT_BF16)
        ctx->be->relu16_fwd(ctx, (const uint16_t *)x->data, (uint16_t *)y->data, x->numel);
    else
        ctx->be->relu_fwd(ctx, x->data, y->data, x->numel);
    dpt_tape_record(ctx, in_place ? "relu_" : "relu", relu_backward, y, 1, &x);
    return y;
}

dpt_tensor *dpt_relu(dpt_ctx *ctx, dpt_tensor *x)
{
    return relu(ctx, x, false);
}

dpt_tensor *dpt_relu_(dpt_ctx *ctx, dpt_tensor *x)
{
    return relu(ctx, x, dpt_tape_may_overwrite(ctx, x));
}

static void gelu_backward(dpt_ctx *ctx, dpt_node *node)
{
    dpt_tensor *x = node->in[0];
    bool acc;
    float *dx = dpt_grad_for_write(ctx, x, &acc)->data;
    ctx->be->gelu_bwd(ctx, x->data, node->out->grad->data, dx, x->numel, acc);
}

dpt_tensor *dpt_gelu(dpt_ctx *ctx, dpt_tensor *x)
{
    x = dpt_widen(ctx, x);
    x = dpt_contiguous(ctx, x);
    dpt_tensor *y = dpt_temp_like(ctx, x);
    ctx->be->gelu_fwd(ctx, x->data, y->data, x->numel);
    dpt_tape_record(ctx, "gelu", gelu_backward, y, 1, &x);
    return y;
}

static void softmax_backward(dpt_ctx *ctx, dpt_node *node)
{
    const dpt_tensor *y = node->out;
    int64_t cols = y->shape[y->ndim - 1];
    ctx->be->softmax_bwd(ctx, y->data, y->grad->data, dpt_grad_acc(ctx, node->in[0])->data, y->numel / cols,
                         cols);
}

dpt_tensor *dpt_softmax(dpt_ctx *ctx, dpt_tensor *x)
{
    x = dpt_plain(ctx, x);
    x = dpt_contiguous(ctx, x);
    DPT_ASSERT(x->ndim >= 1 && x->shape[x->ndim - 1] > 0, "softmax over an empty dimension");
    dpt_tensor *y = dpt_temp_like(ctx, x);
    int64_t cols = x->shape[x->ndim - 1];
    ctx->be->softmax_fwd(ctx, x->data, y->data, x->numel / cols, cols);
    dpt_tape_record(ctx, "softmax", softmax_backward, y, 1, &x);
    return y;
}
