/* error.c: formatting of user-facing errors and the fatal path. */
#include "error.h"

#include <stdarg.h>
#include <stdlib.h>

static dpt_abort_fn abort_handler; /* set once at start-up by world_init; read-only after */

bool dpt_errorf(dpt_error *err, const char *fmt, ...)
{
    if (!err) return false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return false;
}

void dpt_set_abort_handler(dpt_abort_fn fn)
{
    abort_handler = fn;
}

void dpt_fatal_at(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "dptrain: fatal: %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(stderr);
    if (abort_handler) abort_handler(1);
    abort();
}

void dpt_abort_job(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "error: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(stderr);
    if (abort_handler) abort_handler(1);
    exit(1);
}
