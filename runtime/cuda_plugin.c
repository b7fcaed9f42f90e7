/* cuda_plugin.c: the CUDA backend, loaded the first time a program asks for a GPU.
 *
 * The CUDA kernels and the NCCL communicator live in libdpt_cuda.so, built beside libdpt.a and
 * linked against cudart, cuBLAS, cuDNN and NCCL; nothing else is. Linked into every program,
 * those libraries cost each process about 0.4 s and 160 MB at start (the dynamic linker
 * relocating cuBLASLt's and NCCL's 700 MB) on the CPU too, and a program built with CUDA could
 * not start at all on a machine without them. The registry holds a stand-in "cuda" backend (in
 * every build, as "onednn" is) whose entries load the plugin on first use and forward to it:
 * dlopen with RTLD_NOW, so a missing library or symbol is reported at load, naming it, not in
 * the middle of a run. `[train] device = auto` asks how many GPUs there are: without NVIDIA's
 * driver library (libcuda.so.1) there are none, and the plugin is not loaded at all.
 *
 * The plugin calls a few functions of the library back (errors, the allocator, the host
 * collectives); programs are linked with -rdynamic so it finds them, and plugin_needs below
 * keeps them in a program that links libdpt.a statically (a static link takes only the objects
 * something refers to). The Makefile checks that list against the plugin's undefined symbols. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "comm.h"
#include "registry.h"

#if DPT_CUDA

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>

#include "alloc.h"
#include "ctx.h"
#include "error.h"
#include "log.h"

#ifndef DPT_CUDA_PLUGIN_PATH
#define DPT_CUDA_PLUGIN_PATH "libdpt_cuda.so"
#endif

typedef dpt_comm *(*nccl_new_fn)(dpt_ctx *ctx, dpt_comm *host, dpt_error *err);

static struct {
    pthread_once_t once;
    const dpt_backend_impl *impl; /* the plugin's; NULL until loaded or when loading failed */
    nccl_new_fn nccl_new;
    char *path;     /* DPT_CUDA_PLUGIN, or where this build put it (kept: the messages name it) */
    char why[1400]; /* why it could not be loaded (a message: cut to fit, never a path to open) */
} plugin = {.once = PTHREAD_ONCE_INIT};

__attribute__((used)) static void *const plugin_needs[] = {
    (void *)dpt_abort_job,        (void *)dpt_alloc_put,          (void *)dpt_comm_allgather,
    (void *)dpt_comm_allreduce_f64, (void *)dpt_comm_barrier_named, (void *)dpt_comm_broadcast,
    (void *)dpt_ctx_alloc,        (void *)dpt_ctx_device,         (void *)dpt_errorf,
    (void *)dpt_fatal_at,         (void *)dpt_library_failed_at,  (void *)dpt_now_s,
    (void *)dpt_sleep_ms,
};

static void *symbol(void *handle, const char *name)
{
    void *sym = dlsym(handle, name);
    if (!sym && !plugin.why[0])
        snprintf(plugin.why, sizeof plugin.why, "%s has no symbol %s (a plugin of another dptrain build?)",
                 plugin.path, name);
    return sym;
}

static void load(void)
{
    const char *path = getenv("DPT_CUDA_PLUGIN");
    plugin.path = dpt_strf("%s", path && *path ? path : DPT_CUDA_PLUGIN_PATH);
    void *h = dlopen(plugin.path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(plugin.why, sizeof plugin.why, "%s", e ? e : plugin.path);
        return;
    }
    const dpt_backend_impl *impl = symbol(h, "dpt_cuda_plugin_impl");
    void *nccl = symbol(h, "dpt_cuda_plugin_nccl_new");
    if (!impl || !nccl) return; /* kept loaded: its constructors ran, and unloading CUDA is not safe */
    memcpy(&plugin.nccl_new, &nccl, sizeof nccl);
    plugin.impl = impl;
}

static const dpt_backend_impl *loaded(void)
{
    pthread_once(&plugin.once, load);
    return plugin.impl;
}

/* NVIDIA's driver library is on every machine with a GPU and on none without: its absence means
 * no device, known without loading the plugin. */
static bool driver;
static void find_driver(void)
{
    driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) != NULL;
}

static bool driver_present(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT; /* DataParallel's replicas may ask at once */
    pthread_once(&once, find_driver);
    return driver;
}

static const dpt_backend *proxy_table(void)
{
    return loaded() ? plugin.impl->table() : NULL;
}

/* A machine with NVIDIA's driver whose plugin cannot be loaded says so once: a run with
 * `device = auto` would otherwise fall to the CPU with nothing said. */
static int proxy_device_count(void)
{
    if (!driver_present()) return 0;
    if (loaded()) return plugin.impl->device_count();
    static atomic_bool said;
    if (!atomic_exchange(&said, true))
        fprintf(stderr, "warning: NVIDIA's driver is on this machine but the CUDA plugin could not be loaded, so no GPU "
                        "is used: %s\n",
                plugin.why);
    return 0;
}

static void proxy_print_env(FILE *out)
{
    if (loaded())
        plugin.impl->print_env(out);
    else
        fprintf(out, "cuda: in this build, but its plugin could not be loaded: %s\n", plugin.why);
}

static void proxy_pci_bus_id(int index, char *buf, size_t cap)
{
    if (cap) buf[0] = '\0';
    if (driver_present() && loaded() && plugin.impl->pci_bus_id) plugin.impl->pci_bus_id(index, buf, cap);
}

static const char *proxy_unavailable(void)
{
    loaded();
    return plugin.why;
}

dpt_comm *dpt_comm_nccl_new(dpt_ctx *ctx, dpt_comm *host, dpt_error *err)
{
    if (!loaded()) {
        dpt_errorf(err, "the CUDA plugin could not be loaded: %s\nHINT: rebuild (make), or set DPT_CUDA_PLUGIN to "
                        "this build's libdpt_cuda.so",
                   plugin.why);
        return NULL;
    }
    return plugin.nccl_new(ctx, host, err);
}

static const dpt_backend_impl cuda_impl = {DPT_DEVICE_CUDA, proxy_table, proxy_device_count, proxy_print_env,
                                           proxy_pci_bus_id, proxy_unavailable};

#else /* a build without CUDA: the entry says why */

static const dpt_backend *no_table(void)
{
    return NULL;
}

static int no_devices(void)
{
    return 0;
}

static const char *not_built(void)
{
    return "this build has no CUDA (no nvcc or no cuDNN found at build time: make prints why)";
}

static void no_env(FILE *out)
{
    fprintf(out, "cuda: %s\n", not_built());
}

dpt_comm *dpt_comm_nccl_new(dpt_ctx *ctx, dpt_comm *host, dpt_error *err)
{
    (void)ctx, (void)host;
    dpt_errorf(err, "%s, and GPU buffers across ranks need it with NCCL\nHINT: install the CUDA toolkit with cuDNN "
                    "and NCCL and rebuild (make prints cuda=yes), or set [train] device = cpu",
               not_built());
    return NULL;
}

static const dpt_backend_impl cuda_impl = {DPT_DEVICE_CUDA, no_table, no_devices, no_env, NULL, not_built};

#endif

/* registered in every build: without CUDA its table is NULL and `unavailable` says why */
DPT_BUILTIN(backend_cuda) = {DPT_KIND_BACKEND, "cuda",
                             "NVIDIA GPUs: cuBLAS, cuDNN, NCCL and kernels of its own (libdpt_cuda.so, loaded on first "
                             "use)",
                             NULL, 0, &cuda_impl};
