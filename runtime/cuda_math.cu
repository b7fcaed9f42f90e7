/* cuda_math.cu: CUDA C kernels for elementwise ops, reductions, activations, softmax and
 * cross-entropy (labels and the loss stay on the device), and cuBLAS SGEMM (GemmEx with bf16/fp16
 * inputs under [train] precision = bf16 | fp16). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda_internal.h"
#include "cuda_util.h"

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

__global__ void dot_kernel(const float *a, const float *b, int64_t n, double *partials)
{
    double acc = 0.0;
    GRID_STRIDE(i, n) acc += (double)a[i] * (double)b[i];
    block_partial(acc, partials);
}

__global__ void sum_kernel(const float *a, int64_t n, double *partials)
{
    double acc = 0.0;
    GRID_STRIDE(i, n) acc += (double)a[i];
    block_partial(acc, partials);
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
__global__ void relu_bwd_kernel(const float *y, const float *dy, float *dx, int64_t n, bool accumulate)
{
    GRID_STRIDE(i, n) dx[i] = (accumulate ? dx[i] : 0.0f) + (y[i] > 0.0f ? dy[i] : 0.0f);
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
__global__ void gelu_bwd_kernel(const float *x, const float *dy, float *dx, int64_t n, bool accumulate)
{
    GRID_STRIDE(i, n)
    {
        float v = x[i], t = tanhf(GELU_K * (v + GELU_C * v * v * v));
        float dt = GELU_K * (1.0f + 3.0f * GELU_C * v * v) * (1.0f - t * t);
        dx[i] = (accumulate ? dx[i] : 0.0f) + dy[i] * (0.5f * (1.0f + t) + 0.5f * v * dt);
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

/* The largest v over the block (all threads get it). */
static __device__ __forceinline__ float block_max(float v)
{
    __shared__ float part[THREADS];
    __syncthreads();
    part[threadIdx.x] = v;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] = fmaxf(part[threadIdx.x], part[threadIdx.x + s]);
        __syncthreads();
    }
    return part[0];
}

/* A block per row (rows blockIdx.x, + gridDim.x, ...), its threads over the classes: a
 * language model's rows are 50k wide, where a thread per row left most of the GPU idle and
 * ran each row's 150k exponentials one after another. Thread 0 adds the block's row losses
 * in row order; every sum has a fixed order (the same bits every run). */
__global__ void xent_fwd_kernel(const float *x, const int32_t *labels, int64_t rows, int64_t cols,
                                float smoothing, int32_t ignore, float *probs, double *partials)
{
    double acc = 0.0;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *xr = x + r * cols;
        float m = -INFINITY;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
            m = fmaxf(m, xr[c]);
        m = block_max(m);
        double total = 0.0, sum_logits = 0.0;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
            total += exp((double)xr[c] - m), sum_logits += xr[c];
        total = block_total(total);
        sum_logits = block_total(sum_logits);
        double lse = m + log(total);
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
            probs[r * cols + c] = (float)exp((double)xr[c] - lse);
        if (threadIdx.x == 0) {
            int32_t y = labels[r];
            double l = y == ignore                ? 0.0
                       : y < 0 || y >= cols ? NAN /* out of range: a NaN loss, not a read out of bounds */
                                            : (1.0 - smoothing) * (lse - xr[y]) + smoothing * (lse - sum_logits / (double)cols);
            acc += l;
        }
    }
    block_partial(acc, partials);
}

/* *count = the rows whose label is not ignore (one block), and *loss = total[0] / *count: the
 * mean, left on the device */
__global__ void xent_mean_kernel(const double *total, const int32_t *labels, int64_t rows, int32_t ignore,
                                 float *loss, float *count)
{
    double n = 0.0;
    for (int64_t r = threadIdx.x; r < rows; r += blockDim.x)
        n += labels[r] != ignore;
    double counted = block_total(n);
    if (threadIdx.x == 0) *count = (float)counted, *loss = (float)(total[0] / counted);
}

__global__ void xent_bwd_kernel(const float *probs, const int32_t *labels, int64_t rows, int64_t cols,
                                float smoothing, int32_t ignore, const float *dloss, const float *count, float *dx)
{
    float scale = dloss[0] / count[0];
    GRID_STRIDE(i, rows * cols)
    {
        int64_t r = i / cols, c = i % cols;
        if (labels[r] == ignore) continue;
        float target = smoothing / (float)cols + (c == labels[r] ? 1.0f - smoothing : 0.0f);
        dx[i] += scale * (probs[i] - target);
    }
}

/* A row is right when fewer than k logits rank above its label's (backend.h's rule). */
__global__ void correct_acc_kernel(const float *x, const int32_t *labels, int64_t rows, int64_t cols, int k,
                                   float *out)
{
    GRID_STRIDE(r, rows)
    {
        const float *xr = x + r * cols;
        int32_t y = labels[r];
        if (y < 0 || y >= cols || isnan(xr[y])) continue;
        int64_t above = 0;
        for (int64_t c = 0; c < cols && above < k; c++)
            above += xr[c] > xr[y] || (c < y && xr[c] == xr[y]) || isnan(xr[c]);
        if (above < k) atomicAdd(out, 1.0f);
    }
}

/* The loader's uint8 HWC batches to normalised float NCHW: one thread an output element,
 * reading bytes c apart (the batch is a quarter of the floats' size on the wire). */
typedef struct norm4 {
    float scale[4], shift[4];
} norm4;

__global__ void images_to_float_kernel(const uint8_t *x, float *y, int64_t n, int64_t c, int64_t hw, norm4 k)
{
    GRID_STRIDE(i, n * c * hw)
    {
        int64_t p = i % hw, ch = (i / hw) % c, s = i / (hw * c);
        /* no fused multiply-add: the same floats as the CPU's loop */
        y[i] = __fadd_rn(__fmul_rn((float)x[(s * hw + p) * c + ch], k.scale[ch]), k.shift[ch]);
    }
}

/* Mixup and CutMix in place (backend.h's dpt_pair_mix): one thread a value of the first half's
 * samples (and the middle one of an odd batch), which writes both of its pair's. */
__global__ void mixup_pairs_kernel(float *x, int64_t pairs, int64_t n, int64_t per, float a, float b)
{
    GRID_STRIDE(k, pairs * per)
    {
        int64_t i = k / per, e = k % per;
        float *p = x + i * per + e, *q = x + (n - 1 - i) * per + e;
        float u = *p, v = *q;
        /* no fused multiply-add: the same floats as the CPU's loop */
        *p = __fadd_rn(__fmul_rn(a, u), __fmul_rn(b, v));
        *q = __fadd_rn(__fmul_rn(a, v), __fmul_rn(b, u));
    }
}

__global__ void cutmix_pairs_kernel(uint32_t *x, int64_t pairs, int64_t n, dpt_pair_mix m)
{
    int64_t rows = m.y1 - m.y0, cols = m.x1 - m.x0, box = m.c * rows * cols, per = m.c * m.h * m.w;
    GRID_STRIDE(k, pairs * box)
    {
        int64_t i = k / box, r = k % box, ch = r / (rows * cols), y = m.y0 + r / cols % rows, xx = m.x0 + r % cols;
        int64_t e = m.nhwc ? (y * m.w + xx) * m.c + ch : (ch * m.h + y) * m.w + xx;
        uint32_t *p = x + i * per + e, *q = x + (n - 1 - i) * per + e;
        uint32_t t = *p;
        *p = *q;
        *q = t;
    }
}

/* Random erasing: one thread a value of the box. */
__global__ void erase_box_kernel(float *x, int64_t c, int64_t h, int64_t w, bool nhwc, int64_t y0, int64_t rows,
                                 int64_t x0, int64_t cols)
{
    GRID_STRIDE(k, c * rows * cols)
    {
        int64_t ch = k / (rows * cols), y = y0 + k / cols % rows, xx = x0 + k % cols;
        x[nhwc ? (y * w + xx) * c + ch : (ch * h + y) * w + xx] = 0.0f;
    }
}

/* 16-bit gradient buckets (NCCL's bf16/fp16 AllReduce) */
__global__ void f32_to_h16_kernel(uint16_t *dst, const float *src, int64_t n, bool bf16)
{
    GRID_STRIDE(i, n)
    dst[i] = bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(src[i])) : __half_as_ushort(__float2half_rn(src[i]));
}

__global__ void h16_to_f32_kernel(float *dst, const uint16_t *src, int64_t n, bool bf16, float scale)
{
    GRID_STRIDE(i, n)
    dst[i] = (bf16 ? __bfloat162float(__ushort_as_bfloat16(src[i])) : __half2float(__ushort_as_half(src[i]))) * scale;
}

extern "C" void dpt_cuda_f32_to_h16(cudaStream_t s, uint16_t *dst, const float *src, int64_t n, bool bf16)
{
    f32_to_h16_kernel<<<blocks_for(n), THREADS, 0, s>>>(dst, src, n, bf16);
    CHECK_LAUNCH();
}

extern "C" void dpt_cuda_h16_to_f32(cudaStream_t s, float *dst, const uint16_t *src, int64_t n, bool bf16,
                                    float scale)
{
    h16_to_f32_kernel<<<blocks_for(n), THREADS, 0, s>>>(dst, src, n, bf16, scale);
    CHECK_LAUNCH();
}

/* ---------------------------------------------------------------- launchers */

static void cuda_images_to_float(dpt_ctx *ctx, const uint8_t *x, float *y, int64_t n, int64_t c, int64_t hw,
                                 const float *scale, const float *shift)
{
    norm4 k;
    for (int i = 0; i < 4; i++)
        k.scale[i] = i < c ? scale[i] : 0, k.shift[i] = i < c ? shift[i] : 0;
    LAUNCH(images_to_float_kernel, n * c * hw, x, y, n, c, hw, k);
}

static void cuda_erase_box(dpt_ctx *ctx, float *x, int64_t c, int64_t h, int64_t w, bool nhwc, const int64_t box[4])
{
    int64_t rows = box[1] - box[0], cols = box[3] - box[2];
    if (rows > 0 && cols > 0) LAUNCH(erase_box_kernel, c * rows * cols, x, c, h, w, nhwc, box[0], rows, box[2], cols);
}

static void cuda_mix_pairs(dpt_ctx *ctx, float *x, const dpt_pair_mix *m)
{
    int64_t per = m->c * m->h * m->w;
    if (!m->cut) {
        int64_t pairs = (m->n + 1) / 2;
        LAUNCH(mixup_pairs_kernel, pairs * per, x, pairs, m->n, per, m->a, m->b);
    } else if (m->n / 2 > 0 && m->y1 > m->y0 && m->x1 > m->x0) {
        int64_t pairs = m->n / 2;
        LAUNCH(cutmix_pairs_kernel, pairs * m->c * (m->y1 - m->y0) * (m->x1 - m->x0), (uint32_t *)x, pairs, m->n, *m);
    }
}

__global__ void dropout_mask_kernel(float *mask, int64_t n, uint64_t key, float p, float keep)
{
    GRID_STRIDE(i, n) mask[i] = dpt_rng_at(key, (uint64_t)i) < p ? 0.0f : keep;
}
/* made where it is used (issue 29 item 10: no host mask and copy per call) */
static void cuda_dropout_mask(dpt_ctx *ctx, float *mask, int64_t n, uint64_t key, float p)
{
    LAUNCH(dropout_mask_kernel, n, mask, n, key, p, 1.0f / (1.0f - p));
}

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

/* Reductions on the device's red_blocks blocks, totalled in order: run to run the same bits. */
#define REDUCE(kernel, ...)                                                                                  \
    do {                                                                                                     \
        int nb_ = state_of(ctx)->red_blocks;                                                                 \
        kernel<<<nb_, THREADS, 0, stream_of(ctx)>>>(__VA_ARGS__, cuda_partials(ctx, nb_));                    \
        CHECK_LAUNCH();                                                                                      \
        cuda_total_partials(ctx, nb_);                                                                       \
    } while (0)

static double cuda_sum(dpt_ctx *ctx, const float *x, int64_t n)
{
    REDUCE(sum_kernel, x, n);
    return cuda_read_scratch(ctx);
}

__global__ void scalar_of_total_kernel(const double *total, float factor, float *out)
{
    out[0] = (float)(total[0] * factor);
}

static void cuda_sum_to(dpt_ctx *ctx, const float *x, int64_t n, float factor, float *out)
{
    REDUCE(sum_kernel, x, n);
    scalar_of_total_kernel<<<1, 1, 0, stream_of(ctx)>>>(state_of(ctx)->scratch, factor, out);
    CHECK_LAUNCH();
}

__global__ void add_scalar_kernel(int64_t n, float alpha, const float *s, float *y)
{
    float v = s[0] * alpha;
    GRID_STRIDE(i, n) y[i] += v;
}

static void cuda_add_scalar(dpt_ctx *ctx, int64_t n, float alpha, const float *s, float *y)
{
    if (n > 0) LAUNCH(add_scalar_kernel, n, n, alpha, s, y);
}

static double cuda_dot(dpt_ctx *ctx, const float *a, const float *b, int64_t n)
{
    REDUCE(dot_kernel, a, b, n);
    return cuda_read_scratch(ctx);
}

static void cuda_transpose_acc(dpt_ctx *ctx, const float *src, float *dst, int64_t rows, int64_t cols)
{
    LAUNCH(transpose_acc_kernel, rows * cols, src, dst, rows, cols);
}

/* The elements a rows x cols matrix with leading dimension ld spans in memory. */
static int64_t span_of(int64_t rows, int64_t cols, int64_t ld)
{
    return rows == 0 || cols == 0 ? 0 : (rows - 1) * ld + cols;
}

/* [train] precision = bf16 | fp16 (autocast): A and B rounded (nearest even) into 16-bit
 * buffers of the same layout and leading dimension (the whole span: the gaps of a strided
 * view are rounded too, harmlessly), cublasGemmEx with fp32 compute and an fp32 C, so alpha,
 * beta and C's accumulation stay fp32 as in torch.autocast. The buffers come from the caching
 * allocator and go back behind the GEMM on the same stream. */
static void gemm16(dpt_ctx *ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                   int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    bool bf16 = ctx->precision == DPT_PRECISION_BF16;
    cudaDataType_t t16 = bf16 ? CUDA_R_16BF : CUDA_R_16F;
    int64_t na = ta ? span_of(K, M, lda) : span_of(M, K, lda), nb = tb ? span_of(N, K, ldb) : span_of(K, N, ldb);
    cuda_block a16 = cuda_rounded16(ctx, A, na, bf16, "a 16-bit GEMM operand"),
               b16 = cuda_rounded16(ctx, B, nb, bf16, "a 16-bit GEMM operand");
    CHECK_CUBLAS(cublasGemmEx(state_of(ctx)->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                              (int)N, (int)M, (int)K, &alpha, b16.ptr, t16, (int)ldb, a16.ptr, t16, (int)lda, &beta,
                              C, CUDA_R_32F, (int)ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    cuda_block_put(ctx, a16), cuda_block_put(ctx, b16);
}

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands. */
static void cuda_gemm(dpt_ctx *ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                      const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                      int64_t ldc)
{
    if (M == 0 || N == 0) return;
    if (ctx->precision != DPT_PRECISION_FP32 && K > 0) {
        gemm16(ctx, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    CHECK_CUBLAS(cublasSgemm(state_of(ctx)->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                             ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M, (int)K, &alpha, B, (int)ldb, A,
                             (int)lda, &beta, C, (int)ldc));
}

/* [train] memory_format = nhwc: an activation between NCHW and NHWC (the only layouts CUDA
 * makes), one thread per element of the NCHW side, written (or added) to the other side. */
__global__ void relayout_kernel(const float *src, float *dst, int64_t n, int64_t c, int64_t hw, bool to_nhwc,
                                bool accumulate)
{
    GRID_STRIDE(i, n * c * hw)
    {
        int64_t p = i % hw, ch = (i / hw) % c, b = i / (c * hw), j = (b * hw + p) * c + ch;
        int64_t from = to_nhwc ? i : j, to = to_nhwc ? j : i;
        dst[to] = accumulate ? dst[to] + src[from] : src[from];
    }
}

static void cuda_relayout(dpt_ctx *ctx, const float *src, dpt_layout from, float *dst, dpt_layout to,
                          const int64_t *shape, bool accumulate)
{
    /* callers relayout only between different layouts (ops.c and tensor.c check first) */
    DPT_ASSERT((from == DPT_LAYOUT_NCHW || from == DPT_LAYOUT_NHWC) && (to == DPT_LAYOUT_NCHW || to == DPT_LAYOUT_NHWC) &&
                   from != to,
               "a relayout from %d to %d on CUDA", (int)from, (int)to);
    int64_t n = shape[0] * shape[1] * shape[2] * shape[3];
    LAUNCH(relayout_kernel, n, src, dst, shape[0], shape[1], shape[2] * shape[3], to == DPT_LAYOUT_NHWC, accumulate);
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
static void cuda_relu_bwd(dpt_ctx *ctx, const float *y, const float *dy, float *dx, int64_t n, bool accumulate)
{
    LAUNCH(relu_bwd_kernel, n, y, dy, dx, n, accumulate);
}
static void cuda_gelu_fwd(dpt_ctx *ctx, const float *x, float *y, int64_t n)
{
    LAUNCH(gelu_fwd_kernel, n, x, y, n);
}
static void cuda_gelu_bwd(dpt_ctx *ctx, const float *x, const float *dy, float *dx, int64_t n, bool accumulate)
{
    LAUNCH(gelu_bwd_kernel, n, x, dy, dx, n, accumulate);
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
                          int64_t cols, float smoothing, int32_t ignore, float *probs, float *loss, float *count)
{
    REDUCE(xent_fwd_kernel, logits, labels, rows, cols, smoothing, ignore, probs);
    xent_mean_kernel<<<1, THREADS, 0, stream_of(ctx)>>>(state_of(ctx)->scratch, labels, rows, ignore, loss, count);
    CHECK_LAUNCH();
}

static void cuda_xent_bwd(dpt_ctx *ctx, const float *probs, const int32_t *labels, int64_t rows, int64_t cols,
                          float smoothing, int32_t ignore, const float *dloss, const float *count, float *dlogits)
{
    LAUNCH(xent_bwd_kernel, rows * cols, probs, labels, rows, cols, smoothing, ignore, dloss, count, dlogits);
}

static void cuda_correct_acc(dpt_ctx *ctx, const float *logits, const int32_t *labels, int64_t rows,
                             int64_t cols, int k, float *correct)
{
    LAUNCH(correct_acc_kernel, rows, logits, labels, rows, cols, k, correct);
}

void cuda_math_entries(dpt_backend *be)
{
    be->images_to_float = cuda_images_to_float;
    be->mix_pairs = cuda_mix_pairs;
    be->erase_box = cuda_erase_box;
    be->fill = cuda_fill;
    be->axpy = cuda_axpy;
    be->scale = cuda_scale;
    be->add = cuda_add;
    be->mul = cuda_mul;
    be->dropout_mask = cuda_dropout_mask;
    be->mul_acc = cuda_mul_acc;
    be->sum = cuda_sum;
    be->dot = cuda_dot;
    be->sum_to = cuda_sum_to;
    be->add_scalar = cuda_add_scalar;
    be->transpose_acc = cuda_transpose_acc;
    be->gemm = cuda_gemm;
    be->relayout = cuda_relayout;
    be->bias_add = cuda_bias_add;
    be->bias_grad = cuda_bias_grad;
    be->relu_fwd = cuda_relu_fwd;
    be->relu_bwd = cuda_relu_bwd;
    be->gelu_fwd = cuda_gelu_fwd;
    be->gelu_bwd = cuda_gelu_bwd;
    be->softmax_fwd = cuda_softmax_fwd;
    be->softmax_bwd = cuda_softmax_bwd;
    be->xent_fwd = cuda_xent_fwd;
    be->xent_bwd = cuda_xent_bwd;
    be->correct_acc = cuda_correct_acc;
}
