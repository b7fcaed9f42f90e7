/* device.c: the devices this build can see, and a context's allocations and accessors (context.c
 * makes and frees contexts). */
#include <stdlib.h>
#include <string.h>

#include "ctx.h"
#include "error.h"
#include "registry.h"

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
    if (cuda && cuda->print_env) cuda->print_env(out);
    print_gpu_stats(out);
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
    char ask[24], used[24], reserved[24], peak[24], cap[256] = "", dev[96] = "";
    human(ask, sizeof ask, (double)bytes);
    human(used, sizeof used, (double)st.allocated);
    human(reserved, sizeof reserved, (double)st.reserved);
    human(peak, sizeof peak, (double)st.peak_allocated);
    if (st.limit) {
        char lim[32];
        human(lim, sizeof lim, (double)st.limit);
        snprintf(cap, sizeof cap, ", limit %s (%s)", lim, ctx->limit_why ? ctx->limit_why : "[train] memory_limit_mb");
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

double dpt_ctx_bf16_speedup(dpt_ctx *ctx)
{
    if (ctx->precision != DPT_PRECISION_BF16 || !ctx->be->bf16_speedup) return 0.0;
    return ctx->be->bf16_speedup(ctx);
}

int dpt_ctx_threads(const dpt_ctx *ctx)
{
    return ctx->threads;
}

void dpt_ctx_set_threads(dpt_ctx *ctx, int threads)
{
    if (threads < 1) threads = 1;
    if (threads == ctx->threads) return;
    if (ctx->be->set_threads) ctx->be->set_threads(ctx, threads);
    ctx->threads = threads;
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
void dpt_ctx_guard_memory(dpt_ctx *ctx, size_t bytes, const char *why)
{
    dpt_alloc_set_limit(ctx->alloc, bytes);
    ctx->limit_why = why;
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
