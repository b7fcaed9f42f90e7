/* conv2d.c: 2-D convolution as an autograd node over the backend's conv kernels. */
#include <math.h>
#include <stdio.h>

#include "../runtime/autograd.h"
#include "../runtime/ctx.h"
#include "../runtime/error.h"

struct dpt_conv2d {
    char name[64];
    int64_t in_channels, out_channels, kernel, stride, padding, dilation, groups;
    dpt_tensor *weight; /* (out, in/groups, k, k) */
    dpt_tensor *bias;   /* (out) or NULL */
};

static bool conv_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, int64_t *out)
{
    int64_t span = d * (k - 1) + 1;
    if (in + 2 * p < span) return false;
    *out = (in + 2 * p - span) / s + 1;
    return true;
}

dpt_conv2d *dpt_conv2d_new(dpt_model *model, const char *name, dpt_shape3 *shape, int64_t out_channels,
                           int64_t kernel, int64_t stride, int64_t padding, int64_t dilation, int64_t groups,
                           bool bias)
{
    dpt_conv2d *l = dpt_model_alloc(model, sizeof *l);
    snprintf(l->name, sizeof l->name, "%s", name);
    l->in_channels = shape->c, l->out_channels = out_channels, l->kernel = kernel;
    l->stride = stride, l->padding = padding, l->dilation = dilation, l->groups = groups;
    if (kernel < 1 || stride < 1 || padding < 0 || dilation < 1 || groups < 1 || out_channels < 1 ||
        shape->c < 1 || shape->c % groups || out_channels % groups) {
        dpt_model_errorf(model,
                         "conv2d %s: %lld -> %lld channels, kernel %lld, stride %lld, padding %lld, "
                         "dilation %lld, groups %lld: channels must be positive and divisible by groups",
                         name, (long long)shape->c, (long long)out_channels, (long long)kernel,
                         (long long)stride, (long long)padding, (long long)dilation, (long long)groups);
        l->groups = groups = 1; /* keep the layer well-formed; the model reports the error */
        if (l->in_channels < 1) l->in_channels = 1;
        if (kernel < 1) l->kernel = kernel = 1;
        if (stride < 1) l->stride = 1;
        if (dilation < 1) l->dilation = 1;
        if (out_channels < 1) l->out_channels = out_channels = 1;
    }
    int64_t oh = 0, ow = 0;
    if (!conv_out(shape->h, l->kernel, l->stride, l->padding, l->dilation, &oh) ||
        !conv_out(shape->w, l->kernel, l->stride, l->padding, l->dilation, &ow))
        dpt_model_errorf(model,
                         "conv2d %s: kernel %lld (dilation %lld) is larger than the padded input "
                         "%lldx%lld (+%lld padding) of shape (%lld, %lld, %lld)",
                         name, (long long)l->kernel, (long long)l->dilation, (long long)shape->h,
                         (long long)shape->w, (long long)l->padding, (long long)shape->c, (long long)shape->h,
                         (long long)shape->w);
    char pname[DPT_NAME_MAX + 33]; /* longer than DPT_NAME_MAX, cut or not: refused by dpt_model_param */
    snprintf(pname, sizeof pname, "%s.weight", name);
    l->weight = dpt_model_param(
        model, pname, 4, (int64_t[]){l->out_channels, l->in_channels / l->groups, l->kernel, l->kernel});
    /* torchvision ResNet: kaiming_normal_(mode="fan_out", nonlinearity="relu") */
    float std = sqrtf(2.0f / (float)(l->out_channels * l->kernel * l->kernel));
    dpt_init_normal(l->weight->ctx, l->weight, std);
    if (bias) {
        snprintf(pname, sizeof pname, "%s.bias", name);
        l->bias = dpt_model_param(model, pname, 1, (int64_t[]){l->out_channels});
    }
    *shape = (dpt_shape3){l->out_channels, oh > 0 ? oh : 1, ow > 0 ? ow : 1};
    int64_t params = l->weight->numel + (l->bias ? l->bias->numel : 0);
    dpt_model_note(model, "conv2d", name, shape, params,
                   2.0 * (double)l->weight->numel * (double)(shape->h * shape->w));
    return l;
}

static dpt_conv_shape shape_of(const dpt_conv2d *l, const dpt_tensor *x)
{
    dpt_conv_shape s = {
        .n = x->shape[0],
        .c_in = x->shape[1],
        .h = x->shape[2],
        .w = x->shape[3],
        .c_out = l->out_channels,
        .kh = l->kernel,
        .kw = l->kernel,
        .stride_h = l->stride,
        .stride_w = l->stride,
        .pad_h = l->padding,
        .pad_w = l->padding,
        .dil_h = l->dilation,
        .dil_w = l->dilation,
        .groups = l->groups,
        .x_layout = x->layout,
        .x_dtype = x->dtype,
        .y_dtype = x->ctx->act16 ? DPT_BF16 : DPT_F32, /* what the context keeps activations in */
    };
    conv_out(s.h, s.kh, s.stride_h, s.pad_h, s.dil_h, &s.oh);
    conv_out(s.w, s.kw, s.stride_w, s.pad_w, s.dil_w, &s.ow);
    return s;
}

static void conv2d_backward(dpt_ctx *ctx, dpt_node *node)
{
    const dpt_conv2d *l = node->layer;
    dpt_tensor *x = node->in[0], *w = node->in[1], *b = node->in[2];
    dpt_conv_shape s = shape_of(l, x);
    bool acc = false; /* set by dpt_grad_for_write: a statement of its own, before acc is read */
    float *dx = dpt_wants_grad(x) ? dpt_grad_for_write(ctx, x, &acc)->data : NULL;
    ctx->be->conv2d_bwd(ctx, &s, x->data, w->data, node->out->grad->data, dx, acc,
                        dpt_wants_grad(w) ? dpt_grad_acc(ctx, w)->data : NULL,
                        dpt_wants_grad(b) ? dpt_grad_acc(ctx, b)->data : NULL);
}

dpt_tensor *dpt_conv2d_forward(dpt_ctx *ctx, dpt_conv2d *l, dpt_tensor *x)
{
    char buf[96];
    int64_t tmp;
    x = dpt_dense(ctx, x); /* a view: a dense copy */
    if (x->ndim != 4 || x->shape[1] != l->in_channels ||
        !conv_out(x->shape[2], l->kernel, l->stride, l->padding, l->dilation, &tmp) ||
        !conv_out(x->shape[3], l->kernel, l->stride, l->padding, l->dilation, &tmp))
        dpt_fatal("conv2d %s expects an (N, %lld, H, W) input with H, W >= %lld, got %s", l->name,
                  (long long)l->in_channels, (long long)(l->dilation * (l->kernel - 1) + 1 - 2 * l->padding),
                  dpt_shape_str(x, buf, sizeof buf));
    DPT_REQUIRE_OP(ctx, conv2d_fwd, "conv2d");
    dpt_conv_shape s = shape_of(l, x);
    dpt_conv_io io = {DPT_LAYOUT_NCHW, true, DPT_LAYOUT_NCHW, DPT_F32}; /* kernels that read NCHW F32 only */
    if (ctx->be->conv2d_io) ctx->be->conv2d_io(ctx, &s, &io);
    if (x->layout != io.x_layout || (io.x_f32 && x->dtype == DPT_BF16))
        x = dpt_to_layout(ctx, x, io.x_layout), s = shape_of(l, x);
    int64_t yshape[4] = {s.n, s.c_out, s.oh, s.ow};
    dpt_tensor *y = io.y_dtype == DPT_BF16 ? dpt_temp16(ctx, 4, yshape) : dpt_temp(ctx, 4, yshape);
    y->layout = io.y_layout;
    ctx->be->conv2d_fwd(ctx, &s, x->data, l->weight->data, l->bias ? l->bias->data : NULL, y->data);
    dpt_node *node =
        dpt_tape_record(ctx, "conv2d", conv2d_backward, y, 3, (dpt_tensor *[]){x, l->weight, l->bias});
    if (node) node->layer = l, node->out_unread = true; /* backward reads x and w */
    return y;
}
