/* loss.c: softmax cross-entropy (mean over the batch, optional label smoothing) and the count
 * of correct predictions. The loss stays on the device (a 1-element tensor) and its backward
 * reads its own gradient there: a training step reads nothing back for them. Labels come
 * from host memory (checked, then copied to the device) or are on the device already (a
 * loader batch's device_labels). */
#include <string.h>

#include "../runtime/autograd.h"
#include "../runtime/ctx.h"
#include "../runtime/error.h"
#include "../runtime/registry.h"

static void check_logits(const char *op, const dpt_tensor *logits)
{
    char buf[96];
    if (logits->ndim != 2 || logits->shape[1] < 1)
        dpt_fatal("%s expects (batch, classes) logits, got %s", op,
                  dpt_shape_str(logits, buf, sizeof buf));
}

/* A tape-lifetime device copy of `rows` labels (int32 in float-sized slots), and one slot more
 * (the cross-entropy's count of the rows it averaged). */
static dpt_tensor *labels_on_tape(dpt_ctx *ctx, const int32_t *labels, int64_t rows, bool from_host)
{
    dpt_tensor *t = dpt_temp(ctx, 1, (int64_t[]){rows + 1});
    if (from_host)
        ctx->be->dev->copy_h2d(ctx, t->data, labels, (size_t)rows * sizeof *labels);
    else
        ctx->be->dev->copy_d2d(ctx, t->data, labels, (size_t)rows * sizeof *labels);
    return t;
}

static void check_host_labels(const char *op, const int32_t *labels, int64_t rows, int64_t cols, int32_t ignore)
{
    dpt_check_indices(op, "label", labels, rows, cols, true, ignore,
                      "labels (targets) are class indices below the logits' last dimension (the model's "
                      "classes or vocabulary)");
}

static void xent_backward(dpt_ctx *ctx, dpt_node *node)
{
    dpt_tensor *logits = node->in[0];
    int64_t rows = logits->shape[0];
    ctx->be->xent_bwd(ctx, node->saved[0]->data, (const int32_t *)node->saved[1]->data, rows, logits->shape[1],
                      node->arg.xent.label_smoothing, node->arg.xent.ignore_index, node->out->grad->data,
                      node->saved[1]->data + rows, dpt_grad_acc(ctx, logits)->data);
}

static dpt_tensor *cross_entropy(dpt_ctx *ctx, dpt_tensor *logits, const int32_t *labels, bool host_labels,
                                 float label_smoothing, int32_t ignore_index)
{
    logits = dpt_dense(ctx, dpt_plain(ctx, logits));
    check_logits("cross_entropy", logits);
    DPT_ASSERT(label_smoothing >= 0.0f && label_smoothing < 1.0f, "label smoothing %g", label_smoothing);
    int64_t rows = logits->shape[0], cols = logits->shape[1];
    DPT_ASSERT(rows > 0, "cross-entropy of an empty batch");
    if (host_labels || dpt_ctx_device(ctx).kind == DPT_DEVICE_CPU) /* on a GPU: NaN rows instead */
        check_host_labels("cross_entropy", labels, rows, cols, ignore_index);
    /* The caller's label buffer may be reused (a loader's next batch) before backward runs. */
    dpt_tensor *kept = labels_on_tape(ctx, labels, rows, host_labels);
    dpt_tensor *probs = dpt_temp_like(ctx, logits);
    dpt_tensor *loss = dpt_temp(ctx, 1, (int64_t[]){1});
    ctx->be->xent_fwd(ctx, logits->data, (const int32_t *)kept->data, rows, cols, label_smoothing, ignore_index,
                      probs->data, loss->data, kept->data + rows);
    dpt_node *node = dpt_tape_record(ctx, "cross_entropy", xent_backward, loss, 1, &logits);
    if (node) {
        node->saved[0] = probs;
        node->saved[1] = kept;
        node->arg.xent.label_smoothing = label_smoothing;
        node->arg.xent.ignore_index = ignore_index;
    }
    return loss;
}

dpt_tensor *dpt_cross_entropy(dpt_ctx *ctx, dpt_tensor *logits, const int32_t *labels, float label_smoothing)
{
    return cross_entropy(ctx, logits, labels, true, label_smoothing, DPT_IGNORE_INDEX);
}

dpt_tensor *dpt_cross_entropy_dev(dpt_ctx *ctx, dpt_tensor *logits, const int32_t *device_labels,
                                  float label_smoothing)
{
    return cross_entropy(ctx, logits, device_labels, false, label_smoothing, DPT_IGNORE_INDEX);
}

dpt_tensor *dpt_cross_entropy_targets(dpt_ctx *ctx, dpt_tensor *logits, dpt_tensor *targets, float label_smoothing,
                                      int32_t ignore_index)
{
    char a[96], b[96];
    int64_t classes = logits->shape[logits->ndim - 1];
    if (targets->dtype != DPT_I32 || logits->ndim < 2 || logits->numel != targets->numel * classes ||
        !dpt_tensor_is_contiguous(targets))
        dpt_fatal("cross_entropy: logits %s do not fit targets %s (int32, contiguous, one per row of logits)",
                  dpt_shape_str(logits, a, sizeof a), dpt_shape_str(targets, b, sizeof b));
    if (logits->ndim > 2) logits = dpt_reshape(ctx, logits, 2, (int64_t[]){targets->numel, classes});
    return cross_entropy(ctx, logits, (const int32_t *)targets->data, false, label_smoothing, ignore_index);
}

void dpt_count_topk_into(dpt_ctx *ctx, dpt_tensor *logits, const int32_t *device_labels, int k,
                         dpt_tensor *counter, int64_t index)
{
    logits = dpt_dense(ctx, dpt_plain(ctx, logits));
    check_logits("count_correct", logits);
    DPT_ASSERT(index >= 0 && index < counter->numel, "counter slot %lld of %lld", (long long)index,
               (long long)counter->numel);
    DPT_ASSERT(k >= 1, "top-%d", k);
    ctx->be->correct_acc(ctx, logits->data, device_labels, logits->shape[0], logits->shape[1], k,
                         counter->data + index);
}

void dpt_count_correct_into(dpt_ctx *ctx, dpt_tensor *logits, const int32_t *device_labels,
                            dpt_tensor *counter, int64_t index)
{
    dpt_count_topk_into(ctx, logits, device_labels, 1, counter, index);
}

int64_t dpt_count_topk(dpt_ctx *ctx, dpt_tensor *logits, const int32_t *labels, int k)
{
    logits = dpt_dense(ctx, dpt_plain(ctx, logits));
    check_logits("count_correct", logits);
    check_host_labels("count_correct", labels, logits->shape[0], logits->shape[1], DPT_IGNORE_INDEX);
    dpt_tensor *dev = labels_on_tape(ctx, labels, logits->shape[0], true);
    dpt_tensor *counter = dpt_temp_zeros(ctx, 1, (int64_t[]){1});
    dpt_count_topk_into(ctx, logits, (const int32_t *)dev->data, k, counter, 0);
    return (int64_t)dpt_tensor_item(counter); /* a read: evaluation and tests, not the step */
}

int64_t dpt_count_correct(dpt_ctx *ctx, dpt_tensor *logits, const int32_t *labels)
{
    return dpt_count_topk(ctx, logits, labels, 1);
}

/* ---------------------------------------------------------------- the registered loss */

typedef struct xent_settings {
    float label_smoothing;
} xent_settings;

static bool xent_configure(void *settings, const dpt_config *cfg, dpt_error *err)
{
    ((xent_settings *)settings)->label_smoothing = (float)dpt_config_float(cfg, "train", "label_smoothing");
    (void)err;
    return true;
}

static bool xent_accepts(const dpt_field *target, dpt_error *err)
{
    if (target->dtype == DPT_I32) return true;
    return dpt_errorf(err, "the loss cross_entropy compares logits with class indices, and the target field '%s' holds "
                           "floats\nHINT: a model of real-valued targets trains with the loss mse",
                      target->name);
}

/* Logits (..., C) as rows (N, C) against int32 targets (...) of N values. */
static dpt_tensor *logit_rows(dpt_ctx *ctx, dpt_tensor *logits, const dpt_tensor *target, bool record)
{
    char a[96], b[96];
    int64_t classes = logits->shape[logits->ndim - 1];
    if (target->dtype != DPT_I32 || logits->ndim < 2 || logits->numel != target->numel * classes)
        dpt_fatal("cross_entropy: logits %s do not fit targets %s (int32, one per row of logits)",
                  dpt_shape_str(logits, a, sizeof a), dpt_shape_str(target, b, sizeof b));
    if (logits->ndim == 2) return logits;
    int64_t shape[2] = {target->numel, classes};
    return record ? dpt_reshape(ctx, logits, 2, shape) : dpt_view(ctx, dpt_plain(ctx, logits), 2, shape, NULL, 0);
}

static dpt_tensor *xent_forward(dpt_ctx *ctx, dpt_tensor *output, dpt_tensor *target, const void *settings)
{
    float smoothing = settings ? ((const xent_settings *)settings)->label_smoothing : 0.0f;
    return cross_entropy(ctx, logit_rows(ctx, output, target, true), (const int32_t *)target->data, false, smoothing,
                         DPT_IGNORE_INDEX);
}

static int64_t xent_terms(const dpt_tensor *output, const dpt_tensor *target)
{
    (void)output;
    return target->numel;
}

static void xent_count_correct(dpt_ctx *ctx, dpt_tensor *output, dpt_tensor *target, dpt_tensor *sums, int64_t at)
{
    dpt_count_correct_into(ctx, logit_rows(ctx, output, target, false), (const int32_t *)target->data, sums, at);
}

static void xent_count_top5(dpt_ctx *ctx, dpt_tensor *output, dpt_tensor *target, dpt_tensor *sums, int64_t at)
{
    dpt_count_topk_into(ctx, logit_rows(ctx, output, target, false), (const int32_t *)target->data, 5, sums, at);
}

static const dpt_loss_impl xent_impl = {
    .settings_size = sizeof(xent_settings),
    .configure = xent_configure,
    .accepts = xent_accepts,
    .forward = xent_forward,
    .terms = xent_terms,
    .metrics = DPT_METRIC_ACCURACY | DPT_METRIC_PERPLEXITY | DPT_METRIC_TOP5,
    .count_correct = xent_count_correct,
    .count_top5 = xent_count_top5,
};

static const dpt_config_key xent_keys[] = {
    {"train", "label_smoothing", DPT_KEY_FLOAT, "0", 0, 0.999, NULL, "cross-entropy label smoothing", 0},
};
DPT_BUILTIN(loss_cross_entropy) = {DPT_KIND_LOSS, "cross_entropy",
                                   "softmax cross-entropy of logits (..., C) against class indices (...), mean over rows",
                                   xent_keys, DPT_COUNT(xent_keys), &xent_impl};
