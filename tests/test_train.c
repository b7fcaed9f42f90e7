/* test_train.c: a training smoke test on the real Fashion-MNIST (a few hundred MLP steps
 * must pass 80% test accuracy) and run-to-run determinism for a fixed seed. */
#include "tests/testutil.h"
#include "data/data.h"

typedef struct run {
    float losses[512];
    int steps;
    double test_acc;
    float param_checksum;
} run;

static void train_mlp(int steps, int threads, uint64_t seed, const char *optim, run *out)
{
    dpt_error err;
    dpt_config *cfg = dpt_config_defaults();
    char set[64];
    snprintf(set, sizeof set, "optim.name=%s", optim);
    assert_true(dpt_config_set(cfg, set, &err));
    if (!strcmp(optim, "sgd")) assert_true(dpt_config_set(cfg, "optim.lr=0.05", &err));
    dpt_ctx *ctx = test_ctx(threads, seed);
    dpt_dataset *train, *test;
    if (!dpt_data_open(cfg, &train, &test, &err)) fail_msg("%s", err.msg);
    dpt_model *model = dpt_model_build(ctx, cfg, 1, 28, 28, 10, &err);
    assert_non_null(model);
    dpt_optim *opt = dpt_optim_build(model, cfg, &err);
    assert_non_null(opt);
    dpt_loader_options lo = {.batch = 64,
                             .shuffle = true,
                             .drop_last = true,
                             .seed = seed,
                             .world_size = 1,
                             .mean = 0.2860f,
                             .std = 0.3530f};
    dpt_loader *loader = dpt_loader_new(ctx, train, &lo);
    lo.batch = 1000, lo.shuffle = false, lo.drop_last = false;
    dpt_loader *test_loader = dpt_loader_new(ctx, test, &lo);
    dpt_batch b;
    out->steps = 0;
    while (out->steps < steps && dpt_loader_next(loader, &b)) {
        dpt_tensor *loss = dpt_cross_entropy(ctx, dpt_model_forward(model, ctx, b.x), b.labels, 0.0f);
        dpt_backward(ctx, loss);
        dpt_optim_step(ctx, opt);
        dpt_model_zero_grad(model);
        out->losses[out->steps++] = dpt_tensor_item(loss);
        dpt_tape_clear(ctx);
    }
    out->test_acc = dpt_evaluate(ctx, model, test_loader).accuracy;
    out->param_checksum = 0.0f;
    for (int i = 0; i < dpt_model_num_params(model); i++) {
        dpt_tensor *p = dpt_model_param_at(model, i);
        for (int64_t j = 0; j < dpt_tensor_numel(p); j++)
            out->param_checksum += dpt_tensor_data(p)[j];
    }
    dpt_loader_free(test_loader);
    dpt_loader_free(loader);
    dpt_optim_free(opt);
    dpt_model_free(model);
    dpt_dataset_free(train);
    dpt_dataset_free(test);
    dpt_ctx_free(ctx);
    dpt_config_free(cfg);
}

static double mean_of(const float *x, int from, int to)
{
    double s = 0.0;
    for (int i = from; i < to; i++)
        s += x[i];
    return s / (to - from);
}

static void test_mlp_learns(void **state)
{
    (void)state;
    static run r;
    train_mlp(400, 2, 42, "adamw", &r);
    double first = mean_of(r.losses, 0, 20), last = mean_of(r.losses, 380, 400);
    print_message("adamw: loss %.3f -> %.3f, test acc %.2f%% after 400 steps\n", first, last,
                  100 * r.test_acc);
    assert_true(first > 1.0);
    assert_true(last < 0.6);
    assert_true(r.test_acc > 0.80);
    train_mlp(400, 2, 42, "sgd", &r);
    print_message("sgd:   test acc %.2f%% after 400 steps\n", 100 * r.test_acc);
    assert_true(r.test_acc > 0.80);
}

static void test_cnn_learns(void **state)
{
    (void)state;
    dpt_error err;
    dpt_config *cfg = dpt_config_load("configs/fmnist_cnn.ini", &err);
    if (!cfg) fail_msg("%s", err.msg);
    dpt_ctx *ctx = test_ctx(2, 42);
    dpt_dataset *train, *test;
    if (!dpt_data_open(cfg, &train, &test, &err)) fail_msg("%s", err.msg);
    dpt_model *model = dpt_model_build(ctx, cfg, 1, 28, 28, 10, &err);
    dpt_optim *opt = dpt_optim_build(model, cfg, &err);
    dpt_loader_options lo = {.batch = 64,
                             .shuffle = true,
                             .drop_last = true,
                             .seed = 42,
                             .world_size = 1,
                             .mean = 0.2860f,
                             .std = 0.3530f};
    dpt_loader *loader = dpt_loader_new(ctx, train, &lo);
    lo.batch = 1000, lo.shuffle = false, lo.drop_last = false, lo.limit = 5000;
    dpt_loader *test_loader = dpt_loader_new(ctx, test, &lo);
    dpt_batch b;
    double first = 0, last = 0;
    for (int s = 0; s < 300 && dpt_loader_next(loader, &b); s++) {
        dpt_tensor *loss = dpt_cross_entropy(ctx, dpt_model_forward(model, ctx, b.x), b.labels, 0.0f);
        dpt_backward(ctx, loss);
        dpt_optim_step(ctx, opt);
        dpt_model_zero_grad(model);
        if (s < 20) first += dpt_tensor_item(loss) / 20;
        if (s >= 280) last += dpt_tensor_item(loss) / 20;
        dpt_tape_clear(ctx);
    }
    double acc = dpt_evaluate(ctx, model, test_loader).accuracy;
    print_message("cnn: loss %.3f -> %.3f, test acc %.2f%% after 300 steps\n", first, last, 100 * acc);
    assert_true(first > 1.0 && last < 0.5);
    assert_true(acc > 0.84);
    dpt_loader_free(test_loader);
    dpt_loader_free(loader);
    dpt_optim_free(opt);
    dpt_model_free(model);
    dpt_dataset_free(train);
    dpt_dataset_free(test);
    dpt_ctx_free(ctx);
    dpt_config_free(cfg);
}

/* fmnist_cnn's first 150 steps in fp32 and in bf16 ([train] precision) from the same
 * initialisation and batches: the bf16 run's loss follows the fp32 one (the mean over each
 * 50 steps within 0.05) and its test accuracy on 2000 images is within 2 points. */
static double cnn_run(dpt_precision precision, double window[3], const char **why)
{
    dpt_error err;
    dpt_config *cfg = dpt_config_load("configs/fmnist_cnn.ini", &err);
    if (!cfg) fail_msg("%s", err.msg);
    dpt_ctx_options o = {.device = {DPT_DEVICE_CPU, 0}, .threads = 2, .seed = 42, .precision = precision};
    dpt_ctx *ctx = dpt_ctx_new(&o, &err);
    if (!ctx) fail_msg("%s", err.msg);
    if (dpt_ctx_precision(ctx, why) != precision) { /* this CPU lacks it: skip before training */
        dpt_ctx_free(ctx), dpt_config_free(cfg);
        return -1;
    }
    dpt_dataset *train, *test;
    if (!dpt_data_open(cfg, &train, &test, &err)) fail_msg("%s", err.msg);
    dpt_model *model = dpt_model_build(ctx, cfg, 1, 28, 28, 10, &err);
    dpt_optim *opt = dpt_optim_build(model, cfg, &err);
    dpt_loader_options lo = {.batch = 64, .shuffle = true, .drop_last = true, .seed = 42, .world_size = 1,
                             .mean = 0.2860f, .std = 0.3530f};
    dpt_loader *loader = dpt_loader_new(ctx, train, &lo);
    lo.batch = 1000, lo.shuffle = false, lo.drop_last = false, lo.limit = 2000;
    dpt_loader *test_loader = dpt_loader_new(ctx, test, &lo);
    dpt_batch b;
    for (int s = 0; s < 150 && dpt_loader_next(loader, &b); s++) {
        dpt_tensor *loss = dpt_cross_entropy(ctx, dpt_model_forward(model, ctx, b.x), b.labels, 0.0f);
        dpt_backward(ctx, loss);
        dpt_optim_step(ctx, opt);
        dpt_model_zero_grad(model);
        window[s / 50] += dpt_tensor_item(loss) / 50;
        dpt_tape_clear(ctx);
    }
    double acc = dpt_evaluate(ctx, model, test_loader).accuracy;
    dpt_loader_free(test_loader), dpt_loader_free(loader);
    dpt_optim_free(opt), dpt_model_free(model);
    dpt_dataset_free(train), dpt_dataset_free(test);
    dpt_ctx_free(ctx), dpt_config_free(cfg);
    return acc;
}

static void test_cnn_bf16_tracks_fp32(void **state)
{
    (void)state;
    double lf[3] = {0}, lb[3] = {0};
    const char *why;
    double ab = cnn_run(DPT_PRECISION_BF16, lb, &why);
    if (ab < 0) {
        print_message("skipped: %s\n", why);
        skip();
    }
    double af = cnn_run(DPT_PRECISION_FP32, lf, &why);
    print_message("cnn fp32 vs bf16: loss %.3f/%.3f/%.3f vs %.3f/%.3f/%.3f, acc %.2f%% vs %.2f%%\n", lf[0], lf[1],
                  lf[2], lb[0], lb[1], lb[2], 100 * af, 100 * ab);
    for (int w = 0; w < 3; w++)
        assert_true(fabs(lf[w] - lb[w]) < 0.05);
    assert_true(fabs(af - ab) < 0.02);
}

static void test_deterministic(void **state)
{
    (void)state;
    static run a, b, c;
    train_mlp(30, 1, 7, "adamw", &a);
    train_mlp(30, 1, 7, "adamw", &b);
    train_mlp(30, 1, 8, "adamw", &c);
    assert_memory_equal(a.losses, b.losses, sizeof(float) * 30);
    assert_true(a.param_checksum == b.param_checksum);
    assert_true(memcmp(a.losses, c.losses, sizeof(float) * 30) != 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mlp_learns),
        cmocka_unit_test(test_cnn_learns),
        cmocka_unit_test(test_cnn_bf16_tracks_fp32),
        cmocka_unit_test(test_deterministic),
    };
    return cmocka_run_group_tests_name("train", tests, NULL, NULL);
}
