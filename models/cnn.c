/* cnn.c: a small convolutional net: [conv3x3 -> BN -> ReLU -> maxpool2]* -> FC -> ReLU ->
 * dropout -> FC. Default: 2 conv stages (32, 64 channels), FC 128. */
#include <stdio.h>

#include "dpt.h"
#include "../runtime/registry.h"

#define CNN_MAX_STAGES 8

typedef struct cnn {
    int stages;
    dpt_conv2d *conv[CNN_MAX_STAGES];
    dpt_batchnorm *bn[CNN_MAX_STAGES];
    dpt_linear *fc1, *fc2;
    float dropout;
} cnn;

static dpt_tensor *cnn_forward(dpt_model *model, dpt_ctx *ctx, dpt_tensor *x)
{
    cnn *net = dpt_model_state(model);
    bool training = dpt_model_training(model);
    dpt_tensor *h = x; /* (B, C, H, W) */
    for (int i = 0; i < net->stages; i++) {
        dpt_tape_mark mark = dpt_tape_mark_here(ctx); /* evaluation: the stage's intermediates go at its end */
        h = dpt_batchnorm_forward(ctx, net->bn[i], dpt_conv2d_forward(ctx, net->conv[i], h), training);
        /* ReLU after the pooling, on a quarter of the values: max and ReLU commute exactly
         * (max(relu a, relu b) = relu(max(a, b))), and so do their gradients (a window whose
         * maximum is not positive passes none either way), so the weights are the
         * conv-BN-ReLU-pool order's bit for bit; ReLU's two passes had been a tenth of the step */
        h = dpt_tape_release(ctx, mark, dpt_relu_(ctx, dpt_maxpool2d(ctx, h, 2, 2, 0)));
    }
    h = dpt_relu_(ctx, dpt_linear_forward(ctx, net->fc1, dpt_flatten(ctx, h)));
    h = dpt_dropout(ctx, h, net->dropout, training);
    return dpt_linear_forward(ctx, net->fc2, h); /* (B, classes) */
}

static dpt_model *cnn_build(dpt_ctx *ctx, const dpt_config *cfg, int64_t c, int64_t h, int64_t w,
                         int num_classes, dpt_error *err)
{
    int64_t channels[CNN_MAX_STAGES];
    int stages = dpt_config_int_list(cfg, "model", "channels", channels, CNN_MAX_STAGES);
    if (stages > CNN_MAX_STAGES) {
        dpt_errorf(err, "%s: [model] channels lists %d stages; cnn supports at most %d",
                   dpt_config_where(cfg, "model", "channels"), stages, CNN_MAX_STAGES);
        return NULL;
    }
    dpt_model *model = dpt_model_new(ctx, "cnn", cnn_forward);
    cnn *net = dpt_model_alloc(model, sizeof *net);
    dpt_model_set_state(model, net);
    net->stages = stages;
    net->dropout = (float)dpt_config_float(cfg, "model", "dropout");
    float momentum = (float)dpt_config_float(cfg, "model", "bn_momentum");
    bool sync = dpt_config_bool(cfg, "model", "sync_bn");
    dpt_shape3 shape = {c, h, w};
    char name[32], summary[256];
    int used = snprintf(summary, sizeof summary, "conv");
    for (int i = 0; i < stages; i++) {
        snprintf(name, sizeof name, "conv%d", i + 1);
        net->conv[i] = dpt_conv2d_new(model, name, &shape, channels[i], 3, 1, 1, 1, 1, false);
        snprintf(name, sizeof name, "bn%d", i + 1);
        net->bn[i] = dpt_batchnorm_new(model, name, &shape, momentum, 1e-5f, true, sync);
        snprintf(name, sizeof name, "pool%d", i + 1);
        dpt_pool_shape_update(model, name, &shape, 2, 2, 0);
        used += snprintf(summary + used, sizeof summary - (size_t)used, "%s%lld", i ? "-" : " ",
                         (long long)channels[i]);
    }
    int64_t fc = dpt_config_int(cfg, "model", "fc");
    net->fc1 = dpt_linear_new(model, "fc1", shape.c * shape.h * shape.w, fc, true);
    net->fc2 = dpt_linear_new(model, "fc2", fc, num_classes, true);
    snprintf(summary + used, sizeof summary - (size_t)used, " | fc %lld | dropout %g%s", (long long)fc,
             (double)net->dropout, sync ? " | sync bn" : "");
    dpt_model_set_summary(model, summary);
    return model;
}

/* [model] keys the cnn reads */
static const dpt_config_key cnn_keys[] = {
    {NULL, "channels", DPT_KEY_INT_LIST, "32,64", 1, 65536, NULL, "channels of each conv3x3-BN-ReLU-maxpool stage", 0},
    {NULL, "fc", DPT_KEY_INT, "128", 1, 1 << 20, NULL, "width of the hidden fully connected layer", 0},
    {NULL, "dropout", DPT_KEY_FLOAT, "0.25", 0, 0.99, NULL, "dropout before the last layer", 0},
    {NULL, "bn_momentum", DPT_KEY_FLOAT, "0.1", 0, 1, NULL, "batch norm running-statistics momentum", 0},
    {NULL, "sync_bn", DPT_KEY_BOOL, "false", 1, 0, NULL, "SyncBatchNorm: batch statistics over all ranks", 0},
};

static const dpt_model_impl cnn_impl = {.build_image = cnn_build};
DPT_BUILTIN(model_cnn) = {DPT_KIND_MODEL, "cnn", "conv3x3-BN-ReLU-maxpool stages, a hidden fully connected layer with dropout, a classifier", cnn_keys, DPT_COUNT(cnn_keys), &cnn_impl};
