/* ops_fused.c: ops a backend may run as one kernel and every other backend composes from the
 * elementwise ops (ops.c, ops_tensor.c): LLaMA's RMSNorm (dpt_rms_norm) and rotary embeddings
 * (dpt_rotary). The CPU fuses both; CUDA composes them for now. Each fused forward checks
 * shapes, calls the backend and records a node whose backward adds into its input's gradient. */
#include "autograd.h"
#include "ctx.h"
#include "error.h"
#include "tensor.h"

/* ---------------------------------------------------------------- RMS norm */

static void rmsnorm_backward(dpt_ctx *ctx, dpt_node *node)
{
    dpt_tensor *x = node->in[0], *w = node->in[1];
    const dpt_tensor *dy = node->out->grad;
    int64_t dim = x->shape[x->ndim - 1], rows = x->numel / dim;
    ctx->be->rmsnorm_bwd(ctx, x->data, dy->data, rows, dim, w ? w->data : NULL, node->saved[0]->data,
                         dpt_wants_grad(x) ? dpt_grad_acc(ctx, x)->data : NULL,
                         dpt_wants_grad(w) ? dpt_grad_acc(ctx, w)->data : NULL);
}

dpt_tensor *dpt_rms_norm(dpt_ctx *ctx, dpt_tensor *x, dpt_tensor *weight, float eps)
{
    char a[96];
    int64_t dim = x->ndim ? x->shape[x->ndim - 1] : 0;
    if (dim < 1 || (weight && weight->numel != dim) || !(eps > 0.0f))
        dpt_fatal("rms_norm of %s needs a last dimension of at least 1, a weight of as many values and eps > 0 "
                  "(got %g)",
                  dpt_shape_str(x, a, sizeof a), (double)eps);
    if (!ctx->be->rmsnorm_fwd) { /* a backend without the fused op: the same from elementwise ops */
        dpt_tensor *ms = dpt_mean_last(ctx, dpt_mul(ctx, x, x), true);
        dpt_tensor *y = dpt_mul(ctx, x, dpt_unary(ctx, DPT_UNARY_RSQRT, dpt_add_scalar(ctx, ms, eps)));
        return weight ? dpt_mul(ctx, y, weight) : y;
    }
    x = dpt_contiguous(ctx, dpt_widen(ctx, dpt_plain(ctx, x)));
    int64_t rows = x->numel / dim;
    dpt_tensor *y = dpt_temp_like(ctx, x);
    dpt_tensor *rstd = dpt_temp(ctx, 1, (int64_t[]){rows});
    ctx->be->rmsnorm_fwd(ctx, x->data, rows, dim, weight ? weight->data : NULL, eps, y->data, rstd->data);
    dpt_node *node = dpt_tape_record(ctx, "rms_norm", rmsnorm_backward, y, 2, (dpt_tensor *[]){x, weight});
    if (node) node->saved[0] = rstd;
    return y;
}

/* ---------------------------------------------------------------- rotary embeddings */

static void rotary_backward(dpt_ctx *ctx, dpt_node *node)
{
    dpt_tensor *x = node->in[0];
    const dpt_tensor *y = node->out, *cos = node->saved[0], *sin = node->saved[1];
    bool acc;
    float *gx = dpt_grad_for_write(ctx, x, &acc)->data;
    int64_t B = y->shape[0], T = y->shape[1], H = node->arg.code, hs = y->shape[2] / H;
    ctx->be->rotary(ctx, y->grad->data, B, T, H, hs, cos->data, sin->data, 0, true, gx, acc);
}

dpt_tensor *dpt_rotary(dpt_ctx *ctx, dpt_tensor *x, int heads, dpt_tensor *cos, dpt_tensor *sin, int64_t pos)
{
    char a[96], b[96];
    int64_t T = x->ndim == 3 ? x->shape[1] : 0, hs = x->ndim == 3 && heads > 0 ? x->shape[2] / heads : 0;
    if (x->ndim != 3 || heads < 1 || x->shape[2] % heads || hs % 2 || cos->ndim != 2 || cos->shape[1] != hs / 2 ||
        sin->ndim != 2 || sin->shape[0] != cos->shape[0] || sin->shape[1] != hs / 2 || pos < 0 ||
        pos + T > cos->shape[0])
        dpt_fatal("rotary of %s with %d heads, tables %s from position %lld: expected (B, T, H hs) with hs even and "
                  "(positions, hs / 2) cos and sin tables covering [pos, pos + T)",
                  dpt_shape_str(x, a, sizeof a), heads, dpt_shape_str(cos, b, sizeof b), (long long)pos);
    if (!ctx->be->rotary) { /* a backend without the fused op: the same from elementwise ops */
        int64_t B = x->shape[0], half = hs / 2;
        dpt_tensor *h = dpt_reshape(ctx, x, 4, (int64_t[]){B, T, heads, hs});
        dpt_tensor *xa = dpt_narrow(ctx, h, 3, 0, half), *xb = dpt_narrow(ctx, h, 3, half, half);
        dpt_tensor *c = dpt_reshape(ctx, dpt_narrow(ctx, cos, 0, pos, T), 3, (int64_t[]){T, 1, half});
        dpt_tensor *s = dpt_reshape(ctx, dpt_narrow(ctx, sin, 0, pos, T), 3, (int64_t[]){T, 1, half});
        dpt_tensor *ya = dpt_sub(ctx, dpt_mul(ctx, xa, c), dpt_mul(ctx, xb, s));
        dpt_tensor *yb = dpt_add(ctx, dpt_mul(ctx, xb, c), dpt_mul(ctx, xa, s));
        return dpt_reshape(ctx, dpt_concat(ctx, 2, (dpt_tensor *[]){ya, yb}, 3), 3, (int64_t[]){B, T, heads * hs});
    }
    x = dpt_contiguous(ctx, dpt_widen(ctx, dpt_plain(ctx, x)));
    cos = dpt_contiguous(ctx, cos), sin = dpt_contiguous(ctx, sin);
    dpt_tensor *y = dpt_temp_like(ctx, x);
    ctx->be->rotary(ctx, x->data, x->shape[0], T, heads, hs, cos->data, sin->data, pos, false, y->data, false);
    dpt_node *node = dpt_tape_record(ctx, "rotary", rotary_backward, y, 1, &x);
    if (node) { /* the tables' rows of these positions (backward reads them from row 0) */
        node->saved[0] = dpt_contiguous(ctx, dpt_narrow(ctx, cos, 0, pos, T));
        node->saved[1] = dpt_contiguous(ctx, dpt_narrow(ctx, sin, 0, pos, T));
        node->arg.code = heads;
    }
    return y;
}
