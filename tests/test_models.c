/* test_models.c: model builders against published parameter counts (torchvision), forward
 * shapes, a small CNN and ResNet that overfit a batch, the model summary, build errors for
 * impossible shapes, the CIFAR reader on files written here, synthetic data, augmentation. */
#include <float.h>
#include <unistd.h>

#include "tests/testutil.h"
#include "runtime/trace.h"

static dpt_model *build(dpt_ctx *ctx, const char *const *sets, int n, int64_t c, int64_t h, int64_t w,
                        int classes, dpt_error *err)
{
    dpt_config *cfg = dpt_config_defaults();
    for (int i = 0; i < n; i++)
        if (!dpt_config_set(cfg, sets[i], err)) fail_msg("%s", err->msg);
    dpt_model *m = dpt_model_build(ctx, cfg, c, h, w, classes, err);
    dpt_config_free(cfg);
    return m;
}

static void test_param_counts(void **state)
{
    (void)state;
    dpt_ctx *ctx = test_ctx(1, 1);
    dpt_error err;
    /* torchvision.models.resnet18/34/50(num_classes=1000) */
    const struct {
        const char *depth;
        int64_t c, hw, classes, params;
    } cases[] = {{"model.depth=18", 3, 224, 1000, 11689512},
                 {"model.depth=34", 3, 224, 1000, 21797672},
                 {"model.depth=50", 3, 224, 1000, 25557032},
                 {"model.depth=20", 3, 32, 10, 272474},
                 {"model.depth=56", 3, 32, 10, 855770}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *sets[] = {"model.name=resnet", cases[i].depth};
        dpt_model *m = build(ctx, sets, 2, cases[i].c, cases[i].hw, cases[i].hw, (int)cases[i].classes, &err);
        if (!m) fail_msg("%s", err.msg);
        print_message("%s: %lld parameters, %.1f MFLOP/sample\n", dpt_model_summary(m),
                      (long long)dpt_model_param_count(m), dpt_model_flops(m) / 1e6);
        assert_int_equal(dpt_model_param_count(m), cases[i].params);
        dpt_model_free(m);
    }
    /* torchvision.models.vit_b_16(): 86,567,656 parameters, 17.56 GFLOPS (torchvision's
     * documented figure counts multiply-adds: 17.56 G of them a 224x224 image) */
    dpt_ctx_skip_init(ctx, true);
    const char *b16[] = {"model.name=vit", "model.patch_size=16", "model.hidden_dim=768", "model.num_layers=12",
                         "model.num_heads=12", "model.mlp_dim=3072"};
    dpt_model *vb = build(ctx, b16, 6, 3, 224, 224, 1000, &err);
    if (!vb) fail_msg("%s", err.msg);
    print_message("vit_b_16: %lld parameters\n", (long long)dpt_model_param_count(vb));
    assert_int_equal(dpt_model_param_count(vb), 86567656);
    dpt_model_free(vb);
    dpt_ctx_skip_init(ctx, false);
    /* ResNet-50 forward: 4.09 GMAC per 224x224 image (torchvision's figure) */
    const char *r50[] = {"model.name=resnet", "model.depth=50"};
    dpt_model *m = build(ctx, r50, 2, 3, 224, 224, 1000, &err);
    assert_true(fabs(dpt_model_flops(m) / 2e9 - 4.09) < 0.05);
    dpt_model_free(m);
    dpt_ctx_free(ctx);
}

/* A model must drive the loss of one fixed batch towards zero: every layer's gradient flows. */
static void overfit(const char *const *sets, int n, int64_t c, int64_t hw, int steps, double max_final)
{
    dpt_ctx *ctx = test_ctx(2, 3);
    dpt_error err;
    dpt_model *m = build(ctx, sets, n, c, hw, hw, 4, &err);
    if (!m) fail_msg("%s", err.msg);
    dpt_optim *opt = dpt_adamw_new(m, 3e-3f, 0.9f, 0.999f, 1e-8f, 0.0f);
    dpt_rng rng;
    dpt_rng_seed(&rng, 9);
    dpt_tensor *x = test_input(ctx, &rng, 4, (int64_t[]){8, c, hw, hw}, -1, 1);
    x->requires_grad = false;
    int32_t labels[8] = {0, 1, 2, 3, 3, 2, 1, 0};
    double first = 0, last = 0;
    for (int s = 0; s < steps; s++) {
        dpt_tensor *logits = dpt_model_forward(m, ctx, x);
        assert_int_equal(dpt_tensor_dim(logits, 0), 8);
        assert_int_equal(dpt_tensor_dim(logits, 1), 4);
        dpt_tensor *loss = dpt_cross_entropy(ctx, logits, labels, 0.0f);
        dpt_backward(ctx, loss);
        dpt_optim_step(ctx, opt);
        dpt_model_zero_grad(m);
        last = dpt_tensor_item(loss);
        if (s == 0) first = last;
        dpt_tape_clear(ctx);
    }
    print_message("%s: loss %.3f -> %.4f in %d steps\n", dpt_model_summary(m), first, last, steps);
    assert_true(last < max_final && last < first);
    /* eval mode gives finite logits from the running statistics */
    dpt_model_set_training(m, false);
    dpt_set_grad_enabled(ctx, false);
    assert_true(
        isfinite(dpt_tensor_item(dpt_cross_entropy(ctx, dpt_model_forward(m, ctx, x), labels, 0.0f))));
    dpt_tape_clear(ctx);
    dpt_tensor_free(x);
    dpt_optim_free(opt);
    dpt_model_free(m);
    dpt_ctx_free(ctx);
}

/* A model's destructor: called once, with its state, while its parameters still exist, and
 * what it frees leaves the context's allocator where it was before the model (a cached tensor
 * would otherwise be reported as never freed). */
typedef struct cached_state {
    dpt_tensor *cache, *weight;
    int calls;
    bool weight_alive;
} cached_state;

static cached_state destroyed;

static void destroy_cached(dpt_model *model, void *state)
{
    cached_state *c = state;
    c->calls++;
    c->weight_alive = dpt_tensor_data(c->weight) != NULL && dpt_model_num_params(model) == 1;
    dpt_tensor_free(c->cache);
    destroyed = *c;
}

static dpt_tensor *forward_cached(dpt_model *model, dpt_ctx *ctx, dpt_tensor *x)
{
    (void)model, (void)ctx;
    return x;
}

static void test_destructor(void **state)
{
    (void)state;
    dpt_ctx *ctx = test_ctx(1, 1);
    size_t before = dpt_ctx_mem_stats(ctx).allocated;
    dpt_model *m = dpt_model_new(ctx, "cached", forward_cached);
    cached_state *c = dpt_model_alloc(m, sizeof *c);
    dpt_model_set_state(m, c);
    c->weight = dpt_model_param(m, "w", 1, (int64_t[]){16});
    c->cache = dpt_tensor_new(ctx, 2, (int64_t[]){64, 64});
    dpt_model_set_destructor(m, destroy_cached);
    assert_true(dpt_ctx_mem_stats(ctx).allocated > before);
    dpt_model_free(m);
    assert_int_equal(destroyed.calls, 1);
    assert_true(destroyed.weight_alive);
    assert_int_equal(dpt_ctx_mem_stats(ctx).allocated, before);
    dpt_ctx_free(ctx);
}

static void test_overfit(void **state)
{
    (void)state;
    const char *cnn[] = {"model.name=cnn", "model.channels=8,16", "model.fc=32", "model.dropout=0"};
    overfit(cnn, 4, 1, 12, 60, 0.05);
    const char *r8[] = {"model.name=resnet", "model.depth=8", "model.width=8",
                        "model.zero_init_residual=true"};
    overfit(r8, 4, 1, 12, 60, 0.05);
    const char *r18[] = {"model.name=resnet", "model.depth=18", "model.width=4"};
    overfit(r18, 3, 3, 32, 40, 0.2);
    const char *r50[] = {"model.name=resnet", "model.depth=50", "model.width=2"};
    overfit(r50, 3, 3, 32, 60, 0.5);
    const char *vit[] = {"model.name=vit", "model.patch_size=4", "model.hidden_dim=32", "model.num_layers=2",
                         "model.num_heads=4", "model.mlp_dim=64"};
    overfit(vit, 6, 3, 12, 60, 0.05);
}

/* One ResNet-20 training step (batch norm, residuals, SGD with momentum) on oneDNN and on the
 * native kernels, from the same weights and batch: loss, every parameter gradient and the
 * updated parameters agree within float32 summation-order tolerance, on 1 and 2 threads. */
static void test_onednn_matches_native(void **state)
{
    (void)state;
    const char *sets[] = {"model.name=resnet", "model.depth=20"};
    for (int threads = 1; threads <= 2; threads++) {
        double loss[2];
        float *grads[2], *params[2];
        int64_t total = 0;
        for (int k = 0; k < 2; k++) {
            test_kernels = k == 0 ? DPT_CPU_KERNELS_ONEDNN : DPT_CPU_KERNELS_NATIVE;
            dpt_ctx *ctx = test_ctx(threads, 5);
            test_kernels = DPT_CPU_KERNELS_DEFAULT;
            assert_string_equal(dpt_ctx_backend_name(ctx), k == 0 ? "cpu-onednn" : "cpu");
            dpt_error err;
            dpt_model *m = build(ctx, sets, 2, 3, 32, 32, 10, &err);
            if (!m) fail_msg("%s", err.msg);
            dpt_optim *opt = dpt_sgd_new(m, 0.1f, 0.9f, 0.0f, 1e-4f, false);
            dpt_rng rng;
            dpt_rng_seed(&rng, 11);
            dpt_tensor *x = test_input(ctx, &rng, 4, (int64_t[]){16, 3, 32, 32}, -1, 1);
            x->requires_grad = false;
            int32_t labels[16];
            for (int i = 0; i < 16; i++)
                labels[i] = (i * 7) % 10;
            dpt_tensor *l = dpt_cross_entropy(ctx, dpt_model_forward(m, ctx, x), labels, 0.0f);
            dpt_backward(ctx, l);
            loss[k] = dpt_tensor_item(l);
            total = dpt_model_param_count(m);
            grads[k] = malloc((size_t)total * sizeof(float));
            params[k] = malloc((size_t)total * sizeof(float));
            int64_t off = 0;
            for (int i = 0; i < dpt_model_num_params(m); i++) {
                dpt_tensor *p = dpt_model_param_at(m, i);
                dpt_tensor_copy_to_host(p->grad, grads[k] + off);
                off += p->numel;
            }
            dpt_optim_step(ctx, opt);
            off = 0;
            for (int i = 0; i < dpt_model_num_params(m); i++) {
                dpt_tensor *p = dpt_model_param_at(m, i);
                dpt_tensor_copy_to_host(p, params[k] + off);
                off += p->numel;
            }
            dpt_tape_clear(ctx);
            dpt_tensor_free(x);
            dpt_optim_free(opt);
            dpt_model_free(m);
            dpt_ctx_free(ctx);
        }
        /* Gradients as a whole (relative L2): a ReLU whose input sits within rounding of zero
         * flips with the summation order, and batch norm over 16 samples amplifies it. Measured
         * on this step: the native kernels with the input perturbed by 1e-6 (relative) move the
         * gradients by 1.7e-3; oneDNN against native differ by 2.2e-3 to 3.6e-3 on the CPUs
         * tried (AVX2, AVX-512). A real kernel error (a padding, a missed term) is O(1).
         * The parameters after the step follow from the gradients, not from a bound of their
         * own: SGD's first step is p' = p - lr (g + wd p) (the momentum buffer starts as the
         * gradient), so p'_a - p'_b = -lr (g_a - g_b) up to rounding (on each side, of the update
         * lr (g + wd p) and of the subtraction: two ulps of each), and as a whole
         * |p'_a - p'_b|_2 <= lr |g_a - g_b|_2 < lr 1e-2 |g|_2. */
        const double lr = 0.1;
        double g2 = 0, gd2 = 0, pd2 = 0, pdiff = 0, worst_excess = 0;
        for (int64_t i = 0; i < total; i++) {
            double gd = (double)grads[0][i] - grads[1][i], pd = (double)params[0][i] - params[1][i];
            g2 += (double)grads[1][i] * grads[1][i];
            gd2 += gd * gd;
            pd2 += pd * pd;
            pdiff = fmax(pdiff, fabs(pd));
            double rounding = 2.0 * FLT_EPSILON * (fabs(params[0][i]) + fabs(params[1][i]) +
                                                   lr * (fabs(grads[0][i]) + fabs(grads[1][i])));
            worst_excess = fmax(worst_excess, fabs(pd + lr * gd) - rounding);
        }
        print_message("resnet20 step, %d thread(s): loss %.7f (oneDNN) vs %.7f (native); gradients differ by "
                      "%.2e (relative L2); parameters after the step by at most %.2e (bound from the "
                      "gradients: %.2e in L2)\n",
                      threads, loss[0], loss[1], sqrt(gd2 / g2), pdiff, lr * 1e-2 * sqrt(g2));
        assert_true(fabs(loss[0] - loss[1]) < 1e-5 * fabs(loss[1]));
        assert_true(sqrt(gd2 / g2) < 1e-2);
        assert_true(worst_excess <= 0.0);
        assert_true(sqrt(pd2) <= lr * 1e-2 * sqrt(g2));
        for (int k = 0; k < 2; k++)
            free(grads[k]), free(params[k]);
    }
}

static void test_build_errors(void **state)
{
    (void)state;
    dpt_ctx *ctx = test_ctx(1, 1);
    dpt_error err;
    const char *bad_depth[] = {"model.name=resnet", "model.depth=19"};
    assert_null(build(ctx, bad_depth, 2, 1, 28, 28, 10, &err));
    assert_contains(err.msg, "[model] depth = 19: not a ResNet depth");
    /* five 2x2 pools do not fit 28x28 -> 14 -> 7 -> 3 -> 1 -> (none) */
    const char *deep_cnn[] = {"model.name=cnn", "model.channels=8,8,8,8,8"};
    assert_null(build(ctx, deep_cnn, 2, 1, 28, 28, 10, &err));
    assert_contains(err.msg, "pool pool5: kernel 2, stride 2, padding 0 does not fit the input (8, 1, 1)");
    /* a grouped convolution whose channels do not divide */
    const char *odd[] = {"model.name=resnet", "model.depth=20", "model.width=0"};
    dpt_model *ok = build(ctx, odd, 3, 3, 32, 32, 10, &err);
    assert_non_null(ok);
    dpt_model_free(ok);
    dpt_ctx_free(ctx);
}

static void test_summary(void **state)
{
    (void)state;
    dpt_ctx *ctx = test_ctx(1, 1);
    dpt_error err;
    const char *cnn[] = {"model.name=cnn"};
    dpt_model *m = build(ctx, cnn, 1, 1, 28, 28, 10, &err);
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    dpt_model_print_summary(m, mem);
    fclose(mem);
    assert_contains(text, "conv2d     conv1                    (32, 28, 28)                288");
    assert_contains(text, "pool       pool2                    (64, 7, 7)                    0");
    assert_contains(text, "linear     fc1                      (128, 1, 1)              401536");
    assert_contains(text, "total: 421738 parameters");
    /* conv1 2*32*9*784 + conv2 2*64*32*9*196 + fc 2*(3136*128 + 128*10) + BN + pools */
    double expect = 2.0 * 32 * 9 * 784 + 2.0 * 64 * 32 * 9 * 196 + 2.0 * (3136 * 128 + 128 * 10);
    assert_true(dpt_model_flops(m) > expect && dpt_model_flops(m) < expect * 1.02);
    /* the traced forward: the convolutions and linear layers exactly (elementwise ops not counted) */
    dpt_dataset ds = {.n = 1, .c = 1, .h = 28, .w = 28, .num_classes = 10, .name = "shape"};
    dpt_task task;
    assert_true(dpt_task_resolve(m, &ds, &task, &err));
    dpt_trace tr;
    dpt_model_trace(ctx, m, &ds, &task, true, &tr);
    assert_float_equal(tr.flops, expect, 0.0);
    assert_true(tr.output_floats >= 32 * 784 + 64 * 196 + 128 + 10);
    free(text);
    /* --summary's table, from that forward: what ran, at batch 1 */
    text = tr.table;
    assert_contains(text, "conv2d           conv1                        (1, 32, 28, 28)               288         0.45\n");
    assert_contains(text, "linear           fc1                          (1, 128)                   401536         0.80\n");
    assert_contains(text, " maxpool2d 2");
    assert_contains(text, "total: 421738 parameters, 8.48 MFLOP forward per sample");
    free(tr.table);
    dpt_model_free(m);
    dpt_ctx_free(ctx);
}

static void test_cifar_and_synthetic(void **state)
{
    (void)state;
    char path[2][64];
    const char *paths[2];
    for (int f = 0; f < 2; f++) {
        snprintf(path[f], sizeof path[f], "/tmp/dpt_cifar_%d_%d.bin", (int)getpid(), f);
        paths[f] = path[f];
        FILE *fp = fopen(path[f], "wb");
        for (int r = 0; r < 3; r++) {
            uint8_t rec[3073];
            rec[0] = (uint8_t)(f * 3 + r);
            for (int j = 1; j < 3073; j++)
                rec[j] = (uint8_t)(j * 7 + r + f);
            fwrite(rec, 1, sizeof rec, fp);
        }
        fclose(fp);
    }
    dpt_error err;
    dpt_dataset *ds = dpt_cifar_load(paths, 2, &err);
    if (!ds) fail_msg("%s", err.msg);
    assert_int_equal(ds->n, 6);
    assert_int_equal(ds->c, 3);
    assert_int_equal(ds->labels[4], 4);
    assert_int_equal(ds->images[4 * 3072 + 1024], (uint8_t)(1025 * 7 + 1 + 1)); /* green plane of record 4 */
    dpt_dataset_free(ds);
    FILE *fp = fopen(path[1], "ab"); /* a partial record */
    fputc(1, fp);
    fclose(fp);
    assert_null(dpt_cifar_load(paths, 2, &err));
    assert_contains(err.msg, "not a whole number of 3073-byte CIFAR records");
    fp = fopen(path[0], "r+b"); /* a label out of range */
    fputc(12, fp);
    fclose(fp);
    assert_null(dpt_cifar_load(paths, 1, &err));
    assert_contains(err.msg, "has label 12");
    unlink(path[0]), unlink(path[1]);
    dpt_dataset *syn = dpt_synthetic_new(10, 3, 8, 8, 5, 1), *again = dpt_synthetic_new(10, 3, 8, 8, 5, 1);
    assert_memory_equal(syn->images, again->images, 10 * 3 * 64);
    for (int i = 0; i < 10; i++)
        assert_true(syn->labels[i] >= 0 && syn->labels[i] < 5);
    dpt_dataset_free(syn), dpt_dataset_free(again);
}

static void test_augmentation(void **state)
{
    (void)state;
    dpt_ctx *ctx = test_ctx(1, 1);
    dpt_dataset *ds = dpt_synthetic_new(16, 1, 6, 6, 3, 4);
    dpt_loader_options lo = {.batch = 16,
                             .seed = 2,
                             .world_size = 1,
                             .mean = 0,
                             .std = 1.0f / 255.0f,
                             .crop_pad = 2,
                             .hflip = true};
    dpt_loader *a = dpt_loader_new(ctx, ds, &lo), *b = dpt_loader_new(ctx, ds, &lo);
    dpt_batch ba, bb;
    dpt_loader_start_epoch(a, 1), dpt_loader_start_epoch(b, 1);
    dpt_loader_next(a, &ba), dpt_loader_next(b, &bb);
    assert_memory_equal(dpt_tensor_data(ba.x), dpt_tensor_data(bb.x),
                        16 * 36 * sizeof(float)); /* deterministic */
    /* every output pixel is an input pixel of the same image (shifted, maybe mirrored) or padding */
    int changed = 0;
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 36; j++) {
            float v = dpt_tensor_data(ba.x)[i * 36 + j];
            bool found = v == 0.0f;
            for (int k = 0; k < 36 && !found; k++)
                found = fabsf(v - ds->images[i * 36 + k]) < 1e-3f;
            assert_true(found);
            changed += fabsf(v - ds->images[i * 36 + j]) > 1e-3f;
        }
    assert_true(changed > 100);
    dpt_loader_start_epoch(a, 2);
    dpt_loader_next(a, &ba);
    assert_true(memcmp(dpt_tensor_data(ba.x), dpt_tensor_data(bb.x), 16 * 36 * sizeof(float)) != 0);
    dpt_loader_free(a), dpt_loader_free(b);
    dpt_dataset_free(ds);
    dpt_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_param_counts),
        cmocka_unit_test(test_overfit),
        cmocka_unit_test(test_destructor),
        cmocka_unit_test(test_onednn_matches_native),
        cmocka_unit_test(test_build_errors),
        cmocka_unit_test(test_summary),
        cmocka_unit_test(test_cifar_and_synthetic),
        cmocka_unit_test(test_augmentation),
    };
    return cmocka_run_group_tests_name("models", tests, NULL, NULL);
}
