/* reduce_ddp.c: the reducer of DistributedDataParallel (ddp.c): no_sync while a step
 * accumulates micro-batches, then the buckets' AllReduces, overlapped with backward. */
#include <stdio.h>
#include <stdlib.h>

#include "error.h"
#include "reducer.h"

/* [distributed] bucket_mb = auto: the candidate capacities (those giving the same bucket count
 * as a smaller one are left out: the same plan), each tried VISITS times in turn for 1 + MEASURE
 * steps (the first after a re-plan not counted), from the second step of the run on. Then the
 * ranks add up their medians (one small AllReduce: every rank takes the same decision) and keep
 * the fastest. Turn by turn, so the machine's drift hits every candidate alike. */
#define TUNE_MAX 12
#define TUNE_VISITS 2
#define TUNE_MEASURE 2
static const double tune_sizes[] = {0.25, 0.5, 1, 2, 4, 8, 16, 25, 32, 64, 128, 256};

typedef struct tuner {
    bool active;
    int n, cur, visit, steps_on; /* candidates; the one in use; its visit; steps on it this visit */
    int64_t steps;               /* steps seen */
    double mb[TUNE_MAX];
    int buckets[TUNE_MAX];
    double times[TUNE_MAX][TUNE_VISITS * TUNE_MEASURE];
    int count[TUNE_MAX];
} tuner;

typedef struct ddp_reducer {
    dpt_ddp *ddp;
    dpt_comm *comm;
    dpt_ddp_options opt;
    bool data_parallel_threads; /* replicas of one process (the header says so) */
    tuner tune;
} ddp_reducer;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void tune_start(ddp_reducer *d)
{
    tuner *t = &d->tune;
    *t = (tuner){0};
    for (size_t i = 0; i < sizeof tune_sizes / sizeof tune_sizes[0] && t->n < TUNE_MAX; i++) {
        int count = dpt_ddp_plan_count(d->ddp, tune_sizes[i]);
        if (t->n && count == t->buckets[t->n - 1]) continue;
        t->mb[t->n] = tune_sizes[i];
        t->buckets[t->n++] = count;
        if (count == 1) break; /* one bucket: larger sizes are the same plan */
    }
    t->active = t->n > 1;
    if (t->n == 1) dpt_ddp_replan(d->ddp, t->mb[0]);
}

static double ddp_step_end(dpt_reducer *r, double step_s, char *note, size_t cap)
{
    ddp_reducer *d = r->impl;
    tuner *t = &d->tune;
    note[0] = '\0';
    if (!t->active) return 0.0;
    if (t->steps++ == 0) { /* the run's first step (allocations, oneDNN's primitives): not a measurement */
        dpt_ddp_replan(d->ddp, t->mb[0]);
        return 0.0;
    }
    if (t->steps_on++ > 0) t->times[t->cur][t->count[t->cur]++] = step_s;
    if (t->steps_on <= TUNE_MEASURE) return 0.0;
    t->steps_on = 0;
    if (++t->cur == t->n) t->cur = 0, t->visit++;
    if (t->visit < TUNE_VISITS) {
        dpt_ddp_replan(d->ddp, t->mb[t->cur]);
        return 0.0;
    }
    /* every rank the same: the sum over ranks of each candidate's median */
    double score[TUNE_MAX];
    for (int i = 0; i < t->n; i++)
        score[i] = median(t->times[i], t->count[i]);
    if (d->comm->size > 1) dpt_comm_allreduce_f64(d->comm, score, t->n, "bucket_mb = auto: the measurements");
    int best = 0;
    for (int i = 1; i < t->n; i++)
        if (score[i] < score[best]) best = i;
    dpt_ddp_replan(d->ddp, t->mb[best]);
    t->active = false;
    size_t used = (size_t)snprintf(note, cap, "bucket_mb = auto: %g MiB (%d bucket%s) after %lld steps; step ms by "
                                              "size (median, mean over ranks):",
                                   t->mb[best], t->buckets[best], t->buckets[best] == 1 ? "" : "s",
                                   (long long)t->steps);
    for (int i = 0; i < t->n && used < cap; i++)
        used += (size_t)snprintf(note + used, cap - used, " %g:%.2f", t->mb[i], 1e3 * score[i] / d->comm->size);
    return t->mb[best];
}

static void ddp_adopt(dpt_reducer *r, double bucket_mb)
{
    ddp_reducer *d = r->impl;
    d->tune.active = false;
    dpt_ddp_replan(d->ddp, bucket_mb);
}

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
    char size[64];
    if (d->tune.active)
        snprintf(size, sizeof size, "buckets: bucket_mb = auto, %d sizes to try", d->tune.n);
    else
        snprintf(size, sizeof size, "%d buckets of <= %g MiB", dpt_ddp_num_buckets(d->ddp), dpt_ddp_bucket_mb(d->ddp));
    snprintf(buf, cap, "%s | overlap %s | comm %s%s", size, d->opt.overlap ? "on" : "off", d->comm->ops->name,
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
                                        .step_end = ddp_step_end,
                                        .adopt = ddp_adopt,
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
    if (opt->bucket_auto) tune_start(d);
    *r = (dpt_reducer){.ops = &ddp_ops, .impl = d};
    return r;
}
