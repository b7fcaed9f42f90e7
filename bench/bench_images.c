/* bench_images: the folder source's decode + augment throughput, img/s, as the training loader
 * makes batches: RandomResizedCrop(224) + horizontal flip + normalisation to float NCHW on
 * WORKERS threads, batches of BATCH. bench/images_side_by_side.py runs it against
 * torchvision's ImageFolder + DataLoader with the same transforms and worker count.
 *     bench_images DIR WORKERS BATCHES [BATCH]      (DIR holds train/ and val/) */
#include <stdio.h>
#include <stdlib.h>

#include "dpt.h"
#include "data/folder.h"
#include "runtime/log.h"

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: bench_images DIR WORKERS BATCHES [BATCH]\n");
        return 2;
    }
    int workers = atoi(argv[2]), batches = atoi(argv[3]), batch = argc > 4 ? atoi(argv[4]) : 64;
    dpt_image_view v = {.train = true,
                        .size = 224,
                        .resize = 256,
                        .scale = {0.08, 1},
                        .ratio = {0.75, 4.0 / 3.0},
                        .hflip = true,
                        .dct_scaling = true,
                        .max_pixels = 89478485};
    dpt_folder_options fo = {.dir = argv[1], .train = v, .eval = v};
    fo.eval.train = false;
    dpt_dataset *train, *val;
    dpt_error err = {{0}};
    if (!dpt_folder_open(&fo, &train, &val, &err)) {
        fprintf(stderr, "bench_images: %s\n", err.msg);
        return 1;
    }
    dpt_ctx_options co = {.device = {.kind = DPT_DEVICE_CPU}, .threads = 1, .seed = 1};
    dpt_ctx *ctx = dpt_ctx_new(&co, &err);
    if (!ctx) return fprintf(stderr, "bench_images: %s\n", err.msg), 1;
    dpt_loader_options o = {.batch = batch,
                            .shuffle = true,
                            .drop_last = true,
                            .seed = 1,
                            .world_size = 1,
                            .norm_channels = 3,
                            .channel_mean = {0.485f, 0.456f, 0.406f},
                            .channel_std = {0.229f, 0.224f, 0.225f},
                            .prefetch = 2,
                            .workers = workers};
    dpt_loader *l = dpt_loader_new(ctx, train, &o);
    dpt_batch b;
    dpt_loader_next_cycle(l, &b); /* warm-up: threads started, caches touched */
    double t0 = dpt_now_s();
    for (int i = 0; i < batches; i++)
        dpt_loader_next_cycle(l, &b);
    double s = dpt_now_s() - t0, img_s = (double)batches * batch / s;
    printf("dptrain folder loader | %d workers | batch %d | %d batches | %.1f img/s (%.1f per worker)\n", workers,
           batch, batches, img_s, img_s / (workers > 0 ? workers : 1));
    printf("{\"bench\":\"images\",\"workers\":%d,\"batch\":%d,\"img_s\":%.2f}\n", workers, batch, img_s);
    dpt_loader_free(l);
    dpt_dataset_free(train), dpt_dataset_free(val);
    dpt_ctx_free(ctx);
    return 0;
}
