/* export.h: ./train --export FORMAT CKPT OUT (export.c). */
#ifndef DPT_EXPORT_H
#define DPT_EXPORT_H
#include <stdbool.h>
#include <stdio.h>

#include "dpt.h"

/* Formats written from the checkpoint alone (no config): safetensors, npz. */
bool dpt_export_is_file_format(const char *format);
/* CKPT's parameters and buffers (averages: their weight averages, --ema) into OUT in FORMAT
 * (*count: how many tensors). */
bool dpt_export_checkpoint(const char *format, const char *ckpt, const char *out, bool averages, int *count,
                           dpt_error *err);
/* dpt_atomic_file_open / dpt_atomic_file_close (the safe file, also for a model's exporters): dpt.h */

#endif
