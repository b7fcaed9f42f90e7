/* eval.c: evaluation over a loader with recording off and the model in eval mode: the loss
 * and metrics the model's task declares on the loader's data. */
#include <math.h>

#include "dpt.h"
#include "error.h"

dpt_eval_result dpt_evaluate(dpt_ctx *ctx, dpt_model *model, dpt_loader *loader)
{
    dpt_task task;
    dpt_error err;
    if (!dpt_task_resolve(model, dpt_loader_dataset(loader), &task, &err)) dpt_abort_job("%s", err.msg);
    const dpt_loss_impl *loss_fn = dpt_registry_find(DPT_KIND_LOSS, task.loss)->impl;
    bool accuracy = (task.metrics & DPT_METRIC_ACCURACY) != 0, top5 = (task.metrics & DPT_METRIC_TOP5) != 0;
    bool was_training = dpt_model_training(model);
    bool was_recording = dpt_set_grad_enabled(ctx, false);
    dpt_model_set_training(model, false);
    const char *hint = dpt_ctx_set_oom_hint(ctx, DPT_EVAL_OOM_HINT);
    /* each batch's correct predictions are counted on the device and read (exact in a float) */
    dpt_tensor *correct = dpt_tensor_new(ctx, 1, (int64_t[]){2});
    double loss_sum = 0.0, right = 0.0, right5 = 0.0;
    int64_t samples = 0, terms = 0;
    dpt_batch batch;
    dpt_loader_start_epoch(loader, 0);
    while (dpt_loader_next(loader, &batch)) {
        dpt_tensor *out = dpt_model_forward_batch(model, ctx, &batch, &task);
        dpt_tensor *target = dpt_batch_get(&batch, task.target);
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
        samples += batch.size;
        terms += n;
        dpt_tape_clear(ctx);
    }
    dpt_tensor_free(correct);
    dpt_ctx_set_oom_hint(ctx, hint);
    dpt_model_set_training(model, was_training);
    dpt_set_grad_enabled(ctx, was_recording);
    double loss = terms ? loss_sum / (double)terms : 0.0;
    return (dpt_eval_result){
        .loss = loss,
        .accuracy = accuracy ? (terms ? right / (double)terms : 0.0) : NAN,
        .top5 = top5 ? (terms ? right5 / (double)terms : 0.0) : NAN,
        .perplexity = (task.metrics & DPT_METRIC_PERPLEXITY) ? exp(loss) : NAN,
        .samples = samples,
        .terms = terms,
    };
}
