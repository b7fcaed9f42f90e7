/* trace.c: one forward at batch 1, read from the tape (trace.h). */
#include "trace.h"

#include <stdlib.h>
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
    if (!strcmp(n->op, "conv_transpose2d") && b) /* weight (Cin, Cout, kh, kw): each input a Cout k k scatter */
        return 2.0 * (double)a->numel * (double)(b->numel / b->shape[0]);
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

/* The table's rows: the ops that read a parameter or do counted FLOPs, one each, in the order the
 * forward ran them; the others (elementwise, views, reductions) counted by name after. */
typedef struct rows {
    FILE *out;
    const dpt_tensor **seen; /* parameters already in a row: a second use (tied weights) adds none */
    int nseen, cap;
    const char *other[32];
    int other_n[32], nother, other_more;
    int64_t params;
} rows;

static bool seen_before(rows *tb, const dpt_tensor *p)
{
    for (int i = 0; i < tb->nseen; i++)
        if (tb->seen[i] == p) return true;
    if (tb->nseen == tb->cap) {
        tb->cap = tb->cap ? 2 * tb->cap : 64;
        tb->seen = realloc(tb->seen, (size_t)tb->cap * sizeof *tb->seen);
        if (!tb->seen) dpt_fatal("out of host memory for the summary");
    }
    tb->seen[tb->nseen++] = p;
    return false;
}

static void table_row(rows *tb, const dpt_node *n, double flops)
{
    char name[DPT_NAME_MAX + 1];
    const char *layer = dpt_node_layer(n, name, sizeof name);
    int64_t params = 0;
    bool tied = false;
    for (int k = 0; k < n->n_in; k++) {
        const dpt_tensor *in = n->in[k];
        if (!in || !in->is_param) continue;
        if (seen_before(tb, in))
            tied = true;
        else
            params += in->numel;
    }
    if (!layer && flops == 0.0) { /* counted by name */
        int i = 0;
        while (i < tb->nother && strcmp(tb->other[i], n->op))
            i++;
        if (i == tb->nother && tb->nother == 32) {
            tb->other_more++;
            return;
        }
        if (i == tb->nother) tb->other[tb->nother] = n->op, tb->other_n[tb->nother++] = 0;
        tb->other_n[i]++;
        return;
    }
    char shape[64], count[24];
    dpt_shape_str(n->out, shape, sizeof shape);
    if (tied && params == 0)
        snprintf(count, sizeof count, "tied");
    else
        snprintf(count, sizeof count, "%lld%s", (long long)params, tied ? "+tied" : "");
    tb->params += params;
    fprintf(tb->out, "%-16s %-28s %-20s %12s %12.2f\n", n->op, layer ? layer : "-", shape, count, flops / 1e6);
}

void dpt_model_trace(dpt_ctx *ctx, dpt_model *model, const dpt_dataset *data, const dpt_task *task, bool table,
                     dpt_trace *out)
{
    *out = (dpt_trace){0};
    size_t table_len = 0;
    FILE *print = table ? open_memstream(&out->table, &table_len) : NULL;
    if (table && !print) dpt_fatal("out of host memory for the summary");
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
    rows tb = {.out = print};
    if (print)
        fprintf(print, "%-16s %-28s %-20s %12s %12s\n", "op", "layer", "output (batch 1)", "params", "MFLOP");
    for (int i = first; i < ctx->tape.nnodes; i++) {
        const dpt_node *n = &ctx->tape.nodes[i];
        double flops = node_flops(n);
        out->flops += flops;
        out->output_floats += (double)n->out->numel;
        bool shared = false;
        for (int k = 0; k < n->n_in && !shared; k++)
            shared = n->in[k] && n->in[k]->storage == n->out->storage;
        if (!shared) {
            out->owned_floats += (double)n->out->numel * (n->out->dtype == DPT_BF16 ? 0.5 : 1.0);
            if ((double)n->out->numel > out->largest_owned) out->largest_owned = (double)n->out->numel;
        }
        out->ops++;
        if (print) table_row(&tb, n, flops);
    }
    if (print && tb.nother) { /* names are the ops' static strings: still good after the tape goes */
        fprintf(print, "and ops without parameters or counted FLOPs (elementwise, views, reductions):");
        for (int i = 0; i < tb.nother; i++)
            fprintf(print, "%s %s %d", i ? "," : "", tb.other[i], tb.other_n[i]);
        if (tb.other_more) fprintf(print, ", %d of other kinds", tb.other_more);
        fputc('\n', print);
    }
    dpt_tape_clear(ctx);
    dpt_model_set_training(model, training);
    dpt_set_grad_enabled(ctx, recording);
    for (int f = 0; f < batch.nfields; f++)
        dpt_tensor_free(batch.tensors[f]);
    if (print) {
        int64_t total = dpt_model_param_count(model);
        fprintf(print, "total: %lld parameters", (long long)total);
        if (tb.params != total)
            fprintf(print, " (%lld of them read by no op of this forward)", (long long)(total - tb.params));
        fprintf(print, ", %.2f MFLOP forward per sample (%.2f GFLOP forward+backward) in convolutions, linear "
                       "layers, matmuls and attention; %d ops, %.0f floats of op outputs per sample\n",
                out->flops / 1e6, 3.0 * out->flops / 1e9, out->ops, out->output_floats);
        fclose(print);
    }
    free(tb.seen);
}
