/* profile.h: where a training step's time goes, per op kind (./train --profile). Forward: an
 * op's time is from the previous op's record (or the mark at the step's start) to its own
 * record, since ops compute and then record their node; backward: each node's own call. On a
 * device every op ends with a synchronisation while profiling (the numbers are the kernels',
 * the run is slower). An op that records nothing because no input wants a gradient (a view or
 * copy of the data) is timed too, under its own name; evaluation's forwards (no gradients at
 * all) are not profiled. */
#ifndef DPT_PROFILE_H
#define DPT_PROFILE_H

#include <stdio.h>

#include "dpt.h"

typedef struct dpt_profile dpt_profile;

/* A new profile that the context's ops record into from now on (the context keeps pointing at
 * it: free it after the context). */
dpt_profile *dpt_profile_attach(dpt_ctx *ctx);
void dpt_profile_free(dpt_profile *p);
/* Each op's forward and backward also as a span of this timeline ([log] timeline), named by
 * its layer ("conv1 conv2d", "conv1 conv2d backward"; ops without parameters by the op alone). */
void dpt_profile_set_timeline(dpt_profile *p, dpt_timeline *tl);
/* The forward's start (the context's profile, if it has one). */
void dpt_profile_mark(dpt_ctx *ctx);
/* An op's node was just recorded: its forward ends now. layer: the name of the layer whose
 * parameters it takes ("conv1" for conv1.weight; NULL: none). */
void dpt_profile_forward(dpt_ctx *ctx, const char *op, const char *layer);
/* A node's backward, timed by the caller from t0 to t1. */
void dpt_profile_backward(dpt_ctx *ctx, const char *op, const char *layer, double t0, double t1);
/* The tables, top `rows` op kinds, then top `rows` layers, by forward + backward time, as
 * shares of `step_s` (the steps' wall time, 0: of the ops' total) over `steps` steps. */
void dpt_profile_print(const dpt_profile *p, FILE *out, int rows, double step_s, int64_t steps);

#endif
