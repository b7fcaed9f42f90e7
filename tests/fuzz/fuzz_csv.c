/* fuzz_csv.c: [data] source = csv and --predict --input over the same reader. Input: one byte
 * choosing the task, the header and delimiter rules, standardisation, the target and the split,
 * one choosing missing values, categorical columns and a multi-label task (its targets 0 or 1,
 * its header line's label counts), then the file's text. Every input must give sets whose
 * every sample has finite features and a label below the class count (or finite targets), or an error naming
 * the file; the same file as
 * --input must give the test set's own features, bit for bit, when it is the test file. */
#include "tests/fuzz/fuzz_common.h"
#include <math.h>

#include "dpt.h"
#include "data/data.h"

static void read_all(const dpt_dataset *ds, float *x, float *y, int32_t *label)
{
    int64_t f = ds->fields[0].shape[0], t = ds->fields[1].dtype == DPT_I32 ? 1 : ds->fields[1].shape[0];
    for (int64_t i = 0; i < ds->n; i++) {
        ds->get(ds, i,
                (void *[]){x + i * f,
                           ds->fields[1].dtype == DPT_I32 ? (void *)(label + i) : (void *)(y + i * t)});
        for (int64_t j = 0; j < f; j++)
            if (!isfinite(x[i * f + j])) abort();
        if (ds->fields[1].dtype == DPT_I32 && (label[i] < 0 || label[i] >= ds->num_classes)) abort();
        for (int64_t j = 0; ds->fields[1].dtype == DPT_F32 && j < t; j++)
            if (!isfinite(y[i * t + j]) || (ds->label_positives && y[i * t + j] != 0 && y[i * t + j] != 1)) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    uint8_t o = data[0], o2 = data[1];
    char path[64], set[11][128];
    int fd = fuzz_file(data + 2, size - 2, path, sizeof path);
    static const char *categorical[] = {"auto", "none", "0", "1,0"};
    static const char *targets[] = {"-1", "0", "y", "-1,0"};
    static const char *headers[] = {"auto", "yes", "no", "auto"};
    static const char *delims[] = {"auto", "comma", "semicolon", "tab"};
    bool held_out = o & 0x80;
    snprintf(set[0], sizeof set[0], "data.source=csv");
    snprintf(set[1], sizeof set[1], "data.csv_train=%s", path);
    snprintf(set[2], sizeof set[2], "data.csv_test=%s", held_out ? "" : path);
    snprintf(set[3], sizeof set[3], "data.csv_task=%s",
             o2 & 8 ? "multilabel" : o & 1 ? "regression" : "classification");
    snprintf(set[4], sizeof set[4], "data.csv_header=%s", headers[(o >> 1) & 3]);
    snprintf(set[5], sizeof set[5], "data.csv_delimiter=%s", delims[(o >> 3) & 3]);
    snprintf(set[6], sizeof set[6], "data.csv_target=%s", targets[(o >> 5) & 3]);
    snprintf(set[7], sizeof set[7], "data.csv_standardize=%s", o & 0x40 ? "false" : "true");
    snprintf(set[8], sizeof set[8], "data.csv_test_fraction=0.5");
    snprintf(set[9], sizeof set[9], "data.csv_missing=%s", o2 & 1 ? "mean" : "stop");
    snprintf(set[10], sizeof set[10], "data.csv_categorical=%s", categorical[(o2 >> 1) & 3]);
    dpt_config *cfg = dpt_config_defaults();
    dpt_error err;
    for (int i = 0; i < 11; i++)
        if (!dpt_config_set(cfg, set[i], &err)) abort();
    dpt_dataset *train = NULL, *test = NULL, *input = NULL;
    if (dpt_data_open(cfg, &train, &test, &err)) {
        if (train->n < 1 || test->n < 1) abort();
        int64_t f = train->fields[0].shape[0],
                t = train->fields[1].dtype == DPT_I32 ? 1 : train->fields[1].shape[0];
        int64_t most = train->n > test->n ? train->n : test->n;
        float *x = malloc((size_t)(most * f) * sizeof *x), *y = malloc((size_t)(most * t) * sizeof *y);
        float *xi = malloc((size_t)(most * f) * sizeof *xi), *yi = malloc((size_t)(most * t) * sizeof *yi);
        int32_t *label = malloc((size_t)most * sizeof *label);
        if (!x || !y || !xi || !yi || !label) abort();
        read_all(train, x, y, label);
        read_all(test, x, y, label);
        char classes[1024]; /* the header's line: one line of printable bytes */
        dpt_dataset_describe_classes(train, classes, sizeof classes);
        for (const char *c = classes; *c; c++)
            if ((unsigned char)*c < 0x20) abort();
        if ((o2 & 8) && !train->label_positives) abort();
        /* the file as --input: all its columns, so the training layout; the test set's rows */
        if (!dpt_csv_open_input(path, test, &input, &err)) abort();
        if (!input->unlabelled) abort();
        if (!held_out) {
            if (input->n != test->n) abort();
            read_all(input, xi, yi, label);
            if (memcmp(x, xi, (size_t)(test->n * f) * sizeof *x)) abort();
        }
        dpt_dataset_free(input);
        free(x), free(y), free(xi), free(yi), free(label);
        dpt_dataset_free(train), dpt_dataset_free(test);
    } else {
        if (!err.msg[0] || (!strstr(err.msg, path) && !strstr(err.msg, "[data]")))
            abort(); /* refused, named */
    }
    dpt_config_free(cfg);
    close(fd);
    return 0;
}
