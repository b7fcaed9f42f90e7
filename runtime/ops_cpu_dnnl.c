/* ops_cpu_dnnl.c: the CPU backend with oneDNN convolutions, batch norm, pooling and GEMMs ([train]
 * cpu_kernels = onednn).
 *
 * The table is the native CPU table with convolution, batch norm, pooling and relayout
 * replaced. Each
 * convolution lets oneDNN choose its memory formats (format_tag_any: blocked nChw16c on
 * AVX-512). Its output stays in nChw16c when oneDNN wrote it so (the tensor carries the
 * layout, see tensor.h): batch norm, relu, pooling and the residual add run on it as it is,
 * and only an op that reads positions (the classifier, a reshape) converts it back to NCHW. Reordering at
 * every convolution's edges, as PyTorch's mkldnn path does, took a third of a ResNet-20 step.
 * One plan per (shape, input layout) holds the three convolution primitives and the reorders
 * they still need; plans live as long as the context. Backward results are added into dx, dw
 * and db (the table's += convention) by reorders that carry a sum post-op: no extra pass.
 * Scratchpads and buffers come from the caching allocator. A shape oneDNN cannot run takes
 * the native path, with one warning naming it. */
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "ctx.h"
#include "registry.h"
#include "error.h"

#if DPT_DNNL
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

typedef struct conv_plan {
    dpt_conv_shape shape;
    bool native;         /* oneDNN has no kernel for this shape */
    dpt_layout y_layout; /* what forward writes y in */
    dpt_dtype y_dtype;   /* and in which numbers (BF16: a 16-bit activation) */
    dnnl_primitive_t fwd, bwd_data, bwd_weights;
    /* the caller's layouts: x as it arrives, y as forward writes it (each in its dtype), dx
     * and dy in their layouts in F32, weights and bias plain */
    dnnl_memory_desc_t src, weights, dst, bias, dx, dy;
    /* what each primitive reads and writes */
    dnnl_memory_desc_t fwd_src, fwd_weights, fwd_dst, bd_diff_src, bd_weights, bd_diff_dst, bw_src,
        bw_diff_weights, bw_diff_dst;
    dnnl_memory_desc_t fwd_scratch, bd_scratch, bw_scratch; /* scratchpads (user-provided) */
    /* reorders (NULL: the layouts are equal, no copy); *_acc ones add into their target */
    dnnl_primitive_t src_in, weights_in, dst_out, diff_dst_in, bd_weights_in, diff_src_acc, diff_src_out,
        bw_src_in, bw_diff_dst_in, diff_weights_acc;
} conv_plan;

/* A batch-norm shape in one layout: training forward and backward, inference forward. */
typedef struct bn_plan {
    int64_t n, c, hw;
    dpt_layout layout;
    dpt_dtype dtype; /* of x and y; a BF16 plan has no backward (it runs the F32 plan's) */
    dnnl_memory_desc_t data, stat; /* x/y/dx/dy; mean/variance/scale/shift (c) */
    dnnl_memory_desc_t fwd_scratch, bwd_scratch, infer_scratch;
    dnnl_primitive_t fwd, bwd, infer;
} bn_plan;

/* A pooling shape in one layout: training forward (max: with its workspace) and backward. */
typedef struct pool_plan {
    dpt_pool_shape shape;
    bool max;
    bool native; /* oneDNN has no kernel: NCHW and the native kernels */
    /* x and y in the shape's dtype; dx and dy F32 (backward runs in F32 on a BF16 forward's
     * workspace: oneDNN's maxima records are the same) */
    dnnl_memory_desc_t src, dst, dsrc, ddst, ws, fwd_scratch, bwd_scratch;
    dnnl_primitive_t fwd, bwd;
} pool_plan;

/* A cached reorder between NCHW and nChw16c of one shape (and from BF16 to F32). */
typedef struct relayout_plan {
    int64_t shape[4];
    dpt_layout from, to;
    dpt_dtype from_dt, to_dt;
    bool accumulate;
    dnnl_memory_desc_t from_md, to_md;
    dnnl_primitive_t reorder;
} relayout_plan;

/* [train] precision = bf16: one GEMM shape (with its transposes, leading dimensions, alpha and
 * beta) on oneDNN's matmul: A and B rounded to bf16 into dense buffers of their own
 * orientation, fp32 accumulation and output, alpha as the output scale, beta as a sum. */
typedef struct gemm_plan {
    bool ta, tb;
    int64_t M, N, K, lda, ldb, ldc;
    float alpha, beta;
    dnnl_memory_desc_t a32, b32, a16, b16, c;
    dnnl_primitive_t to_a16, to_b16, matmul;
} gemm_plan;

typedef struct dnnl_state {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    gemm_plan **gemms;
    int ngemm, cap_gemm;
    conv_plan **plans;
    int nplans, cap_plans;
    bn_plan **bn_plans;
    int nbn, cap_bn;
    relayout_plan **relayouts;
    int nrelayouts, cap_relayouts;
    pool_plan **pool_plans;
    int npool, cap_pool;
} dnnl_state;

/* What a message names: a convolution; a pooling window (c_out 0, a kernel); a tensor. */
static void shape_str(const dpt_conv_shape *s, char *buf, size_t cap)
{
    if (s->c_out == 0) {
        int k = snprintf(buf, cap, "%s (%lld, %lld, %lld, %lld)", s->kh ? "pooling x" : "tensor",
                         (long long)s->n, (long long)s->c_in, (long long)s->h, (long long)s->w);
        if (s->kh && k > 0 && (size_t)k < cap)
            snprintf(buf + k, cap - (size_t)k, ", kernel %lldx%lld, stride %lldx%lld, padding %lldx%lld",
                     (long long)s->kh, (long long)s->kw, (long long)s->stride_h, (long long)s->stride_w,
                     (long long)s->pad_h, (long long)s->pad_w);
        return;
    }
    snprintf(
        buf, cap,
        "conv2d x (%lld, %lld, %lld, %lld) -> (%lld, %lld, %lld, %lld), kernel %lldx%lld, stride %lldx%lld, "
        "padding %lldx%lld, dilation %lldx%lld, groups %lld",
        (long long)s->n, (long long)s->c_in, (long long)s->h, (long long)s->w, (long long)s->n,
        (long long)s->c_out, (long long)s->oh, (long long)s->ow, (long long)s->kh, (long long)s->kw,
        (long long)s->stride_h, (long long)s->stride_w, (long long)s->pad_h, (long long)s->pad_w,
        (long long)s->dil_h, (long long)s->dil_w, (long long)s->groups);
}

/* A oneDNN call that must not fail once its plan exists: report the primitive, the shape and
 * oneDNN's status, then stop the job. */
#define CHECK_DNNL(call, what, shape)                                                                        \
    do {                                                                                                     \
        dnnl_status_t st_ = (call);                                                                          \
        if (st_ != dnnl_success) {                                                                           \
            char sh_[320];                                                                                   \
            shape_str(shape, sh_, sizeof sh_);                                                               \
            dpt_fatal("oneDNN %s failed for %s: %s (%s)", what, sh_, dnnl_status2str(st_), #call);           \
        }                                                                                                    \
    } while (0)

static dnnl_state *state_of(dpt_ctx *ctx)
{
    return ctx->backend_state;
}

/* Append `item` to one of the state's growing lists of plans (list, its count, its capacity). */
#define APPEND_PLAN(list, count, cap, item)                                                                  \
    do {                                                                                                     \
        if ((count) == (cap)) {                                                                              \
            (cap) = (cap) ? 2 * (cap) : 16;                                                                  \
            (list) = realloc((list), (size_t)(cap) * sizeof *(list));                                        \
            if (!(list)) dpt_fatal("out of host memory for oneDNN plans");                                   \
        }                                                                                                    \
        (list)[(count)++] = (item);                                                                          \
    } while (0)

/* ---------------------------------------------------------------- plans */

/* A reorder from one layout to another; NULL when they are equal and nothing is added. */
static dnnl_primitive_t make_reorder(dnnl_state *st, const dnnl_memory_desc_t *from,
                                     const dnnl_memory_desc_t *to, bool accumulate, const dpt_conv_shape *s)
{
    if (!accumulate && dnnl_memory_desc_equal(from, to)) return NULL;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t ops = NULL;
    if (accumulate) {
        CHECK_DNNL(dnnl_primitive_attr_create(&attr), "reorder attributes", s);
        CHECK_DNNL(dnnl_post_ops_create(&ops), "reorder post-ops", s);
        CHECK_DNNL(dnnl_post_ops_append_sum(ops, 1.0f), "reorder sum post-op", s);
        CHECK_DNNL(dnnl_primitive_attr_set_post_ops(attr, ops), "reorder post-ops", s);
    }
    dnnl_primitive_desc_t pd;
    CHECK_DNNL(dnnl_reorder_primitive_desc_create(&pd, from, st->engine, to, st->engine, attr), "reorder", s);
    dnnl_primitive_t p;
    CHECK_DNNL(dnnl_primitive_create(&p, pd), "reorder", s);
    dnnl_primitive_desc_destroy(pd);
    if (ops) dnnl_post_ops_destroy(ops);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return p;
}

static const dnnl_memory_desc_t *md(const_dnnl_primitive_desc_t pd, dnnl_query_t what)
{
    return dnnl_primitive_desc_query_md(pd, what, 0);
}

static void plan_free(conv_plan *p)
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
static int64_t pad_right(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil, int64_t out)
{
    int64_t extent = dil * (k - 1) + 1, r = (out - 1) * stride + extent - in - pad;
    return r < 0 ? 0 : r;
}

/* The memory descriptor of an activation (N, C, H, W) in one of our layouts and dtypes. */
static void activation_md(dnnl_memory_desc_t *d, const int64_t *shape, dpt_layout layout, dpt_dtype dtype,
                          const dpt_conv_shape *s)
{
    dnnl_dims_t dims = {shape[0], shape[1], shape[2], shape[3]};
    CHECK_DNNL(dnnl_memory_desc_init_by_tag(d, 4, dims, dtype == DPT_BF16 ? dnnl_bf16 : dnnl_f32,
                                            layout == DPT_LAYOUT_NCHW16C ? dnnl_nChw16c
                                            : layout == DPT_LAYOUT_NHWC  ? dnnl_nhwc
                                                                         : dnnl_nchw),
               "memory", s);
}

static conv_plan *plan_create(dpt_ctx *ctx, const dpt_conv_shape *s)
{
    dnnl_state *st = state_of(ctx);
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
                pad_r = {pad_right(s->h, s->kh, s->stride_h, s->pad_h, s->dil_h, s->oh),
                         pad_right(s->w, s->kw, s->stride_w, s->pad_w, s->dil_w, s->ow)};
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
    activation_md(&p->src, src_dims, (dpt_layout)s->x_layout, (dpt_dtype)s->x_dtype, s);
    activation_md(&p->dx, src_dims, (dpt_layout)s->x_layout, DPT_F32, s);
    activation_md(&p->dst, dst_dims, DPT_LAYOUT_NCHW, yt, s);
    activation_md(&p->dy, dst_dims, DPT_LAYOUT_NCHW, DPT_F32, s);
    activation_md(&blocked_dst, dst_dims, DPT_LAYOUT_NCHW16C, yt, s);
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
        shape_str(s, sh, sizeof sh);
        fprintf(stderr, "warning: oneDNN has no convolution for %s: this shape runs on the native kernels\n",
                sh);
        p->native = true;
        p->y_layout = DPT_LAYOUT_NCHW;
        p->y_dtype = DPT_F32;
        if (fpd) dnnl_primitive_desc_destroy(fpd);
        if (bpd) dnnl_primitive_desc_destroy(bpd);
        return p;
    }
    p->fwd_src = *md(fpd, dnnl_query_src_md), p->fwd_weights = *md(fpd, dnnl_query_weights_md);
    p->fwd_dst = *md(fpd, dnnl_query_dst_md);
    p->bd_diff_src = *md(bpd, dnnl_query_diff_src_md), p->bd_weights = *md(bpd, dnnl_query_weights_md);
    p->bd_diff_dst = *md(bpd, dnnl_query_diff_dst_md);
    p->bw_src = *md(wpd, dnnl_query_src_md), p->bw_diff_weights = *md(wpd, dnnl_query_diff_weights_md);
    p->bw_diff_dst = *md(wpd, dnnl_query_diff_dst_md);
    p->fwd_scratch = *md(fpd, dnnl_query_scratchpad_md), p->bd_scratch = *md(bpd, dnnl_query_scratchpad_md);
    p->bw_scratch = *md(wpd, dnnl_query_scratchpad_md);
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
        activation_md(&p->dst, dst_dims, DPT_LAYOUT_NHWC, yt, s);
        activation_md(&p->dy, dst_dims, DPT_LAYOUT_NHWC, DPT_F32, s);
        p->y_layout = DPT_LAYOUT_NHWC;
    } else if (s->c_out % 16 == 0 && dnnl_memory_desc_equal(&p->fwd_dst, &blocked_dst)) {
        p->dst = blocked_dst;
        activation_md(&p->dy, dst_dims, DPT_LAYOUT_NCHW16C, DPT_F32, s);
        p->y_layout = DPT_LAYOUT_NCHW16C;
    }
    p->src_in = make_reorder(st, &p->src, &p->fwd_src, false, s);
    p->weights_in = make_reorder(st, &p->weights, &p->fwd_weights, false, s);
    p->dst_out = make_reorder(st, &p->fwd_dst, &p->dst, false, s);
    p->diff_dst_in = make_reorder(st, &p->dy, &p->bd_diff_dst, false, s);
    p->bd_weights_in = make_reorder(st, &p->weights, &p->bd_weights, false, s);
    p->diff_src_acc = make_reorder(st, &p->bd_diff_src, &p->dx, true, s);
    p->diff_src_out = make_reorder(st, &p->bd_diff_src, &p->dx, false, s);
    p->bw_src_in = make_reorder(st, &p->src, &p->bw_src, false, s);
    p->bw_diff_dst_in = make_reorder(st, &p->dy, &p->bw_diff_dst, false, s);
    p->diff_weights_acc = make_reorder(st, &p->bw_diff_weights, &p->weights, true, s);
    return p;
}

static conv_plan *plan_for(dpt_ctx *ctx, const dpt_conv_shape *s)
{
    dnnl_state *st = state_of(ctx);
    for (int i = 0; i < st->nplans; i++)
        if (!memcmp(&st->plans[i]->shape, s, sizeof *s)) return st->plans[i];
    conv_plan *p = plan_create(ctx, s);
    APPEND_PLAN(st->plans, st->nplans, st->cap_plans, p);
    return p;
}

/* ---------------------------------------------------------------- execution */

/* A buffer from the caching allocator for one call. */
typedef struct block {
    void *ptr;
    size_t granted;
} block;

static void *block_get(dpt_ctx *ctx, block *b, size_t bytes, const char *what)
{
    b->ptr = bytes ? dpt_ctx_alloc(ctx, bytes, &b->granted, what) : NULL;
    return b->ptr;
}

static void block_put(dpt_ctx *ctx, block *b)
{
    if (b->ptr) dpt_alloc_put(ctx->alloc, b->ptr, b->granted);
    b->ptr = NULL;
}

static dnnl_memory_t mem(dnnl_state *st, const dnnl_memory_desc_t *d, const void *ptr,
                         const dpt_conv_shape *s)
{
    dnnl_memory_t m;
    CHECK_DNNL(dnnl_memory_create(&m, d, st->engine, (void *)ptr), "memory object", s);
    return m;
}

static void execute(dpt_ctx *ctx, dnnl_primitive_t p, int nargs, const int *kinds, dnnl_memory_t *mems,
                    const char *what, const dpt_conv_shape *s)
{
    dnnl_exec_arg_t args[12];
    DPT_ASSERT(nargs <= 12, "%d arguments", nargs);
    for (int i = 0; i < nargs; i++)
        args[i] = (dnnl_exec_arg_t){kinds[i], mems[i]};
    omp_set_num_threads(ctx->threads); /* oneDNN's OpenMP teams take this thread's setting */
    CHECK_DNNL(dnnl_primitive_execute(p, state_of(ctx)->stream, nargs, args), what, s);
    for (int i = 0; i < nargs; i++)
        dnnl_memory_destroy(mems[i]);
}

/* to = reorder(from) (+ to, for an accumulating reorder). */
static void reorder(dpt_ctx *ctx, dnnl_primitive_t r, const dnnl_memory_desc_t *from_md, const void *from,
                    const dnnl_memory_desc_t *to_md, void *to, const dpt_conv_shape *s)
{
    dnnl_state *st = state_of(ctx);
    execute(ctx, r, 2, (int[]){DNNL_ARG_FROM, DNNL_ARG_TO},
            (dnnl_memory_t[]){mem(st, from_md, from, s), mem(st, to_md, to, s)}, "reorder", s);
}

/* The plain buffer `plain` in layout `want`: itself, or a reordered copy in *b. */
static const void *laid_out(dpt_ctx *ctx, dnnl_primitive_t r, const dnnl_memory_desc_t *plain_md,
                            const void *plain, const dnnl_memory_desc_t *want, block *b,
                            const dpt_conv_shape *s)
{
    if (!r) return plain;
    block_get(ctx, b, dnnl_memory_desc_get_size(want), "oneDNN convolution buffer");
    reorder(ctx, r, plain_md, plain, want, b->ptr, s);
    return b->ptr;
}

/* ---------------------------------------------------------------- relayout */

/* dst (to, to_dt) = src (from, from_dt), or += with accumulate. */
static void act_reorder(dpt_ctx *ctx, const void *src, dpt_layout from, dpt_dtype from_dt, void *dst, dpt_layout to,
                        dpt_dtype to_dt, const int64_t *shape, bool accumulate)
{
    dnnl_state *st = state_of(ctx);
    dpt_conv_shape where = {.n = shape[0], .c_in = shape[1], .h = shape[2], .w = shape[3]}; /* for messages */
    relayout_plan *r = NULL;
    for (int i = 0; i < st->nrelayouts && !r; i++) {
        relayout_plan *c = st->relayouts[i];
        if (!memcmp(c->shape, shape, sizeof c->shape) && c->from == from && c->to == to &&
            c->from_dt == from_dt && c->to_dt == to_dt && c->accumulate == accumulate)
            r = c;
    }
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r) dpt_fatal("out of host memory for a oneDNN reorder");
        memcpy(r->shape, shape, sizeof r->shape);
        r->from = from, r->to = to, r->from_dt = from_dt, r->to_dt = to_dt, r->accumulate = accumulate;
        activation_md(&r->from_md, shape, from, from_dt, &where);
        activation_md(&r->to_md, shape, to, to_dt, &where);
        r->reorder = make_reorder(st, &r->from_md, &r->to_md, true, &where);
        if (!accumulate) { /* make_reorder(accumulate = true) always gives one; this one must not add */
            dnnl_primitive_destroy(r->reorder);
            r->reorder = make_reorder(st, &r->from_md, &r->to_md, false, &where);
        }
        APPEND_PLAN(st->relayouts, st->nrelayouts, st->cap_relayouts, r);
    }
    if (!r->reorder) { /* the same layout, nothing added */
        if (dst != src) memcpy(dst, src, dnnl_memory_desc_get_size(&r->from_md));
        return;
    }
    reorder(ctx, r->reorder, &r->from_md, src, &r->to_md, dst, &where);
}

static void dnnl_relayout(dpt_ctx *ctx, const float *src, dpt_layout from, float *dst, dpt_layout to,
                          const int64_t *shape, bool accumulate)
{
    act_reorder(ctx, src, from, DPT_F32, dst, to, DPT_F32, shape, accumulate);
}

static void dnnl_widen(dpt_ctx *ctx, const void *src, dpt_layout from, float *dst, dpt_layout to,
                       const int64_t *shape, bool accumulate)
{
    act_reorder(ctx, src, from, DPT_BF16, dst, to, DPT_F32, shape, accumulate);
}

/* ---------------------------------------------------------------- convolution */

static dpt_layout dnnl_conv2d_out_layout(dpt_ctx *ctx, const dpt_conv_shape *s)
{
    return plan_for(ctx, s)->y_layout;
}

static dpt_dtype dnnl_conv2d_out_dtype(dpt_ctx *ctx, const dpt_conv_shape *s)
{
    return plan_for(ctx, s)->y_dtype;
}

/* The shape's activation in NCHW F32 for a native kernel: t itself, or a relayout (and
 * widening) into *b (which the caller returns with block_put). */
static const float *as_nchw(dpt_ctx *ctx, const float *t, dpt_layout layout, dpt_dtype dtype,
                            const int64_t *shape, block *b)
{
    if (layout == DPT_LAYOUT_NCHW && dtype == DPT_F32) return t;
    size_t bytes = (size_t)(shape[0] * shape[1] * shape[2] * shape[3]) * sizeof(float);
    act_reorder(ctx, t, layout, dtype, block_get(ctx, b, bytes, "a relayout"), DPT_LAYOUT_NCHW, DPT_F32, shape,
                false);
    return b->ptr;
}

/* A shape without a oneDNN kernel: the native kernels, which read x (and write dx) in NCHW. */
static void native_fwd(dpt_ctx *ctx, const dpt_conv_shape *s, const float *x, const float *w,
                       const float *bias, float *y)
{
    dpt_conv_shape plain = *s;
    plain.x_layout = DPT_LAYOUT_NCHW;
    block bx = {0};
    plain.x_dtype = DPT_F32;
    x = as_nchw(ctx, x, (dpt_layout)s->x_layout, (dpt_dtype)s->x_dtype, (int64_t[]){s->n, s->c_in, s->h, s->w},
                &bx);
    dpt_cpu_conv2d_fwd(ctx, &plain, x, w, bias, y);
    block_put(ctx, &bx);
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
    block bx = {0}, bdx = {0};
    x = as_nchw(ctx, x, (dpt_layout)s->x_layout, (dpt_dtype)s->x_dtype, shape, &bx);
    if (dx) memset(block_get(ctx, &bdx, bytes, "a relayout"), 0, bytes);
    dpt_cpu_conv2d_bwd(ctx, &plain, x, w, dy, bdx.ptr, true, dw, dbias);
    if (dx) dnnl_relayout(ctx, bdx.ptr, DPT_LAYOUT_NCHW, dx, (dpt_layout)s->x_layout, shape, dx_accumulate);
    block_put(ctx, &bdx), block_put(ctx, &bx);
}

static void dnnl_conv2d_fwd(dpt_ctx *ctx, const dpt_conv_shape *s, const float *x, const float *w,
                            const float *bias, float *y)
{
    conv_plan *p = plan_for(ctx, s);
    if (p->native) {
        native_fwd(ctx, s, x, w, bias, y);
        return;
    }
    dnnl_state *st = state_of(ctx);
    block bsrc = {0}, bw = {0}, bdst = {0}, bbias = {0}, bscr = {0};
    const void *src = laid_out(ctx, p->src_in, &p->src, x, &p->fwd_src, &bsrc, s);
    const void *wts = laid_out(ctx, p->weights_in, &p->weights, w, &p->fwd_weights, &bw, s);
    if (!bias)
        memset(block_get(ctx, &bbias, (size_t)s->c_out * sizeof(float), "oneDNN bias"), 0,
               (size_t)s->c_out * sizeof(float));
    void *dst = p->dst_out ? block_get(ctx, &bdst, dnnl_memory_desc_get_size(&p->fwd_dst),
                                       "oneDNN convolution buffer")
                           : y;
    block_get(ctx, &bscr, dnnl_memory_desc_get_size(&p->fwd_scratch), "oneDNN scratchpad");
    execute(ctx, p->fwd, 5,
            (int[]){DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS, DNNL_ARG_DST, DNNL_ARG_SCRATCHPAD},
            (dnnl_memory_t[]){mem(st, &p->fwd_src, src, s), mem(st, &p->fwd_weights, wts, s),
                              mem(st, &p->bias, bias ? bias : bbias.ptr, s), mem(st, &p->fwd_dst, dst, s),
                              mem(st, &p->fwd_scratch, bscr.ptr, s)},
            "convolution forward", s);
    if (p->dst_out) reorder(ctx, p->dst_out, &p->fwd_dst, dst, &p->dst, y, s);
    block_put(ctx, &bscr), block_put(ctx, &bdst), block_put(ctx, &bbias), block_put(ctx, &bw),
        block_put(ctx, &bsrc);
}

static void dnnl_conv2d_bwd(dpt_ctx *ctx, const dpt_conv_shape *s, const float *x, const float *w,
                            const float *dy, float *dx, bool dx_accumulate, float *dw, float *dbias)
{
    conv_plan *p = plan_for(ctx, s);
    if (p->native) {
        native_bwd(ctx, s, x, w, dy, dx, dx_accumulate, dw, dbias);
        return;
    }
    dnnl_state *st = state_of(ctx);
    block bddst = {0}, bddst_w = {0};
    /* dy in the layout backward data wants; backward weights usually wants the same one */
    const void *ddst = laid_out(ctx, p->diff_dst_in, &p->dy, dy, &p->bd_diff_dst, &bddst, s);
    if (dx) {
        block bw = {0}, bdsrc = {0}, bscr = {0};
        const void *wts = laid_out(ctx, p->bd_weights_in, &p->weights, w, &p->bd_weights, &bw, s);
        /* The first writer of dx in its own layout lets oneDNN write it directly. */
        bool direct = !dx_accumulate && !p->diff_src_out;
        if (!direct)
            block_get(ctx, &bdsrc, dnnl_memory_desc_get_size(&p->bd_diff_src), "oneDNN convolution buffer");
        block_get(ctx, &bscr, dnnl_memory_desc_get_size(&p->bd_scratch), "oneDNN scratchpad");
        execute(ctx, p->bwd_data, 4,
                (int[]){DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC, DNNL_ARG_SCRATCHPAD},
                (dnnl_memory_t[]){mem(st, &p->bd_diff_dst, ddst, s), mem(st, &p->bd_weights, wts, s),
                                  mem(st, &p->bd_diff_src, direct ? dx : bdsrc.ptr, s),
                                  mem(st, &p->bd_scratch, bscr.ptr, s)},
                "convolution backward data", s);
        if (dx_accumulate)
            reorder(ctx, p->diff_src_acc, &p->bd_diff_src, bdsrc.ptr, &p->dx, dx, s); /* dx += */
        else if (!direct)
            reorder(ctx, p->diff_src_out, &p->bd_diff_src, bdsrc.ptr, &p->dx, dx, s); /* dx = */
        block_put(ctx, &bscr), block_put(ctx, &bdsrc), block_put(ctx, &bw);
    }
    if (dw || dbias) {
        block bsrc = {0}, bdw = {0}, bdb = {0}, bscr = {0};
        const void *src = laid_out(ctx, p->bw_src_in, &p->src, x, &p->bw_src, &bsrc, s);
        const void *ddst_w =
            dnnl_memory_desc_equal(&p->bw_diff_dst, &p->bd_diff_dst)
                ? ddst
                : laid_out(ctx, p->bw_diff_dst_in, &p->dy, dy, &p->bw_diff_dst, &bddst_w, s);
        block_get(ctx, &bdw, dnnl_memory_desc_get_size(&p->bw_diff_weights), "oneDNN weight gradient");
        float *db = block_get(ctx, &bdb, (size_t)s->c_out * sizeof(float), "oneDNN bias gradient");
        block_get(ctx, &bscr, dnnl_memory_desc_get_size(&p->bw_scratch), "oneDNN scratchpad");
        execute(ctx, p->bwd_weights, 5,
                (int[]){DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_BIAS,
                        DNNL_ARG_SCRATCHPAD},
                (dnnl_memory_t[]){mem(st, &p->bw_src, src, s), mem(st, &p->bw_diff_dst, ddst_w, s),
                                  mem(st, &p->bw_diff_weights, bdw.ptr, s), mem(st, &p->bias, db, s),
                                  mem(st, &p->bw_scratch, bscr.ptr, s)},
                "convolution backward weights", s);
        if (dw)
            reorder(ctx, p->diff_weights_acc, &p->bw_diff_weights, bdw.ptr, &p->weights, dw, s); /* dw += */
        if (dbias)
            for (int64_t c = 0; c < s->c_out; c++)
                dbias[c] += db[c];
        block_put(ctx, &bscr), block_put(ctx, &bdb), block_put(ctx, &bdw), block_put(ctx, &bsrc);
    }
    block_put(ctx, &bddst_w), block_put(ctx, &bddst);
}

/* ---------------------------------------------------------------- batch norm
 * oneDNN computes the batch statistics in forward and returns mean and (biased) variance; the
 * running statistics move here with the unbiased variance (torch.nn.BatchNorm2d's rule). The
 * variance, not the inverse std, is what its backward reads: it goes in the save_stat slot. */

static bn_plan *bn_plan_for(dpt_ctx *ctx, int64_t n, int64_t c, int64_t hw, dpt_layout layout, dpt_dtype dtype,
                           double eps)
{
    dnnl_state *st = state_of(ctx);
    for (int i = 0; i < st->nbn; i++) {
        bn_plan *b = st->bn_plans[i];
        if (b->n == n && b->c == c && b->hw == hw && b->layout == layout && b->dtype == dtype) return b;
    }
    dpt_conv_shape where = {.n = n, .c_in = c, .h = hw, .w = 1}; /* for messages */
    bn_plan *b = calloc(1, sizeof *b);
    if (!b) dpt_fatal("out of host memory for a oneDNN plan");
    b->n = n, b->c = c, b->hw = hw, b->layout = layout, b->dtype = dtype;
    /* (N, C, H*W, 1) is the same memory as (N, C, H, W) in either layout */
    activation_md(&b->data, (int64_t[]){n, c, hw, 1}, layout, dtype, &where);
    CHECK_DNNL(dnnl_memory_desc_init_by_tag(&b->stat, 1, (dnnl_dims_t){c}, dnnl_f32, dnnl_x), "memory",
               &where);
    dnnl_primitive_attr_t attr;
    CHECK_DNNL(dnnl_primitive_attr_create(&attr), "attributes", &where);
    CHECK_DNNL(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "attributes",
               &where);
    unsigned flags = dnnl_use_scale | dnnl_use_shift;
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
    b->fwd_scratch = *md(fpd, dnnl_query_scratchpad_md), b->infer_scratch = *md(ipd, dnnl_query_scratchpad_md);
    CHECK_DNNL(dnnl_primitive_create(&b->fwd, fpd), "batch normalization forward", &where);
    CHECK_DNNL(dnnl_primitive_create(&b->infer, ipd), "batch normalization inference", &where);
    if (bpd) {
        b->bwd_scratch = *md(bpd, dnnl_query_scratchpad_md);
        CHECK_DNNL(dnnl_primitive_create(&b->bwd, bpd), "batch normalization backward", &where);
        dnnl_primitive_desc_destroy(bpd);
    }
    dnnl_primitive_desc_destroy(fpd);
    dnnl_primitive_desc_destroy(ipd);
    APPEND_PLAN(st->bn_plans, st->nbn, st->cap_bn, b);
    return b;
}

static void dnnl_bn_fused_fwd(dpt_ctx *ctx, const float *x, float *y, int64_t n, int64_t c, int64_t hw,
                              dpt_layout layout, dpt_dtype dtype, const float *gamma, const float *beta,
                              float *running_mean, float *running_var, double momentum, double eps,
                              float *save_mean, float *save_var)
{
    dnnl_state *st = state_of(ctx);
    bn_plan *b = bn_plan_for(ctx, n, c, hw, layout, dtype, eps);
    dpt_conv_shape where = {.n = n, .c_in = c, .h = hw, .w = 1};
    block scr = {0};
    block_get(ctx, &scr, dnnl_memory_desc_get_size(&b->fwd_scratch), "oneDNN scratchpad");
    execute(ctx, b->fwd, 7,
            (int[]){DNNL_ARG_SRC, DNNL_ARG_DST, DNNL_ARG_SCALE, DNNL_ARG_SHIFT, DNNL_ARG_MEAN,
                    DNNL_ARG_VARIANCE, DNNL_ARG_SCRATCHPAD},
            (dnnl_memory_t[]){mem(st, &b->data, x, &where), mem(st, &b->data, y, &where),
                              mem(st, &b->stat, gamma, &where), mem(st, &b->stat, beta, &where),
                              mem(st, &b->stat, save_mean, &where), mem(st, &b->stat, save_var, &where),
                              mem(st, &b->fwd_scratch, scr.ptr, &where)},
            "batch normalization forward", &where);
    block_put(ctx, &scr);
    double count = (double)(n * hw), unbias = count > 1 ? count / (count - 1) : 1.0;
    for (int64_t ch = 0; ch < c; ch++) {
        running_mean[ch] = (float)((1 - momentum) * running_mean[ch] + momentum * save_mean[ch]);
        running_var[ch] = (float)((1 - momentum) * running_var[ch] + momentum * save_var[ch] * unbias);
    }
}

static void dnnl_bn_fused_bwd(dpt_ctx *ctx, const float *x, const float *dy, float *dx, bool dx_accumulate,
                              int64_t n, int64_t c, int64_t hw, dpt_layout layout, dpt_dtype dtype,
                              const float *gamma, float *dgamma, float *dbeta, double eps, const float *save_mean,
                              const float *save_var)
{
    dnnl_state *st = state_of(ctx);
    bn_plan *b = bn_plan_for(ctx, n, c, hw, layout, DPT_F32, eps);
    dpt_conv_shape where = {.n = n, .c_in = c, .h = hw, .w = 1};
    size_t bytes = (size_t)(n * c * hw) * sizeof(float);
    block scr = {0}, bdx = {0}, bdp = {0}, bx = {0};
    if (dtype == DPT_BF16) { /* x widened into a buffer of its own layout (the batch's statistics are F32) */
        dnnl_widen(ctx, x, layout, block_get(ctx, &bx, bytes, "a widened batch-norm input"), layout,
                   (int64_t[]){n, c, hw, 1}, false);
        x = bx.ptr;
    }
    float *out = dx_accumulate ? block_get(ctx, &bdx, bytes, "a batch-norm gradient") : dx;
    float *dscale = block_get(ctx, &bdp, (size_t)(2 * c) * sizeof(float), "batch-norm parameter gradients");
    block_get(ctx, &scr, dnnl_memory_desc_get_size(&b->bwd_scratch), "oneDNN scratchpad");
    execute(ctx, b->bwd, 10,
            (int[]){DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_SCALE, DNNL_ARG_MEAN, DNNL_ARG_VARIANCE,
                    DNNL_ARG_DIFF_SRC, DNNL_ARG_DIFF_SCALE, DNNL_ARG_DIFF_SHIFT, DNNL_ARG_SHIFT,
                    DNNL_ARG_SCRATCHPAD},
            (dnnl_memory_t[]){mem(st, &b->data, x, &where), mem(st, &b->data, dy, &where),
                              mem(st, &b->stat, gamma, &where), mem(st, &b->stat, save_mean, &where),
                              mem(st, &b->stat, save_var, &where), mem(st, &b->data, out, &where),
                              mem(st, &b->stat, dscale, &where), mem(st, &b->stat, dscale + c, &where),
                              mem(st, &b->stat, dscale + c, &where),
                              mem(st, &b->bwd_scratch, scr.ptr, &where)},
            "batch normalization backward", &where);
    if (dx_accumulate) dpt_backend_cpu.axpy(ctx, n * c * hw, 1.0f, out, dx);
    for (int64_t ch = 0; ch < c; ch++)
        dgamma[ch] += dscale[ch], dbeta[ch] += dscale[c + ch];
    block_put(ctx, &scr), block_put(ctx, &bdp), block_put(ctx, &bdx), block_put(ctx, &bx);
}

static void dnnl_bn_fused_infer(dpt_ctx *ctx, const float *x, float *y, int64_t n, int64_t c, int64_t hw,
                                dpt_layout layout, dpt_dtype dtype, const float *gamma, const float *beta,
                                const float *running_mean, const float *running_var, double eps)
{
    dnnl_state *st = state_of(ctx);
    bn_plan *b = bn_plan_for(ctx, n, c, hw, layout, dtype, eps);
    dpt_conv_shape where = {.n = n, .c_in = c, .h = hw, .w = 1};
    block scr = {0};
    block_get(ctx, &scr, dnnl_memory_desc_get_size(&b->infer_scratch), "oneDNN scratchpad");
    execute(ctx, b->infer, 7,
            (int[]){DNNL_ARG_SRC, DNNL_ARG_DST, DNNL_ARG_SCALE, DNNL_ARG_SHIFT, DNNL_ARG_MEAN,
                    DNNL_ARG_VARIANCE, DNNL_ARG_SCRATCHPAD},
            (dnnl_memory_t[]){mem(st, &b->data, x, &where), mem(st, &b->data, y, &where),
                              mem(st, &b->stat, gamma, &where), mem(st, &b->stat, beta, &where),
                              mem(st, &b->stat, running_mean, &where), mem(st, &b->stat, running_var, &where),
                              mem(st, &b->infer_scratch, scr.ptr, &where)},
            "batch normalization inference", &where);
    block_put(ctx, &scr);
}

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
    dnnl_state *st = state_of(ctx);
    for (int i = 0; i < st->npool; i++) {
        pool_plan *q = st->pool_plans[i];
        if (q->max == max && !memcmp(&q->shape, ps, sizeof *ps)) return q;
    }
    pool_plan *q = calloc(1, sizeof *q);
    if (!q) dpt_fatal("out of host memory for a oneDNN plan");
    q->shape = *ps, q->max = max;
    dpt_conv_shape where = pool_where(ps);
    int64_t xs[4] = {ps->n, ps->c, ps->h, ps->w}, ys[4] = {ps->n, ps->c, ps->oh, ps->ow};
    activation_md(&q->src, xs, (dpt_layout)ps->layout, (dpt_dtype)ps->dtype, &where);
    activation_md(&q->dst, ys, (dpt_layout)ps->layout, (dpt_dtype)ps->dtype, &where);
    activation_md(&q->dsrc, xs, (dpt_layout)ps->layout, DPT_F32, &where);
    activation_md(&q->ddst, ys, (dpt_layout)ps->layout, DPT_F32, &where);
    dnnl_dims_t strides = {ps->stride_h, ps->stride_w}, kernel = {ps->kh, ps->kw},
                pad_l = {ps->pad_h, ps->pad_w},
                pad_r = {pad_right(ps->h, ps->kh, ps->stride_h, ps->pad_h, 1, ps->oh),
                         pad_right(ps->w, ps->kw, ps->stride_w, ps->pad_w, 1, ps->ow)};
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
        q->ws = *md(fpd, dnnl_query_workspace_md);
        q->fwd_scratch = *md(fpd, dnnl_query_scratchpad_md),
        q->bwd_scratch = *md(bpd, dnnl_query_scratchpad_md);
        CHECK_DNNL(dnnl_primitive_create(&q->fwd, fpd), "pooling forward", &where);
        CHECK_DNNL(dnnl_primitive_create(&q->bwd, bpd), "pooling backward", &where);
    } else {
        char sh[320];
        shape_str(&where, sh, sizeof sh);
        fprintf(stderr, "warning: oneDNN has no %s pooling for %s: this shape runs on the native kernels\n",
                max ? "max" : "average", sh);
        q->native = true;
    }
    if (fpd) dnnl_primitive_desc_destroy(fpd);
    if (bpd) dnnl_primitive_desc_destroy(bpd);
    APPEND_PLAN(st->pool_plans, st->npool, st->cap_pool, q);
    return q;
}

static bool dnnl_pool16(dpt_ctx *ctx, const dpt_pool_shape *ps, bool max)
{
    return !pool_plan_for(ctx, ps, max)->native; /* the native kernels read F32 */
}

static size_t native_ws_bytes(const dpt_pool_shape *ps)
{
    return (size_t)(ps->n * ps->c * ps->oh * ps->ow) * sizeof(int32_t);
}

static size_t dnnl_maxpool_ws_bytes(dpt_ctx *ctx, const dpt_pool_shape *ps)
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
    block bx = {0}, by = {0};
    const float *px = as_nchw(ctx, x, (dpt_layout)ps->layout, DPT_F32, xs, &bx);
    float *py = ps->layout == DPT_LAYOUT_NCHW
                    ? y
                    : block_get(ctx, &by, (size_t)(ys[0] * ys[1] * ys[2] * ys[3]) * sizeof(float),
                                "a pooling output");
    if (max)
        dpt_cpu_maxpool_fwd(ctx, &plain, px, py, ws);
    else
        dpt_cpu_avgpool_fwd(ctx, &plain, px, py);
    if (py != y) dnnl_relayout(ctx, py, DPT_LAYOUT_NCHW, y, (dpt_layout)ps->layout, ys, false);
    block_put(ctx, &by), block_put(ctx, &bx);
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
    block bdy = {0}, bdx = {0};
    const float *pdy = as_nchw(ctx, dy, (dpt_layout)ps->layout, DPT_F32, ys, &bdy);
    float *pdx = block_get(ctx, &bdx, (size_t)(xs[0] * xs[1] * xs[2] * xs[3]) * sizeof(float), "a gradient");
    if (max)
        dpt_cpu_maxpool_bwd(ctx, &plain, pdy, ws, pdx, false);
    else
        dpt_cpu_avgpool_bwd(ctx, &plain, pdy, pdx, false);
    dnnl_relayout(ctx, pdx, DPT_LAYOUT_NCHW, dx, (dpt_layout)ps->layout, xs, dx_accumulate);
    block_put(ctx, &bdx), block_put(ctx, &bdy);
}

static void pool_fwd(dpt_ctx *ctx, const dpt_pool_shape *ps, bool max, const float *x, float *y, void *ws)
{
    pool_plan *q = pool_plan_for(ctx, ps, max);
    if (q->native) {
        native_pool_fwd(ctx, ps, max, x, y, ws);
        return;
    }
    dnnl_state *st = state_of(ctx);
    dpt_conv_shape where = pool_where(ps);
    block scr = {0};
    block_get(ctx, &scr, dnnl_memory_desc_get_size(&q->fwd_scratch), "oneDNN scratchpad");
    int kinds[4] = {DNNL_ARG_SRC, DNNL_ARG_DST, DNNL_ARG_SCRATCHPAD, DNNL_ARG_WORKSPACE};
    dnnl_memory_t mems[4] = {mem(st, &q->src, x, &where), mem(st, &q->dst, y, &where),
                             mem(st, &q->fwd_scratch, scr.ptr, &where), NULL};
    if (max) mems[3] = mem(st, &q->ws, ws, &where);
    execute(ctx, q->fwd, max ? 4 : 3, kinds, mems, max ? "max pooling forward" : "average pooling forward",
            &where);
    block_put(ctx, &scr);
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
    dnnl_state *st = state_of(ctx);
    dpt_conv_shape where = pool_where(ps);
    int64_t count = ps->n * ps->c * ps->h * ps->w;
    block scr = {0}, bdx = {0};
    float *out =
        dx_accumulate ? block_get(ctx, &bdx, (size_t)count * sizeof(float), "a pooling gradient") : dx;
    block_get(ctx, &scr, dnnl_memory_desc_get_size(&q->bwd_scratch), "oneDNN scratchpad");
    int kinds[4] = {DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_SRC, DNNL_ARG_SCRATCHPAD, DNNL_ARG_WORKSPACE};
    dnnl_memory_t mems[4] = {mem(st, &q->ddst, dy, &where), mem(st, &q->dsrc, out, &where),
                             mem(st, &q->bwd_scratch, scr.ptr, &where), NULL};
    if (max) mems[3] = mem(st, &q->ws, ws, &where);
    execute(ctx, q->bwd, max ? 4 : 3, kinds, mems, max ? "max pooling backward" : "average pooling backward",
            &where);
    if (dx_accumulate) dpt_backend_cpu.axpy(ctx, count, 1.0f, out, dx);
    block_put(ctx, &scr), block_put(ctx, &bdx);
}

static void dnnl_maxpool_fwd(dpt_ctx *ctx, const dpt_pool_shape *s, const float *x, float *y, void *ws)
{
    pool_fwd(ctx, s, true, x, y, ws);
}
static void dnnl_maxpool_bwd(dpt_ctx *ctx, const dpt_pool_shape *s, const float *dy, const void *ws,
                             float *dx, bool dx_accumulate)
{
    pool_bwd(ctx, s, true, dy, ws, dx, dx_accumulate);
}
static void dnnl_avgpool_fwd(dpt_ctx *ctx, const dpt_pool_shape *s, const float *x, float *y)
{
    pool_fwd(ctx, s, false, x, y, NULL);
}
static void dnnl_avgpool_bwd(dpt_ctx *ctx, const dpt_pool_shape *s, const float *dy, float *dx,
                             bool dx_accumulate)
{
    pool_bwd(ctx, s, false, dy, NULL, dx, dx_accumulate);
}

/* ---------------------------------------------------------------- the table */

static bool dnnl_init(dpt_ctx *ctx, dpt_error *err)
{
    if (!dpt_backend_cpu.init(ctx, err)) return false;
    dnnl_state *st = calloc(1, sizeof *st);
    if (!st) dpt_fatal("out of host memory for the oneDNN state");
    dnnl_status_t rc = dnnl_engine_create(&st->engine, dnnl_cpu, 0);
    if (rc == dnnl_success) rc = dnnl_stream_create(&st->stream, st->engine, dnnl_stream_default_flags);
    if (rc != dnnl_success) {
        free(st);
        return dpt_errorf(err,
                          "oneDNN could not create a CPU engine: %s\nHINT: set [train] cpu_kernels = native",
                          dnnl_status2str(rc));
    }
    ctx->backend_state = st;
    if (ctx->precision == DPT_PRECISION_BF16 && dnnl_get_effective_cpu_isa() < dnnl_cpu_isa_avx512_core_bf16) {
        /* oneDNN would emulate bf16 on this CPU, slower than fp32: fp32 it is, said in the header */
        ctx->precision = DPT_PRECISION_FP32;
        ctx->precision_note = "this CPU has no AVX512-BF16: the convolutions run in fp32";
    }
    return true;
}

static void dnnl_shutdown(dpt_ctx *ctx)
{
    dnnl_state *st = state_of(ctx);
    if (st) {
        for (int i = 0; i < st->nplans; i++)
            plan_free(st->plans[i]);
        free(st->plans);
        for (int i = 0; i < st->nbn; i++) {
            dnnl_primitive_destroy(st->bn_plans[i]->fwd);
            if (st->bn_plans[i]->bwd) dnnl_primitive_destroy(st->bn_plans[i]->bwd);
            dnnl_primitive_destroy(st->bn_plans[i]->infer);
            free(st->bn_plans[i]);
        }
        free(st->bn_plans);
        for (int i = 0; i < st->nrelayouts; i++) {
            if (st->relayouts[i]->reorder) dnnl_primitive_destroy(st->relayouts[i]->reorder);
            free(st->relayouts[i]);
        }
        free(st->relayouts);
        for (int i = 0; i < st->npool; i++) {
            if (st->pool_plans[i]->fwd) dnnl_primitive_destroy(st->pool_plans[i]->fwd);
            if (st->pool_plans[i]->bwd) dnnl_primitive_destroy(st->pool_plans[i]->bwd);
            free(st->pool_plans[i]);
        }
        free(st->pool_plans);
        for (int i = 0; i < st->ngemm; i++) {
            gemm_plan *g = st->gemms[i];
            dnnl_primitive_destroy(g->matmul);
            if (g->to_a16) dnnl_primitive_destroy(g->to_a16);
            if (g->to_b16) dnnl_primitive_destroy(g->to_b16);
            free(g);
        }
        free(st->gemms);
        dnnl_stream_destroy(st->stream);
        dnnl_engine_destroy(st->engine);
        free(st);
    }
    ctx->backend_state = NULL;
    dpt_backend_cpu.shutdown(ctx);
}

/* ---------------------------------------------------------------- GEMM */

static gemm_plan *gemm_plan_for(dpt_ctx *ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                               int64_t lda, int64_t ldb, float beta, int64_t ldc)
{
    dnnl_state *st = state_of(ctx);
    for (int i = 0; i < st->ngemm; i++) {
        gemm_plan *g = st->gemms[i];
        if (g->ta == ta && g->tb == tb && g->M == M && g->N == N && g->K == K && g->lda == lda && g->ldb == ldb &&
            g->ldc == ldc && g->alpha == alpha && g->beta == beta)
            return g;
    }
    gemm_plan *g = calloc(1, sizeof *g);
    if (!g) dpt_fatal("out of host memory for a oneDNN plan");
    *g = (gemm_plan){.ta = ta, .tb = tb, .M = M, .N = N, .K = K, .lda = lda, .ldb = ldb, .ldc = ldc, .alpha = alpha,
                     .beta = beta};
    dpt_conv_shape where = {.n = M, .c_in = K, .h = N, .w = 1}; /* for messages */
    dnnl_dims_t ad = {M, K}, bd = {K, N}, cd = {M, N};
    /* A (M, K) is stored row-major, or transposed: (K, M) row-major with its leading dimension */
    dnnl_dims_t as = {ta ? 1 : lda, ta ? lda : 1}, bs = {tb ? 1 : ldb, tb ? ldb : 1}, cs = {ldc, 1};
    dnnl_dims_t as16 = {ta ? 1 : K, ta ? M : 1}, bs16 = {tb ? 1 : N, tb ? K : 1};
    CHECK_DNNL(dnnl_memory_desc_init_by_strides(&g->a32, 2, ad, dnnl_f32, as), "memory", &where);
    CHECK_DNNL(dnnl_memory_desc_init_by_strides(&g->b32, 2, bd, dnnl_f32, bs), "memory", &where);
    CHECK_DNNL(dnnl_memory_desc_init_by_strides(&g->a16, 2, ad, dnnl_bf16, as16), "memory", &where);
    CHECK_DNNL(dnnl_memory_desc_init_by_strides(&g->b16, 2, bd, dnnl_bf16, bs16), "memory", &where);
    CHECK_DNNL(dnnl_memory_desc_init_by_strides(&g->c, 2, cd, dnnl_f32, cs), "memory", &where);
    dnnl_primitive_attr_t attr;
    dnnl_post_ops_t ops = NULL;
    CHECK_DNNL(dnnl_primitive_attr_create(&attr), "attributes", &where);
    if (alpha != 1.0f) CHECK_DNNL(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha), "attributes", &where);
    if (beta != 0.0f) {
        CHECK_DNNL(dnnl_post_ops_create(&ops), "post-ops", &where);
        CHECK_DNNL(dnnl_post_ops_append_sum(ops, beta), "post-ops", &where);
        CHECK_DNNL(dnnl_primitive_attr_set_post_ops(attr, ops), "post-ops", &where);
    }
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd;
    CHECK_DNNL(dnnl_matmul_desc_init(&md, &g->a16, &g->b16, NULL, &g->c), "bf16 matmul", &where);
    CHECK_DNNL(dnnl_primitive_desc_create(&pd, &md, attr, st->engine, NULL), "bf16 matmul", &where);
    CHECK_DNNL(dnnl_primitive_create(&g->matmul, pd), "bf16 matmul", &where);
    dnnl_primitive_desc_destroy(pd);
    if (ops) dnnl_post_ops_destroy(ops);
    dnnl_primitive_attr_destroy(attr);
    g->to_a16 = make_reorder(st, &g->a32, &g->a16, false, &where);
    g->to_b16 = make_reorder(st, &g->b32, &g->b16, false, &where);
    APPEND_PLAN(st->gemms, st->ngemm, st->cap_gemm, g);
    return g;
}

/* C = alpha op(A) op(B) + beta C with A and B rounded to bf16 (the linear layers' and
 * matmul's products under [train] precision = bf16: oneDNN's bf16 brgemm, measured 2-4.5x
 * sgemm's speed on the MLP, CNN and ResNet-50 classifier shapes, conversions included). */
static void bf16_gemm(dpt_ctx *ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                      int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    dnnl_state *st = state_of(ctx);
    gemm_plan *g = gemm_plan_for(ctx, ta, tb, M, N, K, alpha, lda, ldb, beta, ldc);
    dpt_conv_shape where = {.n = M, .c_in = K, .h = N, .w = 1};
    block a16 = {0}, b16 = {0};
    block_get(ctx, &a16, dnnl_memory_desc_get_size(&g->a16), "a bf16 GEMM operand");
    block_get(ctx, &b16, dnnl_memory_desc_get_size(&g->b16), "a bf16 GEMM operand");
    reorder(ctx, g->to_a16, &g->a32, A, &g->a16, a16.ptr, &where);
    reorder(ctx, g->to_b16, &g->b32, B, &g->b16, b16.ptr, &where);
    execute(ctx, g->matmul, 3, (int[]){DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST},
            (dnnl_memory_t[]){mem(st, &g->a16, a16.ptr, &where), mem(st, &g->b16, b16.ptr, &where),
                              mem(st, &g->c, C, &where)},
            "bf16 matmul", &where);
    block_put(ctx, &b16), block_put(ctx, &a16);
}

/* Every GEMM (linear layers, matmul) through oneDNN's own sgemm: on this AVX-512 machine it
 * runs the linear layers' three products 1.4-2x faster than OpenBLAS (bench_linear, which
 * also checks the two agree). Row-major, like the backend's gemm. */
static void onednn_gemm(dpt_ctx *ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                        const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    if (M == 0 || N == 0) return;
    if (K == 0) { /* C = beta C: OpenBLAS's path handles the empty product */
        dpt_backend_cpu.gemm(ctx, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    if (ctx->precision == DPT_PRECISION_BF16) { /* autocast: GEMMs take bf16 inputs too */
        bf16_gemm(ctx, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    omp_set_num_threads(ctx->threads); /* oneDNN's OpenMP team takes this thread's setting */
    dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    if (st != dnnl_success)
        dpt_fatal("oneDNN sgemm failed for %c%c M=%lld N=%lld K=%lld lda=%lld ldb=%lld ldc=%lld: %s",
                  trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', (long long)M, (long long)N, (long long)K, (long long)lda,
                  (long long)ldb, (long long)ldc, dnnl_status2str(st));
}

static dpt_backend table;
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_fill(void)
{
    table = *dpt_backend_cpu_native();
    table.name = "cpu-onednn";
    table.init = dnnl_init;
    table.shutdown = dnnl_shutdown;
    table.gemm = onednn_gemm;
    table.conv2d_fwd = dnnl_conv2d_fwd;
    table.conv2d_bwd = dnnl_conv2d_bwd;
    table.conv2d_out_layout = dnnl_conv2d_out_layout;
    table.relayout = dnnl_relayout;
    table.act16 = true;
    table.widen = dnnl_widen;
    table.relu16_fwd = dpt_cpu_relu16_fwd;
    table.relu16_bwd = dpt_cpu_relu16_bwd;
    table.add16 = dpt_cpu_add16;
    table.conv2d_out_dtype = dnnl_conv2d_out_dtype;
    table.bn_fused_fwd = dnnl_bn_fused_fwd;
    table.bn_fused_bwd = dnnl_bn_fused_bwd;
    table.bn_fused_infer = dnnl_bn_fused_infer;
    table.pool_any_layout = true;
    table.channels_last = true;
    table.pool16 = dnnl_pool16;
    table.maxpool_ws_bytes = dnnl_maxpool_ws_bytes;
    table.maxpool_fwd = dnnl_maxpool_fwd;
    table.maxpool_bwd = dnnl_maxpool_bwd;
    table.avgpool_fwd = dnnl_avgpool_fwd;
    table.avgpool_bwd = dnnl_avgpool_bwd;
}

const dpt_backend *dpt_backend_cpu_onednn(void)
{
    pthread_once(&table_once, table_fill);
    return &table;
}

void dpt_onednn_version(char *buf, size_t cap)
{
    const dnnl_version_t *v = dnnl_version();
    snprintf(buf, cap, "oneDNN %d.%d.%d (%s)", v->major, v->minor, v->patch,
             v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other runtime");
}

#else /* no oneDNN in this build */

const dpt_backend *dpt_backend_cpu_onednn(void)
{
    return NULL;
}

void dpt_onednn_version(char *buf, size_t cap)
{
    snprintf(buf, cap, "oneDNN not in this build");
}

#endif

/* registered in every build: without oneDNN its table is NULL and the native one runs instead */
static const dpt_backend_impl onednn_impl = {.device = DPT_DEVICE_CPU, .table = dpt_backend_cpu_onednn};
DPT_BUILTIN(backend_onednn) = {DPT_KIND_BACKEND, "onednn", "the CPU with oneDNN's convolutions, norms, pooling and bf16",
                               NULL, 0, &onednn_impl};
