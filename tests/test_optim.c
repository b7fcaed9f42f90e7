/* test_optim.c: optimizer steps against updates computed by hand from the torch.optim
 * formulas (literal numbers for a constant gradient, and a double re-computation for a
 * changing one). */
#include "tests/testutil.h"

typedef struct one_param {
    dpt_ctx *ctx;
    dpt_model *model;
    dpt_tensor *p;
} one_param;

static one_param make_param(const float *values, int n)
{
    one_param o;
    o.ctx = test_ctx(1, 1);
    o.model = dpt_model_new(o.ctx, "p", NULL);
    o.p = dpt_model_param(o.model, "p", 1, (int64_t[]){n});
    memcpy(dpt_tensor_data(o.p), values, (size_t)n * sizeof(float));
    return o;
}

static void set_grad(one_param *o, const float *g, int n)
{
    memcpy(dpt_tensor_grad(o->p)->data, g, (size_t)n * sizeof(float));
}

static void free_param(one_param *o)
{
    dpt_model_free(o->model);
    dpt_ctx_free(o->ctx);
}

/* p = 1, g = 0.5 each step, lr 0.1, momentum 0.9:
 * buf 0.5 -> p 0.95;  buf 0.95 -> p 0.855;  buf 1.355 -> p 0.7195 */
static void test_sgd_momentum_literal(void **state)
{
    (void)state;
    one_param o = make_param((float[]){1.0f}, 1);
    dpt_optim *opt = dpt_sgd_new(o.model, 0.1f, 0.9f, 0.0f, 0.0f, false);
    const float expect[3] = {0.95f, 0.855f, 0.7195f};
    for (int t = 0; t < 3; t++) {
        set_grad(&o, (float[]){0.5f}, 1);
        dpt_optim_step(o.ctx, opt);
        assert_float_equal(dpt_tensor_data(o.p)[0], expect[t], 1e-6);
    }
    dpt_optim_free(opt);
    free_param(&o);
}

/* Nesterov: g' = g + momentum * buf:  step 1: buf 0.5, g' 0.95 -> p 0.905;
 * step 2: buf 0.95, g' 1.355 -> p 0.7695 */
static void test_sgd_nesterov_literal(void **state)
{
    (void)state;
    one_param o = make_param((float[]){1.0f}, 1);
    dpt_optim *opt = dpt_sgd_new(o.model, 0.1f, 0.9f, 0.0f, 0.0f, true);
    const float expect[2] = {0.905f, 0.7695f};
    for (int t = 0; t < 2; t++) {
        set_grad(&o, (float[]){0.5f}, 1);
        dpt_optim_step(o.ctx, opt);
        assert_float_equal(dpt_tensor_data(o.p)[0], expect[t], 1e-6);
    }
    dpt_optim_free(opt);
    free_param(&o);
}

/* Weight decay is added to the gradient (coupled), dampening scales new gradients after the
 * first step: p = 2, g = 1, wd 0.1, lr 0.5, momentum 0.5, dampening 0.5:
 * step 1: g = 1.2, buf = 1.2, p = 1.4;  step 2: g = 1.14, buf = 0.6 + 0.57 = 1.17, p = 0.815 */
static void test_sgd_decay_dampening_literal(void **state)
{
    (void)state;
    one_param o = make_param((float[]){2.0f}, 1);
    dpt_optim *opt = dpt_sgd_new(o.model, 0.5f, 0.5f, 0.5f, 0.1f, false);
    const float expect[2] = {1.4f, 0.815f};
    for (int t = 0; t < 2; t++) {
        set_grad(&o, (float[]){1.0f}, 1);
        dpt_optim_step(o.ctx, opt);
        assert_float_equal(dpt_tensor_data(o.p)[0], expect[t], 1e-6);
    }
    dpt_optim_free(opt);
    free_param(&o);
}

/* decay_1d = false (the ResNet recipe): a 1-D parameter (bias, batch-norm scale) steps
 * without weight decay, a 2-D one with it, in both optimizers. Plain SGD, lr 0.5, wd 0.1,
 * p = 2, g = 1: with decay p = 2 - 0.5 (1 + 0.2) = 1.4, without 1.5. AdamW, lr 0.1, wd 0.1,
 * p = 1: with decay 1 (1 - 0.01) - 0.1 = 0.89, without 0.9. */
static void test_no_decay_on_1d(void **state)
{
    (void)state;
    for (int adam = 0; adam < 2; adam++) {
        dpt_ctx *ctx = test_ctx(1, 1);
        dpt_model *m = dpt_model_new(ctx, "m", NULL);
        dpt_tensor *w = dpt_model_param(m, "w", 2, (int64_t[]){2, 2}), *b = dpt_model_param(m, "b", 1, (int64_t[]){3});
        dpt_optim *opt = adam ? dpt_adamw_new(m, 0.1f, 0.9f, 0.999f, 1e-8f, 0.1f)
                              : dpt_sgd_new(m, 0.5f, 0.0f, 0.0f, 0.1f, false);
        for (int decay = 1; decay >= 0; decay--) {
            dpt_optim_set_decay_1d(opt, decay);
            dpt_optim_set_steps(opt, 0);
            for (int i = 0; i < 4; i++)
                dpt_tensor_data(w)[i] = adam ? 1.0f : 2.0f, dpt_tensor_grad(w)->data[i] = 1.0f;
            for (int i = 0; i < 3; i++)
                dpt_tensor_data(b)[i] = adam ? 1.0f : 2.0f, dpt_tensor_grad(b)->data[i] = 1.0f;
            for (int i = 0; i < dpt_optim_num_state(opt); i++)
                memset(dpt_optim_state_at(opt, i)->data, 0, (size_t)dpt_optim_state_at(opt, i)->numel * sizeof(float));
            dpt_optim_step(ctx, opt);
            float decayed = adam ? 0.89f : 1.4f, plain = adam ? 0.9f : 1.5f;
            for (int i = 0; i < 4; i++)
                assert_float_equal(dpt_tensor_data(w)[i], decayed, 1e-6);
            for (int i = 0; i < 3; i++)
                assert_float_equal(dpt_tensor_data(b)[i], decay ? decayed : plain, 1e-6);
        }
        dpt_optim_free(opt);
        dpt_model_free(m);
        dpt_ctx_free(ctx);
    }
}

/* With a constant gradient Adam's bias-corrected step is exactly lr (up to eps), so with
 * decoupled decay p_t = p_{t-1} (1 - lr wd) - lr: 0.899, 0.798101, 0.6973029... */
static void test_adamw_literal(void **state)
{
    (void)state;
    one_param o = make_param((float[]){1.0f}, 1);
    dpt_optim *opt = dpt_adamw_new(o.model, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f);
    const float expect[3] = {0.899f, 0.798101f, 0.6973029899f};
    for (int t = 0; t < 3; t++) {
        set_grad(&o, (float[]){0.5f}, 1);
        dpt_optim_step(o.ctx, opt);
        assert_float_equal(dpt_tensor_data(o.p)[0], expect[t], 2e-6);
    }
    dpt_optim_free(opt);
    free_param(&o);
}

/* Changing gradients, three elements, against a double re-computation of torch's AdamW. */
static void test_adamw_changing_gradients(void **state)
{
    (void)state;
    float p0[3] = {0.5f, -1.0f, 2.0f};
    one_param o = make_param(p0, 3);
    const double lr = 0.01, b1 = 0.8, b2 = 0.95, eps = 1e-6, wd = 0.05;
    dpt_optim *opt = dpt_adamw_new(o.model, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd);
    double p[3] = {0.5, -1.0, 2.0}, m[3] = {0}, v[3] = {0};
    for (int t = 1; t <= 6; t++) {
        float g[3];
        for (int i = 0; i < 3; i++)
            g[i] = (float)(sin(t * 1.3 + i) * (i + 1));
        set_grad(&o, g, 3);
        dpt_optim_step(o.ctx, opt);
        for (int i = 0; i < 3; i++) {
            p[i] *= 1 - lr * wd;
            m[i] = b1 * m[i] + (1 - b1) * g[i];
            v[i] = b2 * v[i] + (1 - b2) * (double)g[i] * g[i];
            double mhat = m[i] / (1 - pow(b1, t)), vhat = v[i] / (1 - pow(b2, t));
            p[i] -= lr * mhat / (sqrt(vhat) + eps);
            assert_float_equal(dpt_tensor_data(o.p)[i], p[i], 1e-5);
        }
    }
    dpt_optim_free(opt);
    free_param(&o);
}

/* ZeRO (dpt_optim_shard): two optimizers that each step a complementary slice of every
 * parameter (one slice empty, one parameter split inside), their slices merged after each
 * step as the all-gather does, reach the unsharded optimizer's parameters bit for bit, and the
 * state gathered whole (dpt_optim_state_whole through a gather callback) is its state. SGD with
 * momentum and weight decay, AdamW without decay on 1-D parameters, Lion. */
typedef struct two_shards {
    dpt_optim *other;
    const int64_t *lo[2], *hi[2];
    int state; /* the state index asked for */
} two_shards;

static void gather_two(int param, float *whole, const float *mine, void *user)
{
    two_shards *g = user;
    int nstate = dpt_optim_num_state(g->other) / 3;
    int64_t lo0 = g->lo[0][param], n0 = g->hi[0][param] - lo0, lo1 = g->lo[1][param], n1 = g->hi[1][param] - lo1;
    assert_non_null(whole);
    if (n0) memcpy(whole + lo0, mine, (size_t)n0 * sizeof(float));
    if (n1) memcpy(whole + lo1, dpt_optim_state_at(g->other, param * nstate + g->state)->data, (size_t)n1 * sizeof(float));
}

static void test_sharded_steps(void **state)
{
    (void)state;
    const int64_t shapes[3][2] = {{35, 20}, {20, 1}, {13, 10}};
    const int64_t lo0[3] = {0, 0, 0}, hi0[3] = {389, 0, 130}, lo1[3] = {389, 0, 130}, hi1[3] = {700, 20, 130};
    for (int kind = 0; kind < 3; kind++) {
        dpt_ctx *ctx = test_ctx(1, 1);
        dpt_model *m[3];
        dpt_optim *o[3];
        for (int k = 0; k < 3; k++) {
            m[k] = dpt_model_new(ctx, "m", NULL);
            for (int p = 0; p < 3; p++) {
                char name[16];
                snprintf(name, sizeof name, "p%d", p);
                dpt_tensor *t = shapes[p][1] == 1 ? dpt_model_param(m[k], name, 1, (int64_t[]){shapes[p][0]})
                                                  : dpt_model_param(m[k], name, 2, shapes[p]);
                for (int64_t i = 0; i < t->numel; i++)
                    t->data[i] = sinf(0.1f * (float)i + (float)p);
            }
            if (kind == 0) o[k] = dpt_sgd_new(m[k], 0.05f, 0.9f, 0.0f, 0.01f, false);
            else if (kind == 1) o[k] = dpt_adamw_new(m[k], 0.01f, 0.9f, 0.999f, 1e-8f, 0.1f);
            else o[k] = dpt_optim_new(m[k], "lion", (float[]){0.9f, 0.99f}, 0.001f, 0.1f);
            if (kind == 1) dpt_optim_set_decay_1d(o[k], false);
        }
        dpt_optim_shard(o[1], lo0, hi0);
        dpt_optim_shard(o[2], lo1, hi1);
        assert_null(dpt_optim_state_at(o[1], 1 * (dpt_optim_num_state(o[1]) / 3))); /* p1: none of it here */
        for (int step = 0; step < 5; step++) {
            for (int k = 0; k < 3; k++) {
                for (int p = 0; p < 3; p++) {
                    dpt_tensor *t = dpt_model_param_at(m[k], p);
                    for (int64_t i = 0; i < t->numel; i++)
                        dpt_tensor_grad(t)->data[i] = cosf(0.37f * (float)i + (float)(step * 3 + p));
                }
                dpt_optim_step(ctx, o[k]);
            }
            for (int p = 0; p < 3; p++) { /* the all-gather: each shard's slice into the other */
                float *a = dpt_model_param_at(m[1], p)->data, *b = dpt_model_param_at(m[2], p)->data;
                memcpy(a + lo1[p], b + lo1[p], (size_t)(hi1[p] - lo1[p]) * sizeof(float));
                memcpy(b + lo0[p], a + lo0[p], (size_t)(hi0[p] - lo0[p]) * sizeof(float));
                for (int k = 1; k < 3; k++)
                    assert_memory_equal(dpt_model_param_at(m[k], p)->data, dpt_model_param_at(m[0], p)->data,
                                        (size_t)dpt_model_param_at(m[0], p)->numel * sizeof(float));
            }
        }
        two_shards g = {.other = o[2], .lo = {lo0, lo1}, .hi = {hi0, hi1}};
        dpt_optim_set_gather(o[1], gather_two, &g);
        for (int i = 0; i < dpt_optim_num_state(o[0]); i++) {
            g.state = i % (dpt_optim_num_state(o[0]) / 3);
            dpt_tensor *whole = dpt_optim_state_whole(o[1], i, true), *want = dpt_optim_state_at(o[0], i);
            assert_int_equal(dpt_tensor_numel(whole), dpt_tensor_numel(want));
            assert_string_equal(whole->name, want->name);
            assert_memory_equal(whole->data, want->data, (size_t)want->numel * sizeof(float));
        }
        for (int k = 0; k < 3; k++)
            dpt_optim_free(o[k]), dpt_model_free(m[k]);
        dpt_ctx_free(ctx);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgd_momentum_literal),        cmocka_unit_test(test_sgd_nesterov_literal),
        cmocka_unit_test(test_sgd_decay_dampening_literal), cmocka_unit_test(test_adamw_literal),
        cmocka_unit_test(test_adamw_changing_gradients),    cmocka_unit_test(test_no_decay_on_1d),
        cmocka_unit_test(test_sharded_steps),
    };
    return cmocka_run_group_tests_name("optim", tests, NULL, NULL);
}
