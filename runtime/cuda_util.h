/* cuda_util.h: what CUDA-aware host files (comm_nccl.c) need from the CUDA backend. Include
 * only in files built with the CUDA toolkit. */
#ifndef DPT_CUDA_UTIL_H
#define DPT_CUDA_UTIL_H

#include <cuda_runtime.h>

#include "backend.h"

/* The context's stream of a kind, and its device ordinal (contexts of the CUDA backend). */
cudaStream_t dpt_cuda_stream(dpt_ctx *ctx, dpt_stream which);
int dpt_cuda_device_of(dpt_ctx *ctx);

#endif
