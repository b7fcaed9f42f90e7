/* data.c: [data]'s common settings and opening the train and test sets of the source it
 * names (each source registers from its own file: idx.c, cifar.c, synthetic.c, folder.c, ...),
 * and what image sources share: file paths under dir, the label-count check, normalisation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dpt.h"
#include "data.h"
#include "folder.h"
#include "../runtime/error.h"
#include "../runtime/registry.h"

static const dpt_config_key data_keys[] = {
    {"data", "source", DPT_KEY_ENUM, "idx", 1, 0, "@data",
     "the data source: a registered one. Built in: idx (MNIST / Fashion-MNIST files, .gz or raw), cifar "
     "(CIFAR-10 binary batches in dir), synthetic (random images), folder (JPEG/PNG files in dir/train/<class>/ "
     "and dir/val/<class>/: torchvision's ImageFolder layout, classes numbered in sorted name order, decoded and "
     "augmented by [data] workers), regression (y = f(x) on random x, for an MSE model), tokens (llm.c's token "
     "shards, for language models)", 0},
    {"data", "dir", DPT_KEY_STRING, "/usr/share/datasets/fashion-mnist", 1, 0, NULL,
     "folder holding the data files (Debian package dataset-fashion-mnist)", 0},
    {"data", "classes", DPT_KEY_INT, "0", 0, 1e6, NULL,
     "number of classes; a label >= classes is an error (0 = the largest label + 1, at least 10, and every "
     "class above 9 must occur; a CSV's: at least 2, every class below the largest occurring, or its names' count)",
     0},
    {"data", "mean", DPT_KEY_FLOAT_LIST, "0.2860", -1e3, 1e3, NULL,
     "normalisation of images: x = (pixel/255 - mean) / std; one value, or one per channel (e.g. 0.485,0.456,0.406); "
     "a source of fields (csv, tokens, regression) refuses a value other than the default",
     0},
    {"data", "std", DPT_KEY_FLOAT_LIST, "0.3530", 1e-6, 1e3, NULL,
     "normalisation standard deviation of images; one value, or one per channel (e.g. 0.229,0.224,0.225)", 0},
    {"data", "shuffle", DPT_KEY_BOOL, "true", 1, 0, NULL,
     "new permutation of the training set each epoch (from seed and epoch)", 0},
    {"data", "drop_last", DPT_KEY_BOOL, "true", 1, 0, NULL, "drop the last partial training batch of an epoch", 0},
    {"data", "random_crop_pad", DPT_KEY_INT, "0", 0, 64, NULL,
     "training augmentation of images: random crop of the image zero-padded by N pixels (0 = off; a source of "
     "fields refuses it)",
     0},
    {"data", "hflip", DPT_KEY_BOOL, "false", 1, 0, NULL,
     "training augmentation of images: horizontal flip with probability 1/2 (a source of fields refuses it)", 0},
    {"data", "auto_augment", DPT_KEY_ENUM, "none", 1, 0, "none|trivial_wide|rand",
     "training augmentation of RGB images (a folder's, CIFAR's): a policy after the crop and flip, as torchvision "
     "applies it to a PIL image (PIL's arithmetic, bilinear, fill 0; checked against PIL): trivial_wide = TrivialAugmentWide (one of 14 operations at "
     "one of 31 magnitudes, each uniform; torchvision's ResNet-50 recipe), rand = RandAugment (rand_augment_ops "
     "operations at bin rand_augment_magnitude)",
     0},
    {"data", "rand_augment_ops", DPT_KEY_INT, "2", 1, 16, NULL, "auto_augment = rand: operations per image", 0},
    {"data", "rand_augment_magnitude", DPT_KEY_INT, "9", 0, 30, NULL,
     "auto_augment = rand: the magnitude bin (0..30) of every operation", 0},
    {"data", "repeated_augment", DPT_KEY_INT, "1", 1, 64, NULL,
     "training: R > 1 puts each sample of an epoch's order R times in a row before the ranks take their turns "
     "(DeiT's and torchvision's RASampler, its ResNet-50 recipe: 4), so R copies, each augmented with its own draws, "
     "go to R ranks; an epoch keeps its length (n / ranks samples a rank) and sees n / R distinct samples. 1 = off; "
     "not with [train] deterministic",
     0},
    {"data", "random_erase", DPT_KEY_FLOAT, "0", 0, 1, NULL,
     "training augmentation of images: the chance that a sample gets a box set to 0 (its channels' mean once "
     "normalised): torchvision's RandomErasing (its ResNet-50 recipe: 0.1), after the loader's crop and flip and "
     "before mixup and cutmix; 0 = off. Inputs of (C, H, W)",
     0},
    {"data", "random_erase_scale", DPT_KEY_FLOAT_LIST, "0.02,0.33", 1e-6, 1, NULL,
     "random_erase: the box's area as a fraction of the image's, uniform in min,max", 0},
    {"data", "random_erase_ratio", DPT_KEY_FLOAT_LIST, "0.3,3.3", 1e-3, 1e3, NULL,
     "random_erase: the box's aspect ratio, height/width, log-uniform in min,max (10 tries for a box that fits, "
     "else none)",
     0},
    {"data", "mixup", DPT_KEY_FLOAT, "0", 0, 100, NULL,
     "training augmentation of a classifier's batches: mixup's alpha. Each batch is blended with itself in "
     "reverse order, x_i = lam x_i + (1 - lam) x_(n-1-i) with lam ~ Beta(alpha, alpha) drawn per batch, and the "
     "loss is lam CE(own label) + (1 - lam) CE(the partner's label), label smoothing included (timm's Mixup, batch "
     "mode; DeiT: 0.8). 0 = off. Inputs of floats (images, a CSV's rows); one label a sample and the cross_entropy "
     "loss. The training accuracy counts the label of the larger share",
     0},
    {"data", "cutmix", DPT_KEY_FLOAT, "0", 0, 100, NULL,
     "training augmentation of images: CutMix's alpha. A box of the reversed batch's images, of about 1 - lam of "
     "the area (lam ~ Beta(alpha, alpha), the box centred anywhere and clipped), is pasted into each image, and "
     "lam becomes the share left; the loss as mixup's (timm: 1.0). 0 = off. Inputs of (C, H, W)",
     0},
    {"data", "mixup_prob", DPT_KEY_FLOAT, "1", 0, 1, NULL,
     "the chance that a training batch is mixed (mixup or cutmix; timm's mixup_prob)", 0},
    {"data", "mixup_switch_prob", DPT_KEY_FLOAT, "0.5", 0, 1, NULL,
     "with both mixup and cutmix on: the chance that a mixed batch gets cutmix rather than mixup", 0},
    {"data", "prefetch", DPT_KEY_INT, "2", 0, 64, NULL,
     "batches a background thread prepares ahead (on a GPU: pinned memory, copy stream); 0 = none", DPT_KEY_NOT_HASHED},
    {"data", "train_limit", DPT_KEY_INT, "0", 0, 1e12, NULL, "use only the first N training samples (0 = all; the IDX source decompresses only their images)", 0},
    {"data", "test_limit", DPT_KEY_INT, "0", 0, 1e12, NULL, "use only the first N test samples (0 = all; the IDX source decompresses only their images)", 0},
};
DPT_BUILTIN(settings_data) = {DPT_KIND_SETTINGS, "data", "the data", data_keys, DPT_COUNT(data_keys), NULL};

void dpt_dataset_free(dpt_dataset *ds)
{
    if (!ds) return;
    free(ds->images);
    free(ds->labels);
    if (ds->free_files) ds->free_files(ds->files); /* the folder source's list */
    if (ds->free_source) ds->free_source(ds->source);
    free(ds);
}

const char *dpt_dataset_sample_name(const dpt_dataset *ds, int64_t index)
{
    if (!ds->files || index < 0 || index >= ds->files->n) return NULL;
    return ds->files->names + ds->files->offset[index];
}

const char *dpt_dataset_class_name(const dpt_dataset *ds, int label)
{
    if (ds->class_names && label >= 0 && label < ds->num_classes) return ds->class_names[label];
    if (!ds->files || label < 0 || label >= ds->files->nclasses) return NULL;
    return ds->files->classes[label];
}

int dpt_dataset_fields(const dpt_dataset *ds, dpt_field *out)
{
    if (ds->nfields > 0) {
        memcpy(out, ds->fields, (size_t)ds->nfields * sizeof *out);
        return ds->nfields;
    }
    out[0] = (dpt_field){.name = "image", .dtype = DPT_F32, .ndim = 3, .shape = {ds->c, ds->h, ds->w}};
    out[1] = (dpt_field){.name = "label", .dtype = DPT_I32, .ndim = 0, .target = true};
    return 2;
}

const dpt_field *dpt_field_first(const dpt_field *fields, int n, bool target)
{
    for (int f = 0; f < n; f++)
        if (fields[f].target == target) return &fields[f];
    return NULL;
}

const dpt_field *dpt_field_named(const dpt_field *fields, int n, const char *name)
{
    for (int f = 0; f < n; f++)
        if (!strcmp(fields[f].name, name)) return &fields[f];
    return NULL;
}

void dpt_dataset_describe_classes(const dpt_dataset *ds, char *buf, size_t size)
{
    buf[0] = 0;
    bool labels = ds->label_positives != NULL; /* multi-label: one count a label */
    if (!labels && !ds->class_counts && !dpt_dataset_class_name(ds, 0)) return;
    dpt_field fields[DPT_MAX_FIELDS];
    const dpt_field *target = labels ? dpt_field_first(fields, dpt_dataset_fields(ds, fields), true) : NULL;
    int n = labels ? (int)target->shape[0] : ds->num_classes, shown = n <= 12 ? n : 10;
    const int64_t *counts = labels ? ds->label_positives : ds->class_counts;
    size_t at = (size_t)snprintf(buf, size, labels ? "%d labels (samples with each):" : "%d classes:", n);
    for (int c = 0; c < n && at < size; c++) {
        if (c == shown && c < n - 1) {
            at += (size_t)snprintf(buf + at, size - at, ", ...");
            c = n - 1;
        }
        const char *name = labels ? (ds->target_names ? ds->target_names[c] : NULL) : dpt_dataset_class_name(ds, c);
        at += (size_t)snprintf(buf + at, size - at, "%s %d", c ? "," : "", c);
        if (name && at < size) at += (size_t)snprintf(buf + at, size - at, " %s", name);
        if (counts && at < size) at += (size_t)snprintf(buf + at, size - at, " (%lld)", (long long)counts[c]);
    }
    dpt_printable(buf); /* names are the user's: one line, no control bytes */
    for (char *q = buf; *q; q++)
        if (*q == '\n' || *q == '\t') *q = '?';
}

char *dpt_data_join(const char *dir, const char *file)
{
    return file[0] == '/' || !*dir ? dpt_strf("%s", file) : dpt_strf("%s/%s", dir, file);
}

/* The labels ds holds: every sample's, those of the samples it did not read too (n_file). */
static int64_t labels_held(const dpt_dataset *ds)
{
    return ds->n_file > ds->n ? ds->n_file : ds->n;
}

/* The first sample of ds whose label is >= classes, or -1. */
static int64_t first_label_at_or_above(const dpt_dataset *ds, int64_t classes)
{
    for (int64_t i = 0; i < labels_held(ds); i++)
        if (ds->labels[i] >= classes) return i;
    return -1;
}

/* [data] classes: stated, every label must be below it; inferred (0), the largest label + 1
 * (at least 10), and a label far above the rest (200 among 0-9 would silently build a
 * 201-class model) is caught because the classes between would never occur. */
bool dpt_data_check_classes(const dpt_config *cfg, dpt_dataset *train, dpt_dataset *test,
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
        for (int64_t i = 0; i < labels_held(train); i++)
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

bool dpt_data_open(const dpt_config *cfg, dpt_dataset **train, dpt_dataset **test, dpt_error *err)
{
    return dpt_data_open_for(cfg, DPT_DATA_ALL, train, test, err);
}

bool dpt_data_open_for(const dpt_config *cfg, dpt_data_need need, dpt_dataset **train, dpt_dataset **test,
                       dpt_error *err)
{
    *train = *test = NULL;
    const dpt_data_impl *impl = dpt_config_choice(cfg, "data", "source")->impl;
    bool described = need != DPT_DATA_ALL && impl->describe && (need == DPT_DATA_NONE || impl->open_test);
    bool ok = described ? (*train = impl->describe(cfg, err)) != NULL &&
                              (need == DPT_DATA_NONE ? (*test = impl->describe(cfg, err)) != NULL
                                                     : impl->open_test(cfg, test, err))
                        : impl->open(cfg, train, test, err);
    if (!ok) {
        dpt_dataset_free(*train);
        dpt_dataset_free(*test);
        *train = *test = NULL;
        return false;
    }
    if (check_normalisation(cfg, *train, err)) return true;
    dpt_dataset_free(*train);
    dpt_dataset_free(*test);
    *train = *test = NULL;
    return false;
}

bool dpt_data_require_dir(const dpt_config *cfg, const char *hint, dpt_error *err)
{
    const char *dir = dpt_config_str(cfg, "data", "dir");
    struct stat st;
    if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode)) return true;
    return dpt_errorf(err, "%s: [data] dir = %s: no such folder\nHINT: %s", dpt_config_where(cfg, "data", "dir"), dir,
                      hint);
}
