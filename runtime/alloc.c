/* alloc.c: the caching allocator. Sizes are rounded to bins (256 B multiples up to 1 MiB,
 * then 1/8-octave steps) and each bin keeps a stack of free blocks. */
#include "alloc.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"

typedef struct bin {
    size_t size;
    void **blocks; /* free blocks of exactly `size` bytes */
    int count, cap;
} bin;

struct dpt_alloc {
    dpt_raw_allocator raw;
    bin *bins; /* sorted by size, few dozen in practice */
    int nbins, cap_bins;
    dpt_mem_stats stats;
};

size_t dpt_alloc_round(size_t bytes)
{
    if (bytes == 0) bytes = 1;
    if (bytes > DPT_ALLOC_MAX_BYTES) return 0;
    if (bytes <= ((size_t)1 << 20)) return (bytes + 255) & ~(size_t)255;
    /* Above 1 MiB round up to 1/8 of the enclosing power of two: at most 12.5% waste while
     * keeping the number of distinct bins small. */
    size_t pow2 = (size_t)1 << 20;
    while (pow2 < bytes)
        pow2 <<= 1;
    size_t step = pow2 / 16;
    return (bytes + step - 1) / step * step;
}

dpt_alloc *dpt_alloc_new(dpt_raw_allocator raw)
{
    dpt_alloc *alloc = calloc(1, sizeof *alloc);
    if (!alloc) dpt_fatal("out of host memory creating an allocator");
    alloc->raw = raw;
    return alloc;
}

void dpt_alloc_set_limit(dpt_alloc *alloc, size_t bytes)
{
    alloc->stats.limit = bytes;
}

static bool within_limit(const dpt_alloc *alloc, size_t size)
{
    return alloc->stats.limit == 0 || alloc->stats.reserved + size <= alloc->stats.limit;
}

static bin *find_bin(dpt_alloc *alloc, size_t size, bool create)
{
    int lo = 0, hi = alloc->nbins;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (alloc->bins[mid].size < size)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < alloc->nbins && alloc->bins[lo].size == size) return &alloc->bins[lo];
    if (!create) return NULL;
    if (alloc->nbins == alloc->cap_bins) {
        alloc->cap_bins = alloc->cap_bins ? 2 * alloc->cap_bins : 16;
        alloc->bins = realloc(alloc->bins, (size_t)alloc->cap_bins * sizeof *alloc->bins);
        if (!alloc->bins) dpt_fatal("out of host memory growing allocator bins");
    }
    memmove(&alloc->bins[lo + 1], &alloc->bins[lo], (size_t)(alloc->nbins - lo) * sizeof(bin));
    alloc->bins[lo] = (bin){.size = size};
    alloc->nbins++;
    return &alloc->bins[lo];
}

void *dpt_alloc_get(dpt_alloc *alloc, size_t bytes, size_t *granted)
{
    size_t size = dpt_alloc_round(bytes);
    if (size == 0) return NULL; /* impossible size: the caller's out-of-memory report says so */
    bin *b = find_bin(alloc, size, false);
    void *ptr = NULL;
    if (b && b->count > 0) {
        ptr = b->blocks[--b->count];
    } else {
        ptr = within_limit(alloc, size) ? alloc->raw.malloc_fn(size, alloc->raw.user) : NULL;
        if (!ptr) { /* give the cache back and try once more before failing */
            dpt_alloc_trim(alloc);
            if (within_limit(alloc, size)) ptr = alloc->raw.malloc_fn(size, alloc->raw.user);
        }
        if (!ptr) return NULL;
        alloc->stats.reserved += size;
        alloc->stats.system_allocs++;
    }
    alloc->stats.allocated += size;
    if (alloc->stats.allocated > alloc->stats.peak_allocated)
        alloc->stats.peak_allocated = alloc->stats.allocated;
    *granted = size;
    return ptr;
}

void dpt_alloc_put(dpt_alloc *alloc, void *ptr, size_t granted)
{
    if (!ptr) return;
    bin *b = find_bin(alloc, granted, true);
    if (b->count == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 8;
        b->blocks = realloc(b->blocks, (size_t)b->cap * sizeof *b->blocks);
        if (!b->blocks) dpt_fatal("out of host memory growing a free list");
    }
    b->blocks[b->count++] = ptr;
    alloc->stats.allocated -= granted;
}

void dpt_alloc_trim(dpt_alloc *alloc)
{
    for (int i = 0; i < alloc->nbins; i++) {
        bin *b = &alloc->bins[i];
        for (int j = 0; j < b->count; j++)
            alloc->raw.free_fn(b->blocks[j], alloc->raw.user);
        alloc->stats.reserved -= b->size * (size_t)b->count;
        b->count = 0;
    }
}

dpt_mem_stats dpt_alloc_stats(const dpt_alloc *alloc)
{
    return alloc->stats;
}

size_t dpt_alloc_free(dpt_alloc *alloc)
{
    if (!alloc) return 0;
    dpt_alloc_trim(alloc);
    size_t leaked = alloc->stats.allocated;
    for (int i = 0; i < alloc->nbins; i++)
        free(alloc->bins[i].blocks);
    free(alloc->bins);
    free(alloc);
    return leaked;
}
