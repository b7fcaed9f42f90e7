/* loader.c: batches from an in-memory dataset. Each epoch every rank draws the same seeded
 * permutation and takes its strided share (DistributedSampler), so ranks never overlap.
 *
 * Batches go through a ring of slots. With prefetch > 0 a background thread fills the slots
 * ahead of the consumer: it decodes (and augments) batch b into slot b % nslots, and on a
 * device backend copies the slot's pinned host buffer to its device tensor on the copy
 * stream, recording `copied`; dpt_loader_next makes the compute stream wait for that event,
 * so the step never waits on a host-to-device copy. A slot handed out stays the consumer's
 * until the next call, which records `consumed` on the compute stream; the next copy into
 * that slot waits for it. The batch sequence is a function of (seed, epoch, position) only,
 * so prefetching changes no value (tested).
 *
 * Image files ([data] source = folder) are decoded and augmented per sample by a pool of
 * worker threads (image.c), each sample's draw seeded by (seed, epoch, sample), so any
 * number of workers gives the same batch. On the CPU a worker writes the normalised floats
 * straight into the batch; on a device the batch stays uint8 HWC in pinned memory, a quarter
 * of the floats' bytes, and the backend's images_to_float makes the float NCHW batch on the
 * compute stream. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt.h"
#include "folder.h"
#include "image.h"
#include "../runtime/backend.h"
#include "../runtime/ctx.h"
#include "../runtime/error.h"
#include "../runtime/rng.h"
#include "../runtime/tensor.h"

typedef struct slot {
    float *host_x;          /* decoded batch; on the CPU the tensor's own memory */
    int32_t *labels;        /* B, host (pinned on a device with async copies) */
    dpt_tensor *labels_dev; /* B int32 in float-sized slots on the device; NULL on the CPU */
    int64_t size;
    dpt_tensor *x_full, *x_partial; /* device memory; x_partial views x_full's (last batch) */
    dpt_event *copied, *consumed;   /* device backends with async copies */
    uint8_t *host_u8;               /* image files on a device: the batch as uint8 HWC */
    dpt_tensor *dev_u8;             /* its device copy (bytes in a float tensor's storage) */
    char error[4800];               /* image files: the first unreadable sample's message */
    int64_t error_at;               /* ...and its position in the batch */
    dpt_tensor *label_full, *label_partial; /* image sets: the labels as an I32 tensor (B) on the device */
    /* samples of declared fields (a source's get): per field, the batch on the device (and its
     * partial view) and its host staging buffer (the tensor's own memory on the CPU) */
    dpt_tensor *field_full[DPT_MAX_FIELDS], *field_partial[DPT_MAX_FIELDS];
    void *field_host[DPT_MAX_FIELDS];
} slot;

struct dpt_loader {
    dpt_ctx *ctx;
    const dpt_dataset *ds;
    dpt_loader_options opt;
    int64_t n_total;   /* samples in play (after limit) */
    int64_t n_mine;    /* this rank's samples per epoch */
    int64_t n_batches; /* per epoch */
    int64_t *perm;     /* n_total */
    int64_t *mine;     /* n_mine indices into the dataset */
    uint8_t *copy;     /* repeated augmentation: which copy of its sample each of mine is (NULL: none) */
    int epoch;
    float lut[4][256]; /* byte -> normalised value, per channel (all use [0] unless per channel) */
    uint8_t *aa_img, *aa_tmp; /* auto_augment of images in memory: a sample as HWC bytes, and scratch */
    int lut_channels;
    float norm_scale[4], norm_shift[4]; /* the same as x * scale + shift (image files) */
    bool direct;    /* CPU: decode straight into the tensor */
    bool async;     /* device with pinned memory, a copy stream and events */
    bool generic;   /* samples of declared fields from the source's get */
    int nfields;
    dpt_field fields[DPT_MAX_FIELDS];
    size_t field_bytes[DPT_MAX_FIELDS]; /* per sample */
    slot *slots;
    int nslots;
    /* Positions are batch numbers in this epoch. The consumer returns `next` and holds
     * `next - 1` until its following call (while released < next); batches [next, ready) are
     * done, and the producer may fill batch b only when b < released + nslots. */
    int64_t next, ready, released;
    pthread_t thread;
    bool threaded, busy, paused, quit;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, ready_cv;
    /* Image files: the worker pool. A job is one batch; a worker claims its samples one at a
     * time under pool_mu, and the job's fields change only once every claimed one is done. */
    bool files;
    int nworkers;
    pthread_t *workers;
    dpt_image_scratch *scratch; /* nworkers + 1: the last is the producer's own */
    uint8_t *sample_u8;         /* the same count of one-sample buffers (CPU) */
    pthread_mutex_t pool_mu;
    pthread_cond_t pool_go, pool_done;
    slot *job_slot;
    int64_t job_start, job_size, job_next, job_finished;
    bool pool_quit;
    atomic_llong bad_files; /* distinct files found unreadable (each once, however often drawn) */
    atomic_int bad_reported;
    atomic_uchar *bad_mark; /* per file of the list: found unreadable */
};

static void free_slot(dpt_loader *l, slot *s)
{
    const dpt_backend *be = l->ctx->be;
    if (s->copied) be->dev->event_sync(l->ctx, s->copied), be->dev->event_free(l->ctx, s->copied);
    if (s->consumed) be->dev->event_free(l->ctx, s->consumed);
    dpt_tensor_free(s->label_partial);
    dpt_tensor_free(s->label_full);
    if (l->generic) {
        for (int f = 0; f < l->nfields; f++) {
            if (!l->direct) {
                if (l->async)
                    be->dev->host_free(l->ctx, s->field_host[f]);
                else
                    free(s->field_host[f]);
            }
            dpt_tensor_free(s->field_partial[f]);
            dpt_tensor_free(s->field_full[f]);
        }
        return;
    }
    if (!l->direct) { /* the staging buffer: floats, or an image batch's bytes */
        void *staging = s->host_u8 ? (void *)s->host_u8 : (void *)s->host_x;
        if (l->async)
            be->dev->host_free(l->ctx, staging);
        else
            free(staging);
    }
    if (l->async)
        be->dev->host_free(l->ctx, s->labels);
    else
        free(s->labels);
    dpt_tensor_free(s->x_partial);
    dpt_tensor_free(s->x_full);
    dpt_tensor_free(s->labels_dev);
    dpt_tensor_free(s->dev_u8);
}

/* A tensor over another's memory with a new first dimension (the last, partial batch). */
static dpt_tensor *rows_of(dpt_ctx *ctx, dpt_tensor *full, int64_t rows)
{
    int64_t shape[DPT_MAX_DIMS];
    memcpy(shape, full->shape, sizeof shape);
    shape[0] = rows;
    dpt_tensor *t = dpt_tensor_wrap(ctx, full->data, full->ndim, shape);
    t->dtype = full->dtype;
    return t;
}

static void init_generic_slot(dpt_loader *l, slot *s, bool partial)
{
    dpt_ctx *ctx = l->ctx;
    for (int f = 0; f < l->nfields; f++) {
        const dpt_field *fd = &l->fields[f];
        int64_t shape[DPT_MAX_DIMS] = {l->opt.batch};
        for (int d = 0; d < fd->ndim; d++)
            shape[1 + d] = fd->shape[d];
        s->field_full[f] = dpt_tensor_new_dtype(ctx, fd->dtype, 1 + fd->ndim, shape);
        if (partial) s->field_partial[f] = rows_of(ctx, s->field_full[f], l->n_mine % l->opt.batch);
        size_t bytes = (size_t)l->opt.batch * l->field_bytes[f];
        s->field_host[f] = l->direct ? (void *)s->field_full[f]->data
                           : l->async ? ctx->be->dev->host_alloc(ctx, bytes)
                                      : malloc(bytes);
        if (!s->field_host[f])
            dpt_fatal("out of host memory for a loader slot (%zu bytes)%s", bytes, l->async ? " (pinned memory)" : "");
    }
    if (l->async) {
        s->copied = ctx->be->dev->event_new(ctx);
        s->consumed = ctx->be->dev->event_new(ctx);
    }
}

static void init_slot(dpt_loader *l, slot *s, bool partial)
{
    dpt_ctx *ctx = l->ctx;
    const dpt_dataset *ds = l->ds;
    if (l->generic) {
        init_generic_slot(l, s, partial);
        return;
    }
    int64_t chw = ds->c * ds->h * ds->w;
    s->x_full = dpt_tensor_new(ctx, 4, (int64_t[]){l->opt.batch, ds->c, ds->h, ds->w});
    if (partial)
        s->x_partial = dpt_tensor_wrap(ctx, s->x_full->data, 4,
                                       (int64_t[]){l->n_mine % l->opt.batch, ds->c, ds->h, ds->w});
    size_t bytes = (size_t)(l->opt.batch * chw) * sizeof(float);
    if (l->files && !l->direct) { /* uint8 on the wire, floats made on the device */
        bytes = (size_t)(l->opt.batch * chw);
        s->host_u8 = l->async ? ctx->be->dev->host_alloc(ctx, bytes) : malloc(bytes);
        s->dev_u8 = dpt_tensor_new(ctx, 1, (int64_t[]){(int64_t)(bytes + 3) / 4});
    } else if (l->direct)
        s->host_x = s->x_full->data;
    else if (l->async)
        s->host_x = ctx->be->dev->host_alloc(ctx, bytes);
    else
        s->host_x = malloc(bytes);
    size_t label_bytes = (size_t)l->opt.batch * sizeof *s->labels;
    s->labels = l->async ? ctx->be->dev->host_alloc(ctx, label_bytes) : malloc(label_bytes);
    /* the labels travel with the batch, so the loss needs no upload in the step */
    if (!l->direct) s->labels_dev = dpt_tensor_new(ctx, 1, (int64_t[]){l->opt.batch});
    if (s->labels) { /* the same as a tensor of the batch's fields */
        s->label_full = s->labels_dev ? rows_of(ctx, s->labels_dev, l->opt.batch)
                                      : dpt_tensor_wrap(ctx, (float *)s->labels, 1, (int64_t[]){l->opt.batch});
        s->label_full->dtype = DPT_I32;
        if (partial) s->label_partial = rows_of(ctx, s->label_full, l->n_mine % l->opt.batch);
    }
    if ((!s->host_x && !s->host_u8) || !s->labels)
        dpt_fatal("out of host memory for a loader slot (%zu bytes)%s", bytes,
                  l->async ? " (pinned memory)" : "");
    if (l->async) {
        s->copied = ctx->be->dev->event_new(ctx);
        s->consumed = ctx->be->dev->event_new(ctx);
    }
}

static void fill_slot(dpt_loader *l, int64_t b, slot *s);
static void *producer_main(void *arg);
static void start_pool(dpt_loader *l);
static void stop_pool(dpt_loader *l);

typedef struct loader_plan {
    int64_t n_total, n_mine, batch, n_batches;
} loader_plan;

/* How the samples split: this rank's share and its batches (no buffer is made). */
static loader_plan plan(const dpt_dataset *ds, const dpt_loader_options *opt)
{
    loader_plan p;
    p.n_total = opt->limit > 0 && opt->limit < ds->n ? opt->limit : ds->n;
    int64_t size = opt->world_size;
    /* Equal shares keep every rank stepping in lockstep: drop the remainder, or (drop_last =
     * false) pad by wrapping round the permutation, as torch's DistributedSampler does. */
    DPT_ASSERT(opt->shards_per_rank == 0 || (opt->drop_last && !opt->exact_shards), "the block sampler drops");
    if (opt->shards_per_rank > 0) { /* whole global steps only */
        int64_t step = opt->batch * opt->shards_per_rank * size;
        p.n_mine = p.n_total / step * opt->batch * opt->shards_per_rank;
    } else if (opt->exact_shards)
        p.n_mine = (p.n_total - opt->rank + size - 1) / size;
    else
        p.n_mine = opt->drop_last ? p.n_total / size : (p.n_total + size - 1) / size;
    bool drop = opt->drop_last && !opt->exact_shards;
    /* A batch larger than the whole share (an evaluation batch over a small test set) is the
     * share: the same single batch, without buffers sized for samples that do not exist. */
    p.batch = !drop && p.n_mine > 0 && opt->batch > p.n_mine ? p.n_mine : opt->batch;
    p.n_batches = drop ? p.n_mine / p.batch : (p.n_mine + p.batch - 1) / p.batch;
    return p;
}

int64_t dpt_loader_plan_batches(const dpt_dataset *ds, const dpt_loader_options *opt, int64_t *samples)
{
    loader_plan p = plan(ds, opt);
    if (samples) *samples = p.n_mine;
    return p.n_batches;
}

dpt_loader *dpt_loader_new(dpt_ctx *ctx, const dpt_dataset *ds, const dpt_loader_options *opt)
{
    DPT_ASSERT(opt->batch > 0, "batch %lld", (long long)opt->batch);
    DPT_ASSERT(opt->world_size >= 1 && opt->rank >= 0 && opt->rank < opt->world_size, "rank %d of %d",
               opt->rank, opt->world_size);
    DPT_ASSERT(opt->prefetch >= 0 && opt->prefetch <= 64, "prefetch %d", opt->prefetch);
    dpt_loader *l = calloc(1, sizeof *l);
    if (!l) dpt_fatal("out of host memory for a loader");
    l->ctx = ctx;
    l->ds = ds;
    l->opt = *opt;
    loader_plan p = plan(ds, opt);
    l->n_total = p.n_total, l->n_mine = p.n_mine, l->opt.batch = p.batch, l->n_batches = p.n_batches;
    bool drop = opt->drop_last && !opt->exact_shards;
    opt = &l->opt;
    l->perm = malloc((size_t)l->n_total * sizeof *l->perm);
    l->mine = malloc((size_t)(l->n_mine ? l->n_mine : 1) * sizeof *l->mine);
    DPT_ASSERT(opt->repeats <= 1 || (opt->shards_per_rank == 0 && opt->repeats <= 255), "repeats %d", opt->repeats);
    if (opt->repeats > 1 && !(l->copy = malloc((size_t)(l->n_mine ? l->n_mine : 1))))
        dpt_fatal("out of host memory for the loader's order");
    if (!l->perm || !l->mine) dpt_fatal("out of host memory for a loader");
    DPT_ASSERT(opt->norm_channels <= 4, "norm_channels %d", opt->norm_channels);
    if (opt->auto_augment && ds->images && ds->c == 3) { /* images in memory (files: the folder's view) */
        l->aa_img = malloc((size_t)(3 * ds->h * ds->w));
        l->aa_tmp = malloc((size_t)(3 * ds->h * ds->w));
        if (!l->aa_img || !l->aa_tmp) dpt_fatal("out of host memory for the loader's auto_augment");
    }
    l->lut_channels = opt->norm_channels > 1 ? opt->norm_channels : 1;
    for (int ch = 0; ch < 4; ch++) {
        bool own = ch < opt->norm_channels && opt->norm_channels > 1;
        float mean = own ? opt->channel_mean[ch] : opt->mean, std = own ? opt->channel_std[ch] : opt->std;
        for (int b = 0; b < 256; b++)
            l->lut[ch][b] = ((float)b / 255.0f - mean) / std;
        l->norm_scale[ch] = 1.0f / (255.0f * std), l->norm_shift[ch] = -mean / std;
    }
    const dpt_backend *be = ctx->be;
    l->direct = ctx->device.kind == DPT_DEVICE_CPU;
    l->files = ds->files != NULL;
    if (l->files && opt->skip_bad_files && !(l->bad_mark = calloc((size_t)ds->n, sizeof *l->bad_mark)))
        dpt_fatal("out of host memory for a loader");
    l->generic = ds->get != NULL;
    l->nfields = dpt_dataset_fields(ds, l->fields);
    for (int f = 0; f < l->nfields; f++) {
        size_t per = dpt_dtype_size(l->fields[f].dtype);
        for (int d = 0; d < l->fields[f].ndim; d++)
            per *= (size_t)l->fields[f].shape[d];
        l->field_bytes[f] = per;
    }
    DPT_ASSERT(!l->files || ds->c <= 4, "image files have %lld channels", (long long)ds->c);
    DPT_ASSERT(!l->files || l->direct || be->images_to_float, "a device backend without images_to_float");
    l->async = !l->direct && be->dev->host_alloc && be->dev->copy_h2d_async && be->dev->event_new;
    /* One slot is the consumer's, `prefetch` more are filled ahead. */
    l->nslots = opt->prefetch + 1;
    l->slots = calloc((size_t)l->nslots, sizeof *l->slots);
    if (!l->slots) dpt_fatal("out of host memory for a loader");
    bool partial = !drop && l->n_mine % opt->batch;
    for (int i = 0; i < l->nslots; i++)
        init_slot(l, &l->slots[i], partial);
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->work_cv, NULL);
    pthread_cond_init(&l->ready_cv, NULL);
    if (l->files) start_pool(l);
    dpt_loader_start_epoch(l, 0);
    if (opt->prefetch > 0) {
        if (pthread_create(&l->thread, NULL, producer_main, l) != 0)
            dpt_fatal("cannot start the loader's prefetch thread");
        l->threaded = true;
    }
    return l;
}

void dpt_loader_free(dpt_loader *l)
{
    if (!l) return;
    if (l->threaded) {
        pthread_mutex_lock(&l->mu);
        l->quit = true;
        pthread_cond_signal(&l->work_cv);
        pthread_mutex_unlock(&l->mu);
        pthread_join(l->thread, NULL);
    }
    if (l->files) stop_pool(l);
    for (int i = 0; i < l->nslots; i++)
        free_slot(l, &l->slots[i]);
    free(l->aa_img), free(l->aa_tmp);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->work_cv);
    pthread_cond_destroy(&l->ready_cv);
    free(l->slots);
    free(l->perm);
    free(l->mine);
    free(l->copy);
    free(l->bad_mark);
    free(l);
}

/* ---------------------------------------------------------------- the producer */

static void *producer_main(void *arg)
{
    dpt_loader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->quit && (l->paused || l->ready >= l->n_batches || l->ready >= l->released + l->nslots))
            pthread_cond_wait(&l->work_cv, &l->mu);
        if (l->quit) break;
        int64_t b = l->ready;
        l->busy = true;
        pthread_mutex_unlock(&l->mu);
        fill_slot(l, b, &l->slots[b % l->nslots]);
        pthread_mutex_lock(&l->mu);
        l->busy = false;
        l->ready = b + 1;
        pthread_cond_broadcast(&l->ready_cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* Give the batch the consumer holds back: on a device, later copies into its slot wait
 * until the compute stream is done with it. Called with mu held. */
static void release_held(dpt_loader *l)
{
    if (l->released == l->next) return; /* nothing held */
    slot *s = &l->slots[(l->next - 1) % l->nslots];
    if (l->async) l->ctx->be->dev->event_record(l->ctx, s->consumed, DPT_STREAM_COMPUTE);
    l->released = l->next;
}

/* Move the sequence to batch `to` of the (possibly new) epoch: stop the producer between
 * batches, let `change` alter the order, and restart it from there. */
static void reposition(dpt_loader *l, int64_t to, void (*change)(dpt_loader *, int), int epoch)
{
    pthread_mutex_lock(&l->mu);
    l->paused = true;
    while (l->busy)
        pthread_cond_wait(&l->ready_cv, &l->mu);
    release_held(l);
    if (change) change(l, epoch);
    if (to > l->n_batches) to = l->n_batches;
    l->next = l->ready = l->released = to;
    l->paused = false;
    pthread_cond_signal(&l->work_cv);
    pthread_mutex_unlock(&l->mu);
}

static void new_order(dpt_loader *l, int epoch)
{
    l->epoch = epoch;
    if (l->opt.shuffle) {
        dpt_rng rng;
        dpt_rng_seed(&rng, l->opt.seed * 0x9e3779b97f4a7c15ULL + (uint64_t)epoch + 1);
        dpt_rng_permutation(&rng, l->perm, l->n_total);
    } else {
        for (int64_t i = 0; i < l->n_total; i++)
            l->perm[i] = i;
    }
    int64_t S = l->opt.batch, per = l->opt.shards_per_rank, W = l->opt.world_size, r = l->opt.rank;
    if (l->copy) { /* RASampler: the order with each sample R times in a row, every W-th from rank r */
        int64_t R = l->opt.repeats, len = l->n_total * R;
        for (int64_t i = 0; i < l->n_mine; i++) {
            int64_t q = (r + i * W) % len;
            l->mine[i] = l->perm[q / R];
            l->copy[i] = (uint8_t)(q % R);
        }
        return;
    }
    for (int64_t i = 0; i < l->n_mine; i++) {
        int64_t pos = (int64_t)l->opt.rank + i * l->opt.world_size;
        if (per > 0) { /* batch b = i / S is shard r * per + b % per of global step b / per */
            int64_t b = i / S;
            pos = (b / per) * (S * per * W) + (r * per + b % per) * S + i % S;
        }
        l->mine[i] = l->perm[pos % l->n_total];
    }
}

void dpt_loader_start_epoch(dpt_loader *l, int epoch)
{
    reposition(l, 0, new_order, epoch);
}

/* Random crop of the zero-padded image and horizontal flip. The draw depends only on the
 * seed, the epoch and the sample, so every rank, and a resumed run, sees the same crops. */
static void seed_draw(const dpt_loader *l, int64_t idx, int copy, dpt_rng *rng)
{
    /* a repeated sample's copies draw apart (copy 0: the draw of a run without repeats) */
    dpt_rng_seed(rng, (l->opt.seed * 0x9e3779b97f4a7c15ULL) ^ ((uint64_t)l->epoch << 40) ^ (uint64_t)idx ^
                          (uint64_t)copy * 0xd1b54a32d192ed03ULL);
}

static void augment(const dpt_loader *l, int64_t idx, int copy, const uint8_t *src, float *dst)
{
    dpt_rng rng;
    seed_draw(l, idx, copy, &rng);
    int64_t pad = l->opt.crop_pad, c = l->ds->c, h = l->ds->h, w = l->ds->w;
    int64_t dy = pad ? (int64_t)dpt_rng_below(&rng, (uint64_t)(2 * pad + 1)) - pad : 0;
    int64_t dx = pad ? (int64_t)dpt_rng_below(&rng, (uint64_t)(2 * pad + 1)) - pad : 0;
    bool flip = l->opt.hflip && (dpt_rng_next(&rng) >> 63);
    uint8_t *img = l->aa_img; /* auto_augment (RGB): the crop and flip as HWC bytes, the policy on them */
    for (int64_t ch = 0; ch < c; ch++)
        for (int64_t y = 0; y < h; y++)
            for (int64_t x = 0; x < w; x++) {
                int64_t sy = y + dy, sx = (flip ? w - 1 - x : x) + dx;
                uint8_t v = sy >= 0 && sy < h && sx >= 0 && sx < w ? src[(ch * h + sy) * w + sx] : 0;
                if (img)
                    img[(y * w + x) * 3 + ch] = v;
                else
                    dst[(ch * h + y) * w + x] = l->lut[ch < l->lut_channels ? ch : 0][v];
            }
    if (!img) return;
    dpt_image_auto_augment(img, (int)w, (int)h, l->opt.auto_augment, l->opt.aa_ops, l->opt.aa_magnitude, &rng,
                           l->aa_tmp);
    for (int64_t ch = 0; ch < c; ch++)
        for (int64_t p = 0; p < h * w; p++)
            dst[ch * h * w + p] = l->lut[ch < l->lut_channels ? ch : 0][img[p * 3 + ch]];
}

/* ---------------------------------------------------------------- image files */

/* Sample i of the batch at `start` from its file (w: the worker's scratch). A bad file stops
 * the job (the lowest position's message is kept) or is replaced by the next file of the
 * list, drawn with that file's own seed, so the batch is the same for any worker count. */
static void make_sample(dpt_loader *l, slot *s, int64_t start, int64_t i, int w)
{
    const struct dpt_image_files *f = l->ds->files;
    int64_t chw = l->ds->c * l->ds->h * l->ds->w, idx = l->mine[start + i];
    uint8_t *u8 = l->direct ? l->sample_u8 + (size_t)w * chw : s->host_u8 + i * chw;
    char path[8400], msg[700];
    for (int64_t tries = 0, j = idx;; tries++, j = (j + 1) % f->n) {
        dpt_rng rng;
        seed_draw(l, j, l->copy ? l->copy[start + i] : 0, &rng);
        dpt_folder_path(f, j, path, sizeof path);
        if (dpt_image_sample(path, &f->view, &rng, u8, &l->scratch[w], NULL, msg, sizeof msg)) {
            s->labels[i] = l->ds->labels[j];
            break;
        }
        if (l->opt.skip_bad_files && tries + 1 < f->n) {
            if (atomic_exchange(&l->bad_mark[j], 1)) continue; /* counted and reported when first found */
            atomic_fetch_add(&l->bad_files, 1);
            int k = atomic_fetch_add(&l->bad_reported, 1);
            dpt_printable(path), dpt_printable(msg);
            if (k < 10)
                fprintf(stderr, "warning: %s: %s (skipped: [data] bad_files = skip)%s\n", path, msg,
                        k == 9 ? "; further bad files are only counted" : "");
            continue;
        }
        pthread_mutex_lock(&l->pool_mu);
        if (i < s->error_at) {
            s->error_at = i;
            snprintf(s->error, sizeof s->error, "%.4000s: %.700s%s", path, msg,
                     tries ? " (and every other file of the set)" : "");
        }
        pthread_mutex_unlock(&l->pool_mu);
        memset(u8, 0, (size_t)chw);
        s->labels[i] = 0;
        break;
    }
    if (l->direct)
        dpt_cpu_images_to_float(l->ctx, u8, s->host_x + i * chw, 1, l->ds->c, l->ds->h * l->ds->w, l->norm_scale,
                                l->norm_shift);
}

static void *worker_main(void *arg)
{
    dpt_loader *l = ((void **)arg)[0];
    int w = (int)(intptr_t)((void **)arg)[1];
    free(arg);
    pthread_mutex_lock(&l->pool_mu);
    for (;;) {
        while (!l->pool_quit && l->job_next >= l->job_size)
            pthread_cond_wait(&l->pool_go, &l->pool_mu);
        if (l->pool_quit) break;
        int64_t i = l->job_next++, start = l->job_start;
        slot *s = l->job_slot;
        pthread_mutex_unlock(&l->pool_mu);
        make_sample(l, s, start, i, w);
        pthread_mutex_lock(&l->pool_mu);
        if (++l->job_finished == l->job_size) pthread_cond_signal(&l->pool_done);
    }
    pthread_mutex_unlock(&l->pool_mu);
    return NULL;
}

static void start_pool(dpt_loader *l)
{
    int n = l->opt.workers > 0 ? l->opt.workers : 0;
    int64_t chw = l->ds->c * l->ds->h * l->ds->w;
    l->scratch = calloc((size_t)n + 1, sizeof *l->scratch);
    l->sample_u8 = malloc((size_t)(n + 1) * (size_t)chw);
    l->workers = calloc((size_t)n + 1, sizeof *l->workers);
    if (!l->scratch || !l->sample_u8 || !l->workers) dpt_fatal("out of host memory for the loader's workers");
    pthread_mutex_init(&l->pool_mu, NULL);
    pthread_cond_init(&l->pool_go, NULL);
    pthread_cond_init(&l->pool_done, NULL);
    for (int w = 0; w < n; w++) {
        void **arg = malloc(2 * sizeof *arg);
        if (!arg) dpt_fatal("out of host memory for the loader's workers");
        arg[0] = l, arg[1] = (void *)(intptr_t)w;
        if (pthread_create(&l->workers[w], NULL, worker_main, arg) != 0)
            dpt_fatal("cannot start loader worker %d of %d", w + 1, n);
        l->nworkers++;
    }
}

static void stop_pool(dpt_loader *l)
{
    pthread_mutex_lock(&l->pool_mu);
    l->pool_quit = true;
    pthread_cond_broadcast(&l->pool_go);
    pthread_mutex_unlock(&l->pool_mu);
    for (int w = 0; w < l->nworkers; w++)
        pthread_join(l->workers[w], NULL);
    for (int w = 0; w <= l->nworkers; w++)
        dpt_image_scratch_free(&l->scratch[w]);
    pthread_mutex_destroy(&l->pool_mu);
    pthread_cond_destroy(&l->pool_go);
    pthread_cond_destroy(&l->pool_done);
    free(l->scratch), free(l->sample_u8), free(l->workers);
}

/* The samples of one batch, on the workers (or this thread when there are none). */
static void fill_files(dpt_loader *l, int64_t start, int64_t size, slot *s)
{
    s->error[0] = '\0';
    s->error_at = INT64_MAX;
    if (!l->nworkers) {
        for (int64_t i = 0; i < size; i++)
            make_sample(l, s, start, i, 0);
        return;
    }
    pthread_mutex_lock(&l->pool_mu);
    l->job_slot = s, l->job_start = start, l->job_size = size, l->job_next = 0, l->job_finished = 0;
    pthread_cond_broadcast(&l->pool_go);
    while (l->job_finished < size)
        pthread_cond_wait(&l->pool_done, &l->pool_mu);
    pthread_mutex_unlock(&l->pool_mu);
}

/* Samples of declared fields: the source writes each into the slot's staging buffers; on a
 * device the copies start on the copy stream. */
static void fill_generic(dpt_loader *l, int64_t start, int64_t size, slot *s)
{
    const dpt_backend *be = l->ctx->be;
    for (int64_t i = 0; i < size; i++) {
        void *dst[DPT_MAX_FIELDS];
        for (int f = 0; f < l->nfields; f++)
            dst[f] = (char *)s->field_host[f] + (size_t)i * l->field_bytes[f];
        l->ds->get(l->ds, l->mine[start + i], dst);
    }
    s->size = size;
    if (!l->async) return;
    be->dev->stream_wait(l->ctx, DPT_STREAM_COPY, s->consumed); /* compute is done with the slot */
    for (int f = 0; f < l->nfields; f++)
        be->dev->copy_h2d_async(l->ctx, s->field_full[f]->data, s->field_host[f], (size_t)size * l->field_bytes[f],
                           DPT_STREAM_COPY);
    be->dev->event_record(l->ctx, s->copied, DPT_STREAM_COPY);
}

/* Decode batch b of this epoch into slot s and, on a device, start its copy. Runs on the
 * producer thread (or the caller's when prefetch = 0); touches nothing the consumer uses. */
static void fill_slot(dpt_loader *l, int64_t b, slot *s)
{
    const dpt_backend *be = l->ctx->be;
    int64_t start = b * l->opt.batch;
    int64_t size = l->n_mine - start < l->opt.batch ? l->n_mine - start : l->opt.batch;
    int64_t chw = l->ds->c * l->ds->h * l->ds->w;
    if (l->async) be->dev->event_sync(l->ctx, s->copied); /* the previous copy has read host_x */
    if (l->generic) {
        fill_generic(l, start, size, s);
        return;
    }
    if (l->files) {
        fill_files(l, start, size, s);
        s->size = size;
        if (l->direct) return;
        size_t bytes = (size_t)(size * chw), label_bytes = (size_t)size * sizeof *s->labels;
        if (l->async) {
            be->dev->stream_wait(l->ctx, DPT_STREAM_COPY, s->consumed);
            be->dev->copy_h2d_async(l->ctx, s->dev_u8->data, s->host_u8, bytes, DPT_STREAM_COPY);
            be->dev->copy_h2d_async(l->ctx, s->labels_dev->data, s->labels, label_bytes, DPT_STREAM_COPY);
            be->dev->event_record(l->ctx, s->copied, DPT_STREAM_COPY);
        }
        return;
    }
    for (int64_t i = 0; i < size; i++) {
        int64_t idx = l->mine[start + i];
        const uint8_t *src = l->ds->images + idx * chw;
        float *dst = s->host_x + i * chw;
        if (l->opt.crop_pad || l->opt.hflip || l->aa_img)
            augment(l, idx, l->copy ? l->copy[start + i] : 0, src, dst);
        else if (l->lut_channels == 1)
            for (int64_t j = 0; j < chw; j++)
                dst[j] = l->lut[0][src[j]];
        else
            for (int64_t j = 0, hw = chw / l->ds->c; j < chw; j++)
                dst[j] = l->lut[j / hw][src[j]];
        s->labels[i] = l->ds->labels[idx];
    }
    s->size = size;
    if (l->async) {
        be->dev->stream_wait(l->ctx, DPT_STREAM_COPY, s->consumed); /* compute is done with the slot */
        be->dev->copy_h2d_async(l->ctx, s->x_full->data, s->host_x, (size_t)(size * chw) * sizeof(float),
                           DPT_STREAM_COPY);
        be->dev->copy_h2d_async(l->ctx, s->labels_dev->data, s->labels, (size_t)size * sizeof *s->labels,
                           DPT_STREAM_COPY);
        be->dev->event_record(l->ctx, s->copied, DPT_STREAM_COPY);
    }
}

/* dpt_batch.key of batch b of this epoch: its place in the global order (the block sampler's
 * shard number in the deterministic mode, as new_order lays them out). */
static uint64_t batch_key(const dpt_loader *l, int64_t b)
{
    int64_t per = l->opt.shards_per_rank, W = l->opt.world_size > 0 ? l->opt.world_size : 1, r = l->opt.rank;
    int64_t global = per > 0 ? (b / per) * (per * W) + r * per + b % per : b * W + r;
    uint64_t h = dpt_hash_bytes(DPT_HASH_SEED, &l->opt.seed, sizeof l->opt.seed);
    h = dpt_hash_bytes(h, &l->epoch, sizeof l->epoch);
    return dpt_hash_bytes(h, &global, sizeof global);
}

bool dpt_loader_next(dpt_loader *l, dpt_batch *batch)
{
    pthread_mutex_lock(&l->mu);
    release_held(l);
    if (l->next >= l->n_batches) {
        pthread_mutex_unlock(&l->mu);
        return false;
    }
    int64_t b = l->next;
    slot *s = &l->slots[b % l->nslots];
    if (l->threaded) {
        pthread_cond_signal(&l->work_cv); /* a slot came free */
        while (l->ready <= b)
            pthread_cond_wait(&l->ready_cv, &l->mu);
    } else {
        fill_slot(l, b, s);
        l->ready = b + 1;
    }
    l->next = b + 1;
    pthread_mutex_unlock(&l->mu);
    if (s->error[0])
        dpt_abort_job("%s\nHINT: %sreplace or delete the file (then the file list is made again), or set [data] "
                      "bad_files = skip to skip unreadable images and count them",
                      s->error, strstr(s->error, "max_image_pixels") ? "raise [data] max_image_pixels if the image "
                                                                     "is wanted; " : "");
    const dpt_backend *be = l->ctx->be;
    bool full = s->size == l->opt.batch;
    batch->size = s->size;
    batch->key = batch_key(l, b);
    batch->nfields = l->nfields;
    memcpy(batch->fields, l->fields, sizeof batch->fields);
    if (l->generic) {
        if (l->async)
            be->dev->stream_wait(l->ctx, DPT_STREAM_COMPUTE, s->copied);
        else if (!l->direct)
            for (int f = 0; f < l->nfields; f++)
                be->dev->copy_h2d(l->ctx, s->field_full[f]->data, s->field_host[f], (size_t)s->size * l->field_bytes[f]);
        for (int f = 0; f < l->nfields; f++)
            batch->tensors[f] = full ? s->field_full[f] : s->field_partial[f];
        batch->x = batch->tensors[0];
        batch->labels = batch->device_labels = NULL;
        return true;
    }
    if (l->files && !l->direct) {
        int64_t hw = l->ds->h * l->ds->w, bytes = s->size * l->ds->c * hw;
        if (l->async) {
            be->dev->stream_wait(l->ctx, DPT_STREAM_COMPUTE, s->copied);
        } else {
            be->dev->copy_h2d(l->ctx, s->dev_u8->data, s->host_u8, (size_t)bytes);
            be->dev->copy_h2d(l->ctx, s->labels_dev->data, s->labels, (size_t)s->size * sizeof *s->labels);
        }
        be->images_to_float(l->ctx, (const uint8_t *)s->dev_u8->data, s->x_full->data, s->size, l->ds->c, hw,
                            l->norm_scale, l->norm_shift);
    } else if (l->async)
        be->dev->stream_wait(l->ctx, DPT_STREAM_COMPUTE, s->copied);
    else if (!l->direct) { /* a device backend without async copies: synchronous ones */
        be->dev->copy_h2d(l->ctx, s->x_full->data, s->host_x,
                     (size_t)(s->size * l->ds->c * l->ds->h * l->ds->w) * sizeof(float));
        be->dev->copy_h2d(l->ctx, s->labels_dev->data, s->labels, (size_t)s->size * sizeof *s->labels);
    }
    batch->x = full ? s->x_full : s->x_partial;
    batch->labels = s->labels;
    batch->device_labels = s->labels_dev ? (const int32_t *)s->labels_dev->data : s->labels;
    batch->tensors[0] = batch->x;
    batch->tensors[1] = full ? s->label_full : s->label_partial;
    return true;
}

const dpt_dataset *dpt_loader_dataset(const dpt_loader *l)
{
    return l->ds;
}

dpt_tensor *dpt_batch_get(const dpt_batch *b, const char *name)
{
    for (int f = 0; f < b->nfields; f++)
        if (!strcmp(b->fields[f].name, name)) return b->tensors[f];
    return NULL;
}

int64_t dpt_loader_num_batches(const dpt_loader *l)
{
    return l->n_batches;
}
int64_t dpt_loader_num_samples(const dpt_loader *l)
{
    return l->n_mine;
}
int64_t dpt_loader_bad_files(const dpt_loader *l)
{
    return (int64_t)atomic_load(&((dpt_loader *)l)->bad_files);
}

void dpt_loader_skip(dpt_loader *l, int64_t n)
{
    pthread_mutex_lock(&l->mu);
    int64_t to = l->next + n;
    pthread_mutex_unlock(&l->mu);
    reposition(l, to, NULL, 0);
}

void dpt_loader_next_cycle(dpt_loader *l, dpt_batch *batch)
{
    if (dpt_loader_next(l, batch)) return;
    dpt_loader_start_epoch(l, l->epoch + 1);
    DPT_ASSERT(dpt_loader_next(l, batch), "a loader with no batch per epoch");
}
