/* alloc.h: a caching allocator per device. Blocks are returned to size-binned free lists and
 * reused, so a training step of fixed shapes makes no system allocation after the first. */
#ifndef DPT_ALLOC_H
#define DPT_ALLOC_H

#include "dpt.h"

typedef struct dpt_alloc dpt_alloc;

/* The system allocator behind the cache (aligned_alloc for the CPU, cudaMalloc for CUDA). */
typedef struct dpt_raw_allocator {
    void *(*malloc_fn)(size_t bytes, void *user); /* NULL on out-of-memory */
    void (*free_fn)(void *ptr, void *user);
    void *user;
} dpt_raw_allocator;

dpt_alloc *dpt_alloc_new(dpt_raw_allocator raw);
/* Refuse to reserve more than `bytes` from the system (0 = no cap): as if the device were
 * that small. The cache is trimmed before a request past the cap fails. */
void dpt_alloc_set_limit(dpt_alloc *alloc, size_t bytes);
/* Release every cached block; blocks still handed out are reported as a leak (returns their bytes). */
size_t dpt_alloc_free(dpt_alloc *alloc);
/* A block of at least `bytes`; *granted receives the block's real size (pass it back to put). */
void *dpt_alloc_get(dpt_alloc *alloc, size_t bytes, size_t *granted);
void dpt_alloc_put(dpt_alloc *alloc, void *ptr, size_t granted);
/* Return cached blocks to the system (e.g. before retrying after out-of-memory). */
void dpt_alloc_trim(dpt_alloc *alloc);
dpt_mem_stats dpt_alloc_stats(const dpt_alloc *alloc);
/* The bin size a request is rounded to (exposed for tests); 0 for a request above
 * DPT_ALLOC_MAX_BYTES, which dpt_alloc_get refuses (NULL) instead of rounding past SIZE_MAX. */
size_t dpt_alloc_round(size_t bytes);
#define DPT_ALLOC_MAX_BYTES ((size_t)1 << 50) /* 1 PiB: more than any device holds */

#endif
