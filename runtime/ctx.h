/* ctx.h: the context struct. Everything a rank's compute needs hangs off it; no globals. */
#ifndef DPT_CTX_H
#define DPT_CTX_H

#include "dpt.h"
#include "alloc.h"
#include "autograd.h"
#include "backend.h"
#include "rng.h"

struct dpt_ctx {
    dpt_device device;
    const dpt_backend *be;
    void *backend_state; /* streams, handles: owned by the backend */
    dpt_alloc *alloc;
    int threads;
    bool tf32;            /* CUDA math mode; read by the backend's init */
    bool cudnn_benchmark; /* cuDNN: measure the convolution algorithms once per shape */
    bool deterministic;   /* cuDNN: deterministic algorithms only ([train] deterministic) */
    dpt_precision precision;    /* the convolutions' (the backend's init may lower it to FP32) */
    const char *precision_note; /* why it was lowered, or "" */
    bool act16; /* activations between the ops that take them in BF16 (precision bf16, be->act16) */
    bool skip_init; /* dpt_ctx_skip_init: random initialisation left out (weights loaded over it) */
    bool nhwc;  /* [train] memory_format = nhwc: convolutions write (and take) channels-last activations */
    dpt_rng rng;
    bool grad_enabled;
    dpt_tape tape;   /* autograd.c's */
    /* dpt_checkpoint (autograd.c): inside a checkpointed function's forward (its ops are not
     * recorded; the parameters they read are collected here), and off while the trace runs
     * (every op recorded, so that it counts them); ckpt_recompute: inside a checkpointed
     * function's second run in backward (dpt_recomputing: state such as running statistics
     * moves once a step, in the first forward) */
    bool ckpt_forward, ckpt_off, ckpt_recompute;
    dpt_tensor **ckpt_params;
    int ckpt_nparams, ckpt_cap;
    dpt_temps temps; /* tensor.c's: the temporaries the tape's clear frees */
    dpt_comm *comm; /* for SyncBatchNorm; NULL when alone */
    dpt_grad_ready_hook grad_ready_hook;
    void *grad_ready_user;
    /* Before a node's backward, for each parameter input whose gradient has no storage (ZeRO 2
     * releases a bucket's once it is reduce-scattered): the hook gives it some (autograd.h) */
    void (*grad_needed_hook)(dpt_tensor *param, int param_index, void *user);
    void *grad_needed_user;
    /* Before each op of a recorded forward computes (called when it records, for the op after
     * it: see autograd.h): ZeRO's overlapped all-gather checks and waits here */
    void (*op_hook)(const char *op, int n_in, dpt_tensor *const *in, void *user);
    void *op_user;
    /* What to change when an allocation fails now (NULL: the training batch); evaluation
     * names [train] eval_batch, since its batch is another key. */
    const char *oom_hint;
    /* Why the allocator has its limit, for the out-of-memory report (NULL: [train]
     * memory_limit_mb); dpt_ctx_guard_memory sets both. */
    const char *limit_why;
    /* Device results read by the host so far (each one a wait for the device on a GPU). */
    int64_t host_syncs;
    /* dpt_set_bn_stats_hook: training-mode batch norm hands its batch's statistics here instead
     * of updating its running statistics (and does not synchronise them) */
    dpt_bn_stats_hook bn_stats_hook;
    void *bn_stats_user;
    struct dpt_profile *profile; /* ./train --profile: per-op times (profile.c); NULL: off */
};

/* A block from the context's caching allocator, or the out-of-memory report naming `what`,
 * the request, what is in use, and what to change (it stops the job). */
void *dpt_ctx_alloc(dpt_ctx *ctx, size_t bytes, size_t *granted, const char *what);
/* The allocator's limit set to bytes (0: none) for the reason why (NULL: [train]
 * memory_limit_mb), which the out-of-memory report names. */
void dpt_ctx_guard_memory(dpt_ctx *ctx, size_t bytes, const char *why);

#endif
