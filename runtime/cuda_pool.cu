/* cuda_pool.cu: max and average pooling kernels (NCHW; windows may overlap). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

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

/* The kernels add into dx (windows may overlap): a first write starts from zeros. */
static void zero_unless_accumulating(dpt_ctx *ctx, const dpt_pool_shape *s, float *dx, bool dx_accumulate)
{
    DPT_ASSERT(s->layout == DPT_LAYOUT_NCHW, "a blocked tensor on CUDA");
    if (!dx_accumulate)
        CHECK_CUDA(
            cudaMemsetAsync(dx, 0, (size_t)(s->n * s->c * s->h * s->w) * sizeof(float), stream_of(ctx)));
}

static void cuda_maxpool_fwd(dpt_ctx *ctx, const dpt_pool_shape *s, const float *x, float *y, void *ws)
{
    DPT_ASSERT(s->layout == DPT_LAYOUT_NCHW, "a blocked tensor on CUDA");
    LAUNCH(maxpool_fwd_kernel, s->n * s->c * s->oh * s->ow, *s, x, y, (int32_t *)ws);
}
static void cuda_maxpool_bwd(dpt_ctx *ctx, const dpt_pool_shape *s, const float *dy, const void *ws,
                             float *dx, bool dx_accumulate)
{
    zero_unless_accumulating(ctx, s, dx, dx_accumulate);
    LAUNCH(maxpool_bwd_kernel, s->n * s->c * s->oh * s->ow, *s, dy, (const int32_t *)ws, dx);
}
static void cuda_avgpool_fwd(dpt_ctx *ctx, const dpt_pool_shape *s, const float *x, float *y)
{
    DPT_ASSERT(s->layout == DPT_LAYOUT_NCHW, "a blocked tensor on CUDA");
    LAUNCH(avgpool_fwd_kernel, s->n * s->c * s->oh * s->ow, *s, x, y);
}
static void cuda_avgpool_bwd(dpt_ctx *ctx, const dpt_pool_shape *s, const float *dy, float *dx,
                             bool dx_accumulate)
{
    zero_unless_accumulating(ctx, s, dx, dx_accumulate);
    LAUNCH(avgpool_bwd_kernel, s->n * s->c * s->oh * s->ow, *s, dy, dx);
}

void cuda_pool_entries(dpt_backend *be)
{
    be->maxpool_fwd = cuda_maxpool_fwd;
    be->maxpool_bwd = cuda_maxpool_bwd;
    be->avgpool_fwd = cuda_avgpool_fwd;
    be->avgpool_bwd = cuda_avgpool_bwd;
}
