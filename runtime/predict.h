/* predict.h: a trained model's predictions over a data set, as CSV (./train CONFIG --predict CKPT). */
#ifndef DPT_PREDICT_H
#define DPT_PREDICT_H

#include "dpt.h"

typedef struct dpt_predict_options {
    const char *out; /* the CSV file (made beside, then renamed) */
    int top_k;       /* classes a row (0 or more than the classes: all) */
} dpt_predict_options;

/* One row per sample of the loader's data set, in its order (the loader of one process, not
 * shuffled); false with err when the file cannot be written or the model's rows change width. */
bool dpt_predict_run(dpt_ctx *ctx, dpt_model *model, dpt_loader *loader, const dpt_predict_options *o, dpt_error *err);

#endif
