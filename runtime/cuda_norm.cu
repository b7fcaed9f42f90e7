/* cuda_norm.cu: batch norm: cuDNN's fused training, backward and inference, and the kernels
 * of the SyncBatchNorm path (per-channel sums that go to the host to be AllReduced). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

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

/* Per-channel parameters copied from the host (grown on demand). */
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
    double *d = cuda_scratch_doubles(ctx, (size_t)(2 * c));
    bn_stats_kernel<<<(unsigned)c, THREADS, 0, stream_of(ctx)>>>(x, n, c, hw, d);
    CHECK_LAUNCH();
    cuda_d2h(ctx, sum, d, (size_t)c * sizeof(double));
    cuda_d2h(ctx, sumsq, d + c, (size_t)c * sizeof(double));
}

static void cuda_bn_bwd_stats(dpt_ctx *ctx, const float *x, const float *dy, int64_t n, int64_t c, int64_t hw,
                              const double *mean, double *sum_dy, double *sum_dy_xmu)
{
    double *d = cuda_scratch_doubles(ctx, (size_t)(3 * c));
    cuda_h2d(ctx, d + 2 * c, mean, (size_t)c * sizeof(double));
    bn_bwd_stats_kernel<<<(unsigned)c, THREADS, 0, stream_of(ctx)>>>(x, dy, n, c, hw, d + 2 * c, d);
    CHECK_LAUNCH();
    cuda_d2h(ctx, sum_dy, d, (size_t)c * sizeof(double));
    cuda_d2h(ctx, sum_dy_xmu, d + c, (size_t)c * sizeof(double));
}

/* cuDNN's batch norm over (n, c, hw): the statistics never leave the device, so a BN layer
 * costs no host round trip (the SyncBatchNorm path above needs its sums on the host). */
static void bn_descriptors(dpt_ctx *ctx, int64_t n, int64_t c, int64_t hw, dpt_layout layout, dpt_dtype dtype)
{
    DPT_ASSERT((layout == DPT_LAYOUT_NCHW || layout == DPT_LAYOUT_NHWC) && dtype == DPT_F32,
               "a blocked or 16-bit tensor on CUDA");
    cuda_state *s = state_of(ctx);
    /* (n, c, hw, 1) is the same memory as (n, c, h, w) in either layout */
    CHECK_CUDNN(cudnnSetTensor4dDescriptor(s->bn_x, layout == DPT_LAYOUT_NHWC ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                           CUDNN_DATA_FLOAT, (int)n, (int)c, (int)hw, 1));
    CHECK_CUDNN(cudnnDeriveBNTensorDescriptor(s->bn_c, s->bn_x, CUDNN_BATCHNORM_SPATIAL));
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored                                                                               \
    "-Wdeprecated-declarations" /* cuDNN 9 keeps these; the graph API replaces them */
static void cuda_bn_fused_fwd(dpt_ctx *ctx, const float *x, float *y, int64_t n, int64_t c, int64_t hw,
                              dpt_layout layout, dpt_dtype dtype, const float *gamma, const float *beta,
                              float *running_mean, float *running_var, double momentum, double eps,
                              float *save_mean, float *save_invstd, void *relu_ws)
{
    DPT_ASSERT(!relu_ws, "cuDNN's batch norm here fuses no ReLU (no bn_relu_ws_bytes)");
    cuda_state *s = state_of(ctx);
    bn_descriptors(ctx, n, c, hw, layout, dtype);
    float one = 1.0f, zero = 0.0f; /* running_mean and running_var: both NULL or neither (cuDNN's rule) */
    CHECK_CUDNN(cudnnBatchNormalizationForwardTraining(
        s->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, s->bn_x, x, s->bn_x, y, s->bn_c, gamma, beta, momentum,
        running_mean, running_var, eps, save_mean, save_invstd));
}

static void cuda_bn_fused_bwd(dpt_ctx *ctx, const float *x, const float *dy, float *dx, bool dx_accumulate,
                              int64_t n, int64_t c, int64_t hw, dpt_layout layout, dpt_dtype dtype,
                              const float *gamma, float *dgamma, float *dbeta, double eps,
                              const float *save_mean, const float *save_invstd, const void *relu_ws)
{
    DPT_ASSERT(!relu_ws, "cuDNN's batch norm here fuses no ReLU (no bn_relu_ws_bytes)");
    cuda_state *s = state_of(ctx);
    bn_descriptors(ctx, n, c, hw, layout, dtype);
    /* parameters: beta = 1 (gradients accumulate); data: beta = 0 when dx is written first
     * (no zero fill and no read of it) */
    float one = 1.0f, data_beta = dx_accumulate ? 1.0f : 0.0f;
    CHECK_CUDNN(cudnnBatchNormalizationBackward(s->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &data_beta, &one, &one,
                                                s->bn_x, x, s->bn_x, dy, s->bn_x, dx, s->bn_c, gamma, dgamma,
                                                dbeta, eps, save_mean, save_invstd));
}
static void cuda_bn_fused_infer(dpt_ctx *ctx, const float *x, float *y, int64_t n, int64_t c, int64_t hw,
                                dpt_layout layout, dpt_dtype dtype, const float *gamma, const float *beta,
                                const float *running_mean, const float *running_var, double eps)
{
    cuda_state *s = state_of(ctx);
    bn_descriptors(ctx, n, c, hw, layout, dtype);
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

void cuda_norm_entries(dpt_backend *be)
{
    be->bn_stats = cuda_bn_stats;
    be->bn_bwd_stats = cuda_bn_bwd_stats;
    be->channel_affine = cuda_channel_affine;
    be->channel_affine2_acc = cuda_channel_affine2_acc;
    be->bn_fused_fwd = cuda_bn_fused_fwd;
    be->bn_fused_bwd = cuda_bn_fused_bwd;
    be->bn_fused_infer = cuda_bn_fused_infer;
}
