/* test_regression.c: the regression data source (data/regression.c, [data] source = regression)
 * and the generic batch it goes through: its samples are exactly an affine (or sine) function
 * of x (checked by a float64 least-squares fit, not by re-deriving its weights), the same on
 * every call and different between the train and test sets; the loader's batches hold the
 * source's values, sharded by rank without overlap; the model's task is mse in samples; and
 * ./train fits it with the mlp to within a few times the noise's variance (--expect). */
#include "tests/testutil.h"
#include "data/data.h"

/* Solve the (F+1) x (F+1) normal equations A c = r by Gaussian elimination (float64). */
static void solve(int n, double *a, double *r)
{
    for (int i = 0; i < n; i++) {
        int p = i;
        for (int k = i + 1; k < n; k++)
            if (fabs(a[k * n + i]) > fabs(a[p * n + i])) p = k;
        for (int j = 0; j < n; j++) {
            double t = a[i * n + j];
            a[i * n + j] = a[p * n + j], a[p * n + j] = t;
        }
        double t = r[i];
        r[i] = r[p], r[p] = t;
        for (int k = i + 1; k < n; k++) {
            double f = a[k * n + i] / a[i * n + i];
            for (int j = i; j < n; j++)
                a[k * n + j] -= f * a[i * n + j];
            r[k] -= f * r[i];
        }
    }
    for (int i = n - 1; i >= 0; i--) {
        for (int j = i + 1; j < n; j++)
            r[i] -= a[i * n + j] * r[j];
        r[i] /= a[i * n + i];
    }
}

#define F 5
static void test_samples_are_the_function(void **state)
{
    (void)state;
    for (int sine = 0; sine < 2; sine++) {
        const char *sets[] = {"data.source=regression", "data.regression_features=5", "data.regression_noise=0",
                              sine ? "data.regression_function=sine" : "data.regression_function=linear"};
        dpt_config *cfg = test_config(sets, 4);
        dpt_dataset *train, *test;
        dpt_error err;
        if (!dpt_data_open(cfg, &train, &test, &err)) fail_msg("%s", err.msg);
        assert_int_equal(train->n, 4096);
        assert_int_equal(test->n, 1024);
        dpt_field fields[DPT_MAX_FIELDS];
        assert_int_equal(dpt_dataset_fields(train, fields), 2);
        assert_string_equal(fields[0].name, "x");
        assert_int_equal(fields[0].shape[0], F);
        assert_true(fields[1].target && fields[1].dtype == DPT_F32);
        assert_string_equal(train->task.loss, "mse");
        /* y (or asin y for the sine) against a least-squares affine fit of x: exact up to
         * float rounding (the sine's values are kept in |W x + b| < pi / 2 only approximately,
         * so its residual is checked on the samples where asin is well conditioned) */
        double ata[(F + 1) * (F + 1)] = {0}, atr[F + 1] = {0};
        float xs[200][F], ys[200];
        int used = 0;
        for (int64_t i = 0; i < 200; i++) {
            float x[F], y;
            train->get(train, i, (void *[]){x, &y});
            float again[F], y2;
            train->get(train, i, (void *[]){again, &y2}); /* the same sample every call */
            assert_memory_equal(x, again, sizeof x);
            assert_true(y == y2);
            if (sine && fabsf(y) > 0.9f) continue;
            double row[F + 1] = {1.0}, target = sine ? asin((double)y) : y;
            for (int j = 0; j < F; j++)
                row[1 + j] = x[j];
            for (int a = 0; a <= F; a++) {
                for (int b = 0; b <= F; b++)
                    ata[a * (F + 1) + b] += row[a] * row[b];
                atr[a] += row[a] * target;
            }
            memcpy(xs[used], x, sizeof x), ys[used++] = y;
        }
        assert_true(used > 100);
        solve(F + 1, ata, atr);
        for (int i = 0; i < used; i++) {
            double z = atr[0];
            for (int j = 0; j < F; j++)
                z += atr[1 + j] * xs[i][j];
            double want = sine ? sin(z) : z;
            assert_true(fabs(want - ys[i]) < 1e-5); /* float rounding of x, W x + b and sin */
        }
        /* the test set: other samples of the same function */
        float x0[F], y0, t0[F], ty0;
        train->get(train, 0, (void *[]){x0, &y0});
        test->get(test, 0, (void *[]){t0, &ty0});
        assert_true(memcmp(x0, t0, sizeof x0) != 0);
        dpt_dataset_free(train);
        dpt_dataset_free(test);
        dpt_config_free(cfg);
    }
}

/* Two ranks' batches: the source's own values, every sample once. */
static void test_loader_batches(void **state)
{
    (void)state;
    const char *sets[] = {"data.source=regression", "data.regression_samples=100", "data.regression_outputs=2"};
    dpt_config *cfg = test_config(sets, 3);
    dpt_dataset *train, *test;
    dpt_error err;
    if (!dpt_data_open(cfg, &train, &test, &err)) fail_msg("%s", err.msg);
    dpt_ctx *ctx = test_ctx(1, 1);
    static bool seen[100];
    int total = 0;
    for (int rank = 0; rank < 2; rank++) {
        for (int prefetch = 0; prefetch <= 2; prefetch += 2) {
            dpt_loader_options lo = {.batch = 8, .shuffle = true, .seed = 9, .rank = rank, .world_size = 2,
                                     .prefetch = prefetch};
            dpt_loader *l = dpt_loader_new(ctx, train, &lo);
            dpt_batch b;
            while (dpt_loader_next(l, &b)) {
                dpt_tensor *x = dpt_batch_get(&b, "x"), *y = dpt_batch_get(&b, "y");
                assert_non_null(x), assert_non_null(y);
                assert_int_equal(dpt_tensor_dim(y, 1), 2);
                float xv[8 * 8], yv[8 * 2];
                dpt_tensor_copy_to_host(x, xv);
                dpt_tensor_copy_to_host(y, yv);
                for (int64_t i = 0; i < b.size; i++) { /* find the sample by its x */
                    int found = -1;
                    for (int s = 0; s < 100 && found < 0; s++) {
                        float sx[8], sy[2];
                        train->get(train, s, (void *[]){sx, sy});
                        if (!memcmp(sx, xv + i * 8, sizeof sx) && !memcmp(sy, yv + i * 2, sizeof sy)) found = s;
                    }
                    assert_true(found >= 0);
                    if (prefetch == 0) {
                        assert_false(seen[found]);
                        seen[found] = true, total++;
                    }
                }
            }
            dpt_loader_free(l);
        }
    }
    assert_int_equal(total, 100); /* each rank 50: 6 batches of 8 and a last one of 2 (a partial batch's view) */
    dpt_ctx_free(ctx);
    dpt_dataset_free(train);
    dpt_dataset_free(test);
    dpt_config_free(cfg);
}

/* The whole path: ./train with the mlp on it, an mse task, a test loss near the noise's
 * variance (0.05^2 = 0.0025; the expectation allows 3x for a short run). */
static void test_trains_with_mse(void **state)
{
    (void)state;
    char out[1 << 15];
    int rc = run_capture(out, sizeof out,
                         "./train configs/fmnist_mlp.ini --set data.source=regression --set data.regression_noise=0.05 "
                         "--set train.epochs=4 --set checkpoint.dir=/tmp/dpt_regression_ck --expect "
                         "'final_test_loss <= 0.0075' 2>&1");
    if (rc != 0) fail_msg("exit %d:\n%s", rc, out);
    assert_contains(out, "loss mse");
    assert_contains(out, "samples/s");
    assert_contains(out, "best test loss");
    assert_contains(out, "pass  final_test_loss <= 0.0075");
    /* the shipped config meets its own [expect] (the README's row) */
    rc = run_capture(out, sizeof out, "./train configs/regression_mlp.ini --set checkpoint.dir=/tmp/dpt_regression_ck 2>&1");
    if (rc != 0) fail_msg("configs/regression_mlp.ini: exit %d:\n%s", rc, out);
    assert_contains(out, "pass  final_test_loss <= 0.004");
    /* a classifier's model on it is refused by name */
    rc = run_capture(out, sizeof out, "./train configs/fmnist_cnn.ini --set data.source=regression 2>&1");
    assert_int_equal(rc, 1);
    assert_contains(out, "[model] name = cnn builds an image classifier; the data set regression train has no images");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_samples_are_the_function),
        cmocka_unit_test(test_loader_batches),
        cmocka_unit_test(test_trains_with_mse),
    };
    return cmocka_run_group_tests_name("regression", tests, NULL, NULL);
}
