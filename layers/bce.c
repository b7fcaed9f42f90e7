/* bce.c: binary cross-entropy with logits (torch.nn.BCEWithLogitsLoss, reduction mean): for each
 * value a logit x and a target t in [0, 1] (a label of a multi-label problem, a pixel of an image
 * in [0, 1], a discriminator's real/fake), -(t log sigmoid(x) + (1 - t) log sigmoid(-x)), the mean
 * over every value. Written as a two-class log-softmax of (0, x), whose two outputs are
 * log sigmoid(-x) and log sigmoid(x): stable for any |x|, and its gradient sigmoid(x) - t holds
 * at x = 0 too (a max/abs form's derivative is 0 - t there, which a zero-initialised head meets).
 * Composed of existing ops: every backend runs it. */
#include "dpt.h"
#include "../runtime/error.h"
#include "../runtime/registry.h"
#include "../runtime/tensor.h"

dpt_tensor *dpt_bce_with_logits(dpt_ctx *ctx, dpt_tensor *logits, dpt_tensor *target)
{
    char a[96], b[96];
    if (logits->numel != target->numel || target->dtype != DPT_F32 || logits->numel < 1)
        dpt_fatal("bce_with_logits: logits %s and target %s (float, in [0, 1]) need the same number of values",
                  dpt_shape_str(logits, a, sizeof a), dpt_shape_str(target, b, sizeof b));
    int64_t n = logits->numel;
    dpt_tensor *x = dpt_reshape(ctx, logits, 2, (int64_t[]){n, 1});
    dpt_tensor *pair = dpt_concat(ctx, 2, (dpt_tensor *[]){dpt_scale(ctx, x, 0.0f), x}, 1); /* (0, x) per value */
    dpt_tensor *ls = dpt_log_softmax(ctx, pair);                                            /* (log s(-x), log s(x)) */
    dpt_tensor *t = dpt_reshape(ctx, target, 2, (int64_t[]){n, 1});
    dpt_tensor *one_minus_t = dpt_add_scalar(ctx, dpt_scale(ctx, t, -1.0f), 1.0f);
    dpt_tensor *ll = dpt_add(ctx, dpt_mul(ctx, t, dpt_narrow(ctx, ls, 1, 1, 1)),
                             dpt_mul(ctx, one_minus_t, dpt_narrow(ctx, ls, 1, 0, 1)));
    return dpt_scale(ctx, dpt_mean(ctx, ll), -1.0f);
}

static bool bce_accepts(const dpt_field *target, dpt_error *err)
{
    if (target->dtype == DPT_F32) return true;
    return dpt_errorf(err, "the loss bce_with_logits compares with real values in [0, 1], and the target field '%s' "
                           "holds integers\nHINT: class indices train with the loss cross_entropy",
                      target->name);
}

static dpt_tensor *bce_forward(dpt_ctx *ctx, dpt_tensor *output, dpt_tensor *target, const void *settings)
{
    (void)settings;
    return dpt_bce_with_logits(ctx, output, target);
}

/* the mean is over every value; a sample's loss is that mean too, so windows average by sample */
static int64_t bce_terms(const dpt_tensor *output, const dpt_tensor *target)
{
    (void)target;
    return output->shape[0];
}

/* Accuracy of a multi-label head, each value a yes/no (Keras' binary_accuracy, sklearn's
 * hamming score): a value is right when its logit is above 0 (probability above 0.5) exactly
 * when its target is above 0.5. sums[at] += the right values over the values a sample has, so
 * that over the terms (samples) it is the fraction of values right. Composed of existing ops,
 * with recording off: each side as -1 or +1 (sign(sign(v) - 0.5): v <= 0 is -1), their product
 * + 1 is 2 where they agree, 0 where not. A model declares it (dpt_task.metrics); a sum of
 * whole numbers, exact in float up to 2^24 values a batch. */
static void bce_count_correct(dpt_ctx *ctx, dpt_tensor *output, dpt_tensor *target, dpt_tensor *sums, int64_t at)
{
    bool was_recording = dpt_set_grad_enabled(ctx, false);
    int64_t n = output->numel, per = n / output->shape[0];
    dpt_tensor *x = dpt_reshape(ctx, output, 1, (int64_t[]){n});
    dpt_tensor *t = dpt_add_scalar(ctx, dpt_reshape(ctx, target, 1, (int64_t[]){n}), -0.5f);
    dpt_tensor *sx = dpt_unary(ctx, DPT_UNARY_SIGN, dpt_add_scalar(ctx, dpt_unary(ctx, DPT_UNARY_SIGN, x), -0.5f));
    dpt_tensor *st = dpt_unary(ctx, DPT_UNARY_SIGN, dpt_add_scalar(ctx, dpt_unary(ctx, DPT_UNARY_SIGN, t), -0.5f));
    dpt_tensor *agree = dpt_sum(ctx, dpt_add_scalar(ctx, dpt_mul(ctx, sx, st), 1.0f));
    dpt_tensor_add_slice(ctx, sums, at, agree, 0, 1, 0.5f / (float)per);
    dpt_set_grad_enabled(ctx, was_recording);
}

static const dpt_loss_impl bce_impl = {.accepts = bce_accepts,
                                       .forward = bce_forward,
                                       .terms = bce_terms,
                                       .metrics = DPT_METRIC_ACCURACY,
                                       .count_correct = bce_count_correct};
DPT_BUILTIN(loss_bce_with_logits) = {DPT_KIND_LOSS, "bce_with_logits",
                                     "binary cross-entropy of logits against targets in [0, 1], the mean over every "
                                     "value (torch.nn.BCEWithLogitsLoss)",
                                     NULL, 0, &bce_impl};
