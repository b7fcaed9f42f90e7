/* ops_tensor.c: the tensor primitives a transformer is made of, device-neutral and recorded:
 * views (permute, transpose of two axes, narrow, slice) and dpt_contiguous, concat and split,
 * broadcasting binary ops, reductions over the last dim, log-softmax, unary maps, embeddings,
 * layer norm, batched matmul, and the optimizers' list ops. Each forward checks shapes, calls
 * the backend, and records a node whose backward adds (+=) into its inputs' gradients.
 *
 * A view's backward needs where its elements sit in the gradient of its input, which is
 * always contiguous in the input's shape (dpt_grad_acc): so every view is described by a
 * transform of strides, applied to the input's own strides for the view itself and to the
 * input's contiguous strides for the gradient. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "ctx.h"
#include "error.h"

static int norm_axis(const char *op, const dpt_tensor *x, int axis)
{
    char buf[96];
    int a = axis < 0 ? axis + x->ndim : axis;
    if (a < 0 || a >= x->ndim)
        dpt_fatal("%s: axis %d of a tensor of shape %s", op, axis, dpt_shape_str(x, buf, sizeof buf));
    return a;
}

/* ---------------------------------------------------------------- views */

typedef enum view_kind { VIEW_PERMUTE, VIEW_SLICE } view_kind;

/* How a view is made from its input: a permutation of the axes, or a slice of one axis. */
typedef struct view_spec {
    view_kind kind;
    int axes[DPT_MAX_DIMS]; /* VIEW_PERMUTE: y axis i is x axis axes[i] */
    int axis;               /* VIEW_SLICE */
    int64_t start, length, step;
} view_spec;

/* The view's shape, and its strides and offset over base strides (x's own, or x's contiguous
 * ones for the gradient). */
static void view_apply(const view_spec *v, const dpt_tensor *x, const int64_t *base, int64_t *shape, int64_t *strides,
                       int64_t *offset)
{
    *offset = 0;
    for (int d = 0; d < x->ndim; d++)
        shape[d] = x->shape[d], strides[d] = base[d];
    if (v->kind == VIEW_PERMUTE) {
        for (int d = 0; d < x->ndim; d++)
            shape[d] = x->shape[v->axes[d]], strides[d] = base[v->axes[d]];
    } else {
        shape[v->axis] = v->length;
        strides[v->axis] = base[v->axis] * v->step;
        *offset = v->start * base[v->axis];
    }
}

static void view_backward(dpt_ctx *ctx, dpt_node *node)
{
    dpt_tensor *x = node->in[0];
    const dpt_tensor *dy = node->out->grad; /* contiguous, the view's shape */
    const view_spec *v = node->scratch;
    int64_t base[DPT_MAX_DIMS], shape[DPT_MAX_DIMS], strides[DPT_MAX_DIMS], dy_strides[DPT_MAX_DIMS], offset;
    dpt_contiguous_strides(x->ndim, x->shape, base);
    view_apply(v, x, base, shape, strides, &offset);
    dpt_contiguous_strides(dy->ndim, dy->shape, dy_strides);
    float *dx = dpt_grad_acc(ctx, x)->data;
    ctx->be->strided_copy(ctx, dy->ndim, dy->shape, dy->data, dy_strides, dx + offset, strides, true);
}

static dpt_tensor *make_view(dpt_ctx *ctx, dpt_tensor *x, const view_spec *spec, const char *op)
{
    x = dpt_plain(ctx, x);
    int64_t shape[DPT_MAX_DIMS], strides[DPT_MAX_DIMS], offset;
    view_apply(spec, x, x->strides, shape, strides, &offset);
    dpt_tensor *y = dpt_view(ctx, x, x->ndim, shape, strides, offset);
    dpt_node *node = dpt_tape_record(ctx, op, view_backward, y, 1, &x);
    if (node) {
        view_spec *kept = dpt_tape_scratch(ctx, sizeof *kept);
        *kept = *spec;
        node->scratch = kept;
    }
    return y;
}

dpt_tensor *dpt_permute(dpt_ctx *ctx, dpt_tensor *x, const int *axes)
{
    view_spec v = {.kind = VIEW_PERMUTE};
    bool seen[DPT_MAX_DIMS] = {false};
    for (int d = 0; d < x->ndim; d++) {
        int a = norm_axis("permute", x, axes[d]);
        if (seen[a]) dpt_fatal("permute: axis %d appears twice", a);
        seen[a] = true;
        v.axes[d] = a;
    }
    return make_view(ctx, x, &v, "permute");
}

dpt_tensor *dpt_transpose_axes(dpt_ctx *ctx, dpt_tensor *x, int a, int b)
{
    view_spec v = {.kind = VIEW_PERMUTE};
    int ia = norm_axis("transpose", x, a), ib = norm_axis("transpose", x, b);
    for (int d = 0; d < x->ndim; d++)
        v.axes[d] = d == ia ? ib : d == ib ? ia : d;
    return make_view(ctx, x, &v, "transpose");
}

dpt_tensor *dpt_slice(dpt_ctx *ctx, dpt_tensor *x, int axis, int64_t start, int64_t end, int64_t step)
{
    char buf[96];
    int a = norm_axis("slice", x, axis);
    int64_t n = x->shape[a];
    if (start < 0) start += n;
    if (end < 0) end += n;
    if (end > n) end = n;
    if (step < 1 || start < 0 || start > n || end < start)
        dpt_fatal("slice [%lld:%lld:%lld] of axis %d of a tensor of shape %s", (long long)start, (long long)end,
                  (long long)step, a, dpt_shape_str(x, buf, sizeof buf));
    view_spec v = {.kind = VIEW_SLICE, .axis = a, .start = start, .length = (end - start + step - 1) / step, .step = step};
    return make_view(ctx, x, &v, "slice");
}

dpt_tensor *dpt_narrow(dpt_ctx *ctx, dpt_tensor *x, int axis, int64_t start, int64_t length)
{
    char buf[96];
    int a = norm_axis("narrow", x, axis);
    if (start < 0 || length < 0 || start > x->shape[a] || length > x->shape[a] - start)
        dpt_fatal("narrow of %lld from %lld along axis %d of a tensor of shape %s", (long long)length, (long long)start,
                  a, dpt_shape_str(x, buf, sizeof buf));
    return dpt_slice(ctx, x, a, start, start + length, 1);
}

void dpt_split(dpt_ctx *ctx, dpt_tensor *x, int axis, int n, const int64_t *sizes, dpt_tensor **out)
{
    char buf[96];
    int a = norm_axis("split", x, axis);
    int64_t at = 0;
    for (int i = 0; i < n; i++)
        at += sizes[i];
    if (at != x->shape[a])
        dpt_fatal("split of axis %d (%lld) into parts of %lld in all, shape %s", a, (long long)x->shape[a],
                  (long long)at, dpt_shape_str(x, buf, sizeof buf));
    at = 0;
    for (int i = 0; i < n; i++) {
        out[i] = dpt_narrow(ctx, x, a, at, sizes[i]);
        at += sizes[i];
    }
}

static void copy_backward(dpt_ctx *ctx, dpt_node *node)
{
    dpt_grad_axpy(ctx, 1.0f, node->out->grad, node->in[0]);
}

dpt_tensor *dpt_contiguous(dpt_ctx *ctx, dpt_tensor *x)
{
    x = dpt_plain(ctx, x);
    if (dpt_tensor_is_contiguous(x)) return x;
    dpt_tensor *y = dpt_temp(ctx, x->ndim, x->shape);
    y->dtype = x->dtype;
    int64_t strides[DPT_MAX_DIMS];
    dpt_contiguous_strides(y->ndim, y->shape, strides);
    ctx->be->strided_copy(ctx, x->ndim, x->shape, x->data, x->strides, y->data, strides, false);
    if (x->dtype == DPT_F32) dpt_tape_record(ctx, "contiguous", copy_backward, y, 1, &x);
    return y;
}

dpt_tensor *dpt_dense(dpt_ctx *ctx, dpt_tensor *x)
{
    return !x || dpt_tensor_is_contiguous(x) ? x : dpt_contiguous(ctx, x);
}

/* concat: each part is copied into its slice of the output; the backward hands each part its
 * slice of the gradient. */
typedef struct concat_spec {
    int axis;
    int64_t offset[DPT_NODE_MAX_IN];
} concat_spec;

static void concat_backward(dpt_ctx *ctx, dpt_node *node)
{
    const concat_spec *c = node->scratch;
    const dpt_tensor *dy = node->out->grad;
    int64_t dy_strides[DPT_MAX_DIMS], g_strides[DPT_MAX_DIMS];
    dpt_contiguous_strides(dy->ndim, dy->shape, dy_strides);
    for (int i = 0; i < node->n_in; i++) {
        dpt_tensor *x = node->in[i];
        if (!dpt_wants_grad(x)) continue;
        dpt_contiguous_strides(x->ndim, x->shape, g_strides);
        ctx->be->strided_copy(ctx, x->ndim, x->shape, dy->data + c->offset[i] * dy_strides[c->axis], dy_strides,
                              dpt_grad_acc(ctx, x)->data, g_strides, true);
    }
}

dpt_tensor *dpt_concat(dpt_ctx *ctx, int n, dpt_tensor *const *xs, int axis)
{
    char a[96], b[96];
    DPT_ASSERT(n >= 1, "concat of nothing");
    if (n > DPT_NODE_MAX_IN) { /* in groups (a node has at most DPT_NODE_MAX_IN inputs) */
        dpt_tensor *joined = dpt_concat(ctx, DPT_NODE_MAX_IN, xs, axis);
        for (int i = DPT_NODE_MAX_IN; i < n;) {
            dpt_tensor *group[DPT_NODE_MAX_IN];
            int m = 0;
            group[m++] = joined;
            while (m < DPT_NODE_MAX_IN && i < n)
                group[m++] = xs[i++];
            joined = dpt_concat(ctx, m, group, axis);
        }
        return joined;
    }
    dpt_tensor *in[DPT_NODE_MAX_IN];
    int ax = norm_axis("concat", xs[0], axis);
    int64_t shape[DPT_MAX_DIMS];
    memcpy(shape, xs[0]->shape, sizeof shape);
    shape[ax] = 0;
    concat_spec spec = {.axis = ax};
    for (int i = 0; i < n; i++) {
        in[i] = dpt_plain(ctx, xs[i]);
        bool fits = in[i]->ndim == xs[0]->ndim && in[i]->dtype == xs[0]->dtype;
        for (int d = 0; fits && d < in[i]->ndim; d++)
            fits = d == ax || in[i]->shape[d] == xs[0]->shape[d];
        if (!fits)
            dpt_fatal("concat along axis %d: shapes %s and %s differ elsewhere", ax, dpt_shape_str(xs[0], a, sizeof a),
                      dpt_shape_str(in[i], b, sizeof b));
        spec.offset[i] = shape[ax];
        shape[ax] += in[i]->shape[ax];
    }
    dpt_tensor *y = dpt_temp(ctx, xs[0]->ndim, shape);
    y->dtype = xs[0]->dtype;
    int64_t y_strides[DPT_MAX_DIMS];
    dpt_contiguous_strides(y->ndim, y->shape, y_strides);
    for (int i = 0; i < n; i++)
        ctx->be->strided_copy(ctx, in[i]->ndim, in[i]->shape, in[i]->data, in[i]->strides,
                              y->data + spec.offset[i] * y_strides[ax], y_strides, false);
    if (y->dtype != DPT_F32) return y;
    dpt_node *node = dpt_tape_record(ctx, "concat", concat_backward, y, n, in);
    if (node) {
        concat_spec *kept = dpt_tape_scratch(ctx, sizeof *kept);
        *kept = spec;
        node->scratch = kept;
    }
    return y;
}

/* ---------------------------------------------------------------- broadcasting binary ops */

/* The broadcast shape of a and b (NumPy's rule, aligned at the last axis), and each one's
 * strides over it (0 where it is stretched). false when they do not broadcast. */
static bool broadcast(const dpt_tensor *a, const dpt_tensor *b, int *ndim, int64_t *shape, int64_t *as, int64_t *bs)
{
    int n = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int d = 0; d < n; d++) {
        int da = d - (n - a->ndim), db = d - (n - b->ndim);
        int64_t sa = da >= 0 ? a->shape[da] : 1, sb = db >= 0 ? b->shape[db] : 1;
        if (sa != sb && sa != 1 && sb != 1) return false;
        shape[d] = sa > sb ? sa : sb;
        as[d] = da >= 0 && sa != 1 ? a->strides[da] : 0;
        bs[d] = db >= 0 && sb != 1 ? b->strides[db] : 0;
    }
    *ndim = n;
    return true;
}

/* The strides that map the broadcast shape onto x's gradient (contiguous in x's shape; 0 on
 * the axes x was stretched along, which reduce_into sums over). */
static void grad_strides(const dpt_tensor *x, int ndim, const int64_t *shape, int64_t *strides)
{
    int64_t own[DPT_MAX_DIMS];
    dpt_contiguous_strides(x->ndim, x->shape, own);
    for (int d = 0; d < ndim; d++) {
        int dx = d - (ndim - x->ndim);
        strides[d] = dx >= 0 && x->shape[dx] == shape[d] && shape[d] != 1 ? own[dx] : 0;
    }
}

static void binary_backward(dpt_ctx *ctx, dpt_node *node)
{
    dpt_binary_op op = (dpt_binary_op)node->arg.code;
    dpt_tensor *a = node->in[0], *b = node->in[1], *y = node->out;
    const dpt_tensor *dy = y->grad;
    int ndim = y->ndim;
    int64_t as[DPT_MAX_DIMS], bs[DPT_MAX_DIMS], ys[DPT_MAX_DIMS], shape[DPT_MAX_DIMS];
    memcpy(shape, y->shape, sizeof shape);
    dpt_contiguous_strides(ndim, shape, ys);
    /* the inputs as they broadcast (strides 0 along stretched axes) */
    int n;
    broadcast(a, b, &n, shape, as, bs);
    for (int i = 0; i < 2; i++) {
        dpt_tensor *x = node->in[i];
        if (!dpt_wants_grad(x)) continue;
        const float *g = dy->data; /* d out / d x, times dy, in the broadcast shape */
        dpt_tensor *tmp = NULL;
        if (op == DPT_BINARY_MUL || op == DPT_BINARY_DIV) {
            tmp = dpt_temp(ctx, ndim, shape);
            if (op == DPT_BINARY_MUL) /* d(a b) = dy * other */
                ctx->be->binary(ctx, DPT_BINARY_MUL, ndim, shape, dy->data, ys, i ? a->data : b->data, i ? as : bs,
                                tmp->data);
            else if (i == 0) /* d(a / b)/da = dy / b */
                ctx->be->binary(ctx, DPT_BINARY_DIV, ndim, shape, dy->data, ys, b->data, bs, tmp->data);
            else { /* d(a / b)/db = -dy * y / b */
                ctx->be->binary(ctx, DPT_BINARY_MUL, ndim, shape, dy->data, ys, y->data, ys, tmp->data);
                ctx->be->binary(ctx, DPT_BINARY_DIV, ndim, shape, tmp->data, ys, b->data, bs, tmp->data);
            }
            g = tmp->data;
        }
        float alpha = op == DPT_BINARY_SUB && i == 1 ? -1.0f : op == DPT_BINARY_DIV && i == 1 ? -1.0f : 1.0f;
        if (x->numel == dy->numel) { /* the side that was not stretched: dy or dy * other itself (or minus) */
            dpt_grad_axpy(ctx, alpha, tmp ? tmp : dy, x);
            continue;
        }
        bool acc;
        float *gx = dpt_grad_for_write(ctx, x, &acc)->data;
        int64_t gs[DPT_MAX_DIMS];
        grad_strides(x, ndim, shape, gs);
        ctx->be->reduce_into(ctx, ndim, shape, g, gx, gs, alpha, acc);
    }
}

dpt_tensor *dpt_broadcast_binary(dpt_ctx *ctx, dpt_binary_op op, dpt_tensor *a, dpt_tensor *b)
{
    static const char *const names[] = {"add", "sub", "mul", "div"};
    _Static_assert(sizeof names / sizeof names[0] == DPT_BINARY_COUNT, "binary op names");
    char sa[96], sb[96];
    DPT_ASSERT((unsigned)op < DPT_BINARY_COUNT, "binary op %d", (int)op);
    a = dpt_widen(ctx, dpt_plain(ctx, a)), b = dpt_widen(ctx, dpt_plain(ctx, b));
    int ndim;
    int64_t shape[DPT_MAX_DIMS], as[DPT_MAX_DIMS], bs[DPT_MAX_DIMS];
    if (!broadcast(a, b, &ndim, shape, as, bs))
        dpt_fatal("%s: shapes %s and %s do not broadcast", names[op], dpt_shape_str(a, sa, sizeof sa),
                  dpt_shape_str(b, sb, sizeof sb));
    dpt_tensor *y = dpt_temp(ctx, ndim, shape);
    ctx->be->binary(ctx, op, ndim, shape, a->data, as, b->data, bs, y->data);
    dpt_node *node = dpt_tape_record(ctx, names[op], binary_backward, y, 2, (dpt_tensor *[]){a, b});
    if (node) node->arg.code = (int32_t)op;
    return y;
}

dpt_tensor *dpt_div(dpt_ctx *ctx, dpt_tensor *a, dpt_tensor *b)
{
    return dpt_broadcast_binary(ctx, DPT_BINARY_DIV, a, b);
}

/* expand: a copy of x stretched as broadcasting would stretch it; the gradient sums back over
 * the stretched axes (reduce_into, in index order: the same bits every run). */
static void expand_backward(dpt_ctx *ctx, dpt_node *node)
{
    dpt_tensor *x = node->in[0], *y = node->out;
    int64_t gs[DPT_MAX_DIMS];
    grad_strides(x, y->ndim, y->shape, gs);
    bool acc;
    float *gx = dpt_grad_for_write(ctx, x, &acc)->data;
    ctx->be->reduce_into(ctx, y->ndim, y->shape, y->grad->data, gx, gs, 1.0f, acc);
}

dpt_tensor *dpt_expand(dpt_ctx *ctx, dpt_tensor *x, int ndim, const int64_t *shape)
{
    char sx[96];
    x = dpt_widen(ctx, dpt_plain(ctx, x));
    bool ok = ndim >= x->ndim && ndim <= DPT_MAX_DIMS;
    int64_t full[DPT_MAX_DIMS], xs[DPT_MAX_DIMS], ys[DPT_MAX_DIMS];
    for (int d = 0; ok && d < ndim; d++) {
        int dx = d - (ndim - x->ndim);
        int64_t have = dx >= 0 ? x->shape[dx] : 1;
        full[d] = shape[d] == -1 && dx >= 0 ? have : shape[d];
        ok = full[d] >= 0 && (have == full[d] || have == 1);
        xs[d] = dx >= 0 && have == full[d] && have != 1 ? x->strides[dx] : 0; /* 0: stretched */
    }
    if (!ok) {
        char want[160];
        dpt_dims_str(ndim < DPT_MAX_DIMS ? ndim : DPT_MAX_DIMS, shape, want, sizeof want);
        dpt_fatal("expand of %s to %s: each axis must equal the target's or be 1 (new axes go in front, -1 "
                  "keeps an axis)",
                  dpt_shape_str(x, sx, sizeof sx), want);
    }
    dpt_tensor *y = dpt_temp(ctx, ndim, full);
    dpt_contiguous_strides(ndim, full, ys);
    if (y->numel) ctx->be->strided_copy(ctx, ndim, full, x->data, xs, y->data, ys, false);
    dpt_tape_record(ctx, "expand", expand_backward, y, 1, &x);
    return y;
}

/* ---------------------------------------------------------------- reductions over the last dim */

typedef enum last_kind { LAST_SUM, LAST_MEAN, LAST_MAX } last_kind;

static void last_backward(dpt_ctx *ctx, dpt_node *node)
{
    dpt_tensor *x = node->in[0];
    const dpt_tensor *dy = node->out->grad;
    int64_t cols = x->shape[x->ndim - 1], rows = x->numel / cols;
    float *dx = dpt_grad_acc(ctx, x)->data;
    if (node->arg.code == LAST_MAX) {
        ctx->be->rows_max_bwd(ctx, dy->data, (const int32_t *)node->saved[0]->data, rows, cols, dx);
        return;
    }
    /* dx[r, c] += scale * dy[r]: dy stretched along the last axis */
    float scale = node->arg.code == LAST_MEAN ? 1.0f / (float)cols : 1.0f;
    int64_t shape[2] = {rows, cols}, dys[2] = {1, 0}, dxs[2] = {cols, 1};
    if (scale == 1.0f) {
        ctx->be->strided_copy(ctx, 2, shape, dy->data, dys, dx, dxs, true);
    } else {
        dpt_tensor *tmp = dpt_temp(ctx, 1, (int64_t[]){rows});
        ctx->be->scale(ctx, rows, scale, dy->data, tmp->data);
        ctx->be->strided_copy(ctx, 2, shape, tmp->data, dys, dx, dxs, true);
    }
}

static dpt_tensor *reduce_last(dpt_ctx *ctx, dpt_tensor *x, bool keepdim, last_kind kind, const char *op)
{
    x = dpt_contiguous(ctx, dpt_widen(ctx, dpt_plain(ctx, x)));
    DPT_ASSERT(x->ndim >= 1 && x->shape[x->ndim - 1] > 0, "%s over an empty last dim", op);
    int64_t cols = x->shape[x->ndim - 1], rows = x->numel / cols;
    int64_t shape[DPT_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    int ndim = x->ndim;
    if (keepdim)
        shape[ndim - 1] = 1;
    else if (ndim > 1)
        ndim--;
    else
        shape[0] = 1; /* a 1-D input gives one value, shape (1) */
    dpt_tensor *y = dpt_temp(ctx, ndim, shape);
    dpt_tensor *idx = NULL;
    if (kind == LAST_MAX) {
        idx = dpt_temp_i32(ctx, 1, (int64_t[]){rows});
        ctx->be->rows_max(ctx, x->data, rows, cols, y->data, (int32_t *)idx->data);
    } else {
        ctx->be->rows_sum(ctx, x->data, rows, cols, y->data);
        if (kind == LAST_MEAN) ctx->be->scale(ctx, rows, 1.0f / (float)cols, y->data, y->data);
    }
    dpt_node *node = dpt_tape_record(ctx, op, last_backward, y, 1, &x);
    if (node) node->arg.code = kind, node->saved[0] = idx;
    return y;
}

dpt_tensor *dpt_sum_last(dpt_ctx *ctx, dpt_tensor *x, bool keepdim)
{
    return reduce_last(ctx, x, keepdim, LAST_SUM, "sum_last");
}
dpt_tensor *dpt_mean_last(dpt_ctx *ctx, dpt_tensor *x, bool keepdim)
{
    return reduce_last(ctx, x, keepdim, LAST_MEAN, "mean_last");
}
dpt_tensor *dpt_max_last(dpt_ctx *ctx, dpt_tensor *x, bool keepdim)
{
    return reduce_last(ctx, x, keepdim, LAST_MAX, "max_last");
}

/* ---------------------------------------------------------------- log-softmax, unary maps */

static void log_softmax_backward(dpt_ctx *ctx, dpt_node *node)
{
    const dpt_tensor *y = node->out;
    int64_t cols = y->shape[y->ndim - 1];
    ctx->be->log_softmax_bwd(ctx, y->data, y->grad->data, dpt_grad_acc(ctx, node->in[0])->data, y->numel / cols, cols);
}

dpt_tensor *dpt_log_softmax(dpt_ctx *ctx, dpt_tensor *x)
{
    x = dpt_contiguous(ctx, dpt_widen(ctx, dpt_plain(ctx, x)));
    DPT_ASSERT(x->ndim >= 1 && x->shape[x->ndim - 1] > 0, "log_softmax over an empty last dim");
    dpt_tensor *y = dpt_temp_like(ctx, x);
    int64_t cols = x->shape[x->ndim - 1];
    ctx->be->log_softmax_fwd(ctx, x->data, y->data, x->numel / cols, cols);
    dpt_tape_record(ctx, "log_softmax", log_softmax_backward, y, 1, &x);
    return y;
}

static void unary_backward(dpt_ctx *ctx, dpt_node *node)
{
    dpt_tensor *x = node->in[0];
    ctx->be->unary_bwd(ctx, (dpt_unary_op)node->arg.code, x->numel, x->data, node->out->data,
                       node->out->grad->data, dpt_grad_acc(ctx, x)->data);
}

dpt_tensor *dpt_unary(dpt_ctx *ctx, dpt_unary_op op, dpt_tensor *x)
{
    DPT_ASSERT((unsigned)op < DPT_UNARY_COUNT, "unary op %d", (int)op);
    x = dpt_contiguous(ctx, dpt_widen(ctx, x));
    dpt_tensor *y = dpt_temp_like(ctx, x);
    ctx->be->unary_fwd(ctx, op, x->numel, x->data, y->data);
    dpt_node *node = dpt_tape_record(ctx, "unary", unary_backward, y, 1, &x);
    if (node) node->arg.code = (int32_t)op;
    return y;
}

dpt_tensor *dpt_silu(dpt_ctx *ctx, dpt_tensor *x)
{
    return dpt_unary(ctx, DPT_UNARY_SILU, x);
}
dpt_tensor *dpt_gelu_erf(dpt_ctx *ctx, dpt_tensor *x)
{
    return dpt_unary(ctx, DPT_UNARY_GELU_ERF, x);
}

/* ---------------------------------------------------------------- embeddings */

static void embedding_backward(dpt_ctx *ctx, dpt_node *node)
{
    dpt_tensor *w = node->in[0];
    const dpt_tensor *ids = node->saved[0], *dy = node->out->grad;
    ctx->be->embedding_bwd(ctx, (const int32_t *)ids->data, ids->numel, dy->data, w->shape[0], w->shape[1],
                           dpt_grad_acc(ctx, w)->data);
}

dpt_tensor *dpt_embedding(dpt_ctx *ctx, dpt_tensor *weight, dpt_tensor *ids)
{
    char a[96], b[96];
    if (weight->ndim != 2 || ids->dtype != DPT_I32 || ids->ndim >= DPT_MAX_DIMS)
        dpt_fatal("embedding of weight %s (vocab, dim) by ids %s (int32)", dpt_shape_str(weight, a, sizeof a),
                  dpt_shape_str(ids, b, sizeof b));
    ids = dpt_contiguous(ctx, ids);
    if (dpt_ctx_device(ctx).kind == DPT_DEVICE_CPU)
        dpt_check_indices("embedding", "id", (const int32_t *)ids->data, ids->numel, weight->shape[0], false, 0,
                          "ids pick rows of the (vocab, dim) weight: a table of positions shorter than the "
                          "sequence (block_size), or token ids past the vocabulary the weight was built for");
    int64_t shape[DPT_MAX_DIMS];
    memcpy(shape, ids->shape, (size_t)ids->ndim * sizeof *shape);
    shape[ids->ndim] = weight->shape[1];
    dpt_tensor *y = dpt_temp(ctx, ids->ndim + 1, shape);
    ctx->be->embedding_fwd(ctx, weight->data, weight->shape[0], weight->shape[1], (const int32_t *)ids->data,
                           ids->numel, y->data);
    dpt_node *node = dpt_tape_record(ctx, "embedding", embedding_backward, y, 1, &weight);
    if (node) node->saved[0] = ids;
    return y;
}

/* ---------------------------------------------------------------- layer norm */

static void layernorm_backward(dpt_ctx *ctx, dpt_node *node)
{
    dpt_tensor *x = node->in[0], *w = node->in[1], *b = node->in[2];
    const dpt_tensor *dy = node->out->grad;
    int64_t dim = x->shape[x->ndim - 1], rows = x->numel / dim;
    const float *mean = node->saved[0]->data, *rstd = node->saved[0]->data + rows;
    ctx->be->layernorm_bwd(ctx, x->data, dy->data, rows, dim, w ? w->data : NULL, mean, rstd,
                           dpt_wants_grad(x) ? dpt_grad_acc(ctx, x)->data : NULL,
                           dpt_wants_grad(w) ? dpt_grad_acc(ctx, w)->data : NULL,
                           dpt_wants_grad(b) ? dpt_grad_acc(ctx, b)->data : NULL);
}

dpt_tensor *dpt_layer_norm(dpt_ctx *ctx, dpt_tensor *x, dpt_tensor *weight, dpt_tensor *bias, float eps)
{
    char a[96];
    x = dpt_contiguous(ctx, dpt_widen(ctx, dpt_plain(ctx, x)));
    int64_t dim = x->ndim ? x->shape[x->ndim - 1] : 0;
    if (dim < 1 || (weight && weight->numel != dim) || (bias && bias->numel != dim) || !(eps > 0.0f))
        dpt_fatal("layer_norm of %s needs a last dimension of at least 1, a weight and bias of as many values and "
                  "eps > 0 (got %g)",
                  dpt_shape_str(x, a, sizeof a), (double)eps);
    int64_t rows = x->numel / dim;
    dpt_tensor *y = dpt_temp_like(ctx, x);
    dpt_tensor *stats = dpt_temp(ctx, 1, (int64_t[]){2 * rows}); /* mean, then rstd */
    ctx->be->layernorm_fwd(ctx, x->data, rows, dim, weight ? weight->data : NULL, bias ? bias->data : NULL, eps,
                           y->data, stats->data, stats->data + rows);
    dpt_node *node = dpt_tape_record(ctx, "layer_norm", layernorm_backward, y, 3, (dpt_tensor *[]){x, weight, bias});
    if (node) node->saved[0] = stats;
    return y;
}

/* ---------------------------------------------------------------- attention */

static void attention_backward(dpt_ctx *ctx, dpt_node *node)
{
    dpt_tensor *qkv = node->in[0];
    const dpt_tensor *y = node->out, *dy = node->out->grad, *stats = node->saved[0];
    int64_t B = qkv->shape[0], T = qkv->shape[1], H = node->arg.code >> 1, C = qkv->shape[2] / 3;
    bool causal = node->arg.code & 1;
    bool acc;
    float *dqkv = dpt_grad_for_write(ctx, qkv, &acc)->data;
    ctx->be->attention_bwd(ctx, qkv->data, y->data, dy->data, stats->data, B, T, H, C / H, causal,
                           stats->data + B * H * T, dqkv, acc);
}

dpt_tensor *dpt_attention(dpt_ctx *ctx, dpt_tensor *qkv, int heads, bool causal)
{
    char a[96];
    qkv = dpt_contiguous(ctx, dpt_widen(ctx, dpt_plain(ctx, qkv)));
    if (qkv->ndim != 3 || heads < 1 || qkv->shape[2] % (3 * (int64_t)heads) != 0 || qkv->shape[1] < 1)
        dpt_fatal("attention: qkv %s with %d heads: expected (B, T, 3 C) with C a multiple of the heads",
                  dpt_shape_str(qkv, a, sizeof a), heads);
    DPT_REQUIRE_OP(ctx, attention_fwd, "attention");
    int64_t B = qkv->shape[0], T = qkv->shape[1], C = qkv->shape[2] / 3, H = heads;
    dpt_tensor *y = dpt_temp(ctx, 3, (int64_t[]){B, T, C});
    /* the rows' log-sum-exp, then room for backward's per-row dot products */
    dpt_tensor *stats = dpt_temp(ctx, 1, (int64_t[]){2 * B * H * T});
    ctx->be->attention_fwd(ctx, qkv->data, B, T, H, C / H, causal, y->data, stats->data);
    dpt_node *node = dpt_tape_record(ctx, "attention", attention_backward, y, 1, &qkv);
    if (node) {
        node->saved[0] = stats;
        node->arg.code = (int32_t)(H << 1 | (causal ? 1 : 0));
    }
    return y;
}

/* ---------------------------------------------------------------- batched matmul */

/* How a (..., R, C) operand enters a batched GEMM: its matrices as stored (row-major, leading
 * dimension ld) or as a transposed view of row-major ones, and the stride between matrices when
 * the batch axes collapse into one evenly spaced run (batch 1 when it has no batch axes). */
typedef struct bmm_operand {
    bool trans;
    int64_t ld, stride, batch;
} bmm_operand;

static bool bmm_layout(const dpt_tensor *t, bmm_operand *o)
{
    int n = t->ndim;
    int64_t rs = t->strides[n - 2], cs = t->strides[n - 1], r = t->shape[n - 2], c = t->shape[n - 1];
    if (cs == 1 && (rs >= c || r == 1)) {
        o->trans = false, o->ld = rs > c ? rs : c;
    } else if (rs == 1 && (cs >= r || c == 1)) {
        o->trans = true, o->ld = cs > r ? cs : r;
    } else {
        return false;
    }
    o->batch = 1, o->stride = 0;
    for (int d = n - 3; d >= 0; d--) { /* the batch axes must be one run of equal steps */
        if (t->shape[d] == 1) continue;
        if (o->batch == 1)
            o->stride = t->strides[d];
        else if (t->strides[d] != o->stride * o->batch)
            return false;
        o->batch *= t->shape[d];
    }
    return true;
}

/* A operand whose batch of (M, K) matrices is one row-major (batch M, K) matrix (a shared B
 * then makes one GEMM of them all). */
static bool stacks(const bmm_operand *o, int64_t M, int64_t K)
{
    return !o->trans && o->ld == K && (o->batch == 1 || o->stride == M * K);
}

static void bmm_backward(dpt_ctx *ctx, dpt_node *node)
{
    dpt_tensor *a = node->in[0], *b = node->in[1];
    const dpt_tensor *dc = node->out->grad;
    int na = a->ndim, nb = b->ndim;
    int64_t M = a->shape[na - 2], K = a->shape[na - 1], N = b->shape[nb - 1];
    bmm_operand oa, ob;
    bmm_layout(a, &oa), bmm_layout(b, &ob);
    int64_t batch = oa.batch > ob.batch ? oa.batch : ob.batch;
    if (dpt_wants_grad(a) && ob.batch == 1) /* shared B: dA (batch M, K) += dC (batch M, N) B^T at once */
        ctx->be->gemm(ctx, false, !ob.trans, batch * M, K, N, 1.0f, dc->data, N, b->data, ob.ld, 1.0f,
                      dpt_grad_acc(ctx, a)->data, K);
    else if (dpt_wants_grad(a)) /* dA_i (M, K) += dC_i (M, N) B_i^T */
        ctx->be->gemm_batched(ctx, false, !ob.trans, M, K, N, 1.0f, dc->data, N, M * N, b->data, ob.ld, ob.stride, 1.0f,
                              dpt_grad_acc(ctx, a)->data, K, oa.batch > 1 ? M * K : 0, batch);
    if (dpt_wants_grad(b)) { /* dB_i (K, N) += A_i^T dC_i */
        float *db = dpt_grad_acc(ctx, b)->data;
        if (ob.batch == 1 && stacks(&oa, M, K)) /* shared B: one GEMM over the stacked rows */
            ctx->be->gemm(ctx, true, false, K, N, batch * M, 1.0f, a->data, K, dc->data, N, 1.0f, db, N);
        else if (ob.batch > 1 || batch == 1)
            ctx->be->gemm_batched(ctx, !oa.trans, false, K, N, M, 1.0f, a->data, oa.ld, oa.stride, dc->data, N, M * N,
                                  1.0f, db, N, K * N, batch);
        else /* b shared by every batch element: its gradient sums theirs, in batch order */
            for (int64_t i = 0; i < batch; i++)
                ctx->be->gemm(ctx, !oa.trans, false, K, N, M, 1.0f, a->data + i * oa.stride, oa.ld, dc->data + i * M * N,
                              N, 1.0f, db, N);
    }
}

dpt_tensor *dpt_bmm(dpt_ctx *ctx, dpt_tensor *a, dpt_tensor *b)
{
    char sa[96], sb[96];
    a = dpt_widen(ctx, dpt_plain(ctx, a)), b = dpt_widen(ctx, dpt_plain(ctx, b));
    if (a->ndim < 2 || b->ndim < 2 || a->shape[a->ndim - 1] != b->shape[b->ndim - 2])
        dpt_fatal("bmm: %s x %s: the inner dimensions differ (or an operand is not a matrix)",
                  dpt_shape_str(a, sa, sizeof sa), dpt_shape_str(b, sb, sizeof sb));
    /* batch axes: equal, or b without them (a weight shared by every batch element) */
    bool shared = b->ndim == 2;
    bool same = a->ndim == b->ndim;
    for (int d = 0; same && d < a->ndim - 2; d++)
        same = a->shape[d] == b->shape[d];
    if (!shared && !same)
        dpt_fatal("bmm: %s x %s: the batch axes differ", dpt_shape_str(a, sa, sizeof sa), dpt_shape_str(b, sb, sizeof sb));
    bmm_operand oa, ob;
    if (!bmm_layout(a, &oa)) a = dpt_contiguous(ctx, a), bmm_layout(a, &oa);
    if (!bmm_layout(b, &ob)) b = dpt_contiguous(ctx, b), bmm_layout(b, &ob);
    int na = a->ndim;
    int64_t M = a->shape[na - 2], K = a->shape[na - 1], N = b->shape[b->ndim - 1];
    int64_t shape[DPT_MAX_DIMS];
    memcpy(shape, a->shape, sizeof shape);
    shape[na - 1] = N;
    dpt_tensor *c = dpt_temp(ctx, na, shape);
    if (ob.batch == 1 && stacks(&oa, M, K)) /* a weight shared by every matrix: one GEMM */
        ctx->be->gemm(ctx, false, ob.trans, oa.batch * M, N, K, 1.0f, a->data, K, b->data, ob.ld, 0.0f, c->data, N);
    else
        ctx->be->gemm_batched(ctx, oa.trans, ob.trans, M, N, K, 1.0f, a->data, oa.ld, oa.stride, b->data, ob.ld, ob.stride,
                          0.0f, c->data, N, M * N, oa.batch);
    dpt_tape_record(ctx, "bmm", bmm_backward, c, 2, (dpt_tensor *[]){a, b});
    return c;
}

/* ---------------------------------------------------------------- list ops for optimizers */

static void list_of(dpt_tensor_list *l, int n, dpt_tensor *const *y, dpt_tensor *const *x, const char *op)
{
    dpt_tensor_list_init(l, n, 2);
    for (int i = 0; i < n; i++) {
        DPT_ASSERT(y[i]->numel == x[i]->numel && dpt_tensor_is_contiguous(y[i]) && dpt_tensor_is_contiguous(x[i]) &&
                       y[i]->dtype == DPT_F32 && x[i]->dtype == DPT_F32,
                   "%s: tensor %d: dense float tensors of one size", op, i);
        dpt_tensor_list_set(l, i, y[i]->numel, (float *[]){y[i]->data, x[i]->data});
    }
    dpt_tensor_list_seal(l);
}

void dpt_foreach_axpby(dpt_ctx *ctx, int n, dpt_tensor *const *y, float alpha, dpt_tensor *const *x, float beta)
{
    if (n <= 0) return;
    dpt_tensor_list l;
    list_of(&l, n, y, x, "foreach_axpby");
    ctx->be->axpby_multi(ctx, &l, alpha, beta);
    dpt_tensor_list_free(&l);
}

void dpt_foreach_unary(dpt_ctx *ctx, int n, dpt_tensor *const *y, dpt_unary_op op, dpt_tensor *const *x)
{
    DPT_ASSERT((unsigned)op < DPT_UNARY_COUNT, "unary op %d", (int)op);
    if (n <= 0) return;
    dpt_tensor_list l;
    list_of(&l, n, y, x, "foreach_unary");
    ctx->be->unary_multi(ctx, &l, op);
    dpt_tensor_list_free(&l);
}
