/* registry.c: model name -> builder. The built-in models, then the ones a program registers
 * (dpt_register_model) before it calls dpt_train_main. */
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "registry.h"

enum { MAX_MODELS = 64 };

static const struct builtin {
    const char *name;
    dpt_model_builder build;
    const dpt_config_key *keys;
    const int *nkeys;
} builtins[] = {
    {"mlp", dpt_mlp_build, dpt_mlp_keys, &dpt_mlp_num_keys},
    {"cnn", dpt_cnn_build, dpt_cnn_keys, &dpt_cnn_num_keys},
    {"resnet", dpt_resnet_build, dpt_resnet_keys, &dpt_resnet_num_keys},
};
enum { NBUILTINS = sizeof builtins / sizeof builtins[0] };

static struct {
    char name[49];
    dpt_model_builder build;
} models[MAX_MODELS];
static int nmodels;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void add_builtins(void)
{
    for (int i = 0; i < NBUILTINS; i++) {
        snprintf(models[i].name, sizeof models[i].name, "%s", builtins[i].name);
        models[i].build = builtins[i].build;
    }
    nmodels = NBUILTINS;
}

void dpt_register_builtin_models(void)
{
    for (int i = 0; i < NBUILTINS; i++)
        dpt_config_declare_builtin(builtins[i].name, builtins[i].keys, *builtins[i].nkeys);
}

bool dpt_register_model(const char *name, dpt_model_builder build)
{
    pthread_once(&once, add_builtins);
    bool ok = name && *name && strlen(name) < sizeof models[0].name && build;
    for (const char *c = name; ok && *c; c++)
        ok = islower((unsigned char)*c) || isdigit((unsigned char)*c) || *c == '_';
    if (!ok) {
        fprintf(stderr, "error: dpt_register_model(%s): a name of lower-case letters, digits and _ (at most "
                        "48) and a builder\n", name ? name : "NULL");
        return false;
    }
    pthread_mutex_lock(&lock);
    const char *why = NULL;
    for (int i = 0; i < nmodels; i++)
        if (!strcmp(models[i].name, name)) why = i < NBUILTINS ? "a built-in model has this name" : "registered twice";
    if (!why && nmodels == MAX_MODELS) why = "too many models";
    if (!why) {
        snprintf(models[nmodels].name, sizeof models[nmodels].name, "%s", name);
        models[nmodels++].build = build;
    }
    pthread_mutex_unlock(&lock);
    if (why) fprintf(stderr, "error: dpt_register_model(%s): %s\n", name, why);
    return why == NULL;
}

static dpt_model_builder find(const char *name, char *known, size_t cap)
{
    pthread_once(&once, add_builtins);
    pthread_mutex_lock(&lock);
    dpt_model_builder build = NULL;
    size_t used = 0;
    known[0] = '\0';
    for (int i = 0; i < nmodels; i++) {
        if (!strcmp(models[i].name, name)) build = models[i].build;
        if (used < cap) used += (size_t)snprintf(known + used, cap - used, "%s%s", i ? ", " : "", models[i].name);
    }
    pthread_mutex_unlock(&lock);
    return build;
}

dpt_model *dpt_model_build(dpt_ctx *ctx, const dpt_config *cfg, int64_t c, int64_t h, int64_t w,
                           int num_classes, dpt_error *err)
{
    const char *name = dpt_config_str(cfg, "model", "name");
    char known[512];
    dpt_model_builder build = find(name, known, sizeof known);
    if (!build) {
        dpt_errorf(err, "%s: [model] name = %s: unknown model\nHINT: known models are %s",
                   dpt_config_where(cfg, "model", "name"), name, known);
        return NULL;
    }
    dpt_model *m = build(ctx, cfg, c, h, w, num_classes, err);
    if (m && dpt_model_error(m)) {
        dpt_errorf(err, "model %s: %s\nHINT: check the [model] settings against the input size %lldx%lldx%lld",
                   name, dpt_model_error(m), (long long)c, (long long)h, (long long)w);
        dpt_model_free(m);
        return NULL;
    }
    return m;
}
