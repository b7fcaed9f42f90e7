/* idx.c: MNIST / Fashion-MNIST IDX files, read through zlib (gzip or raw, decided by the
 * content). Header: 0x0000 magic, type byte 0x08 (ubyte), ndim byte, ndim big-endian u32 dims. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "dpt.h"
#include "folder.h"
#include "data.h"
#include "../runtime/error.h"
#include "../runtime/registry.h"

#define IDX_HINT                                                                                             \
    "HINT: install the Fashion-MNIST files with 'make deps' (Debian package "                                \
    "dataset-fashion-mnist) or point [data] dir at a folder holding them"

/* 64 GiB: far beyond any IDX data set, far below what could overflow a size. */
#define IDX_MAX_BYTES ((int64_t)1 << 36)

typedef struct idx_file {
    int ndim;
    int64_t dims[4];
    int64_t count; /* product of dims */
    int64_t items; /* of dims[0], those read into data (all, or the first asked for) */
    uint8_t *data;
} idx_file;

static bool gz_fail(dpt_error *err, gzFile gz, const char *path, const char *what)
{
    int code = 0;
    const char *msg = gzerror(gz, &code);
    return dpt_errorf(err,
                      "%s: %s (%s)\nHINT: the file is truncated or corrupt; re-install it or "
                      "download it again",
                      path, what, code == Z_ERRNO ? strerror(errno) : msg);
}

/* Read exactly n bytes; false if the stream ends early or is corrupt. */
static bool read_exact(gzFile gz, void *buf, int64_t n, int64_t *got)
{
    uint8_t *p = buf;
    *got = 0;
    while (*got < n) {
        int64_t chunk = n - *got > (1 << 30) ? (1 << 30) : n - *got;
        int r = gzread(gz, p + *got, (unsigned)chunk);
        if (r <= 0) return false;
        *got += r;
    }
    return true;
}

/* The file's header and its first `first` items (dims[0]; 0 or more than it holds: all). A
 * prefix is read as far as it goes: what follows it, the gzip trailer's CRC included, is not
 * decompressed (its damage is not seen); the whole file is checked to its last byte. */
static bool idx_read(const char *path, int want_ndim, int64_t first, idx_file *out, dpt_error *err)
{
    memset(out, 0, sizeof *out);
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return dpt_errorf(err, "data file %s is not a regular file (a folder, FIFO or device)\n" IDX_HINT,
                          path);
    gzFile gz = gzopen(path, "rb");
    if (!gz)
        return dpt_errorf(err, "cannot open data file %s: %s\n" IDX_HINT, path,
                          errno ? strerror(errno) : "out of memory");
    bool ok = false;
    uint8_t header[4], dimbuf[16];
    int64_t got;
    if (!read_exact(gz, header, 4, &got)) {
        int code;
        gzerror(gz, &code);
        if (code != Z_OK && code != Z_BUF_ERROR)
            gz_fail(err, gz, path, "cannot read the IDX header");
        else
            dpt_errorf(err, "%s: file too short for an IDX header (%lld bytes)\n" IDX_HINT, path,
                       (long long)got);
        goto close;
    }
    if (header[0] != 0 || header[1] != 0 || header[2] != 0x08 || header[3] != want_ndim) {
        dpt_errorf(err,
                   "%s: wrong IDX magic %02x %02x %02x %02x: expected 00 00 08 %02x (unsigned "
                   "bytes, %d dimensions: %s)\nHINT: check that [data] names an IDX %s file",
                   path, header[0], header[1], header[2], header[3], want_ndim, want_ndim,
                   want_ndim == 3 ? "images" : "labels", want_ndim == 3 ? "image" : "label");
        goto close;
    }
    if (!read_exact(gz, dimbuf, 4 * want_ndim, &got)) {
        dpt_errorf(err, "%s: file ends inside the IDX header\n" IDX_HINT, path);
        goto close;
    }
    out->ndim = want_ndim;
    out->count = 1;
    for (int d = 0; d < want_ndim; d++) {
        uint32_t v = (uint32_t)dimbuf[4 * d] << 24 | (uint32_t)dimbuf[4 * d + 1] << 16 |
                     (uint32_t)dimbuf[4 * d + 2] << 8 | dimbuf[4 * d + 3];
        if (v == 0 || v > (1u << 28)) {
            dpt_errorf(
                err,
                "%s: IDX dimension %d is %u, not a plausible size\nHINT: the file is not a valid IDX file",
                path, d, v);
            goto close;
        }
        out->dims[d] = v;
        /* Checked multiplication: three dimensions below 2^28 can still overflow int64. */
        if (__builtin_mul_overflow(out->count, (int64_t)v, &out->count) || out->count > IDX_MAX_BYTES) {
            dpt_errorf(
                err,
                "%s: IDX header claims %u x ... dimensions, more than %lld bytes of data\nHINT: the file "
                "is not a valid IDX file",
                path, (unsigned)out->dims[0], (long long)IDX_MAX_BYTES);
            goto close;
        }
    }
    out->items = first > 0 && first < out->dims[0] ? first : out->dims[0];
    int64_t want = out->count / out->dims[0] * out->items;
    /* The buffer grows with the data that really arrives, so a header that lies about the size
     * costs only what the file holds. */
    int64_t cap = want < ((int64_t)1 << 24) ? want : ((int64_t)1 << 24);
    out->data = malloc((size_t)cap);
    if (!out->data) {
        dpt_errorf(err, "%s: out of memory for %lld bytes", path, (long long)cap);
        goto close;
    }
    for (int64_t have = 0; have < want;) {
        if (have == cap) {
            cap = cap * 2 < want ? cap * 2 : want;
            uint8_t *grown = realloc(out->data, (size_t)cap);
            if (!grown) {
                dpt_errorf(err, "%s: out of memory for %lld bytes of data", path, (long long)cap);
                goto free_data;
            }
            out->data = grown;
        }
        if (!read_exact(gz, out->data + have, cap - have, &got)) {
            int code;
            gzerror(gz, &code);
            if (code != Z_OK && code != Z_BUF_ERROR)
                gz_fail(err, gz, path, "cannot decompress the data");
            else
                dpt_errorf(err,
                           "%s: the header promises %lld bytes of data but the file holds %lld\n"
                           "HINT: the file is truncated; re-install or download it again",
                           path, (long long)out->count, (long long)(have + got));
            goto free_data;
        }
        have = cap;
    }
    if (want < out->count) goto done; /* a prefix: the rest stays unread */
    uint8_t extra;
    int r = gzread(gz, &extra, 1);
    if (r > 0) {
        dpt_errorf(err,
                   "%s: the file holds more than the %lld data bytes its header promises\n"
                   "HINT: the file is not a valid IDX file",
                   path, (long long)out->count);
        goto free_data;
    }
    if (r < 0) { /* e.g. a bad CRC in the gzip trailer, seen only at the end of the stream */
        gz_fail(err, gz, path, "corrupt gzip stream");
        goto free_data;
    }
done:
    ok = true;
    dpt_input_note(path, "the data file", false);
    goto close;
free_data:
    free(out->data);
    out->data = NULL;
close:
    gzclose(gz);
    return ok;
}

dpt_dataset *dpt_idx_load(const char *images_path, const char *labels_path, dpt_error *err)
{
    return dpt_idx_load_first(images_path, labels_path, 0, err);
}

dpt_dataset *dpt_idx_load_first(const char *images_path, const char *labels_path, int64_t first, dpt_error *err)
{
    idx_file images, labels;
    if (!idx_read(images_path, 3, first, &images, err)) return NULL;
    if (!idx_read(labels_path, 1, 0, &labels, err)) {
        free(images.data);
        return NULL;
    }
    dpt_dataset *ds = NULL;
    if (images.dims[0] != labels.dims[0]) {
        dpt_errorf(err,
                   "%s holds %lld images but %s holds %lld labels\nHINT: the two files must "
                   "come from the same split (train or t10k)",
                   images_path, (long long)images.dims[0], labels_path, (long long)labels.dims[0]);
        goto fail;
    }
    int max_label = 0;
    for (int64_t i = 0; i < labels.count; i++)
        if (labels.data[i] > max_label) max_label = labels.data[i];
    if (max_label > 254) {
        dpt_errorf(err, "%s: label %d is not a class index", labels_path, max_label);
        goto fail;
    }
    ds = calloc(1, sizeof *ds);
    if (!ds) dpt_fatal("out of host memory for a dataset");
    ds->n = images.items;
    if (images.items < images.dims[0]) ds->n_file = images.dims[0]; /* its labels all read, as below */
    ds->c = 1;
    ds->h = images.dims[1];
    ds->w = images.dims[2];
    ds->images = images.data;
    ds->labels = malloc((size_t)labels.count * sizeof *ds->labels);
    if (!ds->labels) dpt_fatal("out of host memory for labels");
    for (int64_t i = 0; i < labels.count; i++)
        ds->labels[i] = labels.data[i];
    /* MNIST-style sets have 10 classes; a subset may not show the largest one. */
    ds->num_classes = max_label + 1 > 10 ? max_label + 1 : 10;
    snprintf(ds->name, sizeof ds->name, "idx");
    free(labels.data);
    return ds;
fail:
    free(images.data);
    free(labels.data);
    return NULL;
}

/* ---------------------------------------------------------------- [data] source = idx */

bool dpt_idx_open_input(const char *path, const dpt_dataset *like, dpt_dataset **out, dpt_error *err)
{
    idx_file images;
    *out = NULL;
    if (!idx_read(path, 3, 0, &images, err)) {
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        return dpt_errorf(err, "--input: %s\nHINT: --input takes an IDX image file (magic 0x803, as "
                               "t10k-images-idx3-ubyte.gz) for this config's idx data",
                          msg);
    }
    if (images.dims[1] != like->h || images.dims[2] != like->w) {
        free(images.data);
        return dpt_errorf(err, "--input %s: images of %lld x %lld, and the model reads %lld x %lld (its data's)\n"
                               "HINT: the images must have the training images' size",
                          path, (long long)images.dims[1], (long long)images.dims[2], (long long)like->h,
                          (long long)like->w);
    }
    dpt_dataset *ds = calloc(1, sizeof *ds);
    if (!ds) dpt_fatal("out of host memory for a dataset");
    ds->n = images.dims[0], ds->c = 1, ds->h = images.dims[1], ds->w = images.dims[2];
    ds->images = images.data;
    ds->labels = calloc((size_t)ds->n + 1, sizeof *ds->labels); /* no labels: 0 for the loader */
    if (!ds->labels) dpt_fatal("out of host memory for labels");
    ds->num_classes = like->num_classes, ds->task = like->task, ds->unlabelled = true;
    snprintf(ds->name, sizeof ds->name, "idx");
    *out = ds;
    return true;
}

static bool idx_open(const dpt_config *cfg, dpt_dataset **train, dpt_dataset **test, dpt_error *err)
{
    if (!dpt_data_require_dir(cfg,
                              "install the data set with 'make deps' (Debian package dataset-fashion-mnist, files "
                              "under /usr/share/datasets/fashion-mnist) or set [data] dir to your copy",
                              err))
        return false;
    const char *dir = dpt_config_str(cfg, "data", "dir");
    char *train_images = dpt_data_join(dir, dpt_config_str(cfg, "data", "train_images"));
    char *train_labels = dpt_data_join(dir, dpt_config_str(cfg, "data", "train_labels"));
    char *images = dpt_data_join(dir, dpt_config_str(cfg, "data", "test_images"));
    char *labels = dpt_data_join(dir, dpt_config_str(cfg, "data", "test_labels"));
    /* [data] train_limit and test_limit: only the images used are decompressed (3,000 of
     * Fashion-MNIST's 60,000: a start 0.47 -> 0.15 s); the labels are read whole, so the classes
     * are the whole set's whatever the limit */
    bool ok = (*train = dpt_idx_load_first(train_images, train_labels, dpt_config_int(cfg, "data", "train_limit"), err)) &&
              (*test = dpt_idx_load_first(images, labels, dpt_config_int(cfg, "data", "test_limit"), err));
    if (ok && ((*train)->c != (*test)->c || (*train)->h != (*test)->h || (*train)->w != (*test)->w))
        ok = dpt_errorf(err,
                        "train images are %lldx%lld but test images (%s) are %lldx%lld\nHINT: the train and test "
                        "files must come from the same data set",
                        (long long)(*train)->h, (long long)(*train)->w, images, (long long)(*test)->h,
                        (long long)(*test)->w);
    ok = ok && dpt_data_check_classes(cfg, *train, *test, train_labels, labels, err);
    free(train_images), free(train_labels), free(images), free(labels);
    return ok;
}

static const dpt_data_impl idx_impl = {.open = idx_open};
static const dpt_config_key idx_keys[] = {
    {NULL, "train_images", DPT_KEY_STRING, "train-images-idx3-ubyte.gz", 1, 0, NULL,
     "training images, relative to dir", 0},
    {NULL, "train_labels", DPT_KEY_STRING, "train-labels-idx1-ubyte.gz", 1, 0, NULL,
     "training labels, relative to dir", 0},
    {NULL, "test_images", DPT_KEY_STRING, "t10k-images-idx3-ubyte.gz", 1, 0, NULL,
     "test images, relative to dir", 0},
    {NULL, "test_labels", DPT_KEY_STRING, "t10k-labels-idx1-ubyte.gz", 1, 0, NULL,
     "test labels, relative to dir", 0},
};
DPT_BUILTIN(data_idx) = {DPT_KIND_DATA, "idx", "MNIST / Fashion-MNIST IDX files (.gz or raw)", idx_keys,
                         DPT_COUNT(idx_keys), &idx_impl};
