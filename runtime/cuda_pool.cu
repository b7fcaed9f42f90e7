/* cuda_pool.cu: max and average pooling kernels (NCHW or NHWC; windows may overlap). Backward gathers:
 * a thread per input element adds the gradients of the windows that cover it, in window
 * order, so the result is the same bits on every run (scattering with atomicAdd is not). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

/* An element's position: image b, channel ch, row y, column x, in NCHW or NHWC (channels
 * innermost; [train] memory_format = nhwc). The argmax holds y * w + x in either. */
struct pos {
    int64_t b, ch, y, x;
};

static __device__ __forceinline__ pos position(int64_t i, int64_t c, int64_t h, int64_t w, bool nhwc)
{
    pos p;
    if (nhwc)
        p.ch = i % c, p.x = i / c % w, p.y = i / (c * w) % h;
    else
        p.x = i % w, p.y = i / w % h, p.ch = i / (w * h) % c;
    p.b = i / (c * h * w);
    return p;
}

static __device__ __forceinline__ int64_t index_of(int64_t b, int64_t ch, int64_t y, int64_t x, int64_t c,
                                                   int64_t h, int64_t w, bool nhwc)
{
    return nhwc ? ((b * h + y) * w + x) * c + ch : ((b * c + ch) * h + y) * w + x;
}

__global__ void maxpool_fwd_kernel(dpt_pool_shape s, bool nhwc, const float *x, float *y, int32_t *argmax)
{
    GRID_STRIDE(o, s.n * s.c * s.oh * s.ow)
    {
        pos q = position(o, s.c, s.oh, s.ow, nhwc);
        float best = -3.402823466e38f;
        int32_t where = -1;
        for (int64_t ki = 0; ki < s.kh; ki++) {
            int64_t iy = q.y * s.stride_h - s.pad_h + ki;
            if (iy < 0 || iy >= s.h) continue;
            for (int64_t kj = 0; kj < s.kw; kj++) {
                int64_t ix = q.x * s.stride_w - s.pad_w + kj;
                if (ix < 0 || ix >= s.w) continue;
                float v = x[index_of(q.b, q.ch, iy, ix, s.c, s.h, s.w, nhwc)];
                if (where < 0 || v > best) best = v, where = (int32_t)(iy * s.w + ix);
            }
        }
        y[o] = best;
        argmax[o] = where;
    }
}

/* The output rows (columns) whose windows cover input row (column) i: [*lo, *hi]. */
static __device__ __forceinline__ void covering(int64_t i, int64_t k, int64_t stride, int64_t pad, int64_t out,
                                                int64_t *lo, int64_t *hi)
{
    int64_t first = i + pad - k + 1; /* the lowest window start that still reaches i */
    *lo = first <= 0 ? 0 : (first + stride - 1) / stride;
    *hi = (i + pad) / stride;
    if (*hi > out - 1) *hi = out - 1;
}

__global__ void maxpool_bwd_kernel(dpt_pool_shape s, bool nhwc, const float *dy, const int32_t *argmax, float *dx,
                                   bool accumulate)
{
    GRID_STRIDE(i, s.n * s.c * s.h * s.w)
    {
        pos q = position(i, s.c, s.h, s.w, nhwc);
        int64_t y0, y1, x0, x1;
        covering(q.y, s.kh, s.stride_h, s.pad_h, s.oh, &y0, &y1);
        covering(q.x, s.kw, s.stride_w, s.pad_w, s.ow, &x0, &x1);
        int32_t me = (int32_t)(q.y * s.w + q.x);
        float g = 0.0f;
        for (int64_t oy = y0; oy <= y1; oy++)
            for (int64_t ox = x0; ox <= x1; ox++) {
                int64_t o = index_of(q.b, q.ch, oy, ox, s.c, s.oh, s.ow, nhwc);
                if (argmax[o] == me) g += dy[o];
            }
        dx[i] = accumulate ? dx[i] + g : g;
    }
}

__global__ void avgpool_fwd_kernel(dpt_pool_shape s, bool nhwc, const float *x, float *y)
{
    GRID_STRIDE(o, s.n * s.c * s.oh * s.ow)
    {
        pos q = position(o, s.c, s.oh, s.ow, nhwc);
        double acc = 0.0;
        for (int64_t ki = 0; ki < s.kh; ki++) {
            int64_t iy = q.y * s.stride_h - s.pad_h + ki;
            if (iy < 0 || iy >= s.h) continue;
            for (int64_t kj = 0; kj < s.kw; kj++) {
                int64_t ix = q.x * s.stride_w - s.pad_w + kj;
                if (ix >= 0 && ix < s.w) acc += x[index_of(q.b, q.ch, iy, ix, s.c, s.h, s.w, nhwc)];
            }
        }
        y[o] = (float)(acc / (double)(s.kh * s.kw));
    }
}

__global__ void avgpool_bwd_kernel(dpt_pool_shape s, bool nhwc, const float *dy, float *dx, bool accumulate)
{
    GRID_STRIDE(i, s.n * s.c * s.h * s.w)
    {
        pos q = position(i, s.c, s.h, s.w, nhwc);
        int64_t y0, y1, x0, x1;
        covering(q.y, s.kh, s.stride_h, s.pad_h, s.oh, &y0, &y1);
        covering(q.x, s.kw, s.stride_w, s.pad_w, s.ow, &x0, &x1);
        float g = 0.0f;
        for (int64_t oy = y0; oy <= y1; oy++)
            for (int64_t ox = x0; ox <= x1; ox++)
                g += dy[index_of(q.b, q.ch, oy, ox, s.c, s.oh, s.ow, nhwc)] / (float)(s.kh * s.kw); /* as the scatter did */
        dx[i] = accumulate ? dx[i] + g : g;
    }
}

/* NCHW, or NHWC with [train] memory_format = nhwc (CUDA makes no other layout). */
static bool is_nhwc(const dpt_pool_shape *s)
{
    DPT_ASSERT(s->layout == DPT_LAYOUT_NCHW || s->layout == DPT_LAYOUT_NHWC, "a blocked tensor on CUDA");
    DPT_ASSERT(s->dtype == DPT_F32, "a 16-bit activation in CUDA's pooling");
    return s->layout == DPT_LAYOUT_NHWC;
}

static void cuda_maxpool_fwd(dpt_ctx *ctx, const dpt_pool_shape *s, const float *x, float *y, void *ws)
{
    LAUNCH(maxpool_fwd_kernel, s->n * s->c * s->oh * s->ow, *s, is_nhwc(s), x, y, (int32_t *)ws);
}
static void cuda_maxpool_bwd(dpt_ctx *ctx, const dpt_pool_shape *s, const float *dy, const void *ws,
                             float *dx, bool dx_accumulate)
{
    LAUNCH(maxpool_bwd_kernel, s->n * s->c * s->h * s->w, *s, is_nhwc(s), dy, (const int32_t *)ws, dx,
           dx_accumulate);
}
static void cuda_avgpool_fwd(dpt_ctx *ctx, const dpt_pool_shape *s, const float *x, float *y)
{
    LAUNCH(avgpool_fwd_kernel, s->n * s->c * s->oh * s->ow, *s, is_nhwc(s), x, y);
}
static void cuda_avgpool_bwd(dpt_ctx *ctx, const dpt_pool_shape *s, const float *dy, float *dx,
                             bool dx_accumulate)
{
    LAUNCH(avgpool_bwd_kernel, s->n * s->c * s->h * s->w, *s, is_nhwc(s), dy, dx, dx_accumulate);
}

void cuda_pool_entries(dpt_backend *be)
{
    be->maxpool_fwd = cuda_maxpool_fwd;
    be->maxpool_bwd = cuda_maxpool_bwd;
    be->avgpool_fwd = cuda_avgpool_fwd;
    be->avgpool_bwd = cuda_avgpool_bwd;
    be->pool_any_layout = true; /* NCHW and NHWC, the only layouts CUDA makes */
}
