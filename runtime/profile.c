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
    int64_t calls;
    double fwd_s, bwd_s;
} entry;

struct dpt_profile {
    entry *e;
    int n, cap;
    double last; /* the previous record (or mark) */
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
    free(p->e);
    free(p);
}

static entry *find(dpt_profile *p, const char *op)
{
    for (int i = 0; i < p->n; i++)
        if (p->e[i].op == op || !strcmp(p->e[i].op, op)) return &p->e[i];
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 32;
        p->e = realloc(p->e, (size_t)p->cap * sizeof *p->e);
        if (!p->e) dpt_fatal("out of host memory");
    }
    p->e[p->n] = (entry){.op = op};
    return &p->e[p->n++];
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

void dpt_profile_forward(dpt_ctx *ctx, const char *op)
{
    dpt_profile *p = ctx->profile;
    if (!p) return;
    double t = now(ctx);
    entry *e = find(p, op);
    e->calls++;
    e->fwd_s += t - p->last;
    p->last = t;
}

void dpt_profile_backward(dpt_ctx *ctx, const char *op, double seconds)
{
    if (ctx->profile) find(ctx->profile, op)->bwd_s += seconds;
}

static int by_total(const void *a, const void *b)
{
    double x = ((const entry *)a)->fwd_s + ((const entry *)a)->bwd_s, y = ((const entry *)b)->fwd_s + ((const entry *)b)->bwd_s;
    return (x < y) - (x > y);
}

void dpt_profile_print(const dpt_profile *p, FILE *out, int rows, double step_s, int64_t steps)
{
    if (!p || !p->n || steps <= 0) return;
    entry *e = malloc((size_t)p->n * sizeof *e);
    if (!e) dpt_fatal("out of host memory");
    memcpy(e, p->e, (size_t)p->n * sizeof *e);
    qsort(e, (size_t)p->n, sizeof *e, by_total);
    double ops = 0;
    for (int i = 0; i < p->n; i++)
        ops += e[i].fwd_s + e[i].bwd_s;
    double whole = step_s > 0 ? step_s : ops;
    fprintf(out, "profile | %lld steps | ops %.1f ms a step of %.1f ms (the rest: data, optimizer, communication, "
                 "logging)\n",
            (long long)steps, 1e3 * ops / (double)steps, 1e3 * whole / (double)steps);
    fprintf(out, "%-16s %10s %14s %14s %14s %7s\n", "op", "calls/step", "forward ms", "backward ms", "total ms",
            "share");
    for (int i = 0; i < p->n && i < rows; i++)
        fprintf(out, "%-16s %10.1f %14.3f %14.3f %14.3f %6.1f%%\n", e[i].op, (double)e[i].calls / (double)steps,
                1e3 * e[i].fwd_s / (double)steps, 1e3 * e[i].bwd_s / (double)steps,
                1e3 * (e[i].fwd_s + e[i].bwd_s) / (double)steps, 100.0 * (e[i].fwd_s + e[i].bwd_s) / whole);
    if (p->n > rows) fprintf(out, "(%d more op kinds)\n", p->n - rows);
    free(e);
}
