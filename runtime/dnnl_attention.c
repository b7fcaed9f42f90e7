/* dnnl_attention.c: the oneDNN backend's attention: the same tiles as the native kernel
 * (ops_cpu_tensor.c: 64 query rows against the keys they see, the scores recomputed in
 * backward from each row's log-sum-exp, memory linear in T), with each tile row of every
 * (batch, head) one batched oneDNN matmul (batch B x H, one plan per shape) instead of one
 * small CBLAS GEMM per (batch, head, tile): q, k, v and dy are first laid out as (B H, T, hs),
 * so every operand is a strided view oneDNN's kernels take as it is. fp32: the products 2x
 * OpenBLAS's on these shapes (attention 37 -> 31 ms of a 4x256 GPT step at T 256); under
 * [train] precision = bf16 the operands are bf16 (autocast's rule for GEMMs: bf16 in, fp32
 * accumulation and out; 3-4x OpenBLAS's fp32), the softmax, its statistics and D = dy . y
 * stay fp32 (llm.c's and PyTorch's SDPA rule). A batch element's result depends on its own
 * data and the plan only (test_tensor_ops: the same bits on 1 and 2 threads), so a
 * deterministic run's shards stay exact. */
#if DPT_DNNL
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dnnl_internal.h"
#include "half.h"
#include "vec_math.h"

#define ATTN_TILE 64 /* the fp32 kernel's tile: the same rows per softmax */

/* Query rows a tile: T in equal tiles of at most 64 rows where the keys a row sees grow with it
 * (causal: a tile reads only the keys up to its last row), else of at most 256 (every row sees
 * all T keys: fewer, larger products; a ViT's 197 tokens are one tile, not 64, 64, 64 and 5).
 * The scores held stay (B H) x 256 x T floats at most: linear in T. */
static int64_t attn_tile(int64_t T, bool causal)
{
    int64_t most = causal ? ATTN_TILE : 4 * ATTN_TILE, tiles = (T + most - 1) / most;
    return (T + tiles - 1) / tiles;
}

static bool same_mm(const attn_mm *a, const attn_mm *b)
{
    return a->kind == b->kind && a->bh == b->bh && a->M == b->M && a->N == b->N && a->K == b->K &&
           !memcmp(a->as, b->as, sizeof a->as) && !memcmp(a->bs, b->bs, sizeof a->bs) &&
           !memcmp(a->cs, b->cs, sizeof a->cs) && a->alpha == b->alpha && a->acc == b->acc && a->f32 == b->f32;
}

static void make_matmul(dnnl_state *st, attn_plan *p, const dpt_conv_shape *where)
{
    const attn_mm *m = &p->key;
    dnnl_dims_t as = {m->as[0], m->as[1], m->as[2]}, bs = {m->bs[0], m->bs[1], m->bs[2]},
                cs = {m->cs[0], m->cs[1], m->cs[2]}; /* oneDNN reads DNNL_MAX_NDIMS of each */
    dnnl_data_type_t dt = m->f32 ? dnnl_f32 : dnnl_bf16;
    CHECK_DNNL(dnnl_memory_desc_init_by_strides(&p->a, 3, (dnnl_dims_t){m->bh, m->M, m->K}, dt, as), "memory", where);
    CHECK_DNNL(dnnl_memory_desc_init_by_strides(&p->b, 3, (dnnl_dims_t){m->bh, m->K, m->N}, dt, bs), "memory", where);
    CHECK_DNNL(dnnl_memory_desc_init_by_strides(&p->c, 3, (dnnl_dims_t){m->bh, m->M, m->N}, dnnl_f32, cs), "memory",
               where);
    dnnl_primitive_attr_t attr;
    dnnl_post_ops_t ops = NULL;
    CHECK_DNNL(dnnl_primitive_attr_create(&attr), "attributes", where);
    if (m->alpha != 1.0f)
        CHECK_DNNL(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &m->alpha), "attributes", where);
    if (m->acc) {
        CHECK_DNNL(dnnl_post_ops_create(&ops), "post-ops", where);
        CHECK_DNNL(dnnl_post_ops_append_sum(ops, 1.0f), "post-ops", where);
        CHECK_DNNL(dnnl_primitive_attr_set_post_ops(attr, ops), "post-ops", where);
    }
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd;
    CHECK_DNNL(dnnl_matmul_desc_init(&md, &p->a, &p->b, NULL, &p->c), "attention matmul", where);
    CHECK_DNNL(dnnl_primitive_desc_create(&pd, &md, attr, st->engine, NULL), "attention matmul", where);
    CHECK_DNNL(dnnl_primitive_create(&p->prim, pd), "attention matmul", where);
    dnnl_primitive_desc_destroy(pd);
    if (ops) dnnl_post_ops_destroy(ops);
    dnnl_primitive_attr_destroy(attr);
}

/* (B, T, ld) rows with head h's hs values at column h hs (the caller offsets the pointer) and
 * (B, H, T, hs) dense, as oneDNN sees both: one reorder between them */
static void make_move(dnnl_state *st, attn_plan *p, const dpt_conv_shape *where)
{
    const attn_mm *m = &p->key;
    int64_t B = m->bh, H = m->M, T = m->N, hs = m->K, ld = m->as[0];
    dnnl_dims_t dims = {B, H, T, hs}, rows = {T * ld, hs, ld, 1}, heads = {H * T * hs, T * hs, hs, 1};
    bool to = m->kind == ATTN_TO_HEADS;
    CHECK_DNNL(dnnl_memory_desc_init_by_strides(&p->a, 4, dims, dnnl_f32, to ? rows : heads), "memory", where);
    CHECK_DNNL(dnnl_memory_desc_init_by_strides(&p->c, 4, dims, to && !m->f32 ? dnnl_bf16 : dnnl_f32, to ? heads : rows),
               "memory", where);
    p->prim = dnnl_make_reorder(st, &p->a, &p->c, m->acc, where);
}

static attn_plan *attn_plan_for(dpt_ctx *ctx, const attn_mm *m, const dpt_conv_shape *where)
{
    dnnl_state *st = dnnl_state_of(ctx);
    for (int i = 0; i < st->nattn; i++)
        if (same_mm(&st->attn_plans[i]->key, m)) return st->attn_plans[i];
    attn_plan *p = calloc(1, sizeof *p);
    if (!p) dpt_fatal("out of host memory for a oneDNN plan");
    p->key = *m;
    if (m->kind == ATTN_MM)
        make_matmul(st, p, where);
    else
        make_move(st, p, where);
    APPEND_PLAN(st->attn_plans, st->nattn, st->cap_attn, p);
    return p;
}

/* One pass's operand type: bf16 (precision = bf16) or fp32, and the bytes of one element. */
typedef struct attn_dt {
    bool f32;
    size_t es;
} attn_dt;

/* element `i` of an operand buffer of that type */
static void *el(attn_dt dt, const void *base, int64_t i)
{
    return (char *)base + (size_t)i * dt.es;
}

static void mm_run(dpt_ctx *ctx, attn_dt dt, attn_mm m, const void *A, const void *B, float *C)
{
    dnnl_state *st = dnnl_state_of(ctx);
    dpt_conv_shape where = {.n = m.bh, .c_in = m.K, .h = m.M, .w = m.N}; /* for messages */
    m.kind = ATTN_MM, m.f32 = dt.f32;
    attn_plan *p = attn_plan_for(ctx, &m, &where);
    dnnl_execute(ctx, p->prim, 3, (int[]){DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST},
                 (dnnl_memory_t[]){dnnl_mem(st, &p->a, A, &where), dnnl_mem(st, &p->b, B, &where),
                                   dnnl_mem(st, &p->c, C, &where)},
                 "attention matmul", &where);
}

/* rows (B, T, ld), head h's values at x + h hs  <->  heads (B, H, T, hs): to heads in the
 * pass's type, from heads in fp32 (+= with acc) */
static void heads_move(dpt_ctx *ctx, attn_dt dt, attn_kind kind, int64_t B, int64_t H, int64_t T, int64_t hs,
                       int64_t ld, bool acc, const void *from, void *to)
{
    attn_mm m = {.kind = kind, .bh = B, .M = H, .N = T, .K = hs, .as = {ld}, .alpha = 1.0f, .acc = acc,
                 .f32 = dt.f32};
    dpt_conv_shape where = {.n = B, .c_in = H, .h = T, .w = hs};
    attn_plan *p = attn_plan_for(ctx, &m, &where);
    if (p->prim)
        dnnl_run_reorder(ctx, p->prim, &p->a, from, &p->c, to, &where);
    else /* one layout and type (a head at a time over dense rows): no reorder was made */
        memcpy(to, from, dnnl_memory_desc_get_size(&p->a));
}

/* One row of scaled scores s: softmax-ed in place (dpt_attn_softmax_row), and out in bf16 to
 * p16 for the next product (NULL: fp32, s itself is the operand). */
DPT_CLONES static void softmax_row(float *s, uint16_t *p16, int64_t n, int64_t seen, float *lse, bool forward)
{
    dpt_attn_softmax_row(s, n, seen, lse, forward);
    if (p16) dpt_h16_from_f32_n(p16, s, n, true);
}

/* Scores of tile rows i0.. (rows) of every (b, h) against the n keys they see:
 * S (bh, rows, n) = scale Q K^T, softmax-ed (P in S, and in P16 for bf16). */
static void tile_probs(dpt_ctx *ctx, attn_dt dt, const void *q, const void *k, int64_t BH, int64_t T, int64_t hs,
                       int64_t i0, int64_t rows, int64_t n, bool causal, float scale, float *S, uint16_t *P16,
                       float *lse, bool forward)
{
    attn_mm qk = {.bh = BH, .M = rows, .N = n, .K = hs, .as = {T * hs, hs, 1}, .bs = {T * hs, 1, hs},
                  .cs = {rows * n, n, 1}, .alpha = scale};
    mm_run(ctx, dt, qk, el(dt, q, i0 * hs), k, S);
#pragma omp parallel for num_threads(ctx->threads) collapse(2)
    for (int64_t bh = 0; bh < BH; bh++)
        for (int64_t r = 0; r < rows; r++)
            softmax_row(S + (bh * rows + r) * n, P16 ? P16 + (bh * rows + r) * n : NULL, n, causal ? i0 + r + 1 : n,
                        lse + bh * T + i0 + r, forward);
}

static attn_dt pass_type(const dpt_ctx *ctx)
{
    bool f32 = ctx->precision != DPT_PRECISION_BF16;
    return (attn_dt){f32, f32 ? sizeof(float) : sizeof(uint16_t)};
}

void dnnl_attention_fwd(dpt_ctx *ctx, const float *qkv, int64_t B, int64_t T, int64_t H, int64_t hs, bool causal,
                        float *y, float *lse)
{
    attn_dt dt = pass_type(ctx);
    int64_t C = H * hs, BH = B * H, N = BH * T * hs, tile = attn_tile(T, causal);
    float scale = 1.0f / sqrtf((float)hs);
    dnnl_block qkv_b = {0}, s_b = {0}, p_b = {0}, o_b = {0};
    void *q = dnnl_block_get(ctx, &qkv_b, 3 * (size_t)N * dt.es, "attention's q, k, v by head");
    void *k = el(dt, q, N), *v = el(dt, q, 2 * N);
    float *S = dnnl_block_get(ctx, &s_b, (size_t)(BH * tile * T) * sizeof *S, "attention scores (one tile row)");
    uint16_t *P16 =
        dt.f32 ? NULL : dnnl_block_get(ctx, &p_b, (size_t)(BH * tile * T) * sizeof *P16, "attention bf16 probabilities");
    float *O = dnnl_block_get(ctx, &o_b, (size_t)N * sizeof *O, "attention output by head");
    for (int part = 0; part < 3; part++)
        heads_move(ctx, dt, ATTN_TO_HEADS, B, H, T, hs, 3 * C, false, qkv + part * C, el(dt, q, part * N));
    for (int64_t i0 = 0; i0 < T; i0 += tile) {
        int64_t rows = T - i0 < tile ? T - i0 : tile, n = causal ? i0 + rows : T;
        tile_probs(ctx, dt, q, k, BH, T, hs, i0, rows, n, causal, scale, S, P16, lse, true);
        attn_mm pv = {.bh = BH, .M = rows, .N = hs, .K = n, .as = {rows * n, n, 1}, .bs = {T * hs, hs, 1},
                      .cs = {T * hs, hs, 1}, .alpha = 1.0f};
        mm_run(ctx, dt, pv, dt.f32 ? (const void *)S : P16, v, O + i0 * hs);
    }
    heads_move(ctx, dt, ATTN_FROM_HEADS, B, H, T, hs, C, false, O, y);
    dnnl_block_put(ctx, &o_b), dnnl_block_put(ctx, &p_b), dnnl_block_put(ctx, &s_b), dnnl_block_put(ctx, &qkv_b);
}

/* dS = P (dP - D) scale over a tile row, D_r = dy_r . y_r in fp32 (precomputed per row), over
 * dp itself, and out in bf16 to ds16 for the next products (NULL: fp32, dp is the operand). */
DPT_CLONES static void dscores_row(const float *p, float *dp, uint16_t *ds16, int64_t n, float D, float scale)
{
#pragma omp simd
    for (int64_t j = 0; j < n; j++)
        dp[j] = p[j] * (dp[j] - D) * scale;
    if (ds16) dpt_h16_from_f32_n(ds16, dp, n, true);
}

void dnnl_attention_bwd(dpt_ctx *ctx, const float *qkv, const float *y, const float *dy, const float *lse, int64_t B,
                        int64_t T, int64_t H, int64_t hs, bool causal, float *scratch, float *dqkv, bool accumulate)
{
    attn_dt dt = pass_type(ctx);
    int64_t C = H * hs, BH = B * H, N = BH * T * hs, tile = attn_tile(T, causal);
    float scale = 1.0f / sqrtf((float)hs);
    dnnl_block in_b = {0}, acc_b = {0}, s_b = {0}, p_b = {0};
    void *q = dnnl_block_get(ctx, &in_b, 4 * (size_t)N * dt.es, "attention's q, k, v, dy by head");
    void *k = el(dt, q, N), *v = el(dt, q, 2 * N), *dO = el(dt, q, 3 * N);
    float *dq = dnnl_block_get(ctx, &acc_b, 3 * (size_t)N * sizeof *dq, "attention's q, k, v gradients");
    float *dk = dq + N, *dv = dk + N;
    float *S = dnnl_block_get(ctx, &s_b, 2 * (size_t)(BH * tile * T) * sizeof *S, "attention scores (one tile row)");
    float *dP = S + BH * tile * T;
    uint16_t *P16 = dt.f32 ? NULL
                           : dnnl_block_get(ctx, &p_b, 2 * (size_t)(BH * tile * T) * sizeof *P16, "attention bf16 tiles");
    uint16_t *dS16 = P16 ? P16 + BH * tile * T : NULL;
    const void *P = dt.f32 ? (const void *)S : P16, *dS = dt.f32 ? (const void *)dP : dS16; /* the products' operands */
    for (int part = 0; part < 3; part++)
        heads_move(ctx, dt, ATTN_TO_HEADS, B, H, T, hs, 3 * C, false, qkv + part * C, el(dt, q, part * N));
    heads_move(ctx, dt, ATTN_TO_HEADS, B, H, T, hs, C, false, dy, dO);
    memset(dk, 0, 2 * (size_t)N * sizeof *dk);
    /* D (b h, t) = dy . y in fp32, in the scratch the caller gives (B, H, T) */
    float *D = scratch;
#pragma omp parallel for num_threads(ctx->threads) collapse(2)
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < H; h++) {
                const float *a = dy + (b * T + t) * C + h * hs, *c = y + (b * T + t) * C + h * hs;
                float s = 0.0f;
                for (int64_t e = 0; e < hs; e++)
                    s += a[e] * c[e];
                D[(b * H + h) * T + t] = s;
            }
    for (int64_t i0 = 0; i0 < T; i0 += tile) {
        int64_t rows = T - i0 < tile ? T - i0 : tile, n = causal ? i0 + rows : T;
        tile_probs(ctx, dt, q, k, BH, T, hs, i0, rows, n, causal, scale, S, P16, (float *)lse, false);
        /* dV[:n] += P^T dO */
        mm_run(ctx, dt,
               (attn_mm){.bh = BH, .M = n, .N = hs, .K = rows, .as = {rows * n, 1, n}, .bs = {T * hs, hs, 1},
                         .cs = {T * hs, hs, 1}, .alpha = 1.0f, .acc = true},
               P, el(dt, dO, i0 * hs), dv);
        /* dP = dO V^T */
        mm_run(ctx, dt,
               (attn_mm){.bh = BH, .M = rows, .N = n, .K = hs, .as = {T * hs, hs, 1}, .bs = {T * hs, 1, hs},
                         .cs = {rows * n, n, 1}, .alpha = 1.0f},
               el(dt, dO, i0 * hs), v, dP);
#pragma omp parallel for num_threads(ctx->threads) collapse(2)
        for (int64_t bh = 0; bh < BH; bh++)
            for (int64_t r = 0; r < rows; r++)
                dscores_row(S + (bh * rows + r) * n, dP + (bh * rows + r) * n,
                            dS16 ? dS16 + (bh * rows + r) * n : NULL, n, D[bh * T + i0 + r], scale);
        /* dQ[tile] = dS K (each tile row's own rows: written, not added) */
        mm_run(ctx, dt,
               (attn_mm){.bh = BH, .M = rows, .N = hs, .K = n, .as = {rows * n, n, 1}, .bs = {T * hs, hs, 1},
                         .cs = {T * hs, hs, 1}, .alpha = 1.0f},
               dS, k, dq + i0 * hs);
        /* dK[:n] += dS^T Q */
        mm_run(ctx, dt,
               (attn_mm){.bh = BH, .M = n, .N = hs, .K = rows, .as = {rows * n, 1, n}, .bs = {T * hs, hs, 1},
                         .cs = {T * hs, hs, 1}, .alpha = 1.0f, .acc = true},
               dS, el(dt, q, i0 * hs), dk);
    }
    for (int part = 0; part < 3; part++) /* into dqkv: added, or written when it is fresh */
        heads_move(ctx, dt, ATTN_FROM_HEADS, B, H, T, hs, 3 * C, accumulate, dq + part * N, dqkv + part * C);
    dnnl_block_put(ctx, &p_b), dnnl_block_put(ctx, &s_b), dnnl_block_put(ctx, &acc_b), dnnl_block_put(ctx, &in_b);
}

#endif
