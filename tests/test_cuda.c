/* test_cuda.c: every CUDA op against the CPU op on the same random inputs (forward values
 * and input/parameter gradients), and a few MLP training steps on both. Skips with
 * "skipped: no GPU" when no CUDA device is visible (and in builds without CUDA).
 * Tolerances: relative 1e-4 for elementwise ops and reductions, 1e-3 for GEMM-based ops
 * (different summation order, no TF32), 1e-3 for 4 SGD/AdamW steps of an MLP, 2e-3 for 4
 * SGD steps of a CNN and a ResNet-8 (cuDNN convolutions, batch norm, pooling). */
#include "tests/testutil.h"

#define NEED_GPU()                                                                                           \
    do {                                                                                                     \
        if (dpt_device_count(DPT_DEVICE_CUDA) == 0) {                                                        \
            print_message("skipped: no GPU\n");                                                              \
            skip();                                                                                          \
        }                                                                                                    \
    } while (0)

static dpt_ctx *make(dpt_device_kind kind)
{
    dpt_error err;
    dpt_ctx_options o = {.device = {kind, 0}, .threads = 1, .seed = 7};
    dpt_ctx *ctx = dpt_ctx_new(&o, &err);
    if (!ctx) fail_msg("%s", err.msg);
    return ctx;
}

typedef dpt_tensor *(*graph_fn)(dpt_ctx *ctx, dpt_tensor **in, int n_in, void *user);

/* Run `graph` on both devices from the same inputs; compare output and input gradients. */
static void compare(const char *name, graph_fn graph, int n_in, const int64_t shapes[][3], void *user,
                    double rtol)
{
    dpt_ctx *cpu = make(DPT_DEVICE_CPU), *gpu = make(DPT_DEVICE_CUDA);
    dpt_rng rng;
    dpt_rng_seed(&rng, 42);
    dpt_tensor *in_c[4], *in_g[4];
    for (int i = 0; i < n_in; i++) {
        int nd = shapes[i][2] ? 3 : shapes[i][1] ? 2 : 1;
        in_c[i] = test_input(cpu, &rng, nd, shapes[i], -2, 2);
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

/* A few optimizer steps of the same model (same seed, same data) on one device. */
static void run_model(dpt_device_kind kind, const char *optim, const char *const *sets, float *params_out,
                      int64_t *n_out)
{
    dpt_error err;
    dpt_config *cfg = dpt_config_defaults();
    char set[64];
    snprintf(set, sizeof set, "optim.name=%s", optim);
    dpt_config_set(cfg, set, &err);
    for (int i = 0; sets[i]; i++)
        if (!dpt_config_set(cfg, sets[i], &err)) fail_msg("%s", err.msg);
    dpt_ctx *ctx = make(kind);
    dpt_model *m = dpt_model_build(ctx, cfg, 1, 8, 8, 10, &err);
    dpt_optim *o = dpt_optim_build(m, cfg, &err);
    dpt_dataset *ds = dpt_synthetic_new(64, 1, 8, 8, 10, 3);
    dpt_loader_options lo = {.batch = 16, .world_size = 1, .mean = 0.5f, .std = 0.25f};
    dpt_loader *l = dpt_loader_new(ctx, ds, &lo);
    dpt_batch b;
    for (int s = 0; s < 4 && dpt_loader_next(l, &b); s++) {
        dpt_backward(ctx, dpt_cross_entropy(ctx, dpt_model_forward(m, ctx, b.x), b.labels, 0.0f));
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
    for (int k = 0; k < 2; k++) {
        const char *optim = k ? "adamw" : "sgd";
        int64_t n;
        const char *mlp[] = {"model.hidden=64,32", NULL};
        run_model(DPT_DEVICE_CPU, optim, mlp, a, &n);
        run_model(DPT_DEVICE_CUDA, optim, mlp, b, &n);
        for (int64_t i = 0; i < n; i++)
            da[i] = a[i], db[i] = b[i];
        assert_close_d(optim, db, da, n, 1e-3, 1e-4);
    }
}

/* conv2d (cuDNN), batch norm, max/global pooling, residual adds: a CNN and a ResNet-8. */
static void test_conv_models(void **state)
{
    (void)state;
    NEED_GPU();
    static float a[40000], b[40000];
    static double da[40000], db[40000];
    const char *cnn[] = {"model.name=cnn", "model.channels=4,8", "model.fc=16", "model.dropout=0", NULL};
    const char *r8[] = {"model.name=resnet", "model.depth=8", "model.width=4", NULL};
    const char *const *models[] = {cnn, r8};
    for (int k = 0; k < 2; k++) {
        int64_t n;
        run_model(DPT_DEVICE_CPU, "sgd", models[k], a, &n);
        run_model(DPT_DEVICE_CUDA, "sgd", models[k], b, &n);
        assert_true(n <= 40000);
        for (int64_t i = 0; i < n; i++)
            da[i] = a[i], db[i] = b[i];
        assert_close_d(models[k][0], db, da, n, 2e-3, 1e-4);
    }
}

int main(void)
{
    if (dpt_device_count(DPT_DEVICE_CUDA) == 0) printf("test_cuda: skipped: no GPU visible\n");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_training_steps),
        cmocka_unit_test(test_conv_models),
    };
    return cmocka_run_group_tests_name("cuda", tests, NULL, NULL);
}
