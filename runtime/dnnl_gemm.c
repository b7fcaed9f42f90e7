/* dnnl_gemm.c: the oneDNN backend's GEMM: OpenBLAS in fp32, oneDNN's bf16 matmul under
 * [train] precision = bf16 (plans per shape). */
#if DPT_DNNL
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dnnl_internal.h"
#include "log.h"
#include "openmp.h"

/* ---------------------------------------------------------------- GEMM */

static gemm_plan *gemm_plan_for(dpt_ctx *ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                               int64_t lda, int64_t ldb, float beta, int64_t ldc)
{
    dnnl_state *st = dnnl_state_of(ctx);
    for (int i = 0; i < st->ngemm; i++) {
        gemm_plan *g = st->gemms[i];
        if (g->ta == ta && g->tb == tb && g->M == M && g->N == N && g->K == K && g->lda == lda && g->ldb == ldb &&
            g->ldc == ldc && g->alpha == alpha && g->beta == beta)
            return g;
    }
    gemm_plan *g = calloc(1, sizeof *g);
    if (!g) dpt_fatal("out of host memory for a oneDNN plan");
    *g = (gemm_plan){.ta = ta, .tb = tb, .M = M, .N = N, .K = K, .lda = lda, .ldb = ldb, .ldc = ldc, .alpha = alpha,
                     .beta = beta};
    dpt_conv_shape where = {.n = M, .c_in = K, .h = N, .w = 1}; /* for messages */
    dnnl_dims_t ad = {M, K}, bd = {K, N}, cd = {M, N};
    /* A (M, K) is stored row-major, or transposed: (K, M) row-major with its leading dimension */
    dnnl_dims_t as = {ta ? 1 : lda, ta ? lda : 1}, bs = {tb ? 1 : ldb, tb ? ldb : 1}, cs = {ldc, 1};
    dnnl_dims_t as16 = {ta ? 1 : K, ta ? M : 1}, bs16 = {tb ? 1 : N, tb ? K : 1};
    CHECK_DNNL(dnnl_memory_desc_init_by_strides(&g->a32, 2, ad, dnnl_f32, as), "memory", &where);
    CHECK_DNNL(dnnl_memory_desc_init_by_strides(&g->b32, 2, bd, dnnl_f32, bs), "memory", &where);
    CHECK_DNNL(dnnl_memory_desc_init_by_strides(&g->a16, 2, ad, dnnl_bf16, as16), "memory", &where);
    CHECK_DNNL(dnnl_memory_desc_init_by_strides(&g->b16, 2, bd, dnnl_bf16, bs16), "memory", &where);
    CHECK_DNNL(dnnl_memory_desc_init_by_strides(&g->c, 2, cd, dnnl_f32, cs), "memory", &where);
    dnnl_primitive_attr_t attr;
    dnnl_post_ops_t ops = NULL;
    CHECK_DNNL(dnnl_primitive_attr_create(&attr), "attributes", &where);
    if (alpha != 1.0f) CHECK_DNNL(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha), "attributes", &where);
    if (beta != 0.0f) {
        CHECK_DNNL(dnnl_post_ops_create(&ops), "post-ops", &where);
        CHECK_DNNL(dnnl_post_ops_append_sum(ops, beta), "post-ops", &where);
        CHECK_DNNL(dnnl_primitive_attr_set_post_ops(attr, ops), "post-ops", &where);
    }
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd;
    CHECK_DNNL(dnnl_matmul_desc_init(&md, &g->a16, &g->b16, NULL, &g->c), "bf16 matmul", &where);
    CHECK_DNNL(dnnl_primitive_desc_create(&pd, &md, attr, st->engine, NULL), "bf16 matmul", &where);
    CHECK_DNNL(dnnl_primitive_create(&g->matmul, pd), "bf16 matmul", &where);
    dnnl_primitive_desc_destroy(pd);
    if (ops) dnnl_post_ops_destroy(ops);
    dnnl_primitive_attr_destroy(attr);
    g->to_a16 = dnnl_make_reorder(st, &g->a32, &g->a16, false, &where);
    g->to_b16 = dnnl_make_reorder(st, &g->b32, &g->b16, false, &where);
    APPEND_PLAN(st->gemms, st->ngemm, st->cap_gemm, g);
    return g;
}

/* C = alpha op(A) op(B) + beta C with A and B rounded to bf16 (the linear layers' and
 * matmul's products under [train] precision = bf16: oneDNN's bf16 brgemm, measured 2-4.5x
 * sgemm's speed on the MLP, CNN and ResNet-50 classifier shapes, conversions included). */
static void bf16_gemm(dpt_ctx *ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                      int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    dnnl_state *st = dnnl_state_of(ctx);
    gemm_plan *g = gemm_plan_for(ctx, ta, tb, M, N, K, alpha, lda, ldb, beta, ldc);
    dpt_conv_shape where = {.n = M, .c_in = K, .h = N, .w = 1};
    dnnl_block a16 = {0}, b16 = {0};
    dnnl_block_get(ctx, &a16, dnnl_memory_desc_get_size(&g->a16), "a bf16 GEMM operand");
    dnnl_block_get(ctx, &b16, dnnl_memory_desc_get_size(&g->b16), "a bf16 GEMM operand");
    dnnl_run_reorder(ctx, g->to_a16, &g->a32, A, &g->a16, a16.ptr, &where);
    dnnl_run_reorder(ctx, g->to_b16, &g->b32, B, &g->b16, b16.ptr, &where);
    dnnl_execute(ctx, g->matmul, 3, (int[]){DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST},
            (dnnl_memory_t[]){dnnl_mem(st, &g->a16, a16.ptr, &where), dnnl_mem(st, &g->b16, b16.ptr, &where),
                              dnnl_mem(st, &g->c, C, &where)},
            "bf16 matmul", &where);
    dnnl_block_put(ctx, &b16), dnnl_block_put(ctx, &a16);
}

/* Every GEMM (linear layers, matmul) through oneDNN's own sgemm: on this AVX-512 machine it
 * runs the linear layers' three products 1.4-2x faster than OpenBLAS (bench_linear, which
 * also checks the two agree). Row-major, like the backend's gemm. */
void cpu_onednn_gemm(dpt_ctx *ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                        const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    if (M == 0 || N == 0) return;
    if (K == 0) { /* C = beta C: OpenBLAS's path handles the empty product */
        dpt_backend_cpu.gemm(ctx, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    if (ctx->precision == DPT_PRECISION_BF16) { /* autocast: GEMMs take bf16 inputs too */
        bf16_gemm(ctx, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    omp_set_num_threads(ctx->threads); /* oneDNN's OpenMP team takes this thread's setting */
    dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    if (st != dnnl_success)
        dpt_fatal("oneDNN sgemm failed for %c%c M=%lld N=%lld K=%lld lda=%lld ldb=%lld ldc=%lld: %s",
                  trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', (long long)M, (long long)N, (long long)K, (long long)lda,
                  (long long)ldb, (long long)ldc, dnnl_status2str(st));
}
/* bf16's speed over fp32's on this CPU: the best of 5 products of 384 x 384 x 384 each way on the
 * context's threads, bf16 with its conversions. oneDNN picks bf16 kernels wherever the CPU has
 * AVX512-BF16, but they pay only where it runs bf16 dot products faster than fp32 FMAs: an AMD
 * Zen 4 issues two VDPBF16PS a cycle (bf16 1.3-1.6x fp32 on this project's models), an Intel
 * Xeon without AMX (Ice Lake, or a VM that hides AMX) one, the same multiply-adds a cycle as
 * fp32's two FMA ports, so the conversions make bf16 slower (0.6-0.7x measured). */
double dnnl_bf16_speedup(dpt_ctx *ctx)
{
    enum { N = 384, ROUNDS = 5 };
    float *a = malloc((size_t)N * N * sizeof *a), *b = malloc((size_t)N * N * sizeof *b),
          *c = malloc((size_t)N * N * sizeof *c);
    if (!a || !b || !c) dpt_fatal("out of host memory");
    for (int i = 0; i < N * N; i++)
        a[i] = (float)(i % 7) * 0.25f, b[i] = (float)(i % 5) * 0.5f;
    double best[2] = {1e30, 1e30};
    omp_set_num_threads(ctx->threads);
    for (int r = 0; r < ROUNDS + 1; r++) /* the first round makes the plans: not counted */
        for (int bf = 0; bf < 2; bf++) {
            double t = dpt_now_s();
            if (bf)
                bf16_gemm(ctx, false, false, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N);
            else
                dnnl_sgemm('N', 'N', N, N, N, 1.0f, a, N, b, N, 0.0f, c, N);
            t = dpt_now_s() - t;
            if (r && t < best[bf]) best[bf] = t;
        }
    free(a), free(b), free(c);
    return best[1] > 0 ? best[0] / best[1] : 1.0;
}

#endif
