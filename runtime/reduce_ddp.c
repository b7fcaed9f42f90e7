/* reduce_ddp.c: the reducer of DistributedDataParallel (ddp.c): no_sync while a step
 * accumulates micro-batches, then the buckets' AllReduces, overlapped with backward. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "log.h"
#include "reducer.h"

/* The plan measured over the first steps, where the config says auto. A trial runs its
 * candidates turn by turn (the machine's drift hits every one alike): each visited TUNE_VISITS
 * times for 1 + TUNE_MEASURE steps (the first after a change not counted); then the ranks add
 * up their medians (one small AllReduce: every rank takes the same decision).
 *   [distributed] bucket_mb = auto: the capacities that make different plans (a size whose
 *   buckets start where a smaller one's do is left out), from the run's second step; the
 *   fastest is kept.
 *   [distributed] grad_compression = auto: then, on the plan in use, the share of the step the
 *   AllReduces were exposed (waited for after backward) on the rank that waited least (the
 *   others' wait adds imbalance, which bf16 does not shorten): under TUNE_EXPOSED the gradients stay
 *   fp32 and no step ever ran in bf16 (the weights are none's bit for bit); above it, fp32 and
 *   bf16 on the wire are tried in turn and bf16 is kept only when the step is TUNE_GAIN faster. */
#define TUNE_MAX 12
#define TUNE_VISITS 3
#define TUNE_MEASURE 2
#define TUNE_EXPOSED 0.05
#define TUNE_GAIN 0.02
static const double tune_sizes[] = {0.25, 0.5, 1, 2, 4, 8, 16, 25, 32, 64, 128, 256};

enum { PHASE_DONE, PHASE_BUCKETS, PHASE_EXPOSED, PHASE_WIRE };

typedef struct tuner {
    int phase;
    bool wire_auto;              /* grad_compression = auto still to decide */
    int n, cur, visit, steps_on; /* candidates; the one in use; its visit; steps on it this visit */
    int64_t steps;               /* steps seen */
    double mb[TUNE_MAX];
    bool h16[TUNE_MAX];
    int buckets[TUNE_MAX];
    double times[TUNE_MAX][TUNE_VISITS * TUNE_MEASURE], exposed[TUNE_MAX][TUNE_VISITS * TUNE_MEASURE];
    int count[TUNE_MAX];
} tuner;

typedef struct ddp_reducer {
    dpt_ddp *ddp;
    dpt_comm *comm;
    dpt_ddp_options opt;
    bool data_parallel_threads; /* replicas of one process (the header says so) */
    double last_exposed;        /* the last step's wait after backward */
    tuner tune;
} ddp_reducer;

static double median(const double *v, int n)
{
    double s[TUNE_VISITS * TUNE_MEASURE];
    memcpy(s, v, (size_t)n * sizeof *s);
    return dpt_median(s, n); /* of a copy: the measurements are kept */
}

/* Candidate i in use from the next step. 16 bits on the wire are the configured format where
 * grad_compression names one (bf16 or fp16: the sizes are tried with it), bf16 where auto tries. */
static void apply(ddp_reducer *d, int i)
{
    dpt_ddp_replan(d->ddp, d->tune.mb[i]);
    dpt_grad_compression wire = d->opt.compression != DPT_GRAD_COMPRESSION_NONE ? d->opt.compression
                                                                             : DPT_GRAD_COMPRESSION_BF16;
    dpt_ddp_set_compression(d->ddp, d->tune.h16[i] ? wire : DPT_GRAD_COMPRESSION_NONE);
}

/* A new trial over the candidates already in mb/h16 (n of them), from the next step. */
static void trial(tuner *t, int phase, int n)
{
    t->phase = phase, t->n = n, t->cur = t->visit = t->steps_on = 0;
    memset(t->count, 0, sizeof t->count);
}

static void tune_wire_start(ddp_reducer *d, double mb)
{
    tuner *t = &d->tune;
    t->mb[0] = mb, t->h16[0] = false;
    trial(t, PHASE_EXPOSED, 1);
    apply(d, 0);
}

static void tune_start(ddp_reducer *d)
{
    tuner *t = &d->tune;
    *t = (tuner){.wire_auto = d->opt.compression_auto};
    int n = 0;
    uint64_t seen[TUNE_MAX];
    if (d->opt.bucket_auto)
        for (size_t i = 0; i < sizeof tune_sizes / sizeof tune_sizes[0] && n < TUNE_MAX; i++) {
            uint64_t sig;
            int count = dpt_ddp_plan_count(d->ddp, tune_sizes[i], &sig);
            bool same = false;
            for (int j = 0; j < n; j++)
                same |= seen[j] == sig;
            if (same) continue; /* another size's plan */
            /* a fixed grad_compression stays on while the sizes are tried, and after */
            t->mb[n] = tune_sizes[i], t->h16[n] = !t->wire_auto && d->opt.compression != DPT_GRAD_COMPRESSION_NONE;
            seen[n] = sig;
            t->buckets[n++] = count;
            if (count == 1) break; /* one bucket: larger sizes are the same plan */
        }
    if (n > 1) trial(t, PHASE_BUCKETS, n);
    else if (n == 1) dpt_ddp_replan(d->ddp, t->mb[0]);
    if (t->phase == PHASE_DONE && t->wire_auto) t->phase = PHASE_EXPOSED; /* set up after the first step */
}

/* Record a step on the current candidate; true when the trial has all its measurements. */
static bool trial_step(ddp_reducer *d, double step_s)
{
    tuner *t = &d->tune;
    if (t->steps_on++ > 0) {
        int k = t->count[t->cur]++;
        t->times[t->cur][k] = step_s, t->exposed[t->cur][k] = d->last_exposed;
    }
    if (t->steps_on <= TUNE_MEASURE) return false;
    t->steps_on = 0;
    if (++t->cur == t->n) t->cur = 0, t->visit++;
    if (t->visit < TUNE_VISITS) {
        if (t->n > 1) apply(d, t->cur);
        return false;
    }
    return true;
}

/* Each candidate's median step time, the mean over the ranks, and its exposed share, the least
 * over the ranks: the same on every rank. A rank that finishes backward early also waits for
 * the others (imbalance, a noisy neighbour), which no format on the wire shortens; the rank that
 * finishes last waits for the communication alone, so its share is what bf16 could save. */
static void scores(ddp_reducer *d, double *time, double *share)
{
    tuner *t = &d->tune;
    double v[2 * TUNE_MAX];
    for (int i = 0; i < t->n; i++) {
        v[i] = median(t->times[i], t->count[i]);
        v[t->n + i] = median(t->exposed[i], t->count[i]) / v[i];
    }
    int size = d->comm->size;
    double *gathered = NULL;
    const double *all = v; /* every rank's v, one after another (one rank: its own) */
    if (size > 1) {
        gathered = malloc((size_t)size * 2 * (size_t)t->n * sizeof *gathered);
        if (!gathered) dpt_fatal("automatic plan: out of memory for %d ranks' measurements", size);
        dpt_comm_allgather(d->comm, v, gathered, 2 * (size_t)t->n * sizeof *v, "automatic plan: the measurements");
        all = gathered;
    }
    for (int i = 0; i < t->n; i++) {
        time[i] = 0, share[i] = all[t->n + i];
        for (int r = 0; r < size; r++) {
            const double *m = all + (size_t)r * 2 * (size_t)t->n;
            time[i] += m[i] / size;
            if (m[t->n + i] < share[i]) share[i] = m[t->n + i];
        }
    }
    free(gathered);
}

static bool ddp_step_end(dpt_reducer *r, double step_s, dpt_reducer_plan *plan, char *note, size_t cap)
{
    ddp_reducer *d = r->impl;
    tuner *t = &d->tune;
    note[0] = '\0';
    if (t->phase == PHASE_DONE) return false;
    if (t->steps++ == 0) { /* the run's first step (allocations, oneDNN's primitives): not a measurement */
        if (t->phase == PHASE_BUCKETS) apply(d, 0);
        else tune_wire_start(d, dpt_ddp_bucket_mb(d->ddp));
        return false;
    }
    if (!trial_step(d, step_s)) return false;
    double time[TUNE_MAX], share[TUNE_MAX];
    scores(d, time, share);
    int best = 0;
    for (int i = 1; i < t->n; i++)
        if (time[i] < time[best]) best = i;
    size_t used = 0;
    *plan = (dpt_reducer_plan){0};
    if (t->phase == PHASE_BUCKETS) {
        plan->bucket_mb = t->mb[best];
        used = (size_t)snprintf(note, cap, "bucket_mb = auto: %g MiB (%d bucket%s) after %lld steps; step ms by size "
                                           "(median, mean over ranks):",
                                t->mb[best], t->buckets[best], t->buckets[best] == 1 ? "" : "s", (long long)t->steps);
        for (int i = 0; i < t->n && used < cap; i++)
            used += (size_t)snprintf(note + used, cap - used, " %g:%.2f", t->mb[i], 1e3 * time[i]);
        if (!t->wire_auto) {
            apply(d, best);
            t->phase = PHASE_DONE;
            return true;
        }
        /* the chosen plan, fp32 on the wire: its exposed share decides whether bf16 is worth a try */
        t->mb[0] = t->mb[best], t->h16[0] = false, share[0] = share[best];
        apply(d, 0);
        if (used < cap) used += (size_t)snprintf(note + used, cap - used, "\n");
    }
    if (t->phase == PHASE_BUCKETS || t->phase == PHASE_EXPOSED) {
        if (share[0] < TUNE_EXPOSED) {
            plan->compression = 1;
            t->phase = PHASE_DONE;
            if (used < cap)
                snprintf(note + used, cap - used, "grad_compression = auto: none (the %s exposed %.1f%% of "
                                                  "the step, under %.0f%%)",
                         d->opt.reduce_scatter ? "reduce-scatters" : "AllReduces", 100 * share[0], 100 * TUNE_EXPOSED);
            return true;
        }
        t->mb[1] = t->mb[0], t->h16[1] = true;
        trial(t, PHASE_WIRE, 2);
        if (used < cap)
            snprintf(note + used, cap - used, "grad_compression = auto: the %s exposed %.1f%% of the step: "
                                              "trying bf16",
                     d->opt.reduce_scatter ? "reduce-scatters" : "AllReduces", 100 * share[0]);
        return plan->bucket_mb > 0 || *note;
    }
    /* PHASE_WIRE: fp32 (0) against bf16 (1) on the wire */
    bool bf16 = time[1] < (1 - TUNE_GAIN) * time[0];
    t->h16[0] = bf16;
    apply(d, 0);
    t->phase = PHASE_DONE;
    plan->compression = bf16 ? 2 : 1;
    snprintf(note, cap, "grad_compression = auto: %s (step %.2f ms with fp32 gradients on the wire, %.2f with bf16; "
                        "exposed %.1f%% and %.1f%%)",
             bf16 ? "bf16" : "none", 1e3 * time[0], 1e3 * time[1], 100 * share[0], 100 * share[1]);
    return true;
}

static bool ddp_measuring(const dpt_reducer *r)
{
    return ((const ddp_reducer *)r->impl)->tune.phase != PHASE_DONE;
}

static void ddp_adopt(dpt_reducer *r, const dpt_reducer_plan *plan)
{
    ddp_reducer *d = r->impl;
    tuner *t = &d->tune;
    if (plan->bucket_mb > 0) dpt_ddp_replan(d->ddp, plan->bucket_mb);
    if (plan->compression)
        dpt_ddp_set_compression(d->ddp, plan->compression == 2 ? DPT_GRAD_COMPRESSION_BF16 : DPT_GRAD_COMPRESSION_NONE);
    bool buckets_left = d->opt.bucket_auto && plan->bucket_mb <= 0;
    bool wire_left = d->opt.compression_auto && !plan->compression;
    if (!buckets_left && !wire_left) t->phase = PHASE_DONE;
    else if (!buckets_left) t->phase = PHASE_EXPOSED, t->steps = 0; /* measure the wire from the resumed plan */
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
    d->last_exposed = st.wait_s;
    int n = d->comm->size;
    *stats = (dpt_reducer_stats){.comm_s = st.comm_s,
                                 .hidden_s = st.hidden_s,
                                 .exposed_s = st.wait_s,
                                 .bytes = st.bytes,
                                 /* a reduce-scatter is half a ring AllReduce */
                                 .bus_factor = (d->opt.reduce_scatter ? 1.0 : 2.0) * (n - 1) / n,
                                 .nbuckets = st.buckets,
                                 .bucket_s = dpt_ddp_bucket_times(d->ddp),
                                 .grad_bytes = st.grad_bytes};
}

static void ddp_describe(const dpt_reducer *r, char *buf, size_t cap)
{
    const ddp_reducer *d = r->impl;
    char size[64];
    if (d->tune.phase == PHASE_BUCKETS)
        snprintf(size, sizeof size, "buckets: bucket_mb = auto, %d sizes to try", d->tune.n);
    else
        snprintf(size, sizeof size, "%d bucket%s (bucket_mb %g)", dpt_ddp_num_buckets(d->ddp),
                 dpt_ddp_num_buckets(d->ddp) == 1 ? "" : "s", dpt_ddp_bucket_mb(d->ddp));
    snprintf(buf, cap, "%s | overlap %s | comm %s%s%s", size, d->opt.overlap ? "on" : "off", d->comm->ops->name,
             d->opt.reduce_scatter ? ", reduce-scatter (zero 2)" : "",
             d->opt.compression_auto                          ? ", grad_compression = auto"
             : d->opt.compression == DPT_GRAD_COMPRESSION_BF16 ? ", gradients as bf16"
             : d->opt.compression == DPT_GRAD_COMPRESSION_FP16 ? ", gradients as fp16"
                                                               : "");
}

static void ddp_place(const dpt_reducer *r, int p, int *segment, int64_t *offset, int64_t *segment_numel)
{
    dpt_ddp_param_segment(((const ddp_reducer *)r->impl)->ddp, p, segment, offset, segment_numel);
}

static float *const *ddp_grad_shards(const dpt_reducer *r)
{
    return dpt_ddp_grad_shards(((const ddp_reducer *)r->impl)->ddp);
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
                                        .measuring = ddp_measuring,
                                        .adopt = ddp_adopt,
                                        .describe = ddp_describe,
                                        .place = ddp_place,
                                        .grad_shards = ddp_grad_shards,
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
    if (opt->bucket_auto || opt->compression_auto) tune_start(d);
    *r = (dpt_reducer){.ops = &ddp_ops, .impl = d};
    return r;
}
