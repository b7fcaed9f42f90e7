/* test_lion.c: the Lion optimizer (optim/lion.c, registered as [optim] name = lion) against a
 * float64 re-computation of its update (Chen et al. 2023, Algorithm 2, with decoupled weight
 * decay), step by step with changing gradients, weight decay on the weights and not on the 1-D
 * parameters (decay_norm_and_bias = false), its state through a checkpoint's accessors, and its
 * keys validated like any other. */
#include <float.h>

#include "tests/testutil.h"

#define STEPS 6
#define N_W 12
#define N_B 3

static double sign_d(double v)
{
    return (double)((v > 0) - (v < 0));
}

static void test_lion_matches_the_formula(void **state)
{
    (void)state;
    const char *sets[] = {"optim.name=lion", "optim.lr=0.01", "optim.weight_decay=0.3", "optim.lion_beta1=0.8",
                          "optim.lion_beta2=0.95", "optim.decay_norm_and_bias=false"};
    dpt_config *cfg = test_config(sets, (int)(sizeof sets / sizeof sets[0]));
    dpt_error err;
    dpt_ctx *ctx = test_ctx(2, 1);
    dpt_model *model = dpt_model_new(ctx, "lion_test", NULL);
    dpt_tensor *w = dpt_model_param(model, "w", 2, (int64_t[]){3, 4}); /* decayed */
    dpt_tensor *b = dpt_model_param(model, "b", 1, (int64_t[]){N_B});  /* not decayed */
    dpt_optim *opt = dpt_optim_build(model, cfg, &err);
    if (!opt) fail_msg("%s", err.msg);
    assert_string_equal(dpt_optim_name(opt), "lion");
    assert_int_equal(dpt_optim_num_state(opt), 2); /* one momentum per parameter */
    dpt_rng rng;
    dpt_rng_seed(&rng, 3);
    double p[N_W + N_B], m[N_W + N_B] = {0};
    float *pw = dpt_tensor_data(w), *pb = dpt_tensor_data(b);
    for (int i = 0; i < N_W + N_B; i++) {
        float v = 2.0f * dpt_rng_uniform(&rng) - 1.0f;
        *(i < N_W ? &pw[i] : &pb[i - N_W]) = v;
        p[i] = v;
    }
    const double lr = 0.01, wd = 0.3, b1 = (double)0.8f, b2 = (double)0.95f;
    int checked = 0;
    for (int t = 0; t < STEPS; t++) {
        float *gw = dpt_tensor_grad(w)->data, *gb = dpt_tensor_grad(b)->data;
        double g[N_W + N_B], c[N_W + N_B];
        for (int i = 0; i < N_W + N_B; i++) {
            float v = 2.0f * dpt_rng_uniform(&rng) - 1.0f;
            *(i < N_W ? &gw[i] : &gb[i - N_W]) = v;
            g[i] = v;
            c[i] = b1 * m[i] + (1 - b1) * g[i];
            p[i] = p[i] * (1 - lr * (i < N_W ? wd : 0.0)) - lr * sign_d(c[i]);
            m[i] = b2 * m[i] + (1 - b2) * g[i];
        }
        dpt_optim_step(ctx, opt);
        for (int i = 0; i < N_W + N_B; i++) {
            /* a direction within rounding of 0 may take either sign in float: such an element is
             * not compared (none is expected at these seeds; the count below says so) */
            if (fabs(c[i]) < 1e-6 * (fabs(m[i]) + fabs(g[i]) + 1e-30)) continue;
            double got = i < N_W ? pw[i] : pb[i - N_W];
            /* each step rounds p, the decay and the move: a few ulps of |p| + lr per step */
            assert_true(fabs(got - p[i]) <= (t + 1) * 4.0 * FLT_EPSILON * (fabs(p[i]) + lr));
            checked++;
        }
    }
    assert_int_equal(checked, STEPS * (N_W + N_B));
    /* the momentum, as a checkpoint reads it */
    float mw[N_W];
    dpt_tensor_copy_to_host(dpt_optim_state_at(opt, 0), mw);
    for (int i = 0; i < N_W; i++)
        assert_true(fabs(mw[i] - m[i]) <= STEPS * 4.0 * FLT_EPSILON * (fabs(m[i]) + 1.0));
    dpt_optim_free(opt);
    dpt_model_free(model);
    dpt_ctx_free(ctx);
    /* its keys: validated like any other */
    assert_false(dpt_config_set(cfg, "optim.lion_beta1=1.5", &err));
    assert_contains(err.msg, "[optim] lion_beta1 = 1.5: out of range");
    dpt_config_free(cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lion_matches_the_formula),
    };
    return cmocka_run_group_tests_name("lion", tests, NULL, NULL);
}
