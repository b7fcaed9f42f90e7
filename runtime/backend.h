/* backend.h: the kernel table a device backend fills. Layers and ops call only these entries
 * (through ctx->be), never a device API directly; ops_cpu.c and ops_cuda.cu each fill one.
 * All pointers are device memory of the context's device unless named host_*. Matrices are
 * row-major. Entries named *_acc or documented "+=" add into their output. */
#ifndef DPT_BACKEND_H
#define DPT_BACKEND_H

#include "dpt.h"
#include "alloc.h"

typedef struct dpt_backend {
    const char *name;
    /* Set up / tear down ctx->backend_state (streams, handles, thread settings). */
    bool (*init)(dpt_ctx *ctx, dpt_error *err);
    void (*shutdown)(dpt_ctx *ctx);
    /* Memory. */
    dpt_raw_allocator (*raw_allocator)(dpt_ctx *ctx);
    void (*copy_h2d)(dpt_ctx *ctx, void *dst, const void *host_src, size_t bytes);
    void (*copy_d2h)(dpt_ctx *ctx, void *host_dst, const void *src, size_t bytes);
    void (*copy_d2d)(dpt_ctx *ctx, void *dst, const void *src, size_t bytes);
    /* Elementwise: x, y, out have n elements. */
    void (*fill)(dpt_ctx *ctx, float *x, int64_t n, float value);
    void (*axpy)(dpt_ctx *ctx, int64_t n, float alpha, const float *x, float *y); /* y += alpha*x */
    void (*scale)(dpt_ctx *ctx, int64_t n, float alpha, const float *x, float *out); /* out = alpha*x */
    void (*add)(dpt_ctx *ctx, int64_t n, const float *a, const float *b, float *out);
    void (*mul)(dpt_ctx *ctx, int64_t n, const float *a, const float *b, float *out);
    void (*mul_acc)(dpt_ctx *ctx, int64_t n, const float *a, const float *b, float *out); /* += a*b */
    double (*sum)(dpt_ctx *ctx, const float *x, int64_t n);
    double (*dot)(dpt_ctx *ctx, const float *a, const float *b, int64_t n); /* in double */
    /* dst (cols, rows) += transpose of src (rows, cols). */
    void (*transpose_acc)(dpt_ctx *ctx, const float *src, float *dst, int64_t rows, int64_t cols);
    /* C (M, N) = alpha * op(A) op(B) + beta * C; op(A) is (M, K), op(B) is (K, N). */
    void (*gemm)(dpt_ctx *ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                 float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                 float *C, int64_t ldc);
    void (*bias_add)(dpt_ctx *ctx, float *y, const float *bias, int64_t rows, int64_t cols);
    void (*bias_grad)(dpt_ctx *ctx, const float *dy, float *dbias, int64_t rows, int64_t cols); /* += */
    /* Activations. */
    void (*relu_fwd)(dpt_ctx *ctx, const float *x, float *y, int64_t n);
    void (*relu_bwd)(dpt_ctx *ctx, const float *y, const float *dy, float *dx, int64_t n); /* += */
    void (*gelu_fwd)(dpt_ctx *ctx, const float *x, float *y, int64_t n);
    void (*gelu_bwd)(dpt_ctx *ctx, const float *x, const float *dy, float *dx, int64_t n); /* += */
    void (*softmax_fwd)(dpt_ctx *ctx, const float *x, float *y, int64_t rows, int64_t cols);
    void (*softmax_bwd)(dpt_ctx *ctx, const float *y, const float *dy, float *dx, int64_t rows,
                        int64_t cols); /* += */
    /* Softmax cross-entropy. probs (rows, cols) receives the softmax; returns the summed loss. */
    double (*xent_fwd)(dpt_ctx *ctx, const float *logits, const int32_t *host_labels, int64_t rows,
                       int64_t cols, float smoothing, float *probs);
    /* dlogits += scale * (probs - target), target = (1-s) onehot + s/cols. */
    void (*xent_bwd)(dpt_ctx *ctx, const float *probs, const int32_t *host_labels, int64_t rows,
                     int64_t cols, float smoothing, float scale, float *dlogits);
    int64_t (*count_correct)(dpt_ctx *ctx, const float *logits, const int32_t *host_labels,
                             int64_t rows, int64_t cols);
    /* Optimizer updates over n parameters (one launch over a flat range). */
    void (*sgd_step)(dpt_ctx *ctx, int64_t n, float *param, const float *grad, float *momentum_buf,
                     float lr, float momentum, float dampening, float weight_decay, bool nesterov,
                     bool first_step);
    void (*adamw_step)(dpt_ctx *ctx, int64_t n, float *param, const float *grad, float *exp_avg,
                       float *exp_avg_sq, float lr, float beta1, float beta2, float eps,
                       float weight_decay, float bias_correction1, float bias_correction2);
} dpt_backend;

extern const dpt_backend dpt_backend_cpu;

#endif
