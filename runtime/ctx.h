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
    dpt_rng rng;
    bool grad_enabled;
    /* The tape: nodes in forward order and every temporary made since the last clear. */
    dpt_node *nodes;
    int nnodes, cap_nodes;
    bool tape_consumed; /* backward ran on this tape; a second backward needs a new forward */
    dpt_tensor **temps;
    int ntemps, cap_temps;
    void **scratch;
    int nscratch, cap_scratch;
    dpt_comm *comm; /* for SyncBatchNorm; NULL when alone */
    dpt_grad_ready_hook grad_ready_hook;
    void *grad_ready_user;
};

#endif
