/* loss.c: softmax cross-entropy (mean over the batch, optional label smoothing) and the count
 * of correct predictions. The loss stays on the device (a 1-element tensor) and its backward
 * reads its own gradient there: a training step reads nothing back for them. Labels come
 * from host memory (checked, then copied to the device) or are on the device already (a
 * loader batch's device_labels). */
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

/* A tape-lifetime device copy of `rows` labels (int32 in float-sized slots). */
static dpt_tensor *labels_on_tape(dpt_ctx *ctx, const int32_t *labels, int64_t rows, bool from_host)
{
    dpt_tensor *t = dpt_temp(ctx, 1, &rows);
    if (from_host)
        ctx->be->copy_h2d(ctx, t->data, labels, (size_t)rows * sizeof *labels);
    else
        ctx->be->copy_d2d(ctx, t->data, labels, (size_t)rows * sizeof *labels);
    return t;
}

static void check_host_labels(const char *op, const int32_t *labels, int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++)
        if (labels[r] < 0 || labels[r] >= cols)
            dpt_fatal("%s: label %d of row %lld is outside [0, %lld)", op, labels[r], (long long)r,
                      (long long)cols);
}

static void xent_backward(dpt_ctx *ctx, dpt_node *node)
{
    dpt_tensor *logits = node->in[0];
    ctx->be->xent_bwd(ctx, node->saved[0]->data, (const int32_t *)node->saved[1]->data, logits->shape[0],
                      logits->shape[1], node->arg.label_smoothing, node->out->grad->data, dpt_grad_acc(ctx, logits)->data);
}

static dpt_tensor *cross_entropy(dpt_ctx *ctx, dpt_tensor *logits, const int32_t *labels, bool host_labels,
                                 float label_smoothing)
{
    logits = dpt_plain(ctx, logits);
    check_logits("cross_entropy", logits);
    DPT_ASSERT(label_smoothing >= 0.0f && label_smoothing < 1.0f, "label smoothing %g", label_smoothing);
    int64_t rows = logits->shape[0], cols = logits->shape[1];
    DPT_ASSERT(rows > 0, "cross-entropy of an empty batch");
    if (host_labels) check_host_labels("cross_entropy", labels, rows, cols);
    /* The caller's label buffer may be reused (a loader's next batch) before backward runs. */
    dpt_tensor *kept = labels_on_tape(ctx, labels, rows, host_labels);
    dpt_tensor *probs = dpt_temp_like(ctx, logits);
    dpt_tensor *loss = dpt_temp(ctx, 1, (int64_t[]){1});
    ctx->be->xent_fwd(ctx, logits->data, (const int32_t *)kept->data, rows, cols, label_smoothing,
                      probs->data, loss->data);
    dpt_node *node = dpt_tape_record(ctx, "cross_entropy", xent_backward, loss, 1, &logits);
    if (node) {
        node->saved[0] = probs;
        node->saved[1] = kept;
        node->arg.label_smoothing = label_smoothing;
    }
    return loss;
}

dpt_tensor *dpt_cross_entropy(dpt_ctx *ctx, dpt_tensor *logits, const int32_t *labels, float label_smoothing)
{
    return cross_entropy(ctx, logits, labels, true, label_smoothing);
}

dpt_tensor *dpt_cross_entropy_dev(dpt_ctx *ctx, dpt_tensor *logits, const int32_t *device_labels,
                                  float label_smoothing)
{
    return cross_entropy(ctx, logits, device_labels, false, label_smoothing);
}

void dpt_count_correct_into(dpt_ctx *ctx, dpt_tensor *logits, const int32_t *device_labels,
                            dpt_tensor *counter, int64_t index)
{
    logits = dpt_plain(ctx, logits);
    check_logits("count_correct", logits);
    DPT_ASSERT(index >= 0 && index < counter->numel, "counter slot %lld of %lld", (long long)index,
               (long long)counter->numel);
    ctx->be->correct_acc(ctx, logits->data, device_labels, logits->shape[0], logits->shape[1],
                         counter->data + index);
}

int64_t dpt_count_correct(dpt_ctx *ctx, dpt_tensor *logits, const int32_t *labels)
{
    logits = dpt_plain(ctx, logits);
    check_logits("count_correct", logits);
    check_host_labels("count_correct", labels, logits->shape[0], logits->shape[1]);
    dpt_tensor *dev = labels_on_tape(ctx, labels, logits->shape[0], true);
    dpt_tensor *counter = dpt_temp_zeros(ctx, 1, (int64_t[]){1});
    ctx->be->correct_acc(ctx, logits->data, (const int32_t *)dev->data, logits->shape[0], logits->shape[1],
                         counter->data);
    return (int64_t)dpt_tensor_item(counter); /* a read: evaluation and tests, not the step */
}
