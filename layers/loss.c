/* loss.c: softmax cross-entropy (mean over the batch, optional label smoothing). */
#include <string.h>

#include "../runtime/autograd.h"
#include "../runtime/ctx.h"
#include "../runtime/error.h"

static void check_logits(const char *op, const dpt_tensor *logits)
{
    char buf[96];
    if (logits->ndim != 2 || logits->shape[1] < 1 || !dpt_tensor_is_contiguous(logits))
        dpt_fatal("%s expects contiguous (batch, classes) logits, got %s", op,
                  dpt_shape_str(logits, buf, sizeof buf));
}

static void xent_backward(dpt_ctx *ctx, dpt_node *node)
{
    dpt_tensor *logits = node->in[0];
    int64_t rows = logits->shape[0], cols = logits->shape[1];
    float scale = dpt_tensor_item(node->out->grad) / (float)rows;
    ctx->be->xent_bwd(ctx, node->saved[0]->data, node->scratch, rows, cols, node->f[0], scale,
                      dpt_grad_acc(ctx, logits)->data);
}

dpt_tensor *dpt_cross_entropy(dpt_ctx *ctx, dpt_tensor *logits, const int32_t *labels, float label_smoothing)
{
    check_logits("cross_entropy", logits);
    DPT_ASSERT(label_smoothing >= 0.0f && label_smoothing < 1.0f, "label smoothing %g", label_smoothing);
    int64_t rows = logits->shape[0], cols = logits->shape[1];
    DPT_ASSERT(rows > 0, "cross-entropy of an empty batch");
    dpt_tensor *probs = dpt_temp_like(ctx, logits);
    double total = ctx->be->xent_fwd(ctx, logits->data, labels, rows, cols, label_smoothing, probs->data);
    dpt_tensor *loss = dpt_temp(ctx, 1, (int64_t[]){1});
    float mean = (float)(total / (double)rows);
    ctx->be->copy_h2d(ctx, loss->data, &mean, sizeof mean);
    dpt_node *node = dpt_tape_record(ctx, "cross_entropy", xent_backward, loss, 1, &logits);
    if (node) {
        node->saved[0] = probs;
        node->f[0] = label_smoothing;
        /* The caller's label buffer is reused by the loader before backward may run. */
        node->scratch = dpt_tape_scratch(ctx, (size_t)rows * sizeof *labels);
        memcpy(node->scratch, labels, (size_t)rows * sizeof *labels);
    }
    return loss;
}

int64_t dpt_count_correct(dpt_ctx *ctx, dpt_tensor *logits, const int32_t *labels)
{
    check_logits("count_correct", logits);
    return ctx->be->count_correct(ctx, logits->data, labels, logits->shape[0], logits->shape[1]);
}
