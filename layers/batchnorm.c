/* batchnorm.c: batch normalisation over (N, H, W) per channel, optionally synchronised over
 * ranks (SyncBatchNorm): the per-channel sums of forward and backward are AllReduced, so
 * the statistics are those of the global batch. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/autograd.h"
#include "../runtime/comm.h"
#include "../runtime/ctx.h"
#include "../runtime/error.h"

struct dpt_batchnorm {
    char name[64];
    int64_t channels;
    float momentum, eps;
    bool sync;
    dpt_tensor *gamma, *beta;               /* (C) or NULL when not affine */
    dpt_tensor *running_mean, *running_var; /* (C) buffers */
};

dpt_batchnorm *dpt_batchnorm_new(dpt_model *model, const char *name, const dpt_shape3 *shape, float momentum,
                                 float eps, bool affine, bool sync)
{
    dpt_batchnorm *l = dpt_model_alloc(model, sizeof *l);
    snprintf(l->name, sizeof l->name, "%s", name);
    l->channels = shape->c;
    l->momentum = momentum, l->eps = eps, l->sync = sync;
    char pname[DPT_NAME_MAX + 33]; /* longer than DPT_NAME_MAX, cut or not: refused by dpt_model_param */
    int64_t c = shape->c;
    if (affine) {
        snprintf(pname, sizeof pname, "%s.weight", name);
        l->gamma = dpt_model_param(model, pname, 1, &c);
        dpt_init_constant(l->gamma, 1.0f);
        snprintf(pname, sizeof pname, "%s.bias", name);
        l->beta = dpt_model_param(model, pname, 1, &c);
    }
    snprintf(pname, sizeof pname, "%s.running_mean", name);
    l->running_mean = dpt_model_buffer(model, pname, 1, &c);
    snprintf(pname, sizeof pname, "%s.running_var", name);
    l->running_var = dpt_model_buffer(model, pname, 1, &c);
    dpt_init_constant(l->running_var, 1.0f);
    dpt_model_note(model, sync ? "syncbn" : "batchnorm", name, shape, affine ? 2 * c : 0,
                   2.0 * (double)(shape->c * shape->h * shape->w));
    return l;
}

void dpt_batchnorm_zero_gamma(dpt_batchnorm *l)
{
    if (l->gamma) dpt_init_constant(l->gamma, 0.0f);
}

/* Per-channel values the node keeps for backward (host memory on the tape). */
typedef struct bn_saved {
    double *mean, *invstd; /* (C) */
    double count;          /* elements per channel, over all ranks when synchronised */
    bool training;
    bool synced; /* SyncBN: the statistics (and so the gradient sums) are over all ranks */
} bn_saved;

int64_t dpt_batchnorm_channels(const dpt_batchnorm *l)
{
    return l->channels;
}

void dpt_batchnorm_apply_stats(dpt_batchnorm *l, const float *mean, const float *var)
{
    int64_t c = l->channels;
    float *host = malloc((size_t)(2 * c) * sizeof *host);
    if (!host) dpt_fatal("out of host memory in batch norm");
    dpt_tensor_copy_to_host(l->running_mean, host);
    dpt_tensor_copy_to_host(l->running_var, host + c);
    for (int64_t ch = 0; ch < c; ch++) {
        host[ch] = (float)((1 - l->momentum) * host[ch] + l->momentum * mean[ch]);
        host[c + ch] = (float)((1 - l->momentum) * host[c + ch] + l->momentum * var[ch]);
    }
    dpt_tensor_copy_from_host(l->running_mean, host);
    dpt_tensor_copy_from_host(l->running_var, host + c);
    free(host);
}

static void host_copy(const dpt_tensor *t, float *out)
{
    dpt_tensor_copy_to_host(t, out);
}

static void batchnorm_backward(dpt_ctx *ctx, dpt_node *node)
{
    const dpt_batchnorm *l = node->layer;
    const bn_saved *sv = node->scratch;
    dpt_tensor *x = node->in[0], *gamma = node->in[1], *beta = node->in[2];
    const dpt_tensor *dy = node->out->grad;
    int64_t n = x->shape[0], c = l->channels, hw = x->numel / (n * c);
    double *sums = calloc((size_t)(2 * c), sizeof *sums);
    float *g = malloc((size_t)(4 * c) * sizeof *g), *a = g + c, *b = a + c, *k = b + c;
    if (!sums || !g) dpt_fatal("out of host memory in batch-norm backward");
    double *sum_dy = sums, *sum_dy_xmu = sums + c;
    ctx->be->bn_bwd_stats(ctx, x->data, dy->data, n, c, hw, sv->mean, sum_dy, sum_dy_xmu);
    ctx->host_syncs++; /* the host-statistics path (SyncBN) reads its sums */
    if (sv->synced) dpt_comm_allreduce_f64(ctx->comm, sums, 2 * c, "SyncBN gradient sums (backward)");
    if (gamma)
        host_copy(gamma, g);
    else
        for (int64_t ch = 0; ch < c; ch++)
            g[ch] = 1.0f;
    if (dpt_wants_grad(gamma) || dpt_wants_grad(beta)) {
        /* dgamma = sum(dy * xhat) = invstd * sum(dy (x - mean)); dbeta = sum(dy). Under sync the
         * sums are global, so every rank computes the same (full) parameter gradient; DDP then
         * averages identical values, which is why they are divided by the world size here. */
        double ranks = sv->synced ? (double)ctx->comm->size : 1.0;
        float *dg = malloc((size_t)(2 * c) * sizeof *dg), *db = dg + c;
        for (int64_t ch = 0; ch < c; ch++) {
            dg[ch] = (float)(sv->invstd[ch] * sum_dy_xmu[ch] / ranks);
            db[ch] = (float)(sum_dy[ch] / ranks);
        }
        dpt_tensor *tmp = dpt_temp(ctx, 1, &c);
        if (dpt_wants_grad(gamma)) {
            dpt_tensor_copy_from_host(tmp, dg);
            ctx->be->axpy(ctx, c, 1.0f, tmp->data, dpt_grad_acc(ctx, gamma)->data);
        }
        if (dpt_wants_grad(beta)) {
            dpt_tensor_copy_from_host(tmp, db);
            ctx->be->axpy(ctx, c, 1.0f, tmp->data, dpt_grad_acc(ctx, beta)->data);
        }
        free(dg);
    }
    if (dpt_wants_grad(x)) {
        for (int64_t ch = 0; ch < c; ch++) {
            double is = sv->invstd[ch], gm = g[ch];
            if (sv->training) {
                /* dx = gamma*invstd*dy - gamma*invstd^3/M * sum_dy_xmu * (x - mean) - gamma*invstd/M * sum_dy
                 */
                double bc = -gm * is * is * is / sv->count * sum_dy_xmu[ch];
                a[ch] = (float)(gm * is);
                b[ch] = (float)bc;
                k[ch] = (float)(-gm * is / sv->count * sum_dy[ch] - bc * sv->mean[ch]);
            } else { /* running statistics are constants */
                a[ch] = (float)(gm * is), b[ch] = 0.0f, k[ch] = 0.0f;
            }
        }
        ctx->be->channel_affine2_acc(ctx, dy->data, x->data, dpt_grad_acc(ctx, x)->data, n, c, hw, a, b, k);
    }
    free(sums);
    free(g);
}

/* ---------------------------------------------------------------- the device-statistics path */

/* What the fused backward needs: the saved mean/invstd and the gamma it used. */
typedef struct bn_fused_saved {
    dpt_tensor *stats; /* (2C): mean, invstd */
    dpt_tensor *gamma; /* the layer's, or ones when not affine */
    dpt_tensor *relu_ws; /* with a ReLU fused after it: forward's mask of y > 0; else NULL */
} bn_fused_saved;

static dpt_tensor *constant_temp(dpt_ctx *ctx, int64_t c, float value)
{
    dpt_tensor *t = dpt_temp(ctx, 1, &c);
    ctx->be->fill(ctx, t->data, c, value);
    return t;
}

/* The layer's gamma and beta, or ones and zeros when it is not affine (cuDNN wants both). */
static void affine_or_identity(dpt_ctx *ctx, const dpt_batchnorm *l, dpt_tensor **gamma, dpt_tensor **beta)
{
    *gamma = l->gamma ? l->gamma : constant_temp(ctx, l->channels, 1.0f);
    *beta = l->beta ? l->beta : constant_temp(ctx, l->channels, 0.0f);
}

static void batchnorm_fused_backward(dpt_ctx *ctx, dpt_node *node)
{
    const dpt_batchnorm *l = node->layer;
    const bn_fused_saved *sv = node->scratch;
    dpt_tensor *x = node->in[0], *gamma = node->in[1], *beta = node->in[2];
    int64_t n = x->shape[0], c = l->channels, hw = x->numel / (n * c);
    /* cuDNN and oneDNN always write all three: unwanted ones go to scratch. */
    bool acc = false;
    float *dx = dpt_wants_grad(x) ? dpt_grad_for_write(ctx, x, &acc)->data : dpt_temp_like(ctx, x)->data;
    float *dg = dpt_wants_grad(gamma) ? dpt_grad_acc(ctx, gamma)->data : constant_temp(ctx, c, 0.0f)->data;
    float *db = dpt_wants_grad(beta) ? dpt_grad_acc(ctx, beta)->data : constant_temp(ctx, c, 0.0f)->data;
    ctx->be->bn_fused_bwd(ctx, x->data, node->out->grad->data, dx, acc, n, c, hw, x->layout, x->dtype,
                          sv->gamma->data, dg, db, l->eps, sv->stats->data, sv->stats->data + c,
                          sv->relu_ws ? sv->relu_ws->data : NULL);
}

/* relu_ws_bytes > 0: the ReLU after it in the same pass (bn_fused_fwd with a mask) */
static dpt_tensor *batchnorm_fused_forward(dpt_ctx *ctx, dpt_batchnorm *l, dpt_tensor *x, size_t relu_ws_bytes)
{
    int64_t n = x->shape[0], c = l->channels, hw = x->numel / (n * c);
    bn_fused_saved *sv = dpt_tape_scratch(ctx, sizeof *sv);
    sv->stats = dpt_temp(ctx, 1, (int64_t[]){2 * c});
    sv->relu_ws = relu_ws_bytes ? dpt_temp(ctx, 1, (int64_t[]){(int64_t)((relu_ws_bytes + 3) / 4)}) : NULL;
    dpt_tensor *beta;
    affine_or_identity(ctx, l, &sv->gamma, &beta);
    dpt_tensor *y = dpt_temp_same(ctx, x); /* a 16-bit activation stays one */
    bool again = dpt_recomputing(ctx); /* the running statistics moved in the first run */
    ctx->be->bn_fused_fwd(ctx, x->data, y->data, n, c, hw, x->layout, x->dtype, sv->gamma->data, beta->data,
                          again ? NULL : l->running_mean->data, again ? NULL : l->running_var->data,
                          l->momentum, l->eps, sv->stats->data,
                          sv->stats->data + c, sv->relu_ws ? sv->relu_ws->data : NULL);
    dpt_node *node = dpt_tape_record(ctx, relu_ws_bytes ? "batchnorm_relu" : "batchnorm", batchnorm_fused_backward,
                                     y, 3, (dpt_tensor *[]){x, l->gamma, l->beta});
    if (node) {
        node->layer = l;
        node->scratch = sv;
        node->out_unread = true; /* backward reads x and the saved statistics */
    }
    return y;
}

static void check_input(const dpt_batchnorm *l, const dpt_tensor *x)
{
    char buf[96];
    if (x->ndim < 2 || x->shape[1] != l->channels)
        dpt_fatal("batchnorm %s expects an (N, %lld, ...) input, got %s", l->name,
                  (long long)l->channels, dpt_shape_str(x, buf, sizeof buf));
}

/* A backend that keeps the statistics on the device (cuDNN, oneDNN) does training-mode BN in
 * two calls; SyncBatchNorm needs the sums on the host for its AllReduce. */
static bool device_statistics(const dpt_ctx *ctx, const dpt_batchnorm *l, bool training)
{
    return training && ctx->be->bn_fused_fwd && !(l->sync && ctx->comm) && !ctx->bn_stats_hook;
}

dpt_tensor *dpt_batchnorm_relu_forward(dpt_ctx *ctx, dpt_batchnorm *l, dpt_tensor *x, bool training)
{
    x = dpt_dense(ctx, x);
    check_input(l, x);
    if (device_statistics(ctx, l, training) && ctx->be->bn_relu_ws_bytes) {
        int64_t n = x->shape[0], c = l->channels, hw = x->numel / (n * c);
        size_t ws = ctx->be->bn_relu_ws_bytes(ctx, n, c, hw, x->layout, x->dtype, l->eps);
        if (ws) return batchnorm_fused_forward(ctx, l, x, ws);
    }
    return dpt_relu_(ctx, dpt_batchnorm_forward(ctx, l, x, training));
}

dpt_tensor *dpt_batchnorm_forward(dpt_ctx *ctx, dpt_batchnorm *l, dpt_tensor *x, bool training)
{
    x = dpt_dense(ctx, x);
    check_input(l, x);
    if (device_statistics(ctx, l, training)) return batchnorm_fused_forward(ctx, l, x, 0);
    bool wants =
        dpt_grad_enabled(ctx) && (dpt_wants_grad(x) || dpt_wants_grad(l->gamma) || dpt_wants_grad(l->beta));
    if (!training && !wants && ctx->be->bn_fused_infer) { /* evaluation: nothing to record */
        int64_t n = x->shape[0], c = l->channels, hw = x->numel / (n * c);
        dpt_tensor *g, *b;
        affine_or_identity(ctx, l, &g, &b);
        dpt_tensor *y = dpt_temp_same(ctx, x);
        ctx->be->bn_fused_infer(ctx, x->data, y->data, n, c, hw, x->layout, x->dtype, g->data, b->data,
                                l->running_mean->data, l->running_var->data, l->eps);
        return y;
    }
    x = dpt_plain(ctx, x); /* the host-statistics kernels read NCHW */
    DPT_REQUIRE_OP(ctx, bn_stats, "batchnorm");
    int64_t n = x->shape[0], c = l->channels, hw = x->numel / (n * c);
    bn_saved *sv = dpt_tape_scratch(ctx, sizeof *sv + (size_t)(2 * c) * sizeof(double));
    sv->mean = (double *)(sv + 1);
    sv->invstd = sv->mean + c;
    sv->training = training;
    sv->synced = training && l->sync && ctx->comm && !ctx->bn_stats_hook; /* hooked: the batch normalises alone */
    float *host = malloc((size_t)(4 * c) * sizeof *host), *scale = host + 2 * c, *shift = scale + c;
    if (!host) dpt_fatal("out of host memory in batch norm");
    if (training) {
        double *sums = calloc((size_t)(2 * c + 1), sizeof *sums);
        ctx->be->bn_stats(ctx, x->data, n, c, hw, sums, sums + c);
        ctx->host_syncs++;
        sums[2 * c] = (double)(n * hw);
        if (sv->synced) dpt_comm_allreduce_f64(ctx->comm, sums, 2 * c + 1, "SyncBN statistics (forward)");
        sv->count = sums[2 * c];
        host_copy(l->running_mean, host);
        host_copy(l->running_var, host + c);
        /* a checkpointed function's recomputation normalises as its first run did (the same
         * batch, so the same statistics) and leaves the running ones where that run put them */
        bool move = !dpt_recomputing(ctx);
        double *stats = move && ctx->bn_stats_hook ? malloc((size_t)(2 * c) * sizeof *stats) : NULL;
        for (int64_t ch = 0; ch < c; ch++) {
            double mean = sums[ch] / sv->count;
            double var = sums[c + ch] / sv->count - mean * mean;
            if (var < 0) var = 0;
            sv->mean[ch] = mean;
            sv->invstd[ch] = 1.0 / sqrt(var + l->eps);
            /* running statistics: unbiased variance, as torch.nn.BatchNorm2d */
            double unbiased = sv->count > 1 ? var * sv->count / (sv->count - 1) : var;
            host[ch] = (float)((1 - l->momentum) * host[ch] + l->momentum * mean);
            host[c + ch] = (float)((1 - l->momentum) * host[c + ch] + l->momentum * unbiased);
            if (stats) stats[ch] = mean, stats[c + ch] = unbiased;
        }
        if (stats) { /* the hook's owner updates the running statistics (dpt_batchnorm_apply_stats) */
            ctx->bn_stats_hook(l, stats, stats + c, c, ctx->bn_stats_user);
            free(stats);
        } else if (move) {
            dpt_tensor_copy_from_host(l->running_mean, host);
            dpt_tensor_copy_from_host(l->running_var, host + c);
        }
        free(sums);
    } else {
        host_copy(l->running_mean, host);
        host_copy(l->running_var, host + c);
        for (int64_t ch = 0; ch < c; ch++) {
            sv->mean[ch] = host[ch];
            sv->invstd[ch] = 1.0 / sqrt((double)host[c + ch] + l->eps);
        }
        sv->count = (double)(n * hw);
    }
    float *g = host, *b = host + c; /* reuse: gamma and beta on the host */
    if (l->gamma) host_copy(l->gamma, g), host_copy(l->beta, b);
    for (int64_t ch = 0; ch < c; ch++) {
        double gm = l->gamma ? g[ch] : 1.0, bt = l->beta ? b[ch] : 0.0;
        scale[ch] = (float)(gm * sv->invstd[ch]);
        shift[ch] = (float)(bt - sv->mean[ch] * gm * sv->invstd[ch]);
    }
    dpt_tensor *y = dpt_temp_like(ctx, x);
    ctx->be->channel_affine(ctx, x->data, y->data, n, c, hw, scale, shift);
    free(host);
    dpt_node *node =
        dpt_tape_record(ctx, "batchnorm", batchnorm_backward, y, 3, (dpt_tensor *[]){x, l->gamma, l->beta});
    if (node) {
        node->layer = l;
        node->scratch = sv;
        node->out_unread = true; /* backward reads x and the saved statistics */
    }
    return y;
}
