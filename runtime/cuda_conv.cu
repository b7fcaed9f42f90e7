/* cuda_conv.cu: convolutions on cuDNN: descriptors and algorithms chosen once per shape
 * (heuristics, or measured with [train] cudnn_benchmark) and cached, workspace from the
 * caching allocator, bias on our own kernels.
 * [train] precision = bf16 (fp16): cuDNN's BFLOAT16 (PSEUDO_HALF) configuration: every tensor
 * in 16 bits, fp32 accumulation, tensor-core algorithms admitted. x, w and dy are rounded
 * (nearest even) into buffers of their own, cuDNN writes y, dx and dw in 16 bits, and they
 * are widened into the fp32 tensors (dx and dw added where they accumulate). Activations and
 * gradients stay fp32 between layers on CUDA (cuDNN's batch norm takes no bf16). fp16 needs
 * [train] loss_scale = dynamic (the config refuses it without).
 * [train] memory_format = nhwc: x, y (and dx, dy) channels-last and the filter packed into
 * (K, R, S, C) per call (with the 16-bit rounding when there is one), cuDNN's weight gradient
 * unpacked and added into the (K, C, R, S) one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda_internal.h"

static const char *conv_shape_str(const dpt_conv_shape *sh)
{
    static __thread char buf[160];
    snprintf(buf, sizeof buf,
             "x %lldx%lldx%lldx%lld, w %lldx%lldx%lldx%lld, stride %lld, pad %lld, groups %lld",
             (long long)sh->n, (long long)sh->c_in, (long long)sh->h, (long long)sh->w, (long long)sh->c_out,
             (long long)(sh->c_in / sh->groups), (long long)sh->kh, (long long)sh->kw,
             (long long)sh->stride_h, (long long)sh->pad_h, (long long)sh->groups);
    return buf;
}

static cudnnConvolutionDescriptor_t conv_descriptor(const dpt_conv_shape *sh)
{
    /* the compute type is fp32 in both precisions (bf16: accumulate in fp32) */
    cudnnConvolutionDescriptor_t d;
    CHECK_CUDNN(cudnnCreateConvolutionDescriptor(&d));
    CHECK_CUDNN(cudnnSetConvolution2dDescriptor(d, (int)sh->pad_h, (int)sh->pad_w, (int)sh->stride_h,
                                                (int)sh->stride_w, (int)sh->dil_h, (int)sh->dil_w,
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CHECK_CUDNN(cudnnSetConvolutionGroupCount(d, (int)sh->groups));
    return d;
}

/* The algorithms cuDNN proposes for one direction come ranked (heuristics, or measured times
 * with [train] cudnn_benchmark). Walk them in order: skip what failed or is not supported;
 * set the descriptor to the candidate's own math type (FP32 only, unless TF32 is allowed or
 * `relaxed`, the fallback below; with 16-bit operands the tensor-core candidates before any
 * other, which cuDNN may rank first and which run the 16-bit data on FMA units many times
 * slower than the FP32 path); size its workspace for exactly that pair, and go on to the
 * next candidate when cuDNN calls the pair NOT_SUPPORTED or BAD_PARAM there; take the first
 * that fits, or leave `found` false. */
#define PICK_ALGORITHM(perf, got, desc, workspace_call, chosen, bytes, found)                                \
    do {                                                                                                     \
        (found) = false;                                                                                     \
        picked = -1;                                                                                         \
        /* 16 bits: a tensor-core candidate first (pass 0), any other only when none fits */              \
        for (int pass_ = 0; pass_ < (p->h16 ? 2 : 1) && !(found); pass_++)                                  \
            for (int i_ = 0; i_ < (got) && !(found); i_++) {                                                 \
                if ((perf)[i_].status != CUDNN_STATUS_SUCCESS) continue;                                     \
                if (ctx->deterministic && (perf)[i_].determinism != CUDNN_DETERMINISTIC) continue;           \
                cudnnMathType_t m_ = (perf)[i_].mathType;                                                    \
                bool tc_ = m_ == CUDNN_TENSOR_OP_MATH || m_ == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;        \
                if (p->h16 && pass_ == 0 && !tc_) continue;                                                  \
                bool any_ = ctx->tf32 || p->h16 || relaxed; /* 16-bit inputs: tensor cores are the point */\
                if (!any_ && m_ != CUDNN_FMA_MATH && m_ != CUDNN_DEFAULT_MATH) continue;                     \
                if (cudnnSetConvolutionMathType((desc), any_ ? m_ : CUDNN_FMA_MATH) != CUDNN_STATUS_SUCCESS) \
                    continue;                                                                                \
                size_t b_ = 0;                                                                               \
                cudnnStatus_t st_ = (workspace_call);                                                        \
                if (st_ == CUDNN_STATUS_NOT_SUPPORTED || st_ == CUDNN_STATUS_BAD_PARAM) continue;            \
                CHECK_CUDNN(st_);                                                                            \
                if (b_ > ((size_t)1 << 30)) continue; /* more than 1 GiB of workspace: the next one */       \
                (chosen) = (perf)[i_].algo, (bytes) = b_, (found) = true, picked = i_;                       \
            }                                                                                                \
        if (log_plans && picked >= 0)                                                                        \
            fprintf(stderr, "cudnn plan: %s | %s: algo %d, rank %d of %d, math %d, %.1f MiB, %s %.3f ms\n",   \
                    conv_shape_str(&p->shape), #chosen + 3, (int)(perf)[picked].algo, picked, got,           \
                    (int)(perf)[picked].mathType, (double)(bytes) / 1048576.0,                              \
                    ctx->cudnn_benchmark ? "measured" : "heuristic", (double)(perf)[picked].time);           \
    } while (0)

/* The algorithms of the three directions for plan p's descriptors; false when one direction has
 * none (then the caller may relax the math, or change the layout). */
static bool choose_algorithms(dpt_ctx *ctx, conv_plan *p, bool relaxed, const char **failed);

static conv_plan *new_plan(dpt_ctx *ctx, const dpt_conv_shape *sh)
{
    cuda_state *s = state_of(ctx);
    if (s->nplans == s->cap_plans) {
        s->cap_plans = s->cap_plans ? 2 * s->cap_plans : 32;
        s->plans = (conv_plan *)realloc(s->plans, (size_t)s->cap_plans * sizeof *s->plans);
        if (!s->plans) dpt_fatal("out of host memory for convolution plans");
    }
    conv_plan *p = &s->plans[s->nplans++];
    memset(p, 0, sizeof *p);
    p->shape = *sh;
    p->bf16 = ctx->precision == DPT_PRECISION_BF16;
    p->h16 = p->bf16 || ctx->precision == DPT_PRECISION_FP16;
    cudnnDataType_t dt = !p->h16 ? CUDNN_DATA_FLOAT : p->bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
    /* [train] memory_format = nhwc: x arrives in y's layout (cuda_conv2d_io), and x, y and
     * the filter are all channels-last, the format cuDNN's tensor-core kernels are fastest in
     * (PyTorch's channels_last gives cuDNN the same three); a shape cuDNN has no NHWC algorithm
     * for runs NCHW (out_layout) */
    p->nhwc = sh->x_layout == DPT_LAYOUT_NHWC;
    cudnnTensorFormat_t fmt = p->nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    CHECK_CUDNN(cudnnCreateTensorDescriptor(&p->x));
    CHECK_CUDNN(cudnnCreateTensorDescriptor(&p->y));
    CHECK_CUDNN(cudnnCreateFilterDescriptor(&p->w));
    CHECK_CUDNN(cudnnSetTensor4dDescriptor(p->x, fmt, dt, (int)sh->n, (int)sh->c_in, (int)sh->h, (int)sh->w));
    CHECK_CUDNN(
        cudnnSetTensor4dDescriptor(p->y, fmt, dt, (int)sh->n, (int)sh->c_out, (int)sh->oh, (int)sh->ow));
    CHECK_CUDNN(cudnnSetFilter4dDescriptor(p->w, dt, fmt, (int)sh->c_out, (int)(sh->c_in / sh->groups),
                                           (int)sh->kh, (int)sh->kw));
    p->conv_fwd = conv_descriptor(sh), p->conv_bwd_data = conv_descriptor(sh),
    p->conv_bwd_filter = conv_descriptor(sh);
    return p;
}

/* The plan of a shape, made once: exact FP32 algorithms first; when a direction has none (some
 * shapes in cuDNN 9: channels-last FP32 with one input channel, grouped channels-last), any math
 * cuDNN offers (TF32 possible), with a warning naming the shape once. p->usable is false when
 * even that finds nothing (the caller changes the layout or stops with a message). */
static conv_plan *plan_for(dpt_ctx *ctx, const dpt_conv_shape *sh)
{
    cuda_state *s = state_of(ctx);
    for (int i = 0; i < s->nplans; i++)
        if (memcmp(&s->plans[i].shape, sh, sizeof *sh) == 0) return &s->plans[i];
    conv_plan *p = new_plan(ctx, sh);
    const char *failed = NULL;
    p->usable = choose_algorithms(ctx, p, false, &failed);
    if (!p->usable && !ctx->tf32 && !p->h16) {
        p->usable = choose_algorithms(ctx, p, true, &failed);
        if (p->usable)
            fprintf(stderr, "warning: cuDNN has no exact-FP32 %s algorithm for convolution %s: this shape runs "
                            "with cuDNN's default math (TF32 tensor cores possible, ~1e-3 relative)\n",
                    failed, conv_shape_str(sh));
    }
    if (!p->usable) p->failed = failed;
    return p;
}

/* The plan of a shape that must run: a clear stop when cuDNN has no algorithm for it. */
static conv_plan *plan_to_run(dpt_ctx *ctx, const dpt_conv_shape *sh)
{
    conv_plan *p = plan_for(ctx, sh);
    if (!p->usable)
        dpt_abort_job("cuDNN offers no usable %s algorithm for convolution %s%s\nHINT: %s", p->failed, conv_shape_str(sh),
                      ctx->deterministic ? " among its deterministic ones" : "",
                      ctx->deterministic ? "set [train] deterministic = false for this model"
                                         : "report the shape; [train] device = cpu runs it on oneDNN");
    return p;
}

static bool choose_algorithms(dpt_ctx *ctx, conv_plan *p, bool relaxed, const char **failed)
{
    cuda_state *s = state_of(ctx);
    /* Ranking: heuristics by default (a function of the shape and the GPU, so a resumed run
     * picks the same algorithms); measured once per shape with [train] cudnn_benchmark, as
     * PyTorch's benchmark mode (faster, but the choice may differ between runs). Exact FP32
     * by default, to compare with the CPU backend; [train] tf32 admits TF32 tensor cores.
     * [train] deterministic admits only algorithms cuDNN calls deterministic (the same bits
     * on every run; torch.backends.cudnn.deterministic). */
    enum { MAX_ALGOS = 16 };
    int got = 0;
    size_t bytes_fwd = 0, bytes_bd = 0, bytes_bf = 0;
    cudnnConvolutionFwdAlgoPerf_t f[MAX_ALGOS];
    cudnnConvolutionBwdDataAlgoPerf_t d[MAX_ALGOS];
    cudnnConvolutionBwdFilterAlgoPerf_t w[MAX_ALGOS];
    /* DPT_CUDNN_LOG=1: each shape's three choices on stderr (algorithm, rank, math type,
     * workspace; the measured time with cudnn_benchmark) */
    static int log_plans = -1;
    if (log_plans < 0) log_plans = getenv("DPT_CUDNN_LOG") != NULL;
    int picked;
    for (int k = 0; k < 3; k++) /* heuristics and Find look at the descriptor's math type */
        CHECK_CUDNN(cudnnSetConvolutionMathType(k == 0   ? p->conv_fwd
                                                : k == 1 ? p->conv_bwd_data
                                                         : p->conv_bwd_filter,
                                                p->h16                      ? CUDNN_TENSOR_OP_MATH
                                                : ctx->tf32 || relaxed ? CUDNN_DEFAULT_MATH
                                                                       : CUDNN_FMA_MATH));
    if (ctx->cudnn_benchmark)
        CHECK_CUDNN(
            cudnnFindConvolutionForwardAlgorithm(s->dnn, p->x, p->w, p->conv_fwd, p->y, MAX_ALGOS, &got, f));
    else
        CHECK_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(s->dnn, p->x, p->w, p->conv_fwd, p->y, MAX_ALGOS,
                                                           &got, f));
    bool found;
    PICK_ALGORITHM(
        f, got, p->conv_fwd,
        cudnnGetConvolutionForwardWorkspaceSize(s->dnn, p->x, p->w, p->conv_fwd, p->y, f[i_].algo, &b_),
        p->fwd, bytes_fwd, found);
    if (!found) return *failed = "forward", false; /* (a comma: the reason, then the result) */
    if (ctx->cudnn_benchmark)
        CHECK_CUDNN(cudnnFindConvolutionBackwardDataAlgorithm(s->dnn, p->w, p->y, p->conv_bwd_data, p->x,
                                                              MAX_ALGOS, &got, d));
    else
        CHECK_CUDNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(s->dnn, p->w, p->y, p->conv_bwd_data, p->x,
                                                                MAX_ALGOS, &got, d));
    PICK_ALGORITHM(d, got, p->conv_bwd_data,
                   cudnnGetConvolutionBackwardDataWorkspaceSize(s->dnn, p->w, p->y, p->conv_bwd_data, p->x,
                                                                d[i_].algo, &b_),
                   p->bwd_data, bytes_bd, found);
    if (!found) return *failed = "backward-data", false;
    if (ctx->cudnn_benchmark)
        CHECK_CUDNN(cudnnFindConvolutionBackwardFilterAlgorithm(s->dnn, p->x, p->y, p->conv_bwd_filter, p->w,
                                                                MAX_ALGOS, &got, w));
    else
        CHECK_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(s->dnn, p->x, p->y, p->conv_bwd_filter,
                                                                  p->w, MAX_ALGOS, &got, w));
    PICK_ALGORITHM(w, got, p->conv_bwd_filter,
                   cudnnGetConvolutionBackwardFilterWorkspaceSize(s->dnn, p->x, p->y, p->conv_bwd_filter,
                                                                  p->w, w[i_].algo, &b_),
                   p->bwd_filter, bytes_bf, found);
    if (!found) return *failed = "backward-filter", false;
    p->workspace = bytes_fwd > bytes_bd ? bytes_fwd : bytes_bd;
    if (bytes_bf > p->workspace) p->workspace = bytes_bf;
    return true;
}

/* The bias over (n, c, hw) activations in NCHW or NHWC (channel innermost). */
__global__ void channel_bias_kernel(float *y, const float *b, int64_t n, int64_t c, int64_t hw, bool nhwc)
{
    GRID_STRIDE(i, n * c * hw) y[i] += b[nhwc ? i % c : (i / hw) % c];
}

/* NCHW: one block per channel (its n runs of hw are contiguous). */
__global__ void channel_sum_kernel(const float *dy, float *db, int64_t n, int64_t c, int64_t hw)
{
    int64_t ch = blockIdx.x;
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < n * hw; i += blockDim.x)
        acc += dy[(i / hw * c + ch) * hw + i % hw];
    double total = block_total(acc);
    if (threadIdx.x == 0) db[ch] += (float)total;
}

/* NHWC, coalesced: a block's 32 x 8 threads take 32 neighbouring channels (a warp reads one row's
 * 32 consecutive floats) and every 8th row of its slice of rows; each column's 8 sums are added
 * in order into partials[slice][channel], which channel_sum_total adds in slice order: a fixed
 * order (the same bits run to run) whatever the launch. */
#define CS_COLS 32
#define CS_ROWS 8
__global__ void channel_sum_nhwc_kernel(const float *dy, double *partials, int64_t rows, int64_t c, int64_t per)
{
    __shared__ double part[CS_ROWS][CS_COLS];
    int64_t ch = blockIdx.x * CS_COLS + threadIdx.x, r0 = blockIdx.y * per, r1 = r0 + per < rows ? r0 + per : rows;
    double acc = 0.0;
    if (ch < c)
        for (int64_t r = r0 + threadIdx.y; r < r1; r += CS_ROWS)
            acc += dy[r * c + ch];
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && ch < c) {
        double t = 0.0;
        for (int k = 0; k < CS_ROWS; k++)
            t += part[k][threadIdx.x];
        partials[blockIdx.y * c + ch] = t;
    }
}

__global__ void channel_sum_total_kernel(const double *partials, float *db, int64_t c, int64_t slices)
{
    GRID_STRIDE(ch, c)
    {
        double t = 0.0;
        for (int64_t k = 0; k < slices; k++)
            t += partials[k * c + ch];
        db[ch] += (float)t;
    }
}

/* db[ch] += the sum of dy over every position of channel ch */
static void channel_sum(dpt_ctx *ctx, const float *dy, float *db, int64_t n, int64_t c, int64_t hw, bool nhwc)
{
    if (!nhwc) {
        channel_sum_kernel<<<(unsigned)c, THREADS, 0, stream_of(ctx)>>>(dy, db, n, c, hw);
        CHECK_LAUNCH();
        return;
    }
    int64_t rows = n * hw, per = 1024, slices = CEIL_DIV(rows, per);
    if (slices > 65535) per = CEIL_DIV(rows, 65535), slices = CEIL_DIV(rows, per);
    double *partials = cuda_scratch_doubles(ctx, (size_t)(slices * c));
    dim3 grid((unsigned)CEIL_DIV(c, (int64_t)CS_COLS), (unsigned)slices), block(CS_COLS, CS_ROWS);
    channel_sum_nhwc_kernel<<<grid, block, 0, stream_of(ctx)>>>(dy, partials, rows, c, per);
    CHECK_LAUNCH();
    channel_sum_total_kernel<<<blocks_for(c), THREADS, 0, stream_of(ctx)>>>(partials, db, c, slices);
    CHECK_LAUNCH();
}

/* ---------------------------------------------------------------- bf16 operands */

__global__ void widen_kernel(float *dst, const uint16_t *src, int64_t n, bool bf16, bool accumulate)
{
    GRID_STRIDE(i, n)
    {
        float v = bf16 ? __bfloat162float(__ushort_as_bfloat16(src[i])) : __half2float(__ushort_as_half(src[i]));
        dst[i] = accumulate ? dst[i] + v : v;
    }
}

/* The filter (K, C, R, S) fp32 as cuDNN reads it: (K, R, S, C) with NHWC, in 16 bits with h16
 * (rounded to nearest even), else fp32. One thread per source element. */
__global__ void pack_filter_kernel(const float *w, void *dst, int64_t k, int64_t c, int64_t rs, bool nhwc, bool h16,
                                   bool bf16)
{
    GRID_STRIDE(i, k * c * rs)
    {
        int64_t p = i % rs, ch = (i / rs) % c, o = i / (c * rs), j = nhwc ? (o * rs + p) * c + ch : i;
        if (!h16)
            ((float *)dst)[j] = w[i];
        else
            ((uint16_t *)dst)[j] = bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(w[i]))
                                        : __half_as_ushort(__float2half_rn(w[i]));
    }
}

/* dw (K, C, R, S) fp32 += what cuDNN wrote in the packed form above. */
__global__ void unpack_filter_kernel(const void *src, float *dw, int64_t k, int64_t c, int64_t rs, bool nhwc, bool h16,
                                     bool bf16)
{
    GRID_STRIDE(i, k * c * rs)
    {
        int64_t p = i % rs, ch = (i / rs) % c, o = i / (c * rs), j = nhwc ? (o * rs + p) * c + ch : i;
        float v = !h16  ? ((const float *)src)[j]
                  : bf16 ? __bfloat162float(__ushort_as_bfloat16(((const uint16_t *)src)[j]))
                         : __half2float(__ushort_as_half(((const uint16_t *)src)[j]));
        dw[i] += v;
    }
}

static int64_t x_count(const dpt_conv_shape *sh)
{
    return sh->n * sh->c_in * sh->h * sh->w;
}
static int64_t y_count(const dpt_conv_shape *sh)
{
    return sh->n * sh->c_out * sh->oh * sh->ow;
}
static int64_t w_count(const dpt_conv_shape *sh)
{
    return sh->c_out * (sh->c_in / sh->groups) * sh->kh * sh->kw;
}

/* A 16-bit buffer of n elements. */
static cuda_block h16_buffer(dpt_ctx *ctx, int64_t n)
{
    return cuda_block_get(ctx, (size_t)n * sizeof(uint16_t), "a 16-bit convolution operand");
}

/* src rounded to the plan's 16 bits into a new buffer. */
static cuda_block rounded(dpt_ctx *ctx, const conv_plan *p, const float *src, int64_t n)
{
    return cuda_rounded16(ctx, src, n, p->bf16, "a 16-bit convolution operand");
}

static void widen_into(dpt_ctx *ctx, const conv_plan *p, float *dst, const cuda_block *b, int64_t n,
                       bool accumulate)
{
    LAUNCH(widen_kernel, n, dst, (const uint16_t *)b->ptr, n, p->bf16, accumulate);
}

/* Whether cuDNN reads the filter from a buffer of its own (16 bits, or (K, R, S, C)). */
static bool filter_packed(const conv_plan *p)
{
    return p->h16 || p->nhwc;
}

static cuda_block filter_buffer(dpt_ctx *ctx, const conv_plan *p)
{
    return cuda_block_get(ctx, (size_t)w_count(&p->shape) * (p->h16 ? sizeof(uint16_t) : sizeof(float)),
                          "a convolution filter in cuDNN's layout");
}

/* w as cuDNN reads it (filter_packed: a new buffer; else w itself, granted 0). */
static cuda_block filter_in(dpt_ctx *ctx, const conv_plan *p, const float *w)
{
    const dpt_conv_shape *sh = &p->shape;
    if (!filter_packed(p)) return cuda_block{(void *)w, 0};
    cuda_block b = filter_buffer(ctx, p);
    LAUNCH(pack_filter_kernel, w_count(sh), w, b.ptr, sh->c_out, sh->c_in / sh->groups, sh->kh * sh->kw, p->nhwc,
           p->h16, p->bf16);
    return b;
}

static void filter_out(dpt_ctx *ctx, const conv_plan *p, const cuda_block *b, float *dw)
{
    const dpt_conv_shape *sh = &p->shape;
    LAUNCH(unpack_filter_kernel, w_count(sh), b->ptr, dw, sh->c_out, sh->c_in / sh->groups, sh->kh * sh->kw,
           p->nhwc, p->h16, p->bf16);
}

static void cuda_conv2d_fwd(dpt_ctx *ctx, const dpt_conv_shape *sh, const float *x, const float *w,
                            const float *bias, float *y)
{
    conv_plan *p = plan_to_run(ctx, sh);
    cuda_block ws = cuda_block_get(ctx, p->workspace, "cuDNN convolution workspace");
    float one = 1.0f, zero = 0.0f;
    cuda_block wp = filter_in(ctx, p, w);
    if (p->h16) {
        cuda_block x16 = rounded(ctx, p, x, x_count(sh)), y16 = h16_buffer(ctx, y_count(sh));
        CHECK_CUDNN(cudnnConvolutionForward(state_of(ctx)->dnn, &one, p->x, x16.ptr, p->w, wp.ptr, p->conv_fwd,
                                            p->fwd, ws.ptr, p->workspace, &zero, p->y, y16.ptr));
        widen_into(ctx, p, y, &y16, y_count(sh), false);
        cuda_block_put(ctx, y16), cuda_block_put(ctx, x16);
    } else {
        CHECK_CUDNN(cudnnConvolutionForward(state_of(ctx)->dnn, &one, p->x, x, p->w, wp.ptr, p->conv_fwd, p->fwd,
                                            ws.ptr, p->workspace, &zero, p->y, y));
    }
    cuda_block_put(ctx, wp);
    if (bias)
        LAUNCH(channel_bias_kernel, sh->n * sh->c_out * sh->oh * sh->ow, y, bias, sh->n, sh->c_out,
               sh->oh * sh->ow, p->nhwc);
    cuda_block_put(ctx, ws);
}

static void cuda_conv2d_bwd(dpt_ctx *ctx, const dpt_conv_shape *sh, const float *x, const float *w,
                            const float *dy, float *dx, bool dx_accumulate, float *dw, float *dbias)
{
    conv_plan *p = plan_to_run(ctx, sh);
    cuda_block ws = cuda_block_get(ctx, p->workspace, "cuDNN convolution workspace");
    /* fp32 in cuDNN's own layouts: beta = 1, the weight gradient accumulates; the data gradient
     * too, unless this is its first writer (beta = 0: no zero fill before, no read of it).
     * 16 bits (or a packed filter): cuDNN writes into buffers (beta 0), widened/unpacked and
     * added here. */
    float one = 1.0f, zero = 0.0f, data_beta = dx_accumulate ? 1.0f : 0.0f;
    cuda_block dy16 = p->h16 ? rounded(ctx, p, dy, y_count(sh)) : cuda_block{(void *)dy, 0};
    if (dx) {
        cuda_block wp = filter_in(ctx, p, w);
        if (p->h16) {
            cuda_block dx16 = h16_buffer(ctx, x_count(sh));
            CHECK_CUDNN(cudnnConvolutionBackwardData(state_of(ctx)->dnn, &one, p->w, wp.ptr, p->y, dy16.ptr,
                                                     p->conv_bwd_data, p->bwd_data, ws.ptr, p->workspace, &zero,
                                                     p->x, dx16.ptr));
            widen_into(ctx, p, dx, &dx16, x_count(sh), dx_accumulate);
            cuda_block_put(ctx, dx16);
        } else {
            CHECK_CUDNN(cudnnConvolutionBackwardData(state_of(ctx)->dnn, &one, p->w, wp.ptr, p->y, dy,
                                                     p->conv_bwd_data, p->bwd_data, ws.ptr, p->workspace,
                                                     &data_beta, p->x, dx));
        }
        cuda_block_put(ctx, wp);
    }
    if (dw) {
        cuda_block x16 = p->h16 ? rounded(ctx, p, x, x_count(sh)) : cuda_block{(void *)x, 0};
        if (filter_packed(p)) {
            cuda_block dwp = filter_buffer(ctx, p);
            CHECK_CUDNN(cudnnConvolutionBackwardFilter(state_of(ctx)->dnn, &one, p->x, x16.ptr, p->y, dy16.ptr,
                                                       p->conv_bwd_filter, p->bwd_filter, ws.ptr, p->workspace,
                                                       &zero, p->w, dwp.ptr));
            filter_out(ctx, p, &dwp, dw);
            cuda_block_put(ctx, dwp);
        } else {
            CHECK_CUDNN(cudnnConvolutionBackwardFilter(state_of(ctx)->dnn, &one, p->x, x, p->y, dy,
                                                       p->conv_bwd_filter, p->bwd_filter, ws.ptr, p->workspace,
                                                       &one, p->w, dw));
        }
        cuda_block_put(ctx, x16); /* granted 0 (x itself): nothing */
    }
    cuda_block_put(ctx, dy16);
    if (dbias) channel_sum(ctx, dy, dbias, sh->n, sh->c_out, sh->oh * sh->ow, p->nhwc); /* from the fp32 dy */
    cuda_block_put(ctx, ws);
}

/* [train] memory_format = nhwc: y (and so dy) channels-last; x converted to it by the layer.
 * A shape cuDNN has no channels-last algorithm for (with any math) runs NCHW instead: the
 * layer converts x to NCHW, and what follows takes y as it comes (a warning says so once). */
static dpt_layout out_layout(dpt_ctx *ctx, const dpt_conv_shape *sh)
{
    if (!ctx->nhwc) return DPT_LAYOUT_NCHW;
    dpt_conv_shape nhwc = *sh;
    nhwc.x_layout = DPT_LAYOUT_NHWC;
    conv_plan *p = plan_for(ctx, &nhwc);
    if (p->usable) return DPT_LAYOUT_NHWC;
    if (!p->warned)
        fprintf(stderr, "warning: cuDNN has no channels-last %s algorithm for convolution %s: this shape runs in "
                        "NCHW through a relayout\n",
                p->failed, conv_shape_str(sh));
    p->warned = true;
    return DPT_LAYOUT_NCHW;
}

/* cuDNN takes x, w and y in one format: x arrives in y's layout, F32 (16-bit operands are
 * rounded into buffers of the convolution's own), and y is F32. */
static void cuda_conv2d_io(dpt_ctx *ctx, const dpt_conv_shape *sh, dpt_conv_io *io)
{
    dpt_layout layout = out_layout(ctx, sh);
    *io = (dpt_conv_io){.x_layout = layout, .x_f32 = true, .y_layout = layout, .y_dtype = DPT_F32};
}

void cuda_conv_entries(dpt_backend *be)
{
    be->conv2d_fwd = cuda_conv2d_fwd;
    be->conv2d_bwd = cuda_conv2d_bwd;
    be->conv2d_io = cuda_conv2d_io;
    be->channels_last = true;
}

void cuda_conv_release(cuda_state *s)
{
    for (int i = 0; i < s->nplans; i++) {
        cudnnDestroyTensorDescriptor(s->plans[i].x);
        cudnnDestroyTensorDescriptor(s->plans[i].y);
        cudnnDestroyFilterDescriptor(s->plans[i].w);
        cudnnDestroyConvolutionDescriptor(s->plans[i].conv_fwd);
        cudnnDestroyConvolutionDescriptor(s->plans[i].conv_bwd_data);
        cudnnDestroyConvolutionDescriptor(s->plans[i].conv_bwd_filter);
    }
    free(s->plans);
    s->plans = NULL, s->nplans = s->cap_plans = 0;
}
