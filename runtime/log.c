/* log.c: timing and the JSONL metrics writer (flushed per line so a crashed run keeps its log). */
#include "log.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "error.h"

double dpt_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double dpt_median(double *v, int n)
{
    if (n <= 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void dpt_sleep_ms(double ms)
{
    if (ms <= 0) return;
    struct timespec ts = {(time_t)(ms / 1e3), 0};
    ts.tv_nsec = (long)((ms - 1e3 * (double)ts.tv_sec) * 1e6);
    while (nanosleep(&ts, &ts) != 0) {
    }
}

struct dpt_metrics {
    FILE *file; /* NULL: discard */
};

dpt_metrics *dpt_metrics_open(const char *path, dpt_error *err)
{
    dpt_metrics *m = calloc(1, sizeof *m);
    if (!m) dpt_fatal("out of host memory for a metrics writer");
    if (path && *path) {
        m->file = dpt_stream_file_open(path, "the metrics file", "[log] metrics", err);
        if (!m->file) {
            free(m);
            return NULL;
        }
    }
    return m;
}

void dpt_metrics_write(dpt_metrics *m, const char *fmt, ...)
{
    if (!m || !m->file) return;
    va_list ap;
    va_start(ap, fmt);
    fputc('{', m->file);
    vfprintf(m->file, fmt, ap);
    fputs("}\n", m->file);
    fflush(m->file);
    va_end(ap);
}

void dpt_metrics_close(dpt_metrics *m)
{
    if (!m) return;
    if (m->file) fclose(m->file);
    free(m);
}
