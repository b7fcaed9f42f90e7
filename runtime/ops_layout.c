/* ops_layout.c: an activation's layout and dtype (dpt_to_layout, dpt_plain, dpt_widen: recorded
 * conversions whose backward converts the gradient back), and the tensor lists the backends'
 * list kernels take. Both op files (ops.c, ops_tensor.c) stand on this one. */
#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "backend.h"
#include "ctx.h"
#include "error.h"

/* ---------------------------------------------------------------- layouts */

static void plain_backward(dpt_ctx *ctx, dpt_node *node)
{
    dpt_tensor *x = node->in[0];
    const dpt_tensor *dy = node->out->grad;
    bool acc;
    float *dx = dpt_grad_for_write(ctx, x, &acc)->data; /* F32, in x's layout */
    if (x->layout == node->out->layout) { /* a widening in place: the gradient passes through */
        if (acc)
            ctx->be->axpy(ctx, dy->numel, 1.0f, dy->data, dx);
        else
            ctx->be->dev->copy_d2d(ctx, dx, dy->data, (size_t)dy->numel * sizeof(float));
        return;
    }
    ctx->be->relayout(ctx, dy->data, node->out->layout, dx, x->layout, x->shape, acc);
}

/* x as F32 in `layout` (x's own or NCHW), recorded. */
static dpt_tensor *convert(dpt_ctx *ctx, dpt_tensor *x, dpt_layout layout)
{
    dpt_tensor *y = dpt_temp(ctx, x->ndim, x->shape);
    y->layout = layout;
    if (x->dtype == DPT_BF16) {
        DPT_ASSERT(ctx->be->widen && x->ndim == 4, "a 16-bit activation on the %s backend", ctx->be->name);
        ctx->be->widen(ctx, x->data, x->layout, y->data, layout, x->shape, false);
    } else {
        DPT_ASSERT(ctx->be->relayout, "a blocked tensor on the %s backend", ctx->be->name);
        ctx->be->relayout(ctx, x->data, x->layout, y->data, layout, x->shape, false);
    }
    dpt_tape_record(ctx, x->dtype == DPT_BF16 ? "to_f32" : layout == DPT_LAYOUT_NCHW ? "to_nchw" : "relayout",
                    plain_backward, y, 1, &x);
    return y;
}

dpt_tensor *dpt_to_layout(dpt_ctx *ctx, dpt_tensor *x, dpt_layout layout)
{
    if (!x || (x->layout == layout && x->dtype != DPT_BF16)) return x;
    return convert(ctx, x, layout);
}

dpt_tensor *dpt_plain(dpt_ctx *ctx, dpt_tensor *x)
{
    if (!x || (x->layout == DPT_LAYOUT_NCHW && x->dtype != DPT_BF16)) return x; /* F32, or I32 indices */
    return convert(ctx, x, DPT_LAYOUT_NCHW);
}

dpt_tensor *dpt_widen(dpt_ctx *ctx, dpt_tensor *x)
{
    if (!x || x->dtype != DPT_BF16) return x;
    return convert(ctx, x, x->layout);
}

dpt_layout dpt_common_layout(dpt_ctx *ctx, dpt_tensor **a, dpt_tensor **b)
{
    if ((*a)->layout != (*b)->layout) {
        *a = dpt_plain(ctx, *a), *b = dpt_plain(ctx, *b);
        return DPT_LAYOUT_NCHW;
    }
    if ((*a)->dtype != (*b)->dtype) *a = dpt_widen(ctx, *a), *b = dpt_widen(ctx, *b);
    return (*a)->layout;
}

/* ---------------------------------------------------------------- tensor lists */

void dpt_tensor_list_init(dpt_tensor_list *l, int count, int width)
{
    l->count = count, l->width = width, l->key = 0;
    l->ptr = calloc((size_t)(count * width + 1), sizeof *l->ptr);
    l->numel = calloc((size_t)count + 1, sizeof *l->numel);
    if (!l->ptr || !l->numel) dpt_fatal("out of host memory for a tensor list of %d", count);
}

void dpt_tensor_list_set(dpt_tensor_list *l, int index, int64_t numel, float *const *ptrs)
{
    l->numel[index] = numel;
    for (int k = 0; k < l->width; k++)
        l->ptr[index * l->width + k] = ptrs[k];
}

void dpt_tensor_list_seal(dpt_tensor_list *l)
{
    uint64_t h = dpt_hash_bytes(DPT_HASH_SEED, &l->width, sizeof l->width);
    h = dpt_hash_bytes(h, l->ptr, (size_t)(l->count * l->width) * sizeof *l->ptr);
    l->key = dpt_hash_bytes(h, l->numel, (size_t)l->count * sizeof *l->numel);
}

void dpt_tensor_list_free(dpt_tensor_list *l)
{
    free(l->ptr);
    free(l->numel);
    l->ptr = NULL, l->numel = NULL;
}
