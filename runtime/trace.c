/* trace.c: one forward at batch 1, read from the tape (trace.h). */
#include "trace.h"

#include <string.h>

#include "autograd.h"
#include "ctx.h"
#include "error.h"
#include "tensor.h"

/* 2 x multiply-adds of an op the tape recorded (the common conventions: fvcore, PyTorch's
 * FlopCounterMode), from its output's and inputs' shapes. */
static double node_flops(const dpt_node *n)
{
    const dpt_tensor *y = n->out, *a = n->in[0], *b = n->n_in > 1 ? n->in[1] : NULL;
    double out = (double)y->numel;
    if (!strcmp(n->op, "conv2d") && b) /* weight (Cout, Cin / groups, kh, kw) */
        return 2.0 * out * (double)(b->numel / b->shape[0]);
    if (!strcmp(n->op, "linear") && b) /* weight (out, in) */
        return 2.0 * out * (double)b->shape[1];
    if ((!strcmp(n->op, "matmul") || !strcmp(n->op, "bmm")) && b) /* a (..., M, K): each output a K-long dot */
        return 2.0 * out * (double)a->shape[a->ndim - 1];
    if (!strcmp(n->op, "attention")) { /* qkv (B, T, 3C) -> y (B, T, C): Q K^T and P V, each 2 B T T C */
        int64_t T = y->shape[1];
        return 4.0 * out * (double)T;
    }
    return 0.0;
}

void dpt_model_trace(dpt_ctx *ctx, dpt_model *model, const dpt_dataset *data, const dpt_task *task, dpt_trace *out)
{
    *out = (dpt_trace){0};
    dpt_batch batch = {.size = 1};
    batch.nfields = dpt_dataset_fields(data, batch.fields);
    int32_t zero_label = 0;
    for (int f = 0; f < batch.nfields; f++) {
        const dpt_field *fd = &batch.fields[f];
        int64_t shape[DPT_FIELD_MAX_DIMS + 1] = {1};
        for (int d = 0; d < fd->ndim; d++)
            shape[d + 1] = fd->shape[d];
        batch.tensors[f] = dpt_tensor_new_dtype(ctx, fd->dtype == DPT_I32 ? DPT_I32 : DPT_F32, fd->ndim + 1, shape);
        if (fd->dtype == DPT_I32 && fd->ndim == 0) /* an image set's labels */
            batch.labels = &zero_label, batch.device_labels = (const int32_t *)batch.tensors[f]->data;
    }
    batch.x = batch.tensors[0];
    bool recording = dpt_set_grad_enabled(ctx, true), training = dpt_model_training(model);
    dpt_model_set_training(model, false);
    int first = ctx->tape.nnodes;
    bool ckpt_off = ctx->ckpt_off;
    ctx->ckpt_off = true; /* dpt_checkpoint records what it runs: its ops are counted */
    dpt_model_forward_batch(model, ctx, &batch, task);
    ctx->ckpt_off = ckpt_off;
    for (int i = first; i < ctx->tape.nnodes; i++) {
        const dpt_node *n = &ctx->tape.nodes[i];
        out->flops += node_flops(n);
        out->output_floats += (double)n->out->numel;
        bool shared = false;
        for (int k = 0; k < n->n_in && !shared; k++)
            shared = n->in[k] && n->in[k]->storage == n->out->storage;
        if (!shared) {
            out->owned_floats += (double)n->out->numel * (n->out->dtype == DPT_BF16 ? 0.5 : 1.0);
            if ((double)n->out->numel > out->largest_owned) out->largest_owned = (double)n->out->numel;
        }
        out->ops++;
    }
    dpt_tape_clear(ctx);
    dpt_model_set_training(model, training);
    dpt_set_grad_enabled(ctx, recording);
    for (int f = 0; f < batch.nfields; f++)
        dpt_tensor_free(batch.tensors[f]);
}
