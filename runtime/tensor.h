/* tensor.h: the tensor and its refcounted storage (internal layout behind dpt_tensor). */
#ifndef DPT_TENSOR_H
#define DPT_TENSOR_H

#include "dpt.h"
#include "alloc.h"

typedef struct dpt_storage {
    void *ptr;      /* device memory from the context's caching allocator */
    size_t granted; /* the allocator's block size, returned with the block */
    int refcount;   /* one per tensor (view) that points into it */
    dpt_alloc *alloc;
} dpt_storage;

/* How a 4-D activation (N, C, H, W) lies in memory. NCHW16C (oneDNN's nChw16c: blocks of
 * 16 channels innermost) only ever holds a tensor whose C is a multiple of 16, so it has the
 * same numel and size, and elementwise kernels run on it unchanged; NHWC (channels last,
 * [train] memory_format = nhwc) likewise for any C. Ops that read positions (reshape, matmul,
 * the loss; pooling where the backend pools only NCHW) take dpt_plain() of their input first.
 * Only the oneDNN and cuDNN convolutions produce them, and only between the ops that accept
 * them (conv, batch norm, relu, add, scale, mul, dropout, pooling), so no data ever leaves the
 * tape in them. */
typedef enum dpt_layout { DPT_LAYOUT_NCHW = 0, DPT_LAYOUT_NCHW16C = 1, DPT_LAYOUT_NHWC = 2 } dpt_layout;

/* dpt_dtype (dpt.h): BF16 (bfloat16, 2 bytes, `data` then points at uint16_t) holds only
 * activations, and only with [train] precision = bf16 on a backend that keeps them (act16): a
 * convolution writes its output in it, batch norm, relu and add keep it, and every other op
 * widens its input to F32 first (dpt_plain, dpt_widen). Parameters, gradients and whatever
 * leaves the tape are always F32, so no data ever leaves the tape in it. I32 (int32 behind the
 * float pointer) holds indices: labels, token ids; no gradient flows into it. */

struct dpt_tensor {
    int ndim;
    dpt_layout layout;
    dpt_dtype dtype;
    int64_t shape[DPT_MAX_DIMS];
    int64_t strides[DPT_MAX_DIMS]; /* in elements */
    int64_t numel;
    dpt_storage *storage;
    float *data; /* storage->ptr + view offset */
    dpt_ctx *ctx;
    dpt_tensor *grad;   /* same shape, contiguous; NULL until something accumulates into it */
    bool requires_grad; /* gradient wanted: a parameter, or computed from one */
    bool is_param;      /* a leaf whose gradient is persistent and reported by the hook */
    bool is_temp;       /* one of the context's temporaries (dpt_temps); freed by dpt_tape_clear */
    int param_index;    /* position in its model's parameter list */
    int pending_uses;   /* autograd: uses left in this backward before the gradient is final */
    char name[DPT_NAME_MAX + 65]; /* a parameter's, or its optimizer state's: NAME.OPTIMIZERk */
};

/* Every temporary a context has made since the last dpt_tape_clear, in the order made. Only
 * tensor.c touches its fields; autograd.c decides when they go (dpt_tape_clear, dpt_tape_release). */
typedef struct dpt_temps {
    dpt_tensor **items;
    int n, cap;
} dpt_temps;

/* How many temporaries the context holds now (a mark to free back to). */
int dpt_temps_count(const dpt_ctx *ctx);
/* Free the temporaries made since the first `from` except `keep` (which stays, in order); their
 * gradients are temporaries among them. */
void dpt_temps_free_since(dpt_ctx *ctx, int from, const dpt_tensor *keep);
/* The list's own memory, at dpt_ctx_free (after dpt_temps_free_since(ctx, 0, NULL)). */
void dpt_temps_destroy(dpt_ctx *ctx);

/* A new tensor with fresh (uninitialised) contiguous storage. */
dpt_tensor *dpt_tensor_alloc(dpt_ctx *ctx, int ndim, const int64_t *shape, bool temp);
/* dpt_tensor_new whose out-of-memory report says what the tensor is (a parameter, its gradient,
 * an optimizer's state; NULL: "a tensor"). */
dpt_tensor *dpt_tensor_new_for(dpt_ctx *ctx, int ndim, const int64_t *shape, const char *what);
/* A persistent tensor over memory it does not own (storage->alloc == NULL): freeing it leaves
 * the memory alone. DDP uses it to make gradients views into its buckets. */
dpt_tensor *dpt_tensor_wrap(dpt_ctx *ctx, float *data, int ndim, const int64_t *shape);
/* A temporary (tape-owned) tensor; contents uninitialised / zero-filled. */
dpt_tensor *dpt_temp(dpt_ctx *ctx, int ndim, const int64_t *shape);
dpt_tensor *dpt_temp_zeros(dpt_ctx *ctx, int ndim, const int64_t *shape);
dpt_tensor *dpt_temp_like(dpt_ctx *ctx, const dpt_tensor *t); /* same shape and layout, F32 */
dpt_tensor *dpt_temp_same(dpt_ctx *ctx, const dpt_tensor *t); /* same shape, layout and dtype */
/* A temporary of this shape in 16 bits (BF16), layout NCHW until the caller sets it. */
dpt_tensor *dpt_temp16(dpt_ctx *ctx, int ndim, const int64_t *shape);
/* A temporary of int32 values (indices), uninitialised. */
dpt_tensor *dpt_temp_i32(dpt_ctx *ctx, int ndim, const int64_t *shape);
/* x in plain NCHW F32: x itself, or a recorded relayout/widening (its backward relays the
 * gradient back). */
dpt_tensor *dpt_plain(dpt_ctx *ctx, dpt_tensor *x);
/* x when its data is dense (in its own layout), else dpt_contiguous(x): a recorded dense copy.
 * For ops whose kernels read dense memory, so that a view (narrow, permute, slice) is taken as
 * PyTorch takes it rather than refused. */
dpt_tensor *dpt_dense(dpt_ctx *ctx, dpt_tensor *x);
/* The strides (in elements) of a dense row-major tensor of this shape. */
void dpt_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides);
/* x as F32 in `layout`: x itself, or a recorded relayout/widening. */
dpt_tensor *dpt_to_layout(dpt_ctx *ctx, dpt_tensor *x, dpt_layout layout);
/* x in F32, in its own layout: x itself, or a recorded widening of a BF16 activation. */
dpt_tensor *dpt_widen(dpt_ctx *ctx, dpt_tensor *x);
/* The layout two operands of an elementwise op share; converts both to plain if they differ,
 * and widens a BF16 operand whose partner is F32. */
dpt_layout dpt_common_layout(dpt_ctx *ctx, dpt_tensor **a, dpt_tensor **b);
/* Bytes per element. */
static inline size_t dpt_dtype_size(dpt_dtype d)
{
    return d == DPT_BF16 ? 2 : 4; /* F32, I32 */
}
/* A temporary over t's storage with t's shape, layout and dtype (an in-place op's output). */
dpt_tensor *dpt_alias(dpt_ctx *ctx, dpt_tensor *t);
/* A temporary view of t's storage with another shape and strides. */
dpt_tensor *dpt_view(dpt_ctx *ctx, dpt_tensor *t, int ndim, const int64_t *shape, const int64_t *strides,
                     int64_t offset);
/* Give t's memory back (the header stays, with no data, until its owner frees it). */
void dpt_tensor_release(dpt_tensor *t);
bool dpt_tensor_is_contiguous(const dpt_tensor *t);
/* Stop with a message naming op when t is a strided view (elementwise kernels need dense data). */
void dpt_require_contiguous(const char *op, const dpt_tensor *t);
bool dpt_same_shape(const dpt_tensor *a, const dpt_tensor *b);
/* "(2, 3, 4)" of n dims into buf (size bytes; cut to fit), returned; a tensor's shape so. */
const char *dpt_dims_str(int ndim, const int64_t *dims, char *buf, size_t size);
const char *dpt_shape_str(const dpt_tensor *t, char *buf, size_t size);
/* Indices a CPU op reads from host memory (an embedding's ids, a cross-entropy's targets) in
 * [0, limit), or equal to ignore where has_ignore: else the job ends naming op, the first index
 * outside, its position and the range, with hint (PyTorch's IndexError). On a GPU the kernels
 * write NaN for them instead (no host read in the step): the loss shows it. */
void dpt_check_indices(const char *op, const char *noun, const int32_t *ids, int64_t n, int64_t limit,
                       bool has_ignore, int32_t ignore, const char *hint);

#endif
