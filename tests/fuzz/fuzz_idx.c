/* fuzz_idx.c: the IDX reader (raw and gzip). Input: a 2-byte little-endian length L, then L
 * bytes of the images file, then the labels file. */
#include "tests/fuzz/fuzz_common.h"
#include "dpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    size_t images_len = ((size_t)data[0] | (size_t)data[1] << 8) % (size - 1);
    char images[64], labels[64];
    int fd_i = fuzz_file(data + 2, images_len, images, sizeof images);
    int fd_l = fuzz_file(data + 2 + images_len, size - 2 - images_len, labels, sizeof labels);
    dpt_error err;
    dpt_dataset *ds = dpt_idx_load(images, labels, &err);
    if (ds) {
        for (int64_t i = 0; i < ds->n; i++) /* every label and pixel is readable */
            if (ds->labels[i] < 0 || ds->labels[i] > 255) abort();
        volatile uint8_t sink = ds->images[ds->n * ds->c * ds->h * ds->w - 1];
        (void)sink;
        dpt_dataset_free(ds);
    } else if (!err.msg[0]) {
        abort();
    }
    close(fd_i);
    close(fd_l);
    return 0;
}
