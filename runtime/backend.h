/* backend.h: the kernel table a device backend fills. Layers and ops call only these entries
 * (through ctx->be), never a device API directly; ops_cpu.c and ops_cuda.cu each fill one.
 * All pointers are device memory of the context's device unless named host_*. Matrices are
 * row-major. Entries named *_acc or documented "+=" add into their output. */
#ifndef DPT_BACKEND_H
#define DPT_BACKEND_H

#include "dpt.h"
#include "alloc.h"
#include "tensor.h"

/* Shapes of a 2-D convolution over NCHW tensors: x (n, c_in, h, w), w (c_out, c_in/groups,
 * kh, kw), y (n, c_out, oh, ow). */
typedef struct dpt_conv_shape {
    int64_t n, c_in, h, w, c_out, kh, kw, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups, oh, ow;
    int64_t x_layout; /* dpt_layout of x (and of dx) */
    int64_t x_dtype;  /* dpt_dtype of x (dx is F32) */
    int64_t y_dtype;  /* dpt_dtype wished for y (conv2d_io says what it gets) */
} dpt_conv_shape;

/* How a backend's convolution takes x and writes y for one shape (conv2d_io): the layout x must
 * be in (the layer converts it first), whether x must be F32 (else it is read as it comes,
 * F32 or BF16), and y's layout and dtype. dy arrives in y's layout; dx is written in x's. */
typedef struct dpt_conv_io {
    dpt_layout x_layout;
    bool x_f32;
    dpt_layout y_layout;
    dpt_dtype y_dtype;
} dpt_conv_io;

/* What a backend runs for [train] precision = asked (precision_for): `precision` is asked or a
 * lower one it falls back to (`why` then says so, for the header), or -1 when it has no path
 * for it (`why` then completes "the BACKEND backend ..." and `hint` is the error's HINT). */
typedef struct dpt_precision_choice {
    int precision;
    const char *why, *hint;
} dpt_precision_choice;

/* A batch of n samples of c x h x w values (NCHW per sample, or NHWC), each sample i mixed
 * with sample j = n-1-i. cut: the values of rows [y0, y1) and columns [x0, x1), all channels,
 * exchanged between i and j (moved as 4-byte words, never computed: int32 labels may pass as
 * c = h = w = 1 with the whole "box"); else x_i = a x_i + b x_j with each product and the sum
 * rounded to float (timm's x.mul_(lam).add_(x.flip(0).mul_(1 - lam)); the middle sample of an
 * odd n with itself). */
typedef struct dpt_pair_mix {
    int64_t n, c, h, w;
    bool nhwc, cut;
    float a, b;
    int64_t y0, y1, x0, x1;
} dpt_pair_mix;

/* Shapes of a 2-D pooling window: x (n, c, h, w) -> y (n, c, oh, ow), both (and their
 * gradients) in `layout` (NCHW unless the backend sets pool_any_layout). */
typedef struct dpt_pool_shape {
    int64_t n, c, h, w, kh, kw, stride_h, stride_w, pad_h, pad_w, oh, ow;
    int64_t layout; /* dpt_layout */
    int64_t dtype;  /* dpt_dtype of x and y (BF16 only where pool16 says so); dx and dy are F32 */
} dpt_pool_shape;

/* Streams of a device context: kernels run on COMPUTE; the loader's host-to-device copies on
 * COPY; NCCL's AllReduces on COMM. Work on different streams is ordered only by events. */
typedef enum dpt_stream { DPT_STREAM_COMPUTE, DPT_STREAM_COPY, DPT_STREAM_COMM } dpt_stream;
typedef struct dpt_event dpt_event; /* a marker in a stream (a cudaEvent_t for CUDA) */

/* Many tensors' buffers for the multi-tensor entries: `width` pointers per tensor (e.g.
 * param, grad, state...) and its length. `key` is a hash of every pointer and length, so a
 * backend may keep a device copy of the table and upload it only when it changes. */
typedef struct dpt_tensor_list {
    int count, width;
    float **ptr;    /* count * width, tensor-major */
    int64_t *numel; /* count */
    uint64_t key;
} dpt_tensor_list;

/* The device interface: memory, copies, streams and events, what the loader, DDP and the
 * allocator use; a backend's kernels are the rest of its table. All pointers are device memory
 * of the context's device unless named host_*. */
typedef struct dpt_device_iface {
    /* Memory. */
    dpt_raw_allocator (*raw_allocator)(dpt_ctx *ctx);
    void (*copy_h2d)(dpt_ctx *ctx, void *dst, const void *host_src, size_t bytes);
    void (*copy_d2h)(dpt_ctx *ctx, void *host_dst, const void *src, size_t bytes);
    void (*copy_d2d)(dpt_ctx *ctx, void *dst, const void *src, size_t bytes);
    /* Asynchrony. NULL on the CPU, where every call has finished when it returns. host_alloc
     * gives pinned memory (the only kind a copy can overlap with compute from); the copy is
     * enqueued on stream s and reads host_src until an event recorded after it completes.
     * These may be called from a thread other than the context's (the loader's prefetch
     * thread), each on its own stream. */
    void *(*host_alloc)(dpt_ctx *ctx, size_t bytes);
    void (*host_free)(dpt_ctx *ctx, void *ptr);
    void (*copy_h2d_async)(dpt_ctx *ctx, void *dst, const void *host_src, size_t bytes, dpt_stream s);
    dpt_event *(*event_new)(dpt_ctx *ctx);
    void (*event_free)(dpt_ctx *ctx, dpt_event *ev);
    void (*event_record)(dpt_ctx *ctx, dpt_event *ev, dpt_stream s); /* marks s's work so far */
    void (*stream_wait)(dpt_ctx *ctx, dpt_stream s, dpt_event *ev);  /* s's later work waits for ev */
    void (*event_sync)(dpt_ctx *ctx, dpt_event *ev);                 /* the host waits for ev */
    void (*synchronize)(dpt_ctx *ctx); /* every stream of the context is idle on return */
    /* The device's free and total memory as its driver reports them (NULL: unknown). */
    void (*mem_info)(dpt_ctx *ctx, size_t *free_bytes, size_t *total_bytes);
} dpt_device_iface;

typedef struct dpt_backend {
    const char *name;
    /* The precision it runs for the one asked (dpt_ctx_new decides with it, once, before init);
     * NULL: fp32 only. */
    dpt_precision_choice (*precision_for)(dpt_precision asked);
    /* Under precision = bf16: a bf16 matrix product's speed over fp32's, measured on this
     * context's threads (conversions included, as training pays them); NULL: not measured. */
    double (*bf16_speedup)(dpt_ctx *ctx);
    /* Set up / tear down ctx->backend_state (streams, handles, thread settings). */
    bool (*init)(dpt_ctx *ctx, dpt_error *err);
    void (*shutdown)(dpt_ctx *ctx);
    /* ctx->threads is about to become `threads` (dpt_ctx_set_threads, between steps): what the
     * backend made for the old count (oneDNN's primitives keep the count they were made with)
     * is kept for a return to it. NULL: nothing depends on the count. */
    void (*set_threads)(dpt_ctx *ctx, int threads);
    const dpt_device_iface *dev; /* memory, copies, streams, events */
    /* Image batches (the loader's uint8 ones): n samples of hw pixels x c bytes, HWC, to float
     * (n, c, h, w) with y = x * scale[ch] + shift[ch], c <= 4 (scale, shift: host arrays). */
    void (*images_to_float)(dpt_ctx *ctx, const uint8_t *x, float *y, int64_t n, int64_t c, int64_t hw,
                            const float *scale, const float *shift);
    /* Random erasing (data/batch_aug.c): one sample's c x h x w values (NCHW, or NHWC) in rows
     * [box[0], box[1]) and columns [box[2], box[3]), every channel, set to 0. */
    void (*erase_box)(dpt_ctx *ctx, float *x, int64_t c, int64_t h, int64_t w, bool nhwc, const int64_t box[4]);
    /* Mixup and CutMix of a batch in place (data/batch_aug.c): sample i with sample n-1-i. */
    void (*mix_pairs)(dpt_ctx *ctx, float *x, const dpt_pair_mix *m);
    /* Elementwise: x, y, out have n elements. */
    void (*fill)(dpt_ctx *ctx, float *x, int64_t n, float value);
    void (*axpy)(dpt_ctx *ctx, int64_t n, float alpha, const float *x, float *y);    /* y += alpha*x */
    void (*scale)(dpt_ctx *ctx, int64_t n, float alpha, const float *x, float *out); /* out = alpha*x */
    void (*add)(dpt_ctx *ctx, int64_t n, const float *a, const float *b, float *out);
    void (*mul)(dpt_ctx *ctx, int64_t n, const float *a, const float *b, float *out);
    /* Inverted dropout's mask: mask[i] = 0 where dpt_rng_at(key, i) < p, else 1 / (1 - p)
     * (the same values on every backend). */
    void (*dropout_mask)(dpt_ctx *ctx, float *mask, int64_t n, uint64_t key, float p);
    void (*mul_acc)(dpt_ctx *ctx, int64_t n, const float *a, const float *b, float *out); /* += a*b */
    double (*sum)(dpt_ctx *ctx, const float *x, int64_t n);
    double (*dot)(dpt_ctx *ctx, const float *a, const float *b, int64_t n); /* in double */
    /* out[0] = (float)(sum(x) * factor), sum as `sum` makes it, left where out is (a loss's mean
     * in the step without a host read); y[i] += alpha * s[0] for i < n with s where y is (a
     * sum's gradient). NULL: the sum read back and copied over. */
    void (*sum_to)(dpt_ctx *ctx, const float *x, int64_t n, float factor, float *out);
    void (*add_scalar)(dpt_ctx *ctx, int64_t n, float alpha, const float *s, float *y);
    /* dst (cols, rows) += transpose of src (rows, cols). */
    void (*transpose_acc)(dpt_ctx *ctx, const float *src, float *dst, int64_t rows, int64_t cols);
    /* C (M, N) = alpha * op(A) op(B) + beta * C; op(A) is (M, K), op(B) is (K, N). */
    void (*gemm)(dpt_ctx *ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
    void (*bias_add)(dpt_ctx *ctx, float *y, const float *bias, int64_t rows, int64_t cols);
    void (*bias_grad)(dpt_ctx *ctx, const float *dy, float *dbias, int64_t rows, int64_t cols); /* += */
    /* Activations. */
    void (*relu_fwd)(dpt_ctx *ctx, const float *x, float *y, int64_t n);
    /* dx = (y > 0 ? dy : 0), or += with accumulate (a fresh gradient is written, not zeroed
     * and then added to: the zero fill and one read of dx were a fifth of the CNN's step) */
    void (*relu_bwd)(dpt_ctx *ctx, const float *y, const float *dy, float *dx, int64_t n, bool accumulate);
    void (*gelu_fwd)(dpt_ctx *ctx, const float *x, float *y, int64_t n);
    void (*gelu_bwd)(dpt_ctx *ctx, const float *x, const float *dy, float *dx, int64_t n, bool accumulate); /* = or += */
    void (*softmax_fwd)(dpt_ctx *ctx, const float *x, float *y, int64_t rows, int64_t cols);
    void (*softmax_bwd)(dpt_ctx *ctx, const float *y, const float *dy, float *dx, int64_t rows,
                        int64_t cols); /* += */
    /* Softmax cross-entropy over labels in device memory (in [0, cols); one outside gives a NaN
     * loss for its row; a row whose label is ignore_index counts for nothing). probs (rows,
     * cols) receives the softmax, *count the rows counted and *loss the mean over them (0 of 0:
     * NaN), floats on the device: nothing is read back to the host. */
    void (*xent_fwd)(dpt_ctx *ctx, const float *logits, const int32_t *labels, int64_t rows, int64_t cols,
                     float smoothing, int32_t ignore_index, float *probs, float *loss, float *count);
    /* dlogits += dloss[0] / count[0] * (probs - target), target = (1-s) onehot + s/cols, for the
     * rows counted; dloss is the loss's gradient, on the device. */
    void (*xent_bwd)(dpt_ctx *ctx, const float *probs, const int32_t *labels, int64_t rows, int64_t cols,
                     float smoothing, int32_t ignore_index, const float *dloss, const float *count, float *dlogits);
    /* *correct (a float on the device) += the rows whose label is among their k largest logits:
     * fewer than k logits above the label's, ties with a lower index counted above it (k = 1:
     * the first arg-max, torch.argmax's); a label out of range or a NaN logit is wrong. */
    void (*correct_acc)(dpt_ctx *ctx, const float *logits, const int32_t *labels, int64_t rows, int64_t cols, int k,
                        float *correct);
    /* dst (shape (N, C, H, W)) = src in another layout (+= with accumulate). NULL: the
     * backend never produces anything but NCHW. */
    void (*relayout)(dpt_ctx *ctx, const float *src, dpt_layout src_layout, float *dst, dpt_layout dst_layout,
                     const int64_t *shape, bool accumulate);
    /* [train] memory_format = nhwc is kept: conv2d_io answers NHWC when ctx->nhwc, and batch
     * norm and pooling (or plain() before them) take it. */
    bool channels_last;
    /* 16-bit activations. act16: the backend keeps [train] precision = bf16's activations in
     * BF16 between the ops that take them (conv2d's x and y per conv2d_io, the fused batch
     * norm, relu16, add16); the entries below are then set. All shapes are (N, C, H, W).
     * widen: dst (F32, dst_layout) = src (BF16, src_layout), or += with accumulate. relu16_bwd
     * writes or adds into dx as relu_bwd; add16 rounds the float sum to nearest even. */
    bool act16;
    void (*widen)(dpt_ctx *ctx, const void *src, dpt_layout src_layout, float *dst, dpt_layout dst_layout,
                  const int64_t *shape, bool accumulate);
    void (*relu16_fwd)(dpt_ctx *ctx, const uint16_t *x, uint16_t *y, int64_t n);
    void (*relu16_bwd)(dpt_ctx *ctx, const uint16_t *y, const float *dy, float *dx, int64_t n, bool accumulate);
    void (*add16)(dpt_ctx *ctx, int64_t n, const uint16_t *a, const uint16_t *b, uint16_t *out);
    /* The one place a convolution's layouts and dtypes are decided: how conv2d_fwd takes x and
     * writes y for this shape (s->x_layout, s->x_dtype: x as it comes; s->y_dtype: what the
     * context keeps activations in). NULL: NCHW F32 in and out. */
    void (*conv2d_io)(dpt_ctx *ctx, const dpt_conv_shape *s, dpt_conv_io *io);
    /* Convolution (x and y in the dtypes s names: BF16 data behind a float pointer, as in a
     * tensor's `data`). dx, dw, db may be NULL (not wanted). dw and db accumulate (+=); dx too with
     * dx_accumulate, else it is written (its first writer: no zero fill, no read). x is read for dw
     * only: NULL without it (the transposed convolution's forward is a backward data alone). */
    void (*conv2d_fwd)(dpt_ctx *ctx, const dpt_conv_shape *s, const float *x, const float *w,
                       const float *bias, float *y);
    void (*conv2d_bwd)(dpt_ctx *ctx, const dpt_conv_shape *s, const float *x, const float *w, const float *dy,
                       float *dx, bool dx_accumulate, float *dw, float *dbias);
    /* Batch norm over (n, c, hw): per-channel sums in double, on the host (they are AllReduced
     * for SyncBatchNorm), then per-channel affine maps on the device. */
    void (*bn_stats)(dpt_ctx *ctx, const float *x, int64_t n, int64_t c, int64_t hw, double *host_sum,
                     double *host_sumsq);
    void (*bn_bwd_stats)(dpt_ctx *ctx, const float *x, const float *dy, int64_t n, int64_t c, int64_t hw,
                         const double *host_mean, double *host_sum_dy, double *host_sum_dy_xmu);
    /* y = scale[c] * x + shift[c] */
    void (*channel_affine)(dpt_ctx *ctx, const float *x, float *y, int64_t n, int64_t c, int64_t hw,
                           const float *host_scale, const float *host_shift);
    /* dx += a[c] * dy + b[c] * x + k[c] */
    void (*channel_affine2_acc)(dpt_ctx *ctx, const float *dy, const float *x, float *dx, int64_t n,
                                int64_t c, int64_t hw, const float *host_a, const float *host_b,
                                const float *host_k);
    /* Training-mode batch norm with the statistics kept on the device (cuDNN, oneDNN); NULL:
     * layers use the host-statistics entries above. x and y in `layout` (NCHW only on CUDA).
     * y = gamma * (x - mean) / sqrt(var + eps) + beta from the batch; running_mean/var (c each)
     * move by `momentum` (unbiased variance), or are both NULL and stay (a checkpointed
     * function's recomputation: they moved in its first run); save_mean and save_stat (c each) are what
     * bn_fused_bwd needs (cuDNN: the inverse std; oneDNN: the variance). bn_fused_bwd writes
     * dx (or adds into it, with dx_accumulate) and adds into dgamma and dbeta. gamma and beta
     * are never NULL. x and y in `dtype` (BF16 only with act16; dy and dx are F32).
     * relu_ws non-NULL (only where bn_relu_ws_bytes gave its size): a ReLU after it in the same
     * pass (oneDNN's fuse_norm_relu): y = max(norm, 0), forward leaves in relu_ws where y > 0
     * and backward applies that mask to dy. */
    void (*bn_fused_fwd)(dpt_ctx *ctx, const float *x, float *y, int64_t n, int64_t c, int64_t hw,
                         dpt_layout layout, dpt_dtype dtype, const float *gamma, const float *beta,
                         float *running_mean, float *running_var, double momentum, double eps, float *save_mean,
                         float *save_stat, void *relu_ws);
    void (*bn_fused_bwd)(dpt_ctx *ctx, const float *x, const float *dy, float *dx, bool dx_accumulate,
                         int64_t n, int64_t c, int64_t hw, dpt_layout layout, dpt_dtype dtype,
                         const float *gamma, float *dgamma, float *dbeta, double eps, const float *save_mean,
                         const float *save_stat, const void *relu_ws);
    /* The mask's bytes for that fused ReLU; 0 for a shape or dtype it does not fuse; NULL: the
     * backend fuses none (the layer runs batch norm, then relu_). */
    size_t (*bn_relu_ws_bytes)(dpt_ctx *ctx, int64_t n, int64_t c, int64_t hw, dpt_layout layout, dpt_dtype dtype,
                               double eps);
    /* Inference-mode batch norm from the running statistics (no gradient). */
    void (*bn_fused_infer)(dpt_ctx *ctx, const float *x, float *y, int64_t n, int64_t c, int64_t hw,
                           dpt_layout layout, dpt_dtype dtype, const float *gamma, const float *beta,
                           const float *running_mean, const float *running_var, double eps);
    /* Pooling. Max pooling's forward leaves in `ws` where each maximum was, for its backward
     * (maxpool_ws_bytes of it; NULL entry: one int32 per output, the flat input index).
     * Backward writes dx, or adds into it with dx_accumulate. Average pooling counts padding
     * (PyTorch's count_include_pad = True). pool_any_layout: x may come in any layout the backend
     * makes (blocked, NHWC; y and the gradients share it); otherwise pooling takes NCHW. */
    bool pool_any_layout;
    /* Whether this pooling runs on BF16 x and y (act16 backends; NULL: never). */
    bool (*pool16)(dpt_ctx *ctx, const dpt_pool_shape *s, bool max);
    size_t (*maxpool_ws_bytes)(dpt_ctx *ctx, const dpt_pool_shape *s);
    void (*maxpool_fwd)(dpt_ctx *ctx, const dpt_pool_shape *s, const float *x, float *y, void *ws);
    void (*maxpool_bwd)(dpt_ctx *ctx, const dpt_pool_shape *s, const float *dy, const void *ws, float *dx,
                        bool dx_accumulate);
    void (*avgpool_fwd)(dpt_ctx *ctx, const dpt_pool_shape *s, const float *x, float *y);
    void (*avgpool_bwd)(dpt_ctx *ctx, const dpt_pool_shape *s, const float *dy, float *dx,
                        bool dx_accumulate);
    /* Optimizer updates over n parameters (one launch over a flat range). */
    void (*sgd_step)(dpt_ctx *ctx, int64_t n, float *param, const float *grad, float *momentum_buf, float lr,
                     float momentum, float dampening, float weight_decay, bool nesterov, bool first_step);
    void (*adamw_step)(dpt_ctx *ctx, int64_t n, float *param, const float *grad, float *exp_avg,
                       float *exp_avg_sq, float lr, float beta1, float beta2, float eps, float weight_decay,
                       float bias_correction1, float bias_correction2);
    /* The same updates and the sum of squares over a whole list in one call (one launch on
     * CUDA). Lists: sgd (param, grad, momentum_buf), adamw (param, grad, exp_avg,
     * exp_avg_sq), sumsq (x). NULL: callers loop over the single-tensor entries. */
    void (*sgd_step_multi)(dpt_ctx *ctx, const dpt_tensor_list *l, float lr, float momentum, float dampening,
                           float weight_decay, bool nesterov, bool first_step);
    void (*adamw_step_multi)(dpt_ctx *ctx, const dpt_tensor_list *l, float lr, float beta1, float beta2,
                             float eps, float weight_decay, float bias_correction1, float bias_correction2);
    /* Every tensor of a width-1 list *= factor in one launch; factor 0 writes zeros (a NaN
     * too: zero_grad). NULL: the callers scale or fill tensor by tensor. */
    void (*scale_multi)(dpt_ctx *ctx, const dpt_tensor_list *l, float factor);
    double (*sumsq_multi)(dpt_ctx *ctx, const dpt_tensor_list *l);
    /* Building blocks optimizers are written with (dpt_foreach_*), over a whole list in one
     * call. axpby: lists (y, x), y = alpha * x + beta * y (beta 0: y's old values are not read).
     * unary: lists (y, x), y = op(x) (y may be x). */
    void (*axpby_multi)(dpt_ctx *ctx, const dpt_tensor_list *l, float alpha, float beta);
    void (*unary_multi)(dpt_ctx *ctx, const dpt_tensor_list *l, dpt_unary_op op);

    /* ---- tensor primitives (ops_cpu_tensor.c, cuda_tensor.cu): what attention, layer norm,
     * embeddings and broadcasting are made of. Shapes have at most DPT_MAX_DIMS dims; strides
     * are in elements. */
    /* dst[i] = src[i] (or +=) for every index i of shape, each side addressed by its strides. */
    void (*strided_copy)(dpt_ctx *ctx, int ndim, const int64_t *shape, const float *src, const int64_t *src_strides,
                         float *dst, const int64_t *dst_strides, bool accumulate);
    /* out (contiguous, shape) = a op b; a and b addressed by strides (0 along broadcast axes). */
    void (*binary)(dpt_ctx *ctx, dpt_binary_op op, int ndim, const int64_t *shape, const float *a,
                   const int64_t *a_strides, const float *b, const int64_t *b_strides, float *out);
    /* dst = alpha * (the sum of src over the axes where dst's stride is 0) (or +=); src is
     * contiguous in shape, dst addressed by dst_strides over shape. Every dst element sums its
     * sources in index order (the same bits on every run and thread count). */
    void (*reduce_into)(dpt_ctx *ctx, int ndim, const int64_t *shape, const float *src, float *dst,
                        const int64_t *dst_strides, float alpha, bool accumulate);
    /* Rows of x (rows, cols): y[r] = the sum, or the largest (arg in idx, int32; the first of ties). */
    void (*rows_sum)(dpt_ctx *ctx, const float *x, int64_t rows, int64_t cols, float *y);
    void (*rows_max)(dpt_ctx *ctx, const float *x, int64_t rows, int64_t cols, float *y, int32_t *idx);
    /* dx[r, idx[r]] += dy[r] */
    void (*rows_max_bwd)(dpt_ctx *ctx, const float *dy, const int32_t *idx, int64_t rows, int64_t cols, float *dx);
    /* y = x - log(sum(exp(x))) per row; backward dx += dy - exp(y) * sum(dy) */
    void (*log_softmax_fwd)(dpt_ctx *ctx, const float *x, float *y, int64_t rows, int64_t cols);
    void (*log_softmax_bwd)(dpt_ctx *ctx, const float *y, const float *dy, float *dx, int64_t rows, int64_t cols);
    /* y = op(x); backward dx += dy * op'(x) (from x and, where cheaper, y) */
    void (*unary_fwd)(dpt_ctx *ctx, dpt_unary_op op, int64_t n, const float *x, float *y);
    void (*unary_bwd)(dpt_ctx *ctx, dpt_unary_op op, int64_t n, const float *x, const float *y, const float *dy,
                      float *dx);
    /* out (n, dim) = weight[ids[i]] (weight (vocab, dim)); an id outside [0, vocab) gives NaN rows.
     * Backward dweight[ids[i]] += dy[i] in i order for every row of dweight (no atomics: the same
     * bits on every run). */
    void (*embedding_fwd)(dpt_ctx *ctx, const float *weight, int64_t vocab, int64_t dim, const int32_t *ids,
                          int64_t n, float *out);
    void (*embedding_bwd)(dpt_ctx *ctx, const int32_t *ids, int64_t n, const float *dy, int64_t vocab, int64_t dim,
                          float *dweight);
    /* Layer normalization over the last dim of x (rows, dim): y = (x - mean) * rstd * w + b
     * (w, b may be NULL: 1 and 0); mean and rstd (rows) kept for backward, which adds into dx,
     * dw and db (each may be NULL). */
    void (*layernorm_fwd)(dpt_ctx *ctx, const float *x, int64_t rows, int64_t dim, const float *w, const float *b,
                          float eps, float *y, float *mean, float *rstd);
    void (*layernorm_bwd)(dpt_ctx *ctx, const float *x, const float *dy, int64_t rows, int64_t dim, const float *w,
                          const float *mean, const float *rstd, float *dx, float *dw, float *db);
    /* RMS normalization over the last dim (dpt_rms_norm): y = x rstd w, rstd = 1 / sqrt(mean(x^2)
     * + eps) kept for backward, which adds into dx and dw (each may be NULL). NULL: not offered
     * (dpt_rms_norm then composes it from elementwise ops). */
    void (*rmsnorm_fwd)(dpt_ctx *ctx, const float *x, int64_t rows, int64_t dim, const float *w, float eps, float *y,
                        float *rstd);
    void (*rmsnorm_bwd)(dpt_ctx *ctx, const float *x, const float *dy, int64_t rows, int64_t dim, const float *w,
                        const float *rstd, float *dx, float *dw);
    /* Rotary position embeddings (dpt_rotary) of x (B, T, H hs) at positions [pos, pos + T):
     * head pairs (i, i + hs/2) turned by the angle whose cos and sin are cos[t][i], sin[t][i]
     * (tables (positions, hs/2)); inverse: by minus the angle (backward). out (B, T, H hs) is
     * written, or added to when accumulate. NULL: not offered (dpt_rotary composes it). */
    void (*rotary)(dpt_ctx *ctx, const float *x, int64_t B, int64_t T, int64_t H, int64_t hs, const float *cos,
                   const float *sin, int64_t pos, bool inverse, float *out, bool accumulate);
    /* Self-attention over fused qkv (B, T, 3 H hs) -> y (B, T, H hs) (dpt_attention), keeping each
     * query row's log-sum-exp of its scaled scores in lse (B, H, T). Backward adds into dqkv from
     * dy (writes it when !accumulate: a fresh gradient), recomputing the scores; scratch (B, H, T)
     * floats it may use. */
    void (*attention_fwd)(dpt_ctx *ctx, const float *qkv, int64_t B, int64_t T, int64_t H, int64_t hs, bool causal,
                          float *y, float *lse);
    void (*attention_bwd)(dpt_ctx *ctx, const float *qkv, const float *y, const float *dy, const float *lse,
                          int64_t B, int64_t T, int64_t H, int64_t hs, bool causal, float *scratch, float *dqkv,
                          bool accumulate);
    /* batch GEMMs C_i (M, N) = alpha * op(A_i) op(B_i) + beta * C_i, A_i = A + i * stride_a, ... */
    void (*gemm_batched)(dpt_ctx *ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                         const float *A, int64_t lda, int64_t stride_a, const float *B, int64_t ldb, int64_t stride_b,
                         float beta, float *C, int64_t ldc, int64_t stride_c, int64_t batch);
} dpt_backend;

/* A backend's registration impl (DPT_KIND_BACKEND): the table for its kind of device, and the
 * device-level questions (how many, what --env prints). Each backend registers from its own
 * file (ops_cpu.c "native", ops_cpu_dnnl.c "onednn", ops_cuda.cu "cuda"); context.c picks by
 * name and knows no backend. */
typedef struct dpt_backend_impl {
    dpt_device_kind device;
    const dpt_backend *(*table)(void);
    int (*device_count)(void);                            /* NULL: one (the CPU) */
    void (*print_env)(FILE *out);                         /* NULL: nothing to say */
    void (*pci_bus_id)(int index, char *buf, size_t cap); /* NULL: none */
    const char *(*unavailable)(void); /* why table() is NULL (NULL: not said) */
} dpt_backend_impl;

/* ops_cpu.c: the CPU table with the native kernels. Its static part is dpt_backend_cpu (other
 * CPU files call its entries directly); dpt_backend_cpu_native() fills the families kept in
 * files of their own (dpt_cpu_tensor_entries: ops_cpu_tensor.c) once and returns it. */
extern dpt_backend dpt_backend_cpu;
const dpt_backend *dpt_backend_cpu_native(void);
void dpt_cpu_tensor_entries(dpt_backend *be);
/* ops_cpu_dnnl.c: the CPU table with oneDNN convolutions; NULL in a build without oneDNN. */
const dpt_backend *dpt_backend_cpu_onednn(void);

/* A list with room for `count` tensors of `width` pointers; set entries with
 * dpt_tensor_list_set, then dpt_tensor_list_seal computes the key. */
void dpt_tensor_list_init(dpt_tensor_list *l, int count, int width);
void dpt_tensor_list_set(dpt_tensor_list *l, int index, int64_t numel, float *const *ptrs);
void dpt_tensor_list_seal(dpt_tensor_list *l);
void dpt_tensor_list_free(dpt_tensor_list *l);

/* A layer whose kernel this backend does not provide (a NULL entry) stops with a message. */
#define DPT_REQUIRE_OP(ctx, entry, op)                                                                       \
    do {                                                                                                     \
        if (!(ctx)->be->entry)                                                                               \
            dpt_abort_job("%s is not available on the %s backend yet\nHINT: set [train] device = cpu", op,   \
                          (ctx)->be->name);                                                                  \
    } while (0)

/* ops_cpu.c: the 16-bit activations' elementwise kernels (a table with act16 takes them). */
void dpt_cpu_relu16_fwd(dpt_ctx *ctx, const uint16_t *x, uint16_t *y, int64_t n);
void dpt_cpu_relu16_bwd(dpt_ctx *ctx, const uint16_t *y, const float *dy, float *dx, int64_t n, bool accumulate);
void dpt_cpu_add16(dpt_ctx *ctx, int64_t n, const uint16_t *a, const uint16_t *b, uint16_t *out);

/* ops_cpu_nn.c: the CPU convolution, batch-norm and pooling kernels of the table. */
/* The CPU's images_to_float (also the loader's, per sample, on its workers). */
void dpt_cpu_images_to_float(dpt_ctx *ctx, const uint8_t *x, float *y, int64_t n, int64_t c, int64_t hw,
                             const float *scale, const float *shift);
void dpt_cpu_conv2d_fwd(dpt_ctx *ctx, const dpt_conv_shape *s, const float *x, const float *w,
                        const float *bias, float *y);
void dpt_cpu_conv2d_bwd(dpt_ctx *ctx, const dpt_conv_shape *s, const float *x, const float *w,
                        const float *dy, float *dx, bool dx_accumulate, float *dw, float *dbias);
void dpt_cpu_bn_stats(dpt_ctx *ctx, const float *x, int64_t n, int64_t c, int64_t hw, double *sum,
                      double *sumsq);
void dpt_cpu_bn_bwd_stats(dpt_ctx *ctx, const float *x, const float *dy, int64_t n, int64_t c, int64_t hw,
                          const double *mean, double *sum_dy, double *sum_dy_xmu);
void dpt_cpu_channel_affine(dpt_ctx *ctx, const float *x, float *y, int64_t n, int64_t c, int64_t hw,
                            const float *scale, const float *shift);
void dpt_cpu_channel_affine2_acc(dpt_ctx *ctx, const float *dy, const float *x, float *dx, int64_t n,
                                 int64_t c, int64_t hw, const float *a, const float *b, const float *k);
void dpt_cpu_maxpool_fwd(dpt_ctx *ctx, const dpt_pool_shape *s, const float *x, float *y, void *ws);
void dpt_cpu_maxpool_bwd(dpt_ctx *ctx, const dpt_pool_shape *s, const float *dy, const void *ws, float *dx,
                         bool dx_accumulate);
void dpt_cpu_avgpool_fwd(dpt_ctx *ctx, const dpt_pool_shape *s, const float *x, float *y);
void dpt_cpu_avgpool_bwd(dpt_ctx *ctx, const dpt_pool_shape *s, const float *dy, float *dx,
                         bool dx_accumulate);

#endif
