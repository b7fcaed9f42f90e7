/* eval.c: evaluation over a loader with recording off and the model in eval mode. */
#include "dpt.h"

dpt_eval_result dpt_evaluate(dpt_ctx *ctx, dpt_model *model, dpt_loader *loader)
{
    bool was_training = dpt_model_training(model);
    bool was_recording = dpt_set_grad_enabled(ctx, false);
    dpt_model_set_training(model, false);
    const char *hint = dpt_ctx_set_oom_hint(ctx, DPT_EVAL_OOM_HINT);
    double loss_sum = 0.0;
    int64_t correct = 0, samples = 0;
    dpt_batch batch;
    dpt_loader_start_epoch(loader, 0);
    while (dpt_loader_next(loader, &batch)) {
        dpt_tensor *logits = dpt_model_forward(model, ctx, batch.x);
        loss_sum +=
            (double)dpt_tensor_item(dpt_cross_entropy(ctx, logits, batch.labels, 0.0f)) * (double)batch.size;
        correct += dpt_count_correct(ctx, logits, batch.labels);
        samples += batch.size;
        dpt_tape_clear(ctx);
    }
    dpt_ctx_set_oom_hint(ctx, hint);
    dpt_model_set_training(model, was_training);
    dpt_set_grad_enabled(ctx, was_recording);
    return (dpt_eval_result){
        .loss = samples ? loss_sum / (double)samples : 0.0,
        .accuracy = samples ? (double)correct / (double)samples : 0.0,
        .samples = samples,
    };
}
