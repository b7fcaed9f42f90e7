/* autograd.h: the tape. Ops record a node per output in forward; dpt_backward() walks the
 * nodes in reverse and each node's backward ADDS (+=) into its inputs' gradients. */
#ifndef DPT_AUTOGRAD_H
#define DPT_AUTOGRAD_H

#include "dpt.h"
#include "tensor.h"

#define DPT_NODE_MAX_IN 4

typedef struct dpt_node dpt_node;
typedef void (*dpt_backward_fn)(dpt_ctx *ctx, dpt_node *node);

/* The tape of one context: nodes in forward order and host scratch that lives until the next
 * dpt_tape_clear, which also frees the context's temporaries (tensor.c keeps the list). Only
 * autograd.c touches its fields. */
typedef struct dpt_tape {
    dpt_node *nodes;
    int nnodes, cap_nodes;
    bool consumed; /* backward ran on this tape; a second backward needs a new forward */
    void **scratch;
    int nscratch, cap_scratch;
    const dpt_tensor *loss;  /* during backward: the tensor it started from */
    const dpt_node *running; /* during backward: the node whose backward runs now */
} dpt_tape;

/* The layer a node belongs to, by the first parameter it takes ("conv1" for conv1.weight,
 * "h.0.attn.c_proj" for h.0.attn.c_proj.bias, "wte" for wte), written into buf; NULL: none
 * (--profile's layers, --summary's, a crash report's). */
const char *dpt_node_layer(const dpt_node *node, char *buf, size_t cap);

struct dpt_node {
    const char *op;
    dpt_backward_fn backward;
    dpt_tensor *out;
    dpt_tensor *in[DPT_NODE_MAX_IN];
    int n_in;
    dpt_tensor *saved[2]; /* extra tensors kept for backward (e.g. softmax probabilities) */
    const void *layer;    /* the layer's own settings, when the op needs them */
    void *scratch;        /* tape-lifetime host memory (e.g. a copy of the labels) */
    /* backward reads only out's gradient, never out's values: an in-place op (dpt_relu_) may
     * overwrite them (conv2d, batch norm, linear, add set it) */
    bool out_unread;
    union { /* the op's one scalar argument */
        float alpha;           /* scale, sum, mean: dy/dx = alpha */
        struct {
            float label_smoothing;
            int32_t ignore_index; /* rows with this label count for nothing */
        } xent;
        int32_t code; /* which of a family: a dpt_binary_op, dpt_unary_op, a reduction's kind */
    } arg;
};

/* Record a node producing `out` from inputs (NULL entries allowed) when recording is on and
 * some input requires a gradient; returns NULL (nothing recorded) otherwise. */
dpt_node *dpt_tape_record(dpt_ctx *ctx, const char *op, dpt_backward_fn backward, dpt_tensor *out, int n_in,
                          dpt_tensor *const *in);
/* The gradient of t, zero-filled on first use (a temporary unless t is a parameter), in t's
 * layout. */
dpt_tensor *dpt_grad_acc(dpt_ctx *ctx, dpt_tensor *t);
/* The gradient of t for a kernel that can either write or add: the first writer of a
 * temporary's gradient gets it uninitialised with *accumulate = false (and must write every
 * element: one pass less than a zero fill plus an add); later ones get *accumulate = true. */
dpt_tensor *dpt_grad_for_write(dpt_ctx *ctx, dpt_tensor *t, bool *accumulate);
/* t's gradient += alpha * dy, and += dy * other (elementwise, dy's element count), each written
 * instead when the gradient is fresh (dpt_grad_for_write). dpt_grad_axpy on a fresh gradient
 * takes dy's memory instead of copying it (scaled in place where nobody else holds it) when dy
 * is the running node's output gradient, which backward releases after the node: the pass
 * PyTorch's engine also saves by passing add's gradient through. Gradients that share memory
 * so are copied by dpt_grad_acc before one is added into. */
void dpt_grad_axpy(dpt_ctx *ctx, float alpha, const dpt_tensor *dy, dpt_tensor *t);
void dpt_grad_mul(dpt_ctx *ctx, const dpt_tensor *dy, const float *other, dpt_tensor *t);
/* Internal: called before a node's backward for each of its parameters whose gradient has no
 * storage (data NULL), which must give it storage (DDP under zero = 2 allocates the bucket then).
 * A parameter's gradient without storage and no hook is a bug (asserted). */
void dpt_set_grad_needed_hook(dpt_ctx *ctx, void (*hook)(dpt_tensor *param, int param_index, void *user),
                              void *user);
/* Internal: called by every dpt_tape_record while recording is on (whether it records or
 * not), with the op's name and inputs, after the op computed and before the next op starts:
 * the one point between a forward's ops that every op passes (ZeRO's overlapped all-gather
 * checks there that the op read only parameters whose values had arrived, and waits for the
 * ones the next op will read). NULL: none. */
void dpt_set_op_hook(dpt_ctx *ctx, void (*hook)(const char *op, int n_in, dpt_tensor *const *in, void *user),
                     void *user);
/* The tape's own memory, at dpt_ctx_free (after a last dpt_tape_clear). */
void dpt_tape_free(dpt_ctx *ctx);
/* Whether an op may overwrite x in place: x is a temporary of its own storage and no backward
 * can need its values (nothing is being recorded, or no recorded node has taken x as an input
 * and its producer, if recorded, does not read its output). */
bool dpt_tape_may_overwrite(dpt_ctx *ctx, const dpt_tensor *x);
/* Host memory that lives until dpt_tape_clear(). */
void *dpt_tape_scratch(dpt_ctx *ctx, size_t bytes);
/* Should `t` receive a gradient in this backward? */
static inline bool dpt_wants_grad(const dpt_tensor *t)
{
    return t && t->requires_grad;
}

#endif
