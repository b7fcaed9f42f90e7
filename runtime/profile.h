/* profile.h: where a training step's time goes, per op kind (./train --profile). Forward: an
 * op's time is from the previous op's record (or the mark at the step's start) to its own
 * record, since ops compute and then record their node; backward: each node's own call. On a
 * device every op ends with a synchronisation while profiling (the numbers are the kernels',
 * the run is slower). An op that records nothing (no gradient wanted) counts in the next one. */
#ifndef DPT_PROFILE_H
#define DPT_PROFILE_H

#include <stdio.h>

#include "dpt.h"

typedef struct dpt_profile dpt_profile;

/* A new profile that the context's ops record into from now on (the context keeps pointing at
 * it: free it after the context). */
dpt_profile *dpt_profile_attach(dpt_ctx *ctx);
void dpt_profile_free(dpt_profile *p);
/* The forward's start (the context's profile, if it has one). */
void dpt_profile_mark(dpt_ctx *ctx);
/* An op's node was just recorded: its forward ends now. */
void dpt_profile_forward(dpt_ctx *ctx, const char *op);
/* A node's backward, timed by the caller. */
void dpt_profile_backward(dpt_ctx *ctx, const char *op, double seconds);
/* The table, top `rows` op kinds by forward + backward time, as shares of `step_s` (the steps'
 * wall time, 0: of the ops' total) over `steps` steps. */
void dpt_profile_print(const dpt_profile *p, FILE *out, int rows, double step_s, int64_t steps);

#endif
