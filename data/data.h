/* data.h: opening the data [data] describes, and what the image sources share. */
#ifndef DPT_DATA_H
#define DPT_DATA_H

#include "dpt.h"

/* Load [data]'s train and test sets from the source [data] source names; false with err
 * naming the file and a HINT. */
bool dpt_data_open(const dpt_config *cfg, dpt_dataset **train, dpt_dataset **test, dpt_error *err);

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

/* llm.c's tokenizer file (tokenizer.c): each token id's bytes, for printing a model's samples.
 * NULL with err naming the file (and the token or byte offset) when it is not one. */
typedef struct dpt_tokenizer dpt_tokenizer;
dpt_tokenizer *dpt_tokenizer_load(const char *path, dpt_error *err);
void dpt_tokenizer_free(dpt_tokenizer *t);
int32_t dpt_tokenizer_vocab(const dpt_tokenizer *t);
int32_t dpt_tokenizer_eot(const dpt_tokenizer *t); /* <|endoftext|>: llm.c starts its samples with it */
/* The bytes of token id (len of them; NULL and 0 outside the vocabulary). */
const unsigned char *dpt_tokenizer_bytes(const dpt_tokenizer *t, int32_t id, size_t *len);

/* dir/file, or file when it is absolute or dir is empty. */
char *dpt_data_join(const char *dir, const char *file); /* dir/file, or file when absolute (free it) */
/* [data] dir must be a folder; err ends with this HINT otherwise. */
bool dpt_data_require_dir(const dpt_config *cfg, const char *hint, dpt_error *err);
/* [data] classes against the labels of both sets (stated: every label below it; 0: inferred,
 * every class above 9 must occur); sets num_classes. The files name the sets in errors. */
bool dpt_data_check_classes(const dpt_config *cfg, dpt_dataset *train, dpt_dataset *test, const char *train_file,
                            const char *test_file, dpt_error *err);

#endif
