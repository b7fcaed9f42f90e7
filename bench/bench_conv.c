/* bench_conv.c: GEMM GFLOP/s, convolution forward+backward GFLOP/s on the layer shapes of
 * ResNet-20 (CIFAR, 32x32) and ResNet-50 (224x224), and training img/s of cnn, resnet20 and
 * resnet50 at batch 32. Prints a table and a JSON line. `bench_conv quick` runs a smaller
 * set (used by make bench on 2-core machines, where ResNet-50 takes ~20 s a step).
 * DPT_BENCH_DEVICE=cuda runs it on cuda:0 with 4x the batches (scripts/gpu_check.sh). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt.h"
#include "runtime/log.h"
#include "runtime/tensor.h"

typedef struct conv_case {
    const char *net;
    int64_t c_in, hw, c_out, k, stride, batch;
} conv_case;

static double conv_gflops(dpt_ctx *ctx, const conv_case *c, int reps, double *ms)
{
    dpt_model *m = dpt_model_new(ctx, "bench", NULL);
    dpt_shape3 s = {c->c_in, c->hw, c->hw};
    dpt_conv2d *conv = dpt_conv2d_new(m, "conv", &s, c->c_out, c->k, c->stride, c->k / 2, 1, 1, false);
    dpt_tensor *x = dpt_tensor_new(ctx, 4, (int64_t[]){c->batch, c->c_in, c->hw, c->hw});
    x->requires_grad = true;
    double flops = dpt_model_flops(m) * (double)c->batch * 3.0; /* forward, data and weight grads */
    double best = 1e30;
    for (int r = 0; r < reps + 1; r++) {
        dpt_ctx_synchronize(ctx);
        double t0 = dpt_now_s();
        dpt_tensor *y = dpt_conv2d_forward(ctx, conv, x);
        dpt_backward(ctx, dpt_sum(ctx, y));
        dpt_ctx_synchronize(ctx);
        double t = dpt_now_s() - t0;
        if (r > 0 && t < best) best = t; /* the first run sizes the caches */
        dpt_tape_clear(ctx);
    }
    *ms = 1e3 * best;
    dpt_tensor_free(x);
    dpt_model_free(m);
    return flops / best / 1e9;
}

/* C (m, n) = A (m, k) B (k, n), forward only. */
static double gemm_gflops(dpt_ctx *ctx, int64_t m, int64_t k, int64_t n, int reps, double *ms)
{
    dpt_tensor *a = dpt_tensor_new(ctx, 2, (int64_t[]){m, k}), *b = dpt_tensor_new(ctx, 2, (int64_t[]){k, n});
    bool was = dpt_set_grad_enabled(ctx, false);
    double best = 1e30;
    for (int r = 0; r < reps + 1; r++) {
        dpt_ctx_synchronize(ctx);
        double t0 = dpt_now_s();
        dpt_matmul(ctx, a, b);
        dpt_ctx_synchronize(ctx);
        double t = dpt_now_s() - t0;
        if (r > 0 && t < best) best = t;
        dpt_tape_clear(ctx);
    }
    dpt_set_grad_enabled(ctx, was);
    *ms = 1e3 * best;
    dpt_tensor_free(a);
    dpt_tensor_free(b);
    return 2.0 * (double)m * (double)k * (double)n / best / 1e9;
}

static double train_img_s(dpt_ctx *ctx, const char *const *sets, int nsets, int64_t c, int64_t hw,
                          int classes, int64_t batch, int steps)
{
    dpt_error err;
    dpt_config *cfg = dpt_config_defaults();
    for (int i = 0; i < nsets; i++)
        dpt_config_set(cfg, sets[i], &err);
    dpt_model *m = dpt_model_build(ctx, cfg, c, hw, hw, classes, &err);
    dpt_optim *opt = dpt_sgd_new(m, 0.01f, 0.9f, 0.0f, 0.0f, false);
    dpt_dataset *ds = dpt_synthetic_new(batch * 2, c, hw, hw, classes, 1);
    dpt_loader_options lo = {.batch = batch, .world_size = 1, .mean = 0.5f, .std = 0.25f};
    dpt_loader *l = dpt_loader_new(ctx, ds, &lo);
    double t0 = 0;
    for (int s = 0; s <= steps; s++) {
        if (s == 1) t0 = dpt_now_s(); /* step 0 warms the caches */
        dpt_batch b;
        dpt_loader_next_cycle(l, &b);
        dpt_backward(ctx, dpt_cross_entropy(ctx, dpt_model_forward(m, ctx, b.x), b.labels, 0.0f));
        dpt_optim_step(ctx, opt);
        dpt_model_zero_grad(m);
        dpt_tape_clear(ctx);
    }
    dpt_ctx_synchronize(ctx);
    double img_s = (double)(batch * steps) / (dpt_now_s() - t0);
    dpt_loader_free(l);
    dpt_dataset_free(ds);
    dpt_optim_free(opt);
    dpt_model_free(m);
    dpt_config_free(cfg);
    return img_s;
}

int main(int argc, char **argv)
{
    bool quick = argc > 1 && !strcmp(argv[1], "quick");
    const char *dev = getenv("DPT_BENCH_DEVICE");
    bool cuda = dev && !strcmp(dev, "cuda");
    dpt_error err;
    dpt_ctx_options opt = {.device = {cuda ? DPT_DEVICE_CUDA : DPT_DEVICE_CPU, 0},
                           .threads = 0,
                           .seed = 1,
                           .tf32 = getenv("DPT_BENCH_TF32") != NULL};
    dpt_ctx *ctx = dpt_ctx_new(&opt, &err);
    if (!ctx) {
        fprintf(stderr, "error: %s\n", err.msg);
        return 1;
    }
    const char *backend = cuda ? (opt.tf32 ? "cuda (cuBLAS/cuDNN, TF32)" : "cuda (cuBLAS/cuDNN, FP32)")
                          : !strcmp(dpt_ctx_backend_name(ctx), "cpu-onednn") ? "cpu (oneDNN kernels)"
                                                                             : "cpu (im2col + OpenBLAS)";
    int64_t scale = cuda ? 4 : 1; /* a GPU needs bigger batches to be measured at all */
    const conv_case cases[] = {
        {"resnet20", 16, 32, 16, 3, 1, 32},  {"resnet20", 16, 32, 32, 3, 2, 32},
        {"resnet20", 32, 16, 32, 3, 1, 32},  {"resnet20", 64, 8, 64, 3, 1, 32},
        {"resnet50", 64, 56, 64, 1, 1, 8},   {"resnet50", 64, 56, 64, 3, 1, 8},
        {"resnet50", 128, 28, 128, 3, 1, 8}, {"resnet50", 256, 14, 256, 3, 1, 8},
        {"resnet50", 512, 7, 2048, 1, 1, 8},
    };
    int ncases = (int)(sizeof cases / sizeof cases[0]);
    char json[4096];
    int used = snprintf(json, sizeof json,
                        "{\"bench\":\"conv\",\"backend\":\"%s\",\"threads\":%d,\"ranks\":1,\"gemm\":[",
                        cuda ? "cuda" : "cpu", dpt_ctx_threads(ctx));
    printf("GEMM C = A B (forward) | backend %s | %d threads | 1 rank\n", backend, dpt_ctx_threads(ctx));
    printf("%-26s %10s %10s\n", "M x K x N", "ms", "GFLOP/s");
    const int64_t sizes[] = {512, 1024, 2048, 4096};
    int nsizes = cuda ? 4 : quick ? 2 : 3;
    for (int i = 0; i < nsizes; i++) {
        double ms, g = gemm_gflops(ctx, sizes[i], sizes[i], sizes[i], quick ? 2 : 5, &ms);
        printf("%-26lld %10.2f %10.1f\n", (long long)sizes[i], ms, g);
        used += snprintf(json + used, sizeof json - (size_t)used, "%s{\"n\":%lld,\"gflops\":%.2f}",
                         i ? "," : "", (long long)sizes[i], g);
    }
    used += snprintf(json + used, sizeof json - (size_t)used, "],\"conv\":[");
    printf("conv2d forward+backward | backend %s | %d threads | 1 rank\n", backend, dpt_ctx_threads(ctx));
    printf("%-9s %-26s %6s %10s %10s\n", "net", "layer (Cin->Cout, HxW, k/s)", "batch", "ms", "GFLOP/s");
    for (int i = 0; i < ncases; i++) {
        conv_case cc = cases[i];
        cc.batch *= scale;
        double ms, g = conv_gflops(ctx, &cc, quick ? 2 : 5, &ms);
        char layer[64];
        snprintf(layer, sizeof layer, "%lld->%lld, %lldx%lld, %lld/%lld", (long long)cases[i].c_in,
                 (long long)cases[i].c_out, (long long)cases[i].hw, (long long)cases[i].hw,
                 (long long)cases[i].k, (long long)cases[i].stride);
        printf("%-9s %-26s %6lld %10.2f %10.1f\n", cases[i].net, layer, (long long)cc.batch, ms, g);
        used += snprintf(json + used, sizeof json - (size_t)used,
                         "%s{\"net\":\"%s\",\"layer\":\"%s\",\"gflops\":%.2f}", i ? "," : "", cases[i].net,
                         layer, g);
    }
    const char *cnn[] = {"model.name=cnn"};
    const char *r20[] = {"model.name=resnet", "model.depth=20"};
    const char *r50[] = {"model.name=resnet", "model.depth=50"};
    double img_cnn = train_img_s(ctx, cnn, 1, 1, 28, 10, 32, quick ? 20 : 50);
    double img_r20 = train_img_s(ctx, r20, 2, 3, 32, 10, 32, quick ? 5 : 20);
    double img_r50 = quick ? 0.0 : train_img_s(ctx, r50, 2, 3, 224, 1000, 32, cuda ? 20 : 2);
    printf("training, batch 32, SGD: cnn (1x28x28) %.0f img/s | resnet20 (3x32x32) %.0f img/s | resnet50 "
           "(3x224x224) %s\n",
           img_cnn, img_r20, quick ? "skipped (quick)" : "");
    if (!quick) printf("  resnet50: %.2f img/s\n", img_r50);
    printf("%s],\"train_batch\":32,\"cnn_img_s\":%.1f,\"resnet20_img_s\":%.1f,\"resnet50_img_s\":%.2f}\n",
           json, img_cnn, img_r20, img_r50);
    dpt_ctx_free(ctx);
    return 0;
}
