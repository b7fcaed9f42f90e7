/* ops_cuda.cu: the CUDA backend: device memory through the caching allocator, a compute, a
 * copy and a communication stream per context with events between them, pinned host
 * memory, cuBLAS SGEMM (TF32 as a setting), cuDNN convolution (algorithms chosen by cuDNN's
 * heuristics once per shape and cached, workspace from the caching allocator) and batch
 * norm, and CUDA C kernels for elementwise ops, reductions, batch-norm statistics (the
 * SyncBatchNorm path), pooling, softmax cross-entropy and fused SGD/AdamW updates. */
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

extern "C" {
#include "backend.h"
#include "ctx.h"
#include "cuda_util.h"
#include "error.h"
}

#define CEIL_DIV(a, b) (((a) + (b)-1) / (b))
#define THREADS 256

/* Report file:line, the call and CUDA's own error string, then stop the job. */
#define CHECK_CUDA(call)                                                                                     \
    do {                                                                                                     \
        cudaError_t cuda_rc_ = (call);                                                                       \
        if (cuda_rc_ != cudaSuccess) dpt_fatal("%s failed: %s", #call, cudaGetErrorString(cuda_rc_));        \
    } while (0)
#define CHECK_CUBLAS(call)                                                                                   \
    do {                                                                                                     \
        cublasStatus_t blas_rc_ = (call);                                                                    \
        if (blas_rc_ != CUBLAS_STATUS_SUCCESS)                                                               \
            dpt_fatal("%s failed: cuBLAS status %d", #call, (int)blas_rc_);                                  \
    } while (0)
#define CHECK_LAUNCH() CHECK_CUDA(cudaGetLastError())
#define CHECK_CUDNN(call)                                                                                    \
    do {                                                                                                     \
        cudnnStatus_t dnn_rc_ = (call);                                                                      \
        if (dnn_rc_ != CUDNN_STATUS_SUCCESS)                                                                 \
            dpt_fatal("%s failed: %s", #call, cudnnGetErrorString(dnn_rc_));                                 \
    } while (0)

/* One convolution shape's descriptors and chosen algorithms. Each direction has its own
 * convolution descriptor: it carries the math type of the algorithm chosen for it. */
typedef struct conv_plan {
    dpt_conv_shape shape;
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv_fwd, conv_bwd_data, conv_bwd_filter;
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    size_t workspace; /* the largest of the three */
} conv_plan;

typedef struct cuda_state {
    int device;
    cudaStream_t compute, copy, comm;
    cublasHandle_t blas;
    double *scratch; /* device reduction results */
    size_t scratch_cap;
    float *small; /* per-channel parameters copied from the host (batch norm) */
    size_t small_cap;
    cudnnHandle_t dnn;
    conv_plan *plans; /* one per convolution shape seen (train, eval and last-batch sizes) */
    int nplans, cap_plans;
    cudnnTensorDescriptor_t bn_x, bn_c; /* batch norm: the input's and the per-channel shape */
    struct mt_table *tables;            /* device copies of multi-tensor lists, by key */
} cuda_state;

static cuda_state *state_of(dpt_ctx *ctx)
{
    return (cuda_state *)ctx->backend_state;
}
static cudaStream_t stream_of(dpt_ctx *ctx)
{
    return state_of(ctx)->compute;
}
extern "C" cudaStream_t dpt_cuda_stream(dpt_ctx *ctx, dpt_stream which)
{
    cuda_state *s = state_of(ctx);
    return which == DPT_STREAM_COPY ? s->copy : which == DPT_STREAM_COMM ? s->comm : s->compute;
}
extern "C" int dpt_cuda_device_of(dpt_ctx *ctx)
{
    return state_of(ctx)->device;
}
static unsigned blocks_for(int64_t n)
{
    return (unsigned)(n > 0 ? CEIL_DIV(n, THREADS) < 65535 ? CEIL_DIV(n, THREADS) : 65535 : 1);
}

/* ---------------------------------------------------------------- kernels */

#define GRID_STRIDE(i, n)                                                                                    \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n);                                \
         i += (int64_t)blockDim.x * gridDim.x)

__global__ void fill_kernel(float *x, int64_t n, float v)
{
    GRID_STRIDE(i, n) x[i] = v;
}
__global__ void axpy_kernel(int64_t n, float a, const float *x, float *y)
{
    GRID_STRIDE(i, n) y[i] += a * x[i];
}
__global__ void scale_kernel(int64_t n, float a, const float *x, float *o)
{
    GRID_STRIDE(i, n) o[i] = a * x[i];
}
__global__ void add_kernel(int64_t n, const float *a, const float *b, float *o)
{
    GRID_STRIDE(i, n) o[i] = a[i] + b[i];
}
__global__ void mul_kernel(int64_t n, const float *a, const float *b, float *o)
{
    GRID_STRIDE(i, n) o[i] = a[i] * b[i];
}
__global__ void mul_acc_kernel(int64_t n, const float *a, const float *b, float *o)
{
    GRID_STRIDE(i, n) o[i] += a[i] * b[i];
}

/* The sum of every thread's value over the block (all threads get it). */
__device__ double block_total(double v)
{
    __shared__ double partial[THREADS];
    __syncthreads(); /* a previous call's readers are done with partial[] */
    partial[threadIdx.x] = v;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    return partial[0];
}

/* Add the block's total of each thread's value to *out. */
__device__ void block_sum_into(double acc, double *out)
{
    double total = block_total(acc);
    if (threadIdx.x == 0) atomicAdd(out, total);
}

__global__ void dot_kernel(const float *a, const float *b, int64_t n, double *out)
{
    double acc = 0.0;
    GRID_STRIDE(i, n) acc += (double)a[i] * (double)b[i];
    block_sum_into(acc, out);
}

__global__ void sum_kernel(const float *a, int64_t n, double *out)
{
    double acc = 0.0;
    GRID_STRIDE(i, n) acc += (double)a[i];
    block_sum_into(acc, out);
}

__global__ void transpose_acc_kernel(const float *src, float *dst, int64_t rows, int64_t cols)
{
    GRID_STRIDE(i, rows * cols)
    {
        int64_t r = i / cols, c = i % cols;
        dst[c * rows + r] += src[i];
    }
}

__global__ void bias_add_kernel(float *y, const float *b, int64_t rows, int64_t cols)
{
    GRID_STRIDE(i, rows * cols) y[i] += b[i % cols];
}

__global__ void bias_grad_kernel(const float *dy, float *db, int64_t rows, int64_t cols)
{
    GRID_STRIDE(c, cols)
    {
        float acc = 0.0f;
        for (int64_t r = 0; r < rows; r++)
            acc += dy[r * cols + c];
        db[c] += acc;
    }
}

__global__ void relu_fwd_kernel(const float *x, float *y, int64_t n)
{
    GRID_STRIDE(i, n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
__global__ void relu_bwd_kernel(const float *y, const float *dy, float *dx, int64_t n)
{
    GRID_STRIDE(i, n) dx[i] += y[i] > 0.0f ? dy[i] : 0.0f;
}

#define GELU_K 0.7978845608028654f
#define GELU_C 0.044715f
__global__ void gelu_fwd_kernel(const float *x, float *y, int64_t n)
{
    GRID_STRIDE(i, n)
    {
        float v = x[i];
        y[i] = 0.5f * v * (1.0f + tanhf(GELU_K * (v + GELU_C * v * v * v)));
    }
}
__global__ void gelu_bwd_kernel(const float *x, const float *dy, float *dx, int64_t n)
{
    GRID_STRIDE(i, n)
    {
        float v = x[i], t = tanhf(GELU_K * (v + GELU_C * v * v * v));
        float dt = GELU_K * (1.0f + 3.0f * GELU_C * v * v) * (1.0f - t * t);
        dx[i] += dy[i] * (0.5f * (1.0f + t) + 0.5f * v * dt);
    }
}

/* One thread per row: the class dimension of a classifier is small. */
__global__ void softmax_fwd_kernel(const float *x, float *y, int64_t rows, int64_t cols)
{
    GRID_STRIDE(r, rows)
    {
        const float *xr = x + r * cols;
        float m = xr[0];
        for (int64_t c = 1; c < cols; c++)
            m = fmaxf(m, xr[c]);
        double total = 0.0;
        for (int64_t c = 0; c < cols; c++)
            total += expf(xr[c] - m);
        float inv = (float)(1.0 / total);
        for (int64_t c = 0; c < cols; c++)
            y[r * cols + c] = expf(xr[c] - m) * inv;
    }
}

__global__ void softmax_bwd_kernel(const float *y, const float *dy, float *dx, int64_t rows, int64_t cols)
{
    GRID_STRIDE(r, rows)
    {
        double dot = 0.0;
        for (int64_t c = 0; c < cols; c++)
            dot += (double)dy[r * cols + c] * y[r * cols + c];
        for (int64_t c = 0; c < cols; c++)
            dx[r * cols + c] += y[r * cols + c] * (dy[r * cols + c] - (float)dot);
    }
}

__global__ void xent_fwd_kernel(const float *x, const int32_t *labels, int64_t rows, int64_t cols,
                                float smoothing, float *probs, double *loss)
{
    GRID_STRIDE(r, rows)
    {
        const float *xr = x + r * cols;
        float m = xr[0];
        for (int64_t c = 1; c < cols; c++)
            m = fmaxf(m, xr[c]);
        double total = 0.0, sum_logits = 0.0;
        for (int64_t c = 0; c < cols; c++)
            total += exp((double)xr[c] - m), sum_logits += xr[c];
        double lse = m + log(total);
        for (int64_t c = 0; c < cols; c++)
            probs[r * cols + c] = (float)exp((double)xr[c] - lse);
        int32_t y = labels[r];
        double l = y < 0 || y >= cols
                       ? NAN /* out of range: a NaN loss, not a read out of bounds */
                       : (1.0 - smoothing) * (lse - xr[y]) + smoothing * (lse - sum_logits / (double)cols);
        atomicAdd(loss, l);
    }
}

/* loss[0] = total[0] / rows: the mean, left on the device */
__global__ void mean_kernel(const double *total, int64_t rows, float *loss)
{
    if (blockIdx.x == 0 && threadIdx.x == 0) loss[0] = (float)(total[0] / (double)rows);
}

__global__ void xent_bwd_kernel(const float *probs, const int32_t *labels, int64_t rows, int64_t cols,
                                float smoothing, const float *dloss, float *dx)
{
    float scale = dloss[0] / (float)rows;
    GRID_STRIDE(i, rows * cols)
    {
        int64_t r = i / cols, c = i % cols;
        float target = smoothing / (float)cols + (c == labels[r] ? 1.0f - smoothing : 0.0f);
        dx[i] += scale * (probs[i] - target);
    }
}

__global__ void correct_acc_kernel(const float *x, const int32_t *labels, int64_t rows, int64_t cols,
                                   float *out)
{
    GRID_STRIDE(r, rows)
    {
        int64_t best = 0;
        for (int64_t c = 1; c < cols; c++)
            if (x[r * cols + c] > x[r * cols + best]) best = c;
        if (best == labels[r]) atomicAdd(out, 1.0f);
    }
}

/* One element of each update, shared by the single-tensor and the multi-tensor kernels so
 * both give the same bits. */
__device__ __forceinline__ void sgd_one(float *p, const float *g, float *buf, float lr, float momentum,
                                        float dampening, float wd, bool nesterov, bool first)
{
    float gi = *g + wd * *p;
    if (momentum != 0.0f) {
        *buf = first ? gi : momentum * *buf + (1.0f - dampening) * gi;
        gi = nesterov ? gi + momentum * *buf : *buf;
    }
    *p -= lr * gi;
}

__device__ __forceinline__ void adamw_one(float *p, const float *g, float *m, float *v, float lr, float b1,
                                          float b2, float eps, float wd, float step_size, float bc2_sqrt)
{
    *p *= 1.0f - lr * wd;
    *m = b1 * *m + (1.0f - b1) * *g;
    *v = b2 * *v + (1.0f - b2) * *g * *g;
    *p -= step_size * *m / (sqrtf(*v) / bc2_sqrt + eps);
}

__global__ void sgd_kernel(int64_t n, float *p, const float *g, float *buf, float lr, float momentum,
                           float dampening, float wd, bool nesterov, bool first)
{
    GRID_STRIDE(i, n) sgd_one(p + i, g + i, buf + i, lr, momentum, dampening, wd, nesterov, first);
}

__global__ void adamw_kernel(int64_t n, float *p, const float *g, float *m, float *v, float lr, float b1,
                             float b2, float eps, float wd, float step_size, float bc2_sqrt)
{
    GRID_STRIDE(i, n) adamw_one(p + i, g + i, m + i, v + i, lr, b1, b2, eps, wd, step_size, bc2_sqrt);
}

/* Multi-tensor kernels: one block per chunk of at most MT_CHUNK elements of one tensor. */
#define MT_CHUNK 65536
#define MT_WIDTH 4
typedef struct mt_chunk {
    float *p[MT_WIDTH];
    int64_t n;
} mt_chunk;
#define MT_TABLES 4
typedef struct mt_table {
    uint64_t key;
    mt_chunk *dev;
    int nchunks;
} mt_table;

__global__ void sgd_multi_kernel(const mt_chunk *chunks, float lr, float momentum, float dampening, float wd,
                                 bool nesterov, bool first)
{
    mt_chunk c = chunks[blockIdx.x];
    for (int64_t i = threadIdx.x; i < c.n; i += blockDim.x)
        sgd_one(c.p[0] + i, c.p[1] + i, c.p[2] + i, lr, momentum, dampening, wd, nesterov, first);
}

__global__ void adamw_multi_kernel(const mt_chunk *chunks, float lr, float b1, float b2, float eps, float wd,
                                   float step_size, float bc2_sqrt)
{
    mt_chunk c = chunks[blockIdx.x];
    for (int64_t i = threadIdx.x; i < c.n; i += blockDim.x)
        adamw_one(c.p[0] + i, c.p[1] + i, c.p[2] + i, c.p[3] + i, lr, b1, b2, eps, wd, step_size, bc2_sqrt);
}

__device__ double block_total(double v);
__device__ void block_sum_into(double acc, double *out);

__global__ void sumsq_multi_kernel(const mt_chunk *chunks, double *out)
{
    mt_chunk c = chunks[blockIdx.x];
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < c.n; i += blockDim.x)
        acc += (double)c.p[0][i] * (double)c.p[0][i];
    block_sum_into(acc, out);
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
    for (int i = 0; i < s->nplans; i++) {
        cudnnDestroyTensorDescriptor(s->plans[i].x);
        cudnnDestroyTensorDescriptor(s->plans[i].y);
        cudnnDestroyFilterDescriptor(s->plans[i].w);
        cudnnDestroyConvolutionDescriptor(s->plans[i].conv_fwd);
        cudnnDestroyConvolutionDescriptor(s->plans[i].conv_bwd_data);
        cudnnDestroyConvolutionDescriptor(s->plans[i].conv_bwd_filter);
    }
    free(s->plans);
    for (int i = 0; s->tables && i < MT_TABLES; i++)
        cudaFree(s->tables[i].dev);
    free(s->tables);
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

static void cuda_h2d(dpt_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_of(ctx)));
    CHECK_CUDA(cudaStreamSynchronize(stream_of(ctx))); /* the host buffer may be reused at once */
}

static void cuda_d2h(dpt_ctx *ctx, void *dst, const void *src, size_t bytes)
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

#define LAUNCH(kernel, n, ...)                                                                               \
    do {                                                                                                     \
        kernel<<<blocks_for(n), THREADS, 0, stream_of(ctx)>>>(__VA_ARGS__);                                  \
        CHECK_LAUNCH();                                                                                      \
    } while (0)

static void cuda_fill(dpt_ctx *ctx, float *x, int64_t n, float v)
{
    LAUNCH(fill_kernel, n, x, n, v);
}
static void cuda_axpy(dpt_ctx *ctx, int64_t n, float a, const float *x, float *y)
{
    LAUNCH(axpy_kernel, n, n, a, x, y);
}
static void cuda_scale(dpt_ctx *ctx, int64_t n, float a, const float *x, float *o)
{
    LAUNCH(scale_kernel, n, n, a, x, o);
}
static void cuda_add(dpt_ctx *ctx, int64_t n, const float *a, const float *b, float *o)
{
    LAUNCH(add_kernel, n, n, a, b, o);
}
static void cuda_mul(dpt_ctx *ctx, int64_t n, const float *a, const float *b, float *o)
{
    LAUNCH(mul_kernel, n, n, a, b, o);
}
static void cuda_mul_acc(dpt_ctx *ctx, int64_t n, const float *a, const float *b, float *o)
{
    LAUNCH(mul_acc_kernel, n, n, a, b, o);
}

static double read_scratch(dpt_ctx *ctx)
{
    double v;
    cuda_d2h(ctx, &v, state_of(ctx)->scratch, sizeof v);
    return v;
}

static void zero_scratch(dpt_ctx *ctx)
{
    CHECK_CUDA(cudaMemsetAsync(state_of(ctx)->scratch, 0, sizeof(double), stream_of(ctx)));
}

static double cuda_sum(dpt_ctx *ctx, const float *x, int64_t n)
{
    zero_scratch(ctx);
    LAUNCH(sum_kernel, n, x, n, state_of(ctx)->scratch);
    return read_scratch(ctx);
}

static double cuda_dot(dpt_ctx *ctx, const float *a, const float *b, int64_t n)
{
    zero_scratch(ctx);
    LAUNCH(dot_kernel, n, a, b, n, state_of(ctx)->scratch);
    return read_scratch(ctx);
}

static void cuda_transpose_acc(dpt_ctx *ctx, const float *src, float *dst, int64_t rows, int64_t cols)
{
    LAUNCH(transpose_acc_kernel, rows * cols, src, dst, rows, cols);
}

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands. */
static void cuda_gemm(dpt_ctx *ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                      const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                      int64_t ldc)
{
    if (M == 0 || N == 0) return;
    CHECK_CUBLAS(cublasSgemm(state_of(ctx)->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                             ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M, (int)K, &alpha, B, (int)ldb, A,
                             (int)lda, &beta, C, (int)ldc));
}

static void cuda_bias_add(dpt_ctx *ctx, float *y, const float *b, int64_t rows, int64_t cols)
{
    LAUNCH(bias_add_kernel, rows * cols, y, b, rows, cols);
}
static void cuda_bias_grad(dpt_ctx *ctx, const float *dy, float *db, int64_t rows, int64_t cols)
{
    LAUNCH(bias_grad_kernel, cols, dy, db, rows, cols);
}
static void cuda_relu_fwd(dpt_ctx *ctx, const float *x, float *y, int64_t n)
{
    LAUNCH(relu_fwd_kernel, n, x, y, n);
}
static void cuda_relu_bwd(dpt_ctx *ctx, const float *y, const float *dy, float *dx, int64_t n)
{
    LAUNCH(relu_bwd_kernel, n, y, dy, dx, n);
}
static void cuda_gelu_fwd(dpt_ctx *ctx, const float *x, float *y, int64_t n)
{
    LAUNCH(gelu_fwd_kernel, n, x, y, n);
}
static void cuda_gelu_bwd(dpt_ctx *ctx, const float *x, const float *dy, float *dx, int64_t n)
{
    LAUNCH(gelu_bwd_kernel, n, x, dy, dx, n);
}
static void cuda_softmax_fwd(dpt_ctx *ctx, const float *x, float *y, int64_t rows, int64_t cols)
{
    LAUNCH(softmax_fwd_kernel, rows, x, y, rows, cols);
}
static void cuda_softmax_bwd(dpt_ctx *ctx, const float *y, const float *dy, float *dx, int64_t rows,
                             int64_t cols)
{
    LAUNCH(softmax_bwd_kernel, rows, y, dy, dx, rows, cols);
}

/* The labels are on the device already (the loader copies them with the batch), and the
 * loss stays there: no read-back in the step. */
static void cuda_xent_fwd(dpt_ctx *ctx, const float *logits, const int32_t *labels, int64_t rows,
                          int64_t cols, float smoothing, float *probs, float *loss)
{
    zero_scratch(ctx);
    LAUNCH(xent_fwd_kernel, rows, logits, labels, rows, cols, smoothing, probs, state_of(ctx)->scratch);
    mean_kernel<<<1, 1, 0, stream_of(ctx)>>>(state_of(ctx)->scratch, rows, loss);
    CHECK_CUDA(cudaGetLastError());
}

static void cuda_xent_bwd(dpt_ctx *ctx, const float *probs, const int32_t *labels, int64_t rows, int64_t cols,
                          float smoothing, const float *dloss, float *dlogits)
{
    LAUNCH(xent_bwd_kernel, rows * cols, probs, labels, rows, cols, smoothing, dloss, dlogits);
}

static void cuda_correct_acc(dpt_ctx *ctx, const float *logits, const int32_t *labels, int64_t rows,
                             int64_t cols, float *correct)
{
    LAUNCH(correct_acc_kernel, rows, logits, labels, rows, cols, correct);
}

/* ---------------------------------------------------------------- multi-tensor entries */

/* A list's chunks on the device. Pointers are stable from step to step (parameters, their
 * gradients in DDP buckets, optimizer state), so each list is uploaded once and found again
 * by its key; a few lists are in use at a time (the optimizer's, the gradient norm's). */
static const mt_table *mt_upload(dpt_ctx *ctx, const dpt_tensor_list *l)
{
    cuda_state *s = state_of(ctx);
    if (!s->tables) {
        s->tables = (mt_table *)calloc(MT_TABLES, sizeof *s->tables);
        if (!s->tables) dpt_fatal("out of host memory for multi-tensor tables");
    }
    for (int i = 0; i < MT_TABLES; i++)
        if (s->tables[i].dev && s->tables[i].key == l->key) return &s->tables[i];
    DPT_ASSERT(l->width <= MT_WIDTH, "multi-tensor list of width %d", l->width);
    int n = 0;
    for (int i = 0; i < l->count; i++)
        n += (int)CEIL_DIV(l->numel[i], (int64_t)MT_CHUNK);
    mt_chunk *host = (mt_chunk *)calloc((size_t)n + 1, sizeof *host);
    if (!host) dpt_fatal("out of host memory for a multi-tensor table");
    int k = 0;
    for (int i = 0; i < l->count; i++)
        for (int64_t off = 0; off < l->numel[i]; off += MT_CHUNK, k++) {
            for (int w = 0; w < l->width; w++)
                host[k].p[w] = l->ptr[i * l->width + w] + off;
            host[k].n = l->numel[i] - off < MT_CHUNK ? l->numel[i] - off : MT_CHUNK;
        }
    /* Slots are kept most recent first: take an empty one, else evict the last (oldest); a
     * kernel still queued may read its table, so wait before freeing it. */
    int slot = MT_TABLES - 1;
    for (int i = 0; i < MT_TABLES; i++)
        if (!s->tables[i].dev) {
            slot = i;
            break;
        }
    if (s->tables[slot].dev) {
        CHECK_CUDA(cudaStreamSynchronize(s->compute));
        CHECK_CUDA(cudaFree(s->tables[slot].dev));
    }
    memmove(&s->tables[1], &s->tables[0], (size_t)slot * sizeof s->tables[0]);
    mt_table *t = &s->tables[0];
    t->key = l->key, t->nchunks = n, t->dev = NULL;
    CHECK_CUDA(cudaMalloc(&t->dev, (size_t)(n ? n : 1) * sizeof *host));
    cuda_h2d(ctx, t->dev, host, (size_t)n * sizeof *host);
    free(host);
    return t;
}

static void cuda_sgd_step_multi(dpt_ctx *ctx, const dpt_tensor_list *l, float lr, float momentum,
                                float dampening, float wd, bool nesterov, bool first)
{
    const mt_table *t = mt_upload(ctx, l);
    if (!t->nchunks) return;
    sgd_multi_kernel<<<(unsigned)t->nchunks, THREADS, 0, stream_of(ctx)>>>(t->dev, lr, momentum, dampening,
                                                                           wd, nesterov, first);
    CHECK_LAUNCH();
}

static void cuda_adamw_step_multi(dpt_ctx *ctx, const dpt_tensor_list *l, float lr, float b1, float b2,
                                  float eps, float wd, float bc1, float bc2)
{
    const mt_table *t = mt_upload(ctx, l);
    if (!t->nchunks) return;
    adamw_multi_kernel<<<(unsigned)t->nchunks, THREADS, 0, stream_of(ctx)>>>(t->dev, lr, b1, b2, eps, wd,
                                                                             lr / bc1, sqrtf(bc2));
    CHECK_LAUNCH();
}

static double cuda_sumsq_multi(dpt_ctx *ctx, const dpt_tensor_list *l)
{
    const mt_table *t = mt_upload(ctx, l);
    if (!t->nchunks) return 0.0;
    zero_scratch(ctx);
    sumsq_multi_kernel<<<(unsigned)t->nchunks, THREADS, 0, stream_of(ctx)>>>(t->dev, state_of(ctx)->scratch);
    CHECK_LAUNCH();
    return read_scratch(ctx);
}

static void cuda_sgd_step(dpt_ctx *ctx, int64_t n, float *p, const float *g, float *buf, float lr,
                          float momentum, float dampening, float wd, bool nesterov, bool first)
{
    LAUNCH(sgd_kernel, n, n, p, g, buf, lr, momentum, dampening, wd, nesterov, first);
}

static void cuda_adamw_step(dpt_ctx *ctx, int64_t n, float *p, const float *g, float *m, float *v, float lr,
                            float b1, float b2, float eps, float wd, float bc1, float bc2)
{
    LAUNCH(adamw_kernel, n, n, p, g, m, v, lr, b1, b2, eps, wd, lr / bc1, sqrtf(bc2));
}

/* ---------------------------------------------------------------- convolution (cuDNN) */

static const char *conv_shape_str(const dpt_conv_shape *sh)
{
    static __thread char buf[160];
    snprintf(buf, sizeof buf,
             "x %lldx%lldx%lldx%lld, w %lldx%lldx%lldx%lld, stride %lld, pad %lld, groups %lld",
             (long long)sh->n, (long long)sh->c_in, (long long)sh->h, (long long)sh->w, (long long)sh->c_out,
             (long long)(sh->c_in / sh->groups), (long long)sh->kh, (long long)sh->kw,
             (long long)sh->stride_h, (long long)sh->pad_h, (long long)sh->groups);
    return buf;
}

static cudnnConvolutionDescriptor_t conv_descriptor(const dpt_conv_shape *sh)
{
    cudnnConvolutionDescriptor_t d;
    CHECK_CUDNN(cudnnCreateConvolutionDescriptor(&d));
    CHECK_CUDNN(cudnnSetConvolution2dDescriptor(d, (int)sh->pad_h, (int)sh->pad_w, (int)sh->stride_h,
                                                (int)sh->stride_w, (int)sh->dil_h, (int)sh->dil_w,
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CHECK_CUDNN(cudnnSetConvolutionGroupCount(d, (int)sh->groups));
    return d;
}

/* The algorithms cuDNN proposes for one direction come ranked (heuristics, or measured times
 * with [train] cudnn_benchmark). Walk them in order: skip what failed or is not supported;
 * set the descriptor to the candidate's own math type (FP32 only, unless TF32 is allowed);
 * size its workspace for exactly that pair, and fall back to the next candidate when cuDNN
 * calls the pair NOT_SUPPORTED or BAD_PARAM there; take the first that fits. */
#define PICK_ALGORITHM(perf, got, desc, workspace_call, chosen, bytes, what)                                 \
    do {                                                                                                     \
        int i_;                                                                                              \
        for (i_ = 0; i_ < (got); i_++) {                                                                     \
            if ((perf)[i_].status != CUDNN_STATUS_SUCCESS) continue;                                         \
            cudnnMathType_t m_ = (perf)[i_].mathType;                                                        \
            if (!ctx->tf32 && m_ != CUDNN_FMA_MATH && m_ != CUDNN_DEFAULT_MATH) continue;                    \
            if (cudnnSetConvolutionMathType((desc), ctx->tf32 ? m_ : CUDNN_FMA_MATH) !=                      \
                CUDNN_STATUS_SUCCESS)                                                                        \
                continue;                                                                                    \
            size_t b_ = 0;                                                                                   \
            cudnnStatus_t st_ = (workspace_call);                                                            \
            if (st_ == CUDNN_STATUS_NOT_SUPPORTED || st_ == CUDNN_STATUS_BAD_PARAM) continue;                \
            CHECK_CUDNN(st_);                                                                                \
            if (b_ > ((size_t)1 << 30)) continue; /* more than 1 GiB of workspace: the next one */           \
            (chosen) = (perf)[i_].algo, (bytes) = b_;                                                        \
            break;                                                                                           \
        }                                                                                                    \
        if (i_ == (got))                                                                                     \
            dpt_fatal("cuDNN offers no usable %s algorithm for convolution %s", what, conv_shape_str(sh));   \
    } while (0)

static conv_plan *plan_for(dpt_ctx *ctx, const dpt_conv_shape *sh)
{
    cuda_state *s = state_of(ctx);
    for (int i = 0; i < s->nplans; i++)
        if (memcmp(&s->plans[i].shape, sh, sizeof *sh) == 0) return &s->plans[i];
    if (s->nplans == s->cap_plans) {
        s->cap_plans = s->cap_plans ? 2 * s->cap_plans : 32;
        s->plans = (conv_plan *)realloc(s->plans, (size_t)s->cap_plans * sizeof *s->plans);
        if (!s->plans) dpt_fatal("out of host memory for convolution plans");
    }
    conv_plan *p = &s->plans[s->nplans++];
    p->shape = *sh;
    CHECK_CUDNN(cudnnCreateTensorDescriptor(&p->x));
    CHECK_CUDNN(cudnnCreateTensorDescriptor(&p->y));
    CHECK_CUDNN(cudnnCreateFilterDescriptor(&p->w));
    CHECK_CUDNN(cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)sh->n,
                                           (int)sh->c_in, (int)sh->h, (int)sh->w));
    CHECK_CUDNN(cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)sh->n,
                                           (int)sh->c_out, (int)sh->oh, (int)sh->ow));
    CHECK_CUDNN(cudnnSetFilter4dDescriptor(p->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, (int)sh->c_out,
                                           (int)(sh->c_in / sh->groups), (int)sh->kh, (int)sh->kw));
    p->conv_fwd = conv_descriptor(sh), p->conv_bwd_data = conv_descriptor(sh),
    p->conv_bwd_filter = conv_descriptor(sh);
    /* Ranking: heuristics by default (a function of the shape and the GPU, so a resumed run
     * picks the same algorithms); measured once per shape with [train] cudnn_benchmark, as
     * PyTorch's benchmark mode (faster, but the choice may differ between runs). Exact FP32
     * by default, to compare with the CPU backend; [train] tf32 admits TF32 tensor cores. */
    enum { MAX_ALGOS = 16 };
    int got = 0;
    size_t bytes_fwd = 0, bytes_bd = 0, bytes_bf = 0;
    cudnnConvolutionFwdAlgoPerf_t f[MAX_ALGOS];
    cudnnConvolutionBwdDataAlgoPerf_t d[MAX_ALGOS];
    cudnnConvolutionBwdFilterAlgoPerf_t w[MAX_ALGOS];
    for (int k = 0; k < 3; k++) /* heuristics and Find look at the descriptor's math type */
        CHECK_CUDNN(cudnnSetConvolutionMathType(k == 0   ? p->conv_fwd
                                                : k == 1 ? p->conv_bwd_data
                                                         : p->conv_bwd_filter,
                                                ctx->tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
    if (ctx->cudnn_benchmark)
        CHECK_CUDNN(
            cudnnFindConvolutionForwardAlgorithm(s->dnn, p->x, p->w, p->conv_fwd, p->y, MAX_ALGOS, &got, f));
    else
        CHECK_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(s->dnn, p->x, p->w, p->conv_fwd, p->y, MAX_ALGOS,
                                                           &got, f));
    PICK_ALGORITHM(
        f, got, p->conv_fwd,
        cudnnGetConvolutionForwardWorkspaceSize(s->dnn, p->x, p->w, p->conv_fwd, p->y, f[i_].algo, &b_),
        p->fwd, bytes_fwd, "forward");
    if (ctx->cudnn_benchmark)
        CHECK_CUDNN(cudnnFindConvolutionBackwardDataAlgorithm(s->dnn, p->w, p->y, p->conv_bwd_data, p->x,
                                                              MAX_ALGOS, &got, d));
    else
        CHECK_CUDNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(s->dnn, p->w, p->y, p->conv_bwd_data, p->x,
                                                                MAX_ALGOS, &got, d));
    PICK_ALGORITHM(d, got, p->conv_bwd_data,
                   cudnnGetConvolutionBackwardDataWorkspaceSize(s->dnn, p->w, p->y, p->conv_bwd_data, p->x,
                                                                d[i_].algo, &b_),
                   p->bwd_data, bytes_bd, "backward-data");
    if (ctx->cudnn_benchmark)
        CHECK_CUDNN(cudnnFindConvolutionBackwardFilterAlgorithm(s->dnn, p->x, p->y, p->conv_bwd_filter, p->w,
                                                                MAX_ALGOS, &got, w));
    else
        CHECK_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(s->dnn, p->x, p->y, p->conv_bwd_filter,
                                                                  p->w, MAX_ALGOS, &got, w));
    PICK_ALGORITHM(w, got, p->conv_bwd_filter,
                   cudnnGetConvolutionBackwardFilterWorkspaceSize(s->dnn, p->x, p->y, p->conv_bwd_filter,
                                                                  p->w, w[i_].algo, &b_),
                   p->bwd_filter, bytes_bf, "backward-filter");
    p->workspace = bytes_fwd > bytes_bd ? bytes_fwd : bytes_bd;
    if (bytes_bf > p->workspace) p->workspace = bytes_bf;
    return p;
}

typedef struct workspace {
    void *ptr;
    size_t granted;
} workspace;

static workspace workspace_get(dpt_ctx *ctx, size_t bytes)
{
    workspace ws = {NULL, 0};
    if (bytes) {
        ws.ptr = dpt_ctx_alloc(ctx, bytes, &ws.granted, "cuDNN convolution workspace");
    }
    return ws;
}

/* No synchronisation: the cache serves one stream (compute), so whatever reuses the block
 * next is enqueued behind the convolution that still reads it (PyTorch's caching allocator
 * relies on the same stream order). */
static void workspace_put(dpt_ctx *ctx, workspace ws)
{
    if (ws.ptr) dpt_alloc_put(ctx->alloc, ws.ptr, ws.granted);
}

__global__ void channel_bias_kernel(float *y, const float *b, int64_t n, int64_t c, int64_t hw)
{
    GRID_STRIDE(i, n * c * hw) y[i] += b[(i / hw) % c];
}

__global__ void channel_sum_kernel(const float *dy, float *db, int64_t n, int64_t c, int64_t hw)
{
    /* one block per channel */
    int64_t ch = blockIdx.x;
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < n * hw; i += blockDim.x)
        acc += dy[(i / hw * c + ch) * hw + i % hw];
    double total = block_total(acc);
    if (threadIdx.x == 0) db[ch] += (float)total;
}

static void cuda_conv2d_fwd(dpt_ctx *ctx, const dpt_conv_shape *sh, const float *x, const float *w,
                            const float *bias, float *y)
{
    conv_plan *p = plan_for(ctx, sh);
    workspace ws = workspace_get(ctx, p->workspace);
    float one = 1.0f, zero = 0.0f;
    CHECK_CUDNN(cudnnConvolutionForward(state_of(ctx)->dnn, &one, p->x, x, p->w, w, p->conv_fwd, p->fwd,
                                        ws.ptr, p->workspace, &zero, p->y, y));
    if (bias)
        LAUNCH(channel_bias_kernel, sh->n * sh->c_out * sh->oh * sh->ow, y, bias, sh->n, sh->c_out,
               sh->oh * sh->ow);
    workspace_put(ctx, ws);
}

static void cuda_conv2d_bwd(dpt_ctx *ctx, const dpt_conv_shape *sh, const float *x, const float *w,
                            const float *dy, float *dx, bool dx_accumulate, float *dw, float *dbias)
{
    conv_plan *p = plan_for(ctx, sh);
    workspace ws = workspace_get(ctx, p->workspace);
    /* beta = 1: the weight gradient accumulates; the data gradient too, unless this is its
     * first writer (beta = 0: no zero fill before, no read of it) */
    float one = 1.0f, data_beta = dx_accumulate ? 1.0f : 0.0f;
    if (dx)
        CHECK_CUDNN(cudnnConvolutionBackwardData(state_of(ctx)->dnn, &one, p->w, w, p->y, dy,
                                                 p->conv_bwd_data, p->bwd_data, ws.ptr, p->workspace,
                                                 &data_beta, p->x, dx));
    if (dw)
        CHECK_CUDNN(cudnnConvolutionBackwardFilter(state_of(ctx)->dnn, &one, p->x, x, p->y, dy,
                                                   p->conv_bwd_filter, p->bwd_filter, ws.ptr, p->workspace,
                                                   &one, p->w, dw));
    if (dbias) {
        channel_sum_kernel<<<(unsigned)sh->c_out, THREADS, 0, stream_of(ctx)>>>(dy, dbias, sh->n, sh->c_out,
                                                                                sh->oh * sh->ow);
        CHECK_LAUNCH();
    }
    workspace_put(ctx, ws);
}

/* ---------------------------------------------------------------- batch norm */

__global__ void bn_stats_kernel(const float *x, int64_t n, int64_t c, int64_t hw, double *out)
{
    int64_t ch = blockIdx.x;
    double s1 = 0.0, s2 = 0.0;
    for (int64_t i = threadIdx.x; i < n * hw; i += blockDim.x) {
        double v = x[(i / hw * c + ch) * hw + i % hw];
        s1 += v, s2 += v * v;
    }
    double t1 = block_total(s1), t2 = block_total(s2);
    if (threadIdx.x == 0) out[ch] = t1, out[c + ch] = t2;
}

__global__ void bn_bwd_stats_kernel(const float *x, const float *dy, int64_t n, int64_t c, int64_t hw,
                                    const double *mean, double *out)
{
    int64_t ch = blockIdx.x;
    double s1 = 0.0, s2 = 0.0, mu = mean[ch];
    for (int64_t i = threadIdx.x; i < n * hw; i += blockDim.x) {
        int64_t k = (i / hw * c + ch) * hw + i % hw;
        s1 += dy[k], s2 += (double)dy[k] * ((double)x[k] - mu);
    }
    double t1 = block_total(s1), t2 = block_total(s2);
    if (threadIdx.x == 0) out[ch] = t1, out[c + ch] = t2;
}

__global__ void channel_affine_kernel(const float *x, float *y, int64_t n, int64_t c, int64_t hw,
                                      const float *scale, const float *shift)
{
    GRID_STRIDE(i, n * c * hw)
    {
        int64_t ch = (i / hw) % c;
        y[i] = scale[ch] * x[i] + shift[ch];
    }
}

__global__ void channel_affine2_kernel(const float *dy, const float *x, float *dx, int64_t n, int64_t c,
                                       int64_t hw, const float *a, const float *b, const float *k)
{
    GRID_STRIDE(i, n * c * hw)
    {
        int64_t ch = (i / hw) % c;
        dx[i] += a[ch] * dy[i] + b[ch] * x[i] + k[ch];
    }
}

/* Device scratch of `count` doubles / floats (grown on demand). */
static double *device_doubles(dpt_ctx *ctx, size_t count)
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

static float *device_floats(dpt_ctx *ctx, const float *host, size_t count)
{
    cuda_state *s = state_of(ctx);
    if (count * sizeof(float) > s->small_cap) {
        CHECK_CUDA(cudaStreamSynchronize(s->compute));
        CHECK_CUDA(cudaFree(s->small));
        s->small_cap = count * sizeof(float);
        CHECK_CUDA(cudaMalloc(&s->small, s->small_cap));
    }
    cuda_h2d(ctx, s->small, host, count * sizeof(float));
    return s->small;
}

static void cuda_bn_stats(dpt_ctx *ctx, const float *x, int64_t n, int64_t c, int64_t hw, double *sum,
                          double *sumsq)
{
    double *d = device_doubles(ctx, (size_t)(2 * c));
    bn_stats_kernel<<<(unsigned)c, THREADS, 0, stream_of(ctx)>>>(x, n, c, hw, d);
    CHECK_LAUNCH();
    cuda_d2h(ctx, sum, d, (size_t)c * sizeof(double));
    cuda_d2h(ctx, sumsq, d + c, (size_t)c * sizeof(double));
}

static void cuda_bn_bwd_stats(dpt_ctx *ctx, const float *x, const float *dy, int64_t n, int64_t c, int64_t hw,
                              const double *mean, double *sum_dy, double *sum_dy_xmu)
{
    double *d = device_doubles(ctx, (size_t)(3 * c));
    cuda_h2d(ctx, d + 2 * c, mean, (size_t)c * sizeof(double));
    bn_bwd_stats_kernel<<<(unsigned)c, THREADS, 0, stream_of(ctx)>>>(x, dy, n, c, hw, d + 2 * c, d);
    CHECK_LAUNCH();
    cuda_d2h(ctx, sum_dy, d, (size_t)c * sizeof(double));
    cuda_d2h(ctx, sum_dy_xmu, d + c, (size_t)c * sizeof(double));
}

/* cuDNN's batch norm over (n, c, hw): the statistics never leave the device, so a BN layer
 * costs no host round trip (the SyncBatchNorm path above needs its sums on the host). */
static void bn_descriptors(dpt_ctx *ctx, int64_t n, int64_t c, int64_t hw)
{
    cuda_state *s = state_of(ctx);
    CHECK_CUDNN(
        cudnnSetTensor4dDescriptor(s->bn_x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)n, (int)c, (int)hw, 1));
    CHECK_CUDNN(cudnnDeriveBNTensorDescriptor(s->bn_c, s->bn_x, CUDNN_BATCHNORM_SPATIAL));
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored                                                                               \
    "-Wdeprecated-declarations" /* cuDNN 9 keeps these; the graph API replaces them */
static void cuda_bn_fused_fwd(dpt_ctx *ctx, const float *x, float *y, int64_t n, int64_t c, int64_t hw,
                              dpt_layout layout, const float *gamma, const float *beta, float *running_mean,
                              float *running_var, double momentum, double eps, float *save_mean,
                              float *save_invstd)
{
    DPT_ASSERT(layout == DPT_LAYOUT_NCHW, "a blocked tensor on CUDA");
    cuda_state *s = state_of(ctx);
    bn_descriptors(ctx, n, c, hw);
    float one = 1.0f, zero = 0.0f;
    CHECK_CUDNN(cudnnBatchNormalizationForwardTraining(
        s->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, s->bn_x, x, s->bn_x, y, s->bn_c, gamma, beta, momentum,
        running_mean, running_var, eps, save_mean, save_invstd));
}

static void cuda_bn_fused_bwd(dpt_ctx *ctx, const float *x, const float *dy, float *dx, bool dx_accumulate,
                              int64_t n, int64_t c, int64_t hw, dpt_layout layout, const float *gamma,
                              float *dgamma, float *dbeta, double eps, const float *save_mean,
                              const float *save_invstd)
{
    DPT_ASSERT(layout == DPT_LAYOUT_NCHW, "a blocked tensor on CUDA");
    cuda_state *s = state_of(ctx);
    bn_descriptors(ctx, n, c, hw);
    /* parameters: beta = 1 (gradients accumulate); data: beta = 0 when dx is written first
     * (no zero fill and no read of it) */
    float one = 1.0f, data_beta = dx_accumulate ? 1.0f : 0.0f;
    CHECK_CUDNN(cudnnBatchNormalizationBackward(s->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &data_beta, &one, &one,
                                                s->bn_x, x, s->bn_x, dy, s->bn_x, dx, s->bn_c, gamma, dgamma,
                                                dbeta, eps, save_mean, save_invstd));
}
static void cuda_bn_fused_infer(dpt_ctx *ctx, const float *x, float *y, int64_t n, int64_t c, int64_t hw,
                                dpt_layout layout, const float *gamma, const float *beta,
                                const float *running_mean, const float *running_var, double eps)
{
    DPT_ASSERT(layout == DPT_LAYOUT_NCHW, "a blocked tensor on CUDA");
    cuda_state *s = state_of(ctx);
    bn_descriptors(ctx, n, c, hw);
    float one = 1.0f, zero = 0.0f;
    CHECK_CUDNN(cudnnBatchNormalizationForwardInference(s->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, s->bn_x,
                                                        x, s->bn_x, y, s->bn_c, gamma, beta, running_mean,
                                                        running_var, eps));
}
#pragma GCC diagnostic pop

static void cuda_channel_affine(dpt_ctx *ctx, const float *x, float *y, int64_t n, int64_t c, int64_t hw,
                                const float *scale, const float *shift)
{
    float *host = (float *)malloc((size_t)(2 * c) * sizeof(float));
    memcpy(host, scale, (size_t)c * sizeof(float));
    memcpy(host + c, shift, (size_t)c * sizeof(float));
    float *d = device_floats(ctx, host, (size_t)(2 * c));
    free(host);
    LAUNCH(channel_affine_kernel, n * c * hw, x, y, n, c, hw, d, d + c);
}

static void cuda_channel_affine2_acc(dpt_ctx *ctx, const float *dy, const float *x, float *dx, int64_t n,
                                     int64_t c, int64_t hw, const float *a, const float *b, const float *k)
{
    float *host = (float *)malloc((size_t)(3 * c) * sizeof(float));
    memcpy(host, a, (size_t)c * sizeof(float));
    memcpy(host + c, b, (size_t)c * sizeof(float));
    memcpy(host + 2 * c, k, (size_t)c * sizeof(float));
    float *d = device_floats(ctx, host, (size_t)(3 * c));
    free(host);
    LAUNCH(channel_affine2_kernel, n * c * hw, dy, x, dx, n, c, hw, d, d + c, d + 2 * c);
}

/* ---------------------------------------------------------------- pooling */

__global__ void maxpool_fwd_kernel(dpt_pool_shape s, const float *x, float *y, int32_t *argmax)
{
    GRID_STRIDE(o, s.n * s.c * s.oh * s.ow)
    {
        int64_t ox = o % s.ow, oy = o / s.ow % s.oh, plane = o / (s.ow * s.oh);
        const float *xp = x + plane * s.h * s.w;
        float best = -3.402823466e38f;
        int32_t where = -1;
        for (int64_t ki = 0; ki < s.kh; ki++) {
            int64_t iy = oy * s.stride_h - s.pad_h + ki;
            if (iy < 0 || iy >= s.h) continue;
            for (int64_t kj = 0; kj < s.kw; kj++) {
                int64_t ix = ox * s.stride_w - s.pad_w + kj;
                if (ix < 0 || ix >= s.w) continue;
                float v = xp[iy * s.w + ix];
                if (where < 0 || v > best) best = v, where = (int32_t)(iy * s.w + ix);
            }
        }
        y[o] = best;
        argmax[o] = where;
    }
}

__global__ void maxpool_bwd_kernel(dpt_pool_shape s, const float *dy, const int32_t *argmax, float *dx)
{
    GRID_STRIDE(o, s.n * s.c * s.oh * s.ow)
    {
        int64_t plane = o / (s.ow * s.oh);
        atomicAdd(&dx[plane * s.h * s.w + argmax[o]], dy[o]); /* windows may overlap */
    }
}

__global__ void avgpool_fwd_kernel(dpt_pool_shape s, const float *x, float *y)
{
    GRID_STRIDE(o, s.n * s.c * s.oh * s.ow)
    {
        int64_t ox = o % s.ow, oy = o / s.ow % s.oh, plane = o / (s.ow * s.oh);
        const float *xp = x + plane * s.h * s.w;
        double acc = 0.0;
        for (int64_t ki = 0; ki < s.kh; ki++) {
            int64_t iy = oy * s.stride_h - s.pad_h + ki;
            if (iy < 0 || iy >= s.h) continue;
            for (int64_t kj = 0; kj < s.kw; kj++) {
                int64_t ix = ox * s.stride_w - s.pad_w + kj;
                if (ix >= 0 && ix < s.w) acc += xp[iy * s.w + ix];
            }
        }
        y[o] = (float)(acc / (double)(s.kh * s.kw));
    }
}

__global__ void avgpool_bwd_kernel(dpt_pool_shape s, const float *dy, float *dx)
{
    GRID_STRIDE(o, s.n * s.c * s.oh * s.ow)
    {
        int64_t ox = o % s.ow, oy = o / s.ow % s.oh, plane = o / (s.ow * s.oh);
        float g = dy[o] / (float)(s.kh * s.kw);
        for (int64_t ki = 0; ki < s.kh; ki++) {
            int64_t iy = oy * s.stride_h - s.pad_h + ki;
            if (iy < 0 || iy >= s.h) continue;
            for (int64_t kj = 0; kj < s.kw; kj++) {
                int64_t ix = ox * s.stride_w - s.pad_w + kj;
                if (ix >= 0 && ix < s.w) atomicAdd(&dx[plane * s.h * s.w + iy * s.w + ix], g);
            }
        }
    }
}

static void cuda_maxpool_fwd(dpt_ctx *ctx, const dpt_pool_shape *s, const float *x, float *y, int32_t *argmax)
{
    LAUNCH(maxpool_fwd_kernel, s->n * s->c * s->oh * s->ow, *s, x, y, argmax);
}
static void cuda_maxpool_bwd(dpt_ctx *ctx, const dpt_pool_shape *s, const float *dy, const int32_t *argmax,
                             float *dx)
{
    LAUNCH(maxpool_bwd_kernel, s->n * s->c * s->oh * s->ow, *s, dy, argmax, dx);
}
static void cuda_avgpool_fwd(dpt_ctx *ctx, const dpt_pool_shape *s, const float *x, float *y)
{
    LAUNCH(avgpool_fwd_kernel, s->n * s->c * s->oh * s->ow, *s, x, y);
}
static void cuda_avgpool_bwd(dpt_ctx *ctx, const dpt_pool_shape *s, const float *dy, float *dx)
{
    LAUNCH(avgpool_bwd_kernel, s->n * s->c * s->oh * s->ow, *s, dy, dx);
}

static dpt_backend make_backend(void)
{
    dpt_backend be = {};
    be.name = "cuda";
    be.init = cuda_init;
    be.shutdown = cuda_shutdown;
    be.raw_allocator = cuda_raw_allocator;
    be.copy_h2d = cuda_h2d;
    be.copy_d2h = cuda_d2h;
    be.copy_d2d = cuda_d2d;
    be.host_alloc = cuda_host_alloc;
    be.host_free = cuda_host_free;
    be.copy_h2d_async = cuda_copy_h2d_async;
    be.event_new = cuda_event_new;
    be.event_free = cuda_event_free;
    be.event_record = cuda_event_record;
    be.stream_wait = cuda_stream_wait;
    be.event_sync = cuda_event_sync;
    be.mem_info = cuda_mem_info;
    be.synchronize = cuda_synchronize;
    be.fill = cuda_fill;
    be.axpy = cuda_axpy;
    be.scale = cuda_scale;
    be.add = cuda_add;
    be.mul = cuda_mul;
    be.mul_acc = cuda_mul_acc;
    be.sum = cuda_sum;
    be.dot = cuda_dot;
    be.transpose_acc = cuda_transpose_acc;
    be.gemm = cuda_gemm;
    be.bias_add = cuda_bias_add;
    be.bias_grad = cuda_bias_grad;
    be.relu_fwd = cuda_relu_fwd;
    be.relu_bwd = cuda_relu_bwd;
    be.gelu_fwd = cuda_gelu_fwd;
    be.gelu_bwd = cuda_gelu_bwd;
    be.softmax_fwd = cuda_softmax_fwd;
    be.softmax_bwd = cuda_softmax_bwd;
    be.xent_fwd = cuda_xent_fwd;
    be.xent_bwd = cuda_xent_bwd;
    be.correct_acc = cuda_correct_acc;
    be.sgd_step = cuda_sgd_step;
    be.adamw_step = cuda_adamw_step;
    be.conv2d_fwd = cuda_conv2d_fwd;
    be.conv2d_bwd = cuda_conv2d_bwd;
    be.bn_stats = cuda_bn_stats;
    be.bn_bwd_stats = cuda_bn_bwd_stats;
    be.channel_affine = cuda_channel_affine;
    be.bn_fused_fwd = cuda_bn_fused_fwd;
    be.bn_fused_bwd = cuda_bn_fused_bwd;
    be.bn_fused_infer = cuda_bn_fused_infer;
    be.sgd_step_multi = cuda_sgd_step_multi;
    be.adamw_step_multi = cuda_adamw_step_multi;
    be.sumsq_multi = cuda_sumsq_multi;
    be.channel_affine2_acc = cuda_channel_affine2_acc;
    be.maxpool_fwd = cuda_maxpool_fwd;
    be.maxpool_bwd = cuda_maxpool_bwd;
    be.avgpool_fwd = cuda_avgpool_fwd;
    be.avgpool_bwd = cuda_avgpool_bwd;
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
