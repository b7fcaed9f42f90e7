/* zero.c: the shard plan of [distributed] zero and the all-gather that makes the ranks' ranges
 * whole again (zero.h). The parameters move into their segments (one buffer each, laid out as
 * the plan says), so the all-gather after a step works in place: no copy in or out. */
#include "zero.h"

#include <stdlib.h>
#include <string.h>

#include "ctx.h"
#include "error.h"
#include "tensor.h"

#define ALIGN_FLOATS 64             /* 256 bytes, as DDP's bucket views */
#define SEGMENT_FLOATS (4 << 20)    /* its own segments: 16 MiB */

struct dpt_zero {
    dpt_model *model;
    dpt_comm *comm;
    int nparams, nsegments;
    int *segment_of;
    int64_t *offset_of, *segment_numel;
    int64_t *lo, *hi;  /* per parameter, this rank's elements */
    int64_t *displs;   /* per segment, size + 1 range starts */
    dpt_ctx *ctx;
    float **segment;   /* per segment, the parameters' storage (NULL: they keep their own) */
    size_t *granted;
    float *staging;    /* what a collective sends or receives by copy (grown as needed) */
    int64_t staging_floats;
};

static float *staging(dpt_zero *z, int64_t floats)
{
    if (floats > z->staging_floats) {
        free(z->staging);
        z->staging = calloc((size_t)floats, sizeof *z->staging);
        if (!z->staging) dpt_fatal("out of host memory for ZeRO's buffer (%lld floats)", (long long)floats);
        z->staging_floats = floats;
    }
    return z->staging;
}

/* Each parameter's storage moved to its place in its segment's buffer (values kept); not done
 * when one shares its storage with another tensor (a view would keep the old one). */
static void rehome_params(dpt_zero *z)
{
    for (int p = 0; p < z->nparams; p++) {
        const dpt_tensor *t = dpt_model_param_at(z->model, p);
        if (!t->storage || t->storage->refcount != 1 || t->data != t->storage->ptr || !dpt_tensor_is_contiguous(t))
            return;
    }
    z->ctx = dpt_model_param_at(z->model, 0)->ctx;
    z->segment = calloc((size_t)z->nsegments, sizeof *z->segment);
    z->granted = calloc((size_t)z->nsegments, sizeof *z->granted);
    if (!z->segment || !z->granted) dpt_fatal("out of host memory");
    for (int s = 0; s < z->nsegments; s++) {
        z->segment[s] = dpt_ctx_alloc(z->ctx, (size_t)z->segment_numel[s] * sizeof(float), &z->granted[s],
                                      "ZeRO's parameter segments");
        z->ctx->be->fill(z->ctx, z->segment[s], z->segment_numel[s], 0.0f); /* the gaps */
    }
    for (int p = 0; p < z->nparams; p++) {
        dpt_tensor *t = dpt_model_param_at(z->model, p);
        float *at = z->segment[z->segment_of[p]] + z->offset_of[p];
        z->ctx->be->dev->copy_d2d(z->ctx, at, t->data, (size_t)t->numel * sizeof(float));
        dpt_storage *own = calloc(1, sizeof *own);
        if (!own) dpt_fatal("out of host memory");
        own->ptr = at, own->refcount = 1; /* no allocator: the segment is zero's */
        dpt_tensor_release(t);
        t->storage = own, t->data = at;
    }
}

void dpt_zero_range(int64_t n, int size, int q, int64_t *lo, int64_t *hi)
{
    /* the share of each, rounded up to the alignment: the first ranks take whole shares */
    int64_t share = (n + size - 1) / size;
    share = (share + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS;
    int64_t a = share * q, b = a + share;
    *lo = a < n ? a : n;
    *hi = b < n ? b : n;
}

void dpt_zero_meet(const int64_t *displs, int q, int64_t at, int64_t numel, int64_t *lo, int64_t *hi)
{
    int64_t from = displs[q] - at, to = displs[q + 1] - at;
    *lo = from < 0 ? 0 : from > numel ? numel : from;
    *hi = to < *lo ? *lo : to > numel ? numel : to;
}

/* Rank q's elements of parameter p, where its range of p's segment meets p. */
static void rank_elements(const dpt_zero *z, int p, int q, int64_t *lo, int64_t *hi)
{
    dpt_zero_meet(z->displs + (size_t)z->segment_of[p] * (size_t)(z->comm->size + 1), q, z->offset_of[p],
                  dpt_model_param_at(z->model, p)->numel, lo, hi);
}

dpt_zero *dpt_zero_new(dpt_model *model, dpt_comm *comm, const dpt_zero_layout *layout)
{
    dpt_zero *z = calloc(1, sizeof *z);
    if (!z) dpt_fatal("out of host memory");
    int n = dpt_model_num_params(model);
    z->model = model, z->comm = comm, z->nparams = n;
    z->segment_of = malloc((size_t)(n + 1) * sizeof *z->segment_of);
    z->offset_of = malloc((size_t)(n + 1) * sizeof *z->offset_of);
    z->segment_numel = calloc((size_t)n + 1, sizeof *z->segment_numel);
    z->lo = malloc((size_t)(n + 1) * sizeof *z->lo);
    z->hi = malloc((size_t)(n + 1) * sizeof *z->hi);
    if (!z->segment_of || !z->offset_of || !z->segment_numel || !z->lo || !z->hi) dpt_fatal("out of host memory");
    if (layout) {
        z->nsegments = layout->nsegments;
        memcpy(z->segment_of, layout->segment_of, (size_t)n * sizeof *z->segment_of);
        memcpy(z->offset_of, layout->offset_of, (size_t)n * sizeof *z->offset_of);
        memcpy(z->segment_numel, layout->segment_numel, (size_t)layout->nsegments * sizeof *z->segment_numel);
    } else {
        int64_t used = 0;
        for (int p = 0; p < n; p++) {
            int64_t numel = dpt_model_param_at(model, p)->numel;
            int64_t at = (used + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS;
            if (!z->nsegments || (used > 0 && at + numel > SEGMENT_FLOATS)) z->nsegments++, at = 0;
            z->segment_of[p] = z->nsegments - 1, z->offset_of[p] = at;
            used = at + numel;
            z->segment_numel[z->nsegments - 1] = used;
        }
    }
    int size = comm->size;
    z->displs = malloc((size_t)(z->nsegments + 1) * (size_t)(size + 1) * sizeof *z->displs);
    if (!z->displs) dpt_fatal("out of host memory");
    for (int s = 0; s < z->nsegments; s++) {
        int64_t *d = z->displs + (size_t)s * (size_t)(size + 1), lo, hi;
        for (int q = 0; q < size; q++)
            dpt_zero_range(z->segment_numel[s], size, q, &lo, &hi), d[q] = lo;
        d[size] = z->segment_numel[s];
    }
    for (int p = 0; p < n; p++)
        rank_elements(z, p, comm->rank, &z->lo[p], &z->hi[p]);
    rehome_params(z);
    return z;
}

void dpt_zero_free(dpt_zero *z)
{
    if (!z) return;
    for (int s = 0; z->segment && s < z->nsegments; s++)
        dpt_alloc_put(z->ctx->alloc, z->segment[s], z->granted[s]);
    free(z->segment), free(z->granted);
    free(z->segment_of), free(z->offset_of), free(z->segment_numel);
    free(z->lo), free(z->hi), free(z->displs), free(z->staging);
    free(z);
}

const int64_t *dpt_zero_lo(const dpt_zero *z)
{
    return z->lo;
}
const int64_t *dpt_zero_hi(const dpt_zero *z)
{
    return z->hi;
}

int64_t dpt_zero_most(const dpt_zero *z)
{
    int64_t top = 0;
    for (int q = 0; q < z->comm->size; q++) { /* rank q's elements: its ranges less the gaps in them */
        int64_t count = 0, lo, hi;
        for (int p = 0; p < z->nparams; p++)
            rank_elements(z, p, q, &lo, &hi), count += hi - lo;
        if (count > top) top = count;
    }
    return top;
}

void dpt_zero_sync_params(dpt_zero *z, const char *what)
{
    int size = z->comm->size;
    for (int s = 0; s < z->nsegments; s++) {
        const int64_t *displs = z->displs + (size_t)s * (size_t)(size + 1);
        if (z->segment) { /* in place */
            dpt_comm_allgatherv_f32(z->comm, z->segment[s], displs, what);
            continue;
        }
        float *buf = staging(z, z->segment_numel[s]);
        for (int p = 0; p < z->nparams; p++)
            if (z->segment_of[p] == s && z->hi[p] > z->lo[p])
                memcpy(buf + z->offset_of[p] + z->lo[p], dpt_model_param_at(z->model, p)->data + z->lo[p],
                       (size_t)(z->hi[p] - z->lo[p]) * sizeof(float));
        dpt_comm_allgatherv_f32(z->comm, buf, displs, what);
        for (int p = 0; p < z->nparams; p++)
            if (z->segment_of[p] == s)
                memcpy(dpt_model_param_at(z->model, p)->data, buf + z->offset_of[p],
                       (size_t)dpt_model_param_at(z->model, p)->numel * sizeof(float));
    }
}

void dpt_zero_gather_one(dpt_zero *z, int p, float *whole, const float *mine, int root, const char *what)
{
    int size = z->comm->size, me = z->comm->rank;
    int64_t numel = dpt_model_param_at(z->model, p)->numel, hi;
    int64_t *displs = malloc((size_t)(size + 1) * sizeof *displs);
    if (!displs) dpt_fatal("out of host memory");
    for (int q = 0; q < size; q++) /* the ranks' ranges within this parameter */
        rank_elements(z, p, q, &displs[q], &hi);
    displs[size] = numel;
    int64_t len = z->hi[p] - z->lo[p];
    DPT_ASSERT(len == displs[me + 1] - displs[me], "parameter %d: %lld elements here, %lld in the plan", p,
               (long long)len, (long long)(displs[me + 1] - displs[me]));
    /* the root gathers in place in whole; the others send from the staging buffer at their place */
    float *buf = me == root ? whole : staging(z, numel);
    if (len) memcpy(buf + displs[me], mine, (size_t)len * sizeof(float));
    dpt_comm_gatherv_f32(z->comm, buf, displs, root, what);
    free(displs);
}
