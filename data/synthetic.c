/* synthetic.c: random images of any shape, for throughput benchmarks (e.g. ImageNet-shaped
 * 3x224x224) without a data set on disk. */
#include <stdlib.h>
#include <unistd.h>

#include "dpt.h"
#include "../runtime/error.h"
#include "../runtime/registry.h"
#include "../runtime/rng.h"

dpt_dataset *dpt_synthetic_new(int64_t n, int64_t c, int64_t h, int64_t w, int num_classes, uint64_t seed)
{
    dpt_dataset *ds = calloc(1, sizeof *ds);
    if (!ds) dpt_fatal("out of host memory for a dataset");
    ds->n = n, ds->c = c, ds->h = h, ds->w = w, ds->num_classes = num_classes;
    snprintf(ds->name, sizeof ds->name, "synthetic");
    ds->origin = "synthetic (random images, no files)"; /* the data line: no [data] dir is read */
    size_t bytes = (size_t)(n * c * h * w);
    ds->images = malloc(bytes);
    ds->labels = malloc((size_t)n * sizeof *ds->labels);
    if (!ds->images || !ds->labels) dpt_fatal("out of host memory for %zu bytes of synthetic images", bytes);
    dpt_rng rng;
    dpt_rng_seed(&rng, seed);
    for (size_t i = 0; i < bytes; i += 8) {
        uint64_t r = dpt_rng_next(&rng);
        for (size_t j = 0; j < 8 && i + j < bytes; j++)
            ds->images[i + j] = (uint8_t)(r >> (8 * j));
    }
    for (int64_t i = 0; i < n; i++)
        ds->labels[i] = (int32_t)dpt_rng_below(&rng, (uint64_t)num_classes);
    return ds;
}

/* ---------------------------------------------------------------- [data] source = synthetic */

static bool synthetic_open(const dpt_config *cfg, dpt_dataset **train, dpt_dataset **test, dpt_error *err)
{
    int64_t shape[3];
    if (dpt_config_int_list(cfg, "data", "synthetic_shape", shape, 3) != 3)
        return dpt_errorf(err, "%s: [data] synthetic_shape needs 3 values (channels, height, width)",
                          dpt_config_where(cfg, "data", "synthetic_shape"));
    int64_t n = dpt_config_int(cfg, "data", "synthetic_samples");
    int classes = (int)dpt_config_int(cfg, "data", "synthetic_classes");
    /* The images live in host memory as bytes: refuse a set this machine cannot hold,
     * naming the keys, instead of failing inside the allocation. */
    int64_t bytes = 0;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    double ram = pages > 0 && page > 0 ? (double)pages * (double)page : 0;
    if (__builtin_mul_overflow(n + n / 4, shape[0] * shape[1] * shape[2], &bytes) ||
        (ram && (double)bytes > ram))
        return dpt_errorf(
            err,
            "%s: [data] synthetic_samples = %lld of shape %lld x %lld x %lld (%s) need %.1f GiB of "
            "images (train and test), more than this machine's %.1f GiB\nHINT: lower [data] "
            "synthetic_samples; throughput runs need only a few batches of them",
            dpt_config_where(cfg, "data", "synthetic_samples"), (long long)n, (long long)shape[0],
            (long long)shape[1], (long long)shape[2], dpt_config_where(cfg, "data", "synthetic_shape"),
            (double)(n + n / 4) * (double)(shape[0] * shape[1] * shape[2]) / 1073741824.0,
            ram / 1073741824.0);
    uint64_t seed = (uint64_t)dpt_config_int(cfg, "train", "seed");
    *train = dpt_synthetic_new(n, shape[0], shape[1], shape[2], classes, seed);
    *test = dpt_synthetic_new(n / 4 > 0 ? n / 4 : 1, shape[0], shape[1], shape[2], classes, seed + 1);
    return true;
}

static const dpt_data_impl synthetic_impl = {.open = synthetic_open};
static const dpt_config_key synthetic_keys[] = {
    {NULL, "synthetic_shape", DPT_KEY_INT_LIST, "3,224,224", 1, 4096, NULL,
     "channels, height, width of each image", 0},
    {NULL, "synthetic_samples", DPT_KEY_INT, "1024", 1, 1e8, NULL,
     "training samples (the test set has a quarter)", 0},
    {NULL, "synthetic_classes", DPT_KEY_INT, "1000", 2, 1e6, NULL, "number of classes", 0},
};
DPT_BUILTIN(data_synthetic) = {DPT_KIND_DATA, "synthetic", "random images of any shape (throughput runs)",
                               synthetic_keys, DPT_COUNT(synthetic_keys), &synthetic_impl};
