/* vec_math.h: what the CPU kernels' hot loops need to vectorise. The build targets the x86-64
 * baseline (SSE2) so one binary runs on every CPU; DPT_CLONES compiles a function once more for
 * AVX2+FMA and for AVX-512 and picks the CPU's at load time (GCC's and Clang's target_clones).
 * dpt_vexpf is an expf the compiler can vectorise (libm's is a call per element): Cody-Waite
 * range reduction and Cephes' degree-6 polynomial, within 2 ulp of expf over [-87.3, 88.3]
 * (clamped outside: 0 < result < inf). Same bits on every thread count; not on every CPU
 * (FMA contraction differs between the clones), as oneDNN's kernels already are not. */
#ifndef DPT_VEC_MATH_H
#define DPT_VEC_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(DPT_NO_CLONES)
#define DPT_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define DPT_CLONES
#endif

static inline float dpt_vexpf(float x)
{
    x = x < -87.3f ? -87.3f : x > 88.3f ? 88.3f : x;
    /* n = round(x / ln 2) by the 1.5 * 2^23 trick (no libm call, vectorises) */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23; /* 2^n, n in [-126, 127] */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* erf by Abramowitz and Stegun 7.1.26: |error| < 1.5e-7 absolute (about an ulp of 1, what the
 * exact GELU's 1 + erf(x / sqrt 2) needs; libm's erff is a call per element), branch-free. */
static inline float dpt_verff(float x)
{
    float a = fabsf(x), t = 1.0f / (1.0f + 0.3275911f * a);
    float p = 1.061405429f;
    p = p * t - 1.453152027f;
    p = p * t + 1.421413741f;
    p = p * t - 0.284496736f;
    p = p * t + 0.254829592f;
    return copysignf(1.0f - p * t * dpt_vexpf(-a * a), x);
}

/* Attention's softmax of one row of scaled scores s (n, of which the first `seen` count; the
 * rest set to 0): forward normalises it and keeps its log-sum-exp in *lse, backward recomputes
 * the probabilities exp(s - *lse) (both CPU attention kernels). */
static inline void dpt_attn_softmax_row(float *s, int64_t n, int64_t seen, float *lse, int forward)
{
    if (forward) {
        float m = -INFINITY, sum = 0.0f;
#pragma omp simd reduction(max : m) /* the same maximum in any order; scalar it was a third of the row's time */
        for (int64_t j = 0; j < seen; j++)
            m = s[j] > m ? s[j] : m;
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < seen; j++) {
            s[j] = dpt_vexpf(s[j] - m);
            sum += s[j];
        }
        float inv = 1.0f / sum;
#pragma omp simd
        for (int64_t j = 0; j < seen; j++)
            s[j] *= inv;
        *lse = m + logf(sum);
    } else {
        float L = *lse;
#pragma omp simd
        for (int64_t j = 0; j < seen; j++)
            s[j] = dpt_vexpf(s[j] - L);
    }
    for (int64_t j = seen; j < n; j++)
        s[j] = 0.0f;
}

/* GELU's tanh form, 0.5 v (1 + tanh(u)) with u = sqrt(2/pi) (v + 0.044715 v^3), written as
 * v * s with s = sigmoid(2u) = 0.5 (1 + tanh(u)); and its derivative s + 2 v s (1 - s) u'. */
#define DPT_GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define DPT_GELU_C 0.044715f

static inline float dpt_gelu_sigmoid(float v)
{
    return 1.0f / (1.0f + dpt_vexpf(-2.0f * DPT_GELU_K * (v + DPT_GELU_C * v * v * v)));
}

static inline float dpt_gelu_value(float v)
{
    return v * dpt_gelu_sigmoid(v);
}

static inline float dpt_gelu_derivative(float v)
{
    float s = dpt_gelu_sigmoid(v);
    return s + 2.0f * v * s * (1.0f - s) * DPT_GELU_K * (1.0f + 3.0f * DPT_GELU_C * v * v);
}

#endif
