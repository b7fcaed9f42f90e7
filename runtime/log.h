/* log.h: wall-clock timing and the JSONL metrics file. */
#ifndef DPT_LOG_H
#define DPT_LOG_H

#include "dpt.h"

/* Monotonic seconds. */
double dpt_now_s(void);
/* Sleep; no-op for ms <= 0. */
void dpt_sleep_ms(double ms);

typedef struct dpt_metrics dpt_metrics;
/* Open (truncate) a JSONL file; an empty path gives a writer that discards. NULL on error. */
dpt_metrics *dpt_metrics_open(const char *path, dpt_error *err);
/* Write one JSON object; fmt holds the members without braces, e.g. "\"step\":%d". */
void dpt_metrics_write(dpt_metrics *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void dpt_metrics_close(dpt_metrics *m);

#endif
