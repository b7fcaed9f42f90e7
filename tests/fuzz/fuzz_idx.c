/* fuzz_idx.c: the IDX reader (raw and gzip), whole and a prefix of its images. Input: a 2-byte little-endian length L, then L
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
    for (int prefix = 0; prefix < 2; prefix++) { /* whole, then only the first 1-3 images (train_limit) */
        dpt_dataset *ds = prefix ? dpt_idx_load_first(images, labels, 1 + (int64_t)(size % 3), &err)
                                 : dpt_idx_load(images, labels, &err);
        if (ds) {
            int64_t held = ds->n_file ? ds->n_file : ds->n;
            if (held < ds->n) abort();
            for (int64_t i = 0; i < held; i++) /* every label and pixel is readable */
                if (ds->labels[i] < 0 || ds->labels[i] > 255) abort();
            volatile uint8_t sink = ds->images[ds->n * ds->c * ds->h * ds->w - 1];
            (void)sink;
            dpt_dataset_free(ds);
        } else if (!err.msg[0]) {
            abort();
        }
    }
    close(fd_i);
    close(fd_l);
    return 0;
}
