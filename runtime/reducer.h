/* reducer.h: how a step's gradients become the same on every rank: one interface, one
 * implementation per file: reduce_ddp.c (DDP's buckets, AllReduced while backward runs) and
 * reduce_det.c ([train] deterministic: every shard's gradient summed in one fixed binary tree,
 * whatever the world size). The trainer calls it around each micro-batch and before the
 * optimizer, and knows neither. Internal to the library. */
#ifndef DPT_REDUCER_H
#define DPT_REDUCER_H

#include "dpt.h"
#include "comm.h"

/* What the step's reduction took (the progress line and the metrics). */
typedef struct dpt_reducer_stats {
    double comm_s;    /* in collectives */
    double hidden_s;  /* of which behind backward */
    double exposed_s; /* the step waited for them after backward's last gradient */
    int64_t bytes;    /* the payload reduced (16 or 32 bits a value) */
    double bus_factor; /* bytes each rank sends per payload byte in a ring: 2(N-1)/N (nccl-tests' busbw) */
    int nbuckets;      /* with bucket_s: each bucket's collective this step, NULL where unknown */
    const double *bucket_s;
    int64_t grad_bytes; /* the most gradient storage held at once in the step (0: the whole model's) */
} dpt_reducer_stats;

/* What the automatic settings chose (0: not chosen). */
typedef struct dpt_reducer_plan {
    double bucket_mb; /* [distributed] bucket_mb = auto */
    int compression;  /* [distributed] grad_compression = auto: 1 none, 2 bf16 */
} dpt_reducer_plan;

typedef struct dpt_reducer dpt_reducer;
typedef struct dpt_reducer_ops {
    const char *name;
    /* Before micro-batch `micro` of optimizer step `step` (last: the step's last). */
    void (*micro_begin)(dpt_reducer *r, int64_t step, int micro, bool last);
    /* After its backward. */
    void (*micro_end)(dpt_reducer *r);
    /* Before the optimizer: every rank's gradients hold the step's average. */
    void (*finish)(dpt_reducer *r, dpt_reducer_stats *stats);
    /* After the optimizer step, its wall time (optional): [distributed] bucket_mb = auto and
     * grad_compression = auto measure their candidates with it; true at a step where the ranks
     * decided something, in plan (what is still open left 0), with lines for the log in note. */
    bool (*step_end)(dpt_reducer *r, double step_s, dpt_reducer_plan *plan, char *note, size_t cap);
    /* Whether such a plan is still being measured (optional; NULL: never): the same on every
     * rank. zero_overlap = auto waits for it, so that neither's candidates move with the other's. */
    bool (*measuring)(const dpt_reducer *r);
    /* A resumed run's plan (what a checkpoint recorded): adopted, not measured again (optional). */
    void (*adopt)(dpt_reducer *r, const dpt_reducer_plan *plan);
    /* The header's line about it ("ddp ... | 2 buckets (bucket_mb 25) ..."), or "". */
    void (*describe)(const dpt_reducer *r, char *buf, size_t cap);
    /* [distributed] zero = 2: where parameter p's gradient is reduce-scattered (its segment, its
     * first element there, the segment's length: the ranks' ranges cut each segment, whatever
     * buckets carry it); NULL: the reducer does not scatter. */
    void (*place)(const dpt_reducer *r, int p, int *segment, int64_t *offset, int64_t *segment_numel);
    /* zero = 2 with the gradients kept by ranges: per parameter, where this rank's first reduced
     * element is after finish (NULL where none); NULL (or no op): in the parameters' .grad. */
    float *const *(*grad_shards)(const dpt_reducer *r);
    void (*free)(dpt_reducer *r);
} dpt_reducer_ops;

struct dpt_reducer {
    const dpt_reducer_ops *ops;
    void *impl;
};

/* reduce_ddp.c: DistributedDataParallel over comm (which the reducer does not own). */
dpt_reducer *dpt_reducer_ddp_new(dpt_ctx *ctx, dpt_model *model, dpt_comm *comm, const dpt_ddp_options *opt,
                                 dpt_timeline *timeline, dpt_error *err);

/* reduce_det.c: [train] deterministic. Each rank runs per_rank shards of a step whose global
 * batch has `shards` of them; the shards' gradients (and, through the batch-norm statistics
 * hook, their ghost batch-norm statistics) go into a binary tree of fixed shape, summed across
 * ranks by recursive doubling over host_comm (NULL alone); each shard's dropout draws from a
 * stream seeded by (seed, step, shard). */
dpt_reducer *dpt_reducer_det_new(dpt_ctx *ctx, dpt_model *model, dpt_comm *host_comm, int rank, int world,
                                 int per_rank, int64_t shards, uint64_t seed);

static inline void dpt_reducer_free(dpt_reducer *r)
{
    if (r) r->ops->free(r);
}

#endif
