/* eval.c: evaluation over a loader with recording off and the model in eval mode: the loss
 * and metrics the model's task declares on the loader's data, and where asked a classifier's
 * confusion counts from the same pass. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dpt.h"
#include "error.h"

/* Adds a batch's (rows, classes) logits against its labels into confusion[label * classes +
 * predicted] (the first arg-max, as the accuracy's); false with err where the output is not one
 * row of `classes` logits a label. The logits are read to the host: --per-class only. */
static bool add_confusion(dpt_ctx *ctx, const dpt_model *model, dpt_tensor *out, dpt_tensor *target,
                          double *confusion, int classes, dpt_error *err)
{
    int64_t rows = dpt_tensor_numel(target);
    if (dpt_tensor_ndim(out) != 2 || dpt_tensor_dim(out, 1) != classes || rows != dpt_tensor_dim(out, 0))
        return dpt_errorf(err, "--per-class: model %s gives %lld values a sample for %d classes\nHINT: --per-class "
                               "reports a classifier of one label a sample",
                          dpt_model_name(model), (long long)(dpt_tensor_numel(out) / (rows ? rows : 1)), classes);
    float *logits = malloc((size_t)(rows * classes + 1) * sizeof *logits);
    int32_t *labels = malloc((size_t)(rows + 1) * sizeof *labels);
    if (!logits || !labels) dpt_fatal("out of host memory for --per-class");
    dpt_tensor_copy_to_host(dpt_contiguous(ctx, out), logits);
    dpt_tensor_copy_to_host_i32(target, labels);
    for (int64_t r = 0; r < rows; r++) {
        const float *x = logits + r * classes;
        int best = 0;
        for (int c = 1; c < classes; c++)
            if (x[c] > x[best]) best = c;
        if (labels[r] >= 0 && labels[r] < classes) confusion[(int64_t)labels[r] * classes + best] += 1;
    }
    free(logits), free(labels);
    return true;
}

/* One pass: the result, and the confusion counts where confusion is not NULL (false with err
 * only for those). */
static bool evaluate(dpt_ctx *ctx, dpt_model *model, dpt_loader *loader, const dpt_task *task,
                     double *confusion, int classes, dpt_eval_result *result, dpt_error *err)
{
    const dpt_loss_impl *loss_fn = dpt_registry_find(DPT_KIND_LOSS, task->loss)->impl;
    bool accuracy = (task->metrics & DPT_METRIC_ACCURACY) != 0, top5 = (task->metrics & DPT_METRIC_TOP5) != 0;
    bool was_training = dpt_model_training(model);
    bool was_recording = dpt_set_grad_enabled(ctx, false);
    dpt_model_set_training(model, false);
    const char *hint = dpt_ctx_set_oom_hint(ctx, DPT_EVAL_OOM_HINT);
    /* each batch's correct predictions are counted on the device and read (exact in a float) */
    dpt_tensor *correct = dpt_tensor_new(ctx, 1, (int64_t[]){2});
    double loss_sum = 0.0, right = 0.0, right5 = 0.0;
    int64_t samples = 0, terms = 0;
    bool ok = true;
    dpt_batch batch;
    dpt_loader_start_epoch(loader, 0);
    while (ok && dpt_loader_next(loader, &batch)) {
        dpt_tensor *out = dpt_model_forward_batch(model, ctx, &batch, task);
        dpt_tensor *target = dpt_batch_get(&batch, task->target);
        int64_t n = loss_fn->terms(out, target);
        /* settings NULL: the loss's defaults (no label smoothing), as evaluation reports it */
        loss_sum += (double)dpt_tensor_item(loss_fn->forward(ctx, out, target, NULL)) * (double)n;
        if (accuracy || top5) { /* the counts of one batch, exact in floats: one read */
            dpt_tensor_fill_slice(ctx, correct, 0, 2, 0.0f);
            if (accuracy) loss_fn->count_correct(ctx, out, target, correct, 0);
            if (top5) loss_fn->count_top5(ctx, out, target, correct, 1);
            float both[2];
            dpt_tensor_copy_to_host(correct, both);
            right += (double)both[0], right5 += (double)both[1];
        }
        if (confusion) ok = add_confusion(ctx, model, out, target, confusion, classes, err);
        samples += batch.size;
        terms += n;
        dpt_tape_clear(ctx);
    }
    dpt_tensor_free(correct);
    dpt_ctx_set_oom_hint(ctx, hint);
    dpt_model_set_training(model, was_training);
    dpt_set_grad_enabled(ctx, was_recording);
    double loss = terms ? loss_sum / (double)terms : 0.0;
    *result = (dpt_eval_result){
        .loss = loss,
        .accuracy = accuracy ? (terms ? right / (double)terms : 0.0) : NAN,
        .top5 = top5 ? (terms ? right5 / (double)terms : 0.0) : NAN,
        .perplexity = (task->metrics & DPT_METRIC_PERPLEXITY) ? exp(loss) : NAN,
        .samples = samples,
        .terms = terms,
    };
    return ok;
}

dpt_eval_result dpt_evaluate(dpt_ctx *ctx, dpt_model *model, dpt_loader *loader)
{
    dpt_task task;
    dpt_error err;
    if (!dpt_task_resolve(model, dpt_loader_dataset(loader), &task, &err)) dpt_abort_job("%s", err.msg);
    dpt_eval_result result;
    evaluate(ctx, model, loader, &task, NULL, 0, &result, &err);
    return result;
}

bool dpt_evaluate_confusion(dpt_ctx *ctx, dpt_model *model, dpt_loader *loader, double *confusion, int classes,
                            dpt_eval_result *result, dpt_error *err)
{
    dpt_task task;
    if (!dpt_task_resolve(model, dpt_loader_dataset(loader), &task, err)) return false;
    if (strcmp(task.loss, "cross_entropy") || !(task.metrics & DPT_METRIC_ACCURACY))
        return dpt_errorf(err, "--per-class reports a classifier's classes, and model %s trains with %s%s\nHINT: "
                               "--eval alone reports its loss",
                          dpt_model_name(model), task.loss,
                          strcmp(task.loss, "cross_entropy") ? "" : " measuring no accuracy (a language model)");
    memset(confusion, 0, (size_t)classes * (size_t)classes * sizeof *confusion);
    return evaluate(ctx, model, loader, &task, confusion, classes, result, err);
}
