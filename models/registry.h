/* registry.h: the built-in models (their builders and the config keys each declares) and the
 * registry dpt_register_model adds a program's own models to. */
#ifndef DPT_REGISTRY_H
#define DPT_REGISTRY_H

#include "dpt.h"

dpt_model *dpt_mlp_build(dpt_ctx *ctx, const dpt_config *cfg, int64_t c, int64_t h, int64_t w,
                         int num_classes, dpt_error *err);
dpt_model *dpt_cnn_build(dpt_ctx *ctx, const dpt_config *cfg, int64_t c, int64_t h, int64_t w,
                         int num_classes, dpt_error *err);
dpt_model *dpt_resnet_build(dpt_ctx *ctx, const dpt_config *cfg, int64_t c, int64_t h, int64_t w,
                            int num_classes, dpt_error *err);
extern const dpt_config_key dpt_mlp_keys[], dpt_cnn_keys[], dpt_resnet_keys[];
extern const int dpt_mlp_num_keys, dpt_cnn_num_keys, dpt_resnet_num_keys;

/* The config schema's start-up (runtime/config.c) declares the built-in models' keys through
 * this, once, before any config is made ... */
void dpt_register_builtin_models(void);
/* ... which hands each model's table to the schema without taking its lock again. */
void dpt_config_declare_builtin(const char *owner, const dpt_config_key *keys, int n);

#endif
