/* conv_transpose2d.c: 2-D transposed convolution (torch.nn.ConvTranspose2d: decoders, U-Nets,
 * GAN generators) as an autograd node over the backend's convolution kernels, no kernel of its
 * own. A transposed convolution is the data gradient of the convolution that maps its output
 * back to its input: with that convolution C (x: the output's shape, y: the input's, the same
 * weight (in, out / groups, k, k) read as C's (C.out, C.in / groups, k, k), the same stride,
 * padding, dilation and groups),
 *   forward     y_t = C's backward data, of dy = x_t
 *   backward    dx_t = C's forward of dy_t;  dw += C's backward weights, of x = dy_t and dy = x_t
 * so every backend (the native im2col kernels, oneDNN, cuDNN) runs it with the algorithms it
 * already has, each in the layouts its conv2d_io asks for. */
#include <math.h>
#include <stdio.h>

#include "../runtime/autograd.h"
#include "../runtime/ctx.h"
#include "../runtime/error.h"

struct dpt_conv_transpose2d {
    char name[64];
    int64_t in_channels, out_channels, kernel, stride, padding, output_padding, dilation, groups;
    dpt_tensor *weight; /* (in, out / groups, k, k), as PyTorch's */
    dpt_tensor *bias;   /* (out) or NULL */
};

/* The output size: (in - 1) stride - 2 padding + dilation (kernel - 1) + output_padding + 1, 0
 * or less when the padding eats it. */
static int64_t out_size(const dpt_conv_transpose2d *l, int64_t in)
{
    return (in - 1) * l->stride - 2 * l->padding + l->dilation * (l->kernel - 1) + l->output_padding + 1;
}

dpt_conv_transpose2d *dpt_conv_transpose2d_new(dpt_model *model, const char *name, dpt_shape3 *shape,
                                               int64_t out_channels, int64_t kernel, int64_t stride, int64_t padding,
                                               int64_t output_padding, int64_t dilation, int64_t groups, bool bias)
{
    dpt_conv_transpose2d *l = dpt_model_alloc(model, sizeof *l);
    snprintf(l->name, sizeof l->name, "%s", name);
    l->in_channels = shape->c, l->out_channels = out_channels, l->kernel = kernel;
    l->stride = stride, l->padding = padding, l->output_padding = output_padding;
    l->dilation = dilation, l->groups = groups;
    /* PyTorch's rule for output_padding: below the stride or the dilation (else two output
     * sizes would need the same input size, and the convolution it inverts could not tell them
     * apart) */
    int64_t op_limit = stride > dilation ? stride : dilation;
    if (kernel < 1 || stride < 1 || padding < 0 || dilation < 1 || groups < 1 || output_padding < 0 ||
        output_padding >= op_limit || out_channels < 1 || shape->c < 1 || shape->c % groups || out_channels % groups) {
        dpt_model_errorf(model,
                         "conv_transpose2d %s: %lld -> %lld channels, kernel %lld, stride %lld, padding %lld, "
                         "output_padding %lld, dilation %lld, groups %lld: channels, kernel, stride and dilation "
                         "must be positive, the groups divide both channel counts, padding 0 or more, "
                         "output_padding below the stride or the dilation",
                         name, (long long)shape->c, (long long)out_channels, (long long)kernel, (long long)stride,
                         (long long)padding, (long long)output_padding, (long long)dilation, (long long)groups);
        l->groups = 1; /* keep the layer well-formed; the model reports the error */
        if (l->in_channels < 1) l->in_channels = 1;
        if (kernel < 1) l->kernel = 1;
        if (stride < 1) l->stride = 1;
        if (padding < 0) l->padding = 0;
        if (dilation < 1) l->dilation = 1;
        if (output_padding < 0 || output_padding >= (l->stride > l->dilation ? l->stride : l->dilation))
            l->output_padding = 0;
        if (out_channels < 1) l->out_channels = 1;
    }
    int64_t oh = out_size(l, shape->h), ow = out_size(l, shape->w);
    if (oh < 1 || ow < 1)
        dpt_model_errorf(model,
                         "conv_transpose2d %s: padding %lld leaves no output of the input %lldx%lld (kernel %lld, "
                         "stride %lld, dilation %lld): the output would be %lldx%lld",
                         name, (long long)l->padding, (long long)shape->h, (long long)shape->w, (long long)l->kernel,
                         (long long)l->stride, (long long)l->dilation, (long long)oh, (long long)ow);
    char pname[DPT_NAME_MAX + 33]; /* longer than DPT_NAME_MAX, cut or not: refused by dpt_model_param */
    snprintf(pname, sizeof pname, "%s.weight", name);
    l->weight = dpt_model_param(model, pname, 4,
                                (int64_t[]){l->in_channels, l->out_channels / l->groups, l->kernel, l->kernel});
    /* PyTorch's default (kaiming_uniform_ with a = sqrt(5)): U(-b, b), b = 1 / sqrt(fan_in), where
     * its fan_in of this weight is out / groups * k * k */
    float bound = 1.0f / sqrtf((float)(l->out_channels / l->groups * l->kernel * l->kernel));
    dpt_init_uniform(l->weight->ctx, l->weight, bound);
    if (bias) {
        snprintf(pname, sizeof pname, "%s.bias", name);
        l->bias = dpt_model_param(model, pname, 1, (int64_t[]){l->out_channels});
        dpt_init_uniform(l->bias->ctx, l->bias, bound);
    }
    int64_t in_hw = shape->h * shape->w;
    *shape = (dpt_shape3){l->out_channels, oh > 0 ? oh : 1, ow > 0 ? ow : 1};
    int64_t params = l->weight->numel + (l->bias ? l->bias->numel : 0);
    dpt_model_note(model, "conv_transpose2d", name, shape, params, 2.0 * (double)l->weight->numel * (double)in_hw);
    return l;
}

/* The convolution this one is the data gradient of: its x has the output's shape (n, out, oh,
 * ow), its y the input's (n, in, h, w), its weight (in, out / groups, k, k). Read in F32, x's
 * layout the one its conv2d_io answers. */
static dpt_conv_shape inverse_of(const dpt_conv_transpose2d *l, int64_t n, int64_t h, int64_t w, dpt_layout x_layout)
{
    return (dpt_conv_shape){.n = n,
                            .c_in = l->out_channels,
                            .h = out_size(l, h),
                            .w = out_size(l, w),
                            .c_out = l->in_channels,
                            .kh = l->kernel,
                            .kw = l->kernel,
                            .stride_h = l->stride,
                            .stride_w = l->stride,
                            .pad_h = l->padding,
                            .pad_w = l->padding,
                            .dil_h = l->dilation,
                            .dil_w = l->dilation,
                            .groups = l->groups,
                            .oh = h,
                            .ow = w,
                            .x_layout = x_layout,
                            .x_dtype = DPT_F32,
                            .y_dtype = DPT_F32};
}

static void conv_transpose2d_backward(dpt_ctx *ctx, dpt_node *node)
{
    const dpt_conv_transpose2d *l = node->layer;
    dpt_tensor *x = node->in[0], *w = node->in[1], *dy = node->out->grad;
    dpt_conv_shape s = inverse_of(l, x->shape[0], x->shape[2], x->shape[3], node->out->layout);
    if (dpt_wants_grad(x)) { /* the convolution's forward of dy, in x's layout (its y's) */
        bool acc = false;
        dpt_tensor *dx = dpt_grad_for_write(ctx, x, &acc);
        if (!acc) {
            ctx->be->conv2d_fwd(ctx, &s, dy->data, w->data, NULL, dx->data);
        } else {
            dpt_tensor *fresh = dpt_temp(ctx, 4, x->shape);
            ctx->be->conv2d_fwd(ctx, &s, dy->data, w->data, NULL, fresh->data);
            ctx->be->axpy(ctx, x->numel, 1.0f, fresh->data, dx->data);
            dpt_tensor_release(fresh); /* its header stays the tape's */
        }
    }
    if (dpt_wants_grad(w)) /* its weight gradient: x = dy, dy = x */
        ctx->be->conv2d_bwd(ctx, &s, dy->data, w->data, x->data, NULL, false, dpt_grad_acc(ctx, w)->data, NULL);
}

dpt_tensor *dpt_conv_transpose2d_forward(dpt_ctx *ctx, dpt_conv_transpose2d *l, dpt_tensor *x)
{
    char buf[96];
    x = dpt_dense(ctx, x); /* a view: a dense copy */
    if (x->ndim != 4 || x->shape[1] != l->in_channels || out_size(l, x->shape[2]) < 1 ||
        out_size(l, x->shape[3]) < 1)
        dpt_fatal("conv_transpose2d %s expects an (N, %lld, H, W) input with (H - 1) x %lld + %lld > 0, got %s",
                  l->name, (long long)l->in_channels, (long long)l->stride,
                  (long long)(l->dilation * (l->kernel - 1) + l->output_padding + 1 - 2 * l->padding),
                  dpt_shape_str(x, buf, sizeof buf));
    DPT_REQUIRE_OP(ctx, conv2d_bwd, "conv_transpose2d");
    dpt_conv_shape s = inverse_of(l, x->shape[0], x->shape[2], x->shape[3], DPT_LAYOUT_NCHW);
    dpt_conv_io io = {DPT_LAYOUT_NCHW, true, DPT_LAYOUT_NCHW, DPT_F32}; /* kernels that read NCHW F32 only */
    if (ctx->be->conv2d_io) ctx->be->conv2d_io(ctx, &s, &io);
    DPT_ASSERT(io.y_dtype == DPT_F32, "conv_transpose2d %s: the backend keeps the convolution's y as %d", l->name,
               (int)io.y_dtype);
    s.x_layout = io.x_layout;
    /* x is the convolution's dy: F32 in its y's layout */
    x = dpt_to_layout(ctx, x, io.y_layout);
    int64_t yshape[4] = {s.n, s.c_in, s.h, s.w};
    dpt_tensor *y = dpt_temp(ctx, 4, yshape);
    y->layout = io.x_layout;
    ctx->be->conv2d_bwd(ctx, &s, NULL, l->weight->data, x->data, y->data, false, NULL, NULL);
    dpt_node *node = dpt_tape_record(ctx, "conv_transpose2d", conv_transpose2d_backward, y, 2,
                                     (dpt_tensor *[]){x, l->weight});
    if (node) node->layer = l, node->out_unread = true; /* backward reads x and w */
    y = dpt_plain(ctx, y); /* NCHW for whatever reads it */
    if (l->bias) y = dpt_add(ctx, y, dpt_reshape(ctx, l->bias, 4, (int64_t[]){1, l->out_channels, 1, 1}));
    return y;
}
