/* trace.h: what a model's forward does, read from one recorded forward at batch 1 (issue 28
 * item 8: builders note their layers, but ops a forward calls itself, an attention, a matmul
 * between activations, were counted nowhere). Internal. */
#ifndef DPT_TRACE_H
#define DPT_TRACE_H

#include <stdio.h>

#include "dpt.h"

typedef struct dpt_trace {
    double flops;         /* forward FLOPs a sample: 2 x the multiply-adds of conv2d, linear, matmul,
                           * bmm and attention (causal attention counted whole, as PyTorch's flop
                           * counter does); elementwise ops not counted */
    double output_floats; /* floats a sample of every recorded op's output */
    double owned_floats;  /* the same over the outputs with memory of their own (not views or in-place
                           * results of an input's memory), 16-bit ones as half: what the tape keeps */
    double largest_owned; /* the largest of those outputs, floats a sample */
    int ops;              /* ops recorded */
    char *table;          /* asked for (--summary): the forward as a table, text (free it); else NULL */
} dpt_trace;

/* One forward in evaluation mode (no dropout drawn, no running statistics moved) of one sample
 * of zeros of the data's fields, recorded on ctx's tape (cleared after). With table (--summary),
 * out->table gets it as text: a row for each op that reads a parameter or does counted FLOPs, in
 * the order the forward ran them (op, layer: its first parameter's name less the last part,
 * output shape at batch 1, the parameters it reads first, MFLOP a sample), the other ops counted
 * by name, and the totals. */
void dpt_model_trace(dpt_ctx *ctx, dpt_model *model, const dpt_dataset *data, const dpt_task *task, bool table,
                     dpt_trace *out);

#endif
