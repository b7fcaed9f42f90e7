/* test_tensor_ops.c: the transformer primitives against float64 re-computations and central
 * differences (run_gradcheck): views (permute, transposes, slices, narrow, split), concat,
 * broadcasting binary ops, last-dim reductions, softmax and log-softmax over N-d inputs, every
 * unary map, embeddings, layer norm, batched matmul (transposed views, a shared matrix, bf16),
 * cross-entropy over (B, T, V) with an ignore index; the optimizers' list ops; and that the
 * reductions and the embedding's backward give the same bits on 1 and 2 threads. */
#include "tests/testutil.h"
#include "runtime/half.h"
#include "runtime/attn_chunked.h"
#include "runtime/ctx.h"

/* ---------------------------------------------------------------- a generic N-d reference helper */

static void strides_of(int ndim, const int64_t *shape, int64_t *strides)
{
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--)
        strides[d] = s, s *= shape[d];
}

static int64_t numel_of(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    return n;
}

/* A one-input op that only moves values (a copy, a view, an expand): its forward exact, its
 * gradient (sums of moved values) against central differences. */
static void gradcheck_copy(const char *name, int ndim, const int64_t *shape,
                           dpt_tensor *(*build)(dpt_ctx *, dpt_tensor **, void *),
                           void (*reference)(const double *const *, double *, void *), void *user, uint64_t seed)
{
    gradcheck gc = {.n_in = 1, .ndim = {ndim}, .lo = -1, .hi = 1, .build = build, .reference = reference,
                    .user = user, .fwd_rtol = 0, .grad_rtol = 1e-5, .grad_atol = 1e-6};
    memcpy(gc.shape[0], shape, (size_t)ndim * sizeof *shape);
    run_gradcheck(name, &gc, seed);
}

/* ---------------------------------------------------------------- permute + contiguous */

typedef struct perm_case {
    int ndim;
    int64_t shape[4];
    int axes[4];
    bool then_add; /* use the view in an op that needs dense data (dpt_contiguous inside) */
} perm_case;

static dpt_tensor *perm_build(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    perm_case *c = u;
    dpt_tensor *v = dpt_permute(ctx, in[0], c->axes);
    return c->then_add ? dpt_scale(ctx, v, 2.0f) : dpt_contiguous(ctx, v);
}

static void perm_ref(const double *const *in, double *out, void *u)
{
    perm_case *c = u;
    int64_t xs[4], yshape[4], ys[4];
    strides_of(c->ndim, c->shape, xs);
    for (int d = 0; d < c->ndim; d++)
        yshape[d] = c->shape[c->axes[d]];
    strides_of(c->ndim, yshape, ys);
    int64_t n = numel_of(c->ndim, c->shape);
    for (int64_t j = 0; j < n; j++) {
        int64_t rest = j, xoff = 0;
        for (int d = 0; d < c->ndim; d++) {
            int64_t i = rest / ys[d];
            rest %= ys[d];
            xoff += i * xs[c->axes[d]];
        }
        out[j] = (c->then_add ? 2.0 : 1.0) * in[0][xoff];
    }
}

/* dpt_init_normal draws in order and transforms on every thread: 300,000 values (past a chunk
 * of 2^18, split over 2 threads) equal one dpt_rng_normal a value from the same seed, bit for bit,
 * and leave the context's generator where that loop leaves it (the next draw agrees). Drawing in
 * another order, or a chunk's tail from the next chunk's draws, fails it. */
static void test_init_normal_order(void **state)
{
    (void)state;
    enum { N = 300000 };
    dpt_ctx *ctx = test_ctx(2, 77);
    dpt_tensor *t = dpt_tensor_new(ctx, 1, (int64_t[]){N});
    dpt_init_normal(ctx, t, 0.02f);
    dpt_rng ref;
    dpt_rng_seed(&ref, 77);
    const float *got = dpt_tensor_data(t);
    for (int64_t i = 0; i < N; i++) {
        float want = 0.02f * dpt_rng_normal(&ref);
        if (memcmp(&got[i], &want, sizeof want)) fail_msg("value %lld: %.9g, want %.9g", (long long)i, got[i], want);
    }
    assert_true(dpt_rng_next(&ctx->rng) == dpt_rng_next(&ref));
    dpt_tensor_free(t);
    dpt_ctx_free(ctx);
}

static void test_permute(void **state)
{
    (void)state;
    perm_case cases[] = {
        {3, {2, 3, 4}, {2, 0, 1}, false}, {4, {2, 3, 4, 5}, {0, 2, 1, 3}, false},
        {4, {2, 3, 4, 5}, {3, 2, 1, 0}, true}, {2, {5, 7}, {1, 0}, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        gradcheck_copy("permute", cases[i].ndim, cases[i].shape, perm_build, perm_ref, &cases[i], 700 + i);
}

/* A permute large enough for the strided copy's blocks on 2 threads (each block starts its rows
 * by division, then steps them): every value where the permutation puts it, forward and back. */
static void test_permute_large(void **state)
{
    (void)state;
    enum { A = 8, B = 9, C = 10, D = 51, N = A * B * C * D };
    dpt_ctx *ctx = test_ctx(2, 1);
    dpt_rng rng;
    dpt_rng_seed(&rng, 2);
    dpt_tensor *x = test_input(ctx, &rng, 4, (int64_t[]){A, B, C, D}, -1, 1);
    dpt_tensor *w = test_input(ctx, &rng, 4, (int64_t[]){D, B, A, C}, -1, 1);
    dpt_tensor *y = dpt_contiguous(ctx, dpt_permute(ctx, x, (int[]){3, 1, 0, 2})); /* (D, B, A, C) */
    dpt_backward(ctx, dpt_sum(ctx, dpt_mul(ctx, y, w)));
    for (int a = 0; a < A; a++)
        for (int b = 0; b < B; b++)
            for (int c = 0; c < C; c++)
                for (int d = 0; d < D; d++) {
                    int64_t xi = ((int64_t)(a * B + b) * C + c) * D + d, yi = ((int64_t)(d * B + b) * A + a) * C + c;
                    if (y->data[yi] != x->data[xi] || x->grad->data[xi] != w->data[yi])
                        fail_msg("permute of %d values: (%d, %d, %d, %d) misplaced", N, a, b, c, d);
                }
    dpt_tape_clear(ctx);
    dpt_tensor_free(x), dpt_tensor_free(w);
    dpt_ctx_free(ctx);
}

/* ---------------------------------------------------------------- slice, narrow, split, concat */

typedef struct slice_case {
    int kind; /* 0 slice with a step, 1 narrow then transpose, 2 split into 3 and concat in another order */
} slice_case;

static dpt_tensor *slice_build(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    slice_case *c = u;
    if (c->kind == 0) return dpt_contiguous(ctx, dpt_slice(ctx, in[0], 1, 1, 8, 3)); /* (3, 8, 5) -> (3, 3, 5) */
    if (c->kind == 1) return dpt_contiguous(ctx, dpt_transpose_axes(ctx, dpt_narrow(ctx, in[0], -1, 1, 3), 0, 2));
    dpt_tensor *parts[3];
    dpt_split(ctx, in[0], 1, 3, (int64_t[]){2, 5, 1}, parts);
    return dpt_concat(ctx, 3, (dpt_tensor *[]){parts[2], parts[0], parts[1]}, 1);
}

static void slice_ref(const double *const *in, double *out, void *u)
{
    slice_case *c = u;
    const double *x = in[0]; /* (3, 8, 5) */
#define X(a, b, d) x[((a) * 8 + (b)) * 5 + (d)]
    if (c->kind == 0) {
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++)
                for (int d = 0; d < 5; d++)
                    out[(a * 3 + b) * 5 + d] = X(a, 1 + 3 * b, d);
    } else if (c->kind == 1) { /* narrow last axis to [1, 4): (3, 8, 3); transpose 0 and 2: (3, 8, 3) */
        for (int e = 0; e < 3; e++)
            for (int b = 0; b < 8; b++)
                for (int a = 0; a < 3; a++)
                    out[(e * 8 + b) * 3 + a] = X(a, b, 1 + e);
    } else { /* rows [7], [0, 2), [2, 7) along axis 1 */
        static const int order[8] = {7, 0, 1, 2, 3, 4, 5, 6};
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 8; b++)
                for (int d = 0; d < 5; d++)
                    out[(a * 8 + b) * 5 + d] = X(a, order[b], d);
    }
#undef X
}

static void test_slices_and_concat(void **state)
{
    (void)state;
    static const char *const names[] = {"slice with step", "narrow + transpose", "split + concat"};
    for (int k = 0; k < 3; k++) {
        slice_case c = {k};
        gradcheck gc = {.n_in = 1, .ndim = {3}, .shape = {{3, 8, 5}}, .lo = -1, .hi = 1, .build = slice_build,
                        .reference = slice_ref, .user = &c, .fwd_rtol = 0, .grad_rtol = 1e-5, .grad_atol = 1e-6};
        run_gradcheck(names[k], &gc, 720 + (uint64_t)k);
    }
}

/* ---------------------------------------------------------------- broadcasting */

typedef struct bcast_case {
    dpt_binary_op op;
    int na, nb;
    int64_t a[4], b[4];
    bool temps; /* the operands are temporaries (x * 1): their gradients are written, not added to */
} bcast_case;

static dpt_tensor *bcast_build(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    bcast_case *c = u;
    dpt_tensor *a = c->temps ? dpt_scale(ctx, in[0], 1.0f) : in[0], *b = c->temps ? dpt_scale(ctx, in[1], 1.0f) : in[1];
    switch (c->op) {
    case DPT_BINARY_ADD:
        return dpt_add(ctx, a, b);
    case DPT_BINARY_SUB:
        return dpt_sub(ctx, a, b);
    case DPT_BINARY_MUL:
        return dpt_mul(ctx, a, b);
    default:
        return dpt_div(ctx, a, b);
    }
}

static void bcast_ref(const double *const *in, double *out, void *u)
{
    bcast_case *c = u;
    int n = c->na > c->nb ? c->na : c->nb;
    int64_t shape[4], as[4], bs[4], sa[4], sb[4];
    strides_of(c->na, c->a, sa);
    strides_of(c->nb, c->b, sb);
    for (int d = 0; d < n; d++) {
        int da = d - (n - c->na), db = d - (n - c->nb);
        int64_t xa = da >= 0 ? c->a[da] : 1, xb = db >= 0 ? c->b[db] : 1;
        shape[d] = xa > xb ? xa : xb;
        as[d] = da >= 0 && xa != 1 ? sa[da] : 0;
        bs[d] = db >= 0 && xb != 1 ? sb[db] : 0;
    }
    int64_t ys[4];
    strides_of(n, shape, ys);
    for (int64_t j = 0; j < numel_of(n, shape); j++) {
        int64_t rest = j, ao = 0, bo = 0;
        for (int d = 0; d < n; d++) {
            int64_t i = rest / ys[d];
            rest %= ys[d];
            ao += i * as[d], bo += i * bs[d];
        }
        double x = in[0][ao], y = in[1][bo];
        out[j] = c->op == DPT_BINARY_ADD ? x + y : c->op == DPT_BINARY_SUB ? x - y : c->op == DPT_BINARY_MUL ? x * y : x / y;
    }
}

static void test_broadcasting(void **state)
{
    (void)state;
    static const char *const names[] = {"add", "sub", "mul", "div"};
    bcast_case shapes[] = {
        {0, 3, 1, {2, 3, 4}, {4}, false},          /* a bias over the last axis */
        {0, 3, 2, {2, 1, 4}, {3, 1}, false},       /* both stretched */
        {0, 4, 4, {2, 3, 4, 4}, {1, 1, 4, 4}, false}, /* a mask over the batch and heads */
        {0, 2, 2, {3, 5}, {3, 5}, false},          /* same shape: the dense path */
    };
    for (int op = 0; op < 2 * DPT_BINARY_COUNT; op++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            bcast_case c = shapes[s];
            c.op = (dpt_binary_op)(op % DPT_BINARY_COUNT);
            c.temps = op >= DPT_BINARY_COUNT;
            gradcheck gc = {.n_in = 2, .ndim = {c.na, c.nb}, .lo = 0.5f, .hi = 2.0f, /* away from 0 for div */
                            .build = bcast_build, .reference = bcast_ref, .user = &c,
                            .fwd_rtol = 1e-6, .grad_rtol = 1e-4, .grad_atol = 1e-5};
            memcpy(gc.shape[0], c.a, sizeof c.a);
            memcpy(gc.shape[1], c.b, sizeof c.b);
            char name[64];
            snprintf(name, sizeof name, "broadcast %s, case %zu%s", names[c.op], s, c.temps ? " (temporaries)" : "");
            run_gradcheck(name, &gc, 740 + 10 * (uint64_t)op + s);
        }
}

/* ---------------------------------------------------------------- reductions, softmax, log-softmax */

typedef struct rows_case {
    int kind; /* 0 sum, 1 mean, 2 max, 3 softmax, 4 log_softmax */
    bool keepdim;
    int64_t rows, cols;
} rows_case;

static dpt_tensor *rows_build(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    rows_case *c = u;
    switch (c->kind) {
    case 0:
        return dpt_sum_last(ctx, in[0], c->keepdim);
    case 1:
        return dpt_mean_last(ctx, in[0], c->keepdim);
    case 2:
        return dpt_max_last(ctx, in[0], c->keepdim);
    case 3:
        return dpt_softmax(ctx, in[0]);
    default:
        return dpt_log_softmax(ctx, in[0]);
    }
}

static void rows_ref(const double *const *in, double *out, void *u)
{
    rows_case *c = u;
    for (int64_t r = 0; r < c->rows; r++) {
        const double *x = in[0] + r * c->cols;
        double sum = 0, max = x[0], z = 0;
        for (int64_t k = 0; k < c->cols; k++)
            sum += x[k], max = x[k] > max ? x[k] : max;
        for (int64_t k = 0; k < c->cols; k++)
            z += exp(x[k] - max);
        if (c->kind <= 2)
            out[r] = c->kind == 0 ? sum : c->kind == 1 ? sum / (double)c->cols : max;
        else
            for (int64_t k = 0; k < c->cols; k++)
                out[r * c->cols + k] = c->kind == 3 ? exp(x[k] - max) / z : x[k] - max - log(z);
    }
}

static void test_rows(void **state)
{
    (void)state;
    static const char *const names[] = {"sum_last", "mean_last", "max_last", "softmax (N-d)", "log_softmax"};
    for (int kind = 0; kind < 5; kind++)
        for (int keep = 0; keep < 2; keep++) {
            if (kind >= 3 && keep) continue;
            rows_case c = {kind, keep, 2 * 3, 7};
            gradcheck gc = {.n_in = 1, .ndim = {3}, .shape = {{2, 3, 7}}, .lo = -3, .hi = 3, .build = rows_build,
                            .reference = rows_ref, .user = &c, .fwd_rtol = 1e-5, .grad_rtol = 1e-4, .grad_atol = 1e-6};
            char name[64];
            snprintf(name, sizeof name, "%s%s", names[kind], keep ? " keepdim" : "");
            run_gradcheck(name, &gc, 800 + 2 * (uint64_t)kind + (uint64_t)keep);
        }
    /* the shapes: (2, 3, 7) -> (2, 3) or (2, 3, 1) */
    dpt_ctx *ctx = test_ctx(1, 1);
    dpt_tensor *x = dpt_tensor_new(ctx, 3, (int64_t[]){2, 3, 7});
    assert_int_equal(dpt_tensor_ndim(dpt_sum_last(ctx, x, false)), 2);
    dpt_tensor *k = dpt_mean_last(ctx, x, true);
    assert_int_equal(dpt_tensor_ndim(k), 3);
    assert_int_equal(dpt_tensor_dim(k, -1), 1);
    dpt_tape_clear(ctx);
    dpt_tensor_free(x);
    dpt_ctx_free(ctx);
}

/* ---------------------------------------------------------------- unary maps */

typedef struct unary_case {
    dpt_unary_op op;
    int64_t n;
} unary_case;

static dpt_tensor *unary_build(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    unary_case *c = u;
    return dpt_unary(ctx, c->op, in[0]);
}

static double unary_d(dpt_unary_op op, double v)
{
    switch (op) {
    case DPT_UNARY_NEG:
        return -v;
    case DPT_UNARY_ABS:
        return fabs(v);
    case DPT_UNARY_SIGN:
        return (v > 0) - (v < 0);
    case DPT_UNARY_SQRT:
        return sqrt(v);
    case DPT_UNARY_RSQRT:
        return 1.0 / sqrt(v);
    case DPT_UNARY_EXP:
        return exp(v);
    case DPT_UNARY_LOG:
        return log(v);
    case DPT_UNARY_SQUARE:
        return v * v;
    case DPT_UNARY_RECIPROCAL:
        return 1.0 / v;
    case DPT_UNARY_TANH:
        return tanh(v);
    case DPT_UNARY_SIGMOID:
        return 1.0 / (1.0 + exp(-v));
    case DPT_UNARY_SILU:
        return v / (1.0 + exp(-v));
    default:
        return 0.5 * v * (1.0 + erf(v / sqrt(2.0)));
    }
}

static void unary_ref(const double *const *in, double *out, void *u)
{
    unary_case *c = u;
    for (int64_t i = 0; i < c->n; i++)
        out[i] = unary_d(c->op, in[0][i]);
}

static void test_unary(void **state)
{
    (void)state;
    static const char *const names[] = {"neg",  "abs",     "sign", "sqrt", "rsqrt", "exp",     "log",
                                        "square", "reciprocal", "tanh", "sigmoid", "silu", "gelu_erf"};
    _Static_assert(sizeof names / sizeof names[0] == DPT_UNARY_COUNT, "a test per unary op");
    for (int op = 0; op < DPT_UNARY_COUNT; op++) {
        /* positive inputs where the op needs them; abs and sign away from their kink at 0 */
        bool positive = op == DPT_UNARY_SQRT || op == DPT_UNARY_RSQRT || op == DPT_UNARY_LOG ||
                        op == DPT_UNARY_RECIPROCAL || op == DPT_UNARY_ABS || op == DPT_UNARY_SIGN;
        unary_case c = {(dpt_unary_op)op, 40};
        gradcheck gc = {.n_in = 1, .ndim = {2}, .shape = {{5, 8}}, .lo = positive ? 0.3f : -3.0f,
                        .hi = positive ? 3.0f : 3.0f, .build = unary_build, .reference = unary_ref, .user = &c,
                        .fwd_rtol = 2e-6, .grad_rtol = 1e-4, .grad_atol = 1e-6};
        run_gradcheck(names[op], &gc, 830 + (uint64_t)op);
    }
}

/* The maps at the ends of their range and on NaN, against float64 (the CPU's sigmoid, SiLU and
 * exact GELU run vectorised formulas of their own, not libm's): within 2e-6 relative or 1e-6
 * absolute; infinities where float64 overflows to them; NaN stays NaN. */
static void test_unary_extremes(void **state)
{
    (void)state;
    static const float xs[] = {-100.0f, -30.0f, -9.0f, -5.0f, -1e-3f, 0.0f, 1e-3f, 5.0f, 9.0f, 30.0f, 100.0f, NAN};
    enum { N = sizeof xs / sizeof xs[0] };
    const dpt_unary_op ops[] = {DPT_UNARY_EXP, DPT_UNARY_TANH, DPT_UNARY_SIGMOID, DPT_UNARY_SILU, DPT_UNARY_GELU_ERF};
    dpt_ctx *ctx = test_ctx(1, 1);
    dpt_tensor *x = dpt_tensor_new(ctx, 1, (int64_t[]){N});
    dpt_tensor_copy_from_host(x, xs);
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        float y[N];
        dpt_tensor_copy_to_host(dpt_unary(ctx, ops[k], x), y);
        for (int i = 0; i < N; i++) {
            double want = unary_d(ops[k], xs[i]);
            bool ok = isnan(want) ? isnan(y[i])
                      : isinf((float)want) ? y[i] == (float)want
                                           : fabs(y[i] - want) <= 1e-6 + 2e-6 * fabs(want);
            if (!ok) fail_msg("unary op %d of %g: %.9g, float64 says %.9g", (int)ops[k], (double)xs[i], (double)y[i], want);
        }
    }
    dpt_tape_clear(ctx);
    dpt_tensor_free(x);
    dpt_ctx_free(ctx);
}

/* x + c, and RMSNorm as a researcher composes it (LLaMA's: x rsqrt(mean(x^2) + eps) w) from
 * add_scalar, mean_last, rsqrt and broadcasting mul, against float64 and central differences. */
static dpt_tensor *rms_build(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    if (*(int *)u == 0) return dpt_add_scalar(ctx, in[0], 0.375f);
    dpt_tensor *ms = dpt_mean_last(ctx, dpt_mul(ctx, in[0], in[0]), true);
    return dpt_mul(ctx, dpt_mul(ctx, in[0], dpt_unary(ctx, DPT_UNARY_RSQRT, dpt_add_scalar(ctx, ms, 1e-2f))), in[1]);
}

static void rms_ref(const double *const *in, double *out, void *u)
{
    for (int r = 0; r < 3; r++) {
        double ms = 0.0;
        for (int c = 0; c < 5; c++)
            ms += in[0][r * 5 + c] * in[0][r * 5 + c] / 5.0;
        for (int c = 0; c < 5; c++)
            out[r * 5 + c] = *(int *)u == 0 ? in[0][r * 5 + c] + 0.375 : in[0][r * 5 + c] / sqrt(ms + 1e-2) * in[1][c];
    }
}

static void test_add_scalar_rmsnorm(void **state)
{
    (void)state;
    for (int k = 0; k < 2; k++) {
        gradcheck gc = {.n_in = k ? 2 : 1, .ndim = {2, 1}, .shape = {{3, 5}, {5}}, .lo = -2, .hi = 2,
                        .build = rms_build, .reference = rms_ref, .user = &k, .fwd_rtol = 1e-6,
                        .grad_rtol = 1e-4, .grad_atol = 1e-6};
        run_gradcheck(k ? "rmsnorm from add_scalar, mean_last, rsqrt, mul" : "add_scalar", &gc, 1200 + (uint64_t)k);
    }
}

/* dpt_rotary of x (2, 3, 2 heads x 8) at positions 2..4 of (5, 4) tables, fused (the CPU's kernel)
 * and composed (a backend without one: the swap of the backend's entry tests it here): against
 * float64 (y_a = a c - b s, y_b = b c + a s per head's halves a, b) and central differences. The
 * tables are any numbers (the op is linear in x), not differentiated. */
static dpt_tensor *rotary_build(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    if (!*(int *)u) return dpt_rotary(ctx, in[0], 2, in[1], in[2], 2);
    dpt_backend saved = *ctx->be, *be = (dpt_backend *)ctx->be; /* the composed form */
    be->rotary = NULL;
    dpt_tensor *y = dpt_rotary(ctx, in[0], 2, in[1], in[2], 2);
    *be = saved;
    return y;
}

static void rotary_ref(const double *const *in, double *out, void *u)
{
    (void)u;
    for (int b = 0; b < 2; b++)
        for (int t = 0; t < 3; t++)
            for (int h = 0; h < 2; h++)
                for (int i = 0; i < 4; i++) {
                    int at = ((b * 3 + t) * 2 + h) * 8;
                    double xa = in[0][at + i], xb = in[0][at + 4 + i], c = in[1][(2 + t) * 4 + i],
                           sn = in[2][(2 + t) * 4 + i];
                    out[at + i] = xa * c - xb * sn;
                    out[at + 4 + i] = xb * c + xa * sn;
                }
}

static void test_rotary(void **state)
{
    (void)state;
    for (int composed = 0; composed < 2; composed++) {
        gradcheck gc = {.n_in = 3, .ndim = {3, 2, 2}, .shape = {{2, 3, 16}, {5, 4}, {5, 4}}, .lo = -1, .hi = 1,
                        .no_grad = {false, true, true}, .build = rotary_build, .reference = rotary_ref,
                        .user = &composed, .fwd_rtol = 1e-6, .grad_rtol = 1e-4, .grad_atol = 1e-6};
        run_gradcheck(composed ? "rotary (composed)" : "rotary", &gc, 1300 + (uint64_t)composed);
    }
}

/* ---------------------------------------------------------------- embedding */

typedef struct emb_case {
    int32_t ids[12];
    int64_t vocab, dim, n;
    dpt_tensor *ids_t;
} emb_case;

static void emb_setup(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    emb_case *c = u;
    c->ids_t = dpt_tensor_new_dtype(ctx, DPT_I32, 2, (int64_t[]){3, 4});
    dpt_tensor_copy_from_host_i32(c->ids_t, c->ids);
    (void)in;
}

static void emb_teardown(void *u)
{
    dpt_tensor_free(((emb_case *)u)->ids_t);
}

static dpt_tensor *emb_build(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    return dpt_embedding(ctx, in[0], ((emb_case *)u)->ids_t);
}

static void emb_ref(const double *const *in, double *out, void *u)
{
    emb_case *c = u;
    for (int64_t i = 0; i < c->n; i++)
        for (int64_t d = 0; d < c->dim; d++)
            out[i * c->dim + d] = in[0][c->ids[i] * c->dim + d];
}

static void test_embedding(void **state)
{
    (void)state;
    /* repeated ids: their gradients add up */
    emb_case c = {{3, 0, 3, 7, 1, 1, 1, 5, 0, 9, 3, 2}, 10, 6, 12, NULL};
    gradcheck gc = {.n_in = 1, .ndim = {2}, .shape = {{10, 6}}, .lo = -1, .hi = 1, .setup = emb_setup,
                    .teardown = emb_teardown, .build = emb_build, .reference = emb_ref, .user = &c,
                    .fwd_rtol = 0, .grad_rtol = 1e-5, .grad_atol = 1e-6};
    run_gradcheck("embedding", &gc, 860);
    gc.threads = 2;
    run_gradcheck("embedding, 2 threads", &gc, 861);
}

/* ---------------------------------------------------------------- layer norm */

typedef struct ln_case {
    bool affine;
    int64_t rows, dim;
} ln_case;

static dpt_tensor *ln_build(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    ln_case *c = u;
    return dpt_layer_norm(ctx, in[0], c->affine ? in[1] : NULL, c->affine ? in[2] : NULL, 1e-5f);
}

static void ln_ref(const double *const *in, double *out, void *u)
{
    ln_case *c = u;
    for (int64_t r = 0; r < c->rows; r++) {
        const double *x = in[0] + r * c->dim;
        double mean = 0, var = 0;
        for (int64_t k = 0; k < c->dim; k++)
            mean += x[k];
        mean /= (double)c->dim;
        for (int64_t k = 0; k < c->dim; k++)
            var += (x[k] - mean) * (x[k] - mean);
        var /= (double)c->dim;
        for (int64_t k = 0; k < c->dim; k++) {
            double v = (x[k] - mean) / sqrt(var + 1e-5);
            out[r * c->dim + k] = c->affine ? v * in[1][k] + in[2][k] : v;
        }
    }
}

static void test_layer_norm(void **state)
{
    (void)state;
    for (int affine = 0; affine < 2; affine++)
        for (int threads = 1; threads <= 2; threads++) {
            ln_case c = {affine, 2 * 5, 16};
            gradcheck gc = {.n_in = affine ? 3 : 1, .ndim = {3, 1, 1}, .shape = {{2, 5, 16}, {16}, {16}}, .lo = -2,
                            .hi = 2, .build = ln_build, .reference = ln_ref, .user = &c, .fwd_rtol = 1e-5,
                            .grad_rtol = 1e-3, .grad_atol = 1e-5, .threads = threads};
            char name[64];
            snprintf(name, sizeof name, "layer_norm%s, %d thread(s)", affine ? " (affine)" : "", threads);
            run_gradcheck(name, &gc, 870 + 2 * (uint64_t)affine + (uint64_t)threads);
        }
}

/* ---------------------------------------------------------------- attention */

typedef struct attn_case {
    int64_t B, T, H, hs;
    bool causal;
} attn_case;

static dpt_tensor *attn_build(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    attn_case *c = u;
    return dpt_attention(ctx, in[0], (int)c->H, c->causal);
}

/* softmax(q k^T / sqrt(hs) + mask) v per (b, h), materialised in float64 */
static void attn_ref(const double *const *in, double *out, void *u)
{
    attn_case *c = u;
    int64_t C = c->H * c->hs, C3 = 3 * C;
    double p[320];
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->H; h++)
            for (int64_t i = 0; i < c->T; i++) {
                const double *q = in[0] + (b * c->T + i) * C3 + h * c->hs;
                double m = -INFINITY, sum = 0;
                for (int64_t j = 0; j < c->T; j++) {
                    const double *k = in[0] + (b * c->T + j) * C3 + C + h * c->hs;
                    double d = 0;
                    for (int64_t e = 0; e < c->hs; e++)
                        d += q[e] * k[e];
                    p[j] = c->causal && j > i ? -INFINITY : d / sqrt((double)c->hs);
                    m = fmax(m, p[j]);
                }
                for (int64_t j = 0; j < c->T; j++)
                    sum += p[j] = exp(p[j] - m);
                for (int64_t e = 0; e < c->hs; e++) {
                    double o = 0;
                    for (int64_t j = 0; j < c->T; j++)
                        o += p[j] / sum * in[0][(b * c->T + j) * C3 + 2 * C + h * c->hs + e];
                    out[(b * c->T + i) * C + h * c->hs + e] = o;
                }
            }
}

static void test_attention(void **state)
{
    (void)state;
    /* causal T = 150: three 50-row tiles (the kernels' tiles of at most 64, equal); T = 70 without
     * the mask: one tile (at most 256 rows when every row sees all keys); T = 300: two of 150 */
    attn_case cases[] = {{2, 5, 2, 4, true}, {2, 5, 2, 4, false}, {1, 7, 3, 2, true}, {3, 1, 1, 8, true},
                         {1, 150, 1, 3, true}, {1, 70, 2, 2, false}, {1, 300, 1, 2, false}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int threads = 1; threads <= 2; threads++) {
            attn_case *c = &cases[i];
            gradcheck gc = {.n_in = 1, .ndim = {3}, .shape = {{c->B, c->T, 3 * c->H * c->hs}}, .lo = -2, .hi = 2,
                            .build = attn_build, .reference = attn_ref, .user = c, .fwd_rtol = 1e-5,
                            .grad_rtol = 1e-3, .grad_atol = 1e-5, .threads = threads};
            char name[96];
            snprintf(name, sizeof name, "attention B%lld T%lld H%lld hs%lld%s, %d thread(s)", (long long)c->B,
                     (long long)c->T, (long long)c->H, (long long)c->hs, c->causal ? " causal" : "", threads);
            run_gradcheck(name, &gc, 900 + 2 * i + (uint64_t)threads);
        }
}

/* Large enough for the kernels' threads to split the work: the same bits on 1 and 2 threads,
 * and memory for the scores that does not grow with T^2: the forward's tensors are the output
 * and the (B, H, T) statistics (each thread's scratch is one 64-row tile of scores, 64 x T). */
static void attention_on(int threads, float *y_out, float *g_out, int64_t *temp_bytes)
{
    dpt_ctx *ctx = test_ctx(threads, 9);
    dpt_rng rng;
    dpt_rng_seed(&rng, 4242);
    enum { B = 2, T = 96, H = 4, HS = 16 };
    dpt_tensor *qkv = test_input(ctx, &rng, 3, (int64_t[]){B, T, 3 * H * HS}, -1, 1);
    size_t before = dpt_ctx_mem_stats(ctx).allocated;
    dpt_tensor *y = dpt_attention(ctx, qkv, H, true);
    *temp_bytes = (int64_t)(dpt_ctx_mem_stats(ctx).allocated - before);
    dpt_backward(ctx, dpt_sum(ctx, dpt_mul(ctx, y, y)));
    memcpy(y_out, y->data, (size_t)y->numel * sizeof(float));
    memcpy(g_out, qkv->grad->data, (size_t)qkv->numel * sizeof(float));
    dpt_tape_clear(ctx);
    dpt_tensor_free(qkv);
    dpt_ctx_free(ctx);
}

/* oneDNN's attention (batched products over every (b, h), tiles of 150 rows without the mask
 * and of 60 with it at T 300) against the native kernel's own code (one CBLAS tile of 64 rows
 * per task): the output and the gradient agree within fp32 summation-order error. */
static void attention_with(dpt_cpu_kernels kernels, bool causal, float *y_out, float *g_out, int64_t n)
{
    dpt_cpu_kernels saved = test_kernels;
    test_kernels = kernels;
    dpt_ctx *ctx = test_ctx(2, 9);
    test_kernels = saved;
    dpt_rng rng;
    dpt_rng_seed(&rng, 77);
    dpt_tensor *qkv = test_input(ctx, &rng, 3, (int64_t[]){4, 300, 3 * 4 * 8}, -1, 1);
    dpt_tensor *y = dpt_attention(ctx, qkv, 4, causal);
    dpt_backward(ctx, dpt_sum(ctx, dpt_mul(ctx, y, y)));
    memcpy(y_out, y->data, (size_t)n * sizeof(float));
    memcpy(g_out, qkv->grad->data, 3 * (size_t)n * sizeof(float));
    dpt_tape_clear(ctx);
    dpt_tensor_free(qkv);
    dpt_ctx_free(ctx);
}

static void test_attention_onednn_native(void **state)
{
    (void)state;
    enum { N = 4 * 300 * 4 * 8 };
    static float y[2][N], g[2][3 * N];
    for (int causal = 0; causal <= 1; causal++) {
        attention_with(DPT_CPU_KERNELS_ONEDNN, causal, y[0], g[0], N);
        attention_with(DPT_CPU_KERNELS_NATIVE, causal, y[1], g[1], N);
        double ey = 0, eg = 0, gmax = 0;
        for (int i = 0; i < N; i++)
            ey = fmax(ey, fabs((double)y[0][i] - y[1][i]));
        for (int i = 0; i < 3 * N; i++)
            eg = fmax(eg, fabs((double)g[0][i] - g[1][i])), gmax = fmax(gmax, fabs((double)g[1][i]));
        print_message("attention, oneDNN against native, causal %d: |y| %.2e apart, |dqkv| %.2e of %.2e\n", causal,
                      ey, eg, gmax);
        /* outputs are convex combinations of values in [-1, 1] (300 terms: ~1e-6 apart); the
         * gradient sums 300 products of those */
        assert_true(ey < 1e-5);
        assert_true(eg < 1e-4 * (1.0 + gmax));
    }
}

static void test_attention_threads_and_memory(void **state)
{
    (void)state;
    enum { N = 2 * 96 * 64 };
    static float y1[N], y2[N], g1[3 * N], g2[3 * N];
    int64_t b1, b2;
    attention_on(1, y1, g1, &b1);
    attention_on(2, y2, g2, &b2);
    assert_memory_equal(y1, y2, sizeof y1);
    assert_memory_equal(g1, g2, sizeof g1);
    /* y (B, T, C) and 2 x (B, H, T) statistics (the allocator rounds each up); a materialised
     * (B, H, T, T) score matrix alone would be 6 times y */
    int64_t expected = (int64_t)(N + 2 * 2 * 4 * 96) * (int64_t)sizeof(float);
    assert_true(b1 > 0);
    if (b1 > 2 * expected) fail_msg("attention's forward made %lld bytes of temporaries; expected about %lld",
                                       (long long)b1, (long long)expected);
}

/* ---------------------------------------------------------------- batched matmul */

typedef struct bmm_case {
    int64_t B, M, K, N;
    bool ta, tb, shared; /* a given as (B, K, M) and viewed transposed; b likewise; b one (K, N) */
    bool bf16;
} bmm_case;

static dpt_tensor *bmm_build(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    bmm_case *c = u;
    dpt_tensor *a = c->ta ? dpt_transpose_axes(ctx, in[0], -1, -2) : in[0];
    dpt_tensor *b = c->tb ? dpt_transpose_axes(ctx, in[1], -1, -2) : in[1];
    return dpt_bmm(ctx, a, b);
}

static double round_to(double v, bool bf16)
{
    return bf16 ? (double)dpt_f32_from_bf16(dpt_bf16_from_f32((float)v)) : v;
}

static void bmm_ref(const double *const *in, double *out, void *u)
{
    bmm_case *c = u;
    for (int64_t i = 0; i < c->B; i++)
        for (int64_t m = 0; m < c->M; m++)
            for (int64_t n = 0; n < c->N; n++) {
                double acc = 0;
                for (int64_t k = 0; k < c->K; k++) {
                    const double *a = in[0] + i * c->M * c->K, *b = in[1] + (c->shared ? 0 : i * c->K * c->N);
                    double x = c->ta ? a[k * c->M + m] : a[m * c->K + k];
                    double y = c->tb ? b[n * c->K + k] : b[k * c->N + n];
                    acc += round_to(x, c->bf16) * round_to(y, c->bf16);
                }
                out[(i * c->M + m) * c->N + n] = acc;
            }
}

static void test_bmm(void **state)
{
    (void)state;
    bmm_case cases[] = {
        {3, 4, 5, 6, false, false, false, false}, {3, 4, 5, 6, false, true, false, false}, /* q k^T */
        {3, 4, 5, 6, true, false, false, false},  {2, 7, 3, 5, true, true, false, false},
        {4, 3, 6, 5, false, false, true, false},  {4, 3, 6, 5, true, false, true, false}, /* a weight shared */
    };
    for (int kernels = DPT_CPU_KERNELS_ONEDNN; kernels <= DPT_CPU_KERNELS_NATIVE; kernels++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            bmm_case *c = &cases[i];
            test_kernels = (dpt_cpu_kernels)kernels;
            gradcheck gc = {.n_in = 2,
                            .ndim = {3, c->shared ? 2 : 3},
                            .shape = {{c->B, c->ta ? c->K : c->M, c->ta ? c->M : c->K},
                                      {c->B, c->tb ? c->N : c->K, c->tb ? c->K : c->N}},
                            .lo = -1, .hi = 1, .build = bmm_build, .reference = bmm_ref, .user = c,
                            .fwd_rtol = 1e-5, .grad_rtol = 1e-4, .grad_atol = 1e-5};
            if (c->shared) gc.shape[1][0] = c->tb ? c->N : c->K, gc.shape[1][1] = c->tb ? c->K : c->N;
            char name[96];
            snprintf(name, sizeof name, "bmm (%lld, %lld, %lld, %lld) ta %d tb %d%s %s", (long long)c->B,
                     (long long)c->M, (long long)c->K, (long long)c->N, c->ta, c->tb, c->shared ? " shared" : "",
                     test_kernels_name());
            run_gradcheck(name, &gc, 900 + i);
        }
    test_kernels = DPT_CPU_KERNELS_DEFAULT;
}

/* A 2-thread context in bf16, or the test skipped with the reason (no oneDNN in this build, no
 * AVX512-BF16 on this CPU). */
static dpt_ctx *bf16_ctx_or_skip(void)
{
    dpt_error err;
    dpt_ctx_options o = {.device = {DPT_DEVICE_CPU, 0}, .threads = 2, .seed = 3, .precision = DPT_PRECISION_BF16};
    dpt_ctx *ctx = dpt_ctx_new(&o, &err);
    if (!ctx) { /* a build without oneDNN has no CPU bf16 path */
        print_message("skipped: %s\n", err.msg);
        skip();
    }
    const char *why;
    if (dpt_ctx_precision(ctx, &why) != DPT_PRECISION_BF16) {
        print_message("skipped: %s\n", why);
        dpt_ctx_free(ctx);
        skip();
    }
    return ctx;
}

/* bf16 (precision = bf16 on oneDNN): the product of the operands rounded to bf16, summed in
 * fp32: against float64 of the rounded operands the error is fp32 accumulation over K terms,
 * |err| <= K * 2^-24 * sum |a||b| (< 1e-5 relative at K = 32 with |a|, |b| <= 1). */
static void test_bmm_bf16(void **state)
{
    (void)state;
    dpt_ctx *ctx = bf16_ctx_or_skip();
    bmm_case c = {2, 5, 32, 3, false, true, false, true};
    dpt_rng rng;
    dpt_rng_seed(&rng, 91);
    dpt_tensor *a = test_input(ctx, &rng, 3, (int64_t[]){2, 5, 32}, -1, 1);
    dpt_tensor *b = test_input(ctx, &rng, 3, (int64_t[]){2, 3, 32}, -1, 1);
    dpt_tensor *y = dpt_bmm(ctx, a, dpt_transpose_axes(ctx, b, -1, -2));
    double *da = malloc(320 * sizeof(double)), *db = malloc(192 * sizeof(double)), ref[30];
    for (int i = 0; i < 320; i++)
        da[i] = a->data[i];
    for (int i = 0; i < 192; i++)
        db[i] = b->data[i];
    bmm_ref((const double *const[]){da, db}, ref, &c);
    float got[30];
    dpt_tensor_copy_to_host(y, got);
    for (int i = 0; i < 30; i++)
        assert_true(fabs(got[i] - ref[i]) <= 32 * ldexp(1.0, -24) * 32 + 1e-6);
    free(da), free(db);
    dpt_tape_clear(ctx);
    dpt_tensor_free(a), dpt_tensor_free(b);
    dpt_ctx_free(ctx);
}

/* Attention under precision = bf16 (oneDNN: the products in bf16, softmax and its statistics
 * in fp32). The reference is float64 on the operands the kernel reads: q, k, v and dy rounded to
 * bf16. What the kernel rounds besides is each probability (before P V and P^T dO) and each
 * score gradient (before dS K and dS^T Q), each a relative 2^-9; D = dy . y reads fp32 dy and
 * the forward's y (the reference's D too: the backward's contract). The bound per element adds those roundings' worst cases (the fp32 sums
 * over at most T terms add T 2^-24 relative, three orders below) and is asserted with a factor
 * 2. A kernel that left the inputs in fp32 would pass too, so the forward must also differ from
 * the fp32 kernel's (it does by about 2^-9 relative where it takes the bf16 path). */
typedef struct attn16_ref {
    double *y, *g, *ytol, *gtol;
} attn16_ref;

static void attn16_reference(const float *qkv, const float *dyf, const float *y_kernel, int64_t B, int64_t T,
                             int64_t H, int64_t hs, bool causal, attn16_ref *r)
{
    int64_t C = H * hs, C3 = 3 * C;
    double scale = 1.0 / sqrt((double)hs), u = ldexp(1.0, -9);
    double *p = malloc((size_t)T * sizeof *p), *dp = malloc((size_t)T * sizeof *dp);
#define R16(x) ((double)dpt_f32_from_bf16(dpt_bf16_from_f32(x)))
#define Q(t, e) R16(qkv[(b * T + (t)) * C3 + h * hs + (e)])
#define K(t, e) R16(qkv[(b * T + (t)) * C3 + C + h * hs + (e)])
#define V(t, e) R16(qkv[(b * T + (t)) * C3 + 2 * C + h * hs + (e)])
#define DY(t, e) dyf[(b * T + (t)) * C + h * hs + (e)]
    memset(r->g, 0, (size_t)(B * T * C3) * sizeof *r->g);
    memset(r->gtol, 0, (size_t)(B * T * C3) * sizeof *r->gtol);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < T; i++) {
                int64_t seen = causal ? i + 1 : T;
                double m = -INFINITY, sum = 0, D = 0;
                for (int64_t j = 0; j < seen; j++) {
                    double d = 0;
                    for (int64_t e = 0; e < hs; e++)
                        d += Q(i, e) * K(j, e);
                    p[j] = d * scale;
                    m = fmax(m, p[j]);
                }
                for (int64_t j = 0; j < seen; j++)
                    sum += p[j] = exp(p[j] - m);
                for (int64_t j = 0; j < seen; j++)
                    p[j] /= sum;
                for (int64_t e = 0; e < hs; e++) {
                    double o = 0, mag = 0;
                    for (int64_t j = 0; j < seen; j++)
                        o += p[j] * V(j, e), mag += p[j] * fabs(V(j, e));
                    int64_t at = (b * T + i) * C + h * hs + e;
                    r->y[at] = o, r->ytol[at] = 2 * u * mag + 1e-7;
                    D += DY(i, e) * (double)y_kernel[at]; /* backward's D reads the forward's y */
                }
                for (int64_t j = 0; j < seen; j++) {
                    double d = 0, dmag = 0;
                    for (int64_t e = 0; e < hs; e++)
                        d += R16(DY(i, e)) * V(j, e), dmag += fabs(DY(i, e) * V(j, e));
                    dp[j] = d;
                    double ds = p[j] * (d - D) * scale;
                    /* the kernel's dS: dy rounded in dP, then dS itself rounded */
                    double ds_tol = p[j] * scale * u * dmag + u * fabs(ds);
                    for (int64_t e = 0; e < hs; e++) {
                        int64_t qi = (b * T + i) * C3 + h * hs + e, kj = (b * T + j) * C3 + C + h * hs + e,
                                vj = kj + C;
                        r->g[qi] += ds * K(j, e), r->gtol[qi] += 2 * ds_tol * fabs(K(j, e));
                        r->g[kj] += ds * Q(i, e), r->gtol[kj] += 2 * ds_tol * fabs(Q(i, e));
                        /* dV += P^T dO: P and dy rounded */
                        r->g[vj] += p[j] * R16(DY(i, e)), r->gtol[vj] += 2 * 2 * u * p[j] * fabs(DY(i, e));
                    }
                }
            }
#undef R16
#undef Q
#undef K
#undef V
#undef DY
    free(p), free(dp);
}

static void attention_bf16_on(dpt_ctx *ctx, const float *in, const float *w, int64_t B, int64_t T, int64_t H,
                              int64_t hs, bool causal, float *y_out, float *g_out)
{
    dpt_tensor *qkv = dpt_tensor_new(ctx, 3, (int64_t[]){B, T, 3 * H * hs});
    dpt_tensor *wt = dpt_tensor_new(ctx, 3, (int64_t[]){B, T, H * hs});
    memcpy(qkv->data, in, (size_t)qkv->numel * sizeof(float));
    memcpy(wt->data, w, (size_t)wt->numel * sizeof(float));
    qkv->requires_grad = true;
    dpt_tensor *y = dpt_attention(ctx, qkv, (int)H, causal);
    dpt_backward(ctx, dpt_sum(ctx, dpt_mul(ctx, y, wt))); /* dy = w */
    dpt_tensor_copy_to_host(y, y_out);
    dpt_tensor_copy_to_host(qkv->grad, g_out);
    dpt_tape_clear(ctx);
    dpt_tensor_free(qkv), dpt_tensor_free(wt);
}

static void test_attention_bf16(void **state)
{
    (void)state;
    dpt_ctx *ctx = bf16_ctx_or_skip();
    dpt_ctx *f32 = test_ctx(2, 3);
    /* T = 150: three 50-row tiles; T = 70 and 300 without the mask (one tile, two); hs 8 and 64 */
    attn_case cases[] = {{2, 150, 2, 8, true}, {1, 70, 3, 8, false}, {2, 5, 2, 4, true}, {1, 130, 2, 64, true},
                         {1, 300, 2, 8, false}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t B = cases[c].B, T = cases[c].T, H = cases[c].H, hs = cases[c].hs, n = B * T * H * hs;
        bool causal = cases[c].causal;
        dpt_rng rng;
        dpt_rng_seed(&rng, 77 + c);
        float *in = malloc(3 * (size_t)n * sizeof *in), *w = malloc((size_t)n * sizeof *w);
        for (int64_t i = 0; i < 3 * n; i++)
            in[i] = -2.0f + 4.0f * dpt_rng_uniform(&rng);
        for (int64_t i = 0; i < n; i++)
            w[i] = -1.0f + 2.0f * dpt_rng_uniform(&rng);
        float *y = malloc((size_t)n * sizeof *y), *g = malloc(3 * (size_t)n * sizeof *g);
        float *y32 = malloc((size_t)n * sizeof *y32), *g32 = malloc(3 * (size_t)n * sizeof *g32);
        attention_bf16_on(ctx, in, w, B, T, H, hs, causal, y, g);
        attention_bf16_on(f32, in, w, B, T, H, hs, causal, y32, g32);
        attn16_ref r = {malloc((size_t)n * sizeof(double)), malloc(3 * (size_t)n * sizeof(double)),
                        malloc((size_t)n * sizeof(double)), malloc(3 * (size_t)n * sizeof(double))};
        attn16_reference(in, w, y, B, T, H, hs, causal, &r);
        double differs = 0;
        for (int64_t i = 0; i < n; i++) {
            if (!(fabs(y[i] - r.y[i]) <= r.ytol[i]))
                fail_msg("bf16 attention B%lld T%lld H%lld hs%lld%s: y[%lld] %.9g, reference %.9g (bound %.3g)",
                         (long long)B, (long long)T, (long long)H, (long long)hs, causal ? " causal" : "",
                         (long long)i, y[i], r.y[i], r.ytol[i]);
            differs = fmax(differs, fabs(y[i] - y32[i]));
        }
        for (int64_t i = 0; i < 3 * n; i++)
            if (!(fabs(g[i] - r.g[i]) <= r.gtol[i] + 1e-6))
                fail_msg("bf16 attention B%lld T%lld H%lld hs%lld%s: dqkv[%lld] (%s) %.9g, reference %.9g (bound %.3g)",
                         (long long)B, (long long)T, (long long)H, (long long)hs, causal ? " causal" : "",
                         (long long)i, (const char *[]){"q", "k", "v"}[i / (H * hs) % 3], g[i], r.g[i],
                         r.gtol[i] + 1e-6);
        if (!(differs > 1e-5)) fail_msg("bf16 attention: the same as fp32's (%.3g): the bf16 path did not run", differs);
        free(in), free(w), free(y), free(g), free(y32), free(g32);
        free(r.y), free(r.g), free(r.ytol), free(r.gtol);
    }
    dpt_ctx_free(f32);
    dpt_ctx_free(ctx);
}

/* ---------------------------------------------------------------- cross-entropy over (B, T, V) */

typedef struct lm_case {
    int32_t targets[6];
    dpt_tensor *t;
} lm_case;

static void lm_setup(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    lm_case *c = u;
    c->t = dpt_tensor_new_dtype(ctx, DPT_I32, 2, (int64_t[]){2, 3});
    dpt_tensor_copy_from_host_i32(c->t, c->targets);
    (void)in;
}
static void lm_teardown(void *u)
{
    dpt_tensor_free(((lm_case *)u)->t);
}
static dpt_tensor *lm_build(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    return dpt_cross_entropy_targets(ctx, in[0], ((lm_case *)u)->t, 0.0f, DPT_IGNORE_INDEX);
}
static void lm_ref(const double *const *in, double *out, void *u)
{
    lm_case *c = u;
    double total = 0;
    int counted = 0;
    for (int r = 0; r < 6; r++) {
        if (c->targets[r] == DPT_IGNORE_INDEX) continue;
        const double *x = in[0] + r * 5;
        double m = x[0], z = 0;
        for (int k = 1; k < 5; k++)
            m = x[k] > m ? x[k] : m;
        for (int k = 0; k < 5; k++)
            z += exp(x[k] - m);
        total += m + log(z) - x[c->targets[r]];
        counted++;
    }
    out[0] = total / counted;
}

static void test_cross_entropy_tokens(void **state)
{
    (void)state;
    lm_case c = {{1, 4, DPT_IGNORE_INDEX, 0, 2, DPT_IGNORE_INDEX}, NULL};
    gradcheck gc = {.n_in = 1, .ndim = {3}, .shape = {{2, 3, 5}}, .lo = -2, .hi = 2, .setup = lm_setup,
                    .teardown = lm_teardown, .build = lm_build, .reference = lm_ref, .user = &c, .fwd_rtol = 1e-6,
                    .grad_rtol = 1e-4, .grad_atol = 1e-6};
    run_gradcheck("cross_entropy (B, T, V) with ignored targets", &gc, 950);
}

/* ---------------------------------------------------------------- views into every op, and expand
 * A researcher's forward passes views (a permuted patch grid, a narrowed class token, a slice
 * of logits) to any op: each takes them as it takes dense tensors (ops whose kernels read
 * dense memory copy them first), with gradients flowing back to the viewed tensor. */

enum { VO_RESHAPE, VO_RELU, VO_MEAN, VO_TRANSPOSE, VO_MATMUL, VO_MAXPOOL, VO_COUNT };

/* x (2, 3, 4, 5) seen as v = permute(x, 0, 1, 3, 2): (2, 3, 5, 4), strided */
static double perm_at(const double *x, int64_t n, int64_t c, int64_t w, int64_t h)
{
    return x[((n * 3 + c) * 4 + h) * 5 + w];
}

static dpt_tensor *viewop_build(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    int kind = *(int *)u;
    dpt_tensor *v = dpt_permute(ctx, in[0], (int[]){0, 1, 3, 2});
    /* (6, 20) narrowed to columns [2, 12): rows 20 apart */
    dpt_tensor *cols = dpt_narrow(ctx, dpt_reshape(ctx, in[0], 2, (int64_t[]){6, 20}), 1, 2, 10);
    switch (kind) {
    case VO_RESHAPE: return dpt_reshape(ctx, v, 2, (int64_t[]){6, -1});
    case VO_RELU: return dpt_relu(ctx, v);
    case VO_MEAN: return dpt_mean(ctx, v);
    case VO_TRANSPOSE: return dpt_transpose(ctx, cols);
    case VO_MATMUL: return dpt_matmul(ctx, cols, in[1]);
    default: return dpt_maxpool2d(ctx, v, 2, 2, 0);
    }
}

static void viewop_ref(const double *const *in, double *out, void *u)
{
    int kind = *(int *)u;
    const double *x = in[0];
    if (kind == VO_RESHAPE || kind == VO_RELU || kind == VO_MEAN) {
        double sum = 0.0;
        int64_t j = 0;
        for (int64_t n = 0; n < 2; n++)
            for (int64_t c = 0; c < 3; c++)
                for (int64_t w = 0; w < 5; w++)
                    for (int64_t h = 0; h < 4; h++, j++) {
                        double v = perm_at(x, n, c, w, h);
                        if (kind == VO_MEAN) sum += v;
                        else out[j] = kind == VO_RELU ? (v > 0 ? v : 0) : v;
                    }
        if (kind == VO_MEAN) out[0] = sum / 120.0;
    } else if (kind == VO_TRANSPOSE) { /* (10, 6): out[i][r] = x2[r][2 + i] */
        for (int64_t i = 0; i < 10; i++)
            for (int64_t r = 0; r < 6; r++)
                out[i * 6 + r] = x[r * 20 + 2 + i];
    } else if (kind == VO_MATMUL) { /* (6, 10) x (10, 3) */
        for (int64_t r = 0; r < 6; r++)
            for (int64_t k = 0; k < 3; k++) {
                double acc = 0.0;
                for (int64_t i = 0; i < 10; i++)
                    acc += x[r * 20 + 2 + i] * in[1][i * 3 + k];
                out[r * 3 + k] = acc;
            }
    } else { /* 2x2 max windows of v (5, 4) -> (2, 2), the last row of v dropped */
        for (int64_t n = 0; n < 2; n++)
            for (int64_t c = 0; c < 3; c++)
                for (int64_t oy = 0; oy < 2; oy++)
                    for (int64_t ox = 0; ox < 2; ox++) {
                        double m = -INFINITY;
                        for (int64_t dy = 0; dy < 2; dy++)
                            for (int64_t dx = 0; dx < 2; dx++)
                                m = fmax(m, perm_at(x, n, c, 2 * oy + dy, 2 * ox + dx));
                        out[((n * 3 + c) * 2 + oy) * 2 + ox] = m;
                    }
    }
}

static void test_views_into_ops(void **state)
{
    (void)state;
    static const char *const names[] = {"reshape of a permuted view", "relu of a view", "mean of a view",
                                        "transpose of a narrowed matrix", "matmul of a narrowed matrix",
                                        "maxpool of a permuted view"};
    for (int k = 0; k < VO_COUNT; k++) {
        gradcheck gc = {.n_in = k == VO_MATMUL ? 2 : 1, .ndim = {4, 2}, .shape = {{2, 3, 4, 5}, {10, 3}},
                        .lo = -1, .hi = 1, .build = viewop_build, .reference = viewop_ref, .user = &k,
                        .fwd_rtol = 1e-6, .grad_rtol = 1e-4, .grad_atol = 1e-6};
        run_gradcheck(names[k], &gc, 1000 + (uint64_t)k);
    }
}

/* Layers whose kernels read dense memory give a view's input the same bits as its dense copy,
 * forward and backward: conv, batch norm, pooling, dropout, cross-entropy of sliced logits. */
static dpt_tensor *layers_on(dpt_ctx *ctx, dpt_conv2d *conv, dpt_batchnorm *bn, dpt_tensor *x, bool dense,
                             const int32_t *labels)
{
#define VIEW(t) (dense ? dpt_contiguous(ctx, (t)) : (t)) /* the dense run copies every view itself */
    dpt_tensor *h = dpt_conv2d_forward(ctx, conv, VIEW(dpt_permute(ctx, x, (int[]){0, 1, 3, 2}))); /* (2, 4, 6, 5) */
    h = VIEW(dpt_narrow(ctx, dpt_permute(ctx, h, (int[]){0, 1, 3, 2}), 3, 1, 5));               /* (2, 4, 5, 5) */
    dpt_tensor *b = dpt_batchnorm_forward(ctx, bn, h, true);
    dpt_tensor *p = dpt_avgpool2d(ctx, VIEW(dpt_slice(ctx, b, 2, 0, 5, 2)), 1, 1, 0); /* rows 0, 2, 4 */
    p = dpt_maxpool2d(ctx, VIEW(dpt_permute(ctx, p, (int[]){0, 1, 3, 2})), 1, 1, 0);  /* (2, 4, 5, 3) */
    dpt_tensor *g = dpt_global_avgpool(ctx, VIEW(dpt_narrow(ctx, p, 2, 1, 3)));      /* (2, 4) */
    g = dpt_transpose_axes(ctx, dpt_reshape(ctx, g, 3, (int64_t[]){2, 2, 2}), 0, 2);
    dpt_tensor *d = dpt_dropout(ctx, VIEW(g), 0.3f, true);
    dpt_tensor *logits = VIEW(dpt_narrow(ctx, dpt_reshape(ctx, d, 2, (int64_t[]){2, 4}), 1, 1, 3));
    return dpt_cross_entropy(ctx, logits, labels, 0.1f);
#undef VIEW
}

static dpt_tensor *no_forward(dpt_model *model, dpt_ctx *ctx, dpt_tensor *x)
{
    (void)model, (void)ctx;
    return x;
}

static void test_views_into_layers(void **state)
{
    (void)state;
    int32_t labels[2] = {2, 0};
    for (int variant = 0; variant < TEST_VARIANTS; variant++) {
        test_variant(variant);
        float loss[2], gx[2][2 * 4 * 5 * 6], gw[2][4 * 4 * 9];
        for (int dense = 0; dense < 2; dense++) {
            dpt_ctx *ctx = test_ctx(1, 77);
            dpt_rng rng;
            dpt_rng_seed(&rng, 78);
            dpt_model *m = dpt_model_new(ctx, "views", no_forward);
            dpt_shape3 s = {4, 6, 5};
            dpt_conv2d *conv = dpt_conv2d_new(m, "conv", &s, 4, 3, 1, 1, 1, 1, true);
            dpt_batchnorm *bn = dpt_batchnorm_new(m, "bn", &(dpt_shape3){4, 5, 5}, 0.1f, 1e-5f, true, false);
            dpt_tensor *x = test_input(ctx, &rng, 4, (int64_t[]){2, 4, 5, 6}, -1, 1);
            dpt_tensor *l = layers_on(ctx, conv, bn, x, dense, labels);
            dpt_backward(ctx, l);
            loss[dense] = dpt_tensor_item(l);
            memcpy(gx[dense], x->grad->data, sizeof gx[dense]);
            memcpy(gw[dense], dpt_model_param_at(m, 0)->grad->data, sizeof gw[dense]);
            if (!(isfinite(loss[dense]) && loss[dense] > 0)) fail_msg("%s: loss %g", test_kernels_name(), loss[dense]);
            dpt_tape_clear(ctx);
            dpt_tensor_free(x);
            dpt_model_free(m);
            dpt_ctx_free(ctx);
        }
        if (memcmp(&loss[0], &loss[1], sizeof loss[0]) || memcmp(gx[0], gx[1], sizeof gx[0]) ||
            memcmp(gw[0], gw[1], sizeof gw[0]))
            fail_msg("%s: views and their dense copies differ (loss %.9g vs %.9g)", test_kernels_name(), loss[0],
                     loss[1]);
    }
    test_variant(-1);
}

typedef struct expand_case {
    int ndim_in, ndim_out;
    int64_t in[4], out[4];
} expand_case;

static dpt_tensor *expand_build(dpt_ctx *ctx, dpt_tensor **in, void *u)
{
    expand_case *c = u;
    return dpt_expand(ctx, in[0], c->ndim_out, c->out);
}

static void expand_ref(const double *const *in, double *out, void *u)
{
    expand_case *c = u;
    int64_t ys[4], xs[4], n = numel_of(c->ndim_out, c->out);
    strides_of(c->ndim_out, c->out, ys);
    strides_of(c->ndim_in, c->in, xs);
    for (int64_t j = 0; j < n; j++) {
        int64_t off = 0;
        for (int d = 0; d < c->ndim_out; d++) {
            int di = d - (c->ndim_out - c->ndim_in);
            int64_t i = j / ys[d] % c->out[d];
            if (di >= 0 && c->in[di] != 1) off += i * xs[di];
        }
        out[j] = in[0][off];
    }
}

static void test_expand(void **state)
{
    (void)state;
    expand_case cases[] = {
        {3, 3, {1, 1, 6}, {4, 1, 6}},       /* a class token to the batch */
        {2, 4, {3, 1}, {2, 5, 3, 4}},       /* new leading axes and a stretched last one */
        {3, 3, {2, 1, 3}, {2, 4, 3}},       /* the middle axis */
        {2, 2, {3, 4}, {3, 4}},             /* nothing to stretch: a copy */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        gradcheck_copy("expand", cases[i].ndim_in, cases[i].in, expand_build, expand_ref, &cases[i], 1100 + i);
    /* -1 keeps an axis; a view expands as its data says */
    dpt_ctx *ctx = test_ctx(1, 3);
    dpt_rng rng;
    dpt_rng_seed(&rng, 4);
    dpt_tensor *x = test_input(ctx, &rng, 2, (int64_t[]){3, 1}, -1, 1);
    dpt_tensor *t = dpt_transpose_axes(ctx, x, 0, 1); /* (1, 3) */
    dpt_tensor *y = dpt_expand(ctx, t, 3, (int64_t[]){2, 2, -1});
    assert_int_equal(dpt_tensor_dim(y, 2), 3);
    float host[12];
    dpt_tensor_copy_to_host(y, host);
    for (int j = 0; j < 12; j++)
        assert_true(host[j] == x->data[j % 3]);
    dpt_tape_clear(ctx);
    dpt_tensor_free(x);
    dpt_ctx_free(ctx);
}

/* ---------------------------------------------------------------- attention in query chunks
 * attn_chunked.h's orchestration (the CUDA backend's attention: GEMMs over chunks of query rows,
 * causal chunks skipping the keys past their last row) run here with naive primitives, for every
 * chunk size, against dpt_attention's forward and gradients (gradient-checked above). */

static void cg_gemm(void *c, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                    int64_t lda, int64_t sa, const float *B, int64_t ldb, int64_t sb, float beta, float *C,
                    int64_t ldc, int64_t sc, int64_t batch)
{
    (void)c;
    for (int64_t i = 0; i < batch; i++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                double acc = 0.0;
                for (int64_t k = 0; k < K; k++)
                    acc += (double)(ta ? A[i * sa + k * lda + m] : A[i * sa + m * lda + k]) *
                           (tb ? B[i * sb + n * ldb + k] : B[i * sb + k * ldb + n]);
                float *out = &C[i * sc + m * ldc + n];
                *out = beta == 0.0f ? alpha * (float)acc : alpha * (float)acc + beta * *out; /* beta 0: not read */
            }
}

static void cg_rows(float *S, int64_t H, int64_t Tq, int64_t Tk, int64_t q0, bool causal, float *lse_out,
                    const float *lse_in, int64_t T)
{
    for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < Tq; i++) {
            int64_t qi = q0 + i, n = causal ? qi + 1 : Tk;
            float *row = S + (h * Tq + i) * Tk, m = -INFINITY, sum = 0.0f;
            if (lse_out) {
                for (int64_t j = 0; j < n; j++)
                    m = fmaxf(m, row[j]);
                for (int64_t j = 0; j < n; j++)
                    sum += expf(row[j] - m);
                lse_out[h * T + qi] = m + logf(sum);
            }
            float L = lse_out ? lse_out[h * T + qi] : lse_in[h * T + qi];
            for (int64_t j = 0; j < Tk; j++)
                row[j] = j < n ? expf(row[j] - L) : 0.0f;
        }
}
static void cg_softmax(void *c, float *S, int64_t H, int64_t Tq, int64_t Tk, int64_t q0, bool causal, float *lse,
                       int64_t T)
{
    (void)c;
    cg_rows(S, H, Tq, Tk, q0, causal, lse, NULL, T);
}
static void cg_probs(void *c, float *S, int64_t H, int64_t Tq, int64_t Tk, int64_t q0, bool causal, const float *lse,
                     int64_t T)
{
    (void)c;
    cg_rows(S, H, Tq, Tk, q0, causal, NULL, lse, T);
}
static void cg_dscores(void *c, const float *P, float *G, int64_t H, int64_t Tq, int64_t Tk, int64_t q0,
                       const float *D, int64_t T, float scale)
{
    (void)c;
    for (int64_t r = 0; r < H * Tq; r++)
        for (int64_t j = 0; j < Tk; j++)
            G[r * Tk + j] = P[r * Tk + j] * (G[r * Tk + j] - D[r / Tq * T + q0 + r % Tq]) * scale;
}

static void test_attention_chunked(void **state)
{
    (void)state;
    enum { B = 2, T = 7, H = 2, HS = 4, C = H * HS, N = B * T * 3 * C };
    static const dpt_attn_prims prims = {cg_gemm, cg_softmax, cg_probs, cg_dscores};
    for (int causal = 0; causal < 2; causal++) {
        dpt_ctx *ctx = test_ctx(1, 21);
        dpt_rng rng;
        dpt_rng_seed(&rng, 22 + (uint64_t)causal);
        dpt_tensor *qkv = test_input(ctx, &rng, 3, (int64_t[]){B, T, 3 * C}, -2, 2);
        dpt_tensor *w = test_input(ctx, &rng, 3, (int64_t[]){B, T, C}, -1, 1); /* dL/dy */
        dpt_tensor *y = dpt_attention(ctx, qkv, H, causal);
        dpt_backward(ctx, dpt_sum(ctx, dpt_mul(ctx, y, w)));
        float want_y[B * T * C];
        dpt_tensor_copy_to_host(y, want_y);
        const float *want_g = qkv->grad->data;
        for (int64_t chunk = 1; chunk <= T; chunk++) {
            float S[H * T * T], P[H * T * T], G[H * T * T], got_y[B * T * C], lse[B * H * T], D[B * H * T], dqkv[N];
            dpt_attn_chunked_fwd(&prims, NULL, qkv->data, B, T, H, HS, causal, chunk, S, got_y, lse);
            for (int i = 0; i < B * T * C; i++)
                if (!(fabsf(got_y[i] - want_y[i]) <= 1e-5f + 1e-5f * fabsf(want_y[i])))
                    fail_msg("causal %d, chunks of %lld rows: y[%d] %.9g, dpt_attention %.9g", causal, (long long)chunk,
                             i, (double)got_y[i], (double)want_y[i]);
            for (int64_t b = 0; b < B; b++) /* D = rowdot(dY, Y) per head */
                for (int64_t h = 0; h < H; h++)
                    for (int64_t i = 0; i < T; i++) {
                        float d = 0.0f;
                        for (int64_t c = 0; c < HS; c++)
                            d += got_y[(b * T + i) * C + h * HS + c] * w->data[(b * T + i) * C + h * HS + c];
                        D[(b * H + h) * T + i] = d;
                    }
            for (int i = 0; i < N; i++)
                dqkv[i] = 1.0f; /* it adds into what is there */
            dpt_attn_chunked_bwd(&prims, NULL, qkv->data, w->data, lse, D, B, T, H, HS, causal, chunk, P, G, dqkv);
            for (int i = 0; i < N; i++)
                if (!(fabsf(dqkv[i] - 1.0f - want_g[i]) <= 2e-5f + 1e-4f * fabsf(want_g[i])))
                    fail_msg("causal %d, chunks of %lld rows: dqkv[%d] %.9g, dpt_attention's %.9g", causal,
                             (long long)chunk, i, (double)(dqkv[i] - 1.0f), (double)want_g[i]);
        }
        dpt_tape_clear(ctx);
        dpt_tensor_free(qkv), dpt_tensor_free(w);
        dpt_ctx_free(ctx);
    }
    /* chunks: all of a short sequence; 64 to 256 rows within the scratch budget */
    assert_int_equal(dpt_attn_chunk_rows(7, 2, 16 << 20), 7);
    assert_int_equal(dpt_attn_chunk_rows(1024, 12, 16 << 20), 256);
    assert_int_equal(dpt_attn_chunk_rows(8192, 12, 16 << 20), 170);
    assert_int_equal(dpt_attn_chunk_rows(1 << 20, 16, 16 << 20), 64);
}

/* ---------------------------------------------------------------- list ops and determinism */

static void test_foreach(void **state)
{
    (void)state;
    dpt_ctx *ctx = test_ctx(2, 1);
    dpt_rng rng;
    dpt_rng_seed(&rng, 5);
    dpt_tensor *y[2], *x[2];
    int64_t sizes[2] = {7, 70000}; /* one small, one above the threads' threshold */
    float *want[2];
    for (int i = 0; i < 2; i++) {
        y[i] = test_input(ctx, &rng, 1, &sizes[i], -2, 2);
        x[i] = test_input(ctx, &rng, 1, &sizes[i], -2, 2);
        want[i] = malloc((size_t)sizes[i] * sizeof(float));
        for (int64_t j = 0; j < sizes[i]; j++)
            want[i][j] = 0.5f * x[i]->data[j] + -3.0f * y[i]->data[j];
    }
    dpt_foreach_axpby(ctx, 2, y, 0.5f, x, -3.0f);
    for (int i = 0; i < 2; i++)
        for (int64_t j = 0; j < sizes[i]; j++)
            assert_true(y[i]->data[j] == want[i][j]);
    dpt_foreach_unary(ctx, 2, y, DPT_UNARY_SIGN, y);
    for (int i = 0; i < 2; i++)
        for (int64_t j = 0; j < sizes[i]; j++)
            assert_true(y[i]->data[j] == (float)((want[i][j] > 0) - (want[i][j] < 0)));
    dpt_foreach_axpby(ctx, 1, x, 2.0f, y, 0.0f); /* beta 0: x's old values are not read */
    for (int64_t j = 0; j < sizes[0]; j++)
        assert_true(x[0]->data[j] == 2.0f * y[0]->data[j]);
    for (int i = 0; i < 2; i++)
        dpt_tensor_free(y[i]), dpt_tensor_free(x[i]), free(want[i]);
    dpt_ctx_free(ctx);
}

/* A reduction's and the embedding gradient's bits do not depend on the thread count. */
static void grads_on(int threads, float *out_sum, float *out_emb)
{
    dpt_ctx *ctx = test_ctx(threads, 9);
    dpt_rng rng;
    dpt_rng_seed(&rng, 17);
    dpt_tensor *x = test_input(ctx, &rng, 2, (int64_t[]){300, 257}, -1, 1);
    dpt_tensor *w = test_input(ctx, &rng, 2, (int64_t[]){50, 130}, -1, 1);
    int32_t ids[600];
    for (int i = 0; i < 600; i++)
        ids[i] = (int32_t)dpt_rng_below(&rng, 50);
    dpt_tensor *it = dpt_tensor_new_dtype(ctx, DPT_I32, 1, (int64_t[]){600});
    dpt_tensor_copy_from_host_i32(it, ids);
    dpt_tensor *b = test_input(ctx, &rng, 1, (int64_t[]){257}, -1, 1);
    dpt_tensor *y = dpt_add(ctx, x, b); /* b's gradient sums over 300 rows */
    dpt_tensor *e = dpt_embedding(ctx, w, it);
    dpt_backward(ctx, dpt_add(ctx, dpt_sum(ctx, dpt_mul(ctx, y, y)), dpt_sum(ctx, dpt_mul(ctx, e, e))));
    memcpy(out_sum, b->grad->data, 257 * sizeof(float));
    memcpy(out_emb, w->grad->data, 50 * 130 * sizeof(float));
    dpt_tape_clear(ctx);
    dpt_tensor_free(x), dpt_tensor_free(w), dpt_tensor_free(it), dpt_tensor_free(b);
    dpt_ctx_free(ctx);
}

static void test_same_bits_any_threads(void **state)
{
    (void)state;
    static float s1[257], s2[257], e1[6500], e2[6500];
    grads_on(1, s1, e1);
    grads_on(2, s2, e2);
    assert_memory_equal(s1, s2, sizeof s1);
    assert_memory_equal(e1, e2, sizeof e1);
}

/* ---------------------------------------------------------------- misuse refused by name */

/* Each case ends its child with the library's message (exit by abort), never a crash, a read
 * outside a tensor or a silent NaN: out-of-range ids and targets on the CPU (PyTorch's
 * IndexError; a GPU writes NaN rows instead), sizes whose product overflows, an empty last
 * dimension, a range past the end. */
static dpt_tensor *ids_of(dpt_ctx *ctx, int64_t n, const int32_t *v)
{
    dpt_tensor *t = dpt_tensor_new_dtype(ctx, DPT_I32, 1, (int64_t[]){n});
    dpt_tensor_copy_from_host_i32(t, v);
    return t;
}
static void misuse_embedding_id(void)
{
    dpt_ctx *ctx = test_ctx(1, 1);
    dpt_embedding(ctx, dpt_tensor_new(ctx, 2, (int64_t[]){4, 3}), ids_of(ctx, 3, (int32_t[]){0, 3, 4}));
}
static void misuse_embedding_negative(void)
{
    dpt_ctx *ctx = test_ctx(1, 1);
    dpt_embedding(ctx, dpt_tensor_new(ctx, 2, (int64_t[]){4, 3}), ids_of(ctx, 2, (int32_t[]){-1, 0}));
}
static void misuse_target(void)
{
    dpt_ctx *ctx = test_ctx(1, 1);
    dpt_tensor *logits = dpt_tensor_new(ctx, 3, (int64_t[]){1, 3, 5});
    dpt_cross_entropy_targets(ctx, logits, ids_of(ctx, 3, (int32_t[]){DPT_IGNORE_INDEX, 4, 5}), 0.0f,
                              DPT_IGNORE_INDEX);
}
static void misuse_reshape_overflow(void)
{
    dpt_ctx *ctx = test_ctx(1, 1);
    dpt_reshape(ctx, dpt_tensor_new(ctx, 1, (int64_t[]){12}), 3, (int64_t[]){1LL << 40, 1LL << 40, -1});
}
static void misuse_reshape_negative(void)
{
    dpt_ctx *ctx = test_ctx(1, 1);
    dpt_reshape(ctx, dpt_tensor_new(ctx, 1, (int64_t[]){12}), 2, (int64_t[]){-3, -4});
}
static void misuse_layer_norm_empty(void)
{
    dpt_ctx *ctx = test_ctx(1, 1);
    dpt_layer_norm(ctx, dpt_tensor_new(ctx, 2, (int64_t[]){3, 0}), NULL, NULL, 1e-5f);
}
static void misuse_narrow_past_end(void)
{
    dpt_ctx *ctx = test_ctx(1, 1);
    dpt_narrow(ctx, dpt_tensor_new(ctx, 2, (int64_t[]){3, 4}), 1, INT64_MAX, 2);
}

static void test_misuse_refused(void **state)
{
    (void)state;
    struct {
        void (*fn)(void);
        const char *msg;
    } cases[] = {
        {misuse_embedding_id, "embedding: id 4 at position 2 of 3 is outside [0, 4)"},
        {misuse_embedding_negative, "embedding: id -1 at position 0 of 2 is outside [0, 4)"},
        {misuse_target, "cross_entropy: label 5 at position 2 of 3 is outside [0, 5) and is not the ignore index -100"},
        {misuse_reshape_overflow, "to (1099511627776, 1099511627776, -1): more elements than int64 counts"},
        {misuse_reshape_negative, "reshape of (12) to (-3, -4): sizes are >= 0, with at most one -1"},
        {misuse_layer_norm_empty, "layer_norm of (3, 0) needs a last dimension of at least 1"},
        {misuse_narrow_past_end, "narrow of 2 from 9223372036854775807 along axis 1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) /* the library's abort, its message */
        assert_child_ends(cases[i].fn, 128 + SIGABRT, "dptrain: fatal: ", cases[i].msg);
    /* the ignore index itself is no error: a row of it counts nothing */
    dpt_ctx *ctx = test_ctx(1, 1);
    dpt_tensor *logits = dpt_tensor_new(ctx, 3, (int64_t[]){1, 2, 5});
    dpt_tensor *targets = ids_of(ctx, 2, (int32_t[]){DPT_IGNORE_INDEX, 2});
    dpt_tensor *loss = dpt_cross_entropy_targets(ctx, logits, targets, 0.0f, DPT_IGNORE_INDEX);
    assert_float_equal(dpt_tensor_item(loss), logf(5.0f), 1e-6); /* zero logits: log 5 for the one row */
    dpt_tape_clear(ctx);
    dpt_tensor_free(logits), dpt_tensor_free(targets);
    dpt_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_normal_order),
        cmocka_unit_test(test_permute),
        cmocka_unit_test(test_permute_large),
        cmocka_unit_test(test_slices_and_concat),
        cmocka_unit_test(test_broadcasting),
        cmocka_unit_test(test_rotary),
        cmocka_unit_test(test_rows),
        cmocka_unit_test(test_unary),
        cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_layer_norm),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_attention_threads_and_memory),
        cmocka_unit_test(test_attention_onednn_native),
        cmocka_unit_test(test_attention_chunked),
        cmocka_unit_test(test_bmm),
        cmocka_unit_test(test_bmm_bf16),
        cmocka_unit_test(test_attention_bf16),
        cmocka_unit_test(test_cross_entropy_tokens),
        cmocka_unit_test(test_unary_extremes),
        cmocka_unit_test(test_add_scalar_rmsnorm),
        cmocka_unit_test(test_views_into_ops),
        cmocka_unit_test(test_views_into_layers),
        cmocka_unit_test(test_expand),
        cmocka_unit_test(test_foreach),
        cmocka_unit_test(test_misuse_refused),
        cmocka_unit_test(test_same_bits_any_threads),
    };
    return cmocka_run_group_tests_name("tensor_ops", tests, NULL, NULL);
}
