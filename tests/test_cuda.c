/* test_cuda.c: every CUDA op and layer against the CPU one on the same random inputs
 * (forward values and input/parameter gradients), a few training steps on both, the
 * loader's pinned/copy-stream path, and NCCL under the DDP engine. Skips with "skipped: no
 * GPU" when no CUDA device is visible (and in builds without CUDA).
 * Tolerances: relative 1e-4 for elementwise ops and reductions, 1e-3 for GEMM-based ops
 * (different summation order, no TF32), 1e-3 for convolutions (cuDNN algorithms), 1e-4 for
 * batch norm (cuDNN) and pooling, 1e-3 for 4 SGD/AdamW steps of an MLP, 2e-3 for 4 SGD
 * steps of a CNN and a ResNet-8; bit-identical for the loader and for DDP over a one-rank
 * NCCL communicator (an average over one rank changes nothing); 1e-5 for DataParallel over
 * two GPUs against one GPU with the whole batch. */
#include "tests/testutil.h"
#include "data/data.h"
#include "data/folder.h"
#include "data/image.h"
#include <sys/stat.h>
#include "tests/ddp_common.h"
#include "runtime/half.h"
#include <signal.h>

/* Built a second time as test_cuda_harness with the CPU standing in for the GPU: CI checks
 * that every test here runs and passes CPU against CPU, so a GPU session tests the GPU code
 * and not this file. */
#ifdef DPT_TEST_HARNESS_ON_CPU
#define GPU DPT_DEVICE_CPU
#define GPUS_VISIBLE() 2
#else
#define GPU DPT_DEVICE_CUDA
#define GPUS_VISIBLE() dpt_device_count(DPT_DEVICE_CUDA)
#endif

#define NEED_GPU()                                                                                           \
    do {                                                                                                     \
        if (GPUS_VISIBLE() == 0) {                                                                           \
            print_message("skipped: no GPU\n");                                                              \
            skip();                                                                                          \
        }                                                                                                    \
    } while (0)

static dpt_ctx *make_with(dpt_device_kind kind, dpt_precision precision, bool channels_last)
{
    dpt_error err;
    dpt_ctx_options o = {
        .device = {kind, 0}, .threads = 1, .seed = 7, .precision = precision, .channels_last = channels_last};
    dpt_ctx *ctx = dpt_ctx_new(&o, &err);
#ifdef DPT_TEST_HARNESS_ON_CPU
    if (!ctx && channels_last) { /* a build without oneDNN (the GPU image's): the CPU standing in has no NHWC */
        print_message("skipped: the CPU standing in for the GPU has no channels-last kernels in this build: %s\n",
                      err.msg);
        skip();
    }
#endif
    if (!ctx) fail_msg("%s", err.msg);
    return ctx;
}

/* The "GPU" context of a 16-bit test. A real GPU always takes one; the harness's stand-in CPU
 * cannot without oneDNN (the GPU image's build has none), so the test skips there, saying why. */
static dpt_ctx *make_gpu16(dpt_precision precision, bool channels_last)
{
    dpt_error err;
    dpt_ctx_options o = {.device = {GPU, 0}, .threads = 1, .seed = 7, .precision = precision,
                         .channels_last = channels_last};
    dpt_ctx *ctx = dpt_ctx_new(&o, &err);
    if (ctx) return ctx;
    if (GPU == DPT_DEVICE_CUDA) fail_msg("%s", err.msg);
    print_message("skipped: the stand-in GPU cannot run this precision: %s\n", err.msg);
    skip();
    return NULL;
}

/* Values rounded to the 16-bit format of a precision (nearest even), in place. The 16-bit
 * tests give both devices operands that are exact in 16 bits: the GPU's roundings of its
 * inputs then change nothing, and the reference is the CPU's plain fp32 (no bf16 kernels needed:
 * the GPU image's build has no oneDNN). */
static void round_to_16(float *v, int64_t n, dpt_precision precision)
{
    if (precision == DPT_PRECISION_FP32) return;
    for (int64_t i = 0; i < n; i++)
        v[i] = dpt_f32_from_h16(dpt_h16_from_f32(v[i], precision == DPT_PRECISION_BF16), precision == DPT_PRECISION_BF16);
}

static dpt_ctx *make_in(dpt_device_kind kind, dpt_precision precision)
{
    return make_with(kind, precision, false);
}

static dpt_ctx *make(dpt_device_kind kind)
{
    return make_in(kind, DPT_PRECISION_FP32);
}

/* Skip (freeing both contexts) when the CPU reference could not take the precision asked
 * for: bf16 on a CPU without AVX512-BF16 runs fp32, and would not be the reference. */
static void skip_unless_reference(dpt_ctx *cpu, dpt_ctx *gpu, dpt_precision precision)
{
    const char *why;
    if (dpt_ctx_precision(cpu, &why) == precision) return;
    print_message("skipped: %s\n", why);
    dpt_ctx_free(cpu), dpt_ctx_free(gpu);
    skip();
}

typedef dpt_tensor *(*graph_fn)(dpt_ctx *ctx, dpt_tensor **in, int n_in, void *user);

/* Run `graph` on both devices from the same inputs, each in its precision; compare output and
 * input gradients. */
static void compare_in(const char *name, graph_fn graph, int n_in, const int64_t shapes[][3], void *user,
                       double rtol, dpt_precision cpu_precision, dpt_precision gpu_precision)
{
    dpt_ctx *cpu = make_in(DPT_DEVICE_CPU, cpu_precision), *gpu = make_in(GPU, gpu_precision);
    skip_unless_reference(cpu, gpu, cpu_precision);
    dpt_rng rng;
    dpt_rng_seed(&rng, 42);
    dpt_tensor *in_c[4], *in_g[4];
    for (int i = 0; i < n_in; i++) {
        int nd = shapes[i][2] ? 3 : shapes[i][1] ? 2 : 1;
        in_c[i] = test_input(cpu, &rng, nd, shapes[i], -2, 2);
        if (cpu_precision == DPT_PRECISION_FP32) round_to_16(in_c[i]->data, in_c[i]->numel, gpu_precision);
        in_g[i] = dpt_tensor_new(gpu, nd, shapes[i]);
        dpt_tensor_copy_from_host(in_g[i], in_c[i]->data);
        in_g[i]->requires_grad = true;
    }
    dpt_tensor *out[2] = {graph(cpu, in_c, n_in, user), graph(gpu, in_g, n_in, user)};
    int64_t n = dpt_tensor_numel(out[0]);
    float *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
    dpt_tensor_copy_to_host(out[0], a);
    dpt_tensor_copy_to_host(out[1], b);
    double *da = malloc((size_t)n * sizeof *da), *db = malloc((size_t)n * sizeof *db);
    for (int64_t j = 0; j < n; j++)
        da[j] = a[j], db[j] = b[j];
    char what[96];
    snprintf(what, sizeof what, "%s forward (cuda vs cpu)", name);
    assert_close_d(what, db, da, n, rtol, 1e-5);
    dpt_backward(cpu, dpt_sum(cpu, out[0]));
    dpt_backward(gpu, dpt_sum(gpu, out[1]));
    for (int i = 0; i < n_in; i++) {
        int64_t m = dpt_tensor_numel(in_c[i]);
        float *ga = malloc((size_t)m * sizeof *ga), *gb = malloc((size_t)m * sizeof *gb);
        dpt_tensor_copy_to_host(dpt_tensor_grad(in_c[i]), ga);
        dpt_tensor_copy_to_host(dpt_tensor_grad(in_g[i]), gb);
        double *x = malloc((size_t)m * sizeof *x), *y = malloc((size_t)m * sizeof *y);
        for (int64_t j = 0; j < m; j++)
            x[j] = ga[j], y[j] = gb[j];
        snprintf(what, sizeof what, "%s d/d(input %d) (cuda vs cpu)", name, i);
        assert_close_d(what, y, x, m, rtol, 1e-5);
        free(ga), free(gb), free(x), free(y);
    }
    dpt_tape_clear(cpu), dpt_tape_clear(gpu);
    for (int i = 0; i < n_in; i++)
        dpt_tensor_free(in_c[i]), dpt_tensor_free(in_g[i]);
    free(a), free(b), free(da), free(db);
    dpt_ctx_free(cpu), dpt_ctx_free(gpu);
}

static void compare(const char *name, graph_fn graph, int n_in, const int64_t shapes[][3], void *user,
                    double rtol)
{
    compare_in(name, graph, n_in, shapes, user, rtol, DPT_PRECISION_FP32, DPT_PRECISION_FP32);
}

static dpt_tensor *g_relu(dpt_ctx *c, dpt_tensor **in, int n, void *u)
{
    (void)n, (void)u;
    return dpt_relu(c, in[0]);
}
static dpt_tensor *g_gelu(dpt_ctx *c, dpt_tensor **in, int n, void *u)
{
    (void)n, (void)u;
    return dpt_gelu(c, in[0]);
}
static dpt_tensor *g_softmax(dpt_ctx *c, dpt_tensor **in, int n, void *u)
{
    (void)n, (void)u;
    return dpt_mul(c, dpt_softmax(c, in[0]), in[1]);
}
static dpt_tensor *g_addmul(dpt_ctx *c, dpt_tensor **in, int n, void *u)
{
    (void)n, (void)u;
    return dpt_scale(c, dpt_mul(c, dpt_add(c, in[0], in[1]), in[1]), -0.5f);
}
static dpt_tensor *g_mean(dpt_ctx *c, dpt_tensor **in, int n, void *u)
{
    (void)n, (void)u;
    return dpt_mean(c, dpt_mul(c, in[0], in[0]));
}
static dpt_tensor *g_matmul(dpt_ctx *c, dpt_tensor **in, int n, void *u)
{
    (void)n, (void)u;
    return dpt_matmul(c, dpt_transpose(c, in[0]), in[1]);
}
static dpt_tensor *g_xent(dpt_ctx *c, dpt_tensor **in, int n, void *u)
{
    (void)n;
    static const int32_t labels[16] = {0, 3, 5, 9, 1, 2, 2, 7, 8, 4, 6, 0, 1, 3, 9, 5};
    return dpt_cross_entropy(c, in[0], labels, *(float *)u);
}

static void test_elementwise(void **state)
{
    (void)state;
    NEED_GPU();
    const int64_t one[][3] = {{37, 129, 0}}, two[][3] = {{16, 10, 0}, {16, 10, 0}},
                  big[][3] = {{300, 1000, 0}, {300, 1000, 0}};
    compare("relu", g_relu, 1, one, NULL, 1e-6);
    compare("gelu", g_gelu, 1, one, NULL, 1e-4);
    compare("softmax", g_softmax, 2, two, NULL, 1e-4);
    compare("add/mul/scale", g_addmul, 2, big, NULL, 1e-5);
    compare("mean", g_mean, 1, one, NULL, 1e-4);
    float smoothing = 0.0f;
    compare("cross_entropy", g_xent, 1, two, &smoothing, 1e-4);
    smoothing = 0.1f;
    compare("cross_entropy smoothed", g_xent, 1, two, &smoothing, 1e-4);
}

static void test_gemm(void **state)
{
    (void)state;
    NEED_GPU();
    const int64_t s1[][3] = {{7, 5, 0}, {7, 3, 0}}, s2[][3] = {{129, 65, 0}, {129, 257, 0}};
    compare("matmul(A^T B) small", g_matmul, 2, s1, NULL, 1e-3);
    compare("matmul(A^T B) odd sizes", g_matmul, 2, s2, NULL, 1e-3);
}

/* [train] precision = bf16: cuBLAS's GemmEx on bf16 operands against oneDNN's bf16 matmul.
 * Both round A and B to bf16 (nearest even; the products are exact in fp32) and accumulate in
 * fp32 into an fp32 C, so they differ only by summation order (tensor-core blocks against
 * oneDNN's): 1e-3 relative, as the fp32 GEMM test. The backward products (dA = dC B^T,
 * dB = A^T dC) go through the same path; A B^T too (a linear layer's product). */
/* A 16-bit GEMM on the GPU (precision = bf16 | fp16: cuBLAS's GemmEx with fp32 accumulation)
 * against float64 of the same 16-bit operands: a product of two 16-bit numbers is exact in fp32,
 * so what differs is fp32 summation, at most gamma_K sum_k |a_k b_k| with gamma_K = K u / (1 -
 * K u), u = 2^-24, for any order (doubled: tensor cores may truncate while they add), plus the
 * rounding of the fp32 result. The gradients the same way (backward of sum(C): dC is all ones,
 * exact in 16 bits). */
static void check_gemm16(const char *name, dpt_precision precision, bool trans_a, bool trans_b, int64_t M, int64_t K,
                         int64_t N)
{
    dpt_ctx *gpu = make_gpu16(precision, false);
    dpt_rng rng;
    dpt_rng_seed(&rng, 42);
    int64_t na = M * K, nb = K * N;
    float *a = malloc((size_t)na * sizeof *a), *b = malloc((size_t)nb * sizeof *b);
    for (int64_t i = 0; i < na; i++)
        a[i] = (float)(dpt_rng_uniform(&rng) * 4.0 - 2.0);
    for (int64_t i = 0; i < nb; i++)
        b[i] = (float)(dpt_rng_uniform(&rng) * 4.0 - 2.0);
    round_to_16(a, na, precision), round_to_16(b, nb, precision);
    /* stored as given: A (M, K) or its transpose (K, M); B (K, N) or (N, K) */
    dpt_tensor *ta = dpt_tensor_new(gpu, 2, trans_a ? (int64_t[]){K, M} : (int64_t[]){M, K});
    dpt_tensor *tb = dpt_tensor_new(gpu, 2, trans_b ? (int64_t[]){N, K} : (int64_t[]){K, N});
    dpt_tensor_copy_from_host(ta, a), dpt_tensor_copy_from_host(tb, b);
    ta->requires_grad = tb->requires_grad = true;
    dpt_tensor *c = dpt_matmul(gpu, trans_a ? dpt_transpose(gpu, ta) : ta, trans_b ? dpt_transpose(gpu, tb) : tb);
    float *got = malloc((size_t)(M * N) * sizeof *got), *ga = malloc((size_t)na * sizeof *ga),
          *gb = malloc((size_t)nb * sizeof *gb);
    dpt_tensor_copy_to_host(c, got);
    dpt_backward(gpu, dpt_sum(gpu, c));
    dpt_tensor_copy_to_host(dpt_tensor_grad(ta), ga), dpt_tensor_copy_to_host(dpt_tensor_grad(tb), gb);
    const double u = ldexp(1.0, -24);
#define A_(m, k) (double)a[trans_a ? (k) * M + (m) : (m) * K + (k)]
#define B_(k, n) (double)b[trans_b ? (n) * K + (k) : (k) * N + (n)]
    int bad = 0;
    double worst = 0;
    for (int64_t m = 0; m < M; m++) /* C */
        for (int64_t n = 0; n < N; n++) {
            double ref = 0, mag = 0;
            for (int64_t k = 0; k < K; k++)
                ref += A_(m, k) * B_(k, n), mag += fabs(A_(m, k) * B_(k, n));
            double bound = 2 * K * u / (1 - K * u) * mag + 2 * u * fabs(ref), err = fabs(got[m * N + n] - ref);
            worst = fmax(worst, err / bound), bad += err > bound;
        }
    for (int64_t m = 0; m < M; m++) /* dA[m, k] = sum_n B[k, n] */
        for (int64_t k = 0; k < K; k++) {
            double ref = 0, mag = 0;
            for (int64_t n = 0; n < N; n++)
                ref += B_(k, n), mag += fabs(B_(k, n));
            double bound = 2 * N * u / (1 - N * u) * mag + 2 * u * fabs(ref);
            double err = fabs(ga[trans_a ? k * M + m : m * K + k] - ref);
            worst = fmax(worst, err / bound), bad += err > bound;
        }
    for (int64_t k = 0; k < K; k++) /* dB[k, n] = sum_m A[m, k] */
        for (int64_t n = 0; n < N; n++) {
            double ref = 0, mag = 0;
            for (int64_t m = 0; m < M; m++)
                ref += A_(m, k), mag += fabs(A_(m, k));
            double bound = 2 * M * u / (1 - M * u) * mag + 2 * u * fabs(ref);
            double err = fabs(gb[trans_b ? n * K + k : k * N + n] - ref);
            worst = fmax(worst, err / bound), bad += err > bound;
        }
#undef A_
#undef B_
    print_message("%s: worst error %.2f of its bound\n", name, worst);
    if (bad) fail_msg("%s: %d values outside gamma_K sum |a b| of float64 on the 16-bit operands", name, bad);
    dpt_tape_clear(gpu);
    dpt_tensor_free(ta), dpt_tensor_free(tb);
    free(a), free(b), free(got), free(ga), free(gb);
    dpt_ctx_free(gpu);
}

static void test_gemm_bf16(void **state)
{
    (void)state;
    NEED_GPU();
    check_gemm16("bf16 matmul(A^T B) small", DPT_PRECISION_BF16, true, false, 5, 7, 3);
    check_gemm16("bf16 matmul(A^T B) odd sizes", DPT_PRECISION_BF16, true, false, 65, 129, 257);
    check_gemm16("bf16 matmul(A B^T)", DPT_PRECISION_BF16, false, true, 33, 70, 19);
}

/* [train] precision = fp16 (CUDA only): cuBLAS's fp16 GEMM, checked as the bf16 one. */
static void test_gemm_fp16(void **state)
{
    (void)state;
    NEED_GPU();
#ifdef DPT_TEST_HARNESS_ON_CPU
    print_message("skipped: fp16 runs on cuBLAS only (the harness's stand-in GPU is a CPU)\n");
    skip();
#endif
    check_gemm16("fp16 matmul(A^T B)", DPT_PRECISION_FP16, true, false, 65, 129, 257);
    check_gemm16("fp16 matmul(A B^T)", DPT_PRECISION_FP16, false, true, 33, 70, 19);
}

/* A few optimizer steps of the same model (same seed, same data) on one device. */
static void run_model(dpt_device_kind kind, bool nhwc, const char *optim, const char *const *sets, double clip,
                      float *params_out, int64_t *n_out)
{
    dpt_error err;
    dpt_config *cfg = dpt_config_defaults();
    char set[64];
    snprintf(set, sizeof set, "optim.name=%s", optim);
    dpt_config_set(cfg, set, &err);
    for (int i = 0; sets[i]; i++)
        if (!dpt_config_set(cfg, sets[i], &err)) fail_msg("%s", err.msg);
    dpt_ctx *ctx = make_with(kind, DPT_PRECISION_FP32, nhwc);
    dpt_model *m = dpt_model_build(ctx, cfg, 1, 8, 8, 10, &err);
    dpt_optim *o = dpt_optim_build(m, cfg, &err);
    dpt_dataset *ds = dpt_synthetic_new(64, 1, 8, 8, 10, 3);
    dpt_loader_options lo = {.batch = 16, .world_size = 1, .mean = 0.5f, .std = 0.25f};
    dpt_loader *l = dpt_loader_new(ctx, ds, &lo);
    dpt_batch b;
    for (int s = 0; s < 4 && dpt_loader_next(l, &b); s++) {
        dpt_backward(ctx, dpt_cross_entropy(ctx, dpt_model_forward(m, ctx, b.x), b.labels, 0.0f));
        if (clip > 0) dpt_clip_grad_norm(ctx, m, clip); /* the norm's and the scaling's list kernels */
        dpt_optim_step(ctx, o);
        dpt_model_zero_grad(m);
        dpt_tape_clear(ctx);
    }
    int64_t off = 0;
    for (int i = 0; i < dpt_model_num_params(m); i++) {
        dpt_tensor_copy_to_host(dpt_model_param_at(m, i), params_out + off);
        off += dpt_tensor_numel(dpt_model_param_at(m, i));
    }
    *n_out = off;
    dpt_loader_free(l);
    dpt_dataset_free(ds);
    dpt_optim_free(o);
    dpt_model_free(m);
    dpt_ctx_free(ctx);
    dpt_config_free(cfg);
}

static void test_training_steps(void **state)
{
    (void)state;
    NEED_GPU();
    static float a[8000], b[8000];
    static double da[8000], db[8000];
    /* sgd, adamw, and sgd with the gradients clipped to a norm of 0.05 (the MLP's are about
     * 0.6: every step scales them, one multi-tensor launch on a GPU, as zero_grad's zeros are) */
    for (int k = 0; k < 3; k++) {
        const char *optim = k == 1 ? "adamw" : "sgd";
        double clip = k == 2 ? 0.05 : 0.0;
        int64_t n;
        const char *mlp[] = {"model.hidden=64,32", NULL};
        run_model(DPT_DEVICE_CPU, false, optim, mlp, clip, a, &n);
        run_model(GPU, false, optim, mlp, clip, b, &n);
        for (int64_t i = 0; i < n; i++)
            da[i] = a[i], db[i] = b[i];
        assert_close_d(k == 2 ? "sgd, clipped" : optim, db, da, n, 1e-3, 1e-4);
    }
}

/* conv2d (cuDNN), batch norm, max/global pooling, residual adds: a CNN and a ResNet-8, each
 * also with [train] memory_format = nhwc on the GPU (against the CPU's NCHW). */
static void test_conv_models(void **state)
{
    (void)state;
    NEED_GPU();
    static float a[40000], b[40000];
    static double da[40000], db[40000];
    const char *cnn[] = {"model.name=cnn", "model.channels=4,8", "model.fc=16", "model.dropout=0", NULL};
    const char *r8[] = {"model.name=resnet", "model.depth=8", "model.width=4", NULL};
    const char *const *models[] = {cnn, r8};
    for (int k = 0; k < 4; k++) {
        int64_t n;
        run_model(DPT_DEVICE_CPU, false, "sgd", models[k % 2], 0.0, a, &n);
        run_model(GPU, k >= 2, "sgd", models[k % 2], 0.0, b, &n);
        assert_true(n <= 40000);
        for (int64_t i = 0; i < n; i++)
            da[i] = a[i], db[i] = b[i];
        char what[96];
        snprintf(what, sizeof what, "%s%s", models[k % 2][0], k >= 2 ? " (GPU channels-last)" : "");
        assert_close_d(what, db, da, n, 2e-3, 1e-4);
    }
}

/* ---------------------------------------------------------------- layers with parameters */

typedef struct layer_case {
    const char *name;
    int64_t n, c, h, w;
    char kind; /* 'c' conv2d, 't' transposed conv2d, 'b' batch norm (training), 'e' batch norm (eval),
                * 'i' batch norm (eval, no gradients: cuDNN's inference path), 'm' max, 'a' avg, 'g' global */
    int64_t out, k, stride, pad, dil, groups; /* 't': dil is the output_padding (dilation 1) */
    bool bias_or_affine;
    double rtol;
    double atol; /* 0: 1e-5 */
} layer_case;

typedef struct layer_run {
    dpt_model *model;
    void *layer;
    dpt_tensor *x, *y;
} layer_run;

/* The 16-bit format the layer tests round the parameters to (FP32: none), as their inputs. */
static dpt_precision round_params = DPT_PRECISION_FP32;

static layer_run run_layer(dpt_ctx *ctx, const layer_case *lc, const float *x_host, const float *w_host,
                           const layer_run *copy_from)
{
    layer_run lr = {.model = dpt_model_new(ctx, "layer", NULL)};
    dpt_shape3 shape = {lc->c, lc->h, lc->w};
    if (lc->kind == 'c')
        lr.layer = dpt_conv2d_new(lr.model, "conv", &shape, lc->out, lc->k, lc->stride, lc->pad, lc->dil,
                                  lc->groups, lc->bias_or_affine);
    else if (lc->kind == 't')
        lr.layer = dpt_conv_transpose2d_new(lr.model, "up", &shape, lc->out, lc->k, lc->stride, lc->pad, lc->dil, 1,
                                            lc->groups, lc->bias_or_affine);
    else if (lc->kind == 'b' || lc->kind == 'e' || lc->kind == 'i')
        lr.layer = dpt_batchnorm_new(lr.model, "bn", &shape, 0.1f, 1e-5f, lc->bias_or_affine, false);
    assert_null(dpt_model_error(lr.model));
    /* the same parameters and buffers on both devices (random, so gamma/beta matter) */
    for (int i = 0; i < dpt_model_num_params(lr.model); i++) {
        dpt_tensor *p = dpt_model_param_at(lr.model, i);
        if (copy_from) {
            float *tmp = malloc((size_t)p->numel * sizeof *tmp);
            dpt_tensor_copy_to_host(dpt_model_param_at(copy_from->model, i), tmp);
            dpt_tensor_copy_from_host(p, tmp);
            free(tmp);
        } else {
            dpt_init_uniform(ctx, p, 1.0f);
            round_to_16(p->data, p->numel, round_params); /* the CPU's: host memory */
        }
    }
    for (int i = 0; i < dpt_model_num_buffers(lr.model); i++) {
        dpt_tensor *b = dpt_model_buffer_at(lr.model, i);
        float *tmp = malloc((size_t)b->numel * sizeof *tmp);
        for (int64_t j = 0; j < b->numel; j++)
            tmp[j] = i == 0 ? 0.1f * (float)j - 0.3f : 0.5f + 0.25f * (float)j; /* mean, var */
        dpt_tensor_copy_from_host(b, tmp);
        free(tmp);
    }
    lr.x = dpt_tensor_new(ctx, 4, (int64_t[]){lc->n, lc->c, lc->h, lc->w});
    dpt_tensor_copy_from_host(lr.x, x_host);
    lr.x->requires_grad = true;
    /* [train] memory_format = nhwc: the layer takes a channels-last input (what a convolution
     * before it would write); the gradient comes back through the relayout */
    dpt_tensor *xin = dpt_ctx_channels_last(ctx) ? dpt_to_layout(ctx, lr.x, DPT_LAYOUT_NHWC) : lr.x;
    dpt_tensor *y = NULL;
    switch (lc->kind) {
    case 'c':
        y = dpt_conv2d_forward(ctx, lr.layer, xin);
        break;
    case 't': /* cuDNN's backward data as the forward, its forward and filter gradient as the backward */
        y = dpt_conv_transpose2d_forward(ctx, lr.layer, xin);
        break;
    case 'b':
        y = dpt_batchnorm_forward(ctx, lr.layer, xin, true);
        break;
    case 'e':
        y = dpt_batchnorm_forward(ctx, lr.layer, xin, false);
        break;
    case 'i': {
        bool was = dpt_set_grad_enabled(ctx, false);
        lr.y = dpt_batchnorm_forward(ctx, lr.layer, xin, false);
        dpt_set_grad_enabled(ctx, was);
        return lr;
    }
    case 'm':
        y = dpt_maxpool2d(ctx, xin, lc->k, lc->stride, lc->pad);
        break;
    case 'a':
        y = dpt_avgpool2d(ctx, xin, lc->k, lc->stride, lc->pad);
        break;
    default:
        y = dpt_global_avgpool(ctx, xin);
        break;
    }
    /* a weighted sum, so that batch norm's input gradient is not identically zero */
    dpt_tensor *wts = dpt_tensor_new(ctx, y->ndim, y->shape);
    dpt_tensor_copy_from_host(wts, w_host);
    dpt_backward(ctx, dpt_sum(ctx, dpt_mul(ctx, y, wts)));
    dpt_tensor_free(wts);
    lr.y = y;
    return lr;
}

/* bias (a convolution's forward, else NULL): the rounding of a 16-bit convolution applies to
 * its output before the fp32 bias is added, so the relative bound is taken on the larger of
 * |y| and |y - bias| (a bias that cancels the convolution leaves a small y with the rounding
 * of a large one) */
static void assert_same_tensor_b(const char *what, const layer_case *lc, bool gpu_nhwc, const dpt_tensor *gpu,
                                 const dpt_tensor *cpu, const dpt_tensor *bias)
{
    int64_t n = dpt_tensor_numel(cpu);
    assert_int_equal(dpt_tensor_numel(gpu), n);
    float *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
    double *da = malloc((size_t)n * sizeof *da), *db = malloc((size_t)n * sizeof *db);
    dpt_tensor_copy_to_host(cpu, a);
    dpt_tensor_copy_to_host(gpu, b);
    for (int64_t j = 0; j < n; j++)
        da[j] = a[j], db[j] = b[j];
    char label[160];
    snprintf(label, sizeof label, "%s%s: %s (cuda vs cpu)", lc->name, gpu_nhwc ? " (GPU channels-last)" : "", what);
    double atol = lc->atol > 0 ? lc->atol : 1e-5;
    if (bias) { /* the CPU's y is NCHW: channel (j / (oh ow)) % out */
        float *bv = malloc((size_t)lc->out * sizeof *bv);
        dpt_tensor_copy_to_host(bias, bv);
        int64_t plane = n / (lc->n * lc->out);
        for (int64_t j = 0; j < n; j++) {
            double pre = fabs(da[j] - bv[(j / plane) % lc->out]);
            double tol = atol + lc->rtol * (fabs(da[j]) > pre ? fabs(da[j]) : pre);
            if (!(fabs(db[j] - da[j]) <= tol))
                fail_msg("%s[%lld]: got %.9g, expected %.9g (tol %.3g, the convolution before its bias %.9g)", label,
                         (long long)j, db[j], da[j], tol, da[j] - bv[(j / plane) % lc->out]);
        }
        free(bv);
    } else {
        assert_close_d(label, db, da, n, lc->rtol, atol);
    }
    free(a), free(b), free(da), free(db);
}

static void assert_same_tensor(const char *what, const layer_case *lc, bool gpu_nhwc, const dpt_tensor *gpu,
                               const dpt_tensor *cpu)
{
    assert_same_tensor_b(what, lc, gpu_nhwc, gpu, cpu, NULL);
}

/* The conv layer's bias parameter in the CPU model (a 1-D parameter of `out` values), or NULL. */
static const dpt_tensor *conv_bias_of(const layer_case *lc, dpt_model *m)
{
    if (lc->kind != 'c' || !lc->bias_or_affine) return NULL;
    for (int i = 0; i < dpt_model_num_params(m); i++) {
        const dpt_tensor *t = dpt_model_param_at(m, i);
        if (t->ndim == 1 && t->shape[0] == lc->out) return t;
    }
    return NULL;
}

/* Both devices run each case's layer from the same inputs and parameters and must agree on
 * the output, the input gradient, the parameter gradients and the running statistics. */
static void compare_layers(const layer_case *cases, size_t count, dpt_precision precision,
                           dpt_precision gpu_precision, bool gpu_nhwc)
{
    /* a 16-bit GPU against the CPU's fp32: inputs, parameters and the output's weights exact in
     * 16 bits, so the GPU's roundings of them change nothing */
    round_params = precision == DPT_PRECISION_FP32 ? gpu_precision : DPT_PRECISION_FP32;
    for (size_t k = 0; k < count; k++) {
        const layer_case *lc = &cases[k];
        dpt_ctx *gpu = gpu_precision == DPT_PRECISION_FP32 ? make_with(GPU, gpu_precision, gpu_nhwc)
                                                           : make_gpu16(gpu_precision, gpu_nhwc);
        dpt_ctx *cpu = make_in(DPT_DEVICE_CPU, precision);
        skip_unless_reference(cpu, gpu, precision);
        dpt_rng rng;
        dpt_rng_seed(&rng, 11 + k);
        int64_t nx = lc->n * lc->c * lc->h * lc->w;
        float *x = malloc((size_t)nx * sizeof *x), *w = malloc((size_t)(64 * nx) * sizeof *w);
        for (int64_t j = 0; j < nx; j++)
            x[j] = (float)(dpt_rng_uniform(&rng) * 4.0 - 2.0);
        for (int64_t j = 0; j < 64 * nx; j++)
            w[j] = (float)(dpt_rng_uniform(&rng) * 2.0 - 1.0);
        round_to_16(x, nx, round_params), round_to_16(w, 64 * nx, round_params);
        layer_run c = run_layer(cpu, lc, x, w, NULL), g = run_layer(gpu, lc, x, w, &c);
        assert_same_tensor_b("forward", lc, gpu_nhwc, g.y, c.y, conv_bias_of(lc, c.model));
        if (lc->kind != 'i') assert_same_tensor("d/dx", lc, gpu_nhwc, dpt_tensor_grad(g.x), dpt_tensor_grad(c.x));
        for (int i = 0; i < dpt_model_num_params(c.model) && lc->kind != 'i'; i++) {
            char what[sizeof dpt_model_param_at(c.model, i)->name + 8];
            snprintf(what, sizeof what, "d/d %s", dpt_model_param_at(c.model, i)->name);
            assert_same_tensor(what, lc, gpu_nhwc, dpt_tensor_grad(dpt_model_param_at(g.model, i)),
                               dpt_tensor_grad(dpt_model_param_at(c.model, i)));
        }
        for (int i = 0; i < dpt_model_num_buffers(c.model); i++) /* running statistics */
            assert_same_tensor(dpt_model_buffer_at(c.model, i)->name, lc, gpu_nhwc, dpt_model_buffer_at(g.model, i),
                               dpt_model_buffer_at(c.model, i));
        dpt_tape_clear(cpu), dpt_tape_clear(gpu);
        dpt_tensor_free(c.x), dpt_tensor_free(g.x);
        dpt_model_free(c.model), dpt_model_free(g.model);
        dpt_ctx_free(cpu), dpt_ctx_free(gpu);
        free(x), free(w);
    }
    round_params = DPT_PRECISION_FP32;
}

/* [train] precision = bf16: cuDNN's bf16 convolutions against the CPU's fp32 ones on operands
 * exact in bf16 (the GPU image has no oneDNN: no CPU bf16 kernels there). Both accumulate in
 * fp32 from the same values; cuDNN's y, dx and dw come out rounded to bf16 (half a bf16 ulp,
 * 2^-8, relative): within a bf16 ulp (2^-7), plus the fp32 accumulation's error near zero. */
#define ULP 0x1p-7, 1e-3
static const layer_case bf16_cases[] = {
    {"bf16 conv 3x3 pad 1", 4, 3, 9, 9, 'c', 8, 3, 1, 1, 1, 1, true, ULP},
    {"bf16 conv 3x3 stride 2", 3, 8, 10, 7, 'c', 16, 3, 2, 1, 1, 1, false, ULP},
    {"bf16 conv 1x1", 2, 16, 5, 5, 'c', 32, 1, 1, 0, 1, 1, false, ULP},
    {"bf16 conv 7x7 stride 2 pad 3", 2, 3, 32, 32, 'c', 16, 7, 2, 3, 1, 1, false, ULP},
    {"bf16 conv 64 channels", 2, 64, 8, 8, 'c', 64, 3, 1, 1, 1, 1, false, ULP},
    {"bf16 conv_transpose 4x4 stride 2", 2, 16, 6, 6, 't', 8, 4, 2, 1, 0, 1, false, ULP},
};
#undef ULP

static void test_layers_bf16(void **state)
{
    (void)state;
    NEED_GPU();
    compare_layers(bf16_cases, sizeof bf16_cases / sizeof bf16_cases[0], DPT_PRECISION_FP32, DPT_PRECISION_BF16,
                   false);
}

/* [train] precision = fp16 (CUDA only): cuDNN's fp16 convolutions against the CPU's fp32 ones
 * on operands exact in fp16: y, dx and dw come out rounded to fp16 (2^-11 relative): within
 * an fp16 ulp (2^-10), plus the fp32 accumulation's error near zero. */
static void test_layers_fp16(void **state)
{
    (void)state;
    NEED_GPU();
#ifdef DPT_TEST_HARNESS_ON_CPU
    print_message("skipped: fp16 runs on cuDNN only (the harness's stand-in GPU is a CPU)\n");
    skip();
#endif
    static const layer_case cases[] = {
        {"fp16 conv 3x3 pad 1", 4, 3, 9, 9, 'c', 8, 3, 1, 1, 1, 1, true, 0x1p-10, 1e-3},
        {"fp16 conv 3x3 stride 2", 3, 8, 10, 7, 'c', 16, 3, 2, 1, 1, 1, false, 0x1p-10, 1e-3},
        {"fp16 conv 1x1", 2, 16, 5, 5, 'c', 32, 1, 1, 0, 1, 1, false, 0x1p-10, 1e-3},
    };
    compare_layers(cases, sizeof cases / sizeof cases[0], DPT_PRECISION_FP32, DPT_PRECISION_FP16, false);
}

static const layer_case fp32_cases[] = {
    {"conv 3x3 pad 1", 4, 3, 9, 9, 'c', 8, 3, 1, 1, 1, 1, true, 1e-3, 0},
    {"conv 3x3 stride 2", 3, 8, 10, 7, 'c', 16, 3, 2, 1, 1, 1, false, 1e-3, 0},
    {"conv 1x1", 2, 16, 5, 5, 'c', 32, 1, 1, 0, 1, 1, false, 1e-3, 0},
    {"conv 7x7 stride 2 pad 3", 2, 3, 32, 32, 'c', 8, 7, 2, 3, 1, 1, false, 1e-3, 0},
    {"conv dilation 2", 2, 4, 11, 11, 'c', 4, 3, 1, 2, 2, 1, true, 1e-3, 0},
    {"conv groups 2", 2, 8, 6, 6, 'c', 8, 3, 1, 1, 1, 2, true, 1e-3, 0},
    {"conv depthwise", 2, 8, 6, 6, 'c', 8, 3, 1, 1, 1, 8, false, 1e-3, 0},
    {"conv_transpose 4x4 stride 2 pad 1", 2, 8, 5, 5, 't', 4, 4, 2, 1, 0, 1, true, 1e-3, 0},
    {"conv_transpose 3x3 stride 2 output_padding 1", 3, 3, 4, 6, 't', 16, 3, 2, 1, 1, 1, false, 1e-3, 0},
    {"conv_transpose groups 2", 2, 4, 4, 4, 't', 6, 4, 2, 1, 0, 2, true, 1e-3, 0},
    {"batchnorm train affine", 8, 6, 5, 5, 'b', 0, 0, 0, 0, 0, 0, true, 1e-4, 0},
    {"batchnorm train plain", 4, 3, 7, 3, 'b', 0, 0, 0, 0, 0, 0, false, 1e-4, 0},
    {"batchnorm eval", 4, 6, 5, 5, 'e', 0, 0, 0, 0, 0, 0, true, 1e-4, 0},
    {"batchnorm inference", 4, 6, 5, 5, 'i', 0, 0, 0, 0, 0, 0, true, 1e-5, 0},
    {"batchnorm inference plain", 2, 3, 4, 4, 'i', 0, 0, 0, 0, 0, 0, false, 1e-5, 0},
    {"maxpool 3/2 pad 1", 2, 4, 9, 9, 'm', 0, 3, 2, 1, 0, 0, false, 1e-5, 0},
    {"maxpool 2/2", 3, 5, 8, 6, 'm', 0, 2, 2, 0, 0, 0, false, 1e-5, 0},
    {"avgpool 3/1 pad 1", 2, 4, 7, 7, 'a', 0, 3, 1, 1, 0, 0, false, 1e-5, 0},
    {"global avgpool", 4, 7, 5, 5, 'g', 0, 0, 0, 0, 0, 0, false, 1e-5, 0},
};

static void test_layers(void **state)
{
    (void)state;
    NEED_GPU();
    compare_layers(fp32_cases, sizeof fp32_cases / sizeof fp32_cases[0], DPT_PRECISION_FP32, DPT_PRECISION_FP32,
                   false);
}

/* [train] memory_format = nhwc: every layer case above on a channels-last GPU context (cuDNN's
 * NHWC convolutions with (K, R, S, C) filters, NHWC batch norm, the pooling kernels' NHWC
 * indexing, the relayout kernel both ways) against the CPU's NCHW, to the same tolerances. */
static void test_layers_nhwc(void **state)
{
    (void)state;
    NEED_GPU();
    compare_layers(fp32_cases, sizeof fp32_cases / sizeof fp32_cases[0], DPT_PRECISION_FP32, DPT_PRECISION_FP32,
                   true);
}

/* The bf16 convolutions on a channels-last GPU context, as test_layers_bf16 checks them. */
static void test_layers_nhwc_bf16(void **state)
{
    (void)state;
    NEED_GPU();
    compare_layers(bf16_cases, sizeof bf16_cases / sizeof bf16_cases[0], DPT_PRECISION_FP32, DPT_PRECISION_BF16,
                   true);
}

/* ---------------------------------------------------------------- loader, NCCL */

/* Batches through pinned memory and the copy stream are the CPU loader's, bit for bit. */
static void test_loader_copy_stream(void **state)
{
    (void)state;
    NEED_GPU();
    dpt_ctx *cpu = make(DPT_DEVICE_CPU), *gpu = make(GPU);
    dpt_dataset *ds = dpt_synthetic_new(203, 3, 12, 12, 10, 5);
    dpt_loader_options lo = {.batch = 16,
                             .shuffle = true,
                             .drop_last = false,
                             .seed = 4,
                             .world_size = 1,
                             .mean = 0.5f,
                             .std = 0.25f,
                             .crop_pad = 2,
                             .hflip = true};
    dpt_loader *a = dpt_loader_new(cpu, ds, &lo);
    for (int prefetch = 0; prefetch <= 3; prefetch += 3) {
        lo.prefetch = prefetch;
        dpt_loader *b = dpt_loader_new(gpu, ds, &lo);
        static float ha[16 * 3 * 12 * 12], hb[16 * 3 * 12 * 12];
        for (int epoch = 1; epoch <= 3; epoch++) {
            dpt_loader_start_epoch(a, epoch);
            dpt_loader_start_epoch(b, epoch);
            if (epoch == 2) dpt_loader_skip(a, 5), dpt_loader_skip(b, 5);
            dpt_batch ba, bb;
            int count = 0;
            while (dpt_loader_next(a, &ba)) {
                assert_true(dpt_loader_next(b, &bb));
                assert_int_equal(ba.size, bb.size);
                dpt_tensor_copy_to_host(ba.x, ha);
                dpt_tensor_copy_to_host(bb.x, hb);
                int64_t m = dpt_tensor_numel(ba.x);
                if (memcmp(ha, hb, (size_t)m * sizeof(float)) != 0)
                    fail_msg("prefetch %d epoch %d batch %d: device batch differs", prefetch, epoch, count);
                assert_memory_equal(ba.labels, bb.labels, (size_t)ba.size * sizeof(int32_t));
                count++;
            }
            assert_false(dpt_loader_next(b, &bb));
        }
        dpt_loader_free(b);
    }
    dpt_loader_free(a);
    dpt_dataset_free(ds);
    dpt_ctx_free(cpu), dpt_ctx_free(gpu);
}

/* Image files: on the device the batch travels as uint8 HWC and images_to_float makes the
 * floats there; the batches must be the CPU loader's, bit for bit. */
static void test_loader_image_files(void **state)
{
    (void)state;
    NEED_GPU();
    if (!dpt_image_have_jpeg() || !dpt_image_have_png()) {
        print_message("skipped: no JPEG/PNG decoder in this build\n");
        skip();
    }
    char dir[] = "/tmp/dpt-test-cuda-images-XXXXXX", path[256], msg[256];
    assert_non_null(mkdtemp(dir));
    const char *sets[2] = {"train", "val"};
    for (int s = 0; s < 2; s++) {
        snprintf(path, sizeof path, "%s/%s", dir, sets[s]);
        mkdir(path, 0755);
        for (int c = 0; c < 2; c++) {
            snprintf(path, sizeof path, "%s/%s/c%d", dir, sets[s], c);
            mkdir(path, 0755);
            for (int k = 0; k < 9; k++) {
                int w = 40 + 13 * k, h = 30 + 7 * c;
                uint8_t *pix = malloc((size_t)w * h * 3);
                for (int i = 0; i < w * h * 3; i++)
                    pix[i] = (uint8_t)(i * 7 + k * 31 + c * 5);
                snprintf(path, sizeof path, "%s/%s/c%d/%d.%s", dir, sets[s], c, k, k % 3 ? "jpg" : "png");
                bool ok = k % 3 ? dpt_image_write_jpeg(path, pix, w, h, 3, 90, msg, sizeof msg)
                                : dpt_image_write_png(path, pix, w, h, 3, msg, sizeof msg);
                free(pix);
                if (!ok) fail_msg("%s", msg);
            }
        }
    }
    dpt_image_view v = {.train = true, .size = 24, .resize = 28, .scale = {0.08, 1}, .ratio = {0.75, 4.0 / 3.0},
                        .hflip = true, .dct_scaling = true, .max_pixels = 1 << 24};
    dpt_folder_options fo = {.dir = dir, .train = v, .eval = v};
    fo.eval.train = false;
    dpt_dataset *train, *val;
    dpt_error err;
    if (!dpt_folder_open(&fo, &train, &val, &err)) fail_msg("%s", err.msg);
    dpt_ctx *cpu = make(DPT_DEVICE_CPU), *gpu = make(GPU);
    dpt_loader_options lo = {.batch = 5, .shuffle = true, .drop_last = false, .seed = 3, .world_size = 1,
                             .norm_channels = 3, .channel_mean = {0.485f, 0.456f, 0.406f},
                             .channel_std = {0.229f, 0.224f, 0.225f}, .workers = 2};
    for (int prefetch = 0; prefetch <= 2; prefetch += 2) {
        lo.prefetch = prefetch;
        dpt_loader *a = dpt_loader_new(cpu, train, &lo), *b = dpt_loader_new(gpu, train, &lo);
        static float ha[5 * 3 * 24 * 24], hb[5 * 3 * 24 * 24];
        for (int epoch = 0; epoch < 2; epoch++) {
            dpt_loader_start_epoch(a, epoch), dpt_loader_start_epoch(b, epoch);
            dpt_batch ba, bb;
            while (dpt_loader_next(a, &ba)) {
                assert_true(dpt_loader_next(b, &bb));
                assert_int_equal(ba.size, bb.size);
                dpt_tensor_copy_to_host(ba.x, ha);
                dpt_tensor_copy_to_host(bb.x, hb);
                assert_memory_equal(ha, hb, (size_t)dpt_tensor_numel(ba.x) * sizeof(float));
                assert_memory_equal(ba.labels, bb.labels, (size_t)ba.size * sizeof(int32_t));
            }
            assert_false(dpt_loader_next(b, &bb));
        }
        dpt_loader_free(a), dpt_loader_free(b);
    }
    dpt_dataset_free(train), dpt_dataset_free(val);
    dpt_ctx_free(cpu), dpt_ctx_free(gpu);
    snprintf(path, sizeof path, "rm -rf %s", dir);
    assert_int_equal(system(path), 0);
}

/* One rank over NCCL: the DDP engine's device path (events, communication stream, join)
 * must leave training exactly as it is without DDP. */
static void test_ddp_nccl_one_rank(void **state)
{
    (void)state;
    NEED_GPU();
    dpt_dataset *ds = ddp_dataset();
    for (int k = 0; k < 2; k++) {
        ddp_run run = {.batch = 16,
                       .accum = k ? 2 : 1,
                       .bucket_mb = 1e-4, /* a bucket per layer (a bias with its weight) */
                       .overlap = true,
                       .steps = 8,
                       .optim = k ? "adamw" : "sgd",
                       .drop_last = true,
                       .cuda = GPU == DPT_DEVICE_CUDA};
        dpt_thread_group *group = dpt_thread_group_new(1);
        dpt_comm *host = dpt_comm_thread_new(group, 0);
        ddp_result with = ddp_train(&run, host, ds);
        if (with.skipped) {
            print_message("skipped: %s\n", with.why);
            host->ops->free(host);
            dpt_thread_group_free(group);
            dpt_dataset_free(ds);
            skip();
        }
        ddp_result alone = ddp_train(&run, NULL, ds);
        assert_int_equal(with.n, alone.n);
        assert_true(with.nbuckets >= 3);
        if (memcmp(with.params, alone.params, (size_t)with.n * sizeof(float)) != 0)
            fail_msg("%s: DDP over one-rank NCCL changed the parameters (max rel %.2e)", run.optim,
                     ddp_rel_diff(&with, &alone));
        for (int i = 0; i < with.nparams && i < 16; i++)
            assert_int_equal(with.reduce_counts[i], run.steps);
        /* 16-bit gradients on the wire (NCCL's bf16 AllReduce on the GPU): at world size 1 the
         * sum is the bucket itself, so the run differs from the fp32 one only by the bf16
         * rounding of each step's gradients: not at all identical, and close */
        run.compression = DPT_GRAD_COMPRESSION_BF16;
        ddp_result h16 = ddp_train(&run, host, ds);
        double rel = ddp_rel_diff(&h16, &alone);
        print_message("%s: bf16 gradients on the wire: max rel %.2e from fp32\n", run.optim, rel);
        assert_true(rel > 0 && rel < 0.05);
        free(h16.params);
        free(with.params), free(alone.params);
        host->ops->free(host);
        dpt_thread_group_free(group);
    }
    dpt_dataset_free(ds);
}

/* DataParallel over two GPUs (NCCL between replica threads) against one GPU with the whole
 * batch. Needs two GPUs. */
static void test_dataparallel_two_gpus(void **state)
{
    (void)state;
    NEED_GPU();
    if (GPUS_VISIBLE() < 2) {
        print_message("skipped: needs 2 GPUs, %d visible\n", GPUS_VISIBLE());
        skip();
    }
    dpt_dataset *ds = ddp_dataset();
    static ddp_replica_job job;
    job.ds = ds;
    job.run = (ddp_run){.batch = 8,
                        .accum = 1,
                        .bucket_mb = 1e-3,
                        .overlap = true,
                        .steps = 10,
                        .optim = "sgd",
                        .drop_last = true,
                        .cuda = GPU == DPT_DEVICE_CUDA};
    dpt_run_replicas(2, ddp_replica_main, &job);
    ddp_run single = job.run;
    single.batch = 16;
    ddp_result ref = ddp_train(&single, NULL, ds);
    double rel = ddp_rel_diff(&job.results[0], &ref);
    print_message("DataParallel cuda:0,cuda:1 vs one GPU x 16: max rel diff %.2e\n", rel);
    assert_true(rel < 1e-5);
    assert_memory_equal(job.results[0].params, job.results[1].params, (size_t)ref.n * sizeof(float));
    free(job.results[0].params), free(job.results[1].params), free(ref.params);
    dpt_dataset_free(ds);
}

#if DPT_CUDA && !defined(DPT_TEST_HARNESS_ON_CPU)
#include <cublas_v2.h>
#include <cudnn.h>
#if DPT_NCCL
#include <nccl.h>
#endif

#include "runtime/cuda_check.h"

/* Run `provoke` in a child: it must end the process with status 1 (not a signal, not a core
 * dump) after printing every fragment of `want`. */
static void expect_check_message(void (*provoke)(void), const char *const *want, int nwant)
{
    char text[4096];
    int status = run_in_child(provoke, text, sizeof text);
    print_message("%s", text[0] ? text : "(nothing on stderr)\n");
    assert_int_equal(status, 1);
    assert_true(strncmp(text, "error: ", 7) == 0);
    for (int i = 0; i < nwant; i++)
        assert_contains(text, want[i]);
}

static void fail_cuda(void)
{
    CHECK_CUDA(cudaErrorInvalidValue);
}
static void fail_cublas(void)
{
    CHECK_CUBLAS(CUBLAS_STATUS_INVALID_VALUE);
}
/* A real cuDNN call with a bad argument (no GPU needed): cuDNN 9 says which argument. */
static void fail_cudnn(void)
{
    cudnnTensorDescriptor_t d;
    CHECK_CUDNN(cudnnCreateTensorDescriptor(&d));
    CHECK_CUDNN(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, -1, 3, 8, 8));
}
#if DPT_NCCL
static void fail_nccl(void)
{
    CHECK_NCCL(ncclInvalidArgument);
}
#endif

/* One family of checks (runtime/cuda_check.h): file:line, the call as written, the library's
 * name and text for the status, exit status 1. Runs without a GPU. */
static void test_check_family(void **state)
{
    (void)state;
    const char *cuda[] = {"test_cuda.c:", "cudaErrorInvalidValue failed: CUDA cudaErrorInvalidValue: ",
                          cudaGetErrorString(cudaErrorInvalidValue)};
    expect_check_message(fail_cuda, cuda, 3);
    const char *blas[] = {"test_cuda.c:", "failed: cuBLAS CUBLAS_STATUS_INVALID_VALUE: ",
                          cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE)};
    expect_check_message(fail_cublas, blas, 3);
    const char *dnn[] = {"test_cuda.c:", "cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW",
                         "failed: cuDNN CUDNN_STATUS_BAD_PARAM"};
    expect_check_message(fail_cudnn, dnn, 3);
#if DPT_NCCL
    const char *nccl[] = {"test_cuda.c:", "failed: NCCL ", ncclGetErrorString(ncclInvalidArgument),
                          "HINT: NCCL_DEBUG=INFO"};
    expect_check_message(fail_nccl, nccl, 4);
#endif
}
#else
static void test_check_family(void **state)
{
    (void)state;
    print_message("skipped: not a CUDA build (the harness has no CUDA libraries)\n");
    skip();
}
#endif

/* ---------------------------------------------------------------- the tensor primitives */

/* int32 ids of this context (a temporary, as a batch's would be) */
static dpt_tensor *ids_in(dpt_ctx *c, const int32_t *v, int ndim, const int64_t *shape)
{
    dpt_tensor *t = dpt_temp_i32(c, ndim, shape);
    dpt_tensor_copy_from_host_i32(t, v);
    return t;
}

static dpt_tensor *g_prim(dpt_ctx *c, dpt_tensor **in, int n, void *u)
{
    (void)n;
    int which = *(int *)u;
    dpt_tensor *x = in[0];
    switch (which) {
    case 0: /* permute, then a dense op */
        return dpt_scale(c, dpt_permute(c, x, (int[]){2, 0, 1}), 1.5f);
    case 1: /* a strided slice and a narrow, joined */
        return dpt_concat(c, 2, (dpt_tensor *[]){dpt_slice(c, x, 1, 0, 3, 2), dpt_narrow(c, x, 1, 1, 2)}, 1);
    case 2: /* broadcasting: (2, 3, 4) + (4), * (3, 1) rows, / a positive (4) */
        return dpt_div(c, dpt_mul(c, dpt_add(c, x, in[1]), dpt_reshape(c, in[2], 2, (int64_t[]){3, 1})),
                       dpt_unary(c, DPT_UNARY_EXP, in[1]));
    case 3:
        return dpt_add(c, dpt_sum_last(c, x, true), dpt_mul(c, dpt_mean_last(c, x, true), dpt_max_last(c, x, true)));
    case 4:
        return dpt_add(c, dpt_log_softmax(c, x), dpt_softmax(c, x));
    case 5: { /* every unary op, on a positive input where the op needs one */
        dpt_tensor *pos = dpt_add(c, dpt_mul(c, x, x), dpt_scale(c, dpt_unary(c, DPT_UNARY_ABS, x), 0.0f));
        pos = dpt_unary(c, DPT_UNARY_EXP, dpt_scale(c, pos, 0.1f)); /* >= 1 */
        dpt_tensor *acc = dpt_scale(c, x, 0.0f);
        for (int op = 0; op < DPT_UNARY_COUNT; op++) {
            bool positive = op == DPT_UNARY_SQRT || op == DPT_UNARY_RSQRT || op == DPT_UNARY_LOG ||
                            op == DPT_UNARY_RECIPROCAL;
            acc = dpt_add(c, acc, dpt_unary(c, (dpt_unary_op)op, positive ? pos : x));
        }
        return acc;
    }
    case 6:
        return dpt_layer_norm(c, x, in[1], in[2], 1e-5f);
    case 7: /* attention-shaped: q k^T, then a weight shared by every batch element */
        return dpt_bmm(c, dpt_bmm(c, x, dpt_transpose_axes(c, in[1], -1, -2)), in[2]);
    case 8: {
        static const int32_t ids[6] = {2, 0, 2, 3, 1, 2};
        return dpt_embedding(c, x, ids_in(c, ids, 2, (int64_t[]){2, 3}));
    }
    case 10: /* causal attention over fused qkv (2, 5, 3 x 2 heads x 4) */
        return dpt_attention(c, x, 2, true);
    case 11:
        return dpt_attention(c, x, 2, false);
    case 12: { /* views into dense ops (reshape and relu copy them), expand of a narrowed view, + c */
        dpt_tensor *a = dpt_relu(c, dpt_reshape(c, dpt_permute(c, x, (int[]){0, 2, 1}), 2, (int64_t[]){8, 3}));
        dpt_tensor *b = dpt_expand(c, dpt_narrow(c, x, 1, 1, 1), 3, (int64_t[]){2, 3, 4});
        return dpt_add(c, a, dpt_add_scalar(c, dpt_reshape(c, b, 2, (int64_t[]){8, 3}), 0.5f));
    }
    default: {
        static const int32_t t[6] = {1, 4, DPT_IGNORE_INDEX, 0, 2, 3};
        return dpt_cross_entropy_targets(c, x, ids_in(c, t, 2, (int64_t[]){2, 3}), 0.1f, DPT_IGNORE_INDEX);
    }
    }
}

static void test_tensor_primitives(void **state)
{
    (void)state;
    NEED_GPU();
    static const char *const names[] = {"permute", "slice + concat", "broadcasting", "last-dim reductions",
                                        "softmax + log_softmax", "unary ops", "layer_norm", "bmm", "embedding",
                                        "cross_entropy (B, T, V)", "attention (causal)", "attention",
                                        "views and expand"};
    const int64_t shapes[][3][3] = {
        {{2, 3, 4}}, {{2, 4, 3}}, {{2, 3, 4}, {4}, {3}}, {{2, 3, 7}}, {{2, 3, 7}}, {{3, 5}},
        {{2, 5, 16}, {16}, {16}}, {{3, 4, 5}, {3, 6, 5}, {6, 2}}, {{4, 6}}, {{2, 3, 5}}, {{2, 5, 24}}, {{2, 5, 24}},
        {{2, 3, 4}},
    };
    const int inputs[] = {1, 1, 3, 1, 1, 1, 3, 3, 1, 1, 1, 1, 1};
    for (int which = 0; which < 13; which++) /* GEMMs and sums in other orders: 1e-3 as for the other GEMMs */
        compare(names[which], g_prim, inputs[which], shapes[which], &which, which == 7 || which >= 10 ? 1e-3 : 1e-4);
    /* the GPU's attention in chunks of 2 query rows (attn_chunked.h; the 5 rows above are one) */
    setenv("DPT_ATTENTION_CHUNK", "2", 1);
    for (int which = 10; which < 12; which++)
        compare(which == 10 ? "attention (causal), chunks of 2 rows" : "attention, chunks of 2 rows", g_prim,
                inputs[which], shapes[which], &which, 1e-3);
    unsetenv("DPT_ATTENTION_CHUNK");
}

/* Generation's attention with a KV cache on the GPU (the backend's strided copy into the cache,
 * batched GEMMs over strided views of it): each position's output, a 3-position prompt then one
 * position a call, equals the CPU's full causal attention's row for it. */
static void test_kv_cache_attention(void **state)
{
    (void)state;
    NEED_GPU();
    enum { T = 9, H = 2, D = 4, C = H * D, PROMPT = 3 };
    dpt_ctx *cpu = make(DPT_DEVICE_CPU), *gpu = make(GPU);
    dpt_rng rng;
    dpt_rng_seed(&rng, 11);
    dpt_tensor *qkv = test_input(cpu, &rng, 3, (int64_t[]){1, T, 3 * C}, -2, 2);
    float want[T * C], got[T * C], part[3 * C * T];
    dpt_set_grad_enabled(cpu, false), dpt_set_grad_enabled(gpu, false);
    dpt_tensor_copy_to_host(dpt_attention(cpu, qkv, H, true), want);
    const float *all = dpt_tensor_data(qkv);
    dpt_kv_cache *cache = dpt_kv_cache_new(gpu, 1, H, D, T);
    for (int pos = 0; pos < T;) {
        int len = pos == 0 ? PROMPT : 1;
        dpt_tensor *x = dpt_tensor_new(gpu, 3, (int64_t[]){1, len, 3 * C});
        memcpy(part, all + pos * 3 * C, (size_t)(len * 3 * C) * sizeof *part);
        dpt_tensor_copy_from_host(x, part);
        dpt_tensor_copy_to_host(dpt_attention_cached(gpu, x, H, cache, 0, pos), got + pos * C);
        dpt_tape_clear(gpu);
        dpt_tensor_free(x);
        pos += len;
    }
    double a[T * C], b[T * C];
    for (int i = 0; i < T * C; i++)
        a[i] = want[i], b[i] = got[i];
    assert_close_d("attention with a KV cache (cuda, a position a call) vs the full causal attention (cpu)", b, a,
                   T * C, 1e-4, 1e-5);
    dpt_kv_cache_free(cache);
    dpt_tape_clear(cpu);
    dpt_tensor_free(qkv);
    dpt_ctx_free(cpu), dpt_ctx_free(gpu);
}

/* Dropout's mask is made on the device from a counter-based stream keyed by one draw of the
 * context's generator: the GPU's masks are the CPU's bit for bit (same seed, two calls), and
 * about p of the elements are dropped. */
static void test_dropout_masks(void **state)
{
    (void)state;
    NEED_GPU();
    enum { N = 100003 };
    dpt_ctx *cpu = make(DPT_DEVICE_CPU), *gpu = make(GPU); /* the same seed */
    static float ones[N], want[N], got[N];
    for (int i = 0; i < N; i++)
        ones[i] = 1.0f;
    for (int call = 0; call < 2; call++) {
        dpt_tensor *x = dpt_tensor_new(cpu, 1, (int64_t[]){N}), *xg = dpt_tensor_new(gpu, 1, (int64_t[]){N});
        dpt_tensor_copy_from_host(x, ones), dpt_tensor_copy_from_host(xg, ones);
        dpt_tensor_copy_to_host(dpt_dropout(cpu, x, 0.3f, true), want);
        dpt_tensor_copy_to_host(dpt_dropout(gpu, xg, 0.3f, true), got);
        int dropped = 0;
        for (int i = 0; i < N; i++) {
            if (want[i] != got[i]) fail_msg("call %d: mask[%d] cuda %g, cpu %g", call, i, got[i], want[i]);
            dropped += want[i] == 0.0f;
        }
        /* 0.3 of N within 6 sigma (sigma = sqrt(N 0.3 0.7) = 145) */
        if (abs(dropped - (int)(0.3 * N)) > 870) fail_msg("call %d: %d of %d dropped", call, dropped, N);
        dpt_tape_clear(cpu), dpt_tape_clear(gpu);
        dpt_tensor_free(x), dpt_tensor_free(xg);
    }
    dpt_ctx_free(cpu), dpt_ctx_free(gpu);
}

/* Mixup, CutMix and random erasing of a batch (data/batch_aug.c) on the device: the CPU's floats
 * bit for bit (no fused multiply-add in the kernel), NCHW and NHWC boxes, and the partners' labels
 * reversed. */
static void test_mix_pairs(void **state)
{
    (void)state;
    NEED_GPU();
    dpt_ctx *cpu = make(DPT_DEVICE_CPU), *gpu = make(GPU);
    enum { N = 5, C = 3, H = 9, W = 11, NUM = N * C * H * W };
    static float x[NUM], want[NUM], got[NUM];
    dpt_rng rng;
    dpt_rng_seed(&rng, 5);
    for (int nhwc = 0; nhwc < 2; nhwc++)
        for (int cut = 0; cut < 2; cut++) {
            for (int i = 0; i < NUM; i++)
                x[i] = 4.0f * dpt_rng_uniform(&rng) - 2.0f;
            dpt_tensor *a = dpt_tensor_new(cpu, 4, (int64_t[]){N, C, H, W}), *b = dpt_tensor_new(gpu, 4, (int64_t[]){N, C, H, W});
            dpt_tensor_copy_from_host(a, x), dpt_tensor_copy_from_host(b, x);
            /* the same memory read as (n, h, w, c): the box then covers other values */
            a->layout = b->layout = nhwc ? DPT_LAYOUT_NHWC : DPT_LAYOUT_NCHW;
            dpt_mix m = {.on = true, .cut = cut, .lambda = 0.3183, .y0 = 2, .y1 = 8, .x0 = 0, .x1 = 6};
            dpt_mix_apply(cpu, a, &m), dpt_mix_apply(gpu, b, &m);
            a->layout = b->layout = DPT_LAYOUT_NCHW;
            dpt_tensor_copy_to_host(a, want), dpt_tensor_copy_to_host(b, got);
            for (int i = 0; i < NUM; i++)
                if (memcmp(&want[i], &got[i], sizeof got[i]))
                    fail_msg("%s %s: value %d cuda %.9g, cpu %.9g", cut ? "cutmix" : "mixup", nhwc ? "nhwc" : "nchw", i,
                             got[i], want[i]);
            dpt_tensor_free(a), dpt_tensor_free(b);
        }
    /* random erasing: the same boxes set to 0 */
    for (int nhwc = 0; nhwc < 2; nhwc++) {
        for (int i = 0; i < NUM; i++)
            x[i] = 1.0f + dpt_rng_uniform(&rng);
        dpt_tensor *a = dpt_tensor_new(cpu, 4, (int64_t[]){N, C, H, W}), *b = dpt_tensor_new(gpu, 4, (int64_t[]){N, C, H, W});
        dpt_tensor_copy_from_host(a, x), dpt_tensor_copy_from_host(b, x);
        a->layout = b->layout = nhwc ? DPT_LAYOUT_NHWC : DPT_LAYOUT_NCHW;
        dpt_erase_options o = {.prob = 0.7, .scale = {0.1, 0.4}, .ratio = {0.5, 2}};
        dpt_erase_apply(cpu, a, &o, 99), dpt_erase_apply(gpu, b, &o, 99);
        a->layout = b->layout = DPT_LAYOUT_NCHW;
        dpt_tensor_copy_to_host(a, want), dpt_tensor_copy_to_host(b, got);
        int zeros = 0;
        for (int i = 0; i < NUM; i++) {
            if (want[i] != got[i]) fail_msg("erase %s: value %d cuda %g, cpu %g", nhwc ? "nhwc" : "nchw", i, got[i], want[i]);
            zeros += want[i] == 0.0f;
        }
        assert_true(zeros > 0);
        dpt_tensor_free(a), dpt_tensor_free(b);
    }
    int32_t labels[N] = {4, 0, 9, 2, 7}, back[N];
    dpt_tensor *y = dpt_tensor_new_dtype(gpu, DPT_I32, 1, (int64_t[]){N}), *store = dpt_tensor_new_dtype(gpu, DPT_I32, 1, (int64_t[]){8});
    dpt_tensor_copy_from_host_i32(y, labels);
    dpt_tensor_copy_to_host_i32(dpt_mix_partner_labels(gpu, y, store), back);
    for (int i = 0; i < N; i++)
        assert_int_equal(back[i], labels[N - 1 - i]);
    dpt_tape_clear(gpu);
    dpt_tensor_free(y), dpt_tensor_free(store);
    dpt_ctx_free(cpu), dpt_ctx_free(gpu);
}

/* dpt_checkpoint on the device: a layer run through it (with dropout, whose device mask is keyed
 * by the host generator that the recomputation replays) gives the plain forward's gradients
 * for every parameter: the same kernels on the same shapes, so within a few ulps (cuBLAS may
 * pick another algorithm for a call made from backward; bit-identical on the CPU). */
static dpt_linear *ck_fc[3];

static dpt_tensor *ck_block(dpt_ctx *ctx, dpt_tensor *h, void *user)
{
    (void)user;
    return dpt_dropout(ctx, dpt_gelu(ctx, dpt_linear_forward(ctx, ck_fc[1], h)), 0.2f, true);
}

static void test_checkpoint_on_device(void **state)
{
    (void)state;
    NEED_GPU();
    enum { N = 8, IN = 16, HID = 32, OUT = 5 };
    float grads[2][6][HID * HID];
    int64_t numel[6];
    for (int mode = 0; mode < 2; mode++) {
        dpt_ctx *gpu = make(GPU); /* the same seed: the same weights and masks */
        dpt_model *m = dpt_model_new(gpu, "ck", NULL);
        ck_fc[0] = dpt_linear_new(m, "fc1", IN, HID, true);
        ck_fc[1] = dpt_linear_new(m, "fc2", HID, HID, true);
        ck_fc[2] = dpt_linear_new(m, "fc3", HID, OUT, true);
        dpt_rng rng;
        dpt_rng_seed(&rng, 5);
        float host[N * IN];
        for (int i = 0; i < N * IN; i++)
            host[i] = 2.0f * dpt_rng_uniform(&rng) - 1.0f;
        dpt_tensor *x = dpt_tensor_new(gpu, 2, (int64_t[]){N, IN});
        dpt_tensor_copy_from_host(x, host);
        dpt_tensor *h = dpt_relu(gpu, dpt_linear_forward(gpu, ck_fc[0], x));
        h = mode ? dpt_checkpoint(gpu, ck_block, h, NULL) : ck_block(gpu, h, NULL);
        dpt_tensor *y = dpt_linear_forward(gpu, ck_fc[2], h);
        dpt_backward(gpu, dpt_sum(gpu, dpt_mul(gpu, y, y)));
        for (int i = 0; i < 6; i++) {
            const dpt_tensor *g = dpt_tensor_grad(dpt_model_param_at(m, i));
            numel[i] = dpt_tensor_numel(g);
            dpt_tensor_copy_to_host(g, grads[mode][i]);
        }
        dpt_tape_clear(gpu);
        dpt_tensor_free(x);
        dpt_model_free(m);
        dpt_ctx_free(gpu);
    }
    for (int i = 0; i < 6; i++) {
        double a[HID * HID], b[HID * HID];
        for (int64_t k = 0; k < numel[i]; k++)
            a[k] = grads[1][i][k], b[k] = grads[0][i][k];
        assert_close_d("a parameter's gradient through dpt_checkpoint (cuda) vs the plain forward's", a, b, numel[i],
                       1e-5, 1e-6);
    }
}

/* DPT_TEST_FORK=1 (scripts/gpu_check.sh): each test in a child of its own, with a time limit,
 * so a fatal error, a crash or a hang in one is that test's failure and the rest still run.
 * The children's cmocka lines are passed through (their per-group totals dropped) and one
 * total is printed at the end, in cmocka's words. */
static int run_forked(const struct CMUnitTest *tests, size_t n, unsigned limit_s)
{
    int passed = 0, failed = 0, skipped = 0;
    for (size_t i = 0; i < n; i++) {
        fflush(stdout), fflush(stderr);
        int fd[2];
        if (pipe(fd) != 0) return 1;
        pid_t pid = fork();
        if (pid == 0) {
            close(fd[0]);
            dup2(fd[1], STDOUT_FILENO), dup2(fd[1], STDERR_FILENO);
            alarm(limit_s);
            const char *crash = getenv("DPT_TEST_FORK_CRASH"); /* run.sh: the runner survives a crash */
            if (crash && !strcmp(crash, tests[i].name)) raise(SIGSEGV);
            _exit(_cmocka_run_group_tests(tests[i].name, &tests[i], 1, NULL, NULL) ? 1 : 0);
        }
        close(fd[1]);
        FILE *f = fdopen(fd[0], "r");
        char line[4096];
        bool ok = false, skip_seen = false;
        while (f && fgets(line, sizeof line, f)) {
            bool skip_line = !strncmp(line, "[  SKIPPED ]", 12);
            if (!strncmp(line, "[==========]", 12) || !strncmp(line, "[  PASSED  ] ", 13) ||
                (!strncmp(line, "[  FAILED  ] ", 13) && line[13] >= '0' && line[13] <= '9') ||
                (skip_line && (skip_seen || (line[13] >= '0' && line[13] <= '9'))) || strstr(line, "FAILED TEST") ||
                strstr(line, "SKIPPED TEST") || line[0] == '\n')
                continue; /* the child's group totals and lists: the parent's total replaces them */
            ok |= !strncmp(line, "[       OK ]", 12);
            skip_seen |= skip_line;
            fputs(line, stdout);
        }
        if (f) fclose(f);
        int status = 0;
        waitpid(pid, &status, 0);
        if (skip_seen && !ok) {
            skipped++;
        } else if (ok && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
            passed++;
        } else {
            failed++;
            if (WIFSIGNALED(status))
                printf("[  FAILED  ] %s (%s)\n", tests[i].name,
                       WTERMSIG(status) == SIGALRM ? "did not end within its time limit" : strsignal(WTERMSIG(status)));
            else if (!ok)
                printf("[  FAILED  ] %s (exit %d before it could report)\n", tests[i].name, WEXITSTATUS(status));
        }
    }
    printf("[==========] %zu test(s) run, each in a child of its own.\n", n);
    printf("[  PASSED  ] %d test(s).\n", passed);
    if (skipped) printf("[  SKIPPED ] %d test(s).\n", skipped);
    if (failed) printf("[  FAILED  ] %d test(s).\n", failed);
    return failed ? 1 : 0;
}

int main(void)
{
    /* DPT_TEST_FORK: the parent must not touch CUDA (a child of a process that initialised the
     * runtime gets cudaErrorInitializationError at its first call): each child asks for itself */
    bool forked = getenv("DPT_TEST_FORK") != NULL;
    if (!forked && GPUS_VISIBLE() == 0) printf("test_cuda: skipped: no GPU visible\n");
    /* the riskiest last: cuDNN's rarer configurations (16 bits, channels-last), then NCCL */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_tensor_primitives),
        cmocka_unit_test(test_kv_cache_attention),
        cmocka_unit_test(test_dropout_masks),
        cmocka_unit_test(test_mix_pairs),
        cmocka_unit_test(test_checkpoint_on_device),
        cmocka_unit_test(test_layers),
        cmocka_unit_test(test_training_steps),
        cmocka_unit_test(test_loader_copy_stream),
        cmocka_unit_test(test_loader_image_files),
        cmocka_unit_test(test_gemm_bf16),
        cmocka_unit_test(test_layers_bf16),
        cmocka_unit_test(test_conv_models),
        cmocka_unit_test(test_gemm_fp16),
        cmocka_unit_test(test_layers_fp16),
        cmocka_unit_test(test_layers_nhwc),
        cmocka_unit_test(test_layers_nhwc_bf16),
        cmocka_unit_test(test_check_family),
        cmocka_unit_test(test_ddp_nccl_one_rank),
        cmocka_unit_test(test_dataparallel_two_gpus),
    };
    if (forked) return run_forked(tests, sizeof tests / sizeof tests[0], 120);
#ifdef DPT_TEST_HARNESS_ON_CPU
    return cmocka_run_group_tests_name("cuda harness (cpu vs cpu)", tests, NULL, NULL);
#else
    return cmocka_run_group_tests_name("cuda", tests, NULL, NULL);
#endif
}
