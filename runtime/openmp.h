/* openmp.h: OpenMP's runtime calls where the build has OpenMP (-fopenmp: <omp.h>), and their
 * one-thread meaning where it has not (the fuzz build: clang without -fopenmp, which a fresh
 * Debian gives no omp.h; its pragmas are ignored, so every region runs on the calling thread). */
#ifndef DPT_OPENMP_H
#define DPT_OPENMP_H

#ifdef _OPENMP
#include <omp.h>
#else
static inline int omp_get_thread_num(void)
{
    return 0;
}
static inline void omp_set_num_threads(int n)
{
    (void)n;
}
static inline int omp_get_max_threads(void)
{
    return 1;
}
#endif

#endif
