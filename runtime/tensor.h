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

struct dpt_tensor {
    int ndim;
    int64_t shape[DPT_MAX_DIMS];
    int64_t strides[DPT_MAX_DIMS]; /* in elements */
    int64_t numel;
    dpt_storage *storage;
    float *data; /* storage->ptr + view offset */
    dpt_ctx *ctx;
    dpt_tensor *grad;   /* same shape, contiguous; NULL until something accumulates into it */
    bool requires_grad; /* gradient wanted: a parameter, or computed from one */
    bool is_param;      /* a leaf whose gradient is persistent and reported by the hook */
    bool is_temp;       /* owned by the tape; freed by dpt_tape_clear */
    int param_index;    /* position in its model's parameter list */
    int pending_uses;   /* autograd: uses left in this backward before the gradient is final */
    char name[64];
};

/* A new tensor with fresh (uninitialised) contiguous storage. */
dpt_tensor *dpt_tensor_alloc(dpt_ctx *ctx, int ndim, const int64_t *shape, bool temp);
/* A persistent tensor over memory it does not own (storage->alloc == NULL): freeing it leaves
 * the memory alone. DDP uses it to make gradients views into its buckets. */
dpt_tensor *dpt_tensor_wrap(dpt_ctx *ctx, float *data, int ndim, const int64_t *shape);
/* A temporary (tape-owned) tensor; contents uninitialised / zero-filled. */
dpt_tensor *dpt_temp(dpt_ctx *ctx, int ndim, const int64_t *shape);
dpt_tensor *dpt_temp_zeros(dpt_ctx *ctx, int ndim, const int64_t *shape);
dpt_tensor *dpt_temp_like(dpt_ctx *ctx, const dpt_tensor *t);
/* A temporary view of t's storage with another shape and strides. */
dpt_tensor *dpt_view(dpt_ctx *ctx, dpt_tensor *t, int ndim, const int64_t *shape, const int64_t *strides,
                     int64_t offset);
bool dpt_tensor_is_contiguous(const dpt_tensor *t);
/* Stop with a message naming op when t is a strided view (elementwise kernels need dense data). */
void dpt_require_contiguous(const char *op, const dpt_tensor *t);
bool dpt_same_shape(const dpt_tensor *a, const dpt_tensor *b);
/* "(64, 784)" into buf. */
const char *dpt_shape_str(const dpt_tensor *t, char *buf, size_t size);

#endif
