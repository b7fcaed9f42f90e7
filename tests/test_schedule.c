/* test_schedule.c: learning-rate schedules and gradient clipping against hand-computed values. */
#include "tests/testutil.h"

static dpt_lr_schedule build(const char *const *sets, int nsets, int world, int64_t spe, int64_t total)
{
    dpt_config *cfg = test_config(sets, nsets);
    dpt_error err;
    dpt_lr_schedule s;
    if (!dpt_lr_schedule_build(cfg, world, spe, total, &s, &err)) fail_msg("%s", err.msg);
    dpt_config_free(cfg);
    return s;
}

static void test_schedules(void **state)
{
    (void)state;
    /* step: lr 0.1, x0.5 every 2 epochs of 10 steps */
    const char *step[] = {"optim.lr=0.1", "optim.schedule=step", "optim.step_epochs=2", "optim.gamma=0.5"};
    dpt_lr_schedule s = build(step, 4, 1, 10, 100);
    assert_float_equal(dpt_lr_at(&s, 0), 0.1, 1e-12);
    assert_float_equal(dpt_lr_at(&s, 19), 0.1, 1e-12);
    assert_float_equal(dpt_lr_at(&s, 20), 0.05, 1e-12);
    assert_float_equal(dpt_lr_at(&s, 45), 0.025, 1e-12);
    /* multistep at epochs 1 and 3 */
    const char *multi[] = {"optim.lr=1", "optim.schedule=multistep", "optim.milestones=1,3",
                           "optim.gamma=0.1"};
    s = build(multi, 4, 1, 10, 100);
    assert_float_equal(dpt_lr_at(&s, 9), 1.0, 1e-12);
    assert_float_equal(dpt_lr_at(&s, 10), 0.1, 1e-12);
    assert_float_equal(dpt_lr_at(&s, 29), 0.1, 1e-12);
    assert_float_equal(dpt_lr_at(&s, 30), 0.01, 1e-12);
    /* cosine from 1 to 0.1 over 100 steps: half way is the mean, the end is min_lr */
    const char *cosine[] = {"optim.lr=1", "optim.schedule=cosine", "optim.min_lr=0.1"};
    s = build(cosine, 3, 1, 10, 100);
    assert_float_equal(dpt_lr_at(&s, 0), 1.0, 1e-12);
    assert_float_equal(dpt_lr_at(&s, 50), 0.55, 1e-12);
    assert_float_equal(dpt_lr_at(&s, 100), 0.1, 1e-12);
    assert_float_equal(dpt_lr_at(&s, 25), 0.1 + 0.9 * 0.5 * (1 + cos(M_PI / 4)), 1e-12);
    /* linear scaling with 4 ranks x 2 accumulation and 1 epoch (10 steps) of warm-up: from
     * lr to 8 lr, linearly; then cosine starts from the top */
    const char *warm[] = {"optim.lr=0.1", "optim.lr_scaling=linear", "optim.warmup_epochs=1",
                          "distributed.accum_steps=2", "optim.schedule=cosine"};
    s = build(warm, 5, 4, 10, 110);
    assert_float_equal(dpt_lr_at(&s, 0), 0.1 + 0.7 * 0.1, 1e-12);
    assert_float_equal(dpt_lr_at(&s, 4), 0.1 + 0.7 * 0.5, 1e-12);
    assert_float_equal(dpt_lr_at(&s, 9), 0.8, 1e-12);
    assert_float_equal(dpt_lr_at(&s, 10), 0.8, 1e-12);
    assert_float_equal(dpt_lr_at(&s, 60), 0.4, 1e-12);
    /* warm-up without scaling starts from 0 */
    const char *plain[] = {"optim.lr=0.2", "optim.warmup_epochs=0.5"};
    s = build(plain, 2, 4, 10, 100);
    assert_float_equal(dpt_lr_at(&s, 0), 0.04, 1e-12);
    assert_float_equal(dpt_lr_at(&s, 4), 0.2, 1e-12);
    assert_float_equal(dpt_lr_at(&s, 50), 0.2, 1e-12);
}

/* The decays to min_lr against their formulas in float64: linear (Hugging Face's
 * get_linear_schedule_with_warmup with a floor), warm-up-stable-decay in its three shapes, and
 * the inverse square root (fairseq's: lr x sqrt(warm-up steps / step), here 20 of 10 a epoch),
 * each after a warm-up; inverse_sqrt without one is refused naming the key. */
static void test_decays(void **state)
{
    (void)state;
    /* linear from 1 to 0.1 over the 100 steps after a warm-up of 1 epoch (10 steps) from 0 */
    const char *linear[] = {"optim.lr=1", "optim.schedule=linear", "optim.min_lr=0.1", "optim.warmup_epochs=1"};
    dpt_lr_schedule s = build(linear, 4, 1, 10, 110);
    assert_float_equal(dpt_lr_at(&s, 4), 0.5, 1e-12); /* warm-up: (4 + 1) / 10 */
    for (int64_t step = 10; step <= 110; step += 7)
        assert_float_equal(dpt_lr_at(&s, step), 1.0 - 0.9 * (double)(step - 10) / 100.0, 1e-12);
    assert_float_equal(dpt_lr_at(&s, 500), 0.1, 1e-12); /* past the end: min_lr */
    /* wsd: 100 steps, decay over the last 25 to 0.01 */
    const char *shapes[] = {"optim.wsd_shape=linear", "optim.wsd_shape=sqrt", "optim.wsd_shape=cosine"};
    for (int k = 0; k < 3; k++) {
        const char *wsd[] = {"optim.lr=0.5", "optim.schedule=wsd", "optim.min_lr=0.01", "optim.decay_fraction=0.25",
                             shapes[k]};
        s = build(wsd, 5, 1, 10, 100);
        for (int64_t step = 0; step <= 100; step++) {
            double x = step <= 75 ? 0.0 : (double)(step - 75) / 25.0;
            double f = k == 0 ? 1.0 - x : k == 1 ? 1.0 - sqrt(x) : 0.5 * (1.0 + cos(M_PI * x));
            double want = step <= 75 ? 0.5 : 0.01 + 0.49 * f;
            if (fabs(dpt_lr_at(&s, step) - want) > 1e-12)
                fail_msg("wsd (%s) at step %lld: %.15g, want %.15g", shapes[k], (long long)step, dpt_lr_at(&s, step),
                         want);
        }
    }
    /* inverse_sqrt: 2 epochs of warm-up (20 steps), then 0.3 x sqrt(20 / step) */
    const char *isqrt[] = {"optim.lr=0.3", "optim.schedule=inverse_sqrt", "optim.warmup_epochs=2"};
    s = build(isqrt, 3, 1, 10, 1000);
    assert_float_equal(dpt_lr_at(&s, 9), 0.15, 1e-12);
    assert_float_equal(dpt_lr_at(&s, 20), 0.3, 1e-12);
    assert_float_equal(dpt_lr_at(&s, 80), 0.15, 1e-12);
    assert_float_equal(dpt_lr_at(&s, 333), 0.3 * sqrt(20.0 / 333.0), 1e-12);
    const char *no_warmup[] = {"optim.schedule=inverse_sqrt"};
    dpt_config *cfg = test_config(no_warmup, 1);
    dpt_error err;
    assert_false(dpt_lr_schedule_build(cfg, 1, 10, 100, &s, &err));
    assert_contains(err.msg, "warmup_epochs is 0");
    assert_contains(err.msg, "HINT");
    dpt_config_free(cfg);
}

static void test_clip(void **state)
{
    (void)state;
    dpt_ctx *ctx = test_ctx(1, 1);
    dpt_model *m = dpt_model_new(ctx, "clip", NULL);
    dpt_tensor *a = dpt_model_param(m, "a", 1, (int64_t[]){2});
    dpt_tensor *b = dpt_model_param(m, "b", 1, (int64_t[]){1});
    float *ga = dpt_tensor_grad(a)->data, *gb = dpt_tensor_grad(b)->data;
    ga[0] = 3, ga[1] = 4, gb[0] = 12;                              /* norm 13 */
    assert_float_equal(dpt_clip_grad_norm(ctx, m, 0), 13.0, 1e-9); /* measure only */
    assert_float_equal(ga[0], 3.0f, 0.0);
    assert_float_equal(dpt_clip_grad_norm(ctx, m, 26), 13.0, 1e-9); /* below the limit */
    assert_float_equal(gb[0], 12.0f, 0.0);
    assert_float_equal(dpt_clip_grad_norm(ctx, m, 6.5), 13.0, 1e-9);
    assert_float_equal(ga[0], 1.5f, 1e-5);
    assert_float_equal(ga[1], 2.0f, 1e-5);
    assert_float_equal(gb[0], 6.0f, 1e-5);
    gb[0] = NAN;
    assert_true(isnan(dpt_clip_grad_norm(ctx, m, 1.0)));
    dpt_model_free(m);
    dpt_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schedules),
        cmocka_unit_test(test_decays),
        cmocka_unit_test(test_clip),
    };
    return cmocka_run_group_tests_name("schedule", tests, NULL, NULL);
}
