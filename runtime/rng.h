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
/* The same value from the call's two draws (a, then b), so that many can be transformed in
 * parallel after drawing them in order: the same expression, the same floats. */
float dpt_rng_normal_of(uint64_t a, uint64_t b);
/* Uniform integer in [0, bound) without modulo bias (Lemire's method). */
uint64_t dpt_rng_below(dpt_rng *rng, uint64_t bound);
/* Uniform in [0, 1) with 53 random bits. */
double dpt_rng_uniform_f64(dpt_rng *rng);
/* Gamma(shape, 1), shape > 0 (Marsaglia and Tsang's method; below 1 through Gamma(shape + 1)
 * x U^(1/shape)), and the symmetric Beta(a, a) as X / (X + Y) of two such draws (mixup's
 * lambda). Doubles from the stream: a pure function of the generator's state. */
double dpt_rng_gamma(dpt_rng *rng, double shape);
double dpt_rng_beta(dpt_rng *rng, double a);
/* Fill perm[0..n) with a uniformly random permutation (Fisher-Yates). */
void dpt_rng_permutation(dpt_rng *rng, int64_t *perm, int64_t n);

/* Element i of a counter-based stream under `key`: a uniform float in [0, 1) with 24 bits from
 * splitmix64's finaliser of key + (i + 1) x the golden ratio. A pure function of (key, i), so a
 * GPU thread and a CPU loop draw the same values in any order: dropout's masks are made on the
 * device that uses them, from one draw of the context's generator per call. */
#ifdef __CUDACC__
#define DPT_RNG_HD __host__ __device__
#else
#define DPT_RNG_HD
#endif
static inline DPT_RNG_HD float dpt_rng_at(uint64_t key, uint64_t i)
{
    uint64_t z = key + (i + 1) * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (float)(z >> 40) * 0x1.0p-24f;
}

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
