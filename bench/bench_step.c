/* bench_step.c: training steps per second of one model, the way ./train runs them (loader,
 * forward, cross-entropy, backward, DDP AllReduce under mpirun, SGD with momentum), on
 * synthetic data of the model's input shape. The side-by-side benchmark (side_by_side.py)
 * runs it turn by turn with bench/peer_pytorch.py on the same model, batch and threads.
 *   bench_step MODEL BATCH THREADS STEPS [native|bf16|bf16-fp32act|cuda|cuda-tf32|cuda-bf16][-nhwc]
 *   MODEL: mlp cnn resnet20 resnet50
 *   mpirun -np 2 bench_step ...                         BATCH per rank; img/s is global
 * cuda runs on cuda:<local rank> (FP32; cuda-tf32 allows TF32; cuda-bf16 runs the convolutions
 * in bf16 on cuDNN, [train] precision = bf16), with more warm-up steps (cuDNN
 * picks algorithms and the caching allocator fills in the first ones); bf16 runs the
 * convolutions in bf16 on oneDNN ([train] precision = bf16) with the activations kept in bf16,
 * bf16-fp32act with them in fp32 ([train] bf16_activations = false). A -nhwc suffix (or the
 * mode nhwc alone) keeps the activations channels-last ([train] memory_format = nhwc).
 * Prints one JSON line, with the allocator's peak (activations, gradients, weights, state). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt.h"
#include "runtime/comm.h"
#include "runtime/error.h"
#include "runtime/log.h"

typedef struct model_def {
    const char *name;
    const char *sets[6];
    int64_t c, hw;
    int classes;
} model_def;

/* The peer's models (peer_pytorch.py): MLP 784-256-256-10, the 2-stage CNN, CIFAR-style
 * ResNet-20 with projection shortcuts, ResNet-50 v1.5, configs/vit_fmnist.ini's ViT (torchvision's), and
 * ViT-Ti/16 at 224 (DeiT-tiny's shape). */
static const model_def models[] = {
    {"mlp", {"model.name=mlp", "model.hidden=256,256"}, 1, 28, 10},
    {"cnn", {"model.name=cnn", "model.channels=32,64", "model.fc=128", "model.dropout=0.25"}, 1, 28, 10},
    {"resnet20", {"model.name=resnet", "model.depth=20"}, 3, 32, 10},
    {"resnet50", {"model.name=resnet", "model.depth=50"}, 3, 224, 1000},
    {"vit", {"model.name=vit", "model.patch_size=7", "model.hidden_dim=64", "model.num_layers=4", "model.num_heads=4",
             "model.mlp_dim=128"}, 1, 28, 10},
    {"vit_ti", {"model.name=vit", "model.patch_size=16", "model.hidden_dim=192", "model.num_layers=12",
                "model.num_heads=3", "model.mlp_dim=768"}, 3, 224, 1000},
};

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: bench_step MODEL BATCH THREADS STEPS "
                        "[native|bf16|bf16-fp32act|cuda|cuda-tf32|cuda-bf16][-nhwc][-find]\n");
        return 2;
    }
    const model_def *def = NULL;
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        if (!strcmp(models[i].name, argv[1])) def = &models[i];
    if (!def) {
        fprintf(stderr, "unknown model %s (mlp, cnn, resnet20, resnet50, vit, vit_ti)\n", argv[1]);
        return 2;
    }
    int64_t batch = atoll(argv[2]);
    int threads = atoi(argv[3]), steps = atoi(argv[4]), warmup = 2;
    const char *mode = argc > 5 ? argv[5] : "";
    bool native = !strcmp(mode, "native"), cuda = !strncmp(mode, "cuda", 4);
    if (cuda) warmup = 5;
    dpt_world world;
    dpt_error err;
    if (!dpt_world_init(&world, &argc, &argv, &err)) {
        fprintf(stderr, "error: %s\n", err.msg);
        return 1;
    }
    dpt_comm *comm = dpt_world_comm(&world);
    dpt_ctx_options co = {.device = {cuda ? DPT_DEVICE_CUDA : DPT_DEVICE_CPU, cuda ? world.local_rank : 0},
                          .threads = threads,
                          .seed = 1,
                          .tf32 = !strncmp(mode, "cuda-tf32", 9),
                          .cpu_kernels = native ? DPT_CPU_KERNELS_NATIVE : DPT_CPU_KERNELS_ONEDNN,
                          .precision = !strncmp(mode, "bf16", 4) || !strncmp(mode, "cuda-bf16", 9)
                                           ? DPT_PRECISION_BF16
                                           : DPT_PRECISION_FP32,
                          .fp32_activations = !strncmp(mode, "bf16-fp32act", 12),
                          .channels_last = strstr(mode, "nhwc") != NULL,
                          /* -find: cuDNN's algorithms measured per shape ([train] cudnn_benchmark) */
                          .cudnn_benchmark = strstr(mode, "find") != NULL};
    dpt_ctx *ctx = dpt_ctx_new(&co, &err);
    if (!ctx) dpt_abort_job("%s", err.msg);
    dpt_config *cfg = dpt_config_defaults();
    for (int i = 0; i < 4 && def->sets[i]; i++)
        if (!dpt_config_set(cfg, def->sets[i], &err)) dpt_abort_job("%s", err.msg);
    dpt_model *model = dpt_model_build(ctx, cfg, def->c, def->hw, def->hw, def->classes, &err);
    if (!model) dpt_abort_job("%s", err.msg);
    dpt_optim *optim = dpt_sgd_new(model, 0.01f, 0.9f, 0.0f, 0.0f, false);
    /* enough samples for every step: no epoch restart (a pause of the prefetch thread) is timed */
    dpt_dataset *ds = dpt_synthetic_new(batch * world.size * (warmup + steps + 1), def->c, def->hw, def->hw,
                                        def->classes, 1);
    dpt_loader_options lo = {.batch = batch,
                             .shuffle = true,
                             .drop_last = true,
                             .seed = 1,
                             .rank = world.rank,
                             .world_size = world.size,
                             .mean = 0.5f,
                             .std = 0.25f,
                             .prefetch = 2};
    dpt_loader *loader = dpt_loader_new(ctx, ds, &lo);
    dpt_ddp *ddp = NULL;
    if (comm) {
        dpt_ddp_options o = {.bucket_mb = 25, .overlap = true, .timeout_s = 600, .dataset_len = ds->n};
        ddp = dpt_ddp_new(ctx, model, comm, &o, &err);
        if (!ddp) dpt_abort_job("%s", err.msg);
    }
    double t0 = 0;
    for (int s = 0; s < warmup + steps; s++) {
        if (s == warmup) {
            dpt_ctx_synchronize(ctx);
            dpt_comm_barrier(comm);
            t0 = dpt_now_s();
        }
        dpt_batch b;
        dpt_loader_next_cycle(loader, &b);
        dpt_backward(ctx, dpt_cross_entropy(ctx, dpt_model_forward(model, ctx, b.x), b.labels, 0.0f));
        if (ddp) dpt_ddp_finish(ddp);
        dpt_optim_step(ctx, optim);
        dpt_model_zero_grad(model);
        dpt_tape_clear(ctx);
    }
    dpt_ctx_synchronize(ctx);
    double seconds = dpt_now_s() - t0;
    if (comm) { /* the slowest rank sets the pace: the ranks agree on the mean step time */
        dpt_comm_allreduce_f64(comm, &seconds, 1, "benchmark time");
        seconds /= world.size;
    }
    if (world.rank == 0)
        printf("{\"bench\":\"step\",\"model\":\"%s\",\"batch\":%lld,\"threads\":%d,\"ranks\":%d,\"kernels\":"
               "\"%s\","
               "\"mode\":\"%s\",\"steps\":%d,\"img_s\":%.2f,\"mem_peak_mb\":%.1f}\n",
               def->name, (long long)batch, dpt_ctx_threads(ctx), world.size, dpt_ctx_backend_name(ctx), mode,
               steps, (double)(batch * world.size * steps) / seconds,
               (double)dpt_ctx_mem_stats(ctx).peak_allocated / 1048576.0);
    dpt_ddp_free(ddp);
    dpt_loader_free(loader);
    dpt_dataset_free(ds);
    dpt_optim_free(optim);
    dpt_model_free(model);
    dpt_config_free(cfg);
    dpt_ctx_free(ctx);
    dpt_world_finalize(&world);
    return 0;
}
