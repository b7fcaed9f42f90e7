/* ops_cpu.c: the CPU backend. GEMM goes to OpenBLAS; elementwise kernels are OpenMP loops,
 * split only when the work is large enough to pay for waking threads. Reductions run in a
 * fixed order so that a run is bit-reproducible for a given thread count. */
#include "blas.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>
#include <sys/mman.h>

#include "backend.h"
#include "ctx.h"
#include "error.h"
#include "vec_math.h"
#include "half.h"
#include "registry.h"

#define PAR_MIN 32768 /* elements below which a loop stays on one thread */

/* Blocks of 4 MiB and more are 2 MiB-aligned and asked to be backed by transparent huge pages
 * (MADV_HUGEPAGE, for kernels whose THP mode is madvise, Debian's default): the first touch of a
 * 2 MiB page faults once instead of 512 times (GPT-2 small's 2 GB of weights, gradients and
 * AdamW state were most of its start-up), and the steps' large operands take fewer TLB entries.
 * The caching allocator keeps such blocks, so the rounding is paid once. */
#define HUGE_PAGE ((size_t)2 << 20)
static void *cpu_malloc(size_t bytes, void *user)
{
    (void)user;
    if (bytes >= 2 * HUGE_PAGE) {
        size_t size = (bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
        void *p = aligned_alloc(HUGE_PAGE, size);
        if (p) madvise(p, size, MADV_HUGEPAGE); /* advice: refused (no THP), the pages stay small */
        return p;
    }
    return aligned_alloc(64, (bytes + 63) & ~(size_t)63);
}

static void cpu_free(void *ptr, void *user)
{
    (void)user;
    free(ptr);
}

static dpt_raw_allocator cpu_raw_allocator(dpt_ctx *ctx)
{
    (void)ctx;
    return (dpt_raw_allocator){.malloc_fn = cpu_malloc, .free_fn = cpu_free};
}

static bool cpu_init(dpt_ctx *ctx, dpt_error *err)
{
    (void)err;
    dpt_blas_set_threads(ctx->threads);
    return true;
}

static void cpu_shutdown(dpt_ctx *ctx)
{
    (void)ctx;
}

static void cpu_copy(dpt_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    (void)ctx;
    if (bytes) memcpy(dst, src, bytes);
}

static void cpu_fill(dpt_ctx *ctx, float *x, int64_t n, float value)
{
#pragma omp parallel for num_threads(ctx->threads) if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        x[i] = value;
}

static void cpu_dropout_mask(dpt_ctx *ctx, float *mask, int64_t n, uint64_t key, float p)
{
    float keep = 1.0f / (1.0f - p);
#pragma omp parallel for num_threads(ctx->threads) if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        mask[i] = dpt_rng_at(key, (uint64_t)i) < p ? 0.0f : keep;
}

static void cpu_axpy(dpt_ctx *ctx, int64_t n, float alpha, const float *x, float *y)
{
#pragma omp parallel for num_threads(ctx->threads) if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        y[i] += alpha * x[i];
}

static void cpu_scale(dpt_ctx *ctx, int64_t n, float alpha, const float *x, float *out)
{
#pragma omp parallel for num_threads(ctx->threads) if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        out[i] = alpha * x[i];
}

static void cpu_add(dpt_ctx *ctx, int64_t n, const float *a, const float *b, float *out)
{
#pragma omp parallel for num_threads(ctx->threads) if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

static void cpu_mul(dpt_ctx *ctx, int64_t n, const float *a, const float *b, float *out)
{
#pragma omp parallel for num_threads(ctx->threads) if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        out[i] = a[i] * b[i];
}

static void cpu_mul_acc(dpt_ctx *ctx, int64_t n, const float *a, const float *b, float *out)
{
#pragma omp parallel for num_threads(ctx->threads) if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        out[i] += a[i] * b[i];
}

static double cpu_sum(dpt_ctx *ctx, const float *x, int64_t n)
{
    (void)ctx;
    double total = 0.0;
    for (int64_t i = 0; i < n; i++)
        total += x[i];
    return total;
}

static void cpu_sum_to(dpt_ctx *ctx, const float *x, int64_t n, float factor, float *out)
{
    out[0] = (float)(cpu_sum(ctx, x, n) * factor);
}

static void cpu_add_scalar(dpt_ctx *ctx, int64_t n, float alpha, const float *s, float *y)
{
    float v = s[0] * alpha;
#pragma omp parallel for simd num_threads(ctx->threads) if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        y[i] += v;
}

/* Fixed chunks summed in chunk order: the same result for any thread count or timing. */
#define DOT_CHUNK 65536
static double cpu_dot(dpt_ctx *ctx, const float *a, const float *b, int64_t n)
{
    int64_t nchunks = (n + DOT_CHUNK - 1) / DOT_CHUNK;
    if (nchunks <= 1) {
        double total = 0.0;
        for (int64_t i = 0; i < n; i++)
            total += (double)a[i] * b[i];
        return total;
    }
    double *partial = malloc((size_t)nchunks * sizeof *partial);
    if (!partial) dpt_fatal("out of host memory in dot");
#pragma omp parallel for num_threads(ctx->threads) schedule(static)
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t end = (c + 1) * DOT_CHUNK < n ? (c + 1) * DOT_CHUNK : n;
        double acc = 0.0;
        for (int64_t i = c * DOT_CHUNK; i < end; i++)
            acc += (double)a[i] * b[i];
        partial[c] = acc;
    }
    double total = 0.0;
    for (int64_t c = 0; c < nchunks; c++)
        total += partial[c];
    free(partial);
    return total;
}

/* The sum of squares over a whole list: the same sums, in the same order, as one dot per
 * tensor (one call, as on CUDA, so the step's host reads count the same on both). */
static double cpu_sumsq_multi(dpt_ctx *ctx, const dpt_tensor_list *l)
{
    double total = 0.0;
    for (int i = 0; i < l->count; i++)
        total += cpu_dot(ctx, l->ptr[i * l->width], l->ptr[i * l->width], l->numel[i]);
    return total;
}

static void cpu_transpose_acc(dpt_ctx *ctx, const float *src, float *dst, int64_t rows, int64_t cols)
{
#pragma omp parallel for num_threads(ctx->threads) if (rows * cols > PAR_MIN)
    for (int64_t c = 0; c < cols; c++)
        for (int64_t r = 0; r < rows; r++)
            dst[c * rows + r] += src[r * cols + c];
}

static void cpu_gemm(dpt_ctx *ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                     const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                     int64_t ldc)
{
    (void)ctx;
    if (M == 0 || N == 0) return;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                (blasint)M, (blasint)N, (blasint)K, alpha, A, (blasint)lda, B, (blasint)ldb, beta, C,
                (blasint)ldc);
}

static void cpu_bias_add(dpt_ctx *ctx, float *y, const float *bias, int64_t rows, int64_t cols)
{
#pragma omp parallel for num_threads(ctx->threads) if (rows * cols > PAR_MIN)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            y[r * cols + c] += bias[c];
}

static void cpu_bias_grad(dpt_ctx *ctx, const float *dy, float *dbias, int64_t rows, int64_t cols)
{
    (void)ctx;
    /* Row by row (not column by column) so the inner loop is contiguous and vectorises. */
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            dbias[c] += dy[r * cols + c];
}

static void cpu_relu_fwd(dpt_ctx *ctx, const float *x, float *y, int64_t n)
{
#pragma omp parallel for num_threads(ctx->threads) if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

/* "dx += y > 0 ? dy : 0" is a conditional load to GCC, which it will not vectorise without
 * masked loads (baseline x86-64): it compiled to a branch per element, mispredicted half the
 * time, 28% of a ResNet-20 step. Masking dy's bits after an unconditional load vectorises.
 * Two loops, so the one that writes a fresh gradient neither reads dx nor needs it zeroed. */
static inline float masked(float dy, bool keep)
{
    uint32_t bits;
    memcpy(&bits, &dy, sizeof bits);
    bits &= -(uint32_t)keep;
    memcpy(&dy, &bits, sizeof dy);
    return dy;
}

__attribute__((noinline)) static void relu_bwd_range(const float *restrict y, const float *restrict dy,
                                                     float *restrict dx, int64_t n, bool accumulate)
{
    if (accumulate)
        for (int64_t i = 0; i < n; i++)
            dx[i] += masked(dy[i], y[i] > 0.0f);
    else
        for (int64_t i = 0; i < n; i++)
            dx[i] = masked(dy[i], y[i] > 0.0f);
}

static void cpu_relu_bwd(dpt_ctx *ctx, const float *y, const float *dy, float *dx, int64_t n, bool accumulate)
{
    int64_t chunk = 16384, chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for num_threads(ctx->threads) if (n > PAR_MIN)
    for (int64_t c = 0; c < chunks; c++) {
        int64_t lo = c * chunk, len = n - lo < chunk ? n - lo : chunk;
        relu_bwd_range(y + lo, dy + lo, dx + lo, len, accumulate);
    }
}

/* ---------------------------------------------------------------- 16-bit activations
 * The elementwise ops a bf16 activation passes through between convolutions (relu, the
 * residual add); a backend with act16 puts them in its table. Comparisons and sums in float,
 * as the fp32 kernels do (a NaN's relu is 0 there and here). */

void dpt_cpu_relu16_fwd(dpt_ctx *ctx, const uint16_t *x, uint16_t *y, int64_t n)
{
    /* On the bits: positive and finite or +inf is 0x0001..0x7f80 (a NaN, above, gives 0 as
     * float relu does); integer compares vectorise where the float conversion did not. */
#pragma omp parallel for simd num_threads(ctx->threads) if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        y[i] = (uint16_t)(x[i] - 1u) < 0x7f80u ? x[i] : 0;
}

__attribute__((noinline)) static void relu16_bwd_range(const uint16_t *restrict y, const float *restrict dy,
                                                       float *restrict dx, int64_t n, bool accumulate)
{
    /* the bit mask of relu_bwd_range: no branch per element; y > 0 is relu16_fwd's test */
    if (accumulate)
        for (int64_t i = 0; i < n; i++)
            dx[i] += masked(dy[i], (uint16_t)(y[i] - 1u) < 0x7f80u);
    else
        for (int64_t i = 0; i < n; i++)
            dx[i] = masked(dy[i], (uint16_t)(y[i] - 1u) < 0x7f80u);
}

void dpt_cpu_relu16_bwd(dpt_ctx *ctx, const uint16_t *y, const float *dy, float *dx, int64_t n, bool accumulate)
{
    int64_t chunk = 16384, chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for num_threads(ctx->threads) if (n > PAR_MIN)
    for (int64_t c = 0; c < chunks; c++) {
        int64_t lo = c * chunk, len = n - lo < chunk ? n - lo : chunk;
        relu16_bwd_range(y + lo, dy + lo, dx + lo, len, accumulate);
    }
}

void dpt_cpu_add16(dpt_ctx *ctx, int64_t n, const uint16_t *a, const uint16_t *b, uint16_t *out)
{
    /* half.h's rounding written without its early return, so the loop vectorises */
#pragma omp parallel for simd num_threads(ctx->threads) if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = dpt_f32_bits(dpt_f32_from_bf16(a[i]) + dpt_f32_from_bf16(b[i]));
        uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, nan = (u >> 16) | 0x0040u;
        out[i] = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
    }
}

/* GELU (tanh form) in spans the compiler vectorises (vec_math.h; one clone per ISA) */
DPT_CLONES static void gelu_fwd_span(const float *restrict x, float *restrict y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = dpt_gelu_value(x[i]);
}

DPT_CLONES static void gelu_bwd_span(const float *restrict x, const float *restrict dy, float *restrict dx, int64_t n,
                                     bool accumulate)
{
    if (accumulate)
        for (int64_t i = 0; i < n; i++)
            dx[i] += dy[i] * dpt_gelu_derivative(x[i]);
    else /* a fresh gradient: written, neither zeroed nor read */
        for (int64_t i = 0; i < n; i++)
            dx[i] = dy[i] * dpt_gelu_derivative(x[i]);
}

#define GELU_SPAN 4096

static void cpu_gelu_fwd(dpt_ctx *ctx, const float *x, float *y, int64_t n)
{
    int64_t spans = (n + GELU_SPAN - 1) / GELU_SPAN;
#pragma omp parallel for num_threads(ctx->threads) if (n > PAR_MIN)
    for (int64_t s = 0; s < spans; s++) {
        int64_t at = s * GELU_SPAN, len = n - at < GELU_SPAN ? n - at : GELU_SPAN;
        gelu_fwd_span(x + at, y + at, len);
    }
}

static void cpu_gelu_bwd(dpt_ctx *ctx, const float *x, const float *dy, float *dx, int64_t n, bool accumulate)
{
    int64_t spans = (n + GELU_SPAN - 1) / GELU_SPAN;
#pragma omp parallel for num_threads(ctx->threads) if (n > PAR_MIN)
    for (int64_t s = 0; s < spans; s++) {
        int64_t at = s * GELU_SPAN, len = n - at < GELU_SPAN ? n - at : GELU_SPAN;
        gelu_bwd_span(x + at, dy + at, dx + at, len, accumulate);
    }
}

static void cpu_softmax_fwd(dpt_ctx *ctx, const float *x, float *y, int64_t rows, int64_t cols)
{
#pragma omp parallel for num_threads(ctx->threads) if (rows * cols > PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float max = xr[0];
        for (int64_t c = 1; c < cols; c++)
            max = fmaxf(max, xr[c]);
        double total = 0.0;
        for (int64_t c = 0; c < cols; c++) {
            yr[c] = expf(xr[c] - max);
            total += yr[c];
        }
        float inv = (float)(1.0 / total);
        for (int64_t c = 0; c < cols; c++)
            yr[c] *= inv;
    }
}

static void cpu_softmax_bwd(dpt_ctx *ctx, const float *y, const float *dy, float *dx, int64_t rows,
                            int64_t cols)
{
#pragma omp parallel for num_threads(ctx->threads) if (rows * cols > PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *yr = y + r * cols, *dyr = dy + r * cols;
        double dot = 0.0;
        for (int64_t c = 0; c < cols; c++)
            dot += (double)dyr[c] * yr[c];
        for (int64_t c = 0; c < cols; c++)
            dx[r * cols + c] += yr[c] * (dyr[c] - (float)dot);
    }
}

/* One row of softmax cross-entropy: p = softmax(x) (exp(x - max) / sum, vectorised), returns
 * the log-sum-exp and the sum of the logits (for label smoothing). */
DPT_CLONES static float xent_row(const float *restrict x, float *restrict p, int64_t cols, float *sum_logits)
{
    float max = x[0], total = 0.0f, sl = 0.0f;
#pragma omp simd reduction(max : max)
    for (int64_t c = 0; c < cols; c++)
        max = x[c] > max ? x[c] : max;
#pragma omp simd reduction(+ : total, sl)
    for (int64_t c = 0; c < cols; c++) {
        p[c] = dpt_vexpf(x[c] - max);
        total += p[c];
        sl += x[c];
    }
    float inv = 1.0f / total;
#pragma omp simd
    for (int64_t c = 0; c < cols; c++)
        p[c] *= inv;
    *sum_logits = sl;
    return max + logf(total);
}

/* dlogits += scale (p - target), target = (1 - s) onehot(label) + s / C */
DPT_CLONES static void xent_row_bwd(const float *restrict p, float *restrict d, int64_t cols, int32_t label,
                                    float scale, float smoothing)
{
    float uniform = smoothing / (float)cols;
#pragma omp simd
    for (int64_t c = 0; c < cols; c++)
        d[c] += scale * (p[c] - uniform);
    d[label] -= scale * (1.0f - smoothing);
}

static void cpu_xent_fwd(dpt_ctx *ctx, const float *logits, const int32_t *labels, int64_t rows, int64_t cols,
                         float smoothing, int32_t ignore_index, float *probs, float *loss, float *count)
{
    double *row_loss = malloc((size_t)rows * sizeof *row_loss);
    if (!row_loss) dpt_fatal("out of host memory in cross-entropy");
#pragma omp parallel for num_threads(ctx->threads) if (rows * cols > PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = logits + r * cols;
        float sum_logits;
        double lse = xent_row(xr, probs + r * cols, cols, &sum_logits);
        /* -sum_c target_c log p_c with target = (1-s) onehot + s/C */
        row_loss[r] = labels[r] == ignore_index                 ? 0.0
                      : labels[r] < 0 || labels[r] >= cols ? NAN
                                                           : (1.0 - smoothing) * (lse - xr[labels[r]]) +
                                                                 smoothing * (lse - (double)sum_logits / (double)cols);
    }
    double total = 0.0;
    int64_t counted = 0;
    for (int64_t r = 0; r < rows; r++)
        total += row_loss[r], counted += labels[r] != ignore_index;
    free(row_loss);
    *loss = (float)(total / (double)counted);
    *count = (float)counted;
}

static void cpu_xent_bwd(dpt_ctx *ctx, const float *probs, const int32_t *labels, int64_t rows, int64_t cols,
                         float smoothing, int32_t ignore_index, const float *dloss, const float *count, float *dlogits)
{
    float scale = dloss[0] / count[0];
#pragma omp parallel for num_threads(ctx->threads) if (rows * cols > PAR_MIN)
    for (int64_t r = 0; r < rows; r++)
        if (labels[r] != ignore_index && labels[r] >= 0 && labels[r] < cols)
            xent_row_bwd(probs + r * cols, dlogits + r * cols, cols, labels[r], scale, smoothing);
}

void dpt_cpu_images_to_float(dpt_ctx *ctx, const uint8_t *x, float *y, int64_t n, int64_t c, int64_t hw,
                             const float *scale, const float *shift)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t ch = 0; ch < c; ch++) {
            const uint8_t *src = x + i * hw * c + ch;
            float *dst = y + (i * c + ch) * hw, a = scale[ch], b = shift[ch];
            for (int64_t p = 0; p < hw; p++)
                dst[p] = (float)src[p * c] * a + b;
        }
}

static void cpu_erase_box(dpt_ctx *ctx, float *x, int64_t c, int64_t h, int64_t w, bool nhwc, const int64_t box[4])
{
    for (int64_t ch = 0; ch < c; ch++)
        for (int64_t y = box[0]; y < box[1]; y++)
            for (int64_t xx = box[2]; xx < box[3]; xx++)
                x[nhwc ? (y * w + xx) * c + ch : (ch * h + y) * w + xx] = 0.0f;
}

static void cpu_mix_pairs(dpt_ctx *ctx, float *x, const dpt_pair_mix *m)
{
    int64_t per = m->c * m->h * m->w, n = m->n;
    if (!m->cut) {
#pragma omp parallel for num_threads(ctx->threads) if (n * per > PAR_MIN)
        for (int64_t i = 0; i < (n + 1) / 2; i++) {
            float *p = x + i * per, *q = x + (n - 1 - i) * per; /* p == q: the middle sample, with itself */
            for (int64_t e = 0; e < per; e++) {
                float u = p[e], v = q[e];
                p[e] = m->a * u + m->b * v;
                q[e] = m->a * v + m->b * u;
            }
        }
        return;
    }
    uint32_t *words = (uint32_t *)x; /* moved, never computed: int32 labels pass unchanged */
#pragma omp parallel for num_threads(ctx->threads) if (n * (m->y1 - m->y0) * (m->x1 - m->x0) * m->c > PAR_MIN)
    for (int64_t i = 0; i < n / 2; i++) {
        uint32_t *p = words + i * per, *q = words + (n - 1 - i) * per;
        for (int64_t ch = 0; ch < m->c; ch++)
            for (int64_t y = m->y0; y < m->y1; y++)
                for (int64_t xx = m->x0; xx < m->x1; xx++) {
                    int64_t e = m->nhwc ? (y * m->w + xx) * m->c + ch : (ch * m->h + y) * m->w + xx;
                    uint32_t t = p[e];
                    p[e] = q[e], q[e] = t;
                }
    }
}

static void cpu_correct_acc(dpt_ctx *ctx, const float *logits, const int32_t *labels, int64_t rows,
                            int64_t cols, int k, float *correct)
{
    (void)ctx;
    int64_t n = 0;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = logits + r * cols;
        int32_t y = labels[r];
        if (y < 0 || y >= cols || isnan(xr[y])) continue;
        int64_t above = 0; /* the rank of the label's logit */
        for (int64_t c = 0; c < cols && above < k; c++)
            above += xr[c] > xr[y] || (c < y && xr[c] == xr[y]) || isnan(xr[c]);
        n += above < k;
    }
    *correct += (float)n;
}

static void cpu_sgd_step(dpt_ctx *ctx, int64_t n, float *param, const float *grad, float *buf, float lr,
                         float momentum, float dampening, float weight_decay, bool nesterov, bool first_step)
{
#pragma omp parallel for num_threads(ctx->threads) if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float g = grad[i] + weight_decay * param[i];
        if (momentum != 0.0f) {
            buf[i] = first_step ? g : momentum * buf[i] + (1.0f - dampening) * g;
            g = nesterov ? g + momentum * buf[i] : buf[i];
        }
        param[i] -= lr * g;
    }
}

static void cpu_adamw_step(dpt_ctx *ctx, int64_t n, float *param, const float *grad, float *m, float *v,
                           float lr, float beta1, float beta2, float eps, float weight_decay,
                           float bias_correction1, float bias_correction2)
{
    float step_size = lr / bias_correction1;
    float bc2_sqrt = sqrtf(bias_correction2);
#pragma omp parallel for num_threads(ctx->threads) if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        param[i] *= 1.0f - lr * weight_decay;
        m[i] = beta1 * m[i] + (1.0f - beta1) * grad[i];
        v[i] = beta2 * v[i] + (1.0f - beta2) * grad[i] * grad[i];
        param[i] -= step_size * m[i] / (sqrtf(v[i]) / bc2_sqrt + eps);
    }
}

/* The CPU's device: host memory, and every call finished when it returns (no streams). */
static const dpt_device_iface cpu_device = {
    .raw_allocator = cpu_raw_allocator,
    .copy_h2d = cpu_copy,
    .copy_d2h = cpu_copy,
    .copy_d2d = cpu_copy,
};

/* fp32: a CPU's 16-bit paths are oneDNN's (bf16; fp16 is cuDNN's alone). */
static dpt_precision_choice cpu_precision_for(dpt_precision asked)
{
    if (asked == DPT_PRECISION_BF16)
        return (dpt_precision_choice){-1, "has no bf16 path: bf16 runs the convolutions on oneDNN's CPU kernels or cuDNN",
                                      "set [train] cpu_kernels = onednn"};
    if (asked == DPT_PRECISION_FP16)
        return (dpt_precision_choice){-1, "has no fp16 kernels: fp16 runs the convolutions on cuDNN (a CPU needs "
                                          "AVX512-FP16, which oneDNN 2.6 does not use for training)",
                                      "use precision = bf16 (fp32's range, no loss scaling needed) on a CPU with "
                                      "AVX512-BF16, or fp32"};
    return (dpt_precision_choice){DPT_PRECISION_FP32, "", ""};
}

dpt_backend dpt_backend_cpu = {
    .name = "cpu",
    .precision_for = cpu_precision_for,
    .init = cpu_init,
    .shutdown = cpu_shutdown,
    .dev = &cpu_device,
    .fill = cpu_fill,
    .axpy = cpu_axpy,
    .scale = cpu_scale,
    .add = cpu_add,
    .mul = cpu_mul,
    .dropout_mask = cpu_dropout_mask,
    .mul_acc = cpu_mul_acc,
    .sum = cpu_sum,
    .dot = cpu_dot,
    .sum_to = cpu_sum_to,
    .add_scalar = cpu_add_scalar,
    .transpose_acc = cpu_transpose_acc,
    .gemm = cpu_gemm,
    .bias_add = cpu_bias_add,
    .bias_grad = cpu_bias_grad,
    .relu_fwd = cpu_relu_fwd,
    .relu_bwd = cpu_relu_bwd,
    .gelu_fwd = cpu_gelu_fwd,
    .gelu_bwd = cpu_gelu_bwd,
    .softmax_fwd = cpu_softmax_fwd,
    .softmax_bwd = cpu_softmax_bwd,
    .xent_fwd = cpu_xent_fwd,
    .xent_bwd = cpu_xent_bwd,
    .correct_acc = cpu_correct_acc,
    .images_to_float = dpt_cpu_images_to_float,
    .mix_pairs = cpu_mix_pairs,
    .erase_box = cpu_erase_box,
    .conv2d_fwd = dpt_cpu_conv2d_fwd,
    .conv2d_bwd = dpt_cpu_conv2d_bwd,
    .bn_stats = dpt_cpu_bn_stats,
    .bn_bwd_stats = dpt_cpu_bn_bwd_stats,
    .channel_affine = dpt_cpu_channel_affine,
    .channel_affine2_acc = dpt_cpu_channel_affine2_acc,
    .maxpool_fwd = dpt_cpu_maxpool_fwd,
    .maxpool_bwd = dpt_cpu_maxpool_bwd,
    .avgpool_fwd = dpt_cpu_avgpool_fwd,
    .avgpool_bwd = dpt_cpu_avgpool_bwd,
    .sumsq_multi = cpu_sumsq_multi,
    .sgd_step = cpu_sgd_step,
    .adamw_step = cpu_adamw_step,
};

static pthread_once_t native_once = PTHREAD_ONCE_INIT;

static void native_fill(void)
{
    dpt_cpu_tensor_entries(&dpt_backend_cpu);
}

const dpt_backend *dpt_backend_cpu_native(void)
{
    pthread_once(&native_once, native_fill);
    return &dpt_backend_cpu;
}

static const dpt_backend_impl native_impl = {.device = DPT_DEVICE_CPU, .table = dpt_backend_cpu_native};
DPT_BUILTIN(backend_native) = {DPT_KIND_BACKEND, "native", "the CPU's own kernels: im2col + OpenBLAS (the reference)",
                               NULL, 0, &native_impl};
