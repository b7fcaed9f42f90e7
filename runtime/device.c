/* device.c: the context: picks the backend for its device, owns allocator, tape and RNG. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctx.h"
#include "error.h"
#include "registry.h"

/* The registered backend of that name that this build can run (its table), or NULL. */
static const dpt_backend_impl *backend_named(const char *name)
{
    const dpt_registration *r = dpt_registry_find(DPT_KIND_BACKEND, name);
    const dpt_backend_impl *impl = r ? r->impl : NULL;
    return impl && impl->table() ? impl : NULL;
}

/* The registered backend of a kind of device that answers the device-level questions (cuda for
 * CUDA; the CPU needs none). */
static const dpt_backend_impl *device_backend(dpt_device_kind kind)
{
    for (int i = 0; i < dpt_registry_count(DPT_KIND_BACKEND); i++) {
        const dpt_backend_impl *impl = dpt_registry_at(DPT_KIND_BACKEND, i)->impl;
        if (impl->device == kind && impl->device_count) return impl;
    }
    return NULL;
}

void dpt_cuda_pci_bus_id(int index, char *buf, size_t cap)
{
    buf[0] = '\0';
    const dpt_backend_impl *cuda = device_backend(DPT_DEVICE_CUDA);
    if (cuda && cuda->pci_bus_id) cuda->pci_bus_id(index, buf, cap);
}

/* NVML's view of every GPU, for --env. */
static void print_gpu_stats(FILE *out)
{
    int n = dpt_gpu_stats_count();
    if (n == 0) {
        fprintf(out, "nvml: no GPU stats (libnvidia-ml.so.1 not found, or no GPU)\n");
        return;
    }
    for (int i = 0; i < n; i++) {
        dpt_gpu_stats s;
        char line[96];
        if (dpt_gpu_stats_read(i, NULL, &s))
            fprintf(out, "nvml: gpu %d %s | %s\n", i, s.name, dpt_gpu_stats_str(&s, line, sizeof line));
    }
}

int dpt_device_count(dpt_device_kind kind)
{
    if (kind == DPT_DEVICE_CPU) return 1;
    const dpt_backend_impl *impl = device_backend(kind);
    return impl ? impl->device_count() : 0;
}

void dpt_print_env(FILE *out)
{
    const dpt_backend_impl *cuda = device_backend(DPT_DEVICE_CUDA);
    if (cuda && cuda->print_env)
        cuda->print_env(out);
    else
        fprintf(out, "cuda: not in this build (no nvcc or no cuDNN found at build time: make prints why)\n");
    print_gpu_stats(out);
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
    if (!be) {
        dpt_errorf(err,
                   "device kind %d is not available in this build\n"
                   "HINT: rebuild with the CUDA toolkit installed (make prints what it found)",
                   (int)options->device.kind);
        return NULL;
    }
    if (options->precision == DPT_PRECISION_FP16 && strcmp(be->name, "cuda") != 0) {
        dpt_errorf(err, "[train] precision = fp16 runs the convolutions on cuDNN: the %s backend has no fp16 "
                        "kernels (a CPU needs AVX512-FP16, which oneDNN 2.6 does not use for training)\nHINT: use "
                        "precision = bf16 (fp32's range, no loss scaling needed) on a CPU with AVX512-BF16, or fp32",
                   be->name);
        return NULL;
    }
    if (options->precision == DPT_PRECISION_BF16 && strcmp(be->name, "cpu-onednn") != 0 &&
        strcmp(be->name, "cuda") != 0) {
        dpt_errorf(err, "[train] precision = bf16 runs the convolutions on oneDNN's CPU kernels or cuDNN; the %s "
                        "backend has no bf16 path\nHINT: set [train] cpu_kernels = onednn",
                   be->name);
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
    ctx->precision = options->precision;
    ctx->precision_note = "";
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
    /* after init, which may lower the precision */
    ctx->act16 = ctx->precision == DPT_PRECISION_BF16 && be->act16 && !options->fp32_activations;
    ctx->alloc = dpt_alloc_new(be->dev->raw_allocator(ctx));
    dpt_alloc_set_limit(ctx->alloc, options->memory_limit);
    return ctx;
}

void dpt_ctx_free(dpt_ctx *ctx)
{
    if (!ctx) return;
    dpt_tape_clear(ctx);
    dpt_tape_free(ctx);
    size_t leaked = dpt_alloc_free(ctx->alloc);
    if (leaked)
        fprintf(stderr, "dptrain: warning: %zu bytes of %s tensors were never freed\n", leaked,
                ctx->be->name);
    ctx->be->shutdown(ctx);
    free(ctx);
}

static void human(char *buf, size_t cap, double bytes)
{
    if (bytes >= 1073741824.0)
        snprintf(buf, cap, "%.2f GiB", bytes / 1073741824.0);
    else
        snprintf(buf, cap, "%.1f MiB", bytes / 1048576.0);
}

void *dpt_ctx_alloc(dpt_ctx *ctx, size_t bytes, size_t *granted, const char *what)
{
    void *p = dpt_alloc_get(ctx->alloc, bytes, granted);
    if (p) return p;
    dpt_mem_stats st = dpt_alloc_stats(ctx->alloc);
    char ask[24], used[24], reserved[24], peak[24], cap[96] = "", dev[96] = "";
    human(ask, sizeof ask, (double)bytes);
    human(used, sizeof used, (double)st.allocated);
    human(reserved, sizeof reserved, (double)st.reserved);
    human(peak, sizeof peak, (double)st.peak_allocated);
    if (st.limit) {
        char lim[32];
        human(lim, sizeof lim, (double)st.limit);
        snprintf(cap, sizeof cap, ", limit %s ([train] memory_limit_mb)", lim);
    }
    if (ctx->be->dev->mem_info) {
        size_t free_b = 0, total_b = 0;
        ctx->be->dev->mem_info(ctx, &free_b, &total_b);
        char f[24], t[24];
        human(f, sizeof f, (double)free_b);
        human(t, sizeof t, (double)total_b);
        snprintf(dev, sizeof dev, "; the device has %s free of %s", f, t);
    }
    char name[32];
    dpt_device_str(ctx->device, name, sizeof name);
    dpt_abort_job("out of memory on %s: asked for %s (%s) with %s in use by tensors, %s reserved by the "
                  "cache, peak %s%s%s\n"
                  "HINT: %s",
                  name, ask, what, used, reserved, peak, cap, dev,
                  ctx->oom_hint
                      ? ctx->oom_hint
                      : "use a smaller per-rank batch ([train] batch) and keep the global batch with "
                        "[distributed] accum_steps, or spread the batch over more ranks");
}

const char *dpt_ctx_backend_name(const dpt_ctx *ctx)
{
    return ctx->be->name;
}

bool dpt_ctx_channels_last(const dpt_ctx *ctx)
{
    return ctx->nhwc;
}

bool dpt_ctx_bf16_activations(const dpt_ctx *ctx)
{
    return ctx->act16;
}

dpt_precision dpt_ctx_precision(const dpt_ctx *ctx, const char **note)
{
    if (note) *note = ctx->precision_note;
    return ctx->precision;
}

int dpt_ctx_threads(const dpt_ctx *ctx)
{
    return ctx->threads;
}
void dpt_ctx_set_comm(dpt_ctx *ctx, dpt_comm *comm)
{
    ctx->comm = comm;
}
void dpt_ctx_synchronize(dpt_ctx *ctx)
{
    ctx->host_syncs++;
    if (ctx->be->dev->synchronize) ctx->be->dev->synchronize(ctx);
}

int64_t dpt_ctx_host_syncs(const dpt_ctx *ctx)
{
    return ctx->host_syncs;
}

const char *dpt_device_str(dpt_device device, char *buf, size_t cap)
{
    if (device.kind == DPT_DEVICE_CUDA)
        snprintf(buf, cap, "cuda:%d", device.index);
    else
        snprintf(buf, cap, "cpu");
    return buf;
}

dpt_device dpt_ctx_device(const dpt_ctx *ctx)
{
    return ctx->device;
}
const char *dpt_ctx_set_oom_hint(dpt_ctx *ctx, const char *hint)
{
    const char *previous = ctx->oom_hint;
    ctx->oom_hint = hint;
    return previous;
}

void dpt_ctx_device_memory(const dpt_ctx *ctx, size_t *free_bytes, size_t *total_bytes)
{
    *free_bytes = *total_bytes = 0;
    if (ctx->be->dev->mem_info) ctx->be->dev->mem_info((dpt_ctx *)ctx, free_bytes, total_bytes);
}

dpt_mem_stats dpt_ctx_mem_stats(const dpt_ctx *ctx)
{
    return dpt_alloc_stats(ctx->alloc);
}
