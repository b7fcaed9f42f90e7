/* ddp.c: DistributedDataParallel. At start: broadcast parameters and buffers from rank 0 and
 * check with one allgather that every rank has the same plan. Parameters' gradients live
 * inside their bucket (views into one flat buffer, like PyTorch's gradient_as_bucket_view),
 * so nothing is copied: autograd's gradient-ready hook only counts, a complete bucket is
 * handed to the communication thread, which AllReduces and averages it in place while
 * backward continues, and finish() waits for the last one. A device communicator (NCCL)
 * needs no thread: the hook enqueues the bucket's AllReduce on the communication stream
 * behind an event from the compute stream, and finish() joins the two streams. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "half.h"
#include "autograd.h"
#include "comm.h"
#include "ctx.h"
#include "error.h"
#include "log.h"
#include "rng.h"
#include "zero.h"

typedef struct bucket {
    int first, count; /* slice of ddp->order */
    int64_t numel;
    float *flat;    /* gradients of its parameters, back to back (their .grad views); shard_grads:
                     * NULL from its reduce-scatter until backward next needs it */
    size_t granted; /* allocator block size of flat */
    int pending;    /* parameters not yet ready this step */
    int64_t *displs; /* reduce_scatter: each rank's range of flat (size + 1 starts) */
    double start_s, end_s;
} bucket;

#define RING 16
/* shard_grads: backward opens a bucket beyond this many alive only after the oldest one on the
 * wire is done (DeepSpeed's stage 2 waits the same way): a rank's gradient memory is its ranges
 * plus about this many buckets however far the communication lags */
#define LIVE_BUCKETS 4
#define BUCKET_ALIGN_FLOATS 64 /* 256 bytes */

typedef struct ring_entry {
    int64_t step;
    int bucket;
    int64_t numel;
    double start_s, end_s; /* end_s = 0 while in flight */
} ring_entry;

struct dpt_ddp {
    dpt_ctx *ctx;
    dpt_model *model;
    dpt_comm *comm;      /* start-up collectives (main thread) */
    dpt_comm *grad_comm; /* the communication thread's: a duplicate of comm */
    dpt_ddp_options opt;
    int nparams;
    int *order;         /* parameter indices, reverse creation order: the order gradients finish */
    int *bucket_of;     /* parameter -> bucket */
    int64_t *offset_of; /* parameter -> offset in its bucket */
    bool *ready;        /* this step */
    int64_t *reduce_count;
    bucket *buckets;
    int nbuckets;
    int next_launch; /* buckets go to the wire strictly in index order, the same on every rank */
    bool sync;
    bool async; /* the communicator enqueues on a device stream: no thread */
    int64_t step;
    dpt_ddp_stats stats;
    dpt_timeline *timeline;
    /* the communication thread */
    pthread_t thread;
    bool hooked; /* fully set up: gradients in buckets, hook installed (and, if !async, the thread) */
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    int launched, reduced; /* buckets handed over / finished this step */
    bool quit;
    ring_entry ring[RING];
    int ring_next;
    double *bucket_s; /* each bucket's AllReduce in the last step (host communicators) */
    uint16_t *wire; /* grad_compression on a host communicator: the largest bucket in 16 bits */
    bool h16;       /* grad_compression: 16 bits on the wire (either communicator) */
    /* shard_grads (zero = 2): a bucket holds storage only from the first gradient backward
     * writes into it until its reduce-scatter; this rank's range of it lives on in shard */
    bool lazy;
    float *shard;        /* this rank's range of every bucket, back to back */
    size_t shard_granted;
    int64_t *shard_off;  /* per bucket: where its range starts in shard */
    float **grad_at;     /* per parameter: its first element of this rank's range, in shard */
    int closed;          /* buckets [0, closed) have given their buffer back this step */
    int nlive;           /* buckets with a buffer now */
    int64_t live_bytes, peak_bytes; /* gradient storage held now / at most this step */
    /* reduce_scatter: the segments runtime/zero.h shards, fixed at start (the first plan's
     * buckets). A later plan (bucket_mb = auto) cuts its buckets inside them, so a rank's range
     * of every element, its optimizer state and its place in shard stay where they were;
     * a bucket's reduce-scatter ranges are its segment's, clipped to it */
    int nsegs;
    int *seg_of;         /* per parameter */
    int64_t *seg_off;    /* per parameter: its first element in its segment */
    int64_t *seg_numel;  /* per segment */
    int64_t *seg_displs; /* per segment, size + 1 range starts */
};

/* ---------------------------------------------------------------- communication thread */

/* A reduction's step as the progress lines number it (1-based, counting a resumed run's). */
static int64_t step_label(const dpt_ddp *d, int64_t step)
{
    return d->opt.steps_before + step + 1;
}

static void *comm_thread_main(void *arg)
{
    dpt_ddp *d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (!d->quit && d->reduced == d->launched)
            pthread_cond_wait(&d->work_cv, &d->mu);
        if (d->quit) break;
        int b = d->reduced;
        bucket *bk = &d->buckets[b];
        ring_entry *re = &d->ring[d->ring_next++ % RING];
        *re = (ring_entry){.step = d->step, .bucket = b, .numel = bk->numel, .start_s = dpt_now_s()};
        pthread_mutex_unlock(&d->mu);

        double t0 = dpt_now_s();
        char what[96];
        snprintf(what, sizeof what, "allreduce of bucket %d of %d, step %lld", b, d->nbuckets,
                 (long long)step_label(d, re->step));
        /* its own communicator; the settings follow the main one's (set after start-up) */
        d->grad_comm->timeout_s = d->comm->timeout_s;
        d->grad_comm->delay_ms_per_mb = d->comm->delay_ms_per_mb;
        if (bk->displs) { /* zero = 2: this rank's range of the sum only (kept in shard_grads' shard) */
            int me = d->comm->rank;
            int64_t lo = bk->displs[me], len = bk->displs[me + 1] - lo;
            snprintf(what, sizeof what, "reduce-scatter of bucket %d of %d, step %lld", b, d->nbuckets,
                     (long long)step_label(d, re->step));
            if (d->wire) { /* 16 bits on the wire, this rank's range fp32 again */
                bool bf16 = d->opt.compression == DPT_GRAD_COMPRESSION_BF16;
                dpt_h16_from_f32_n(d->wire, bk->flat, bk->numel, bf16);
                dpt_comm_reduce_scatter_h16(d->grad_comm, d->wire, bk->displs, bf16, what);
                dpt_f32_from_h16_n(bk->flat + lo, d->wire + lo, len, bf16);
            } else {
                dpt_comm_reduce_scatter_f32(d->grad_comm, bk->flat, bk->displs, what);
            }
            d->ctx->be->scale(d->ctx, len, 1.0f / (float)d->comm->size, bk->flat + lo, bk->flat + lo);
            if (d->shard) d->ctx->be->dev->copy_d2d(d->ctx, d->shard + d->shard_off[b], bk->flat + lo, (size_t)len * sizeof(float));
        } else if (d->wire) { /* 16 bits on the wire; fp32 again before the average */
            bool bf16 = d->opt.compression == DPT_GRAD_COMPRESSION_BF16;
            dpt_h16_from_f32_n(d->wire, bk->flat, bk->numel, bf16);
            dpt_comm_allreduce_h16(d->grad_comm, d->wire, bk->numel, bf16, what);
            dpt_f32_from_h16_n(bk->flat, d->wire, bk->numel, bf16);
        } else {
            dpt_comm_allreduce_f32(d->grad_comm, bk->flat, bk->numel, what);
        }
        if (!bk->displs) d->ctx->be->scale(d->ctx, bk->numel, 1.0f / (float)d->comm->size, bk->flat, bk->flat);
        double t1 = dpt_now_s();
        if (d->timeline) dpt_timeline_span(d->timeline, "allreduce", 1, t0, t1);

        pthread_mutex_lock(&d->mu);
        bk->start_s = t0;
        bk->end_s = t1;
        re->end_s = t1;
        d->reduced++;
        pthread_cond_broadcast(&d->done_cv);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

static void launch_ready_buckets(dpt_ddp *d)
{
    if (d->async) {
        while (d->next_launch < d->nbuckets && d->buckets[d->next_launch].pending == 0) {
            bucket *bk = &d->buckets[d->next_launch];
            d->ring[d->ring_next++ % RING] = (ring_entry){
                .step = d->step, .bucket = d->next_launch, .numel = bk->numel, .start_s = dpt_now_s()};
            d->comm->ops->reduce_avg_async(d->comm, bk->flat, bk->numel);
            d->next_launch++;
            d->launched++;
        }
        return;
    }
    pthread_mutex_lock(&d->mu);
    while (d->next_launch < d->nbuckets && d->buckets[d->next_launch].pending == 0) {
        d->next_launch++;
        d->launched++;
    }
    pthread_cond_signal(&d->work_cv);
    pthread_mutex_unlock(&d->mu);
}

/* ---------------------------------------------------------------- the hook */

/* ---------------------------------------------------------------- shard_grads' buckets */

static void point_views(dpt_ddp *d, int b, float *flat)
{
    const bucket *bk = &d->buckets[b];
    for (int k = bk->first; k < bk->first + bk->count; k++) {
        int p = d->order[k];
        dpt_tensor *g = dpt_model_param_at(d->model, p)->grad;
        g->data = g->storage->ptr = flat ? flat + d->offset_of[p] : NULL;
    }
}

static void bucket_close(dpt_ddp *d, int b)
{
    bucket *bk = &d->buckets[b];
    if (!bk->flat) return;
    point_views(d, b, NULL);
    dpt_alloc_put(d->ctx->alloc, bk->flat, bk->granted);
    d->live_bytes -= (int64_t)bk->granted;
    d->nlive--;
    bk->flat = NULL;
}

/* The buckets the communication thread is done with (reduced in index order) give their
 * buffers back: the allocator hands the same blocks to the next buckets backward opens. */
static void close_reduced(dpt_ddp *d)
{
    pthread_mutex_lock(&d->mu);
    int done = d->reduced;
    pthread_mutex_unlock(&d->mu);
    while (d->closed < done)
        bucket_close(d, d->closed++);
}

static _Noreturn void report_timeout(dpt_ddp *d);

/* Before a bucket opens beyond LIVE_BUCKETS alive: the oldest on the wire finished and closed
 * (none on the wire: the open ones are all still filling, and one more opens). */
static void make_room(dpt_ddp *d)
{
    close_reduced(d);
    if (d->nlive < LIVE_BUCKETS) return;
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += (time_t)d->opt.timeout_s;
    __atomic_store_n(&d->grad_comm->hurry, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&d->mu);
    int want = d->closed + 1;
    while (d->reduced < want && d->reduced < d->launched) {
        int rc = pthread_cond_timedwait(&d->done_cv, &d->mu, &deadline);
        if (rc == ETIMEDOUT && d->reduced < want && d->reduced < d->launched) report_timeout(d);
    }
    pthread_mutex_unlock(&d->mu);
    __atomic_store_n(&d->grad_comm->hurry, 0, __ATOMIC_RELAXED);
    close_reduced(d);
}

/* Bucket b's gradients get storage (zeros) before backward first writes one of them. */
static void bucket_open(dpt_ddp *d, int b)
{
    bucket *bk = &d->buckets[b];
    if (bk->flat) return;
    make_room(d);
    bk->flat = dpt_ctx_alloc(d->ctx, (size_t)bk->numel * sizeof(float), &bk->granted, "a DDP gradient bucket");
    d->ctx->be->fill(d->ctx, bk->flat, bk->numel, 0.0f);
    point_views(d, b, bk->flat);
    d->nlive++;
    d->live_bytes += (int64_t)bk->granted;
    if (d->live_bytes > d->peak_bytes) d->peak_bytes = d->live_bytes;
}

static void grad_needed_hook(dpt_tensor *param, int index, void *user)
{
    (void)param;
    dpt_ddp *d = user;
    bucket_open(d, d->bucket_of[index]);
}

/* Whether keeping only this rank's ranges lowers the gradients' peak: they cost the ranges
 * plus the buckets alive at once, about the largest (a tensor beyond the capacity is a bucket of
 * its own, and it may be alive all through backward, as GPT's tied embedding is) and
 * LIVE_BUCKETS - 1 of the next largest; unsharded, all the buckets. A model of 2 buckets, or of
 * one tensor much larger than the rest, keeps them whole. */
static bool sharding_pays(const dpt_ddp *d)
{
    int me = d->comm->rank;
    int64_t whole = 0, ranges = 0, top = 0, next = 0;
    for (int b = 0; b < d->nbuckets; b++) {
        int64_t n = d->buckets[b].numel;
        whole += n, ranges += d->buckets[b].displs[me + 1] - d->buckets[b].displs[me];
        if (n > top) next = top, top = n;
        else if (n > next) next = n;
    }
    return ranges + top + (LIVE_BUCKETS - 1) * next < whole;
}

/* shard holds this rank's range of every segment, back to back in segment order (the gaps that
 * align the parameters included). Where each bucket's part of it starts there, and so each
 * parameter's first element: a bucket's range is its segment's clipped to it, so every plan
 * puts every element at the same place, and shard and grad_at never move when bucket_mb = auto
 * re-plans. */
static void shard_places(dpt_ddp *d)
{
    int me = d->comm->rank, size = d->comm->size, seg = -1;
    int64_t base = 0, s0 = 0, s1 = 0; /* where the segment's range starts in shard; the range */
    for (int b = 0; b < d->nbuckets; b++) {
        int first = d->order[d->buckets[b].first];
        if (d->seg_of[first] != seg) {
            base += s1 - s0;
            seg = d->seg_of[first];
            const int64_t *sd = d->seg_displs + (size_t)seg * (size_t)(size + 1);
            s0 = sd[me], s1 = sd[me + 1];
        }
        int64_t into = d->seg_off[first] - s0; /* the bucket's start, from the range's */
        d->shard_off[b] = base + (into < 0 ? 0 : into > s1 - s0 ? s1 - s0 : into);
    }
    for (int p = 0; p < d->nparams; p++) { /* zero.h's plan over the same segments: the same ranges */
        const bucket *bk = &d->buckets[d->bucket_of[p]];
        int64_t lo, hi;
        dpt_zero_meet(bk->displs, me, d->offset_of[p], dpt_model_param_at(d->model, p)->numel, &lo, &hi);
        float *at = hi > lo ? d->shard + d->shard_off[d->bucket_of[p]] + (d->offset_of[p] + lo - bk->displs[me]) : NULL;
        DPT_ASSERT(!d->grad_at[p] || d->grad_at[p] == at, "%s's gradient range moved with the buckets",
                   dpt_model_param_at(d->model, p)->name);
        d->grad_at[p] = at;
    }
}

/* After the constructor laid the buckets out: this rank's ranges of them in one buffer, every
 * bucket's own given back until backward needs it. */
static void shard_buckets(dpt_ddp *d)
{
    int me = d->comm->rank;
    d->shard_off = calloc((size_t)d->nparams + 1, sizeof *d->shard_off); /* a bucket per parameter at most */
    d->grad_at = calloc((size_t)d->nparams + 1, sizeof *d->grad_at);
    if (!d->shard_off || !d->grad_at) dpt_fatal("out of host memory");
    int64_t total = 0;
    for (int s = 0; s < d->nsegs; s++) {
        const int64_t *sd = d->seg_displs + (size_t)s * (size_t)(d->comm->size + 1);
        total += sd[me + 1] - sd[me];
    }
    d->shard = dpt_ctx_alloc(d->ctx, (size_t)(total ? total : 1) * sizeof(float), &d->shard_granted,
                             "ZeRO's gradient ranges");
    d->ctx->be->fill(d->ctx, d->shard, total, 0.0f);
    shard_places(d);
    for (int b = 0; b < d->nbuckets; b++)
        bucket_close(d, b);
    d->nlive = 0; /* what backward opens counts from here */
    d->live_bytes = d->peak_bytes = (int64_t)d->shard_granted;
}

float *const *dpt_ddp_grad_shards(const dpt_ddp *d)
{
    return d->lazy ? d->grad_at : NULL;
}

static void mark_ready(dpt_ddp *d, int p)
{
    if (d->lazy) bucket_open(d, d->bucket_of[p]); /* a gradient backward never wrote: zeros */
    d->ready[p] = true;
    d->buckets[d->bucket_of[p]].pending--;
}

/* Move every parameter's gradient into (to_buckets) or out of its bucket, keeping values. */
static void rehome_grads(dpt_ddp *d, bool to_buckets)
{
    for (int p = 0; p < d->nparams; p++) {
        dpt_tensor *param = dpt_model_param_at(d->model, p);
        dpt_tensor *old = param->grad;
        dpt_tensor *fresh = to_buckets
                                ? dpt_tensor_wrap(d->ctx, d->buckets[d->bucket_of[p]].flat + d->offset_of[p],
                                                  param->ndim, param->shape)
                                : dpt_tensor_new(d->ctx, param->ndim, param->shape);
        if (old->data) /* shard_grads' closed buckets: nothing to keep */
            d->ctx->be->dev->copy_d2d(d->ctx, fresh->data, old->data, (size_t)param->numel * sizeof(float));
        dpt_tensor_free(old);
        param->grad = fresh;
    }
}

static void grad_ready_hook(dpt_tensor *param, int index, void *user)
{
    dpt_ddp *d = user;
    if (!d->sync) return;
    DPT_ASSERT(!d->ready[index], "gradient of %s reported twice in one backward", param->name);
    mark_ready(d, index);
    if (d->opt.overlap && d->buckets[d->bucket_of[index]].pending == 0) launch_ready_buckets(d);
}

/* ---------------------------------------------------------------- plan check */

typedef struct plan {
    int32_t nparams, nbuffers, nbuckets, pad;
    int64_t scalars, dataset_len;
    uint64_t names_hash, shapes_hash, bucket_hash, config_hash, dataset_hash;
    char model[48];
} plan;

static plan make_plan(const dpt_ddp *d)
{
    plan pl = {0};
    pl.nparams = d->nparams;
    pl.nbuffers = dpt_model_num_buffers(d->model);
    pl.nbuckets = d->nbuckets;
    pl.dataset_len = d->opt.dataset_len;
    pl.dataset_hash = d->opt.dataset_hash;
    pl.config_hash = d->opt.config_hash;
    snprintf(pl.model, sizeof pl.model, "%s", dpt_model_name(d->model));
    pl.names_hash = pl.shapes_hash = pl.bucket_hash = DPT_HASH_SEED;
    for (int i = 0; i < d->nparams; i++) {
        dpt_tensor *t = dpt_model_param_at(d->model, i);
        pl.scalars += t->numel;
        pl.names_hash = dpt_hash_bytes(pl.names_hash, t->name, strlen(t->name) + 1);
        pl.shapes_hash = dpt_hash_bytes(pl.shapes_hash, &t->ndim, sizeof t->ndim);
        pl.shapes_hash = dpt_hash_bytes(pl.shapes_hash, t->shape, (size_t)t->ndim * sizeof t->shape[0]);
    }
    for (int i = 0; i < pl.nbuffers; i++) {
        dpt_tensor *t = dpt_model_buffer_at(d->model, i);
        pl.names_hash = dpt_hash_bytes(pl.names_hash, t->name, strlen(t->name) + 1);
        pl.shapes_hash = dpt_hash_bytes(pl.shapes_hash, t->shape, (size_t)t->ndim * sizeof t->shape[0]);
    }
    for (int b = 0; b < d->nbuckets; b++)
        pl.bucket_hash = dpt_hash_bytes(pl.bucket_hash, &d->buckets[b].count, sizeof d->buckets[b].count);
    return pl;
}

/* The first key (in the schema's order) whose value on rank r differs from rank 0's, with both
 * values: every rank's per-key hashes, then every rank's value of that key (two collectives,
 * on every rank alike, only on this error path). false without a config. */
static bool config_difference(const dpt_ddp *d, int r, char *detail, size_t cap)
{
    const dpt_config *cfg = d->opt.config;
    int size = d->comm->size, n = cfg ? dpt_config_num_keys(cfg) : 0;
    int have = cfg != NULL, all_have = 1;
    /* every rank has one, or none names a key (the collectives must match) */
    int *flags = malloc((size_t)size * sizeof *flags);
    if (!flags) dpt_fatal("out of host memory");
    dpt_comm_allgather(d->comm, &have, flags, sizeof have, "DDP start-up: config comparison");
    for (int i = 0; i < size; i++)
        all_have = all_have && flags[i];
    free(flags);
    if (!all_have || n == 0) return false;
    uint64_t *mine = malloc((size_t)n * sizeof *mine), *all = malloc((size_t)n * (size_t)size * sizeof *all);
    if (!mine || !all) dpt_fatal("out of host memory");
    for (int k = 0; k < n; k++) {
        const char *section, *key;
        bool hashed;
        const char *v = dpt_config_key_value(cfg, k, &section, &key, &hashed);
        mine[k] = hashed ? dpt_hash_bytes(DPT_HASH_SEED, v, strlen(v)) : 0;
    }
    dpt_comm_allgather(d->comm, mine, all, (size_t)n * sizeof *mine, "DDP start-up: config comparison");
    int first = -1;
    for (int k = 0; k < n && first < 0; k++)
        if (all[(size_t)r * (size_t)n + (size_t)k] != all[k]) first = k;
    free(mine), free(all);
    if (first < 0) return false;
    struct {
        char v[96];
    } value, *values = malloc((size_t)size * sizeof *values);
    if (!values) dpt_fatal("out of host memory");
    const char *section, *key;
    bool hashed;
    const char *v = dpt_config_key_value(cfg, first, &section, &key, &hashed);
    snprintf(value.v, sizeof value.v, "%s", v);
    dpt_comm_allgather(d->comm, &value, values, sizeof value, "DDP start-up: config comparison");
    snprintf(detail, cap, "[%s] %s = %s%s on rank %d, %s%s on rank 0", section, key, values[r].v,
             strlen(values[r].v) == sizeof value.v - 1 ? "..." : "", r, values[0].v,
             strlen(values[0].v) == sizeof value.v - 1 ? "..." : "");
    free(values);
    return true;
}

/* Compare every rank's plan with rank 0's; the same verdict is reached on every rank. */
static bool check_plans(const dpt_ddp *d, const plan *all, dpt_error *err)
{
    const plan *p0 = &all[0];
    for (int r = 1; r < d->comm->size; r++) {
        const plan *p = &all[r];
        const char *what = NULL;
        char detail[256] = "";
        if (strcmp(p->model, p0->model) != 0)
            what = "the model", snprintf(detail, sizeof detail, "%s vs %s", p->model, p0->model);
        else if (p->nparams != p0->nparams || p->scalars != p0->scalars)
            what = "the parameter list",
            snprintf(detail, sizeof detail, "%d parameters (%lld scalars) vs %d (%lld)", p->nparams,
                     (long long)p->scalars, p0->nparams, (long long)p0->scalars);
        else if (p->names_hash != p0->names_hash)
            what = "parameter or buffer names";
        else if (p->shapes_hash != p0->shapes_hash)
            what = "parameter or buffer shapes";
        else if (p->nbuffers != p0->nbuffers)
            what = "the buffer list";
        else if (p->nbuckets != p0->nbuckets || p->bucket_hash != p0->bucket_hash)
            what = "the bucket plan",
            snprintf(detail, sizeof detail, "%d buckets vs %d ([distributed] bucket_mb must match)",
                     p->nbuckets, p0->nbuckets);
        else if (p->dataset_len != p0->dataset_len)
            what = "the data set length", snprintf(detail, sizeof detail, "%lld vs %lld samples",
                                                   (long long)p->dataset_len, (long long)p0->dataset_len);
        else if (p->dataset_hash != p0->dataset_hash)
            what = "the data set's files", snprintf(detail, sizeof detail,
                                                    "file list and labels hash %016llx vs %016llx: another copy of "
                                                    "the folder, or one changed since",
                                                    (unsigned long long)p->dataset_hash,
                                                    (unsigned long long)p0->dataset_hash);
        else if (p->config_hash != p0->config_hash) {
            what = "the config";
            if (!config_difference(d, r, detail, sizeof detail))
                snprintf(detail, sizeof detail, "hash %016llx vs %016llx", (unsigned long long)p->config_hash,
                         (unsigned long long)p0->config_hash);
        }
        if (what)
            return dpt_errorf(err,
                              "ranks disagree: rank %d differs from rank 0 in %s%s%s%s\n"
                              "HINT: start every rank with the same config file, --set flags "
                              "and data",
                              r, what, *detail ? " (" : "", detail, *detail ? ")" : "");
    }
    return true;
}

/* ---------------------------------------------------------------- life cycle */

/* The buckets of a capacity, greedily in reverse creation order (the order backward finishes
 * gradients in, roughly): the first bucket fills first and its AllReduce starts earliest. It
 * is capped at 1 MiB (as in PyTorch DDP): the last layers' gradients go on the wire while most
 * of backward is still ahead. A bucket closes once it holds its cap, with the parameter that
 * filled it (PyTorch's compute_bucket_assignment_by_size does the same): a large parameter
 * goes with the ones before it, whose gradients come just before its own, rather than opening
 * a bucket that then waits for the layers behind it (the CNN's 1.5 MiB classifier weight went
 * on the wire only after conv1's gradient, at the end of backward). With place, the
 * parameters' places are recorded; returns the count. */
static int plan_buckets(dpt_ddp *d, double bucket_mb, bool place, uint64_t *signature)
{
    uint64_t sig = DPT_HASH_SEED;
    double cap_bytes = bucket_mb * 1024.0 * 1024.0;
    double first_cap = cap_bytes < 1048576.0 ? cap_bytes : 1048576.0;
    int nbuckets = 0;
    int64_t numel_in = 0, count_in = 0;
    bool full = false; /* the open bucket holds its cap */
    for (int k = 0; k < d->nparams; k++) {
        int p = d->nparams - 1 - k;
        int64_t numel = dpt_model_param_at(d->model, p)->numel;
        if (!nbuckets || full) {
            nbuckets++;
            sig = dpt_hash_bytes(sig, &k, sizeof k); /* where each bucket starts: the plan */
            numel_in = count_in = 0;
            if (place) d->buckets[nbuckets - 1] = (bucket){.first = k};
        }
        /* Every gradient view starts on a 256-byte boundary of its bucket: cuBLAS and cuDNN
         * pick kernels by pointer alignment (a view 8 bytes in gets slower ones), and the CPU
         * kernels' vector loads like it too. The gaps are zeros the AllReduce carries along. */
        int64_t offset = (numel_in + BUCKET_ALIGN_FLOATS - 1) / BUCKET_ALIGN_FLOATS * BUCKET_ALIGN_FLOATS;
        numel_in = offset + numel;
        count_in++;
        full = (double)numel_in * sizeof(float) >= (nbuckets == 1 ? first_cap : cap_bytes);
        if (d->seg_of && k + 1 < d->nparams && d->seg_of[p - 1] != d->seg_of[p])
            full = true; /* zero = 2 after the first plan: a bucket also ends where a segment does */
        if (place) {
            d->order[k] = p;
            d->bucket_of[p] = nbuckets - 1;
            d->offset_of[p] = offset;
            d->buckets[nbuckets - 1].numel = numel_in;
            d->buckets[nbuckets - 1].count = (int)count_in;
        }
    }
    if (signature) *signature = sig;
    return nbuckets;
}

/* reduce_scatter, the first plan: its buckets become the segments, each cut into the ranks'
 * ranges by dpt_zero_range (zero.h). */
static void take_segments(dpt_ddp *d)
{
    int size = d->comm->size;
    d->seg_of = malloc((size_t)(d->nparams + 1) * sizeof *d->seg_of);
    d->seg_off = malloc((size_t)(d->nparams + 1) * sizeof *d->seg_off);
    d->seg_numel = malloc((size_t)(d->nbuckets + 1) * sizeof *d->seg_numel);
    d->seg_displs = malloc((size_t)(d->nbuckets + 1) * (size_t)(size + 1) * sizeof *d->seg_displs);
    if (!d->seg_of || !d->seg_off || !d->seg_numel || !d->seg_displs) dpt_fatal("out of host memory");
    d->nsegs = d->nbuckets;
    memcpy(d->seg_of, d->bucket_of, (size_t)d->nparams * sizeof *d->seg_of);
    memcpy(d->seg_off, d->offset_of, (size_t)d->nparams * sizeof *d->seg_off);
    for (int s = 0; s < d->nbuckets; s++) {
        int64_t *sd = d->seg_displs + (size_t)s * (size_t)(size + 1), hi;
        d->seg_numel[s] = d->buckets[s].numel;
        for (int q = 0; q < size; q++)
            dpt_zero_range(d->seg_numel[s], size, q, &sd[q], &hi);
        sd[size] = d->seg_numel[s];
    }
}

/* Lay the buckets out for d->opt.bucket_mb, each with its flat buffer where storage (shard_grads
 * gives them one only while backward fills them) and, under reduce_scatter, its ranks' ranges. */
static void layout_buckets(dpt_ddp *d, bool storage)
{
    d->nbuckets = plan_buckets(d, d->opt.bucket_mb, true, NULL);
    if (d->opt.reduce_scatter && !d->seg_of) take_segments(d);
    int size = d->comm->size;
    for (int b = 0; b < d->nbuckets; b++) {
        bucket *bk = &d->buckets[b];
        if (storage) {
            bk->flat = dpt_ctx_alloc(d->ctx, (size_t)bk->numel * sizeof(float), &bk->granted, "a DDP gradient bucket");
            d->ctx->be->fill(d->ctx, bk->flat, bk->numel, 0.0f); /* the gaps stay 0 */
        }
        bk->pending = bk->count;
        if (!d->opt.reduce_scatter) continue;
        /* the bucket is elements [at, at + numel) of its segment, laid out as there (both align
         * every parameter to 64 floats from a 64-float boundary) */
        int first = d->order[bk->first];
        int64_t at = d->seg_off[first];
        const int64_t *sd = d->seg_displs + (size_t)d->seg_of[first] * (size_t)(size + 1);
        bk->displs = malloc((size_t)(size + 1) * sizeof *bk->displs);
        if (!bk->displs) dpt_fatal("out of host memory");
        for (int q = 0; q <= size; q++) {
            int64_t v = sd[q] - at;
            bk->displs[q] = v < 0 ? 0 : v > bk->numel ? bk->numel : v;
        }
    }
}

static void build_buckets(dpt_ddp *d)
{
    d->nparams = dpt_model_num_params(d->model);
    d->order = malloc((size_t)(d->nparams + 1) * sizeof *d->order);
    d->bucket_of = malloc((size_t)(d->nparams + 1) * sizeof *d->bucket_of);
    d->offset_of = malloc((size_t)(d->nparams + 1) * sizeof *d->offset_of);
    d->ready = calloc((size_t)d->nparams + 1, sizeof *d->ready);
    d->reduce_count = calloc((size_t)d->nparams + 1, sizeof *d->reduce_count);
    d->buckets = calloc((size_t)d->nparams + 1, sizeof *d->buckets);
    d->bucket_s = calloc((size_t)d->nparams + 1, sizeof *d->bucket_s);
    if (!d->order || !d->bucket_of || !d->offset_of || !d->ready || !d->reduce_count || !d->buckets || !d->bucket_s)
        dpt_fatal("out of host memory building DDP buckets");
    layout_buckets(d, true);
}

/* The 16-bit wire buffer for the largest bucket (grad_compression): the communication thread's
 * own, or the device communicator's. */
static bool size_wire(dpt_ddp *d, dpt_error *err)
{
    int64_t most = 0;
    for (int b = 0; b < d->nbuckets; b++)
        most = d->buckets[b].numel > most ? d->buckets[b].numel : most;
    if (d->async) return d->comm->ops->wire16(d->comm, most, d->opt.compression == DPT_GRAD_COMPRESSION_BF16, err);
    free(d->wire);
    d->wire = malloc((size_t)(most ? most : 1) * sizeof *d->wire);
    if (!d->wire) dpt_fatal("out of host memory for the 16-bit gradient buffer");
    return true;
}

int dpt_ddp_plan_count(dpt_ddp *d, double bucket_mb, uint64_t *signature)
{
    return plan_buckets(d, bucket_mb, false, signature);
}

/* Between steps only (no bucket in flight): the gradients move out, the buckets are laid out
 * again for the new capacity, the gradients move into their new places. Every rank must call
 * it at the same step with the same size (the plans must match, as at start). */
void dpt_ddp_replan(dpt_ddp *d, double bucket_mb)
{
    DPT_ASSERT(d->hooked && d->launched == 0 && d->reduced == 0, "DDP re-planned mid-step");
    if (bucket_mb == d->opt.bucket_mb) return;
    /* shard_grads: between steps no bucket has storage and no gradient a place to keep */
    if (!d->lazy) rehome_grads(d, false);
    for (int b = 0; b < d->nbuckets; b++) {
        DPT_ASSERT(!d->lazy || !d->buckets[b].flat, "bucket %d holds storage between steps", b);
        if (d->buckets[b].flat) dpt_alloc_put(d->ctx->alloc, d->buckets[b].flat, d->buckets[b].granted);
        free(d->buckets[b].displs);
    }
    d->opt.bucket_mb = bucket_mb;
    layout_buckets(d, !d->lazy);
    dpt_error err;
    if (d->h16 && !size_wire(d, &err)) dpt_abort_job("%s", err.msg);
    if (d->lazy) shard_places(d); /* the same places (asserted) */
    else rehome_grads(d, true);
    d->next_launch = 0;
}

/* Between steps: gradients on the wire in 16 bits or not ([distributed] grad_compression = auto;
 * host communicators: the communication thread reads the setting per bucket). */
void dpt_ddp_set_compression(dpt_ddp *d, dpt_grad_compression c)
{
    if (c == d->opt.compression) return;
    DPT_ASSERT(!d->async && d->launched == 0 && d->reduced == 0, "gradient compression changed mid-step or on a device stream");
    d->opt.compression = c;
    d->h16 = c != DPT_GRAD_COMPRESSION_NONE;
    dpt_error err;
    if (d->h16 && !size_wire(d, &err)) dpt_abort_job("%s", err.msg);
    if (!d->h16) {
        free(d->wire);
        d->wire = NULL;
    }
}

double dpt_ddp_bucket_mb(const dpt_ddp *d)
{
    return d->opt.bucket_mb;
}

dpt_ddp *dpt_ddp_new(dpt_ctx *ctx, dpt_model *model, dpt_comm *comm, const dpt_ddp_options *opt,
                     dpt_error *err)
{
    DPT_ASSERT(comm, "DDP needs a communicator");
    DPT_ASSERT(opt->bucket_mb > 0, "bucket_mb %g", opt->bucket_mb);
    dpt_ddp *d = calloc(1, sizeof *d);
    if (!d) dpt_fatal("out of host memory for DDP");
    d->ctx = ctx;
    d->model = model;
    d->comm = comm;
    d->opt = *opt;
    d->sync = true;
    build_buckets(d);

    plan mine = make_plan(d);
    plan *all = calloc((size_t)comm->size, sizeof *all);
    if (!all) dpt_fatal("out of host memory for the DDP plan check");
    dpt_comm_allgather(comm, &mine, all, sizeof mine, "DDP start-up: plan check (allgather)");
    bool ok = check_plans(d, all, err);
    free(all);
    if (!ok) {
        dpt_ddp_free(d);
        return NULL;
    }
    /* Every rank starts from rank 0's parameters and buffers. */
    for (int i = 0; i < d->nparams; i++) {
        dpt_tensor *t = dpt_model_param_at(model, i);
        dpt_comm_broadcast(comm, t->data, (size_t)t->numel * sizeof(float), 0,
                           "DDP start-up: parameter broadcast");
    }
    for (int i = 0; i < dpt_model_num_buffers(model); i++) {
        dpt_tensor *t = dpt_model_buffer_at(model, i);
        dpt_comm_broadcast(comm, t->data, (size_t)t->numel * sizeof(float), 0,
                           "DDP start-up: buffer broadcast");
    }
    d->async = comm->ops->reduce_avg_async != NULL;
    if (opt->compression_auto && (d->async || !comm->ops->allreduce_h16 || dpt_ctx_device(ctx).kind != DPT_DEVICE_CPU)) {
        dpt_errorf(err, "[distributed] grad_compression = auto: only on host communicators (mpirun on CPUs, "
                        "DataParallel over CPUs) for now; the %s communicator cannot change it between steps\n"
                        "HINT: grad_compression = bf16 or none",
                   comm->ops->name);
        dpt_ddp_free(d);
        return NULL;
    }
    if (opt->reduce_scatter && d->async) {
        dpt_errorf(err, "[distributed] zero = 2 reduce-scatters the gradients over a host communicator; this one "
                        "is a device communicator (NCCL)\nHINT: zero = 1 (gradients AllReduced) takes it");
        dpt_ddp_free(d);
        return NULL;
    }
    if (opt->compression != DPT_GRAD_COMPRESSION_NONE) {
        bool bf16 = opt->compression == DPT_GRAD_COMPRESSION_BF16;
        /* a device communicator converts on its stream (NCCL's bf16/fp16 AllReduce); a host
         * one gets the 16-bit values from the communication thread */
        bool offered = d->async ? comm->ops->wire16 != NULL
                           : comm->ops->allreduce_h16 != NULL && dpt_ctx_device(ctx).kind == DPT_DEVICE_CPU;
        if (!offered) {
            dpt_errorf(err, "[distributed] grad_compression = %s: the %s communicator has no 16-bit AllReduce for "
                            "these gradients\nHINT: grad_compression = none",
                       bf16 ? "bf16" : "fp16", comm->ops->name);
            dpt_ddp_free(d);
            return NULL;
        }
        d->h16 = true;
        if (!size_wire(d, err)) {
            dpt_ddp_free(d);
            return NULL;
        }
    }
    rehome_grads(d, true);
    d->lazy = opt->reduce_scatter && !d->async && (opt->shard_grads == 2 || (opt->shard_grads == 1 && sharding_pays(d)));
    if (d->lazy) shard_buckets(d);
    if (!d->async) {
        /* The communication thread's collectives go on a communicator of their own, so they
         * never pair with the main thread's (SyncBN, evaluation, control) on another rank. */
        d->grad_comm = comm->ops->dup ? comm->ops->dup(comm, "DDP gradients") : comm;
        pthread_mutex_init(&d->mu, NULL);
        pthread_cond_init(&d->work_cv, NULL);
        pthread_cond_init(&d->done_cv, NULL);
        if (pthread_create(&d->thread, NULL, comm_thread_main, d) != 0)
            dpt_fatal("cannot start the DDP communication thread");
    }
    d->hooked = true;
    dpt_set_grad_ready_hook(ctx, grad_ready_hook, d);
    if (d->lazy) dpt_set_grad_needed_hook(ctx, grad_needed_hook, d);
    return d;
}

void dpt_ddp_free(dpt_ddp *d)
{
    if (!d) return;
    if (d->hooked && !d->async) {
        pthread_mutex_lock(&d->mu);
        d->quit = true;
        pthread_cond_signal(&d->work_cv);
        pthread_mutex_unlock(&d->mu);
        pthread_join(d->thread, NULL);
        if (d->grad_comm != d->comm) d->grad_comm->ops->free(d->grad_comm);
        pthread_mutex_destroy(&d->mu);
        pthread_cond_destroy(&d->work_cv);
        pthread_cond_destroy(&d->done_cv);
    }
    if (d->hooked) {
        if (d->async && d->launched) d->comm->ops->join(d->comm, "the AllReduces of the last step", NULL, NULL);
        dpt_set_grad_ready_hook(d->ctx, NULL, NULL);
        if (d->lazy) dpt_set_grad_needed_hook(d->ctx, NULL, NULL);
        rehome_grads(d, false);
    }
    free(d->wire);
    for (int b = 0; b < d->nbuckets; b++) {
        if (d->buckets[b].flat) dpt_alloc_put(d->ctx->alloc, d->buckets[b].flat, d->buckets[b].granted);
        free(d->buckets[b].displs);
    }
    if (d->shard) dpt_alloc_put(d->ctx->alloc, d->shard, d->shard_granted);
    free(d->shard_off), free(d->grad_at);
    free(d->seg_of), free(d->seg_off), free(d->seg_numel), free(d->seg_displs);
    free(d->buckets);
    free(d->bucket_s);
    free(d->order);
    free(d->bucket_of);
    free(d->offset_of);
    free(d->ready);
    free(d->reduce_count);
    free(d);
}

void dpt_ddp_set_sync(dpt_ddp *d, bool sync)
{
    d->sync = sync;
}
void dpt_ddp_set_timeline(dpt_ddp *d, dpt_timeline *tl)
{
    d->timeline = tl;
}

static _Noreturn void report_timeout(dpt_ddp *d)
{
    char recent[2048];
    size_t used = 0;
    recent[0] = '\0';
    for (int i = 0; i < RING; i++) {
        const ring_entry *e = &d->ring[(d->ring_next + i) % RING];
        if (e->start_s == 0) continue;
        used += (size_t)snprintf(recent + used, sizeof recent - used,
                                 "\n  step %lld bucket %d (%lld floats): %s", (long long)step_label(d, e->step), e->bucket,
                                 (long long)e->numel, e->end_s ? "done" : "IN FLIGHT");
        if (used >= sizeof recent) break;
    }
    const char *where = d->reduced < d->launched ? (d->opt.reduce_scatter ? "in the reduce-scatter" : "in AllReduce")
                                                 : "waiting for gradients (not launched)";
    dpt_abort_job("rank %d of %d: collective timed out after %.0f s: %s of bucket %d of %d, "
                  "step %lld, %s\nrecent collectives on this rank:%s\n"
                  "HINT: another rank stopped or is much slower; raise [distributed] comm_timeout_s "
                  "if steps are legitimately this slow",
                  d->comm->rank, d->comm->size, d->opt.timeout_s, d->opt.reduce_scatter ? "reduce-scatter" : "allreduce",
                  d->reduced, d->nbuckets, (long long)step_label(d, d->step),
                  where, recent);
}

static void end_step(dpt_ddp *d)
{
    for (int b = 0; b < d->nbuckets; b++) {
        bucket *bk = &d->buckets[b];
        for (int k = bk->first; k < bk->first + bk->count; k++) {
            int p = d->order[k];
            d->ready[p] = false;
            d->reduce_count[p]++;
        }
        bk->pending = bk->count;
    }
    d->next_launch = 0;
    d->step++;
}

/* The AllReduces run on the device's communication stream and the host does not wait for
 * them: the optimizer's kernels queue behind them on the device. Their time and the compute
 * stream's wait for them (exposed communication) are measured on the device, by events, and
 * come back with a later step's join: the stats are the latest finished step's. */
static void finish_async(dpt_ddp *d, double backward_end)
{
    double comm_s = 0.0, exposed_s = 0.0;
    char what[128];
    snprintf(what, sizeof what, "the AllReduces of step %lld (%d of %d buckets)", (long long)step_label(d, d->step),
             d->launched, d->nbuckets);
    d->comm->ops->join(d->comm, what, &comm_s, &exposed_s);
    double now = dpt_now_s();
    for (int i = 0; i < RING; i++)
        if (d->ring[i].step == d->step && d->ring[i].end_s == 0) d->ring[i].end_s = now;
    if (d->timeline) dpt_timeline_span(d->timeline, "allreduce (device stream, enqueued)", 1, backward_end, now);
    d->stats = (dpt_ddp_stats){.step = d->step,
                               .buckets = d->nbuckets,
                               .wait_s = exposed_s,
                               .comm_s = comm_s,
                               .hidden_s = comm_s > exposed_s ? comm_s - exposed_s : 0.0};
    d->launched = d->reduced = 0;
    end_step(d);
}

void dpt_ddp_finish(dpt_ddp *d)
{
    double backward_end = dpt_now_s();
    if (!d->sync) {
        d->stats = (dpt_ddp_stats){.step = d->step};
        return;
    }
    /* Parameters that got no gradient: zero (find_unused) or a clear error naming them. */
    char names[1024];
    size_t used = 0;
    int unused = 0;
    for (int p = 0; p < d->nparams; p++) {
        if (d->ready[p]) continue;
        if (d->opt.find_unused) {
            mark_ready(d, p); /* (shard_grads: gives its bucket storage) */
            d->ctx->be->fill(d->ctx, dpt_model_param_at(d->model, p)->grad->data,
                             dpt_model_param_at(d->model, p)->numel, 0.0f);
        } else if (used < sizeof names) {
            used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", unused ? ", " : "",
                                     dpt_model_param_at(d->model, p)->name);
        }
        unused++;
    }
    if (unused && !d->opt.find_unused)
        dpt_abort_job("rank %d: %d parameter(s) received no gradient in step %lld: %s\n"
                      "HINT: every parameter must take part in the loss; if some are unused on purpose, "
                      "set [distributed] find_unused = true",
                      d->comm->rank, unused, (long long)step_label(d, d->step), names);
    launch_ready_buckets(d);
    if (d->async) {
        finish_async(d, backward_end);
        return;
    }

    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += (time_t)d->opt.timeout_s;
    /* backward is over: the communication thread may have the core to itself */
    __atomic_store_n(&d->grad_comm->hurry, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&d->mu);
    while (d->reduced < d->nbuckets) {
        int rc = pthread_cond_timedwait(&d->done_cv, &d->mu, &deadline);
        if (rc == ETIMEDOUT && d->reduced < d->nbuckets) report_timeout(d);
    }
    d->launched = d->reduced = 0;
    pthread_mutex_unlock(&d->mu);
    __atomic_store_n(&d->grad_comm->hurry, 0, __ATOMIC_RELAXED);
    double waited = dpt_now_s() - backward_end;

    dpt_ddp_stats st = {.step = d->step, .buckets = d->nbuckets, .wait_s = waited};
    if (d->lazy) { /* every bucket reduced: only this rank's ranges stay */
        while (d->closed < d->nbuckets)
            bucket_close(d, d->closed++);
        d->closed = 0;
        st.grad_bytes = d->peak_bytes;
        d->peak_bytes = d->live_bytes;
    } else {
        for (int b = 0; b < d->nbuckets; b++)
            st.grad_bytes += (int64_t)d->buckets[b].granted;
    }
    for (int b = 0; b < d->nbuckets; b++) {
        const bucket *bk = &d->buckets[b];
        st.bytes += bk->numel * (d->h16 ? 2 : 4);
        d->bucket_s[b] = bk->end_s - bk->start_s;
        st.comm_s += d->bucket_s[b];
        double hidden_end = bk->end_s < backward_end ? bk->end_s : backward_end;
        if (hidden_end > bk->start_s) st.hidden_s += hidden_end - bk->start_s;
    }
    d->stats = st;
    end_step(d);
}

dpt_ddp_stats dpt_ddp_last_stats(const dpt_ddp *d)
{
    return d->stats;
}
const double *dpt_ddp_bucket_times(const dpt_ddp *d)
{
    return d->async ? NULL : d->bucket_s;
}
int dpt_ddp_num_buckets(const dpt_ddp *d)
{
    return d->nbuckets;
}
int64_t dpt_ddp_reduce_count(const dpt_ddp *d, int param)
{
    return d->reduce_count[param];
}

int dpt_ddp_bucket_params(const dpt_ddp *d, int b, int *params, int max)
{
    const bucket *bk = &d->buckets[b];
    for (int k = 0; k < bk->count && k < max; k++)
        params[k] = d->order[bk->first + k];
    return bk->count;
}

void dpt_ddp_param_place(const dpt_ddp *d, int p, int *in_bucket, int64_t *offset)
{
    *in_bucket = d->bucket_of[p], *offset = d->offset_of[p];
}
void dpt_ddp_param_segment(const dpt_ddp *d, int p, int *segment, int64_t *offset, int64_t *segment_numel)
{
    if (!d->seg_of) {
        dpt_ddp_param_place(d, p, segment, offset);
        *segment_numel = d->buckets[*segment].numel;
        return;
    }
    *segment = d->seg_of[p], *offset = d->seg_off[p], *segment_numel = d->seg_numel[*segment];
}
int64_t dpt_ddp_bucket_numel(const dpt_ddp *d, int b)
{
    return d->buckets[b].numel;
}
