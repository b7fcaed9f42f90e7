/* mse.c: the mean squared error loss (torch.nn.MSELoss, reduction mean): the mean over every
 * element of (output - target)^2, for real-valued targets of the output's size. */
#include "dpt.h"
#include "../runtime/error.h"
#include "../runtime/registry.h"
#include "../runtime/tensor.h"

dpt_tensor *dpt_mse_loss(dpt_ctx *ctx, dpt_tensor *output, dpt_tensor *target)
{
    char a[96], b[96];
    if (output->numel != target->numel || target->dtype != DPT_F32)
        dpt_fatal("mse: output %s and target %s (float) need the same number of values",
                  dpt_shape_str(output, a, sizeof a), dpt_shape_str(target, b, sizeof b));
    dpt_tensor *diff = dpt_sub(ctx, output, dpt_reshape(ctx, target, output->ndim, output->shape));
    return dpt_mean(ctx, dpt_mul(ctx, diff, diff));
}

static bool mse_accepts(const dpt_field *target, dpt_error *err)
{
    if (target->dtype == DPT_F32) return true;
    return dpt_errorf(err, "the loss mse compares with real values, and the target field '%s' holds integers\nHINT: "
                           "class indices train with the loss cross_entropy",
                      target->name);
}

static dpt_tensor *mse_forward(dpt_ctx *ctx, dpt_tensor *output, dpt_tensor *target, const void *settings)
{
    (void)settings;
    return dpt_mse_loss(ctx, output, target);
}

/* the mean is over every value; a sample's loss is that mean too, so windows average by sample */
static int64_t mse_terms(const dpt_tensor *output, const dpt_tensor *target)
{
    (void)target;
    return output->shape[0];
}

static const dpt_loss_impl mse_impl = {.accepts = mse_accepts, .forward = mse_forward, .terms = mse_terms};
DPT_BUILTIN(loss_mse) = {DPT_KIND_LOSS, "mse", "mean squared error over every value (torch.nn.MSELoss)", NULL, 0,
                         &mse_impl};
