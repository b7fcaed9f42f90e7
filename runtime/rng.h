/* rng.h: xoshiro256** seeded through splitmix64. The state is a plain struct so checkpoints
 * can save it and every rank can reproduce the same permutation from the same seed. */
#ifndef DPT_RNG_H
#define DPT_RNG_H

#include <stddef.h>
#include <stdint.h>

typedef struct dpt_rng {
    uint64_t s[4];
} dpt_rng;

void dpt_rng_seed(dpt_rng *rng, uint64_t seed);
uint64_t dpt_rng_next(dpt_rng *rng);
/* Uniform in [0, 1) with 24 random bits (exact in f32). */
float dpt_rng_uniform(dpt_rng *rng);
/* Standard normal (Box-Muller; one value per call so the state stays a pure function of calls). */
float dpt_rng_normal(dpt_rng *rng);
/* Uniform integer in [0, bound) without modulo bias (Lemire's method). */
uint64_t dpt_rng_below(dpt_rng *rng, uint64_t bound);
/* Fill perm[0..n) with a uniformly random permutation (Fisher-Yates). */
void dpt_rng_permutation(dpt_rng *rng, int64_t *perm, int64_t n);

/* FNV-1a over n bytes, continuing from h (start from DPT_HASH_SEED): the config hash, the
 * DDP plan check and the keys of multi-tensor lists. */
#define DPT_HASH_SEED 0xcbf29ce484222325ULL
static inline uint64_t dpt_hash_bytes(uint64_t h, const void *data, size_t n)
{
    const uint8_t *p = (const uint8_t *)data; /* the cast: nvcc compiles this header as C++ */
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

#endif
