/* mlp.c: a multi-layer perceptron: flatten -> [linear -> activation]* -> linear. It takes any
 * data set: its input field flattened, and as outputs the classes of a classifier's data (the
 * logits) or the size of a real-valued target (a regression's y). */
#include <stdio.h>
#include <string.h>

#include "dpt.h"
#include "../runtime/registry.h"

#define MLP_MAX_LAYERS 33

typedef struct mlp {
    int nlayers;
    dpt_linear *layers[MLP_MAX_LAYERS];
    bool gelu;
} mlp;

static dpt_tensor *mlp_forward(dpt_model *model, dpt_ctx *ctx, dpt_tensor *x)
{
    mlp *net = dpt_model_state(model);
    dpt_tensor *h = dpt_flatten(ctx, x); /* (B, C*H*W) */
    for (int i = 0; i < net->nlayers; i++) {
        h = dpt_linear_forward(ctx, net->layers[i], h);
        if (i + 1 < net->nlayers) h = net->gelu ? dpt_gelu(ctx, h) : dpt_relu_(ctx, h);
    }
    return h; /* (B, classes) */
}

/* Values per sample of a field. */
static int64_t per_sample(const dpt_field *f)
{
    int64_t n = 1;
    for (int d = 0; d < f->ndim; d++)
        n *= f->shape[d];
    return n;
}

static dpt_model *mlp_build(dpt_ctx *ctx, const dpt_config *cfg, const dpt_dataset *data, dpt_error *err)
{
    dpt_field fields[DPT_MAX_FIELDS];
    int nfields = dpt_dataset_fields(data, fields);
    const dpt_field *input = dpt_field_first(fields, nfields, false);
    const dpt_field *target = dpt_field_first(fields, nfields, true);
    if (!input || !target || input->dtype != DPT_F32) {
        dpt_errorf(err, "%s: [model] name = mlp takes a float input and a target; the data set %s has %s",
                   dpt_config_where(cfg, "model", "name"), data->name,
                   !input ? "no input field" : !target ? "no target field" : "integer inputs (token ids: embed them)");
        return NULL;
    }
    /* a classifier's logits, or a real-valued target's values */
    int64_t outputs = target->dtype == DPT_I32 ? data->num_classes : per_sample(target);
    int64_t hidden[MLP_MAX_LAYERS];
    int nhidden = dpt_config_int_list(cfg, "model", "hidden", hidden, MLP_MAX_LAYERS - 1);
    if (nhidden > MLP_MAX_LAYERS - 1) {
        dpt_errorf(err, "%s: [model] hidden lists %d layers; mlp supports at most %d",
                   dpt_config_where(cfg, "model", "hidden"), nhidden, MLP_MAX_LAYERS - 1);
        return NULL;
    }
    dpt_model *model = dpt_model_new(ctx, "mlp", mlp_forward);
    mlp *net = dpt_model_alloc(model, sizeof *net);
    dpt_model_set_state(model, net);
    net->gelu = dpt_config_enum(cfg, "model", "activation") == 1; /* relu|gelu */
    int64_t in = per_sample(input);
    char summary[256];
    int used = snprintf(summary, sizeof summary, "%lld", (long long)in);
    for (int i = 0; i <= nhidden; i++) {
        int64_t out = i < nhidden ? hidden[i] : outputs;
        char name[32];
        snprintf(name, sizeof name, "fc%d", i + 1);
        net->layers[net->nlayers++] = dpt_linear_new(model, name, in, out, true);
        if (used < (int)sizeof summary)
            used += snprintf(summary + used, sizeof summary - (size_t)used, "-%lld", (long long)out);
        in = out;
    }
    if (used < (int)sizeof summary)
        snprintf(summary + used, sizeof summary - (size_t)used, " %s", net->gelu ? "gelu" : "relu");
    dpt_model_set_summary(model, summary);
    return model;
}

/* [model] keys the mlp reads */
static const dpt_config_key mlp_keys[] = {
    {NULL, "hidden", DPT_KEY_INT_LIST, "256,256", 1, 65536, NULL, "hidden layer widths, comma separated", 0},
    {NULL, "activation", DPT_KEY_ENUM, "relu", 1, 0, "relu|gelu", "activation between layers", 0},
};

static const dpt_model_impl mlp_impl = {.build = mlp_build};
DPT_BUILTIN(model_mlp) = {DPT_KIND_MODEL, "mlp", "multi-layer perceptron: flatten, hidden linear layers with relu or gelu, a linear classifier", mlp_keys, DPT_COUNT(mlp_keys), &mlp_impl};
