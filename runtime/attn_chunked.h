/* attn_chunked.h: self-attention over fused qkv (dpt_attention's formulas: the CPU kernels'
 * comment in ops_cpu_tensor.c) as GEMMs over chunks of query rows, the order in which the CUDA
 * backend runs it (cuda_tensor.cu) on cuBLAS. For each batch element and each chunk of Tq query
 * rows [q0, q0 + Tq), the H heads' scores S = scale Q K^T are made against the Tk keys the
 * chunk can see (Tk = q0 + Tq when causal: the keys past the chunk's last row are never
 * computed, about half the work of a long causal sequence; T otherwise), a row kernel turns
 * them into probabilities P in place and keeps each row's log-sum-exp, and Y = P V. Scratch is
 * H Tq T floats: linear in T for a fixed chunk. Backward recomputes P from the log-sum-exp,
 * chunk by chunk, and adds dV += P^T dY, dS = P (dY V^T - D) scale, dQ += dS K, dK += dS^T Q.
 *
 * The orchestration is plain C over a table of primitives, so the same code runs in the CPU
 * test (tests/test_tensor_ops.c, naive primitives, every chunk size against dpt_attention)
 * and on the GPU (cuBLAS and three row kernels). */
#ifndef DPT_ATTN_CHUNKED_H
#define DPT_ATTN_CHUNKED_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct dpt_attn_prims {
    /* row-major C_i (M, N) = alpha op(A_i) op(B_i) + beta C_i, i < batch, X_i = X + i * sX */
    void (*gemm)(void *ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                 int64_t lda, int64_t sa, const float *B, int64_t ldb, int64_t sb, float beta, float *C,
                 int64_t ldc, int64_t sc, int64_t batch);
    /* S (H, Tq, Tk) of query rows q0.. of each head: row (h, i) sees keys j < n = q0 + i + 1
     * (causal) or Tk: P = softmax of those, 0 for the rest; lse[h T + q0 + i] = max + log(sum) */
    void (*softmax)(void *ctx, float *S, int64_t H, int64_t Tq, int64_t Tk, int64_t q0, bool causal, float *lse,
                    int64_t T);
    /* the same rows' P = exp(S - lse) recomputed in place (0 where masked) */
    void (*probs)(void *ctx, float *S, int64_t H, int64_t Tq, int64_t Tk, int64_t q0, bool causal, const float *lse,
                  int64_t T);
    /* G = P (G - D[h T + q0 + i]) scale, in place of G, row by row */
    void (*dscores)(void *ctx, const float *P, float *G, int64_t H, int64_t Tq, int64_t Tk, int64_t q0,
                    const float *D, int64_t T, float scale);
} dpt_attn_prims;

/* Query rows a chunk takes: scratch of at most `budget` floats (H Tq T), at least 64 rows
 * (or T), at most 256 so that a causal sequence skips the keys past each chunk. */
static inline int64_t dpt_attn_chunk_rows(int64_t T, int64_t H, int64_t budget)
{
    int64_t rows = budget / (H * T > 0 ? H * T : 1);
    rows = rows > 256 ? 256 : rows < 64 ? 64 : rows;
    return rows < T ? rows : T;
}

static inline void dpt_attn_chunked_fwd(const dpt_attn_prims *p, void *ctx, const float *qkv, int64_t B, int64_t T,
                                        int64_t H, int64_t hs, bool causal, int64_t chunk, float *S, float *y,
                                        float *lse)
{
    int64_t C = H * hs, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    for (int64_t b = 0; b < B; b++) {
        const float *q = qkv + b * T * C3, *k = q + C, *v = q + 2 * C;
        for (int64_t q0 = 0; q0 < T; q0 += chunk) {
            int64_t Tq = T - q0 < chunk ? T - q0 : chunk, Tk = causal ? q0 + Tq : T;
            p->gemm(ctx, false, true, Tq, Tk, hs, scale, q + q0 * C3, C3, hs, k, C3, hs, 0.0f, S, Tk, Tq * Tk, H);
            p->softmax(ctx, S, H, Tq, Tk, q0, causal, lse + b * H * T, T);
            p->gemm(ctx, false, false, Tq, hs, Tk, 1.0f, S, Tk, Tq * Tk, v, C3, hs, 0.0f, y + (b * T + q0) * C, C, hs,
                    H);
        }
    }
}

/* D (B, H, T) = rowdot(dY, Y) already made; P and G scratch of H chunk T floats each; adds into
 * dqkv (zero it first for a fresh gradient). */
static inline void dpt_attn_chunked_bwd(const dpt_attn_prims *p, void *ctx, const float *qkv, const float *dy,
                                        const float *lse, const float *D, int64_t B, int64_t T, int64_t H, int64_t hs,
                                        bool causal, int64_t chunk, float *P, float *G, float *dqkv)
{
    int64_t C = H * hs, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    for (int64_t b = 0; b < B; b++) {
        const float *q = qkv + b * T * C3, *k = q + C, *v = q + 2 * C;
        float *dq = dqkv + b * T * C3, *dk = dq + C, *dv = dq + 2 * C;
        for (int64_t q0 = 0; q0 < T; q0 += chunk) {
            int64_t Tq = T - q0 < chunk ? T - q0 : chunk, Tk = causal ? q0 + Tq : T;
            const float *g = dy + (b * T + q0) * C, *qc = q + q0 * C3;
            p->gemm(ctx, false, true, Tq, Tk, hs, scale, qc, C3, hs, k, C3, hs, 0.0f, P, Tk, Tq * Tk, H);
            p->probs(ctx, P, H, Tq, Tk, q0, causal, lse + b * H * T, T);
            p->gemm(ctx, true, false, Tk, hs, Tq, 1.0f, P, Tk, Tq * Tk, g, C, hs, 1.0f, dv, C3, hs, H); /* dV += P^T dY */
            p->gemm(ctx, false, true, Tq, Tk, hs, 1.0f, g, C, hs, v, C3, hs, 0.0f, G, Tk, Tq * Tk, H);  /* dP = dY V^T */
            p->dscores(ctx, P, G, H, Tq, Tk, q0, D + b * H * T, T, scale);
            p->gemm(ctx, false, false, Tq, hs, Tk, 1.0f, G, Tk, Tq * Tk, k, C3, hs, 1.0f, dq + q0 * C3, C3, hs,
                    H); /* dQ += dS K */
            p->gemm(ctx, true, false, Tk, hs, Tq, 1.0f, G, Tk, Tq * Tk, qc, C3, hs, 1.0f, dk, C3, hs, H); /* dK += dS^T Q */
        }
    }
}

#endif
