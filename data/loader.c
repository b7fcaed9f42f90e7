/* loader.c: batches from an in-memory dataset. Each epoch every rank draws the same seeded
 * permutation and takes its strided share (DistributedSampler), so ranks never overlap. */
#include <stdlib.h>
#include <string.h>

#include "dpt.h"
#include "../runtime/error.h"
#include "../runtime/rng.h"
#include "../runtime/tensor.h"

struct dpt_loader {
    dpt_ctx *ctx;
    const dpt_dataset *ds;
    dpt_loader_options opt;
    int64_t n_total;   /* samples in play (after limit) */
    int64_t n_mine;    /* this rank's samples per epoch */
    int64_t n_batches; /* per epoch */
    int64_t *perm;     /* n_total */
    int64_t *mine;     /* n_mine indices into the dataset */
    int64_t batch_index;
    int epoch;
    float lut[256];  /* byte -> normalised value */
    float *host_x;   /* (B, C, H, W) staging */
    int32_t *labels; /* B */
    dpt_tensor *x_full, *x_partial;
};

dpt_loader *dpt_loader_new(dpt_ctx *ctx, const dpt_dataset *ds, const dpt_loader_options *opt)
{
    DPT_ASSERT(opt->batch > 0, "batch %lld", (long long)opt->batch);
    DPT_ASSERT(opt->world_size >= 1 && opt->rank >= 0 && opt->rank < opt->world_size, "rank %d of %d",
               opt->rank, opt->world_size);
    dpt_loader *l = calloc(1, sizeof *l);
    if (!l) dpt_fatal("out of host memory for a loader");
    l->ctx = ctx;
    l->ds = ds;
    l->opt = *opt;
    l->n_total = opt->limit > 0 && opt->limit < ds->n ? opt->limit : ds->n;
    int64_t size = opt->world_size;
    /* Equal shares keep every rank stepping in lockstep: drop the remainder, or (drop_last =
     * false) pad by wrapping round the permutation, as torch's DistributedSampler does. */
    if (opt->exact_shards)
        l->n_mine = (l->n_total - opt->rank + size - 1) / size;
    else
        l->n_mine = opt->drop_last ? l->n_total / size : (l->n_total + size - 1) / size;
    bool drop = opt->drop_last && !opt->exact_shards;
    l->n_batches = drop ? l->n_mine / opt->batch : (l->n_mine + opt->batch - 1) / opt->batch;
    l->perm = malloc((size_t)l->n_total * sizeof *l->perm);
    l->mine = malloc((size_t)(l->n_mine ? l->n_mine : 1) * sizeof *l->mine);
    int64_t chw = ds->c * ds->h * ds->w;
    l->host_x = malloc((size_t)(opt->batch * chw) * sizeof *l->host_x);
    l->labels = malloc((size_t)opt->batch * sizeof *l->labels);
    if (!l->perm || !l->mine || !l->host_x || !l->labels) dpt_fatal("out of host memory for a loader");
    for (int b = 0; b < 256; b++)
        l->lut[b] = ((float)b / 255.0f - opt->mean) / opt->std;
    l->x_full = dpt_tensor_new(ctx, 4, (int64_t[]){opt->batch, ds->c, ds->h, ds->w});
    int64_t tail = l->n_mine % opt->batch;
    if (!drop && tail) l->x_partial = dpt_tensor_new(ctx, 4, (int64_t[]){tail, ds->c, ds->h, ds->w});
    dpt_loader_start_epoch(l, 0);
    return l;
}

void dpt_loader_free(dpt_loader *l)
{
    if (!l) return;
    dpt_tensor_free(l->x_full);
    dpt_tensor_free(l->x_partial);
    free(l->perm);
    free(l->mine);
    free(l->host_x);
    free(l->labels);
    free(l);
}

void dpt_loader_start_epoch(dpt_loader *l, int epoch)
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
    for (int64_t i = 0; i < l->n_mine; i++) {
        int64_t pos = (int64_t)l->opt.rank + i * l->opt.world_size;
        l->mine[i] = l->perm[pos % l->n_total];
    }
    l->batch_index = 0;
}

/* Random crop of the zero-padded image and horizontal flip. The draw depends only on the
 * seed, the epoch and the sample, so every rank, and a resumed run, sees the same crops. */
static void augment(const dpt_loader *l, int64_t idx, const uint8_t *src, float *dst)
{
    dpt_rng rng;
    dpt_rng_seed(&rng, (l->opt.seed * 0x9e3779b97f4a7c15ULL) ^ ((uint64_t)l->epoch << 40) ^ (uint64_t)idx);
    int64_t pad = l->opt.crop_pad, c = l->ds->c, h = l->ds->h, w = l->ds->w;
    int64_t dy = pad ? (int64_t)dpt_rng_below(&rng, (uint64_t)(2 * pad + 1)) - pad : 0;
    int64_t dx = pad ? (int64_t)dpt_rng_below(&rng, (uint64_t)(2 * pad + 1)) - pad : 0;
    bool flip = l->opt.hflip && (dpt_rng_next(&rng) >> 63);
    for (int64_t ch = 0; ch < c; ch++)
        for (int64_t y = 0; y < h; y++)
            for (int64_t x = 0; x < w; x++) {
                int64_t sy = y + dy, sx = (flip ? w - 1 - x : x) + dx;
                uint8_t v = sy >= 0 && sy < h && sx >= 0 && sx < w ? src[(ch * h + sy) * w + sx] : 0;
                dst[(ch * h + y) * w + x] = l->lut[v];
            }
}

bool dpt_loader_next(dpt_loader *l, dpt_batch *batch)
{
    if (l->batch_index >= l->n_batches) return false;
    int64_t start = l->batch_index * l->opt.batch;
    int64_t size = l->n_mine - start < l->opt.batch ? l->n_mine - start : l->opt.batch;
    int64_t chw = l->ds->c * l->ds->h * l->ds->w;
    for (int64_t b = 0; b < size; b++) {
        int64_t idx = l->mine[start + b];
        const uint8_t *src = l->ds->images + idx * chw;
        float *dst = l->host_x + b * chw;
        if (l->opt.crop_pad || l->opt.hflip)
            augment(l, idx, src, dst);
        else
            for (int64_t j = 0; j < chw; j++)
                dst[j] = l->lut[src[j]];
        l->labels[b] = l->ds->labels[idx];
    }
    dpt_tensor *x = size == l->opt.batch ? l->x_full : l->x_partial;
    dpt_tensor_copy_from_host(x, l->host_x);
    batch->x = x;
    batch->labels = l->labels;
    batch->size = size;
    l->batch_index++;
    return true;
}

int64_t dpt_loader_num_batches(const dpt_loader *l)
{
    return l->n_batches;
}
int64_t dpt_loader_num_samples(const dpt_loader *l)
{
    return l->n_mine;
}

void dpt_loader_skip(dpt_loader *l, int64_t n)
{
    l->batch_index = l->batch_index + n < l->n_batches ? l->batch_index + n : l->n_batches;
}

void dpt_loader_next_cycle(dpt_loader *l, dpt_batch *batch)
{
    if (dpt_loader_next(l, batch)) return;
    dpt_loader_start_epoch(l, l->epoch + 1);
    DPT_ASSERT(dpt_loader_next(l, batch), "a loader with no batch per epoch");
}
