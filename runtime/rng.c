/* rng.c: xoshiro256** (Blackman & Vigna), public-domain algorithm. */
#include "rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void dpt_rng_seed(dpt_rng *rng, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        rng->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t dpt_rng_next(dpt_rng *rng)
{
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

float dpt_rng_uniform(dpt_rng *rng)
{
    return (float)(dpt_rng_next(rng) >> 40) * 0x1.0p-24f;
}

float dpt_rng_normal_of(uint64_t a, uint64_t b)
{
    double u1 = ((double)(a >> 11) + 1.0) * 0x1.0p-53; /* (0, 1] */
    double u2 = (double)(b >> 11) * 0x1.0p-53;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

float dpt_rng_normal(dpt_rng *rng)
{
    uint64_t a = dpt_rng_next(rng);
    return dpt_rng_normal_of(a, dpt_rng_next(rng));
}

double dpt_rng_uniform_f64(dpt_rng *rng)
{
    return (double)(dpt_rng_next(rng) >> 11) * 0x1.0p-53;
}

double dpt_rng_gamma(dpt_rng *rng, double shape)
{
    if (shape < 1.0) { /* Gamma(a) = Gamma(a + 1) U^(1/a); U in (0, 1] */
        double u = 1.0 - dpt_rng_uniform_f64(rng);
        return dpt_rng_gamma(rng, shape + 1.0) * pow(u, 1.0 / shape);
    }
    double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x, v;
        do { /* a standard normal (Box-Muller from two 53-bit uniforms) */
            double u1 = 1.0 - dpt_rng_uniform_f64(rng), u2 = dpt_rng_uniform_f64(rng);
            x = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
            v = 1.0 + c * x;
        } while (v <= 0.0);
        v = v * v * v;
        double u = 1.0 - dpt_rng_uniform_f64(rng);
        if (u < 1.0 - 0.0331 * (x * x) * (x * x)) return d * v;
        if (log(u) < 0.5 * x * x + d * (1.0 - v + log(v))) return d * v;
    }
}

double dpt_rng_beta(dpt_rng *rng, double a)
{
    double x = dpt_rng_gamma(rng, a), y = dpt_rng_gamma(rng, a);
    if (x + y > 0.0) return x / (x + y);
    return dpt_rng_next(rng) >> 63 ? 1.0 : 0.0; /* both underflowed (a far below 1): either end, evenly */
}

uint64_t dpt_rng_below(dpt_rng *rng, uint64_t bound)
{
    __uint128_t m = (__uint128_t)dpt_rng_next(rng) * bound;
    uint64_t low = (uint64_t)m;
    if (low < bound) {
        uint64_t threshold = -bound % bound;
        while (low < threshold) {
            m = (__uint128_t)dpt_rng_next(rng) * bound;
            low = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

void dpt_rng_permutation(dpt_rng *rng, int64_t *perm, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)dpt_rng_below(rng, (uint64_t)i + 1);
        int64_t tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
    }
}
