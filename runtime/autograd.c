/* autograd.c: recording the tape, running backward, and the gradient-ready hook. */
#include "autograd.h"

#include <stdlib.h>
#include <string.h>

#include "ctx.h"
#include "error.h"
#include "backend.h"
#include "log.h"
#include "profile.h"

const char *dpt_node_layer(const dpt_node *node, char *buf, size_t cap)
{
    for (int i = 0; i < node->n_in; i++) {
        const dpt_tensor *t = node->in[i];
        if (!t || !t->is_param) continue;
        const char *dot = strrchr(t->name, '.');
        snprintf(buf, cap, "%.*s", dot ? (int)(dot - t->name) : (int)strlen(t->name), t->name);
        return buf;
    }
    return NULL;
}

static bool is_reported_param(const dpt_tensor *t)
{
    return t && t->is_param && t->requires_grad;
}

/* Inside a checkpointed function's forward (nothing recorded): the parameters its ops read,
 * each once. */
static void ckpt_collect(dpt_ctx *ctx, int n_in, dpt_tensor *const *in)
{
    for (int i = 0; i < n_in; i++) {
        if (!is_reported_param(in[i])) continue;
        bool seen = false;
        for (int k = 0; k < ctx->ckpt_nparams && !seen; k++)
            seen = ctx->ckpt_params[k] == in[i];
        if (seen) continue;
        if (ctx->ckpt_nparams == ctx->ckpt_cap) {
            ctx->ckpt_cap = ctx->ckpt_cap ? 2 * ctx->ckpt_cap : 32;
            ctx->ckpt_params = realloc(ctx->ckpt_params, (size_t)ctx->ckpt_cap * sizeof *ctx->ckpt_params);
            if (!ctx->ckpt_params) dpt_fatal("out of host memory for a checkpoint's parameters");
        }
        ctx->ckpt_params[ctx->ckpt_nparams++] = in[i];
    }
}

/* A node at the tape's end (the nodes may move: hold indices, not pointers, across a push). */
static dpt_node *push_node(dpt_ctx *ctx, const char *op, dpt_backward_fn backward, dpt_tensor *out, int n_in,
                           dpt_tensor *const *in)
{
    dpt_tape *tape = &ctx->tape;
    DPT_ASSERT(!tape->consumed, "%s recorded after backward without dpt_tape_clear()", op);
    if (tape->nnodes == tape->cap_nodes) {
        tape->cap_nodes = tape->cap_nodes ? 2 * tape->cap_nodes : 128;
        tape->nodes = realloc(tape->nodes, (size_t)tape->cap_nodes * sizeof *tape->nodes);
        if (!tape->nodes) dpt_fatal("out of host memory growing the tape");
    }
    dpt_node *node = &tape->nodes[tape->nnodes++];
    memset(node, 0, sizeof *node);
    node->op = op;
    node->backward = backward;
    node->out = out;
    node->n_in = n_in;
    for (int i = 0; i < n_in; i++)
        node->in[i] = in[i];
    out->requires_grad = true;
    if (ctx->profile) {
        char layer[64];
        dpt_profile_forward(ctx, op, dpt_node_layer(node, layer, sizeof layer));
    }
    return node;
}

dpt_node *dpt_tape_record(dpt_ctx *ctx, const char *op, dpt_backward_fn backward, dpt_tensor *out, int n_in,
                          dpt_tensor *const *in)
{
    DPT_ASSERT(n_in <= DPT_NODE_MAX_IN, "%s has %d inputs", op, n_in);
    if (!ctx->grad_enabled && !ctx->ckpt_forward) return NULL;
    if (ctx->op_hook) ctx->op_hook(op, n_in, in, ctx->op_user); /* a checkpointed forward's ops too */
    if (ctx->ckpt_forward) {
        ckpt_collect(ctx, n_in, in);
        return NULL;
    }
    bool any = false;
    for (int i = 0; i < n_in; i++)
        any |= dpt_wants_grad(in[i]);
    if (!any) { /* nothing to record; --profile still times it under its own name (not the next op's) */
        if (ctx->profile) dpt_profile_forward(ctx, op, NULL);
        return NULL;
    }
    return push_node(ctx, op, backward, out, n_in, in);
}

dpt_tensor *dpt_grad_acc(dpt_ctx *ctx, dpt_tensor *t)
{
    if (t->grad && t->grad->is_temp && t->grad->storage && t->grad->storage->refcount > 1) {
        /* shared with another gradient (dpt_grad_axpy handed the same one to two inputs): a
         * copy of its own before anything adds into it */
        dpt_tensor *own = dpt_temp(ctx, t->grad->ndim, t->grad->shape);
        own->layout = t->grad->layout;
        ctx->be->dev->copy_d2d(ctx, own->data, t->grad->data, (size_t)own->numel * sizeof(float));
        dpt_tensor_release(t->grad);
        t->grad = own;
    }
    if (!t->grad) {
        DPT_ASSERT(!t->is_param, "parameter %s has no gradient buffer", t->name);
        /* A temporary's gradient dies with the tape; a persistent leaf (an input that asks for
         * a gradient) keeps its own, like a parameter, so it outlives dpt_tape_clear(). */
        t->grad =
            t->is_temp ? dpt_temp_zeros(ctx, t->ndim, t->shape) : dpt_tensor_new(ctx, t->ndim, t->shape);
        t->grad->layout = t->layout;
    }
    DPT_ASSERT(t->grad->data, "the gradient of %s has no storage", t->name);
    return t->grad;
}

dpt_tensor *dpt_grad_for_write(dpt_ctx *ctx, dpt_tensor *t, bool *accumulate)
{
    if (!t->grad && t->is_temp) {
        t->grad = dpt_temp(ctx, t->ndim, t->shape);
        t->grad->layout = t->layout;
        *accumulate = false;
        return t->grad;
    }
    *accumulate = true;
    return dpt_grad_acc(ctx, t);
}

/* Whether t's gradient can be dy's memory: t has none yet, and dy is the running node's output
 * gradient that backward releases right after this node (a temporary's, not the loss's), with
 * t's element count and layout. Both inputs of an add may take it: the gradients then share
 * one buffer until one of them is added into, when dpt_grad_acc gives it a copy of its own
 * (copy on write; usually the other has been released by then: a residual branch's gradient
 * is read by the branch's last op before anything adds into the trunk's). */
static bool grad_can_take(const dpt_ctx *ctx, const dpt_tensor *dy, const dpt_tensor *t)
{
    const dpt_node *node = ctx->tape.running;
    if (!node || t->grad || !t->is_temp || node->out->grad != dy || node->out == ctx->tape.loss) return false;
    if (!node->out->is_temp || !dy->is_temp || !dy->storage) return false;
    if (dy->numel != t->numel || dy->layout != t->layout || dy->dtype != DPT_F32 || !dpt_tensor_is_contiguous(dy))
        return false;
    /* a blocked or channels-last gradient keeps its shape; a plain one may be viewed in t's */
    return dy->layout == DPT_LAYOUT_NCHW || dpt_same_shape(dy, t);
}

void dpt_grad_axpy(dpt_ctx *ctx, float alpha, const dpt_tensor *dy, dpt_tensor *t)
{
    /* scaled in place only where nobody else holds dy */
    if (grad_can_take(ctx, dy, t) && (alpha == 1.0f || dy->storage->refcount == 1)) {
        dpt_tensor *g = (dpt_tensor *)dy;
        if (alpha != 1.0f) ctx->be->scale(ctx, g->numel, alpha, g->data, g->data);
        t->grad = dpt_view(ctx, g, t->ndim, t->shape, NULL, 0);
        t->grad->layout = t->layout;
        return;
    }
    bool acc;
    float *g = dpt_grad_for_write(ctx, t, &acc)->data;
    if (acc)
        ctx->be->axpy(ctx, dy->numel, alpha, dy->data, g);
    else if (alpha == 1.0f)
        ctx->be->dev->copy_d2d(ctx, g, dy->data, (size_t)dy->numel * sizeof(float));
    else
        ctx->be->scale(ctx, dy->numel, alpha, dy->data, g);
}

void dpt_grad_mul(dpt_ctx *ctx, const dpt_tensor *dy, const float *other, dpt_tensor *t)
{
    bool acc;
    float *g = dpt_grad_for_write(ctx, t, &acc)->data;
    (acc ? ctx->be->mul_acc : ctx->be->mul)(ctx, dy->numel, dy->data, other, g);
}

bool dpt_tape_may_overwrite(dpt_ctx *ctx, const dpt_tensor *x)
{
    if (!x->is_temp || !x->storage || x->storage->refcount != 1 || !dpt_tensor_is_contiguous(x)) return false;
    if (!ctx->grad_enabled) return true; /* nothing is recorded: no backward will read x */
    const dpt_tape *tape = &ctx->tape;
    for (int n = tape->nnodes - 1; n >= 0; n--) {
        const dpt_node *node = &tape->nodes[n];
        for (int i = 0; i < node->n_in; i++)
            if (node->in[i] == x) return false; /* a consumer's backward may read it */
        if (node->out == x) return node->out_unread; /* nothing before its producer refers to it */
    }
    return true; /* made by no recorded op (it wants no gradient) and read by none */
}

void *dpt_tape_scratch(dpt_ctx *ctx, size_t bytes)
{
    dpt_tape *tape = &ctx->tape;
    if (tape->nscratch == tape->cap_scratch) {
        tape->cap_scratch = tape->cap_scratch ? 2 * tape->cap_scratch : 16;
        tape->scratch = realloc(tape->scratch, (size_t)tape->cap_scratch * sizeof *tape->scratch);
        if (!tape->scratch) dpt_fatal("out of host memory growing tape scratch");
    }
    void *p = malloc(bytes ? bytes : 1);
    if (!p) dpt_fatal("out of host memory for %zu bytes of tape scratch", bytes);
    tape->scratch[tape->nscratch++] = p;
    return p;
}

void dpt_tape_free(dpt_ctx *ctx)
{
    free(ctx->tape.nodes);
    free(ctx->tape.scratch);
    free(ctx->ckpt_params);
    ctx->ckpt_params = NULL, ctx->ckpt_nparams = ctx->ckpt_cap = 0;
    memset(&ctx->tape, 0, sizeof ctx->tape);
}

/* ---------------------------------------------------------------- activation checkpointing */

typedef struct ckpt {
    dpt_checkpoint_fn fn;
    void *user;
    dpt_rng rng; /* the generator as fn's first forward found it: the same dropout masks again */
    int nparams;
    dpt_tensor **params; /* what fn read: their gradients are final once this node's backward ran */
} ckpt;

static void ckpt_backward(dpt_ctx *ctx, dpt_node *node);
static void backward_nodes(dpt_ctx *ctx, int from, int to, bool report);

static bool is_ckpt(const dpt_node *node)
{
    return node->backward == ckpt_backward;
}

bool dpt_recomputing(const dpt_ctx *ctx)
{
    return ctx->ckpt_recompute;
}

dpt_tensor *dpt_checkpoint(dpt_ctx *ctx, dpt_checkpoint_fn fn, dpt_tensor *x, void *user)
{
    if (!ctx->grad_enabled || ctx->ckpt_forward || ctx->ckpt_off) return fn(ctx, x, user);
    ckpt *c = dpt_tape_scratch(ctx, sizeof *c);
    *c = (ckpt){.fn = fn, .user = user, .rng = ctx->rng};
    dpt_tape_mark mark = dpt_tape_mark_here(ctx);
    /* fn may not overwrite x in place (backward runs fn on it again): it is held meanwhile */
    if (x->storage) x->storage->refcount++;
    ctx->ckpt_forward = true, ctx->ckpt_nparams = 0, ctx->grad_enabled = false;
    dpt_tensor *y = fn(ctx, x, user);
    ctx->ckpt_forward = false, ctx->grad_enabled = true;
    DPT_ASSERT(y != x && y->is_temp, "a checkpointed function must return a new tensor");
    if (x->storage) x->storage->refcount--;
    c->nparams = ctx->ckpt_nparams;
    c->params = dpt_tape_scratch(ctx, (size_t)c->nparams * sizeof *c->params);
    memcpy(c->params, ctx->ckpt_params, (size_t)c->nparams * sizeof *c->params);
    /* fn's intermediates go now; y stays (one storage of its own: a view of an intermediate
     * keeps that storage alive by its count) */
    dpt_temps_free_since(ctx, mark.temps, y);
    if (!dpt_wants_grad(x) && !c->nparams) return y; /* nothing for backward to reach */
    dpt_node *node = push_node(ctx, "checkpoint", ckpt_backward, y, 1, &x);
    node->scratch = c;
    return y;
}

/* fn again, recording, from x with the generator as the first forward had it, then backward
 * from its output with this node's output gradient: into x's gradient and the parameters'.
 * Its nodes go at the tape's end and its temporaries after a mark; both are dropped after. */
static void ckpt_backward(dpt_ctx *ctx, dpt_node *node)
{
    ckpt *c = node->scratch; /* node itself may move: the recomputation pushes nodes */
    dpt_tensor *x = node->in[0], *out = node->out, *dy = out->grad;
    dpt_tape *tape = &ctx->tape;
    const dpt_node *running = tape->running;
    const dpt_tensor *loss = tape->loss;
    dpt_rng after = ctx->rng;
    ctx->rng = c->rng;
    void (*op_hook)(const char *, int, dpt_tensor *const *, void *) = ctx->op_hook;
    ctx->op_hook = NULL; /* not a forward of the step's (ZeRO's overlapped gathers are done) */
    dpt_tape_mark mark = dpt_tape_mark_here(ctx);
    bool grad = ctx->grad_enabled, recompute = ctx->ckpt_recompute;
    ctx->grad_enabled = true, tape->consumed = false, ctx->ckpt_recompute = true;
    int first = tape->nnodes;
    dpt_tensor *y = c->fn(ctx, x, c->user);
    int last = tape->nnodes;
    tape->consumed = true, ctx->grad_enabled = grad, ctx->ckpt_recompute = recompute;
    ctx->op_hook = op_hook;
    ctx->rng = after;
    DPT_ASSERT(dpt_same_shape(y, out), "a checkpointed function gave another shape the second time");
    if (y->requires_grad && last > first) {
        y->grad = dy; /* lent: the outer node's; never released in here (it is the loss of this walk) */
        tape->loss = y;
        backward_nodes(ctx, first, last, false);
        y->grad = NULL;
    }
    tape->nnodes = first;
    dpt_temps_free_since(ctx, mark.temps, x->grad); /* the recomputation and its gradients, not x's */
    tape->running = running, tape->loss = loss;
}

/* What a node's backward gives gradients to: its inputs, then for a checkpoint the parameters
 * its recomputation reads (they count as uses of its node). */
static int node_uses(const dpt_node *node)
{
    return node->n_in + (is_ckpt(node) ? ((const ckpt *)node->scratch)->nparams : 0);
}

static dpt_tensor *node_use(const dpt_node *node, int i)
{
    return i < node->n_in ? node->in[i] : ((const ckpt *)node->scratch)->params[i - node->n_in];
}

/* A parameter's gradient that has no storage (ZeRO 2 releases a bucket's once it is
 * reduce-scattered) gets it before a node's backward writes it. */
static void give_storage(dpt_ctx *ctx, dpt_tensor *t)
{
    if (!is_reported_param(t) || !t->grad || t->grad->data) return;
    DPT_ASSERT(ctx->grad_needed_hook, "the gradient of %s has no storage", t->name);
    ctx->grad_needed_hook(t, t->param_index, ctx->grad_needed_user);
}

/* One of a parameter's uses has run backward: after the last its gradient is final. */
static void use_done(dpt_ctx *ctx, dpt_tensor *t)
{
    if (is_reported_param(t) && --t->pending_uses == 0 && ctx->grad_ready_hook)
        ctx->grad_ready_hook(t, t->param_index, ctx->grad_ready_user);
}

/* Backward over nodes [from, to), in reverse. report: parameters' uses count down here and
 * the gradient-ready hook fires (the step's walk); a checkpoint's inner walk leaves that to
 * its node, whose parameters count as its own uses. */
static void backward_nodes(dpt_ctx *ctx, int from, int to, bool report)
{
    const dpt_tensor *loss = ctx->tape.loss;
    for (int n = to - 1; n >= from; n--) {
        dpt_node *node = &ctx->tape.nodes[n];
        dpt_tensor *out = node->out;
        ctx->tape.running = node;
        if (out->grad) {
            for (int i = 0; i < node_uses(node); i++)
                give_storage(ctx, node_use(node, i));
            double start = 0;
            if (ctx->profile && !is_ckpt(node)) {
                if (ctx->be->dev->synchronize) ctx->be->dev->synchronize(ctx); /* the kernels before, not in it */
                start = dpt_now_s();
            }
            node->backward(ctx, node);
            node = &ctx->tape.nodes[n]; /* a checkpoint's recomputation may have moved the nodes */
            ctx->tape.running = node;
            if (ctx->profile && !is_ckpt(node)) {
                if (ctx->be->dev->synchronize) ctx->be->dev->synchronize(ctx);
                char layer[64];
                dpt_profile_backward(ctx, node->op, dpt_node_layer(node, layer, sizeof layer), start, dpt_now_s());
            }
        }
        /* An intermediate's gradient has done its work once the node that made the tensor has
         * run backward (every reader of the tensor is later on the tape): its memory goes back
         * to the allocator now, for the next gradients, instead of at dpt_tape_clear. So the
         * gradients alive at once are a few layers', not the whole network's (PyTorch frees
         * them the same way; it keeps non-leaf gradients only when asked). */
        if (out != loss && out->is_temp && out->grad && out->grad->is_temp) {
            dpt_tensor_release(out->grad);
            out->grad = NULL;
        }
        if (!report) continue;
        for (int i = node_uses(node) - 1; i >= 0; i--)
            use_done(ctx, node_use(node, i));
    }
}

/* Each reported parameter's uses on the tape, zeroed (count false) or counted. */
static void count_uses(dpt_ctx *ctx, bool count)
{
    for (int n = 0; n < ctx->tape.nnodes; n++)
        for (int i = 0; i < node_uses(&ctx->tape.nodes[n]); i++) {
            dpt_tensor *t = node_use(&ctx->tape.nodes[n], i);
            if (is_reported_param(t)) t->pending_uses = count ? t->pending_uses + 1 : 0;
        }
}

void dpt_backward(dpt_ctx *ctx, dpt_tensor *loss)
{
    DPT_ASSERT(loss->numel == 1, "backward from a tensor of %lld elements; reduce it to a scalar",
               (long long)loss->numel);
    DPT_ASSERT(!ctx->tape.consumed, "backward twice on one tape; call dpt_tape_clear() between");
    ctx->tape.consumed = true;
    if (!loss->requires_grad) return; /* nothing on the tape depends on a parameter */

    /* A parameter's gradient is final once every node that read it has run backward: count
     * the reads, then count down while walking the tape in reverse. */
    count_uses(ctx, false);
    count_uses(ctx, true);

    /* d loss / d loss = 1: written on the device (no read-back), unless something already
     * added into the loss's gradient */
    bool acc;
    dpt_tensor *seed = dpt_grad_for_write(ctx, loss, &acc);
    if (acc) {
        dpt_tensor *one = dpt_temp(ctx, 1, (int64_t[]){1});
        ctx->be->fill(ctx, one->data, 1, 1.0f);
        ctx->be->axpy(ctx, 1, 1.0f, one->data, seed->data);
    } else {
        ctx->be->fill(ctx, seed->data, 1, 1.0f);
    }

    ctx->tape.loss = loss;
    backward_nodes(ctx, 0, ctx->tape.nnodes, true);
    ctx->tape.running = NULL;
    ctx->tape.loss = NULL;
}

dpt_tape_mark dpt_tape_mark_here(dpt_ctx *ctx)
{
    return (dpt_tape_mark){dpt_temps_count(ctx), ctx->tape.nnodes};
}

dpt_tensor *dpt_tape_release(dpt_ctx *ctx, dpt_tape_mark mark, dpt_tensor *keep)
{
    DPT_ASSERT(mark.temps <= dpt_temps_count(ctx) && mark.nodes <= ctx->tape.nnodes,
               "a tape mark from before a clear");
    if (ctx->tape.nnodes != mark.nodes) return keep; /* recorded: backward will read them */
    dpt_temps_free_since(ctx, mark.temps, keep); /* nothing recorded: no temporary gradient either */
    return keep;
}

void dpt_tape_clear(dpt_ctx *ctx)
{
    dpt_temps_free_since(ctx, 0, NULL);
    for (int i = 0; i < ctx->tape.nscratch; i++)
        free(ctx->tape.scratch[i]);
    ctx->tape.nscratch = 0;
    ctx->tape.nnodes = 0;
    ctx->tape.consumed = false;
}

bool dpt_set_grad_enabled(dpt_ctx *ctx, bool enabled)
{
    bool previous = ctx->grad_enabled;
    ctx->grad_enabled = enabled;
    return previous;
}

bool dpt_grad_enabled(const dpt_ctx *ctx)
{
    return ctx->grad_enabled;
}

void dpt_set_bn_stats_hook(dpt_ctx *ctx, dpt_bn_stats_hook hook, void *user)
{
    ctx->bn_stats_hook = hook;
    ctx->bn_stats_user = user;
}

void dpt_set_grad_needed_hook(dpt_ctx *ctx, void (*hook)(dpt_tensor *param, int param_index, void *user),
                              void *user)
{
    ctx->grad_needed_hook = hook;
    ctx->grad_needed_user = user;
}

void dpt_set_op_hook(dpt_ctx *ctx, void (*hook)(const char *op, int n_in, dpt_tensor *const *in, void *user),
                     void *user)
{
    ctx->op_hook = hook;
    ctx->op_user = user;
}

void dpt_set_grad_ready_hook(dpt_ctx *ctx, dpt_grad_ready_hook hook, void *user)
{
    ctx->grad_ready_hook = hook;
    ctx->grad_ready_user = user;
}
