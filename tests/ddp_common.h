/* ddp_common.h: a small deterministic training run shared by the multi-rank (mpi_ddp.c) and
 * DataParallel (test_dp.c) tests, so both compare against the same single-process reference. */
#ifndef DPT_DDP_COMMON_H
#define DPT_DDP_COMMON_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt.h"
#include "runtime/half.h"
#include "runtime/comm.h"
#include "runtime/tensor.h"

#define DDP_N 600 /* samples: not a multiple of ranks x batch */
#define DDP_CLASSES 5

/* A synthetic 1x4x5 image set whose label depends on the pixels (so the model can learn). */
static inline dpt_dataset *ddp_dataset(void)
{
    dpt_dataset *ds = calloc(1, sizeof *ds);
    ds->n = DDP_N, ds->c = 1, ds->h = 4, ds->w = 5, ds->num_classes = DDP_CLASSES;
    ds->images = malloc(DDP_N * 20);
    ds->labels = malloc(DDP_N * sizeof *ds->labels);
    uint64_t x = 12345;
    for (int i = 0; i < DDP_N; i++) {
        int sum = 0;
        for (int j = 0; j < 20; j++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            ds->images[i * 20 + j] = (uint8_t)(x >> 56);
            sum += (j % 3 == 0) ? ds->images[i * 20 + j] : 0;
        }
        ds->labels[i] = (sum / 97) % DDP_CLASSES;
    }
    return ds;
}

typedef struct ddp_run {
    int64_t batch; /* per rank */
    int accum;
    double bucket_mb;
    bool overlap;
    bool find_unused;
    int steps;
    const char *optim; /* "sgd" or "adamw" */
    bool drop_last;
    const char *model_sets[6]; /* extra "model.key=value" settings (default: the MLP) */
    bool cuda;                 /* rank r trains on cuda:r, gradients over NCCL */
    dpt_grad_compression compression;
} ddp_run;

typedef struct ddp_result {
    float *params; /* all parameters, flat, creation order */
    int64_t n;
    int64_t reduce_counts[16];
    int nparams, nbuckets;
    int64_t nbuffers_scalars;
    float buffers[256];
    double last_loss;
    bool skipped; /* NCCL could not start (a build without it): the caller skips */
    char why[1600];
} ddp_result;

/* Train `run.steps` optimizer steps on rank `rank` of `comm` (NULL: alone). */
static inline ddp_result ddp_train(const ddp_run *run, dpt_comm *comm, const dpt_dataset *ds)
{
    int rank = dpt_comm_rank(comm), size = dpt_comm_size(comm);
    dpt_error err;
    dpt_config *cfg = dpt_config_defaults();
    char set[96];
    dpt_config_set(cfg, "model.hidden=16,12", &err);
    snprintf(set, sizeof set, "optim.name=%s", run->optim);
    dpt_config_set(cfg, set, &err);
    dpt_config_set(cfg, "optim.lr=0.05", &err);
    dpt_config_set(cfg, "optim.weight_decay=0.01", &err);
    for (int i = 0; i < 6 && run->model_sets[i]; i++)
        if (!dpt_config_set(cfg, run->model_sets[i], &err)) {
            fprintf(stderr, "%s\n", err.msg);
            exit(1);
        }
    dpt_ctx_options co = {.device = {run->cuda ? DPT_DEVICE_CUDA : DPT_DEVICE_CPU, run->cuda ? rank : 0},
                          .threads = 1,
                          .seed = 99};
    dpt_ctx *ctx = dpt_ctx_new(&co, &err);
    if (!ctx) {
        fprintf(stderr, "rank %d: %s\n", rank, err.msg);
        exit(1);
    }
    dpt_comm *nccl = NULL;
    if (run->cuda && comm) {
        nccl = dpt_comm_nccl_new(ctx, comm, &err);
        if (!nccl) { /* no NCCL here: a reason to skip, not to end the test binary */
            ddp_result none = {.skipped = true};
            snprintf(none.why, sizeof none.why, "rank %d: %s", rank, err.msg);
            dpt_ctx_free(ctx);
            dpt_config_free(cfg);
            return none;
        }
        comm = nccl;
    }
    dpt_ctx_set_comm(ctx, comm); /* SyncBatchNorm */
    dpt_model *model = dpt_model_build(ctx, cfg, 1, 4, 5, DDP_CLASSES, &err);
    if (!model) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    /* Give each rank different initial parameters: DDP must broadcast rank 0's. */
    if (comm && rank > 0) dpt_init_uniform(ctx, dpt_model_param_at(model, 0), 0.5f);
    dpt_optim *optim = dpt_optim_build(model, cfg, &err);
    dpt_loader_options lo = {.batch = run->batch,
                             .shuffle = true,
                             .drop_last = run->drop_last,
                             .seed = 3,
                             .rank = rank,
                             .world_size = size,
                             .mean = 0.5f,
                             .std = 0.25f};
    dpt_loader *loader = dpt_loader_new(ctx, ds, &lo);
    dpt_ddp *ddp = NULL;
    if (comm) {
        dpt_ddp_options o = {.bucket_mb = run->bucket_mb,
                             .overlap = run->overlap,
                             .find_unused = run->find_unused,
                             .timeout_s = 60,
                             .dataset_len = ds->n,
                             .compression = run->compression};
        ddp = dpt_ddp_new(ctx, model, comm, &o, &err);
        if (!ddp) {
            fprintf(stderr, "rank %d: %s\n", rank, err.msg);
            exit(1);
        }
    }
    ddp_result res = {0};
    dpt_loader_start_epoch(loader, 0);
    for (int s = 0; s < run->steps; s++) {
        for (int m = 0; m < run->accum; m++) {
            dpt_batch b;
            dpt_loader_next_cycle(loader, &b);
            if (ddp) dpt_ddp_set_sync(ddp, m == run->accum - 1);
            dpt_tensor *loss = dpt_cross_entropy(ctx, dpt_model_forward(model, ctx, b.x), b.labels, 0.0f);
            res.last_loss = dpt_tensor_item(loss);
            dpt_backward(ctx, run->accum > 1 ? dpt_scale(ctx, loss, 1.0f / (float)run->accum) : loss);
            dpt_tape_clear(ctx);
        }
        if (ddp) dpt_ddp_finish(ddp);
        dpt_optim_step(ctx, optim);
        dpt_model_zero_grad(model);
    }
    /* buffers (BN running statistics) are part of the result too */
    for (int i = 0; i < dpt_model_num_buffers(model); i++)
        res.nbuffers_scalars += dpt_model_buffer_at(model, i)->numel;
    res.nparams = dpt_model_num_params(model);
    res.n = dpt_model_param_count(model);
    res.params = malloc((size_t)res.n * sizeof(float));
    int64_t off = 0;
    for (int i = 0; i < res.nparams; i++) {
        dpt_tensor *p = dpt_model_param_at(model, i);
        dpt_tensor_copy_to_host(p, res.params + off);
        off += p->numel;
        if (ddp && i < 16) res.reduce_counts[i] = dpt_ddp_reduce_count(ddp, i);
    }
    if (ddp) res.nbuckets = dpt_ddp_num_buckets(ddp);
    for (int i = 0, boff = 0; i < dpt_model_num_buffers(model) && boff < 256; i++) {
        dpt_tensor *b = dpt_model_buffer_at(model, i);
        if (boff + b->numel <= 256) dpt_tensor_copy_to_host(b, res.buffers + boff);
        boff += (int)b->numel;
    }
    dpt_ddp_free(ddp);
    dpt_loader_free(loader);
    dpt_optim_free(optim);
    dpt_model_free(model);
    if (nccl) nccl->ops->free(nccl);
    dpt_ctx_free(ctx);
    dpt_config_free(cfg);
    return res;
}

/* DataParallel tests: every replica thread trains the same run and keeps its result. */
typedef struct ddp_replica_job {
    const dpt_dataset *ds;
    ddp_run run;
    ddp_result results[3];
} ddp_replica_job;

static inline void ddp_replica_main(int rank, dpt_comm *comm, void *user)
{
    ddp_replica_job *job = user;
    job->results[rank] = ddp_train(&job->run, comm, job->ds);
}

/* max |a - b| / max |b| */
/* [distributed] grad_compression's collective: rank r's value i (any rank can compute any
 * rank's), magnitudes over 7 decades and both signs. */
static inline float h16_value(int r, int64_t i)
{
    return (float)(sin(0.37 * (double)i + 1.3 * r) * pow(10.0, (double)(i % 7) - 3.0));
}

/* The 16-bit AllReduce of h16_value over `comm`, averaged in fp32: the largest error against
 * the exact (double) average, as a fraction of the bound ranks x u x mean |g_r| (u = 2^-8 for
 * bf16, 2^-11 for fp16); *differs: whether any value differs from the exact average at all. */
static inline double h16_bound_ratio(dpt_comm *comm, bool bf16, int64_t n, bool *differs)
{
    int rank = dpt_comm_rank(comm), size = dpt_comm_size(comm);
    uint16_t *w = malloc((size_t)n * sizeof *w);
    for (int64_t i = 0; i < n; i++)
        w[i] = dpt_h16_from_f32(h16_value(rank, i), bf16);
    dpt_comm_allreduce_h16(comm, w, n, bf16, "test: 16-bit allreduce");
    double u = bf16 ? 1.0 / 256 : 1.0 / 2048, worst = 0;
    *differs = false;
    for (int64_t i = 0; i < n; i++) {
        double exact = 0, mag = 0;
        for (int r = 0; r < size; r++)
            exact += h16_value(r, i), mag += fabs(h16_value(r, i));
        float got = dpt_f32_from_h16(w[i], bf16) / (float)size;
        double err = fabs((double)got - exact / size), bound = size * u * (mag / size) * 1.01 + 1e-30;
        if (err / bound > worst) worst = err / bound;
        if ((double)got != exact / size) *differs = true;
    }
    free(w);
    return worst;
}

static inline double ddp_rel_diff(const ddp_result *a, const ddp_result *b)
{
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < a->n; i++) {
        double d = a->params[i] - b->params[i];
        if (d < 0) d = -d;
        double m = b->params[i] < 0 ? -b->params[i] : b->params[i];
        if (d > num) num = d;
        if (m > den) den = m;
    }
    return den > 0 ? num / den : num;
}

#endif
