/* dnnl_conv.c: oneDNN's convolutions: one plan per (shape, input layout) with the three
 * primitives and the reorders they still need (none between convolutions in nChw16c); a shape
 * oneDNN cannot run takes the native kernels, with one warning naming it. */
#if DPT_DNNL
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dnnl_internal.h"

void dnnl_conv_plan_free(conv_plan *p)
{
    dnnl_primitive_t all[] = {
        p->fwd,       p->bwd_data,       p->bwd_weights,     p->src_in,       p->weights_in,
        p->dst_out,   p->diff_dst_in,    p->bd_weights_in,   p->diff_src_acc, p->diff_src_out,
        p->bw_src_in, p->bw_diff_dst_in, p->diff_weights_acc};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]) dnnl_primitive_destroy(all[i]);
    free(p);
}

/* The right padding that gives our output size (oneDNN states both sides; ours is floor). */
int64_t dnnl_pad_right(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil, int64_t out)
{
    int64_t extent = dil * (k - 1) + 1, r = (out - 1) * stride + extent - in - pad;
    return r < 0 ? 0 : r;
}

/* The memory descriptor of an activation (N, C, H, W) in one of our layouts and dtypes. */
static conv_plan *plan_create(dpt_ctx *ctx, const dpt_conv_shape *s)
{
    dnnl_state *st = dnnl_state_of(ctx);
    conv_plan *p = calloc(1, sizeof *p);
    if (!p) dpt_fatal("out of host memory for a oneDNN plan");
    p->shape = *s;
    int64_t g = s->groups;
    dnnl_dims_t src_dims = {s->n, s->c_in, s->h, s->w}, dst_dims = {s->n, s->c_out, s->oh, s->ow},
                bias_dims = {s->c_out};
    dnnl_dims_t w_dims = {s->c_out, s->c_in, s->kh, s->kw},
                gw_dims = {g, s->c_out / g, s->c_in / g, s->kh, s->kw};
    dnnl_dims_t strides = {s->stride_h, s->stride_w}, dilates = {s->dil_h - 1, s->dil_w - 1},
                pad_l = {s->pad_h, s->pad_w},
                pad_r = {dnnl_pad_right(s->h, s->kh, s->stride_h, s->pad_h, s->dil_h, s->oh),
                         dnnl_pad_right(s->w, s->kw, s->stride_w, s->pad_w, s->dil_w, s->ow)};
    int wnd = g > 1 ? 5 : 4;
    const int64_t *wd = g > 1 ? gw_dims : w_dims;
    /* [train] precision = bf16: what a convolution reads (x, w, dy) is bf16, what it writes
     * (dx, dw, db) fp32, accumulated in fp32; the reorders into the primitives' layouts
     * round to bf16 (nearest even) on the way. y is bf16 when the caller keeps 16-bit
     * activations (s->y_dtype), else fp32; x arrives in either (s->x_dtype). fp32: every type
     * below is f32. */
    dnnl_data_type_t in = ctx->precision == DPT_PRECISION_BF16 ? dnnl_bf16 : dnnl_f32;
    dpt_dtype yt = in == dnnl_bf16 && s->y_dtype == DPT_BF16 ? DPT_BF16 : DPT_F32;
    dnnl_memory_desc_t any_src, any_w, any_dst, any_diff_src, any_diff_w, any_diff_dst, blocked_dst;
    /* [train] memory_format = nhwc: the activations' side of all three primitives is channels
     * last (PyTorch's channels_last on oneDNN), so y is written, and dy read, in NHWC with no
     * reorder; nchw: oneDNN picks (its blocked layout, kept when it is ours). */
    dnnl_format_tag_t act_tag = ctx->nhwc ? dnnl_nhwc : dnnl_format_tag_any;
    dnnl_activation_md(&p->src, src_dims, (dpt_layout)s->x_layout, (dpt_dtype)s->x_dtype, s);
    dnnl_activation_md(&p->dx, src_dims, (dpt_layout)s->x_layout, DPT_F32, s);
    dnnl_activation_md(&p->dst, dst_dims, DPT_LAYOUT_NCHW, yt, s);
    dnnl_activation_md(&p->dy, dst_dims, DPT_LAYOUT_NCHW, DPT_F32, s);
    dnnl_activation_md(&blocked_dst, dst_dims, DPT_LAYOUT_NCHW16C, yt, s);
    CHECK_DNNL(dnnl_memory_desc_init_by_tag(&p->weights, wnd, wd, dnnl_f32, g > 1 ? dnnl_goihw : dnnl_oihw),
               "memory", s);
    CHECK_DNNL(dnnl_memory_desc_init_by_tag(&p->bias, 1, bias_dims, dnnl_f32, dnnl_x), "memory", s);
    CHECK_DNNL(dnnl_memory_desc_init_by_tag(&any_src, 4, src_dims, in, act_tag), "memory", s);
    CHECK_DNNL(dnnl_memory_desc_init_by_tag(&any_diff_src, 4, src_dims, dnnl_f32, act_tag), "memory", s);
    CHECK_DNNL(
        dnnl_memory_desc_init_by_tag(&any_dst, 4, dst_dims, yt == DPT_BF16 ? dnnl_bf16 : dnnl_f32, act_tag),
        "memory", s);
    CHECK_DNNL(dnnl_memory_desc_init_by_tag(&any_diff_dst, 4, dst_dims, in, act_tag), "memory", s);
    CHECK_DNNL(dnnl_memory_desc_init_by_tag(&any_w, wnd, wd, in, dnnl_format_tag_any), "memory", s);
    CHECK_DNNL(dnnl_memory_desc_init_by_tag(&any_diff_w, wnd, wd, dnnl_f32, dnnl_format_tag_any), "memory", s);

    dnnl_primitive_attr_t attr;
    CHECK_DNNL(dnnl_primitive_attr_create(&attr), "attributes", s);
    CHECK_DNNL(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "attributes", s);
    dnnl_convolution_desc_t fd, bd, wd_desc;
    dnnl_primitive_desc_t fpd = NULL, bpd = NULL, wpd = NULL;
    /* The bias is always part of the plan: a convolution without one passes zeros (tiny) so
     * one plan serves both; the backward bias gradient is a by-product of backward weights. */
    bool ok = dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct,
                                                         &any_src, &any_w, &p->bias, &any_dst, strides,
                                                         dilates, pad_l, pad_r) == dnnl_success &&
              dnnl_primitive_desc_create(&fpd, &fd, attr, st->engine, NULL) == dnnl_success &&
              dnnl_dilated_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &any_diff_src,
                                                               &any_w, &any_diff_dst, strides, dilates, pad_l,
                                                               pad_r) == dnnl_success &&
              dnnl_primitive_desc_create(&bpd, &bd, attr, st->engine, fpd) == dnnl_success &&
              dnnl_dilated_convolution_backward_weights_desc_init(&wd_desc, dnnl_convolution_direct, &any_src,
                                                                  &any_diff_w, &p->bias, &any_diff_dst, strides,
                                                                  dilates, pad_l, pad_r) == dnnl_success &&
              dnnl_primitive_desc_create(&wpd, &wd_desc, attr, st->engine, fpd) == dnnl_success;
    dnnl_primitive_attr_destroy(attr);
    if (!ok) {
        char sh[320];
        dnnl_shape_str(s, sh, sizeof sh);
        fprintf(stderr, "warning: oneDNN has no convolution for %s: this shape runs on the native kernels\n",
                sh);
        p->native = true;
        p->y_layout = DPT_LAYOUT_NCHW;
        p->y_dtype = DPT_F32;
        if (fpd) dnnl_primitive_desc_destroy(fpd);
        if (bpd) dnnl_primitive_desc_destroy(bpd);
        return p;
    }
    p->fwd_src = *dnnl_md(fpd, dnnl_query_src_md), p->fwd_weights = *dnnl_md(fpd, dnnl_query_weights_md);
    p->fwd_dst = *dnnl_md(fpd, dnnl_query_dst_md);
    p->bd_diff_src = *dnnl_md(bpd, dnnl_query_diff_src_md), p->bd_weights = *dnnl_md(bpd, dnnl_query_weights_md);
    p->bd_diff_dst = *dnnl_md(bpd, dnnl_query_diff_dst_md);
    p->bw_src = *dnnl_md(wpd, dnnl_query_src_md), p->bw_diff_weights = *dnnl_md(wpd, dnnl_query_diff_weights_md);
    p->bw_diff_dst = *dnnl_md(wpd, dnnl_query_diff_dst_md);
    p->fwd_scratch = *dnnl_md(fpd, dnnl_query_scratchpad_md), p->bd_scratch = *dnnl_md(bpd, dnnl_query_scratchpad_md);
    p->bw_scratch = *dnnl_md(wpd, dnnl_query_scratchpad_md);
    CHECK_DNNL(dnnl_primitive_create(&p->fwd, fpd), "convolution forward", s);
    CHECK_DNNL(dnnl_primitive_create(&p->bwd_data, bpd), "convolution backward data", s);
    CHECK_DNNL(dnnl_primitive_create(&p->bwd_weights, wpd), "convolution backward weights", s);
    dnnl_primitive_desc_destroy(fpd);
    dnnl_primitive_desc_destroy(bpd);
    dnnl_primitive_desc_destroy(wpd);
    /* y keeps oneDNN's blocked layout when it is ours (C a multiple of 16), else NCHW; NHWC
     * with memory_format = nhwc */
    p->y_dtype = yt;
    if (ctx->nhwc) {
        dnnl_activation_md(&p->dst, dst_dims, DPT_LAYOUT_NHWC, yt, s);
        dnnl_activation_md(&p->dy, dst_dims, DPT_LAYOUT_NHWC, DPT_F32, s);
        p->y_layout = DPT_LAYOUT_NHWC;
    } else if (s->c_out % 16 == 0 && dnnl_memory_desc_equal(&p->fwd_dst, &blocked_dst)) {
        p->dst = blocked_dst;
        dnnl_activation_md(&p->dy, dst_dims, DPT_LAYOUT_NCHW16C, DPT_F32, s);
        p->y_layout = DPT_LAYOUT_NCHW16C;
    }
    p->src_in = dnnl_make_reorder(st, &p->src, &p->fwd_src, false, s);
    p->weights_in = dnnl_make_reorder(st, &p->weights, &p->fwd_weights, false, s);
    p->dst_out = dnnl_make_reorder(st, &p->fwd_dst, &p->dst, false, s);
    p->diff_dst_in = dnnl_make_reorder(st, &p->dy, &p->bd_diff_dst, false, s);
    p->bd_weights_in = dnnl_make_reorder(st, &p->weights, &p->bd_weights, false, s);
    p->diff_src_acc = dnnl_make_reorder(st, &p->bd_diff_src, &p->dx, true, s);
    p->diff_src_out = dnnl_make_reorder(st, &p->bd_diff_src, &p->dx, false, s);
    p->bw_src_in = dnnl_make_reorder(st, &p->src, &p->bw_src, false, s);
    p->bw_diff_dst_in = dnnl_make_reorder(st, &p->dy, &p->bw_diff_dst, false, s);
    p->diff_weights_acc = dnnl_make_reorder(st, &p->bw_diff_weights, &p->weights, true, s);
    return p;
}

static conv_plan *plan_for(dpt_ctx *ctx, const dpt_conv_shape *s)
{
    dnnl_state *st = dnnl_state_of(ctx);
    for (int i = 0; i < st->nplans; i++)
        if (!memcmp(&st->plans[i]->shape, s, sizeof *s)) return st->plans[i];
    conv_plan *p = plan_create(ctx, s);
    APPEND_PLAN(st->plans, st->nplans, st->cap_plans, p);
    return p;
}

/* ---------------------------------------------------------------- convolution */

/* oneDNN reads x in any layout and dtype (a reorder of its own where its kernel wants another),
 * and writes y as the shape's plan chose. */
void dnnl_conv2d_io(dpt_ctx *ctx, const dpt_conv_shape *s, dpt_conv_io *io)
{
    const conv_plan *p = plan_for(ctx, s);
    *io = (dpt_conv_io){.x_layout = (dpt_layout)s->x_layout, .x_f32 = false, .y_layout = p->y_layout,
                        .y_dtype = p->y_dtype};
}

/* The shape's activation in NCHW F32 for a native kernel: t itself, or a relayout (and
 * widening) into *b (which the caller returns with block_put). */
const float *dnnl_as_nchw(dpt_ctx *ctx, const float *t, dpt_layout layout, dpt_dtype dtype,
                            const int64_t *shape, dnnl_block *b)
{
    if (layout == DPT_LAYOUT_NCHW && dtype == DPT_F32) return t;
    size_t bytes = (size_t)(shape[0] * shape[1] * shape[2] * shape[3]) * sizeof(float);
    dnnl_act_reorder(ctx, t, layout, dtype, dnnl_block_get(ctx, b, bytes, "a relayout"), DPT_LAYOUT_NCHW, DPT_F32, shape,
                false);
    return b->ptr;
}

/* A shape without a oneDNN kernel: the native kernels, which read x (and write dx) in NCHW. */
static void native_fwd(dpt_ctx *ctx, const dpt_conv_shape *s, const float *x, const float *w,
                       const float *bias, float *y)
{
    dpt_conv_shape plain = *s;
    plain.x_layout = DPT_LAYOUT_NCHW;
    dnnl_block bx = {0};
    plain.x_dtype = DPT_F32;
    x = dnnl_as_nchw(ctx, x, (dpt_layout)s->x_layout, (dpt_dtype)s->x_dtype, (int64_t[]){s->n, s->c_in, s->h, s->w},
                &bx);
    dpt_cpu_conv2d_fwd(ctx, &plain, x, w, bias, y);
    dnnl_block_put(ctx, &bx);
}

static void native_bwd(dpt_ctx *ctx, const dpt_conv_shape *s, const float *x, const float *w, const float *dy,
                       float *dx, bool dx_accumulate, float *dw, float *dbias)
{
    if (s->x_layout == DPT_LAYOUT_NCHW && s->x_dtype == DPT_F32) {
        dpt_cpu_conv2d_bwd(ctx, s, x, w, dy, dx, dx_accumulate, dw, dbias);
        return;
    }
    dpt_conv_shape plain = *s;
    plain.x_layout = DPT_LAYOUT_NCHW, plain.x_dtype = DPT_F32;
    int64_t shape[4] = {s->n, s->c_in, s->h, s->w};
    size_t bytes = (size_t)(s->n * s->c_in * s->h * s->w) * sizeof(float);
    dnnl_block bx = {0}, bdx = {0};
    if (x) x = dnnl_as_nchw(ctx, x, (dpt_layout)s->x_layout, (dpt_dtype)s->x_dtype, shape, &bx); /* dw's */
    if (dx) memset(dnnl_block_get(ctx, &bdx, bytes, "a relayout"), 0, bytes);
    dpt_cpu_conv2d_bwd(ctx, &plain, x, w, dy, bdx.ptr, true, dw, dbias);
    if (dx) dnnl_relayout(ctx, bdx.ptr, DPT_LAYOUT_NCHW, dx, (dpt_layout)s->x_layout, shape, dx_accumulate);
    dnnl_block_put(ctx, &bdx), dnnl_block_put(ctx, &bx);
}

void dnnl_conv2d_fwd(dpt_ctx *ctx, const dpt_conv_shape *s, const float *x, const float *w,
                            const float *bias, float *y)
{
    conv_plan *p = plan_for(ctx, s);
    if (p->native) {
        native_fwd(ctx, s, x, w, bias, y);
        return;
    }
    dnnl_state *st = dnnl_state_of(ctx);
    dnnl_block bsrc = {0}, bw = {0}, bdst = {0}, bbias = {0}, bscr = {0};
    const void *src = dnnl_laid_out(ctx, p->src_in, &p->src, x, &p->fwd_src, &bsrc, s);
    const void *wts = dnnl_laid_out(ctx, p->weights_in, &p->weights, w, &p->fwd_weights, &bw, s);
    if (!bias)
        memset(dnnl_block_get(ctx, &bbias, (size_t)s->c_out * sizeof(float), "oneDNN bias"), 0,
               (size_t)s->c_out * sizeof(float));
    void *dst = p->dst_out ? dnnl_block_get(ctx, &bdst, dnnl_memory_desc_get_size(&p->fwd_dst),
                                       "oneDNN convolution buffer")
                           : y;
    dnnl_block_get(ctx, &bscr, dnnl_memory_desc_get_size(&p->fwd_scratch), "oneDNN scratchpad");
    dnnl_execute(ctx, p->fwd, 5,
            (int[]){DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS, DNNL_ARG_DST, DNNL_ARG_SCRATCHPAD},
            (dnnl_memory_t[]){dnnl_mem(st, &p->fwd_src, src, s), dnnl_mem(st, &p->fwd_weights, wts, s),
                              dnnl_mem(st, &p->bias, bias ? bias : bbias.ptr, s), dnnl_mem(st, &p->fwd_dst, dst, s),
                              dnnl_mem(st, &p->fwd_scratch, bscr.ptr, s)},
            "convolution forward", s);
    if (p->dst_out) dnnl_run_reorder(ctx, p->dst_out, &p->fwd_dst, dst, &p->dst, y, s);
    dnnl_block_put(ctx, &bscr), dnnl_block_put(ctx, &bdst), dnnl_block_put(ctx, &bbias), dnnl_block_put(ctx, &bw),
        dnnl_block_put(ctx, &bsrc);
}

void dnnl_conv2d_bwd(dpt_ctx *ctx, const dpt_conv_shape *s, const float *x, const float *w,
                            const float *dy, float *dx, bool dx_accumulate, float *dw, float *dbias)
{
    conv_plan *p = plan_for(ctx, s);
    if (p->native) {
        native_bwd(ctx, s, x, w, dy, dx, dx_accumulate, dw, dbias);
        return;
    }
    dnnl_state *st = dnnl_state_of(ctx);
    dnnl_block bddst = {0}, bddst_w = {0};
    /* dy in the layout backward data wants; backward weights usually wants the same one */
    const void *ddst = dnnl_laid_out(ctx, p->diff_dst_in, &p->dy, dy, &p->bd_diff_dst, &bddst, s);
    if (dx) {
        dnnl_block bw = {0}, bdsrc = {0}, bscr = {0};
        const void *wts = dnnl_laid_out(ctx, p->bd_weights_in, &p->weights, w, &p->bd_weights, &bw, s);
        /* The first writer of dx in its own layout lets oneDNN write it directly. */
        bool direct = !dx_accumulate && !p->diff_src_out;
        if (!direct)
            dnnl_block_get(ctx, &bdsrc, dnnl_memory_desc_get_size(&p->bd_diff_src), "oneDNN convolution buffer");
        dnnl_block_get(ctx, &bscr, dnnl_memory_desc_get_size(&p->bd_scratch), "oneDNN scratchpad");
        dnnl_execute(ctx, p->bwd_data, 4,
                (int[]){DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC, DNNL_ARG_SCRATCHPAD},
                (dnnl_memory_t[]){dnnl_mem(st, &p->bd_diff_dst, ddst, s), dnnl_mem(st, &p->bd_weights, wts, s),
                                  dnnl_mem(st, &p->bd_diff_src, direct ? dx : bdsrc.ptr, s),
                                  dnnl_mem(st, &p->bd_scratch, bscr.ptr, s)},
                "convolution backward data", s);
        if (dx_accumulate)
            dnnl_run_reorder(ctx, p->diff_src_acc, &p->bd_diff_src, bdsrc.ptr, &p->dx, dx, s); /* dx += */
        else if (!direct)
            dnnl_run_reorder(ctx, p->diff_src_out, &p->bd_diff_src, bdsrc.ptr, &p->dx, dx, s); /* dx = */
        dnnl_block_put(ctx, &bscr), dnnl_block_put(ctx, &bdsrc), dnnl_block_put(ctx, &bw);
    }
    if (dw || dbias) {
        dnnl_block bsrc = {0}, bdw = {0}, bdb = {0}, bscr = {0};
        const void *src = dnnl_laid_out(ctx, p->bw_src_in, &p->src, x, &p->bw_src, &bsrc, s);
        const void *ddst_w =
            dnnl_memory_desc_equal(&p->bw_diff_dst, &p->bd_diff_dst)
                ? ddst
                : dnnl_laid_out(ctx, p->bw_diff_dst_in, &p->dy, dy, &p->bw_diff_dst, &bddst_w, s);
        dnnl_block_get(ctx, &bdw, dnnl_memory_desc_get_size(&p->bw_diff_weights), "oneDNN weight gradient");
        float *db = dnnl_block_get(ctx, &bdb, (size_t)s->c_out * sizeof(float), "oneDNN bias gradient");
        dnnl_block_get(ctx, &bscr, dnnl_memory_desc_get_size(&p->bw_scratch), "oneDNN scratchpad");
        dnnl_execute(ctx, p->bwd_weights, 5,
                (int[]){DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_BIAS,
                        DNNL_ARG_SCRATCHPAD},
                (dnnl_memory_t[]){dnnl_mem(st, &p->bw_src, src, s), dnnl_mem(st, &p->bw_diff_dst, ddst_w, s),
                                  dnnl_mem(st, &p->bw_diff_weights, bdw.ptr, s), dnnl_mem(st, &p->bias, db, s),
                                  dnnl_mem(st, &p->bw_scratch, bscr.ptr, s)},
                "convolution backward weights", s);
        if (dw)
            dnnl_run_reorder(ctx, p->diff_weights_acc, &p->bw_diff_weights, bdw.ptr, &p->weights, dw, s); /* dw += */
        if (dbias)
            for (int64_t c = 0; c < s->c_out; c++)
                dbias[c] += db[c];
        dnnl_block_put(ctx, &bscr), dnnl_block_put(ctx, &bdb), dnnl_block_put(ctx, &bdw), dnnl_block_put(ctx, &bsrc);
    }
    dnnl_block_put(ctx, &bddst_w), dnnl_block_put(ctx, &bddst);
}

#endif
