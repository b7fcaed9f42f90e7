/* test_autograd.c: the tape's bookkeeping: gradient-ready hooks fire exactly once per
 * parameter in reverse order of use, gradients accumulate (+=), no_grad records nothing,
 * and a fixed-shape step stops calling the system allocator after the first step. */
#include "tests/testutil.h"
#include "runtime/ctx.h"

typedef struct hook_log {
    int order[64];
    int count;
    int fired[64];
} hook_log;

static void record_hook(dpt_tensor *param, int index, void *user)
{
    hook_log *log = user;
    (void)param;
    log->order[log->count++] = index;
    log->fired[index]++;
}

static dpt_model *three_layer(dpt_ctx *ctx, dpt_linear **layers)
{
    dpt_model *m = dpt_model_new(ctx, "mlp3", NULL);
    layers[0] = dpt_linear_new(m, "fc1", 6, 5, true);
    layers[1] = dpt_linear_new(m, "fc2", 5, 4, true);
    layers[2] = dpt_linear_new(m, "fc3", 4, 3, true);
    return m;
}

static dpt_tensor *forward3(dpt_ctx *ctx, dpt_linear **l, dpt_tensor *x, const int32_t *labels)
{
    dpt_tensor *h = dpt_relu(ctx, dpt_linear_forward(ctx, l[0], x));
    h = dpt_relu(ctx, dpt_linear_forward(ctx, l[1], h));
    return dpt_cross_entropy(ctx, dpt_linear_forward(ctx, l[2], h), labels, 0.0f);
}

static void test_hook_order(void **state)
{
    (void)state;
    dpt_ctx *ctx = test_ctx(1, 7);
    dpt_linear *l[3];
    dpt_model *m = three_layer(ctx, l);
    dpt_rng rng;
    dpt_rng_seed(&rng, 3);
    dpt_tensor *x = test_input(ctx, &rng, 2, (int64_t[]){4, 6}, -1, 1);
    x->requires_grad = false;
    int32_t labels[4] = {0, 1, 2, 1};
    hook_log log = {0};
    dpt_set_grad_ready_hook(ctx, record_hook, &log);
    for (int step = 0; step < 2; step++) {
        memset(&log, 0, sizeof log);
        dpt_backward(ctx, forward3(ctx, l, x, labels));
        assert_int_equal(log.count, 6);
        /* creation order fc1.w fc1.b fc2.w fc2.b fc3.w fc3.b; reverse of use = 5 4 3 2 1 0 */
        for (int i = 0; i < 6; i++) {
            assert_int_equal(log.order[i], 5 - i);
            assert_int_equal(log.fired[i], 1);
        }
        dpt_tape_clear(ctx);
    }
    dpt_tensor_free(x);
    dpt_model_free(m);
    dpt_ctx_free(ctx);
}

/* A layer used twice (weight sharing) is final only after its first use's backward; a layer
 * never used does not fire at all (DDP reports it as unused). */
static void test_hook_shared_and_unused(void **state)
{
    (void)state;
    dpt_ctx *ctx = test_ctx(1, 7);
    dpt_model *m = dpt_model_new(ctx, "shared", NULL);
    dpt_linear *square = dpt_linear_new(m, "sq", 4, 4, true);      /* params 0, 1 */
    dpt_linear *unused = dpt_linear_new(m, "unused", 4, 4, false); /* param 2 */
    dpt_linear *head = dpt_linear_new(m, "head", 4, 2, true);      /* params 3, 4 */
    (void)unused;
    dpt_rng rng;
    dpt_rng_seed(&rng, 5);
    dpt_tensor *x = test_input(ctx, &rng, 2, (int64_t[]){3, 4}, -1, 1);
    int32_t labels[3] = {0, 1, 1};
    hook_log log = {0};
    dpt_set_grad_ready_hook(ctx, record_hook, &log);
    dpt_tensor *h = dpt_gelu(ctx, dpt_linear_forward(ctx, square, x));
    h = dpt_linear_forward(ctx, square, h);
    dpt_backward(ctx, dpt_cross_entropy(ctx, dpt_linear_forward(ctx, head, h), labels, 0.0f));
    assert_int_equal(log.count, 4);
    assert_int_equal(log.order[0], 4);
    assert_int_equal(log.order[1], 3);
    assert_int_equal(log.order[2], 1);
    assert_int_equal(log.order[3], 0);
    assert_int_equal(log.fired[2], 0);
    dpt_tape_clear(ctx);
    dpt_tensor_free(x);
    dpt_model_free(m);
    dpt_ctx_free(ctx);
}

static void test_accumulate_and_zero(void **state)
{
    (void)state;
    dpt_ctx *ctx = test_ctx(1, 9);
    dpt_linear *l[3];
    dpt_model *m = three_layer(ctx, l);
    dpt_rng rng;
    dpt_rng_seed(&rng, 4);
    dpt_tensor *x = test_input(ctx, &rng, 2, (int64_t[]){4, 6}, -1, 1);
    int32_t labels[4] = {2, 1, 0, 1};
    dpt_backward(ctx, forward3(ctx, l, x, labels));
    dpt_tape_clear(ctx);
    dpt_tensor *w = dpt_model_param_at(m, 0);
    int64_t n = dpt_tensor_numel(w);
    float *once = malloc((size_t)n * sizeof *once);
    memcpy(once, dpt_tensor_grad(w)->data, (size_t)n * sizeof *once);
    dpt_backward(ctx, forward3(ctx, l, x, labels));
    dpt_tape_clear(ctx);
    for (int64_t i = 0; i < n; i++)
        assert_float_equal(dpt_tensor_grad(w)->data[i], 2.0f * once[i], 1e-6);
    dpt_model_zero_grad(m);
    for (int64_t i = 0; i < n; i++)
        assert_float_equal(dpt_tensor_grad(w)->data[i], 0.0f, 0.0);
    free(once);
    dpt_tensor_free(x);
    dpt_model_free(m);
    dpt_ctx_free(ctx);
}

static void test_no_grad(void **state)
{
    (void)state;
    dpt_ctx *ctx = test_ctx(1, 9);
    dpt_linear *l[3];
    dpt_model *m = three_layer(ctx, l);
    dpt_rng rng;
    dpt_rng_seed(&rng, 4);
    dpt_tensor *x = test_input(ctx, &rng, 2, (int64_t[]){4, 6}, -1, 1);
    int32_t labels[4] = {2, 1, 0, 1};
    bool was = dpt_set_grad_enabled(ctx, false);
    assert_true(was);
    dpt_tensor *loss = forward3(ctx, l, x, labels);
    assert_int_equal(ctx->tape.nnodes, 0);
    dpt_backward(ctx, loss); /* nothing recorded: a no-op, gradients stay zero */
    for (int64_t i = 0; i < dpt_tensor_numel(dpt_model_param_at(m, 0)); i++)
        assert_float_equal(dpt_tensor_grad(dpt_model_param_at(m, 0))->data[i], 0.0f, 0.0);
    dpt_tape_clear(ctx);
    dpt_set_grad_enabled(ctx, true);
    forward3(ctx, l, x, labels);
    assert_true(ctx->tape.nnodes > 0);
    dpt_tape_clear(ctx);
    dpt_tensor_free(x);
    dpt_model_free(m);
    dpt_ctx_free(ctx);
}

static void test_allocator_steady_state(void **state)
{
    (void)state;
    dpt_ctx *ctx = test_ctx(1, 11);
    dpt_linear *l[3];
    dpt_model *m = three_layer(ctx, l);
    dpt_optim *opt = dpt_adamw_new(m, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f);
    dpt_rng rng;
    dpt_rng_seed(&rng, 4);
    dpt_tensor *x = test_input(ctx, &rng, 2, (int64_t[]){4, 6}, -1, 1);
    int32_t labels[4] = {2, 1, 0, 1};
    uint64_t after_first = 0;
    for (int step = 0; step < 5; step++) {
        dpt_backward(ctx, forward3(ctx, l, x, labels));
        dpt_optim_step(ctx, opt);
        dpt_model_zero_grad(m);
        dpt_tape_clear(ctx);
        /* after two steps: the first creates AdamW's state, which takes blocks that backward
         * handed back early (gradients are freed as soon as they are used), so the second
         * step's tape may need one more block; from then on every block is reused */
        if (step == 1) after_first = dpt_ctx_mem_stats(ctx).system_allocs;
    }
    dpt_mem_stats st = dpt_ctx_mem_stats(ctx);
    assert_int_equal(st.system_allocs, after_first);
    assert_true(st.peak_allocated >= st.allocated);
    assert_true(st.reserved >= st.allocated);
    dpt_optim_free(opt);
    dpt_tensor_free(x);
    dpt_model_free(m);
    dpt_ctx_free(ctx);
}

/* dpt_relu_ overwrites its input only where no backward can read it, and gives the same
 * gradients as dpt_relu either way (bit for bit): after a linear layer it runs in place; on a
 * tensor another op has already read (here a mul, whose backward reads it), after a relu (whose backward
 * reads its output) and on a caller's own tensor it copies. */
static void relu_grads(bool in_place, float *grads, bool *shared)
{
    dpt_ctx *ctx = test_ctx(1, 5);
    dpt_linear *l[3];
    dpt_model *m = three_layer(ctx, l);
    dpt_rng rng;
    dpt_rng_seed(&rng, 9);
    dpt_tensor *x = test_input(ctx, &rng, 2, (int64_t[]){4, 6}, -1, 1);
    int32_t labels[4] = {0, 2, 1, 1};
    dpt_tensor *(*act)(dpt_ctx *, dpt_tensor *) = in_place ? dpt_relu_ : dpt_relu;
    dpt_tensor *a = dpt_linear_forward(ctx, l[0], x);
    dpt_tensor *h = act(ctx, a);
    shared[0] = h->data == a->data; /* in place */
    dpt_tensor *b = dpt_linear_forward(ctx, l[1], h);
    dpt_tensor *skip = dpt_mul(ctx, b, b); /* b read by the mul (its backward reads b): relu_ must copy */
    dpt_tensor *r = act(ctx, b);
    shared[1] = r->data == b->data;
    dpt_tensor *rr = act(ctx, r); /* r made by a relu, which reads its output */
    shared[2] = rr->data == r->data;
    dpt_tensor *own = act(ctx, x); /* the caller's tensor */
    shared[3] = own->data == x->data;
    /* a temporary that wants no gradient, read by a recorded mul (its backward reads it for
     * the other operand's gradient): relu_ must copy */
    bool was = dpt_set_grad_enabled(ctx, false);
    dpt_tensor *frozen = dpt_scale(ctx, dpt_linear_forward(ctx, l[1], h), 0.5f);
    dpt_set_grad_enabled(ctx, was);
    dpt_tensor *gated = dpt_mul(ctx, frozen, b);
    dpt_tensor *fr = act(ctx, frozen);
    shared[4] = fr->data == frozen->data;
    skip = dpt_add(ctx, skip, gated);
    dpt_backward(ctx, dpt_cross_entropy(ctx, dpt_linear_forward(ctx, l[2], dpt_add(ctx, rr, skip)), labels, 0.0f));
    int k = 0;
    for (int i = 0; i < dpt_model_num_params(m); i++) {
        dpt_tensor *g = dpt_tensor_grad(dpt_model_param_at(m, i));
        dpt_tensor_copy_to_host(g, grads + k);
        k += (int)dpt_tensor_numel(g);
    }
    dpt_tensor_copy_to_host(dpt_tensor_grad(x), grads + k);
    dpt_tape_clear(ctx);
    dpt_tensor_free(x);
    dpt_model_free(m);
    dpt_ctx_free(ctx);
}

static void test_relu_in_place(void **state)
{
    (void)state;
    float ref[200] = {0}, got[200] = {0};
    bool ref_shared[5], shared[5];
    relu_grads(false, ref, ref_shared);
    relu_grads(true, got, shared);
    for (int i = 0; i < 5; i++)
        assert_false(ref_shared[i]);
    assert_true(shared[0]);  /* after a linear layer: in place */
    assert_false(shared[1]); /* already read by the mul */
    assert_false(shared[2]); /* after a relu */
    assert_false(shared[3]); /* the caller's tensor */
    assert_false(shared[4]); /* wants no gradient, but a recorded op read it */
    assert_memory_equal(ref, got, sizeof ref);
}

/* dpt_tape_release: with nothing recorded since the mark (grad off), the temporaries made since
 * go back to the allocator at once except the one kept, which keeps its values; while
 * recording it frees nothing (backward needs them) and the gradients are unchanged. */
static void test_tape_release(void **state)
{
    (void)state;
    dpt_ctx *ctx = test_ctx(1, 5);
    dpt_linear *l[3];
    dpt_model *m = three_layer(ctx, l);
    dpt_rng rng;
    dpt_rng_seed(&rng, 2);
    dpt_tensor *x = test_input(ctx, &rng, 2, (int64_t[]){64, 6}, -1, 1);
    float want[64 * 4], got[64 * 4];
    for (int recording = 0; recording < 2; recording++) {
        bool was = dpt_set_grad_enabled(ctx, recording);
        size_t before = dpt_ctx_mem_stats(ctx).allocated;
        dpt_tape_mark mark = dpt_tape_mark_here(ctx);
        dpt_tensor *h = dpt_relu_(ctx, dpt_linear_forward(ctx, l[0], x));
        h = dpt_relu_(ctx, dpt_linear_forward(ctx, l[1], h));
        size_t during = dpt_ctx_mem_stats(ctx).allocated;
        dpt_tensor_copy_to_host(h, want);
        dpt_tensor *kept = dpt_tape_release(ctx, mark, h);
        assert_ptr_equal(kept, h);
        size_t after = dpt_ctx_mem_stats(ctx).allocated;
        dpt_tensor_copy_to_host(kept, got);
        assert_memory_equal(want, got, sizeof want);
        if (recording)
            assert_int_equal(after, during); /* nothing freed */
        else
            assert_true(after < during && after > before); /* the first layer's output went, h stayed */
        dpt_tape_clear(ctx);
        dpt_set_grad_enabled(ctx, was);
    }
    dpt_tensor_free(x);
    dpt_model_free(m);
    dpt_ctx_free(ctx);
}

static void test_alloc_bins(void **state)
{
    (void)state;
    assert_int_equal(dpt_alloc_round(1), 256);
    assert_int_equal(dpt_alloc_round(256), 256);
    assert_int_equal(dpt_alloc_round(257), 512);
    assert_int_equal(dpt_alloc_round(1 << 20), 1 << 20);
    /* Sizes that came from a hostile file: refused, not rounded into an endless loop. */
    assert_int_equal(dpt_alloc_round(DPT_ALLOC_MAX_BYTES + 1), 0);
    assert_int_equal(dpt_alloc_round(SIZE_MAX), 0);
    assert_int_equal(dpt_alloc_round(((size_t)1 << 63) + 1), 0);
    assert_int_equal(dpt_alloc_round(DPT_ALLOC_MAX_BYTES), DPT_ALLOC_MAX_BYTES);
    size_t big = dpt_alloc_round((1 << 20) + 1);
    assert_true(big >= (1 << 20) + 1 && big <= (1 << 20) + (1 << 17));
    for (size_t b = 1; b < (64u << 20); b = b * 3 + 1) {
        size_t r = dpt_alloc_round(b);
        assert_true(r >= b && r <= b + b / 8 + 256);
    }
}

static int raw_calls;
static void *counting_malloc(size_t bytes, void *user)
{
    (void)user;
    raw_calls++;
    return malloc(bytes);
}
static void plain_free(void *p, void *user)
{
    (void)user;
    free(p);
}

/* A cap on reserved bytes: a request past it first gives the cache back, then fails; the
 * failure leaves the allocator usable. */
static void test_alloc_limit(void **state)
{
    (void)state;
    dpt_alloc *a = dpt_alloc_new((dpt_raw_allocator){counting_malloc, plain_free, NULL});
    dpt_alloc_set_limit(a, 4096);
    size_t g1, g2, g3;
    void *p1 = dpt_alloc_get(a, 2048, &g1), *p2 = dpt_alloc_get(a, 1024, &g2);
    assert_non_null(p1);
    assert_non_null(p2);
    assert_null(dpt_alloc_get(a, 2048, &g3)); /* 3072 reserved + 2048 > 4096 */
    dpt_alloc_put(a, p2, g2);                 /* cached: still reserved */
    assert_int_equal(dpt_alloc_stats(a).reserved, 3072);
    void *p3 = dpt_alloc_get(a, 2048, &g3); /* fits only once the cached 1 KiB is released */
    assert_non_null(p3);
    dpt_mem_stats st = dpt_alloc_stats(a);
    assert_int_equal(st.reserved, 4096);
    assert_int_equal(st.allocated, 4096);
    assert_int_equal(st.limit, 4096);
    assert_int_equal(raw_calls, 3);
    dpt_alloc_put(a, p1, g1);
    dpt_alloc_put(a, p3, g3);
    assert_int_equal(dpt_alloc_free(a), 0);
}

/* dpt_checkpoint (activation checkpointing): for a checkpointed middle layer (with dropout,
 * whose masks must be drawn again alike), the same function nested in a checkpoint, and a
 * checkpoint whose input wants no gradient (only parameters inside), every parameter's
 * gradient equals the plain forward's bit for bit, each hook fires once, in reverse order of
 * use (a checkpoint's parameters when its recomputation has run), and the tape and the
 * temporaries are back to their size after backward's recomputations. */
static dpt_linear **ck_layers;

static dpt_tensor *ck_first(dpt_ctx *ctx, dpt_tensor *x, void *user)
{
    (void)user;
    return dpt_relu(ctx, dpt_linear_forward(ctx, ck_layers[0], x));
}

static dpt_tensor *ck_mid(dpt_ctx *ctx, dpt_tensor *h, void *user)
{
    (void)user;
    return dpt_dropout(ctx, dpt_relu(ctx, dpt_linear_forward(ctx, ck_layers[1], h)), 0.3f, true);
}

static dpt_tensor *ck_nested(dpt_ctx *ctx, dpt_tensor *h, void *user)
{
    return dpt_scale(ctx, dpt_checkpoint(ctx, ck_mid, h, user), 1.0f);
}

static void test_checkpoint_fn(void **state)
{
    (void)state;
    float want[6][30];
    for (int mode = 0; mode < 4; mode++) { /* plain, checkpointed, nested, input without gradient */
        dpt_ctx *ctx = test_ctx(1, 7);
        dpt_linear *l[3];
        dpt_model *m = three_layer(ctx, l);
        ck_layers = l;
        dpt_rng rng;
        dpt_rng_seed(&rng, 3);
        dpt_tensor *x = test_input(ctx, &rng, 2, (int64_t[]){4, 6}, -1, 1);
        x->requires_grad = false;
        int32_t labels[4] = {0, 1, 2, 1};
        hook_log log = {0};
        dpt_set_grad_ready_hook(ctx, record_hook, &log);
        dpt_tensor *h = mode == 3 ? dpt_checkpoint(ctx, ck_first, x, NULL) : ck_first(ctx, x, NULL);
        h = mode == 1 ? dpt_checkpoint(ctx, ck_mid, h, NULL)
          : mode == 2 ? dpt_checkpoint(ctx, ck_nested, h, NULL)
                      : ck_mid(ctx, h, NULL);
        dpt_tensor *loss = dpt_cross_entropy(ctx, dpt_linear_forward(ctx, l[2], h), labels, 0.0f);
        int nodes = dpt_tape_mark_here(ctx).nodes, temps = dpt_tape_mark_here(ctx).temps;
        dpt_backward(ctx, loss);
        assert_int_equal(dpt_tape_mark_here(ctx).nodes, nodes);
        assert_true(dpt_tape_mark_here(ctx).temps <= temps + 8); /* the gradients of what stays */
        assert_int_equal(log.count, 6);
        for (int i = 0; i < 6; i++) {
            assert_int_equal(log.order[i], 5 - i);
            assert_int_equal(log.fired[i], 1);
            const dpt_tensor *g = dpt_tensor_grad(dpt_model_param_at(m, i));
            float got[30];
            dpt_tensor_copy_to_host(g, got);
            if (mode == 0)
                memcpy(want[i], got, (size_t)dpt_tensor_numel(g) * sizeof(float));
            else if (memcmp(want[i], got, (size_t)dpt_tensor_numel(g) * sizeof(float)) != 0)
                fail_msg("mode %d: the gradient of %s differs from the plain forward's", mode,
                         dpt_tensor_name(dpt_model_param_at(m, i)));
        }
        dpt_tape_clear(ctx);
        dpt_tensor_free(x);
        dpt_model_free(m);
        dpt_ctx_free(ctx);
    }
}

/* A batch norm inside a checkpointed function runs twice a step (forward, then backward's
 * recomputation): its running statistics move once, in the first run (PyTorch's checkpoint
 * moves them twice), and a statistics hook (the deterministic mode's ghost batch norm) hears
 * the batch once. Against the plain forward: every gradient and both running statistics bit
 * for bit; against float64: running mean = momentum * batch mean, running variance =
 * (1 - momentum) + momentum * the batch's unbiased variance. For the oneDNN kernels (batch
 * norm + ReLU fused, statistics in the backend) and the native ones (statistics on the host),
 * with and without a hook, checkpointed alone and nested. */
typedef struct ck_bn {
    dpt_batchnorm *bn;
    dpt_linear *fc;
} ck_bn;

static int ck_bn_heard;

static void ck_bn_hook(dpt_batchnorm *layer, const double *mean, const double *var, int64_t c, void *user)
{
    (void)mean, (void)var, (void)c, (void)user;
    ck_bn_heard++;
    dpt_batchnorm_apply_stats(layer, (float[]){0, 0, 0}, (float[]){0, 0, 0}); /* moves: visible if twice */
}

static dpt_tensor *ck_bn_fn(dpt_ctx *ctx, dpt_tensor *x, void *user)
{
    return dpt_batchnorm_relu_forward(ctx, ((ck_bn *)user)->bn, x, true);
}

static dpt_tensor *ck_bn_nested(dpt_ctx *ctx, dpt_tensor *x, void *user)
{
    return dpt_scale(ctx, dpt_checkpoint(ctx, ck_bn_fn, x, user), 1.0f);
}

static void test_checkpoint_batchnorm(void **state)
{
    (void)state;
    enum { N = 4, C = 3, HW = 16 };
    const float momentum = 0.25f;
    for (int kernels = 0; kernels < 2; kernels++) {
        test_variant(kernels ? 2 : 0); /* oneDNN, native */
        for (int hooked = 0; hooked < 2; hooked++) {
            float want[6][10 * C * HW], want_stats[2 * C]; /* the largest gradient: fc's weight */
            for (int mode = 0; mode < 3; mode++) { /* plain, checkpointed, nested */
                dpt_ctx *ctx = test_ctx(1, 11);
                dpt_model *m = dpt_model_new(ctx, "bnnet", NULL);
                ck_bn net = {dpt_batchnorm_new(m, "bn", &(dpt_shape3){C, 4, 4}, momentum, 1e-5f, true, false),
                             dpt_linear_new(m, "fc", C * HW, 10, true)};
                ck_bn_heard = 0;
                if (hooked) dpt_set_bn_stats_hook(ctx, ck_bn_hook, NULL);
                dpt_rng rng;
                dpt_rng_seed(&rng, 5);
                dpt_tensor *x = test_input(ctx, &rng, 4, (int64_t[]){N, C, 4, 4}, -1, 2);
                int32_t labels[N] = {0, 3, 7, 9};
                dpt_tensor *h = mode == 0 ? ck_bn_fn(ctx, x, &net)
                              : dpt_checkpoint(ctx, mode == 1 ? ck_bn_fn : ck_bn_nested, x, &net);
                dpt_tensor *loss = dpt_cross_entropy(ctx, dpt_linear_forward(ctx, net.fc, dpt_flatten(ctx, h)),
                                                     labels, 0.0f);
                dpt_backward(ctx, loss);
                assert_int_equal(ck_bn_heard, hooked);
                float got[sizeof want[0] / sizeof(float)], stats[2 * C];
                const dpt_tensor *g[6] = {dpt_tensor_grad(x)};
                for (int i = 0; i < dpt_model_num_params(m); i++)
                    g[1 + i] = dpt_tensor_grad(dpt_model_param_at(m, i));
                for (int i = 0; i < 1 + dpt_model_num_params(m); i++) {
                    assert_non_null(g[i]);
                    size_t bytes = (size_t)dpt_tensor_numel(g[i]) * sizeof(float);
                    dpt_tensor_copy_to_host(g[i], got);
                    if (mode == 0)
                        memcpy(want[i], got, bytes);
                    else if (memcmp(want[i], got, bytes) != 0)
                        fail_msg("%s, hook %d, mode %d: gradient %d differs from the plain forward's",
                                 test_kernels_name(), hooked, mode, i);
                }
                dpt_tensor_copy_to_host(dpt_model_buffer_at(m, 0), stats);
                dpt_tensor_copy_to_host(dpt_model_buffer_at(m, 1), stats + C);
                if (mode == 0) {
                    memcpy(want_stats, stats, sizeof stats);
                    for (int ch = 0; ch < C; ch++) { /* float64 reference of one move */
                        double s = 0, ss = 0, cnt = N * HW;
                        for (int n = 0; n < N; n++)
                            for (int i = 0; i < HW; i++) {
                                double v = x->data[(n * C + ch) * HW + i];
                                s += v, ss += v * v;
                            }
                        double mean = s / cnt, var = (ss - s * mean) / (cnt - 1);
                        double rm = hooked ? 0 : momentum * mean;
                        double rv = hooked ? (1 - momentum) : (1 - momentum) + momentum * var;
                        assert_float_equal(stats[ch], rm, 1e-6 + 1e-5 * fabs(rm));
                        assert_float_equal(stats[C + ch], rv, 1e-5 * rv);
                    }
                } else if (memcmp(want_stats, stats, sizeof stats) != 0) {
                    fail_msg("%s, hook %d, mode %d: running statistics %g %g, the plain forward's %g %g",
                             test_kernels_name(), hooked, mode, stats[0], stats[C], want_stats[0], want_stats[C]);
                }
                dpt_tape_clear(ctx);
                dpt_tensor_free(x);
                dpt_model_free(m);
                dpt_ctx_free(ctx);
            }
        }
    }
    test_variant(-1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hook_order),
        cmocka_unit_test(test_hook_shared_and_unused),
        cmocka_unit_test(test_accumulate_and_zero),
        cmocka_unit_test(test_no_grad),
        cmocka_unit_test(test_allocator_steady_state),
        cmocka_unit_test(test_relu_in_place),
        cmocka_unit_test(test_tape_release),
        cmocka_unit_test(test_checkpoint_fn),
        cmocka_unit_test(test_checkpoint_batchnorm),
        cmocka_unit_test(test_alloc_bins),
        cmocka_unit_test(test_alloc_limit),
    };
    return cmocka_run_group_tests_name("autograd", tests, NULL, NULL);
}
