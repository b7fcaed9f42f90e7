/* test_layernorm.c: the LayerNorm layer (layers/layernorm.c): its parameters (names, shapes,
 * torch.nn.LayerNorm's initial values), and its output and gradients (input, weight, bias) on a
 * (B, T, D) input against a float64 re-computation of torch's formula and central differences,
 * with and without affine parameters (set off 1 and 0, so a swapped weight and bias would show). */
#include "tests/testutil.h"

typedef struct ln_layer_case {
    bool affine;
    dpt_model *model;
    dpt_layernorm *layer;
} ln_layer_case;

/* the layer's parameters are the gradcheck's inputs 1 and 2 (perturbed like any input) */
static void layer_setup(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    ln_layer_case *c = u;
    c->model = dpt_model_new(ctx, "ln", NULL);
    c->layer = dpt_layernorm_new(c->model, "norm", 12, 1e-5f, c->affine);
    assert_null(dpt_model_error(c->model));
    assert_int_equal(dpt_model_num_params(c->model), c->affine ? 2 : 0);
    if (!c->affine) return;
    dpt_tensor *w = dpt_model_param_at(c->model, 0), *b = dpt_model_param_at(c->model, 1);
    assert_string_equal(dpt_tensor_name(w), "norm.weight");
    assert_string_equal(dpt_tensor_name(b), "norm.bias");
    for (int i = 0; i < 12; i++) /* torch's initial values */
        assert_true(dpt_tensor_data(w)[i] == 1.0f && dpt_tensor_data(b)[i] == 0.0f);
    /* off 1 and 0, so a swapped weight and bias would show */
    dpt_rng rng;
    dpt_rng_seed(&rng, 77);
    for (int i = 0; i < 12; i++)
        dpt_tensor_data(w)[i] = 0.5f + dpt_rng_uniform(&rng), dpt_tensor_data(b)[i] = dpt_rng_uniform(&rng) - 0.5f;
    in[1] = w, in[2] = b;
}

static void layer_teardown(void *u)
{
    dpt_model_free(((ln_layer_case *)u)->model);
}

static dpt_tensor *layer_build(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    return dpt_layernorm_forward(ctx, ((ln_layer_case *)u)->layer, in[0]);
}

static void layer_ref(const double *const *in, double *out, void *u)
{
    const ln_layer_case *c = u;
    for (int r = 0; r < 2 * 3; r++) {
        const double *x = in[0] + r * 12;
        double mean = 0, var = 0;
        for (int k = 0; k < 12; k++)
            mean += x[k] / 12.0;
        for (int k = 0; k < 12; k++)
            var += (x[k] - mean) * (x[k] - mean) / 12.0; /* biased, as torch */
        for (int k = 0; k < 12; k++) {
            double v = (x[k] - mean) / sqrt(var + 1e-5);
            out[r * 12 + k] = c->affine ? v * in[1][k] + in[2][k] : v;
        }
    }
}

static void test_layernorm_layer(void **state)
{
    (void)state;
    for (int affine = 0; affine < 2; affine++) {
        ln_layer_case c = {.affine = affine};
        gradcheck gc = {.n_in = affine ? 3 : 1, .ndim = {3, 1, 1}, .shape = {{2, 3, 12}, {12}, {12}}, .lo = -2,
                        .hi = 2, .setup = layer_setup, .teardown = layer_teardown, .build = layer_build,
                        .reference = layer_ref, .user = &c, .fwd_rtol = 1e-5, .grad_rtol = 1e-3, .grad_atol = 1e-5};
        run_gradcheck(affine ? "LayerNorm layer (affine)" : "LayerNorm layer", &gc, 990 + (uint64_t)affine);
    }
}

static void test_bad_settings(void **state)
{
    (void)state;
    dpt_ctx *ctx = test_ctx(1, 1);
    dpt_model *m = dpt_model_new(ctx, "ln", NULL);
    dpt_layernorm_new(m, "norm", 0, 1e-5f, true);
    assert_non_null(dpt_model_error(m));
    assert_contains(dpt_model_error(m), "layernorm norm: dim 0 and eps");
    dpt_model_free(m);
    dpt_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layernorm_layer),
        cmocka_unit_test(test_bad_settings),
    };
    return cmocka_run_group_tests_name("layernorm", tests, NULL, NULL);
}
