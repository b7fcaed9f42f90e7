/* registry.h: model builders. Adding a model = its file plus one line in registry.c. */
#ifndef DPT_REGISTRY_H
#define DPT_REGISTRY_H

#include "dpt.h"

typedef dpt_model *(*dpt_model_builder)(dpt_ctx *ctx, const dpt_config *cfg, int64_t c, int64_t h, int64_t w,
                                        int num_classes, dpt_error *err);

dpt_model *dpt_mlp_build(dpt_ctx *ctx, const dpt_config *cfg, int64_t c, int64_t h, int64_t w,
                         int num_classes, dpt_error *err);
dpt_model *dpt_cnn_build(dpt_ctx *ctx, const dpt_config *cfg, int64_t c, int64_t h, int64_t w,
                         int num_classes, dpt_error *err);
dpt_model *dpt_resnet_build(dpt_ctx *ctx, const dpt_config *cfg, int64_t c, int64_t h, int64_t w,
                            int num_classes, dpt_error *err);

#endif
