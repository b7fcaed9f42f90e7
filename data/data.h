/* data.h: opening the data [data] describes, and what the image sources share. */
#ifndef DPT_DATA_H
#define DPT_DATA_H

#include "dpt.h"

/* Load [data]'s train and test sets from the source [data] source names; false with err
 * naming the file and a HINT. */
bool dpt_data_open(const dpt_config *cfg, dpt_dataset **train, dpt_dataset **test, dpt_error *err);
/* The same for a command that trains nothing: with DPT_DATA_TEST the training set may be only a
 * description (no samples) and with DPT_DATA_NONE the test set too, where the source offers
 * describe and open_test (dpt_data_impl); otherwise both sets are opened as always. */
typedef enum { DPT_DATA_ALL, DPT_DATA_TEST, DPT_DATA_NONE } dpt_data_need;
bool dpt_data_open_for(const dpt_config *cfg, dpt_data_need need, dpt_dataset **train, dpt_dataset **test,
                       dpt_error *err);

/* ./train CONFIG --predict CKPT --input PATH: samples without labels made as `like`'s (the
 * config's test set): a folder set's images under PATH (a folder, recursively, or one file), an
 * IDX set's images in the IDX file PATH; false with err naming PATH (or the source that takes
 * no --input) and a HINT. */
bool dpt_data_open_input(const dpt_config *cfg, const char *path, const dpt_dataset *like, dpt_dataset **out,
                         dpt_error *err);

/* The --input readers (folder.c keeps its own in folder.h). */
bool dpt_idx_open_input(const char *path, const dpt_dataset *like, dpt_dataset **out, dpt_error *err);
/* A CSV table's rows: the training file's columns, with or without its targets. */
bool dpt_csv_open_input(const char *path, const dpt_dataset *like, dpt_dataset **out, dpt_error *err);
/* A language model's: a token shard, or any file as bytes for a byte-level model; rows of
 * seq_len tokens (the last one the input's last seq_len). */
bool dpt_tokens_open_input(const char *path, const dpt_dataset *like, dpt_dataset **out, dpt_error *err);

/* Hugging Face's GPT-2 tokenizer files by their paths (dpt_tokenizer_load finds them in a folder;
 * the fuzz harness names them as it likes). */
dpt_tokenizer *dpt_tokenizer_load_hf(const char *vocab_json, const char *merges_txt, dpt_error *err);
dpt_tokenizer *dpt_tokenizer_load_hf_json(const char *tokenizer_json, dpt_error *err);

/* Random erasing ([data] random_erase: torchvision's RandomErasing with value 0, the channel's
 * mean once normalised): each sample of a training batch, with probability `prob`, gets a box
 * of scale x its area (uniform in scale[0..1]) and aspect ratio h/w (log-uniform in ratio[0..1])
 * set to 0, at a uniform place; where 10 tries find no box that fits, none. */
typedef struct dpt_erase_options {
    double prob;
    double scale[2], ratio[2];
} dpt_erase_options;
bool dpt_erase_enabled(const dpt_erase_options *o);
/* Sample i of the batch named by `key`: whether it is erased, and the box: rows [box[0],
 * box[1]), columns [box[2], box[3]) of its h x w. */
bool dpt_erase_draw(const dpt_erase_options *o, uint64_t key, int64_t i, int64_t h, int64_t w, int64_t box[4]);
/* Erase the batch x (n, c, h, w) in place as its draws say, on its device. */
void dpt_erase_apply(dpt_ctx *ctx, dpt_tensor *x, const dpt_erase_options *o, uint64_t key);

/* Mixup and CutMix ([data] mixup, cutmix: timm's Mixup in its batch mode). A training batch
 * is mixed with probability `prob`: each sample i with sample n-1-i of the batch (the batch
 * reversed), with lambda ~ Beta(alpha, alpha): mixup blends the two inputs, lambda x_i +
 * (1 - lambda) x_j; cutmix pastes a box of sample j's image, of area about (1 - lambda) of it,
 * into sample i's, lambda then the part of the image left as it was. The loss is lambda times
 * the loss of the sample's own label plus 1 - lambda times that of sample j's (the cross-entropy
 * of timm's mixed soft targets, label smoothing included). */
typedef struct dpt_mix_options {
    double mixup_alpha, cutmix_alpha; /* 0: off */
    double prob;                      /* the chance a batch is mixed */
    double switch_prob;               /* both on: the chance of cutmix rather than mixup */
} dpt_mix_options;
typedef struct dpt_mix {
    bool on;                /* false: the batch as it is (lambda 1) */
    bool cut;               /* cutmix; else mixup */
    double lambda;          /* each sample's own label's share */
    int64_t y0, y1, x0, x1; /* cutmix: rows [y0, y1), columns [x0, x1) of sample j replace sample i's */
} dpt_mix;
bool dpt_mix_enabled(const dpt_mix_options *o);
/* The draw for the batch named by `key` (dpt_batch.key) of images h x w (cutmix's box). */
void dpt_mix_draw(const dpt_mix_options *o, uint64_t key, int64_t h, int64_t w, dpt_mix *m);
/* Mix the batch tensor x (n, c, h, w) or (n, features) in place as m says, on its device. */
void dpt_mix_apply(dpt_ctx *ctx, dpt_tensor *x, const dpt_mix *m);
/* Each sample's partner's label: `labels` reversed, written into the first rows of `storage`
 * (an I32 tensor of at least as many rows), returned as a temporary view of them. */
dpt_tensor *dpt_mix_partner_labels(dpt_ctx *ctx, const dpt_tensor *labels, dpt_tensor *storage);
/* A batch's loss: `loss`'s of the targets, or for a mixed batch (partner not NULL) lambda x
 * that of the samples' own targets + (1 - lambda) x that of their partners' (with the
 * cross-entropy: the cross-entropy of the mixed one-hot targets, timm's SoftTargetCrossEntropy
 * of mixup_target). */
dpt_tensor *dpt_mix_loss(dpt_ctx *ctx, const dpt_loss_impl *loss, const void *settings, dpt_tensor *out,
                         dpt_tensor *target, dpt_tensor *partner, double lambda);
/* The batch's (n, c, h, w) input's height and width (1, 1 for another shape): cutmix's box. */
void dpt_mix_image_size(const dpt_tensor *x, int64_t *h, int64_t *w);

/* dir/file, or file when it is absolute or dir is empty. */
char *dpt_data_join(const char *dir, const char *file); /* dir/file, or file when absolute (free it) */
/* [data] dir must be a folder; err ends with this HINT otherwise. */
bool dpt_data_require_dir(const dpt_config *cfg, const char *hint, dpt_error *err);
/* [data] classes against the labels of both sets (stated: every label below it; 0: inferred,
 * every class above 9 must occur); sets num_classes. The files name the sets in errors. */
bool dpt_data_check_classes(const dpt_config *cfg, dpt_dataset *train, dpt_dataset *test, const char *train_file,
                            const char *test_file, dpt_error *err);

#endif
