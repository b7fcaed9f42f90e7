/* error.c: formatting of user-facing errors and the fatal path. */
#include "error.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static dpt_abort_fn abort_handler; /* set once at start-up by world_init; read-only after */

/* The first thread to end the process does it; any other (a second DataParallel replica
 * failing at the same moment) waits for it instead of printing a second message or running
 * exit handlers concurrently, which crashed in __cxa_finalize. */
static void (*last_words_hook)(const char *message);
static atomic_flag ending = ATOMIC_FLAG_INIT;

static void claim_the_end(void)
{
    if (atomic_flag_test_and_set(&ending))
        for (;;)
            pause();
}

/* Flush every stream (metrics, timeline, stdout) and leave without running exit handlers
 * while other threads still compute. */
static _Noreturn void end_process(int code)
{
    fflush(NULL);
    if (abort_handler) abort_handler(code);
    _exit(code);
}

void dpt_printable(char *s)
{
    /* a name or value with control bytes (ESC sequences, a carriage return that overwrites the
     * line, a bell) reaches the terminal as '?': messages name files and values users chose */
    for (; *s; s++)
        if (((unsigned char)*s < 0x20 && *s != '\n' && *s != '\t') || *s == 0x7f) *s = '?';
}

bool dpt_errorf(dpt_error *err, const char *fmt, ...)
{
    if (!err) return false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    dpt_printable(err->msg);
    return false;
}

bool dpt_error_prefix(dpt_error *err, const char *fmt, ...)
{
    if (!err) return false;
    char said[sizeof err->msg];
    snprintf(said, sizeof said, "%s", err->msg);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof err->msg) snprintf(err->msg + n, sizeof err->msg - (size_t)n, "%s", said);
    dpt_printable(err->msg);
    return false;
}

void dpt_set_last_words_hook(void (*fn)(const char *message))
{
    last_words_hook = fn;
}

void dpt_set_abort_handler(dpt_abort_fn fn)
{
    abort_handler = fn;
}

/* The one way a process ends with a message: claim the end (a second failing thread waits),
 * print "<head>[file:line: ]<message>" on stderr. */
static void print_last_words(const char *head, const char *file, int line, const char *fmt, va_list ap)
{
    claim_the_end();
    /* one write: ranks sharing a terminal or a log otherwise interleave their pieces
     * ("error: error: rank 0 ...") */
    char buf[8192];
    size_t n = (size_t)snprintf(buf, sizeof buf, "%s", head);
    if (file && n < sizeof buf) n += (size_t)snprintf(buf + n, sizeof buf - n, "%s:%d: ", file, line);
    if (n < sizeof buf) n += (size_t)vsnprintf(buf + n, sizeof buf - n, fmt, ap);
    if (n >= sizeof buf - 1) n = sizeof buf - 2;
    buf[n] = '\0';
    dpt_printable(buf);
    buf[n++] = '\n';
    fflush(stderr);
    if (write(2, buf, n) < 0) {}
    if (last_words_hook) {
        buf[n - 1] = '\0';
        last_words_hook(buf);
    }
}

void dpt_fatal_at(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    print_last_words("dptrain: fatal: ", file, line, fmt, ap);
    va_end(ap);
    fflush(NULL);
    if (abort_handler) abort_handler(1);
    abort();
}

void dpt_library_failed_at(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    print_last_words("error: ", file, line, fmt, ap);
    va_end(ap);
    end_process(1);
}

void dpt_abort_job(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    print_last_words("error: ", NULL, 0, fmt, ap);
    va_end(ap);
    end_process(1);
}

int dpt_edit_distance(const char *a, const char *b)
{
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 63 || lb > 63) return 99;
    int d[64][64];
    for (int i = 0; i <= la; i++)
        d[i][0] = i;
    for (int j = 0; j <= lb; j++)
        d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int sub = d[i - 1][j - 1] + (tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]));
            int del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
            d[i][j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
    return d[la][lb];
}
