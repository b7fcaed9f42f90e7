/* show_batch.c: ./train CONFIG --show-batch FILE.png. The first training batch of a new run, as
 * the model would take it (the loader's crops and flips, [data] auto_augment, then random
 * erasing, mixup or cutmix), written as a grid of up to 64 images, 8 a row, and its labels (and
 * a mixed batch's partners and lambda) printed: the look at the data a researcher takes before
 * a long run (fastai's show_batch, torchvision's make_grid). Images the loader normalised with
 * [data] mean and std are turned back into their bytes exactly; a source's float images (a
 * CSV's rows with csv_shape) are scaled from the shown values' minimum to their maximum. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train.h"
#include "error.h"
#include "../data/image.h"

enum { SHOW_MAX = 64, SHOW_COLS = 8, SHOW_GAP = 2 };

static void print_labels(const char *what, const int32_t *labels, int64_t n)
{
    printf("%s", what);
    for (int64_t i = 0; i < n; i++)
        printf(" %d", labels[i]);
    printf("\n");
}

bool show_batch(trainer *t, const char *path, dpt_error *err)
{
    const run_config *run = t->run;
    dpt_field fields[DPT_MAX_FIELDS];
    const dpt_field *in = dpt_field_named(fields, dpt_dataset_fields(t->train_set, fields), t->task.input);
    if (!in || in->dtype != DPT_F32 || in->ndim != 3 || (in->shape[0] != 1 && in->shape[0] != 3))
        return dpt_errorf(
            err,
            "--show-batch draws images, and this data's input (%s) is not one of 1 or 3 channels "
            "(C, H, W) of floats\nHINT: --dry-run shows the config; a CSV's rows become images "
            "with [data] csv_shape = C,H,W",
            t->task.input);
    dpt_loader_start_epoch(t->train_loader, 1);
    dpt_batch b;
    if (!dpt_loader_next(t->train_loader, &b))
        return dpt_errorf(err, "--show-batch: the training set makes no batch"); /* one_step said it does */
    dpt_tensor *x = dpt_batch_get(&b, t->task.input), *target = dpt_batch_get(&b, t->task.target);
    dpt_mix mix;
    dpt_tensor *partner = augment_batch(t, &b, target, &mix);
    int64_t B = dpt_tensor_dim(x, 0), C = dpt_tensor_dim(x, 1), H = dpt_tensor_dim(x, 2),
            W = dpt_tensor_dim(x, 3);
    int64_t n = B < SHOW_MAX ? B : SHOW_MAX, per = C * H * W;
    float *v = malloc((size_t)(B * per) * sizeof *v);
    if (!v) dpt_fatal("out of host memory for --show-batch");
    dpt_tensor_copy_to_host(x, v);
    /* back to bytes: the loader's x = (byte / 255 - mean) / std per channel, or the shown range */
    bool from_bytes = !t->train_set->get;
    double lo = INFINITY, hi = -INFINITY;
    for (int64_t i = 0; i < n * per; i++)
        lo = fmin(lo, v[i]), hi = fmax(hi, v[i]);
    int64_t cols = n < SHOW_COLS ? n : SHOW_COLS, rows = (n + cols - 1) / cols;
    int64_t gw = cols * W + (cols - 1) * SHOW_GAP, gh = rows * H + (rows - 1) * SHOW_GAP;
    uint8_t *grid = malloc((size_t)(gw * gh * 3));
    if (!grid) dpt_fatal("out of host memory for --show-batch");
    memset(grid, 255, (size_t)(gw * gh * 3)); /* white between the tiles */
    const dpt_loader_options *o = &run->train_data;
    for (int64_t i = 0; i < n; i++)
        for (int64_t y = 0; y < H; y++)
            for (int64_t xx = 0; xx < W; xx++)
                for (int64_t c = 0; c < 3; c++) {
                    int64_t ch = C == 1 ? 0 : c;
                    double f = v[i * per + (ch * H + y) * W + xx], byte;
                    if (from_bytes) {
                        int k = o->norm_channels > 1 ? (int)ch : 0;
                        double mean = o->norm_channels > 1 ? o->channel_mean[k] : o->mean;
                        double std = o->norm_channels > 1 ? o->channel_std[k] : o->std;
                        byte = (f * std + mean) * 255.0;
                    } else {
                        byte = hi > lo ? (f - lo) / (hi - lo) * 255.0 : 0.0;
                    }
                    int64_t gy = (i / cols) * (H + SHOW_GAP) + y, gx = (i % cols) * (W + SHOW_GAP) + xx;
                    long r = lrint(byte);
                    grid[(gy * gw + gx) * 3 + c] = (uint8_t)(r < 0 ? 0 : r > 255 ? 255 : r);
                }
    char msg[700];
    bool ok = dpt_image_write_png(path, grid, (int)gw, (int)gh, 3, msg, sizeof msg) ||
              dpt_errorf(err, "--show-batch: %s\nHINT: a PNG path in a folder this user can write", msg);
    if (ok) {
        printf("wrote %s: %lld of this rank's first training batch of %lld (%lldx%lld, %lld a row), as "
               "training takes "
               "them%s\n",
               path, (long long)n, (long long)B, (long long)H, (long long)W, (long long)cols,
               from_bytes ? "" : " (scaled from the shown minimum to the maximum)");
        if (target && dpt_tensor_ndim(target) == 1) { /* one label a sample */
            int32_t *labels = malloc((size_t)B * 2 * sizeof *labels);
            if (!labels) dpt_fatal("out of host memory for --show-batch");
            dpt_tensor_copy_to_host_i32(target, labels);
            print_labels("labels:", labels, n);
            if (partner) {
                dpt_tensor_copy_to_host_i32(partner, labels + B);
                if (mix.cut)
                    printf("cutmix: each image's rows %lld-%lld, columns %lld-%lld from image B-1-i; lambda "
                           "%.4f (the "
                           "share of its own label)\n",
                           (long long)mix.y0, (long long)mix.y1 - 1, (long long)mix.x0, (long long)mix.x1 - 1,
                           mix.lambda);
                else
                    printf("mixup: each image blended with image B-1-i, lambda %.4f (the share of its own)\n",
                           mix.lambda);
                print_labels("partners' labels:", labels + B, n);
            }
            free(labels);
        }
    }
    free(grid), free(v);
    dpt_tape_clear(t->ctx);
    return ok;
}
