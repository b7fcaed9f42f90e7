/* regression.c: [data] source = regression, a synthetic regression task made one sample at a
 * time from its index: x ~ U(-1, 1)^features, y = f(W x + b) + noise, with W and b drawn once
 * from the seed (f: identity or sin). No file, no storage: every rank and every resume sees
 * the same samples. Its task: the mse loss, throughput in samples/s. */
#include <math.h>
#include <stdlib.h>

#include "dpt.h"
#include "../runtime/error.h"
#include "../runtime/registry.h"
#include "../runtime/rng.h"

typedef struct regression {
    int64_t features, outputs;
    bool sine;
    float noise;
    uint64_t seed; /* the samples' (the train and test sets differ) */
    float *w, *b;  /* (outputs, features), (outputs): the same for both sets */
} regression;

static void regression_free(void *source)
{
    regression *r = source;
    if (!r) return;
    free(r->w);
    free(r->b);
    free(r);
}

/* Sample i: its draw seeded by (seed, i) alone, so any order, rank or resume gives it back. */
static void regression_get(const dpt_dataset *ds, int64_t index, void *const *dst)
{
    const regression *r = ds->source;
    float *x = dst[0], *y = dst[1];
    dpt_rng rng;
    uint64_t key[2] = {r->seed, (uint64_t)index};
    dpt_rng_seed(&rng, dpt_hash_bytes(DPT_HASH_SEED, key, sizeof key));
    for (int64_t j = 0; j < r->features; j++)
        x[j] = 2.0f * dpt_rng_uniform(&rng) - 1.0f;
    for (int64_t k = 0; k < r->outputs; k++) {
        double z = r->b[k];
        for (int64_t j = 0; j < r->features; j++)
            z += (double)r->w[k * r->features + j] * x[j];
        /* Gaussian noise from two uniforms (Box-Muller) */
        double u1 = dpt_rng_uniform(&rng) + 1e-12, u2 = dpt_rng_uniform(&rng);
        double n = sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
        y[k] = (float)((r->sine ? sin(z) : z) + r->noise * n);
    }
}

static dpt_dataset *make_set(const regression *shape, uint64_t seed, int64_t n, const char *name)
{
    dpt_dataset *ds = calloc(1, sizeof *ds);
    regression *r = calloc(1, sizeof *r);
    if (!ds || !r) dpt_fatal("out of host memory for a data set");
    *r = *shape;
    r->seed = seed;
    r->w = malloc((size_t)(r->outputs * r->features) * sizeof *r->w);
    r->b = malloc((size_t)r->outputs * sizeof *r->b);
    if (!r->w || !r->b) dpt_fatal("out of host memory for a data set");
    for (int64_t i = 0; i < r->outputs * r->features; i++)
        r->w[i] = shape->w[i];
    for (int64_t k = 0; k < r->outputs; k++)
        r->b[k] = shape->b[k];
    ds->n = n;
    snprintf(ds->name, sizeof ds->name, "%s", name);
    ds->nfields = 2;
    ds->fields[0] = (dpt_field){.name = "x", .dtype = DPT_F32, .ndim = 1, .shape = {r->features}};
    ds->fields[1] = (dpt_field){.name = "y", .dtype = DPT_F32, .ndim = 1, .shape = {r->outputs}, .target = true};
    ds->get = regression_get;
    ds->source = r;
    ds->free_source = regression_free;
    ds->task = (dpt_task){.loss = "mse", .unit = "samples"};
    return ds;
}

static bool regression_open(const dpt_config *cfg, dpt_dataset **train, dpt_dataset **test, dpt_error *err)
{
    regression shape = {
        .features = dpt_config_int(cfg, "data", "regression_features"),
        .outputs = dpt_config_int(cfg, "data", "regression_outputs"),
        .sine = dpt_config_enum(cfg, "data", "regression_function") == 1,
        .noise = (float)dpt_config_float(cfg, "data", "regression_noise"),
    };
    int64_t n = dpt_config_int(cfg, "data", "regression_samples");
    uint64_t seed = (uint64_t)dpt_config_int(cfg, "train", "seed");
    /* W with rows of unit norm on average, so W x + b stays O(1) whatever the features */
    float *w = malloc((size_t)(shape.outputs * shape.features) * sizeof *w), *b = malloc((size_t)shape.outputs * sizeof *b);
    if (!w || !b) dpt_fatal("out of host memory for a data set");
    dpt_rng rng;
    dpt_rng_seed(&rng, seed ^ 0x5eed5eed5eed5eedULL);
    float scale = (float)sqrt(3.0 / (double)shape.features);
    for (int64_t i = 0; i < shape.outputs * shape.features; i++)
        w[i] = scale * (2.0f * dpt_rng_uniform(&rng) - 1.0f);
    for (int64_t k = 0; k < shape.outputs; k++)
        b[k] = 0.5f * (2.0f * dpt_rng_uniform(&rng) - 1.0f);
    shape.w = w, shape.b = b;
    *train = make_set(&shape, seed + 1, n, "regression train");
    *test = make_set(&shape, seed + 2, n / 4 > 0 ? n / 4 : 1, "regression test");
    free(w), free(b);
    (void)err;
    return true;
}

static const dpt_data_impl regression_impl = {.open = regression_open};

static const dpt_config_key regression_keys[] = {
    {NULL, "regression_features", DPT_KEY_INT, "8", 1, 1 << 20, NULL, "the inputs x of a sample", 0},
    {NULL, "regression_outputs", DPT_KEY_INT, "1", 1, 1 << 16, NULL, "the targets y of a sample", 0},
    {NULL, "regression_samples", DPT_KEY_INT, "4096", 1, 1e9, NULL,
     "training samples (the test set has a quarter, drawn apart)", 0},
    {NULL, "regression_function", DPT_KEY_ENUM, "linear", 1, 0, "linear|sine", "y = W x + b, or sin(W x + b)", 0},
    {NULL, "regression_noise", DPT_KEY_FLOAT, "0.01", 0, 100, NULL,
     "standard deviation of the Gaussian noise added to y (the best mse is its square)", 0},
};
DPT_BUILTIN(data_regression) = {DPT_KIND_DATA, "regression", "y = f(W x + b) + noise on random x, for an mse model",
                                regression_keys, DPT_COUNT(regression_keys), &regression_impl};
