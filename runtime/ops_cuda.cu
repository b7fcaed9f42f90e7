/* ops_cuda.cu: the CUDA backend's runtime: a context's device, its compute, copy and
 * communication streams with events between them, device memory through the caching
 * allocator, pinned host memory, copies, the device scratch, ./train --env's GPU lines, and
 * the backend table assembled from the files by concern:
 *   cuda_math.cu   elementwise ops, reductions, activations, softmax/cross-entropy, cuBLAS
 *   cuda_optim.cu  SGD and AdamW, single tensors and multi-tensor lists, gradient norm
 *   cuda_conv.cu   cuDNN convolutions (plan cache, algorithm choice, workspace)
 *   cuda_norm.cu   batch norm (cuDNN fused, and the SyncBatchNorm kernels)
 *   cuda_pool.cu   max and average pooling
 * Every library call is checked by runtime/cuda_check.h. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <math.h>
#if DPT_NCCL
#include <nccl.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

extern "C" cudaStream_t dpt_cuda_stream(dpt_ctx *ctx, dpt_stream which)
{
    cuda_state *s = state_of(ctx);
    return which == DPT_STREAM_COPY ? s->copy : which == DPT_STREAM_COMM ? s->comm : s->compute;
}
extern "C" int dpt_cuda_device_of(dpt_ctx *ctx)
{
    return state_of(ctx)->device;
}

/* ---------------------------------------------------------------- launchers */

static void *cuda_malloc(size_t bytes, void *user)
{
    (void)user;
    void *p = NULL;
    return cudaMalloc(&p, bytes) == cudaSuccess ? p : (cudaGetLastError(), (void *)NULL);
}

static void cuda_free(void *p, void *user)
{
    (void)user;
    CHECK_CUDA(cudaFree(p));
}

static dpt_raw_allocator cuda_raw_allocator(dpt_ctx *ctx)
{
    (void)ctx;
    dpt_raw_allocator raw = {cuda_malloc, cuda_free, NULL};
    return raw;
}

static bool cuda_init(dpt_ctx *ctx, dpt_error *err)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();
        count = 0;
    }
    if (ctx->device.index >= count)
        return dpt_errorf(err,
                          "no CUDA device cuda:%d (this machine has %d)\nHINT: under mpirun each rank takes "
                          "cuda:<local rank>: start at most one rank per GPU on each node (e.g. --map-by "
                          "ppr:<gpus>:node); or set [train] device = cpu; ./train --env lists the GPUs",
                          ctx->device.index, count);
    cuda_state *s = (cuda_state *)calloc(1, sizeof *s);
    s->device = ctx->device.index;
    CHECK_CUDA(cudaSetDevice(s->device));
    int sms = 0;
    CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, s->device));
    s->red_blocks = RED_BLOCKS_PER_SM * (sms > 0 ? sms : 64);
    /* Non-blocking streams: no implicit order with the legacy default stream; every cross-
     * stream dependency is an event. */
    CHECK_CUDA(cudaStreamCreateWithFlags(&s->compute, cudaStreamNonBlocking));
    CHECK_CUDA(cudaStreamCreateWithFlags(&s->copy, cudaStreamNonBlocking));
    CHECK_CUDA(cudaStreamCreateWithFlags(&s->comm, cudaStreamNonBlocking));
    CHECK_CUBLAS(cublasCreate(&s->blas));
    CHECK_CUBLAS(cublasSetStream(s->blas, s->compute));
    /* Exact f32 GEMM by default (TF32 off), so results compare with the CPU backend;
     * CUBLAS_PEDANTIC_MATH would also rule out split-K reductions, which we allow. */
    CHECK_CUBLAS(cublasSetMathMode(s->blas, ctx->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    CHECK_CUDA(cudaMalloc(&s->scratch, 16 * sizeof(double)));
    s->scratch_cap = 16 * sizeof(double);
    CHECK_CUDNN(cudnnCreate(&s->dnn));
    CHECK_CUDNN(cudnnSetStream(s->dnn, s->compute));
    CHECK_CUDNN(cudnnCreateTensorDescriptor(&s->bn_x));
    CHECK_CUDNN(cudnnCreateTensorDescriptor(&s->bn_c));
    ctx->backend_state = s;
    return true;
}

static void cuda_shutdown(dpt_ctx *ctx)
{
    cuda_state *s = state_of(ctx);
    if (!s) return;
    cudaSetDevice(s->device);
    cudaStreamSynchronize(s->copy);
    cudaStreamSynchronize(s->comm);
    cudaStreamSynchronize(s->compute);
    cublasDestroy(s->blas);
    cuda_conv_release(s);
    cuda_optim_release(s);
    cudnnDestroyTensorDescriptor(s->bn_x);
    cudnnDestroyTensorDescriptor(s->bn_c);
    cudnnDestroy(s->dnn);
    cudaFree(s->small);
    cudaFree(s->scratch);
    cudaStreamDestroy(s->copy);
    cudaStreamDestroy(s->comm);
    cudaStreamDestroy(s->compute);
    free(s);
}

void cuda_h2d(dpt_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_of(ctx)));
    CHECK_CUDA(cudaStreamSynchronize(stream_of(ctx))); /* the host buffer may be reused at once */
}

void cuda_d2h(dpt_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_of(ctx)));
    CHECK_CUDA(cudaStreamSynchronize(stream_of(ctx)));
}

static void cuda_d2d(dpt_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    if (bytes) CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_of(ctx)));
}

/* ---------------------------------------------------------------- pinned memory, streams, events */

static void *cuda_host_alloc(dpt_ctx *ctx, size_t bytes)
{
    void *p = NULL;
    CHECK_CUDA(cudaSetDevice(state_of(ctx)->device));
    if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}

static void cuda_host_free(dpt_ctx *ctx, void *p)
{
    if (p) CHECK_CUDA(cudaFreeHost(p));
}

/* The loader's prefetch thread calls these too: the current device is per host thread. */
static void cuda_copy_h2d_async(dpt_ctx *ctx, void *dst, const void *src, size_t bytes, dpt_stream s)
{
    CHECK_CUDA(cudaSetDevice(state_of(ctx)->device));
    if (bytes) CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, dpt_cuda_stream(ctx, s)));
}

static dpt_event *cuda_event_new(dpt_ctx *ctx)
{
    cudaEvent_t ev;
    CHECK_CUDA(cudaSetDevice(state_of(ctx)->device));
    CHECK_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    return (dpt_event *)ev;
}

static void cuda_event_free(dpt_ctx *ctx, dpt_event *ev)
{
    if (ev) CHECK_CUDA(cudaEventDestroy((cudaEvent_t)ev));
}

static void cuda_event_record(dpt_ctx *ctx, dpt_event *ev, dpt_stream s)
{
    CHECK_CUDA(cudaSetDevice(state_of(ctx)->device));
    CHECK_CUDA(cudaEventRecord((cudaEvent_t)ev, dpt_cuda_stream(ctx, s)));
}

/* An event never recorded counts as complete: the first wait on a fresh slot passes. */
static void cuda_stream_wait(dpt_ctx *ctx, dpt_stream s, dpt_event *ev)
{
    CHECK_CUDA(cudaSetDevice(state_of(ctx)->device));
    CHECK_CUDA(cudaStreamWaitEvent(dpt_cuda_stream(ctx, s), (cudaEvent_t)ev, 0));
}

static void cuda_event_sync(dpt_ctx *ctx, dpt_event *ev)
{
    CHECK_CUDA(cudaEventSynchronize((cudaEvent_t)ev));
}

static void cuda_synchronize(dpt_ctx *ctx)
{
    cuda_state *s = state_of(ctx);
    CHECK_CUDA(cudaSetDevice(s->device));
    CHECK_CUDA(cudaStreamSynchronize(s->copy));
    CHECK_CUDA(cudaStreamSynchronize(s->comm));
    CHECK_CUDA(cudaStreamSynchronize(s->compute));
}

static void cuda_mem_info(dpt_ctx *ctx, size_t *free_bytes, size_t *total_bytes)
{
    *free_bytes = *total_bytes = 0;
    if (cudaSetDevice(state_of(ctx)->device) != cudaSuccess ||
        cudaMemGetInfo(free_bytes, total_bytes) != cudaSuccess)
        cudaGetLastError();
}

/* ---------------------------------------------------------------- device scratch */

double cuda_read_scratch(dpt_ctx *ctx)
{
    double v;
    cuda_d2h(ctx, &v, state_of(ctx)->scratch, sizeof v);
    return v;
}

__global__ void total_partials_kernel(const double *partials, int64_t parts, double *out)
{
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < parts; i += blockDim.x) /* a fixed share per thread */
        acc += partials[i];
    double total = block_total(acc);
    if (threadIdx.x == 0) *out = total;
}

double *cuda_partials(dpt_ctx *ctx, int64_t parts)
{
    return cuda_scratch_doubles(ctx, (size_t)parts + 1) + 1;
}

void cuda_total_partials(dpt_ctx *ctx, int64_t parts)
{
    double *s = state_of(ctx)->scratch;
    total_partials_kernel<<<1, THREADS, 0, stream_of(ctx)>>>(s + 1, parts, s);
    CHECK_LAUNCH();
}

double *cuda_scratch_doubles(dpt_ctx *ctx, size_t count)
{
    cuda_state *s = state_of(ctx);
    if (count * sizeof(double) > s->scratch_cap) {
        CHECK_CUDA(cudaStreamSynchronize(s->compute));
        CHECK_CUDA(cudaFree(s->scratch));
        s->scratch_cap =
            count * sizeof(double) > 16 * sizeof(double) ? count * sizeof(double) : 16 * sizeof(double);
        CHECK_CUDA(cudaMalloc(&s->scratch, s->scratch_cap));
    }
    return s->scratch;
}

/* Memory, copies on the compute stream (blocking) or a given one, pinned host memory, events. */
static dpt_device_iface make_device(void)
{
    dpt_device_iface d = {};
    d.raw_allocator = cuda_raw_allocator;
    d.copy_h2d = cuda_h2d;
    d.copy_d2h = cuda_d2h;
    d.copy_d2d = cuda_d2d;
    d.host_alloc = cuda_host_alloc;
    d.host_free = cuda_host_free;
    d.copy_h2d_async = cuda_copy_h2d_async;
    d.event_new = cuda_event_new;
    d.event_free = cuda_event_free;
    d.event_record = cuda_event_record;
    d.stream_wait = cuda_stream_wait;
    d.event_sync = cuda_event_sync;
    d.mem_info = cuda_mem_info;
    d.synchronize = cuda_synchronize;
    return d;
}
static const dpt_device_iface cuda_device = make_device();

/* cuDNN and cuBLAS have fp32, bf16 and fp16 paths. */
static dpt_precision_choice cuda_precision_for(dpt_precision asked)
{
    return dpt_precision_choice{(int)asked, "", ""};
}

static dpt_backend make_backend(void)
{
    dpt_backend be = {};
    be.name = "cuda";
    be.precision_for = cuda_precision_for;
    be.init = cuda_init;
    be.shutdown = cuda_shutdown;
    be.dev = &cuda_device;
    cuda_math_entries(&be);
    cuda_optim_entries(&be);
    cuda_conv_entries(&be);
    cuda_norm_entries(&be);
    cuda_pool_entries(&be);
    cuda_tensor_entries(&be);
    return be;
}

static const dpt_backend cuda_backend = make_backend();

extern "C" const dpt_backend *dpt_backend_cuda(void)
{
    return &cuda_backend;
}

extern "C" void dpt_cuda_pci_bus_id_impl(int index, char *buf, size_t cap)
{
    if (cap && cudaDeviceGetPCIBusId(buf, (int)cap, index) != cudaSuccess) buf[0] = '\0';
}

extern "C" int dpt_cuda_device_count(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return count;
}

extern "C" void dpt_cuda_print_env(FILE *out);

/* What libdpt_cuda.so offers the library's stand-in "cuda" backend (cuda_plugin.c), which
 * loads this plugin on first use and forwards to these entries. */
extern "C" const dpt_backend_impl dpt_cuda_plugin_impl;
extern "C" const dpt_backend_impl dpt_cuda_plugin_impl = {DPT_DEVICE_CUDA, dpt_backend_cuda, dpt_cuda_device_count,
                                                          dpt_cuda_print_env, dpt_cuda_pci_bus_id_impl, NULL};

extern "C" void dpt_cuda_print_env(FILE *out)
{
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    char nccl[32] = "not in this build";
#if DPT_NCCL
    int code = 0;
    ncclGetVersion(&code); /* major * 10000 + minor * 100 + patch since 2.9 */
    snprintf(nccl, sizeof nccl, "%d.%d.%d", code / 10000, code / 100 % 100, code % 100);
#endif
    size_t dnn = cudnnGetVersion(); /* 9.x: major * 10000 + minor * 100 + patch */
    char drv[64] = "none loaded (no NVIDIA kernel driver on this machine)";
    if (driver) snprintf(drv, sizeof drv, "%d.%d", driver / 1000, driver % 1000 / 10);
    fprintf(out, "cuda: driver %s, runtime %d.%d | cudnn %zu.%zu.%zu | nccl %s\n", drv, runtime / 1000,
            runtime % 1000 / 10, dnn >= 90000 ? dnn / 10000 : dnn / 1000,
            dnn >= 90000 ? dnn / 100 % 100 : dnn / 100 % 10, dnn % 100, nccl);
    int count = dpt_cuda_device_count();
    if (count == 0)
        fprintf(out, "gpus: none visible (CUDA_VISIBLE_DEVICES=%s)\n",
                getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "unset");
    for (int i = 0; i < count; i++) {
        cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
        size_t free_b = 0, total_b = 0;
        if (cudaSetDevice(i) != cudaSuccess || cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
            cudaGetLastError();
        fprintf(
            out,
            "gpu %d: %s | %.1f GiB (%.1f free) | compute capability %d.%d | %d SMs | pci %04x:%02x:%02x\n", i,
            p.name, (double)p.totalGlobalMem / (1 << 30), (double)free_b / (1 << 30), p.major, p.minor,
            p.multiProcessorCount, p.pciDomainID, p.pciBusID, p.pciDeviceID);
    }
}
