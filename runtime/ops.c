/* ops.c: device-neutral differentiable ops (arithmetic, matmul, views). Each forward checks
 * shapes, calls the backend, and records a node whose backward adds into input gradients. */
#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "ctx.h"
#include "error.h"

/* ---------------------------------------------------------------- add, mul, scale
 * Elementwise: any layout, as long as both operands share it; the output takes it. */

static void add_backward(dpt_ctx *ctx, dpt_node *node)
{
    const dpt_tensor *dy = node->out->grad;
    for (int i = 0; i < 2; i++)
        if (dpt_wants_grad(node->in[i])) dpt_grad_axpy(ctx, 1.0f, dy, node->in[i]);
}

dpt_tensor *dpt_add(dpt_ctx *ctx, dpt_tensor *a, dpt_tensor *b)
{
    if (!dpt_same_shape(a, b) || !dpt_tensor_is_contiguous(a) || !dpt_tensor_is_contiguous(b))
        return dpt_broadcast_binary(ctx, DPT_BINARY_ADD, a, b);
    dpt_common_layout(ctx, &a, &b);
    dpt_require_contiguous("add", a);
    dpt_require_contiguous("add", b);
    dpt_tensor *out = dpt_temp_same(ctx, a); /* two 16-bit activations add into a third (ResNet's skips) */
    if (a->dtype == DPT_BF16)
        ctx->be->add16(ctx, out->numel, (const uint16_t *)a->data, (const uint16_t *)b->data, (uint16_t *)out->data);
    else
        ctx->be->add(ctx, out->numel, a->data, b->data, out->data);
    dpt_node *node = dpt_tape_record(ctx, "add", add_backward, out, 2, (dpt_tensor *[]){a, b});
    if (node) node->out_unread = true;
    return out;
}

static void sub_backward(dpt_ctx *ctx, dpt_node *node)
{
    const dpt_tensor *dy = node->out->grad;
    for (int i = 0; i < 2; i++)
        if (dpt_wants_grad(node->in[i])) dpt_grad_axpy(ctx, i ? -1.0f : 1.0f, dy, node->in[i]);
}

dpt_tensor *dpt_sub(dpt_ctx *ctx, dpt_tensor *a, dpt_tensor *b)
{
    if (!dpt_same_shape(a, b) || !dpt_tensor_is_contiguous(a) || !dpt_tensor_is_contiguous(b))
        return dpt_broadcast_binary(ctx, DPT_BINARY_SUB, a, b);
    a = dpt_widen(ctx, a), b = dpt_widen(ctx, b);
    dpt_common_layout(ctx, &a, &b);
    dpt_require_contiguous("sub", a);
    dpt_require_contiguous("sub", b);
    dpt_tensor *out = dpt_temp_like(ctx, a);
    ctx->be->dev->copy_d2d(ctx, out->data, a->data, (size_t)a->numel * sizeof(float));
    ctx->be->axpy(ctx, out->numel, -1.0f, b->data, out->data);
    dpt_node *node = dpt_tape_record(ctx, "sub", sub_backward, out, 2, (dpt_tensor *[]){a, b});
    if (node) node->out_unread = true;
    return out;
}

static void mul_backward(dpt_ctx *ctx, dpt_node *node)
{
    const dpt_tensor *dy = node->out->grad;
    dpt_tensor *a = node->in[0], *b = node->in[1];
    if (dpt_wants_grad(a)) dpt_grad_mul(ctx, dy, b->data, a);
    if (dpt_wants_grad(b)) dpt_grad_mul(ctx, dy, a->data, b);
}

dpt_tensor *dpt_mul(dpt_ctx *ctx, dpt_tensor *a, dpt_tensor *b)
{
    if (!dpt_same_shape(a, b) || !dpt_tensor_is_contiguous(a) || !dpt_tensor_is_contiguous(b))
        return dpt_broadcast_binary(ctx, DPT_BINARY_MUL, a, b);
    a = dpt_widen(ctx, a), b = dpt_widen(ctx, b);
    dpt_common_layout(ctx, &a, &b);
    dpt_require_contiguous("mul", a);
    dpt_require_contiguous("mul", b);
    dpt_tensor *out = dpt_temp_like(ctx, a);
    ctx->be->mul(ctx, out->numel, a->data, b->data, out->data);
    dpt_tape_record(ctx, "mul", mul_backward, out, 2, (dpt_tensor *[]){a, b});
    return out;
}

static void scale_backward(dpt_ctx *ctx, dpt_node *node)
{
    const dpt_tensor *dy = node->out->grad;
    dpt_grad_axpy(ctx, node->arg.alpha, dy, node->in[0]);
}

dpt_tensor *dpt_scale(dpt_ctx *ctx, dpt_tensor *x, float alpha)
{
    x = dpt_contiguous(ctx, dpt_widen(ctx, x));
    dpt_tensor *out = dpt_temp_like(ctx, x);
    ctx->be->scale(ctx, out->numel, alpha, x->data, out->data);
    dpt_node *node = dpt_tape_record(ctx, "scale", scale_backward, out, 1, &x);
    if (node) node->arg.alpha = alpha;
    return out;
}

static void add_scalar_backward(dpt_ctx *ctx, dpt_node *node)
{
    dpt_grad_axpy(ctx, 1.0f, node->out->grad, node->in[0]);
}

dpt_tensor *dpt_add_scalar(dpt_ctx *ctx, dpt_tensor *x, float c)
{
    x = dpt_contiguous(ctx, dpt_widen(ctx, x));
    dpt_tensor *out = dpt_temp_like(ctx, x);
    ctx->be->fill(ctx, out->data, out->numel, c); /* c + x: the same bits as x + c */
    ctx->be->axpy(ctx, out->numel, 1.0f, x->data, out->data);
    dpt_tape_record(ctx, "add_scalar", add_scalar_backward, out, 1, &x);
    return out;
}

/* ---------------------------------------------------------------- sum, mean */

static void sum_backward(dpt_ctx *ctx, dpt_node *node)
{
    dpt_tensor *x = node->in[0];
    if (ctx->be->add_scalar) { /* the gradient stays on the device */
        ctx->be->add_scalar(ctx, x->numel, node->arg.alpha, node->out->grad->data, dpt_grad_acc(ctx, x)->data);
        return;
    }
    float dy = dpt_tensor_item(node->out->grad) * node->arg.alpha;
    dpt_tensor *ones = dpt_temp_like(ctx, x);
    ctx->be->fill(ctx, ones->data, ones->numel, dy);
    ctx->be->axpy(ctx, x->numel, 1.0f, ones->data, dpt_grad_acc(ctx, x)->data);
}

static dpt_tensor *reduce(dpt_ctx *ctx, dpt_tensor *x, float factor, const char *op)
{
    x = dpt_dense(ctx, dpt_widen(ctx, x));
    dpt_tensor *out = dpt_temp(ctx, 1, (int64_t[]){1});
    if (ctx->be->sum_to) { /* no host read: a loss's mean stays on the device */
        ctx->be->sum_to(ctx, x->data, x->numel, factor, out->data);
    } else {
        ctx->host_syncs++; /* the backend's sum comes back to the host */
        float value = (float)(ctx->be->sum(ctx, x->data, x->numel) * factor);
        ctx->be->dev->copy_h2d(ctx, out->data, &value, sizeof value);
    }
    dpt_node *node = dpt_tape_record(ctx, op, sum_backward, out, 1, &x);
    if (node) node->arg.alpha = factor;
    return out;
}

dpt_tensor *dpt_sum(dpt_ctx *ctx, dpt_tensor *x)
{
    return reduce(ctx, x, 1.0f, "sum");
}

dpt_tensor *dpt_mean(dpt_ctx *ctx, dpt_tensor *x)
{
    DPT_ASSERT(x->numel > 0, "mean of an empty tensor");
    return reduce(ctx, x, 1.0f / (float)x->numel, "mean");
}

/* ---------------------------------------------------------------- matmul and views */

/* How a 2-D tensor enters GEMM: as stored (row-major) or as a transposed view of a row-major
 * matrix, which BLAS reads with a transpose flag instead of a copy. */
static void gemm_operand(const char *op, const dpt_tensor *t, bool *trans, int64_t *ld)
{
    char buf[96];
    if (t->ndim != 2) dpt_fatal("%s needs 2-D operands, got %s", op, dpt_shape_str(t, buf, sizeof buf));
    if (dpt_tensor_is_contiguous(t)) {
        *trans = false;
        *ld = t->shape[1] > 1 ? t->shape[1] : 1;
    } else if (t->strides[0] == 1 && t->strides[1] == t->shape[0]) {
        *trans = true; /* a dpt_transpose() view of a contiguous (shape[1], shape[0]) matrix */
        *ld = t->strides[1];
    } else {
        dpt_fatal("%s: operand %s has strides (%lld, %lld) that BLAS cannot read", op,
                  dpt_shape_str(t, buf, sizeof buf), (long long)t->strides[0], (long long)t->strides[1]);
    }
}

static void matmul_backward(dpt_ctx *ctx, dpt_node *node)
{
    dpt_tensor *a = node->in[0], *b = node->in[1];
    const dpt_tensor *dc = node->out->grad;
    int64_t M = a->shape[0], K = a->shape[1], N = b->shape[1];
    bool ta, tb;
    int64_t lda, ldb;
    gemm_operand("matmul", a, &ta, &lda);
    gemm_operand("matmul", b, &tb, &ldb);
    bool acc;
    if (dpt_wants_grad(a)) { /* dA (M, K) += dC (M, N) B^T; = when fresh (beta 0) */
        float *da = dpt_grad_for_write(ctx, a, &acc)->data;
        ctx->be->gemm(ctx, false, !tb, M, K, N, 1.0f, dc->data, N, b->data, ldb, acc ? 1.0f : 0.0f, da, K);
    }
    if (dpt_wants_grad(b)) { /* dB (K, N) += A^T dC (M, N) */
        float *db = dpt_grad_for_write(ctx, b, &acc)->data;
        ctx->be->gemm(ctx, !ta, false, K, N, M, 1.0f, a->data, lda, dc->data, N, acc ? 1.0f : 0.0f, db, N);
    }
}

/* t as GEMM reads it: itself when gemm_operand can, else a dense copy (any other view). */
static dpt_tensor *gemm_input(dpt_ctx *ctx, dpt_tensor *t)
{
    t = dpt_plain(ctx, t);
    bool transposed = t->ndim == 2 && t->strides[0] == 1 && t->strides[1] == t->shape[0];
    return transposed ? t : dpt_dense(ctx, t);
}

dpt_tensor *dpt_matmul(dpt_ctx *ctx, dpt_tensor *a, dpt_tensor *b)
{
    a = gemm_input(ctx, a), b = gemm_input(ctx, b);
    bool ta, tb;
    int64_t lda, ldb;
    gemm_operand("matmul", a, &ta, &lda);
    gemm_operand("matmul", b, &tb, &ldb);
    char sa[96], sb[96];
    if (a->shape[1] != b->shape[0])
        dpt_fatal("matmul: inner dimensions differ: %s x %s", dpt_shape_str(a, sa, sizeof sa),
                  dpt_shape_str(b, sb, sizeof sb));
    int64_t M = a->shape[0], K = a->shape[1], N = b->shape[1];
    dpt_tensor *out = dpt_temp(ctx, 2, (int64_t[]){M, N});
    ctx->be->gemm(ctx, ta, tb, M, N, K, 1.0f, a->data, lda, b->data, ldb, 0.0f, out->data, N);
    dpt_tape_record(ctx, "matmul", matmul_backward, out, 2, (dpt_tensor *[]){a, b});
    return out;
}

static void transpose_backward(dpt_ctx *ctx, dpt_node *node)
{
    dpt_tensor *x = node->in[0];
    const dpt_tensor *dy = node->out->grad; /* (n, m), contiguous */
    ctx->be->transpose_acc(ctx, dy->data, dpt_grad_acc(ctx, x)->data, dy->shape[0], dy->shape[1]);
}

dpt_tensor *dpt_transpose(dpt_ctx *ctx, dpt_tensor *x)
{
    char buf[96];
    x = dpt_dense(ctx, dpt_plain(ctx, x));
    if (x->ndim != 2)
        dpt_fatal("transpose needs a 2-D tensor, got %s", dpt_shape_str(x, buf, sizeof buf));
    int64_t m = x->shape[0], n = x->shape[1];
    dpt_tensor *out = dpt_view(ctx, x, 2, (int64_t[]){n, m}, (int64_t[]){1, n}, 0);
    dpt_tape_record(ctx, "transpose", transpose_backward, out, 1, &x);
    return out;
}

static void reshape_backward(dpt_ctx *ctx, dpt_node *node)
{
    dpt_grad_axpy(ctx, 1.0f, node->out->grad, node->in[0]);
}

dpt_tensor *dpt_reshape(dpt_ctx *ctx, dpt_tensor *x, int ndim, const int64_t *shape)
{
    char buf[96];
    x = dpt_dense(ctx, dpt_plain(ctx, x)); /* a view of a dense tensor, else of a copy (torch.reshape) */
    DPT_ASSERT(ndim > 0 && ndim <= DPT_MAX_DIMS, "reshape to %d dims", ndim);
    char want[160];
    dpt_dims_str(ndim, shape, want, sizeof want);
    int64_t resolved[DPT_MAX_DIMS], known = 1;
    int infer = -1;
    bool fits = true; /* no product overflows int64 */
    for (int i = 0; i < ndim; i++) {
        resolved[i] = shape[i];
        if (shape[i] < -1 || (shape[i] == -1 && infer >= 0))
            dpt_fatal("reshape of %s to %s: sizes are >= 0, with at most one -1 (inferred)",
                      dpt_shape_str(x, buf, sizeof buf), want);
        if (shape[i] == -1)
            infer = i;
        else
            fits &= !__builtin_mul_overflow(known, shape[i], &known);
    }
    if (infer >= 0) resolved[infer] = known ? x->numel / known : 0;
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++)
        fits &= !__builtin_mul_overflow(numel, resolved[i], &numel);
    if (!fits || numel != x->numel)
        dpt_fatal("reshape of %s (%lld elements) to %s: %s", dpt_shape_str(x, buf, sizeof buf),
                  (long long)x->numel, want, fits ? "another number of elements" : "more elements than int64 counts");
    dpt_tensor *out = dpt_view(ctx, x, ndim, resolved, NULL, 0);
    dpt_tape_record(ctx, "reshape", reshape_backward, out, 1, &x);
    return out;
}

dpt_tensor *dpt_flatten(dpt_ctx *ctx, dpt_tensor *x)
{
    DPT_ASSERT(x->ndim >= 1, "flatten of a 0-d tensor");
    return dpt_reshape(ctx, x, 2, (int64_t[]){x->shape[0], -1});
}

/* An expand between two reshapes (dpt.h); here, beside dpt_reshape, which the tensor ops do not call. */
dpt_tensor *dpt_upsample_nearest2d(dpt_ctx *ctx, dpt_tensor *x, int64_t scale_h, int64_t scale_w)
{
    char sx[96];
    int64_t total = 0;
    bool fits = x->ndim == 4 && scale_h >= 1 && scale_w >= 1 &&
                !__builtin_mul_overflow(x->numel, scale_h, &total) && !__builtin_mul_overflow(total, scale_w, &total);
    if (!fits)
        dpt_fatal("upsample_nearest2d of %s by %lld x %lld: an (N, C, H, W) input and whole factors of 1 or more",
                  dpt_shape_str(x, sx, sizeof sx), (long long)scale_h, (long long)scale_w);
    int64_t n = x->shape[0], c = x->shape[1], h = x->shape[2], w = x->shape[3];
    dpt_tensor *t = dpt_reshape(ctx, x, 6, (int64_t[]){n, c, h, 1, w, 1});
    t = dpt_expand(ctx, t, 6, (int64_t[]){n, c, h, scale_h, w, scale_w});
    return dpt_reshape(ctx, t, 4, (int64_t[]){n, c, h * scale_h, w * scale_w});
}
