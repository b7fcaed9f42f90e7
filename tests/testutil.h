/* testutil.h: shared helpers for the cmocka tests (contexts, random data, a gradient checker
 * against double-precision reference implementations, running ./train). */
#ifndef DPT_TESTUTIL_H
#define DPT_TESTUTIL_H

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "dpt.h"
#include "runtime/rng.h"
#include "runtime/tensor.h"

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"

/* The CPU kernels the contexts below get: tests that cover both settings loop over
 * DPT_CPU_KERNELS_ONEDNN and DPT_CPU_KERNELS_NATIVE and set this. */
static dpt_cpu_kernels test_kernels = DPT_CPU_KERNELS_DEFAULT;
/* [train] memory_format = nhwc for the contexts below (oneDNN only). */
static bool test_channels_last = false;

static inline const char *test_kernels_name(void)
{
    return test_kernels == DPT_CPU_KERNELS_NATIVE ? "native" : test_channels_last ? "onednn nhwc" : "onednn";
}

/* The three ways the CPU runs a layer: oneDNN (blocked layouts), oneDNN channels-last, native
 * (NCHW). Tests that cover them all loop v over [0, TEST_VARIANTS) and call this; -1 resets. */
enum { TEST_VARIANTS = 3 };
static inline void test_variant(int v)
{
    test_kernels = v < 0 ? DPT_CPU_KERNELS_DEFAULT : v == 2 ? DPT_CPU_KERNELS_NATIVE : DPT_CPU_KERNELS_ONEDNN;
    test_channels_last = v == 1;
}

/* The defaults with n "section.key=value" lines set (a failure names the line). */
static inline dpt_config *test_config(const char *const *sets, int n)
{
    dpt_config *cfg = dpt_config_defaults();
    dpt_error err;
    for (int i = 0; i < n; i++)
        if (!dpt_config_set(cfg, sets[i], &err)) fail_msg("%s", err.msg);
    return cfg;
}

static inline dpt_ctx *test_ctx(int threads, uint64_t seed)
{
    dpt_error err;
    dpt_ctx_options opt = {
        .device = {DPT_DEVICE_CPU, 0},
        .threads = threads,
        .seed = seed,
        .cpu_kernels = test_kernels,
        .channels_last = test_channels_last,
    };
    dpt_ctx *ctx = dpt_ctx_new(&opt, &err);
    if (!ctx) fail_msg("dpt_ctx_new: %s", err.msg);
    return ctx;
}

/* A persistent leaf tensor with values U(lo, hi) that asks for a gradient. */
static inline dpt_tensor *test_input(dpt_ctx *ctx, dpt_rng *rng, int ndim, const int64_t *shape, float lo,
                                     float hi)
{
    dpt_tensor *t = dpt_tensor_new(ctx, ndim, shape);
    for (int64_t i = 0; i < t->numel; i++)
        t->data[i] = lo + (hi - lo) * dpt_rng_uniform(rng);
    t->requires_grad = true;
    return t;
}

/* |a - b| <= atol + rtol * |b| for every element, with a message naming the first miss. */
static inline void assert_close_d(const char *what, const double *a, const double *b, int64_t n, double rtol,
                                  double atol)
{
    for (int64_t i = 0; i < n; i++) {
        double tol = atol + rtol * fabs(b[i]);
        if (!(fabs(a[i] - b[i]) <= tol))
            fail_msg("%s[%lld]: got %.9g, expected %.9g (tol %.3g)", what, (long long)i, a[i], b[i], tol);
    }
}

/* ---------------------------------------------------------------- gradient check
 * An op under test is given as (1) a builder that records it on the tape from input tensors
 * and (2) an independent double-precision reference forward. The checker asserts that the
 * f32 forward matches the reference, and that backward's gradient of L = sum(out * R) (R
 * random) matches central finite differences of the double reference. */

#define GC_MAX_IN 6

typedef struct gradcheck {
    int n_in;
    int ndim[GC_MAX_IN];
    int64_t shape[GC_MAX_IN][DPT_MAX_DIMS];
    float lo, hi;            /* input value range */
    bool no_grad[GC_MAX_IN]; /* inputs that are not differentiated (e.g. labels-like) */
    /* Optional: create some inputs itself (e.g. a layer's parameters); others are random. */
    void (*setup)(dpt_ctx *ctx, dpt_tensor **in, void *user);
    void (*teardown)(void *user);
    dpt_tensor *(*build)(dpt_ctx *ctx, dpt_tensor **in, void *user);
    /* out_n: number of outputs; writes out[out_n] from in (double) */
    void (*reference)(const double *const *in, double *out, void *user);
    void *user;
    double fwd_rtol, grad_rtol, grad_atol;
    int threads; /* 0 = 1 */
} gradcheck;

static inline int64_t gc_numel(const gradcheck *gc, int i)
{
    int64_t n = 1;
    for (int d = 0; d < gc->ndim[i]; d++)
        n *= gc->shape[i][d];
    return n;
}

static inline double gc_ref_loss(const gradcheck *gc, double *const *in, const double *weights, double *out,
                                 int64_t out_n)
{
    gc->reference((const double *const *)in, out, gc->user);
    double loss = 0.0;
    for (int64_t j = 0; j < out_n; j++)
        loss += out[j] * weights[j];
    return loss;
}

/* Central differences are a property of the float64 reference at its inputs, not of the backend
 * or the thread count a case runs under: a case repeated over the kernel variants and thread
 * counts (the same seed, so the same inputs) differentiates the reference once. Keyed by the
 * reference function, every input and weight value and the reference's output there (which
 * tells cases whose settings differ but whose inputs agree apart); the analytic gradients are
 * still compared on every run. */
typedef struct gc_cached {
    void (*reference)(const double *const *, double *, void *);
    uint64_t key;
    int n_in;
    int64_t n[GC_MAX_IN];
    double *numeric[GC_MAX_IN];
} gc_cached;
enum { GC_CACHE = 32 };
static gc_cached gc_cache[GC_CACHE];
static int gc_cache_next;

static inline uint64_t gc_hash(uint64_t h, const double *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint64_t bits;
        memcpy(&bits, &v[i], sizeof bits);
        h = (h ^ bits) * 0x100000001b3ULL;
        h ^= h >> 29;
    }
    return h;
}

static inline gc_cached *gc_cache_find(const gradcheck *gc, uint64_t key, dpt_tensor *const *in)
{
    for (int c = 0; c < GC_CACHE; c++) {
        gc_cached *e = &gc_cache[c];
        bool same = e->reference == gc->reference && e->key == key && e->n_in == gc->n_in;
        for (int i = 0; same && i < gc->n_in; i++)
            same = e->n[i] == in[i]->numel && (gc->no_grad[i] || e->numeric[i]);
        if (same) return e;
    }
    return NULL;
}

static inline void run_gradcheck(const char *name, const gradcheck *gc, uint64_t seed)
{
    dpt_ctx *ctx = test_ctx(gc->threads ? gc->threads : 1, seed);
    dpt_rng rng;
    dpt_rng_seed(&rng, seed);
    dpt_tensor *in[GC_MAX_IN];
    double *din[GC_MAX_IN];
    memset(in, 0, sizeof in);
    if (gc->setup) gc->setup(ctx, in, gc->user);
    for (int i = 0; i < gc->n_in; i++) {
        if (!in[i]) {
            in[i] = test_input(ctx, &rng, gc->ndim[i], gc->shape[i], gc->lo, gc->hi);
            in[i]->requires_grad = !gc->no_grad[i];
        }
        din[i] = malloc((size_t)in[i]->numel * sizeof(double));
        for (int64_t j = 0; j < in[i]->numel; j++)
            din[i][j] = in[i]->data[j];
    }
    dpt_tensor *out = gc->build(ctx, in, gc->user);
    int64_t out_n = out->numel;
    dpt_tensor *weights = dpt_tensor_new(ctx, out->ndim, out->shape);
    double *dweights = malloc((size_t)out_n * sizeof(double));
    for (int64_t j = 0; j < out_n; j++) {
        weights->data[j] = 2.0f * dpt_rng_uniform(&rng) - 1.0f;
        dweights[j] = weights->data[j];
    }
    /* forward against the reference */
    double *ref_out = malloc((size_t)out_n * sizeof(double)), *got = malloc((size_t)out_n * sizeof(double));
    gc_ref_loss(gc, din, dweights, ref_out, out_n);
    float *out_host = malloc((size_t)out_n * sizeof(float)); /* in NCHW, whatever the layout */
    dpt_tensor_copy_to_host(out, out_host);
    for (int64_t j = 0; j < out_n; j++)
        got[j] = out_host[j];
    free(out_host);
    char what[160];
    snprintf(what, sizeof what, "%s forward", name);
    assert_close_d(what, got, ref_out, out_n, gc->fwd_rtol, 1e-6);
    /* backward */
    dpt_tensor *loss = dpt_sum(ctx, dpt_mul(ctx, out, weights));
    dpt_backward(ctx, loss);
    uint64_t key = gc_hash(gc_hash(0xcbf29ce484222325ULL, dweights, out_n), ref_out, out_n);
    for (int i = 0; i < gc->n_in; i++)
        key = gc_hash(key, din[i], in[i]->numel);
    gc_cached *cached = gc_cache_find(gc, key, in), *fresh = NULL;
    if (!cached) { /* a new case: its slot (the oldest's) is filled below */
        fresh = &gc_cache[gc_cache_next];
        gc_cache_next = (gc_cache_next + 1) % GC_CACHE;
        for (int i = 0; i < GC_MAX_IN; i++)
            free(fresh->numeric[i]);
        *fresh = (gc_cached){.reference = gc->reference, .key = key, .n_in = gc->n_in};
    }
    for (int i = 0; i < gc->n_in; i++) {
        if (gc->no_grad[i]) continue;
        int64_t n = in[i]->numel;
        double *analytic = calloc((size_t)n, sizeof(double)), *numeric = NULL;
        if (in[i]->grad)
            for (int64_t j = 0; j < n; j++)
                analytic[j] = in[i]->grad->data[j];
        if (cached)
            numeric = cached->numeric[i];
        else {
            numeric = malloc((size_t)n * sizeof(double));
            for (int64_t j = 0; j < n; j++) {
                double keep = din[i][j], h = 1e-6 * (1.0 + fabs(keep));
                din[i][j] = keep + h;
                double up = gc_ref_loss(gc, din, dweights, ref_out, out_n);
                din[i][j] = keep - h;
                double down = gc_ref_loss(gc, din, dweights, ref_out, out_n);
                din[i][j] = keep;
                numeric[j] = (up - down) / (2.0 * h);
            }
            fresh->n[i] = n, fresh->numeric[i] = numeric;
        }
        snprintf(what, sizeof what, "%s d/d(input %d)", name, i);
        assert_close_d(what, analytic, numeric, n, gc->grad_rtol, gc->grad_atol);
        free(analytic);
    }
    for (int i = 0; fresh && i < gc->n_in; i++)
        fresh->n[i] = in[i]->numel;
    dpt_tape_clear(ctx);
    for (int i = 0; i < gc->n_in; i++) {
        if (!in[i]->is_param) dpt_tensor_free(in[i]);
        free(din[i]);
    }
    if (gc->teardown) gc->teardown(gc->user);
    dpt_tensor_free(weights);
    free(dweights);
    free(ref_out);
    free(got);
    dpt_ctx_free(ctx);
}

/* ---------------------------------------------------------------- scratch folders */

/* mkdtemp a folder /tmp/<prefix>_XXXXXX into dir (size >= 64); 0 on success (cmocka setup). */
static inline int test_mkdtemp(char *dir, size_t size, const char *prefix)
{
    snprintf(dir, size, "/tmp/%s_XXXXXX", prefix);
    return mkdtemp(dir) ? 0 : -1;
}

static inline int test_rmrf(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd);
}

/* ---------------------------------------------------------------- running ./train */

/* Run a shell command; returns its exit status and fills out with stdout+stderr. */
static inline int run_capture(char *out, size_t size, const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    strncat(cmd, " 2>&1", sizeof cmd - strlen(cmd) - 1);
    FILE *p = popen(cmd, "r");
    if (!p) fail_msg("popen %s", cmd);
    size_t used = 0;
    out[0] = '\0';
    while (used + 1 < size) {
        size_t r = fread(out + used, 1, size - used - 1, p);
        if (r == 0) break;
        used += r;
    }
    out[used] = '\0';
    char sink[4096];
    while (fread(sink, 1, sizeof sink, p) > 0) {
    }
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Run fn() in a forked child with its stderr captured into out (fn is expected to end the
 * process); returns the exit status as run_capture does (128 + the signal if one ended it). */
static inline int run_in_child(void (*fn)(void), char *out, size_t size)
{
    char path[] = "/tmp/dpt_child_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) fail_msg("mkstemp %s", path);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) fail_msg("fork");
    if (pid == 0) {
        dup2(fd, 2);
        fn();
        _exit(42); /* fn returned */
    }
    int status = 0;
    waitpid(pid, &status, 0);
    ssize_t got = pread(fd, out, size - 1, 0);
    out[got > 0 ? got : 0] = '\0';
    close(fd), unlink(path);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static inline void assert_contains(const char *haystack, const char *needle)
{
    if (!strstr(haystack, needle)) fail_msg("expected output to contain \"%s\"; got:\n%s", needle, haystack);
}

/* A refusal run in a child: fn ends the process with exit status want (128 + the signal that
 * ended it, run_in_child's convention) and stderr holding each of the needles (NULL: none). */
static inline void assert_child_ends(void (*fn)(void), int want, const char *needle, const char *also)
{
    char out[1 << 14];
    int rc = run_in_child(fn, out, sizeof out);
    if (rc != want) fail_msg("exit %d, expected %d; stderr:\n%s", rc, want, out);
    if (needle) assert_contains(out, needle);
    if (also) assert_contains(out, also);
}

/* The file at path opens and its first line (fgets: the newline kept) is exactly `want`. */
static inline void assert_first_line(const char *path, const char *want)
{
    char got[256] = "";
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(got, sizeof got, f));
    fclose(f);
    assert_string_equal(got, want);
}

#endif
