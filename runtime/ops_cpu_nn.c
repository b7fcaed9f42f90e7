/* ops_cpu_nn.c: CPU kernels for convolution, batch norm and pooling.
 *
 * Convolution is im2col + OpenBLAS GEMM per sample and group: y_g (Cout/g, OH*OW) =
 * W_g (Cout/g, K) x col_g (K, OH*OW) with K = Cin/g * KH * KW. With at least as many samples
 * as threads, samples are spread over OpenMP threads, each with its own column buffer, and
 * each GEMM runs single-threaded inside the region (the OpenMP build of OpenBLAS does that
 * by itself); with fewer samples, BLAS gets the threads instead. The weight gradient is
 * accumulated per thread and summed in thread order, so results do not depend on timing.
 * 1x1 convolutions with stride 1 and no padding skip im2col (the input is the column).
 * Scratch comes from the caching allocator, sized once per shape: no allocation in the step
 * after the first. */
#include "blas.h"
#include <float.h>
#include <math.h>
#include <string.h>

#include "backend.h"
#include "ctx.h"
#include "error.h"
#include "openmp.h"

static bool is_pointwise(const dpt_conv_shape *s)
{
    return s->kh == 1 && s->kw == 1 && s->stride_h == 1 && s->stride_w == 1 && s->pad_h == 0 && s->pad_w == 0;
}

/* The output columns ox whose input column ix = ox * stride + offset lies inside [0, w):
 * [*lo, *hi). Computing the range once per row keeps the copy loops free of bounds tests. */
static void valid_range(int64_t offset, int64_t stride, int64_t w, int64_t ow, int64_t *lo, int64_t *hi)
{
    int64_t l = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
    int64_t h = w - 1 - offset < 0 ? 0 : (w - 1 - offset) / stride + 1;
    *lo = l < ow ? l : ow;
    *hi = h < ow ? h : ow;
    if (*hi < *lo) *hi = *lo;
}

/* col (C*KH*KW, OH*OW) from one sample x (C, H, W). */
static void im2col(const dpt_conv_shape *s, const float *x, float *col)
{
    int64_t ohw = s->oh * s->ow;
    for (int64_t c = 0; c < s->c_in; c++)
        for (int64_t ki = 0; ki < s->kh; ki++)
            for (int64_t kj = 0; kj < s->kw; kj++) {
                float *row = col + ((c * s->kh + ki) * s->kw + kj) * ohw;
                int64_t offset = kj * s->dil_w - s->pad_w, lo, hi;
                valid_range(offset, s->stride_w, s->w, s->ow, &lo, &hi);
                for (int64_t oy = 0; oy < s->oh; oy++) {
                    int64_t iy = oy * s->stride_h - s->pad_h + ki * s->dil_h;
                    float *dst = row + oy * s->ow;
                    if (iy < 0 || iy >= s->h) {
                        memset(dst, 0, (size_t)s->ow * sizeof(float));
                        continue;
                    }
                    const float *src = x + (c * s->h + iy) * s->w + offset;
                    for (int64_t ox = 0; ox < lo; ox++)
                        dst[ox] = 0.0f;
                    if (s->stride_w == 1)
                        memcpy(dst + lo, src + lo, (size_t)(hi - lo) * sizeof(float));
                    else
                        for (int64_t ox = lo; ox < hi; ox++)
                            dst[ox] = src[ox * s->stride_w];
                    for (int64_t ox = hi; ox < s->ow; ox++)
                        dst[ox] = 0.0f;
                }
            }
}

/* dx (C, H, W) += col2im(col). */
static void col2im_acc(const dpt_conv_shape *s, const float *col, float *dx)
{
    int64_t ohw = s->oh * s->ow;
    for (int64_t c = 0; c < s->c_in; c++)
        for (int64_t ki = 0; ki < s->kh; ki++)
            for (int64_t kj = 0; kj < s->kw; kj++) {
                const float *row = col + ((c * s->kh + ki) * s->kw + kj) * ohw;
                int64_t offset = kj * s->dil_w - s->pad_w, lo, hi;
                valid_range(offset, s->stride_w, s->w, s->ow, &lo, &hi);
                for (int64_t oy = 0; oy < s->oh; oy++) {
                    int64_t iy = oy * s->stride_h - s->pad_h + ki * s->dil_h;
                    if (iy < 0 || iy >= s->h) continue;
                    float *dst = dx + (c * s->h + iy) * s->w + offset;
                    const float *src = row + oy * s->ow;
                    if (s->stride_w == 1)
                        for (int64_t ox = lo; ox < hi; ox++)
                            dst[ox] += src[ox];
                    else
                        for (int64_t ox = lo; ox < hi; ox++)
                            dst[ox * s->stride_w] += src[ox];
                }
            }
}

typedef struct conv_scratch {
    float *base;
    size_t granted;
} conv_scratch;

static float *scratch_get(dpt_ctx *ctx, conv_scratch *sc, size_t floats)
{
    sc->base = dpt_ctx_alloc(ctx, floats * sizeof(float) + 64, &sc->granted, "convolution scratch");
    return sc->base;
}

static int sample_threads(const dpt_ctx *ctx, int64_t n)
{
    return n >= ctx->threads && ctx->threads > 1 ? ctx->threads : 1;
}

void dpt_cpu_conv2d_fwd(dpt_ctx *ctx, const dpt_conv_shape *s, const float *x, const float *w,
                        const float *bias, float *y)
{
    int64_t g = s->groups, cout_g = s->c_out / g, k_g = s->c_in / g * s->kh * s->kw;
    int64_t ohw = s->oh * s->ow, col_size = s->c_in * s->kh * s->kw * ohw;
    bool pointwise = is_pointwise(s);
    int threads = sample_threads(ctx, s->n);
    conv_scratch sc = {0};
    float *cols = pointwise ? NULL : scratch_get(ctx, &sc, (size_t)(threads * col_size));
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
    for (int64_t i = 0; i < s->n; i++) {
        const float *xi = x + i * s->c_in * s->h * s->w;
        float *col = pointwise ? (float *)xi : cols + (int64_t)omp_get_thread_num() * col_size;
        if (!pointwise) im2col(s, xi, col);
        float *yi = y + i * s->c_out * ohw;
        for (int64_t gi = 0; gi < g; gi++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)cout_g, (blasint)ohw,
                        (blasint)k_g, 1.0f, w + gi * cout_g * k_g, (blasint)k_g, col + gi * k_g * ohw,
                        (blasint)ohw, 0.0f, yi + gi * cout_g * ohw, (blasint)ohw);
        if (bias)
            for (int64_t c = 0; c < s->c_out; c++)
                for (int64_t p = 0; p < ohw; p++)
                    yi[c * ohw + p] += bias[c];
    }
    if (cols) dpt_alloc_put(ctx->alloc, sc.base, sc.granted);
}

void dpt_cpu_conv2d_bwd(dpt_ctx *ctx, const dpt_conv_shape *s, const float *x, const float *w,
                        const float *dy, float *dx, bool dx_accumulate, float *dw, float *dbias)
{
    int64_t g = s->groups, cout_g = s->c_out / g, k_g = s->c_in / g * s->kh * s->kw;
    int64_t ohw = s->oh * s->ow, col_size = s->c_in * s->kh * s->kw * ohw;
    int64_t w_size = s->c_out * k_g;
    bool pointwise = is_pointwise(s);
    if (dx && !dx_accumulate) memset(dx, 0, (size_t)(s->n * s->c_in * s->h * s->w) * sizeof(float));
    int threads = sample_threads(ctx, s->n);
    /* per thread: one column buffer for x, one for the data gradient, one dW partial */
    int64_t per_thread = (pointwise ? 0 : 2 * col_size) + (dw ? w_size : 0);
    conv_scratch sc = {0};
    float *scratch = per_thread ? scratch_get(ctx, &sc, (size_t)(threads * per_thread)) : NULL;
    if (dw)
        for (int t = 0; t < threads; t++)
            memset(scratch + t * per_thread, 0, (size_t)w_size * sizeof(float));
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
    for (int64_t i = 0; i < s->n; i++) {
        float *mine = scratch + (int64_t)omp_get_thread_num() * per_thread;
        float *dw_part = dw ? mine : NULL;
        float *col = pointwise ? NULL : mine + (dw ? w_size : 0);
        float *dcol = pointwise ? NULL : col + col_size;
        const float *xi = x ? x + i * s->c_in * s->h * s->w : NULL; /* read for dw only: NULL without */
        const float *dyi = dy + i * s->c_out * ohw;
        float *dxi = dx ? dx + i * s->c_in * s->h * s->w : NULL;
        const float *xcol = xi;
        if (dw && !pointwise) {
            im2col(s, xi, col);
            xcol = col;
        }
        for (int64_t gi = 0; gi < g; gi++) {
            const float *dy_g = dyi + gi * cout_g * ohw;
            if (dw_part) /* dW_g (Cout/g, K) += dy_g (Cout/g, OHW) x col_g^T */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)cout_g, (blasint)k_g,
                            (blasint)ohw, 1.0f, dy_g, (blasint)ohw, xcol + gi * k_g * ohw, (blasint)ohw, 1.0f,
                            dw_part + gi * cout_g * k_g, (blasint)k_g);
            if (dxi) { /* dcol_g (K, OHW) = W_g^T x dy_g; pointwise: straight into dx */
                float *target = pointwise ? dxi + gi * k_g * ohw : dcol + gi * k_g * ohw;
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)k_g, (blasint)ohw,
                            (blasint)cout_g, 1.0f, w + gi * cout_g * k_g, (blasint)k_g, dy_g, (blasint)ohw,
                            pointwise ? 1.0f : 0.0f, target, (blasint)ohw);
            }
        }
        if (dxi && !pointwise) col2im_acc(s, dcol, dxi);
    }
    if (dw)
        for (int t = 0; t < threads; t++) {
            const float *part = scratch + t * per_thread;
            for (int64_t j = 0; j < w_size; j++)
                dw[j] += part[j];
        }
    if (dbias)
        for (int64_t i = 0; i < s->n; i++)
            for (int64_t c = 0; c < s->c_out; c++) {
                const float *row = dy + (i * s->c_out + c) * ohw;
                double acc = 0.0;
                for (int64_t p = 0; p < ohw; p++)
                    acc += row[p];
                dbias[c] += (float)acc;
            }
    if (scratch) dpt_alloc_put(ctx->alloc, sc.base, sc.granted);
}

/* ---------------------------------------------------------------- batch norm */

void dpt_cpu_bn_stats(dpt_ctx *ctx, const float *x, int64_t n, int64_t c, int64_t hw, double *sum,
                      double *sumsq)
{
#pragma omp parallel for num_threads(ctx->threads) if (n * c * hw > 65536)
    for (int64_t ch = 0; ch < c; ch++) {
        double s1 = 0.0, s2 = 0.0;
        for (int64_t i = 0; i < n; i++) {
            const float *p = x + (i * c + ch) * hw;
            for (int64_t j = 0; j < hw; j++)
                s1 += p[j], s2 += (double)p[j] * p[j];
        }
        sum[ch] = s1, sumsq[ch] = s2;
    }
}

void dpt_cpu_bn_bwd_stats(dpt_ctx *ctx, const float *x, const float *dy, int64_t n, int64_t c, int64_t hw,
                          const double *mean, double *sum_dy, double *sum_dy_xmu)
{
#pragma omp parallel for num_threads(ctx->threads) if (n * c * hw > 65536)
    for (int64_t ch = 0; ch < c; ch++) {
        double s1 = 0.0, s2 = 0.0, mu = mean[ch];
        for (int64_t i = 0; i < n; i++) {
            const float *px = x + (i * c + ch) * hw, *pd = dy + (i * c + ch) * hw;
            for (int64_t j = 0; j < hw; j++)
                s1 += pd[j], s2 += (double)pd[j] * ((double)px[j] - mu);
        }
        sum_dy[ch] = s1, sum_dy_xmu[ch] = s2;
    }
}

void dpt_cpu_channel_affine(dpt_ctx *ctx, const float *x, float *y, int64_t n, int64_t c, int64_t hw,
                            const float *scale, const float *shift)
{
#pragma omp parallel for num_threads(ctx->threads) if (n * c * hw > 65536)
    for (int64_t i = 0; i < n * c; i++) {
        float a = scale[i % c], b = shift[i % c];
        const float *px = x + i * hw;
        float *py = y + i * hw;
        for (int64_t j = 0; j < hw; j++)
            py[j] = a * px[j] + b;
    }
}

void dpt_cpu_channel_affine2_acc(dpt_ctx *ctx, const float *dy, const float *x, float *dx, int64_t n,
                                 int64_t c, int64_t hw, const float *a, const float *b, const float *k)
{
#pragma omp parallel for num_threads(ctx->threads) if (n * c * hw > 65536)
    for (int64_t i = 0; i < n * c; i++) {
        float ac = a[i % c], bc = b[i % c], kc = k[i % c];
        const float *pd = dy + i * hw, *px = x + i * hw;
        float *pdx = dx + i * hw;
        for (int64_t j = 0; j < hw; j++)
            pdx[j] += ac * pd[j] + bc * px[j] + kc;
    }
}

/* ---------------------------------------------------------------- pooling */

/* The native kernels read and write NCHW; ws holds one int32 per output, the flat index of
 * its maximum in the input plane. */
void dpt_cpu_maxpool_fwd(dpt_ctx *ctx, const dpt_pool_shape *s, const float *x, float *y, void *ws)
{
    DPT_ASSERT(s->layout == DPT_LAYOUT_NCHW, "a blocked tensor in the native pooling");
    int32_t *argmax = ws;
#pragma omp parallel for num_threads(ctx->threads) if (s->n * s->c * s->oh * s->ow > 16384)
    for (int64_t plane = 0; plane < s->n * s->c; plane++) {
        const float *xp = x + plane * s->h * s->w;
        for (int64_t oy = 0; oy < s->oh; oy++)
            for (int64_t ox = 0; ox < s->ow; ox++) {
                float best = -FLT_MAX;
                int32_t where = -1;
                for (int64_t ki = 0; ki < s->kh; ki++) {
                    int64_t iy = oy * s->stride_h - s->pad_h + ki;
                    if (iy < 0 || iy >= s->h) continue;
                    for (int64_t kj = 0; kj < s->kw; kj++) {
                        int64_t ix = ox * s->stride_w - s->pad_w + kj;
                        if (ix < 0 || ix >= s->w) continue;
                        float v = xp[iy * s->w + ix];
                        if (where < 0 || v > best) best = v, where = (int32_t)(iy * s->w + ix);
                    }
                }
                int64_t o = (plane * s->oh + oy) * s->ow + ox;
                y[o] = best;
                argmax[o] = where;
            }
    }
}

void dpt_cpu_maxpool_bwd(dpt_ctx *ctx, const dpt_pool_shape *s, const float *dy, const void *ws, float *dx,
                         bool dx_accumulate)
{
    DPT_ASSERT(s->layout == DPT_LAYOUT_NCHW, "a blocked tensor in the native pooling");
    const int32_t *argmax = ws;
    if (!dx_accumulate) dpt_backend_cpu.fill(ctx, dx, s->n * s->c * s->h * s->w, 0.0f);
    int64_t per_plane = s->oh * s->ow;
    for (int64_t plane = 0; plane < s->n * s->c; plane++)
        for (int64_t o = 0; o < per_plane; o++) {
            int64_t idx = plane * per_plane + o;
            dx[plane * s->h * s->w + argmax[idx]] += dy[idx];
        }
}

void dpt_cpu_avgpool_fwd(dpt_ctx *ctx, const dpt_pool_shape *s, const float *x, float *y)
{
    DPT_ASSERT(s->layout == DPT_LAYOUT_NCHW, "a blocked tensor in the native pooling");
    float inv = 1.0f / (float)(s->kh * s->kw);
#pragma omp parallel for num_threads(ctx->threads) if (s->n * s->c * s->oh * s->ow > 16384)
    for (int64_t plane = 0; plane < s->n * s->c; plane++) {
        const float *xp = x + plane * s->h * s->w;
        for (int64_t oy = 0; oy < s->oh; oy++)
            for (int64_t ox = 0; ox < s->ow; ox++) {
                double acc = 0.0;
                for (int64_t ki = 0; ki < s->kh; ki++) {
                    int64_t iy = oy * s->stride_h - s->pad_h + ki;
                    if (iy < 0 || iy >= s->h) continue;
                    for (int64_t kj = 0; kj < s->kw; kj++) {
                        int64_t ix = ox * s->stride_w - s->pad_w + kj;
                        if (ix >= 0 && ix < s->w) acc += xp[iy * s->w + ix];
                    }
                }
                y[(plane * s->oh + oy) * s->ow + ox] = (float)acc * inv;
            }
    }
}

void dpt_cpu_avgpool_bwd(dpt_ctx *ctx, const dpt_pool_shape *s, const float *dy, float *dx,
                         bool dx_accumulate)
{
    DPT_ASSERT(s->layout == DPT_LAYOUT_NCHW, "a blocked tensor in the native pooling");
    if (!dx_accumulate) dpt_backend_cpu.fill(ctx, dx, s->n * s->c * s->h * s->w, 0.0f);
    float inv = 1.0f / (float)(s->kh * s->kw);
#pragma omp parallel for num_threads(ctx->threads) if (s->n * s->c * s->oh * s->ow > 16384)
    for (int64_t plane = 0; plane < s->n * s->c; plane++) {
        float *dxp = dx + plane * s->h * s->w;
        for (int64_t oy = 0; oy < s->oh; oy++)
            for (int64_t ox = 0; ox < s->ow; ox++) {
                float g = dy[(plane * s->oh + oy) * s->ow + ox] * inv;
                for (int64_t ki = 0; ki < s->kh; ki++) {
                    int64_t iy = oy * s->stride_h - s->pad_h + ki;
                    if (iy < 0 || iy >= s->h) continue;
                    for (int64_t kj = 0; kj < s->kw; kj++) {
                        int64_t ix = ox * s->stride_w - s->pad_w + kj;
                        if (ix >= 0 && ix < s->w) dxp[iy * s->w + ix] += g;
                    }
                }
            }
    }
}
