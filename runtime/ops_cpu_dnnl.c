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
    dnnl_state *st = dnnl_state_of(ctx);
    if (st) {
        for (int i = 0; i < st->nplans; i++)
            dnnl_conv_plan_free(st->plans[i]);
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

static dpt_backend table;
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_fill(void)
{
    table = *dpt_backend_cpu_native();
    table.name = "cpu-onednn";
    table.init = dnnl_init;
    table.shutdown = dnnl_shutdown;
    table.gemm = cpu_onednn_gemm;
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

