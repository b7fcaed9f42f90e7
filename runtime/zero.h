/* zero.h: [distributed] zero (ZeRO, issue 26): the optimizer's state and its update split
 * across the ranks by ranges of elements. The parameters are laid out back to back in
 * segments, every parameter at a 64-float boundary (stage 2: DDP's buckets, whose gradients
 * are reduce-scattered by these ranges; stage 1: segments of its own), and each segment is cut
 * into one contiguous range per rank (dpt_zero_range: 64-float boundaries, any length, the
 * last ranges shorter or empty). A rank steps the elements in its ranges only and keeps only
 * their optimizer state; after the step every rank's ranges are all-gathered. Each element's
 * update is the one an unsharded optimizer makes (the built-in optimizers are elementwise), so
 * the weights are unsharded training's bit for bit wherever the gradients are. Internal. */
#ifndef DPT_ZERO_H
#define DPT_ZERO_H

#include "dpt.h"
#include "comm.h"

typedef struct dpt_zero_layout {
    int nsegments;
    const int *segment_of;        /* per parameter */
    const int64_t *offset_of;     /* per parameter: its first element in its segment */
    const int64_t *segment_numel; /* per segment, gaps included */
} dpt_zero_layout;

typedef struct dpt_zero dpt_zero;

/* Rank q's range [lo, hi) of a segment of n floats split over size ranks. */
void dpt_zero_range(int64_t n, int size, int q, int64_t *lo, int64_t *hi);
/* Where rank q's range of a segment (displs: its size + 1 range starts) meets the parameter of
 * numel elements at offset `at` there: elements [lo, hi) of the parameter (lo == hi: none). */
void dpt_zero_meet(const int64_t *displs, int q, int64_t at, int64_t numel, int64_t *lo, int64_t *hi);

/* The plan over comm's ranks for the model's parameters: layout's segments, or (NULL) its own
 * (the parameters in order, segments of at most 16 MiB); the parameters' storage moves into
 * the segments (values kept, the tensors the same: call it before anything keeps a parameter's
 * data pointer). */
dpt_zero *dpt_zero_new(dpt_model *model, dpt_comm *comm, const dpt_zero_layout *layout);
void dpt_zero_free(dpt_zero *z);
/* Per parameter, the elements this rank steps: [lo[p], hi[p]) (lo == hi: none). */
const int64_t *dpt_zero_lo(const dpt_zero *z);
const int64_t *dpt_zero_hi(const dpt_zero *z);
/* The most elements any rank steps. */
int64_t dpt_zero_most(const dpt_zero *z);
/* After a step: every rank's ranges of the parameters on every rank, one all-gather per
 * segment, in place (the parameters live in the segments' buffers since dpt_zero_new, unless
 * one shared its storage with another tensor: then through a copy). */
void dpt_zero_sync_params(dpt_zero *z, const char *what);

/* [distributed] zero_overlap (zero.c): the all-gather after a step runs on a thread of this
 * rank (a communicator of its own: dup), a segment at a time, while the next forward starts;
 * false where it cannot (parameters through a copy, a communicator without dup): then
 * dpt_zero_sync_params as before. Collective: every rank at the same point. */
bool dpt_zero_overlap(dpt_zero *z);
/* Instead of dpt_zero_sync_params (with overlap started): post the gathers and return; false
 * when not (no overlap, or before the first forward fixed their order: then sync). */
bool dpt_zero_sync_params_async(dpt_zero *z);
/* Around a training forward (its loss included): the ops wait for the segments they read; the
 * end waits for the rest and returns false with err where an op read a segment before its
 * values had arrived (the order of reads changed since the forward before). The first end
 * agrees the gather order over the ranks (collective). No-ops without overlap. */
void dpt_zero_forward_begin(dpt_zero *z, dpt_ctx *ctx, int64_t step);
bool dpt_zero_forward_end(dpt_zero *z, dpt_ctx *ctx, dpt_error *err);
/* Before anything else reads the parameters (evaluation, checkpoints, EMA, the end): every
 * gather done. NULL or no overlap: nothing. */
void dpt_zero_settle(dpt_zero *z);
/* From the next step on: overlapped (true) or gathered whole after the step by
 * dpt_zero_sync_params (false; the thread stays). Every rank the same, at the same step. */
void dpt_zero_set_overlap(dpt_zero *z, bool on);
/* Since the last call: the main thread's waits for the gathers, and the gathers' own time. */
void dpt_zero_overlap_times(dpt_zero *z, double *exposed_s, double *busy_s);

/* Parameter p's array (a state tensor of it) on root alone: whole there (numel floats, this
 * rank's elements already in place or not: they are copied from mine), mine (this rank's
 * elements, NULL where none) sent from the others. A collective of every rank. */
void dpt_zero_gather_one(dpt_zero *z, int p, float *whole, const float *mine, int root, const char *what);

/* dpt_unscale_clip_grad_norm over elements [lo[i], hi[i]) of each gradient (what zero = 2
 * reduced on this rank; element lo[i] at at[i], or in the parameter's .grad where at is NULL),
 * the sum of squares added over the ranks by sum(total, user) (optim/clip.c). */
double dpt_unscale_clip_grad_norm_ranges(dpt_ctx *ctx, dpt_model *model, const int64_t *lo, const int64_t *hi,
                                         float *const *at, double inv_scale, double max_norm,
                                         void (*sum)(double *total, void *user), void *user);

#endif
