/* cuda_check.h: one family of checks for CUDA, cuBLAS, cuDNN and NCCL calls. A failing call
 * prints where it was (file:line), the call as written, the library's name for the status and
 * its text (with cuDNN's and NCCL's last-error detail where the library keeps one), then ends
 * the job: every rank under MPI, the process when alone, with exit status 1 and no core dump.
 * Include after the library headers you use: each family is defined when its header is. */
#ifndef DPT_CUDA_CHECK_H
#define DPT_CUDA_CHECK_H

#include <cuda_runtime.h>

#include "error.h"

#define CHECK_CUDA(call)                                                                                     \
    do {                                                                                                     \
        cudaError_t cuda_rc_ = (call);                                                                       \
        if (cuda_rc_ != cudaSuccess)                                                                         \
            dpt_library_failed_at(__FILE__, __LINE__, "%s failed: CUDA %s: %s", #call,                       \
                                  cudaGetErrorName(cuda_rc_), cudaGetErrorString(cuda_rc_));                 \
    } while (0)

/* After a kernel launch: a bad configuration shows here, a fault in the kernel at the next
 * synchronising call (CUDA_LAUNCH_BLOCKING=1 moves it here). */
#define CHECK_LAUNCH() CHECK_CUDA(cudaGetLastError())

#ifdef CUBLAS_VER_MAJOR
#define CHECK_CUBLAS(call)                                                                                   \
    do {                                                                                                     \
        cublasStatus_t blas_rc_ = (call);                                                                    \
        if (blas_rc_ != CUBLAS_STATUS_SUCCESS)                                                               \
            dpt_library_failed_at(__FILE__, __LINE__, "%s failed: cuBLAS %s: %s", #call,                     \
                                  cublasGetStatusName(blas_rc_), cublasGetStatusString(blas_rc_));           \
    } while (0)
#endif

#ifdef CUDNN_MAJOR
/* cuDNN 9 keeps a message per thread that says which argument it did not like. */
static inline const char *dpt_cudnn_detail(void)
{
    static __thread char buf[512];
    buf[0] = '\0';
#if CUDNN_MAJOR >= 9
    cudnnGetLastErrorString(buf, sizeof buf);
#endif
    return buf;
}
#define CHECK_CUDNN(call)                                                                                    \
    do {                                                                                                     \
        cudnnStatus_t dnn_rc_ = (call);                                                                      \
        if (dnn_rc_ != CUDNN_STATUS_SUCCESS) {                                                               \
            const char *detail_ = dpt_cudnn_detail();                                                        \
            dpt_library_failed_at(__FILE__, __LINE__, "%s failed: cuDNN %s%s%s", #call,                      \
                                  cudnnGetErrorString(dnn_rc_), detail_[0] ? ": " : "", detail_);            \
        }                                                                                                    \
    } while (0)
#endif

#ifdef NCCL_MAJOR
#define DPT_NCCL_HINT "\nHINT: NCCL_DEBUG=INFO shows NCCL's view of the job"
/* For calls without a communicator (ncclGetUniqueId, ncclGetVersion); calls on a communicator
 * go through comm_nccl.c's check, which also waits out ncclInProgress and adds its detail. */
#define CHECK_NCCL(call)                                                                                     \
    do {                                                                                                     \
        ncclResult_t nccl_rc_ = (call);                                                                      \
        if (nccl_rc_ != ncclSuccess)                                                                         \
            dpt_library_failed_at(__FILE__, __LINE__, "%s failed: NCCL %s" DPT_NCCL_HINT, #call,             \
                                  ncclGetErrorString(nccl_rc_));                                             \
    } while (0)
#endif

#endif
