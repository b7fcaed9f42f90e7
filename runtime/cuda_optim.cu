/* cuda_optim.cu: SGD and AdamW updates, one tensor at a time or a whole list in one launch
 * (chunk tables uploaded once per list and kept), and the list's sum of squares (the
 * gradient norm). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

/* One element of each update, shared by the single-tensor and the multi-tensor kernels so
 * both give the same bits. */
__device__ __forceinline__ void sgd_one(float *p, const float *g, float *buf, float lr, float momentum,
                                        float dampening, float wd, bool nesterov, bool first)
{
    float gi = *g + wd * *p;
    if (momentum != 0.0f) {
        *buf = first ? gi : momentum * *buf + (1.0f - dampening) * gi;
        gi = nesterov ? gi + momentum * *buf : *buf;
    }
    *p -= lr * gi;
}

__device__ __forceinline__ void adamw_one(float *p, const float *g, float *m, float *v, float lr, float b1,
                                          float b2, float eps, float wd, float step_size, float bc2_sqrt)
{
    *p *= 1.0f - lr * wd;
    *m = b1 * *m + (1.0f - b1) * *g;
    *v = b2 * *v + (1.0f - b2) * *g * *g;
    *p -= step_size * *m / (sqrtf(*v) / bc2_sqrt + eps);
}

__global__ void sgd_kernel(int64_t n, float *p, const float *g, float *buf, float lr, float momentum,
                           float dampening, float wd, bool nesterov, bool first)
{
    GRID_STRIDE(i, n) sgd_one(p + i, g + i, buf + i, lr, momentum, dampening, wd, nesterov, first);
}

__global__ void adamw_kernel(int64_t n, float *p, const float *g, float *m, float *v, float lr, float b1,
                             float b2, float eps, float wd, float step_size, float bc2_sqrt)
{
    GRID_STRIDE(i, n) adamw_one(p + i, g + i, m + i, v + i, lr, b1, b2, eps, wd, step_size, bc2_sqrt);
}

/* Multi-tensor kernels: one block per chunk of at most MT_CHUNK elements of one tensor. */
#define MT_CHUNK 65536
#define MT_WIDTH 4
typedef struct mt_chunk {
    float *p[MT_WIDTH];
    int64_t n;
} mt_chunk;
#define MT_TABLES 4
typedef struct mt_table {
    uint64_t key;
    mt_chunk *dev;
    int nchunks;
} mt_table;

__global__ void sgd_multi_kernel(const mt_chunk *chunks, float lr, float momentum, float dampening, float wd,
                                 bool nesterov, bool first)
{
    mt_chunk c = chunks[blockIdx.x];
    for (int64_t i = threadIdx.x; i < c.n; i += blockDim.x)
        sgd_one(c.p[0] + i, c.p[1] + i, c.p[2] + i, lr, momentum, dampening, wd, nesterov, first);
}

__global__ void adamw_multi_kernel(const mt_chunk *chunks, float lr, float b1, float b2, float eps, float wd,
                                   float step_size, float bc2_sqrt)
{
    mt_chunk c = chunks[blockIdx.x];
    for (int64_t i = threadIdx.x; i < c.n; i += blockDim.x)
        adamw_one(c.p[0] + i, c.p[1] + i, c.p[2] + i, c.p[3] + i, lr, b1, b2, eps, wd, step_size, bc2_sqrt);
}

__global__ void sumsq_multi_kernel(const mt_chunk *chunks, double *partials)
{
    mt_chunk c = chunks[blockIdx.x];
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < c.n; i += blockDim.x)
        acc += (double)c.p[0][i] * (double)c.p[0][i];
    block_partial(acc, partials); /* one partial per chunk, totalled in chunk order */
}

__global__ void scale_multi_kernel(const mt_chunk *chunks, float factor)
{
    mt_chunk c = chunks[blockIdx.x];
    for (int64_t i = threadIdx.x; i < c.n; i += blockDim.x)
        c.p[0][i] = factor == 0.0f ? 0.0f : c.p[0][i] * factor;
}

/* ---------------------------------------------------------------- multi-tensor entries */

/* A list's chunks on the device. Pointers are stable from step to step (parameters, their
 * gradients in DDP buckets, optimizer state), so each list is uploaded once and found again
 * by its key; a few lists are in use at a time (the optimizer's, the gradient norm's). */
static const mt_table *mt_upload(dpt_ctx *ctx, const dpt_tensor_list *l)
{
    cuda_state *s = state_of(ctx);
    if (!s->tables) {
        s->tables = (mt_table *)calloc(MT_TABLES, sizeof *s->tables);
        if (!s->tables) dpt_fatal("out of host memory for multi-tensor tables");
    }
    for (int i = 0; i < MT_TABLES; i++)
        if (s->tables[i].dev && s->tables[i].key == l->key) return &s->tables[i];
    DPT_ASSERT(l->width <= MT_WIDTH, "multi-tensor list of width %d", l->width);
    int n = 0;
    for (int i = 0; i < l->count; i++)
        n += (int)CEIL_DIV(l->numel[i], (int64_t)MT_CHUNK);
    mt_chunk *host = (mt_chunk *)calloc((size_t)n + 1, sizeof *host);
    if (!host) dpt_fatal("out of host memory for a multi-tensor table");
    int k = 0;
    for (int i = 0; i < l->count; i++)
        for (int64_t off = 0; off < l->numel[i]; off += MT_CHUNK, k++) {
            for (int w = 0; w < l->width; w++)
                host[k].p[w] = l->ptr[i * l->width + w] + off;
            host[k].n = l->numel[i] - off < MT_CHUNK ? l->numel[i] - off : MT_CHUNK;
        }
    /* Slots are kept most recent first: take an empty one, else evict the last (oldest); a
     * kernel still queued may read its table, so wait before freeing it. */
    int slot = MT_TABLES - 1;
    for (int i = 0; i < MT_TABLES; i++)
        if (!s->tables[i].dev) {
            slot = i;
            break;
        }
    if (s->tables[slot].dev) {
        CHECK_CUDA(cudaStreamSynchronize(s->compute));
        CHECK_CUDA(cudaFree(s->tables[slot].dev));
    }
    memmove(&s->tables[1], &s->tables[0], (size_t)slot * sizeof s->tables[0]);
    mt_table *t = &s->tables[0];
    t->key = l->key, t->nchunks = n, t->dev = NULL;
    CHECK_CUDA(cudaMalloc(&t->dev, (size_t)(n ? n : 1) * sizeof *host));
    cuda_h2d(ctx, t->dev, host, (size_t)n * sizeof *host);
    free(host);
    return t;
}

static void cuda_sgd_step_multi(dpt_ctx *ctx, const dpt_tensor_list *l, float lr, float momentum,
                                float dampening, float wd, bool nesterov, bool first)
{
    const mt_table *t = mt_upload(ctx, l);
    if (!t->nchunks) return;
    sgd_multi_kernel<<<(unsigned)t->nchunks, THREADS, 0, stream_of(ctx)>>>(t->dev, lr, momentum, dampening,
                                                                           wd, nesterov, first);
    CHECK_LAUNCH();
}

static void cuda_adamw_step_multi(dpt_ctx *ctx, const dpt_tensor_list *l, float lr, float b1, float b2,
                                  float eps, float wd, float bc1, float bc2)
{
    const mt_table *t = mt_upload(ctx, l);
    if (!t->nchunks) return;
    adamw_multi_kernel<<<(unsigned)t->nchunks, THREADS, 0, stream_of(ctx)>>>(t->dev, lr, b1, b2, eps, wd,
                                                                             lr / bc1, sqrtf(bc2));
    CHECK_LAUNCH();
}

/* zero_grad and the clipping/unscaling factor: one launch for every gradient instead of one
 * per parameter (issue 29 item 10) */
static void cuda_scale_multi(dpt_ctx *ctx, const dpt_tensor_list *l, float factor)
{
    const mt_table *t = mt_upload(ctx, l);
    if (t->nchunks) scale_multi_kernel<<<(unsigned)t->nchunks, THREADS, 0, stream_of(ctx)>>>(t->dev, factor);
    CHECK_CUDA(cudaGetLastError());
}

static double cuda_sumsq_multi(dpt_ctx *ctx, const dpt_tensor_list *l)
{
    const mt_table *t = mt_upload(ctx, l);
    if (!t->nchunks) return 0.0;
    sumsq_multi_kernel<<<(unsigned)t->nchunks, THREADS, 0, stream_of(ctx)>>>(t->dev, cuda_partials(ctx, t->nchunks));
    CHECK_LAUNCH();
    cuda_total_partials(ctx, t->nchunks);
    return cuda_read_scratch(ctx);
}

static void cuda_sgd_step(dpt_ctx *ctx, int64_t n, float *p, const float *g, float *buf, float lr,
                          float momentum, float dampening, float wd, bool nesterov, bool first)
{
    LAUNCH(sgd_kernel, n, n, p, g, buf, lr, momentum, dampening, wd, nesterov, first);
}

static void cuda_adamw_step(dpt_ctx *ctx, int64_t n, float *p, const float *g, float *m, float *v, float lr,
                            float b1, float b2, float eps, float wd, float bc1, float bc2)
{
    LAUNCH(adamw_kernel, n, n, p, g, m, v, lr, b1, b2, eps, wd, lr / bc1, sqrtf(bc2));
}

void cuda_optim_entries(dpt_backend *be)
{
    be->sgd_step = cuda_sgd_step;
    be->adamw_step = cuda_adamw_step;
    be->sgd_step_multi = cuda_sgd_step_multi;
    be->adamw_step_multi = cuda_adamw_step_multi;
    be->sumsq_multi = cuda_sumsq_multi;
    be->scale_multi = cuda_scale_multi;
}

void cuda_optim_release(cuda_state *s)
{
    for (int i = 0; s->tables && i < MT_TABLES; i++)
        cudaFree(s->tables[i].dev);
    free(s->tables);
    s->tables = NULL;
}
