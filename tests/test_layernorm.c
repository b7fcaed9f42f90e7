/* test_layernorm.c: the LayerNorm layer (layers/layernorm.c): its parameters (names, shapes,
 * torch.nn.LayerNorm's initial values), and its output and gradients (input, weight, bias) on a
 * (B, T, D) input against a float64 re-computation of torch's formula and central differences,
 * with and without affine parameters (set off 1 and 0, so a swapped weight and bias would show).
 * The GroupNorm layer (layers/groupnorm.c) likewise on (N, C, H, W), over the CPU kernels' three
 * variants, nearest-neighbour upsampling (the decoders' other pieces), and dpt_rms_norm (LLaMA's
 * RMSNorm) with and without a weight against float64 and central differences. */
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

/* ---------------------------------------------------------------- RMSNorm (dpt_rms_norm) */

static dpt_tensor *rms_build(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    return dpt_rms_norm(ctx, in[0], *(bool *)u ? in[1] : NULL, 1e-5f);
}

/* LLaMA's RMSNorm in float64: x / sqrt(mean(x^2) + eps) * w */
static void rms_ref(const double *const *in, double *out, void *u)
{
    bool weighted = *(bool *)u;
    for (int r = 0; r < 2 * 3; r++) {
        const double *x = in[0] + r * 12;
        double ms = 0;
        for (int k = 0; k < 12; k++)
            ms += x[k] * x[k] / 12.0;
        for (int k = 0; k < 12; k++)
            out[r * 12 + k] = x[k] / sqrt(ms + 1e-5) * (weighted ? in[1][k] : 1.0);
    }
}

static void test_rms_norm(void **state)
{
    (void)state;
    for (int weighted = 0; weighted < 2; weighted++) {
        bool w = weighted;
        gradcheck gc = {.n_in = weighted ? 2 : 1, .ndim = {3, 1}, .shape = {{2, 3, 12}, {12}}, .lo = -2, .hi = 2,
                        .build = rms_build, .reference = rms_ref, .user = &w, .fwd_rtol = 1e-5, .grad_rtol = 1e-3,
                        .grad_atol = 1e-5};
        run_gradcheck(weighted ? "RMSNorm (weighted)" : "RMSNorm", &gc, 995 + (uint64_t)weighted);
    }
}

/* ---------------------------------------------------------------- GroupNorm */

typedef struct gn_case {
    int64_t n, c, h, w, groups;
    bool affine;
    dpt_model *model;
    dpt_groupnorm *layer;
} gn_case;

static void gn_setup(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    gn_case *c = u;
    c->model = dpt_model_new(ctx, "gn", NULL);
    c->layer = dpt_groupnorm_new(c->model, "norm", c->groups, &(dpt_shape3){c->c, c->h, c->w}, 1e-5f, c->affine);
    assert_null(dpt_model_error(c->model));
    assert_int_equal(dpt_model_num_params(c->model), c->affine ? 2 : 0);
    if (!c->affine) return;
    dpt_tensor *w = dpt_model_param_at(c->model, 0), *b = dpt_model_param_at(c->model, 1);
    assert_string_equal(dpt_tensor_name(w), "norm.weight");
    for (int64_t i = 0; i < c->c; i++) /* torch's initial values, then off them */
        assert_true(dpt_tensor_data(w)[i] == 1.0f && dpt_tensor_data(b)[i] == 0.0f);
    dpt_rng rng;
    dpt_rng_seed(&rng, 78);
    for (int64_t i = 0; i < c->c; i++)
        dpt_tensor_data(w)[i] = 0.5f + dpt_rng_uniform(&rng), dpt_tensor_data(b)[i] = dpt_rng_uniform(&rng) - 0.5f;
    in[1] = w, in[2] = b;
}

static void gn_teardown(void *u)
{
    dpt_model_free(((gn_case *)u)->model);
}

static dpt_tensor *gn_build(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    return dpt_groupnorm_forward(ctx, ((gn_case *)u)->layer, in[0]);
}

/* torch.nn.functional.group_norm: per sample and group, over its C/G channels and H W positions */
static void gn_ref(const double *const *in, double *out, void *u)
{
    const gn_case *c = u;
    int64_t per = c->c / c->groups * c->h * c->w, hw = c->h * c->w;
    for (int64_t s = 0; s < c->n * c->groups; s++) {
        const double *x = in[0] + s * per;
        double mean = 0, var = 0;
        for (int64_t k = 0; k < per; k++)
            mean += x[k] / (double)per;
        for (int64_t k = 0; k < per; k++)
            var += (x[k] - mean) * (x[k] - mean) / (double)per;
        for (int64_t k = 0; k < per; k++) {
            int64_t ch = (s % c->groups) * (c->c / c->groups) + k / hw;
            double v = (x[k] - mean) / sqrt(var + 1e-5);
            out[s * per + k] = c->affine ? v * in[1][ch] + in[2][ch] : v;
        }
    }
}

static void test_groupnorm_layer(void **state)
{
    (void)state;
    /* n, c, h, w, groups, affine: 2 groups of 3, a group per channel (InstanceNorm), one group
     * (LayerNorm over C H W), 16 channels in 4 */
    const int64_t cases[][6] = {{2, 6, 3, 4, 2, 1}, {3, 4, 2, 2, 4, 1}, {2, 5, 3, 3, 1, 0}, {2, 16, 3, 3, 4, 1}};
    for (int variant = 0; variant < TEST_VARIANTS; variant++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            test_variant(variant);
            const int64_t *v = cases[i];
            gn_case c = {v[0], v[1], v[2], v[3], v[4], v[5] != 0, NULL, NULL};
            gradcheck gc = {.n_in = c.affine ? 3 : 1, .ndim = {4, 1, 1}, .shape = {{c.n, c.c, c.h, c.w}, {c.c}, {c.c}},
                            .lo = -2, .hi = 2, .setup = gn_setup, .teardown = gn_teardown, .build = gn_build,
                            .reference = gn_ref, .user = &c, .fwd_rtol = 1e-5, .grad_rtol = 1e-3, .grad_atol = 1e-5};
            char name[96];
            snprintf(name, sizeof name, "GroupNorm case %zu (%s)", i, test_kernels_name());
            run_gradcheck(name, &gc, 970 + i);
            test_variant(-1);
        }
}

/* ---------------------------------------------------------------- nearest upsampling */

static int64_t up_s[2]; /* the case's factors */

static dpt_tensor *up_build(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    (void)u;
    return dpt_upsample_nearest2d(ctx, in[0], up_s[0], up_s[1]);
}

static void up_ref(const double *const *in, double *out, void *u)
{
    const int64_t *d = u; /* n c h w */
    int64_t oh = d[2] * up_s[0], ow = d[3] * up_s[1];
    for (int64_t p = 0; p < d[0] * d[1]; p++)
        for (int64_t y = 0; y < oh; y++)
            for (int64_t x = 0; x < ow; x++) /* torch's nearest: source index floor(out / scale) */
                out[(p * oh + y) * ow + x] = in[0][(p * d[2] + y / up_s[0]) * d[3] + x / up_s[1]];
}

static void test_upsample_nearest(void **state)
{
    (void)state;
    const int64_t cases[][6] = {{2, 3, 4, 5, 2, 2}, {1, 2, 3, 3, 3, 1}, {2, 1, 2, 4, 1, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int64_t *v = cases[i];
        up_s[0] = v[4], up_s[1] = v[5];
        gradcheck gc = {.n_in = 1, .ndim = {4}, .shape = {{v[0], v[1], v[2], v[3]}}, .lo = -1, .hi = 1,
                        .build = up_build, .reference = up_ref, .user = (void *)v, .fwd_rtol = 0,
                        .grad_rtol = 1e-4, .grad_atol = 1e-5};
        char name[64];
        snprintf(name, sizeof name, "upsample_nearest2d case %zu", i);
        run_gradcheck(name, &gc, 960 + i);
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
    m = dpt_model_new(ctx, "gn", NULL);
    dpt_groupnorm_new(m, "gn", 4, &(dpt_shape3){6, 2, 2}, 1e-5f, true);
    assert_non_null(dpt_model_error(m));
    assert_contains(dpt_model_error(m), "groupnorm gn: 6 channels in 4 groups");
    dpt_model_free(m);
    dpt_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layernorm_layer),
        cmocka_unit_test(test_rms_norm),
        cmocka_unit_test(test_groupnorm_layer),
        cmocka_unit_test(test_upsample_nearest),
        cmocka_unit_test(test_bad_settings),
    };
    return cmocka_run_group_tests_name("layernorm", tests, NULL, NULL);
}
