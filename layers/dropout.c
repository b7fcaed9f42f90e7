/* dropout.c: inverted dropout; each call's mask is keyed by one draw of the context's RNG
 * (saved in checkpoints, so a resumed run draws the same masks) and made by the backend. */
#include <stdlib.h>

#include "../runtime/autograd.h"
#include "../runtime/ctx.h"
#include "../runtime/error.h"

static void dropout_backward(dpt_ctx *ctx, dpt_node *node)
{
    dpt_grad_mul(ctx, node->out->grad, node->saved[0]->data, node->in[0]);
}

dpt_tensor *dpt_dropout(dpt_ctx *ctx, dpt_tensor *x, float p, bool training)
{
    DPT_ASSERT(p >= 0.0f && p < 1.0f, "dropout probability %g", p);
    if (!training || p == 0.0f) return x;
    x = dpt_dense(ctx, dpt_widen(ctx, x));
    /* one draw of the context's generator keys the call's counter-based stream (dpt_rng_at):
     * the mask is made on the device, the same values on the CPU and a GPU */
    uint64_t key = dpt_rng_next(&ctx->rng);
    dpt_tensor *mask = dpt_temp(ctx, x->ndim, x->shape); /* per element of memory: any layout */
    ctx->be->dropout_mask(ctx, mask->data, x->numel, key, p);
    dpt_tensor *y = dpt_temp_like(ctx, x);
    ctx->be->mul(ctx, x->numel, x->data, mask->data, y->data);
    dpt_node *node = dpt_tape_record(ctx, "dropout", dropout_backward, y, 1, &x);
    if (node) node->saved[0] = mask;
    return y;
}
