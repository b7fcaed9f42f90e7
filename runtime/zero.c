/* zero.c: the shard plan of [distributed] zero and the all-gather that makes the ranks' ranges
 * whole again (zero.h). */
#include "zero.h"

#include <stdlib.h>
#include <string.h>

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
    float *staging;    /* the largest segment */
};

void dpt_zero_range(int64_t n, int size, int q, int64_t *lo, int64_t *hi)
{
    /* the share of each, rounded up to the alignment: the first ranks take whole shares */
    int64_t share = (n + size - 1) / size;
    share = (share + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS;
    int64_t a = share * q, b = a + share;
    *lo = a < n ? a : n;
    *hi = b < n ? b : n;
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
    int64_t most = 1;
    for (int s = 0; s < z->nsegments; s++) {
        int64_t *d = z->displs + (size_t)s * (size_t)(size + 1), lo, hi;
        for (int q = 0; q < size; q++)
            dpt_zero_range(z->segment_numel[s], size, q, &lo, &hi), d[q] = lo;
        d[size] = z->segment_numel[s];
        if (z->segment_numel[s] > most) most = z->segment_numel[s];
    }
    for (int p = 0; p < n; p++) {
        const int64_t *d = z->displs + (size_t)z->segment_of[p] * (size_t)(size + 1);
        int64_t a = z->offset_of[p], b = a + dpt_model_param_at(model, p)->numel;
        int64_t lo = d[comm->rank] > a ? d[comm->rank] : a, hi = d[comm->rank + 1] < b ? d[comm->rank + 1] : b;
        if (hi < lo) hi = lo = a;
        z->lo[p] = lo - a, z->hi[p] = hi - a;
    }
    z->staging = calloc((size_t)most, sizeof *z->staging);
    if (!z->staging) dpt_fatal("out of host memory for ZeRO's all-gather buffer (%lld floats)", (long long)most);
    return z;
}

void dpt_zero_free(dpt_zero *z)
{
    if (!z) return;
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

int64_t dpt_zero_owned(const dpt_zero *z, int64_t *most)
{
    int size = z->comm->size;
    int64_t mine = 0, top = 0;
    for (int p = 0; p < z->nparams; p++)
        mine += z->hi[p] - z->lo[p];
    for (int q = 0; q < size; q++) { /* rank q's elements: its ranges less the gaps in them */
        int64_t count = 0;
        for (int p = 0; p < z->nparams; p++) {
            const int64_t *d = z->displs + (size_t)z->segment_of[p] * (size_t)(size + 1);
            int64_t a = z->offset_of[p], b = a + dpt_model_param_at(z->model, p)->numel;
            int64_t lo = d[q] > a ? d[q] : a, hi = d[q + 1] < b ? d[q + 1] : b;
            if (hi > lo) count += hi - lo;
        }
        if (count > top) top = count;
    }
    if (most) *most = top;
    return mine;
}

void dpt_zero_gather(dpt_zero *z, float *(*at)(int p, bool whole, void *user), void *user, int root, const char *what)
{
    int size = z->comm->size;
    bool receive = root < 0 || root == z->comm->rank;
    for (int s = 0; s < z->nsegments; s++) {
        for (int p = 0; p < z->nparams; p++)
            if (z->segment_of[p] == s && z->hi[p] > z->lo[p])
                memcpy(z->staging + z->offset_of[p] + z->lo[p], at(p, false, user),
                       (size_t)(z->hi[p] - z->lo[p]) * sizeof(float));
        const int64_t *displs = z->displs + (size_t)s * (size_t)(size + 1);
        if (root < 0)
            dpt_comm_allgatherv_f32(z->comm, z->staging, displs, what);
        else
            dpt_comm_gatherv_f32(z->comm, z->staging, displs, root, what);
        for (int p = 0; receive && p < z->nparams; p++)
            if (z->segment_of[p] == s)
                memcpy(at(p, true, user), z->staging + z->offset_of[p],
                       (size_t)dpt_model_param_at(z->model, p)->numel * sizeof(float));
    }
}

void dpt_zero_gather_one(dpt_zero *z, int p, float *whole, const float *mine, int root, const char *what)
{
    int size = z->comm->size, me = z->comm->rank;
    int64_t numel = dpt_model_param_at(z->model, p)->numel, a = z->offset_of[p];
    const int64_t *d = z->displs + (size_t)z->segment_of[p] * (size_t)(size + 1);
    int64_t *displs = malloc((size_t)(size + 1) * sizeof *displs);
    if (!displs) dpt_fatal("out of host memory");
    for (int q = 0; q <= size; q++) { /* the segment's ranges, within this parameter */
        int64_t at = (q == size ? d[size] : d[q]) - a;
        displs[q] = at < 0 ? 0 : at > numel ? numel : at;
    }
    displs[size] = numel;
    int64_t len = z->hi[p] - z->lo[p];
    DPT_ASSERT(len == displs[me + 1] - displs[me], "parameter %d: %lld elements here, %lld in the plan", p,
               (long long)len, (long long)(displs[me + 1] - displs[me]));
    /* the root gathers in place in whole; the others send from the staging buffer at their place */
    float *buf = me == root ? whole : z->staging;
    if (len) memcpy(buf + displs[me], mine, (size_t)len * sizeof(float));
    dpt_comm_gatherv_f32(z->comm, buf, displs, root, what);
    free(displs);
}
