/* synthetic.c: random images of any shape, for throughput benchmarks (e.g. ImageNet-shaped
 * 3x224x224) without a data set on disk. */
#include <stdlib.h>

#include "dpt.h"
#include "../runtime/error.h"
#include "../runtime/rng.h"

dpt_dataset *dpt_synthetic_new(int64_t n, int64_t c, int64_t h, int64_t w, int num_classes, uint64_t seed)
{
    dpt_dataset *ds = calloc(1, sizeof *ds);
    if (!ds) dpt_fatal("out of host memory for a dataset");
    ds->n = n, ds->c = c, ds->h = h, ds->w = w, ds->num_classes = num_classes;
    snprintf(ds->name, sizeof ds->name, "synthetic");
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
