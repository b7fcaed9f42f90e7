/* cuda_tensor.cu: the CUDA kernels of the tensor primitives (strided copies, broadcasting,
 * reductions, log-softmax, unary maps, embeddings, layer norm, batched GEMM on cuBLAS, the
 * optimizers' list ops). Every reduction adds in a fixed order with no atomics, so a run gives
 * the same bits every time, as the CPU kernels do. Compiled here; it has not run on a GPU yet. */
#include <math.h>
#include <string.h>

#include "cuda_internal.h"
extern "C" {
#include "unary_math.h"
}

/* shapes and strides by value (at most DPT_MAX_DIMS dims) */
typedef struct nd {
    int ndim;
    int64_t shape[DPT_MAX_DIMS], a[DPT_MAX_DIMS], b[DPT_MAX_DIMS];
} nd;

static nd make_nd(int ndim, const int64_t *shape, const int64_t *a, const int64_t *b)
{
    nd v;
    memset(&v, 0, sizeof v);
    v.ndim = ndim;
    for (int d = 0; d < ndim; d++)
        v.shape[d] = shape[d], v.a[d] = a ? a[d] : 0, v.b[d] = b ? b[d] : 0;
    return v;
}

static int64_t numel_of(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    return n;
}

/* the offsets along strides a and b of linear index i over shape */
static __device__ __forceinline__ void offsets(const nd &v, int64_t i, int64_t *oa, int64_t *ob)
{
    int64_t a = 0, b = 0;
    for (int d = v.ndim - 1; d >= 0; d--) {
        int64_t k = i % v.shape[d];
        i /= v.shape[d];
        a += k * v.a[d], b += k * v.b[d];
    }
    *oa = a, *ob = b;
}

/* ---------------------------------------------------------------- kernels */

__global__ void strided_copy_kernel(nd v, int64_t n, const float *src, float *dst, bool accumulate)
{
    GRID_STRIDE(i, n)
    {
        int64_t s, d;
        offsets(v, i, &s, &d);
        dst[d] = accumulate ? dst[d] + src[s] : src[s];
    }
}

__global__ void binary_kernel(nd v, int64_t n, dpt_binary_op op, const float *a, const float *b, float *out)
{
    GRID_STRIDE(i, n)
    {
        int64_t oa, ob;
        offsets(v, i, &oa, &ob);
        float x = a[oa], y = b[ob];
        out[i] = op == DPT_BINARY_ADD ? x + y : op == DPT_BINARY_SUB ? x - y : op == DPT_BINARY_MUL ? x * y : x / y;
    }
}

/* one thread per kept element, its sources in index order. v.shape: kept axes then reduced
 * ones; v.a: their source strides; v.b: the kept axes' destination strides. */
__global__ void reduce_into_kernel(nd v, int nk, int64_t kept, int64_t reduced, const float *src, float *dst,
                                   float alpha, bool accumulate)
{
    GRID_STRIDE(k, kept)
    {
        int64_t so = 0, dof = 0, rest = k;
        for (int d = nk - 1; d >= 0; d--) {
            int64_t i = rest % v.shape[d];
            rest /= v.shape[d];
            so += i * v.a[d], dof += i * v.b[d];
        }
        float acc = 0.0f;
        for (int64_t j = 0; j < reduced; j++) {
            int64_t off = so, q = j;
            for (int d = v.ndim - 1; d >= nk; d--) {
                int64_t i = q % v.shape[d];
                q /= v.shape[d];
                off += i * v.a[d];
            }
            acc += src[off];
        }
        dst[dof] = accumulate ? dst[dof] + alpha * acc : alpha * acc;
    }
}

__global__ void rows_sum_kernel(const float *x, int64_t rows, int64_t cols, float *y)
{
    GRID_STRIDE(r, rows)
    {
        float acc = 0.0f;
        for (int64_t c = 0; c < cols; c++)
            acc += x[r * cols + c];
        y[r] = acc;
    }
}

__global__ void rows_max_kernel(const float *x, int64_t rows, int64_t cols, float *y, int32_t *idx)
{
    GRID_STRIDE(r, rows)
    {
        const float *xr = x + r * cols;
        int64_t best = 0;
        for (int64_t c = 1; c < cols; c++)
            if (xr[c] > xr[best] || (isnan(xr[c]) && !isnan(xr[best]))) best = c;
        y[r] = xr[best];
        idx[r] = (int32_t)best;
    }
}

__global__ void rows_max_bwd_kernel(const float *dy, const int32_t *idx, int64_t rows, int64_t cols, float *dx)
{
    GRID_STRIDE(r, rows) dx[r * cols + idx[r]] += dy[r];
}

__global__ void log_softmax_fwd_kernel(const float *x, float *y, int64_t rows, int64_t cols)
{
    GRID_STRIDE(r, rows)
    {
        const float *xr = x + r * cols;
        float m = xr[0];
        for (int64_t c = 1; c < cols; c++)
            m = fmaxf(m, xr[c]);
        double total = 0.0;
        for (int64_t c = 0; c < cols; c++)
            total += exp((double)xr[c] - m);
        float lse = (float)(m + log(total));
        for (int64_t c = 0; c < cols; c++)
            y[r * cols + c] = xr[c] - lse;
    }
}

__global__ void log_softmax_bwd_kernel(const float *y, const float *dy, float *dx, int64_t rows, int64_t cols)
{
    GRID_STRIDE(r, rows)
    {
        double total = 0.0;
        for (int64_t c = 0; c < cols; c++)
            total += dy[r * cols + c];
        for (int64_t c = 0; c < cols; c++)
            dx[r * cols + c] += dy[r * cols + c] - expf(y[r * cols + c]) * (float)total;
    }
}

__global__ void unary_fwd_kernel(dpt_unary_op op, int64_t n, const float *x, float *y)
{
    GRID_STRIDE(i, n) y[i] = dpt_unary_one(op, x[i]);
}

__global__ void unary_bwd_kernel(dpt_unary_op op, int64_t n, const float *x, const float *y, const float *dy,
                                 float *dx)
{
    GRID_STRIDE(i, n) dx[i] += dy[i] * dpt_unary_grad(op, x[i], y[i]);
}

__global__ void embedding_fwd_kernel(const float *w, int64_t vocab, int64_t dim, const int32_t *ids, int64_t n,
                                     float *out)
{
    GRID_STRIDE(i, n * dim)
    {
        int64_t row = i / dim, d = i % dim;
        int32_t id = ids[row];
        out[i] = id >= 0 && id < vocab ? w[(int64_t)id * dim + d] : NAN;
    }
}

/* one thread per column of the table: every id's row in order (no atomics) */
__global__ void embedding_bwd_kernel(const int32_t *ids, int64_t n, const float *dy, int64_t vocab, int64_t dim,
                                     float *dw)
{
    GRID_STRIDE(d, dim)
    {
        for (int64_t i = 0; i < n; i++) {
            int32_t id = ids[i];
            if (id >= 0 && id < vocab) dw[(int64_t)id * dim + d] += dy[i * dim + d];
        }
    }
}

__global__ void layernorm_fwd_kernel(const float *x, int64_t rows, int64_t dim, const float *w, const float *b,
                                     float eps, float *y, float *mean, float *rstd)
{
    GRID_STRIDE(r, rows)
    {
        const float *xr = x + r * dim;
        double s = 0.0, ss = 0.0;
        for (int64_t c = 0; c < dim; c++)
            s += xr[c];
        double mu = s / (double)dim;
        for (int64_t c = 0; c < dim; c++)
            ss += ((double)xr[c] - mu) * ((double)xr[c] - mu);
        float m = (float)mu, rs = (float)(1.0 / sqrt(ss / (double)dim + eps));
        mean[r] = m, rstd[r] = rs;
        for (int64_t c = 0; c < dim; c++)
            y[r * dim + c] = (xr[c] - m) * rs * (w ? w[c] : 1.0f) + (b ? b[c] : 0.0f);
    }
}

__global__ void layernorm_dx_kernel(const float *x, const float *dy, int64_t rows, int64_t dim, const float *w,
                                    const float *mean, const float *rstd, float *dx)
{
    GRID_STRIDE(r, rows)
    {
        float m = mean[r], rs = rstd[r];
        double sg = 0.0, sgx = 0.0;
        for (int64_t c = 0; c < dim; c++) {
            float g = dy[r * dim + c] * (w ? w[c] : 1.0f), xh = (x[r * dim + c] - m) * rs;
            sg += g, sgx += (double)g * xh;
        }
        float mg = (float)(sg / (double)dim), mgx = (float)(sgx / (double)dim);
        for (int64_t c = 0; c < dim; c++) {
            float g = dy[r * dim + c] * (w ? w[c] : 1.0f), xh = (x[r * dim + c] - m) * rs;
            dx[r * dim + c] += rs * (g - mg - xh * mgx);
        }
    }
}

__global__ void layernorm_dwb_kernel(const float *x, const float *dy, int64_t rows, int64_t dim, const float *mean,
                                     const float *rstd, float *dw, float *db)
{
    GRID_STRIDE(c, dim)
    {
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

/* ---------------------------------------------------------------- entries */

static void cuda_strided_copy(dpt_ctx *ctx, int ndim, const int64_t *shape, const float *src, const int64_t *ss,
                              float *dst, const int64_t *ds, bool accumulate)
{
    int64_t n = numel_of(ndim, shape);
    if (n) LAUNCH(strided_copy_kernel, n, make_nd(ndim, shape, ss, ds), n, src, dst, accumulate);
}

static void cuda_binary(dpt_ctx *ctx, dpt_binary_op op, int ndim, const int64_t *shape, const float *a,
                        const int64_t *as, const float *b, const int64_t *bs, float *out)
{
    int64_t n = numel_of(ndim, shape);
    if (n) LAUNCH(binary_kernel, n, make_nd(ndim, shape, as, bs), n, op, a, b, out);
}

static void cuda_reduce_into(dpt_ctx *ctx, int ndim, const int64_t *shape, const float *src, float *dst,
                             const int64_t *dst_strides, float alpha, bool accumulate)
{
    /* the kept axes first, then the reduced ones, each with its source (contiguous) strides */
    int64_t src_strides[DPT_MAX_DIMS], s = 1;
    for (int d = ndim - 1; d >= 0; d--)
        src_strides[d] = s, s *= shape[d];
    nd v;
    memset(&v, 0, sizeof v);
    int nk = 0;
    int64_t kept = 1, reduced = 1;
    for (int d = 0; d < ndim; d++)
        if (dst_strides[d] != 0 || shape[d] == 1)
            v.shape[nk] = shape[d], v.a[nk] = src_strides[d], v.b[nk] = dst_strides[d], kept *= shape[d], nk++;
    v.ndim = nk;
    for (int d = 0; d < ndim; d++)
        if (!(dst_strides[d] != 0 || shape[d] == 1))
            v.shape[v.ndim] = shape[d], v.a[v.ndim] = src_strides[d], reduced *= shape[d], v.ndim++;
    LAUNCH(reduce_into_kernel, kept, v, nk, kept, reduced, src, dst, alpha, accumulate);
}

static void cuda_rows_sum(dpt_ctx *ctx, const float *x, int64_t rows, int64_t cols, float *y)
{
    LAUNCH(rows_sum_kernel, rows, x, rows, cols, y);
}
static void cuda_rows_max(dpt_ctx *ctx, const float *x, int64_t rows, int64_t cols, float *y, int32_t *idx)
{
    LAUNCH(rows_max_kernel, rows, x, rows, cols, y, idx);
}
static void cuda_rows_max_bwd(dpt_ctx *ctx, const float *dy, const int32_t *idx, int64_t rows, int64_t cols, float *dx)
{
    LAUNCH(rows_max_bwd_kernel, rows, dy, idx, rows, cols, dx);
}
static void cuda_log_softmax_fwd(dpt_ctx *ctx, const float *x, float *y, int64_t rows, int64_t cols)
{
    LAUNCH(log_softmax_fwd_kernel, rows, x, y, rows, cols);
}
static void cuda_log_softmax_bwd(dpt_ctx *ctx, const float *y, const float *dy, float *dx, int64_t rows, int64_t cols)
{
    LAUNCH(log_softmax_bwd_kernel, rows, y, dy, dx, rows, cols);
}
static void cuda_unary_fwd(dpt_ctx *ctx, dpt_unary_op op, int64_t n, const float *x, float *y)
{
    if (n) LAUNCH(unary_fwd_kernel, n, op, n, x, y);
}
static void cuda_unary_bwd(dpt_ctx *ctx, dpt_unary_op op, int64_t n, const float *x, const float *y, const float *dy,
                           float *dx)
{
    if (n) LAUNCH(unary_bwd_kernel, n, op, n, x, y, dy, dx);
}
static void cuda_embedding_fwd(dpt_ctx *ctx, const float *w, int64_t vocab, int64_t dim, const int32_t *ids,
                               int64_t n, float *out)
{
    if (n > 0 && dim > 0) LAUNCH(embedding_fwd_kernel, n * dim, w, vocab, dim, ids, n, out);
}
static void cuda_embedding_bwd(dpt_ctx *ctx, const int32_t *ids, int64_t n, const float *dy, int64_t vocab,
                               int64_t dim, float *dw)
{
    LAUNCH(embedding_bwd_kernel, dim, ids, n, dy, vocab, dim, dw);
}
/* Attention (dpt_attention; the CPU kernels' comment has the formulas): a thread per query row
 * for the output and dq, a thread per key row for dk and dv, each summing over the other side
 * in order (no atomics: the same bits every run). Simple first kernels, not tiled. */
static __device__ __forceinline__ float dot_row(const float *a, const float *b, int64_t n)
{
    float d = 0.0f;
    for (int64_t c = 0; c < n; c++)
        d += a[c] * b[c];
    return d;
}

__global__ void attention_fwd_kernel(const float *qkv, int64_t B, int64_t T, int64_t H, int64_t hs, bool causal,
                                     float *y, float *lse)
{
    int64_t C = H * hs, C3 = 3 * C;
    float scale = rsqrtf((float)hs);
    GRID_STRIDE(r, B * H * T)
    {
        int64_t b = r / (H * T), h = r / T % H, i = r % T, n = causal ? i + 1 : T;
        const float *q = qkv + (b * T + i) * C3 + h * hs, *k0 = qkv + b * T * C3 + C + h * hs, *v0 = k0 + C;
        float m = -INFINITY;
        for (int64_t j = 0; j < n; j++)
            m = fmaxf(m, scale * dot_row(q, k0 + j * C3, hs));
        float *o = y + (b * T + i) * C + h * hs, sum = 0.0f;
        for (int64_t c = 0; c < hs; c++)
            o[c] = 0.0f;
        for (int64_t j = 0; j < n; j++) {
            float p = expf(scale * dot_row(q, k0 + j * C3, hs) - m);
            sum += p;
            for (int64_t c = 0; c < hs; c++)
                o[c] += p * v0[j * C3 + c];
        }
        for (int64_t c = 0; c < hs; c++)
            o[c] /= sum;
        lse[r] = m + logf(sum);
    }
}

__global__ void attention_dq_kernel(const float *qkv, const float *y, const float *dy, const float *lse, int64_t B,
                                    int64_t T, int64_t H, int64_t hs, bool causal, float *dsum, float *dqkv)
{
    int64_t C = H * hs, C3 = 3 * C;
    float scale = rsqrtf((float)hs);
    GRID_STRIDE(r, B * H * T)
    {
        int64_t b = r / (H * T), h = r / T % H, i = r % T, n = causal ? i + 1 : T;
        const float *q = qkv + (b * T + i) * C3 + h * hs, *k0 = qkv + b * T * C3 + C + h * hs, *v0 = k0 + C;
        const float *dyi = dy + (b * T + i) * C + h * hs;
        float D = dot_row(dyi, y + (b * T + i) * C + h * hs, hs), L = lse[r];
        dsum[r] = D;
        float *dq = dqkv + (b * T + i) * C3 + h * hs;
        for (int64_t j = 0; j < n; j++) {
            float p = expf(scale * dot_row(q, k0 + j * C3, hs) - L);
            float ds = p * (dot_row(dyi, v0 + j * C3, hs) - D) * scale;
            for (int64_t c = 0; c < hs; c++)
                dq[c] += ds * k0[j * C3 + c];
        }
    }
}

__global__ void attention_dkv_kernel(const float *qkv, const float *dy, const float *lse, const float *dsum, int64_t B,
                                     int64_t T, int64_t H, int64_t hs, bool causal, float *dqkv)
{
    int64_t C = H * hs, C3 = 3 * C;
    float scale = rsqrtf((float)hs);
    GRID_STRIDE(r, B * H * T)
    {
        int64_t b = r / (H * T), h = r / T % H, j = r % T;
        const float *q0 = qkv + b * T * C3 + h * hs, *k = q0 + j * C3 + C, *v = k + C;
        float *dk = dqkv + (b * T + j) * C3 + C + h * hs, *dv = dk + C;
        for (int64_t i = causal ? j : 0; i < T; i++) {
            const float *q = q0 + i * C3, *dyi = dy + (b * T + i) * C + h * hs;
            int64_t row = (b * H + h) * T + i;
            float p = expf(scale * dot_row(q, k, hs) - lse[row]);
            float ds = p * (dot_row(dyi, v, hs) - dsum[row]) * scale;
            for (int64_t c = 0; c < hs; c++) {
                dv[c] += p * dyi[c];
                dk[c] += ds * q[c];
            }
        }
    }
}

static void cuda_attention_fwd(dpt_ctx *ctx, const float *qkv, int64_t B, int64_t T, int64_t H, int64_t hs, bool causal,
                               float *y, float *lse)
{
    LAUNCH(attention_fwd_kernel, B * H * T, qkv, B, T, H, hs, causal, y, lse);
}
static void cuda_attention_bwd(dpt_ctx *ctx, const float *qkv, const float *y, const float *dy, const float *lse,
                               int64_t B, int64_t T, int64_t H, int64_t hs, bool causal, float *scratch, float *dqkv)
{
    LAUNCH(attention_dq_kernel, B * H * T, qkv, y, dy, lse, B, T, H, hs, causal, scratch, dqkv);
    LAUNCH(attention_dkv_kernel, B * H * T, qkv, dy, lse, scratch, B, T, H, hs, causal, dqkv);
}
static void cuda_layernorm_fwd(dpt_ctx *ctx, const float *x, int64_t rows, int64_t dim, const float *w, const float *b,
                               float eps, float *y, float *mean, float *rstd)
{
    LAUNCH(layernorm_fwd_kernel, rows, x, rows, dim, w, b, eps, y, mean, rstd);
}
static void cuda_layernorm_bwd(dpt_ctx *ctx, const float *x, const float *dy, int64_t rows, int64_t dim,
                               const float *w, const float *mean, const float *rstd, float *dx, float *dw, float *db)
{
    if (dx) LAUNCH(layernorm_dx_kernel, rows, x, dy, rows, dim, w, mean, rstd, dx);
    if (dw || db) LAUNCH(layernorm_dwb_kernel, dim, x, dy, rows, dim, mean, rstd, dw, db);
}

/* The elements a batch of rows x cols matrices with leading dimension ld, stride apart, spans. */
static int64_t batch_span(int64_t rows, int64_t cols, int64_t ld, int64_t stride, int64_t batch)
{
    if (rows == 0 || cols == 0) return 0;
    return (batch - 1) * stride + (rows - 1) * ld + cols;
}

/* Row-major C_i = op(A_i) op(B_i) is column-major C_i^T = op(B_i)^T op(A_i)^T: the operands
 * swapped, as cuda_gemm does. Under precision = bf16 | fp16 the operands' whole spans are
 * rounded into 16-bit buffers and the product accumulates in fp32 (cublasGemmStridedBatchedEx). */
static void cuda_gemm_batched(dpt_ctx *ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                              const float *A, int64_t lda, int64_t sa, const float *B, int64_t ldb, int64_t sb,
                              float beta, float *C, int64_t ldc, int64_t sc, int64_t batch)
{
    if (M == 0 || N == 0 || batch == 0) return;
    cuda_state *s = state_of(ctx);
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (ctx->precision == DPT_PRECISION_FP32 || K == 0) {
        CHECK_CUBLAS(cublasSgemmStridedBatched(s->blas, opb, opa, (int)N, (int)M, (int)K, &alpha, B, (int)ldb, sb, A,
                                               (int)lda, sa, &beta, C, (int)ldc, sc, (int)batch));
        return;
    }
    bool bf16 = ctx->precision == DPT_PRECISION_BF16;
    cudaDataType_t t16 = bf16 ? CUDA_R_16BF : CUDA_R_16F;
    int64_t na = ta ? batch_span(K, M, lda, sa, batch) : batch_span(M, K, lda, sa, batch);
    int64_t nb = tb ? batch_span(N, K, ldb, sb, batch) : batch_span(K, N, ldb, sb, batch);
    cuda_block a16 = cuda_rounded16(ctx, A, na, bf16, "a 16-bit batched GEMM operand"),
               b16 = cuda_rounded16(ctx, B, nb, bf16, "a 16-bit batched GEMM operand");
    CHECK_CUBLAS(cublasGemmStridedBatchedEx(s->blas, opb, opa, (int)N, (int)M, (int)K, &alpha, b16.ptr, t16, (int)ldb,
                                            sb, a16.ptr, t16, (int)lda, sa, &beta, C, CUDA_R_32F, (int)ldc, sc,
                                            (int)batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    cuda_block_put(ctx, a16), cuda_block_put(ctx, b16);
}

/* The list ops run one launch per tensor of the list (optimizers built from them are not the
 * fused SGD/AdamW kernels; a list's tensors are few and large). */
__global__ void axpby_kernel(int64_t n, float alpha, const float *x, float beta, float *y)
{
    GRID_STRIDE(i, n) y[i] = beta == 0.0f ? alpha * x[i] : alpha * x[i] + beta * y[i];
}
static void cuda_axpby_multi(dpt_ctx *ctx, const dpt_tensor_list *l, float alpha, float beta)
{
    for (int t = 0; t < l->count; t++)
        if (l->numel[t]) LAUNCH(axpby_kernel, l->numel[t], l->numel[t], alpha, l->ptr[t * l->width + 1], beta,
                                l->ptr[t * l->width]);
}
static void cuda_unary_multi(dpt_ctx *ctx, const dpt_tensor_list *l, dpt_unary_op op)
{
    for (int t = 0; t < l->count; t++)
        cuda_unary_fwd(ctx, op, l->numel[t], l->ptr[t * l->width + 1], l->ptr[t * l->width]);
}

void cuda_tensor_entries(dpt_backend *be)
{
    be->strided_copy = cuda_strided_copy;
    be->binary = cuda_binary;
    be->reduce_into = cuda_reduce_into;
    be->rows_sum = cuda_rows_sum;
    be->rows_max = cuda_rows_max;
    be->rows_max_bwd = cuda_rows_max_bwd;
    be->log_softmax_fwd = cuda_log_softmax_fwd;
    be->log_softmax_bwd = cuda_log_softmax_bwd;
    be->unary_fwd = cuda_unary_fwd;
    be->unary_bwd = cuda_unary_bwd;
    be->embedding_fwd = cuda_embedding_fwd;
    be->embedding_bwd = cuda_embedding_bwd;
    be->layernorm_fwd = cuda_layernorm_fwd;
    be->layernorm_bwd = cuda_layernorm_bwd;
    be->attention_fwd = cuda_attention_fwd;
    be->attention_bwd = cuda_attention_bwd;
    be->gemm_batched = cuda_gemm_batched;
    be->axpby_multi = cuda_axpby_multi;
    be->unary_multi = cuda_unary_multi;
}
