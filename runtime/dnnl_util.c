/* dnnl_util.c: what the oneDNN kernel files share (dnnl_internal.h): messages naming a shape,
 * memory descriptors of an activation in its layout and dtype, reorders made and run, scratch
 * blocks from the caching allocator, executing a primitive on the context's stream, and
 * converting activations between layouts and dtypes (the table's relayout and widen). The
 * table itself (ops_cpu_dnnl.c) and each kernel family (dnnl_conv.c, dnnl_norm.c, dnnl_pool.c,
 * dnnl_gemm.c) stand on this file, which calls none of them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "ctx.h"
#include "error.h"
#include "openmp.h"

#if DPT_DNNL
#include "dnnl_internal.h"

/* What a message names: a convolution; a pooling window (c_out 0, a kernel); a tensor. */
void dnnl_shape_str(const dpt_conv_shape *s, char *buf, size_t cap)
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

/* ---------------------------------------------------------------- plans */

/* A reorder from one layout to another; NULL when they are equal and nothing is added. */
dnnl_primitive_t dnnl_make_reorder(dnnl_state *st, const dnnl_memory_desc_t *from,
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

const dnnl_memory_desc_t *dnnl_md(const_dnnl_primitive_desc_t pd, dnnl_query_t what)
{
    return dnnl_primitive_desc_query_md(pd, what, 0);
}

void dnnl_activation_md(dnnl_memory_desc_t *d, const int64_t *shape, dpt_layout layout, dpt_dtype dtype,
                          const dpt_conv_shape *s)
{
    dnnl_dims_t dims = {shape[0], shape[1], shape[2], shape[3]};
    CHECK_DNNL(dnnl_memory_desc_init_by_tag(d, 4, dims, dtype == DPT_BF16 ? dnnl_bf16 : dnnl_f32,
                                            layout == DPT_LAYOUT_NCHW16C ? dnnl_nChw16c
                                            : layout == DPT_LAYOUT_NHWC  ? dnnl_nhwc
                                                                         : dnnl_nchw),
               "memory", s);
}

/* ---------------------------------------------------------------- execution */

/* A buffer from the caching allocator for one call. */

void *dnnl_block_get(dpt_ctx *ctx, dnnl_block *b, size_t bytes, const char *what)
{
    b->ptr = bytes ? dpt_ctx_alloc(ctx, bytes, &b->granted, what) : NULL;
    return b->ptr;
}

void dnnl_block_put(dpt_ctx *ctx, dnnl_block *b)
{
    if (b->ptr) dpt_alloc_put(ctx->alloc, b->ptr, b->granted);
    b->ptr = NULL;
}

dnnl_memory_t dnnl_mem(dnnl_state *st, const dnnl_memory_desc_t *d, const void *ptr,
                         const dpt_conv_shape *s)
{
    dnnl_memory_t m;
    CHECK_DNNL(dnnl_memory_create(&m, d, st->engine, (void *)ptr), "memory object", s);
    return m;
}

void dnnl_execute(dpt_ctx *ctx, dnnl_primitive_t p, int nargs, const int *kinds, dnnl_memory_t *mems,
                    const char *what, const dpt_conv_shape *s)
{
    dnnl_exec_arg_t args[12];
    DPT_ASSERT(nargs <= 12, "%d arguments", nargs);
    for (int i = 0; i < nargs; i++)
        args[i] = (dnnl_exec_arg_t){kinds[i], mems[i]};
    omp_set_num_threads(ctx->threads); /* oneDNN's OpenMP teams take this thread's setting */
    CHECK_DNNL(dnnl_primitive_execute(p, dnnl_state_of(ctx)->stream, nargs, args), what, s);
    for (int i = 0; i < nargs; i++)
        dnnl_memory_destroy(mems[i]);
}

/* to = dnnl_run_reorder(from) (+ to, for an accumulating reorder). */
void dnnl_run_reorder(dpt_ctx *ctx, dnnl_primitive_t r, const dnnl_memory_desc_t *from_md, const void *from,
                    const dnnl_memory_desc_t *to_md, void *to, const dpt_conv_shape *s)
{
    dnnl_state *st = dnnl_state_of(ctx);
    dnnl_execute(ctx, r, 2, (int[]){DNNL_ARG_FROM, DNNL_ARG_TO},
            (dnnl_memory_t[]){dnnl_mem(st, from_md, from, s), dnnl_mem(st, to_md, to, s)}, "reorder", s);
}

/* The plain buffer `plain` in layout `want`: itself, or a reordered copy in *b. */
const void *dnnl_laid_out(dpt_ctx *ctx, dnnl_primitive_t r, const dnnl_memory_desc_t *plain_md,
                            const void *plain, const dnnl_memory_desc_t *want, dnnl_block *b,
                            const dpt_conv_shape *s)
{
    if (!r) return plain;
    dnnl_block_get(ctx, b, dnnl_memory_desc_get_size(want), "oneDNN convolution buffer");
    dnnl_run_reorder(ctx, r, plain_md, plain, want, b->ptr, s);
    return b->ptr;
}

/* ---------------------------------------------------------------- relayout */

/* dst (to, to_dt) = src (from, from_dt), or += with accumulate. */
void dnnl_act_reorder(dpt_ctx *ctx, const void *src, dpt_layout from, dpt_dtype from_dt, void *dst, dpt_layout to,
                        dpt_dtype to_dt, const int64_t *shape, bool accumulate)
{
    dnnl_state *st = dnnl_state_of(ctx);
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
        dnnl_activation_md(&r->from_md, shape, from, from_dt, &where);
        dnnl_activation_md(&r->to_md, shape, to, to_dt, &where);
        r->reorder = dnnl_make_reorder(st, &r->from_md, &r->to_md, true, &where);
        if (!accumulate) { /* dnnl_make_reorder(accumulate = true) always gives one; this one must not add */
            dnnl_primitive_destroy(r->reorder);
            r->reorder = dnnl_make_reorder(st, &r->from_md, &r->to_md, false, &where);
        }
        APPEND_PLAN(st->relayouts, st->nrelayouts, st->cap_relayouts, r);
    }
    if (!r->reorder) { /* the same layout, nothing added */
        if (dst != src) memcpy(dst, src, dnnl_memory_desc_get_size(&r->from_md));
        return;
    }
    dnnl_run_reorder(ctx, r->reorder, &r->from_md, src, &r->to_md, dst, &where);
}

void dnnl_relayout(dpt_ctx *ctx, const float *src, dpt_layout from, float *dst, dpt_layout to,
                          const int64_t *shape, bool accumulate)
{
    dnnl_act_reorder(ctx, src, from, DPT_F32, dst, to, DPT_F32, shape, accumulate);
}

void dnnl_widen(dpt_ctx *ctx, const void *src, dpt_layout from, float *dst, dpt_layout to,
                       const int64_t *shape, bool accumulate)
{
    dnnl_act_reorder(ctx, src, from, DPT_BF16, dst, to, DPT_F32, shape, accumulate);
}

#endif
