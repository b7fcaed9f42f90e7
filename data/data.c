/* data.c: open the train and test sets that [data] describes. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "dpt.h"
#include "data.h"
#include "../runtime/error.h"

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

bool dpt_data_open(const dpt_config *cfg, dpt_dataset **train, dpt_dataset **test, dpt_error *err)
{
    *train = *test = NULL;
    const char *source = dpt_config_str(cfg, "data", "source");
    if (!strcmp(source, "synthetic")) {
        int64_t shape[3];
        if (dpt_config_int_list(cfg, "data", "synthetic_shape", shape, 3) != 3)
            return dpt_errorf(err, "%s: [data] synthetic_shape needs 3 values (channels, height, width)",
                              dpt_config_where(cfg, "data", "synthetic_shape"));
        int64_t n = dpt_config_int(cfg, "data", "synthetic_samples");
        int classes = (int)dpt_config_int(cfg, "data", "synthetic_classes");
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
    if (!strcmp(source, "cifar")) return open_cifar(cfg, dir, train, test, err);
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
    if ((*test)->num_classes > (*train)->num_classes) (*train)->num_classes = (*test)->num_classes;
    return true;
}
