/* unary_math.h: each dpt_unary_op and its derivative, one definition for the CPU kernels and
 * the CUDA ones (compiled as host code by the C compiler, as device code by nvcc), so both
 * backends compute the same formulas. */
#ifndef DPT_UNARY_MATH_H
#define DPT_UNARY_MATH_H

#include <math.h>

#include "dpt.h"

#ifdef __CUDACC__
#define DPT_MATH_FN static __host__ __device__ __forceinline__
#else
#define DPT_MATH_FN static inline
#endif

#define DPT_SQRT_2 1.4142135623730951f
#define DPT_INV_SQRT_2PI 0.3989422804014327f

DPT_MATH_FN float dpt_unary_one(dpt_unary_op op, float v)
{
    switch (op) {
    case DPT_UNARY_NEG:
        return -v;
    case DPT_UNARY_ABS:
        return fabsf(v);
    case DPT_UNARY_SIGN:
        return (float)((v > 0.0f) - (v < 0.0f));
    case DPT_UNARY_SQRT:
        return sqrtf(v);
    case DPT_UNARY_RSQRT:
        return 1.0f / sqrtf(v);
    case DPT_UNARY_EXP:
        return expf(v);
    case DPT_UNARY_LOG:
        return logf(v);
    case DPT_UNARY_SQUARE:
        return v * v;
    case DPT_UNARY_RECIPROCAL:
        return 1.0f / v;
    case DPT_UNARY_TANH:
        return tanhf(v);
    case DPT_UNARY_SIGMOID:
        return 1.0f / (1.0f + expf(-v));
    case DPT_UNARY_SILU:
        return v / (1.0f + expf(-v));
    case DPT_UNARY_GELU_ERF:
    case DPT_UNARY_COUNT:
        break;
    }
    return 0.5f * v * (1.0f + erff(v / DPT_SQRT_2));
}

/* d op(x) / dx, from x and y = op(x) (whichever is cheaper) */
DPT_MATH_FN float dpt_unary_grad(dpt_unary_op op, float x, float y)
{
    switch (op) {
    case DPT_UNARY_NEG:
        return -1.0f;
    case DPT_UNARY_ABS:
        return (float)((x > 0.0f) - (x < 0.0f));
    case DPT_UNARY_SIGN:
        return 0.0f;
    case DPT_UNARY_SQRT:
        return 0.5f / y;
    case DPT_UNARY_RSQRT:
        return -0.5f * y * y * y;
    case DPT_UNARY_EXP:
        return y;
    case DPT_UNARY_LOG:
        return 1.0f / x;
    case DPT_UNARY_SQUARE:
        return 2.0f * x;
    case DPT_UNARY_RECIPROCAL:
        return -y * y;
    case DPT_UNARY_TANH:
        return 1.0f - y * y;
    case DPT_UNARY_SIGMOID:
        return y * (1.0f - y);
    case DPT_UNARY_SILU: {
        float s = 1.0f / (1.0f + expf(-x));
        return s * (1.0f + x * (1.0f - s));
    }
    case DPT_UNARY_GELU_ERF:
    case DPT_UNARY_COUNT:
        break;
    }
    return 0.5f * (1.0f + erff(x / DPT_SQRT_2)) + x * DPT_INV_SQRT_2PI * expf(-0.5f * x * x);
}

#endif
