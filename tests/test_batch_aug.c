/* test_batch_aug.c: [data] random_erase, mixup and cutmix (data/batch_aug.c). The Beta draws against the distribution's
 * moments and two closed-form CDFs (alpha 1: uniform; alpha 1/2: the arcsine law); the batch
 * draws' rules (probability, switch, box inside the image, lambda = the area left); the
 * in-place mixing of a batch against a float64 recomputation of timm's formulas (NCHW and
 * NHWC, odd and even batches, labels moved bit for bit); the mixed loss and its gradient against
 * the float64 cross-entropy of timm's mixed soft targets (mixup_target with label smoothing);
 * random erasing's draws against torchvision's RandomErasing statistics, and the boxes set to 0
 * in NCHW and NHWC. */
#include "tests/testutil.h"
#include "data/data.h"
#include "runtime/registry.h"

/* ---------------------------------------------------------------- the draws */

/* |got - want| within k standard errors: the statistical tests' bound (k = 5: a false alarm
 * once in about 2 million runs of a correct generator). */
static void within_se(const char *what, double got, double want, double se)
{
    if (!(fabs(got - want) <= 5.0 * se))
        fail_msg("%s: %.6f, expected %.6f (5 standard errors: %.6f)", what, got, want, 5 * se);
}

static void test_gamma_and_beta(void **state)
{
    (void)state;
    enum { N = 200000 };
    dpt_rng rng;
    dpt_rng_seed(&rng, 7);
    /* Gamma(k, 1): mean k, variance k; the mean's standard error sqrt(k / N), the sample
     * variance's sqrt((mu4 - k^2) / N) with mu4 = 3k^2 + 6k */
    const double shapes[] = {0.2, 0.8, 1.0, 2.5, 9.0};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        double k = shapes[s], sum = 0, sum2 = 0;
        for (int i = 0; i < N; i++) {
            double g = dpt_rng_gamma(&rng, k);
            if (!(g >= 0)) fail_msg("gamma(%g) drew %g", k, g);
            sum += g, sum2 += g * g;
        }
        double mean = sum / N, var = sum2 / N - mean * mean;
        char what[64];
        snprintf(what, sizeof what, "gamma(%g) mean", k);
        within_se(what, mean, k, sqrt(k / N));
        snprintf(what, sizeof what, "gamma(%g) variance", k);
        within_se(what, var, k, sqrt((3 * k * k + 6 * k - k * k) / N));
    }
    /* Beta(a, a): mean 1/2, variance 1 / (4 (2a + 1)), excess kurtosis -6 / (2a + 3) */
    const double alphas[] = {0.1, 0.2, 0.5, 0.8, 1.0, 4.0};
    for (size_t s = 0; s < sizeof alphas / sizeof alphas[0]; s++) {
        double a = alphas[s], sum = 0, sum2 = 0, var_want = 1.0 / (4.0 * (2 * a + 1));
        double below[3] = {0}, at[3] = {0.1, 0.25, 0.5};
        for (int i = 0; i < N; i++) {
            double b = dpt_rng_beta(&rng, a);
            if (!(b >= 0 && b <= 1)) fail_msg("beta(%g) drew %g", a, b);
            sum += b, sum2 += (b - 0.5) * (b - 0.5);
            for (int j = 0; j < 3; j++)
                below[j] += b < at[j];
        }
        double mu4 = var_want * var_want * (3.0 - 6.0 / (2 * a + 3));
        char what[64];
        snprintf(what, sizeof what, "beta(%g) mean", a);
        within_se(what, sum / N, 0.5, sqrt(var_want / N));
        snprintf(what, sizeof what, "beta(%g) variance", a);
        within_se(what, sum2 / N, var_want, sqrt((mu4 - var_want * var_want) / N));
        /* closed-form CDFs: Beta(1, 1) is uniform, Beta(1/2, 1/2) the arcsine law (2/pi) asin(sqrt x) */
        for (int j = 0; j < 3 && (a == 1.0 || a == 0.5); j++) {
            double p = a == 1.0 ? at[j] : 2.0 / M_PI * asin(sqrt(at[j]));
            snprintf(what, sizeof what, "P(beta(%g) < %g)", a, at[j]);
            within_se(what, below[j] / N, p, sqrt(p * (1 - p) / N));
        }
    }
}

static void test_batch_draws(void **state)
{
    (void)state;
    enum { N = 40000 };
    const int64_t sizes[][2] = {{28, 28}, {17, 40}, {1, 1}};
    for (int z = 0; z < 3; z++) {
        int64_t h = sizes[z][0], w = sizes[z][1];
        dpt_mix_options o = {.mixup_alpha = 0.8, .cutmix_alpha = 1.0, .prob = 0.7, .switch_prob = 0.3};
        double mixed = 0, cut = 0, lam_mixup = 0, lam_cut = 0;
        for (uint64_t key = 0; key < N; key++) {
            dpt_mix m, again;
            dpt_mix_draw(&o, key * 0x9e3779b97f4a7c15ULL, h, w, &m);
            dpt_mix_draw(&o, key * 0x9e3779b97f4a7c15ULL, h, w, &again);
            assert_memory_equal(&m, &again, sizeof m); /* a pure function of the key */
            if (!m.on) {
                assert_true(m.lambda == 1.0);
                continue;
            }
            mixed++;
            assert_true(m.lambda >= 0 && m.lambda <= 1);
            if (!m.cut) {
                lam_mixup += m.lambda;
                continue;
            }
            cut++;
            assert_true(0 <= m.y0 && m.y0 <= m.y1 && m.y1 <= h && 0 <= m.x0 && m.x0 <= m.x1 && m.x1 <= w);
            /* timm's box: centre +- side // 2, so a side that no edge clipped is even */
            if (m.y0 > 0 && m.y1 < h) assert_true((m.y1 - m.y0) % 2 == 0);
            if (m.x0 > 0 && m.x1 < w) assert_true((m.x1 - m.x0) % 2 == 0);
            /* lambda is the share of the image left unpasted, exactly */
            assert_true(m.lambda == 1.0 - (double)((m.y1 - m.y0) * (m.x1 - m.x0)) / (double)(h * w));
            lam_cut += m.lambda;
        }
        within_se("share of batches mixed", mixed / N, 0.7, sqrt(0.7 * 0.3 / N));
        within_se("share of mixed batches cut", cut / mixed, 0.3, sqrt(0.3 * 0.7 / mixed));
        /* mixup's lambda is Beta(0.8, 0.8): mean 1/2 */
        within_se("mixup's mean lambda", lam_mixup / (mixed - cut), 0.5,
                  sqrt(1.0 / (4 * 2.6) / (mixed - cut)));
        /* cutmix keeps more than its raw lambda on average (the box is clipped and even-sided) */
        if (h > 1)
            assert_true(lam_cut / cut > 0.5);
        else
            assert_true(lam_cut == cut); /* a 1 x 1 image: the box is always empty */
    }
    /* off: the batch as it is */
    dpt_mix m;
    dpt_mix_draw(&(dpt_mix_options){.mixup_alpha = 0.8, .prob = 0}, 1, 28, 28, &m);
    assert_false(m.on);
    dpt_mix_draw(&(dpt_mix_options){.prob = 1}, 1, 28, 28, &m);
    assert_false(m.on);
    /* only mixup, or only cutmix: never the other */
    for (uint64_t key = 0; key < 1000; key++) {
        dpt_mix_draw(&(dpt_mix_options){.mixup_alpha = 0.2, .prob = 1, .switch_prob = 1}, key, 28, 28, &m);
        assert_true(m.on && !m.cut);
        dpt_mix_draw(&(dpt_mix_options){.cutmix_alpha = 0.2, .prob = 1, .switch_prob = 0}, key, 28, 28, &m);
        assert_true(m.on && m.cut);
    }
}

/* ---------------------------------------------------------------- mixing a batch */

static void test_mix_apply(void **state)
{
    (void)state;
    dpt_ctx *ctx = test_ctx(2, 1);
    dpt_rng rng;
    dpt_rng_seed(&rng, 3);
    for (int64_t n = 1; n <= 6; n++)
        for (int nhwc = 0; nhwc < 2; nhwc++)
            for (int cut = 0; cut < 2; cut++) {
                int64_t c = 3, h = 6, w = 7, per = c * h * w;
                dpt_tensor *x = test_input(ctx, &rng, 4, (int64_t[]){n, c, h, w}, -3, 3);
                x->requires_grad = false;
                if (nhwc) x->layout = DPT_LAYOUT_NHWC; /* the same values, read as (n, h, w, c) */
                float *orig = malloc((size_t)(n * per) * sizeof *orig);
                memcpy(orig, x->data, (size_t)(n * per) * sizeof *orig);
                dpt_mix m = {.on = true, .cut = cut, .lambda = 0.3, .y0 = 1, .y1 = 5, .x0 = 2, .x1 = 7};
                if (cut) m.lambda = 1.0 - 4.0 * 5.0 / 42.0;
                dpt_mix_apply(ctx, x, &m);
                for (int64_t i = 0; i < n; i++)
                    for (int64_t e = 0; e < per; e++) {
                        int64_t j = n - 1 - i, ch, y, xx;
                        if (nhwc)
                            ch = e % c, xx = e / c % w, y = e / (c * w);
                        else
                            ch = e / (h * w), y = e / w % h, xx = e % w;
                        (void)ch;
                        double u = orig[i * per + e], v = orig[j * per + e], got = x->data[i * per + e];
                        if (cut) { /* timm: x[:, :, y0:y1, x0:x1] = x.flip(0)[:, :, y0:y1, x0:x1] */
                            bool in_box = y >= m.y0 && y < m.y1 && xx >= m.x0 && xx < m.x1;
                            if (got != (in_box ? v : u))
                                fail_msg("cutmix n %lld %s: sample %lld value %lld: %g, expected %g",
                                         (long long)n, nhwc ? "nhwc" : "nchw", (long long)i, (long long)e,
                                         got, in_box ? v : u);
                        } else { /* lam x_i + (1 - lam) x_j, the products and the sum each rounded to float */
                            double want = 0.3 * u + 0.7 * v,
                                   tol = 4 * 0x1p-24 * (0.3 * fabs(u) + 0.7 * fabs(v));
                            if (!(fabs(got - want) <= tol))
                                fail_msg("mixup n %lld: sample %lld value %lld: %.9g, expected %.9g",
                                         (long long)n, (long long)i, (long long)e, got, want);
                        }
                    }
                free(orig);
                dpt_tensor_free(x);
            }
    /* labels: reversed, bit for bit (values a float would not keep, e.g. NaN patterns, too) */
    for (int64_t n = 1; n <= 5; n++) {
        int32_t labels[5] = {7, -1, 0x7fc00001, 3, 1 << 30}, got[5];
        dpt_tensor *y = dpt_tensor_new_dtype(ctx, DPT_I32, 1, (int64_t[]){n});
        dpt_tensor *store = dpt_tensor_new_dtype(ctx, DPT_I32, 1, (int64_t[]){8});
        dpt_tensor_copy_from_host_i32(y, labels);
        dpt_tensor *partner = dpt_mix_partner_labels(ctx, y, store);
        assert_int_equal(partner->shape[0], n);
        dpt_tensor_copy_to_host_i32(partner, got);
        for (int64_t i = 0; i < n; i++)
            assert_int_equal(got[i], labels[n - 1 - i]);
        dpt_tape_clear(ctx);
        dpt_tensor_free(y), dpt_tensor_free(store);
    }
    dpt_ctx_free(ctx);
}

/* ---------------------------------------------------------------- random erasing */

/* torchvision's RandomErasing.get_params, its statistics: the share erased, the box inside the
 * image, its area a uniform share of the image's (scale) and its aspect ratio log-uniform
 * (ratio), its place uniform. */
static void test_erase_draws(void **state)
{
    (void)state;
    enum { N = 60000 };
    dpt_erase_options o = {.prob = 0.4, .scale = {0.02, 0.33}, .ratio = {0.3, 3.3}};
    int64_t h = 224, w = 224;
    double erased = 0, area = 0, area2 = 0, log_ratio = 0, place = 0;
    for (int64_t i = 0; i < N; i++) {
        int64_t box[4], again[4];
        uint64_t key = (uint64_t)(i / 64) * 0x9e3779b97f4a7c15ULL;
        bool on = dpt_erase_draw(&o, key, i % 64, h, w, box);
        assert_true(on == dpt_erase_draw(&o, key, i % 64, h, w, again));
        if (!on) continue;
        assert_memory_equal(box, again, sizeof box); /* a pure function of the key and the place */
        erased++;
        int64_t eh = box[1] - box[0], ew = box[3] - box[2];
        assert_true(box[0] >= 0 && eh > 0 && eh < h && box[1] <= h && box[2] >= 0 && ew > 0 && ew < w && box[3] <= w);
        double a = (double)(eh * ew) / (double)(h * w);
        area += a, area2 += a * a, log_ratio += log((double)eh / (double)ew);
        if (eh < h) place += (double)box[0] / (double)(h - eh);
    }
    within_se("share of samples erased", erased / N, 0.4, sqrt(0.4 * 0.6 / N));
    /* a box too tall or too wide is drawn again (10 tries), which takes a little of the large
     * areas away: the mean area within 1% of the image of the uniform's (0.175) */
    double mean = area / erased, sd = sqrt(area2 / erased - mean * mean);
    if (!(fabs(mean - 0.175) < 0.01 + 5 * sd / sqrt(erased))) fail_msg("mean erased area %.4f, expected about 0.175", mean);
    /* log(h/w) is symmetric about (log 0.3 + log 3.3) / 2 = -0.005, up to the sides' rounding */
    if (!(fabs(log_ratio / erased + 0.005) < 0.02)) fail_msg("mean log aspect ratio %.4f", log_ratio / erased);
    /* the top row uniform over the places that fit: mean 1/2 of the range */
    within_se("mean place", place / erased, 0.5, sqrt(1.0 / 12 / erased));
    /* boxes that always fit (no draw again): the area uniform in [0.02, 0.1], mean 0.06, and
     * log(h/w) uniform in [log 0.5, log 4], mean 0.3466 (the sides' rounding moves both a little) */
    dpt_erase_options tall = {.prob = 1, .scale = {0.02, 0.1}, .ratio = {0.5, 4}};
    double n2 = 0, a2 = 0, r2 = 0;
    for (int64_t i = 0; i < N; i++) {
        int64_t box[4];
        if (!dpt_erase_draw(&tall, (uint64_t)i * 7919, 0, h, w, box)) fail_msg("draw %lld: no box", (long long)i);
        n2++, a2 += (double)((box[1] - box[0]) * (box[3] - box[2])) / (double)(h * w);
        r2 += log((double)(box[1] - box[0]) / (double)(box[3] - box[2]));
    }
    if (!(fabs(a2 / n2 - 0.06) < 0.002)) fail_msg("mean erased area %.4f, expected 0.06", a2 / n2);
    if (!(fabs(r2 / n2 - 0.3466) < 0.01)) fail_msg("mean log(h/w) %.4f, expected 0.3466", r2 / n2);
    /* off, and a box that never fits (area > the image): no erasing */
    int64_t box[4];
    assert_false(dpt_erase_draw(&(dpt_erase_options){.prob = 0, .scale = {0.1, 0.2}, .ratio = {1, 1}}, 1, 0, h, w, box));
    for (int i = 0; i < 100; i++)
        assert_false(dpt_erase_draw(&(dpt_erase_options){.prob = 1, .scale = {1, 1}, .ratio = {1, 1}}, 1, i, h, w, box));
}

static void test_erase_apply(void **state)
{
    (void)state;
    dpt_ctx *ctx = test_ctx(1, 1);
    dpt_rng rng;
    dpt_rng_seed(&rng, 4);
    dpt_erase_options o = {.prob = 0.6, .scale = {0.05, 0.3}, .ratio = {0.5, 2}};
    for (int nhwc = 0; nhwc < 2; nhwc++) {
        int64_t n = 9, c = 3, h = 10, w = 13, per = c * h * w;
        dpt_tensor *x = test_input(ctx, &rng, 4, (int64_t[]){n, c, h, w}, 1, 2); /* never 0 */
        x->requires_grad = false;
        if (nhwc) x->layout = DPT_LAYOUT_NHWC;
        float *orig = malloc((size_t)(n * per) * sizeof *orig);
        memcpy(orig, x->data, (size_t)(n * per) * sizeof *orig);
        dpt_erase_apply(ctx, x, &o, 77);
        int any = 0;
        for (int64_t i = 0; i < n; i++) {
            int64_t box[4] = {0, 0, 0, 0};
            bool on = dpt_erase_draw(&o, 77, i, h, w, box);
            any += on;
            for (int64_t e = 0; e < per; e++) {
                int64_t y = nhwc ? e / (c * w) : e / w % h, xx = nhwc ? e / c % w : e % w;
                bool in = on && y >= box[0] && y < box[1] && xx >= box[2] && xx < box[3];
                float want = in ? 0.0f : orig[i * per + e];
                if (x->data[i * per + e] != want)
                    fail_msg("%s sample %lld value %lld: %g, expected %g", nhwc ? "nhwc" : "nchw", (long long)i,
                             (long long)e, x->data[i * per + e], want);
            }
        }
        assert_true(any > 0 && any < n); /* this seed erases some, not all */
        free(orig);
        dpt_tensor_free(x);
    }
    dpt_ctx_free(ctx);
}

/* ---------------------------------------------------------------- the mixed loss */

typedef struct mix_loss_case {
    int64_t rows, cols;
    int32_t labels[16];
    double lambda, smoothing;
    const dpt_loss_impl *impl;
    void *settings;
    dpt_tensor *target, *store;
} mix_loss_case;

static void mix_loss_setup(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    mix_loss_case *c = u;
    c->target = dpt_tensor_new_dtype(ctx, DPT_I32, 1, (int64_t[]){c->rows});
    c->store = dpt_tensor_new_dtype(ctx, DPT_I32, 1, (int64_t[]){16});
    dpt_tensor_copy_from_host_i32(c->target, c->labels);
}

static void mix_loss_teardown(void *u)
{
    mix_loss_case *c = u;
    dpt_tensor_free(c->target), dpt_tensor_free(c->store);
}

static dpt_tensor *mix_loss_build(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    mix_loss_case *c = u;
    dpt_tensor *partner = dpt_mix_partner_labels(ctx, c->target, c->store);
    return dpt_mix_loss(ctx, c->impl, c->settings, in[0], c->target, partner, c->lambda);
}

/* timm: SoftTargetCrossEntropy(x, mixup_target(y, C, lam, smoothing)): the targets
 * lam one_hot_smooth(y) + (1 - lam) one_hot_smooth(y.flip(0)), off = s / C, on = 1 - s + s / C */
static void mix_loss_ref(const double *const *in, double *out, void *u)
{
    const mix_loss_case *c = u;
    double total = 0, off = c->smoothing / (double)c->cols, on = 1.0 - c->smoothing + off;
    for (int64_t r = 0; r < c->rows; r++) {
        const double *x = in[0] + r * c->cols;
        double mx = x[0], z = 0;
        for (int64_t k = 1; k < c->cols; k++)
            mx = fmax(mx, x[k]);
        for (int64_t k = 0; k < c->cols; k++)
            z += exp(x[k] - mx);
        int32_t own = c->labels[r], other = c->labels[c->rows - 1 - r];
        for (int64_t k = 0; k < c->cols; k++) {
            double t = c->lambda * (k == own ? on : off) + (1.0 - c->lambda) * (k == other ? on : off);
            total -= t * (x[k] - mx - log(z));
        }
    }
    out[0] = total / (double)c->rows;
}

static void test_mix_loss(void **state)
{
    (void)state;
    const dpt_loss_impl *impl = dpt_registry_find(DPT_KIND_LOSS, "cross_entropy")->impl;
    const int64_t shapes[][2] = {{1, 3}, {4, 5}, {7, 10}};
    const double lambdas[] = {0.0, 0.37, 1.0};
    for (size_t s = 0; s < 3; s++)
        for (size_t l = 0; l < 3; l++)
            for (int sm = 0; sm < 2; sm++) {
                mix_loss_case c = {.rows = shapes[s][0],
                                   .cols = shapes[s][1],
                                   .lambda = lambdas[l],
                                   .impl = impl,
                                   .smoothing = sm ? 0.1 : 0.0};
                dpt_config *cfg =
                    test_config((const char *[]){sm ? "train.label_smoothing=0.1" : "train.seed=1"}, 1);
                c.settings = calloc(1, impl->settings_size + 1);
                dpt_error err;
                if (!impl->configure(c.settings, cfg, &err)) fail_msg("%s", err.msg);
                for (int64_t r = 0; r < c.rows; r++)
                    c.labels[r] = (int32_t)((r * 7 + 3) % c.cols);
                gradcheck gc = {
                    .n_in = 1,
                    .ndim = {2},
                    .shape = {{c.rows, c.cols}},
                    .lo = -5,
                    .hi = 5,
                    .setup = mix_loss_setup,
                    .teardown = mix_loss_teardown,
                    .build = mix_loss_build,
                    .reference = mix_loss_ref,
                    .user = &c,
                    .fwd_rtol = 1e-5,
                    .grad_rtol = 1e-4,
                    .grad_atol = 1e-6,
                };
                run_gradcheck("mixed cross-entropy", &gc, 900 + s * 6 + l * 2 + (uint64_t)sm);
                free(c.settings);
                dpt_config_free(cfg);
            }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gamma_and_beta),
        cmocka_unit_test(test_batch_draws),
        cmocka_unit_test(test_mix_apply),
        cmocka_unit_test(test_mix_loss),
        cmocka_unit_test(test_erase_draws),
        cmocka_unit_test(test_erase_apply),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
