/* log.h: wall-clock timing (and the median of measured times) and the JSONL metrics file. */
#ifndef DPT_LOG_H
#define DPT_LOG_H

#include "dpt.h"

/* Monotonic seconds. */
double dpt_now_s(void);
/* Sleep; no-op for ms <= 0. */
void dpt_sleep_ms(double ms);
/* The median of v[0..n) (sorted in place), NAN for n = 0: the automatic plans' step times. */
double dpt_median(double *v, int n);

typedef struct dpt_metrics dpt_metrics;
/* Open (truncate) a JSONL file; an empty path gives a writer that discards. NULL on error. */
dpt_metrics *dpt_metrics_open(const char *path, dpt_error *err);
/* Write one JSON object; fmt holds the members without braces, e.g. "\"step\":%d". */
void dpt_metrics_write(dpt_metrics *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void dpt_metrics_close(dpt_metrics *m);

#endif
