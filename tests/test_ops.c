/* test_ops.c: every op and layer against a double-precision reference: forward values, and
 * backward against central finite differences, over many shapes (1-sized and odd dims). */
#include "tests/testutil.h"

#include "runtime/tensor.h"

/* ---------------------------------------------------------------- linear */

typedef struct linear_case {
    int64_t batch, in, out;
    bool bias;
    dpt_model *model;
    dpt_linear *layer;
} linear_case;

static void linear_setup(dpt_ctx *ctx, dpt_tensor **in, void *user)
{
    linear_case *c = user;
    c->model = dpt_model_new(ctx, "test", NULL);
    c->layer = dpt_linear_new(c->model, "fc", c->in, c->out, c->bias);
    in[1] = dpt_model_param_at(c->model, 0);
    if (c->bias) in[2] = dpt_model_param_at(c->model, 1);
}

static void linear_teardown(void *user)
{
    dpt_model_free(((linear_case *)user)->model);
}

static dpt_tensor *linear_build(dpt_ctx *ctx, dpt_tensor **in, void *user)
{
    return dpt_linear_forward(ctx, ((linear_case *)user)->layer, in[0]);
}

static void linear_ref(const double *const *in, double *out, void *user)
{
    const linear_case *c = user;
    for (int64_t b = 0; b < c->batch; b++)
        for (int64_t o = 0; o < c->out; o++) {
            double acc = c->bias ? in[2][o] : 0.0;
            for (int64_t i = 0; i < c->in; i++)
                acc += in[0][b * c->in + i] * in[1][o * c->in + i];
            out[b * c->out + o] = acc;
        }
}

static void test_linear(void **state)
{
    (void)state;
    const int64_t shapes[][3] = {{1, 1, 1}, {1, 5, 3}, {4, 7, 2},   {9, 13, 11},
                                 {3, 1, 6}, {2, 6, 1}, {17, 32, 10}, {33, 70, 40}};
    /* both CPU kernel settings: oneDNN's sgemm (the default) and OpenBLAS (native) */
    for (int kernels = DPT_CPU_KERNELS_ONEDNN; kernels <= DPT_CPU_KERNELS_NATIVE; kernels++)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int bias = 0; bias < 2; bias++) {
            test_kernels = (dpt_cpu_kernels)kernels;
            linear_case c = {shapes[s][0], shapes[s][1], shapes[s][2], bias, NULL, NULL};
            gradcheck gc = {
                .n_in = bias ? 3 : 2,
                .ndim = {2, 2, 1},
                .shape = {{c.batch, c.in}, {c.out, c.in}, {c.out}},
                .lo = -1,
                .hi = 1,
                .setup = linear_setup,
                .teardown = linear_teardown,
                .build = linear_build,
                .reference = linear_ref,
                .user = &c,
                .fwd_rtol = 1e-5,
                .grad_rtol = 1e-4,
                .grad_atol = 1e-5,
            };
            char name[64];
            snprintf(name, sizeof name, "linear(%lld,%lld,%lld,bias=%d) %s", (long long)c.batch, (long long)c.in,
                     (long long)c.out, bias, test_kernels_name());
            run_gradcheck(name, &gc, 100 + s * 2 + (uint64_t)bias);
        }
    test_kernels = DPT_CPU_KERNELS_DEFAULT;
}

/* ---------------------------------------------------------------- elementwise and activations */

typedef struct unary_case {
    int64_t n;
    int64_t rows, cols;
    float alpha;
} unary_case;

static dpt_tensor *relu_build(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    (void)u;
    return dpt_relu(ctx, in[0]);
}
static void relu_ref(const double *const *in, double *out, void *u)
{
    for (int64_t i = 0; i < ((unary_case *)u)->n; i++)
        out[i] = in[0][i] > 0 ? in[0][i] : 0;
}
static dpt_tensor *gelu_build(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    (void)u;
    return dpt_gelu(ctx, in[0]);
}
static void gelu_ref(const double *const *in, double *out, void *u)
{
    for (int64_t i = 0; i < ((unary_case *)u)->n; i++) {
        double x = in[0][i];
        out[i] = 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    }
}
static dpt_tensor *softmax_build(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    (void)u;
    return dpt_softmax(ctx, in[0]);
}
static void softmax_ref(const double *const *in, double *out, void *u)
{
    const unary_case *c = u;
    for (int64_t r = 0; r < c->rows; r++) {
        double total = 0.0;
        for (int64_t k = 0; k < c->cols; k++)
            total += exp(in[0][r * c->cols + k]);
        for (int64_t k = 0; k < c->cols; k++)
            out[r * c->cols + k] = exp(in[0][r * c->cols + k]) / total;
    }
}
static dpt_tensor *scale_build(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    return dpt_scale(ctx, in[0], ((unary_case *)u)->alpha);
}
static void scale_ref(const double *const *in, double *out, void *u)
{
    for (int64_t i = 0; i < ((unary_case *)u)->n; i++)
        out[i] = ((unary_case *)u)->alpha * in[0][i];
}
static dpt_tensor *sum_build(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    (void)u;
    return dpt_sum(ctx, in[0]);
}
static void sum_ref(const double *const *in, double *out, void *u)
{
    out[0] = 0;
    for (int64_t i = 0; i < ((unary_case *)u)->n; i++)
        out[0] += in[0][i];
}
static dpt_tensor *mean_build(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    (void)u;
    return dpt_mean(ctx, in[0]);
}
static void mean_ref(const double *const *in, double *out, void *u)
{
    sum_ref(in, out, u);
    out[0] /= (double)((unary_case *)u)->n;
}
/* flatten then reshape back through -1: values unchanged, gradient routed through two views */
static dpt_tensor *reshape_build(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    dpt_tensor *flat = dpt_flatten(ctx, in[0]);
    return dpt_relu(ctx, dpt_reshape(ctx, flat, 2, (int64_t[]){-1, ((unary_case *)u)->cols}));
}

/* one temporary read by a reshape, two relus and a gelu: backward runs the last recorded first,
 * so the gelu writes t's fresh gradient, the relus add to it, and the reshape adds last (the
 * reshape case above has relu and reshape write fresh ones, the gelu case adds to its input's):
 * both ways of each backward (write, or accumulate) */
static dpt_tensor *shared_grad_build(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    dpt_tensor *t = dpt_scale(ctx, in[0], 1.0f);
    dpt_tensor *view = dpt_reshape(ctx, dpt_flatten(ctx, t), 3, in[0]->shape);
    dpt_tensor *relus = dpt_add(ctx, dpt_relu(ctx, t), dpt_relu(ctx, t));
    (void)u;
    return dpt_add(ctx, dpt_add(ctx, view, relus), dpt_gelu(ctx, t));
}
static void shared_grad_ref(const double *const *in, double *out, void *u)
{
    double gelu[1024];
    gelu_ref(in, gelu, u);
    for (int64_t i = 0; i < ((unary_case *)u)->n; i++)
        out[i] = in[0][i] + 2.0 * (in[0][i] > 0 ? in[0][i] : 0) + gelu[i];
}

/* Gradients handed over instead of copied (dpt_grad_axpy takes the running node's output
 * gradient when its input has none yet): the final add's first input takes dy and the second
 * copies it (a shared buffer would be corrupted by what follows); sub's first input takes and its
 * second is written -dy apart; scale takes and scales in place (by 3, and -0.5); reshape and
 * flatten take in another shape; u + u takes for neither (u already has a gradient) and adds twice.
 * out = (u + u) - (-0.5 u) + 3 t = 2.5 relu(x) + 3 x. */
static dpt_tensor *taken_grad_build(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    (void)u;
    dpt_tensor *t = dpt_scale(ctx, in[0], 1.0f);
    dpt_tensor *r = dpt_relu(ctx, t);
    dpt_tensor *twice = dpt_sub(ctx, dpt_add(ctx, r, r), dpt_scale(ctx, r, -0.5f));
    dpt_tensor *three = dpt_reshape(ctx, dpt_flatten(ctx, dpt_scale(ctx, t, 3.0f)), 3, in[0]->shape);
    return dpt_add(ctx, twice, three);
}
static void taken_grad_ref(const double *const *in, double *out, void *u)
{
    for (int64_t i = 0; i < ((unary_case *)u)->n; i++)
        out[i] = 2.5 * (in[0][i] > 0 ? in[0][i] : 0) + 3.0 * in[0][i];
}

/* Both inputs of an add take its gradient (one buffer); the transpose's backward then adds the
 * buffer, transposed, into u's gradient, the same buffer, while reading it: only the copy that
 * dpt_grad_acc makes of a shared gradient before adding keeps this right. */
static dpt_tensor *shared_taken_build(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    (void)u;
    dpt_tensor *r = dpt_relu(ctx, dpt_scale(ctx, in[0], 1.0f));
    return dpt_add(ctx, r, dpt_contiguous(ctx, dpt_transpose_axes(ctx, r, 1, 2)));
}
static void shared_taken_ref(const double *const *in, double *out, void *u)
{
    int64_t n = ((unary_case *)u)->cols, planes = ((unary_case *)u)->n / (n * n);
    for (int64_t p = 0; p < planes; p++)
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < n; j++) {
                double a = in[0][(p * n + i) * n + j], b = in[0][(p * n + j) * n + i];
                out[(p * n + i) * n + j] = (a > 0 ? a : 0) + (b > 0 ? b : 0);
            }
}

static void run_unary(const char *name, dpt_tensor *(*build)(dpt_ctx *, dpt_tensor **, void *),
                      void (*ref)(const double *const *, double *, void *), float lo, float hi)
{
    const int64_t shapes[][3] = {{1, 1, 1}, {1, 7, 1}, {3, 1, 5}, {4, 3, 9}, {2, 5, 33}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t a = shapes[s][0], b = shapes[s][1], c = shapes[s][2];
        unary_case uc = {.n = a * b * c, .rows = a * b, .cols = c, .alpha = -1.75f};
        gradcheck gc = {
            .n_in = 1,
            .ndim = {3},
            .shape = {{a, b, c}},
            .lo = lo,
            .hi = hi,
            .build = build,
            .reference = ref,
            .user = &uc,
            .fwd_rtol = 1e-5,
            .grad_rtol = 1e-4,
            .grad_atol = 1e-5,
        };
        char label[80];
        snprintf(label, sizeof label, "%s(%lld,%lld,%lld)", name, (long long)a, (long long)b, (long long)c);
        run_gradcheck(label, &gc, 200 + s);
    }
}

static void reshape_ref(const double *const *in, double *out, void *u)
{
    relu_ref(in, out, u);
}

static void test_activations(void **state)
{
    (void)state;
    run_unary("relu", relu_build, relu_ref, -2, 2);
    run_unary("gelu", gelu_build, gelu_ref, -4, 4);
    run_unary("softmax", softmax_build, softmax_ref, -6, 6);
    run_unary("scale", scale_build, scale_ref, -2, 2);
    run_unary("sum", sum_build, sum_ref, -2, 2);
    run_unary("mean", mean_build, mean_ref, -2, 2);
    run_unary("reshape", reshape_build, reshape_ref, -2, 2);
    run_unary("reshape+2relu+gelu shared", shared_grad_build, shared_grad_ref, -2, 2);
    run_unary("taken gradients", taken_grad_build, taken_grad_ref, -2, 2);
    for (int64_t n = 1; n <= 9; n += 4) {
        unary_case uc = {.n = 3 * n * n, .rows = 3 * n, .cols = n};
        gradcheck gc = {.n_in = 1, .ndim = {3}, .shape = {{3, n, n}}, .lo = -2, .hi = 2,
                        .build = shared_taken_build, .reference = shared_taken_ref, .user = &uc,
                        .fwd_rtol = 1e-6, .grad_rtol = 1e-4, .grad_atol = 1e-5};
        run_gradcheck("add of a tensor and its transpose", &gc, 230 + (uint64_t)n);
    }
}

/* ---------------------------------------------------------------- binary ops and matmul */

typedef struct binary_case {
    int64_t n, M, K, N;
    bool trans_a, trans_b;
} binary_case;

static dpt_tensor *add_build(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    (void)u;
    return dpt_add(ctx, in[0], in[1]);
}
static void add_ref(const double *const *in, double *out, void *u)
{
    for (int64_t i = 0; i < ((binary_case *)u)->n; i++)
        out[i] = in[0][i] + in[1][i];
}
static dpt_tensor *mul_build(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    (void)u;
    return dpt_mul(ctx, in[0], in[1]);
}
static void mul_ref(const double *const *in, double *out, void *u)
{
    for (int64_t i = 0; i < ((binary_case *)u)->n; i++)
        out[i] = in[0][i] * in[1][i];
}
/* mul of a tensor with itself: both uses must accumulate into one gradient (2x) */
static dpt_tensor *square_build(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    (void)u;
    return dpt_mul(ctx, in[0], in[0]);
}
static void square_ref(const double *const *in, double *out, void *u)
{
    for (int64_t i = 0; i < ((binary_case *)u)->n; i++)
        out[i] = in[0][i] * in[0][i];
}

static void test_binary(void **state)
{
    (void)state;
    const int64_t shapes[][2] = {{1, 1}, {3, 7}, {16, 5}};
    for (size_t s = 0; s < 3; s++) {
        binary_case bc = {.n = shapes[s][0] * shapes[s][1]};
        gradcheck gc = {
            .n_in = 2,
            .ndim = {2, 2},
            .shape = {{shapes[s][0], shapes[s][1]}, {shapes[s][0], shapes[s][1]}},
            .lo = -2,
            .hi = 2,
            .user = &bc,
            .fwd_rtol = 1e-6,
            .grad_rtol = 1e-4,
            .grad_atol = 1e-5,
        };
        gc.build = add_build, gc.reference = add_ref;
        run_gradcheck("add", &gc, 300 + s);
        gc.build = mul_build, gc.reference = mul_ref;
        run_gradcheck("mul", &gc, 310 + s);
        gc.n_in = 1, gc.build = square_build, gc.reference = square_ref;
        run_gradcheck("x*x", &gc, 320 + s);
    }
}

static dpt_tensor *matmul_build(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    const binary_case *c = u;
    dpt_tensor *a = c->trans_a ? dpt_transpose(ctx, in[0]) : in[0];
    dpt_tensor *b = c->trans_b ? dpt_transpose(ctx, in[1]) : in[1];
    return dpt_matmul(ctx, a, b);
}

static void matmul_ref(const double *const *in, double *out, void *u)
{
    const binary_case *c = u;
    for (int64_t m = 0; m < c->M; m++)
        for (int64_t n = 0; n < c->N; n++) {
            double acc = 0.0;
            for (int64_t k = 0; k < c->K; k++) {
                double a = c->trans_a ? in[0][k * c->M + m] : in[0][m * c->K + k];
                double b = c->trans_b ? in[1][n * c->K + k] : in[1][k * c->N + n];
                acc += a * b;
            }
            out[m * c->N + n] = acc;
        }
}

static void test_matmul(void **state)
{
    (void)state;
    const int64_t shapes[][3] = {{1, 1, 1}, {2, 3, 4}, {7, 1, 5}, {1, 9, 1}, {13, 17, 6}};
    for (int kernels = DPT_CPU_KERNELS_ONEDNN; kernels <= DPT_CPU_KERNELS_NATIVE; kernels++)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++) {
            test_kernels = (dpt_cpu_kernels)kernels;
            binary_case c = {.M = shapes[s][0],
                             .K = shapes[s][1],
                             .N = shapes[s][2],
                             .trans_a = t & 1,
                             .trans_b = (t >> 1) & 1};
            gradcheck gc = {
                .n_in = 2,
                .ndim = {2, 2},
                .shape = {{c.trans_a ? c.K : c.M, c.trans_a ? c.M : c.K},
                          {c.trans_b ? c.N : c.K, c.trans_b ? c.K : c.N}},
                .lo = -1,
                .hi = 1,
                .build = matmul_build,
                .reference = matmul_ref,
                .user = &c,
                .fwd_rtol = 1e-5,
                .grad_rtol = 1e-4,
                .grad_atol = 1e-5,
            };
            char name[80];
            snprintf(name, sizeof name, "matmul(%lld,%lld,%lld,ta=%d,tb=%d) %s", (long long)c.M, (long long)c.K,
                     (long long)c.N, c.trans_a, c.trans_b, test_kernels_name());
            run_gradcheck(name, &gc, 400 + s * 4 + (uint64_t)t);
        }
    test_kernels = DPT_CPU_KERNELS_DEFAULT;
}

/* ---------------------------------------------------------------- cross-entropy */

typedef struct xent_case {
    int64_t rows, cols;
    int32_t labels[64];
    float smoothing;
} xent_case;

static dpt_tensor *xent_build(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    const xent_case *c = u;
    return dpt_cross_entropy(ctx, in[0], c->labels, c->smoothing);
}

static void xent_ref(const double *const *in, double *out, void *u)
{
    const xent_case *c = u;
    double total = 0.0;
    for (int64_t r = 0; r < c->rows; r++) {
        const double *x = in[0] + r * c->cols;
        double z = 0.0;
        for (int64_t k = 0; k < c->cols; k++)
            z += exp(x[k]);
        for (int64_t k = 0; k < c->cols; k++) {
            double target = c->smoothing / (double)c->cols + (k == c->labels[r] ? 1.0 - c->smoothing : 0.0);
            total -= target * (x[k] - log(z));
        }
    }
    out[0] = total / (double)c->rows;
}

static void test_cross_entropy(void **state)
{
    (void)state;
    const int64_t shapes[][2] = {{1, 1}, {1, 2}, {5, 3}, {8, 10}, {33, 7}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int sm = 0; sm < 2; sm++) {
            xent_case c = {.rows = shapes[s][0], .cols = shapes[s][1], .smoothing = sm ? 0.1f : 0.0f};
            for (int64_t r = 0; r < c.rows; r++)
                c.labels[r] = (int32_t)((r * 7 + 3) % c.cols);
            gradcheck gc = {
                .n_in = 1,
                .ndim = {2},
                .shape = {{c.rows, c.cols}},
                .lo = -5,
                .hi = 5,
                .build = xent_build,
                .reference = xent_ref,
                .user = &c,
                .fwd_rtol = 1e-5,
                .grad_rtol = 1e-4,
                .grad_atol = 1e-6,
            };
            run_gradcheck("cross_entropy", &gc, 500 + s * 2 + (uint64_t)sm);
        }
}

/* Large logits must not overflow: log-sum-exp keeps the loss finite and exact. */
static void test_cross_entropy_stable(void **state)
{
    (void)state;
    dpt_ctx *ctx = test_ctx(1, 1);
    dpt_tensor *logits = dpt_tensor_new(ctx, 2, (int64_t[]){1, 3});
    float *x = dpt_tensor_data(logits);
    x[0] = 1000.0f, x[1] = 0.0f, x[2] = -1000.0f;
    int32_t label = 1;
    float loss = dpt_tensor_item(dpt_cross_entropy(ctx, logits, &label, 0.0f));
    assert_true(fabsf(loss - 1000.0f) < 1e-3f);
    assert_int_equal(dpt_count_correct(ctx, logits, &label), 0);
    label = 0;
    assert_int_equal(dpt_count_correct(ctx, logits, &label), 1);
    dpt_tape_clear(ctx);
    dpt_tensor_free(logits);
    dpt_ctx_free(ctx);
}

/* Top-k counts against a host reference that sorts each row (a stable sort by logit, larger
 * first: an equal logit of a lower class before the label) and looks for the label in the first
 * k: 200 rows of 12 classes with logits drawn from 5 values (ties everywhere), k = 1, 2, 5, 12;
 * k = 1 equals dpt_count_correct. Counting ties above the label (or not at all) fails it. */
static void test_count_topk(void **state)
{
    (void)state;
    dpt_ctx *ctx = test_ctx(1, 1);
    enum { ROWS = 200, C = 12 };
    dpt_tensor *logits = dpt_tensor_new(ctx, 2, (int64_t[]){ROWS, C});
    float *x = dpt_tensor_data(logits);
    int32_t labels[ROWS];
    uint64_t s = 5;
    for (int i = 0; i < ROWS * C; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)((s >> 33) % 5) - 2.0f;
    }
    for (int r = 0; r < ROWS; r++)
        labels[r] = (int32_t)((r * 7) % C);
    const int ks[] = {1, 2, 5, 12};
    for (int q = 0; q < 4; q++) {
        int64_t want = 0;
        for (int r = 0; r < ROWS; r++) {
            int order[C];
            for (int c = 0; c < C; c++)
                order[c] = c;
            for (int i = 1; i < C; i++) /* insertion sort: stable, larger first */
                for (int j = i; j > 0 && x[r * C + order[j]] > x[r * C + order[j - 1]]; j--) {
                    int keep = order[j];
                    order[j] = order[j - 1], order[j - 1] = keep;
                }
            for (int c = 0; c < ks[q]; c++)
                want += order[c] == labels[r];
        }
        int64_t got = dpt_count_topk(ctx, logits, labels, ks[q]);
        if (got != want) fail_msg("top-%d: %lld rows, want %lld", ks[q], (long long)got, (long long)want);
        if (ks[q] == 1) assert_int_equal(dpt_count_correct(ctx, logits, labels), want);
        if (ks[q] == 12) assert_int_equal(got, ROWS);
        if (ks[q] == 2) assert_true(want > 0 && want < ROWS);
    }
    dpt_tape_clear(ctx);
    dpt_tensor_free(logits);
    dpt_ctx_free(ctx);
}

/* ---------------------------------------------------------------- binary cross-entropy */

/* Both the logits and the targets are inputs (the gradient of the mean over both checked); the
 * targets stay in [0, 1] under the central differences' small steps. */
static dpt_tensor *bce_build(dpt_ctx *ctx, dpt_tensor **in, void *user)
{
    (void)user;
    return dpt_bce_with_logits(ctx, in[0], in[1]);
}

static void bce_ref(const double *const *in, double *out, void *user)
{
    const int64_t n = *(const int64_t *)user;
    double total = 0.0;
    for (int64_t i = 0; i < n; i++) { /* torch's formula: max(x, 0) - x t + log(1 + exp(-|x|)) */
        double x = in[0][i], t = in[1][i];
        total += (x > 0 ? x : 0) - x * t + log1p(exp(-fabs(x)));
    }
    out[0] = total / (double)n;
}

static void test_bce_with_logits(void **state)
{
    (void)state;
    const int64_t shapes[][3] = {{1, 1, 1}, {4, 3, 1}, {2, 3, 5}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t n = shapes[s][0] * shapes[s][1] * shapes[s][2];
        gradcheck gc = {.n_in = 2, .ndim = {3, 3}, .shape = {{shapes[s][0], shapes[s][1], shapes[s][2]},
                                                              {shapes[s][0], shapes[s][1], shapes[s][2]}},
                        .lo = 0.05f, .hi = 0.95f, .build = bce_build, .reference = bce_ref, .user = &n,
                        .fwd_rtol = 1e-5, .grad_rtol = 1e-4, .grad_atol = 1e-6};
        run_gradcheck("bce_with_logits", &gc, 530 + s);
    }
    /* logits far out (no overflow: the loss is |x| where the target disagrees) and exactly 0,
     * where the gradient is (1/2 - t) / n: a max/abs form gives -t / n there */
    dpt_ctx *ctx = test_ctx(1, 1);
    dpt_tensor *x = dpt_tensor_new(ctx, 1, (int64_t[]){4}), *t = dpt_tensor_new(ctx, 1, (int64_t[]){4});
    float xv[4] = {1000.0f, -1000.0f, 0.0f, 0.0f}, tv[4] = {0.0f, 0.0f, 1.0f, 0.25f};
    dpt_tensor_copy_from_host(x, xv), dpt_tensor_copy_from_host(t, tv);
    x->requires_grad = true;
    float loss = dpt_tensor_item(dpt_bce_with_logits(ctx, x, t)); /* (1000 + 0 + 2 log 2) / 4 */
    assert_true(fabs(loss - (1000.0 + 2.0 * log(2.0)) / 4.0) < 1e-3);
    dpt_backward(ctx, dpt_bce_with_logits(ctx, x, t));
    float g[4];
    dpt_tensor_copy_to_host(dpt_tensor_grad(x), g);
    const double want[4] = {0.25, 0.0, (0.5 - 1.0) / 4, (0.5 - 0.25) / 4};
    for (int i = 0; i < 4; i++)
        if (fabs(g[i] - want[i]) > 1e-6) fail_msg("bce gradient [%d]: %g, want %g", i, g[i], want[i]);
    dpt_tape_clear(ctx);
    dpt_tensor_free(x), dpt_tensor_free(t);
    dpt_ctx_free(ctx);
}

/* bce_with_logits' accuracy (a multi-label head's fraction of labels right): against a host
 * count of (x > 0) == (t > 0.5) over 5 samples of 7 values, with logits exactly 0 (no) and
 * targets of exactly 0.5 (no) among them, added into a slot that holds a value already, with
 * recording left as it was. A threshold at x >= 0 or t >= 0.5, a count over samples instead of
 * values, or a store instead of an add fails it. */
static void test_bce_accuracy(void **state)
{
    (void)state;
    dpt_ctx *ctx = test_ctx(1, 1);
    const dpt_loss_impl *bce = dpt_registry_find(DPT_KIND_LOSS, "bce_with_logits")->impl;
    assert_true(bce->metrics & DPT_METRIC_ACCURACY);
    enum { N = 5, PER = 7 };
    float xv[N * PER], tv[N * PER];
    uint64_t s = 77;
    int right = 0;
    for (int i = 0; i < N * PER; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        int r = (int)(s >> 33) % 9;
        xv[i] = r == 0 ? 0.0f : (float)(r - 4.5) * 0.7f;                      /* 0 now and then */
        tv[i] = i % 5 == 0 ? 0.5f : i % 3 == 0 ? 0.8f : (float)((s >> 20) & 1); /* 0.5, 0.8, 0, 1 */
        right += (xv[i] > 0.0f) == (tv[i] > 0.5f);
    }
    dpt_tensor *x = dpt_tensor_new(ctx, 2, (int64_t[]){N, PER}), *t = dpt_tensor_new(ctx, 2, (int64_t[]){N, PER});
    dpt_tensor *sums = dpt_tensor_new(ctx, 1, (int64_t[]){3});
    dpt_tensor_copy_from_host(x, xv), dpt_tensor_copy_from_host(t, tv);
    dpt_tensor_fill_slice(ctx, sums, 0, 3, 1.5f);
    bool was = dpt_set_grad_enabled(ctx, true);
    bce->count_correct(ctx, x, t, sums, 1);
    assert_true(dpt_set_grad_enabled(ctx, was)); /* left recording */
    float got[3];
    dpt_tensor_copy_to_host(sums, got);
    double want = 1.5 + (double)right / PER;
    if (fabs(got[1] - want) > 1e-5 || got[0] != 1.5f || got[2] != 1.5f)
        fail_msg("bce accuracy sums %g %g %g, want 1.5 %g 1.5 (%d of %d values right)", got[0], got[1], got[2], want,
                 right, N * PER);
    assert_true(right > 0 && right < N * PER); /* the case tells the thresholds apart */
    dpt_tape_clear(ctx);
    dpt_tensor_free(x), dpt_tensor_free(t), dpt_tensor_free(sums);
    dpt_ctx_free(ctx);
}

/* ---------------------------------------------------------------- a composed graph */

typedef struct mlp_case {
    dpt_model *model;
    dpt_linear *l1, *l2;
    int32_t labels[6];
} mlp_case;

static void mlp_setup(dpt_ctx *ctx, dpt_tensor **in, void *user)
{
    mlp_case *c = user;
    c->model = dpt_model_new(ctx, "test", NULL);
    c->l1 = dpt_linear_new(c->model, "fc1", 5, 4, true);
    c->l2 = dpt_linear_new(c->model, "fc2", 4, 3, true);
    for (int i = 0; i < 4; i++)
        in[1 + i] = dpt_model_param_at(c->model, i);
}

static void mlp_teardown(void *user)
{
    dpt_model_free(((mlp_case *)user)->model);
}

static dpt_tensor *mlp_build(dpt_ctx *ctx, dpt_tensor **in, void *user)
{
    mlp_case *c = user;
    dpt_tensor *h = dpt_gelu(ctx, dpt_linear_forward(ctx, c->l1, in[0]));
    return dpt_cross_entropy(ctx, dpt_linear_forward(ctx, c->l2, h), c->labels, 0.0f);
}

static void mlp_ref(const double *const *in, double *out, void *user)
{
    mlp_case *c = user;
    double loss = 0.0;
    for (int b = 0; b < 6; b++) {
        double h[4], z[3], total = 0.0;
        for (int o = 0; o < 4; o++) {
            double a = in[2][o];
            for (int i = 0; i < 5; i++)
                a += in[0][b * 5 + i] * in[1][o * 5 + i];
            h[o] = 0.5 * a * (1.0 + tanh(sqrt(2.0 / M_PI) * (a + 0.044715 * a * a * a)));
        }
        for (int o = 0; o < 3; o++) {
            z[o] = in[4][o];
            for (int i = 0; i < 4; i++)
                z[o] += h[i] * in[3][o * 4 + i];
            total += exp(z[o]);
        }
        loss += log(total) - z[c->labels[b]];
    }
    out[0] = loss / 6.0;
}

static void test_composed(void **state)
{
    (void)state;
    mlp_case c = {.labels = {0, 2, 1, 1, 0, 2}};
    gradcheck gc = {
        .n_in = 5,
        .ndim = {2, 2, 1, 2, 1},
        .shape = {{6, 5}, {4, 5}, {4}, {3, 4}, {3}},
        .lo = -2,
        .hi = 2,
        .setup = mlp_setup,
        .teardown = mlp_teardown,
        .build = mlp_build,
        .reference = mlp_ref,
        .user = &c,
        .fwd_rtol = 1e-5,
        .grad_rtol = 1e-4,
        .grad_atol = 1e-6,
    };
    run_gradcheck("linear-gelu-linear-xent", &gc, 600);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear),        cmocka_unit_test(test_activations),
        cmocka_unit_test(test_binary),        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_cross_entropy), cmocka_unit_test(test_cross_entropy_stable),
        cmocka_unit_test(test_bce_with_logits), cmocka_unit_test(test_bce_accuracy), cmocka_unit_test(test_count_topk), cmocka_unit_test(test_composed),
    };
    return cmocka_run_group_tests_name("ops", tests, NULL, NULL);
}
