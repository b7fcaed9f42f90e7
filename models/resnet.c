/* resnet.c: residual networks (He et al. 2016). Depth 18/34 (BasicBlock) and 50/101/152
 * (Bottleneck, stride in the 3x3 conv as torchvision's v1.5) use the ImageNet stem (7x7/2
 * conv, 3x3/2 max pool) and widths 64-128-256-512; depth 6n+2 (20, 32, 44, 56, 110) is the
 * CIFAR family: a 3x3 stem and three stages of n BasicBlocks, widths 16-32-64. Shortcuts
 * that change shape are 1x1 conv + BN projections (option B). Initialisation as
 * torchvision: Kaiming-normal convs, BN gamma 1 (0 for each block's last BN with
 * zero_init_residual), PyTorch-default linear. */
#include <stdio.h>
#include <string.h>

#include "dpt.h"
#include "../runtime/registry.h"

typedef struct block {
    dpt_conv2d *conv[3];
    dpt_batchnorm *bn[3];
    int nconv; /* 2 (basic) or 3 (bottleneck) */
    dpt_conv2d *down_conv;
    dpt_batchnorm *down_bn;
} block;

typedef struct resnet {
    dpt_conv2d *stem_conv;
    dpt_batchnorm *stem_bn;
    bool stem_pool;
    block *blocks;
    int nblocks;
    dpt_linear *fc;
} resnet;

static dpt_tensor *block_forward(dpt_ctx *ctx, const block *b, dpt_tensor *x, bool training)
{
    dpt_tape_mark mark = dpt_tape_mark_here(ctx); /* evaluation: the block's intermediates go at its end */
    dpt_tensor *h = x;
    for (int i = 0; i < b->nconv; i++) { /* a ReLU after each but the last batch norm, fused where it can be */
        dpt_tensor *c = dpt_conv2d_forward(ctx, b->conv[i], h);
        h = i + 1 < b->nconv ? dpt_batchnorm_relu_forward(ctx, b->bn[i], c, training)
                             : dpt_batchnorm_forward(ctx, b->bn[i], c, training);
    }
    dpt_tensor *shortcut =
        b->down_conv
            ? dpt_batchnorm_forward(ctx, b->down_bn, dpt_conv2d_forward(ctx, b->down_conv, x), training)
            : x;
    return dpt_tape_release(ctx, mark, dpt_relu_(ctx, dpt_add(ctx, h, shortcut))); /* relu in place */
}

static dpt_tensor *resnet_forward(dpt_model *model, dpt_ctx *ctx, dpt_tensor *x)
{
    resnet *net = dpt_model_state(model);
    bool training = dpt_model_training(model);
    dpt_tensor *h = dpt_batchnorm_relu_forward(ctx, net->stem_bn, dpt_conv2d_forward(ctx, net->stem_conv, x),
                                               training);
    if (net->stem_pool) h = dpt_maxpool2d(ctx, h, 3, 2, 1);
    for (int i = 0; i < net->nblocks; i++)
        h = block_forward(ctx, &net->blocks[i], h, training);
    return dpt_linear_forward(ctx, net->fc, dpt_global_avgpool(ctx, h)); /* (B, classes) */
}

typedef struct build_opts {
    float momentum;
    bool sync, zero_init;
} build_opts;

static dpt_batchnorm *bn(dpt_model *m, const char *name, const dpt_shape3 *s, const build_opts *o)
{
    return dpt_batchnorm_new(m, name, s, o->momentum, 1e-5f, true, o->sync);
}

/* One block from shape `s` (updated) to `planes` (x4 for bottlenecks) with `stride`. */
static void make_block(dpt_model *m, block *b, const char *prefix, dpt_shape3 *s, int64_t planes,
                       int64_t stride, bool bottleneck, const build_opts *o)
{
    char name[64];
    dpt_shape3 in = *s;
    int64_t out_c = bottleneck ? planes * 4 : planes;
    b->nconv = bottleneck ? 3 : 2;
    if (bottleneck) {
        const int64_t widths[3] = {planes, planes, out_c}, kernels[3] = {1, 3, 1},
                      strides[3] = {1, stride, 1};
        for (int i = 0; i < 3; i++) {
            snprintf(name, sizeof name, "%s.conv%d", prefix, i + 1);
            b->conv[i] =
                dpt_conv2d_new(m, name, s, widths[i], kernels[i], strides[i], kernels[i] / 2, 1, 1, false);
            snprintf(name, sizeof name, "%s.bn%d", prefix, i + 1);
            b->bn[i] = bn(m, name, s, o);
        }
    } else {
        for (int i = 0; i < 2; i++) {
            snprintf(name, sizeof name, "%s.conv%d", prefix, i + 1);
            b->conv[i] = dpt_conv2d_new(m, name, s, planes, 3, i == 0 ? stride : 1, 1, 1, 1, false);
            snprintf(name, sizeof name, "%s.bn%d", prefix, i + 1);
            b->bn[i] = bn(m, name, s, o);
        }
    }
    if (o->zero_init) dpt_batchnorm_zero_gamma(b->bn[b->nconv - 1]);
    if (stride != 1 || in.c != out_c) {
        snprintf(name, sizeof name, "%s.downsample.0", prefix);
        b->down_conv = dpt_conv2d_new(m, name, &in, out_c, 1, stride, 0, 1, 1, false);
        snprintf(name, sizeof name, "%s.downsample.1", prefix);
        b->down_bn = bn(m, name, &in, o);
    }
}

static dpt_model *resnet_build(dpt_ctx *ctx, const dpt_config *cfg, int64_t c, int64_t h, int64_t w,
                            int num_classes, dpt_error *err)
{
    int64_t depth = dpt_config_int(cfg, "model", "depth"), width = dpt_config_int(cfg, "model", "width");
    static const struct {
        int64_t depth;
        int blocks[4];
        bool bottleneck;
    } imagenet[] = {{18, {2, 2, 2, 2}, false},
                    {34, {3, 4, 6, 3}, false},
                    {50, {3, 4, 6, 3}, true},
                    {101, {3, 4, 23, 3}, true},
                    {152, {3, 8, 36, 3}, true}};
    int stage_blocks[4] = {0};
    int nstages = 0;
    bool bottleneck = false, cifar = false;
    for (size_t i = 0; i < sizeof imagenet / sizeof imagenet[0]; i++)
        if (imagenet[i].depth == depth) {
            memcpy(stage_blocks, imagenet[i].blocks, sizeof stage_blocks);
            nstages = 4, bottleneck = imagenet[i].bottleneck;
        }
    if (!nstages && depth >= 8 && (depth - 2) % 6 == 0) {
        cifar = true, nstages = 3;
        for (int i = 0; i < 3; i++)
            stage_blocks[i] = (int)((depth - 2) / 6);
    }
    if (!nstages) {
        dpt_errorf(err,
                   "%s: [model] depth = %lld: not a ResNet depth\nHINT: use 18, 34, 50, 101 or 152 "
                   "(ImageNet style) or 6n+2 such as 20, 32, 44, 56, 110 (CIFAR style)",
                   dpt_config_where(cfg, "model", "depth"), (long long)depth);
        return NULL;
    }
    if (width == 0) width = cifar ? 16 : 64;
    build_opts o = {(float)dpt_config_float(cfg, "model", "bn_momentum"),
                    dpt_config_bool(cfg, "model", "sync_bn"),
                    dpt_config_bool(cfg, "model", "zero_init_residual")};
    dpt_model *model = dpt_model_new(ctx, "resnet", resnet_forward);
    resnet *net = dpt_model_alloc(model, sizeof *net);
    dpt_model_set_state(model, net);
    dpt_shape3 s = {c, h, w};
    if (cifar) {
        net->stem_conv = dpt_conv2d_new(model, "conv1", &s, width, 3, 1, 1, 1, 1, false);
    } else {
        net->stem_conv = dpt_conv2d_new(model, "conv1", &s, width, 7, 2, 3, 1, 1, false);
    }
    net->stem_bn = bn(model, "bn1", &s, &o);
    if (!cifar) {
        net->stem_pool = true;
        dpt_pool_shape_update(model, "maxpool", &s, 3, 2, 1);
    }
    for (int i = 0; i < nstages; i++)
        net->nblocks += stage_blocks[i];
    net->blocks = dpt_model_alloc(model, (size_t)net->nblocks * sizeof *net->blocks);
    int k = 0;
    for (int stage = 0; stage < nstages; stage++)
        for (int j = 0; j < stage_blocks[stage]; j++) {
            char prefix[32];
            snprintf(prefix, sizeof prefix, "layer%d.%d", stage + 1, j);
            int64_t stride = j == 0 && stage > 0 ? 2 : 1;
            make_block(model, &net->blocks[k++], prefix, &s, width << stage, stride, bottleneck, &o);
        }
    dpt_shape3 pooled = {s.c, 1, 1};
    dpt_model_note(model, "avgpool", "avgpool", &pooled, 0, (double)(s.c * s.h * s.w));
    net->fc = dpt_linear_new(model, "fc", s.c, num_classes, true);
    char summary[128];
    snprintf(summary, sizeof summary, "resnet%lld (%s, %s, width %lld)%s", (long long)depth,
             cifar ? "CIFAR style" : "ImageNet style", bottleneck ? "bottleneck" : "basic", (long long)width,
             o.sync ? " | sync bn" : "");
    dpt_model_set_summary(model, summary);
    return model;
}

/* [model] keys the resnet reads */
static const dpt_config_key resnet_keys[] = {
    {NULL, "depth", DPT_KEY_INT, "20", 8, 1000, NULL,
     "18/34/50/101/152 (ImageNet style) or 6n+2: 20/32/44/56/110 (CIFAR style)", 0},
    {NULL, "width", DPT_KEY_INT, "0", 0, 4096, NULL,
     "channels of the first stage (0 = 64 ImageNet style, 16 CIFAR style)", 0},
    {NULL, "zero_init_residual", DPT_KEY_BOOL, "false", 1, 0, NULL, "start each block's last BN at gamma = 0", 0},
    {NULL, "bn_momentum", DPT_KEY_FLOAT, "0.1", 0, 1, NULL, "batch norm running-statistics momentum", 0},
    {NULL, "sync_bn", DPT_KEY_BOOL, "false", 1, 0, NULL, "SyncBatchNorm: batch statistics over all ranks", 0},
};

static const dpt_model_impl resnet_impl = {.build_image = resnet_build};
DPT_BUILTIN(model_resnet) = {DPT_KIND_MODEL, "resnet", "ResNet: ImageNet style (18/34/50/101/152) or CIFAR style (6n+2), torchvision's layout", resnet_keys, DPT_COUNT(resnet_keys), &resnet_impl};
