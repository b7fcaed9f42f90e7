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

/* ---------------------------------------------------------------- the table */

static dnnl_state *state_new(int threads, dpt_error *err)
{
    dnnl_state *st = calloc(1, sizeof *st);
    if (!st) dpt_fatal("out of host memory for the oneDNN state");
    dnnl_status_t rc = dnnl_engine_create(&st->engine, dnnl_cpu, 0);
    if (rc == dnnl_success) rc = dnnl_stream_create(&st->stream, st->engine, dnnl_stream_default_flags);
    if (rc != dnnl_success) {
        free(st);
        dpt_errorf(err, "oneDNN could not create a CPU engine: %s\nHINT: set [train] cpu_kernels = native",
                   dnnl_status2str(rc));
        return NULL;
    }
    st->threads = threads;
    st->next = st;
    return st;
}

static bool dnnl_init(dpt_ctx *ctx, dpt_error *err)
{
    if (!dpt_backend_cpu.init(ctx, err)) return false;
    dnnl_state *st = state_new(ctx->threads, err);
    if (!st) return false;
    ctx->backend_state = st;
    return true;
}

/* The plans made for `threads` (a new state the first time), in the ring of this context's. */
static void dnnl_set_threads(dpt_ctx *ctx, int threads)
{
    dnnl_state *st = dnnl_state_of(ctx), *s = st;
    do {
        if (s->threads == threads) {
            ctx->backend_state = s;
            return;
        }
        s = s->next;
    } while (s != st);
    dpt_error err;
    dnnl_state *fresh = state_new(threads, &err);
    if (!fresh) dpt_fatal("%s", err.msg);
    fresh->next = st->next, st->next = fresh;
    ctx->backend_state = fresh;
}

/* bf16 where the CPU has AVX512-BF16 (oneDNN would emulate it elsewhere, slower than fp32: fp32
 * it is, said in the header); fp16 never (as the native kernels). */
static dpt_precision_choice dnnl_precision_for(dpt_precision asked)
{
    if (asked == DPT_PRECISION_BF16 && dnnl_get_effective_cpu_isa() < dnnl_cpu_isa_avx512_core_bf16)
        return (dpt_precision_choice){DPT_PRECISION_FP32, "this CPU has no AVX512-BF16: the convolutions run in fp32",
                                      ""};
    if (asked == DPT_PRECISION_BF16) return (dpt_precision_choice){DPT_PRECISION_BF16, "", ""};
    return dpt_backend_cpu_native()->precision_for(asked);
}

/* One thread count's plans, engine and stream. */
static void state_free(dnnl_state *st)
{
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
    for (int i = 0; i < st->nattn; i++) {
        if (st->attn_plans[i]->prim) dnnl_primitive_destroy(st->attn_plans[i]->prim);
        free(st->attn_plans[i]);
    }
    free(st->attn_plans);
    dnnl_stream_destroy(st->stream);
    dnnl_engine_destroy(st->engine);
    free(st);
}

static void dnnl_shutdown(dpt_ctx *ctx)
{
    dnnl_state *st = dnnl_state_of(ctx);
    if (st) {
        dnnl_state *s = st->next;
        while (s != st) {
            dnnl_state *n = s->next;
            state_free(s);
            s = n;
        }
        state_free(st);
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
    table.precision_for = dnnl_precision_for;
    table.bf16_speedup = dnnl_bf16_speedup;
    table.shutdown = dnnl_shutdown;
    table.set_threads = dnnl_set_threads;
    table.gemm = cpu_onednn_gemm;
    table.attention_fwd = dnnl_attention_fwd;
    table.attention_bwd = dnnl_attention_bwd;
    table.conv2d_fwd = dnnl_conv2d_fwd;
    table.conv2d_bwd = dnnl_conv2d_bwd;
    table.conv2d_io = dnnl_conv2d_io;
    table.relayout = dnnl_relayout;
    table.act16 = true;
    table.widen = dnnl_widen;
    table.relu16_fwd = dpt_cpu_relu16_fwd;
    table.relu16_bwd = dpt_cpu_relu16_bwd;
    table.add16 = dpt_cpu_add16;
    table.bn_fused_fwd = dnnl_bn_fused_fwd;
    table.bn_fused_bwd = dnnl_bn_fused_bwd;
    table.bn_fused_infer = dnnl_bn_fused_infer;
    table.bn_relu_ws_bytes = dnnl_bn_relu_ws_bytes;
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
    /* the instruction set its kernels use: the CPU's best, or ONEDNN_MAX_CPU_ISA's cap */
    static const struct {
        dnnl_cpu_isa_t isa;
        const char *name;
    } isas[] = {{dnnl_cpu_isa_sse41, "sse41"},
                {dnnl_cpu_isa_avx, "avx"},
                {dnnl_cpu_isa_avx2, "avx2"},
                {dnnl_cpu_isa_avx2_vnni, "avx2_vnni"},
                {dnnl_cpu_isa_avx512_core, "avx512_core"},
                {dnnl_cpu_isa_avx512_core_vnni, "avx512_core_vnni"},
                {dnnl_cpu_isa_avx512_core_bf16, "avx512_core_bf16"},
                {dnnl_cpu_isa_avx512_core_amx, "avx512_core_amx"}};
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    const char *name = "other";
    for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++)
        if (isas[i].isa == isa) name = isas[i].name;
    const char *cap_env = getenv("ONEDNN_MAX_CPU_ISA");
    snprintf(buf, cap, "oneDNN %d.%d.%d (%s) | CPU ISA %s%s%s%s", v->major, v->minor, v->patch,
             v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other runtime", name,
             cap_env ? " (ONEDNN_MAX_CPU_ISA=" : "", cap_env ? cap_env : "", cap_env ? ")" : "");
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

