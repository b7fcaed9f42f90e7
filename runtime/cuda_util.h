/* cuda_util.h: what CUDA-aware host files (comm_nccl.c) need from the CUDA backend. Include
 * only in files built with the CUDA toolkit. */
#ifndef DPT_CUDA_UTIL_H
#define DPT_CUDA_UTIL_H

#include <cuda_runtime.h>

#include "backend.h"

/* The context's stream of a kind, and its device ordinal (contexts of the CUDA backend). */
cudaStream_t dpt_cuda_stream(dpt_ctx *ctx, dpt_stream which);
int dpt_cuda_device_of(dpt_ctx *ctx);
/* 16-bit gradients on the wire (comm_nccl.c): fp32 to bf16/fp16 (nearest even) and back,
 * times scale, as grid-stride kernels on stream s. */
void dpt_cuda_f32_to_h16(cudaStream_t s, uint16_t *dst, const float *src, int64_t n, bool bf16);
void dpt_cuda_h16_to_f32(cudaStream_t s, float *dst, const uint16_t *src, int64_t n, bool bf16, float scale);

#endif
