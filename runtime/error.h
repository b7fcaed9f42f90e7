/* error.h: user-facing error messages (dpt_error) and the fatal path for impossible states. */
#ifndef DPT_ERROR_H
#define DPT_ERROR_H

#include "dpt.h"

#ifdef __cplusplus
#define DPT_NORETURN [[noreturn]]
#else
#define DPT_NORETURN _Noreturn
#endif

/* Print file:line and the message, then end the process (the job, under MPI). */
DPT_NORETURN void dpt_fatal_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define dpt_fatal(...) dpt_fatal_at(__FILE__, __LINE__, __VA_ARGS__)

/* A user-facing error that must end the whole job (a failing rank, a timeout, NaN): print
 * "error: ..." without a source location and stop every rank (exit(1) when alone). */
DPT_NORETURN void dpt_abort_job(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A library call that failed (CUDA, cuBLAS, cuDNN, NCCL: runtime/cuda_check.h): print
 * "error: file:line: ..." and end the job like dpt_abort_job (exit status 1, no core dump;
 * the failure is the machine's or the library's, not an invariant of ours). */
DPT_NORETURN void dpt_library_failed_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A violated internal invariant (a bug in dptrain or in the caller's use of the API). */
#define DPT_ASSERT(cond, ...)                                                                                \
    do {                                                                                                     \
        if (!(cond)) dpt_fatal_at(__FILE__, __LINE__, "assertion '" #cond "' failed: " __VA_ARGS__);         \
    } while (0)

/* Control bytes other than newline and tab replaced by '?', in place (dpt_errorf does it to
 * every message; names and values in output are the user's). */
void dpt_printable(char *s);

/* Levenshtein distance of two names, case ignored (99 past 63 characters): for "did you mean". */
int dpt_edit_distance(const char *a, const char *b);

/* A formatted string in memory of its own size (free it); never cut to a buffer. */
char *dpt_strf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A file this process has read, that no file it writes may replace or truncate
 * (atomic_file.c: dpt_atomic_file_open and dpt_stream_file_open refuse it, naming `what`, a
 * literal such as "the config file"; the same file under another path or name counts). checkpoint:
 * a checkpoint the run loaded, which a newer checkpoint of the run may replace
 * (dpt_atomic_checkpoint_open: best.dpt after --resume best.dpt); nothing else may. */
void dpt_input_note(const char *path, const char *what, bool checkpoint);
bool dpt_atomic_checkpoint_open(dpt_atomic_file *a, const char *out, dpt_error *err);

/* Called with the message of dpt_abort_job, dpt_library_failed_at or dpt_fatal, after it is
 * printed and before the process ends (./train --junit writes its report there). */
void dpt_set_last_words_hook(void (*fn)(const char *message));

/* Installed by the world layer so that a fatal error on one rank stops every rank. */
typedef void (*dpt_abort_fn)(int code);
void dpt_set_abort_handler(dpt_abort_fn fn);

#endif
