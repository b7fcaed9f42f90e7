/* data.c: open the train and test sets that [data] describes. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "dpt.h"
#include "data.h"
#include "../runtime/error.h"

static void join(char *out, size_t size, const char *dir, const char *file)
{
    if (file[0] == '/' || !*dir) snprintf(out, size, "%s", file);
    else snprintf(out, size, "%s/%s", dir, file);
}

bool dpt_data_open(const dpt_config *cfg, dpt_dataset **train, dpt_dataset **test, dpt_error *err)
{
    *train = *test = NULL;
    const char *dir = dpt_config_str(cfg, "data", "dir");
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return dpt_errorf(err, "%s: [data] dir = %s: no such folder\nHINT: install the data set with "
                               "'make deps' (Debian package dataset-fashion-mnist, files under "
                               "/usr/share/datasets/fashion-mnist) or set [data] dir to your copy",
                          dpt_config_where(cfg, "data", "dir"), dir);
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
        dpt_errorf(err, "train images are %lldx%lld but test images (%s) are %lldx%lld\nHINT: the "
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
