/* dnnl_pool.c: oneDNN's max and average pooling on any of our layouts (bf16 forward with an
 * fp32 backward on its workspace), the native kernels where oneDNN has none. */
#if DPT_DNNL
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dnnl_internal.h"

/* ---------------------------------------------------------------- pooling
 * oneDNN pools nChw16c as it is (the blocked output of a convolution needs no reorder).
 * Max pooling's workspace is oneDNN's own record of the maxima (bytes or int32 per output);
 * average pooling counts padding, as the native kernel and PyTorch's default. */

static dpt_conv_shape pool_where(const dpt_pool_shape *p)
{
    return (dpt_conv_shape){.n = p->n,
                            .c_in = p->c,
                            .h = p->h,
                            .w = p->w,
                            .kh = p->kh,
                            .kw = p->kw,
                            .stride_h = p->stride_h,
                            .stride_w = p->stride_w,
                            .pad_h = p->pad_h,
                            .pad_w = p->pad_w};
}

static pool_plan *pool_plan_for(dpt_ctx *ctx, const dpt_pool_shape *ps, bool max)
{
    dnnl_state *st = dnnl_state_of(ctx);
    for (int i = 0; i < st->npool; i++) {
        pool_plan *q = st->pool_plans[i];
        if (q->max == max && !memcmp(&q->shape, ps, sizeof *ps)) return q;
    }
    pool_plan *q = calloc(1, sizeof *q);
    if (!q) dpt_fatal("out of host memory for a oneDNN plan");
    q->shape = *ps, q->max = max;
    dpt_conv_shape where = pool_where(ps);
    int64_t xs[4] = {ps->n, ps->c, ps->h, ps->w}, ys[4] = {ps->n, ps->c, ps->oh, ps->ow};
    dnnl_activation_md(&q->src, xs, (dpt_layout)ps->layout, (dpt_dtype)ps->dtype, &where);
    dnnl_activation_md(&q->dst, ys, (dpt_layout)ps->layout, (dpt_dtype)ps->dtype, &where);
    dnnl_activation_md(&q->dsrc, xs, (dpt_layout)ps->layout, DPT_F32, &where);
    dnnl_activation_md(&q->ddst, ys, (dpt_layout)ps->layout, DPT_F32, &where);
    dnnl_dims_t strides = {ps->stride_h, ps->stride_w}, kernel = {ps->kh, ps->kw},
                pad_l = {ps->pad_h, ps->pad_w},
                pad_r = {dnnl_pad_right(ps->h, ps->kh, ps->stride_h, ps->pad_h, 1, ps->oh),
                         dnnl_pad_right(ps->w, ps->kw, ps->stride_w, ps->pad_w, 1, ps->ow)};
    dnnl_alg_kind_t alg = max ? dnnl_pooling_max : dnnl_pooling_avg_include_padding;
    dnnl_primitive_attr_t attr;
    CHECK_DNNL(dnnl_primitive_attr_create(&attr), "attributes", &where);
    CHECK_DNNL(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "attributes",
               &where);
    dnnl_pooling_desc_t fd, bd;
    dnnl_primitive_desc_t fpd = NULL, bpd = NULL;
    bool ok = dnnl_pooling_forward_desc_init(&fd, dnnl_forward_training, alg, &q->src, &q->dst, strides,
                                             kernel, pad_l, pad_r) == dnnl_success &&
              dnnl_primitive_desc_create(&fpd, &fd, attr, st->engine, NULL) == dnnl_success &&
              dnnl_pooling_backward_desc_init(&bd, alg, &q->dsrc, &q->ddst, strides, kernel, pad_l, pad_r) ==
                  dnnl_success &&
              dnnl_primitive_desc_create(&bpd, &bd, attr, st->engine, fpd) == dnnl_success;
    dnnl_primitive_attr_destroy(attr);
    if (ok) {
        q->ws = *dnnl_md(fpd, dnnl_query_workspace_md);
        q->fwd_scratch = *dnnl_md(fpd, dnnl_query_scratchpad_md),
        q->bwd_scratch = *dnnl_md(bpd, dnnl_query_scratchpad_md);
        CHECK_DNNL(dnnl_primitive_create(&q->fwd, fpd), "pooling forward", &where);
        CHECK_DNNL(dnnl_primitive_create(&q->bwd, bpd), "pooling backward", &where);
    } else {
        char sh[320];
        dnnl_shape_str(&where, sh, sizeof sh);
        fprintf(stderr, "warning: oneDNN has no %s pooling for %s: this shape runs on the native kernels\n",
                max ? "max" : "average", sh);
        q->native = true;
    }
    if (fpd) dnnl_primitive_desc_destroy(fpd);
    if (bpd) dnnl_primitive_desc_destroy(bpd);
    APPEND_PLAN(st->pool_plans, st->npool, st->cap_pool, q);
    return q;
}

bool dnnl_pool16(dpt_ctx *ctx, const dpt_pool_shape *ps, bool max)
{
    return !pool_plan_for(ctx, ps, max)->native; /* the native kernels read F32 */
}

static size_t native_ws_bytes(const dpt_pool_shape *ps)
{
    return (size_t)(ps->n * ps->c * ps->oh * ps->ow) * sizeof(int32_t);
}

size_t dnnl_maxpool_ws_bytes(dpt_ctx *ctx, const dpt_pool_shape *ps)
{
    pool_plan *q = pool_plan_for(ctx, ps, true);
    return q->native ? native_ws_bytes(ps) : dnnl_memory_desc_get_size(&q->ws);
}

/* A shape oneDNN cannot pool: the native kernels on NCHW copies of blocked tensors. */
static void native_pool_fwd(dpt_ctx *ctx, const dpt_pool_shape *ps, bool max, const float *x, float *y,
                            void *ws)
{
    dpt_pool_shape plain = *ps;
    plain.layout = DPT_LAYOUT_NCHW;
    int64_t xs[4] = {ps->n, ps->c, ps->h, ps->w}, ys[4] = {ps->n, ps->c, ps->oh, ps->ow};
    dnnl_block bx = {0}, by = {0};
    const float *px = dnnl_as_nchw(ctx, x, (dpt_layout)ps->layout, DPT_F32, xs, &bx);
    float *py = ps->layout == DPT_LAYOUT_NCHW
                    ? y
                    : dnnl_block_get(ctx, &by, (size_t)(ys[0] * ys[1] * ys[2] * ys[3]) * sizeof(float),
                                "a pooling output");
    if (max)
        dpt_cpu_maxpool_fwd(ctx, &plain, px, py, ws);
    else
        dpt_cpu_avgpool_fwd(ctx, &plain, px, py);
    if (py != y) dnnl_relayout(ctx, py, DPT_LAYOUT_NCHW, y, (dpt_layout)ps->layout, ys, false);
    dnnl_block_put(ctx, &by), dnnl_block_put(ctx, &bx);
}

static void native_pool_bwd(dpt_ctx *ctx, const dpt_pool_shape *ps, bool max, const float *dy, const void *ws,
                            float *dx, bool dx_accumulate)
{
    dpt_pool_shape plain = *ps;
    plain.layout = DPT_LAYOUT_NCHW;
    int64_t xs[4] = {ps->n, ps->c, ps->h, ps->w}, ys[4] = {ps->n, ps->c, ps->oh, ps->ow};
    if (ps->layout == DPT_LAYOUT_NCHW) {
        if (max)
            dpt_cpu_maxpool_bwd(ctx, &plain, dy, ws, dx, dx_accumulate);
        else
            dpt_cpu_avgpool_bwd(ctx, &plain, dy, dx, dx_accumulate);
        return;
    }
    dnnl_block bdy = {0}, bdx = {0};
    const float *pdy = dnnl_as_nchw(ctx, dy, (dpt_layout)ps->layout, DPT_F32, ys, &bdy);
    float *pdx = dnnl_block_get(ctx, &bdx, (size_t)(xs[0] * xs[1] * xs[2] * xs[3]) * sizeof(float), "a gradient");
    if (max)
        dpt_cpu_maxpool_bwd(ctx, &plain, pdy, ws, pdx, false);
    else
        dpt_cpu_avgpool_bwd(ctx, &plain, pdy, pdx, false);
    dnnl_relayout(ctx, pdx, DPT_LAYOUT_NCHW, dx, (dpt_layout)ps->layout, xs, dx_accumulate);
    dnnl_block_put(ctx, &bdx), dnnl_block_put(ctx, &bdy);
}

static void pool_fwd(dpt_ctx *ctx, const dpt_pool_shape *ps, bool max, const float *x, float *y, void *ws)
{
    pool_plan *q = pool_plan_for(ctx, ps, max);
    if (q->native) {
        native_pool_fwd(ctx, ps, max, x, y, ws);
        return;
    }
    dnnl_state *st = dnnl_state_of(ctx);
    dpt_conv_shape where = pool_where(ps);
    dnnl_block scr = {0};
    dnnl_block_get(ctx, &scr, dnnl_memory_desc_get_size(&q->fwd_scratch), "oneDNN scratchpad");
    int kinds[4] = {DNNL_ARG_SRC, DNNL_ARG_DST, DNNL_ARG_SCRATCHPAD, DNNL_ARG_WORKSPACE};
    dnnl_memory_t mems[4] = {dnnl_mem(st, &q->src, x, &where), dnnl_mem(st, &q->dst, y, &where),
                             dnnl_mem(st, &q->fwd_scratch, scr.ptr, &where), NULL};
    if (max) mems[3] = dnnl_mem(st, &q->ws, ws, &where);
    dnnl_execute(ctx, q->fwd, max ? 4 : 3, kinds, mems, max ? "max pooling forward" : "average pooling forward",
            &where);
    dnnl_block_put(ctx, &scr);
}

/* oneDNN writes diff_src: a gradient that must be added goes through a buffer. */
static void pool_bwd(dpt_ctx *ctx, const dpt_pool_shape *ps, bool max, const float *dy, const void *ws,
                     float *dx, bool dx_accumulate)
{
    pool_plan *q = pool_plan_for(ctx, ps, max);
    if (q->native) {
        native_pool_bwd(ctx, ps, max, dy, ws, dx, dx_accumulate);
        return;
    }
    dnnl_state *st = dnnl_state_of(ctx);
    dpt_conv_shape where = pool_where(ps);
    int64_t count = ps->n * ps->c * ps->h * ps->w;
    dnnl_block scr = {0}, bdx = {0};
    float *out =
        dx_accumulate ? dnnl_block_get(ctx, &bdx, (size_t)count * sizeof(float), "a pooling gradient") : dx;
    dnnl_block_get(ctx, &scr, dnnl_memory_desc_get_size(&q->bwd_scratch), "oneDNN scratchpad");
    int kinds[4] = {DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_SRC, DNNL_ARG_SCRATCHPAD, DNNL_ARG_WORKSPACE};
    dnnl_memory_t mems[4] = {dnnl_mem(st, &q->ddst, dy, &where), dnnl_mem(st, &q->dsrc, out, &where),
                             dnnl_mem(st, &q->bwd_scratch, scr.ptr, &where), NULL};
    if (max) mems[3] = dnnl_mem(st, &q->ws, ws, &where);
    dnnl_execute(ctx, q->bwd, max ? 4 : 3, kinds, mems, max ? "max pooling backward" : "average pooling backward",
            &where);
    if (dx_accumulate) dpt_backend_cpu.axpy(ctx, count, 1.0f, out, dx);
    dnnl_block_put(ctx, &scr), dnnl_block_put(ctx, &bdx);
}

void dnnl_maxpool_fwd(dpt_ctx *ctx, const dpt_pool_shape *s, const float *x, float *y, void *ws)
{
    pool_fwd(ctx, s, true, x, y, ws);
}
void dnnl_maxpool_bwd(dpt_ctx *ctx, const dpt_pool_shape *s, const float *dy, const void *ws,
                             float *dx, bool dx_accumulate)
{
    pool_bwd(ctx, s, true, dy, ws, dx, dx_accumulate);
}
void dnnl_avgpool_fwd(dpt_ctx *ctx, const dpt_pool_shape *s, const float *x, float *y)
{
    pool_fwd(ctx, s, false, x, y, NULL);
}
void dnnl_avgpool_bwd(dpt_ctx *ctx, const dpt_pool_shape *s, const float *dy, float *dx,
                             bool dx_accumulate)
{
    pool_bwd(ctx, s, false, dy, NULL, dx, dx_accumulate);
}

#endif
