/* cuda_internal.h: what the CUDA backend's files share (C++, built by nvcc only): the state
 * of one context, launch helpers, block reductions, and the functions one file offers the
 * others. ops_cuda.cu assembles the backend table from each file's entries. */
#ifndef DPT_CUDA_INTERNAL_H
#define DPT_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <stdint.h>

extern "C" {
#include "alloc.h"
#include "backend.h"
#include "ctx.h"
#include "cuda_util.h"
#include "error.h"
}
#include "cuda_check.h"

#define CEIL_DIV(a, b) (((a) + (b)-1) / (b))
#define THREADS 256

/* One convolution shape's descriptors and chosen algorithms. Each direction has its own
 * convolution descriptor: it carries the math type of the algorithm chosen for it. */
typedef struct conv_plan {
    dpt_conv_shape shape;
    bool h16;  /* [train] precision = bf16|fp16: x, w, y (and dy, dx, dw) in 16 bits for cuDNN, fp32 compute */
    bool bf16; /* which: bf16, or fp16 (IEEE half) */
    bool nhwc; /* [train] memory_format = nhwc: x, y in NHWC and the filter handed over as (K, R, S, C) */
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv_fwd, conv_bwd_data, conv_bwd_filter;
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    size_t workspace; /* the largest of the three */
    bool usable;      /* cuDNN offered an algorithm for each direction */
    const char *failed; /* when not: the direction that had none */
    bool warned;      /* the fallback to NCHW was said */
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
    int red_blocks;                     /* grid-stride reductions' blocks: RED_BLOCKS_PER_SM x the SMs */
} cuda_state;

static inline cuda_state *state_of(dpt_ctx *ctx)
{
    return (cuda_state *)ctx->backend_state;
}
static inline cudaStream_t stream_of(dpt_ctx *ctx)
{
    return state_of(ctx)->compute;
}
static inline unsigned blocks_for(int64_t n)
{
    return (unsigned)(n > 0 ? CEIL_DIV(n, THREADS) < 65535 ? CEIL_DIV(n, THREADS) : 65535 : 1);
}

#define GRID_STRIDE(i, n)                                                                                    \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n);                                \
         i += (int64_t)blockDim.x * gridDim.x)

/* Launch a grid-stride kernel over n elements on the compute stream (uses `ctx`). */
#define LAUNCH(kernel, n, ...)                                                                               \
    do {                                                                                                     \
        kernel<<<blocks_for(n), THREADS, 0, stream_of(ctx)>>>(__VA_ARGS__);                                  \
        CHECK_LAUNCH();                                                                                      \
    } while (0)

/* The sum of every thread's value over the block (all threads get it). */
static __device__ __forceinline__ double block_total(double v)
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

/* Fixed-order reductions (the same bits on every run: an atomicAdd's order is the
 * hardware's): each block's total into partials[blockIdx.x], then cuda_total_partials adds
 * the partials in order in one block. Grid-stride reductions run on a fixed number of blocks
 * per device (state->red_blocks: RED_BLOCKS_PER_SM x its SMs, so every SM is busy whatever the
 * GPU; 528 on an H100 or H200), so every thread's share of the elements is fixed too: the
 * same bits run to run on one GPU model. */
#define RED_BLOCKS_PER_SM 4
static __device__ __forceinline__ void block_partial(double acc, double *partials)
{
    double total = block_total(acc);
    if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

/* A scratch block from the context's caching allocator (cuDNN workspace, 16-bit copies of
 * operands); {NULL, 0} for 0 bytes. cuda_block_put hands it back with no synchronisation:
 * the cache serves one stream (compute), so whatever reuses it next is enqueued behind the
 * work that still reads it (PyTorch's caching allocator relies on the same stream order). A
 * block with granted 0 stands for memory that is not the allocator's (a tensor's own, used
 * as it is) and is left alone. */
typedef struct cuda_block {
    void *ptr;
    size_t granted;
} cuda_block;

static inline cuda_block cuda_block_get(dpt_ctx *ctx, size_t bytes, const char *what)
{
    cuda_block b = {NULL, 0};
    if (bytes) b.ptr = dpt_ctx_alloc(ctx, bytes, &b.granted, what);
    return b;
}

static inline void cuda_block_put(dpt_ctx *ctx, cuda_block b)
{
    if (b.ptr && b.granted) dpt_alloc_put(ctx->alloc, b.ptr, b.granted);
}

/* n floats rounded (nearest even) to bf16 or fp16 into a new block, on the compute stream. */
static inline cuda_block cuda_rounded16(dpt_ctx *ctx, const float *src, int64_t n, bool bf16, const char *what)
{
    cuda_block b = cuda_block_get(ctx, (size_t)n * sizeof(uint16_t), what);
    if (n) dpt_cuda_f32_to_h16(stream_of(ctx), (uint16_t *)b.ptr, src, n, bf16);
    return b;
}

/* ops_cuda.cu: blocking copies on the compute stream (the host buffer may be reused at once);
 * the context's device scratch of doubles, its first read back (one host sync). */
void cuda_h2d(dpt_ctx *ctx, void *dst, const void *src, size_t bytes);
void cuda_d2h(dpt_ctx *ctx, void *dst, const void *src, size_t bytes);
double cuda_read_scratch(dpt_ctx *ctx);
double *cuda_scratch_doubles(dpt_ctx *ctx, size_t count); /* grown on demand */
/* Room for `parts` block partials (returned: scratch + 1), and scratch[0] = their sum in
 * order, enqueued on the compute stream (cuda_read_scratch reads it back). */
double *cuda_partials(dpt_ctx *ctx, int64_t parts);
void cuda_total_partials(dpt_ctx *ctx, int64_t parts);

/* Each file's share of the backend table, and what it frees at shutdown. */
void cuda_math_entries(dpt_backend *be);  /* cuda_math.cu: elementwise, reductions, GEMM, loss */
void cuda_optim_entries(dpt_backend *be); /* cuda_optim.cu: SGD, AdamW, multi-tensor lists */
void cuda_conv_entries(dpt_backend *be);  /* cuda_conv.cu: cuDNN convolution */
void cuda_norm_entries(dpt_backend *be);  /* cuda_norm.cu: batch norm */
void cuda_pool_entries(dpt_backend *be);  /* cuda_pool.cu: max and average pooling */
void cuda_tensor_entries(dpt_backend *be); /* cuda_tensor.cu: the tensor primitives */
void cuda_optim_release(cuda_state *s);
void cuda_conv_release(cuda_state *s);

#endif
