/* profile.c: per-op-kind forward and backward time (see profile.h). */
#include "profile.h"

#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "ctx.h"
#include "error.h"
#include "log.h"

typedef struct entry {
    const char *op; /* the op's static name */
    char layer[64]; /* the layers' table: the layer's name ("" in the op kinds' table) */
    int64_t calls;
    double fwd_s, bwd_s;
} entry;

typedef struct table {
    entry *e;
    int n, cap;
} table;

struct dpt_profile {
    table ops, layers;
    double last; /* the previous record (or mark) */
    dpt_timeline *timeline;
};

dpt_profile *dpt_profile_attach(dpt_ctx *ctx)
{
    dpt_profile *p = calloc(1, sizeof *p);
    if (!p) dpt_fatal("out of host memory");
    ctx->profile = p;
    return p;
}

void dpt_profile_free(dpt_profile *p)
{
    if (!p) return;
    free(p->ops.e);
    free(p->layers.e);
    free(p);
}

void dpt_profile_set_timeline(dpt_profile *p, dpt_timeline *tl)
{
    p->timeline = tl;
}

/* The entry of an op kind (layer NULL), or of a layer's op (a tied embedding's lookup and its
 * output GEMM are two). */
static entry *find(table *t, const char *op, const char *layer)
{
    for (int i = 0; i < t->n; i++)
        if ((t->e[i].op == op || !strcmp(t->e[i].op, op)) &&
            (!layer || !strncmp(t->e[i].layer, layer, sizeof t->e[i].layer - 1)))
            return &t->e[i];
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 32;
        t->e = realloc(t->e, (size_t)t->cap * sizeof *t->e);
        if (!t->e) dpt_fatal("out of host memory");
    }
    t->e[t->n] = (entry){.op = op};
    if (layer) snprintf(t->e[t->n].layer, sizeof t->e[t->n].layer, "%s", layer);
    return &t->e[t->n++];
}

/* The timeline span of one op: "layer op" ("layer op backward"), or the op alone; a name
 * of the model's own is kept to JSON-safe characters. */
static void span(dpt_profile *p, const char *op, const char *layer, bool backward, double t0, double t1)
{
    if (!p->timeline) return;
    char name[160];
    snprintf(name, sizeof name, "%s%s%s%s", layer ? layer : "", layer ? " " : "", op, backward ? " backward" : "");
    for (char *c = name; *c; c++)
        if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20) *c = '?';
    dpt_timeline_span(p->timeline, name, 0, t0, t1);
}

static double now(dpt_ctx *ctx)
{
    if (ctx->be->dev->synchronize) ctx->be->dev->synchronize(ctx); /* a device's kernels, not their launches */
    return dpt_now_s();
}

void dpt_profile_mark(dpt_ctx *ctx)
{
    if (ctx->profile) ctx->profile->last = now(ctx);
}

void dpt_profile_forward(dpt_ctx *ctx, const char *op, const char *layer)
{
    dpt_profile *p = ctx->profile;
    if (!p) return;
    double t = now(ctx);
    entry *e = find(&p->ops, op, NULL);
    e->calls++;
    e->fwd_s += t - p->last;
    if (layer) {
        entry *l = find(&p->layers, op, layer);
        l->calls++;
        l->fwd_s += t - p->last;
    }
    span(p, op, layer, false, p->last, t);
    p->last = t;
}

void dpt_profile_backward(dpt_ctx *ctx, const char *op, const char *layer, double t0, double t1)
{
    dpt_profile *p = ctx->profile;
    if (!p) return;
    find(&p->ops, op, NULL)->bwd_s += t1 - t0;
    if (layer) find(&p->layers, op, layer)->bwd_s += t1 - t0;
    span(p, op, layer, true, t0, t1);
}

static int by_total(const void *a, const void *b)
{
    double x = ((const entry *)a)->fwd_s + ((const entry *)a)->bwd_s, y = ((const entry *)b)->fwd_s + ((const entry *)b)->bwd_s;
    return (x < y) - (x > y);
}

/* A table's entries, largest total first (a copy: free it). */
static entry *sorted(const table *t)
{
    entry *e = malloc((size_t)t->n * sizeof *e + 1);
    if (!e) dpt_fatal("out of host memory");
    memcpy(e, t->e, (size_t)t->n * sizeof *e);
    qsort(e, (size_t)t->n, sizeof *e, by_total);
    return e;
}

void dpt_profile_print(const dpt_profile *p, FILE *out, int rows, double step_s, int64_t steps)
{
    if (!p || !p->ops.n || steps <= 0) return;
    entry *e = sorted(&p->ops);
    double ops = 0;
    for (int i = 0; i < p->ops.n; i++)
        ops += e[i].fwd_s + e[i].bwd_s;
    double whole = step_s > 0 ? step_s : ops;
    fprintf(out, "profile | %lld steps | ops %.1f ms a step of %.1f ms (the rest: data, optimizer, communication, "
                 "logging)\n",
            (long long)steps, 1e3 * ops / (double)steps, 1e3 * whole / (double)steps);
    fprintf(out, "%-16s %10s %14s %14s %14s %7s\n", "op", "calls/step", "forward ms", "backward ms", "total ms",
            "share");
    for (int i = 0; i < p->ops.n && i < rows; i++)
        fprintf(out, "%-16s %10.1f %14.3f %14.3f %14.3f %6.1f%%\n", e[i].op, (double)e[i].calls / (double)steps,
                1e3 * e[i].fwd_s / (double)steps, 1e3 * e[i].bwd_s / (double)steps,
                1e3 * (e[i].fwd_s + e[i].bwd_s) / (double)steps, 100.0 * (e[i].fwd_s + e[i].bwd_s) / whole);
    if (p->ops.n > rows) fprintf(out, "(%d more op kinds)\n", p->ops.n - rows);
    free(e);
    if (!p->layers.n) return;
    /* the layers: the ops that take a layer's parameters (its GEMM or convolution, its norm), by
     * the parameters' name; ops without parameters (activations, pooling, additions) are not in it */
    e = sorted(&p->layers);
    double in_layers = 0;
    for (int i = 0; i < p->layers.n; i++)
        in_layers += e[i].fwd_s + e[i].bwd_s;
    fprintf(out, "layers | %d with parameters: %.1f ms a step; ops without parameters %.1f ms\n", p->layers.n,
            1e3 * in_layers / (double)steps, 1e3 * (ops - in_layers) / (double)steps);
    fprintf(out, "%-24s %-16s %10s %12s %12s %12s %7s\n", "layer", "op", "calls/step", "forward ms", "backward ms",
            "total ms", "share");
    for (int i = 0; i < p->layers.n && i < rows; i++)
        fprintf(out, "%-24s %-16s %10.1f %12.3f %12.3f %12.3f %6.1f%%\n", e[i].layer, e[i].op,
                (double)e[i].calls / (double)steps, 1e3 * e[i].fwd_s / (double)steps, 1e3 * e[i].bwd_s / (double)steps,
                1e3 * (e[i].fwd_s + e[i].bwd_s) / (double)steps, 100.0 * (e[i].fwd_s + e[i].bwd_s) / whole);
    if (p->layers.n > rows) fprintf(out, "(%d more layers)\n", p->layers.n - rows);
    free(e);
}
