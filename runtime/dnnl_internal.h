/* dnnl_internal.h: what the oneDNN backend's files share (ops_cpu_dnnl.c: state, reorders,
 * relayouts, the table; dnnl_conv.c, dnnl_norm.c, dnnl_pool.c, dnnl_gemm.c, dnnl_attention.c: one
 * concern each):
 * the plans each keeps per shape, the context's state that holds them, and the helpers that
 * create and run primitives. Internal to the library; only compiled with oneDNN (DPT_DNNL). */
#ifndef DPT_DNNL_INTERNAL_H
#define DPT_DNNL_INTERNAL_H

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

#include "backend.h"
#include "ctx.h"
#include "error.h"

typedef struct conv_plan {
    dpt_conv_shape shape;
    bool native;         /* oneDNN has no kernel for this shape */
    dpt_layout y_layout; /* what forward writes y in */
    dpt_dtype y_dtype;   /* and in which numbers (BF16: a 16-bit activation) */
    dnnl_primitive_t fwd, bwd_data, bwd_weights;
    /* the caller's layouts: x as it arrives, y as forward writes it (each in its dtype), dx
     * and dy in their layouts in F32, weights and bias plain */
    dnnl_memory_desc_t src, weights, dst, bias, dx, dy;
    /* what each primitive reads and writes */
    dnnl_memory_desc_t fwd_src, fwd_weights, fwd_dst, bd_diff_src, bd_weights, bd_diff_dst, bw_src,
        bw_diff_weights, bw_diff_dst;
    dnnl_memory_desc_t fwd_scratch, bd_scratch, bw_scratch; /* scratchpads (user-provided) */
    /* reorders (NULL: the layouts are equal, no copy); *_acc ones add into their target */
    dnnl_primitive_t src_in, weights_in, dst_out, diff_dst_in, bd_weights_in, diff_src_acc, diff_src_out,
        bw_src_in, bw_diff_dst_in, diff_weights_acc;
} conv_plan;

/* A batch-norm shape in one layout: training forward and backward, inference forward. */
typedef struct bn_plan {
    int64_t n, c, hw;
    dpt_layout layout;
    dpt_dtype dtype; /* of x and y; a BF16 plan has no backward (it runs the F32 plan's) */
    double eps;
    bool relu;       /* ReLU fused after the normalisation (fuse_norm_relu): a workspace for backward */
    dnnl_memory_desc_t data, stat; /* x/y/dx/dy; mean/variance/scale/shift (c) */
    dnnl_memory_desc_t ws;         /* with relu: the training forward's mask, read by backward */
    dnnl_memory_desc_t fwd_scratch, bwd_scratch, infer_scratch;
    dnnl_primitive_t fwd, bwd, infer;
} bn_plan;

/* A pooling shape in one layout: training forward (max: with its workspace) and backward. */
typedef struct pool_plan {
    dpt_pool_shape shape;
    bool max;
    bool native; /* oneDNN has no kernel: NCHW and the native kernels */
    /* x and y in the shape's dtype; dx and dy F32 (backward runs in F32 on a BF16 forward's
     * workspace: oneDNN's maxima records are the same) */
    dnnl_memory_desc_t src, dst, dsrc, ddst, ws, fwd_scratch, bwd_scratch;
    dnnl_primitive_t fwd, bwd;
} pool_plan;

/* A cached reorder between NCHW and nChw16c of one shape (and from BF16 to F32). */
typedef struct relayout_plan {
    int64_t shape[4];
    dpt_layout from, to;
    dpt_dtype from_dt, to_dt;
    bool accumulate;
    dnnl_memory_desc_t from_md, to_md;
    dnnl_primitive_t reorder;
} relayout_plan;

/* [train] precision = bf16: one GEMM shape (with its transposes, leading dimensions, alpha and
 * beta) on oneDNN's matmul: A and B rounded to bf16 into dense buffers of their own
 * orientation, fp32 accumulation and output, alpha as the output scale, beta as a sum. */
typedef struct gemm_plan {
    bool ta, tb;
    int64_t M, N, K, lda, ldb, ldc;
    float alpha, beta;
    dnnl_memory_desc_t a32, b32, a16, b16, c;
    dnnl_primitive_t to_a16, to_b16, matmul;
} gemm_plan;

/* [train] precision = bf16's attention (dnnl_attention.c). ATTN_MM: one batched product C (bh,
 * M, N) = alpha A (bh, M, K) B (bh, K, N) (+ C with acc), A and B bf16 and C fp32, each a
 * strided view (strides between batch elements, rows, columns; a transposed operand's column
 * stride > 1). ATTN_TO_HEADS: (B = bh, T = N, ld = as[0]) fp32 rows holding H = M heads of hs = K
 * values -> (B, H, T, hs) bf16; ATTN_FROM_HEADS: (B, H, T, hs) fp32 -> the rows (+= with acc). */
typedef enum { ATTN_MM, ATTN_TO_HEADS, ATTN_FROM_HEADS } attn_kind;

typedef struct attn_mm {
    attn_kind kind;
    int64_t bh, M, N, K;
    int64_t as[3], bs[3], cs[3];
    float alpha;
    bool acc;
    bool f32; /* the operands (A, B; to heads: the result) in fp32 instead of bf16 */
} attn_mm;

typedef struct attn_plan {
    attn_mm key;
    dnnl_memory_desc_t a, b, c; /* a reorder's from and to: a and c */
    dnnl_primitive_t prim;
} attn_plan;

/* The plans of one thread count; states for other counts ([train] adapt_threads) form a ring
 * through `next` (a state alone points to itself). */
typedef struct dnnl_state {
    int threads;
    struct dnnl_state *next;
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    gemm_plan **gemms;
    int ngemm, cap_gemm;
    attn_plan **attn_plans;
    int nattn, cap_attn;
    conv_plan **plans;
    int nplans, cap_plans;
    bn_plan **bn_plans;
    int nbn, cap_bn;
    relayout_plan **relayouts;
    int nrelayouts, cap_relayouts;
    pool_plan **pool_plans;
    int npool, cap_pool;
} dnnl_state;

/* What a message names: a convolution; a pooling window (c_out 0, a kernel); a tensor. */
void dnnl_shape_str(const dpt_conv_shape *s, char *buf, size_t cap);

/* A oneDNN call that must not fail once its plan exists: report the primitive, the shape and
 * oneDNN's status, then stop the job. */
#define CHECK_DNNL(call, what, shape)                                                                        \
    do {                                                                                                     \
        dnnl_status_t st_ = (call);                                                                          \
        if (st_ != dnnl_success) {                                                                           \
            char sh_[320];                                                                                   \
            dnnl_shape_str(shape, sh_, sizeof sh_);                                                               \
            dpt_fatal("oneDNN %s failed for %s: %s (%s)", what, sh_, dnnl_status2str(st_), #call);           \
        }                                                                                                    \
    } while (0)

static inline dnnl_state *dnnl_state_of(dpt_ctx *ctx)
{
    return ctx->backend_state;
}

/* Append `item` to one of the state's growing lists of plans (list, its count, its capacity). */
#define APPEND_PLAN(list, count, cap, item)                                                                  \
    do {                                                                                                     \
        if ((count) == (cap)) {                                                                              \
            (cap) = (cap) ? 2 * (cap) : 16;                                                                  \
            (list) = realloc((list), (size_t)(cap) * sizeof *(list));                                        \
            if (!(list)) dpt_fatal("out of host memory for oneDNN plans");                                   \
        }                                                                                                    \
        (list)[(count)++] = (item);                                                                          \
    } while (0)


/* ---------------------------------------------------------------- helpers (ops_cpu_dnnl.c) */

/* A reorder from one layout to another; NULL when they are equal and nothing is added. */
dnnl_primitive_t dnnl_make_reorder(dnnl_state *st, const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to,
                                   bool accumulate, const dpt_conv_shape *s);
const dnnl_memory_desc_t *dnnl_md(const_dnnl_primitive_desc_t pd, dnnl_query_t what);
/* The memory descriptor of an activation (N, C, H, W) in one of our layouts and dtypes. */
void dnnl_activation_md(dnnl_memory_desc_t *d, const int64_t *shape, dpt_layout layout, dpt_dtype dtype,
                        const dpt_conv_shape *s);
/* A block from the caching allocator (scratchpads, reordered operands), and its return. */
typedef struct dnnl_block {
    void *ptr;
    size_t granted;
} dnnl_block;
void *dnnl_block_get(dpt_ctx *ctx, dnnl_block *b, size_t bytes, const char *what);
void dnnl_block_put(dpt_ctx *ctx, dnnl_block *b);
dnnl_memory_t dnnl_mem(dnnl_state *st, const dnnl_memory_desc_t *d, const void *ptr, const dpt_conv_shape *s);
void dnnl_execute(dpt_ctx *ctx, dnnl_primitive_t p, int nargs, const int *kinds, dnnl_memory_t *mems,
                  const char *what, const dpt_conv_shape *s);
void dnnl_run_reorder(dpt_ctx *ctx, dnnl_primitive_t r, const dnnl_memory_desc_t *from_md, const void *from,
                      const dnnl_memory_desc_t *to_md, void *to, const dpt_conv_shape *s);
const void *dnnl_laid_out(dpt_ctx *ctx, dnnl_primitive_t r, const dnnl_memory_desc_t *plain_md, const void *plain,
                          const dnnl_memory_desc_t *wanted_md, dnnl_block *buf, const dpt_conv_shape *s);
void dnnl_act_reorder(dpt_ctx *ctx, const void *src, dpt_layout from, dpt_dtype from_dt, void *dst, dpt_layout to,
                      dpt_dtype to_dt, const int64_t *shape, bool accumulate);
/* A 16-bit activation widened into F32 in another (or the same) layout (the table's widen). */
void dnnl_widen(dpt_ctx *ctx, const void *src, dpt_layout from, float *dst, dpt_layout to, const int64_t *shape,
                bool accumulate);
/* An activation into another layout (and += with accumulate), F32 to F32 (the table's relayout). */
void dnnl_relayout(dpt_ctx *ctx, const float *src, dpt_layout from, float *dst, dpt_layout to, const int64_t *shape,
                   bool accumulate);

/* ---------------------------------------------------------------- each concern's entries */

/* dnnl_conv.c; the right padding that gives our (floor) output size, and an activation as plain
 * NCHW F32 for the native kernels (t itself, or a copy in a block) */
int64_t dnnl_pad_right(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil, int64_t out);
const float *dnnl_as_nchw(dpt_ctx *ctx, const float *t, dpt_layout layout, dpt_dtype dtype, const int64_t *shape,
                          dnnl_block *b);
void dnnl_conv2d_io(dpt_ctx *ctx, const dpt_conv_shape *s, dpt_conv_io *io);
void dnnl_conv2d_fwd(dpt_ctx *ctx, const dpt_conv_shape *s, const float *x, const float *w, const float *bias, float *y);
void dnnl_conv2d_bwd(dpt_ctx *ctx, const dpt_conv_shape *s, const float *x, const float *w, const float *dy, float *dx,
                     bool dx_accumulate, float *dw, float *dbias);
void dnnl_conv_plan_free(conv_plan *p);
/* dnnl_norm.c */
void dnnl_bn_fused_fwd(dpt_ctx *ctx, const float *x, float *y, int64_t n, int64_t c, int64_t hw, dpt_layout layout,
                       dpt_dtype dtype, const float *gamma, const float *beta, float *running_mean, float *running_var,
                       double momentum, double eps, float *save_mean, float *save_stat, void *relu_ws);
void dnnl_bn_fused_bwd(dpt_ctx *ctx, const float *x, const float *dy, float *dx, bool dx_accumulate, int64_t n,
                       int64_t c, int64_t hw, dpt_layout layout, dpt_dtype dtype, const float *gamma, float *dgamma,
                       float *dbeta, double eps, const float *save_mean, const float *save_stat, const void *relu_ws);
size_t dnnl_bn_relu_ws_bytes(dpt_ctx *ctx, int64_t n, int64_t c, int64_t hw, dpt_layout layout, dpt_dtype dtype,
                             double eps);
void dnnl_bn_fused_infer(dpt_ctx *ctx, const float *x, float *y, int64_t n, int64_t c, int64_t hw, dpt_layout layout,
                         dpt_dtype dtype, const float *gamma, const float *beta, const float *running_mean,
                         const float *running_var, double eps);
/* dnnl_pool.c */
bool dnnl_pool16(dpt_ctx *ctx, const dpt_pool_shape *ps, bool max);
size_t dnnl_maxpool_ws_bytes(dpt_ctx *ctx, const dpt_pool_shape *ps);
void dnnl_maxpool_fwd(dpt_ctx *ctx, const dpt_pool_shape *s, const float *x, float *y, void *ws);
void dnnl_maxpool_bwd(dpt_ctx *ctx, const dpt_pool_shape *s, const float *dy, const void *ws, float *dx,
                      bool dx_accumulate);
void dnnl_avgpool_fwd(dpt_ctx *ctx, const dpt_pool_shape *s, const float *x, float *y);
void dnnl_avgpool_bwd(dpt_ctx *ctx, const dpt_pool_shape *s, const float *dy, float *dx, bool dx_accumulate);
/* dnnl_gemm.c */
double dnnl_bf16_speedup(dpt_ctx *ctx);
void cpu_onednn_gemm(dpt_ctx *ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
               int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
/* dnnl_attention.c: the backend's attention; bf16 products under precision = bf16, else the
 * fp32 kernel's */
void dnnl_attention_fwd(dpt_ctx *ctx, const float *qkv, int64_t B, int64_t T, int64_t H, int64_t hs, bool causal,
                        float *y, float *lse);
void dnnl_attention_bwd(dpt_ctx *ctx, const float *qkv, const float *y, const float *dy, const float *lse, int64_t B,
                        int64_t T, int64_t H, int64_t hs, bool causal, float *scratch, float *dqkv, bool accumulate);

#endif
