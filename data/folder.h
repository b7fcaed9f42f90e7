/* folder.h: [data] source = folder, torchvision's ImageFolder layout: dir/train/<class>/...
 * and dir/val/<class>/..., classes numbered in sorted name order, JPEG and PNG files. */
#ifndef DPT_FOLDER_H
#define DPT_FOLDER_H

#include "dpt.h"
#include "image.h"

/* The files of a folder data set; a dpt_dataset's `files`. */
struct dpt_image_files {
    char root[4096];       /* dir/train or dir/val */
    int64_t n;             /* = the dataset's n */
    char *names;           /* n relative paths ("class/x.jpg"), NUL-separated */
    int64_t *offset;       /* n: the start of each in names */
    int nclasses;
    char **classes;        /* nclasses names (the training folder's) */
    bool owns_classes;     /* the training set frees them */
    int64_t *class_count;  /* nclasses: files of each class in this set */
    int64_t ignored;       /* files without an image extension */
    uint64_t list_hash;    /* FNV-1a of the names and labels: every rank must have the same */
    char list_note[4400];  /* how the file list was had: "scanned", "cached in ..." */
    dpt_image_view view;   /* how a sample is made */
};

typedef struct dpt_folder_options {
    const char *dir;       /* holds train/ and val/ */
    const char *cache_dir; /* where the file list is cached when dir is read-only (NULL: nowhere) */
    dpt_image_view train, eval;
} dpt_folder_options;

/* Open dir/train and dir/val; the validation classes must be among the training ones (their
 * numbers are the training set's). False with err naming the folder and a HINT. */
bool dpt_folder_open(const dpt_folder_options *opt, dpt_dataset **train, dpt_dataset **test, dpt_error *err);

/* ./train CONFIG --predict CKPT --input PATH: the .jpg/.jpeg/.png files under PATH (a folder,
 * walked recursively in sorted order as a class folder is, or one file), made as `like`'s
 * samples are (a folder set's evaluation view) and named by its classes, without labels. */
bool dpt_folder_open_input(const char *path, const dpt_dataset *like, dpt_dataset **out, dpt_error *err);

void dpt_image_files_free(struct dpt_image_files *f);

/* root/name of sample i into buf. */
const char *dpt_folder_path(const struct dpt_image_files *f, int64_t i, char *buf, size_t size);

/* "10 classes: 0 ankle_boot (120), 1 bag (120), ... | 1200 files, file list cached" */
void dpt_folder_describe(const dpt_dataset *ds, char *buf, size_t size);

#endif
