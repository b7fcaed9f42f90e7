/* registry.c: model name -> builder. */
#include <string.h>

#include "registry.h"

static const struct {
    const char *name;
    dpt_model_builder build;
} models[] = {
    {"mlp", dpt_mlp_build},
    {"cnn", dpt_cnn_build},
    {"resnet", dpt_resnet_build},
};

dpt_model *dpt_model_build(dpt_ctx *ctx, const dpt_config *cfg, int64_t c, int64_t h, int64_t w,
                           int num_classes, dpt_error *err)
{
    const char *name = dpt_config_str(cfg, "model", "name");
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        if (strcmp(models[i].name, name) == 0) {
            dpt_model *m = models[i].build(ctx, cfg, c, h, w, num_classes, err);
            if (m && dpt_model_error(m)) {
                dpt_errorf(err,
                           "model %s: %s\nHINT: check the [model] settings against the input "
                           "size %lldx%lldx%lld",
                           name, dpt_model_error(m), (long long)c, (long long)h, (long long)w);
                dpt_model_free(m);
                return NULL;
            }
            return m;
        }
    char known[256] = "";
    size_t used = 0;
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", i ? ", " : "", models[i].name);
    dpt_errorf(err, "%s: [model] name = %s: unknown model\nHINT: known models are %s",
               dpt_config_where(cfg, "model", "name"), name, known);
    return NULL;
}
