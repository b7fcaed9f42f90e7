/* zero.c: the shard plan of [distributed] zero and the all-gather that makes the ranks' ranges
 * whole again (zero.h). The parameters move into their segments (one buffer each, laid out as
 * the plan says), so the all-gather after a step works in place: no copy in or out. */
#define _GNU_SOURCE /* qsort_r */
#include "zero.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "ctx.h"
#include "error.h"
#include "log.h"
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
    struct overlap *ov; /* dpt_zero_overlap: NULL until started */
};

/* [distributed] zero_overlap: the all-gather after a step, piece by piece, on a thread of its own
 * (its own communicator), while the next forward starts. A piece is a run of parameters
 * adjacent in one segment, read one after the other by the forward (at most PIECE_FLOATS unless
 * one parameter is larger), gathered by the ranks' ranges within it; pieces go in the order the
 * first forward read them (rank 0's, broadcast: the same on every rank). The forward reads a
 * parameter only once its piece is done: before each op, the pieces the op will read are waited
 * for. An op's inputs are known only when it records (after it computed), so which parameters an
 * op reads is predicted from the forward before (FSDP's forward prefetch does the same), and
 * checked: an op that read a parameter not yet waited for ends the job (a forward whose order
 * of reading parameters changed between steps). */
typedef struct overlap {
    dpt_comm *comm; /* the gathers' own: they never pair with the main thread's collectives */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    int next, completed;         /* this round's queue positions: taken, done (of npieces) */
    bool quit;
    double busy_s;               /* the thread's time in the gathers (under mu) */
    bool ordered;                /* pieces built (after the first forward) */
    bool off;                    /* dpt_zero_set_overlap(false): gathered after the step again */
    int npieces;                 /* in queue order: segment, [lo, hi) in it, ranks' ranges in it (0 until built) */
    int *piece_seg;
    int64_t *piece_lo, *piece_hi, *piece_displs;
    int *piece_of;               /* per parameter: the position of its piece */
    /* the forward being recorded */
    bool active;
    int64_t calls;               /* dpt_tape_record calls so far in it */
    int64_t *first;              /* per parameter: the call that first read it (-1: none yet) */
    int ready_1, ready_2;        /* pieces done before the last call, before the one before */
    int64_t step;
    double wait_s;               /* the main thread's waits (exposed) */
    char violation[1024];        /* the first op that read a parameter before it arrived */
    /* the prediction from the last forward: (call, piece) by call, and the next to wait for */
    int64_t *need_call;
    int *need_piece, nneed, cursor;
    int *by_addr;                /* the parameters by address, for an input's data pointer */
} overlap;

#define PIECE_FLOATS (256 << 10) /* 1 MiB: a piece's all-gather is one collective's latency */
#define LOOKAHEAD 2 /* wait for what the next two ops read: an op may record one input
                     * conversion (dpt_contiguous of a weight) after reading a parameter */

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

static void overlap_free(dpt_zero *z);

void dpt_zero_free(dpt_zero *z)
{
    if (!z) return;
    overlap_free(z);
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

/* ---------------------------------------------------------------- zero_overlap */

static void *gather_thread(void *arg)
{
    dpt_zero *z = arg;
    overlap *ov = z->ov;
    int size = z->comm->size;
    pthread_mutex_lock(&ov->mu);
    for (;;) {
        while (!ov->quit && ov->next >= ov->npieces)
            pthread_cond_wait(&ov->work_cv, &ov->mu);
        if (ov->quit) break;
        int k = ov->next++;
        pthread_mutex_unlock(&ov->mu);
        double t0 = dpt_now_s();
        dpt_comm_allgatherv_f32(ov->comm, z->segment[ov->piece_seg[k]] + ov->piece_lo[k],
                                ov->piece_displs + (size_t)k * (size_t)(size + 1),
                                "zero: the parameters after the step (overlapped with the next forward)");
        double t1 = dpt_now_s();
        pthread_mutex_lock(&ov->mu);
        ov->busy_s += t1 - t0;
        ov->completed++;
        pthread_cond_broadcast(&ov->done_cv);
    }
    pthread_mutex_unlock(&ov->mu);
    return NULL;
}

static const float *param_data(const dpt_zero *z, int p)
{
    return z->segment[z->segment_of[p]] + z->offset_of[p];
}

static int by_address(const void *a, const void *b, void *z)
{
    const float *x = param_data(z, *(const int *)a), *y = param_data(z, *(const int *)b);
    return (x > y) - (x < y);
}

bool dpt_zero_overlap(dpt_zero *z)
{
    if (!z->segment || !z->comm->ops->dup) return false; /* through a copy, or no second communicator */
    overlap *ov = calloc(1, sizeof *ov);
    int n = z->nparams;
    if (!ov) dpt_fatal("out of host memory");
    ov->piece_seg = malloc((size_t)n * sizeof *ov->piece_seg);
    ov->piece_lo = malloc((size_t)n * sizeof *ov->piece_lo);
    ov->piece_hi = malloc((size_t)n * sizeof *ov->piece_hi);
    ov->piece_displs = malloc((size_t)n * (size_t)(z->comm->size + 1) * sizeof *ov->piece_displs);
    ov->piece_of = malloc((size_t)n * sizeof *ov->piece_of);
    ov->first = malloc((size_t)n * sizeof *ov->first);
    ov->need_call = malloc((size_t)n * sizeof *ov->need_call);
    ov->need_piece = malloc((size_t)n * sizeof *ov->need_piece);
    ov->by_addr = malloc((size_t)n * sizeof *ov->by_addr);
    if (!ov->piece_seg || !ov->piece_lo || !ov->piece_hi || !ov->piece_displs || !ov->piece_of || !ov->first ||
        !ov->need_call || !ov->need_piece || !ov->by_addr)
        dpt_fatal("out of host memory");
    for (int p = 0; p < n; p++)
        ov->by_addr[p] = p;
    qsort_r(ov->by_addr, (size_t)n, sizeof *ov->by_addr, by_address, z);
    ov->comm = z->comm->ops->dup(z->comm, "zero: the parameters' all-gather");
    pthread_mutex_init(&ov->mu, NULL);
    pthread_cond_init(&ov->work_cv, NULL);
    pthread_cond_init(&ov->done_cv, NULL);
    z->ov = ov;
    if (pthread_create(&ov->thread, NULL, gather_thread, z) != 0) dpt_fatal("cannot start ZeRO's all-gather thread");
    return true;
}

/* Until the gathers at queue positions < want are done; returns how many are. */
static int wait_done(dpt_zero *z, int want)
{
    overlap *ov = z->ov;
    pthread_mutex_lock(&ov->mu);
    if (ov->completed < want) {
        double t0 = dpt_now_s();
        __atomic_store_n(&ov->comm->hurry, 1, __ATOMIC_RELAXED); /* this rank has nothing else to do */
        while (ov->completed < want)
            pthread_cond_wait(&ov->done_cv, &ov->mu); /* the gathers' communicator has the timeout */
        __atomic_store_n(&ov->comm->hurry, 0, __ATOMIC_RELAXED);
        ov->wait_s += dpt_now_s() - t0;
    }
    int done = ov->completed;
    pthread_mutex_unlock(&ov->mu);
    return done;
}

void dpt_zero_settle(dpt_zero *z)
{
    if (z && z->ov) wait_done(z, z->ov->npieces);
}

static void overlap_free(dpt_zero *z)
{
    overlap *ov = z->ov;
    if (!ov) return;
    dpt_zero_settle(z); /* every rank finishes the round it posted */
    pthread_mutex_lock(&ov->mu);
    ov->quit = true;
    pthread_cond_signal(&ov->work_cv);
    pthread_mutex_unlock(&ov->mu);
    pthread_join(ov->thread, NULL);
    ov->comm->ops->free(ov->comm);
    pthread_mutex_destroy(&ov->mu);
    pthread_cond_destroy(&ov->work_cv);
    pthread_cond_destroy(&ov->done_cv);
    free(ov->piece_seg), free(ov->piece_lo), free(ov->piece_hi), free(ov->piece_displs), free(ov->piece_of);
    free(ov->first), free(ov->need_call), free(ov->need_piece), free(ov->by_addr);
    free(ov);
    z->ov = NULL;
}

/* The parameter whose values hold t's data (t itself or a view of it), or -1. */
static int param_holding(const dpt_zero *z, const dpt_tensor *t)
{
    if (!t || t->is_temp || !t->data) return -1;
    const overlap *ov = z->ov;
    const float *d = t->data;
    int lo = 0, hi = z->nparams - 1, at = -1;
    while (lo <= hi) { /* the last parameter starting at or below d */
        int mid = (lo + hi) / 2;
        if (param_data(z, ov->by_addr[mid]) <= d) at = mid, lo = mid + 1;
        else hi = mid - 1;
    }
    if (at < 0) return -1;
    int p = ov->by_addr[at];
    return d < param_data(z, p) + dpt_model_param_at(z->model, p)->numel ? p : -1;
}

/* Before call `call` + LOOKAHEAD: wait for the pieces the last forward first read there. */
static void wait_ahead(dpt_zero *z, int64_t call)
{
    overlap *ov = z->ov;
    int want = 0;
    while (ov->cursor < ov->nneed && ov->need_call[ov->cursor] <= call + LOOKAHEAD) {
        if (ov->need_piece[ov->cursor] + 1 > want) want = ov->need_piece[ov->cursor] + 1;
        ov->cursor++;
    }
    ov->ready_2 = ov->ready_1;
    if (want) ov->ready_1 = wait_done(z, want);
}

static void op_hook(const char *op, int n_in, dpt_tensor *const *in, void *user)
{
    dpt_zero *z = user;
    overlap *ov = z->ov;
    int64_t call = ov->calls++;
    for (int i = 0; i < n_in; i++) {
        int p = param_holding(z, in[i]);
        if (p < 0) continue;
        if (ov->first[p] < 0) ov->first[p] = call;
        /* it computed after the call before the one before (one nested input conversion) */
        if (ov->ordered && ov->piece_of[p] >= ov->ready_2 && !ov->violation[0]) {
            snprintf(ov->violation, sizeof ov->violation,
                     "zero_overlap: step %lld's forward read %s (op %s, the forward's op %lld) before the all-gather "
                     "of its values after the step before had finished: this forward reads the parameters in "
                     "another order than the forward before it, so its output may hold some of the old values\n"
                     "HINT: [distributed] zero_overlap = false gathers every parameter before each forward "
                     "(a model whose order of ops changes between steps needs it)",
                     (long long)ov->step + 1, dpt_model_param_at(z->model, p)->name, op, (long long)call + 1);
            ov->ready_1 = ov->ready_2 = wait_done(z, ov->npieces); /* the rest of it is right */
        }
    }
    wait_ahead(z, call);
}

void dpt_zero_forward_begin(dpt_zero *z, dpt_ctx *ctx, int64_t step)
{
    overlap *ov = z ? z->ov : NULL;
    if (!ov) return;
    ov->active = true, ov->step = step, ov->calls = 0, ov->cursor = 0;
    for (int p = 0; p < z->nparams; p++)
        ov->first[p] = -1;
    pthread_mutex_lock(&ov->mu);
    ov->ready_1 = ov->completed;
    pthread_mutex_unlock(&ov->mu);
    wait_ahead(z, -1); /* what ops 0 and 1 read */
    ov->ready_2 = ov->ready_1;
    dpt_set_op_hook(ctx, op_hook, z);
}

static int by_first(const void *a, const void *b, void *first_)
{
    const int64_t *first = first_;
    int x = *(const int *)a, y = *(const int *)b;
    int64_t fx = first[x] < 0 ? INT64_MAX : first[x], fy = first[y] < 0 ? INT64_MAX : first[y];
    return fx != fy ? (fx > fy) - (fx < fy) : (x > y) - (x < y);
}

/* The pieces, from the parameters in the order the forward first read them (`order`, the same on
 * every rank): a parameter joins the piece before when it lies next to it in the same segment
 * (either side: DDP's buckets hold them in backward order) and the piece stays small. */
static void build_pieces(dpt_zero *z, const int *order)
{
    overlap *ov = z->ov;
    int size = z->comm->size, k = -1;
    for (int i = 0; i < z->nparams; i++) {
        int p = order[i], s = z->segment_of[p];
        int64_t lo = z->offset_of[p], hi = lo + dpt_model_param_at(z->model, p)->numel;
        int64_t alo = lo / ALIGN_FLOATS * ALIGN_FLOATS, ahi = (hi + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS;
        bool join = k >= 0 && ov->piece_seg[k] == s && ov->piece_hi[k] - ov->piece_lo[k] + (hi - lo) <= PIECE_FLOATS &&
                    (alo == (ov->piece_hi[k] + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS ||
                     ahi == ov->piece_lo[k] / ALIGN_FLOATS * ALIGN_FLOATS);
        if (join) {
            if (lo < ov->piece_lo[k]) ov->piece_lo[k] = lo;
            if (hi > ov->piece_hi[k]) ov->piece_hi[k] = hi;
        } else {
            k++;
            ov->piece_seg[k] = s, ov->piece_lo[k] = lo, ov->piece_hi[k] = hi;
        }
        ov->piece_of[p] = k;
    }
    int npieces = k + 1;
    for (k = 0; k < npieces; k++) { /* the ranks' ranges of the segment, clamped to the piece */
        const int64_t *d = z->displs + (size_t)ov->piece_seg[k] * (size_t)(size + 1);
        int64_t *pd = ov->piece_displs + (size_t)k * (size_t)(size + 1);
        for (int q = 0; q <= size; q++) {
            int64_t v = d[q] < ov->piece_lo[k] ? ov->piece_lo[k] : d[q] > ov->piece_hi[k] ? ov->piece_hi[k] : d[q];
            pd[q] = v - ov->piece_lo[k];
        }
    }
    pthread_mutex_lock(&ov->mu); /* published to the thread: every piece done, none in flight */
    ov->npieces = ov->completed = ov->next = npieces;
    pthread_mutex_unlock(&ov->mu);
}

bool dpt_zero_forward_end(dpt_zero *z, dpt_ctx *ctx, dpt_error *err)
{
    overlap *ov = z ? z->ov : NULL;
    if (!ov || !ov->active) return true;
    dpt_set_op_hook(ctx, NULL, NULL);
    ov->active = false;
    wait_done(z, ov->npieces); /* what this forward did not read: before backward and the step */
    if (ov->violation[0]) return dpt_errorf(err, "%s", ov->violation);
    int n = z->nparams;
    int *by = malloc((size_t)n * sizeof *by);
    if (!by) dpt_fatal("out of host memory");
    for (int p = 0; p < n; p++)
        by[p] = p;
    qsort_r(by, (size_t)n, sizeof *by, by_first, ov->first);
    if (!ov->ordered) { /* the pieces: from rank 0's first forward, on every rank */
        int *order = malloc((size_t)n * sizeof *order);
        if (!order) dpt_fatal("out of host memory");
        memcpy(order, by, (size_t)n * sizeof *order);
        dpt_comm_broadcast(z->comm, order, (size_t)n * sizeof *order, 0, "zero: the order of the all-gather");
        build_pieces(z, order);
        free(order);
        ov->ordered = true;
    }
    /* this forward's first reads predict the next one's: by call */
    ov->nneed = 0;
    for (int i = 0; i < n && ov->first[by[i]] >= 0; i++)
        ov->need_call[ov->nneed] = ov->first[by[i]], ov->need_piece[ov->nneed++] = ov->piece_of[by[i]];
    free(by);
    return true;
}

bool dpt_zero_sync_params_async(dpt_zero *z)
{
    overlap *ov = z->ov;
    if (!ov || !ov->ordered || ov->off) return false;
    pthread_mutex_lock(&ov->mu);
    DPT_ASSERT(ov->completed == ov->npieces, "zero: a gather round started with %d of %d pieces done", ov->completed,
               ov->npieces);
    ov->next = ov->completed = 0;
    pthread_cond_signal(&ov->work_cv);
    pthread_mutex_unlock(&ov->mu);
    return true;
}

void dpt_zero_set_overlap(dpt_zero *z, bool on)
{
    if (z && z->ov) z->ov->off = !on;
}

void dpt_zero_overlap_times(dpt_zero *z, double *exposed_s, double *busy_s)
{
    overlap *ov = z ? z->ov : NULL;
    *exposed_s = *busy_s = 0;
    if (!ov) return;
    pthread_mutex_lock(&ov->mu);
    *exposed_s = ov->wait_s, *busy_s = ov->busy_s;
    ov->wait_s = ov->busy_s = 0;
    pthread_mutex_unlock(&ov->mu);
}
