/* cuda_tensor.cu: the CUDA kernels of the tensor primitives (strided copies, broadcasting,
 * reductions, log-softmax, unary maps, embeddings, layer norm, batched GEMM on cuBLAS, the
 * optimizers' list ops). Every reduction adds in a fixed order with no atomics, so a run gives
 * the same bits every time, as the CPU kernels do. Compiled here; it has not run on a GPU yet. */
#include <math.h>
#include <string.h>

#include "attn_chunked.h"
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

/* Layer norm forward and dx: a warp per row (a thread per row read a GPT's 768-wide rows one
 * element at a time, 32 rows apart in memory); sums in double, lane by lane then across the
 * warp in a fixed butterfly: the same bits every run. */
static __device__ __forceinline__ double warp_sum_d(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__global__ void layernorm_fwd_kernel(const float *x, int64_t rows, int64_t dim, const float *w, const float *b,
                                     float eps, float *y, float *mean, float *rstd)
{
    int64_t r = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (r >= rows) return;
    const float *xr = x + r * dim;
    double s = 0.0, ss = 0.0;
    for (int64_t c = lane; c < dim; c += 32)
        s += xr[c];
    double mu = warp_sum_d(s) / (double)dim;
    for (int64_t c = lane; c < dim; c += 32)
        ss += ((double)xr[c] - mu) * ((double)xr[c] - mu);
    ss = warp_sum_d(ss);
    float m = (float)mu, rs = (float)(1.0 / sqrt(ss / (double)dim + eps));
    if (lane == 0) mean[r] = m, rstd[r] = rs;
    for (int64_t c = lane; c < dim; c += 32)
        y[r * dim + c] = (xr[c] - m) * rs * (w ? w[c] : 1.0f) + (b ? b[c] : 0.0f);
}

__global__ void layernorm_dx_kernel(const float *x, const float *dy, int64_t rows, int64_t dim, const float *w,
                                    const float *mean, const float *rstd, float *dx)
{
    int64_t r = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (r >= rows) return;
    float m = mean[r], rs = rstd[r];
    double sg = 0.0, sgx = 0.0;
    for (int64_t c = lane; c < dim; c += 32) {
        float g = dy[r * dim + c] * (w ? w[c] : 1.0f), xh = (x[r * dim + c] - m) * rs;
        sg += g, sgx += (double)g * xh;
    }
    float mg = (float)(warp_sum_d(sg) / (double)dim), mgx = (float)(warp_sum_d(sgx) / (double)dim);
    for (int64_t c = lane; c < dim; c += 32) {
        float g = dy[r * dim + c] * (w ? w[c] : 1.0f), xh = (x[r * dim + c] - m) * rs;
        dx[r * dim + c] += rs * (g - mg - xh * mgx);
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
/* Attention (dpt_attention; the CPU kernels' comment has the formulas) on cuBLAS, in chunks of
 * query rows (attn_chunked.h: the orchestration, the same code the CPU test runs against
 * dpt_attention): per batch element and chunk, the H heads' scores against the keys the chunk
 * sees by one strided-batched GEMM (a head's q, k, v are hs columns at a stride of 3C in qkv,
 * the next head hs further on), a warp per query row turns them into probabilities in place
 * and keeps the row's log-sum-exp, and a second GEMM makes the rows of Y. Causal chunks skip
 * the keys past their last row (about half of a long sequence's work); scratch is H x chunk x
 * T floats from the caching allocator (at most ATTN_SCRATCH_FLOATS, two such in backward):
 * linear in T and in B. Everything in fp32 (the CPU's attention is fp32 in every precision),
 * in a fixed order: the same bits every run. DPT_ATTENTION_CHUNK=N forces N rows a chunk
 * (test_cuda runs several chunks on its short sequences with it). */
#define ATTN_SCRATCH_FLOATS (16 << 20)

static void sgemm_rows(dpt_ctx *ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                       int64_t lda, int64_t sa, const float *B, int64_t ldb, int64_t sb, float beta, float *C,
                       int64_t ldc, int64_t sc, int64_t batch)
{
    /* row-major C = op(A) op(B) as column-major C^T = op(B)^T op(A)^T */
    CHECK_CUBLAS(cublasSgemmStridedBatched(state_of(ctx)->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                           ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M, (int)K, &alpha, B,
                                           (int)ldb, sb, A, (int)lda, sa, &beta, C, (int)ldc, sc, (int)batch));
}

static __device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
static __device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* H Tq rows of Tk scores, row r = h Tq + i holding query q0 + i of head h: P = softmax over keys
 * j < n (n = q0 + i + 1 causal, else Tk), 0 for the rest; lse[h T + q0 + i] = max + log(sum).
 * A warp per row. */
__global__ void attention_softmax_kernel(float *S, int64_t rows, int64_t Tq, int64_t Tk, int64_t q0, bool causal,
                                         float *lse, int64_t T)
{
    int64_t r = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (r >= rows) return;
    int64_t h = r / Tq, qi = q0 + r % Tq, n = causal ? qi + 1 : Tk;
    float *row = S + r * Tk;
    float m = -INFINITY;
    for (int64_t j = lane; j < n; j += 32)
        m = fmaxf(m, row[j]);
    m = warp_max(m);
    float sum = 0.0f;
    for (int64_t j = lane; j < n; j += 32)
        sum += expf(row[j] - m);
    sum = warp_sum(sum);
    float inv = 1.0f / sum;
    for (int64_t j = lane; j < Tk; j += 32)
        row[j] = j < n ? expf(row[j] - m) * inv : 0.0f;
    if (lane == 0) lse[h * T + qi] = m + logf(sum);
}

/* P recomputed from scores and the kept log-sum-exp (0 past the diagonal when causal). */
__global__ void attention_probs_kernel(float *S, int64_t rows, int64_t Tq, int64_t Tk, int64_t q0, bool causal,
                                       const float *lse, int64_t T)
{
    int64_t r = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (r >= rows) return;
    int64_t h = r / Tq, qi = q0 + r % Tq, n = causal ? qi + 1 : Tk;
    float *row = S + r * Tk, L = lse[h * T + qi];
    for (int64_t j = lane; j < Tk; j += 32)
        row[j] = j < n ? expf(row[j] - L) : 0.0f;
}

/* dS = P (dP - D) scale, in place of dP; D[h T + q0 + i] = dot(dY_i, Y_i) of the row's head. */
__global__ void attention_dscores_kernel(const float *P, float *dP, int64_t rows, int64_t Tq, int64_t Tk, int64_t q0,
                                         const float *D, int64_t T, float scale)
{
    int64_t r = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (r >= rows) return;
    const float *p = P + r * Tk;
    float *d = dP + r * Tk, Dr = D[r / Tq * T + q0 + r % Tq];
    for (int64_t j = lane; j < Tk; j += 32)
        d[j] = p[j] * (d[j] - Dr) * scale;
}

/* D (B, H, T) = dot(dY, Y) over each head's hs values; a warp per row. */
__global__ void attention_rowdot_kernel(const float *y, const float *dy, int64_t B, int64_t T, int64_t H, int64_t hs,
                                        float *D)
{
    int64_t r = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (r >= B * H * T) return;
    int64_t b = r / (H * T), h = r / T % H, i = r % T, C = H * hs;
    const float *a = y + (b * T + i) * C + h * hs, *g = dy + (b * T + i) * C + h * hs;
    float d = 0.0f;
    for (int64_t c = lane; c < hs; c += 32)
        d += a[c] * g[c];
    d = warp_sum(d);
    if (lane == 0) D[r] = d;
}

static unsigned warp_rows_blocks(int64_t rows)
{
    return (unsigned)CEIL_DIV(rows, THREADS / 32);
}

/* attn_chunked.h's primitives on this context's stream */
static void attn_gemm(void *c, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                      int64_t lda, int64_t sa, const float *B, int64_t ldb, int64_t sb, float beta, float *C,
                      int64_t ldc, int64_t sc, int64_t batch)
{
    sgemm_rows((dpt_ctx *)c, ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}
static void attn_softmax(void *c, float *S, int64_t H, int64_t Tq, int64_t Tk, int64_t q0, bool causal, float *lse,
                         int64_t T)
{
    dpt_ctx *ctx = (dpt_ctx *)c;
    attention_softmax_kernel<<<warp_rows_blocks(H * Tq), THREADS, 0, stream_of(ctx)>>>(S, H * Tq, Tq, Tk, q0, causal,
                                                                                      lse, T);
    CHECK_LAUNCH();
}
static void attn_probs(void *c, float *S, int64_t H, int64_t Tq, int64_t Tk, int64_t q0, bool causal, const float *lse,
                       int64_t T)
{
    dpt_ctx *ctx = (dpt_ctx *)c;
    attention_probs_kernel<<<warp_rows_blocks(H * Tq), THREADS, 0, stream_of(ctx)>>>(S, H * Tq, Tq, Tk, q0, causal,
                                                                                    lse, T);
    CHECK_LAUNCH();
}
static void attn_dscores(void *c, const float *P, float *G, int64_t H, int64_t Tq, int64_t Tk, int64_t q0,
                         const float *D, int64_t T, float scale)
{
    dpt_ctx *ctx = (dpt_ctx *)c;
    attention_dscores_kernel<<<warp_rows_blocks(H * Tq), THREADS, 0, stream_of(ctx)>>>(P, G, H * Tq, Tq, Tk, q0, D, T,
                                                                                      scale);
    CHECK_LAUNCH();
}
static const dpt_attn_prims cuda_attn_prims = {attn_gemm, attn_softmax, attn_probs, attn_dscores};

static int64_t attn_chunk(int64_t T, int64_t H)
{
    const char *forced = getenv("DPT_ATTENTION_CHUNK");
    long n = forced ? atol(forced) : 0;
    return n > 0 ? (n < T ? n : T) : dpt_attn_chunk_rows(T, H, ATTN_SCRATCH_FLOATS);
}

static void cuda_attention_fwd(dpt_ctx *ctx, const float *qkv, int64_t B, int64_t T, int64_t H, int64_t hs, bool causal,
                               float *y, float *lse)
{
    if (B == 0 || T == 0) return;
    int64_t chunk = attn_chunk(T, H);
    cuda_block sb = cuda_block_get(ctx, (size_t)(H * chunk * T) * sizeof(float), "attention scores (H chunk T floats)");
    dpt_attn_chunked_fwd(&cuda_attn_prims, ctx, qkv, B, T, H, hs, causal, chunk, (float *)sb.ptr, y, lse);
    cuda_block_put(ctx, sb);
}

static void cuda_attention_bwd(dpt_ctx *ctx, const float *qkv, const float *y, const float *dy, const float *lse,
                               int64_t B, int64_t T, int64_t H, int64_t hs, bool causal, float *scratch, float *dqkv,
                               bool accumulate)
{
    if (B == 0 || T == 0) return;
    int64_t C3 = 3 * H * hs, chunk = attn_chunk(T, H);
    if (!accumulate) CHECK_CUDA(cudaMemsetAsync(dqkv, 0, (size_t)(B * T * C3) * sizeof(float), stream_of(ctx)));
    attention_rowdot_kernel<<<warp_rows_blocks(B * H * T), THREADS, 0, stream_of(ctx)>>>(y, dy, B, T, H, hs, scratch);
    CHECK_LAUNCH();
    size_t bytes = (size_t)(H * chunk * T) * sizeof(float);
    cuda_block pb = cuda_block_get(ctx, bytes, "attention probabilities (H chunk T floats)");
    cuda_block gb = cuda_block_get(ctx, bytes, "attention score gradients (H chunk T floats)");
    dpt_attn_chunked_bwd(&cuda_attn_prims, ctx, qkv, dy, lse, scratch, B, T, H, hs, causal, chunk, (float *)pb.ptr,
                         (float *)gb.ptr, dqkv);
    cuda_block_put(ctx, pb), cuda_block_put(ctx, gb);
}
static void cuda_layernorm_fwd(dpt_ctx *ctx, const float *x, int64_t rows, int64_t dim, const float *w, const float *b,
                               float eps, float *y, float *mean, float *rstd)
{
    if (rows == 0) return;
    layernorm_fwd_kernel<<<warp_rows_blocks(rows), THREADS, 0, stream_of(ctx)>>>(x, rows, dim, w, b, eps, y, mean, rstd);
    CHECK_LAUNCH();
}
static void cuda_layernorm_bwd(dpt_ctx *ctx, const float *x, const float *dy, int64_t rows, int64_t dim,
                               const float *w, const float *mean, const float *rstd, float *dx, float *dw, float *db)
{
    if (dx && rows) {
        layernorm_dx_kernel<<<warp_rows_blocks(rows), THREADS, 0, stream_of(ctx)>>>(x, dy, rows, dim, w, mean, rstd, dx);
        CHECK_LAUNCH();
    }
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
