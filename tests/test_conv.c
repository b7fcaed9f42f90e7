/* test_conv.c: conv2d, batch norm (both modes), max/avg/global pooling and dropout against
 * double-precision references, backward against central differences, over many shapes:
 * stride 2, padding 0/1/2, dilation, non-square and odd inputs, 1x1, groups, batch 1. */
#include "tests/testutil.h"

#include "runtime/ctx.h"
#include "runtime/half.h"
#if DPT_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

/* ---------------------------------------------------------------- conv2d */

typedef struct conv_case {
    int64_t n, c, h, w, cout, k, s, p, d, g;
    bool bias;
    int64_t oh, ow;
    dpt_model *model;
    dpt_conv2d *layer;
} conv_case;

static void conv_setup(dpt_ctx *ctx, dpt_tensor **in, void *user)
{
    conv_case *c = user;
    c->model = dpt_model_new(ctx, "t", NULL);
    dpt_shape3 shape = {c->c, c->h, c->w};
    c->layer = dpt_conv2d_new(c->model, "conv", &shape, c->cout, c->k, c->s, c->p, c->d, c->g, c->bias);
    assert_null(dpt_model_error(c->model));
    c->oh = shape.h, c->ow = shape.w;
    in[1] = dpt_model_param_at(c->model, 0);
    if (c->bias) {
        in[2] = dpt_model_param_at(c->model, 1);
        dpt_init_uniform(ctx, in[2], 0.5f);
    }
}

static void conv_teardown(void *user)
{
    dpt_model_free(((conv_case *)user)->model);
}
static dpt_tensor *conv_build(dpt_ctx *ctx, dpt_tensor **in, void *user)
{
    return dpt_conv2d_forward(ctx, ((conv_case *)user)->layer, in[0]);
}

static void conv_ref(const double *const *in, double *out, void *user)
{
    const conv_case *c = user;
    int64_t cin_g = c->c / c->g, cout_g = c->cout / c->g;
    for (int64_t n = 0; n < c->n; n++)
        for (int64_t o = 0; o < c->cout; o++)
            for (int64_t y = 0; y < c->oh; y++)
                for (int64_t x = 0; x < c->ow; x++) {
                    double acc = c->bias ? in[2][o] : 0.0;
                    int64_t g = o / cout_g;
                    for (int64_t ci = 0; ci < cin_g; ci++)
                        for (int64_t ki = 0; ki < c->k; ki++)
                            for (int64_t kj = 0; kj < c->k; kj++) {
                                int64_t iy = y * c->s - c->p + ki * c->d, ix = x * c->s - c->p + kj * c->d;
                                if (iy < 0 || iy >= c->h || ix < 0 || ix >= c->w) continue;
                                acc += in[0][((n * c->c + g * cin_g + ci) * c->h + iy) * c->w + ix] *
                                       in[1][((o * cin_g + ci) * c->k + ki) * c->k + kj];
                            }
                    out[((n * c->cout + o) * c->oh + y) * c->ow + x] = acc;
                }
}

static void test_conv2d(void **state)
{
    (void)state;
    /* n, c, h, w, cout, k, s, p, d, g, bias */
    const int64_t cases[][11] = {
        {1, 1, 5, 5, 1, 3, 1, 0, 1, 1, 1},  {2, 3, 7, 6, 4, 3, 1, 1, 1, 1, 1},
        {2, 4, 8, 8, 6, 3, 2, 1, 1, 2, 0},  {1, 3, 5, 7, 2, 1, 1, 0, 1, 1, 1},
        {3, 2, 9, 9, 3, 3, 2, 2, 2, 1, 1},  {2, 4, 6, 6, 4, 3, 1, 1, 1, 4, 0},
        {1, 2, 4, 4, 3, 4, 1, 0, 1, 1, 1},  {4, 3, 5, 5, 2, 1, 2, 0, 1, 1, 0},
        {2, 6, 5, 3, 4, 1, 1, 0, 1, 2, 1},  {1, 1, 3, 3, 2, 3, 1, 2, 1, 1, 1},
        {3, 2, 11, 6, 2, 5, 2, 2, 1, 1, 0},
    };
    for (int variant = 0; variant < TEST_VARIANTS; variant++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            for (int threads = 1; threads <= 2; threads++) {
                test_variant(variant);
                const int64_t *v = cases[i];
                conv_case c = {v[0], v[1], v[2],       v[3], v[4], v[5], v[6], v[7],
                               v[8], v[9], v[10] != 0, 0,    0,    NULL, NULL};
                int64_t span = c.d * (c.k - 1) + 1;
                c.oh = (c.h + 2 * c.p - span) / c.s + 1, c.ow = (c.w + 2 * c.p - span) / c.s + 1;
                gradcheck gc = {
                    .n_in = c.bias ? 3 : 2,
                    .ndim = {4, 4, 1},
                    .shape = {{c.n, c.c, c.h, c.w}, {c.cout, c.c / c.g, c.k, c.k}, {c.cout}},
                    .lo = -1,
                    .hi = 1,
                    .setup = conv_setup,
                    .teardown = conv_teardown,
                    .build = conv_build,
                    .reference = conv_ref,
                    .user = &c,
                    .fwd_rtol = 1e-5,
                    .grad_rtol = 1e-4,
                    .grad_atol = 1e-5,
                    .threads = threads,
                };
                char name[128];
                snprintf(name, sizeof name, "conv2d case %zu (threads %d, %s)", i, threads,
                         test_kernels_name());
                run_gradcheck(name, &gc, 700 + i);
                test_variant(-1);
            }
}

/* ---------------------------------------------------------------- conv_transpose2d */

typedef struct convt_case {
    int64_t n, c, h, w, cout, k, s, p, op, d, g;
    bool bias;
    bool twice; /* out = up(x) + up(x): the second backward adds into x's and w's gradients */
    int64_t oh, ow;
    dpt_model *model;
    dpt_conv_transpose2d *layer;
} convt_case;

static void convt_setup(dpt_ctx *ctx, dpt_tensor **in, void *user)
{
    convt_case *c = user;
    c->model = dpt_model_new(ctx, "t", NULL);
    dpt_shape3 shape = {c->c, c->h, c->w};
    c->layer = dpt_conv_transpose2d_new(c->model, "up", &shape, c->cout, c->k, c->s, c->p, c->op, c->d, c->g, c->bias);
    assert_null(dpt_model_error(c->model));
    assert_int_equal(shape.c, c->cout);
    assert_int_equal(shape.h, c->oh); /* PyTorch's output size */
    assert_int_equal(shape.w, c->ow);
    in[1] = dpt_model_param_at(c->model, 0);
    if (c->bias) in[2] = dpt_model_param_at(c->model, 1);
}

static void convt_teardown(void *user)
{
    dpt_model_free(((convt_case *)user)->model);
}

static dpt_tensor *convt_build(dpt_ctx *ctx, dpt_tensor **in, void *user)
{
    convt_case *c = user;
    dpt_tensor *y = dpt_conv_transpose2d_forward(ctx, c->layer, in[0]);
    return c->twice ? dpt_add(ctx, y, dpt_conv_transpose2d_forward(ctx, c->layer, in[0])) : y;
}

/* The scatter form, as ConvTranspose2d is defined: each input x[n][ci][iy][ix] adds
 * x w[ci][o'][ki][kj] at output channel o = (ci's group) out/g + o', position (iy s - p + ki d,
 * ix s - p + kj d) where that is inside. */
static void convt_ref(const double *const *in, double *out, void *user)
{
    const convt_case *c = user;
    for (int64_t n = 0; n < c->n; n++)
        for (int64_t o = 0; o < c->cout; o++)
            for (int64_t i = 0; i < c->oh * c->ow; i++)
                out[(n * c->cout + o) * c->oh * c->ow + i] = c->bias ? in[2][o] : 0.0;
    for (int64_t n = 0; n < c->n; n++)
        for (int64_t ci = 0; ci < c->c; ci++)
            for (int64_t iy = 0; iy < c->h; iy++)
                for (int64_t ix = 0; ix < c->w; ix++) {
                    double v = in[0][((n * c->c + ci) * c->h + iy) * c->w + ix];
                    int64_t og = c->cout / c->g, group = ci / (c->c / c->g);
                    for (int64_t oo = 0; oo < og; oo++)
                        for (int64_t ki = 0; ki < c->k; ki++)
                            for (int64_t kj = 0; kj < c->k; kj++) {
                                int64_t oy = iy * c->s - c->p + ki * c->d, ox = ix * c->s - c->p + kj * c->d;
                                if (oy < 0 || oy >= c->oh || ox < 0 || ox >= c->ow) continue;
                                out[((n * c->cout + group * og + oo) * c->oh + oy) * c->ow + ox] +=
                                    v * in[1][((ci * og + oo) * c->k + ki) * c->k + kj];
                            }
                }
    if (c->twice)
        for (int64_t i = 0; i < c->n * c->cout * c->oh * c->ow; i++)
            out[i] *= 2.0;
}

static void test_conv_transpose2d(void **state)
{
    (void)state;
    /* n, c, h, w, cout, k, s, p, output_padding, dilation, groups, bias: DCGAN's and U-Net's doubling (k 4 s 2 p 1,
     * k 2 s 2), output_padding, padding past the kernel's reach, 1x1, 16 input channels (oneDNN's
     * blocked layout for the convolution's y), batch 1, non-square, dilation 2 (with an
     * output_padding the dilation allows), groups 2 and depthwise; the first and last used twice */
    const int64_t cases[][12] = {
        {2, 3, 4, 4, 2, 4, 2, 1, 0, 1, 1, 1},  {1, 2, 3, 5, 3, 2, 2, 0, 0, 1, 1, 1}, {2, 4, 3, 3, 2, 3, 2, 1, 1, 1, 1, 0},
        {3, 2, 5, 4, 4, 3, 1, 1, 0, 1, 1, 1},  {1, 3, 4, 4, 2, 1, 1, 0, 0, 1, 1, 0}, {2, 16, 3, 3, 2, 3, 2, 1, 1, 1, 1, 1},
        {1, 2, 2, 3, 2, 5, 3, 2, 2, 1, 1, 1},  {2, 1, 6, 2, 1, 3, 1, 0, 0, 1, 1, 0}, {2, 2, 4, 3, 3, 3, 1, 1, 1, 2, 1, 1},
        {2, 4, 3, 3, 6, 4, 2, 1, 0, 1, 2, 1},  {1, 4, 3, 4, 4, 3, 2, 1, 1, 1, 4, 0}, {2, 16, 3, 3, 3, 4, 2, 1, 0, 1, 1, 1},
    };
    /* one thread: a thread count splits the backend's convolution kernels, which test_conv2d
     * runs at 1 and 2 */
    for (int variant = 0; variant < TEST_VARIANTS; variant++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            test_variant(variant);
            const int64_t *v = cases[i];
            convt_case c = {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11] != 0,
                            i + 1 == sizeof cases / sizeof cases[0] || i == 0, 0, 0, NULL, NULL};
            c.oh = (c.h - 1) * c.s - 2 * c.p + c.d * (c.k - 1) + c.op + 1;
            c.ow = (c.w - 1) * c.s - 2 * c.p + c.d * (c.k - 1) + c.op + 1;
            gradcheck gc = {.n_in = c.bias ? 3 : 2, .ndim = {4, 4, 1},
                            .shape = {{c.n, c.c, c.h, c.w}, {c.c, c.cout / c.g, c.k, c.k}, {c.cout}}, .lo = -1, .hi = 1,
                            .setup = convt_setup, .teardown = convt_teardown, .build = convt_build,
                            .reference = convt_ref, .user = &c, .fwd_rtol = 1e-5, .grad_rtol = 1e-4,
                            .grad_atol = 1e-5};
            char name[128];
            snprintf(name, sizeof name, "conv_transpose2d case %zu (%s)", i, test_kernels_name());
            run_gradcheck(name, &gc, 900 + i);
            test_variant(-1);
        }
}

/* Misuse refused by the builder, naming the layer; the output shape of DCGAN's doubling. */
static void test_conv_transpose2d_layer(void **state)
{
    (void)state;
    dpt_ctx *ctx = test_ctx(1, 5);
    dpt_model *m = dpt_model_new(ctx, "t", NULL);
    dpt_shape3 shape = {1, 7, 7};
    dpt_conv_transpose2d_new(m, "bad", &shape, 2, 3, 2, 0, 2, 1, 1, true); /* output_padding 2 >= stride 2 */
    const char *e = dpt_model_error(m);
    assert_non_null(e);
    assert_non_null(strstr(e, "conv_transpose2d bad"));
    assert_non_null(strstr(e, "output_padding 2"));
    dpt_model_free(m);
    m = dpt_model_new(ctx, "t", NULL);
    shape = (dpt_shape3){1, 1, 1};
    dpt_conv_transpose2d_new(m, "tiny", &shape, 1, 1, 1, 1, 0, 1, 1, false); /* (1 - 1) 1 - 2 + 1 = -1 */
    assert_non_null(dpt_model_error(m));
    assert_non_null(strstr(dpt_model_error(m), "leaves no output"));
    dpt_model_free(m);
    m = dpt_model_new(ctx, "t", NULL);
    shape = (dpt_shape3){6, 4, 4};
    dpt_conv_transpose2d_new(m, "grouped", &shape, 4, 3, 1, 0, 0, 1, 4, true); /* 6 in-channels in 4 groups */
    assert_non_null(dpt_model_error(m));
    assert_non_null(strstr(dpt_model_error(m), "groups 4"));
    dpt_model_free(m);
    /* DCGAN's doubling; FLOPs a sample: 2 x the input's elements (3 x 4 x 4) x out k k (2 x 16) */
    m = dpt_model_new(ctx, "t", NULL);
    shape = (dpt_shape3){3, 4, 4};
    dpt_conv_transpose2d *up = dpt_conv_transpose2d_new(m, "up", &shape, 2, 4, 2, 1, 0, 1, 1, true);
    assert_null(dpt_model_error(m));
    assert_true(fabs(dpt_model_flops(m) - 2.0 * 48 * 32) < 1e-6);
    assert_int_equal(shape.c, 2), assert_int_equal(shape.h, 8), assert_int_equal(shape.w, 8);
    dpt_tensor *x = dpt_tensor_new(ctx, 4, (int64_t[]){2, 3, 4, 4});
    dpt_init_uniform(ctx, x, 1.0f);
    dpt_tensor *y = dpt_conv_transpose2d_forward(ctx, up, x);
    assert_int_equal(y->shape[0], 2), assert_int_equal(y->shape[1], 2), assert_int_equal(y->shape[2], 8);
    dpt_tape_clear(ctx);
    dpt_tensor_free(x);
    dpt_model_free(m);
    dpt_ctx_free(ctx);
}

/* A chain in which oneDNN keeps its blocked layout between layers: conv (8 -> 16) writes
 * nChw16c, batch norm (training) and the residual add run on it, the second conv (16 -> 16,
 * stride 2) reads it and writes it, and the checker reads the result back through a
 * relayout. Forward and every gradient against a float64 composition of the references. */
typedef struct chain_case {
    dpt_model *model;
    dpt_conv2d *conv1, *conv2;
    dpt_batchnorm *bn;
} chain_case;

static void chain_setup(dpt_ctx *ctx, dpt_tensor **in, void *user)
{
    chain_case *c = user;
    c->model = dpt_model_new(ctx, "chain", NULL);
    dpt_shape3 shape = {8, 6, 6};
    c->conv1 = dpt_conv2d_new(c->model, "conv1", &shape, 16, 3, 1, 1, 1, 1, false);
    c->bn = dpt_batchnorm_new(c->model, "bn", &shape, 0.1f, 1e-5f, true, false);
    c->conv2 = dpt_conv2d_new(c->model, "conv2", &shape, 16, 3, 2, 1, 1, 1, true);
    assert_null(dpt_model_error(c->model));
    for (int i = 0; i < 5; i++)
        in[1 + i] = dpt_model_param_at(c->model, i); /* conv1.w, bn.gamma, bn.beta, conv2.w, conv2.b */
    dpt_init_uniform(ctx, in[2], 1.0f);
    dpt_init_uniform(ctx, in[3], 0.5f);
    dpt_init_uniform(ctx, in[5], 0.5f);
}

static void chain_teardown(void *user)
{
    dpt_model_free(((chain_case *)user)->model);
}

static dpt_tensor *chain_build(dpt_ctx *ctx, dpt_tensor **in, void *user)
{
    chain_case *c = user;
    dpt_tensor *a = dpt_conv2d_forward(ctx, c->conv1, in[0]);
    dpt_tensor *b = dpt_add(ctx, dpt_batchnorm_forward(ctx, c->bn, a, true), a);
    return dpt_conv2d_forward(ctx, c->conv2, b);
}

/* y (n, co, oh, ow) = conv(x (n, ci, h, w), w (co, ci, k, k)) + bias, in double. */
static void conv_d(const double *x, const double *w, const double *bias, double *y, int64_t n, int64_t ci,
                   int64_t h, int64_t co, int64_t k, int64_t s, int64_t p, int64_t oh)
{
    for (int64_t b = 0; b < n; b++)
        for (int64_t o = 0; o < co; o++)
            for (int64_t oy = 0; oy < oh; oy++)
                for (int64_t ox = 0; ox < oh; ox++) {
                    double acc = bias ? bias[o] : 0.0;
                    for (int64_t c = 0; c < ci; c++)
                        for (int64_t ki = 0; ki < k; ki++)
                            for (int64_t kj = 0; kj < k; kj++) {
                                int64_t iy = oy * s - p + ki, ix = ox * s - p + kj;
                                if (iy < 0 || iy >= h || ix < 0 || ix >= h) continue;
                                acc +=
                                    x[((b * ci + c) * h + iy) * h + ix] * w[((o * ci + c) * k + ki) * k + kj];
                            }
                    y[((b * co + o) * oh + oy) * oh + ox] = acc;
                }
}

static void chain_ref(const double *const *in, double *out, void *user)
{
    (void)user;
    const int64_t n = 2, hw = 36;
    double a[2 * 16 * 36], b[2 * 16 * 36];
    conv_d(in[0], in[1], NULL, a, n, 8, 6, 16, 3, 1, 1, 6);
    for (int64_t ch = 0; ch < 16; ch++) {
        double mean = 0, var = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < hw; j++)
                mean += a[(i * 16 + ch) * hw + j];
        mean /= (double)(n * hw);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < hw; j++)
                var += (a[(i * 16 + ch) * hw + j] - mean) * (a[(i * 16 + ch) * hw + j] - mean);
        var /= (double)(n * hw);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < hw; j++) {
                int64_t at = (i * 16 + ch) * hw + j;
                b[at] = in[2][ch] * (a[at] - mean) / sqrt(var + 1e-5) + in[3][ch] + a[at];
            }
    }
    conv_d(b, in[4], in[5], out, n, 16, 6, 16, 3, 2, 1, 3);
}

/* A temporary read by a convolution and by an add: the add's backward runs first and writes
 * the temporary's gradient, the convolution must add to it (the first-writer shortcut must
 * not apply). out = conv(2x) + 2x, for both settings. */
static dpt_tensor *shared_build(dpt_ctx *ctx, dpt_tensor **in, void *user)
{
    dpt_tensor *t = dpt_scale(ctx, in[0], 2.0f);
    return dpt_add(ctx, dpt_conv2d_forward(ctx, ((conv_case *)user)->layer, t), t);
}

static void shared_ref(const double *const *in, double *out, void *user)
{
    const conv_case *c = user;
    int64_t n = c->n * c->c * c->h * c->w;
    double *t = malloc((size_t)n * sizeof *t);
    for (int64_t i = 0; i < n; i++)
        t[i] = 2.0 * in[0][i];
    conv_d(t, in[1], NULL, out, c->n, c->c, c->h, c->cout, c->k, c->s, c->p, c->oh);
    for (int64_t i = 0; i < n; i++)
        out[i] += t[i];
    free(t);
}

static void test_shared_input(void **state)
{
    (void)state;
    for (int kernels = DPT_CPU_KERNELS_ONEDNN; kernels <= DPT_CPU_KERNELS_NATIVE; kernels++) {
        test_kernels = (dpt_cpu_kernels)kernels;
        conv_case c = {2, 16, 5, 5, 16, 3, 1, 1, 1, 1, false, 5, 5, NULL, NULL};
        gradcheck gc = {.n_in = 2,
                        .ndim = {4, 4},
                        .shape = {{2, 16, 5, 5}, {16, 16, 3, 3}},
                        .lo = -1,
                        .hi = 1,
                        .setup = conv_setup,
                        .teardown = conv_teardown,
                        .build = shared_build,
                        .reference = shared_ref,
                        .user = &c,
                        .fwd_rtol = 1e-5,
                        .grad_rtol = 1e-4,
                        .grad_atol = 1e-5};
        char name[64];
        snprintf(name, sizeof name, "conv(2x) + 2x (%s)", test_kernels_name());
        run_gradcheck(name, &gc, 995);
        test_kernels = DPT_CPU_KERNELS_DEFAULT;
    }
}

static void test_blocked_chain(void **state)
{
    (void)state;
    for (int variant = 0; variant < TEST_VARIANTS; variant++)
        for (int threads = 1; threads <= 2; threads++) {
            test_variant(variant);
            chain_case c = {0};
            gradcheck gc = {
                .n_in = 6,
                .ndim = {4, 4, 1, 1, 4, 1},
                .shape = {{2, 8, 6, 6}, {16, 8, 3, 3}, {16}, {16}, {16, 16, 3, 3}, {16}},
                .lo = -1,
                .hi = 1,
                .setup = chain_setup,
                .teardown = chain_teardown,
                .build = chain_build,
                .reference = chain_ref,
                .user = &c,
                .fwd_rtol = 1e-4,
                .grad_rtol = 2e-3,
                .grad_atol = 1e-4,
                .threads = threads,
            };
            char name[96];
            snprintf(name, sizeof name, "conv-bn-add-conv chain (threads %d, %s)", threads,
                     test_kernels_name());
            run_gradcheck(name, &gc, 990);
            test_variant(-1);
        }
}

/* ---------------------------------------------------------------- batch norm */

typedef struct bn_case {
    int64_t n, c, h, w;
    bool training, affine;
    double running_mean[16], running_var[16];
    dpt_model *model;
    dpt_batchnorm *layer;
    bool relu; /* dpt_batchnorm_relu_forward: relu(bn(x)) */
} bn_case;

static void bn_setup(dpt_ctx *ctx, dpt_tensor **in, void *user)
{
    bn_case *c = user;
    c->model = dpt_model_new(ctx, "t", NULL);
    dpt_shape3 shape = {c->c, c->h, c->w};
    c->layer = dpt_batchnorm_new(c->model, "bn", &shape, 0.1f, 1e-5f, c->affine, false);
    if (c->affine) {
        in[1] = dpt_model_param_at(c->model, 0), in[2] = dpt_model_param_at(c->model, 1);
        dpt_init_uniform(ctx, in[1], 1.5f);
        dpt_init_uniform(ctx, in[2], 0.5f);
    }
    float rm[16], rv[16];
    for (int i = 0; i < c->c; i++)
        rm[i] = (float)c->running_mean[i], rv[i] = (float)c->running_var[i];
    dpt_tensor_copy_from_host(dpt_model_buffer_at(c->model, 0), rm);
    dpt_tensor_copy_from_host(dpt_model_buffer_at(c->model, 1), rv);
}

static void bn_teardown(void *user)
{
    dpt_model_free(((bn_case *)user)->model);
}
static dpt_tensor *bn_build(dpt_ctx *ctx, dpt_tensor **in, void *user)
{
    bn_case *c = user;
    if (!c->relu) return dpt_batchnorm_forward(ctx, c->layer, in[0], c->training);
    dpt_tensor *y = dpt_batchnorm_relu_forward(ctx, c->layer, in[0], c->training);
    /* oneDNN fuses the ReLU in training (one node, not a batch norm and a relu_) */
    const char *op = ctx->tape.nnodes ? ctx->tape.nodes[ctx->tape.nnodes - 1].op : "";
    bool fused = c->training && test_kernels == DPT_CPU_KERNELS_ONEDNN;
    if (fused != (strcmp(op, "batchnorm_relu") == 0))
        fail_msg("batchnorm_relu %s: the last node is %s", fused ? "fused" : "unfused", op);
    return y;
}

static void bn_ref(const double *const *in, double *out, void *user)
{
    const bn_case *c = user;
    int64_t hw = c->h * c->w;
    for (int64_t ch = 0; ch < c->c; ch++) {
        double mean = 0, var = 0, m = (double)(c->n * hw);
        if (c->training) {
            for (int64_t n = 0; n < c->n; n++)
                for (int64_t j = 0; j < hw; j++)
                    mean += in[0][(n * c->c + ch) * hw + j];
            mean /= m;
            for (int64_t n = 0; n < c->n; n++)
                for (int64_t j = 0; j < hw; j++) {
                    double d = in[0][(n * c->c + ch) * hw + j] - mean;
                    var += d * d;
                }
            var /= m;
        } else {
            mean = (float)c->running_mean[ch], var = (float)c->running_var[ch];
        }
        double g = c->affine ? in[1][ch] : 1.0, b = c->affine ? in[2][ch] : 0.0;
        for (int64_t n = 0; n < c->n; n++)
            for (int64_t j = 0; j < hw; j++) {
                int64_t i = (n * c->c + ch) * hw + j;
                out[i] = g * (in[0][i] - mean) / sqrt(var + 1e-5) + b;
                if (c->relu && out[i] < 0) out[i] = 0;
            }
    }
}

static void test_batchnorm(void **state)
{
    (void)state;
    const int64_t shapes[][4] = {{2, 1, 1, 3}, {1, 3, 4, 5}, {4, 2, 3, 3},
                                 {3, 5, 1, 1}, {2, 4, 7, 2}, {2, 16, 3, 3}};
    for (int kernels = DPT_CPU_KERNELS_ONEDNN; kernels <= DPT_CPU_KERNELS_NATIVE; kernels++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            for (int mode = 0; mode < 8; mode++) { /* bit 0 training, 1 affine, 2 ReLU fused after */
                test_kernels = (dpt_cpu_kernels)kernels;
                bn_case c = {shapes[i][0],
                             shapes[i][1],
                             shapes[i][2],
                             shapes[i][3],
                             mode & 1,
                             (mode & 2) != 0,
                             {0.1, -0.2, 0.3, 0.0, 0.5},
                             {1.5, 0.5, 2.0, 1.0, 0.8},
                             NULL,
                             NULL,
                             (mode & 4) != 0};
                for (int ch = 5; ch < 16; ch++) /* channels past the listed ones */
                    c.running_mean[ch] = 0.05 * ch, c.running_var[ch] = 0.5 + 0.1 * ch;
                gradcheck gc = {
                    .n_in = c.affine ? 3 : 1,
                    .ndim = {4, 1, 1},
                    .shape = {{c.n, c.c, c.h, c.w}, {c.c}, {c.c}},
                    .lo = -2,
                    .hi = 2,
                    .setup = bn_setup,
                    .teardown = bn_teardown,
                    .build = bn_build,
                    .reference = bn_ref,
                    .user = &c,
                    .fwd_rtol = 2e-5,
                    .grad_rtol = 2e-3,
                    .grad_atol = 2e-5,
                };
                char name[128];
                snprintf(name, sizeof name, "batchnorm%s (%lld,%lld,%lld,%lld) %s %s (%s)", c.relu ? "+relu" : "",
                         (long long)c.n, (long long)c.c, (long long)c.h, (long long)c.w,
                         c.training ? "train" : "eval", c.affine ? "affine" : "plain", test_kernels_name());
                gc.threads = 1 + (int)(i % 2);
                run_gradcheck(name, &gc, 800 + i * 4 + (uint64_t)mode);
                test_kernels = DPT_CPU_KERNELS_DEFAULT;
            }
}

static void test_batchnorm_running_stats(void **state)
{
    (void)state;
    dpt_ctx *ctx = test_ctx(1, 3);
    dpt_model *m = dpt_model_new(ctx, "t", NULL);
    dpt_shape3 shape = {2, 2, 2};
    dpt_batchnorm *bn = dpt_batchnorm_new(m, "bn", &shape, 0.1f, 1e-5f, true, false);
    dpt_tensor *x = dpt_tensor_new(ctx, 4, (int64_t[]){2, 2, 2, 2});
    for (int i = 0; i < 16; i++)
        dpt_tensor_data(x)[i] = (float)i;
    dpt_batchnorm_forward(ctx, bn, x, true);
    /* channel 0 holds 0,1,2,3,8,9,10,11: mean 5.5, unbiased var 138/7; running = 0.9 init + 0.1 batch */
    float rm[2], rv[2];
    dpt_tensor_copy_to_host(dpt_model_buffer_at(m, 0), rm);
    dpt_tensor_copy_to_host(dpt_model_buffer_at(m, 1), rv);
    assert_float_equal(rm[0], 0.55f, 1e-6);
    assert_float_equal(rv[0], 0.9f + 0.1f * 138.0f / 7.0f, 1e-5);
    assert_float_equal(rm[1], 0.95f, 1e-6);
    dpt_tape_clear(ctx);
    dpt_tensor_free(x);
    dpt_model_free(m);
    dpt_ctx_free(ctx);
}

/* ---------------------------------------------------------------- pooling */

typedef struct pool_case {
    int64_t n, c, h, w, k, s, p, oh, ow;
    int kind; /* 0 max, 1 avg, 2 global avg */
} pool_case;

static dpt_tensor *pool_build(dpt_ctx *ctx, dpt_tensor **in, void *user)
{
    const pool_case *c = user;
    if (c->kind == 0) return dpt_maxpool2d(ctx, in[0], c->k, c->s, c->p);
    if (c->kind == 1) return dpt_avgpool2d(ctx, in[0], c->k, c->s, c->p);
    return dpt_global_avgpool(ctx, in[0]);
}

static void pool_ref(const double *const *in, double *out, void *user)
{
    const pool_case *c = user;
    for (int64_t plane = 0; plane < c->n * c->c; plane++)
        for (int64_t y = 0; y < c->oh; y++)
            for (int64_t x = 0; x < c->ow; x++) {
                double best = -1e300, sum = 0;
                for (int64_t ki = 0; ki < c->k; ki++)
                    for (int64_t kj = 0; kj < c->k; kj++) {
                        int64_t iy = y * c->s - c->p + ki, ix = x * c->s - c->p + kj;
                        if (iy < 0 || iy >= c->h || ix < 0 || ix >= c->w) continue;
                        double v = in[0][(plane * c->h + iy) * c->w + ix];
                        best = v > best ? v : best;
                        sum += v;
                    }
                out[(plane * c->oh + y) * c->ow + x] = c->kind == 0 ? best : sum / (double)(c->k * c->k);
            }
}

static void pooling_cases(int threads);

static void test_pooling(void **state)
{
    (void)state;
    for (int kernels = DPT_CPU_KERNELS_ONEDNN; kernels <= DPT_CPU_KERNELS_NATIVE; kernels++)
        for (int threads = 1; threads <= 2; threads++) {
            test_kernels = (dpt_cpu_kernels)kernels;
            pooling_cases(threads);
            test_kernels = DPT_CPU_KERNELS_DEFAULT;
        }
}

/* Pooling on the blocked output of a convolution (oneDNN pools nChw16c as it is): conv
 * (2, 8, 6, 6) -> 16 channels, then max, average, global average, or max + average of the
 * same input (one backward writes the gradient first, the other adds into it). */
typedef struct conv_pool_case {
    conv_case conv; /* first: conv_setup and conv_teardown take this struct */
    int kind;       /* 0 max k2 s2, 1 avg k3 s2 p1, 2 global avg, 3 max k3 s2 p1 + avg k3 s2 p1 */
} conv_pool_case;

/* Whether oneDNN runs AVX-512 code here, where its blocked layout is nChw16c (ours); with
 * ONEDNN_MAX_CPU_ISA=AVX2 or on an AVX2 CPU it picks nChw8c, which we keep as NCHW. */
static bool onednn_avx512(void)
{
#if DPT_DNNL
    return dnnl_get_effective_cpu_isa() >= dnnl_cpu_isa_avx512_core;
#else
    return false;
#endif
}

static dpt_tensor *conv_pool_build(dpt_ctx *ctx, dpt_tensor **in, void *user)
{
    conv_pool_case *c = user;
    dpt_tensor *y = dpt_conv2d_forward(ctx, c->conv.layer, in[0]);
    if (test_channels_last)
        assert_int_equal(y->layout, DPT_LAYOUT_NHWC);
    else if (test_kernels == DPT_CPU_KERNELS_ONEDNN && onednn_avx512())
        assert_int_equal(y->layout, DPT_LAYOUT_NCHW16C); /* or this test would not test it */
    switch (c->kind) {
    case 0:
        return dpt_maxpool2d(ctx, y, 2, 2, 0);
    case 1:
        return dpt_avgpool2d(ctx, y, 3, 2, 1);
    case 2:
        return dpt_global_avgpool(ctx, y);
    default:
        return dpt_add(ctx, dpt_maxpool2d(ctx, y, 3, 2, 1), dpt_avgpool2d(ctx, y, 3, 2, 1));
    }
}

static void pool_d(const double *x, double *out, int64_t planes, int64_t h, int64_t w, int64_t k, int64_t s,
                   int64_t p, bool max, bool add)
{
    int64_t oh = (h + 2 * p - k) / s + 1, ow = (w + 2 * p - k) / s + 1;
    for (int64_t plane = 0; plane < planes; plane++)
        for (int64_t y = 0; y < oh; y++)
            for (int64_t xo = 0; xo < ow; xo++) {
                double best = -1e300, sum = 0;
                for (int64_t ki = 0; ki < k; ki++)
                    for (int64_t kj = 0; kj < k; kj++) {
                        int64_t iy = y * s - p + ki, ix = xo * s - p + kj;
                        if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                        double v = x[(plane * h + iy) * w + ix];
                        best = v > best ? v : best;
                        sum += v;
                    }
                double v = max ? best : sum / (double)(k * k);
                out[(plane * oh + y) * ow + xo] = add ? out[(plane * oh + y) * ow + xo] + v : v;
            }
}

static void conv_pool_ref(const double *const *in, double *out, void *user)
{
    const conv_pool_case *c = user;
    double a[2 * 16 * 36];
    conv_d(in[0], in[1], NULL, a, 2, 8, 6, 16, 3, 1, 1, 6);
    switch (c->kind) {
    case 0:
        pool_d(a, out, 32, 6, 6, 2, 2, 0, true, false);
        break;
    case 1:
        pool_d(a, out, 32, 6, 6, 3, 2, 1, false, false);
        break;
    case 2:
        pool_d(a, out, 32, 6, 6, 6, 1, 0, false, false);
        break;
    default:
        pool_d(a, out, 32, 6, 6, 3, 2, 1, true, false), pool_d(a, out, 32, 6, 6, 3, 2, 1, false, true);
    }
}

static void test_pooling_blocked(void **state)
{
    (void)state;
    static const char *names[] = {"maxpool", "avgpool", "global avgpool", "maxpool + avgpool"};
    for (int variant = 0; variant < TEST_VARIANTS; variant++)
        for (int threads = 1; threads <= 2; threads++)
            for (int kind = 0; kind < 4; kind++) {
                test_variant(variant);
                conv_pool_case c = {{2, 8, 6, 6, 16, 3, 1, 1, 1, 1, false, 6, 6, NULL, NULL}, kind};
                gradcheck gc = {.n_in = 2,
                                .ndim = {4, 4},
                                .shape = {{2, 8, 6, 6}, {16, 8, 3, 3}},
                                .lo = -1,
                                .hi = 1,
                                .setup = conv_setup,
                                .teardown = conv_teardown,
                                .build = conv_pool_build,
                                .reference = conv_pool_ref,
                                .user = &c,
                                .fwd_rtol = 1e-5,
                                .grad_rtol = 1e-3,
                                .grad_atol = 1e-5,
                                .threads = threads};
                char name[96];
                snprintf(name, sizeof name, "conv -> %s (threads %d, %s)", names[kind], threads,
                         test_kernels_name());
                run_gradcheck(name, &gc, 960 + (uint64_t)kind);
                test_variant(-1);
            }
}

static void pooling_cases(int threads)
{
    /* n, c, h, w, k, s, p */
    const int64_t cases[][7] = {{1, 1, 4, 4, 2, 2, 0}, {2, 3, 7, 5, 3, 2, 1}, {1, 2, 5, 5, 3, 1, 1},
                                {3, 1, 6, 9, 2, 1, 0}, {1, 2, 8, 8, 3, 3, 0}, {2, 2, 1, 1, 1, 1, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int kind = 0; kind < 2; kind++) {
            const int64_t *v = cases[i];
            pool_case c = {v[0],
                           v[1],
                           v[2],
                           v[3],
                           v[4],
                           v[5],
                           v[6],
                           (v[2] + 2 * v[6] - v[4]) / v[5] + 1,
                           (v[3] + 2 * v[6] - v[4]) / v[5] + 1,
                           kind};
            gradcheck gc = {.n_in = 1,
                            .ndim = {4},
                            .shape = {{c.n, c.c, c.h, c.w}},
                            .lo = -2,
                            .hi = 2,
                            .build = pool_build,
                            .reference = pool_ref,
                            .user = &c,
                            .fwd_rtol = 1e-6,
                            .grad_rtol = 1e-4,
                            .grad_atol = 1e-6,
                            .threads = threads};
            char name[96];
            snprintf(name, sizeof name, "%s case %zu (threads %d, %s)", kind ? "avgpool" : "maxpool", i,
                     threads, test_kernels_name());
            run_gradcheck(name, &gc, 900 + i * 2 + (uint64_t)kind);
        }
    pool_case g = {2, 3, 5, 5, 5, 1, 0, 1, 1, 2};
    gradcheck gc = {.n_in = 1,
                    .ndim = {4},
                    .shape = {{2, 3, 5, 5}},
                    .lo = -2,
                    .hi = 2,
                    .build = pool_build,
                    .reference = pool_ref,
                    .user = &g,
                    .fwd_rtol = 1e-6,
                    .grad_rtol = 1e-4,
                    .grad_atol = 1e-6,
                    .threads = threads};
    run_gradcheck("global_avgpool", &gc, 950);
}

static void test_dropout(void **state)
{
    (void)state;
    dpt_ctx *ctx = test_ctx(1, 4);
    dpt_rng rng;
    dpt_rng_seed(&rng, 1);
    dpt_tensor *x = test_input(ctx, &rng, 2, (int64_t[]){50, 40}, 1, 2);
    dpt_tensor *y = dpt_dropout(ctx, x, 0.25f, true);
    int64_t zeros = 0;
    for (int64_t i = 0; i < 2000; i++) {
        float r = y->data[i] / x->data[i];
        assert_true(r == 0.0f || fabsf(r - 4.0f / 3.0f) < 1e-5f);
        zeros += r == 0.0f;
    }
    assert_true(zeros > 400 && zeros < 600); /* 25% of 2000, within 4.5 sigma */
    dpt_backward(ctx, dpt_sum(ctx, y));
    for (int64_t i = 0; i < 2000; i++)
        assert_float_equal(x->grad->data[i], y->data[i] / x->data[i], 1e-6);
    assert_ptr_equal(dpt_dropout(ctx, x, 0.25f, false), x); /* eval: identity */
    dpt_tape_clear(ctx);
    dpt_tensor_free(x);
    dpt_ctx_free(ctx);
}

static void test_build_errors(void **state)
{
    (void)state;
    dpt_ctx *ctx = test_ctx(1, 1);
    dpt_model *m = dpt_model_new(ctx, "t", NULL);
    dpt_shape3 s = {3, 5, 5};
    dpt_conv2d_new(m, "big", &s, 8, 7, 1, 0, 1, 1, false);
    assert_non_null(dpt_model_error(m));
    assert_contains(dpt_model_error(m),
                    "conv2d big: kernel 7 (dilation 1) is larger than the padded input 5x5");
    dpt_model_free(m);
    m = dpt_model_new(ctx, "t", NULL);
    s = (dpt_shape3){6, 8, 8};
    dpt_conv2d_new(m, "grouped", &s, 8, 3, 1, 1, 1, 4, false);
    assert_contains(dpt_model_error(m), "conv2d grouped: 6 -> 8 channels");
    assert_contains(dpt_model_error(m), "divisible by groups");
    dpt_model_free(m);
    m = dpt_model_new(ctx, "t", NULL);
    s = (dpt_shape3){2, 3, 3};
    assert_false(dpt_pool_shape_update(m, "pool", &s, 4, 2, 0));
    assert_contains(dpt_model_error(m),
                    "pool pool: kernel 4, stride 2, padding 0 does not fit the input (2, 3, 3)");
    dpt_model_free(m);
    dpt_ctx_free(ctx);
}

/* [train] precision = bf16: oneDNN's bf16 convolutions must be exactly the float64
 * convolution of the bf16-rounded operands (x and w forward, dy and w for dx, x and dy for
 * dw), up to fp32 accumulation: rounding is the only error they add. y is fp32 with
 * bf16_activations = false; with them (the default) it is a bf16 number, the reference
 * rounded to nearest (half an ulp, 2^-8 of it, plus the accumulation's error). Shapes: 3x3
 * stride 1 and 2, 1x1, a first layer of one channel, 64 channels. */
static double bf(float v)
{
    return (double)dpt_f32_from_bf16(dpt_bf16_from_f32(v));
}

static bool is_bf16(float v)
{
    return (dpt_f32_bits(v) & 0xffffu) == 0;
}

static dpt_ctx *bf16_ctx(bool fp32_activations)
{
    dpt_error err;
    dpt_ctx_options o = {.device = {DPT_DEVICE_CPU, 0}, .threads = 2, .seed = 3, .precision = DPT_PRECISION_BF16,
                         .fp32_activations = fp32_activations};
    dpt_ctx *ctx = dpt_ctx_new(&o, &err);
    if (!ctx) fail_msg("%s", err.msg);
    const char *why;
    if (dpt_ctx_precision(ctx, &why) != DPT_PRECISION_BF16) {
        print_message("skipped: %s\n", why);
        dpt_ctx_free(ctx);
        skip();
    }
    assert_int_equal(dpt_ctx_bf16_activations(ctx), !fp32_activations);
    return ctx;
}

static void conv2d_bf16_cases(bool act16)
{
    dpt_ctx *ctx = bf16_ctx(!act16);
    const int64_t cases[][7] = {/* n, c, hw, cout, k, stride, pad */
                                {2, 16, 9, 32, 3, 1, 1},
                                {2, 32, 10, 16, 3, 2, 1},
                                {3, 16, 7, 64, 1, 1, 0},
                                {2, 1, 12, 16, 3, 1, 1},
                                {1, 64, 6, 64, 3, 1, 1}};
    dpt_rng rng;
    dpt_rng_seed(&rng, 11);
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        int64_t n = cases[t][0], c = cases[t][1], hw = cases[t][2], co = cases[t][3], k = cases[t][4],
                st = cases[t][5], pd = cases[t][6];
        dpt_model *m = dpt_model_new(ctx, "t", NULL);
        dpt_shape3 shape = {c, hw, hw};
        dpt_conv2d *layer = dpt_conv2d_new(m, "conv", &shape, co, k, st, pd, 1, 1, true);
        int64_t oh = shape.h, ow = shape.w, nx = n * c * hw * hw, ny = n * co * oh * ow, nw = co * c * k * k;
        dpt_tensor *w = dpt_model_param_at(m, 0), *b = dpt_model_param_at(m, 1);
        dpt_init_uniform(ctx, b, 0.5f);
        dpt_tensor *x = test_input(ctx, &rng, 4, (int64_t[]){n, c, hw, hw}, -1, 1);
        dpt_tensor *g = test_input(ctx, &rng, 2, (int64_t[]){n, co * oh * ow}, -1, 1);
        dpt_tensor *y = dpt_conv2d_forward(ctx, layer, x);
        dpt_backward(ctx, dpt_sum(ctx, dpt_mul(ctx, dpt_flatten(ctx, y), g)));
        float *hx = malloc(sizeof(float) * (size_t)nx), *hw_ = malloc(sizeof(float) * (size_t)nw),
              *hb = malloc(sizeof(float) * (size_t)co), *hg = malloc(sizeof(float) * (size_t)ny),
              *hy = malloc(sizeof(float) * (size_t)ny), *hdx = malloc(sizeof(float) * (size_t)nx),
              *hdw = malloc(sizeof(float) * (size_t)nw);
        double *ry = calloc((size_t)ny, sizeof(double)), *rdx = calloc((size_t)nx, sizeof(double)),
               *rdw = calloc((size_t)nw, sizeof(double));
        dpt_tensor_copy_to_host(x, hx), dpt_tensor_copy_to_host(w, hw_), dpt_tensor_copy_to_host(b, hb);
        dpt_tensor_copy_to_host(g, hg), dpt_tensor_copy_to_host(y, hy);
        dpt_tensor_copy_to_host(dpt_tensor_grad(x), hdx), dpt_tensor_copy_to_host(dpt_tensor_grad(w), hdw);
        for (int64_t in = 0; in < n; in++)
            for (int64_t oc = 0; oc < co; oc++)
                for (int64_t yy = 0; yy < oh; yy++)
                    for (int64_t xx = 0; xx < ow; xx++) {
                        int64_t yi = ((in * co + oc) * oh + yy) * ow + xx;
                        double acc = hb[oc], gy = bf(hg[yi]);
                        for (int64_t ci = 0; ci < c; ci++)
                            for (int64_t ki = 0; ki < k; ki++)
                                for (int64_t kj = 0; kj < k; kj++) {
                                    int64_t iy = yy * st - pd + ki, ix = xx * st - pd + kj;
                                    if (iy < 0 || iy >= hw || ix < 0 || ix >= hw) continue;
                                    int64_t xi = ((in * c + ci) * hw + iy) * hw + ix, wi = ((oc * c + ci) * k + ki) * k + kj;
                                    acc += bf(hx[xi]) * bf(hw_[wi]);
                                    rdx[xi] += gy * bf(hw_[wi]);
                                    rdw[wi] += gy * bf(hx[xi]);
                                }
                        ry[yi] = acc;
                    }
        const struct { const char *what; const float *got; const double *want; int64_t count; } check[3] = {
            {"y", hy, ry, ny}, {"dx", hdx, rdx, nx}, {"dw", hdw, rdw, nw}};
        for (int q = 0; q < 3; q++) {
            double scale = 0, worst = 0;
            bool rounded = act16 && q == 0; /* y stored in bf16 */
            for (int64_t i = 0; i < check[q].count; i++)
                scale = fmax(scale, fabs(check[q].want[i]));
            for (int64_t i = 0; i < check[q].count; i++) {
                double err = fabs(check[q].got[i] - check[q].want[i]);
                if (rounded) {
                    if (!is_bf16(check[q].got[i])) fail_msg("case %zu: y[%lld] = %.9g is not a bf16 number", t, (long long)i, check[q].got[i]);
                    err -= 0x1p-8 * fabs(check[q].want[i]); /* what rounding to bf16 may add */
                }
                worst = fmax(worst, err);
            }
            if (worst > 1e-5 * scale + 1e-6)
                fail_msg("case %zu %s%s: bf16 convolution off the bf16-operand reference by %g (scale %g)", t,
                         check[q].what, rounded ? " (beyond its bf16 rounding)" : "", worst, scale);
        }
        free(hx), free(hw_), free(hb), free(hg), free(hy), free(hdx), free(hdw), free(ry), free(rdx), free(rdw);
        dpt_tape_clear(ctx);
        dpt_tensor_free(x), dpt_tensor_free(g);
        dpt_model_free(m);
    }
    dpt_ctx_free(ctx);
}

static void test_conv2d_bf16(void **state)
{
    (void)state;
    conv2d_bf16_cases(false);
    conv2d_bf16_cases(true);
}

/* 16-bit activations through a residual block, each op against float64 on the values it was
 * given (read back through dpt_tensor_copy_to_host, which widens them): conv -> batch norm ->
 * relu -> conv -> + skip -> global average pool, in nChw16c (16 channels). Batch norm's
 * output is the float64 normalisation of its bf16 input rounded to bf16; relu and the add are
 * exact on bf16 numbers; the second convolution reads a bf16 input and its weight gradient
 * is the float64 product of that input and the bf16-rounded pooling gradient. */
static void test_bf16_activation_block(void **state)
{
    (void)state;
    dpt_ctx *ctx = bf16_ctx(false);
    const int64_t n = 4, c = 3, hw = 8, co = 16, sp = hw * hw, ny = n * co * sp;
    dpt_model *m = dpt_model_new(ctx, "t", NULL);
    dpt_shape3 shape = {c, hw, hw};
    dpt_conv2d *c1 = dpt_conv2d_new(m, "c1", &shape, co, 3, 1, 1, 1, 1, false);
    dpt_batchnorm *bn = dpt_batchnorm_new(m, "bn", &shape, 0.1f, 1e-5f, true, false);
    dpt_conv2d *c2 = dpt_conv2d_new(m, "c2", &shape, co, 3, 1, 1, 1, 1, false);
    dpt_rng rng;
    dpt_rng_seed(&rng, 5);
    dpt_tensor *x = test_input(ctx, &rng, 4, (int64_t[]){n, c, hw, hw}, -1, 1);
    dpt_tensor *g = test_input(ctx, &rng, 2, (int64_t[]){n, co}, -1, 1);
    dpt_tensor *y1 = dpt_conv2d_forward(ctx, c1, x);
    dpt_tensor *z = dpt_batchnorm_forward(ctx, bn, y1, true);
    dpt_tensor *r = dpt_relu(ctx, z);
    dpt_tensor *y2 = dpt_conv2d_forward(ctx, c2, r);
    dpt_tensor *sum = dpt_add(ctx, y2, r);
    dpt_tensor *pooled = dpt_global_avgpool(ctx, sum);
    const dpt_tensor *acts[] = {y1, z, r, y2, sum};
    for (int i = 0; i < 5; i++) /* kept in 16 bits, blocked */
        assert_true(acts[i]->dtype == DPT_BF16 && acts[i]->layout == DPT_LAYOUT_NCHW16C);
    assert_true(pooled->dtype == DPT_F32);
    dpt_backward(ctx, dpt_sum(ctx, dpt_mul(ctx, pooled, g)));
    float *h[5], *hw2 = malloc(sizeof(float) * (size_t)(co * co * 9)), *hdw2 = malloc(sizeof(float) * (size_t)(co * co * 9)),
                 hg[64], hp[64];
    for (int i = 0; i < 5; i++) {
        h[i] = malloc(sizeof(float) * (size_t)ny);
        dpt_tensor_copy_to_host(acts[i], h[i]);
        for (int64_t j = 0; j < ny; j++)
            if (!is_bf16(h[i][j])) fail_msg("activation %d holds %.9g, not a bf16 number", i, h[i][j]);
    }
    dpt_tensor *w2 = dpt_model_param_at(m, 3);
    assert_string_equal(dpt_tensor_name(w2), "c2.weight");
    dpt_tensor_copy_to_host(w2, hw2), dpt_tensor_copy_to_host(dpt_tensor_grad(w2), hdw2);
    dpt_tensor_copy_to_host(g, hg), dpt_tensor_copy_to_host(pooled, hp);
    float *hy1 = h[0], *hz = h[1], *hr = h[2], *hy2 = h[3], *hs = h[4];
    double worst = 0;
    for (int64_t ch = 0; ch < co; ch++) { /* batch norm: gamma 1, beta 0 at init */
        double mean = 0, var = 0;
        for (int64_t b = 0; b < n; b++)
            for (int64_t i = 0; i < sp; i++)
                mean += hy1[(b * co + ch) * sp + i];
        mean /= (double)(n * sp);
        for (int64_t b = 0; b < n; b++)
            for (int64_t i = 0; i < sp; i++)
                var += pow(hy1[(b * co + ch) * sp + i] - mean, 2);
        var /= (double)(n * sp);
        for (int64_t b = 0; b < n; b++)
            for (int64_t i = 0; i < sp; i++) {
                int64_t k = (b * co + ch) * sp + i;
                double want = (hy1[k] - mean) / sqrt(var + 1e-5);
                worst = fmax(worst, fabs(hz[k] - want) - 0x1p-8 * fabs(want));
            }
    }
    if (worst > 1e-4) fail_msg("batch norm on bf16: off the float64 normalisation beyond rounding by %g", worst);
    for (int64_t k = 0; k < ny; k++) {
        assert_true(hr[k] == (hz[k] > 0 ? hz[k] : 0.0f));
        assert_true(hs[k] == dpt_f32_from_bf16(dpt_bf16_from_f32(hy2[k] + hr[k])));
    }
    double scale = 0;
    worst = 0;
    double *rdw = calloc((size_t)(co * co * 9), sizeof(double));
    for (int64_t b = 0; b < n; b++)
        for (int64_t oc = 0; oc < co; oc++) {
            double dy = bf(hg[b * co + oc] / (float)sp), mean = 0; /* the pooling gradient, rounded for the conv */
            for (int64_t yy = 0; yy < hw; yy++)
                for (int64_t xx = 0; xx < hw; xx++) {
                    double acc = 0;
                    for (int64_t ci = 0; ci < co; ci++)
                        for (int64_t ki = 0; ki < 3; ki++)
                            for (int64_t kj = 0; kj < 3; kj++) {
                                int64_t iy = yy - 1 + ki, ix = xx - 1 + kj;
                                if (iy < 0 || iy >= hw || ix < 0 || ix >= hw) continue;
                                int64_t xi = ((b * co + ci) * hw + iy) * hw + ix, wi = ((oc * co + ci) * 3 + ki) * 3 + kj;
                                acc += hr[xi] * bf(hw2[wi]);
                                rdw[wi] += dy * hr[xi];
                            }
                    int64_t yi = (b * co + oc) * sp + yy * hw + xx;
                    scale = fmax(scale, fabs(acc));
                    worst = fmax(worst, fabs(hy2[yi] - acc) - 0x1p-8 * fabs(acc));
                    mean += hs[yi];
                }
            assert_float_equal(hp[b * co + oc], mean / (double)sp, 1e-5);
        }
    if (worst > 1e-5 * scale + 1e-6) fail_msg("conv on a bf16 input: off the reference beyond rounding by %g", worst);
    double dscale = 0, dworst = 0;
    for (int64_t i = 0; i < co * co * 9; i++)
        dscale = fmax(dscale, fabs(rdw[i])), dworst = fmax(dworst, fabs(hdw2[i] - rdw[i]));
    if (dworst > 1e-5 * dscale + 1e-7)
        fail_msg("weight gradient from a bf16 input off the float64 one by %g (scale %g)", dworst, dscale);
    for (int i = 0; i < 5; i++)
        free(h[i]);
    free(hw2), free(hdw2), free(rdw);
    dpt_tape_clear(ctx);
    dpt_tensor_free(x), dpt_tensor_free(g);
    dpt_model_free(m);
    dpt_ctx_free(ctx);
}

/* Max and average pooling on 16-bit activations (oneDNN pools bf16, its backward runs in fp32
 * on the same maxima): an identity 1x1 convolution makes x's integers (exact in bf16, no two
 * equal in a window) a bf16 activation; the max pool equals the window maxima exactly, the
 * average pool the window means rounded to bf16, and the convolution's weight gradient, which
 * the pools' backward feeds, the float64 one from the routed and spread gradients. */
static void test_bf16_pooling(void **state)
{
    (void)state;
    dpt_ctx *ctx = bf16_ctx(false);
    const int64_t n = 2, c = 16, hw = 8, sp = hw * hw, nx = n * c * sp, mo = 4, ao = 4;
    dpt_model *m = dpt_model_new(ctx, "t", NULL);
    dpt_shape3 shape = {c, hw, hw};
    dpt_conv2d *conv = dpt_conv2d_new(m, "id", &shape, c, 1, 1, 0, 1, 1, false);
    float *hwt = calloc((size_t)(c * c), sizeof *hwt), *hx = malloc(sizeof(float) * (size_t)nx);
    for (int64_t i = 0; i < c; i++)
        hwt[i * c + i] = 1.0f;
    dpt_tensor_copy_from_host(dpt_model_param_at(m, 0), hwt);
    for (int64_t b = 0; b < n; b++)
        for (int64_t ch = 0; ch < c; ch++)
            for (int64_t y = 0; y < hw; y++)
                for (int64_t x = 0; x < hw; x++)
                    hx[((b * c + ch) * hw + y) * hw + x] = (float)((b * 7 + ch * 13 + y * 17 + x * 19) % 251 - 125);
    dpt_tensor *x = dpt_tensor_new(ctx, 4, (int64_t[]){n, c, hw, hw});
    dpt_tensor_copy_from_host(x, hx);
    dpt_rng rng;
    dpt_rng_seed(&rng, 3);
    dpt_tensor *g1 = test_input(ctx, &rng, 4, (int64_t[]){n, c, mo, mo}, -1, 1);
    dpt_tensor *g2 = test_input(ctx, &rng, 4, (int64_t[]){n, c, ao, ao}, -1, 1);
    dpt_tensor *y = dpt_conv2d_forward(ctx, conv, x);
    dpt_tensor *mp = dpt_maxpool2d(ctx, y, 3, 2, 1), *ap = dpt_avgpool2d(ctx, y, 2, 2, 0);
    assert_true(y->dtype == DPT_BF16 && mp->dtype == DPT_BF16 && ap->dtype == DPT_BF16);
    dpt_backward(ctx, dpt_add(ctx, dpt_sum(ctx, dpt_mul(ctx, mp, g1)), dpt_sum(ctx, dpt_mul(ctx, ap, g2))));
    float hmp[2 * 16 * 16], hap[2 * 16 * 16], hg1[2 * 16 * 16], hg2[2 * 16 * 16], hdw[16 * 16];
    dpt_tensor_copy_to_host(mp, hmp), dpt_tensor_copy_to_host(ap, hap);
    dpt_tensor_copy_to_host(g1, hg1), dpt_tensor_copy_to_host(g2, hg2);
    dpt_tensor_copy_to_host(dpt_tensor_grad(dpt_model_param_at(m, 0)), hdw);
    double *dy = calloc((size_t)nx, sizeof *dy), rdw[16 * 16] = {0};
    for (int64_t p = 0; p < n * c; p++) {
        const float *xp = hx + p * sp;
        for (int64_t oy = 0; oy < mo; oy++)
            for (int64_t ox = 0; ox < mo; ox++) { /* 3x3, stride 2, padding 1 */
                int64_t best = -1;
                for (int64_t ky = 0; ky < 3; ky++)
                    for (int64_t kx = 0; kx < 3; kx++) {
                        int64_t iy = oy * 2 - 1 + ky, ix = ox * 2 - 1 + kx;
                        if (iy < 0 || iy >= hw || ix < 0 || ix >= hw) continue;
                        if (best < 0 || xp[iy * hw + ix] > xp[best]) best = iy * hw + ix;
                    }
                assert_float_equal(hmp[p * mo * mo + oy * mo + ox], xp[best], 0.0);
                dy[p * sp + best] += hg1[p * mo * mo + oy * mo + ox];
            }
        for (int64_t oy = 0; oy < ao; oy++)
            for (int64_t ox = 0; ox < ao; ox++) { /* 2x2, stride 2 */
                double mean = 0;
                for (int64_t k = 0; k < 4; k++)
                    mean += xp[(oy * 2 + k / 2) * hw + ox * 2 + k % 2] / 4.0;
                double got = hap[p * ao * ao + oy * ao + ox];
                if (!(fabs(got - mean) <= 0x1p-8 * fabs(mean) + 1e-6)) fail_msg("avgpool %g, mean %g", got, mean);
                for (int64_t k = 0; k < 4; k++)
                    dy[p * sp + (oy * 2 + k / 2) * hw + ox * 2 + k % 2] += hg2[p * ao * ao + oy * ao + ox] / 4.0f;
            }
    }
    double scale = 0, worst = 0;
    for (int64_t b = 0; b < n; b++)
        for (int64_t oc = 0; oc < c; oc++)
            for (int64_t q = 0; q < sp; q++) {
                double d = bf((float)dy[(b * c + oc) * sp + q]); /* the conv reads dy in bf16 */
                for (int64_t ci = 0; ci < c; ci++)
                    rdw[oc * c + ci] += d * hx[(b * c + ci) * sp + q];
            }
    for (int64_t i = 0; i < c * c; i++)
        scale = fmax(scale, fabs(rdw[i])), worst = fmax(worst, fabs(hdw[i] - rdw[i]));
    if (worst > 1e-5 * scale) fail_msg("weight gradient through bf16 pooling off by %g (scale %g)", worst, scale);
    free(dy), free(hwt), free(hx);
    dpt_tape_clear(ctx);
    dpt_tensor_free(x), dpt_tensor_free(g1), dpt_tensor_free(g2);
    dpt_model_free(m);
    dpt_ctx_free(ctx);
}

/* GEMMs under precision = bf16 (oneDNN's bf16 matmul): C = A B^T with B a transposed view,
 * and backward's accumulating products (beta = 1, both transposes): each equals the float64
 * product of the bf16-rounded operands to fp32 accumulation's error. */
static void test_bf16_gemm(void **state)
{
    (void)state;
    dpt_ctx *ctx = bf16_ctx(false);
    const int64_t M = 13, K = 37, N = 9;
    dpt_rng rng;
    dpt_rng_seed(&rng, 21);
    dpt_tensor *a = test_input(ctx, &rng, 2, (int64_t[]){M, K}, -1, 1);
    dpt_tensor *bt = test_input(ctx, &rng, 2, (int64_t[]){N, K}, -1, 1); /* B = bt^T */
    dpt_tensor *g = test_input(ctx, &rng, 2, (int64_t[]){M, N}, -1, 1);
    dpt_tensor *c = dpt_matmul(ctx, a, dpt_transpose(ctx, bt));
    dpt_backward(ctx, dpt_sum(ctx, dpt_mul(ctx, c, g)));
    float ha[13 * 37], hb[9 * 37], hg[13 * 9], hc[13 * 9], hda[13 * 37], hdb[9 * 37];
    dpt_tensor_copy_to_host(a, ha), dpt_tensor_copy_to_host(bt, hb), dpt_tensor_copy_to_host(g, hg);
    dpt_tensor_copy_to_host(c, hc), dpt_tensor_copy_to_host(dpt_tensor_grad(a), hda);
    dpt_tensor_copy_to_host(dpt_tensor_grad(bt), hdb);
    double rc[13 * 9] = {0}, rda[13 * 37] = {0}, rdb[9 * 37] = {0};
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++)
            for (int64_t k = 0; k < K; k++) {
                rc[i * N + j] += bf(ha[i * K + k]) * bf(hb[j * K + k]);
                rda[i * K + k] += bf(hg[i * N + j]) * bf(hb[j * K + k]);
                rdb[j * K + k] += bf(ha[i * K + k]) * bf(hg[i * N + j]);
            }
    const struct { const char *what; const float *got; const double *want; int64_t n; } chk[3] = {
        {"C", hc, rc, M * N}, {"dA", hda, rda, M * K}, {"dB", hdb, rdb, N * K}};
    for (int q = 0; q < 3; q++) {
        double scale = 0, worst = 0;
        for (int64_t i = 0; i < chk[q].n; i++)
            scale = fmax(scale, fabs(chk[q].want[i])), worst = fmax(worst, fabs(chk[q].got[i] - chk[q].want[i]));
        if (worst > 1e-5 * scale + 1e-6) fail_msg("bf16 GEMM %s off by %g (scale %g)", chk[q].what, worst, scale);
    }
    /* the start-up measure behind the trainer's "bf16 saves memory here, not time" warning: a
     * ratio of two timings of the same product (a plausible one: bf16 neither free nor 20x
     * slower), and no measure at all under fp32 */
    double speedup = dpt_ctx_bf16_speedup(ctx);
    if (!(speedup > 0.05 && speedup < 20)) fail_msg("bf16 speedup %g", speedup);
    print_message("bf16 matrix product at %.2fx fp32's on this CPU\n", speedup);
    dpt_tape_clear(ctx);
    dpt_tensor_free(a), dpt_tensor_free(bt), dpt_tensor_free(g);
    dpt_ctx_free(ctx);
    dpt_ctx *f32 = test_ctx(1, 3);
    assert_true(dpt_ctx_bf16_speedup(f32) == 0.0);
    dpt_ctx_free(f32);
}

/* ---------------------------------------------------------------- channels last */

/* One model, built from the same seed in a default context and in a [train] memory_format =
 * nhwc one: a training step (loss and every parameter's gradient) and an evaluation forward
 * (batch norm's inference path, no tape) agree. Each layer's NHWC kernels are checked against
 * float64 above; this checks what joins them: the first convolution reading NCHW images, the
 * residual adds and relu in place on NHWC, max pooling after the stem, global pooling and the
 * flatten into the classifier (NHWC -> NCHW once), and the eval path. The two differ only in
 * the order oneDNN sums in, so each parameter's gradient is compared as a whole, its distance
 * relative to its norm: measured 1e-6 (ResNet-8, the CNN) to 4e-4 (ResNet-18 at 32x32, whose
 * last stage normalises 4 values per channel: the native kernels differ from oneDNN's by as
 * much), bound 2e-3; bf16 (activations bf16 in both; a different sum can tip a rounding):
 * measured 7e-5 to 5e-4, bound 1e-2. A layout mistake is off by O(1). */
static void channels_last_case(const char *const *sets, int64_t c, int64_t hw, dpt_precision precision)
{
    dpt_error err;
    dpt_config *cfg = dpt_config_defaults();
    for (int i = 0; sets[i]; i++)
        if (!dpt_config_set(cfg, sets[i], &err)) fail_msg("%s", err.msg);
    enum { N = 4 };
    int64_t xshape[4] = {N, c, hw, hw};
    static const int32_t labels[N] = {3, 0, 9, 5};
    dpt_ctx *ctx[2];
    dpt_model *m[2];
    float *grads[2], *logits[2];
    float loss[2];
    int64_t total = 0;
    dpt_rng rng;
    for (int k = 0; k < 2; k++) {
        dpt_ctx_options o = {.device = {DPT_DEVICE_CPU, 0},
                             .threads = 1,
                             .seed = 11,
                             .precision = precision,
                             .channels_last = k == 1};
        ctx[k] = dpt_ctx_new(&o, &err);
        if (!ctx[k]) fail_msg("%s", err.msg);
        const char *why;
        if (dpt_ctx_precision(ctx[k], &why) != precision) { /* bf16 on a CPU without AVX512-BF16 */
            print_message("%s: not run in bf16 (%s)\n", sets[0], why);
            dpt_ctx_free(ctx[k]);
            dpt_config_free(cfg);
            return;
        }
        assert_int_equal(dpt_ctx_channels_last(ctx[k]), k == 1);
        m[k] = dpt_model_build(ctx[k], cfg, c, hw, hw, 10, &err);
        if (!m[k]) fail_msg("%s", err.msg);
        dpt_rng_seed(&rng, 5);
        dpt_tensor *x = test_input(ctx[k], &rng, 4, xshape, -1, 1);
        x->requires_grad = false;
        dpt_model_set_training(m[k], true);
        dpt_tensor *l = dpt_cross_entropy(ctx[k], dpt_model_forward(m[k], ctx[k], x), labels, 0.0f);
        dpt_tensor_copy_to_host(l, &loss[k]);
        dpt_backward(ctx[k], l);
        total = 0;
        for (int i = 0; i < dpt_model_num_params(m[k]); i++)
            total += dpt_model_param_at(m[k], i)->numel;
        grads[k] = malloc((size_t)total * sizeof(float));
        int64_t off = 0;
        for (int i = 0; i < dpt_model_num_params(m[k]); i++) {
            dpt_tensor *p = dpt_model_param_at(m[k], i);
            dpt_tensor_copy_to_host(dpt_tensor_grad(p), grads[k] + off);
            off += p->numel;
        }
        dpt_tape_clear(ctx[k]);
        dpt_model_set_training(m[k], false);
        bool was = dpt_set_grad_enabled(ctx[k], false);
        dpt_tensor *y = dpt_model_forward(m[k], ctx[k], x);
        logits[k] = malloc(N * 10 * sizeof(float));
        dpt_tensor_copy_to_host(y, logits[k]);
        dpt_tape_clear(ctx[k]);
        dpt_set_grad_enabled(ctx[k], was);
        dpt_tensor_free(x);
    }
    bool bf16 = precision == DPT_PRECISION_BF16;
    double rtol = bf16 ? 2e-2 : 1e-4, atol = bf16 ? 2e-3 : 1e-5;
    double a = loss[1], b = loss[0];
    assert_close_d("channels-last loss vs nchw", &a, &b, 1, rtol, atol);
    double *g1 = malloc((size_t)total * sizeof(double)), *g0 = malloc((size_t)total * sizeof(double));
    double l1[N * 10], l0[N * 10];
    for (int64_t j = 0; j < total; j++)
        g1[j] = grads[1][j], g0[j] = grads[0][j];
    for (int j = 0; j < N * 10; j++)
        l1[j] = logits[1][j], l0[j] = logits[0][j];
    /* per parameter, the gradient's distance relative to its size */
    double worst = 0;
    int worst_at = -1;
    for (int i = 0, off = 0; i < dpt_model_num_params(m[0]); i++) {
        int64_t n = dpt_model_param_at(m[0], i)->numel;
        double d2 = 0, n2 = 0;
        for (int64_t j = off; j < off + n; j++)
            d2 += (g1[j] - g0[j]) * (g1[j] - g0[j]), n2 += g0[j] * g0[j];
        double rel = sqrt(d2 / (n2 > 0 ? n2 : 1e-300));

        if (rel > worst) worst = rel, worst_at = i;
        off += (int)n;
    }
    if (getenv("DPT_TEST_VERBOSE")) printf("  %s: worst gradient %.3g\n", sets[0], worst);
    if (worst > (bf16 ? 1e-2 : 2e-3))
        fail_msg("channels-last gradient of %s: %.3g from nchw's, relative to its norm", 
                 dpt_model_param_at(m[0], worst_at)->name, worst);
    assert_close_d("channels-last evaluation logits vs nchw", l1, l0, N * 10, rtol, atol);
    free(g1), free(g0);
    for (int k = 0; k < 2; k++) {
        free(grads[k]), free(logits[k]);
        dpt_model_free(m[k]);
        dpt_ctx_free(ctx[k]);
    }
    dpt_config_free(cfg);
}

static void test_channels_last_models(void **state)
{
    (void)state;
    static const char *const resnet8[] = {"model.name=resnet", "model.depth=8", NULL};
    static const char *const resnet18[] = {"model.name=resnet", "model.depth=18", "model.width=8", NULL};
    static const char *const cnn[] = {"model.name=cnn", NULL};
    channels_last_case(resnet8, 3, 16, DPT_PRECISION_FP32);
    channels_last_case(resnet18, 3, 32, DPT_PRECISION_FP32);
    channels_last_case(cnn, 1, 16, DPT_PRECISION_FP32);
    channels_last_case(resnet8, 3, 16, DPT_PRECISION_BF16);
    channels_last_case(cnn, 1, 16, DPT_PRECISION_BF16);
}

/* The native kernels read NCHW only: memory_format = nhwc there is an error naming both keys. */
static void test_channels_last_refused(void **state)
{
    (void)state;
    dpt_ctx_options o = {.device = {DPT_DEVICE_CPU, 0}, .cpu_kernels = DPT_CPU_KERNELS_NATIVE, .channels_last = true};
    dpt_error err = {0};
    assert_null(dpt_ctx_new(&o, &err));
    assert_non_null(strstr(err.msg, "memory_format = nhwc"));
    assert_non_null(strstr(err.msg, "cpu_kernels = onednn"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv2d),
        cmocka_unit_test(test_conv_transpose2d),
        cmocka_unit_test(test_conv_transpose2d_layer),
        cmocka_unit_test(test_conv2d_bf16),
        cmocka_unit_test(test_bf16_activation_block),
        cmocka_unit_test(test_bf16_pooling),
        cmocka_unit_test(test_bf16_gemm),
        cmocka_unit_test(test_blocked_chain),
        cmocka_unit_test(test_shared_input),
        cmocka_unit_test(test_batchnorm),
        cmocka_unit_test(test_batchnorm_running_stats),
        cmocka_unit_test(test_pooling),
        cmocka_unit_test(test_pooling_blocked),
        cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_build_errors),
        cmocka_unit_test(test_channels_last_models),
        cmocka_unit_test(test_channels_last_refused),
    };
    return cmocka_run_group_tests_name("conv", tests, NULL, NULL);
}
