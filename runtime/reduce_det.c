/* reduce_det.c: the reducer of [train] deterministic mode: bit-identical weights on any
 * power-of-two world size. Each step is cut into shards (the micro-batches); each shard's
 * gradient, and its batch norms' statistics (ghost batch norm, through the batch-norm
 * statistics hook), go onto a stack whose equal levels combine like a binary counter, so a
 * rank's shards form one subtree of fixed shape; the ranks' subtrees then combine by recursive
 * doubling, giving every rank the sum of the one tree a single rank would build alone. Dropout
 * draws from each shard's own stream. The sums are on the host (a GPU's gradients too). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctx.h"
#include "error.h"
#include "log.h"
#include "reducer.h"
#include "rng.h"
#include "tensor.h"

typedef struct det_reducer {
    dpt_ctx *ctx;
    dpt_model *model;
    dpt_comm *host_comm; /* NULL alone */
    int rank, world, per_rank, micro;
    int64_t shards, step;
    uint64_t seed;
    int64_t nparams; /* gradient floats (all parameters, in order) */
    int64_t n;       /* ... and the ghost batch-norm statistics after them */
    float **stack;   /* levels 0..log2(per rank) */
    int *level, depth, nstack;
    float *gather; /* the partner's sum in an exchange round */
    /* this shard's ghost statistics, in the order its batch norms ran: mean[C], var[C] each */
    float *ghost;
    int64_t nghost, cap_ghost;
    dpt_batchnorm **layers;
    int nlayers, cap_layers;
} det_reducer;

/* The batch-norm statistics hook: this shard's statistics, kept in order. */
static void ghost_stats(dpt_batchnorm *layer, const double *mean, const double *var, int64_t c, void *user)
{
    det_reducer *d = user;
    if (d->nghost + 2 * c > d->cap_ghost) {
        d->cap_ghost = 2 * (d->nghost + 2 * c);
        d->ghost = realloc(d->ghost, (size_t)d->cap_ghost * sizeof *d->ghost);
    }
    if (d->nlayers == d->cap_layers) {
        d->cap_layers = d->cap_layers ? 2 * d->cap_layers : 16;
        d->layers = realloc(d->layers, (size_t)d->cap_layers * sizeof *d->layers);
    }
    if (!d->ghost || !d->layers) dpt_fatal("out of host memory for ghost batch norm");
    float *v = d->ghost + d->nghost;
    for (int64_t ch = 0; ch < c; ch++)
        v[ch] = (float)mean[ch], v[c + ch] = (float)var[ch];
    d->nghost += 2 * c;
    d->layers[d->nlayers++] = layer;
}

/* At the first shard: the sum's length (the gradients, then the ghost statistics, known once a
 * forward has run) and the buffers; every buffer must be a running statistic. */
static void det_alloc(det_reducer *d)
{
    if (dpt_model_num_buffers(d->model) != 2 * d->nlayers)
        dpt_abort_job("[train] deterministic: model %s keeps %d buffers, but its batch norms account for %d "
                      "(running mean and variance each): other buffers cannot be kept identical over world "
                      "sizes\nHINT: deterministic = false for this model",
                      dpt_model_name(d->model), dpt_model_num_buffers(d->model), 2 * d->nlayers);
    d->n = d->nparams + d->nghost;
    d->nstack = 1; /* log2(shards per rank) + 1 levels */
    for (int per = d->per_rank; per > 1; per /= 2)
        d->nstack++;
    d->depth = 0;
    d->stack = calloc((size_t)d->nstack, sizeof *d->stack);
    d->level = calloc((size_t)d->nstack, sizeof *d->level);
    if (!d->stack || !d->level) dpt_fatal("out of host memory");
    for (int i = 0; i < d->nstack; i++)
        if (!(d->stack[i] = malloc((size_t)d->n * sizeof(float)))) dpt_fatal("out of host memory");
    if (d->world > 1 && !(d->gather = malloc((size_t)d->n * sizeof(float))))
        dpt_fatal("out of host memory for the deterministic exchange (%lld floats)", (long long)d->n);
}

/* right into left, element by element (a + b is the same bits as b + a, so only the tree's
 * shape matters, and it is the same on every world size) */
static void det_add(float *left, const float *right, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        left[i] += right[i];
}

/* A shard starts: its own dropout stream and an empty list of ghost statistics. */
static void det_micro_begin(dpt_reducer *r, int64_t step, int micro, bool last)
{
    det_reducer *d = r->impl;
    (void)last;
    d->step = step, d->micro = micro;
    d->nghost = 0, d->nlayers = 0;
    int64_t shard = (int64_t)d->rank * d->per_rank + micro;
    uint64_t key[3] = {d->seed, (uint64_t)step, (uint64_t)shard};
    dpt_rng_seed(&d->ctx->rng, dpt_hash_bytes(DPT_HASH_SEED, key, sizeof key));
}

/* The shard's gradient and statistics onto the stack; equal levels combine, left (older) +
 * right (newer), as in a binary counter. */
static void det_micro_end(dpt_reducer *r)
{
    det_reducer *d = r->impl;
    if (!d->stack) det_alloc(d);
    DPT_ASSERT(d->nparams + d->nghost == d->n, "ghost statistics changed size between shards");
    float *top = d->stack[d->depth];
    int64_t off = 0;
    for (int i = 0; i < dpt_model_num_params(d->model); i++) {
        dpt_tensor *g = dpt_model_param_at(d->model, i)->grad;
        dpt_tensor_copy_to_host(g, top + off);
        off += dpt_tensor_numel(g);
    }
    if (d->nghost) memcpy(top + off, d->ghost, (size_t)d->nghost * sizeof(float)); /* (none: ghost may be NULL) */
    d->level[d->depth++] = 0;
    while (d->depth >= 2 && d->level[d->depth - 1] == d->level[d->depth - 2]) {
        det_add(d->stack[d->depth - 2], d->stack[d->depth - 1], d->n);
        d->level[d->depth - 2]++;
        d->depth--;
    }
    dpt_model_zero_grad(d->model); /* the next shard's gradient starts from zero */
}

/* The step's gradient: this rank's subtree (one sum: its shard count is a power of two), then
 * recursive doubling: in round j each rank swaps its sum with rank ^ 2^j and both add the two,
 * so after log2(world) rounds every rank holds the sum of one fixed binary tree over all
 * shards; divided by the shard count (a power of two: exact), into the grads; the ghost
 * statistics' average into the running statistics. */
static void det_finish(dpt_reducer *r, dpt_reducer_stats *stats)
{
    det_reducer *d = r->impl;
    memset(stats, 0, sizeof *stats);
    DPT_ASSERT(d->depth == 1, "deterministic stack depth %d after a step", d->depth);
    float *sum = d->stack[0];
    double t0 = dpt_now_s();
    for (int span = 1; span < d->world; span *= 2) {
        char what[64];
        snprintf(what, sizeof what, "deterministic gradient exchange with rank %d", d->rank ^ span);
        /* the host communicator (MPI, or DataParallel's threads): the sums are in host memory */
        dpt_comm_sendrecv(d->host_comm, sum, d->gather, (size_t)d->n * sizeof(float), d->rank ^ span, what);
        det_add(sum, d->gather, d->n);
        stats->bytes += d->n * (int64_t)sizeof(float);
    }
    stats->comm_s = dpt_now_s() - t0;
    float scale = 1.0f / (float)d->shards;
    int64_t off = 0;
    for (int64_t j = 0; j < d->nparams; j++)
        sum[j] *= scale;
    for (int i = 0; i < dpt_model_num_params(d->model); i++) {
        dpt_tensor *g = dpt_model_param_at(d->model, i)->grad;
        dpt_tensor_copy_from_host(g, sum + off);
        off += dpt_tensor_numel(g);
    }
    for (int64_t j = off; j < d->n; j++)
        sum[j] *= scale;
    for (int i = 0; i < d->nlayers; i++) {
        int64_t c = dpt_batchnorm_channels(d->layers[i]);
        dpt_batchnorm_apply_stats(d->layers[i], sum + off, sum + off + c);
        off += 2 * c;
    }
    d->depth = 0;
}

static void det_describe(const dpt_reducer *r, char *buf, size_t cap)
{
    const det_reducer *d = r->impl;
    snprintf(buf, cap, "deterministic: %lld shards a step, %d on each of %d %s, summed in one fixed fp32 tree after "
             "backward ([distributed] bucket_mb and overlap do not apply)",
             (long long)d->shards, d->per_rank, d->world, d->world == 1 ? "rank" : "ranks");
}

static void det_free(dpt_reducer *r)
{
    det_reducer *d = r->impl;
    dpt_set_bn_stats_hook(d->ctx, NULL, NULL);
    for (int i = 0; d->stack && i < d->nstack; i++)
        free(d->stack[i]);
    free(d->stack), free(d->level), free(d->gather), free(d->ghost), free(d->layers);
    free(d);
    free(r);
}

static const dpt_reducer_ops det_ops = {.name = "deterministic",
                                        .micro_begin = det_micro_begin,
                                        .micro_end = det_micro_end,
                                        .finish = det_finish,
                                        .describe = det_describe,
                                        .free = det_free};

dpt_reducer *dpt_reducer_det_new(dpt_ctx *ctx, dpt_model *model, dpt_comm *host_comm, int rank, int world,
                                 int per_rank, int64_t shards, uint64_t seed)
{
    dpt_reducer *r = calloc(1, sizeof *r);
    det_reducer *d = calloc(1, sizeof *d);
    if (!r || !d) dpt_fatal("out of host memory for a reducer");
    *d = (det_reducer){.ctx = ctx, .model = model, .host_comm = host_comm, .rank = rank, .world = world,
                       .per_rank = per_rank, .shards = shards, .seed = seed};
    for (int i = 0; i < dpt_model_num_params(model); i++)
        d->nparams += dpt_tensor_numel(dpt_model_param_at(model, i));
    dpt_set_bn_stats_hook(ctx, ghost_stats, d); /* batch norm: each shard's own statistics */
    *r = (dpt_reducer){.ops = &det_ops, .impl = d};
    return r;
}
