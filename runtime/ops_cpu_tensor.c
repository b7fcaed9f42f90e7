/* ops_cpu_tensor.c: the CPU kernels of the tensor primitives (strided copies, broadcasting,
 * reductions, log-softmax, unary maps, embeddings, layer norm, batched GEMM, the optimizers'
 * list ops): OpenMP loops the compiler vectorises, split by rows only when the work pays for
 * waking threads. Every reduction adds in a fixed order, so results do not depend on the
 * thread count. Both CPU tables (native and oneDNN) take these entries. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "ctx.h"
#include "error.h"
#include "unary_math.h"

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

static void cpu_strided_copy(dpt_ctx *ctx, int ndim, const int64_t *shape, const float *src, const int64_t *ss,
                             float *dst, const int64_t *ds, bool accumulate)
{
    if (ndim == 0) {
        dst[0] = accumulate ? dst[0] + src[0] : src[0];
        return;
    }
    int64_t rows = rows_of(ndim, shape), cols = shape[ndim - 1], sc = ss[ndim - 1], dc = ds[ndim - 1];
#pragma omp parallel for num_threads(ctx->threads) if (rows * cols > PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *s = src + row_offset(r, ndim, shape, ss);
        float *d = dst + row_offset(r, ndim, shape, ds);
        if (accumulate)
            for (int64_t c = 0; c < cols; c++)
                d[c * dc] += s[c * sc];
        else
            for (int64_t c = 0; c < cols; c++)
                d[c * dc] = s[c * sc];
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

static void cpu_unary_fwd(dpt_ctx *ctx, dpt_unary_op op, int64_t n, const float *x, float *y)
{
#pragma omp parallel for num_threads(ctx->threads) if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        y[i] = dpt_unary_one(op, x[i]);
}

static void cpu_unary_bwd(dpt_ctx *ctx, dpt_unary_op op, int64_t n, const float *x, const float *y, const float *dy,
                          float *dx)
{
#pragma omp parallel for num_threads(ctx->threads) if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        dx[i] += dy[i] * dpt_unary_grad(op, x[i], y[i]);
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

static void cpu_layernorm_fwd(dpt_ctx *ctx, const float *x, int64_t rows, int64_t dim, const float *w, const float *b,
                              float eps, float *y, float *mean, float *rstd)
{
#pragma omp parallel for num_threads(ctx->threads) if (rows * dim > PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * dim;
        double s = 0.0, ss = 0.0;
        for (int64_t c = 0; c < dim; c++)
            s += xr[c];
        double mu = s / (double)dim;
        for (int64_t c = 0; c < dim; c++)
            ss += ((double)xr[c] - mu) * ((double)xr[c] - mu);
        float m = (float)mu, rs = (float)(1.0 / sqrt(ss / (double)dim + eps));
        mean[r] = m, rstd[r] = rs;
        float *yr = y + r * dim;
        for (int64_t c = 0; c < dim; c++) {
            float v = (xr[c] - m) * rs;
            yr[c] = v * (w ? w[c] : 1.0f) + (b ? b[c] : 0.0f);
        }
    }
}

static void cpu_layernorm_bwd(dpt_ctx *ctx, const float *x, const float *dy, int64_t rows, int64_t dim,
                              const float *w, const float *mean, const float *rstd, float *dx, float *dw, float *db)
{
    if (dx) {
#pragma omp parallel for num_threads(ctx->threads) if (rows * dim > PAR_MIN)
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = x + r * dim, *dyr = dy + r * dim;
            float m = mean[r], rs = rstd[r];
            double sum_g = 0.0, sum_gx = 0.0; /* g = dy * w, over the row; and g * xhat */
            for (int64_t c = 0; c < dim; c++) {
                float g = dyr[c] * (w ? w[c] : 1.0f), xh = (xr[c] - m) * rs;
                sum_g += g, sum_gx += (double)g * xh;
            }
            float mg = (float)(sum_g / (double)dim), mgx = (float)(sum_gx / (double)dim);
            for (int64_t c = 0; c < dim; c++) {
                float g = dyr[c] * (w ? w[c] : 1.0f), xh = (xr[c] - m) * rs;
                dx[r * dim + c] += rs * (g - mg - xh * mgx);
            }
        }
    }
    if (!dw && !db) return;
    /* the weights' gradients: each column summed over the rows in order */
#pragma omp parallel for num_threads(ctx->threads) if (rows * dim > PAR_MIN)
    for (int64_t c = 0; c < dim; c++) {
        float gw = 0.0f, gb = 0.0f;
        for (int64_t r = 0; r < rows; r++) {
            float d = dy[r * dim + c];
            gw += d * (x[r * dim + c] - mean[r]) * rstd[r];
            gb += d;
        }
        if (dw) dw[c] += gw;
        if (db) db[c] += gb;
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
    be->gemm_batched = cpu_gemm_batched;
    be->axpby_multi = cpu_axpby_multi;
    be->unary_multi = cpu_unary_multi;
}
