/* data.c: open the train and test sets that [data] describes. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dpt.h"
#include "data.h"
#include "folder.h"
#include "../runtime/error.h"
#include <stdlib.h>

static void join(char *out, size_t size, const char *dir, const char *file)
{
    if (file[0] == '/' || !*dir)
        snprintf(out, size, "%s", file);
    else
        snprintf(out, size, "%s/%s", dir, file);
}

static bool open_cifar(const dpt_config *cfg, const char *dir, dpt_dataset **train, dpt_dataset **test,
                       dpt_error *err)
{
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
    if (!*test) {
        dpt_dataset_free(*train);
        *train = NULL;
        return false;
    }
    return true;
}

/* The first sample of ds whose label is >= classes, or -1. */
static int64_t first_label_at_or_above(const dpt_dataset *ds, int64_t classes)
{
    for (int64_t i = 0; i < ds->n; i++)
        if (ds->labels[i] >= classes) return i;
    return -1;
}

/* [data] classes: stated, every label must be below it; inferred (0), the largest label + 1
 * (at least 10), and a label far above the rest (200 among 0-9 would silently build a
 * 201-class model) is caught because the classes between would never occur. */
static bool check_classes(const dpt_config *cfg, dpt_dataset *train, dpt_dataset *test,
                          const char *train_file, const char *test_file, dpt_error *err)
{
    int64_t stated = dpt_config_int(cfg, "data", "classes");
    const char *where = dpt_config_where(cfg, "data", "classes");
    if (stated > 0) {
        const dpt_dataset *sets[2] = {train, test};
        const char *files[2] = {train_file, test_file};
        for (int s = 0; s < 2; s++) {
            int64_t i = first_label_at_or_above(sets[s], stated);
            if (i >= 0)
                return dpt_errorf(
                    err,
                    "%s: sample %lld has label %d, but %s says [data] classes = %lld (labels 0 to "
                    "%lld)\nHINT: fix the label file, or raise [data] classes",
                    files[s], (long long)i, sets[s]->labels[i], where, (long long)stated,
                    (long long)stated - 1);
        }
        train->num_classes = test->num_classes = (int)stated;
        return true;
    }
    int classes = train->num_classes > test->num_classes ? train->num_classes : test->num_classes;
    if (classes > 10) {
        int64_t *count = calloc((size_t)classes, sizeof *count);
        if (!count) dpt_fatal("out of host memory counting labels");
        for (int64_t i = 0; i < train->n; i++)
            count[train->labels[i]]++;
        int missing = 0, first_missing = -1;
        for (int c = 10; c < classes; c++)
            if (!count[c]) missing++, first_missing = first_missing < 0 ? c : first_missing;
        free(count);
        if (missing) {
            const dpt_dataset *owner = first_label_at_or_above(train, classes - 1) >= 0 ? train : test;
            int64_t i = first_label_at_or_above(owner, classes - 1);
            return dpt_errorf(
                err,
                "%s: sample %lld has label %d, which would make %d classes, but %d of them (from %d) "
                "never occur in the training labels\nHINT: a label out of range is a damaged "
                "label file; if the classes are really this many, say so with [data] classes = %d",
                owner == train ? train_file : test_file, (long long)i, owner->labels[i], classes, missing,
                first_missing, classes);
        }
    }
    train->num_classes = test->num_classes = classes;
    return true;
}

/* A two-number range key (scale, ratio): min <= max. */
static bool read_range(const dpt_config *cfg, const char *key, double out[2], dpt_error *err)
{
    if (dpt_config_float_list(cfg, "data", key, out, 2) != 2 || out[0] > out[1])
        return dpt_errorf(err, "%s: [data] %s needs two numbers, min,max (e.g. %s)", dpt_config_where(cfg, "data", key),
                          key, !strcmp(key, "scale") ? "0.08,1" : "0.75,1.3333333333");
    return true;
}

static bool open_folder(const dpt_config *cfg, dpt_dataset **train, dpt_dataset **test, dpt_error *err)
{
    if (!dpt_image_have_jpeg() || !dpt_image_have_png())
        return dpt_errorf(err, "%s: [data] source = folder: this build has no %s decoder\nHINT: install %s "
                               "(make deps) and rebuild",
                          dpt_config_where(cfg, "data", "source"), dpt_image_have_jpeg() ? "PNG" : "JPEG",
                          dpt_image_have_jpeg() ? "libpng-dev" : "libjpeg62-turbo-dev");
    if (dpt_config_int(cfg, "data", "random_crop_pad"))
        return dpt_errorf(err, "%s: [data] random_crop_pad is for images in memory; a folder's training images "
                               "are cropped by RandomResizedCrop\nHINT: remove random_crop_pad, and set [data] "
                               "scale and ratio",
                          dpt_config_where(cfg, "data", "random_crop_pad"));
    int size = (int)dpt_config_int(cfg, "data", "image_size"), resize = (int)dpt_config_int(cfg, "data", "resize_size");
    if (resize < size)
        return dpt_errorf(err, "%s: [data] resize_size = %d is smaller than image_size = %d: the center crop would "
                               "not fit\nHINT: the usual pair is resize_size = 256, image_size = 224 (ratio 0.875)",
                          dpt_config_where(cfg, "data", "resize_size"), resize, size);
    dpt_image_view v = {.size = size,
                        .resize = resize,
                        .hflip = dpt_config_bool(cfg, "data", "hflip"),
                        .dct_scaling = dpt_config_bool(cfg, "data", "jpeg_dct_scaling"),
                        .max_pixels = dpt_config_int(cfg, "data", "max_image_pixels")};
    if (!read_range(cfg, "scale", v.scale, err) || !read_range(cfg, "ratio", v.ratio, err)) return false;
    dpt_folder_options opt = {.dir = dpt_config_str(cfg, "data", "dir"),
                              .cache_dir = dpt_config_str(cfg, "checkpoint", "dir"),
                              .train = v,
                              .eval = v};
    opt.train.train = true;
    opt.eval.hflip = false;
    return dpt_folder_open(&opt, train, test, err);
}

/* [data] mean and std: one value, or one per channel. */
static bool check_normalisation(const dpt_config *cfg, const dpt_dataset *ds, dpt_error *err)
{
    const char *keys[2] = {"mean", "std"};
    double v[32];
    for (int k = 0; k < 2; k++) {
        int n = dpt_config_float_list(cfg, "data", keys[k], v, 32);
        if (n != 1 && (n != ds->c || n > 4))
            return dpt_errorf(err, "%s: [data] %s has %d values, and the images have %lld channels\nHINT: give one "
                                   "value for all channels, or one per channel (up to 4 channels)",
                              dpt_config_where(cfg, "data", keys[k]), keys[k], n, (long long)ds->c);
    }
    return true;
}

static bool open_sets(const dpt_config *cfg, dpt_dataset **train, dpt_dataset **test, dpt_error *err);

bool dpt_data_open(const dpt_config *cfg, dpt_dataset **train, dpt_dataset **test, dpt_error *err)
{
    if (!open_sets(cfg, train, test, err)) return false;
    if (check_normalisation(cfg, *train, err)) return true;
    dpt_dataset_free(*train);
    dpt_dataset_free(*test);
    *train = *test = NULL;
    return false;
}

static bool open_sets(const dpt_config *cfg, dpt_dataset **train, dpt_dataset **test, dpt_error *err)
{
    *train = *test = NULL;
    const char *source = dpt_config_str(cfg, "data", "source");
    if (!strcmp(source, "folder")) return open_folder(cfg, train, test, err);
    if (!strcmp(source, "synthetic")) {
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
    const char *dir = dpt_config_str(cfg, "data", "dir");
    struct stat st;
    if ((stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) && !strcmp(source, "cifar"))
        return dpt_errorf(
            err,
            "%s: [data] dir = %s: no such folder\nHINT: download the CIFAR-10 binary "
            "version and point [data] dir at the folder with data_batch_1.bin ... test_batch.bin",
            dpt_config_where(cfg, "data", "dir"), dir);
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return dpt_errorf(err,
                          "%s: [data] dir = %s: no such folder\nHINT: install the data set with "
                          "'make deps' (Debian package dataset-fashion-mnist, files under "
                          "/usr/share/datasets/fashion-mnist) or set [data] dir to your copy",
                          dpt_config_where(cfg, "data", "dir"), dir);
    if (!strcmp(source, "cifar")) {
        if (!open_cifar(cfg, dir, train, test, err)) return false;
        if (check_classes(cfg, *train, *test, "the CIFAR training files", "test_batch.bin", err)) return true;
        dpt_dataset_free(*train);
        dpt_dataset_free(*test);
        *train = *test = NULL;
        return false;
    }
    char images[2048], labels[2048];
    join(images, sizeof images, dir, dpt_config_str(cfg, "data", "train_images"));
    join(labels, sizeof labels, dir, dpt_config_str(cfg, "data", "train_labels"));
    *train = dpt_idx_load(images, labels, err);
    if (!*train) return false;
    join(images, sizeof images, dir, dpt_config_str(cfg, "data", "test_images"));
    join(labels, sizeof labels, dir, dpt_config_str(cfg, "data", "test_labels"));
    *test = dpt_idx_load(images, labels, err);
    if (!*test) {
        dpt_dataset_free(*train);
        *train = NULL;
        return false;
    }
    if ((*train)->c != (*test)->c || (*train)->h != (*test)->h || (*train)->w != (*test)->w) {
        dpt_errorf(err,
                   "train images are %lldx%lld but test images (%s) are %lldx%lld\nHINT: the "
                   "train and test files must come from the same data set",
                   (long long)(*train)->h, (long long)(*train)->w, images, (long long)(*test)->h,
                   (long long)(*test)->w);
        dpt_dataset_free(*train);
        dpt_dataset_free(*test);
        *train = *test = NULL;
        return false;
    }
    char train_labels[2048];
    join(train_labels, sizeof train_labels, dir, dpt_config_str(cfg, "data", "train_labels"));
    if (!check_classes(cfg, *train, *test, train_labels, labels, err)) {
        dpt_dataset_free(*train);
        dpt_dataset_free(*test);
        *train = *test = NULL;
        return false;
    }
    return true;
}
