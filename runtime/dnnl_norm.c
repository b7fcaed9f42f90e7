/* dnnl_norm.c: oneDNN's batch normalization (training forward and backward, inference), one
 * plan per (shape, layout, dtype, ReLU fused or not). */
#if DPT_DNNL
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dnnl_internal.h"

/* ---------------------------------------------------------------- batch norm
 * oneDNN computes the batch statistics in forward and returns mean and (biased) variance; the
 * running statistics move here with the unbiased variance (torch.nn.BatchNorm2d's rule). The
 * variance, not the inverse std, is what its backward reads: it goes in the save_stat slot. */

static bn_plan *bn_plan_for(dpt_ctx *ctx, int64_t n, int64_t c, int64_t hw, dpt_layout layout, dpt_dtype dtype,
                           double eps, bool relu)
{
    dnnl_state *st = dnnl_state_of(ctx);
    for (int i = 0; i < st->nbn; i++) {
        bn_plan *b = st->bn_plans[i];
        if (b->n == n && b->c == c && b->hw == hw && b->layout == layout && b->dtype == dtype && b->relu == relu &&
            b->eps == eps)
            return b;
    }
    dpt_conv_shape where = {.n = n, .c_in = c, .h = hw, .w = 1}; /* for messages */
    bn_plan *b = calloc(1, sizeof *b);
    if (!b) dpt_fatal("out of host memory for a oneDNN plan");
    b->n = n, b->c = c, b->hw = hw, b->layout = layout, b->dtype = dtype, b->relu = relu, b->eps = eps;
    /* (N, C, H*W, 1) is the same memory as (N, C, H, W) in either layout */
    dnnl_activation_md(&b->data, (int64_t[]){n, c, hw, 1}, layout, dtype, &where);
    CHECK_DNNL(dnnl_memory_desc_init_by_tag(&b->stat, 1, (dnnl_dims_t){c}, dnnl_f32, dnnl_x), "memory",
               &where);
    dnnl_primitive_attr_t attr;
    CHECK_DNNL(dnnl_primitive_attr_create(&attr), "attributes", &where);
    CHECK_DNNL(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "attributes",
               &where);
    /* fuse_norm_relu: forward writes max(y, 0) and a mask of where y > 0 (the workspace); backward
     * applies the mask to dy as it reads it */
    unsigned flags = dnnl_use_scale | dnnl_use_shift | (relu ? dnnl_fuse_norm_relu : 0u);
    dnnl_batch_normalization_desc_t fd, bd, id;
    dnnl_primitive_desc_t fpd, bpd, ipd;
    CHECK_DNNL(
        dnnl_batch_normalization_forward_desc_init(&fd, dnnl_forward_training, &b->data, (float)eps, flags),
        "batch normalization forward", &where);
    CHECK_DNNL(dnnl_primitive_desc_create(&fpd, &fd, attr, st->engine, NULL), "batch normalization forward",
               &where);
    bpd = NULL;
    if (dtype == DPT_F32) { /* a BF16 x is widened for backward: its gradients are F32 */
        CHECK_DNNL(dnnl_batch_normalization_backward_desc_init(&bd, dnnl_backward, &b->data, &b->data,
                                                               (float)eps, flags),
                   "batch normalization backward", &where);
        CHECK_DNNL(dnnl_primitive_desc_create(&bpd, &bd, attr, st->engine, fpd), "batch normalization backward",
                   &where);
    }
    CHECK_DNNL(dnnl_batch_normalization_forward_desc_init(&id, dnnl_forward_inference, &b->data, (float)eps,
                                                          flags | dnnl_use_global_stats),
               "batch normalization inference", &where);
    CHECK_DNNL(dnnl_primitive_desc_create(&ipd, &id, attr, st->engine, NULL), "batch normalization inference",
               &where);
    dnnl_primitive_attr_destroy(attr);
    b->fwd_scratch = *dnnl_md(fpd, dnnl_query_scratchpad_md), b->infer_scratch = *dnnl_md(ipd, dnnl_query_scratchpad_md);
    if (relu) b->ws = *dnnl_md(fpd, dnnl_query_workspace_md);
    CHECK_DNNL(dnnl_primitive_create(&b->fwd, fpd), "batch normalization forward", &where);
    CHECK_DNNL(dnnl_primitive_create(&b->infer, ipd), "batch normalization inference", &where);
    if (bpd) {
        b->bwd_scratch = *dnnl_md(bpd, dnnl_query_scratchpad_md);
        CHECK_DNNL(dnnl_primitive_create(&b->bwd, bpd), "batch normalization backward", &where);
        dnnl_primitive_desc_destroy(bpd);
    }
    dnnl_primitive_desc_destroy(fpd);
    dnnl_primitive_desc_destroy(ipd);
    APPEND_PLAN(st->bn_plans, st->nbn, st->cap_bn, b);
    return b;
}

void dnnl_bn_fused_fwd(dpt_ctx *ctx, const float *x, float *y, int64_t n, int64_t c, int64_t hw, dpt_layout layout,
                       dpt_dtype dtype, const float *gamma, const float *beta, float *running_mean, float *running_var,
                       double momentum, double eps, float *save_mean, float *save_var, void *ws)
{
    dnnl_state *st = dnnl_state_of(ctx);
    bn_plan *b = bn_plan_for(ctx, n, c, hw, layout, dtype, eps, ws != NULL);
    dpt_conv_shape where = {.n = n, .c_in = c, .h = hw, .w = 1};
    dnnl_block scr = {0};
    dnnl_block_get(ctx, &scr, dnnl_memory_desc_get_size(&b->fwd_scratch), "oneDNN scratchpad");
    dnnl_execute(ctx, b->fwd, ws ? 8 : 7,
            (int[]){DNNL_ARG_SRC, DNNL_ARG_DST, DNNL_ARG_SCALE, DNNL_ARG_SHIFT, DNNL_ARG_MEAN,
                    DNNL_ARG_VARIANCE, DNNL_ARG_SCRATCHPAD, DNNL_ARG_WORKSPACE},
            (dnnl_memory_t[]){dnnl_mem(st, &b->data, x, &where), dnnl_mem(st, &b->data, y, &where),
                              dnnl_mem(st, &b->stat, gamma, &where), dnnl_mem(st, &b->stat, beta, &where),
                              dnnl_mem(st, &b->stat, save_mean, &where), dnnl_mem(st, &b->stat, save_var, &where),
                              dnnl_mem(st, &b->fwd_scratch, scr.ptr, &where),
                              ws ? dnnl_mem(st, &b->ws, ws, &where) : NULL},
            "batch normalization forward", &where);
    dnnl_block_put(ctx, &scr);
    double count = (double)(n * hw), unbias = count > 1 ? count / (count - 1) : 1.0;
    for (int64_t ch = 0; running_mean && ch < c; ch++) {
        running_mean[ch] = (float)((1 - momentum) * running_mean[ch] + momentum * save_mean[ch]);
        running_var[ch] = (float)((1 - momentum) * running_var[ch] + momentum * save_var[ch] * unbias);
    }
}

void dnnl_bn_fused_bwd(dpt_ctx *ctx, const float *x, const float *dy, float *dx, bool dx_accumulate, int64_t n,
                       int64_t c, int64_t hw, dpt_layout layout, dpt_dtype dtype, const float *gamma, float *dgamma,
                       float *dbeta, double eps, const float *save_mean, const float *save_var, const void *ws)
{
    dnnl_state *st = dnnl_state_of(ctx);
    bn_plan *b = bn_plan_for(ctx, n, c, hw, layout, DPT_F32, eps, ws != NULL);
    dpt_conv_shape where = {.n = n, .c_in = c, .h = hw, .w = 1};
    size_t bytes = (size_t)(n * c * hw) * sizeof(float);
    dnnl_block scr = {0}, bdx = {0}, bdp = {0}, bx = {0};
    if (dtype == DPT_BF16) { /* x widened into a buffer of its own layout (the batch's statistics are F32) */
        dnnl_widen(ctx, x, layout, dnnl_block_get(ctx, &bx, bytes, "a widened batch-norm input"), layout,
                   (int64_t[]){n, c, hw, 1}, false);
        x = bx.ptr;
    }
    float *out = dx_accumulate ? dnnl_block_get(ctx, &bdx, bytes, "a batch-norm gradient") : dx;
    float *dscale = dnnl_block_get(ctx, &bdp, (size_t)(2 * c) * sizeof(float), "batch-norm parameter gradients");
    dnnl_block_get(ctx, &scr, dnnl_memory_desc_get_size(&b->bwd_scratch), "oneDNN scratchpad");
    dnnl_execute(ctx, b->bwd, ws ? 11 : 10,
            (int[]){DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_SCALE, DNNL_ARG_MEAN, DNNL_ARG_VARIANCE,
                    DNNL_ARG_DIFF_SRC, DNNL_ARG_DIFF_SCALE, DNNL_ARG_DIFF_SHIFT, DNNL_ARG_SHIFT,
                    DNNL_ARG_SCRATCHPAD, DNNL_ARG_WORKSPACE},
            (dnnl_memory_t[]){dnnl_mem(st, &b->data, x, &where), dnnl_mem(st, &b->data, dy, &where),
                              dnnl_mem(st, &b->stat, gamma, &where), dnnl_mem(st, &b->stat, save_mean, &where),
                              dnnl_mem(st, &b->stat, save_var, &where), dnnl_mem(st, &b->data, out, &where),
                              dnnl_mem(st, &b->stat, dscale, &where), dnnl_mem(st, &b->stat, dscale + c, &where),
                              dnnl_mem(st, &b->stat, dscale + c, &where),
                              dnnl_mem(st, &b->bwd_scratch, scr.ptr, &where),
                              ws ? dnnl_mem(st, &b->ws, (void *)ws, &where) : NULL},
            "batch normalization backward", &where);
    if (dx_accumulate) dpt_backend_cpu.axpy(ctx, n * c * hw, 1.0f, out, dx);
    for (int64_t ch = 0; ch < c; ch++)
        dgamma[ch] += dscale[ch], dbeta[ch] += dscale[c + ch];
    dnnl_block_put(ctx, &scr), dnnl_block_put(ctx, &bdp), dnnl_block_put(ctx, &bdx), dnnl_block_put(ctx, &bx);
}

/* The mask's bytes for a fused batch norm + ReLU of this shape; 0 where it cannot be fused: a
 * BF16 x runs the F32 plan's backward, which must read the forward's mask in the same format. */
size_t dnnl_bn_relu_ws_bytes(dpt_ctx *ctx, int64_t n, int64_t c, int64_t hw, dpt_layout layout, dpt_dtype dtype,
                             double eps)
{
    bn_plan *f = bn_plan_for(ctx, n, c, hw, layout, dtype, eps, true);
    if (dtype != DPT_F32) {
        bn_plan *b = bn_plan_for(ctx, n, c, hw, layout, DPT_F32, eps, true);
        if (!dnnl_memory_desc_equal(&f->ws, &b->ws)) return 0;
    }
    return dnnl_memory_desc_get_size(&f->ws);
}

void dnnl_bn_fused_infer(dpt_ctx *ctx, const float *x, float *y, int64_t n, int64_t c, int64_t hw,
                                dpt_layout layout, dpt_dtype dtype, const float *gamma, const float *beta,
                                const float *running_mean, const float *running_var, double eps)
{
    dnnl_state *st = dnnl_state_of(ctx);
    bn_plan *b = bn_plan_for(ctx, n, c, hw, layout, dtype, eps, false);
    dpt_conv_shape where = {.n = n, .c_in = c, .h = hw, .w = 1};
    dnnl_block scr = {0};
    dnnl_block_get(ctx, &scr, dnnl_memory_desc_get_size(&b->infer_scratch), "oneDNN scratchpad");
    dnnl_execute(ctx, b->infer, 7,
            (int[]){DNNL_ARG_SRC, DNNL_ARG_DST, DNNL_ARG_SCALE, DNNL_ARG_SHIFT, DNNL_ARG_MEAN,
                    DNNL_ARG_VARIANCE, DNNL_ARG_SCRATCHPAD},
            (dnnl_memory_t[]){dnnl_mem(st, &b->data, x, &where), dnnl_mem(st, &b->data, y, &where),
                              dnnl_mem(st, &b->stat, gamma, &where), dnnl_mem(st, &b->stat, beta, &where),
                              dnnl_mem(st, &b->stat, running_mean, &where), dnnl_mem(st, &b->stat, running_var, &where),
                              dnnl_mem(st, &b->infer_scratch, scr.ptr, &where)},
            "batch normalization inference", &where);
    dnnl_block_put(ctx, &scr);
}

#endif
