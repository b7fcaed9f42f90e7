/* reduce_ddp.c: the reducer of DistributedDataParallel (ddp.c): no_sync while a step
 * accumulates micro-batches, then the buckets' AllReduces, overlapped with backward. */
#include <stdio.h>
#include <stdlib.h>

#include "error.h"
#include "reducer.h"

typedef struct ddp_reducer {
    dpt_ddp *ddp;
    dpt_comm *comm;
    dpt_ddp_options opt;
    bool data_parallel_threads; /* replicas of one process (the header says so) */
} ddp_reducer;

static void ddp_micro_begin(dpt_reducer *r, int64_t step, int micro, bool last)
{
    (void)step, (void)micro;
    dpt_ddp_set_sync(((ddp_reducer *)r->impl)->ddp, last); /* no_sync while accumulating */
}

static void ddp_micro_end(dpt_reducer *r)
{
    (void)r;
}

static void ddp_finish(dpt_reducer *r, dpt_reducer_stats *stats)
{
    ddp_reducer *d = r->impl;
    dpt_ddp_finish(d->ddp); /* the gradients now hold the average over ranks */
    dpt_ddp_stats st = dpt_ddp_last_stats(d->ddp);
    int n = d->comm->size;
    *stats = (dpt_reducer_stats){.comm_s = st.comm_s,
                                 .hidden_s = st.hidden_s,
                                 .exposed_s = st.wait_s,
                                 .bytes = st.bytes,
                                 .bus_factor = 2.0 * (n - 1) / n,
                                 .nbuckets = st.buckets,
                                 .bucket_s = dpt_ddp_bucket_times(d->ddp)};
}

static void ddp_describe(const dpt_reducer *r, char *buf, size_t cap)
{
    const ddp_reducer *d = r->impl;
    snprintf(buf, cap, "%d buckets of <= %g MiB | overlap %s | comm %s%s", dpt_ddp_num_buckets(d->ddp),
             d->opt.bucket_mb, d->opt.overlap ? "on" : "off", d->comm->ops->name,
             d->opt.compression == DPT_GRAD_COMPRESSION_BF16   ? ", gradients as bf16"
             : d->opt.compression == DPT_GRAD_COMPRESSION_FP16 ? ", gradients as fp16"
                                                               : "");
}

static void ddp_free(dpt_reducer *r)
{
    ddp_reducer *d = r->impl;
    dpt_ddp_free(d->ddp);
    free(d);
    free(r);
}

static const dpt_reducer_ops ddp_ops = {.name = "ddp",
                                        .micro_begin = ddp_micro_begin,
                                        .micro_end = ddp_micro_end,
                                        .finish = ddp_finish,
                                        .describe = ddp_describe,
                                        .free = ddp_free};

dpt_reducer *dpt_reducer_ddp_new(dpt_ctx *ctx, dpt_model *model, dpt_comm *comm, const dpt_ddp_options *opt,
                                 dpt_timeline *timeline, dpt_error *err)
{
    dpt_ddp *ddp = dpt_ddp_new(ctx, model, comm, opt, err);
    if (!ddp) return NULL;
    dpt_ddp_set_timeline(ddp, timeline);
    dpt_reducer *r = calloc(1, sizeof *r);
    ddp_reducer *d = calloc(1, sizeof *d);
    if (!r || !d) dpt_fatal("out of host memory for a reducer");
    *d = (ddp_reducer){.ddp = ddp, .comm = comm, .opt = *opt};
    *r = (dpt_reducer){.ops = &ddp_ops, .impl = d};
    return r;
}
