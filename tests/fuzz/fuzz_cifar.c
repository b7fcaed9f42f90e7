/* fuzz_cifar.c: the CIFAR-10 binary reader, the input as one batch file. */
#include "tests/fuzz/fuzz_common.h"
#include "dpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = fuzz_file(data, size, path, sizeof path);
    const char *paths[1] = {path};
    dpt_error err;
    dpt_dataset *ds = dpt_cifar_load(paths, 1, &err);
    if (ds) {
        if (ds->n != (int64_t)(size / 3073)) abort();
        for (int64_t i = 0; i < ds->n; i++)
            if (ds->labels[i] < 0 || ds->labels[i] > 9) abort();
        dpt_dataset_free(ds);
    } else if (!err.msg[0]) {
        abort();
    }
    close(fd);
    return 0;
}
