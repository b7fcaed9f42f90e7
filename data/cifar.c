/* cifar.c: the CIFAR-10 binary version: each record is 1 label byte and 3072 pixel bytes
 * (1024 red, 1024 green, 1024 blue, row-major 32x32), 10000 records per file. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dpt.h"
#include "data.h"
#include "../runtime/error.h"
#include "../runtime/registry.h"

#define CIFAR_RECORD 3073

dpt_dataset *dpt_cifar_load(const char *const *paths, int npaths, dpt_error *err)
{
    int64_t total = 0, sizes[16];
    if (npaths > 16) {
        dpt_errorf(err, "at most 16 CIFAR files, got %d", npaths);
        return NULL;
    }
    for (int i = 0; i < npaths; i++) {
        int fd = open(paths[i], O_RDONLY | O_NONBLOCK); /* a FIFO must not block the open */
        FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
        if (!f) {
            if (fd >= 0) close(fd);
            dpt_errorf(err,
                       "cannot open CIFAR file %s: %s\nHINT: download the CIFAR-10 binary version and set "
                       "[data] dir to the folder holding data_batch_1.bin ... test_batch.bin",
                       paths[i], strerror(errno));
            return NULL;
        }
        struct stat st;
        if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
            fclose(f);
            dpt_errorf(
                err,
                "CIFAR file %s is not a regular file (a folder, FIFO or device)\nHINT: [data] dir must "
                "hold data_batch_1.bin ... data_batch_5.bin and test_batch.bin",
                paths[i]);
            return NULL;
        }
        sizes[i] = (int64_t)st.st_size;
        dpt_input_note(paths[i], "the CIFAR file", false);
        fclose(f);
        if (sizes[i] <= 0 || sizes[i] % CIFAR_RECORD) {
            dpt_errorf(err,
                       "%s: %lld bytes is not a whole number of %d-byte CIFAR records\nHINT: the file is "
                       "truncated or not the CIFAR-10 binary version",
                       paths[i], (long long)sizes[i], CIFAR_RECORD);
            return NULL;
        }
        total += sizes[i] / CIFAR_RECORD;
    }
    dpt_dataset *ds = calloc(1, sizeof *ds);
    if (!ds) dpt_fatal("out of host memory for a dataset");
    ds->n = total, ds->c = 3, ds->h = 32, ds->w = 32, ds->num_classes = 10;
    snprintf(ds->name, sizeof ds->name, "cifar10");
    ds->images = malloc((size_t)total * 3072);
    ds->labels = malloc((size_t)total * sizeof *ds->labels);
    uint8_t *record = malloc(CIFAR_RECORD);
    if (!ds->images || !ds->labels || !record) dpt_fatal("out of host memory for CIFAR");
    int64_t k = 0;
    for (int i = 0; i < npaths; i++) {
        FILE *f = fopen(paths[i], "rb");
        for (int64_t r = 0; f && r < sizes[i] / CIFAR_RECORD; r++, k++) {
            if (fread(record, 1, CIFAR_RECORD, f) != CIFAR_RECORD || record[0] > 9) {
                dpt_errorf(err, "%s: record %lld is unreadable or has label %d (CIFAR-10 labels are 0-9)",
                           paths[i], (long long)r, record[0]);
                fclose(f);
                free(record);
                dpt_dataset_free(ds);
                return NULL;
            }
            ds->labels[k] = record[0];
            memcpy(ds->images + k * 3072, record + 1, 3072);
        }
        if (f) fclose(f);
    }
    free(record);
    return ds;
}

/* ---------------------------------------------------------------- [data] source = cifar */

static bool cifar_open(const dpt_config *cfg, dpt_dataset **train, dpt_dataset **test, dpt_error *err)
{
    if (!dpt_data_require_dir(cfg,
                              "download the CIFAR-10 binary version and point [data] dir at the folder with "
                              "data_batch_1.bin ... test_batch.bin",
                              err))
        return false;
    const char *dir = dpt_config_str(cfg, "data", "dir");
    char names[6][2048];
    const char *paths[6];
    for (int i = 0; i < 5; i++) {
        snprintf(names[i], sizeof names[i], "%s/data_batch_%d.bin", dir, i + 1);
        paths[i] = names[i];
    }
    snprintf(names[5], sizeof names[5], "%s/test_batch.bin", dir);
    paths[5] = names[5];
    *train = dpt_cifar_load(paths, 5, err);
    if (!*train) return false;
    *test = dpt_cifar_load(paths + 5, 1, err);
    if (!*test) return false;
    return dpt_data_check_classes(cfg, *train, *test, "the CIFAR training files", "test_batch.bin", err);
}

static const dpt_data_impl cifar_impl = {.open = cifar_open};
DPT_BUILTIN(data_cifar) = {DPT_KIND_DATA, "cifar", "CIFAR-10 binary batches in [data] dir", NULL, 0, &cifar_impl};
