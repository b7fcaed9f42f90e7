/* pool.c: max pooling, average pooling and global average pooling. The input stays in its
 * layout where the backend pools blocked tensors (oneDNN); otherwise it is made NCHW. */
#include <stdio.h>

#include "../runtime/autograd.h"
#include "../runtime/ctx.h"
#include "../runtime/error.h"

static bool pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t *out)
{
    if (k < 1 || s < 1 || p < 0 || 2 * p > k || in + 2 * p < k) return false;
    *out = (in + 2 * p - k) / s + 1;
    return true;
}

bool dpt_pool_shape_update(dpt_model *model, const char *name, dpt_shape3 *shape, int64_t kernel,
                           int64_t stride, int64_t padding)
{
    int64_t oh, ow;
    if (!pool_out(shape->h, kernel, stride, padding, &oh) ||
        !pool_out(shape->w, kernel, stride, padding, &ow))
        return dpt_model_errorf(
            model,
            "pool %s: kernel %lld, stride %lld, padding %lld does not fit the input "
            "(%lld, %lld, %lld) (padding at most kernel/2, kernel at most the padded size)",
            name, (long long)kernel, (long long)stride, (long long)padding, (long long)shape->c,
            (long long)shape->h, (long long)shape->w);
    shape->h = oh, shape->w = ow;
    dpt_model_note(model, "pool", name, shape, 0, (double)(shape->c * oh * ow * kernel * kernel));
    return true;
}

static dpt_pool_shape pool_shape(const char *op, const dpt_tensor *x, int64_t kernel, int64_t stride,
                                 int64_t padding)
{
    DPT_REQUIRE_OP(x->ctx, maxpool_fwd, op);
    char buf[96];
    dpt_pool_shape s = {0};
    if (x->ndim != 4 || !dpt_tensor_is_contiguous(x) /* views come dense: pool_input */ ||
        !pool_out(x->shape[2], kernel, stride, padding, &s.oh) ||
        !pool_out(x->shape[3], kernel, stride, padding, &s.ow))
        dpt_fatal("%s(kernel %lld, stride %lld, padding %lld) does not fit input %s", op, (long long)kernel,
                  (long long)stride, (long long)padding, dpt_shape_str(x, buf, sizeof buf));
    s.n = x->shape[0], s.c = x->shape[1], s.h = x->shape[2], s.w = x->shape[3];
    s.kh = s.kw = kernel, s.stride_h = s.stride_w = stride, s.pad_h = s.pad_w = padding;
    s.layout = x->layout;
    s.dtype = x->dtype;
    return s;
}

/* x as this backend's pooling takes it (F32: a 16-bit activation is widened). */
static dpt_tensor *pool_input(dpt_ctx *ctx, dpt_tensor *x)
{
    return dpt_dense(ctx, ctx->be->pool_any_layout ? dpt_widen(ctx, x) : dpt_plain(ctx, x));
}

/* Max and average pooling keep a 16-bit activation 16-bit where the backend pools it so
 * (oneDNN; the gradients stay F32); the shape says which. */
static dpt_tensor *pool_input16(dpt_ctx *ctx, dpt_tensor *x, const char *op, int64_t kernel, int64_t stride,
                                int64_t padding, bool max, dpt_pool_shape *s)
{
    if (x->dtype == DPT_BF16 && ctx->be->pool_any_layout && ctx->be->pool16) {
        *s = pool_shape(op, x, kernel, stride, padding);
        if (ctx->be->pool16(ctx, s, max)) return x;
    }
    x = pool_input(ctx, x);
    *s = pool_shape(op, x, kernel, stride, padding);
    return x;
}

static dpt_tensor *pool_output(dpt_ctx *ctx, const dpt_pool_shape *s)
{
    int64_t shape[4] = {s->n, s->c, s->oh, s->ow};
    dpt_tensor *y = s->dtype == DPT_BF16 ? dpt_temp16(ctx, 4, shape) : dpt_temp(ctx, 4, shape);
    y->layout = (dpt_layout)s->layout;
    return y;
}

static void maxpool_backward(dpt_ctx *ctx, dpt_node *node)
{
    bool acc;
    float *dx = dpt_grad_for_write(ctx, node->in[0], &acc)->data;
    ctx->be->maxpool_bwd(ctx, node->scratch, node->out->grad->data, node->saved[0]->data, dx, acc);
}

dpt_tensor *dpt_maxpool2d(dpt_ctx *ctx, dpt_tensor *x, int64_t kernel, int64_t stride, int64_t padding)
{
    dpt_pool_shape s;
    x = pool_input16(ctx, x, "maxpool2d", kernel, stride, padding, true, &s);
    dpt_tensor *y = pool_output(ctx, &s);
    /* where the maxima are, in the backend's own form (a float tensor as storage) */
    size_t ws_bytes = ctx->be->maxpool_ws_bytes ? ctx->be->maxpool_ws_bytes(ctx, &s)
                                                : (size_t)(s.n * s.c * s.oh * s.ow) * sizeof(int32_t);
    dpt_tensor *argmax = dpt_temp(ctx, 1, (int64_t[]){(int64_t)((ws_bytes + 3) / 4) + 1});
    ctx->be->maxpool_fwd(ctx, &s, x->data, y->data, argmax->data);
    dpt_node *node = dpt_tape_record(ctx, "maxpool2d", maxpool_backward, y, 1, &x);
    if (node) {
        node->saved[0] = argmax;
        node->scratch = dpt_tape_scratch(ctx, sizeof s);
        *(dpt_pool_shape *)node->scratch = s;
    }
    return y;
}

static void avgpool_backward(dpt_ctx *ctx, dpt_node *node)
{
    bool acc;
    float *dx = dpt_grad_for_write(ctx, node->in[0], &acc)->data;
    ctx->be->avgpool_bwd(ctx, node->scratch, node->out->grad->data, dx, acc);
}

dpt_tensor *dpt_avgpool2d(dpt_ctx *ctx, dpt_tensor *x, int64_t kernel, int64_t stride, int64_t padding)
{
    dpt_pool_shape s;
    x = pool_input16(ctx, x, "avgpool2d", kernel, stride, padding, false, &s);
    dpt_tensor *y = pool_output(ctx, &s);
    ctx->be->avgpool_fwd(ctx, &s, x->data, y->data);
    dpt_node *node = dpt_tape_record(ctx, "avgpool2d", avgpool_backward, y, 1, &x);
    if (node) {
        node->scratch = dpt_tape_scratch(ctx, sizeof s);
        *(dpt_pool_shape *)node->scratch = s;
    }
    return y;
}

dpt_tensor *dpt_global_avgpool(dpt_ctx *ctx, dpt_tensor *x)
{
    char buf[96];
    x = pool_input(ctx, x);
    if (x->ndim != 4 || x->shape[2] != x->shape[3])
        dpt_fatal("global_avgpool expects (N, C, H, H), got %s", dpt_shape_str(x, buf, sizeof buf));
    dpt_pool_shape s = pool_shape("global_avgpool", x, x->shape[2], 1, 0);
    dpt_tensor *y = pool_output(ctx, &s);
    ctx->be->avgpool_fwd(ctx, &s, x->data, y->data);
    /* (N, C, 1, 1) in nChw16c (C is a multiple of 16 in a blocked tensor) or NHWC is the
     * same memory as in NCHW: the result is plain as it is, no reorder before the classifier */
    y->layout = DPT_LAYOUT_NCHW;
    dpt_node *node = dpt_tape_record(ctx, "global_avgpool", avgpool_backward, y, 1, &x);
    if (node) {
        node->scratch = dpt_tape_scratch(ctx, sizeof s);
        *(dpt_pool_shape *)node->scratch = s;
    }
    return dpt_reshape(ctx, y, 2, (int64_t[]){s.n, s.c});
}
