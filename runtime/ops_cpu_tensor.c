/* ops_cpu_tensor.c: the CPU kernels of the tensor primitives (strided copies, broadcasting,
 * reductions, log-softmax, unary maps, embeddings, layer norm, batched GEMM, the optimizers'
 * list ops): OpenMP loops the compiler vectorises, split by rows only when the work pays for
 * waking threads. Every reduction adds in a fixed order, so results do not depend on the
 * thread count. Both CPU tables (native and oneDNN) take these entries. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "blas.h"
#include "ctx.h"
#include "error.h"
#include "unary_math.h"
#include "vec_math.h"

#define PAR_MIN 32768 /* elements below which a loop stays on one thread */

/* The offset of row r (an index over all dims but the last) along strides. */
static inline int64_t row_offset(int64_t r, int ndim, const int64_t *shape, const int64_t *strides)
{
    int64_t off = 0;
    for (int d = ndim - 2; d >= 0; d--) {
        int64_t i = r % shape[d];
        r /= shape[d];
        off += i * strides[d];
    }
    return off;
}

static int64_t rows_of(int ndim, const int64_t *shape)
{
    int64_t rows = 1;
    for (int d = 0; d < ndim - 1; d++)
        rows *= shape[d];
    return rows;
}

/* Rows (every index but the last) in blocks; each block finds its first row's offsets by
 * division and steps through the rest like an odometer (a permuted patch grid has rows of 7
 * values: a division per dim per row was most of the copy). */
#define COPY_BLOCKS 64
static void cpu_strided_copy(dpt_ctx *ctx, int ndim, const int64_t *shape, const float *src, const int64_t *ss,
                             float *dst, const int64_t *ds, bool accumulate)
{
    if (ndim == 0) {
        dst[0] = accumulate ? dst[0] + src[0] : src[0];
        return;
    }
    int64_t rows = rows_of(ndim, shape), cols = shape[ndim - 1], sc = ss[ndim - 1], dc = ds[ndim - 1];
    int64_t blocks = rows * cols > PAR_MIN ? COPY_BLOCKS : 1;
    if (blocks > rows) blocks = rows;
#pragma omp parallel for num_threads(ctx->threads) if (blocks > 1)
    for (int64_t blk = 0; blk < blocks; blk++) {
        int64_t r0 = rows * blk / blocks, r1 = rows * (blk + 1) / blocks, idx[DPT_MAX_DIMS], so = 0, dof = 0;
        for (int64_t d = ndim - 2, r = r0; d >= 0; d--) {
            idx[d] = r % shape[d], r /= shape[d];
            so += idx[d] * ss[d], dof += idx[d] * ds[d];
        }
        for (int64_t row = r0; row < r1; row++) {
            const float *s = src + so;
            float *d = dst + dof;
            if (accumulate)
                for (int64_t c = 0; c < cols; c++)
                    d[c * dc] += s[c * sc];
            else
                for (int64_t c = 0; c < cols; c++)
                    d[c * dc] = s[c * sc];
            for (int k = ndim - 2; k >= 0; k--) { /* the next row's index */
                so += ss[k], dof += ds[k];
                if (++idx[k] < shape[k]) break;
                so -= ss[k] * shape[k], dof -= ds[k] * shape[k], idx[k] = 0;
            }
        }
    }
}

static inline float apply_binary(dpt_binary_op op, float a, float b)
{
    switch (op) {
    case DPT_BINARY_ADD:
        return a + b;
    case DPT_BINARY_SUB:
        return a - b;
    case DPT_BINARY_MUL:
        return a * b;
    case DPT_BINARY_DIV:
    case DPT_BINARY_COUNT:
        break;
    }
    return a / b;
}

static void cpu_binary(dpt_ctx *ctx, dpt_binary_op op, int ndim, const int64_t *shape, const float *a,
                       const int64_t *as, const float *b, const int64_t *bs, float *out)
{
    if (ndim == 0) {
        out[0] = apply_binary(op, a[0], b[0]);
        return;
    }
    int64_t rows = rows_of(ndim, shape), cols = shape[ndim - 1], ac = as[ndim - 1], bc = bs[ndim - 1];
#pragma omp parallel for num_threads(ctx->threads) if (rows * cols > PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *ar = a + row_offset(r, ndim, shape, as), *br = b + row_offset(r, ndim, shape, bs);
        float *o = out + r * cols;
        switch (op) { /* the op outside the loop, so each loop vectorises */
        case DPT_BINARY_ADD:
            for (int64_t c = 0; c < cols; c++)
                o[c] = ar[c * ac] + br[c * bc];
            break;
        case DPT_BINARY_SUB:
            for (int64_t c = 0; c < cols; c++)
                o[c] = ar[c * ac] - br[c * bc];
            break;
        case DPT_BINARY_MUL:
            for (int64_t c = 0; c < cols; c++)
                o[c] = ar[c * ac] * br[c * bc];
            break;
        case DPT_BINARY_DIV:
        case DPT_BINARY_COUNT:
            for (int64_t c = 0; c < cols; c++)
                o[c] = ar[c * ac] / br[c * bc];
            break;
        }
    }
}

/* dst = alpha * sum of src over the axes where dst's stride is 0. The kept axes are walked in
 * parallel (one dst element each), the reduced ones in index order inside. */
static void cpu_reduce_into(dpt_ctx *ctx, int ndim, const int64_t *shape, const float *src, float *dst,
                            const int64_t *dst_strides, float alpha, bool accumulate)
{
    int64_t src_strides[DPT_MAX_DIMS], kept_shape[DPT_MAX_DIMS], kept_src[DPT_MAX_DIMS], kept_dst[DPT_MAX_DIMS];
    int64_t red_shape[DPT_MAX_DIMS], red_src[DPT_MAX_DIMS];
    int nk = 0, nr = 0;
    int64_t stride = 1;
    for (int d = ndim - 1; d >= 0; d--)
        src_strides[d] = stride, stride *= shape[d];
    for (int d = 0; d < ndim; d++) {
        if (dst_strides[d] != 0 || shape[d] == 1) {
            kept_shape[nk] = shape[d], kept_src[nk] = src_strides[d], kept_dst[nk++] = dst_strides[d];
        } else {
            red_shape[nr] = shape[d], red_src[nr++] = src_strides[d];
        }
    }
    int64_t kept = 1, reduced = 1;
    for (int d = 0; d < nk; d++)
        kept *= kept_shape[d];
    for (int d = 0; d < nr; d++)
        reduced *= red_shape[d];
    /* The innermost axis kept and contiguous on both sides (GQA's repeat_kv, a bias over rows):
     * runs of it summed together, the reduced axes' offsets decoded once; each element still sums
     * its sources in index order from 0, so the bits are the loop's below. */
    if (nk > 0 && kept_src[nk - 1] == 1 && kept_dst[nk - 1] == 1 && kept_shape[nk - 1] >= 8 && reduced > 1 &&
        reduced <= (1 << 16)) {
        enum { RUN = 256 };
        int64_t inner = kept_shape[nk - 1], outer = kept / inner, chunks = (inner + RUN - 1) / RUN;
        int64_t *roff = malloc((size_t)reduced * sizeof *roff);
        if (!roff) dpt_fatal("out of host memory");
        for (int64_t j = 0; j < reduced; j++) {
            int64_t off = 0, q = j;
            for (int d = nr - 1; d >= 0; d--)
                off += (q % red_shape[d]) * red_src[d], q /= red_shape[d];
            roff[j] = off;
        }
#pragma omp parallel for num_threads(ctx->threads) if (kept * reduced > PAR_MIN && outer * chunks > 1)
        for (int64_t u = 0; u < outer * chunks; u++) {
            int64_t k = u / chunks, i0 = (u % chunks) * RUN, n = inner - i0 < RUN ? inner - i0 : RUN;
            int64_t so = i0, dof = i0, rest = k;
            for (int d = nk - 2; d >= 0; d--) {
                int64_t i = rest % kept_shape[d];
                rest /= kept_shape[d];
                so += i * kept_src[d], dof += i * kept_dst[d];
            }
            float acc[RUN] = {0};
            for (int64_t j = 0; j < reduced; j++) {
                const float *sj = src + so + roff[j];
#pragma omp simd
                for (int64_t i = 0; i < n; i++)
                    acc[i] += sj[i];
            }
            float *dj = dst + dof;
            for (int64_t i = 0; i < n; i++)
                dj[i] = accumulate ? dj[i] + alpha * acc[i] : alpha * acc[i];
        }
        free(roff);
        return;
    }
#pragma omp parallel for num_threads(ctx->threads) if (kept * reduced > PAR_MIN && kept > 1)
    for (int64_t k = 0; k < kept; k++) {
        int64_t so = 0, dof = 0, rest = k;
        for (int d = nk - 1; d >= 0; d--) {
            int64_t i = rest % kept_shape[d];
            rest /= kept_shape[d];
            so += i * kept_src[d], dof += i * kept_dst[d];
        }
        float acc = 0.0f;
        for (int64_t j = 0; j < reduced; j++) {
            int64_t off = so, q = j;
            for (int d = nr - 1; d >= 0; d--) {
                int64_t i = q % red_shape[d];
                q /= red_shape[d];
                off += i * red_src[d];
            }
            acc += src[off];
        }
        dst[dof] = accumulate ? dst[dof] + alpha * acc : alpha * acc;
    }
}

static void cpu_rows_sum(dpt_ctx *ctx, const float *x, int64_t rows, int64_t cols, float *y)
{
#pragma omp parallel for num_threads(ctx->threads) if (rows * cols > PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        float acc = 0.0f;
        for (int64_t c = 0; c < cols; c++)
            acc += x[r * cols + c];
        y[r] = acc;
    }
}

static void cpu_rows_max(dpt_ctx *ctx, const float *x, int64_t rows, int64_t cols, float *y, int32_t *idx)
{
#pragma omp parallel for num_threads(ctx->threads) if (rows * cols > PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        int64_t best = 0;
        for (int64_t c = 1; c < cols; c++)
            if (xr[c] > xr[best] || (isnan(xr[c]) && !isnan(xr[best]))) best = c;
        y[r] = xr[best];
        idx[r] = (int32_t)best;
    }
}

static void cpu_rows_max_bwd(dpt_ctx *ctx, const float *dy, const int32_t *idx, int64_t rows, int64_t cols,
                             float *dx)
{
    (void)ctx;
    for (int64_t r = 0; r < rows; r++)
        dx[r * cols + idx[r]] += dy[r];
}

static void cpu_log_softmax_fwd(dpt_ctx *ctx, const float *x, float *y, int64_t rows, int64_t cols)
{
#pragma omp parallel for num_threads(ctx->threads) if (rows * cols > PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float max = xr[0];
        for (int64_t c = 1; c < cols; c++)
            max = fmaxf(max, xr[c]);
        double total = 0.0;
        for (int64_t c = 0; c < cols; c++)
            total += exp((double)xr[c] - max);
        float lse = (float)(max + log(total));
        for (int64_t c = 0; c < cols; c++)
            y[r * cols + c] = xr[c] - lse;
    }
}

static void cpu_log_softmax_bwd(dpt_ctx *ctx, const float *y, const float *dy, float *dx, int64_t rows,
                                int64_t cols)
{
#pragma omp parallel for num_threads(ctx->threads) if (rows * cols > PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *yr = y + r * cols, *dyr = dy + r * cols;
        double total = 0.0;
        for (int64_t c = 0; c < cols; c++)
            total += dyr[c];
        for (int64_t c = 0; c < cols; c++)
            dx[r * cols + c] += dyr[c] - expf(yr[c]) * (float)total;
    }
}

/* ---------------------------------------------------------------- unary maps */

/* In spans the compiler vectorises, one loop per op: sigmoid, SiLU and the exact GELU through
 * vec_math.h's expf and erf (libm's are a call per element: the exact GELU was 46% of a small
 * ViT's step, 6 ns an element forward and 11 backward); the other maps as unary_math.h writes
 * them (the CUDA kernels' formulas, libm's functions: exp keeps libm's overflow to inf and its
 * denormals). NaN stays NaN in every one. */
#define UNARY_SPAN 4096
#define DPT_INV_SQRT_2 0.7071067811865476f

DPT_CLONES static void unary_fwd_span(dpt_unary_op op, const float *restrict x, float *restrict y, int64_t n)
{
    switch (op) {
    case DPT_UNARY_SIGMOID: /* past |x| 87 the exp saturates: 0 < sigmoid < 1e-38 instead of 0 */
        for (int64_t i = 0; i < n; i++)
            y[i] = 1.0f / (1.0f + dpt_vexpf(-x[i]));
        break;
    case DPT_UNARY_SILU:
        for (int64_t i = 0; i < n; i++)
            y[i] = x[i] / (1.0f + dpt_vexpf(-x[i]));
        break;
    case DPT_UNARY_GELU_ERF:
        for (int64_t i = 0; i < n; i++)
            y[i] = 0.5f * x[i] * (1.0f + dpt_verff(x[i] * DPT_INV_SQRT_2));
        break;
    default:
        for (int64_t i = 0; i < n; i++)
            y[i] = dpt_unary_one(op, x[i]);
    }
}

DPT_CLONES static void unary_bwd_span(dpt_unary_op op, const float *restrict x, const float *restrict y,
                                      const float *restrict dy, float *restrict dx, int64_t n)
{
    switch (op) {
    case DPT_UNARY_SILU:
        for (int64_t i = 0; i < n; i++) {
            float s = 1.0f / (1.0f + dpt_vexpf(-x[i]));
            dx[i] += dy[i] * (s * (1.0f + x[i] * (1.0f - s)));
        }
        break;
    case DPT_UNARY_GELU_ERF:
        for (int64_t i = 0; i < n; i++) {
            float v = x[i];
            dx[i] += dy[i] * (0.5f * (1.0f + dpt_verff(v * DPT_INV_SQRT_2)) +
                              v * DPT_INV_SQRT_2PI * dpt_vexpf(-0.5f * v * v));
        }
        break;
    default:
        for (int64_t i = 0; i < n; i++)
            dx[i] += dy[i] * dpt_unary_grad(op, x[i], y[i]);
    }
}

static void cpu_unary_fwd(dpt_ctx *ctx, dpt_unary_op op, int64_t n, const float *x, float *y)
{
    int64_t spans = (n + UNARY_SPAN - 1) / UNARY_SPAN;
#pragma omp parallel for num_threads(ctx->threads) if (n > PAR_MIN)
    for (int64_t s = 0; s < spans; s++) {
        int64_t at = s * UNARY_SPAN, len = n - at < UNARY_SPAN ? n - at : UNARY_SPAN;
        unary_fwd_span(op, x + at, y + at, len);
    }
}

static void cpu_unary_bwd(dpt_ctx *ctx, dpt_unary_op op, int64_t n, const float *x, const float *y, const float *dy,
                          float *dx)
{
    int64_t spans = (n + UNARY_SPAN - 1) / UNARY_SPAN;
#pragma omp parallel for num_threads(ctx->threads) if (n > PAR_MIN)
    for (int64_t s = 0; s < spans; s++) {
        int64_t at = s * UNARY_SPAN, len = n - at < UNARY_SPAN ? n - at : UNARY_SPAN;
        unary_bwd_span(op, x + at, y + at, dy + at, dx + at, len);
    }
}

/* ---------------------------------------------------------------- embeddings */

static void cpu_embedding_fwd(dpt_ctx *ctx, const float *weight, int64_t vocab, int64_t dim, const int32_t *ids,
                              int64_t n, float *out)
{
#pragma omp parallel for num_threads(ctx->threads) if (n * dim > PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float *o = out + i * dim;
        if (ids[i] < 0 || ids[i] >= vocab) {
            for (int64_t d = 0; d < dim; d++)
                o[d] = NAN;
            continue;
        }
        memcpy(o, weight + (int64_t)ids[i] * dim, (size_t)dim * sizeof *o);
    }
}

/* Each thread owns a band of columns and walks every id in order: the same sums in the same
 * order whatever the thread count (no atomics, PyTorch's deterministic embedding backward). */
static void cpu_embedding_bwd(dpt_ctx *ctx, const int32_t *ids, int64_t n, const float *dy, int64_t vocab,
                              int64_t dim, float *dweight)
{
    const int64_t band = 64;
    int64_t bands = (dim + band - 1) / band;
#pragma omp parallel for num_threads(ctx->threads) if (n * dim > PAR_MIN && bands > 1)
    for (int64_t b = 0; b < bands; b++) {
        int64_t lo = b * band, hi = lo + band < dim ? lo + band : dim;
        for (int64_t i = 0; i < n; i++) {
            if (ids[i] < 0 || ids[i] >= vocab) continue;
            float *g = dweight + (int64_t)ids[i] * dim;
            const float *d = dy + i * dim;
            for (int64_t c = lo; c < hi; c++)
                g[c] += d[c];
        }
    }
}

/* ---------------------------------------------------------------- layer norm */

/* A row's statistics in float64 (two passes: the mean, then the squared deviations), summed in
 * vector lanes (omp simd reductions: the lanes' order is the clone's, the same on every run and
 * thread count; a sequential float64 sum was latency-bound, 7.5% of the fortunes GPT's step). */
DPT_CLONES static void layernorm_row_fwd(const float *restrict xr, int64_t dim, const float *restrict w,
                                         const float *restrict b, float eps, float *restrict yr, float *mean,
                                         float *rstd)
{
    double s = 0.0, ss = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < dim; c++)
        s += xr[c];
    double mu = s / (double)dim;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < dim; c++)
        ss += ((double)xr[c] - mu) * ((double)xr[c] - mu);
    float m = (float)mu, rs = (float)(1.0 / sqrt(ss / (double)dim + eps));
    *mean = m, *rstd = rs;
    if (w && b)
#pragma omp simd
        for (int64_t c = 0; c < dim; c++)
            yr[c] = (xr[c] - m) * rs * w[c] + b[c];
    else
        for (int64_t c = 0; c < dim; c++)
            yr[c] = (xr[c] - m) * rs * (w ? w[c] : 1.0f) + (b ? b[c] : 0.0f);
}

static void cpu_layernorm_fwd(dpt_ctx *ctx, const float *x, int64_t rows, int64_t dim, const float *w, const float *b,
                              float eps, float *y, float *mean, float *rstd)
{
#pragma omp parallel for num_threads(ctx->threads) if (rows * dim > PAR_MIN)
    for (int64_t r = 0; r < rows; r++)
        layernorm_row_fwd(x + r * dim, dim, w, b, eps, y + r * dim, mean + r, rstd + r);
}

/* dx (+)= rstd (g - mean(g) - xhat mean(g xhat)) of one row, g = dy w; the two sums in float64
 * lanes as the forward's */
DPT_CLONES static void layernorm_row_dx(const float *restrict xr, const float *restrict dyr, int64_t dim,
                                        const float *restrict w, float m, float rs, float *restrict dxr)
{
    double sum_g = 0.0, sum_gx = 0.0;
#pragma omp simd reduction(+ : sum_g, sum_gx)
    for (int64_t c = 0; c < dim; c++) {
        float g = dyr[c] * (w ? w[c] : 1.0f), xh = (xr[c] - m) * rs;
        sum_g += g, sum_gx += (double)g * xh;
    }
    float mg = (float)(sum_g / (double)dim), mgx = (float)(sum_gx / (double)dim);
#pragma omp simd
    for (int64_t c = 0; c < dim; c++) {
        float g = dyr[c] * (w ? w[c] : 1.0f), xh = (xr[c] - m) * rs;
        dxr[c] += rs * (g - mg - xh * mgx);
    }
}

/* dw, db (+)= the sums over rows, in row order, of columns c0 .. c0 + n (n <= 16) */
DPT_CLONES static void layernorm_wgrad_block(const float *x, const float *dy, int64_t rows, int64_t dim, int64_t c0,
                                             int64_t n, const float *mean, const float *rstd, float *dw, float *db)
{
    float gw[16] = {0}, gb[16] = {0};
    for (int64_t r = 0; r < rows; r++) {
        const float *d = dy + r * dim + c0, *xr = x + r * dim + c0;
        float m = mean[r], rs = rstd[r];
#pragma omp simd
        for (int64_t k = 0; k < n; k++) {
            gw[k] += d[k] * (xr[k] - m) * rs;
            gb[k] += d[k];
        }
    }
    for (int64_t k = 0; k < n; k++) {
        if (dw) dw[c0 + k] += gw[k];
        if (db) db[c0 + k] += gb[k];
    }
}

static void cpu_layernorm_bwd(dpt_ctx *ctx, const float *x, const float *dy, int64_t rows, int64_t dim,
                              const float *w, const float *mean, const float *rstd, float *dx, float *dw, float *db)
{
    if (dx) {
#pragma omp parallel for num_threads(ctx->threads) if (rows * dim > PAR_MIN)
        for (int64_t r = 0; r < rows; r++)
            layernorm_row_dx(x + r * dim, dy + r * dim, dim, w, mean[r], rstd[r], dx + r * dim);
    }
    if (!dw && !db) return;
    /* the weights' gradients: each column summed over the rows in order, 16 columns at a time
     * (one vector of them per row: rows read along, not down a column) */
#pragma omp parallel for num_threads(ctx->threads) if (rows * dim > PAR_MIN)
    for (int64_t c0 = 0; c0 < dim; c0 += 16)
        layernorm_wgrad_block(x, dy, rows, dim, c0, dim - c0 < 16 ? dim - c0 : 16, mean, rstd, dw, db);
}

/* ---------------------------------------------------------------- RMS norm */

/* y = x rstd w, rstd = 1 / sqrt(mean(x^2) + eps): the sum of squares in float64 lanes, as layer
 * norm's. */
DPT_CLONES static void rmsnorm_row_fwd(const float *restrict xr, int64_t dim, const float *restrict w, float eps,
                                       float *restrict yr, float *rstd)
{
    double ss = 0.0;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < dim; c++)
        ss += (double)xr[c] * (double)xr[c];
    float rs = (float)(1.0 / sqrt(ss / (double)dim + eps));
    *rstd = rs;
    if (w)
#pragma omp simd
        for (int64_t c = 0; c < dim; c++)
            yr[c] = xr[c] * rs * w[c];
    else
#pragma omp simd
        for (int64_t c = 0; c < dim; c++)
            yr[c] = xr[c] * rs;
}

static void cpu_rmsnorm_fwd(dpt_ctx *ctx, const float *x, int64_t rows, int64_t dim, const float *w, float eps, float *y,
                            float *rstd)
{
#pragma omp parallel for num_threads(ctx->threads) if (rows * dim > PAR_MIN)
    for (int64_t r = 0; r < rows; r++)
        rmsnorm_row_fwd(x + r * dim, dim, w, eps, y + r * dim, rstd + r);
}

/* dx (+)= rstd (g - xhat mean(g xhat)) of one row, g = dy w, xhat = x rstd (layer norm's without
 * the mean's term) */
DPT_CLONES static void rmsnorm_row_dx(const float *restrict xr, const float *restrict dyr, int64_t dim,
                                      const float *restrict w, float rs, float *restrict dxr)
{
    double sum_gx = 0.0;
#pragma omp simd reduction(+ : sum_gx)
    for (int64_t c = 0; c < dim; c++)
        sum_gx += (double)(dyr[c] * (w ? w[c] : 1.0f)) * (xr[c] * rs);
    float mgx = (float)(sum_gx / (double)dim);
#pragma omp simd
    for (int64_t c = 0; c < dim; c++)
        dxr[c] += rs * (dyr[c] * (w ? w[c] : 1.0f) - xr[c] * rs * mgx);
}

/* dw (+)= the sums over rows, in row order, of dy xhat for columns c0 .. c0 + n (n <= 16) */
DPT_CLONES static void rmsnorm_wgrad_block(const float *x, const float *dy, int64_t rows, int64_t dim, int64_t c0,
                                           int64_t n, const float *rstd, float *dw)
{
    float gw[16] = {0};
    for (int64_t r = 0; r < rows; r++) {
        const float *d = dy + r * dim + c0, *xr = x + r * dim + c0;
        float rs = rstd[r];
#pragma omp simd
        for (int64_t k = 0; k < n; k++)
            gw[k] += d[k] * xr[k] * rs;
    }
    for (int64_t k = 0; k < n; k++)
        dw[c0 + k] += gw[k];
}

static void cpu_rmsnorm_bwd(dpt_ctx *ctx, const float *x, const float *dy, int64_t rows, int64_t dim, const float *w,
                            const float *rstd, float *dx, float *dw)
{
    if (dx) {
#pragma omp parallel for num_threads(ctx->threads) if (rows * dim > PAR_MIN)
        for (int64_t r = 0; r < rows; r++)
            rmsnorm_row_dx(x + r * dim, dy + r * dim, dim, w, rstd[r], dx + r * dim);
    }
    if (!dw) return;
#pragma omp parallel for num_threads(ctx->threads) if (rows * dim > PAR_MIN)
    for (int64_t c0 = 0; c0 < dim; c0 += 16)
        rmsnorm_wgrad_block(x, dy, rows, dim, c0, dim - c0 < 16 ? dim - c0 : 16, rstd, dw);
}

/* ---------------------------------------------------------------- rotary embeddings */

static void cpu_rotary(dpt_ctx *ctx, const float *x, int64_t B, int64_t T, int64_t H, int64_t hs, const float *cos,
                       const float *sin, int64_t pos, bool inverse, float *out, bool accumulate)
{
    int64_t half = hs / 2;
    float sign = inverse ? -1.0f : 1.0f;
#pragma omp parallel for num_threads(ctx->threads) if (B * T * H * hs > PAR_MIN)
    for (int64_t bt = 0; bt < B * T; bt++) {
        const float *c = cos + (pos + bt % T) * half, *sn = sin + (pos + bt % T) * half;
        for (int64_t h = 0; h < H; h++) {
            const float *xa = x + (bt * H + h) * hs, *xb = xa + half;
            float *ya = out + (bt * H + h) * hs, *yb = ya + half;
#pragma omp simd
            for (int64_t i = 0; i < half; i++) {
                float s = sign * sn[i], a = xa[i] * c[i] - xb[i] * s, b = xb[i] * c[i] + xa[i] * s;
                ya[i] = accumulate ? ya[i] + a : a;
                yb[i] = accumulate ? yb[i] + b : b;
            }
        }
    }
}

/* ---------------------------------------------------------------- attention */

/* Query row i of head h of sequence b sees keys 0..i (causal) or all T. The forward keeps each
 * row's log-sum-exp L_i of its scaled scores s_ij = q_i.k_j / sqrt(hs); backward recomputes
 * p_ij = exp(s_ij - L_i) from it (no (T, T) matrix is ever stored), with D_i = dy_i.y_i:
 *   dv_j += p_ij dy_i,  ds_ij = p_ij (dy_i.v_j - D_i) / sqrt(hs),  dq_i += ds_ij k_j,  dk_j += ds_ij q_i.
 * Sums run in a fixed order per row (the SIMD width's, not the thread count's). */
/* Tiles of ATTN_TILE query rows: the scores of a tile against the keys it sees, S = scale Q K^T
 * (rows x n), are one small GEMM, softmax-ed in place, and O = P V another; backward recomputes
 * P from the kept log-sum-exp and runs dV += P^T dO, dP = dO V^T, dS = P (dP - D) scale,
 * dQ += dS K and dK += dS^T Q as GEMMs. Each thread holds at most 2 x ATTN_TILE x T floats: the
 * memory grows with T, never with T^2. A tile's GEMMs run on the thread that owns it (CBLAS
 * inside a parallel region is single-threaded), so the bits do not depend on the thread count. */
#define ATTN_TILE 64

static void sgemm_rm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                     const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (blasint)M, (blasint)N,
                (blasint)K, alpha, A, (blasint)lda, B, (blasint)ldb, beta, C, (blasint)ldc);
}

/* Rows of S (rows x n, from query i0): masked past each row's own position when causal, the
 * softmax taken (forward, each row's log-sum-exp into lse) or recomputed from lse (backward). */
DPT_CLONES static void attn_softmax_rows(float *S, int64_t rows, int64_t n, int64_t i0, bool causal, float *lse,
                                         bool forward)
{
    for (int64_t r = 0; r < rows; r++)
        dpt_attn_softmax_row(S + r * n, n, causal ? i0 + r + 1 : n, lse + r, forward);
}

/* dS = P (dP - D) scale over a tile, D_r = dy_r . y_r */
DPT_CLONES static void attn_dscores(const float *P, float *dP, int64_t rows, int64_t n, const float *dy, const float *y,
                                   int64_t ld, int64_t hs, float scale)
{
    for (int64_t r = 0; r < rows; r++) {
        float D = 0.0f;
#pragma omp simd reduction(+ : D)
        for (int64_t c = 0; c < hs; c++)
            D += dy[r * ld + c] * y[r * ld + c];
        const float *p = P + r * n;
        float *d = dP + r * n;
#pragma omp simd
        for (int64_t j = 0; j < n; j++)
            d[j] = p[j] * (d[j] - D) * scale;
    }
}

static void cpu_attention_fwd(dpt_ctx *ctx, const float *qkv, int64_t B, int64_t T, int64_t H, int64_t hs, bool causal,
                              float *y, float *lse)
{
    int64_t C = H * hs, C3 = 3 * C, tiles = (T + ATTN_TILE - 1) / ATTN_TILE, tasks = B * H * tiles;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel num_threads(ctx->threads)
    {
        float *S = malloc((size_t)ATTN_TILE * (size_t)T * sizeof *S);
        if (!S) dpt_fatal("out of host memory for attention scores (%lld floats)", (long long)(ATTN_TILE * T));
        /* a causal tile's cost grows with its position: hand them out one at a time */
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < tasks; task++) {
            int64_t bh = task / tiles, b = bh / H, h = bh % H, i0 = task % tiles * ATTN_TILE;
            int64_t rows = T - i0 < ATTN_TILE ? T - i0 : ATTN_TILE, n = causal ? i0 + rows : T;
            const float *q = qkv + (b * T + i0) * C3 + h * hs, *k = qkv + b * T * C3 + C + h * hs, *v = k + C;
            sgemm_rm(false, true, rows, n, hs, scale, q, C3, k, C3, 0.0f, S, n);
            attn_softmax_rows(S, rows, n, i0, causal, lse + bh * T + i0, true);
            sgemm_rm(false, false, rows, hs, n, 1.0f, S, n, v, C3, 0.0f, y + (b * T + i0) * C + h * hs, C);
        }
        free(S);
    }
}

static void cpu_attention_bwd(dpt_ctx *ctx, const float *qkv, const float *y, const float *dy, const float *lse,
                              int64_t B, int64_t T, int64_t H, int64_t hs, bool causal, float *scratch, float *dqkv,
                              bool accumulate)
{
    int64_t C = H * hs, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    (void)scratch;
    if (!accumulate) dpt_backend_cpu.fill(ctx, dqkv, B * T * C3, 0.0f); /* the tiles below add into it */
    /* one (b, h) per task: its dk and dv rows are its own, so nothing is shared */
#pragma omp parallel num_threads(ctx->threads)
    {
        float *P = malloc(2 * (size_t)ATTN_TILE * (size_t)T * sizeof *P), *dS = P + ATTN_TILE * T;
        if (!P) dpt_fatal("out of host memory for attention scores (%lld floats)", (long long)(2 * ATTN_TILE * T));
#pragma omp for schedule(dynamic, 1)
        for (int64_t bh = 0; bh < B * H; bh++) {
            int64_t b = bh / H, h = bh % H;
            const float *k = qkv + b * T * C3 + C + h * hs, *v = k + C;
            float *dk = dqkv + b * T * C3 + C + h * hs, *dv = dk + C;
            for (int64_t i0 = 0; i0 < T; i0 += ATTN_TILE) {
                int64_t rows = T - i0 < ATTN_TILE ? T - i0 : ATTN_TILE, n = causal ? i0 + rows : T;
                const float *q = qkv + (b * T + i0) * C3 + h * hs;
                const float *dyt = dy + (b * T + i0) * C + h * hs, *yt = y + (b * T + i0) * C + h * hs;
                float *dq = dqkv + (b * T + i0) * C3 + h * hs;
                sgemm_rm(false, true, rows, n, hs, scale, q, C3, k, C3, 0.0f, P, n);
                attn_softmax_rows(P, rows, n, i0, causal, (float *)lse + bh * T + i0, false);
                sgemm_rm(true, false, n, hs, rows, 1.0f, P, n, dyt, C, 1.0f, dv, C3); /* dV += P^T dO */
                sgemm_rm(false, true, rows, n, hs, 1.0f, dyt, C, v, C3, 0.0f, dS, n); /* dP = dO V^T */
                attn_dscores(P, dS, rows, n, dyt, yt, C, hs, scale);
                sgemm_rm(false, false, rows, hs, n, 1.0f, dS, n, k, C3, 1.0f, dq, C3); /* dQ += dS K */
                sgemm_rm(true, false, n, hs, rows, 1.0f, dS, n, q, C3, 1.0f, dk, C3);  /* dK += dS^T Q */
            }
        }
        free(P);
    }
}

/* ---------------------------------------------------------------- batched GEMM, list ops */

/* One GEMM per batch element through the table's own GEMM (OpenBLAS, or oneDNN's bf16 matmul
 * under precision = bf16), each spreading over the threads. */
static void cpu_gemm_batched(dpt_ctx *ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                             const float *A, int64_t lda, int64_t sa, const float *B, int64_t ldb, int64_t sb,
                             float beta, float *C, int64_t ldc, int64_t sc, int64_t batch)
{
    for (int64_t i = 0; i < batch; i++)
        ctx->be->gemm(ctx, ta, tb, M, N, K, alpha, A + i * sa, lda, B + i * sb, ldb, beta, C + i * sc, ldc);
}

static void cpu_axpby_multi(dpt_ctx *ctx, const dpt_tensor_list *l, float alpha, float beta)
{
    for (int t = 0; t < l->count; t++) {
        float *y = l->ptr[t * l->width], *x = l->ptr[t * l->width + 1];
        int64_t n = l->numel[t];
        if (beta == 0.0f) {
#pragma omp parallel for num_threads(ctx->threads) if (n > PAR_MIN)
            for (int64_t i = 0; i < n; i++)
                y[i] = alpha * x[i];
        } else {
#pragma omp parallel for num_threads(ctx->threads) if (n > PAR_MIN)
            for (int64_t i = 0; i < n; i++)
                y[i] = alpha * x[i] + beta * y[i];
        }
    }
}

static void cpu_unary_multi(dpt_ctx *ctx, const dpt_tensor_list *l, dpt_unary_op op)
{
    for (int t = 0; t < l->count; t++)
        cpu_unary_fwd(ctx, op, l->numel[t], l->ptr[t * l->width + 1], l->ptr[t * l->width]);
}

void dpt_cpu_tensor_entries(dpt_backend *be)
{
    be->strided_copy = cpu_strided_copy;
    be->binary = cpu_binary;
    be->reduce_into = cpu_reduce_into;
    be->rows_sum = cpu_rows_sum;
    be->rows_max = cpu_rows_max;
    be->rows_max_bwd = cpu_rows_max_bwd;
    be->log_softmax_fwd = cpu_log_softmax_fwd;
    be->log_softmax_bwd = cpu_log_softmax_bwd;
    be->unary_fwd = cpu_unary_fwd;
    be->unary_bwd = cpu_unary_bwd;
    be->embedding_fwd = cpu_embedding_fwd;
    be->embedding_bwd = cpu_embedding_bwd;
    be->layernorm_fwd = cpu_layernorm_fwd;
    be->layernorm_bwd = cpu_layernorm_bwd;
    be->rmsnorm_fwd = cpu_rmsnorm_fwd;
    be->rmsnorm_bwd = cpu_rmsnorm_bwd;
    be->rotary = cpu_rotary;
    be->attention_fwd = cpu_attention_fwd;
    be->attention_bwd = cpu_attention_bwd;
    be->gemm_batched = cpu_gemm_batched;
    be->axpby_multi = cpu_axpby_multi;
    be->unary_multi = cpu_unary_multi;
}
