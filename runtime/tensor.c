/* tensor.c: tensor creation, views, accessors and host transfers. */
#include "tensor.h"

#include <stdlib.h>
#include <string.h>

#include "ctx.h"
#include "error.h"

static dpt_tensor *tensor_header(dpt_ctx *ctx, int ndim, const int64_t *shape)
{
    DPT_ASSERT(ndim >= 0 && ndim <= DPT_MAX_DIMS, "ndim %d", ndim);
    dpt_tensor *t = calloc(1, sizeof *t);
    if (!t) dpt_fatal("out of host memory for a tensor header");
    t->ctx = ctx;
    t->ndim = ndim;
    t->numel = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        DPT_ASSERT(shape[i] >= 0, "negative dimension %lld", (long long)shape[i]);
        t->shape[i] = shape[i];
        t->strides[i] = t->numel;
        /* A shape whose size does not fit in int64 (e.g. from a hostile file) is refused here,
         * before any arithmetic on it can wrap. */
        DPT_ASSERT(!__builtin_mul_overflow(t->numel, shape[i], &t->numel) && t->numel <= (int64_t)1 << 61,
                   "a tensor of shape dimension %lld overflows int64 elements", (long long)shape[i]);
    }
    t->param_index = -1;
    return t;
}

/* t becomes a temporary: kept until dpt_tape_clear (or an earlier dpt_tape_release). */
static void temps_keep(dpt_ctx *ctx, dpt_tensor *t)
{
    dpt_temps *temps = &ctx->temps;
    if (temps->n == temps->cap) {
        temps->cap = temps->cap ? 2 * temps->cap : 256;
        temps->items = realloc(temps->items, (size_t)temps->cap * sizeof *temps->items);
        if (!temps->items) dpt_fatal("out of host memory growing the list of temporaries");
    }
    temps->items[temps->n++] = t;
    t->is_temp = true;
}

int dpt_temps_count(const dpt_ctx *ctx)
{
    return ctx->temps.n;
}

void dpt_temps_free_since(dpt_ctx *ctx, int from, const dpt_tensor *keep)
{
    dpt_temps *temps = &ctx->temps;
    DPT_ASSERT(from >= 0 && from <= temps->n, "a mark of %d temporaries from before a clear", from);
    /* A temporary's gradient is a temporary too, freed by the loop below, not through its owner. */
    for (int i = from; i < temps->n; i++)
        if (temps->items[i] != keep) temps->items[i]->grad = NULL;
    int kept = from;
    for (int i = from; i < temps->n; i++) {
        dpt_tensor *t = temps->items[i];
        if (t == keep)
            temps->items[kept++] = t;
        else
            dpt_tensor_free(t); /* keep's storage, when t shares it, lives on by its count */
    }
    temps->n = kept;
}

void dpt_temps_destroy(dpt_ctx *ctx)
{
    free(ctx->temps.items);
    memset(&ctx->temps, 0, sizeof ctx->temps);
}

static dpt_tensor *tensor_alloc(dpt_ctx *ctx, int ndim, const int64_t *shape, bool temp, dpt_dtype dtype,
                                const char *what)
{
    dpt_tensor *t = tensor_header(ctx, ndim, shape);
    t->dtype = dtype;
    dpt_storage *s = calloc(1, sizeof *s);
    if (!s) dpt_fatal("out of host memory for a storage header");
    size_t bytes = (size_t)t->numel * dpt_dtype_size(dtype);
    s->ptr = dpt_ctx_alloc(ctx, bytes, &s->granted, what ? what : "a tensor");
    s->refcount = 1;
    s->alloc = ctx->alloc;
    t->storage = s;
    t->data = s->ptr;
    if (temp) temps_keep(ctx, t);
    return t;
}

dpt_tensor *dpt_tensor_alloc(dpt_ctx *ctx, int ndim, const int64_t *shape, bool temp)
{
    return tensor_alloc(ctx, ndim, shape, temp, DPT_F32, NULL);
}

dpt_tensor *dpt_tensor_new_dtype(dpt_ctx *ctx, dpt_dtype dtype, int ndim, const int64_t *shape)
{
    DPT_ASSERT(dtype == DPT_F32 || dtype == DPT_I32, "a new tensor of dtype %d", (int)dtype);
    dpt_tensor *t = tensor_alloc(ctx, ndim, shape, false, dtype, NULL);
    ctx->be->fill(ctx, t->data, t->numel, 0.0f); /* zero bits: 0 in both */
    return t;
}

dpt_tensor *dpt_temp_i32(dpt_ctx *ctx, int ndim, const int64_t *shape)
{
    return tensor_alloc(ctx, ndim, shape, true, DPT_I32, NULL);
}

dpt_dtype dpt_tensor_dtype(const dpt_tensor *t)
{
    return t->dtype;
}

dpt_tensor *dpt_temp16(dpt_ctx *ctx, int ndim, const int64_t *shape)
{
    return tensor_alloc(ctx, ndim, shape, true, DPT_BF16, NULL);
}

dpt_tensor *dpt_temp(dpt_ctx *ctx, int ndim, const int64_t *shape)
{
    return dpt_tensor_alloc(ctx, ndim, shape, true);
}

dpt_tensor *dpt_temp_zeros(dpt_ctx *ctx, int ndim, const int64_t *shape)
{
    dpt_tensor *t = dpt_tensor_alloc(ctx, ndim, shape, true);
    ctx->be->fill(ctx, t->data, t->numel, 0.0f);
    return t;
}

dpt_tensor *dpt_temp_like(dpt_ctx *ctx, const dpt_tensor *t)
{
    dpt_tensor *out = dpt_temp(ctx, t->ndim, t->shape);
    out->layout = t->layout;
    return out;
}

dpt_tensor *dpt_temp_same(dpt_ctx *ctx, const dpt_tensor *t)
{
    dpt_tensor *out = tensor_alloc(ctx, t->ndim, t->shape, true, t->dtype, NULL);
    out->layout = t->layout;
    return out;
}

/* A temporary header over t's storage (counted) with this shape, strides (NULL: contiguous)
 * and element offset. */
static dpt_tensor *share(dpt_ctx *ctx, dpt_tensor *t, int ndim, const int64_t *shape, const int64_t *strides,
                         int64_t offset)
{
    dpt_tensor *v = tensor_header(ctx, ndim, shape);
    if (strides) memcpy(v->strides, strides, (size_t)ndim * sizeof *strides);
    v->storage = t->storage;
    v->storage->refcount++;
    v->data = t->data + offset;
    temps_keep(ctx, v);
    return v;
}

dpt_tensor *dpt_alias(dpt_ctx *ctx, dpt_tensor *t)
{
    dpt_tensor *a = share(ctx, t, t->ndim, t->shape, t->strides, 0);
    a->layout = t->layout, a->dtype = t->dtype;
    return a;
}

dpt_tensor *dpt_view(dpt_ctx *ctx, dpt_tensor *t, int ndim, const int64_t *shape, const int64_t *strides,
                     int64_t offset)
{
    DPT_ASSERT(t->dtype != DPT_BF16, "a view of a 16-bit activation (widen it first)"); /* offset in 4-byte elements */
    dpt_tensor *v = share(ctx, t, ndim, shape, strides, offset);
    v->dtype = t->dtype;
    return v;
}

dpt_tensor *dpt_tensor_wrap(dpt_ctx *ctx, float *data, int ndim, const int64_t *shape)
{
    dpt_tensor *t = tensor_header(ctx, ndim, shape);
    dpt_storage *s = calloc(1, sizeof *s);
    if (!s) dpt_fatal("out of host memory for a storage header");
    s->ptr = data;
    s->refcount = 1;
    t->storage = s;
    t->data = data;
    return t;
}

dpt_tensor *dpt_tensor_new_for(dpt_ctx *ctx, int ndim, const int64_t *shape, const char *what)
{
    dpt_tensor *t = tensor_alloc(ctx, ndim, shape, false, DPT_F32, what);
    ctx->be->fill(ctx, t->data, t->numel, 0.0f);
    return t;
}

dpt_tensor *dpt_tensor_new(dpt_ctx *ctx, int ndim, const int64_t *shape)
{
    return dpt_tensor_new_for(ctx, ndim, shape, NULL);
}

void dpt_tensor_release(dpt_tensor *t)
{
    if (t->storage && --t->storage->refcount == 0) {
        if (t->storage->alloc) dpt_alloc_put(t->storage->alloc, t->storage->ptr, t->storage->granted);
        free(t->storage);
    }
    t->storage = NULL;
    t->data = NULL;
}

void dpt_tensor_free(dpt_tensor *t)
{
    if (!t) return;
    dpt_tensor_release(t);
    /* A temporary's gradient is itself a temporary and is freed by the tape. */
    if (t->grad && !t->grad->is_temp) dpt_tensor_free(t->grad);
    free(t);
}

void dpt_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides)
{
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--)
        strides[d] = s, s *= shape[d];
}

bool dpt_tensor_is_contiguous(const dpt_tensor *t)
{
    int64_t expect = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->strides[i] != expect) return false;
        expect *= t->shape[i];
    }
    return true;
}

void dpt_require_contiguous(const char *op, const dpt_tensor *t)
{
    char buf[96];
    if (!dpt_tensor_is_contiguous(t))
        dpt_fatal("%s needs a contiguous tensor, got a strided view of shape %s", op,
                  dpt_shape_str(t, buf, sizeof buf));
}

bool dpt_same_shape(const dpt_tensor *a, const dpt_tensor *b)
{
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

const char *dpt_dims_str(int ndim, const int64_t *dims, char *buf, size_t size)
{
    size_t used = (size_t)snprintf(buf, size, "(");
    for (int i = 0; i < ndim && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%lld", i ? ", " : "", (long long)dims[i]);
    if (used < size) snprintf(buf + used, size - used, ")");
    return buf;
}

const char *dpt_shape_str(const dpt_tensor *t, char *buf, size_t size)
{
    return dpt_dims_str(t->ndim, t->shape, buf, size);
}

void dpt_check_indices(const char *op, const char *noun, const int32_t *ids, int64_t n, int64_t limit,
                       bool has_ignore, int32_t ignore, const char *hint)
{
    for (int64_t i = 0; i < n; i++) {
        if ((ids[i] >= 0 && ids[i] < limit) || (has_ignore && ids[i] == ignore)) continue;
        char also[48] = "";
        if (has_ignore) snprintf(also, sizeof also, " and is not the ignore index %d", (int)ignore);
        dpt_fatal("%s: %s %d at position %lld of %lld is outside [0, %lld)%s\nHINT: %s", op, noun, (int)ids[i],
                  (long long)i, (long long)n, (long long)limit, also, hint);
    }
}

int dpt_tensor_ndim(const dpt_tensor *t)
{
    return t->ndim;
}
int64_t dpt_tensor_numel(const dpt_tensor *t)
{
    return t->numel;
}
const char *dpt_tensor_name(const dpt_tensor *t)
{
    return t->name;
}
float *dpt_tensor_data(dpt_tensor *t)
{
    DPT_ASSERT(t->dtype == DPT_F32, "the float data of a %s tensor (copy it to the host instead)",
               t->dtype == DPT_BF16 ? "16-bit" : "int32");
    return t->data;
}

void dpt_tensor_copy_from_host_i32(dpt_tensor *t, const int32_t *src)
{
    DPT_ASSERT(t->dtype == DPT_I32 && dpt_tensor_is_contiguous(t), "int32 values into a %s tensor",
               t->dtype == DPT_I32 ? "strided" : "float");
    t->ctx->be->dev->copy_h2d(t->ctx, t->data, src, (size_t)t->numel * sizeof *src);
}

void dpt_tensor_copy_to_host_i32(const dpt_tensor *t, int32_t *dst)
{
    DPT_ASSERT(t->dtype == DPT_I32 && dpt_tensor_is_contiguous(t), "int32 values from a %s tensor",
               t->dtype == DPT_I32 ? "strided" : "float");
    t->ctx->host_syncs++;
    t->ctx->be->dev->copy_d2h(t->ctx, dst, t->data, (size_t)t->numel * sizeof *dst);
}
dpt_tensor *dpt_tensor_grad(dpt_tensor *t)
{
    return t->grad;
}

int64_t dpt_tensor_dim(const dpt_tensor *t, int axis)
{
    int a = axis < 0 ? axis + t->ndim : axis;
    DPT_ASSERT(a >= 0 && a < t->ndim, "axis %d of a %d-d tensor", axis, t->ndim);
    return t->shape[a];
}

void dpt_tensor_copy_from_host(dpt_tensor *t, const float *src)
{
    DPT_ASSERT(dpt_tensor_is_contiguous(t), "copy into a strided view");
    DPT_ASSERT(t->layout == DPT_LAYOUT_NCHW, "copy into a blocked activation");
    t->ctx->be->dev->copy_h2d(t->ctx, t->data, src, (size_t)t->numel * sizeof(float));
}

void dpt_tensor_copy_to_host(const dpt_tensor *t, float *dst)
{
    DPT_ASSERT(t->dtype != DPT_I32, "float values from an int32 tensor (dpt_tensor_copy_to_host_i32)");
    t->ctx->host_syncs++;
    if (!dpt_tensor_is_contiguous(t)) { /* a view (F32, NCHW): gathered on the device, in index order */
        dpt_ctx *ctx = t->ctx;
        size_t granted;
        float *dense = dpt_ctx_alloc(ctx, (size_t)t->numel * sizeof(float), &granted, "a view's copy");
        int64_t strides[DPT_MAX_DIMS];
        dpt_contiguous_strides(t->ndim, t->shape, strides);
        ctx->be->strided_copy(ctx, t->ndim, t->shape, t->data, t->strides, dense, strides, false);
        ctx->be->dev->copy_d2h(ctx, dst, dense, (size_t)t->numel * sizeof(float));
        dpt_alloc_put(ctx->alloc, dense, granted);
        return;
    }
    if (t->layout != DPT_LAYOUT_NCHW || t->dtype != DPT_F32) { /* reads out as NCHW float */
        dpt_ctx *ctx = t->ctx;
        size_t granted;
        float *plain =
            dpt_ctx_alloc(ctx, (size_t)t->numel * sizeof(float), &granted, "a relayout for a copy");
        if (t->dtype == DPT_BF16)
            ctx->be->widen(ctx, t->data, t->layout, plain, DPT_LAYOUT_NCHW, t->shape, false);
        else
            ctx->be->relayout(ctx, t->data, t->layout, plain, DPT_LAYOUT_NCHW, t->shape, false);
        ctx->be->dev->copy_d2h(ctx, dst, plain, (size_t)t->numel * sizeof(float));
        dpt_alloc_put(ctx->alloc, plain, granted);
        return;
    }
    t->ctx->be->dev->copy_d2h(t->ctx, dst, t->data, (size_t)t->numel * sizeof(float));
}

float dpt_tensor_item(const dpt_tensor *t)
{
    DPT_ASSERT(t->numel == 1 && t->dtype == DPT_F32, "item() of a tensor with %lld elements", (long long)t->numel);
    t->ctx->host_syncs++;
    float v;
    t->ctx->be->dev->copy_d2h(t->ctx, &v, t->data, sizeof v);
    return v;
}

void dpt_tensor_add_slice(dpt_ctx *ctx, dpt_tensor *dst, int64_t dst_at, const dpt_tensor *src,
                          int64_t src_at, int64_t n, float alpha)
{
    DPT_ASSERT(dst_at >= 0 && src_at >= 0 && n >= 0 && dst_at + n <= dst->numel && src_at + n <= src->numel,
               "slice [%lld, +%lld) of %lld <- [%lld, +%lld) of %lld", (long long)dst_at, (long long)n,
               (long long)dst->numel, (long long)src_at, (long long)n, (long long)src->numel);
    DPT_ASSERT(dst->dtype == DPT_F32 && src->dtype == DPT_F32, "a slice of a 16-bit activation");
    ctx->be->axpy(ctx, n, alpha, src->data + src_at, dst->data + dst_at);
}

void dpt_tensor_fill_slice(dpt_ctx *ctx, dpt_tensor *t, int64_t at, int64_t n, float value)
{
    DPT_ASSERT(at >= 0 && n >= 0 && at + n <= t->numel, "slice [%lld, +%lld) of %lld", (long long)at,
               (long long)n, (long long)t->numel);
    DPT_ASSERT(t->dtype == DPT_F32, "a slice of a 16-bit activation");
    ctx->be->fill(ctx, t->data + at, n, value);
}
