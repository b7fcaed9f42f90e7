/* mpi_bench_ddp.c: data-parallel benchmarks, run under `mpirun -np 2` by bench/run.sh.
 *  1. scaling: rank 0 alone (1 thread) vs 2 ranks x 1 thread with DDP, same per-rank batch;
 *     efficiency = (2-rank img/s / 1-rank img/s) / 2.
 *  2. overlap: step time with a communicator slowed to a fixed bandwidth (a latency per MiB), with
 *     overlap on and off; hidden = 1 - (T_on - T_base) / (T_off - T_base), where T_base is
 *     the step without the added latency: the share of communication time hidden by backward.
 *  3. collectives: a bucket's AllReduce (zero = 0 and 1) and reduce-scatter (zero = 2) of 1 to 24
 *     MiB as DDP's communication thread runs them, best of 10 (the algorithm: `./train --env`,
 *     or OMPI_MCA_coll_libnbc_iallreduce_algorithm / DPT_REDUCE_SCATTER=mpi to compare).
 * Prints a table and a JSON line. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt.h"
#include "data/data.h"
#include "runtime/comm.h"
#include "runtime/error.h"
#include "runtime/log.h"

typedef struct setup {
    const char *sets[3]; /* model settings */
    int64_t batch;
    int steps;
} setup;

static double time_steps_once(const setup *s, const dpt_dataset *ds, dpt_comm *comm, double bucket_mb,
                              bool overlap, double delay_ms, int *nbuckets)
{
    dpt_error err;
    dpt_config *cfg = dpt_config_defaults();
    for (int i = 0; i < 3 && s->sets[i]; i++)
        dpt_config_set(cfg, s->sets[i], &err);
    dpt_ctx_options co = {.device = {DPT_DEVICE_CPU, 0}, .threads = 1, .seed = 1};
    dpt_ctx *ctx = dpt_ctx_new(&co, &err);
    dpt_model *model = dpt_model_build(ctx, cfg, 1, 28, 28, 10, &err);
    dpt_optim *optim = dpt_optim_build(model, cfg, &err);
    dpt_loader_options lo = {.batch = s->batch,
                             .shuffle = true,
                             .drop_last = true,
                             .seed = 1,
                             .rank = dpt_comm_rank(comm),
                             .world_size = dpt_comm_size(comm),
                             .mean = 0.286f,
                             .std = 0.353f};
    dpt_loader *loader = dpt_loader_new(ctx, ds, &lo);
    dpt_ddp *ddp = NULL;
    if (comm) {
        dpt_ddp_options o = {
            .bucket_mb = bucket_mb, .overlap = overlap, .timeout_s = 300, .dataset_len = ds->n};
        ddp = dpt_ddp_new(ctx, model, comm, &o, &err);
        dpt_comm_set_delay(comm, delay_ms);
        *nbuckets = dpt_ddp_num_buckets(ddp);
    }
    int warmup = 5;
    double t0 = 0;
    for (int i = 0; i < warmup + s->steps; i++) {
        if (i == warmup) {
            dpt_comm_barrier(comm);
            t0 = dpt_now_s();
        }
        dpt_batch b;
        dpt_loader_next_cycle(loader, &b);
        dpt_tensor *loss = dpt_cross_entropy(ctx, dpt_model_forward(model, ctx, b.x), b.labels, 0.0f);
        dpt_backward(ctx, loss);
        if (ddp) dpt_ddp_finish(ddp);
        dpt_optim_step(ctx, optim);
        dpt_model_zero_grad(model);
        dpt_tape_clear(ctx);
    }
    double per_step = (dpt_now_s() - t0) / s->steps;
    if (comm) { /* the ranks agree on one number: their mean */
        dpt_comm_allreduce_f64(comm, &per_step, 1, "benchmark sums");
        per_step /= dpt_comm_size(comm);
    }
    dpt_comm_set_delay(comm, 0);
    dpt_ddp_free(ddp);
    dpt_loader_free(loader);
    dpt_optim_free(optim);
    dpt_model_free(model);
    dpt_ctx_free(ctx);
    dpt_config_free(cfg);
    return per_step;
}

/* Best of three runs (the machine is shared and small: the minimum is the repeatable number). */
static double time_steps(const setup *s, const dpt_dataset *ds, dpt_comm *comm, double bucket_mb,
                         bool overlap, double delay_ms, int *nbuckets)
{
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        double t = time_steps_once(s, ds, comm, bucket_mb, overlap, delay_ms, nbuckets);
        if (t < best) best = t;
    }
    return best;
}

int main(int argc, char **argv)
{
    dpt_world world;
    dpt_error err;
    if (!dpt_world_init(&world, &argc, &argv, &err) || world.size != 2) {
        fprintf(stderr, "run under mpirun -np 2\n");
        return 1;
    }
    dpt_comm *comm = dpt_world_comm(&world);
    dpt_config *cfg = dpt_config_defaults();
    dpt_dataset *train, *test;
    if (!dpt_data_open(cfg, &train, &test, &err)) dpt_abort_job("%s", err.msg);

    /* 1. scaling: the models of configs/fmnist_cnn.ini and configs/fmnist_mlp.ini */
    setup cnn = {{"model.name=cnn"}, 64, 40};
    setup mlp = {{"model.hidden=256,256"}, 64, 400};
    double c1 = 0, t1 = 0;
    int nb = 0, nb_cnn = 0;
    if (world.rank == 0) c1 = time_steps(&cnn, train, NULL, 25, true, 0, &nb_cnn);
    if (world.rank == 0) t1 = time_steps(&mlp, train, NULL, 25, true, 0, &nb);
    MPI_Barrier(MPI_COMM_WORLD);
    double c2 = time_steps(&cnn, train, comm, 25, true, 0, &nb_cnn);
    double t2 = time_steps(&mlp, train, comm, 25, true, 0, &nb);
    double cimg1 = cnn.batch / c1, cimg2 = 2 * cnn.batch / c2;
    double img1 = mlp.batch / t1, img2 = 2 * mlp.batch / t2;

    /* 2. overlap with a slowed communicator: a deep, wide MLP so that backward has layers to
     * hide the AllReduces behind; only the first layer's bucket (finished last) cannot be. */
    setup wide = {{"model.hidden=1024,1024,1024,1024,1024,1024"}, 512, 6};
    double delay = 1.0, bucket = 4.0;
    int nb_wide = 0;
    /* Interleaved rounds, best of each: slow drift of the machine hits all three alike. */
    double base = 1e30, on = 1e30, off = 1e30;
    for (int round = 0; round < 3; round++) {
        double t = time_steps_once(&wide, train, comm, bucket, true, 0, &nb_wide);
        base = t < base ? t : base;
        t = time_steps_once(&wide, train, comm, bucket, true, delay, &nb_wide);
        on = t < on ? t : on;
        t = time_steps_once(&wide, train, comm, bucket, false, delay, &nb_wide);
        off = t < off ? t : off;
    }
    double hidden = off > base ? 1.0 - (on - base) / (off - base) : 0.0;
    if (hidden > 1.0) hidden = 1.0; /* "on" measured faster than the base: noise */

    /* 3. collectives over the bucket sizes DDP uses */
    static const int sizes_mb[] = {1, 4, 16, 24};
    enum { NSIZES = sizeof sizes_mb / sizeof sizes_mb[0] };
    double ar_ms[NSIZES], rs_ms[NSIZES];
    for (int i = 0; i < NSIZES; i++) {
        int64_t n = (int64_t)sizes_mb[i] << 18, displs[3] = {0, n / 2, n};
        float *buf = calloc((size_t)n, sizeof *buf);
        if (!buf) dpt_abort_job("out of host memory");
        ar_ms[i] = rs_ms[i] = 1e30;
        for (int it = 0; it < 10; it++) {
            dpt_comm_barrier_named(comm, "bench");
            double t = dpt_now_s();
            dpt_comm_allreduce_f32(comm, buf, n, "bench AllReduce");
            t = 1e3 * (dpt_now_s() - t);
            ar_ms[i] = t < ar_ms[i] ? t : ar_ms[i];
            dpt_comm_barrier_named(comm, "bench");
            t = dpt_now_s();
            dpt_comm_reduce_scatter_f32(comm, buf, displs, "bench reduce-scatter");
            t = 1e3 * (dpt_now_s() - t);
            rs_ms[i] = t < rs_ms[i] ? t : rs_ms[i];
        }
        free(buf);
    }

    if (world.rank == 0) {
        printf("collectives, best of 10 (%s; reduce-scatter: %s)\n", world.allreduce_how,
               getenv("DPT_REDUCE_SCATTER") ? "Open MPI's" : "dptrain's direct exchange");
        for (int i = 0; i < NSIZES; i++)
            printf("  %2d MiB: AllReduce %7.2f ms  reduce-scatter %7.2f ms\n", sizes_mb[i], ar_ms[i], rs_ms[i]);
        printf("DDP benchmarks | backend cpu | comm mpi | 2 ranks x 1 thread (baseline 1 rank x 1 thread)\n");
        printf("%-44s %12s %12s\n", "case", "step ms", "img/s");
        printf("%-44s %12.3f %12.0f\n", "cnn (fmnist_cnn.ini) b64: 1 rank", 1e3 * c1, cimg1);
        char clabel[64];
        snprintf(clabel, sizeof clabel, "cnn b64: 2 ranks (DDP, %d buckets)", nb_cnn);
        printf("%-44s %12.3f %12.0f\n", clabel, 1e3 * c2, cimg2);
        printf("scaling efficiency, cnn: %.3f (target 0.9)\n", cimg2 / cimg1 / 2);
        printf("%-44s %12.3f %12.0f\n", "mlp 256,256 b64: 1 rank", 1e3 * t1, img1);
        char label[64];
        snprintf(label, sizeof label, "mlp 256,256 b64: 2 ranks (DDP, %d buckets)", nb);
        printf("%-44s %12.3f %12.0f\n", label, 1e3 * t2, img2);
        printf("scaling efficiency, mlp: %.3f\n", img2 / img1 / 2);
        printf("%-44s %12.3f\n", "mlp 1024x6 b512: no added latency", 1e3 * base);
        printf("%-44s %12.3f\n", "  + 1 ms/MiB per AllReduce, overlap on", 1e3 * on);
        printf("%-44s %12.3f\n", "  + 1 ms/MiB per AllReduce, overlap off", 1e3 * off);
        printf("buckets %d of <= %g MiB; comm added by the slow network hidden by backward: %.0f%% (target "
               "80%%)\n",
               nb_wide, bucket, 100 * hidden);
        printf("{\"bench\":\"ddp\",\"backend\":\"cpu\",\"comm\":\"mpi\",\"ranks\":2,\"threads\":1,"
               "\"cnn_img_s_1rank\":%.1f,\"cnn_img_s_2ranks\":%.1f,\"cnn_scaling_efficiency\":%.4f,"
               "\"img_s_1rank\":%.1f,\"img_s_2ranks\":%.1f,\"scaling_efficiency\":%.4f,"
               "\"overlap_base_ms\":%.3f,\"overlap_on_ms\":%.3f,\"overlap_off_ms\":%.3f,"
               "\"buckets\":%d,\"delay_ms_per_mb\":%.1f,\"hidden\":%.4f}\n",
               cimg1, cimg2, cimg2 / cimg1 / 2, img1, img2, img2 / img1 / 2, 1e3 * base, 1e3 * on, 1e3 * off,
               nb_wide, delay, hidden);
    }
    dpt_dataset_free(train);
    dpt_dataset_free(test);
    dpt_config_free(cfg);
    dpt_world_finalize(&world);
    return 0;
}
