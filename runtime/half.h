/* half.h: float <-> bfloat16 and IEEE half (fp16) conversions, round to nearest even, NaN kept
 * a NaN, fp16 overflow to infinity and subnormals exact. Scalar and branch-light, so loops of
 * them vectorise. Used for 16-bit gradient AllReduce ([distributed] grad_compression). */
#ifndef DPT_HALF_H
#define DPT_HALF_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t dpt_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float dpt_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* bfloat16 is float's upper half: round the lower half away to nearest even; a NaN stays a
 * quiet NaN. A select, not a branch, so that loops over it vectorise. */
static inline uint16_t dpt_bf16_from_f32(float f)
{
    uint32_t u = dpt_f32_bits(f);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, quiet_nan = (u >> 16) | 0x0040u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

static inline float dpt_f32_from_bf16(uint16_t h)
{
    return dpt_f32_from_bits((uint32_t)h << 16);
}

/* IEEE half: the float is scaled so that the hardware's own float rounding drops the bits a
 * half cannot hold (at the half's exponent, subnormals included), then its exponent and
 * mantissa are re-based. Magnitudes from 65520 round to infinity. */
static inline uint16_t dpt_fp16_from_f32(float f)
{
    uint32_t w = dpt_f32_bits(f), twice = w + w, sign = w & 0x80000000u;
    if (twice > 0xff000000u) return (uint16_t)((sign >> 16) | 0x7e00u); /* NaN */
    float a = f < 0 ? -f : f;
    float base = (a * 0x1.0p+112f) * 0x1.0p-110f; /* overflows to inf past the half's range */
    uint32_t bias = twice & 0xff000000u;
    if (bias < 0x71000000u) bias = 0x71000000u; /* the smallest half exponent: subnormals */
    base = dpt_f32_from_bits((bias >> 1) + 0x07800000u) + base;
    uint32_t bits = dpt_f32_bits(base);
    uint32_t nonsign = ((bits >> 13) & 0x7c00u) + (bits & 0x0fffu);
    return (uint16_t)((sign >> 16) | nonsign);
}

static inline float dpt_f32_from_fp16(uint16_t h)
{
    uint32_t w = (uint32_t)h << 16, sign = w & 0x80000000u, twice = w + w;
    /* normal: move the exponent and mantissa into place and rescale; subnormal: a magic
     * number whose low bits are the mantissa, minus the magic */
    float normal = dpt_f32_from_bits((twice >> 4) + (0xe0u << 23)) * 0x1.0p-112f;
    float subnormal = dpt_f32_from_bits((twice >> 17) | (126u << 23)) - 0.5f;
    uint32_t r = sign | (twice < (1u << 27) ? dpt_f32_bits(subnormal) : dpt_f32_bits(normal));
    return dpt_f32_from_bits(r);
}

/* Either kind, chosen by bf16 (a bucket, a reduction, a test's reference). */
static inline uint16_t dpt_h16_from_f32(float f, bool bf16)
{
    return bf16 ? dpt_bf16_from_f32(f) : dpt_fp16_from_f32(f);
}

static inline float dpt_f32_from_h16(uint16_t h, bool bf16)
{
    return bf16 ? dpt_f32_from_bf16(h) : dpt_f32_from_fp16(h);
}

static inline void dpt_h16_from_f32_n(uint16_t *dst, const float *src, int64_t n, bool bf16)
{
    if (bf16)
        for (int64_t i = 0; i < n; i++)
            dst[i] = dpt_bf16_from_f32(src[i]);
    else
        for (int64_t i = 0; i < n; i++)
            dst[i] = dpt_fp16_from_f32(src[i]);
}

static inline void dpt_f32_from_h16_n(float *dst, const uint16_t *src, int64_t n, bool bf16)
{
    if (bf16)
        for (int64_t i = 0; i < n; i++)
            dst[i] = dpt_f32_from_bf16(src[i]);
    else
        for (int64_t i = 0; i < n; i++)
            dst[i] = dpt_f32_from_fp16(src[i]);
}

#endif
