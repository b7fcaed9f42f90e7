/* context.c: making a context (the backend for its device and CPU kernels, checked against the
 * precision and layout asked for; its allocator and RNG) and freeing it, tape and temporaries
 * first. It stands above device.c, tensor.c and autograd.c, which use a context but never make one. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctx.h"
#include "error.h"
#include "registry.h"

/* The registered backend of that name, runnable or not, or NULL. */
static const dpt_backend_impl *backend_registered(const char *name)
{
    const dpt_registration *r = dpt_registry_find(DPT_KIND_BACKEND, name);
    return r ? r->impl : NULL;
}

/* The registered backend of that name that this build can run (its table), or NULL. */
static const dpt_backend_impl *backend_named(const char *name)
{
    const dpt_backend_impl *impl = backend_registered(name);
    return impl && impl->table() ? impl : NULL;
}

/* The kernels a context runs: the cuda backend, or on the CPU oneDNN's (the default, when the
 * build has it) or the native ones. */
static const dpt_backend *backend_for(dpt_device_kind kind, dpt_cpu_kernels cpu_kernels)
{
    const dpt_backend_impl *impl = NULL;
    if (kind == DPT_DEVICE_CUDA)
        impl = backend_named("cuda");
    else if (kind == DPT_DEVICE_CPU)
        impl = cpu_kernels != DPT_CPU_KERNELS_NATIVE && backend_named("onednn") ? backend_named("onednn")
                                                                              : backend_named("native");
    return impl ? impl->table() : NULL;
}

dpt_ctx *dpt_ctx_new(const dpt_ctx_options *options, dpt_error *err)
{
    const dpt_backend *be = backend_for(options->device.kind, options->cpu_kernels);
    if (!be && options->device.kind == DPT_DEVICE_CUDA) {
        const dpt_backend_impl *impl = backend_registered("cuda");
        dpt_errorf(err,
                   "the CUDA backend is not available: %s\n"
                   "HINT: rebuild with the CUDA toolkit installed (make prints what it found), or set [train] device = cpu",
                   impl && impl->unavailable ? impl->unavailable() : "this build has no CUDA");
        return NULL;
    }
    if (!be) {
        dpt_errorf(err, "device kind %d is not available in this build", (int)options->device.kind);
        return NULL;
    }
    /* the precision, decided here once from what the backend says it runs */
    static const char *const names[] = {"fp32", "bf16", "fp16"};
    dpt_precision_choice pc = {DPT_PRECISION_FP32, "", ""};
    if (be->precision_for)
        pc = be->precision_for(options->precision);
    else if (options->precision != DPT_PRECISION_FP32)
        pc = (dpt_precision_choice){-1, "runs fp32 only", "set [train] precision = fp32"};
    if (pc.precision < 0) {
        dpt_errorf(err, "[train] precision = %s: the %s backend %s\nHINT: %s", names[options->precision], be->name,
                   pc.why, pc.hint);
        return NULL;
    }
    if (options->channels_last && !be->channels_last) {
        dpt_errorf(err, "[train] memory_format = nhwc keeps activations channels-last in oneDNN's or cuDNN's "
                        "kernels; the %s backend's convolutions read NCHW only\nHINT: set [train] cpu_kernels = "
                        "onednn, or memory_format = nchw",
                   be->name);
        return NULL;
    }
    dpt_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) dpt_fatal("out of host memory for a context");
    ctx->precision = (dpt_precision)pc.precision;
    ctx->precision_note = pc.precision == (int)options->precision ? "" : pc.why;
    ctx->device = options->device;
    ctx->be = be;
    ctx->threads = options->threads > 0 ? options->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (ctx->threads < 1) ctx->threads = 1;
    ctx->grad_enabled = true;
    ctx->tf32 = options->tf32;
    ctx->cudnn_benchmark = options->cudnn_benchmark;
    ctx->deterministic = options->deterministic;
    ctx->nhwc = options->channels_last;
    dpt_rng_seed(&ctx->rng, options->seed);
    if (!be->init(ctx, err)) {
        free(ctx);
        return NULL;
    }
    ctx->act16 = ctx->precision == DPT_PRECISION_BF16 && be->act16 && !options->fp32_activations;
    ctx->alloc = dpt_alloc_new(be->dev->raw_allocator(ctx));
    dpt_alloc_set_limit(ctx->alloc, options->memory_limit);
    return ctx;
}

void dpt_ctx_free(dpt_ctx *ctx)
{
    if (!ctx) return;
    dpt_tape_clear(ctx); /* the temporaries too */
    dpt_tape_free(ctx);
    dpt_temps_destroy(ctx);
    size_t leaked = dpt_alloc_free(ctx->alloc);
    if (leaked)
        fprintf(stderr, "dptrain: warning: %zu bytes of %s tensors were never freed\n", leaked,
                ctx->be->name);
    ctx->be->shutdown(ctx);
    free(ctx);
}

