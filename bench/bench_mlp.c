/* bench_mlp.c: MLP training throughput on Fashion-MNIST, and what the framework costs on top
 * of BLAS: GFLOP/s of the linear layers' forward+backward inside training steps against a
 * plain cblas_sgemm loop of exactly the same GEMM shapes. Prints a table and a JSON line. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dpt.h"
#include "data/data.h"
#include "runtime/log.h"

typedef struct result {
    int threads;
    int64_t batch;
    double img_s, step_ms, framework_gflops, blas_gflops;
} result;

static const int64_t widths[] = {784, 256, 256, 10};
enum { NLAYERS = 3 };

/* FLOPs of one training step's GEMMs: forward, dX (not for the first layer), dW. */
static double step_flops(int64_t batch)
{
    double f = 0.0;
    for (int l = 0; l < NLAYERS; l++) {
        double g = 2.0 * (double)batch * (double)widths[l] * (double)widths[l + 1];
        f += g * (l == 0 ? 2.0 : 3.0);
    }
    return f;
}

static double blas_step_seconds(int64_t batch, int reps)
{
    float *x[NLAYERS + 1], *w[NLAYERS], *dw[NLAYERS], *dx[NLAYERS + 1];
    for (int l = 0; l <= NLAYERS; l++) {
        x[l] = calloc((size_t)(batch * widths[l]), sizeof(float));
        dx[l] = calloc((size_t)(batch * widths[l]), sizeof(float));
    }
    for (int l = 0; l < NLAYERS; l++) {
        w[l] = calloc((size_t)(widths[l] * widths[l + 1]), sizeof(float));
        dw[l] = calloc((size_t)(widths[l] * widths[l + 1]), sizeof(float));
        for (int64_t i = 0; i < widths[l] * widths[l + 1]; i++)
            w[l][i] = 0.01f * (float)(i % 7);
    }
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = dpt_now_s();
        for (int l = 0; l < NLAYERS; l++) /* y = x W^T */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)batch, (int)widths[l + 1],
                        (int)widths[l], 1.0f, x[l], (int)widths[l], w[l], (int)widths[l], 0.0f, x[l + 1],
                        (int)widths[l + 1]);
        for (int l = NLAYERS - 1; l >= 0; l--) {
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)widths[l + 1], (int)widths[l],
                        (int)batch, 1.0f, dx[l + 1], (int)widths[l + 1], x[l], (int)widths[l], 1.0f, dw[l],
                        (int)widths[l]);
            if (l > 0)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)batch, (int)widths[l],
                            (int)widths[l + 1], 1.0f, dx[l + 1], (int)widths[l + 1], w[l], (int)widths[l],
                            1.0f, dx[l], (int)widths[l]);
        }
        double t = dpt_now_s() - t0;
        if (t < best) best = t;
    }
    for (int l = 0; l <= NLAYERS; l++)
        free(x[l]), free(dx[l]);
    for (int l = 0; l < NLAYERS; l++)
        free(w[l]), free(dw[l]);
    return best;
}

static result run(const dpt_config *base, const dpt_dataset *train, int threads, int64_t batch, int steps)
{
    dpt_error err;
    dpt_ctx_options opt = {.device = {DPT_DEVICE_CPU, 0}, .threads = threads, .seed = 1};
    dpt_ctx *ctx = dpt_ctx_new(&opt, &err);
    dpt_model *model = dpt_model_build(ctx, base, 1, 28, 28, 10, &err);
    dpt_optim *optim = dpt_optim_build(model, base, &err);
    dpt_loader_options lo = {.batch = batch,
                             .shuffle = true,
                             .drop_last = true,
                             .seed = 1,
                             .world_size = 1,
                             .mean = 0.286f,
                             .std = 0.353f};
    dpt_loader *loader = dpt_loader_new(ctx, train, &lo);
    dpt_batch b;
    double t0 = 0.0;
    int warmup = 20;
    for (int s = 0; s < warmup + steps; s++) {
        if (s == warmup) t0 = dpt_now_s();
        dpt_loader_next_cycle(loader, &b);
        dpt_tensor *loss = dpt_cross_entropy(ctx, dpt_model_forward(model, ctx, b.x), b.labels, 0.0f);
        dpt_backward(ctx, loss);
        dpt_optim_step(ctx, optim);
        dpt_model_zero_grad(model);
        dpt_tape_clear(ctx);
    }
    double seconds = dpt_now_s() - t0;
    result r = {.threads = dpt_ctx_threads(ctx), .batch = batch};
    r.step_ms = 1e3 * seconds / steps;
    r.img_s = (double)(batch * steps) / seconds;
    r.framework_gflops = step_flops(batch) * steps / seconds / 1e9;
    double blas_s = blas_step_seconds(batch, 50);
    r.blas_gflops = step_flops(batch) / blas_s / 1e9;
    dpt_loader_free(loader);
    dpt_optim_free(optim);
    dpt_model_free(model);
    dpt_ctx_free(ctx);
    return r;
}

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 300;
    dpt_error err;
    dpt_config *cfg = dpt_config_defaults(); /* = configs/fmnist_mlp.ini's model and optimizer */
    dpt_dataset *train, *test;
    if (!dpt_data_open(cfg, &train, &test, &err)) {
        fprintf(stderr, "error: %s\n", err.msg);
        return 1;
    }
    int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    int thread_counts[2] = {1, cores};
    int64_t batches[2] = {64, 256};
    result results[4];
    int n = 0;
    for (int t = 0; t < (cores > 1 ? 2 : 1); t++)
        for (int b = 0; b < 2; b++)
            results[n++] = run(cfg, train, thread_counts[t], batches[b], steps);

    printf("MLP 784-256-256-10 training on Fashion-MNIST | backend cpu (OpenBLAS) | 1 rank | %d steps\n",
           steps);
    printf("%-8s %-6s %10s %9s %14s %12s %9s\n", "threads", "batch", "img/s", "step ms", "GEMM GFLOP/s",
           "BLAS GFLOP/s", "overhead");
    for (int i = 0; i < n; i++)
        printf("%-8d %-6lld %10.0f %9.3f %14.1f %12.1f %8.0f%%\n", results[i].threads,
               (long long)results[i].batch, results[i].img_s, results[i].step_ms, results[i].framework_gflops,
               results[i].blas_gflops, 100.0 * (results[i].blas_gflops / results[i].framework_gflops - 1.0));
    printf("{\"bench\":\"mlp\",\"backend\":\"cpu\",\"ranks\":1,\"steps\":%d,\"results\":[", steps);
    for (int i = 0; i < n; i++)
        printf("%s{\"threads\":%d,\"batch\":%lld,\"img_s\":%.1f,\"step_ms\":%.4f,"
               "\"gemm_gflops\":%.2f,\"blas_gflops\":%.2f}",
               i ? "," : "", results[i].threads, (long long)results[i].batch, results[i].img_s,
               results[i].step_ms, results[i].framework_gflops, results[i].blas_gflops);
    printf("]}\n");
    dpt_dataset_free(train);
    dpt_dataset_free(test);
    dpt_config_free(cfg);
    return 0;
}
