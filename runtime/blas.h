/* blas.h: the CBLAS the CPU kernels call. OpenBLAS by default (its OpenMP build, which shares
 * our thread pool); any other CBLAS works too (DPT_OPENBLAS=0: Debian's reference libblas in
 * the GPU bundle, where the CPU only checks the GPU's numbers). */
#ifndef DPT_BLAS_H
#define DPT_BLAS_H

#include <cblas.h>

#if DPT_OPENBLAS
static inline void dpt_blas_set_threads(int threads)
{
    openblas_set_num_threads(threads);
}
#else
typedef int blasint; /* OpenBLAS's name for CBLAS's int */
static inline void dpt_blas_set_threads(int threads)
{
    (void)threads; /* a reference BLAS runs on the calling thread */
}
#endif

#endif
